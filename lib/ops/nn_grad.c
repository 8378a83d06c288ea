/*
 * nn_grad.c: gradient rules of the nn family (lib/ops/gradrule.h has the
 * rule interface). Gemm and 2-D MatMul gradients are single Gemm nodes
 * whose transA/transB do the transposes, bias gradients ReduceSum nodes;
 * convolutions, pools and normalizations emit the grad family's kernels.
 */
#include "ops/gradrule.h"

#define DY (c->dy[0])
#define TRY_DX(i, v) do { if (c->need[(i)]) { int r_ = (v); if (r_ < 0) return r_; \
	c->dx[(i)] = r_; } } while (0)

/* gemm: Gemm(a, b) with transA, transB and alpha; returns the output. */
static int
gemm(struct ml_gctx *c, int a, int b, bool ta, bool tb, double alpha)
{
	int r = ml_g2(c, "Gemm", a, b);
	if (r < 0)
		return r;
	int ni = ml_glast(c);
	if ((ta && ml_node_set_int(c->g, ni, "transA", 1) < 0) ||
	    (tb && ml_node_set_int(c->g, ni, "transB", 1) < 0) ||
	    (alpha != 1 && ml_node_set_float(c->g, ni, "alpha", alpha) < 0))
		return ml_gfail(c, ML_ENOMEM, "out of memory");
	return r;
}

/*
 * Gemm: Y = alpha op(A) op(B) + beta C. With G = dY,
 *   d op(A) = alpha G op(B)^T and d op(B) = alpha op(A)^T G, so
 *   dA = tA ? alpha op(B) G^T : alpha G op(B)^T,
 *   dB = tB ? alpha G^T op(A) : alpha op(A)^T G,
 *   dC = beta G summed to C's shape.
 */
static int
g_gemm(struct ml_gctx *c)
{
	const struct ml_node *n = ml_gfwd(c);
	bool ta = ml_attr_int(n, "transA", 0) != 0, tb = ml_attr_int(n, "transB", 0) != 0;
	double alpha = ml_attr_float(n, "alpha", 1), beta = ml_attr_float(n, "beta", 1);
	int a = ml_gin(c, 0), b = ml_gin(c, 1), cc = ml_gin(c, 2), y = ml_gout(c, 0);
	if (c->need[0])
		TRY_DX(0, ta ? gemm(c, b, DY, tb, true, alpha) : gemm(c, DY, b, false, !tb, alpha));
	if (c->need[1])
		TRY_DX(1, tb ? gemm(c, DY, a, true, ta, alpha) : gemm(c, a, DY, !ta, false, alpha));
	if (cc >= 0 && c->need[2]) {
		int g = DY;
		if (beta != 1)
			g = ml_g2(c, "Mul", g, ml_gscalar(c, ml_gdtype(c, y), beta));
		TRY_DX(2, ml_gsum_to(c, g, y, cc));
	}
	return 0;
}

/* swap_last: Transpose swapping the last two dims of t (rank r). */
static int
swap_last(struct ml_gctx *c, int t, int r)
{
	int64_t perm[ML_MAX_RANK];
	for (int d = 0; d < r; d++)
		perm[d] = d;
	perm[r - 2] = r - 1;
	perm[r - 1] = r - 2;
	int o = ml_g1(c, "Transpose", t);
	if (o >= 0 && ml_node_set_ints(c->g, ml_glast(c), "perm", r, perm) < 0)
		return ml_gfail(c, ML_ENOMEM, "out of memory");
	return o;
}

/* reshape2: t as [-1, k] (a Reshape with a constant shape). */
static int
reshape2(struct ml_gctx *c, int t, int64_t k)
{
	int64_t s[2] = { -1, k };
	return ml_g2(c, "Reshape", t, ml_gints(c, 2, s));
}

/*
 * MatMul: Y = A B. Two matrices: dA = G B^T, dB = A^T G as Gemm nodes.
 * A batch of matrices times one matrix B [K, N] (a dense layer over
 * [.., M, K]): dB = A'^T G' over A and G seen as [-1, K] and [-1, N] (one
 * Gemm), dA = G B^T (MatMul). Otherwise batched MatMuls with transposes,
 * summed over the broadcast batch dims.
 */
