/*
 * fused.h: what the fused family's definition (lib/ops/fused.c), its CPU
 * kernels (lib/cpu/fused.c) and the passes that make fused nodes (lib/opt)
 * share: the activation and elementwise op codes.
 */
#ifndef ML_OPS_FUSED_H
#define ML_OPS_FUSED_H

#include "ml_impl.h"

/* Activation codes, the index of the activation attribute's value. */
enum { ML_ACT_NONE, ML_ACT_RELU, ML_ACT_CLIP, ML_ACT_SIGMOID, ML_ACT_TANH, ML_ACT_SILU,
       ML_ACT_GELU };
/* ml_fused_act: the activation code of node n, -1 when its attribute is unknown. */
int ml_fused_act(const struct ml_node *n);

/* FusedElementwise op codes: binary ones first, ML_FE_UNARY the first unary one. */
enum { ML_FE_ADD, ML_FE_SUB, ML_FE_MUL, ML_FE_DIV, ML_FE_MAX, ML_FE_MIN, ML_FE_UNARY,
       ML_FE_RELU = ML_FE_UNARY, ML_FE_SIGMOID, ML_FE_TANH, ML_FE_EXP, ML_FE_NEG, ML_FE_ABS,
       ML_FE_SQRT, ML_FE_ERF, ML_FE_GELU, ML_FE_SILU, ML_FE_RECIPROCAL };
/* ml_fused_elem_op: the code of op type s, -1 when a FusedElementwise cannot hold it. */
int ml_fused_elem_op(const char *s);
/*
 * ml_fused_block: when x broadcasts to y with its non-1 dims one block of
 * y's dims, element i of y reads element (i / *inner) % *cnt of x; 0, or
 * -1 when x is not such an operand. Shapes must be known.
 */
int ml_fused_block(const struct ml_tval *x, const struct ml_tval *y, int64_t *inner, int64_t *cnt);

#endif
