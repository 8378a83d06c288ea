/*
 * misc.c: definitions of the misc op family (being written).
 */
#include "ml_impl.h"

const struct ml_opdef ml_opdefs_misc[] = {
	{ .op = ML_OP_NONE },
};
