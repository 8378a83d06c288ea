/*
 * nn_nhwc.c: the CPU kernel of ConvNHWC, the channels-last convolution
 * that mlopt's layout pass makes (lib/opt/layout.c; the op in lib/ops/nn.c).
 * X is [N, H, W, C], Y [N, OH, OW, M], and each output pixel's channels are
 * contiguous, which is what the three paths use:
 * - depthwise (one input channel per group, multiplier 1, W [kH, kW, 1, C]):
 *   each tap is one multiply-add of a channel vector of the input pixel by
 *   the tap's channel vector of W, so the loops vectorise over channels
 *   whatever the plane size (NCHW's depthwise loops run along rows, which
 *   are 2 to 16 wide in the late stages). AVX-512 and AVX2 kernels keep
 *   2 vectors of channels by 4 output pixels in registers; on AVX-512 the
 *   3x3, 5x5 and 7x7 windows (strides 1 and 2 across) slide in registers,
 *   each input pixel of a tap row loaded once for all the taps that read
 *   it (dw_in512); a portable loop serves other CPUs
 *   (ml_cpu_fma_level("ML_NHWC") picks, per call);
 * - one group: Y [N OH OW, M] = im2col(X) [N OH OW, kH kW C] times W as
 *   a [kH kW C, M] matrix (packed in panels once per session, or already
 *   by an older mlopt: packed_n), through
 *   FusedMatMul's kernel (the packed SGEMM of nn_gemm.c, with the bias,
 *   the residual and the activation applied to each tile); the im2col
 *   rows are runs of C contiguous floats, and a pointwise convolution's
 *   im2col is X itself. Without the packed SGEMM: BLAS, then one pass;
 * - one group and at most 4 input channels (RGB stems), W in panels: direct
 *   on AVX-512 and AVX2, 6 pixels by 32 (16) outputs in registers, no im2col;
 * - anything else (other groups): direct loops, correct but not fast.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include "cpu/nn.h"
#include "ops/fused.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_SIMD 1
#include <immintrin.h>
#endif

/* The largest im2col chunk, in floats (1 MB): rows beyond it go in several products. */
#define COL_MAX ((int64_t)1 << 18)
/* The rows FusedMatMul's kernel streams packed weights for (its SMALL_M). */
#define SMALL_ROWS 8
/* Multiply-adds a work item should have at least. */
#define ITEM_WORK ((int64_t)1 << 15)

struct nhwc {
	const struct ml_conv3 *v;
	const float *x, *w, *bias, *z;
	float *y;
	float *col;
	int64_t r0;		/* im2col: the first output row of the chunk */
	int act, level;
	float lo, hi;
	/* conv_rows: output row oh of image n into yr (bias included) */
	void (*row)(const struct nhwc *j, int64_t n, int64_t oh, float *yr);
	/* a depthwise row's input rows: row ih in ring slot ih % nring (a prologue), else X's */
	float *ring;
	int64_t nring;
	int64_t c0, c1;		/* a depthwise row's channels [c0, c1) (multiples of 16 but C) */
	bool actreg;		/* dw_row512 applies the Relu or Clip itself (no residual) */
};

/* in_row: row ih of image n of the input the depthwise taps read */
static inline const float *
in_row(const struct nhwc *j, int64_t n, int64_t ih)
{
	const struct ml_conv3 *v = j->v;
	if (j->ring != NULL)
		return j->ring + ih % j->nring * v->in[2] * v->cin;
	return j->x + (n * v->in[1] + ih) * v->in[2] * v->cin;
}

/* rowepi: the residual and the activation over one output row of n floats. */
static void
rowepi(const struct nhwc *j, float *y, const float *z, int64_t n)
{
	if (z != NULL || j->act != ML_ACT_NONE)
		ml_fused_tile_epi(y, 1, n, n, NULL, z, j->act, j->lo, j->hi);
}

#ifdef HAVE_SIMD
/* mask32: the masks of lanes 0-15 and 16-31 of the rem (clamped to 32) channels from c0 */
__attribute__((target("avx512f"), always_inline))
static inline void
mask32(int64_t rem, __mmask16 *m0, __mmask16 *m1)
{
	*m0 = (__mmask16)(rem >= 16 ? 0xffff : (1u << rem) - 1);
	*m1 = (__mmask16)(rem >= 32 ? 0xffff : rem <= 16 ? 0 : (1u << (rem - 16)) - 1);
}
#endif

/*
 * Depthwise. dw_rowN(j, n, oh, yr): output row oh of image n into yr
 * (OW x C floats), bias included. The SIMD kernels take 4 output pixels
 * at a time (fewer at the row's end) and 2 vectors of channels (masked
 * past C); a tap outside the input is skipped, per pixel.
 */
#ifdef HAVE_SIMD
/*
 * act512: fused_mm.c's Relu (v > 0 ? v : 0: max with 0 as the second
 * operand, which NaN and -0 yield) or Clip (v < lo ? lo : v > hi ? hi : v,
 * NaN kept), bit for bit
 */
__attribute__((target("avx512f"), always_inline))
static inline __m512
act512(__m512 v, int act, __m512 lo, __m512 hi)
{
	if (act == ML_ACT_RELU)
		return _mm512_max_ps(v, _mm512_setzero_ps());
	__m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), v, hi);
	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), r, lo);
}

/*
 * dw_blk512: output pixels [ow0, ow0 + r) (r <= 4) by the channels [c0,
 * c0 + 32) (masked past j->c1) of row oh, a tap outside the input skipped
 * per pixel: any window, stride and dilation
 */
__attribute__((target("avx512f"), always_inline))
static inline void
dw_blk512(const struct nhwc *j, int64_t n, int64_t oh, float *yr, int64_t ow0, int r, int64_t c0)
{
	const struct ml_conv3 *v = j->v;
	int64_t C = v->cin, H = v->in[1], W = v->in[2];
	int64_t KH = v->k[1], KW = v->k[2], sw = v->s[2], dw = v->d[2], pw = v->p[2];
	/* all 4 pixels' taps inside the row: no checks in the tap loop */
	bool inside = r == 4 && ow0 * sw - pw >= 0 && (ow0 + 3) * sw - pw + (KW - 1) * dw < W;
	__mmask16 m0, m1;
	mask32(j->c1 - c0, &m0, &m1);
	__m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
	if (j->bias != NULL) {
		b0 = _mm512_maskz_loadu_ps(m0, j->bias + c0);
		b1 = _mm512_maskz_loadu_ps(m1, j->bias + c0 + 16);
	}
	__m512 a0[4], a1[4];
	for (int q = 0; q < 4; q++) {
		a0[q] = b0;
		a1[q] = b1;
	}
	for (int64_t kh = 0; kh < KH; kh++) {
		int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
		if (ih < 0 || ih >= H)
			continue;
		const float *xr = in_row(j, n, ih) + c0;
		const float *wr = j->w + kh * KW * C + c0;
		for (int64_t kw = 0; kw < KW; kw++) {
			__m512 w0 = _mm512_maskz_loadu_ps(m0, wr + kw * C);
			__m512 w1 = _mm512_maskz_loadu_ps(m1, wr + kw * C + 16);
			int64_t iw0 = ow0 * sw - pw + kw * dw;
			/* a constant trip count, so that a0 and a1 stay in registers */
			_Pragma("GCC unroll 4")
			for (int q = 0; q < 4; q++) {
				int64_t iw = iw0 + q * sw;
				if (!inside && (q >= r || iw < 0 || iw >= W))
					continue;
				const float *xp = xr + iw * C;
				a0[q] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, xp), w0, a0[q]);
				a1[q] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, xp + 16), w1, a1[q]);
			}
		}
	}
	if (j->actreg) {
		__m512 lo = _mm512_set1_ps(j->lo), hi = _mm512_set1_ps(j->hi);
		for (int q = 0; q < 4; q++) {
			a0[q] = act512(a0[q], j->act, lo, hi);
			a1[q] = act512(a1[q], j->act, lo, hi);
		}
	}
	_Pragma("GCC unroll 4")
	for (int q = 0; q < 4; q++) {
		if (q >= r)
			continue;
		float *yp = yr + (ow0 + q) * C + c0;
		_mm512_mask_storeu_ps(yp, m0, a0[q]);
		_mm512_mask_storeu_ps(yp + 16, m1, a1[q]);
	}
}

