/*
 * test_eval.c: evaluation as a graph (ml_train_eval_*, lib/train/eval.c).
 * A one-layer model z = x W + b with weights set here is evaluated under
 * each loss (softmax cross-entropy, NLL, MSE, BCE with logits) on labels as
 * class indices and as one-hot rows, in batches that split and end ragged,
 * with a symbolic and a fixed batch, and with a spatial output [N, C, d];
 * the loss and the accuracy must equal what this file computes from the
 * same numbers by hand, in double. Also: new weights taken by name, the
 * step graph's train.correct, a dataset through ml_train_eval_run, the
 * OpenCL device against the CPU (when there is one), and bad input.
 * Prints TAP.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"

static int ntest, nfail;
static bool have_cl;

static void
ok(bool cond, const char *fmt, ...)
{
	va_list ap;
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - ", cond ? "" : "not ", ntest);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

#define NS 11		/* samples */
#define NF 3		/* features */
#define NC 4		/* outputs */

static float X[NS][NF], W[NF][NC], Bias[NC], T[NS][NC];
static int64_t K[NS], K2[NS][2];

static uint64_t rs = 0x9e3779b97f4a7c15ull;

static double
urand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (double)(rs >> 11) / 9007199254740992.0;
}

static void logits(int i, const float w[NF][NC], double *z);
static int argmax(const double *v, int n);

static void
make_data(void)
{
	for (int i = 0; i < NS; i++) {
		for (int j = 0; j < NF; j++)
			X[i][j] = (float)(urand() * 4 - 2);
		for (int j = 0; j < NC; j++)
			T[i][j] = (float)urand();
		K[i] = (int64_t)(urand() * NC) % NC;
		K2[i][0] = (int64_t)(urand() * 2) % 2;
		K2[i][1] = (int64_t)(urand() * 2) % 2;
	}
	for (int j = 0; j < NF; j++)
		for (int c = 0; c < NC; c++)
			W[j][c] = (float)(urand() * 2 - 1);
	for (int c = 0; c < NC; c++)
		Bias[c] = (float)(urand() - 0.5);
	/*
	 * two samples in three are labelled as the model guesses, among them
	 * the first of each run below, whose copies pad a short run: counted,
	 * the copies would show
	 */
	for (int i = 0; i < NS; i++) {
		double z[NC];
		logits(i, W, z);
		if (i % 3 != 2)
			K[i] = argmax(z, NC);
	}
}

/* logits: row i of z = x W + b, in double */
static void
logits(int i, const float w[NF][NC], double *z)
{
	for (int c = 0; c < NC; c++) {
		z[c] = Bias[c];
		for (int j = 0; j < NF; j++)
			z[c] += (double)X[i][j] * w[j][c];
	}
}

static int
argmax(const double *v, int n)
{
	int b = 0;
	for (int j = 1; j < n; j++)
		if (v[j] > v[b])
			b = j;
	return b;
}

/* lse_loss: -log softmax(v)[k] over n values */
static double
lse_loss(const double *v, int n, int64_t k)
{
	double m = v[argmax(v, n)], s = 0;
	for (int j = 0; j < n; j++)
		s += exp(v[j] - m);
	return m + log(s) - v[k];
}

enum { LAB_CLASS, LAB_ONEHOT, LAB_FLOAT };

/*
 * reference: the mean loss and accuracy over the NS samples, by hand:
 * labels as class indices (K), one-hot rows of K, or float targets (T).
 * spatial: the output is z viewed as [N, 2, 2] (classes 2, positions 2),
 * the labels K2.
 */
static void
reference(int loss, int lab, bool spatial, const float w[NF][NC], double *lm, double *am)
{
	double ls = 0, hits = 0;
	for (int i = 0; i < NS; i++) {
		double z[NC], t[NC];
		logits(i, w, z);
		if (spatial) {
			/* z[c * 2 + p]: class c at position p */
			for (int p = 0; p < 2; p++) {
				double v[2] = { z[p], z[2 + p] };
				int64_t k = K2[i][p];
				ls += (loss == ML_LOSS_SCE ? lse_loss(v, 2, k) : -v[k]) / 2;
				hits += (argmax(v, 2) == K2[i][p]) / 2.0;
			}
			continue;
		}
		for (int c = 0; c < NC; c++)
			t[c] = lab == LAB_FLOAT ? T[i][c] : lab == LAB_ONEHOT ? (c == K[i]) : 0;
		double s = 0;
		switch (loss) {
		case ML_LOSS_SCE: s = lse_loss(z, NC, K[i]); break;
		case ML_LOSS_NLL: s = -z[K[i]]; break;
		case ML_LOSS_MSE:
			for (int c = 0; c < NC; c++)
				s += (z[c] - t[c]) * (z[c] - t[c]) / NC;
			break;
		case ML_LOSS_BCE_LOGITS:
			for (int c = 0; c < NC; c++)
				s += (fmax(z[c], 0) - z[c] * t[c] + log1p(exp(-fabs(z[c])))) / NC;
			break;
		}
		ls += s;
		hits += lab == LAB_CLASS ? argmax(z, NC) == K[i] : argmax(z, NC) == argmax(t, NC);
	}
	*lm = ls / NS;
	*am = hits / NS;
}

