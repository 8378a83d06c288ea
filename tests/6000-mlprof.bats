#!/usr/bin/env bats
# 6000-mlprof.bats: mlprof on small generated models: the table and its
# options, CSV and JSON, the trace-event file (checked with Python's json),
# the SVG picture, the memory plan, the cost model, training phases,
# `mlprof diff` on same and slowed runs, and every refusal with its status.
bats_require_minimum_version 1.5.0
load helpers

# mkconvnet NAME: four 3x3 convolutions with ReLUs on f32[1,16,48,48], enough
# work per node that node times, not the executor, make up a run.
mkconvnet() {
	"$PY" - "$1" <<-'EOF'
	import sys
	import numpy as np
	import onnx
	from onnx import helper, numpy_helper, TensorProto as T
	rng = np.random.default_rng(3)
	nodes, inits, x = [], [], "x"
	for i in range(4):
	    w = numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32), "w%d" % i)
	    inits.append(w)
	    nodes.append(helper.make_node("Conv", [x, "w%d" % i], ["c%d" % i], name="/block%d/conv" % i,
	                                  pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
	    nodes.append(helper.make_node("Relu", ["c%d" % i], ["r%d" % i], name="/block%d/relu" % i))
	    x = "r%d" % i
	g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", T.FLOAT, [1, 16, 48, 48])],
	                      [helper.make_tensor_value_info(x, T.FLOAT, [1, 16, 48, 48])], inits)
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	onnx.save(m, sys.argv[1] + ".onnx")
	EOF
}

# mkstep NAME [meta]: a graph shaped like a training step, its nodes named
# forward/..., backward/... and optimizer/...; with "meta", plain names and
# the phases in metadata phase:NODE instead.
mkstep() {
	"$PY" - "$1" "${2:-names}" <<-'EOF'
	import sys
	import numpy as np
	import onnx
	from onnx import helper, numpy_helper, TensorProto as T
	meta = sys.argv[2] == "meta"
	spec = [("forward", "MatMul", ["x", "w"], "h"), ("forward", "Relu", ["h"], "a"),
	        ("backward", "Mul", ["a", "a"], "g"), ("backward", "Neg", ["g"], "ng"),
	        ("optimizer", "Add", ["w", "ng"], "w2")]
	nodes, props = [], []
	for i, (ph, op, ins, out) in enumerate(spec):
	    name = "n%d" % i if meta else "%s/n%d" % (ph, i)
	    nodes.append(helper.make_node(op, ins, [out], name=name))
	    if meta:
	        props.append(("phase:" + name, ph))
	w = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
	g = helper.make_graph(nodes, "step", [helper.make_tensor_value_info("x", T.FLOAT, [8, 8])],
	                      [helper.make_tensor_value_info("w2", T.FLOAT, [8, 8])], [w])
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	for k, v in props:
	    e = m.metadata_props.add()
	    e.key, e.value = k, v
	onnx.save(m, sys.argv[1] + ".onnx")
	EOF
}

# pycheck FILE SCRIPT: run a Python check with the JSON of FILE as `d`.
pycheck() {
	"$PY" -c "import json, sys; d = json.load(open(sys.argv[1])); $2" "$1"
}

@test "mlprof prints one row per node with the table's columns" {
	mkmlg mlp
	run -0 --separate-stderr mlprof mlp.mlg --random
	[ -z "$stderr" ]
	[[ ${lines[0]} == "mlp.mlg on cpu: "*" threads, 10 runs after 1 warm-up" ]]
	for col in '#' node op device shape calls median total share GFLOP/s GB/s; do
		[[ ${lines[1]} == *"$col"* ]] || { echo "no column $col" >&2; return 1; }
	done
	for n in fc1 fc1_bias act fc2 fc2_bias; do
		[ "$(printf '%s\n' "${lines[@]:2}" | awk -v n=$n '$2 == n' | wc -l)" -eq 1 ]
	done
	[[ ${lines[7]} == "total: "*" per run (median of 10), nodes "*"% of the run" ]]
	[ "${#lines[@]}" -eq 8 ]
	awk '$2 == "fc1"' <<<"$output" | grep -q '^ *0  *fc1  *MatMul  *cpu  *f32\[1,8\]  *10  '
}

@test "mlprof --sort orders the rows and --top keeps the first N" {
	mkmlg mlp
	run -0 mlprof mlp.mlg --random --sort order
	[ "$(printf '%s\n' "${lines[@]:2:5}" | awk '{ print $2 }' | tr '\n' ' ')" = "fc1 fc1_bias act fc2 fc2_bias " ]
	run -0 mlprof mlp.mlg --random --sort name
	[ "$(printf '%s\n' "${lines[@]:2:5}" | awk '{ print $2 }' | tr '\n' ' ')" = "act fc1 fc1_bias fc2 fc2_bias " ]
	run -0 mlprof mlp.mlg --random --sort op
	[ "$(printf '%s\n' "${lines[@]:2:5}" | awk '{ print $3 }' | tr '\n' ' ')" = "Add Add MatMul MatMul Relu " ]
	for k in time median flops bytes gflops gbps; do
		run -0 mlprof mlp.mlg --random --sort $k
	done
	run -0 mlprof mlp.mlg --random --sort flops --top 2
	[ "${#lines[@]}" -eq 6 ]
	[[ ${lines[2]} == *MatMul* && ${lines[3]} == *MatMul* ]]
	[[ ${lines[4]} == "(3 more rows: "*"%)" ]]
}

