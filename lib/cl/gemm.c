/*
 * gemm.c: the OpenCL GEMM of kernels/gemm.cl: strided-batched
 * C = alpha * op(A) * op(B) + beta * C, row-major, f32 and f16 storage, with
 * an optional fused epilogue (bias, residual, activation) for Gemm and Conv. Each call
 * packs op(B) (and op(A) for f16) into scratch buffers from the device's
 * pool and runs the register-blocked micro-kernel over the panels; the
 * tile shape is measured per device at the first use (the fastest of a
 * few candidates, cached on disk) and passed as build options.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cl/cl.h"
#include "ops/fused.h"

/*
 * The tile of one work-item: MR rows by VW * NV columns, and WG, the
 * work-group size along the m panels (on a CPU device a work-group is one
 * thread's loop over its work-items, all of which share one B panel, which
 * then stays in the L1/L2 cache). No formula predicts the best one: it
 * depends on the registers, the vector units, the caches and what the
 * driver's compiler makes of the unrolled loop, so a few candidates per
 * kind of device are timed at the first use and the fastest is kept, on
 * disk next to the programs. The candidates, best guess first:
 *   CPU, 16-wide native float vectors (AVX-512, 32 registers): 8 x 32 and
 *     6 x 32 in float16s (16 and 12 accumulators), and the AVX2 6 x 16;
 *   CPU, 8-wide (AVX2, 16 registers): 6 x 16 in float8s (12 accumulators,
 *     2 B vectors and a broadcast fill the 16 ymm), 4 x 24, 8 x 8;
 *   CPU, 4-wide (SSE, NEON): 4 x 8 in float4s, 6 x 8, 4 x 12;
 *   GPUs and the rest: 4 x 8 in float4s (a moderate register count per
 *     work-item keeps occupancy up) at WG 64, 128 and 256, and 8 x 8.
 * On POCL over 2 Zen 5 cores the 16-wide tiles run the 1024^3 SGEMM at
 * about 350 GFLOP/s, the 6 x 16 one at about 110.
 */
#define TUNE_N 512		/* the measured SGEMM: TUNE_N^3 */
#define TUNE_RUNS 3		/* timed runs per candidate, after one to build and warm up */
#define TUNE_BUDGET 1.5		/* seconds: no third candidate is started after this */
#define MAX_TILES 8

static bool
tile_ok(const struct mlcl_dev *d, const struct mlcl_tile *t)
{
	return t->mr >= 1 && t->mr <= 16 && (t->vw == 4 || t->vw == 8 || t->vw == 16) &&
	       t->nv >= 1 && t->nv <= 4 && t->wg >= 1 && t->wg <= 1024 &&
	       (size_t)t->wg <= d->max_wg;
}

int
mlcl_gemm_tiles(const struct mlcl_dev *d, struct mlcl_tile *out, int max)
{
	static const struct mlcl_tile cpu16[] = { { 8, 16, 2, 16 }, { 6, 16, 2, 16 },
						  { 6, 8, 2, 16 } };
	static const struct mlcl_tile cpu8[] = { { 6, 8, 2, 16 }, { 4, 8, 3, 16 },
						 { 8, 8, 1, 16 } };
	static const struct mlcl_tile cpu4[] = { { 4, 4, 2, 16 }, { 6, 4, 2, 16 },
						 { 4, 4, 3, 16 } };
	static const struct mlcl_tile gpu[] = { { 4, 4, 2, 64 }, { 4, 4, 2, 128 },
						{ 4, 4, 2, 256 }, { 8, 4, 2, 64 } };
	const struct mlcl_tile *c = gpu;
	int nc = (int)(sizeof gpu / sizeof gpu[0]);
	cl_uint vw = 0;
	if (clGetDeviceInfo(d->id, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof vw, &vw, NULL) !=
	    CL_SUCCESS)
		vw = 0;
	if ((d->type & CL_DEVICE_TYPE_CPU) && vw >= 16) {
		c = cpu16;
		nc = (int)(sizeof cpu16 / sizeof cpu16[0]);
	} else if ((d->type & CL_DEVICE_TYPE_CPU) && vw >= 8) {
		c = cpu8;
		nc = (int)(sizeof cpu8 / sizeof cpu8[0]);
	} else if (d->type & CL_DEVICE_TYPE_CPU) {
		c = cpu4;
		nc = (int)(sizeof cpu4 / sizeof cpu4[0]);
	}
	int n = 0;
	for (int i = 0; i < nc && n < max; i++) {
		struct mlcl_tile t = c[i];
		while (t.wg > 1 && (size_t)t.wg > d->max_wg)
			t.wg /= 2;
		bool dup = false;
		for (int j = 0; j < n; j++)
			dup |= memcmp(&out[j], &t, sizeof t) == 0;
		if (!dup)
			out[n++] = t;
	}
	return n;
}

void
mlcl_gemm_use(struct mlcl_dev *d, const struct mlcl_tile *t)
{
	d->tile = *t;
	d->tile_how = "set by the caller";
}

/* options: the program's build options; round is an epilogue's (MLCL_ROUND_*, 0: none) */
static void
options(const struct mlcl_tile *t, bool f16, int round, char *buf, size_t n)
{
	snprintf(buf, n, "-DMR=%d -DVW=%d -DNV=%d -DWG=%d%s%s", t->mr, t->vw, t->nv, t->wg,
		 f16 ? " -DML_F16=1" : "", round == MLCL_ROUND_F16 ? " -DML_ROUND=1" :
		 round == MLCL_ROUND_BF16 ? " -DML_ROUND=2" : "");
}

