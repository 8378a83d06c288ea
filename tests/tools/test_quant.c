/*
 * test_quant.c: TAP tests of the int8 engine (lib/cpu/quant_gemm.c): the
 * packed u8 x s8 GEMM with its fused epilogue against a plain integer
 * reference, on random and odd shapes, on every dispatch path this CPU
 * has (the AVX-512 VNNI path is skipped where the CPU lacks it), and on
 * saturation edge cases (all-255 activations against the extreme 7-bit
 * weights, which would saturate vpmaddubsw with 8-bit weights).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/quant_q8.h"

static int ntest;

static void
ok(bool cond, const char *what)
{
	ntest++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static uint64_t rng = 88172645463325252ull;

static uint32_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* ref: the same epilogue in doubles, rounding half to even. */
static void
ref_gemm(int64_t p, int64_t m, int64_t k, const uint8_t *a, int64_t lda, const int8_t *w,
	 const struct ml_q8_epi *ep, void *y)
{
	for (int64_t i = 0; i < p; i++)
		for (int64_t j = 0; j < m; j++) {
			int64_t acc = 0;
			for (int64_t q = 0; q < k; q++)
				acc += (int64_t)a[i * lda + q] * w[j * k + q];
			float v = (float)(int32_t)(acc + ep->bias[j]) * ep->mult[j];
			if (ep->f32out) {
				((float *)y)[i * m + j] = v;
				continue;
			}
			float r = nearbyintf(v) + (float)ep->yzero;
			r = r < ep->lo ? ep->lo : r > ep->hi ? ep->hi : r;
			((uint8_t *)y)[i * m + j] = (uint8_t)(int)r;
		}
}

/* one_case: p x m x k with fill mode (0 random, 1 saturating extremes); true when equal. */
static bool
one_case(int64_t p, int64_t m, int64_t k, int mode, bool f32out)
{
	int64_t kp = ml_q8_kpad(k), lda = kp + (rnd() % 3) * 4;
	uint8_t *a = calloc((size_t)(p * lda + 64), 1);
	int8_t *w = malloc((size_t)(m * k + 1));
	int8_t *bp = malloc((size_t)ml_q8_packed_len(k, m) + 64);
	int32_t *bias = malloc(sizeof(int32_t) * (size_t)m);
	float *mult = malloc(sizeof(float) * (size_t)m);
	size_t ys = f32out ? 4 : 1;
	void *y = calloc((size_t)(p * m), ys), *yr = calloc((size_t)(p * m), ys);
	bool same = true;

	for (int64_t i = 0; i < p; i++)
		for (int64_t q = 0; q < lda; q++)
			a[i * lda + q] = q >= k ? (uint8_t)rnd() : mode ? 255 : (uint8_t)rnd();
	for (int64_t i = 0; i < m * k; i++)
		w[i] = mode ? (int8_t)((i & 1) ? ML_Q8_WMIN : ML_Q8_WMAX) :
			      (int8_t)(ML_Q8_WMIN + (int)(rnd() % (ML_Q8_WMAX - ML_Q8_WMIN + 1)));
	for (int64_t j = 0; j < m; j++) {
		bias[j] = (int32_t)(rnd() % 20001) - 10000;
		mult[j] = mode ? 1e-3f : (float)(rnd() % 1000 + 1) * 1e-6f;
	}
	struct ml_q8_epi ep = { .bias = bias, .mult = mult, .yzero = (int32_t)(rnd() % 256),
				.lo = 0, .hi = 255, .f32out = f32out };
	if (rnd() % 2)
		ep.lo = ep.yzero, ep.hi = 255 - (int32_t)(rnd() % 40);
	ml_q8_pack(bp, w, m, k);
	ml_q8_gemm(p, m, kp, a, lda, bp, &ep, y, m);
	ref_gemm(p, m, k, a, lda, w, &ep, yr);
	if (f32out) {
		for (int64_t i = 0; i < p * m && same; i++) {
			float u = ((float *)y)[i], v = ((float *)yr)[i];
			same = fabsf(u - v) <= 1e-5f * fmaxf(1.0f, fabsf(v));
		}
	} else {
		same = memcmp(y, yr, (size_t)(p * m)) == 0;
	}
	free(a);
	free(w);
	free(bp);
	free(bias);
	free(mult);
	free(y);
	free(yr);
	return same;
}

int
main(void)
{
	static const enum ml_q8_path paths[] = { ML_Q8_C, ML_Q8_AVX2, ML_Q8_VNNI };
	static const int64_t shapes[][3] = {
		{ 1, 1, 1 }, { 1, 16, 4 }, { 3, 5, 7 }, { 4, 16, 64 }, { 17, 33, 27 },
		{ 64, 64, 147 }, { 65, 100, 9 }, { 130, 17, 300 }, { 7, 1000, 512 }, { 200, 64, 576 },
	};
	int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
	char what[160];

	printf("1..%d\n", 3 * (nshapes * 2 + 3) + 2);
	for (int pi = 0; pi < 3; pi++) {
		enum ml_q8_path p = paths[pi];
		bool have = ml_q8_set_path(p);
		for (int s = 0; s < nshapes; s++)
			for (int f = 0; f < 2; f++) {
				snprintf(what, sizeof what, "%s gemm %lldx%lldx%lld %s", ml_q8_path_name(p),
					 (long long)shapes[s][0], (long long)shapes[s][1],
					 (long long)shapes[s][2], f ? "f32 out" : "u8 out");
				if (!have) {
					ntest++;
					printf("ok %d - %s # SKIP this CPU lacks %s\n", ntest, what,
					       ml_q8_path_name(p));
					continue;
				}
				ok(one_case(shapes[s][0], shapes[s][1], shapes[s][2], 0, f), what);
			}
		for (int t = 0; t < 3; t++) {
			int64_t k = t == 0 ? 4 : t == 1 ? 1024 : 4611;
			snprintf(what, sizeof what, "%s saturation: 255 x +-64 over k=%lld",
				 ml_q8_path_name(p), (long long)k);
			if (!have) {
				ntest++;
				printf("ok %d - %s # SKIP this CPU lacks %s\n", ntest, what,
				       ml_q8_path_name(p));
				continue;
			}
			ok(one_case(9, 20, k, 1, t == 2), what);
		}
	}
	ml_q8_set_path(ML_Q8_AUTO);
	ok(ml_q8_path_ok(ML_Q8_C) && ml_q8_path() != ML_Q8_AUTO, "a path is chosen at run time");
	snprintf(what, sizeof what, "auto path is %s", ml_q8_path_name(ml_q8_path()));
	ok(ml_q8_path_ok(ml_q8_path()), what);
	return 0;
}
