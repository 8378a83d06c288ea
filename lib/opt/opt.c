/*
 * opt.c: the pass manager of mlopt (the registry of passes, levels, the
 * fixpoint loop and the report) and the rewriting helpers every pass uses:
 * use counts, value replacement, in-place node rewrites, and the commit
 * that compacts nodes and tensors, toposorts and infers again.
 */
#include <pthread.h>
#include <stdio.h>

#include "opt/opt.h"

static const struct {
	struct ml_opt_pass_info info;
	int (*fn)(struct opt *o);
} passes[] = {
	{ { "fold-constants", 1, "evaluate nodes whose inputs are all constants" },
	  ml_pass_fold_constants },
	{ { "fold-shapes", 1, "replace values static inference knows (shape arithmetic) by constants" },
	  ml_pass_fold_shapes },
	{ { "eliminate", 1, "remove Identity, Dropout, no-op Cast, Reshape, Squeeze, Transpose, Pad" },
	  ml_pass_eliminate },
	{ { "cse", 1, "merge nodes that compute the same thing, and equal constants" }, ml_pass_cse },
	{ { "dce", 1, "remove nodes whose outputs nothing reads" }, ml_pass_dce },
	{ { "strip-training", 1, "drop the training state: optimizer moments, step counter, RNG, run" },
	  ml_pass_strip_training },
	{ { "fold-bn", 2, "fold BatchNormalization into the Conv or Gemm before it" }, ml_pass_fold_bn },
	{ { "fuse-gelu", 2, "x*0.5*(1+erf(x/sqrt 2)) to ml.Gelu" }, ml_pass_fuse_gelu },
	{ { "fuse-silu", 2, "x*Sigmoid(x) to ml.Silu" }, ml_pass_fuse_silu },
	{ { "fuse-layernorm", 2, "the decomposed layer norm to ml.LayerNormalization" },
	  ml_pass_fuse_layernorm },
	{ { "matmul-gemm", 2, "MatMul then Add of a bias to Gemm (2-D) or FusedMatMul" },
	  ml_pass_matmul_gemm },
	{ { "fold-scale", 2, "fold a per-column Mul by a constant into the weights before it" },
	  ml_pass_fold_scale },
	{ { "fuse-attention", 2, "MatMul, scale, Softmax, MatMul to ml.Attention" },
	  ml_pass_fuse_attention },
	{ { "fuse-bias-act", 2, "Conv/Gemm/MatMul + bias + residual Add + activation to one node" },
	  ml_pass_fuse_bias_act },
	{ { "layout", 2, "run convolutions in NHWC regions where the transposes saved outweigh the new ones" },
	  ml_pass_layout },
	{ { "fuse-expand", 2, "a pointwise ConvNHWC read only by a depthwise one, computed inside it row by row" },
	  ml_pass_fuse_expand },
	{ { "fuse-elementwise", 2, "chains of elementwise ops to one ml.FusedElementwise loop" },
	  ml_pass_fuse_elementwise },
	{ { "pack-weights", 2, "store the weights of large FusedMatMuls in the CPU SGEMM's panels" },
	  ml_pass_pack_weights },
	{ { "plan-memory", 2, "store an arena plan by liveness (Tensor.arena_off, arena_bytes)" },
	  ml_pass_plan_memory },
};
#define NPASS ((int)(sizeof passes / sizeof passes[0]))

/* pass_tab: the passes' descriptions in one array, filled once (tab_once). */
static struct ml_opt_pass_info pass_tab[NPASS];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void
tab_fill(void)
{
	for (int i = 0; i < NPASS; i++)
		pass_tab[i] = passes[i].info;
}

const struct ml_opt_pass_info *
ml_opt_passes(int *n)
{
	pthread_once(&tab_once, tab_fill);
	*n = NPASS;
	return pass_tab;
}

static int
pass_find(const char *name, size_t len)
{
	for (int i = 0; i < NPASS; i++)
		if (strlen(passes[i].info.name) == len && strncmp(passes[i].info.name, name, len) == 0)
			return i;
	return -1;
}