/*
 * dw_in512: output pixels [ow0, ow0 + r) (r <= 4) of a row by 32 channels
 * from c0 (all valid), a KWc-wide window at stride Sc across (no dilation
 * across; any height), xr[kh] the input row of tap row kh from c0 on (NULL:
 * padding). The window slides in registers: each input pixel of a tap row
 * is loaded once and multiplied by every tap that reads it (6 loads of a
 * 3x3 row at stride 1 for 12 multiply-adds, not 12), and one comparison a
 * pixel, not a tap, skips the padding, no masks.
 */
#define DW_NP 4
#define DW_MAX_KW 7
/* the tallest window dw_row512 slides (taller ones: dw_blk512) */
#define DW_MAX_KH 16
__attribute__((target("avx512f"), always_inline))
static inline void
dw_in512(const struct nhwc *j, const float *const *xr, float *yr, int64_t ow0, int r, int64_t c0,
	 const int KWc, const int Sc)
{
	const struct ml_conv3 *v = j->v;
	int64_t C = v->cin, KH = v->k[1], W = v->in[2], base = ow0 * Sc - v->p[2];
	__m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
	if (j->bias != NULL) {
		b0 = _mm512_loadu_ps(j->bias + c0);
		b1 = _mm512_loadu_ps(j->bias + c0 + 16);
	}
	__m512 a0[DW_NP], a1[DW_NP];
	for (int q = 0; q < DW_NP; q++) {
		a0[q] = b0;
		a1[q] = b1;
	}
	for (int64_t kh = 0; kh < KH; kh++) {
		if (xr[kh] == NULL)
			continue;
		const float *xp = xr[kh] + base * C;
		const float *wr = j->w + kh * KWc * C + c0;
		__m512 w0[DW_MAX_KW], w1[DW_MAX_KW];
		_Pragma("GCC unroll 7")
		for (int kw = 0; kw < KWc; kw++) {
			w0[kw] = _mm512_loadu_ps(wr + kw * C);
			w1[kw] = _mm512_loadu_ps(wr + kw * C + 16);
		}
		/* input pixel pos of the block's span feeds pixel q by tap kw where q Sc + kw = pos */
		_Pragma("GCC unroll 16")
		for (int pos = 0; pos < (DW_NP - 1) * Sc + KWc; pos++) {
			if (base + pos < 0 || base + pos >= W)
				continue;
			__m512 x0 = _mm512_loadu_ps(xp + pos * C);
			__m512 x1 = _mm512_loadu_ps(xp + pos * C + 16);
			_Pragma("GCC unroll 7")
			for (int kw = 0; kw < KWc; kw++) {
				int d = pos - kw;
				if (d < 0 || d % Sc != 0 || d / Sc >= DW_NP)
					continue;
				a0[d / Sc] = _mm512_fmadd_ps(x0, w0[kw], a0[d / Sc]);
				a1[d / Sc] = _mm512_fmadd_ps(x1, w1[kw], a1[d / Sc]);
			}
		}
	}
	if (j->actreg) {
		__m512 lo = _mm512_set1_ps(j->lo), hi = _mm512_set1_ps(j->hi);
		for (int q = 0; q < DW_NP; q++) {
			a0[q] = act512(a0[q], j->act, lo, hi);
			a1[q] = act512(a1[q], j->act, lo, hi);
		}
	}
	_Pragma("GCC unroll 4")
	for (int q = 0; q < DW_NP; q++) {
		if (q >= r)
			continue;
		float *yp = yr + (ow0 + q) * C + c0;
		_mm512_storeu_ps(yp, a0[q]);
		_mm512_storeu_ps(yp + 16, a1[q]);
	}
}

/* DW_IN512(K, S): dw_in512 for a K-wide window at stride S, as a function (one copy each) */
#define DW_IN512(K, S)								\
__attribute__((target("avx512f"))) static void					\
dw_in512_##K##_##S(const struct nhwc *j, const float *const *xr, float *yr, int64_t ow0, \
		   int r, int64_t c0)						\
{										\
	dw_in512(j, xr, yr, ow0, r, c0, K, S);					\
}
DW_IN512(3, 1)
DW_IN512(3, 2)
DW_IN512(5, 1)
DW_IN512(5, 2)
DW_IN512(7, 1)

typedef void (*dw_in_fn)(const struct nhwc *, const float *const *, float *, int64_t, int,
			 int64_t);

/* dw_in_for: the sliding kernel of v's window, or NULL (dilated across, other widths) */
static dw_in_fn
dw_in_for(const struct ml_conv3 *v)
{
	if (v->d[2] != 1 || v->k[1] > DW_MAX_KH)
		return NULL;
	int64_t k = v->k[2], s = v->s[2];
	return k == 3 && s == 1 ? dw_in512_3_1 : k == 3 && s == 2 ? dw_in512_3_2 :
	       k == 5 && s == 1 ? dw_in512_5_1 : k == 5 && s == 2 ? dw_in512_5_2 :
	       k == 7 && s == 1 ? dw_in512_7_1 : NULL;
}

/*
 * dw_row512: output row oh of image n. Each run of 32 channels passes
 * along the row, 4 pixels at a time, through the window's sliding kernel
 * (dw_in_for); where none fits, and for the last channels short of 32,
 * through dw_blk512.
 */
__attribute__((target("avx512f")))
static void
dw_row512(const struct nhwc *j, int64_t n, int64_t oh, float *yr)
{
	const struct ml_conv3 *v = j->v;
	int64_t H = v->in[1], OW = v->out[2], KH = v->k[1];
	dw_in_fn in = dw_in_for(v);
	const float *rows[DW_MAX_KH];

	if (in != NULL)
		for (int64_t kh = 0; kh < KH; kh++) {
			int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
			rows[kh] = ih < 0 || ih >= H ? NULL : in_row(j, n, ih);
		}
	for (int64_t c0 = j->c0; c0 < j->c1; c0 += 32) {
		if (in != NULL && j->c1 - c0 >= 32) {
			const float *xr[DW_MAX_KH];
			for (int64_t kh = 0; kh < KH; kh++)
				xr[kh] = rows[kh] != NULL ? rows[kh] + c0 : NULL;
			for (int64_t ow = 0; ow < OW; ow += DW_NP)
				in(j, xr, yr, ow, (int)ML_MIN(DW_NP, OW - ow), c0);
			continue;
		}
		for (int64_t ow = 0; ow < OW; ow += 4)
			dw_blk512(j, n, oh, yr, ow, (int)ML_MIN(4, OW - ow), c0);
	}
}

