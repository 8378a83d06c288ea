/*
 * inshape.c: new shapes for a model's inputs (--shape NAME=DIMS of every
 * tool): the inputs get the sizes or symbolic names given, the constant
 * targets of Reshape nodes that spell out the old sizes (a PyTorch export
 * at batch 1 holds [12, 4, 16] for (seq, batch * heads, head_dim)) are
 * rewritten, and shapes are inferred again through the whole graph.
 *
 * How a Reshape target is rewritten: every input dim that changes is a
 * "factor". The graph is inferred once more with each factor multiplied by
 * a prime of its own (the probe), node by node; the primes in each dim's
 * new/old ratio tell which dims carry which factor, and a factor's place
 * inside a dim that merges several (12*N, N*heads) is followed through
 * Transpose, Reshape, Flatten, Squeeze and Unsqueeze by its flat stride.
 * At a Reshape with a constant target, the output dim that holds the
 * factor at that stride takes -1 (0 when it copies the input's dim at the
 * same place), so the result holds for any size, a symbolic one included.
 * An Expand to a target made of constants (a ViT's class token expanded
 * to the export's batch) is found where its output, which kept the old
 * size, meets one that grew: its target then takes the new size there
 * (a number only: an Expand has no -1) and the probe starts again.
 *
 * Where this cannot be traced, the node is named and nothing changes; so
 * is the input of a failing node that keeps an old size its other inputs
 * lost (a torch.zeros(batch, ...) folded into a constant at export).
 */
#include "opt/opt.h"

#define MAX_FACTORS 8

static const int64_t primes[MAX_FACTORS] = { 7, 11, 13, 17, 19, 23, 29, 31 };

/* A changed input dim: the old size, the new size (-1: symbolic, named sym). */
struct factor {
	int64_t old, new;
	const char *sym;
};

/*
 * Where factor k sits in a tensor: dim (NONE: not there, LOST: there, but
 * where cannot be told) and q, the product of what the dim holds inside
 * the factor (the dim is outer * old * q).
 */
enum { NONE = -1, LOST = -2 };
struct loc {
	int dim;
	int64_t q;
};

struct ctx {
	struct ml_graph *g;
	struct ml_err *e;
	int nf;
	struct factor f[MAX_FACTORS];
	int cap;		/* entries of old, probe and loc (tensors) */
	struct ml_tval *old;	/* the shapes (and small values) before */
	struct ml_tval *probe;	/* the same with every factor times its prime */
	struct loc *loc;	/* cap * nf */
	int rewritten;
	struct pending *pend;	/* the new Reshape targets, one per node at most */
	int expanded;		/* of rewritten, Expand targets */
	int nforce;
	struct force {		/* an Expand whose target dim takes factor k */
		int node, dim, k;
	} force[MAX_FACTORS];
};

#define RETRY 1000		/* probe_all: a new force, infer again */

/* A Reshape target to write once the whole graph fits: node, target. */
struct pending {
	int node;
	int rank;
	int64_t tgt[ML_MAX_RANK];
};

#define LOC(c, t, k) ((c)->loc[(size_t)(t) * (size_t)(c)->nf + (size_t)(k)])

