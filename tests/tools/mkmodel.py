#!/usr/bin/python3
# mkmodel.py: write a small seeded ONNX model for the CLI tests, with input
# arrays and the expected outputs computed by numpy, so tests never download.
# Usage: mkmodel.py NAME [-o DIR] [--seed S]; writes DIR/NAME.onnx, and for
# each graph input DIR/NAME.in/INPUT.npy, for each output DIR/NAME.ref/OUT.npy
# (OUT with every character outside [A-Za-z0-9._-] replaced by '_').
import argparse
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
F32 = TensorProto.FLOAT


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, arr):
    return numpy_helper.from_array(np.ascontiguousarray(arr), name)


def relu(x):
    return np.maximum(x, 0)


def m_add(rng):
    """z = x + y on f32[2,3]."""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = rng.standard_normal((2, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"], name="add")], "add",
                          [vi("x", F32, [2, 3]), vi("y", F32, [2, 3])], [vi("z", F32, [2, 3])])
    return g, {"x": x, "y": y}, {"z": x + y}


def m_mlp(rng, n_in=4, n_hid=8, n_out=3, batch="N", feed=2):
    """y = relu(x W1 + b1) W2 + b2, with a symbolic batch dim."""
    w1 = rng.standard_normal((n_in, n_hid)).astype(np.float32) * 0.5
    b1 = rng.standard_normal((n_hid,)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((n_hid, n_out)).astype(np.float32) * 0.5
    b2 = rng.standard_normal((n_out,)).astype(np.float32) * 0.1
    x = rng.standard_normal((feed, n_in)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h"], name="act"),
        helper.make_node("MatMul", ["h", "w2"], ["y0"], name="fc2"),
        helper.make_node("Add", ["y0", "b2"], ["y"], name="fc2_bias"),
    ]
    g = helper.make_graph(nodes, "mlp", [vi("x", F32, [batch, n_in])], [vi("y", F32, [batch, n_out])],
                          [init("w1", w1), init("b1", b1), init("w2", w2), init("b2", b2)])
    y = relu(x @ w1 + b1) @ w2 + b2
    return g, {"x": x}, {"y": y.astype(np.float32)}


def m_mlp784(rng):
    """A 784-256-10 MLP with batch 1, for timing whole-process runs."""
    return m_mlp(rng, 784, 256, 10, 1, 1)


def m_relu(rng):
    """y = relu(x) on f32[N,3], N symbolic."""
    x = rng.standard_normal((5, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
                          [vi("x", F32, ["N", 3])], [vi("y", F32, ["N", 3])])
    return g, {"x": x}, {"y": relu(x)}


def m_two(rng):
    """Two outputs from one input: relu(x) and -x."""
    x = rng.standard_normal((3, 4)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["pos"], name="relu"),
             helper.make_node("Neg", ["x"], ["neg"], name="neg")]
    g = helper.make_graph(nodes, "two", [vi("x", F32, [3, 4])],
                          [vi("pos", F32, [3, 4]), vi("neg", F32, [3, 4])])
    return g, {"x": x}, {"pos": relu(x), "neg": -x}


def m_names(rng):
    """Value names that are not file names: in:0 -> out/0:1."""
    x = rng.standard_normal((2, 2)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Neg", ["in:0"], ["out/0:1"], name="neg")], "names",
                          [vi("in:0", F32, [2, 2])], [vi("out/0:1", F32, [2, 2])])
    return g, {"in:0": x}, {"out/0:1": -x}


def m_i64(rng):
    """Integer arithmetic: y = x + c on i64[4]."""
    x = rng.integers(-100, 100, size=(4,)).astype(np.int64)
    c = np.array([1, 2, 3, 1 << 40], dtype=np.int64)
    g = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"], name="add")], "i64",
                          [vi("x", TensorProto.INT64, [4])], [vi("y", TensorProto.INT64, [4])],
                          [init("c", c)])
    return g, {"x": x}, {"y": x + c}


def m_conv(rng):
    """conv 3x3 (pad 1) -> relu -> global average pool -> flatten."""
    import torch
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal((4,)).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["y"], name="flatten", axis=1),
    ]
    g = helper.make_graph(nodes, "conv", [vi("x", F32, [1, 3, 8, 8])], [vi("y", F32, [1, 4])],
                          [init("w", w), init("b", b)])
    t = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                   padding=1)
    y = t.relu().mean(dim=(2, 3)).numpy()
    return g, {"x": x}, {"y": y.astype(np.float32)}


