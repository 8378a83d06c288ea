/*
 * quant_q8.c: definitions of the internal int8 ops (domain "ml", family
 * quant) that mlquant's integer form uses. Their activations are uint8,
 * channels last ([N, H, W, C], or [N, C]), or [N, T, C] for a
 * batch of matrices: rows are every dim but the last), with one scale and zero point per
 * tensor given as attributes; see lib/cpu/quant_q8.h for the weight layout.
 *
 *   Q8Quantize(x f32 [N,C(,H,W)]) -> u8 channels last   scale, zero_point
 *   Q8Dequantize(x u8 channels last) -> f32 [N,C(,H,W)] scale, zero_point
 *   Q8Conv(x, w i8 packed, bias i32 [M], mult f32 [M]) -> u8 [N,OH,OW,M] or [N,M]
 *       kernel_shape, strides, pads, dilations, group (1, or C for depthwise),
 *       x_zero_point, y_zero_point, act_min, act_max, out_float (f32 output),
 *       weight_bits (8, or 7: the weights are in [-64, 63], see quant_q8.h)
 *   Q8Add(a, b) -> u8                                     a_scale, a_zero_point,
 *       b_scale, b_zero_point, y_scale, y_zero_point, act_min
 *   Q8MaxPool(x) -> u8                                    kernel_shape, strides, pads
 *   Q8GlobalAveragePool(x) -> u8 [N,1,1,C]                same scale as x
 */
#include "ops/quant.h"
#include "cpu/quant_q8.h"

static int
need_dt(struct ml_opctx *c, int i, enum ml_dtype dt, const char *what)
{
	const struct ml_tval *t = ML_IN(c, i);

	if (t == NULL)
		return ml_opfail(c, ML_EINVAL, "input %d (%s) is required", i, what);
	if (t->dtype != ML_UNDEF && t->dtype != dt)
		return ml_opfail(c, ML_EINVAL, "%s must be %s, not %s", what, ml_dtype_name(dt),
				 ml_dtype_name(t->dtype));
	return 0;
}

/* ints2: attribute name as n values (def when absent); ML_EINVAL when its length is wrong. */
static int
ints_n(struct ml_opctx *c, const char *name, int n, int64_t def, int64_t *v)
{
	const int64_t *a;
	int k = ml_attr_ints(c->node, name, &a);

	for (int i = 0; i < n; i++)
		v[i] = def;
	if (k < 0)
		return 0;
	if (k != n)
		return ml_opfail(c, ML_EINVAL, "%s must have %d values", name, n);
	memcpy(v, a, sizeof(int64_t) * (size_t)n);
	return 0;
}