enum { OUT_PLAIN, OUT_SPATIAL, OUT_RANK1 };

/*
 * model: x [batch (-1: N), 3] -> Gemm -> z [N, 4]; OUT_SPATIAL: Reshape to
 * [N, 2, 2]; OUT_RANK1: ReduceSum over dim 1 to [N].
 */
static struct ml_graph *
model(int64_t batch, int out)
{
	struct ml_graph *g = NULL;
	struct ml_err e = { 0 };
	int64_t wd[2] = { NF, NC }, bd[1] = { NC }, sd[1] = { 3 }, shape[3] = { -1, 2, 2 };
	int64_t one = 1;
	if (ml_graph_new(&g, &e) < 0 || ml_graph_set_opset(g, "", 17, &e) < 0)
		goto fail;
	int x = ml_graph_tensor(g, "x"), w = ml_graph_tensor(g, "W"), b = ml_graph_tensor(g, "b");
	int s = ml_graph_tensor(g, "shape"), ax = ml_graph_tensor(g, "axes");
	if (x < 0 || w < 0 || b < 0 || s < 0 || ax < 0)
		goto fail;
	struct ml_tensor *xt = g->tensors[x];
	xt->kind = ML_TK_INPUT;
	xt->dtype = ML_F32;
	xt->rank = 2;
	xt->dims[0] = batch;
	xt->sym[0] = batch < 0 ? ml_graph_strdup(g, "N") : NULL;
	xt->dims[1] = NF;
	if (ml_graph_add_input(g, x, &e) < 0 ||
	    ml_graph_set_data(g, w, ML_TK_CONST, ML_F32, 2, wd, W, sizeof W, &e) < 0 ||
	    ml_graph_set_data(g, b, ML_TK_CONST, ML_F32, 1, bd, Bias, sizeof Bias, &e) < 0 ||
	    ml_graph_set_data(g, s, ML_TK_CONST, ML_I64, 1, sd, shape, sizeof shape, &e) < 0 ||
	    ml_graph_set_data(g, ax, ML_TK_CONST, ML_I64, 1, &one, &one, sizeof one, &e) < 0)
		goto fail;
	const char *in[3] = { "x", "W", "b" }, *z = "z", *y = "y";
	const char *rin[2] = { "z", "shape" }, *sin[2] = { "z", "axes" };
	if (ml_graph_add_node(g, "Gemm", "", "dense", 3, in, 1, &z, &e) < 0 ||
	    (out == OUT_SPATIAL && ml_graph_add_node(g, "Reshape", "", "view", 2, rin, 1, &y,
						     &e) < 0) ||
	    (out == OUT_RANK1 && (ml_graph_add_node(g, "ReduceSum", "", "sum", 2, sin, 1, &y,
						    &e) < 0 ||
				  ml_node_set_int(g, g->n_nodes - 1, "keepdims", 0) < 0)))
		goto fail;
	if (ml_graph_add_output(g, ml_graph_find(g, out == OUT_PLAIN ? "z" : "y"), &e) < 0 ||
	    ml_graph_toposort(g, &e) < 0 || ml_graph_validate(g, &e) < 0 ||
	    ml_graph_infer(g, &e) < 0)
		goto fail;
	return g;
fail:
	printf("# model: %s\n", e.msg);
	ml_graph_free(g);
	return NULL;
}

