#!/bin/sh
# tsan-train.sh BIN: the training path end to end for make tsan: mltrain
# (pool threads, the loader's prefetch thread, checkpoints) on a small
# generated dataset, then mlrun on the result, both on 2 threads. Exits
# non-zero when either fails (a ThreadSanitizer report makes it exit 66).
set -eu
BIN=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
/usr/bin/python3 - "$T/d" <<'PYEOF'
import os, struct, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d)
r = np.random.RandomState(1)
def idx(a):
    a = np.asarray(a, dtype=np.uint8)
    return bytes([0, 0, 8, a.ndim]) + b"".join(struct.pack(">I", x) for x in a.shape) + a.tobytes()
y = r.randint(0, 4, 256)
x = (r.rand(256, 8, 8) * 200).astype(np.uint8)
for i in range(256):
    x[i, y[i] * 2, :] = 255
for p, a in (("train", slice(None)), ("t10k", slice(0, 64))):
    open(f"{d}/{p}-images-idx3-ubyte", "wb").write(idx(x[a]))
    open(f"{d}/{p}-labels-idx1-ubyte", "wb").write(idx(y[a]))
PYEOF
cat >"$T/tiny.mlt" <<'MLT'
<
    ir_version: 8,
    opset_import: ["" : 17],
    seed: 0
>
tiny (float[N,1,8,8] x) => (float[N,4] y)
{
    flatten
    dense(units=64, act=relu)
    dense(units=4)
}
MLT
"$BIN/mltrain" -q "$T/tiny.mlt" --data "$T/d" --lr 0.05 --batch 16 --epochs 2 --threads 2 \
	-o "$T/out.mlg"
"$BIN/mlrun" "$T/out.mlg" --random --threads 2 -o "$T/y" >/dev/null
