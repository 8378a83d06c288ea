/*
 * clblast.c: CLBlast's GEMM as the second engine of lib/cl/gemm.c. The
 * library is loaded with dlopen at the first use, as lib/cpu/blas.c loads
 * OpenBLAS, so that the toolchain neither links it nor needs it: where it
 * cannot be loaded, gemm.c keeps its own kernels. Only the types of
 * clblast_c.h are used (its prototypes, through __typeof__); a build
 * without the header declares the few entry points itself.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cl/cl.h"

#if defined(__has_include)
#if __has_include(<clblast_c.h>)
#define HAVE_CLBLAST_H 1
#endif
#endif

#ifdef HAVE_CLBLAST_H
#include <clblast_c.h>
#else
/* the declarations of clblast_c.h (CLBlast 1.5) that this file uses, for their types only */
typedef enum CLBlastStatusCode_ { CLBlastSuccess = 0, CLBlastUnknownError = -2040 }
	CLBlastStatusCode;
typedef enum CLBlastLayout_ { CLBlastLayoutRowMajor = 101, CLBlastLayoutColMajor = 102 }
	CLBlastLayout;
typedef enum CLBlastTranspose_ { CLBlastTransposeNo = 111, CLBlastTransposeYes = 112,
				 CLBlastTransposeConjugate = 113 } CLBlastTranspose;
CLBlastStatusCode CLBlastSgemm(const CLBlastLayout layout, const CLBlastTranspose a_transpose,
			       const CLBlastTranspose b_transpose, const size_t m, const size_t n,
			       const size_t k, const float alpha, const cl_mem a_buffer,
			       const size_t a_offset, const size_t a_ld, const cl_mem b_buffer,
			       const size_t b_offset, const size_t b_ld, const float beta,
			       cl_mem c_buffer, const size_t c_offset, const size_t c_ld,
			       cl_command_queue *queue, cl_event *event);
CLBlastStatusCode CLBlastHgemm(const CLBlastLayout layout, const CLBlastTranspose a_transpose,
			       const CLBlastTranspose b_transpose, const size_t m, const size_t n,
			       const size_t k, const cl_half alpha, const cl_mem a_buffer,
			       const size_t a_offset, const size_t a_ld, const cl_mem b_buffer,
			       const size_t b_offset, const size_t b_ld, const cl_half beta,
			       cl_mem c_buffer, const size_t c_offset, const size_t c_ld,
			       cl_command_queue *queue, cl_event *event);
CLBlastStatusCode CLBlastSgemmStridedBatched(
	const CLBlastLayout layout, const CLBlastTranspose a_transpose,
	const CLBlastTranspose b_transpose, const size_t m, const size_t n, const size_t k,
	const float alpha, const cl_mem a_buffer, const size_t a_offset, const size_t a_ld,
	const size_t a_stride, const cl_mem b_buffer, const size_t b_offset, const size_t b_ld,
	const size_t b_stride, const float beta, cl_mem c_buffer, const size_t c_offset,
	const size_t c_ld, const size_t c_stride, const size_t batch_count,
	cl_command_queue *queue, cl_event *event);
CLBlastStatusCode CLBlastHgemmStridedBatched(
	const CLBlastLayout layout, const CLBlastTranspose a_transpose,
	const CLBlastTranspose b_transpose, const size_t m, const size_t n, const size_t k,
	const cl_half alpha, const cl_mem a_buffer, const size_t a_offset, const size_t a_ld,
	const size_t a_stride, const cl_mem b_buffer, const size_t b_offset, const size_t b_ld,
	const size_t b_stride, const cl_half beta, cl_mem c_buffer, const size_t c_offset,
	const size_t c_ld, const size_t c_stride, const size_t batch_count,
	cl_command_queue *queue, cl_event *event);
#endif

/* the status CLBlast gives for a zero dimension, and ours for "not loaded" */
#define ST_DIM (-1017)
#define ST_UNKNOWN ((int)CLBlastUnknownError)

/* the entry points used */
struct fns {
	__typeof__(CLBlastSgemm) *sgemm;
	__typeof__(CLBlastHgemm) *hgemm;
	__typeof__(CLBlastSgemmStridedBatched) *sgemm_sb;
	__typeof__(CLBlastHgemmStridedBatched) *hgemm_sb;
};

/*
 * The entry points, resolved from the library loaded for the name in
 * tried (ML_CLBLAST_LIB or the default); NULL before or without it. A
 * library once opened is never closed: CLBlast keeps programs and
 * device tables in static caches that its unloading would strand.
 */
static struct {
	struct fns f;
	char tried[PATH_MAX];	/* the name of the last attempt; "" before the first */
	char file[128];		/* the library file loaded, e.g. "libclblast.so.1.5.3" */
	const char *why;	/* why it is not loaded */
	pthread_mutex_t mu;
} L = { .mu = PTHREAD_MUTEX_INITIALIZER, .why = "not tried" };