@test "mlprof --repeat and --warmup set the runs, -v prints each run" {
	mkmlg add
	run -0 --separate-stderr mlprof add.mlg --random --repeat 3 --warmup 0 -v
	[[ ${lines[0]} == *" 3 runs after 0 warm-up" ]]
	[ "$(grep -c '^mlprof: cpu run [0-9]*: [0-9.]* ms$' <<<"$stderr")" -eq 3 ]
	run -0 mlprof add.mlg --random --repeat 4 --json
	[ "$(json_get /dev/stdin runs <<<"$output")" = 4 ]
}

@test "mlprof binds inputs as mlrun does: -i files, zeros, --dim, --seed, stdin" {
	mkmlg mlp
	run -0 mlprof mlp.mlg -i x=mlp.in/x.npy --json -o a.json
	pycheck a.json 'assert d["nodes"][0]["shape"] == "f32[2,8]", d["nodes"][0]'
	run -0 mlprof mlp.mlg -i x=zeros --dim N=5 --json -o b.json
	pycheck b.json 'assert d["nodes"][4]["shape"] == "f32[5,3]"'
	run -0 mlprof --random --seed 7 --dim N=3 --json - <mlp.mlg
	[[ $output == *'"model": "-"'* ]]
	run -0 mlprof mlp.onnx --random --top 1
	run -0 mlconvert mlp.mlg -o mlp.mlt
	run -0 mlprof mlp.mlt --random --top 1
}

@test "the time of a fused node stays with the ops it came from" {
	mkmlg conv
	run -0 mlopt -O2 conv.mlg -o fused.mlg
	run -0 mlprof fused.mlg --random --repeat 3 --json -o r.json
	pycheck r.json '
n = d["nodes"]
f = [x for x in n if "fused_from" in x]
assert f, [x["op"] for x in n]
parts = f[0]["fused_from"]
assert [(p["name"], p["op"]) for p in parts] == [("conv", "Conv"), ("relu", "Relu")], parts
assert abs(sum(p["share"] for p in parts) - 1) < 1e-6 and parts[0]["share"] > parts[1]["share"]
ops = [o["op"] for o in d["ops"]]
assert ops[:2] == ["Conv", "Relu"] and f[0]["op"] not in ops, ops
assert abs(sum(o["share"] for o in d["ops"]) - 1) < 1e-6
'
	run -0 mlprof fused.mlg --random --group op
	[[ $output == *$'\nConv '* && $output == *$'\nRelu '* ]]
}

@test "mlprof --json holds every node with its samples, the total and the memory plan" {
	mkmlg conv
	run -0 mlprof conv.mlg --random --repeat 5 --json -o r.json
	[ -z "$output" ]
	pycheck r.json '
n = d["nodes"]
assert [x["name"] for x in n] == ["conv", "relu", "gap", "flatten"]
assert [x["op"] for x in n] == ["Conv", "Relu", "GlobalAveragePool", "Flatten"]
for x in n:
    assert x["calls"] == 5 and len(x["samples_ms"]) == 5
    assert x["min_ms"] <= x["median_ms"] <= x["max_ms"]
    assert abs(sum(x["samples_ms"]) - x["total_ms"]) < 1e-6 * max(1, x["total_ms"])
    for k in ("mean_ms", "stddev_ms", "share", "flops", "bytes", "gflops_per_s", "gb_per_s", "device", "shape", "phase"):
        assert k in x, k
assert n[0]["flops"] > 0 and n[0]["bytes"] > 0
assert abs(sum(x["share"] for x in n) - 1) < 1e-6
t = d["total"]
assert t["wall_ms"]["n"] == 5 and len(t["wall_ms"]["samples"]) == 5
assert t["nodes_ms"]["median"] <= t["wall_ms"]["max"]
assert 0 < t["attributed"] <= 1.0001
assert [o["op"] for o in d["ops"]] == ["Conv", "Relu", "GlobalAveragePool", "Flatten"]
assert d["phases"] == []
m = d["memory"]
assert m["arena_bytes"] > 0 and m["peak_bytes"] >= m["arena_bytes"]
assert m["input_bytes"] == 3 * 8 * 8 * 4 and m["weight_bytes"] == (4 * 3 * 9 + 4) * 4
names = [x["name"] for x in m["tensors"]]
assert names == ["c", "r", "p", "y"], names
c = m["tensors"][0]
assert c["bytes"] == 4 * 64 * 4 and c["where"] == "arena" and c["first"] == 0 and c["last"] == 1
assert m["tensors"][3]["last_node"] == "(output)"
'
}

