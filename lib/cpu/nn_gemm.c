/*
 * nn_gemm.c: an AVX-512 SGEMM for the convolutions, C[m, n] = A[m, k] B
 * (+ bias per row, or + C), row-major, with B given packed in panels of
 * ML_PG_NR columns (im2col writes that layout directly, so B is never
 * copied twice). It exists because OpenBLAS builds older than the CPU
 * fall back to AVX2 kernels, at about 60% of this speed on AVX-512 CPUs.
 *
 * The micro-kernel keeps a 12 x 32 block of C in 24 zmm registers and
 * streams one 32-wide row of a B panel and 12 broadcast A values per k;
 * K is blocked by KC so that a panel's block stays in L1 while every row
 * block of A passes over it, and the rows of A of a work item stay in L2
 * while it passes over a run of panels. Work items (a group of row blocks
 * by a run of panels) split over ml_parallel_for; this is not BLAS, so
 * pool threads may run it. On CPUs with AVX2 and FMA but no AVX-512F, a 6 x 16
 * micro-kernel (12 ymm accumulators, the shape of BLIS's Haswell kernel)
 * passes over each half of the 32-wide panels instead: OpenBLAS's own
 * SGEMM would need B unpacked and copied again, and its threads fight the
 * pool's. Off x86-64, or on CPUs with neither, ml_pgemm_ok() is false and
 * callers use BLAS. The file also holds the GEMV that
 * ml_sgemm uses for a single row or column (see ml_sgemv_own), and
 * ml_tgemm, the same micro-kernel for a training step's dense layers with
 * their epilogues (bias, Relu, the Relu gradient's mask, an SGD update).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <stdatomic.h>

#include "cpu/nn.h"
#include "ops/fused.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_PGEMM 1
#include <immintrin.h>
#include "cpu/tile512.h"
#endif

#define KC 256			/* k block: a panel block of KC x 32 floats is 32 KB */
/*
 * The k block of B given by rows (ml_pgemm_rows, the implicit GEMM of
 * nn_flat.c): its rows are runs of padded planes that overlap (a 3x3
 * window's 9 rows of a channel span 3 plane rows), so twice KC still fits
 * L1, and each block's pass over C costs half as often (ResNet-18's 7x7
 * and 14x14 layers, K 2304 and 4608: the model 6% faster).
 */
#define KC_ROWS 512
#define MB 96			/* rows per work item: 8 blocks of 12 */

int
ml_cpu_fma_level(const char *env_name)
{
#if defined(__x86_64__) && defined(__GNUC__)
	const char *env = getenv(env_name);
	__builtin_cpu_init();
	int v = __builtin_cpu_supports("avx512f") ? 2 :
		__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
	if (v == 2 && env != NULL && strcmp(env, "avx2") == 0)
		v = 1;
	if (env != NULL && strcmp(env, "0") == 0)
		v = 0;
	return v;
#else
	(void)env_name;
	return 0;
#endif
}

/* pgemm_level: ml_cpu_fma_level("ML_PGEMM"), computed once. */
static int
pgemm_level(void)
{
#ifdef HAVE_PGEMM
	/* -1 until known; racing first callers compute the same value */
	static atomic_int level = -1;
	int v = atomic_load_explicit(&level, memory_order_relaxed);
	if (v < 0) {
		/* ML_PGEMM=avx2 forces the AVX2 kernel, ML_PGEMM=0 BLAS (tests, comparisons) */
		v = ml_cpu_fma_level("ML_PGEMM");
		atomic_store_explicit(&level, v, memory_order_relaxed);
	}
	return v;
#else
	return 0;
#endif
}

bool
ml_pgemm_ok(void)
{
#ifdef HAVE_PGEMM
	return pgemm_level() > 0;
#else
	return false;
#endif
}

bool
ml_pgemm_avx2(void)
{
#ifdef HAVE_PGEMM
	return pgemm_level() == 1;
#else
	return false;
#endif
}

int64_t
ml_pgemm_packed_len(int64_t k, int64_t n)
{
	return (n + ML_PG_NR - 1) / ML_PG_NR * ML_PG_NR * k;
}

#ifdef HAVE_PGEMM
/*
 * KERN(R): C[R rows (mr valid), 32 columns (masks m0, m1 valid)] =
 * sum over kc of A[., k] B[k, .], plus, by mode: 0 the bias (NULL: 0),
 * 1 the current C. Rows past mr read row 0 of A and are not stored.
 */
/*
 * PG_PRODUCT_AT(R, kc, LOAD, ROW): the register tile every kernel here
 * computes: c0, c1[i] (columns 0-15, 16-31 of row i) = sum over k < kc of
 * ar[i][k] times the 32 floats of B's row k, which start at ROW (an
 * expression of k) and are read with LOAD, for the R rows ar[] (declared
 * by the caller). PG_PRODUCT(R, kc, bp): B a packed panel at bp (aligned).
 */
#define PG_PRODUCT_AT(R, kc, LOAD, ROW)						\
	__m512 c0[R], c1[R];							\
	for (int i = 0; i < R; i++) {						\
		c0[i] = _mm512_setzero_ps();					\
		c1[i] = _mm512_setzero_ps();					\
	}									\
	for (int64_t k = 0; k < (kc); k++) {					\
		__m512 b0 = LOAD(ROW);						\
		__m512 b1 = LOAD((ROW) + 16);					\
		_Pragma("GCC unroll 12")					\
		for (int i = 0; i < R; i++) {					\
			__m512 av = _mm512_set1_ps(ar[i][k]);			\
			c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);			\
			c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);			\
		}								\
	}
#define PG_PRODUCT(R, kc, bp) PG_PRODUCT_AT(R, kc, _mm512_load_ps, (bp) + k * ML_PG_NR)

#define KERN(R)									\
__attribute__((target("avx512f")))						\
static void									\
kern##R(int64_t kc, const float *a, int64_t lda, const float *bp, float *c, int64_t ldc, \
	int mr, __mmask16 m0, __mmask16 m1, const float *bias, int mode)		\
{										\
	const float *ar[R];							\
	for (int i = 0; i < R; i++)						\
		ar[i] = a + (i < mr ? i : 0) * lda;				\
	PG_PRODUCT(R, kc, bp)							\
	TILE512_STORE(c0, c1, mr, c, ldc, m0, m1, bias, mode)			\
}
KERN(12)
KERN(8)
KERN(4)

/*
 * KERNN(R): C[R rows (mr valid), n <= 16 columns (mask m0)] = A B (+ the
 * rows' bias), B's row k the n floats at b + off[k] (all 16 read): the
 * narrow products (planes of 16 or fewer positions) that a 32-wide panel
 * would half waste. (A masked load, or a conditional start, made GCC keep
 * the accumulators in memory.)
 */
