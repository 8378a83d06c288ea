/*
 * session.c: the executor. A session binds a graph to a device and its
 * inputs, plans activation memory by liveness into one arena for the
 * bound input shapes, and runs the nodes in topological order.
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
	s->arena_bytes = -1;
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
		if (s->bound[t])
			continue;
		ml_tval_clear(&s->vals[t]);
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
 * Liveness planning: walk the nodes in order, place each output in the
 * best-fitting gap between the blocks still live, and release a block
 * after its last reader. Tensors whose size cannot be known before the
 * run (data-dependent shapes) are left to the heap.
 */
struct blk {
	int64_t off, len;
	int t;
};

/*
 * inplace_block: the live block of node n's first input when n may write
 * its output over it: n is pointwise (each output element depends only on
 * the input elements at the same index), the input has exactly the
 * output's type and padded size, and node i is its last reader. -1 if not.
 */
static bool
pointwise(enum ml_op op)
{
	return (ml_op_flags(op) & ML_OPF_INPLACE) != 0;
}

static int
inplace_block(const struct ml_session *s, const struct ml_node *n, int i, const struct ml_tval *sv,
	      const struct blk *live, int nlive, int64_t len)
{
	const struct ml_graph *g = s->g;
	if (!pointwise(n->op) || n->n_in < 1 || n->in[0] < 0 || n->out[0] < 0)
		return -1;
	int a = n->in[0], t = n->out[0];
	if (s->last_use[a] != i || s->slot_off[a] < 0 || s->slot_len[a] != len ||
	    g->tensors[a]->kind != ML_TK_ACT || sv[a].dtype != sv[t].dtype ||
	    sv[a].rank != sv[t].rank)
		return -1;
	for (int d = 0; d < sv[a].rank; d++)
		if (sv[a].dims[d] != sv[t].dims[d])
			return -1;
	for (int k = 1; k < n->n_in; k++)
		if (n->in[k] == a)
			return -1;
	for (int k = 0; k < nlive; k++)
		if (live[k].t == a)
			return k;
	return -1;
}

/*
 * note_room: the largest stretch of the arena free while node i runs (its
 * inputs and outputs are in live), which its kernels may borrow for
 * scratch (ml_cpu_scratch_lend): the widest gap between live blocks, or
 * the stretch above the last one when that is wider once the arena's final
 * top is known (room_len -1 until then, room_off the end of the blocks).
 */
static void
note_room(struct ml_session *s, int i, const struct blk *live, int nlive, int64_t *gap_off,
	  int64_t *gap_len)
{
	int64_t end = 0;
	gap_off[i] = gap_len[i] = 0;
	for (int k = 0; k < nlive; k++) {
		if (live[k].off - end > gap_len[i]) {
			gap_off[i] = end;
			gap_len[i] = live[k].off - end;
		}
		end = ML_MAX(end, live[k].off + live[k].len);
	}
	s->room_off[i] = end;
	s->room_len[i] = -1;
}

static int
plan(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_tval *sv = ml_calloc((size_t)g->n_tensors + 1, sizeof *sv);
	struct blk *live = ml_calloc((size_t)g->n_tensors + 1, sizeof *live);
	int64_t *gap_off = ml_calloc((size_t)g->n_nodes + 1, sizeof *gap_off);
	int64_t *gap_len = ml_calloc((size_t)g->n_nodes + 1, sizeof *gap_len);
	int nlive = 0, rc = 0;
	int64_t top = 0;

	if (sv == NULL || live == NULL || gap_off == NULL || gap_len == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto done;
	}
	for (int t = 0; t < g->n_tensors; t++) {
		s->slot_off[t] = -1;
		s->slot_len[t] = 0;
		if (s->bound[t]) {
			sv[t] = s->vals[t];
			sv[t].owned = false;
		} else {
			ml_graph_tval(g, t, &sv[t]);
			if (g->tensors[t]->kind != ML_TK_CONST && g->tensors[t]->kind != ML_TK_PARAM)
				sv[t].data = NULL;
		}
	}
	if ((rc = ml_infer_values(g, sv, e)) < 0)
		goto done;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_out; j++) {
			int t = n->out[j];
			if (t < 0)
				continue;
			int64_t len = ml_tval_nbytes(&sv[t]);
			if (len < 0)
				continue;
			len = (len + ALIGN - 1) / ALIGN * ALIGN;
			if (len == 0)
				len = ALIGN;
			/* an elementwise op may write over its dying first input */
			int inplace = j == 0 ? inplace_block(s, n, i, sv, live, nlive, len) : -1;
			if (inplace >= 0) {
				live[inplace].t = t;
				s->slot_off[t] = live[inplace].off;
				s->slot_len[t] = len;
				continue;
			}
			/* best fit among gaps of the offset-sorted live list */
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
			s->slot_off[t] = best;
			s->slot_len[t] = len;
			top = ML_MAX(top, best + len);
		}
		note_room(s, i, live, nlive, gap_off, gap_len);
		/* release what this node was the last to read, and unread outputs */
		for (int k = 0; k < nlive;) {
			int t = live[k].t;
			int lu = s->last_use[t];
			if (lu == i || (lu < 0 && g->tensors[t]->producer == i)) {
				memmove(&live[k], &live[k + 1], sizeof *live * (size_t)(nlive - k - 1));
				nlive--;
			} else {
				k++;
			}
		}
	}
	for (int i = 0; i < g->n_nodes; i++) {
		s->room_len[i] = top - s->room_off[i];
		if (gap_len[i] > s->room_len[i]) {
			s->room_off[i] = gap_off[i];
			s->room_len[i] = gap_len[i];
		}
	}
	ml_free(s->arena);
	s->arena = NULL;
	if (top > 0 && (s->arena = ml_malloc((size_t)top)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "cannot allocate an arena of %lld bytes", (long long)top);
		goto done;
	}
	s->arena_bytes = top;
