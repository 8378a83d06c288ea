/*
 * fuzz_onnx.c: the ONNX importer. No folder is given, so a model that
 * names external data is refused rather than opening files.
 */
#include "fuzz.h"

int
fuzz_onnx(const uint8_t *data, size_t size)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;

	if (ml_onnx_decode(&g, data, size, NULL, &e) == 0)
		fuzz_check_graph(g);
	return 0;
}

FUZZ_TARGET(fuzz_onnx)
