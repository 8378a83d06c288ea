/*
 * elem_grad.c: gradient rules of the elem family (see lib/ops/gradrule.h for
 * the rule interface). Binary ops sum their gradients back over the
 * broadcast dims; activations whose derivative is a function of their
 * input emit one ml.UnaryGrad node, Relu one ml.ReluGrad over its output.
 */
#include "ops/gradrule.h"

#define DY (c->dy[0])
#define TRY_DX(i, v) do { if (c->need[(i)]) { int r_ = (v); if (r_ < 0) return r_; \
	c->dx[(i)] = r_; } } while (0)

/* sum_in: the gradient g of the output, summed back to input i's shape. */
static int
sum_in(struct ml_gctx *c, int g, int i)
{
	return ml_gsum_to(c, g, ml_gout(c, 0), ml_gin(c, i));
}

static int
g_add(struct ml_gctx *c)
{
	TRY_DX(0, sum_in(c, DY, 0));
	TRY_DX(1, sum_in(c, DY, 1));
	return 0;
}

static int
g_sub(struct ml_gctx *c)
{
	TRY_DX(0, sum_in(c, DY, 0));
	TRY_DX(1, sum_in(c, ml_g1(c, "Neg", DY), 1));
	return 0;
}

static int
g_mul(struct ml_gctx *c)
{
	int a = ml_gin(c, 0), b = ml_gin(c, 1);
	TRY_DX(0, sum_in(c, ml_g2(c, "Mul", DY, b), 0));
	TRY_DX(1, sum_in(c, ml_g2(c, "Mul", DY, a), 1));
	return 0;
}

static int
g_div(struct ml_gctx *c)
{
	int b = ml_gin(c, 1), y = ml_gout(c, 0);
	TRY_DX(0, sum_in(c, ml_g2(c, "Div", DY, b), 0));
	/* d/db a/b = -y/b */
	TRY_DX(1, sum_in(c, ml_g1(c, "Neg", ml_g2(c, "Mul", DY, ml_g2(c, "Div", y, b))), 1));
	return 0;
}

static int
g_sum(struct ml_gctx *c)
{
	for (int i = 0; i < ml_gfwd(c)->n_in; i++)
		TRY_DX(i, sum_in(c, DY, i));
	return 0;
}

static int
g_neg(struct ml_gctx *c)
{
	TRY_DX(0, ml_g1(c, "Neg", DY));
	return 0;
}

static int
g_relu(struct ml_gctx *c)
{
	TRY_DX(0, ml_g2(c, "ml.ReluGrad", DY, ml_gout(c, 0)));
	return 0;
}

/* unary: ml.UnaryGrad(dy, x) fn=name, with the forward node's attributes (alpha, approximate). */
static int
unary(struct ml_gctx *c, const char *fn)
{
	if (!c->need[0])
		return 0;
	int in[2] = { DY, ml_gin(c, 0) }, out;
	int ni = ml_gnode(c, "ml.UnaryGrad", 2, in, 1, &out, true);
	if (ni < 0)
		return ni;
	if (ml_node_set_string(c->g, ni, "fn", fn) < 0)
		return ml_gfail(c, ML_ENOMEM, "out of memory");
	c->dx[0] = out;
	return 0;
}

static int g_leaky(struct ml_gctx *c) { return unary(c, "leaky_relu"); }
static int g_elu(struct ml_gctx *c) { return unary(c, "elu"); }
static int g_gelu(struct ml_gctx *c) { return unary(c, "gelu"); }
static int g_silu(struct ml_gctx *c) { return unary(c, "silu"); }
static int g_erf(struct ml_gctx *c) { return unary(c, "erf"); }
static int g_sigmoid(struct ml_gctx *c) { return unary(c, "sigmoid"); }
static int g_tanh(struct ml_gctx *c) { return unary(c, "tanh"); }
static int g_softplus(struct ml_gctx *c) { return unary(c, "softplus"); }
static int g_abs(struct ml_gctx *c) { return unary(c, "abs"); }

static int
g_exp(struct ml_gctx *c)
{
	TRY_DX(0, ml_g2(c, "Mul", DY, ml_gout(c, 0)));
	return 0;
}

