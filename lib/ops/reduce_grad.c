/*
 * reduce_grad.c: gradient rules of the reduce family (lib/ops/gradrule.h has
 * the rule interface): ReduceSum and ReduceMean spread dy back over the
 * reduced axes; Softmax and LogSoftmax use their outputs.
 */
#include "ops/reduce.h"
#include "ops/gradrule.h"

#define DY (c->dy[0])
#define TRY_DX(i, v) do { if (c->need[(i)]) { int r_ = (v); if (r_ < 0) return r_; \
	c->dx[(i)] = r_; } } while (0)

/* axes_of: the axes the forward reduce node reduces, as lib/ops/reduce.c reads them. */
static int
axes_of(struct ml_gctx *c, bool *mask, bool *noop)
{
	struct ml_tval xv, av, *in[2] = { &xv, NULL };
	struct ml_opctx oc;
	bool known;
	int x = ml_gin(c, 0), a = ml_gin(c, 1);
	ml_graph_tval(c->g, x, &xv);
	if (a >= 0) {
		ml_graph_tval(c->g, a, &av);
		in[1] = &av;
	}
	memset(&oc, 0, sizeof oc);
	oc.g = c->g;
	oc.node = ml_gfwd(c);
	oc.n_in = a >= 0 ? 2 : 1;
	oc.in = in;
	oc.opset = ml_graph_opset(c->g, "", 17);
	oc.err = c->err;
	if (xv.rank < 0)
		return ml_gfail(c, ML_ENOTSUP, "the input's rank is unknown");
	ML_TRY(ml_reduce_axes(&oc, xv.rank, mask, &known, noop));
	if (!known)
		return ml_gfail(c, ML_ENOTSUP, "the axes are not constant");
	return 0;
}

/* spread: dy broadcast back to x's shape over the reduced axes. */
static int
spread(struct ml_gctx *c)
{
	bool mask[ML_MAX_RANK], noop;
	int x = ml_gin(c, 0);
	ML_TRY(axes_of(c, mask, &noop));
	if (noop)
		return DY;
	int r = ml_gt(c, x)->rank, g = DY;
	if (ml_attr_int(ml_gfwd(c), "keepdims", 1) == 0) {
		int64_t ax[ML_MAX_RANK];
		int n = 0;
		for (int d = 0; d < r; d++)
			if (mask[d])
				ax[n++] = d;
		if (n > 0)
			g = ml_g2(c, "Unsqueeze", g, ml_gints(c, n, ax));
	}
	return ml_g2(c, "Expand", g, ml_gshape(c, x));
}

static int
g_reduce_sum(struct ml_gctx *c)
{
	TRY_DX(0, spread(c));
	return 0;
}

/* ReduceMean: spread, times numel(y) / numel(x) (a constant when the sizes are known). */
static int
g_reduce_mean(struct ml_gctx *c)
{
	int x = ml_gin(c, 0), y = ml_gout(c, 0);
	enum ml_dtype dt = ml_gdtype(c, x);
	const struct ml_tensor *xt = ml_gt(c, x), *yt = ml_gt(c, y);
	int64_t nx = 1, ny = 1;
	for (int d = 0; d < xt->rank; d++)
		nx = xt->dims[d] < 0 || nx < 0 ? -1 : nx * xt->dims[d];
	for (int d = 0; d < yt->rank; d++)
		ny = yt->dims[d] < 0 || ny < 0 ? -1 : ny * yt->dims[d];
	int scale;
	if (nx > 0 && ny > 0 && xt->rank >= 0 && yt->rank >= 0) {
		scale = ml_gscalar(c, dt, (double)ny / (double)nx);
	} else {
		int sx = ml_g1(c, "Cast", ml_g1(c, "Size", x));
		if (sx >= 0 && ml_node_set_int(c->g, ml_glast(c), "to", dt) < 0)
			return ML_ENOMEM;
		int sy = ml_g1(c, "Cast", ml_g1(c, "Size", y));
		if (sy >= 0 && ml_node_set_int(c->g, ml_glast(c), "to", dt) < 0)
			return ML_ENOMEM;
		scale = ml_g2(c, "Div", sy, sx);
	}
	TRY_DX(0, ml_g2(c, "Mul", spread(c), scale));
	return 0;
}

/* softmax_axis: the normalised axis; ENOTSUP for the 2-D coercion before opset 13. */
static int
softmax_axis(struct ml_gctx *c, int64_t *axis)
{
	int y = ml_gout(c, 0);
	int r = ml_gt(c, y)->rank;
	int64_t op = ml_graph_opset(c->g, "", 17);
	*axis = ml_attr_int(ml_gfwd(c), "axis", op >= 13 ? -1 : 1);
	if (r < 0)
		return ml_gfail(c, ML_ENOTSUP, "the rank is unknown");
	if (*axis < 0)
		*axis += r;
	if (*axis < 0 || *axis >= r)
		return ml_gfail(c, ML_EINVAL, "axis is out of range");
	if (op < 13 && *axis != r - 1)
		return ml_gfail(c, ML_ENOTSUP, "opset %lld's flattening softmax is not supported",
				(long long)op);
	return 0;
}

/* Softmax: dx = y (dy - sum(dy y, axis)) */
static int
g_softmax(struct ml_gctx *c)
{
	int64_t ax;
	int y = ml_gout(c, 0);
	ML_TRY(softmax_axis(c, &ax));
	int s = ml_greduce_sum(c, ml_g2(c, "Mul", DY, y), 1, &ax, true);
	TRY_DX(0, ml_g2(c, "Mul", y, ml_g2(c, "Sub", DY, s)));
	return 0;
}

/* LogSoftmax: dx = dy - exp(y) sum(dy, axis) */
static int
g_log_softmax(struct ml_gctx *c)
{
	int64_t ax;
	int y = ml_gout(c, 0);
	ML_TRY(softmax_axis(c, &ax));
	int s = ml_greduce_sum(c, DY, 1, &ax, true);
	TRY_DX(0, ml_g2(c, "Sub", DY, ml_g2(c, "Mul", ml_g1(c, "Exp", y), s)));
	return 0;
}

const struct ml_grad_rule ml_grad_rules_reduce[] = {
	{ ML_OP_REDUCE_SUM, g_reduce_sum },
	{ ML_OP_REDUCE_MEAN, g_reduce_mean },
	{ ML_OP_SOFTMAX, g_softmax },
	{ ML_OP_LOG_SOFTMAX, g_log_softmax },
	{ .op = ML_OP_NONE },
};
