/*
 * misc.c: CPU kernels of the misc op family (being written).
 */
#include "ml_impl.h"

const struct ml_cpu_kernel ml_cpu_misc[] = {
	{ .op = ML_OP_NONE },
};
