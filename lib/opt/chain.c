/*
 * chain.c: fusion of chains of elementwise ops into one FusedElementwise
 * node (one loop over the data instead of one pass per op), the attention
 * pattern (to ml.Attention), and the memory plan stored in the graph file.
 */
#include <stdio.h>

#include "exec/plan.h"
#include "opt/opt.h"
#include "ops/fused.h"

/* full: tensor t has y's fully known f32 shape. */
static bool
full(const struct opt *o, int t, int y)
{
	const struct ml_tensor *a = o->g->tensors[t], *b = o->g->tensors[y];
	if (!mlopt_is_f32(o, t) || !mlopt_is_f32(o, y) || a->rank != b->rank)
		return false;
	for (int d = 0; d < a->rank; d++)
		if (a->dims[d] != b->dims[d])
			return false;
	return true;
}

/* block_ok: t is an f32 operand that broadcasts to y as one block. */
static bool
block_ok(const struct opt *o, int t, int y)
{
	struct ml_tval a, b;
	int64_t inner, cnt;
	if (!mlopt_is_f32(o, t))
		return false;
	ml_graph_tval(o->g, t, &a);
	ml_graph_tval(o->g, y, &b);
	return ml_fused_block(&a, &b, &inner, &cnt) == 0;
}

/*
 * elem_step: whether node ni can be a step of a chain whose running value
 * is cur (cur -1: ni starts a chain; its main operand goes to *main). The
 * other operand goes to *arg (-1 unary), *swap is 1 when cur is the
 * second operand.
 */
static int
elem_step(const struct opt *o, int ni, int cur, int *main, int *arg, int *swap)
{
	const struct ml_node *n = &o->g->nodes[ni];
	if (o->dead[ni] || n->n_out != 1 || n->out[0] < 0)
		return -1;
	const char *type = n->op == ML_OP_GELU || n->op == ML_OP_SILU || n->domain[0] == '\0' ?
				   n->op_type : "";
	if (n->op == ML_OP_GELU && strcmp(ml_attr_str(n, "approximate", "none"), "none") != 0)
		return -1;
	int code = ml_fused_elem_op(type);
	int y = n->out[0];
	if (code < 0 || !mlopt_is_f32(o, y))
		return -1;
	if (code >= ML_FE_UNARY) {
		if (n->n_in != 1 || (cur >= 0 && n->in[0] != cur) || !full(o, n->in[0], y))
			return -1;
		*main = n->in[0];
		*arg = -1;
		*swap = 0;
		return code;
	}
	if (n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0 || n->in[0] == n->in[1])
		return -1;
	int m = -1;
	if (cur >= 0)
		m = n->in[0] == cur ? 0 : n->in[1] == cur ? 1 : -1;
	else
		m = full(o, n->in[0], y) ? 0 : full(o, n->in[1], y) ? 1 : -1;
	if (m < 0 || !full(o, n->in[m], y) || !block_ok(o, n->in[1 - m], y))
		return -1;
	*main = n->in[m];
	*arg = n->in[1 - m];
	*swap = m;
	return code;
}

int
ml_pass_fuse_elementwise(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = 0; i < g->n_nodes; i++) {
		int main, arg, swap;
		int code = elem_step(o, i, -1, &main, &arg, &swap);
		if (code < 0)
			continue;
		/* a head: its main operand is no step's single-reader result */
		int pi = mlopt_prod(o, main);
		int pm, pa, ps;
		if (pi >= 0 && mlopt_sole(o, main) == i && elem_step(o, pi, -1, &pm, &pa, &ps) >= 0)
			continue;
		int nodes[64], ins[64], args[64], swaps[64], nn = 0, nin = 1;
		const char *ops[64];
		ins[0] = main;
		int cur = -1, ni = i;
		while (ni >= 0 && nn < 64 && nin < 64) {
			int c2 = elem_step(o, ni, cur, &main, &arg, &swap);
			if (c2 < 0)
				break;
			int slot = -1;
			if (arg >= 0) {
				for (int q = 1; q < nin; q++)
					if (ins[q] == arg)
						slot = q;
				if (slot < 0) {
					slot = nin;
					ins[nin++] = arg;
				}
			}
			nodes[nn] = ni;
			ops[nn] = g->nodes[ni].op_type;
			args[nn] = slot;
			swaps[nn] = swap;
			nn++;
			cur = g->nodes[ni].out[0];
			ni = mlopt_sole(o, cur);
		}
		if (nn < 2)
			continue;
		int last = nodes[nn - 1], out = g->nodes[last].out[0];
		for (int q = 0; q < nn - 1; q++)
			mlopt_kill(o, nodes[q]);
		ML_TRY(mlopt_rewrite(o, last, "FusedElementwise", "ml", nin, ins, 1, &out, -1, nodes, nn));
		struct ml_attr *a = ml_node_add_attr(g, last, "ops", ML_ATTR_STRINGS);
		char **s = ml_graph_alloc(g, sizeof(char *) * (size_t)nn);
		int64_t av[64], sv[64];
		if (a == NULL || s == NULL)
			return ml_fail(o->e, ML_ENOMEM, "out of memory");
		for (int q = 0; q < nn; q++) {
			s[q] = (char *)ops[q];
			av[q] = args[q];
			sv[q] = swaps[q];
		}
		a->strings = s;
		a->n = nn;
		ML_TRY(ml_node_set_ints(g, last, "args", nn, av));
		ML_TRY(ml_node_set_ints(g, last, "swap", nn, sv));
		char what[48];
		snprintf(what, sizeof what, "chain of %d", nn);
		mlopt_note(o, what);
	}
	return o->changes;
}

