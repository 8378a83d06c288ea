/*
 * test_clgemm.c: the OpenCL GEMM and convolution (lib/cl/gemm.c, conv.c)
 * against double-precision references computed here: many shapes (odd,
 * smaller and larger than a tile, K = 0), every transpose, leading
 * dimensions above the row length, buffer offsets, alpha and beta (beta 0
 * over NaNs), strided and broadcast batches, the bias/ReLU epilogue, f16
 * storage, argument errors; Conv with pads, strides, dilations, groups,
 * depthwise and 1x1; M or N 1 (the GEMV kernel; on a CPU device again
 * with the device taken for a GPU, so that the layouts only a GPU runs
 * are tested too); the products of a training step's fp16 and bf16
 * precision (operands rounded while packed, MLCL_ROUND_*) against the
 * CPU's rounding (ml_f32_to_f16, ml_f32_to_bf16) of the same operands,
 * GEMM and convolution. Every case runs with each of the device's candidate
 * tiles (mlcl_gemm_tiles), the ones the tuner may pick, or with
 * ML_GEMM_TILE's alone when it is set, on the engine ML_CL_GEMM names
 * (tests/run.sh runs it with own and with clblast); then the engine
 * choice itself (engine_tests). Prints TAP; skips when there is no
 * OpenCL device. ML_CL_DEVICE=N picks device N (default 0).
 * test_clgemm --tile prints the tile the device uses and how it was chosen
 * ("tile MR VW NV WG: HOW"), for tests of the tuning cache, and exits.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef ML_NO_OPENCL
/* a build without OpenCL (make OPENCL=0) has nothing to test here */
int
main(void)
{
	printf("1..1\nok 1 # SKIP built without OpenCL\n");
	return 0;
}
#else
#include "cl/cl.h"

static int ntest, nfail;
static struct mlcl_dev *dev;
static char tile_tag[64];	/* the tile under test, before each case's name */

static void
ok(bool cond, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
ok(bool cond, const char *fmt, ...)
{
	va_list ap;
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s", cond ? "" : "not ", ntest, tile_tag);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static uint64_t rng = 88172645463325252ull;

static float
frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 11) % 2001) / 1000.0f - 1.0f;
}

/* a device buffer holding n values of host h (as f16 when f16), and its pool handle */
static struct mlcl_buf *
upload(const float *h, size_t n, bool f16)
{
	struct ml_err e = { 0 };
	struct mlcl_buf *b = NULL;
	size_t esz = f16 ? 2 : 4;
	if (mlcl_buf_get(dev, n * esz, &b, &e) < 0)
		return NULL;
	if (n == 0)
		return b;
	void *tmp = malloc(n * esz);
	if (f16)
		for (size_t i = 0; i < n; i++)
			((uint16_t *)tmp)[i] = ml_f32_to_f16(h[i]);
	else
		memcpy(tmp, h, n * esz);
	int rc = mlcl_write(dev, b->mem, 0, tmp, n * esz, &e);
	free(tmp);
	if (rc < 0) {
		mlcl_buf_put(dev, b);
		return NULL;
	}
	return b;
}

static int
download(struct mlcl_buf *b, float *h, size_t n, bool f16)
{
	struct ml_err e = { 0 };
	size_t esz = f16 ? 2 : 4;
	void *tmp = malloc(n * esz + 1);
	int rc = mlcl_read(dev, b->mem, 0, tmp, n * esz, &e);
	if (rc == 0) {
		if (f16)
			for (size_t i = 0; i < n; i++)
				h[i] = ml_f16_to_f32(((uint16_t *)tmp)[i]);
		else
			memcpy(h, tmp, n * esz);
	}
	free(tmp);
	return rc;
}

/* round to what f16 storage keeps */
static float
q16(float v)
{
	return ml_f16_to_f32(ml_f32_to_f16(v));
}

struct gcase {
	bool ta, tb;
	int64_t M, N, K;
	float alpha, beta;
	int64_t pad_ld;		/* added to every leading dimension */
	int64_t off;		/* element offset of every operand */
	int64_t batch;
	bool bcast_b;		/* stride_b = 0 */
	int epi;		/* 0 none, 1 bias per row, 2 bias per column + relu, 3 relu */
	bool f16;
	bool tight;		/* A's and C's batches follow each other (no gap) */
};

