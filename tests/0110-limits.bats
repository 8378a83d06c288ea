#!/usr/bin/env bats
# 0110-limits.bats: the limits every reader enforces: the allocation cap
# (ML_MAX_ALLOC and --max-alloc), graphs with cycles, absurd ranks and
# dims, sizes whose arithmetic would overflow. A file that breaks a limit
# is refused with one line naming it and status 3; so is a valid model
# that needs more memory than the cap (the cap is a limit on what input
# the tools accept), and nothing is written either way.
bats_require_minimum_version 1.5.0
load helpers

# onnx_model NAME: write NAME.onnx from the Python graph on stdin, which
# defines nodes, inputs, outputs and optionally inits (helper, T, vi, np,
# numpy_helper and rawt are in scope).
onnx_model() {
	local body
	body=$(cat)
	"$PY" - "$1" "$body" <<-'EOF'
	import sys
	import numpy as np
	import onnx
	from onnx import helper, numpy_helper, TensorProto as T
	vi = helper.make_tensor_value_info
	def rawt(name, dims, raw):
	    t = T(); t.name = name; t.data_type = T.FLOAT; t.dims.extend(dims); t.raw_data = raw
	    return t
	inits = []
	exec(sys.argv[2])
	g = helper.make_graph(nodes, sys.argv[1], inputs, outputs, inits)
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	open(sys.argv[1] + ".onnx", "wb").write(m.SerializeToString())
	EOF
}

# invalid TOOL ARGS...: run TOOL, expecting status 3 and one line on stderr
# that names the tool; leaves the message in $stderr.
invalid() {
	run -3 --separate-stderr "$@"
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "$1: "* ]]
}

@test "ML_MAX_ALLOC and --max-alloc cap what a tool allocates, status 3 with the cap named" {
	mkmodel mlp784
	run -3 --separate-stderr env ML_MAX_ALLOC=64K mlconvert mlp784.onnx -o out.mlg
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlconvert: "*"65536 bytes"*"ML_MAX_ALLOC"* ]]
	[ ! -e out.mlg ]
	run -3 --separate-stderr mlconvert --max-alloc 64K mlp784.onnx -o out.mlg
	[[ $stderr == "mlconvert: "*"65536 bytes"* ]]
	[ ! -e out.mlg ]
	# the option overrides the environment
	run -0 env ML_MAX_ALLOC=1K mlconvert --max-alloc 1G mlp784.onnx -o out.mlg
	run -3 --separate-stderr mlrun --max-alloc 100K out.mlg --random
	[[ $stderr == "mlrun: "*"102400 bytes"* ]]
	run -3 --separate-stderr env ML_MAX_ALLOC=100K mlrun out.mlg --random
	run -0 mlrun --max-alloc 64M out.mlg --random -q
	no_temp_files
}

@test "a cap that is not a size is a usage error" {
	mkmodel mlp
	run -2 --separate-stderr mlconvert --max-alloc lots mlp.onnx -o out.mlg
	[[ $stderr == "mlconvert: --max-alloc: 'lots' is not a size"* ]]
	run -2 --separate-stderr mlrun --max-alloc -5 mlp.onnx --random
	[[ $stderr == "mlrun: "* ]]
	run -2 --separate-stderr env ML_MAX_ALLOC=12Q mlconvert mlp.onnx -o out.mlg
	[ "$stderr" = "mlconvert: ML_MAX_ALLOC: '12Q' is not a size (bytes, or with K, M or G)" ]
	run -2 --separate-stderr env ML_MAX_ALLOC=0 mlrun mlp.onnx --random
	[ ! -e out.mlg ]
}

@test "a graph file whose frame claims more than it can hold is refused with status 3" {
	# 2^60 bytes claimed by a 17-byte frame (single segment, 8-byte size, one empty raw block)
	"$PY" -c '
import struct, sys
f = b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 2**60) + b"\x01\x00\x00"
sys.stdout.buffer.write(b"MLG\0\1\0\0\0" + bytes(8) + f)' >claim.mlg
	invalid mlconvert claim.mlg -o out.mlg
	[[ $stderr == *"claims 1152921504606846976 bytes"* ]]
	[ ! -e out.mlg ]
	# the same from stdin when it is the file, and through a pipe, whose size is
	# unknown: there the cap refuses it
	invalid mlconvert - -o out.mlg <claim.mlg
	run -3 --separate-stderr sh -c 'cat claim.mlg | mlconvert - -o out.mlg'
	[[ $stderr == "mlconvert: <stdin>: "*"allocation cap"* ]]
	[ ! -e out.mlg ]
}

@test "a graph with a cycle is refused with status 3" {
	onnx_model cycle <<-'EOF'
	nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
	         helper.make_node("Relu", ["a"], ["b"], name="relu")]
	inputs = [vi("x", T.FLOAT, [2])]
	outputs = [vi("a", T.FLOAT, [2])]
	EOF
	invalid mlconvert cycle.onnx -o out.mlg
	[[ $stderr == *"cycle"* ]]
	invalid mlrun cycle.onnx --random
	[[ $stderr == *"cycle"* ]]
	onnx_model self <<-'EOF'
	nodes = [helper.make_node("Relu", ["a"], ["a"], name="self")]
	inputs = []
	outputs = [vi("a", T.FLOAT, [2])]
	EOF
	invalid mlconvert self.onnx -o out.mlg
	[[ $stderr == *"cycle"* ]]
	# the same in the text form
	printf 'g (float[2] x) => (float[2] a)\n{\n    a = Add (x, b)\n    b = Relu (a)\n}\n' >cycle.mlt
	invalid mlconvert cycle.mlt -o out.mlg
	[[ $stderr == *"cycle"* ]]
	[ ! -e out.mlg ]
}

