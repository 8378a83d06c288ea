/*
 * prof.c: the profile mlprof builds from a session's timed runs: the
 * samples, their statistics, rows grouped by node, op, prefix or phase,
 * the memory plan, and the machine-readable writers: the JSON report, the
 * Chrome trace-event file and the cost model.
 */
#include "prof.h"

/*
 * Phases of a training step. A graph marks a node's phase with metadata
 * "phase:NODE" = PHASE, or names the node PHASE/...; mltrain's step graphs
 * are to do one or the other. Nothing else is guessed.
 */
static const char *const phase_names[] = { "forward", "loss", "backward", "optimizer" };

static const char *
phase_of(const struct ml_graph *g, const struct ml_node *n)
{
	char key[256];
	if (g->n_meta > 0 && n->name[0] != '\0') {
		snprintf(key, sizeof key, "phase:%s", n->name);
		const char *v = ml_graph_get_meta(g, key);
		if (v != NULL && v[0] != '\0')
			return v;
	}
	const char *sl = strchr(n->name, '/');
	if (sl == NULL)
		return NULL;
	for (size_t k = 0; k < sizeof phase_names / sizeof phase_names[0]; k++)
		if (strlen(phase_names[k]) == (size_t)(sl - n->name) &&
		    strncmp(n->name, phase_names[k], (size_t)(sl - n->name)) == 0)
			return phase_names[k];
	return NULL;
}

int
ml_prof_new(struct ml_prof **out, const struct ml_graph *g, const char *dev, int64_t runs,
	    struct ml_err *e)
{
	struct ml_prof *p;
	int64_t cells;

