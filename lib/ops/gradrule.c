/*
 * gradrule.c: what gradient rules (lib/ops/FAMILY_grad.c) are built from:
 * the rule of an op (ml_grad_rule_get, over the tables families.def
 * collects) and the helpers a rule emits its nodes with (gradrule.h).
 * lib/train/autodiff.c walks the graph and calls the rules.
 */
#include <stdarg.h>
#include <stdio.h>

#include "ops/gradrule.h"

ml_grad_fn
ml_grad_rule_get(enum ml_op op)
{
	static const struct ml_grad_rule *const tabs[] = {
#define F(name, grad) ML_GRAD_IF_##grad(ml_grad_rules_##name,)
#include "families.def"
#undef F
	};
	for (size_t k = 0; k < sizeof tabs / sizeof tabs[0]; k++)
		for (const struct ml_grad_rule *r = tabs[k]; r->op != ML_OP_NONE; r++)
			if (r->op == op)
				return r->fn;
	return NULL;
}

int
ml_gin(const struct ml_gctx *c, int i)
{
	const struct ml_node *n = ml_gfwd(c);
	return i < n->n_in ? n->in[i] : -1;
}

int
ml_gout(const struct ml_gctx *c, int j)
{
	const struct ml_node *n = ml_gfwd(c);
	return j < n->n_out ? n->out[j] : -1;
}

enum ml_dtype
ml_gdtype(const struct ml_gctx *c, int t)
{
	return t >= 0 ? c->g->tensors[t]->dtype : ML_UNDEF;
}

int
ml_gfail(struct ml_gctx *c, int code, const char *fmt, ...)
{
	char buf[400];
	va_list ap;
	const struct ml_node *n = ml_gfwd(c);

	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	return ml_fail(c->err, code, "gradient of node '%s' (%s): %s", n->name, n->op_type, buf);
}

/* fwd_name: the forward node's name, or OP<index> when it has none. */
static void
fwd_name(const struct ml_gctx *c, char *buf, size_t n)
{
	const struct ml_node *f = ml_gfwd(c);
	const char *nm = f->name;
	/* a forward node of a step graph is called forward/...: drop the phase */
	if (strncmp(nm, "forward/", 8) == 0)
		nm += 8;
	if (nm[0] != '\0')
		snprintf(buf, n, "%s", nm);
	else
		snprintf(buf, n, "%s%d", f->op_type, c->node);
}

/* copy_attrs: give node ni the attributes of node from (GRAPH attributes aside). */
static int
copy_attrs(struct ml_graph *g, int ni, int from)
{
	const struct ml_node *f = &g->nodes[from];
	int n = 0;
	for (int a = 0; a < f->n_attr; a++)
		n += f->attrs[a].type != ML_ATTR_GRAPH && f->attrs[a].type != ML_ATTR_GRAPHS;
	if (n == 0)
		return 0;
	struct ml_attr *at = ml_graph_alloc(g, sizeof *at * (size_t)n);
	if (at == NULL)
		return ML_ENOMEM;
	f = &g->nodes[from];
	int k = 0;
	for (int a = 0; a < f->n_attr; a++)
		if (f->attrs[a].type != ML_ATTR_GRAPH && f->attrs[a].type != ML_ATTR_GRAPHS)
			at[k++] = f->attrs[a];	/* the arrays stay in the same arena */
	g->nodes[ni].attrs = at;
	g->nodes[ni].n_attr = k;
	return 0;
}

int
ml_gnode(struct ml_gctx *c, const char *op, int n_in, const int *in, int n_out, int *out,
	 bool copy)
{
	char base[200], nname[300], tname[320];
	const char *inn[16], *outn[16];
	char onames[16][320];
	const char *dom = "";

	for (int i = 0; i < n_in; i++)
		if (in[i] < -1)
			return in[i];
	if (n_in > 16 || n_out > 16)
		return ml_fail(c->err, ML_EINVAL, "too many inputs or outputs");
	if (strncmp(op, "ml.", 3) == 0) {
		dom = "ml";
		op += 3;
	}
	fwd_name(c, base, sizeof base);
	int k = (*c->seq)++;
	snprintf(nname, sizeof nname, "backward/%s/%s_%d", base, op, k);
	for (int i = 0; i < n_in; i++)
		inn[i] = in[i] >= 0 ? c->g->tensors[in[i]]->name : "";
	for (int j = 0; j < n_out; j++) {
		snprintf(onames[j], sizeof onames[j], "backward/%s/%s_%d:%d", base, op, k, j);
		if (ml_graph_find(c->g, onames[j]) >= 0)
			return ml_fail(c->err, ML_EINVAL, "tensor '%s' exists already", onames[j]);
		outn[j] = onames[j];
	}
	(void)tname;
	int ni = ml_graph_add_node(c->g, op, dom, nname, n_in, inn, n_out, outn, c->err);
	if (ni < 0)
		return ni;
	if (dom[0] != '\0' && ml_graph_opset(c->g, dom, -1) < 0 &&
	    ml_graph_set_opset(c->g, dom, 1, c->err) < 0)
		return ML_ENOMEM;
	if (c->g->nodes[ni].op == ML_OP_NONE)
		return ml_fail(c->err, ML_ENOTSUP, "op '%s' is unknown", op);
	if (copy && copy_attrs(c->g, ni, c->node) < 0)
		return ml_fail(c->err, ML_ENOMEM, "out of memory");
	for (int j = 0; j < n_out; j++)
		out[j] = c->g->nodes[ni].out[j];
	return ni;
}

