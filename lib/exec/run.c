/*
 * run.c: the executor. One loop runs every session, on the CPU alone or
 * over the CPU and a device: each node through its device's vtable
 * (lib/exec/device.h; the CPU's kernels work in place over the planned
 * arena), each tensor copied to the side that reads it, device nodes
 * enqueued ahead of CPU ones where they depend on nothing pending, and one
 * wait for the device at the end of the run. A device fault under
 * --device auto runs the graph again on the CPU.
 */
#include "exec/device.h"
#include "exec/session.h"

/* side_effect: whether op writes a stored tensor (its input 0) */
static bool
side_effect(enum ml_op op)
{
	return (ml_op_flags(op) & ML_OPF_SIDE_EFFECT) != 0;
}

/*
 * check_plan: with ML_CHECK_SHAPES=1, the shapes node n's inference just
 * gave its outputs must be the ones the plan inferred for the run's input
 * shapes (which a run without the check takes instead).
 */
static int
check_plan(struct ml_session *s, const struct ml_node *n)
{
	for (int j = 0; j < n->n_out; j++) {
		const struct ml_tval *v = s->out[j], *p = &s->shp[n->out[j]];
		bool ok = v->dtype == p->dtype && v->rank == p->rank;
		for (int d = 0; ok && d < v->rank; d++)
			ok = v->dims[d] == p->dims[d];
		if (!ok) {
			char a[128], b[128];
			return ml_fail(s->err_sink, ML_EINVAL,
				       "node '%s' (%s): output %d is %s but the plan said %s", n->name,
				       n->op_type, j, ml_tval_shape_str(v, a, sizeof a),
				       ml_tval_shape_str(p, b, sizeof b));
		}
	}
	return 0;
}

/*
 * run_node: run node i: check its inputs, give its outputs their shapes
 * (the plan's, or inferred now) and place them (arena slot or heap), run
 * kern (NULL: the CPU device's run over the host values), record the
 * profile, release heap values after their last reader.
 */
static int
run_node(struct ml_session *s, int i, int (*kern)(void *arg, struct ml_opctx *c), void *arg,
	 struct ml_err *e)
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
		bool known = s->known[i];
		for (int j = 0; j < n->n_out; j++) {
			int t = n->out[j];
			if (t >= 0) {
				struct ml_tval *v = &s->vals[t];
				if (v->owned)
					ml_free(v->data);
				/* the plan's shape (no data), or an empty value for inference */
				if (known)
					*v = s->shp[t];
				else
					memset(v, 0, sizeof *v);
				s->out[j] = v;
			} else {
				memset(&scratch[j], 0, sizeof scratch[j]);
				s->out[j] = &scratch[j];
			}
		}
		/*
		 * The shapes the plan inferred for this run's input shapes, where
		 * it knew them all; else (a shape that depends on a value) the
		 * node is inferred from its inputs now. ML_CHECK_SHAPES=1 infers
		 * every node and holds the plan's shapes to the result.
		 */
		if (!known || s->check_shapes) {
			if ((rc = ml_node_infer(g, n, s->in, s->out, e)) < 0)
				goto fail;
			if (known && (rc = check_plan(s, n)) < 0)
				goto fail;
		}
		for (int j = 0; j < n->n_out; j++) {
			struct ml_tval *o = s->out[j];
			int t = n->out[j];
			int64_t nb = known ? s->shp_bytes[t] : ml_tval_nbytes(o);
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
		struct ml_opctx c = {
			.g = g, .node = n, .n_in = n->n_in, .n_out = n->n_out, .in = s->in,
			.out = s->out, .opset = s->opset, .err = e, .sess = s,
			.body = &ml_exec_body_ops, .cache = &s->node_cache[i],
		};
		if ((rc = kern != NULL ? kern(arg, &c) : ml_cpu_devops.run(NULL, &c, NULL, NULL)) < 0)
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
		if (s->check_shapes && (rc = ml_session_check_static(s, n)) < 0)
			goto fail;
		/* release heap values after their last reader */
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t >= 0 && s->last_use[t] == i && !s->bound[t] && s->is_act[t])
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


/*
 * settle: wait for the device commands of each profiled node of the last
 * run and, with record, make their device times the nodes' times.
 */
