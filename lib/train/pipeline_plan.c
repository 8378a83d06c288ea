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

int
ml_pipeline_auto(const struct ml_graph *g, int n, int *stage_of, struct ml_err *e)
{
	int nf = 0, rc = 0;
	int *fwd = ml_malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
	double *cost = ml_calloc((size_t)g->n_nodes + 1, sizeof(double));
	double *pre = ml_calloc((size_t)g->n_nodes + 2, sizeof(double));
	int64_t *cut = ml_calloc((size_t)g->n_nodes + 2, sizeof(int64_t));
	double *best = NULL, *bytes = NULL;
	int *from = NULL;
	if (fwd == NULL || cost == NULL || pre == NULL || cut == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		stage_of[i] = -1;
		if (ml_pipe_is_forward(&g->nodes[i]))
			fwd[nf++] = i;
	}
	if (n < 1 || nf < n) {
		rc = ml_fail(e, ML_EINVAL, "%d stages for %d forward nodes: a stage needs one at least",
			     n, nf);
		goto out;
	}
	/*
	 * The work of a forward node: its FLOPs and those of its backward
	 * nodes for one sample, and a fixed cost per node (about 1 us of
	 * launch and bookkeeping at 2 GFLOP/s, over a batch of 64), so a
	 * stage of many small nodes counts.
	 */
	const double per_node = ML_PIPE_NODE_COST;
	for (int i = 0; i < g->n_nodes; i++) {
		int o = ml_pipe_is_forward(&g->nodes[i]) ? i : ml_pipe_owner(g, i);
		if (o < 0 || !ml_pipe_is_forward(&g->nodes[o]))
			continue;
		int64_t f = ml_pipe_sample_flops(g, i);
		cost[o] += (f > 0 ? (double)f : 0) + per_node;
	}
	for (int k = 0; k < nf; k++)
		pre[k + 1] = pre[k] + cost[fwd[k]];
	if ((rc = cross_bytes(g, fwd, nf, cut, e)) < 0)
		goto out;
	/*
	 * best[s][j]: the least bottleneck (the largest stage's work) of the
	 * first j forward nodes in s + 1 stages; then, within 5% of the
	 * overall best, the cuts that send the fewest bytes.
	 */
	size_t cells = (size_t)n * ((size_t)nf + 1);
	best = ml_malloc(sizeof(double) * cells);
	bytes = ml_malloc(sizeof(double) * cells);
	from = ml_malloc(sizeof(int) * cells);
	if (best == NULL || bytes == NULL || from == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
#define AT(a, s, j) a[(size_t)(s) * ((size_t)nf + 1) + (size_t)(j)]
	for (int s = 0; s < n; s++)
		for (int j = 0; j <= nf; j++) {
			AT(best, s, j) = INFINITY;
			if (s == 0 && j > 0)
				AT(best, s, j) = pre[j];
			for (int i = s; s > 0 && i < j; i++) {
				double v = fmax(AT(best, s - 1, i), pre[j] - pre[i]);
				if (v < AT(best, s, j))
					AT(best, s, j) = v;
			}
		}
	double cap = AT(best, n - 1, nf) * 1.05 + 1;
	for (int s = 0; s < n; s++)
		for (int j = 0; j <= nf; j++) {
			AT(bytes, s, j) = INFINITY;
			AT(from, s, j) = -1;
			if (s == 0 && j > 0 && pre[j] <= cap)
				AT(bytes, s, j) = 0;
			for (int i = s; s > 0 && i < j; i++) {
				if (pre[j] - pre[i] > cap || !isfinite(AT(bytes, s - 1, i)))
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
	ml_free(fwd);
	ml_free(cost);
	ml_free(pre);
	ml_free(cut);
	ml_free(best);
	ml_free(bytes);
	ml_free(from);
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
