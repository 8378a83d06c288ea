/*
 * nn_direct.c: f32 2-D convolution with few input channels (the first
 * layer of an image network: 3 channels, 7x7 or 3x3, stride 2) computed
 * directly, without im2col. Its K is 27 to 147, too short for a GEMM to
 * pay back the column matrix (147 rows of the whole output plane, written
 * and read again), and a stride-2 im2col gathers every other element.
 *
 * The input is first copied whole into rows zero-padded and split by
 * stride phase (phase ph holds padded columns ph, ph + s, ...), so that
 * the taps of a window row read contiguous floats for 16 consecutive
 * outputs (rows_all, by bands of rows over the pool, so that each thread
 * mostly reads what it wrote). Work items are output rows of one image,
 * whose windows read those rows where they lie. (Copying each item's
 * input rows for it instead, as inputs past P_MAX still do, copied a 7x7
 * stride-2 window's rows three and a half times: 15% of ResNet-18's first
 * layer, 808 -> 719 us on 2 threads with the copy done once.) A block of
 * 8 output channels by 32 output columns then sums all cin * KH * KW taps
 * in registers (the weights packed per block so that each tap's 8 values
 * are adjacent and broadcast from memory) and stores once, bias
 * included; on AVX-512 the blocks are 48 columns wide where the row allows
 * (block512: 24 zmm accumulators, a third fewer loads a multiply-add than
 * 32 columns). For FusedConv
 * (struct ml_conv_epi) the residual and the activation are applied to
 * the block as it is stored, while it is in L1, instead of in another
 * pass over the output: by the SIMD kernels on their registers for Relu
 * and Clip (a separate pass over each block cost SqueezeNet's first layer
 * a third of its time), by ml_fused_tile_epi for the others.
 *
 * The AVX-512 kernel or, without AVX-512, the AVX2 one (a row in blocks
 * of 24 columns, each in halves of 4 channels, 12 ymm accumulators; the
 * last columns in quarters of 4 channels by 16) is picked at run time;
 * the portable kernel is the same loop nest in plain C.
 * ML_CONV_DIRECT=avx2 forces the AVX2 kernel, ML_CONV_DIRECT=c the
 * portable one, ML_CONV_DIRECT=rows the copies per output row that inputs
 * past P_MAX take, ML_CONV_DIRECT=0 turns the path off (im2col).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <stdatomic.h>

#include "cpu/nn.h"
#include "ops/fused.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_AVX512 1
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define ML_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ML_CLONES
#endif

#define OCB 8			/* output channels per block */
#define OWB 32			/* output columns per block */
#define DIRECT_MAX_CIN 4	/* the most input channels this path takes */
#define DIRECT_MAX_K 11		/* the widest window */
#define DIRECT_MAX_S 4		/* the largest stride */
#define P_MAX ((int64_t)1 << 23)	/* the most floats of the input split by phase (32 MB) */

/*
 * direct_env: ML_CONV_DIRECT read once: the kernel level (0 off, 1 the
 * portable kernel, 2 AVX2, 3 AVX-512) and, by 4, whether it says rows
 * (each output row's input rows copied anew, as past P_MAX).
 */
static int
direct_env(void)
{
	/* -1 until known; racing first callers compute the same value */
	static atomic_int env = -1;
	int v = atomic_load_explicit(&env, memory_order_relaxed);

	if (v < 0) {
		const char *e = getenv("ML_CONV_DIRECT");
		/* ML_CONV_DIRECT=avx2 forces the AVX2 kernel (ml_cpu_fma_level reads it) */
		v = 1;
#ifdef HAVE_AVX512
		v = ml_cpu_fma_level("ML_CONV_DIRECT") + 1;
#endif
		if (e != NULL && strcmp(e, "c") == 0)
			v = 1;
		if (e != NULL && strcmp(e, "0") == 0)
			v = 0;
		if (e != NULL && strcmp(e, "rows") == 0)
			v |= 4;
		atomic_store_explicit(&env, v, memory_order_relaxed);
	}
	return v;
}

static int
direct_level(void)
{
	return direct_env() & 3;
}

static bool
rows_forced(void)
{
	return (direct_env() & 4) != 0;
}

bool
ml_direct_ok(const struct ml_conv3 *v)
{
	return direct_level() > 0 && v->group == 1 && v->cin >= 1 &&
	       v->cin <= DIRECT_MAX_CIN && v->cout >= OCB / 2 && v->in[0] == 1 && v->k[0] == 1 &&
	       v->out[0] == 1 && v->p[0] == 0 && v->d[1] == 1 && v->d[2] == 1 &&
	       v->k[1] <= DIRECT_MAX_K && v->k[2] <= DIRECT_MAX_K && v->s[1] >= 1 &&
	       v->s[1] <= DIRECT_MAX_S && v->s[2] >= 1 && v->s[2] <= DIRECT_MAX_S &&
	       v->p[1] >= 0 && v->p[2] >= 0 && v->out[2] >= 8;
}

struct djob {
	const struct ml_conv3 *v;
	const float *x, *wp, *bias;	/* wp: [cout / OCB blocks][cin * KH * KW][OCB] */
	const float *z;			/* FusedConv's residual (y's layout), or NULL */
	float *y;
	int act;			/* FusedConv's activation (ML_ACT_*), or ML_ACT_NONE */
	float lo, hi;			/* Clip's bounds */
	int64_t TW;			/* floats per phase row */
	int64_t rs, cs;			/* floats from a window row to the next, a channel's to the next */
	float *P;			/* every image's rows split by phase (rows_all), or NULL */
	int64_t Hp;			/* the rows of a channel in P */
	int64_t nob;			/* blocks of output channels */
	int64_t koff[DIRECT_MAX_K];	/* tap kw's offset in a row: (kw % s) * TW + kw / s */
	int level;
	atomic_int nomem;
	/* bf16 (ml_direct_conv_bf16): rows of bf16 pairs [n][cin][Hp][TW] and paired weights */
	const uint32_t *P2, *wp2;
};

