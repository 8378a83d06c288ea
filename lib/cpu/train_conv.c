/*
 * train_conv.c: f32 convolution kernels for the small channel counts of
 * training a small CNN (see train_conv.h). A LeNet's layers have 6 and 16
 * output channels: as GEMMs, y = W col has 6 or 16 rows, and dW = dy col^T
 * is 6 x 25 or 16 x 150 over a reduction of thousands; BLAS and the 12-row
 * tiles of ml_pgemm run these at a fraction of the CPU's speed, and the
 * column matrix costs more to write than the GEMM to run.
 *
 * So there is no column matrix: for a stride-1 window, the input is copied
 * once, zero-padded, as planes [channel][image][hp][wp], and row
 * (ci, kh, kw) of the column matrix of image i is that copy read from
 * ci * n * hp * wp + i * hp * wp + kh * wp + kw on: position j = oh * wp
 * + ow of a "wide" output row of wp columns, of which the last wp - ow
 * are junk (dropped when the result is scattered out, or multiplied by
 * zeros in the filter gradient). Each image's wide output is li columns,
 * oh * wp rounded up to 16.
 * - forward: y_g = W_g [mg, K] times those rows (kernel nn: a tile of up
 *   to MR rows by one vector of columns, a broadcast of W and a load per k);
 * - filter gradient: dW_g = dy_g (widened, zeros in the junk columns)
 *   times the rows transposed (kernel nt: MR x NR vector partial sums
 *   over every image, reduced once);
 * - input gradient: the forward convolution of dy, padded by k - 1 - pad,
 *   with the kernel flipped and its channels swapped.
 * The kernels come for AVX-512F, AVX2+FMA and 4-wide GCC vectors (SSE on
 * the x86-64-v2 baseline, plain C elsewhere), picked once at run time
 * (ML_TGEMM=avx2 or ML_TGEMM=0 force the lower ones, for tests).
 *
 * bf16 (a step of mltrain --precision bf16, the node's precision "bf16"):
 * mode ML_TC_BF16 runs train_amx.c's AMX kernels (tdpbf16ps); mode
 * ML_TC_DP the nn and nt tiles here on vdpbf16ps, on CPUs whose vdpbf16ps
 * issues at the FMA's rate (AMD Zen 4: twice the multiply-adds of an
 * FMA; see dp_prep for the pairs it takes); mode ML_TC_ROUND is their
 * reference (ML_BF16=f32, the tests): the f32 kernels here on copies and
 * weights rounded to bf16. They differ by the order of the f32 sums only.
 * Elsewhere a bf16 step runs these in f32 (on the Xeons measured,
 * vdpbf16ps at half the FMA's rate was slower, train_amx.c).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-tree-loop-distribute-patterns")
#endif
#include <stdatomic.h>

#include "cpu/train_conv.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_TG 1
#include <immintrin.h>
#endif

/* The widest vector of any level, and the granule of a wide output row. */
#define LI_ALIGN 16

/* tg_level: ml_cpu_fma_level("ML_TGEMM"), computed once. */
static int
tg_level(void)
{
#ifdef HAVE_TG
	static atomic_int level = -1;
	int v = atomic_load_explicit(&level, memory_order_relaxed);
	if (v < 0) {
		v = ml_cpu_fma_level("ML_TGEMM");
		atomic_store_explicit(&level, v, memory_order_relaxed);
	}
	return v;
#else
	return 0;
#endif
}

/*
 * NN_TILE: C[mr rows (mr <= MR), NC * VW columns] = A B over k: A packed
 * as pk[p * MR + r] (rows past mr zero, computed, not stored), row p of B
 * at b + boff[p].
 */
#define NN_TILE(NAME, TGT, VT, VW, LD, ST, SET1, ZERO, FMA, MR, NC)			\
TGT static void										\
NAME(int64_t mr, int64_t k, const float *pk, const float *b, const int64_t *boff,	\
     float *c, int64_t ldc)								\
{											\
	VT s[MR][NC];									\
	for (int i = 0; i < MR; i++)							\
		for (int q = 0; q < NC; q++)						\
			s[i][q] = ZERO();						\
	for (int64_t p = 0; p < k; p++, pk += MR) {					\
		VT bv[NC];								\
		for (int q = 0; q < NC; q++)						\
			bv[q] = LD(b + boff[p] + q * VW);				\
		for (int i = 0; i < MR; i++) {						\
			VT av = SET1(pk[i]);						\
			for (int q = 0; q < NC; q++)					\
				s[i][q] = FMA(av, bv[q], s[i][q]);			\
		}									\
	}										\
	for (int i = 0; i < MR && i < mr; i++)						\
		for (int q = 0; q < NC; q++)						\
			ST(c + i * ldc + q * VW, s[i][q]);				\
}

