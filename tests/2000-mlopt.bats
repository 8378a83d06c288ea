#!/usr/bin/env bats
# 2000-mlopt.bats: mlopt on small generated models: each pass family on its
# pattern, levels and pass lists, the report, --verify, pipes, idempotence,
# and the failures (usage 2, invalid input 3, write errors 1).
bats_require_minimum_version 1.5.0
load helpers

# mkopt NAME: write NAME.onnx and NAME.mlg, a model with one pattern the passes fuse:
# convbn (Identity, Conv, BatchNormalization, Dropout, Relu), gelu (the erf form),
# ln (a decomposed LayerNorm, then MatMul + Add + Relu), chain (elementwise ops, a duplicate),
# mm (MatMul + Add + Sigmoid, 1.8M multiply-adds), attn, attn2, attn_out (scaled dot-product attention; attn_out also outputs the softmax),
# mbv2 and mbv2w (MobileNet-V2 inverted residual blocks on 20x20 and 56x56),
# convnext (two ConvNeXt-like blocks: depthwise 7x7 Conv, Transpose, Linear, Relu, Linear, Transpose, layer scale, residual Add).
mkopt() {
	"$PY" - "$1" <<'PYEOF' && mlconvert "$1.onnx" -o "$1.mlg"
import sys
import numpy as np
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
rng = np.random.default_rng(1)
def c(name, a):
    return nh.from_array(np.asarray(a, dtype=np.float32), name)
name = sys.argv[1]
inits, nodes = [], []
if name == "convbn":
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8, 8])
    inits = [c("w", rng.standard_normal((4, 3, 3, 3))), c("s", rng.random(4) + 0.5),
             c("b", rng.standard_normal(4)), c("m", rng.standard_normal(4)),
             c("v", rng.random(4) + 0.5)]
    nodes = [h.make_node("Identity", ["x"], ["xi"], name="id"),
             h.make_node("Conv", ["xi", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
             h.make_node("Dropout", ["n"], ["d"], name="drop"),
             h.make_node("Relu", ["d"], ["y"], name="relu")]
elif name == "gelu":
    x = h.make_tensor_value_info("x", T.FLOAT, [2, 8])
    y = h.make_tensor_value_info("y", T.FLOAT, [2, 8])
    inits = [c("r2", 1.4142135381698608), c("one", 1.0), c("half", 0.5)]
    nodes = [h.make_node("Div", ["x", "r2"], ["a"], name="div"),
             h.make_node("Erf", ["a"], ["e"], name="erf"),
             h.make_node("Add", ["e", "one"], ["p"], name="add"),
             h.make_node("Mul", ["x", "p"], ["q"], name="mul"),
             h.make_node("Mul", ["q", "half"], ["y"], name="mul2")]
elif name == "ln":
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 4, 16])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8])
    inits = [c("two", 2.0), c("eps", 1e-5), c("g", rng.random(16) + 0.5), c("bb", rng.standard_normal(16)),
             c("W", rng.standard_normal((16, 8))), c("B", rng.standard_normal(8))]
    nodes = [h.make_node("ReduceMean", ["x"], ["mu"], name="rm1", axes=[-1]),
             h.make_node("Sub", ["x", "mu"], ["d"], name="sub"),
             h.make_node("Pow", ["d", "two"], ["d2"], name="pow"),
             h.make_node("ReduceMean", ["d2"], ["var"], name="rm2", axes=[-1]),
             h.make_node("Add", ["var", "eps"], ["ve"], name="adde"),
             h.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
             h.make_node("Div", ["d", "sd"], ["nz"], name="div"),
             h.make_node("Mul", ["nz", "g"], ["sc"], name="mulg"),
             h.make_node("Add", ["sc", "bb"], ["ln"], name="addb"),
             h.make_node("MatMul", ["ln", "W"], ["mm"], name="mm"),
             h.make_node("Add", ["mm", "B"], ["mb"], name="addB"),
             h.make_node("Relu", ["mb"], ["y"], name="relu")]
elif name == "chain":
    x = h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])
    y = h.make_tensor_value_info("y", T.FLOAT, [2, 3, 4])
    z = h.make_tensor_value_info("z", T.FLOAT, [2, 3, 4])
    inits = [c("k", rng.standard_normal(4)), c("s", 3.0)]
    nodes = [h.make_node("Mul", ["x", "k"], ["a"], name="m"),
             h.make_node("Add", ["a", "s"], ["b"], name="a"),
             h.make_node("Tanh", ["b"], ["t"], name="t"),
             h.make_node("Sub", ["s", "t"], ["y"], name="s"),
             h.make_node("Mul", ["x", "k"], ["a2"], name="m_dup"),
             h.make_node("Neg", ["a2"], ["z"], name="neg")]