int
ml_q8_geom(struct ml_opctx *c, struct ml_q8_geom *g)
{
	const struct ml_tval *x = ML_IN(c, 0), *w = ML_IN(c, 1), *b = ML_IN(c, 2);

	memset(g, 0, sizeof *g);
	ML_TRY(need_dt(c, 0, ML_U8, "x"));
	ML_TRY(need_dt(c, 1, ML_I8, "w"));
	ML_TRY(need_dt(c, 2, ML_I32, "bias"));
	ML_TRY(need_dt(c, 3, ML_F32, "mult"));
	if (b->rank != 1 && b->rank >= 0)
		return ml_opfail(c, ML_EINVAL, "bias must be a vector");
	if (ML_IN(c, 3)->rank >= 0 && ML_IN(c, 3)->rank != 1)
		return ml_opfail(c, ML_EINVAL, "mult must be a vector");
	if (w->rank >= 0 && w->rank != 1)
		return ml_opfail(c, ML_EINVAL, "w must be packed into a vector");
	g->m = b->rank == 1 ? b->dims[0] : -1;
	if (ML_IN(c, 3)->rank == 1 && g->m >= 0 && ML_IN(c, 3)->dims[0] >= 0 &&
	    ML_IN(c, 3)->dims[0] != g->m)
		return ml_opfail(c, ML_EINVAL, "bias and mult differ in length");
	g->group = ml_attr_int(c->node, "group", 1);
	g->xzero = ml_attr_int(c->node, "x_zero_point", 0);
	g->yzero = ml_attr_int(c->node, "y_zero_point", 0);
	g->lo = ml_attr_int(c->node, "act_min", 0);
	g->hi = ml_attr_int(c->node, "act_max", 255);
	g->f32out = ml_attr_int(c->node, "out_float", 0) != 0;
	int64_t wb = ml_attr_int(c->node, "weight_bits", 8);
	if (wb != 7 && wb != 8)
		return ml_opfail(c, ML_EINVAL, "weight_bits must be 7 or 8");
	g->w7 = wb == 7;
	if (g->xzero < 0 || g->xzero > 255 || g->yzero < 0 || g->yzero > 255 || g->lo < 0 ||
	    g->hi > 255 || g->lo > g->hi)
		return ml_opfail(c, ML_EINVAL, "zero points and act_min/act_max must be in [0, 255]");
	g->rank = x->rank;
	if (x->rank < 0)
		return 0;
	if (x->rank < 2 || x->rank > 4)
		return ml_opfail(c, ML_EINVAL, "x must be [N, C], [N, T, C] or [N, H, W, C], not "
				 "rank %d", x->rank);
	g->n = x->dims[0];
	if (x->rank < 4) {
		/* a matrix: the rows of [N, T, C] are N * T */
		if (x->rank == 3)
			g->n = x->dims[0] < 0 || x->dims[1] < 0 ? -1 : x->dims[0] * x->dims[1];
		g->c = x->dims[x->rank - 1];
		g->kh = g->kw = g->sh = g->sw = g->dh = g->dw = 1;
		g->h = g->w = g->oh = g->ow = 1;
	} else {
		int64_t ks[2], st[2], pd[4], dl[2];
		g->h = x->dims[1];
		g->w = x->dims[2];
		g->c = x->dims[3];
		ML_TRY(ints_n(c, "kernel_shape", 2, 1, ks));
		ML_TRY(ints_n(c, "strides", 2, 1, st));
		ML_TRY(ints_n(c, "pads", 4, 0, pd));
		ML_TRY(ints_n(c, "dilations", 2, 1, dl));
		for (int i = 0; i < 2; i++)
			if (ks[i] < 1 || ks[i] > 64 || st[i] < 1 || st[i] > 64 || dl[i] < 1 ||
			    dl[i] > 64 || pd[i] < 0 || pd[i] > 64 || pd[i + 2] < 0 || pd[i + 2] > 64)
				return ml_opfail(c, ML_EINVAL, "kernel, strides, pads or dilations "
						 "out of range");
		g->kh = ks[0], g->kw = ks[1], g->sh = st[0], g->sw = st[1];
		g->dh = dl[0], g->dw = dl[1], g->pt = pd[0], g->pl = pd[1];
		g->oh = g->ow = -1;
		if (g->h >= 0) {
			int64_t span = (g->kh - 1) * g->dh + 1;
			if (g->h + pd[0] + pd[2] < span)
				return ml_opfail(c, ML_EINVAL, "the kernel is larger than the input");
			g->oh = (g->h + pd[0] + pd[2] - span) / g->sh + 1;
		}
		if (g->w >= 0) {
			int64_t span = (g->kw - 1) * g->dw + 1;
			if (g->w + pd[1] + pd[3] < span)
				return ml_opfail(c, ML_EINVAL, "the kernel is larger than the input");
			g->ow = (g->w + pd[1] + pd[3] - span) / g->sw + 1;
		}
	}
	if (g->c >= 0 && g->group != 1 && !(x->rank == 4 && g->group == g->c && g->m == g->c))
		return ml_opfail(c, ML_ENOTSUP, "group must be 1 or the channel count (depthwise)");
	g->k = g->kh * g->kw * (g->group == 1 ? g->c : 1);
	if (g->c >= 0 && g->m >= 0 && w->rank == 1 && w->dims[0] >= 0) {
		int64_t want = g->group == 1 ? ml_q8_packed_len(g->k, g->m) : g->kh * g->kw * g->c;
		if (w->dims[0] != want)
			return ml_opfail(c, ML_EINVAL, "packed w has %lld bytes, not %lld",
					 (long long)w->dims[0], (long long)want);
	}
	return 0;
}

int
ml_q8_infer_conv(struct ml_opctx *c)
{
	struct ml_q8_geom g;

	ML_TRY(ml_q8_geom(c, &g));
	enum ml_dtype dt = g.f32out ? ML_F32 : ML_U8;
	if (g.rank < 0) {
		c->out[0]->dtype = dt;
		c->out[0]->rank = -1;
		return 0;
	}
	if (g.rank < 4) {
		const struct ml_tval *x = ML_IN(c, 0);
		int64_t d[3] = { x->dims[0], x->dims[1], g.m };
		d[g.rank - 1] = g.m;
		ml_set_shape(c->out[0], dt, g.rank, d);
	} else {
		if (g.f32out)
			return ml_opfail(c, ML_EINVAL, "out_float needs a matrix input");
		int64_t d[4] = { g.n, g.oh, g.ow, g.m };
		ml_set_shape(c->out[0], dt, 4, d);
	}
	return 0;
}

int64_t
ml_q8_flops_conv(const struct ml_opctx *c)
{
	struct ml_q8_geom g;
	struct ml_opctx cc = *c;
	struct ml_err e = { 0 };
	int64_t r;

	cc.err = &e;
	if (ml_q8_geom(&cc, &g) < 0 || g.n < 0 || g.oh < 0 || g.ow < 0 || g.m < 0 || g.k < 0)
		return 0;
	if (!ml_mul_ok(g.n * g.oh * g.ow, 2 * g.m * g.k, &r))
		return 0;
	return r;
}

static int
check_scale_attr(struct ml_opctx *c, const char *name)
{
	double s = ml_attr_float(c->node, name, 1.0);
	if (!(s > 0) || !isfinite(s))
		return ml_opfail(c, ML_EINVAL, "%s must be positive", name);
	return 0;
}

static int
check_zero_attr(struct ml_opctx *c, const char *name)
{
	int64_t z = ml_attr_int(c->node, name, 0);
	if (z < 0 || z > 255)
		return ml_opfail(c, ML_EINVAL, "%s must be in [0, 255]", name);
	return 0;
}