/*
 * NT_TILE: C[mr, nr] = sum over nimg images of A_i[mr, l] B_i[nr, l]^T:
 * row r of A_i at a + r * lda + i * sa, row j of B_i at b + boff[j] +
 * i * sb; mr <= MR, nr <= NR (rows past them repeat the last), l a
 * multiple of VW.
 */
#define NT_TILE(NAME, TGT, ET, VT, VW, LD, ZERO, FMA, HSUM, MR, NR)			\
TGT static void										\
NAME(int64_t mr, int64_t nr, int64_t nimg, int64_t l, const ET *a, int64_t lda,		\
     int64_t sa, const ET *b, const int64_t *boff, int64_t sb, float *c, int64_t ldc)	\
{											\
	VT s[MR][NR];									\
	int64_t ao[MR], bo[NR];								\
	for (int i = 0; i < MR; i++)							\
		ao[i] = (i < mr ? i : mr - 1) * lda;					\
	for (int j = 0; j < NR; j++)							\
		bo[j] = boff[j < nr ? j : nr - 1];					\
	for (int i = 0; i < MR; i++)							\
		for (int j = 0; j < NR; j++)						\
			s[i][j] = ZERO();						\
	for (int64_t im = 0; im < nimg; im++) {						\
		const ET *ai = a + im * sa, *bi = b + im * sb;				\
		for (int64_t p = 0; p < l; p += VW) {					\
			VT av[MR];							\
			for (int i = 0; i < MR; i++)					\
				av[i] = LD(ai + ao[i] + p);				\
			for (int j = 0; j < NR; j++) {					\
				VT bv = LD(bi + bo[j] + p);				\
				for (int i = 0; i < MR; i++)				\
					s[i][j] = FMA(av[i], bv, s[i][j]);		\
			}								\
		}									\
	}										\
	for (int i = 0; i < mr; i++)							\
		for (int j = 0; j < nr; j++)						\
			c[i * ldc + j] = HSUM(s[i][j]);					\
}

#ifdef HAVE_TG
#define T512 __attribute__((target("avx512f")))
#define T256 __attribute__((target("avx2,fma")))
#define L512(p) _mm512_loadu_ps(p)
#define S512(p, v) _mm512_storeu_ps(p, v)
#define Z512() _mm512_setzero_ps()
#define B512(x) _mm512_set1_ps(x)
#define F512(a, b, c) _mm512_fmadd_ps(a, b, c)
#define L256(p) _mm256_loadu_ps(p)
#define S256(p, v) _mm256_storeu_ps(p, v)
#define Z256() _mm256_setzero_ps()
#define B256(x) _mm256_set1_ps(x)
#define F256(a, b, c) _mm256_fmadd_ps(a, b, c)

T512 static inline float
hsum512(__m512 v)
{
	return _mm512_reduce_add_ps(v);
}

T256 static inline float
hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
	return _mm_cvtss_f32(s);
}

NN_TILE(nn512_16, T512, __m512, 16, L512, S512, B512, Z512, F512, 16, 1)
NN_TILE(nn512_8, T512, __m512, 16, L512, S512, B512, Z512, F512, 8, 1)
NN_TILE(nn512_6, T512, __m512, 16, L512, S512, B512, Z512, F512, 6, 1)
NN_TILE(nn512_8w, T512, __m512, 16, L512, S512, B512, Z512, F512, 8, 2)
NN_TILE(nn512_6w, T512, __m512, 16, L512, S512, B512, Z512, F512, 6, 2)
NN_TILE(nn256_8, T256, __m256, 8, L256, S256, B256, Z256, F256, 8, 1)
NN_TILE(nn256_6, T256, __m256, 8, L256, S256, B256, Z256, F256, 6, 1)
NT_TILE(nt512, T512, float, __m512, 16, L512, Z512, F512, hsum512, 6, 4)
NT_TILE(nt256, T256, float, __m256, 8, L256, Z256, F256, hsum256, 2, 4)

#ifndef __clang__
#define HAVE_TDP 1
/*
 * The bf16 kernels (ML_TC_DP): the same tiles on vdpbf16ps, each 32-bit
 * lane two products of a pair of k summed into f32. nn's operands are
 * pairs of bf16 held in the 32 bits of a float slot (low half the even k):
 * loaded, broadcast and passed on as bits, never computed on as floats.
 * nt's are bf16 arrays: 32 of l a vector, its pairs adjacent positions.
 */
