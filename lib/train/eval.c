/*
 * eval.c: evaluation as a graph (ml_train_eval_*): the model with the
 * step's loss per sample and the accuracy as ops, summed under a mask,
 * run batch by batch through an ordinary session on the run's device; and
 * the accuracy nodes (ml_train_hits) that the step graph adds as well.
 * See lib/ml_train.h for the contracts.
 */
#include <stdio.h>

#include "ml_impl.h"
#include "train/train.h"

struct ml_train_eval {
	struct ml_graph *g;
	struct ml_session *s;	/* NULL until the first batch after a reset */
	struct ml_train_eval_opts o;
	char *device;		/* o.device's copy */
	int nx;			/* the model's inputs: g->inputs[0..nx-1] */
	int64_t fixed;		/* the model's batch when fixed, else 0 */
	int64_t b;		/* the session's batch */
	enum ml_dtype mdt;	/* the mask's dtype (the output's) */
	struct ml_tval *pad;	/* nx + 1: a padded copy of each input and the label */
	struct ml_tval mask;
	double loss_sum, hits;
	int64_t n;
};

/* struct eb: the builder of the nodes: each is named PREFIX/OP_k. */
struct eb {
	struct ml_graph *g;
	struct ml_err *e;
	const char *prefix;
	int seq;
	int last;		/* the node added last */
};

/*
 * op: append op (ONNX domain) over the tensors in[] (a negative one is an
 * earlier failure, returned); its one output is called name, or
 * PREFIX/OP_k:0 when name is NULL. Returns the output's tensor index.
 */
static int
op(struct eb *b, const char *opname, int n_in, const int *in, const char *name)
{
	const char *inn[4];
	char nm[160], on[176];
	for (int i = 0; i < n_in; i++) {
		if (in[i] < 0)
			return in[i];
		inn[i] = b->g->tensors[in[i]]->name;
	}
	snprintf(nm, sizeof nm, "%s/%s_%d", b->prefix, opname, b->seq++);
	snprintf(on, sizeof on, "%s:0", nm);
	const char *o = name != NULL ? name : on;
	int ni = ml_graph_add_node(b->g, opname, "", nm, n_in, inn, 1, &o, b->e);
	if (ni < 0)
		return ni;
	b->last = ni;
	return b->g->nodes[ni].out[0];
}

/* op_int: op with one integer attribute (key NULL: none). */
static int
op_int(struct eb *b, const char *opname, int n_in, const int *in, const char *key, int64_t v)
{
	int t = op(b, opname, n_in, in, NULL);
	if (t >= 0 && key != NULL && ml_node_set_int(b->g, b->last, key, v) < 0)
		return ml_fail(b->e, ML_ENOMEM, "out of memory");
	return t;
}

/* argmax: ArgMax of t over dim 1, which goes. */
static int
argmax(struct eb *b, int t)
{
	int a = op_int(b, "ArgMax", 1, &t, "axis", 1);
	if (a >= 0 && ml_node_set_int(b->g, b->last, "keepdims", 0) < 0)
		return ml_fail(b->e, ML_ENOMEM, "out of memory");
	return a;
}

/* per_sample: the mean of t (rank r, samples first) over each sample: [N]. */
static int
per_sample(struct eb *b, int t, int r)
{
	if (t < 0 || r <= 1)
		return t;
	int64_t ax[ML_MAX_RANK], n = r - 1;
	for (int d = 1; d < r; d++)
		ax[d - 1] = d;
	char nm[160];
	snprintf(nm, sizeof nm, "%s/axes_%d", b->prefix, b->seq++);
	int a = ml_graph_tensor(b->g, nm);
	if (a < 0)
		return ml_fail(b->e, ML_ENOMEM, "out of memory");
	ML_TRY(ml_graph_set_data(b->g, a, ML_TK_CONST, ML_I64, 1, &n, ax, sizeof(int64_t) *
				 (size_t)n, b->e));
	int in[2] = { t, a };
	return op_int(b, "ReduceMean", 2, in, "keepdims", 0);
}

