#!/usr/bin/env bats
# 0130-bounds.bats: the bounds on time and memory that a user can set and
# that have defaults: --timeout of mlrun, mlprof and mlopt --verify, the
# cap on Loop trip counts, the size a gzipped IDX file may claim, and the
# OpenCL program cache (a folder that cannot be written, a damaged binary).
bats_require_minimum_version 1.5.0
load helpers

# mkendless FILE: a model whose Loop would run 2^62 times; with ML_MAX_LOOP
# raised to 2^50 it runs until something stops it, on any machine.
mkendless() {
	"$PY" "$TOOLS_DIR/mkloop.py" "$1" 4611686018427387904
	export ML_MAX_LOOP=1125899906842624
}

@test "--timeout stops mlrun with status 1 and writes no output" {
	mkendless l.onnx
	t0=$(date +%s%N)
	run -1 --separate-stderr mlrun l.onnx -i v0=zeros --timeout 0.5 -o out
	ms=$((($(date +%s%N) - t0) / 1000000))
	[ "$stderr" = "mlrun: timed out after 0.5 s" ]
	[ "$ms" -lt 5000 ]
	[ -z "$(ls out)" ]
	no_temp_files out
	"$PY" "$TOOLS_DIR/mkloop.py" small.onnx 10
	run -0 mlrun small.onnx -i v0=zeros --timeout 100 -o out
	[ -f out/v.npy ]
	no_temp_files out
}

@test "--timeout stops mlprof with status 1 and writes no report" {
	mkendless l.onnx
	run -1 --separate-stderr mlprof l.onnx -i v0=zeros --timeout 0.5 -o r.json --json \
		--trace t.json
	[ "$stderr" = "mlprof: timed out after 0.5 s" ]
	[ ! -e r.json ] && [ ! -e t.json ]
	"$PY" "$TOOLS_DIR/mkloop.py" small.onnx 10
	run -0 mlprof small.onnx -i v0=zeros --repeat 2 --timeout 100 -o r.json --json
	[ -s r.json ]
}

@test "--timeout stops mlopt --verify with status 1 and writes no model" {
	mkendless l.onnx
	run -1 --separate-stderr mlopt --verify --timeout 0.3 -i v0=zeros l.onnx -o o.mlg
	[ "$stderr" = "mlopt: timed out after 0.3 s" ]
	[ ! -e o.mlg ]
	no_temp_files
	mkmodel mlp
	run -0 mlopt --verify --timeout 100 mlp.onnx -o o.mlg
	[ -s o.mlg ]
}

@test "--timeout takes a positive number of seconds; mlopt's needs --verify" {
	mkmodel mlp
	for bad in 0 -1 abc 1e99 ""; do
		run -2 --separate-stderr mlrun mlp.onnx --random --timeout "$bad"
		[[ ${stderr_lines[0]} == "mlrun: --timeout: '$bad' is not a number of seconds"* ]] ||
			[[ ${stderr_lines[0]} == "mlrun: --timeout: '$bad' is not a number" ]]
		run -2 --separate-stderr mlprof mlp.onnx --random --timeout "$bad"
		run -2 --separate-stderr mlopt --verify mlp.onnx --timeout "$bad"
	done
	run -2 --separate-stderr mlopt mlp.onnx --timeout 5 -o o.mlg
	[ "${stderr_lines[0]}" = "mlopt: --timeout needs --verify" ]
}

@test "a Loop of 2^62 iterations stops at the cap (ML_MAX_LOOP) with status 3" {
	"$PY" "$TOOLS_DIR/mkloop.py" big.onnx 4611686018427387904
	"$PY" "$TOOLS_DIR/mkloop.py" small.onnx 1000
	run -3 --separate-stderr env ML_MAX_LOOP=999 mlrun small.onnx -i v0=zeros
	[[ $stderr == "mlrun: "*"the loop goes on past 999 iterations, the cap (ML_MAX_LOOP)" ]]
	run -0 env ML_MAX_LOOP=1000 mlrun small.onnx -i v0=zeros
	[ "${lines[1]}" = "  1000" ]
	# the default cap, 2^20, ends the 2^62 loop in about a second
	run -3 --separate-stderr timeout 60 mlrun big.onnx -i v0=zeros
	[[ $stderr == *"the loop goes on past 1048576 iterations, the cap (ML_MAX_LOOP)" ]]
	run -3 --separate-stderr env ML_MAX_LOOP=lots mlrun small.onnx -i v0=zeros
	[[ $stderr == *"ML_MAX_LOOP: 'lots' is not a positive count" ]]
}

