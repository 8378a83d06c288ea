#!/usr/bin/python3
# bench_clgemm.py: OpenCL SGEMM throughput on the first OpenCL device (POCL's
# CPU device here, a GPU where there is one), all measured in one run by
# BIN/clgemm_bench: the library's own kernels (ML_CL_GEMM=own, "ml"), the
# library with the engine it chooses per device and shape ("auto": ours or
# CLBlast, lib/cl/gemm.c), CLBlast called directly on the same device, and
# OpenBLAS on the CPU. Prints GFLOP/s (best and median of the runs) and the
# ratios ml/CLBlast, auto/CLBlast and ml/OpenBLAS, then the targets: issue
# 4's 100 GFLOP/s at 1024^3 on POCL, and issue 22's "SGEMM 4096 >= 1.0x
# CLBlast" (4096^3 runs when the 1024^3 rates say it fits in --budget
# seconds: on POCL CLBlast needs about 30 s per 4096^3 product). Writes
# WORK/clgemm.json.
# Usage: bench_clgemm.py --bin DIR --work DIR [--models DIR] [--ort-python PY]
#        [--runs N] [--sizes 1024,512,...] [--budget SECONDS]
import argparse
import json
import os
import re
import subprocess
import sys

LINE = re.compile(r"^gemm (\S+) (\d+x\d+x\d+T?) best=([\d.]+) median=([\d.]+) runs=\d+ "
                  r"maxrelerr=(\S+) cpu=([\d.]+)")
CONV = re.compile(r"^conv (\S+) best=([\d.]+) median=([\d.]+) ms=([\d.]+)")
IMPLS = [("ml", "ml (own)"), ("auto", "ml (auto)"), ("clblast", "CLBlast"),
         ("openblas", "OpenBLAS (CPU)")]


def run_tool(tool, args, res, conv, engines):
    """Run clgemm_bench with args; fill res[size][impl], conv and engines[size]. None or an error."""
    p = subprocess.run([tool] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode == 4:
        return "skipped: %s" % p.stderr.strip()
    if p.returncode != 0:
        return "clgemm_bench failed (%d): %s" % (p.returncode, p.stderr.strip())
    last = None
    for line in p.stdout.splitlines():
        m = LINE.match(line)
        c = CONV.match(line)
        if c is not None:
            conv.append((c.group(1), float(c.group(2)), float(c.group(3)), float(c.group(4))))
        elif m is not None:
            last = m.group(2)
            res.setdefault(last, {})[m.group(1)] = {
                "best": float(m.group(3)), "median": float(m.group(4)),
                "maxrelerr": float(m.group(5)), "per_cpu_s": float(m.group(6))}
        elif line.startswith("engine ") and last is not None:
            engines[last] = line[len("engine "):]
        else:
            print(line)
    return None


def ratio(r, a, b):
    if a not in r or b not in r or r[b]["median"] <= 0:
        return None
    return r[a]["median"] / r[b]["median"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models")
    ap.add_argument("--ort-python")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--sizes", default="1024,256,512,1000x1000x1000,4096x64x4096,1x1000x1280T")
    ap.add_argument("--budget", type=float, default=120,
                    help="seconds the 4096^3 products may take (estimated); 0: never run them")
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
    res, conv, engines = {}, [], {}
    err = run_tool(tool, ["-c", "-r", str(a.runs)] + a.sizes.split(","), res, conv, engines)
    if err is not None and err.startswith("skipped"):
        print("bench_clgemm: %s" % err)
        return 0
    if err is not None:
        print("bench_clgemm: %s" % err)
        return 1
    # 4096^3 where time allows: estimated from each implementation's median at 1024^3
    r1k = res.get("1024x1024x1024", {})
    big = "4096x4096x4096"
    if big not in res and r1k and a.budget > 0:
        est = sum(64 * 2.0 * 1024 ** 3 * 1e-9 / v["median"] * (a.runs + 1)
                  for v in r1k.values() if v["median"] > 0)
        if est <= a.budget:
            err = run_tool(tool, ["-r", str(a.runs), "4096"], res, conv, engines)
            if err is not None:
                print("bench_clgemm: 4096^3: %s" % err)
        else:
            print("4096^3 left out: about %.0f s at the 1024^3 rates (--budget %.0f)"
                  % (est, a.budget))
    print("SGEMM, GFLOP/s best / median of %d runs (C = A*B, row-major, f32; T: B transposed)"
          % a.runs)
    print("%-16s %s %11s %11s %11s" % ("M x N x K", " ".join("%17s" % h for _, h in IMPLS),
                                       "ml/CLBlast", "auto/CLBlast", "ml/OpenBLAS"))

    def cell(r, k):
        return "%7.1f / %7.1f" % (r[k]["best"], r[k]["median"]) if k in r else "%17s" % "-"

    def rcell(v):
        return "%10.2fx" % v if v is not None else "%11s" % "-"

    for size, r in res.items():
        print("%-16s %s %s %s %s" % (size, " ".join(cell(r, k) for k, _ in IMPLS),
                                     rcell(ratio(r, "ml", "clblast")),
                                     rcell(ratio(r, "auto", "clblast")),
                                     rcell(ratio(r, "ml", "openblas"))))
    if engines:
        print("engines chosen by auto:")
        for size, e in engines.items():
            print("  %-16s %s" % (size, e))
    if conv:
        print("mlcl_conv2d (f32, batch 1, bias + ReLU fused, our kernels): GFLOP/s best / median, ms")
        for name, best, med, ms in conv:
            print("%-22s %7.1f / %7.1f %9.3f ms" % (name, best, med, ms))
    print("GFLOP per CPU-second of the process (all threads; less affected by other load):")
    for size, r in res.items():
        print("%-16s %s" % (size, "  ".join("%s %.1f" % (k, v["per_cpu_s"])
                                            for k, v in sorted(r.items()))))
    up2 = open("/proc/loadavg").read().split()[:3]
    print("load average after: %s (other work on the machine lowers every column)"
          % " ".join(up2))
    bad = ["%s %s" % (s, k) for s, r in res.items() for k in ("ml", "auto")
           if k in r and not r[k]["maxrelerr"] < 1e-4]
    if bad:
        print("bench_clgemm: wrong results at %s" % ", ".join(bad))
    os.makedirs(a.work, exist_ok=True)
    with open(os.path.join(a.work, "clgemm.json"), "w") as f:
        json.dump({"load_before": up, "load_after": up2, "results": res, "engines": engines,
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
    for size in ("1024x1024x1024", big):
        r = res.get(size, {})
        for k, what in (("ml", "our kernels"), ("auto", "the library (auto)")):
            v = ratio(r, k, "clblast")
            if v is not None:
                print("target: SGEMM %s >= 1.0x CLBlast, %s: %.2fx (%s)"
                      % (size.split("x")[0], what, v, "met" if v >= 1.0 else "not met"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
