/*
 * quant_q8.c: CPU kernels of the internal int8 ops (see lib/ops/quant_q8.c
 * for their definitions and lib/cpu/quant_q8.h for the layouts).
 *
 * Q8Conv with group 1 is one packed GEMM (lib/cpu/quant_gemm.c): a 1x1
 * stride-1 convolution or a matrix product over rows whose length is a
 * multiple of 4 reads x in place (channels last makes x the GEMM's A);
 * anything else first gathers an int8 im2col matrix, padded with the input
 * zero point, in the channels-last order of the packed weights
 * ((ky, kx, c) fastest last). Depthwise convolutions have an AVX2
 * kernel (dw_rows_avx2, on the AVX2 paths; dw_rows_avx512 with vpdpwssd on
 * the AVX-512 VNNI and AMX paths), bit-identical to the
 * portable loop; so is Q8Quantize of a matrix on the AVX2 and VNNI paths
 * (quant_flat_avx2); those loops, Add and the pools are loops the compiler
 * vectorises, cloned for AVX2 at run time.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include "cpu/nn.h"
#include "cpu/quant_q8.h"
#include "ops/quant.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define Q8_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define Q8_CLONES
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#define Q8_X86 1
#include <immintrin.h>
#endif

/*
 * q8_round: round half to even by the 1.5 * 2^23 trick, which vectorises
 * where nearbyintf does not; exact for |v| < 2^22, and the callers clamp
 * far smaller values.
 */
static inline int32_t
q8_round(float v)
{
	v = v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
	return (int32_t)((v + 12582912.0f) - 12582912.0f);
}

static inline uint8_t
q8_clamp(int32_t v, int32_t lo, int32_t hi)
{
	return (uint8_t)(v < lo ? lo : v > hi ? hi : v);
}

static int
nomem(struct ml_opctx *c)
{
	return ml_opfail(c, ML_ENOMEM, "out of memory");
}

/* Q8Quantize and Q8Dequantize: one job over (n, h) rows of an NCHW/NHWC pair. */
struct qjob {
	const void *x;
	void *y;
	int64_t c, h, w;
	float scale, inv;
	int32_t zero;
	void (*flat)(void *, int64_t, int64_t);	/* Q8Quantize: quant_flat or its AVX2 form */
};

/*
 * quant_rows: (n, h) rows of NCHW x into NHWC y: each channel's row
 * quantised by j->flat into a contiguous run (vector code), then the runs
 * interleaved (3 or 4 channels, an RGB image: a 32-bit store a pixel).
 */
static void
quant_rows(void *ctx, int64_t b, int64_t e)
{
	const struct qjob *j = ctx;
	const float *x = j->x;
	uint8_t *y = j->y, *t = ml_cpu_scratch(0, (size_t)(j->c * j->w) + 64);
	int64_t W = j->w, C = j->c;

	for (int64_t r = b; r < e; r++) {
		int64_t n = r / j->h, h = r % j->h;
		uint8_t *yr = y + (n * j->h + h) * W * C;
		for (int64_t ch = 0; ch < C; ch++) {
			struct qjob q = *j;
			q.x = x + ((n * C + ch) * j->h + h) * W;
			q.y = t != NULL ? t + ch * W : NULL;
			if (t != NULL) {
				j->flat(&q, 0, W);
				continue;
			}
			/* no scratch: element by element, as quant_flat */
			const float *xr = q.x;
			for (int64_t w = 0; w < W; w++) {
				float v = xr[w] * j->inv;
				v = v != v ? 0.0f : v;
				yr[w * C + ch] = q8_clamp(q8_round(v) + j->zero, 0, 255);
			}
		}
		if (t == NULL)
			continue;
		/* 3 or 4 channels: pixel w's bytes as one word (for 3, the next word overwrites the 4th) */
		int64_t w = 0;
		if (C == 3 || C == 4)
			for (; w + (C == 3) < W; w++) {
				uint32_t v = (uint32_t)t[w] | (uint32_t)t[W + w] << 8 |
					     (uint32_t)t[2 * W + w] << 16 |
					     (C == 4 ? (uint32_t)t[3 * W + w] << 24 : 0u);
				memcpy(yr + w * C, &v, 4);
			}
		for (; w < W; w++)
			for (int64_t ch = 0; ch < C; ch++)
				yr[w * C + ch] = t[ch * W + w];
	}
}

/* quant_flat and dequant_flat: a matrix (h = w = 1), whose layout does not change: elements b..e */
Q8_CLONES static void
quant_flat(void *ctx, int64_t b, int64_t e)
{
	const struct qjob *j = ctx;
	const float *restrict x = j->x;
	uint8_t *restrict y = j->y;
	const float inv = j->inv;
	const int32_t zero = j->zero;

	for (int64_t i = b; i < e; i++) {
		float v = x[i] * inv;
		v = v != v ? 0.0f : v;
		y[i] = q8_clamp(q8_round(v) + zero, 0, 255);
	}
}

#ifdef Q8_X86
/*
 * quant_flat_avx2: quant_flat 32 values at a time, bit-identical to it:
 * rounding to nearest even, the same clamp, NaN to the zero point, and
 * the saturating packs clamping to [0, 255]. The compiler's version of
 * quant_flat spends most of its time in the blends of the clamps, which
 * at an encoder's 768 values cost more than the product it feeds.
 */
__attribute__((target("avx2,fma"))) static void
quant_flat_avx2(void *ctx, int64_t b, int64_t e)
{
	const struct qjob *j = ctx;
	const float *x = j->x;
	uint8_t *y = j->y;
	const __m256 inv = _mm256_set1_ps(j->inv), hi = _mm256_set1_ps(4e6f),
		     lo = _mm256_set1_ps(-4e6f);
	const __m256i zero = _mm256_set1_epi32(j->zero),
		      order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	int64_t i = b;

	for (; i + 32 <= e; i += 32) {
		__m256i q[4];
		for (int k = 0; k < 4; k++) {
			__m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), inv);
			v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
			v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
			v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			q[k] = _mm256_add_epi32(_mm256_cvttps_epi32(v), zero);
		}
		/* packs work within 128-bit lanes: the permute puts the 4-byte groups back in order */
		__m256i p = _mm256_packus_epi16(_mm256_packs_epi32(q[0], q[1]),
						_mm256_packs_epi32(q[2], q[3]));
		_mm256_storeu_si256((__m256i *)(y + i), _mm256_permutevar8x32_epi32(p, order));
	}
	for (; i < e; i++) {
		float v = x[i] * j->inv;
		v = v != v ? 0.0f : v;
		y[i] = q8_clamp(q8_round(v) + j->zero, 0, 255);
	}
}
#endif

Q8_CLONES static void
dequant_flat(void *ctx, int64_t b, int64_t e)
{
	const struct qjob *j = ctx;
	const uint8_t *restrict x = j->x;
	float *restrict y = j->y;
	const float scale = j->scale;
	const int32_t zero = j->zero;

	for (int64_t i = b; i < e; i++)
		y[i] = (float)((int32_t)x[i] - zero) * scale;
}

