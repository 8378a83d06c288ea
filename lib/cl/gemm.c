/*
 * gemm.c: the OpenCL GEMM of kernels/gemm.cl: strided-batched
 * C = alpha * op(A) * op(B) + beta * C, row-major, f32 and f16 storage, with
 * an optional fused epilogue (bias, ReLU) for Gemm and Conv. Each call
 * packs op(B) (and op(A) for f16) into scratch buffers from the device's
 * pool and runs the register-blocked micro-kernel over the panels; the
 * tile shape is chosen per device and passed as build options.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl/cl.h"

/*
 * The tile of one work-item: MR rows by VW * NV columns. On a CPU device
 * (POCL, Intel's CPU runtime) with 8-wide native vectors (AVX2) 6 x 16 is
 * the FMA micro-kernel: 12 accumulators, 2 B vectors and a broadcast fill
 * the 16 ymm registers; with 4-wide ones (SSE, NEON) 4 x 8 in float4s
 * fits the 16 registers the same way. Elsewhere (GPUs) a 4 x 8 tile in
 * float4s keeps the register count per work-item moderate, so occupancy
 * stays reasonable.
 * wg is the work-group size along the m panels: on a CPU device a
 * work-group is one thread's loop over its work-items, all of which share
 * one B panel, which then stays in the L1/L2 cache.
 */
struct tile {
	int mr, vw, nv, wg;
};

static struct tile
tile_for(const struct mlcl_dev *d)
{
	struct tile t;
	cl_uint vw = 0;
	if (clGetDeviceInfo(d->id, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof vw, &vw, NULL) !=
	    CL_SUCCESS)
		vw = 0;
	if ((d->type & CL_DEVICE_TYPE_CPU) && vw >= 8)
		t = (struct tile){ 6, 8, 2, 16 };
	else if (d->type & CL_DEVICE_TYPE_CPU)
		t = (struct tile){ 4, 4, 2, 16 };
	else
		t = (struct tile){ 4, 4, 2, 64 };
	/* ML_GEMM_TILE=MR,VW,NV,WG overrides, for tuning and for testing other shapes */
	const char *env = getenv("ML_GEMM_TILE");
	struct tile o;
	if (env != NULL && sscanf(env, "%d,%d,%d,%d", &o.mr, &o.vw, &o.nv, &o.wg) == 4 &&
	    o.mr >= 1 && o.mr <= 8 && (o.vw == 4 || o.vw == 8) && o.nv >= 1 && o.nv <= 4 &&
	    o.wg >= 1 && o.wg <= 1024)
		t = o;
	while (t.wg > 1 && (size_t)t.wg > d->max_wg)
		t.wg /= 2;
	return t;
}

static void
options(const struct tile *t, bool f16, char *buf, size_t n)
{
	snprintf(buf, n, "-DMR=%d -DVW=%d -DNV=%d -DWG=%d%s", t->mr, t->vw, t->nv, t->wg,
		 f16 ? " -DML_F16=1" : "");
}

/* set_args: set the kernel's arguments from (size, pointer) pairs */
static int
set_args(cl_kernel k, int n, const size_t *sz, const void *const *val, struct ml_err *e)
{
	for (int i = 0; i < n; i++)
		ML_CL(e, clSetKernelArg(k, (cl_uint)i, sz[i], val[i]));
	return 0;
}

/*
 * pack: enqueue the packing of a rows x cols operand (op applied through
 * trans) into panels of p rows (see ml_gemm_pack_T). nb batches, source
 * batch stride xs, packed batch stride ds (floats).
 */
static int
pack(struct mlcl_dev *d, cl_kernel k, cl_mem x, size_t off, int64_t ld, bool trans, int64_t rows,
     int64_t cols, int64_t xs, int p, cl_mem dst, int64_t ds, int64_t nb, struct ml_err *e)
{
	cl_long a_off = (cl_long)off, a_ld = ld, a_rows = rows, a_cols = cols, a_xs = xs,
		a_ds = ds;
	cl_int a_tr = trans;
	const size_t sz[] = { sizeof(cl_mem), 8, 8, 4, 8, 8, 8, sizeof(cl_mem), 8 };
	const void *const val[] = { &x, &a_off, &a_ld, &a_tr, &a_rows, &a_cols, &a_xs, &dst, &a_ds };
	ML_TRY(set_args(k, 9, sz, val, e));
	size_t panels = (size_t)((rows + p - 1) / p);
	size_t lx = d->max_wg < 64 ? d->max_wg : 64;
	size_t gws[3], lws[3] = { lx, 1, 1 };
	if (trans) {
		gws[0] = mlcl_round_up(panels, lx);
		gws[1] = (size_t)cols;
	} else {
		gws[0] = mlcl_round_up((size_t)cols, lx);
		gws[1] = panels;
	}
	gws[2] = (size_t)nb;
	return mlcl_launch(d, k, 3, gws, lws, e);
}