elif name == "mm":
    # big enough for the packed-GEMM path of FusedMatMul; 70 rows, 200 columns: partial tiles
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 70, 128])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 70, 200])
    inits = [c("W", rng.standard_normal((128, 200)) / 8), c("B", rng.standard_normal(200))]
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             h.make_node("Add", ["mm", "B"], ["mb"], name="addB"),
             h.make_node("Sigmoid", ["mb"], ["y"], name="sig")]
elif name.startswith("mm") and name[2:].isdigit():
    # mmN: N rows against a 1024 x 1100 B (packed: at least 2^20 multiply-adds; a partial panel)
    r = int(name[2:])
    x = h.make_tensor_value_info("x", T.FLOAT, [1, r, 1024])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, r, 1100])
    inits = [c("W", rng.standard_normal((1024, 1100)) / 32), c("B", rng.standard_normal(1100))]
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             h.make_node("Add", ["mm", "B"], ["mb"], name="addB"),
             h.make_node("Relu", ["mb"], ["y"], name="relu")]
elif name.startswith("attn"):
    # attention over [batch 2, heads 3]: 5 queries of 8, 7 keys, values of 4
    x = [h.make_tensor_value_info("q", T.FLOAT, [2, 3, 5, 8]),
         h.make_tensor_value_info("k", T.FLOAT, [2, 3, 7, 8]),
         h.make_tensor_value_info("v", T.FLOAT, [2, 3, 7, 4])]
    y = h.make_tensor_value_info("y", T.FLOAT, [2, 3, 5, 4])
    inits = [c("r8", 2.8284270763397217), c("sc", 0.25)]
    kt = [h.make_node("Transpose", ["k"], ["kt"], name="tk", perm=[0, 1, 3, 2])]
    if name == "attn":
        # the scale on Q (Div), as PyTorch's exports write it
        nodes = kt + [h.make_node("Div", ["q", "r8"], ["qs"], name="div"),
                      h.make_node("MatMul", ["qs", "kt"], ["s"], name="mm1"),
                      h.make_node("Softmax", ["s"], ["p"], name="sm", axis=-1),
                      h.make_node("MatMul", ["p", "v"], ["y"], name="mm2")]
    else:
        # the scale on the scores (Mul, constant first); attn_out also outputs p
        nodes = kt + [h.make_node("MatMul", ["q", "kt"], ["s0"], name="mm1"),
                      h.make_node("Mul", ["sc", "s0"], ["s"], name="mul"),
                      h.make_node("Softmax", ["s"], ["p"], name="sm", axis=3),
                      h.make_node("MatMul", ["p", "v"], ["y"], name="mm2")]
elif name == "mbv2":
    # two MobileNet-V2 inverted residual blocks on 20x20: 1x1 32 -> 96, ReLU6, depthwise 3x3,
    # ReLU6, 1x1 96 -> 32, residual Add; the 1x1 convolutions make NHWC pay
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 32, 20, 20])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 32, 20, 20])
    inits = [c("lo", 0.0), c("hi", 6.0)]
    v = "x"
    for i in range(2):
        p = "b%d" % i
        inits += [c(p + "we", rng.standard_normal((96, 32, 1, 1)) / 6), c(p + "be", rng.standard_normal(96)),
                  c(p + "wd", rng.standard_normal((96, 1, 3, 3)) / 3), c(p + "bd", rng.standard_normal(96)),
                  c(p + "wp", rng.standard_normal((32, 96, 1, 1)) / 10), c(p + "bp", rng.standard_normal(32))]
        out = "y" if i == 1 else p + "y"
        nodes += [h.make_node("Conv", [v, p + "we", p + "be"], [p + "e"], name=p + "expand"),
                  h.make_node("Clip", [p + "e", "lo", "hi"], [p + "er"], name=p + "clip1"),
                  h.make_node("Conv", [p + "er", p + "wd", p + "bd"], [p + "d"], name=p + "dw",
                              group=96, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  h.make_node("Clip", [p + "d", "lo", "hi"], [p + "dr"], name=p + "clip2"),
                  h.make_node("Conv", [p + "dr", p + "wp", p + "bp"], [p + "p"], name=p + "project"),
                  h.make_node("Add", [p + "p", v], [out], name=p + "res")]
        v = out
elif name == "mbv2w":
    # two inverted residual blocks on 56x56, wide enough for fuse-expand: 1x1 32 -> 96,
    # ReLU6, depthwise 3x3 (stride 1 with the residual Add, then stride 2), ReLU6, 1x1 96 -> 32
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 32, 56, 56])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 32, 28, 28])
    inits = [c("lo", 0.0), c("hi", 6.0)]
    v = "x"
    for i, (s, m) in enumerate([(1, 32), (2, 32)]):
        p = "b%d" % i
        inits += [c(p + "we", rng.standard_normal((96, 32, 1, 1)) / 6), c(p + "be", rng.standard_normal(96)),
                  c(p + "wd", rng.standard_normal((96, 1, 3, 3)) / 3), c(p + "bd", rng.standard_normal(96)),
                  c(p + "wp", rng.standard_normal((m, 96, 1, 1)) / 10), c(p + "bp", rng.standard_normal(m))]
        out = "y" if i == 1 else p + "y"
        nodes += [h.make_node("Conv", [v, p + "we", p + "be"], [p + "e"], name=p + "expand"),
                  h.make_node("Clip", [p + "e", "lo", "hi"], [p + "er"], name=p + "clip1"),
                  h.make_node("Conv", [p + "er", p + "wd", p + "bd"], [p + "d"], name=p + "dw",
                              group=96, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[s, s]),
                  h.make_node("Clip", [p + "d", "lo", "hi"], [p + "dr"], name=p + "clip2"),
                  h.make_node("Conv", [p + "dr", p + "wp", p + "bp"], [p + "p" if s == 1 else out],
                              name=p + "project")]
        if s == 1:
            nodes.append(h.make_node("Add", [p + "p", v], [out], name=p + "res"))
        v = out