/* list_parse: the pass indices of a comma-separated list into idx (up to cap); count or negative. */
static int
list_parse(const char *list, int *idx, int cap, struct ml_err *e)
{
	int n = 0;
	if (list == NULL)
		return 0;
	for (const char *p = list; *p != '\0';) {
		const char *q = strchr(p, ',');
		size_t len = q != NULL ? (size_t)(q - p) : strlen(p);
		if (len > 0) {
			int k = pass_find(p, len);
			if (k < 0)
				return ml_fail(e, ML_EINVAL, "unknown pass '%.*s' (see --list-passes)",
					       (int)(len > 64 ? 64 : len), p);
			if (n < cap)
				idx[n++] = k;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return n;
}

int
ml_opt_check_names(const char *list, struct ml_err *e)
{
	int idx[64];
	return list_parse(list, idx, 64, e) < 0 ? ML_EINVAL : 0;
}

void
ml_opt_report_free(struct ml_opt_report *r)
{
	if (r == NULL)
		return;
	ml_free(r->rows);
	memset(r, 0, sizeof *r);
}

/*
 * The context.
 */
static int
grow(struct opt *o)
{
	struct ml_graph *g = o->g;
	if (g->n_tensors + 1 > o->cap_t) {
		int cap = g->n_tensors * 2 + 16;
		int *nu = ml_realloc(o->nuse, sizeof(int) * (size_t)cap);
		if (nu == NULL)
			return ML_ENOMEM;
		o->nuse = nu;
		int *co = ml_realloc(o->cons, sizeof(int) * (size_t)cap);
		if (co == NULL)
			return ML_ENOMEM;
		o->cons = co;
		bool *pi = ml_realloc(o->pinned, sizeof(bool) * (size_t)cap);
		if (pi == NULL)
			return ML_ENOMEM;
		o->pinned = pi;
		o->cap_t = cap;
	}
	if (g->n_nodes + 1 > o->cap_n) {
		int cap = g->n_nodes * 2 + 16;
		bool *d = ml_realloc(o->dead, sizeof(bool) * (size_t)cap);
		if (d == NULL)
			return ML_ENOMEM;
		for (int i = o->cap_n; i < cap; i++)
			d[i] = false;
		o->dead = d;
		o->cap_n = cap;
	}
	return 0;
}

/* pin_outer: pin every name a subgraph reads from the enclosing graph g. */
static void
pin_outer(struct opt *o, const struct ml_graph *sub, int depth)
{
	if (depth > 32)
		return;
	for (int t = 0; t < sub->n_tensors; t++) {
		if (sub->tensors[t]->kind != ML_TK_ACT)
			continue;
		int pt = ml_graph_find(o->g, sub->tensors[t]->name);
		if (pt >= 0)
			o->pinned[pt] = true;
	}
	for (int i = 0; i < sub->n_nodes; i++)
		for (int a = 0; a < sub->nodes[i].n_attr; a++) {
			const struct ml_attr *at = &sub->nodes[i].attrs[a];
			if (at->type == ML_ATTR_GRAPH || at->type == ML_ATTR_GRAPHS)
				for (int k = 0; k < at->n; k++)
					pin_outer(o, at->graphs[k], depth + 1);
		}
}

int
mlopt_index(struct opt *o)
{
	struct ml_graph *g = o->g;
	if (grow(o) < 0)
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	for (int t = 0; t < g->n_tensors; t++) {
		o->nuse[t] = 0;
		o->cons[t] = -1;
		o->pinned[t] = false;
		g->tensors[t]->producer = -1;
	}
	for (int i = 0; i < g->n_inputs; i++)
		o->pinned[g->inputs[i]] = true;
	for (int i = 0; i < g->n_outputs; i++)
		o->pinned[g->outputs[i]] = true;
	if (g->train != NULL)
		for (int i = 0; i < g->train->n_slots; i++)
			if (g->train->slots[i] >= 0 && g->train->slots[i] < g->n_tensors)
				o->pinned[g->train->slots[i]] = true;
	for (int i = 0; i < g->n_nodes; i++) {
		if (o->dead[i])
			continue;
		const struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] >= 0) {
				o->nuse[n->in[j]]++;
				o->cons[n->in[j]] = i;
			}
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] >= 0)
				g->tensors[n->out[j]]->producer = i;
		for (int a = 0; a < n->n_attr; a++)
			if (n->attrs[a].type == ML_ATTR_GRAPH || n->attrs[a].type == ML_ATTR_GRAPHS)
				for (int k = 0; k < n->attrs[a].n; k++)
					pin_outer(o, n->attrs[a].graphs[k], 0);
	}
	return 0;
}

