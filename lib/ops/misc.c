/*
 * misc.c: definitions of the misc op family: Einsum, NonMaxSuppression,
 * GridSample, RoiAlign, MaxUnpool, Det, the signal ops (windows, DFT,
 * STFT, MelWeightMatrix), the random generators and TfIdfVectorizer.
 * Einsum's parser is in misc_einsum.c.
 */
#include "ops/misc.h"

static int
need(struct ml_opctx *c, int i)
{
	if (ML_IN(c, i) == NULL)
		return ml_opfail(c, ML_EINVAL, "input %d is required", i);
	return 0;
}

static bool
is_fl(enum ml_dtype t)
{
	return t == ML_UNDEF || t == ML_F32 || t == ML_F64 || t == ML_F16 || t == ML_BF16;
}

/* check_fl: input i, when present, has a float dtype the kernels run. */
static int
check_fl(struct ml_opctx *c, int i)
{
	const struct ml_tval *t = ML_IN(c, i);

	if (t == NULL || is_fl(t->dtype))
		return 0;
	return ml_opfail(c, ML_ENOTSUP, "input %d has unsupported dtype %s", i,
			 ml_dtype_name(t->dtype));
}

static int
check_int(struct ml_opctx *c, int i)
{
	const struct ml_tval *t = ML_IN(c, i);

	if (t == NULL || t->dtype == ML_UNDEF || t->dtype == ML_I64 || t->dtype == ML_I32)
		return 0;
	return ml_opfail(c, ML_EINVAL, "input %d must be int32 or int64, not %s", i,
			 ml_dtype_name(t->dtype));
}

static int
check_rank(struct ml_opctx *c, int i, int rank)
{
	const struct ml_tval *t = ML_IN(c, i);

	if (t == NULL || t->rank < 0 || t->rank == rank)
		return 0;
	return ml_opfail(c, ML_EINVAL, "input %d must have rank %d, not %d", i, rank, t->rank);
}

static int
scalar_of(struct ml_opctx *c, int i, bool *known)
{
	const struct ml_tval *t = ML_IN(c, i);
	int64_t n;

	*known = false;
	if (t == NULL)
		return ml_opfail(c, ML_EINVAL, "input %d is required", i);
	n = ml_tval_numel(t);
	if (n >= 0 && n != 1)
		return ml_opfail(c, ML_EINVAL, "input %d must hold one value, not %lld", i,
				 (long long)n);
	if (t->dtype == ML_STRING || t->dtype == ML_C64 || t->dtype == ML_C128)
		return ml_opfail(c, ML_EINVAL, "input %d has dtype %s", i, ml_dtype_name(t->dtype));
	*known = t->data != NULL && n == 1 && t->dtype != ML_UNDEF;
	return 0;
}

int
ml_scalar_i64(struct ml_opctx *c, int i, int64_t *v, bool *known)
{
	ML_TRY(scalar_of(c, i, known));
	*v = *known ? ml_get_i64(c->in[i]->data, c->in[i]->dtype, 0) : -1;
	return 0;
}

int
ml_scalar_f64(struct ml_opctx *c, int i, double *v, bool *known)
{
	ML_TRY(scalar_of(c, i, known));
	*v = *known ? ml_get_f64(c->in[i]->data, c->in[i]->dtype, 0) : 0;
	return 0;
}

/* Einsum: numeric inputs of one dtype; the output's dims from the parsed axes. */
static int
infer_einsum(struct ml_opctx *c)
{
	struct ml_einsum e;
	enum ml_dtype dt = ML_UNDEF;

	ML_TRY(ml_einsum_parse(c, &e));
	for (int i = 0; i < c->n_in; i++) {
		enum ml_dtype t = c->in[i]->dtype;
		if (t == ML_UNDEF)
			continue;
		if (!ml_dtype_is_float(t) && !ml_dtype_is_int(t))
			return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(t));
		if (dt != ML_UNDEF && t != dt)
			return ml_opfail(c, ML_EINVAL, "inputs differ in dtype (%s, %s)",
					 ml_dtype_name(dt), ml_dtype_name(t));
		dt = t;
	}
	c->out[0]->dtype = dt;
	c->out[0]->rank = e.out_rank;
	for (int d = 0; d < e.out_rank; d++)
		c->out[0]->dims[d] = e.size[e.out[d]];
	return 0;
}

