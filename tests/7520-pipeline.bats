#!/usr/bin/env bats
# 7520-pipeline.bats: mltrain --pipeline: the model cut into stages on
# different devices (cpu and POCL's cl:0, or the CPU twice), the batch in
# micro-batches, GPipe and 1F1B. The losses equal the single-device run's
# up to rounding; the schedules agree bit for bit; a resumed run ends where
# the uninterrupted one does; -v, --json and --pipeline-trace report the
# stages and the bubble fraction; bad plans and options fail with one line
# and the exit status of mltrain(1), leaving nothing behind.
bats_require_minimum_version 1.5.0
load helpers

# mkdata DIR N HW K: IDX files of N noisy HWxHW images whose class is a bright band.
mkdata() {
	"$PY" - "$@" <<'PYEOF'
import gzip, os, struct, sys
import numpy as np
d, n, hw, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
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
m = max(n // 4, 1)
open(d + "/t10k-images-idx3-ubyte.gz", "wb").write(gzip.compress(idx(x[:m]), mtime=0))
open(d + "/t10k-labels-idx1-ubyte.gz", "wb").write(gzip.compress(idx(y[:m]), mtime=0))
PYEOF
}

mlp() {
	cat >"$1" <<MLT
<ir_version: 8, opset_import: ["" : 17], seed: 0>
mlp (float[N,1,8,8] x) => (float[N,4] y)
{
    flatten
    dense(units=32, act=relu)
    dense(units=16, act=relu)
    dense(units=4)
}
MLT
}

# lenet: LeNet's layers (convolutions, pooling, dense) for 16x16 images.
lenet() {
	cat >"$1" <<MLT
<ir_version: 8, opset_import: ["" : 17], seed: 0>
lenet (float[N,1,16,16] x) => (float[N,4] y)
{
    conv(filters=6, kernel=5, pad=2, act=relu)
    pool(max, size=2, stride=2)
    conv(filters=16, kernel=5, act=relu)
    pool(max, size=2, stride=2)
    flatten
    dense(units=32, act=relu)
    dense(units=4)
}
MLT
}

have_cl() {
	mlrun --devices --json >devs.json 2>/dev/null && grep -q '"cl:0"' devs.json
}

TRAIN="--lr 0.05 --momentum 0.9 --batch 16 --threads 1 --epochs 3 --no-shuffle"

# losses_close A B [RTOL]: the epochs' losses of two --log files agree within RTOL
# (default 1e-4: float sums in another order); prints both.
losses_close() {
	"$PY" - "$@" <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
assert len(a) == len(b) and a, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("loss", "test_loss"):
        print(k, x[k], y[k])
        assert abs(x[k] - y[k]) <= tol * max(1.0, abs(x[k])), (k, x[k], y[k])
PYEOF
}

setup() {
	mkdata d 256 8 4
	mlp mlp.mlt
}

@test "2 stages (cpu + cpu) train the MLP as one device does" {
	run -0 mltrain mlp.mlt --data d $TRAIN --log one.log -o one.mlg
	run -0 mltrain mlp.mlt --data d $TRAIN --log two.log -o two.mlg \
		--pipeline auto --device cpu,cpu --micro-batches 4
	run -0 losses_close one.log two.log
	echo "$output"
	# not the same numbers to the bit: the run is another one
	run -0 mlrun two.mlg --random --dim N=2
}

@test "2 stages (cpu + cl:0) train the MLP as one device does" {
	have_cl || skip "no OpenCL device"
	run -0 mltrain mlp.mlt --data d $TRAIN --log one.log -o one.mlg
	run -0 mltrain mlp.mlt --data d $TRAIN --log two.log -o two.mlg \
		--pipeline auto --device cpu,cl:0 --micro-batches 4 --schedule 1f1b
	run -0 losses_close one.log two.log
	echo "$output"
	# and cl:0 first
	run -0 mltrain mlp.mlt --data d $TRAIN --log three.log -o three.mlg \
		--pipeline auto --device cl:0,cpu --micro-batches 2
	run -0 losses_close one.log three.log
	# a cut from node times measured on each device
	run -0 --separate-stderr mltrain mlp.mlt --data d $TRAIN --log four.log -o four.mlg \
		--pipeline measured --device cpu,cl:0 -v
	[[ $stderr =~ stage\ 1\ on\ cl:0:\ [0-9]+\ forward\ nodes.*of\ the\ predicted\ work\ \([0-9.]+\ ms\ a\ micro-batch\) ]]
	run -0 losses_close one.log four.log
}

@test "LeNet in 2 stages (cpu + cpu, cpu + cl:0) trains as on one device" {
	mkdata img 128 16 4
	lenet lenet.mlt
	run -0 mltrain lenet.mlt --data img $TRAIN --epochs 2 --log one.log -o one.mlg
	run -0 mltrain lenet.mlt --data img $TRAIN --epochs 2 --log two.log -o two.mlg \
		--pipeline auto --device cpu,cpu --micro-batches 4 --schedule 1f1b
	run -0 losses_close one.log two.log 2e-4
	echo "$output"
	have_cl || skip "no OpenCL device"
	run -0 mltrain lenet.mlt --data img $TRAIN --epochs 2 --log cl.log -o cl.mlg \
		--pipeline auto --device cpu,cl:0 --micro-batches 4
	run -0 losses_close one.log cl.log 2e-4
	echo "$output"
}

@test "BatchNormalization: one micro-batch trains as one device; more see their own statistics" {
	cat >bn.mlt <<MLT
<ir_version: 8, opset_import: ["" : 17], seed: 0>
bn (float[N,1,8,8] x) => (float[N,4] y)
{
    conv(filters=4, kernel=3, pad=1)
    norm(batch)
    act(relu)
    flatten
    dense(units=4)
}
MLT
	run -0 mltrain bn.mlt --data d $TRAIN --epochs 1 --log one.log -o one.mlg
	run -0 mltrain bn.mlt --data d $TRAIN --epochs 1 --log p1.log -o p1.mlg \
		--pipeline auto --device cpu,cpu --micro-batches 1
	run -0 losses_close one.log p1.log
	# 4 micro-batches: the batch statistics (and the running ones) are each micro-batch's
	run -0 mltrain bn.mlt --data d $TRAIN --epochs 1 --log p4.log -o p4.mlg \
		--pipeline auto --device cpu,cpu --micro-batches 4
	run -1 losses_close one.log p4.log
	run -0 losses_close one.log p4.log 0.05
	run -0 mlrun p4.mlg --random --dim N=2
}

@test "GPipe and 1F1B give the same model, bit for bit; 3 stages too" {
	run -0 mltrain mlp.mlt --data d $TRAIN -o g.mlg --pipeline auto --device cpu,cpu \
		--schedule gpipe
	run -0 mltrain mlp.mlt --data d $TRAIN -o f.mlg --pipeline auto --device cpu,cpu \
		--schedule 1f1b
	cmp g.mlg f.mlg
	run -0 mltrain mlp.mlt --data d $TRAIN -o f3.mlg --pipeline auto --device cpu,cpu,cpu \
		--schedule 1f1b --micro-batches 8 --log three.log
	run -0 mltrain mlp.mlt --data d $TRAIN -o one.mlg --log one.log
	run -0 losses_close one.log three.log
}

@test "a stage file places the nodes; --device may name the stages' devices" {
	# auto's cut, read from -v, written as a file, gives the same model, bit for bit
	run -0 --separate-stderr mltrain mlp.mlt --data d $TRAIN -v -o b.mlg --pipeline auto \
		--device cpu,cpu
	[[ $stderr =~ stage\ 0\ on\ cpu:\ ([0-9]+)\ forward\ nodes\ \(([^ ]+)\ \.\.\ ([^ ]+)\) ]]
	k=${BASH_REMATCH[1]} last=${BASH_REMATCH[3]}
	[ "$k" -ge 1 ] && [ "$k" -le 5 ]
	cat >plan.txt <<EOF
# stage 0 up to and with $last, then the rest
stage 0 cpu
stage 1 cpu
0..$last 0     # a name and an index may mix
$k..5 1
EOF
	run -0 --separate-stderr mltrain mlp.mlt --data d $TRAIN -v -o a.mlg --pipeline plan.txt
	[[ $stderr == *"stage 0 on cpu: $k forward nodes (flatten1 .. $last)"* ]]
	[[ $stderr == *"stage 1 on cpu: $((6 - k)) forward nodes ("*" .. dense3)"* ]]
	cmp a.mlg b.mlg
	# another cut trains alike (not to the bit: other sums)
	printf '0..forward/dense2 0\ndense2.act..dense3 1\n' >other.txt
	run -0 --separate-stderr mltrain mlp.mlt --data d $TRAIN -v -o c.mlg --pipeline other.txt \
		--log c.log
	[[ $stderr == *"stage 0 on cpu: 4 forward nodes (flatten1 .. dense2)"* ]]
	run -0 mltrain mlp.mlt --data d $TRAIN -o one.mlg --log one.log
	run -0 losses_close one.log c.log
	# --device's list names the devices instead of the file's lines
	run -0 mltrain mlp.mlt --data d $TRAIN -o e.mlg --pipeline plan.txt --device cpu,cpu
	cmp a.mlg e.mlg
	run -2 mltrain mlp.mlt --data d $TRAIN -o e.mlg --pipeline plan.txt --device cpu,cpu,cpu
	[[ $output == "mltrain: --device names 3 devices for the 2 stages of plan.txt" ]]
}

@test "--pipeline measured cuts from measured node times, and trains alike" {
	run -0 mltrain mlp.mlt --data d $TRAIN --log one.log -o one.mlg
	run -0 --separate-stderr mltrain mlp.mlt --data d $TRAIN --log m.log -o m.mlg \
		--pipeline measured --device cpu,cpu --schedule 1f1b -v
	[[ $stderr =~ stage\ 0\ on\ cpu:\ [0-9]+\ forward\ nodes\ \(flatten1\ \.\.\ .*\ \([0-9.]+\ ms\ a\ micro-batch\) ]]
	run -0 losses_close one.log m.log
	run -2 mltrain mlp.mlt --data d $TRAIN -o bad.mlg --pipeline measured --device cpu
	[[ $output == "mltrain: --pipeline measured: give one device a stage (--device cpu,cl:0)" ]]
	run -3 mltrain mlp.mlt --data d $TRAIN -o bad.mlg --pipeline measured --device cpu,cpu,cpu,cpu,cpu,cpu,cpu
	[[ $output == "mltrain: --pipeline measured: 7 stages for 6 forward nodes: a stage needs one at least" ]]
	[ ! -e bad.mlg ]
}

@test "-v prints the stages and the bubble fraction; --json and the trace have it" {
	run -0 --separate-stderr mltrain mlp.mlt --data d $TRAIN -v -o a.mlg --pipeline auto \
		--device cpu,cpu --micro-batches 4 --json --pipeline-trace trace.json
	[[ $stderr == *"pipeline of 2 stages, 4 micro-batches of 4, gpipe schedule"* ]]
	[[ $stderr =~ stage\ 0\ on\ cpu:\ [0-9]+\ forward\ nodes.*of\ the\ predicted\ work ]]
	[[ $stderr =~ pipeline:\ bubble\ fraction\ 0\.[0-9]+\ over\ 48\ batches ]]
	[[ $output == *'"pipeline": {"stages": 2, "micro_batches": 4, "schedule": "gpipe", "bubble_fraction": '* ]]
	"$PY" - <<'PYEOF'
import json
t = json.load(open("trace.json"))
ev = t["traceEvents"]
lanes = [e["args"]["name"] for e in ev if e["ph"] == "M"]
assert lanes == ["stage 0 (cpu)", "stage 1 (cpu)"], lanes
for s in (0, 1):
    names = [e["name"] for e in ev if e["ph"] == "X" and e["tid"] == s]
    assert names == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3", "update"], names
assert 0 <= t["otherData"]["bubble_fraction"] < 1
PYEOF
	no_temp_files
}

@test "a pipelined run resumes from its checkpoint where the uninterrupted run ends" {
	P="--pipeline auto --device cpu,cpu --micro-batches 2"
	run -0 mltrain mlp.mlt --data d $TRAIN $P -o full.mlg
	run -0 mltrain mlp.mlt --data d $TRAIN $P --epochs 1 -o part.mlg
	run -0 mltrain --resume part.ckpt.mlg --data d --threads 1 $P --epochs 3 -o rest.mlg
	cmp full.mlg rest.mlg
	# a checkpoint of a single-device run resumes in a pipeline (the same parameters)
	run -0 mltrain mlp.mlt --data d $TRAIN --epochs 1 -o one.mlg
	run -0 mltrain --resume one.ckpt.mlg --data d --threads 1 $P --epochs 2 -o two.mlg
	# the checkpoint's batch (16) is the one the micro-batches must divide
	run -2 mltrain --resume one.ckpt.mlg --data d --threads 1 --pipeline auto \
		--device cpu,cpu --micro-batches 3 --epochs 2 -o three.mlg
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == "mltrain: --micro-batches 3 does not divide the batch of 16" ]]
	[ ! -e three.mlg ]
}