void
mlopt_note(struct opt *o, const char *what)
{
	o->changes++;
	for (int i = 0; i < o->nnotes; i++)
		if (strcmp(o->notes[i].what, what) == 0) {
			o->notes[i].n++;
			return;
		}
	if (o->nnotes < 8) {
		snprintf(o->notes[o->nnotes].what, sizeof o->notes[0].what, "%s", what);
		o->notes[o->nnotes++].n = 1;
	}
}

void
mlopt_kill(struct opt *o, int ni)
{
	o->dead[ni] = true;
	const struct ml_node *n = &o->g->nodes[ni];
	for (int j = 0; j < n->n_in; j++)
		if (n->in[j] >= 0)
			o->nuse[n->in[j]]--;
	for (int j = 0; j < n->n_out; j++)
		if (n->out[j] >= 0 && o->g->tensors[n->out[j]]->producer == ni)
			o->g->tensors[n->out[j]]->producer = -1;
}

int
mlopt_sole(const struct opt *o, int t)
{
	if (t < 0 || o->pinned[t] || o->nuse[t] != 1)
		return -1;
	/* cons[t] may be stale after kills; find the live reader */
	const struct ml_graph *g = o->g;
	int c = o->cons[t];
	if (c >= 0 && !o->dead[c])
		return c;
	for (int i = 0; i < g->n_nodes; i++)
		if (!o->dead[i])
			for (int j = 0; j < g->nodes[i].n_in; j++)
				if (g->nodes[i].in[j] == t)
					return i;
	return -1;
}

int
mlopt_prod(const struct opt *o, int t)
{
	if (t < 0)
		return -1;
	int p = o->g->tensors[t]->producer;
	return p >= 0 && !o->dead[p] ? p : -1;
}

bool
mlopt_replace(struct opt *o, int from, int to)
{
	struct ml_graph *g = o->g;
	if (from == to)
		return false;
	if (o->pinned[from]) {
		int p = mlopt_prod(o, to);
		if (p < 0 || o->pinned[to] || g->tensors[to]->kind != ML_TK_ACT)
			return false;
		/* to's producer writes from; to's readers read from */
		for (int j = 0; j < g->nodes[p].n_out; j++)
			if (g->nodes[p].out[j] == to)
				g->nodes[p].out[j] = from;
		g->tensors[from]->producer = p;
		for (int i = 0; i < g->n_nodes; i++) {
			if (o->dead[i])
				continue;
			for (int j = 0; j < g->nodes[i].n_in; j++)
				if (g->nodes[i].in[j] == to) {
					g->nodes[i].in[j] = from;
					o->nuse[from]++;
					o->nuse[to]--;
					o->cons[from] = i;
				}
		}
		return true;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		if (o->dead[i])
			continue;
		for (int j = 0; j < g->nodes[i].n_in; j++)
			if (g->nodes[i].in[j] == from) {
				g->nodes[i].in[j] = to;
				o->nuse[from]--;
				o->nuse[to]++;
				o->cons[to] = i;
			}
	}
	return true;
}

const void *
mlopt_const(const struct opt *o, int t, enum ml_dtype dt)
{
	if (t < 0)
		return NULL;
	const struct ml_tensor *ten = o->g->tensors[t];
	if ((ten->kind != ML_TK_CONST && ten->kind != ML_TK_PARAM) || ten->data == NULL ||
	    ten->rank < 0 || ten->q != NULL)
		return NULL;
	if (dt != ML_UNDEF && ten->dtype != dt)
		return NULL;
	/* a graph input with a default value can be given another at run time */
	for (int i = 0; i < o->g->n_inputs; i++)
		if (o->g->inputs[i] == t)
			return NULL;
	return ten->data;
}