	*out = NULL;
	if (runs < 1 || !ml_mul_ok(runs, g->n_nodes + 1, &cells))
		return ml_fail(e, ML_EINVAL, "cannot profile %lld runs", (long long)runs);
	if ((p = ml_calloc(1, sizeof *p)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	p->g = g;
	snprintf(p->device, sizeof p->device, "%s", dev != NULL ? dev : "cpu");
	snprintf(p->ran_on, sizeof p->ran_on, "%s", strncmp(p->device, "cl", 2) == 0 ? p->device : "cpu");
	p->n = g->n_nodes;
	p->cap = runs;
	p->t = ml_calloc((size_t)cells, sizeof *p->t);
	p->st = ml_calloc((size_t)cells, sizeof *p->st);
	p->wall = ml_calloc((size_t)runs, sizeof *p->wall);
	p->t0 = ml_calloc((size_t)runs, sizeof *p->t0);
	p->nsum = ml_calloc((size_t)runs, sizeof *p->nsum);
	p->flops = ml_calloc((size_t)p->n + 1, sizeof *p->flops);
	p->bytes = ml_calloc((size_t)p->n + 1, sizeof *p->bytes);
	p->phase = ml_calloc((size_t)p->n + 1, sizeof *p->phase);
	p->ns = ml_calloc((size_t)p->n + 1, sizeof *p->ns);
	p->mem = ml_calloc((size_t)g->n_tensors + 1, sizeof *p->mem);
	p->dev = ml_calloc((size_t)p->n + 1, sizeof *p->dev);
	p->dev_name = ml_calloc((size_t)p->n + 1, sizeof *p->dev_name);
	if (p->dev == NULL || p->dev_name == NULL || p->t == NULL || p->st == NULL || p->wall == NULL || p->t0 == NULL || p->nsum == NULL ||
	    p->flops == NULL || p->bytes == NULL || p->phase == NULL || p->ns == NULL ||
	    p->mem == NULL) {
		ml_prof_free(p);
		return ml_fail(e, ML_ENOMEM, "out of memory for a profile of %lld runs",
			       (long long)runs);
	}
	for (int i = 0; i < p->n; i++) {
		p->phase[i] = phase_of(g, &g->nodes[i]);
		p->has_phase |= p->phase[i] != NULL;
		snprintf(p->dev_name[i], sizeof p->dev_name[i], "%s", p->ran_on);
	}
	p->arena_bytes = -1;
	*out = p;
	return 0;
}

void
ml_prof_free(struct ml_prof *p)
{
	if (p == NULL)
		return;
	ml_free(p->t);
	ml_free(p->st);
	ml_free(p->wall);
	ml_free(p->t0);
	ml_free(p->nsum);
	ml_free(p->flops);
	ml_free(p->bytes);
	ml_free(p->phase);
	ml_free(p->ns);
	ml_free(p->mem);
	ml_free(p->dev);
	ml_free(p->dev_name);
	ml_free(p->xf);
	ml_free(p);
}

int
ml_prof_record(struct ml_prof *p, const struct ml_session *s, double t0, double wall,
	       struct ml_err *e)
{
	if (p->runs >= p->cap)
		return ml_fail(e, ML_EINVAL, "the profile holds %lld runs already", (long long)p->cap);
	double *t = p->t + p->runs * p->n, *st = p->st + p->runs * p->n, sum = 0;
	for (int i = 0; i < p->n; i++) {
		t[i] = ml_session_node_time(s, i);
		st[i] = ml_session_node_start(s, i) - t0;
		sum += t[i];
		p->flops[i] = ml_session_node_flops(s, i);
		p->bytes[i] = ml_session_node_bytes(s, i);
		int d = ml_session_node_device(s, i);
		p->dev[i] = d;
		if (d <= 0)
			snprintf(p->dev_name[i], sizeof p->dev_name[i], "cpu");
		else
			snprintf(p->dev_name[i], sizeof p->dev_name[i], "cl:%d", d - 1);
	}
	const struct ml_transfer *xf;
	int nx = ml_session_transfers(s, &xf);
	if (nx > 0 && p->nxf + nx > p->cap_xf) {
		int64_t cap = ML_MAX(2 * p->cap_xf, p->nxf + nx + 16);
		struct prof_xfer *v = ml_realloc(p->xf, sizeof *v * (size_t)cap);
		if (v == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory for the transfers of a profile");
		p->xf = v;
		p->cap_xf = cap;
	}
	for (int k = 0; k < nx; k++)
		p->xf[p->nxf++] = (struct prof_xfer){ p->runs, xf[k] };
	p->wall[p->runs] = wall;
	p->t0[p->runs] = t0;
	p->nsum[p->runs] = sum;
	p->runs++;
	/* the plan and the shapes are those of the last run; they do not change between runs */
	for (int k = 0; k < p->g->n_tensors; k++)
		ml_session_tensor_mem(s, k, &p->mem[k]);
	p->arena_bytes = ml_session_arena_bytes(s);
	p->ready = false;
	return 0;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double
mlprof_median(double *x, int64_t n)
{
	if (n <= 0)
		return 0;
	qsort(x, (size_t)n, sizeof *x, cmp_double);
	return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

void
mlprof_stat_of(const double *x, int64_t n, double *tmp, struct prof_stat *st)
{
	double sum = 0, ss = 0;
	memset(st, 0, sizeof *st);
	st->n = n;
	if (n <= 0)
		return;
	st->min = st->max = x[0];
	for (int64_t i = 0; i < n; i++) {
		sum += x[i];
		st->min = ML_MIN(st->min, x[i]);
		st->max = ML_MAX(st->max, x[i]);
		tmp[i] = x[i];
	}
	st->total = sum;
	st->mean = sum / (double)n;
	for (int64_t i = 0; i < n; i++)
		ss += (x[i] - st->mean) * (x[i] - st->mean);
	st->sd = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
	st->median = mlprof_median(tmp, n);
}

int
mlprof_ready(struct ml_prof *p, struct ml_err *e)
{
	if (p->ready)
		return 0;
	int64_t r = p->runs;
	double *col = ml_calloc((size_t)r + 1, sizeof *col), *tmp = ml_calloc((size_t)r + 1, sizeof *tmp);
	if (col == NULL || tmp == NULL) {
		ml_free(col);
		ml_free(tmp);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	for (int i = 0; i < p->n; i++) {
		for (int64_t k = 0; k < r; k++)
			col[k] = p->t[k * p->n + i];
		mlprof_stat_of(col, r, tmp, &p->ns[i]);
	}
	mlprof_stat_of(p->wall, r, tmp, &p->wall_st);
	mlprof_stat_of(p->nsum, r, tmp, &p->sum_st);
	ml_free(col);
	ml_free(tmp);
	p->ready = true;
	return 0;
}

int64_t
ml_prof_runs(const struct ml_prof *p)
{
	return p->runs;
}

double
ml_prof_wall_median(struct ml_prof *p)
{
	return mlprof_ready(p, NULL) < 0 ? 0 : p->wall_st.median;
}

double
ml_prof_nodes_median(struct ml_prof *p)
{
	return mlprof_ready(p, NULL) < 0 ? 0 : p->sum_st.median;
}

bool
ml_prof_has_phases(struct ml_prof *p)
{
	return p->has_phase;
}

int
ml_prof_sort_from_name(const char *s)
{
	static const char *const names[] = {
		[ML_PROF_SORT_TIME] = "time", [ML_PROF_SORT_MEDIAN] = "median",
		[ML_PROF_SORT_ORDER] = "order", [ML_PROF_SORT_NAME] = "name",
		[ML_PROF_SORT_OP] = "op", [ML_PROF_SORT_FLOPS] = "flops",
		[ML_PROF_SORT_BYTES] = "bytes", [ML_PROF_SORT_GFLOPS] = "gflops",
		[ML_PROF_SORT_GBPS] = "gbps",
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(s, names[i]) == 0)
			return (int)i;
	return -1;
}

const char *
mlprof_node_name(const struct ml_graph *g, int i, char *buf, size_t n)
{
	if (g->nodes[i].name[0] != '\0')
		return g->nodes[i].name;
	snprintf(buf, n, "#%d", i);
	return buf;
}

/*
 * group_key: the row a node belongs to. A prefix is the first depth
 * non-empty components of a '/'-separated name, so PyTorch's
 * "/layer1/layer1.0/conv1/Conv" is "layer1" at depth 1.
 */
static void
group_key(const struct ml_prof *p, const struct ml_prof_opts *o, int i, char *buf, size_t n)
{
	const struct ml_node *nd = &p->g->nodes[i];
	char tmp[32];
	switch (o->group) {
	case ML_PROF_BY_OP:
		snprintf(buf, n, "%s", nd->op_type);
		return;
	case ML_PROF_BY_PHASE:
		snprintf(buf, n, "%s", p->phase[i] != NULL ? p->phase[i] : "(none)");
		return;
	case ML_PROF_BY_PREFIX: {
		int depth = o->prefix_depth > 0 ? o->prefix_depth : 1, got = 0;
		const char *s = nd->name;
		size_t k = 0;
		if (strchr(s, '/') == NULL) {
			snprintf(buf, n, "%s", mlprof_node_name(p->g, i, tmp, sizeof tmp));
			return;
		}
		while (*s != '\0' && got < depth) {
			while (*s == '/')
				s++;
			if (*s == '\0')
				break;
			if (got > 0 && k + 1 < n)
				buf[k++] = '/';
			while (*s != '\0' && *s != '/') {
				if (k + 1 < n)
					buf[k++] = *s;
				s++;
			}
			got++;
		}
		buf[k] = '\0';
		if (k == 0)
			snprintf(buf, n, "%s", mlprof_node_name(p->g, i, tmp, sizeof tmp));
		return;
	}
	default:
		snprintf(buf, n, "%s", mlprof_node_name(p->g, i, tmp, sizeof tmp));
	}
}

static void
node_shape(const struct ml_prof *p, int i, char *buf, size_t n)
{
	const struct ml_node *nd = &p->g->nodes[i];
	buf[0] = '\0';
	if (nd->n_out > 0 && nd->out[0] >= 0) {
		const struct ml_tval *v = &p->mem[nd->out[0]].shape;
		if (v->rank >= 0)
			ml_tval_shape_str(v, buf, n);
	}
}

static double
rate(int64_t count, double s)
{
	return s > 0 ? (double)count / s / 1e9 : 0;
}

static int
cmp_rows(const void *a, const void *b)
{
	const struct prof_row *x = a, *y = b;
	double u = 0, v = 0;
	int c;
	switch (x->sort) {
	case ML_PROF_SORT_ORDER:
		break;
	case ML_PROF_SORT_NAME:
		if ((c = strcmp(x->key, y->key)) != 0)
			return c;
		break;
	case ML_PROF_SORT_OP:
		if ((c = strcmp(x->op, y->op)) != 0)
			return c;
		u = y->total, v = x->total;
		break;
	case ML_PROF_SORT_MEDIAN: u = x->median, v = y->median; break;
	case ML_PROF_SORT_FLOPS: u = (double)x->flops, v = (double)y->flops; break;
	case ML_PROF_SORT_BYTES: u = (double)x->bytes, v = (double)y->bytes; break;
	case ML_PROF_SORT_GFLOPS: u = rate(x->flops, x->median), v = rate(y->flops, y->median); break;
	case ML_PROF_SORT_GBPS: u = rate(x->bytes, x->median), v = rate(y->bytes, y->median); break;
	default: u = x->total, v = y->total; break;
	}
	/* largest first; ties keep graph order */
	if (u != v)
		return u < v ? 1 : -1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/*
 * Fused nodes (mlopt, see ml_opt.h) list the nodes they replace in a
 * STRINGS attribute fused_from, "NAME:OP_TYPE" each. Grouped by op, a
 * fused node's time goes to those op types, split by an estimate of each
 * one's work: an op that multiplies matrices (Conv, Gemm, MatMul, ...)
 * gets the node's FLOPs less one per output element for each other op;
 * every other op gets one per output element. Its calls and nodes count
 * once per op it came from.
 */
#define FUSED_MAX 32

static bool
heavy_op(const char *op)
{
	static const char *const heavy[] = { "Conv", "ConvTranspose", "Gemm", "MatMul",
					     "ConvInteger", "MatMulInteger", "QLinearConv",
					     "QLinearMatMul", "Attention", "Einsum" };
	for (size_t k = 0; k < sizeof heavy / sizeof heavy[0]; k++)
		if (strcmp(op, heavy[k]) == 0)
			return true;
	return false;
}

/*
 * fused_parts: node i's origins' op types in ops[] and their shares of its
 * time in w[] (summing to 1); 0 for a node that is not fused.
 */
int
mlprof_fused_parts(const struct ml_prof *p, int i, const char **ops, double *w)
{
	const struct ml_node *nd = &p->g->nodes[i];
	const struct ml_attr *a = ml_attr_find(nd, "fused_from");
	int n = 0, heavy = 0;
	if (a == NULL || a->type != ML_ATTR_STRINGS || a->n <= 0)
		return 0;
	double numel = 1, sum = 0;
	if (nd->n_out > 0 && nd->out[0] >= 0 && p->mem[nd->out[0]].shape.rank >= 0)
		numel = (double)ML_MAX(ml_tval_numel(&p->mem[nd->out[0]].shape), 1);
	for (int k = 0; k < a->n && n < FUSED_MAX; k++) {
		const char *c = strrchr(a->strings[k], ':');
		ops[n] = c != NULL ? c + 1 : a->strings[k];
		heavy += heavy_op(ops[n]);
		n++;
	}
	double rest = (double)p->flops[i] - numel * (n - heavy);
	for (int k = 0; k < n; k++) {
		w[k] = heavy_op(ops[k]) ? ML_MAX(rest, numel) / heavy : numel;
		sum += w[k];
	}
	for (int k = 0; k < n; k++)
		w[k] = sum > 0 ? w[k] / sum : 1.0 / n;
	return n;
}

int
mlprof_rows(struct ml_prof *p, const struct ml_prof_opts *o, bool sorted, struct prof_row **rows,
	  int *nrows, struct ml_err *e)
{
	struct prof_row *r;
	int nr = 0;
	double all = 0;

	*rows = NULL;
	*nrows = 0;
	ML_TRY(mlprof_ready(p, e));
	/* by op, a fused node adds a row for each op type it came from */
	size_t cap = (size_t)p->n + 1;
	for (int i = 0; o->group == ML_PROF_BY_OP && i < p->n; i++) {
		const struct ml_attr *a = ml_attr_find(&p->g->nodes[i], "fused_from");
		if (a != NULL && a->type == ML_ATTR_STRINGS)
			cap += (size_t)ML_MIN(a->n, FUSED_MAX);
	}
	if ((r = ml_calloc(cap, sizeof *r)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < p->n; i++)
		all += p->ns[i].total;
	for (int i = 0; i < p->n; i++) {
		char key[sizeof r->key];
		const struct ml_node *nd = &p->g->nodes[i];
		const char *fops[FUSED_MAX];
		double fw[FUSED_MAX];
		int nf = o->group == ML_PROF_BY_OP ? mlprof_fused_parts(p, i, fops, fw) : 0;
		for (int f = 0; f < nf; f++) {
			int k;
			for (k = 0; k < nr && strcmp(r[k].key, fops[f]) != 0; k++)
				;
			if (k == nr) {
				memset(&r[k], 0, sizeof r[k]);
				snprintf(r[k].key, sizeof r[k].key, "%s", fops[f]);
				r[k].op = fops[f];
				r[k].phase = p->phase[i];
				r[k].index = nr;
				nr++;
			} else if (r[k].phase != p->phase[i] &&
				   (r[k].phase == NULL || p->phase[i] == NULL ||
				    strcmp(r[k].phase, p->phase[i]) != 0)) {
				r[k].phase = NULL;
			}
			r[k].calls += p->ns[i].n;
			r[k].nodes++;
			r[k].median += fw[f] * p->ns[i].median;
			r[k].total += fw[f] * p->ns[i].total;
			r[k].flops += (int64_t)(fw[f] * (double)p->flops[i]);
			r[k].bytes += (int64_t)(fw[f] * (double)p->bytes[i]);
		}
		if (nf > 0)
			continue;
		group_key(p, o, i, key, sizeof key);
		int k = nr;
		if (o->group != ML_PROF_BY_NODE)
			for (k = 0; k < nr && strcmp(r[k].key, key) != 0; k++)
				;
		if (k == nr) {
			memset(&r[k], 0, sizeof r[k]);
			snprintf(r[k].key, sizeof r[k].key, "%s", key);
			r[k].op = nd->op_type;
			r[k].phase = p->phase[i];
			r[k].index = o->group == ML_PROF_BY_NODE ? i : nr;
			r[k].calls = p->ns[i].n;
			if (o->group == ML_PROF_BY_NODE)
				node_shape(p, i, r[k].shape, sizeof r[k].shape);
			nr++;
		} else {
			if (strcmp(r[k].op, nd->op_type) != 0)
				r[k].op = "";
			if (r[k].phase != p->phase[i] &&
			    (r[k].phase == NULL || p->phase[i] == NULL || strcmp(r[k].phase, p->phase[i]) != 0))
				r[k].phase = NULL;
			r[k].calls += p->ns[i].n;
		}
		r[k].nodes++;
		r[k].median += p->ns[i].median;
		r[k].total += p->ns[i].total;
		r[k].flops += p->flops[i];
		r[k].bytes += p->bytes[i];
	}
	for (int k = 0; k < nr; k++)
		r[k].share = all > 0 ? r[k].total / all : 0;
	if (sorted && o->sort != ML_PROF_SORT_ORDER) {
		for (int k = 0; k < nr; k++)
			r[k].sort = o->sort;
		qsort(r, (size_t)nr, sizeof *r, cmp_rows);
	}
	*rows = r;
	*nrows = nr;
	return 0;
}

/*
 * The memory summary. A tensor is live from its producer to its last
 * reader; graph outputs live to the end and an output nobody reads dies
 * with its producer. Bytes in use at a node are, on the heap, the sum of
 * the live values and, in the arena, the union of their slots: the
 * planner may write an op's output over an input it is the last to read,
 * and then the two share one slot.
 */
static int
cmp_ival(const void *x, const void *y)
{
	const struct prof_ival *u = x, *v = y;
	return u->a < v->a ? -1 : u->a > v->a;
}

void
mlprof_live(const struct ml_prof *p, int i, struct prof_ival *tmp, int64_t *arena, int64_t *heap)
{
	const struct ml_graph *g = p->g;
	int k = 0;
	*arena = *heap = 0;
	for (int t = 0; t < g->n_tensors; t++) {
		const struct ml_tensor_mem *m = &p->mem[t];
		if (g->tensors[t]->kind != ML_TK_ACT || m->first < 0)
			continue;
		int b = m->last < 0 ? m->first : ML_MIN(m->last, p->n - 1);
		if (i < m->first || i > b)
			continue;
		if (m->off < 0) {
			*heap += m->bytes;
		} else if (tmp != NULL) {
			tmp[k].a = m->off;
			tmp[k++].b = m->off + ML_MAX(m->len, m->bytes);
		} else {
			*arena += m->bytes;	/* no room to merge: an upper bound */
		}
	}
	if (tmp == NULL)
		return;
	qsort(tmp, (size_t)k, sizeof *tmp, cmp_ival);
	int64_t end = INT64_MIN;
	for (int j = 0; j < k; j++) {
		if (tmp[j].a >= end) {
			*arena += tmp[j].b - tmp[j].a;
			end = tmp[j].b;
		} else if (tmp[j].b > end) {
			*arena += tmp[j].b - end;
			end = tmp[j].b;
		}
	}
}

void
mlprof_memory(const struct ml_prof *p, struct prof_memsum *m)
{
	const struct ml_graph *g = p->g;
	struct prof_ival *tmp = ml_calloc((size_t)g->n_tensors + 1, sizeof *tmp);
	int64_t count;
	memset(m, 0, sizeof *m);
	m->peak_node = -1;
	m->arena = p->arena_bytes > 0 ? p->arena_bytes : 0;
	ml_graph_param_stats(g, &count, &m->weights);
	for (int t = 0; t < g->n_tensors; t++)
		if (g->tensors[t]->kind == ML_TK_INPUT)
			m->inputs += p->mem[t].bytes;
	for (int i = 0; i < p->n; i++) {
		int64_t arena, heap;
		mlprof_live(p, i, tmp, &arena, &heap);
		if (arena + heap > m->peak_live) {
			m->peak_live = arena + heap;
			m->peak_node = i;
		}
		m->heap_peak = ML_MAX(m->heap_peak, heap);
	}
	ml_free(tmp);
	m->peak = m->arena + m->heap_peak + m->inputs;
}

const char *
mlprof_fmt_time(double s, char *buf, size_t n)
{
	double a = fabs(s);
	if (a >= 1)
		snprintf(buf, n, "%.3f s", s);
	else if (a >= 1e-3)
		snprintf(buf, n, "%.3f ms", s * 1e3);
	else if (a >= 1e-6)
		snprintf(buf, n, "%.1f us", s * 1e6);
	else
		snprintf(buf, n, "%.0f ns", s * 1e9);
	return buf;
}

const char *
mlprof_fmt_bytes(int64_t b, char *buf, size_t n)
{
	double x = (double)b;
	if (b >= (int64_t)1 << 30)
		snprintf(buf, n, "%.2f GiB", x / (1 << 30));
	else if (b >= (int64_t)1 << 20)
		snprintf(buf, n, "%.2f MiB", x / (1 << 20));
	else if (b >= (int64_t)1 << 10)
		snprintf(buf, n, "%.1f KiB", x / (1 << 10));
	else
		snprintf(buf, n, "%lld B", (long long)b);
	return buf;
}

static void
jstat(FILE *fp, const struct prof_stat *st, const double *samples, int64_t stride)
{
	fprintf(fp, "{\"median\": ");
	ml_json_num(fp, st->median * 1e3);
	fprintf(fp, ", \"mean\": ");
	ml_json_num(fp, st->mean * 1e3);
	fprintf(fp, ", \"stddev\": ");
	ml_json_num(fp, st->sd * 1e3);
	fprintf(fp, ", \"min\": ");
	ml_json_num(fp, st->min * 1e3);
	fprintf(fp, ", \"max\": ");
	ml_json_num(fp, st->max * 1e3);
	fprintf(fp, ", \"total\": ");
	ml_json_num(fp, st->total * 1e3);
	fprintf(fp, ", \"n\": %lld, \"samples\": [", (long long)st->n);
	for (int64_t k = 0; k < st->n; k++) {
		fputs(k ? ", " : "", fp);
		ml_json_num(fp, samples[k * stride] * 1e3);
	}
	fputs("]}", fp);
}

static int
json_rows(FILE *fp, struct ml_prof *p, const struct ml_prof_opts *o, int group, const char *what,
	  struct ml_err *e)
{
	struct ml_prof_opts go = *o;
	struct prof_row *r;
	int nr;
	go.group = group;
	ML_TRY(mlprof_rows(p, &go, false, &r, &nr, e));
	fprintf(fp, ",\n  \"%s\": [", what);
	for (int k = 0; k < nr; k++) {
		fprintf(fp, "%s\n    {\"%s\": ", k ? "," : "",
			group == ML_PROF_BY_OP ? "op" : group == ML_PROF_BY_PHASE ? "phase" : "prefix");
		ml_json_str(fp, r[k].key);
		fprintf(fp, ", \"nodes\": %d, \"calls\": %lld, \"median_ms\": ", r[k].nodes,
			(long long)r[k].calls);
		ml_json_num(fp, r[k].median * 1e3);
		fprintf(fp, ", \"total_ms\": ");
		ml_json_num(fp, r[k].total * 1e3);
		fprintf(fp, ", \"share\": ");
		ml_json_num(fp, r[k].share);
		fprintf(fp, ", \"flops\": %lld, \"bytes\": %lld}", (long long)r[k].flops,
			(long long)r[k].bytes);
	}
	fputs("\n  ]", fp);
	ml_free(r);
	return 0;
}

static void
json_memory(FILE *fp, const struct ml_prof *p)
{
	const struct ml_graph *g = p->g;
	struct prof_memsum m;
	char buf[32];
	mlprof_memory(p, &m);
	fprintf(fp, ",\n  \"memory\": {\"peak_bytes\": %lld, \"arena_bytes\": %lld, "
		"\"peak_live_bytes\": %lld, \"peak_node\": ", (long long)m.peak, (long long)m.arena,
		(long long)m.peak_live);
	if (m.peak_node >= 0)
		ml_json_str(fp, mlprof_node_name(g, m.peak_node, buf, sizeof buf));
	else
		fputs("null", fp);
	fprintf(fp, ", \"heap_peak_bytes\": %lld, \"input_bytes\": %lld, \"weight_bytes\": %lld, "
		"\"tensors\": [", (long long)m.heap_peak, (long long)m.inputs, (long long)m.weights);
	int k = 0;
	for (int t = 0; t < g->n_tensors; t++) {
		const struct ml_tensor_mem *tm = &p->mem[t];
		char shape[128], b1[32], b2[32];
		if (g->tensors[t]->kind != ML_TK_ACT || tm->first < 0)
			continue;
		fprintf(fp, "%s\n    {\"name\": ", k++ ? "," : "");
		ml_json_str(fp, g->tensors[t]->name);
		fprintf(fp, ", \"shape\": ");
		ml_json_str(fp, tm->shape.rank >= 0 ? ml_tval_shape_str(&tm->shape, shape, sizeof shape) : "");
		fprintf(fp, ", \"bytes\": %lld, \"where\": \"%s\", \"offset\": %lld, \"reserved\": %lld, "
			"\"first\": %d, \"last\": %d, \"first_node\": ", (long long)tm->bytes,
			tm->off >= 0 ? "arena" : "heap", (long long)tm->off, (long long)tm->len,
			tm->first, tm->last);
		ml_json_str(fp, mlprof_node_name(g, tm->first, b1, sizeof b1));
		fprintf(fp, ", \"last_node\": ");
		if (tm->last >= 0 && tm->last < p->n)
			ml_json_str(fp, mlprof_node_name(g, tm->last, b2, sizeof b2));
		else
			ml_json_str(fp, tm->last == p->n ? "(output)" : "(unread)");
		fputc('}', fp);
	}
	fputs("\n  ]}", fp);
}

/*
 * signature: the model's interface as declared, "x f32[N,4] -> y f32[N,3]"
 * (run-time inputs, then outputs; a symbolic dim by its name), so mlprof
 * diff can tell reports of different models from runs of one model on
 * other input sizes, devices or optimisation levels.
 */
static void
signature(const struct ml_graph *g, char *buf, size_t n)
{
	size_t k = 0;
	buf[0] = '\0';
	for (int side = 0; side < 2; side++) {
		int cnt = side ? g->n_outputs : g->n_inputs;
		const int *idx = side ? g->outputs : g->inputs;
		bool first = true;
		if (side && k < n)
			k += (size_t)snprintf(buf + k, n - k, " ->");
		for (int i = 0; i < cnt && k < n; i++) {
			const struct ml_tensor *t = g->tensors[idx[i]];
			if (!side && t->kind != ML_TK_INPUT)
				continue;
			k += (size_t)snprintf(buf + k, n - k, "%s%s %s[", first && !side ? "" : " ",
					      t->name, ml_dtype_name(t->dtype));
			first = false;
			for (int d = 0; d < t->rank && k < n; d++) {
				const char *sep = d ? "," : "";
				if (t->dims[d] >= 0 || t->sym[d] == NULL)
					k += (size_t)snprintf(buf + k, n - k, "%s%lld", sep,
							      (long long)t->dims[d]);
				else
					k += (size_t)snprintf(buf + k, n - k, "%s%s", sep,
							      t->sym[d]);
			}
			if (k < n)
				k += (size_t)snprintf(buf + k, n - k, "]");
		}
	}
}

/* json_one: one device's report. */
static int
json_one(FILE *fp, struct ml_prof *p, const struct ml_prof_opts *o, struct ml_err *e)
{
	const struct ml_graph *g = p->g;
	int64_t fl = 0, by = 0;
	double all = 0;
	ML_TRY(mlprof_ready(p, e));
	for (int i = 0; i < p->n; i++) {
		fl += p->flops[i];
		by += p->bytes[i];
		all += p->ns[i].total;
	}
	char sig[1024];
	signature(g, sig, sizeof sig);
	fprintf(fp, "{\"tool\": \"mlprof\", \"version\": \"%s\", \"model\": ", ML_VERSION);
	ml_json_str(fp, o->model);
	fprintf(fp, ", \"signature\": ");
	ml_json_str(fp, sig);
	fprintf(fp, ", \"device\": ");
	ml_json_str(fp, p->device);
	fprintf(fp, ", \"threads\": %d, \"runs\": %lld, \"warmup\": %lld,\n  \"total\": {\"wall_ms\": ",
		o->threads, (long long)p->runs, (long long)o->warmup);
	jstat(fp, &p->wall_st, p->wall, 1);
	fprintf(fp, ",\n    \"nodes_ms\": ");
	jstat(fp, &p->sum_st, p->nsum, 1);
	fprintf(fp, ",\n    \"attributed\": ");
	ml_json_num(fp, p->wall_st.median > 0 ? p->sum_st.median / p->wall_st.median : 0);
	fprintf(fp, ", \"flops\": %lld, \"bytes\": %lld},\n  \"nodes\": [", (long long)fl,
		(long long)by);
	for (int i = 0; i < p->n; i++) {
		const struct ml_node *nd = &g->nodes[i];
		const struct prof_stat *st = &p->ns[i];
		char shape[64];
		node_shape(p, i, shape, sizeof shape);
		fprintf(fp, "%s\n    {\"index\": %d, \"name\": ", i ? "," : "", i);
		ml_json_str(fp, nd->name);
		fprintf(fp, ", \"op\": ");
		ml_json_str(fp, nd->op_type);
		const char *fops[FUSED_MAX];
		double fw[FUSED_MAX];
		int nf = mlprof_fused_parts(p, i, fops, fw);
		if (nf > 0) {
			/* what the node was made of, each with its share of the time */
			const struct ml_attr *fa = ml_attr_find(nd, "fused_from");
			fputs(", \"fused_from\": [", fp);
			for (int f = 0; f < nf; f++) {
				char nm[160];
				const char *src = fa->strings[f];
				size_t len = (size_t)(fops[f] - src);
				len = len > 0 && src[len - 1] == ':' ? len - 1 : len;
				snprintf(nm, sizeof nm, "%.*s", (int)ML_MIN(len, sizeof nm - 1), src);
				fprintf(fp, "%s{\"name\": ", f ? ", " : "");
				ml_json_str(fp, nm);
				fputs(", \"op\": ", fp);
				ml_json_str(fp, fops[f]);
				fputs(", \"share\": ", fp);
				ml_json_num(fp, fw[f]);
				fputs("}", fp);
			}
			fputs("]", fp);
		}
		fprintf(fp, ", \"device\": ");
		ml_json_str(fp, p->dev_name[i]);
		fprintf(fp, ", \"shape\": ");
		ml_json_str(fp, shape);
		fprintf(fp, ", \"phase\": ");
		if (p->phase[i] != NULL)
			ml_json_str(fp, p->phase[i]);
		else
			fputs("null", fp);
		fprintf(fp, ", \"calls\": %lld, \"median_ms\": ", (long long)st->n);
		ml_json_num(fp, st->median * 1e3);
		fprintf(fp, ", \"mean_ms\": ");
		ml_json_num(fp, st->mean * 1e3);
		fprintf(fp, ", \"stddev_ms\": ");
		ml_json_num(fp, st->sd * 1e3);
		fprintf(fp, ", \"min_ms\": ");
		ml_json_num(fp, st->min * 1e3);
		fprintf(fp, ", \"max_ms\": ");
		ml_json_num(fp, st->max * 1e3);
		fprintf(fp, ", \"total_ms\": ");
		ml_json_num(fp, st->total * 1e3);
		fprintf(fp, ", \"share\": ");
		ml_json_num(fp, all > 0 ? st->total / all : 0);
		fprintf(fp, ", \"flops\": %lld, \"bytes\": %lld, \"gflops_per_s\": ",
			(long long)p->flops[i], (long long)p->bytes[i]);
		ml_json_num(fp, rate(p->flops[i], st->median));
		fprintf(fp, ", \"gb_per_s\": ");
		ml_json_num(fp, rate(p->bytes[i], st->median));
		fprintf(fp, ", \"samples_ms\": [");
		for (int64_t k = 0; k < p->runs; k++) {
			fputs(k ? ", " : "", fp);
			ml_json_num(fp, p->t[k * p->n + i] * 1e3);
		}
		fputs("]}", fp);
	}
	fputs("\n  ]", fp);
	ML_TRY(json_rows(fp, p, o, ML_PROF_BY_OP, "ops", e));
	if (p->has_phase)
		ML_TRY(json_rows(fp, p, o, ML_PROF_BY_PHASE, "phases", e));
	else
		fputs(",\n  \"phases\": []", fp);
	json_memory(fp, p);
	fputs("}", fp);
	return 0;
}

int
ml_prof_write_json(struct ml_prof *const *ps, int n, const struct ml_prof_opts *o, FILE *fp,
		   struct ml_err *e)
{
	if (n == 1 && !o->compare) {
		ML_TRY(json_one(fp, ps[0], o, e));
		fputc('\n', fp);
		return 0;
	}
	/* several devices: the reports side by side, each one as mlprof diff reads it */
	fprintf(fp, "{\"tool\": \"mlprof\", \"version\": \"%s\", \"model\": ", ML_VERSION);
	ml_json_str(fp, o->model);
	fprintf(fp, ", \"devices\": [");
	for (int k = 0; k < n; k++) {
		fputs(k ? ", " : "", fp);
		ml_json_str(fp, ps[k]->device);
	}
	fprintf(fp, "],\n \"profiles\": [");
	for (int k = 0; k < n; k++) {
		fputs(k ? ",\n" : "\n", fp);
		ML_TRY(json_one(fp, ps[k], o, e));
	}
	fputs("]}\n", fp);
	return 0;
}

/*
 * The trace. Chrome's trace-event format: timestamps and durations in
 * microseconds from the first profiled run. Each device is a process and
 * each of its queues a thread (the CPU has one queue: nodes run one after
 * another); a run is a slice that holds its nodes' slices. A "memory"
 * process carries the live-bytes counter and one slice per tensor
 * lifetime (of the first run), on as few lanes as lifetimes allow.
 */
static void
trace_meta(FILE *fp, int pid, int tid, const char *what, const char *name, bool *first)
{
	fprintf(fp, "%s\n{\"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"name\": \"%s\", \"args\": {\"name\": ",
		*first ? "" : ",", pid, tid, what);
	ml_json_str(fp, name);
	fputs("}}", fp);
	*first = false;
}

static int
trace_memory(FILE *fp, const struct ml_prof *p, int pid, double origin, struct ml_err *e)
{
	const struct ml_graph *g = p->g;
	const double *st = p->st, *t = p->t;
	double base = (p->t0[0] - origin) * 1e6;
	int nt = g->n_tensors, *lane = ml_calloc((size_t)nt + 1, sizeof *lane), nl = 0;
	double *lane_end = ml_calloc((size_t)nt + 1, sizeof *lane_end);
	bool first = false;
	if (lane == NULL || lane_end == NULL) {
		ml_free(lane);
		ml_free(lane_end);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	trace_meta(fp, pid, 0, "process_name", "memory", &first);
	trace_meta(fp, pid, 0, "thread_name", "live bytes", &first);
	/* the live-bytes counter at each node's start, split arena and heap */
	struct prof_ival *tmp = ml_calloc((size_t)nt + 1, sizeof *tmp);
	for (int i = 0; i < p->n; i++) {
		int64_t arena, heap;
		mlprof_live(p, i, tmp, &arena, &heap);
		fprintf(fp, ",\n{\"ph\": \"C\", \"pid\": %d, \"tid\": 0, \"name\": \"live bytes\", \"ts\": %.3f, "
			"\"args\": {\"arena\": %lld, \"heap\": %lld}}", pid, base + st[i] * 1e6,
			(long long)arena, (long long)heap);
	}
	/* tensor lifetimes: from their producer's start to their last reader's end */
	for (int k = 0; k < nt; k++) {
		const struct ml_tensor_mem *m = &p->mem[k];
		if (g->tensors[k]->kind != ML_TK_ACT || m->first < 0)
			continue;
		int b = m->last < 0 ? m->first : ML_MIN(m->last, p->n - 1);
		double ts = base + st[m->first] * 1e6;
		double te = m->last >= p->n ? base + p->wall[0] * 1e6 : base + (st[b] + t[b]) * 1e6;
		int l = 0;
		while (l < nl && lane_end[l] > ts)
			l++;
		if (l == nl) {
			char name[32];
			snprintf(name, sizeof name, "tensors %d", l + 1);
			trace_meta(fp, pid, l + 1, "thread_name", name, &first);
			nl++;
		}
		lane_end[l] = te;
		fprintf(fp, ",\n{\"ph\": \"X\", \"cat\": \"tensor\", \"pid\": %d, \"tid\": %d, \"name\": ",
			pid, l + 1);
		ml_json_str(fp, g->tensors[k]->name);
		fprintf(fp, ", \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"bytes\": %lld, \"where\": \"%s\", "
			"\"offset\": %lld, \"reserved\": %lld}}", ts, ML_MAX(te - ts, 0.0),
			(long long)m->bytes, m->off >= 0 ? "arena" : "heap", (long long)m->off,
			(long long)m->len);
	}
	ml_free(tmp);
	ml_free(lane);
	ml_free(lane_end);
	return 0;
}

int
ml_prof_write_trace(struct ml_prof *const *ps, int n, const struct ml_prof_opts *o, FILE *fp,
		    struct ml_err *e)
{
	double origin = 0;
	bool first = true;
	for (int k = 0; k < n; k++)
		if (ps[k]->runs > 0 && (origin == 0 || ps[k]->t0[0] < origin))
			origin = ps[k]->t0[0];
	fprintf(fp, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"tool\": \"mlprof\", \"version\": \"%s\", \"model\": ",
		ML_VERSION);
	ml_json_str(fp, o->model);
	fprintf(fp, ", \"threads\": %d, \"clock\": \"host monotonic\"},\n\"traceEvents\": [", o->threads);
	for (int k = 0; k < n; k++) {
		const struct ml_prof *p = ps[k];
		const struct ml_graph *g = p->g;
		int pid = k + 1;
		char qname[64];
		trace_meta(fp, pid, 0, "process_name", p->device, &first);
		/* one lane per device and queue (tid = device index + 1), one per transfer path */
		bool seen_host = false;
		for (int i = 0; i < p->n; i++) {
			bool dup = false;
			for (int j = 0; j < i && !dup; j++)
				dup = p->dev[j] == p->dev[i];
			if (dup)
				continue;
			seen_host |= p->dev[i] <= 0;
			snprintf(qname, sizeof qname, "%s queue 0", p->dev_name[i]);
			trace_meta(fp, pid, ML_MAX(p->dev[i], 0) + 1, "thread_name", qname, &first);
		}
		if (!seen_host) {
			/* the runs are host events: the host lane is there even with no node on it */
			trace_meta(fp, pid, 1, "thread_name", "cpu queue 0", &first);
		}
		for (int64_t x = 0; x < p->nxf; x++) {
			bool dup = false;
			for (int64_t y = 0; y < x && !dup; y++)
				dup = p->xf[y].t.device == p->xf[x].t.device;
			if (dup)
				continue;
			snprintf(qname, sizeof qname, "transfers cl:%d", p->xf[x].t.device - 1);
			trace_meta(fp, pid, 1000 + p->xf[x].t.device, "thread_name", qname, &first);
		}
		for (int64_t r = 0; r < p->runs; r++) {
			double base = (p->t0[r] - origin) * 1e6;
			fprintf(fp, ",\n{\"ph\": \"X\", \"cat\": \"run\", \"pid\": %d, \"tid\": 1, "
				"\"name\": \"run %lld\", \"ts\": %.3f, \"dur\": %.3f}", pid, (long long)r, base,
				p->wall[r] * 1e6);
			for (int i = 0; i < p->n; i++) {
				const struct ml_node *nd = &g->nodes[i];
				char buf[32], shape[64];
				fprintf(fp, ",\n{\"ph\": \"X\", \"cat\": ");
				ml_json_str(fp, nd->op_type);
				fprintf(fp, ", \"pid\": %d, \"tid\": %d, \"name\": ", pid,
					ML_MAX(p->dev[i], 0) + 1);
				ml_json_str(fp, mlprof_node_name(g, i, buf, sizeof buf));
				fprintf(fp, ", \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"op\": ",
					base + p->st[r * p->n + i] * 1e6, p->t[r * p->n + i] * 1e6);
				ml_json_str(fp, nd->op_type);
				node_shape(p, i, shape, sizeof shape);
				fprintf(fp, ", \"shape\": ");
				ml_json_str(fp, shape);
				fprintf(fp, ", \"device\": ");
				ml_json_str(fp, p->dev_name[i]);
				fprintf(fp, ", \"node\": %d, \"run\": %lld, \"flops\": %lld, \"bytes\": %lld}}",
					i, (long long)r, (long long)p->flops[i], (long long)p->bytes[i]);
			}
			for (int64_t x = 0; x < p->nxf; x++) {
				const struct prof_xfer *t = &p->xf[x];
				if (t->run != r)
					continue;
				const char *tn = t->t.tensor >= 0 && t->t.tensor < g->n_tensors ?
						 g->tensors[t->t.tensor]->name : "?";
				fprintf(fp, ",\n{\"ph\": \"X\", \"cat\": \"transfer\", \"pid\": %d, "
					"\"tid\": %d, \"name\": ", pid, 1000 + t->t.device);
				char nm[192];
				snprintf(nm, sizeof nm, "%s %s", t->t.to_device ? "to device" : "to host", tn);
				ml_json_str(fp, nm);
				fprintf(fp, ", \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"tensor\": ",
					(t->t.start - origin) * 1e6, ML_MAX(t->t.end - t->t.start, 0) * 1e6);
				ml_json_str(fp, tn);
				fprintf(fp, ", \"bytes\": %lld, \"direction\": \"%s\", \"device\": \"cl:%d\", "
					"\"run\": %lld}}", (long long)t->t.bytes,
					t->t.to_device ? "host_to_device" : "device_to_host", t->t.device - 1,
					(long long)r);
			}
		}
	}
	if (n > 0 && ps[0]->runs > 0)
		ML_TRY(trace_memory(fp, ps[0], n + 1, origin, e));
	fputs("\n]}\n", fp);
	return 0;
}

int
ml_prof_write_costmodel(struct ml_prof *const *ps, int n, const struct ml_prof_opts *o,
			FILE *fp, struct ml_err *e)
{
	fprintf(fp, "{\"format\": \"ml-costmodel\", \"version\": 1, \"tool\": \"mlprof %s\", \"model\": ",
		ML_VERSION);
	ml_json_str(fp, o->model);
	fprintf(fp, ", \"threads\": %d,\n \"devices\": {", o->threads);
	for (int k = 0; k < n; k++) {
		struct ml_prof_opts go = *o;
		struct prof_row *r;
		int nr;
		go.group = ML_PROF_BY_OP;
		go.sort = ML_PROF_SORT_NAME;
		ML_TRY(mlprof_rows(ps[k], &go, true, &r, &nr, e));
		fprintf(fp, "%s\n  ", k ? "," : "");
		ml_json_str(fp, ps[k]->device);
		fprintf(fp, ": {\"runs\": %lld, \"ops\": {", (long long)ps[k]->runs);
		for (int j = 0; j < nr; j++) {
			double ns = r[j].median * 1e9;
			fprintf(fp, "%s\n    ", j ? "," : "");
			ml_json_str(fp, r[j].key);
			fprintf(fp, ": {\"nodes\": %d, \"flops\": %lld, \"bytes\": %lld, \"ns\": ", r[j].nodes,
				(long long)r[j].flops, (long long)r[j].bytes);
			ml_json_num(fp, ns);
			fprintf(fp, ", \"ns_per_flop\": ");
			ml_json_num(fp, r[j].flops > 0 ? ns / (double)r[j].flops : NAN);
			fprintf(fp, ", \"ns_per_byte\": ");
			ml_json_num(fp, r[j].bytes > 0 ? ns / (double)r[j].bytes : NAN);
			fprintf(fp, ", \"ns_per_node\": ");
			ml_json_num(fp, ns / r[j].nodes);
			fputc('}', fp);
		}
		fputs("}}", fp);
		ml_free(r);
	}
	fputs("\n }}\n", fp);
	return 0;
}
