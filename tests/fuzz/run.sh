#!/bin/sh
# run.sh: run each libFuzzer target (make fuzz) for TIME seconds, one after
# another, starting from tests/fuzz/corpus/<target>. New inputs go to a work
# folder, build-fuzz/work/<target>, so the committed corpus stays small;
# every crash, leak, timeout or out-of-memory input found is copied into
# tests/fuzz/corpus/<target>/, where `make test` replays it from then on.
# Prints the executions per target; exits 1 when any target found something.
# Usage: sh tests/fuzz/run.sh [TIME] [TARGET...]   (default 20 s, all five)
# The default is the short run to do after every change to a reader (about
# 2 minutes with `make fuzz`'s build on 2 cores); give 300 or more to search.
# It is not in .ci/run: the sanitizer build alone takes about 3 minutes there.
set -u
cd "$(dirname "$0")/../.." || exit 2
TIME=${1:-20}
[ $# -gt 0 ] && shift
TARGETS=${*:-mlg onnx text npy idx}
BIN=build-fuzz/fuzz
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}
status=0
for t in $TARGETS; do
	if [ ! -x "$BIN/fuzz_$t" ]; then
		echo "run.sh: $BIN/fuzz_$t is missing (run make fuzz)" >&2
		exit 2
	fi
	work=build-fuzz/work/$t
	art=build-fuzz/artifacts/$t
	log=build-fuzz/fuzz-$t.log
	mkdir -p "$work" "$art"
	dict=
	[ -f "tests/fuzz/$t.dict" ] && dict=-dict=tests/fuzz/$t.dict
	# -timeout: a single input slower than 10 s is reported as a hang;
	# -rss_limit_mb: a run above 2 GiB is an out-of-memory finding.
	"$BIN/fuzz_$t" -max_total_time="$TIME" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
		-print_final_stats=1 -artifact_prefix="$art/" $dict "$work" "tests/fuzz/corpus/$t" \
		>"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	found=0
	for f in "$art"/*; do
		[ -f "$f" ] || continue
		found=$((found + 1))
		cp "$f" "tests/fuzz/corpus/$t/"
	done
	echo "fuzz_$t: ${execs:-?} executions in ${TIME} s, exit status $rc, $found findings"
	if [ "$rc" -ne 0 ] || [ "$found" -gt 0 ]; then
		status=1
		grep -E '^(==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written)' "$log" | head -n 20
	fi
done
exit $status