elif name == "convnext":
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 19, 9, 9])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 19, 9, 9])
    v = "x"
    for i in range(2):
        p = "b%d" % i
        inits += [c(p + "w", rng.standard_normal((19, 1, 7, 7)) / 7), c(p + "b", rng.standard_normal(19)),
                  c(p + "W1", rng.standard_normal((19, 76)) / 4), c(p + "B1", rng.standard_normal(76)),
                  c(p + "W2", rng.standard_normal((76, 19)) / 8), c(p + "B2", rng.standard_normal(19)),
                  c(p + "g", rng.standard_normal((19, 1, 1)))]
        out = "y" if i == 1 else p + "y"
        nodes += [h.make_node("Conv", [v, p + "w", p + "b"], [p + "dw"], name=p + "dw", group=19,
                              kernel_shape=[7, 7], pads=[3, 3, 3, 3]),
                  h.make_node("Transpose", [p + "dw"], [p + "t"], name=p + "t", perm=[0, 2, 3, 1]),
                  h.make_node("MatMul", [p + "t", p + "W1"], [p + "m1"], name=p + "mm1"),
                  h.make_node("Add", [p + "m1", p + "B1"], [p + "a1"], name=p + "add1"),
                  h.make_node("Relu", [p + "a1"], [p + "r"], name=p + "relu"),
                  h.make_node("MatMul", [p + "r", p + "W2"], [p + "m2"], name=p + "mm2"),
                  h.make_node("Add", [p + "m2", p + "B2"], [p + "a2"], name=p + "add2"),
                  h.make_node("Transpose", [p + "a2"], [p + "t2"], name=p + "t2", perm=[0, 3, 1, 2]),
                  h.make_node("Mul", [p + "t2", p + "g"], [p + "s"], name=p + "scale"),
                  h.make_node("Add", [p + "s", v], [out], name=p + "res")]
        v = out
outs = [y] + ([z] if name == "chain" else [])
if name == "attn_out":
    outs.append(h.make_tensor_value_info("p", T.FLOAT, [2, 3, 5, 7]))
if not isinstance(x, list):
    x = [x]
g = h.make_graph(nodes, name, x, outs, inits)
m = h.make_model(g, opset_imports=[h.make_opsetid("", 14)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, name + ".onnx")
PYEOF
}

# nodes FILE: the node count of a model
nodes() {
	mlconvert --info --json "$1" >info.json && json_get info.json nodes
}

@test "mlopt -O2 fuses Conv, BatchNormalization and Relu and drops Identity and Dropout" {
	mkopt convbn
	run -0 mlopt -O2 convbn.mlg -o o.mlg
	[ "$(nodes o.mlg)" = 1 ]
	run -0 mlconvert o.mlg -o o.mlt
	[[ $output == "" ]]
	grep -q 'ml.FusedConv' o.mlt
	grep -q 'activation = "Relu"' o.mlt
	mknpy x.npy float32 1,3,8,8 --seed 3
	run -0 mlrun convbn.mlg -i x=x.npy -o a
	run -0 mlrun o.mlg -i x=x.npy -o b
	npcmp b/y.npy a/y.npy --rtol 1e-4 --atol 1e-5
}

@test "mlopt fuses the erf form of Gelu into ml.Gelu" {
	mkopt gelu
	run -0 mlopt gelu.mlg -o o.mlg
	run -0 mlconvert o.mlg -o o.mlt
	grep -q 'ml.Gelu' o.mlt
	[ "$(nodes o.mlg)" = 1 ]
	mknpy x.npy float32 2,8 --seed 4
	run -0 mlrun gelu.mlg -i x=x.npy -o a
	run -0 mlrun o.mlg -i x=x.npy -o b
	npcmp b/y.npy a/y.npy --rtol 1e-5 --atol 1e-6
}

