/*
 * quant.c: definitions of the quant op family (being written).
 */
#include "ml_impl.h"

const struct ml_opdef ml_opdefs_quant[] = {
	{ .op = ML_OP_NONE },
};