done:
	if (sv != NULL)
		for (int t = 0; t < g->n_tensors; t++)
			if (!s->bound[t])
				ml_tval_clear(&sv[t]);
	ml_free(sv);
	ml_free(live);
	ml_free(gap_off);
	ml_free(gap_len);
	return rc;
}

static bool
plan_valid(struct ml_session *s)
{
	const struct ml_graph *g = s->g;
	int k = 0;
	int64_t key[64];
	for (int i = 0; i < g->n_inputs; i++) {
		const struct ml_tval *v = &s->vals[g->inputs[i]];
		for (int d = 0; d < v->rank && k < 64; d++)
			key[k++] = v->dims[d];
		if (k < 64)
			key[k++] = -2 - v->rank;
	}
	bool same = s->planned && k == s->plan_key_n && memcmp(key, s->plan_key, sizeof(int64_t) * (size_t)k) == 0;
	memcpy(s->plan_key, key, sizeof(int64_t) * (size_t)k);
	s->plan_key_n = k;
	return same;
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

int
ml_subsession_new(struct ml_session **out, struct ml_graph *sub, struct ml_session *parent,
		  struct ml_err *e)
{
	ML_TRY(ml_graph_toposort(sub, e));
	struct ml_session_opts o = parent->o;
	o.device = "cpu";
	o.profile = false;
	ML_TRY(ml_session_new(out, sub, &o, e));
	(*out)->parent = parent;
	return 0;
}

int
ml_session_bind(struct ml_session *s, int i, const struct ml_tval *v, struct ml_err *e)
{
	if (i < 0 || i >= s->g->n_inputs)
		return ml_fail(e, ML_EINVAL, "subgraph has %d inputs, not %d", s->g->n_inputs, i + 1);
	int t = s->g->inputs[i];
	ml_tval_clear(&s->vals[t]);
	s->vals[t] = *v;
	s->vals[t].owned = false;
	s->bound[t] = true;
	return 0;
}

const struct ml_graph *
ml_session_graph(const struct ml_session *s)
{
	return s->g;
}

int
ml_session_run(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	int rc = 0;

	s->err_sink = e;
	if (s->parent != NULL)
		resolve_outer(s);
	for (int i = 0; i < g->n_inputs; i++) {
		int t = g->inputs[i];
		if (s->bound[t])
			continue;
		if (g->tensors[t]->kind == ML_TK_CONST || g->tensors[t]->kind == ML_TK_PARAM)
			continue;
		return ml_fail(e, ML_EINVAL, "input '%s' is not given", g->tensors[t]->name);
	}
	clear_acts(s);
	for (int t = 0; t < g->n_tensors; t++) {
		if (s->bound[t])
			continue;
		if (g->tensors[t]->kind == ML_TK_CONST || g->tensors[t]->kind == ML_TK_PARAM)
			ml_graph_tval(g, t, &s->vals[t]);
	}
	if (!plan_valid(s)) {
		s->planned = false;
		if ((rc = plan(s, e)) < 0)
			return rc;
		s->planned = true;
	}
	if (s->hx != NULL && ml_hx_active(s)) {
		/* 1: the devices failed and the session fell back to the CPU */
		if ((rc = ml_hx_run(s, e)) != 1)
			return rc;
		clear_acts(s);
		for (int t = 0; t < g->n_tensors; t++)
			if (!s->bound[t] && (g->tensors[t]->kind == ML_TK_CONST ||
					     g->tensors[t]->kind == ML_TK_PARAM))
				ml_graph_tval(g, t, &s->vals[t]);
	}
	/* no device runs ahead here, so what the plan leaves free at a node is free */
	for (int i = 0; i < g->n_nodes; i++) {
		if (s->room_len[i] >= 4096)
			ml_cpu_scratch_lend(s->arena + s->room_off[i], (size_t)s->room_len[i]);
		rc = ml_session_run_node(s, i, NULL, NULL, e);
		ml_cpu_scratch_lend(NULL, 0);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/*
 * ml_session_run_node: run node i: check its inputs, infer and place its
 * outputs (arena slot or heap), run kern (NULL: the CPU kernel), record
 * the profile, release heap values after their last reader.
 */
int
ml_session_run_node(struct ml_session *s, int i, int (*kern)(void *arg, struct ml_opctx *c),
		    void *arg, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	int rc = 0;
	{
		const struct ml_node *n = &g->nodes[i];
		double t0 = s->o.profile ? ml_now() : 0;
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			s->in[j] = t >= 0 ? &s->vals[t] : NULL;
			if (s->in[j] != NULL && s->in[j]->data == NULL && ml_tval_numel(s->in[j]) != 0)
				return ml_fail(e, ML_EINVAL, "node '%s': input '%s' has no value",
					       n->name, g->tensors[t]->name);
		}
		/* outputs nobody names still need somewhere to go */
		struct ml_tval scratch[16];
		if (n->n_out > 16)
			return ml_fail(e, ML_ENOTSUP, "node '%s': too many outputs", n->name);
		for (int j = 0; j < n->n_out; j++) {
			int t = n->out[j];
			if (t >= 0) {
				ml_tval_clear(&s->vals[t]);
				s->out[j] = &s->vals[t];
			} else {
				memset(&scratch[j], 0, sizeof scratch[j]);
				s->out[j] = &scratch[j];
			}
		}
		if ((rc = ml_node_infer(g, n, s->in, s->out, e)) < 0)
			goto fail;
		for (int j = 0; j < n->n_out; j++) {
			struct ml_tval *o = s->out[j];
			int t = n->out[j];
			int64_t nb = ml_tval_nbytes(o);
			if (nb < 0)
				continue;	/* data-dependent: the kernel allocates */
			if (t >= 0 && s->slot_off[t] >= 0 && nb <= s->slot_len[t]) {
				o->data = s->arena + s->slot_off[t];
				o->owned = false;
			} else {
				int64_t dims[ML_MAX_RANK];
				memcpy(dims, o->dims, sizeof dims);
				if ((rc = ml_tval_alloc(o, o->dtype, o->rank, dims, e)) < 0)
					goto fail;
			}
		}
		struct ml_opctx c;
		ml_node_ctx(&c, g, n, s->in, s->out, e);
		c.sess = s;
		if ((rc = kern != NULL ? kern(arg, &c) : ml_cpu_kernel_get(n->op)(&c)) < 0)
			goto fail;
		if (s->o.profile) {
			s->node_time[i] = ml_now() - t0;
			s->node_start[i] = t0;
			for (int j = 0; j < n->n_out; j++)
				if (n->out[j] >= 0) {
					s->prof_val[n->out[j]] = *s->out[j];
					s->prof_val[n->out[j]].data = NULL;
					s->prof_val[n->out[j]].owned = false;
				}
			const struct ml_opdef *d = ml_opdef_get(n->op);
			int64_t bytes = 0, fl = 0;
			for (int j = 0; j < n->n_in; j++)
				if (s->in[j] != NULL && ml_tval_nbytes(s->in[j]) > 0)
					bytes += ml_tval_nbytes(s->in[j]);
			for (int j = 0; j < n->n_out; j++)
				if (ml_tval_nbytes(s->out[j]) > 0) {
					bytes += ml_tval_nbytes(s->out[j]);
					fl += ml_tval_numel(s->out[j]);
				}
			if (d->flops != NULL)
				fl = d->flops(&c);
			s->node_flops[i] = fl;
			s->node_bytes[i] = bytes;
		}
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] < 0)
				ml_tval_clear(&scratch[j]);
		if (s->check_shapes && (rc = check_static(s, n)) < 0)
			goto fail;
		/* release heap values after their last reader */
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t >= 0 && s->last_use[t] == i && !s->bound[t] &&
			    g->tensors[t]->kind == ML_TK_ACT)
				ml_tval_clear(&s->vals[t]);
		}
		return 0;
fail:
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] < 0)
				ml_tval_clear(&scratch[j]);
		return rc;
	}
	return 0;
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
