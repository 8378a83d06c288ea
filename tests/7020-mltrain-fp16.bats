#!/usr/bin/env bats
# 7020-mltrain-fp16.bats: mltrain --precision fp16 and bf16 on OpenCL (the
# products' operands rounded as the GEMM packs them) and loss scaling
# (--loss-scale): accuracy against fp32 on the Fashion-MNIST MLP, overflows
# that halve the scale and skip their steps, growth after the window, an
# exact unscale, resumes that continue the scale, and the refusals.
bats_require_minimum_version 1.5.0
load helpers

# mkdata DIR: 400 noisy 8x8 IDX images whose class (of 4) shows as a bright band
mkdata() {
	"$PY" - "$@" <<'PYEOF'
import gzip, os, struct, sys
import numpy as np
d = sys.argv[1]
n, hw, k = 400, 8, 4
os.makedirs(d, exist_ok=True)
r = np.random.RandomState(1)
def idx(a):
    a = np.asarray(a, dtype=np.uint8)
    return bytes([0, 0, 8, a.ndim]) + b"".join(struct.pack(">I", x) for x in a.shape) + a.tobytes()
y = r.randint(0, k, n)
x = (r.rand(n, hw, hw) * 200).astype(np.uint8)
for i in range(n):
    x[i, (y[i] * 2) % hw, :] = 255
open(d + "/train-images-idx3-ubyte", "wb").write(idx(x))
open(d + "/train-labels-idx1-ubyte", "wb").write(idx(y))
open(d + "/t10k-images-idx3-ubyte.gz", "wb").write(gzip.compress(idx(x[:100]), mtime=0))
open(d + "/t10k-labels-idx1-ubyte.gz", "wb").write(gzip.compress(idx(y[:100]), mtime=0))
PYEOF
}

