#!/usr/bin/python3
# bench.py: batch-1 latency of mlrun (the -O2 graph) against ONNX Runtime
# (ORT_ENABLE_ALL) on the 11-model set of issue 18, with 2 threads each, in
# interleaved rounds (per round and model: mlrun's median of REPEAT runs, then
# ORT's), the median of the round medians, the geomean of the ratios and the
# load average before and after; ResNet-18's fraction of the machine's fp32
# FMA peak (measured by tests/bench/fmapeak.c); the start-up cost of mlrun on
# a small MLP; the peak memory of mlrun on ResNet-18. PyTorch (Debian's, with
# generic BLAS) is not a speed peer and is not timed. Called by
# tests/bench/run.sh (`make bench`); prints tables, writes B/bench.json.
# Usage: bench.py --bin DIR --work DIR --models DIR [--ort-python PY] [--repeat N]
#                 [--warmup K] [--rounds R] [--only NAME,...]
#        bench.py ort-serve   (in the venv: times ONNX models on request, one JSON per line)
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_1", "shufflenet_v2", "efficientnet_b0",
          "densenet121", "convnext_tiny", "transformer", "gru", "mlp", "lenet"]
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
        self.version = json.loads(self.p.stdout.readline())["version"]

    def ask(self, req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        ans = json.loads(self.p.stdout.readline())
        if "error" in ans:
            raise RuntimeError(ans["error"])
        return ans

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def fma_peak(work, threads):
    """The fp32 FMA peak of `threads` threads in GFLOP/s (fmapeak.c), or None."""
    exe = os.path.join(work, "fmapeak")
    src = os.path.join(HERE, "fmapeak.c")
    r = subprocess.run(["cc", "-O2", "-march=native", "-pthread", src, "-o", exe],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("bench: cannot build fmapeak: %s" % r.stderr.strip()[-200:], file=sys.stderr)
        return None
    best = None
    for _ in range(3):
        r = subprocess.run([exe, str(threads), "0.5"], capture_output=True, text=True)
        if r.returncode == 0:
            v = float(r.stdout.split()[0])
            best = v if best is None else max(best, v)
    return best


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
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16",
                       "amx_bf16", "amx_int8") if f in flags]
    return name, " ".join(isa)


