#!/usr/bin/python3
# bench_batch.py: what batching pays, per image, on ResNet-18 and
# MobileNet-V2: the latency of one image at batch 8 (a run's median over 8)
# against batch 1, for mlrun (the -O2 graph) and ONNX Runtime
# (ORT_ENABLE_ALL), 2 threads each, in interleaved rounds (per round, model
# and batch: mlrun's median of REPEAT runs, then ORT's), the median of the
# round medians, and the load average before and after. Issue 18's target:
# mlrun's batch-8 time per image <= 0.5x its batch-1 latency. The batch-8
# models are export.py's with the batch dim of the input and output set to
# 8 (both networks end in Flatten, which takes any batch); image 0 of the
# batch-8 input is the batch-1 input, and mlrun's output for it is checked
# against PyTorch's. Called by tests/bench/run.sh (`make bench`); prints a
# table, writes WORK/bench_batch.json.
# Usage: bench_batch.py --bin DIR --work DIR --models DIR [--ort-python PY] [--repeat N]
#                       [--warmup K] [--rounds R] [--batch B]
#        bench_batch.py ort-serve   (in the venv: times ONNX models on request)
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["resnet18", "mobilenet_v2"]
THREADS = 2


def ort_serve():
    """
    Time ONNX models in ONNX Runtime (2 threads, sequential, ORT_ENABLE_ALL)
    on request: each stdin line is JSON, {"load": KEY, "model": PATH,
    "input": NPY} or {"run": KEY, "repeat": N, "warmup": K}; each answer is
    one JSON line ({"median_ms": ...} or {"error": ...}). One process keeps
    the sessions, so rounds interleave with mlrun's without start-up costs.
    """
    import numpy as np
    import onnxruntime as ort
    sessions = {}
    print(json.dumps({"version": ort.__version__}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if "load" in req:
                so = ort.SessionOptions()
                so.intra_op_num_threads = THREADS
                so.inter_op_num_threads = 1
                so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                s = ort.InferenceSession(req["model"], so, providers=["CPUExecutionProvider"])
                sessions[req["load"]] = (s, {s.get_inputs()[0].name: np.load(req["input"])})
                ans = {"ok": True}
            else:
                s, feed = sessions[req["run"]]
                for _ in range(req["warmup"]):
                    s.run(None, feed)
                lat = []
                for _ in range(req["repeat"]):
                    t0 = time.perf_counter()
                    s.run(None, feed)
                    lat.append((time.perf_counter() - t0) * 1e3)
                ans = {"median_ms": statistics.median(lat)}
        except Exception as e:  # noqa: BLE001 (reported to the caller, which goes on)
            ans = {"error": str(e)[-300:]}
        print(json.dumps(ans), flush=True)
    return 0


class Ort:
    """The bench's side of ort_serve: a process in the venv python."""

    def __init__(self, python):
        self.p = subprocess.Popen([python, os.path.abspath(__file__), "ort-serve"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if not line:
            raise OSError("%s exited before answering" % python)
        self.version = json.loads(line)["version"]

    def ask(self, req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("the ONNX Runtime process exited")
        ans = json.loads(line)
        if "error" in ans:
            raise RuntimeError(ans["error"])
        return ans

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            txt = f.read()
    except OSError:
        return "unknown CPU", ""
    name = next((ln.split(":", 1)[1].strip() for ln in txt.splitlines()
                 if ln.startswith("model name")), "unknown CPU")
    flags = next((ln.split(":", 1)[1].split() for ln in txt.splitlines()
                  if ln.startswith("flags")), [])
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
           if f in flags]
    return name, " ".join(isa)


def tool(binp, args):
    r = subprocess.run([os.path.join(binp, args[0])] + args[1:], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (args[0], r.returncode, r.stderr.strip()))
    return r.stdout


def mlrun_ms(binp, mlg, inp, repeat, warmup):
    out = tool(binp, ["mlrun", mlg, "-i", "input=" + inp, "--repeat", str(repeat),
                      "--warmup", str(warmup), "--json", "--threads", str(THREADS)])
    return json.loads(out)["latency_ms"]["median"]


def batched(src, dst, batch):
    """src (an ONNX model of batch 1) with the batch dim of its inputs and outputs set."""
    import onnx
    m = onnx.load(src)
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_value = batch
    del m.graph.value_info[:]
    onnx.save(m, dst)


def check_batch(binp, mlg, inp, want, work):
    """Whether mlrun's output for image 0 of the batch matches PyTorch's at batch 1."""
    import numpy as np
    odir = os.path.join(work, "batch-out")
    shutil.rmtree(odir, ignore_errors=True)
    tool(binp, ["mlrun", mlg, "-i", "input=" + inp, "-o", odir, "-q", "--threads",
                str(THREADS)])
    outs = sorted(glob.glob(os.path.join(odir, "*.npy")))
    if len(outs) != 1:
        return False
    got = np.load(outs[0])
    return bool(np.allclose(got[:1], np.load(want), rtol=1e-3, atol=1e-4))


def fmt(v, f="%.2f"):
    return f % v if v is not None else "-"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ort-serve":
        return ort_serve()
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--ort-python")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    import numpy as np
    work = os.path.join(a.work, "batch")
    os.makedirs(work, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "models", "export.py"), "-o",
                    a.models] + MODELS, check=True)
    cpu, isa = cpu_name()
    load0 = loadavg()
    report = {"threads": THREADS, "repeat": a.repeat, "warmup": a.warmup, "rounds": a.rounds,
              "batch": a.batch, "cpu": cpu, "isa": isa, "models": {}}
    ort = None
    if a.ort_python:
        try:
            ort = Ort(a.ort_python)
            report["ort_version"] = ort.version
        except (OSError, ValueError) as e:
            print("bench_batch: ONNX Runtime did not start: %s" % e, file=sys.stderr)
    runs = []	# (model, batch, mlg, input, ort key)
    for name in MODELS:
        mdir = os.path.join(a.models, name)
        res = {}
        report["models"][name] = res
        x1 = os.path.join(mdir, "input.npy")
        x = np.load(x1)
        xb = np.random.RandomState(0).standard_normal((a.batch,) + x.shape[1:]).astype(x.dtype)
        xb[0] = x[0]
        xbp = os.path.join(work, "%s.b%d.npy" % (name, a.batch))
        np.save(xbp, xb)
        onnx_b = os.path.join(work, "%s.b%d.onnx" % (name, a.batch))
        batched(os.path.join(mdir, "model.onnx"), onnx_b, a.batch)
        for b, onnx_path, inp in ((1, os.path.join(mdir, "model.onnx"), x1),
                                  (a.batch, onnx_b, xbp)):
            key = "%s/b%d" % (name, b)
            res[key] = {"mlrun": [], "ort": []}
            mlg = os.path.join(work, "%s.b%d.mlg" % (name, b))
            o2 = os.path.join(work, "%s.b%d.O2.mlg" % (name, b))
            try:
                tool(a.bin, ["mlconvert", onnx_path, "-o", mlg])
                tool(a.bin, ["mlopt", "-O2", mlg, "-o", o2])
                if b > 1 and not check_batch(a.bin, o2, inp, os.path.join(mdir, "output.npy"),
                                             work):
                    print("bench_batch: %s: image 0 of the batch differs from PyTorch's "
                          "output" % name, file=sys.stderr)
                    res[key]["mlrun_error"] = "wrong output at batch %d" % b
            except RuntimeError as e:
                res[key]["mlrun_error"] = str(e)
                print("bench_batch: %s: %s" % (key, e), file=sys.stderr)
                o2 = None
            if ort:
                try:
                    ort.ask({"load": key, "model": onnx_path, "input": inp})
                except RuntimeError as e:
                    res[key]["ort_error"] = str(e)
                    print("bench_batch: %s: ONNX Runtime failed: %s" % (key, e),
                          file=sys.stderr)
            runs.append((name, b, key, o2, inp))
    for _ in range(a.rounds):
        for name, b, key, o2, inp in runs:
            r = report["models"][name][key]
            if o2 is not None and "mlrun_error" not in r:
                try:
                    r["mlrun"].append(mlrun_ms(a.bin, o2, inp, a.repeat, a.warmup))
                except RuntimeError as e:
                    r["mlrun_error"] = str(e)
            if ort and "ort_error" not in r:
                try:
                    r["ort"].append(ort.ask({"run": key, "repeat": a.repeat,
                                             "warmup": a.warmup})["median_ms"])
                except RuntimeError as e:
                    r["ort_error"] = str(e)
    if ort:
        ort.close()
    load1 = loadavg()
    report["load"] = [load0, load1]

    print()
    print("CPU: %s (%s); load average %.2f before, %.2f after%s" % (
        cpu, isa or "no AVX2", load0, load1,
        " (high: rerun on a quieter machine)" if max(load0, load1) > 1.5 * THREADS else ""))
    print("per-image latency at batch %d against batch 1, %d threads, median of %d round "
          "medians (each %d runs after %d warm-up runs), mlrun -O2 interleaved with ORT%s" % (
              a.batch, THREADS, a.rounds, a.repeat, a.warmup,
              " %s (ORT_ENABLE_ALL)" % report.get("ort_version", "") if ort else ""))
    print("%-14s %16s %16s %14s %12s %12s" % ("model", "mlrun b1 ms/img",
                                             "mlrun b%d ms/img" % a.batch, "mlrun b%d/b1" % a.batch,
                                             "ORT b1", "ORT b%d" % a.batch))
    for name in MODELS:
        res = report["models"][name]
        per = {}
        for who in ("mlrun", "ort"):
            for b in (1, a.batch):
                v = res["%s/b%d" % (name, b)][who]
                per[who, b] = statistics.median(v) / b if v else None
        for who in ("mlrun", "ort"):
            res["%s_b1_ms" % who] = per[who, 1]
            res["%s_b%d_ms_per_image" % (who, a.batch)] = per[who, a.batch]
            res["%s_ratio" % who] = (per[who, a.batch] / per[who, 1]
                                     if per[who, 1] and per[who, a.batch] else None)
        print("%-14s %16s %16s %14s %12s %12s" % (
            name, fmt(per["mlrun", 1]), fmt(per["mlrun", a.batch]),
            fmt(res["mlrun_ratio"], "%.2fx"), fmt(per["ort", 1]), fmt(per["ort", a.batch])))
        if res["ort_ratio"]:
            print("%-14s ORT's batch-%d per image against its batch 1: %.2fx; mlrun/ORT at "
                  "batch %d: %s" % ("", a.batch, res["ort_ratio"], a.batch,
                                    fmt(per["mlrun", a.batch] / per["ort", a.batch]
                                        if per["mlrun", a.batch] else None, "%.2fx")))
    print("(issue 18's target: mlrun's batch-%d time per image <= 0.50x its batch-1 latency)"
          % a.batch)
    if not ort:
        print("(ONNX Runtime is not installed: its columns are empty)")
    with open(os.path.join(a.work, "bench_batch.json"), "w") as f:
        json.dump(report, f, indent=1)
    print("report: %s" % os.path.join(a.work, "bench_batch.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
