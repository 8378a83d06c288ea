/*
 * pipeline_plan.c: where the nodes of a pipelined step go (lib/ml_train.h,
 * "Pipeline parallelism"): which forward node a backward node belongs to,
 * the automatic cut of the forward nodes into stages of even predicted
 * work (ml_pipeline_auto), and the stage file (ml_pipeline_plan_read).
 * pipeline.c builds and runs the stages.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>

#include "ml_impl.h"
#include "train/train.h"

bool
ml_pipe_is_forward(const struct ml_node *n)
{
	return strncmp(n->name, "forward/", 8) == 0;
}

/*
 * ml_pipe_owner: the forward (or loss) node whose gradient rule made
 * backward node bi: its name is backward/BASE/OP_K (lib/ops/gradrule.c),
 * BASE the forward node's name without forward/. -1 when none matches.
 */
int
ml_pipe_owner(const struct ml_graph *g, int bi)
{
	const char *nm = g->nodes[bi].name;
	if (strncmp(nm, "backward/", 9) != 0)
		return -1;
	const char *base = nm + 9, *slash = strrchr(base, '/');
	if (slash == NULL)
		return -1;
	size_t len = (size_t)(slash - base);
	for (int i = 0; i < g->n_nodes; i++) {
		const char *f = g->nodes[i].name;
		if (strncmp(f, "forward/", 8) == 0)
			f += 8;
		else if (strncmp(f, "loss/", 5) != 0)
			continue;
		if (strlen(f) == len && memcmp(f, base, len) == 0)
			return i;
	}
	return -1;
}

/* sample_bytes: the bytes of one sample of tensor t (unknown dims count 1, the batch dim none). */
static int64_t
sample_bytes(const struct ml_graph *g, int t)
{
	const struct ml_tensor *x = g->tensors[t];
	int64_t n = ml_dtype_size(x->dtype);
	for (int d = 1; d < x->rank; d++)
		n *= x->dims[d] > 0 ? x->dims[d] : 1;
	return n > 0 ? n : 0;
}

/*
 * cross_bytes: cut[j] for 0 < j < nf: the bytes a sample of the tensors
 * that forward nodes before position j (of the forward order fwd[])
 * produce and nodes at j or later read, forward or not.
 */
static int
cross_bytes(const struct ml_graph *g, const int *fwd, int nf, int64_t *cut, struct ml_err *e)
{
	int *pos = ml_malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
	int *last = ml_malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
	int *made = ml_malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
	int rc = 0;
	if (pos == NULL || last == NULL || made == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < g->n_nodes; i++)
		pos[i] = -1;
	for (int k = 0; k < nf; k++)
		pos[fwd[k]] = k;
	for (int t = 0; t < g->n_tensors; t++)
		last[t] = made[t] = -1;
	for (int k = 0; k < nf; k++) {
		const struct ml_node *n = &g->nodes[fwd[k]];
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] >= 0)
				made[n->out[j]] = k;
	}
	/* a reader outside the forward nodes (a backward node) reads at the last stage's end */
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		int at = pos[i] >= 0 ? pos[i] : nf - 1;
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] >= 0 && pos[i] >= 0 && at > last[n->in[j]])
				last[n->in[j]] = at;
	}
	for (int j = 0; j <= nf; j++)
		cut[j] = 0;
	for (int t = 0; t < g->n_tensors; t++)
		if (made[t] >= 0 && last[t] > made[t]) {
			int64_t b = sample_bytes(g, t);
			for (int j = made[t] + 1; j <= last[t]; j++)
				cut[j] += b;
		}
out:
	ml_free(pos);
	ml_free(last);
	ml_free(made);
	return rc;
}

/*
 * ml_pipe_sample_flops: ml_node_flops of node ni with every unknown dim taken as 1:
 * the FLOPs of one sample of a step whose batch dim is symbolic.
 */
