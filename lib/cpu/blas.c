/*
 * blas.c: the library's only use of cblas.h: row-major GEMM wrappers that
 * check sizes against BLAS's int, route a single row or column to GEMV
 * (OpenBLAS's GEMM is slow on those), set OpenBLAS's thread count, and
 * pick OpenBLAS's AVX-512 kernels on CPUs newer than the OpenBLAS build.
 *
 * OpenBLAS is loaded with dlopen on the first product that needs it, not
 * linked: loading it costs 3.5 MiB of resident memory and a start-up that
 * most runs never use (the packed SGEMM, Winograd and the int8 engine
 * cover the common convolutions). Where it cannot be loaded (or with
 * ML_BLAS=none) a portable loop computes the same products, slowly; -v
 * tools can tell from ml_blas_name().
 *
 * OpenBLAS maps a buffer of about 128 MiB for each thread that runs a
 * product, and when that mmap fails it retries forever (blas_memory_alloc),
 * a hang that only SIGKILL ends. Where memory is limited (ulimit -v or -d,
 * strict overcommit) the buffers are checked for first: OpenBLAS is not
 * loaded when its threads' buffers do not fit, and a product for which
 * one more buffer does not fit goes to the portable loop, as do all
 * products after it.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cblas.h>

#include "cpu/nn.h"

/* The entry points used, resolved from the loaded library; NULL before or without it. */
static struct {
	__typeof__(cblas_sgemm) *sgemm;
	__typeof__(cblas_dgemm) *dgemm;
	__typeof__(cblas_sgemv) *sgemv;
	__typeof__(cblas_dgemv) *dgemv;
	void (*set_threads)(int);
	char *(*corename)(void);
	void (*dyn_init)(void);
	void (*dyn_quit)(void);
	int threads;		/* the count asked for before loading; 0: OpenBLAS's default */
	pthread_mutex_t mu;
} L = { .mu = PTHREAD_MUTEX_INITIALIZER };

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/*
 * OpenBLAS's buffer per thread: BUFFER_SIZE (128 MiB on x86-64) and the
 * alignment it adds; HEADROOM is left for the rest of the process, which
 * allocates while a product runs (pool threads, the data loader).
 */
#define OB_BUFFER (((size_t)128 << 20) + ((size_t)1 << 20))
#define OB_HEADROOM ((size_t)64 << 20)

static atomic_int mem_limited = -1;	/* whether an mmap can fail for want of memory; -1 unknown */
static atomic_bool short_of_memory;	/* a check failed: the portable loop from then on */

/* limited: whether address space or commit is bounded (ulimit -v, -d; overcommit 2). */
static bool
limited(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		return true;
	if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		return true;
	FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
	int mode = 0;
	if (f != NULL) {
		if (fscanf(f, "%d", &mode) != 1)
			mode = 0;
		fclose(f);
	}
	return mode == 2;
}

/*
 * room_for: whether n OpenBLAS buffers and the headroom can be mapped now,
 * asked as OpenBLAS asks (private, writable) and given back at once; true
 * without a limit, where the system overcommits and OpenBLAS's mmap does
 * not fail. A failed check is remembered.
 */
static bool
room_for(size_t n)
{
	int lim = atomic_load(&mem_limited);
	if (lim < 0)
		atomic_store(&mem_limited, lim = limited());
	if (!lim)
		return true;
	if (atomic_load(&short_of_memory))
		return false;
	size_t need = OB_BUFFER * n + OB_HEADROOM;
	void *p = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (p == MAP_FAILED) {
		atomic_store(&short_of_memory, true);
		return false;
	}
	munmap(p, need);
	return true;
}

/*
 * A DYNAMIC_ARCH OpenBLAS picks its kernels once, at load, from the CPU
 * model; a CPU it does not know (Debian 12's 0.3.21 on AMD Zen 4 and 5)
 * gets the AVX2 "Haswell" kernels even when it has AVX-512, which run
 * SGEMM at about 60% of the speed of the "SkylakeX" ones there. The
 * exported gotoblas_dynamic_init/quit of DYNAMIC_ARCH builds redo the
 * choice, honouring OPENBLAS_CORETYPE; other builds lack them and the
 * switch is skipped.
 */
static void
pick_core(void)
{
	const char *name = L.corename ? L.corename() : NULL;

	if (L.dyn_init == NULL || L.dyn_quit == NULL || getenv("OPENBLAS_CORETYPE") != NULL ||
	    name == NULL)
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
	L.dyn_quit();
	L.dyn_init();
	unsetenv("OPENBLAS_CORETYPE");
}