@test "mlprof --csv prints a header and one row per node" {
	mkmlg conv
	run -0 mlprof conv.mlg --random --csv --sort order
	[ "${lines[0]}" = "index,name,op,device,shape,phase,calls,median_ms,total_ms,share,flops,bytes,gflops_per_s,gb_per_s" ]
	[ "${#lines[@]}" -eq 5 ]
	"$PY" -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
assert [r["name"] for r in rows] == ["conv", "relu", "gap", "flatten"]
assert rows[0]["shape"] == "f32[1,4,8,8]" and rows[0]["calls"] == "10"
float(rows[0]["median_ms"]); float(rows[0]["gflops_per_s"])
' <<<"$output"
	run -0 mlprof conv.mlg --random --csv --group op --top 2
	[ "${lines[0]}" = "op,nodes,calls,median_ms,total_ms,share,flops,bytes,gflops_per_s,gb_per_s" ]
	[ "${#lines[@]}" -eq 3 ]
}

@test "mlprof --group gives one row per op type or name prefix" {
	mkconvnet net
	run -0 mlprof net.onnx --random --repeat 2 --group op
	[[ ${lines[1]} == "op "*"nodes"*"calls"* ]]
	[ "$(printf '%s\n' "${lines[@]:2:2}" | awk '{ print $1 "=" $2 }' | sort | tr '\n' ' ')" = "Conv=4 Relu=4 " ]
	run -0 mlprof net.onnx --random --repeat 2 --group prefix --sort name
	[ "$(printf '%s\n' "${lines[@]:2:4}" | awk '{ print $1 "=" $2 }' | tr '\n' ' ')" = "block0=2 block1=2 block2=2 block3=2 " ]
	run -0 mlprof net.onnx --random --repeat 2 --group prefix:2 --sort name --top 1
	[[ ${lines[2]} == "block0/conv "* ]]
	run -0 mlprof net.onnx --random --repeat 2 --group node --top 1
	[[ ${lines[1]} == *"#"*node* ]]
}

@test "mlprof splits a training step's time by phase, from node names or metadata" {
	for how in names meta; do
		mkstep step_$how $how
		run -0 --separate-stderr mlprof step_$how.onnx --random
		[[ ${lines[-1]} == "phases: forward "*", backward "*", optimizer "* ]]
		run -0 mlprof step_$how.onnx --random --group phase --sort order
		[ "$(printf '%s\n' "${lines[@]:2:3}" | awk '{ print $1 "=" $2 }' | tr '\n' ' ')" = "forward=2 backward=2 optimizer=1 " ]
		run -0 mlprof step_$how.onnx --random --json -o s.json
		pycheck s.json '
assert [p["phase"] for p in d["phases"]] == ["forward", "backward", "optimizer"]
assert [x["phase"] for x in d["nodes"]] == ["forward"] * 2 + ["backward"] * 2 + ["optimizer"]
'
	done
}

@test "mlprof on mltrain's step graph splits forward, loss, backward and optimizer time" {
	mkmodel mlp
	run -0 mltrain mlp.onnx --dump-step step.mlg --loss softmax-cross-entropy
	# --random gives the label class indices of the model (3 classes) and a positive lr
	run -0 mlprof step.mlg --random --dim N=16 --repeat 3 --group phase --json -o r.json
	pycheck r.json '
ph = {x["phase"]: x for x in d["phases"]}
assert sorted(ph) == ["backward", "forward", "loss", "optimizer"], sorted(ph)
assert all(x["median_ms"] > 0 for x in ph.values())
assert abs(sum(x["share"] for x in ph.values()) - 1) < 1e-6
'
	run -0 mlprof step.mlg --random --dim N=16 --group phase
	[[ $output == *$'\nbackward '* && $output == *$'\noptimizer '* ]]
}

@test "mlprof says so when a graph marks no phases" {
	mkmlg mlp
	run -0 --separate-stderr mlprof mlp.mlg --random --group phase
	[[ $stderr == "mlprof: no node is marked with a phase"* ]]
	[[ ${lines[2]} == "(none) "*" 5 "* ]]
	run -0 --separate-stderr mlprof mlp.mlg --random
	[[ $output != *phases:* ]]
}

@test "mlprof --memory adds the peak, the arena plan and each tensor's lifetime" {
	mkmlg mlp
	run -0 mlprof mlp.mlg --random --dim N=64 --memory
	grep -q '^memory: peak .* = arena .* (planned) + heap .* + inputs 1.0 KiB; weights .*$' <<<"$output"
	grep -q "^live activations peak at node " <<<"$output"
	grep -q '^tensor  *shape  *bytes  *where  *offset  *lifetime (nodes)$' <<<"$output"
	grep -q '^h0  *f32\[64,8\]  *2048  *arena  *0  *0\.\.1$' <<<"$output"
	grep -q '^y  *f32\[64,3\]  *768  *arena  *[0-9]*  *4\.\.end (output)$' <<<"$output"
}

