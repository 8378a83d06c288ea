#!/usr/bin/python3
# bench_gpu.py: what issue 22 measures, in one run on whatever OpenCL
# device this machine has (POCL's CPU device here, a real GPU on a GPU
# machine: tools/gpu-check.sh runs it there):
#   - SGEMM of the library (mlcl_sgemm, the GEMM engine it chose) against
#     CLBlast on the same device, and our own kernels forced
#     (ML_CL_GEMM=own), from clgemm_bench; 4096^3 only on a GPU;
#   - batch-1 latency of the zoo models (-O2) on cpu, cl and auto, in
#     interleaved rounds, the median of round medians, auto's ratio to the
#     faster single device;
#   - the host's cost per device node: the transformer encoder's wall time
#     on cl without profiling, less its nodes' device time (mlprof), over
#     the number of device nodes;
#   - mltrain's MLP (784-256-128-10), batch 1024, samples/s on cl and on
#     the CPU and their losses, on synthetic data (no dataset needed).
# Each figure is printed with its target; the targets are a GPU's (on
# POCL, which shares the host's cores, they are context only).
# Called by tests/bench/run.sh (BENCH=gpu) and tools/gpu-check.sh; writes
# WORK/bench_gpu.json.
# Usage: bench_gpu.py --bin DIR --work DIR --models DIR [--rounds R] [--quick]
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_1", "efficientnet_b0", "transformer"]
# issue 22's targets on a GPU (ms, batch 1, -O2)
TARGET_MS = {"resnet18": 1.5, "mobilenet_v2": 1.0, "transformer": 0.3}
GEMM_LINE = re.compile(r"^gemm (\S+) (\d+)x(\d+)x(\d+) best=([\d.]+) median=([\d.]+)")


def run(cmd, env=None, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (os.path.basename(cmd[0]), r.returncode,
                                                 r.stderr.strip()[-2000:]))
    return r


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def devices(binp):
    r = run([os.path.join(binp, "mlrun"), "--devices", "--json"], check=False)
    if r.returncode != 0:
        return []
    try:
        return json.loads(r.stdout).get("devices", [])
    except ValueError:
        return []


def sgemm(binp, gpu, runs, env):
    """{impl: {size: best GFLOP/s}} for the library's engine, ours forced, CLBlast."""
    tool = os.path.join(binp, "clgemm_bench")
    sizes = ["1024", "4096"] if gpu else ["1024"]
    out = {}
    for label, extra in (("ml", {}), ("ml-own", {"ML_CL_GEMM": "own"})):
        e = dict(env)
        e.update(extra)
        xs = ["-x", "openblas"] if label == "ml" else ["-x", "clblast,openblas"]
        r = run([tool, "-r", str(runs)] + xs + sizes, e, check=False)
        if r.returncode != 0:
            print("sgemm: clgemm_bench failed (%d): %s" % (r.returncode, r.stderr.strip()[-300:]))
            continue
        for line in r.stdout.splitlines():
            m = GEMM_LINE.match(line)
            if m is None:
                continue
            impl = m.group(1)
            name = "clblast" if "clblast" in impl.lower() else label
            out.setdefault(name, {})[m.group(2)] = float(m.group(5))
    return out


def latency(binp, mlg, dev, repeat, warmup, threads, env):
    r = run([os.path.join(binp, "mlrun"), mlg, "--random", "--device", dev, "--repeat",
             str(repeat), "--warmup", str(warmup), "--json", "--threads", str(threads)], env)
    return json.loads(r.stdout)["latency_ms"]["median"]


def node_overhead(binp, mlg, wall_ms, threads, env):
    """(device nodes, their device time in ms, host cost per device node in us)."""
    r = run([os.path.join(binp, "mlprof"), mlg, "--random", "--device", "cl", "--json",
             "--repeat", "20", "--threads", str(threads)], env)
    rep = json.loads(r.stdout)
    dev_nodes = [n for n in rep["nodes"] if str(n.get("device", "")).startswith("cl")]
    busy = sum(n["median_ms"] for n in dev_nodes)
    cpu_busy = sum(n["median_ms"] for n in rep["nodes"] if n not in dev_nodes)
    if not dev_nodes:
        return 0, 0.0, float("nan")
    return len(dev_nodes), busy, max(0.0, wall_ms - busy - cpu_busy) * 1e3 / len(dev_nodes)