int
ml_shape_arg_parse(struct ml_shape_arg *out, const char *s, struct ml_err *e)
{
	memset(out, 0, sizeof *out);
	const char *eq = strrchr(s, '=');
	if (eq == NULL || eq == s || eq[1] == '\0')
		return ml_fail(e, ML_EINVAL, "'%s' is not NAME=D1xD2x...", s);
	const char *p = eq + 1;
	char sep = strchr(p, ',') != NULL ? ',' : 'x';
	int rank = 0;
	while (*p != '\0') {
		const char *end = strchr(p, sep);
		size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
		if (rank == ML_MAX_RANK) {
			ml_shape_arg_clear(out);
			return ml_fail(e, ML_EINVAL, "'%s' has more than %d dims", s, ML_MAX_RANK);
		}
		if (len == 0) {
			ml_shape_arg_clear(out);
			return ml_fail(e, ML_EINVAL, "'%s' has an empty dim", s);
		}
		if (p[0] == '-' || (p[0] >= '0' && p[0] <= '9')) {
			int64_t v = 0;
			bool ok = p[0] != '-';
			for (size_t i = 0; ok && i < len; i++)
				ok = p[i] >= '0' && p[i] <= '9' && v <= (INT32_MAX - (p[i] - '0')) / 10 &&
				     (v = v * 10 + (p[i] - '0'), true);
			if (!ok || v == 0) {
				ml_shape_arg_clear(out);
				return ml_fail(e, ML_EINVAL,
					       "dim %d of '%s' is '%.*s': a dim is a size from 1 to %d "
					       "or a name", rank, s, (int)len, p, INT32_MAX);
			}
			out->dims[rank] = v;
		} else {
			bool ok = (p[0] >= 'A' && p[0] <= 'Z') || (p[0] >= 'a' && p[0] <= 'z') ||
				  p[0] == '_';
			for (size_t i = 1; ok && i < len; i++)
				ok = (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= 'a' && p[i] <= 'z') ||
				     (p[i] >= '0' && p[i] <= '9') || p[i] == '_';
			if (!ok) {
				ml_shape_arg_clear(out);
				return ml_fail(e, ML_EINVAL,
					       "dim %d of '%s' is '%.*s': a dim is a size from 1 to %d "
					       "or a name", rank, s, (int)len, p, INT32_MAX);
			}
			out->dims[rank] = -1;
			if ((out->sym[rank] = strndup(p, len)) == NULL) {
				ml_shape_arg_clear(out);
				return ml_fail(e, ML_ENOMEM, "out of memory");
			}
		}
		rank++;
		p += len;
		if (*p == sep && *++p == '\0') {
			ml_shape_arg_clear(out);
			return ml_fail(e, ML_EINVAL, "'%s' has an empty dim", s);
		}
	}
	out->rank = rank;
	if ((out->name = strndup(s, (size_t)(eq - s))) == NULL) {
		ml_shape_arg_clear(out);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	return 0;
}

void
ml_shape_arg_clear(struct ml_shape_arg *a)
{
	if (a == NULL)
		return;
	free(a->name);
	for (int d = 0; d < ML_MAX_RANK; d++)
		free(a->sym[d]);
	memset(a, 0, sizeof *a);
}

/* shape_str: "[12,4,16]" (a dim -1 as '?') into buf. */
static char *
shape_str(int rank, const int64_t *dims, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < rank && k < n; i++)
		k += dims[i] >= 0 ? (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "",
						     (long long)dims[i]) :
				    (size_t)snprintf(buf + k, n - k, "%s?", i ? "," : "");
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

/* known: rank and every dim known. */
static bool
known(const struct ml_tval *v)
{
	if (v->rank < 0)
		return false;
	for (int d = 0; d < v->rank; d++)
		if (v->dims[d] < 0)
			return false;
	return true;
}

/* inner: the product of dims after d (the stride of dim d in elements). */
static int64_t
inner(const struct ml_tval *v, int d)
{
	int64_t p = 1;
	for (int i = d + 1; i < v->rank; i++)
		p *= v->dims[i];
	return p;
}

/*
 * place: where factor k (old size f, at l in a tensor of old shape in)
 * lands in the reshaped old shape out, by its flat stride: *q_out is set
 * and the dim returned, or LOST. A factor of old size 1 on a dim boundary
 * could sit in either dim; the choice follows what exporters write:
 * a dim of its exact size first (view(seq, batch, e)), then any dim but
 * the last, the inner one first (view(seq, batch * heads, head_dim)
 * from (seq, batch, e)), and the last dim only when nothing else fits
 * (view(seq * batch, e): the features keep their size for the matmul
 * that follows).
 */
static int
place(const struct ml_tval *in, struct loc l, int64_t f, const struct ml_tval *out, int64_t *q_out)
{
	if (!known(in) || !known(out) || l.dim < 0 || f <= 0)
		return LOST;
	int64_t s = l.q * inner(in, l.dim);
	int best = LOST;
	for (int j = out->rank - 1; j >= 0; j--) {
		int64_t ij = inner(out, j);
		if (ij <= 0 || s % ij != 0 || out->dims[j] % ((s / ij) * f) != 0)
			continue;
		if (out->dims[j] == f && s == ij) {
			*q_out = 1;
			return j;
		}
		if (best == LOST || best == out->rank - 1) {
			best = j;
			*q_out = s / ij;
		}
	}
	return best;
}

/*
 * q_at: what dim d of the reshaped old shape out holds inside factor k
 * (old size f, at l in in), by its flat stride; -1 when the factor cannot
 * sit in that dim.
 */
static int64_t
q_at(const struct ml_tval *in, struct loc l, int64_t f, const struct ml_tval *out, int d)
{
	if (!known(in) || !known(out) || l.dim < 0 || f <= 0 || d < 0 || d >= out->rank)
		return -1;
	int64_t s = l.q * inner(in, l.dim), id = inner(out, d);
	if (id <= 0 || s % id != 0 || out->dims[d] % ((s / id) * f) != 0)
		return -1;
	return s / id;
}

static bool
reshape_like(enum ml_op op)
{
	return op == ML_OP_RESHAPE || op == ML_OP_FLATTEN || op == ML_OP_SQUEEZE ||
	       op == ML_OP_UNSQUEEZE;
}

/* carries: the dims of probe tensor t whose ratio to the old holds prime k. */
static int
carries(const struct ctx *c, int t, int k, int *dim)
{
	const struct ml_tval *o = &c->old[t], *p = &c->probe[t];
	int n = 0;
	for (int d = 0; d < o->rank; d++)
		if (o->dims[d] > 0 && p->dims[d] > 0 && p->dims[d] % o->dims[d] == 0 &&
		    (p->dims[d] / o->dims[d]) % primes[k] == 0) {
			*dim = d;
			n++;
		}
	return n;
}

/* track: the place of every factor in the outputs of node ni, just inferred. */
static void
track(struct ctx *c, int ni)
{
	const struct ml_node *n = &c->g->nodes[ni];
	for (int j = 0; j < n->n_out; j++) {
		int t = n->out[j];
		if (t < 0)
			continue;
		const struct ml_tval *o = &c->old[t], *p = &c->probe[t];
		bool changed = o->rank != p->rank;
		for (int d = 0; !changed && d < o->rank; d++)
			changed = o->dims[d] != p->dims[d];
		for (int k = 0; k < c->nf; k++) {
			struct loc *l = &LOC(c, t, k);
			bool from_lost = false, from_any = false;
			for (int i = 0; i < n->n_in; i++)
				if (n->in[i] >= 0 && LOC(c, n->in[i], k).dim != NONE) {
					from_any = true;
					from_lost |= LOC(c, n->in[i], k).dim == LOST;
				}
			l->dim = NONE;
			l->q = 1;
			if (!changed || !from_any)
				continue;
			int d = -1;
			int cnt = o->rank == p->rank && known(o) ? carries(c, t, k, &d) : -1;
			if (cnt == 0)
				continue;
			if (cnt != 1) {
				l->dim = LOST;	/* twice in one tensor: seq x seq attention */
				continue;
			}
			int64_t f = c->f[k].old;
			const struct ml_tval *in0 = n->n_in > 0 && n->in[0] >= 0 ? &c->old[n->in[0]] : NULL;
			struct loc l0 = n->n_in > 0 && n->in[0] >= 0 ? LOC(c, n->in[0], k) :
							(struct loc){ NONE, 1 };
			if ((n->op == ML_OP_TRANSPOSE || reshape_like(n->op)) && l0.dim == LOST) {
				l->dim = LOST;
				continue;
			}
			if (n->op == ML_OP_TRANSPOSE && l0.dim >= 0) {
				const int64_t *perm = NULL;
				int np = ml_attr_ints(n, "perm", &perm);
				bool ok = np < 0 ? o->rank - 1 - d == l0.dim :
						   d < np && perm[d] == l0.dim;
				*l = ok ? (struct loc){ d, l0.q } : (struct loc){ LOST, 1 };
				continue;
			}
			if (reshape_like(n->op) && l0.dim >= 0) {
				int64_t q = q_at(in0, l0, f, o, d);
				*l = q > 0 ? (struct loc){ d, q } : (struct loc){ LOST, 1 };
				continue;
			}
			/* elementwise and the like: from an input dim aligned from the right */
			bool found = false;
			for (int i = 0; i < n->n_in && !found; i++) {
				int ti = n->in[i];
				if (ti < 0 || LOC(c, ti, k).dim < 0)
					continue;
				int di = LOC(c, ti, k).dim;
				if (di - c->old[ti].rank == d - o->rank &&
				    c->old[ti].dims[di] == o->dims[d]) {
					*l = (struct loc){ d, LOC(c, ti, k).q };
					found = true;
				}
			}
			if (found)
				continue;
			if (from_lost)
				*l = (struct loc){ LOST, 1 };
			else if (o->dims[d] == f)
				*l = (struct loc){ d, 1 };
			else if (f > 0 && o->dims[d] % f == 0)
				*l = (struct loc){ d, o->dims[d] / f };	/* outermost in its dim */
			else
				*l = (struct loc){ LOST, 1 };
		}
	}
}

/*
 * fix_reshape: node ni is a Reshape with a constant target over an input
 * that carries factors. Unless the old target already holds for the new
 * sizes, record one that does (c->pend) and return 1 with its probe value
 * in *pv (owned); 0 when nothing changes.
 */
static int
fix_reshape(struct ctx *c, int ni, struct ml_tval *pv)
{
	struct ml_graph *g = c->g;
	struct ml_node *n = &g->nodes[ni];
	int x = n->in[0], y = n->out[0];
	const struct ml_tval *xo = &c->old[x], *yo = &c->old[y];
	bool allowzero = ml_attr_int(n, "allowzero", 0) != 0;
	char buf[160];
	int dim[MAX_FACTORS];
	int64_t q[MAX_FACTORS];
	bool any = false;

	for (int k = 0; k < c->nf; k++) {
		struct loc l = LOC(c, x, k);
		dim[k] = NONE;
		if (l.dim == NONE)
			continue;
		any = true;
		if (l.dim == LOST || (dim[k] = place(xo, l, c->f[k].old, yo, &q[k])) == LOST)
			return ml_fail(c->e, ML_ENOTSUP,
				       "node '%s' (Reshape): its shape %s holds the old sizes, and "
				       "where the changed dims go cannot be traced",
				       n->name, known(yo) ? shape_str(yo->rank, yo->dims, buf, sizeof buf) :
				       "(not known)");
	}
	if (!any)
		return 0;
	/* the target: the old sizes, each dim that holds factors grown */
	int64_t want[ML_MAX_RANK], probe[ML_MAX_RANK];
	bool sym[ML_MAX_RANK] = { false }, has[ML_MAX_RANK] = { false };
	for (int j = 0; j < yo->rank; j++)
		want[j] = probe[j] = yo->dims[j];
	for (int k = 0; k < c->nf; k++) {
		int j = dim[k];
		if (j < 0)
			continue;
		has[j] = true;
		probe[j] = probe[j] * primes[k];
		if (c->f[k].new < 0)
			sym[j] = true;
		else
			want[j] = want[j] / c->f[k].old * c->f[k].new;
	}
	/* a dim that is the factor where the input has it: copy it (0) */
	int nvar = 0, var = -1;
	int64_t tgt[ML_MAX_RANK];
	for (int j = 0; j < yo->rank; j++) {
		tgt[j] = want[j];
		if (!has[j])
			continue;
		bool copy = !allowzero && j < xo->rank && yo->dims[j] == xo->dims[j];
		for (int k = 0; copy && k < c->nf; k++)
			copy = (dim[k] == j) == (LOC(c, x, k).dim == j) &&
			       (dim[k] != j || (q[k] == LOC(c, x, k).q));
		if (copy) {
			tgt[j] = 0;
			continue;
		}
		/* one dim takes -1: a symbolic one where there is one */
		if (var < 0 || (sym[j] && !sym[var]))
			var = j;
		nvar += sym[j];
	}
	if (nvar > 1)
		return ml_fail(c->e, ML_ENOTSUP,
			       "node '%s' (Reshape): its shape %s would need two symbolic dims; "
			       "give sizes instead of names", n->name,
			       shape_str(yo->rank, yo->dims, buf, sizeof buf));
	if (var >= 0)
		tgt[var] = -1;
	/* the old target already right (a -1 or 0 where the factors are)? */
	int st = n->in[1];
	const struct ml_tval *cv = &c->old[st];
	int64_t cur[ML_MAX_RANK];
	int cn = (int)ML_MIN(ml_tval_numel(cv), ML_MAX_RANK);
	bool same = cn == yo->rank;
	for (int j = 0; j < cn; j++)
		cur[j] = ml_get_i64(cv->data, cv->dtype, j);
	for (int j = 0; same && j < cn; j++)
		same = cur[j] == tgt[j] || (cur[j] == -1 && j == var) ||
		       (!allowzero && cur[j] == 0 && tgt[j] == 0);
	if (same)
		return 0;
	/* the probe sees the probe sizes where the target has concrete new ones */
	int64_t len = yo->rank;
	ML_TRY(ml_tval_alloc(pv, ML_I64, 1, &len, c->e));
	for (int j = 0; j < yo->rank; j++)
		((int64_t *)pv->data)[j] = tgt[j] <= 0 ? tgt[j] : probe[j];
	struct pending *p = &c->pend[c->rewritten];
	p->node = ni;
	p->rank = yo->rank;
	memcpy(p->tgt, tgt, sizeof(int64_t) * (size_t)yo->rank);
	c->rewritten++;
	return 1;
}

/*
 * fixed_value: whether tensor t (a shape) is known and the same with the
 * probe sizes: a constant, or computed from constants alone (a Constant
 * node, a Concat of them), not from the Shape of a tensor.
 */
static bool
fixed_value(const struct ctx *c, int t)
{
	const struct ml_tval *o = &c->old[t], *p = &c->probe[t];
	int64_t n = ml_tval_numel(o);
	if (o->data == NULL || p->data == NULL || !ml_dtype_is_int(o->dtype) || n < 0 ||
	    n > ML_MAX_RANK || ml_tval_numel(p) != n)
		return false;
	for (int64_t i = 0; i < n; i++)
		if (ml_get_i64(o->data, o->dtype, i) != ml_get_i64(p->data, p->dtype, i))
			return false;
	return true;
}

/* node_desc: "node 'NAME' (OP)" or "OP" for a node without a name. */
static const char *
node_desc(const struct ml_node *n, char *buf, size_t len)
{
	if (n->name[0] != '\0')
		snprintf(buf, len, "node '%s' (%s)", n->name, n->op_type);
	else
		snprintf(buf, len, "%s", n->op_type);
	return buf;
}

/*
 * stuck_input: why node n failed, when one of its inputs is the cause: an
 * input that carries no changed dim, but whose dim matched another input's
 * changed one before (a torch.zeros(batch, ...) folded into a constant at
 * export, an Expand to a shape computed from constants). Its description
 * goes to buf; NULL when there is no such input.
 */
static const char *
stuck_input(const struct ctx *c, const struct ml_node *n, char *buf, size_t len,
	    struct force *why)
{
	const struct ml_graph *g = c->g;
	for (int i = 0; i < n->n_in; i++) {
		int t = n->in[i];
		bool moved = false;
		if (t < 0 || c->old[t].rank <= 0 || c->probe[t].rank != c->old[t].rank)
			continue;
		for (int k = 0; k < c->nf; k++)
			moved |= LOC(c, t, k).dim != NONE;
		if (moved)
			continue;
		for (int j = 0; j < n->n_in; j++) {
			int u = n->in[j];
			if (u < 0 || u == t)
				continue;
			for (int k = 0; k < c->nf; k++) {
				int du = LOC(c, u, k).dim;
				int dt = du - (c->old[u].rank - c->old[t].rank);
				if (du < 0 || dt < 0 || dt >= c->old[t].rank ||
				    c->old[t].dims[dt] != c->old[u].dims[du] ||
				    c->probe[t].dims[dt] == c->probe[u].dims[du])
					continue;
				const struct ml_tensor *tt = g->tensors[t];
				int p = tt->producer;
				*why = (struct force){ p, dt, k };
				char nb[300], sb[160];
				if (p < 0 || g->nodes[p].op == ML_OP_CONSTANT) {
					snprintf(nb, sizeof nb, "a constant");
				} else {
					char pd[280];
					snprintf(nb, sizeof nb, "from %s",
						 node_desc(&g->nodes[p], pd, sizeof pd));
				}
				bool ex = p >= 0 && g->nodes[p].op == ML_OP_EXPAND && c->f[k].new < 0;
				snprintf(buf, len, "its input '%s' (%s) keeps %s: dim %d holds the "
					 "export's size %lld (%s)", tt->name, nb,
					 shape_str(c->old[t].rank, c->old[t].dims, sb, sizeof sb),
					 dt, (long long)c->old[t].dims[dt],
					 ex ? "an Expand takes a size there, not a name; or export "
					      "with dynamic_axes" : "export with dynamic_axes, or keep "
					      "that size");
				return buf;
			}
		}
	}
	return NULL;
}

/*
 * expandable: whether the Expand that made tensor t (stuck at dim d for
 * factor k) can take the new size there: a target made of constants
 * whose dim d holds the old size, broadcast from a 1 in its input, and a
 * new size that is a number (an Expand has no -1 to say "any").
 */
static bool
expandable(const struct ctx *c, const struct force *w)
{
	const struct ml_graph *g = c->g;
	if (w->node < 0 || g->nodes[w->node].op != ML_OP_EXPAND || c->f[w->k].new < 0 ||
	    c->nforce == MAX_FACTORS)
		return false;
	const struct ml_node *n = &g->nodes[w->node];
	if (n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0 || !fixed_value(c, n->in[1]))
		return false;
	const struct ml_tval *x = &c->old[n->in[0]], *y = &c->old[n->out[0]];
	const struct ml_tval *s = &c->old[n->in[1]];
	int dx = w->dim - (y->rank - x->rank);
	if (ml_tval_numel(s) != y->rank || (dx >= 0 && x->dims[dx] != 1) ||
	    ml_get_i64(s->data, s->dtype, w->dim) != c->f[w->k].old)
		return false;
	for (int i = 0; i < c->nforce; i++)
		if (c->force[i].node == w->node && c->force[i].dim == w->dim)
			return false;
	return true;
}

/*
 * fix_expand: node ni is an Expand that a force names: record its new
 * target (c->pend) and return 1 with its probe value in pv, else 0.
 */
static int
fix_expand(struct ctx *c, int ni, struct ml_tval *pv)
{
	const struct ml_node *n = &c->g->nodes[ni];
	const struct ml_tval *s = &c->old[n->in[1]];
	int64_t len = ml_tval_numel(s), tgt[ML_MAX_RANK], probe[ML_MAX_RANK];
	bool any = false;
	if (len > ML_MAX_RANK)
		return 0;
	for (int j = 0; j < len; j++)
		tgt[j] = probe[j] = ml_get_i64(s->data, s->dtype, j);
	for (int i = 0; i < c->nforce; i++) {
		const struct force *w = &c->force[i];
		if (w->node != ni)
			continue;
		tgt[w->dim] = c->f[w->k].new;
		probe[w->dim] *= primes[w->k];
		any = true;
	}
	if (!any)
		return 0;
	ML_TRY(ml_tval_alloc(pv, ML_I64, 1, &len, c->e));
	memcpy(pv->data, probe, sizeof(int64_t) * (size_t)len);
	struct pending *p = &c->pend[c->rewritten++];
	c->expanded++;
	p->node = ni;
	p->rank = (int)len;
	memcpy(p->tgt, tgt, sizeof(int64_t) * (size_t)len);
	return 1;
}

/*
 * probe_all: infer the graph with the probe sizes node by node, rewriting
 * Reshape targets on the way.
 */
static int
probe_all(struct ctx *c)
{
	struct ml_graph *g = c->g;
	for (int i = 0; i < g->n_nodes; i++) {
		struct ml_node *n = &g->nodes[i];
		struct ml_tval pv = { 0 }, saved;
		int st = -1, r = 0;
		if (n->op == ML_OP_RESHAPE && n->n_in >= 2 && n->in[0] >= 0 && n->in[1] >= 0 &&
		    fixed_value(c, n->in[1]))
			ML_TRY(r = fix_reshape(c, i, &pv));
		else if (n->op == ML_OP_EXPAND && c->nforce > 0)
			ML_TRY(r = fix_expand(c, i, &pv));
		/* the node reads its new target, for this one inference only */
		if (r > 0) {
			st = n->in[1];
			saved = c->probe[st];
			c->probe[st] = pv;
		}
		struct ml_err e2 = { 0 };
		int rc = ml_infer_values_range(g, c->probe, i, i + 1, &e2);
		if (st >= 0) {
			ml_tval_clear(&c->probe[st]);
			c->probe[st] = saved;
		}
		if (rc < 0) {
			char nb[300];
			n = &g->nodes[i];
			/* the message names the probe's sizes: say so */
			const char *m = e2.msg;
			if (strncmp(m, "node '", 6) == 0 && (m = strstr(m, "): ")) != NULL)
				m += 3;
			else
				m = e2.msg;
			char why[600];
			struct force w = { -1, 0, 0 };
			bool stuck = stuck_input(c, n, why, sizeof why, &w) != NULL;
			if (stuck && expandable(c, &w)) {
				c->force[c->nforce++] = w;
				return RETRY;
			}
			if (stuck)
				return ml_fail(c->e, ML_ENOTSUP, "%s does not fit the new sizes: %s",
					       node_desc(n, nb, sizeof nb), why);
			return ml_fail(c->e, ML_ENOTSUP,
				       "%s does not fit the new sizes: it holds an old size "
				       "(tried with each changed dim 7, 11, 13... times as large: %s)",
				       node_desc(n, nb, sizeof nb), m);
		}
		n = &g->nodes[i];
		for (int j = 0; j < n->n_out; j++) {
			int t = n->out[j];
			if (t >= 0 && c->old[t].rank >= 0 && c->probe[t].rank >= 0 &&
			    c->old[t].rank != c->probe[t].rank) {
				char nb[300];
				return ml_fail(c->e, ML_ENOTSUP,
					       "%s: its output's rank depends on the changed sizes "
					       "(%d before, %d after)", node_desc(n, nb, sizeof nb),
					       c->old[t].rank, c->probe[t].rank);
			}
		}
		track(c, i);
		/* a forced Expand's dim is the factor, from no input that has it */
		for (int k = 0; k < c->nforce; k++)
			if (c->force[k].node == i)
				LOC(c, n->out[0], c->force[k].k) = (struct loc){ c->force[k].dim, 1 };
	}
	return 0;
}

/* find_input: the index in g->inputs of the input called name, or -1. */
static int
find_input(const struct ml_graph *g, const char *name)
{
	for (int i = 0; i < g->n_inputs; i++) {
		const struct ml_tensor *t = g->tensors[g->inputs[i]];
		if (t->kind != ML_TK_CONST && t->kind != ML_TK_PARAM && strcmp(t->name, name) == 0)
			return i;
	}
	return -1;
}

/* no_input: ML_EINVAL naming the inputs the model has. */
static int
no_input(const struct ml_graph *g, const char *name, struct ml_err *e)
{
	char list[300];
	size_t k = 0;
	list[0] = '\0';
	for (int i = 0; i < g->n_inputs && k < sizeof list; i++) {
		const struct ml_tensor *t = g->tensors[g->inputs[i]];
		if (t->kind == ML_TK_CONST || t->kind == ML_TK_PARAM)
			continue;
		k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "", t->name);
	}
	return ml_fail(e, ML_EINVAL, "the model has no input '%s' (its inputs: %s)", name,
		       k ? list : "none");
}