static void
gemm_case(const struct gcase *c)
{
	int64_t M = c->M, N = c->N, K = c->K, nb = c->batch;
	int64_t ar = c->ta ? K : M, ac = c->ta ? M : K, br = c->tb ? N : K, bc = c->tb ? K : N;
	int64_t lda = ac + c->pad_ld, ldb = bc + c->pad_ld, ldc = N + c->pad_ld;
	if (lda < 1)
		lda = 1;
	if (ldb < 1)
		ldb = 1;
	int64_t sa = ar * lda + 3, sb = c->bcast_b ? 0 : br * ldb + 5, sc = M * ldc + 2;
	if (c->tight)
		sa = ar * lda, sc = M * ldc;
	size_t na = (size_t)(c->off + sa * nb + 1), nbb = (size_t)(c->off + (sb ? sb * nb : br * ldb) + 1);
	size_t nc = (size_t)(c->off + sc * nb + 1), nbias = (size_t)(c->off + M + N + 1);
	float *A = malloc(na * 4), *B = malloc(nbb * 4), *C = malloc(nc * 4), *R = malloc(nc * 4);
	float *bias = malloc(nbias * 4);
	double *bound = malloc(nc * sizeof(double));
	for (size_t i = 0; i < na; i++)
		A[i] = c->f16 ? q16(frand()) : frand();
	for (size_t i = 0; i < nbb; i++)
		B[i] = c->f16 ? q16(frand()) : frand();
	for (size_t i = 0; i < nbias; i++)
		bias[i] = c->f16 ? q16(frand()) : frand();
	for (size_t i = 0; i < nc; i++) {
		C[i] = c->beta == 0.0f ? (c->f16 ? 65504.0f : NAN) : (c->f16 ? q16(frand()) : frand());
		R[i] = C[i];
		bound[i] = 0;
	}
	for (int64_t b = 0; b < nb; b++)
		for (int64_t m = 0; m < M; m++)
			for (int64_t n = 0; n < N; n++) {
				double s = 0, sabs = 0;
				for (int64_t k = 0; k < K; k++) {
					double a = A[c->off + b * sa + (c->ta ? k * lda + m : m * lda + k)];
					double bv = B[c->off + b * sb + (c->tb ? n * ldb + k : k * ldb + n)];
					s += a * bv;
					sabs += fabs(a * bv);
				}
				size_t ci = (size_t)(c->off + b * sc + m * ldc + n);
				double r = c->alpha * s, rabs = fabs(c->alpha) * sabs;
				if (c->beta != 0.0f) {
					r += c->beta * (double)C[ci];
					rabs += fabs(c->beta * (double)C[ci]);
				}
				if (c->epi == 1 || c->epi == 2) {
					double bv = bias[c->off + (c->epi == 1 ? m : n)];
					r += bv;
					rabs += fabs(bv);
				}
				if (c->epi >= 2 && r < 0)
					r = 0;
				R[ci] = (float)r;
				bound[ci] = (c->f16 ? 4e-3 : 2e-6) * (rabs + 1e-3) +
					    (c->f16 ? fabs(r) * 1e-3 : 0);
			}

	struct ml_err e = { 0 };
	struct mlcl_buf *dA = upload(A, na, c->f16), *dB = upload(B, nbb, c->f16);
	struct mlcl_buf *dC = upload(C, nc, c->f16), *dbias = upload(bias, nbias, c->f16);
	char what[200];
	snprintf(what, sizeof what, "%s gemm %s%s M=%lld N=%lld K=%lld alpha=%g beta=%g ld+%lld "
		 "off=%lld batch=%lld%s%s epi=%d", c->f16 ? "f16" : "f32", c->ta ? "T" : "N", c->tb ? "T" : "N",
		 (long long)M, (long long)N, (long long)K, c->alpha, c->beta, (long long)c->pad_ld,
		 (long long)c->off, (long long)nb, c->bcast_b ? " bcast-B" : "",
		 c->tight ? " tight" : "", c->epi);
	if (dA == NULL || dB == NULL || dC == NULL || dbias == NULL) {
		ok(false, "%s: upload failed", what);
		goto out;
	}
	struct mlcl_epi epi = { .bias = c->epi == 1 || c->epi == 2 ? dbias->mem : NULL,
				.bias_off = (size_t)c->off, .bias_sm = c->epi == 1,
				.bias_sn = c->epi == 2, .relu = c->epi >= 2 };
	int rc = mlcl_gemm_ex(dev, c->f16, c->ta, c->tb, M, N, K, c->alpha, dA->mem, (size_t)c->off,
			      lda, dB->mem, (size_t)c->off, ldb, c->beta, dC->mem, (size_t)c->off,
			      ldc, nb, sa, sb, sc, c->epi ? &epi : NULL, &e);
	if (rc == 0)
		rc = download(dC, C, nc, c->f16);
	if (rc < 0) {
		ok(false, "%s: %s", what, e.msg);
		goto out;
	}
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < nc; i++) {
		bool good = bound[i] == 0 ? (isnan(R[i]) ? isnan(C[i]) : C[i] == R[i])
					  : fabs((double)C[i] - R[i]) <= bound[i];
		if (!good && bad++ == 0)
			first = i;
	}
	if (bad)
		ok(false, "%s: %zu wrong, first at %zu: %g, want %g", what, bad, first, C[first],
		   R[first]);
	else
		ok(true, "%s", what);
out:
	mlcl_buf_put(dev, dA);
	mlcl_buf_put(dev, dB);
	mlcl_buf_put(dev, dC);
	mlcl_buf_put(dev, dbias);
	free(A);
	free(B);
	free(C);
	free(R);
	free(bias);
	free(bound);
}