/* load_name: open name (NULL: the default names in turn) and resolve the entry points; all or nothing */
static void
load_name(const char *name)
{
	static const char *const defaults[] = { "libclblast.so.1", "libclblast.so" };
	void *h = NULL;

	L.f = (struct fns){ 0 };
	L.file[0] = '\0';
	if (name != NULL)
		h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	for (size_t i = 0; name == NULL && i < sizeof defaults / sizeof defaults[0] && h == NULL;
	     i++)
		h = dlopen(defaults[i], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		L.why = "cannot load the CLBlast library";
		return;
	}
	*(void **)&L.f.sgemm = dlsym(h, "CLBlastSgemm");
	*(void **)&L.f.hgemm = dlsym(h, "CLBlastHgemm");
	*(void **)&L.f.sgemm_sb = dlsym(h, "CLBlastSgemmStridedBatched");
	*(void **)&L.f.hgemm_sb = dlsym(h, "CLBlastHgemmStridedBatched");
	if (!L.f.sgemm || !L.f.hgemm || !L.f.sgemm_sb || !L.f.hgemm_sb) {
		L.f = (struct fns){ 0 };
		L.why = "the CLBlast library lacks its GEMM entry points";
		return;
	}
	/* the file the soname resolves to names the version (the engine cache keeps it) */
	Dl_info info;
	char real[PATH_MAX];
	const char *f = NULL;
	if (dladdr(*(void **)&L.f.sgemm, &info) != 0 && info.dli_fname != NULL)
		f = realpath(info.dli_fname, real) != NULL ? real : info.dli_fname;
	if (f == NULL)
		f = name != NULL ? name : defaults[0];
	const char *base = strrchr(f, '/');
	snprintf(L.file, sizeof L.file, "%.127s", base != NULL ? base + 1 : f);
	L.why = NULL;
}

/*
 * load: mlcl_clblast_load, also copying the entry points into f (when not
 * NULL) under the lock, so that a caller never sees a half-changed set
 * while another thread loads under a new ML_CLBLAST_LIB.
 */
static bool
load(const char **why, struct fns *f)
{
	const char *env = getenv("ML_CLBLAST_LIB");
	const char *name = env != NULL && env[0] != '\0' ? env : NULL;
	pthread_mutex_lock(&L.mu);
	const char *key = name != NULL ? name : "(default)";
	if (strcmp(L.tried, key) != 0) {
		snprintf(L.tried, sizeof L.tried, "%s", key);
		load_name(name);
	}
	bool ok = L.f.sgemm != NULL;
	if (why != NULL)
		*why = ok ? NULL : L.why;
	if (f != NULL)
		*f = L.f;
	pthread_mutex_unlock(&L.mu);
	return ok;
}

bool
mlcl_clblast_load(const char **why)
{
	return load(why, NULL);
}

const char *
mlcl_clblast_lib(void)
{
	return mlcl_clblast_load(NULL) ? L.file : "";
}

const char *
mlcl_clblast_status_str(int status)
{
	switch (status) {
	case 0: return "success";
	case -4: return "temporary buffer allocation failure";
	case -5: return "out of resources";
	case -11: return "kernel build failure";
	case -1017: return "invalid dimension";
	case -1011: case -1010: case -1009: return "buffer too small";
	case -2046: return "not enough local memory";
	case -2045: return "no half precision on the device";
	case -2041: return "no database entry for the device";
	case -2040: return "unknown error";
	case -2039: return "unexpected error";
	default: return status > -1000 ? mlcl_status_str(status) : "CLBlast error";
	}
}

int
mlcl_clblast_gemm(struct mlcl_dev *d, bool f16, bool ta, bool tb, int64_t M, int64_t N,
		  int64_t K, float alpha, cl_mem A, size_t a_off, int64_t lda, int64_t stride_a,
		  cl_mem B, size_t b_off, int64_t ldb, int64_t stride_b, float beta, cl_mem C,
		  size_t c_off, int64_t ldc, int64_t stride_c, int64_t batch)
{
	struct fns F;
	if (mlcl_fault("clblast") || !load(NULL, &F))
		return ST_UNKNOWN;
	/* a lost device fails CLBlast's launches as it fails ours */
	if (mlcl_fault("enqueue"))
		return CL_OUT_OF_RESOURCES;
	if (M <= 0 || N <= 0 || K <= 0 || batch <= 0)
		return ST_DIM;
	/* CLBlast would find this out too, and print it to stderr */
	if (f16 && !d->has_fp16)
		return -2045;
	const CLBlastLayout row = CLBlastLayoutRowMajor;
	const CLBlastTranspose a_t = ta ? CLBlastTransposeYes : CLBlastTransposeNo;
	const CLBlastTranspose b_t = tb ? CLBlastTransposeYes : CLBlastTransposeNo;
	size_t m = (size_t)M, n = (size_t)N, k = (size_t)K;
	/* an event only when it is wanted: CLBlast makes it otherwise for nothing */
	cl_event ev = NULL, *pev = d->profiling ? &ev : NULL;
	CLBlastStatusCode st;
	if (!f16 && batch == 1)
		st = F.sgemm(row, a_t, b_t, m, n, k, alpha, A, a_off, (size_t)lda, B, b_off,
			     (size_t)ldb, beta, C, c_off, (size_t)ldc, &d->q, pev);
	else if (!f16)
		st = F.sgemm_sb(row, a_t, b_t, m, n, k, alpha, A, a_off, (size_t)lda,
				(size_t)stride_a, B, b_off, (size_t)ldb, (size_t)stride_b, beta, C,
				c_off, (size_t)ldc, (size_t)stride_c, (size_t)batch, &d->q, pev);
	else if (batch == 1)
		st = F.hgemm(row, a_t, b_t, m, n, k, ml_f32_to_f16(alpha), A, a_off, (size_t)lda, B,
			     b_off, (size_t)ldb, ml_f32_to_f16(beta), C, c_off, (size_t)ldc, &d->q,
			     pev);
	else
		st = F.hgemm_sb(row, a_t, b_t, m, n, k, ml_f32_to_f16(alpha), A, a_off,
				(size_t)lda, (size_t)stride_a, B, b_off, (size_t)ldb,
				(size_t)stride_b, ml_f32_to_f16(beta), C, c_off, (size_t)ldc,
				(size_t)stride_c, (size_t)batch, &d->q, pev);
	if (st == CLBlastSuccess)
		mlcl_record(d, ev);
	else if (ev != NULL)
		clReleaseEvent(ev);
	return (int)st;
}