@test "the trace is trace-event JSON with an X event for every node of every run" {
	mkmlg mlp
	run -0 --separate-stderr mlprof mlp.mlg --random --repeat 3 --trace t.json
	[ -z "$stderr" ]
	[[ ${lines[0]} == "mlp.mlg on cpu: "* ]]
	pycheck t.json '
ev = d["traceEvents"]
nodes = ["fc1", "fc1_bias", "act", "fc2", "fc2_bias"]
for e in ev:
    assert e["ph"] in ("X", "M", "C"), e
    assert isinstance(e["pid"], int) and isinstance(e.get("tid", 0), int)
    if e["ph"] in ("X", "C"):
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
    if e["ph"] == "X":
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
x = [e for e in ev if e["ph"] == "X" and e["cat"] not in ("run", "tensor")]
for n in nodes:
    got = [e for e in x if e["name"] == n]
    assert len(got) == 3, (n, got)
    assert sorted(e["args"]["run"] for e in got) == [0, 1, 2]
    assert all("tid" in e and "pid" in e for e in got)
runs = [e for e in ev if e["ph"] == "X" and e["cat"] == "run"]
assert len(runs) == 3
for e in x:
    r = runs[e["args"]["run"]]
    assert r["pid"] == e["pid"] and r["tid"] == e["tid"]
    assert r["ts"] <= e["ts"] + 1e-3 and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1e-3
names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert names == {"cpu", "memory"}, names
assert {e["args"]["name"] for e in ev if e["name"] == "thread_name"} >= {"cpu queue 0"}
mem = [e for e in ev if e["ph"] == "X" and e["cat"] == "tensor"]
assert sorted(e["name"] for e in mem) == ["h", "h0", "h1", "y", "y0"]
assert len([e for e in ev if e["ph"] == "C"]) == 5
assert d["otherData"]["tool"] == "mlprof"
'
}

@test "mlprof --trace - writes the trace to stdout and the table to stderr" {
	mkmlg add
	run -0 --separate-stderr mlprof add.mlg --random --repeat 2 --trace -
	"$PY" -c 'import json, sys; d = json.load(sys.stdin); assert len([e for e in d["traceEvents"] if e.get("name") == "add"]) == 2' <<<"$output"
	[[ ${stderr_lines[0]} == "add.mlg on cpu: "* ]]
	# -q: the trace alone; -o FILE: the report there
	run -0 --separate-stderr mlprof add.mlg --random --repeat 2 --trace - -q
	[ -z "$stderr" ]
	run -0 --separate-stderr mlprof add.mlg --random --repeat 2 --svg - --json -o r.json
	[ -z "$stderr" ]
	[[ ${lines[-1]} == "</svg>" ]]
	json_get r.json nodes.0.name
}

@test "mlprof --svg draws the timeline and the bar chart as SVG" {
	mkmlg mlp
	run -0 mlprof mlp.mlg --random --svg p.svg --top 3
	[[ ${lines[0]} == "mlp.mlg on cpu: "* ]]
	"$PY" - <<-'EOF'
	import xml.etree.ElementTree as ET
	root = ET.parse("p.svg").getroot()
	assert root.tag == "{http://www.w3.org/2000/svg}svg"
	titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
	for n in ("fc1", "fc1_bias", "act", "fc2", "fc2_bias"):
	    assert any(t.startswith(n + " (") for t in titles), (n, titles)
	rects = list(root.iter("{http://www.w3.org/2000/svg}rect"))
	assert len(rects) >= 2 + 5 + 3, len(rects)
	EOF
	run -0 --separate-stderr mlprof mlp.mlg --random --svg -
	[[ ${lines[0]} == '<?xml version="1.0" encoding="UTF-8"?>' ]]
	[[ ${lines[-1]} == "</svg>" ]]
}

@test "mlprof --svg has a colour legend, and fused convolutions back to back stay apart" {
	mkconvnet net
	mlopt -O2 net.onnx -o net2.mlg
	mkmlg mlp
	run -0 mlprof net2.mlg --random --repeat 3 --svg n.svg
	run -0 mlprof mlp.mlg --random --repeat 3 --svg m.svg --group op
	"$PY" - <<-'EOF'
	import xml.etree.ElementTree as ET
	S = "{http://www.w3.org/2000/svg}"
	def load(f):
	    root = ET.parse(f).getroot()
	    leg = [g for g in root.iter(S + "g") if g.get("class") == "legend"]
	    assert len(leg) == 1, f
	    rects = [r.get("fill") for r in leg[0].iter(S + "rect")]
	    names = [t.text for t in leg[0].iter(S + "text")][1:]
	    assert len(rects) == len(names) and len(set(rects)) == len(rects), (rects, names)
	    return root, dict(zip(names, rects))
	root, leg = load("n.svg")
	assert list(leg) == ["FusedConv"], leg
	spans = [r for r in root.iter(S + "rect") if r.get("height") == "30"
	         and "(FusedConv): " in getattr(r.find(S + "title"), "text", "")]
	assert len(spans) == 4, len(spans)
	fills = [r.get("fill") for r in spans]
	# neighbours differ in shade, the first is the legend's colour; each has an edge
	assert fills[0] == leg["FusedConv"] and all(a != b for a, b in zip(fills, fills[1:])), fills
	assert all(r.get("stroke") == "white" for r in spans)
	root, leg = load("m.svg")
	for op in ("MatMul", "Add", "Relu"):
	    assert op in leg, (op, leg)
	# every bar of the chart has a colour the legend names
	bars = [r for r in root.iter(S + "rect") if r.get("height") == "17"]
	assert bars and all(r.get("fill") in leg.values() for r in bars), [r.get("fill") for r in bars]
	EOF
}