def m_cattrap(rng):
    """Concats whose inputs the planner may place in their output (batch 1,
    axis 1, 64-byte slices), with what must stay copied: an input also read
    after the Concat (by an elementwise op that could write over it), a
    graph input, a constant, the same tensor twice, one Concat fed to
    another, a prefix Concat (DenseNet's), graph outputs, and a Concat
    along an axis with a dim above 1 before it."""
    sh = [1, 2, 4, 4]
    x = rng.standard_normal(sh).astype(np.float32)
    k = rng.standard_normal([1, 1, 4, 4]).astype(np.float32)
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["a"]), n("Neg", ["x"], ["b"]),
        n("Sigmoid", ["x"], ["u"]), n("Neg", ["u"], ["v"]),
        n("Concat", ["a", "b"], ["c1"], axis=1),
        n("Concat", ["c1", "x", "k", "a", "v", "a"], ["c2"], axis=-3),
        n("Concat", ["a", "b"], ["o4"], axis=2),
        n("Abs", ["a"], ["s"]),
        n("Sigmoid", ["x"], ["f0"]), n("Tanh", ["f0"], ["f1"]),
        n("Concat", ["f0", "f1"], ["d1"], axis=1),
        n("Tanh", ["f1"], ["f2"]),
        n("Concat", ["f0", "f1", "f2"], ["d2"], axis=1),
        n("Sigmoid", ["d1"], ["o3"]),
        n("Concat", ["s", "o3"], ["o5"], axis=1),
        n("Neg", ["c2"], ["o1"]), n("Neg", ["d2"], ["o2"]),
        # h1 outlives its Concat's output: the shared block must too
        n("Sin", ["x"], ["h1"]), n("Concat", ["h1", "x"], ["h"], axis=1), n("Neg", ["h"], ["o6"]),
        n("Cos", ["x"], ["j1"]), n("Cos", ["j1"], ["j2"]), n("Cos", ["j2"], ["j3"]),
        n("Mul", ["h1", "j3"], ["o7"]),
    ]
    outs = ["o1", "s", "o2", "o4", "o5", "o6", "o7"]
    a, b = relu(x), -x
    u = 1 / (1 + np.exp(-x))
    c1 = np.concatenate([a, b], 1)
    c2 = np.concatenate([c1, x, k, a, -u, a], 1)
    f0 = 1 / (1 + np.exp(-x))
    f1 = np.tanh(f0)
    d1 = np.concatenate([f0, f1], 1)
    d2 = np.concatenate([f0, f1, np.tanh(f1)], 1)
    o3 = 1 / (1 + np.exp(-d1))
    ref = {"o1": -c2, "s": np.abs(a), "o2": -d2, "o4": np.concatenate([a, b], 2),
           "o5": np.concatenate([np.abs(a), o3], 1), "o6": -np.concatenate([np.sin(x), x], 1),
           "o7": np.sin(x) * np.cos(np.cos(np.cos(x)))}
    g = helper.make_graph(nodes, "cattrap", [vi("x", F32, sh)],
                          [vi(o, F32, list(ref[o].shape)) for o in outs], [init("k", k)])
    return g, {"x": x}, {o: ref[o].astype(np.float32) for o in outs}


def m_unsup(rng):
    """An op that no ml registry has: Frobnicate of domain com.example."""
    x = rng.standard_normal((2,)).astype(np.float32)
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example")
    g = helper.make_graph([node], "unsup", [vi("x", F32, [2])], [vi("y", F32, [2])])
    return g, {"x": x}, {}


MODELS = {k[2:]: v for k, v in globals().items() if k.startswith("m_")}


def safe(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def main():
    ap = argparse.ArgumentParser(description="write a small test model")
    ap.add_argument("name", choices=sorted(MODELS))
    ap.add_argument("-o", "--dir", default=".")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    g, ins, outs = MODELS[a.name](rng)
    imports = [helper.make_opsetid("", OPSET)]
    if a.name == "unsup":
        imports.append(helper.make_opsetid("com.example", 1))
    m = helper.make_model(g, opset_imports=imports, producer_name="mkmodel")
    m.ir_version = 8
    if a.name != "unsup":
        onnx.checker.check_model(m)
    os.makedirs(a.dir, exist_ok=True)
    onnx.save(m, os.path.join(a.dir, a.name + ".onnx"))
    for sub, arrs in (("in", ins), ("ref", outs)):
        d = os.path.join(a.dir, "%s.%s" % (a.name, sub))
        os.makedirs(d, exist_ok=True)
        for k, v in arrs.items():
            np.save(os.path.join(d, safe(k) + ".npy"), v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
