#!/usr/bin/env bats
# 0140-chaos.bats: every tool killed at random moments, SIGKILL or SIGINT,
# seeded: what it writes is always the old file whole or the new one whole,
# a SIGINT leaves no temporary file, a later normal run removes what a
# SIGKILL left and leaves nothing of its own, and mltrain resumed after any
# number of kills ends with the bytes of the run never interrupted.
# ML_CHAOS_N sets the kills per tool (default 4, a few seconds per tool in
# CI; 100 for the long run by hand), ML_CHAOS_SEED the seed (default 1).
bats_require_minimum_version 1.5.0
load helpers

N=${ML_CHAOS_N:-4}
SEED=${ML_CHAOS_SEED:-1}

# now_ms: the wall clock in milliseconds.
now_ms() {
	echo $(($(date +%s%N) / 1000000))
}

# sleep_ms MS: sleep that many milliseconds.
sleep_ms() {
	sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"
}

# kill_randomly MS CMD...: start CMD, kill it after a random time in [0, 3MS/4]
# ms with SIGKILL or SIGINT (chosen at random), wait; sets SIG and RC. Job
# control is on, so the background command gets SIGINT as it would from a
# terminal (without it, a shell starts background commands ignoring it).
kill_randomly() {
	local ms=$1 pid
	shift
	set -m
	"$@" >/dev/null 2>&1 &
	pid=$!
	sleep_ms $((RANDOM % (ms * 3 / 4 + 1)))
	if ((RANDOM % 2)); then SIG=KILL; else SIG=INT; fi
	kill -$SIG $pid 2>/dev/null || true
	RC=0
	wait $pid || RC=$?
	set +m
	((++KILLS[$SIG]))
	((++ENDS[$RC]))
}

# tally WHAT: one line on the report (fd 3) about the kills just made.
declare -gA KILLS ENDS
tally() {
	local k line="# $1: ${KILLS[KILL]:-0} SIGKILL, ${KILLS[INT]:-0} SIGINT; exit statuses:"
	for k in $(printf '%s\n' "${!ENDS[@]}" | sort -n); do
		line="$line $k x${ENDS[$k]}"
	done
	echo "$line" >&3
	KILLS=() ENDS=()
}

# temps: the temporary files of atomic writes here, one a line, sorted.
temps() {
	find . -name '*.tmp.??????' | sort
}

# no_new_temps BEFORE: fail when a temporary file is here that BEFORE (the
# output of temps before a run) lacks: one the run left behind.
no_new_temps() {
	local extra
	extra=$(comm -13 <(echo "$1") <(temps) | grep . || true)
	[ -z "$extra" ] || { echo "temporary files left behind: $extra" >&2; return 1; }
}

# age_temps: make the temporary files here old enough for a writer to take
# them as stale (a killed writer's; a live one would hold a lock).
age_temps() {
	local f
	for f in $(find . -name '*.tmp.??????'); do
		touch -d '2 minutes ago' "$f"
	done
}

# chaos_file OLD NEW TARGET CMD...: N times: TARGET starts as a copy of OLD,
# CMD (which writes NEW's bytes to TARGET) is killed at random; TARGET is
# then OLD or NEW, whole, and after a SIGINT no temporary file is left.
# Then a normal run: TARGET is NEW and no temporary file is left at all.
chaos_file() {
	local old=$1 new=$2 target=$3 t0 ms i before olds=0
	shift 3
	"$@" >/dev/null
	t0=$(now_ms)
	"$@" >/dev/null
	ms=$(($(now_ms) - t0))
	cmp "$target" "$new"
	for ((i = 0; i < N; i++)); do
		cp "$old" "$target"
		before=$(temps)
		kill_randomly $ms "$@"
		cmp -s "$target" "$old" && ((++olds))
		if ! cmp -s "$target" "$old" && ! cmp -s "$target" "$new"; then
			echo "kill $i ($SIG after start, status $RC): $target is neither old nor new" >&2
			return 1
		fi
		if [ "$SIG" = INT ]; then
			no_new_temps "$before" || { echo "kill $i: SIGINT left it" >&2; return 1; }
		fi
	done
	age_temps
	"$@" >/dev/null
	cmp "$target" "$new"
	no_temp_files
	tally "$1, $N kills: $olds old, $((N - olds)) new"
}