#define KERNN(R)								\
__attribute__((target("avx512f")))						\
static void									\
kernn##R(int64_t kc, const float *a, int64_t lda, const float *b, const int32_t *off, float *c, \
	 int64_t ldc, int mr, __mmask16 m0, const float *bias)			\
{										\
	const float *ar[R];							\
	for (int i = 0; i < R; i++)						\
		ar[i] = a + (i < mr ? i : 0) * lda;				\
	__m512 acc[R];								\
	for (int i = 0; i < R; i++)						\
		acc[i] = _mm512_setzero_ps();					\
	for (int64_t k = 0; k < kc; k++) {					\
		__m512 bv = _mm512_loadu_ps(b + off[k]);			\
		_Pragma("GCC unroll 12")					\
		for (int i = 0; i < R; i++)					\
			acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(ar[i][k]), bv, acc[i]); \
	}									\
	for (int i = 0; i < mr; i++) {						\
		__m512 x = _mm512_set1_ps(bias != NULL ? bias[i] : 0.0f);	\
		_mm512_mask_storeu_ps(c + i * ldc, m0, _mm512_add_ps(acc[i], x)); \
	}									\
}
KERNN(12)
KERNN(4)

/*
 * KERNR(R): KERN with B given by rows: row k of the 32 columns at b +
 * off[k] (unaligned; all 32 are read, whatever m0 and m1 store), so that
 * B can be rows of padded input planes read in place (ml_pgemm_rows)
 * instead of packed panels. (Masked loads, which would let a row end at
 * the last column, made GCC keep the accumulators in memory.)
 */
#define KERNR(R)								\
__attribute__((target("avx512f")))						\
static void									\
kernr##R(int64_t kc, const float *a, int64_t lda, const float *b, const int32_t *off, float *c, \
	 int64_t ldc, int mr, __mmask16 m0, __mmask16 m1, const float *bias, int mode) \
{										\
	const float *ar[R];							\
	for (int i = 0; i < R; i++)						\
		ar[i] = a + (i < mr ? i : 0) * lda;				\
	PG_PRODUCT_AT(R, kc, _mm512_loadu_ps, b + off[k])			\
	TILE512_STORE(c0, c1, mr, c, ldc, m0, m1, bias, mode)			\
}
KERNR(12)
KERNR(8)
KERNR(4)

/*
 * KERNU(R): KERN over a panel that need not be aligned (unaligned loads),
 * for ml_pgemm_panel: mlopt's packed weights in a file are where the file
 * puts them.
 */
#define KERNU(R)								\
__attribute__((target("avx512f")))						\
static void									\
kernu##R(int64_t kc, const float *a, int64_t lda, const float *bp, float *c, int64_t ldc, \
	 int mr, __mmask16 m0, __mmask16 m1)					\
{										\
	const float *ar[R];							\
	for (int i = 0; i < R; i++)						\
		ar[i] = a + (i < mr ? i : 0) * lda;				\
	PG_PRODUCT_AT(R, kc, _mm512_loadu_ps, bp + k * ML_PG_NR)		\
	TILE512_STORE(c0, c1, mr, c, ldc, m0, m1, (const float *)NULL, 0)	\
}
KERNU(8)
KERNU(4)
KERNU(2)
KERNU(1)

/*
 * KERN2(NAME, R, ROW): the AVX2 kernel: C[R rows (mr valid), w <= 32
 * columns] as KERN, one 16-column half of the panel at a time (R x 2 ymm
 * accumulators). B's row k of a half starts at ROW, an expression of b
 * (the half's first column) and k: k2_R reads a packed panel, k2r_R rows
 * at b + off[k] as KERNR does (all 16 columns of a half it computes are
 * read; off is unused by k2_R).
 */
#define KERN2(NAME, R, ROW)							\
__attribute__((target("avx2,fma")))						\
static void									\
NAME(int64_t kc, const float *a, int64_t lda, const float *bp, const int32_t *off, float *c, \
     int64_t ldc, int mr, int w, const float *bias, int mode)			\
{										\
	const float *ar[R];							\
	(void)off;								\
	for (int i = 0; i < R; i++)						\
		ar[i] = a + (i < mr ? i : 0) * lda;				\
	for (int h = 0; h < 2 && 16 * h < w; h++) {				\
		__m256 c0[R], c1[R];						\
		const float *b = bp + 16 * h;					\
		for (int i = 0; i < R; i++) {					\
			c0[i] = _mm256_setzero_ps();				\
			c1[i] = _mm256_setzero_ps();				\
		}								\
		if (w - 16 * h <= 8) {						\
			/* 8 columns or fewer left: half the multiply-adds */	\
			for (int64_t k = 0; k < kc; k++) {			\
				__m256 b0 = _mm256_loadu_ps(ROW);		\
				_Pragma("GCC unroll 6")				\
				for (int i = 0; i < R; i++)			\
					c0[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(ar[i] + k), \
								b0, c0[i]);	\
			}							\
		} else {							\
			for (int64_t k = 0; k < kc; k++) {			\
				__m256 b0 = _mm256_loadu_ps(ROW);		\
				__m256 b1 = _mm256_loadu_ps((ROW) + 8);		\
				_Pragma("GCC unroll 6")				\
				for (int i = 0; i < R; i++) {			\
					__m256 av = _mm256_broadcast_ss(ar[i] + k); \
					c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);	\
					c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);	\
				}						\
			}							\
		}								\
		int wh = w - 16 * h < 16 ? w - 16 * h : 16;			\
		_Pragma("GCC unroll 6")						\
		for (int i = 0; i < R; i++) {					\
			if (i >= mr)						\
				continue;					\
			float *cr = c + i * ldc + 16 * h;			\
			float add = mode == 1 ? 0.0f : bias != NULL ? bias[i] : 0.0f; \
			if (wh == 16) {						\
				__m256 x0 = mode == 1 ? _mm256_loadu_ps(cr) : _mm256_set1_ps(add); \
				__m256 x1 = mode == 1 ? _mm256_loadu_ps(cr + 8) : _mm256_set1_ps(add); \
				_mm256_storeu_ps(cr, _mm256_add_ps(c0[i], x0));	\
				_mm256_storeu_ps(cr + 8, _mm256_add_ps(c1[i], x1)); \
			} else {						\
				float t[16];					\
				_mm256_storeu_ps(t, c0[i]);			\
				_mm256_storeu_ps(t + 8, c1[i]);			\
				for (int jj = 0; jj < wh; jj++)			\
					cr[jj] = t[jj] + (mode == 1 ? cr[jj] : add); \
			}							\
		}								\
	}									\
}
/* k2_fn: the signature every KERN2 kernel has */
typedef void (*k2_fn)(int64_t kc, const float *a, int64_t lda, const float *bp, const int32_t *off,
		      float *c, int64_t ldc, int mr, int w, const float *bias, int mode);
