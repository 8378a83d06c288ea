/*
 * nn.c: CPU kernels of the nn op family.
 */
#include "ml_impl.h"

const struct ml_cpu_kernel ml_cpu_nn[] = {
	{ .op = ML_OP_NONE },
};