static void
gemm_tests(void)
{
	static const int64_t shapes[][3] = {
		{ 1, 1, 1 }, { 7, 5, 3 }, { 6, 16, 1 }, { 13, 17, 19 }, { 64, 64, 64 },
		{ 100, 33, 257 }, { 1, 300, 40 }, { 300, 1, 40 }, { 12, 32, 8 }, { 37, 129, 0 },
	};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		for (int t = 0; t < 4; t++) {
			struct gcase c = { .ta = t & 1, .tb = t >> 1, .M = shapes[s][0],
					   .N = shapes[s][1], .K = shapes[s][2], .alpha = 1,
					   .beta = 0, .batch = 1 };
			if (s % 2 == 1) {
				c.alpha = 0.5f;
				c.beta = -2.0f;
			}
			if (s % 3 == 2) {
				c.pad_ld = 3;
				c.off = 11;
			}
			gemm_case(&c);
		}
	struct gcase more[] = {
		{ .M = 23, .N = 41, .K = 29, .alpha = -1.5f, .beta = 0, .batch = 3 },
		{ .ta = true, .M = 9, .N = 18, .K = 33, .alpha = 1, .beta = 1, .batch = 4, .off = 5,
		  .pad_ld = 2 },
		{ .tb = true, .M = 31, .N = 7, .K = 12, .alpha = 1, .batch = 5, .bcast_b = true },
		{ .M = 19, .N = 35, .K = 21, .alpha = 1, .batch = 2, .epi = 1, .off = 4 },
		{ .M = 19, .N = 35, .K = 21, .alpha = 2, .beta = 0.5f, .batch = 1, .epi = 2 },
		{ .M = 24, .N = 32, .K = 21, .alpha = 1, .batch = 1, .epi = 3 },
		{ .M = 24, .N = 32, .K = 21, .alpha = 1, .batch = 1, .epi = 1 },
		{ .M = 130, .N = 70, .K = 300, .alpha = 1, .batch = 1 },
		{ .M = 29, .N = 37, .K = 31, .alpha = 1, .batch = 1, .f16 = true },
		{ .ta = true, .tb = true, .M = 16, .N = 40, .K = 17, .alpha = 0.5f, .beta = 1,
		  .batch = 2, .f16 = true, .off = 3, .pad_ld = 1 },
		{ .M = 12, .N = 16, .K = 9, .alpha = 1, .batch = 1, .epi = 2, .f16 = true },
		/* M == 1 or N == 1: the GEMV, both layouts of the matrix, epilogues, batches */
		{ .tb = true, .M = 1, .N = 1000, .K = 1280, .alpha = 1, .batch = 1, .epi = 2 },
		{ .M = 1, .N = 77, .K = 300, .alpha = 0.5f, .beta = 2, .batch = 1, .epi = 2,
		  .off = 3, .pad_ld = 5 },
		{ .ta = true, .M = 1, .N = 33, .K = 7, .alpha = 1, .batch = 3, .pad_ld = 2 },
		{ .M = 1, .N = 40, .K = 64, .alpha = 1, .batch = 4, .bcast_b = true, .epi = 3 },
		{ .M = 150, .N = 1, .K = 260, .alpha = 1, .batch = 1, .epi = 1 },
		{ .ta = true, .tb = true, .M = 45, .N = 1, .K = 129, .alpha = -1, .beta = 0.5f,
		  .batch = 2, .epi = 1, .off = 7, .pad_ld = 1 },
		{ .tb = true, .M = 70, .N = 1, .K = 3, .alpha = 1, .batch = 1, .epi = 3 },
		{ .M = 1, .N = 1, .K = 1000, .alpha = 1, .batch = 2 },
		{ .tb = true, .M = 1, .N = 50, .K = 96, .alpha = 1, .batch = 1, .epi = 2, .f16 = true },
		{ .M = 37, .N = 1, .K = 40, .alpha = 1, .beta = 1, .batch = 2, .f16 = true },
		/* batches that share B with rows following each other: one product of 4 * 9 rows */
		{ .M = 9, .N = 20, .K = 16, .alpha = 1, .batch = 4, .bcast_b = true, .tight = true,
		  .epi = 2 },
		{ .M = 9, .N = 20, .K = 16, .alpha = 1, .batch = 4, .bcast_b = true, .tight = true,
		  .epi = 1, .pad_ld = 2 },
		{ .M = 1, .N = 20, .K = 16, .alpha = 1, .beta = 1, .batch = 5, .bcast_b = true,
		  .tight = true, .epi = 2 },
	};
	for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
		gemm_case(&more[i]);
	/*
	 * A CPU device takes the GEMV only for a matrix contiguous along k, and
	 * the smallest work-groups: the cases with M or N 1 again, the device
	 * taken for a GPU, so that every layout and group shape runs here.
	 */
	if (dev->type & CL_DEVICE_TYPE_CPU) {
		cl_device_type ty = dev->type;
		char tag[40];
		snprintf(tag, sizeof tag, "%.39s", tile_tag);
		snprintf(tile_tag, sizeof tile_tag, "%.39sas a GPU: ", tag);
		dev->type = CL_DEVICE_TYPE_GPU;
		for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
			if (more[i].M == 1 || more[i].N == 1)
				gemm_case(&more[i]);
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int t = 0; t < 4; t++)
				if (shapes[s][0] == 1 || shapes[s][1] == 1) {
					struct gcase c = { .ta = t & 1, .tb = t >> 1,
							   .M = shapes[s][0], .N = shapes[s][1],
							   .K = shapes[s][2], .alpha = 1, .batch = 2,
							   .epi = shapes[s][0] == 1 ? 2 : 1 };
					gemm_case(&c);
				}
		dev->type = ty;
		snprintf(tile_tag, sizeof tile_tag, "%s", tag);
	}

	struct ml_err e = { 0 };
	struct mlcl_buf *b = NULL;
	mlcl_buf_get(dev, 64, &b, &e);
	int rc = mlcl_sgemm(dev, false, false, -1, 2, 2, 1, b->mem, 0, 2, b->mem, 0, 2, 0, b->mem,
			    0, 2, 1, 0, 0, 0, &e);
	ok(rc == ML_EINVAL && e.msg[0] != 0, "a negative M fails with ML_EINVAL (%s)", e.msg);
	rc = mlcl_sgemm(dev, false, false, 2, 2, 4, 1, b->mem, 0, 3, b->mem, 0, 2, 0, b->mem, 0, 2,
			1, 0, 0, 0, &e);
	ok(rc == ML_EINVAL, "lda smaller than K fails with ML_EINVAL (%s)", e.msg);
	rc = mlcl_sgemm(dev, false, false, 0, 2, 4, 1, b->mem, 0, 4, b->mem, 0, 2, 0, b->mem, 0, 2,
			1, 0, 0, 0, &e);
	ok(rc == 0, "M = 0 is a no-op");
	mlcl_buf_put(dev, b);
}