#ifdef HAVE_AVX512
/* ld16_row: the 16 floats of a row W wide from column i0 on, zeros outside [0, W) */
__attribute__((target("avx512f"))) static inline __m512
ld16_row(const float *xr, int64_t W, int64_t i0)
{
	if (i0 >= W || i0 + 16 <= 0)
		return _mm512_setzero_ps();
	uint32_t m = 0xffff;
	if (i0 + 16 > W)
		m >>= i0 + 16 - W;
	if (i0 >= 0)
		return _mm512_maskz_loadu_ps((__mmask16)m, xr + i0);
	/* lanes -i0.. take xr[0], xr[1], ... in order: the load starts inside the row */
	return _mm512_maskz_expandloadu_ps((__mmask16)(m & (0xffffu << -i0)), xr);
}

/*
 * phase2_512: phase_row's two phases of stride 2 from the same loads, 16
 * columns of each at a time (the scalar loop gathered every other float:
 * a tenth of SqueezeNet's first layer).
 */
__attribute__((target("avx512f"))) static void
phase2_512(const float *xr, int64_t W, int64_t pl, int64_t TW, float *d0, float *d1)
{
	const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
					    2, 0);
	const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
	for (int64_t t = 0; t < TW; t += 16) {
		__mmask16 sm = (__mmask16)(TW - t >= 16 ? 0xffff : (1u << (TW - t)) - 1);
		__m512 a = ld16_row(xr, W, 2 * t - pl), b = ld16_row(xr, W, 2 * t - pl + 16);
		_mm512_mask_storeu_ps(d0 + t, sm, _mm512_permutex2var_ps(a, ev, b));
		_mm512_mask_storeu_ps(d1 + t, sm, _mm512_permutex2var_ps(a, od, b));
	}
}
#endif

#ifdef HAVE_AVX512
/*
 * phase2_avx2: phase2_512 on AVX2: 8 columns of each phase from two loads
 * (their even and odd elements by two shuffles, put in order by one lane
 * permute each) where all 16 lie inside the row, the edges one by one.
 */
__attribute__((target("avx2"))) static void
phase2_avx2(const float *xr, int64_t W, int64_t pl, int64_t TW, float *d0, float *d1)
{
	for (int64_t t = 0; t < TW;) {
		int64_t c = 2 * t - pl;
		if (c >= 0 && c + 16 <= W && t + 8 <= TW) {
			__m256 a = _mm256_loadu_ps(xr + c), b = _mm256_loadu_ps(xr + c + 8);
			__m256d e = _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
			__m256d o = _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
			_mm256_storeu_ps(d0 + t, _mm256_castpd_ps(_mm256_permute4x64_pd(e, _MM_SHUFFLE(3, 1, 2, 0))));
			_mm256_storeu_ps(d1 + t, _mm256_castpd_ps(_mm256_permute4x64_pd(o, _MM_SHUFFLE(3, 1, 2, 0))));
			t += 8;
			continue;
		}
		d0[t] = c >= 0 && c < W ? xr[c] : 0.0f;
		d1[t] = c + 1 >= 0 && c + 1 < W ? xr[c + 1] : 0.0f;
		t++;
	}
}
#endif

/*
 * phase_row: input row ih of channel ci of image n (zeros outside the
 * input) into d, split by phase: d[ph * TW + t] = padded column t * s + ph.
 */
static void
phase_row(const struct djob *j, int64_t n, int64_t ci, int64_t ih, float *d0)
{
	const struct ml_conv3 *v = j->v;
	int64_t H = v->in[1], W = v->in[2], s = v->s[2], TW = j->TW;
	const float *xr = j->x + ((n * v->cin + ci) * H + ih) * W;

#ifdef HAVE_AVX512
	if (s == 2 && j->level == 3 && ih >= 0 && ih < H) {
		phase2_512(xr, W, v->p[2], TW, d0, d0 + TW);
		return;
	}
	if (s == 2 && j->level == 2 && ih >= 0 && ih < H && v->p[2] >= 0) {
		phase2_avx2(xr, W, v->p[2], TW, d0, d0 + TW);
		return;
	}
#endif
	for (int64_t ph = 0; ph < s; ph++) {
		float *d = d0 + ph * TW;
		if (ih < 0 || ih >= H) {
			memset(d, 0, sizeof(float) * (size_t)TW);
			continue;
		}
		/* t * s + ph - pl in [0, W) for t in [lo, hi) */
		int64_t lo, hi;
		ml_valid_range(ph - v->p[2], s, W, TW, &lo, &hi);
		for (int64_t t = 0; t < lo; t++)
			d[t] = 0.0f;
		if (s == 1) {
			memcpy(d + lo, xr + lo + ph - v->p[2], sizeof(float) * (size_t)(hi - lo));
		} else {
			for (int64_t t = lo; t < hi; t++)
				d[t] = xr[t * s + ph - v->p[2]];
		}
		for (int64_t t = hi; t < TW; t++)
			d[t] = 0.0f;
	}
}

/*
 * rows_for: the input rows output row oh of image n reads, into rows:
 * rows[(ci * KH + kh) * rs + ph * TW + t] = padded column t * s + ph of
 * input row oh * sh - pt + kh of channel ci.
 */