KERN2(k2_6, 6, b + k * ML_PG_NR)
KERN2(k2_4, 4, b + k * ML_PG_NR)
KERN2(k2_3, 3, b + k * ML_PG_NR)
KERN2(k2_2, 2, b + k * ML_PG_NR)
KERN2(k2_1, 1, b + k * ML_PG_NR)
KERN2(k2r_6, 6, b + off[k])
KERN2(k2r_3, 3, b + off[k])

/*
 * KERNW2(NAME, R): the AVX2 kernel of the streamed products (ml_pgemm_panel):
 * C[R rows, w columns (17..32)] = A B for one whole packed panel, all 32
 * columns of a row of B per k (R x 4 ymm accumulators). k2_R passes over
 * the panel once per 16-column half, reading every other 64-byte line of
 * it each time: where B comes from memory (a FusedMatMul of a few rows
 * against megabytes of weights, ConvNeXt's last stages) that stride cost
 * half the bandwidth of a sequential read.
 */
#define KERNW2(NAME, R)								\
__attribute__((target("avx2,fma")))						\
static void									\
NAME(int64_t kc, const float *a, int64_t lda, const float *bp, float *c, int64_t ldc, int w) \
{										\
	__m256 acc[R][4];							\
	for (int i = 0; i < R; i++)						\
		for (int v = 0; v < 4; v++)					\
			acc[i][v] = _mm256_setzero_ps();			\
	for (int64_t k = 0; k < kc; k++) {					\
		const float *b = bp + k * ML_PG_NR;				\
		_Pragma("GCC unroll 3")						\
		for (int i = 0; i < R; i++) {					\
			__m256 av = _mm256_broadcast_ss(a + i * lda + k);	\
			_Pragma("GCC unroll 4")					\
			for (int v = 0; v < 4; v++)				\
				acc[i][v] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + 8 * v), \
							    acc[i][v]);		\
		}								\
	}									\
	_Pragma("GCC unroll 3")							\
	for (int i = 0; i < R; i++) {						\
		float t[32];							\
		float *cr = c + i * ldc;					\
		float *d = w == 32 ? cr : t;					\
		for (int v = 0; v < 4; v++)					\
			_mm256_storeu_ps(d + 8 * v, acc[i][v]);			\
		if (w < 32)							\
			memcpy(cr, t, sizeof(float) * (size_t)w);		\
	}									\
}
KERNW2(kw2_3, 3)
KERNW2(kw2_2, 2)
KERNW2(kw2_1, 1)

struct pg_job {
	int64_t m, n, k, lda, ldc;
	int64_t rb;			/* rows of a block: the micro-kernel's 12, or AVX2's 6 */
	int64_t nblk, ngroups;		/* blocks of C's rows, and groups of them */
	int64_t npan, npchunks;		/* 32-column panels, and runs of them */
	const float *a, *bp, *bias;
	float *c;
	bool accumulate;
	int64_t per;			/* items per product of the batch */
	int64_t sa, sb, sc;		/* batch strides of A, B (packed) and C */
	int level;			/* pgemm_level() */
	const int32_t *boff;		/* ml_pgemm_rows: B's row k at bp + boff[k], else NULL */
	/* ml_pgemm_own: each thread's B, built by fill into its scratch slot */
	void (*fill)(void *ctx, float *b);
	void *fctx;
	size_t fbytes;
	int fslot;
	uint64_t fid;			/* the call, so that a thread builds its B once for it */
	atomic_int *nomem;
	const struct ml_conv_epi *epi;	/* applied to each item's block of C once complete, or NULL */
};

/*
 * pg_block: C rows [i0, i1) by panel jp for the k block [kc, kc + kk) of
 * one product, through the micro-kernels.
 */
static void
pg_block(const struct pg_job *j, const float *A, const float *panel, float *Cb, int64_t jp,
	 int64_t i0, int64_t i1, int64_t kc, int64_t kk)
{
	int64_t n0 = jp * ML_PG_NR, w = ML_MIN(ML_PG_NR, j->n - n0);
	__mmask16 m0 = (__mmask16)(w >= 16 ? 0xffff : (1u << w) - 1);
	__mmask16 m1 = (__mmask16)(w >= 32 ? 0xffff : w <= 16 ? 0 : (1u << (w - 16)) - 1);
	int mode = kc > 0 || j->accumulate ? 1 : 0;
	const float *bpk = panel + kc * ML_PG_NR;

	for (int64_t i = i0; i < i1;) {
		int64_t rem = i1 - i;
		const float *a = A + i * j->lda + kc;
		float *c = Cb + i * j->ldc + n0;
		const float *bias = j->bias != NULL ? j->bias + i : NULL;
		if (j->level == 1) {
			/* AVX2: the panel's k block, or B by rows (panel is bp + n0, its rows at boff) */
			int mr = (int)ML_MIN(rem, rem > 3 ? 6 : 3);
			k2_fn kern = j->boff != NULL ? (mr > 3 ? k2r_6 : k2r_3) : (mr > 3 ? k2_6 : k2_3);
			kern(kk, a, j->lda, j->boff != NULL ? panel : bpk,
			     j->boff != NULL ? j->boff + kc : NULL, c, j->ldc, mr, (int)w, bias, mode);
			i += mr;
		} else if (j->boff != NULL) {
			/* B by rows: panel is bp + n0, its rows at boff */
			int mr = (int)ML_MIN(rem, 12);
			if (rem > 8)
				kernr12(kk, a, j->lda, panel, j->boff + kc, c, j->ldc, mr, m0, m1, bias,
					mode);
			else if (rem > 4)
				kernr8(kk, a, j->lda, panel, j->boff + kc, c, j->ldc, mr, m0, m1, bias,
				       mode);
			else
				kernr4(kk, a, j->lda, panel, j->boff + kc, c, j->ldc, mr, m0, m1, bias,
				       mode);
			i += mr;
		} else if (rem > 8) {
			int mr = (int)ML_MIN(rem, 12);
			kern12(kk, a, j->lda, bpk, c, j->ldc, mr, m0, m1, bias, mode);
			i += mr;
		} else if (rem > 4) {
			kern8(kk, a, j->lda, bpk, c, j->ldc, (int)rem, m0, m1, bias, mode);
			i += rem;
		} else {
			kern4(kk, a, j->lda, bpk, c, j->ldc, (int)rem, m0, m1, bias, mode);
			i += rem;
		}
	}
}

