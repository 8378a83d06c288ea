#!/usr/bin/env bats
# 7000-mltrain.bats: mltrain on small generated datasets: the contract
# (train, run the result in mlrun, resume bit-exactly), the data formats,
# checkpoints and signals (SIGINT, SIGUSR1, SIGKILL), bad input with the
# exit statuses of DESIGN.md, and the step graph for mlprof.
bats_require_minimum_version 1.5.0
load helpers

# mkdata DIR [N] [HW] [CLASSES] [MAXLABEL]: IDX files of N noisy HWxHW images
# whose class shows as a bright band, train (plain) and t10k (gzipped).
mkdata() {
	"$PY" - "$@" <<'PYEOF'
import gzip, os, struct, sys
import numpy as np
d = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
hw = int(sys.argv[3]) if len(sys.argv) > 3 else 8
k = int(sys.argv[4]) if len(sys.argv) > 4 else 4
top = int(sys.argv[5]) if len(sys.argv) > 5 else k
os.makedirs(d, exist_ok=True)
r = np.random.RandomState(1)
def idx(a):
    a = np.asarray(a, dtype=np.uint8)
    return bytes([0, 0, 8, a.ndim]) + b"".join(struct.pack(">I", x) for x in a.shape) + a.tobytes()
y = r.randint(0, k, n)
x = (r.rand(n, hw, hw) * 200).astype(np.uint8)
for i in range(n):
    x[i, (y[i] * 2) % hw, :] = 255
y[-1] = top - 1
open(d + "/train-images-idx3-ubyte", "wb").write(idx(x))
open(d + "/train-labels-idx1-ubyte", "wb").write(idx(y))
m = max(n // 4, 1)
open(d + "/t10k-images-idx3-ubyte.gz", "wb").write(gzip.compress(idx(x[:m]), mtime=0))
open(d + "/t10k-labels-idx1-ubyte.gz", "wb").write(gzip.compress(idx(y[:m]), mtime=0))
PYEOF
}

# mkmodel_mlt FILE [HW] [CLASSES]: a small MLP in the text form.
mkmlt() {
	cat >"$1" <<MLT
<
    ir_version: 8,
    opset_import: ["" : 17],
    seed: 0
>
tiny (float[N,1,${2:-8},${2:-8}] x) => (float[N,${3:-4}] y)
{
    flatten
    dense(units=16, act=relu)
    dense(units=${3:-4})
}
MLT
}

TRAIN="--lr 0.05 --momentum 0.9 --batch 16 --threads 1"

setup() {
	mkdata d
	mkmlt tiny.mlt
}

@test "mltrain trains, reports each epoch and writes a model mlrun runs" {
	run -0 --separate-stderr mltrain tiny.mlt --data d $TRAIN --epochs 2 -o out.mlg
	[ "${#stderr_lines[@]}" -eq 2 ]
	[[ ${stderr_lines[0]} == "epoch 1/2: loss "*" acc "*"%, test loss "*" acc "*"%, "*" samples/s, "* ]]
	[[ ${stderr_lines[1]} == "epoch 2/2: "* ]]
	run -0 mlrun out.mlg --random --dim N=3
	[ "${lines[0]}" = "y f32[3,4]" ]
	no_temp_files
}

@test "a progress bar appears when stderr is a terminal or with --progress, never under -q" {
	on_tty mltrain tiny.mlt --data d --batch 4 --threads 1 -o out.mlg
	# the bar (steps done of the epoch's, rate, ETA, running loss and
	# accuracy) as it starts and as it ends; between them it is redrawn at
	# most 10 times a second, so a fast epoch may show no other state
	grep -Eq "epoch 1/1 \[\.+\] +0/100 +--/s ETA --:--" tty.out
	grep -Eq "epoch 1/1 \[#+\] 100/100 +[0-9.]+/s elapsed 0:[0-9]{2}  loss [0-9.]+ acc [0-9.]+%" tty.out
	# erased when the epoch's line comes
	grep -q $'\r\033\\[Kepoch 1/1: loss' tty.out
	run -0 --separate-stderr mltrain tiny.mlt --data d --batch 4 --threads 1 -o out.mlg
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr != *$'\r'* ]]
	# --progress draws it without a terminal, on stderr alone (--json keeps stdout JSON)
	run -0 --separate-stderr mltrain tiny.mlt --data d --batch 4 --threads 1 --progress \
		--json -o out.mlg
	"$PY" -c 'import json, sys; json.loads(sys.argv[1])' "$output"
	tr '\r' '\n' <<<"$stderr" | sed 's/\x1b\[K//g' | grep -Eqx \
		"epoch 1/1 \[#+\] 100/100 +[0-9.]+/s elapsed 0:[0-9]{2}  loss [0-9.]+ acc [0-9.]+%"
	[[ $stderr == *$'\r\033[Kepoch 1/1: loss'* ]]
	run -0 --separate-stderr mltrain tiny.mlt --data d --batch 4 --threads 1 --progress -q \
		-o out.mlg
	[ -z "$stderr" ]
	on_tty mltrain tiny.mlt --data d --batch 4 --threads 1 -q -o out.mlg
	[[ $(cat tty.out) != *"/100"* ]]
	on_tty mltrain tiny.mlt --data d --batch 4 --threads 1 --no-progress -o out.mlg
	[[ $(cat tty.out) != *"/100"* ]]
	[[ $(cat tty.out) == *"epoch 1/1: loss"* ]]
}

