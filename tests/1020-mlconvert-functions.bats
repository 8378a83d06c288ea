#!/usr/bin/env bats
# 1020-mlconvert-functions.bats: the internal ops (domain ml) exported to ONNX
# as model-local functions of standard ops (lib/fmt/onnx_func.c): the export
# passes onnx.checker's full check, reads back as the same graph, runs in
# ONNX Runtime with mlrun's results (when onnxruntime imports: the bench venv
# build/bench-venv, or the system's), and the ops with no ONNX body, or
# functions of other origin, are refused with one line and status 4.
bats_require_minimum_version 1.5.0
load helpers

ORT_PY=${ORT_PY:-$(dirname "$ML_BIN")/bench-venv/bin/python}

# ort PYTHON: an interpreter where onnxruntime imports, or skip the test.
ort_py() {
	local p
	for p in "$ORT_PY" "$PY"; do
		if [ -x "$p" ] && "$p" "$TOOLS_DIR/onnxrt.py" have-ort; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# small.mlt: a FusedGemm with Gelu, a FusedElementwise chain (Silu, a swapped
# Sub) and the ml LayerNormalization of an opset-14 model, with its input.
small() {
	cat >small.mlt <<'MLT'
<
    ir_version: 8,
    opset_import: ["" : 14, "ml" : 1]
>
g (float[2,4] x) => (float[2,3] y, float[2,4] e, float[2,4] n)
<
    float[4,3] w = {1, -2, 3, 0.5, 0.25, -1, 2, 1, -0.5, 1.5, 0.75, -2},
    float[3] b = {0.1, -0.2, 0.3},
    float[4] c = {1, 2, 3, 4},
    float[4] s = {1, 0.5, 2, 1},
    float[4] t = {0, 0.1, 0.2, 0.3}
>
{
    y = ml.FusedGemm <activation = "Gelu"> (x, w, b)
    e = ml.FusedElementwise <ops = ["Add", "Silu", "Sub", "Tanh"], args = [1, -1, 1, -1], swap = [0, 0, 1, 0]> (x, c)
    n = ml.LayerNormalization <axis = -1, epsilon = 0.001> (e, s, t)
}
MLT
	"$PY" -c "import numpy as np; np.save('x.npy', np.array([[0.5, -1, 2, 0.1], [-0.3, 0.7, -2, 1.2]], np.float32))"
}

@test "mlconvert writes internal ops as ml functions that onnx.checker accepts" {
	small
	run -0 mlconvert small.mlt -o small.onnx
	run -0 "$PY" "$TOOLS_DIR/onnxrt.py" check small.onnx
	[[ $output == *"3 functions"* ]]
	run -0 "$PY" -c "
import onnx
m = onnx.load('small.onnx')
print(sorted(f.name for f in m.functions), m.ir_version >= 8,
      [o.version for o in m.opset_import if o.domain == 'ml'])"
	[ "$output" = "['FusedElementwise', 'FusedGemm_gelu', 'LayerNormalization'] True [1]" ]
}

@test "mlconvert reads its own functions back as the internal ops" {
	small
	run -0 mlconvert small.mlt -o small.onnx
	run -0 mlconvert small.onnx -o back.mlt
	run -0 mlconvert small.mlt -o want.mlt
	# the same graph; the header gains only the producer name the export writes
	diff <(sed -n '/^g (/,$p' want.mlt) <(sed -n '/^g (/,$p' back.mlt)
	run -0 grep -c ml.FusedElementwise back.mlt
	run -0 mlconvert small.onnx -o again.onnx
	run -0 mlconvert again.onnx -o third.onnx
	cmp again.onnx third.onnx
}

@test "the exported functions run in ONNX Runtime with mlrun's results" {
	small
	ort=$(ort_py) || skip "onnxruntime is not installed"
	run -0 mlconvert small.mlt -o small.onnx
	run -0 mlrun -q small.onnx -i x=x.npy -o ref
	run -0 "$ort" "$TOOLS_DIR/onnxrt.py" run small.onnx x.npy ref --rtol 1e-5 --atol 1e-6
	[ "${#lines[@]}" -eq 3 ]
}

@test "packed FusedMatMul weights, the tanh Gelu and a scaled Attention run in ONNX Runtime" {
	ort=$(ort_py) || skip "onnxruntime is not installed"
	"$PY" - <<'PY'
import numpy as np
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.default_rng(0)
# a MatMul of 2^21 multiply-adds, which mlopt -O2 packs (packed_n)
w = nh.from_array(r.standard_normal((1024, 200)).astype(np.float32) * 0.05, "w")
b = nh.from_array(r.standard_normal(200).astype(np.float32), "b")
g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Add", ["m", "b"], ["a"]),
                  h.make_node("Relu", ["a"], ["y"])], "g",
                 [h.make_tensor_value_info("x", T.FLOAT, [2, 8, 1024])],
                 [h.make_tensor_value_info("y", T.FLOAT, [2, 8, 200])], [w, b])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), "mm.onnx")
