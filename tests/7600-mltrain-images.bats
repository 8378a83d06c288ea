#!/usr/bin/env bats
# 7600-mltrain-images.bats: image data for mltrain: folders of class folders
# of PNG and JPEG files (Fashion-MNIST samples written as images here, by
# PIL), CIFAR-10's binary batches, --augment (random crop with padding,
# flip), --normalize and --workers; the same training as from the arrays
# the images hold, reproducible whatever the number of workers; bad images
# and folders with one line and the documented status.
bats_require_minimum_version 1.5.0
load helpers

FMNIST=/usr/share/datasets/fashion-mnist

# mkimages DIR FMT [N]: N Fashion-MNIST images of each of classes 0-2 as DIR/train/cK/*.FMT
# and DIR/test/cK/*.FMT (N/3 each), and the same samples as decoded by PIL in
# DIR/arr/x_train.npy etc., in the folders' order (class, then file name).
mkimages() {
	[ -f "$FMNIST/train-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST ($FMNIST)"
	"$PY" -c 'import PIL' 2>/dev/null || skip "no PIL (python3-pil)"
	"$PY" - "$@" <<'PYEOF'
import gzip, os, sys
import numpy as np
from PIL import Image
d, fmt = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 30
src = "/usr/share/datasets/fashion-mnist/"
x = np.frombuffer(gzip.open(src + "train-images-idx3-ubyte.gz").read()[16:], np.uint8)
x = x.reshape(-1, 28, 28)
y = np.frombuffer(gzip.open(src + "train-labels-idx1-ubyte.gz").read()[8:], np.uint8)
for split, count, skip in (("train", n, 0), ("test", max(n // 3, 1), n)):
    xs, ys = [], []
    for k in range(3):
        os.makedirs("%s/%s/c%d" % (d, split, k), exist_ok=True)
        idx = np.nonzero(y == k)[0][skip:skip + count]
        for j, i in enumerate(idx):
            p = "%s/%s/c%d/%03d.%s" % (d, split, k, j, fmt)
            Image.fromarray(x[i]).save(p, quality=90) if fmt == "jpg" else \
                Image.fromarray(x[i]).save(p)
            xs.append(np.asarray(Image.open(p).convert("L")))
            ys.append(k)
    os.makedirs(d + "/arr", exist_ok=True)
    np.save("%s/arr/x_%s.npy" % (d, split), np.stack(xs)[:, None])
    np.save("%s/arr/y_%s.npy" % (d, split), np.array(ys, np.int64))
PYEOF
}

# cnn FILE C HW K: a small CNN for C x HW x HW images and K classes, in the text form.
cnn() {
	cat >"$1" <<MLT
<ir_version: 8, opset_import: ["" : 17]>
net (float[N,$2,$3,$3] x) => (float[N,$4] y)
{
    conv(filters=4, kernel=3, pad=1, act=relu)
    pool(max, size=4, stride=4)
    flatten
    dense(units=$4)
}
MLT
}

train() {
	mltrain net.mlt --epochs 2 --batch 10 --lr 0.05 --threads 1 -q "$@"
}

@test "a folder of PNG class folders trains exactly as the arrays they hold" {
	mkimages img png
	cnn net.mlt 1 28 3
	run -0 train --data img -o png.mlg
	run -0 train --data img/arr -o arr.mlg
	cmp png.mlg arr.mlg
	# the test/ folder is evaluated: the JSON report has its accuracy
	run -0 train --data img -o j.mlg --json
	[[ "$output" == *'"test_accuracy": 0.'* || "$output" == *'"test_accuracy": 1'* ]]
}

@test "JPEG images decode as PIL decodes them (libjpeg-turbo), and train alike" {
	mkimages img jpg
	cnn net.mlt 1 28 3
	run -0 train --data img -o jpg.mlg
	run -0 train --data img/arr -o arr.mlg
	cmp jpg.mlg arr.mlg
}

@test "a folder of class folders alone is a training set; RGB images give 3 channels" {
	mkimages img png
	"$PY" - <<'PYEOF'
import os
from PIL import Image
for k in range(2):
    os.makedirs("rgb/k%d" % k, exist_ok=True)
    for j in range(10):
        Image.new("RGB", (8, 8), (40 * j, 20 * k, 200)).save("rgb/k%d/%d.png" % (k, j))
PYEOF
	cnn net.mlt 3 8 2
	run -0 train --data rgb -o rgb.mlg --val-split 0.2
	# a 1-channel model refuses 3-channel images, naming both shapes
	cnn net.mlt 1 8 2
	run -3 train --data rgb -o bad.mlg
	[[ "$output" == mltrain:* ]]
	[ "${#lines[@]}" -eq 1 ]
	[ ! -e bad.mlg ]
}

@test "--augment crop=4,flip and --normalize: reproducible, the same with 1 or 3 workers, and not a no-op" {
	mkimages img png
	cnn net.mlt 1 28 3
	run -0 train --data img -o a1.mlg --augment crop=4,flip --normalize 0.29/0.35 --seed 3
	run -0 train --data img -o a2.mlg --augment crop=4,flip --normalize 0.29/0.35 --seed 3
	cmp a1.mlg a2.mlg
	run -0 train --data img -o a3.mlg --augment crop=4,flip --normalize 0.29/0.35 --seed 3 \
		--workers 3
	cmp a1.mlg a3.mlg
	run -0 train --data img -o n.mlg --normalize 0.29/0.35 --seed 3
	! cmp -s a1.mlg n.mlg
	run -0 train --data img -o s4.mlg --augment crop=4,flip --normalize 0.29/0.35 --seed 4
	! cmp -s a1.mlg s4.mlg
}

@test "--normalize 0/1 and --augment crop=0 change nothing" {
	mkimages img png
	cnn net.mlt 1 28 3
	run -0 train --data img -o plain.mlg
	run -0 train --data img -o same.mlg --normalize 0/1 --augment crop=0 --workers 2
	cmp plain.mlg same.mlg
}

@test "--log and -v report the time each epoch waited for the loader, within the epoch's time" {
	mkimages img png
	cnn net.mlt 1 28 3
	run -0 train --data img -o w.mlg --augment crop=2,flip --workers 2 --log w.jsonl
	"$PY" - <<'PYEOF'
import json
rows = [json.loads(s) for s in open("w.jsonl")]
assert len(rows) == 2, rows
for r in rows:
    assert 0 <= r["loader_wait_s"] <= r["seconds"], r
PYEOF
	run -0 --separate-stderr mltrain net.mlt --epochs 1 --batch 10 --threads 1 -v --data img \
		-o v.mlg --augment crop=2,flip
	[[ "$stderr" =~ "mltrain: waited "[0-9]+\.[0-9]{3}" s for the loader, "[0-9.]+"% of the epoch" ]]
}

@test "CIFAR-10 binary batches train a 3x32x32 model" {
	"$PY" - <<'PYEOF'
import os
import numpy as np
r = np.random.RandomState(0)
os.makedirs("cifar/cifar-10-batches-bin", exist_ok=True)
def batch(path, n):
    y = r.randint(0, 10, n).astype(np.uint8)
    x = r.randint(0, 256, (n, 3072)).astype(np.uint8)
    x[np.arange(n), y.astype(int) * 300] = 255
    open(path, "wb").write(np.concatenate([y[:, None], x], 1).tobytes())
    return x, y
xs, ys = zip(*[batch("cifar/cifar-10-batches-bin/data_batch_%d.bin" % i, 20) for i in (1, 2)])
xt, yt = batch("cifar/cifar-10-batches-bin/test_batch.bin", 10)
os.makedirs("arr", exist_ok=True)
np.save("arr/x_train.npy", np.concatenate(xs).reshape(-1, 3, 32, 32))
np.save("arr/y_train.npy", np.concatenate(ys).astype(np.int64))
np.save("arr/x_test.npy", xt.reshape(-1, 3, 32, 32))
np.save("arr/y_test.npy", yt.astype(np.int64))
PYEOF
	cnn net.mlt 3 32 10
	run -0 train --data cifar -o c.mlg --augment crop=4,flip
	run -0 train --data cifar -o c1.mlg
	run -0 train --data arr -o c2.mlg
	cmp c1.mlg c2.mlg
	# a batch file cut short is refused
	head -c 5000 cifar/cifar-10-batches-bin/data_batch_2.bin >short.bin
	mv short.bin cifar/cifar-10-batches-bin/data_batch_2.bin
	run -3 train --data cifar -o bad.mlg
	[[ "$output" == *"not a whole number of CIFAR-10 records"* ]]
	[ ! -e bad.mlg ]
}

@test "a corrupt PNG, a truncated JPEG, an empty class folder, a second size: one line, status 3, nothing written" {
	mkimages img png
	cnn net.mlt 1 28 3
	cp -r img bad1 && printf 'not a png' >bad1/train/c1/005.png
	run -3 train --data bad1 -o out.mlg
	[[ "$output" == *"bad1/train/c1/005.png"* ]]
	[ "${#lines[@]}" -eq 1 ]
	cp -r img bad2 && head -c 40 bad2/train/c0/000.png >t && mv t bad2/train/c0/001.png
	run -3 train --data bad2 -o out.mlg
	[[ "$output" == *"001.png"*"PNG"* ]]
	mkimages jimg jpg
	head -c 100 jimg/train/c2/003.jpg >t && mv t jimg/train/c2/003.jpg
	run -3 train --data jimg -o out.mlg
	[[ "$output" == *"003.jpg"*"JPEG"* ]]
	[ "${#lines[@]}" -eq 1 ]
	cp -r img bad3 && rm bad3/train/c2/*
	run -3 train --data bad3 -o out.mlg
	[[ "$output" == *"class folder 'c2' has no PNG or JPEG images"* ]]
	cp -r img bad4 && "$PY" -c 'from PIL import Image; Image.new("L", (30, 28)).save("bad4/train/c0/009.png")'
	run -3 train --data bad4 -o out.mlg
	[[ "$output" == *"009.png is 30x28"* ]]
	[ ! -e out.mlg ]
}

@test "bad --augment, --normalize and --workers are usage errors (status 2); augmentation needs image inputs (status 3)" {
	run -2 mltrain --augment rotate --data x -o o.mlg m.mlt
	[[ "$output" == *"unknown augmentation 'rotate'"* ]]
	run -2 mltrain --augment crop=-1 --data x -o o.mlg m.mlt
	run -2 mltrain --augment crop=4, --data x -o o.mlg m.mlt
	run -2 mltrain --normalize 0.5 --data x -o o.mlg m.mlt
	[[ "$output" == *"MEAN/STD"* ]]
	run -2 mltrain --normalize 0.5,0.4/0.2 --data x -o o.mlg m.mlt
	run -2 mltrain --normalize 0.5/0 --data x -o o.mlg m.mlt
	[[ "$output" == *"must be > 0"* ]]
	run -2 mltrain --workers 0 --data x -o o.mlg m.mlt
	run -2 mltrain --workers 17 --data x -o o.mlg m.mlt
	mkimages img png
	cat >mlp.mlt <<'MLT'
<ir_version: 8, opset_import: ["" : 17]>
mlp (float[N,784] x) => (float[N,3] y)
{
    dense(units=3)
}
MLT
	run -3 mltrain mlp.mlt --data img -o o.mlg --augment flip -q
	[[ "$output" == *"augmentation and normalisation take images"* ]]
	cnn net.mlt 1 28 3
	run -3 train --data img -o o.mlg --normalize 0.1,0.2,0.3/1,1,1
	[[ "$output" == *"3 values per channel; the images have 1 channels"* ]]
	run -3 train --data img -o o.mlg --augment crop=28
	[ ! -e o.mlg ]
}
