/*
 * quant.c: definitions of the quant op family: QuantizeLinear,
 * DequantizeLinear and DynamicQuantizeLinear (8-bit, per tensor or per
 * axis), and the integer products MatMulInteger, ConvInteger,
 * QLinearMatMul and QLinearConv, which accumulate in int32.
 */
#include "ops/quant.h"

static bool
is_q8(enum ml_dtype t)
{
	return t == ML_U8 || t == ML_I8;
}

static int
need(struct ml_opctx *c, int i, const char *what)
{
	if (ML_IN(c, i) == NULL)
		return ml_opfail(c, ML_EINVAL, "input %d (%s) is required", i, what);
	return 0;
}

/* check_q8: input i, when present with a known dtype, is uint8 or int8. */
static int
check_q8(struct ml_opctx *c, int i, const char *what)
{
	const struct ml_tval *t = ML_IN(c, i);

	if (t == NULL || t->dtype == ML_UNDEF || is_q8(t->dtype))
		return 0;
	return ml_opfail(c, ML_ENOTSUP, "%s must be uint8 or int8, not %s", what,
			 ml_dtype_name(t->dtype));
}

/* check_scale: input i, when present, is a float scalar or vector. */
static int
check_scale(struct ml_opctx *c, int i, const char *what)
{
	const struct ml_tval *t = ML_IN(c, i);

	if (t == NULL)
		return 0;
	if (t->dtype != ML_UNDEF && t->dtype != ML_F32 && t->dtype != ML_F16)
		return ml_opfail(c, ML_ENOTSUP, "%s must be float, not %s", what,
				 ml_dtype_name(t->dtype));
	if (t->rank > 1)
		return ml_opfail(c, ML_EINVAL, "%s must be a scalar or a vector", what);
	return 0;
}

/* check_same: inputs i and j (when present and known) share their dtype. */
static int
check_same(struct ml_opctx *c, int i, int j)
{
	const struct ml_tval *a = ML_IN(c, i), *b = ML_IN(c, j);

	if (a == NULL || b == NULL || a->dtype == ML_UNDEF || b->dtype == ML_UNDEF ||
	    a->dtype == b->dtype)
		return 0;
	return ml_opfail(c, ML_EINVAL, "inputs %d and %d differ in dtype (%s, %s)", i, j,
			 ml_dtype_name(a->dtype), ml_dtype_name(b->dtype));
}

/*
 * check_axis_params: a per-axis scale (a vector of more than one value)
 * needs an axis of x whose size it matches; opset 10 has no axis and
 * allows a scalar only.
 */
static int
check_axis_params(struct ml_opctx *c, const struct ml_tval *x, const struct ml_tval *s)
{
	int axis;

	if (s == NULL || s->rank != 1 || s->dims[0] == 1)
		return 0;
	if (c->opset < 13)
		return ml_opfail(c, ML_EINVAL, "a per-axis scale needs opset 13");
	if (x->rank < 0)
		return 0;
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 1), x->rank, &axis));
	if (s->dims[0] >= 0 && x->dims[axis] >= 0 && s->dims[0] != x->dims[axis])
		return ml_opfail(c, ML_EINVAL, "the scale has %lld values, axis %d has size %lld",
				 (long long)s->dims[0], axis, (long long)x->dims[axis]);
	return 0;
}

/* QuantizeLinear: y = saturate(round(x / scale) + zero_point), as the zero point's type. */
static int
infer_quantize(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0), *s = ML_IN(c, 1), *z = ML_IN(c, 2);

	ML_TRY(need(c, 0, "x"));
	ML_TRY(need(c, 1, "y_scale"));
	if (x->dtype != ML_UNDEF && x->dtype != ML_F32 && x->dtype != ML_F16 &&
	    x->dtype != ML_F64 && x->dtype != ML_I32)
		return ml_opfail(c, ML_ENOTSUP, "x dtype %s is not supported",
				 ml_dtype_name(x->dtype));
	ML_TRY(check_scale(c, 1, "y_scale"));
	ML_TRY(check_q8(c, 2, "y_zero_point"));
	if (z != NULL && s->rank >= 0 && z->rank >= 0 && z->rank != s->rank)
		return ml_opfail(c, ML_EINVAL, "y_zero_point and y_scale differ in shape");
	ML_TRY(check_axis_params(c, x, s));
	ml_set_shape(c->out[0], z != NULL && z->dtype != ML_UNDEF ? z->dtype : ML_U8, x->rank,
		     x->dims);
	return 0;
}

