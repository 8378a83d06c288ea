/*
 * reduce.c: definitions (arity, shape inference) of the reduce op family.
 */
#include "ml_impl.h"

const struct ml_opdef ml_opdefs_reduce[] = {
	{ .op = ML_OP_NONE },
};
