/*
 * nn.c: definitions (arity, shape inference) of the nn op family.
 */
#include "ml_impl.h"

const struct ml_opdef ml_opdefs_nn[] = {
	{ .op = ML_OP_NONE },
};
