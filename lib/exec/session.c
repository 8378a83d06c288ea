/*
 * session.c: sessions. A session binds a graph to its devices and its
 * inputs; a run checks the inputs, plans activation memory for the bound
 * input shapes (plan.c) and hands the graph to the executor (run.c).
 */
#include "ml_impl.h"

#include "exec/session.h"

/*
 * mark_outer_uses: names a node's subgraphs read from enclosing scopes are
 * inputs of that node in all but name: keep them alive until it has run.
 */
static void
mark_outer_uses(struct ml_session *s, const struct ml_graph *sub, int ni, int depth)
{
	if (depth > 32)
		return;
	for (int t = 0; t < sub->n_tensors; t++) {
		const struct ml_tensor *st = sub->tensors[t];
		if (st->kind != ML_TK_ACT)
			continue;
		bool produced = false;
		for (int i = 0; i < sub->n_nodes && !produced; i++)
			for (int j = 0; j < sub->nodes[i].n_out; j++)
				produced |= sub->nodes[i].out[j] == t;
		if (produced)
			continue;
		int pt = ml_graph_find(s->g, st->name);
		if (pt >= 0 && s->last_use[pt] < ni && s->last_use[pt] != s->g->n_nodes)
			s->last_use[pt] = ni;
	}
	for (int i = 0; i < sub->n_nodes; i++)
		for (int a = 0; a < sub->nodes[i].n_attr; a++) {
			const struct ml_attr *at = &sub->nodes[i].attrs[a];
			if (at->type == ML_ATTR_GRAPH || at->type == ML_ATTR_GRAPHS)
				for (int k = 0; k < at->n; k++)
					mark_outer_uses(s, at->graphs[k], ni, depth + 1);
		}
}

int
ml_session_new(struct ml_session **out, struct ml_graph *g, const struct ml_session_opts *o,
	       struct ml_err *e)
{
	struct ml_session *s;
	const char *dev = o != NULL && o->device != NULL ? o->device : "cpu";