@test "mlprof --svg escapes names that are not XML" {
	"$PY" - <<-'EOF'
	import onnx
	from onnx import helper, TensorProto as T
	g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name='a<b>&"c"')], "g",
	    [helper.make_tensor_value_info("x", T.FLOAT, [4])], [helper.make_tensor_value_info("y", T.FLOAT, [4])])
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
	m.ir_version = 8
	onnx.save(m, "esc.onnx")
	EOF
	run -0 mlprof esc.onnx --random --svg e.svg --trace e.json --csv
	"$PY" -c 'import xml.etree.ElementTree as ET; ET.parse("e.svg")'
	pycheck e.json 'assert any(e.get("name") == "a<b>&\"c\"" for e in d["traceEvents"])'
	[[ ${lines[1]} == '0,"a<b>&""c""",Relu,'* ]]
}

@test "mlprof --calibrate writes the cost model to -o FILE or the cache folder" {
	mkconvnet net
	run -0 mlprof net.onnx --random --repeat 2 --calibrate -o cost.json
	[[ ${lines[0]} == "net.onnx on cpu: "* ]]
	pycheck cost.json '
assert d["format"] == "ml-costmodel" and d["version"] == 1
ops = d["devices"]["cpu"]["ops"]
assert set(ops) == {"Conv", "Relu"}
c = ops["Conv"]
assert c["nodes"] == 4 and c["flops"] > 0 and c["bytes"] > 0 and c["ns"] > 0
assert abs(c["ns_per_flop"] * c["flops"] - c["ns"]) < 1e-6 * c["ns"]
assert abs(c["ns_per_byte"] * c["bytes"] - c["ns"]) < 1e-6 * c["ns"]
'
	run -0 env HOME="$PWD/home" XDG_CACHE_HOME= mlprof net.onnx --random --repeat 1 --calibrate -q
	[ -z "$output" ]
	pycheck home/.cache/ml/costmodel.json 'assert "Conv" in d["devices"]["cpu"]["ops"]'
	run -0 env XDG_CACHE_HOME="$PWD/xdg" mlprof net.onnx --random --repeat 1 --calibrate -q
	[ -f xdg/ml/costmodel.json ]
	no_temp_files
}

@test "mlprof --device all profiles each device side by side and names them" {
	mkmlg mlp
	run -0 --separate-stderr mlprof mlp.mlg --random --device all
	[[ $stderr == "mlprof: devices: cpu"* ]]
	[[ ${lines[1]} == *"cpu median"*best* ]]
	# each node row names the faster device (an OpenCL one too, where there is one)
	[ "$(printf '%s\n' "${lines[@]:2:5}" | grep -cE ' (cpu|cl:[0-9]+) +[0-9.]+%$')" -eq 5 ]
	run -0 mlprof mlp.mlg --random --device all --json -o all.json
	pycheck all.json 'assert d["devices"][0] == "cpu" and d["profiles"][0]["device"] == "cpu"'
	run -0 mlprof diff all.json all.json
}

@test "with --device cl a copy to the host is timed from its own start, not the kernels' queue" {
	mlrun --devices --json >devs.json 2>/dev/null || skip "mlrun --devices failed"
	grep -q '"cl:0"' devs.json || skip "no OpenCL device"
	mkmlg conv
	run -0 mlprof conv.mlg --random --device cl --repeat 5 --trace t.json
	pycheck t.json '
ev = [e for e in d["traceEvents"] if e["ph"] == "X"]
back = [e for e in ev if e["cat"] == "transfer" and e["args"]["direction"] == "device_to_host"]
assert len(back) == 5, back
for x in back:
    run = x["args"]["run"]
    # the kernels of the run on the device (Flatten is a view, timed on the host)
    kern = [e for e in ev if e["cat"] in ("Conv", "Relu", "GlobalAveragePool") and e["args"]["run"] == run]
    assert kern and all(e["args"]["device"] == "cl:0" for e in kern), kern
    end = max(e["ts"] + e["dur"] for e in kern)
    # the read waited for them in the queue; that wait is theirs: its span starts after
    # them (the device clock is fitted to the host one within a few microseconds)
    assert x["ts"] >= end - 5, (x, end)
    assert x["dur"] < 0.5 * (x["ts"] + x["dur"] - min(e["ts"] for e in kern)), (x, kern)
'
}

@test "with --device cl the trace has a lane per device and the transfers as events" {
	mlrun --devices --json >devs.json 2>/dev/null || skip "mlrun --devices failed"
	grep -q '"cl:0"' devs.json || skip "no OpenCL device"
	mkmlg conv
	run -0 mlprof conv.mlg --random --device cl --repeat 2 --trace t.json
	pycheck t.json '
ev = d["traceEvents"]
lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert any(v.startswith("cl:0") for v in lanes.values()), lanes
nodes = [e for e in ev if e["ph"] == "X" and e["pid"] == 1 and e["cat"] not in ("run", "transfer")]
assert len(nodes) == 2 * 4, len(nodes)
assert all(lanes[(1, e["tid"])].startswith(e["args"]["device"]) for e in nodes)
assert any(e["args"]["device"] == "cl:0" for e in nodes)
xf = [e for e in ev if e["ph"] == "X" and e["cat"] == "transfer"]
assert xf and all(e["args"]["bytes"] > 0 and lanes[(1, e["tid"])].startswith("transfers") for e in xf)
'
	run -0 mlprof conv.mlg --random --device cl --json -o r.json
	pycheck r.json 'assert any(x["device"] == "cl:0" for x in d["nodes"])'
}

