/*
 * test_layout.c: C tests of mlopt's layout pass (lib/opt/layout.c) and of
 * ConvNHWC's CPU kernel (lib/cpu/nn_nhwc.c). The kernel against FusedConv
 * on NCHW data: depthwise and one-group windows of odd channel counts,
 * strides, asymmetric pads, dilation, packed and [kH, kW, C, M] weights,
 * other groups and channel multipliers, residual and activation, through
 * the AVX-512, AVX2 and portable depthwise loops (ML_NHWC) and, in children,
 * the BLAS fallback (ML_PGEMM=0) and FusedConv's direct kernel on AVX2
 * (ML_CONV_DIRECT=avx2); a depthwise one with a pointwise prologue (mlopt's
 * fuse-expand) against the two nodes apart. The pass on small graphs: a
 * ConvNeXt-like pair of blocks (the transposes inside cancel, two stay at
 * the boundary), a region with no boundary at all, constants re-laid-out,
 * graphs it must leave alone, outputs equal to the original's, and a
 * second run that changes nothing. Prints TAP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ml.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
	fflush(stdout);
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;

static float
frand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (float)((double)(rs >> 11) * 0x1.0p-53 * 2 - 1);
}

static struct ml_err err;

/* cst: a constant of the given shape, from data or (NULL) random in [-1, 1). */
static void
cst(struct ml_graph *g, const char *name, int rank, const int64_t *dims, const float *data)
{
	int64_t n = 1;
	for (int d = 0; d < rank; d++)
		n *= dims[d];
	float *v = malloc(sizeof(float) * (size_t)n + 1);
	for (int64_t i = 0; i < n; i++)
		v[i] = data != NULL ? data[i] : frand();
	ml_graph_set_data(g, ml_graph_tensor(g, name), ML_TK_CONST, ML_F32, rank, dims, v,
			  sizeof(float) * (size_t)n, &err);
	free(v);
}

static void
input(struct ml_graph *g, const char *name, int rank, const int64_t *dims)
{
	int t = ml_graph_tensor(g, name);
	g->tensors[t]->dtype = ML_F32;
	g->tensors[t]->rank = rank;
	g->tensors[t]->kind = ML_TK_INPUT;
	memcpy(g->tensors[t]->dims, dims, sizeof(int64_t) * (size_t)rank);
	ml_graph_add_input(g, t, &err);
}

static int
node(struct ml_graph *g, const char *op, const char *dom, int nin, const char **in, const char *out)
{
	const char *o[1] = { out };
	return ml_graph_add_node(g, op, dom, out, nin, in, 1, o, &err);
}

static int
transpose(struct ml_graph *g, const char *in, const char *out, bool to_nhwc)
{
	int64_t a[4] = { 0, 2, 3, 1 }, b[4] = { 0, 3, 1, 2 };
	int ni = node(g, "Transpose", "", 1, (const char *[]){ in }, out);
	return ml_node_set_ints(g, ni, "perm", 4, to_nhwc ? a : b);
}

static bool
finish(struct ml_graph *g, const char *out)
{
	ml_graph_add_output(g, ml_graph_find(g, out), &err);
	if (ml_graph_toposort(g, &err) < 0 || ml_graph_validate(g, &err) < 0 ||
	    ml_graph_infer(g, &err) < 0) {
		printf("# %s\n", err.msg);
		return false;
	}
	return true;
}

/* run: output 0 of g on inputs (names[i], vals[i]); a malloc'd copy, its count in *n. */
static float *
run(struct ml_graph *g, int nin, const char **names, const struct ml_tval *vals, int64_t *n)
{
	struct ml_session *s = NULL;
	float *out = NULL;
	bool good = ml_session_new(&s, g, NULL, &err) == 0;
	for (int i = 0; good && i < nin; i++)
		good = ml_session_set_input(s, names[i], &vals[i], &err) == 0;
	if (good && ml_session_run(s, &err) == 0) {
		const struct ml_tval *y = ml_session_output(s, 0);
		*n = ml_tval_numel(y);
		out = malloc(sizeof(float) * (size_t)*n + 1);
		memcpy(out, y->data, sizeof(float) * (size_t)*n);
		/* a second run reads what the first left in the nodes' caches (packed W) */
		if (ml_session_run(s, &err) != 0 ||
		    memcmp(out, ml_session_output(s, 0)->data, sizeof(float) * (size_t)*n) != 0) {
			printf("# a second run of the session differs%s%s\n", err.msg[0] ? ": " : "",
			       err.msg);
			free(out);
			out = NULL;
		}
	} else {
		printf("# %s\n", err.msg);
	}
	ml_session_free(s);
	return out;
}

static void
rand_tval(struct ml_tval *t, int rank, const int64_t *dims)
{
	ml_tval_alloc(t, ML_F32, rank, dims, &err);
	float *p = t->data;
	for (int64_t i = 0; i < ml_tval_numel(t); i++)
		p[i] = frand();
}

/* nhwc_of: t [N, C, H, W] as [N, H, W, C] into u. */
static void
nhwc_of(const struct ml_tval *t, struct ml_tval *u)
{
	int64_t N = t->dims[0], C = t->dims[1], H = t->dims[2], W = t->dims[3];
	ml_tval_alloc(u, ML_F32, 4, (int64_t[]){ N, H, W, C }, &err);
	const float *s = t->data;
	float *d = u->data;
	for (int64_t n = 0; n < N; n++)
		for (int64_t c = 0; c < C; c++)
			for (int64_t h = 0; h < H; h++)
				for (int64_t w = 0; w < W; w++)
					d[((n * H + h) * W + w) * C + c] = s[((n * C + c) * H + h) * W + w];
}