int
ml_glast(const struct ml_gctx *c)
{
	return c->g->n_nodes - 1;
}

static int
gop(struct ml_gctx *c, const char *op, int n, const int *in)
{
	int out;
	int rc = ml_gnode(c, op, n, in, 1, &out, false);
	return rc < 0 ? rc : out;
}

int
ml_g1(struct ml_gctx *c, const char *op, int a)
{
	return gop(c, op, 1, &a);
}

int
ml_g2(struct ml_gctx *c, const char *op, int a, int b)
{
	int in[2] = { a, b };
	return gop(c, op, 2, in);
}

int
ml_g3(struct ml_gctx *c, const char *op, int a, int b, int d)
{
	int in[3] = { a, b, d };
	return gop(c, op, 3, in);
}

int
ml_gconst(struct ml_gctx *c, enum ml_dtype dt, int rank, const int64_t *dims, const void *data)
{
	char nm[64];
	int64_t n = 1;
	for (int d = 0; d < rank; d++)
		n *= dims[d];
	snprintf(nm, sizeof nm, "backward/const_%d", (*c->seq)++);
	int t = ml_graph_tensor(c->g, nm);
	if (t < 0)
		return ml_fail(c->err, ML_ENOMEM, "out of memory");
	int rc = ml_graph_set_data(c->g, t, ML_TK_CONST, dt, rank, dims, data,
				   (size_t)n * ml_dtype_size(dt), c->err);
	return rc < 0 ? rc : t;
}

int
ml_gscalar(struct ml_gctx *c, enum ml_dtype dt, double v)
{
	uint8_t buf[16] = { 0 };
	if (dt == ML_UNDEF)
		dt = ML_F32;
	ml_set_f64(buf, dt, 0, v);
	return ml_gconst(c, dt, 0, NULL, buf);
}

int
ml_gints(struct ml_gctx *c, int n, const int64_t *v)
{
	int64_t d = n;
	return ml_gconst(c, ML_I64, 1, &d, v);
}

int
ml_greduce_sum(struct ml_gctx *c, int g, int n, const int64_t *axes, bool keepdims)
{
	if (g < 0)
		return g;
	int ax = ml_gints(c, n, axes);
	int r = ml_g2(c, "ReduceSum", g, ax);
	if (r < 0)
		return r;
	if (ml_node_set_int(c->g, ml_glast(c), "keepdims", keepdims) < 0)
		return ml_fail(c->err, ML_ENOMEM, "out of memory");
	return r;
}

int
ml_gsum_to_dims(struct ml_gctx *c, int g, int rank, const int64_t *dims, int to)
{
	if (g < 0)
		return g;
	int64_t fd[ML_MAX_RANK];
	if (rank > 0)
		memcpy(fd, dims, sizeof(int64_t) * (size_t)rank);
	const struct ml_tensor *t = c->g->tensors[to];
	if (t->rank < 0)
		return ml_gfail(c, ML_ENOTSUP, "the rank of '%s' is unknown", t->name);
	int lead = rank - t->rank;
	if (lead < 0)
		return ml_gfail(c, ML_EINVAL, "'%s' has a higher rank than the gradient", t->name);
	int64_t axes[ML_MAX_RANK];
	int n = 0;
	for (int d = 0; d < lead; d++)
		axes[n++] = d;
	if (n > 0 && (g = ml_greduce_sum(c, g, n, axes, false)) < 0)
		return g;
	t = c->g->tensors[to];
	n = 0;
	for (int d = 0; d < t->rank; d++)
		if (t->dims[d] == 1 && fd[lead + d] != 1)
			axes[n++] = d;
	if (n > 0)
		g = ml_greduce_sum(c, g, n, axes, true);
	return g;
}

int
ml_gsum_to(struct ml_gctx *c, int g, int from, int to)
{
	if (g < 0)
		return g;
	const struct ml_tensor *f = c->g->tensors[from];
	if (f->rank < 0)
		return ml_gfail(c, ML_ENOTSUP, "the rank of '%s' is unknown", f->name);
	int64_t dims[ML_MAX_RANK];
	memcpy(dims, f->dims, sizeof dims);
	return ml_gsum_to_dims(c, g, f->rank, dims, to);
}

int
ml_gshape(struct ml_gctx *c, int t)
{
	const struct ml_tensor *x = c->g->tensors[t];
	bool known = x->rank >= 0;
	for (int d = 0; known && d < x->rank; d++)
		known = x->dims[d] >= 0;
	if (!known)
		return ml_g1(c, "Shape", t);
	int64_t dims[ML_MAX_RANK];
	memcpy(dims, x->dims, sizeof dims);
	return ml_gints(c, x->rank, dims);
}

/*
 * ml_greshape_like: g reshaped to tensor t's shape: a constant shape when
 * t's dims are known, 0 (copy the dim) for an unknown dim 0 that g's first
 * dim carries too (a batch dim), else Shape(t).
 */
int
ml_greshape_like(struct ml_gctx *c, int g, int t, bool batch_kept)
{
	if (g < 0)
		return g;
	const struct ml_tensor *x = c->g->tensors[t];
	bool known = x->rank >= 0;
	int64_t dims[ML_MAX_RANK];
	for (int d = 0; known && d < x->rank; d++) {
		dims[d] = x->dims[d];
		if (dims[d] < 0) {
			if (d == 0 && batch_kept)
				dims[d] = 0;
			else
				known = false;
		}
	}
	int s = known ? ml_gints(c, x->rank, dims) : ml_g1(c, "Shape", t);
	return ml_g2(c, "Reshape", g, s);
}