static void
rows_for(const struct djob *j, int64_t n, int64_t oh, float *rows)
{
	const struct ml_conv3 *v = j->v;

	for (int64_t ci = 0; ci < v->cin; ci++)
		for (int64_t kh = 0; kh < v->k[1]; kh++)
			phase_row(j, n, ci, oh * v->s[1] - v->p[1] + kh, rows + ci * j->cs + kh * j->rs);
}

/*
 * rows_all: rows [b, e) (image it / Hp, row it % Hp of every channel) of
 * P, where row r of channel ci holds input row r - pt split by phase; an
 * output row's windows then read P where it lies (j->cs = Hp * rs).
 */
static void
rows_all(void *ctx, int64_t b, int64_t e)
{
	const struct djob *j = ctx;
	const struct ml_conv3 *v = j->v;

	for (int64_t it = b; it < e; it++) {
		int64_t n = it / j->Hp, r = it % j->Hp;
		for (int64_t ci = 0; ci < v->cin; ci++)
			phase_row(j, n, ci, r - v->p[1], j->P + (n * v->cin + ci) * j->cs + r * j->rs);
	}
}

/* one block of OCB channels [oc0, oc0 + OCB) by nw <= OWB columns at ow0, plain C */
ML_CLONES static void
block_c(const struct djob *j, const float *rows, const float *wb, int64_t oc0, int64_t ow0,
	int64_t nw, float *yrow)
{
	const struct ml_conv3 *v = j->v;
	int64_t KH = v->k[1], KW = v->k[2];
	int64_t plane = v->outsz;
	float acc[OCB][OWB];

	for (int o = 0; o < OCB; o++) {
		float b = j->bias != NULL && oc0 + o < v->cout ? j->bias[oc0 + o] : 0.0f;
		for (int t = 0; t < OWB; t++)
			acc[o][t] = b;
	}
	for (int64_t ci = 0; ci < v->cin; ci++)
		for (int64_t kh = 0; kh < KH; kh++)
			for (int64_t kw = 0; kw < KW; kw++) {
				const float *xr = rows + ci * j->cs + kh * j->rs + ow0 + j->koff[kw];
				const float *wv = wb + ((ci * KH + kh) * KW + kw) * OCB;
				for (int o = 0; o < OCB; o++)
					for (int t = 0; t < OWB; t++)
						acc[o][t] += wv[o] * xr[t];
			}
	for (int o = 0; o < OCB && oc0 + o < v->cout; o++)
		memcpy(yrow + (oc0 + o) * plane + ow0, acc[o], sizeof(float) * (size_t)nw);
}

/* in_regs: the SIMD blocks apply j's residual and activation themselves (none, Relu or Clip) */
static bool
in_regs(const struct djob *j)
{
	return j->level >= 2 &&
	       (j->act == ML_ACT_NONE || j->act == ML_ACT_RELU || j->act == ML_ACT_CLIP);
}

#ifdef HAVE_AVX512
/* block512_bias: the block's NV vectors by OCB channels c, each its channel's bias (or 0) */
__attribute__((target("avx512f"), always_inline)) static inline void
block512_bias(const struct djob *j, __m512 c[3][OCB], int64_t oc0, const int NV)
{
	for (int o = 0; o < OCB; o++) {
		float b = j->bias != NULL && oc0 + o < j->v->cout ? j->bias[oc0 + o] : 0.0f;
		for (int u = 0; u < NV; u++)
			c[u][o] = _mm512_set1_ps(b);
	}
}

/*
 * block_nv: the vectors of 16 columns of the next block of a row with rem
 * columns left: three, or two where that leaves no block of one (112 = 48
 * + 32 + 32)
 */
static inline int
block_nv(int64_t rem)
{
	return rem <= 16 ? 1 : rem <= 32 || (rem > 48 && rem <= 64) ? 2 : 3;
}

/*
 * block512_store: the block's NV vectors by OCB channels c (bias included)
 * into yrow's planes, FusedConv's residual, Relu and Clip applied on the
 * registers where in_regs says so.
 */
__attribute__((target("avx512f"), always_inline)) static inline void
block512_store(const struct djob *j, __m512 c[3][OCB], int64_t oc0, int64_t ow0, int64_t nw,
	       float *yrow, const int NV)
{
	const struct ml_conv3 *v = j->v;
	int64_t plane = v->outsz;
	__mmask16 m[3];
	for (int u = 0; u < NV; u++) {
		int64_t left = nw - 16 * u;
		m[u] = (__mmask16)(left >= 16 ? 0xffff : left <= 0 ? 0 : (1u << left) - 1);
	}
	/* FusedConv's residual, Relu and Clip on the registers (in_regs); the rest after */
	bool regs = in_regs(j);
	__m512 lo = _mm512_set1_ps(j->act == ML_ACT_CLIP ? j->lo : 0.0f);
	__m512 hi = _mm512_set1_ps(j->act == ML_ACT_CLIP ? j->hi : 0.0f);
	for (int o = 0; o < OCB && oc0 + o < v->cout; o++) {
		float *yo = yrow + (oc0 + o) * plane + ow0;
		for (int u = 0; u < NV; u++) {
			__m512 r = c[u][o];
			if (regs && j->z != NULL)
				r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m[u], j->z + (yo - j->y) +
									     16 * u));
			/*
			 * as ml_fused_tile_epi's scalar loops: Relu takes NaN and -0
			 * to +0 (vmaxps gives its second operand for those), Clip
			 * keeps them
			 */
			if (regs && j->act == ML_ACT_RELU)
				r = _mm512_max_ps(r, lo);
			else if (regs && j->act == ML_ACT_CLIP)
				r = _mm512_min_ps(hi, _mm512_max_ps(lo, r));
			_mm512_mask_storeu_ps(yo + 16 * u, m[u], r);
		}
	}
}