struct ccase {
	int64_t n, c, h, w, m, kh, kw, group, sh, sw, dh, dw, pt, pl, pb, pr;
	bool bias, relu, f16;
};

static void
conv_case(const struct ccase *t)
{
	struct mlcl_conv p = { .n = t->n, .c = t->c, .h = t->h, .w = t->w, .m = t->m, .kh = t->kh,
			       .kw = t->kw, .group = t->group, .stride = { t->sh, t->sw },
			       .dil = { t->dh, t->dw }, .pad = { t->pt, t->pl, t->pb, t->pr },
			       .relu = t->relu };
	struct ml_err e = { 0 };
	int64_t oh, ow;
	char what[200];
	snprintf(what, sizeof what, "%s conv n=%lld c=%lld %lldx%lld m=%lld k=%lldx%lld g=%lld "
		 "s=%lld,%lld d=%lld,%lld p=%lld,%lld,%lld,%lld%s%s", t->f16 ? "f16" : "f32",
		 (long long)t->n, (long long)t->c, (long long)t->h, (long long)t->w,
		 (long long)t->m, (long long)t->kh, (long long)t->kw, (long long)t->group,
		 (long long)t->sh, (long long)t->sw, (long long)t->dh, (long long)t->dw,
		 (long long)t->pt, (long long)t->pl, (long long)t->pb, (long long)t->pr,
		 t->bias ? " bias" : "", t->relu ? " relu" : "");
	if (mlcl_conv_out(&p, &oh, &ow, &e) < 0) {
		ok(false, "%s: %s", what, e.msg);
		return;
	}
	int64_t cg = t->c / t->group, mg = t->m / t->group, xoff = 3, yoff = 5;
	size_t nx = (size_t)(xoff + t->n * t->c * t->h * t->w), nw = (size_t)(t->m * cg * t->kh * t->kw);
	size_t ny = (size_t)(yoff + t->n * t->m * oh * ow), nbias = (size_t)t->m;
	float *X = malloc(nx * 4), *W = malloc(nw * 4), *Y = malloc(ny * 4), *R = malloc(ny * 4);
	float *bias = malloc(nbias * 4);
	double *bound = malloc(ny * sizeof(double));
	for (size_t i = 0; i < nx; i++)
		X[i] = t->f16 ? q16(frand()) : frand();
	for (size_t i = 0; i < nw; i++)
		W[i] = t->f16 ? q16(frand()) : frand();
	for (size_t i = 0; i < nbias; i++)
		bias[i] = t->f16 ? q16(frand()) : frand();
	for (size_t i = 0; i < ny; i++)
		Y[i] = R[i] = 7, bound[i] = 0;
	for (int64_t n = 0; n < t->n; n++)
		for (int64_t oc = 0; oc < t->m; oc++)
			for (int64_t y = 0; y < oh; y++)
				for (int64_t x = 0; x < ow; x++) {
					int64_t g = oc / mg;
					double s = t->bias ? bias[oc] : 0, sabs = fabs(s);
					for (int64_t ci = 0; ci < cg; ci++)
						for (int64_t ky = 0; ky < t->kh; ky++)
							for (int64_t kx = 0; kx < t->kw; kx++) {
								int64_t iy = y * t->sh - t->pt + ky * t->dh;
								int64_t ix = x * t->sw - t->pl + kx * t->dw;
								if (iy < 0 || iy >= t->h || ix < 0 || ix >= t->w)
									continue;
								double a = X[xoff + ((n * t->c + g * cg + ci) * t->h + iy) * t->w + ix];
								double b = W[((oc * cg + ci) * t->kh + ky) * t->kw + kx];
								s += a * b;
								sabs += fabs(a * b);
							}
					if (t->relu && s < 0)
						s = 0;
					size_t i = (size_t)(yoff + ((n * t->m + oc) * oh + y) * ow + x);
					R[i] = (float)s;
					bound[i] = (t->f16 ? 4e-3 : 2e-6) * (sabs + 1e-3) +
						   (t->f16 ? fabs(s) * 1e-3 : 0);
				}
	struct mlcl_buf *dX = upload(X, nx, t->f16), *dW = upload(W, nw, t->f16);
	struct mlcl_buf *dY = upload(Y, ny, t->f16), *dbias = upload(bias, nbias, t->f16);
	if (dX == NULL || dW == NULL || dY == NULL || dbias == NULL) {
		ok(false, "%s: upload failed", what);
		goto out;
	}
	int rc = mlcl_conv2d(dev, &p, t->f16, dX->mem, (size_t)xoff, dW->mem, 0,
			     t->bias ? dbias->mem : NULL, 0, dY->mem, (size_t)yoff, &e);
	if (rc == 0)
		rc = download(dY, Y, ny, t->f16);
	if (rc < 0) {
		ok(false, "%s: %s", what, e.msg);
		goto out;
	}
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < ny; i++)
		if (fabs((double)Y[i] - R[i]) > bound[i] && bad++ == 0)
			first = i;
	if (bad)
		ok(false, "%s: %zu wrong, first at %zu: %g, want %g", what, bad, first, Y[first],
		   R[first]);
	else
		ok(true, "%s", what);
