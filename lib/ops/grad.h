/*
 * grad.h: what the grad family's definitions (lib/ops/grad.c) and CPU
 * kernels (lib/cpu/grad.c) share: UnaryGrad's functions and the forward
 * geometry of the pool and convolution gradients.
 */
#ifndef ML_OPS_GRAD_H
#define ML_OPS_GRAD_H

#include "ml_impl.h"
#include "ops/nn.h"

/*
 * UnaryGrad's functions, the rows of lib/act.def with UG 1: ML_UG_ELU is
 * ML_UN_ELU, and so on. The fn attribute names one by the row's NAME.
 */
#define ML_UG_ENUM_(id, op, act, fe, ug, nm) ML_UN_IF_##ug(ML_UG_##id = ML_UN_##id,)
enum { ML_UNARY_LIST(ML_UG_ENUM_) };

/* ml_unary_grad_fn: the ML_UG_* value of an fn name, -1 when unknown. */
int ml_unary_grad_fn(const char *s);

/*
 * ml_grad_geom: the geometry of c's node read as forward op op (Conv,
 * MaxPool, AveragePool) over input x and weight w (NULL for pools).
 */
int ml_grad_geom(struct ml_opctx *c, enum ml_op op, const struct ml_tval *x,
		 const struct ml_tval *w, struct ml_conv_geom *g);

/* ml_grad_ln_axis: LayerNormGrad's axis in [0, rank). */
int ml_grad_ln_axis(struct ml_opctx *c, int rank, int *axis);

/* ml_grad_same_shape: a and b can have one shape, as far as known. */
bool ml_grad_same_shape(const struct ml_tval *a, const struct ml_tval *b);

#endif
