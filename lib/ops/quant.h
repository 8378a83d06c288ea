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

#endif
