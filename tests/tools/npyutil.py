#!/usr/bin/python3
# npyutil.py: small numpy and onnx checks for the shell tests: compare
# arrays within a tolerance, make arrays, describe arrays, check ONNX files.
# Usage:
#   npyutil.py cmp GOT.npy WANT.npy [--rtol R] [--atol A]
#   npyutil.py cmpdir GOTDIR WANTDIR [--rtol R] [--atol A]   (every WANTDIR/*.npy)
#   npyutil.py make FILE DTYPE D0,D1,... [--seed S] [--fill V]
#   npyutil.py info FILE.npy                 prints "float32 (2, 3)"
#   npyutil.py onnx-check FILE.onnx          runs onnx.checker, prints the op types
#   npyutil.py json FILE KEY.KEY...          prints the value at a path of a JSON file
# Exit status 0 when the check holds, 1 when not (with one line on stderr).
import argparse
import json
import os
import sys

import numpy as np


def compare(got_path, want_path, rtol, atol):
    try:
        got = np.load(got_path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - any load failure is a test failure
        return "%s: cannot load: %s" % (got_path, e)
    want = np.load(want_path, allow_pickle=False)
    if got.dtype != want.dtype:
        return "%s: dtype %s, expected %s" % (got_path, got.dtype, want.dtype)
    if got.shape != want.shape:
        return "%s: shape %s, expected %s" % (got_path, got.shape, want.shape)
    if got.dtype.kind in "fc":
        if not np.array_equal(np.isnan(got), np.isnan(want)):
            return "%s: NaNs in different places" % got_path
        ok = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = got == want
    if not np.all(ok):
        bad = np.argwhere(~np.asarray(ok))
        idx = tuple(bad[0]) if bad.size else ()
        err = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))
        return "%s: %d of %d values differ; max abs error %.3g; first at %s: %r vs %r" % (
            got_path, len(bad), got.size, err, idx, got[idx], want[idx])
    return None


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("cmp", "cmpdir"):
        p = sub.add_parser(name)
        p.add_argument("got")
        p.add_argument("want")
        p.add_argument("--rtol", type=float, default=1e-3)
        p.add_argument("--atol", type=float, default=1e-4)
    p = sub.add_parser("make")
    p.add_argument("file")
    p.add_argument("dtype")
    p.add_argument("shape")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fill", type=float)
    p = sub.add_parser("info")
    p.add_argument("file")
    p = sub.add_parser("onnx-check")
    p.add_argument("file")
    p = sub.add_parser("json")
    p.add_argument("file")
    p.add_argument("path")
    a = ap.parse_args()

    if a.cmd == "cmp":
        msg = compare(a.got, a.want, a.rtol, a.atol)
    elif a.cmd == "cmpdir":
        names = sorted(f for f in os.listdir(a.want) if f.endswith(".npy"))
        msg = None if names else "%s: no .npy files" % a.want
        for f in names:
            g = os.path.join(a.got, f)
            msg = ("%s: missing" % g) if not os.path.exists(g) else compare(
                g, os.path.join(a.want, f), a.rtol, a.atol)
            if msg:
                break
    elif a.cmd == "make":
        shape = tuple(int(d) for d in a.shape.split(",")) if a.shape else ()
        dt = np.dtype(a.dtype)
        rng = np.random.default_rng(a.seed)
        if a.fill is not None:
            v = np.full(shape, a.fill, dtype=dt)
        elif dt.kind == "f":
            v = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            v = rng.integers(0, 2, size=shape).astype(dt)
        else:
            v = rng.integers(0, 10, size=shape).astype(dt)
        np.save(a.file, v)
        msg = None
    elif a.cmd == "info":
        v = np.load(a.file, allow_pickle=False)
        print(v.dtype, v.shape)
        msg = None
    elif a.cmd == "onnx-check":
        import onnx
        m = onnx.load(a.file)
        try:
            onnx.checker.check_model(m, full_check=True)
            msg = None
        except Exception as e:  # noqa: BLE001
            msg = "%s: onnx.checker: %s" % (a.file, str(e).splitlines()[0] if str(e) else e)
        print(" ".join(n.op_type for n in m.graph.node))
    else:
        with open(a.file) as f:
            v = json.load(f)
        for k in a.path.split("."):
            v = v[int(k)] if isinstance(v, list) else v[k]
        print(json.dumps(v) if isinstance(v, (dict, list)) else v)
        msg = None
    if msg:
        print(msg, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