/* rounding: the operand rounding epi asks for (MLCL_ROUND_*), 0 for none */
static int
rounding(const struct mlcl_epi *epi)
{
	return epi != NULL ? epi->round : 0;
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

/* epi_act: the epilogue's activation code, relu being ML_ACT_RELU */
static int
epi_act(const struct mlcl_epi *ep)
{
	return ep->act == ML_ACT_NONE && ep->relu ? ML_ACT_RELU : ep->act;
}

static int
check(int64_t M, int64_t N, int64_t K, int64_t batch, int64_t stride_a, int64_t stride_b,
      int64_t stride_c, const struct mlcl_epi *epi, struct ml_err *e)
{
	if (epi != NULL && (epi->act < ML_ACT_NONE || epi->act > ML_ACT_GELU))
		return ml_fail(e, ML_EINVAL, "gemm: unknown activation code %d", epi->act);
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
core(struct mlcl_dev *d, const struct mlcl_tile *t, bool f16, bool ta, int64_t M, int64_t N,
     int64_t K, float alpha, cl_mem A, size_t a_off, int64_t lda, int64_t stride_a, cl_mem pb,
     int64_t pb_stride, float beta, cl_mem C, size_t c_off, int64_t ldc, int64_t batch,
     int64_t stride_c, const struct mlcl_epi *epi, struct ml_err *e)
{
	int64_t nmb = (M + t->mr - 1) / t->mr, nnb = (N + t->vw * t->nv - 1) / (t->vw * t->nv);
	char opt[96];
	options(t, f16, rounding(epi), opt, sizeof opt);
	cl_kernel k;
	/*
	 * An f32 A is read in place unless ML_GEMM_PACK_A is set (A's rows are
	 * streams the prefetcher follows; packing costs a pass over A per call,
	 * which for weights is paid on every run). An f16 A is packed (to f32),
	 * once when its batch stride is 0, and so is an A to be rounded.
	 */
	bool direct = !f16 && !rounding(epi) && a_direct();
	int64_t nba = stride_a == 0 ? 1 : batch, pa_n = nmb * t->mr * K;
	struct mlcl_buf *pa = NULL;
	cl_mem am = A;
	cl_long g_aoff = direct ? (cl_long)a_off : 0, g_as = stride_a, g_aps, g_ars, g_aks;
	int rc;
	if (direct) {
		g_as = stride_a;
		g_aps = ta ? t->mr : t->mr * lda;
		g_ars = ta ? 1 : lda;
		g_aks = ta ? lda : 1;
	} else {
		if ((rc = mlcl_buf_get(d, (size_t)(pa_n * nba) * sizeof(float), &pa, e)) < 0)
			return rc;
		am = pa->mem;
		if (K > 0 &&
		    ((rc = mlcl_kernel(d, "gemm", f16 ? "ml_gemm_pack_a_f16" : "ml_gemm_pack_a_f32",
				       opt, &k, e)) < 0 ||
		     (rc = pack(d, k, A, a_off, lda, ta, M, K, stride_a, t->mr, pa->mem, pa_n, nba,
				e)) < 0))
			goto out;
		g_as = stride_a == 0 ? 0 : pa_n;
		g_aps = K * t->mr;
		g_ars = 1;
		g_aks = t->mr;
	}
	if ((rc = mlcl_kernel(d, "gemm", f16 ? "ml_gemm_f16" : "ml_gemm_f32", opt, &k, e)) < 0)
		goto out;
	cl_long g_bs = pb_stride;
	cl_long g_coff = (cl_long)c_off, g_ldc = ldc, g_cs = stride_c, g_m = M, g_n = N;
	cl_int g_k = (cl_int)K, g_nmb = (cl_int)nmb;
	/* absent operands are bound to C, which the kernel then does not read */
	static const struct mlcl_epi none = { 0 };
	const struct mlcl_epi *ep = epi != NULL ? epi : &none;
	cl_mem bias = ep->bias != NULL ? ep->bias : C, z = ep->z != NULL ? ep->z : C;
	cl_long g_boff = (cl_long)ep->bias_off, g_bm = ep->bias_sm, g_bn = ep->bias_sn;
	cl_long g_zoff = (cl_long)ep->z_off;
	cl_int g_flags = (ep->bias != NULL ? 1 : 0) | (ep->z != NULL ? 2 : 0);
	cl_int g_act = epi_act(ep);
	const size_t sz[] = { sizeof(cl_mem), 8, 8, 8, 8, 8, sizeof(cl_mem), 8, sizeof(cl_mem), 8,
			      8, 8, 8, 8, 4, 4, 4, 4, sizeof(cl_mem), 8, 8, 8, 4,
			      sizeof(cl_mem), 8, 4, 4, 4 };
	const void *const val[] = { &am, &g_aoff, &g_as, &g_aps, &g_ars, &g_aks, &pb, &g_bs, &C, &g_coff,
				    &g_ldc, &g_cs, &g_m, &g_n, &g_k, &alpha, &beta, &g_nmb, &bias,
				    &g_boff, &g_bm, &g_bn, &g_flags, &z, &g_zoff, &g_act, &ep->lo,
				    &ep->hi };
	if ((rc = set_args(k, 28, sz, val, e)) < 0)
		goto out;
	size_t gws[3] = { mlcl_round_up((size_t)nmb, (size_t)t->wg), (size_t)nnb, (size_t)batch };
	size_t lws[3] = { (size_t)t->wg, 1, 1 };
	rc = mlcl_launch(d, k, 3, gws, lws, e);
out:
	/* the queue is in order: the scratch may be reused by whatever is enqueued next */
	mlcl_buf_put(d, pa);
	return rc;
}

int
mlcl_gemm_nr(struct mlcl_dev *d)
{
	const struct mlcl_tile *t = mlcl_gemm_tile(d);
	return t->vw * t->nv;
}

int
mlcl_gemm_pb(struct mlcl_dev *d, bool f16, bool ta, int64_t M, int64_t N, int64_t K, float alpha,
	     cl_mem A, size_t a_off, int64_t lda, cl_mem PB, int64_t pb_stride, float beta,
	     cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a,
	     int64_t stride_c, const struct mlcl_epi *epi, struct ml_err *e)
{
	ML_TRY(check(M, N, K, batch, stride_a, pb_stride, stride_c, epi, e));
	if (!okld(ta ? K : M, ta ? M : K, lda) || !okld(M, N, ldc))
		return ml_fail(e, ML_EINVAL, "gemm: leading dimension smaller than a row");
	/* always ours (the columns are in our tile's layout), but ML_CL_GEMM is checked */
	ML_TRY(mlcl_gemm_engine(d, e));
	if (M == 0 || N == 0 || batch == 0)
		return 0;
	return core(d, mlcl_gemm_tile(d), f16, ta, M, N, K, alpha, A, a_off, lda, stride_a, PB,
		    pb_stride, beta, C, c_off, ldc, batch, stride_c, epi, e);
}

/* packed_b: mlcl_gemm_ex's work with tile t, after the checks: pack op(B), then core */
static int
packed_b(struct mlcl_dev *d, const struct mlcl_tile *t, bool f16, bool ta, bool tb, int64_t M,
	 int64_t N, int64_t K, float alpha, cl_mem A, size_t a_off, int64_t lda, cl_mem B,
	 size_t b_off, int64_t ldb, float beta, cl_mem C, size_t c_off, int64_t ldc,
	 int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c,
	 const struct mlcl_epi *epi, struct ml_err *e)
{
	int nr = t->vw * t->nv;
	char opt[96];
	options(t, f16, rounding(epi), opt, sizeof opt);
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
	rc = core(d, t, f16, ta, M, N, K, alpha, A, a_off, lda, stride_a, pb->mem,
		  stride_b == 0 ? 0 : pb_n, beta, C, c_off, ldc, batch, stride_c, epi, e);
out:
	mlcl_buf_put(d, pb);
	return rc;
}

/* pow2: the largest power of two <= n (1 for n < 2) */
static size_t
pow2(size_t n)
{
	size_t p = 1;
	while (p * 2 <= n)
		p *= 2;
	return p;
}

/*
 * gemv: the product with M == 1 or N == 1 on kernels/gemm.cl's ml_gemv_T
 * (see there): W is op(B)^T and v op(A)'s row when M == 1, W op(A) and v
 * op(B)'s column otherwise. A W contiguous along k gets work-groups of
 * LX = 1 by LY work-items, one output each; a W contiguous along j gets
 * LX = mlcl_wg(d, R) outputs by LY, the K split in chunks of about 16
 * values, within the device's work-group and local memory limits.
 */
static int
gemv(struct mlcl_dev *d, const struct mlcl_tile *t, bool f16, bool ta, bool tb, int64_t M,
     int64_t N, int64_t K, float alpha, cl_mem A, size_t a_off, int64_t lda, cl_mem B,
     size_t b_off, int64_t ldb, float beta, cl_mem C, size_t c_off, int64_t ldc, int64_t batch,
     int64_t stride_a, int64_t stride_b, int64_t stride_c, const struct mlcl_epi *epi,
     struct ml_err *e)
{
	static const struct mlcl_epi none = { 0 };
	const struct mlcl_epi *ep = epi != NULL ? epi : &none;
	cl_mem w, x;
	cl_long woff, ws, wsj, wsk, xoff, xst, xs, ys, R, bs;
	if (M == 1) {
		w = B, woff = (cl_long)b_off, ws = stride_b, wsj = tb ? ldb : 1, wsk = tb ? 1 : ldb;
		x = A, xoff = (cl_long)a_off, xst = stride_a, xs = ta ? lda : 1;
		R = N, ys = 1, bs = ep->bias_sn;
	} else {
		w = A, woff = (cl_long)a_off, ws = stride_a, wsj = ta ? 1 : lda, wsk = ta ? lda : 1;
		x = B, xoff = (cl_long)b_off, xst = stride_b, xs = tb ? 1 : ldb;
		R = M, ys = ldc, bs = ep->bias_sm;
	}
	size_t lx, ly;
	if (wsk == 1) {
		/*
		 * A CPU device runs a work-group as a loop over its work-items, so
		 * splitting K finely buys nothing there and the reduction costs:
		 * the smallest group (on POCL the classifier's 1 x 1000 x 1280 ran
		 * at 16 GFLOP/s with 8 work-items, 3 with 64); elsewhere a group
		 * wide enough that each work-item reads about 8 values per row.
		 */
		lx = 1;
		ly = pow2((d->type & CL_DEVICE_TYPE_CPU) ? (d->wg_multiple ? d->wg_multiple : 8) :
			  mlcl_wg(d, (size_t)(K + 7) / 8));
	} else {
		lx = pow2(mlcl_wg(d, (size_t)R));
		ly = pow2(mlcl_wg(d, (size_t)(K + 15) / 16));
	}
	while (ly > 1 && (lx * ly > d->max_wg || (d->local_mem > 0 &&
						     lx * ly * sizeof(float) > d->local_mem)))
		ly /= 2;
	char opt[96];
	options(t, f16, 0, opt, sizeof opt);
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "gemm", f16 ? "ml_gemv_f16" : "ml_gemv_f32", opt, &k, e));
	cl_mem bias = ep->bias != NULL ? ep->bias : C, z = ep->z != NULL ? ep->z : C;
	cl_long coff = (cl_long)c_off, cs = stride_c, boff = (cl_long)ep->bias_off;
	cl_long zoff = (cl_long)ep->z_off;
	cl_int kk = (cl_int)K, flags = (ep->bias != NULL ? 1 : 0) | (ep->z != NULL ? 2 : 0);
	cl_int act = epi_act(ep);
	const size_t sz[] = { sizeof(cl_mem), 8, 8, 8, 8, sizeof(cl_mem), 8, 8, 8, sizeof(cl_mem),
			      8, 8, 8, 8, 4, 4, 4, sizeof(cl_mem), 8, 8, 4, sizeof(cl_mem), 8, 4,
			      4, 4 };
	const void *const val[] = { &w, &woff, &ws, &wsj, &wsk, &x, &xoff, &xst, &xs, &C, &coff,
				    &cs, &ys, &R, &kk, &alpha, &beta, &bias, &boff, &bs, &flags,
				    &z, &zoff, &act, &ep->lo, &ep->hi };
	ML_TRY(set_args(k, 26, sz, val, e));
	ML_CL(e, clSetKernelArg(k, 26, lx * ly * sizeof(float), NULL));
	size_t gws[3] = { mlcl_round_up((size_t)R, lx), ly, (size_t)batch };
	size_t lws[3] = { lx, ly, 1 };
	return mlcl_launch(d, k, 3, gws, lws, e);
}