/*
 * The kernel. A case: ConvNHWC on X, W re-laid-out, against FusedConv on
 * the NCHW data, with a bias, an optional residual and activation.
 */
struct kcase {
	int64_t n, c, h, w, m, kh, kw, group, s, d;
	int64_t pads[4];	/* top, left, bottom, right */
	bool packed, z;
	const char *act;
};

static bool
kernel_case(const struct kcase *k)
{
	int64_t cg = k->c / k->group, K = k->kh * k->kw * cg, np = (k->m + 31) / 32;
	int64_t oh = (k->h + k->pads[0] + k->pads[2] - k->d * (k->kh - 1) - 1) / k->s + 1;
	int64_t ow = (k->w + k->pads[1] + k->pads[3] - k->d * (k->kw - 1) - 1) / k->s + 1;
	int64_t wd[4] = { k->m, cg, k->kh, k->kw }, md[1] = { k->m };
	int64_t xd[4] = { k->n, k->c, k->h, k->w }, zd[4] = { k->n, k->m, oh, ow };
	float *w = malloc(sizeof(float) * (size_t)(k->m * K)), *b = malloc(sizeof(float) * (size_t)k->m);
	float *wn = calloc((size_t)(np * 32 * K), sizeof(float));
	struct ml_graph *g0 = NULL, *g1 = NULL;
	struct ml_tval x = { 0 }, z = { 0 }, xn = { 0 }, zn = { 0 };
	float *y0 = NULL, *y1 = NULL;
	int64_t n0 = 0, n1 = 0;
	bool good = false;

	for (int64_t i = 0; i < k->m * K; i++)
		w[i] = frand();
	for (int64_t i = 0; i < k->m; i++)
		b[i] = frand();
	for (int64_t m = 0; m < k->m; m++)
		for (int64_t c = 0; c < cg; c++)
			for (int64_t kh = 0; kh < k->kh; kh++)
				for (int64_t kw = 0; kw < k->kw; kw++) {
					float v = w[((m * cg + c) * k->kh + kh) * k->kw + kw];
					int64_t r = (kh * k->kw + kw) * cg + c;
					if (k->packed)
						wn[((m / 32) * K + r) * 32 + m % 32] = v;
					else
						wn[r * k->m + m] = v;
				}
	rand_tval(&x, 4, xd);
	nhwc_of(&x, &xn);
	if (k->z) {
		rand_tval(&z, 4, zd);
		nhwc_of(&z, &zn);
	}
	for (int pass = 0; pass < 2; pass++) {
		struct ml_graph *g;
		if (ml_graph_new(&g, &err) < 0)
			goto out;
		*(pass ? &g1 : &g0) = g;
		ml_graph_set_opset(g, "", 13, &err);
		input(g, "x", 4, pass ? xn.dims : xd);
		if (k->z)
			input(g, "z", 4, pass ? zn.dims : zd);
		if (pass && k->packed)
			cst(g, "w", 3, (int64_t[]){ np, K, 32 }, wn);
		else if (pass)
			cst(g, "w", 4, (int64_t[]){ k->kh, k->kw, cg, k->m }, wn);
		else
			cst(g, "w", 4, wd, w);
		cst(g, "b", 1, md, b);
		const char *in[4] = { "x", "w", "b", "z" };
		int ni = node(g, pass ? "ConvNHWC" : "FusedConv", "ml", k->z ? 4 : 3, in, "y");
		ml_node_set_ints(g, ni, "kernel_shape", 2, (int64_t[]){ k->kh, k->kw });
		ml_node_set_ints(g, ni, "strides", 2, (int64_t[]){ k->s, k->s });
		ml_node_set_ints(g, ni, "dilations", 2, (int64_t[]){ k->d, k->d });
		ml_node_set_ints(g, ni, "pads", 4, k->pads);
		ml_node_set_int(g, ni, "group", k->group);
		ml_node_set_string(g, ni, "activation", k->act);
		if (!strcmp(k->act, "Clip")) {
			ml_node_set_float(g, ni, "clip_min", -0.5);
			ml_node_set_float(g, ni, "clip_max", 0.75);
		}
		if (pass && k->packed)
			ml_node_set_int(g, ni, "packed_n", k->m);
		if (!finish(g, "y"))
			goto out;
	}
	const char *names[2] = { "x", "z" };
	y0 = run(g0, k->z ? 2 : 1, names, (struct ml_tval[]){ x, z }, &n0);
	y1 = run(g1, k->z ? 2 : 1, names, (struct ml_tval[]){ xn, zn }, &n1);
	if (y0 == NULL || y1 == NULL || n0 != n1 || n0 != k->n * k->m * oh * ow)
		goto out;
	good = true;
	for (int64_t n = 0; n < k->n; n++)
		for (int64_t m = 0; m < k->m; m++)
			for (int64_t i = 0; i < oh * ow; i++) {
				float a = y0[(n * k->m + m) * oh * ow + i], c = y1[(n * oh * ow + i) * k->m + m];
				if (!(fabsf(a - c) <= 1e-4f * (1.0f + fabsf(a))))
					good = false;
			}
out:
	free(w);
	free(b);
	free(wn);
	free(y0);
	free(y1);
	ml_tval_clear(&x);
	ml_tval_clear(&z);
	ml_tval_clear(&xn);
	ml_tval_clear(&zn);
	ml_graph_free(g0);
	ml_graph_free(g1);
	return good;
}