int64_t
ml_pipe_sample_flops(const struct ml_graph *g, int ni)
{
	const struct ml_node *n = &g->nodes[ni];
	const struct ml_opdef *d = n->op != ML_OP_NONE ? ml_opdef_get(n->op) : NULL;
	struct ml_tval iv[16], ov[16], *in[16], *out[16];
	struct ml_opctx c;
	if (d == NULL || n->n_in > 16 || n->n_out > 16)
		return 0;
	for (int j = 0; j < n->n_in + n->n_out; j++) {
		bool o = j >= n->n_in;
		int k = o ? j - n->n_in : j, t = o ? n->out[k] : n->in[k];
		struct ml_tval *v = o ? &ov[k] : &iv[k];
		memset(v, 0, sizeof *v);
		v->rank = -1;
		if (t >= 0)
			ml_graph_tval(g, t, v);
		for (int r = 0; r < v->rank; r++)
			if (v->dims[r] < 0)
				v->dims[r] = 1;
		if (o)
			out[k] = v;
		else
			in[k] = t >= 0 ? v : NULL;
	}
	ml_node_ctx(&c, g, n, in, out, NULL);
	if (d->flops != NULL)
		return d->flops(&c);
	int64_t s = 0;
	for (int j = 0; j < n->n_out; j++) {
		int64_t k = ml_tval_numel(out[j]);
		s += k > 0 ? k : 0;
	}
	return s;
}

/*
 * owner_of: the forward node whose stage node i goes with when the work is
 * counted: itself, its forward node (backward), the first forward reader
 * of its parameter (an update), the producer of its statistics (EmaUpdate);
 * -2 for the loss and its backward (the last stage's), -1 for none.
 */
static int
owner_of(const struct ml_graph *g, int i, const int *first_reader)
{
	const struct ml_node *n = &g->nodes[i];
	if (ml_pipe_is_forward(n))
		return i;
	if (strncmp(n->name, "loss/", 5) == 0)
		return -2;
	if (strncmp(n->name, "backward/", 9) == 0) {
		int o = ml_pipe_owner(g, i);
		return o < 0 ? -1 : ml_pipe_is_forward(&g->nodes[o]) ? o : -2;
	}
	if ((n->op == ML_OP_SGD_UPDATE || n->op == ML_OP_ADAM_UPDATE) && n->in[0] >= 0)
		return first_reader[n->in[0]];
	if (n->op == ML_OP_EMA_UPDATE && n->n_in > 1 && n->in[1] >= 0) {
		int t = n->in[1];
		for (int k = 0; k < g->n_nodes; k++)
			for (int j = 0; j < g->nodes[k].n_out; j++)
				if (g->nodes[k].out[j] == t)
					return ml_pipe_is_forward(&g->nodes[k]) ? k : -1;
	}
	return -1;
}

/*
 * partition: stage_of for the forward nodes fwd[0..nf) cut into n
 * contiguous stages, where node k costs cost[s * nf + k] on stage s and
 * stage s costs fixed[s] besides: the least bottleneck (the largest
 * stage's cost), then, within 5% of it, the cuts that send the fewest
 * bytes a sample (cut[j]: the bytes crossing a cut before position j).
 */