@test "mlopt fuses a decomposed LayerNorm and MatMul + Add + Relu" {
	mkopt ln
	run -0 mlopt -O2 ln.mlg -o o.mlg
	run -0 mlconvert o.mlg -o o.mlt
	grep -q 'ml.LayerNormalization' o.mlt
	grep -q 'ml.FusedMatMul' o.mlt
	[ "$(nodes o.mlg)" = 2 ]
	mknpy x.npy float32 1,4,16 --seed 5
	run -0 mlrun ln.mlg -i x=x.npy -o a
	run -0 mlrun o.mlg -i x=x.npy -o b
	npcmp b/y.npy a/y.npy --rtol 1e-4 --atol 1e-5
}

@test "mlopt fuses scaled dot-product attention into one ml.Attention" {
	mknpy q.npy float32 2,3,5,8 --seed 7
	mknpy k.npy float32 2,3,7,8 --seed 8
	mknpy v.npy float32 2,3,7,4 --seed 9
	for m in attn attn2; do
		mkopt $m
		run -0 mlopt -O2 --verify $m.mlg -o o.mlg
		run -0 mlconvert o.mlg -o o.mlt
		[ "$(grep -c ' = ml.Attention ' o.mlt)" = 1 ]
		[ "$(grep -c ' = Softmax ' o.mlt)" = 0 ]
		[ "$(nodes o.mlg)" = 2 ]
		run -0 mlrun $m.mlg -i q=q.npy -i k=k.npy -i v=v.npy -o a
		run -0 mlrun o.mlg -i q=q.npy -i k=k.npy -i v=v.npy -o b
		npcmp b/y.npy a/y.npy --rtol 1e-4 --atol 1e-6
	done
	grep -q 'scale = 0.25' o.mlt
	# the softmax is also a graph output: nothing may be fused away
	mkopt attn_out
	run -0 mlopt -O2 attn_out.mlg -o o.mlg
	run -0 mlconvert o.mlg -o o.mlt
	[ "$(grep -c 'ml.Attention' o.mlt)" = 0 ]
	[ "$(grep -c ' = Softmax ' o.mlt)" = 1 ]
	run -0 mlopt -O2 --disable fuse-attention attn.mlg -o d.mlg
	[ "$(nodes d.mlg)" = 5 ]
}

@test "FusedMatMul, packed or not, computes the same on the AVX-512, AVX2 and BLAS paths" {
	mkopt mm
	run -0 mlopt -O2 mm.mlg -o o.mlg
	run -0 mlconvert o.mlg -o o.mlt
	grep -q 'ml.FusedMatMul' o.mlt
	# pack-weights stored B in the SGEMM's panels: 200 columns are 7 panels of 32
	grep -q 'packed_n = 200' o.mlt
	grep -q 'float\[7,128,32\]' o.mlt
	[ "$(nodes o.mlg)" = 1 ]
	run -0 mlopt -O2 --disable pack-weights mm.mlg -o u.mlg
	run -0 mlconvert u.mlg -o u.mlt
	[ "$(grep -c packed_n u.mlt)" = 0 ]
	mknpy x.npy float32 1,70,128 --seed 4
	run -0 mlrun mm.mlg -i x=x.npy -o a
	for p in default avx2 0; do
		for g in o u; do
			ML_PGEMM=$p run -0 mlrun $g.mlg -i x=x.npy -o b_$p$g --threads 2
			npcmp b_$p$g/y.npy a/y.npy --rtol 1e-4 --atol 1e-5
		done
	done
}

@test "FusedMatMul of a few rows streams the packed panels, with the same result" {
	# 1, 2, 3, 5 and 8 rows (the small-row kernels: 8, 4, 2 or 1 rows at a time on AVX-512,
	# 3, 2 or 1 whole panel rows on AVX2, and 6, 4, 2 or 1 of the last panel's 12 columns),
	# 9 and 40 (the tiled SGEMM on AVX-512, streamed on AVX2 up to 64 rows), 65 (tiled)
	for m in 1 2 3 5 8 9 40 65; do
		mkopt mm$m
		run -0 mlopt -O2 mm$m.mlg -o o$m.mlg
		run -0 mlconvert o$m.mlg -o o$m.mlt
		grep -q 'packed_n = 1100' o$m.mlt
		mknpy x$m.npy float32 1,$m,1024 --seed $m
		run -0 mlrun mm$m.mlg -i x=x$m.npy -o a$m
		for p in default avx2; do
			ML_PGEMM=$p run -0 mlrun o$m.mlg -i x=x$m.npy -o b$m$p --threads 2
			npcmp b$m$p/y.npy a$m/y.npy --rtol 1e-4 --atol 1e-5
		done
		ML_FUSED_SMALLM=off run -0 mlrun o$m.mlg -i x=x$m.npy -o c$m --threads 2
		npcmp c$m/y.npy a$m/y.npy --rtol 1e-4 --atol 1e-5
	done
}

