/*
 * autodiff.c: reverse-mode automatic differentiation as a graph to graph
 * transformation (ml_grad). The rules live with their op families, in
 * lib/ops/FAMILY_grad.c, and emit their nodes with the helpers of
 * lib/ops/gradrule.c.
 */
#include <stdarg.h>
#include <stdio.h>

#include "ops/gradrule.h"

/*
 * add_grad: acc[t] += v: the first contribution is v itself, later ones
 * are summed with Add nodes.
 */
static int
add_grad(struct ml_gctx *c, int *acc, int t, int v)
{
	if (acc[t] < 0) {
		acc[t] = v;
		return 0;
	}
	int s = ml_g2(c, "Add", acc[t], v);
	if (s < 0)
		return s;
	acc[t] = s;
	return 0;
}

int
ml_grad(struct ml_graph *g, int y, const int *x, int nx, int *gx, struct ml_err *e)
{
	int rc = 0, nn = g->n_nodes, nt = g->n_tensors, seq = 0;
	bool *from = ml_calloc((size_t)nt + 1, sizeof *from);
	bool *to = ml_calloc((size_t)nt + 1, sizeof *to);
	int *acc = ml_malloc(sizeof(int) * ((size_t)nt + 1));
	int dy[16], dx[64];
	bool need[64];

	for (int i = 0; i < nx; i++)
		gx[i] = -1;
	if (from == NULL || to == NULL || acc == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	if (y < 0 || y >= nt) {
		rc = ml_fail(e, ML_EINVAL, "y is not a tensor of the graph");
		goto out;
	}
	const struct ml_tensor *yt = g->tensors[y];
	if (!ml_dtype_is_float(yt->dtype) || yt->rank < 0 ||
	    (yt->rank > 0 && !(yt->rank == 1 && yt->dims[0] == 1))) {
		rc = ml_fail(e, ML_EINVAL, "'%s' is not a float scalar", yt->name);
		goto out;
	}
	for (int t = 0; t < nt; t++)
		acc[t] = -1;
	for (int i = 0; i < nx; i++)
		if (x[i] >= 0 && x[i] < nt && ml_dtype_is_float(g->tensors[x[i]]->dtype))
			from[x[i]] = true;
	/* what depends on x (forward), and what y depends on (backward) */
	for (int i = 0; i < nn; i++) {
		const struct ml_node *n = &g->nodes[i];
		bool f = false;
		for (int j = 0; j < n->n_in; j++)
			f |= n->in[j] >= 0 && from[n->in[j]];
		if (f)
			for (int j = 0; j < n->n_out; j++)
				if (n->out[j] >= 0 && ml_dtype_is_float(g->tensors[n->out[j]]->dtype))
					from[n->out[j]] = true;
	}
	to[y] = true;
	for (int i = nn - 1; i >= 0; i--) {
		const struct ml_node *n = &g->nodes[i];
		bool t = false;
		for (int j = 0; j < n->n_out; j++)
			t |= n->out[j] >= 0 && to[n->out[j]];
		if (t)
			for (int j = 0; j < n->n_in; j++)
				if (n->in[j] >= 0)
					to[n->in[j]] = true;
	}
	struct ml_gctx c = { .g = g, .node = 0, .dy = dy, .dx = dx, .need = need, .err = e,
			     .seq = &seq };
	if (!from[y])
		goto done;
	/* the seed: d y / d y = 1 */
	{
		int64_t one_dims[1] = { 1 };
		uint8_t buf[16] = { 0 };
		ml_set_f64(buf, yt->dtype, 0, 1.0);
		char nm[64];
		snprintf(nm, sizeof nm, "backward/seed_%s", yt->name);
		int s = ml_graph_tensor(g, nm);
		if (s < 0 || (rc = ml_graph_set_data(g, s, ML_TK_CONST, yt->dtype, yt->rank, one_dims,
						     buf, ml_dtype_size(yt->dtype), e)) < 0) {
			rc = rc < 0 ? rc : ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
		acc[y] = s;
	}
	for (int i = nn - 1; i >= 0; i--) {
		const struct ml_node *n = &g->nodes[i];
		bool any_dy = false, any_need = false;
		if (n->n_out > 16 || n->n_in > 64) {
			rc = ml_fail(e, ML_ENOTSUP, "node '%s' (%s): gradients of nodes with over 64 "
				     "inputs or 16 outputs are not supported", n->name, n->op_type);
			goto out;
		}
		for (int j = 0; j < n->n_out; j++) {
			dy[j] = n->out[j] >= 0 && n->out[j] < nt ? acc[n->out[j]] : -1;
			any_dy |= dy[j] >= 0;
		}
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			need[j] = t >= 0 && t < nt && from[t] && to[t] &&
				  ml_dtype_is_float(g->tensors[t]->dtype);
			any_need |= need[j];
			dx[j] = -1;
		}
		if (!any_dy || !any_need)
			continue;
		ml_grad_fn fn = n->op != ML_OP_NONE ? ml_grad_rule_get(n->op) : NULL;
		c.node = i;
		if (fn == NULL) {
			rc = ml_fail(e, ML_ENOTSUP, "op '%s' (node '%s') has no gradient rule",
				     n->op_type, n->name);
			goto out;
		}
		if ((rc = fn(&c)) < 0)
			goto out;
		n = &g->nodes[i];
		for (int j = 0; j < n->n_in; j++)
			if (need[j] && dx[j] >= 0) {
				/* the same tensor may feed two inputs of one node */
				if ((rc = add_grad(&c, acc, n->in[j], dx[j])) < 0)
					goto out;
				n = &g->nodes[i];
			}
	}
done:
	for (int i = 0; i < nx; i++)
		if (x[i] >= 0 && x[i] < nt)
			gx[i] = acc[x[i]];
	rc = 0;
out:
	ml_free(from);
	ml_free(to);
	ml_free(acc);
	return rc;
}