/* masked_sum: sum over the batch of the per-sample t, times mask when mask >= 0. */
static int
masked_sum(struct eb *b, int t, int mask, const char *name)
{
	if (mask >= 0) {
		int in[2] = { t, mask };
		t = op(b, "Mul", 2, in, NULL);
	}
	if (t < 0)
		return t;
	int s = op(b, "ReduceSum", 1, &t, name);
	if (s >= 0 && ml_node_set_int(b->g, b->last, "keepdims", 0) < 0)
		return ml_fail(b->e, ML_ENOMEM, "out of memory");
	return s;
}

int
ml_train_hits(struct ml_graph *g, int loss, int out, int label, int mask, const char *prefix,
	      const char *name, struct ml_err *e)
{
	struct eb b = { .g = g, .e = e, .prefix = prefix };
	const struct ml_tensor *ot = g->tensors[out];
	int r = ot->rank, am, want, hr = 1;
	enum ml_dtype dt = ot->dtype;
	if (r < 2)
		return ml_fail(e, ML_EINVAL, "accuracy needs an output [N, classes, ...]; '%s' has "
			       "rank %d", ot->name, r);
	if (loss == ML_LOSS_SCE || loss == ML_LOSS_NLL) {
		am = argmax(&b, out);
		want = label;
		hr = r - 1;
	} else {
		/* the whole sample, as one row */
		int fo = op_int(&b, "Flatten", 1, &out, "axis", 1);
		int fl = op_int(&b, "Flatten", 1, &label, "axis", 1);
		am = argmax(&b, fo);
		want = argmax(&b, fl);
	}
	int in[2] = { am, want };
	int eq = op(&b, "Equal", 2, in, NULL);
	int h = op_int(&b, "Cast", 1, &eq, "to", dt);
	return masked_sum(&b, per_sample(&b, h, hr), mask, name);
}

/*
 * loss_sum: the sum over the batch of each sample's loss (the mean over its
 * values), times its mask: the step's loss per sample.
 */
static int
loss_sum(struct eb *b, int loss, int out, int label, int mask)
{
	int r = b->g->tensors[out]->rank, l, lr = r;
	int in[2] = { out, label };
	switch (loss) {
	case ML_LOSS_SCE:
	case ML_LOSS_NLL:
		l = op(b, loss == ML_LOSS_SCE ? "SoftmaxCrossEntropyLoss" :
		       "NegativeLogLikelihoodLoss", 2, in, NULL);
		if (l >= 0 && ml_node_set_string(b->g, b->last, "reduction", "none") < 0)
			return ml_fail(b->e, ML_ENOMEM, "out of memory");
		lr = r - 1;
		break;
	case ML_LOSS_MSE: {
		int d = op(b, "Sub", 2, in, NULL);
		int sq[2] = { d, d };
		l = op(b, "Mul", 2, sq, NULL);
		break;
	}
	case ML_LOSS_BCE_LOGITS: {
		/* max(x, 0) - x t + log(1 + exp(-|x|)), as BCEWithLogitsLoss */
		int a = op(b, "Relu", 1, &out, NULL);
		int xt = op(b, "Mul", 2, in, NULL);
		int s[2] = { a, xt };
		int d = op(b, "Sub", 2, s, NULL);
		int ab = op(b, "Abs", 1, &out, NULL);
		int ng = op(b, "Neg", 1, &ab, NULL);
		int sp = op(b, "Softplus", 1, &ng, NULL);
		int su[2] = { d, sp };
		l = op(b, "Add", 2, su, NULL);
		break;
	}
	default:
		return ml_fail(b->e, ML_EINVAL, "unknown loss %d", loss);
	}
	return masked_sum(b, per_sample(b, l, lr), mask, "eval.loss_sum");
}

void
ml_train_eval_opts_init(struct ml_train_eval_opts *o)
{
	memset(o, 0, sizeof *o);
	o->loss = ML_LOSS_SCE;
	o->batch = 1000;
}

