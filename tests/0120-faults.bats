#!/usr/bin/env bats
# 0120-faults.bats: the tools under failing output: a full disk (/dev/full,
# a file size limit), a reader that stops early (| head), a closed stdout,
# and two tools writing the same file at once. A failed write exits 1 and
# leaves no partial file; a reader that has gone ends a tool quietly. Then
# the defects of issue 20: mltrain under a memory limit (OpenBLAS) and its
# SIGTERM in a long step, a real out-of-memory, signals during a write, the
# stale temporary files of killed writers, the folder's fsync, the mode and
# symlinks of an overwrite, mlrun's colliding output names, and mltrain's
# outputs checked before it trains.
bats_require_minimum_version 1.5.0
load helpers
# limited KB CMD...: run CMD with a file size limit of KB kilobytes, as on
# a disk that fills up; SIGXFSZ is ignored, so writes fail with EFBIG.
limited() {
	local kb=$1
	shift
	bash -c 'trap "" XFSZ; ulimit -f "$0"; exec "$@"' "$kb" "$@"
}

@test "writing to /dev/full exits 1 with one message, for every output path" {
	mkmodel mlp
	for fmt in mlg onnx mlt; do
		run -1 --separate-stderr mlconvert --to "$fmt" mlp.onnx -o /dev/full
		[ "${#stderr_lines[@]}" -eq 1 ]
		[[ $stderr == "mlconvert: "*"/dev/full"* ]]
		run -1 --separate-stderr sh -c "mlconvert -f --to $fmt mlp.onnx >/dev/full"
		[ "${#stderr_lines[@]}" -eq 1 ]
		[[ $stderr == "mlconvert: "* ]]
	done
	run -1 --separate-stderr sh -c 'mlrun mlp.onnx --random --json >/dev/full'
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: "* ]]
}

@test "a disk that fills up mid-write leaves no partial file and keeps the old one" {
	mkmodel mlp784
	run -1 --separate-stderr limited 64 mlconvert mlp784.onnx -o out.mlg
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlconvert: "*"out.mlg"* ]]
	[ ! -e out.mlg ]
	no_temp_files
	mkmodel mlp
	mlconvert mlp.onnx -o keep.mlg
	cp keep.mlg before.mlg
	run -1 --separate-stderr limited 64 mlconvert --to mlt mlp784.onnx -o keep.mlg
	cmp keep.mlg before.mlg
	no_temp_files
}

@test "mlrun leaves no partial .npy file when the disk fills up" {
	"$PY" - <<-'EOF'
	import onnx
	from onnx import helper, TensorProto as T
	g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "big",
	    [helper.make_tensor_value_info("x", T.FLOAT, [256, 1024])],
	    [helper.make_tensor_value_info("y", T.FLOAT, [256, 1024])])
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	onnx.save(m, "big.onnx")
	EOF
	mkdir out
	run -1 --separate-stderr limited 256 mlrun big.onnx --random -o out
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: "* ]]
	[ -z "$(ls out)" ]
}

@test "a reader that stops early ends the tool quietly, without a hang" {
	mkmodel mlp784
	mlconvert mlp784.onnx -o big.mlg
	# every output is far larger than a pipe holds, so each write meets the closed pipe
	for cmd in "mlconvert mlp784.onnx" "mlconvert -f big.mlg" "mlconvert --to onnx big.mlg" \
		"mlconvert --to mlt big.mlg" "mlconvert - <big.mlg"; do
		run -1 --separate-stderr timeout 60 bash -c "set -o pipefail; $cmd | head -c 10 | wc -c"
		[ "$output" = 10 ] && [ -z "$stderr" ] || { echo "$cmd: $output: $stderr" >&2; return 1; }
	done
	run --separate-stderr timeout 60 bash -c \
		'set -o pipefail; mlrun big.mlg --random --repeat 3 | head -c 1 | wc -c'
	[ "$status" -eq 0 ] || [ "$status" -eq 1 ]
	[ -z "$stderr" ]
}

