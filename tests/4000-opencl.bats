#!/usr/bin/env bats
# 4000-opencl.bats: the OpenCL runtime through mlrun: --devices, --device
# cl and auto on small models against numpy, --plan and --placement, the
# program cache, the GEMM's measured tile and its cache, the GEMM's engines
# (ours or CLBlast: ML_CL_GEMM, -v, their cache, a missing or failing
# CLBlast), and each injected failure (ML_CL_FAULT). Tests that need an
# OpenCL device skip without one.
bats_require_minimum_version 1.5.0
load helpers

# one program and cost-model cache for the whole suite, so programs build once
export ML_CL_CACHE=${ML_CL_CACHE:-$(dirname "$ML_BIN")/cl-cache}

require_opencl() {
	mlrun --devices --json >devs.json 2>/dev/null || skip "mlrun --devices failed"
	grep -q '"cl:0"' devs.json || skip "no OpenCL device"
}

@test "mlrun --devices lists the CPU and each OpenCL device" {
	run -0 --separate-stderr mlrun --devices
	[[ ${lines[0]} == "ID"*"CU"*"MEMORY"*"FP16"*"FP64" ]]
	[[ ${lines[1]} == "cpu "* ]]
	require_opencl
	[[ $output == *"cl:0 "* ]]
}

@test "mlrun --devices --json gives memory, compute units and fp16/fp64 per device" {
	run -0 mlrun --devices --json
	echo "$output" >d.json
	[ "$(json_get d.json devices.0.id)" = cpu ]
	require_opencl
	[ "$(json_get d.json devices.1.id)" = cl:0 ]
	[ "$(json_get d.json devices.1.compute_units)" -ge 1 ]
	[ "$(json_get d.json devices.1.global_mem)" -gt 0 ]
	[[ $(json_get d.json devices.1.fp64) == [Tt]rue || $(json_get d.json devices.1.fp64) == [Ff]alse ]]
}

@test "mlrun --devices takes no model" {
	run -2 --separate-stderr mlrun --devices m.mlg
	[[ $stderr == *"--devices takes no model"* ]]
}

@test "mlrun --devices without an OpenCL platform lists the CPU and says why" {
	ML_CL_FAULT=noplatform run -0 --separate-stderr mlrun --devices
	[ "${#lines[@]}" -eq 2 ]
	[[ $stderr == *"no OpenCL platform"* ]]
}

