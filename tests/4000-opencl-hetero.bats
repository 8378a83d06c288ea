#!/usr/bin/env bats
# 4000-opencl-hetero.bats: heterogeneous execution: --device auto keeps a
# plan off the device unless the cost model says it gains a clear margin,
# the cost model's launch and copy rows, independent branches on the CPU
# and the device running at the same time (mlprof --trace). Tests that
# need an OpenCL device skip without one.
bats_require_minimum_version 1.5.0
load helpers

export ML_CL_CACHE=${ML_CL_CACHE:-$(dirname "$ML_BIN")/cl-cache}

require_opencl() {
	mlrun --devices --json >devs.json 2>/dev/null || skip "mlrun --devices failed"
	grep -q '"cl:0"' devs.json || skip "no OpenCL device"
}

# cost_model RATIO: an ML_COSTMODEL where the device takes RATIO times the
# CPU's time for every op of conv, launches and copies cost nothing; auto
# decides from it alone (ML_AUTO=predict: no measured plans)
cost_model() {
	local dev
	dev=$(json_get devs.json devices.1.name | tr ' \t' '__')
	for op in Conv Relu GlobalAveragePool Flatten; do
		printf 'cpu %s 1e9 1e6 1e6 1\n%s %s %s 1e6 1e6 1\n' "$op" "$dev" "$op" \
			"$(awk -v r="$1" 'BEGIN { printf "%g", 1e9 * r }')"
	done >cm.txt
	printf '%s __launch__ 0 0 0 1\n%s __copy__ 1 0 1e9 1 0\n' "$dev" "$dev" >>cm.txt
	export ML_COSTMODEL=$PWD/cm.txt ML_AUTO=predict
}

@test "mlrun --device auto keeps everything on the CPU when the device gains too little" {
	require_opencl
	mkmlg conv
	cost_model 0.97
	run -0 mlrun conv.mlg --device auto --plan
	[[ $output != *" cl:0 "* ]]
	run -0 mlrun conv.mlg --device auto -i x=conv.in/x.npy -o out
	npcmpdir out conv.ref
}

@test "mlrun --device auto moves the graph to the device when it gains a clear margin" {
	require_opencl
	mkmlg conv
	cost_model 0.5
	run -0 mlrun conv.mlg --device auto --plan
	[[ ${lines[1]} == *" cl:0 "* ]]
	run -0 mlrun conv.mlg --device auto -i x=conv.in/x.npy -o out
	npcmpdir out conv.ref
}

@test "the first auto run measures launch and copy costs into the cost model" {
	require_opencl
	mkmlg conv
	export ML_CL_CACHE=$PWD/cache
	run -0 mlrun conv.mlg --device auto -i x=conv.in/x.npy -o out
	npcmpdir out conv.ref
	dev=$(json_get devs.json devices.1.name | tr ' \t' '__')
	grep -q "^$dev __launch__ " cache/costmodel.txt
	grep -q "^$dev __copy__ " cache/costmodel.txt
	grep -q "^cpu Conv " cache/costmodel.txt
	# seven columns: the smallest node's time is kept
	awk '!/^#/ && NF != 7 { exit 1 }' cache/costmodel.txt
	cp cache/costmodel.txt before.txt
	run -0 mlrun conv.mlg --device auto -i x=conv.in/x.npy -o out2
	cmp before.txt cache/costmodel.txt
}