out:
	mlcl_buf_put(dev, dX);
	mlcl_buf_put(dev, dW);
	mlcl_buf_put(dev, dY);
	mlcl_buf_put(dev, dbias);
	free(X);
	free(W);
	free(Y);
	free(R);
	free(bias);
	free(bound);
}

static void
conv_tests(void)
{
	static const struct ccase cases[] = {
		/* n c h w  m kh kw g  sh sw dh dw pt pl pb pr */
		{ 1, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, .bias = true },
		{ 2, 4, 10, 7, 5, 3, 3, 1, 2, 2, 1, 1, 0, 1, 1, 0, .relu = true },
		{ 1, 3, 16, 16, 7, 7, 7, 1, 2, 2, 1, 1, 3, 3, 3, 3, .bias = true, .relu = true },
		{ 1, 5, 11, 13, 6, 3, 2, 1, 1, 1, 2, 3, 2, 2, 1, 0, .bias = false },
		{ 2, 6, 8, 8, 4, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, .bias = true },
		{ 2, 8, 9, 9, 8, 3, 3, 8, 1, 1, 1, 1, 1, 1, 1, 1, .bias = true, .relu = true },
		{ 1, 6, 10, 10, 6, 3, 3, 6, 2, 2, 1, 1, 1, 1, 0, 0, .bias = false },
		{ 1, 4, 7, 7, 8, 5, 5, 4, 1, 1, 2, 2, 4, 4, 4, 4, .bias = true },
		{ 2, 16, 5, 6, 24, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, .bias = true, .relu = true },
		{ 1, 16, 5, 6, 8, 1, 1, 4, 1, 1, 1, 1, 0, 0, 0, 0, .bias = true },
		{ 1, 8, 9, 9, 12, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, .bias = false },
		{ 1, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, .bias = true, .f16 = true },
		{ 1, 8, 6, 6, 8, 3, 3, 8, 1, 1, 1, 1, 1, 1, 1, 1, .relu = true, .f16 = true },
		{ 1, 8, 6, 6, 16, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, .bias = true, .f16 = true },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		conv_case(&cases[i]);
	struct mlcl_conv bad = { .n = 1, .c = 3, .h = 2, .w = 2, .m = 4, .kh = 5, .kw = 5,
				 .group = 1, .stride = { 1, 1 }, .dil = { 1, 1 } };
	int64_t oh, ow;
	struct ml_err e = { 0 };
	ok(mlcl_conv_out(&bad, &oh, &ow, &e) == ML_EINVAL, "a kernel larger than the input fails (%s)",
	   e.msg);
	bad.kh = bad.kw = 1;
	bad.group = 2;
	ok(mlcl_conv_out(&bad, &oh, &ow, &e) == ML_EINVAL, "channels not a multiple of group fail");
}

/* rnd: v as a product of precision round (MLCL_ROUND_*) takes it, by the CPU's conversions */
static float
rnd(float v, int round)
{
	if (round == MLCL_ROUND_F16)
		return ml_f16_to_f32(ml_f32_to_f16(v));
	return ml_bf16_to_f32(ml_f32_to_bf16(v));
}

/*
 * round_case: C = op(A) op(B) (batch b, B shared when bcast) with operands
 * rounded as round says, against the double sums of the CPU's rounded
 * operands; the values carry bits below both precisions (so an f32
 * product misses the reference by far more than the bound), and for fp16
 * some exceed 65504 (infinities, when big) or are f16 subnormals.
 */
static void
round_case(int round, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch,
	   bool bcast, bool big)
{
	struct ml_err e = { 0 };
	char what[160];
	snprintf(what, sizeof what, "%s-rounded gemm%s%s %lldx%lldx%lld batch %lld%s%s",
		 round == MLCL_ROUND_F16 ? "fp16" : "bf16", ta ? " A'" : "", tb ? " B'" : "",
		 (long long)M, (long long)N, (long long)K, (long long)batch, bcast ? " shared B" : "",
		 big ? " with overflows" : "");
	size_t na = (size_t)(M * K * batch), nb = (size_t)(K * N * (bcast ? 1 : batch));
	size_t nc = (size_t)(M * N * batch);
	float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4);
	double *R = malloc(nc * 8), *F = malloc(nc * 8), *bound = malloc(nc * 8);
	for (size_t i = 0; i < na; i++)
		A[i] = (1.0f + frand() * 0.5f) * (1.0f + 0x1p-13f) * (i % 7 == 3 ? 1e-6f : 1.0f);
	for (size_t i = 0; i < nb; i++)
		B[i] = frand() * (1.0f + 0x1p-12f) + 0x1p-10f;
	for (size_t i = 0; i < nc; i++)
		C[i] = 0;
	if (big)
		A[0] = 70000.0f, A[na - 1] = -1e6f;
	for (int64_t b = 0; b < batch; b++)
		for (int64_t m = 0; m < M; m++)
			for (int64_t n = 0; n < N; n++) {
				double s = 0, f = 0, sa = 0;
				for (int64_t k = 0; k < K; k++) {
					float a = A[b * M * K + (ta ? k * M + m : m * K + k)];
					float v = B[(bcast ? 0 : b * K * N) + (tb ? n * K + k : k * N + n)];
					s += (double)rnd(a, round) * rnd(v, round);
					f += (double)a * v;
					sa += fabs((double)rnd(a, round) * rnd(v, round));
				}
				size_t i = (size_t)((b * M + m) * N + n);
				R[i] = s, F[i] = f, bound[i] = 1e-6 * sa + 1e-30;
			}
	struct mlcl_buf *dA = upload(A, na, false), *dB = upload(B, nb, false);
	struct mlcl_buf *dC = upload(C, nc, false);
	struct mlcl_epi epi = { .round = round };
	int rc = dA != NULL && dB != NULL && dC != NULL ? 0 : -1;
	if (rc == 0)
		rc = mlcl_gemm_ex(dev, false, ta, tb, M, N, K, 1.0f, dA->mem, 0, ta ? M : K, dB->mem, 0,
				  tb ? K : N, 0.0f, dC->mem, 0, N, batch, M * K, bcast ? 0 : K * N,
				  M * N, &epi, &e);
	if (rc == 0)
		rc = download(dC, C, nc, false);
	if (rc < 0) {
		ok(false, "%s: %s", what, e.msg[0] ? e.msg : "upload failed");
	} else {
		size_t bad = 0, first = 0, unrounded = 0;
		for (size_t i = 0; i < nc; i++) {
			bool same = isinf(R[i]) || isnan(R[i]) ? (double)C[i] == R[i] ||
				    (isnan(R[i]) && isnan(C[i])) : fabs(C[i] - R[i]) <= bound[i];
			if (!same && bad++ == 0)
				first = i;
			unrounded += isfinite(R[i]) && fabs(F[i] - R[i]) > 4 * bound[i];
		}
		/* the rounding shows: most f32 sums are off the rounded reference */
		ok(bad == 0 && unrounded > nc / 2, "%s: %zu wrong (first %zu: %g, want %g), %zu of %zu "
		   "off f32", what, bad, first, bad ? C[first] : 0.0, bad ? R[first] : 0.0, unrounded,
		   nc);
	}
	mlcl_buf_put(dev, dA);
	mlcl_buf_put(dev, dB);
	mlcl_buf_put(dev, dC);
	free(A), free(B), free(C), free(R), free(F), free(bound);
}

