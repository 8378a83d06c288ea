/*
 * fuzz.h: what the fuzz targets share: one entry point per reader, the
 * limits every run obeys, and the checks run on whatever a reader accepts.
 * The same sources build the libFuzzer targets (make fuzz) and the plain
 * replay driver that `make test` runs over the corpus (FUZZ_REPLAY).
 */
#ifndef FUZZ_H
#define FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "ml.h"

/*
 * The allocation cap of every fuzz run: low enough that libFuzzer's own
 * malloc limit (2 GiB) never fires first, so a file that claims a huge
 * size is refused by the library as it would be in a tool.
 */
#define FUZZ_ALLOC_CAP ((uint64_t)64 << 20)

/* fuzz_setup: the cap and one thread; called once before any input. */
void fuzz_setup(void);
/*
 * fuzz_check_graph: what a tool does with a graph a reader accepted:
 * toposort, validate and infer (as ml_model_load), then, when that
 * passes, write it as .mlg, ONNX and text and read the .mlg back, which
 * must succeed. Frees g.
 */
void fuzz_check_graph(struct ml_graph *g);

/* The targets: each takes one input and returns 0 (libFuzzer's convention). */
int fuzz_mlg(const uint8_t *data, size_t size);
int fuzz_onnx(const uint8_t *data, size_t size);
int fuzz_text(const uint8_t *data, size_t size);
int fuzz_npy(const uint8_t *data, size_t size);
int fuzz_idx(const uint8_t *data, size_t size);

/*
 * FUZZ_TARGET(fn): define libFuzzer's entry points for target fn; the
 * replay build (FUZZ_REPLAY) has its own main and calls fn directly.
 */
#ifdef FUZZ_REPLAY
#define FUZZ_TARGET(fn)
#else
#define FUZZ_TARGET(fn)                                                        \
	int LLVMFuzzerInitialize(int *argc, char ***argv);                     \
	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);          \
	int                                                                    \
	LLVMFuzzerInitialize(int *argc, char ***argv)                          \
	{                                                                      \
		(void)argc;                                                    \
		(void)argv;                                                    \
		fuzz_setup();                                                  \
		return 0;                                                      \
	}                                                                      \
	int                                                                    \
	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)               \
	{                                                                      \
		return fn(data, size);                                         \
	}
#endif

#endif
