# The one build of the ml toolchain: library, tools, tests, docs.
# make            build $(B)/lib/libml.a, $(B)/lib/libml.so and $(B)/bin/*
# make deps       install the Debian packages the project needs
# make test       run every test; ends with "N passed, M failed"
# make install    PREFIX=/usr/local DESTDIR=
# make uninstall  remove what make install put there (same PREFIX, DESTDIR)
# make OPENCL=0   build without OpenCL
# make asan       build in build-asan with AddressSanitizer and UBSan, run every test
# make tsan       build in build-tsan with ThreadSanitizer, run the threaded C tests
# make fuzz       build the libFuzzer targets with clang in build-fuzz/fuzz
#                 (sh tests/fuzz/run.sh then runs each for 20 s; give TIME for longer)
.SUFFIXES:

B ?= build
PREFIX ?= /usr/local
CC ?= cc
OPT ?= -O2
WERROR ?=
CFLAGS ?= $(OPT) -g
CPPFLAGS_ALL = -Ilib -I$(B)/gen -D_GNU_SOURCE $(CL_CPP) $(CPPFLAGS)
CFLAGS_ALL = -std=c11 -Wall -Wextra $(WERROR) -pthread -fPIC -march=x86-64-v2 -mtune=generic $(CFLAGS)
# OpenCL (lib/cl, kernels/): OPENCL=0 builds lib/cl/cl_stub.c instead, whose
# devices calls fail with ML_ENODEV.
OPENCL ?= 1
ifeq ($(OPENCL),0)
CL_LIBS =
CL_CPP = -DML_NO_OPENCL
CL_OUT = $(filter-out lib/cl/cl_stub.c,$(wildcard lib/cl/*.c))
GEN_CL =
else
CL_LIBS = -lOpenCL
CL_OUT = lib/cl/cl_stub.c
GEN_CL = $(B)/gen/kernels.c
endif
LDLIBS_ALL = -lprotobuf-c -lzstd -ldl $(CL_LIBS) -lz -lm -pthread $(LDLIBS)

TOOLS = mlconvert mlopt mlquant mltrain mlrun mlprof
TOOL_SRCS = $(wildcard $(TOOLS:%=cmd/%.c))
BINS = $(TOOL_SRCS:cmd/%.c=$(B)/bin/%)
LIB_SRCS = $(filter-out $(CL_OUT),$(sort $(wildcard lib/*.c lib/*/*.c)))
PROTOS = formats/mlg.proto
GEN_PB = $(B)/gen/mlg.pb-c.c $(B)/gen/onnx.pb-c.c
LIB_OBJS = $(LIB_SRCS:%.c=$(B)/obj/%.o) $(GEN_PB:$(B)/gen/%.c=$(B)/obj/gen/%.o) \
	$(GEN_CL:$(B)/gen/%.c=$(B)/obj/gen/%.o)