@test "mlprof --devices prints mlrun's table and exits 3 without an OpenCL device" {
	run --separate-stderr mlprof --devices
	[[ ${lines[0]} == "ID"*"CU"*"MEMORY"*"FP16"*"FP64" ]]
	[[ ${lines[1]} == "cpu "* ]]
	if [ "$status" -eq 3 ]; then
		[[ $stderr == "mlprof: no OpenCL device"* ]]
	else
		[ "$status" -eq 0 ]
		[[ ${lines[2]} == "cl:0 "* ]]
	fi
	# the same table as mlrun's, and the same JSON
	table=$output
	run mlrun --devices
	[ "$output" = "$table" ]
	run --separate-stderr mlprof --devices --json
	echo "$output" >p.json
	run --separate-stderr mlrun --devices --json
	[ "$output" = "$(cat p.json)" ]
	[ "$(json_get p.json devices.0.id)" = cpu ]
	run -2 --separate-stderr mlprof --devices add.mlg
	[[ $stderr == "mlprof: --devices takes no model"* ]]
}

@test "mlprof --devices without an OpenCL platform lists the CPU, says why, and exits 3" {
	ML_CL_FAULT=noplatform run -3 --separate-stderr mlprof --devices
	[ "${#lines[@]}" -eq 2 ]
	[[ ${lines[1]} == "cpu "* ]]
	[[ $stderr == "mlprof: no OpenCL device: "*"no OpenCL platform"* ]]
	ML_CL_FAULT=noplatform run -3 --separate-stderr mlprof --devices --json
	echo "$output" >d.json
	[ "$(json_get d.json devices.0.id)" = cpu ]
	[[ $(json_get d.json opencl) == *"no OpenCL platform"* ]]
}

@test "the node times add up to the run on a model of real work" {
	mkconvnet net
	run -0 mlprof net.onnx --random --repeat 5 --threads 1 --json -o r.json
	pycheck r.json '
t = d["total"]
s = sum(n["median_ms"] for n in d["nodes"])
assert t["attributed"] > 0.85, t
assert abs(s - t["wall_ms"]["median"]) < 0.15 * t["wall_ms"]["median"], (s, t["wall_ms"])
'
}

@test "mlprof diff stays quiet on two reports of the same build" {
	mkmlg mlp
	run -0 mlprof mlp.mlg --random --repeat 20 --json -o a.json
	run -0 mlprof mlp.mlg --random --repeat 20 --json -o b.json
	run -0 mlprof diff a.json a.json
	[[ ${lines[-2]} == "total: "*" per run (median wall), +0.0%, 95% CI "*" (bootstrap)" ]]
	[ "${lines[-1]}" = "no regression beyond the 5.0% threshold" ]
	# two runs of a 3 us model on a shared machine can differ twice over (a busy
	# neighbour, a sanitizer build): a quiet diff in one of three tries is the test
	local k
	for k in 1 2 3; do
		run mlprof diff --threshold 50 a.json b.json
		[ "$status" -eq 0 ] && break
		run -0 mlprof mlp.mlg --random --repeat 20 --json -o b.json
	done
	run -0 mlprof diff --threshold 50 a.json b.json
	[ "${lines[-1]}" = "no regression beyond the 50.0% threshold" ]
	[[ ${lines[0]} == "a: a.json (mlp.mlg, cpu, 20 runs)" ]]
	[ "$(printf '%s\n' "${lines[@]}" | grep -c -E '^(fc1|fc1_bias|act|fc2|fc2_bias) ')" -eq 5 ]
}

@test "mlprof diff flags a deliberately slowed run and exits 1" {
	mkmlg mlp
	run -0 mlprof mlp.mlg --random --repeat 20 --dim N=1 --json -o fast.json
	run -0 mlprof mlp.mlg --random --repeat 20 --dim N=4096 --json -o slow.json
	run -1 --separate-stderr mlprof diff --threshold 50 fast.json slow.json
	[[ ${lines[-1]} == "regression: the total is "*"% slower, beyond the 50.0% threshold" ]]
	[ "$stderr" = "mlprof: slow.json is slower than fast.json beyond the 50% threshold" ]
	run -0 mlprof diff --threshold 50 slow.json fast.json
	run -1 --separate-stderr mlprof diff -q fast.json slow.json
	[ -z "$output" ]
	[[ $stderr == "mlprof: "* ]]
}

