#!/usr/bin/env bats
# 7010-mltrain-checkpoint.bats: what mltrain writes: -o an inference model
# (the model's parameters, no optimizer state, no step counter), the
# checkpoint (--checkpoint, default OUT.ckpt.mlg) with the training state
# as the TrainRun message; resuming from new and from older (JSON) checkpoints
# to the bytes of an uninterrupted run; mlopt's strip-training pass; bad
# checkpoints refused with one line and status 3.
bats_require_minimum_version 1.5.0
load helpers

# mkdata DIR [N] [HW] [CLASSES]: IDX files of N noisy HWxHW images whose
# class shows as a bright band (the generator of 7000-mltrain.bats, whose
# data made tests/data/ckpt-0.4.0-tiny.mlg).
mkdata() {
	"$PY" - "$@" <<'PYEOF'
import gzip, os, struct, sys
import numpy as np
d = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
hw = int(sys.argv[3]) if len(sys.argv) > 3 else 8
k = int(sys.argv[4]) if len(sys.argv) > 4 else 4
os.makedirs(d, exist_ok=True)
r = np.random.RandomState(1)
def idx(a):
    a = np.asarray(a, dtype=np.uint8)
    return bytes([0, 0, 8, a.ndim]) + b"".join(struct.pack(">I", x) for x in a.shape) + a.tobytes()
y = r.randint(0, k, n)
x = (r.rand(n, hw, hw) * 200).astype(np.uint8)
for i in range(n):
    x[i, (y[i] * 2) % hw, :] = 255
y[-1] = k - 1
open(d + "/train-images-idx3-ubyte", "wb").write(idx(x))
open(d + "/train-labels-idx1-ubyte", "wb").write(idx(y))
m = max(n // 4, 1)
open(d + "/t10k-images-idx3-ubyte.gz", "wb").write(gzip.compress(idx(x[:m]), mtime=0))
open(d + "/t10k-labels-idx1-ubyte.gz", "wb").write(gzip.compress(idx(y[:m]), mtime=0))
PYEOF
}

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

TRAIN="--lr 0.05 --momentum 0.9 --batch 16 --threads 1"

# params FILE: the parameter count mlconvert --info reports.
params() {
	mlconvert --info "$1" | sed -n 's/^parameters: \([0-9]*\) .*/\1/p'
}

# to_old CKPT OUT: CKPT rewritten in the form checkpoints had before the
# TrainRun message: the run's state as mltrain's JSON object in
# TrainState.config (enums by name, flags as 0 or 1).
to_old() {
	mlconvert "$1" -o new.mlt
	"$PY" - new.mlt old.mlt <<'PYEOF'
import json, re, sys
t = open(sys.argv[1]).read()
m = re.search(r'config: "", run: \{([^}]*)\}', t)
run = dict((k.strip(), v.strip()) for k, v in (f.split(":") for f in m.group(1).split(",")))
names = {"loss": ["softmax-cross-entropy", "nll", "mse", "bce-with-logits"],
         "optimizer": ["sgd", "adam", "adamw"],
         "lr_schedule": ["constant", "step", "cosine", "warmup"]}
cfg = {}
for k, v in run.items():
    if k == "output":
        continue
    cfg[k] = names[k][int(v)] if k in names else (float(v) if any(c in v for c in ".e") else int(v))
text = json.dumps(cfg).replace("\\", "\\\\").replace('"', '\\"')
open(sys.argv[2], "w").write(t[:m.start()] + 'config: "' + text + '"' + t[m.end():])
PYEOF
	grep -q 'config: "{\\"loss\\": ' old.mlt
	mlconvert old.mlt -o "$2"
}

@test "-o writes an inference model with the model's parameters; the checkpoint keeps the rest" {
	mltrain tiny.mlt --data d $TRAIN --epochs 2 -q -o out.mlg
	[ "$(params out.mlg)" -eq "$(params tiny.mlt)" ]
	[ "$(params out.mlg)" -eq 1108 ]
	# the checkpoint: the weights, their momentum and the step counter, which
	# --info counts apart
	[ "$(params out.ckpt.mlg)" -eq 1108 ]
	run -0 mlconvert --info out.ckpt.mlg
	[[ $output == *$'\ntraining state: step 50, epoch 2, 1109 values (4.34 KiB)\n'* ]]
	run -0 mlconvert --info out.mlg
	[[ $output != *"training state"* ]]
	mlconvert --info --json out.ckpt.mlg >i.json
	[ "$(json_get i.json params)" -eq 1108 ]
	[ "$(json_get i.json training_state.values)" -eq 1109 ]
	mlconvert out.mlg -o out.mlt
	run -1 grep -c 'training\|momentum\|train\.step' out.mlt
	mlconvert out.ckpt.mlg -o ck.mlt
	grep -q 'training: {step: 50, epoch: 2, optimizer: "sgd", config: "", run: {loss: 0, ' ck.mlt
	grep -q 'momentum: 0.9, ' ck.mlt
	# the ONNX export carries the parameters alone
	mlconvert out.mlg -o out.onnx
	"$PY" - <<'PYEOF'
import onnx
m = onnx.load("out.onnx")
names = sorted(i.name for i in m.graph.initializer)
assert names == ["dense1.bias", "dense1.weight", "dense2.bias", "dense2.weight"], names
PYEOF
	run -0 mlrun out.mlg --random --dim N=2
	[ "${lines[0]}" = "y f32[2,4]" ]
}

@test "the README's MLP trained with -o reports its own 235146 parameters" {
	mkdata big 400 28 10
	mltrain "$ML_ROOT/examples/fashion-mlp.mlt" --data big $TRAIN -q -o mlp.mlg
	[ "$(params mlp.mlg)" -eq 235146 ]
	[ "$(params "$ML_ROOT/examples/fashion-mlp.mlt")" -eq 235146 ]
	[ "$(params mlp.ckpt.mlg)" -eq 235146 ]
	run -0 mlconvert --info mlp.ckpt.mlg
	[[ $output == *"training state: step 25, epoch 1, 235147 values"* ]]
}

@test "--checkpoint names the checkpoint; resuming it ends with the bytes of an uninterrupted run" {
	mltrain tiny.mlt --data d $TRAIN --epochs 3 -q -o a.mlg
	mltrain tiny.mlt --data d $TRAIN --epochs 1 -q -o b.mlg --checkpoint run.mlg
	[ -f run.mlg ] && [ ! -e b.ckpt.mlg ]
	run -0 --separate-stderr mltrain --resume run.mlg --data d --epochs 3 --threads 1 -o b.mlg \
		--checkpoint run.mlg
	[[ ${stderr_lines[0]} == "epoch 2/3: "* ]]
	cmp a.mlg b.mlg
	cmp a.ckpt.mlg run.mlg
	# a name without .mlg gets .ckpt.mlg appended
	mltrain tiny.mlt --data d $TRAIN -q -o model
	[ -f model ] && [ -f model.ckpt.mlg ]
}

@test "a checkpoint of mltrain 0.4.0 (JSON state) resumes to the bytes of an uninterrupted run" {
	# made by mltrain 0.4.0 (main at 79958af): tiny.mlt, this data, $TRAIN, 1 epoch.
	# Should a kernel change the first epoch's numbers, remake it with
	#   mltrain tiny.mlt --data d $TRAIN --epochs 1 -o x.mlg
	# on a build before the TrainRun message, and keep x.mlg.
	old=$ML_ROOT/tests/data/ckpt-0.4.0-tiny.mlg
	mlconvert "$old" -o fixture.mlt
	grep -q 'config: "{\\"loss\\": \\"softmax-cross-entropy\\"' fixture.mlt
	run -1 grep -c 'run: {' fixture.mlt
	mltrain tiny.mlt --data d $TRAIN --epochs 3 -q -o a.mlg
	run -0 --separate-stderr mltrain --resume "$old" --data d --epochs 3 --threads 1 -o r.mlg
	[[ ${stderr_lines[0]} == "epoch 2/3: "* ]]
	# Its first epoch was run on a CPU whose kernels round as this one's
	# (AVX-512) where this CPU's first epoch gives the fixture's outputs
	# bit for bit: then the bytes; else (AVX2 sums in another order) the
	# two runs end within rounding of each other.
	mltrain tiny.mlt --data d $TRAIN --epochs 1 -q -o e1.mlg
	mknpy x.npy float32 8,1,8,8 --seed 3
	mlrun "$old" -i x=x.npy -o fo
	mlrun e1.mlg -i x=x.npy -o eo
	if cmp -s fo/y.npy eo/y.npy; then
		cmp a.mlg r.mlg
	else
		mlrun a.mlg -i x=x.npy -o ao
		mlrun r.mlg -i x=x.npy -o ro
		npcmp ro/y.npy ao/y.npy --rtol 1e-3 --atol 1e-4
	fi
	# and its checkpoint is in the new form
	mlconvert r.ckpt.mlg -o r.mlt
	grep -q 'config: "", run: {' r.mlt
}

@test "an old-form checkpoint made from a new one resumes exactly; so does the new one" {
	# (a step schedule: a cosine one depends on --epochs, which the resumed run changes)
	opts="--optimizer adam --lr 0.01 --lr-schedule step --lr-gamma 0.5 --weight-decay 1e-4"
	mltrain tiny.mlt --data d $opts --batch 16 --threads 1 --epochs 3 --seed 7 -q -o a.mlg
	mltrain tiny.mlt --data d $opts --batch 16 --threads 1 --epochs 1 --seed 7 -q -o b.mlg
	to_old b.ckpt.mlg old.mlg
	# the options come back from either form: none is given again
	mltrain --resume old.mlg --data d --epochs 3 --threads 1 -q -o r1.mlg
	mltrain --resume b.ckpt.mlg --data d --epochs 3 --threads 1 -q -o r2.mlg
	cmp a.mlg r2.mlg
	# old.mlg went through the text form, which keeps every value but not the
	# file's exact bytes: the models compare as text
	mlconvert a.mlg -o a.mlt
	mlconvert r1.mlg -o r1.mlt
	cmp a.mlt r1.mlt
	# the check can fail: the state read is what decides
	sed 's/\\"lr\\": 0.01/\\"lr\\": 0.02/' old.mlt >old2.mlt
	mlconvert old2.mlt -o old2.mlg
	mltrain --resume old2.mlg --data d --epochs 3 --threads 1 -q -o r3.mlg
	mlconvert r3.mlg -o r3.mlt
	run -1 cmp -s a.mlt r3.mlt
}

@test "mlopt -O1 drops the training state (strip-training), and leaves a step graph's" {
	mltrain tiny.mlt --data d $TRAIN -q -o out.mlg
	run -0 mlopt --list-passes
	[[ $output == *"strip-training     -O1  "* ]]
	mlopt -O1 out.ckpt.mlg -o s.mlg
	[ "$(params s.mlg)" -eq 1108 ]
	[ "$(stat -c %s s.mlg)" -lt "$(stat -c %s out.ckpt.mlg)" ]
	mlconvert s.mlg -o s.mlt
	run -1 grep -c 'training\|momentum' s.mlt
	run -0 mlopt --passes strip-training --report out.ckpt.mlg -o s2.mlg
	[[ $output == *"strip-training "*"1 training state, 5 tensors of it"* ]]
	[ "$(params s2.mlg)" -eq 1108 ]
	mlopt -O3 "$ML_ROOT/tests/data/ckpt-0.4.0-tiny.mlg" -o s3.mlg
	[ "$(params s3.mlg)" -eq 1108 ]
	# an ONNX export of a checkpoint keeps its moments as initializers; they go too
	mlconvert out.ckpt.mlg -o ck.onnx
	[ "$(params ck.onnx)" -eq 2217 ]
	mlopt -O1 ck.onnx -o s4.mlg
	[ "$(params s4.mlg)" -eq 1108 ]
	# -O0 keeps everything
	mlopt -O0 out.ckpt.mlg -o s0.mlg
	run -0 mlconvert --info s0.mlg
	[[ $output == *"training state: step 25, epoch 1, 1109 values"* ]]
	# a training step keeps its updates and their state
	mltrain tiny.mlt --dump-step step.mlg $TRAIN
	run -0 mlopt -O1 --report step.mlg -o step1.mlg
	[[ $output == *"strip-training         1"*" 0  -"* ]]
	mlconvert step1.mlg -o step1.mlt
	[ "$(grep -c 'ml.GemmSGDUpdate\|ml.SGDUpdate' step1.mlt)" -eq 4 ]
	grep -q 'training: {' step1.mlt
}

@test "bad checkpoints are refused with one line and status 3" {
	mltrain tiny.mlt --data d $TRAIN -q -o out.mlg
	# an inference model has no training state; its run's checkpoint is named
	# when it is there
	run -3 --separate-stderr mltrain --resume out.mlg --data d -o r.mlg
	[ "$stderr" = "mltrain: out.mlg: not a checkpoint of mltrain (no training state); the run's checkpoint is probably out.ckpt.mlg" ]
	cp out.mlg lone.mlg
	run -3 --separate-stderr mltrain --resume lone.mlg --data d -o r.mlg
	[ "$stderr" = "mltrain: lone.mlg: not a checkpoint of mltrain (no training state)" ]
	# not a model at all, and a truncated checkpoint
	printf 'not a model\n' >junk.mlg
	run -3 --separate-stderr mltrain --resume junk.mlg --data d -o r.mlg
	[ "${#stderr_lines[@]}" -eq 1 ] && [[ $stderr == "mltrain: "*"junk.mlg"* ]]
	head -c 300 out.ckpt.mlg >cut.mlg
	run -3 --separate-stderr mltrain --resume cut.mlg --data d -o r.mlg
	[ "${#stderr_lines[@]}" -eq 1 ] && [[ $stderr == "mltrain: "*"cut.mlg"* ]]
	# a run state with values no run has
	mlconvert out.ckpt.mlg -o ck.mlt
	sed 's/run: {loss: 0,/run: {loss: 9,/' ck.mlt >bad1.mlt
	mlconvert bad1.mlt -o bad1.mlg
	run -3 --separate-stderr mltrain --resume bad1.mlg --data d -o r.mlg
	[ "$stderr" = "mltrain: bad1.mlg: damaged training state: loss is no loss" ]
	sed 's/epoch_step: 0,/epoch_step: 99,/' ck.mlt >bad2.mlt
	mlconvert bad2.mlt -o bad2.mlg
	run -3 --separate-stderr mltrain --resume bad2.mlg --data d -o r.mlg
	[ "$stderr" = "mltrain: bad2.mlg: damaged training state (step 99 of an epoch of 25)" ]
	# the older form: JSON that does not parse, a count that is not an integer, an unknown name
	to_old out.ckpt.mlg old.mlg
	sed 's/config: "{/config: "{{/' old.mlt >bad3.mlt
	sed 's/\\"batch\\": 16/\\"batch\\": 16.5/' old.mlt >bad4.mlt
	sed 's/\\"optimizer\\": \\"sgd\\"/\\"optimizer\\": \\"rmsprop\\"/' old.mlt >bad5.mlt
	for k in 3 4 5; do
		mlconvert bad$k.mlt -o bad$k.mlg
		run -3 --separate-stderr mltrain --resume bad$k.mlg --data d -o r.mlg
		[ "${#stderr_lines[@]}" -eq 1 ] &&
			[[ $stderr == "mltrain: bad$k.mlg: damaged training state"* ]] ||
			{ echo "bad$k: $stderr" >&2; return 1; }
	done
	[[ $stderr == *"unknown optimizer 'rmsprop'" ]]
	[ ! -e r.mlg ] && [ ! -e r.ckpt.mlg ]
}

@test "--checkpoint may not be the output" {
	run -2 --separate-stderr mltrain tiny.mlt --data d -o m.mlg --checkpoint m.mlg
	[[ ${stderr_lines[0]} == "mltrain: --checkpoint and -o name the same file"* ]]
	[ ! -e m.mlg ]
}
