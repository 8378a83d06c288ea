#!/usr/bin/python3
"""onnxrt.py: checks of ONNX exports that other runtimes must accept.

  onnxrt.py check MODEL.onnx
      onnx.checker.check_model(full_check=True); exit 1 with its message when
      it refuses the model; also fails when a node of domain "ml" calls no
      model-local function or the model does not import the ml domain.
  onnxrt.py have-ort
      exit 0 when onnxruntime imports in this interpreter, 1 otherwise.
  onnxrt.py run MODEL.onnx INPUT.npy REF_DIR [--rtol R] [--atol A] [--u8 N]
      run MODEL in ONNX Runtime (CPU) on INPUT.npy (bound to its first input)
      and compare each output with REF_DIR/NAME.npy (mlrun -o's files):
      floats within atol + rtol * |ref|; uint8 outputs within N steps
      (default 1). Prints one line per output; exit 1 on a mismatch.
"""
import os
import sys

import numpy as np


def fail(msg):
    print(msg)
    sys.exit(1)


def check(path):
    import onnx
    m = onnx.load(path)
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception as e:  # the checker's own exceptions vary by version
        fail("%s: checker: %s" % (path, str(e).splitlines()[0] if str(e) else e))
    funcs = {(f.domain, f.name) for f in m.functions}
    doms = {o.domain for o in m.opset_import}

    def nodes(g):
        for n in g.node:
            yield n
            for a in n.attribute:
                if a.g is not None and a.HasField("g"):
                    yield from nodes(a.g)
    for n in nodes(m.graph):
        if n.domain == "ml" and (n.domain, n.op_type) not in funcs:
            fail("%s: node %s calls ml.%s, which has no function" % (path, n.name, n.op_type))
        if n.domain and n.domain not in doms:
            fail("%s: domain %s is not imported" % (path, n.domain))
    for f in m.functions:
        for n in f.node:
            if n.domain not in ("", "ai.onnx"):
                fail("%s: function %s uses %s.%s" % (path, f.name, n.domain, n.op_type))
    print("ok %s: %d functions" % (path, len(m.functions)))


def run(path, inp, ref, rtol, atol, u8):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = np.load(inp)
    outs = s.run(None, {s.get_inputs()[0].name: x})
    bad = False
    for o, y in zip(s.get_outputs(), outs):
        want = np.load(os.path.join(ref, o.name + ".npy"))
        if want.shape != y.shape:
            fail("%s: shape %s, mlrun %s" % (o.name, y.shape, want.shape))
        if y.dtype == np.uint8:
            d = np.abs(y.astype(np.int32) - want.astype(np.int32)).max(initial=0)
            ok = d <= u8
        else:
            d = np.abs(y.astype(np.float64) - want.astype(np.float64))
            ok = bool(np.all(d <= atol + rtol * np.abs(want.astype(np.float64))))
            d = d.max(initial=0)
        print("%s %s: max abs diff %g" % ("ok" if ok else "MISMATCH", o.name, d))
        bad |= not ok
    sys.exit(1 if bad else 0)


def main():
    a = sys.argv[1:]
    if not a:
        fail(__doc__)
    if a[0] == "check" and len(a) == 2:
        check(a[1])
    elif a[0] == "have-ort":
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            sys.exit(1)
    elif a[0] == "run" and len(a) >= 4:
        opts = {"--rtol": 1e-4, "--atol": 1e-4, "--u8": 1}
        rest = a[4:]
        for i in range(0, len(rest) - 1, 2):
            opts[rest[i]] = float(rest[i + 1])
        run(a[1], a[2], a[3], opts["--rtol"], opts["--atol"], int(opts["--u8"]))
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