@test "auto measures its candidate plans once and takes the fastest measured one" {
	require_opencl
	mkmlg conv
	export ML_CL_CACHE=$PWD/cache
	run -0 mlrun conv.mlg --device auto --plan
	[[ $output == *"auto: measured: cpu "* ]]
	dev=$(json_get devs.json devices.1.name | tr ' \t' '__')
	grep -q "^$dev __plan__:[0-9a-f]*:cpu " cache/costmodel.txt
	grep -q "^$dev __plan__:[0-9a-f]*:dev " cache/costmodel.txt
	# the measured times decide, whatever the per-op rates say: make the
	# device's plan ten times faster than the CPU's, then ten times slower
	awk -v d="$dev" '$1 == d && $2 ~ /^__plan__:.*:dev$/ { $3 = 1e5; $6 = 1; $7 = 1e5 }
		$1 == d && $2 ~ /^__plan__:.*:cpu$/ { $3 = 1e6; $6 = 1; $7 = 1e6 } { print }' \
		cache/costmodel.txt >cm2 && mv cm2 cache/costmodel.txt
	run -0 mlrun conv.mlg --device auto --plan
	[[ ${lines[1]} == *" cl:0 "* ]]
	[[ $output == *"auto: measured: cpu 1000.0 us, device 100.0 us"* ]]
	run -0 mlrun conv.mlg --device auto -i x=conv.in/x.npy -o out
	npcmpdir out conv.ref
	awk -v d="$dev" '$1 == d && $2 ~ /^__plan__:.*:dev$/ { $3 = 1e7; $7 = 1e7 } { print }' \
		cache/costmodel.txt >cm2 && mv cm2 cache/costmodel.txt
	run -0 mlrun conv.mlg --device auto --plan
	[[ $output == *"auto: measured: cpu 1000.0 us, device 10000.0 us"* ]]
	# the CPU's plan, unless the per-op model also proposed a mixed one (it may, where
	# the CPU's kernels run slow: a sanitizer build) and that measured faster still
	local mixed
	mixed=$(grep -o 'mixed [0-9.]* us' <<<"$output" | awk '{ print $2 }')
	if [ -n "$mixed" ] && awk -v m="$mixed" 'BEGIN { exit !(m < 1000) }'; then
		[[ ${lines[1]} == *" cl:0 "* ]]
	else
		[[ $output != *" cl:0 "* ]]
	fi
	# ML_AUTO=predict decides from the per-op model alone
	ML_AUTO=predict run -0 mlrun conv.mlg --device auto --plan --json
	[[ $output == *'"auto": "predicted by the cost model"'* ]]
}

# branches: x -> 4 x Einsum (no OpenCL kernel: the CPU) and x -> 8 x
# (MatMul, Tanh) (the device), listed CPU branch first, joined by an Add
mkbranches() {
	"$PY" - <<'EOF'
import numpy as np
from onnx import helper, TensorProto, numpy_helper, save
rng = np.random.default_rng(0)
n = 192
x = (rng.standard_normal((n, n)) * 0.1).astype(np.float32)
w = (rng.standard_normal((n, n)) * 0.1).astype(np.float32)
nodes, a, b = [], "x", "x"
for i in range(4):
    nodes.append(helper.make_node("Einsum", [a, "w"], ["a%d" % i], equation="ij,jk->ik",
                                  name="cpu%d" % i))
    a = "a%d" % i
for i in range(8):
    nodes.append(helper.make_node("MatMul", [b, "w"], ["m%d" % i], name="mm%d" % i))
    nodes.append(helper.make_node("Tanh", ["m%d" % i], ["b%d" % i], name="th%d" % i))
    b = "b%d" % i
nodes.append(helper.make_node("Add", [a, b], ["y"], name="join"))
g = helper.make_graph(nodes, "branches",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
                      [numpy_helper.from_array(w, "w")])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "branches.onnx")
np.save("x.npy", x)
ya, yb = x, x
for i in range(4):
    ya = ya @ w
for i in range(8):
    yb = np.tanh(yb @ w)
import os
os.makedirs("ref", exist_ok=True)
np.save("ref/y.npy", (ya + yb).astype(np.float32))
EOF
	mlconvert branches.onnx -o branches.mlg
}

@test "independent branches on the CPU and the device give the right result" {
	require_opencl
	mkbranches
	run -0 mlrun branches.mlg --device cl --plan
	[[ $output == *"cpu0 "*"Einsum "*" cpu "* ]]
	[[ $output == *"mm0 "*"MatMul "*" cl:0 "* ]]
	run -0 mlrun branches.mlg --device cl -i x=x.npy -o out
	npcmpdir out ref
	# the same placement from an edited plan
	printf 'join cpu\n' >p.txt
	run -0 mlrun branches.mlg --device cl --placement p.txt -i x=x.npy -o out2
	npcmpdir out2 ref
}