	*out = NULL;
	if (strcmp(dev, "cpu") != 0 && strcmp(dev, "auto") != 0 && strncmp(dev, "cl", 2) != 0)
		return ml_fail(e, ML_EINVAL, "unknown device '%s' (cpu, cl, cl:N, auto)", dev);
	if ((s = ml_calloc(1, sizeof *s)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	s->g = g;
	if (o != NULL)
		s->o = *o;
	size_t nt = (size_t)g->n_tensors + 1;
	s->vals = ml_calloc(nt, sizeof *s->vals);
	s->bound = ml_calloc(nt, sizeof *s->bound);
	s->last_use = ml_calloc(nt, sizeof *s->last_use);
	s->slot_off = ml_calloc(nt, sizeof *s->slot_off);
	s->slot_len = ml_calloc(nt, sizeof *s->slot_len);
	s->node_time = ml_calloc((size_t)g->n_nodes + 1, sizeof *s->node_time);
	s->node_flops = ml_calloc((size_t)g->n_nodes + 1, sizeof *s->node_flops);
	s->node_bytes = ml_calloc((size_t)g->n_nodes + 1, sizeof *s->node_bytes);
	s->node_start = ml_calloc((size_t)g->n_nodes + 1, sizeof *s->node_start);
	s->room_off = ml_calloc((size_t)g->n_nodes + 1, sizeof *s->room_off);
	s->room_len = ml_calloc((size_t)g->n_nodes + 1, sizeof *s->room_len);
	s->node_cache = ml_calloc((size_t)g->n_nodes + 1, sizeof *s->node_cache);
	s->shp = ml_calloc(nt, sizeof *s->shp);
	s->is_act = ml_calloc(nt, sizeof *s->is_act);
	s->free_t = ml_calloc(nt, sizeof *s->free_t);
	s->shp_bytes = ml_calloc(nt, sizeof *s->shp_bytes);
	s->known = ml_calloc((size_t)g->n_nodes + 1, sizeof *s->known);
	if (s->o.profile)
		s->prof_val = ml_calloc(nt, sizeof *s->prof_val);
	s->outer = ml_calloc(nt, sizeof *s->outer);
	s->max_io = 1;
	for (int i = 0; i < g->n_nodes; i++) {
		s->max_io = ML_MAX(s->max_io, g->nodes[i].n_in);
		s->max_io = ML_MAX(s->max_io, g->nodes[i].n_out);
	}
	s->in = ml_calloc((size_t)s->max_io, sizeof *s->in);
	s->out = ml_calloc((size_t)s->max_io, sizeof *s->out);
	if (s->vals == NULL || s->bound == NULL || s->last_use == NULL || s->slot_off == NULL ||
	    s->slot_len == NULL || s->node_time == NULL || s->in == NULL || s->out == NULL ||
	    s->outer == NULL || s->node_flops == NULL || s->node_bytes == NULL ||
	    s->node_start == NULL || s->room_off == NULL || s->room_len == NULL ||
	    s->node_cache == NULL || s->shp == NULL || s->shp_bytes == NULL || s->known == NULL ||
	    s->free_t == NULL || s->is_act == NULL ||
	    (s->o.profile && s->prof_val == NULL)) {
		ml_session_free(s);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	/* every op must be known and have a CPU kernel before anything runs */
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (n->op == ML_OP_NONE || ml_opdef_get(n->op) == NULL ||
		    ml_cpu_kernel_get(n->op) == NULL) {
			ml_fail(e, ML_ENOTSUP, "unsupported op '%s%s%s' (node %d%s%s%s)",
				n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type, i,
				n->name[0] ? " '" : "", n->name, n->name[0] ? "'" : "");
			ml_session_free(s);
			return ML_ENOTSUP;
		}
	}
	for (int t = 0; t < g->n_tensors; t++) {
		s->last_use[t] = -1;
		s->slot_off[t] = -1;
	}
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_in; j++)
			if (g->nodes[i].in[j] >= 0)
				s->last_use[g->nodes[i].in[j]] = i;
	for (int i = 0; i < g->n_outputs; i++)
		s->last_use[g->outputs[i]] = g->n_nodes;
	for (int i = 0; i < g->n_nodes; i++)
		for (int a = 0; a < g->nodes[i].n_attr; a++) {
			const struct ml_attr *at = &g->nodes[i].attrs[a];
			if (at->type == ML_ATTR_GRAPH || at->type == ML_ATTR_GRAPHS)
				for (int k = 0; k < at->n; k++)
					mark_outer_uses(s, at->graphs[k], i, 0);
		}
	/*
	 * the tensors a run may bind, for the plan's key: the graph inputs
	 * (ml_session_set_input, a body's inputs), stored ones too, and the
	 * activations nothing produces (a body's names from enclosing scopes)
	 */
	for (int t = 0; t < g->n_tensors; t++) {
		s->is_act[t] = g->tensors[t]->kind == ML_TK_ACT;
		bool in = s->is_act[t] && g->tensors[t]->producer < 0;
		for (int i = 0; i < g->n_inputs && !in; i++)
			in = g->inputs[i] == t;
		if (in)
			s->free_t[s->n_free++] = t;
	}
	s->arena_bytes = -1;
	s->opset = ml_graph_opset(g, "", 17);
	const char *cs = getenv("ML_CHECK_SHAPES");
	s->check_shapes = cs != NULL && strcmp(cs, "1") == 0;
	/* other devices: placement, programs, resident parameters (device.c) */
	if (strcmp(dev, "cpu") != 0) {
		int rc = ml_hx_new(s, e);
		if (rc < 0) {
			ml_session_free(s);
			return rc;
		}
	}
	*out = s;
	return 0;
}

static void
clear_acts(struct ml_session *s)
{
	const struct ml_graph *g = s->g;
	for (int t = 0; t < g->n_tensors; t++) {
		struct ml_tval *v = &s->vals[t];
		/* most were cleared after their last reader in the last run */
		if (s->bound[t] || (v->data == NULL && v->rank == 0 && v->dtype == ML_UNDEF))
			continue;
		ml_tval_clear(v);
	}
}

void
ml_session_free(struct ml_session *s)
{
	if (s == NULL)
		return;
	ml_hx_free(s);
	if (s->vals != NULL && s->bound != NULL) {
		for (int t = 0; t < s->g->n_tensors; t++)
			ml_tval_clear(&s->vals[t]);
	}
	ml_free(s->vals);
	ml_free(s->bound);
	ml_free(s->outer);
	ml_free(s->last_use);
	ml_free(s->slot_off);
	ml_free(s->slot_len);
	ml_free(s->room_off);
	ml_free(s->room_len);
	ml_free(s->arena);
	if (s->node_cache != NULL)
		for (int i = 0; i < s->g->n_nodes; i++)
			ml_free(s->node_cache[i]);
	ml_free(s->node_cache);
	ml_free(s->shp);
	ml_free(s->free_t);
	ml_free(s->is_act);
	ml_free(s->shp_bytes);
	ml_free(s->known);
	ml_free(s->plan_key);
	ml_free(s->node_time);
	ml_free(s->node_flops);
	ml_free(s->node_bytes);
	ml_free(s->node_start);
	ml_free(s->prof_val);
	ml_free(s->in);
	ml_free(s->out);
	ml_free(s);
}

static char *
declared_str(const struct ml_tensor *t, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "%s[", ml_dtype_name(t->dtype));
	for (int i = 0; i < t->rank && k < n; i++) {
		if (t->dims[i] >= 0)
			k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "",
					      (long long)t->dims[i]);
		else
			k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "",
					      t->sym[i] ? t->sym[i] : "?");
	}
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