/* rows: samples [from, from + n) of X as x, and their labels as lab has them, as tvals */
static void
rows(int from, int n, int lab, bool spatial, struct ml_tval *x, struct ml_tval *y)
{
	struct ml_err e = { 0 };
	int64_t xd[2] = { n, NF }, yd[2] = { n, spatial ? 2 : NC };
	ml_tval_alloc(x, ML_F32, 2, xd, &e);
	memcpy(x->data, X[from], sizeof X[0] * (size_t)n);
	if (spatial) {
		ml_tval_alloc(y, ML_I64, 2, yd, &e);
		memcpy(y->data, K2[from], sizeof K2[0] * (size_t)n);
	} else if (lab == LAB_CLASS) {
		ml_tval_alloc(y, ML_I64, 1, yd, &e);
		memcpy(y->data, &K[from], sizeof K[0] * (size_t)n);
	} else {
		ml_tval_alloc(y, ML_F32, 2, yd, &e);
		float *t = y->data;
		for (int i = from; i < from + n; i++)
			for (int c = 0; c < NC; c++)
				*t++ = lab == LAB_FLOAT ? T[i][c] : (float)(c == K[i]);
	}
}

static bool
close_to(double a, double b)
{
	return fabs(a - b) <= 1e-5 * fmax(1, fabs(b));
}

/*
 * evaluate: the evaluation of g (loss, lab, spatial, at most batch samples
 * a run, on dev) fed the NS samples in batches of the sizes in parts[]
 * (ending with 0); *lm, *am its result. False on an error.
 */
static bool
evaluate(struct ml_graph *g, int loss, int lab, bool spatial, int64_t batch, const char *dev,
	 const int *parts, const struct ml_graph *from, double *lm, double *am)
{
	struct ml_train_eval *ev = NULL;
	struct ml_train_eval_opts o;
	struct ml_err e = { 0 };
	bool good = true;
	ml_train_eval_opts_init(&o);
	o.loss = loss;
	o.accuracy = true;
	o.batch = batch;
	o.device = dev;
	if (ml_train_eval_new(&ev, g, &o, &e) < 0 || ml_train_eval_reset(ev, from, &e) < 0) {
		printf("# eval: %s\n", e.msg);
		ml_train_eval_free(ev);
		return false;
	}
	for (int at = 0, k = 0; parts[k] > 0 && good; at += parts[k++]) {
		struct ml_tval x = { 0 }, y = { 0 };
		rows(at, parts[k], lab, spatial, &x, &y);
		if (ml_train_eval_batch(ev, &x, &y, &e) < 0) {
			printf("# batch: %s\n", e.msg);
			good = false;
		}
		ml_tval_clear(&x);
		ml_tval_clear(&y);
	}
	good = good && ml_train_eval_result(ev, lm, am) == NS;
	ml_train_eval_free(ev);
	return good;
}

static const char *const loss_names[] = { "sce", "nll", "mse", "bce" };
static const char *const lab_names[] = { "class indices", "one-hot rows", "float targets" };

/* each loss and label form, batches that split and end ragged, symbolic and fixed batch */
static void
losses(void)
{
	static const int whole[] = { NS, 0 }, split[] = { 5, 6, 0 }, ones[] = { 4, 4, 3, 0 };
	struct ml_graph *dyn = model(-1, OUT_PLAIN), *fix = model(4, OUT_PLAIN);
	for (int loss = 0; loss < 4; loss++)
		for (int lab = 0; lab < 3; lab++) {
			bool cls = loss == ML_LOSS_SCE || loss == ML_LOSS_NLL;
			if (cls != (lab == LAB_CLASS))
				continue;
			double rl, ra, l, a;
			reference(loss, lab, false, W, &rl, &ra);
			bool g1 = evaluate(dyn, loss, lab, false, 4, NULL, whole, NULL, &l, &a);
			ok(g1 && close_to(l, rl) && close_to(a, ra),
			   "%s, %s: one batch of %d in runs of 4: loss %.9g acc %g "
			   "(by hand %.9g %g)",
			   loss_names[loss], lab_names[lab], NS, l, a, rl, ra);
			bool g2 = evaluate(dyn, loss, lab, false, 4, NULL, split, NULL, &l, &a);
			ok(g2 && close_to(l, rl) && close_to(a, ra),
			   "%s, %s: batches of 5 and 6, runs of 4: loss %.9g (by hand %.9g)",
			   loss_names[loss], lab_names[lab], l, rl);
			bool g3 = evaluate(dyn, loss, lab, false, 1000, NULL, ones, NULL, &l, &a);
			ok(g3 && close_to(l, rl) && close_to(a, ra),
			   "%s, %s: batches of 4, 4 and 3, at most 1000 a run: loss %.9g "
			   "(by hand %.9g)",
			   loss_names[loss], lab_names[lab], l, rl);
			bool g4 = evaluate(fix, loss, lab, false, 1000, NULL, split, NULL, &l, &a);
			ok(g4 && close_to(l, rl) && close_to(a, ra),
			   "%s, %s: a fixed batch of 4, the last run of 3 padded: loss %.9g acc %g "
			   "(by hand %.9g %g)", loss_names[loss], lab_names[lab], l, a, rl, ra);
		}
	ml_graph_free(dyn);
	ml_graph_free(fix);
}

