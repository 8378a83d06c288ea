/*
 * loss.h: the rules of the loss family (lib/ops/loss.c) that its kernels
 * (lib/cpu/loss.c) share: the reduction attribute and the [N, C, D] view.
 */
#ifndef ML_OPS_LOSS_H
#define ML_OPS_LOSS_H

#include "ml_impl.h"

enum ml_loss_red { ML_RED_NONE, ML_RED_SUM, ML_RED_MEAN };

/* ml_loss_reduction: the node's reduction ("mean" by default); ML_EINVAL for another word. */
int ml_loss_reduction(struct ml_opctx *c, enum ml_loss_red *r);

#endif
