#!/usr/bin/env bats
# 9100-models.bats: real networks exported from PyTorch (tests/models/export.py,
# seeded, never downloaded, cached in build/models), converted with mlconvert,
# run with mlrun, and compared with PyTorch's output (rtol 1e-3, atol 1e-4).
bats_require_minimum_version 1.5.0
load helpers

ML_MODELS=${ML_MODELS:-$(dirname "$ML_BIN")/models}

setup_file() {
	local rc=0 log=$BATS_FILE_TMPDIR/export.log
	"$PY" "$ML_ROOT/tests/models/export.py" -o "$ML_MODELS" >"$log" 2>&1 || rc=$?
	sed 's/^/# /' "$log" >&3
	return "$rc"
}

# check_model NAME: convert, run on the saved input, compare with PyTorch.
check_model() {
	local d=$ML_MODELS/$1
	[ -f "$d/model.onnx" ] || { echo "$d/model.onnx was not exported" >&2; return 1; }
	run -0 mlconvert "$d/model.onnx" -o "$1.mlg"
	run -0 mlrun "$1.mlg" --input "input=$d/input.npy" --output-dir out
	npcmp out/output.npy "$d/output.npy" --rtol 1e-3 --atol 1e-4
}

@test "resnet18 (opset 14) matches PyTorch" {
	check_model resnet18
}

@test "mobilenet_v2 (opset 13) matches PyTorch" {
	check_model mobilenet_v2
}

@test "squeezenet1_1 (opset 11) matches PyTorch" {
	check_model squeezenet1_1
}

@test "efficientnet_b0 (opset 14) matches PyTorch" {
	check_model efficientnet_b0
}

@test "densenet121 at 64x64 (opset 14) matches PyTorch" {
	check_model densenet121
}

@test "a 2-layer transformer encoder (opset 14) matches PyTorch" {
	check_model transformer
}

@test "a 2-layer transformer encoder (opset 17, LayerNormalization) matches PyTorch" {
	check_model transformer_op17
}

@test "an LSTM network matches PyTorch" {
	check_model lstm
}

@test "a GRU network matches PyTorch" {
	check_model gru
}

@test "shufflenet_v2 (opset 14, channel shuffle) matches PyTorch" {
	check_model shufflenet_v2
}

@test "the README's 784-256-128-10 MLP (opset 14) matches PyTorch" {
	check_model mlp
}

@test "LeNet-5 on 28x28 (opset 14) matches PyTorch" {
	check_model lenet
}

@test "resnet18 back to ONNX passes onnx.checker and still matches" {
	local d=$ML_MODELS/resnet18
	run -0 mlconvert "$d/model.onnx" -o r.mlg
	run -0 mlconvert r.mlg -o back.onnx
	run -0 npyutil onnx-check back.onnx
	run -0 mlrun back.onnx -i "input=$d/input.npy" -o out
	npcmp out/output.npy "$d/output.npy" --rtol 1e-3 --atol 1e-4
}

@test "the transformer runs from the text form and matches" {
	local d=$ML_MODELS/transformer
	run -0 mlconvert "$d/model.onnx" -o t.mlt
	run -0 mlrun t.mlt -i "input=$d/input.npy" -o out
	npcmp out/output.npy "$d/output.npy" --rtol 1e-3 --atol 1e-4
}