static int64_t
flops_einsum(const struct ml_opctx *c)
{
	struct ml_opctx cc = *c;
	struct ml_einsum e;
	int64_t f = 1;

	if (ml_einsum_parse(&cc, &e) < 0)
		return 0;
	for (int a = 0; a < ML_EINSUM_MAXAX; a++)
		if (e.used[a]) {
			if (e.size[a] < 0 || !ml_mul_ok(f, e.size[a], &f))
				return 0;
		}
	return ml_mul_ok(f, c->n_in, &f) ? f : 0;
}

/* NonMaxSuppression: selected_indices [count, 3] int64, count known only when run. */
static int
infer_nms(struct ml_opctx *c)
{
	const struct ml_tval *b = ML_IN(c, 0), *s = ML_IN(c, 1);
	int64_t cpb = ml_attr_int(c->node, "center_point_box", 0);

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(check_fl(c, 0));
	ML_TRY(check_fl(c, 1));
	ML_TRY(check_rank(c, 0, 3));
	ML_TRY(check_rank(c, 1, 3));
	if (cpb != 0 && cpb != 1)
		return ml_opfail(c, ML_EINVAL, "center_point_box must be 0 or 1");
	if (b->rank == 3 && b->dims[2] >= 0 && b->dims[2] != 4)
		return ml_opfail(c, ML_EINVAL, "boxes must be [batches, boxes, 4]");
	if (b->rank == 3 && s->rank == 3 &&
	    ((b->dims[0] >= 0 && s->dims[0] >= 0 && b->dims[0] != s->dims[0]) ||
	     (b->dims[1] >= 0 && s->dims[2] >= 0 && b->dims[1] != s->dims[2])))
		return ml_opfail(c, ML_EINVAL, "boxes and scores disagree in batches or boxes");
	for (int i = 2; i < 5; i++) {
		bool known;
		if (ML_IN(c, i) == NULL)
			continue;
		ML_TRY(scalar_of(c, i, &known));
		if (i == 2)
			ML_TRY(check_int(c, i));
		else
			ML_TRY(check_fl(c, i));
	}
	int64_t dims[2] = { -1, 3 };
	ml_set_shape(c->out[0], ML_I64, 2, dims);
	return 0;
}

/* GridSample: X [N, C, H, W] sampled at grid [N, Ho, Wo, 2] gives [N, C, Ho, Wo]. */
static int
infer_grid_sample(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0), *g = ML_IN(c, 1);
	const char *mode = ml_attr_str(c->node, "mode", "bilinear");
	const char *pad = ml_attr_str(c->node, "padding_mode", "zeros");

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(check_fl(c, 0));
	ML_TRY(check_fl(c, 1));
	if (strcmp(mode, "bilinear") != 0 && strcmp(mode, "nearest") != 0 &&
	    strcmp(mode, "bicubic") != 0 && strcmp(mode, "linear") != 0 &&
	    strcmp(mode, "cubic") != 0)
		return ml_opfail(c, ML_EINVAL, "mode '%s' is not bilinear, nearest or bicubic", mode);
	if (strcmp(pad, "zeros") != 0 && strcmp(pad, "border") != 0 &&
	    strcmp(pad, "reflection") != 0)
		return ml_opfail(c, ML_EINVAL, "padding_mode '%s' is not zeros, border or reflection",
				 pad);
	if ((x->rank >= 0 && x->rank != 4) || (g->rank >= 0 && g->rank != 4))
		return ml_opfail(c, ML_ENOTSUP, "only 4-D X and grid are supported");
	if (g->rank == 4 && g->dims[3] >= 0 && g->dims[3] != 2)
		return ml_opfail(c, ML_EINVAL, "grid must be [N, H, W, 2]");
	if (x->rank == 4 && g->rank == 4 && x->dims[0] >= 0 && g->dims[0] >= 0 &&
	    x->dims[0] != g->dims[0])
		return ml_opfail(c, ML_EINVAL, "X and grid differ in batch size");
	int64_t dims[4] = { -1, -1, -1, -1 };
	if (x->rank == 4) {
		dims[0] = x->dims[0];
		dims[1] = x->dims[1];
	}
	if (g->rank == 4) {
		dims[0] = dims[0] >= 0 ? dims[0] : g->dims[0];
		dims[2] = g->dims[1];
		dims[3] = g->dims[2];
	}
	ml_set_shape(c->out[0], x->dtype, 4, dims);
	return 0;
}