# fmnist_subset DIR NTRAIN NTEST: the first samples of Fashion-MNIST as .npy pairs.
fmnist_subset() {
	[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
		skip "no Fashion-MNIST (/usr/share/datasets/fashion-mnist)"
	"$PY" - "$@" <<'PYEOF'
import gzip, os, sys
import numpy as np
d, ntr, nte = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
src = "/usr/share/datasets/fashion-mnist/"
def rd(f, off):
    return np.frombuffer(gzip.open(src + f).read()[off:], np.uint8)
os.makedirs(d, exist_ok=True)
for split, pre, n in (("train", "train", ntr), ("test", "t10k", nte)):
    x = rd(pre + "-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)[:n]
    y = rd(pre + "-labels-idx1-ubyte.gz", 8)[:n].astype(np.int64)
    np.save("%s/x_%s.npy" % (d, split), x)
    np.save("%s/y_%s.npy" % (d, split), y)
PYEOF
}

need_cl() {
	mlrun --devices --json >devs.json 2>/dev/null || true
	grep -q '"cl:0"' devs.json || skip "no OpenCL device"
}

TRAIN="--lr 0.05 --momentum 0.9 --batch 16 --threads 1"

setup() {
	mkdata d
	cat >tiny.mlt <<'MLT'
<
    ir_version: 8,
    opset_import: ["" : 17],
    seed: 0
>
tiny (float[N,1,8,8] x) => (float[N,4] y)
{
    flatten
    dense(units=16, act=relu)
    dense(units=4)
}
MLT
}

@test "--precision fp16 and bf16 on cl train the Fashion-MNIST MLP within 0.5 points of fp32 on cl" {
	need_cl
	fmnist_subset fm 10000 2000
	cp "$ML_ROOT/examples/fashion-mlp.mlt" m.mlt
	for seed in 0 1; do
		for p in fp32 fp16 bf16; do
			run -0 mltrain m.mlt --data fm --epochs 2 --lr 0.1 --seed $seed --precision $p \
				--device cl -q --json -o $p.mlg
			acc=$(printf '%s\n' "$output" | sed -n 's/.*"test_accuracy": \([0-9.]*\).*/\1/p')
			[ -n "$acc" ]
			eval "a_$p=$acc"
		done
		echo "# seed $seed: fp32 $a_fp32, fp16 $a_fp16, bf16 $a_bf16" >&3
		awk -v a="$a_fp32" -v b="$a_fp16" 'BEGIN { d = a - b; exit !(d <= 0.005 && d >= -0.005) }'
		awk -v a="$a_fp32" -v b="$a_bf16" 'BEGIN { d = a - b; exit !(d <= 0.005 && d >= -0.005) }'
		# the products did round: the models differ
		run -1 cmp -s fp32.mlg fp16.mlg
		run -1 cmp -s fp32.mlg bf16.mlg
		run -1 cmp -s fp16.mlg bf16.mlg
	done
	# the step's products carry the precision, and fp16 its loss scaling
	run -0 mltrain m.mlt --precision fp16 --device cl --dump-step s16.mlg
	run -0 mlconvert s16.mlg -o s16.mlt
	[ "$(grep -c 'precision = "fp16"' s16.mlt)" -eq 8 ]
	grep -q 'loss_scale' s16.mlt
	grep -q 'train.finite' s16.mlt
	# -v: how the device runs them, and the scale
	run -0 mltrain tiny.mlt --data d $TRAIN --precision fp16 --device cl -v -o v.mlg
	[[ "$output" == *"mltrain: fp16 products on OpenCL: operands rounded to fp16 as they are packed (emulated rounding, f32 sums; not CLBlast)"* ]]
	[[ "$output" == *"mltrain: loss scale 65536, dynamic"* ]]
	run -0 mltrain tiny.mlt --data d $TRAIN --precision bf16 --device cl -v -o v.mlg
	[[ "$output" == *"mltrain: bf16 products on OpenCL: operands rounded to bf16"* ]]
	# and whether the device has half arithmetic, which the rounding does without
	[[ "$output" == *"; the device has "*"cl_khr_fp16 ("* ]]
	[[ "$output" != *"loss scale"* ]]
	# CLBlast forced: the rounded products still run on ours
	ML_CL_GEMM=clblast run -0 mltrain tiny.mlt --data d $TRAIN --precision fp16 --device cl -q -o b.mlg
	run -0 mltrain tiny.mlt --data d $TRAIN --precision fp16 --device cl -q -o o.mlg
	cmp b.mlg o.mlg
}

@test "--loss-scale: an overflow halves the scale and skips its step, N clean steps double it, -v and --log say so" {
	need_cl
	run -0 mltrain tiny.mlt --data d $TRAIN --epochs 2 --precision fp16 --device cl \
		--loss-scale dynamic:0x1p40 --loss-scale-window 3 --log l.jsonl -v -o o.mlg
	# the first steps overflow at 2^40, 2^39, ...: skipped, halved
	[[ "$output" == *"mltrain: step 1: the gradients overflow at loss scale 1.09951e+12: step skipped, scale 5.49756e+11"* ]]
	[[ "$output" == *"mltrain: step 2: the gradients overflow at loss scale 5.49756e+11: step skipped"* ]]
	[[ "$output" == *": 3 clean steps: loss scale "* ]]
	"$PY" - <<'PYEOF'
import json
rows = [json.loads(s) for s in open("l.jsonl")]
ev = [r for r in rows if "overflow" in r]
ep = [r for r in rows if "epoch" in r]
assert ev[0] == {"step": 1, "loss_scale": 2.0**39, "previous": 2.0**40, "overflow": True}, ev[0]
assert ev[1]["step"] == 2 and ev[1]["loss_scale"] == 2.0**38
for r in ev:
    assert r["loss_scale"] == r["previous"] * (0.5 if r["overflow"] else 2), r
grow = [r for r in ev if not r["overflow"]]
assert grow, "no growth"
# growth comes 3 clean steps after the last change
steps = [r["step"] for r in ev]
for r in grow:
    i = steps.index(r["step"])
    assert r["step"] - steps[i - 1] == 3, (steps[i - 1], r)
skipped = sum(r["overflow"] for r in ev)
assert sum(r["skipped_steps"] for r in ep) == skipped, (ep, skipped)
assert ep[-1]["loss_scale"] == ev[-1]["loss_scale"]
# then it trains: the tiny task is learnt despite the skipped steps
assert ep[-1]["test_accuracy"] >= 0.9, ep[-1]
PYEOF
	# a fixed scale that always overflows skips every step and keeps the scale: nothing trains
	run -0 mltrain tiny.mlt --data d $TRAIN --precision fp16 --device cl --loss-scale 0x1p60 \
		--log f.jsonl -q -o f.mlg
	[ "$(grep -c '"overflow": true' f.jsonl)" -eq 25 ]
	grep -q '"loss_scale": 1.152921504606847e+18, "skipped_steps": 25' f.jsonl
	run -0 mltrain tiny.mlt --data d $TRAIN --precision fp16 --device cl --epochs 0 -q -o init.mlg
	run -0 mlconvert f.mlg -o f.mlt
	run -0 mlconvert init.mlg -o init.mlt
	cmp f.mlt init.mlt
}

@test "--loss-scale unscales exactly: a power of two trains the same bytes as none, with clipping and Adam too" {
	run -0 mltrain tiny.mlt --data d $TRAIN --epochs 2 -q -o a.mlg
	run -0 mltrain tiny.mlt --data d $TRAIN --epochs 2 --loss-scale 1024 -q -o b.mlg
	cmp a.mlg b.mlg
	run -0 mltrain tiny.mlt --data d $TRAIN --epochs 2 --optimizer adam --clip-norm 0.5 -q -o c.mlg
	run -0 mltrain tiny.mlt --data d $TRAIN --epochs 2 --optimizer adam --clip-norm 0.5 \
		--loss-scale dynamic --loss-scale-window 4 -q -o e.mlg
	cmp c.mlg e.mlg
	# bf16 on the CPU takes it too
	run -0 mltrain tiny.mlt --data d $TRAIN --precision bf16 --loss-scale dynamic -q -o g.mlg
}

@test "--loss-scale: the checkpoint keeps the scale and its counts; a resumed run continues identically" {
	need_cl
	LS="--precision fp16 --device cl --loss-scale dynamic:0x1p30 --loss-scale-window 3"
	run -0 mltrain tiny.mlt --data d $TRAIN $LS --epochs 2 --log full.jsonl -q -o full.mlg
	run -0 mltrain tiny.mlt --data d $TRAIN $LS --epochs 1 --log r.jsonl -q -o r.mlg
	cp r.ckpt.mlg r1.ckpt.mlg
	run -0 mlconvert r.ckpt.mlg -o ck.mlt
	grep -q 'precision: 2' ck.mlt
	grep -q 'loss_scale_window: 3' ck.mlt
	grep -q 'loss_scale_skipped: [1-9]' ck.mlt
	# not given again: the checkpoint's precision, scale, window and clean steps
	run -0 mltrain --resume r.ckpt.mlg --data d --epochs 2 --threads 1 --device cl \
		--log r.jsonl -q -o r.mlg
	cmp r.mlg full.mlg
	diff <(grep -v '"epoch"' full.jsonl) <(grep -v '"epoch"' r.jsonl)
	# given: the scale starts afresh, so the run differs
	run -0 mltrain --resume r1.ckpt.mlg --data d --epochs 2 --threads 1 --device cl \
		--loss-scale dynamic:0x1p40 -v -o s.mlg
	[[ "$output" == *"mltrain: training from step 25,"* ]]
	[[ "$output" == *"mltrain: step 26: the gradients overflow at loss scale 1.09951e+12"* ]]
	run -1 cmp -s s.mlg full.mlg
}

@test "--precision fp16 off OpenCL, and bad --loss-scale values: one line and the documented status" {
	run -4 mltrain tiny.mlt --data d --precision fp16 -o no.mlg
	[ "$output" = "mltrain: --precision fp16: --device cpu has no fp16 products (use --device cl; bf16 is the CPU's half precision)" ]
	run -4 mltrain tiny.mlt --data d --precision fp16 --device auto -o no.mlg
	[ "$output" = "mltrain: --precision fp16: --device auto has no fp16 products (use --device cl; bf16 is the CPU's half precision)" ]
	for v in abc 0 -1 dynamic: dynamic:1e30 dynamicx 1e-9 inf; do
		run -2 mltrain tiny.mlt --data d --loss-scale "$v" -o no.mlg
		[[ "${lines[0]}" == "mltrain: --loss-scale: "* ]]
	done
	run -2 mltrain tiny.mlt --data d --loss-scale 8 --loss-scale-window 4 -o no.mlg
	[ "${lines[0]}" = "mltrain: --loss-scale-window: the loss scale is not dynamic" ]
	run -2 mltrain tiny.mlt --data d --loss-scale-window 4 -o no.mlg
	[ "${lines[0]}" = "mltrain: --loss-scale-window: the loss scale is not dynamic" ]
	run -2 mltrain tiny.mlt --data d --loss-scale dynamic --loss-scale-window 0 -o no.mlg
	[[ "${lines[0]}" == "mltrain: --loss-scale-window: 0 is out of range"* ]]
	run -4 mltrain tiny.mlt --data d --batch 40 --loss-scale 8 --accumulate 5 -o no.mlg
	[ "$output" = "mltrain: --loss-scale: not with --accumulate (use --loss-scale off)" ]
	[ ! -e no.mlg ]
	run -0 mltrain --help
	[[ "$output" == *"--loss-scale S      scale the loss's gradient by S"* ]]
}
