/*
 * elem.c: definitions (arity, shape inference) of the elem op family.
 */
#include "ml_impl.h"

const struct ml_opdef ml_opdefs_elem[] = {
	{ .op = ML_OP_NONE },
};
