/*
 * fuzz_npy.c: the .npy array reader. An accepted array is written back
 * and must read back with the same dtype, shape and bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int
fuzz_npy(const uint8_t *data, size_t size)
{
	struct ml_err e = { 0 };
	struct ml_tval t = { 0 }, back = { 0 };
	uint8_t *buf = NULL;
	size_t len = 0;

	if (ml_npy_decode(&t, data, size, &e) < 0)
		return 0;
	if (ml_npy_encode(&t, &buf, &len, &e) == 0) {
		if (ml_npy_decode(&back, buf, len, &e) < 0) {
			fprintf(stderr, "fuzz: a .npy the writer made does not read back: %s\n", e.msg);
			abort();
		}
		int64_t nb = ml_tval_nbytes(&t);
		if (back.dtype != t.dtype || back.rank != t.rank ||
		    memcmp(back.dims, t.dims, sizeof t.dims[0] * (size_t)t.rank) != 0 ||
		    (nb > 0 && memcmp(back.data, t.data, (size_t)nb) != 0)) {
			fprintf(stderr, "fuzz: a .npy round trip changed the array\n");
			abort();
		}
		ml_tval_clear(&back);
		ml_free(buf);
	}
	ml_tval_clear(&t);
	return 0;
}

FUZZ_TARGET(fuzz_npy)