/* avx2_mask: the lane mask of the first n (clamped to 0..8) of 8 lanes. */
__attribute__((target("avx2")))
static __m256i
avx2_mask(int64_t n)
{
	n = n < 0 ? 0 : n > 8 ? 8 : n;
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/*
 * dw_blk256: 4 output pixels (r valid) by 16 channels from c0 of one row;
 * full: all 16 channels valid, so plain loads and stores (vmaskmovps is
 * slow on some CPUs, its stores most of all), else masked past C. kc > 0:
 * a kc x kc window, no dilation, stride sc across, as constants (callers
 * pass literals, so the tap loops unroll and their bounds leave the
 * registers to the sums).
 */
__attribute__((target("avx2,fma"), always_inline))
static inline void
dw_blk256(const struct nhwc *j, int64_t n, int64_t oh, float *yr, int64_t ow0, int r,
	  bool inside, int64_t c0, bool full, int kc, int sc)
{
	const struct ml_conv3 *v = j->v;
	int64_t C = v->cin, H = v->in[1], W = v->in[2], pw = v->p[2];
	int64_t KH = kc > 0 ? kc : v->k[1], KW = kc > 0 ? kc : v->k[2];
	int64_t sw = kc > 0 ? sc : v->s[2], dw = kc > 0 ? 1 : v->d[2];
	__m256i m0 = full ? _mm256_set1_epi32(-1) : avx2_mask(j->c1 - c0);
	__m256i m1 = full ? _mm256_set1_epi32(-1) : avx2_mask(j->c1 - c0 - 8);
#define DW_LD(p, m) (full ? _mm256_loadu_ps(p) : _mm256_maskload_ps((p), (m)))
	__m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
	if (j->bias != NULL) {
		b0 = DW_LD(j->bias + c0, m0);
		b1 = DW_LD(j->bias + c0 + 8, m1);
	}
	__m256 a0[4], a1[4];
	for (int q = 0; q < 4; q++) {
		a0[q] = b0;
		a1[q] = b1;
	}
	for (int64_t kh = 0; kh < KH; kh++) {
		int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
		if (ih < 0 || ih >= H)
			continue;
		const float *xr = in_row(j, n, ih) + c0;
		const float *wr = j->w + kh * KW * C + c0;
		_Pragma("GCC unroll 5")
		for (int64_t kw = 0; kw < KW; kw++) {
			__m256 w0 = DW_LD(wr + kw * C, m0);
			__m256 w1 = DW_LD(wr + kw * C + 8, m1);
			int64_t iw0 = ow0 * sw - pw + kw * dw;
			/* a constant trip count, so that a0 and a1 stay in registers */
			_Pragma("GCC unroll 4")
			for (int q = 0; q < 4; q++) {
				int64_t iw = iw0 + q * sw;
				if (!inside && (q >= r || iw < 0 || iw >= W))
					continue;
				const float *xp = xr + iw * C;
				a0[q] = _mm256_fmadd_ps(DW_LD(xp, m0), w0, a0[q]);
				a1[q] = _mm256_fmadd_ps(DW_LD(xp + 8, m1), w1, a1[q]);
			}
		}
	}
#undef DW_LD
	_Pragma("GCC unroll 4")
	for (int q = 0; q < 4; q++) {
		if (q >= r)
			continue;
		float *yp = yr + (ow0 + q) * C + c0;
		if (full) {
			_mm256_storeu_ps(yp, a0[q]);
			_mm256_storeu_ps(yp + 8, a1[q]);
		} else {
			_mm256_maskstore_ps(yp, m0, a0[q]);
			_mm256_maskstore_ps(yp + 8, m1, a1[q]);
		}
	}
}

__attribute__((target("avx2,fma")))
static void
dw_row256(const struct nhwc *j, int64_t n, int64_t oh, float *yr)
{
	const struct ml_conv3 *v = j->v;
	int64_t W = v->in[2], OW = v->out[2];
	int64_t KW = v->k[2], sw = v->s[2], dw = v->d[2], pw = v->p[2];
	/* the common windows (3x3 and 5x5, stride 1 or 2, no dilation) as constants */
	int kind = 0;
	if (v->k[1] == KW && (KW == 3 || KW == 5) && v->d[1] == 1 && dw == 1 && (sw == 1 || sw == 2))
		kind = (KW == 3 ? 1 : 3) + (sw == 2);

	for (int64_t ow0 = 0; ow0 < OW; ow0 += 4) {
		int r = (int)ML_MIN(4, OW - ow0);
		/* all 4 pixels' taps inside the row: no checks in the tap loop */
		bool inside = r == 4 && ow0 * sw - pw >= 0 && (ow0 + 3) * sw - pw + (KW - 1) * dw < W;
		for (int64_t c0 = j->c0; c0 < j->c1; c0 += 16) {
			if (j->c1 - c0 < 16)
				dw_blk256(j, n, oh, yr, ow0, r, inside, c0, false, 0, 0);
			else if (!inside || kind == 0)
				dw_blk256(j, n, oh, yr, ow0, r, inside, c0, true, 0, 0);
			else if (kind == 1)
				dw_blk256(j, n, oh, yr, ow0, r, true, c0, true, 3, 1);
			else if (kind == 2)
				dw_blk256(j, n, oh, yr, ow0, r, true, c0, true, 3, 2);
			else if (kind == 3)
				dw_blk256(j, n, oh, yr, ow0, r, true, c0, true, 5, 1);
			else
				dw_blk256(j, n, oh, yr, ow0, r, true, c0, true, 5, 2);
		}
	}
}
#endif

/* dw_row: the portable row: per output pixel, a channel loop per tap. */
static void
dw_row(const struct nhwc *j, int64_t n, int64_t oh, float *yr)
{
	const struct ml_conv3 *v = j->v;
	int64_t C = v->cin, H = v->in[1], W = v->in[2], OW = v->out[2];
	int64_t KH = v->k[1], KW = v->k[2];

	for (int64_t ow = 0; ow < OW; ow++) {
		float *restrict yp = yr + ow * C;
		for (int64_t ch = j->c0; ch < j->c1; ch++)
			yp[ch] = j->bias != NULL ? j->bias[ch] : 0.0f;
		for (int64_t kh = 0; kh < KH; kh++) {
			int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
			if (ih < 0 || ih >= H)
				continue;
			for (int64_t kw = 0; kw < KW; kw++) {
				int64_t iw = ow * v->s[2] - v->p[2] + kw * v->d[2];
				if (iw < 0 || iw >= W)
					continue;
				const float *restrict xp = in_row(j, n, ih) + iw * C;
				const float *restrict wp = j->w + (kh * KW + kw) * C;
				for (int64_t ch = j->c0; ch < j->c1; ch++)
					yp[ch] += wp[ch] * xp[ch];
			}
		}
	}
}

/* conv_rows: output rows [b, e) (image by row) through j->row, each then its residual and activation */
static void
conv_rows(void *ctx, int64_t b, int64_t e)
{
	const struct nhwc *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t OH = v->out[1], len = v->out[2] * v->cout;

	for (int64_t row = b; row < e; row++) {
		float *yr = j->y + row * len;
		j->row(j, row / OH, row % OH, yr);
		if (!j->actreg)
			rowepi(j, yr, j->z != NULL ? j->z + row * len : NULL, len);
	}
}

/*
 * Group 1: im2col rows (output pixels) [b, e) of the chunk starting at
 * j->r0, each kH kW runs of C floats (zeros where the tap is outside).
 */
static void
im2col_rows(void *ctx, int64_t b, int64_t e)
{
	const struct nhwc *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t C = v->cin, H = v->in[1], W = v->in[2], OH = v->out[1], OW = v->out[2];
	int64_t KH = v->k[1], KW = v->k[2], K = KH * KW * C;

	for (int64_t p = b; p < e; p++) {
		int64_t q = j->r0 + p, ow = q % OW, oh = q / OW % OH, n = q / (OW * OH);
		float *dst = j->col + p * K;
		for (int64_t kh = 0; kh < KH; kh++) {
			int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
			for (int64_t kw = 0; kw < KW; kw++, dst += C) {
				int64_t iw = ow * v->s[2] - v->p[2] + kw * v->d[2];
				if (ih < 0 || ih >= H || iw < 0 || iw >= W)
					memset(dst, 0, sizeof(float) * (size_t)C);
				else
					memcpy(dst, j->x + ((n * H + ih) * W + iw) * C,
					       sizeof(float) * (size_t)C);
			}
		}
	}
}

/*
 * gemm_rows: Y rows [r0, r0 + m) = A [m, K] times W, through FusedMatMul's
 * kernel on a view of the node (its activation, clip bounds and packed_n
 * are the same attributes), else BLAS and one pass for the rest.
 */
static int
gemm_rows(struct ml_opctx *c, const float *a, int64_t r0, int64_t m, int64_t K, int64_t M)
{
	const struct ml_tval *w = c->in[1], *bias = ML_IN(c, 2), *z = ML_IN(c, 3);
	bool packed = ml_attr_int(c->node, "packed_n", 0) > 0;
	/*
	 * A few rows (the late stages' downsampling) in products of at most
	 * SMALL_ROWS, which FusedMatMul's kernel runs by streaming W's panels
	 * once each, where the tiled SGEMM would first copy W to align it.
	 */
	if ((packed || ml_cpu_wconst(c)) && m > SMALL_ROWS && m <= 4 * SMALL_ROWS) {
		for (int64_t i = 0; i < m; i += SMALL_ROWS)
			ML_TRY(gemm_rows(c, a + i * K, r0 + i, ML_MIN(SMALL_ROWS, m - i), K, M));
		return 0;
	}
	/* W's panels, packed once per session (an fp16 W only so) */
	const float *pan = packed || !ml_pgemm_ok() ? NULL : ml_cpu_wpanels(c, K, M, false);
	if (pan == NULL && w->dtype != ML_F32)
		return ml_opfail(c, ML_ENOMEM, "out of memory packing W");
	if (pan != NULL) {
		ml_cpu_fmm_panels(m, K, M, a, pan, bias != NULL ? bias->data : NULL,
				  z != NULL ? (const float *)z->data + r0 * M : NULL,
				  (float *)c->out[0]->data + r0 * M, ml_fused_act(c->node),
				  (float)ml_attr_float(c->node, "clip_min", -INFINITY),
				  (float)ml_attr_float(c->node, "clip_max", INFINITY));
		return 0;
	}
	struct ml_tval av = { .dtype = ML_F32, .rank = 2, .dims = { m, K }, .data = (void *)a };
	struct ml_tval bv = { .dtype = ML_F32, .rank = 2, .dims = { K, M }, .data = w->data };
	struct ml_tval zv = { .dtype = ML_F32, .rank = 2, .dims = { m, M } };
	struct ml_tval yv = { .dtype = ML_F32, .rank = 2, .dims = { m, M } };
	float *y = (float *)c->out[0]->data + r0 * M;
	yv.data = y;
	if (z != NULL)
		zv.data = (float *)z->data + r0 * M;
	struct ml_tval *ins[4] = { &av, packed ? (struct ml_tval *)w : &bv, (struct ml_tval *)bias,
				   z != NULL ? &zv : NULL };
	struct ml_tval *outs[1] = { &yv };
	struct ml_opctx c2 = *c;
	c2.in = ins;
	c2.n_in = 4;
	c2.out = outs;
	c2.n_out = 1;
	int rc = ml_cpu_fmatmul_fast(&c2);
	if (rc <= 0)
		return rc;
	float *tmp = NULL;
	const float *b = w->data;
	if (packed) {
		if ((tmp = ml_malloc(sizeof(float) * (size_t)(K * M) + 1)) == NULL)
			return ml_opfail(c, ML_ENOMEM, "out of memory unpacking W");
		ml_fused_unpack(w->data, K, M, tmp);
		b = tmp;
	}
	bool done = ml_sgemm(false, false, m, M, K, 1.0f, a, K, b, M, 0.0f, y, M);
	ml_free(tmp);
	if (!done)
		return ml_opfail(c, ML_ENOTSUP, "sizes exceed BLAS's range");
	ml_fused_tile_epi(y, m, M, M, bias != NULL ? bias->data : NULL,
			  z != NULL ? zv.data : NULL, ml_fused_act(c->node),
			  (float)ml_attr_float(c->node, "clip_min", -INFINITY),
			  (float)ml_attr_float(c->node, "clip_max", INFINITY));
	return 0;
}

/*
 * Few input channels (the RGB stems, 4 or fewer) with W packed in panels
 * of 32 outputs: direct, 6 output pixels by a panel at a time, each tap's
 * input value broadcast against the panel's row of W, with no im2col (its
 * rows of 27 floats cost more than the product: MobileNet's stem took 350
 * us that way, about 60 GFLOP/s). AVX-512 and AVX2 (ML_NHWC=avx2 forces
 * it); the im2col path serves the other CPUs (and ML_NHWC=0).
 */
#define FEW_C 4
#define FEW_PX 6

#ifdef HAVE_SIMD
__attribute__((target("avx512f")))
static void
few_row512(const struct nhwc *j, int64_t n, int64_t oh, float *yr)
{
	const struct ml_conv3 *v = j->v;
	int64_t C = v->cin, H = v->in[1], W = v->in[2], OW = v->out[2], M = v->cout;
	int64_t KH = v->k[1], KW = v->k[2], sw = v->s[2], dw = v->d[2], pw = v->p[2];
	int64_t K = KH * KW * C;

	for (int64_t ow0 = 0; ow0 < OW; ow0 += FEW_PX) {
		int r = (int)ML_MIN(FEW_PX, OW - ow0);
		bool inside = r == FEW_PX && ow0 * sw - pw >= 0 &&
			      (ow0 + FEW_PX - 1) * sw - pw + (KW - 1) * dw < W;
		for (int64_t c0 = 0; c0 < M; c0 += 32) {
			__mmask16 m0, m1;
			mask32(M - c0, &m0, &m1);
			const float *wp = j->w + c0 * K;	/* panel c0 / 32: K rows of 32 */
			__m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
			if (j->bias != NULL) {
				b0 = _mm512_maskz_loadu_ps(m0, j->bias + c0);
				b1 = _mm512_maskz_loadu_ps(m1, j->bias + c0 + 16);
			}
			__m512 a0[FEW_PX], a1[FEW_PX];
			for (int q = 0; q < FEW_PX; q++) {
				a0[q] = b0;
				a1[q] = b1;
			}
			for (int64_t kh = 0; kh < KH; kh++) {
				int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
				if (ih < 0 || ih >= H)
					continue;
				const float *xr = j->x + (n * H + ih) * W * C;
				for (int64_t kw = 0; kw < KW; kw++) {
					int64_t iw0 = ow0 * sw - pw + kw * dw;
					const float *wk = wp + (kh * KW + kw) * C * 32;
					for (int64_t ci = 0; ci < C; ci++) {
						__m512 w0 = _mm512_loadu_ps(wk + ci * 32);
						__m512 w1 = _mm512_loadu_ps(wk + ci * 32 + 16);
						_Pragma("GCC unroll 6")
						for (int q = 0; q < FEW_PX; q++) {
							int64_t iw = iw0 + q * sw;
							if (!inside && (q >= r || iw < 0 || iw >= W))
								continue;
							__m512 xv = _mm512_set1_ps(xr[iw * C + ci]);
							a0[q] = _mm512_fmadd_ps(xv, w0, a0[q]);
							a1[q] = _mm512_fmadd_ps(xv, w1, a1[q]);
						}
					}
				}
			}
			_Pragma("GCC unroll 6")
			for (int q = 0; q < FEW_PX; q++) {
				if (q >= r)
					continue;
				float *yp = yr + (ow0 + q) * M + c0;
				_mm512_mask_storeu_ps(yp, m0, a0[q]);
				_mm512_mask_storeu_ps(yp + 16, m1, a1[q]);
			}
		}
	}
}


/*
 * few_row256: few_row512 on AVX2: 6 output pixels by one 16-output half of
 * a panel at a time (12 ymm sums), the panel's rows 32 floats apart.
 */
/*
 * few_blk256: pixels [ow0, ow0 + r) of the row by outputs [c0, c0 + 16)
 * (rem valid); cc > 0: C, KH and KW (kc) and the stride across (sc) as
 * constants, every tap inside the row (callers pass literals, so the tap
 * loops unroll).
 */
__attribute__((target("avx2,fma"), always_inline))
static inline void
few_blk256(const struct nhwc *j, int64_t n, int64_t oh, float *yr, int64_t ow0, int r,
	   bool inside, int64_t c0, int cc, int kc, int sc)
{
	const struct ml_conv3 *v = j->v;
	int64_t H = v->in[1], W = v->in[2], M = v->cout, pw = v->p[2];
	int64_t C = cc > 0 ? cc : v->cin, KH = cc > 0 ? kc : v->k[1], KW = cc > 0 ? kc : v->k[2];
	int64_t sw = cc > 0 ? sc : v->s[2], dw = cc > 0 ? 1 : v->d[2];
	int64_t K = KH * KW * C, rem = ML_MIN(16, M - c0);
	/* panel c0 / 32 (K rows of 32), its half (c0 / 16) % 2 */
	const float *wp = j->w + c0 / 32 * 32 * K + c0 % 32;
	__m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
	if (j->bias != NULL) {
		float t[16] = { 0 };
		memcpy(t, j->bias + c0, sizeof(float) * (size_t)rem);
		b0 = _mm256_loadu_ps(t);
		b1 = _mm256_loadu_ps(t + 8);
	}
	__m256 a0[FEW_PX], a1[FEW_PX];
	for (int q = 0; q < FEW_PX; q++) {
		a0[q] = b0;
		a1[q] = b1;
	}
	for (int64_t kh = 0; kh < KH; kh++) {
		int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
		if (ih < 0 || ih >= H)
			continue;
		const float *xr = j->x + (n * H + ih) * W * C;
		_Pragma("GCC unroll 7")
		for (int64_t kw = 0; kw < KW; kw++) {
			int64_t iw0 = ow0 * sw - pw + kw * dw;
			const float *wk = wp + (kh * KW + kw) * C * 32;
			_Pragma("GCC unroll 4")
			for (int64_t ci = 0; ci < C; ci++) {
				__m256 w0 = _mm256_loadu_ps(wk + ci * 32);
				__m256 w1 = _mm256_loadu_ps(wk + ci * 32 + 8);
				_Pragma("GCC unroll 6")
				for (int q = 0; q < FEW_PX; q++) {
					int64_t iw = iw0 + q * sw;
					if (!inside && (q >= r || iw < 0 || iw >= W))
						continue;
					__m256 xv = _mm256_broadcast_ss(xr + iw * C + ci);
					a0[q] = _mm256_fmadd_ps(xv, w0, a0[q]);
					a1[q] = _mm256_fmadd_ps(xv, w1, a1[q]);
				}
			}
		}
	}
	_Pragma("GCC unroll 6")
	for (int q = 0; q < FEW_PX; q++) {
		if (q >= r)
			continue;
		float *yp = yr + (ow0 + q) * M + c0;
		if (rem == 16) {
			_mm256_storeu_ps(yp, a0[q]);
			_mm256_storeu_ps(yp + 8, a1[q]);
		} else {
			float t[16];
			_mm256_storeu_ps(t, a0[q]);
			_mm256_storeu_ps(t + 8, a1[q]);
			memcpy(yp, t, sizeof(float) * (size_t)rem);
		}
	}
}

__attribute__((target("avx2,fma")))
static void
few_row256(const struct nhwc *j, int64_t n, int64_t oh, float *yr)
{
	const struct ml_conv3 *v = j->v;
	int64_t W = v->in[2], OW = v->out[2], M = v->cout;
	int64_t KW = v->k[2], sw = v->s[2], dw = v->d[2], pw = v->p[2];
	/* RGB 3x3 stems at stride 2 (MobileNet's, EfficientNet's) with constant loops */
	bool rgb3 = v->cin == 3 && KW == 3 && v->k[1] == 3 && dw == 1 && v->d[1] == 1 && sw == 2;

	for (int64_t ow0 = 0; ow0 < OW; ow0 += FEW_PX) {
		int r = (int)ML_MIN(FEW_PX, OW - ow0);
		bool inside = r == FEW_PX && ow0 * sw - pw >= 0 &&
			      (ow0 + FEW_PX - 1) * sw - pw + (KW - 1) * dw < W;
		for (int64_t c0 = 0; c0 < M; c0 += 16) {
			if (rgb3 && inside)
				few_blk256(j, n, oh, yr, ow0, r, true, c0, 3, 3, 2);
			else
				few_blk256(j, n, oh, yr, ow0, r, inside, c0, 0, 0, 0);
		}
	}
}
#endif

static int
conv_dense(struct ml_opctx *c, const struct ml_conv3 *v, struct nhwc *j)
{
	int64_t K = v->ksz * v->cin, M = v->cout;
	int64_t rows = v->n * v->outsz;
	bool pointwise = v->ksz == 1;

	for (int i = 1; i < 3; i++)
		pointwise &= v->s[i] == 1 && v->p[i] == 0 && v->pe[i] == 0;
	if (pointwise)
		return gemm_rows(c, j->x, 0, rows, K, M);
#ifdef HAVE_SIMD
	const float *pan = NULL;
	if (j->level > 0 && v->cin <= FEW_C)
		pan = ml_attr_int(c->node, "packed_n", 0) == M ? j->w : ml_cpu_wpanels(c, K, M, false);
	if (pan != NULL) {
		int64_t per = v->out[2] * M * K;
		j->w = pan;
		j->row = j->level == 2 ? few_row512 : few_row256;
		ml_parallel_for(v->n * v->out[1], ML_MAX(1, ITEM_WORK / ML_MAX(per, 1)), conv_rows, j);
		return 0;
	}
#endif
	int64_t chunk = ML_MAX(1, ML_MIN(rows, COL_MAX / ML_MAX(K, 1)));
	j->col = ml_cpu_scratch(0, sizeof(float) * (size_t)(chunk * K));
	if (j->col == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate %lld bytes for im2col",
				 (long long)(chunk * K * 4));
	for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
		int64_t m = ML_MIN(chunk, rows - r0);
		j->r0 = r0;
		ml_parallel_for(m, ML_MAX(1, 4096 / K), im2col_rows, j);
		ML_TRY(gemm_rows(c, j->col, r0, m, K, M));
	}
	return 0;
}

