#!/usr/bin/python3
# bench_rnn.py: batch-1 latency of the recurrent models of the bench (the GRU
# and LSTM of tests/models/export.py: sequence 16, input 32, hidden 48, then
# a linear layer) in mlrun (the -O2 graph) against ONNX Runtime
# (ORT_ENABLE_ALL), 2 threads each, in interleaved rounds (per round and
# model: mlrun's median of REPEAT runs, then ORT's, then --base-bin's when
# given), the median of the round medians, the CPU and its ISA, and the load
# average before and after. Also the RNN node alone (mlprof's median), where
# the time of these models goes. --base-bin DIR times a second build (an
# older mlrun) in the same rounds, for before/after figures on a busy
# machine. Called by tests/bench/run.sh with the other bench_*.py.
# Usage: bench_rnn.py --bin DIR --work DIR --models DIR [--ort-python PY] [--repeat N]
#                     [--warmup K] [--rounds R] [--base-bin DIR]
#        bench_rnn.py ort-serve   (in the venv: times ONNX models on request)
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["gru", "lstm"]
THREADS = 2


def ort_serve():
    """
    Time ONNX models in ONNX Runtime (2 threads, sequential, ORT_ENABLE_ALL)
    on request, as bench.py's ort-serve: each stdin line is {"load": KEY,
    "model": PATH, "input": NPY} or {"run": KEY, "repeat": N, "warmup": K};
    each answer one JSON line ({"median_ms": ...} or {"error": ...}).
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
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
           if f in flags]
    return name, " ".join(isa)


def tool(binp, name, args):
    r = subprocess.run([os.path.join(binp, name)] + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (name, r.returncode, r.stderr.strip()[-300:]))
    return r.stdout


def mlrun_ms(binp, mlg, inp, repeat, warmup):
    out = tool(binp, "mlrun", [mlg, "-i", "input=" + inp, "--repeat", str(repeat), "--warmup",
                               str(warmup), "--json", "--threads", str(THREADS)])
    return json.loads(out)["latency_ms"]["median"]


def node_us(binp, mlg, inp, repeat, op):
    """mlprof's median time of the model's op node (GRU, LSTM), in microseconds."""
    out = tool(binp, "mlprof", [mlg, "-i", "input=" + inp, "--repeat", str(repeat), "--warmup",
                                "10", "--json", "--threads", str(THREADS)])
    for n in json.loads(out).get("nodes", []):
        if n.get("op") == op:
            return n["median_ms"] * 1e3
    return None


def fmt(v, f="%.1f"):
    return f % v if v is not None else "-"


def ratio(a, b):
    return "%.2fx" % (a / b) if a is not None and b else "-"


def med(xs):
    return statistics.median(xs) if xs else None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ort-serve":
        return ort_serve()
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--ort-python")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--base-bin", help="a second build's bin folder, timed in the same rounds")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "models", "export.py"), "-o",
                    a.models] + MODELS, check=True)
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
            print("bench_rnn: ONNX Runtime did not start: %s" % e, file=sys.stderr)
    ready = []
    for name in MODELS:
        mdir = os.path.join(a.models, name)
        onnx_path = os.path.join(mdir, "model.onnx")
        inp = os.path.join(mdir, "input.npy")
        mlg = os.path.join(a.work, "rnn-" + name + ".mlg")
        o2 = os.path.join(a.work, "rnn-" + name + ".O2.mlg")
        res = {"mlrun": [], "ort": [], "base": []}
        report["models"][name] = res
        try:
            tool(a.bin, "mlconvert", [onnx_path, "-o", mlg])
            tool(a.bin, "mlopt", ["-O2", mlg, "-o", o2])
        except RuntimeError as e:
            res["mlrun_error"] = str(e)
            print("bench_rnn: %s: %s" % (name, e), file=sys.stderr)
            continue
        if ort:
            try:
                ort.ask({"load": name, "model": onnx_path, "input": inp})
            except RuntimeError as e:
                res["ort_error"] = str(e)
                print("bench_rnn: %s: ONNX Runtime failed: %s" % (name, e), file=sys.stderr)
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
            if a.base_bin and "base_error" not in res:
                try:
                    res["base"].append(mlrun_ms(a.base_bin, o2, inp, a.repeat, a.warmup))
                except RuntimeError as e:
                    res["base_error"] = str(e)
    if ort:
        ort.close()
    for name, o2, inp in ready:
        try:
            report["models"][name]["node_us"] = node_us(a.bin, o2, inp, 10 * a.repeat,
                                                        name.upper())
        except (RuntimeError, ValueError, KeyError):
            pass
    load1 = loadavg()
    report["load"] = [load0, load1]

    print()
    print("CPU: %s (%s); load average %.2f before, %.2f after%s" % (
        cpu, isa or "no AVX2", load0, load1,
        " (high: rerun on a quieter machine)" if max(load0, load1) > 1.5 * THREADS else ""))
    print("batch-1 latency of the -O2 graph in us, %d threads, median of %d round medians "
          "(each %d runs after %d warm-up runs), interleaved%s" % (
              THREADS, a.rounds, a.repeat, a.warmup,
              " with ORT %s (ORT_ENABLE_ALL)" % report.get("ort_version", "") if ort else ""))
    hdr = ("model", "mlrun us", "node us", "ORT us", "mlrun/ORT")
    if a.base_bin:
        hdr += ("base us", "mlrun/base")
    print(("%-8s" + " %10s" * (len(hdr) - 1)) % hdr)
    for name in MODELS:
        r = report["models"][name]
        ms, ort_ms, base = med(r["mlrun"]), med(r["ort"]), med(r["base"])
        r["mlrun_ms"], r["ort_ms"], r["base_ms"] = ms, ort_ms, base
        r["ratio"] = ms / ort_ms if ms and ort_ms else None
        us = [v * 1e3 if v is not None else None for v in (ms, ort_ms, base)]
        row = (name, fmt(us[0]), fmt(r.get("node_us")), fmt(us[1]), ratio(ms, ort_ms))
        if a.base_bin:
            row += (fmt(us[2]), ratio(ms, base))
        print(("%-8s" + " %10s" * (len(row) - 1)) % row)
    print("(issue 18's target: mlrun/ORT <= 1.00x; node: mlprof's median of the GRU or "
          "LSTM node, %d runs)" % (10 * a.repeat))
    if not ort:
        print("(ONNX Runtime is not installed: its column is empty)")
    with open(os.path.join(a.work, "bench_rnn.json"), "w") as f:
        json.dump(report, f, indent=1)
    print("report: %s" % os.path.join(a.work, "bench_rnn.json"))
    return 0 if all("mlrun_error" not in report["models"][n] for n in MODELS) else 1


if __name__ == "__main__":
    sys.exit(main())
