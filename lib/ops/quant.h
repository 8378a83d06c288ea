/*
 * quant.h: what the quant family's inference (lib/ops/quant.c) shares with
 * its kernels (lib/cpu/quant.c): the integer convolutions' geometry, which
 * is Conv's, read through a view of the node as a Conv over (x, w).
 */
#ifndef ML_OPS_QUANT_H
#define ML_OPS_QUANT_H

#include "ops/nn.h"

/*
 * struct ml_qconv_view: c seen as a Conv node with inputs (x, w), so that
 * ml_conv_geom and the nn kernels' helpers read ConvInteger's and
 * QLinearConv's attributes exactly as Conv's. Errors still name the node.
 */
struct ml_qconv_view {
	struct ml_opctx c;
	struct ml_node node;
	struct ml_tval *in[2];
};

/* ml_qconv_view: fill v from c (x and w at their positions for c's op). */
void ml_qconv_view(struct ml_opctx *c, struct ml_qconv_view *v);

/*
 * The internal int8 ops of lib/ops/quant_q8.c (domain "ml"). struct
 * ml_q8_geom is Q8Conv's geometry, channels last: x [n, h, w, c] (h = w = 1
 * for a matrix), m output channels, k = kh * kw * (c / group) products per
 * output, pt/pl the top and left pads. ml_q8_geom fills it from c's inputs
 * and attributes (dims -1 where unknown).
 */
struct ml_q8_geom {
	int rank;
	int64_t n, h, w, c, m, k, oh, ow, group;
	int64_t kh, kw, sh, sw, dh, dw, pt, pl;
	int32_t xzero, yzero, lo, hi;
	bool f32out, w7;	/* w7: weight_bits 7 (weights in [-64, 63]) */
};
int ml_q8_geom(struct ml_opctx *c, struct ml_q8_geom *g);
int ml_q8_infer_conv(struct ml_opctx *c);
int64_t ml_q8_flops_conv(const struct ml_opctx *c);
int ml_q8_infer_quant(struct ml_opctx *c);
int ml_q8_infer_dequant(struct ml_opctx *c);
int ml_q8_infer_add(struct ml_opctx *c);
int ml_q8_infer_maxpool(struct ml_opctx *c);
int ml_q8_infer_gap(struct ml_opctx *c);

#endif