@test "mlrun --device cl matches numpy on small models" {
	require_opencl
	for m in add mlp conv relu two; do
		mkmlg $m
		args=()
		for f in $m.in/*.npy; do
			args+=(-i "$(basename "$f" .npy)=$f")
		done
		run -0 mlrun $m.mlg --device cl "${args[@]}" -o out.$m
		npcmpdir out.$m $m.ref
	done
}

@test "mlrun --device cl:0 is cl, and a device that does not exist exits 4" {
	require_opencl
	mkmlg add
	run -0 mlrun add.mlg --device cl:0 -i x=add.in/x.npy -i y=add.in/y.npy -o out
	npcmp out/z.npy add.ref/z.npy
	run -4 --separate-stderr mlrun add.mlg --device cl:99 --random
	[[ $stderr == *"no OpenCL device cl:99"* ]]
}

@test "mlrun rejects a malformed device with status 3" {
	mkmlg add
	run -3 --separate-stderr mlrun add.mlg --device gpu --random
	[[ $stderr == *"unknown device 'gpu'"* ]]
	run -3 --separate-stderr mlrun add.mlg --device cl:x --random
	[[ $stderr == *"unknown device 'cl:x'"* ]]
}

@test "mlrun --device cl runs integer ops on the CPU with the copies inserted" {
	require_opencl
	mkmlg i64
	run -0 mlrun i64.mlg --device cl -i x=i64.in/x.npy -o out
	npcmpdir out i64.ref
	run -0 mlrun i64.mlg --device cl --plan
	[[ ${lines[1]} == *" cpu "* ]]
}

@test "mlrun --device auto matches numpy and picks a placement" {
	require_opencl
	mkmlg conv
	run -0 mlrun conv.mlg --device auto -i x=conv.in/x.npy -o out
	npcmpdir out conv.ref
	run -0 mlrun conv.mlg --device auto --plan
	[[ ${lines[-1]} == "total: "*" nodes, "*" bytes moved between devices, predicted "*" us" ]]
}

@test "mlrun --plan prints every node's device, bytes moved and cost" {
	require_opencl
	mkmlg conv
	run -0 mlrun conv.mlg --device cl --plan
	[[ ${lines[0]} == "node"*"device"*"cost_us"*"bytes_in" ]]
	n=$(mlconvert --info conv.mlg | awk '/nodes/ {print $2; exit}')
	[ "${#lines[@]}" -eq $((n + 2)) ]
	[[ ${lines[1]} == *" cl:0 "* ]]
	run -0 mlrun conv.mlg --device cl --plan --json
	echo "$output" >plan.json
	[ "$(json_get plan.json nodes.0.device)" = cl:0 ]
	[ "$(json_get plan.json bytes_moved)" -gt 0 ]
}

@test "mlrun --plan on the CPU puts every node there and moves nothing" {
	mkmlg mlp
	run -0 mlrun mlp.mlg --plan
	[[ ${lines[-1]} == "total: "*" nodes, 0 bytes moved between devices"* ]]
}

@test "mlrun --placement runs an edited plan" {
	require_opencl
	mkmlg conv
	run -0 mlrun conv.mlg --device cl --plan --json
	echo "$output" | sed '0,/"device": "cl:0"/s//"device": "cpu"/; 0,/"device": "cl:0", "supported"/s//"device": "cpu", "supported"/' >p.json
	run -0 mlrun conv.mlg --device cl --placement p.json --plan --json
	echo "$output" >q.json
	[ "$(json_get q.json nodes.0.device)" = cpu ]
	run -0 mlrun conv.mlg --device cl --placement p.json -i x=conv.in/x.npy -o out
	npcmpdir out conv.ref
	# the line form: NODE DEVICE
	first=$(json_get q.json nodes.1.name)
	printf '# all but one on the device\n%s cpu\n' "$first" >p.txt
	run -0 mlrun conv.mlg --device cl --placement p.txt -i x=conv.in/x.npy -o out2
	npcmpdir out2 conv.ref
}

@test "mlrun --placement refuses a bad file with status 3" {
	require_opencl
	mkmlg conv
	printf 'nosuchnode cl:0\n' >bad.txt
	run -3 --separate-stderr mlrun conv.mlg --device cl --placement bad.txt --random
	[[ $stderr == *"bad.txt:1: no node 'nosuchnode'"* ]]
	printf '0 tpu\n' >bad2.txt
	run -3 --separate-stderr mlrun conv.mlg --device cl --placement bad2.txt --random
	[[ $stderr == *"unknown device 'tpu'"* ]]
	run -3 --separate-stderr mlrun conv.mlg --device cl --placement missing.txt --random
}

@test "mlrun --placement with a device the session did not open exits 4" {
	mkmlg conv
	printf '0 cl:0\n' >p.txt
	run -4 --separate-stderr mlrun conv.mlg --device cpu --placement p.txt --random
	[[ $stderr == *"not open"* ]]
}

@test "the second start loads programs from the disk cache" {
	require_opencl
	mkmlg conv
	ML_CL_CACHE=$PWD/cache run -0 --separate-stderr mlrun conv.mlg --device cl --random -v
	[[ $stderr == *"opencl: "*" from the cache)"* ]]
	ls cache/*.bin
	ML_CL_CACHE=$PWD/cache run -0 --separate-stderr mlrun conv.mlg --device cl --random -v
	[[ $stderr == *"(0 built, "* ]]
	ML_CL_CACHE=0 run -0 mlrun conv.mlg --device cl --random
}

@test "ML_KERNEL_DIR reads the kernel sources from a folder" {
	require_opencl
	mkmlg add
	mkdir k
	cp "$ML_ROOT"/kernels/*.cl k/
	ML_CL_CACHE=0 ML_KERNEL_DIR=$PWD/k run -0 mlrun add.mlg --device cl -i x=add.in/x.npy -i y=add.in/y.npy -o out
	npcmp out/z.npy add.ref/z.npy
	# the shared prelude is part of every program and of its cache key
	ML_CL_CACHE=$PWD/cache ML_KERNEL_DIR=$PWD/k run -0 --separate-stderr mlrun add.mlg --device cl --random -v
	[[ $stderr == *"(1 built, 0 from the cache)"* ]]
	ML_CL_CACHE=$PWD/cache ML_KERNEL_DIR=$PWD/k run -0 --separate-stderr mlrun add.mlg --device cl --random -v
	[[ $stderr == *"(0 built, 1 from the cache)"* ]]
	printf '/* changed */\n' >>k/prelude.cl
	ML_CL_CACHE=$PWD/cache ML_KERNEL_DIR=$PWD/k run -0 --separate-stderr mlrun add.mlg --device cl --random -v
	[[ $stderr == *"(1 built, 0 from the cache)"* ]]
	printf '#define T float4\n' >>k/prelude.cl
	ML_CL_CACHE=0 ML_KERNEL_DIR=$PWD/k run -4 --separate-stderr mlrun add.mlg --device cl --random
	[[ $stderr == *"cannot build kernels/elem.cl"* ]]
	cp "$ML_ROOT"/kernels/prelude.cl k/
	printf 'this is not OpenCL C\n' >k/elem.cl
	ML_CL_CACHE=0 ML_KERNEL_DIR=$PWD/k run -4 --separate-stderr mlrun add.mlg --device cl --random
	[[ $stderr == *"cannot build kernels/elem.cl"* ]]
	rm k/prelude.cl
	ML_CL_CACHE=0 ML_KERNEL_DIR=$PWD/k run -3 --separate-stderr mlrun add.mlg --device cl --random
	[[ $stderr == *"prelude.cl"* ]]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
}

