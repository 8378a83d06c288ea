/*
 * device.c: heterogeneous execution. Device discovery, the CPU behind the
 * device interface, placement (--device cl, auto from a measured cost
 * model, an edited plan), and the run over several devices: each tensor
 * is valid on the host, on the device or both; copies are made where a
 * reader on the other side needs it. PARAM and CONST tensors stay
 * resident in device memory across runs.
 */
#include <stdio.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/costmodel.h"
#include "exec/device.h"
#include "exec/session.h"

#define ON_HOST 1
#define ON_DEV 2

/* auto: what a plan with the device must gain over the all-CPU one (fraction, microseconds) */
#define AUTO_MARGIN 0.10
#define AUTO_MIN_US 20.0

/* the per-session device state */
struct ml_hx {
	const struct ml_devops *ops;
	void *dev;		/* the opened OpenCL device, NULL when none */
	int dev_index;		/* its device index (N + 1) */
	bool is_auto;
	bool active;		/* some node runs on the device */
	bool failed;		/* the device failed: the session is on the CPU now */
	int *node_dev;		/* per node: 0 cpu, dev_index */
	bool *node_ok;		/* per node: the device has a kernel for it */
	double *cost_cpu, *cost_dev;	/* per node: predicted microseconds */
	void **buf;		/* per tensor: device buffer or NULL */
	uint8_t *loc;		/* per tensor: ON_HOST | ON_DEV */
	bool *dirty;		/* per PARAM/CONST tensor: the device copy is newer */
	bool *done;		/* per node: has run in the run in progress */
	void **evset;		/* per node, profiling: its device commands (ops->take) */
	struct ml_transfer *xfers;
	int n_xfers, cap_xfers;
	char note[512];
	double t_probe;
	double bw_ns_per_byte, xfer_us;	/* transfer cost model */
};

static double probe_time = -1;

/*
 * Discovery.
 */
int
ml_devices(struct ml_device_info **out, int *n, struct ml_err *e)
{
	struct ml_err pe = { 0 };
	double t0 = ml_now();
	int ncl = ml_cl_count(&pe);
	if (probe_time < 0)
		probe_time = ml_now() - t0;
	struct ml_device_info *v = ml_calloc((size_t)ncl + 1, sizeof *v);
	*out = NULL;
	*n = 0;
	if (v == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	v[0].index = 0;
	snprintf(v[0].id, sizeof v[0].id, "cpu");
	snprintf(v[0].name, sizeof v[0].name, "host CPU (C kernels, OpenBLAS)");
	snprintf(v[0].type, sizeof v[0].type, "cpu");
	v[0].compute_units = ml_get_threads();
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psz > 0)
		v[0].global_mem = (int64_t)pages * psz;
	v[0].fp16 = v[0].fp64 = true;
	for (int i = 0; i < ncl; i++)
		ml_cl_info(i, &v[i + 1]);
	if (ncl == 0 && e != NULL)
		*e = pe;
	*out = v;
	*n = ncl + 1;
	return 0;
}

/*
 * The CPU behind the device interface: buffers are host memory, copies
 * are memcpy, a node runs its CPU kernel. The executor's own CPU path
 * (session.c, from the planned arena) does the same without the copies.
 */
struct cpubuf {
	int refs;
	size_t n;
	_Alignas(64) unsigned char data[];
};

static int
cpu_open(int index, void **ctx, struct ml_err *e)
{
	if (index != 0)
		return ml_fail(e, ML_ENODEV, "there is one CPU device");
	*ctx = NULL;
	return 0;
}

static const char *
cpu_describe(void *ctx)
{
	(void)ctx;
	return "cpu";
}

static bool
cpu_supports(void *ctx, const struct ml_graph *g, const struct ml_node *n)
{
	(void)ctx;
	(void)g;
	return ml_cpu_kernel_get(n->op) != NULL;
}

static int
cpu_prepare(void *ctx, const struct ml_graph *g, const struct ml_node *n, struct ml_err *e)
{
	(void)ctx, (void)g, (void)n, (void)e;
	return 0;
}

static unsigned
cpu_host_inputs(const struct ml_node *n)
{
	(void)n;
	return ~0u;
}

static bool
cpu_view(const struct ml_node *n)
{
	(void)n;
	return false;
}

