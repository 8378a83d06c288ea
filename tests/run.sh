#!/bin/sh
# run.sh: run every test of the ml toolchain, as `make test` does after
# `make all`: (a) the C unit tests build/bin/test_* and the fuzz corpus
# replay, (b) the bats CLI tests,
# (c) the ONNX backend node tests, (d) the real-model tests. Prints each
# stage's summary and ends with one line "N passed, M failed"; exits 0 only
# when M is 0. B=DIR picks another build folder (default build).
# Environment: ML_CONFORMANCE (default ../shared/conformance from the repo
# root), ML_ONNX_TESTS (default $HOME/onnx-tests), ML_ONNX_JOBS (default 2).
set -u
cd "$(dirname "$0")/.." || exit 2
B=${B:-build}
case $B in
/*) BIN=$B/bin ;;
*) BIN=$PWD/$B/bin ;;
esac
LOGS=$B/test-logs
CONF=${ML_CONFORMANCE:-../shared/conformance}
DATA=${ML_ONNX_TESTS:-$HOME/onnx-tests}
JOBS=${ML_ONNX_JOBS:-2}
export B
mkdir -p "$LOGS" || exit 2

total_pass=0
total_fail=0
summary=
onnx_xfail=

# note STAGE PASSED FAILED [EXTRA]: add to the totals and remember a summary line.
note() {
	total_pass=$((total_pass + $2))
	total_fail=$((total_fail + $3))
	summary="$summary$1: $2 passed, $3 failed${4:+, $4}
"
	echo "== $1: $2 passed, $3 failed${4:+, $4}"
}

# tap_count FILE: print "PASSED FAILED SKIPPED" for a TAP stream; tests the
# plan announces but that never reported count as failed (a crash midway).
tap_count() {
	awk '
		/^1\.\.[0-9]+/ { plan = substr($0, 4) + 0 }
		/^ok / { if ($0 ~ /# [Ss][Kk][Ii][Pp]/) s++; else p++ }
		/^not ok / { f++ }
		END {
			miss = plan - (p + f + s)
			print p + 0, f + (miss > 0 ? miss : 0), s + 0
		}' "$1"
}

# unit_run PROGRAM LOG [VAR=VALUE...]: run one C unit test (in the
# environment given) into $LOGS/LOG.tap and add its counts to the unit stage.
unit_run() {
	t=$1 log=$2
	shift 2
	env "$@" timeout 600 "$t" >"$LOGS/$log.tap" 2>&1
	rc=$?
	set -- $(tap_count "$LOGS/$log.tap")
	p=$1 f=$2
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		# a crash or a failing exit without a "not ok" line still fails
		echo "$log: exit status $rc" >>"$LOGS/$log.tap"
		f=1
	fi
	if [ "$f" -gt 0 ]; then
		grep -v '^ok ' "$LOGS/$log.tap"
	fi
	echo "$log: $p passed, $f failed"
	u_pass=$((u_pass + p))
	u_fail=$((u_fail + f))
}

# (a) C unit tests: each build/bin/test_* program prints TAP; the OpenCL
# ones whose work is mostly GEMMs run again with CLBlast as the GEMM engine
# (ML_CL_GEMM=clblast; our kernels where CLBlast is missing), so that both
# engines pass them (a few seconds once POCL has CLBlast's kernels cached).
echo "== unit: C unit tests ($B/bin/test_*)"
u_pass=0 u_fail=0
for t in "$BIN"/test_*; do
	[ -x "$t" ] || continue
	unit_run "$t" "$(basename "$t")"
done
for name in test_clgemm test_clparity test_clfused test_clquant; do
	[ -x "$BIN/$name" ] || continue
	unit_run "$BIN/$name" "$name-clblast" ML_CL_GEMM=clblast
done
# the depthwise cases again with the GPU's kernel (one work-item per output
# element), which POCL, a CPU device, would not choose
[ -x "$BIN/test_clparity" ] &&
	unit_run "$BIN/test_clparity" "test_clparity-dwpx" ML_CL_DW=px CLPARITY_ONLY=depthwise
note unit "$u_pass" "$u_fail"

# (a2) the fuzz corpus (tests/fuzz/corpus: seeds and every crash found),
# replayed through the fuzz targets without libFuzzer: one test per target.
echo "== fuzz: corpus replay ($B/bin/fuzz_replay)"
if [ -x "$BIN/fuzz_replay" ]; then
	timeout 1800 "$BIN/fuzz_replay" tests/fuzz/corpus >"$LOGS/fuzz.tap" 2>&1
	rc=$?
	cat "$LOGS/fuzz.tap"
	set -- $(tap_count "$LOGS/fuzz.tap")
	p=$1 f=$2
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "fuzz_replay: exit status $rc"
		f=1
	fi
	note fuzz "$p" "$f"
else
	echo "fuzz: $BIN/fuzz_replay is missing"
	note fuzz 0 1
fi

# run_bats STAGE FILE...: the bats files as TAP, counted.
run_bats() {
	stage=$1
	shift
	if ! command -v bats >/dev/null 2>&1; then
		echo "$stage: bats is not installed (apt-get install bats)"
		note "$stage" 0 1
		return
	fi
	bats --tap "$@" >"$LOGS/$stage.tap" 2>&1
	rc=$?
	cat "$LOGS/$stage.tap"
	set -- $(tap_count "$LOGS/$stage.tap")
	p=$1 f=$2 s=$3
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "$stage: bats exited with status $rc"
		f=1
	fi
	note "$stage" "$p" "$f" "$s skipped"
}

# (b) the bats CLI tests, all but the real models (stage d).
echo "== bats: CLI tests (tests/*.bats)"
files=
for f in tests/*.bats; do
	case $f in
	tests/9100-models.bats) ;;
	*) [ -f "$f" ] && files="$files $f" ;;
	esac
done
if [ -n "$files" ]; then
	run_bats bats $files
else
	echo "bats: no tests/*.bats"
	note bats 0 1
fi

# (c) the ONNX backend node tests through mlconvert and mlrun.
echo "== onnx: ONNX backend node tests ($CONF)"
if [ ! -x "$CONF/run-onnx-tests" ] || [ ! -x "$CONF/gen-onnx-tests" ]; then
	echo "onnx: warning: no conformance harness in '$CONF' (set ML_CONFORMANCE)"
	note onnx 0 1
elif ! "$CONF/gen-onnx-tests" "$DATA" >"$LOGS/onnx-gen.log" 2>&1; then
	tail -n 20 "$LOGS/onnx-gen.log"
	echo "onnx: gen-onnx-tests could not make the data in '$DATA'"
	note onnx 0 1
else
	tail -n 1 "$LOGS/onnx-gen.log"
	rm -f "$B/onnx-results.tsv"
	# ML_CHECK_SHAPES=1: every kernel result must agree with static inference
	ML_CHECK_SHAPES=1 "$CONF/run-onnx-tests" --data "$DATA" --bin "$BIN" --jobs "$JOBS" \
		--expected-failures tests/onnx-expected-failures.txt \
		--results "$B/onnx-results.tsv" >"$LOGS/onnx.log" 2>&1
	rc=$?
	cat "$LOGS/onnx.log"
	last=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$LOGS/onnx.log" | tail -n 1)
	if [ -z "$last" ] || [ ! -f "$B/onnx-results.tsv" ]; then
		echo "onnx: run-onnx-tests exited with status $rc and no result"
		note onnx 0 1
	else
		set -- $last
		o_pass=$1 o_skip=$5
		# the runner's M counts expected failures too; ours counts only the others
		o_unexp=$(awk -F'\t' 'NR > 1 && $2 != "pass" && $2 != "skipped" && $3 != "yes"' \
			"$B/onnx-results.tsv" | wc -l)
		onnx_xfail=$(awk -F'\t' 'NR > 1 && $2 != "pass" && $2 != "skipped" && $3 == "yes"' \
			"$B/onnx-results.tsv" | wc -l)
		if [ "$rc" -ne 0 ] && [ "$o_unexp" -eq 0 ]; then
			o_unexp=1
		fi
		note onnx "$o_pass" "$o_unexp" "$o_skip skipped, $onnx_xfail expected failures"
	fi
fi

# (d) real models exported from PyTorch (cached in $B/models).
echo "== models: real models (tests/9100-models.bats)"
if [ -f tests/9100-models.bats ]; then
	run_bats models tests/9100-models.bats
else
	echo "models: tests/9100-models.bats is missing"
	note models 0 1
fi

echo
echo "== summary"
printf '%s' "$summary"
if [ -n "$onnx_xfail" ]; then
	echo "onnx: $onnx_xfail expected failures"
fi
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
