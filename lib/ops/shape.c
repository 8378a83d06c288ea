/*
 * shape.c: definitions (arity, shape inference) of the shape op family.
 */
#include "ml_impl.h"

const struct ml_opdef ml_opdefs_shape[] = {
	{ .op = ML_OP_NONE },
};