static int
g_matmul(struct ml_gctx *c)
{
	int a = ml_gin(c, 0), b = ml_gin(c, 1), y = ml_gout(c, 0);
	const struct ml_tensor *at = ml_gt(c, a), *bt = ml_gt(c, b), *yt = ml_gt(c, y);
	int ra = at->rank, rb = bt->rank, ry = yt->rank;
	if (ra < 2 || rb < 2)
		return ml_gfail(c, ML_ENOTSUP, "vector operands (rank %d and %d) are not supported",
				ra, rb);
	if (ra == 2 && rb == 2) {
		TRY_DX(0, gemm(c, DY, b, false, true, 1));
		TRY_DX(1, gemm(c, a, DY, true, false, 1));
		return 0;
	}
	if (rb == 2 && bt->dims[0] >= 0 && bt->dims[1] >= 0) {
		int64_t k = bt->dims[0], nn = bt->dims[1];
		TRY_DX(0, ml_g2(c, "MatMul", DY, swap_last(c, b, 2)));
		TRY_DX(1, gemm(c, reshape2(c, a, k), reshape2(c, DY, nn), true, false, 1));
		return 0;
	}
	/* the full broadcast shapes of dA and dB: Y's batch dims and A's or B's matrix dims */
	int64_t da[ML_MAX_RANK], db[ML_MAX_RANK];
	for (int d = 0; d < ry - 2; d++)
		da[d] = db[d] = yt->dims[d];
	da[ry - 2] = at->dims[ra - 2];
	da[ry - 1] = at->dims[ra - 1];
	db[ry - 2] = bt->dims[rb - 2];
	db[ry - 1] = bt->dims[rb - 1];
	TRY_DX(0, ml_gsum_to_dims(c, ml_g2(c, "MatMul", DY, swap_last(c, b, rb)), ry, da, a));
	TRY_DX(1, ml_gsum_to_dims(c, ml_g2(c, "MatMul", swap_last(c, a, ra), DY), ry, db, b));
	return 0;
}

/* Conv: ConvGradInput for dx; ConvGradFilter gives dW and, as its second output, dB. */
static int
g_conv(struct ml_gctx *c)
{
	int x = ml_gin(c, 0), w = ml_gin(c, 1), b = ml_gin(c, 2);
	int out[2];
	if (c->need[0]) {
		int in[3] = { DY, w, x };
		int rc = ml_gnode(c, "ml.ConvGradInput", 3, in, 1, out, true);
		if (rc < 0)
			return rc;
		c->dx[0] = out[0];
	}
	bool nb = b >= 0 && c->need[2];
	if (c->need[1] || nb) {
		int in[3] = { DY, x, w };
		int rc = ml_gnode(c, "ml.ConvGradFilter", 3, in, nb ? 2 : 1, out, true);
		if (rc < 0)
			return rc;
		if (c->need[1])
			c->dx[1] = out[0];
		if (nb)
			c->dx[2] = out[1];
	}
	return 0;
}

static int
pool(struct ml_gctx *c, const char *op)
{
	if (!c->need[0] || DY < 0)
		return 0;
	int in[2] = { DY, ml_gin(c, 0) }, out;
	int rc = ml_gnode(c, op, 2, in, 1, &out, true);
	if (rc < 0)
		return rc;
	c->dx[0] = out;
	return 0;
}

static int g_maxpool(struct ml_gctx *c) { return pool(c, "ml.MaxPoolGrad"); }
static int g_avgpool(struct ml_gctx *c) { return pool(c, "ml.AveragePoolGrad"); }

/* GlobalAveragePool: dy spread over the window, divided by its size. */
static int
g_gap(struct ml_gctx *c)
{
	int x = ml_gin(c, 0);
	const struct ml_tensor *xt = ml_gt(c, x);
	if (xt->rank < 3)
		return ml_gfail(c, ML_ENOTSUP, "the input's rank is unknown");
	int64_t s = 1;
	for (int d = 2; d < xt->rank; d++) {
		if (xt->dims[d] < 0)
			return ml_gfail(c, ML_ENOTSUP, "the spatial size is unknown");
		s *= xt->dims[d];
	}
	int sc = ml_gscalar(c, xt->dtype, 1.0 / (double)s);
	TRY_DX(0, ml_g2(c, "Mul", ml_g2(c, "Expand", DY, ml_gshape(c, x)), sc));
	return 0;
}

/* normalizations: one grad node with outputs dx, dscale, dB */
static int
norm(struct ml_gctx *c, const char *op)
{
	int in[3] = { DY, ml_gin(c, 0), ml_gin(c, 1) }, out[3];
	if (DY < 0)
		return 0;
	int rc = ml_gnode(c, op, 3, in, 3, out, true);
	if (rc < 0)
		return rc;
	for (int i = 0; i < 3; i++)
		if (c->need[i])
			c->dx[i] = out[i];
	return 0;
}

static int g_layernorm(struct ml_gctx *c) { return norm(c, "ml.LayerNormGrad"); }

/* Dropout in inference mode is the identity (DropoutTraining: lib/ops/grad_grad.c). */
static int
g_dropout(struct ml_gctx *c)
{
	const struct ml_node *n = ml_gfwd(c);
	if (n->n_in > 2 && n->in[2] >= 0)
		return ml_gfail(c, ML_ENOTSUP, "training_mode as an input is not supported "
				"(the training step graph uses ml.DropoutTraining)");
	c->dx[0] = DY;
	return 0;
}

const struct ml_grad_rule ml_grad_rules_nn[] = {
	{ ML_OP_GEMM, g_gemm },
	{ ML_OP_MATMUL, g_matmul },
	{ ML_OP_CONV, g_conv },
	{ ML_OP_MAX_POOL, g_maxpool },
	{ ML_OP_AVERAGE_POOL, g_avgpool },
	{ ML_OP_GLOBAL_AVERAGE_POOL, g_gap },
	{ ML_OP_LAYER_NORM, g_layernorm },
	{ ML_OP_DROPOUT, g_dropout },
	{ .op = ML_OP_NONE },
};