static int
g_log(struct ml_gctx *c)
{
	TRY_DX(0, ml_g2(c, "Div", DY, ml_gin(c, 0)));
	return 0;
}

static int
g_sqrt(struct ml_gctx *c)
{
	int y = ml_gout(c, 0);
	int half = ml_gscalar(c, ml_gdtype(c, y), 0.5);
	TRY_DX(0, ml_g2(c, "Div", ml_g2(c, "Mul", DY, half), y));
	return 0;
}

static int
g_reciprocal(struct ml_gctx *c)
{
	int y = ml_gout(c, 0);
	TRY_DX(0, ml_g1(c, "Neg", ml_g2(c, "Mul", DY, ml_g2(c, "Mul", y, y))));
	return 0;
}

/* Pow(x, e): dx = dy e x^(e-1); de = dy y log(x) */
static int
g_pow(struct ml_gctx *c)
{
	int x = ml_gin(c, 0), p = ml_gin(c, 1), y = ml_gout(c, 0);
	if (c->need[0]) {
		enum ml_dtype xt = ml_gdtype(c, x);
		int pe = p;
		if (ml_gdtype(c, p) != xt) {
			pe = ml_g1(c, "Cast", p);
			if (pe >= 0 && ml_node_set_int(c->g, ml_glast(c), "to", xt) < 0)
				return ml_gfail(c, ML_ENOMEM, "out of memory");
		}
		int one = ml_gscalar(c, xt, 1);
		int t = ml_g2(c, "Mul", pe, ml_g2(c, "Pow", x, ml_g2(c, "Sub", pe, one)));
		TRY_DX(0, sum_in(c, ml_g2(c, "Mul", DY, t), 0));
	}
	TRY_DX(1, sum_in(c, ml_g2(c, "Mul", DY, ml_g2(c, "Mul", y, ml_g1(c, "Log", x))), 1));
	return 0;
}

/* Clip: the gradient passes where the output equals the input (inside [min, max]). */
static int
g_clip(struct ml_gctx *c)
{
	int x = ml_gin(c, 0), y = ml_gout(c, 0);
	int zero = ml_gscalar(c, ml_gdtype(c, x), 0);
	TRY_DX(0, ml_g3(c, "Where", ml_g2(c, "Equal", x, y), DY, zero));
	return 0;
}

/* Cast between float types: cast the gradient back. */
static int
g_cast(struct ml_gctx *c)
{
	int x = ml_gin(c, 0);
	if (!c->need[0])
		return 0;
	int r = ml_g1(c, "Cast", DY);
	if (r < 0)
		return r;
	if (ml_node_set_int(c->g, ml_glast(c), "to", ml_gdtype(c, x)) < 0)
		return ml_gfail(c, ML_ENOMEM, "out of memory");
	c->dx[0] = r;
	return 0;
}

const struct ml_grad_rule ml_grad_rules_elem[] = {
	{ ML_OP_ADD, g_add },
	{ ML_OP_SUB, g_sub },
	{ ML_OP_MUL, g_mul },
	{ ML_OP_DIV, g_div },
	{ ML_OP_SUM, g_sum },
	{ ML_OP_NEG, g_neg },
	{ ML_OP_RELU, g_relu },
	{ ML_OP_LEAKY_RELU, g_leaky },
	{ ML_OP_ELU, g_elu },
	{ ML_OP_GELU, g_gelu },
	{ ML_OP_SILU, g_silu },
	{ ML_OP_ERF, g_erf },
	{ ML_OP_SIGMOID, g_sigmoid },
	{ ML_OP_TANH, g_tanh },
	{ ML_OP_SOFTPLUS, g_softplus },
	{ ML_OP_ABS, g_abs },
	{ ML_OP_EXP, g_exp },
	{ ML_OP_LOG, g_log },
	{ ML_OP_SQRT, g_sqrt },
	{ ML_OP_RECIPROCAL, g_reciprocal },
	{ ML_OP_POW, g_pow },
	{ ML_OP_CLIP, g_clip },
	{ ML_OP_CAST, g_cast },
	{ .op = ML_OP_NONE },
};