CLI_OBJS = $(B)/obj/cmd/cli.o
TEST_TOOLS = $(patsubst tests/tools/%.c,$(B)/bin/%,$(wildcard tests/tools/*.c))
ONNX_PROTO ?= /usr/include/onnx/onnx.proto
# Each compile writes a .d file (-MMD -MP) beside its object: an object
# depends on the headers it includes, not on every header. The generated
# protobuf headers are order-only prerequisites, so they exist before the
# first compile of a clean build; after it the .d files name them where used.
DEPFLAGS = -MMD -MP
GEN_H = $(B)/gen/mlg.pb-c.h $(B)/gen/onnx.pb-c.h

all: $(BINS) $(TEST_TOOLS) $(B)/bin/fuzz_replay $(B)/lib/libml.so $(B)/ml.pc

# grouped targets (&:): one protoc-c run makes both files, so make -j never
# runs it twice
$(B)/gen/mlg.pb-c.c $(B)/gen/mlg.pb-c.h &: formats/mlg.proto
	@mkdir -p $(B)/gen
	protoc-c --proto_path=formats --c_out=$(B)/gen formats/mlg.proto

# ONNX's own schema as the system installs it (libonnx-dev).
$(B)/gen/onnx.pb-c.c $(B)/gen/onnx.pb-c.h &: $(ONNX_PROTO)
	@mkdir -p $(B)/gen
	cp $(ONNX_PROTO) $(B)/gen/onnx.proto
	protoc-c --proto_path=$(B)/gen --c_out=$(B)/gen $(B)/gen/onnx.proto

# kernels/*.cl embedded as byte arrays (lib/cl/cl.h ml_kernel_srcs), with
# lib/act.def, the codes the C code and every program share
KERNELS = $(sort $(wildcard kernels/*.cl))
$(B)/gen/kernels.c: tools/cl2c.sh lib/act.def $(KERNELS)
	@mkdir -p $(@D)
	sh tools/cl2c.sh lib/act.def $(KERNELS) > $@.tmp && mv $@.tmp $@

$(B)/obj/gen/%.o: $(B)/gen/%.c | $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(DEPFLAGS) -Wno-unused-parameter -c -o $@ $<

$(B)/obj/%.o: %.c | $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(DEPFLAGS) -c -o $@ $<

# The op descriptors of lib/ops name only the properties an op has (flags,
# weight and host inputs, quantisation class); the others are 0 by C's rule.
$(B)/obj/lib/ops/%.o: CFLAGS_ALL += -Wno-missing-field-initializers

$(B)/lib/libml.a: $(LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@
	ar rcs $@ $(LIB_OBJS)

# The shared library, from the same (-fPIC) objects: libml.so.$(VERSION),
# its soname libml.so.$(SOVERSION) and the link-time name libml.so, both
# links. It records its own dependencies (DT_NEEDED), so a program links
# with -lml alone; --no-undefined checks that the list is complete. The
# tools link libml.a, so an installed tool needs no library path.
# SOVERSION changes when the ABI does (an enum renumbered, a struct or a
# signature changed), VERSION with every release (ML_VERSION of ml.h).
VERSION := $(shell sed -n 's/^\#define ML_VERSION "\(.*\)"$$/\1/p' lib/ml.h)
SOVERSION = 0
SONAME = libml.so.$(SOVERSION)
$(B)/lib/libml.so.$(VERSION): $(LIB_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -o $@ $(LIB_OBJS) \
		$(LDFLAGS) $(LDLIBS_ALL)

$(B)/lib/libml.so: $(B)/lib/libml.so.$(VERSION)
	ln -sf libml.so.$(VERSION) $(B)/lib/$(SONAME)
	ln -sf libml.so.$(VERSION) $@

# the tools' objects are kept (not intermediate files), so their .d files hold
.SECONDARY: $(TOOL_SRCS:%.c=$(B)/obj/%.o) $(CLI_OBJS)
$(B)/bin/%: $(B)/obj/cmd/%.o $(CLI_OBJS) $(B)/lib/libml.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(CLI_OBJS) $(B)/lib/libml.a $(LDFLAGS) $(LDLIBS_ALL)

# the drivers compile and link in one step; their .d files go to obj/tools
$(B)/bin/%: tests/tools/%.c $(B)/lib/libml.a | $(GEN_H)
	@mkdir -p $(@D) $(B)/obj/tools
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(DEPFLAGS) -MF $(B)/obj/tools/$*.d -o $@ $< $(B)/lib/libml.a $(LDFLAGS) $(LDLIBS_ALL) $(TOOL_LIBS)

# test_cli tests the tools' shared helpers, so it links cmd/cli.o before the library.
$(B)/bin/test_cli: tests/tools/test_cli.c $(CLI_OBJS) $(B)/lib/libml.a | $(GEN_H)
	@mkdir -p $(@D) $(B)/obj/tools
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(DEPFLAGS) -MF $(B)/obj/tools/test_cli.d -o $@ $< \
		$(CLI_OBJS) $(B)/lib/libml.a $(LDFLAGS) $(LDLIBS_ALL)

# libml loads OpenBLAS at run time (lib/cpu/blas.c); a driver that calls
# cblas itself, to compare against it, links it.
$(B)/bin/clgemm_bench: TOOL_LIBS = -lopenblas

# The fuzz targets of tests/fuzz: fuzz_replay runs them over the corpus with
# the normal compiler (in make test); make fuzz links them with libFuzzer.
FUZZ_TARGETS = mlg onnx text npy idx
FUZZ_SRCS = $(FUZZ_TARGETS:%=tests/fuzz/fuzz_%.c) tests/fuzz/common.c

# several sources in one compile: the public headers stand for what they include
FUZZ_HDRS = tests/fuzz/fuzz.h $(wildcard lib/ml*.h lib/*.def)
$(B)/bin/fuzz_replay: tests/fuzz/replay.c $(FUZZ_SRCS) $(FUZZ_HDRS) $(B)/lib/libml.a | $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -Itests/fuzz -DFUZZ_REPLAY -o $@ tests/fuzz/replay.c \
		$(FUZZ_SRCS) $(B)/lib/libml.a $(LDFLAGS) $(LDLIBS_ALL)

$(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/common.c $(FUZZ_HDRS) $(B)/lib/libml.a | $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -Itests/fuzz -fsanitize=fuzzer -o $@ $< tests/fuzz/common.c \
		$(B)/lib/libml.a $(LDFLAGS) $(LDLIBS_ALL)

SAN_FLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CC ?= clang-14

fuzz:
	$(MAKE) B=build-fuzz CC=$(FUZZ_CC) WERROR= CFLAGS="-O1 -g -fsanitize=fuzzer-no-link $(SAN_FLAGS)" \
		$(FUZZ_TARGETS:%=build-fuzz/fuzz/fuzz_%)

# Every report of either sanitizer aborts the tool (status 134, never an
# expected status) and is also logged, so a test that tolerates a failure
# still cannot hide one.
SAN_LOGS = $(CURDIR)/build-asan/san-logs
ASAN_ENV = ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:log_path=$(SAN_LOGS)/asan \
	UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$(SAN_LOGS)/ubsan \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/fuzz/lsan.supp:print_suppressions=0

# A log that holds nothing but LeakSanitizer's "Unable to get registers from
# thread N." is not a report: at exit, ptrace sometimes cannot read a thread
# that is being torn down, and LeakSanitizer skips that thread (LLVM demoted
# the line to a verbose message for that reason: llvm-project pull 116555).
# Such a log is dropped, saying so; any other line still fails the target.
LSAN_NOREGS = ^==[0-9]*==Unable to get registers from thread [0-9]*\.$$

# The tests that run make themselves (make install) get the same CFLAGS.
asan: deps
	$(MAKE) B=build-asan CFLAGS="-O2 -g $(SAN_FLAGS)" all
	rm -rf $(SAN_LOGS) && mkdir -p $(SAN_LOGS)
	$(ASAN_ENV) CFLAGS="-O2 -g $(SAN_FLAGS)" B=build-asan sh tests/run.sh; rc=$$?; \
	for f in $(SAN_LOGS)/*; do \
		[ -f "$$f" ] && ! grep -qv "$(LSAN_NOREGS)" "$$f" || continue; \
		echo "== ignored $$f: $$(cat "$$f") (LeakSanitizer's spurious ptrace failure)"; \
		rm -f "$$f"; \
	done; \
	if [ -n "$$(ls $(SAN_LOGS))" ]; then \
		echo "== sanitizer reports ($(SAN_LOGS)):"; cat $(SAN_LOGS)/*; exit 1; \
	fi; \
	exit $$rc

# ThreadSanitizer over the threaded C tests: the pool (test_nnfast at 1 to 3
# threads), the loader's prefetch thread (test_data), training steps
# (test_train), the training loop (test_trainer), the MPI layer without
# MPI (test_dist), sessions (test_lib), pipeline stages (test_pipeline),
# and mltrain then mlrun on 2 threads (tests/tools/tsan-train.sh). Any
# report fails it (halt_on_error, status 66). GCC, as the normal build,
# with its function entry/exit hooks off: it instruments the ifunc resolvers
# of target_clones, which run before the TSan runtime is up and crash at
# load. OPENCL=0: POCL's threads are not instrumented. OpenBLAS (not
# instrumented either) runs on one thread. No suppressions: none are needed
# today; a race in lib/ is fixed, and only third-party code may ever get one.
# About a minute on 2 cores, build included (35 s of it running the tests).
TSAN_TESTS = test_lib test_nnfast test_data test_train test_trainer test_dist test_pipeline
TSAN_FLAGS = -O1 -g -fsanitize=thread --param=tsan-instrument-func-entry-exit=0
tsan:
	$(MAKE) B=build-tsan OPENCL=0 CFLAGS="$(TSAN_FLAGS)" $(TSAN_TESTS:%=build-tsan/bin/%) \
		build-tsan/bin/mltrain build-tsan/bin/mlrun
	@for t in $(TSAN_TESTS) tsan-train.sh; do \
		echo "== tsan: $$t"; \
		case $$t in *.sh) cmd="sh tests/tools/$$t build-tsan/bin" ;; *) cmd=build-tsan/bin/$$t ;; esac; \
		TSAN_OPTIONS="halt_on_error=1 exitcode=66" \
		OPENBLAS_NUM_THREADS=1 $$cmd >build-tsan/$$t.log 2>&1 || \
		{ cat build-tsan/$$t.log; echo "tsan: $$t failed"; exit 1; }; \
	done; echo "== tsan: $(words $(TSAN_TESTS) 1) tests clean"

# rewritten every time, so `make install PREFIX=...` gets its own prefix.
# Libs links libml.so, which names its own dependencies; Libs.private adds
# them for a link of libml.a (pkg-config --static). A sanitized library
# (make asan) needs its sanitizer runtimes in either link.
SAN_LIBS = $(filter -fsanitize=%,$(CFLAGS))
$(B)/ml.pc: FORCE
	@mkdir -p $(B)
	@printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: ml\nDescription: ml toolchain library\nVersion: $(VERSION)\nLibs: -L$${libdir} -lml$(if $(SAN_LIBS), $(SAN_LIBS))\nLibs.private: -lprotobuf-c -lzstd -ldl$(if $(CL_LIBS), $(CL_LIBS)) -lz -lm -pthread\nCflags: -I$${includedir}/ml\n' '$(PREFIX)' > $@

deps:
	sh tools/deps.sh

# test and demo install what is missing first, so each works on a fresh machine
test: deps
	$(MAKE) all
	sh tests/run.sh

demo: deps
	$(MAKE) all
	sh examples/demo.sh

bench: all
	sh tests/bench/run.sh

# What make install puts under $(DESTDIR)$(PREFIX), and make uninstall
# removes: the tools, both libraries, the public headers (ml.h and the
# headers and lists it includes; ml_impl.h, act.def and families.def are
# the library's own), ml.pc and the man pages.
INST = $(DESTDIR)$(PREFIX)
INST_HDRS = $(filter-out lib/ml_impl.h,$(wildcard lib/ml*.h)) lib/ops.def
INST_MAN1 = $(wildcard man/man1/*.1)
INST_MAN5 = man/man5/mlg.5
INST_LIBS = libml.a libml.so.$(VERSION) $(SONAME) libml.so

install: all
	mkdir -p $(INST)/bin $(INST)/lib/pkgconfig $(INST)/include/ml \
		$(INST)/share/man/man1 $(INST)/share/man/man5
	cp $(BINS) $(INST)/bin/
	cp $(B)/lib/libml.a $(B)/lib/libml.so.$(VERSION) $(INST)/lib/
	ln -sf libml.so.$(VERSION) $(INST)/lib/$(SONAME)
	ln -sf libml.so.$(VERSION) $(INST)/lib/libml.so
	cp $(INST_HDRS) $(INST)/include/ml/
	cp $(B)/ml.pc $(INST)/lib/pkgconfig/ml.pc
	cp $(INST_MAN1) $(INST)/share/man/man1/
	cp $(INST_MAN5) $(INST)/share/man/man5/

# the standard folders stay; include/ml, ours, goes when it is empty
uninstall:
	rm -f $(BINS:$(B)/bin/%=$(INST)/bin/%) $(INST_LIBS:%=$(INST)/lib/%) \
		$(INST)/lib/pkgconfig/ml.pc $(INST_HDRS:lib/%=$(INST)/include/ml/%) \
		$(INST_MAN1:man/%=$(INST)/share/man/%) $(INST_MAN5:man/%=$(INST)/share/man/%)
	-rmdir $(INST)/include/ml 2>/dev/null

clean:
	rm -rf build

FORCE:

# the dependency files of the last build (none before the first)
-include $(wildcard $(B)/obj/*/*.d $(B)/obj/*/*/*.d)

.PHONY: FORCE all deps test demo bench install uninstall clean asan tsan fuzz
