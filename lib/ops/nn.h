/*
 * nn.h: the window geometry of convolutions and pools, shared by the nn
 * family's inference (lib/ops/nn.c) and its CPU kernels (lib/cpu/nn*.c),
 * so both derive the same output sizes and pads from the same node.
 */
#ifndef ML_OPS_NN_H
#define ML_OPS_NN_H

#include "ml_impl.h"

/* The most spatial dims a convolution or pool may have. */
#define ML_CONV_MAXSP (ML_MAX_RANK - 2)

/*
 * struct ml_conv_geom: the geometry of a Conv, ConvTranspose, MaxPool,
 * AveragePool or LpPool node. X is [n, cin, in...], Y [n, cout, out...].
 * For pools cout is cin and group 1. Sizes not known in static inference
 * are -1, and so is whatever depends on them. ConvTranspose's pads may be
 * negative (an output_shape larger than the full transposed output).
 */
struct ml_conv_geom {
	int nsp;			/* spatial dims; 0 when X's rank is unknown */
	int64_t n, cin, cout, group;
	int64_t in[ML_CONV_MAXSP], out[ML_CONV_MAXSP];
	int64_t k[ML_CONV_MAXSP];	/* kernel (window) size */
	int64_t stride[ML_CONV_MAXSP], dil[ML_CONV_MAXSP];
	int64_t pb[ML_CONV_MAXSP], pe[ML_CONV_MAXSP];	/* pads before and after */
	bool ceil_mode;			/* pools: ceil_mode=1 */
	bool count_include_pad;		/* AveragePool */
};

/*
 * ml_conv_geom: read the node's attributes (kernel_shape, strides,
 * dilations, pads, auto_pad, group, output_padding, output_shape,
 * ceil_mode, count_include_pad) and the shapes of X and W into g,
 * following ONNX for every opset. Returns ML_EINVAL for attributes or
 * shapes that cannot be valid. When the spatial rank cannot be known,
 * g->nsp is 0 and the caller leaves the output's rank unknown.
 */
int ml_conv_geom(struct ml_opctx *c, struct ml_conv_geom *g);

/*
 * ml_conv_nhwc_view: for a ConvNHWC node (X [N, H, W, C], W [kH, kW, C/group,
 * M], or with INT packed_n = M and group 1 W packed [ceil(M / 32), kH kW C,
 * 32] as FusedMatMul's B, rows in (kh, kw, c) order), nc is c seen as the Conv
 * it computes: op Conv on the NCHW shapes of X and W (in ins and the caller's
 * xv, wv; no data). ML_EINVAL when W does not fit the kernel_shape the packed
 * form needs; *known is false when X's or W's rank is not known yet.
 */
/*
 * ml_conv_nhwc_pre: node n (a ConvNHWC) has a pointwise prologue (INT
 * attribute prologue 1, mlopt's fuse-expand): its inputs are then X, W, B,
 * Wp [1, 1, Cx, C] and optionally Bp [C], and it has no residual Z.
 */
#define ML_NHWC_WP 3
#define ML_NHWC_BP 4
bool ml_conv_nhwc_pre(const struct ml_node *n);
/*
 * ml_conv_nhwc_pointwise: node n is a ConvNHWC that is one GEMM: W (wrank
 * dims wd) [1, 1, C, M], one group, stride 1, no pads, no packed_n and no
 * prologue, so X [N, H, W, C] as [NHW, C] times W as [C, M] (+ B, Z, the
 * activation) is its output.
 */
bool ml_conv_nhwc_pointwise(const struct ml_node *n, int wrank, const int64_t *wd);
int ml_conv_nhwc_view(const struct ml_opctx *c, struct ml_opctx *nc, struct ml_node *node,
		      struct ml_tval **ins, struct ml_tval *xv, struct ml_tval *wv, bool *known);

#endif