/*
 * An item is a group of row blocks by a run of panels. Per k block, the
 * group's rows of A (at most MB x KC floats, which stay in L2) pass over
 * each panel of the run in turn, and each panel's k block (32 KB) stays
 * in L1 while the row blocks pass over it; so A is read from memory once
 * per run of panels, not once per panel, which is what matters when N is
 * small (the 14x14 and 7x7 layers, whose weights are megabytes).
 */
static void
pg_items(void *ctx, int64_t b, int64_t e)
{
	const struct pg_job *j = ctx;
	const float *bbase = j->bp;

	if (j->fill != NULL) {
		/* the call whose B this thread's slot holds */
		static _Thread_local uint64_t built;
		float *own = ml_cpu_scratch(j->fslot, j->fbytes);
		if (own == NULL) {
			atomic_store(j->nomem, 1);
			return;
		}
		if (built != j->fid) {
			j->fill(j->fctx, own);
			built = j->fid;
		}
		bbase = own;
	}
	for (int64_t it0 = b; it0 < e; it0++) {
		int64_t bi = it0 / j->per, it = it0 % j->per;
		int64_t g = it / j->npchunks, pc = it % j->npchunks;
		const float *A = j->a + bi * j->sa;
		float *Cb = j->c + bi * j->sc;
		int64_t i0 = g * j->nblk / j->ngroups * j->rb;
		int64_t i1 = ML_MIN(j->m, (g + 1) * j->nblk / j->ngroups * j->rb);
		int64_t p0 = pc * j->npan / j->npchunks, p1 = (pc + 1) * j->npan / j->npchunks;
		int64_t kcb = j->boff != NULL ? KC_ROWS : KC;
		for (int64_t kc = 0; kc < j->k; kc += kcb) {
			int64_t kk = ML_MIN(kcb, j->k - kc);
			for (int64_t jp = p0; jp < p1; jp++) {
				const float *panel = j->boff != NULL ? bbase + jp * ML_PG_NR :
						     bbase + bi * j->sb + jp * ML_PG_NR * j->k;
				pg_block(j, A, panel, Cb, jp, i0, i1, kc, kk);
			}
		}
		if (j->epi != NULL && i1 > i0 && p1 > p0) {
			/* the item's block of C, whole now and still in cache */
			int64_t n0 = p0 * ML_PG_NR, n1 = ML_MIN(j->n, p1 * ML_PG_NR);
			int64_t at = bi * j->sc + i0 * j->ldc + n0;
			ml_fused_tile_epi(j->c + at, i1 - i0, n1 - n0, j->ldc, NULL,
					  j->epi->z != NULL ? j->epi->z + at : NULL, j->epi->act,
					  j->epi->lo, j->epi->hi);
		}
	}
}
#endif

#ifdef HAVE_PGEMM
/*
 * pg_setup: j for nb products over nt threads: groups of about MB rows,
 * whole blocks of rb rows each, spread evenly, and the fewest runs of
 * panels that still give each thread two items per product; where the
 * panels are too few for that (small planes), one group per thread.
 */
static void
pg_setup(struct pg_job *j, int64_t nt)
{
	j->level = pgemm_level();
	j->rb = j->level == 1 ? 6 : 12;
	j->nblk = (j->m + j->rb - 1) / j->rb;
	j->ngroups = (j->nblk + MB / j->rb - 1) / (MB / j->rb);
	j->npan = (j->n + ML_PG_NR - 1) / ML_PG_NR;
	j->npchunks = ML_MAX(1, ML_MIN(j->npan, (2 * nt + j->ngroups - 1) / j->ngroups));
	/* few panels (small planes): smaller groups of rows, one for each thread */
	if (j->ngroups * j->npchunks < nt && j->ngroups < j->nblk)
		j->ngroups = ML_MIN(j->nblk, (nt + j->npchunks - 1) / j->npchunks);
	j->per = j->ngroups * j->npchunks;
}

/* pg_empty: C for k == 0: the bias, or C as it is */
static void
pg_empty(const struct pg_job *j, int64_t nb)
{
	for (int64_t bi = 0; bi < nb && !j->accumulate; bi++)
		for (int64_t i = 0; i < j->m; i++)
			for (int64_t jj = 0; jj < j->n; jj++)
				j->c[bi * j->sc + i * j->ldc + jj] = j->bias != NULL ? j->bias[i] : 0.0f;
}

/* pg_one: the product j (one, B packed or by rows) over the pool */
static void
pg_one(struct pg_job *j)
{
	if (j->k <= 0) {
		pg_empty(j, 1);
		return;
	}
	pg_setup(j, ml_get_threads());
	int64_t work = ML_MAX(1, j->m / j->ngroups * ML_PG_NR * j->npan / j->npchunks * j->k);
	ml_parallel_for(j->per, ML_MAX(1, (int64_t)(1 << 20) / work), pg_items, j);
}
#endif

void
ml_pgemm_batch(int64_t nb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
	       int64_t sa, const float *bp, int64_t sb, const float *bias, float *c, int64_t ldc,
	       int64_t sc, bool accumulate)
{
#ifdef HAVE_PGEMM
	if (m <= 0 || n <= 0 || nb <= 0)
		return;
	struct pg_job j = { .m = m, .n = n, .k = k, .lda = lda, .ldc = ldc, .a = a, .bp = bp,
			    .bias = bias, .c = c, .accumulate = accumulate, .sa = sa, .sb = sb,
			    .sc = sc };
	if (k <= 0) {
		pg_empty(&j, nb);
		return;
	}
	pg_setup(&j, ml_get_threads());
	/* an item's multiply-adds against what a thread costs */
	int64_t work = ML_MAX(1, m / j.ngroups * ML_PG_NR * j.npan / j.npchunks * k);
	int64_t grain = ML_MAX(1, (int64_t)(1 << 20) / work);
	ml_parallel_for(nb * j.per, grain, pg_items, &j);
#else
	(void)nb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)sa, (void)bp, (void)sb;
	(void)bias, (void)c, (void)ldc, (void)sc, (void)accumulate;
	ML_ASSERT(!"ml_pgemm without AVX-512 or AVX2 support");
#endif
}

