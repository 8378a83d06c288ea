/*
 * train.h: the rules of the train family (lib/ops/train.c) that its kernels
 * (lib/cpu/train.c) share: the optimizer attributes and the layout of the
 * variadic inputs and outputs.
 */
#ifndef ML_OPS_TRAIN_H
#define ML_OPS_TRAIN_H

#include "ml_impl.h"

/*
 * struct ml_train_attrs: an optimizer node's attributes, with ONNX's
 * defaults where the spec has them. Unused fields stay 0.
 */
struct ml_train_attrs {
	double alpha, beta, epsilon, decay_factor;
	double norm_coefficient, norm_coefficient_post;
	bool nesterov;
	/* tensors per group in the inputs (X, G, state...) and in the outputs */
	int per_in, per_out;
	int groups;
};

/*
 * ml_train_attrs: parse c's attributes and split its inputs
 * (R, T, X_1..X_n, G_1..G_n, state_1..) and outputs into groups.
 * ML_EINVAL for a missing required attribute, a bad mode or counts that do
 * not form whole groups.
 */
int ml_train_attrs(struct ml_opctx *c, struct ml_train_attrs *a);

#endif