Q8_CLONES static void
dequant_rows(void *ctx, int64_t b, int64_t e)
{
	const struct qjob *j = ctx;
	const uint8_t *x = j->x;
	float *y = j->y;

	for (int64_t r = b; r < e; r++) {
		int64_t n = r / j->h, h = r % j->h;
		for (int64_t ch = 0; ch < j->c; ch++) {
			const uint8_t *xr = x + (n * j->h + h) * j->w * j->c + ch;
			float *yr = y + ((n * j->c + ch) * j->h + h) * j->w;
			for (int64_t w = 0; w < j->w; w++)
				yr[w] = (float)((int32_t)xr[w * j->c] - j->zero) * j->scale;
		}
	}
}

/*
 * qjob_of: the [n, c, h, w] view of an NCHW x (rank 4), or [rows, c] of a
 * matrix ([N, C] or [N, T, C]: the same layout on both sides); *rows: n.
 */
static void
qjob_of(struct qjob *j, const struct ml_tval *nchw, int64_t *rows)
{
	if (nchw->rank == 4) {
		j->c = nchw->dims[1];
		j->h = nchw->dims[2];
		j->w = nchw->dims[3];
		*rows = nchw->dims[0];
	} else {
		j->c = nchw->dims[nchw->rank - 1];
		j->h = 1;
		j->w = 1;
		*rows = j->c > 0 ? ml_tval_numel(nchw) / j->c : 0;
	}
}

int
ml_q8_run_quantize(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	struct qjob j = { .x = x->data, .y = c->out[0]->data };

	j.scale = (float)ml_attr_float(c->node, "scale", 1.0);
	j.inv = 1.0f / j.scale;
	j.zero = (int32_t)ml_attr_int(c->node, "zero_point", 0);
	int64_t rows;
	qjob_of(&j, x, &rows);
	if (ml_tval_numel(x) == 0)
		return 0;
	void (*flat)(void *, int64_t, int64_t) = quant_flat;
#ifdef Q8_X86
	if (ml_q8_path() >= ML_Q8_AVX2)
		flat = quant_flat_avx2;
#endif
	j.flat = flat;
	if (x->rank != 4)
		ml_parallel_for(ml_tval_numel(x), 16384, flat, &j);
	else
		ml_parallel_for(rows * j.h, 4096 / (j.c * j.w + 1) + 1, quant_rows, &j);
	return 0;
}

int
ml_q8_run_dequantize(struct ml_opctx *c)
{
	const struct ml_tval *y = c->out[0];
	struct qjob j = { .x = c->in[0]->data, .y = y->data };

	j.scale = (float)ml_attr_float(c->node, "scale", 1.0);
	j.zero = (int32_t)ml_attr_int(c->node, "zero_point", 0);
	int64_t rows;
	qjob_of(&j, y, &rows);
	if (ml_tval_numel(y) == 0)
		return 0;
	if (y->rank != 4)
		ml_parallel_for(ml_tval_numel(y), 16384, dequant_flat, &j);
	else
		ml_parallel_for(rows * j.h, 4096 / (j.c * j.w + 1) + 1, dequant_rows, &j);
	return 0;
}

/*
 * im2col: row (n, oy, ox) of a [P, kp] uint8 matrix gets the kh x kw
 * window of x, channels last, the zero point where the window leaves x,
 * and zeros from k to kp.
 */
struct i2cjob {
	const struct ml_q8_geom *g;
	const uint8_t *x, *xend;
	uint8_t *a;
	int64_t kp;
};

/*
 * i2c_inside: i2c_rows where every window lies inside x (no padding: a
 * padded copy) and its rows are at most 8 bytes (kw c <= 8, stride 1 along
 * rows): per row an 8-byte move a window row, then the (at most 3) bytes
 * from k to kp zeroed; the caller sees that the last move ends in the row.
 */
static void
i2c_inside(void *ctx, int64_t b, int64_t e)
{
	const struct i2cjob *j = ctx;
	const struct ml_q8_geom *g = j->g;
	int64_t wl = g->c * g->kw, rs = g->w * g->c * g->dh, cs = g->sw * g->c;
	int64_t n = b / (g->oh * g->ow), oy = b / g->ow % g->oh, ox = b % g->ow;
	const uint8_t *src = j->x + ((n * g->h + oy * g->sh) * g->w + ox * g->sw) * g->c;
	uint8_t *dst = j->a + b * j->kp;

	for (int64_t r = b; r < e; r++, dst += j->kp) {
		for (int64_t ky = 0; ky < g->kh; ky++)
			memcpy(dst + ky * wl, src + ky * rs, 8);
		for (int64_t q = g->k; q < j->kp; q++)
			dst[q] = 0;
		if (++ox == g->ow) {
			ox = 0;
			if (++oy == g->oh) {
				oy = 0;
				n++;
			}
			src = j->x + ((n * g->h + oy * g->sh) * g->w) * g->c;
		} else {
			src += cs;
		}
	}
}

static void
i2c_rows(void *ctx, int64_t b, int64_t e)
{
	const struct i2cjob *j = ctx;
	const struct ml_q8_geom *g = j->g;
	size_t cb = (size_t)g->c;

	/* (n, oy, ox) of row b, then stepped: 64-bit divisions per row cost more than small rows */
	int64_t n = b / (g->oh * g->ow), oy = b / g->ow % g->oh, ox = b % g->ow - 1;
	for (int64_t r = b; r < e; r++) {
		if (++ox == g->ow) {
			ox = 0;
			if (++oy == g->oh) {
				oy = 0;
				n++;
			}
		}
		uint8_t *dst = j->a + r * j->kp, *rowend = dst + j->kp;
		int64_t ix0 = ox * g->sw - g->pl, iy0 = oy * g->sh - g->pt;
		bool xin = g->dw == 1 && ix0 >= 0 && ix0 + g->kw <= g->w;
		size_t wl = cb * (size_t)g->kw;
		if (xin && wl <= 8 && iy0 >= 0 && iy0 + (g->kh - 1) * g->dh < g->h &&
		    (int64_t)((size_t)(g->kh - 1) * wl) + 8 <= j->kp) {
			/*
			 * the whole window inside x, rows of at most 8 bytes (a
			 * first convolution's few channels): one 8-byte move per
			 * window row from one base, the bytes past each row
			 * rewritten by the next
			 */
			const uint8_t *src = j->x + ((n * g->h + iy0) * g->w + ix0) * g->c;
			int64_t rs = g->w * g->c * g->dh;
			if (src + (g->kh - 1) * rs + 8 <= j->xend) {
				for (int64_t ky = 0; ky < g->kh; ky++)
					memcpy(dst + (size_t)ky * wl, src + ky * rs, 8);
				dst += (size_t)g->kh * wl;
				for (int64_t q = g->k; q < j->kp; q++)
					*dst++ = 0;
				continue;
			}
		}
		for (int64_t ky = 0; ky < g->kh; ky++) {
			int64_t iy = oy * g->sh - g->pt + ky * g->dh;
			if (xin && iy >= 0 && iy < g->h) {
				/* the window's row is inside x: kw * c contiguous bytes */
				const uint8_t *src = j->x + ((n * g->h + iy) * g->w + ix0) * g->c;
				size_t len = cb * (size_t)g->kw;
				if (len <= 8 && dst + 8 <= rowend && src + 8 <= j->xend) {
					memcpy(dst, src, 8);	/* one move; the bytes past len are rewritten next */
				} else if (len < 64) {
					for (size_t q = 0; q < len; q++)
						dst[q] = src[q];
				} else {
					memcpy(dst, src, len);
				}
				dst += len;
				continue;
			}
			for (int64_t kx = 0; kx < g->kw; kx++, dst += cb) {
				int64_t ix = ox * g->sw - g->pl + kx * g->dw;
				bool out = iy < 0 || iy >= g->h || ix < 0 || ix >= g->w;
				const uint8_t *src = out ? NULL : j->x + ((n * g->h + iy) * g->w + ix) * g->c;
				if (cb < 16) {	/* few channels: calls would cost more than the bytes */
					for (size_t q = 0; q < cb; q++)
						dst[q] = out ? (uint8_t)g->xzero : src[q];
				} else if (out) {
					memset(dst, g->xzero, cb);
				} else {
					memcpy(dst, src, cb);
				}
			}
		}
		for (int64_t q = g->k; q < j->kp; q++)	/* at most 3 bytes: no call */
			*dst++ = 0;
	}
}

