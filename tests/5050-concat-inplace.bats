#!/usr/bin/env bats
# 5050-concat-inplace.bats: the arena plan writes a Concat's inputs straight
# into their slices of its output (lib/exec/plan.c) where nothing can write
# over a value still needed; ML_CONCAT_INPLACE=0 copies as before. The model
# (tests/tools/mkmodel.py m_cattrap) holds the traps: an input read again
# after its Concat, a graph input, a constant, the same tensor twice, one
# Concat fed to another, DenseNet's prefix Concats, a graph output as input,
# and a Concat along an axis with a dim above 1 before it.
bats_require_minimum_version 1.5.0
load helpers

# offsets JSON: "NAME OFFSET" per tensor of an mlprof --memory --json report
offsets() {
	"$PY" -c 'import json, sys
for t in json.load(open(sys.argv[1]))["memory"]["tensors"]:
    print(t["name"], t["offset"])' "$1"
}

# off NAME: the offset of tensor NAME in offsets.txt
off() {
	awk -v n="$1" '$1 == n { print $2 }' offsets.txt
}

@test "Concat in place: results match numpy, and the inputs lie in their slices" {
	mkmlg cattrap
	run -0 mlrun cattrap.mlg -i x=cattrap.in/x.npy -o out
	npcmpdir out cattrap.ref
	run -0 mlprof cattrap.mlg -i x=cattrap.in/x.npy --memory --json --repeat 2 -o prof.json
	offsets prof.json >offsets.txt
	# c1 = [a b] is the first slice of c2 = [c1 x k a v a]; b is c1's second
	[ "$(off c1)" -eq "$(off c2)" ]
	[ "$(off b)" -eq $(($(off c1) + 128)) ]
	# x (a graph input) and k (a constant) are copied; a, the fourth piece,
	# takes its first slice in c2 (after 256 + 128 + 64 bytes); v the next
	[ "$(off a)" -eq $(($(off c2) + 448)) ]
	[ "$(off v)" -eq $(($(off c2) + 576)) ]
	# Abs(a) reads a last but may not write over it: a lies in c2
	[ "$(off s)" -ne "$(off a)" ]
	# DenseNet: d1 = [f0 f1] is the prefix of d2 = [f0 f1 f2]
	[ "$(off d1)" -eq "$(off d2)" ]
	[ "$(off f0)" -eq "$(off d2)" ]
	[ "$(off f2)" -eq $(($(off d2) + 256)) ]
}

@test "ML_CONCAT_INPLACE=0 copies every piece, with the same bytes out" {
	mkmlg cattrap
	run -0 mlrun cattrap.mlg -i x=cattrap.in/x.npy -o a
	ML_CONCAT_INPLACE=0 run -0 mlrun cattrap.mlg -i x=cattrap.in/x.npy -o b
	npcmpdir b cattrap.ref
	for f in a/*.npy; do
		cmp "$f" "b/$(basename "$f")"
	done
	ML_CONCAT_INPLACE=0 run -0 mlprof cattrap.mlg -i x=cattrap.in/x.npy --memory --json --repeat 1 -o prof.json
	offsets prof.json >offsets.txt
	[ "$(off c1)" -ne "$(off c2)" ]
	[ "$(off d1)" -ne "$(off d2)" ]
}

@test "Concat in place after mlopt -O2 and over repeated runs matches numpy" {
	mkmlg cattrap
	run -0 mlopt -O2 cattrap.mlg -o o2.mlg
	run -0 mlrun o2.mlg -i x=cattrap.in/x.npy --repeat 3 -o out
	npcmpdir out cattrap.ref
}