static const struct kcase kcases[] = {
	/* depthwise: ConvNeXt's 7x7, MobileNet's 3x3 (stride 2), odd channels, dilation */
	{ 1, 96, 16, 16, 96, 7, 7, 96, 1, 1, { 3, 3, 3, 3 }, false, false, "" },
	{ 1, 384, 2, 2, 384, 7, 7, 384, 1, 1, { 3, 3, 3, 3 }, false, true, "" },
	{ 2, 37, 11, 9, 37, 3, 3, 37, 2, 1, { 1, 1, 1, 1 }, false, false, "Clip" },
	{ 1, 17, 13, 14, 17, 5, 3, 17, 1, 2, { 2, 0, 3, 1 }, false, true, "Relu" },
	{ 1, 5, 7, 6, 5, 3, 3, 5, 3, 1, { 0, 1, 2, 0 }, false, false, "Gelu" },
	{ 1, 1, 5, 5, 1, 3, 3, 1, 1, 1, { 1, 1, 1, 1 }, false, false, "" },
	/*
	 * the sliding kernels of whole runs of 32 channels (dw_row512): 5x5 at
	 * stride 2 with the Relu in registers, 7x7 with a residual and 8
	 * channels left over, a 5x5 window wider than its 3x3 input
	 */
	{ 1, 64, 15, 15, 64, 5, 5, 64, 2, 1, { 2, 2, 2, 2 }, false, false, "Relu" },
	{ 2, 40, 9, 10, 40, 7, 7, 40, 1, 1, { 3, 3, 3, 3 }, false, true, "Clip" },
	{ 1, 96, 3, 3, 96, 5, 5, 96, 1, 1, { 2, 2, 2, 2 }, false, false, "" },
	/* 3x3 and 5x5, strides 1 and 2, whole blocks of 16 channels (the kernels' constant windows) */
	{ 1, 32, 12, 13, 32, 3, 3, 32, 1, 1, { 1, 1, 1, 1 }, false, true, "Clip" },
	{ 1, 48, 14, 25, 48, 3, 3, 48, 2, 1, { 1, 1, 1, 1 }, false, false, "Silu" },
	{ 1, 32, 11, 12, 32, 5, 5, 32, 1, 1, { 2, 2, 2, 2 }, false, false, "" },
	{ 2, 16, 13, 30, 16, 5, 5, 16, 2, 1, { 2, 1, 2, 1 }, false, true, "Relu" },
	/* one group: patchify stem and downsampling, pointwise, 3x3 with pads */
	{ 1, 3, 16, 16, 96, 4, 4, 1, 4, 1, { 0, 0, 0, 0 }, true, false, "" },
	{ 1, 384, 4, 4, 768, 2, 2, 1, 2, 1, { 0, 0, 0, 0 }, true, false, "" },
	{ 1, 192, 8, 8, 384, 2, 2, 1, 2, 1, { 0, 0, 0, 0 }, true, true, "Relu" },
	{ 2, 33, 9, 7, 45, 1, 1, 1, 1, 1, { 0, 0, 0, 0 }, true, true, "Silu" },
	{ 1, 64, 12, 12, 70, 1, 1, 1, 1, 1, { 0, 0, 0, 0 }, true, false, "Clip" },
	{ 1, 7, 10, 11, 9, 3, 3, 1, 1, 1, { 1, 1, 1, 1 }, true, false, "" },
	{ 1, 6, 9, 9, 10, 3, 3, 1, 2, 2, { 2, 1, 0, 2 }, true, true, "Tanh" },
	{ 1, 7, 10, 11, 9, 3, 3, 1, 1, 1, { 1, 1, 1, 1 }, false, true, "" },
	/* RGB stems, W packed (the direct few-channel kernel): two panels, a masked one, dilation */
	{ 2, 3, 20, 19, 40, 3, 3, 1, 2, 1, { 1, 1, 1, 1 }, true, true, "Silu" },
	{ 1, 3, 23, 17, 32, 3, 3, 1, 2, 1, { 0, 1, 1, 0 }, true, false, "Clip" },
	{ 1, 1, 9, 12, 16, 5, 5, 1, 1, 2, { 2, 2, 2, 2 }, true, false, "Relu" },
	{ 1, 4, 30, 31, 24, 3, 3, 1, 1, 1, { 1, 1, 1, 1 }, true, true, "" },
	{ 1, 3, 9, 40, 40, 3, 3, 1, 2, 1, { 1, 1, 1, 1 }, true, false, "Clip" },
	/*
	 * rows of stems as wide as ResNet's (112 outputs: blocks of 48, 32, 32)
	 * and SqueezeNet's (111: 48, 32, 31), the residual and activation in
	 * registers
	 */
	{ 1, 3, 7, 224, 12, 7, 7, 1, 2, 1, { 3, 3, 3, 3 }, true, true, "Relu" },
	{ 1, 3, 5, 223, 10, 3, 3, 1, 2, 1, { 0, 0, 0, 0 }, true, true, "Clip" },
	/* W as mlopt writes it ([kH, kW, C, M]), packed once per session: stems, few rows */
	{ 2, 3, 20, 19, 40, 3, 3, 1, 2, 1, { 1, 1, 1, 1 }, false, true, "Silu" },
	{ 1, 3, 23, 17, 32, 3, 3, 1, 2, 1, { 0, 1, 1, 0 }, false, false, "Clip" },
	/* a 3x3 stride-2 RGB stem wide enough for whole blocks inside the row (constant loops) */
	{ 2, 3, 9, 40, 40, 3, 3, 1, 2, 1, { 1, 1, 1, 1 }, false, true, "Silu" },
	{ 1, 96, 5, 5, 160, 1, 1, 1, 1, 1, { 0, 0, 0, 0 }, false, true, "Relu" },
	{ 1, 64, 3, 3, 70, 1, 1, 1, 1, 1, { 0, 0, 0, 0 }, false, false, "" },
	{ 1, 384, 4, 4, 768, 2, 2, 1, 2, 1, { 0, 0, 0, 0 }, false, false, "Gelu" },
	/* tiny outputs: FusedConv's positions-as-rows product (nn_conv.c's conv_rows) */
	{ 1, 96, 2, 2, 40, 1, 1, 1, 1, 1, { 0, 0, 0, 0 }, false, true, "Relu" },
	{ 2, 32, 2, 1, 24, 3, 3, 1, 1, 1, { 1, 1, 1, 1 }, false, true, "Clip" },
	{ 1, 20, 4, 4, 70, 3, 3, 1, 2, 1, { 1, 1, 1, 1 }, false, false, "Silu" },
	/* other groups and a channel multiplier: the direct loops */
	{ 1, 12, 7, 8, 18, 3, 3, 3, 1, 1, { 1, 1, 1, 1 }, false, true, "Relu" },
	{ 1, 6, 6, 7, 12, 3, 3, 6, 2, 1, { 1, 0, 1, 0 }, false, false, "" },
	/*
	 * few input channels (FusedConv's direct kernel: residual, Relu and Clip on
	 * its registers, other activations per block)
	 */
	{ 2, 3, 20, 19, 20, 7, 7, 1, 2, 1, { 3, 3, 3, 3 }, false, true, "Relu" },
	{ 1, 4, 12, 40, 10, 3, 3, 1, 1, 1, { 1, 1, 1, 1 }, false, false, "Clip" },
	{ 1, 3, 23, 45, 36, 3, 3, 1, 2, 1, { 0, 0, 0, 0 }, false, true, "Clip" },
	{ 2, 3, 16, 37, 12, 5, 5, 1, 2, 1, { 2, 2, 2, 2 }, false, true, "" },
	{ 1, 3, 17, 40, 16, 3, 3, 1, 1, 1, { 1, 1, 1, 1 }, false, true, "Silu" },
	/* FusedConv's epilogue inside Winograd (tiles of 2 images) and the folded im2col */
	{ 2, 16, 14, 14, 20, 3, 3, 1, 1, 1, { 1, 1, 1, 1 }, false, true, "Relu" },
	{ 3, 20, 9, 9, 24, 3, 3, 1, 2, 1, { 1, 1, 1, 1 }, false, true, "Clip" },
	{ 2, 20, 12, 13, 24, 3, 3, 1, 1, 1, { 1, 1, 1, 1 }, false, false, "Silu" },
};
#define NKCASES ((int)(sizeof kcases / sizeof kcases[0]))