void
ml_hx_settle(struct ml_session *s, bool record)
{
	struct ml_hx *hx = s->hx;
	if (hx->evset == NULL)
		return;
	for (int i = 0; i < s->g->n_nodes; i++) {
		if (hx->evset[i] == NULL)
			continue;
		double a, b;
		if (hx->ops->span(hx->dev, hx->evset[i], record ? &a : NULL, &b) == 0 && record) {
			s->node_start[i] = a;
			s->node_time[i] = b - a;
		}
		hx->evset[i] = NULL;
	}
}

/*
 * The run.
 */
/*
 * xfer: with profiling, record the copy of tensor t: the device's own
 * times of the copy where it has them (a download waits behind the kernels
 * queued before it; that wait is theirs, not the copy's), else from t0,
 * when the call was made, to its return.
 */
static void
xfer(struct ml_session *s, int t, int64_t bytes, bool to_dev, double t0)
{
	struct ml_hx *hx = s->hx;
	if (!s->o.profile)
		return;
	double t1 = ml_now(), a, b;
	if (hx->ops->xfer_times != NULL && hx->ops->xfer_times(hx->dev, &a, &b) == 0) {
		t0 = a;
		t1 = b;
	}
	if (hx->n_xfers == hx->cap_xfers) {
		int cap = hx->cap_xfers ? 2 * hx->cap_xfers : 64;
		struct ml_transfer *x = ml_realloc(hx->xfers, sizeof *x * (size_t)cap);
		if (x == NULL)
			return;
		hx->xfers = x;
		hx->cap_xfers = cap;
	}
	hx->xfers[hx->n_xfers++] = (struct ml_transfer){ t, hx->dev_index, bytes, to_dev, t0, t1 };
}

/* to_host: make tensor t valid on the host (download when only the device has it) */
static int
to_host(struct ml_session *s, int t, struct ml_err *e)
{
	struct ml_hx *hx = s->hx;
	if ((hx->loc[t] & ON_HOST) || hx->buf[t] == NULL)
		return 0;
	struct ml_tval *v = &s->vals[t];
	int64_t nb = ml_tval_nbytes(v);
	if (nb > 0) {
		double t0 = ml_now();
		void *dst = ml_is_stored(s->g, t) ? s->g->tensors[t]->data : v->data;
		ML_TRY(hx->ops->download(hx->dev, hx->buf[t], dst, (size_t)nb, e));
		xfer(s, t, nb, false, t0);
	}
	hx->loc[t] |= ON_HOST;
	hx->dirty[t] = false;
	return 0;
}

/* to_dev: make tensor t valid on the device (upload when only the host has it) */
static int
to_dev(struct ml_session *s, int t, struct ml_err *e)
{
	struct ml_hx *hx = s->hx;
	if ((hx->loc[t] & ON_DEV) && hx->buf[t] != NULL)
		return 0;
	struct ml_tval *v = &s->vals[t];
	int64_t nb = ml_tval_nbytes(v);
	if (nb < 0)
		return ml_fail(e, ML_EINVAL, "tensor '%s' has no value", s->g->tensors[t]->name);
	if (hx->buf[t] == NULL)
		ML_TRY(hx->ops->alloc(hx->dev, (size_t)nb, &hx->buf[t], e));
	if (nb > 0) {
		double t0 = ml_now();
		/*
		 * a constant or a bound input stays as it is until the run's end,
		 * which waits for the device: the copy need not be waited for
		 */
		bool keep = hx->ops->upload_keep != NULL &&
			    (s->g->tensors[t]->kind == ML_TK_CONST || (s->bound[t] && !s->outer[t]));
		ML_TRY((keep ? hx->ops->upload_keep : hx->ops->upload)(hx->dev, hx->buf[t], v->data,
									 (size_t)nb, e));
		xfer(s, t, nb, true, t0);
	}
	hx->loc[t] |= ON_DEV;
	return 0;
}

struct devrun {
	struct ml_session *s;
	int i;
	bool hoisted;		/* run ahead of CPU nodes before it in the order */
	bool timed;		/* start and end came from the device's profiling events */
	double start, end;
};