/* an output [N, 2, 2]: each sample's loss and hits are its positions' mean */
static void
spatial(void)
{
	static const int split[] = { 5, 6, 0 };
	struct ml_graph *g = model(-1, OUT_SPATIAL);
	for (int loss = ML_LOSS_SCE; loss <= ML_LOSS_NLL; loss++) {
		double rl, ra, l, a;
		reference(loss, LAB_CLASS, true, W, &rl, &ra);
		bool good = evaluate(g, loss, LAB_CLASS, true, 4, NULL, split, NULL, &l, &a);
		ok(good && close_to(l, rl) && close_to(a, ra),
		   "%s over [N, 2, 2]: loss %.9g acc %g (by hand %.9g %g)", loss_names[loss], l, a,
		   rl, ra);
	}
	ml_graph_free(g);
}

/* new weights come by name from another graph; the model's stay as they are */
static void
weights(void)
{
	static const int whole[] = { NS, 0 };
	float w2[NF][NC];
	for (int j = 0; j < NF; j++)
		for (int c = 0; c < NC; c++)
			w2[j][c] = -W[j][c] * 0.5f + 0.1f * (float)c;
	struct ml_graph *g = model(-1, OUT_PLAIN), *h = model(-1, OUT_PLAIN);
	memcpy(h->tensors[ml_graph_find(h, "W")]->data, w2, sizeof w2);
	double rl, ra, l = NAN, a = NAN, rl0, ra0;
	reference(ML_LOSS_SCE, LAB_CLASS, false, w2, &rl, &ra);
	reference(ML_LOSS_SCE, LAB_CLASS, false, W, &rl0, &ra0);
	bool good = evaluate(g, ML_LOSS_SCE, LAB_CLASS, false, 4, NULL, whole, h, &l, &a);
	ok(good && close_to(l, rl) && close_to(a, ra) && !close_to(rl, rl0),
	   "weights taken from another graph by name: loss %.9g (by hand %.9g; %.9g before)", l,
	   rl, rl0);
	good = evaluate(g, ML_LOSS_SCE, LAB_CLASS, false, 4, NULL, whole, NULL, &l, &a);
	ok(good && close_to(l, rl0), "the model evaluated keeps its own: loss %.9g", l);
	/* a tensor of that name but another size */
	struct ml_graph *bad = NULL;
	struct ml_err e = { 0 };
	int64_t d1 = 5;
	float five[5] = { 0 };
	struct ml_train_eval *ev = NULL;
	int rc = ml_graph_new(&bad, &e);
	int t = rc < 0 ? -1 : ml_graph_tensor(bad, "W");
	if (t >= 0)
		rc = ml_graph_set_data(bad, t, ML_TK_CONST, ML_F32, 1, &d1, five, sizeof five, &e);
	if (rc >= 0)
		rc = ml_train_eval_new(&ev, g, NULL, &e);
	if (rc >= 0)
		rc = ml_train_eval_reset(ev, bad, &e);
	ok(rc == ML_EINVAL && strstr(e.msg, "'W'") != NULL, "a tensor 'W' of another size: %s",
	   e.msg);
	ml_train_eval_free(ev);
	ml_graph_free(bad);
	ml_graph_free(g);
	ml_graph_free(h);
}

