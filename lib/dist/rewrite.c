/*
 * rewrite.c: the graph side of data-parallel training: ml_train_distribute
 * cuts a step graph's gradients into buckets and brackets each with an
 * ml.AllReduceStart / ml.AllReduceWait pair; ml_dist_bcast_params and
 * ml_dist_param_divergence keep and check the ranks' parameters alike; and
 * the sharding of global batches. See lib/ml_dist.h for the contracts.
 */
#include <limits.h>
#include <stdio.h>

#include "dist/dist.h"

void
ml_dist_opts_init(struct ml_dist_opts *o)
{
	memset(o, 0, sizeof *o);
	o->bucket_mb = 25;
	o->wire = ML_F32;
}

int
ml_dist_wire_parse(const char *s, enum ml_dtype *dt, struct ml_err *e)
{
	static const struct { const char *name; enum ml_dtype dt; } wires[] = {
		{ "f32", ML_F32 }, { "bf16", ML_BF16 }, { "fp16", ML_F16 },
	};
	for (size_t i = 0; s != NULL && i < sizeof wires / sizeof wires[0]; i++)
		if (strcmp(s, wires[i].name) == 0) {
			*dt = wires[i].dt;
			return 0;
		}
	return ml_fail(e, ML_EINVAL, "unknown all-reduce type '%s' (f32, bf16, fp16)",
		       s != NULL ? s : "");
}

const char *
ml_dist_wire_name(enum ml_dtype dt)
{
	return dt == ML_BF16 ? "bf16" : dt == ML_F16 ? "fp16" : dt == ML_F32 ? "f32" :
	       ml_dtype_name(dt);
}

static bool
has_prefix(const char *s, const char *p)
{
	return s != NULL && strncmp(s, p, strlen(p)) == 0;
}

/* struct bucket_plan: one bucket: members list[lo, hi), its start after node after, wait before node before. */
struct bucket_plan {
	int lo, hi;
	int after, before;
	int64_t bytes;
	bool f64;
};

/* uniq_name: base, or base_N when base names a tensor of g already, into buf. */
static const char *
uniq_name(const struct ml_graph *g, const char *base, char *buf, size_t n)
{
	snprintf(buf, n, "%s", base);
	for (unsigned k = 1; ml_graph_find(g, buf) >= 0 && k < 1000000; k++) {
		size_t len = strlen(base);
		if (len > n - 12)
			len = n - 12;
		snprintf(buf, n, "%.*s_%u", (int)len, base, k % 1000000);
	}
	return buf;
}

/*
 * prod_cmp: order tensors of graph g by their producer (the order the step
 * computes them); for qsort_r, so that concurrent calls share no state.
 */
static int
prod_cmp(const void *a, const void *b, void *g)
{
	const struct ml_graph *sort_g = g;
	int x = *(const int *)a, y = *(const int *)b;
	int px = sort_g->tensors[x]->producer, py = sort_g->tensors[y]->producer;
	if (px != py)
		return px < py ? -1 : 1;
	return x < y ? -1 : x > y;
}

/*
 * select_reduced: mark[t] for each tensor to average across ranks: input 1
 * (the gradient, or the batch statistic) of the optimizer's update ops, and
 * any float value that a backward/ node makes and an optimizer/ node reads.
 */
static void
select_reduced(const struct ml_graph *g, bool *mark)
{
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t < 0)
				continue;
			const struct ml_tensor *ten = g->tensors[t];
			if (ten->kind != ML_TK_ACT || ten->producer < 0 ||
			    !ml_dist_reduce_dtype(ten->dtype))
				continue;
			bool upd = j == 1 && (n->op == ML_OP_SGD_UPDATE || n->op == ML_OP_ADAM_UPDATE ||
					      n->op == ML_OP_EMA_UPDATE);
			bool bwd = has_prefix(n->name, "optimizer/") &&
				   has_prefix(g->nodes[ten->producer].name, "backward/");
			if (upd || bwd)
				mark[t] = true;
		}
	}
}

