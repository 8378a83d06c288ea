#!/usr/bin/python3
# bench_opt.py: what mlopt's passes buy. For each real model (exported by
# tests/models/export.py), the node counts at -O0 and -O2 and mlrun's batch-1
# latency of both graphs, measured in the same run with the runs of the two
# interleaved (so a busy machine slows both alike), each measurement the
# median of enough runs to last about 0.3 s; prints the ratios the
# issue asks for (-O2 at most 0.8x -O0 on ConvNeXt and the encoder, never
# above 1.0x) and writes WORK/bench_opt.json. Called by tests/bench/run.sh.
# Usage: bench_opt.py --bin DIR --work DIR --models DIR [--rounds N] [--repeat N]
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["resnet18", "mobilenet_v2", "convnext_tiny", "transformer"]
GOALS = {"convnext_tiny": 0.8, "transformer": 0.8}


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), p.stderr.strip()))
    return p.stdout


def latency(bindir, mlg, repeat, threads):
    out = run([os.path.join(bindir, "mlrun"), mlg, "--random", "--repeat", str(repeat),
               "--warmup", "2", "--threads", str(threads), "--json"])
    return float(json.loads(out)["latency_ms"]["median"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--ort-python")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests/models/export.py"), "-o",
                    a.models] + MODELS, stdout=subprocess.DEVNULL, check=True)
    rows, ok = [], True
    print("%-14s %6s %6s %7s %9s %9s %6s %s" % ("model", "nodes0", "nodes2", "fewer",
                                                 "O0 ms", "O2 ms", "ratio", "goal"))
    for name in MODELS:
        onnx = os.path.join(a.models, name, "model.onnx")
        g0 = os.path.join(a.work, name + ".O0.mlg")
        g2 = os.path.join(a.work, name + ".O2.mlg")
        run([os.path.join(a.bin, "mlconvert"), onnx, "-o", g0])
        rep = json.loads(run([os.path.join(a.bin, "mlopt"), "-O2", g0, "-o", g2, "--report",
                              "--json"]))
        # a model that runs in microseconds (the encoder) gets more runs per
        # measurement, so each lasts about 0.3 s and the process start is not
        # what is measured
        probe = latency(a.bin, g0, 3, a.threads)
        repeat = max(a.repeat, min(20000, int(300 / max(probe, 1e-3))))
        t0, t2 = [], []
        for _ in range(a.rounds):
            t0.append(latency(a.bin, g0, repeat, a.threads))
            t2.append(latency(a.bin, g2, repeat, a.threads))
        m0, m2 = statistics.median(t0), statistics.median(t2)
        ratio = m2 / m0
        goal = GOALS.get(name, 1.0)
        fewer = 1 - rep["nodes_after"] / rep["nodes_before"]
        met = ratio <= goal and (name not in GOALS or fewer >= 0.4)
        ok &= met
        print("%-14s %6d %6d %6.1f%% %9.3f %9.3f %5.2fx <=%.1fx %s" % (
            name, rep["nodes_before"], rep["nodes_after"], 100 * fewer, m0, m2, ratio, goal,
            "ok" if met else "MISSED"))
        rows.append({"model": name, "nodes_O0": rep["nodes_before"],
                     "nodes_O2": rep["nodes_after"], "latency_O0_ms": m0, "latency_O2_ms": m2,
                     "ratio": ratio, "goal": goal, "met": met})
    with open(os.path.join(a.work, "bench_opt.json"), "w") as f:
        json.dump(rows, f, indent=1)
    # the goals are reported, not asserted: timings on a shared machine are noisy
    return 0


if __name__ == "__main__":
    sys.exit(main())