@test "the trained model has the model's inputs and outputs, and learns the data" {
	mltrain tiny.mlt --data d $TRAIN --epochs 3 -q --json -o out.mlg >r.json
	acc=$(json_get r.json test_accuracy)
	"$PY" -c "import sys; sys.exit(0 if float('$acc') > 0.9 else 1)"
	run -0 mlconvert --info out.mlg
	[[ $output == *"x f32[N,1,8,8]"* ]] || [[ $output == *"x"*"[N,1,8,8]"* ]]
}

@test "the same seed gives the same bytes; another seed another model" {
	mltrain tiny.mlt --data d $TRAIN --epochs 1 -q -o a.mlg
	mltrain tiny.mlt --data d $TRAIN --epochs 1 -q -o b.mlg
	cmp a.mlg b.mlg
	mltrain tiny.mlt --data d $TRAIN --epochs 1 --seed 5 -q -o c.mlg
	run -1 cmp -s a.mlg c.mlg
}

@test "--resume after an epoch ends with the bytes of an uninterrupted run" {
	mltrain tiny.mlt --data d $TRAIN --epochs 3 -q -o a.mlg
	mltrain tiny.mlt --data d $TRAIN --epochs 1 -q -o b.mlg
	run -0 mltrain --resume b.ckpt.mlg --data d --epochs 3 --threads 1 -o b.mlg
	[[ ${lines[0]} == "epoch 2/3: "* ]]
	cmp a.mlg b.mlg
}

@test "--keep-denormals is saved in the checkpoint and kept by --resume; the default flushes" {
	mltrain tiny.mlt --data d $TRAIN --epochs 1 -q -o f.mlg
	mltrain tiny.mlt --data d $TRAIN --epochs 1 --keep-denormals -q -o k.mlg
	mlconvert f.ckpt.mlg -o f.mlt
	mlconvert k.ckpt.mlg -o k.mlt
	grep -q 'keep_denormals: 0' f.mlt
	grep -q 'keep_denormals: 1' k.mlt
	mltrain --resume k.ckpt.mlg --data d --epochs 2 --threads 1 -q -o k2.mlg
	mlconvert k2.ckpt.mlg -o k2.mlt
	grep -q 'keep_denormals: 1' k2.mlt
	mltrain tiny.mlt --data d $TRAIN --epochs 2 --keep-denormals -q -o k3.mlg
	cmp k2.mlg k3.mlg
}

@test "--resume from a checkpoint in mid-epoch is bit-exact too" {
	mltrain tiny.mlt --data d $TRAIN --epochs 2 --checkpoint-every 5 -q -o a.mlg
	mltrain tiny.mlt --data d $TRAIN --epochs 2 --checkpoint-every 5 -q -o b.mlg \
		--checkpoint ck.mlg
	cmp a.mlg b.mlg
	[ -f ck.mlg ] && [ ! -e b.ckpt.mlg ]
	mltrain tiny.mlt --data d $TRAIN --epochs 1 --checkpoint-every 5 -q -o c.mlg
	mltrain --resume c.ckpt.mlg --data d --epochs 2 --threads 1 -q -o c.mlg
	cmp a.mlg c.mlg
}

@test "SIGINT writes a checkpoint, exits 130, and the run resumes exactly" {
	mkdata big 2000 28 10
	cp "$ML_ROOT/examples/fashion-mlp.mlt" m.mlt
	# 20 epochs, so the signal lands mid-run now that the CPU step is fused and fast
	mltrain m.mlt --data big $TRAIN --epochs 20 -q --checkpoint-every 20 -o ref.mlg
	mltrain m.mlt --data big $TRAIN --epochs 20 -q --checkpoint-every 20 -o out.mlg &
	pid=$!
	for i in $(seq 200); do [ -f out.ckpt.mlg ] && break; sleep 0.05; done
	kill -INT $pid
	rc=0
	wait $pid || rc=$?
	[ "$rc" -eq 130 ]
	no_temp_files
	[ ! -e out.mlg ]
	run -0 mltrain --resume out.ckpt.mlg --data big --threads 1 -q -o out.mlg
	cmp ref.mlg out.mlg
}