/*
 * Depthwise: one job over (n, oy) output rows. wpk (the AVX2 path only)
 * holds the weights of each 16-channel block and pair of taps widened to
 * int16 and interleaved for vpmaddwd (see dw_pack).
 */
struct dwjob {
	const struct ml_q8_geom *g;
	const uint8_t *x, *zrow;
	const int8_t *w;
	const int32_t *bias;
	const float *mult;
	uint8_t *y;
	const int16_t *wpk;
	const int8_t *wq;	/* dw_rows_vnni: the 64-channel blocks' weights (dw_pack64) */
	const int32_t *bq;	/* and their biases, in its order of channels */
};

/*
 * dw_tap and dw_out: the depthwise inner loops over channels, with
 * restrict so that the uint8 loads (which may alias anything) do not stop
 * the compiler from vectorising them.
 */
static inline void
dw_tap(int32_t *restrict acc, const uint8_t *restrict src, const int8_t *restrict wt, int64_t C)
{
	for (int64_t ch = 0; ch < C; ch++)
		acc[ch] += (int32_t)src[ch] * (int32_t)wt[ch];
}

static inline void
dw_out(uint8_t *restrict y, const int32_t *restrict acc, const float *restrict mult, int64_t C,
       int32_t zy, int32_t lo, int32_t hi)
{
	for (int64_t ch = 0; ch < C; ch++) {
		float v = (float)acc[ch] * mult[ch];
		v = v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
		int32_t q = (int32_t)((v + 12582912.0f) - 12582912.0f) + zy;
		y[ch] = (uint8_t)(q < lo ? lo : q > hi ? hi : q);
	}
}

Q8_CLONES static void
dw_rows(void *ctx, int64_t b, int64_t e)
{
	const struct dwjob *j = ctx;
	const struct ml_q8_geom *g = j->g;
	int64_t C = g->c;
	int32_t *acc = ml_malloc(sizeof(int32_t) * (size_t)C);

	if (acc == NULL)
		return;		/* checked by the caller's probe allocation */
	for (int64_t r = b; r < e; r++) {
		int64_t n = r / g->oh, oy = r % g->oh;
		for (int64_t ox = 0; ox < g->ow; ox++) {
			memcpy(acc, j->bias, sizeof(int32_t) * (size_t)C);
			for (int64_t ky = 0; ky < g->kh; ky++) {
				int64_t iy = oy * g->sh - g->pt + ky * g->dh;
				for (int64_t kx = 0; kx < g->kw; kx++) {
					int64_t ix = ox * g->sw - g->pl + kx * g->dw;
					const uint8_t *src = iy < 0 || iy >= g->h || ix < 0 ||
								     ix >= g->w ? j->zrow :
							     j->x + ((n * g->h + iy) * g->w + ix) * C;
					dw_tap(acc, src, j->w + (ky * g->kw + kx) * C, C);
				}
			}
			dw_out(j->y + ((n * g->oh + oy) * g->ow + ox) * C, acc, j->mult, C, g->yzero,
			       g->lo, g->hi);
		}
	}
	ml_free(acc);
}

#ifdef Q8_X86
/*
 * dw_pack: for channel block cb (16 channels) and tap pair t (taps 2t and
 * 2t+1, the second zero past the last tap), 32 int16 at (cb*ntp + t)*32:
 * (w[2t][c], w[2t+1][c]) for c = 0..7 of the block, then for c = 8..15.
 */
static void
dw_pack(int16_t *dst, const int8_t *w, int64_t C, int64_t T)
{
	int64_t ntp = (T + 1) / 2;
	for (int64_t cb = 0; cb < C / 16; cb++)
		for (int64_t t = 0; t < ntp; t++) {
			int16_t *d = dst + (cb * ntp + t) * 32;
			for (int c = 0; c < 16; c++) {
				int64_t ch = cb * 16 + c;
				d[c * 2] = w[2 * t * C + ch];
				d[c * 2 + 1] = 2 * t + 1 < T ? w[(2 * t + 1) * C + ch] : 0;
			}
		}
}

/*
 * dw_rows_avx2: dw_rows on 16 channels at a time: the uint8 inputs of two
 * taps interleaved and widened to int16 against the packed weight pairs,
 * vpmaddwd adding both products into int32 (exact: |a * w| < 2^15), then
 * dw_out's epilogue on 8 lanes (cvtps rounds half to even, as dw_out's
 * trick does, for |v| <= 4e6). The channels past the last block of 16 go
 * through dw_tap and dw_out, so the result is dw_rows', bit for bit.
 */
/* DW_PX: output pixels dw_rows_avx2 computes together (their sums are independent chains) */
#define DW_PX 4

/* dw_epi16: a block's 16 int32 sums (a0, a1) through dw_out's epilogue into y */
__attribute__((target("avx2,fma"), always_inline)) static inline void
dw_epi16(__m256i a0, __m256i a1, const float *mult, __m256i zy, __m256i lo, __m256i hi,
	 uint8_t *y)
{
	const __m256 vmax = _mm256_set1_ps(4e6f), vmin = _mm256_set1_ps(-4e6f);
	__m256 v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(a0), _mm256_loadu_ps(mult));
	__m256 v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(a1), _mm256_loadu_ps(mult + 8));
	v0 = _mm256_max_ps(_mm256_min_ps(v0, vmax), vmin);
	v1 = _mm256_max_ps(_mm256_min_ps(v1, vmax), vmin);
	__m256i q0 = _mm256_add_epi32(_mm256_cvtps_epi32(v0), zy);
	__m256i q1 = _mm256_add_epi32(_mm256_cvtps_epi32(v1), zy);
	q0 = _mm256_min_epi32(_mm256_max_epi32(q0, lo), hi);
	q1 = _mm256_min_epi32(_mm256_max_epi32(q1, lo), hi);
	__m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
	_mm_storeu_si128((__m128i *)y, _mm_packus_epi16(_mm256_castsi256_si128(w16),
							_mm256_extracti128_si256(w16, 1)));
}

/*
 * dw_rows_avx2: dw_rows on 16 channels at a time: the uint8 inputs of two
 * taps interleaved and widened to int16 against the packed weight pairs,
 * vpmaddwd adding both products into int32 (exact: |a * w| < 2^15), then
 * dw_out's epilogue on 8 lanes (cvtps rounds half to even, as dw_out's
 * trick does, for |v| <= 4e6). DW_PX pixels of a row at a time, each tap
 * pair's weights loaded once for them (one pixel's sums alone were a
 * chain of dependent adds). The channels past the last block of 16 go
 * through dw_tap and dw_out, so the result is dw_rows', bit for bit.
 */