bool
mlopt_scalar(const struct opt *o, int t, double *v)
{
	const void *p = mlopt_const(o, t, ML_UNDEF);
	if (p == NULL || !ml_dtype_is_float(o->g->tensors[t]->dtype))
		return false;
	struct ml_tval tv;
	ml_graph_tval(o->g, t, &tv);
	if (ml_tval_numel(&tv) != 1)
		return false;
	*v = ml_get_f64(p, tv.dtype, 0);
	return true;
}

bool
mlopt_is_f32(const struct opt *o, int t)
{
	if (t < 0)
		return false;
	const struct ml_tensor *ten = o->g->tensors[t];
	if (ten->dtype != ML_F32 || ten->rank < 0)
		return false;
	for (int d = 0; d < ten->rank; d++)
		if (ten->dims[d] < 0)
			return false;
	return true;
}

bool
mlopt_f32(const struct opt *o, int t)
{
	return t >= 0 && o->g->tensors[t]->dtype == ML_F32 && o->g->tensors[t]->rank >= 0;
}

char *
mlopt_unique(struct opt *o, const char *base)
{
	char buf[512];
	snprintf(buf, sizeof buf, "%s", base);
	for (int k = 1; ml_graph_find(o->g, buf) >= 0; k++)
		snprintf(buf, sizeof buf, "%.480s_%d", base, k);
	return ml_graph_strdup(o->g, buf);
}

int
mlopt_new_const(struct opt *o, const char *base, enum ml_dtype dt, int rank, const int64_t *dims,
	      const void *data)
{
	char *name = mlopt_unique(o, base);
	if (name == NULL)
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	int t = ml_graph_tensor(o->g, name);
	if (t < 0)
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	struct ml_tval v = { .dtype = dt, .rank = rank };
	if (rank > 0)
		memcpy(v.dims, dims, sizeof(int64_t) * (size_t)rank);
	ML_TRY(ml_graph_set_data(o->g, t, ML_TK_CONST, dt, rank, dims, data,
				 (size_t)ml_tval_nbytes(&v), o->e));
	if (grow(o) < 0)
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	o->nuse[t] = 0;
	o->cons[t] = -1;
	o->pinned[t] = false;
	return t;
}

/* add_from: append node src's origin ("name:op", or its own fused_from list) to list. */
static int
add_from(struct ml_graph *g, const struct ml_node *src, char **list, int n, int cap)
{
	const struct ml_attr *a = ml_attr_find(src, "fused_from");
	if (a != NULL && a->type == ML_ATTR_STRINGS) {
		for (int k = 0; k < a->n && n < cap; k++)
			list[n++] = a->strings[k];
		return n;
	}
	if (n >= cap)
		return n;
	size_t len = strlen(src->name) + strlen(src->op_type) + strlen(src->domain) + 3;
	char *s = ml_graph_alloc(g, len);
	if (s == NULL)
		return -1;
	if (src->domain[0] != '\0')
		snprintf(s, len, "%s:%s.%s", src->name, src->domain, src->op_type);
	else
		snprintf(s, len, "%s:%s", src->name, src->op_type);
	list[n++] = s;
	return n;
}