void
ml_pgemm_serial(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *bp,
		const float *bias, float *c, int64_t ldc, bool accumulate)
{
#ifdef HAVE_PGEMM
	if (m <= 0 || n <= 0)
		return;
	struct pg_job j = { .m = m, .n = n, .k = k, .lda = lda, .ldc = ldc, .a = a, .bp = bp,
			    .bias = bias, .c = c, .accumulate = accumulate };
	if (k <= 0) {
		pg_empty(&j, 1);
		return;
	}
	pg_setup(&j, 1);
	pg_items(&j, 0, j.per);
#else
	(void)m, (void)n, (void)k, (void)a, (void)lda, (void)bp, (void)bias, (void)c, (void)ldc;
	(void)accumulate;
	ML_ASSERT(!"ml_pgemm without AVX-512 or AVX2 support");
#endif
}

void
ml_pgemm_panel(int64_t m, int64_t k, const float *a, int64_t lda, const float *panel, float *c,
	       int64_t ldc, int64_t w, bool stream)
{
#ifdef HAVE_PGEMM
	int level = pgemm_level();
	ML_ASSERT(level > 0 && w >= 1 && w <= ML_PG_NR);
	__mmask16 m0 = (__mmask16)(w >= 16 ? 0xffff : (1u << w) - 1);
	__mmask16 m1 = (__mmask16)(w >= 32 ? 0xffff : w <= 16 ? 0 : (1u << (w - 16)) - 1);
	/*
	 * the fewest rows of kernel that hold what is left: 8, 4, 2, 1 (AVX2: 3,
	 * 2, 1 of whole rows of the panel, or 6, 4, 2, 1 of its first half)
	 */
	for (int64_t i = 0; i < m;) {
		const float *ai = a + i * lda;
		float *ci = c + i * ldc;
		bool whole = level == 1 && stream && w > 16;
		int64_t r = ML_MIN(m - i, level == 2 ? 8 : whole ? 3 : 6);
		if (whole)
			/* AVX2, a panel's second half too: whole rows of B, 3 rows of A at a time */
			(r == 3 ? kw2_3 : r == 2 ? kw2_2 : kw2_1)(k, ai, lda, panel, ci, ldc, (int)w);
		else if (level == 2 && r > 4)
			kernu8(k, ai, lda, panel, ci, ldc, (int)r, m0, m1);
		else if (level == 2 && r > 2)
			kernu4(k, ai, lda, panel, ci, ldc, (int)r, m0, m1);
		else if (level == 2 && r == 2)
			kernu2(k, ai, lda, panel, ci, ldc, (int)r, m0, m1);
		else if (level == 2)
			kernu1(k, ai, lda, panel, ci, ldc, (int)r, m0, m1);
		else
			(r > 4 ? k2_6 : r > 2 ? k2_4 : r == 2 ? k2_2 : k2_1)(k, ai, lda, panel, NULL, ci,
									 ldc, (int)r, (int)w, NULL, 0);
		i += r;
	}
#else
	(void)m, (void)k, (void)a, (void)lda, (void)panel, (void)c, (void)ldc, (void)w, (void)stream;
	ML_ASSERT(!"ml_pgemm_panel without AVX-512 or AVX2");
#endif
}

bool
ml_pgemm_rows_ok(void)
{
#ifdef HAVE_PGEMM
	return pgemm_level() > 0;
#else
	return false;
#endif
}

void
ml_pgemm_rows(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
	      const int32_t *boff, const float *bias, float *c, int64_t ldc)
{
	ml_pgemm_rows_epi(m, n, k, a, lda, b, boff, bias, c, ldc, NULL);
}

void
ml_pgemm_rows_epi(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
		  const int32_t *boff, const float *bias, float *c, int64_t ldc,
		  const struct ml_conv_epi *e)
{
#ifdef HAVE_PGEMM
	/* k == 0 leaves C at the bias (pg_empty), which no epilogue follows */
	ML_ASSERT(pgemm_level() > 0 && (k > 0 || e == NULL));
	if (m <= 0 || n <= 0)
		return;
	struct pg_job j = { .m = m, .n = n, .k = k, .lda = lda, .ldc = ldc, .a = a, .bp = b,
			    .bias = bias, .c = c, .boff = boff, .epi = e };
	pg_one(&j);
#else
	(void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)boff, (void)bias, (void)c;
	(void)ldc, (void)e;
	ML_ASSERT(!"ml_pgemm_rows without AVX-512 or AVX2");
#endif
}

int
ml_pgemm_own(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
	     void (*fill)(void *ctx, float *b), void *ctx, size_t bbytes, int slot,
	     const int32_t *boff, const float *bias, float *c, int64_t ldc)
{
#ifdef HAVE_PGEMM
	static atomic_uint_fast64_t calls;
	atomic_int nomem;

	ML_ASSERT(pgemm_level() > 0 && slot >= 0 && slot < ML_SCRATCH_SLOTS);
	if (m <= 0 || n <= 0)
		return 0;
	atomic_init(&nomem, 0);
	struct pg_job j = { .m = m, .n = n, .k = k, .lda = lda, .ldc = ldc, .a = a, .bias = bias,
			    .c = c, .boff = boff, .fill = fill, .fctx = ctx, .fbytes = bbytes,
			    .fslot = slot, .fid = atomic_fetch_add(&calls, 1) + 1, .nomem = &nomem };
	pg_one(&j);
	return atomic_load(&nomem) ? -1 : 0;
#else
	(void)m, (void)n, (void)k, (void)a, (void)lda, (void)fill, (void)ctx, (void)bbytes;
	(void)slot, (void)boff, (void)bias, (void)c, (void)ldc;
	ML_ASSERT(!"ml_pgemm_own without AVX-512 or AVX2");
	return -1;
#endif
}

struct pn_job {
	int64_t m, n, k, lda, ldc;
	const float *a, *b, *bias;
	const int32_t *boff;
	float *c;
	int level;			/* pgemm_level() */
};

#ifdef HAVE_PGEMM
/* pn_rows: blocks [b, e) of 12 rows of ml_pgemm_narrow's C */
static void
pn_rows(void *ctx, int64_t b, int64_t e)
{
	const struct pn_job *j = ctx;
	__mmask16 m0 = (__mmask16)(j->n >= 16 ? 0xffff : (1u << j->n) - 1);

	for (int64_t blk = b; blk < e; blk++) {
		int64_t i = blk * 12, rem = j->m - i;
		const float *bias = j->bias != NULL ? j->bias + i : NULL;
		if (j->level == 1) {
			/* AVX2: the block's rows 6 at a time, one 16-column half */
			for (int64_t r = 0; r < ML_MIN(rem, 12); r += 6) {
				int mr = (int)ML_MIN(rem - r, 6);
				const float *a = j->a + (i + r) * j->lda;
				float *cr = j->c + (i + r) * j->ldc;
				const float *br = bias != NULL ? bias + r : NULL;
				if (mr > 3)
					k2r_6(j->k, a, j->lda, j->b, j->boff, cr, j->ldc, mr, (int)j->n,
					      br, 0);
				else
					k2r_3(j->k, a, j->lda, j->b, j->boff, cr, j->ldc, mr, (int)j->n,
					      br, 0);
			}
		} else if (rem > 4)
			kernn12(j->k, j->a + i * j->lda, j->lda, j->b, j->boff, j->c + i * j->ldc, j->ldc,
				(int)ML_MIN(rem, 12), m0, bias);
		else
			kernn4(j->k, j->a + i * j->lda, j->lda, j->b, j->boff, j->c + i * j->ldc, j->ldc,
			       (int)rem, m0, bias);
	}
}
#endif