__attribute__((target("avx2,fma"))) static void
dw_rows_avx2(void *ctx, int64_t b, int64_t e)
{
	const struct dwjob *j = ctx;
	const struct ml_q8_geom *g = j->g;
	int64_t C = g->c, T = g->kh * g->kw, ntp = (T + 1) / 2, nb = C / 16, c0 = nb * 16;
	const uint8_t **src = ml_malloc(sizeof *src * (size_t)(DW_PX * (T + 1)));
	int32_t *acc = ml_malloc(sizeof(int32_t) * (size_t)(C - c0 + 1));
	const __m256i zy = _mm256_set1_epi32(g->yzero), lo = _mm256_set1_epi32(g->lo),
		      hi = _mm256_set1_epi32(g->hi);

	if (src == NULL || acc == NULL) {
		ml_free(src);
		ml_free(acc);
		return;		/* checked by the caller's probe allocation */
	}
	for (int64_t r = b; r < e; r++) {
		int64_t n = r / g->oh, oy = r % g->oh;
		for (int64_t ox0 = 0; ox0 < g->ow; ox0 += DW_PX) {
			int np = (int)ML_MIN(DW_PX, g->ow - ox0);
			/* pixel q's taps at src[q * (T + 1) + t]; missing pixels repeat the first */
			for (int q = 0; q < DW_PX; q++) {
				int64_t ox = ox0 + (q < np ? q : 0);
				const uint8_t **sq = src + q * (T + 1);
				for (int64_t ky = 0; ky < g->kh; ky++) {
					int64_t iy = oy * g->sh - g->pt + ky * g->dh;
					for (int64_t kx = 0; kx < g->kw; kx++) {
						int64_t ix = ox * g->sw - g->pl + kx * g->dw;
						sq[ky * g->kw + kx] =
							iy < 0 || iy >= g->h || ix < 0 || ix >= g->w ?
								j->zrow :
								j->x + ((n * g->h + iy) * g->w + ix) * C;
					}
				}
				sq[T] = sq[T - 1];	/* the odd tap's partner, against zero weights */
			}
			uint8_t *y = j->y + ((n * g->oh + oy) * g->ow + ox0) * C;
			for (int64_t cb = 0; cb < nb; cb++) {
				const int16_t *wp = j->wpk + cb * ntp * 32;
				__m256i b0 = _mm256_loadu_si256((const __m256i *)(j->bias + cb * 16));
				__m256i b1 = _mm256_loadu_si256((const __m256i *)(j->bias + cb * 16 + 8));
				__m256i a0[DW_PX], a1[DW_PX];
				for (int q = 0; q < DW_PX; q++) {
					a0[q] = b0;
					a1[q] = b1;
				}
				for (int64_t t = 0; t < ntp; t++, wp += 32) {
					__m256i w0 = _mm256_loadu_si256((const __m256i *)wp);
					__m256i w1 = _mm256_loadu_si256((const __m256i *)(wp + 16));
					_Pragma("GCC unroll 4")
					for (int q = 0; q < DW_PX; q++) {
						const uint8_t *const *sq = src + q * (T + 1);
						__m128i x0 = _mm_loadu_si128((const __m128i *)(sq[2 * t] + cb * 16));
						__m128i x1 = _mm_loadu_si128((const __m128i *)(sq[2 * t + 1] +
											       cb * 16));
						__m256i l = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(x0, x1));
						__m256i h = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(x0, x1));
						a0[q] = _mm256_add_epi32(a0[q], _mm256_madd_epi16(l, w0));
						a1[q] = _mm256_add_epi32(a1[q], _mm256_madd_epi16(h, w1));
					}
				}
				_Pragma("GCC unroll 4")
				for (int q = 0; q < DW_PX; q++)
					if (q < np)
						dw_epi16(a0[q], a1[q], j->mult + cb * 16, zy, lo, hi,
							 y + q * C + cb * 16);
			}
			if (c0 == C)
				continue;
			for (int q = 0; q < np; q++) {
				const uint8_t *const *sq = src + q * (T + 1);
				memcpy(acc, j->bias + c0, sizeof(int32_t) * (size_t)(C - c0));
				for (int64_t t = 0; t < T; t++)
					dw_tap(acc, sq[t] + c0, j->w + t * C + c0, C - c0);
				dw_out(y + q * C + c0, acc, j->mult + c0, C - c0, g->yzero, g->lo, g->hi);
			}
		}
	}
	ml_free(src);
	ml_free(acc);
}

/*
 * dw_rows_avx512: dw_rows_avx2 on the VNNI and AMX paths: per 16 channels and tap
 * pair, the two taps' uint8 inputs widened into the low and high int16 of
 * 32-bit lanes against the same packed weight pairs, vpdpwssd adding both
 * products into int32 (exact), and the epilogue on 16 lanes (cvtps rounds
 * half to even, as dw_out does). Bit for bit dw_rows'.
 */
#define DW_TGT512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))

/* dw_epi512: 16 int32 sums of channels through dw_out's epilogue into 16 bytes at y */
DW_TGT512 static inline void
dw_epi512(__m512i acc, const float *mult, const struct ml_q8_geom *g, uint8_t *y)
{
	__m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_loadu_ps(mult));
	v = _mm512_max_ps(_mm512_min_ps(v, _mm512_set1_ps(4e6f)), _mm512_set1_ps(-4e6f));
	__m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(g->yzero));
	q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(g->lo)), _mm512_set1_epi32(g->hi));
	_mm_storeu_si128((__m128i *)y, _mm512_cvtepi32_epi8(q));
}

/* dw_row512: output row r of dw_rows_avx512 for the channels from block cb0 (of 16) on */
DW_TGT512 static void
dw_row512(const struct dwjob *j, int64_t r, int64_t cb0, const uint8_t **src, int32_t *acc)
{
	const struct ml_q8_geom *g = j->g;
	int64_t C = g->c, T = g->kh * g->kw, ntp = (T + 1) / 2, nb = C / 16, c0 = nb * 16;
	{
		int64_t n = r / g->oh, oy = r % g->oh;
		for (int64_t ox = 0; ox < g->ow; ox++) {
			for (int64_t ky = 0; ky < g->kh; ky++) {
				int64_t iy = oy * g->sh - g->pt + ky * g->dh;
				for (int64_t kx = 0; kx < g->kw; kx++) {
					int64_t ix = ox * g->sw - g->pl + kx * g->dw;
					src[ky * g->kw + kx] =
						iy < 0 || iy >= g->h || ix < 0 || ix >= g->w ? j->zrow :
						j->x + ((n * g->h + iy) * g->w + ix) * C;
				}
			}
			src[T] = src[T - 1];	/* the odd tap's partner, against zero weights */
			uint8_t *y = j->y + ((n * g->oh + oy) * g->ow + ox) * C;
			for (int64_t cb = cb0; cb < nb; cb++) {
				const int16_t *wp = j->wpk + cb * ntp * 32;
				__m512i acc = _mm512_loadu_si512((const void *)(j->bias + cb * 16));
				for (int64_t t = 0; t < ntp; t++, wp += 32) {
					__m512i x0 = _mm512_cvtepu8_epi32(
						_mm_loadu_si128((const __m128i *)(src[2 * t] + cb * 16)));
					__m512i x1 = _mm512_cvtepu8_epi32(
						_mm_loadu_si128((const __m128i *)(src[2 * t + 1] + cb * 16)));
					acc = _mm512_dpwssd_epi32(acc, _mm512_or_si512(x0,
								  _mm512_slli_epi32(x1, 16)),
								  _mm512_loadu_si512((const void *)wp));
				}
				dw_epi512(acc, j->mult + cb * 16, g, y + cb * 16);
			}
			if (c0 == C)
				continue;
			memcpy(acc, j->bias + c0, sizeof(int32_t) * (size_t)(C - c0));
			for (int64_t t = 0; t < T; t++)
				dw_tap(acc, src[t] + c0, j->w + t * C + c0, C - c0);
			dw_out(y + c0, acc, j->mult + c0, C - c0, g->yzero, g->lo, g->hi);
		}
	}
}

