#!/usr/bin/env bats
# 9110-models-opt.bats: mlopt on real networks exported from PyTorch
# (tests/models/export.py, cached in build/models, as 9100-models.bats): the
# -O2 graph's output within rtol 1e-4 of the unoptimised graph's and within
# 1e-3 of PyTorch's, every pass checked by --verify, optimisation idempotent,
# and the node counts the issue asks for. Latency is bench_opt.py's.
bats_require_minimum_version 1.5.0
load helpers

ML_MODELS=${ML_MODELS:-$(dirname "$ML_BIN")/models}
MODELS="resnet18 mobilenet_v2 convnext_tiny transformer transformer_op17 efficientnet_b0 densenet121 squeezenet1_1"

setup_file() {
	local rc=0 log=$BATS_FILE_TMPDIR/export.log
	"$PY" "$ML_ROOT/tests/models/export.py" -o "$ML_MODELS" $MODELS >"$log" 2>&1 || rc=$?
	sed 's/^/# /' "$log" >&3
	return "$rc"
}

# check_opt NAME [MIN_FEWER_PERCENT]: optimise, verify, compare, check idempotence.
check_opt() {
	local d=$ML_MODELS/$1
	[ -f "$d/model.onnx" ] || { echo "$d/model.onnx was not exported" >&2; return 1; }
	run -0 mlconvert "$d/model.onnx" -o m.mlg
	run -0 mlopt -O2 --verify -i "input=$d/input.npy" --rtol 1e-4 --atol 1e-5 --report --json \
		m.mlg -o o.mlg
	echo "$output" >r.json
	run -0 mlrun m.mlg -i "input=$d/input.npy" -o o0
	run -0 mlrun o.mlg -i "input=$d/input.npy" -o o2
	npcmp o2/output.npy o0/output.npy --rtol 1e-4 --atol 1e-5
	npcmp o2/output.npy "$d/output.npy" --rtol 1e-3 --atol 1e-4
	run -0 mlopt -O2 o.mlg -o again.mlg
	cmp o.mlg again.mlg
	local before after
	before=$(json_get r.json nodes_before)
	after=$(json_get r.json nodes_after)
	echo "# $1: $before -> $after nodes" >&3
	[ "$after" -lt "$before" ]
	if [ -n "${2:-}" ]; then
		[ $((100 * (before - after))) -ge $(($2 * before)) ] ||
			{ echo "$1: $before -> $after nodes, not $2% fewer" >&2; return 1; }
	fi
}

@test "resnet18 at -O2 matches the unoptimised graph and PyTorch" {
	check_opt resnet18
}

@test "mobilenet_v2 at -O2 matches the unoptimised graph and PyTorch" {
	check_opt mobilenet_v2
}

@test "convnext_tiny at -O2 matches, with at least 40% fewer nodes" {
	check_opt convnext_tiny 40
}

@test "the transformer encoder (opset 14) at -O2 matches, with at least 40% fewer nodes" {
	check_opt transformer 40
}

@test "the transformer encoder (opset 17) at -O2 matches" {
	check_opt transformer_op17
}

@test "efficientnet_b0 (SiLU) at -O2 matches the unoptimised graph and PyTorch" {
	check_opt efficientnet_b0
}

@test "densenet121 at 64x64 (4x4 and 2x2 planes) at -O2 matches the unoptimised graph and PyTorch" {
	check_opt densenet121
}

@test "squeezenet1_1 at -O2 matches the unoptimised graph and PyTorch" {
	check_opt squeezenet1_1
}

@test "fused nodes of convnext_tiny carry fused_from with the ops they replace" {
	run -0 mlconvert "$ML_MODELS/convnext_tiny/model.onnx" -o m.mlg
	run -0 mlopt m.mlg -o o.mlt
	grep -q 'ml.LayerNormalization <fused_from = \[".*:ReduceMean"' o.mlt
	grep -q 'ml.FusedMatMul <fused_from = \[".*:MatMul", ".*:Add", ".*:Div", ".*:Erf"' o.mlt
}

@test "the transformer through a pipe: mlconvert | mlopt -O2 | mlrun -" {
	local d=$ML_MODELS/transformer
	run -0 sh -c "mlconvert '$d/model.onnx' | mlopt -O2 | mlrun - -i 'input=$d/input.npy' -o out"
	npcmp out/output.npy "$d/output.npy" --rtol 1e-3 --atol 1e-4
}
