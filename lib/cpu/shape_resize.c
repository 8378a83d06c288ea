/*
 * shape_resize.c: the CPU kernel of Resize and Upsample. Each dim gets a
 * table of taps (source indices and weights) per output coordinate, from
 * the coordinate transformation and the mode, following ONNX's reference
 * (onnx/backend/test/case/node/resize.py): nearest copies elements of any
 * dtype; linear and cubic sum the taps' tensor product in double.
 */
#include "cpu/shape.h"

#define PAR_ELEMS 16384
#define MAX_COMBOS 1024

struct taps {
	int n;			/* 0: outside the crop, the extrapolation value */
	int64_t idx[4];
	double w[4];
};

static void
cubic_coeffs(double r, double A, double *c)
{
	double s = 1 - r;
	c[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
	c[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
	c[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
	c[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
}

/* orig_coord: the input coordinate of output coordinate x along dim d. */
static double
orig_coord(const struct ml_resize *r, int d, int64_t x, int64_t in, int64_t out, bool *outside)
{
	double s = r->scale[d], lout = s * (double)in, xf = (double)x;
	double lo = r->roi[d], hi = r->roi[r->rank + d], xo;

	*outside = false;
	switch (r->ctm) {
	case ML_CT_PYTORCH_HALF_PIXEL:
		return out > 1 ? (xf + 0.5) / s - 0.5 : 0;
	case ML_CT_ALIGN_CORNERS:
		/* The reference divides by the unrounded output length. */
		return lout == 1 ? 0 : xf * (double)(in - 1) / (lout - 1);
	case ML_CT_ASYMMETRIC:
		return xf / s;
	case ML_CT_TF_HALF_PIXEL_FOR_NN:
		return (xf + 0.5) / s;
	case ML_CT_TF_CROP_AND_RESIZE:
		if (lout > 1)
			xo = lo * (double)(in - 1) + xf * (hi - lo) * (double)(in - 1) / (lout - 1);
		else
			xo = 0.5 * (lo + hi) * (double)(in - 1);
		*outside = xo < 0 || xo > (double)(in - 1);
		return xo;
	case ML_CT_HALF_PIXEL_SYMMETRIC: {
		double adj = (double)out / lout, off = (double)in / 2 * (1 - adj);
		return off + (xf + 0.5) / s - 0.5;
	}
	default:
		return (xf + 0.5) / s - 0.5;
	}
}

static int64_t
nearest_index(const struct ml_resize *r, int d, double xo)
{
	double f = floor(xo), fr = xo - f;

	if (r->nearest == ML_NM_SIMPLE)
		return r->scale[d] < 1 ? (int64_t)ceil(xo) : (int64_t)xo;
	if (fr == 0)
		return (int64_t)f;
	switch (r->nearest) {
	case ML_NM_ROUND_PREFER_CEIL:
		return fr < 0.5 ? (int64_t)f : (int64_t)f + 1;
	case ML_NM_FLOOR:
		return (int64_t)f;
	case ML_NM_CEIL:
		return (int64_t)f + 1;
	default:
		return fr <= 0.5 ? (int64_t)f : (int64_t)f + 1;
	}
}

/* dim_taps: the taps of every output coordinate of dim d. */
static void
dim_taps(const struct ml_resize *r, int d, int64_t in, int64_t out, struct taps *t)
{
	for (int64_t x = 0; x < out; x++) {
		struct taps *p = &t[x];
		bool outside;
		double xo = orig_coord(r, d, x, in, out, &outside);
		if (outside || !isfinite(xo)) {
			p->n = 0;
			continue;
		}
		if (xo < -(double)in - 4)
			xo = -(double)in - 4;
		if (xo > 2.0 * (double)in + 4)
			xo = 2.0 * (double)in + 4;
		if (r->mode == ML_RS_NEAREST) {
			p->n = 1;
			p->idx[0] = nearest_index(r, d, xo);
			p->w[0] = 1;
		} else {
			/* x0 and the ratio in (0, 1], as the reference picks its neighbours. */
			int64_t x0 = (int64_t)ceil(xo) - 1;
			double fr = xo - (double)x0;
			if (r->mode == ML_RS_LINEAR) {
				p->n = 2;
				p->idx[0] = x0;
				p->idx[1] = x0 + 1;
				p->w[0] = 1 - fr;
				p->w[1] = fr;
			} else {
				p->n = 4;
				for (int k = 0; k < 4; k++)
					p->idx[k] = x0 - 1 + k;
				cubic_coeffs(fr, r->cubic_a, p->w);
			}
		}
		double sum = 0;
		for (int k = 0; k < p->n; k++) {
			if (r->exclude_outside && (p->idx[k] < 0 || p->idx[k] >= in))
				p->w[k] = 0;
			sum += p->w[k];
			p->idx[k] = ML_MAX(0, ML_MIN(in - 1, p->idx[k]));
		}
		if (r->exclude_outside && sum != 0)
			for (int k = 0; k < p->n; k++)
				p->w[k] /= sum;
		/* Drop the taps of weight 0, so identity dims cost one. */
		int m = 0;
		for (int k = 0; k < p->n; k++)
			if (p->w[k] != 0) {
				p->idx[m] = p->idx[k];
				p->w[m] = p->w[k];
				m++;
			}
		if (m == 0) {
			p->w[0] = 0;
			m = 1;
		}
		p->n = m;
	}
}

struct rjob {
	const struct ml_tval *x, *o;
	const struct ml_resize *r;
	struct taps *t[ML_MAX_RANK];
	int64_t st[ML_MAX_RANK];	/* element strides of x */
	size_t es;
	bool nearest;
	_Alignas(16) uint8_t extra[16];	/* the extrapolation value as an element */
};

static double
get(const struct ml_tval *x, int64_t i)
{
	if (x->dtype == ML_F32)
		return ((const float *)x->data)[i];
	return ml_get_f64(x->data, x->dtype, i);
}

static void
put(const struct ml_tval *o, int64_t i, double v)
{
	if (o->dtype == ML_F32)
		((float *)o->data)[i] = (float)v;
	else if (ml_dtype_is_int(o->dtype))
		ml_set_f64(o->data, o->dtype, i, nearbyint(v));
	else
		ml_set_f64(o->data, o->dtype, i, v);
}

static void
resize_rows(void *ctx, int64_t b, int64_t e)
{
	const struct rjob *j = ctx;
	int r = j->o->rank;
	int64_t on = j->o->dims[r - 1];
	const struct taps *tl = j->t[r - 1];
	int64_t coff[MAX_COMBOS];
	double cw[MAX_COMBOS];
	size_t es = j->es;

	for (int64_t row = b; row < e; row++) {
		int64_t coord[ML_MAX_RANK], rem = row;
		bool outside = false;
		for (int d = r - 2; d >= 0; d--) {
			coord[d] = rem % j->o->dims[d];
			rem /= j->o->dims[d];
			if (j->t[d][coord[d]].n == 0)
				outside = true;
		}
		uint8_t *dst = (uint8_t *)j->o->data + (size_t)(row * on) * es;
		if (outside) {
			for (int64_t x = 0; x < on; x++)
				memcpy(dst + (size_t)x * es, j->extra, es);
			continue;
		}
		/* The tap combinations of the outer dims: offsets and weights. */
		int nc = 1;
		coff[0] = 0;
		cw[0] = 1;
		for (int d = 0; d < r - 1; d++) {
			const struct taps *p = &j->t[d][coord[d]];
			int m = nc;
			for (int k = p->n - 1; k >= 0; k--)
				for (int q = 0; q < m; q++) {
					coff[k * m + q] = coff[q] + p->idx[k] * j->st[d];
					cw[k * m + q] = cw[q] * p->w[k];
				}
			nc = m * p->n;
		}
		for (int64_t x = 0; x < on; x++) {
			const struct taps *p = &tl[x];
			if (p->n == 0) {
				memcpy(dst + (size_t)x * es, j->extra, es);
				continue;
			}
			if (j->nearest) {
				memcpy(dst + (size_t)x * es,
				       (const uint8_t *)j->x->data + (size_t)(coff[0] + p->idx[0]) * es, es);
				continue;
			}
			double acc = 0;
			for (int q = 0; q < nc; q++)
				for (int k = 0; k < p->n; k++)
					acc += cw[q] * p->w[k] * get(j->x, coff[q] + p->idx[k]);
			put(j->o, row * on + x, acc);
		}
	}
}

int
ml_cpu_resize(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *o = c->out[0];
	struct ml_resize r;
	struct rjob j = { .x = x, .o = o, .r = &r };
	int rc = 0;

	ML_TRY(ml_elem_size(c, x, &j.es));
	ML_TRY(ml_shape_resize(c, x, &r));
	if (o->rank != x->rank || o->dtype != x->dtype)
		return ml_opfail(c, ML_EINVAL, "output shape does not match");
	for (int d = 0; d < x->rank; d++)
		if (r.out[d] != o->dims[d] || !(r.scale[d] > 0 || x->dims[d] == 0))
			return ml_opfail(c, ML_EINVAL, "output shape does not match");
	if (r.antialias && r.mode != ML_RS_NEAREST)
		return ml_opfail(c, ML_ENOTSUP, "antialias is not supported");
	if (r.mode != ML_RS_NEAREST && !ml_dtype_is_float(x->dtype) && !ml_dtype_is_int(x->dtype))
		return ml_opfail(c, ML_ENOTSUP, "mode needs a numeric dtype, not %s",
				 ml_dtype_name(x->dtype));
	if (ml_tval_numel(o) == 0)
		return 0;
	if (ml_tval_numel(x) == 0)
		return ml_opfail(c, ML_EINVAL, "cannot resize an empty input to a non-empty output");
	if (x->rank == 0) {
		memcpy(o->data, x->data, j.es);
		return 0;
	}
	if (j.es > sizeof j.extra)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s", ml_dtype_name(x->dtype));
	j.nearest = r.mode == ML_RS_NEAREST;
	ml_set_f64(j.extra, x->dtype, 0, r.extrapolation);
	int64_t combos = 1, s = 1;
	for (int d = x->rank - 1; d >= 0; d--) {
		j.st[d] = s;
		s *= x->dims[d];
		if (d < x->rank - 1)
			combos *= j.nearest ? 1 : r.mode == ML_RS_LINEAR ? 2 : 4;
	}
	if (combos > MAX_COMBOS)
		return ml_opfail(c, ML_ENOTSUP, "resizing this many dims at once");
	for (int d = 0; d < x->rank; d++) {
		if ((j.t[d] = ml_malloc((size_t)o->dims[d] * sizeof *j.t[d])) == NULL) {
			rc = ml_opfail(c, ML_ENOMEM, "out of memory");
			goto done;
		}
		dim_taps(&r, d, x->dims[d], o->dims[d], j.t[d]);
	}
	int64_t on = o->dims[o->rank - 1], rows = ml_tval_numel(o) / on;
	if (ml_tval_numel(o) < PAR_ELEMS)
		resize_rows(&j, 0, rows);
	else
		ml_parallel_for(rows, ML_MAX(1, PAR_ELEMS / 4 / on), resize_rows, &j);
done:
	for (int d = 0; d < x->rank; d++)
		ml_free(j.t[d]);
	return rc;
}
