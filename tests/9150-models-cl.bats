#!/usr/bin/env bats
# 9150-models-cl.bats: the real networks of 9100-models.bats (exported from
# PyTorch by tests/models/export.py, cached in build/models) run with
# mlrun --device cl and --device auto, compared with PyTorch's output at
# the same tolerance as on the CPU; and some of them converted to f16
# (weights, inputs and every float value), run with --device cl against
# --device cpu on the same f16 model. Skips without an OpenCL device.
bats_require_minimum_version 1.5.0
load helpers

ML_MODELS=${ML_MODELS:-$(dirname "$ML_BIN")/models}
export ML_CL_CACHE=${ML_CL_CACHE:-$(dirname "$ML_BIN")/cl-cache}

setup_file() {
	local rc=0 log=$BATS_FILE_TMPDIR/export.log
	"$PY" "$ML_ROOT/tests/models/export.py" -o "$ML_MODELS" >"$log" 2>&1 || rc=$?
	sed 's/^/# /' "$log" >&3
	return "$rc"
}

require_opencl() {
	mlrun --devices --json >devs.json 2>/dev/null || skip "mlrun --devices failed"
	grep -q '"cl:0"' devs.json || skip "no OpenCL device"
}

# check_model_cl NAME DEVICE: convert, run on the saved input on DEVICE, compare with PyTorch.
check_model_cl() {
	require_opencl
	local d=$ML_MODELS/$1
	[ -f "$d/model.onnx" ] || { echo "$d/model.onnx was not exported" >&2; return 1; }
	run -0 mlconvert "$d/model.onnx" -o "$1.mlg"
	run -0 mlrun "$1.mlg" --device "${2:-cl}" --input "input=$d/input.npy" --output-dir out
	npcmp out/output.npy "$d/output.npy" --rtol 1e-3 --atol 1e-4
}

@test "resnet18 with --device cl matches PyTorch" {
	check_model_cl resnet18
}

@test "mobilenet_v2 with --device cl matches PyTorch" {
	check_model_cl mobilenet_v2
}

@test "squeezenet1_1 with --device cl matches PyTorch" {
	check_model_cl squeezenet1_1
}

@test "efficientnet_b0 with --device cl matches PyTorch" {
	check_model_cl efficientnet_b0
}

@test "densenet121 at 64x64 with --device cl matches PyTorch" {
	check_model_cl densenet121
}

@test "a transformer encoder with --device cl matches PyTorch" {
	check_model_cl transformer
}

@test "a transformer encoder (opset 17, LayerNormalization) with --device cl matches PyTorch" {
	check_model_cl transformer_op17
}

@test "an LSTM network with --device cl matches PyTorch" {
	check_model_cl lstm
}

@test "a GRU network with --device cl matches PyTorch" {
	check_model_cl gru
}

@test "convnext_tiny at 64x64 with --device cl matches PyTorch" {
	check_model_cl convnext_tiny
}

@test "shufflenet_v2 (channel shuffle: Reshape, Transpose, Split) with --device cl matches PyTorch" {
	check_model_cl shufflenet_v2
}

@test "LeNet-5 with --device cl matches PyTorch" {
	check_model_cl lenet
}

# check_model_cl_O2 NAME: the -O2 graph (FusedConv with Relu, Clip, residuals; ConvNHWC where
# the layout pass chose NHWC) on cl matches PyTorch, and --plan puts every convolution on the
# device (the convolution's store applies the bias, the residual and the activation).
# ML_CL_NHWC=1: the device takes ConvNHWC even where it is a CPU (POCL), which by default
# leaves it to the CPU device; without it the NHWC convolutions run on the CPU, still right.
check_model_cl_O2() {
	require_opencl
	local d=$ML_MODELS/$1
	[ -f "$d/model.onnx" ] || { echo "$d/model.onnx was not exported" >&2; return 1; }
	run -0 mlconvert "$d/model.onnx" -o "$1.mlg"
	run -0 mlopt -O2 "$1.mlg" -o "$1.O2.mlg"
	ML_CL_NHWC=1 run -0 mlrun "$1.O2.mlg" --device cl --input "input=$d/input.npy" \
		--output-dir out
	npcmp out/output.npy "$d/output.npy" --rtol 1e-3 --atol 1e-4
	run -0 mlrun "$1.O2.mlg" --device cl --input "input=$d/input.npy" --output-dir out2
	npcmp out2/output.npy "$d/output.npy" --rtol 1e-3 --atol 1e-4
	ML_CL_NHWC=1 run -0 mlrun "$1.O2.mlg" --device cl --plan
	[[ $output == *" $2 "*" cl:0 "* ]]
	local bad
	bad=$(echo "$output" | awk '($3 == "FusedConv" || $3 == "ConvNHWC") && $4 != "cl:0"')
	[ -z "$bad" ] || { echo "convolutions off the device: $bad" >&2; return 1; }
}