@test "the device branch is enqueued ahead and runs while the CPU branch does (mlprof --trace)" {
	require_opencl
	mkbranches
	# one POCL worker leaves the host a core where POCL shares the CPU's; the
	# check is of timestamps on a shared 2-core machine, so it gets three
	# tries (a serial executor fails all three: its device work starts after
	# the CPU branch ends)
	for try in 1 2 3; do
		POCL_MAX_PTHREAD_COUNT=1 run -0 mlprof branches.mlg --device cl -i x=x.npy --repeat 2 \
			--trace t.json -q
		if overlap_ok; then
			return 0
		fi
	done
	overlap_ok
}

overlap_ok() {
	"$PY" - <<'EOF'
import json
d = json.load(open("t.json"))
ev = [e for e in d["traceEvents"] if e.get("ph") == "X" and e.get("args", {}).get("run") == 1
      and "node" in e.get("args", {})]
cpu = [e for e in ev if e["args"]["op"] == "Einsum"]
dev = [e for e in ev if e["args"]["op"] in ("MatMul", "Tanh")]
assert len(cpu) == 4 and len(dev) == 16, (len(cpu), len(dev))
assert all(e["args"]["device"] != cpu[0]["args"]["device"] for e in dev), dev[0]
# in the graph's order the device branch comes after the whole CPU branch;
# run ahead, the device's work starts before the CPU branch ends
first_dev = min(e["ts"] for e in dev)
last_cpu = max(e["ts"] + e["dur"] for e in cpu)
assert first_dev < last_cpu, (first_dev, last_cpu)
# and the device's intervals and the CPU's intersect
span_dev = (first_dev, max(e["ts"] + e["dur"] for e in dev))
span_cpu = (min(e["ts"] for e in cpu), last_cpu)
assert max(span_dev[0], span_cpu[0]) < min(span_dev[1], span_cpu[1]), (span_dev, span_cpu)
EOF
}

@test "a node enqueued ahead that the device refuses at run time runs on the CPU, right" {
	require_opencl
	# MatMul's broadcast batch (2 x 1 against 1 x 3) has no OpenCL kernel: the
	# device refuses it when it runs, ahead of the CPU branch listed first
	"$PY" - <<'EOF'
import numpy as np, os
from onnx import helper, TensorProto, numpy_helper, save
rng = np.random.default_rng(1)
n = 16
x = (rng.standard_normal((2, 1, n, n)) * 0.5).astype(np.float32)
w = (rng.standard_normal((n, n)) * 0.3).astype(np.float32)
w4 = (rng.standard_normal((1, 3, n, n)) * 0.3).astype(np.float32)
nodes = [helper.make_node("Einsum", ["x", "w"], ["a0"], equation="abij,jk->abik", name="cpu0"),
         helper.make_node("Einsum", ["a0", "w"], ["a1"], equation="abij,jk->abik", name="cpu1"),
         helper.make_node("MatMul", ["x", "w4"], ["m0"], name="mm0"),
         helper.make_node("Tanh", ["m0"], ["b0"], name="th0"),
         helper.make_node("Add", ["a1", "b0"], ["y"], name="join")]
g = helper.make_graph(nodes, "refuse",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, n, n])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, n, n])],
                      [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w4, "w4")])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "refuse.onnx")
np.save("x.npy", x)
os.makedirs("ref", exist_ok=True)
np.save("ref/y.npy", ((x @ w) @ w + np.tanh(np.matmul(x, w4))).astype(np.float32))
EOF
	mlconvert refuse.onnx -o refuse.mlg
	run -0 mlrun refuse.mlg --device cl --plan
	[[ $output == *"mm0 "*"MatMul "*" cl:0 "* ]]
	run -0 mlrun refuse.mlg --device cl -i x=x.npy -o out --repeat 3
	npcmpdir out ref
	run -0 mlprof refuse.mlg --device cl -i x=x.npy --repeat 1 --trace t.json -q
	"$PY" - <<'EOF'
import json
d = json.load(open("t.json"))
ts = {e["name"]: e["ts"] for e in d["traceEvents"]
      if e.get("ph") == "X" and "node" in e.get("args", {})}
assert ts["mm0"] < ts["cpu0"], ts
EOF
}