#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define DPF(a, b, c) ((__m512)_mm512_dpbf16_ps((c), (__m512bh)(a), (__m512bh)(b)))
#define LBF(p) _mm512_loadu_ps((const void *)(p))
NN_TILE(nnbf_16, TBF, __m512, 16, L512, S512, B512, Z512, DPF, 16, 1)
NN_TILE(nnbf_8, TBF, __m512, 16, L512, S512, B512, Z512, DPF, 8, 1)
NN_TILE(nnbf_6, TBF, __m512, 16, L512, S512, B512, Z512, DPF, 6, 1)
NN_TILE(nnbf_8w, TBF, __m512, 16, L512, S512, B512, Z512, DPF, 8, 2)
NN_TILE(nnbf_6w, TBF, __m512, 16, L512, S512, B512, Z512, DPF, 6, 2)
NT_TILE(ntbf, TBF, uint16_t, __m512, 32, LBF, Z512, DPF, hsum512, 6, 4)

/* bf_pairs: d[j] = (bf16(lo[j]), bf16(hi[j]) or 0 where hi is NULL) as bits, j < n */
TBF static void
bf_pairs(const float *lo, const float *hi, int64_t n, float *d)
{
	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 m = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
		__m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
			_mm512_maskz_loadu_ps(m, lo + j)));
		if (hi != NULL) {
			__m512i b = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
				_mm512_maskz_loadu_ps(m, hi + j)));
			a = _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
		}
		_mm512_mask_storeu_epi32(d + j, m, a);
	}
}

/* bf_inplace: n floats at p rounded to bf16 into the first 2n bytes of p (front to back) */
TBF static void
bf_inplace(float *p, int64_t n)
{
	uint16_t *d = (uint16_t *)(void *)p;
	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 m = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
		__m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, p + j));
		_mm256_mask_storeu_epi16(d + j, m, v);
	}
}
#endif
#endif

/* The baseline: 4-wide vectors of GCC's vector extension (SSE on x86-64). */
typedef float v4 __attribute__((vector_size(16)));
typedef float v4u __attribute__((vector_size(16), aligned(4), may_alias));
#define L128(p) (*(const v4u *)(p))
#define S128(p, v) (*(v4u *)(p) = (v))
#define Z128() ((v4){ 0, 0, 0, 0 })
#define B128(x) ((v4){ 0, 0, 0, 0 } + (x))
#define F128(a, b, c) ((a) * (b) + (c))
#define NOTGT

static inline float
hsum128(v4 v)
{
	return (v[0] + v[1]) + (v[2] + v[3]);
}

NN_TILE(nn128_4, NOTGT, v4, 4, L128, S128, B128, Z128, F128, 4, 1)
NT_TILE(nt128, NOTGT, float, v4, 4, L128, Z128, F128, hsum128, 2, 2)

typedef void (*nn_fn)(int64_t, int64_t, const float *, const float *, const int64_t *, float *,
		      int64_t);
typedef void (*nt_fn)(int64_t, int64_t, int64_t, int64_t, const float *, int64_t, int64_t,
		      const float *, const int64_t *, int64_t, float *, int64_t);

/*
 * struct wide: one implicit GEMM's operands. src: the padded planes
 * [kc][n][hp][wp] (+ a zero tail); boff[p]: the offset of row p = (ci,
 * kh, kw) of the kc * kh * kw rows; li: columns of an image's wide output;
 * out: [m][n * li] (nn) or the product [m][rows] (nt).
 */
struct wide {
	int64_t n, m, rows, hp, wp, li;
	const float *a;		/* nn: A packed by nn_pack; nt: the widened dy [m][n * li] */
	const float *src;
	const int64_t *boff;
	float *out;
	int lv, mr, nc;		/* the level; nn: the rows of a tile, its vectors of columns */
	bool dp;		/* ML_TC_DP: a, src as pairs (nn) or bf16 (nt); the kernels on vdpbf16ps */
	nn_fn nn;
};

/* the columns an nn item covers */
static int
nn_cols(const struct wide *w)
{
	return (w->lv == 2 ? 16 : w->lv == 1 ? 8 : 4) * w->nc;
}

