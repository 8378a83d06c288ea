/*
 * reduce.c: definitions of the reduce op family: the Reduce* ops, ArgMax
 * and ArgMin, the softmax family, TopK and CumSum. The axis rules shared
 * with the kernels (ml_reduce_axes, ml_softmax_view) live here too, so
 * inference and execution can never disagree about them.
 */
#include "ml_impl.h"
#include "ops/reduce.h"

static bool
num_dtype(enum ml_dtype t)
{
	return t == ML_UNDEF || ml_dtype_is_float(t) || ml_dtype_is_int(t);
}

static int
check_num(struct ml_opctx *c, const struct ml_tval *t, bool float_only)
{
	if (float_only ? t->dtype == ML_UNDEF || ml_dtype_is_float(t->dtype) : num_dtype(t->dtype))
		return 0;
	return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(t->dtype));
}

/*
 * ml_reduce_axes: which axes of x a Reduce* node reduces. The axes come
 * from input 1 when present (ReduceSum from opset 13, the others from 18),
 * else from the attribute. No axes means all axes, or none at all
 * (*noop) with noop_with_empty_axes=1. *known is false when the axes input
 * has no value yet (static inference); mask is then left clear.
 */
int
ml_reduce_axes(struct ml_opctx *c, int rank, bool *mask, bool *known, bool *noop)
{
	const struct ml_tval *a = ML_IN(c, 1);
	int64_t n = 0, buf[ML_MAX_RANK];
	const int64_t *ax = NULL;

	*known = true;
	*noop = false;
	for (int d = 0; d < ML_MAX_RANK; d++)
		mask[d] = false;
	if (a != NULL) {
		if (a->dtype != ML_I64 && a->dtype != ML_I32 && a->dtype != ML_UNDEF)
			return ml_opfail(c, ML_EINVAL, "axes must be int64");
		n = ml_tval_numel(a);
		if (a->data == NULL || n < 0) {
			*known = false;
			return 0;
		}
		if (n > ML_MAX_RANK)
			return ml_opfail(c, ML_EINVAL, "too many axes");
		for (int64_t i = 0; i < n; i++)
			buf[i] = ml_get_i64(a->data, a->dtype, i);
		ax = buf;
	} else {
		int k = ml_attr_ints(c->node, "axes", &ax);
		n = k < 0 ? 0 : k;
	}
	if (n == 0) {
		if (ml_attr_int(c->node, "noop_with_empty_axes", 0) != 0)
			*noop = true;
		else
			for (int d = 0; d < rank; d++)
				mask[d] = true;
		return 0;
	}
	for (int64_t i = 0; i < n; i++) {
		int d;
		ML_TRY(ml_norm_axis(c, ax[i], rank, &d));
		if (mask[d])
			return ml_opfail(c, ML_EINVAL, "axis %lld is repeated", (long long)ax[i]);
		mask[d] = true;
	}
	return 0;
}

static int
infer_reduce(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	struct ml_tval *o = c->out[0];
	bool mask[ML_MAX_RANK], known, noop;
	bool keep = ml_attr_int(c->node, "keepdims", 1) != 0;

	if (x == NULL)
		return ml_opfail(c, ML_EINVAL, "input 0 is required");
	ML_TRY(check_num(c, x, false));
	o->dtype = x->dtype;
	if (x->rank < 0) {
		o->rank = -1;
		return 0;
	}
	ML_TRY(ml_reduce_axes(c, x->rank, mask, &known, &noop));
	if (noop) {
		ml_set_shape(o, x->dtype, x->rank, x->dims);
		return 0;
	}
	if (!known) {
		/* the rank is known only when keeping dims or when the axis count is known */
		int64_t n = ml_tval_numel(c->in[1]);
		if (keep)
			ml_set_shape(o, x->dtype, x->rank, NULL);
		else if (n > 0 && n <= x->rank)
			ml_set_shape(o, x->dtype, x->rank - (int)n, NULL);
		else
			o->rank = -1;
		return 0;
	}
	int r = 0;
	for (int d = 0; d < x->rank; d++) {
		if (!mask[d])
			o->dims[r++] = x->dims[d];
		else if (keep)
			o->dims[r++] = 1;
	}
	o->rank = r;
	return 0;
}

