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
 * block of A passes over it. Work items (a panel by a group of row
 * blocks) split over ml_parallel_for; this is not BLAS, so pool threads
 * may run it. Off x86-64, or on CPUs without AVX-512F, ml_pgemm_ok() is
 * false and callers use BLAS.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include "cpu/nn.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_PGEMM 1
#include <immintrin.h>
#endif

#define KC 256			/* k block: a panel block of KC x 32 floats is 32 KB */
#define MB 96			/* rows per work item: 8 blocks of 12 */

bool
ml_pgemm_ok(void)
{
#ifdef HAVE_PGEMM
	static int ok = -1;
	if (ok < 0) {
		__builtin_cpu_init();
		ok = __builtin_cpu_supports("avx512f") ? 1 : 0;
	}
	return ok == 1;
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

struct pg_job {
	int64_t m, n, k, lda, ldc, ngroups;
	const float *a, *bp, *bias;
	float *c;
	bool accumulate;
	int64_t per;			/* items per product of the batch */
	int64_t sa, sb, sc;		/* batch strides of A, B (packed) and C */
};

static void
pg_items(void *ctx, int64_t b, int64_t e)
{
	const struct pg_job *j = ctx;

	for (int64_t it0 = b; it0 < e; it0++) {
		int64_t bi = it0 / j->per, it = it0 % j->per;
		int64_t jp = it / j->ngroups, g = it % j->ngroups;
		const float *A = j->a + bi * j->sa;
		float *Cb = j->c + bi * j->sc;
		int64_t n0 = jp * ML_PG_NR, w = ML_MIN(ML_PG_NR, j->n - n0);
		__mmask16 m0 = (__mmask16)(w >= 16 ? 0xffff : (1u << w) - 1);
		__mmask16 m1 = (__mmask16)(w >= 32 ? 0xffff : w <= 16 ? 0 : (1u << (w - 16)) - 1);
		int64_t i0 = g * MB, i1 = ML_MIN(j->m, i0 + MB);
		const float *panel = j->bp + bi * j->sb + jp * ML_PG_NR * j->k;
		for (int64_t kc = 0; kc < j->k; kc += KC) {
			int64_t kk = ML_MIN(KC, j->k - kc);
			int mode = kc > 0 || j->accumulate ? 1 : 0;
			for (int64_t i = i0; i < i1;) {
				int64_t rem = i1 - i;
				const float *a = A + i * j->lda + kc;
				float *c = Cb + i * j->ldc + n0;
				const float *bias = j->bias != NULL ? j->bias + i : NULL;
				const float *bpk = panel + kc * ML_PG_NR;
				if (rem > 8) {
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
	struct pg_job j = { m, n, k, lda, ldc, (m + MB - 1) / MB, a, bp, bias, c, accumulate, 0,
			    sa, sb, sc };
	j.per = (n + ML_PG_NR - 1) / ML_PG_NR * j.ngroups;
	/* an item is MB x 32 x k multiply-adds; a chunk of a few of them is worth a thread */
	int64_t grain = ML_MAX(1, (int64_t)(1 << 20) / ML_MAX(MB * ML_PG_NR * k, 1));
	ml_parallel_for(nb * j.per, grain, pg_items, &j);
#else
	(void)nb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)sa, (void)bp, (void)sb;
	(void)bias, (void)c, (void)ldc, (void)sc, (void)accumulate;
	ML_ASSERT(!"ml_pgemm without AVX-512 support");
#endif
}

void
ml_pgemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *bp,
	 const float *bias, float *c, int64_t ldc, bool accumulate)
{
	ml_pgemm_batch(1, m, n, k, a, lda, 0, bp, 0, bias, c, ldc, 0, accumulate);
}