static bool
a_direct(void)
{
	const char *s = getenv("ML_GEMM_PACK_A");
	return s == NULL || *s == 0 || strcmp(s, "0") == 0;
}

/* okld: whether a row-major rows x cols matrix with leading dimension ld is addressable */
static bool
okld(int64_t rows, int64_t cols, int64_t ld)
{
	return rows == 0 || cols == 0 || ld >= cols;
}

static int
check(int64_t M, int64_t N, int64_t K, int64_t batch, int64_t stride_a, int64_t stride_b,
      int64_t stride_c, struct ml_err *e)
{
	if (M < 0 || N < 0 || K < 0 || batch < 0 || stride_a < 0 || stride_b < 0 ||
	    stride_c < 0)
		return ml_fail(e, ML_EINVAL, "gemm: negative size or stride");
	if (K > INT_MAX || M > INT_MAX || N > INT_MAX || batch > INT_MAX)
		return ml_fail(e, ML_ENOTSUP, "gemm: %lld x %lld x %lld is too large",
			       (long long)M, (long long)N, (long long)K);
	return 0;
}

/*
 * core: pack op(A) and run the micro-kernel over it and the packed B
 * (pb, pb_n floats per batch, pb_stride 0 when shared by all batches).
 */
static int
core(struct mlcl_dev *d, bool f16, bool ta, int64_t M, int64_t N, int64_t K, float alpha,
     cl_mem A, size_t a_off, int64_t lda, int64_t stride_a, cl_mem pb, int64_t pb_stride,
     float beta, cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_c,
     const struct mlcl_epi *epi, struct ml_err *e)
{
	struct tile t = tile_for(d);
	int64_t nmb = (M + t.mr - 1) / t.mr, nnb = (N + t.vw * t.nv - 1) / (t.vw * t.nv);
	char opt[96];
	options(&t, f16, opt, sizeof opt);
	cl_kernel k;
	/*
	 * An f32 A is read in place unless ML_GEMM_PACK_A is set (A's rows are
	 * streams the prefetcher follows; packing costs a pass over A per call,
	 * which for weights is paid on every run). An f16 A is packed (to f32),
	 * once when its batch stride is 0.
	 */
	bool direct = !f16 && a_direct();
	int64_t nba = stride_a == 0 ? 1 : batch, pa_n = nmb * t.mr * K;
	struct mlcl_buf *pa = NULL;
	cl_mem am = A;
	cl_long g_aoff = direct ? (cl_long)a_off : 0, g_as = stride_a, g_aps, g_ars, g_aks;
	int rc;
	if (direct) {
		g_as = stride_a;
		g_aps = ta ? t.mr : t.mr * lda;
		g_ars = ta ? 1 : lda;
		g_aks = ta ? lda : 1;
	} else {
		if ((rc = mlcl_buf_get(d, (size_t)(pa_n * nba) * sizeof(float), &pa, e)) < 0)
			return rc;
		am = pa->mem;
		if (K > 0 &&
		    ((rc = mlcl_kernel(d, "gemm", f16 ? "ml_gemm_pack_a_f16" : "ml_gemm_pack_a_f32",
				       opt, &k, e)) < 0 ||
		     (rc = pack(d, k, A, a_off, lda, ta, M, K, stride_a, t.mr, pa->mem, pa_n, nba,
				e)) < 0))
			goto out;
		g_as = stride_a == 0 ? 0 : pa_n;
		g_aps = K * t.mr;
		g_ars = 1;
		g_aks = t.mr;
	}
	if ((rc = mlcl_kernel(d, "gemm", f16 ? "ml_gemm_f16" : "ml_gemm_f32", opt, &k, e)) < 0)
		goto out;
	cl_long g_bs = pb_stride;
	cl_long g_coff = (cl_long)c_off, g_ldc = ldc, g_cs = stride_c, g_m = M, g_n = N;
	cl_int g_k = (cl_int)K, g_nmb = (cl_int)nmb;
	cl_mem bias = epi != NULL && epi->bias != NULL ? epi->bias : C;
	cl_long g_boff = epi != NULL ? (cl_long)epi->bias_off : 0;
	cl_long g_bm = epi != NULL ? epi->bias_sm : 0, g_bn = epi != NULL ? epi->bias_sn : 0;
	cl_int g_flags = (epi != NULL && epi->bias != NULL ? 1 : 0) |
			 (epi != NULL && epi->relu ? 2 : 0);
	const size_t sz[] = { sizeof(cl_mem), 8, 8, 8, 8, 8, sizeof(cl_mem), 8, sizeof(cl_mem), 8,
			      8, 8, 8, 8, 4, 4, 4, 4, sizeof(cl_mem), 8, 8, 8, 4 };
	const void *const val[] = { &am, &g_aoff, &g_as, &g_aps, &g_ars, &g_aks, &pb, &g_bs, &C, &g_coff,
				    &g_ldc, &g_cs, &g_m, &g_n, &g_k, &alpha, &beta, &g_nmb, &bias,
				    &g_boff, &g_bm, &g_bn, &g_flags };
	if ((rc = set_args(k, 23, sz, val, e)) < 0)
		goto out;
	size_t gws[3] = { mlcl_round_up((size_t)nmb, (size_t)t.wg), (size_t)nnb, (size_t)batch };
	size_t lws[3] = { (size_t)t.wg, 1, 1 };
	rc = mlcl_launch(d, k, 3, gws, lws, e);
out:
	/* the queue is in order: the scratch may be reused by whatever is enqueued next */
	mlcl_buf_put(d, pa);
	return rc;
}