def mlrun_ms(binp, mlg, inp, repeat, warmup):
    r = subprocess.run([os.path.join(binp, "mlrun"), mlg, "-i", "input=" + inp, "--repeat",
                        str(repeat), "--warmup", str(warmup), "--json", "--threads",
                        str(THREADS)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("mlrun exited %d: %s" % (r.returncode, r.stderr.strip()))
    return json.loads(r.stdout)["latency_ms"]["median"]


def convert(binp, src, dst):
    r = subprocess.run([os.path.join(binp, "mlconvert"), src, "-o", dst], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("mlconvert exited %d: %s" % (r.returncode, r.stderr.strip()))


def peak_rss_kib(cmd, work):
    """
    Run cmd and return its peak resident set size in KiB. Linux keeps the
    high-water mark across exec, so a child forked from this process (which
    has PyTorch loaded) would report this process's size: the count comes
    from /usr/bin/time, or else from a fresh small python.
    """
    out = os.path.join(work, "rss.txt")
    if os.access("/usr/bin/time", os.X_OK):
        wrap = ["/usr/bin/time", "-f", "%M", "-o", out]
    else:
        wrap = ["/usr/bin/python3", "-c",
                "import resource, subprocess, sys\n"
                "r = subprocess.run(sys.argv[2:]).returncode\n"
                "open(sys.argv[1], 'w').write('%d\\n' % "
                "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
                "sys.exit(r)", out]
    r = subprocess.run(wrap + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (cmd[0], r.returncode, r.stderr.strip()))
    with open(out) as f:
        return int(f.read().split()[-1])


def memory_model(onnx_path):
    """Weight bytes, and the bytes of the largest activation, from ONNX shape inference."""
    import numpy as np
    import onnx
    from onnx.mapping import TENSOR_TYPE_TO_NP_TYPE as NP
    m = onnx.shape_inference.infer_shapes(onnx.load(onnx_path))
    g = m.graph
    weights = sum(int(np.prod(t.dims)) * NP[t.data_type].itemsize
                  for t in g.initializer)
    largest = 0
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        tt = vi.type.tensor_type
        dims = [d.dim_value for d in tt.shape.dim]
        if not dims or any(d <= 0 for d in dims):
            continue
        size = int(np.prod(dims)) * NP[tt.elem_type].itemsize
        largest = max(largest, size)
    return weights, largest


def fmt_ms(v):
    return "%.2f" % v if v is not None else "-"


def fmt_ratio(a, b):
    return "%.2fx" % (a / b) if a is not None and b else "-"


def mlrun_flops(binp, mlg, inp):
    """The FLOPs of one run of mlg, from mlprof's JSON report (the sum over nodes)."""
    r = subprocess.run([os.path.join(binp, "mlprof"), mlg, "-i", "input=" + inp, "--repeat",
                        "1", "--warmup", "0", "--json", "--threads", str(THREADS)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)["total"]["flops"]


def optimise(binp, mlg, dst):
    r = subprocess.run([os.path.join(binp, "mlopt"), "-O2", mlg, "-o", dst], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("mlopt exited %d: %s" % (r.returncode, r.stderr.strip()))


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ort-serve":
        return ort_serve()
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--ort-python")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", help="comma-separated model names (default: all 11)")
    a = ap.parse_args()
    names = a.only.split(",") if a.only else MODELS
    os.makedirs(a.work, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "models", "export.py"), "-o",
                    a.models] + names, check=True)
    cpu, isa = cpu_name()
    load0 = loadavg()
    report = {"threads": THREADS, "repeat": a.repeat, "warmup": a.warmup, "rounds": a.rounds,
              "cpu": cpu, "isa": isa, "models": {}}
    ort = None
    if a.ort_python:
        try:
            ort = Ort(a.ort_python)
            report["ort_version"] = ort.version
        except (OSError, ValueError) as e:
            print("bench: ONNX Runtime did not start: %s" % e, file=sys.stderr)
    ready = []
    for name in names:
        mdir = os.path.join(a.models, name)
        onnx_path = os.path.join(mdir, "model.onnx")
        inp = os.path.join(mdir, "input.npy")
        mlg = os.path.join(a.work, name + ".mlg")
        o2 = os.path.join(a.work, name + ".O2.mlg")
        res = {"mlrun": [], "ort": []}
        report["models"][name] = res
        try:
            convert(a.bin, onnx_path, mlg)
            optimise(a.bin, mlg, o2)
        except RuntimeError as e:
            res["mlrun_error"] = str(e)
            print("bench: %s: %s" % (name, e), file=sys.stderr)
            continue
        if ort:
            try:
                ort.ask({"load": name, "model": onnx_path, "input": inp})
            except RuntimeError as e:
                res["ort_error"] = str(e)
                print("bench: %s: ONNX Runtime failed: %s" % (name, e), file=sys.stderr)
        ready.append((name, o2, inp))
    for _ in range(a.rounds):
        for name, o2, inp in ready:
            res = report["models"][name]
            try:
                res["mlrun"].append(mlrun_ms(a.bin, o2, inp, a.repeat, a.warmup))
            except RuntimeError as e:
                res["mlrun_error"] = str(e)
            if ort and "ort_error" not in res:
                try:
                    res["ort"].append(ort.ask({"run": name, "repeat": a.repeat,
                                               "warmup": a.warmup})["median_ms"])
                except RuntimeError as e:
                    res["ort_error"] = str(e)
    if ort:
        ort.close()
    load1 = loadavg()
    rows = []
    for name in names:
        res = report["models"][name]
        res["mlrun_ms"] = statistics.median(res["mlrun"]) if res["mlrun"] else None
        res["ort_ms"] = statistics.median(res["ort"]) if res["ort"] else None
        res["ratio"] = (res["mlrun_ms"] / res["ort_ms"]
                        if res["mlrun_ms"] and res["ort_ms"] else None)
        rows.append((name, res))

    print()
    print("CPU: %s (%s); load average %.2f before, %.2f after%s" % (
        cpu, isa or "no AVX2", load0, load1,
        " (high: rerun on a quieter machine)" if max(load0, load1) > 1.5 * THREADS else ""))
    print("batch-1 latency of the -O2 graph, %d threads, median of %d round medians "
          "(each %d runs after %d warm-up runs), interleaved with ORT%s" % (
              THREADS, a.rounds, a.repeat, a.warmup,
              " %s (ORT_ENABLE_ALL)" % report.get("ort_version", "") if ort else ""))
    hdr = ("model", "mlrun -O2 ms", "ORT ms", "mlrun/ORT")
    print("%-16s %12s %9s %10s" % hdr)
    for name, r in rows:
        print("%-16s %12s %9s %10s" % (name, fmt_ms(r["mlrun_ms"]), fmt_ms(r["ort_ms"]),
                                       fmt_ratio(r["mlrun_ms"], r["ort_ms"])))
    ratios = [r["ratio"] for _, r in rows if r["ratio"]]
    g = geomean(ratios)
    report["geomean_ratio"] = g
    report["load"] = [load0, load1]
    if g:
        worst = max(rows, key=lambda x: x[1]["ratio"] or 0)
        print("geomean mlrun/ORT over %d models: %.2fx (issue 18's target <= 0.70x); "
              "slowest: %s %.2fx (target: none above 1.00x)" % (
                  len(ratios), g, worst[0], worst[1]["ratio"]))
    if not ort:
        print("(ONNX Runtime is not installed: its column is empty)")

    # ResNet-18's fraction of the machine's fp32 FMA peak.
    if "resnet18" in names and report["models"]["resnet18"].get("mlrun_ms"):
        r18 = os.path.join(a.models, "resnet18")
        flops = mlrun_flops(a.bin, os.path.join(a.work, "resnet18.O2.mlg"),
                            os.path.join(r18, "input.npy"))
        peak = fma_peak(a.work, THREADS)
        ms = report["models"]["resnet18"]["mlrun_ms"]
        if flops and peak:
            got = flops / (ms * 1e-3) * 1e-9
            report["resnet18_gflops"] = got
            report["fma_peak_gflops"] = peak
            print("ResNet-18 b1: %.2f GFLOP in %.2f ms = %.0f GFLOP/s, %.0f%% of the measured "
                  "fp32 FMA peak of %d threads (%.0f GFLOP/s)" % (
                      flops * 1e-9, ms, got, 100.0 * got / peak, THREADS, peak))

    # The whole-process time of a small model: start-up, load, one run, exit.
    mlp_dir = os.path.join(a.work, "mlp")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "mkmodel.py"), "mlp784",
                    "-o", mlp_dir], check=True)
    mlp = os.path.join(a.work, "mlp.mlg")
    convert(a.bin, os.path.join(mlp_dir, "mlp784.onnx"), mlp)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        r = subprocess.run([os.path.join(a.bin, "mlrun"), mlp, "--random", "-q"],
                           capture_output=True, text=True)
        times.append((time.perf_counter() - t0) * 1e3)
        if r.returncode != 0:
            print("bench: mlp: mlrun exited %d: %s" % (r.returncode, r.stderr.strip()),
                  file=sys.stderr)
            times = None
            break
    proc_ms = statistics.median(times) if times else None
    report["mlp_process_ms"] = proc_ms
    print()
    print("whole-process time of 'mlrun mlp.mlg --random' (784-256-10 MLP), median of 20: "
          "%s ms" % fmt_ms(proc_ms))

    # Peak memory on ResNet-18 against what the weights and activations need.
    if "resnet18" not in names:
        return finish(a, report)
    r18 = os.path.join(a.models, "resnet18")
    mlg = os.path.join(a.work, "resnet18.mlg")
    try:
        rss = peak_rss_kib([os.path.join(a.bin, "mlrun"), mlg, "-i",
                            "input=" + os.path.join(r18, "input.npy"), "--threads",
                            str(THREADS), "-q"], a.work) * 1024
    except (RuntimeError, OSError) as e:
        rss = None
        print("bench: resnet18 peak RSS: %s" % e, file=sys.stderr)
    weights, largest = memory_model(os.path.join(r18, "model.onnx"))
    budget = weights + 3 * largest
    report.update({"resnet18_peak_rss": rss, "resnet18_weight_bytes": weights,
                   "resnet18_largest_activation_bytes": largest,
                   "resnet18_budget_bytes": budget})
    mib = 1024.0 * 1024.0
    print("peak RSS of mlrun on ResNet-18: %s; weights %.1f MiB + 3 x largest activation "
          "%.1f MiB = %.1f MiB%s" % (
              "%.1f MiB" % (rss / mib) if rss else "-", weights / mib, largest / mib,
              budget / mib, " (ratio %.2f)" % (rss / budget) if rss else ""))
    return finish(a, report)


def finish(a, report):
    with open(os.path.join(a.work, "bench.json"), "w") as f:
        json.dump(report, f, indent=1)
    print("report: %s" % os.path.join(a.work, "bench.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
