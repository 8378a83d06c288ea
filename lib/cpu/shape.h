/*
 * shape.h: what the shape family's CPU kernel files share: the strided
 * copy every layout op reduces to, output preparation for data-dependent
 * shapes, and the kernels that live in shape_index.c and shape_resize.c.
 */
#ifndef ML_CPU_SHAPE_H
#define ML_CPU_SHAPE_H

#include "ops/shape.h"

/* The most dims a strided view may have (Tile views rank r as 2r dims). */
#define ML_VIEW_MAX (2 * ML_MAX_RANK)

/*
 * ml_strided_copy: copy the strided view of src with shape dims[0..rank)
 * and byte strides stride[] (any sign, 0 for a broadcast dim) into the
 * contiguous dst, es bytes an element. src points at the view's first
 * element. Merges dims, then picks a memcpy, fill, blocked-transpose or
 * element loop, over the thread pool when large. rank <= ML_VIEW_MAX.
 */
void ml_strided_copy(void *dst, const void *src, int rank, const int64_t *dims,
		     const int64_t *stride, size_t es);

/*
 * ml_out_prepare: make out[i] hold dt[rank, dims]: allocate it when the
 * executor left it unallocated (a data-dependent shape), else check that
 * it was allocated with that shape.
 */
int ml_out_prepare(struct ml_opctx *c, int i, enum ml_dtype dt, int rank, const int64_t *dims);

/* ml_elem_size: the element size of t's dtype, or ML_ENOTSUP for strings. */
int ml_elem_size(struct ml_opctx *c, const struct ml_tval *t, size_t *es);

/* Kernels in shape_index.c. */
int ml_cpu_gather(struct ml_opctx *c);
int ml_cpu_gather_elements(struct ml_opctx *c);
int ml_cpu_gather_nd(struct ml_opctx *c);
int ml_cpu_scatter_elements(struct ml_opctx *c);
int ml_cpu_scatter_nd(struct ml_opctx *c);
int ml_cpu_one_hot(struct ml_opctx *c);
int ml_cpu_nonzero(struct ml_opctx *c);
int ml_cpu_reverse_sequence(struct ml_opctx *c);
int ml_cpu_compress(struct ml_opctx *c);
int ml_cpu_unique(struct ml_opctx *c);

/* Kernels in shape_resize.c. */
int ml_cpu_resize(struct ml_opctx *c);

#endif
