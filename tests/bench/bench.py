#!/usr/bin/python3
# bench.py: batch-1 latency of mlrun against PyTorch and ONNX Runtime on the
# same models and inputs, with 2 threads each; the start-up cost of mlrun on
# a small MLP; the peak memory of mlrun on ResNet-18. Called by
# tests/bench/run.sh (`make bench`); prints tables, writes B/bench.json.
# Usage: bench.py --bin DIR --work DIR [--ort-python PY] [--repeat N] [--warmup K]
#        bench.py ort MODEL.onnx INPUT.npy REPEAT WARMUP   (the ORT timing, in the venv)
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["resnet18", "mobilenet_v2", "transformer"]
THREADS = 2


def ort_main(argv):
    """Time model.onnx in ONNX Runtime with 2 threads; print the median in ms."""
    import numpy as np
    import onnxruntime as ort
    path, inp, repeat, warmup = argv[0], argv[1], int(argv[2]), int(argv[3])
    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = {s.get_inputs()[0].name: np.load(inp)}
    for _ in range(warmup):
        s.run(None, feed)
    lat = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        s.run(None, feed)
        lat.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"median_ms": statistics.median(lat), "version": ort.__version__}))
    return 0


def torch_ms(name, mdir, repeat, warmup):
    """The median latency of the PyTorch model that export.py exported."""
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
    import export
    torch.set_num_threads(THREADS)
    torch.manual_seed(export.SEED)
    model, shape = export.MODELS[name][0]()
    export.calibrate(model, shape)
    model.eval()
    x = torch.from_numpy(np.load(os.path.join(mdir, "input.npy")))
    want = np.load(os.path.join(mdir, "output.npy"))
    with torch.no_grad():
        got = model(x).numpy()
        if not np.allclose(got, want, rtol=1e-3, atol=1e-4):
            print("bench: %s: the PyTorch model differs from the exported one" % name,
                  file=sys.stderr)
        for _ in range(warmup):
            model(x)
        lat = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            model(x)
            lat.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(lat)


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


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ort":
        return ort_main(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--ort-python")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "models", "export.py"), "-o",
                    a.models] + MODELS, check=True)
    report = {"threads": THREADS, "repeat": a.repeat, "warmup": a.warmup, "models": {}}
    rows = []
    for name in MODELS:
        mdir = os.path.join(a.models, name)
        onnx_path = os.path.join(mdir, "model.onnx")
        inp = os.path.join(mdir, "input.npy")
        mlg = os.path.join(a.work, name + ".mlg")
        res = {"mlrun_ms": None, "torch_ms": None, "ort_ms": None}
        try:
            convert(a.bin, onnx_path, mlg)
            res["mlrun_ms"] = mlrun_ms(a.bin, mlg, inp, a.repeat, a.warmup)
        except RuntimeError as e:
            res["mlrun_error"] = str(e)
            print("bench: %s: %s" % (name, e), file=sys.stderr)
        res["torch_ms"] = torch_ms(name, mdir, a.repeat, a.warmup)
        if a.ort_python:
            r = subprocess.run([a.ort_python, os.path.abspath(__file__), "ort", onnx_path, inp,
                                str(a.repeat), str(a.warmup)], capture_output=True, text=True)
            if r.returncode == 0:
                o = json.loads(r.stdout.strip().splitlines()[-1])
                res["ort_ms"] = o["median_ms"]
                report["ort_version"] = o["version"]
            else:
                print("bench: %s: ONNX Runtime failed: %s" % (name, r.stderr.strip()[-300:]),
                      file=sys.stderr)
        report["models"][name] = res
        rows.append((name, res))

    print()
    print("batch-1 median latency, %d threads, %d runs after %d warm-up runs" % (
        THREADS, a.repeat, a.warmup))
    hdr = ("model", "mlrun ms", "PyTorch ms", "ORT ms", "mlrun/PyTorch", "mlrun/ORT")
    print("%-14s %10s %11s %9s %14s %10s" % hdr)
    for name, r in rows:
        print("%-14s %10s %11s %9s %14s %10s" % (
            name, fmt_ms(r["mlrun_ms"]), fmt_ms(r["torch_ms"]), fmt_ms(r["ort_ms"]),
            fmt_ratio(r["mlrun_ms"], r["torch_ms"]), fmt_ratio(r["mlrun_ms"], r["ort_ms"])))
    if not a.ort_python:
        print("(ONNX Runtime is not installed: its column is empty)")

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
    with open(os.path.join(a.work, "bench.json"), "w") as f:
        json.dump(report, f, indent=1)
    print("report: %s" % os.path.join(a.work, "bench.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