@test "mlopt merges equal nodes (cse) and fuses an elementwise chain into one node" {
	mkopt chain
	run -0 mlopt chain.mlg -o o.mlg
	run -0 mlconvert o.mlg -o o.mlt
	grep -q 'ml.FusedElementwise' o.mlt
	[ "$(grep -c ' = Mul ' o.mlt)" = 1 ]
	mknpy x.npy float32 2,3,4 --seed 6
	run -0 mlrun chain.mlg -i x=x.npy -o a
	run -0 mlrun o.mlg -i x=x.npy -o b
	npcmpdir b a
}

@test "a fused node lists the nodes it came from in fused_from" {
	mkopt convbn
	run -0 mlopt convbn.mlg -o o.mlg
	run -0 mlconvert o.mlg -o o.mlt
	grep -q 'fused_from = \["conv:Conv", "relu:Relu"\]' o.mlt
}

@test "mlopt -O0 changes no node, -O1 cleans but does not fuse" {
	mkopt convbn
	run -0 mlopt -O0 convbn.mlg -o o0.mlg
	[ "$(nodes o0.mlg)" = 5 ]
	run -0 mlopt -O1 convbn.mlg -o o1.mlg
	[ "$(nodes o1.mlg)" = 3 ]
	run -0 mlconvert o1.mlg -o o1.mlt
	grep -q 'BatchNormalization' o1.mlt
}

@test "mlopt --passes runs exactly the passes named, --disable leaves one out" {
	mkopt convbn
	run -0 mlopt --passes eliminate convbn.mlg -o a.mlg
	[ "$(nodes a.mlg)" = 3 ]
	run -0 mlopt -O2 --disable fuse-bias-act convbn.mlg -o b.mlg
	[ "$(nodes b.mlg)" = 2 ]
	run -0 mlopt --passes eliminate,fold-bn --disable fold-bn convbn.mlg -o c.mlg
	[ "$(nodes c.mlg)" = 3 ]
}

@test "mlopt --list-passes names every pass with its level, also as JSON" {
	run -0 mlopt --list-passes
	for p in fold-constants fold-shapes eliminate cse dce fold-bn fuse-gelu fuse-silu \
		fuse-layernorm matmul-gemm fold-scale fuse-attention fuse-bias-act layout \
		fuse-expand fuse-elementwise pack-weights plan-memory; do
		[[ $output == *"$p "* ]]
	done
	run -0 mlopt --list-passes --json
	echo "$output" >p.json
	[ "$(json_get p.json 0.name)" = fold-constants ]
}

@test "mlopt --report prints nodes before and after per pass, --json too" {
	mkopt convbn
	run -0 --separate-stderr mlopt --report convbn.mlg -o o.mlg
	[[ $output == *"fold-bn"*"Conv+BatchNormalization"* ]]
	[[ $output == *"nodes: 5 -> 1"* ]]
	run -0 --separate-stderr mlopt --report --json convbn.mlg -o o.mlg
	echo "$output" >r.json
	[ "$(json_get r.json nodes_before)" = 5 ]
	[ "$(json_get r.json nodes_after)" = 1 ]
	[ "$(json_get r.json runs.0.pass)" = fold-constants ]
}

@test "mlopt --report goes to stderr when the model goes to stdout" {
	mkopt convbn
	run -0 --separate-stderr sh -c 'mlopt --report convbn.mlg >o.mlg'
	[[ $stderr == *"nodes: 5 -> 1"* ]]
	run -0 mlconvert --info o.mlg
}

@test "mlopt -v says what it read, optimised and wrote, as mlconvert and mlquant do" {
	mkopt convbn
	run -0 --separate-stderr mlopt -v convbn.mlg -o o.onnx
	[ -z "$output" ]
	[ "${#stderr_lines[@]}" -eq 3 ]
	[[ ${stderr_lines[0]} == "mlopt: read convbn.mlg: 5 nodes ("*" ms)" ]]
	[[ ${stderr_lines[1]} == "mlopt: 5 -> 1 nodes in "*" rounds ("*" ms)" ]]
	[[ ${stderr_lines[2]} == "mlopt: wrote o.onnx as onnx: 1 nodes ("*" ms)" ]]
	mlopt -v <convbn.mlg >o.mlg 2>err.txt
	grep -q '^mlopt: wrote <stdout> as mlg: 1 nodes' err.txt
	run -0 --separate-stderr mlopt -q -v convbn.mlg -o o.mlg
	[ -z "$stderr" ]
}

@test "mlopt stores a memory plan: arena_bytes and arena offsets" {
	mkopt ln
	run -0 mlopt ln.mlg -o o.mlg
	run -0 mlconvert o.mlg -o o.mlt
	grep -q 'arena_bytes: [1-9]' o.mlt
	grep -q 'arena_off = ' o.mlt
}