/* dev_kern: ml_session_run_node's kernel for a node placed on the device */
static int
dev_kern(void *arg, struct ml_opctx *c)
{
	struct devrun *r = arg;
	struct ml_session *s = r->s;
	struct ml_hx *hx = s->hx;
	const struct ml_node *n = c->node;
	const struct ml_graph *g = s->g;
	void *bin[64] = { 0 }, *bout[64] = { 0 };
	unsigned host = hx->ops->host_inputs(n);

	if (n->n_in > 64 || n->n_out > 64)
		return ml_opfail(c, ML_ENOTSUP, "too many operands for the device");
	for (int j = 0; j < n->n_in; j++) {
		int t = n->in[j];
		if (t < 0)
			continue;
		if (ml_host_input(host, j))
			ML_TRY(to_host(s, t, c->err));
		else {
			ML_TRY(to_dev(s, t, c->err));
			bin[j] = hx->buf[t];
		}
	}
	bool view = hx->ops->view(n);
	for (int j = 0; j < n->n_out; j++) {
		int t = n->out[j];
		if (t < 0 || (view && j == 0))
			continue;
		int64_t nb = ml_tval_nbytes(c->out[j]);
		if (nb < 0)
			return ml_opfail(c, ML_ENOTSUP, "output size not known before the run");
		if (hx->buf[t] != NULL) {
			hx->ops->free(hx->dev, hx->buf[t]);
			hx->buf[t] = NULL;
		}
		ML_TRY(hx->ops->alloc(hx->dev, (size_t)nb, &bout[j], c->err));
		hx->buf[t] = bout[j];
	}
	int rc = hx->ops->run(hx->dev, c, bin, bout);
	if (rc == ML_ENOTSUP) {
		/* a case the device refuses at run time: this node on the CPU */
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] >= 0)
				ML_TRY(to_host(s, n->in[j], c->err));
		for (int j = 0; j < n->n_out; j++) {
			if (n->out[j] >= 0 && hx->buf[n->out[j]] != NULL) {
				hx->ops->free(hx->dev, hx->buf[n->out[j]]);
				hx->buf[n->out[j]] = NULL;
			}
			/*
			 * run ahead, its arena slot may still hold a value CPU
			 * nodes before it read: the result goes to the heap
			 */
			struct ml_tval *o = c->out[j];
			if (r->hoisted && o != NULL && o->data != NULL && !o->owned) {
				int64_t dims[ML_MAX_RANK];
				memcpy(dims, o->dims, sizeof dims);
				ML_TRY(ml_tval_alloc(o, o->dtype, o->rank, dims, c->err));
			}
		}
		ML_TRY(ml_cpu_kernel_get(n->op)(c));
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] >= 0)
				hx->loc[n->out[j]] = ON_HOST;
		return 0;
	}
	if (rc < 0)
		return rc;
	if (view && n->out[0] >= 0) {
		hx->buf[n->out[0]] = bout[0];
	}
	for (int j = 0; j < n->n_out; j++)
		if (n->out[j] >= 0)
			hx->loc[n->out[j]] = ON_DEV;
	/* a side-effect op wrote its stored target's device copy */
	if (side_effect(n->op))
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t >= 0 && ml_is_stored(g, t) && j == 0) {
				hx->loc[t] = ON_DEV;
				hx->dirty[t] = true;
			}
		}
	if (s->o.profile && hx->ops->take != NULL) {
		/* the times are read after the run: no wait here, the CPU goes on */
		hx->evset[r->i] = hx->ops->take(hx->dev);
	} else if (s->o.profile && hx->ops->times != NULL) {
		ML_TRY(hx->ops->sync(hx->dev, c->err));
		double a, b;
		if (hx->ops->times(hx->dev, &a, &b) == 0) {
			r->timed = true;
			r->start = a;
			r->end = b;
		}
	}
	return 0;
}

/*
 * run_cpu: node i on the CPU. With a device in the run (dev), its inputs
 * are brought to the host first (a body's enclosing values too), and its
 * outputs' device copies are dropped. Without one, the node's kernels may
 * borrow what the plan leaves free of the arena while it runs: no device
 * runs ahead then, so nothing else writes there.
 */