static void
kernel_all(const char *level)
{
	char what[160];
	int bad = 0;
	if (level != NULL)
		setenv("ML_NHWC", level, 1);
	else
		unsetenv("ML_NHWC");
	for (int i = 0; i < NKCASES; i++)
		if (!kernel_case(&kcases[i])) {
			printf("# case %d wrong\n", i);
			bad++;
		}
	snprintf(what, sizeof what, "ConvNHWC = FusedConv on %d cases (ML_NHWC=%s): %d wrong", NKCASES,
		 level != NULL ? level : "unset", bad);
	ok(bad == 0, what);
	unsetenv("ML_NHWC");
}

/*
 * The prologue (mlopt's fuse-expand): ConvNHWC(X, W, B, Wp, [Bp]) with
 * prologue 1 against the pointwise ConvNHWC(X, Wp, Bp) and the depthwise
 * one after it: strides, dilation, pads, a window of one row (no ring
 * rows twice) and one taller than the ring (the whole input first), images
 * that runs cross, planes too short for a run per thread (groups of
 * channels), channels past whole blocks of 16, runs of 96 channels, no Bp.
 */
struct pcase {
	int64_t n, cx, c, h, w, kh, kw, s, d;
	int64_t pads[4];
	bool bp;
	const char *pre, *act;
};