# favour_device: a cost model (ML_COSTMODEL) in which the OpenCL device wins
# every op of conv, and auto decides from it alone (ML_AUTO=predict)
favour_device() {
	mlrun --devices --json >d.json
	local dev
	dev=$(json_get d.json devices.1.name | tr ' \t' '__')
	for op in Conv Relu GlobalAveragePool Flatten; do
		printf 'cpu %s 1e12 1e6 1e6 1\n%s %s 1 1e6 1e6 1\n' "$op" "$dev" "$op"
	done >cm.txt
	export ML_COSTMODEL=$PWD/cm.txt ML_AUTO=predict
}

# each fault: --device cl exits 4 with the reason; auto falls back and says so under -v
check_fault() {
	mkmlg conv
	[ "$1" = noplatform ] || favour_device
	ML_CL_FAULT=$1 run -4 --separate-stderr mlrun conv.mlg --device cl --random
	[[ $stderr == "mlrun: "*"$2"* ]]
	ML_CL_FAULT=$1 run -0 --separate-stderr mlrun conv.mlg --device auto -i x=conv.in/x.npy -o out -v
	[[ $stderr == *"running on the CPU: "*"$2"* ]]
	npcmpdir out conv.ref
	ML_CL_FAULT=$1 run -0 --separate-stderr mlrun conv.mlg --device auto --random
	[ -z "$stderr" ]
}

@test "no OpenCL platform: cl exits 4, auto runs on the CPU" {
	check_fault noplatform "no OpenCL platform"
}

@test "a kernel build error: cl exits 4, auto runs on the CPU" {
	require_opencl
	check_fault build "cannot build kernels/"
}

@test "device out of memory: cl exits 4, auto runs on the CPU" {
	require_opencl
	check_fault alloc "out of device memory"
}

@test "a lost device (a launch fails): cl exits 4, auto runs on the CPU" {
	require_opencl
	check_fault enqueue "failed: clEnqueueNDRangeKernel"
}

@test "mlrun --device auto puts the nodes where the cost model says" {
	require_opencl
	mkmlg conv
	favour_device
	run -0 mlrun conv.mlg --device auto --plan
	[[ ${lines[1]} == *" cl:0 "* ]]
	run -0 mlrun conv.mlg --device auto -i x=conv.in/x.npy -o out
	npcmpdir out conv.ref
}