/* ArgMax/ArgMin: one axis, int64 indices. */
static int
infer_arg(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	struct ml_tval *o = c->out[0];
	bool keep = ml_attr_int(c->node, "keepdims", 1) != 0;
	int axis;

	if (x == NULL)
		return ml_opfail(c, ML_EINVAL, "input 0 is required");
	ML_TRY(check_num(c, x, false));
	o->dtype = ML_I64;
	if (x->rank < 0) {
		o->rank = -1;
		return 0;
	}
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &axis));
	int r = 0;
	for (int d = 0; d < x->rank; d++) {
		if (d != axis)
			o->dims[r++] = x->dims[d];
		else if (keep)
			o->dims[r++] = 1;
	}
	o->rank = r;
	return 0;
}

/*
 * ml_softmax_view: the [outer, n, inner] view of x that Softmax,
 * LogSoftmax and Hardmax normalise over n. Before opset 13, x is flattened
 * to 2-D at axis (default 1), so inner is 1; from 13 it is one axis
 * (default -1). The sizes are -1 when a dim is unknown.
 */
int
ml_softmax_view(struct ml_opctx *c, const struct ml_tval *x, int64_t *outer, int64_t *n,
		int64_t *inner)
{
	bool old = c->opset < 13;
	int axis;
	int64_t v[3] = { 1, 1, 1 };

	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", old ? 1 : -1), x->rank, &axis));
	if (x->rank == 0)
		axis = 0;
	for (int d = 0; d < x->rank; d++) {
		int k = d < axis ? 0 : d == axis ? 1 : old ? 1 : 2;
		if (v[k] >= 0 && x->dims[d] >= 0 && !ml_mul_ok(v[k], x->dims[d], &v[k]))
			return ml_opfail(c, ML_EINVAL, "tensor size overflows");
		if (x->dims[d] < 0)
			v[k] = -1;
	}
	*outer = v[0];
	*n = v[1];
	*inner = v[2];
	return 0;
}

static int
infer_softmax(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	int64_t o, n, i;

	if (x == NULL)
		return ml_opfail(c, ML_EINVAL, "input 0 is required");
	ML_TRY(check_num(c, x, true));
	if (x->rank >= 0)
		ML_TRY(ml_softmax_view(c, x, &o, &n, &i));
	return ml_infer_same(c);
}

/*
 * ml_topk_k: the k of a TopK node: input 1 from opset 10, the attribute
 * before. -1 when the input has no value yet.
 */
int
ml_topk_k(struct ml_opctx *c, int64_t *k)
{
	const struct ml_tval *kt = ML_IN(c, 1);

	if (kt == NULL) {
		*k = ml_attr_int(c->node, "k", -1);
		if (*k < 0)
			return ml_opfail(c, ML_EINVAL, "k is missing");
		return 0;
	}
	if (kt->dtype != ML_I64 && kt->dtype != ML_I32 && kt->dtype != ML_UNDEF)
		return ml_opfail(c, ML_EINVAL, "k must be int64");
	*k = -1;
	if (kt->data == NULL)
		return 0;
	if (ml_tval_numel(kt) != 1)
		return ml_opfail(c, ML_EINVAL, "k must hold one value");
	*k = ml_get_i64(kt->data, kt->dtype, 0);
	if (*k < 0)
		return ml_opfail(c, ML_EINVAL, "k is negative");
	return 0;
}

