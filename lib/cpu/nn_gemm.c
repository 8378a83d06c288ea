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
 * ml_sgemm uses for a single row or column (see ml_sgemv_own).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <stdatomic.h>

#include "cpu/nn.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_PGEMM 1
#include <immintrin.h>
#endif

#define KC 256			/* k block: a panel block of KC x 32 floats is 32 KB */
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
#define KERN(R)									\
__attribute__((target("avx512f")))						\
static void									\
kern##R(int64_t kc, const float *a, int64_t lda, const float *bp, float *c, int64_t ldc, \
	int mr, __mmask16 m0, __mmask16 m1, const float *bias, int mode)		\
{										\
	__m512 c0[R], c1[R];							\
	const float *ar[R];							\
	for (int i = 0; i < R; i++) {						\
		c0[i] = _mm512_setzero_ps();					\
		c1[i] = _mm512_setzero_ps();					\
		ar[i] = a + (i < mr ? i : 0) * lda;				\
	}									\
	for (int64_t k = 0; k < kc; k++) {					\
		__m512 b0 = _mm512_load_ps(bp + k * ML_PG_NR);			\
		__m512 b1 = _mm512_load_ps(bp + k * ML_PG_NR + 16);		\
		_Pragma("GCC unroll 12")					\
		for (int i = 0; i < R; i++) {					\
			__m512 av = _mm512_set1_ps(ar[i][k]);			\
			c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);			\
			c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);			\
		}								\
	}									\
	for (int i = 0; i < mr; i++) {						\
		float *cr = c + i * ldc;					\
		__m512 x0, x1;							\
		if (mode == 1) {						\
			x0 = _mm512_maskz_loadu_ps(m0, cr);			\
			x1 = _mm512_maskz_loadu_ps(m1, cr + 16);		\
		} else {							\
			x0 = x1 = _mm512_set1_ps(bias != NULL ? bias[i] : 0.0f); \
		}								\
		_mm512_mask_storeu_ps(cr, m0, _mm512_add_ps(c0[i], x0));	\
		_mm512_mask_storeu_ps(cr + 16, m1, _mm512_add_ps(c1[i], x1));	\
	}									\
}
KERN(12)
KERN(8)
KERN(4)

/*
 * KERN2(R): the AVX2 kernel: C[R rows (mr valid), w <= 32 columns] as
 * KERN, one 16-column half of the panel at a time (R x 2 ymm accumulators).
 */
#define KERN2(R)								\
__attribute__((target("avx2,fma")))						\
static void									\
k2_##R(int64_t kc, const float *a, int64_t lda, const float *bp, float *c, int64_t ldc, \
       int mr, int w, const float *bias, int mode)				\
{										\
	const float *ar[R];							\
	for (int i = 0; i < R; i++)						\
		ar[i] = a + (i < mr ? i : 0) * lda;				\
	for (int h = 0; h < 2 && 16 * h < w; h++) {				\
		__m256 c0[R], c1[R];						\
		const float *b = bp + 16 * h;					\
		for (int i = 0; i < R; i++) {					\
			c0[i] = _mm256_setzero_ps();				\
			c1[i] = _mm256_setzero_ps();				\
		}								\
		for (int64_t k = 0; k < kc; k++) {				\
			__m256 b0 = _mm256_loadu_ps(b + k * ML_PG_NR);		\
			__m256 b1 = _mm256_loadu_ps(b + k * ML_PG_NR + 8);	\
			_Pragma("GCC unroll 6")					\
			for (int i = 0; i < R; i++) {				\
				__m256 av = _mm256_broadcast_ss(ar[i] + k);	\
				c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);		\
				c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);		\
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
KERN2(6)
KERN2(3)

struct pg_job {
	int64_t m, n, k, lda, ldc;
	int64_t nblk, ngroups;		/* 12-row blocks of C, and groups of them */
	int64_t npan, npchunks;		/* 32-column panels, and runs of them */
	const float *a, *bp, *bias;
	float *c;
	bool accumulate;
	int64_t per;			/* items per product of the batch */
	int64_t sa, sb, sc;		/* batch strides of A, B (packed) and C */
	int level;			/* pgemm_level() */
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
			int mr = (int)ML_MIN(rem, rem > 3 ? 6 : 3);
			if (mr > 3)
				k2_6(kk, a, j->lda, bpk, c, j->ldc, mr, (int)w, bias, mode);
			else
				k2_3(kk, a, j->lda, bpk, c, j->ldc, mr, (int)w, bias, mode);
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

	for (int64_t it0 = b; it0 < e; it0++) {
		int64_t bi = it0 / j->per, it = it0 % j->per;
		int64_t g = it / j->npchunks, pc = it % j->npchunks;
		const float *A = j->a + bi * j->sa;
		float *Cb = j->c + bi * j->sc;
		int64_t i0 = g * j->nblk / j->ngroups * 12;
		int64_t i1 = ML_MIN(j->m, (g + 1) * j->nblk / j->ngroups * 12);
		int64_t p0 = pc * j->npan / j->npchunks, p1 = (pc + 1) * j->npan / j->npchunks;
		for (int64_t kc = 0; kc < j->k; kc += KC) {
			int64_t kk = ML_MIN(KC, j->k - kc);
			for (int64_t jp = p0; jp < p1; jp++)
				pg_block(j, A, j->bp + bi * j->sb + jp * ML_PG_NR * j->k, Cb, jp, i0,
					 i1, kc, kk);
		}
	}
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
	if (k <= 0) {
		for (int64_t bi = 0; bi < nb && !accumulate; bi++)
			for (int64_t i = 0; i < m; i++)
				for (int64_t jj = 0; jj < n; jj++)
					c[bi * sc + i * ldc + jj] = bias != NULL ? bias[i] : 0.0f;
		return;
	}
	struct pg_job j = { .m = m, .n = n, .k = k, .lda = lda, .ldc = ldc, .a = a, .bp = bp,
			    .bias = bias, .c = c, .accumulate = accumulate, .sa = sa, .sb = sb,
			    .sc = sc, .level = pgemm_level() };
	/* groups of about MB rows, whole 12-row blocks each, spread evenly */
	j.nblk = (m + 11) / 12;
	j.ngroups = (j.nblk + MB / 12 - 1) / (MB / 12);
	j.npan = (n + ML_PG_NR - 1) / ML_PG_NR;
	/* the fewest runs of panels that still give each thread two items per product */
	int64_t nt = ml_get_threads();
	j.npchunks = ML_MAX(1, ML_MIN(j.npan, (2 * nt + j.ngroups - 1) / j.ngroups));
	j.per = j.ngroups * j.npchunks;
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