/*
 * block512: block_c's sums for nw <= 16 NV columns (NV vectors of 16) by
 * OCB channels, 8 NV zmm accumulators: each tap's NV loads and 8
 * broadcasts feed 8 NV multiply-adds, so three vectors (24 accumulators)
 * load a third less a multiply-add than two. KW and S as constants (S 0:
 * the stride and the taps' offsets from j) unroll a window row's taps.
 */
__attribute__((target("avx512f"), always_inline)) static inline void
block512(const struct djob *j, const float *rows, const float *wb, int64_t oc0, int64_t ow0,
	 int64_t nw, float *yrow, const int NV, const int64_t KW, const int64_t S)
{
	const struct ml_conv3 *v = j->v;
	int64_t KH = v->k[1], TW = j->TW;
	__m512 c[3][OCB];

	block512_bias(j, c, oc0, NV);
	for (int64_t ci = 0; ci < v->cin; ci++)
		for (int64_t kh = 0; kh < KH; kh++) {
			const float *xb = rows + ci * j->cs + kh * j->rs + ow0;
			const float *wv = wb + (ci * KH + kh) * KW * OCB;
			_Pragma("GCC unroll 11")
			for (int64_t kw = 0; kw < KW; kw++, wv += OCB) {
				const float *xr = xb + (S > 0 ? (kw % S) * TW + kw / S : j->koff[kw]);
				__m512 b[3];
				for (int u = 0; u < NV; u++)
					b[u] = _mm512_loadu_ps(xr + 16 * u);
				_Pragma("GCC unroll 8")
				for (int o = 0; o < OCB; o++) {
					__m512 a = _mm512_set1_ps(wv[o]);
					for (int u = 0; u < NV; u++)
						c[u][o] = _mm512_fmadd_ps(a, b[u], c[u][o]);
				}
			}
		}
	block512_store(j, c, oc0, ow0, nw, yrow, NV);
}

/* block512_nv: block512 with NV vectors, the stems' windows (3 and 7, stride 2) unrolled */
#define BLOCK512_NV(NV)								\
__attribute__((target("avx512f"))) static void					\
block512_##NV(const struct djob *j, const float *rows, const float *wb, int64_t oc0,	\
	      int64_t ow0, int64_t nw, float *yrow)				\
{										\
	int64_t KW = j->v->k[2], s = j->v->s[2];				\
	if (KW == 3 && s == 2)							\
		block512(j, rows, wb, oc0, ow0, nw, yrow, NV, 3, 2);		\
	else if (KW == 7 && s == 2)						\
		block512(j, rows, wb, oc0, ow0, nw, yrow, NV, 7, 2);		\
	else									\
		block512(j, rows, wb, oc0, ow0, nw, yrow, NV, KW, 0);		\
}
BLOCK512_NV(1)
BLOCK512_NV(2)
BLOCK512_NV(3)

/*
 * block_avx512: the columns [ow0, ow0 + nw) of a row in blocks of three
 * vectors, or two where that leaves no block of one (112 = 48 + 32 + 32);
 * the last block reads up to the row's width rounded up to 16
 */
static void
block_avx512(const struct djob *j, const float *rows, const float *wb, int64_t oc0, int64_t ow0,
	     int64_t nw, float *yrow)
{
	for (int64_t at = 0; at < nw;) {
		int64_t rem = nw - at;
		int nv = block_nv(rem);
		int64_t w = ML_MIN(rem, 16 * nv);
		(nv == 3 ? block512_3 : nv == 2 ? block512_2 : block512_1)(j, rows, wb, oc0, ow0 + at,
									    w, yrow);
		at += w;
	}
}

#ifndef __clang__
#define HAVE_DIRECT_BF16 1
#define DBF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
/*
 * The bf16 kernel (ml_direct_conv_bf16: the stems of mlquant --dtype bf16
 * models, on vdpbf16ps where it issues at the FMA's rate). At horizontal
 * stride 2, taps kw and kw + 1 of output column ow read padded input
 * columns 2 ow + kw and 2 ow + kw + 1: for even kw two adjacent columns.
 * So the padded row rounded to bf16 in order is already a row of pairs
 * (pair q: columns 2q and 2q + 1), and tap pair kp of output column ow is
 * pair ow + kp: one vdpbf16ps lane sums two taps, no copy split by phase.
 * A window row of KW taps is (KW + 1) / 2 pairs, the last of an odd
 * window with weight 0 (it reads the next column, a finite value or a
 * zero of the padding, and its product is dropped).
 */
/* bf_pair_row: the padded row (pl zeros, then xr's W floats, then zeros) as tw pairs at d */
DBF_TARGET static void
bf_pair_row(const float *xr, int64_t W, int64_t pl, int64_t tw, uint32_t *d)
{
	for (int64_t q = 0; q < tw; q += 16) {
		__mmask16 sm = (__mmask16)(tw - q >= 16 ? 0xffff : (1u << (tw - q)) - 1);
		__m512 a = ld16_row(xr, W, 2 * q - pl), b = ld16_row(xr, W, 2 * q - pl + 16);
		_mm512_mask_storeu_epi32(d + q, sm, (__m512i)_mm512_cvtne2ps_pbh(b, a));
	}
}