@test "mlrun --device cl -v prints the OpenCL set-up and program times" {
	require_opencl
	mkmlg mlp
	run -0 --separate-stderr mlrun mlp.mlg --device cl --random -v
	[[ $stderr == *"opencl: probe "*" ms, set-up "*" ms, programs "*" ms"* ]]
}

# tune_line: the first line of the GEMM's tuning cache file in folder $1 (exactly one file)
tune_line() {
	local f
	f=$(echo "$1"/gemm-tune-*.txt)
	[ -f "$f" ] || { echo "no tuning file in $1" >&2; return 1; }
	head -n 1 "$f"
}

@test "the GEMM's tile is measured at the first use, cached and reused by the next start" {
	require_opencl
	unset ML_GEMM_TILE
	export ML_CL_CACHE=$PWD/tc
	run -0 test_clgemm --tile
	[[ $output == "tile "*": measured" ]]
	choice=${output%%:*}
	[ "$(ls tc/gemm-tune-*.txt | wc -l)" -eq 1 ]
	f=$(echo tc/gemm-tune-*.txt)
	[[ $(tune_line tc) =~ ^ml-gemm-tune\ 1\ [0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]]
	[ "$(tune_line tc)" = "ml-gemm-tune 1 ${choice#tile }" ]
	ino=$(stat -c %i "$f")
	run -0 test_clgemm --tile
	[ "$output" = "$choice: the tuning cache" ]
	# mlrun's second start neither measures (the file is not rewritten) nor compiles
	mkmlg conv
	run -0 mlrun conv.mlg --device cl -i x=conv.in/x.npy -o out
	npcmpdir out conv.ref
	run -0 --separate-stderr mlrun conv.mlg --device cl --random -v
	[[ $stderr == *"(0 built, "* ]]
	set -- $(tune_line tc)
	[[ $stderr == *"opencl: GEMM tile ${3}x$(($4 * $5))/$6 (the tuning cache)"* ]]
	[ "$(stat -c %i "$f")" = "$ino" ]
	[ "$(ls tc/gemm-tune-*.txt | wc -l)" -eq 1 ]
}

@test "a truncated or corrupt tuning cache is ignored, measured again and rewritten" {
	require_opencl
	unset ML_GEMM_TILE
	export ML_CL_CACHE=$PWD/tc
	run -0 test_clgemm --tile
	[[ $output == *": measured" ]]
	f=$(echo tc/gemm-tune-*.txt)
	good=$(tune_line tc)
	for bad in 'ml-gemm-tune 1 6 1' '' 'ml-gemm-tune 1 6 3 2 16\n' 'ml-gemm-tune 9 6 16 2 16\n' \
		'ml-gemm-tune 1 6 16 2 99999\n' 'ml-gemm-tune 1 6 16 2 16 junk\n' '\377\0\1garbage\n'; do
		printf "$bad" >"$f"
		run -0 test_clgemm --tile
		[[ $output == "tile "*": measured" ]]
		[[ $(tune_line tc) =~ ^ml-gemm-tune\ 1\ [0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]]
	done
	# mlrun over a corrupt file: right results, and the file is good again
	printf 'junk\n' >"$f"
	mkmlg conv
	run -0 mlrun conv.mlg --device cl -i x=conv.in/x.npy -o out
	npcmpdir out conv.ref
	[[ $(tune_line tc) =~ ^ml-gemm-tune\ 1\ [0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]]
	# a folder where the file should be: measured, not cached, no crash
	rm -f "$f"
	mkdir "$f"
	run -0 test_clgemm --tile
	[[ $output == "tile "*": measured" ]]
	[ -d "$f" ]
}

@test "ML_GEMM_TILE overrides the measured tile; with the disk cache off nothing is measured" {
	require_opencl
	ML_CL_CACHE=$PWD/tc ML_GEMM_TILE=4,4,2,8 run -0 test_clgemm --tile
	[ "$output" = "tile 4 4 2 8: ML_GEMM_TILE" ]
	[ -z "$(find tc -name 'gemm-tune-*')" ]
	mkmlg conv
	ML_CL_CACHE=$PWD/tc ML_GEMM_TILE=4,4,2,8 run -0 mlrun conv.mlg --device cl -i x=conv.in/x.npy -o out
	npcmpdir out conv.ref
	[ -z "$(find tc -name 'gemm-tune-*')" ]
	# a malformed override is ignored
	ML_CL_CACHE=$PWD/tc ML_GEMM_TILE=4,5,2,8 run -0 test_clgemm --tile
	[[ $output == "tile "*": measured" ]]
	ML_CL_CACHE=0 run -0 test_clgemm --tile
	[[ $output == "tile "*": the first candidate (no disk cache)" ]]
}

@test "f16 nodes run on the OpenCL device, cl_khr_fp16 or not, and --devices says which" {
	require_opencl
	"$PY" - <<'PYEOF'
import numpy as np, os
from onnx import helper, TensorProto, save
x = (np.arange(24, dtype=np.float32).reshape(4, 6) / 7 - 1.5).astype(np.float16)
nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Mul", ["r", "x"], ["m"], name="mul"),
         helper.make_node("Softmax", ["m"], ["y"], name="softmax", axis=1)]
g = helper.make_graph(nodes, "half",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, 6])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4, 6])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "half.onnx")
np.save("x.npy", x)
m = (np.maximum(x, 0) * x).astype(np.float16).astype(np.float32)
e = np.exp(m - m.max(axis=1, keepdims=True))
os.makedirs("ref", exist_ok=True)
np.save("ref/y.npy", (e / e.sum(axis=1, keepdims=True)).astype(np.float16))
PYEOF
	mlconvert half.onnx -o half.mlg
	run -0 mlrun half.mlg --device cl --plan
	[[ ${lines[1]} == *" cl:0 "* && ${lines[2]} == *" cl:0 "* && ${lines[3]} == *" cl:0 "* ]]
	run -0 mlrun half.mlg --device cl -i x=x.npy -o out
	npcmp out/y.npy ref/y.npy --rtol 2e-3 --atol 1e-4
	# --devices reports the extension as the driver does
	command -v clinfo >/dev/null || skip "no clinfo to check fp16 against"
	if clinfo 2>/dev/null | grep -q cl_khr_fp16; then want=true; else want=false; fi
	[[ $(json_get devs.json devices.1.fp16) == [Tt]rue ]] && got=true || got=false
	[ "$got" = "$want" ]
}