static bool
prologue_case(const struct pcase *k)
{
	int64_t wpd[4] = { 1, 1, k->cx, k->c }, wd[4] = { k->kh, k->kw, 1, k->c }, cd[1] = { k->c };
	int64_t xd[4] = { k->n, k->h, k->w, k->cx };
	float *wp = malloc(sizeof(float) * (size_t)(k->cx * k->c));
	float *w = malloc(sizeof(float) * (size_t)(k->kh * k->kw * k->c));
	float *b = malloc(sizeof(float) * (size_t)k->c), *bp = malloc(sizeof(float) * (size_t)k->c);
	struct ml_graph *g[2] = { NULL, NULL };
	struct ml_tval x = { 0 };
	float *y[2] = { NULL, NULL };
	int64_t ny[2] = { 0, 0 };
	bool good = false;

	for (int64_t i = 0; i < k->cx * k->c; i++)
		wp[i] = frand();
	for (int64_t i = 0; i < k->kh * k->kw * k->c; i++)
		w[i] = frand();
	for (int64_t i = 0; i < k->c; i++) {
		b[i] = frand();
		bp[i] = frand();
	}
	rand_tval(&x, 4, xd);
	for (int pass = 0; pass < 2; pass++) {
		if (ml_graph_new(&g[pass], &err) < 0)
			goto out;
		ml_graph_set_opset(g[pass], "", 13, &err);
		input(g[pass], "x", 4, xd);
		cst(g[pass], "wp", 4, wpd, wp);
		cst(g[pass], "w", 4, wd, w);
		cst(g[pass], "b", 1, cd, b);
		cst(g[pass], "bp", 1, cd, bp);
		int ni;
		if (pass == 0) {
			const char *pin[3] = { "x", "wp", "bp" }, *din[3] = { "e", "w", "b" };
			int pi = node(g[0], "ConvNHWC", "ml", k->bp ? 3 : 2, pin, "e");
			ml_node_set_ints(g[0], pi, "kernel_shape", 2, (int64_t[]){ 1, 1 });
			ml_node_set_string(g[0], pi, "activation", k->pre);
			ml_node_set_float(g[0], pi, "clip_min", 0.0);
			ml_node_set_float(g[0], pi, "clip_max", 0.75);
			ni = node(g[0], "ConvNHWC", "ml", 3, din, "y");
		} else {
			const char *in[5] = { "x", "w", "b", "wp", "bp" };
			ni = node(g[1], "ConvNHWC", "ml", k->bp ? 5 : 4, in, "y");
			ml_node_set_int(g[1], ni, "prologue", 1);
			ml_node_set_string(g[1], ni, "pre_activation", k->pre);
			ml_node_set_float(g[1], ni, "pre_clip_min", 0.0);
			ml_node_set_float(g[1], ni, "pre_clip_max", 0.75);
		}
		ml_node_set_ints(g[pass], ni, "kernel_shape", 2, (int64_t[]){ k->kh, k->kw });
		ml_node_set_ints(g[pass], ni, "strides", 2, (int64_t[]){ k->s, k->s });
		ml_node_set_ints(g[pass], ni, "dilations", 2, (int64_t[]){ k->d, k->d });
		ml_node_set_ints(g[pass], ni, "pads", 4, k->pads);
		ml_node_set_int(g[pass], ni, "group", k->c);
		ml_node_set_string(g[pass], ni, "activation", k->act);
		if (!finish(g[pass], "y"))
			goto out;
		const char *names[1] = { "x" };
		if ((y[pass] = run(g[pass], 1, names, &x, &ny[pass])) == NULL)
			goto out;
	}
	good = ny[0] == ny[1] && ny[0] > 0;
	for (int64_t i = 0; good && i < ny[0]; i++)
		good = fabsf(y[0][i] - y[1][i]) <= 1e-5f * (1.0f + fabsf(y[0][i]));
out:
	free(wp);
	free(w);
	free(b);
	free(bp);
	free(y[0]);
	free(y[1]);
	ml_tval_clear(&x);
	ml_graph_free(g[0]);
	ml_graph_free(g[1]);
	return good;
}

static const struct pcase pcases[] = {
	{ 1, 16, 96, 30, 29, 3, 3, 1, 1, { 1, 1, 1, 1 }, true, "Clip", "Clip" },
	{ 1, 24, 144, 31, 30, 3, 3, 2, 1, { 1, 1, 1, 1 }, true, "Silu", "" },
	{ 3, 8, 37, 9, 11, 3, 3, 1, 1, { 1, 1, 1, 1 }, false, "Relu", "Relu" },
	{ 2, 5, 40, 13, 12, 5, 5, 2, 1, { 2, 2, 2, 2 }, true, "", "Silu" },
	{ 1, 7, 33, 10, 9, 3, 3, 1, 2, { 2, 1, 2, 0 }, true, "Clip", "" },
	{ 1, 6, 20, 25, 24, 3, 3, 1, 9, { 9, 0, 9, 1 }, true, "Relu", "Clip" },
	{ 2, 9, 48, 7, 8, 1, 1, 1, 1, { 0, 0, 0, 0 }, true, "Clip", "Clip" },
	{ 1, 4, 64, 2, 40, 3, 3, 1, 1, { 1, 1, 1, 1 }, false, "Silu", "" },
	{ 1, 12, 17, 3, 5, 3, 3, 2, 1, { 0, 1, 1, 0 }, true, "", "" },
	/* runs of 96 channels and one of 8 (pre_row512), 3 inputs, a row of 7 pixels */
	{ 1, 3, 200, 6, 7, 3, 3, 1, 1, { 1, 1, 1, 1 }, true, "Relu", "" },
};
#define NPCASES ((int)(sizeof pcases / sizeof pcases[0]))

/* prologue_all: every pcase on the depthwise kernel of level (ML_NHWC) */
static bool
prologue_all(const char *level)
{
	int bad = 0;
	if (level != NULL)
		setenv("ML_NHWC", level, 1);
	else
		unsetenv("ML_NHWC");
	for (int i = 0; i < NPCASES; i++)
		if (!prologue_case(&pcases[i])) {
			printf("# prologue case %d wrong\n", i);
			bad++;
		}
	unsetenv("ML_NHWC");
	return bad == 0;
}

/*
 * The pass. block: a ConvNeXt block on x (NCHW, C channels) into y:
 * depthwise 7x7, Transpose, LayerNormalization, Linear, Gelu, Linear,
 * Transpose, the layer scale, the residual Add.
 */
static void
block(struct ml_graph *g, const char *x, const char *y, int64_t C, const char *p)
{
	char nm[16][32];
	for (int i = 0; i < 16; i++)
		snprintf(nm[i], sizeof nm[i], "%s%d", p, i);
	cst(g, nm[0], 4, (int64_t[]){ C, 1, 7, 7 }, NULL);
	cst(g, nm[1], 1, (int64_t[]){ C }, NULL);
	int ni = node(g, "Conv", "", 3, (const char *[]){ x, nm[0], nm[1] }, nm[2]);
	ml_node_set_int(g, ni, "group", C);
	ml_node_set_ints(g, ni, "pads", 4, (int64_t[]){ 3, 3, 3, 3 });
	ml_node_set_ints(g, ni, "kernel_shape", 2, (int64_t[]){ 7, 7 });
	transpose(g, nm[2], nm[3], true);
	cst(g, nm[4], 1, (int64_t[]){ C }, NULL);
	cst(g, nm[5], 1, (int64_t[]){ C }, NULL);
	ni = node(g, "LayerNormalization", "", 3, (const char *[]){ nm[3], nm[4], nm[5] }, nm[6]);
	ml_node_set_int(g, ni, "axis", -1);
	cst(g, nm[7], 2, (int64_t[]){ C, 4 * C }, NULL);
	node(g, "MatMul", "", 2, (const char *[]){ nm[6], nm[7] }, nm[8]);
	node(g, "Gelu", "ml", 1, (const char *[]){ nm[8] }, nm[9]);
	cst(g, nm[10], 2, (int64_t[]){ 4 * C, C }, NULL);
	node(g, "MatMul", "", 2, (const char *[]){ nm[9], nm[10] }, nm[11]);
	transpose(g, nm[11], nm[12], false);
	cst(g, nm[13], 3, (int64_t[]){ C, 1, 1 }, NULL);
	node(g, "Mul", "", 2, (const char *[]){ nm[12], nm[13] }, nm[14]);
	node(g, "Add", "", 2, (const char *[]){ nm[14], x }, y);
}

