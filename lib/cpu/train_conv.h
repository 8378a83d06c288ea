/*
 * train_conv.h: the small-channel f32 convolution kernels of training
 * (lib/cpu/train_conv.c): the forward convolution and both gradients,
 * as GEMMs over a padded copy of the input instead of a column matrix, for
 * a handful of channels (a LeNet's 6 or 16), which BLAS and ml_pgemm run
 * poorly.
 */
#ifndef ML_CPU_TRAIN_CONV_H
#define ML_CPU_TRAIN_CONV_H

#include "cpu/nn.h"

/*
 * ml_train_conv_ok: whether the kernels here take convolution v: a 2-D
 * window of stride 1 and dilation 1, pads smaller than the window, and
 * few output channels per group (at most 16, where a 12-row GEMM tile
 * would run mostly empty).
 */
bool ml_train_conv_ok(const struct ml_conv3 *v);

/*
 * ml_train_conv_f32: y = conv(x, w) + bias (NULL: none). 0, or ML_ENOMEM
 * (set on c).
 */
int ml_train_conv_f32(struct ml_opctx *c, const struct ml_conv3 *v, const float *x,
		      const float *w, const float *bias, float *y);

/*
 * ml_train_conv_grad_f32: ConvGradInput (gi: out = dx, all of it written)
 * or ConvGradFilter (out = dW; db, when not NULL, the bias gradient) of
 * the convolution v. 0, or ML_ENOMEM (set on c).
 */
int ml_train_conv_grad_f32(struct ml_opctx *c, const struct ml_conv3 *v, bool gi,
			   const float *dy, const float *x, const float *w, float *out,
			   float *db);

#endif