static int
partition(int n, const int *fwd, int nf, const double *cost, const double *fixed,
	  const int64_t *cut, int *stage_of, struct ml_err *e)
{
	size_t cells = (size_t)n * ((size_t)nf + 1);
	double *pre = ml_calloc(cells, sizeof(double));
	double *best = ml_malloc(sizeof(double) * cells);
	double *bytes = ml_malloc(sizeof(double) * cells);
	int *from = ml_malloc(sizeof(int) * cells);
	int rc = 0;
	if (pre == NULL || best == NULL || bytes == NULL || from == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
#define AT(a, s, j) a[(size_t)(s) * ((size_t)nf + 1) + (size_t)(j)]
	for (int s = 0; s < n; s++)
		for (int k = 0; k < nf; k++)
			AT(pre, s, k + 1) = AT(pre, s, k) + cost[(size_t)s * (size_t)nf + (size_t)k];
	for (int s = 0; s < n; s++)
		for (int j = 0; j <= nf; j++) {
			AT(best, s, j) = INFINITY;
			if (s == 0 && j > 0)
				AT(best, s, j) = AT(pre, s, j) + fixed[s];
			for (int i = s; s > 0 && i < j; i++) {
				double v = fmax(AT(best, s - 1, i), AT(pre, s, j) - AT(pre, s, i) + fixed[s]);
				if (v < AT(best, s, j))
					AT(best, s, j) = v;
			}
		}
	double cap = AT(best, n - 1, nf) * 1.05 + 1e-12;
	for (int s = 0; s < n; s++)
		for (int j = 0; j <= nf; j++) {
			AT(bytes, s, j) = INFINITY;
			AT(from, s, j) = -1;
			if (s == 0 && j > 0 && AT(pre, s, j) + fixed[s] <= cap)
				AT(bytes, s, j) = 0;
			for (int i = s; s > 0 && i < j; i++) {
				if (AT(pre, s, j) - AT(pre, s, i) + fixed[s] > cap ||
				    !isfinite(AT(bytes, s - 1, i)))
					continue;
				double v = AT(bytes, s - 1, i) + (double)cut[i];
				if (v < AT(bytes, s, j)) {
					AT(bytes, s, j) = v;
					AT(from, s, j) = i;
				}
			}
		}
	for (int s = n - 1, j = nf; s >= 0; s--) {
		int i = s > 0 ? AT(from, s, j) : 0;
		ML_ASSERT(i >= 0);
		for (int k = i; k < j; k++)
			stage_of[fwd[k]] = s;
		j = i;
	}
#undef AT
out:
	ml_free(pre);
	ml_free(best);
	ml_free(bytes);
	ml_free(from);
	return rc;
}

/*
 * auto_cut: the forward nodes of g and the bytes crossing each cut; then
 * the partition of costs node_cost[s * n_nodes + i] (node i on stage s),
 * each node counted with the forward node it goes with (owner_of).
 */
static int
auto_cut(const struct ml_graph *g, int n, const double *node_cost, int *stage_of,
	 struct ml_err *e)
{
	int nf = 0, rc = 0;
	int *fwd = ml_malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
	int *pos = ml_malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
	int *first = ml_malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
	int64_t *cut = ml_calloc((size_t)g->n_nodes + 2, sizeof(int64_t));
	double *cost = NULL, *fixed = ml_calloc((size_t)n + 1, sizeof(double));
	if (fwd == NULL || pos == NULL || first == NULL || cut == NULL || fixed == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int t = 0; t < g->n_tensors; t++)
		first[t] = -1;
	for (int i = 0; i < g->n_nodes; i++) {
		stage_of[i] = pos[i] = -1;
		if (!ml_pipe_is_forward(&g->nodes[i]))
			continue;
		pos[i] = nf;
		fwd[nf++] = i;
		for (int j = 0; j < g->nodes[i].n_in; j++)
			if (g->nodes[i].in[j] >= 0 && first[g->nodes[i].in[j]] < 0)
				first[g->nodes[i].in[j]] = i;
	}
	if (n < 1 || nf < n) {
		rc = ml_fail(e, ML_EINVAL, "%d stages for %d forward nodes: a stage needs one at least",
			     n, nf);
		goto out;
	}
	if ((cost = ml_calloc((size_t)n * (size_t)nf + 1, sizeof(double))) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		int o = owner_of(g, i, first);
		for (int s = 0; s < n; s++) {
			double c = node_cost[(size_t)s * (size_t)g->n_nodes + (size_t)i];
			if (o >= 0)
				cost[(size_t)s * (size_t)nf + (size_t)pos[o]] += c;
			else if (o == -2 && s == n - 1)
				fixed[s] += c;
		}
	}
	if ((rc = cross_bytes(g, fwd, nf, cut, e)) == 0)
		rc = partition(n, fwd, nf, cost, fixed, cut, stage_of, e);
out:
	ml_free(fwd);
	ml_free(pos);
	ml_free(first);
	ml_free(cut);
	ml_free(cost);
	ml_free(fixed);
	return rc;
}

int
ml_pipeline_auto(const struct ml_graph *g, int n, int *stage_of, struct ml_err *e)
{
	/*
	 * The work of a node: its FLOPs for one sample and a fixed cost
	 * (ML_PIPE_NODE_COST), so a stage of many small nodes counts; the
	 * same on every stage.
	 */
	if (n < 1 || n > 4096)
		return ml_fail(e, ML_EINVAL, "%d stages", n);
	double *c = ml_malloc(sizeof(double) * ((size_t)n * (size_t)g->n_nodes + 1));
	if (c == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < g->n_nodes; i++) {
		int64_t f = ml_pipe_sample_flops(g, i);
		for (int s = 0; s < n; s++)
			c[(size_t)s * (size_t)g->n_nodes + (size_t)i] =
				(f > 0 ? (double)f : 0) + ML_PIPE_NODE_COST;
	}
	int rc = auto_cut(g, n, c, stage_of, e);
	ml_free(c);
	return rc;
}

/* input_for: a value for step input t at rows samples: x in [0, 1), labels and lr 0. */
static int
input_for(const struct ml_tensor *t, int64_t rows, uint64_t *rng, struct ml_tval *v,
	  struct ml_err *e)
{
	int64_t dims[ML_MAX_RANK];
	if (t->rank < 0)
		return ml_fail(e, ML_EINVAL, "input '%s' has no rank", t->name);
	for (int d = 0; d < t->rank; d++)
		dims[d] = t->dims[d] >= 0 ? t->dims[d] : d == 0 ? rows : 1;
	ML_TRY(ml_tval_alloc(v, t->dtype == ML_UNDEF ? ML_F32 : t->dtype, t->rank, dims, e));
	if (strcmp(t->name, "label") == 0 || strcmp(t->name, "lr") == 0 ||
	    !ml_dtype_is_float(v->dtype))
		return 0;	/* zeros: class 0, no step */
	int64_t n = ml_tval_numel(v);
	for (int64_t i = 0; i < n; i++)
		ml_set_f64(v->data, v->dtype, i, (double)(ml_splitmix64(rng) >> 11) /
			   9007199254740992.0);
	return 0;
}

/* measure: t[i], node i's seconds (the least of two runs) in a step of rows samples on dev. */
static int
measure(const struct ml_graph *step, const char *dev, int64_t rows, double *t, struct ml_err *e)
{
	struct ml_graph *g = NULL;
	struct ml_session *s = NULL;
	struct ml_session_opts so = { .device = dev, .profile = true };
	uint64_t rng = 1;
	int rc;
	if ((rc = ml_graph_clone(&g, step, e)) < 0 || (rc = ml_session_new(&s, g, &so, e)) < 0)
		goto out;
	for (int k = 0; k < g->n_inputs; k++) {
		struct ml_tval v = { 0 };
		const struct ml_tensor *x = g->tensors[g->inputs[k]];
		rc = input_for(x, rows, &rng, &v, e);
		if (rc == 0)
			rc = ml_session_set_input(s, x->name, &v, e);
		ml_tval_clear(&v);
		if (rc < 0)
			goto out;
	}
	for (int i = 0; i < step->n_nodes; i++)
		t[i] = INFINITY;
	for (int r = 0; r < 3; r++) {
		if ((rc = ml_session_run(s, e)) < 0)
			goto out;
		for (int i = 0; r > 0 && i < g->n_nodes; i++) {
			/* the copy keeps the order; a name that differs is looked up */
			int k = i < step->n_nodes && strcmp(step->nodes[i].name, g->nodes[i].name) == 0 ?
				i : -1;
			for (int j = 0; k < 0 && j < step->n_nodes; j++)
				if (strcmp(step->nodes[j].name, g->nodes[i].name) == 0)
					k = j;
			if (k >= 0)
				t[k] = fmin(t[k], ml_session_node_time(s, i));
		}
	}
	for (int i = 0; i < step->n_nodes; i++)
		if (!isfinite(t[i]))
			t[i] = 0;
out:
	ml_session_free(s);
	ml_graph_free(g);
	return rc;
}

int
ml_pipeline_auto_measured(const struct ml_graph *step, int n, const char *const *devices,
			  int64_t rows, int *stage_of, double *time_s, struct ml_err *e)
{
	if (n < 1 || n > 4096 || rows < 1)
		return ml_fail(e, ML_EINVAL, "%d stages at %lld samples", n, (long long)rows);
	size_t nn = (size_t)step->n_nodes;
	double *c = ml_calloc((size_t)n * nn + 1, sizeof(double));
	if (c == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	int rc = 0;
	/* each device once: a stage whose device was measured takes its row */
	for (int s = 0; s < n && rc == 0; s++) {
		const char *d = devices != NULL && devices[s] != NULL ? devices[s] : "cpu";
		int same = -1;
		for (int k = 0; k < s && same < 0; k++)
			if (strcmp(devices != NULL && devices[k] != NULL ? devices[k] : "cpu", d) == 0)
				same = k;
		if (same >= 0)
			memcpy(c + (size_t)s * nn, c + (size_t)same * nn, sizeof(double) * nn);
		else
			rc = measure(step, d, rows, c + (size_t)s * nn, e);
	}
	/* a fixed cost per node as well: what a session spends around each */
	for (size_t k = 0; rc == 0 && k < (size_t)n * nn; k++)
		c[k] += 1e-6;
	if (rc == 0)
		rc = auto_cut(step, n, c, stage_of, e);
	if (rc == 0 && time_s != NULL)
		memcpy(time_s, c, sizeof(double) * (size_t)n * nn);
	ml_free(c);
	return rc;
}

/* find_fwd: the position in fwd[] of the forward node spec names (name or index), or -1. */
static int
find_fwd(const struct ml_graph *g, const int *fwd, int nf, const char *spec)
{
	bool digits = spec[0] != '\0';
	for (const char *c = spec; *c; c++)
		digits &= isdigit((unsigned char)*c) != 0;
	if (digits) {
		long v = strtol(spec, NULL, 10);
		return v >= 0 && v < nf ? (int)v : -1;
	}
	for (int k = 0; k < nf; k++) {
		const char *nm = g->nodes[fwd[k]].name;
		if (strcmp(nm, spec) == 0 || strcmp(nm + 8, spec) == 0)
			return k;
	}
	return -1;
}

/* read_all: the file's text, NUL-terminated, in *buf (free(3)). */
static int
read_all(const char *path, char **buf, struct ml_err *e)
{
	FILE *fp = fopen(path, "r");
	if (fp == NULL)
		return ml_fail(e, ML_EIO, "%s: %s", path, strerror(errno));
	size_t n = 0, cap = 4096;
	char *b = malloc(cap);
	for (size_t k; b != NULL && (k = fread(b + n, 1, cap - n - 1, fp)) > 0;) {
		n += k;
		if (n + 1 == cap) {
			char *nb = cap < (1u << 26) ? realloc(b, cap * 2) : NULL;
			if (nb == NULL) {
				free(b);
				b = NULL;
			}
			b = nb;
			cap *= 2;
		}
	}
	bool bad = ferror(fp) != 0;
	fclose(fp);
	if (b == NULL)
		return ml_fail(e, ML_ENOMEM, "%s: out of memory (or larger than 64 MiB)", path);
	if (bad) {
		free(b);
		return ml_fail(e, ML_EIO, "%s: read error", path);
	}
	b[n] = '\0';
	*buf = b;
	return 0;
}

int
ml_pipeline_plan_read(const struct ml_graph *g, const char *path, int max_stages, int *stage_of,
		      int *n_stages, const char **devs, char **buf, struct ml_err *e)
{
	int nf = 0, rc = 0, top = -1;
	char *text = NULL;
	*buf = NULL;
	int *fwd = ml_malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
	if (fwd == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int k = 0; k < max_stages; k++)
		devs[k] = NULL;
	for (int i = 0; i < g->n_nodes; i++) {
		stage_of[i] = -1;
		if (ml_pipe_is_forward(&g->nodes[i]))
			fwd[nf++] = i;
	}
	if ((rc = read_all(path, &text, e)) < 0)
		goto out;
	int line = 0;
	for (char *l = text, *nl; l != NULL; l = nl != NULL ? nl + 1 : NULL) {
		if ((nl = strchr(l, '\n')) != NULL)
			*nl = '\0';
		line++;
		char *hash = strchr(l, '#');
		if (hash != NULL)
			*hash = '\0';
		char *w[4] = { NULL }, *ws = NULL;
		int nw = 0;
		for (char *t = strtok_r(l, " \t\r", &ws); t != NULL; t = strtok_r(NULL, " \t\r", &ws))
			if (nw < 4)
				w[nw++] = t;
			else
				nw = 5;
		if (nw == 0)
			continue;
		if (strcmp(w[0], "stage") == 0) {
			char *end;
			long s = nw == 3 ? strtol(w[1], &end, 10) : -1;
			if (nw != 3 || *end != '\0' || s < 0 || s >= max_stages) {
				rc = ml_fail(e, ML_EINVAL, "%s: line %d: 'stage N DEVICE' with N in "
					     "[0, %d)", path, line, max_stages);
				goto out;
			}
			devs[s] = w[2];
			continue;
		}
		char *end;
		long s = nw == 2 ? strtol(w[1], &end, 10) : -1;
		if (nw != 2 || *end != '\0' || s < 0 || s >= max_stages) {
			rc = ml_fail(e, ML_EINVAL, "%s: line %d: 'NODE STAGE' or 'FIRST..LAST STAGE' "
				     "with STAGE in [0, %d)", path, line, max_stages);
			goto out;
		}
		char *dots = strstr(w[0], "..");
		if (dots != NULL)
			*dots = '\0';
		int a = find_fwd(g, fwd, nf, w[0]);
		int b = dots != NULL ? find_fwd(g, fwd, nf, dots + 2) : a;
		if (a < 0 || b < 0) {
			rc = ml_fail(e, ML_EINVAL, "%s: line %d: no forward node '%s'", path, line,
				     a < 0 ? w[0] : dots + 2);
			goto out;
		}
		if (b < a) {
			rc = ml_fail(e, ML_EINVAL, "%s: line %d: '%s' comes after '%s'", path, line,
				     w[0], dots + 2);
			goto out;
		}
		for (int k = a; k <= b; k++)
			stage_of[fwd[k]] = (int)s;
		if (s > top)
			top = (int)s;
	}
	for (int k = 0; k < nf; k++)
		if (stage_of[fwd[k]] < 0) {
			rc = ml_fail(e, ML_EINVAL, "%s: forward node '%s' has no stage (the stages "
				     "must cover the model)", path, g->nodes[fwd[k]].name + 8);
			goto out;
		}
	for (int s = 0; s <= top; s++) {
		bool any = false;
		for (int k = 0; k < nf && !any; k++)
			any = stage_of[fwd[k]] == s;
		if (!any) {
			rc = ml_fail(e, ML_EINVAL, "%s: stage %d has no node", path, s);
			goto out;
		}
	}
	if (top < 0) {
		rc = ml_fail(e, ML_EINVAL, "%s: no stage", path);
		goto out;
	}
	*n_stages = top + 1;
	*buf = text;
	text = NULL;
out:
	free(text);
	ml_free(fwd);
	return rc;
}