@test "absurd ranks are refused with status 3, naming the tensor and the rank" {
	onnx_model rank9 <<-'EOF'
	nodes = [helper.make_node("Relu", ["x"], ["y"])]
	inputs = [vi("x", T.FLOAT, [1] * 9)]
	outputs = [vi("y", T.FLOAT, None)]
	EOF
	invalid mlconvert rank9.onnx -o out.mlg
	[[ $stderr == *"'x'"*"rank 9"* ]]
	onnx_model rank5000 <<-'EOF'
	nodes = [helper.make_node("Relu", ["x"], ["y"])]
	inputs = [vi("x", T.FLOAT, [1] * 5000)]
	outputs = [vi("y", T.FLOAT, None)]
	EOF
	invalid mlconvert rank5000.onnx -o out.mlg
	[[ $stderr == *"rank 5000"* ]]
	# Unsqueeze past the largest rank
	onnx_model unsq <<-'EOF'
	nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["y"])]
	inputs = [vi("x", T.FLOAT, [1] * 8)]
	outputs = [vi("y", T.FLOAT, None)]
	inits = [numpy_helper.from_array(np.array([0], dtype=np.int64), "ax")]
	EOF
	run --separate-stderr mlconvert unsq.onnx -o out.mlg
	[ "$status" -eq 3 ] || [ "$status" -eq 4 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ ! -e out.mlg ]
}

@test "absurd and negative dims are refused with status 3" {
	onnx_model neg <<-'EOF'
	nodes = [helper.make_node("Relu", ["x"], ["y"])]
	inputs = [vi("x", T.FLOAT, [2, -7])]
	outputs = [vi("y", T.FLOAT, None)]
	EOF
	invalid mlconvert neg.onnx -o out.mlg
	[[ $stderr == *"'x'"*"-7"* ]]
	onnx_model huge <<-'EOF'
	nodes = [helper.make_node("Relu", ["x"], ["y"])]
	inputs = [vi("x", T.FLOAT, [2**62, 2**62])]
	outputs = [vi("y", T.FLOAT, None)]
	EOF
	invalid mlconvert huge.onnx -o out.mlg
	[[ $stderr == *"'x'"*"too large"* ]]
	onnx_model neginit <<-'EOF'
	nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
	inputs = [vi("x", T.FLOAT, [1])]
	outputs = [vi("y", T.FLOAT, None)]
	inits = [rawt("w", [-1, -4], bytes(16))]
	EOF
	invalid mlconvert neginit.onnx -o out.mlg
	[[ $stderr == *"'w'"* ]]
	[ ! -e out.mlg ]
}

@test "sizes whose arithmetic overflows are refused with status 3" {
	# an initializer whose element count overflows 64 bits, and one whose byte count does
	onnx_model count <<-'EOF'
	nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
	inputs = [vi("x", T.FLOAT, [1])]
	outputs = [vi("y", T.FLOAT, None)]
	inits = [rawt("w", [2**32, 2**32, 4], b"")]
	EOF
	invalid mlconvert count.onnx -o out.mlg
	[[ $stderr == *"'w'"*"overflows"* ]]
	onnx_model bytes <<-'EOF'
	nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
	inputs = [vi("x", T.FLOAT, [1])]
	outputs = [vi("y", T.FLOAT, None)]
	inits = [rawt("w", [2**31, 2**31], bytes(16))]
	EOF
	invalid mlconvert bytes.onnx -o out.mlg
	[[ $stderr == *"'w'"*"overflows"* ]]
	# shapes computed from values: Expand, ConstantOfShape, Reshape
	onnx_model expand <<-'EOF'
	nodes = [helper.make_node("Expand", ["x", "s"], ["y"], name="ex")]
	inputs = [vi("x", T.FLOAT, [1])]
	outputs = [vi("y", T.FLOAT, None)]
	inits = [numpy_helper.from_array(np.array([2**40] * 3, dtype=np.int64), "s")]
	EOF
	invalid mlconvert expand.onnx -o out.mlg
	[[ $stderr == *"'ex' (Expand)"*"too large"* ]]
	invalid mlrun expand.onnx --random
	onnx_model cos <<-'EOF'
	nodes = [helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")]
	inputs = []
	outputs = [vi("y", T.FLOAT, None)]
	inits = [numpy_helper.from_array(np.array([2**31] * 3, dtype=np.int64), "s")]
	EOF
	invalid mlconvert cos.onnx -o out.mlg
	[[ $stderr == *"ConstantOfShape"*"too large"* ]]
	onnx_model reshape <<-'EOF'
	nodes = [helper.make_node("Reshape", ["x", "s"], ["y"])]
	inputs = [vi("x", T.FLOAT, [4])]
	outputs = [vi("y", T.FLOAT, None)]
	inits = [numpy_helper.from_array(np.array([2**62, 4], dtype=np.int64), "s")]
	EOF
	invalid mlconvert reshape.onnx -o out.mlg
	[ ! -e out.mlg ]
}

@test "a .npy array with an absurd or overflowing shape is refused with status 3" {
	mkmodel add
	"$PY" - <<-'EOF'
	import struct
	def npy(name, shape):
	    h = ("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape).encode()
	    h += b" " * (63 - (10 + len(h)) % 64) + b"\n"
	    open(name, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + bytes(24))
	npy("ovf.npy", "(4294967296, 4294967296, 4)")
	npy("big.npy", "(99999999999999999999,)")
	npy("huge.npy", "(1099511627776, 1099511627776)")
	EOF
	for f in ovf big huge; do
		invalid mlrun add.onnx -i "x=$f.npy" -i y=add.in/y.npy
		[[ $stderr == "mlrun: $f.npy: "*"large"* ]]
	done
}