static int
infer_topk(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	int64_t k;
	int axis;

	if (x == NULL)
		return ml_opfail(c, ML_EINVAL, "input 0 is required");
	ML_TRY(check_num(c, x, false));
	ML_TRY(ml_topk_k(c, &k));
	ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
	if (c->n_out > 1)
		ml_set_shape(c->out[1], ML_I64, x->rank, x->dims);
	if (x->rank < 0)
		return 0;
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", -1), x->rank, &axis));
	if (k >= 0 && x->dims[axis] >= 0 && k > x->dims[axis])
		return ml_opfail(c, ML_EINVAL, "k %lld is larger than the axis (%lld)", (long long)k,
				 (long long)x->dims[axis]);
	for (int j = 0; j < c->n_out && j < 2; j++)
		c->out[j]->dims[axis] = k;
	return 0;
}

/* ml_cumsum_axis: CumSum's axis input, normalised; -1 when it has no value yet. */
int
ml_cumsum_axis(struct ml_opctx *c, int rank, int *axis)
{
	const struct ml_tval *a = ML_IN(c, 1);

	*axis = -1;
	if (a == NULL)
		return ml_opfail(c, ML_EINVAL, "input 1 (axis) is required");
	if (a->dtype != ML_I64 && a->dtype != ML_I32 && a->dtype != ML_UNDEF)
		return ml_opfail(c, ML_EINVAL, "axis must be int32 or int64");
	if (a->data == NULL || rank < 0)
		return 0;
	if (ml_tval_numel(a) != 1)
		return ml_opfail(c, ML_EINVAL, "axis must hold one value");
	return ml_norm_axis(c, ml_get_i64(a->data, a->dtype, 0), rank, axis);
}

static int
infer_cumsum(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	int axis;

	if (x == NULL)
		return ml_opfail(c, ML_EINVAL, "input 0 is required");
	ML_TRY(check_num(c, x, false));
	ML_TRY(ml_cumsum_axis(c, x->rank, &axis));
	return ml_infer_same(c);
}

/* Reductions and scans read each input element once. */
static int64_t
flops_in(const struct ml_opctx *c)
{
	int64_t n = c->in[0] != NULL ? ml_tval_numel(c->in[0]) : -1;
	return n < 0 ? 0 : n;
}

/* Softmax: a max, an exp, a sum and a scale per element. */
static int64_t
flops_softmax(const struct ml_opctx *c)
{
	int64_t n = c->in[0] != NULL ? ml_tval_numel(c->in[0]) : -1;
	return n < 0 ? 0 : n * 5;
}

/* the axes (input 1, opset 18; ReduceSum 13) are read on the host */
#define RED(id) { ML_OP_##id, 1, 2, 1, 1, infer_reduce, flops_in, .host_in = ML_HOST_REST }

const struct ml_opdef ml_opdefs_reduce[] = {
	RED(REDUCE_SUM), RED(REDUCE_MEAN), RED(REDUCE_MAX), RED(REDUCE_MIN), RED(REDUCE_PROD),
	RED(REDUCE_L1), RED(REDUCE_L2), RED(REDUCE_LOG_SUM), RED(REDUCE_LOG_SUM_EXP),
	RED(REDUCE_SUM_SQUARE),
	{ ML_OP_ARGMAX, 1, 1, 1, 1, infer_arg, flops_in },
	{ ML_OP_ARGMIN, 1, 1, 1, 1, infer_arg, flops_in },
	{ ML_OP_SOFTMAX, 1, 1, 1, 1, infer_softmax, flops_softmax },
	{ ML_OP_LOG_SOFTMAX, 1, 1, 1, 1, infer_softmax, flops_softmax },
	{ ML_OP_HARDMAX, 1, 1, 1, 1, infer_softmax, flops_in },
	{ ML_OP_TOPK, 1, 2, 2, 2, infer_topk, flops_in, .host_in = ML_HOST_REST },
	{ ML_OP_CUMSUM, 2, 2, 1, 1, infer_cumsum, flops_in, .host_in = ML_HOST_REST },
	{ .op = ML_OP_NONE },
};
