#!/usr/bin/env bats
# 7500-mpi.bats: data-parallel training over Open MPI on loopback (lib/dist,
# through the test driver tests/tools/dist_train.c): two ranks train the
# Fashion-MNIST MLP to the parameters one process reaches with the same
# global batch, keep their parameters identical, and only rank 0 writes.
# Skipped where mpirun or the data set is missing.
#
# Tolerance: after 12 SGD steps (momentum 0.9, lr 0.05, global batch 64)
# the two runs differ only by the order of float additions (measured: at
# most 5e-8 on weights of size ~0.1); the check allows atol 1e-5 plus rtol
# 1e-4, while a run with another global batch differs by ~1e-3.
bats_require_minimum_version 1.5.0
load helpers

DATA=/usr/share/datasets/fashion-mnist
MODEL=$ML_ROOT/examples/fashion-mlp.mlt

setup() {
	command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed (openmpi-bin)"
	[ -f "$DATA/train-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST in $DATA"
	# root in CI and containers; shared memory between the ranks of one host,
	# without the single-copy (ptrace) path that containers often forbid
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
	export OMPI_MCA_rmaps_base_oversubscribe=1
	# under make asan: Open MPI's own allocations outlive MPI_Finalize, which
	# LeakSanitizer would report as ours (test_dist covers lib/dist alone)
	if [ -n "${ASAN_OPTIONS:-}" ]; then
		export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
	fi
}

# mpi2 ARGS...: dist_train on two ranks of this host.
mpi2() {
	timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 "$ML_BIN/dist_train" "$@"
}

TRAIN_ARGS="-k 12 -b 64 --limit 4096 -j 1"

@test "mpirun -np 2 gives the parameters of one process with the same global batch" {
	run -0 dist_train $TRAIN_ARGS --params-dir one "$MODEL" "$DATA"
	[[ ${lines[0]} == "ranks 1 "* ]]
	run -0 mpi2 $TRAIN_ARGS --params-dir two "$MODEL" "$DATA"
	[[ $output == *"ranks 2 "* ]]
	[ "$(ls two | wc -l)" -eq 6 ]
	npcmpdir two one --rtol 1e-4 --atol 1e-5
}

@test "the same global batch cut into many small buckets gives the same parameters" {
	run -0 dist_train $TRAIN_ARGS --optimizer adam --lr 0.001 --params-dir one "$MODEL" "$DATA"
	run -0 mpi2 $TRAIN_ARGS --optimizer adam --lr 0.001 --bucket-mb 0.05 --params-dir two \
		"$MODEL" "$DATA"
	# 0.05 MiB buckets: the 784x256 weights alone, then the rest in pieces
	[[ $output =~ buckets\ ([0-9]+) ]]
	[ "${BASH_REMATCH[1]}" -ge 3 ]
	npcmpdir two one --rtol 1e-4 --atol 1e-5
}

@test "a different global batch gives different parameters (the check can fail)" {
	run -0 dist_train $TRAIN_ARGS --params-dir one "$MODEL" "$DATA"
	run -0 mpi2 -k 12 -b 32 --limit 4096 -j 1 --params-dir two "$MODEL" "$DATA"
	run -1 npcmpdir two one --rtol 1e-4 --atol 1e-5
}

@test "the ranks keep identical parameters, and rank 0 alone writes the model" {
	run -0 mpi2 -k 6 -b 64 --limit 2048 -j 1 --check -o out.mlg "$MODEL" "$DATA"
	[[ $output == *"max parameter difference between ranks 0"* ]]
	# one summary: only rank 0 prints and writes
	[ "$(grep -c '^ranks 2 ' <<<"$output")" -eq 1 ]
	[ -s out.mlg ]
	no_temp_files
}

@test "a missing libmpi makes a run that needs MPI fail with status 4" {
	ML_MPI_LIB=/nonexistent/libmpi.so.40 run -4 --separate-stderr \
		dist_train --mpi -k 1 "$MODEL" "$DATA"
	[[ $stderr == "dist_train: MPI is not available: "*"cannot open shared object file"* ]]
	# without MPI asked for, the same environment trains as one process
	ML_MPI_LIB=/nonexistent/libmpi.so.40 run -0 dist_train -k 2 -b 16 --limit 256 "$MODEL" "$DATA"
}

@test "the tools do not link libmpi (it is loaded only when training is distributed)" {
	for t in mlconvert mlopt mlquant mlrun mlprof mltrain; do
		[ -x "$ML_BIN/$t" ] || continue
		run -0 ldd "$ML_BIN/$t"
		[[ $output != *libmpi* ]]
	done
}

# The tool itself: mltrain under mpirun on a small dataset made here (512
# Fashion-MNIST samples as x_train.npy/y_train.npy, one epoch of 8 steps).
mltrain_data() {
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/d" <<'PY'
import gzip, os, sys, numpy as np
D = '/usr/share/datasets/fashion-mnist/'
x = np.frombuffer(gzip.open(D + 'train-images-idx3-ubyte.gz').read(), np.uint8, offset=16)
y = np.frombuffer(gzip.open(D + 'train-labels-idx1-ubyte.gz').read(), np.uint8, offset=8)
os.makedirs(sys.argv[1], exist_ok=True)
np.save(sys.argv[1] + '/x_train.npy', (x[:512 * 784] / 255.).astype(np.float32).reshape(512, 1, 28, 28))
np.save(sys.argv[1] + '/y_train.npy', y[:512].astype(np.int64))
PY
}

MLTRAIN_ARGS="--batch 64 --momentum 0.9 --lr 0.05 --threads 1"

@test "mpirun -np 2 mltrain gives the model of one process with the same global batch" {
	mltrain_data
	cd "$BATS_TEST_TMPDIR"
	run mltrain "$MODEL" --data d $MLTRAIN_ARGS -o one.mlg
	[ "$status" -eq 0 ]
	one=$output
	run timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 "$ML_BIN/mltrain" "$MODEL" \
		--data d $MLTRAIN_ARGS -o two.mlg
	[ "$status" -eq 0 ]
	# rank 0 alone reports: one epoch line, with the loss of one process
	[ "$(printf '%s\n' "$output" | grep -c '^epoch 1/1')" -eq 1 ]
	[ "$(printf '%s\n' "$output" | sed 's/,.*//')" = "$(printf '%s\n' "$one" | sed 's/,.*//')" ]
	mlconvert one.mlg -o one.onnx
	mlconvert two.mlg -o two.onnx
	/usr/bin/python3 -c "
import onnx, numpy as np
from onnx import numpy_helper as h
a = {i.name: h.to_array(i) for i in onnx.load('one.onnx').graph.initializer}
b = {i.name: h.to_array(i) for i in onnx.load('two.onnx').graph.initializer}
assert a and a.keys() == b.keys()
for k in a:
    if a[k].dtype.kind == 'f':
        np.testing.assert_allclose(b[k], a[k], rtol=1e-4, atol=1e-5, err_msg=k)
"
	# rank 0 alone wrote: no temp files left
	[ -z "$(ls | grep '\.tmp')" ]
}

@test "mltrain --mpi in a lone process is a world of one" {
	mltrain_data
	cd "$BATS_TEST_TMPDIR"
	run mltrain "$MODEL" --data d $MLTRAIN_ARGS --mpi --bucket-mb 0 -q -o m.mlg
	[ "$status" -eq 0 ]
	[ -f m.mlg ]
}

@test "mpirun -np 2 mltrain with a global batch of 1 fails on every rank (usage)" {
	mltrain_data
	cd "$BATS_TEST_TMPDIR"
	run timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 "$ML_BIN/mltrain" "$MODEL" \
		--data d --batch 1 -o x.mlg
	[ "$status" -ne 0 ]
	[ ! -f x.mlg ]
}