/* nn_pick: the nn tile of level lv for m rows (the fewest padded rows, then the tallest). */
static void
nn_pick(struct wide *w)
{
	static const int h512[3] = { 16, 8, 6 }, h256[2] = { 8, 6 };
	const int *h = h512;
	int nh = 3;
	w->nn = nn128_4;
	w->mr = 4;
	w->nc = 1;
	if (w->lv < 1)
		return;
	if (w->lv == 1) {
		h = h256;
		nh = 2;
	}
	int best = h[0];
	for (int i = 1; i < nh; i++)
		if ((w->m + h[i] - 1) / h[i] * h[i] < (w->m + best - 1) / best * best)
			best = h[i];
	w->mr = best;
	/* 8 or 6 rows: two vectors of columns where they divide the row (more FMAs per load) */
	w->nc = w->lv == 2 && best < 16 && w->li % 32 == 0 ? 2 : 1;
#ifdef HAVE_TDP
	if (w->dp && w->nc == 2)
		w->nn = best == 8 ? nnbf_8w : nnbf_6w;
	else if (w->dp)
		w->nn = best == 16 ? nnbf_16 : best == 8 ? nnbf_8 : nnbf_6;
	if (w->dp)
		return;
#endif
#ifdef HAVE_TG
	if (w->lv == 2 && w->nc == 2)
		w->nn = best == 8 ? nn512_8w : nn512_6w;
	else if (w->lv == 2)
		w->nn = best == 16 ? nn512_16 : best == 8 ? nn512_8 : nn512_6;
	else
		w->nn = best == 8 ? nn256_8 : nn256_6;
#endif
}

/* rnd: x rounded to bf16 (the reference of the bf16 kernels) */
static inline float
rnd(float x)
{
	return ml_bf16_to_f32(ml_f32_to_bf16(x));
}

/*
 * nn_pack: A [m][k] (row stride sam, column stride sak) as tiles
 * pk[tile][p][mr], zero rows past m; bf ML_TC_ROUND: rounded to bf16.
 */
static void
nn_pack(const float *a, int64_t m, int64_t k, int64_t sam, int64_t sak, int mr, int bf, float *pk)
{
	for (int64_t r0 = 0; r0 < m; r0 += mr)
		for (int64_t p = 0; p < k; p++)
			for (int i = 0; i < mr; i++) {
				float v = r0 + i < m ? a[(r0 + i) * sam + p * sak] : 0.0f;
				*pk++ = bf == ML_TC_ROUND ? rnd(v) : v;
			}
}

static int64_t
nn_packed_len(int64_t m, int64_t k)
{
	return (m + 16) * k;	/* (m + mr - 1) / mr * mr rows, mr <= 16 */
}

static void
nn_items(void *ctx, int64_t b0, int64_t b1)
{
	const struct wide *w = ctx;
	int vw = nn_cols(w);
	int64_t per = w->li / vw, ldc = w->n * w->li;
	for (int64_t it = b0; it < b1; it++) {
		int64_t i = it / per, j0 = (it % per) * vw;
		const float *b = w->src + i * w->hp * w->wp + j0;
		float *c = w->out + i * w->li + j0;
		for (int64_t r = 0; r < w->m; r += w->mr)
			w->nn(ML_MIN(w->mr, w->m - r), w->rows, w->a + r * w->rows, b, w->boff,
			      c + r * ldc, ldc);
	}
}

static void
nt_items(void *ctx, int64_t b0, int64_t b1)
{
	const struct wide *w = ctx;
	int mr = w->lv == 2 ? 6 : 2, nr = w->lv >= 1 ? 4 : 2;
	nt_fn fn = nt128;
#ifdef HAVE_TG
	fn = w->lv == 2 ? nt512 : w->lv == 1 ? nt256 : nt128;
#endif
	int64_t lda = w->n * w->li;
	for (int64_t nb = b0; nb < b1; nb++) {
		int64_t c0 = nb * nr;
		for (int64_t r = 0; r < w->m; r += mr) {
#ifdef HAVE_TDP
			if (w->dp) {
				const uint16_t *a = (const uint16_t *)(const void *)w->a;
				ntbf(ML_MIN(mr, w->m - r), ML_MIN(nr, w->rows - c0), w->n, w->li,
				     a + r * lda, lda, w->li, (const uint16_t *)(const void *)w->src,
				     w->boff + c0, w->hp * w->wp, w->out + r * w->rows + c0,
				     w->rows);
				continue;
			}
#endif
			fn(ML_MIN(mr, w->m - r), ML_MIN(nr, w->rows - c0), w->n, w->li,
			   w->a + r * lda, lda, w->li, w->src, w->boff + c0, w->hp * w->wp,
			   w->out + r * w->rows + c0, w->rows);
		}
	}
}