void
ml_pgemm_narrow(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
		const int32_t *boff, const float *bias, float *c, int64_t ldc)
{
#ifdef HAVE_PGEMM
	ML_ASSERT(pgemm_level() > 0 && n <= 16);
	struct pn_job j = { m, n, k, lda, ldc, a, b, bias, boff, c, pgemm_level() };
	if (m <= 0 || n <= 0)
		return;
	int64_t blocks = (m + 11) / 12;
	ml_parallel_for(blocks, ML_MAX(1, (int64_t)(1 << 15) / ML_MAX(12 * k, 1)), pn_rows, &j);
#else
	(void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)boff, (void)bias, (void)c;
	(void)ldc;
	ML_ASSERT(!"ml_pgemm_narrow without AVX-512 or AVX2");
#endif
}

void
ml_pgemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *bp,
	 const float *bias, float *c, int64_t ldc, bool accumulate)
{
	ml_pgemm_batch(1, m, n, k, a, lda, 0, bp, 0, bias, c, ldc, 0, accumulate);
}

/*
 * GEMV without BLAS. At batch 1 the fully connected layers are GEMVs;
 * OpenBLAS runs those on its own threads, which then spin for a while
 * after each call and take the cores from the kernels that follow, so
 * the library runs them itself: memory-bound loops split over the pool.
 * Two shapes cover every case: dot products of contiguous rows, and sums
 * of scaled rows.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define GV_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GV_CLONES
#endif

struct gv_job {
	const float *m, *v;	/* the matrix (rows ldm apart) and the contiguous vector */
	int64_t rows, cols, ldm;
	float alpha, beta;
	float *y;
	int64_t incy;
};

/* y[i * incy] = alpha * dot(m[i, :], v) + beta * y for rows [b, e). */
GV_CLONES static void
gv_dots(void *ctx, int64_t b, int64_t e)
{
	const struct gv_job *j = ctx;

	for (int64_t i = b; i < e; i++) {
		const float *r = j->m + i * j->ldm;
		float part[16] = { 0 };
		int64_t p = 0;
		for (; p + 16 <= j->cols; p += 16)
			for (int l = 0; l < 16; l++)
				part[l] += r[p + l] * j->v[p + l];
		float s = 0;
		for (; p < j->cols; p++)
			s += r[p] * j->v[p];
		for (int l = 0; l < 16; l++)
			s += part[l];
		float *y = j->y + i * j->incy;
		*y = j->alpha * s + (j->beta == 0 ? 0.0f : j->beta * *y);
	}
}

/* y[c] = alpha * sum_p v[p] * m[p, c] + beta * y[c] for columns [b, e) (incy 1). */
GV_CLONES static void
gv_axpys(void *ctx, int64_t b, int64_t e)
{
	const struct gv_job *j = ctx;
	float *y = j->y;

	for (int64_t c = b; c < e; c++)
		y[c] = j->beta == 0 ? 0.0f : j->beta * y[c];
	for (int64_t p = 0; p < j->rows; p++) {
		const float *r = j->m + p * j->ldm;
		float a = j->alpha * j->v[p];
		for (int64_t c = b; c < e; c++)
			y[c] += a * r[c];
	}
}

bool
ml_sgemv_own(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
	     int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
	/* the vector operand, gathered into contiguous memory when strided */
	const float *vec;
	int64_t vinc;
	float *tmp = NULL;

	if (m == 1) {
		vec = a;
		vinc = ta ? lda : 1;
	} else {
		vec = b;
		vinc = tb ? 1 : ldb;
	}
	if (vinc != 1) {
		if ((tmp = ml_malloc(sizeof(float) * (size_t)k)) == NULL)
			return false;
		for (int64_t p = 0; p < k; p++)
			tmp[p] = vec[p * vinc];
		vec = tmp;
	}
	struct gv_job j = { .v = vec, .alpha = alpha, .beta = beta, .y = c };
	int64_t grain;
	if (m == 1 && !tb) {
		/* c[1, n] = a[1, k] B[k, n]: scaled rows of B */
		j.m = b, j.rows = k, j.cols = n, j.ldm = ldb, j.incy = 1;
		grain = ML_MAX(64, (int64_t)(1 << 16) / ML_MAX(k, 1));
		ml_parallel_for(n, grain, gv_axpys, &j);
	} else if (m == 1) {
		/* c[1, n] = a[1, k] B^T, B [n, k]: dots with B's rows */
		j.m = b, j.rows = n, j.cols = k, j.ldm = ldb, j.incy = 1;
		grain = ML_MAX(1, (int64_t)(1 << 16) / ML_MAX(k, 1));
		ml_parallel_for(n, grain, gv_dots, &j);
	} else if (!ta) {
		/* c[m, 1] = A[m, k] b: dots with A's rows */
		j.m = a, j.rows = m, j.cols = k, j.ldm = lda, j.incy = ldc;
		grain = ML_MAX(1, (int64_t)(1 << 16) / ML_MAX(k, 1));
		ml_parallel_for(m, grain, gv_dots, &j);
	} else if (ldc == 1) {
		/* c[m, 1] = A^T b, A [k, m]: scaled rows of A, into a contiguous column */
		j.m = a, j.rows = k, j.cols = m, j.ldm = lda, j.incy = 1;
		grain = ML_MAX(64, (int64_t)(1 << 16) / ML_MAX(k, 1));
		ml_parallel_for(m, grain, gv_axpys, &j);
	} else {
		ml_free(tmp);
		return false;
	}
	ml_free(tmp);
	return true;
}

/*
 * ml_tgemm: the dense products of a training step (lib/cpu/grad.c's
 * ml.TrainGemm and ml.GemmSGDUpdate) through the AVX-512 micro-kernel
 * above. At batch 64 these are thin products (M = 64, or K = 64 for a
 * weight gradient) that OpenBLAS's AVX2 kernels run at half this speed.
 * A transposed A (dY^T of a weight gradient) is transposed into scratch;
 * B is packed into 32-column panels, through 16 x 16 register transposes
 * when it is transposed (a weight W of Y = X W^T). Each tile of C gets the
 * epilogue as it leaves the registers: a bias along the columns, then
 * Relu, the Relu gradient's mask, the SGD update of the parameter that C
 * is the gradient of, or its addition to a gradient sum (C itself is then
 * never stored).
 */
