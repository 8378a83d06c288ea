/*
 * quant.c: the internal int8 ops of mlquant's integer form (Q8Quantize,
 * Q8Dequantize, Q8Conv, Q8Add, Q8MaxPool, Q8GlobalAveragePool) on an
 * OpenCL device, over kernels/quant.cl. cl_ops.c's op table routes them
 * here; the results equal the CPU kernels' (lib/cpu/quant_q8.c) bit for bit.
 * Geometry and attributes are checked by the op definitions
 * (lib/ops/quant_q8.c), whose ml_q8_geom this reuses.
 */
#include <limits.h>

#include "cl/cl.h"
#include "cpu/quant_q8.h"
#include "ops/quant.h"

#define QMEM(b) (((struct mlcl_buf *)(b))->mem)

/* the dtypes of each op's inputs and output 0 (ML_UNDEF: no more inputs) */
struct q8sig {
	enum ml_op op;
	enum ml_dtype in[4];
	enum ml_dtype out;
};

static const struct q8sig sigs[] = {
	{ ML_OP_Q8_QUANTIZE, { ML_F32, ML_UNDEF }, ML_U8 },
	{ ML_OP_Q8_DEQUANTIZE, { ML_U8, ML_UNDEF }, ML_F32 },
	{ ML_OP_Q8_CONV, { ML_U8, ML_I8, ML_I32, ML_F32 }, ML_U8 },
	{ ML_OP_Q8_ADD, { ML_U8, ML_U8, ML_UNDEF }, ML_U8 },
	{ ML_OP_Q8_MAX_POOL, { ML_U8, ML_UNDEF }, ML_U8 },
	{ ML_OP_Q8_GLOBAL_AVG_POOL, { ML_U8, ML_UNDEF }, ML_U8 },
};

bool
mlcl_q8_supports(const struct ml_graph *g, const struct ml_node *n)
{
	const struct q8sig *s = NULL;
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (sigs[i].op == n->op)
			s = &sigs[i];
	if (s == NULL || n->n_out != 1 || n->out[0] < 0)
		return false;
	int want_in = 0;
	while (want_in < 4 && s->in[want_in] != ML_UNDEF)
		want_in++;
	if (n->n_in != want_in)
		return false;
	for (int j = 0; j < n->n_in; j++)
		if (n->in[j] < 0 || g->tensors[n->in[j]]->dtype != s->in[j])
			return false;
	const struct ml_tensor *y = g->tensors[n->out[0]];
	enum ml_dtype want = s->out;
	if (n->op == ML_OP_Q8_CONV && ml_attr_int(n, "out_float", 0) != 0)
		want = ML_F32;
	if (y->dtype != want || y->rank < 0 || y->rank > 8)
		return false;
	for (int k = 0; k < y->rank; k++)
		if (y->dims[k] < 0 && y->sym[k] == NULL)
			return false;	/* data-dependent sizes */
	return true;
}

/* args: set kernel arguments 0 .. n-1 from (size, pointer) pairs */
static int
args(struct ml_opctx *c, cl_kernel k, int n, const size_t *sz, const void *const *val)
{
	for (int i = 0; i < n; i++) {
		cl_int st = clSetKernelArg(k, (cl_uint)i, sz[i], val[i]);
		if (st != CL_SUCCESS)
			return mlcl_argfail(c, st);
	}
	return 0;
}

static int
too_big(struct ml_opctx *c, int64_t v)
{
	if (v > INT_MAX)
		return ml_opfail(c, ML_ENOTSUP, "an int8 tensor too large for OpenCL");
	return 0;
}

/* Q8Quantize and Q8Dequantize: the [N, C, HW] view of the f32 side (HW 1 for a matrix). */
static int
run_qdq(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout, bool quant)
{
	const struct ml_tval *f = quant ? c->in[0] : c->out[0];
	cl_long total = ml_tval_numel(f);
	if (f->rank < 2 || f->rank > 4)
		return ml_opfail(c, ML_EINVAL, "x must be rank 2, 3 or 4");
	if (total == 0)
		return 0;
	/* a matrix ([N, C] or [N, T, C]) keeps its layout: C its last dim, HW 1 */
	int64_t cc = f->rank == 4 ? f->dims[1] : f->dims[f->rank - 1];
	int64_t hw = f->rank == 4 ? f->dims[2] * f->dims[3] : 1;
	ML_TRY(too_big(c, hw));
	ML_TRY(too_big(c, cc));
	cl_int C = (cl_int)cc;
	cl_int HW = (cl_int)hw;
	float scale = (float)ml_attr_float(c->node, "scale", 1.0);
	float a = quant ? 1.0f / scale : scale;
	cl_int zero = (cl_int)ml_attr_int(c->node, "zero_point", 0);
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "quant", quant ? "ml_q8_quantize" : "ml_q8_dequantize", NULL, &k,
			   c->err));
	cl_mem x = QMEM(bin[0]), y = QMEM(bout[0]);
	const size_t sz[] = { sizeof x, sizeof y, sizeof total, sizeof C, sizeof HW, sizeof a,
			      sizeof zero };
	const void *const val[] = { &x, &y, &total, &C, &HW, &a, &zero };
	ML_TRY(args(c, k, 7, sz, val));
	return mlcl_launch1(d, k, (size_t)total, c->err);
}