/* rows_dp: rows [b, e) (image it / Hp, padded row it % Hp of every channel) of P2 */
DBF_TARGET static void
rows_dp(void *ctx, int64_t b, int64_t e)
{
	const struct djob *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t H = v->in[1], W = v->in[2];

	for (int64_t it = b; it < e; it++) {
		int64_t n = it / j->Hp, r = it % j->Hp, ih = r - v->p[1];
		for (int64_t ci = 0; ci < v->cin; ci++) {
			uint32_t *d = (uint32_t *)j->P2 + ((n * v->cin + ci) * j->Hp + r) * j->TW;
			if (ih < 0 || ih >= H)
				memset(d, 0, sizeof(uint32_t) * (size_t)j->TW);
			else
				bf_pair_row(j->x + ((n * v->cin + ci) * H + ih) * W, W, v->p[2], j->TW,
					    d);
		}
	}
}

/*
 * block512dp: block512's sums on vdpbf16ps: per tap pair NV loads of 16
 * pairs and 8 broadcast weight pairs feed 8 NV vdpbf16ps; KP (pairs a
 * window row) as a constant unrolls the row.
 */
DBF_TARGET __attribute__((always_inline)) static inline void
block512dp(const struct djob *j, const uint32_t *rows, const uint32_t *wb, int64_t oc0,
	   int64_t ow0, int64_t nw, float *yrow, const int NV, const int64_t KP)
{
	const struct ml_conv3 *v = j->v;
	int64_t KH = v->k[1];
	__m512 c[3][OCB];

	block512_bias(j, c, oc0, NV);
	for (int64_t ci = 0; ci < v->cin; ci++)
		for (int64_t kh = 0; kh < KH; kh++) {
			const uint32_t *xb = rows + ci * j->cs + kh * j->TW + ow0;
			const uint32_t *wv = wb + (ci * KH + kh) * KP * OCB;
			_Pragma("GCC unroll 6")
			for (int64_t kp = 0; kp < KP; kp++, wv += OCB) {
				__m512bh bv[3];
				for (int u = 0; u < NV; u++)
					bv[u] = (__m512bh)_mm512_loadu_si512(xb + kp + 16 * u);
				_Pragma("GCC unroll 8")
				for (int o = 0; o < OCB; o++) {
					__m512bh a = (__m512bh)_mm512_set1_epi32((int)wv[o]);
					for (int u = 0; u < NV; u++)
						c[u][o] = _mm512_dpbf16_ps(c[u][o], a, bv[u]);
				}
			}
		}
	block512_store(j, c, oc0, ow0, nw, yrow, NV);
}

/* blockdp_nv: block512dp with NV vectors, the stems' windows (3 and 7 wide: 2 and 4 pairs) unrolled */
#define BLOCKDP_NV(NV)								\
DBF_TARGET static void								\
blockdp_##NV(const struct djob *j, const uint32_t *rows, const uint32_t *wb, int64_t oc0, \
	     int64_t ow0, int64_t nw, float *yrow)				\
{										\
	int64_t KP = (j->v->k[2] + 1) / 2;					\
	if (KP == 2)								\
		block512dp(j, rows, wb, oc0, ow0, nw, yrow, NV, 2);		\
	else if (KP == 4)							\
		block512dp(j, rows, wb, oc0, ow0, nw, yrow, NV, 4);		\
	else									\
		block512dp(j, rows, wb, oc0, ow0, nw, yrow, NV, KP);		\
}
BLOCKDP_NV(1)
BLOCKDP_NV(2)
BLOCKDP_NV(3)

/* direct_rows_dp: direct_rows on the pair rows, a whole output row in block_avx512's widths */
static void
direct_rows_dp(void *ctx, int64_t b, int64_t e)
{
	struct djob *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t OH = v->out[1], OW = v->out[2], CKP = v->cin * v->k[1] * ((v->k[2] + 1) / 2);

	for (int64_t it = b; it < e; it++) {
		int64_t n = it / OH, oh = it % OH;
		const uint32_t *rows = j->P2 + n * v->cin * j->cs + oh * v->s[1] * j->TW;
		float *yrow = j->y + n * v->cout * v->outsz + oh * OW;
		for (int64_t ob = 0; ob < j->nob; ob++) {
			const uint32_t *wb = j->wp2 + ob * CKP * OCB;
			for (int64_t at = 0; at < OW;) {
				int64_t rem = OW - at;
				int nv = block_nv(rem);
				int64_t w = ML_MIN(rem, 16 * nv);
				(nv == 3 ? blockdp_3 : nv == 2 ? blockdp_2 : blockdp_1)(j, rows, wb, ob * OCB,
										at, w, yrow);
				at += w;
			}
			if ((j->z == NULL && j->act <= ML_ACT_NONE) || in_regs(j))
				continue;
			int64_t off = (yrow - j->y) + ob * OCB * v->outsz;
			int64_t nc = ML_MIN((int64_t)OCB, v->cout - ob * OCB);
			ml_fused_tile_epi(j->y + off, nc, OW, v->outsz, NULL,
					  j->z != NULL ? j->z + off : NULL, j->act, j->lo, j->hi);
		}
	}
}
#endif

/*
 * block_avx2: the block on AVX2, in four quarters of 4 channels by 16
 * columns (8 ymm accumulators each; the whole block's 32 would not fit in
 * 16 registers), each quarter reading its taps' rows from L1 again.
 */
