#!/usr/bin/env bats
# 5010-mlrun-errors.bats: mlrun's refusals: bad inputs (3), unsupported ops
# (4), unwritable outputs (1), usage errors (2), one diagnostic each.
bats_require_minimum_version 1.5.0
load helpers

@test "mlrun names a missing input and exits 3" {
	mkmlg add
	run -3 --separate-stderr mlrun add.mlg -i x=add.in/x.npy
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: add.mlg: "*"'y'"* ]]
	[ -z "$output" ]
}

@test "mlrun refuses an input name the model lacks with status 3" {
	mkmlg add
	run -3 --separate-stderr mlrun add.mlg -i x=add.in/x.npy -i y=add.in/y.npy -i w=add.in/y.npy
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: "*"'w'"* ]]
	run -3 --separate-stderr mlrun add.mlg -i w=zeros --random
	[[ $stderr == "mlrun: "*"'w'"* ]]
}

@test "mlrun refuses a shape that does not match the model with status 3" {
	mkmlg add
	mknpy bad.npy float32 3,2
	run -3 --separate-stderr mlrun add.mlg -i x=bad.npy -i y=add.in/y.npy
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: "* ]]
	mknpy rank.npy float32 6
	run -3 --separate-stderr mlrun add.mlg -i x=rank.npy -i y=add.in/y.npy
}

@test "mlrun refuses a dtype it cannot convert to the model's with status 4" {
	mkmlg add
	"$PY" -c 'import numpy as np; np.save("b.npy", np.ones((2, 3), dtype=bool))'
	run -4 --separate-stderr mlrun add.mlg -i x=b.npy -i y=add.in/y.npy
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: b.npy: input 'x' is bool; the model wants f32" ]]
}

@test "mlrun refuses inputs whose symbolic dims disagree with status 3" {
	"$PY" - <<-'EOF'
	import onnx
	from onnx import helper, TensorProto as T
	g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "g",
	    [helper.make_tensor_value_info("a", T.FLOAT, ["N"]),
	     helper.make_tensor_value_info("b", T.FLOAT, ["N"])],
	    [helper.make_tensor_value_info("c", T.FLOAT, ["N"])])
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	onnx.save(m, "sym.onnx")
	EOF
	mknpy a.npy float32 3
	mknpy b.npy float32 4
	run -0 mlrun sym.onnx -i a=a.npy -i b=a.npy -o out
	run -3 --separate-stderr mlrun sym.onnx -i a=a.npy -i b=b.npy -o out2
	[[ $stderr == "mlrun: "* ]]
}

@test "mlrun refuses an input file that is not .npy with status 3" {
	mkmlg add
	printf 'hello\n' >x.npy
	run -3 --separate-stderr mlrun add.mlg -i x=x.npy -i y=add.in/y.npy
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: x.npy: "* ]]
}

@test "mlrun refuses a truncated .npy file with status 3" {
	mkmlg add
	head -c $(($(filesize add.in/x.npy) - 4)) add.in/x.npy >cut.npy
	run -3 --separate-stderr mlrun add.mlg -i x=cut.npy -i y=add.in/y.npy
	[[ $stderr == "mlrun: cut.npy: "* ]]
}

@test "mlrun refuses a .npy header that claims too much data with status 3" {
	mkmlg add
	"$PY" - <<-'EOF'
	hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000, 100000), }"
	hdr += " " * (118 - len(hdr)) + "\n"
	open("huge.npy", "wb").write(b"\x93NUMPY\x01\x00" + bytes([len(hdr), 0]) + hdr.encode() + b"\0" * 24)
	EOF
	run -3 --separate-stderr mlrun add.mlg -i x=huge.npy -i y=add.in/y.npy
	[[ $stderr == "mlrun: huge.npy: "* ]]
}

@test "mlrun names a missing input file and exits 3" {
	mkmlg add
	run -3 --separate-stderr mlrun add.mlg -i x=nope.npy -i y=add.in/y.npy
	[[ $stderr == "mlrun: cannot open 'nope.npy': No such file or directory" ]]
}

@test "mlrun names a missing model and exits 3" {
	run -3 --separate-stderr mlrun nope.mlg --random
	[ "$stderr" = "mlrun: cannot open 'nope.mlg': No such file or directory" ]
}

@test "mlrun refuses an unsupported op with status 4" {
	mkmodel unsup
	run -4 --separate-stderr mlrun unsup.onnx -i x=unsup.in/x.npy -o out
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: "*Frobnicate* ]]
	run -0 mlconvert unsup.onnx -o unsup.mlg
	run -4 mlrun unsup.mlg --random
}

@test "mlrun fails with status 1 when the output folder cannot be made" {
	mkmlg add
	touch file
	run -1 --separate-stderr mlrun add.mlg --random -o file
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: "*file* ]]
	run -1 --separate-stderr mlrun add.mlg --random -o file/sub
	[[ $stderr == "mlrun: "*file/sub* ]]
	run -1 --separate-stderr mlrun add.mlg --random -o /dev/full/sub
}

@test "mlrun fails with status 1 when an output file cannot be written" {
	mkmlg add
	mkdir -p out/z.npy
	run -1 --separate-stderr mlrun add.mlg --random -o out
	[[ $stderr == "mlrun: "* ]]
}

@test "mlrun rejects an unknown option with status 2" {
	run -2 --separate-stderr mlrun --bogus
	[[ ${stderr_lines[0]} == "mlrun: unrecognized option '--bogus'"* ]]
	[[ $stderr == *"usage: mlrun"* ]]
}

@test "mlrun rejects malformed option values with status 2" {
	mkmlg add
	for a in "--repeat 0" "--repeat x" "--repeat 5k" "--warmup -1 --repeat 2" "--threads 0" \
		"--threads two" "--seed -1" "--seed 1.5" "-i x" "-i =x.npy" "--dim N" "--dim N=-3"; do
		run -2 --separate-stderr mlrun add.mlg --random $a
		if [[ $stderr != "mlrun: "* ]]; then
			echo "$a: $stderr" >&2
			return 1
		fi
	done
}

@test "mlrun rejects --warmup without --repeat with status 2" {
	mkmlg add
	run -2 --separate-stderr mlrun add.mlg --random --warmup 3
	[[ $stderr == "mlrun: "* ]]
}

@test "mlrun rejects two models with status 2" {
	mkmlg add
	run -2 --separate-stderr mlrun add.mlg add.mlg --random
	[[ $stderr == "mlrun: "* ]]
}

@test "mlrun refuses a model that is no model with status 3" {
	printf '\001\002\003\004 junk' >junk.bin
	run -3 --separate-stderr mlrun junk.bin --random
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: junk.bin: "* ]]
	run -3 --separate-stderr mlrun - --random </dev/null
	[[ $stderr == "mlrun: "* ]]
}

@test "mlrun refuses a model with status 3 over the allocation cap" {
	mkmlg mlp784
	run -3 --separate-stderr env ML_MAX_ALLOC=100K mlrun mlp784.mlg --random
	[[ $stderr == "mlrun: "* ]]
}
