#!/usr/bin/env bats
# 1010-mlconvert-errors.bats: mlconvert's refusals: usage errors (2), invalid
# input (3), runtime failures (1), each with one diagnostic on stderr.
bats_require_minimum_version 1.5.0
load helpers

@test "mlconvert rejects an unknown option with status 2 and the synopsis" {
	run -2 --separate-stderr mlconvert --bogus
	[[ ${stderr_lines[0]} == "mlconvert: unrecognized option '--bogus'"* ]]
	[[ $stderr == *"usage: mlconvert"* ]]
	[ -z "$output" ]
}

@test "mlconvert rejects an unknown format name with status 2" {
	mkmodel mlp
	run -2 --separate-stderr mlconvert --to pdf mlp.onnx
	[[ $stderr == "mlconvert: "* ]]
	run -2 --separate-stderr mlconvert --from pdf mlp.onnx
	[[ $stderr == "mlconvert: "* ]]
}

@test "mlconvert rejects two operands with status 2" {
	mkmodel mlp
	run -2 --separate-stderr mlconvert mlp.onnx mlp.onnx
	[[ $stderr == "mlconvert: "* ]]
}

@test "mlconvert rejects an option without its argument with status 2" {
	run -2 --separate-stderr mlconvert -o
	[[ $stderr == "mlconvert: "* ]]
}

@test "mlconvert names a missing file and exits 3" {
	run -3 --separate-stderr mlconvert nope.onnx -o out.mlg
	[ "$stderr" = "mlconvert: cannot open 'nope.onnx': No such file or directory" ]
	[ ! -e out.mlg ]
}

@test "mlconvert refuses a directory as input with status 3" {
	mkdir d
	run -3 --separate-stderr mlconvert d -o out.mlg
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlconvert: "*d* ]]
}

@test "mlconvert refuses a file that is no model with status 3" {
	printf '\001\002\003 no model here' >junk.bin
	run -3 --separate-stderr mlconvert junk.bin -o out.mlg
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlconvert: junk.bin: "* ]]
	[ ! -e out.mlg ]
}

@test "mlconvert refuses a truncated ONNX file with status 3" {
	mkmodel mlp
	head -c 200 mlp.onnx >cut.onnx
	run -3 --separate-stderr mlconvert cut.onnx -o out.mlg
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlconvert: cut.onnx: "* ]]
	[ ! -e out.mlg ]
}

@test "mlconvert refuses random bytes named .onnx with status 3" {
	head -c 4096 /dev/urandom >rnd.onnx
	run -3 --separate-stderr mlconvert rnd.onnx -o out.mlg
	[[ $stderr == "mlconvert: rnd.onnx: "* ]]
}

@test "mlconvert refuses an ONNX graph whose node reads an undefined value" {
	"$PY" - <<-'EOF'
	import onnx
	from onnx import helper, TensorProto as T
	g = helper.make_graph([helper.make_node("Add", ["x", "ghost"], ["y"])], "g",
	    [helper.make_tensor_value_info("x", T.FLOAT, [2])],
	    [helper.make_tensor_value_info("y", T.FLOAT, [2])])
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	onnx.save(m, "ghost.onnx")
	EOF
	run -3 --separate-stderr mlconvert ghost.onnx -o out.mlg
	[[ $stderr == "mlconvert: ghost.onnx: "* ]]
	[ ! -e out.mlg ]
}

@test "mlconvert refuses an ONNX graph with a cycle" {
	"$PY" - <<-'EOF'
	import onnx
	from onnx import helper, TensorProto as T
	g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["a"]),
	    helper.make_node("Relu", ["a"], ["b"])], "g",
	    [helper.make_tensor_value_info("x", T.FLOAT, [2])],
	    [helper.make_tensor_value_info("a", T.FLOAT, [2])])
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	onnx.save(m, "cycle.onnx")
	EOF
	run -3 --separate-stderr mlconvert cycle.onnx -o out.mlg
	[[ $stderr == "mlconvert: cycle.onnx: "* ]]
}

@test "mlconvert refuses an initializer whose data does not match its shape" {
	"$PY" - <<-'EOF'
	import onnx
	from onnx import helper, TensorProto as T
	w = T(name="w", data_type=T.FLOAT, dims=[1000, 1000], raw_data=b"\0" * 12)
	g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
	    [helper.make_tensor_value_info("x", T.FLOAT, [1000, 1000])],
	    [helper.make_tensor_value_info("y", T.FLOAT, [1000, 1000])], [w])
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	onnx.save(m, "short.onnx")
	EOF
	run -3 --separate-stderr mlconvert short.onnx -o out.mlg
	[[ $stderr == "mlconvert: short.onnx: "* ]]
}

@test "mlconvert refuses an mlg file given as --from onnx with status 3" {
	mkmlg mlp
	run -3 --separate-stderr mlconvert --from onnx mlp.mlg -o out.onnx
	[[ $stderr == "mlconvert: "* ]]
	[ ! -e out.onnx ]
}

@test "mlconvert refuses a malformed text model with status 3" {
	printf 'this is not <a> model ( at all\n' >bad.mlt
	run -3 --separate-stderr mlconvert bad.mlt -o out.mlg
	[[ $stderr == "mlconvert: bad.mlt"* ]]
	[ ! -e out.mlg ]
}

@test "mlconvert fails with status 1 when the output folder does not exist" {
	mkmodel mlp
	run -1 --separate-stderr mlconvert mlp.onnx -o no/such/dir/out.mlg
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlconvert: "*"no/such/dir/out.mlg"* ]]
}

@test "mlconvert fails with status 1 when the output is a directory" {
	mkmodel mlp
	mkdir out.mlg
	run -1 --separate-stderr mlconvert mlp.onnx -o out.mlg
	[[ $stderr == "mlconvert: "* ]]
}

@test "mlconvert refuses a model with status 3 over the allocation cap" {
	mkmodel mlp784
	run -3 --separate-stderr env ML_MAX_ALLOC=64K mlconvert mlp784.onnx -o out.mlg
	[[ $stderr == "mlconvert: "* ]]
	[ ! -e out.mlg ]
}

@test "mlconvert refuses binary output to a terminal with status 2" {
	mkmodel mlp
	run -2 on_tty mlconvert mlp.onnx
	run -0 grep -q '^mlconvert: .*terminal' tty.out
}
