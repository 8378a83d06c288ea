/*
 * ctrl.c: CPU kernels of If, Loop and Scan. Each runs its body in a
 * subgraph session whose free names resolve to the enclosing session's
 * values; carried values are copied out after each iteration because a
 * session's outputs live only until its next run.
 */
#include <errno.h>

#include "ml_impl.h"

/*
 * The most iterations a Loop may run: a trip count of 2^62, or a
 * condition that never turns false, would otherwise run until the process
 * is killed. Models that export a while loop give M = INT64_MAX and stop
 * on the condition, so M itself is not refused: the loop fails when it
 * reaches the cap and would go on. ML_MAX_LOOP sets it.
 */
#define ML_MAX_LOOP_DEFAULT ((int64_t)1 << 20)

/* loop_cap: the cap on Loop iterations, from ML_MAX_LOOP; -1 when that is not a count. */
static int64_t
loop_cap(void)
{
	const char *s = getenv("ML_MAX_LOOP");
	if (s == NULL || *s == '\0')
		return ML_MAX_LOOP_DEFAULT;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (*s < '0' || *s > '9' || *end != '\0' || errno == ERANGE || v <= 0)
		return -1;
	return v;
}

static struct ml_graph *
body(struct ml_opctx *c, const char *name)
{
	const struct ml_attr *a = ml_attr_find(c->node, name);
	return a != NULL && a->type == ML_ATTR_GRAPH && a->n == 1 ? a->graphs[0] : NULL;
}

/* copy: dst becomes an owned copy of src */
static int
copy_val(struct ml_tval *dst, const struct ml_tval *src, struct ml_err *e)
{
	struct ml_tval t = { 0 };
	ML_TRY(ml_tval_alloc(&t, src->dtype, src->rank, src->dims, e));
	int64_t nb = ml_tval_nbytes(src);
	if (nb > 0)
		memcpy(t.data, src->data, (size_t)nb);
	ml_tval_clear(dst);
	*dst = t;
	return 0;
}

/* slice: dst = src[..., idx, ...] along axis (owned, rank - 1) */
static int
take(struct ml_tval *dst, const struct ml_tval *src, int axis, int64_t idx, struct ml_err *e)
{
	int64_t dims[ML_MAX_RANK], outer = 1, inner = (int64_t)ml_dtype_size(src->dtype);
	int r = 0;
	for (int d = 0; d < src->rank; d++) {
		if (d != axis)
			dims[r++] = src->dims[d];
		if (d < axis)
			outer *= src->dims[d];
		else if (d > axis)
			inner *= src->dims[d];
	}
	ML_TRY(ml_tval_alloc(dst, src->dtype, r, dims, e));
	const uint8_t *s = src->data;
	uint8_t *o = dst->data;
	for (int64_t i = 0; i < outer; i++)
		memcpy(o + i * inner, s + (i * src->dims[axis] + idx) * inner, (size_t)inner);
	return 0;
}

/*
 * struct stack: values collected per iteration, stacked at the end along a
 * new axis.
 */
struct stack {
	struct ml_tval *v;
	int64_t n, cap;
};

