#!/usr/bin/env bats
# 9000-install.bats: make install puts tools, man pages, library, header and
# a pkg-config file under PREFIX, and a program builds against them.
bats_require_minimum_version 1.5.0
load helpers

@test "make install PREFIX installs tools, man pages, library, header and ml.pc" {
	run -0 make -C "$ML_ROOT" -s install B="${B:-build}" PREFIX="$BATS_TEST_TMPDIR/inst"
	[ -x inst/bin/mlrun ]
	[ -x inst/bin/mlconvert ]
	[ -f inst/lib/libml.a ]
	[ -f inst/include/ml/ml.h ]
	[ -f inst/share/man/man1/mlrun.1 ]
	[ -f inst/share/man/man5/mlg.5 ]
	run -0 env PKG_CONFIG_PATH="$BATS_TEST_TMPDIR/inst/lib/pkgconfig" pkg-config --cflags ml
	[ "${output% }" = "-I$BATS_TEST_TMPDIR/inst/include/ml" ]
}

@test "a program builds against the installed library with pkg-config" {
	run -0 make -C "$ML_ROOT" -s install B="${B:-build}" PREFIX="$BATS_TEST_TMPDIR/inst"
	cat >prog.c <<'C'
#include <ml.h>
int main(void) { printf("%s %s\n", ML_VERSION, ml_dtype_name(ML_F16)); return 0; }
C
	export PKG_CONFIG_PATH="$BATS_TEST_TMPDIR/inst/lib/pkgconfig"
	run -0 sh -c 'cc prog.c -o prog $(pkg-config --cflags --libs --static ml)'
	run -0 ./prog
	[ "$output" = "0.4.0 f16" ]
}

@test "the installed mlrun runs a model" {
	run -0 make -C "$ML_ROOT" -s install B="${B:-build}" PREFIX="$BATS_TEST_TMPDIR/inst"
	mkmlg mlp
	run -0 inst/bin/mlrun mlp.mlg --random -q
}