/*
 * fuse-attention: the scaled dot-product attention of PyTorch's exports,
 * MatMul(Q, Kt) with a scalar Mul or Div on Q or on the scores (or
 * neither), Softmax over the last axis, then MatMul by V, to one
 * ml.Attention(Q, Kt, V) with the scales multiplied into its scale
 * attribute. Every inner value must have that one reader; Q, Kt and V
 * must be f32 of known shapes, one rank and equal batch dims (no
 * broadcast).
 */

/* att_scale: node ni is a Mul or Div of value t by a scalar constant: the factor in *f. */
static bool
att_scale(const struct opt *o, int ni, int t, double *f)
{
	const struct ml_node *n = &o->g->nodes[ni];
	double v;
	if (o->dead[ni] || n->n_in != 2 || n->n_out != 1 || n->out[0] < 0)
		return false;
	if (n->op == ML_OP_MUL && (n->in[0] == t || n->in[1] == t) &&
	    mlopt_scalar(o, n->in[n->in[0] == t ? 1 : 0], &v) && isfinite(v)) {
		*f = v;
		return true;
	}
	if (n->op == ML_OP_DIV && n->in[0] == t && mlopt_scalar(o, n->in[1], &v) && isfinite(v) &&
	    v != 0.0) {
		*f = 1.0 / v;
		return true;
	}
	return false;
}

/* att_shapes: q [.., L, D], kt [.., D, S] and v [.., S, Dv], known, f32, equal batch dims. */
static bool
att_shapes(const struct opt *o, int q, int kt, int v)
{
	if (!mlopt_is_f32(o, q) || !mlopt_is_f32(o, kt) || !mlopt_is_f32(o, v))
		return false;
	const struct ml_tensor *a = o->g->tensors[q], *b = o->g->tensors[kt], *c = o->g->tensors[v];
	int r = a->rank;
	if (r < 2 || b->rank != r || c->rank != r)
		return false;
	for (int d = 0; d < r - 2; d++)
		if (a->dims[d] != b->dims[d] || a->dims[d] != c->dims[d])
			return false;
	return a->dims[r - 1] == b->dims[r - 2] && b->dims[r - 1] == c->dims[r - 2];
}