/* own: the product on our kernels: the GEMV when M or N is 1, else the tiled GEMM */
static int
own(struct mlcl_dev *d, bool f16, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
    float alpha, cl_mem A, size_t a_off, int64_t lda, cl_mem B, size_t b_off, int64_t ldb,
    float beta, cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a,
    int64_t stride_b, int64_t stride_c, const struct mlcl_epi *epi, struct ml_err *e)
{
	const struct mlcl_tile *t = mlcl_gemm_tile(d);
	/*
	 * The GEMV, but on a CPU device only for a matrix contiguous along k:
	 * one contiguous along the outputs (M == 1 with B untransposed, N == 1
	 * with A transposed) ran at 2 GFLOP/s on POCL, the tiled kernel at 4.
	 */
	bool along_k = M == 1 ? tb : !ta;
	/* operands to be rounded are packed (the GEMV reads them in place) */
	if ((M == 1 || N == 1) && (along_k || !(d->type & CL_DEVICE_TYPE_CPU)) && !rounding(epi))
		return gemv(d, t, f16, ta, tb, M, N, K, alpha, A, a_off, lda, B, b_off, ldb, beta,
			    C, c_off, ldc, batch, stride_a, stride_b, stride_c, epi, e);
	return packed_b(d, t, f16, ta, tb, M, N, K, alpha, A, a_off, lda, B, b_off, ldb, beta, C,
			c_off, ldc, batch, stride_a, stride_b, stride_c, epi, e);
}