@test "SIGUSR1 writes a checkpoint and the run goes on" {
	mkdata big 2000 28 10
	cp "$ML_ROOT/examples/fashion-mlp.mlt" m.mlt
	mltrain m.mlt --data big $TRAIN --epochs 20 -v -o out.mlg --checkpoint ck.mlg 2>err &
	pid=$!
	for i in $(seq 200); do grep -q "^epoch 1/" err && break; sleep 0.05; done
	kill -USR1 $pid
	wait $pid
	grep -q "(SIGUSR1)" err
	grep -q "^epoch 20/20" err
}

@test "a run killed with SIGKILL resumes from its last checkpoint to the same bytes" {
	mkdata big 2000 28 10
	cp "$ML_ROOT/examples/fashion-mlp.mlt" m.mlt
	# 40 epochs: long enough (about 2.5 s here) that the kill lands mid-run, after a checkpoint
	mltrain m.mlt --data big $TRAIN --epochs 40 -q --checkpoint-every 30 -o ref.mlg
	mltrain m.mlt --data big $TRAIN --epochs 40 -q --checkpoint-every 30 -o out.mlg &
	pid=$!
	for i in $(seq 200); do [ -f out.ckpt.mlg ] && break; sleep 0.05; done
	sleep 0.3
	kill -9 $pid
	wait $pid || true
	run -0 mltrain --resume out.ckpt.mlg --data big --threads 1 -q -o out.mlg
	cmp ref.mlg out.mlg
}

@test "data as .npy pairs, .npz (stored and deflated) and CSV train alike" {
	"$PY" - <<'PYEOF'
import gzip, os, struct
import numpy as np
def rd(p):
    b = open(p, "rb").read() if not p.endswith(".gz") else gzip.decompress(open(p, "rb").read())
    nd = b[3]; dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b[4 + 4 * nd:], dtype=np.uint8).reshape(dims)
x, y = rd("d/train-images-idx3-ubyte"), rd("d/train-labels-idx1-ubyte")
os.makedirs("n", exist_ok=True)
np.save("n/x_train.npy", x); np.save("n/y_train.npy", y.astype(np.int64))
np.savez("s.npz", x=x, y=y)
np.savez_compressed("z.npz", x_train=x, y_train=y, x_test=x[:50], y_test=y[:50])
with open("t.csv", "w") as f:
    f.write("label," + ",".join("p%d" % i for i in range(64)) + "\n")
    for i in range(len(y)):
        f.write("%d," % y[i] + ",".join("%g" % (v / 255.0) for v in x[i].ravel()) + "\n")
PYEOF
	mltrain tiny.mlt --data d $TRAIN -q -o i.mlg
	mltrain tiny.mlt --data n $TRAIN -q -o n.mlg
	cmp i.mlg n.mlg
	mltrain tiny.mlt --data s.npz $TRAIN -q -o s.mlg
	cmp i.mlg s.mlg
	run -0 --separate-stderr mltrain tiny.mlt --data z.npz $TRAIN -o z.mlg
	[[ $stderr == *"test loss"* ]]
	run -0 mltrain tiny.mlt --data t.csv $TRAIN -q -o t.mlg
}

@test "--val-split holds out data and reports val figures; --log writes JSON lines" {
	run -0 --separate-stderr mltrain tiny.mlt --data d $TRAIN --epochs 2 --val-split 0.25 \
		--log log.jsonl -o out.mlg
	[[ ${stderr_lines[0]} == *", val loss "* ]]
	[ "$(wc -l <log.jsonl)" -eq 2 ]
	[ "$(head -n 1 log.jsonl | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["epoch"])')" = 1 ]
}

@test "optimizers, schedules, clipping and weight decay all train" {
	for o in "--optimizer adam --lr 0.01" "--optimizer adamw --lr 0.01" \
		"--nesterov --momentum 0.9" "--lr-schedule cosine" "--lr-schedule step --lr-step 1" \
		"--lr-schedule warmup --warmup-steps 10" "--clip-norm 1 --weight-decay 1e-4"; do
		run -0 mltrain tiny.mlt --data d --batch 16 --threads 1 --epochs 1 $o -q -o o.mlg
	done
}

@test "--dump-step writes the step graph, which mlprof splits by phase" {
	# 10 classes: mlprof's random integers are 0 to 9
	run -0 mltrain "$ML_ROOT/examples/fashion-mlp.mlt" --dump-step step.mlg
	run -0 mlconvert --info step.mlg
	[[ $output == *label* ]]
	run -0 mlprof step.mlg --random --dim N=16 --group phase
	[[ $output == *forward* ]]
	[[ $output == *backward* ]]
	[[ $output == *optimizer* ]]
}

