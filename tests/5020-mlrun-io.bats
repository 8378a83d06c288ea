#!/usr/bin/env bats
# 5020-mlrun-io.bats: mlrun's inputs as users bring them: any numeric .npy
# dtype (converted to the model's), Fortran order, -i FILE.npz, -o creating
# its parents, an unknown input name listing the model's inputs.
bats_require_minimum_version 1.5.0
load helpers

@test "mlrun converts a float64 .npy to the float32 input, exactly as numpy" {
	mkmlg add
	"$PY" -c '
import numpy as np
x = np.load("add.in/x.npy").astype(np.float64)
np.save("x64.npy", x); np.save("x64r.npy", x + 1e-12)
np.save("xi.npy", np.arange(6, dtype=np.int32).reshape(2, 3))
np.save("zi.npy", np.arange(6, dtype=np.float32).reshape(2, 3) + np.load("add.in/y.npy"))'
	run -0 --separate-stderr mlrun -v add.mlg -i x=x64.npy -i y=add.in/y.npy -o out
	[[ $stderr == *"input 'x': f64 converted to f32 (exact: 0 of 6 values changed)"* ]]
	npcmp out/z.npy add.ref/z.npy
	run -0 --separate-stderr mlrun -v add.mlg -i x=x64r.npy -i y=add.in/y.npy -o out
	[[ $stderr == *"input 'x': f64 converted to f32 (lossy: "*" of 6 values changed)"* ]]
	run -0 --separate-stderr mlrun add.mlg -i x=x64r.npy -i y=add.in/y.npy -o out
	[ -z "$stderr" ]
	run -0 mlrun add.mlg -i x=xi.npy -i y=add.in/y.npy -o out
	npcmp out/z.npy zi.npy
}

@test "mlrun converts float .npy values to an int64 input and refuses a bool one with status 4" {
	mkmlg i64
	"$PY" -c '
import numpy as np
np.save("xf.npy", np.load("i64.in/x.npy").astype(np.float64))
np.save("xb.npy", np.ones(4, dtype=bool))
np.save("xn.npy", np.full(4, np.nan))'
	run -0 mlrun i64.mlg -i x=xf.npy -o out
	npcmp out/y.npy i64.ref/y.npy
	run -4 --separate-stderr mlrun i64.mlg -i x=xb.npy
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: xb.npy: input 'x' is bool; the model wants i64" ]]
	run -3 --separate-stderr mlrun i64.mlg -i x=xn.npy
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: xn.npy: value nan of input 'x' does not fit i64" ]]
}

@test "mlrun reads Fortran-order .npy arrays in C order" {
	mkmlg add
	"$PY" -c '
import numpy as np
x = np.load("add.in/x.npy")
np.save("xf.npy", np.asfortranarray(x))
assert b"True" in open("xf.npy", "rb").read(128)'
	run -0 mlrun add.mlg -i x=xf.npy -i y=add.in/y.npy -o out
	npcmp out/z.npy add.ref/z.npy
	# a symbolic batch dim
	mkmodel mlp
	mlconvert mlp.onnx -o mlp.mlg
	"$PY" -c '
import numpy as np
np.save("mx.npy", np.asfortranarray(np.load("mlp.in/x.npy")))'
	run -0 mlrun mlp.mlg -i x=mx.npy -o out
	npcmp out/y.npy mlp.ref/y.npy
	# rank 3, big-endian, and rank 3 int16 converted to the float64 input
	"$PY" - <<-'EOF2'
	import numpy as np, onnx
	from onnx import helper, TensorProto as T
	g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
	    [helper.make_tensor_value_info("x", T.DOUBLE, [2, 3, 4])],
	    [helper.make_tensor_value_info("y", T.DOUBLE, [2, 3, 4])])
	onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "id3.onnx")
	x = np.arange(24, dtype=">f8").reshape(2, 3, 4) * 1.5
	np.save("x3.npy", np.asfortranarray(x)); np.save("x3ref.npy", x.astype("<f8"))
	np.save("x3i.npy", np.asfortranarray(np.arange(24, dtype="<i2").reshape(2, 3, 4)))
	np.save("x3iref.npy", np.arange(24, dtype="<f8").reshape(2, 3, 4))
	EOF2
	run -0 mlrun id3.onnx -i x=x3.npy -o out
	npcmp out/y.npy x3ref.npy --rtol 0 --atol 0
	run -0 mlrun id3.onnx -i x=x3i.npy -o out
	npcmp out/y.npy x3iref.npy --rtol 0 --atol 0
}

@test "mlrun binds the arrays of -i FILE.npz by name" {
	mkmlg add
	"$PY" -c '
import numpy as np
np.savez("in.npz", x=np.load("add.in/x.npy"), y=np.load("add.in/y.npy").astype(np.float64))
np.savez_compressed("inc.npz", x=np.load("add.in/x.npy"))
np.savez("bad.npz", x=np.load("add.in/x.npy"), w=np.zeros(3))'
	run -0 mlrun add.mlg -i in.npz -o out
	npcmp out/z.npy add.ref/z.npy
	run -0 mlrun add.mlg --input inc.npz -i y=add.in/y.npy -o out
	npcmp out/z.npy add.ref/z.npy
	run -3 --separate-stderr mlrun add.mlg -i bad.npz
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: bad.npz: the model has no input 'w' for its array (its inputs: x, y)" ]]
	run -3 --separate-stderr mlrun add.mlg -i missing.npz
	[ "${#stderr_lines[@]}" -eq 1 ]
	printf 'not a zip' >junk.npz
	run -3 --separate-stderr mlrun add.mlg -i junk.npz
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: junk.npz: "* ]]
}