/*
 * epilogue: the epilogue of epi alone over C (kernels/gemm.cl's
 * ml_gemm_epi_T), after CLBlast's product; nothing when epi adds nothing.
 */
static int
epilogue(struct mlcl_dev *d, bool f16, int64_t M, int64_t N, cl_mem C, size_t c_off,
	 int64_t ldc, int64_t batch, int64_t stride_c, const struct mlcl_epi *epi,
	 struct ml_err *e)
{
	if (epi == NULL || (epi->bias == NULL && epi->z == NULL && epi_act(epi) == ML_ACT_NONE))
		return 0;
	char opt[96];
	options(mlcl_gemm_tile(d), f16, 0, opt, sizeof opt);
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "gemm", f16 ? "ml_gemm_epi_f16" : "ml_gemm_epi_f32", opt, &k, e));
	cl_mem bias = epi->bias != NULL ? epi->bias : C, z = epi->z != NULL ? epi->z : C;
	cl_long coff = (cl_long)c_off, g_ldc = ldc, cs = stride_c, g_m = M, g_n = N;
	cl_long boff = (cl_long)epi->bias_off, bsm = epi->bias_sm, bsn = epi->bias_sn;
	cl_long zoff = (cl_long)epi->z_off;
	cl_int flags = (epi->bias != NULL ? 1 : 0) | (epi->z != NULL ? 2 : 0), act = epi_act(epi);
	const size_t sz[] = { sizeof(cl_mem), 8, 8, 8, 8, 8, sizeof(cl_mem), 8, 8, 8, 4,
			      sizeof(cl_mem), 8, 4, 4, 4 };
	const void *const val[] = { &C, &coff, &g_ldc, &cs, &g_m, &g_n, &bias, &boff, &bsm, &bsn,
				    &flags, &z, &zoff, &act, &epi->lo, &epi->hi };
	ML_TRY(set_args(k, 16, sz, val, e));
	size_t lx = mlcl_wg(d, (size_t)N);
	size_t gws[3] = { mlcl_round_up((size_t)N, lx), (size_t)M, (size_t)batch };
	size_t lws[3] = { lx, 1, 1 };
	return mlcl_launch(d, k, 3, gws, lws, e);
}

/* how the engines were chosen when ML_CL_GEMM forced them */
static const char how_env[] = "ML_CL_GEMM";

/* shape_class: the MLCL_GEMM_* class of a product (cl.h) */
static int
shape_class(int64_t M, int64_t N, int64_t batch)
{
	if (M == 1 || N == 1)
		return MLCL_GEMM_GEMV;
	if (batch > 1)
		return MLCL_GEMM_BATCHED;
	if (M >= 8 * N || N >= 8 * M)
		return MLCL_GEMM_TALL;
	return MLCL_GEMM_SQUARE;
}

/*
 * dispatch: mlcl_gemm_ex's work after the checks, on the engine chosen for
 * the shape's class. Batches that share one B and whose A and C rows
 * follow each other are one product of batch * M rows (so one call, and
 * a taller tile, for MatMul's [batch, M, K] x [K, N]), unless a bias per
 * row would then be indexed past M.
 */