@test "mlprof diff's interval decides: a 30% slowdown fails at 5% and 20%, passes at 40%" {
	mkmlg mlp
	run -0 mlprof mlp.mlg --random --repeat 20 --json -o a.json
	"$PY" - <<-'EOF'
	import json
	d = json.load(open("a.json"))
	w = d["total"]["wall_ms"]
	w["samples"] = [1.0 + 0.01 * (i % 5) for i in range(20)]
	w["median"] = 1.02
	json.dump(d, open("a.json", "w"))
	w["samples"] = [x * 1.3 for x in w["samples"]]
	w["median"] *= 1.3
	d["nodes"][0]["median_ms"] *= 1.3
	d["nodes"][0]["samples_ms"] = [x * 1.3 for x in d["nodes"][0]["samples_ms"]]
	json.dump(d, open("b.json", "w"))
	EOF
	run -1 --separate-stderr mlprof diff a.json b.json
	[[ ${lines[-2]} == "total: 1.020 ms -> 1.326 ms per run (median wall), +30.0%, 95% CI +2"*"% to +3"*"% (bootstrap)" ]]
	run -1 mlprof diff --threshold 20% a.json b.json
	run -0 mlprof diff --threshold 40 a.json b.json
	run -1 --separate-stderr mlprof diff --json a.json b.json
	"$PY" -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d["regressed"] is True and abs(d["total"]["change"] - 0.3) < 1e-6
assert d["total"]["method"] == "bootstrap" and 0.2 < d["total"]["ci95"][0] < 0.3 < d["total"]["ci95"][1]
assert d["nodes"][0]["name"] == "fc1" and d["nodes"][0]["status"] == "both"
' <<<"$output"
}

@test "mlprof diff uses Welch's t where reports have no samples" {
	"$PY" - <<-'EOF'
	import json
	def rep(m, sd):
	    return {"model": "m", "device": "cpu", "runs": 10,
	            "total": {"wall_ms": {"median": m, "mean": m, "stddev": sd, "n": 10}},
	            "nodes": [{"name": "x", "op": "Relu", "index": 0, "median_ms": m, "mean_ms": m,
	                       "stddev_ms": sd, "calls": 10}]}
	json.dump(rep(1.0, 0.01), open("a.json", "w"))
	json.dump(rep(1.5, 0.01), open("b.json", "w"))
	json.dump(rep(1.5, 2.0), open("noisy.json", "w"))
	EOF
	run -1 --separate-stderr mlprof diff a.json b.json
	[[ ${lines[-2]} == *"(welch)" ]]
	run -0 mlprof diff a.json noisy.json
}

@test "mlprof diff shows nodes only one report has as added and removed" {
	mkmlg mlp
	mkmlg two
	run -0 mlprof mlp.mlg --random --repeat 3 --json -o a.json
	run -0 mlprof two.mlg --random --repeat 3 --json -o b.json
	run --separate-stderr mlprof diff -f --threshold 1000000 a.json b.json
	[ "$status" -eq 0 ]
	[ "$(printf '%s\n' "${lines[@]}" | grep -c ' removed$')" -eq 5 ]
	[ "$(printf '%s\n' "${lines[@]}" | grep -c ' added$')" -eq 2 ]
	run -0 mlprof diff --force --threshold 1000000 --top 2 a.json b.json
	[[ $output == *"(5 more nodes)"* ]]
}

@test "mlprof diff refuses reports of different models with status 3, unless --force" {
	mkmlg mlp
	mkmlg two
	run -0 mlprof mlp.mlg --random --repeat 3 --json -o a.json
	run -0 mlprof two.mlg --random --repeat 3 --json -o b.json
	[ "$(json_get a.json signature)" = "x f32[N,4] -> y f32[N,3]" ]
	run -3 --separate-stderr mlprof diff a.json b.json
	[ -z "$output" ]
	[ "$stderr" = "mlprof: a.json and b.json profile different models (x f32[N,4] -> y f32[N,3]; x f32[3,4] -> pos f32[3,4] neg f32[3,4]); --force compares them anyway" ]
	# --force: one line of warning, and the report says so
	run -0 --separate-stderr mlprof diff --force --threshold 1000000 a.json b.json
	[ "$stderr" = "mlprof: warning: a.json and b.json profile different models (x f32[N,4] -> y f32[N,3]; x f32[3,4] -> pos f32[3,4] neg f32[3,4])" ]
	[ "${lines[2]}" = "different models: a is x f32[N,4] -> y f32[N,3]; b is x f32[3,4] -> pos f32[3,4] neg f32[3,4]" ]
	run -0 --separate-stderr mlprof diff -f --json --threshold 1000000 a.json b.json
	echo "$output" >d.json
	[[ $(json_get d.json same_model) == [Ff]alse ]]
	run -0 --separate-stderr mlprof diff -fq --threshold 1000000 a.json b.json
	[ -z "$stderr$output" ]
	# one model at another size, optimised, or on another device is the same model
	run -0 mlprof mlp.mlg --random --repeat 3 --dim N=64 --json -o big.json
	mlopt -O2 mlp.mlg -o o2.mlg
	run -0 mlprof o2.mlg --random --repeat 3 --json -o o2.json
	run -0 --separate-stderr mlprof diff --threshold 1000000 --json a.json o2.json
	[ -z "$stderr" ]
	echo "$output" >s.json
	[[ $(json_get s.json same_model) == [Tt]rue ]]
	run -0 --separate-stderr mlprof diff --threshold 1000000 a.json big.json
	[ -z "$stderr" ]
	# reports without a signature (older ones) are compared as before
	"$PY" -c 'import json; d = json.load(open("b.json")); del d["signature"]; json.dump(d, open("old.json", "w"))'
	run -0 --separate-stderr mlprof diff --threshold 1000000 a.json old.json
}