int
mlcl_gemm_nr(const struct mlcl_dev *d)
{
	struct tile t = tile_for(d);
	return t.vw * t.nv;
}

int
mlcl_gemm_pb(struct mlcl_dev *d, bool f16, bool ta, int64_t M, int64_t N, int64_t K, float alpha,
	     cl_mem A, size_t a_off, int64_t lda, cl_mem PB, int64_t pb_stride, float beta,
	     cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a,
	     int64_t stride_c, const struct mlcl_epi *epi, struct ml_err *e)
{
	ML_TRY(check(M, N, K, batch, stride_a, pb_stride, stride_c, e));
	if (!okld(ta ? K : M, ta ? M : K, lda) || !okld(M, N, ldc))
		return ml_fail(e, ML_EINVAL, "gemm: leading dimension smaller than a row");
	if (M == 0 || N == 0 || batch == 0)
		return 0;
	return core(d, f16, ta, M, N, K, alpha, A, a_off, lda, stride_a, PB, pb_stride, beta, C,
		    c_off, ldc, batch, stride_c, epi, e);
}

int
mlcl_gemm_ex(struct mlcl_dev *d, bool f16, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
	     float alpha, cl_mem A, size_t a_off, int64_t lda, cl_mem B, size_t b_off, int64_t ldb,
	     float beta, cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a,
	     int64_t stride_b, int64_t stride_c, const struct mlcl_epi *epi, struct ml_err *e)
{
	ML_TRY(check(M, N, K, batch, stride_a, stride_b, stride_c, e));
	if (!okld(ta ? K : M, ta ? M : K, lda) || !okld(tb ? N : K, tb ? K : N, ldb) ||
	    !okld(M, N, ldc))
		return ml_fail(e, ML_EINVAL, "gemm: leading dimension smaller than a row");
	if (M == 0 || N == 0 || batch == 0)
		return 0;

	struct tile t = tile_for(d);
	int nr = t.vw * t.nv;
	char opt[96];
	options(&t, f16, opt, sizeof opt);
	/* a B with batch stride 0 (broadcast weights) is packed once and shared */
	int64_t nbb = stride_b == 0 ? 1 : batch, pb_n = (N + nr - 1) / nr * nr * K;
	struct mlcl_buf *pb = NULL;
	cl_kernel k;
	int rc;
	if ((rc = mlcl_buf_get(d, (size_t)(pb_n * nbb) * sizeof(float), &pb, e)) < 0)
		return rc;
	if (K > 0 &&
	    ((rc = mlcl_kernel(d, "gemm", f16 ? "ml_gemm_pack_b_f16" : "ml_gemm_pack_b_f32", opt,
			       &k, e)) < 0 ||
	     (rc = pack(d, k, B, b_off, ldb, !tb, N, K, stride_b, nr, pb->mem, pb_n, nbb, e)) < 0))
		goto out;
	rc = core(d, f16, ta, M, N, K, alpha, A, a_off, lda, stride_a, pb->mem,
		  stride_b == 0 ? 0 : pb_n, beta, C, c_off, ldc, batch, stride_c, epi, e);
out:
	mlcl_buf_put(d, pb);
	return rc;
}

int
mlcl_sgemm(struct mlcl_dev *d, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
	   cl_mem A, size_t a_off, int64_t lda, cl_mem B, size_t b_off, int64_t ldb, float beta,
	   cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b,
	   int64_t stride_c, struct ml_err *e)
{
	return mlcl_gemm_ex(d, false, ta, tb, M, N, K, alpha, A, a_off, lda, B, b_off, ldb, beta,
			    C, c_off, ldc, batch, stride_a, stride_b, stride_c, NULL, e);
}

int
mlcl_hgemm(struct mlcl_dev *d, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
	   cl_mem A, size_t a_off, int64_t lda, cl_mem B, size_t b_off, int64_t ldb, float beta,
	   cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b,
	   int64_t stride_c, struct ml_err *e)
{
	return mlcl_gemm_ex(d, true, ta, tb, M, N, K, alpha, A, a_off, lda, B, b_off, ldb, beta,
			    C, c_off, ldc, batch, stride_a, stride_b, stride_c, NULL, e);
}