static int
dispatch(struct mlcl_dev *d, bool f16, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
	 float alpha, cl_mem A, size_t a_off, int64_t lda, cl_mem B, size_t b_off, int64_t ldb,
	 float beta, cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a,
	 int64_t stride_b, int64_t stride_c, const struct mlcl_epi *epi, struct ml_err *e)
{
	if (batch > 1 && stride_b == 0 && !ta && stride_a == M * lda && stride_c == M * ldc &&
	    M * batch <= INT_MAX && (epi == NULL || epi->bias == NULL || epi->bias_sm == 0)) {
		M *= batch;
		batch = 1;
		stride_a = stride_c = 0;
	}
	int cls = shape_class(M, N, batch);
	/*
	 * f16 goes to CLBlast only when forced: its HGEMM computes in half
	 * precision. Rounded operands never: CLBlast would multiply them in f32.
	 */
	if (K > 0 && d->gemm_eng[cls] == MLCL_CLBLAST && !d->clb_failed[f16] &&
	    (!f16 || d->eng_how == how_env) && !rounding(epi)) {
		int st = mlcl_clblast_gemm(d, f16, ta, tb, M, N, K, alpha, A, a_off, lda, stride_a,
					   B, b_off, ldb, stride_b, beta, C, c_off, ldc, stride_c,
					   batch);
		if (st == 0)
			return epilogue(d, f16, M, N, C, c_off, ldc, batch, stride_c, epi, e);
		/* redone on ours; CLBlast is not asked again for this precision */
		d->clb_failed[f16] = true;
		snprintf(d->eng_note, sizeof d->eng_note, "%s own: CLBlast %d (%s)",
			 f16 ? "f16" : "f32", st, mlcl_clblast_status_str(st));
	}
	return own(d, f16, ta, tb, M, N, K, alpha, A, a_off, lda, B, b_off, ldb, beta, C, c_off,
		   ldc, batch, stride_a, stride_b, stride_c, epi, e);
}

int
mlcl_gemm_on_clblast(struct mlcl_dev *d, bool f16, int64_t M, int64_t N, int64_t batch, bool *yes,
		     struct ml_err *e)
{
	*yes = false;
	ML_TRY(mlcl_gemm_engine(d, e));
	int cls = shape_class(M, N, batch);
	*yes = d->gemm_eng[cls] == MLCL_CLBLAST && !d->clb_failed[f16] &&
	       (!f16 || d->eng_how == how_env);
	return 0;
}

int
mlcl_gemm_ex(struct mlcl_dev *d, bool f16, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
	     float alpha, cl_mem A, size_t a_off, int64_t lda, cl_mem B, size_t b_off, int64_t ldb,
	     float beta, cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a,
	     int64_t stride_b, int64_t stride_c, const struct mlcl_epi *epi, struct ml_err *e)
{
	ML_TRY(check(M, N, K, batch, stride_a, stride_b, stride_c, epi, e));
	if (!okld(ta ? K : M, ta ? M : K, lda) || !okld(tb ? N : K, tb ? K : N, ldb) ||
	    !okld(M, N, ldc))
		return ml_fail(e, ML_EINVAL, "gemm: leading dimension smaller than a row");
	ML_TRY(mlcl_gemm_engine(d, e));
	if (M == 0 || N == 0 || batch == 0)
		return 0;
	return dispatch(d, f16, ta, tb, M, N, K, alpha, A, a_off, lda, B, b_off, ldb, beta, C,
			c_off, ldc, batch, stride_a, stride_b, stride_c, epi, e);
}

/*
 * The tuning cache: one line "ml-gemm-tune 1 MR VW NV WG", then comment
 * lines with what each candidate measured. Anything else (a truncated or
 * corrupt file, a tile this device cannot run) is ignored, measured again
 * and rewritten.
 */
/*
 * first_line: the first line of the cache file at path into line (cap
 * bytes with its NUL), its length in *n; false when the file cannot be
 * read or its first line does not fit or has no newline.
 */
static bool
first_line(const char *path, char *line, size_t cap, size_t *n)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	struct ml_err e = { 0 };
	if (access(path, R_OK) != 0 || ml_read_file(path, &buf, &len, &e) < 0)
		return false;
	size_t k = 0;
	while (k < len && k < cap - 1 && buf[k] != '\n')
		k++;
	bool ok = k < len && buf[k] == '\n';
	memcpy(line, buf, k);
	line[k] = '\0';
	ml_free(buf);
	*n = k;
	return ok;
}

static bool
read_choice(const struct mlcl_dev *d, const char *path, struct mlcl_tile *t)
{
	char line[64];
	size_t n;
	int used = 0;
	return first_line(path, line, sizeof line, &n) &&
	       sscanf(line, "ml-gemm-tune 1 %d %d %d %d%n", &t->mr, &t->vw, &t->nv, &t->wg,
		      &used) == 4 && used == (int)n && tile_ok(d, t);
}

/* gemm_run: one TUNE_N^3 SGEMM with tile t, finished: its seconds, or -1 on a failure */
static double
gemm_run(struct mlcl_dev *d, const struct mlcl_tile *t, cl_mem a, cl_mem b, cl_mem c)
{
	struct ml_err e = { 0 };
	double t0 = ml_now();
	if (packed_b(d, t, false, false, false, TUNE_N, TUNE_N, TUNE_N, 1.0f, a, 0, TUNE_N, b, 0,
		     TUNE_N, 0.0f, c, 0, TUNE_N, 1, 0, 0, 0, NULL, &e) < 0 ||
	    mlcl_finish(d, &e) < 0)
		return -1;
	return ml_now() - t0;
}

/*
 * measure: time every candidate (after a first run that builds it) and
 * write the fastest to path (NULL: nowhere); false when none ran. The
 * launches are not profiled: they belong to no node.
 */