@test "on the CPU the step fuses each dense layer's products; other devices and clipping keep plain ops" {
	run -0 mltrain tiny.mlt --dump-step step.mlg
	run -0 mlconvert step.mlg -o step.mlt
	# the forward Gemm with its Relu, the weight gradients with their SGD updates
	grep -q '= ml.TrainGemm <.*"act" = "relu"' step.mlt
	[ "$(grep -c '= ml.GemmSGDUpdate ' step.mlt)" -eq 2 ]
	[ "$(grep -c '= Gemm \|= Relu \|= ml.ReluGrad ' step.mlt)" -eq 0 ]
	run -0 mltrain tiny.mlt --dump-step clip.mlg --clip-norm 1
	run -0 mlconvert clip.mlg -o clip.mlt
	[ "$(grep -c 'ml.GemmSGDUpdate' clip.mlt)" -eq 0 ]
	[ "$(grep -c 'ml.SGDUpdate' clip.mlt)" -eq 4 ]
	run -0 mltrain tiny.mlt --dump-step cl.mlg --device cl
	run -0 mlconvert cl.mlg -o cl.mlt
	[ "$(grep -c 'ml.TrainGemm\|ml.GemmSGDUpdate' cl.mlt)" -eq 0 ]
	# ML_PGEMM=0 (BLAS and a second pass) trains to the same loss as the fused kernels
	mltrain tiny.mlt --data d $TRAIN --epochs 2 --json -q -o f.mlg >f.json
	ML_PGEMM=0 mltrain tiny.mlt --data d $TRAIN --epochs 2 --json -q -o b.mlg >b.json
	"$PY" - <<'PYEOF'
import json
a, b = json.load(open("f.json")), json.load(open("b.json"))
assert abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]), (a, b)
assert abs(a["test_accuracy"] - b["test_accuracy"]) <= 0.005, (a, b)
PYEOF
}

@test "labels out of range are refused with status 3 naming the label" {
	mkdata bad 100 8 4 7
	run -3 --separate-stderr mltrain tiny.mlt --data bad $TRAIN -o out.mlg
	[[ $stderr == "mltrain: "*"label 6 of sample 99 is out of range for 4 classes" ]]
	[ ! -e out.mlg ]
}

@test "samples that do not fit the model's input are refused with status 3" {
	mkdata small 50 7
	run -3 --separate-stderr mltrain tiny.mlt --data small $TRAIN -o out.mlg
	[[ $stderr == *"samples of 7x7 (49 values) do not fit the model's input of 1x8x8 (64 values)" ]]
	[ "${#stderr_lines[@]}" -eq 1 ]
}

@test "samples and labels whose counts differ are refused with status 3" {
	mkdata a 50
	mkdata b 40
	cp b/train-labels-idx1-ubyte a/
	run -3 --separate-stderr mltrain tiny.mlt --data a $TRAIN -o out.mlg
	[[ $stderr == *"50 samples but 40 labels" ]]
}

@test "missing files and folders are refused with status 3" {
	run -3 --separate-stderr mltrain nosuch.mlt --data d -o out.mlg
	[[ $stderr == "mltrain: "*"nosuch.mlt"* ]]
	run -3 --separate-stderr mltrain tiny.mlt --data nosuch -o out.mlg
	[[ $stderr == "mltrain: cannot open 'nosuch': No such file or directory" ]]
	mkdir empty
	run -3 --separate-stderr mltrain tiny.mlt --data empty -o out.mlg
	[[ $stderr == "mltrain: empty: no training data"* ]]
	rm d/train-labels-idx1-ubyte
	run -3 --separate-stderr mltrain tiny.mlt --data d -o out.mlg
	[[ $stderr == *"no labels file"* ]]
	run -3 --separate-stderr mltrain --resume tiny.mlt --data d -o out.mlg
	[[ $stderr == *"not a checkpoint"* ]]
}

@test "a loss that becomes NaN stops with status 1 and keeps the last checkpoint" {
	run -1 --separate-stderr mltrain tiny.mlt --data d --batch 16 --threads 1 --lr 1e30 \
		--checkpoint-every 1 -o out.mlg
	[[ $stderr == "mltrain: step "*": the loss is "*"; stopping (the checkpoint of step "*" is kept in out.ckpt.mlg)" ]]
	run -0 mlrun out.ckpt.mlg --random
	[ ! -e out.mlg ]
	run -1 --separate-stderr mltrain tiny.mlt --data d --batch 16 --threads 1 --lr 1e30 -o o2.mlg
	[[ $stderr == *"(no checkpoint was written)" ]]
	[ ! -e o2.mlg ] && [ ! -e o2.ckpt.mlg ]
}