/* the step graph's train.correct counts as the evaluation does */
static void
step_hits(void)
{
	struct ml_graph *g = model(-1, OUT_PLAIN), *step = NULL;
	struct ml_session *s = NULL;
	struct ml_train_opts o;
	struct ml_err e = { 0 };
	struct ml_tval x = { 0 }, y = { 0 }, lr = { 0 };
	double rl, ra;
	ml_train_opts_init(&o);
	o.accuracy = true;
	reference(ML_LOSS_SCE, LAB_CLASS, false, W, &rl, &ra);
	rows(0, NS, LAB_CLASS, false, &x, &y);
	ml_tval_alloc(&lr, ML_F32, 0, NULL, &e);
	int rc = ml_train_step_graph(&step, g, &o, &e);
	if (rc >= 0)
		rc = ml_session_new(&s, step, NULL, &e);
	if (rc >= 0 && (rc = ml_session_set_input(s, "x", &x, &e)) >= 0 &&
	    (rc = ml_session_set_input(s, "label", &y, &e)) >= 0 &&
	    (rc = ml_session_set_input(s, "lr", &lr, &e)) >= 0)
		rc = ml_session_run(s, &e);
	double hits = -1, loss = -1;
	if (rc >= 0 && step->n_outputs == 3) {
		const struct ml_tval *h = ml_session_output(s, 2), *l = ml_session_output(s, 0);
		hits = ml_get_f64(h->data, h->dtype, 0);
		loss = ml_get_f64(l->data, l->dtype, 0);
	}
	ok(rc >= 0 && strcmp(step->tensors[step->outputs[2]]->name, "train.correct") == 0 &&
	   hits == ra * NS && close_to(loss, rl),
	   "the step's train.correct is %g of %d (by hand %g), its loss %.9g (%.9g): %s", hits,
	   NS, ra * NS, loss, rl, rc < 0 ? e.msg : "");
	ml_session_free(s);
	ml_graph_free(step);
	ml_graph_free(g);
	ml_tval_clear(&x);
	ml_tval_clear(&y);
	ml_tval_clear(&lr);
}

/* a dataset through ml_train_eval_run: class labels become one-hot rows for MSE */
static void
dataset(void)
{
	struct ml_graph *g = model(4, OUT_PLAIN);
	struct ml_dataset *d = NULL;
	struct ml_err e = { 0 };
	struct ml_tval x = { 0 }, y = { 0 };
	int64_t yd[1] = { NS };
	rows(0, NS, LAB_CLASS, false, &x, &y);
	/* labels as a dataset has them: one int64 per sample */
	y.rank = 1;
	y.dims[0] = yd[0];
	int rc = ml_dataset_from_arrays(&d, &x, &y, "mem", &e);
	for (int loss = ML_LOSS_SCE; rc >= 0 && loss <= ML_LOSS_MSE; loss += 2) {
		struct ml_train_eval *ev = NULL;
		struct ml_train_eval_opts o;
		struct ml_batch_spec xs = { .dtype = ML_F32, .rank = 1, .dims = { NF } };
		struct ml_batch_spec ys = { .dtype = loss == ML_LOSS_MSE ? ML_F32 : ML_I64,
					    .rank = loss == ML_LOSS_MSE ? 1 : 0, .dims = { NC } };
		double rl, ra, l = NAN, a = NAN;
		ml_train_eval_opts_init(&o);
		o.loss = loss;
		o.accuracy = true;
		reference(loss, loss == ML_LOSS_MSE ? LAB_ONEHOT : LAB_CLASS, false, W, &rl, &ra);
		int r2 = ml_dataset_check(d, &xs, &ys, NC, &e);
		if (r2 >= 0)
			r2 = ml_train_eval_new(&ev, g, &o, &e);
		if (r2 >= 0)
			r2 = ml_train_eval_run(ev, NULL, d, &xs, &ys, &l, &a, &e);
		ok(r2 >= 0 && close_to(l, rl) && close_to(a, ra),
		   "ml_train_eval_run, %s, a fixed batch of 4 over %d samples: loss %.9g acc %g "
		   "(by hand %.9g %g) %s", loss_names[loss], NS, l, a, rl, ra, r2 < 0 ? e.msg : "");
		ml_train_eval_free(ev);
	}
	ok(rc >= 0, "the dataset: %s", rc < 0 ? e.msg : "made");
	ml_dataset_free(d);
	ml_tval_clear(&x);
	ml_tval_clear(&y);
	ml_graph_free(g);
}