@test "mlopt --list-passes has layout at level 2" {
	run -0 mlopt --list-passes
	[[ $(grep '^layout ' <<<"$output") == "layout "*2* ]]
}

@test "mlopt --passes layout runs ConvNeXt-like blocks in NHWC: the inner transposes cancel" {
	mkopt convnext
	mknpy x.npy float32 1,19,9,9 --seed 3
	run -0 mlopt --passes layout --verify convnext.mlg -o o.mlg
	run -0 mlconvert o.mlg -o o.mlt
	[ "$(grep -c ' = ml.ConvNHWC ' o.mlt)" = 2 ]
	[ "$(grep -c ' = Conv ' o.mlt)" = 0 ]
	# four transposes inside the blocks go; one in at x and one out at y come
	[ "$(grep -c ' = Transpose ' o.mlt)" = 2 ]
	grep -q 'float\[7,7,1,19\]' o.mlt
	run -0 mlrun convnext.mlg -i x=x.npy -o a
	run -0 mlrun o.mlg -i x=x.npy -o b
	npcmp b/y.npy a/y.npy --rtol 1e-4 --atol 1e-5
	# again: nothing to do
	run -0 mlopt --passes layout o.mlg -o o2.mlg
	cmp o.mlg o2.mlg
}

@test "mlopt -O2 --verify on ConvNeXt-like blocks: NHWC, the output of -O0, idempotent" {
	mkopt convnext
	mknpy x.npy float32 1,19,9,9 --seed 4
	run -0 --separate-stderr mlopt -O2 --verify -v --report convnext.mlg -o o.mlg
	[[ $stderr == *"--verify: layout: outputs within tolerance"* ]]
	[[ $output == *"layout "*"Conv to NHWC"* ]]
	run -0 mlopt -O0 convnext.mlg -o z.mlg
	run -0 mlrun z.mlg -i x=x.npy -o a
	run -0 mlrun o.mlg -i x=x.npy -o b
	npcmp b/y.npy a/y.npy --rtol 1e-4 --atol 1e-5
	run -0 mlopt -O2 o.mlg -o o2.mlg
	cmp o.mlg o2.mlg
}

@test "mlopt -O2 runs MobileNet-V2 blocks in NHWC (pointwise gains), W as [kH, kW, C, M]" {
	mkopt mbv2
	mknpy x.npy float32 1,32,20,20 --seed 5
	run -0 --separate-stderr mlopt -O2 --verify --report mbv2.mlg -o o.mlg
	[[ $output == *"layout "*"Conv to NHWC"* ]]
	run -0 mlconvert o.mlg -o o.mlt
	[ "$(grep -c ' = ml.ConvNHWC ' o.mlt)" = 6 ]
	[ "$(grep -c ' = Transpose ' o.mlt)" = 2 ]
	# device-neutral weights: HWIO, never packed for one device
	grep -q 'float\[1,1,32,96\]' o.mlt
	grep -q 'float\[3,3,1,96\]' o.mlt
	[ "$(grep -c packed_n o.mlt)" = 0 ]
	run -0 mlrun mbv2.mlg -i x=x.npy -o a
	run -0 mlrun o.mlg -i x=x.npy -o b
	npcmp b/y.npy a/y.npy --rtol 1e-4 --atol 1e-4
	run -0 mlopt -O2 o.mlg -o o2.mlg
	cmp o.mlg o2.mlg
}

