/*
 * train.c: definitions of the train family, the optimizer updates of the
 * ONNX preview training domain: Adagrad, Momentum and Adam. Each takes a
 * learning rate R and a step count T, then n tensors X, their gradients G
 * and their optimizer state, and gives the updated X and state.
 */
#include "ops/train.h"

/* req_float: attribute name, which the spec requires, into *v. */
static int
req_float(struct ml_opctx *c, const char *name, double *v)
{
	if (ml_attr_find(c->node, name) == NULL)
		return ml_opfail(c, ML_EINVAL, "attribute '%s' is required", name);
	*v = ml_attr_float(c->node, name, 0);
	return 0;
}

int
ml_train_attrs(struct ml_opctx *c, struct ml_train_attrs *a)
{
	const struct ml_node *n = c->node;

	memset(a, 0, sizeof *a);
	switch (n->op) {
	case ML_OP_ADAGRAD:
		a->decay_factor = ml_attr_float(n, "decay_factor", 0);
		a->epsilon = ml_attr_float(n, "epsilon", 1e-6);
		a->norm_coefficient = ml_attr_float(n, "norm_coefficient", 0);
		a->per_in = 3;
		a->per_out = 2;
		break;
	case ML_OP_MOMENTUM: {
		ML_TRY(req_float(c, "alpha", &a->alpha));
		ML_TRY(req_float(c, "beta", &a->beta));
		ML_TRY(req_float(c, "norm_coefficient", &a->norm_coefficient));
		if (ml_attr_find(n, "mode") == NULL)
			return ml_opfail(c, ML_EINVAL, "attribute 'mode' is required");
		const char *m = ml_attr_str(n, "mode", "");
		if (strcmp(m, "nesterov") == 0)
			a->nesterov = true;
		else if (strcmp(m, "standard") != 0)
			return ml_opfail(c, ML_EINVAL, "mode '%s' is not standard or nesterov", m);
		a->per_in = 3;
		a->per_out = 2;
		break;
	}
	case ML_OP_ADAM:
		a->alpha = ml_attr_float(n, "alpha", 0.9);
		a->beta = ml_attr_float(n, "beta", 0.999);
		a->epsilon = ml_attr_float(n, "epsilon", 1e-6);
		a->norm_coefficient = ml_attr_float(n, "norm_coefficient", 0);
		a->norm_coefficient_post = ml_attr_float(n, "norm_coefficient_post", 0);
		a->per_in = 4;
		a->per_out = 3;
		break;
	default:
		return ml_opfail(c, ML_EINVAL, "not an optimizer op");
	}
	int k = c->n_in - 2;
	if (k < a->per_in || k % a->per_in != 0)
		return ml_opfail(c, ML_EINVAL, "has %d inputs; expected R, T and %d per tensor",
				 c->n_in, a->per_in);
	a->groups = k / a->per_in;
	if (c->n_out != a->groups * a->per_out)
		return ml_opfail(c, ML_EINVAL, "has %d outputs; expected %d for %d tensors",
				 c->n_out, a->groups * a->per_out, a->groups);
	return 0;
}

/* same_shape: whether a and b can have one shape, as far as known. */
static bool
same_shape(const struct ml_tval *a, const struct ml_tval *b)
{
	if (a->rank < 0 || b->rank < 0)
		return true;
	if (a->rank != b->rank)
		return false;
	for (int d = 0; d < a->rank; d++)
		if (a->dims[d] >= 0 && b->dims[d] >= 0 && a->dims[d] != b->dims[d])
			return false;
	return true;
}

/* check_scalar: R and T hold one value (a scalar; [1] is accepted too). */
static int
check_scalar(struct ml_opctx *c, const struct ml_tval *t, const char *what)
{
	int64_t k = ml_tval_numel(t);

	if (t->rank > 1 || (k >= 0 && k != 1))
		return ml_opfail(c, ML_EINVAL, "%s must be a scalar", what);
	return 0;
}

/*
 * infer_train: checks the groups' inputs; the updated X_i takes X_i's
 * shape and each updated state its input's shape.
 */
static int
infer_train(struct ml_opctx *c)
{
	struct ml_train_attrs a;
	const struct ml_tval *r = ML_IN(c, 0), *t = ML_IN(c, 1);

	ML_TRY(ml_train_attrs(c, &a));
	if (r == NULL || t == NULL)
		return ml_opfail(c, ML_EINVAL, "inputs R and T are required");
	if (r->dtype != ML_UNDEF && r->dtype != ML_F32 && r->dtype != ML_F64)
		return ml_opfail(c, ML_ENOTSUP, "R dtype %s is not supported",
				 ml_dtype_name(r->dtype));
	if (t->dtype != ML_UNDEF && t->dtype != ML_I64)
		return ml_opfail(c, ML_EINVAL, "T must be int64, not %s", ml_dtype_name(t->dtype));
	ML_TRY(check_scalar(c, r, "R"));
	ML_TRY(check_scalar(c, t, "T"));
	const struct ml_tval *x0 = ML_IN(c, 2);
	if (x0 == NULL)
		return ml_opfail(c, ML_EINVAL, "input X_1 is required");
	enum ml_dtype dt = x0->dtype;
	if (dt != ML_UNDEF && dt != ML_F32 && dt != ML_F64)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(dt));
	for (int i = 0; i < a.groups; i++) {
		const struct ml_tval *x = ML_IN(c, 2 + i);
		for (int s = 0; s < a.per_in; s++) {
			const struct ml_tval *v = ML_IN(c, 2 + s * a.groups + i);
			if (v == NULL)
				return ml_opfail(c, ML_EINVAL, "input %d is required",
						 2 + s * a.groups + i);
			if (v->dtype != ML_UNDEF && dt != ML_UNDEF && v->dtype != dt)
				return ml_opfail(c, ML_EINVAL, "input %d has dtype %s, X_1 %s",
						 2 + s * a.groups + i, ml_dtype_name(v->dtype),
						 ml_dtype_name(dt));
			if (!same_shape(v, x))
				return ml_opfail(c, ML_EINVAL,
						 "input %d and X_%d differ in shape",
						 2 + s * a.groups + i, i + 1);
		}
	}
	/* outputs: X_new..., then each state's new values, in input order */
	for (int o = 0; o < a.per_out; o++)
		for (int i = 0; i < a.groups; i++) {
			int src = 2 + (o == 0 ? 0 : o + 1) * a.groups + i;
			const struct ml_tval *v = ML_IN(c, src);
			if (v->rank >= 0)
				ml_set_shape(c->out[o * a.groups + i], dt, v->rank, v->dims);
			else
				c->out[o * a.groups + i]->dtype = dt;
		}
	return 0;
}

/* A handful of operations per element of every X. */
static int64_t
flops_train(const struct ml_opctx *c)
{
	int64_t sum = 0;

	/* without the group count, count every input past R and T once */
	for (int i = 2; i < c->n_in; i++) {
		int64_t k = c->in[i] != NULL ? ml_tval_numel(c->in[i]) : -1;
		if (k < 0)
			return 0;
		sum += 2 * k;
	}
	return sum;
}

const struct ml_opdef ml_opdefs_train[] = {
	{ ML_OP_ADAGRAD, 5, -1, 2, -1, infer_train, flops_train },
	{ ML_OP_MOMENTUM, 5, -1, 2, -1, infer_train, flops_train },
	{ ML_OP_ADAM, 6, -1, 3, -1, infer_train, flops_train },
	{ .op = ML_OP_NONE },
};
