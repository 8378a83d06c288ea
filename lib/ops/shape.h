/*
 * shape.h: helpers the shape family's inference (lib/ops/shape.c) and its
 * CPU kernels (lib/cpu/shape*.c) share, so that both derive the same
 * parameters (slice bounds, pads, resize scales) from the same node.
 */
#ifndef ML_OPS_SHAPE_H
#define ML_OPS_SHAPE_H

#include "ml_impl.h"

/*
 * ml_shape_known: whether t's value is available. A tensor with no elements counts
 * as known even when its data pointer is NULL, as constants of size zero
 * may have none.
 */
static inline bool
ml_shape_known(const struct ml_tval *t)
{
	return t != NULL && t->rank >= 0 && (t->data != NULL || ml_tval_numel(t) == 0);
}

/* ml_shape_present: an optional input given and not empty (Resize's "" and [] alike). */
static inline bool
ml_shape_present(const struct ml_tval *t)
{
	return t != NULL && !(t->rank >= 0 && ml_tval_numel(t) == 0);
}

/*
 * ml_shape_ints: read the integer tensor t (data known) into v, at most max
 * values. Returns the count, or ML_EINVAL (naming what) when t is not an
 * integer tensor of rank 0 or 1 or holds more than max values.
 */
int ml_shape_ints(struct ml_opctx *c, const struct ml_tval *t, int64_t *v, int max,
		  const char *what);

/*
 * ml_shape_slice: the bounds of Slice over x (rank known). For each dim d,
 * start[d] and step[d] give the first element and the stride (in elements)
 * and len[d] the output size; len[d] is -1 where a dim or a parameter is
 * not known (static inference). Follows ONNX's clamping for every opset
 * (attributes before opset 10, inputs from 10).
 */
int ml_shape_slice(struct ml_opctx *c, const struct ml_tval *x, int64_t *start, int64_t *step,
		   int64_t *len);

/*
 * ml_shape_pads: Pad's begin and end pads for a tensor of the given rank,
 * pads[d] before and pads[rank + d] after dim d, from the pads attribute
 * (opset < 11) or the pads and axes inputs. *known is false when the pads
 * input's value is not known.
 */
int ml_shape_pads(struct ml_opctx *c, int rank, int64_t *pads, bool *known);

/* Resize's modes, coordinate transformations and nearest roundings. */
enum { ML_RS_NEAREST, ML_RS_LINEAR, ML_RS_CUBIC };
enum {
	ML_CT_HALF_PIXEL, ML_CT_PYTORCH_HALF_PIXEL, ML_CT_ALIGN_CORNERS, ML_CT_ASYMMETRIC,
	ML_CT_TF_HALF_PIXEL_FOR_NN, ML_CT_TF_CROP_AND_RESIZE, ML_CT_HALF_PIXEL_SYMMETRIC
};
enum { ML_NM_ROUND_PREFER_FLOOR, ML_NM_ROUND_PREFER_CEIL, ML_NM_FLOOR, ML_NM_CEIL, ML_NM_SIMPLE };

/*
 * struct ml_resize: Resize's (and Upsample's) parameters. out[d] is the
 * output size (-1 unknown), scale[d] the scale the coordinate
 * transformation divides by (0 unknown), roi[d] and roi[rank + d] the
 * region of tf_crop_and_resize (0 and 1 elsewhere).
 */
struct ml_resize {
	int rank;
	int mode, ctm, nearest;
	double cubic_a, extrapolation;
	bool exclude_outside, antialias;
	int64_t out[ML_MAX_RANK];
	double scale[ML_MAX_RANK];
	double roi[2 * ML_MAX_RANK];
};

/* ml_shape_resize: fill r for a Resize or Upsample node over input x (rank known). */
int ml_shape_resize(struct ml_opctx *c, const struct ml_tval *x, struct ml_resize *r);
/* ml_shape_infer_resize: the inference of Resize and Upsample. */
int ml_shape_infer_resize(struct ml_opctx *c);

/*
 * ml_shape_constant: the value of a Constant node: dtype, shape and data
 * (borrowed from the attribute; NULL for the scalar attributes, whose one
 * value is given in *iv or *fv instead).
 */
struct ml_shape_const {
	enum ml_dtype dtype;
	int rank;
	int64_t dims[ML_MAX_RANK];
	const void *data;	/* value's data, or NULL */
	const int64_t *ints;	/* value_int(s) */
	const double *floats;	/* value_float(s) */
	int64_t iv;
	double fv;
};
int ml_shape_constant(struct ml_opctx *c, struct ml_shape_const *k);

#endif