DW_TGT512 static void
dw_rows_avx512(void *ctx, int64_t b, int64_t e)
{
	const struct dwjob *j = ctx;
	int64_t C = j->g->c, T = j->g->kh * j->g->kw;
	const uint8_t **src = ml_malloc(sizeof *src * (size_t)(T + 1));
	int32_t *acc = ml_malloc(sizeof(int32_t) * (size_t)(C % 16 + 1));

	if (src != NULL && acc != NULL)		/* else: checked by the caller's probe allocation */
		for (int64_t r = b; r < e; r++)
			dw_row512(j, r, 0, src, acc);
	ml_free(src);
	ml_free(acc);
}

/*
 * dw_rows_vnni: dw_rows_avx512 for windows of at most 4 rows and 3
 * columns, dilation 1 (MobileNet's and EfficientNet's 3x3), by blocks of
 * 64 channels (then one of 32): for each input column the window's (up to
 * 4) rows' bytes are interleaved once into quads, in 4 vectors of 4-byte
 * lanes (vpunpck*: lane l of vector a is channel 16 (l / 4) + 4 a + l % 4
 * of the block), which vpdpbusd multiplies by the quads of weights of a
 * window column and adds into int32: kw of them an output pixel, where
 * dw_rows_avx512 widens and interleaves each pixel's 9 taps of every 16
 * channels anew. The sums are transposed back to channel order (128-bit
 * blocks) for the epilogue. Exact int32 sums: dw_rows' bytes. Channels
 * past the blocks go through dw_row512.
 */
#define DW_QCOL 256	/* bytes a column of quads of 64 channels: 4 vectors of 64 */

/* dw_blocks: the channels dw_rows_vnni takes in blocks of 64 and 32 */
static void
dw_blocks(int64_t C, int64_t *n64, int64_t *n32)
{
	*n64 = C / 64;
	*n32 = C % 64 >= 32;
}

/* dw_pack64: the weights and biases of each block of dw_rows_vnni, in its order of channels */
static void
dw_pack64(int8_t *wq, int32_t *bq, const int8_t *w, const int32_t *bias, const struct ml_q8_geom *g)
{
	int64_t C = g->c, n64, n32;
	dw_blocks(C, &n64, &n32);
	for (int64_t cb = 0; cb < n64 + n32; cb++) {
		int bw = cb < n64 ? 64 : 32, lanes = bw / 4;
		for (int a = 0; a < 4; a++)
			for (int l = 0; l < lanes; l++) {
				int64_t ch = cb * 64 + 16 * (l / 4) + 4 * a + l % 4;
				bq[cb * 64 + a * lanes + l] = bias[ch];
				for (int64_t kx = 0; kx < g->kw; kx++)
					for (int ky = 0; ky < 4; ky++)
						wq[cb * g->kw * DW_QCOL + ((kx * 4 + a) * lanes + l) * 4 + ky] =
							ky < g->kh ? w[(ky * g->kw + kx) * C + ch] : 0;
			}
	}
}

/* dw_epi4: the sums a0..a3 of 64 channels (two 128-bit blocks each for 32: h 2) to y */
DW_TGT512 static inline void
dw_epi4(__m512i a0, __m512i a1, __m512i a2, __m512i a3, int h, const float *mult,
	const struct ml_q8_geom *g, uint8_t *y)
{
	/* a's 128-bit block b holds channels 16 b + 4 a ..: channels 16 b .. as block b of n_b */
	__m512i t0 = _mm512_shuffle_i32x4(a0, a1, 0x44), t1 = _mm512_shuffle_i32x4(a2, a3, 0x44);
	dw_epi512(_mm512_shuffle_i32x4(t0, t1, 0x88), mult, g, y);
	dw_epi512(_mm512_shuffle_i32x4(t0, t1, 0xdd), mult + 16, g, y + 16);
	if (h == 2)
		return;
	__m512i t2 = _mm512_shuffle_i32x4(a0, a1, 0xee), t3 = _mm512_shuffle_i32x4(a2, a3, 0xee);
	dw_epi512(_mm512_shuffle_i32x4(t2, t3, 0x88), mult + 32, g, y + 32);
	dw_epi512(_mm512_shuffle_i32x4(t2, t3, 0xdd), mult + 48, g, y + 48);
}

/* dw_quads: 16 bytes a lane of 4 rows into the 4 vectors of quads at d (128-bit lanes) */
#define DW_QUADS(VT, SFX, v, d)								\
	do {										\
		VT p0_ = _mm##SFX##_unpacklo_epi8(v[0], v[1]);				\
		VT p1_ = _mm##SFX##_unpackhi_epi8(v[0], v[1]);				\
		VT p2_ = _mm##SFX##_unpacklo_epi8(v[2], v[3]);				\
		VT p3_ = _mm##SFX##_unpackhi_epi8(v[2], v[3]);				\
		d[0] = _mm##SFX##_unpacklo_epi16(p0_, p2_);				\
		d[1] = _mm##SFX##_unpackhi_epi16(p0_, p2_);				\
		d[2] = _mm##SFX##_unpacklo_epi16(p1_, p3_);				\
		d[3] = _mm##SFX##_unpackhi_epi16(p1_, p3_);				\
	} while (0)