int
mlopt_rewrite(struct opt *o, int ni, const char *op_type, const char *domain, int n_in,
	    const int *in, int n_out, const int *out, int src, const int *srcs, int nsrc)
{
	struct ml_graph *g = o->g;
	char *list[256];
	int nl = 0;

	for (int k = 0; k < nsrc && nl >= 0; k++)
		nl = add_from(g, &g->nodes[srcs[k]], list, nl, 256);
	if (nl < 0)
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	int na = src >= 0 ? g->nodes[src].n_attr : 0;
	struct ml_attr *attrs = ml_graph_alloc(g, sizeof *attrs * (size_t)(na + 1));
	int *ni_ = ml_graph_alloc(g, sizeof(int) * (size_t)(n_in + 1));
	int *no_ = ml_graph_alloc(g, sizeof(int) * (size_t)(n_out + 1));
	char **strs = ml_graph_alloc(g, sizeof(char *) * (size_t)(nl + 1));
	char *ot = ml_graph_strdup(g, op_type), *dom = ml_graph_strdup(g, domain);
	if (attrs == NULL || ni_ == NULL || no_ == NULL || strs == NULL || ot == NULL || dom == NULL)
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	int k = 0;
	for (int a = 0; a < na; a++) {
		const struct ml_attr *sa = &g->nodes[src].attrs[a];
		if (strcmp(sa->name, "fused_from") == 0 || sa->type == ML_ATTR_GRAPH ||
		    sa->type == ML_ATTR_GRAPHS)
			continue;
		attrs[k++] = *sa;
	}
	memcpy(strs, list, sizeof(char *) * (size_t)nl);
	/* unlink the old inputs, link the new ones */
	struct ml_node *n = &g->nodes[ni];
	for (int j = 0; j < n->n_in; j++)
		if (n->in[j] >= 0)
			o->nuse[n->in[j]]--;
	memcpy(ni_, in, sizeof(int) * (size_t)n_in);
	memcpy(no_, out, sizeof(int) * (size_t)n_out);
	for (int j = 0; j < n_in; j++)
		if (in[j] >= 0) {
			o->nuse[in[j]]++;
			o->cons[in[j]] = ni;
		}
	for (int j = 0; j < n_out; j++)
		if (out[j] >= 0)
			g->tensors[out[j]]->producer = ni;
	n->op_type = ot;
	n->domain = dom;
	n->op = ml_op_lookup(ot, dom);
	n->in = ni_;
	n->n_in = n_in;
	n->out = no_;
	n->n_out = n_out;
	n->attrs = attrs;
	n->n_attr = k;
	if (nsrc > 0) {
		struct ml_attr *a = ml_node_add_attr(g, ni, "fused_from", ML_ATTR_STRINGS);
		if (a == NULL)
			return ml_fail(o->e, ML_ENOMEM, "out of memory");
		a->strings = strs;
		a->n = nl;
	}
	return 0;
}

static bool
same_attr(const struct ml_attr *x, const struct ml_attr *y)
{
	if (strcmp(x->name, y->name) != 0 || x->type != y->type)
		return false;
	switch (x->type) {
	case ML_ATTR_FLOAT:
		return x->f == y->f;
	case ML_ATTR_INT:
		return x->i == y->i;
	case ML_ATTR_STRING:
		return x->s_len == y->s_len && memcmp(x->s, y->s, x->s_len) == 0;
	case ML_ATTR_FLOATS:
		return x->n == y->n && (x->n == 0 || memcmp(x->floats, y->floats,
							     sizeof(double) * (size_t)x->n) == 0);
	case ML_ATTR_INTS:
		return x->n == y->n && (x->n == 0 || memcmp(x->ints, y->ints,
							     sizeof(int64_t) * (size_t)x->n) == 0);
	case ML_ATTR_STRINGS:
		if (x->n != y->n)
			return false;
		for (int k = 0; k < x->n; k++)
			if (strcmp(x->strings[k], y->strings[k]) != 0)
				return false;
		return true;
	default:
		return false;	/* tensors and graphs: not compared */
	}
}

bool
mlopt_same_attrs(const struct ml_node *a, const struct ml_node *b)
{
	if (a->n_attr != b->n_attr)
		return false;
	for (int i = 0; i < a->n_attr; i++) {
		bool found = false;
		for (int j = 0; j < b->n_attr && !found; j++)
			if (strcmp(a->attrs[i].name, b->attrs[j].name) == 0)
				found = same_attr(&a->attrs[i], &b->attrs[j]);
		if (!found)
			return false;
	}
	return true;
}

/*
 * The commit: compact the node array, then the tensor array (a tensor
 * nothing uses goes, its data freed), rebuild the name hash by adding the
 * kept tensors back in order, and remap every index.
 */
