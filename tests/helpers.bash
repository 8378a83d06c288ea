# helpers.bash: what every bats test of the ml tools loads: build/bin first on
# PATH, the C locale, a scratch folder per test ($BATS_TEST_TMPDIR, like git's
# trash directory), and makers of small models and arrays that never download.
# B names the build folder (default build, as `make test` builds it).

ML_ROOT=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
case ${B:-build} in
/*) ML_BIN=${ML_BIN:-$B/bin} ;;
*) ML_BIN=${ML_BIN:-$ML_ROOT/${B:-build}/bin} ;;
esac
PATH=$ML_BIN:$PATH
LC_ALL=C
PY=/usr/bin/python3
TOOLS_DIR=$ML_ROOT/tests/tools
export ML_ROOT ML_BIN PATH LC_ALL

# Each test runs in its own empty folder; setup_file has none.
if [ -n "${BATS_TEST_TMPDIR:-}" ]; then
	cd "$BATS_TEST_TMPDIR" || exit 1
fi

# mkmodel NAME [ARGS]: write NAME.onnx here, with NAME.in/INPUT.npy inputs and
# NAME.ref/OUTPUT.npy expected outputs (see tests/tools/mkmodel.py).
mkmodel() {
	"$PY" "$TOOLS_DIR/mkmodel.py" "$@"
}

# mkmlg NAME: mkmodel NAME, then convert it to NAME.mlg.
mkmlg() {
	mkmodel "$1" && mlconvert "$1.onnx" -o "$1.mlg"
}

# npyutil CMD ARGS: array and ONNX checks (see tests/tools/npyutil.py).
npyutil() {
	"$PY" "$TOOLS_DIR/npyutil.py" "$@"
}

# npcmp GOT WANT [--rtol R --atol A]: arrays equal in dtype and shape, values within tolerance.
npcmp() {
	npyutil cmp "$@"
}

# npcmpdir GOTDIR WANTDIR: every WANTDIR/*.npy matches GOTDIR's file of the same name.
npcmpdir() {
	npyutil cmpdir "$@"
}

# mknpy FILE DTYPE SHAPE [--seed S] [--fill V]: write an array, e.g. mknpy x.npy float32 2,3.
mknpy() {
	npyutil make "$@"
}

# mlg_header VERSION: the 16 header bytes of an .mlg file with that version, on stdout.
mlg_header() {
	printf 'MLG\0'
	printf "\\$(printf %03o $(($1 & 255)))\\$(printf %03o $(($1 >> 8 & 255)))\\0\\0"
	printf '\0\0\0\0\0\0\0\0'
}

# filesize FILE: its size in bytes.
filesize() {
	wc -c <"$1" | tr -d ' '
}

# on_tty CMD...: run CMD with stdout (and stdin, stderr) on a pseudo-terminal;
# its output goes to tty.out and the command's status is returned.
on_tty() {
	local cmd='' a
	for a in "$@"; do
		cmd="$cmd $(printf '%q' "$a")"
	done
	script -qec "$cmd" tty.out </dev/null >/dev/null
}

# json_get FILE PATH: the value at PATH (keys joined with '.') of a JSON file.
json_get() {
	npyutil json "$@"
}

# no_temp_files [DIR]: fail when DIR (default .) holds leftovers of an atomic write.
no_temp_files() {
	local left
	left=$(find "${1:-.}" -name '*.tmp*' -print)
	if [ -n "$left" ]; then
		echo "temporary files left behind: $left" >&2
		return 1
	fi
}

# teardown: when a test fails, show what its last `run` printed, since bats
# itself shows only the exit status. A file that needs its own teardown
# calls show_last_run from it.
show_last_run() {
	if [ -z "${BATS_TEST_COMPLETED:-}" ]; then
		printf 'last run printed:\n%s\n' "${output:-}" >&2
		if [ -n "${stderr:-}" ]; then
			printf 'and on stderr:\n%s\n' "$stderr" >&2
		fi
	fi
}
teardown() {
	show_last_run
}
