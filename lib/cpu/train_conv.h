/*
 * train_conv.h: the small-channel convolution kernels of training
 * (lib/cpu/train_conv.c): the forward convolution and both gradients,
 * as GEMMs over a padded copy of the input instead of a column matrix, for
 * a handful of channels (a LeNet's 6 or 16), which BLAS and ml_pgemm run
 * poorly; in f32, and in bf16 for mltrain --precision bf16.
 */
#ifndef ML_CPU_TRAIN_CONV_H
#define ML_CPU_TRAIN_CONV_H

#include "cpu/nn.h"

/*
 * ml_train_conv_ok: whether the kernels here take convolution v: a 2-D
 * window of stride 1 and dilation 1, pads smaller than the window, and
 * few output channels per group (at most 16, where a 12-row GEMM tile
 * would run mostly empty).
 */
bool ml_train_conv_ok(const struct ml_conv3 *v);

/*
 * The precision of a call: ML_TC_F32, the f32 kernels; ML_TC_ROUND, the
 * f32 kernels on operands rounded to bf16 (the reference, ML_BF16=f32);
 * ML_TC_BF16, AMX on bf16 operands with f32 sums (train_amx.c); ML_TC_DP,
 * the same products on vdpbf16ps (train_conv.c, on CPUs where it issues
 * at the FMA's rate and AMX is absent or does not take the convolution).
 */
enum { ML_TC_F32 = 0, ML_TC_ROUND = 1, ML_TC_BF16 = 2, ML_TC_DP = 3 };

/*
 * ml_train_conv_mode: the precision of node n's convolution v: ML_TC_F32
 * unless n says precision "bf16"; then ML_TC_BF16 where AMX takes v
 * (ml_train_amx_ok), else ML_TC_DP where vdpbf16ps issues at the FMA's
 * rate or is asked for (ML_BF16=dp) and the AVX-512 kernels run, else
 * ML_TC_F32; where bf16 products are emulated (ml_bf16_train_path 1),
 * ML_TC_ROUND where the native path would round (AMX, unless vdpbf16ps is
 * asked for, or ML_TC_DP's conditions), else ML_TC_F32.
 */
int ml_train_conv_mode(const struct ml_node *n, const struct ml_conv3 *v);

/*
 * ml_train_conv_fwd: y = conv(x, w) + bias (NULL: none) in precision bf.
 * 0, or ML_ENOMEM (set on c).
 */
int ml_train_conv_fwd(struct ml_opctx *c, const struct ml_conv3 *v, int bf, const float *x,
		      const float *w, const float *bias, float *y);

/*
 * ml_train_conv_grad: ConvGradInput (gi: out = dx, all of it written) or
 * ConvGradFilter (out = dW; db, when not NULL, the bias gradient, always
 * f32 sums) of the convolution v in precision bf. 0, or ML_ENOMEM (set
 * on c).
 */
int ml_train_conv_grad(struct ml_opctx *c, const struct ml_conv3 *v, int bf, bool gi,
		       const float *dy, const float *x, const float *w, float *out, float *db);

/*
 * ml_train_conv_flip: the input gradient's kernel of group weights wg
 * [mg][cg][kh][kw]: a[ci][(m, p, q)] = wg[m][ci][kh - 1 - p][kw - 1 - q],
 * the forward convolution's of dy with channels swapped.
 */
void ml_train_conv_flip(const struct ml_conv3 *v, const float *wg, float *a);

/*
 * train_amx.c: ml_train_amx_ok, whether the AMX kernels take v (this
 * build has them, ml_bf16_path() is AMX, at most 64 channels a group
 * and a window at most 32 wide); ml_train_amx_fwd and ml_train_amx_grad:
 * ml_train_conv_fwd and ml_train_conv_grad (without db) in bf16 on AMX.
 */
bool ml_train_amx_ok(const struct ml_conv3 *v);
int ml_train_amx_fwd(struct ml_opctx *c, const struct ml_conv3 *v, const float *x,
		     const float *w, const float *bias, float *y);
int ml_train_amx_grad(struct ml_opctx *c, const struct ml_conv3 *v, bool gi, const float *dy,
		      const float *x, const float *w, float *out);

#endif