static bool
measure(struct mlcl_dev *d, const struct mlcl_tile *cand, int n, const char *path,
	struct mlcl_tile *best)
{
	struct ml_err e = { 0 };
	struct mlcl_buf *a = NULL, *b = NULL, *c = NULL;
	size_t bytes = (size_t)TUNE_N * TUNE_N * sizeof(float);
	bool prof = d->profiling;
	double secs[MAX_TILES];
	int ibest = -1;
	d->profiling = false;
	if (mlcl_buf_get(d, bytes, &a, &e) < 0 || mlcl_buf_get(d, bytes, &b, &e) < 0 ||
	    mlcl_buf_get(d, bytes, &c, &e) < 0)
		goto out;
	/* finite values: what uninitialised memory holds might be denormals or NaNs */
	float one = 1.0f, half = 0.5f;
	if (clEnqueueFillBuffer(d->q, a->mem, &one, sizeof one, 0, bytes, 0, NULL, NULL) !=
		    CL_SUCCESS ||
	    clEnqueueFillBuffer(d->q, b->mem, &half, sizeof half, 0, bytes, 0, NULL, NULL) !=
		    CL_SUCCESS)
		goto out;
	double t0 = ml_now();
	for (int i = 0; i < n; i++)
		secs[i] = -1;
	/*
	 * Building a candidate is most of its cost (on POCL about a second
	 * when nothing is cached, a few ms when POCL's own cache has it; the
	 * winner's build is needed anyway), so once TUNE_BUDGET has passed no
	 * candidate after the second is started.
	 */
	for (int i = 0; i < n && !d->lost && (i < 2 || ml_now() - t0 < TUNE_BUDGET); i++) {
		/* the first run builds the program (and JIT-compiles the kernels) */
		bool ran = gemm_run(d, &cand[i], a->mem, b->mem, c->mem) >= 0;
		for (int r = 0; ran && r < TUNE_RUNS; r++) {
			double s = gemm_run(d, &cand[i], a->mem, b->mem, c->mem);
			ran = s >= 0;
			if (ran && (secs[i] < 0 || s < secs[i]))
				secs[i] = s;
		}
		if (!ran)
			secs[i] = -1;
		if (secs[i] > 0 && (ibest < 0 || secs[i] < secs[ibest]))
			ibest = i;
	}
	if (ibest < 0 || d->lost)
		goto out;
	*best = cand[ibest];
	if (path != NULL) {
		char txt[1024];
		int len = snprintf(txt, sizeof txt, "ml-gemm-tune 1 %d %d %d %d\n"
				   "# MR VW NV WG: GFLOP/s of a %d^3 SGEMM on %s (%s)\n",
				   best->mr, best->vw, best->nv, best->wg, TUNE_N, d->name,
				   d->driver);
		for (int i = 0; i < n && len < (int)sizeof txt; i++)
			len += secs[i] > 0 ?
			       snprintf(txt + len, sizeof txt - (size_t)len, "# %d %d %d %d: %.1f\n",
					cand[i].mr, cand[i].vw, cand[i].nv, cand[i].wg,
					2e-9 * TUNE_N * TUNE_N * TUNE_N / secs[i]) :
			       snprintf(txt + len, sizeof txt - (size_t)len,
					"# %d %d %d %d: not timed\n", cand[i].mr, cand[i].vw,
					cand[i].nv, cand[i].wg);
		if (len < (int)sizeof txt)
			mlcl_cache_write(path, txt, (size_t)len);
	}
out:
	mlcl_buf_put(d, a);
	mlcl_buf_put(d, b);
	mlcl_buf_put(d, c);
	d->profiling = prof;
	return ibest >= 0 && !d->lost;
}

const struct mlcl_tile *
mlcl_gemm_tile(struct mlcl_dev *d)
{
	if (d->tile_how != NULL)
		return &d->tile;
	struct mlcl_tile cand[MAX_TILES], t;
	int n = mlcl_gemm_tiles(d, cand, MAX_TILES);
	const char *env = getenv("ML_GEMM_TILE");
	char path[4096];
	double t0 = ml_now(), p0 = d->t_programs;
	d->tile = cand[0];
	d->tile_how = "the first candidate (no disk cache)";
	if (env != NULL && sscanf(env, "%d,%d,%d,%d", &t.mr, &t.vw, &t.nv, &t.wg) == 4 &&
	    tile_ok(d, &t)) {
		d->tile = t;
		d->tile_how = "ML_GEMM_TILE";
	} else if (mlcl_cache_path(d, "gemm", "tune", "txt", path, sizeof path)) {
		if (read_choice(d, path, &t)) {
			d->tile = t;
			d->tile_how = "the tuning cache";
		} else if (measure(d, cand, n, path, &t)) {
			d->tile = t;
			d->tile_how = "measured";
		} else {
			d->tile_how = "the first candidate (measuring failed)";
		}
	}
	/* the candidates' builds are counted in t_programs already */
	d->t_tune += ml_now() - t0 - (d->t_programs - p0);
	return &d->tile;
}