#ifdef HAVE_PGEMM
struct tg_job {
	int64_t m, n, k, lda, ldc;
	const float *a, *bp;		/* A [m, k] row-major, B packed */
	float *c;			/* C [m, n], or the partial sums of an SGD epilogue */
	const struct ml_tgemm_epi *e;
	int64_t nblk, ngroups, npan, npchunks;
};

static inline __mmask16
lanes(int64_t n)
{
	return (__mmask16)(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1);
}

/* tg_pack: B (k x n, or stored n x k when tb) into 32-column panels, zeros past n. */
__attribute__((target("avx512f")))
static void
tg_pack(bool tb, int64_t k, int64_t n, const float *b, int64_t ldb, float *bp)
{
	for (int64_t j0 = 0; j0 < n; j0 += ML_PG_NR) {
		float *panel = bp + j0 * k;
		int64_t w = ML_MIN(ML_PG_NR, n - j0);
		if (!tb) {
			__mmask16 m0 = lanes(w), m1 = lanes(w - 16);
			for (int64_t p = 0; p < k; p++) {
				const float *src = b + p * ldb + j0;
				_mm512_store_ps(panel + p * ML_PG_NR, _mm512_maskz_loadu_ps(m0, src));
				_mm512_store_ps(panel + p * ML_PG_NR + 16,
						_mm512_maskz_loadu_ps(m1, src + 16));
			}
			continue;
		}
		for (int64_t p0 = 0; p0 < k; p0 += 16)
			for (int h = 0; h < 2; h++) {
				int nr = (int)ML_MAX(0, ML_MIN(16, w - 16 * h));
				tile512_tr_block(nr > 0 ? b + (j0 + 16 * h) * ldb + p0 : b, ldb, nr,
					 (int)ML_MIN(16, k - p0), panel + p0 * ML_PG_NR + 16 * h,
					 ML_PG_NR, true);
			}
	}
}

/* tg_row: the epilogue of row i, columns n0.. (lanes m0, m1) of C's tile: v0, v1. */
__attribute__((target("avx512f"), always_inline))
static inline void
tg_row(const struct tg_job *j, int64_t i, int64_t n0, __m512 v0, __m512 v1, __mmask16 m0,
       __mmask16 m1, bool first, bool last)
{
	const struct ml_tgemm_epi *e = j->e;
	int64_t off = i * j->ldc + n0;
	float *cr = j->c != NULL ? j->c + off : NULL;
	if (!first) {
		v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, cr));
		v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, cr + 16));
	}
	if (!last) {
		_mm512_mask_storeu_ps(cr, m0, v0);
		_mm512_mask_storeu_ps(cr + 16, m1, v1);
		return;
	}
	if (e->bias != NULL) {
		v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, e->bias + n0));
		v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, e->bias + n0 + 16));
	}
	__m512 z = _mm512_setzero_ps();
	switch (e->act) {
	case ML_TG_RELU:
		v0 = _mm512_max_ps(v0, z);
		v1 = _mm512_max_ps(v1, z);
		break;
	case ML_TG_RELU_GRAD:
		/* zero where R <= 0 (the lanes past n load 0 and are not stored) */
		v0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m0, e->mask + off), z,
							    _CMP_GT_OQ), v0);
		v1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m1, e->mask + off + 16),
							    z, _CMP_GT_OQ), v1);
		break;
	case ML_TG_ACC: {
		float *ap = e->acc + off;
		_mm512_mask_storeu_ps(ap, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ap), v0));
		_mm512_mask_storeu_ps(ap + 16, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ap + 16), v1));
		return;
	}
	case ML_TG_SGD: {
		/* g = G + wd P; M = mu M + g; P -= lr (nesterov ? g + mu M : M), as sgd_f32 */
		__m512 lr = _mm512_set1_ps(e->lr), mu = _mm512_set1_ps(e->mu);
		__m512 wd = _mm512_set1_ps(e->wd);
		for (int h = 0; h < 2; h++) {
			__mmask16 mk = h ? m1 : m0;
			__m512 g = h ? v1 : v0;
			if (e->acc != NULL) {
				/* the group's mean (S + G) / k, and S from 0 again */
				float *ap = e->acc + off + 16 * h;
				g = _mm512_mul_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(mk, ap), g),
						  _mm512_set1_ps(e->inv));
				_mm512_mask_storeu_ps(ap, mk, _mm512_setzero_ps());
			}
			float *pp = e->p + off + 16 * h;
			__m512 p = _mm512_maskz_loadu_ps(mk, pp), d;
			if (e->mom == NULL || e->nesterov) {
				d = e->wd != 0 ? _mm512_add_ps(g, _mm512_mul_ps(wd, p)) : g;
				if (e->mom != NULL) {
					float *mp = e->mom + off + 16 * h;
					__m512 v = _mm512_maskz_loadu_ps(mk, mp);
					v = _mm512_add_ps(_mm512_mul_ps(mu, v), d);
					_mm512_mask_storeu_ps(mp, mk, v);
					d = _mm512_add_ps(d, _mm512_mul_ps(mu, v));
				}
			} else {
				float *mp = e->mom + off + 16 * h;
				d = _mm512_mul_ps(mu, _mm512_maskz_loadu_ps(mk, mp));
				d = _mm512_add_ps(d, g);
				if (e->wd != 0)
					d = _mm512_add_ps(d, _mm512_mul_ps(wd, p));
				_mm512_mask_storeu_ps(mp, mk, d);
			}
			_mm512_mask_storeu_ps(pp, mk, _mm512_sub_ps(p, _mm512_mul_ps(lr, d)));
		}
		return;
	}
	default:
		break;
	}
	_mm512_mask_storeu_ps(cr, m0, v0);
	_mm512_mask_storeu_ps(cr + 16, m1, v1);
}

/*
 * tg_prefetch: the rows of the parameter and its momentum of the next tile
 * (columns n0.. of rows i0.., or the next row block's first), which an SGD
 * epilogue reads and writes: they come from L3 or memory (a layer's state
 * does not stay in L2), and fetched while this tile's product runs, their
 * latency hides.
 */