@test "a gzipped IDX file whose header claims more than its stream can hold is refused at once" {
	"$PY" - <<-'EOF'
	import gzip, os, struct
	os.makedirs("d", exist_ok=True)
	# 4 GiB claimed; 1 MiB of zeros really there, about 1 KB gzipped
	hdr = bytes([0, 0, 8, 3]) + struct.pack(">III", 4096, 1024, 1024)
	open("d/train-images-idx3-ubyte.gz", "wb").write(gzip.compress(hdr + bytes(1 << 20)))
	open("d/train-labels-idx1-ubyte", "wb").write(bytes([0, 0, 8, 1]) + struct.pack(">I", 4096)
	    + bytes(4096))
	EOF
	t0=$(date +%s%N)
	# under 300 MB of address space: the inflate must not even start (but
	# AddressSanitizer, of make asan, cannot start under any such limit)
	limit="ulimit -v 300000;"
	case "${B:-build}:${ASAN_OPTIONS:-}" in *asan*:* | *:?*) limit= ;; esac
	run -3 --separate-stderr bash -c "$limit"' exec mltrain "$0" --data d -o m.mlg' \
		"$ML_ROOT/examples/fashion-mlp.mlt"
	ms=$((($(date +%s%N) - t0) / 1000000))
	[[ $stderr == *"train-images-idx3-ubyte.gz"*"IDX header says 4294967312 bytes, more than"*"bytes of gzip data can unpack to"* ]]
	[ "$ms" -lt 5000 ]
}

require_opencl() {
	mlrun --devices --json >devs.json 2>/dev/null || skip "mlrun --devices failed"
	grep -q '"cl:0"' devs.json || skip "no OpenCL device"
}

@test "an OpenCL cache folder that cannot be written is said once under -v" {
	require_opencl
	mkmodel mlp
	touch notadir
	# a folder under a file: not writable, even for root
	export ML_CL_CACHE=$PWD/notadir/cache
	run -0 --separate-stderr mlrun mlp.onnx --random --device cl -v
	n=$(grep -c "the OpenCL cache folder '$PWD/notadir/cache' cannot be written" <<<"$stderr")
	[ "$n" -eq 1 ]
	run -0 --separate-stderr mlrun mlp.onnx --random --device cl
	[ -z "$stderr" ]
	export ML_CL_CACHE=$PWD/cache
	run -0 --separate-stderr mlrun mlp.onnx --random --device cl -v
	[[ $stderr != *"cannot be written"* ]]
}

@test "a damaged OpenCL binary in the cache is rebuilt, never loaded" {
	require_opencl
	mkmodel mlp
	export ML_CL_CACHE=$PWD/cache
	run -0 --separate-stderr mlrun mlp.onnx -i x=mlp.in/x.npy --device cl -v -o out
	[[ $stderr == *"from the cache"* ]]
	npcmpdir out mlp.ref
	run -0 --separate-stderr mlrun mlp.onnx -i x=mlp.in/x.npy --device cl -v -o out
	[[ $stderr == *"(0 built, "* ]]
	for f in cache/*.bin; do
		[ "$(head -c 8 "$f")" = MLCLBIN1 ]
		"$PY" -c 'import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0xff
open(p, "wb").write(b)' "$f"
	done
	run -0 --separate-stderr mlrun mlp.onnx -i x=mlp.in/x.npy --device cl -v -o out
	[[ $stderr == *" 0 from the cache)"* ]]
	npcmpdir out mlp.ref
	# the files were written again, whole
	run -0 --separate-stderr mlrun mlp.onnx -i x=mlp.in/x.npy --device cl -v -o out
	[[ $stderr == *"(0 built, "* ]]
	# a cut-short file likewise
	for f in cache/*.bin; do truncate -s 100 "$f"; done
	run -0 --separate-stderr mlrun mlp.onnx -i x=mlp.in/x.npy --device cl -v -o out
	[[ $stderr == *" 0 from the cache)"* ]]
}
