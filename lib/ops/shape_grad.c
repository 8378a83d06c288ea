/*
 * shape_grad.c: gradient rules of the shape family (lib/ops/gradrule.h has
 * the rule interface): layout ops route the gradient back through the
 * inverse layout change (Reshape back, inverse Transpose, Split for
 * Concat, Pad for Slice, a scatter-add for Gather, a sum for Expand).
 */
#include "ops/gradrule.h"

#define DY (c->dy[0])
#define TRY_DX(i, v) do { if (c->need[(i)]) { int r_ = (v); if (r_ < 0) return r_; \
	c->dx[(i)] = r_; } } while (0)

static int
g_identity(struct ml_gctx *c)
{
	c->dx[0] = DY;
	return 0;
}

/* trailing: the product of dims 1.. of t, -1 when one is unknown. */
static int64_t
trailing(const struct ml_tensor *t)
{
	int64_t p = 1;
	for (int d = 1; d < t->rank; d++) {
		if (t->dims[d] < 0)
			return -1;
		p *= t->dims[d];
	}
	return t->rank >= 1 ? p : -1;
}

/*
 * Reshape, Flatten, Squeeze, Unsqueeze: the gradient is dy reshaped back.
 * An unknown batch dim is taken from dy when both sides keep it (the other
 * dims match in product), so the input need not stay alive for its shape.
 */
static int
g_reshape(struct ml_gctx *c)
{
	int x = ml_gin(c, 0), y = ml_gout(c, 0);
	const struct ml_tensor *xt = ml_gt(c, x), *yt = ml_gt(c, y);
	bool kept = xt->rank >= 1 && yt->rank >= 1 && xt->dims[0] < 0 && yt->dims[0] < 0 &&
		    trailing(xt) >= 0 && trailing(xt) == trailing(yt);
	TRY_DX(0, ml_greshape_like(c, DY, x, kept));
	return 0;
}

static int
g_transpose(struct ml_gctx *c)
{
	int x = ml_gin(c, 0);
	int r = ml_gt(c, x)->rank;
	if (r < 0)
		return ml_gfail(c, ML_ENOTSUP, "the input's rank is unknown");
	const int64_t *p;
	int64_t perm[ML_MAX_RANK], inv[ML_MAX_RANK];
	int np = ml_attr_ints(ml_gfwd(c), "perm", &p);
	for (int d = 0; d < r; d++)
		perm[d] = np == r ? p[d] : r - 1 - d;
	for (int d = 0; d < r; d++) {
		if (perm[d] < 0 || perm[d] >= r)
			return ml_gfail(c, ML_EINVAL, "perm is out of range");
		inv[perm[d]] = d;
	}
	int o = ml_g1(c, "Transpose", DY);
	if (o >= 0 && ml_node_set_ints(c->g, ml_glast(c), "perm", r, inv) < 0)
		return ml_gfail(c, ML_ENOMEM, "out of memory");
	TRY_DX(0, o);
	return 0;
}

static int
g_concat(struct ml_gctx *c)
{
	const struct ml_node *n = ml_gfwd(c);
	int k = n->n_in, y = ml_gout(c, 0);
	int r = ml_gt(c, y)->rank;
	int64_t axis = ml_attr_int(n, "axis", 0);
	if (r < 0)
		return ml_gfail(c, ML_ENOTSUP, "the output's rank is unknown");
	if (axis < 0)
		axis += r;
	if (axis < 0 || axis >= r)
		return ml_gfail(c, ML_EINVAL, "axis is out of range");
	if (k > 16)
		return ml_gfail(c, ML_ENOTSUP, "more than 16 inputs are not supported");
	int64_t sizes[16];
	for (int i = 0; i < k; i++) {
		int t = ml_gin(c, i);
		sizes[i] = t >= 0 && ml_gt(c, t)->rank == r ? ml_gt(c, t)->dims[axis] : -1;
		if (sizes[i] < 0)
			return ml_gfail(c, ML_ENOTSUP, "input %d's size along the axis is unknown", i);
	}
	int in[2] = { DY, ml_gints(c, k, sizes) }, out[16];
	int ni = ml_gnode(c, "Split", 2, in, k, out, false);
	if (ni < 0)
		return ni;
	if (ml_node_set_int(c->g, ni, "axis", axis) < 0)
		return ml_gfail(c, ML_ENOMEM, "out of memory");
	for (int i = 0; i < k; i++)
		if (c->need[i])
			c->dx[i] = out[i];
	return 0;
}