@test "usage errors exit 2" {
	run -2 --separate-stderr mltrain tiny.mlt -o out.mlg
	[[ $stderr == "mltrain: --data is required"* ]]
	run -2 --separate-stderr mltrain tiny.mlt --data d
	[[ $stderr == "mltrain: -o OUT.mlg is required"* ]]
	run -2 --separate-stderr mltrain tiny.mlt --data d -o o.mlg --optimizer rmsprop
	[[ $stderr == "mltrain: unknown optimizer 'rmsprop'"* ]]
	run -2 --separate-stderr mltrain tiny.mlt --data d -o o.mlg --loss hinge
	run -2 --separate-stderr mltrain tiny.mlt --data d -o o.mlg --lr-schedule exp
	run -2 --separate-stderr mltrain tiny.mlt --data d -o o.mlg --batch 0
	run -2 --separate-stderr mltrain tiny.mlt --data d -o o.mlg --val-split 1.5
	run -2 --separate-stderr mltrain tiny.mlt --data d -o o.mlg --bogus
	# a bad --allreduce-dtype: one line naming the types (checked before MPI starts)
	run -2 --separate-stderr mltrain tiny.mlt --data d -o o.mlg --allreduce-dtype f16
	[ "$stderr" = "mltrain: --allreduce-dtype: unknown all-reduce type 'f16' (f32, bf16, fp16)" ]
	run -2 --separate-stderr mltrain tiny.mlt --data d -o o.mlg --allreduce-dtype=
	[ "$(wc -l <<<"$stderr")" -eq 1 ]
	run -0 mltrain --help
	[[ $output == *"--allreduce-dtype T under mpirun: send the gradients as f32 (default), bf16"* ]]
	run -2 --separate-stderr mltrain
	mltrain tiny.mlt --data d $TRAIN -q -o c.mlg
	run -2 --separate-stderr mltrain --resume c.ckpt.mlg --data d --batch 8 -o c.mlg
	[[ $stderr == *"keeps its data order"* ]]
}

@test "--accumulate adds each gradient to its sum in the update's pass; ML_PGEMM=0 and --device cl train as the fused CPU step" {
	# the CPU step: the weight gradients' products add into the sums (GemmSGDUpdate),
	# the biases' updates read theirs; no separate sum, mask, mean or store nodes
	run -0 mltrain tiny.mlt --dump-step acc.mlg --accumulate 4
	run -0 mlconvert acc.mlg -o acc.mlt
	[ "$(grep -c '= ml.GemmSGDUpdate <accumulate = 4, .*\.grad_acc)$' acc.mlt)" -eq 2 ]
	[ "$(grep -c '= ml.SGDUpdate <accumulate = 4> .*\.grad_acc)$' acc.mlt)" -eq 2 ]
	[ "$(grep -c 'grad_sum\|grad_mean\|grad_keep\|grad_acc_assign' acc.mlt)" -eq 0 ]
	# clipping measures the group's mean, computed for it alone
	run -0 mltrain tiny.mlt --dump-step clip.mlg --accumulate 4 --clip-norm 1
	run -0 mlconvert clip.mlg -o clip.mlt
	[ "$(grep -c '= ml.SGDUpdate <accumulate = 4> .*\.grad_acc)$' clip.mlt)" -eq 4 ]
	[ "$(grep -c '= Mul (.*optimizer/grad_sum' clip.mlt)" -eq 4 ]
	# the AVX-512 epilogue, BLAS and a second pass, and OpenCL train alike
	ACC="--lr 0.05 --momentum 0.9 --batch 4 --accumulate 4 --threads 1 --epochs 2 --json -q"
	mltrain tiny.mlt --data d $ACC -o f.mlg >f.json
	ML_PGEMM=0 mltrain tiny.mlt --data d $ACC -o b.mlg >b.json
	ok=0
	if mlrun --devices --json 2>/dev/null | grep -q '"cl:0"'; then
		mltrain tiny.mlt --data d $ACC --device cl -o cl.mlg >cl.json
		run -0 mlrun cl.mlg --random
		ok=1
	fi
	"$PY" - "$ok" <<'PYEOF'
import json, sys
a, b = json.load(open("f.json")), json.load(open("b.json"))
assert abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]), (a, b)
if sys.argv[1] == "1":
    c = json.load(open("cl.json"))
    assert abs(a["test_accuracy"] - c["test_accuracy"]) <= 0.005, (a, c)
    assert abs(a["loss"] - c["loss"]) <= 1e-3 + 1e-2 * abs(a["loss"]), (a, c)
PYEOF
}