/* convnext: a patchify stem (2x2 stride 2, 3 to C channels) and two blocks, seeded. */
static struct ml_graph *
convnext(int64_t C, int64_t H)
{
	struct ml_graph *g = NULL;
	rs = 12345;
	ml_graph_new(&g, &err);
	ml_graph_set_opset(g, "", 17, &err);
	input(g, "x", 4, (int64_t[]){ 1, 3, 2 * H, 2 * H });
	cst(g, "sw", 4, (int64_t[]){ C, 3, 2, 2 }, NULL);
	cst(g, "sb", 1, (int64_t[]){ C }, NULL);
	int ni = node(g, "Conv", "", 3, (const char *[]){ "x", "sw", "sb" }, "s");
	ml_node_set_ints(g, ni, "strides", 2, (int64_t[]){ 2, 2 });
	block(g, "s", "y1", C, "a");
	block(g, "y1", "y", C, "b");
	return finish(g, "y") ? g : NULL;
}

static int
count_op(const struct ml_graph *g, const char *op)
{
	int n = 0;
	for (int i = 0; i < g->n_nodes; i++)
		n += strcmp(g->nodes[i].op_type, op) == 0;
	return n;
}

/* same_out: g0 and g1 give one output within rtol 1e-4 on the random input x of shape xd. */
static bool
same_out(struct ml_graph *g0, struct ml_graph *g1, int rank, const int64_t *xd)
{
	struct ml_tval x = { 0 };
	int64_t n0 = 0, n1 = 0;
	rand_tval(&x, rank, xd);
	const char *names[1] = { "x" };
	float *a = run(g0, 1, names, &x, &n0), *b = run(g1, 1, names, &x, &n1);
	bool good = a != NULL && b != NULL && n0 == n1 && n0 > 0;
	for (int64_t i = 0; good && i < n0; i++)
		good = fabsf(a[i] - b[i]) <= 1e-4f * (1.0f + fabsf(a[i]));
	free(a);
	free(b);
	ml_tval_clear(&x);
	return good;
}

/* opt: run the passes (a list, or level when NULL) on g; the changes made, or -1. */
static int
opt(struct ml_graph *g, const char *passes, int level)
{
	struct ml_opt_opts o = { .level = level, .passes = passes };
	struct ml_opt_report r = { 0 };
	if (ml_opt_run(g, &o, &r, &err) < 0) {
		printf("# %s\n", err.msg);
		return -1;
	}
	int n = 0;
	for (int i = 0; i < r.n; i++)
		n += r.rows[i].changes;
	ml_opt_report_free(&r);
	return n;
}

/* text: g in the text form (malloc'd), to compare two graphs byte for byte. */
static char *
text(const struct ml_graph *g)
{
	char *t = NULL;
	size_t len;
	return ml_text_encode(g, &t, &len, &err) == 0 ? t : NULL;
}

static void
test_convnext(void)
{
	struct ml_graph *g0 = convnext(24, 9), *g1 = convnext(24, 9);
	int64_t xd[4] = { 1, 3, 18, 18 };
	ok(g0 != NULL && g1 != NULL && count_op(g1, "Transpose") == 4, "ConvNeXt-like graph builds");
	if (g0 == NULL || g1 == NULL)
		return;
	int ch = opt(g1, "layout", 0);
	ok(ch > 0 && count_op(g1, "ConvNHWC") == 3 && count_op(g1, "Conv") == 0,
	   "layout: the stem and both depthwise Convs run as ConvNHWC");
	ok(count_op(g1, "Transpose") == 2,
	   "layout: the four transposes in the blocks cancel, one at each boundary stays");
	ok(same_out(g0, g1, 4, xd), "layout: the output is the original's (rtol 1e-4)");
	char *t1 = text(g1);
	ok(opt(g1, "layout", 0) == 0, "layout again: no change");
	char *t2 = text(g1);
	ok(t1 != NULL && t2 != NULL && strcmp(t1, t2) == 0, "layout again: the same graph, byte for byte");
	ml_free(t1);
	ml_free(t2);
	ml_graph_free(g1);

	g1 = convnext(24, 9);
	ok(opt(g1, NULL, 2) > 0 && count_op(g1, "ConvNHWC") == 3 && same_out(g0, g1, 4, xd),
	   "-O2 runs layout; the output is the original's");
	t1 = text(g1);
	ok(opt(g1, NULL, 2) == 0, "-O2 on the -O2 graph changes nothing");
	t2 = text(g1);
	ok(t1 != NULL && t2 != NULL && strcmp(t1, t2) == 0, "-O2 again: the same graph, byte for byte");
	ml_free(t1);
	ml_free(t2);
	struct ml_graph *g2 = convnext(24, 9);
	opt(g2, NULL, 2);
	t1 = text(g1);
	t2 = text(g2);
	ok(t1 != NULL && t2 != NULL && strcmp(t1, t2) == 0, "-O2 is deterministic: same graph, same bytes");
	ml_free(t1);
	ml_free(t2);
	ml_graph_free(g0);
	ml_graph_free(g1);
	ml_graph_free(g2);
}