DW_TGT512 static void
dw_rows_vnni(void *ctx, int64_t b, int64_t e)
{
	const struct dwjob *j = ctx;
	const struct ml_q8_geom *g = j->g;
	int64_t C = g->c, T = g->kh * g->kw, kw = g->kw, n64, n32;
	int64_t ncol = (g->ow - 1) * g->sw + kw;	/* input columns from -pl on */
	uint8_t *qb = ml_malloc((size_t)ncol * DW_QCOL + 64);
	const uint8_t **src = ml_malloc(sizeof *src * (size_t)(T + 1));
	int32_t *acc = ml_malloc(sizeof(int32_t) * (size_t)(C % 16 + 1));

	dw_blocks(C, &n64, &n32);
	if (qb == NULL || src == NULL || acc == NULL)
		goto out;	/* checked by the caller's probe allocation */
	uint8_t *q = (uint8_t *)(((uintptr_t)qb + 63) / 64 * 64);
	for (int64_t r = b; r < e; r++) {
		int64_t n = r / g->oh, oy = r % g->oh;
		const uint8_t *row[4];
		bool in[4];
		for (int ky = 0; ky < 4; ky++) {
			int64_t iy = oy * g->sh - g->pt + ky;
			in[ky] = ky < g->kh && iy >= 0 && iy < g->h;
			row[ky] = in[ky] ? j->x + (n * g->h + iy) * g->w * C : j->zrow;
		}
		for (int64_t cb = 0; cb < n64 + n32; cb++) {
			bool wide = cb < n64;
			int64_t qc = wide ? DW_QCOL : DW_QCOL / 2;	/* bytes a column */
			/* the quads of every input column the row's windows read */
			for (int64_t c = 0; c < ncol; c++) {
				int64_t ix = c - g->pl;
				bool cin = ix >= 0 && ix < g->w;
				const uint8_t *p[4];
				for (int ky = 0; ky < 4; ky++)
					p[ky] = (in[ky] && cin ? row[ky] + ix * C : j->zrow) + cb * 64;
				if (wide) {
					__m512i v[4], *d = (__m512i *)(q + c * qc);
					for (int ky = 0; ky < 4; ky++)
						v[ky] = ky < g->kh ? _mm512_loadu_si512((const void *)p[ky]) :
								     _mm512_setzero_si512();
					DW_QUADS(__m512i, 512, v, d);
				} else {
					__m256i v[4], *d = (__m256i *)(q + c * qc);
					for (int ky = 0; ky < 4; ky++)
						v[ky] = ky < g->kh ? _mm256_loadu_si256((const __m256i *)p[ky]) :
								     _mm256_setzero_si256();
					DW_QUADS(__m256i, 256, v, d);
				}
			}
			const uint8_t *wq = (const uint8_t *)j->wq + cb * kw * DW_QCOL;
			const int32_t *bq = j->bq + cb * 64;
			uint8_t *y = j->y + (n * g->oh + oy) * g->ow * C + cb * 64;
			const float *mult = j->mult + cb * 64;
			for (int64_t ox = 0; ox < g->ow; ox++, y += C) {
				const uint8_t *qx = q + ox * g->sw * qc;
				if (wide) {
					const __m512i *bv = (const __m512i *)bq, *wv = (const __m512i *)wq;
					__m512i a0 = _mm512_loadu_si512(bv), a1 = _mm512_loadu_si512(bv + 1);
					__m512i a2 = _mm512_loadu_si512(bv + 2), a3 = _mm512_loadu_si512(bv + 3);
					for (int64_t kx = 0; kx < kw; kx++) {
						const __m512i *qv = (const __m512i *)(qx + kx * qc);
						a0 = _mm512_dpbusd_epi32(a0, _mm512_load_si512(qv), _mm512_loadu_si512(wv + kx * 4));
						a1 = _mm512_dpbusd_epi32(a1, _mm512_load_si512(qv + 1),
									 _mm512_loadu_si512(wv + kx * 4 + 1));
						a2 = _mm512_dpbusd_epi32(a2, _mm512_load_si512(qv + 2),
									 _mm512_loadu_si512(wv + kx * 4 + 2));
						a3 = _mm512_dpbusd_epi32(a3, _mm512_load_si512(qv + 3),
									 _mm512_loadu_si512(wv + kx * 4 + 3));
					}
					dw_epi4(a0, a1, a2, a3, 4, mult, g, y);
				} else {
					const __m256i *bv = (const __m256i *)bq, *wv = (const __m256i *)wq;
					__m256i a0 = _mm256_loadu_si256(bv), a1 = _mm256_loadu_si256(bv + 1);
					__m256i a2 = _mm256_loadu_si256(bv + 2), a3 = _mm256_loadu_si256(bv + 3);
					for (int64_t kx = 0; kx < kw; kx++) {
						const __m256i *qv = (const __m256i *)(qx + kx * qc);
						a0 = _mm256_dpbusd_epi32(a0, _mm256_load_si256(qv), _mm256_loadu_si256(wv + kx * 4));
						a1 = _mm256_dpbusd_epi32(a1, _mm256_load_si256(qv + 1),
									 _mm256_loadu_si256(wv + kx * 4 + 1));
						a2 = _mm256_dpbusd_epi32(a2, _mm256_load_si256(qv + 2),
									 _mm256_loadu_si256(wv + kx * 4 + 2));
						a3 = _mm256_dpbusd_epi32(a3, _mm256_load_si256(qv + 3),
									 _mm256_loadu_si256(wv + kx * 4 + 3));
					}
					dw_epi4(_mm512_castsi256_si512(a0), _mm512_castsi256_si512(a1),
						_mm512_castsi256_si512(a2), _mm512_castsi256_si512(a3), 2, mult, g, y);
				}
			}
		}
		if ((n64 * 2 + n32) * 32 < C)
			dw_row512(j, r, (n64 * 2 + n32) * 2, src, acc);
	}
out:
	ml_free(qb);
	ml_free(src);
	ml_free(acc);
}
#endif

/*
 * run_dw: the depthwise Q8Conv; on the AVX2 and VNNI paths with at least
 * 16 channels, dw_rows_avx2 (dw_rows_avx512 on the VNNI path) over weights
 * packed once per call.
 */
static int
run_dw(struct ml_opctx *c, const struct ml_q8_geom *g, const uint8_t *x, const int8_t *w)
{
	struct dwjob j = { .g = g, .x = x, .w = w, .bias = c->in[2]->data,
			   .mult = c->in[3]->data, .y = c->out[0]->data };
	int64_t T = g->kh * g->kw;
	void (*rows)(void *, int64_t, int64_t) = dw_rows;
	int16_t *wpk = NULL;
	int8_t *wq = NULL;
	int32_t *bq = NULL;
#ifdef Q8_X86
	if (ml_q8_path() >= ML_Q8_AVX2 && g->c >= 16) {
		wpk = ml_malloc(sizeof(int16_t) * 32 * (size_t)(g->c / 16) * (size_t)((T + 1) / 2));
		if (wpk == NULL)
			return nomem(c);
		dw_pack(wpk, w, g->c, T);
		/* AMX has no depthwise form: its path has AVX-512 for this */
		rows = ml_q8_path() == ML_Q8_VNNI || ml_q8_path() == ML_Q8_AMX ? dw_rows_avx512 :
										dw_rows_avx2;
	}
	/* windows of up to 4 x 3, dilation 1, 32 channels or more: the quads of dw_rows_vnni */
	if ((ml_q8_path() == ML_Q8_VNNI || ml_q8_path() == ML_Q8_AMX) && g->c >= 32 &&
	    g->kh <= 4 && g->kw <= 3 && g->dh == 1 && g->dw == 1 && getenv("ML_Q8_DW64") == NULL) {
		int64_t nbl = (g->c + 63) / 64;
		wq = ml_malloc((size_t)nbl * ((size_t)g->kw * DW_QCOL + 64 * sizeof(int32_t)));
		if (wq == NULL) {
			ml_free(wpk);
			return nomem(c);
		}
		bq = (int32_t *)(wq + (size_t)nbl * (size_t)g->kw * DW_QCOL);
		dw_pack64(wq, bq, w, c->in[2]->data, g);
		rows = dw_rows_vnni;
	}
#endif
	uint8_t *zrow = ml_malloc((size_t)g->c + 64);
	/* what a worker allocates: dw_rows_avx2's taps of 4 pixels, or dw_rows_vnni's columns */
	size_t most = sizeof(int32_t) * (size_t)g->c + sizeof(void *) * 4 * (size_t)(T + 1);
	if (wq != NULL)
		most += (size_t)((g->ow - 1) * g->sw + g->kw) * DW_QCOL + 64;
	void *probe = ml_malloc(most);
	if (zrow == NULL || probe == NULL) {
		ml_free(zrow);
		ml_free(probe);
		ml_free(wpk);
		ml_free(wq);
		return nomem(c);
	}
	ml_free(probe);
	memset(zrow, g->xzero, (size_t)g->c + 64);
	j.zrow = zrow;
	j.wpk = wpk;
	j.wq = wq;
	j.bq = bq;
	ml_parallel_for(g->n * g->oh, 1, rows, &j);
	ml_free(zrow);
	ml_free(wpk);
	ml_free(wq);
	return 0;
}

