/*
 * loss.c: definitions of the loss op family: NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss. Both take scores [N, C, d1..dk] and integer
 * targets [N, d1..dk], an optional per-class weight [C], and reduce the
 * per-element losses by none, sum or (weighted) mean.
 */
#include "ops/loss.h"

int
ml_loss_reduction(struct ml_opctx *c, enum ml_loss_red *r)
{
	const char *s = ml_attr_str(c->node, "reduction", "mean");

	if (strcmp(s, "none") == 0)
		*r = ML_RED_NONE;
	else if (strcmp(s, "sum") == 0)
		*r = ML_RED_SUM;
	else if (strcmp(s, "mean") == 0)
		*r = ML_RED_MEAN;
	else
		return ml_opfail(c, ML_EINVAL, "reduction '%s' is not none, sum or mean", s);
	return 0;
}

static bool
loss_float(enum ml_dtype t)
{
	return t == ML_UNDEF || t == ML_F32 || t == ML_F64 || t == ML_F16 || t == ML_BF16;
}

/*
 * infer_loss: checks shared by both ops; out[0] is the loss, and for
 * SoftmaxCrossEntropyLoss out[1] (log_prob) takes the scores' shape.
 */
static int
infer_loss(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0), *t = ML_IN(c, 1), *w = ML_IN(c, 2);
	enum ml_loss_red red;

	if (x == NULL || t == NULL)
		return ml_opfail(c, ML_EINVAL, "scores and target inputs are required");
	ML_TRY(ml_loss_reduction(c, &red));
	if (!loss_float(x->dtype))
		return ml_opfail(c, ML_ENOTSUP, "scores dtype %s is not supported",
				 ml_dtype_name(x->dtype));
	if (t->dtype != ML_UNDEF && t->dtype != ML_I32 && t->dtype != ML_I64)
		return ml_opfail(c, ML_EINVAL, "target must be int32 or int64, not %s",
				 ml_dtype_name(t->dtype));
	if (w != NULL) {
		if (w->dtype != ML_UNDEF && x->dtype != ML_UNDEF && w->dtype != x->dtype)
			return ml_opfail(c, ML_EINVAL, "weight dtype %s differs from scores' %s",
					 ml_dtype_name(w->dtype), ml_dtype_name(x->dtype));
		if (w->rank >= 0 && w->rank != 1)
			return ml_opfail(c, ML_EINVAL, "weight must be 1-D, not rank %d", w->rank);
	}
	if (x->rank >= 0 && x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "scores must have rank 2 or more, not %d", x->rank);
	if (x->rank >= 0 && t->rank >= 0 && t->rank != x->rank - 1)
		return ml_opfail(c, ML_EINVAL, "target has rank %d, scores %d (expected %d)",
				 t->rank, x->rank, x->rank - 1);
	if (x->rank >= 0 && w != NULL && w->rank == 1 && w->dims[0] >= 0 && x->dims[1] >= 0 &&
	    w->dims[0] != x->dims[1])
		return ml_opfail(c, ML_EINVAL, "weight has %lld classes, scores %lld",
				 (long long)w->dims[0], (long long)x->dims[1]);
	/* the loss per element has the target's shape: scores' without the class dim */
	int64_t dims[ML_MAX_RANK];
	int rank = -1;
	if (x->rank >= 0 && t->rank >= 0) {
		rank = t->rank;
		for (int d = 0; d < rank; d++) {
			int64_t a = x->dims[d == 0 ? 0 : d + 1], b = t->dims[d];
			if (a >= 0 && b >= 0 && a != b)
				return ml_opfail(c, ML_EINVAL,
						 "target dim %d is %lld, scores' is %lld", d,
						 (long long)b, (long long)a);
			dims[d] = a >= 0 ? a : b;
		}
	} else if (x->rank >= 0) {
		rank = x->rank - 1;
		dims[0] = x->dims[0];
		for (int d = 1; d < rank; d++)
			dims[d] = x->dims[d + 1];
	} else if (t->rank >= 0) {
		rank = t->rank;
		memcpy(dims, t->dims, sizeof(int64_t) * (size_t)rank);
	}
	enum ml_dtype dt = x->dtype;
	if (red != ML_RED_NONE)
		ml_set_shape(c->out[0], dt, 0, NULL);
	else if (rank >= 0)
		ml_set_shape(c->out[0], dt, rank, dims);
	else
		c->out[0]->dtype = dt;
	if (c->n_out > 1) {
		if (c->node->op != ML_OP_SCE_LOSS)
			return ml_opfail(c, ML_EINVAL, "has only one output");
		ml_set_shape(c->out[1], dt, x->rank, x->dims);
	}
	return 0;
}

/* About three operations per score for the softmax, one per element for the loss. */
static int64_t
flops_loss(const struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	int64_t n = x != NULL ? ml_tval_numel(x) : -1;

	if (n < 0)
		return 0;
	return c->node->op == ML_OP_SCE_LOSS ? 4 * n : n / ML_MAX(1, x->dims[1]);
}

const struct ml_opdef ml_opdefs_loss[] = {
	{ ML_OP_NLL_LOSS, 2, 3, 1, 1, infer_loss, flops_loss },
	{ ML_OP_SCE_LOSS, 2, 3, 1, 2, infer_loss, flops_loss },
	{ .op = ML_OP_NONE },
};