/* build: the evaluation graph of model in ev->g. */
static int
build(struct ml_train_eval *ev, const struct ml_graph *model, struct ml_err *e)
{
	const struct ml_train_eval_opts *o = &ev->o;
	struct ml_graph *g;
	ML_TRY(ml_graph_clone(&ev->g, model, e));
	g = ev->g;
	ML_TRY(ml_train_unshare(g, e));
	ML_TRY(ml_graph_toposort(g, e));
	ML_TRY(ml_graph_infer(g, e));
	static const char *const ours[] = { "label", "eval.mask", "eval.loss_sum", "eval.hits" };
	for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
		if (ml_graph_find(g, ours[i]) >= 0)
			return ml_fail(e, ML_EINVAL, "the model has a tensor called %s already",
				       ours[i]);
	ev->nx = g->n_inputs;
	for (int i = 0; i < ev->nx; i++) {
		const struct ml_tensor *t = g->tensors[g->inputs[i]];
		if (t->rank < 1)
			return ml_fail(e, ML_ENOTSUP, "input '%s' has no batch dim", t->name);
		if (ev->fixed == 0 && t->dims[0] >= 0)
			ev->fixed = t->dims[0];
	}
	int out = g->outputs[o->output];
	int lab = ml_train_label(g, o->loss, out, e);
	if (lab < 0)
		return lab;
	/* the mask: the output's float type, [N] with the output's batch dim */
	const struct ml_tensor *ot = g->tensors[out];
	if (ev->fixed == 0 && ot->dims[0] >= 0)
		ev->fixed = ot->dims[0];
	int m = ml_graph_tensor(g, "eval.mask");
	if (m < 0)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	struct ml_tensor *mt = g->tensors[m];
	ot = g->tensors[out];
	mt->kind = ML_TK_INPUT;
	mt->dtype = ev->mdt = ot->dtype;
	mt->rank = 1;
	mt->dims[0] = ot->dims[0];
	mt->sym[0] = ot->sym[0];
	ML_TRY(ml_graph_add_input(g, m, e));
	struct eb b = { .g = g, .e = e, .prefix = "eval" };
	int ls = loss_sum(&b, o->loss, out, lab, m);
	if (ls < 0)
		return ls;
	g->n_outputs = 0;
	ML_TRY(ml_graph_add_output(g, ls, e));
	if (o->accuracy) {
		int h = ml_train_hits(g, o->loss, out, lab, m, "eval/accuracy", "eval.hits", e);
		if (h < 0)
			return h;
		ML_TRY(ml_graph_add_output(g, h, e));
	}
	ML_TRY(ml_graph_toposort(g, e));
	ML_TRY(ml_graph_validate(g, e));
	return ml_graph_infer(g, e);
}