@test "--device cl trains to the same losses as the CPU, and its model runs" {
	mlrun --devices --json >devs.json 2>/dev/null || skip "mlrun --devices failed"
	grep -q '"cl:0"' devs.json || skip "no OpenCL device"
	mltrain tiny.mlt --data d $TRAIN --epochs 2 --json -q -o cpu.mlg >cpu.json
	mltrain tiny.mlt --data d $TRAIN --epochs 2 --json -q --device cl -o cl.mlg >cl.json
	"$PY" - <<'PYEOF'
import json
a, b = json.load(open("cpu.json")), json.load(open("cl.json"))
assert abs(a["test_accuracy"] - b["test_accuracy"]) <= 0.005, (a, b)
assert abs(a["loss"] - b["loss"]) <= 1e-3 + 1e-2 * abs(a["loss"]), (a, b)
PYEOF
	run -0 mlrun cl.mlg --random
}

@test "an unknown device is refused" {
	run --separate-stderr mltrain tiny.mlt --data d $TRAIN --device tpu -o out.mlg
	[ "$status" -eq 3 ] || [ "$status" -eq 4 ]
	[ ! -e out.mlg ]
}

@test "200 damaged IDX files (plain and gzipped) are each refused with status 3" {
	"$PY" - <<'PYEOF'
import gzip, os, random, struct
rnd = random.Random(7)
src = open("d/train-images-idx3-ubyte", "rb").read()
os.makedirs("mut", exist_ok=True)
def valid(b):
    try:
        if b[:2] == b"\x1f\x8b":
            b = gzip.decompress(b)
    except Exception:
        return False
    if len(b) < 4 or b[0] or b[1] or b[2] not in (8, 9, 11, 12, 13, 14) or not 1 <= b[3] <= 8:
        return False
    nd = b[3]
    if len(b) < 4 + 4 * nd:
        return False
    n = 1
    for v in struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd]):
        n *= v
    size = {8: 1, 9: 1, 11: 2, 12: 4, 13: 4, 14: 8}[b[2]]
    # the labels have 400 entries: only a 400-sample file of 64 values each could pass
    return len(b) == 4 + 4 * nd + n * size and n == 400 * 64 and b[2] in (8, 9)
k = 0
while k < 200:
    b = bytearray(src)
    gz = k % 2 == 1
    kind = rnd.choice(["trunc", "flip", "len", "append"])
    if gz:
        b = bytearray(gzip.compress(bytes(b), mtime=0))
    if kind == "trunc":
        b = b[:rnd.randrange(0, len(b))]
    elif kind == "flip":
        i = rnd.randrange(0, 16 if not gz else len(b))
        b[i] ^= 1 << rnd.randrange(8)
    elif kind == "len":
        i = 4 + 4 * rnd.randrange(3)
        b[i:i + 4] = struct.pack(">I", rnd.choice([0xFFFFFFFF, 401, 65, 1 << 30]))
        if gz:
            b = bytearray(gzip.compress(bytes(b[:0]) + bytes(b), mtime=0)) if False else b
    else:
        b += bytes(rnd.randrange(1, 9))
    if valid(bytes(b)):
        continue
    os.makedirs("mut/%03d" % k, exist_ok=True)
    name = "train-images-idx3-ubyte" + (".gz" if gz else "")
    open("mut/%03d/%s" % (k, name), "wb").write(b)
    k += 1