@test "a closed stdout is a write error with status 1" {
	mkmodel mlp
	run -1 --separate-stderr sh -c 'mlconvert -f mlp.onnx >&-'
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlconvert: "* ]]
	run -1 --separate-stderr sh -c 'mlconvert --info mlp.onnx >&-'
	[[ $stderr == "mlconvert: "* ]]
	run -1 --separate-stderr sh -c 'mlrun mlp.onnx --random >&-'
	[[ $stderr == "mlrun: "* ]]
}

@test "tools writing the same output at once leave one whole file" {
	mkmodel mlp784
	mkmodel conv
	mlconvert mlp784.onnx -o a.mlg
	mlconvert conv.onnx -o b.mlg
	for i in 1 2 3 4 5 6 7 8; do
		mlconvert mlp784.onnx -o same.mlg & p1=$!
		mlconvert conv.onnx -o same.mlg & p2=$!
		mlconvert a.mlg -o same.mlg & p3=$!
		mlconvert b.mlg -o same.mlg & p4=$!
		wait $p1 && wait $p2 && wait $p3 && wait $p4
		cmp -s same.mlg a.mlg || cmp same.mlg b.mlg
	done
	no_temp_files
	# mlrun's .npy outputs likewise
	mlrun a.mlg --random --seed 1 -o one
	mlrun a.mlg --random --seed 2 -o two
	for i in 1 2 3 4 5 6; do
		rm -rf out
		mlrun a.mlg --random --seed 1 -o out & p1=$!
		mlrun a.mlg --random --seed 2 -o out & p2=$!
		wait $p1 && wait $p2
		cmp -s out/y.npy one/y.npy || cmp out/y.npy two/y.npy
	done
	no_temp_files
}

# no_asan: skip under AddressSanitizer (make asan), which reserves terabytes
# of address space at start and so cannot run under ulimit -v.
no_asan() {
	case "${B:-build}:${ASAN_OPTIONS:-}" in
	*asan*:* | *:?*) skip "AddressSanitizer cannot run under ulimit -v" ;;
	esac
}

# mkidx DIR N: IDX files of N random 28x28 images and labels 0-9 (train and t10k).
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
x, y = (r.rand(n, 28, 28) * 255).astype(np.uint8), r.randint(0, 10, n)
for s in ("train", "t10k"):
    open(f"{d}/{s}-images-idx3-ubyte", "wb").write(idx(x))
    open(f"{d}/{s}-labels-idx1-ubyte", "wb").write(idx(y))
PYEOF
}

@test "mltrain under a memory limit finishes: OpenBLAS is not left retrying its buffer" {
	# OpenBLAS maps 128 MiB per thread and retries a failed mmap forever: with
	# ulimit -v this run once spun until SIGKILL (status 137)
	no_asan
	mkidx d 2000
	run -0 --separate-stderr timeout -k 2 30 bash -c 'ulimit -v 130000; exec mltrain "$0" \
		--data d --epochs 1 --threads 1 -q -o m.mlg' "$ML_ROOT/examples/fashion-mlp.mlt"
	[ -s m.mlg ]
	no_temp_files
}

@test "SIGTERM ends mltrain within a second even in the middle of a long step" {
	mkidx d 4096
	cat >wide.mlt <<-'MLT'
	<
	    ir_version: 8,
	    opset_import: ["" : 17],
	    seed: 0
	>
	wide (float[N,1,28,28] x) => (float[N,10] y)
	{
	    flatten
	    dense(units=4096, act=relu)
	    dense(units=4096, act=relu)
	    dense(units=10)
	}
	MLT
	# a step of 4096 samples through the portable product takes many seconds
	ML_BLAS=none mltrain wide.mlt --data d --batch 4096 --threads 1 -v -o w.mlg 2>err &
	pid=$!
	for i in $(seq 300); do grep -q "training from step" err && break; sleep 0.1; done
	grep -q "training from step" err
	sleep 0.2
	t0=$(date +%s%N)
	kill -TERM $pid
	rc=0
	wait $pid || rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	[ "$rc" -eq 143 ]
	[ "$ms" -lt 3000 ] || { echo "took $ms ms" >&2; return 1; }
	grep -q "interrupted in the middle of a step; the last checkpoint is kept" err
	[ ! -e w.mlg ]
	no_temp_files
}

