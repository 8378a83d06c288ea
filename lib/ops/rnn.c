/*
 * rnn.c: definitions (arity, shape inference) of the rnn op family.
 */
#include "ml_impl.h"

const struct ml_opdef ml_opdefs_rnn[] = {
	{ .op = ML_OP_NONE },
};
