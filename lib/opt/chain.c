/*
 * chain.c: fusion of chains of elementwise ops into one FusedElementwise
 * node (one loop over the data instead of one pass per op), the attention
 * pattern, and the memory plan stored in the graph file.
 */
#include <stdio.h>

#include "opt/opt.h"
#include "ops/fused.h"

/* full: tensor t has y's fully known f32 shape. */
static bool
full(const struct opt *o, int t, int y)
{
	const struct ml_tensor *a = o->g->tensors[t], *b = o->g->tensors[y];
	if (!opt_is_f32(o, t) || !opt_is_f32(o, y) || a->rank != b->rank)
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
	if (!opt_is_f32(o, t))
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
	if (code < 0 || !opt_is_f32(o, y))
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
		int pi = opt_prod(o, main);
		int pm, pa, ps;
		if (pi >= 0 && opt_sole(o, main) == i && elem_step(o, pi, -1, &pm, &pa, &ps) >= 0)
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
			ni = opt_sole(o, cur);
		}
		if (nn < 2)
			continue;
		int last = nodes[nn - 1], out = g->nodes[last].out[0];
		for (int q = 0; q < nn - 1; q++)
			opt_kill(o, nodes[q]);
		ML_TRY(opt_rewrite(o, last, "FusedElementwise", "ml", nin, ins, 1, &out, -1, nodes, nn));
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
		opt_note(o, what);
	}
	return o->changes;
}

/*
 * fuse-attention: not yet; the pass exists so pipelines can name it.
 */
int
ml_pass_fuse_attention(struct opt *o)
{
	(void)o;
	return 0;
}

/*
 * plan-memory: the executor's liveness plan (best fit among the gaps of
 * the blocks still live, 64-byte aligned), made for the static shapes and
 * stored in Tensor.arena_off and Graph.arena_bytes. Activations of unknown
 * size keep -1 (the heap). Not a change: the graph is the same.
 */
#define ALIGN 64

struct blk {
	int64_t off, len;
	int t;
};

int
ml_pass_plan_memory(struct opt *o)
{
	struct ml_graph *g = o->g;
	int nt = g->n_tensors;
	int *last = ml_malloc(sizeof(int) * (size_t)(nt + 1));
	struct blk *live = ml_calloc((size_t)nt + 1, sizeof *live);
	int nlive = 0;
	int64_t top = 0;

	if (last == NULL || live == NULL) {
		ml_free(last);
		ml_free(live);
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	}
	for (int t = 0; t < nt; t++) {
		last[t] = -1;
		g->tensors[t]->arena_off = -1;
	}
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_in; j++)
			if (g->nodes[i].in[j] >= 0)
				last[g->nodes[i].in[j]] = i;
	for (int t = 0; t < nt; t++)
		if (o->pinned[t])
			last[t] = g->n_nodes;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_out; j++) {
			int t = n->out[j];
			struct ml_tval v;
			if (t < 0 || g->tensors[t]->kind != ML_TK_ACT)
				continue;
			ml_graph_tval(g, t, &v);
			int64_t len = ml_tval_nbytes(&v);
			if (len < 0)
				continue;
			len = (len + ALIGN - 1) / ALIGN * ALIGN;
			if (len == 0)
				len = ALIGN;
			int64_t best = -1, best_gap = INT64_MAX, prev_end = 0;
			int best_pos = nlive;
			for (int k = 0; k <= nlive; k++) {
				int64_t next = k < nlive ? live[k].off : INT64_MAX;
				int64_t gap = next - prev_end;
				if (gap >= len && (best < 0 || gap < best_gap)) {
					best = prev_end;
					best_gap = gap;
					best_pos = k;
				}
				if (k < nlive)
					prev_end = live[k].off + live[k].len;
			}
			memmove(&live[best_pos + 1], &live[best_pos],
				sizeof *live * (size_t)(nlive - best_pos));
			live[best_pos] = (struct blk){ best, len, t };
			nlive++;
			g->tensors[t]->arena_off = best;
			top = ML_MAX(top, best + len);
		}
		for (int k = 0; k < nlive;) {
			int t = live[k].t;
			if (last[t] == i || (last[t] < 0 && g->tensors[t]->producer == i)) {
				memmove(&live[k], &live[k + 1], sizeof *live * (size_t)(nlive - k - 1));
				nlive--;
			} else {
				k++;
			}
		}
	}
	g->arena_bytes = top;
	ml_free(last);
	ml_free(live);
	/* a note, but no change: nothing needs committing */
	snprintf(o->notes[0].what, sizeof o->notes[0].what, "arena of %lld bytes", (long long)top);
	o->notes[0].n = 0;
	o->nnotes = 1;
	return 0;
}
