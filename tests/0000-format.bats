#!/usr/bin/env bats
# 0000-format.bats: the .mlg container (mlg(5)): the 16-byte header, the zstd
# frame, the version rule, and the failure paths of reading and writing it.
bats_require_minimum_version 1.5.0
load helpers

# frame_of FILE: the zstd frame of an .mlg file (everything after the header).
frame_of() {
	tail -c +17 "$1"
}

# expect_invalid TOOL ARGS... FILE: TOOL exits 3 with one line "TOOL: FILE: ..." on stderr.
expect_invalid() {
	local tool=$1 file=${*: -1}
	run -3 --separate-stderr "$@"
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "$tool: $file: "* ]]
}

@test "an mlg file starts with MLG\\0, version 1 little-endian, zero flags and reserved" {
	mkmlg mlp
	run -0 od -An -tx1 -N16 mlp.mlg
	[ "$(echo $output)" = "4d 4c 47 00 01 00 00 00 00 00 00 00 00 00 00 00" ]
}

@test "the header is followed by one zstd frame holding the graph" {
	mkmlg mlp
	frame_of mlp.mlg >frame.zst
	run -0 od -An -tx1 -N4 frame.zst
	[ "$(echo $output)" = "28 b5 2f fd" ]
	# the zstd tool is optional; where it is installed it agrees
	if command -v zstd >/dev/null; then
		run -0 zstd -t -q frame.zst
	fi
}

@test "the header written by hand with the current version loads" {
	mkmlg mlp
	{ mlg_header 1; frame_of mlp.mlg; } >hand.mlg
	cmp hand.mlg mlp.mlg
	run -0 mlrun hand.mlg -i x=mlp.in/x.npy -o out
	npcmp out/y.npy mlp.ref/y.npy
}

@test "load then save of an mlg file is byte-identical" {
	mkmlg mlp
	run -0 mlconvert mlp.mlg -o again.mlg
	cmp mlp.mlg again.mlg
	run -0 mlconvert -o third.mlg - <again.mlg
	cmp mlp.mlg third.mlg
}

@test "conversion is deterministic: the same input gives the same bytes" {
	mkmodel conv
	run -0 mlconvert conv.onnx -o a.mlg
	run -0 mlconvert conv.onnx -o b.mlg
	cmp a.mlg b.mlg
}

@test "an empty file is invalid input (status 3)" {
	: >empty.mlg
	run -3 --separate-stderr mlconvert --info empty.mlg
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlconvert: empty.mlg: "* ]]
}

@test "a file cut inside the header is refused with status 3" {
	mkmlg mlp
	head -c 10 mlp.mlg >cut.mlg
	expect_invalid mlconvert --info cut.mlg
	expect_invalid mlrun --random cut.mlg
}

@test "a file cut inside the zstd frame is refused with status 3" {
	mkmlg mlp
	head -c $(($(filesize mlp.mlg) - 7)) mlp.mlg >cut.mlg
	expect_invalid mlconvert --info cut.mlg
	expect_invalid mlrun --random cut.mlg
}

@test "a file with only the header is refused with status 3" {
	mlg_header 1 >hdr.mlg
	[ "$(filesize hdr.mlg)" -eq 16 ]
	expect_invalid mlconvert --info hdr.mlg
}

@test "bad magic is refused with status 3 and says it is not an mlg file" {
	mkmlg mlp
	{ printf 'MLX\0'; tail -c +5 mlp.mlg; } >bad.mlg
	expect_invalid mlconvert --info bad.mlg
	[[ $stderr == *"not an mlg file"* ]]
	expect_invalid mlrun --random bad.mlg
	expect_invalid mlconvert --from mlg -o out.onnx bad.mlg
	[ ! -e out.onnx ]
}

@test "a newer format version is refused with status 3 before decompressing" {
	mkmlg mlp
	{ mlg_header 2; frame_of mlp.mlg; } >v2.mlg
	expect_invalid mlconvert --info v2.mlg
	[[ $stderr == *"newer"* ]]
	expect_invalid mlrun --random v2.mlg
	{ mlg_header 65535; printf 'not a zstd frame'; } >v65535.mlg
	expect_invalid mlconvert --info v65535.mlg
	[[ $stderr == *"newer"* ]]
}

@test "version 0 is refused with status 3" {
	mkmlg mlp
	{ mlg_header 0; frame_of mlp.mlg; } >v0.mlg
	expect_invalid mlconvert --info v0.mlg
}

