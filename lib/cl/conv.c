/*
 * conv.c: 2-D convolution (NCHW, ONNX Conv; and NHWC, ConvNHWC, at the
 * end) on an OpenCL device: depthwise
 * by a direct kernel, 1x1 stride-1 unpadded as one GEMM on the input
 * itself, everything else as im2col (kernels/conv.cl) into a pool scratch
 * buffer, already in the GEMM's packed layout, and the GEMM of gemm.c, with
 * bias, residual and activation fused into the GEMM's store.
 */
#include <limits.h>
#include <stdio.h>

#include "cl/cl.h"
#include "ops/fused.h"

/* the im2col scratch of one chunk of images stays under this many bytes */
#define COL_MAX ((size_t)64 << 20)

int
mlcl_conv_out(const struct mlcl_conv *p, int64_t *oh, int64_t *ow, struct ml_err *e)
{
	if (p->n < 0 || p->c < 1 || p->h < 1 || p->w < 1 || p->m < 1 || p->kh < 1 ||
	    p->kw < 1 || p->group < 1 || p->c % p->group != 0 || p->m % p->group != 0)
		return ml_fail(e, ML_EINVAL, "conv: bad shape or group");
	for (int i = 0; i < 2; i++)
		if (p->stride[i] < 1 || p->dil[i] < 1 || p->pad[i] < 0 || p->pad[i + 2] < 0)
			return ml_fail(e, ML_EINVAL, "conv: bad stride, dilation or pad");
	int64_t eh = p->h + p->pad[0] + p->pad[2] - p->dil[0] * (p->kh - 1) - 1;
	int64_t ew = p->w + p->pad[1] + p->pad[3] - p->dil[1] * (p->kw - 1) - 1;
	if (eh < 0 || ew < 0)
		return ml_fail(e, ML_EINVAL, "conv: the kernel is larger than the padded input");
	*oh = eh / p->stride[0] + 1;
	*ow = ew / p->stride[1] + 1;
	return 0;
}

static int
set_args(cl_kernel k, int n, const size_t *sz, const void *const *val, struct ml_err *e)
{
	for (int i = 0; i < n; i++)
		ML_CL(e, clSetKernelArg(k, (cl_uint)i, sz[i], val[i]));
	return 0;
}

/*
 * dw_args: the arguments of kernels/conv.cl's depthwise kernels (NCHW's and
 * NHWC's take the same): the buffers and offsets, the geometry, the flags
 * saying which of bias and z there are, the activation.
 */
static int
dw_args(cl_kernel k, const struct mlcl_conv *p, int act, int64_t oh, int64_t ow, cl_mem x,
	size_t x_off, cl_mem w, size_t w_off, cl_mem bias, size_t b_off, cl_mem z, size_t z_off,
	cl_mem y, size_t y_off, struct ml_err *e)
{
	cl_long xo = (cl_long)x_off, wo = (cl_long)w_off, bo = (cl_long)b_off, yo = (cl_long)y_off;
	cl_int geo[14] = { (cl_int)p->c, (cl_int)p->m, (cl_int)p->h, (cl_int)p->w, (cl_int)p->kh,
			   (cl_int)p->kw, (cl_int)p->stride[0], (cl_int)p->stride[1],
			   (cl_int)p->dil[0], (cl_int)p->dil[1], (cl_int)p->pad[0],
			   (cl_int)p->pad[1], (cl_int)oh, (cl_int)ow };
	cl_int flags = (bias != NULL ? 1 : 0) | (z != NULL ? 2 : 0), a = act;
	/* an absent bias or z is bound to w: flags tell the kernel not to read it */
	cl_mem bm = bias != NULL ? bias : w, zm = z != NULL ? z : w;
	cl_long zo = (cl_long)z_off;
	const size_t sz[] = { sizeof(cl_mem), 8, sizeof(cl_mem), 8, sizeof(cl_mem), 8,
			      sizeof(cl_mem), 8 };
	const void *const val[] = { &x, &xo, &w, &wo, &bm, &bo, &y, &yo };
	ML_TRY(set_args(k, 8, sz, val, e));
	for (int i = 0; i < 14; i++)
		ML_CL(e, clSetKernelArg(k, (cl_uint)(8 + i), sizeof(cl_int), &geo[i]));
	const size_t sz2[] = { sizeof(cl_int), sizeof(cl_mem), 8, sizeof(cl_int), sizeof(float),
			       sizeof(float) };
	const void *const val2[] = { &flags, &zm, &zo, &a, &p->lo, &p->hi };
	for (int i = 0; i < 6; i++)
		ML_CL(e, clSetKernelArg(k, (cl_uint)(22 + i), sz2[i], val2[i]));
	return 0;
}

