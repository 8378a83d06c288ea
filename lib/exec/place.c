/*
 * place.c: placement. Which node of a session runs on which device:
 * everything the device has a kernel for (--device cl), the plan of least
 * predicted time from the measured cost model (--device auto; calib.c
 * measures what the model lacks), or a plan the caller gives
 * (ml_session_place, from mlrun --plan-file). A device that cannot be
 * opened or fails while preparing leaves auto on the CPU, with the reason
 * in ml_session_note.
 */
#include "exec/costmodel.h"
#include "exec/device.h"
#include "exec/session.h"

/* auto: what a plan with the device must gain over the all-CPU one (fraction, microseconds) */
#define AUTO_MARGIN 0.10
#define AUTO_MIN_US 20.0
/* auto from measured plans: what a device plan must gain over the CPU's measured time */
#define AUTO_MEASURED_MARGIN 0.03

/*
 * Static sizes of a node, for the model: FLOPs (ml_node_flops) and bytes
 * read and written from the inferred shapes.
 */
/*
 * Static sizes of a node, for the model: FLOPs (ml_node_flops) and bytes
 * read and written from the inferred shapes.
 */
static double
node_bytes(const struct ml_graph *g, const struct ml_node *n)
{
	double b = 0;
	for (int j = 0; j < n->n_in; j++)
		if (n->in[j] >= 0)
			b += (double)ml_tensor_bytes(g, n->in[j]);
	for (int j = 0; j < n->n_out; j++)
		if (n->out[j] >= 0)
			b += (double)ml_tensor_bytes(g, n->out[j]);
	return b;
}

/*
 * predicted: the predicted microseconds of the placement nd[]: nodes, plus
 * a copy for every tensor read on a device other than where it lives
 * (parameters count once per run only where they start on the host and
 * are read on the CPU: device copies are resident).
 */
double
ml_hx_predicted(const struct ml_session *s, const int *nd, double *xfer_bytes)
{
	const struct ml_graph *g = s->g;
	const struct ml_hx *hx = s->hx;
	double us = 0, xb = 0;
	int copies = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		us += nd[i] ? hx->cost_dev[i] : hx->cost_cpu[i];
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t < 0)
				continue;
			const struct ml_tensor *ten = g->tensors[t];
			int p = ten->producer;
			int where = p >= 0 ? nd[p] : 0;
			if (ten->kind == ML_TK_CONST || ten->kind == ML_TK_PARAM)
				continue;
			if (where != nd[i] && !(nd[i] && ml_host_input(hx->ops->host_inputs(n), j))) {
				xb += (double)ml_tensor_bytes(g, t);
				copies++;
			}
		}
	}
	for (int i = 0; i < g->n_outputs; i++) {
		int p = g->tensors[g->outputs[i]]->producer;
		if (p >= 0 && nd[p]) {
			xb += (double)ml_tensor_bytes(g, g->outputs[i]);
			copies++;
		}
	}
	if (xfer_bytes != NULL)
		*xfer_bytes = xb;
	return us + xb * hx->bw_ns_per_byte * 1e-3 + copies * hx->xfer_us;
}

static void
note(struct ml_hx *hx, const char *fmt, const char *why)
{
	if (hx->note[0] == '\0')
		snprintf(hx->note, sizeof hx->note, fmt, why);
}

int
ml_hx_prepare(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	for (int i = 0; i < g->n_nodes; i++)
		if (hx->node_dev[i])
			ML_TRY(hx->ops->prepare(hx->dev, g, &g->nodes[i], e));
	return 0;
}
void
ml_hx_release(struct ml_hx *hx, int nt)
{
	if (hx->buf != NULL && hx->ops != NULL)
		for (int t = 0; t < nt; t++)
			if (hx->buf[t] != NULL) {
				hx->ops->free(hx->dev, hx->buf[t]);
				hx->buf[t] = NULL;
			}
}