/* const_ints: the values of constant tensor t (int32 or int64), or -1. */
static int
const_ints(struct ml_gctx *c, int t, int64_t *v, int max)
{
	if (t < 0)
		return 0;
	const struct ml_tensor *s = ml_gt(c, t);
	if ((s->kind != ML_TK_CONST && s->kind != ML_TK_PARAM) || s->data == NULL ||
	    (s->dtype != ML_I64 && s->dtype != ML_I32) || s->rank != 1 || s->dims[0] > max)
		return -1;
	for (int64_t i = 0; i < s->dims[0]; i++)
		v[i] = ml_get_i64(s->data, s->dtype, i);
	return (int)s->dims[0];
}

/* Slice with constant starts, ends, axes and unit steps: dy padded with zeros. */
static int
g_slice(struct ml_gctx *c)
{
	int x = ml_gin(c, 0);
	const struct ml_tensor *xt = ml_gt(c, x);
	int r = xt->rank;
	int64_t st[ML_MAX_RANK], en[ML_MAX_RANK], ax[ML_MAX_RANK], sp[ML_MAX_RANK];
	int ns = const_ints(c, ml_gin(c, 1), st, ML_MAX_RANK);
	int ne = const_ints(c, ml_gin(c, 2), en, ML_MAX_RANK);
	int na = const_ints(c, ml_gin(c, 3), ax, ML_MAX_RANK);
	int nsp = const_ints(c, ml_gin(c, 4), sp, ML_MAX_RANK);
	if (r < 0 || ns < 0 || ne != ns || na < 0 || nsp < 0 || (na > 0 && na != ns) ||
	    (nsp > 0 && nsp != ns))
		return ml_gfail(c, ML_ENOTSUP, "starts, ends, axes and steps must be constants "
				"(and the opset-10 form)");
	int64_t pads[2 * ML_MAX_RANK] = { 0 };
	for (int i = 0; i < ns; i++) {
		int64_t a = na > 0 ? ax[i] : i;
		if (a < 0)
			a += r;
		if (a < 0 || a >= r)
			return ml_gfail(c, ML_EINVAL, "axis %lld is out of range", (long long)a);
		if (nsp > 0 && sp[i] != 1)
			return ml_gfail(c, ML_ENOTSUP, "steps other than 1 are not supported");
		int64_t dim = xt->dims[a];
		if (dim < 0)
			return ml_gfail(c, ML_ENOTSUP, "the size of sliced dim %lld is unknown",
					(long long)a);
		int64_t s = st[i] < 0 ? st[i] + dim : st[i], e = en[i] < 0 ? en[i] + dim : en[i];
		s = ML_MAX(0, ML_MIN(s, dim));
		e = ML_MAX(s, ML_MIN(e, dim));
		pads[a] = s;
		pads[r + a] = dim - e;
	}
	TRY_DX(0, ml_g2(c, "Pad", DY, ml_gints(c, 2 * r, pads)));
	return 0;
}

/* Gather along axis 0 (embeddings): a scatter-add of dy into zeros. */
static int
g_gather(struct ml_gctx *c)
{
	int x = ml_gin(c, 0), idx = ml_gin(c, 1);
	if (ml_attr_int(ml_gfwd(c), "axis", 0) != 0)
		return ml_gfail(c, ML_ENOTSUP, "only axis 0 is supported");
	if (!c->need[0])
		return 0;
	int64_t last = -1;
	int zero = ml_g2(c, "Mul", x, ml_gscalar(c, ml_gdtype(c, x), 0));
	int ix = ml_g2(c, "Unsqueeze", idx, ml_gints(c, 1, &last));
	int r = ml_g3(c, "ScatterND", zero, ix, DY);
	if (r >= 0 && ml_node_set_string(c->g, ml_glast(c), "reduction", "add") < 0)
		return ml_gfail(c, ML_ENOMEM, "out of memory");
	TRY_DX(0, r);
	return 0;
}

static int
g_expand(struct ml_gctx *c)
{
	TRY_DX(0, ml_gsum_to(c, DY, ml_gout(c, 0), ml_gin(c, 0)));
	return 0;
}

const struct ml_grad_rule ml_grad_rules_shape[] = {
	{ ML_OP_IDENTITY, g_identity },
	{ ML_OP_RESHAPE, g_reshape },
	{ ML_OP_FLATTEN, g_reshape },
	{ ML_OP_SQUEEZE, g_reshape },
	{ ML_OP_UNSQUEEZE, g_reshape },
	{ ML_OP_TRANSPOSE, g_transpose },
	{ ML_OP_CONCAT, g_concat },
	{ ML_OP_SLICE, g_slice },
	{ ML_OP_GATHER, g_gather },
	{ ML_OP_EXPAND, g_expand },
	{ .op = ML_OP_NONE },
};