static int
cpu_alloc(void *ctx, size_t n, void **buf, struct ml_err *e)
{
	(void)ctx;
	struct cpubuf *b = ml_malloc(sizeof *b + (n ? n : 1));
	if (b == NULL)
		return ml_fail(e, ML_ENOMEM, "cannot allocate %zu bytes", n);
	b->refs = 1;
	b->n = n;
	*buf = b;
	return 0;
}

static void
cpu_retain(void *ctx, void *buf)
{
	(void)ctx;
	((struct cpubuf *)buf)->refs++;
}

static void
cpu_free(void *ctx, void *buf)
{
	(void)ctx;
	struct cpubuf *b = buf;
	if (b != NULL && --b->refs == 0)
		ml_free(b);
}

static int
cpu_upload(void *ctx, void *buf, const void *src, size_t n, struct ml_err *e)
{
	(void)ctx, (void)e;
	memcpy(((struct cpubuf *)buf)->data, src, n);
	return 0;
}

static int
cpu_download(void *ctx, void *buf, void *dst, size_t n, struct ml_err *e)
{
	(void)ctx, (void)e;
	memcpy(dst, ((struct cpubuf *)buf)->data, n);
	return 0;
}

static int
cpu_run(void *ctx, struct ml_opctx *c, void **bin, void **bout)
{
	(void)ctx;
	void *save_in[64], *save_out[64];
	if (c->n_in > 64 || c->n_out > 64)
		return ml_opfail(c, ML_ENOTSUP, "too many operands");
	for (int j = 0; j < c->n_in; j++)
		if (c->in[j] != NULL) {
			save_in[j] = c->in[j]->data;
			if (bin[j] != NULL)
				c->in[j]->data = ((struct cpubuf *)bin[j])->data;
		}
	for (int j = 0; j < c->n_out; j++) {
		save_out[j] = c->out[j]->data;
		if (bout[j] != NULL)
			c->out[j]->data = ((struct cpubuf *)bout[j])->data;
	}
	int rc = ml_cpu_kernel_get(c->node->op)(c);
	for (int j = 0; j < c->n_in; j++)
		if (c->in[j] != NULL)
			c->in[j]->data = save_in[j];
	for (int j = 0; j < c->n_out; j++)
		c->out[j]->data = save_out[j];
	return rc;
}

static int
cpu_sync(void *ctx, struct ml_err *e)
{
	(void)ctx, (void)e;
	return 0;
}

const struct ml_devops ml_cpu_devops = {
	.name = "cpu",
	.open = cpu_open,
	.describe = cpu_describe,
	.supports = cpu_supports,
	.prepare = cpu_prepare,
	.host_inputs = cpu_host_inputs,
	.view = cpu_view,
	.alloc = cpu_alloc,
	.retain = cpu_retain,
	.free = cpu_free,
	.upload = cpu_upload,
	.download = cpu_download,
	.run = cpu_run,
	.sync = cpu_sync,
};

/*
 * Static sizes of a node, for the model: FLOPs (ml_node_flops) and bytes
 * read and written from the inferred shapes.
 */
static double
node_bytes(const struct ml_graph *g, const struct ml_node *n)
{
	double b = 0;
	for (int j = 0; j < n->n_in; j++)
		if (n->in[j] >= 0) {
			struct ml_tval v;
			ml_graph_tval(g, n->in[j], &v);
			int64_t nb = ml_tval_nbytes(&v);
			b += nb > 0 ? (double)nb : 0;
		}
	for (int j = 0; j < n->n_out; j++)
		if (n->out[j] >= 0) {
			struct ml_tval v;
			ml_graph_tval(g, n->out[j], &v);
			int64_t nb = ml_tval_nbytes(&v);
			b += nb > 0 ? (double)nb : 0;
		}
	return b;
}

static int64_t
tensor_bytes(const struct ml_graph *g, int t)
{
	struct ml_tval v;
	ml_graph_tval(g, t, &v);
	int64_t nb = ml_tval_nbytes(&v);
	return nb > 0 ? nb : 0;
}

/*
 * Placement.
 */
static bool
side_effect(enum ml_op op)
{
	return (ml_op_flags(op) & ML_OPF_SIDE_EFFECT) != 0;
}