/* fall_back: put every node on the CPU and say why */
void
ml_hx_fall_back(struct ml_session *s, const char *why)
{
	struct ml_hx *hx = s->hx;
	for (int i = 0; i < s->g->n_nodes; i++)
		hx->node_dev[i] = 0;
	hx->active = false;
	hx->failed = true;
	note(hx, "running on the CPU: %s", why);
}

/*
 * graph_key: a hash of what a placement's measured time depends on: the
 * ops of g, how they connect, and every tensor's dtype and static shape.
 */
static uint64_t
graph_key(const struct ml_graph *g)
{
	uint64_t h = 1469598103934665603ull;
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		MIX(n->op);
		for (int j = 0; j < n->n_in; j++)
			MIX(n->in[j] + 2);
		for (int j = 0; j < n->n_out; j++)
			MIX(n->out[j] + 2);
		MIX(n->n_attr);
	}
	for (int t = 0; t < g->n_tensors; t++) {
		const struct ml_tensor *ten = g->tensors[t];
		MIX(ten->dtype);
		MIX(ten->rank + 2);
		for (int d = 0; d < ten->rank; d++)
			MIX(ten->dims[d] + 2);
	}
#undef MIX
	return h;
}

/*
 * measured: the wall times of the n candidate plans from the model's
 * "__plan__:KEY:NAME" rows of device dn, measuring (and adding) the rows
 * the model lacks; false when some plan has no time (not measurable: no
 * static input shapes, or ML_AUTO=predict). wall[k] in microseconds, a
 * plan that failed to run 1e30.
 */
static bool
measured(struct ml_session *s, struct ml_costmodel *cm, const char *dn, int *const *cand,
	 const char *const *name, int n, double *wall)
{
	const char *how = getenv("ML_AUTO");
	if (how != NULL && strcmp(how, "predict") == 0)
		return false;
	uint64_t key = graph_key(s->g);
	char op[3][48];
	bool miss = false;
	for (int k = 0; k < n; k++) {
		snprintf(op[k], sizeof op[k], "__plan__:%016llx:%s", (unsigned long long)key, name[k]);
		const struct ml_cm_row *r = ml_cm_find(cm, dn, op[k], false);
		wall[k] = r != NULL && r->nodes > 0 ? r->sum_ns * 1e-3 / (double)r->nodes : -1;
		miss |= r == NULL;
	}
	if (miss) {
		double sec[3];
		struct ml_err me = { 0 };
		if (ml_hx_measure(s, cand, n, sec, &me) < 0)
			return false;
		for (int k = 0; k < n; k++) {
			struct ml_cm_row *r = ml_cm_find(cm, dn, op[k], true);
			if (r == NULL)
				return false;
			/* a plan that cannot run keeps a row of 0 nodes: known, never chosen */
			r->sum_ns = sec[k] > 0 ? sec[k] * 1e9 : 0;
			r->sum_flops = r->sum_bytes = 0;
			r->nodes = sec[k] > 0 ? 1 : 0;
			r->min_ns = r->sum_ns;
			cm->changed = true;
			wall[k] = sec[k] > 0 ? sec[k] * 1e6 : -1;
		}
	}
	bool any = false;
	for (int k = 0; k < n; k++) {
		if (wall[k] < 0)
			wall[k] = 1e30;
		any |= wall[k] < 1e30;
	}
	return any && wall[0] < 1e30;
}

/*
 * choose: auto's plan. Three candidates: all on the CPU, everything the
 * device has on the device, and a greedy walk that puts a node on the
 * device only where it and the copies of its inputs are predicted
 * AUTO_MARGIN cheaper there. Where the model holds (or can measure) the
 * wall time of each candidate on this graph, the fastest measured one
 * wins, the CPU unless a device plan is AUTO_MEASURED_MARGIN faster (runs
 * vary); else a plan that uses the device must be predicted AUTO_MARGIN
 * (and AUTO_MIN_US) faster than the all-CPU plan: per-op rates come from
 * a noisy machine, and a device that shares the host's cores (POCL) adds
 * no compute.
 */