/* RoiAlign: Y [rois, C, output_height, output_width]. */
static int
infer_roi_align(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0), *r = ML_IN(c, 1), *bi = ML_IN(c, 2);
	const char *mode = ml_attr_str(c->node, "mode", "avg");
	const char *ctm = ml_attr_str(c->node, "coordinate_transformation_mode", "half_pixel");
	int64_t oh = ml_attr_int(c->node, "output_height", 1);
	int64_t ow = ml_attr_int(c->node, "output_width", 1);

	for (int i = 0; i < 3; i++)
		ML_TRY(need(c, i));
	ML_TRY(check_fl(c, 0));
	ML_TRY(check_fl(c, 1));
	ML_TRY(check_int(c, 2));
	ML_TRY(check_rank(c, 0, 4));
	ML_TRY(check_rank(c, 1, 2));
	ML_TRY(check_rank(c, 2, 1));
	if (strcmp(mode, "avg") != 0 && strcmp(mode, "max") != 0)
		return ml_opfail(c, ML_EINVAL, "mode '%s' is not avg or max", mode);
	if (strcmp(ctm, "half_pixel") != 0 && strcmp(ctm, "output_half_pixel") != 0)
		return ml_opfail(c, ML_EINVAL, "coordinate_transformation_mode '%s' is not supported",
				 ctm);
	if (oh < 1 || ow < 1 || oh > ((int64_t)1 << 24) || ow > ((int64_t)1 << 24))
		return ml_opfail(c, ML_EINVAL, "output_height and output_width must be positive");
	if (ml_attr_int(c->node, "sampling_ratio", 0) < 0)
		return ml_opfail(c, ML_EINVAL, "sampling_ratio must not be negative");
	if (r->rank == 2 && r->dims[1] >= 0 && r->dims[1] != 4)
		return ml_opfail(c, ML_EINVAL, "rois must be [num_rois, 4]");
	int64_t nr = r->rank == 2 ? r->dims[0] : -1;
	if (bi->rank == 1 && bi->dims[0] >= 0) {
		if (nr >= 0 && nr != bi->dims[0])
			return ml_opfail(c, ML_EINVAL, "rois and batch_indices differ in count");
		nr = bi->dims[0];
	}
	int64_t dims[4] = { nr, x->rank == 4 ? x->dims[1] : -1, oh, ow };
	ml_set_shape(c->out[0], x->dtype, 4, dims);
	return 0;
}

/* The largest kernel, stride or pad MaxUnpool takes (keeps the size arithmetic exact). */
#define ML_UNPOOL_MAX ((int64_t)1 << 30)

/*
 * MaxUnpool: the output's spatial dims are (in - 1) * stride - pads +
 * kernel, or the output_shape input's values.
 */