int
mlopt_commit(struct opt *o)
{
	struct ml_graph *g = o->g;
	int nn = 0, rc;

	for (int i = 0; i < g->n_nodes; i++) {
		if (o->dead[i]) {
			for (int a = 0; a < g->nodes[i].n_attr; a++) {
				struct ml_attr *at = &g->nodes[i].attrs[a];
				if (at->type == ML_ATTR_GRAPH || at->type == ML_ATTR_GRAPHS)
					for (int k = 0; k < at->n; k++)
						ml_graph_free(at->graphs[k]);
			}
			continue;
		}
		g->nodes[nn++] = g->nodes[i];
	}
	g->n_nodes = nn;
	for (int i = 0; i < o->cap_n; i++)
		o->dead[i] = false;
	/* any stored memory plan is stale now */
	g->arena_bytes = 0;
	for (int t = 0; t < g->n_tensors; t++)
		g->tensors[t]->arena_off = -1;

	int nt = g->n_tensors;
	bool *used = ml_calloc((size_t)nt + 1, sizeof(bool));
	int *map = ml_malloc(sizeof(int) * (size_t)(nt + 1));
	struct ml_tensor **old = ml_malloc(sizeof *old * (size_t)(nt + 1));
	if (used == NULL || map == NULL || old == NULL) {
		rc = ml_fail(o->e, ML_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = mlopt_index(o)) < 0)
		goto out;
	for (int t = 0; t < nt; t++)
		used[t] = o->pinned[t] || o->nuse[t] > 0 || g->tensors[t]->kind == ML_TK_INPUT;
	for (int i = 0; i < nn; i++)
		for (int j = 0; j < g->nodes[i].n_out; j++)
			if (g->nodes[i].out[j] >= 0)
				used[g->nodes[i].out[j]] = true;
	memcpy(old, g->tensors, sizeof *old * (size_t)nt);
	ml_free(g->hash);
	g->hash = NULL;
	g->hash_cap = 0;
	g->n_tensors = 0;
	for (int t = 0; t < nt; t++) {
		map[t] = -1;
		if (!used[t]) {
			if (ml_graph_owns_data(g, old[t]))
				ml_free(old[t]->data);
			old[t]->data = NULL;
			continue;
		}
		int k = ml_graph_tensor(g, old[t]->name);
		if (k < 0) {
			rc = ml_fail(o->e, ML_ENOMEM, "out of memory");
			goto out;
		}
		*g->tensors[k] = *old[t];
		map[t] = k;
	}
	for (int i = 0; i < nn; i++) {
		struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] >= 0)
				n->in[j] = map[n->in[j]];
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] >= 0)
				n->out[j] = map[n->out[j]];
	}
	for (int i = 0; i < g->n_inputs; i++)
		g->inputs[i] = map[g->inputs[i]];
	for (int i = 0; i < g->n_outputs; i++)
		g->outputs[i] = map[g->outputs[i]];
	if (g->train != NULL)
		for (int i = 0; i < g->train->n_slots; i++)
			if (g->train->slots[i] >= 0 && g->train->slots[i] < nt)
				g->train->slots[i] = map[g->train->slots[i]];
	if ((rc = ml_graph_toposort(g, o->e)) < 0 || (rc = ml_graph_infer(g, o->e)) < 0 ||
	    (rc = ml_graph_validate(g, o->e)) < 0)
		goto out;
	rc = mlopt_index(o);
out:
	ml_free(used);
	ml_free(map);
	ml_free(old);
	return rc;
}

/*
 * The manager.
 */
static int
add_row(struct ml_opt_report *r, const struct ml_opt_row *row)
{
	if (r == NULL)
		return 0;
	if (r->n == r->cap) {
		int cap = r->cap ? r->cap * 2 : 32;
		struct ml_opt_row *p = ml_realloc(r->rows, sizeof *p * (size_t)cap);
		if (p == NULL)
			return ML_ENOMEM;
		r->rows = p;
		r->cap = cap;
	}
	r->rows[r->n++] = *row;
	return 0;
}