static int
choose(struct ml_session *s, struct ml_costmodel *cm, const char *dn, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	size_t nn = (size_t)g->n_nodes + 1;
	int *cpu = ml_calloc(nn, sizeof *cpu), *all = ml_calloc(nn, sizeof *all);
	int *mix = ml_calloc(nn, sizeof *mix);
	if (cpu == NULL || all == NULL || mix == NULL) {
		ml_free(cpu);
		ml_free(all);
		ml_free(mix);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		double in_dev = 0, in_cpu = 0;
		all[i] = hx->node_ok[i] ? hx->dev_index : 0;
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t < 0 || g->tensors[t]->producer < 0)
				continue;
			double x = (double)ml_tensor_bytes(g, t) * hx->bw_ns_per_byte * 1e-3 +
				   hx->xfer_us;
			if (mix[g->tensors[t]->producer])
				in_cpu += x;
			else if (!ml_host_input(hx->ops->host_inputs(n), j))
				in_dev += x;
		}
		mix[i] = hx->node_ok[i] && hx->cost_dev[i] + in_dev <
			 (hx->cost_cpu[i] + in_cpu) * (1 - AUTO_MARGIN) ? hx->dev_index : 0;
	}
	int *const cand[3] = { cpu, all, mix };
	static const char *const name[3] = { "cpu", "dev", "mix" };
	size_t sz = sizeof *mix * (size_t)g->n_nodes;
	int nc = memcmp(all, mix, sz) == 0 || memcmp(cpu, mix, sz) == 0 ? 2 : 3;
	double wall[3], pred[3];
	const int *best = cpu;
	if (measured(s, cm, dn, cand, name, nc, wall)) {
		double bw = wall[0] * (1 - AUTO_MEASURED_MARGIN);
		for (int k = 1; k < nc; k++)
			if (wall[k] < bw) {
				bw = wall[k];
				best = cand[k];
			}
		snprintf(hx->how, sizeof hx->how, "measured: cpu %.1f us, device %.1f us%s%.1f%s",
			 wall[0], wall[1] < 1e30 ? wall[1] : -1.0, nc == 3 ? ", mixed " : "",
			 nc == 3 ? (wall[2] < 1e30 ? wall[2] : -1.0) : 0.0, nc == 3 ? " us" : "");
	} else {
		double bp = ml_hx_predicted(s, cpu, NULL) * (1 - AUTO_MARGIN) - AUTO_MIN_US;
		for (int k = 1; k < nc; k++)
			if ((pred[k] = ml_hx_predicted(s, cand[k], NULL)) < bp) {
				bp = pred[k];
				best = cand[k];
			}
		snprintf(hx->how, sizeof hx->how, "predicted by the cost model");
	}
	memcpy(hx->node_dev, best, sizeof *best * (size_t)g->n_nodes);
	ml_free(cpu);
	ml_free(all);
	ml_free(mix);
	return 0;
}

/*
 * place_auto: --device auto: the cost model (mlprof --calibrate's JSON
 * fills what the text model lacks), calibrated where it lacks this
 * graph's ops, the per-node predictions, and the plan (choose). 1 when
 * the calibration failed and the session fell back to the CPU.
 */