static int
infer_max_unpool(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0), *ind = ML_IN(c, 1), *os = ML_IN(c, 2);
	const int64_t *ks, *st, *pads;
	int nk = ml_attr_ints(c->node, "kernel_shape", &ks);
	int ns = ml_attr_ints(c->node, "strides", &st);
	int np = ml_attr_ints(c->node, "pads", &pads);

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(check_fl(c, 0));
	if (ind->dtype != ML_UNDEF && ind->dtype != ML_I64)
		return ml_opfail(c, ML_EINVAL, "I must be int64");
	if (nk < 1)
		return ml_opfail(c, ML_EINVAL, "kernel_shape is required");
	if (nk > ML_MAX_RANK - 2 || (x->rank >= 0 && x->rank != nk + 2))
		return ml_opfail(c, ML_EINVAL, "kernel_shape has %d values for rank %d", nk,
				 x->rank);
	if ((ns >= 0 && ns != nk) || (np >= 0 && np != 2 * nk))
		return ml_opfail(c, ML_EINVAL, "strides or pads do not match kernel_shape");
	for (int i = 0; i < nk; i++)
		if (ks[i] < 1 || ks[i] > ML_UNPOOL_MAX ||
		    (ns > 0 && (st[i] < 1 || st[i] > ML_UNPOOL_MAX)) ||
		    (np > 0 && (pads[i] < 0 || pads[nk + i] < 0 || pads[i] > ML_UNPOOL_MAX ||
				pads[nk + i] > ML_UNPOOL_MAX)))
			return ml_opfail(c, ML_EINVAL, "bad kernel_shape, strides or pads");
	if (x->rank >= 0 && ind->rank >= 0) {
		if (ind->rank != x->rank)
			return ml_opfail(c, ML_EINVAL, "X and I differ in shape");
		for (int d = 0; d < x->rank; d++)
			if (x->dims[d] >= 0 && ind->dims[d] >= 0 && x->dims[d] != ind->dims[d])
				return ml_opfail(c, ML_EINVAL, "X and I differ in shape");
	}
	int rank = nk + 2;
	int64_t dims[ML_MAX_RANK];
	if (os != NULL) {
		int64_t n = ml_tval_numel(os);
		if (os->dtype != ML_UNDEF && os->dtype != ML_I64)
			return ml_opfail(c, ML_EINVAL, "output_shape must be int64");
		if (n >= 0 && n != rank)
			return ml_opfail(c, ML_EINVAL, "output_shape has %lld values for rank %d",
					 (long long)n, rank);
		for (int d = 0; d < rank; d++) {
			dims[d] = os->data != NULL ? ((const int64_t *)os->data)[d] : -1;
			if (os->data != NULL && dims[d] < 0)
				return ml_opfail(c, ML_EINVAL, "output_shape has a negative dim");
		}
		if (x->rank >= 0 && os->data != NULL &&
		    (dims[0] != x->dims[0] || dims[1] != x->dims[1]))
			return ml_opfail(c, ML_EINVAL, "output_shape changes the batch or channels");
		ml_set_shape(c->out[0], x->dtype, rank, dims);
		return 0;
	}
	if (x->rank < 0) {
		c->out[0]->dtype = x->dtype;
		c->out[0]->rank = rank;
		for (int d = 0; d < rank; d++)
			c->out[0]->dims[d] = -1;
		return 0;
	}
	dims[0] = x->dims[0];
	dims[1] = x->dims[1];
	for (int i = 0; i < nk; i++) {
		int64_t in = x->dims[2 + i], s = ns > 0 ? st[i] : 1;
		int64_t p = np > 0 ? pads[i] + pads[nk + i] : 0;
		int64_t prod;
		if (in >= 0 && !ml_mul_ok(in > 0 ? in - 1 : 0, s, &prod))
			return ml_opfail(c, ML_EINVAL, "the output would be too large");
		dims[2 + i] = in < 0 ? -1 : in == 0 ? 0 : prod - p + ks[i];
		if (in >= 0 && dims[2 + i] < 0)
			return ml_opfail(c, ML_EINVAL, "the output would be empty");
	}
	ml_set_shape(c->out[0], x->dtype, rank, dims);
	return 0;
}

/* Det: X [..., M, M] gives [...]. */
static int
infer_det(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);

	ML_TRY(need(c, 0));
	ML_TRY(check_fl(c, 0));
	if (x->rank < 0) {
		c->out[0]->dtype = x->dtype;
		return 0;
	}
	if (x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "X must have rank 2 or more, not %d", x->rank);
	int64_t m = x->dims[x->rank - 2], n = x->dims[x->rank - 1];
	if (m >= 0 && n >= 0 && m != n)
		return ml_opfail(c, ML_EINVAL, "matrices must be square, not %lldx%lld",
				 (long long)m, (long long)n);
	ml_set_shape(c->out[0], x->dtype, x->rank - 2, x->dims);
	return 0;
}

/* out_dtype: the output_datatype/dtype attribute, checked to be a numeric type. */
static int
out_dtype(struct ml_opctx *c, const char *attr, enum ml_dtype def, bool float_only,
	  enum ml_dtype *dt)
{
	int64_t v = ml_attr_int(c->node, attr, def);

