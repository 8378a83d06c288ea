/*
 * reduce.h: the axis rules of the reduce family (lib/ops/reduce.c), shared
 * by its shape inference and its kernels (lib/cpu/reduce.c).
 */
#ifndef ML_OPS_REDUCE_H
#define ML_OPS_REDUCE_H

#include "ml_impl.h"

/*
 * ml_reduce_axes: fill mask[0..rank) with the axes a Reduce* node reduces.
 * *noop is set for an empty axes list with noop_with_empty_axes=1; *known
 * is false when the axes input has no value yet. ML_EINVAL on a bad axis.
 */
int ml_reduce_axes(struct ml_opctx *c, int rank, bool *mask, bool *known, bool *noop);
/*
 * ml_softmax_view: the [outer, n, inner] view of x for Softmax, LogSoftmax
 * and Hardmax, per the node's opset (2-D flattening before 13).
 */
int ml_softmax_view(struct ml_opctx *c, const struct ml_tval *x, int64_t *outer, int64_t *n,
		    int64_t *inner);
/* ml_topk_k: TopK's k (input or attribute); -1 when not known yet. */
int ml_topk_k(struct ml_opctx *c, int64_t *k);
/* ml_cumsum_axis: CumSum's normalised axis; -1 when not known yet. */
int ml_cumsum_axis(struct ml_opctx *c, int rank, int *axis);

#endif