static int
place_auto(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	struct ml_costmodel cm = { 0 };
	struct ml_err de = { 0 };
	int rc;
	ml_cm_load(&cm);
	/* the model's device key: the name without blanks */
	char dn[64];
	snprintf(dn, sizeof dn, "%s", hx->ops->describe(hx->dev));
	for (char *p = dn; *p; p++)
		if (*p == ' ' || *p == '\t')
			*p = '_';
	char jp[4096];
	ml_cm_path(jp, sizeof jp);
	size_t jl = strlen(jp);
	if (jl > 4 && strcmp(jp + jl - 4, ".txt") == 0) {
		snprintf(jp + jl - 4, sizeof jp - (jl - 4), ".json");
		ml_cm_load_json(&cm, jp, hx->dev_index - 1, dn);
	} else if (jl > 5 && strcmp(jp + jl - 5, ".json") == 0) {
		ml_cm_load_json(&cm, jp, hx->dev_index - 1, dn);
	}
	if (ml_hx_calibrate(s, &cm, dn, &de) < 0) {
		ml_free(cm.rows);
		ml_hx_fall_back(s, de.msg);
		return 1;
	}
	double floor;
	double launch = ml_cm_launch(&cm, dn, &floor);
	struct ml_cm_row *cr = ml_cm_find(&cm, dn, ML_CM_COPY, false);
	if (cr != NULL && cr->nodes > 0 && cr->sum_bytes > 0) {
		hx->xfer_us = cr->min_ns * 1e-3;
		hx->bw_ns_per_byte = ML_MAX(0.0, cr->sum_ns - cr->min_ns * (double)cr->nodes) /
				     cr->sum_bytes;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		double fl = (double)ml_node_flops(g, i), by = node_bytes(g, n);
		char kb[64];
		const char *key = ml_cm_key(n, kb, sizeof kb);
		double c = ml_cm_predict(&cm, "cpu", key, n->op_type, fl, by);
		double d = ml_cm_predict(&cm, dn, key, n->op_type, fl, by);
		hx->cost_cpu[i] = c >= 0 ? c : 1;
		/* a kernel costs at least the cheapest one measured, plus its launch */
		if (d >= 0 && !hx->ops->view(n))
			d = ML_MAX(d, floor) + launch;
		hx->cost_dev[i] = hx->node_ok[i] && d >= 0 ? d : 1e30;
	}
	rc = choose(s, &cm, dn, e);
	ml_cm_save(&cm);
	ml_free(cm.rows);
	return rc;
}