	if (v <= 0 || v >= ML_DTYPE_MAX)
		return ml_opfail(c, ML_EINVAL, "%s %lld is not a data type", attr, (long long)v);
	*dt = (enum ml_dtype)v;
	if (float_only ? !is_fl(*dt) : !(ml_dtype_is_float(*dt) || ml_dtype_is_int(*dt)))
		return ml_opfail(c, ML_ENOTSUP, "%s %s is not supported", attr, ml_dtype_name(*dt));
	return 0;
}

/* HannWindow, HammingWindow, BlackmanWindow: [size] of output_datatype. */
static int
infer_window(struct ml_opctx *c)
{
	enum ml_dtype dt;
	int64_t n;
	bool known;

	ML_TRY(out_dtype(c, "output_datatype", ML_F32, false, &dt));
	ML_TRY(check_int(c, 0));
	ML_TRY(ml_scalar_i64(c, 0, &n, &known));
	if (known && (n < 0 || n > ((int64_t)1 << 40)))
		return ml_opfail(c, ML_EINVAL, "size %lld is out of range", (long long)n);
	ml_set_shape(c->out[0], dt, 1, &n);
	return 0;
}

int
ml_dft_axis(struct ml_opctx *c, int rank, int *axis)
{
	int64_t a = ml_attr_int(c->node, "axis", 1);

	if (a < 0)
		a += rank;
	if (a < 1 || a > rank - 2)
		return ml_opfail(c, ML_EINVAL, "axis %lld is not a signal dim of rank %d",
				 (long long)ml_attr_int(c->node, "axis", 1), rank);
	*axis = (int)a;
	return 0;
}

/* DFT: input [batch, signal..., 1 or 2] gives [batch, signal'..., 2]. */
static int
infer_dft(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	bool onesided = ml_attr_int(c->node, "onesided", 0) != 0;
	bool inverse = ml_attr_int(c->node, "inverse", 0) != 0;
	int64_t n = -1;
	bool known = false;
	int axis;

	ML_TRY(need(c, 0));
	ML_TRY(check_fl(c, 0));
	if (ML_IN(c, 1) != NULL) {
		ML_TRY(check_int(c, 1));
		ML_TRY(ml_scalar_i64(c, 1, &n, &known));
		if (known && n < 1)
			return ml_opfail(c, ML_EINVAL, "dft_length must be positive");
		if (!known)
			n = -1;
	}
	if (x->rank < 0) {
		c->out[0]->dtype = x->dtype;
		return 0;
	}
	if (x->rank < 3)
		return ml_opfail(c, ML_EINVAL, "input must be [batch, signal..., 1 or 2]");
	int64_t last = x->dims[x->rank - 1];
	if (last >= 0 && last != 1 && last != 2)
		return ml_opfail(c, ML_EINVAL, "the last dim must be 1 (real) or 2 (complex)");
	if (onesided && (last == 2 || inverse))
		return ml_opfail(c, ML_ENOTSUP, "onesided needs a real forward transform");
	ML_TRY(ml_dft_axis(c, x->rank, &axis));
	int64_t dims[ML_MAX_RANK];
	memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
	if (ML_IN(c, 1) == NULL)
		n = x->dims[axis];
	dims[axis] = n < 0 ? -1 : onesided ? n / 2 + 1 : n;
	dims[x->rank - 1] = 2;
	ml_set_shape(c->out[0], x->dtype, x->rank, dims);
	return 0;
}