/* Direct loops for any group: W [kH, kW, C / group, M]. */
static void
direct_rows(void *ctx, int64_t b, int64_t e)
{
	const struct nhwc *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t C = v->cin, M = v->cout, H = v->in[1], W = v->in[2];
	int64_t OH = v->out[1], OW = v->out[2], KW = v->k[2];

	for (int64_t row = b; row < e; row++) {
		int64_t n = row / OH, oh = row % OH;
		float *yr = j->y + row * OW * M;
		for (int64_t ow = 0; ow < OW; ow++)
			for (int64_t m = 0; m < M; m++) {
				int64_t g = m / v->mg;
				float s = j->bias != NULL ? j->bias[m] : 0.0f;
				for (int64_t kh = 0; kh < v->k[1]; kh++) {
					int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
					if (ih < 0 || ih >= H)
						continue;
					for (int64_t kw = 0; kw < KW; kw++) {
						int64_t iw = ow * v->s[2] - v->p[2] + kw * v->d[2];
						if (iw < 0 || iw >= W)
							continue;
						const float *xp = j->x + ((n * H + ih) * W + iw) * C +
								  g * v->cg;
						const float *wp = j->w + (kh * KW + kw) * v->cg * M + m;
						for (int64_t ci = 0; ci < v->cg; ci++)
							s += xp[ci] * wp[ci * M];
					}
				}
				yr[ow * M + m] = s;
			}
		rowepi(j, yr, j->z != NULL ? j->z + row * OW * M : NULL, OW * M);
	}
}