# mkgemms: gemms.mlg, a classifier's Gemm (1 x 64 by 100 x 64 transposed, bias) and a
# batched MatMul (4 x 8 x 16 by 4 x 16 x 8, as attention's), its inputs and numpy's outputs
mkgemms() {
	"$PY" - <<'PYEOF'
import numpy as np, os
from onnx import helper, TensorProto, save, numpy_helper
rng = np.random.default_rng(1)
x = rng.standard_normal((1, 64)).astype(np.float32)
w = rng.standard_normal((100, 64)).astype(np.float32)
b = rng.standard_normal((100,)).astype(np.float32)
q = rng.standard_normal((4, 8, 16)).astype(np.float32)
k = rng.standard_normal((4, 16, 8)).astype(np.float32)
nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1),
         helper.make_node("MatMul", ["q", "k"], ["s"], name="qk")]
g = helper.make_graph(nodes, "gemms",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64]),
     helper.make_tensor_value_info("q", TensorProto.FLOAT, [4, 8, 16]),
     helper.make_tensor_value_info("k", TensorProto.FLOAT, [4, 16, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 100]),
     helper.make_tensor_value_info("s", TensorProto.FLOAT, [4, 8, 8])],
    [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "gemms.onnx")
np.save("x.npy", x); np.save("q.npy", q); np.save("k.npy", k)
os.makedirs("ref", exist_ok=True)
np.save("ref/y.npy", x @ w.T + b); np.save("ref/s.npy", q @ k)
PYEOF
	mlconvert gemms.onnx -o gemms.mlg
}