__attribute__((target("avx2,fma"))) static void
block_avx2(const struct djob *j, const float *rows, const float *wb, int64_t oc0, int64_t ow0,
	   int64_t nw, float *yrow)
{
	const struct ml_conv3 *v = j->v;
	int64_t KH = v->k[1], KW = v->k[2];
	int64_t plane = v->outsz;
	bool regs = in_regs(j);
	__m256 lo = _mm256_set1_ps(j->act == ML_ACT_CLIP ? j->lo : 0.0f);
	__m256 hi = _mm256_set1_ps(j->act == ML_ACT_CLIP ? j->hi : 0.0f);

	for (int64_t cq = 0; cq < OWB && cq < nw; cq += 16)
		for (int oq = 0; oq < OCB && oc0 + oq < v->cout; oq += 4) {
			__m256 c0[4], c1[4];
			for (int o = 0; o < 4; o++) {
				int64_t oc = oc0 + oq + o;
				float b = j->bias != NULL && oc < v->cout ? j->bias[oc] : 0.0f;
				c0[o] = _mm256_set1_ps(b);
				c1[o] = c0[o];
			}
			for (int64_t ci = 0; ci < v->cin; ci++)
				for (int64_t kh = 0; kh < KH; kh++) {
					const float *xb = rows + ci * j->cs + kh * j->rs + ow0 + cq;
					const float *wv = wb + (ci * KH + kh) * KW * OCB + oq;
					for (int64_t kw = 0; kw < KW; kw++, wv += OCB) {
						const float *xr = xb + j->koff[kw];
						__m256 b0 = _mm256_loadu_ps(xr), b1 = _mm256_loadu_ps(xr + 8);
						_Pragma("GCC unroll 4")
						for (int o = 0; o < 4; o++) {
							__m256 a = _mm256_broadcast_ss(wv + o);
							c0[o] = _mm256_fmadd_ps(a, b0, c0[o]);
							c1[o] = _mm256_fmadd_ps(a, b1, c1[o]);
						}
					}
				}
			int64_t w = ML_MIN(16, nw - cq);
			/* unrolled, so that c0 and c1 stay in registers (a variable index would not) */
			_Pragma("GCC unroll 4")
			for (int o = 0; o < 4; o++) {
				if (oc0 + oq + o >= v->cout)
					continue;
				float *yo = yrow + (oc0 + oq + o) * plane + ow0 + cq, t[16];
				__m256 r0 = c0[o], r1 = c1[o];
				if (regs && j->z != NULL) {
					const float *zo = j->z + (yo - j->y);
					float zt[16] = { 0 };
					memcpy(zt, zo, sizeof(float) * (size_t)w);
					r0 = _mm256_add_ps(r0, _mm256_loadu_ps(zt));
					r1 = _mm256_add_ps(r1, _mm256_loadu_ps(zt + 8));
				}
				/* as block_avx512: Relu takes NaN and -0 to +0, Clip keeps them */
				if (regs && j->act == ML_ACT_RELU) {
					r0 = _mm256_max_ps(r0, lo);
					r1 = _mm256_max_ps(r1, lo);
				} else if (regs && j->act == ML_ACT_CLIP) {
					r0 = _mm256_min_ps(hi, _mm256_max_ps(lo, r0));
					r1 = _mm256_min_ps(hi, _mm256_max_ps(lo, r1));
				}
				if (w == 16) {
					_mm256_storeu_ps(yo, r0);
					_mm256_storeu_ps(yo + 8, r1);
				} else {
					_mm256_storeu_ps(t, r0);
					_mm256_storeu_ps(t + 8, r1);
					memcpy(yo, t, sizeof(float) * (size_t)w);
				}
			}
		}
}

/*
 * block2_24: 24 columns at ow0 by the block's OCB channels on AVX2, in two
 * halves of 4 channels: 12 ymm accumulators, 7 loads a 12 multiply-adds
 * (block_avx2's quarters of 16 columns take 6 a 8, and their 8 chains
 * barely cover the multiply-add's latency: SqueezeNet's and ResNet-18's
 * first layers ran at about half the FMA peak on AMD EPYC Zen 3).
 * block2_24_3 and _7 unroll the stems' windows, block2_24_k takes any.
 */