static int
depthwise(struct mlcl_dev *d, const struct mlcl_conv *p, int act, bool f16, int64_t oh,
	  int64_t ow, cl_mem x, size_t x_off, cl_mem w, size_t w_off, cl_mem bias, size_t b_off,
	  cl_mem z, size_t z_off, cl_mem y, size_t y_off, struct ml_err *e)
{
	/*
	 * a work-item per output row where the device vectorises along it (a
	 * CPU), per output element on a GPU; ML_CL_DW=row|px decides instead
	 */
	const char *how = getenv("ML_CL_DW");
	bool px = how != NULL && strcmp(how, "px") == 0 ? true :
		  how != NULL && strcmp(how, "row") == 0 ? false :
		  (d->type & CL_DEVICE_TYPE_GPU) != 0;
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "conv", px ? (f16 ? "ml_conv_dw_px_f16" : "ml_conv_dw_px_f32") :
					   (f16 ? "ml_conv_dw_f16" : "ml_conv_dw_f32"),
			   f16 ? "-DML_F16=1" : NULL, &k, e));
	ML_TRY(dw_args(k, p, act, oh, ow, x, x_off, w, w_off, bias, b_off, z, z_off, y, y_off, e));
	size_t rows = px ? (size_t)(oh * ow) : (size_t)oh;
	size_t lx = mlcl_wg(d, rows);
	size_t gws[2] = { mlcl_round_up(rows, lx), (size_t)(p->n * p->m) };
	size_t lws[2] = { lx, 1 };
	return mlcl_launch(d, k, 2, gws, lws, e);
}

/*
 * geo_args: the 12 geometry arguments the im2col kernels take from index
 * first on: H, W, KH, KW, the strides, dilations, top and left pads, OH, OW.
 */
static int
geo_args(cl_kernel k, cl_uint first, const struct mlcl_conv *p, int64_t oh, int64_t ow,
	 struct ml_err *e)
{
	cl_int geo[12] = { (cl_int)p->h, (cl_int)p->w, (cl_int)p->kh, (cl_int)p->kw,
			   (cl_int)p->stride[0], (cl_int)p->stride[1], (cl_int)p->dil[0],
			   (cl_int)p->dil[1], (cl_int)p->pad[0], (cl_int)p->pad[1], (cl_int)oh,
			   (cl_int)ow };
	for (cl_uint i = 0; i < 12; i++)
		ML_CL(e, clSetKernelArg(k, first + i, sizeof(cl_int), &geo[i]));
	return 0;
}

/*
 * im2col: group g of nimg images unfolded into columns by kernel k of
 * kernels/conv.cl: ml_conv_im2col (packed, plain false: NR-column panels of
 * our GEMM, a work-item per row and panel) or ml_conv_im2col_plain (plain
 * K x P columns, a work-item per element). Both take the same leading
 * arguments; the packed one also takes NR.
 */
static int
im2col(struct mlcl_dev *d, cl_kernel k, bool plain, const struct mlcl_conv *p, int64_t oh,
       int64_t ow, cl_mem x, size_t x_off, int64_t g, int64_t nimg, cl_mem col,
       int64_t cstride, struct ml_err *e)
{
	int64_t cg = p->c / p->group;
	cl_long xo = (cl_long)x_off, ximg = p->c * p->h * p->w, cs = cstride;
	cl_int c0 = (cl_int)(g * cg), ncg = (cl_int)cg;
	const size_t sz[] = { sizeof(cl_mem), 8, 8, 4, 4, sizeof(cl_mem), 8 };
	const void *const val[] = { &x, &xo, &ximg, &c0, &ncg, &col, &cs };
	ML_TRY(set_args(k, 7, sz, val, e));
	ML_TRY(geo_args(k, 7, p, oh, ow, e));
	size_t P = (size_t)(oh * ow), K = (size_t)(cg * p->kh * p->kw);
	if (plain) {
		size_t lx = mlcl_wg(d, P);
		size_t gws[3] = { mlcl_round_up(P, lx), K, (size_t)nimg };
		size_t lws[3] = { lx, 1, 1 };
		return mlcl_launch(d, k, 3, gws, lws, e);
	}
	cl_int a_nr = mlcl_gemm_nr(d);
	ML_CL(e, clSetKernelArg(k, 19, sizeof(cl_int), &a_nr));
	size_t nr = (size_t)a_nr, lx = mlcl_wg(d, K);
	size_t gws[3] = { mlcl_round_up(K, lx), (P + nr - 1) / nr, (size_t)nimg };
	size_t lws[3] = { lx, 1, 1 };
	return mlcl_launch(d, k, 3, gws, lws, e);
}