bool
ml_train_conv_ok(const struct ml_conv3 *v)
{
	if (v->in[0] != 1 || v->k[0] != 1 || v->out[0] != 1 || v->p[0] != 0 || v->pe[0] != 0)
		return false;
	for (int i = 1; i < 3; i++)
		if (v->s[i] != 1 || v->d[i] != 1 || v->p[i] < 0 || v->pe[i] < 0 ||
		    v->p[i] >= v->k[i] || v->pe[i] >= v->k[i] ||
		    v->out[i] != v->in[i] + v->p[i] + v->pe[i] - v->k[i] + 1 || v->out[i] < 1)
			return false;
	/* the padded copies (the input gradient's is the largest) stay under 64 MiB */
	int64_t hp = v->in[1] + v->k[1] - 1, wp = v->in[2] + v->k[2] - 1;
	return v->mg >= 1 && v->mg <= 16 && v->cg >= 1 && v->cg <= 64 && v->group >= 1 &&
	       v->cg * v->group == v->cin && v->n >= 1 && v->cg * v->ksz <= 4096 &&
	       hp * wp <= ((int64_t)1 << 16) && v->n <= ((int64_t)1 << 20) &&
	       ML_MAX(v->cg, v->mg) * v->n * (hp + 1) * wp <= ((int64_t)1 << 24);
}

/* dp_here: the vdpbf16ps kernels run on this CPU and pay (or are asked for) */
static bool
dp_here(void)
{
#ifdef HAVE_TDP
	return tg_level() == 2 && ml_bf16_path_ok(ML_BF16_DP) &&
	       (ml_bf16_dp_asked() || ml_bf16_dp_fast());
#else
	return false;
#endif
}

int
ml_train_conv_mode(const struct ml_node *n, const struct ml_conv3 *v)
{
	if (!ml_node_bf16(n))
		return ML_TC_F32;
	switch (ml_bf16_train_path()) {
	case 2:
		/* AMX's tiles; else vdpbf16ps where it issues at the FMA's rate; else f32 */
		return ml_train_amx_ok(v) ? ML_TC_BF16 : dp_here() ? ML_TC_DP : ML_TC_F32;
	case 1:
		/* what the native path would do: round, on AMX (unless vdpbf16ps is asked for) or vdpbf16ps */
		return (ml_bf16_path_ok(ML_BF16_AMX) && !ml_bf16_dp_asked()) || dp_here() ?
			       ML_TC_ROUND : ML_TC_F32;
	default:
		return ML_TC_F32;
	}
}

/* put_row: n floats of s into d, rounded to bf16 where bf is ML_TC_ROUND */
static void
put_row(const float *s, int64_t n, int bf, float *d)
{
	if (bf == ML_TC_ROUND)
		for (int64_t q = 0; q < n; q++)
			d[q] = rnd(s[q]);
	else
		for (int64_t q = 0; q < n; q++)
			d[q] = s[q];
}

/*
 * pad_planes: channels [c0, c0 + kc) of src [n][ctot][h][w] into dst
 * [kc][n][hp][wp] at row pt and column pl of each plane, zeros around,
 * and tail more zeros after; bf as put_row.
 */
static void
pad_planes(const float *src, int64_t n, int64_t ctot, int64_t c0, int64_t kc, int64_t h,
	   int64_t w, int64_t hp, int64_t wp, int64_t pt, int64_t pl, int64_t tail, int bf,
	   float *dst)
{
	int64_t plane = hp * wp, pr = wp - pl - w;
	for (int64_t c = 0; c < kc; c++)
		for (int64_t i = 0; i < n; i++) {
			const float *s = src + (i * ctot + c0 + c) * h * w;
			float *d = dst + (c * n + i) * plane;
			memset(d, 0, sizeof(float) * (size_t)(pt * wp + pl));
			d += pt * wp + pl;
			for (int64_t y = 0; y < h; y++, d += wp, s += w) {
				put_row(s, w, bf, d);
				for (int64_t q = 0; q < pr + (y + 1 < h ? pl : 0); q++)
					d[w + q] = 0.0f;
			}
			d -= pl;
			memset(d, 0, sizeof(float) * (size_t)((hp - pt - h) * wp));
		}
	memset(dst + kc * n * plane, 0, sizeof(float) * (size_t)tail);
}

/* offsets: boff of rows (ci, kh, kw) over planes [kc][n][hp][wp]. */
static void
offsets(int64_t *boff, int64_t kc, int64_t n, int64_t hp, int64_t wp, int64_t kh, int64_t kw)
{
	int64_t p = 0;
	for (int64_t c = 0; c < kc; c++)
		for (int64_t a = 0; a < kh; a++)
			for (int64_t b = 0; b < kw; b++)
				boff[p++] = c * n * hp * wp + a * wp + b;
}

/*
 * The pairs of ML_TC_DP's nn: a product over k = (channel, kh, kw) takes
 * two k per vdpbf16ps lane, so the padded planes [C][n][hp][wp] become
 * planes of pairs: of channels 2g and 2g + 1 (the last of an odd C with
 * zeros), the taps (g, kh, kw) their rows at offsets(); or, for one
 * channel and a window wider than 1 (LeNet's first layer), of the channel
 * and itself one column on, the taps (kh, 2g) and (kh, 2g + 1) one row
 * (the last of an odd window with weight 0: it reads the next column,
 * finite, whose product is dropped).
 */