static int
run_cpu(struct ml_session *s, int i, bool dev, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	const struct ml_node *n = &g->nodes[i];
	int rc;
	if (!dev) {
		if (s->room_len[i] >= 4096)
			ml_cpu_scratch_lend(s->arena + s->room_off[i], (size_t)s->room_len[i]);
		rc = run_node(s, i, NULL, NULL, e);
		ml_cpu_scratch_lend(NULL, 0);
		return rc;
	}
	for (int j = 0; j < n->n_in; j++)
		if (n->in[j] >= 0 && (rc = to_host(s, n->in[j], e)) < 0)
			return rc;
	/* a body (If, Loop, Scan) reads enclosing values by name: all to the host */
	bool body = ml_node_has_body(n);
	for (int t = 0; body && t < g->n_tensors; t++)
		if (hx->buf[t] != NULL && (ml_is_stored(g, t) || s->last_use[t] >= i) &&
		    (rc = to_host(s, t, e)) < 0)
			return rc;
	rc = run_node(s, i, NULL, NULL, e);
	for (int j = 0; j < n->n_out; j++)
		if (n->out[j] >= 0) {
			hx->loc[n->out[j]] = ON_HOST;
			if (hx->buf[n->out[j]] != NULL) {
				hx->ops->free(hx->dev, hx->buf[n->out[j]]);
				hx->buf[n->out[j]] = NULL;
			}
		}
	/* a CPU update op wrote the host copy: the device copy is stale */
	if (rc == 0 && side_effect(n->op))
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] >= 0 && ml_is_stored(g, n->in[j]))
				hx->loc[n->in[j]] = ON_HOST;
	return rc;
}

/*
 * run_one: node i on its device (hoisted: ahead of CPU nodes before it),
 * its inputs copied where it reads them; then, with a device in the run
 * (dev), the device buffers of the tensors it read last are released.
 */
static int
run_one(struct ml_session *s, int i, bool hoisted, bool dev, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	const struct ml_node *n = &g->nodes[i];
	int rc;
	if (!dev || !hx->node_dev[i])
		return run_cpu(s, i, dev, e);
	struct devrun r = { s, i, hoisted, false, 0, 0 };
	if ((rc = run_node(s, i, dev_kern, &r, e)) < 0)
		return rc;
	/* the device's own clock, not the host's enqueue time */
	if (r.timed) {
		s->node_start[i] = r.start;
		s->node_time[i] = r.end - r.start;
	}
	/* device buffers die with their last reader */
	for (int j = 0; j < n->n_in; j++) {
		int t = n->in[j];
		if (t >= 0 && s->last_use[t] == i && !ml_is_stored(g, t) &&
		    hx->buf[t] != NULL) {
			hx->ops->free(hx->dev, hx->buf[t]);
			hx->buf[t] = NULL;
			hx->loc[t] &= (uint8_t)~ON_DEV;
		}
	}
	return 0;
}

/*
 * hoistable: whether device node k may be enqueued now, while the nodes
 * from cur up to k have not all run: its inputs are made, the ones it
 * reads on the host are there (no download into a slot a pending node
 * may still read), no pending node before it reads an input it is the
 * last reader of (which releases it), writes stored tensors or reads
 * values by name (side effects, bodies).
 */
static bool
hoistable(const struct ml_session *s, const bool *done, int cur, int k)
{
	const struct ml_graph *g = s->g;
	const struct ml_hx *hx = s->hx;
	const struct ml_node *n = &g->nodes[k];
	if (done[k] || !hx->node_dev[k] || side_effect(n->op) || ml_node_has_body(n))
		return false;
	unsigned host = hx->ops->host_inputs(n);
	for (int j = 0; j < n->n_in; j++) {
		int t = n->in[j];
		if (t < 0)
			continue;
		int p = g->tensors[t]->producer;
		if (p >= 0 && !done[p])
			return false;
		if (ml_host_input(host, j) && !(hx->loc[t] & ON_HOST))
			return false;
	}
	for (int i = cur; i < k; i++) {
		const struct ml_node *m = &g->nodes[i];
		if (done[i])
			continue;
		if (side_effect(m->op) || ml_node_has_body(m))
			return false;
		for (int a = 0; a < m->n_in; a++)
			for (int b = 0; m->in[a] >= 0 && b < n->n_in; b++)
				if (m->in[a] == n->in[b] && s->last_use[n->in[b]] == k &&
				    !ml_is_stored(g, n->in[b]) && !s->bound[n->in[b]])
					return false;
	}
	return true;
}

/* how far ahead of a CPU node the executor looks for device nodes to enqueue */
#define HOIST_WINDOW 32

/*
 * begin_device: a run with the device starts with every activation on the
 * host alone, stored tensors where they were left, and the device's
 * profiling set to this session's.
 */
