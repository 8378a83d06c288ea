/*
 * calib.c: the cost model's measurements for --device auto. The graph
 * runs with profiling on the CPU and on the device, on random inputs where
 * the session has none bound, for the op types the model lacks; the per-op
 * sums, the copies' fixed cost and rate, and the host's cost per launch go
 * into the model (costmodel.c), which is kept per machine and device.
 */
#include "exec/costmodel.h"
#include "exec/device.h"
#include "exec/session.h"

/*
 * Calibration: run the graph with profiling on the CPU and on the device
 * for the op types the model lacks, on random inputs where the session has
 * none bound; add the per-op sums to the model.
 */

/*
 * timed_runs: run m runs times; best[i] the smallest time of node i over
 * them, *wall the smallest run's wall time (the first run, which builds
 * and plans, is not counted when runs > 1).
 */
static int
timed_runs(struct ml_session *m, int runs, double *best, double *wall, struct ml_err *e)
{
	*wall = 1e30;
	for (int k = 0; k < runs; k++) {
		double t0 = ml_now();
		ML_TRY(ml_session_run(m, e));
		double w = ml_now() - t0;
		if (k == 0 && runs > 1)
			continue;
		*wall = ML_MIN(*wall, w);
		for (int i = 0; best != NULL && i < m->g->n_nodes; i++)
			best[i] = k <= 1 || m->node_time[i] < best[i] ? m->node_time[i] : best[i];
	}
	return 0;
}

static int
bind_random(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	for (int k = 0; k < g->n_inputs; k++) {
		int t = g->inputs[k];
		const struct ml_tensor *ten = g->tensors[t];
		if (ml_is_stored(g, t))
			continue;
		if (ten->rank < 0 || !ml_dtype_is_float(ten->dtype))
			return ml_fail(e, ML_ENOTSUP, "input '%s' has no static shape", ten->name);
		int64_t dims[ML_MAX_RANK];
		for (int d = 0; d < ten->rank; d++)
			dims[d] = ten->dims[d] >= 0 ? ten->dims[d] : 1;
		struct ml_tval v = { 0 };
		ML_TRY(ml_tval_alloc(&v, ten->dtype, ten->rank, dims, e));
		int64_t n = ml_tval_numel(&v);
		for (int64_t i = 0; i < n; i++)
			ml_set_f64(v.data, v.dtype, i, (double)((i * 7919) % 200) / 100.0 - 1.0);
		int rc = ml_session_set_input(s, ten->name, &v, e);
		ml_tval_clear(&v);
		ML_TRY(rc);
	}
	return 0;
}

/*
 * attach_device: give measuring session m (made with device "cpu") the
 * device of hx, with hx's placement and kernels, never auto (a failure is
 * reported, not hidden by a fall-back). ML_ENOMEM.
 */