@test "mlrun -v names the GEMM engine; ML_CL_GEMM forces one, and without CLBlast ours run" {
	require_opencl
	mkgemms
	in=(-i x=x.npy -i q=q.npy -i k=k.npy)
	run -0 --separate-stderr mlrun gemms.mlg --device cl "${in[@]}" -o out -v
	npcmpdir out ref
	[[ $stderr == *"opencl: GEMM tile "*", engine "*" ("*")"* ]]
	ML_CL_GEMM=own run -0 --separate-stderr mlrun gemms.mlg --device cl "${in[@]}" -o out1 -v
	npcmpdir out1 ref
	[[ $stderr == *", engine own (ML_CL_GEMM)"* ]]
	ML_CL_GEMM=clblast run -0 --separate-stderr mlrun gemms.mlg --device cl "${in[@]}" -o out2 -v
	npcmpdir out2 ref
	if ldconfig -p | grep -q 'libclblast\.so\.1 '; then
		[[ $stderr == *", engine clblast (ML_CL_GEMM)"* ]]
		[[ $stderr != *"own: CLBlast"* ]]
	else
		[[ $stderr == *", engine own (no CLBlast)"* ]]
	fi
	# a CLBlast that cannot be loaded, or whose call fails: ours, the same results, one note
	ML_CL_GEMM=clblast ML_CLBLAST_LIB=/nonexistent/libclblast.so.1 \
		run -0 --separate-stderr mlrun gemms.mlg --device cl "${in[@]}" -o out3 -v
	npcmpdir out3 ref
	[[ $stderr == *", engine own (no CLBlast); cannot load the CLBlast library"* ]]
	ML_CL_GEMM=clblast ML_CL_FAULT=clblast \
		run -0 --separate-stderr mlrun gemms.mlg --device cl "${in[@]}" -o out4 -v
	npcmpdir out4 ref
	if ldconfig -p | grep -q 'libclblast\.so\.1 '; then
		[[ $stderr == *"; f32 own: CLBlast -2040 (unknown error)"* ]]
	fi
}

@test "ML_CL_GEMM that names no engine is refused on cl (status 3), and auto runs on the CPU" {
	require_opencl
	mkgemms
	in=(-i x=x.npy -i q=q.npy -i k=k.npy)
	ML_CL_GEMM=fast run -3 --separate-stderr mlrun gemms.mlg --device cl "${in[@]}" -o out
	[[ $stderr == *"ML_CL_GEMM='fast' is not own, clblast or auto"* ]]
	[ ! -e out ]
	# a cost model of its own: auto measures, so it meets the bad engine name
	ML_CL_CACHE=$PWD/cache ML_CL_GEMM=fast run -0 --separate-stderr mlrun gemms.mlg \
		--device auto "${in[@]}" -o out -v
	npcmpdir out ref
	[[ $stderr == *"ML_CL_GEMM='fast' is not own, clblast or auto"* ]]
}

@test "the GEMM engines are measured once and cached next to the tile" {
	require_opencl
	unset ML_CL_GEMM ML_GEMM_TILE
	export ML_CL_CACHE=$PWD/tc
	mkgemms
	in=(-i x=x.npy -i q=q.npy -i k=k.npy)
	run -0 --separate-stderr mlrun gemms.mlg --device cl "${in[@]}" -o out -v
	npcmpdir out ref
	ldconfig -p | grep -q 'libclblast\.so\.1 ' || skip "no CLBlast: nothing is measured"
	[[ $stderr == *", engine "*" (measured)"* ]]
	f=$(echo tc/gemm-engine-*.txt)
	[[ $(head -n 1 "$f") =~ ^ml-gemm-engine\ 1\ libclblast[^\ ]*(\ (own|clblast)){4}$ ]]
	ino=$(stat -c %i "$f")
	run -0 --separate-stderr mlrun gemms.mlg --device cl "${in[@]}" -o out2 -v
	npcmpdir out2 ref
	[[ $stderr == *", engine "*" (cached)"* ]]
	[ "$(stat -c %i "$f")" = "$ino" ]
	# a corrupt file is measured again and rewritten
	printf 'ml-gemm-engine 1 x own\n' >"$f"
	run -0 --separate-stderr mlrun gemms.mlg --device cl "${in[@]}" -o out3 -v
	[[ $stderr == *", engine "*" (measured)"* ]]
	[[ $(head -n 1 "$f") =~ ^ml-gemm-engine\ 1\ libclblast ]]
}
