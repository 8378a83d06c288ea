/*
 * shape_resize.c: the parameters of Resize and Upsample (modes, the
 * coordinate transformation, scales or sizes, roi) for every opset, and
 * their shape inference. The CPU kernel reads the same parameters.
 */
#include "ops/shape.h"

static int
parse_enum(struct ml_opctx *c, const char *attr, const char *def, const char *const *names,
	   int n, int *out)
{
	const char *s = ml_attr_str(c->node, attr, def);
	for (int i = 0; i < n; i++)
		if (names[i] != NULL && strcmp(s, names[i]) == 0) {
			*out = i;
			return 0;
		}
	return ml_opfail(c, ML_EINVAL, "unknown %s '%s'", attr, s);
}

/*
 * read_floats: a float tensor's values (Resize's scales and roi) as
 * doubles, their count in *n, -1 there when the value is not known.
 */
static int
read_floats(struct ml_opctx *c, const struct ml_tval *t, double *v, int max, const char *what,
	    int *count)
{
	int64_t n = ml_tval_numel(t);

	*count = -1;
	if (!ml_shape_known(t))
		return 0;
	if (!ml_dtype_is_float(t->dtype))
		return ml_opfail(c, ML_EINVAL, "%s must be a float tensor", what);
	if (n > max)
		return ml_opfail(c, ML_EINVAL, "%s has too many values", what);
	for (int64_t i = 0; i < n; i++)
		v[i] = ml_get_f64(t->data, t->dtype, i);
	*count = (int)n;
	return 0;
}

int
ml_shape_resize(struct ml_opctx *c, const struct ml_tval *x, struct ml_resize *r)
{
	static const char *const modes[] = { "nearest", "linear", "cubic" };
	static const char *const ctms[] = {
		"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
		"tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric"
	};
	static const char *const nms[] = { "round_prefer_floor", "round_prefer_ceil", "floor",
					   "ceil" };
	bool old = c->node->op == ML_OP_UPSAMPLE || c->opset < 11;
	int rank = x->rank;
	double sc[ML_MAX_RANK];
	int64_t sz[ML_MAX_RANK];
	int nsc = -2, nsz = -2;

	memset(r, 0, sizeof *r);
	r->rank = rank;
	/* Some exporters of Upsample spell linear "bilinear". */
	if (strcmp(ml_attr_str(c->node, "mode", ""), "bilinear") == 0)
		r->mode = ML_RS_LINEAR;
	else
		ML_TRY(parse_enum(c, "mode", "nearest", modes, 3, &r->mode));
	if (old) {
		if (r->mode == ML_RS_CUBIC)
			return ml_opfail(c, ML_EINVAL, "mode cubic needs opset 11");
		r->ctm = ML_CT_ASYMMETRIC;
		r->nearest = ML_NM_SIMPLE;
	} else {
		ML_TRY(parse_enum(c, "coordinate_transformation_mode", "half_pixel", ctms, 7,
				  &r->ctm));
		ML_TRY(parse_enum(c, "nearest_mode", "round_prefer_floor", nms, 4, &r->nearest));
	}
	r->cubic_a = ml_attr_float(c->node, "cubic_coeff_a", -0.75);
	r->exclude_outside = ml_attr_int(c->node, "exclude_outside", 0) != 0;
	r->extrapolation = ml_attr_float(c->node, "extrapolation_value", 0);
	r->antialias = ml_attr_int(c->node, "antialias", 0) != 0;
	if (ml_attr_find(c->node, "axes") != NULL ||
	    strcmp(ml_attr_str(c->node, "keep_aspect_ratio_policy", "stretch"), "stretch") != 0)
		return ml_opfail(c, ML_ENOTSUP, "axes and keep_aspect_ratio_policy are not supported");
	for (int d = 0; d < rank; d++) {
		r->out[d] = -1;
		r->roi[d] = 0;
		r->roi[rank + d] = 1;
	}
	if (c->node->op == ML_OP_UPSAMPLE && ml_attr_find(c->node, "scales") != NULL) {
		const double *p;
		nsc = ml_attr_floats(c->node, "scales", &p);
		if (nsc < 0 || nsc > ML_MAX_RANK)
			return ml_opfail(c, ML_EINVAL, "bad scales attribute");
		memcpy(sc, p, (size_t)nsc * sizeof *sc);
	} else if (old) {
		const struct ml_tval *t = ML_IN(c, 1);
		if (t == NULL)
			return ml_opfail(c, ML_EINVAL, "input scales is required");
		ML_TRY(read_floats(c, t, sc, ML_MAX_RANK, "scales", &nsc));
	} else {
		const struct ml_tval *troi = ML_IN(c, 1), *tsc = ML_IN(c, 2), *tsz = ML_IN(c, 3);
		if (ml_shape_present(tsz)) {
			if (!ml_dtype_is_int(tsz->dtype))
				return ml_opfail(c, ML_EINVAL, "sizes must be int64");
			if (ml_shape_known(tsz))
				ML_TRY(nsz = ml_shape_ints(c, tsz, sz, ML_MAX_RANK, "sizes"));
			else
				nsz = -1;
			if (ml_shape_present(tsc) && tsc->rank >= 0)
				return ml_opfail(c, ML_EINVAL, "scales and sizes are both given");
		} else if (ml_shape_present(tsc)) {
			ML_TRY(read_floats(c, tsc, sc, ML_MAX_RANK, "scales", &nsc));
		} else if (tsc == NULL || ml_shape_known(tsc)) {
			return ml_opfail(c, ML_EINVAL, "one of scales and sizes is required");
		} else {
			nsc = -1;
		}
		if (r->ctm == ML_CT_TF_CROP_AND_RESIZE && ml_shape_present(troi)) {
			double roi[2 * ML_MAX_RANK];
			int n;
			ML_TRY(read_floats(c, troi, roi, 2 * ML_MAX_RANK, "roi", &n));
			if (n >= 0 && n != 2 * rank)
				return ml_opfail(c, ML_EINVAL, "roi has %d values for rank %d", n, rank);
			if (n > 0)
				memcpy(r->roi, roi, (size_t)n * sizeof *roi);
		}
	}
	if (nsz >= 0) {
		if (nsz != rank)
			return ml_opfail(c, ML_EINVAL, "%d sizes for rank %d", nsz, rank);
		for (int d = 0; d < rank; d++) {
			if (sz[d] < 0)
				return ml_opfail(c, ML_EINVAL, "negative size %lld", (long long)sz[d]);
			r->out[d] = sz[d];
			r->scale[d] = x->dims[d] > 0 ? (double)sz[d] / (double)x->dims[d] : 0;
		}
	} else if (nsc >= 0) {
		if (nsc != rank)
			return ml_opfail(c, ML_EINVAL, "%d scales for rank %d", nsc, rank);
		for (int d = 0; d < rank; d++) {
			if (!(sc[d] > 0) || sc[d] > 1e6)
				return ml_opfail(c, ML_EINVAL, "scale %g must be positive", sc[d]);
			r->scale[d] = sc[d];
			if (x->dims[d] >= 0)
				r->out[d] = (int64_t)floor((double)x->dims[d] * sc[d]);
		}
	}
	return 0;
}

int
ml_shape_infer_resize(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];
	struct ml_resize r;

	if (x == NULL)
		return ml_opfail(c, ML_EINVAL, "input 0 is required");
	o->dtype = x->dtype;
	o->rank = -1;
	if (x->rank < 0)
		return 0;
	ML_TRY(ml_shape_resize(c, x, &r));
	ml_set_shape(o, x->dtype, x->rank, r.out);
	return 0;
}