static int
stack_push(struct stack *s, const struct ml_tval *v, struct ml_err *e)
{
	if (s->n == s->cap) {
		int64_t cap = s->cap ? s->cap * 2 : 16;
		struct ml_tval *q = ml_realloc(s->v, sizeof *q * (size_t)cap);
		if (q == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		memset(q + s->n, 0, sizeof *q * (size_t)(cap - s->n));
		s->v = q;
		s->cap = cap;
	}
	ML_TRY(copy_val(&s->v[s->n], v, e));
	s->n++;
	return 0;
}

static void
stack_free(struct stack *s)
{
	for (int64_t i = 0; i < s->n; i++)
		ml_tval_clear(&s->v[i]);
	ml_free(s->v);
	memset(s, 0, sizeof *s);
}

/* stack_out: out = the items stacked along axis (reversed when rev); decl for an empty stack */
static int
stack_out(struct ml_opctx *c, struct ml_tval *out, const struct stack *s, int axis, bool rev,
	  const struct ml_tensor *decl)
{
	if (s->n == 0) {
		int64_t dims[ML_MAX_RANK] = { 0 };
		int r = 1;
		if (decl != NULL && decl->rank >= 0 && decl->rank < ML_MAX_RANK) {
			for (int d = 0; d < decl->rank; d++)
				dims[d + 1] = decl->dims[d] > 0 ? decl->dims[d] : 0;
			r = decl->rank + 1;
		}
		return ml_tval_alloc(out, decl != NULL && decl->dtype ? decl->dtype : ML_F32, r, dims,
				     c->err);
	}
	const struct ml_tval *f = &s->v[0];
	if (f->rank + 1 > ML_MAX_RANK)
		return ml_opfail(c, ML_ENOTSUP, "scan output rank is too large");
	if (axis < 0)
		axis += f->rank + 1;
	if (axis < 0 || axis > f->rank)
		return ml_opfail(c, ML_EINVAL, "scan output axis is out of range");
	for (int64_t i = 1; i < s->n; i++) {
		bool same = s->v[i].rank == f->rank && s->v[i].dtype == f->dtype;
		for (int d = 0; same && d < f->rank; d++)
			same = s->v[i].dims[d] == f->dims[d];
		if (!same)
			return ml_opfail(c, ML_EINVAL, "scan outputs change shape between iterations");
	}
	int64_t dims[ML_MAX_RANK], outer = 1, inner = (int64_t)ml_dtype_size(f->dtype);
	for (int d = 0, k = 0; d <= f->rank; d++)
		dims[d] = d == axis ? s->n : f->dims[k++];
	for (int d = 0; d < f->rank; d++) {
		if (d < axis)
			outer *= f->dims[d];
		else
			inner *= f->dims[d];
	}
	ML_TRY(ml_tval_alloc(out, f->dtype, f->rank + 1, dims, c->err));
	uint8_t *o = out->data;
	for (int64_t i = 0; i < s->n; i++) {
		const uint8_t *src = s->v[rev ? s->n - 1 - i : i].data;
		for (int64_t j = 0; j < outer; j++)
			memcpy(o + (j * s->n + i) * inner, src + j * inner, (size_t)inner);
	}
	return 0;
}

static int
run_if(struct ml_opctx *c)
{
	if (c->sess == NULL || c->body == NULL)
		return ml_opfail(c, ML_ENOTSUP, "needs a session");
	const struct ml_tval *cv = c->in[0];
	if (ml_tval_numel(cv) != 1)
		return ml_opfail(c, ML_EINVAL, "cond must hold one value");
	struct ml_graph *b = body(c, ml_get_f64(cv->data, cv->dtype, 0) != 0 ? "then_branch" :
						  "else_branch");
	void *s = NULL;
	int rc;
	if (b == NULL)
		return ml_opfail(c, ML_EINVAL, "missing branch graph");
	if ((rc = c->body->open(c->sess, b, &s, c->err)) < 0 ||
	    (rc = c->body->run(s, c->err)) < 0)
		goto out;
	for (int i = 0; i < c->n_out && i < b->n_outputs; i++)
		if ((rc = copy_val(c->out[i], c->body->output(s, i), c->err)) < 0)
			goto out;
out:
	c->body->close(s);
	return rc;
}

static int
run_loop(struct ml_opctx *c)
{
	if (c->sess == NULL || c->body == NULL)
		return ml_opfail(c, ML_ENOTSUP, "needs a session");
	struct ml_graph *b = body(c, "body");
	int n = c->n_in - 2, k = c->n_out - n, rc = 0;
	int64_t max = INT64_MAX, cap = loop_cap();
	uint8_t cond = 1;
	if (cap < 0)
		return ml_fail(c->err, ML_EINVAL, "ML_MAX_LOOP: '%s' is not a positive count",
			       getenv("ML_MAX_LOOP"));
	const struct ml_tval *mv = ML_IN(c, 0), *cv = ML_IN(c, 1);
	if (mv != NULL) {
		if (ml_tval_numel(mv) != 1)
			return ml_opfail(c, ML_EINVAL, "M must hold one value");
		max = ml_get_i64(mv->data, mv->dtype, 0);
	}
	if (cv != NULL) {
		if (ml_tval_numel(cv) != 1)
			return ml_opfail(c, ML_EINVAL, "cond must hold one value");
		cond = ml_get_f64(cv->data, cv->dtype, 0) != 0;
	}
	struct ml_tval *cur = ml_calloc((size_t)n + 1, sizeof *cur);
	struct stack *scans = ml_calloc((size_t)k + 1, sizeof *scans);
	void *s = NULL;
	if (cur == NULL || scans == NULL) {
		rc = ml_fail(c->err, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int j = 0; j < n; j++) {
		if (c->in[j + 2] == NULL) {
			rc = ml_opfail(c, ML_EINVAL, "loop-carried input %d is missing", j);
			goto out;
		}
		if ((rc = copy_val(&cur[j], c->in[j + 2], c->err)) < 0)
			goto out;
	}
	if ((rc = c->body->open(c->sess, b, &s, c->err)) < 0)
		goto out;
	for (int64_t it = 0; it < max && cond; it++) {
		if (it == cap) {
			rc = ml_opfail(c, ML_EINVAL,
				       "the loop goes on past %lld iterations, the cap (ML_MAX_LOOP)",
				       (long long)cap);
			goto out;
		}
		int64_t itv = it;
		uint8_t cin = cond;
		struct ml_tval tv = { .dtype = ML_I64, .rank = 0, .data = &itv };
		struct ml_tval cb = { .dtype = ML_BOOL, .rank = 0, .data = &cin };
		if ((rc = c->body->bind(s, 0, &tv, c->err)) < 0 ||
		    (rc = c->body->bind(s, 1, &cb, c->err)) < 0)
			goto out;
		for (int j = 0; j < n; j++)
			if ((rc = c->body->bind(s, j + 2, &cur[j], c->err)) < 0)
				goto out;
		if ((rc = c->body->run(s, c->err)) < 0)
			goto out;
		const struct ml_tval *co = c->body->output(s, 0);
		if (ml_tval_numel(co) != 1) {
			rc = ml_opfail(c, ML_EINVAL, "body cond output must hold one value");
			goto out;
		}
		cond = ml_get_f64(co->data, co->dtype, 0) != 0;
		for (int j = 0; j < n; j++)
			if ((rc = copy_val(&cur[j], c->body->output(s, j + 1), c->err)) < 0)
				goto out;
		for (int j = 0; j < k; j++)
			if ((rc = stack_push(&scans[j], c->body->output(s, n + 1 + j), c->err)) < 0)
				goto out;
	}
	for (int j = 0; j < n; j++) {
		ml_tval_clear(c->out[j]);
		*c->out[j] = cur[j];
		memset(&cur[j], 0, sizeof cur[j]);
	}
	for (int j = 0; j < k; j++) {
		const struct ml_tensor *decl = b->tensors[b->outputs[n + 1 + j]];
		if ((rc = stack_out(c, c->out[n + j], &scans[j], 0, false, decl)) < 0)
			goto out;
	}
out:
	c->body->close(s);
	for (int j = 0; cur != NULL && j < n; j++)
		ml_tval_clear(&cur[j]);
	for (int j = 0; scans != NULL && j < k; j++)
		stack_free(&scans[j]);
	ml_free(cur);
	ml_free(scans);
	return rc;
}

static int64_t
attr_at(const struct ml_node *nd, const char *name, int i, int64_t def)
{
	const int64_t *v;
	int n = ml_attr_ints(nd, name, &v);
	return n > i ? v[i] : def;
}

/*
 * scan_one: the opset-9 Scan over states in[0..n) and scan inputs
 * in[n..n+m), writing outs[0..n+k). For opset 8 the caller passes one
 * batch entry at a time, with the sequence length given.
 */
static int
scan_one(struct ml_opctx *c, void *s, int n, int m, struct ml_tval *const *ins,
	 struct ml_tval *const *outs, int64_t seq_limit)
{
	const struct ml_graph *b = c->body->graph(s);
	int k = b->n_outputs - n, rc = 0;
	int64_t len = -1;
	struct ml_tval *cur = ml_calloc((size_t)n + 1, sizeof *cur);
	struct ml_tval *sl = ml_calloc((size_t)m + 1, sizeof *sl);
	struct stack *scans = ml_calloc((size_t)k + 1, sizeof *scans);
	int *axes = ml_calloc((size_t)m + 1, sizeof *axes);
	if (cur == NULL || sl == NULL || scans == NULL || axes == NULL) {
		rc = ml_fail(c->err, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int j = 0; j < m; j++) {
		const struct ml_tval *v = ins[n + j];
		int64_t ax = c->opset < 9 ? 0 : attr_at(c->node, "scan_input_axes", j, 0);
		if (v == NULL || ml_norm_axis(c, ax, v->rank, &axes[j]) < 0) {
			rc = ml_opfail(c, ML_EINVAL, "bad scan input %d", j);
			goto out;
		}
		int64_t l = v->dims[axes[j]];
		if (len >= 0 && l != len) {
			rc = ml_opfail(c, ML_EINVAL, "scan inputs differ in length");
			goto out;
		}
		len = l;
	}
	if (seq_limit >= 0 && seq_limit < len)
		len = seq_limit;
	for (int j = 0; j < n; j++)
		if ((rc = copy_val(&cur[j], ins[j], c->err)) < 0)
			goto out;
	for (int64_t t = 0; t < len; t++) {
		for (int j = 0; j < n; j++)
			if ((rc = c->body->bind(s, j, &cur[j], c->err)) < 0)
				goto out;
		for (int j = 0; j < m; j++) {
			bool rev = (c->opset < 9 ? attr_at(c->node, "directions", j, 0) :
				    attr_at(c->node, "scan_input_directions", j, 0)) != 0;
			if ((rc = take(&sl[j], ins[n + j], axes[j], rev ? len - 1 - t : t, c->err)) < 0 ||
			    (rc = c->body->bind(s, n + j, &sl[j], c->err)) < 0)
				goto out;
		}
		if ((rc = c->body->run(s, c->err)) < 0)
			goto out;
		for (int j = 0; j < n; j++)
			if ((rc = copy_val(&cur[j], c->body->output(s, j), c->err)) < 0)
				goto out;
		for (int j = 0; j < k; j++)
			if ((rc = stack_push(&scans[j], c->body->output(s, n + j), c->err)) < 0)
				goto out;
	}
	for (int j = 0; j < n; j++) {
		ml_tval_clear(outs[j]);
		*outs[j] = cur[j];
		memset(&cur[j], 0, sizeof cur[j]);
	}
	for (int j = 0; j < k; j++) {
		int ax = c->opset < 9 ? 0 : (int)attr_at(c->node, "scan_output_axes", j, 0);
		bool rev = c->opset >= 9 && attr_at(c->node, "scan_output_directions", j, 0) != 0;
		if ((rc = stack_out(c, outs[n + j], &scans[j], ax, rev,
				    b->tensors[b->outputs[n + j]])) < 0)
			goto out;
	}
out:
	for (int j = 0; cur != NULL && j < n; j++)
		ml_tval_clear(&cur[j]);
	for (int j = 0; sl != NULL && j < m; j++)
		ml_tval_clear(&sl[j]);
	for (int j = 0; scans != NULL && j < k; j++)
		stack_free(&scans[j]);
	ml_free(cur);
	ml_free(sl);
	ml_free(scans);
	ml_free(axes);
	return rc;
}

static int
run_scan(struct ml_opctx *c)
{
	if (c->sess == NULL || c->body == NULL)
		return ml_opfail(c, ML_ENOTSUP, "needs a session");
	struct ml_graph *b = body(c, "body");
	int m = (int)ml_attr_int(c->node, "num_scan_inputs", 1);
	void *s = NULL;
	int rc;
	if ((rc = c->body->open(c->sess, b, &s, c->err)) < 0)
		return rc;
	if (c->opset >= 9) {
		rc = scan_one(c, s, c->n_in - m, m, c->in, c->out, -1);
		c->body->close(s);
		return rc;
	}
	/* opset 8: a leading batch axis on everything, optional sequence_lens first */
	int n = c->n_in - 1 - m, k = c->n_out - n;
	int64_t batch = -1;
	for (int j = 1; j < c->n_in; j++)
		if (c->in[j] != NULL && c->in[j]->rank > 0)
			batch = batch < 0 ? c->in[j]->dims[0] : batch;
	struct ml_tval **ins = ml_calloc((size_t)c->n_in + 1, sizeof *ins);
	struct ml_tval *iv = ml_calloc((size_t)c->n_in + 1, sizeof *iv);
	struct ml_tval **outs = ml_calloc((size_t)c->n_out + 1, sizeof *outs);
	struct stack *per = ml_calloc((size_t)c->n_out + 1, sizeof *per);
	struct ml_tval *ov = ml_calloc((size_t)c->n_out + 1, sizeof *ov);
	if (ins == NULL || iv == NULL || outs == NULL || per == NULL || ov == NULL) {
		rc = ml_fail(c->err, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int64_t bi = 0; bi < batch; bi++) {
		for (int j = 0; j < n + m; j++) {
			if ((rc = take(&iv[j], c->in[1 + j], 0, bi, c->err)) < 0)
				goto out;
			ins[j] = &iv[j];
		}
		for (int j = 0; j < c->n_out; j++)
			outs[j] = &ov[j];
		int64_t lim = c->in[0] != NULL ? ml_get_i64(c->in[0]->data, c->in[0]->dtype, bi) : -1;
		if ((rc = scan_one(c, s, n, m, ins, outs, lim)) < 0)
			goto out;
		for (int j = 0; j < c->n_out; j++)
			if ((rc = stack_push(&per[j], &ov[j], c->err)) < 0)
				goto out;
	}
	for (int j = 0; j < n + k; j++)
		if ((rc = stack_out(c, c->out[j], &per[j], 0, false, NULL)) < 0)
			goto out;
out:
	for (int j = 0; iv != NULL && j < c->n_in; j++)
		ml_tval_clear(&iv[j]);
	for (int j = 0; ov != NULL && j < c->n_out; j++)
		ml_tval_clear(&ov[j]);
	for (int j = 0; per != NULL && j < c->n_out; j++)
		stack_free(&per[j]);
	ml_free(ins);
	ml_free(iv);
	ml_free(outs);
	ml_free(per);
	ml_free(ov);
	c->body->close(s);
	return rc;
}

const struct ml_cpu_kernel ml_cpu_ctrl[] = {
	{ ML_OP_IF, run_if },
	{ ML_OP_LOOP, run_loop },
	{ ML_OP_SCAN, run_scan },
	{ .op = ML_OP_NONE },
};
