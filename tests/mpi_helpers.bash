# mpi_helpers.bash: what the MPI tests (7500-mpi.bats on one host,
# 7510-mpi-netns.bats across network namespaces) share: the Open MPI
# environment of a root container, the small Fashion-MNIST set they train
# on, and the comparison of two models' parameters. Load after helpers.

MPI_DATA=/usr/share/datasets/fashion-mnist
MPI_MODEL=$ML_ROOT/examples/fashion-mlp.mlt

# mpi_need: skip unless mpirun and the data set are here.
mpi_need() {
	command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed (openmpi-bin)"
	[ -f "$MPI_DATA/train-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST in $MPI_DATA"
}

# mpi_env: Open MPI as root (CI and containers), and under make asan no leak
# report: Open MPI's own allocations outlive MPI_Finalize, which
# LeakSanitizer would report as ours (test_dist covers lib/dist alone).
mpi_env() {
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	if [ -n "${ASAN_OPTIONS:-}" ]; then
		export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
	fi
}

# mltrain_data: a small dataset made here: 512 Fashion-MNIST samples as
# x_train.npy and y_train.npy in d/ (one epoch of 8 steps of 64).
mltrain_data() {
	"$PY" - "$BATS_TEST_TMPDIR/d" <<'PY'
import gzip, os, sys, numpy as np
D = '/usr/share/datasets/fashion-mnist/'
x = np.frombuffer(gzip.open(D + 'train-images-idx3-ubyte.gz').read(), np.uint8, offset=16)
y = np.frombuffer(gzip.open(D + 'train-labels-idx1-ubyte.gz').read(), np.uint8, offset=8)
os.makedirs(sys.argv[1], exist_ok=True)
np.save(sys.argv[1] + '/x_train.npy', (x[:512 * 784] / 255.).astype(np.float32).reshape(512, 1, 28, 28))
np.save(sys.argv[1] + '/y_train.npy', y[:512].astype(np.int64))
PY
}

# params_close A.mlg B.mlg [RTOL ATOL]: the float parameters of two models agree
# (default rtol 0 and atol 0: the same values).
params_close() {
	mlconvert "$1" -o "$1.onnx" && mlconvert "$2" -o "$2.onnx" || return 1
	"$PY" - "$1.onnx" "$2.onnx" "${3:-0}" "${4:-0}" <<'PY'
import sys, onnx, numpy as np
from onnx import numpy_helper as h
a = {i.name: h.to_array(i) for i in onnx.load(sys.argv[1]).graph.initializer}
b = {i.name: h.to_array(i) for i in onnx.load(sys.argv[2]).graph.initializer}
assert a and a.keys() == b.keys()
n = 0
for k in a:
    if a[k].dtype.kind == 'f':
        np.testing.assert_allclose(b[k], a[k], rtol=float(sys.argv[3]), atol=float(sys.argv[4]),
                                   err_msg=k)
        n += 1
assert n >= 4, n
PY
}