/* add_pair: the start and wait nodes of bucket k; red_out[t] gets each member's average. */
static int
add_pair(struct ml_graph *g, int k, const struct bucket_plan *b, const int *list, int *red_out,
	 enum ml_dtype wire, struct ml_err *e)
{
	int n = b->hi - b->lo, rc = 0;
	const char **names = ml_malloc(sizeof(char *) * (size_t)(n + 1));
	char **outs = ml_calloc((size_t)n + 1, sizeof(char *));
	int64_t *dts = ml_malloc(sizeof(int64_t) * (size_t)(n + 1));
	int64_t *rks = ml_malloc(sizeof(int64_t) * (size_t)(n + 1));
	int64_t *dms = ml_malloc(sizeof(int64_t) * (size_t)(n * ML_MAX_RANK + 1));
	char tok[128], nm[128], buf[600];
	int nd = 0;
	if (names == NULL || outs == NULL || dts == NULL || rks == NULL || dms == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		const struct ml_tensor *t = g->tensors[list[b->lo + i]];
		names[i] = t->name;
		dts[i] = t->dtype;
		rks[i] = t->rank;
		for (int d = 0; d < t->rank; d++)
			dms[nd++] = t->dims[d];
		char base[520];
		snprintf(base, sizeof base, "%s.avg", t->name);
		if ((outs[i] = ml_graph_strdup(g, uniq_name(g, base, buf, sizeof buf))) == NULL) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
	}
	snprintf(nm, sizeof nm, "allreduce/token_%d", k);
	const char *tn = uniq_name(g, nm, tok, sizeof tok);
	snprintf(nm, sizeof nm, "backward/allreduce_start_%d", k);
	int si = ml_graph_add_node(g, "AllReduceStart", "ml", nm, n, names, 1, &tn, e);
	if (si < 0) {
		rc = si;
		goto out;
	}
	/* a float64 bucket keeps its precision; only float32 ones are narrowed */
	bool narrow = !b->f64 && wire != ML_F32;
	if (ml_node_set_int(g, si, "bucket", k) < 0 || (k == 0 && ml_node_set_int(g, si, "first", 1) < 0) ||
	    (narrow && ml_node_set_int(g, si, "wire", wire) < 0)) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	snprintf(nm, sizeof nm, "optimizer/allreduce_wait_%d", k);
	int wi = ml_graph_add_node(g, "AllReduceWait", "ml", nm, 1, &tn, n,
				   (const char *const *)outs, e);
	if (wi < 0) {
		rc = wi;
		goto out;
	}
	if (ml_node_set_int(g, wi, "bucket", k) < 0 || ml_node_set_ints(g, wi, "dtypes", n, dts) < 0 ||
	    ml_node_set_ints(g, wi, "ranks", n, rks) < 0 ||
	    (nd > 0 && ml_node_set_ints(g, wi, "dims", nd, dms) < 0)) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++)
		red_out[list[b->lo + i]] = g->nodes[wi].out[i];
out:
	ml_free(names);
	ml_free(outs);
	ml_free(dts);
	ml_free(rks);
	ml_free(dms);
	return rc;
}

