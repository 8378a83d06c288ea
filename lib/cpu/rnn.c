/*
 * rnn.c: CPU kernels of the rnn op family.
 */
#include "ml_impl.h"

const struct ml_cpu_kernel ml_cpu_rnn[] = {
	{ .op = ML_OP_NONE },
};