/* DequantizeLinear: y = (x - zero_point) * scale, as the scale's type. */
static int
infer_dequantize(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0), *s = ML_IN(c, 1);

	ML_TRY(need(c, 0, "x"));
	ML_TRY(need(c, 1, "x_scale"));
	if (x->dtype != ML_UNDEF && !is_q8(x->dtype) && x->dtype != ML_I32)
		return ml_opfail(c, ML_ENOTSUP, "x dtype %s is not supported",
				 ml_dtype_name(x->dtype));
	ML_TRY(check_scale(c, 1, "x_scale"));
	ML_TRY(check_same(c, 0, 2));
	ML_TRY(check_axis_params(c, x, s));
	ml_set_shape(c->out[0], s->dtype != ML_UNDEF ? s->dtype : ML_F32, x->rank, x->dims);
	return 0;
}

/* DynamicQuantizeLinear: y uint8 like x, and scalar y_scale (f32) and y_zero_point (uint8). */
static int
infer_dynquant(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);

	ML_TRY(need(c, 0, "x"));
	if (x->dtype != ML_UNDEF && x->dtype != ML_F32 && x->dtype != ML_F16)
		return ml_opfail(c, ML_ENOTSUP, "x dtype %s is not supported",
				 ml_dtype_name(x->dtype));
	ml_set_shape(c->out[0], ML_U8, x->rank, x->dims);
	if (c->n_out > 1)
		ml_set_shape(c->out[1], ML_F32, 0, NULL);
	if (c->n_out > 2)
		ml_set_shape(c->out[2], ML_U8, 0, NULL);
	return 0;
}

static int
infer_matmul_integer(struct ml_opctx *c)
{
	ML_TRY(need(c, 0, "A"));
	ML_TRY(need(c, 1, "B"));
	ML_TRY(check_q8(c, 0, "A"));
	ML_TRY(check_q8(c, 1, "B"));
	ML_TRY(check_same(c, 0, 2));
	ML_TRY(check_same(c, 1, 3));
	return ml_matmul_shape(c, c->in[0], c->in[1], ML_I32, c->out[0]);
}

/* QLinearMatMul: (a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp). */
static int
infer_qlinear_matmul(struct ml_opctx *c)
{
	static const char *const names[8] = { "a", "a_scale", "a_zero_point", "b", "b_scale",
					       "b_zero_point", "y_scale", "y_zero_point" };
	for (int i = 0; i < 8; i++)
		ML_TRY(need(c, i, names[i]));
	ML_TRY(check_q8(c, 0, "a"));
	ML_TRY(check_q8(c, 3, "b"));
	ML_TRY(check_q8(c, 7, "y_zero_point"));
	ML_TRY(check_same(c, 0, 2));
	ML_TRY(check_same(c, 3, 5));
	ML_TRY(check_scale(c, 1, "a_scale"));
	ML_TRY(check_scale(c, 4, "b_scale"));
	ML_TRY(check_scale(c, 6, "y_scale"));
	enum ml_dtype dt = c->in[7]->dtype != ML_UNDEF ? c->in[7]->dtype : ML_U8;
	return ml_matmul_shape(c, c->in[0], c->in[3], dt, c->out[0]);
}

void
ml_qconv_view(struct ml_opctx *c, struct ml_qconv_view *v)
{
	bool ql = c->node->op == ML_OP_QLINEAR_CONV;

	v->node = *c->node;
	v->node.op = ML_OP_CONV;
	v->in[0] = ML_IN(c, 0);
	v->in[1] = ML_IN(c, ql ? 3 : 1);
	v->c = *c;
	v->c.node = &v->node;
	v->c.in = v->in;
	v->c.n_in = 2;
}