__attribute__((target("avx2,fma"), always_inline)) static inline void
block2_24(const struct djob *j, const float *rows, const float *wb, int64_t oc0, int64_t ow0,
	  float *yrow, const int64_t KW)
{
	const struct ml_conv3 *v = j->v;
	int64_t KH = v->k[1], plane = v->outsz;
	bool regs = in_regs(j);
	__m256 lo = _mm256_set1_ps(j->act == ML_ACT_CLIP ? j->lo : 0.0f);
	__m256 hi = _mm256_set1_ps(j->act == ML_ACT_CLIP ? j->hi : 0.0f);

	for (int oq = 0; oq < OCB && oc0 + oq < v->cout; oq += 4) {
		__m256 c[4][3];
		for (int o = 0; o < 4; o++) {
			int64_t oc = oc0 + oq + o;
			__m256 b = _mm256_set1_ps(j->bias != NULL && oc < v->cout ? j->bias[oc] : 0.0f);
			c[o][0] = c[o][1] = c[o][2] = b;
		}
		for (int64_t ci = 0; ci < v->cin; ci++)
			for (int64_t kh = 0; kh < KH; kh++) {
				const float *xb = rows + ci * j->cs + kh * j->rs + ow0;
				const float *wv = wb + (ci * KH + kh) * KW * OCB + oq;
				/* not unrolled: three taps' loads in flight spilled accumulators */
				_Pragma("GCC unroll 1")
				for (int64_t kw = 0; kw < KW; kw++, wv += OCB) {
					const float *xr = xb + j->koff[kw];
					__m256 b0 = _mm256_loadu_ps(xr), b1 = _mm256_loadu_ps(xr + 8);
					__m256 b2 = _mm256_loadu_ps(xr + 16);
					_Pragma("GCC unroll 4")
					for (int o = 0; o < 4; o++) {
						__m256 a = _mm256_broadcast_ss(wv + o);
						c[o][0] = _mm256_fmadd_ps(a, b0, c[o][0]);
						c[o][1] = _mm256_fmadd_ps(a, b1, c[o][1]);
						c[o][2] = _mm256_fmadd_ps(a, b2, c[o][2]);
					}
				}
			}
		/* unrolled, so that c stays in registers (a variable index would not) */
		_Pragma("GCC unroll 4")
		for (int o = 0; o < 4; o++) {
			if (oc0 + oq + o >= v->cout)
				continue;
			float *yo = yrow + (oc0 + oq + o) * plane + ow0;
			_Pragma("GCC unroll 3")
			for (int q = 0; q < 3; q++) {
				__m256 r = c[o][q];
				if (regs && j->z != NULL)
					r = _mm256_add_ps(r, _mm256_loadu_ps(j->z + (yo - j->y) + 8 * q));
				/* as block_avx2: Relu takes NaN and -0 to +0, Clip keeps them */
				if (regs && j->act == ML_ACT_RELU)
					r = _mm256_max_ps(r, lo);
				else if (regs && j->act == ML_ACT_CLIP)
					r = _mm256_min_ps(hi, _mm256_max_ps(lo, r));
				_mm256_storeu_ps(yo + 8 * q, r);
			}
		}
	}
}

#define BLOCK2_24(NAME, KW)								\
__attribute__((target("avx2,fma"))) static void						\
NAME(const struct djob *j, const float *rows, const float *wb, int64_t oc0, int64_t ow0,	\
     float *yrow)									\
{											\
	block2_24(j, rows, wb, oc0, ow0, yrow, KW);					\
}
BLOCK2_24(block2_24_3, 3)
BLOCK2_24(block2_24_7, 7)
BLOCK2_24(block2_24_k, j->v->k[2])

/*
 * block_avx2_row: the columns [ow0, ow0 + nw) of a row on AVX2, 24 at a
 * time (block2_24), the last fewer than 24 by block_avx2's quarters
 */
static void
block_avx2_row(const struct djob *j, const float *rows, const float *wb, int64_t oc0,
	       int64_t ow0, int64_t nw, float *yrow)
{
	int64_t KW = j->v->k[2], at = 0;
	void (*b24)(const struct djob *, const float *, const float *, int64_t, int64_t, float *) =
		KW == 3 ? block2_24_3 : KW == 7 ? block2_24_7 : block2_24_k;

	for (; nw - at >= 24; at += 24)
		b24(j, rows, wb, oc0, ow0 + at, yrow);
	if (at < nw)
		block_avx2(j, rows, wb, oc0, ow0 + at, nw - at, yrow);
}
#endif

static void
direct_rows(void *ctx, int64_t b, int64_t e)
{
	struct djob *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t OH = v->out[1], OW = v->out[2], CKK = v->cin * v->k[1] * v->k[2];
	float *rows = j->P != NULL ? NULL : ml_cpu_scratch(0, sizeof(float) *
					    (size_t)(v->cin * v->k[1] * v->s[2] * j->TW));

	if (j->P == NULL && rows == NULL) {
		atomic_store(&j->nomem, 1);
		return;
	}
	for (int64_t it = b; it < e; it++) {
		int64_t n = it / OH, oh = it % OH;
		if (j->P != NULL)
			rows = j->P + n * v->cin * j->cs + oh * v->s[1] * j->rs;
		else
			rows_for(j, n, oh, rows);
		float *yrow = j->y + n * v->cout * v->outsz + oh * OW;
		for (int64_t ob = 0; ob < j->nob; ob++) {
			const float *wb = j->wp + ob * CKK * OCB;
			/* AVX-512 and AVX2: the whole row at once, in blocks of their own widths */
			int64_t step = j->level >= 2 ? OW : OWB;
			for (int64_t ow0 = 0; ow0 < OW; ow0 += step) {
				int64_t nw = ML_MIN(step, OW - ow0);
#ifdef HAVE_AVX512
				if (j->level == 3)
					block_avx512(j, rows, wb, ob * OCB, ow0, nw, yrow);
				else if (j->level == 2)
					block_avx2_row(j, rows, wb, ob * OCB, ow0, nw, yrow);
				else
#endif
					block_c(j, rows, wb, ob * OCB, ow0, nw, yrow);
				if ((j->z == NULL && j->act <= ML_ACT_NONE) || in_regs(j))
					continue;
				int64_t off = (yrow - j->y) + ob * OCB * v->outsz + ow0;
				int64_t nc = ML_MIN((int64_t)OCB, v->cout - ob * OCB);
				ml_fused_tile_epi(j->y + off, nc, nw, v->outsz, NULL,
						  j->z != NULL ? j->z + off : NULL, j->act, j->lo,
						  j->hi);
			}
		}
	}
}