int
ml_train_distribute(struct ml_graph *g, const struct ml_dist_opts *o, struct ml_err *e)
{
	struct ml_dist_opts def;
	bool *mark = NULL;
	int *list = NULL, *first_use = NULL, *red_out = NULL, *order = NULL;
	struct bucket_plan *bk = NULL;
	struct ml_node *tmp = NULL;
	int rc = 0, nl = 0, nb = 0;

	if (o == NULL) {
		ml_dist_opts_init(&def);
		o = &def;
	}
	if (!(o->bucket_mb >= 0 && o->bucket_mb <= 1048576))
		return ml_fail(e, ML_EINVAL, "bucket size %g MiB is not in [0, 1048576]", o->bucket_mb);
	/* a zeroed struct (ML_UNDEF) sends float32, as ml_dist_opts_init says */
	enum ml_dtype wire = o->wire == ML_UNDEF ? ML_F32 : o->wire;
	if (wire != ML_F32 && wire != ML_BF16 && wire != ML_F16)
		return ml_fail(e, ML_EINVAL, "gradients cannot cross the wire as %s (f32, bf16, fp16)",
			       ml_dtype_name(wire));
	if (!o->force && ml_dist_size() <= 1)
		return 0;
	for (int i = 0; i < g->n_nodes; i++)
		if (g->nodes[i].op == ML_OP_ALLREDUCE_START || g->nodes[i].op == ML_OP_ALLREDUCE_WAIT)
			return ml_fail(e, ML_EINVAL, "the graph is distributed already (node '%s')",
				       g->nodes[i].name);
	ML_TRY(ml_graph_toposort(g, e));
	ML_TRY(ml_graph_infer(g, e));
	int nn = g->n_nodes, nt = g->n_tensors;
	mark = ml_calloc((size_t)nt + 1, sizeof *mark);
	list = ml_malloc(sizeof(int) * ((size_t)nt + 1));
	first_use = ml_malloc(sizeof(int) * ((size_t)nt + 1));
	red_out = ml_malloc(sizeof(int) * ((size_t)nt + 1));
	bk = ml_calloc((size_t)nt + 1, sizeof *bk);
	if (mark == NULL || list == NULL || first_use == NULL || red_out == NULL || bk == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int t = 0; t < nt; t++) {
		first_use[t] = INT_MAX;
		red_out[t] = -1;
	}
	for (int i = 0; i < nn; i++)
		for (int j = 0; j < g->nodes[i].n_in; j++) {
			int t = g->nodes[i].in[j];
			if (t >= 0 && first_use[t] > i)
				first_use[t] = i;
		}
	select_reduced(g, mark);
	for (int t = 0; t < nt; t++)
		if (mark[t]) {
			const struct ml_tensor *ten = g->tensors[t];
			bool known = ten->rank >= 0;
			for (int d = 0; known && d < ten->rank; d++)
				known = ten->dims[d] >= 0;
			if (!known) {
				rc = ml_fail(e, ML_ENOTSUP, "'%s' has no static shape; it cannot be "
					     "all-reduced", ten->name);
				goto out;
			}
			list[nl++] = t;
		}
	if (nl == 0)
		goto out;
	qsort_r(list, (size_t)nl, sizeof *list, prod_cmp, (void *)g);
	/*
	 * Buckets in the order the step makes the values. A bucket closes when
	 * it holds cap bytes, when the next value has another reduction type,
	 * or when some member is read before the next value exists (its wait
	 * must come first).
	 */
	double cap = o->bucket_mb * 1048576.0;
	struct bucket_plan *cur = NULL;
	for (int i = 0; i < nl; i++) {
		const struct ml_tensor *t = g->tensors[list[i]];
		struct ml_tval v;
		ml_graph_tval(g, list[i], &v);
		int64_t bytes = ml_tval_nbytes(&v);
		bool f64 = t->dtype == ML_F64;
		if (cur != NULL && (t->producer >= cur->before || f64 != cur->f64))
			cur = NULL;
		if (cur == NULL) {
			cur = &bk[nb++];
			cur->lo = i;
			cur->before = INT_MAX;
			cur->f64 = f64;
		}
		cur->hi = i + 1;
		cur->after = t->producer;
		cur->before = ML_MIN(cur->before, first_use[list[i]]);
		cur->bytes += bytes;
		if ((double)cur->bytes >= cap)
			cur = NULL;
	}
	for (int k = 0; k < nb; k++)
		if ((rc = add_pair(g, k, &bk[k], list, red_out, wire, e)) < 0)
			goto out;
	/* the readers of each reduced value read its average instead */
	for (int i = 0; i < nn; i++) {
		struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] >= 0 && n->in[j] < nt && red_out[n->in[j]] >= 0)
				n->in[j] = red_out[n->in[j]];
	}
	/* node order: each wait right before node `before`, each start right after node `after` */
	int total = g->n_nodes;
	order = ml_malloc(sizeof(int) * ((size_t)total + 1));
	tmp = ml_malloc(sizeof *tmp * ((size_t)total + 1));
	if (order == NULL || tmp == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	int no = 0;
	for (int i = 0; i < nn; i++) {
		for (int k = 0; k < nb; k++)
			if (bk[k].before == i)
				order[no++] = nn + 2 * k + 1;
		order[no++] = i;
		for (int k = 0; k < nb; k++)
			if (bk[k].after == i)
				order[no++] = nn + 2 * k;
	}
	for (int k = 0; k < nb; k++)
		if (bk[k].before >= nn)	/* read by no node: only a graph output would want it */
			order[no++] = nn + 2 * k + 1;
	ML_ASSERT(no == total);
	for (int i = 0; i < total; i++)
		tmp[i] = g->nodes[order[i]];
	memcpy(g->nodes, tmp, sizeof *tmp * (size_t)total);
	if ((rc = ml_graph_toposort(g, e)) < 0 || (rc = ml_graph_validate(g, e)) < 0 ||
	    (rc = ml_graph_infer(g, e)) < 0)
		goto out;
	rc = nb;
out:
	ml_free(mark);
	ml_free(list);
	ml_free(first_use);
	ml_free(red_out);
	ml_free(order);
	ml_free(tmp);
	ml_free(bk);
	return rc;
}

/* Parameters alike on every rank. */

static uint64_t
fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *s = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ull;
	return h;
}

/* stored: whether tensor t is one that bcast_params sends (params only: PARAM). */
static bool
stored(const struct ml_tensor *t, bool params_only)
{
	if (t->data == NULL || t->nbytes == 0)
		return false;
	return t->kind == ML_TK_PARAM || (!params_only && t->kind == ML_TK_CONST);
}

