#!/usr/bin/env bats
# 8100-progress.bats: the progress bar of long work (cmd/cli.c) in every tool
# that draws one: on stderr only, when stderr is a terminal or --progress
# forces it; never under -q or --no-progress, nor in a pipe; stdout the
# same with and without it; one line per phase, fitted to COLUMNS. The
# line's formatting at its edge cases is test_cli's (tests/tools/test_cli.c).
bats_require_minimum_version 1.5.0
load helpers

setup_file() {
	cd "$BATS_FILE_TMPDIR" || return 1
	"$PY" "$TOOLS_DIR/mkmodel.py" conv >/dev/null
	"$PY" "$TOOLS_DIR/npyutil.py" make cal.npy float32 8,3,8,8 --seed 1
}

setup() {
	cp "$BATS_FILE_TMPDIR/conv.onnx" "$BATS_FILE_TMPDIR/cal.npy" .
}

# frames FILE: the states the bar was drawn in, one a line (\r and the
# erase-to-end-of-line sequence taken out), without the empty ones.
frames() {
	tr '\r' '\n' <"$1" | sed 's/\x1b\[K//g' | grep -v '^$'
}

@test "mlquant --progress draws calibration's bar on stderr; the model is the same bytes" {
	mlquant -c cal.npy --progress conv.onnx -o a.mlg 2>err
	frames err >f
	# the first state (nothing done: rate and ETA unknown) and the last
	grep -Eqx 'calibrating \[\.{30}\] 0/8 +--/s ETA --:--' f
	grep -Eqx 'calibrating \[#{30}\] 8/8 +[0-9.]+/s elapsed 0:[0-9]{2}' f
	# every state a count of the 8 batches, with a rate and an ETA or the time taken
	run -1 grep -Evx 'calibrating \[[#.]{30}\] [0-8]/8 +([0-9.]+|--)/s (ETA|elapsed) [0-9:-]+' f
	# redrawn in place (\r, erase to the end of the line), then one newline
	[ "$(head -c 1 err)" = $'\r' ]
	printf '\033[K\n' | cmp - <(tail -c 4 err)
	[ "$(wc -l <err)" -eq 1 ]
	mlquant -c cal.npy conv.onnx -o b.mlg
	cmp a.mlg b.mlg
	mlquant -c cal.npy --progress conv.onnx >c.mlg 2>/dev/null
	cmp a.mlg c.mlg
}

@test "without a terminal, or with -q or --no-progress, nothing is drawn" {
	run -0 --separate-stderr mlquant -c cal.npy conv.onnx -o a.mlg
	[ -z "$stderr" ]
	run -0 --separate-stderr mlquant -c cal.npy -q --progress conv.onnx -o a.mlg
	[ -z "$stderr" ]
	run -0 --separate-stderr mlquant -c cal.npy --progress --no-progress conv.onnx -o a.mlg
	[ -z "$stderr" ]
	run -0 --separate-stderr mlrun --random --repeat 3 conv.onnx
	[[ $stderr != *$'\r'* ]] && [[ $output != *$'\r'* ]]
	run -0 --separate-stderr mlprof --random --repeat 3 conv.onnx
	[[ $stderr != *$'\r'* ]]
}

@test "on a terminal the bar is drawn without --progress, and not with --no-progress" {
	command -v script >/dev/null || skip "no script(1)"
	on_tty mlquant -c cal.npy conv.onnx -o a.mlg
	frames tty.out | grep -Eq 'calibrating \[#{30}\] 8/8 '
	on_tty mlquant -c cal.npy --no-progress conv.onnx -o a.mlg
	[[ $(cat tty.out) != *calibrating* ]]
	on_tty mlquant -c cal.npy -q conv.onnx -o a.mlg
	[[ $(cat tty.out) != *calibrating* ]]
}

@test "mlquant --budget: measuring, then the search, whose total is unknown" {
	run -0 --separate-stderr mlquant -c cal.npy --method entropy --budget 200 --progress \
		conv.onnx -o a.mlg
	frames <(printf '%s' "$stderr") >f
	# entropy calibrates in two passes over the batches
	grep -Eqx 'calibrating \[#{30}\] 16/16 .*' f
	grep -Eqx 'measuring \[#{30}\] 18/18 +[0-9.]+/s elapsed 0:[0-9]{2}' f
	# no total: the count, the rate and the time so far, no bar and no ETA
	grep -Eqx 'budget search 0 +--/s elapsed 0:00' f
	grep -Eqx 'budget search [1-9][0-9]* +[0-9.]+/s elapsed 0:[0-9]{2}' f
	run -1 grep -q 'budget search.*ETA' f
	# one line a phase (and mlquant's own lines, such as --budget keeping the float model)
	[ "$(printf '%s' "$stderr" | grep -vc '^mlquant: ')" -eq 3 ]
}

