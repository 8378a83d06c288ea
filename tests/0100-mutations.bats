#!/usr/bin/env bats
# 0100-mutations.bats: every reader refuses damaged input cleanly. For each
# of .mlg, ONNX, .mlt and .npy, 200 mutants of small valid files
# (tests/tools/mutate.py: truncations, bit flips, corrupted length fields,
# each made so that the file cannot be intact) must each exit 3 or 4 with
# one line on stderr, never a signal, and leave no output behind.
bats_require_minimum_version 1.5.0
load helpers

setup_file() {
	cd "$BATS_FILE_TMPDIR" || return 1
	mkmodel mlp >/dev/null
	mkmodel conv >/dev/null
	local m f
	for m in mlp conv; do
		mlconvert "$m.onnx" -o "$m.mlg"
		mlconvert "$m.onnx" -o "$m.mlt"
	done
	for f in mlg onnx mlt; do
		"$PY" "$TOOLS_DIR/mutate.py" "$f" "mut-$f" "mlp.$f" "conv.$f"
	done
	"$PY" "$TOOLS_DIR/mutate.py" npy mut-npy mlp.in/x.npy
}

# refused TOOL STATUS: whether the last run was a clean refusal by TOOL:
# status 3 or 4 and exactly one line on stderr, starting "TOOL: ".
refused() {
	[ "$status" -eq 3 ] || [ "$status" -eq 4 ] || return 1
	[ "${#stderr_lines[@]}" -eq 1 ] && [[ $stderr == "$1: "* ]]
}

# why FILE: what mutate.py did to FILE, from the manifest.
why() {
	grep "^$(basename "$1")	" "$(dirname "$1")/manifest.tsv" | cut -f 2-
}

# check_models FMT: mlconvert refuses every mutant of FMT, read from a file
# (and, for .mlg, also through a pipe, as a stream).
check_models() {
	local fmt=$1 f bad=0 n=0
	for f in "$BATS_FILE_TMPDIR/mut-$fmt"/*."$fmt"; do
		n=$((n + 1))
		run --separate-stderr mlconvert "$f" -o out.mlg
		if ! refused mlconvert || [ -e out.mlg ]; then
			echo "$(basename "$f") ($(why "$f")): status $status: $stderr" >&2
			bad=$((bad + 1))
		fi
		if [ "$fmt" = mlg ]; then
			run --separate-stderr sh -c 'mlconvert - -o out.mlg <"$1"' sh "$f"
			if ! refused mlconvert || [ -e out.mlg ]; then
				echo "$(basename "$f") on stdin ($(why "$f")): status $status: $stderr" >&2
				bad=$((bad + 1))
			fi
		fi
		rm -f out.mlg
	done
	no_temp_files
	[ "$n" -eq 200 ] || { echo "$n mutants, not 200" >&2; return 1; }
	[ "$bad" -eq 0 ]
}

@test "200 damaged .mlg graph files are each refused with status 3 or 4" {
	check_models mlg
}

@test "200 damaged ONNX models are each refused with status 3 or 4" {
	check_models onnx
}

@test "200 damaged .mlt text models are each refused with status 3 or 4" {
	check_models mlt
}

@test "200 damaged .npy arrays are each refused with status 3 or 4" {
	local f bad=0 n=0
	cp "$BATS_FILE_TMPDIR/mlp.onnx" .
	for f in "$BATS_FILE_TMPDIR/mut-npy"/*.npy; do
		n=$((n + 1))
		run --separate-stderr mlrun mlp.onnx -i "x=$f" -o out
		if ! refused mlrun || [ -n "$(ls out 2>/dev/null)" ]; then
			echo "$(basename "$f") ($(why "$f")): status $status: $stderr" >&2
			bad=$((bad + 1))
		fi
		rm -rf out
	done
	no_temp_files
	[ "$n" -eq 200 ]
	[ "$bad" -eq 0 ]
}

@test "the mutants are reproducible from their seed" {
	"$PY" "$TOOLS_DIR/mutate.py" npy again "$BATS_FILE_TMPDIR/mlp.in/x.npy"
	for f in again/*.npy; do
		cmp "$f" "$BATS_FILE_TMPDIR/mut-npy/$(basename "$f")"
	done
}