@test "bad stage files fail with one line and status 3, writing nothing" {
	printf 'nosuch 0\n' >unknown.txt
	run -3 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline unknown.txt
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == "mltrain: unknown.txt: line 1: no forward node 'nosuch'" ]]
	printf '0..2 0\n' >short.txt
	run -3 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline short.txt
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == "mltrain: short.txt: forward node '"*"' has no stage (the stages must cover the model)" ]]
	printf '0..2 0\n3..5 2\n' >gap.txt
	run -3 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline gap.txt
	[[ $output == "mltrain: gap.txt: stage 1 has no node" ]]
	printf '0..2 1\n3..5 0\n' >back.txt
	run -3 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline back.txt
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == *"a stage's forward reads only earlier stages" ]]
	printf 'stage 1 gpu\n0..2 0\n3..5 1\n' >dev.txt
	run -3 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline dev.txt
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == *"stage 1: unknown device 'gpu' (cpu, cl, cl:N)" ]]
	printf '0..2 0\n3..5 x\n' >syntax.txt
	run -3 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline syntax.txt
	[[ $output == "mltrain: syntax.txt: line 2: 'NODE STAGE' or 'FIRST..LAST STAGE' with STAGE in [0, 64)" ]]
	run -1 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline missing.txt
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == "mltrain: missing.txt: No such file or directory" ]]
	# more stages than forward nodes
	run -3 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline auto --device cpu,cpu,cpu,cpu,cpu,cpu,cpu
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == "mltrain: --pipeline auto: 7 stages for 6 forward nodes: a stage needs one at least" ]]
	[ ! -e out.mlg ] && [ ! -e out.ckpt.mlg ]
	no_temp_files
}