int
ml_stft_geom(struct ml_opctx *c, int64_t *flen, int64_t *step, int64_t *frames, bool *onesided)
{
	const struct ml_tval *x = ML_IN(c, 0), *w = ML_IN(c, 2);
	bool known;

	*flen = *step = *frames = -1;
	*onesided = ml_attr_int(c->node, "onesided", 1) != 0;
	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(check_int(c, 1));
	ML_TRY(ml_scalar_i64(c, 1, step, &known));
	if (known && *step < 1)
		return ml_opfail(c, ML_EINVAL, "frame_step must be positive");
	if (!known)
		*step = -1;
	if (w != NULL) {
		if (w->rank >= 0 && w->rank != 1)
			return ml_opfail(c, ML_EINVAL, "window must be 1-D");
		*flen = w->rank == 1 ? w->dims[0] : -1;
	}
	if (ML_IN(c, 3) != NULL) {
		int64_t fl;
		ML_TRY(check_int(c, 3));
		ML_TRY(ml_scalar_i64(c, 3, &fl, &known));
		if (known) {
			if (fl < 1)
				return ml_opfail(c, ML_EINVAL, "frame_length must be positive");
			if (*flen >= 0 && *flen != fl)
				return ml_opfail(c, ML_EINVAL, "frame_length %lld differs from the "
						 "window's %lld", (long long)fl, (long long)*flen);
			*flen = fl;
		}
	} else if (w == NULL) {
		return ml_opfail(c, ML_EINVAL, "needs a window or a frame_length");
	}
	if (x->rank >= 0 && x->rank != 3)
		return ml_opfail(c, ML_EINVAL, "signal must be [batch, length, 1 or 2]");
	if (x->rank == 3) {
		int64_t last = x->dims[2], len = x->dims[1];
		if (last >= 0 && last != 1 && last != 2)
			return ml_opfail(c, ML_EINVAL, "signal's last dim must be 1 or 2");
		if (last == 2 && *onesided)
			return ml_opfail(c, ML_ENOTSUP, "onesided needs a real signal");
		if (len >= 0 && *flen >= 0 && *step >= 0) {
			if (*flen > len)
				return ml_opfail(c, ML_EINVAL, "frame_length %lld exceeds the signal's "
						 "%lld", (long long)*flen, (long long)len);
			*frames = (len - *flen) / *step + 1;
		}
	}
	if (w != NULL && w->dtype != ML_UNDEF && x->dtype != ML_UNDEF && w->dtype != x->dtype)
		return ml_opfail(c, ML_EINVAL, "window and signal differ in dtype");
	return 0;
}

/* STFT: [batch, frames, bins, 2]. */
static int
infer_stft(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	int64_t flen, step, frames;
	bool onesided;

	ML_TRY(check_fl(c, 0));
	ML_TRY(check_fl(c, 2));
	ML_TRY(ml_stft_geom(c, &flen, &step, &frames, &onesided));
	int64_t dims[4] = { x->rank == 3 ? x->dims[0] : -1, frames,
			    flen < 0 ? -1 : onesided ? flen / 2 + 1 : flen, 2 };
	ml_set_shape(c->out[0], x->dtype, 4, dims);
	return 0;
}

/* MelWeightMatrix: [dft_length / 2 + 1, num_mel_bins]. */
static int
infer_mel(struct ml_opctx *c)
{
	int64_t bins, dftl, rate;
	bool k1, k2, k3;
	enum ml_dtype dt;

	ML_TRY(out_dtype(c, "output_datatype", ML_F32, false, &dt));
	for (int i = 0; i < 5; i++)
		ML_TRY(need(c, i));
	for (int i = 0; i < 3; i++)
		ML_TRY(check_int(c, i));
	ML_TRY(check_fl(c, 3));
	ML_TRY(check_fl(c, 4));
	ML_TRY(ml_scalar_i64(c, 0, &bins, &k1));
	ML_TRY(ml_scalar_i64(c, 1, &dftl, &k2));
	ML_TRY(ml_scalar_i64(c, 2, &rate, &k3));
	if ((k1 && (bins < 1 || bins > (1 << 24))) || (k2 && (dftl < 1 || dftl > (1 << 30))) ||
	    (k3 && rate < 1))
		return ml_opfail(c, ML_EINVAL, "num_mel_bins, dft_length and sample_rate must be "
				 "positive");
	int64_t dims[2] = { k2 ? dftl / 2 + 1 : -1, k1 ? bins : -1 };
	ml_set_shape(c->out[0], dt, 2, dims);
	return 0;
}

/* Bernoulli: like the input, of dtype (default: the input's). */
static int
infer_bernoulli(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	enum ml_dtype dt;

	ML_TRY(need(c, 0));
	ML_TRY(check_fl(c, 0));
	if (ml_attr_find(c->node, "dtype") != NULL)
		ML_TRY(out_dtype(c, "dtype", ML_F32, false, &dt));
	else
		dt = x->dtype;
	ml_set_shape(c->out[0], dt, x->rank, x->dims);
	return 0;
}