@test "resnet18 at -O2 (FusedConv with Relu and residual) with --device cl matches PyTorch" {
	check_model_cl_O2 resnet18 FusedConv
}

@test "mobilenet_v2 at -O2 (NHWC, ConvNHWC with Clip and residuals) with --device cl matches PyTorch" {
	check_model_cl_O2 mobilenet_v2 ConvNHWC
}

@test "efficientnet_b0 at -O2 (NHWC, SiLU, squeeze-excitation) with --device cl matches PyTorch" {
	check_model_cl_O2 efficientnet_b0 ConvNHWC
}

@test "resnet18 with --device auto matches PyTorch" {
	check_model_cl resnet18 auto
}

@test "a transformer encoder with --device auto matches PyTorch" {
	check_model_cl transformer auto
}

# check_model_f16 NAME: NAME's ONNX model with every float tensor made f16 (weights, inputs,
# outputs, value_info, Constant values, Casts to float), run on cl and on the CPU; the two
# f16 outputs agree within a few half ulps (both round each op's f32 result to half once),
# and no Conv, Gemm or MatMul ran on the CPU.
check_model_f16() {
	require_opencl
	local d=$ML_MODELS/$1
	[ -f "$d/model.onnx" ] || { echo "$d/model.onnx was not exported" >&2; return 1; }
	"$PY" - "$d/model.onnx" "$1.onnx" "$d/input.npy" x.npy <<'PYEOF'
import sys
import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
src, dst, xin, xout = sys.argv[1:5]
m = onnx.load(src)
g = m.graph
for t in g.initializer:
    if t.data_type == TensorProto.FLOAT:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
for v in list(g.input) + list(g.output) + list(g.value_info):
    if v.type.tensor_type.elem_type == TensorProto.FLOAT:
        v.type.tensor_type.elem_type = TensorProto.FLOAT16
for n in g.node:
    for a in n.attribute:
        if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
            a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16)))
        if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
            a.i = TensorProto.FLOAT16
onnx.save(m, dst)
np.save(xout, np.load(xin).astype(np.float16))
PYEOF
	run -0 mlconvert "$1.onnx" -o "$1.mlg"
	run -0 mlrun "$1.mlg" --device cpu --input input=x.npy --output-dir cpu
	run -0 mlrun "$1.mlg" --device cl --input input=x.npy --output-dir cl
	npcmp cl/output.npy cpu/output.npy --rtol 5e-3 --atol 5e-3
	run -0 mlrun "$1.mlg" --device cl --plan
	local bad
	bad=$(echo "$output" | awk '$4 == "cpu" && ($3 == "Conv" || $3 == "Gemm" || $3 == "MatMul")')
	[ -z "$bad" ] || { echo "on the CPU: $bad" >&2; return 1; }
}

@test "resnet18 in f16 with --device cl matches --device cpu" {
	check_model_f16 resnet18
}

@test "mobilenet_v2 (depthwise) in f16 with --device cl matches --device cpu" {
	check_model_f16 mobilenet_v2
}

@test "a transformer encoder in f16 with --device cl matches --device cpu" {
	check_model_f16 transformer
}

@test "resnet18 with mlquant --dtype fp16 runs its fp16-weight products on the device and matches the CPU" {
	require_opencl
	local d=$ML_MODELS/resnet18
	run -0 mlconvert "$d/model.onnx" -o r.mlg
	run -0 mlquant --dtype fp16 r.mlg -o r16.mlg
	# no Cast: the device widens each fp16 weight as it runs the product
	run -0 mlrun r16.mlg --device cl --plan
	[[ $output != *" Cast "* ]]
	[[ $output == *" Conv "*" cl:0 "* ]]
	bad=$(echo "$output" | awk '$4 == "cpu" && $3 != "Constant"')
	[ -z "$bad" ] || { echo "on the CPU: $bad" >&2; return 1; }
	run -0 mlrun r16.mlg --device cl --input "input=$d/input.npy" --output-dir cl
	run -0 mlrun r16.mlg --device cpu --input "input=$d/input.npy" --output-dir cpu
	npcmp cl/output.npy cpu/output.npy --rtol 1e-3 --atol 1e-4
	npcmp cl/output.npy "$d/output.npy" --rtol 1e-2 --atol 1e-2
}