@test "options --pipeline cannot take fail with one line and status 2 (4 where unsupported)" {
	run -2 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline auto --device cpu,cpu --micro-batches 3
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == "mltrain: --micro-batches 3 does not divide --batch 16" ]]
	run -2 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline auto --device cpu,cpu --accumulate 2
	[[ $output == "mltrain: --pipeline cannot combine with --accumulate: it splits each batch itself (--micro-batches)" ]]
	run -2 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline auto --device cpu,cpu --clip-norm 1
	[[ $output == "mltrain: --pipeline cannot combine with --clip-norm" ]]
	run -2 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline auto --device cpu,cpu --mpi
	[[ $output == "mltrain: --pipeline cannot combine with --mpi" ]]
	run -2 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline auto --device cpu
	[[ $output == "mltrain: --pipeline auto: give one device a stage (--device cpu,cl:0)" ]]
	run -2 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline auto --device cpu,tpu
	[[ $output == "mltrain: --device: unknown device 'tpu' for a stage (cpu, cl, cl:N)" ]]
	run -2 mltrain mlp.mlt --data d $TRAIN -o out.mlg --device cpu,cpu
	[[ $output == "mltrain: --device cpu,cpu: a list of devices needs --pipeline" ]]
	run -2 mltrain mlp.mlt --data d $TRAIN -o out.mlg --micro-batches 2
	[[ $output == "mltrain: --micro-batches, --schedule and --pipeline-trace need --pipeline" ]]
	run -2 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline auto --device cpu,cpu --schedule zigzag
	[[ $output == "mltrain: unknown schedule 'zigzag' (gpipe, 1f1b)" ]]
	# an OpenCL device takes one stage
	run -4 mltrain mlp.mlt --data d $TRAIN -o out.mlg --pipeline auto --device cl:0,cl:0
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == "mltrain: pipeline: device 'cl:0' takes stages 0 and 1: an OpenCL device takes one stage (the CPU may take several)" ]]
	# bf16 products: on CPU stages or one OpenCL device, not on a mix of the two
	run -0 mltrain mlp.mlt --data d $TRAIN --epochs 1 -o bf.mlg --precision bf16 --pipeline auto \
		--device cpu,cpu
	run -4 mltrain mlp.mlt --data d $TRAIN -o out.mlg --precision bf16 --pipeline auto \
		--device cpu,cl:0
	[[ $output == "mltrain: --precision bf16: --device cpu,cl:0 may train in fp32 only (use --device cpu or cl)" ]]
	# Dropout draws from one generator across stages: refused
	cat >drop.mlt <<MLT