def train(binp, work, dev, threads, env):
    """mltrain's MLP at batch 1024 on synthetic data: (samples/s, final loss)."""
    import numpy as np
    data = os.path.join(work, "synth")
    if not os.path.exists(os.path.join(data, "x_train.npy")):
        os.makedirs(data, exist_ok=True)
        rng = np.random.default_rng(0)
        n = 32768
        y = rng.integers(0, 10, n)
        centres = rng.standard_normal((10, 784)).astype(np.float32)
        x = (centres[y] + rng.standard_normal((n, 784)).astype(np.float32)).astype(np.float32)
        np.save(os.path.join(data, "x_train.npy"), x.reshape(n, 1, 28, 28))
        np.save(os.path.join(data, "y_train.npy"), y.astype(np.int64))
    out = os.path.join(work, "mlp-%s.mlg" % dev.replace(":", ""))
    r = run([os.path.join(binp, "mltrain"), os.path.join(ROOT, "examples", "fashion-mlp.mlt"),
             "--data", data, "--batch", "1024", "--epochs", "3", "--lr", "0.05", "--momentum",
             "0.9", "--seed", "0", "--device", dev, "--threads", str(threads), "--json", "-q",
             "-o", out], env)
    rep = json.loads(r.stdout)
    return rep.get("train_samples_per_s", 0.0), rep.get("loss")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--ort-python")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and no training")
    a = ap.parse_args()
    binp = os.path.abspath(a.bin)
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    devs = devices(binp)
    cl = [d for d in devs if str(d.get("id", "")).startswith("cl")]
    if not cl:
        print("bench_gpu: no OpenCL device; skipped")
        return 0
    gpu = cl[0].get("type") == "gpu"
    env = dict(os.environ)
    env.setdefault("ML_CL_CACHE", os.path.join(work, "cl-cache"))
    rounds = 2 if a.quick else a.rounds
    rep = {"cpu": cpu_name(), "device": cl[0], "threads": a.threads, "rounds": rounds,
           "load_before": loadavg()}
    print("bench_gpu: CPU %s (%d threads), device cl:0 %s (%s, %s compute units); load %s"
          % (rep["cpu"], a.threads, cl[0].get("name"), cl[0].get("type"),
             cl[0].get("compute_units"), rep["load_before"]))

    # SGEMM against CLBlast on the same device
    g = sgemm(binp, gpu, 3 if a.quick else 7, env)
    rep["sgemm_gflops"] = g
    for size in sorted({s for v in g.values() for s in v}, key=int):
        ml, own, cb = (g.get(k, {}).get(size) for k in ("ml", "ml-own", "clblast"))
        print("sgemm %5s^3: library %s, own kernels %s, CLBlast %s GFLOP/s; library/CLBlast %s"
              " (target >= 1.0 at 4096 on a GPU)"
              % (size, "%.0f" % ml if ml else "-", "%.0f" % own if own else "-",
                 "%.0f" % cb if cb else "-", "%.2fx" % (ml / cb) if ml and cb else "-"))

    # the zoo on cpu, cl and auto
    run([sys.executable, os.path.join(ROOT, "tests", "models", "export.py"), "-o", a.models]
        + MODELS, env)
    rep["models"] = {}
    worst = 0.0
    print("%-16s %9s %9s %9s %10s %s" % ("model (-O2)", "cpu ms", "cl ms", "auto ms",
                                          "auto/best", "target (GPU)"))
    for name in MODELS:
        mlg = os.path.join(work, name + ".mlg")
        if not os.path.exists(mlg):
            run([os.path.join(binp, "mlconvert"), os.path.join(a.models, name, "model.onnx"),
                 "-o", mlg + ".O0"], env)
            run([os.path.join(binp, "mlopt"), "-O2", mlg + ".O0", "-o", mlg], env)
        # the first auto run calibrates and measures its plans (cached): not timed
        run([os.path.join(binp, "mlrun"), mlg, "--random", "--device", "auto", "-q",
             "--threads", str(a.threads)], env)
        rep_n = max(5, a.repeat // (1 if name == "transformer" else 4))
        res = {"cpu": [], "cl": [], "auto": []}
        for _ in range(rounds):
            for dev in res:
                res[dev].append(latency(binp, mlg, dev, rep_n, 3, a.threads, env))
        med = {d: statistics.median(v) for d, v in res.items()}
        ratio = med["auto"] / min(med["cpu"], med["cl"])
        worst = max(worst, ratio)
        t = TARGET_MS.get(name)
        rep["models"][name] = {"median_ms": med, "rounds_ms": res, "auto_ratio": ratio}
        print("%-16s %9.3f %9.3f %9.3f %9.3fx %s" % (name, med["cpu"], med["cl"], med["auto"],
                                                     ratio, "cl <= %.1f ms" % t if t else ""))
    print("auto is at most %.3fx the faster single device (target <= 1.05)" % worst)
    rep["auto_worst"] = worst

    # the host's cost per device node, on the encoder
    enc = os.path.join(work, "transformer.mlg")
    nn, busy, per = node_overhead(binp, enc, rep["models"]["transformer"]["median_ms"]["cl"],
                                  a.threads, env)
    rep["node_overhead"] = {"device_nodes": nn, "device_ms": busy, "us_per_node": per}
    print("encoder on cl: %d device nodes, %.3f ms on the device, host cost %.1f us per node"
          " (target <= 10 on a GPU)" % (nn, busy, per))

    if not a.quick:
        rep["train"] = {}
        for dev in ("cpu", "cl"):
            sps, loss = train(binp, work, dev, a.threads, env)
            rep["train"][dev] = {"samples_per_s": sps, "loss": loss}
        c, d = rep["train"]["cpu"], rep["train"]["cl"]
        print("mltrain MLP batch 1024: cpu %.0f, cl %.0f samples/s: cl/cpu %.2fx (target >= 5 on"
              " a GPU); loss cpu %s, cl %s" % (c["samples_per_s"], d["samples_per_s"],
                                              d["samples_per_s"] / max(c["samples_per_s"], 1e-9),
                                              c["loss"], d["loss"]))
    rep["load_after"] = loadavg()
    print("load average after: %s" % rep["load_after"])
    with open(os.path.join(work, "bench_gpu.json"), "w") as f:
        json.dump(rep, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
