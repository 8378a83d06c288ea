#!/usr/bin/env bats
# 1000-mlconvert-basic.bats: mlconvert between ONNX, .mlg and the .mlt text
# form; format detection; stdin and stdout; --info; the terminal rule.
bats_require_minimum_version 1.5.0
load helpers

@test "mlconvert turns an ONNX model into an mlg file that runs" {
	mkmodel mlp
	run -0 mlconvert mlp.onnx -o mlp.mlg
	[ -s mlp.mlg ]
	run -0 mlrun mlp.mlg -i x=mlp.in/x.npy -o out
	npcmp out/y.npy mlp.ref/y.npy
}

@test "mlconvert writes mlg to stdout when not a terminal, the same bytes as -o" {
	mkmodel mlp
	run -0 mlconvert mlp.onnx -o a.mlg
	mlconvert mlp.onnx >b.mlg
	cmp a.mlg b.mlg
}

@test "mlconvert reads '-' and no operand as stdin, detecting ONNX by content" {
	mkmodel mlp
	run -0 mlconvert mlp.onnx -o ref.mlg
	mlconvert - <mlp.onnx >a.mlg
	cmp ref.mlg a.mlg
	mlconvert <mlp.onnx >b.mlg
	cmp ref.mlg b.mlg
	mlconvert -o c.mlg <mlp.onnx
	cmp ref.mlg c.mlg
}

@test "mlconvert detects formats by magic, not only by extension" {
	mkmodel mlp
	cp mlp.onnx model.bin
	run -0 mlconvert model.bin -o a.mlg
	run -0 mlconvert mlp.onnx -o b.mlg
	cmp a.mlg b.mlg
	cp a.mlg graph.data
	run -0 mlconvert graph.data -o c.mlg
	cmp a.mlg c.mlg
}

@test "mlconvert --from and --to name the formats explicitly" {
	mkmodel mlp
	run -0 mlconvert mlp.onnx -o ref.mlg
	mlconvert --from onnx --to mlg - <mlp.onnx >a.out
	cmp ref.mlg a.out
	run -0 mlconvert --to onnx -o b.out ref.mlg
	npyutil onnx-check b.out
	run -0 mlconvert --from mlg --to mlt -o c.out ref.mlg
	run -0 mlconvert --from mlt -o d.mlg c.out
	run -0 mlconvert --to mlt -o e.out d.mlg
	cmp c.out e.out
}

