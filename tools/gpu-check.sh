#!/bin/sh
# gpu-check.sh: the GPU check of the OpenCL issue, prepared here and run on
# a machine with a GPU, which has a driver but none of the build's
# libraries (DEVELOPERS.md "The GPU"):
#
#   tools/gpu-check.sh prepare   here, from the repository root: make, then
#                                ../shared/gpu/bundle packs build/bin and the
#                                shared libraries into build/gpu
#   tools/gpu-check.sh run       there, from the same root (build/gpu carried
#                                along): the devices, every OpenCL parity test
#                                on both GEMM engines, then
#                                tests/bench/bench_gpu.py; results in $OUT
#
# The models are exported there (its python3 has PyTorch); nothing is
# downloaded. The run prints as it goes, so what ran before a time limit
# still comes back, and it stops short of QUICK=1's full bench only when
# asked.
set -u
cmd=${1:-}
case $cmd in
prepare)
	make -j"$(nproc)" || exit 1
	[ -x ../shared/gpu/bundle ] || { echo "gpu-check: no ../shared/gpu/bundle" >&2; exit 2; }
	../shared/gpu/bundle || exit 1
	# OpenBLAS (the CPU side's BLAS, which clgemm_bench links and the tools
	# load) and its Fortran runtime, gzipped: a bare GPU machine has none,
	# and 36 MiB as they are would not fit in what travels
	mkdir -p build/gpu/blas
	for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
		p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ {print $NF; exit}')
		[ -n "$p" ] && gzip -9 -c "$p" >"build/gpu/blas/$l.gz"
	done
	du -sm build/gpu | awk '{print "gpu-check: build/gpu is " $1 " MiB with OpenBLAS"}'
	;;
run)
	[ -f build/gpu/env.sh ] || { echo "gpu-check: no build/gpu (prepare it and carry it)" >&2; exit 2; }
	. build/gpu/env.sh
	mkdir -p /tmp/gpu-blas
	for f in build/gpu/blas/*.gz; do
		[ -f "$f" ] && gzip -dc "$f" >"/tmp/gpu-blas/$(basename "$f" .gz)"
	done
	export LD_LIBRARY_PATH=/tmp/gpu-blas:$LD_LIBRARY_PATH
	OUT=${OUT:-/tmp/out}
	mkdir -p "$OUT"
	log=$OUT/gpu-check.log
	{
		echo "== devices"
		mlrun --devices
		nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv 2>/dev/null
		for eng in own clblast; do
			for t in test_clgemm test_clparity test_clfused test_clquant; do
				[ -x "build/gpu/bin/$t" ] || continue
				ML_CL_GEMM=$eng timeout 300 "build/gpu/bin/$t" >"$OUT/$t-$eng.tap" 2>&1
				echo "== $t ML_CL_GEMM=$eng: exit $?, $(grep -c '^ok' "$OUT/$t-$eng.tap") ok," \
					"$(grep -c '^not ok' "$OUT/$t-$eng.tap") not ok"
				grep '^not ok' "$OUT/$t-$eng.tap" | head -5
			done
		done
	} 2>&1 | tee "$log"
	rm -f "$OUT"/*-own.tap "$OUT"/*-clblast.tap 2>/dev/null
	echo "== bench_gpu" | tee -a "$log"
	PYTHONUNBUFFERED=1 python3 tests/bench/bench_gpu.py --bin build/gpu/bin --work /tmp/gpu-work \
		--models /tmp/gpu-models ${QUICK:+--quick} 2>&1 | tee -a "$log"
	cp /tmp/gpu-work/bench_gpu.json "$OUT/" 2>/dev/null
	;;
*)
	echo "usage: tools/gpu-check.sh prepare | run" >&2
	exit 2
	;;
esac
