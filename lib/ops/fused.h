/*
 * fused.h: what the fused family's definition (lib/ops/fused.c), its CPU
 * kernels (lib/cpu/fused.c) and the passes that make fused nodes (lib/opt)
 * share: the activation and elementwise op codes.
 */
#ifndef ML_OPS_FUSED_H
#define ML_OPS_FUSED_H

#include "ml_impl.h"

/*
 * The activation codes (ML_ACT_*) are the rows of lib/act.def with ACT 1;
 * the activation attribute names one by its op type ("" for none).
 * ml_fused_act: the activation code of node n, -1 when its attribute is unknown.
 */
int ml_fused_act(const struct ml_node *n);
/* ml_fused_pre_act: the same for a ConvNHWC prologue's pre_activation attribute. */
int ml_fused_pre_act(const struct ml_node *n);
/* ml_fused_act_name: the activation attribute's value for code act ("" for none), NULL if none. */
const char *ml_fused_act_name(int act);

/*
 * FusedElementwise op codes: the binary ones first, below ML_FE_UNARY;
 * then ML_FE_UNARY + ML_UN_ID for each row of lib/act.def with FE 1
 * (ML_FE_RELU, ...), whose op type names it in the ops attribute.
 */
enum { ML_FE_ADD, ML_FE_SUB, ML_FE_MUL, ML_FE_DIV, ML_FE_MAX, ML_FE_MIN, ML_FE_UNARY };
#define ML_FE_ENUM_(id, op, act, fe, ug, nm) ML_UN_IF_##fe(ML_FE_##id = ML_FE_UNARY + ML_UN_##id,)
enum { ML_UNARY_LIST(ML_FE_ENUM_) };
/* ml_fused_elem_op: the code of op type s, -1 when a FusedElementwise cannot hold it. */
int ml_fused_elem_op(const char *s);
/* ml_fused_elem_name: the lower-case name of code op ("add", "relu"), NULL when none. */
const char *ml_fused_elem_name(int op);
/*
 * ml_fused_block: when x broadcasts to y with its non-1 dims (and any dim
 * of size 1 in both) one block of y's dims, element i of y reads element (i / *inner) % *cnt of x; 0, or
 * -1 when x is not such an operand. Shapes must be known.
 */
int ml_fused_block(const struct ml_tval *x, const struct ml_tval *y, int64_t *inner, int64_t *cnt);

/*
 * A FusedMatMul whose INT attribute packed_n (N) is set takes B packed
 * by mlopt's pack-weights pass: [ceil(N / 32), K, 32], column j of row p
 * at [j / 32][p][j % 32] (zeros past N), the panels of the packed SGEMM
 * (ML_PG_NR of lib/cpu/nn.h). The pass packs products of at least
 * ML_FUSED_PACK_MIN multiply-adds.
 */
#define ML_FUSED_PANEL 32
#define ML_FUSED_PACK_MIN ((int64_t)1 << 20)

/*
 * CPU kernels of lib/cpu/fused_mm.c. ml_cpu_fmatmul_fast: FusedMatMul
 * through the packed SGEMM; 0 done, 1 when it does not take the case (the
 * caller runs the MatMul kernel then, unpacking a packed B with
 * ml_fused_unpack), or a negative code.
 * ml_cpu_fconv_fast: the same for a pointwise FusedConv.
 * ml_cpu_attention: the Attention kernel.
 */
int ml_cpu_fmatmul_fast(struct ml_opctx *c);
int ml_cpu_fconv_fast(struct ml_opctx *c);
/*
 * ml_cpu_fconv_conv (lib/cpu/nn_conv.c): an f32 FusedConv by the Conv
 * kernel that would run it (positions as rows for tiny outputs,
 * ml_cpu_fconv_fast for a pointwise one, the direct one for few input
 * channels, Winograd, im2col over the packed SGEMM), with the residual and the
 * activation applied to each block as it is stored; 1 (nothing done) where
 * the kernel that would run has no such epilogue.
 */
int ml_cpu_fconv_conv(struct ml_opctx *c);
/* ml_fused_unpack: packed B (panels) of k x n into b [k, n]. */
void ml_fused_unpack(const float *bp, int64_t k, int64_t n, float *b);
int ml_cpu_attention(struct ml_opctx *c);
/*
 * ml_cpu_fused_epilogue (lib/cpu/fused.c): one pass over y (c's output, or
 * y's shape) that adds bias per column of rows rowlen long (NULL: none;
 * rowlen <= 0: one row) and the residual z (NULL: none), then applies c's
 * node's activation (its clip_min and clip_max for Clip).
 */
void ml_cpu_fused_epilogue(struct ml_opctx *c, struct ml_tval *y, const float *bias,
			   int64_t rowlen, const struct ml_tval *z);
/*
 * ml_fused_tile_epi: over m rows of n floats (row stride ldc) of y, add
 * bias[0..n) and the rows of z (same strides; either NULL: none), then
 * apply activation act (ML_ACT_*, Clip within [lo, hi]).
 */
void ml_fused_tile_epi(float *y, int64_t m, int64_t n, int64_t ldc, const float *bias,
		       const float *z, int act, float lo, float hi);

#endif