int
ml_session_set_input(struct ml_session *s, const char *name, const struct ml_tval *v,
		     struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	int ti = -1;
	char want[128], got[128];

	for (int i = 0; i < g->n_inputs; i++)
		if (strcmp(g->tensors[g->inputs[i]]->name, name) == 0)
			ti = g->inputs[i];
	if (ti < 0)
		return ml_fail(e, ML_EINVAL, "the model has no input '%s'", name);
	const struct ml_tensor *t = g->tensors[ti];
	bool ok = (t->dtype == ML_UNDEF || t->dtype == v->dtype) &&
		  (t->rank < 0 || t->rank == v->rank);
	for (int d = 0; ok && t->rank >= 0 && d < t->rank; d++)
		if (t->dims[d] >= 0 && t->dims[d] != v->dims[d])
			ok = false;
	/* a symbolic dim must take one value across all bound inputs */
	for (int d = 0; ok && t->rank >= 0 && d < t->rank; d++) {
		if (t->sym[d] == NULL)
			continue;
		for (int i = 0; i < g->n_inputs && ok; i++) {
			int oi = g->inputs[i];
			const struct ml_tensor *o = g->tensors[oi];
			if (oi == ti || !s->bound[oi])
				continue;
			for (int k = 0; k < o->rank; k++)
				if (o->sym[k] != NULL && strcmp(o->sym[k], t->sym[d]) == 0 &&
				    s->vals[oi].dims[k] != v->dims[d])
					return ml_fail(e, ML_EINVAL,
						       "input '%s': dim '%s' is %lld here but %lld in input '%s'",
						       name, t->sym[d], (long long)v->dims[d],
						       (long long)s->vals[oi].dims[k], o->name);
		}
	}
	if (!ok)
		return ml_fail(e, ML_EINVAL, "input '%s': expected %s, got %s", name,
			       declared_str(t, want, sizeof want),
			       ml_tval_shape_str(v, got, sizeof got));
	int64_t nb = ml_tval_nbytes(v);
	struct ml_tval *cur = &s->vals[ti];
	/* the same shape again (a training loop's next batch): into the same buffer */
	bool same = s->bound[ti] && cur->owned && cur->data != NULL && cur->dtype == v->dtype &&
		    cur->rank == v->rank && nb > 0;
	for (int d = 0; same && d < v->rank; d++)
		same = cur->dims[d] == v->dims[d];
	if (same) {
		if (cur->data != v->data)
			memcpy(cur->data, v->data, (size_t)nb);
		return 0;
	}
	struct ml_tval nv = { 0 };
	ML_TRY(ml_tval_alloc(&nv, v->dtype, v->rank, v->dims, e));
	if (nb > 0)
		memcpy(nv.data, v->data, (size_t)nb);
	ml_tval_clear(cur);
	*cur = nv;
	s->bound[ti] = true;
	return 0;
}