static int
run_conv(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	struct ml_q8_geom g;
	ML_TRY(ml_q8_geom(c, &g));
	int64_t P = g.n * g.oh * g.ow;
	if (P == 0 || g.m == 0)
		return 0;
	ML_TRY(too_big(c, g.h * g.w * g.c));
	ML_TRY(too_big(c, g.m * ml_q8_kpad(g.k)));
	cl_mem x = QMEM(bin[0]), w = QMEM(bin[1]), b = QMEM(bin[2]), mu = QMEM(bin[3]);
	cl_mem y = QMEM(bout[0]);
	cl_long lp = P;
	cl_int geo[] = { (cl_int)g.c, (cl_int)g.h, (cl_int)g.w, (cl_int)g.oh, (cl_int)g.ow,
			 (cl_int)g.kh, (cl_int)g.kw, (cl_int)g.sh, (cl_int)g.sw, (cl_int)g.dh,
			 (cl_int)g.dw, (cl_int)g.pt, (cl_int)g.pl };
	int ngeo = (int)(sizeof geo / sizeof geo[0]);
	cl_kernel k;
	if (g.group != 1) {
		cl_long total = P * g.c;
		cl_int tail[] = { g.xzero, g.yzero, g.lo, g.hi };
		ML_TRY(mlcl_kernel(d, "quant", "ml_q8_dwconv", NULL, &k, c->err));
		const size_t sz[] = { sizeof x, sizeof w, sizeof b, sizeof mu, sizeof y,
				      sizeof total };
		const void *const val[] = { &x, &w, &b, &mu, &y, &total };
		ML_TRY(args(c, k, 6, sz, val));
		for (int i = 0; i < ngeo; i++) {
			cl_int st = clSetKernelArg(k, (cl_uint)(6 + i), sizeof(cl_int), &geo[i]);
			if (st != CL_SUCCESS)
				return mlcl_argfail(c, st);
		}
		for (int i = 0; i < 4; i++) {
			cl_int st = clSetKernelArg(k, (cl_uint)(6 + ngeo + i), sizeof(cl_int),
						   &tail[i]);
			if (st != CL_SUCCESS)
				return mlcl_argfail(c, st);
		}
		return mlcl_launch1(d, k, (size_t)total, c->err);
	}
	cl_int tail[] = { (cl_int)g.m, (cl_int)ml_q8_kpad(g.k), g.xzero, g.yzero, g.lo, g.hi,
			  g.f32out ? 1 : 0 };
	ML_TRY(mlcl_kernel(d, "quant", "ml_q8_conv", NULL, &k, c->err));
	const size_t sz[] = { sizeof x, sizeof w, sizeof b, sizeof mu, sizeof y, sizeof y,
			      sizeof lp };
	const void *const val[] = { &x, &w, &b, &mu, &y, &y, &lp };
	ML_TRY(args(c, k, 7, sz, val));
	for (int i = 0; i < ngeo; i++) {
		cl_int st = clSetKernelArg(k, (cl_uint)(7 + i), sizeof(cl_int), &geo[i]);
		if (st != CL_SUCCESS)
			return mlcl_argfail(c, st);
	}
	for (int i = 0; i < 7; i++) {
		cl_int st = clSetKernelArg(k, (cl_uint)(7 + ngeo + i), sizeof(cl_int), &tail[i]);
		if (st != CL_SUCCESS)
			return mlcl_argfail(c, st);
	}
	size_t wg = mlcl_wg(d, (size_t)P);
	size_t gws[2] = { mlcl_round_up((size_t)P, wg), (size_t)((g.m + ML_Q8_NR - 1) / ML_Q8_NR) };
	size_t lws[2] = { wg, 1 };
	return mlcl_launch(d, k, 2, gws, lws, c->err);
}