/*
 * w7_ok: the packed weights of a weight_bits 7 Q8Conv are in [-64, 63]
 * (checked where the AVX2 path relies on it: a damaged model must not give
 * saturated sums there and other bytes elsewhere).
 */
static bool
w7_ok(const int8_t *restrict w, int64_t n)
{
	int bad = 0;
	for (int64_t i = 0; i < n; i++)
		bad |= w[i] < ML_Q8_W7MIN || w[i] > ML_Q8_W7MAX;
	return bad == 0;
}

/*
 * struct conv_prep: what a Q8Conv node keeps in its session cache
 * (ml_node_prep): its geometry, decoded from a dozen attributes and
 * checked, for the input shapes in key; and the weight found in range for
 * weight_bits 7 (a constant weight is checked once, not per run).
 */
struct conv_prep {
	int64_t key[4 * (1 + 4)];	/* rank and dims of each input */
	bool valid;
	struct ml_q8_geom g;
	const void *w7_checked;	/* the constant weight that passed the check */
};

/* conv_geom: c's geometry in *g, from the node's cache where its key holds (prep may be NULL). */
static int
conv_geom(struct ml_opctx *c, struct conv_prep *prep, struct ml_q8_geom *g)
{
	int64_t key[4 * (1 + 4)] = { 0 };
	bool fits = prep != NULL;
	for (int i = 0; i < 4 && fits; i++) {
		const struct ml_tval *t = ML_IN(c, i);
		fits = t != NULL && t->rank >= 0 && t->rank <= 4;
		for (int d = 0; fits && d < t->rank; d++)
			key[i * 5 + 1 + d] = t->dims[d];
		if (fits)
			key[i * 5] = t->rank;
	}
	if (fits && prep->valid && memcmp(key, prep->key, sizeof key) == 0) {
		*g = prep->g;
		return 0;
	}
	ML_TRY(ml_q8_geom(c, g));
	if (fits) {
		memcpy(prep->key, key, sizeof key);
		prep->g = *g;
		prep->valid = true;
	}
	return 0;
}