@test "mlprof diff refuses malformed and foreign JSON with status 3" {
	mkmlg add
	run -0 mlprof add.mlg --random --repeat 2 --json -o a.json
	for bad in '{"nodes": [' '{"a": 1,}' '[1, 2' '{"x": tru}' '{"a": "\q"}' '{} junk' ''; do
		printf '%s' "$bad" >bad.json
		run -3 --separate-stderr mlprof diff a.json bad.json
		[[ $stderr == "mlprof: bad.json: line "* ]] || { echo "$bad: $stderr" >&2; return 1; }
	done
	"$PY" -c 'print("[" * 100000)' >deep.json
	run -3 --separate-stderr mlprof diff deep.json a.json
	[[ $stderr == *"nested too deeply"* ]]
	echo '{"nodes": [], "total": {}}' >foreign.json
	run -3 --separate-stderr mlprof diff a.json foreign.json
	[[ $stderr == "mlprof: foreign.json: not an mlprof JSON report"* ]]
	echo '{"nodes": [{"name": "x"}], "total": {"wall_ms": {"median": 1}}}' >nomedian.json
	run -3 --separate-stderr mlprof diff nomedian.json a.json
	run -3 --separate-stderr mlprof diff a.json nope.json
	[ "$stderr" = "mlprof: cannot open 'nope.json': No such file or directory" ]
}

@test "mlprof diff rejects bad usage with status 2" {
	run -2 --separate-stderr mlprof diff a.json
	[[ $stderr == "mlprof: diff needs two reports"*"usage: mlprof diff "* ]]
	run -2 --separate-stderr mlprof diff a.json b.json c.json
	for a in "--threshold x" "--threshold -5" "--top 0" "--bogus"; do
		run -2 --separate-stderr mlprof diff $a a.json b.json
		[[ $stderr == "mlprof: "* ]] || { echo "$a: $stderr" >&2; return 1; }
	done
	run -0 mlprof diff --help
	[[ ${lines[0]} == "usage: mlprof "* ]]
}

@test "mlprof names a missing model and exits 3" {
	run -3 --separate-stderr mlprof nope.mlg --random
	[ "$stderr" = "mlprof: cannot open 'nope.mlg': No such file or directory" ]
}

@test "mlprof names a missing input and exits 3" {
	mkmlg add
	run -3 --separate-stderr mlprof add.mlg -i x=add.in/x.npy
	[[ $stderr == "mlprof: add.mlg: "*"'y'"* ]]
	mknpy bad.npy float32 3,2
	run -3 --separate-stderr mlprof add.mlg -i x=bad.npy --random
}

@test "mlprof refuses an unsupported op with status 4" {
	mkmodel unsup
	run -4 --separate-stderr mlprof unsup.onnx --random
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlprof: "*Frobnicate* ]]
	mkmlg add
	run mlprof --devices
	if [ "$status" -eq 3 ]; then
		run -4 --separate-stderr mlprof add.mlg --random --device cl
		[[ $stderr == "mlprof: "*cl* ]]
	fi
}

@test "mlprof fails with status 1 when the trace, picture or report cannot be written" {
	mkmlg add
	run -1 --separate-stderr mlprof add.mlg --random --trace nodir/t.json
	[[ $stderr == "mlprof: "*nodir/t.json* ]]
	mkdir d
	run -1 --separate-stderr mlprof add.mlg --random --trace d
	run -1 --separate-stderr mlprof add.mlg --random --svg /dev/full
	run -1 --separate-stderr mlprof add.mlg --random --json -o /dev/full
	run -1 --separate-stderr mlprof add.mlg --random --calibrate -o nodir/c.json
	run -1 --separate-stderr sh -c 'mlprof add.mlg --random >/dev/full'
	[[ $stderr == "mlprof: write error"* ]]
	no_temp_files
}

@test "mlprof refuses a model with status 3 over the allocation cap" {
	mkmlg mlp784
	run -3 --separate-stderr mlprof mlp784.mlg --random --max-alloc 100K
	[[ $stderr == "mlprof: "* ]]
	run -3 --separate-stderr env ML_MAX_ALLOC=100K mlprof mlp784.mlg --random
	run -0 mlprof mlp784.mlg --random --max-alloc 64M --top 1
}

@test "mlprof rejects an unknown option with status 2" {
	run -2 --separate-stderr mlprof --bogus
	[[ ${stderr_lines[0]} == "mlprof: unrecognized option '--bogus'"* ]]
	[[ $stderr == *"usage: mlprof"* ]]
}

@test "mlprof rejects malformed option values with status 2" {
	mkmlg add
	for a in "--repeat 0" "--repeat x" "--warmup -1" "--threads 0" "--seed -1" "-i x" "-i =x.npy" \
		"--dim N" "--dim N=-3" "--sort bogus" "--top 0" "--top x" "--group bogus" \
		"--group prefix:0" "--json --csv" "--trace - --svg -" "--max-alloc x" "--max-alloc -1"; do
		run -2 --separate-stderr mlprof add.mlg --random $a
		if [[ $stderr != "mlprof: "* ]]; then
			echo "$a: $stderr" >&2
			return 1
		fi
	done
	run -2 --separate-stderr mlprof add.mlg add.mlg --random
}
