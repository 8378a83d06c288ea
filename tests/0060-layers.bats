#!/usr/bin/env bats
# 0060-layers.bats: the folders of lib/ depend on each other one way only
# (README, "Design notes"): tools/layers.py reads the library's objects
# with nm and names every use of a higher layer's symbol.
bats_require_minimum_version 1.5.0
load helpers

@test "no object of lib/ uses a symbol of a higher layer" {
	command -v nm >/dev/null || skip "no nm"
	run -0 "$PY" "$ML_ROOT/tools/layers.py" "$(dirname "$ML_BIN")"
	[[ $output == "layers: "*" objects, every use points down" ]]
}

@test "the check names a use that goes up" {
	command -v nm >/dev/null && command -v cc >/dev/null || skip "no nm or cc"
	# a copy of the objects in which a CPU kernel file calls the executor
	b=$PWD/b
	mkdir -p "$b/obj/lib/cpu" "$b/obj/lib/exec"
	printf 'int ml_session_run(void) { return 0; }\n' >run.c
	printf 'int ml_session_run(void);\nint k(void) { return ml_session_run(); }\n' >k.c
	cc -c -o "$b/obj/lib/exec/run.o" run.c
	cc -c -o "$b/obj/lib/cpu/k.o" k.c
	mkdir -p lib/exec lib/cpu && cp run.c lib/exec/run.c && cp k.c lib/cpu/k.c
	run -1 "$PY" "$ML_ROOT/tools/layers.py" "$b" "$PWD"
	[[ $output == *"lib/cpu/k.o (devices) uses ml_session_run of lib/exec/run.o (exec)"* ]]
}