PYEOF
	local bad=0 n=0
	for m in mut/*; do
		n=$((n + 1))
		cp d/train-labels-idx1-ubyte "$m/"
		run --separate-stderr mltrain tiny.mlt --data "$m" $TRAIN -o out.mlg
		if [ "$status" -ne 3 ] || [ "${#stderr_lines[@]}" -ne 1 ] || [[ $stderr != "mltrain: "* ]] ||
			[ -e out.mlg ]; then
			echo "$m: status $status: $stderr" >&2
			bad=$((bad + 1))
		fi
	done
	[ "$n" -eq 200 ]
	[ "$bad" -eq 0 ]
}

@test "--qat trains with fake-quant ops that mlquant turns into int8 without calibration data" {
	mltrain tiny.mlt --data d $TRAIN --epochs 3 --qat -q --json -o q.mlg >r.json
	acc=$(json_get r.json test_accuracy)
	"$PY" -c "import sys; sys.exit(0 if float('$acc') > 0.9 else 1)"
	run -0 mlconvert --info q.mlg
	[[ $output == *"ml.FakeQuant"* ]]
	run -0 mlrun q.mlg --random --dim N=2
	run -0 mlquant q.mlg -o q8.mlg
	run -0 mlconvert --info q8.mlg
	[[ $output == *"ml.Q8"* && $output != *"FakeQuant"* ]]
	run -0 mlrun q8.mlg --random --dim N=2
	[ "${lines[0]}" = "y f32[2,4]" ]
	# resuming a --qat run adds no second set of fake-quant ops
	mltrain tiny.mlt --data d $TRAIN --epochs 1 --qat -q -o r.mlg
	run -0 mltrain --resume r.ckpt.mlg --data d --epochs 2 --qat --threads 1 -q -o r.mlg
	run -0 mlconvert --info r.mlg
	[[ $output == *"ml.FakeQuant  4"* ]]
}

@test "--accumulate 4 with batch 4 trains as batch 16, resumes exactly, and is refused where it does not divide" {
	# 400 samples: 25 batches of 16, 100 of 4 (25 groups of 4)
	run -0 mltrain tiny.mlt --data d --lr 0.05 --momentum 0.9 --threads 1 --batch 16 \
		--epochs 2 -q -o b16.mlg
	run -0 mltrain tiny.mlt --data d --lr 0.05 --momentum 0.9 --threads 1 --batch 4 \
		--accumulate 4 --epochs 2 -q -o acc.mlg
	run -0 mltrain tiny.mlt --data d --lr 0.05 --momentum 0.9 --threads 1 --batch 4 \
		--epochs 2 -q -o b4.mlg
	"$PY" -c "import numpy as np; np.save('x.npy', np.random.default_rng(3).random((5,1,8,8), dtype=np.float32))"
	for m in b16 acc b4; do run -0 mlrun $m.mlg -i x=x.npy -o o$m; done
	npcmp oacc/y.npy ob16/y.npy --rtol 1e-4 --atol 1e-5
	# and not merely batch 4's model
	run -1 npcmp oacc/y.npy ob4/y.npy --rtol 1e-4 --atol 1e-5
	# the checkpoint keeps K: a resumed run (K not given again) ends as an uninterrupted one
	run -0 mltrain tiny.mlt --data d --lr 0.05 --momentum 0.9 --threads 1 --batch 4 \
		--accumulate 4 --epochs 1 -q -o r.mlg
	run -0 mltrain --resume r.ckpt.mlg --data d --epochs 2 --threads 1 -q -o r.mlg
	cmp r.mlg acc.mlg
	# 100 batches of 4 are not groups of 3: one line, status 3, nothing written
	run -3 mltrain tiny.mlt --data d --batch 4 --accumulate 3 --threads 1 -o no.mlg
	[[ "$output" == "mltrain: --accumulate 3 does not divide the 100 batches of an epoch"* ]]
	[ "${#lines[@]}" -eq 1 ]
	[ ! -e no.mlg ]
	run -2 mltrain tiny.mlt --data d --accumulate 0 -o no.mlg
	run -2 mltrain tiny.mlt --data d --accumulate x -o no.mlg
	[ ! -e no.mlg ]
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

@test "--precision bf16 trains the Fashion-MNIST MLP within 0.5 points of fp32, and marks the products" {
	fmnist_subset fm 10000 2000
	cp "$ML_ROOT/examples/fashion-mlp.mlt" m.mlt
	# whether this CPU's products round (AMX, or a vdpbf16ps as fast as its FMAs)
	run -0 mltrain m.mlt --data fm --epochs 1 --precision bf16 -v -o v.mlg
	native=0
	[[ "$output" == *"bf16 products on AMX tiles"* || "$output" == *"bf16 products on vdpbf16ps"* ]] &&
		native=1
	for seed in 0 1 2; do
		for p in fp32 bf16; do
			run -0 mltrain m.mlt --data fm --epochs 3 --lr 0.1 --seed $seed --precision $p \
				-q --json -o $p.mlg
			acc=$(printf '%s\n' "$output" | sed -n 's/.*"test_accuracy": \([0-9.]*\).*/\1/p')
			[ -n "$acc" ]
			eval "a_$p=$acc"
		done
		echo "# seed $seed: fp32 $a_fp32, bf16 $a_bf16" >&3
		awk -v a="$a_fp32" -v b="$a_bf16" 'BEGIN { d = a - b; exit !(d <= 0.005 && d >= -0.005) }'
		# the products did round: the two models differ (without AVX512_BF16, or with
		# a vdpbf16ps no faster than the FMAs and no AMX, they run as f32, never slower
		# than fp32, and the models are the same)
		if [ "$native" = 1 ]; then
			run -1 cmp -s fp32.mlg bf16.mlg
		else
			run -0 cmp -s fp32.mlg bf16.mlg
		fi
	done
	# the step graph's products carry the precision; fp32's have none
	run -0 mltrain m.mlt --precision bf16 --dump-step s16.mlg
	run -0 mlconvert s16.mlg -o s16.mlt
	[ "$(grep -c 'precision = "bf16"' s16.mlt)" -eq 8 ]
	run -0 mltrain m.mlt --dump-step s32.mlg
	run -0 mlconvert s32.mlg -o s32.mlt
	run -1 grep -q precision s32.mlt
}