@test "a real out-of-memory is status 1 'out of memory', not the allocation cap" {
	no_asan
	# a sparse 300 MB file: reading it needs more than ulimit -v leaves
	truncate -s 300M big.onnx
	run -1 --separate-stderr bash -c 'ulimit -v 150000; exec mlconvert big.onnx -o o.mlg'
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlconvert: "*"out of memory"* ]]
	[[ $stderr != *"allocation cap"* ]]
	[ ! -e o.mlg ]
	# the cap itself is still reported as such, with status 3
	run -3 --separate-stderr mlconvert --max-alloc 1M big.onnx -o o.mlg
	[[ $stderr == *"allocation cap"* ]]
}

# require_strace: skip unless strace can trace here (it needs ptrace); under
# make asan, turn LeakSanitizer off, which cannot work under ptrace.
require_strace() {
	command -v strace >/dev/null && strace -o /dev/null true 2>/dev/null ||
		skip "strace cannot trace here"
	if [ -n "${ASAN_OPTIONS:-}" ]; then
		export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
	fi
}

@test "SIGINT, SIGTERM and SIGHUP during a write remove the temporary file" {
	require_strace
	mkmodel mlp
	mlconvert mlp.onnx -o old.mlg
	sigs="INT TERM HUP"
	# under nohup SIGHUP comes ignored, and the tools keep it so (as they should)
	ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status 2>/dev/null)
	if [ -n "$ign" ] && [ $((0x$ign & 1)) -ne 0 ]; then
		sigs="INT TERM"
		echo "# SIGHUP is ignored here (nohup): only INT and TERM" >&3
	fi
	for sig in $sigs; do
		cp old.mlg m.mlg
		# the write stops in its fsync for 5 s: the signal lands mid-write (SIGINT
		# made deliverable again: a shell's & starts commands with it ignored)
		"$PY" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' strace -f -o /dev/null -e trace=fsync -e inject=fsync:delay_enter=5s \
			mlconvert --to onnx old.mlg -o m.mlg &
		spid=$!
		for i in $(seq 100); do ls m.mlg.tmp.* >/dev/null 2>&1 && break; sleep 0.05; done
		ls m.mlg.tmp.* >/dev/null
		kill -$sig $(pgrep -P $spid)
		rc=0
		wait $spid || rc=$?
		[ "$rc" -gt 128 ] || { echo "$sig: status $rc" >&2; return 1; }
		no_temp_files
		cmp m.mlg old.mlg
	done
}

@test "a later write removes the stale temporary files of its target, and only those" {
	mkmodel mlp
	printf x >m.mlg.tmp.AbC123	# a killed writer's, an hour old
	touch -d '1 hour ago' m.mlg.tmp.AbC123
	printf x >m.mlg.tmp.XyZ789	# a live writer's, just made
	printf x >m.mlg.tmp.old		# not our name pattern
	touch -d '1 hour ago' m.mlg.tmp.old
	printf x >other.mlg.tmp.Qq1234	# another target's
	touch -d '1 hour ago' other.mlg.tmp.Qq1234
	run -0 mlconvert mlp.onnx -o m.mlg
	[ ! -e m.mlg.tmp.AbC123 ]
	[ -e m.mlg.tmp.XyZ789 ] && [ -e m.mlg.tmp.old ] && [ -e other.mlg.tmp.Qq1234 ]
	# an old one that a live writer holds locked stays too
	touch -d '1 hour ago' m.mlg.tmp.XyZ789
	flock m.mlg.tmp.XyZ789 mlconvert mlp.onnx -o m.mlg
	[ -e m.mlg.tmp.XyZ789 ]
	mlconvert mlp.onnx -o m.mlg
	[ ! -e m.mlg.tmp.XyZ789 ]
}

@test "the folder is synced after the rename" {
	require_strace
	mkmodel mlp
	mkdir out
	strace -f -y -o trace -e trace=rename,fsync mlconvert mlp.onnx -o out/m.mlg
	# the rename, then an fsync of the folder
	awk '/rename\(/ { r = 1; next } r && /fsync\([0-9]+<[^>]*\/out>\)/ { ok = 1 } END { exit !ok }' trace
}