int
ml_hx_arrays(struct ml_hx *hx, const struct ml_graph *g, struct ml_err *e)
{
	size_t nn = (size_t)g->n_nodes + 1, nt = (size_t)g->n_tensors + 1;
	hx->node_dev = ml_calloc(nn, sizeof *hx->node_dev);
	hx->node_ok = ml_calloc(nn, sizeof *hx->node_ok);
	hx->cost_cpu = ml_calloc(nn, sizeof *hx->cost_cpu);
	hx->cost_dev = ml_calloc(nn, sizeof *hx->cost_dev);
	hx->buf = ml_calloc(nt, sizeof *hx->buf);
	hx->loc = ml_calloc(nt, sizeof *hx->loc);
	hx->dirty = ml_calloc(nt, sizeof *hx->dirty);
	hx->done = ml_calloc(nn, sizeof *hx->done);
	hx->evset = ml_calloc(nn, sizeof *hx->evset);
	if (hx->node_dev == NULL || hx->node_ok == NULL || hx->cost_cpu == NULL ||
	    hx->cost_dev == NULL || hx->buf == NULL || hx->loc == NULL || hx->dirty == NULL ||
	    hx->done == NULL || hx->evset == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	return 0;
}

int
ml_hx_new(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	const char *dev = s->o.device;
	struct ml_hx *hx = ml_calloc(1, sizeof *hx);
	if (hx == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	s->hx = hx;
	ML_TRY(ml_hx_arrays(hx, g, e));
	hx->is_auto = strcmp(dev, "auto") == 0;
	hx->bw_ns_per_byte = 0.2;	/* ~5 GB/s until measured */
	hx->xfer_us = 20;
	struct ml_err de = { 0 };
	int rc = ml_hx_open(s, dev, &de);
	if (rc < 0) {
		if (!hx->is_auto || rc == ML_EINVAL) {
			if (e != NULL)
				*e = de;
			return rc;
		}
		ml_hx_fall_back(s, de.msg);
		return 0;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		hx->node_ok[i] = hx->ops->supports(hx->dev, g, n);
		hx->node_dev[i] = hx->node_ok[i] ? hx->dev_index : 0;
	}
	if (hx->is_auto) {
		rc = place_auto(s, e);
		if (rc == 1)
			return 0;	/* the calibration failed: on the CPU now */
		ML_TRY(rc);
	} else {
		/* no model: a rough guess for --plan (microseconds at 10/1 GFLOP/s) */
		for (int i = 0; i < g->n_nodes; i++) {
			double fl = (double)ml_node_flops(g, i), by = node_bytes(g, &g->nodes[i]);
			hx->cost_cpu[i] = fl / 1e4 + by / 5e3 + 1;
			hx->cost_dev[i] = hx->node_ok[i] ? fl / 1e4 + by / 5e3 + 10 : 1e30;
		}
	}
	hx->active = false;
	for (int i = 0; i < g->n_nodes; i++)
		hx->active |= hx->node_dev[i] != 0;
	if (hx->active && (rc = ml_hx_prepare(s, &de)) < 0) {
		if (!hx->is_auto) {
			if (e != NULL)
				*e = de;
			return rc;
		}
		ml_hx_fall_back(s, de.msg);
	}
	return 0;
}

void
ml_hx_free(struct ml_session *s)
{
	struct ml_hx *hx = s->hx;
	if (hx == NULL)
		return;
	if (hx->dev != NULL && hx->ops != NULL) {
		/* nothing in flight may still read what the session frees next */
		struct ml_err se = { 0 };
		hx->ops->sync(hx->dev, &se);
	}
	ml_hx_settle(s, false);
	ml_hx_release(hx, s->g->n_tensors);
	ml_free(hx->done);
	ml_free(hx->evset);
	ml_free(hx->node_dev);
	ml_free(hx->node_ok);
	ml_free(hx->cost_cpu);
	ml_free(hx->cost_dev);
	ml_free(hx->buf);
	ml_free(hx->loc);
	ml_free(hx->dirty);
	ml_free(hx->xfers);
	ml_free(hx);
	s->hx = NULL;
}

bool
ml_hx_active(const struct ml_session *s)
{
	return s->hx != NULL && s->hx->active;
}
/*
 * Accessors.
 */
int
ml_session_node_device(const struct ml_session *s, int i)
{
	if (i < 0 || i >= s->g->n_nodes)
		return -1;
	return s->hx != NULL ? s->hx->node_dev[i] : 0;
}

int
ml_session_place(struct ml_session *s, const int *dev, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	for (int i = 0; i < g->n_nodes; i++) {
		if (dev[i] == 0)
			continue;
		if (hx == NULL || hx->dev == NULL || dev[i] != hx->dev_index)
			return ml_fail(e, ML_ENODEV, "node %d ('%s'): device %s%d is not open in "
				       "this session", i, g->nodes[i].name, dev[i] > 0 ? "cl:" : "",
				       dev[i] - 1);
	}
	if (hx == NULL)
		return 0;
	hx->active = false;
	for (int i = 0; i < g->n_nodes; i++) {
		hx->node_dev[i] = dev[i] && hx->node_ok[i] ? dev[i] : 0;
		hx->active |= hx->node_dev[i] != 0;
	}
	if (hx->active) {
		struct ml_err de = { 0 };
		int rc = ml_hx_prepare(s, &de);
		if (rc < 0) {
			if (!hx->is_auto) {
				if (e != NULL)
					*e = de;
				return rc;
			}
			ml_hx_fall_back(s, de.msg);
		}
	}
	return 0;
}
const char *
ml_session_note(const struct ml_session *s)
{
	return s->hx != NULL && s->hx->note[0] ? s->hx->note : NULL;
}

void
ml_session_device_stats(const struct ml_session *s, struct ml_session_devstats *st)
{
	memset(st, 0, sizeof *st);
	if (s->hx == NULL)
		return;
	st->t_probe = s->hx->t_probe;
	if (s->hx->dev == NULL || s->hx->ops->stats == NULL)
		return;
	struct ml_devstats d = { 0 };
	s->hx->ops->stats(s->hx->dev, &d);
	st->t_setup = d.t_setup;
	st->t_programs = d.t_programs;
	st->n_built = d.n_built;
	st->n_cached = d.n_cached;
	snprintf(st->gemm_tile, sizeof st->gemm_tile, "%s", d.gemm_tile);
}