/*
 * check_static: with ML_CHECK_SHAPES=1, every kernel result must agree
 * with what static inference said of it at load: the dtype, the rank and
 * every dim it knew. Tests run the whole ONNX suite this way.
 */
static int
check_static(struct ml_session *s, const struct ml_node *n)
{
	const struct ml_graph *g = s->g;
	for (int j = 0; j < n->n_out; j++) {
		int t = n->out[j];
		if (t < 0)
			continue;
		const struct ml_tensor *st = g->tensors[t];
		const struct ml_tval *v = &s->vals[t];
		bool ok = st->dtype == ML_UNDEF || st->dtype == v->dtype;
		ok = ok && (st->rank < 0 || st->rank == v->rank);
		for (int d = 0; ok && st->rank >= 0 && d < st->rank; d++)
			ok = st->dims[d] < 0 || st->dims[d] == v->dims[d];
		if (!ok) {
			char a[128], b[128];
			struct ml_tval sv;
			ml_graph_tval(g, t, &sv);
			return ml_fail(s->err_sink, ML_EINVAL,
				       "node '%s' (%s): output '%s' is %s but inference said %s",
				       n->name, n->op_type, st->name, ml_tval_shape_str(v, a, sizeof a),
				       ml_tval_shape_str(&sv, b, sizeof b));
		}
	}
	return 0;
}

int
ml_session_check_static(struct ml_session *s, const struct ml_node *n)
{
	return check_static(s, n);
}

/*
 * resolve_outer: give every name the subgraph reads but does not define
 * the value it has in the nearest enclosing session (borrowed).
 */
static void
resolve_outer(struct ml_session *s)
{
	const struct ml_graph *g = s->g;
	for (int t = 0; t < g->n_tensors; t++) {
		const struct ml_tensor *ten = g->tensors[t];
		if ((s->bound[t] && !s->outer[t]) || ten->kind != ML_TK_ACT || ten->producer >= 0)
			continue;
		const struct ml_tval *v = NULL;
		for (const struct ml_session *p = s->parent; p != NULL && v == NULL; p = p->parent) {
			int pt = ml_graph_find(p->g, ten->name);
			if (pt >= 0 && (p->vals[pt].data != NULL || ml_tval_numel(&p->vals[pt]) == 0) &&
			    p->vals[pt].rank >= 0 && p->vals[pt].dtype != ML_UNDEF)
				v = &p->vals[pt];
		}
		if (v == NULL)
			continue;	/* an unused name; a reader fails with a clear message */
		s->vals[t] = *v;
		s->vals[t].owned = false;
		s->bound[t] = true;
		s->outer[t] = true;
	}
}

static int
sub_open(struct ml_session *parent, struct ml_graph *sub, void **run, struct ml_err *e)
{
	struct ml_session *s;
	ML_TRY(ml_graph_toposort(sub, e));
	struct ml_session_opts o = parent->o;
	o.device = "cpu";
	o.profile = false;
	ML_TRY(ml_session_new(&s, sub, &o, e));
	s->parent = parent;
	*run = s;
	return 0;
}

static int
sub_bind(void *run, int i, const struct ml_tval *v, struct ml_err *e)
{
	struct ml_session *s = run;
	if (i < 0 || i >= s->g->n_inputs)
		return ml_fail(e, ML_EINVAL, "subgraph has %d inputs, not %d", s->g->n_inputs, i + 1);
	int t = s->g->inputs[i];
	ml_tval_clear(&s->vals[t]);
	s->vals[t] = *v;
	s->vals[t].owned = false;
	s->bound[t] = true;
	return 0;
}