/* on OpenCL the same figures as on the CPU */
static void
opencl(void)
{
	static const int split[] = { 5, 6, 0 };
	if (!have_cl) {
		ntest++;
		printf("ok %d # skip no OpenCL device\n", ntest);
		return;
	}
	struct ml_graph *g = model(-1, OUT_PLAIN);
	for (int loss = 0; loss < 4; loss++) {
		int lab = loss == ML_LOSS_SCE || loss == ML_LOSS_NLL ? LAB_CLASS : LAB_ONEHOT;
		double rl, ra, l = NAN, a = NAN;
		reference(loss, lab, false, W, &rl, &ra);
		bool good = evaluate(g, loss, lab, false, 4, "cl", split, NULL, &l, &a);
		ok(good && close_to(l, rl) && close_to(a, ra),
		   "%s on cl: loss %.9g acc %g (by hand %.9g %g)", loss_names[loss], l, a, rl, ra);
	}
	ml_graph_free(g);
}

/* bad options and input fail with a code and a message */
static void
errors(void)
{
	struct ml_graph *g = model(-1, OUT_PLAIN), *r1 = model(-1, OUT_RANK1), *lb = NULL;
	struct ml_train_eval *ev = NULL;
	struct ml_train_eval_opts o;
	struct ml_err e = { 0 };
	ml_train_eval_opts_init(&o);
	o.loss = 9;
	ok(ml_train_eval_new(&ev, g, &o, &e) == ML_EINVAL && ev == NULL, "an unknown loss: %s",
	   e.msg);
	ml_train_eval_opts_init(&o);
	o.batch = 0;
	ok(ml_train_eval_new(&ev, g, &o, &e) == ML_EINVAL, "a batch of 0: %s", e.msg);
	ml_train_eval_opts_init(&o);
	o.output = 1;
	ok(ml_train_eval_new(&ev, g, &o, &e) == ML_EINVAL, "an output the model lacks: %s", e.msg);
	/* an output [N]: no class dim for SCE, no accuracy for MSE */
	ml_train_eval_opts_init(&o);
	ok(ml_train_eval_new(&ev, r1, &o, &e) == ML_EINVAL && strstr(e.msg, "classes") != NULL,
	   "SCE of an output [N]: %s", e.msg);
	o.loss = ML_LOSS_MSE;
	o.accuracy = true;
	ok(ml_train_eval_new(&ev, r1, &o, &e) == ML_EINVAL && strstr(e.msg, "accuracy") != NULL,
	   "accuracy of an output [N]: %s", e.msg);
	o.accuracy = false;
	ok(ml_train_eval_new(&ev, r1, &o, &e) == 0, "MSE of an output [N] without accuracy");
	ml_train_eval_free(ev);
	ev = NULL;
	/* a model with a tensor called label */
	int64_t one = 1;
	int rc = ml_graph_clone(&lb, g, &e), t = rc < 0 ? -1 : ml_graph_tensor(lb, "label");
	if (t >= 0)
		rc = ml_graph_set_data(lb, t, ML_TK_CONST, ML_I64, 1, &one, &one, sizeof one, &e);
	ml_train_eval_opts_init(&o);
	ok(t >= 0 && rc >= 0 && ml_train_eval_new(&ev, lb, &o, &e) == ML_EINVAL &&
	   strstr(e.msg, "label") != NULL, "a model with a tensor called label: %s", e.msg);
	/* samples that differ between x and the labels; a batch of none */
	struct ml_tval x = { 0 }, y = { 0 };
	rows(0, 4, LAB_CLASS, false, &x, &y);
	y.dims[0] = 3;
	rc = ml_train_eval_new(&ev, g, NULL, &e);
	ok(rc == 0 && ml_train_eval_batch(ev, &x, &y, &e) == ML_EINVAL,
	   "x of 4 samples, labels of 3: %s", e.msg);
	y.dims[0] = 0;
	x.dims[0] = 0;
	ok(ev != NULL && ml_train_eval_batch(ev, &x, &y, &e) == ML_EINVAL, "no samples: %s", e.msg);
	double l = 0, a = 0;
	ok(ev != NULL && ml_train_eval_result(ev, &l, &a) == 0 && isnan(l) && isnan(a),
	   "nothing evaluated: NaN");
	ml_train_eval_free(ev);
	ml_train_eval_free(NULL);
	x.dims[0] = y.dims[0] = 4;
	ml_tval_clear(&x);
	ml_tval_clear(&y);
	ml_graph_free(g);
	ml_graph_free(r1);
	ml_graph_free(lb);
}

int
main(void)
{
	struct ml_device_info *v;
	struct ml_err e = { 0 };
	int n = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (ml_devices(&v, &n, &e) == 0) {
		have_cl = n > 1;
		ml_free(v);
	}
	make_data();
	losses();
	spatial();
	weights();
	step_hits();
	dataset();
	opencl();
	errors();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