int
ml_opt_run(struct ml_graph *g, const struct ml_opt_opts *oo, struct ml_opt_report *r,
	   struct ml_err *e)
{
	struct ml_opt_opts def = { .level = 2 };
	int list[64], nl = 0, skip[64], ns, rc = 0;
	struct opt o = { .g = g, .e = e };

	if (oo == NULL)
		oo = &def;
	if (oo->level < 0 || oo->level > 3)
		return ml_fail(e, ML_EINVAL, "optimisation level %d is not 0 to 3", oo->level);
	if ((ns = list_parse(oo->disable, skip, 64, e)) < 0)
		return ns;
	if (oo->passes != NULL) {
		if ((nl = list_parse(oo->passes, list, 64, e)) < 0)
			return nl;
	} else {
		for (int i = 0; i < NPASS; i++)
			if (passes[i].info.level >= 1 && passes[i].info.level <= oo->level)
				list[nl++] = i;
	}
	/* --disable takes passes out of either list */
	int k = 0;
	for (int i = 0; i < nl; i++) {
		bool off = false;
		for (int j = 0; j < ns; j++)
			off |= skip[j] == list[i];
		if (!off)
			list[k++] = list[i];
	}
	nl = k;
	if (r != NULL) {
		memset(r, 0, sizeof *r);
		r->nodes_before = g->n_nodes;
	}
	if ((rc = mlopt_index(&o)) < 0)
		goto out;
	int rounds = oo->max_rounds > 0 ? oo->max_rounds : 8;
	int round;
	for (round = 1; round <= rounds; round++) {
		int total = 0;
		char phase[32];
		snprintf(phase, sizeof phase, "passes, round %d", round);
		ml_progress_report(oo->progress, phase, 0, nl);
		for (int i = 0; i < nl; i++) {
			const struct ml_opt_pass_info *pi = &passes[list[i]].info;
			struct ml_opt_row row = { .round = round, .nodes_before = g->n_nodes };
			double t0 = ml_now();
			o.changes = 0;
			o.nnotes = 0;
			if ((rc = mlopt_index(&o)) < 0 || (rc = passes[list[i]].fn(&o)) < 0) {
				ml_err_prefix(e, pi->name);
				goto out;
			}
			if (o.changes > 0 && (rc = mlopt_commit(&o)) < 0) {
				ml_err_prefix(e, pi->name);
				goto out;
			}
			row.ms = (ml_now() - t0) * 1e3;
			snprintf(row.pass, sizeof row.pass, "%s", pi->name);
			row.nodes_after = g->n_nodes;
			/* the memory plan is stored again every round; it is no change */
			row.changes = strcmp(pi->name, "plan-memory") == 0 ? 0 : o.changes;
			size_t w = 0;
			for (int j = 0; j < o.nnotes && w < sizeof row.what; j++)
				w += o.notes[j].n > 0 ?
				     (size_t)snprintf(row.what + w, sizeof row.what - w, "%s%d %s",
						      j ? ", " : "", o.notes[j].n, o.notes[j].what) :
				     (size_t)snprintf(row.what + w, sizeof row.what - w, "%s%s",
						      j ? ", " : "", o.notes[j].what);
			total += row.changes;
			if ((round == 1 || row.changes > 0) && add_row(r, &row) < 0) {
				rc = ml_fail(e, ML_ENOMEM, "out of memory");
				goto out;
			}
			if (o.changes > 0 && oo->check != NULL &&
			    (rc = oo->check(oo->check_ctx, g, pi->name, e)) < 0)
				goto out;
			ml_progress_report(oo->progress, phase, i + 1, nl);
		}
		if (total == 0)
			break;
	}
	if (r != NULL) {
		r->rounds = round > rounds ? rounds : round;
		r->nodes_after = g->n_nodes;
		r->arena_bytes = g->arena_bytes;
	}
out:
	ml_free(o.dead);
	ml_free(o.nuse);
	ml_free(o.cons);
	ml_free(o.pinned);
	return rc;
}