/* load: open OpenBLAS and resolve its entry points; all or nothing. */
static void
load(void)
{
	static const char *const names[] = { "libopenblas.so.0", "libopenblas.so" };
	const char *env = getenv("ML_BLAS");
	void *h = NULL;

	if (env != NULL && strcmp(env, "none") == 0)
		return;
	/* OpenBLAS starts a thread per core at load, each of which may map a buffer */
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	if (!room_for(cores > 0 ? (size_t)cores + 1 : 2))
		return;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && h == NULL; i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		return;
	*(void **)&L.sgemm = dlsym(h, "cblas_sgemm");
	*(void **)&L.dgemm = dlsym(h, "cblas_dgemm");
	*(void **)&L.sgemv = dlsym(h, "cblas_sgemv");
	*(void **)&L.dgemv = dlsym(h, "cblas_dgemv");
	if (!L.sgemm || !L.dgemm || !L.sgemv || !L.dgemv) {
		L.sgemm = NULL, L.dgemm = NULL, L.sgemv = NULL, L.dgemv = NULL;
		dlclose(h);
		return;
	}
	*(void **)&L.set_threads = dlsym(h, "openblas_set_num_threads");
	*(void **)&L.corename = dlsym(h, "openblas_get_corename");
	*(void **)&L.dyn_init = dlsym(h, "gotoblas_dynamic_init");
	*(void **)&L.dyn_quit = dlsym(h, "gotoblas_dynamic_quit");
	pick_core();
	pthread_mutex_lock(&L.mu);
	if (L.set_threads && L.threads > 0)
		L.set_threads(L.threads);
	pthread_mutex_unlock(&L.mu);
}

/* blas_init: run before the first BLAS call of the process; true when OpenBLAS is there. */
static bool
blas_init(void)
{
	pthread_once(&load_once, load);
	return L.sgemm != NULL;
}

const char *
ml_blas_name(void)
{
	return blas_init() && !atomic_load(&short_of_memory) ? "openblas" : "portable";
}

void
ml_cblas_set_threads(int n)
{
	/* recorded for a later load; applied now only where OpenBLAS is already in */
	pthread_mutex_lock(&L.mu);
	L.threads = n;
	if (L.set_threads)
		L.set_threads(n);
	pthread_mutex_unlock(&L.mu);
}

/*
 * The portable product, C = alpha op(A) op(B) + beta C, row-major, for a
 * process without OpenBLAS; an i-k-j loop that reads B and C by rows.
 */
#define PORTABLE_GEMM(T)							\
	for (int64_t i = 0; i < m; i++) {					\
		T *ci = c + i * ldc;						\
		for (int64_t j = 0; j < n; j++)					\
			ci[j] = beta == 0 ? 0 : beta * ci[j];			\
		for (int64_t p = 0; p < k; p++) {				\
			T av = alpha * (ta ? a[p * lda + i] : a[i * lda + p]);	\
			if (av == 0)						\
				continue;					\
			if (tb)							\
				for (int64_t j = 0; j < n; j++)			\
					ci[j] += av * b[j * ldb + p];		\
			else {							\
				const T *bp = b + p * ldb;			\
				for (int64_t j = 0; j < n; j++)			\
					ci[j] += av * bp[j];			\
			}							\
		}								\
	}									\
	return true;

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
	if (!blas_init() || !room_for(1)) {					\
		PORTABLE_GEMM(T)						\
	}									\
	if (m == 1) {								\
		if (beta == 0)							\
			memset(c, 0, sizeof(T) * (size_t)n);			\
		int incx = ta ? (int)lda : 1;					\
		if (tb)								\
			L.PFX##gemv(CblasRowMajor, CblasNoTrans, (int)n, (int)k, alpha, b, \
					  (int)ldb, a, incx, beta, c, 1);	\
		else								\
			L.PFX##gemv(CblasRowMajor, CblasTrans, (int)k, (int)n, alpha, b, \
					  (int)ldb, a, incx, beta, c, 1);	\
		return true;							\
	}									\
	if (n == 1) {								\
		if (beta == 0)							\
			for (int64_t i = 0; i < m; i++)				\
				c[i * ldc] = 0;					\
		int incx = tb ? 1 : (int)ldb;					\
		if (ta)								\
			L.PFX##gemv(CblasRowMajor, CblasTrans, (int)k, (int)m, alpha, a, \
					  (int)lda, b, incx, beta, c, (int)ldc);	\
		else								\
			L.PFX##gemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, alpha, a, \
					  (int)lda, b, incx, beta, c, (int)ldc);	\
		return true;							\
	}									\
	L.PFX##gemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,	\
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
