/*
 * elem.h: what the CPU kernel files of the elem and reduce families share:
 * the f16/bf16 wrapper, the split of the elem table across files, and the
 * grain for ml_parallel_for.
 */
#ifndef ML_CPU_ELEM_H
#define ML_CPU_ELEM_H

#include "ml_impl.h"

/*
 * ML_GRAIN: elements per ml_parallel_for chunk for elementwise work: large
 * enough that a chunk costs far more than handing it to a thread.
 */
#define ML_GRAIN 16384

/*
 * ml_cpu_as_f32: run fn on a copy of c in which every f16 and bf16 input
 * is converted to f32 and every f16 or bf16 output is computed into an f32
 * temporary, then converted back. Other dtypes pass through untouched, so
 * a kernel written for f32 and f64 serves the half types too.
 */
int ml_cpu_as_f32(struct ml_opctx *c, int (*fn)(struct ml_opctx *));
/* ml_cpu_has_half: whether any input or output of c is f16 or bf16. */
bool ml_cpu_has_half(const struct ml_opctx *c);
/*
 * ml_cpu_tmp_convert: allocate dst with src's shape and dtype dt and fill
 * it with src's values converted. dst is owned; ml_tval_clear releases it.
 */
int ml_cpu_tmp_convert(struct ml_tval *dst, const struct ml_tval *src, enum ml_dtype dt,
		       struct ml_err *e);

/*
 * lib/cpu/vmath.c: y[0..n) = f(x[0..n)) for the unary code un (ML_UN_*,
 * lib/act.def) in AVX-512 or AVX2 registers (fastmath.h's scalar loops
 * without either; y may be x). ml_vunary_has: whether un is one of them
 * (Sigmoid, Tanh, SiLU, GELU, Exp); ml_vunary returns 1 for any other.
 */
bool ml_vunary_has(int un);
int ml_vunary(int un, float *y, const float *x, int64_t n);

/* Kernels of lib/cpu/elem_unary.c, listed in ml_cpu_elem[] (lib/cpu/elem.c). */
int ml_cpu_unary(struct ml_opctx *c);
int ml_cpu_clip(struct ml_opctx *c);

#endif