@test "--precision: the checkpoint keeps it and resumes exactly; fp16, other devices and bad values are refused" {
	run -0 mltrain tiny.mlt --data d $TRAIN --precision bf16 --epochs 2 -q -o full.mlg
	run -0 mltrain tiny.mlt --data d $TRAIN --precision bf16 --epochs 1 -q -o r.mlg
	# not given again: the checkpoint's bf16
	run -0 mltrain --resume r.ckpt.mlg --data d --epochs 2 --threads 1 -q -o r.mlg
	cmp r.mlg full.mlg
	run -0 mlconvert r.ckpt.mlg -o ck.mlt
	grep -q 'precision: 1' ck.mlt
	# -v says how this CPU runs them; ML_BF16=f32 emulates them. Without AMX, vdpbf16ps
	# only where it measured about as fast as the FMAs (else f32: never slower than fp32);
	# ML_BF16=dp uses it anyway
	dp="mltrain: bf16 products on vdpbf16ps (AVX512_BF16)"
	slow="mltrain: bf16 products run as f32: this CPU's vdpbf16ps is no faster than its f32 FMAs (measured; ML_BF16=dp uses it)"
	run -0 mltrain tiny.mlt --data d $TRAIN --precision bf16 -v -o v.mlg
	rounds=1
	if grep -q amx_bf16 /proc/cpuinfo && [[ "$output" == *"on AMX tiles"* ]]; then
		[[ "$output" == *"mltrain: bf16 products on AMX tiles (tdpbf16ps; under 16 rows vdpbf16ps)"* ]]
		ML_AMX=0 run -0 mltrain tiny.mlt --data d $TRAIN --precision bf16 -v -o v.mlg
		[[ "$output" == *"$dp"* || "$output" == *"$slow"* ]]
		ML_AMX=0 ML_BF16=dp run -0 mltrain tiny.mlt --data d $TRAIN --precision bf16 -v -o v.mlg
		[[ "$output" == *"$dp"* ]]
	elif grep -q avx512_bf16 /proc/cpuinfo; then
		[[ "$output" == *"$dp"* || "$output" == *"$slow"* ]]
		[[ "$output" == *"$dp"* ]] || rounds=0
		ML_BF16=dp run -0 mltrain tiny.mlt --data d $TRAIN --precision bf16 -v -o v.mlg
		[[ "$output" == *"$dp"* ]]
	else
		[[ "$output" == *"mltrain: bf16 products run as f32: this CPU has no AVX512_BF16"* ]]
		rounds=0
	fi
	ML_BF16=f32 run -0 mltrain tiny.mlt --data d $TRAIN --precision bf16 -v -o v.mlg
	[[ "$output" == *"mltrain: bf16 products emulated: f32 kernels on rounded operands (ML_BF16=f32)"* ]]
	run -0 mltrain tiny.mlt --data d $TRAIN -v -o v.mlg
	[[ "$output" != *"bf16 products"* ]]
	# -v ends with what it wrote, as mlopt and mlquant do
	[[ "$output" == *"mltrain: wrote v.mlg as mlg: "*" nodes; the training state in v.ckpt.mlg"* ]]
	run -0 mltrain tiny.mlt --data d $TRAIN -o q.mlg
	[[ "$output" != *"wrote"* ]]
	# given: a resume may change it (the weights and optimizer state are f32 either way)
	run -0 mltrain tiny.mlt --data d $TRAIN --precision bf16 --epochs 1 -q -o s.mlg
	run -0 mltrain --resume s.ckpt.mlg --data d --epochs 2 --precision fp32 --threads 1 -q -o s.mlg
	if [ "$rounds" = 1 ]; then
		run -1 cmp -s s.mlg full.mlg
	fi
	run -0 mlconvert s.ckpt.mlg -o s.mlt
	run -1 grep -q 'precision: 1' s.mlt
	# fp16: the CPU has no fp16 products; one line, status 4, nothing written
	run -4 mltrain tiny.mlt --data d --precision fp16 -o no.mlg
	[ "$output" = "mltrain: --precision fp16: --device cpu has no fp16 products (use --device cl; bf16 is the CPU's half precision)" ]
	# auto may pick either: refused before any device is opened (fp16 on cl: 7020)
	run -4 mltrain tiny.mlt --data d --precision bf16 --device auto -o no.mlg
	[ "$output" = "mltrain: --precision bf16: --device auto may train in fp32 only (use --device cpu or cl)" ]
	run -2 mltrain tiny.mlt --data d --precision fp8 -o no.mlg
	[[ "$output" == *"unknown precision 'fp8' (fp32, bf16, fp16)"* ]]
	run -2 mltrain tiny.mlt --data d --precision -o no.mlg
	[ ! -e no.mlg ]
}