/*
 * conv_plain: the im2col convolution for a GEMM engine that packs its own
 * operands (CLBlast): plain columns per image, then one product per group
 * over the chunk's images, W_g shared (batch stride 0), with the epilogue
 * of mlcl_gemm_ex. f32 only.
 */
static int
conv_plain(struct mlcl_dev *d, const struct mlcl_conv *p, int64_t oh, int64_t ow, cl_mem x,
	   size_t x_off, cl_mem w, size_t w_off, struct mlcl_epi *epi, size_t z_off, cl_mem y,
	   size_t y_off, int64_t chunk, struct ml_err *e)
{
	int64_t cg = p->c / p->group, mg = p->m / p->group, kk = cg * p->kh * p->kw;
	int64_t P = oh * ow, cstride = kk * P;
	size_t b_off = epi->bias_off;
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "conv", "ml_conv_im2col_plain_f32", NULL, &k, e));
	struct mlcl_buf *col = NULL;
	ML_TRY(mlcl_buf_get(d, (size_t)cstride * sizeof(float) * (size_t)chunk, &col, e));
	int rc = 0;
	for (int64_t i0 = 0; i0 < p->n && rc == 0; i0 += chunk) {
		int64_t nimg = p->n - i0 < chunk ? p->n - i0 : chunk;
		size_t xo = x_off + (size_t)(i0 * p->c * p->h * p->w);
		size_t yo = y_off + (size_t)(i0 * p->m * P), zo = z_off + (size_t)(i0 * p->m * P);
		for (int64_t g = 0; g < p->group && rc == 0; g++) {
			if ((rc = im2col(d, k, true, p, oh, ow, x, xo, g, nimg, col->mem, cstride,
					 e)) < 0)
				break;
			epi->bias_off = b_off + (size_t)(g * mg);
			epi->z_off = zo + (size_t)(g * mg * P);
			rc = mlcl_gemm_ex(d, false, false, false, mg, P, kk, 1.0f, w,
					  w_off + (size_t)(g * mg * kk), kk, col->mem, 0, P, 0.0f, y,
					  yo + (size_t)(g * mg * P), P, nimg, 0, cstride, p->m * P,
					  epi, e);
		}
	}
	mlcl_buf_put(d, col);
	return rc;
}

/* conv_check: p's output size, and its activation (relu as ML_ACT_RELU); ML_EINVAL for a bad one */
static int
conv_check(const struct mlcl_conv *p, int64_t *oh, int64_t *ow, int *act, struct ml_err *e)
{
	ML_TRY(mlcl_conv_out(p, oh, ow, e));
	if (p->act < ML_ACT_NONE || p->act > ML_ACT_GELU)
		return ml_fail(e, ML_EINVAL, "conv: unknown activation code %d", p->act);
	*act = p->act == ML_ACT_NONE && p->relu ? ML_ACT_RELU : p->act;
	return 0;
}

int
mlcl_conv2d(struct mlcl_dev *d, const struct mlcl_conv *p, bool f16, cl_mem x, size_t x_off,
	    cl_mem w, size_t w_off, cl_mem bias, size_t b_off, cl_mem y, size_t y_off,
	    struct ml_err *e)
{
	return mlcl_conv2d_ex(d, p, f16, x, x_off, w, w_off, bias, b_off, NULL, 0, y, y_off, e);
}