int
mlcl_gemm_prepare(struct mlcl_dev *d, bool f16, struct ml_err *e)
{
	char opt[96];
	cl_kernel k;
	ML_TRY(mlcl_gemm_engine(d, e));
	options(mlcl_gemm_tile(d), f16, 0, opt, sizeof opt);
	return mlcl_kernel(d, "gemm", f16 ? "ml_gemm_f16" : "ml_gemm_f32", opt, &k, e);
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

/*
 * The engines. Each class is timed on a shape typical of it (cl.h), in
 * the order below: the square class first, and the others only when
 * CLBlast came within 2x of ours there (on POCL it runs the 1024^3 SGEMM
 * at about 10 GFLOP/s against ours' 100, and each of its routines that
 * runs compiles for 10 to 30 s before POCL's cache has it). The square
 * class is timed at 1024^3, not smaller: that is where a GPU's engines
 * part (the H200 ran it at 3.4 TFLOP/s on ours, 13 on CLBlast), and a
 * larger product only widens the gap, while at 512^3 CLBlast's extra
 * launches (padding, transposes) could hide it. The choice is
 * cached in gemm-engine-KEY.txt: one line "ml-gemm-engine 1 LIB E E E E"
 * (LIB the CLBlast library's file, E own or clblast per class in the
 * order of the MLCL_GEMM_* enum), then comment lines with the rates.
 */
static const char *const class_name[MLCL_GEMM_CLASSES] = { "square", "tall", "batched", "gemv" };
static const char *const engine_name[] = { "own", "clblast" };
static const struct {
	int64_t M, N, K, batch;
	bool tb;
} probe_shape[MLCL_GEMM_CLASSES] = {
	[MLCL_GEMM_SQUARE] = { 1024, 1024, 1024, 1, false },
	[MLCL_GEMM_TALL] = { 64, 3136, 576, 1, false },
	[MLCL_GEMM_BATCHED] = { 128, 128, 64, 12, true },
	[MLCL_GEMM_GEMV] = { 1, 1000, 1280, 1, true },
};
#define PROBE_A (1024 * 1024)	/* floats of the largest A, B and C above */
#define PROBE_B (576 * 3136)
#define PROBE_C (1024 * 1024)

static void
engines_all(struct mlcl_dev *d, int engine)
{
	for (int i = 0; i < MLCL_GEMM_CLASSES; i++)
		d->gemm_eng[i] = (unsigned char)engine;
}

static bool
read_engines(struct mlcl_dev *d, const char *path)
{
	char line[256], lib[129], w[MLCL_GEMM_CLASSES][9];
	size_t n;
	int used = 0;
	if (!first_line(path, line, sizeof line, &n) ||
	    sscanf(line, "ml-gemm-engine 1 %128s %8s %8s %8s %8s%n", lib, w[0], w[1], w[2], w[3],
		   &used) != 5 || used != (int)n || strcmp(lib, mlcl_clblast_lib()) != 0)
		return false;
	unsigned char eng[MLCL_GEMM_CLASSES];
	for (int i = 0; i < MLCL_GEMM_CLASSES; i++) {
		if (strcmp(w[i], "own") == 0)
			eng[i] = MLCL_OWN;
		else if (strcmp(w[i], "clblast") == 0)
			eng[i] = MLCL_CLBLAST;
		else
			return false;
	}
	memcpy(d->gemm_eng, eng, sizeof eng);
	return true;
}

/* probe_run: one product of class cls on engine eng, finished: its seconds, or -1 on a failure */
static double
probe_run(struct mlcl_dev *d, int eng, int cls, cl_mem a, cl_mem b, cl_mem c)
{
	struct ml_err e = { 0 };
	int64_t M = probe_shape[cls].M, N = probe_shape[cls].N, K = probe_shape[cls].K;
	int64_t nb = probe_shape[cls].batch, sa = nb > 1 ? M * K : 0, sb = nb > 1 ? N * K : 0;
	int64_t sc = nb > 1 ? M * N : 0;
	bool tb = probe_shape[cls].tb;
	double t0 = ml_now();
	if (eng == MLCL_CLBLAST) {
		if (mlcl_clblast_gemm(d, false, false, tb, M, N, K, 1.0f, a, 0, K, sa, b, 0,
				      tb ? K : N, sb, 0.0f, c, 0, N, sc, nb) != 0)
			return -1;
	} else if (own(d, false, false, tb, M, N, K, 1.0f, a, 0, K, b, 0, tb ? K : N, 0.0f, c, 0,
		       N, nb, sa, sb, sc, NULL, &e) < 0) {
		return -1;
	}
	if (mlcl_finish(d, &e) < 0)
		return -1;
	return ml_now() - t0;
}

/*
 * probe_time: the best of TUNE_RUNS runs after one that builds and warms
 * up; -1 on a failure. A run slower than give_up (when > 0) ends the
 * timing at once: the engine has lost (CLBlast on POCL, 0.2 s a run).
 */
static double
probe_time(struct mlcl_dev *d, int eng, int cls, cl_mem a, cl_mem b, cl_mem c, double give_up)
{
	double best = probe_run(d, eng, cls, a, b, c) >= 0 ? 0 : -1;
	for (int r = 0; best >= 0 && r < TUNE_RUNS; r++) {
		double s = probe_run(d, eng, cls, a, b, c);
		best = s < 0 ? -1 : (best == 0 || s < best) ? s : best;
		if (give_up > 0 && s > give_up)
			break;
	}
	return best > 0 ? best : -1;
}

/*
 * measure_engines: time the classes on both engines (see above), set
 * d->gemm_eng and write the choice to path; false when nothing could be
 * timed (d keeps ours everywhere). Not profiled, like the tile's timing.
 */
static bool
measure_engines(struct mlcl_dev *d, const char *path)
{
	struct ml_err e = { 0 };
	struct mlcl_buf *a = NULL, *b = NULL, *c = NULL;
	bool prof = d->profiling, ok = false;
	double t[2][MLCL_GEMM_CLASSES];
	d->profiling = false;
	engines_all(d, MLCL_OWN);
	for (int i = 0; i < MLCL_GEMM_CLASSES; i++)
		t[0][i] = t[1][i] = -1;
	if (mlcl_buf_get(d, PROBE_A * sizeof(float), &a, &e) < 0 ||
	    mlcl_buf_get(d, PROBE_B * sizeof(float), &b, &e) < 0 ||
	    mlcl_buf_get(d, PROBE_C * sizeof(float), &c, &e) < 0)
		goto out;
	float one = 1.0f, half = 0.5f;
	if (clEnqueueFillBuffer(d->q, a->mem, &one, sizeof one, 0, PROBE_A * sizeof(float), 0,
				NULL, NULL) != CL_SUCCESS ||
	    clEnqueueFillBuffer(d->q, b->mem, &half, sizeof half, 0, PROBE_B * sizeof(float), 0,
				NULL, NULL) != CL_SUCCESS)
		goto out;
	for (int i = 0; i < MLCL_GEMM_CLASSES && !d->lost; i++) {
		if (i > 0 && !(t[1][0] > 0 && t[1][0] <= 2 * t[0][0]))
			break;
		t[0][i] = probe_time(d, MLCL_OWN, i, a->mem, b->mem, c->mem, 0);
		t[1][i] = probe_time(d, MLCL_CLBLAST, i, a->mem, b->mem, c->mem, 2 * t[0][i]);
		if (t[1][i] > 0 && (t[0][i] < 0 || t[1][i] < t[0][i]))
			d->gemm_eng[i] = MLCL_CLBLAST;
		ok |= t[0][i] > 0 || t[1][i] > 0;
	}
	if (!ok || d->lost) {
		engines_all(d, MLCL_OWN);
		ok = false;
		goto out;
	}
	char txt[1024];
	int len = snprintf(txt, sizeof txt, "ml-gemm-engine 1 %s %s %s %s %s\n"
			   "# GFLOP/s of own and %s on %s (%s)\n", mlcl_clblast_lib(),
			   engine_name[d->gemm_eng[0]], engine_name[d->gemm_eng[1]],
			   engine_name[d->gemm_eng[2]], engine_name[d->gemm_eng[3]],
			   mlcl_clblast_lib(), d->name, d->driver);
	for (int i = 0; i < MLCL_GEMM_CLASSES && len < (int)sizeof txt; i++) {
		double fl = 2e-9 * (double)(probe_shape[i].M * probe_shape[i].N * probe_shape[i].K *
					    probe_shape[i].batch);
		len += snprintf(txt + len, sizeof txt - (size_t)len, "# %s %lldx%lldx%lld",
				class_name[i], (long long)probe_shape[i].M,
				(long long)probe_shape[i].N, (long long)probe_shape[i].K);
		for (int g = 0; g < 2 && len < (int)sizeof txt; g++)
			len += t[g][i] > 0 ?
			       snprintf(txt + len, sizeof txt - (size_t)len, " %s %.1f",
					engine_name[g], fl / t[g][i]) :
			       snprintf(txt + len, sizeof txt - (size_t)len, " %s -",
					engine_name[g]);
		if (len < (int)sizeof txt)
			len += snprintf(txt + len, sizeof txt - (size_t)len, "%s\n",
					probe_shape[i].batch > 1 ? " (batch 12)" : "");
	}
	if (len < (int)sizeof txt)
		mlcl_cache_write(path, txt, (size_t)len);
out:
	mlcl_buf_put(d, a);
	mlcl_buf_put(d, b);
	mlcl_buf_put(d, c);
	d->profiling = prof;
	return ok;
}

int
mlcl_gemm_engine(struct mlcl_dev *d, struct ml_err *e)
{
	if (d->eng_how != NULL)
		return d->eng_bad ? ml_fail(e, ML_EINVAL, "%s", d->eng_note) : 0;
	const char *env = getenv("ML_CL_GEMM"), *why = NULL;
	engines_all(d, MLCL_OWN);
	d->eng_note[0] = '\0';
	if (env != NULL && env[0] != '\0' && strcmp(env, "auto") != 0) {
		if (strcmp(env, "own") == 0) {
			d->eng_how = how_env;
		} else if (strcmp(env, "clblast") != 0) {
			d->eng_bad = true;
			d->eng_how = "an invalid ML_CL_GEMM";
			snprintf(d->eng_note, sizeof d->eng_note,
				 "ML_CL_GEMM='%.40s' is not own, clblast or auto", env);
			return ml_fail(e, ML_EINVAL, "%s", d->eng_note);
		} else if (mlcl_clblast_load(&why)) {
			engines_all(d, MLCL_CLBLAST);
			d->eng_how = how_env;
		} else {
			d->eng_how = "no CLBlast";
			snprintf(d->eng_note, sizeof d->eng_note, "%s", why);
		}
		return 0;
	}
	if (!mlcl_clblast_load(&why)) {
		d->eng_how = "no CLBlast";
		snprintf(d->eng_note, sizeof d->eng_note, "%s", why);
		return 0;
	}
	char path[4096];
	if (!mlcl_cache_path(d, "gemm", "engine", "txt", path, sizeof path)) {
		d->eng_how = "no disk cache";
		return 0;
	}
	/* the tile first: ours is timed with it (and its time is counted apart) */
	mlcl_gemm_tile(d);
	double t0 = ml_now(), p0 = d->t_programs;
	if (read_engines(d, path))
		d->eng_how = "cached";
	else if (measure_engines(d, path))
		d->eng_how = "measured";
	else
		d->eng_how = "measuring failed";
	d->t_tune += ml_now() - t0 - (d->t_programs - p0);
	return 0;
}

void
mlcl_gemm_engine_forget(struct mlcl_dev *d)
{
	d->eng_how = NULL;
	d->eng_bad = false;
	d->eng_note[0] = '\0';
	d->clb_failed[0] = d->clb_failed[1] = false;
	engines_all(d, MLCL_OWN);
}

void
mlcl_gemm_describe(const struct mlcl_dev *d, char *buf, size_t n)
{
	size_t len = 0;
	if (n == 0)
		return;
	buf[0] = '\0';
	if (d->tile_how != NULL)
		len = (size_t)snprintf(buf, n, "%dx%d/%d (%s)", d->tile.mr, d->tile.vw * d->tile.nv,
				       d->tile.wg, d->tile_how);
	if (d->eng_how == NULL || len >= n)
		return;
	if (d->eng_bad) {
		snprintf(buf + len, n - len, "%sengine none: %s", len > 0 ? ", " : "", d->eng_note);
		return;
	}
	char what[64] = "clblast:";
	int nclb = 0;
	for (int i = 0; i < MLCL_GEMM_CLASSES; i++)
		if (d->gemm_eng[i] == MLCL_CLBLAST) {
			nclb++;
			strcat(what, " ");
			strcat(what, class_name[i]);
		}
	snprintf(buf + len, n - len, "%sengine %s (%s)%s%s", len > 0 ? ", " : "",
		 nclb == 0 ? "own" : nclb == MLCL_GEMM_CLASSES ? "clblast" : what, d->eng_how,
		 d->eng_note[0] != '\0' ? "; " : "", d->eng_note);
}
