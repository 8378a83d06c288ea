/*
 * grad_grad.c: gradient rules of the grad family's forward ops, the forms
 * a training step runs in place of an ONNX op (lib/train/step.c):
 * BatchNormTraining, DropoutTraining and BCEWithLogitsLoss. Each emits one
 * node of this family or an ordinary Mul (lib/ops/gradrule.h has the rule
 * interface).
 */
#include "ops/gradrule.h"

#define DY (c->dy[0])

/* BatchNormTraining: one BatchNormTrainingGrad node with outputs dx, dscale, dB */
static int
g_bn_train(struct ml_gctx *c)
{
	int in[3] = { DY, ml_gin(c, 0), ml_gin(c, 1) }, out[3];
	if (DY < 0)
		return 0;
	int rc = ml_gnode(c, "ml.BatchNormTrainingGrad", 3, in, 3, out, true);
	if (rc < 0)
		return rc;
	for (int i = 0; i < 3; i++)
		if (c->need[i])
			c->dx[i] = out[i];
	return 0;
}

/* DropoutTraining multiplies by its mask (output 1). */
static int
g_dropout_train(struct ml_gctx *c)
{
	int mask = ml_gout(c, 1);
	if (mask < 0)
		return ml_gfail(c, ML_EINVAL, "the mask output is missing");
	if (c->need[0]) {
		int r = ml_g2(c, "Mul", DY, mask);
		if (r < 0)
			return r;
		c->dx[0] = r;
	}
	return 0;
}

/* BCEWithLogitsLoss: the gradient of the logits only, one BCEWithLogitsGrad node. */
static int
g_bce(struct ml_gctx *c)
{
	if (c->need[1])
		return ml_gfail(c, ML_ENOTSUP, "no gradient with respect to the targets");
	if (!c->need[0])
		return 0;
	int in[3] = { DY, ml_gin(c, 0), ml_gin(c, 1) }, out;
	int rc = ml_gnode(c, "ml.BCEWithLogitsGrad", 3, in, 1, &out, false);
	if (rc < 0)
		return rc;
	c->dx[0] = out;
	return 0;
}

const struct ml_grad_rule ml_grad_rules_grad[] = {
	{ ML_OP_BN_TRAINING, g_bn_train },
	{ ML_OP_DROPOUT_TRAINING, g_dropout_train },
	{ ML_OP_BCE_LOGITS, g_bce },
	{ .op = ML_OP_NONE },
};
