/*
 * misc.h: the kernels of the misc family that live outside lib/cpu/misc.c
 * (which holds the kernel table), one file per group of ops.
 */
#ifndef ML_CPU_MISC_H
#define ML_CPU_MISC_H

#include "ops/misc.h"

/* lib/cpu/misc_einsum.c */
int ml_cpu_einsum(struct ml_opctx *c);
/* lib/cpu/misc_sample.c */
int ml_cpu_grid_sample(struct ml_opctx *c);
int ml_cpu_roi_align(struct ml_opctx *c);
/* lib/cpu/misc_signal.c */
int ml_cpu_window(struct ml_opctx *c);
int ml_cpu_dft(struct ml_opctx *c);
int ml_cpu_stft(struct ml_opctx *c);
int ml_cpu_mel(struct ml_opctx *c);

#endif