static const struct ml_graph *
sub_graph(void *run)
{
	return ((struct ml_session *)run)->g;
}

static int
sub_run(void *run, struct ml_err *e)
{
	return ml_session_run(run, e);
}

static const struct ml_tval *
sub_output(void *run, int i)
{
	return ml_session_output(run, i);
}

static void
sub_close(void *run)
{
	ml_session_free(run);
}

/* subgraphs run as sessions of their own on the CPU, names resolved from the parent */
const struct ml_body_ops ml_exec_body_ops = {
	.open = sub_open,
	.bind = sub_bind,
	.run = sub_run,
	.output = sub_output,
	.graph = sub_graph,
	.close = sub_close,
};

void
ml_session_reset_values(struct ml_session *s)
{
	const struct ml_graph *g = s->g;
	clear_acts(s);
	for (int t = 0; t < g->n_tensors; t++)
		if (!s->bound[t] && ml_is_stored(g, t))
			ml_graph_tval(g, t, &s->vals[t]);
}

int
ml_session_run(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;

	s->err_sink = e;
	if (s->parent != NULL)
		resolve_outer(s);
	for (int i = 0; i < g->n_inputs; i++) {
		int t = g->inputs[i];
		if (s->bound[t] || ml_is_stored(g, t))
			continue;
		return ml_fail(e, ML_EINVAL, "input '%s' is not given", g->tensors[t]->name);
	}
	ml_session_reset_values(s);
	ML_TRY(ml_session_plan(s, e));
	return ml_exec_run(s, e);
}

const struct ml_tval *
ml_session_output(const struct ml_session *s, int i)
{
	if (i < 0 || i >= s->g->n_outputs)
		return NULL;
	return &s->vals[s->g->outputs[i]];
}

int64_t
ml_session_arena_bytes(const struct ml_session *s)
{
	return s->planned ? s->arena_bytes : -1;
}

double
ml_session_node_time(const struct ml_session *s, int i)
{
	return i >= 0 && i < s->g->n_nodes ? s->node_time[i] : 0;
}

int64_t
ml_session_node_flops(const struct ml_session *s, int i)
{
	return i >= 0 && i < s->g->n_nodes ? s->node_flops[i] : 0;
}

int64_t
ml_session_node_bytes(const struct ml_session *s, int i)
{
	return i >= 0 && i < s->g->n_nodes ? s->node_bytes[i] : 0;
}

double
ml_session_node_start(const struct ml_session *s, int i)
{
	return i >= 0 && i < s->g->n_nodes ? s->node_start[i] : 0;
}

int
ml_session_tensor_mem(const struct ml_session *s, int t, struct ml_tensor_mem *m)
{
	const struct ml_graph *g = s->g;
	memset(m, 0, sizeof *m);
	m->off = -1;
	m->first = m->last = -1;
	m->shape.rank = -1;
	if (t < 0 || t >= g->n_tensors)
		return ML_EINVAL;
	m->off = s->planned ? s->slot_off[t] : -1;
	m->len = s->planned && s->slot_off[t] >= 0 ? s->slot_len[t] : 0;
	m->first = g->tensors[t]->producer;
	m->last = s->last_use[t];
	if (s->prof_val != NULL && s->prof_val[t].rank >= 0 && s->prof_val[t].dtype != ML_UNDEF) {
		m->shape = s->prof_val[t];
		m->bytes = ML_MAX(ml_tval_nbytes(&m->shape), 0);
	} else if (s->bound[t]) {
		m->shape = s->vals[t];
		m->shape.data = NULL;
		m->shape.owned = false;
		m->bytes = ML_MAX(ml_tval_nbytes(&m->shape), 0);
	} else {
		ml_graph_tval(g, t, &m->shape);
		m->shape.data = NULL;
		m->bytes = ML_MAX(ml_tval_nbytes(&m->shape), 0);
	}
	return 0;
}