@test "an overwrite keeps the file's mode and writes through a symbolic link" {
	mkmodel mlp
	mlconvert mlp.onnx -o m.mlg
	chmod 600 m.mlg
	mlconvert --to mlt mlp.onnx -o m.mlg
	[ "$(stat -c %a m.mlg)" = 600 ]
	chmod 640 m.mlg
	mkdir sub
	mv m.mlg sub/real.mlg
	ln -s sub/real.mlg link.mlg
	mlconvert mlp.onnx -o link.mlg
	[ -L link.mlg ]
	[ "$(readlink link.mlg)" = sub/real.mlg ]
	[ "$(stat -c %a sub/real.mlg)" = 640 ]
	mlconvert --info sub/real.mlg >/dev/null
	[ "$(head -c 3 sub/real.mlg)" = MLG ]
	no_temp_files
	# .npy outputs of mlrun likewise
	mkdir out
	mlrun mlp.onnx --random -o out
	chmod 604 out/y.npy
	mv out/y.npy y-real.npy
	ln -s ../y-real.npy out/y.npy
	mlrun mlp.onnx --random --seed 3 -o out
	[ -L out/y.npy ] && [ "$(stat -c %a y-real.npy)" = 604 ]
	# a link to nothing is refused, not replaced
	ln -s nowhere/x.mlg dangling.mlg
	run -1 --separate-stderr mlconvert mlp.onnx -o dangling.mlg
	[[ $stderr == *"dangling.mlg"*"dangling symbolic link"* ]]
	[ -L dangling.mlg ]
}

@test "mltrain's checkpoints keep their mode and write through a link" {
	mkidx d 300
	ln -s real.mlg ck.mlg
	touch real.mlg
	chmod 600 real.mlg
	mltrain "$ML_ROOT/examples/fashion-mlp.mlt" --data d --epochs 1 -q -o out.mlg \
		--checkpoint ck.mlg
	[ -L ck.mlg ] && [ "$(stat -c %a real.mlg)" = 600 ]
	mlconvert --info real.mlg >/dev/null
	no_temp_files
}

@test "mlrun -o refuses two outputs whose file names collide, naming both" {
	"$PY" - <<-'EOF'
	import onnx
	from onnx import helper, TensorProto as T
	g = helper.make_graph([helper.make_node("Relu", ["x"], ["a/b"]),
	    helper.make_node("Neg", ["x"], ["a_b"])], "two",
	    [helper.make_tensor_value_info("x", T.FLOAT, [2])],
	    [helper.make_tensor_value_info("a/b", T.FLOAT, [2]),
	     helper.make_tensor_value_info("a_b", T.FLOAT, [2])])
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	onnx.save(m, "two.onnx")
	EOF
	run -3 --separate-stderr mlrun two.onnx --random -o out
	[ "$stderr" = "mlrun: outputs 'a/b' and 'a_b' would both be written to out/a_b.npy" ]
	[ ! -e out/a_b.npy ]
	# without -o the outputs are printed, and nothing collides
	run -0 mlrun two.onnx --random
}

@test "mltrain checks every output path before the first step" {
	mkidx d 300
	mkdir adir
	m=$ML_ROOT/examples/fashion-mlp.mlt
	for bad in "-o adir" "-o nodir/m.mlg" "-o m.mlg --checkpoint adir" \
		"-o m.mlg --checkpoint nodir/c.mlg"; do
		run -1 --separate-stderr timeout 20 mltrain "$m" --data d --epochs 50 $bad
		[ "${#stderr_lines[@]}" -eq 1 ] && [[ $stderr == "mltrain: cannot write '"* ]] ||
			{ echo "$bad: $stderr" >&2; return 1; }
	done
	run -1 --separate-stderr timeout 20 mltrain "$m" --data d --epochs 50 -o m.mlg --log adir
	[[ $stderr == "mltrain: cannot open 'adir': "* ]]
	[ ! -e m.mlg ]
	if [ "$(id -u)" != 0 ]; then
		mkdir ro && chmod 555 ro
		run -1 --separate-stderr timeout 20 mltrain "$m" --data d --epochs 50 -o ro/m.mlg
		[[ $stderr == "mltrain: cannot write 'ro/m.mlg': Permission denied" ]]
	fi
}