/* direct: the convolution of v into y, then z added and act applied (see struct djob) */
static int
direct(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
       const float *bias, const float *z, int act, float lo, float hi, float *y)
{
	int64_t CKK = v->cin * v->k[1] * v->k[2];
	struct djob j = { .v = v, .x = x, .bias = bias, .z = z, .y = y, .act = act, .lo = lo,
			  .hi = hi, .level = direct_level() };

	j.nob = (v->cout + OCB - 1) / OCB;
	/* the columns block_* may read: whole OWB blocks, plus the window's reach */
	j.TW = (v->out[2] + OWB - 1) / OWB * OWB + (v->k[2] - 1) / v->s[2] + 1;
	for (int64_t kw = 0; kw < v->k[2]; kw++)
		j.koff[kw] = (kw % v->s[2]) * j.TW + kw / v->s[2];
	j.rs = v->s[2] * j.TW;
	j.cs = v->k[1] * j.rs;
	atomic_init(&j.nomem, 0);
	/*
	 * The input split by phase once, all of it (P_MAX at most): output
	 * rows share input rows (a 7x7 stride-2 window's 7 rows, 5 of them
	 * with the next output row's), which the rows of each one copied
	 * again (15% of ResNet-18's first layer).
	 */
	j.Hp = (v->out[1] - 1) * v->s[1] + v->k[1];
	if (v->n * v->cin * j.Hp * j.rs <= P_MAX && !rows_forced() &&
	    (j.P = ml_cpu_scratch(1, sizeof(float) * (size_t)(v->n * v->cin * j.Hp * j.rs))) != NULL) {
		j.cs = j.Hp * j.rs;
		ml_parallel_for(v->n * j.Hp, ML_MAX(1, 4096 / (v->cin * j.rs)), rows_all, &j);
	}
	float *wp = ml_cpu_scratch(2, sizeof(float) * (size_t)(j.nob * CKK * OCB));
	if (wp == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate the packed weights");
	for (int64_t ob = 0; ob < j.nob; ob++)
		for (int64_t r = 0; r < CKK; r++)
			for (int o = 0; o < OCB; o++) {
				int64_t oc = ob * OCB + o;
				float wv = oc < v->cout ? w[oc * CKK + r] : 0.0f;
				wp[(ob * CKK + r) * OCB + o] = wv;
			}
	j.wp = wp;
	ml_parallel_for(v->n * v->out[1], 1, direct_rows, &j);
	if (atomic_load(&j.nomem))
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	return 0;
}

int
ml_direct_conv(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
	       const float *bias, const struct ml_conv_epi *e, float *y)
{
	if (e == NULL)
		return direct(c, v, x, w, bias, NULL, ML_ACT_NONE, 0.0f, 0.0f, y);
	return direct(c, v, x, w, bias, e->z, e->act, e->lo, e->hi, y);
}

bool
ml_direct_bf16_ok(const struct ml_conv3 *v)
{
#if defined(HAVE_AVX512) && defined(HAVE_DIRECT_BF16)
	return ml_direct_ok(v) && direct_level() == 3 && v->s[2] == 2 && !rows_forced() &&
	       ml_bf16_path_ok(ML_BF16_DP);
#else
	(void)v;
	return false;
#endif
}

int
ml_direct_conv_bf16(struct ml_opctx *c, const struct ml_conv3 *v, const float *x,
		    const uint16_t *w, const float *bias, const struct ml_conv_epi *e, float *y)
{
#if defined(HAVE_AVX512) && defined(HAVE_DIRECT_BF16)
	int64_t KH = v->k[1], KW = v->k[2], KP = (KW + 1) / 2, CKP = v->cin * KH * KP;
	struct djob j = { .v = v, .x = x, .bias = bias, .y = y, .act = ML_ACT_NONE,
			  .level = direct_level() };
	if (e != NULL) {
		j.z = e->z;
		j.act = e->act;
		j.lo = e->lo;
		j.hi = e->hi;
	}
	j.nob = (v->cout + OCB - 1) / OCB;
	/* the pairs the blocks read: the row's width rounded up to 16, plus the window's reach */
	j.TW = ((v->out[2] + 15) / 16 * 16 + KP + 15) / 16 * 16;
	j.Hp = (v->out[1] - 1) * v->s[1] + KH;
	j.cs = j.Hp * j.TW;
	atomic_init(&j.nomem, 0);
	if (v->n * v->cin * j.cs > P_MAX)
		return 1;
	uint32_t *P2 = ml_cpu_scratch(1, sizeof(uint32_t) * (size_t)(v->n * v->cin * j.cs));
	uint32_t *wp2 = ml_cpu_scratch(2, sizeof(uint32_t) * (size_t)(j.nob * CKP * OCB));
	if (P2 == NULL || wp2 == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate the bf16 rows and weights");
	j.P2 = P2;
	ml_parallel_for(v->n * j.Hp, ML_MAX(1, 4096 / (v->cin * j.TW)), rows_dp, &j);
	for (int64_t ob = 0; ob < j.nob; ob++)
		for (int64_t ci = 0; ci < v->cin; ci++)
			for (int64_t kh = 0; kh < KH; kh++)
				for (int64_t kp = 0; kp < KP; kp++)
					for (int o = 0; o < OCB; o++) {
						int64_t oc = ob * OCB + o;
						const uint16_t *wr = w + ((oc * v->cin + ci) * KH + kh) * KW;
						uint32_t lo = oc < v->cout ? wr[2 * kp] : 0;
						uint32_t hi = oc < v->cout && 2 * kp + 1 < KW ?
							      wr[2 * kp + 1] : 0;
						wp2[(((ob * v->cin + ci) * KH + kh) * KP + kp) * OCB + o] =
							lo | hi << 16;
					}
	j.wp2 = wp2;
	ml_parallel_for(v->n * v->out[1], 1, direct_rows_dp, &j);
	return 0;
#else
	(void)c, (void)v, (void)x, (void)w, (void)bias, (void)e, (void)y;
	return 1;
#endif
}
