#!/usr/bin/env bats
# 0050-symbols.bats: every symbol libml.a exports carries a prefix (README,
# design notes: ml_ for the API and what the layers share, mlt_ the text
# format, mlcl_ the OpenCL backend, mlopt_ the graph passes, mlq_
# quantisation, mlprof_ the profiler; ml__ and onnx__ are protobuf-c's), so
# a program that links the library cannot collide with it.
bats_require_minimum_version 1.5.0
load helpers

# unprefixed LIB: the defined global symbols of LIB without an allowed
# prefix; the ones a sanitizer build adds (__odr_asan.NAME, __asan_*, ...)
# are the compiler's, not the library's.
unprefixed() {
	nm -g --defined-only "$1" | awk 'NF == 3 { print $3 }' |
		grep -Ev '^(ml_|mlt_|mlcl_|mlopt_|mlq_|mlprof_|onnx__)' |
		grep -Ev '^__(odr_asan|asan|ubsan|tsan|sancov)' | sort -u
}

@test "every symbol libml.a exports has a prefix" {
	lib=$ML_BIN/../lib/libml.a
	[ -f "$lib" ]
	run -0 unprefixed "$lib"
	[ -z "$output" ] || { echo "unprefixed: $output"; false; }
}

@test "the check finds an unprefixed symbol (jstr) and allows the layer prefixes" {
	printf 'int jstr(void) { return 0; }\nint mlq_x(void) { return 1; }\nstatic int opt_y(void) { return 2; }\nint ml_z(void) { return opt_y(); }\n' >a.c
	cc -c -o a.o a.c
	ar rcs a.a a.o
	run -0 unprefixed a.a
	[ "$output" = jstr ]
}
