#!/usr/bin/env bats
# 5000-mlrun-basic.bats: mlrun on small generated models: inputs from .npy
# files or random, outputs to .npy files or printed, every model format,
# symbolic dims, timing and the JSON report.
bats_require_minimum_version 1.5.0
load helpers

@test "mlrun writes each output to DIR/NAME.npy matching numpy" {
	for m in add mlp conv i64; do
		mkmlg $m
		args=()
		for f in $m.in/*.npy; do
			args+=(-i "$(basename "$f" .npy)=$f")
		done
		run -0 mlrun $m.mlg "${args[@]}" --output-dir out.$m
		npcmpdir out.$m $m.ref
	done
}

@test "mlrun accepts --input NAME=FILE and -i NAME=FILE alike" {
	mkmlg add
	run -0 mlrun add.mlg --input x=add.in/x.npy --input y=add.in/y.npy --output-dir a
	run -0 mlrun add.mlg -i x=add.in/x.npy -i y=add.in/y.npy -o b
	cmp a/z.npy b/z.npy
	npcmp a/z.npy add.ref/z.npy
}

@test "mlrun writes every output of a graph with several" {
	mkmlg two
	run -0 mlrun two.mlg -i x=two.in/x.npy -o out
	[ "$(ls out | sort | tr '\n' ' ')" = "neg.npy pos.npy " ]
	npcmpdir out two.ref
}

@test "mlrun replaces characters outside [A-Za-z0-9._-] in output file names" {
	mkmlg names
	run -0 mlrun names.mlg -i 'in:0=names.in/in_0.npy' -o out
	[ "$(ls out)" = "out_0_1.npy" ]
	npcmp out/out_0_1.npy names.ref/out_0_1.npy
}

@test "mlrun prints each output's name, dtype, shape and first values" {
	mkmlg add
	run -0 mlrun add.mlg -i x=add.in/x.npy -i y=add.in/y.npy
	[ "${lines[0]}" = "z f32[2,3]" ]
	set -- ${lines[1]}
	"$PY" -c 'import numpy as np, sys; w = np.load("add.ref/z.npy").flat[0]; sys.exit(int(abs(float(sys.argv[1]) - w) > 1e-4))' "$1"
}

@test "mlrun prints an integer output as integers" {
	mkmlg i64
	run -0 mlrun i64.mlg -i x=i64.in/x.npy
	[ "${lines[0]}" = "y i64[4]" ]
	want=$("$PY" -c 'import numpy as np; print(" ".join(map(str, np.load("i64.ref/y.npy"))))')
	[ "$(echo ${lines[1]})" = "$want" ]
}

@test "mlrun runs .mlg, .onnx and .mlt models and '-' from stdin alike" {
	mkmlg mlp
	run -0 mlconvert mlp.mlg -o mlp.mlt
	run -0 mlrun mlp.mlg -i x=mlp.in/x.npy -o a
	run -0 mlrun mlp.onnx -i x=mlp.in/x.npy -o b
	run -0 mlrun mlp.mlt -i x=mlp.in/x.npy -o c
	run -0 mlrun - -i x=mlp.in/x.npy -o d <mlp.mlg
	run -0 mlrun -i x=mlp.in/x.npy -o e <mlp.onnx
	for d in a b c d e; do
		cmp a/y.npy $d/y.npy
	done
	npcmp a/y.npy mlp.ref/y.npy
}

@test "mlrun binds symbolic dims from the inputs" {
	mkmlg relu
	for n in 1 5 7; do
		mknpy x$n.npy float32 $n,3 --seed $n
		run -0 mlrun relu.mlg -i x=x$n.npy -o out$n
		run -0 npyutil info out$n/y.npy
		[ "$output" = "float32 ($n, 3)" ]
	done
	run -0 mlrun relu.mlg -i x=relu.in/x.npy -o out
	npcmpdir out relu.ref
}

@test "mlrun --random makes every input, the same for the same --seed" {
	mkmlg add
	run -0 mlrun add.mlg --random -o a
	run -0 mlrun add.mlg --random --seed 0 -o b
	run -0 mlrun add.mlg --random --seed 7 -o c
	run -0 mlrun add.mlg --random --seed 7 -o d
	cmp a/z.npy b/z.npy
	cmp c/z.npy d/z.npy
	run -1 cmp -s a/z.npy c/z.npy
}

@test "mlrun --random fills only the inputs not given" {
	mkmlg add
	mknpy zero.npy float32 2,3 --fill 0
	run -0 mlrun add.mlg -i x=zero.npy --random --seed 3 -o a
	run -0 mlrun add.mlg -i x=zero.npy --random --seed 3 -o b
	cmp a/z.npy b/z.npy
}

@test "mlrun --random with --dim sizes a symbolic dim" {
	mkmlg relu
	run -0 mlrun relu.mlg --random --dim N=6 -o out
	run -0 npyutil info out/y.npy
	[ "$output" = "float32 (6, 3)" ]
}

@test "mlrun -i NAME=zeros and NAME=ones make constant inputs" {
	mkmlg add
	run -0 mlrun add.mlg -i x=zeros -i y=ones -o out
	mknpy ones.npy float32 2,3 --fill 1
	npcmp out/z.npy ones.npy
}

@test "mlrun --repeat N --warmup K prints latency and throughput" {
	mkmlg mlp
	run -0 mlrun mlp.mlg --random --repeat 5 --warmup 2
	[[ $output == *latency* ]]
	for w in min median p90 max; do
		[[ $output == *"$w"* ]]
	done
	[[ $output == *throughput* ]]
	[[ $output == *"5 runs"* ]]
}

@test "mlrun --json prints a report with latency_ms min, median, p90 and max" {
	mkmlg mlp
	mlrun mlp.mlg --random --repeat 4 --warmup 1 --json >r.json
	for k in min median p90 max; do
		run -0 json_get r.json latency_ms.$k
		"$PY" -c 'import sys; v = float(sys.argv[1]); sys.exit(not v >= 0)' "$output"
	done
	run -0 "$PY" -c 'import json; d = json.load(open("r.json")); l = d["latency_ms"]; print(l["min"] <= l["median"] <= l["p90"] <= l["max"])'
	[ "$output" = True ]
}

@test "mlrun --json without --repeat still prints one JSON document" {
	mkmlg add
	mlrun add.mlg --random --json >r.json
	run -0 json_get r.json latency_ms.median
}

@test "mlrun gives the same results with --threads 1 and --threads 2" {
	mkmlg conv
	run -0 mlrun conv.mlg -i x=conv.in/x.npy --threads 1 -o a
	run -0 mlrun conv.mlg -i x=conv.in/x.npy --threads 2 -o b
	npcmp a/y.npy b/y.npy --rtol 1e-5 --atol 1e-6
	npcmp a/y.npy conv.ref/y.npy
	mlrun conv.mlg --random --threads 2 --json >r.json
	run -0 json_get r.json threads
	[ "$output" = 2 ]
}

@test "mlrun creates the output folder when it does not exist" {
	mkmlg add
	run -0 mlrun add.mlg --random -o new
	[ -f new/z.npy ]
}

@test "mlrun -q prints nothing" {
	mkmlg add
	run -0 --separate-stderr mlrun -q add.mlg --random --repeat 2
	[ -z "$output" ]
	[ -z "$stderr" ]
}

@test "mlrun output files are .npy arrays numpy reads" {
	mkmlg mlp
	run -0 mlrun mlp.mlg --random -o out
	run -0 npyutil info out/y.npy
	[ "$output" = "float32 (1, 3)" ]
}

@test "mlrun loads OpenBLAS only for a product that needs it, and ML_BLAS=none computes without it" {
	mkmlg add
	mkmlg conv
	# elementwise only: libopenblas is never opened
	LD_DEBUG=files run -0 --separate-stderr mlrun add.mlg -i x=add.in/x.npy -i y=add.in/y.npy -o a
	[[ "$stderr" != *libopenblas* ]]
	npcmp a/z.npy add.ref/z.npy
	args=()
	for f in conv.in/*.npy; do
		args+=(-i "$(basename "$f" .npy)=$f")
	done
	# the convolution's GEMM through BLAS (not the direct kernel that takes
	# few input channels): opened at first use
	ML_PGEMM=0 ML_WINOGRAD=0 ML_CONV_DIRECT=0 LD_DEBUG=files run -0 --separate-stderr mlrun conv.mlg "${args[@]}" -o b
	[[ "$stderr" == *libopenblas* ]]
	npcmpdir b conv.ref
	# the portable loop gives the same products
	ML_BLAS=none ML_PGEMM=0 ML_WINOGRAD=0 ML_CONV_DIRECT=0 LD_DEBUG=files run -0 --separate-stderr mlrun conv.mlg "${args[@]}" -o c
	[[ "$stderr" != *libopenblas* ]]
	npcmpdir c conv.ref
}