/*
 * A depthwise convolution with a pointwise prologue (mlopt's fuse-expand,
 * inputs 3 and 4, ML_NHWC_WP and ML_NHWC_BP): items are runs of output rows, and each keeps a ring of
 * the input rows its window spans, computing a row (the row's pixels' Cx
 * channels times Wp, plus Bp, then pre_activation) when an output row of
 * the run first needs it; so the C-channel input (MobileNet-V2's
 * 112x112x96 after the expansion) is never written out whole, and the
 * taps read it from L2. A run's first rows may compute (KH - 1) input rows
 * its neighbour computes too. Windows taller than PRE_RING rows compute the
 * whole input first (the plain path, no saving). On AVX-512 a row is 4
 * pixels by up to 96 channels at a time, Wp read as it is and Bp and a
 * Relu or Clip applied in registers (pre_row512: MobileNet-V2's first
 * expansion 17% faster than through the SGEMM's panels of 32 and a second
 * pass); elsewhere the packed SGEMM's panel kernel, then the epilogue.
 */
#define PRE_RING 16

struct pre {
	const struct nhwc *j;
	const float *x0, *wp, *bp, *pan;	/* X [N, H, W, Cx], Wp [Cx, C], Bp, Wp in panels */
	int64_t cx, ringsz;
	int64_t nruns, ngroups, nblk;	/* items: runs of output rows by groups of 16 channels */
	float *rings;
	int act;
	float lo, hi;
	int level;			/* ml_cpu_fma_level("ML_NHWC"): 2 pre_row512 */
};