static inline void
tg_prefetch(const struct tg_job *j, int64_t i0, int mr, int64_t n0)
{
	const struct ml_tgemm_epi *e = j->e;
	if (n0 >= j->n) {
		/* past the row's end: the next row block's first tile */
		n0 = 0;
		i0 += mr;
		mr = (int)ML_MIN(mr, j->m - i0);
	}
	for (int i = 0; i < mr; i++) {
		int64_t off = (i0 + i) * j->ldc + n0;
		for (int h = 0; h < ML_PG_NR && n0 + h < j->n; h += 16) {
			if (e->acc != NULL)
				__builtin_prefetch(e->acc + off + h, 1);
			if (e->act == ML_TG_ACC)
				continue;
			__builtin_prefetch(e->p + off + h, 1);
			if (e->mom != NULL)
				__builtin_prefetch(e->mom + off + h, 1);
		}
	}
}

/* TKERN(R): PG_PRODUCT for rows i0.. (mr valid) of one panel, then tg_row. */
#define TKERN(R)								\
__attribute__((target("avx512f")))						\
static void									\
tk##R(const struct tg_job *j, int64_t i0, int mr, int64_t kc, int64_t kk, const float *bpk, \
      int64_t n0, __mmask16 m0, __mmask16 m1)					\
{										\
	const float *ar[R];							\
	for (int i = 0; i < R; i++)						\
		ar[i] = j->a + (i0 + (i < mr ? i : 0)) * j->lda + kc;		\
	bool first = kc == 0, last = kc + kk == j->k;				\
	if (last && (j->e->act == ML_TG_SGD || j->e->act == ML_TG_ACC))	\
		tg_prefetch(j, i0, mr, n0 + ML_PG_NR);				\
	PG_PRODUCT(R, kk, bpk)							\
	for (int i = 0; i < mr; i++)						\
		tg_row(j, i0 + i, n0, c0[i], c1[i], m0, m1, first, last);	\
}
TKERN(12)
TKERN(8)
TKERN(4)

/* tg_tile: rows [i, i + mr) of panel jp, k block [kc, kc + kk), through the kernel that fits. */
static void
tg_tile(const struct tg_job *j, int64_t i, int64_t mr, int64_t jp, int64_t kc, int64_t kk)
{
	int64_t n0 = jp * ML_PG_NR, w = ML_MIN(ML_PG_NR, j->n - n0);
	const float *bpk = j->bp + jp * ML_PG_NR * j->k + kc * ML_PG_NR;
	__mmask16 m0 = lanes(w), m1 = lanes(w - 16);
	if (mr > 8)
		tk12(j, i, (int)mr, kc, kk, bpk, n0, m0, m1);
	else if (mr > 4)
		tk8(j, i, (int)mr, kc, kk, bpk, n0, m0, m1);
	else
		tk4(j, i, (int)mr, kc, kk, bpk, n0, m0, m1);
}

/* tg_items: work items as pg_items's (a group of row blocks by a run of panels). */
static void
tg_items(void *ctx, int64_t b, int64_t e)
{
	const struct tg_job *j = ctx;

	for (int64_t it = b; it < e; it++) {
		int64_t g = it / j->npchunks, pc = it % j->npchunks;
		int64_t i0 = g * j->nblk / j->ngroups * 12;
		int64_t i1 = ML_MIN(j->m, (g + 1) * j->nblk / j->ngroups * 12);
		int64_t p0 = pc * j->npan / j->npchunks, p1 = (pc + 1) * j->npan / j->npchunks;
		if (j->k <= KC) {
			/*
			 * One k block: a row block passes along the panels (which stay
			 * in L2), so C, or an SGD epilogue's parameter and momentum,
			 * is read and written row by row, as the prefetchers like.
			 */
			for (int64_t i = i0; i < i1; i += 12)
				for (int64_t jp = p0; jp < p1; jp++)
					tg_tile(j, i, ML_MIN(i1 - i, 12), jp, 0, j->k);
			continue;
		}
		/* k blocks of equal size, at most KC (784 is 4 x 196, not 3 x 256 + 16) */
		int64_t kb = (j->k + (j->k + KC - 1) / KC - 1) / ((j->k + KC - 1) / KC);
		for (int64_t kc = 0; kc < j->k; kc += kb)
			for (int64_t jp = p0; jp < p1; jp++)
				for (int64_t i = i0; i < i1; i += 12)
					tg_tile(j, i, ML_MIN(i1 - i, 12), jp, kc, ML_MIN(kb, j->k - kc));
	}
}
#endif

bool
ml_tgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
	 const float *b, int64_t ldb, float *c, int64_t ldc, const struct ml_tgemm_epi *e)
{
#ifdef HAVE_PGEMM
	if (pgemm_level() < 2 || m <= 0 || n <= 0 || k <= 0)
		return false;
	/* scratch: slot 0 the packed B, slot 1 A transposed, slot 2 an SGD's partial sums */
	float *bp = ml_cpu_scratch(0, sizeof(float) * (size_t)ml_pgemm_packed_len(k, n));
	if (bp == NULL)
		return false;
	const float *ar = a;
	if (ta) {
		float *at = ml_cpu_scratch(1, sizeof(float) * (size_t)(m * k));
		if (at == NULL)
			return false;
		for (int64_t i0 = 0; i0 < m; i0 += 16)
			for (int64_t p0 = 0; p0 < k; p0 += 16)
				tile512_tr_block(a + p0 * lda + i0, lda, (int)ML_MIN(16, k - p0),
					 (int)ML_MIN(16, m - i0), at + i0 * k + p0, k, false);
		ar = at;
		lda = k;
	}
	if (e->act == ML_TG_SGD || e->act == ML_TG_ACC) {
		c = NULL;
		ldc = n;
		if (k > KC && (c = ml_cpu_scratch(2, sizeof(float) * (size_t)(m * n))) == NULL)
			return false;
	} else if (ldc != n) {
		return false;
	}
	tg_pack(tb, k, n, b, ldb, bp);
	struct tg_job j = { .m = m, .n = n, .k = k, .lda = lda, .ldc = ldc, .a = ar, .bp = bp,
			    .c = c, .e = e };
	j.nblk = (m + 11) / 12;
	j.ngroups = (j.nblk + MB / 12 - 1) / (MB / 12);
	j.npan = (n + ML_PG_NR - 1) / ML_PG_NR;
	int64_t nt = ml_get_threads();
	j.npchunks = ML_MAX(1, ML_MIN(j.npan, (2 * nt + j.ngroups - 1) / j.ngroups));
	int64_t work = ML_MAX(1, m / j.ngroups * ML_PG_NR * j.npan / j.npchunks * k);
	ml_parallel_for(j.ngroups * j.npchunks, ML_MAX(1, (int64_t)(1 << 20) / work), tg_items, &j);
	return true;
#else
	(void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
	(void)c, (void)ldc, (void)e;
	return false;
#endif
}
