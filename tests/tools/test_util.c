/*
 * test_util.c: C tests of lib/util: the random streams against values
 * computed by an independent implementation of splitmix64, xoshiro256**
 * and the loader's shuffle (they must never change: seeds give the same
 * weights and batches across versions, and training resumes byte for
 * byte), and the JSON escaper. Prints TAP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static void
test_rng(void)
{
	uint64_t s = 1234567;
	uint64_t a = ml_splitmix64(&s), b = ml_splitmix64(&s), c = ml_splitmix64(&s);
	ok(a == 6457827717110365317ull && b == 3203168211198807973ull && c == 9817491932198370423ull,
	   "splitmix64 from 1234567 is the reference stream");
	ok(ml_mix64(7) == 0x63cbe1e459320dd7ull, "mix64(7) is splitmix64's first value from 7");

	struct ml_rng r;
	ml_rng_seed(&r, 42);
	a = ml_rng_next(&r), b = ml_rng_next(&r), c = ml_rng_next(&r);
	ok(a == 0x15780b2e0c2ec716ull && b == 0x6104d9866d113a7eull && c == 0xae17533239e499a1ull,
	   "xoshiro256** seeded with 42 is the reference stream");
	ml_rng_seed(&r, 42);
	ok(ml_rng_unit(&r) == (double)(0x15780b2e0c2ec716ull >> 11) * 0x1p-53, "unit draws use the top 53 bits");
	int in_range = 1;
	for (int i = 0; i < 1000; i++)
		in_range &= ml_rng_below(&r, 3) < 3;
	ok(in_range, "below(3) stays below 3");

	static const int64_t want[10] = { 5, 9, 8, 4, 7, 1, 6, 0, 3, 2 };
	int64_t perm[10];
	ml_shuffle(perm, 10, 42, 3);
	ok(memcmp(perm, want, sizeof want) == 0, "shuffle(10, seed 42, epoch 3) is the reference permutation");
}

static void
test_json(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);
	ml_json_str(fp, "a\"b\\c\nd\te\x01\xc3\xa9");
	fputc(' ', fp);
	ml_json_str(fp, NULL);
	fputc(' ', fp);
	ml_json_num(fp, 0.1);
	fputc(' ', fp);
	ml_json_num(fp, 1.0 / 0.0);
	fclose(fp);
	ok(strcmp(buf, "\"a\\\"b\\\\c\\nd\\te\\u0001\xc3\xa9\" \"\" 0.1 null") == 0,
	   "JSON escapes quotes, backslashes and control bytes; non-finite numbers are null");
	free(buf);
}

int
main(void)
{
	test_rng();
	test_json();
	printf("1..%d\n", ntest);
	return nfail ? 1 : 0;
}