@test "mlconvert mlg to ONNX passes onnx.checker and runs the same" {
	for m in mlp conv two names i64; do
		mkmlg $m
		run -0 mlconvert $m.mlg -o back.onnx
		run -0 npyutil onnx-check back.onnx
		run -0 mlconvert back.onnx -o again.mlg
		rm -rf out
		args=()
		for f in $m.in/*.npy; do
			n=$(basename "$f" .npy)
			[ $m = names ] && n='in:0'
			args+=(-i "$n=$f")
		done
		run -0 mlrun again.mlg "${args[@]}" -o out
		npcmpdir out $m.ref
	done
}

@test "mlconvert ONNX export keeps the op types, names and initializers" {
	mkmlg mlp
	run -0 mlconvert mlp.mlg -o back.onnx
	run -0 npyutil onnx-check back.onnx
	[ "$output" = "MatMul Add Relu MatMul Add" ]
}

@test "ONNX to mlg to ONNX to mlg gives the same mlg bytes" {
	mkmlg conv
	run -0 mlconvert conv.mlg -o back.onnx
	run -0 mlconvert back.onnx -o again.mlg
	cmp conv.mlg again.mlg
}

@test "mlconvert mlg to mlt and back keeps the graph" {
	mkmlg mlp
	run -0 mlconvert mlp.mlg -o mlp.mlt
	run -0 grep -q MatMul mlp.mlt
	run -0 mlconvert mlp.mlt -o back.mlg
	run -0 mlrun mlp.mlg -i x=mlp.in/x.npy -o a
	run -0 mlrun back.mlg -i x=mlp.in/x.npy -o b
	cmp a/y.npy b/y.npy
	# once through the text form, the graph file is stable
	run -0 mlconvert back.mlg -o back.mlt
	cmp mlp.mlt back.mlt
	run -0 mlconvert back.mlt -o again.mlg
	cmp back.mlg again.mlg
}

@test "text to graph to text round-trips" {
	mkmlg conv
	run -0 mlconvert conv.mlg -o a.mlt
	run -0 mlconvert a.mlt -o b.mlg
	run -0 mlconvert b.mlg -o b.mlt
	cmp a.mlt b.mlt
	run -0 mlconvert --to mlt - <b.mlg
	[ "$output" = "$(cat a.mlt)" ]
}

@test "mlconvert writes text to a terminal but refuses binary without -f" {
	mkmodel mlp
	run -0 on_tty mlconvert --to mlt mlp.onnx
	run -0 grep -q MatMul tty.out
	run -2 on_tty mlconvert mlp.onnx
	run -0 grep -q 'terminal' tty.out
	run -0 on_tty mlconvert -f mlp.onnx
	[ "$(filesize tty.out)" -gt 100 ]
}

@test "mlconvert --info lists inputs, outputs, op counts, parameters and FLOPs" {
	mkmodel mlp
	run -0 mlconvert --info mlp.onnx
	[[ $output == *x* ]]
	[[ $output == *y* ]]
	[[ $output == *f32* ]]
	[[ $output == *MatMul* ]]
	[[ $output == *Relu* ]]
	# 4*8 + 8 + 8*3 + 3 parameters, 4 bytes each
	[[ $output == *67* ]]
	[[ $output == *268* ]]
	[[ ${output,,} == *flops* ]]
}

@test "mlconvert --info reads mlg, mlt and stdin alike" {
	mkmlg mlp
	run -0 mlconvert --info mlp.onnx
	want=$output
	run -0 mlconvert mlp.mlg -o mlp.mlt
	for f in mlp.mlg mlp.mlt; do
		run -0 mlconvert --info $f
		[[ $output == *MatMul* && $output == *67* ]]
	done
	run -0 mlconvert --info - <mlp.mlg
	[[ $output == *MatMul* && $output == *67* ]]
}

@test "mlconvert --info --json prints one JSON document" {
	mkmodel mlp
	mlconvert --info --json mlp.onnx >info.json
	run -0 "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sorted(d))' info.json
	[[ $output == *inputs* ]]
	[[ $output == *outputs* ]]
	run -0 grep -q MatMul info.json
	run -0 grep -q 67 info.json
}

@test "mlconvert --info -o - writes the model to stdout and the description to stderr" {
	mkmodel mlp
	mlconvert --info mlp.onnx >want.txt
	mlconvert --info -o - mlp.onnx >m.mlg 2>got.txt
	cmp want.txt got.txt
	mlconvert mlp.onnx -o want.mlg
	cmp m.mlg want.mlg
	# with -o FILE the description stays on stdout
	run -0 --separate-stderr mlconvert --info --json -o f.mlg mlp.onnx
	[ -z "$stderr" ]
	echo "$output" >i.json
	[ "$(json_get i.json params)" = 67 ]
	cmp f.mlg want.mlg
}

@test "mlconvert --info shows a symbolic dim by name" {
	mkmodel relu
	run -0 mlconvert --info relu.onnx
	[[ $output == *N* ]]
}

@test "mlconvert keeps an op that the registry lacks" {
	mkmodel unsup
	run -0 mlconvert unsup.onnx -o unsup.mlg
	run -0 mlconvert unsup.mlg -o back.onnx
	run -0 "$PY" -c 'import onnx,sys; n=onnx.load(sys.argv[1]).graph.node[0]; print(n.domain, n.op_type)' back.onnx
	[ "$output" = "com.example Frobnicate" ]
}

@test "mlconvert -o with an extension picks the output format" {
	mkmlg mlp
	run -0 mlconvert mlp.mlg -o m.onnx
	run -0 npyutil onnx-check m.onnx
	run -0 mlconvert mlp.mlg -o m.mlt
	run -0 od -An -c -N3 m.mlt
	[[ $output != *"M   L   G"* ]]
}

@test "mlconvert -- ends the options" {
	mkmodel mlp
	cp mlp.onnx ./-m.onnx
	run -0 mlconvert -o a.mlg -- -m.onnx
	[ -s a.mlg ]
}

@test "mlconvert overwrites an existing output atomically" {
	mkmodel mlp
	mkmodel add
	run -0 mlconvert add.onnx -o out.mlg
	run -0 mlconvert mlp.onnx -o out.mlg
	run -0 mlconvert mlp.onnx -o ref.mlg
	cmp ref.mlg out.mlg
	no_temp_files
}
