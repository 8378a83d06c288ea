/*
 * loss_grad.c: gradient rules of the loss family (lib/ops/gradrule.h has the
 * rule interface; the grad family's BCEWithLogitsLoss: lib/ops/grad_grad.c). The
 * gradients with respect to the scores are single grad-family nodes; labels
 * and targets get none.
 */
#include "ops/gradrule.h"

#define DY (c->dy[0])

static int
xent(struct ml_gctx *c, const char *op)
{
	const struct ml_node *n = ml_gfwd(c);
	if (n->n_in > 2 && n->in[2] >= 0)
		return ml_gfail(c, ML_ENOTSUP, "class weights are not supported");
	if (n->n_out > 1 && c->dy[1] >= 0)
		return ml_gfail(c, ML_ENOTSUP, "a gradient through log_prob is not supported");
	if (!c->need[0] || DY < 0)
		return 0;
	int in[3] = { DY, ml_gin(c, 0), ml_gin(c, 1) }, out;
	int rc = ml_gnode(c, op, 3, in, 1, &out, true);
	if (rc < 0)
		return rc;
	c->dx[0] = out;
	return 0;
}

static int g_sce(struct ml_gctx *c) { return xent(c, "ml.SoftmaxCrossEntropyGrad"); }
static int g_nll(struct ml_gctx *c) { return xent(c, "ml.NegativeLogLikelihoodGrad"); }

const struct ml_grad_rule ml_grad_rules_loss[] = {
	{ ML_OP_SCE_LOSS, g_sce },
	{ ML_OP_NLL_LOSS, g_nll },
	{ .op = ML_OP_NONE },
};
