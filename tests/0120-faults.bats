#!/usr/bin/env bats
# 0120-faults.bats: the tools under failing output: a full disk (/dev/full,
# a file size limit), a reader that stops early (| head), a closed stdout,
# and two tools writing the same file at once. A failed write exits 1 and
# leaves no partial file; a reader that has gone ends a tool quietly.
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