int
ml_train_eval_new(struct ml_train_eval **out, const struct ml_graph *model,
		  const struct ml_train_eval_opts *o, struct ml_err *e)
{
	struct ml_train_eval_opts def;
	int rc;
	*out = NULL;
	if (o == NULL) {
		ml_train_eval_opts_init(&def);
		o = &def;
	}
	if (o->loss < 0 || o->loss > ML_LOSS_BCE_LOGITS)
		return ml_fail(e, ML_EINVAL, "unknown loss %d", o->loss);
	if (o->output < 0 || o->output >= model->n_outputs)
		return ml_fail(e, ML_EINVAL, "the model has no output %d", o->output);
	if (o->batch < 1)
		return ml_fail(e, ML_EINVAL, "the evaluation's batch must be 1 or more, not %lld",
			       (long long)o->batch);
	struct ml_train_eval *ev = ml_calloc(1, sizeof *ev);
	if (ev == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	ev->o = *o;
	if (o->device != NULL) {
		size_t n = strlen(o->device) + 1;
		if ((ev->device = ml_malloc(n)) == NULL) {
			ml_free(ev);
			return ml_fail(e, ML_ENOMEM, "out of memory");
		}
		memcpy(ev->device, o->device, n);
	}
	ev->o.device = ev->device;
	if ((rc = build(ev, model, e)) < 0) {
		ml_train_eval_free(ev);
		return rc;
	}
	if ((ev->pad = ml_calloc((size_t)ev->nx + 1, sizeof *ev->pad)) == NULL) {
		ml_train_eval_free(ev);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	*out = ev;
	return 0;
}

void
ml_train_eval_free(struct ml_train_eval *ev)
{
	if (ev == NULL)
		return;
	ml_session_free(ev->s);
	ml_graph_free(ev->g);
	for (int i = 0; ev->pad != NULL && i <= ev->nx; i++)
		ml_tval_clear(&ev->pad[i]);
	ml_free(ev->pad);
	ml_tval_clear(&ev->mask);
	ml_free(ev->device);
	ml_free(ev);
}

/* take_weights: every stored tensor of g takes the data of from's stored tensor of its name. */
static int
take_weights(struct ml_graph *g, const struct ml_graph *from, struct ml_err *e)
{
	for (int t = 0; t < g->n_tensors; t++) {
		struct ml_tensor *m = g->tensors[t];
		if ((m->kind != ML_TK_CONST && m->kind != ML_TK_PARAM) || m->data == NULL)
			continue;
		int s = ml_graph_find(from, m->name);
		const struct ml_tensor *st = s >= 0 ? from->tensors[s] : NULL;
		if (st == NULL || (st->kind != ML_TK_CONST && st->kind != ML_TK_PARAM) ||
		    st->data == NULL || st->data == m->data)
			continue;
		if (st->dtype != m->dtype || st->nbytes != m->nbytes)
			return ml_fail(e, ML_EINVAL, "tensor '%s' is %s of %zu bytes in the model "
				       "evaluated, %s of %zu where the weights come from", m->name,
				       ml_dtype_name(m->dtype), m->nbytes, ml_dtype_name(st->dtype),
				       st->nbytes);
		if (ml_graph_owns_data(g, m)) {
			memcpy(m->data, st->data, st->nbytes);
			continue;
		}
		int64_t dims[ML_MAX_RANK];
		memcpy(dims, m->dims, sizeof dims);
		ML_TRY(ml_graph_set_data(g, t, m->kind, m->dtype, m->rank, dims, st->data,
					 st->nbytes, e));
	}
	return 0;
}

int
ml_train_eval_reset(struct ml_train_eval *ev, const struct ml_graph *from, struct ml_err *e)
{
	ml_session_free(ev->s);
	ev->s = NULL;
	ev->b = 0;
	ev->loss_sum = ev->hits = 0;
	ev->n = 0;
	return from != NULL ? take_weights(ev->g, from, e) : 0;
}

/*
 * part: the rows [off, off + len) of v as a tval of ev->b rows: a view when
 * they fill it, else *pad, those rows then copies of row off.
 */
static int
part(struct ml_train_eval *ev, const struct ml_tval *v, int64_t off, int64_t len,
     struct ml_tval *pad, struct ml_tval *view, struct ml_err *e)
{
	int64_t rows = v->dims[0];
	size_t row = rows > 0 ? (size_t)(ml_tval_nbytes(v) / rows) : 0;
	const char *src = (const char *)v->data + (size_t)off * row;
	if (len == ev->b) {
		*view = *v;
		view->dims[0] = len;
		view->data = (void *)src;
		view->owned = false;
		return 0;
	}
	bool same = pad->data != NULL && pad->dtype == v->dtype && pad->rank == v->rank &&
		    pad->dims[0] == ev->b;
	for (int d = 1; same && d < v->rank; d++)
		same = pad->dims[d] == v->dims[d];
	if (!same) {
		int64_t dims[ML_MAX_RANK];
		memcpy(dims, v->dims, sizeof dims);
		dims[0] = ev->b;
		ml_tval_clear(pad);
		ML_TRY(ml_tval_alloc(pad, v->dtype, v->rank, dims, e));
	}
	char *dst = pad->data;
	memcpy(dst, src, (size_t)len * row);
	for (int64_t i = len; i < ev->b; i++)
		memcpy(dst + (size_t)i * row, src, row);
	*view = *pad;
	view->owned = false;
	return 0;
}

/* run_part: rows [off, off + len) of the batch through the session, into the sums. */
static int
run_part(struct ml_train_eval *ev, const struct ml_tval *x, const struct ml_tval *y, int64_t off,
	 int64_t len, struct ml_err *e)
{
	const struct ml_graph *g = ev->g;
	struct ml_tval v;
	for (int i = 0; i <= ev->nx; i++) {
		const struct ml_tval *src = i < ev->nx ? &x[i] : y;
		ML_TRY(part(ev, src, off, len, &ev->pad[i], &v, e));
		ML_TRY(ml_session_set_input(ev->s, g->tensors[g->inputs[i]]->name, &v, e));
	}
	for (int64_t i = 0; i < ev->b; i++)
		ml_set_f64(ev->mask.data, ev->mdt, i, i < len ? 1 : 0);
	ML_TRY(ml_session_set_input(ev->s, "eval.mask", &ev->mask, e));
	ML_TRY(ml_session_run(ev->s, e));
	const struct ml_tval *ls = ml_session_output(ev->s, 0);
	ev->loss_sum += ml_get_f64(ls->data, ls->dtype, 0);
	if (ev->o.accuracy) {
		const struct ml_tval *h = ml_session_output(ev->s, 1);
		ev->hits += ml_get_f64(h->data, h->dtype, 0);
	}
	ev->n += len;
	return 0;
}

int
ml_train_eval_batch(struct ml_train_eval *ev, const struct ml_tval *x, const struct ml_tval *y,
		    struct ml_err *e)
{
	int64_t n = y->rank >= 1 ? y->dims[0] : -1;
	for (int i = 0; i < ev->nx; i++)
		if (x[i].rank < 1 || x[i].dims[0] != n)
			return ml_fail(e, ML_EINVAL, "input '%s' has %lld samples, the labels %lld",
				       ev->g->tensors[ev->g->inputs[i]]->name,
				       (long long)(x[i].rank >= 1 ? x[i].dims[0] : -1),
				       (long long)n);
	if (n < 1)
		return ml_fail(e, ML_EINVAL, "a batch of no samples");
	if (ev->s == NULL) {
		ev->b = ev->fixed > 0 ? ev->fixed : ML_MIN(ev->o.batch, n);
		struct ml_session_opts so = { .device = ev->o.device };
		ml_tval_clear(&ev->mask);
		ML_TRY(ml_tval_alloc(&ev->mask, ev->mdt, 1, &ev->b, e));
		ML_TRY(ml_session_new(&ev->s, ev->g, &so, e));
	}
	for (int64_t off = 0; off < n; off += ev->b)
		ML_TRY(run_part(ev, x, y, off, ML_MIN(ev->b, n - off), e));
	return 0;
}

int64_t
ml_train_eval_result(const struct ml_train_eval *ev, double *loss, double *acc)
{
	double n = ev->n > 0 ? (double)ev->n : NAN;
	if (loss != NULL)
		*loss = ev->loss_sum / n;
	if (acc != NULL)
		*acc = ev->o.accuracy ? ev->hits / n : NAN;
	return ev->n;
}

int
ml_train_eval_run(struct ml_train_eval *ev, const struct ml_graph *from,
		  const struct ml_dataset *d, const struct ml_batch_spec *xs,
		  const struct ml_batch_spec *ys, double *loss, double *acc, struct ml_err *e)
{
	struct ml_loader *ld = NULL;
	struct ml_loader_opts lo = { .batch = ev->fixed > 0 ? ev->fixed : ev->o.batch,
				     .prefetch = true, .x = *xs, .y = *ys, .augment = ev->o.augment };
	const struct ml_tval *x, *y;
	int rc;
	if (ev->nx != 1)
		return ml_fail(e, ML_ENOTSUP, "the model has %d inputs; a dataset feeds one",
			       ev->nx);
	if (d->n < 1)
		return ml_fail(e, ML_EINVAL, "%s: no samples to evaluate", d->name);
	if ((rc = ml_train_eval_reset(ev, from, e)) < 0 ||
	    (rc = ml_loader_new(&ld, d, &lo, e)) < 0 || (rc = ml_loader_start(ld, 0, 0, e)) < 0)
		goto out;
	while ((rc = ml_loader_next(ld, &x, &y, e)) > 0)
		if ((rc = ml_train_eval_batch(ev, x, y, e)) < 0)
			goto out;
	if (rc == 0)
		ml_train_eval_result(ev, loss, acc);
out:
	ml_loader_free(ld);
	return rc;
}