@test "mlopt --verify --progress: one bar a round of passes; the model is the same bytes" {
	run -0 --separate-stderr mlopt --verify --progress conv.onnx -o a.mlg
	frames <(printf '%s' "$stderr") >f
	n=$(mlopt --list-passes | grep -Ec '^[a-z-]+ +-O[12] ')
	grep -Eqx "passes, round 1 \[#{30}\] +$n/$n +[0-9.]+/s elapsed 0:[0-9]{2}" f
	mlopt --verify conv.onnx -o b.mlg
	cmp a.mlg b.mlg
	# -v's lines take the bar's line and the bar comes back below them
	run -0 --separate-stderr mlopt --verify --progress -v conv.onnx -o a.mlg
	[[ $stderr == *$'\r\033[Kmlopt: --verify: '* ]]
}

@test "mlprof and mlrun --progress count the warm-up and timed runs; stdout keeps its lines" {
	run -0 --separate-stderr mlprof --random --repeat 5 --warmup 2 --progress conv.onnx
	frames <(printf '%s' "$stderr") >f
	grep -Eqx 'profiling on cpu \[\.{30}\] 0/7 +--/s ETA --:--' f
	grep -Eqx 'profiling on cpu \[#{30}\] 7/7 +[0-9.]+/s elapsed 0:[0-9]{2}' f
	[[ $output != *$'\r'* ]]
	n=${#lines[@]}
	run -0 mlprof --random --repeat 5 --warmup 2 conv.onnx
	[ "${#lines[@]}" -eq "$n" ]

	run -0 --separate-stderr mlrun --random --repeat 4 --progress conv.onnx
	frames <(printf '%s' "$stderr") >f
	grep -Eqx 'running \[#{30}\] 5/5 +[0-9.]+/s elapsed 0:[0-9]{2}' f
	head -2 <<<"$output" >with
	run -0 mlrun --random --repeat 4 conv.onnx
	head -2 <<<"$output" >without
	cmp with without
	# one run is no long work: no bar
	run -0 --separate-stderr mlrun --random --progress conv.onnx
	[ -z "$stderr" ]
}

@test "mlrun --duration --progress counts runs by time and shows the time left" {
	run -0 --separate-stderr mlrun --random --duration 1.5 --warmup 0 --progress conv.onnx
	[[ $output == *"latency ms: min "* ]]
	[[ $output != *$'\r'* ]]
	frames <(printf '%s' "$stderr") >f
	# no total, so no bar; while it runs the time left, at the end the time it took
	grep -Eqx 'running [0-9]+ +[0-9.]+/s elapsed 0:0[01]  0:0[12] left' f
	tail -1 f | grep -Eqx 'running [0-9]+ +[0-9.]+/s elapsed 0:0[12]'
	run -1 grep -q '\[' f
	# without --progress and no terminal, nothing
	run -0 --separate-stderr mlrun --random --duration 0.2 conv.onnx
	[ -z "$stderr" ]
}

@test "the bar fits COLUMNS: narrower lines lose the bar, never wrap" {
	for c in 100 50 30 12; do
		COLUMNS=$c mlprof --random --repeat 3 --progress conv.onnx 2>err >/dev/null
		frames err >f
		[ -s f ]
		awk -v c="$c" 'length($0) >= c { print "too long for " c ": " $0; bad = 1 }
			END { exit bad }' f
	done
	COLUMNS=100 mlprof --random --repeat 3 --progress conv.onnx 2>err >/dev/null
	frames err | grep -q '\[#'
	COLUMNS=30 mlprof --random --repeat 3 --progress conv.onnx 2>err >/dev/null
	run -1 grep -q '\[' <(frames err)
}

@test "an error in the middle of a bar starts on its own line" {
	# --timeout ends the runs while the bar is on the line
	run -1 --separate-stderr mlprof --random --repeat 1000000 --progress --timeout 0.5 conv.onnx
	[[ $stderr == *$'\r\033[Kmlprof: timed out after 0.5 s' ]]
}

@test "an OpenCL program build shows while the compiler runs and is gone after; a cached one shows nothing" {
	[ -n "$(mlrun --devices 2>/dev/null | grep -w cl:0)" ] || skip "no OpenCL device"
	export ML_CL_CACHE=$PWD/clcache
	"$PY" "$TOOLS_DIR/npyutil.py" make x.npy float32 1,3,8,8 --seed 2
	mlrun --progress --device cl conv.onnx -i x=x.npy 2>err >o1
	frames err >f
	grep -Eq '^building OpenCL program [a-z_]+\.cl \(once\) \[\.+\] 0/1' f
	grep -Eq '^building OpenCL program [a-z_]+\.cl \(once\) \[#+\] 1/1' f
	# each build's line erased when it is through: nothing of it is left on the screen
	printf '\r\033[K' | cmp - <(tail -c 4 err)
	[ "$(wc -l <err)" -eq 0 ]
	# from the cache: no build, no bar
	mlrun --progress --device cl conv.onnx -i x=x.npy 2>err2 >o2
	[ ! -s err2 ]
	cmp o1 o2
	# without --progress (no terminal): nothing, even when it builds
	rm -rf clcache
	mlrun --device cl conv.onnx -i x=x.npy 2>err3 >o3
	[ ! -s err3 ]
	cmp o1 o3
}