static bool
dp_shift(int64_t C, int64_t kw)
{
	return C == 1 && kw > 1;
}

/* dp_planes: the pair planes of C channels; dp_rows: the pair rows (k / 2) */
static int64_t
dp_planes(int64_t C, int64_t kw)
{
	return dp_shift(C, kw) ? 1 : (C + 1) / 2;
}

static int64_t
dp_rows(int64_t C, int64_t kh, int64_t kw)
{
	return dp_shift(C, kw) ? kh * ((kw + 1) / 2) : (C + 1) / 2 * kh * kw;
}

#ifdef HAVE_TDP
/* dp_k: the k (of C * kh * kw) of pair row p, low and high; high -1: none */
static void
dp_k(int64_t C, int64_t kh, int64_t kw, int64_t p, int64_t *lo, int64_t *hi)
{
	if (dp_shift(C, kw)) {
		int64_t h = (kw + 1) / 2, g = p % h;
		*lo = p / h * kw + 2 * g;
		*hi = 2 * g + 1 < kw ? *lo + 1 : -1;
	} else {
		int64_t t = kh * kw, g = p / t;
		*lo = 2 * g * t + p % t;
		*hi = 2 * g + 1 < C ? *lo + t : -1;
	}
}

/*
 * dp_prep: from the padded f32 planes pl [C][n][hp][wp] (+ tail zeros),
 * the pair planes pr (+ tail), their rows' offsets boff, and A [m][C * kh
 * * kw]'s pairs packed as nn_pack packs (tiles of mr rows, zeros past m).
 */
static void
dp_prep(const float *pl, int64_t C, int64_t n, int64_t hp, int64_t wp, int64_t tail, int64_t kh,
	int64_t kw, const float *a, int64_t m, int mr, float *pr, int64_t *boff, float *pk)
{
	int64_t len = n * hp * wp, K = C * kh * kw, k2 = dp_rows(C, kh, kw);
	if (dp_shift(C, kw)) {
		bf_pairs(pl, pl + 1, len + tail - 1, pr);
		memset(pr + len + tail - 1, 0, sizeof(float));
		for (int64_t p = 0; p < k2; p++)
			boff[p] = p / ((kw + 1) / 2) * wp + 2 * (p % ((kw + 1) / 2));
	} else {
		int64_t G = (C + 1) / 2;
		for (int64_t g = 0; g < G; g++)
			bf_pairs(pl + 2 * g * len, 2 * g + 1 < C ? pl + (2 * g + 1) * len : NULL, len,
				 pr + g * len);
		memset(pr + G * len, 0, sizeof(float) * (size_t)tail);
		offsets(boff, G, n, hp, wp, kh, kw);
	}
	for (int64_t r0 = 0; r0 < m; r0 += mr)
		for (int64_t p = 0; p < k2; p++) {
			int64_t lo, hi;
			dp_k(C, kh, kw, p, &lo, &hi);
			for (int i = 0; i < mr; i++) {
				const float *row = a + (r0 + i) * K;
				uint32_t v = r0 + i >= m ? 0 : ml_f32_to_bf16(row[lo]) |
					(hi < 0 ? 0u : (uint32_t)ml_f32_to_bf16(row[hi]) << 16);
				memcpy(pk++, &v, sizeof v);
			}
		}
}
#endif

/* buffers: the scratch of one call; NULL when out of memory. */
static bool
buffers(int64_t nsrc, int64_t nout, int64_t nboff, int64_t na, float **src, float **out,
	int64_t **boff, float **a)
{
	size_t s = sizeof(float) * (size_t)nsrc, o = sizeof(float) * (size_t)nout;
	size_t bo = sizeof(int64_t) * (size_t)nboff, an = sizeof(float) * (size_t)na;
	s = (s + 63) / 64 * 64;
	bo = (bo + 63) / 64 * 64;
	uint8_t *p = ml_cpu_scratch(0, s + bo + an + 64);
	*out = ml_cpu_scratch(1, o + 64);
	if (p == NULL || *out == NULL)
		return false;
	*src = (float *)p;
	*boff = (int64_t *)(p + s);
	*a = (float *)(p + s + bo);
	return true;
}

static int64_t
li_of(int64_t oh, int64_t wp)
{
	return (oh * wp + LI_ALIGN - 1) / LI_ALIGN * LI_ALIGN;
}

