#!/usr/bin/env bats
# 9000-install.bats: make install puts tools, man pages, both libraries,
# the public headers and a pkg-config file under DESTDIR/PREFIX; ml.h's own
# example, taken from the installed header, builds with plain pkg-config
# (libml.so) and with --static (libml.a) and runs; make uninstall takes it
# all away again. One install (setup_file) serves every case but the last.
bats_require_minimum_version 1.5.0
load helpers

PREFIX=/opt/ml

# install_to DIR: make install DESTDIR=DIR PREFIX=$PREFIX of this build.
install_to() {
	make -C "$ML_ROOT" -s install B="${B:-build}" DESTDIR="$1" PREFIX="$PREFIX"
}

setup_file() {
	install_to "$BATS_FILE_TMPDIR/dest" >"$BATS_FILE_TMPDIR/install.log" 2>&1 ||
		{ cat "$BATS_FILE_TMPDIR/install.log"; return 1; }
}

setup() {
	DEST=$BATS_FILE_TMPDIR/dest
	INST=$DEST$PREFIX
	# pkg-config reads the staged ml.pc and puts DEST in front of its paths
	export PKG_CONFIG_PATH=$INST/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$DEST
}

# example: ml.h's example program, from the installed header, into run.c.
example() {
	awk '/^ \*\t#include <ml.h>$/ { on = 1 }
		on { sub(/^ \*\t?/, ""); print }
		on && /^}$/ { exit }' "$INST/include/ml/ml.h" >run.c
	grep -q '^main(int argc' run.c && [ "$(tail -n 1 run.c)" = "}" ]
}

@test "make install DESTDIR PREFIX installs tools, man pages, both libraries, headers and ml.pc" {
	[ -x "$INST/bin/mlrun" ]
	[ -x "$INST/bin/mlconvert" ]
	[ -f "$INST/share/man/man1/mlrun.1" ]
	[ -f "$INST/share/man/man5/mlg.5" ]
	[ -f "$INST/lib/libml.a" ]
	[ -f "$INST/lib/libml.so.0.4.0" ] && [ ! -L "$INST/lib/libml.so.0.4.0" ]
	[ "$(readlink "$INST/lib/libml.so.0")" = libml.so.0.4.0 ]
	[ "$(readlink "$INST/lib/libml.so")" = libml.so.0.4.0 ]
	run -0 readelf -d "$INST/lib/libml.so.0.4.0"
	[[ $output == *"Library soname: [libml.so.0]"* ]]
	# the public headers and the list ml.h includes; not the library's own
	for h in "$ML_ROOT"/lib/ml*.h ops.def; do
		case ${h##*/} in
		ml_impl.h) [ ! -e "$INST/include/ml/ml_impl.h" ] ;;
		*) [ -f "$INST/include/ml/${h##*/}" ] ;;
		esac
	done
	[ ! -e "$INST/include/ml/act.def" ] && [ ! -e "$INST/include/ml/families.def" ]
	run -0 grep '^prefix=' "$INST/lib/pkgconfig/ml.pc"
	[ "$output" = "prefix=$PREFIX" ]
	run -0 pkg-config --modversion ml
	[ "$output" = 0.4.0 ]
	run -0 pkg-config --cflags ml
	[ "${output% }" = "-I$INST/include/ml" ]
}

@test "the installed headers include only installed headers, and ml.h compiles alone" {
	cd "$INST/include/ml"
	for h in *; do
		for inc in $(sed -n 's/^#include "\(.*\)"/\1/p' "$h"); do
			[ -f "$inc" ] || { echo "$h includes $inc, which is not installed"; false; }
		done
	done
	cd "$BATS_TEST_TMPDIR"
	printf '#include <ml.h>\nint main(void) { return ML_OK; }\n' >alone.c
	run -0 sh -c 'cc -std=c11 -Wall -Wextra -Wpedantic -Werror -o alone alone.c $(pkg-config --cflags ml)'
}

@test "ml.h's example builds with plain pkg-config --cflags --libs ml (libml.so) and runs" {
	mkmlg mlp
	example
	run -0 sh -c 'cc run.c -o run $(pkg-config --cflags --libs ml)'
	run -0 readelf -d run
	[[ $output == *"Shared library: [libml.so.0]"* ]]
	export LD_LIBRARY_PATH=$INST/lib
	run -0 ./run mlp.mlg mlp.in/x.npy y.npy
	[ "$output" = "f32[2,3]" ]
	npcmp y.npy mlp.ref/y.npy
	# the library's errors reach it, with the tools' exit status
	run -3 ./run nope.mlg mlp.in/x.npy y.npy
	[[ $output == "run: cannot open 'nope.mlg'"* ]]
	# a model with no input (a Constant) is refused, not crashed on
	"$PY" - <<'PY'
import onnx
from onnx import helper as h, TensorProto as T
c = h.make_node('Constant', [], ['y'], value=h.make_tensor('v', T.FLOAT, [2], [1.0, 2.0]))
g = h.make_graph([c], 'noin', [], [h.make_tensor_value_info('y', T.FLOAT, [2])])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'noin.onnx')
PY
	run -3 ./run noin.onnx mlp.in/x.npy y.npy
	[ "$output" = "run: noin.onnx has no input or no output" ]
	run -2 ./run mlp.mlg
	[ "$output" = "usage: run MODEL INPUT.npy OUTPUT.npy" ]
}

@test "README's copy of the example is ml.h's" {
	example
	awk '/^    #include <ml.h>$/ { on = 1 }
		on { sub(/^    /, ""); print }
		on && /^}$/ { exit }' "$ML_ROOT/README.md" >readme.c
	run -0 diff run.c readme.c
}

@test "pkg-config --static --libs ml links libml.a: the example runs with no library path" {
	mkmlg mlp
	example
	# -l:libml.a: the linker takes the archive where libml.so is beside it
	run -0 sh -c 'cc run.c -o run $(pkg-config --cflags ml) \
		$(pkg-config --static --libs ml | sed "s/-lml /-l:libml.a /")'
	run -0 readelf -d run
	[[ $output != *libml* ]]
	[[ $output == *"Shared library: [libprotobuf-c"* ]]
	unset LD_LIBRARY_PATH
	run -0 ./run mlp.mlg mlp.in/x.npy y.npy
	[ "$output" = "f32[2,3]" ]
	npcmp y.npy mlp.ref/y.npy
}

@test "the installed mlrun runs a model" {
	mkmlg mlp
	run -0 "$INST/bin/mlrun" mlp.mlg --random -q
}

@test "make uninstall removes what make install put there, and nothing else" {
	dest=$BATS_TEST_TMPDIR/dest
	mkdir -p "$dest$PREFIX/lib" "$dest$PREFIX/bin"
	echo other >"$dest$PREFIX/lib/libother.so"
	echo other >"$dest$PREFIX/bin/other"
	run -0 install_to "$dest"
	[ -f "$dest$PREFIX/lib/libml.so.0.4.0" ]
	run -0 make -C "$ML_ROOT" -s uninstall B="${B:-build}" DESTDIR="$dest" PREFIX="$PREFIX"
	run -0 sh -c "cd '$dest' && find . ! -type d | sort"
	[ "$(echo $output)" = "./opt/ml/bin/other ./opt/ml/lib/libother.so" ]
	[ ! -e "$dest$PREFIX/include/ml" ]
	# a second uninstall finds nothing to remove, and says nothing wrong
	run -0 make -C "$ML_ROOT" -s uninstall B="${B:-build}" DESTDIR="$dest" PREFIX="$PREFIX"
}
