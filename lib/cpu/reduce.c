/*
 * reduce.c: CPU kernels of the reduce op family.
 */
#include "ml_impl.h"

const struct ml_cpu_kernel ml_cpu_reduce[] = {
	{ .op = ML_OP_NONE },
};