#ifdef HAVE_SIMD
/*
 * pre_blk512: pixels [w0, w0 + r) (r <= 4) of an input row x (Cx channels a
 * pixel) times Wp's columns [c0, c0 + 16 NV) (masked past c1), plus Bp,
 * then a Relu or Clip in registers (act, else none here), into dst [W, C]:
 * 4 pixels by up to 96 channels in 24 zmm accumulators, Wp's rows read in
 * place (Cx of them, L1), each of a pixel's Cx values broadcast once for
 * NV multiply-adds.
 */
__attribute__((target("avx512f"), always_inline))
static inline void
pre_blk512(const struct pre *p, const float *x, float *dst, int64_t w0, int r, int64_t c0,
	   int64_t c1, int act, const int NV)
{
	int64_t C = p->j->v->cin, cx = p->cx;
	__mmask16 m[6];
	__m512 a0[6], a1[6], a2[6], a3[6];
	const float *xq[4];

	_Pragma("GCC unroll 6")
	for (int u = 0; u < NV; u++) {
		int64_t left = c1 - c0 - 16 * u;
		m[u] = (__mmask16)(left >= 16 ? 0xffff : left <= 0 ? 0 : (1u << left) - 1);
		__m512 b = p->bp != NULL ? _mm512_maskz_loadu_ps(m[u], p->bp + c0 + 16 * u) :
					   _mm512_setzero_ps();
		a0[u] = a1[u] = a2[u] = a3[u] = b;
	}
	/* pixels past r read the last valid one's values (their sums are not stored) */
	for (int q = 0; q < 4; q++)
		xq[q] = x + (w0 + (q < r ? q : r - 1)) * cx;
	for (int64_t k = 0; k < cx; k++) {
		const float *wr = p->wp + k * C + c0;
		__m512 b[6];
		_Pragma("GCC unroll 6")
		for (int u = 0; u < NV; u++)
			b[u] = _mm512_maskz_loadu_ps(m[u], wr + 16 * u);
		__m512 x0 = _mm512_set1_ps(xq[0][k]), x1 = _mm512_set1_ps(xq[1][k]);
		__m512 x2 = _mm512_set1_ps(xq[2][k]), x3 = _mm512_set1_ps(xq[3][k]);
		_Pragma("GCC unroll 6")
		for (int u = 0; u < NV; u++) {
			a0[u] = _mm512_fmadd_ps(x0, b[u], a0[u]);
			a1[u] = _mm512_fmadd_ps(x1, b[u], a1[u]);
			a2[u] = _mm512_fmadd_ps(x2, b[u], a2[u]);
			a3[u] = _mm512_fmadd_ps(x3, b[u], a3[u]);
		}
	}
	__m512 lo = _mm512_set1_ps(p->lo), hi = _mm512_set1_ps(p->hi);
	_Pragma("GCC unroll 4")
	for (int q = 0; q < 4; q++) {
		if (q >= r)
			continue;
		float *d = dst + (w0 + q) * C + c0;
		_Pragma("GCC unroll 6")
		for (int u = 0; u < NV; u++) {
			__m512 v = q == 0 ? a0[u] : q == 1 ? a1[u] : q == 2 ? a2[u] : a3[u];
			if (act == ML_ACT_RELU || act == ML_ACT_CLIP)
				v = act512(v, act, lo, hi);
			_mm512_mask_storeu_ps(d + 16 * u, m[u], v);
		}
	}
}