static int
run_add(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	cl_long total = ml_tval_numel(c->out[0]);
	if (ml_tval_numel(c->in[0]) != total || ml_tval_numel(c->in[1]) != total)
		return ml_opfail(c, ML_EINVAL, "a and b differ in shape");
	if (total == 0)
		return 0;
	double sy = ml_attr_float(c->node, "y_scale", 1.0);
	float fa = (float)(ml_attr_float(c->node, "a_scale", 1.0) / sy);
	float fb = (float)(ml_attr_float(c->node, "b_scale", 1.0) / sy);
	cl_int z[4] = { (cl_int)ml_attr_int(c->node, "a_zero_point", 0),
			(cl_int)ml_attr_int(c->node, "b_zero_point", 0),
			(cl_int)ml_attr_int(c->node, "y_zero_point", 0),
			(cl_int)ml_attr_int(c->node, "act_min", 0) };
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "quant", "ml_q8_add", NULL, &k, c->err));
	cl_mem a = QMEM(bin[0]), b = QMEM(bin[1]), y = QMEM(bout[0]);
	const size_t sz[] = { sizeof a, sizeof b, sizeof y, sizeof total, sizeof fa, sizeof fb,
			      4, 4, 4, 4 };
	const void *const val[] = { &a, &b, &y, &total, &fa, &fb, &z[0], &z[1], &z[2], &z[3] };
	ML_TRY(args(c, k, 10, sz, val));
	return mlcl_launch1(d, k, (size_t)total, c->err);
}

static int
run_maxpool(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0], *yt = c->out[0];
	const int64_t *ks = NULL, *st = NULL, *pd = NULL;
	cl_int p[12] = { (cl_int)x->dims[3], (cl_int)x->dims[1], (cl_int)x->dims[2],
			 (cl_int)yt->dims[1], (cl_int)yt->dims[2], 1, 1, 1, 1, 0, 0, 0 };
	cl_long total = ml_tval_numel(yt);
	if (x->rank != 4 || yt->rank != 4)
		return ml_opfail(c, ML_EINVAL, "x must be [N, H, W, C]");
	ML_TRY(too_big(c, x->dims[1] * x->dims[2] * x->dims[3]));
	if (ml_attr_ints(c->node, "kernel_shape", &ks) == 2)
		p[5] = (cl_int)ks[0], p[6] = (cl_int)ks[1];
	if (ml_attr_ints(c->node, "strides", &st) == 2)
		p[7] = (cl_int)st[0], p[8] = (cl_int)st[1];
	if (ml_attr_ints(c->node, "pads", &pd) == 4)
		p[9] = (cl_int)pd[0], p[10] = (cl_int)pd[1];
	if (total == 0)
		return 0;
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "quant", "ml_q8_maxpool", NULL, &k, c->err));
	cl_mem xm = QMEM(bin[0]), y = QMEM(bout[0]);
	const size_t sz[] = { sizeof xm, sizeof y, sizeof total };
	const void *const val[] = { &xm, &y, &total };
	ML_TRY(args(c, k, 3, sz, val));
	for (int i = 0; i < 11; i++) {
		cl_int s = clSetKernelArg(k, (cl_uint)(3 + i), sizeof(cl_int), &p[i]);
		if (s != CL_SUCCESS)
			return mlcl_argfail(c, s);
	}
	return mlcl_launch1(d, k, (size_t)total, c->err);
}

static int
run_gap(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0];
	if (x->rank != 4)
		return ml_opfail(c, ML_EINVAL, "x must be [N, H, W, C]");
	cl_long total = x->dims[0] * x->dims[3], hw = x->dims[1] * x->dims[2];
	ML_TRY(too_big(c, x->dims[3]));
	if (total == 0)
		return 0;
	cl_int C = (cl_int)x->dims[3];
	cl_kernel k;
	ML_TRY(mlcl_kernel(d, "quant", "ml_q8_gap", NULL, &k, c->err));
	cl_mem xm = QMEM(bin[0]), y = QMEM(bout[0]);
	const size_t sz[] = { sizeof xm, sizeof y, sizeof total, sizeof C, sizeof hw };
	const void *const val[] = { &xm, &y, &total, &C, &hw };
	ML_TRY(args(c, k, 5, sz, val));
	return mlcl_launch1(d, k, (size_t)total, c->err);
}

int
mlcl_q8_run(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	switch (c->node->op) {
	case ML_OP_Q8_QUANTIZE: return run_qdq(d, c, bin, bout, true);
	case ML_OP_Q8_DEQUANTIZE: return run_qdq(d, c, bin, bout, false);
	case ML_OP_Q8_CONV: return run_conv(d, c, bin, bout);
	case ML_OP_Q8_ADD: return run_add(d, c, bin, bout);
	case ML_OP_Q8_MAX_POOL: return run_maxpool(d, c, bin, bout);
	case ML_OP_Q8_GLOBAL_AVG_POOL: return run_gap(d, c, bin, bout);
	default: return ml_opfail(c, ML_ENOTSUP, "no OpenCL int8 kernel");
	}
}
