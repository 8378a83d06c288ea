#!/usr/bin/python3
# bench_clgemm.py: OpenCL SGEMM throughput of the library (mlcl_sgemm) on
# the first OpenCL device (POCL's CPU device here) against CLBlast on the
# same device and OpenBLAS on the CPU, all measured in this one run by
# BIN/clgemm_bench; prints GFLOP/s (best and median of the runs) and the
# ratios to CLBlast and to OpenBLAS. The target of issue 4 is 100 GFLOP/s
# at 1024^3 on POCL. Called by tests/bench/run.sh; writes WORK/clgemm.json.
# Usage: bench_clgemm.py --bin DIR --work DIR [--models DIR] [--ort-python PY]
#        [--runs N] [--sizes 1024,512,...]
import argparse
import json
import os
import re
import subprocess
import sys

LINE = re.compile(r"^gemm (\S+) (\d+x\d+x\d+) best=([\d.]+) median=([\d.]+) runs=\d+ "
                  r"maxrelerr=(\S+) cpu=([\d.]+)")
CONV = re.compile(r"^conv (\S+) best=([\d.]+) median=([\d.]+) ms=([\d.]+)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models")
    ap.add_argument("--ort-python")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--sizes", default="1024,256,512,1000x1000x1000,4096x64x4096")
    a = ap.parse_args()
    tool = os.path.join(a.bin, "clgemm_bench")
    if not os.access(tool, os.X_OK):
        print("bench_clgemm: %s is missing (make first)" % tool)
        return 1
    try:
        up = open("/proc/loadavg").read().split()[:3]
    except OSError:
        up = ["?"] * 3
    print("load average before: %s" % " ".join(up))
    p = subprocess.run([tool, "-c", "-r", str(a.runs)] + a.sizes.split(","),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode == 4:
        print("bench_clgemm: skipped: %s" % p.stderr.strip())
        return 0
    if p.returncode != 0:
        print("bench_clgemm: clgemm_bench failed (%d): %s" % (p.returncode, p.stderr.strip()))
        return 1
    res = {}
    conv = []
    for line in p.stdout.splitlines():
        m = LINE.match(line)
        c = CONV.match(line)
        if c is not None:
            conv.append((c.group(1), float(c.group(2)), float(c.group(3)), float(c.group(4))))
            continue
        if m is None:
            print(line)
            continue
        impl, size = m.group(1), m.group(2)
        res.setdefault(size, {})[impl] = {"best": float(m.group(3)),
                                          "median": float(m.group(4)),
                                          "maxrelerr": float(m.group(5)),
                                          "per_cpu_s": float(m.group(6))}
    print("SGEMM, GFLOP/s best / median of %d runs (C = A*B, row-major, f32)" % a.runs)
    print("%-16s %17s %17s %17s %10s %10s" % ("M x N x K", "ml (OpenCL)", "CLBlast (OpenCL)",
                                             "OpenBLAS (CPU)", "ml/CLBlast", "ml/OpenBLAS"))

    def cell(r, k):
        return "%7.1f / %7.1f" % (r[k]["best"], r[k]["median"]) if k in r else "%17s" % "-"

    def ratio(r, k):
        if "ml" not in r or k not in r or r[k]["median"] <= 0:
            return "%10s" % "-"
        return "%9.2fx" % (r["ml"]["median"] / r[k]["median"])

    for size, r in res.items():
        print("%-16s %s %s %s %s %s" % (size, cell(r, "ml"), cell(r, "clblast"),
                                        cell(r, "openblas"), ratio(r, "clblast"),
                                        ratio(r, "openblas")))
    if conv:
        print("mlcl_conv2d (f32, batch 1, bias + ReLU fused): GFLOP/s best / median, ms")
        for name, best, med, ms in conv:
            print("%-22s %7.1f / %7.1f %9.3f ms" % (name, best, med, ms))
    print("GFLOP per CPU-second of the process (all threads; less affected by other load):")
    for size, r in res.items():
        print("%-16s %s" % (size, "  ".join("%s %.1f" % (k, v["per_cpu_s"])
                                            for k, v in sorted(r.items()))))
    up2 = open("/proc/loadavg").read().split()[:3]
    print("load average after: %s (2 cores; other work on the machine lowers every column)"
          % " ".join(up2))
    bad = [s for s, r in res.items() if "ml" in r and not r["ml"]["maxrelerr"] < 1e-4]
    if bad:
        print("bench_clgemm: wrong results at %s" % ", ".join(bad))
    os.makedirs(a.work, exist_ok=True)
    with open(os.path.join(a.work, "clgemm.json"), "w") as f:
        json.dump({"load_before": up, "load_after": up2, "results": res,
                   "conv": [{"layer": c[0], "best": c[1], "median": c[2], "ms": c[3]}
                            for c in conv]}, f, indent=1)
    r = res.get("1024x1024x1024", {})
    if "ml" in r:
        print("target: ml SGEMM at 1024^3 >= 100 GFLOP/s: best %.1f, median %.1f (%s)"
              % (r["ml"]["best"], r["ml"]["median"],
                 "met" if r["ml"]["best"] >= 100 else "not met"))
        ncpu = os.cpu_count() or 1
        print("  estimate for an idle machine: %.1f GFLOP per CPU-second x %d cores = %.1f "
              "(OpenBLAS: %.1f)" % (r["ml"]["per_cpu_s"], ncpu, r["ml"]["per_cpu_s"] * ncpu,
                                    r.get("openblas", {}).get("per_cpu_s", 0) * ncpu))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
