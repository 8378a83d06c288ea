#!/bin/sh
# demo.sh: the main job end to end: a PyTorch model exported to ONNX is
# converted to the graph file, inspected, run on an input, checked against
# PyTorch's own output, and timed, through pipes as scripts use the tools.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${ML_BIN:-$top/build/bin}
out=${DEMO_DIR:-$top/build/demo}
mkdir -p "$out"
cd "$out"

echo "== export a small CNN from PyTorch (seeded, no download)"
/usr/bin/python3 "$top/examples/export_cnn.py" "$out"

echo "== mlconvert net.onnx -o net.mlg"
"$bin/mlconvert" net.onnx -o net.mlg
"$bin/mlconvert" --info net.mlg

echo "== mlrun net.mlg -i input=input.npy"
"$bin/mlrun" net.mlg -i input=input.npy
"$bin/mlrun" net.mlg -i input=input.npy --output-dir out
/usr/bin/python3 - <<'PY'
import numpy as np
got = np.load("out/logits.npy"); want = np.load("torch_logits.npy")
err = float(np.max(np.abs(got - want)))
print("max |mlrun - pytorch| = %.3g" % err)
assert np.allclose(got, want, rtol=1e-3, atol=1e-4), "outputs differ from PyTorch"
PY

echo "== through a pipe, timed"
"$bin/mlconvert" net.onnx | "$bin/mlrun" - --random --seed 1 --repeat 20 --warmup 2 -q --json