static int
attach_device(struct ml_session *m, const struct ml_hx *hx, struct ml_err *e)
{
	const struct ml_graph *g = m->g;
	struct ml_hx *mh = ml_calloc(1, sizeof *mh);
	if (mh == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	*mh = *hx;
	mh->is_auto = false;
	mh->xfers = NULL;
	mh->n_xfers = mh->cap_xfers = 0;
	m->hx = mh;
	ML_TRY(ml_hx_arrays(mh, g, e));
	memcpy(mh->node_dev, hx->node_dev, sizeof *mh->node_dev * (size_t)g->n_nodes);
	memcpy(mh->node_ok, hx->node_ok, sizeof *mh->node_ok * (size_t)g->n_nodes);
	mh->active = true;
	return 0;
}

int
ml_hx_calibrate(struct ml_session *s, struct ml_costmodel *cm, const char *devname,
		struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	bool *miss_cpu = ml_calloc((size_t)g->n_nodes + 1, sizeof *miss_cpu);
	bool *miss_dev = ml_calloc((size_t)g->n_nodes + 1, sizeof *miss_dev);
	int *zero = ml_calloc((size_t)g->n_nodes + 1, sizeof *zero);
	double *best = ml_calloc((size_t)g->n_nodes + 1, sizeof *best);
	int rc = 0;
	bool need_cpu = false, need_dev = false, any_dev = false;
	if (miss_cpu == NULL || miss_dev == NULL || zero == NULL || best == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		char kb[64];
		const char *op = ml_cm_key(&g->nodes[i], kb, sizeof kb);
		miss_cpu[i] = ml_cm_find(cm, "cpu", op, false) == NULL;
		miss_dev[i] = hx->node_ok[i] && ml_cm_find(cm, devname, op, false) == NULL;
		need_cpu |= miss_cpu[i];
		need_dev |= miss_dev[i];
		any_dev |= hx->node_ok[i];
	}
	/* the launch and copy costs are measured once per device */
	need_dev |= any_dev && (ml_cm_find(cm, devname, ML_CM_LAUNCH, false) == NULL ||
				ml_cm_find(cm, devname, ML_CM_COPY, false) == NULL);
	if (!need_cpu && !need_dev)
		goto out;
	/* a measuring session of the same graph on each device */
	struct ml_session *m = NULL;
	struct ml_session_opts o = s->o;
	o.profile = true;
	o.device = "cpu";
	if ((rc = ml_session_new(&m, s->g, &o, e)) < 0)
		goto out;
	if ((rc = bind_random(m, e)) < 0) {
		ml_session_free(m);
		rc = 0;	/* no static input shapes: the model stays as it is */
		goto out;
	}
	double wall;
	if (need_cpu && (rc = timed_runs(m, 3, best, &wall, e)) == 0)
		ml_cm_add(cm, m, "cpu", zero, 0, miss_cpu, best);
	if (rc < 0) {
		ml_session_free(m);
		rc = 0;
		goto out;
	}
	if (need_dev) {
		/* the same session with this session's device and placement */
		struct ml_hx *mh;
		if ((rc = attach_device(m, hx, e)) < 0) {
			ml_session_free(m);
			goto out;
		}
		mh = m->hx;
		memcpy(mh->node_dev, hx->node_dev, sizeof *mh->node_dev * (size_t)g->n_nodes);
		memcpy(mh->node_ok, hx->node_ok, sizeof *mh->node_ok * (size_t)g->n_nodes);
		mh->active = true;
		if ((rc = ml_hx_prepare(m, e)) == 0 && (rc = timed_runs(m, 3, best, &wall, e)) == 0) {
			ml_cm_add(cm, m, devname, mh->node_dev, hx->dev_index, miss_dev, best);
			/* the copies the (last) run made: a fixed cost and a rate */
			double by = 0, t = 0, tmin = 1e30;
			for (int k = 0; k < mh->n_xfers; k++) {
				double x = mh->xfers[k].end - mh->xfers[k].start;
				by += (double)mh->xfers[k].bytes;
				t += x;
				tmin = ML_MIN(tmin, x);
			}
			struct ml_cm_row *r = mh->n_xfers > 0 ?
					      ml_cm_find(cm, devname, ML_CM_COPY, true) : NULL;
			if (r != NULL) {
				r->sum_ns = t * 1e9;
				r->sum_bytes = by;
				r->sum_flops = 0;
				r->nodes = mh->n_xfers;
				r->min_ns = tmin * 1e9;
				cm->changed = true;
			}
			/*
			 * the host's cost per launch: a run without profiling (no
			 * wait after each node) against the device's own times
			 */
			double wall_np;
			m->o.profile = false;
			rc = timed_runs(m, 2, NULL, &wall_np, e);
			m->o.profile = true;
			int nl = 0;
			double busy = t, kmin = 0;
			for (int i = 0; i < g->n_nodes; i++) {
				nl += mh->node_dev[i] != 0;
				busy += best[i];
				if (mh->node_dev[i] && !hx->ops->view(&g->nodes[i]) &&
				    (kmin == 0 || best[i] < kmin))
					kmin = best[i];
			}
			if (rc == 0 && nl > 0 &&
			    (r = ml_cm_find(cm, devname, ML_CM_LAUNCH, true)) != NULL) {
				r->sum_ns = ML_MAX(0.0, wall_np - busy) * 1e9;
				r->sum_flops = r->sum_bytes = 0;
				r->min_ns = kmin * 1e9;
				r->nodes = nl;
				cm->changed = true;
			}
		}
		if (rc < 0)
			mh->failed = true;
	}
	ml_session_free(m);
out:
	ml_free(miss_cpu);
	ml_free(miss_dev);
	ml_free(zero);
	ml_free(best);
	return rc;
}

int
ml_hx_measure(struct ml_session *s, int *const *cand, int n, double *wall, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_session *m = NULL;
	struct ml_session_opts o = s->o;
	int rc;
	for (int k = 0; k < n; k++)
		wall[k] = -1;
	o.profile = false;
	o.device = "cpu";
	ML_TRY(ml_session_new(&m, s->g, &o, e));
	if (bind_random(m, e) < 0) {
		ml_session_free(m);
		return 0;	/* no static input shapes: nothing to measure */
	}
	if ((rc = attach_device(m, s->hx, e)) < 0) {
		ml_session_free(m);
		return rc;
	}
	for (int k = 0; k < n; k++) {
		struct ml_err me = { 0 };
		bool on = false;
		for (int i = 0; i < g->n_nodes; i++) {
			m->hx->node_dev[i] = m->hx->node_ok[i] ? cand[k][i] : 0;
			on |= m->hx->node_dev[i] != 0;
		}
		m->hx->active = on;
		if ((on && ml_hx_prepare(m, &me) < 0) || timed_runs(m, 3, NULL, &wall[k], &me) < 0)
			wall[k] = -1;	/* this plan fails here: never chosen */
	}
	ml_session_free(m);
	return 0;
}