/*
 * predicted: the predicted microseconds of the placement nd[]: nodes, plus
 * a copy for every tensor read on a device other than where it lives
 * (parameters count once per run only where they start on the host and
 * are read on the CPU: device copies are resident).
 */
static double
predicted(const struct ml_session *s, const int *nd, double *xfer_bytes)
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
				xb += (double)tensor_bytes(g, t);
				copies++;
			}
		}
	}
	for (int i = 0; i < g->n_outputs; i++) {
		int p = g->tensors[g->outputs[i]]->producer;
		if (p >= 0 && nd[p]) {
			xb += (double)tensor_bytes(g, g->outputs[i]);
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

/* opening the OpenCL device named by dev ("cl", "cl:N", "auto") */
static int
open_device(struct ml_session *s, const char *dev, struct ml_err *e)
{
	struct ml_hx *hx = s->hx;
	int idx = 0;
	if (strncmp(dev, "cl:", 3) == 0) {
		char *end;
		errno = 0;
		long v = strtol(dev + 3, &end, 10);
		if (*end != '\0' || end == dev + 3 || v < 0 || v > 1000 || errno != 0)
			return ml_fail(e, ML_EINVAL, "unknown device '%s' (cpu, cl, cl:N, auto)", dev);
		idx = (int)v;
	} else if (strcmp(dev, "cl") != 0 && strcmp(dev, "auto") != 0) {
		return ml_fail(e, ML_EINVAL, "unknown device '%s' (cpu, cl, cl:N, auto)", dev);
	}
	double t0 = ml_now();
	struct ml_err pe = { 0 };
	int n = ml_cl_count(&pe);
	if (probe_time < 0)
		probe_time = ml_now() - t0;
	hx->t_probe = probe_time;
	if (n == 0) {
		if (e != NULL)
			*e = pe;
		return pe.code != 0 ? pe.code : ML_ENODEV;
	}
	if (idx >= n)
		return ml_fail(e, ML_ENODEV, "no OpenCL device cl:%d (there %s %d)", idx,
			       n == 1 ? "is" : "are", n);
	hx->ops = &ml_cl_devops;
	ML_TRY(hx->ops->open(idx, &hx->dev, e));
	hx->dev_index = idx + 1;
	return 0;
}

/*
 * calibrate: measure the per-op costs this graph needs and the model lacks
 * by running it once on the CPU and once on the device, with profiling.
 */
static int
calibrate(struct ml_session *s, struct ml_costmodel *cm, const char *devname, struct ml_err *e);

static int
prepare_nodes(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	for (int i = 0; i < g->n_nodes; i++)
		if (hx->node_dev[i])
			ML_TRY(hx->ops->prepare(hx->dev, g, &g->nodes[i], e));
	return 0;
}

/*
 * settle: wait for the device commands of each profiled node of the last
 * run and, with record, make their device times the nodes' times.
 */
static void
settle(struct ml_session *s, bool record)
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

static void
hx_release(struct ml_hx *hx, int nt)
{
	if (hx->buf != NULL && hx->ops != NULL)
		for (int t = 0; t < nt; t++)
			if (hx->buf[t] != NULL) {
				hx->ops->free(hx->dev, hx->buf[t]);
				hx->buf[t] = NULL;
			}
}

/* fall_back: put every node on the CPU and say why */
static void
fall_back(struct ml_session *s, const char *why)
{
	struct ml_hx *hx = s->hx;
	for (int i = 0; i < s->g->n_nodes; i++)
		hx->node_dev[i] = 0;
	hx->active = false;
	hx->failed = true;
	note(hx, "running on the CPU: %s", why);
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
	hx->is_auto = strcmp(dev, "auto") == 0;
	hx->bw_ns_per_byte = 0.2;	/* ~5 GB/s until measured */
	hx->xfer_us = 20;
	struct ml_err de = { 0 };
	int rc = open_device(s, dev, &de);
	if (rc < 0) {
		if (!hx->is_auto || rc == ML_EINVAL) {
			if (e != NULL)
				*e = de;
			return rc;
		}
		fall_back(s, de.msg);
		return 0;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		hx->node_ok[i] = hx->ops->supports(hx->dev, g, n);
		hx->node_dev[i] = hx->node_ok[i] ? hx->dev_index : 0;
	}
	if (hx->is_auto) {
		struct ml_costmodel cm = { 0 };
		ml_cm_load(&cm);
		/* the model's device key: the name without blanks */
		char dn[64];
		snprintf(dn, sizeof dn, "%s", hx->ops->describe(hx->dev));
		for (char *p = dn; *p; p++)
			if (*p == ' ' || *p == '\t')
				*p = '_';
		/* what mlprof --calibrate measured fills what this model lacks */
		char jp[4096];
		ml_cm_path(jp, sizeof jp);
		size_t jl = strlen(jp);
		if (jl > 4 && strcmp(jp + jl - 4, ".txt") == 0) {
			snprintf(jp + jl - 4, sizeof jp - (jl - 4), ".json");
			ml_cm_load_json(&cm, jp, hx->dev_index - 1, dn);
		} else if (jl > 5 && strcmp(jp + jl - 5, ".json") == 0) {
			ml_cm_load_json(&cm, jp, hx->dev_index - 1, dn);
		}
		rc = calibrate(s, &cm, dn, &de);
		if (rc < 0) {
			ml_free(cm.rows);
			fall_back(s, de.msg);
			return 0;
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
		ml_cm_save(&cm);
		ml_free(cm.rows);
		/*
		 * Three candidates: all on the CPU, everything the device has on
		 * the device, and a greedy walk that puts a node on the device
		 * only where it and the copies of its inputs are predicted
		 * AUTO_MARGIN cheaper there. A plan that uses the device must be
		 * predicted AUTO_MARGIN (and AUTO_MIN_US) faster than the all-CPU
		 * plan: the model is measured on a noisy machine, and a device
		 * that shares the host's cores (POCL) adds no compute.
		 */
		int *best = ml_calloc(nn, sizeof *best), *cand = ml_calloc(nn, sizeof *cand);
		if (best == NULL || cand == NULL) {
			ml_free(best);
			ml_free(cand);
			return ml_fail(e, ML_ENOMEM, "out of memory");
		}
		double cpu_us = predicted(s, best, NULL);
		double best_us = cpu_us * (1 - AUTO_MARGIN) - AUTO_MIN_US;
		double us = predicted(s, hx->node_dev, NULL);
		if (us < best_us) {
			best_us = us;
			memcpy(best, hx->node_dev, sizeof *best * (size_t)g->n_nodes);
		}
		for (int i = 0; i < g->n_nodes; i++) {
			const struct ml_node *n = &g->nodes[i];
			double in_dev = 0, in_cpu = 0;
			for (int j = 0; j < n->n_in; j++) {
				int t = n->in[j];
				if (t < 0 || g->tensors[t]->producer < 0)
					continue;
				double x = (double)tensor_bytes(g, t) * hx->bw_ns_per_byte * 1e-3 +
					   hx->xfer_us;
				if (cand[g->tensors[t]->producer])
					in_cpu += x;
				else if (!ml_host_input(hx->ops->host_inputs(n), j))
					in_dev += x;
			}
			cand[i] = hx->node_ok[i] && hx->cost_dev[i] + in_dev <
				  (hx->cost_cpu[i] + in_cpu) * (1 - AUTO_MARGIN) ? hx->dev_index : 0;
		}
		us = predicted(s, cand, NULL);
		if (us < best_us) {
			best_us = us;
			memcpy(best, cand, sizeof *best * (size_t)g->n_nodes);
		}
		memcpy(hx->node_dev, best, sizeof *best * (size_t)g->n_nodes);
		ml_free(best);
		ml_free(cand);
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
	if (hx->active && (rc = prepare_nodes(s, &de)) < 0) {
		if (!hx->is_auto) {
			if (e != NULL)
				*e = de;
			return rc;
		}
		fall_back(s, de.msg);
	}
	return 0;
}

void
ml_hx_free(struct ml_session *s)
{
	struct ml_hx *hx = s->hx;
	if (hx == NULL)
		return;
	settle(s, false);
	hx_release(hx, s->g->n_tensors);
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
 * The run.
 */
static void
xfer(struct ml_session *s, int t, int64_t bytes, bool to_dev, double t0)
{
	struct ml_hx *hx = s->hx;
	if (!s->o.profile)
		return;
	if (hx->n_xfers == hx->cap_xfers) {
		int cap = hx->cap_xfers ? 2 * hx->cap_xfers : 64;
		struct ml_transfer *x = ml_realloc(hx->xfers, sizeof *x * (size_t)cap);
		if (x == NULL)
			return;
		hx->xfers = x;
		hx->cap_xfers = cap;
	}
	hx->xfers[hx->n_xfers++] = (struct ml_transfer){ t, hx->dev_index, bytes, to_dev, t0,
							 ml_now() };
}

static bool
is_stored(const struct ml_graph *g, int t)
{
	return g->tensors[t]->kind == ML_TK_CONST || g->tensors[t]->kind == ML_TK_PARAM;
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
		void *dst = is_stored(s->g, t) ? s->g->tensors[t]->data : v->data;
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
		ML_TRY(hx->ops->upload(hx->dev, hx->buf[t], v->data, (size_t)nb, e));
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
			if (t >= 0 && is_stored(g, t) && j == 0) {
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
 * run_one: node i on its device (hoisted: ahead of CPU nodes before it),
 * its inputs copied where it reads them; then the device buffers of the
 * tensors it read last are released.
 */
static int
run_one(struct ml_session *s, int i, bool hoisted, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	const struct ml_node *n = &g->nodes[i];
	int rc;
	if (hx->node_dev[i]) {
		struct devrun r = { s, i, hoisted, false, 0, 0 };
		rc = ml_session_run_node(s, i, dev_kern, &r, e);
		/* the device's own clock, not the host's enqueue time */
		if (rc == 0 && r.timed) {
			s->node_start[i] = r.start;
			s->node_time[i] = r.end - r.start;
		}
	} else {
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] >= 0 && (rc = to_host(s, n->in[j], e)) < 0)
				return rc;
		/* a body (If, Loop, Scan) reads enclosing values by name: all to the host */
		bool body = false;
		for (int a = 0; a < n->n_attr; a++)
			body |= n->attrs[a].type == ML_ATTR_GRAPH ||
				n->attrs[a].type == ML_ATTR_GRAPHS;
		for (int t = 0; body && t < g->n_tensors; t++)
			if (hx->buf[t] != NULL && (is_stored(g, t) || s->last_use[t] >= i) &&
			    (rc = to_host(s, t, e)) < 0)
				return rc;
		rc = ml_session_run_node(s, i, NULL, NULL, e);
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
				if (n->in[j] >= 0 && is_stored(g, n->in[j]))
					hx->loc[n->in[j]] = ON_HOST;
	}
	if (rc < 0)
		return rc;
	/* device buffers die with their last reader */
	for (int j = 0; j < n->n_in; j++) {
		int t = n->in[j];
		if (t >= 0 && s->last_use[t] == i && !is_stored(g, t) &&
		    hx->buf[t] != NULL) {
			hx->ops->free(hx->dev, hx->buf[t]);
			hx->buf[t] = NULL;
			hx->loc[t] &= (uint8_t)~ON_DEV;
		}
	}
	return 0;
}

static bool
has_body(const struct ml_node *n)
{
	for (int a = 0; a < n->n_attr; a++)
		if (n->attrs[a].type == ML_ATTR_GRAPH || n->attrs[a].type == ML_ATTR_GRAPHS)
			return true;
	return false;
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
	if (done[k] || !hx->node_dev[k] || side_effect(n->op) || has_body(n))
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
		if (side_effect(m->op) || has_body(m))
			return false;
		for (int a = 0; a < m->n_in; a++)
			for (int b = 0; m->in[a] >= 0 && b < n->n_in; b++)
				if (m->in[a] == n->in[b] && s->last_use[n->in[b]] == k &&
				    !is_stored(g, n->in[b]) && !s->bound[n->in[b]])
					return false;
	}
	return true;
}

/* how far ahead of a CPU node the executor looks for device nodes to enqueue */
#define HOIST_WINDOW 32

static int
run_all(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_hx *hx = s->hx;
	hx->n_xfers = 0;
	for (int t = 0; t < g->n_tensors; t++) {
		if (is_stored(g, t)) {
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
	settle(s, false);
	/* the device is shared by the process's sessions: profile only when this one does */
	if (hx->ops->profile != NULL)
		hx->ops->profile(hx->dev, s->o.profile);
	if (hx->ops->take != NULL) {
		void *old = hx->ops->take(hx->dev);	/* what another session left */
		if (old != NULL)
			hx->ops->span(hx->dev, old, NULL, NULL);
	}
	memset(hx->done, 0, sizeof *hx->done * (size_t)g->n_nodes);
	for (int i = 0; i < g->n_nodes; i++) {
		int rc;
		if (hx->done[i])
			continue;
		/*
		 * before a CPU node, enqueue the device nodes ahead that depend
		 * on nothing pending: the device works while the CPU does
		 */
		for (int k = i + 1; !hx->node_dev[i] && k < g->n_nodes && k <= i + HOIST_WINDOW; k++)
			if (hoistable(s, hx->done, i, k)) {
				if ((rc = run_one(s, k, true, e)) < 0)
					return rc;
				hx->done[k] = true;
			}
		if ((rc = run_one(s, i, false, e)) < 0)
			return rc;
		hx->done[i] = true;
	}
	for (int i = 0; i < g->n_outputs; i++) {
		int rc = to_host(s, g->outputs[i], e);
		if (rc < 0)
			return rc;
	}
	int rc = hx->ops->sync(hx->dev, e);
	if (rc < 0)
		return rc;
	settle(s, true);
	for (int t = 0; t < g->n_tensors; t++)
		if (!is_stored(g, t) && hx->buf[t] != NULL) {
			hx->ops->free(hx->dev, hx->buf[t]);
			hx->buf[t] = NULL;
		}
	return 0;
}

int
ml_hx_run(struct ml_session *s, struct ml_err *e)
{
	struct ml_err de = { 0 };
	int rc = run_all(s, &de);
	if (rc >= 0)
		return 0;
	struct ml_hx *hx = s->hx;
	/* the device failed (or the CPU part did: then it fails again there) */
	bool dev_fault = rc == ML_ECL || rc == ML_ENODEV ||
			 (rc == ML_ENOMEM && strstr(de.msg, "device memory") != NULL);
	if (!hx->is_auto || !dev_fault) {
		if (e != NULL)
			*e = de;
		return rc;
	}
	hx_release(hx, s->g->n_tensors);
	fall_back(s, de.msg);
	return 1;
}

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
		if (is_stored(g, t))
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

static int
calibrate(struct ml_session *s, struct ml_costmodel *cm, const char *devname, struct ml_err *e)
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
		struct ml_hx *mh = ml_calloc(1, sizeof *mh);
		size_t nn = (size_t)g->n_nodes + 1, nt = (size_t)g->n_tensors + 1;
		if (mh == NULL) {
			ml_session_free(m);
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
		*mh = *hx;
		mh->is_auto = false;
		mh->xfers = NULL;
		mh->n_xfers = mh->cap_xfers = 0;
		mh->node_dev = ml_calloc(nn, sizeof *mh->node_dev);
		mh->node_ok = ml_calloc(nn, sizeof *mh->node_ok);
		mh->cost_cpu = ml_calloc(nn, sizeof *mh->cost_cpu);
		mh->cost_dev = ml_calloc(nn, sizeof *mh->cost_dev);
		mh->buf = ml_calloc(nt, sizeof *mh->buf);
		mh->loc = ml_calloc(nt, sizeof *mh->loc);
		mh->dirty = ml_calloc(nt, sizeof *mh->dirty);
		mh->done = ml_calloc(nn, sizeof *mh->done);
		mh->evset = ml_calloc(nn, sizeof *mh->evset);
		m->hx = mh;
		if (mh->node_dev == NULL || mh->node_ok == NULL || mh->cost_cpu == NULL ||
		    mh->cost_dev == NULL || mh->buf == NULL || mh->loc == NULL || mh->dirty == NULL ||
		    mh->done == NULL || mh->evset == NULL) {
			ml_session_free(m);
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
		memcpy(mh->node_dev, hx->node_dev, sizeof *mh->node_dev * (size_t)g->n_nodes);
		memcpy(mh->node_ok, hx->node_ok, sizeof *mh->node_ok * (size_t)g->n_nodes);
		mh->active = true;
		if ((rc = prepare_nodes(m, e)) == 0 && (rc = timed_runs(m, 3, best, &wall, e)) == 0) {
			ml_cm_add(cm, m, devname, mh->node_dev, hx->dev_index, miss_dev, best);
			/* the copies the (last) run made: a fixed cost and a rate */
			double by = 0, t = 0, tmin = 1e30;
			for (int k = 0; k < mh->n_xfers; k++) {
				double x = mh->xfers[k].end - mh->xfers[k].start;
				by += (double)mh->xfers[k].bytes;
				t += x;
				tmin = ML_MIN(tmin, x);
			}
			struct ml_cm_row *r = mh->n_xfers > 0 ? ml_cm_find(cm, devname, ML_CM_COPY, true) : NULL;
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
			if (rc == 0 && nl > 0 && (r = ml_cm_find(cm, devname, ML_CM_LAUNCH, true)) != NULL) {
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
		int rc = prepare_nodes(s, &de);
		if (rc < 0) {
			if (!hx->is_auto) {
				if (e != NULL)
					*e = de;
				return rc;
			}
			fall_back(s, de.msg);
		}
	}
	return 0;
}

static const char *
dev_id(int d, char *buf, size_t n)
{
	if (d == 0)
		snprintf(buf, n, "cpu");
	else
		snprintf(buf, n, "cl:%d", d - 1);
	return buf;
}

static void
json_str(FILE *fp, const char *s)
{
	fputc('"', fp);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(fp, "\\%c", c);
		else if (c < 0x20)
			fprintf(fp, "\\u%04x", c);
		else
			fputc(c, fp);
	}
	fputc('"', fp);
}

int
ml_session_plan_write(const struct ml_session *s, FILE *fp, bool json, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	const struct ml_hx *hx = s->hx;
	int *nd = ml_calloc((size_t)g->n_nodes + 1, sizeof *nd);
	if (nd == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < g->n_nodes; i++)
		nd[i] = hx != NULL ? hx->node_dev[i] : 0;
	double total = 0, moved = 0;
	char id[16];
	if (json)
		fprintf(fp, "{\"device\": \"%s\", \"nodes\": [", s->o.device ? s->o.device : "cpu");
	else
		fprintf(fp, "%-5s %-28s %-20s %-6s %12s %12s\n", "node", "name", "op", "device",
			"cost_us", "bytes_in");
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		double us = hx == NULL ? 0 : nd[i] ? hx->cost_dev[i] : hx->cost_cpu[i];
		int64_t in_bytes = 0;
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t < 0 || hx == NULL)
				continue;
			int p = g->tensors[t]->producer;
			int where = p >= 0 ? nd[p] : 0;
			bool host = nd[i] && ml_host_input(hx->ops->host_inputs(n), j);
			if (is_stored(g, t) || host ? (host && where) : where != nd[i])
				in_bytes += tensor_bytes(g, t);
		}
		total += us;
		moved += (double)in_bytes;
		if (json) {
			fprintf(fp, "%s\n  {\"index\": %d, \"name\": ", i ? "," : "", i);
			json_str(fp, n->name);
			fprintf(fp, ", \"op\": ");
			json_str(fp, n->op_type);
			fprintf(fp, ", \"device\": \"%s\", \"supported\": %s, \"cost_us\": %.3f, "
				"\"bytes_in\": %lld}", dev_id(nd[i], id, sizeof id),
				hx != NULL && hx->node_ok[i] ? "true" : "false", us,
				(long long)in_bytes);
		} else {
			fprintf(fp, "%-5d %-28.28s %-20.20s %-6s %12.1f %12lld\n", i, n->name,
				n->op_type, dev_id(nd[i], id, sizeof id), us, (long long)in_bytes);
		}
	}
	int64_t out_bytes = 0;
	for (int i = 0; i < g->n_outputs; i++) {
		int p = g->tensors[g->outputs[i]]->producer;
		if (p >= 0 && nd[p])
			out_bytes += tensor_bytes(g, g->outputs[i]);
	}
	moved += (double)out_bytes;
	double pred = hx != NULL ? predicted(s, nd, NULL) : total;
	if (json)
		fprintf(fp, "\n], \"bytes_moved\": %.0f, \"predicted_us\": %.3f%s%s%s}\n", moved,
			pred, hx != NULL && hx->note[0] ? ", \"note\": \"" : "",
			hx != NULL && hx->note[0] ? "fallback" : "",
			hx != NULL && hx->note[0] ? "\"" : "");
	else
		fprintf(fp, "total: %d nodes, %.0f bytes moved between devices, predicted %.1f us\n",
			g->n_nodes, moved, pred);
	ml_free(nd);
	return 0;
}

static int
parse_dev(const char *s, int *out)
{
	if (strcmp(s, "cpu") == 0) {
		*out = 0;
		return 0;
	}
	if (strcmp(s, "cl") == 0) {
		*out = 1;
		return 0;
	}
	if (strncmp(s, "cl:", 3) == 0) {
		char *end;
		long v = strtol(s + 3, &end, 10);
		if (*end == '\0' && end != s + 3 && v >= 0 && v < 1000) {
			*out = (int)v + 1;
			return 0;
		}
	}
	return -1;
}

int
ml_placement_read(const struct ml_graph *g, const char *path, int *dev, struct ml_err *e)
{
	uint8_t *buf;
	size_t len;
	ML_TRY(ml_read_file(path, &buf, &len, e));
	char *p = (char *)buf;
	int rc = 0;
	if (strstr(p, "\"nodes\"") != NULL) {
		/* the JSON of ml_session_plan_write: index and device of each node */
		char *q = p;
		while ((q = strstr(q, "\"index\":")) != NULL) {
			long idx = strtol(q + 8, &q, 10);
			char *d = strstr(q, "\"device\":");
			char *nx = strstr(q, "\"index\":");
			if (d == NULL || (nx != NULL && d > nx)) {
				rc = ml_fail(e, ML_EINVAL, "%s: node %ld has no device", path, idx);
				break;
			}
			d = strchr(d + 9, '"');
			char id[32] = "";
			if (d != NULL)
				sscanf(d + 1, "%31[^\"]", id);
			int v;
			if (idx < 0 || idx >= g->n_nodes) {
				rc = ml_fail(e, ML_EINVAL, "%s: no node %ld in the graph (%d nodes)",
					     path, idx, g->n_nodes);
				break;
			}
			if (parse_dev(id, &v) < 0) {
				rc = ml_fail(e, ML_EINVAL, "%s: node %ld: unknown device '%s'", path,
					     idx, id);
				break;
			}
			dev[idx] = v;
		}
		ml_free(buf);
		return rc;
	}
	int lineno = 0;
	for (char *line = strtok(p, "\n"); line != NULL; line = strtok(NULL, "\n")) {
		lineno++;
		char *h = strchr(line, '#');
		if (h != NULL)
			*h = '\0';
		char name[512], id[32];
		int k = sscanf(line, "%511s %31s", name, id);
		if (k <= 0)
			continue;
		if (k != 2) {
			rc = ml_fail(e, ML_EINVAL, "%s:%d: expected 'NODE DEVICE'", path, lineno);
			break;
		}
		int v, ni = -1;
		if (parse_dev(id, &v) < 0) {
			rc = ml_fail(e, ML_EINVAL, "%s:%d: unknown device '%s'", path, lineno, id);
			break;
		}
		for (int i = 0; i < g->n_nodes && ni < 0; i++)
			if (strcmp(g->nodes[i].name, name) == 0)
				ni = i;
		if (ni < 0) {
			char *end;
			long x = strtol(name, &end, 10);
			if (*end == '\0' && x >= 0 && x < g->n_nodes)
				ni = (int)x;
		}
		if (ni < 0) {
			rc = ml_fail(e, ML_EINVAL, "%s:%d: no node '%s' in the graph", path, lineno,
				     name);
			break;
		}
		dev[ni] = v;
	}
	ml_free(buf);
	return rc;
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

int
ml_session_sync(struct ml_session *s, struct ml_err *e)
{
	struct ml_hx *hx = s->hx;
	if (hx == NULL || hx->dev == NULL)
		return 0;
	for (int t = 0; t < s->g->n_tensors; t++)
		if (hx->dirty[t] && is_stored(s->g, t)) {
			hx->loc[t] &= (uint8_t)~ON_HOST;
			ML_TRY(to_host(s, t, e));
		}
	return 0;
}

int
ml_session_transfers(const struct ml_session *s, const struct ml_transfer **out)
{
	*out = s->hx != NULL ? s->hx->xfers : NULL;
	return s->hx != NULL ? s->hx->n_xfers : 0;
}
