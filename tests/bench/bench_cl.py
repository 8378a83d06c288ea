#!/usr/bin/python3
# bench_cl.py: the OpenCL runtime's numbers, measured in one run on this
# machine: batch-1 latency of mlrun --device cpu, cl and auto on ResNet-18,
# MobileNet-V2 and the transformer encoder, with auto's ratio to the faster
# of the other two (the target: at most 1.05); and the OpenCL set-up and
# program-loading time of a second start of mlrun --device cl on a small
# model (the target: under 50 ms beyond POCL's platform probe), from
# mlrun -v. The machine is shared and noisy: the three devices are measured
# in --rounds interleaved rounds (cpu, cl, auto, cpu, ...) and each
# device's latency is the median of its rounds' medians. The SGEMM numbers
# are bench_clgemm.py's. Called by tests/bench/run.sh; writes
# WORK/bench_cl.json.
# Usage: bench_cl.py --bin DIR --work DIR --models DIR [--repeat N] [--warmup K] [--rounds R]
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["resnet18", "mobilenet_v2", "transformer"]
THREADS = 2


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (cmd[0], r.returncode, r.stderr.strip()))
    return r


def has_opencl(binp):
    r = subprocess.run([os.path.join(binp, "mlrun"), "--devices", "--json"], capture_output=True,
                       text=True)
    return r.returncode == 0 and '"cl:0"' in r.stdout


def latency(binp, mlg, inp, dev, repeat, warmup, env):
    r = run([os.path.join(binp, "mlrun"), mlg, "-i", "input=" + inp, "--device", dev, "--repeat",
             str(repeat), "--warmup", str(warmup), "--json", "--threads", str(THREADS)], env)
    return json.loads(r.stdout)["latency_ms"]["median"]


def setup_times(binp, mlg, env):
    """mlrun -v's OpenCL line: probe, set-up, programs (ms), built and cached counts."""
    r = run([os.path.join(binp, "mlrun"), mlg, "--random", "--device", "cl", "-v", "-q"], env)
    r = run([os.path.join(binp, "mlrun"), mlg, "--random", "--device", "cl", "-v"], env)
    m = re.search(r"opencl: probe ([0-9.]+) ms, set-up ([0-9.]+) ms, programs ([0-9.]+) ms "
                  r"\((\d+) built, (\d+) from the cache\), session ([0-9.]+) ms", r.stderr)
    if m is None:
        raise RuntimeError("no OpenCL timing line in mlrun -v: " + r.stderr.strip())
    return {"probe_ms": float(m.group(1)), "setup_ms": float(m.group(2)),
            "programs_ms": float(m.group(3)), "built": int(m.group(4)),
            "cached": int(m.group(5)), "session_ms": float(m.group(6))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--ort-python")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if not has_opencl(a.bin):
        print("bench_cl: no OpenCL device; skipped")
        return 0
    env = dict(os.environ)
    env["ML_CL_CACHE"] = os.path.join(os.path.abspath(a.work), "cl-cache")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "models", "export.py"), "-o",
                    a.models] + MODELS, check=True, capture_output=True)
    report = {"threads": THREADS, "repeat": a.repeat, "warmup": a.warmup, "rounds": a.rounds,
              "models": {}}
    print("%-14s %10s %10s %10s %18s" % ("model", "cpu ms", "cl ms", "auto ms",
                                         "auto/min(cpu,cl)"))
    worst = 0
    for name in MODELS:
        mdir = os.path.join(a.models, name)
        mlg = os.path.join(a.work, name + ".mlg")
        run([os.path.join(a.bin, "mlconvert"), os.path.join(mdir, "model.onnx"), "-o", mlg])
        inp = os.path.join(mdir, "input.npy")
        # the first auto run measures the cost model (cached): not timed
        run([os.path.join(a.bin, "mlrun"), mlg, "-i", "input=" + inp, "--device", "auto", "-q"],
            env)
        res = {}
        # sub-millisecond models get more runs, so the medians are not noise
        rep = a.repeat * (20 if name == "transformer" else 1)
        rounds = {"cpu": [], "cl": [], "auto": []}
        for _ in range(max(1, a.rounds)):
            for dev in ("cpu", "cl", "auto"):
                rounds[dev].append(latency(a.bin, mlg, inp, dev, rep, a.warmup, env))
        for dev in rounds:
            res[dev] = statistics.median(rounds[dev])
            res[dev + "_rounds"] = rounds[dev]
        ratio = res["auto"] / min(res["cpu"], res["cl"])
        worst = max(worst, ratio)
        res["auto_ratio"] = ratio
        report["models"][name] = res
        print("%-14s %10.2f %10.2f %10.2f %17.3fx" % (name, res["cpu"], res["cl"], res["auto"],
                                                      ratio))
    print("auto is at most %.3fx the faster device (target <= 1.05)" % worst)
    # the second start of mlrun --device cl on a small model
    st = setup_times(a.bin, os.path.join(a.work, "transformer.mlg"), env)
    beyond = st["setup_ms"] + st["programs_ms"]
    report["second_start"] = st
    report["second_start"]["beyond_probe_ms"] = beyond
    print("second start of mlrun --device cl (transformer): probe %.1f ms (POCL), set-up %.1f "
          "ms, programs %.1f ms (%d built, %d cached): %.1f ms beyond the probe (target < 50)"
          % (st["probe_ms"], st["setup_ms"], st["programs_ms"], st["built"], st["cached"],
             beyond))
    with open(os.path.join(a.work, "bench_cl.json"), "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
