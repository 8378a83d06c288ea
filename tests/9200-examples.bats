#!/usr/bin/env bats
# 9200-examples.bats: the shipped examples run as documented.
bats_require_minimum_version 1.5.0
load helpers

@test "examples/demo.sh converts, runs and checks a PyTorch CNN" {
	run -0 env ML_BIN="$ML_BIN" DEMO_DIR="$BATS_TEST_TMPDIR/demo" sh "$ML_ROOT/examples/demo.sh"
	[[ $output == *"max |mlrun - pytorch|"* ]]
	[[ $output == *'"latency_ms"'* ]]
	[ -f demo/out/logits.npy ]
}

@test "examples/*.mlt convert and run on random inputs" {
	for f in "$ML_ROOT"/examples/*.mlt; do
		run -0 mlconvert "$f" -o net.mlg
		run -0 mlrun net.mlg --random --seed 3 -q
	done
}