/* round_conv: a convolution with rounded operands (im2col, or 1x1's direct GEMM) */
static void
round_conv(int round, int64_t k)
{
	struct mlcl_conv p = { .n = 2, .c = 3, .h = 9, .w = 7, .m = 5, .kh = k, .kw = k,
			       .group = 1, .stride = { 1, 1 }, .dil = { 1, 1 },
			       .pad = { k / 2, k / 2, k / 2, k / 2 }, .round = round };
	struct ml_err e = { 0 };
	int64_t oh = 9, ow = 7, P = oh * ow;
	size_t nx = (size_t)(p.n * p.c * 63), nw = (size_t)(p.m * p.c * k * k);
	size_t ny = (size_t)(p.n * p.m * P);
	float *X = malloc(nx * 4), *W = malloc(nw * 4), *Y = malloc(ny * 4);
	for (size_t i = 0; i < nx; i++)
		X[i] = (1.0f + frand() * 0.5f) * (1.0f + 0x1p-13f);
	for (size_t i = 0; i < nw; i++)
		W[i] = frand() * (1.0f + 0x1p-12f) + 0x1p-10f;
	for (size_t i = 0; i < ny; i++)
		Y[i] = 0;
	struct mlcl_buf *dX = upload(X, nx, false), *dW = upload(W, nw, false);
	struct mlcl_buf *dY = upload(Y, ny, false);
	int rc = dX != NULL && dW != NULL && dY != NULL ? 0 : -1;
	if (rc == 0)
		rc = mlcl_conv2d(dev, &p, false, dX->mem, 0, dW->mem, 0, NULL, 0, dY->mem, 0, &e);
	if (rc == 0)
		rc = download(dY, Y, ny, false);
	size_t bad = 0, unrounded = 0;
	for (int64_t n = 0; rc == 0 && n < p.n; n++)
		for (int64_t oc = 0; oc < p.m; oc++)
			for (int64_t y = 0; y < oh; y++)
				for (int64_t x = 0; x < ow; x++) {
					double s = 0, f = 0, sa = 0;
					for (int64_t ci = 0; ci < p.c; ci++)
						for (int64_t ky = 0; ky < k; ky++)
							for (int64_t kx = 0; kx < k; kx++) {
								int64_t iy = y - k / 2 + ky, ix = x - k / 2 + kx;
								if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
									continue;
								float a = X[((n * p.c + ci) * p.h + iy) * p.w + ix];
								float b = W[((oc * p.c + ci) * k + ky) * k + kx];
								s += (double)rnd(a, round) * rnd(b, round);
								f += (double)a * b;
								sa += fabs((double)a * b);
							}
					double got = Y[((n * p.m + oc) * oh + y) * ow + x];
					bad += fabs(got - s) > 1e-6 * sa;
					unrounded += fabs(f - s) > 4e-6 * sa;
				}
	ok(rc == 0 && bad == 0 && unrounded > ny / 2, "%s-rounded conv %lldx%lld: %s%zu wrong, %zu "
	   "of %zu off f32", round == MLCL_ROUND_F16 ? "fp16" : "bf16", (long long)k, (long long)k,
	   rc < 0 ? e.msg : "", bad, unrounded, ny);
	mlcl_buf_put(dev, dX);
	mlcl_buf_put(dev, dW);
	mlcl_buf_put(dev, dY);
	free(X), free(W), free(Y);
}