int
ml_pass_fuse_attention(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = 0; i < g->n_nodes; i++) {
		if (o->dead[i] || g->nodes[i].op != ML_OP_SOFTMAX || g->nodes[i].n_in != 1)
			continue;
		const struct ml_node *sm = &g->nodes[i];
		int x = sm->in[0], p = sm->out[0];
		if (x < 0 || p < 0 || !mlopt_is_f32(o, x))
			continue;
		int rank = g->tensors[x]->rank;
		/* before opset 13 Softmax flattens from axis: the last axis is the same thing */
		int64_t axis = ml_attr_int(sm, "axis", ml_graph_opset(g, "", 13) >= 13 ? -1 : 1);
		if (rank < 2 || (axis != -1 && axis != rank - 1))
			continue;
		int nodes[5], nn = 0;
		double scale = 1.0, f;
		/* the scores: MatMul(Q, Kt), maybe scaled */
		int si = mlopt_prod(o, x), mi = si;
		if (si < 0 || mlopt_sole(o, x) != i)
			continue;
		if (g->nodes[si].op != ML_OP_MATMUL) {
			int in = g->nodes[si].in[0];
			if (g->nodes[si].op == ML_OP_MUL && mlopt_prod(o, in) < 0)
				in = g->nodes[si].in[1];
			mi = mlopt_prod(o, in);
			if (mi < 0 || !att_scale(o, si, in, &f) || mlopt_sole(o, in) != si)
				continue;
			scale *= f;
		}
		if (o->dead[mi] || g->nodes[mi].op != ML_OP_MATMUL || g->nodes[mi].n_in != 2)
			continue;
		int q = g->nodes[mi].in[0], kt = g->nodes[mi].in[1];
		/* a scale on Q */
		int qi = mlopt_prod(o, q), qs = -1;
		if (qi >= 0 && mlopt_sole(o, q) == mi && (g->nodes[qi].op == ML_OP_MUL ||
							 g->nodes[qi].op == ML_OP_DIV)) {
			const struct ml_node *qn = &g->nodes[qi];
			int src = qn->op == ML_OP_MUL && mlopt_scalar(o, qn->in[0], &f) ? qn->in[1] :
											 qn->in[0];
			if (att_scale(o, qi, src, &f) && mlopt_f32(o, src)) {
				scale *= f;
				qs = qi;
				q = src;
			}
		}
		/* the weighted sum of V */
		int oi = mlopt_sole(o, p);
		if (oi < 0 || o->dead[oi] || g->nodes[oi].op != ML_OP_MATMUL ||
		    g->nodes[oi].in[0] != p || g->nodes[oi].in[1] == p)
			continue;
		int v = g->nodes[oi].in[1], out = g->nodes[oi].out[0];
		if (!att_shapes(o, q, kt, v) || !mlopt_is_f32(o, out))
			continue;
		if (qs >= 0)
			nodes[nn++] = qs;
		nodes[nn++] = mi;
		if (si != mi)
			nodes[nn++] = si;
		nodes[nn++] = i;
		nodes[nn++] = oi;
		for (int k = 0; k < nn - 1; k++)
			mlopt_kill(o, nodes[k]);
		int in[3] = { q, kt, v };
		ML_TRY(mlopt_rewrite(o, oi, "Attention", "ml", 3, in, 1, &out, -1, nodes, nn));
		ML_TRY(ml_node_set_float(g, oi, "scale", scale));
		mlopt_note(o, "Attention");
	}
	return o->changes;
}

/*
 * plan-memory: the executor's liveness plan (best fit among the gaps of
 * the blocks still live, 64-byte aligned), made for the static shapes and
 * stored in Tensor.arena_off and Graph.arena_bytes. Activations of unknown
 * size keep -1 (the heap). Not a change: the graph is the same.
 */
int
ml_pass_plan_memory(struct opt *o)
{
	struct ml_graph *g = o->g;
	int nt = g->n_tensors;
	int *last = ml_malloc(sizeof(int) * (size_t)(nt + 1));
	int64_t *bytes = ml_malloc(sizeof(int64_t) * (size_t)(nt + 1));
	int64_t *off = ml_malloc(sizeof(int64_t) * (size_t)(nt + 1));
	int64_t *len = ml_malloc(sizeof(int64_t) * (size_t)(nt + 1));
	int rc = 0;

	if (last == NULL || bytes == NULL || off == NULL || len == NULL) {
		rc = ml_fail(o->e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int t = 0; t < nt; t++) {
		struct ml_tval v;
		last[t] = o->pinned[t] ? g->n_nodes : -1;
		bytes[t] = -1;
		if (g->tensors[t]->kind == ML_TK_ACT) {
			ml_graph_tval(g, t, &v);
			bytes[t] = ml_tval_nbytes(&v);
		}
	}
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_in; j++) {
			int t = g->nodes[i].in[j];
			if (t >= 0 && !o->pinned[t])
				last[t] = i;
		}
	/* the executor's own planner, without its in-place reuse */
	struct ml_arena a = { .bytes = bytes, .last = last, .off = off, .len = len };
	if ((rc = ml_arena_plan(g, &a, o->e)) < 0)
		goto out;
	for (int t = 0; t < nt; t++)
		g->tensors[t]->arena_off = off[t];
	g->arena_bytes = a.top;
	int64_t top = a.top;
	/* a note, but no change: nothing needs committing */
	snprintf(o->notes[0].what, sizeof o->notes[0].what, "arena of %lld bytes", (long long)top);
	o->notes[0].n = 0;
	o->nnotes = 1;
out:
	ml_free(last);
	ml_free(bytes);
	ml_free(off);
	ml_free(len);
	return rc;
}