/* ConvInteger (x, w, x_zp, w_zp) and QLinearConv (x, xs, xz, w, ws, wz, ys, yz, bias). */
static int
infer_qconv(struct ml_opctx *c)
{
	bool ql = c->node->op == ML_OP_QLINEAR_CONV;
	int wi = ql ? 3 : 1;
	struct ml_qconv_view v;
	struct ml_conv_geom g;
	enum ml_dtype dt = ML_I32;

	ML_TRY(need(c, 0, "x"));
	ML_TRY(need(c, wi, "w"));
	ML_TRY(check_q8(c, 0, "x"));
	ML_TRY(check_q8(c, wi, "w"));
	if (ql) {
		static const char *const names[8] = { "x", "x_scale", "x_zero_point", "w", "w_scale",
						       "w_zero_point", "y_scale", "y_zero_point" };
		const struct ml_tval *b = ML_IN(c, 8);
		for (int i = 0; i < 8; i++)
			ML_TRY(need(c, i, names[i]));
		ML_TRY(check_scale(c, 1, "x_scale"));
		ML_TRY(check_scale(c, 4, "w_scale"));
		ML_TRY(check_scale(c, 6, "y_scale"));
		ML_TRY(check_q8(c, 7, "y_zero_point"));
		ML_TRY(check_same(c, 0, 2));
		ML_TRY(check_same(c, 3, 5));
		if (b != NULL && b->dtype != ML_UNDEF && b->dtype != ML_I32)
			return ml_opfail(c, ML_EINVAL, "B must be int32, not %s",
					 ml_dtype_name(b->dtype));
		if (b != NULL && b->rank > 1)
			return ml_opfail(c, ML_EINVAL, "B must be a vector");
		dt = c->in[7]->dtype != ML_UNDEF ? c->in[7]->dtype : ML_U8;
	} else {
		ML_TRY(check_same(c, 0, 2));
		ML_TRY(check_same(c, 1, 3));
	}
	ml_qconv_view(c, &v);
	ML_TRY(ml_conv_geom(&v.c, &g));
	if (g.nsp == 0) {
		c->out[0]->dtype = dt;
		c->out[0]->rank = -1;
		return 0;
	}
	int64_t dims[ML_MAX_RANK] = { g.n, g.cout };
	memcpy(dims + 2, g.out, sizeof(int64_t) * (size_t)g.nsp);
	ml_set_shape(c->out[0], dt, g.nsp + 2, dims);
	return 0;
}

static int64_t
flops_mm(const struct ml_opctx *c)
{
	const struct ml_tval *a = ML_IN(c, 0), *o = c->out[0];
	int64_t n = ml_tval_numel(o), r;

	if (a == NULL || a->rank < 1 || n < 0 || a->dims[a->rank - 1] < 0 ||
	    !ml_mul_ok(n, 2 * a->dims[a->rank - 1], &r))
		return 0;
	return r;
}

static int64_t
flops_qconv(const struct ml_opctx *c)
{
	const struct ml_tval *w = ML_IN(c, c->node->op == ML_OP_QLINEAR_CONV ? 3 : 1);
	int64_t n = ml_tval_numel(c->out[0]), per, r;

	if (w == NULL || w->rank < 1 || n < 0 || w->dims[0] <= 0)
		return 0;
	per = ml_tval_numel(w);
	if (per < 0 || !ml_mul_ok(n, 2 * (per / w->dims[0]), &r))
		return 0;
	return r;
}

/*
 * FakeQuant (internal, quantisation-aware training): y = (clamp(round(x /
 * scale) + zero_point, qmin, qmax) - zero_point) * scale, f32 like x.
 * With scale (and optional zero_point, any numeric type) inputs: per
 * tensor, or per channel along attribute axis (default 0) for a vector.
 * Without a scale input: symmetric (zero point 0), the scale computed from
 * the data, max |x| / qmax, per channel along axis when the attribute is
 * set, else per tensor (the weights of lib/quant/qat.c).
 */