/* round_tests: GEMM shapes of each path (tiled, the GEMV's, batched, shared B), and Conv */
static void
round_tests(void)
{
	for (int round = MLCL_ROUND_F16; round <= MLCL_ROUND_BF16; round++) {
		round_case(round, false, false, 37, 29, 53, 1, false, false);
		round_case(round, true, false, 16, 40, 33, 1, false, round == MLCL_ROUND_F16);
		round_case(round, false, true, 1, 31, 65, 1, false, false);
		round_case(round, true, true, 23, 1, 40, 1, false, false);
		round_case(round, false, false, 9, 17, 21, 3, true, false);
		round_case(round, false, false, 5, 8, 13, 2, false, false);
		round_conv(round, 3);
		round_conv(round, 1);
	}
}

/* describe: what -v would show of the device's GEMM now */
static const char *
describe(void)
{
	static char buf[160];
	mlcl_gemm_describe(dev, buf, sizeof buf);
	return buf;
}

/* set: setenv, or unsetenv when v is NULL */
static void
set(const char *name, const char *v)
{
	if (v != NULL)
		setenv(name, v, 1);
	else
		unsetenv(name);
}

/*
 * The engine choice (mlcl_gemm_engine): ML_CL_GEMM forcing each engine or
 * naming none, a CLBlast library that cannot be loaded, a CLBlast call
 * that fails (ML_CL_FAULT=clblast), and auto measuring once, then
 * reading its cache (mlcl_gemm_engine_forget stands for a new process).
 * Each case's product is checked as the others are.
 */
