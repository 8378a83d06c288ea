#!/usr/bin/env bats
# 9120-models-onnx-export.bats: real networks (tests/models/export.py, cached
# in build/models as for 9100-models.bats) optimised at -O2 and -O3, or
# quantised by mlquant (int8 static, calibrated on the model's input, fp16,
# and bf16 of the -O2 model, whose bf16 weights the export casts to float in
# front of the products), exported to ONNX: onnx.checker's full check passes, the export reads
# back as the same graph, and where onnxruntime imports (the bench venv
# build/bench-venv, made by tests/bench/run.sh, or the system's) the export
# runs in it with mlrun's outputs: floats within rtol 1e-4 (the float models)
# or one quantisation step (int8; 2e-2 absolute on these outputs; bf16, whose
# products round their inputs to bf16 where ONNX Runtime computes in float:
# 5e-2).
bats_require_minimum_version 1.5.0
load helpers

ML_MODELS=${ML_MODELS:-$(dirname "$ML_BIN")/models}
MODELS="resnet18 mobilenet_v2 convnext_tiny transformer transformer_op17 efficientnet_b0 squeezenet1_1"
ORT_PY=${ORT_PY:-$(dirname "$ML_BIN")/bench-venv/bin/python}

setup_file() {
	local rc=0 log=$BATS_FILE_TMPDIR/export.log
	"$PY" "$ML_ROOT/tests/models/export.py" -o "$ML_MODELS" $MODELS >"$log" 2>&1 || rc=$?
	sed 's/^/# /' "$log" >&3
	return "$rc"
}

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

# check_export NAME FORM: make NAME's FORM (O2, O3, int8, fp16, fp16-O2, bf16), export it,
# check it, read it back, and run it in ONNX Runtime when there is one.
check_export() {
	local d=$ML_MODELS/$1 tol="--rtol 1e-4 --atol 1e-5"
	[ -f "$d/model.onnx" ] || { echo "$d/model.onnx was not exported" >&2; return 1; }
	case $2 in
	O2 | O3) run -0 mlopt "-$2" "$d/model.onnx" -o m.mlg ;;
	int8) run -0 mlquant -q -c "$d/input.npy" "$d/model.onnx" -o m.mlg
		tol="--rtol 0 --atol 2e-2" ;;
	fp16) run -0 mlquant -q --dtype fp16 "$d/model.onnx" -o m.mlg ;;
	fp16-O2) run -0 mlopt -O2 "$d/model.onnx" -o o2.mlg
		run -0 mlquant -q --dtype fp16 o2.mlg -o m.mlg ;;
	bf16) run -0 mlopt -O2 "$d/model.onnx" -o o2.mlg
		run -0 mlquant -q --dtype bf16 o2.mlg -o m.mlg
		tol="--rtol 0 --atol 5e-2" ;;
	esac
	run -0 mlconvert m.mlg -o m.onnx
	run -0 "$PY" "$TOOLS_DIR/onnxrt.py" check m.onnx
	# read back: the same nodes and tensors as the .mlg it came from (less
	# its memory plan; ONNX lists them in its own order), and ONNX to ONNX
	# gives the same file
	run -0 mlconvert m.onnx -o back.mlt
	run -0 mlconvert m.mlg -o want.mlt
	diff <(sed -n '/^[^ <>]/,$p' want.mlt | sed 's/ <arena_off = [0-9]*>//; s/,$//' | sort) \
		<(sed -n '/^[^ <>]/,$p' back.mlt | sed 's/,$//' | sort)
	run -0 mlconvert m.onnx -o again.onnx
	run -0 mlconvert again.onnx -o third.onnx
	cmp again.onnx third.onnx
	local ort
	ort=$(ort_py) || { echo "# $1 $2: onnxruntime is not installed; not run" >&3; return 0; }
	run -0 mlrun -q m.mlg -i "input=$d/input.npy" -o ref
	run -0 "$ort" "$TOOLS_DIR/onnxrt.py" run m.onnx "$d/input.npy" ref $tol
	echo "# $1 $2: $output" >&3
}

@test "resnet18 exports to ONNX at -O2, -O3, int8, fp16 and bf16" {
	for f in O2 O3 int8 fp16 bf16; do check_export resnet18 $f; done
}

@test "mobilenet_v2 exports to ONNX at -O2, -O3, int8, fp16 and bf16" {
	for f in O2 O3 int8 fp16 bf16; do check_export mobilenet_v2 $f; done
}

@test "convnext_tiny (ConvNHWC, FusedMatMul, the ml LayerNormalization) exports to ONNX at -O2, -O3, int8, fp16 and bf16" {
	for f in O2 O3 int8 fp16 bf16; do check_export convnext_tiny $f; done
}

@test "efficientnet_b0 (ConvNHWC) exports to ONNX at -O2, -O3, int8, fp16 and -O2 then fp16" {
	for f in O2 O3 int8 fp16 fp16-O2; do check_export efficientnet_b0 $f; done
}

@test "squeezenet1_1 (opset 11) exports to ONNX at -O2, -O3, int8 and fp16" {
	for f in O2 O3 int8 fp16; do check_export squeezenet1_1 $f; done
}

@test "the transformer encoders (opsets 14 and 17) export to ONNX at -O2, -O3, int8, fp16 and bf16" {
	for m in transformer transformer_op17; do
		for f in O2 O3 int8 fp16 bf16; do check_export $m $f; done
	done
}