int
mlcl_conv2d_ex(struct mlcl_dev *d, const struct mlcl_conv *p, bool f16, cl_mem x, size_t x_off,
	       cl_mem w, size_t w_off, cl_mem bias, size_t b_off, cl_mem z, size_t z_off,
	       cl_mem y, size_t y_off, struct ml_err *e)
{
	int64_t oh, ow;
	int act;
	ML_TRY(conv_check(p, &oh, &ow, &act, e));
	if (p->n == 0)
		return 0;
	if (p->c * p->h * p->w > INT_MAX || p->m * oh * ow > INT_MAX || p->kh * p->kw > INT_MAX ||
	    p->n * p->m > INT_MAX)
		return ml_fail(e, ML_ENOTSUP, "conv: tensor too large");
	int64_t cg = p->c / p->group, mg = p->m / p->group;
	int64_t kk = cg * p->kh * p->kw, P = oh * ow;
	if (p->group == p->c && cg == 1 && p->group > 1)
		return depthwise(d, p, act, f16, oh, ow, x, x_off, w, w_off, bias, b_off, z, z_off,
				 y, y_off, e);

	struct mlcl_epi epi = { .bias = bias, .bias_sm = 1, .bias_sn = 0, .act = act,
				.lo = p->lo, .hi = p->hi, .z = z, .round = p->round };
	bool direct = p->kh == 1 && p->kw == 1 && p->stride[0] == 1 && p->stride[1] == 1 &&
		      p->pad[0] == 0 && p->pad[1] == 0 && p->pad[2] == 0 && p->pad[3] == 0;
	if (direct) {
		/* Y_g[img] (mg x HW) = W_g (mg x cg) * X_g[img] (cg x HW) */
		for (int64_t g = 0; g < p->group; g++) {
			epi.bias_off = b_off + (size_t)(g * mg);
			epi.z_off = z_off + (size_t)(g * mg * P);
			ML_TRY(mlcl_gemm_ex(d, f16, false, false, mg, P, cg, 1.0f, w,
					    w_off + (size_t)(g * mg * cg), cg, x,
					    x_off + (size_t)(g * cg * P), P, 0.0f, y,
					    y_off + (size_t)(g * mg * P), P, p->n, 0,
					    p->c * P, p->m * P, &epi, e));
		}
		return 0;
	}

	/*
	 * Where the device's GEMM for this shape is CLBlast (a GPU, as
	 * measured), plain columns for it; else columns in our GEMM's packed
	 * layout, which needs no packing pass of its own.
	 */
	if (!f16 && !p->round) {
		int64_t chunk = (int64_t)(COL_MAX / (size_t)ML_MAX(kk * P * 4, 1));
		chunk = chunk < 1 ? 1 : chunk > p->n ? p->n : chunk;
		bool clb;
		ML_TRY(mlcl_gemm_on_clblast(d, false, mg, P, chunk, &clb, e));
		if (clb) {
			epi.bias_off = b_off;
			return conv_plain(d, p, oh, ow, x, x_off, w, w_off, &epi, z_off, y, y_off,
					  chunk, e);
		}
	}
	/* the packed columns are f32 whatever the storage */
	int64_t nr = mlcl_gemm_nr(d), cstride = (P + nr - 1) / nr * nr * kk;
	size_t per = (size_t)cstride * sizeof(float);
	int64_t chunk = (int64_t)(COL_MAX / (per > 0 ? per : 1));
	if (chunk < 1)
		chunk = 1;
	if (chunk > p->n)
		chunk = p->n;
	char opt[64];
	snprintf(opt, sizeof opt, "-DNR=%d%s%s", (int)nr, f16 ? " -DML_F16=1" : "",
		 p->round == MLCL_ROUND_F16 ? " -DML_ROUND=1" :
		 p->round == MLCL_ROUND_BF16 ? " -DML_ROUND=2" : "");
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "conv", f16 ? "ml_conv_im2col_f16" : "ml_conv_im2col_f32", opt, &k,
			   e));
	struct mlcl_buf *col = NULL;
	ML_TRY(mlcl_buf_get(d, per * (size_t)chunk, &col, e));
	int rc = 0;
	for (int64_t i0 = 0; i0 < p->n && rc == 0; i0 += chunk) {
		int64_t nimg = p->n - i0 < chunk ? p->n - i0 : chunk;
		size_t xo = x_off + (size_t)(i0 * p->c * p->h * p->w);
		size_t yo = y_off + (size_t)(i0 * p->m * P), zo = z_off + (size_t)(i0 * p->m * P);
		for (int64_t g = 0; g < p->group && rc == 0; g++) {
			/* the GEMM sets its own arguments, so im2col's are set again each time */
			if ((rc = im2col(d, k, false, p, oh, ow, x, xo, g, nimg, col->mem, cstride,
					 e)) < 0)
				break;
			epi.bias_off = b_off + (size_t)(g * mg);
			epi.z_off = zo + (size_t)(g * mg * P);
			rc = mlcl_gemm_pb(d, f16, false, mg, P, kk, 1.0f, w,
					  w_off + (size_t)(g * mg * kk), kk, col->mem, cstride,
					  0.0f, y, yo + (size_t)(g * mg * P), P, nimg, 0, p->m * P,
					  &epi, e);
		}
	}
	mlcl_buf_put(d, col);
	return rc;
}

/* nhwc_dw: ConvNHWC's depthwise case (ml_conv_nhwc_dw_f32). */
static int
nhwc_dw(struct mlcl_dev *d, const struct mlcl_conv *p, int act, int64_t oh, int64_t ow, cl_mem x,
	cl_mem w, cl_mem bias, cl_mem z, cl_mem y, struct ml_err *e)
{
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "conv", "ml_conv_nhwc_dw_f32", NULL, &k, e));
	ML_TRY(dw_args(k, p, act, oh, ow, x, 0, w, 0, bias, 0, z, 0, y, 0, e));
	size_t lx = mlcl_wg(d, (size_t)p->c);
	size_t gws[3] = { mlcl_round_up((size_t)p->c, lx), (size_t)(oh * ow), (size_t)p->n };
	size_t lws[3] = { lx, 1, 1 };
	return mlcl_launch(d, k, 3, gws, lws, e);
}

