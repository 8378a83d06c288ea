#!/bin/sh
# run.sh: the benchmark (`make bench`, not part of `make test`): batch-1
# latency of mlrun against PyTorch and, where pip can install it into a
# venv, ONNX Runtime; mlrun's whole-process time on a small MLP; its peak
# memory on ResNet-18. B=DIR picks the build folder (default build).
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
VENV=$B/bench-venv
ORT=
if [ ! -x "$VENV/bin/python" ]; then
	/usr/bin/python3 -m venv --system-site-packages "$VENV" >/dev/null 2>&1 || rm -rf "$VENV"
fi
if [ -x "$VENV/bin/python" ]; then
	if "$VENV/bin/python" -c 'import onnxruntime' 2>/dev/null ||
		"$VENV/bin/pip" install -q onnxruntime >"$B/bench-pip.log" 2>&1; then
		ORT=$VENV/bin/python
	else
		echo "bench: pip could not install onnxruntime (see $B/bench-pip.log); ORT is left out"
	fi
fi
# ORT's quantize_static (bench_quant.py's ORT int8 column) needs onnx >= 1.14
# and ml_dtypes, newer than Debian's: pip puts them in $B/ort-path (without
# its numpy, which would shadow Debian's), prepended to ORT's PYTHONPATH.
# Pinned to versions that import with Debian 12's numpy 1.24: ml_dtypes 0.7
# (the latest) fails there with a SystemError; 0.4.1 with onnx 1.17.0 works.
ORT_PATH=$B/ort-path
if [ -n "$ORT" ] && [ ! -d "$ORT_PATH/ml_dtypes" ]; then
	if "$VENV/bin/pip" install -q --target "$ORT_PATH" "onnx==1.17.0" "ml_dtypes==0.4.1" \
		>>"$B/bench-pip.log" 2>&1; then
		rm -rf "$ORT_PATH"/numpy "$ORT_PATH"/numpy-* "$ORT_PATH"/numpy.libs
	else
		echo "bench: pip could not install onnx and ml_dtypes for ORT's quantization (see $B/bench-pip.log)"
	fi
fi
[ -d "$ORT_PATH/ml_dtypes" ] && export ML_BENCH_ORT_PATH="$ORT_PATH"
# bench.py (inference), then each part's own bench_*.py with the same
# arguments (OpenCL, training, passes, quantisation): one run, one machine,
# the peers measured in that same run. BENCH=NAME runs only bench_NAME.py.
rc=0
for f in tests/bench/bench.py tests/bench/bench_*.py; do
	[ -f "$f" ] || continue
	name=$(basename "$f" .py)
	if [ -n "${BENCH:-}" ] && [ "$name" != "bench_$BENCH" ] && [ "$name" != "$BENCH" ]; then
		continue
	fi
	echo "== $name"
	/usr/bin/python3 "$f" --bin "$B/bin" --work "$B/bench" \
		--models "$B/models" ${ORT:+--ort-python "$ORT"} || rc=1
done
exit $rc