/* RandomUniform, RandomNormal: the shape attribute; the *Like ops: the input's shape. */
static int
infer_random(struct ml_opctx *c)
{
	enum ml_op op = c->node->op;
	bool like = op == ML_OP_RANDOM_UNIFORM_LIKE || op == ML_OP_RANDOM_NORMAL_LIKE;
	bool normal = op == ML_OP_RANDOM_NORMAL || op == ML_OP_RANDOM_NORMAL_LIKE;
	enum ml_dtype dt;

	if (normal && !(ml_attr_float(c->node, "scale", 1.0) >= 0))
		return ml_opfail(c, ML_EINVAL, "scale must not be negative");
	if (!normal && !(ml_attr_float(c->node, "high", 1.0) >= ml_attr_float(c->node, "low", 0.0)))
		return ml_opfail(c, ML_EINVAL, "high must not be below low");
	if (like) {
		const struct ml_tval *x = ML_IN(c, 0);
		ML_TRY(need(c, 0));
		if (ml_attr_find(c->node, "dtype") != NULL)
			ML_TRY(out_dtype(c, "dtype", ML_F32, true, &dt));
		else if (!is_fl(x->dtype))
			return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported",
					 ml_dtype_name(x->dtype));
		else
			dt = x->dtype;
		ml_set_shape(c->out[0], dt, x->rank, x->dims);
		return 0;
	}
	const int64_t *sh;
	int n = ml_attr_ints(c->node, "shape", &sh);
	ML_TRY(out_dtype(c, "dtype", ML_F32, true, &dt));
	if (n < 0)
		return ml_opfail(c, ML_EINVAL, "the shape attribute is required");
	if (n > ML_MAX_RANK)
		return ml_opfail(c, ML_ENOTSUP, "rank %d is over the maximum", n);
	for (int i = 0; i < n; i++)
		if (sh[i] < 0)
			return ml_opfail(c, ML_EINVAL, "shape has a negative dim");
	ml_set_shape(c->out[0], dt, n, sh);
	return 0;
}

int
ml_tfidf_width(struct ml_opctx *c, int64_t *width)
{
	const int64_t *idx, *cnt, *pool;
	const double *wts;
	int ni = ml_attr_ints(c->node, "ngram_indexes", &idx);
	int nc = ml_attr_ints(c->node, "ngram_counts", &cnt);
	int np = ml_attr_ints(c->node, "pool_int64s", &pool);
	int nw = ml_attr_floats(c->node, "weights", &wts);
	int64_t mn = ml_attr_int(c->node, "min_gram_length", 0);
	int64_t mx = ml_attr_int(c->node, "max_gram_length", 0);
	int64_t skip = ml_attr_int(c->node, "max_skip_count", 0);
	const char *mode = ml_attr_str(c->node, "mode", "");

	if (ml_attr_find(c->node, "pool_strings") != NULL)
		return ml_opfail(c, ML_ENOTSUP, "string pools are not supported");
	if (np < 0 || nc < 0 || ni < 0)
		return ml_opfail(c, ML_EINVAL, "pool_int64s, ngram_counts and ngram_indexes are "
				 "required");
	if (strcmp(mode, "TF") != 0 && strcmp(mode, "IDF") != 0 && strcmp(mode, "TFIDF") != 0)
		return ml_opfail(c, ML_EINVAL, "mode '%s' is not TF, IDF or TFIDF", mode);
	if (mn < 1 || mx < mn || mx > nc || skip < 0 || skip > (1 << 20))
		return ml_opfail(c, ML_EINVAL, "bad min_gram_length, max_gram_length or "
				 "max_skip_count");
	if (nw >= 0 && nw != ni)
		return ml_opfail(c, ML_EINVAL, "weights and ngram_indexes differ in length");
	/* ngram_counts: nondecreasing starts in the pool, each level a whole number of n-grams */
	int64_t grams = 0;
	for (int i = 0; i < nc; i++) {
		int64_t lo = cnt[i], hi = i + 1 < nc ? cnt[i + 1] : np;
		if (lo < 0 || hi < lo || hi > np || (hi - lo) % (i + 1) != 0)
			return ml_opfail(c, ML_EINVAL, "ngram_counts does not split the pool");
		grams += (hi - lo) / (i + 1);
	}
	if (nc > 0 && cnt[0] != 0)
		return ml_opfail(c, ML_EINVAL, "ngram_counts must start at 0");
	if (grams != ni)
		return ml_opfail(c, ML_EINVAL, "the pool holds %lld n-grams, ngram_indexes %d",
				 (long long)grams, ni);
	int64_t w = 0;
	for (int i = 0; i < ni; i++) {
		if (idx[i] < 0 || idx[i] > ((int64_t)1 << 30))
			return ml_opfail(c, ML_EINVAL, "ngram_indexes has a bad value");
		w = ML_MAX(w, idx[i] + 1);
	}
	*width = w;
	return 0;
}

