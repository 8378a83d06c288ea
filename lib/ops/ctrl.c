/*
 * ctrl.c: definitions of the control-flow ops If, Loop and Scan. Their
 * bodies are GRAPH attributes; output types come from the bodies' declared
 * outputs, and sizes are left unknown (the kernels allocate), since a loop
 * may change the shape of what it carries.
 */
#include "ml_impl.h"

static const struct ml_graph *
body(struct ml_opctx *c, const char *name)
{
	const struct ml_attr *a = ml_attr_find(c->node, name);
	return a != NULL && a->type == ML_ATTR_GRAPH && a->n == 1 ? a->graphs[0] : NULL;
}

/* set out from a body's declared output i: dtype and rank, sizes unknown */
static void
from_decl(struct ml_tval *out, const struct ml_graph *b, int i, int extra_rank)
{
	out->dtype = ML_UNDEF;
	out->rank = -1;
	if (b == NULL || i < 0 || i >= b->n_outputs)
		return;
	const struct ml_tensor *t = b->tensors[b->outputs[i]];
	out->dtype = t->dtype;
	if (t->rank >= 0 && t->rank + extra_rank <= ML_MAX_RANK) {
		out->rank = t->rank + extra_rank;
		for (int d = 0; d < out->rank; d++)
			out->dims[d] = -1;
	}
}

static int
infer_if(struct ml_opctx *c)
{
	const struct ml_graph *t = body(c, "then_branch"), *f = body(c, "else_branch");
	if (t == NULL || f == NULL)
		return ml_opfail(c, ML_EINVAL, "needs then_branch and else_branch graphs");
	if (t->n_outputs != c->n_out || f->n_outputs != c->n_out)
		return ml_opfail(c, ML_EINVAL, "branches have %d and %d outputs, the node %d",
				 t->n_outputs, f->n_outputs, c->n_out);
	for (int i = 0; i < c->n_out; i++) {
		from_decl(c->out[i], t, i, 0);
		struct ml_tval alt = { 0 };
		from_decl(&alt, f, i, 0);
		if (alt.rank != c->out[i]->rank)
			c->out[i]->rank = -1;
		if (c->out[i]->dtype == ML_UNDEF)
			c->out[i]->dtype = alt.dtype;
	}
	return 0;
}

static int
infer_loop(struct ml_opctx *c)
{
	const struct ml_graph *b = body(c, "body");
	if (b == NULL)
		return ml_opfail(c, ML_EINVAL, "needs a body graph");
	int n = c->n_in - 2;
	if (n < 0 || n > c->n_out || b->n_inputs != n + 2 || b->n_outputs != c->n_out + 1)
		return ml_opfail(c, ML_EINVAL, "body signature does not match the node");
	for (int i = 0; i < n; i++) {
		const struct ml_tval *v = ML_IN(c, i + 2);
		c->out[i]->dtype = v != NULL ? v->dtype : ML_UNDEF;
		c->out[i]->rank = v != NULL ? v->rank : -1;
		for (int d = 0; d < c->out[i]->rank; d++)
			c->out[i]->dims[d] = -1;
	}
	for (int k = n; k < c->n_out; k++)
		from_decl(c->out[k], b, k + 1, 1);
	return 0;
}

static int
infer_scan(struct ml_opctx *c)
{
	const struct ml_graph *b = body(c, "body");
	int64_t m = ml_attr_int(c->node, "num_scan_inputs", -1);
	int off = c->opset < 9 ? 1 : 0;
	if (b == NULL || m < 1 || m > c->n_in - off)
		return ml_opfail(c, ML_EINVAL, "needs a body graph and num_scan_inputs");
	int n = c->n_in - off - (int)m;
	if (n > c->n_out || b->n_inputs != n + (int)m || b->n_outputs != c->n_out)
		return ml_opfail(c, ML_EINVAL, "body signature does not match the node");
	for (int i = 0; i < n; i++) {
		const struct ml_tval *v = ML_IN(c, off + i);
		c->out[i]->dtype = v != NULL ? v->dtype : ML_UNDEF;
		c->out[i]->rank = v != NULL ? v->rank : -1;
		for (int d = 0; d < c->out[i]->rank; d++)
			c->out[i]->dims[d] = -1;
	}
	for (int k = n; k < c->n_out; k++)
		from_decl(c->out[k], b, k, off ? 2 : 1);
	return 0;
}

const struct ml_opdef ml_opdefs_ctrl[] = {
	{ ML_OP_IF, 1, 1, 1, -1, infer_if, NULL },
	{ ML_OP_LOOP, 2, -1, 0, -1, infer_loop, NULL },
	{ ML_OP_SCAN, 0, -1, 1, -1, infer_scan, NULL },
	{ .op = ML_OP_NONE },
};
