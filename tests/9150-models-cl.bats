#!/usr/bin/env bats
# 9150-models-cl.bats: the real networks of 9100-models.bats (exported from
# PyTorch by tests/models/export.py, cached in build/models) run with
# mlrun --device cl and --device auto, compared with PyTorch's output at
# the same tolerance as on the CPU. Skips without an OpenCL device.
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

@test "resnet18 with --device auto matches PyTorch" {
	check_model_cl resnet18 auto
}

@test "a transformer encoder with --device auto matches PyTorch" {
	check_model_cl transformer auto
}