/* factor_of: the factor for (old, new, sym), added when new; -1 when full. */
static int
factor_of(struct ctx *c, int64_t old, int64_t new, const char *sym)
{
	for (int k = 0; k < c->nf; k++)
		if (c->f[k].old == old && c->f[k].new == new &&
		    (new >= 0 || strcmp(c->f[k].sym, sym) == 0))
			return k;
	if (c->nf == MAX_FACTORS)
		return -1;
	c->f[c->nf] = (struct factor){ old, new, sym };
	return c->nf++;
}

int
ml_graph_set_input_shapes(struct ml_graph *g, const struct ml_shape_arg *a, int n,
			  int *rewritten, struct ml_err *e)
{
	struct ctx c = { .g = g, .e = e };
	struct opt o = { .g = g, .e = e };
	char **names = NULL;
	int *dropped = NULL;
	int rc = 0;

	if (rewritten != NULL)
		*rewritten = 0;
	/* check every argument before anything changes */
	for (int i = 0; i < n; i++) {
		int ii = find_input(g, a[i].name);
		if (ii < 0)
			return no_input(g, a[i].name, e);
		const struct ml_tensor *t = g->tensors[g->inputs[ii]];
		if (t->rank >= 0 && t->rank != a[i].rank)
			return ml_fail(e, ML_EINVAL, "input '%s' has rank %d, not %d", t->name,
				       t->rank, a[i].rank);
		for (int j = 0; j < i; j++)
			if (strcmp(a[j].name, a[i].name) == 0)
				return ml_fail(e, ML_EINVAL, "input '%s' is given two shapes",
					       a[i].name);
		for (int d = 0; d < a[i].rank; d++)
			if (t->rank >= 0 && t->dims[d] > 0 && a[i].dims[d] != t->dims[d] &&
			    factor_of(&c, t->dims[d], a[i].dims[d], a[i].sym[d]) < 0)
				return ml_fail(e, ML_ENOTSUP, "more than %d different changed dims",
					       MAX_FACTORS);
	}
	c.cap = g->n_tensors + 1;
	c.old = ml_calloc((size_t)c.cap, sizeof *c.old);
	c.probe = ml_calloc((size_t)c.cap, sizeof *c.probe);
	c.loc = ml_calloc((size_t)c.cap * (size_t)(c.nf ? c.nf : 1), sizeof *c.loc);
	c.pend = ml_calloc((size_t)g->n_nodes + 1, sizeof *c.pend);
	if (c.old == NULL || c.probe == NULL || c.loc == NULL || c.pend == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int t = 0; t < c.cap; t++)
		c.old[t].rank = c.probe[t].rank = -1;
	for (int t = 0; t < g->n_tensors; t++) {
		ml_graph_tval(g, t, &c.old[t]);
		if (g->tensors[t]->kind != ML_TK_CONST && g->tensors[t]->kind != ML_TK_PARAM)
			c.old[t].data = NULL;
		c.probe[t] = c.old[t];
	}
	if ((rc = ml_infer_values(g, c.old, e)) < 0)
		goto out;
again:
	/* the probe: each changed dim times its factor's prime */
	for (int t = 0; t < c.cap; t++) {
		if (c.probe[t].owned && c.probe[t].data != c.old[t].data)
			ml_tval_clear(&c.probe[t]);
		/* as the graph has it: the values of constants alone */
		c.probe[t].rank = -1;
		if (t < g->n_tensors) {
			ml_graph_tval(g, t, &c.probe[t]);
			if (g->tensors[t]->kind != ML_TK_CONST && g->tensors[t]->kind != ML_TK_PARAM)
				c.probe[t].data = NULL;
		}
		for (int k = 0; k < c.nf; k++)
			LOC(&c, t, k) = (struct loc){ NONE, 1 };
	}
	c.rewritten = c.expanded = 0;
	for (int i = 0; i < n; i++) {
		int t = g->inputs[find_input(g, a[i].name)];
		c.probe[t].rank = a[i].rank;
		for (int d = 0; d < a[i].rank; d++) {
			int64_t od = c.old[t].rank == a[i].rank ? c.old[t].dims[d] : -1;
			c.probe[t].dims[d] = od;
			if (od > 0 && a[i].dims[d] != od) {
				int k = factor_of(&c, od, a[i].dims[d], a[i].sym[d]);
				c.probe[t].dims[d] = od * primes[k];
				if (LOC(&c, t, k).dim == NONE)
					LOC(&c, t, k) = (struct loc){ d, 1 };
				else
					LOC(&c, t, k) = (struct loc){ LOST, 1 };
			} else if (od < 0) {
				c.probe[t].dims[d] = a[i].dims[d];
			}
		}
	}
	/* an Expand found to hold the old size gets the new one, from the start */
	if ((rc = probe_all(&c)) == RETRY)
		goto again;
	if (rc < 0)
		goto out;
	int nt0 = g->n_tensors;
	/* the symbolic names the outputs of the probe can take back */
	if ((names = ml_calloc((size_t)nt0 * ML_MAX_RANK + 1, sizeof *names)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int t = 0; t < nt0; t++)
		for (int k = 0; k < c.nf; k++) {
			struct loc l = LOC(&c, t, k);
			if (c.f[k].new < 0 && l.dim >= 0 && l.q == 1 &&
			    c.old[t].dims[l.dim] == c.f[k].old)
				names[(size_t)t * ML_MAX_RANK + (size_t)l.dim] = (char *)c.f[k].sym;
		}
	/* the new targets, each a constant of its own: another node may read the old one */
	if ((dropped = ml_calloc((size_t)c.rewritten + 1, sizeof *dropped)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int k = 0; k < c.rewritten; k++) {
		struct pending *p = &c.pend[k];
		char base[300];
		const char *nm = g->nodes[p->node].name[0] ? g->nodes[p->node].name : "reshape";
		snprintf(base, sizeof base, "%.280s_shape", nm);
		for (int j = 1; ml_graph_find(g, base) >= 0; j++)
			snprintf(base, sizeof base, "%.280s_shape_%d", nm, j);
		int t = ml_graph_tensor(g, base);
		int64_t len = p->rank;
		if (t < 0) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
		if ((rc = ml_graph_set_data(g, t, ML_TK_CONST, ML_I64, 1, &len, p->tgt,
					    sizeof(int64_t) * (size_t)len, e)) < 0)
			goto out;
		dropped[k] = g->nodes[p->node].in[1];
		g->nodes[p->node].in[1] = t;
	}
	/* the new inputs, and every activation inferred again */
	for (int i = 0; i < n; i++) {
		struct ml_tensor *t = g->tensors[g->inputs[find_input(g, a[i].name)]];
		t->rank = a[i].rank;
		for (int d = 0; d < a[i].rank; d++) {
			t->dims[d] = a[i].dims[d];
			t->sym[d] = NULL;
			if (a[i].sym[d] != NULL && (t->sym[d] = ml_graph_strdup(g, a[i].sym[d])) == NULL) {
				rc = ml_fail(e, ML_ENOMEM, "out of memory");
				goto out;
			}
		}
	}
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_out; j++) {
			if (g->nodes[i].out[j] < 0)
				continue;
			struct ml_tensor *ten = g->tensors[g->nodes[i].out[j]];
			for (int d = 0; d < ML_MAX_RANK; d++)
				ten->sym[d] = NULL;
			ten->rank = -1;
		}
	/* mark the names by tensor: commit renumbers the tensors */
	int nt = g->n_tensors;
	char **tnames = ml_calloc((size_t)nt + 1, sizeof *tnames);
	if (tnames == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int t = 0; t < nt; t++)
		tnames[t] = g->tensors[t]->name;
	/* Constant nodes that only made the old targets go with them */
	if ((rc = mlopt_index(&o)) < 0) {
		ml_free(tnames);
		goto out;
	}
	for (int k = 0; k < c.rewritten; k++) {
		int t = dropped[k], p = g->tensors[t]->producer;
		if (p >= 0 && g->nodes[p].op == ML_OP_CONSTANT && g->nodes[p].n_out == 1 &&
		    o.nuse[t] == 0 && !o.pinned[t] && !o.dead[p])
			mlopt_kill(&o, p);
	}
	if ((rc = mlopt_commit(&o)) < 0) {
		ml_free(tnames);
		goto out;
	}
	for (int t = 0; t < nt0; t++) {
		int k = ml_graph_find(g, tnames[t]);
		if (k < 0 || g->tensors[k]->producer < 0)
			continue;
		struct ml_tensor *ten = g->tensors[k];
		for (int d = 0; d < ten->rank; d++) {
			const char *s = names[(size_t)t * ML_MAX_RANK + (size_t)d];
			if (s != NULL && ten->dims[d] < 0 &&
			    (ten->sym[d] = ml_graph_strdup(g, s)) == NULL) {
				ml_free(tnames);
				rc = ml_fail(e, ML_ENOMEM, "out of memory");
				goto out;
			}
		}
	}
	ml_free(tnames);
	if (rewritten != NULL)
		*rewritten = c.rewritten - c.expanded;
out:
	if (c.old != NULL)
		for (int t = 0; t < c.cap; t++) {
			if (c.probe[t].owned && c.probe[t].data != c.old[t].data)
				ml_tval_clear(&c.probe[t]);
			ml_tval_clear(&c.old[t]);
		}
	ml_free(c.old);
	ml_free(c.probe);
	ml_free(c.loc);
	ml_free(names);
	ml_free(c.pend);
	ml_free(dropped);
	ml_free(o.dead);
	ml_free(o.nuse);
	ml_free(o.cons);
	ml_free(o.pinned);
	return rc;
}
