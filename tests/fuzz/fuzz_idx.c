/*
 * fuzz_idx.c: the IDX reader of mltrain's data layer (gzipped or not). An
 * accepted file must describe exactly the bytes it holds; written back, it
 * must read back with the same dtype, shape and values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int
fuzz_idx(const uint8_t *data, size_t size)
{
	struct ml_err e = { 0 };
	struct ml_tval t = { 0 }, back = { 0 };
	uint8_t *buf = NULL;
	size_t len = 0;

	if (ml_idx_decode(&t, data, size, &e) < 0)
		return 0;
	int64_t nb = ml_tval_nbytes(&t);
	if (t.rank < 1 || t.rank > ML_MAX_RANK || nb < 0) {
		fprintf(stderr, "fuzz: the IDX reader accepted an impossible shape\n");
		abort();
	}
	if (ml_idx_encode(&t, &buf, &len, &e) < 0) {
		fprintf(stderr, "fuzz: an IDX array the reader made cannot be written: %s\n", e.msg);
		abort();
	}
	if (ml_idx_decode(&back, buf, len, &e) < 0) {
		fprintf(stderr, "fuzz: an IDX file the writer made does not read back: %s\n", e.msg);
		abort();
	}
	if (back.dtype != t.dtype || back.rank != t.rank ||
	    memcmp(back.dims, t.dims, sizeof t.dims[0] * (size_t)t.rank) != 0 ||
	    (nb > 0 && memcmp(back.data, t.data, (size_t)nb) != 0)) {
		fprintf(stderr, "fuzz: an IDX round trip changed the array\n");
		abort();
	}
	/* an uncompressed file is exactly header and data */
	if (!(size >= 2 && data[0] == 0x1f && data[1] == 0x8b) && len != size) {
		fprintf(stderr, "fuzz: the IDX reader accepted %zu bytes for %zu\n", size, len);
		abort();
	}
	ml_tval_clear(&back);
	ml_free(buf);
	ml_tval_clear(&t);
	return 0;
}

FUZZ_TARGET(fuzz_idx)