/* Q8Quantize: [N, C, H, W] f32 to [N, H, W, C] uint8; [N, C] and [N, T, C] keep their layout. */
int
ml_q8_infer_quant(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);

	ML_TRY(need_dt(c, 0, ML_F32, "x"));
	ML_TRY(check_scale_attr(c, "scale"));
	ML_TRY(check_zero_attr(c, "zero_point"));
	if (x->rank >= 0 && (x->rank < 2 || x->rank > 4))
		return ml_opfail(c, ML_EINVAL, "x must be rank 2, 3 or 4");
	if (x->rank == 4) {
		int64_t d[4] = { x->dims[0], x->dims[2], x->dims[3], x->dims[1] };
		ml_set_shape(c->out[0], ML_U8, 4, d);
	} else {
		ml_set_shape(c->out[0], ML_U8, x->rank, x->dims);
	}
	return 0;
}

/* Q8Dequantize: the inverse layout change, to f32. */
int
ml_q8_infer_dequant(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);

	ML_TRY(need_dt(c, 0, ML_U8, "x"));
	ML_TRY(check_scale_attr(c, "scale"));
	ML_TRY(check_zero_attr(c, "zero_point"));
	if (x->rank >= 0 && (x->rank < 2 || x->rank > 4))
		return ml_opfail(c, ML_EINVAL, "x must be rank 2, 3 or 4");
	if (x->rank == 4) {
		int64_t d[4] = { x->dims[0], x->dims[3], x->dims[1], x->dims[2] };
		ml_set_shape(c->out[0], ML_F32, 4, d);
	} else {
		ml_set_shape(c->out[0], ML_F32, x->rank, x->dims);
	}
	return 0;
}

int
ml_q8_infer_add(struct ml_opctx *c)
{
	const struct ml_tval *a = ML_IN(c, 0), *b = ML_IN(c, 1);

	ML_TRY(need_dt(c, 0, ML_U8, "a"));
	ML_TRY(need_dt(c, 1, ML_U8, "b"));
	ML_TRY(check_scale_attr(c, "a_scale"));
	ML_TRY(check_scale_attr(c, "b_scale"));
	ML_TRY(check_scale_attr(c, "y_scale"));
	ML_TRY(check_zero_attr(c, "a_zero_point"));
	ML_TRY(check_zero_attr(c, "b_zero_point"));
	ML_TRY(check_zero_attr(c, "y_zero_point"));
	ML_TRY(check_zero_attr(c, "act_min"));
	if (a->rank >= 0 && b->rank >= 0) {
		bool same = a->rank == b->rank;
		for (int i = 0; same && i < a->rank; i++)
			same = a->dims[i] < 0 || b->dims[i] < 0 || a->dims[i] == b->dims[i];
		if (!same)
			return ml_opfail(c, ML_EINVAL, "a and b differ in shape");
	}
	return ml_infer_same(c);
}

int
ml_q8_infer_maxpool(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	int64_t ks[2], st[2], pd[4];

	ML_TRY(need_dt(c, 0, ML_U8, "x"));
	ML_TRY(ints_n(c, "kernel_shape", 2, 1, ks));
	ML_TRY(ints_n(c, "strides", 2, 1, st));
	ML_TRY(ints_n(c, "pads", 4, 0, pd));
	for (int i = 0; i < 2; i++)
		if (ks[i] < 1 || ks[i] > 64 || st[i] < 1 || st[i] > 64 || pd[i] < 0 ||
		    pd[i] >= ks[i] || pd[i + 2] < 0 || pd[i + 2] >= ks[i])
			return ml_opfail(c, ML_EINVAL, "kernel, strides or pads out of range");
	if (x->rank >= 0 && x->rank != 4)
		return ml_opfail(c, ML_EINVAL, "x must be [N, H, W, C]");
	if (x->rank < 0) {
		c->out[0]->dtype = ML_U8;
		c->out[0]->rank = -1;
		return 0;
	}
	int64_t d[4] = { x->dims[0], -1, -1, x->dims[3] };
	for (int i = 0; i < 2; i++) {
		int64_t in = x->dims[1 + i];
		if (in < 0)
			continue;
		if (in + pd[i] + pd[i + 2] < ks[i])
			return ml_opfail(c, ML_EINVAL, "the kernel is larger than the input");
		d[1 + i] = (in + pd[i] + pd[i + 2] - ks[i]) / st[i] + 1;
	}
	ml_set_shape(c->out[0], ML_U8, 4, d);
	return 0;
}

int
ml_q8_infer_gap(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);

	ML_TRY(need_dt(c, 0, ML_U8, "x"));
	if (x->rank >= 0 && x->rank != 4)
		return ml_opfail(c, ML_EINVAL, "x must be [N, H, W, C]");
	if (x->rank < 0) {
		c->out[0]->dtype = ML_U8;
		c->out[0]->rank = -1;
		return 0;
	}
	int64_t d[4] = { x->dims[0], 1, 1, x->dims[3] };
	ml_set_shape(c->out[0], ML_U8, 4, d);
	return 0;
}