/* PRE_BLK512(NV): pre_blk512 with NV vectors of channels, as a function */
#define PRE_BLK512(NV)								\
__attribute__((target("avx512f"))) static void					\
pre_blk512_##NV(const struct pre *p, const float *x, float *dst, int64_t w0, int r,	\
		int64_t c0, int64_t c1, int act)				\
{										\
	pre_blk512(p, x, dst, w0, r, c0, c1, act, NV);				\
}
PRE_BLK512(1)
PRE_BLK512(2)
PRE_BLK512(3)
PRE_BLK512(4)
PRE_BLK512(5)
PRE_BLK512(6)

typedef void (*pre_blk_fn)(const struct pre *, const float *, float *, int64_t, int, int64_t,
			   int64_t, int);

/*
 * pre_row512: channels [c0, c1) of the W pixels of x into dst, in runs of
 * up to 96 channels by 4 pixels; Relu and Clip in registers, the other
 * activations over the row after (1: they remain to apply, 0: done)
 */
__attribute__((target("avx512f")))
static int
pre_row512(const struct pre *p, const float *x, float *dst, int64_t c0, int64_t c1)
{
	static const pre_blk_fn fn[7] = { NULL, pre_blk512_1, pre_blk512_2, pre_blk512_3,
					   pre_blk512_4, pre_blk512_5, pre_blk512_6 };
	int64_t W = p->j->v->in[2];
	bool regs = p->act == ML_ACT_NONE || p->act == ML_ACT_RELU || p->act == ML_ACT_CLIP;

	for (int64_t cb = c0; cb < c1; cb += 96) {
		int64_t ce = ML_MIN(c1, cb + 96);
		int nv = (int)((ce - cb + 15) / 16);
		for (int64_t w = 0; w < W; w += 4)
			fn[nv](p, x, dst, w, (int)ML_MIN(4, W - w), cb, ce,
			       regs ? p->act : ML_ACT_NONE);
	}
	return regs ? 0 : 1;
}
#endif

/* pre_row: channels [c0, c1) of input row ih of image n into dst [W, C] */
static void
pre_row(const struct pre *p, int64_t n, int64_t ih, float *dst, int64_t c0, int64_t c1)
{
	const struct ml_conv3 *v = p->j->v;
	int64_t W = v->in[2], C = v->cin, cx = p->cx;
	const float *x = p->x0 + (n * v->in[1] + ih) * W * cx;

#ifdef HAVE_SIMD
	/* AVX-512: Wp as it is, the bias and a Relu or Clip in registers */
	if (p->level == 2) {
		if (pre_row512(p, x, dst, c0, c1) != 0)
			ml_fused_tile_epi(dst + c0, W, c1 - c0, C, NULL, NULL, p->act, p->lo,
					  p->hi);
		return;
	}
#endif
	if (p->pan != NULL) {
		/* c0 and c1 are multiples of 16: a run may start in a panel's second half */
		for (int64_t c = c0; c < c1;) {
			int64_t w = ML_MIN(ML_PG_NR - c % ML_PG_NR, c1 - c);
			ml_pgemm_panel(W, cx, x, cx, p->pan + c / ML_PG_NR * ML_PG_NR * cx + c % ML_PG_NR,
				       dst + c, C, w, false);
			c += w;
		}
	} else {
		for (int64_t w = 0; w < W; w++) {
			float *restrict d = dst + w * C;
			for (int64_t ch = c0; ch < c1; ch++)
				d[ch] = 0.0f;
			for (int64_t k = 0; k < cx; k++) {
				float a = x[w * cx + k];
				const float *restrict wr = p->wp + k * C;
				for (int64_t ch = c0; ch < c1; ch++)
					d[ch] += a * wr[ch];
			}
		}
	}
	ml_fused_tile_epi(dst + c0, W, c1 - c0, C, p->bp != NULL ? p->bp + c0 : NULL, NULL, p->act,
			  p->lo, p->hi);
}

/* pre_all: input rows [b, e) (image by row) of the whole input, into p->rings */
static void
pre_all(void *ctx, int64_t b, int64_t e)
{
	const struct pre *p = ctx;
	int64_t H = p->j->v->in[1], len = p->j->v->in[2] * p->j->v->cin;
	for (int64_t r = b; r < e; r++)
		pre_row(p, r / H, r % H, p->rings + r * len, 0, p->j->v->cin);
}

/* pre_items: items [b, e), each a run of output rows by a group of channels, with its ring */
static void
pre_items(void *ctx, int64_t b, int64_t e)
{
	const struct pre *p = ctx;
	const struct ml_conv3 *v = p->j->v;
	int64_t OH = v->out[1], H = v->in[1], OW = v->out[2], C = v->cout, rows = v->n * OH;
	int64_t tag[PRE_RING];

	for (int64_t it = b; it < e; it++) {
		int64_t run = it / p->ngroups, g = it % p->ngroups;
		struct nhwc j = *p->j;
		j.ring = p->rings + it * p->ringsz;
		j.c0 = g * p->nblk / p->ngroups * 16;
		j.c1 = ML_MIN(C, (g + 1) * p->nblk / p->ngroups * 16);
		for (int64_t s = 0; s < j.nring; s++)
			tag[s] = -1;
		for (int64_t row = run * rows / p->nruns; row < (run + 1) * rows / p->nruns; row++) {
			int64_t n = row / OH, oh = row % OH;
			for (int64_t kh = 0; kh < v->k[1]; kh++) {
				int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
				if (ih < 0 || ih >= H || tag[ih % j.nring] == n * H + ih)
					continue;
				pre_row(p, n, ih, j.ring + ih % j.nring * v->in[2] * C, j.c0, j.c1);
				tag[ih % j.nring] = n * H + ih;
			}
			float *yr = j.y + row * OW * C;
			j.row(&j, n, oh, yr);
			if (j.z != NULL || j.act != ML_ACT_NONE)
				ml_fused_tile_epi(yr + j.c0, OW, j.c1 - j.c0, C, NULL,
						  j.z != NULL ? j.z + row * OW * C + j.c0 : NULL, j.act,
						  j.lo, j.hi);
		}
	}
}

