#!/usr/bin/env bats
# 5040-mlrun-bench.bats: mlrun as a benchmark and a reader of outputs:
# --duration, --warmup by time, p95/p99 in the summary and in --json, each
# run's latency in --json, -v's per-run times, --json-values, and every
# malformed value with its status.
bats_require_minimum_version 1.5.0
load helpers

# now: seconds since the epoch, with fractions
now() {
	date +%s.%N
}

@test "mlrun --duration runs for that long and reports each run's latency in --json" {
	mkmlg mlp
	t0=$(now)
	run -0 --separate-stderr mlrun mlp.mlg --random --duration 300ms --json
	t1=$(now)
	echo "$output" >r.json
	"$PY" - "$t0" "$t1" <<-'EOF'
	import json, sys
	d = json.load(open("r.json"))
	t0, t1 = float(sys.argv[1]), float(sys.argv[2])
	assert t1 - t0 >= 0.3, t1 - t0
	l, runs = d["latency_ms"], d["latencies_ms"]
	assert d["runs"] >= 1 and len(runs) == d["runs"], (d["runs"], len(runs))
	assert d["duration_s"] == 0.3 and d["warmup"] == 1
	# the timed runs add up to most of the duration
	assert sum(runs) <= 1e3 * (t1 - t0)
	assert l["min"] == min(runs) and l["max"] == max(runs)
	assert l["min"] <= l["p50"] <= l["p90"] <= l["p95"] <= l["p99"] <= l["max"]
	assert l["p50"] == l["median"]
	EOF
	# a plain number is seconds; the text summary has p95 and p99
	run -0 mlrun mlp.mlg --random --duration 0.1
	[[ ${lines[-2]} == "latency ms: min "*" median "*" p90 "*" p95 "*" p99 "*" max "*" runs, 1 warmup, "* ]]
}

@test "mlrun --repeat's --json lists the N latencies in run order, and p95/p99 from them" {
	mkmlg mlp
	mlrun mlp.mlg --random --repeat 20 --warmup 0 --json >r.json
	"$PY" - <<-'EOF'
	import json
	d = json.load(open("r.json"))
	runs = d["latencies_ms"]
	assert d["runs"] == 20 and len(runs) == 20 and d["warmup"] == 0
	s = sorted(runs)
	l = d["latency_ms"]
	# nearest rank: index round((n-1) p)
	assert abs(l["p95"] - s[round(19 * 0.95)]) < 1e-3 and abs(l["p99"] - s[19]) < 1e-3, (l, s)
	assert abs(l["mean"] - sum(runs) / 20) < 1e-3
	EOF
	run -0 mlrun mlp.mlg --random --repeat 5
	[[ $output == *" p95 "*" p99 "*"(5 runs, 1 warmup, "* ]]
}

@test "mlrun --warmup by time warms up for that long, then runs --repeat N" {
	mkmlg mlp
	t0=$(now)
	mlrun mlp.mlg --random --repeat 3 --warmup 250ms --json >r.json
	t1=$(now)
	"$PY" - "$t0" "$t1" <<-'EOF'
	import json, sys
	d = json.load(open("r.json"))
	assert float(sys.argv[2]) - float(sys.argv[1]) >= 0.25
	assert d["runs"] == 3 and d["warmup"] >= 1 and d["warmup_s"] == 0.25, d
	EOF
	run -0 mlrun mlp.mlg --random --duration 50ms --warmup 1s --json
	echo "$output" >r2.json
	[ "$(json_get r2.json warmup_s)" = 1 ]
}

@test "mlrun -v prints each timed run's time on stderr, and nothing more on stdout" {
	mkmlg mlp
	run -0 --separate-stderr mlrun mlp.mlg --random --repeat 4 --warmup 2 -v
	[ "$(grep -cE '^mlrun: run [0-3]: [0-9.]+ ms$' <<<"$stderr")" -eq 4 ]
	[[ $stderr == *"mlrun: arena "* ]]
	[[ $output != *"mlrun: run"* ]]
	# one run without --repeat is no benchmark: no per-run line
	run -0 --separate-stderr mlrun mlp.mlg --random -v
	[[ $stderr != *"mlrun: run 0"* ]]
}

@test "mlrun --json-values gives each output's values, the same as -o writes" {
	mkmlg mlp
	mkmlg i64
	run -0 mlrun mlp.mlg -i x=mlp.in/x.npy --json --json-values -o out
	echo "$output" >r.json
	run -0 mlrun i64.mlg -i x=i64.in/x.npy --json --json-values -o iout
	echo "$output" >i.json
	"$PY" - <<-'EOF'
	import json
	import numpy as np
	d = json.load(open("r.json"))
	o = d["outputs"][0]
	y = np.load("out/y.npy")
	assert o["name"] == "y" and o["dtype"] == "f32" and o["shape"] == list(y.shape)
	# nine digits read back the same float32
	assert np.array_equal(np.array(o["values"], dtype=np.float32), y.ravel()), (o["values"], y)
	assert np.allclose(y, np.load("mlp.ref/y.npy"), rtol=1e-5, atol=1e-6)
	i = json.load(open("i.json"))["outputs"][0]
	yi = np.load("iout/y.npy")
	assert i["dtype"] == "i64" and i["values"] == yi.ravel().tolist(), (i, yi)
	assert all(type(v) is int for v in i["values"])
	EOF
	# without --json-values the report has no values
	run -0 mlrun mlp.mlg --random --json
	[[ $output != *'"values"'* ]]
}

@test "mlrun --json-values writes NaN and infinities as null, so the report stays JSON" {
	"$PY" - <<-'EOF'
	import onnx
	from onnx import helper, TensorProto as T
	g = helper.make_graph([helper.make_node("Div", ["x", "y"], ["z"])], "div",
	                      [helper.make_tensor_value_info("x", T.FLOAT, [3]),
	                       helper.make_tensor_value_info("y", T.FLOAT, [3])],
	                      [helper.make_tensor_value_info("z", T.FLOAT, [3])])
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	onnx.save(m, "div.onnx")
	EOF
	"$PY" -c 'import numpy as np; np.save("x.npy", np.array([0, 1, 3], np.float32)); np.save("y.npy", np.array([0, 0, 2], np.float32))'
	mlrun div.onnx -i x=x.npy -i y=y.npy --json --json-values >r.json
	"$PY" -c '
import json
d = json.loads(open("r.json").read(), parse_constant=lambda c: 1 / 0)
assert d["outputs"][0]["values"] == [None, None, 1.5], d'
}

@test "mlrun refuses malformed --duration, --warmup and --json-values with status 2" {
	mkmlg add
	for a in "--duration 0" "--duration -1" "--duration x" "--duration 5k" "--duration s" \
		"--duration 2ms5" "--duration 1e8" "--warmup 0s --repeat 2" "--warmup 2x --repeat 2" \
		"--warmup -1s --repeat 2" "--json-values" "--json-values --repeat 2"; do
		run -2 --separate-stderr mlrun add.mlg --random $a
		if [[ $stderr != "mlrun: "*"usage: mlrun"* ]]; then
			echo "$a: $stderr" >&2
			return 1
		fi
	done
	run -2 --separate-stderr mlrun add.mlg --random --duration 1 --repeat 3
	[[ $stderr == "mlrun: --repeat and --duration exclude each other"* ]]
	run -2 --separate-stderr mlrun add.mlg --random --warmup 1s
	[[ $stderr == "mlrun: --warmup needs --repeat or --duration"* ]]
	run -2 --separate-stderr mlrun add.mlg --random --json-values
	[[ $stderr == "mlrun: --json-values needs --json"* ]]
}
