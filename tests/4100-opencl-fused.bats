#!/usr/bin/env bats
# 4100-opencl-fused.bats: ml.FusedElementwise on OpenCL (lib/cl/fused_elem.c):
# a model whose mlopt -O2 form holds elementwise chains (x * sigmoid(x) + b,
# Gelu, tanh(v) * w, c - v, max(v, b), with scalar, per-channel and
# per-column operands) places them on cl:0 and gives the CPU's outputs
# there; a chain repeated over layers builds one program. Tests that need
# an OpenCL device skip without one.
bats_require_minimum_version 1.5.0
load helpers

export ML_CL_CACHE=${ML_CL_CACHE:-$(dirname "$ML_BIN")/cl-cache}

require_opencl() {
	mlrun --devices --json >devs.json 2>/dev/null || skip "mlrun --devices failed"
	grep -q '"cl:0"' devs.json || skip "no OpenCL device"
}

# mkchains NAME LAYERS: NAME.mlg, x [2,6,5,7] through LAYERS blocks of
# v = x + a[6,1,1], v * sigmoid(v) + b[6,1,1], MatMul + bias[7] (mlopt -O2: one
# FusedElementwise and one FusedMatMul each), then gelu (the erf form, which
# joins the last FusedMatMul), tanh(v) * w[7], 0.5 - v and max(v, b[6,1,1])
# (one FusedElementwise more); and x.npy.
mkchains() {
	"$PY" - "$1" "$2" <<'PYEOF' && mlconvert "$1.onnx" -o "$1.mlg"
import math, sys
import numpy as np
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
name, layers = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(5)
inits, nodes = [], []
def c(n, a):
    inits.append(nh.from_array(np.asarray(a, dtype=np.float32), n))
def node(op, ins, out):
    nodes.append(h.make_node(op, ins, [out], name=out))
cur = "x"
for i in range(layers):
    c("b%d" % i, rng.standard_normal((6, 1, 1)))
    c("w%d" % i, rng.standard_normal((7, 7)) * 0.4)
    c("wb%d" % i, rng.standard_normal((7,)))
    c("a%d" % i, rng.standard_normal((6, 1, 1)))
    node("Add", [cur, "a%d" % i], "sc%d" % i)
    node("Sigmoid", ["sc%d" % i], "sg%d" % i)
    node("Mul", ["sc%d" % i, "sg%d" % i], "sw%d" % i)
    node("Add", ["sw%d" % i, "b%d" % i], "sb%d" % i)
    node("MatMul", ["sb%d" % i, "w%d" % i], "mm%d" % i)
    node("Add", ["mm%d" % i, "wb%d" % i], "fc%d" % i)
    cur = "fc%d" % i
c("half", 0.5); c("one", 1.0); c("rt2", math.sqrt(2.0))
c("tw", rng.standard_normal((7,))); c("mb", rng.standard_normal((6, 1, 1)))
node("Div", [cur, "rt2"], "g0"); node("Erf", ["g0"], "g1"); node("Add", ["g1", "one"], "g2")
node("Mul", [cur, "g2"], "g3"); node("Mul", ["g3", "half"], "gelu")
node("Tanh", ["gelu"], "t0"); node("Mul", ["t0", "tw"], "t1"); node("Sub", ["half", "t1"], "t2")
node("Max", ["t2", "mb"], "y")
vi = lambda n: h.make_tensor_value_info(n, T.FLOAT, [2, 6, 5, 7])
g = h.make_graph(nodes, name, [vi("x")], [vi("y")], inits)
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), name + ".onnx")
np.save("x.npy", rng.standard_normal((2, 6, 5, 7)).astype(np.float32) * 2)
PYEOF
}

# fused NAME: the number of FusedElementwise nodes of NAME.mlg
fused() {
	mlconvert "$1" -o "$1.mlt" && grep -c 'ml.FusedElementwise' "$1.mlt"
}

@test "mlrun --device cl runs mlopt -O2's elementwise chains on the device with the CPU's results" {
	require_opencl
	mkchains m 2
	run -0 mlopt -O2 m.mlg -o o.mlg
	[ "$(fused o.mlg)" -ge 3 ]
	run -0 mlrun o.mlg --device cl --plan
	[ "$(grep -c ' FusedElementwise ' <<<"$output")" = "$(fused o.mlg)" ]
	[ "$(grep ' FusedElementwise ' <<<"$output" | grep -vc ' cl:0 ')" = 0 ]
	run -0 mlrun m.mlg --device cpu -i x=x.npy -o ref
	run -0 mlrun o.mlg --device cpu -i x=x.npy -o cpu
	run -0 mlrun o.mlg --device cl -i x=x.npy -o cl
	npcmp cl/y.npy cpu/y.npy --rtol 1e-5 --atol 1e-5
	npcmp cl/y.npy ref/y.npy --rtol 1e-4 --atol 1e-4
}

@test "mlprof times the fused nodes on cl:0" {
	require_opencl
	mkchains m 1
	run -0 mlopt -O2 m.mlg -o o.mlg
	run -0 mlprof o.mlg --device cl -i x=x.npy --repeat 3 --json -o p.json
	"$PY" - <<'PYEOF'
import json
p = json.load(open("p.json"))
nodes = [n for n in p["nodes"] if n["op"] == "FusedElementwise"]
assert nodes, "no FusedElementwise node in the profile"
for n in nodes:
    assert n["device"] == "cl:0", n
PYEOF
}

@test "a chain that every layer repeats builds one OpenCL program" {
	require_opencl
	for l in 1 4; do
		export ML_CL_CACHE=$PWD/cache$l
		mkchains m$l $l
		run -0 mlopt -O2 m$l.mlg -o o$l.mlg
		run -0 --separate-stderr mlrun o$l.mlg --device cl -i x=x.npy -o out$l -v
		built=$(sed -n 's/.*programs .* (\([0-9]*\) built.*/\1/p' <<<"$stderr")
		[ -n "$built" ]
		eval "built$l=$built"
	done
	# one layer's two distinct chains build two programs (at least: the
	# device has the model's other nodes too); four layers hold three more
	# nodes of the first chain, and build no program more
	[ "$built1" -ge 2 ]
	[ "$(fused o4.mlg)" -eq $(($(fused o1.mlg) + 3)) ]
	[ "$built4" = "$built1" ]
}