int
ml_train_conv_fwd(struct ml_opctx *c, const struct ml_conv3 *v, int bf, const float *x,
		  const float *w, const float *bias, float *y)
{
	if (bf == ML_TC_BF16)
		return ml_train_amx_fwd(c, v, x, w, bias, y);
	int64_t H = v->in[1], W = v->in[2], kh = v->k[1], kw = v->k[2];
	int64_t hp = H + v->p[1] + v->pe[1], wp = W + v->p[2] + v->pe[2];
	int64_t oh = v->out[1], ow = v->out[2], K = v->cg * kh * kw, li = li_of(oh, wp);
	int64_t tail = wp + 2 * LI_ALIGN, nsrc = v->cg * v->n * hp * wp + tail;
	/* ML_TC_DP: the pair planes after the f32 ones, K / 2 pair rows */
	bool dp = bf == ML_TC_DP;
	int64_t k2 = dp ? dp_rows(v->cg, kh, kw) : K;
	int64_t npr = dp ? dp_planes(v->cg, kw) * v->n * hp * wp + tail : 0;
	float *src, *out, *a;
	int64_t *boff;
	if (!buffers(nsrc + npr, v->mg * v->n * li, k2, nn_packed_len(v->mg, k2), &src, &out,
		     &boff, &a))
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	if (!dp)
		offsets(boff, v->cg, v->n, hp, wp, kh, kw);
	struct wide j = { v->n, v->mg, k2, hp, wp, li, a, dp ? src + nsrc : src, boff, out,
			  tg_level(), 0, 1, dp, NULL };
	nn_pick(&j);
	int vw = nn_cols(&j);
	for (int64_t g = 0; g < v->group; g++) {
		pad_planes(x, v->n, v->cin, g * v->cg, v->cg, H, W, hp, wp, v->p[1], v->p[2], tail,
			   dp ? ML_TC_F32 : bf, src);
#ifdef HAVE_TDP
		if (dp)
			dp_prep(src, v->cg, v->n, hp, wp, tail, kh, kw, w + g * v->mg * K, v->mg,
				j.mr, src + nsrc, boff, a);
		else
#endif
			nn_pack(w + g * v->mg * K, v->mg, K, K, 1, j.mr, bf, a);
		int64_t items = v->n * (li / vw);
		ml_parallel_for(items, ML_MAX(1, 8192 / ML_MAX(1, v->mg * K)), nn_items, &j);
		for (int64_t i = 0; i < v->n; i++)
			for (int64_t m = 0; m < v->mg; m++) {
				const float *s = out + m * v->n * li + i * li;
				float *d = y + (i * v->cout + g * v->mg + m) * v->outsz;
				float b = bias != NULL ? bias[g * v->mg + m] : 0.0f;
				for (int64_t r = 0; r < oh; r++)
					for (int64_t q = 0; q < ow; q++)
						d[r * ow + q] = s[r * wp + q] + b;
			}
	}
	return 0;
}

void
ml_train_conv_flip(const struct ml_conv3 *v, const float *wg, float *a)
{
	int64_t kh = v->k[1], kw = v->k[2], K = v->mg * kh * kw;
	for (int64_t ci = 0; ci < v->cg; ci++)
		for (int64_t m = 0; m < v->mg; m++)
			for (int64_t p = 0; p < kh; p++)
				for (int64_t q = 0; q < kw; q++)
					a[ci * K + (m * kh + p) * kw + q] =
						wg[((m * v->cg + ci) * kh + kh - 1 - p) * kw + kw - 1 - q];
}