/* conv_pre: the depthwise convolution j of a node with a prologue (Wp, Bp) */
static int
conv_pre(struct ml_opctx *c, const struct ml_conv3 *v, struct nhwc *j)
{
	const struct ml_tval *wp = c->in[ML_NHWC_WP], *bp = ML_IN(c, ML_NHWC_BP);
	int64_t cx = wp->dims[2], C = v->cin, H = v->in[1], W = v->in[2];
	struct pre p = { .j = j, .x0 = c->in[0]->data, .wp = wp->data,
			 .bp = bp != NULL ? bp->data : NULL, .cx = cx,
			 .act = ml_fused_pre_act(c->node) };
	p.lo = (float)ml_attr_float(c->node, "pre_clip_min", -INFINITY);
	p.hi = (float)ml_attr_float(c->node, "pre_clip_max", INFINITY);
	if (c->in[0]->dims[3] != cx || wp->dims[3] != C || (bp != NULL && ml_tval_numel(bp) != C))
		return ml_opfail(c, ML_EINVAL, "the prologue needs X [N, H, W, Cx], Wp [1, 1, Cx, C] "
				 "and Bp [C]");
	/* AVX-512 (and the packed SGEMM not turned off): pre_row512; else Wp in the SGEMM's panels */
	p.level = ml_pgemm_ok() ? j->level : 0;
	if (ml_pgemm_ok() && p.level != 2) {
		float *pan = ml_cpu_scratch(1, sizeof(float) * (size_t)ml_pgemm_packed_len(cx, C));
		if (pan == NULL)
			return ml_opfail(c, ML_ENOMEM, "out of memory for the prologue's weights");
		ml_cpu_pack_panels(p.wp, cx, C, pan);
		p.pan = pan;
	}
	int64_t rows = v->n * v->out[1], per = v->out[2] * v->cout * v->ksz * v->cg;
	j->nring = (v->k[1] - 1) * v->d[1] + 1;
	if (j->nring > PRE_RING) {
		/* a tall window: the whole input first, then the plain rows */
		p.rings = ml_cpu_scratch(0, sizeof(float) * (size_t)(v->n * H * W * C));
		if (p.rings == NULL)
			return ml_opfail(c, ML_ENOMEM, "out of memory for the convolution's input");
		ml_parallel_for(v->n * H, ML_MAX(1, ITEM_WORK / ML_MAX(W * C * cx, 1)), pre_all, &p);
		j->x = p.rings;
		ml_parallel_for(rows, ML_MAX(1, ITEM_WORK / ML_MAX(per, 1)), conv_rows, j);
		return 0;
	}
	/*
	 * Items: runs of output rows, twice the threads where the rows allow
	 * (each run's first row computes up to nring - s input rows the run
	 * before computed too: runs long enough to keep that under a quarter),
	 * a multiple of the threads. Too few rows for a run per thread: groups
	 * of 16 channels as well (no work twice, but each pixel's channels then
	 * take several epilogue calls: 1.4 times slower on EfficientNet-B0's
	 * 56x56 blocks than runs alone).
	 */
	int64_t nt = ml_get_threads(), s = v->s[1], halo = ML_MAX(j->nring - s, 0);
	p.nblk = (C + 15) / 16;
	p.nruns = halo == 0 ? 2 * nt : ML_MAX(1, ML_MIN(2 * nt, rows * s / (4 * halo)));
	p.nruns = ML_MIN(p.nruns, rows);
	p.ngroups = 1;
	if (p.nruns >= nt)
		p.nruns = p.nruns / nt * nt;
	else
		p.ngroups = ML_MIN(p.nblk, (nt + p.nruns - 1) / p.nruns);
	p.ringsz = j->nring * W * C;
	p.rings = ml_cpu_scratch(0, sizeof(float) * (size_t)(p.nruns * p.ngroups * p.ringsz));
	if (p.rings == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory for the prologue's rows");
	ml_parallel_for(p.nruns * p.ngroups, 1, pre_items, &p);
	return 0;
}

int
ml_cpu_conv_nhwc(struct ml_opctx *c)
{
	struct ml_opctx nc;
	struct ml_node node;
	struct ml_tval *ins[3], xv, wv;
	struct ml_conv3 v;
	bool known;

	/*
	 * an fp16 or bf16 weight (mlquant --dtype fp16, bf16): one group's
	 * widened as it is packed into the SGEMM's panels, once (gemm_rows, the
	 * stems), unless a bf16 kernel takes it (bf16.c: the pointwise ones on
	 * AMX); others converted to f32 once (bf16.c), whose f32 copy the
	 * kernel would pack again on every run
	 */
	enum ml_dtype wdt = c->in[1]->dtype;
	bool half = (wdt == ML_F16 || wdt == ML_BF16) && ml_attr_int(c->node, "group", 1) == 1 &&
		    ml_attr_int(c->node, "packed_n", 0) <= 0 && ml_cpu_wconst(c) && ml_pgemm_ok();
	int rc = !half ? ml_cpu_bf16_run(c) : wdt == ML_BF16 ? ml_cpu_bf16_native(c) : 1;
	if (rc <= 0)
		return rc;

	for (int i = 0; i < c->n_in; i++)
		if (c->in[i] != NULL && c->in[i]->dtype != ML_F32 && !(half && i == 1))
			return ml_opfail(c, ML_ENOTSUP, "ConvNHWC takes f32");
	ML_TRY(ml_conv_nhwc_view(c, &nc, &node, ins, &xv, &wv, &known));
	ML_TRY(ml_cpu_conv3(&nc, &v));
	bool pre = ml_conv_nhwc_pre(c->node);
	const struct ml_tval *b = ML_IN(c, 2), *z = pre ? NULL : ML_IN(c, 3), *y = c->out[0];
	if (v.in[0] != 1 || v.k[0] != 1 || y->rank != 4 ||
	    (b != NULL && ml_tval_numel(b) != v.cout) ||
	    (z != NULL && ml_tval_numel(z) != ml_tval_numel(y)))
		return ml_opfail(c, ML_EINVAL, "ConvNHWC takes 2-D windows, a bias of M and Z of Y's shape");
	struct nhwc j = { .v = &v, .x = c->in[0]->data, .w = c->in[1]->data,
			  .bias = b != NULL ? b->data : NULL, .z = z != NULL ? z->data : NULL,
			  .y = y->data, .act = ml_fused_act(c->node),
			  .level = ml_cpu_fma_level("ML_NHWC"), .c1 = v.cout };
	j.lo = (float)ml_attr_float(c->node, "clip_min", -INFINITY);
	j.hi = (float)ml_attr_float(c->node, "clip_max", INFINITY);
	if (v.n * v.outsz == 0 || v.cout == 0)
		return 0;
	int64_t rows = v.n * v.out[1], per = v.out[2] * v.cout * v.ksz * v.cg;
	if (pre && (v.cg != 1 || v.mg != 1))
		return ml_opfail(c, ML_EINVAL, "a prologue needs a depthwise convolution");
	if (v.group == 1 && !pre)
		return conv_dense(c, &v, &j);
	if (v.cg == 1 && v.mg == 1) {
		j.row = dw_row;
#ifdef HAVE_SIMD
		if (j.level == 2)
			j.row = dw_row512;
		else if (j.level == 1)
			j.row = dw_row256;
#endif
		if (pre)
			return conv_pre(c, &v, &j);
		/* the Relu or Clip of a depthwise row without residual in dw_row512's registers */
		j.actreg = j.row != dw_row && j.level == 2 && j.z == NULL &&
			   (j.act == ML_ACT_RELU || j.act == ML_ACT_CLIP);
		ml_parallel_for(rows, ML_MAX(1, ITEM_WORK / ML_MAX(per, 1)), conv_rows, &j);
		return 0;
	}
	ml_parallel_for(rows, ML_MAX(1, ITEM_WORK / ML_MAX(per, 1)), direct_rows, &j);
	return 0;
}