<ir_version: 8, opset_import: ["" : 17], seed: 0>
drop (float[N,1,8,8] x) => (float[N,4] y)
{
    flatten
    dense(units=32, act=relu)
    dropout(rate=0.5)
    dense(units=4)
}
MLT
	run -4 mltrain drop.mlt --data d $TRAIN -o out.mlg --pipeline auto --device cpu,cpu
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == *"gradient clipping, accumulation and Dropout cannot be pipelined" ]]
	[ ! -e out.mlg ]
	no_temp_files
}

@test "mlprof --pipeline shows a lane per stage and the bubble fraction" {
	run -0 mltrain mlp.mlt --dump-step step.mlg --pipeline auto --device cpu,cpu
	run -0 mlprof step.mlg --pipeline auto --device cpu,cpu --dim N=16 --repeat 3
	[[ ${lines[0]} == "step.mlg: 2 stages, batch 16 in 4 micro-batches, gpipe, 3 runs" ]]
	[[ ${lines[2]} =~ ^0\ +cpu\ +[0-9]+\ flatten1\ \.\.\  ]]
	[[ ${lines[3]} =~ ^1\ +cpu\ +[0-9]+\ .*\ \.\.\ dense3 ]]
	[[ ${lines[4]} =~ ^wall\ [0-9.]+\ ms\ a\ batch\;\ bubble\ fraction\ 0\.[0-9]+ ]]
	# auto predicts from FLOPs (pred ms: -), measured from node times
	[[ ${lines[2]} =~ %\ +-\ +[0-9.]+ ]]
	run -0 mlprof step.mlg --pipeline measured --device cpu,cpu --dim N=16 --repeat 3
	[[ ${lines[2]} =~ %\ +[0-9]+\.[0-9]+\ +[0-9.]+ ]]
	# -v: each timed step's time and loss; --progress: the bar of the steps, on stderr only
	run -0 --separate-stderr mlprof step.mlg --pipeline auto --device cpu,cpu --dim N=16 \
		--repeat 3 --warmup 2 -v --progress
	[[ ${lines[0]} == "step.mlg: 2 stages, batch 16 in 4 micro-batches, gpipe, 3 runs" ]]
	[[ $output != *$'\r'* ]]
	v=$(tr '\r' '\n' <<<"$stderr" | sed 's/\x1b\[K//g' | grep -E '^mlprof: run [0-9]: [0-9.]+ ms, loss [0-9.]+$' | wc -l)
	[ "$v" -eq 3 ]
	tr '\r' '\n' <<<"$stderr" | sed 's/\x1b\[K//g' | \
		grep -Eqx 'profiling the pipeline \[#+\] 5/5 +[0-9.]+/s elapsed 0:[0-9]{2}'
	run -0 --separate-stderr mlprof step.mlg --pipeline auto --device cpu,cpu --dim N=16 --repeat 3
	[ -z "$stderr" ]
	run -0 mlprof step.mlg --pipeline auto --device cpu,cpu --dim N=16 --repeat 3 --json \
		--schedule 1f1b --micro-batches 2 --trace t.json
	"$PY" -c '
import json, sys
r = json.loads(sys.argv[1])["pipeline"]
assert r["stages"] == 2 and r["micro_batches"] == 2 and r["schedule"] == "1f1b", r
assert [l["device"] for l in r["lanes"]] == ["cpu", "cpu"], r
assert 0 <= r["bubble_fraction"] < 1, r
t = json.load(open("t.json"))
assert [e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M"] == ["stage 0 (cpu)", "stage 1 (cpu)"]
# 1F1B: stage 0 warms up with one forward, then alternates
s0 = [e["name"] for e in t["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
assert s0 == ["F0", "F1", "B0", "B1", "update"], s0
s1 = [e["name"] for e in t["traceEvents"] if e["ph"] == "X" and e["tid"] == 1]
assert s1 == ["F0", "B0", "F1", "B1", "update"], s1
' "$output"
	if have_cl; then
		run -0 mlprof step.mlg --pipeline auto --device cpu,cl:0 --dim N=16 --repeat 2
		[[ ${lines[3]} =~ ^1\ +cl:0\  ]]
	fi
}

@test "mlprof --pipeline refuses what it cannot profile, with one line" {
	run -0 mltrain mlp.mlt --dump-step fused.mlg
	run -4 mlprof fused.mlg --pipeline auto --device cpu,cpu --dim N=16
	[ "${#lines[@]}" -eq 1 ]
	[[ $output == *"a fused step (ml_train_fuse with updates folded) cannot be pipelined" ]]
	run -0 mltrain mlp.mlt --dump-step step.mlg --pipeline auto --device cpu,cpu
	run -2 mlprof step.mlg --pipeline auto --device cpu,cpu --dim N=6
	[[ $output == "mlprof: --micro-batches 4 does not divide the batch of 6 (--dim)" ]]
	run -2 mlprof step.mlg --micro-batches 2
	[[ $output == "mlprof: --micro-batches and --schedule need --pipeline" ]]
	run -2 mlprof step.mlg --pipeline auto --device cpu,cpu --svg x.svg
	[[ $output == "mlprof: --pipeline cannot combine with --calibrate, --svg, --csv or --memory" ]]
	mlconvert mlp.mlt -o model.mlg
	run -3 mlprof model.mlg --pipeline auto --device cpu,cpu
	[[ $output == "mlprof: model.mlg: --pipeline profiles a training step (mltrain --dump-step): no 'label' or 'lr' input" ]]
	[ ! -e x.svg ]
}