@test "mlrun -o creates the missing folders of DIR" {
	mkmlg add
	run -0 mlrun add.mlg --random -o a/b/c
	[ -f a/b/c/z.npy ]
	run -0 mlrun add.mlg --random -o ./d//e/
	[ -f d/e/z.npy ]
	touch f
	run -1 --separate-stderr mlrun add.mlg --random -o f/g
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: cannot create 'f/g': 'f' is not a directory" ]]
	run -1 --separate-stderr mlrun add.mlg --random -o f
	[[ $stderr == "mlrun: 'f' is not a directory" ]]
}

@test "mlrun lists the model's inputs when one given is unknown" {
	mkmlg add
	run -3 --separate-stderr mlrun add.mlg -i w=add.in/x.npy
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: add.mlg: the model has no input 'w' (its inputs: x, y)" ]]
	run -3 --separate-stderr mlrun add.mlg -i w=zeros --random
	[[ $stderr == "mlrun: add.mlg: the model has no input 'w' (its inputs: x, y)" ]]
}

@test "mlrun --compare exits 0 on the reference and 1 on a perturbed one" {
	mkmodel mlp
	mlconvert mlp.onnx -o mlp.mlg
	"$PY" -c '
import numpy as np
y = np.load("mlp.ref/y.npy"); p = y.copy(); p[1, 2] += 0.01
np.savez("r.npz", y=y); np.savez("p.npz", y=p); np.savez("o.npz", z=y)
np.savez("s.npz", y=y[:1])
import os; os.mkdir("pd"); np.save("pd/y.npy", p)'
	run -0 mlrun mlp.mlg -i x=mlp.in/x.npy --compare mlp.ref
	[[ ${lines[-1]} == "compare y: max abs err 0 at [0,0], max rel err 0 at [0,0]: PASS (0 of 6 beyond rtol 1e-05, atol 1e-05)" ]]
	run -0 mlrun mlp.mlg -i x=mlp.in/x.npy --compare r.npz
	run -1 mlrun mlp.mlg -i x=mlp.in/x.npy --compare p.npz
	[[ ${lines[-1]} == "compare y: max abs err 0.01 at [1,2], max rel err "*" at [1,2]: FAIL (1 of 6 beyond rtol 1e-05, atol 1e-05)" ]]
	run -1 mlrun mlp.mlg -i x=mlp.in/x.npy --compare pd
	run -0 --separate-stderr mlrun -q mlp.mlg -i x=mlp.in/x.npy --compare pd --atol 0.02
	[ -z "$output" ] && [ -z "$stderr" ]
	run -0 mlrun mlp.mlg -i x=mlp.in/x.npy --compare pd --rtol 1
	# the comparison goes to stderr under --json, which stays JSON
	run -1 --separate-stderr mlrun --json mlp.mlg -i x=mlp.in/x.npy --compare p.npz
	"$PY" -c 'import json, sys; json.loads(sys.argv[1])' "$output"
	[[ $stderr == "compare y: "*FAIL* ]]
	run -1 mlrun mlp.mlg -i x=mlp.in/x.npy --compare s.npz
	[[ ${lines[-1]} == "compare y: FAIL: output is f32[2,3], reference is f32[1,3]" ]]
	run -3 --separate-stderr mlrun mlp.mlg -i x=mlp.in/x.npy --compare o.npz
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: o.npz: no array 'y' for output 'y'" ]]
	run -3 --separate-stderr mlrun mlp.mlg -i x=mlp.in/x.npy --compare nowhere
	[ "${#stderr_lines[@]}" -eq 1 ]
	run -2 --separate-stderr mlrun mlp.mlg -i x=mlp.in/x.npy --rtol 1e-3
	[[ ${stderr_lines[0]} == "mlrun: --rtol and --atol need --compare" ]]
	run -2 --separate-stderr mlrun mlp.mlg -i x=mlp.in/x.npy --compare r.npz --atol -1
	[[ ${stderr_lines[0]} == "mlrun: --atol must be 0 or more" ]]
}

@test "mlrun --top K prints the K largest values of each row with their indices" {
	"$PY" - <<-'EOF2'
	import numpy as np, onnx
	from onnx import helper, TensorProto as T
	g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
	    [helper.make_tensor_value_info("x", T.FLOAT, [2, 4])],
	    [helper.make_tensor_value_info("y", T.FLOAT, [2, 4])])
	onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "id.onnx")
	np.save("x.npy", np.array([[0.1, 0.7, 0.7, 0.2], [3, -1, 5, np.nan]], dtype=np.float32))
	EOF2
	run -0 mlrun id.onnx -i x=x.npy --top 2
	[ "${lines[2]}" = "y top 2" ]
	[ "${lines[3]}" = "  row 0: 1=0.7 2=0.7" ]
	[ "${lines[4]}" = "  row 1: 2=5 0=3" ]
	run -0 mlrun id.onnx -i x=x.npy --top 9
	[ "${lines[2]}" = "y top 4" ]
	[ "${lines[3]}" = "  row 0: 1=0.7 2=0.7 3=0.2 0=0.1" ]
	[ "${lines[4]}" = "  row 1: 2=5 0=3 1=-1" ]
	run -2 mlrun id.onnx -i x=x.npy --top 0
}