@test "chaos: mlconvert, mlopt and mlquant killed at random" {
	RANDOM=$SEED
	mkmodel mlp784
	mkmodel conv
	mlconvert conv.onnx -o old.mlg
	mlconvert mlp784.onnx -o new.mlg
	chaos_file old.mlg new.mlg out.mlg mlconvert mlp784.onnx -o out.mlg
	mlopt -O2 new.mlg -o newopt.mlg
	chaos_file old.mlg newopt.mlg out.mlg mlopt -O2 new.mlg -o out.mlg
	mlquant --dtype fp16 new.mlg -o newq.mlg
	chaos_file old.mlg newq.mlg out.mlg mlquant --dtype fp16 new.mlg -o out.mlg
}

@test "chaos: mlrun -o DIR killed at random" {
	RANDOM=$SEED
	mkmodel mlp784
	mlconvert mlp784.onnx -o m.mlg
	mlrun m.mlg --random --seed 1 -o oldd
	mlrun m.mlg --random --seed 2 -o newd
	mkdir out
	chaos_file oldd/y.npy newd/y.npy out/y.npy mlrun m.mlg --random --seed 2 -o out
}

@test "chaos: mlprof -o killed at random leaves no partial report" {
	RANDOM=$SEED
	mkmodel mlp784
	echo '{"old": true}' >old.json
	mlprof mlp784.onnx --random --repeat 20 --json -o r.json
	t0=$(now_ms)
	mlprof mlp784.onnx --random --repeat 20 --json -o r.json
	ms=$(($(now_ms) - t0))
	for ((i = 0; i < N; i++)); do
		cp old.json r.json
		before=$(temps)
		kill_randomly $ms mlprof mlp784.onnx --random --repeat 20 --json -o r.json
		# the timings differ from run to run: whole is valid JSON of the report
		cmp -s r.json old.json || json_get r.json model >/dev/null ||
			{ echo "kill $i ($SIG): r.json is partial" >&2; return 1; }
		[ "$SIG" = KILL ] || no_new_temps "$before"
	done
	age_temps
	mlprof mlp784.onnx --random --repeat 2 --json -o r.json
	no_temp_files
	tally "mlprof, $N kills"
}

# mkidx DIR N: IDX files of N noisy 28x28 images whose class (0-9) shows as a
# bright row, train and t10k.
mkidx() {
	"$PY" - "$1" "$2" <<'PYEOF'
import os, struct, sys
import numpy as np
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
r = np.random.RandomState(1)
def idx(a):
    a = np.asarray(a, dtype=np.uint8)
    return bytes([0, 0, 8, a.ndim]) + b"".join(struct.pack(">I", x) for x in a.shape) + a.tobytes()
y = r.randint(0, 10, n)
x = (r.rand(n, 28, 28) * 200).astype(np.uint8)
x[np.arange(n), y * 2, :] = 255
for s in ("train", "t10k"):
    open(f"{d}/{s}-images-idx3-ubyte", "wb").write(idx(x))
    open(f"{d}/{s}-labels-idx1-ubyte", "wb").write(idx(y))
PYEOF
}

@test "chaos: mltrain killed at random resumes to the bytes of the uninterrupted run" {
	RANDOM=$SEED
	mkidx d 1000
	cp "$ML_ROOT/examples/fashion-mlp.mlt" m.mlt
	args="--data d --epochs 3 --batch 50 --checkpoint-every 7 --threads 1 -q"
	t0=$(now_ms)
	mltrain m.mlt $args -o ref.mlg
	ms=$(($(now_ms) - t0))
	# chains of runs, each resumed from the checkpoint the last one left,
	# until N of them were killed; every chain that ends is the reference
	local i=0 tries=0 chains=0
	while ((i < N && tries < 4 * N)); do
		((++tries))
		before=$(temps)
		if [ -e out.ckpt.mlg ]; then
			kill_randomly $ms mltrain --resume out.ckpt.mlg $args -o out.mlg
		else
			kill_randomly $ms mltrain m.mlt $args -o out.mlg
		fi
		# a checkpoint, when there is one, is whole, and so is the model
		for f in out.ckpt.mlg out.mlg; do
			[ ! -e $f ] || mlconvert --info $f >/dev/null ||
				{ echo "kill $i ($SIG, status $RC): $f is damaged" >&2; return 1; }
		done
		[ "$SIG" = KILL ] || no_new_temps "$before"
		if [ "$RC" -eq 0 ]; then
			cmp ref.mlg out.mlg
			rm out.mlg out.ckpt.mlg
			((++chains))
		else
			((++i))
		fi
	done
	[ "$i" -eq "$N" ]
	age_temps
	if [ -e out.ckpt.mlg ]; then
		mltrain --resume out.ckpt.mlg $args -o out.mlg
	else
		mltrain m.mlt $args -o out.mlg
	fi
	cmp ref.mlg out.mlg
	no_temp_files
	tally "mltrain, $i runs killed, $((chains + 1)) chains resumed to the reference"
}