int
ml_q8_run_conv(struct ml_opctx *c)
{
	struct ml_q8_geom g;
	const uint8_t *x = c->in[0]->data;
	const int8_t *w = c->in[1]->data;
	struct conv_prep *prep = ml_node_prep(c, sizeof *prep);

	ML_TRY(conv_geom(c, prep, &g));
	int64_t P = g.n * g.oh * g.ow;
	if (P == 0 || g.m == 0)
		return 0;
	if (g.group != 1)
		return run_dw(c, &g, x, w);
	if (g.w7 && ml_q8_path() == ML_Q8_AVX2 && (prep == NULL || prep->w7_checked != w)) {
		if (!w7_ok(w, ml_q8_packed_len(g.k, g.m)))
			return ml_opfail(c, ML_EINVAL,
					 "weight_bits is 7 but a weight is outside [-64, 63]");
		int wt = c->node->in[1];
		if (prep != NULL && wt >= 0 && c->g->tensors[wt]->kind == ML_TK_CONST)
			prep->w7_checked = w;
	}
	struct ml_q8_epi ep = { .bias = c->in[2]->data, .mult = c->in[3]->data, .yzero = g.yzero,
				.lo = g.lo, .hi = g.hi, .f32out = g.f32out, .w7 = g.w7 };
	int64_t kp = ml_q8_kpad(g.k);
	const uint8_t *a = x;
	int64_t lda = g.c;
	bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 &&
		      g.oh == g.h && g.ow == g.w && g.c % ML_Q8_KG == 0;
	if (!direct) {
		int64_t bytes;
		if (!ml_mul_ok(P, kp, &bytes))
			return nomem(c);
		uint8_t *buf = ml_cpu_scratch(0, (size_t)bytes);
		if (buf == NULL)
			return nomem(c);
		/*
		 * a padded first convolution (few channels: window rows of at
		 * most 8 bytes): the input copied once with its padding of zero
		 * points, so that every window lies inside and takes i2c_rows'
		 * 8-byte moves (the edge windows went byte by byte: LeNet's 5x5
		 * pad 2 at 28x28, a quarter of its windows)
		 */
		struct ml_q8_geom gp = g;
		int64_t hp = (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1;
		int64_t wpd = (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1;
		if ((g.pt > 0 || g.pl > 0) && g.c * g.kw <= 8 && g.dw == 1 &&
		    g.n * (hp + 1) * (wpd + 8) * g.c <= ((int64_t)1 << 22)) {
			gp.h = hp + 1;	/* a zero-point row under: room for the last 8-byte move */
			gp.w = wpd + 8;
			gp.pt = gp.pl = 0;
			uint8_t *xp = ml_cpu_scratch(1, (size_t)(g.n * gp.h * gp.w * g.c));
			if (xp == NULL)
				return nomem(c);
			memset(xp, g.xzero, (size_t)(g.n * gp.h * gp.w * g.c));
			for (int64_t b = 0; b < g.n; b++)
				for (int64_t y = 0; y < g.h; y++) {
					int64_t py = y + g.pt;
					if (py >= gp.h || g.pl + g.w > gp.w)
						continue;	/* rows and columns no window reads */
					memcpy(xp + ((b * gp.h + py) * gp.w + g.pl) * g.c,
					       x + (b * g.h + y) * g.w * g.c, (size_t)(g.w * g.c));
				}
			if (g.pl + g.w <= gp.w)
				x = xp;
			else
				gp = g;
		}
		struct i2cjob ij = { .g = &gp, .x = x, .xend = x + gp.n * gp.h * gp.w * gp.c, .a = buf,
				     .kp = kp };
		/* i2c_inside: the padded copy, its last 8-byte move ending in the row */
		bool inside = x != c->in[0]->data && (gp.kh - 1) * gp.c * gp.kw + 8 <= kp;
		ml_parallel_for(P, 16384 / (kp + 1) + 1, inside ? i2c_inside : i2c_rows, &ij);
		a = buf;
		lda = kp;
	}
	ml_q8_gemm(P, g.m, kp, a, lda, w, &ep, c->out[0]->data, g.m);
	return 0;
}

/* Q8Add over the flat arrays. */
struct addjob {
	const uint8_t *a, *b;
	uint8_t *y;
	float fa, fb;
	int32_t za, zb, zy, lo;
};

Q8_CLONES static void
add_range(void *ctx, int64_t b, int64_t e)
{
	const struct addjob *j = ctx;
	const uint8_t *restrict a = j->a, *restrict bb = j->b;
	uint8_t *restrict y = j->y;
	const float fa = j->fa, fb = j->fb;
	const int32_t za = j->za, zb = j->zb, zy = j->zy, lo = j->lo;

	for (int64_t i = b; i < e; i++) {
		float v = (float)((int32_t)a[i] - za) * fa + (float)((int32_t)bb[i] - zb) * fb;
		v = v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
		int32_t q = (int32_t)((v + 12582912.0f) - 12582912.0f) + zy;
		y[i] = (uint8_t)(q < lo ? lo : q > 255 ? 255 : q);
	}
}

int
ml_q8_run_add(struct ml_opctx *c)
{
	double sy = ml_attr_float(c->node, "y_scale", 1.0);
	struct addjob j = {
		.a = c->in[0]->data, .b = c->in[1]->data, .y = c->out[0]->data,
		.fa = (float)(ml_attr_float(c->node, "a_scale", 1.0) / sy),
		.fb = (float)(ml_attr_float(c->node, "b_scale", 1.0) / sy),
		.za = (int32_t)ml_attr_int(c->node, "a_zero_point", 0),
		.zb = (int32_t)ml_attr_int(c->node, "b_zero_point", 0),
		.zy = (int32_t)ml_attr_int(c->node, "y_zero_point", 0),
		.lo = (int32_t)ml_attr_int(c->node, "act_min", 0),
	};
	int64_t n = ml_tval_numel(c->out[0]);

	if (ml_tval_numel(c->in[0]) != n || ml_tval_numel(c->in[1]) != n)
		return ml_opfail(c, ML_EINVAL, "a and b differ in shape");
	ml_parallel_for(n, 16384, add_range, &j);
	return 0;
}

/* Q8MaxPool: one job over (n, oy) rows. */
struct pooljob {
	const uint8_t *x;
	uint8_t *y;
	int64_t h, w, c, oh, ow, kh, kw, sh, sw, pt, pl;
};

/* max_into: y = max(y, x) over C bytes (restrict: the uint8 pointers may alias anything) */
static inline void
max_into(uint8_t *restrict y, const uint8_t *restrict x, int64_t C)
{
	for (int64_t ch = 0; ch < C; ch++)
		y[ch] = x[ch] > y[ch] ? x[ch] : y[ch];
}

Q8_CLONES static void
maxpool_rows(void *ctx, int64_t b, int64_t e)
{
	const struct pooljob *j = ctx;

	for (int64_t r = b; r < e; r++) {
		int64_t n = r / j->oh, oy = r % j->oh;
		for (int64_t ox = 0; ox < j->ow; ox++) {
			uint8_t *yr = j->y + ((n * j->oh + oy) * j->ow + ox) * j->c;
			memset(yr, 0, (size_t)j->c);
			for (int64_t ky = 0; ky < j->kh; ky++) {
				int64_t iy = oy * j->sh - j->pt + ky;
				if (iy < 0 || iy >= j->h)
					continue;
				for (int64_t kx = 0; kx < j->kw; kx++) {
					int64_t ix = ox * j->sw - j->pl + kx;
					if (ix < 0 || ix >= j->w)
						continue;
					max_into(yr, j->x + ((n * j->h + iy) * j->w + ix) * j->c, j->c);
				}
			}
		}
	}
}

/*
 * maxpool2_rows: maxpool_rows for a 2 x 2 window at stride 2 inside x (no
 * padding, as a LeNet's and ResNet's pools): the two input rows' maximum
 * over all their bytes (a loop the compiler vectorises), then each output
 * pixel's C bytes the maximum of its two pixels' there, instead of a call
 * a window tap and pixel (which at 6 channels cost 3.3 times f32's pool).
 */
Q8_CLONES static void
maxpool2_rows(void *ctx, int64_t b, int64_t e)
{
	const struct pooljob *j = ctx;
	int64_t C = j->c, L = 2 * j->ow * C;
	uint8_t *restrict t = ml_cpu_scratch(0, (size_t)L + 64);

	if (t == NULL) {
		maxpool_rows(ctx, b, e);
		return;
	}
	for (int64_t r = b; r < e; r++) {
		int64_t n = r / j->oh, oy = r % j->oh;
		const uint8_t *restrict r0 = j->x + (n * j->h + 2 * oy) * j->w * C;
		const uint8_t *restrict r1 = r0 + j->w * C;
		uint8_t *restrict yr = j->y + (n * j->oh + oy) * j->ow * C;
		for (int64_t i = 0; i < L; i++)
			t[i] = r0[i] > r1[i] ? r0[i] : r1[i];
		for (int64_t ox = 0; ox < j->ow; ox++) {
			const uint8_t *p = t + 2 * ox * C;
			for (int64_t ch = 0; ch < C; ch++)
				yr[ox * C + ch] = p[ch] > p[C + ch] ? p[ch] : p[C + ch];
		}
	}
}

int
ml_q8_run_maxpool(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *y = c->out[0];
	const int64_t *ks = NULL, *st = NULL, *pd = NULL;
	struct pooljob j = { .x = x->data, .y = y->data, .h = x->dims[1], .w = x->dims[2],
			     .c = x->dims[3], .oh = y->dims[1], .ow = y->dims[2], .kh = 1, .kw = 1,
			     .sh = 1, .sw = 1 };

	if (ml_attr_ints(c->node, "kernel_shape", &ks) == 2)
		j.kh = ks[0], j.kw = ks[1];
	if (ml_attr_ints(c->node, "strides", &st) == 2)
		j.sh = st[0], j.sw = st[1];
	if (ml_attr_ints(c->node, "pads", &pd) == 4)
		j.pt = pd[0], j.pl = pd[1];
	if (ml_tval_numel(y) == 0)
		return 0;
	if (j.kh == 2 && j.kw == 2 && j.sh == 2 && j.sw == 2 && j.pt == 0 && j.pl == 0 &&
	    2 * j.oh <= j.h && 2 * j.ow <= j.w) {
		ml_parallel_for(y->dims[0] * j.oh, ML_MAX(1, 8192 / (2 * j.ow * j.c + 1)),
				maxpool2_rows, &j);
		return 0;
	}
	ml_parallel_for(y->dims[0] * j.oh, 1, maxpool_rows, &j);
	return 0;
}

int
ml_q8_run_gap(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	const uint8_t *xp = x->data;
	uint8_t *y = c->out[0]->data;
	int64_t n = x->dims[0], hw = x->dims[1] * x->dims[2], C = x->dims[3];
	int64_t *acc = ml_calloc((size_t)(C > 0 ? C : 1), sizeof(int64_t));

	if (acc == NULL)
		return nomem(c);
	for (int64_t b = 0; b < n; b++) {
		memset(acc, 0, sizeof(int64_t) * (size_t)C);
		for (int64_t p = 0; p < hw; p++)
			for (int64_t ch = 0; ch < C; ch++)
				acc[ch] += xp[(b * hw + p) * C + ch];
		for (int64_t ch = 0; ch < C; ch++)
			y[b * C + ch] = hw > 0 ? (uint8_t)((acc[ch] + hw / 2) / hw) : 0;
	}
	ml_free(acc);
	return 0;
}