/*
 * inner: x is NHWC; Transpose to NCHW, a Mul by a per-channel constant,
 * an Add of a scalar, the depthwise Conv, Transpose back: with layout, no
 * transpose at all.
 */
static struct ml_graph *
inner(int64_t C, int64_t H)
{
	struct ml_graph *g = NULL;
	rs = 777;
	ml_graph_new(&g, &err);
	ml_graph_set_opset(g, "", 13, &err);
	input(g, "x", 4, (int64_t[]){ 1, H, H, C });
	transpose(g, "x", "t", false);
	cst(g, "k", 3, (int64_t[]){ C, 1, 1 }, NULL);
	node(g, "Mul", "", 2, (const char *[]){ "t", "k" }, "m");
	cst(g, "one", 0, NULL, (const float[]){ 1.0f });
	node(g, "Add", "", 2, (const char *[]){ "m", "one" }, "a");
	cst(g, "w", 4, (int64_t[]){ C, 1, 3, 3 }, NULL);
	int ni = node(g, "Conv", "", 2, (const char *[]){ "a", "w" }, "c");
	ml_node_set_int(g, ni, "group", C);
	ml_node_set_ints(g, ni, "strides", 2, (int64_t[]){ 2, 2 });
	ml_node_set_ints(g, ni, "pads", 4, (int64_t[]){ 1, 1, 1, 1 });
	transpose(g, "c", "y", true);
	return finish(g, "y") ? g : NULL;
}

static void
test_inner(void)
{
	struct ml_graph *g0 = inner(19, 6), *g1 = inner(19, 6);
	if (g0 == NULL || g1 == NULL) {
		ok(false, "the NHWC-in, NHWC-out graph builds");
		return;
	}
	ok(opt(g1, "layout", 0) > 0 && count_op(g1, "Transpose") == 0 &&
	   count_op(g1, "ConvNHWC") == 1, "layout: a region with no boundary keeps no transpose");
	bool relaid = false;
	for (int t = 0; t < g1->n_tensors; t++)
		relaid |= strcmp(g1->tensors[t]->name, "k_nhwc") == 0 && g1->tensors[t]->rank == 4 &&
			  g1->tensors[t]->dims[3] == 19;
	ok(relaid, "layout: the per-channel constant is re-laid-out as [1, 1, 1, C]");
	ok(same_out(g0, g1, 4, (int64_t[]){ 1, 6, 6, 19 }), "layout: the output is the original's");
	ml_graph_free(g0);
	ml_graph_free(g1);
}

/*
 * se: EfficientNet's squeeze-excitation block on a narrow plane: a 5x5
 * depthwise Conv, GlobalAveragePool, 1x1 Conv, Relu, 1x1 Conv, Sigmoid,
 * and the Mul that scales the depthwise output; opset as given.
 */
static struct ml_graph *
se(int64_t C, int64_t H, int opset)
{
	struct ml_graph *g = NULL;
	rs = 4242;
	ml_graph_new(&g, &err);
	ml_graph_set_opset(g, "", opset, &err);
	input(g, "x", 4, (int64_t[]){ 1, C, H, H });
	cst(g, "wd", 4, (int64_t[]){ C, 1, 5, 5 }, NULL);
	int ni = node(g, "Conv", "", 2, (const char *[]){ "x", "wd" }, "d");
	ml_node_set_int(g, ni, "group", C);
	ml_node_set_ints(g, ni, "pads", 4, (int64_t[]){ 2, 2, 2, 2 });
	node(g, "GlobalAveragePool", "", 1, (const char *[]){ "d" }, "p");
	cst(g, "w1", 4, (int64_t[]){ C / 4, C, 1, 1 }, NULL);
	node(g, "Conv", "", 2, (const char *[]){ "p", "w1" }, "q");
	node(g, "Relu", "", 1, (const char *[]){ "q" }, "r");
	cst(g, "w2", 4, (int64_t[]){ C, C / 4, 1, 1 }, NULL);
	node(g, "Conv", "", 2, (const char *[]){ "r", "w2" }, "u");
	node(g, "Sigmoid", "", 1, (const char *[]){ "u" }, "s");
	node(g, "Mul", "", 2, (const char *[]){ "d", "s" }, "y");
	return finish(g, "y") ? g : NULL;
}

static void
test_se(void)
{
	struct ml_graph *g0 = se(32, 7, 13), *g1 = se(32, 7, 13);
	if (g0 == NULL || g1 == NULL) {
		ok(false, "the squeeze-excitation graph builds");
		return;
	}
	ok(opt(g1, "layout", 0) > 0 && count_op(g1, "GlobalAveragePool") == 0 &&
	   count_op(g1, "ReduceMean") == 1 && count_op(g1, "ConvNHWC") == 3 &&
	   count_op(g1, "Transpose") == 2,
	   "layout: a squeeze-excitation block runs in NHWC, the pool as a ReduceMean");
	ok(same_out(g0, g1, 4, (int64_t[]){ 1, 32, 7, 7 }), "layout: the SE block's output is the original's");
	/* a standard op carries only ONNX's attributes: it exports as it is */
	bool plain = true;
	for (int i = 0; i < g1->n_nodes; i++)
		if (strcmp(g1->nodes[i].op_type, "ReduceMean") == 0)
			plain = ml_attr_find(&g1->nodes[i], "fused_from") == NULL;
	ok(plain, "layout: the ReduceMean has no fused_from (ONNX's checker refuses it)");
	ml_graph_free(g0);
	ml_graph_free(g1);
	/* from opset 18 ReduceMean's axes are an input: the pool stays, at the region's edge */
	g0 = se(32, 7, 18);
	g1 = se(32, 7, 18);
	ok(g0 != NULL && g1 != NULL && opt(g1, "layout", 0) >= 0 &&
	   count_op(g1, "GlobalAveragePool") == 1 && count_op(g1, "ReduceMean") == 0 &&
	   same_out(g0, g1, 4, (int64_t[]){ 1, 32, 7, 7 }),
	   "layout at opset 18 keeps GlobalAveragePool, with the same output");
	ml_graph_free(g0);
	ml_graph_free(g1);
}