int
ml_train_conv_grad(struct ml_opctx *c, const struct ml_conv3 *v, int bf, bool gi,
		   const float *dy, const float *x, const float *w, float *out, float *db)
{
	int64_t H = v->in[1], W = v->in[2], kh = v->k[1], kw = v->k[2];
	int64_t oh = v->out[1], ow = v->out[2], rows = v->cg * kh * kw;
	int64_t wsz = v->mg * rows;
	int lv = tg_level();
	int vw = lv == 2 ? 16 : lv == 1 ? 8 : 4;
	float *src, *buf, *a;
	int64_t *boff;
	if (db != NULL)
		for (int64_t m = 0; m < v->cout; m++) {
			double s = 0;
			for (int64_t i = 0; i < v->n; i++) {
				const float *p = dy + (i * v->cout + m) * v->outsz;
				float l[8] = { 0 }, t = 0;
				int64_t q = 0;
				for (; q + 8 <= v->outsz; q += 8)
					for (int e = 0; e < 8; e++)
						l[e] += p[q + e];
				for (; q < v->outsz; q++)
					t += p[q];
				for (int e = 0; e < 8; e++)
					t += l[e];
				s += t;
			}
			db[m] = (float)s;
		}
	if (bf == ML_TC_BF16)
		return ml_train_amx_grad(c, v, gi, dy, x, w, out);
	if (gi) {
		/* dx = conv(dy padded by k - 1 - pad, W flipped, channels swapped) */
		int64_t hp = H + kh - 1, wp = W + kw - 1, li = li_of(H, wp);
		int64_t K = v->mg * kh * kw, tail = wp + 2 * LI_ALIGN;
		int64_t nsrc = v->mg * v->n * hp * wp + tail;
		bool dp = bf == ML_TC_DP;
		int64_t k2 = dp ? dp_rows(v->mg, kh, kw) : K;
		int64_t npr = dp ? dp_planes(v->mg, kw) * v->n * hp * wp + tail : 0;
		if (!buffers(nsrc + npr, v->cg * v->n * li, k2, v->cg * K + nn_packed_len(v->cg, k2),
			     &src, &buf, &boff, &a))
			return ml_opfail(c, ML_ENOMEM, "out of memory");
		if (!dp)
			offsets(boff, v->mg, v->n, hp, wp, kh, kw);
		float *pk = a + v->cg * K;
		struct wide j = { v->n, v->cg, k2, hp, wp, li, pk, dp ? src + nsrc : src, boff, buf,
				  lv, 0, 1, dp, NULL };
		nn_pick(&j);
		vw *= j.nc;
		for (int64_t g = 0; g < v->group; g++) {
			pad_planes(dy, v->n, v->cout, g * v->mg, v->mg, oh, ow, hp, wp,
				   kh - 1 - v->p[1], kw - 1 - v->p[2], tail, dp ? ML_TC_F32 : bf, src);
			ml_train_conv_flip(v, w + g * wsz, a);
#ifdef HAVE_TDP
			if (dp)
				dp_prep(src, v->mg, v->n, hp, wp, tail, kh, kw, a, v->cg, j.mr,
					src + nsrc, boff, pk);
			else
#endif
				nn_pack(a, v->cg, K, K, 1, j.mr, bf, pk);
			ml_parallel_for(v->n * (li / vw), ML_MAX(1, 8192 / ML_MAX(1, v->cg * K)),
					nn_items, &j);
			for (int64_t i = 0; i < v->n; i++)
				for (int64_t ci = 0; ci < v->cg; ci++) {
					const float *s = buf + ci * v->n * li + i * li;
					float *d = out + (i * v->cin + g * v->cg + ci) * v->insz;
					for (int64_t r = 0; r < H; r++)
						for (int64_t q = 0; q < W; q++)
							d[r * W + q] = s[r * wp + q];
				}
		}
		return 0;
	}
	/* dW_g = dy_g widened (zeros in the junk columns) times the padded x's rows */
	/* ML_TC_DP: both operands in bf16 (in place), whole vectors of 32 positions */
	bool dp = bf == ML_TC_DP;
	int64_t hp = H + v->p[1] + v->pe[1], wp = W + v->p[2] + v->pe[2];
	int64_t li = dp ? (oh * wp + 31) / 32 * 32 : li_of(oh, wp);
	int64_t tail = wp + 2 * LI_ALIGN, nsrc = v->cg * v->n * hp * wp + tail;
	if (!buffers(nsrc, v->mg * v->n * li, rows, 0, &src, &buf, &boff, &a))
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	offsets(boff, v->cg, v->n, hp, wp, kh, kw);
	(void)vw;
	struct wide j = { v->n, v->mg, rows, hp, wp, li, buf, src, boff, NULL, lv, 0, 1, dp, NULL };
	for (int64_t g = 0; g < v->group; g++) {
		pad_planes(x, v->n, v->cin, g * v->cg, v->cg, H, W, hp, wp, v->p[1], v->p[2], tail,
			   dp ? ML_TC_F32 : bf, src);
		for (int64_t m = 0; m < v->mg; m++)
			for (int64_t i = 0; i < v->n; i++) {
				const float *s = dy + (i * v->cout + g * v->mg + m) * v->outsz;
				float *d = buf + m * v->n * li + i * li;
				for (int64_t r = 0; r < oh; r++, d += wp, s += ow) {
					put_row(s, ow, bf, d);
					for (int64_t q = ow; q < wp; q++)
						d[q] = 0.0f;
				}
				for (int64_t q = oh * wp; q < li; q++)
					d[q - oh * wp] = 0.0f;
			}
#ifdef HAVE_TDP
		if (dp) {
			bf_inplace(src, nsrc);
			bf_inplace(buf, v->mg * v->n * li);
		}
#endif
		j.out = out + g * wsz;
		int nr = lv >= 1 ? 4 : 2;
		ml_parallel_for((rows + nr - 1) / nr, 1, nt_items, &j);
	}
	return 0;
}