@test "mlopt -O2 computes wide MobileNet-V2 expansions inside the depthwise ConvNHWC (fuse-expand)" {
	mkopt mbv2w
	mknpy x.npy float32 1,32,56,56 --seed 5
	run -0 --separate-stderr mlopt -O2 --verify --report mbv2w.mlg -o o.mlg
	[[ $output == *"fuse-expand "*"2 pointwise ConvNHWC into depthwise"* ]]
	run -0 mlconvert o.mlg -o o.mlt
	[ "$(grep -c ' = ml.ConvNHWC ' o.mlt)" = 4 ]
	[ "$(grep -c 'pre_activation' o.mlt)" = 2 ]
	run -0 mlopt -O2 --disable fuse-expand mbv2w.mlg -o u.mlg
	run -0 mlrun mbv2w.mlg -i x=x.npy -o a
	run -0 mlrun u.mlg -i x=x.npy -o u
	# the fused rows are the same sums as the separate nodes'
	for v in x=1 ML_NHWC=avx2 ML_NHWC=c ML_PGEMM=0 ML_NHWC=c,ML_PGEMM=0; do
		rm -rf b
		run -0 env ${v//,/ } mlrun o.mlg -i x=x.npy -o b --threads 2
		npcmp b/y.npy u/y.npy --rtol 1e-5 --atol 1e-5
		npcmp b/y.npy a/y.npy --rtol 1e-4 --atol 1e-4
	done
	rm -rf b
	run -0 mlrun o.mlg -i x=x.npy -o b --threads 1
	npcmp b/y.npy u/y.npy --rtol 1e-5 --atol 1e-5
	run -0 mlopt -O2 o.mlg -o o2.mlg
	cmp o.mlg o2.mlg
	# a prologue of an unknown activation, or a Wp of the wrong shape: one line, status 3
	sed '0,/pre_activation = "Clip"/s//pre_activation = "Nope"/' o.mlt >bad1.mlt
	run -3 --separate-stderr mlrun bad1.mlt -i x=x.npy -o c
	[[ $stderr == *"unknown pre_activation 'Nope'"* ]]
	[ "$(wc -l <<<"$stderr")" = 1 ]
	"$PY" - <<'PYEOF'
s = open("o.mlt").read()
i = s.index("prologue = 1"); j = s.index("(", s.index(">", i)); k = s.index(")", j)
a = [t.strip() for t in s[j + 1:k].split(",")]
a[3] = a[1]
open("bad2.mlt", "w").write(s[:j + 1] + ", ".join(a) + s[k:])
PYEOF
	run -3 --separate-stderr mlrun bad2.mlt -i x=x.npy -o c
	[[ $stderr == *"a prologue needs a depthwise W"* ]]
	[ ! -e c ]
	# small planes stay apart: the 20x20 blocks keep their 6 ConvNHWC
	mkopt mbv2
	run -0 --separate-stderr mlopt -O2 --report mbv2.mlg -o s.mlg
	[[ $output == *"fuse-expand "*" 0  -"* ]]
}

@test "mlquant int8 of a fuse-expand model is the int8 of the unfused one" {
	mkopt mbv2w
	mknpy x.npy float32 1,32,56,56 --seed 5
	run -0 mlopt -O2 mbv2w.mlg -o f.mlg
	run -0 mlopt -O2 --disable fuse-expand mbv2w.mlg -o u.mlg
	run -0 mlquant -q -c x.npy f.mlg -o fq.mlg
	run -0 mlquant -q -c x.npy u.mlg -o uq.mlg
	run -0 mlrun fq.mlg -i x=x.npy -o a
	run -0 mlrun uq.mlg -i x=x.npy -o b
	npcmp a/y.npy b/y.npy --rtol 0 --atol 0
	run -0 mlconvert fq.mlg -o fq.mlt
	[ "$(grep -c 'ml.ConvNHWC' fq.mlt)" = 0 ]
	for d in fp16 bf16; do
		run -0 mlquant -q --dtype $d f.mlg -o h.mlg
		run -0 mlrun h.mlg -i x=x.npy -o h$d
		npcmp h$d/y.npy a/y.npy --rtol 0 --atol 0.5
	done
}

@test "mlopt --passes layout leaves a Conv + BatchNormalization + Relu graph in NCHW" {
	mkopt convbn
	run -0 --separate-stderr mlopt --passes layout --report convbn.mlg -o o.mlg
	[[ $output == *"layout "*" 0  -"* ]]
	run -0 mlconvert o.mlg -o o.mlt
	[ "$(grep -c 'ConvNHWC' o.mlt)" = 0 ]
}

@test "optimising an optimised graph changes nothing (idempotent, deterministic)" {
	for m in convbn gelu ln chain convnext mbv2; do
		mkopt $m
		run -0 mlopt -O3 $m.mlg -o a.mlg
		run -0 mlopt -O3 a.mlg -o b.mlg
		cmp a.mlg b.mlg
		run -0 mlopt -O3 $m.mlg -o c.mlg
		cmp a.mlg c.mlg
	done
}

@test "mlopt --verify passes every pass within the tolerance" {
	mkopt ln
	run -0 --separate-stderr mlopt --verify -v ln.mlg -o o.mlg
	[[ $stderr == *"--verify: fuse-layernorm: outputs within tolerance"* ]]
	mknpy x.npy float32 1,4,16 --seed 2
	run -0 mlopt --verify -i x=x.npy --rtol 1e-3 --atol 1e-4 ln.mlg -o o.mlg
}

@test "mlopt --verify names the first pass beyond the tolerance and exits 1" {
	mkopt convbn
	run -1 --separate-stderr mlopt --verify --rtol 0 --atol 0 convbn.mlg -o o.mlg
	[[ $stderr == "mlopt: convbn.mlg: --verify: pass 'fold-bn' changed output 'y'"* ]]
	[ ! -e o.mlg ]
}

@test "mlconvert | mlopt -O2 | mlrun - --random runs through pipes" {
	mkopt convbn
	run -0 sh -c 'mlconvert convbn.onnx | mlopt -O2 | mlrun - --random'
	[[ ${lines[0]} == "y f32[1,4,8,8]" ]]
}

@test "mlopt writes the text form and ONNX from the output's extension" {
	mkopt gelu
	run -0 mlopt gelu.mlg -o o.mlt
	grep -q 'ml.Gelu' o.mlt
	run -0 mlopt -O1 gelu.mlg -o o.onnx
	run -0 npyutil onnx-check o.onnx
}

@test "mlopt refuses to write a graph file to a terminal" {
	mkopt gelu
	run -2 on_tty mlopt gelu.mlg
	grep -q 'terminal' tty.out
}

@test "mlopt rejects an unknown pass with status 2" {
	mkopt gelu
	run -2 --separate-stderr mlopt --passes dce,bogus gelu.mlg -o o.mlg
	[[ $stderr == "mlopt: unknown pass 'bogus' (see --list-passes)"* ]]
	run -2 --separate-stderr mlopt --disable nope gelu.mlg -o o.mlg
	[[ $stderr == "mlopt: unknown pass 'nope'"* ]]
}

@test "mlopt rejects bad options and operands with status 2" {
	run -2 --separate-stderr mlopt --bogus
	run -2 --separate-stderr mlopt -O4 x.mlg
	run -2 --separate-stderr mlopt -Ox x.mlg
	run -2 --separate-stderr mlopt --json x.mlg
	run -2 --separate-stderr mlopt -i x=x.npy x.mlg
	run -2 --separate-stderr mlopt --rtol abc --verify x.mlg
	run -2 --separate-stderr mlopt a.mlg b.mlg
	run -2 --separate-stderr mlopt x.mlg -o ''
}

@test "mlopt exits 3 on a missing, empty or corrupt model" {
	run -3 --separate-stderr mlopt missing.mlg -o o.mlg
	[[ $stderr == "mlopt: "*"missing.mlg"* ]]
	: >empty.mlg
	run -3 --separate-stderr mlopt empty.mlg -o o.mlg
	printf 'not a model at all' >bad.mlg
	run -3 --separate-stderr mlopt bad.mlg -o o.mlg
	mkopt gelu
	head -c 40 gelu.mlg >trunc.mlg
	run -3 --separate-stderr mlopt trunc.mlg -o o.mlg
	[ ! -e o.mlg ]
	no_temp_files
}

@test "mlopt exits 1 writing to /dev/full and leaves no partial file" {
	mkopt convbn
	run -1 --separate-stderr mlopt convbn.mlg -o /dev/full
	run -1 --separate-stderr sh -c 'mlopt convbn.mlg >/dev/full'
	run -1 --separate-stderr sh -c 'mlopt --list-passes >/dev/full'
	mkdir d && chmod 500 d
	if [ "$(id -u)" != 0 ]; then
		run -1 --separate-stderr mlopt convbn.mlg -o d/o.mlg
	fi
	no_temp_files
}

@test "mlopt -h prints the synopsis and every option; --version the version" {
	run -0 mlopt -h
	[[ ${lines[0]} == "usage: mlopt "* ]]
	for o in --atol --dim --disable --force --help --input --json --list-passes --max-alloc \
		--level --output --passes --quiet --report --rtol --seed --verify --verbose --version; do
		[[ $output == *"$o"* ]]
	done
	run -0 mlopt --version
	[[ $output == "mlopt (ml) "* ]]
}

@test "man mlopt documents every option of -h and every pass" {
	command -v mandoc >/dev/null || skip "no mandoc"
	local page
	page=$(MANWIDTH=200 mandoc -Tascii -O width=200 "$ML_ROOT/man/man1/mlopt.1" | sed "s/.\x08//g")
	for o in $(mlopt -h | grep -o -- '--[a-z-]*' | sort -u); do
		[[ $page == *"$o"* ]] || { echo "missing $o"; return 1; }
	done
	for p in $(mlopt --list-passes | awk '{print $1}'); do
		[[ $page == *"$p"* ]] || { echo "missing pass $p"; return 1; }
	done
	run -0 mandoc -Tlint -W warning "$ML_ROOT/man/man1/mlopt.1"
}

@test "mlopt fuses a graph with symbolic dims, and it runs at any size" {
	mkopt ln
	"$PY" -c '
import onnx
m = onnx.load("ln.onnx")
for v in list(m.graph.input) + list(m.graph.output):
    v.type.tensor_type.shape.dim[0].dim_param = "N"
    v.type.tensor_type.shape.dim[1].dim_param = "S"
onnx.save(m, "sym.onnx")'
	run -0 mlopt --verify --dim N=2 --dim S=3 sym.onnx -o o.mlg
	[ "$(nodes o.mlg)" = 2 ]
	run -0 mlrun sym.onnx --random --dim N=3 --dim S=5 -o a
	run -0 mlrun o.mlg --random --dim N=3 --dim S=5 -o b
	npcmp b/y.npy a/y.npy --rtol 1e-4 --atol 1e-5
}