/* TfIdfVectorizer: [C] gives [width], [N, C] gives [N, width]. */
static int
infer_tfidf(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	int64_t w;

	ML_TRY(need(c, 0));
	if (x->dtype != ML_UNDEF && x->dtype != ML_I32 && x->dtype != ML_I64)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(x->dtype));
	ML_TRY(ml_tfidf_width(c, &w));
	if (x->rank > 2 || x->rank == 0)
		return ml_opfail(c, ML_EINVAL, "X must be 1-D or 2-D");
	if (x->rank == 1) {
		ml_set_shape(c->out[0], ML_F32, 1, &w);
	} else if (x->rank == 2) {
		int64_t dims[2] = { x->dims[0], w };
		ml_set_shape(c->out[0], ML_F32, 2, dims);
	} else {
		c->out[0]->dtype = ML_F32;
	}
	return 0;
}

const struct ml_opdef ml_opdefs_misc[] = {
	{ ML_OP_EINSUM, 1, ML_EINSUM_MAXIN, 1, 1, infer_einsum, flops_einsum },
	{ ML_OP_NON_MAX_SUPPRESSION, 2, 5, 1, 1, infer_nms, NULL },
	{ ML_OP_GRID_SAMPLE, 2, 2, 1, 1, infer_grid_sample, NULL },
	{ ML_OP_ROI_ALIGN, 3, 3, 1, 1, infer_roi_align, NULL },
	{ ML_OP_MAX_UNPOOL, 2, 3, 1, 1, infer_max_unpool, NULL },
	{ ML_OP_DET, 1, 1, 1, 1, infer_det, NULL },
	{ ML_OP_HANN_WINDOW, 1, 1, 1, 1, infer_window, NULL },
	{ ML_OP_HAMMING_WINDOW, 1, 1, 1, 1, infer_window, NULL },
	{ ML_OP_BLACKMAN_WINDOW, 1, 1, 1, 1, infer_window, NULL },
	{ ML_OP_DFT, 1, 2, 1, 1, infer_dft, NULL },
	{ ML_OP_STFT, 2, 4, 1, 1, infer_stft, NULL },
	{ ML_OP_MEL_WEIGHT_MATRIX, 5, 5, 1, 1, infer_mel, NULL },
	{ ML_OP_BERNOULLI, 1, 1, 1, 1, infer_bernoulli, NULL, .flags = ML_OPF_RANDOM },
	{ ML_OP_RANDOM_UNIFORM, 0, 0, 1, 1, infer_random, NULL, .flags = ML_OPF_RANDOM },
	{ ML_OP_RANDOM_NORMAL, 0, 0, 1, 1, infer_random, NULL, .flags = ML_OPF_RANDOM },
	{ ML_OP_RANDOM_UNIFORM_LIKE, 1, 1, 1, 1, infer_random, NULL, .flags = ML_OPF_RANDOM },
	{ ML_OP_RANDOM_NORMAL_LIKE, 1, 1, 1, 1, infer_random, NULL, .flags = ML_OPF_RANDOM },
	{ ML_OP_TFIDF_VECTORIZER, 1, 1, 1, 1, infer_tfidf, NULL },
	{ .op = ML_OP_NONE },
};