@test "a corrupt zstd frame is refused with status 3" {
	mkmlg mlp
	# a zstd magic number followed by junk
	{ mlg_header 1; printf '\050\265\057\375'; head -c 200 /dev/zero | tr '\0' '\377'; } >junk.mlg
	expect_invalid mlconvert --info junk.mlg
	expect_invalid mlrun --random junk.mlg
	# no zstd magic at all
	{ mlg_header 1; printf 'this is no zstd frame at all'; } >text.mlg
	expect_invalid mlconvert --info text.mlg
}

@test "every byte of the frame changed in turn never crashes the reader" {
	mkmlg add
	n=$(filesize add.mlg)
	for off in $(seq 16 $((n - 1))); do
		{ head -c "$off" add.mlg; printf '\377'; tail -c +$((off + 2)) add.mlg; } >flip.mlg
		run mlconvert --info flip.mlg
		# either it still decodes or it is refused as invalid; never a crash
		if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then
			echo "offset $off: status $status: $output" >&2
			return 1
		fi
	done
}

@test "trailing bytes after the zstd frame are refused with status 3" {
	mkmlg mlp
	{ cat mlp.mlg; printf 'junk'; } >tail.mlg
	expect_invalid mlconvert --info tail.mlg
}

# raw_frame FILE: write a zstd frame (one raw block, no checksum) holding stdin (< 256 bytes).
raw_frame() {
	"$PY" -c '
import sys
d = sys.stdin.buffer.read()
assert len(d) < 256
hdr = (len(d) << 3 | 1).to_bytes(3, "little")
sys.stdout.buffer.write(b"\x28\xb5\x2f\xfd\x20" + bytes([len(d)]) + hdr + d)' >"$1"
}

@test "a hand-made zstd frame whose content is no graph message is refused with status 3" {
	# message length 16, then 16 bytes that are no protobuf
	{ printf '\020\0\0\0\0\0\0\0'; head -c 16 /dev/zero | tr '\0' '\377'; } | raw_frame frame.zst
	{ mlg_header 1; cat frame.zst; } >pb.mlg
	expect_invalid mlconvert --info pb.mlg
	# a message length beyond the content
	printf '\377\0\0\0\0\0\0\0' | raw_frame frame.zst
	{ mlg_header 1; cat frame.zst; } >len.mlg
	expect_invalid mlconvert --info len.mlg
	# content shorter than the length field
	printf '\001\002' | raw_frame frame.zst
	{ mlg_header 1; cat frame.zst; } >short.mlg
	expect_invalid mlconvert --info short.mlg
}

@test "a hand-made zstd frame holding an empty graph loads" {
	printf '\0\0\0\0\0\0\0\0' | raw_frame frame.zst
	{ mlg_header 1; cat frame.zst; } >empty.mlg
	run -0 mlconvert --info empty.mlg
}

@test "writing to /dev/full fails with status 1" {
	mkmodel mlp
	run -1 --separate-stderr mlconvert mlp.onnx -o /dev/full
	[[ $stderr == "mlconvert: "* ]]
	run -1 --separate-stderr sh -c 'mlconvert -f mlp.onnx >/dev/full'
	[[ $stderr == "mlconvert: "* ]]
	run -1 --separate-stderr sh -c 'mlconvert --to mlt mlp.onnx >/dev/full'
	run -1 --separate-stderr sh -c 'mlconvert --info mlp.onnx >/dev/full'
	run -1 --separate-stderr sh -c 'mlrun mlp.onnx -i x=mlp.in/x.npy >/dev/full'
	[[ $stderr == "mlrun: "* ]]
}

@test "a failed conversion leaves no output file and keeps an existing one" {
	printf 'garbage' >bad.onnx
	run -3 mlconvert bad.onnx -o out.mlg
	[ ! -e out.mlg ]
	mkmlg mlp
	cp mlp.mlg keep.mlg
	run -3 mlconvert bad.onnx -o keep.mlg
	cmp mlp.mlg keep.mlg
	no_temp_files
}

@test "an output that cannot be completed is never left partial" {
	mkmodel mlp
	run -1 mlconvert mlp.onnx -o nodir/out.mlg
	[ ! -e nodir ]
	# over the allocation cap (status 3), nothing is written
	mkmodel mlp784
	run -0 mlconvert mlp784.onnx -o big.mlg
	run -3 env ML_MAX_ALLOC=600K mlconvert big.mlg -o again.mlg
	[ ! -e again.mlg ]
	no_temp_files
}

@test "mlrun writes no partial .npy file when the run fails" {
	mkmodel add
	mkdir out
	run -3 mlrun add.onnx -i x=add.in/x.npy -o out
	[ -z "$(ls out)" ]
}