static void
engine_tests(void)
{
	static const char *const vars[] = { "ML_CL_GEMM", "ML_CLBLAST_LIB", "ML_CL_FAULT",
					    "ML_CL_CACHE" };
	char *saved[4];
	for (int i = 0; i < 4; i++)
		saved[i] = getenv(vars[i]) != NULL ? strdup(getenv(vars[i])) : NULL;
	struct gcase c = { .M = 40, .N = 24, .K = 33, .alpha = 1, .batch = 1, .epi = 2 };
	struct gcase v = { .tb = true, .M = 1, .N = 100, .K = 64, .alpha = 1, .batch = 1, .epi = 2 };
	struct ml_err e = { 0 };
	snprintf(tile_tag, sizeof tile_tag, "engine: ");
	set("ML_CL_FAULT", NULL);
	set("ML_CLBLAST_LIB", NULL);

	set("ML_CL_GEMM", "own");
	mlcl_gemm_engine_forget(dev);
	gemm_case(&c);
	ok(strstr(describe(), "engine own (ML_CL_GEMM)") != NULL, "ML_CL_GEMM=own: %s", describe());

	set("ML_CL_GEMM", "fast");
	mlcl_gemm_engine_forget(dev);
	struct mlcl_buf *b = NULL;
	mlcl_buf_get(dev, 64, &b, &e);
	int rc = mlcl_sgemm(dev, false, false, 2, 2, 2, 1, b->mem, 0, 2, b->mem, 0, 2, 0, b->mem,
			    0, 2, 1, 0, 0, 0, &e);
	ok(rc == ML_EINVAL && strstr(e.msg, "ML_CL_GEMM='fast'") != NULL,
	   "ML_CL_GEMM=fast fails with ML_EINVAL (%s)", e.msg);
	rc = mlcl_gemm_prepare(dev, false, &e);
	ok(rc == ML_EINVAL, "and so does preparing the GEMM (%s)", e.msg);
	mlcl_buf_put(dev, b);

	set("ML_CL_GEMM", "clblast");
	set("ML_CLBLAST_LIB", "/nonexistent/libclblast.so.1");
	mlcl_gemm_engine_forget(dev);
	gemm_case(&c);
	gemm_case(&v);
	ok(strstr(describe(), "engine own (no CLBlast); cannot load the CLBlast library") != NULL,
	   "ML_CL_GEMM=clblast without a CLBlast library: ours (%s)", describe());
	set("ML_CLBLAST_LIB", NULL);

	if (!mlcl_clblast_load(NULL)) {
		ok(true, "# SKIP no CLBlast library: the tests of CLBlast's engine");
		goto out;
	}
	mlcl_gemm_engine_forget(dev);
	gemm_case(&c);
	gemm_case(&v);
	ok(strstr(describe(), "engine clblast (ML_CL_GEMM)") != NULL &&
	   strstr(describe(), "own: CLBlast") == NULL, "ML_CL_GEMM=clblast: %s", describe());

	set("ML_CL_FAULT", "clblast");
	mlcl_gemm_engine_forget(dev);
	gemm_case(&c);
	ok(strstr(describe(), "f32 own: CLBlast -2040 (unknown error)") != NULL,
	   "a failing CLBlast call is redone on ours and noted: %s", describe());
	set("ML_CL_FAULT", NULL);

	char dir[] = "/tmp/test_clgemm.XXXXXX", path[4096];
	if (mkdtemp(dir) == NULL) {
		ok(false, "mkdtemp");
		goto out;
	}
	set("ML_CL_CACHE", dir);
	set("ML_CL_GEMM", NULL);
	mlcl_gemm_engine_forget(dev);
	gemm_case(&c);
	ok(strstr(describe(), "(measured)") != NULL, "auto measures the engines: %s", describe());
	/* issue 22: CLBlast runs at a tenth of our speed on POCL, which must keep ours */
	ok(dev->gemm_eng[MLCL_GEMM_SQUARE] == MLCL_OWN ||
	   strstr(dev->platform_name, "Portable Computing Language") == NULL,
	   "POCL keeps ours for the square class (%s)", dev->platform_name);
	mlcl_gemm_engine_forget(dev);
	gemm_case(&c);
	ok(strstr(describe(), "(cached)") != NULL, "the next choice reads the cache: %s",
	   describe());
	bool have = mlcl_cache_path(dev, "gemm", "engine", "txt", path, sizeof path);
	FILE *f = have ? fopen(path, "w") : NULL;
	if (f != NULL) {
		fputs("ml-gemm-engine 1 libclblast.so.0.1 clblast clblast clblast clblast\n", f);
		fclose(f);
	}
	mlcl_gemm_engine_forget(dev);
	gemm_case(&c);
	char line[256] = "", want[160];
	f = have ? fopen(path, "r") : NULL;
	if (f != NULL) {
		if (fgets(line, sizeof line, f) == NULL)
			line[0] = '\0';
		line[strcspn(line, "\n")] = '\0';
		fclose(f);
	}
	snprintf(want, sizeof want, "ml-gemm-engine 1 %s ", mlcl_clblast_lib());
	ok(f != NULL && strstr(describe(), "(measured)") != NULL &&
	   strncmp(line, want, strlen(want)) == 0,
	   "a cache made with another CLBlast is measured again and rewritten: %s", line);
	if (have)
		unlink(path);
	rmdir(dir);
out:
	for (int i = 0; i < 4; i++) {
		set(vars[i], saved[i]);
		free(saved[i]);
	}
	mlcl_gemm_engine_forget(dev);
	tile_tag[0] = '\0';
}

int
main(int argc, char **argv)
{
	struct ml_err e = { 0 };
	const char *s = getenv("ML_CL_DEVICE");
	int idx = s != NULL ? atoi(s) : 0;
	bool show = argc > 1 && strcmp(argv[1], "--tile") == 0;
	if (mlcl_count(&e) <= idx || mlcl_device(idx, &dev, &e) < 0) {
		if (show) {
			fprintf(stderr, "test_clgemm: no OpenCL device\n");
			return 4;
		}
		printf("1..1\nok 1 # SKIP no OpenCL device%s%s\n", e.msg[0] ? ": " : "", e.msg);
		return 0;
	}
	const struct mlcl_tile *t = mlcl_gemm_tile(dev);
	if (show) {
		printf("tile %d %d %d %d: %s\n", t->mr, t->vw, t->nv, t->wg, dev->tile_how);
		return 0;
	}
	printf("# device %s (%s), tile %dx%d/%d from %s\n", dev->name, dev->driver, t->mr,
	       t->vw * t->nv, t->wg, dev->tile_how);
	struct mlcl_tile cand[8];
	int n = mlcl_gemm_tiles(dev, cand, 8);
	if (strcmp(dev->tile_how, "ML_GEMM_TILE") == 0) {
		cand[0] = *t;
		n = 1;
	}
	for (int i = 0; i < n; i++) {
		mlcl_gemm_use(dev, &cand[i]);
		snprintf(tile_tag, sizeof tile_tag, "tile %dx%d/%d: ", cand[i].mr,
			 cand[i].vw * cand[i].nv, cand[i].wg);
		gemm_tests();
		conv_tests();
		round_tests();
	}
	printf("# engine: %s\n", describe());
	engine_tests();
	printf("1..%d\n", ntest);
	return nfail > 0;
}
#endif