np.save("mx.npy", r.standard_normal((2, 8, 1024)).astype(np.float32))
vals = lambda n: ", ".join("%.3f" % v for v in r.standard_normal(n))
open("att.mlt", "w").write("""<
    ir_version: 8,
    opset_import: ["" : 13, "ml" : 1]
>
g (float[2,4] x) => (float[2,4] z, float[2,3,2] a)
<
    float[2,3,4] q = {%s},
    float[2,4,5] k = {%s},
    float[2,5,2] v = {%s}
>
{
    z = ml.Gelu <approximate = "tanh"> (x)
    a = ml.Attention <scale = 0.5> (q, k, v)
}
""" % (vals(24), vals(40), vals(20)))
np.save("x.npy", r.standard_normal((2, 4)).astype(np.float32))
PY
	run -0 mlopt -O2 mm.onnx -o mm.mlg
	run -0 mlconvert mm.mlg -o mm.mlt
	run -0 grep -c 'ml.FusedMatMul <.*packed_n = 200>' mm.mlt
	run -0 mlconvert mm.mlg -o mm2.onnx
	run -0 "$PY" "$TOOLS_DIR/onnxrt.py" check mm2.onnx
	run -0 mlrun -q mm.mlg -i x=mx.npy -o mref
	run -0 "$ort" "$TOOLS_DIR/onnxrt.py" run mm2.onnx mx.npy mref --rtol 1e-5 --atol 1e-5
	run -0 mlconvert att.mlt -o att.onnx
	run -0 "$PY" "$TOOLS_DIR/onnxrt.py" check att.onnx
	run -0 mlrun -q att.onnx -i x=x.npy -o aref
	run -0 "$ort" "$TOOLS_DIR/onnxrt.py" run att.onnx x.npy aref --rtol 1e-5 --atol 1e-6
	[ "${#lines[@]}" -eq 2 ]
}

@test "mlconvert refuses to export a training op to ONNX with status 4" {
	cat >t.mlt <<'MLT'
<
    ir_version: 8,
    opset_import: ["" : 17, "ml" : 1]
>
g (float[4] x, float[4] dy) => (float[4] dx)
{
    dx = ml.ReluGrad(dy, x)
}
MLT
	run -4 --separate-stderr mlconvert t.mlt -o t.onnx
	[ "$stderr" = "mlconvert: cannot export ml.ReluGrad to ONNX: a training op has no ONNX body (save the model as .mlg)" ]
	[ ! -e t.onnx ]
	run -0 mlconvert t.mlt -o t.mlg
}

@test "mlconvert refuses an internal op in a model of opset below 11 with status 4" {
	small
	sed 's/"" : 14/"" : 10/' small.mlt >old.mlt
	run -4 --separate-stderr mlconvert old.mlt -o old.onnx
	[ "$stderr" = "mlconvert: cannot export ml.FusedGemm to ONNX: in opset 10; its function needs opset 11 or later" ]
}

@test "mlconvert refuses a model-local function it did not write with status 4" {
	"$PY" - <<'PY'
import onnx
from onnx import helper as h, TensorProto as T
f = h.make_function("my.domain", "Twice", ["a"], ["b"], [h.make_node("Add", ["a", "a"], ["b"])],
                    [h.make_opsetid("", 17)])
g = h.make_graph([h.make_node("Twice", ["x"], ["y"], domain="my.domain")], "g",
                 [h.make_tensor_value_info("x", T.FLOAT, [2])],
                 [h.make_tensor_value_info("y", T.FLOAT, [2])])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("my.domain", 1)],
                 functions=[f])
onnx.save(m, "f.onnx")
PY
	run -4 --separate-stderr mlconvert f.onnx -o f.mlg
	[ "$stderr" = "mlconvert: f.onnx: model-local function 'Twice' (domain 'my.domain') is not supported; only the ml functions this library writes are read" ]
}
