/*
 * gradrule.h: the gradient rule interface (gradrule.c): what a rule sees
 * of the node it differentiates, the helpers it emits nodes with, and the
 * per-family rule tables that ml_grad (lib/train/autodiff.c) merges. It
 * belongs to the op definitions, below the layers that differentiate.
 *
 * Writing a rule. Each op family keeps its rules in lib/ops/FAMILY_grad.c,
 * one table per family:
 *
 *	const struct ml_grad_rule ml_grad_rules_FAMILY[] = {
 *		{ ML_OP_RELU, grad_relu },
 *		{ .op = ML_OP_NONE },
 *	};
 *
 * and a family with a table has grad 1 in its F(FAMILY, grad) row of
 * lib/families.def, which declares and collects the tables. ml_grad calls
 * a rule once per node on the path from the requested inputs to y, in
 * reverse topological order, with c->dy[j] the gradient (a tensor index of
 * the graph) flowing into output j, -1 where none does (at least one is
 * set). The rule sets c->dx[i] for every input i with c->need[i] (the
 * others may stay -1; c->dx[] starts at -1), using the helpers below to
 * append ordinary nodes, and returns 0, or a negative ML_E* code with
 * c->err filled (ml_gfail). The gradient of an input has
 * the input's shape and dtype: rules of broadcasting ops sum it back with
 * ml_gsum_to. The forward node and its tensors have inferred shapes
 * (dims may be -1 for a symbolic batch size); new tensors have none until
 * the caller infers again, so rules decide by the forward tensors' shapes.
 * Rules must not hold a struct ml_node pointer across a helper call (the
 * node array grows): use ml_gfwd(c) again.
 *
 * Example, a straight-through estimator (dx = dy) and a rule for y = x * x:
 *
 *	static int st(struct ml_gctx *c) { c->dx[0] = c->dy[0]; return 0; }
 *	static int
 *	square(struct ml_gctx *c)
 *	{
 *		int x = ml_gin(c, 0), two = ml_gscalar(c, ml_gdtype(c, x), 2);
 *		int t = ml_g2(c, "Mul", x, two);
 *		c->dx[0] = ml_g2(c, "Mul", c->dy[0], t);
 *		return c->dx[0] < 0 ? c->dx[0] : 0;
 *	}
 *
 * Helpers return a tensor index (>= 0) or a negative code, and they
 * propagate a negative argument unchanged, so chains need one check at
 * the end, as above.
 */
#ifndef ML_OPS_GRADRULE_H
#define ML_OPS_GRADRULE_H

#include "ml_impl.h"

struct ml_gctx {
	struct ml_graph *g;
	int node;		/* index of the forward node in g->nodes */
	const int *dy;		/* per output of the node: incoming gradient, or -1 */
	int *dx;		/* per input: the rule's result, -1 for none */
	const bool *need;	/* per input: whether its gradient is wanted */
	struct ml_err *err;
	int *seq;		/* counter that keeps generated names unique */
};

typedef int (*ml_grad_fn)(struct ml_gctx *c);

struct ml_grad_rule {
	enum ml_op op;
	ml_grad_fn fn;
};

/*
 * The rule tables of the families with grad 1 in lib/families.def
 * (ml_grad_rules_NAME in lib/ops/NAME_grad.c). ML_GRAD_IF_##grad(x) is x
 * for such a family, nothing for the others.
 */
#define ML_GRAD_IF_1(...) __VA_ARGS__
#define ML_GRAD_IF_0(...)
#define F(name, grad) ML_GRAD_IF_##grad(extern const struct ml_grad_rule ml_grad_rules_##name[];)
#include "families.def"
#undef F

/* ml_grad_rule_get: the rule of op, or NULL. */
ml_grad_fn ml_grad_rule_get(enum ml_op op);

/* ml_gfwd: the forward node (borrowed; invalid after the next helper call). */
static inline const struct ml_node *
ml_gfwd(const struct ml_gctx *c)
{
	return &c->g->nodes[c->node];
}

/* ml_gin / ml_gout: tensor index of forward input i / output j (-1 when absent). */
int ml_gin(const struct ml_gctx *c, int i);
int ml_gout(const struct ml_gctx *c, int j);
/* ml_gt: borrow tensor t of the graph. */
static inline const struct ml_tensor *
ml_gt(const struct ml_gctx *c, int t)
{
	return c->g->tensors[t];
}
/* ml_gdtype: the dtype of tensor t. */
enum ml_dtype ml_gdtype(const struct ml_gctx *c, int t);

/* ml_gfail: fail with "gradient of node 'N' (OP): " and the message. */
int ml_gfail(struct ml_gctx *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * ml_gnode: append node op ("Name" of the ONNX domain, or "ml.Name") with
 * inputs in[0..n_in-1] (-1: omitted) and n_out new outputs, whose indices
 * go to out[] (out may be NULL when n_out is 0). The node copies the
 * forward node's attributes when copy_attrs is set. Returns the new node's
 * index, or a negative code.
 */
int ml_gnode(struct ml_gctx *c, const char *op, int n_in, const int *in, int n_out, int *out,
	     bool copy_attrs);
/* ml_g1 / ml_g2 / ml_g3: one-output nodes; return the output tensor. */
int ml_g1(struct ml_gctx *c, const char *op, int a);
int ml_g2(struct ml_gctx *c, const char *op, int a, int b);
int ml_g3(struct ml_gctx *c, const char *op, int a, int b, int d);
/* ml_glast: the node appended last (to add attributes to it). */
int ml_glast(const struct ml_gctx *c);

/* Constants: a scalar of dtype dt, an int64 vector, any array. */
int ml_gscalar(struct ml_gctx *c, enum ml_dtype dt, double v);
int ml_gints(struct ml_gctx *c, int n, const int64_t *v);
int ml_gconst(struct ml_gctx *c, enum ml_dtype dt, int rank, const int64_t *dims,
	      const void *data);

/*
 * ml_gsum_to: g (shaped like tensor from, the broadcast result) summed
 * over the dims that broadcasting added or stretched, so that it has
 * tensor to's shape. Returns g itself when nothing needs summing.
 */
int ml_gsum_to(struct ml_gctx *c, int g, int from, int to);
/* ml_gsum_to_dims: the same, for a g of the given static shape. */
int ml_gsum_to_dims(struct ml_gctx *c, int g, int rank, const int64_t *dims, int to);
/* ml_gshape: tensor t's shape as an int64 vector: a constant when known, else Shape(t). */
int ml_gshape(struct ml_gctx *c, int t);
/*
 * ml_greshape_like: g reshaped to t's shape; with batch_kept, an unknown
 * dim 0 of t is taken from g's dim 0 (Reshape's 0), so t need not be read.
 */
int ml_greshape_like(struct ml_gctx *c, int g, int t, bool batch_kept);
/* ml_greduce_sum: ReduceSum of g over axes (keepdims as given). */
int ml_greduce_sum(struct ml_gctx *c, int g, int n, const int64_t *axes, bool keepdims);

#endif