/* same_graphs: fail on every rank when the ranks' tensors to send differ. */
static int
same_graphs(const struct ml_graph *g, int root, bool params_only, struct ml_err *e)
{
	uint64_t mine[3] = { 0xcbf29ce484222325ull, 0, 0 }, theirs[3];
	for (int t = 0; t < g->n_tensors; t++) {
		const struct ml_tensor *ten = g->tensors[t];
		if (!stored(ten, params_only))
			continue;
		uint64_t dt = (uint64_t)ten->dtype, nb = ten->nbytes;
		mine[0] = fnv(mine[0], ten->name, strlen(ten->name) + 1);
		mine[0] = fnv(mine[0], &dt, sizeof dt);
		mine[0] = fnv(mine[0], &nb, sizeof nb);
		mine[1]++;
		mine[2] += nb;
	}
	memcpy(theirs, mine, sizeof mine);
	ML_TRY(ml_dist_bcast(theirs, sizeof theirs, root, e));
	int64_t bad = memcmp(mine, theirs, sizeof mine) != 0;
	ML_TRY(ml_dist_allreduce(&bad, 1, ML_I64, ML_DIST_MAX, e));
	if (bad)
		return ml_fail(e, ML_EINVAL, "the ranks hold different graphs (names, types or sizes "
			       "of the parameters differ from rank %d's)", root);
	return 0;
}

int
ml_dist_bcast_params(struct ml_graph *g, int root, struct ml_err *e)
{
	if (root < 0 || root >= ml_dist_size())
		return ml_fail(e, ML_EINVAL, "rank %d is not in a world of %d", root, ml_dist_size());
	if (ml_dist_size() <= 1)
		return 0;
	ML_TRY(same_graphs(g, root, false, e));
	for (int t = 0; t < g->n_tensors; t++)
		if (stored(g->tensors[t], false))
			ML_TRY(ml_dist_bcast(g->tensors[t]->data, g->tensors[t]->nbytes, root, e));
	return 0;
}

int
ml_dist_param_divergence(const struct ml_graph *g, int root, double *maxdiff, struct ml_err *e)
{
	*maxdiff = 0;
	if (root < 0 || root >= ml_dist_size())
		return ml_fail(e, ML_EINVAL, "rank %d is not in a world of %d", root, ml_dist_size());
	if (ml_dist_size() <= 1)
		return 0;
	ML_TRY(same_graphs(g, root, true, e));
	double md = 0;
	for (int t = 0; t < g->n_tensors; t++) {
		const struct ml_tensor *ten = g->tensors[t];
		if (!stored(ten, true))
			continue;
		void *copy = ml_malloc(ten->nbytes);
		if (copy == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		memcpy(copy, ten->data, ten->nbytes);
		int rc = ml_dist_bcast(copy, ten->nbytes, root, e);
		size_t es = ml_dtype_size(ten->dtype);
		int64_t n = es > 0 ? (int64_t)(ten->nbytes / es) : 0;
		for (int64_t i = 0; rc == 0 && i < n; i++) {
			double a = ml_get_f64(ten->data, ten->dtype, i), b = ml_get_f64(copy, ten->dtype, i);
			double d = fabs(a - b);
			if (isnan(a) != isnan(b))
				d = INFINITY;
			if (d > md)
				md = d;
		}
		if (es == 0 && rc == 0 && memcmp(copy, ten->data, ten->nbytes) != 0)
			md = INFINITY;
		ml_free(copy);
		ML_TRY(rc);
	}
	ML_TRY(ml_dist_allreduce(&md, 1, ML_F64, ML_DIST_MAX, e));
	*maxdiff = md;
	return 0;
}

/* Sharding. */

void
ml_dist_shard(int64_t n, int rank, int size, int64_t *lo, int64_t *hi)
{
	if (size < 1 || rank < 0 || rank >= size || n <= 0) {
		*lo = *hi = 0;
		if (size <= 1 && n > 0)
			*hi = n;
		return;
	}
	/* floor(n * r / size) without overflow: n = q size + m */
	int64_t q = n / size, m = n % size;
	*lo = q * rank + m * rank / size;
	*hi = q * (rank + 1) + m * (rank + 1) / size;
}

void
ml_dist_shard_batch(const struct ml_tval *global, struct ml_tval *view, double *weight)
{
	*view = *global;
	view->owned = false;
	if (weight != NULL)
		*weight = 1;
	if (global->rank < 1 || global->dims[0] <= 0 || ml_dist_size() <= 1)
		return;
	int64_t n = global->dims[0], lo, hi;
	ml_dist_shard(n, ml_dist_rank(), ml_dist_size(), &lo, &hi);
	int64_t nb = ml_tval_nbytes(global);
	size_t row = nb > 0 ? (size_t)(nb / n) : 0;
	view->dims[0] = hi - lo;
	view->data = global->data != NULL ? (char *)global->data + (size_t)lo * row : NULL;
	if (weight != NULL)
		*weight = (double)(hi - lo) / (double)n;
}