static int
infer_fakequant(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0), *s = ML_IN(c, 1), *z = ML_IN(c, 2);
	int64_t qmin = ml_attr_int(c->node, "qmin", 0), qmax = ml_attr_int(c->node, "qmax", 255);

	ML_TRY(need(c, 0, "x"));
	if (x->dtype != ML_UNDEF && x->dtype != ML_F32)
		return ml_opfail(c, ML_ENOTSUP, "x dtype %s is not supported",
				 ml_dtype_name(x->dtype));
	if (qmin >= qmax || qmin < -65536 || qmax > 65536)
		return ml_opfail(c, ML_EINVAL, "qmin %lld and qmax %lld are not a range",
				 (long long)qmin, (long long)qmax);
	if (s == NULL && z != NULL)
		return ml_opfail(c, ML_EINVAL, "a zero point needs a scale");
	if (s == NULL && qmin > -1)
		return ml_opfail(c, ML_EINVAL, "without a scale input qmin must be negative");
	ML_TRY(check_scale(c, 1, "scale"));
	if (s != NULL && s->dtype != ML_UNDEF && s->dtype != ML_F32)
		return ml_opfail(c, ML_ENOTSUP, "scale must be f32");
	if (z != NULL && z->dtype != ML_UNDEF &&
	    (z->dtype == ML_BOOL || z->dtype == ML_STRING || z->rank > 1))
		return ml_opfail(c, ML_EINVAL, "zero_point must be a numeric scalar or vector");
	if (x->rank >= 0 && (ml_attr_find(c->node, "axis") != NULL || (s != NULL && s->rank == 1))) {
		int axis;
		if (x->rank == 0)
			return ml_opfail(c, ML_EINVAL, "a per-channel FakeQuant needs x of rank >= 1");
		ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &axis));
		if (s != NULL && s->rank == 1 && s->dims[0] > 1 && x->dims[axis] >= 0 &&
		    s->dims[0] != x->dims[axis])
			return ml_opfail(c, ML_EINVAL, "scale has %lld values for an axis of %lld",
					 (long long)s->dims[0], (long long)x->dims[axis]);
	}
	ml_set_shape(c->out[0], ML_F32, x->rank, x->dims);
	return 0;
}

const struct ml_opdef ml_opdefs_quant[] = {
	{ ML_OP_QUANTIZE_LINEAR, 2, 3, 1, 1, infer_quantize, NULL },
	{ ML_OP_DEQUANTIZE_LINEAR, 2, 3, 1, 1, infer_dequantize, NULL },
	{ ML_OP_DYNAMIC_QUANTIZE_LINEAR, 1, 1, 3, 3, infer_dynquant, NULL },
	{ ML_OP_MATMUL_INTEGER, 2, 4, 1, 1, infer_matmul_integer, flops_mm },
	{ ML_OP_CONV_INTEGER, 2, 4, 1, 1, infer_qconv, flops_qconv },
	{ ML_OP_QLINEAR_MATMUL, 8, 8, 1, 1, infer_qlinear_matmul, flops_mm },
	{ ML_OP_QLINEAR_CONV, 8, 9, 1, 1, infer_qconv, flops_qconv },
	{ ML_OP_Q8_QUANTIZE, 1, 1, 1, 1, ml_q8_infer_quant, NULL },
	{ ML_OP_Q8_DEQUANTIZE, 1, 1, 1, 1, ml_q8_infer_dequant, NULL },
	{ ML_OP_Q8_CONV, 4, 4, 1, 1, ml_q8_infer_conv, ml_q8_flops_conv },
	{ ML_OP_Q8_ADD, 2, 2, 1, 1, ml_q8_infer_add, NULL },
	{ ML_OP_Q8_MAX_POOL, 1, 1, 1, 1, ml_q8_infer_maxpool, NULL },
	{ ML_OP_Q8_GLOBAL_AVG_POOL, 1, 1, 1, 1, ml_q8_infer_gap, NULL },
	{ ML_OP_FAKE_QUANT, 1, 3, 1, 1, infer_fakequant, NULL },
	{ .op = ML_OP_NONE },
};
