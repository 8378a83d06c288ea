/*
 * blas.c: the library's only use of cblas.h: row-major GEMM wrappers that
 * check sizes against BLAS's int, route a single row or column to GEMV
 * (OpenBLAS's GEMM is slow on those), set OpenBLAS's thread count, and
 * pick OpenBLAS's AVX-512 kernels on CPUs newer than the OpenBLAS build.
 */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <strings.h>

#include <cblas.h>

#include "cpu/nn.h"

/*
 * A DYNAMIC_ARCH OpenBLAS picks its kernels once, at load, from the CPU
 * model; a CPU it does not know (Debian 12's 0.3.21 on AMD Zen 4 and 5)
 * gets the AVX2 "Haswell" kernels even when it has AVX-512, which run
 * SGEMM at about 60% of the speed of the "SkylakeX" ones there. These two
 * exported functions of DYNAMIC_ARCH builds redo the choice, honouring
 * OPENBLAS_CORETYPE; they are weak so that other OpenBLAS builds (and
 * other BLAS libraries) still link, and the switch is then skipped.
 */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

static pthread_once_t core_once = PTHREAD_ONCE_INIT;

static void
pick_core(void)
{
	const char *name = openblas_get_corename();

	if (gotoblas_dynamic_init == NULL || gotoblas_dynamic_quit == NULL ||
	    getenv("OPENBLAS_CORETYPE") != NULL || name == NULL)
		return;
	if (strcasecmp(name, "Haswell") != 0 && strcasecmp(name, "Zen") != 0)
		return;
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512cd") ||
	    !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512dq") ||
	    !__builtin_cpu_supports("avx512vl"))
		return;
	/* the variable is only read by gotoblas_dynamic_init, and removed again at once */
	if (setenv("OPENBLAS_CORETYPE", "SkylakeX", 0) != 0)
		return;
	gotoblas_dynamic_quit();
	gotoblas_dynamic_init();
	unsetenv("OPENBLAS_CORETYPE");
}

/* blas_init: run before the first BLAS call of the process, while no other is in flight. */
static void
blas_init(void)
{
	pthread_once(&core_once, pick_core);
}

void
ml_cblas_set_threads(int n)
{
	blas_init();
	openblas_set_num_threads(n);
}

static bool
fits(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc)
{
	return m >= 0 && n >= 0 && k >= 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX &&
	       lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX;
}

/*
 * The GEMM bodies for both precisions. With k == 0 the product is empty
 * and C is only scaled. GEMV's beta == 0 is made explicit by clearing y,
 * so that garbage (NaN) in an unwritten output never leaks through.
 */
#define GEMM_BODY(T, PFX)							\
	blas_init();								\
	if (!fits(m, n, k, lda, ldb, ldc))					\
		return false;							\
	if (m == 0 || n == 0)							\
		return true;							\
	if (k == 0) {								\
		for (int64_t i = 0; i < m; i++)					\
			for (int64_t j = 0; j < n; j++)				\
				c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j]; \
		return true;							\
	}									\
	if (m == 1) {								\
		if (beta == 0)							\
			memset(c, 0, sizeof(T) * (size_t)n);			\
		int incx = ta ? (int)lda : 1;					\
		if (tb)								\
			cblas_##PFX##gemv(CblasRowMajor, CblasNoTrans, (int)n, (int)k, alpha, b, \
					  (int)ldb, a, incx, beta, c, 1);	\
		else								\
			cblas_##PFX##gemv(CblasRowMajor, CblasTrans, (int)k, (int)n, alpha, b, \
					  (int)ldb, a, incx, beta, c, 1);	\
		return true;							\
	}									\
	if (n == 1) {								\
		if (beta == 0)							\
			for (int64_t i = 0; i < m; i++)				\
				c[i * ldc] = 0;					\
		int incx = tb ? 1 : (int)ldb;					\
		if (ta)								\
			cblas_##PFX##gemv(CblasRowMajor, CblasTrans, (int)k, (int)m, alpha, a, \
					  (int)lda, b, incx, beta, c, (int)ldc);	\
		else								\
			cblas_##PFX##gemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, alpha, a, \
					  (int)lda, b, incx, beta, c, (int)ldc);	\
		return true;							\
	}									\
	cblas_##PFX##gemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,	\
			  tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, \
			  (int)lda, b, (int)ldb, beta, c, (int)ldc);		\
	return true;

bool
ml_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
	 int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
	/* a row or a column: the library's own GEMV keeps OpenBLAS's threads asleep */
	if ((m == 1 || n == 1) && m > 0 && n > 0 && k > 0 && fits(m, n, k, lda, ldb, ldc) &&
	    ml_sgemv_own(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
		return true;
	GEMM_BODY(float, s)
}

bool
ml_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
	 int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc)
{
	GEMM_BODY(double, d)
}