/* nhwc_im2col: rows [r0, r0 + m) of ConvNHWC's im2col (one group) into col by kernel k. */
static int
nhwc_im2col(struct mlcl_dev *d, cl_kernel k, const struct mlcl_conv *p, int64_t oh, int64_t ow,
	    cl_mem col, int64_t r0, int64_t m, cl_mem x, struct ml_err *e)
{
	int64_t K = p->c * p->kh * p->kw;
	cl_long xo = 0, ro = (cl_long)r0;
	cl_int C = (cl_int)p->c, c0 = 0, cg = (cl_int)p->c;
	const size_t sz[] = { sizeof(cl_mem), 8, 4, 4, 4, sizeof(cl_mem), 8 };
	const void *const val[] = { &x, &xo, &C, &c0, &cg, &col, &ro };
	ML_TRY(set_args(k, 7, sz, val, e));
	ML_TRY(geo_args(k, 7, p, oh, ow, e));
	size_t lx = mlcl_wg(d, (size_t)K);
	size_t gws[2] = { mlcl_round_up((size_t)K, lx), (size_t)m };
	size_t lws[2] = { lx, 1 };
	return mlcl_launch(d, k, 2, gws, lws, e);
}

int
mlcl_conv2d_nhwc(struct mlcl_dev *d, const struct mlcl_conv *p, cl_mem x, cl_mem w,
		 cl_mem bias, cl_mem z, cl_mem y, struct ml_err *e)
{
	int64_t oh, ow;
	int act;
	ML_TRY(conv_check(p, &oh, &ow, &act, e));
	if (p->n == 0)
		return 0;
	int64_t cg = p->c / p->group, mg = p->m / p->group, K = cg * p->kh * p->kw;
	int64_t rows = p->n * oh * ow;
	if (p->n * p->h * p->w * p->c > INT_MAX || rows * p->m > INT_MAX || K > INT_MAX)
		return ml_fail(e, ML_ENOTSUP, "conv: tensor too large");
	if (p->group > 1 && cg == 1 && mg == 1)
		return nhwc_dw(d, p, act, oh, ow, x, w, bias, z, y, e);
	if (p->group != 1)
		return ml_fail(e, ML_ENOTSUP, "conv: NHWC with %lld groups of %lld channels",
			       (long long)p->group, (long long)cg);
	struct mlcl_epi epi = { .bias = bias, .bias_sm = 0, .bias_sn = 1, .act = act,
				.lo = p->lo, .hi = p->hi, .z = z };
	bool direct = p->kh == 1 && p->kw == 1 && p->stride[0] == 1 && p->stride[1] == 1 &&
		      p->pad[0] == 0 && p->pad[1] == 0 && p->pad[2] == 0 && p->pad[3] == 0;
	/* Y [rows, M] = X [rows, C] W [C, M] */
	if (direct)
		return mlcl_gemm_ex(d, false, false, false, rows, p->m, K, 1.0f, x, 0, p->c, w, 0,
				    p->m, 0.0f, y, 0, p->m, 1, 0, 0, 0, &epi, e);
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "conv", "ml_conv_nhwc_im2col_f32", NULL, &k, e));
	int64_t chunk = (int64_t)(COL_MAX / (size_t)(K * 4));
	chunk = chunk < 1 ? 1 : chunk > rows ? rows : chunk;
	struct mlcl_buf *col = NULL;
	ML_TRY(mlcl_buf_get(d, (size_t)(chunk * K) * sizeof(float), &col, e));
	int rc = 0;
	for (int64_t r0 = 0; r0 < rows && rc == 0; r0 += chunk) {
		int64_t m = rows - r0 < chunk ? rows - r0 : chunk;
		if ((rc = nhwc_im2col(d, k, p, oh, ow, col->mem, r0, m, x, e)) < 0)
			break;
		epi.z_off = (size_t)(r0 * p->m);
		rc = mlcl_gemm_ex(d, false, false, false, m, p->m, K, 1.0f, col->mem, 0, K, w, 0,
				  p->m, 0.0f, y, (size_t)(r0 * p->m), p->m, 1, 0, 0, 0, &epi, e);
	}
	mlcl_buf_put(d, col);
	return rc;
}