static void
begin_device(struct ml_session *s)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	hx->n_xfers = 0;
	for (int t = 0; t < g->n_tensors; t++) {
		if (ml_is_stored(g, t)) {
			if (!hx->dirty[t])
				hx->loc[t] |= ON_HOST;
			if (hx->buf[t] == NULL)
				hx->loc[t] &= (uint8_t)~ON_DEV;
		} else {
			if (hx->buf[t] != NULL) {
				hx->ops->free(hx->dev, hx->buf[t]);
				hx->buf[t] = NULL;
			}
			hx->loc[t] = ON_HOST;
		}
	}
	ml_hx_settle(s, false);
	/* the device is shared by the process's sessions: profile only when this one does */
	if (hx->ops->profile != NULL)
		hx->ops->profile(hx->dev, s->o.profile);
	if (hx->ops->take != NULL) {
		void *old = hx->ops->take(hx->dev);	/* what another session left */
		if (old != NULL)
			hx->ops->span(hx->dev, old, NULL, NULL);
	}
	memset(hx->done, 0, sizeof *hx->done * (size_t)g->n_nodes);
}

/* end_device: the outputs to the host, one wait for the device, its buffers released */
static int
end_device(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	for (int i = 0; i < g->n_outputs; i++)
		ML_TRY(to_host(s, g->outputs[i], e));
	ML_TRY(hx->ops->sync(hx->dev, e));
	ml_hx_settle(s, true);
	for (int t = 0; t < g->n_tensors; t++)
		if (!ml_is_stored(g, t) && hx->buf[t] != NULL) {
			hx->ops->free(hx->dev, hx->buf[t]);
			hx->buf[t] = NULL;
		}
	return 0;
}

/*
 * run_nodes: the one loop. Every node in topological order on its device;
 * with a device in the run, the device nodes ahead that depend on nothing
 * pending are enqueued before each CPU node, so the device works while
 * the CPU does.
 */
static int
run_nodes(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	bool dev = hx != NULL && hx->active;
	if (dev)
		begin_device(s);
	for (int i = 0; i < g->n_nodes; i++) {
		if (dev && hx->done[i])
			continue;
		for (int k = i + 1; dev && !hx->node_dev[i] && k < g->n_nodes &&
				    k <= i + HOIST_WINDOW; k++)
			if (hoistable(s, hx->done, i, k)) {
				ML_TRY(run_one(s, k, true, true, e));
				hx->done[k] = true;
			}
		ML_TRY(run_one(s, i, false, dev, e));
		if (dev)
			hx->done[i] = true;
	}
	return dev ? end_device(s, e) : 0;
}

int
ml_exec_run(struct ml_session *s, struct ml_err *e)
{
	struct ml_hx *hx = s->hx;
	if (hx == NULL || !hx->active)
		return run_nodes(s, e);
	struct ml_err de = { 0 };
	int rc = run_nodes(s, &de);
	if (rc >= 0)
		return 0;
	/* copies still in flight read the session's inputs: let them end first */
	struct ml_err se = { 0 };
	hx->ops->sync(hx->dev, &se);
	/* the device failed (or the CPU part did: then it fails again there) */
	bool dev_fault = rc == ML_ECL || rc == ML_ENODEV ||
			 (rc == ML_ENOMEM && strstr(de.msg, "device memory") != NULL);
	if (!hx->is_auto || !dev_fault) {
		if (e != NULL)
			*e = de;
		return rc;
	}
	/* auto: the whole run again on the CPU, which the session keeps from now on */
	ml_hx_release(hx, s->g->n_tensors);
	ml_hx_fall_back(s, de.msg);
	ml_session_reset_values(s);
	return run_nodes(s, e);
}

int
ml_session_sync(struct ml_session *s, struct ml_err *e)
{
	struct ml_hx *hx = s->hx;
	if (hx == NULL || hx->dev == NULL)
		return 0;
	for (int t = 0; t < s->g->n_tensors; t++)
		if (hx->dirty[t] && ml_is_stored(s->g, t)) {
			hx->loc[t] &= (uint8_t)~ON_HOST;
			ML_TRY(to_host(s, t, e));
		}
	return 0;
}

void
ml_session_reload(struct ml_session *s)
{
	struct ml_hx *hx = s->hx;
	if (hx == NULL || hx->dev == NULL)
		return;
	for (int t = 0; t < s->g->n_tensors; t++)
		if (ml_is_stored(s->g, t) && !hx->dirty[t])
			hx->loc[t] = ON_HOST;
}

int
ml_session_transfers(const struct ml_session *s, const struct ml_transfer **out)
{
	*out = s->hx != NULL ? s->hx->xfers : NULL;
	return s->hx != NULL ? s->hx->n_xfers : 0;
}