/*
 * alone: graphs the pass leaves as they are: a ResNet-like block (dense
 * 3x3 Convs, nothing to save but the boundary transposes to pay), and a
 * MobileNet-like 3x3 depthwise Conv on a 56-wide plane (NCHW's loops are
 * as fast there).
 */
static void
test_alone(void)
{
	struct ml_graph *g = NULL;
	ml_graph_new(&g, &err);
	ml_graph_set_opset(g, "", 13, &err);
	input(g, "x", 4, (int64_t[]){ 1, 8, 10, 10 });
	cst(g, "w1", 4, (int64_t[]){ 8, 8, 3, 3 }, NULL);
	cst(g, "w2", 4, (int64_t[]){ 8, 8, 3, 3 }, NULL);
	int a = node(g, "Conv", "", 2, (const char *[]){ "x", "w1" }, "c1");
	node(g, "Relu", "", 1, (const char *[]){ "c1" }, "r1");
	int b = node(g, "Conv", "", 2, (const char *[]){ "r1", "w2" }, "c2");
	ml_node_set_ints(g, a, "pads", 4, (int64_t[]){ 1, 1, 1, 1 });
	ml_node_set_ints(g, b, "pads", 4, (int64_t[]){ 1, 1, 1, 1 });
	node(g, "Add", "", 2, (const char *[]){ "c2", "x" }, "s");
	node(g, "Relu", "", 1, (const char *[]){ "s" }, "y");
	ok(finish(g, "y") && opt(g, "layout", 0) == 0 && count_op(g, "Conv") == 2,
	   "layout leaves a ResNet-like block alone");
	ml_graph_free(g);

	ml_graph_new(&g, &err);
	ml_graph_set_opset(g, "", 13, &err);
	input(g, "x", 4, (int64_t[]){ 1, 16, 56, 56 });
	cst(g, "w", 4, (int64_t[]){ 16, 1, 3, 3 }, NULL);
	a = node(g, "Conv", "", 2, (const char *[]){ "x", "w" }, "c");
	ml_node_set_int(g, a, "group", 16);
	ml_node_set_ints(g, a, "pads", 4, (int64_t[]){ 1, 1, 1, 1 });
	node(g, "Relu", "", 1, (const char *[]){ "c" }, "y");
	ok(finish(g, "y") && opt(g, "layout", 0) == 0 && count_op(g, "Conv") == 1,
	   "layout leaves a 3x3 depthwise Conv on a wide plane alone");
	ml_graph_free(g);
}

int
main(void)
{
	/* the BLAS fallback of one-group ConvNHWC, in a child (ML_PGEMM is read once) */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("ML_PGEMM", "0", 1);
		bool good = true;
		for (int i = 10; i < 18; i++)
			good &= kernel_case(&kcases[i]);
		_exit(good ? 0 : 1);
	}
	int st = 0;
	bool waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	ok(waited && WEXITSTATUS(st) == 0, "one-group ConvNHWC through BLAS (ML_PGEMM=0)");
	/* the packed SGEMM's AVX2 kernels (16 outputs or fewer: ml_pgemm_narrow's), in a child */
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		setenv("ML_PGEMM", "avx2", 1);
		bool good = true;
		for (int i = 0; i < NKCASES; i++)
			good &= kernel_case(&kcases[i]);
		_exit(good ? 0 : 1);
	}
	waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	ok(waited && WEXITSTATUS(st) == 0, "ConvNHWC = FusedConv, the packed SGEMM forced to AVX2 (ML_PGEMM=avx2)");
	/* FusedConv's few-channel direct kernel on AVX2 (its epilogue in registers), in a child */
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		setenv("ML_CONV_DIRECT", "avx2", 1);
		bool good = true;
		for (int i = 0; i < NKCASES; i++)
			good &= kernel_case(&kcases[i]);
		_exit(good ? 0 : 1);
	}
	waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	ok(waited && WEXITSTATUS(st) == 0, "ConvNHWC = FusedConv, the direct kernel forced to AVX2 (ML_CONV_DIRECT=avx2)");
	kernel_all(NULL);
	kernel_all("avx2");
	kernel_all("0");
	/* the prologue's rows through the packed SGEMM's kernel, then (a child) the portable loop */
	ok(prologue_all(NULL), "a prologue = the pointwise and depthwise ConvNHWC apart");
	ok(prologue_all("avx2"), "the same, depthwise forced to AVX2 (ML_NHWC=avx2)");
	ok(prologue_all("0"), "the same, the portable depthwise loops (ML_NHWC=0)");
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		setenv("ML_PGEMM", "0", 1);
		_exit(prologue_all(NULL) && prologue_all("0") ? 0 : 1);
	}
	waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	ok(waited && WEXITSTATUS(st) == 0, "the same, the prologue's portable loop (ML_PGEMM=0)");
	test_convnext();
	test_inner();
	test_se();
	test_alone();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
