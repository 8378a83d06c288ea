/*
 * test_train.c: training-step graphs (ml_train_step_graph, ml_train_export):
 * a tiny MLP and a tiny CNN (conv, batchnorm, maxpool, relu, dense) reach a
 * low loss on synthetic separable data; SGD momentum and Adam match updates
 * computed here by hand; a step graph round-trips through the .mlg writer
 * and reader; an exported model runs in eval mode and resumes exactly;
 * side-effect nodes stay last in toposort; the CPU's fused step
 * (ml_train_fuse) trains as the plain one and its kernels compute what
 * they stand for; bad options fail cleanly; the learning-rate schedules
 * (ml_lr_at) give the rates worked out by hand and mltrain's former ones;
 * a checkpoint's training state parses (ml_train_config_parse); gradient
 * accumulation over k micro-batches trains as one batch k times as big; a run's
 * state (ml_train_state_*) survives the file forms, is read from older
 * checkpoints' JSON, and ml_train_strip leaves a model's own parameters.
 * Prints TAP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"
#include "cpu/nn.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static uint64_t rs = 0x243f6a8885a308d3ull;

static double
urand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (double)(rs >> 11) / 9007199254740992.0;
}

static double
nrand(void)
{
	double u = urand() + 1e-12, v = urand();
	return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

static struct ml_graph *
from_text(const char *text)
{
	struct ml_graph *g = NULL;
	struct ml_err e = { 0 };
	if (ml_text_decode(&g, text, strlen(text), "test.mlt", &e) < 0 ||
	    ml_graph_toposort(g, &e) < 0 || ml_graph_validate(g, &e) < 0 ||
	    ml_graph_infer(g, &e) < 0) {
		printf("# text: %s\n", e.msg);
		ml_graph_free(g);
		return NULL;
	}
	return g;
}

/* A batch: x [n, ...] f32 and labels [n] i64. */
struct batch {
	struct ml_tval x, y, lr;
};

static void
batch_free(struct batch *b)
{
	ml_tval_clear(&b->x);
	ml_tval_clear(&b->y);
	ml_tval_clear(&b->lr);
}

static void
set_lr(struct batch *b, float lr)
{
	struct ml_err e = { 0 };
	if (b->lr.data == NULL)
		ml_tval_alloc(&b->lr, ML_F32, 0, NULL, &e);
	*(float *)b->lr.data = lr;
}

/* blobs: n points of 4 features in 3 classes around separated means */
static void
blobs(struct batch *b, int n)
{
	struct ml_err e = { 0 };
	int64_t xd[2] = { n, 4 }, yd[1] = { n };
	ml_tval_clear(&b->x);
	ml_tval_clear(&b->y);
	ml_tval_alloc(&b->x, ML_F32, 2, xd, &e);
	ml_tval_alloc(&b->y, ML_I64, 1, yd, &e);
	static const float mu[3][4] = { { 2, 0, 0, 1 }, { -2, 1, 0, -1 }, { 0, -2, 2, 0 } };
	for (int i = 0; i < n; i++) {
		int k = (int)(urand() * 3) % 3;
		((int64_t *)b->y.data)[i] = k;
		for (int j = 0; j < 4; j++)
			((float *)b->x.data)[i * 4 + j] = mu[k][j] + 0.5f * (float)nrand();
	}
}

/* bars: 8x8 images of a vertical (class 0) or horizontal (class 1) bar plus noise */
static void
bars(struct batch *b, int n)
{
	struct ml_err e = { 0 };
	int64_t xd[4] = { n, 1, 8, 8 }, yd[1] = { n };
	ml_tval_clear(&b->x);
	ml_tval_clear(&b->y);
	ml_tval_alloc(&b->x, ML_F32, 4, xd, &e);
	ml_tval_alloc(&b->y, ML_I64, 1, yd, &e);
	for (int i = 0; i < n; i++) {
		int k = urand() < 0.5 ? 0 : 1, pos = 1 + (int)(urand() * 6) % 6;
		((int64_t *)b->y.data)[i] = k;
		float *p = (float *)b->x.data + i * 64;
		for (int r = 0; r < 8; r++)
			for (int c = 0; c < 8; c++) {
				float v = 0.2f * (float)nrand();
				if ((k == 0 && c == pos) || (k == 1 && r == pos))
					v += 1;
				p[r * 8 + c] = v;
			}
	}
}

static int
step(struct ml_session *s, struct batch *b, double *loss, struct ml_err *e)
{
	if (ml_session_set_input(s, "x", &b->x, e) < 0 ||
	    ml_session_set_input(s, "label", &b->y, e) < 0 ||
	    ml_session_set_input(s, "lr", &b->lr, e) < 0 || ml_session_run(s, e) < 0)
		return -1;
	const struct ml_tval *l = ml_session_output(s, 0);
	*loss = ml_get_f64(l->data, l->dtype, 0);
	return 0;
}

/* accuracy: the share of rows of the logits whose argmax is the label */
static double
accuracy(const struct ml_tval *logits, const struct ml_tval *lab)
{
	int64_t n = logits->dims[0], c = logits->dims[1], hit = 0;
	for (int64_t i = 0; i < n; i++) {
		const float *r = (const float *)logits->data + i * c;
		int64_t best = 0;
		for (int64_t k = 1; k < c; k++)
			if (r[k] > r[best])
				best = k;
		hit += best == ((const int64_t *)lab->data)[i];
	}
	return (double)hit / (double)n;
}

static const char *mlp_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 1>\n"
	"mlp (float[N,4] x) => (float[N,3] y)\n"
	"{\n    dense(units=16, act=relu)\n    dense(units=3)\n}\n";

static const char *cnn_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 2>\n"
	"cnn (float[N,1,8,8] x) => (float[N,2] y)\n"
	"{\n    conv(filters=4, kernel=3, pad=1)\n    norm(batch)\n    act(relu)\n"
	"    pool(max, size=2, stride=2)\n    flatten\n    dense(units=2)\n}\n";

static const char *drop_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 3>\n"
	"mlp (float[N,4] x) => (float[N,3] y)\n"
	"{\n    dense(units=32, act=relu)\n    dropout(rate=0.2)\n    dense(units=3)\n}\n";

/* train: steps of batch n from gen; returns the mean loss of the last 20 and the last accuracy */
static int
train(struct ml_graph *model, const struct ml_train_opts *o, void (*gen)(struct batch *, int),
      int steps, int n, double *last_loss, double *acc, struct ml_graph **step_out)
{
	struct ml_err e = { 0 };
	struct ml_graph *sg = NULL;
	struct ml_session *s = NULL;
	struct batch b = { 0 };
	int rc = -1;
	double sum = 0;

	if (ml_train_step_graph(&sg, model, o, &e) < 0 || ml_session_new(&s, sg, NULL, &e) < 0) {
		printf("# train: %s\n", e.msg);
		goto out;
	}
	set_lr(&b, 0.05f);
	for (int i = 0; i < steps; i++) {
		double l;
		gen(&b, n);
		if (step(s, &b, &l, &e) < 0) {
			printf("# step %d: %s\n", i, e.msg);
			goto out;
		}
		if (i >= steps - 20)
			sum += l;
		if (i == 0)
			printf("# first loss %.4f\n", l);
	}
	*last_loss = sum / 20;
	*acc = accuracy(ml_session_output(s, 1), &b.y);
	printf("# last loss %.4f, accuracy %.3f\n", *last_loss, *acc);
	rc = 0;
out:
	batch_free(&b);
	ml_session_free(s);
	if (step_out != NULL && rc == 0)
		*step_out = sg;
	else
		ml_graph_free(sg);
	return rc;
}

static bool
phases_ok(const struct ml_graph *g)
{
	static const char *const ph[] = { "forward/", "loss/", "backward/", "optimizer/" };
	for (int i = 0; i < g->n_nodes; i++) {
		bool k = false;
		for (int p = 0; p < 4; p++)
			k |= strncmp(g->nodes[i].name, ph[p], strlen(ph[p])) == 0;
		if (!k) {
			printf("# node '%s' has no phase prefix\n", g->nodes[i].name);
			return false;
		}
	}
	return true;
}

static bool
side_effects_last(const struct ml_graph *g)
{
	bool seen = false;
	for (int i = 0; i < g->n_nodes; i++) {
		if (g->nodes[i].n_out == 0)
			seen = true;
		else if (seen)
			return false;
	}
	return seen;
}

static const float *
tdata(const struct ml_graph *g, const char *name)
{
	int t = ml_graph_find(g, name);
	return t >= 0 ? (const float *)g->tensors[t]->data : NULL;
}

/*
 * A one-layer model y = x W^T + b with MSE, two SGD-momentum steps checked
 * against the update computed here: dY = 2 (y - t) / numel, dW = dY^T x,
 * db = sum dY, v = mu v + g, p -= lr v.
 */
static void
test_sgd_by_hand(bool adam)
{
	struct ml_err e = { 0 };
	struct ml_graph *m = NULL, *sg = NULL;
	struct ml_session *s = NULL;
	const int N = 3, I = 3, O = 2;
	float W[2][3] = { { 0.1f, -0.2f, 0.3f }, { 0.4f, 0.5f, -0.6f } }, B[2] = { 0.05f, -0.05f };
	float X[3][3] = { { 1, 2, 3 }, { -1, 0.5f, 2 }, { 0, -1, 1 } };
	float T[3][2] = { { 1, 0 }, { 0, 1 }, { 0.5f, 0.5f } };
	double w[2][3], bb[2], vw[2][3] = { { 0 } }, vb[2] = { 0 }, mw[2][3] = { { 0 } },
	       mb[2] = { 0 };
	double lr = 0.1, mu = 0.9, b1 = 0.9, b2 = 0.999, eps = 1e-8;
	bool good = true;

	ml_graph_new(&m, &e);
	ml_graph_set_opset(m, "", 17, &e);
	int x = ml_graph_tensor(m, "x");
	m->tensors[x]->kind = ML_TK_INPUT;
	m->tensors[x]->dtype = ML_F32;
	m->tensors[x]->rank = 2;
	m->tensors[x]->dims[0] = -1;
	m->tensors[x]->dims[1] = I;
	ml_graph_add_input(m, x, &e);
	int64_t wd[2] = { O, I }, bd[1] = { O };
	ml_graph_set_data(m, ml_graph_tensor(m, "W"), ML_TK_PARAM, ML_F32, 2, wd, W, sizeof W, &e);
	ml_graph_set_data(m, ml_graph_tensor(m, "b"), ML_TK_PARAM, ML_F32, 1, bd, B, sizeof B, &e);
	const char *in[3] = { "x", "W", "b" }, *out = "y";
	int ni = ml_graph_add_node(m, "Gemm", "", "fc", 3, in, 1, &out, &e);
	ml_node_set_int(m, ni, "transB", 1);
	ml_graph_add_output(m, ml_graph_find(m, "y"), &e);
	ml_graph_toposort(m, &e);
	ml_graph_infer(m, &e);

	struct ml_train_opts o;
	ml_train_opts_init(&o);
	o.loss = ML_LOSS_MSE;
	o.optimizer = adam ? ML_OPTIM_ADAM : ML_OPTIM_SGD;
	o.momentum = adam ? 0 : mu;
	if (ml_train_step_graph(&sg, m, &o, &e) < 0 || ml_session_new(&s, sg, NULL, &e) < 0) {
		printf("# %s\n", e.msg);
		good = false;
		goto out;
	}
	for (int i = 0; i < O; i++) {
		bb[i] = B[i];
		for (int j = 0; j < I; j++)
			w[i][j] = W[i][j];
	}
	struct batch bt = { 0 };
	int64_t xd[2] = { N, I }, td[2] = { N, O };
	ml_tval_alloc(&bt.x, ML_F32, 2, xd, &e);
	ml_tval_alloc(&bt.y, ML_F32, 2, td, &e);
	memcpy(bt.x.data, X, sizeof X);
	memcpy(bt.y.data, T, sizeof T);
	set_lr(&bt, (float)lr);
	for (int it = 1; it <= 2 && good; it++) {
		double loss, gw[2][3] = { { 0 } }, gb[2] = { 0 }, want = 0;
		for (int n = 0; n < N; n++)
			for (int i = 0; i < O; i++) {
				double y = bb[i];
				for (int j = 0; j < I; j++)
					y += w[i][j] * X[n][j];
				double d = y - T[n][i];
				want += d * d / (N * O);
				double g = 2 * d / (N * O);
				gb[i] += g;
				for (int j = 0; j < I; j++)
					gw[i][j] += g * X[n][j];
			}
		if (step(s, &bt, &loss, &e) < 0) {
			printf("# %s\n", e.msg);
			good = false;
			break;
		}
		good &= fabs(loss - want) < 1e-5;
		double c1 = 1 - pow(b1, it), c2 = 1 - pow(b2, it);
		for (int i = 0; i < O; i++) {
			for (int j = 0; j < I; j++) {
				if (adam) {
					mw[i][j] = b1 * mw[i][j] + (1 - b1) * gw[i][j];
					vw[i][j] = b2 * vw[i][j] + (1 - b2) * gw[i][j] * gw[i][j];
					w[i][j] -= lr * (mw[i][j] / c1) / (sqrt(vw[i][j] / c2) + eps);
				} else {
					vw[i][j] = mu * vw[i][j] + gw[i][j];
					w[i][j] -= lr * vw[i][j];
				}
			}
			if (adam) {
				mb[i] = b1 * mb[i] + (1 - b1) * gb[i];
				vb[i] = b2 * vb[i] + (1 - b2) * gb[i] * gb[i];
				bb[i] -= lr * (mb[i] / c1) / (sqrt(vb[i] / c2) + eps);
			} else {
				vb[i] = mu * vb[i] + gb[i];
				bb[i] -= lr * vb[i];
			}
		}
		const float *nw = tdata(sg, "W"), *nb = tdata(sg, "b");
		for (int i = 0; i < O; i++) {
			good &= fabs(nb[i] - bb[i]) < 1e-5;
			for (int j = 0; j < I; j++)
				good &= fabs(nw[i * I + j] - w[i][j]) < 1e-5;
		}
		if (!good)
			printf("# step %d: loss %.6f want %.6f, W[0][0] %.6f want %.6f\n", it, loss, want,
			       nw[0], w[0][0]);
	}
	batch_free(&bt);
	if (!adam) {
		const float *mom = tdata(sg, "W.momentum");
		good &= mom != NULL && fabs(mom[0] - vw[0][0]) < 1e-5;
		int st = ml_graph_find(sg, "train.step");
		good &= st >= 0 && *(int64_t *)sg->tensors[st]->data == 2;
	}
out:
	ok(good, adam ? "Adam matches the update computed by hand (two steps)"
		      : "SGD momentum matches the update computed by hand (two steps)");
	ml_session_free(s);
	ml_graph_free(sg);
	ml_graph_free(m);
}

/* run one step of g on a fixed batch; returns the loss and copies parameter name */
static double
one_step(struct ml_graph *g, struct batch *b, const char *pname, float *p, int np)
{
	struct ml_err e = { 0 };
	struct ml_session *s = NULL;
	double loss = NAN;
	if (ml_session_new(&s, g, NULL, &e) < 0 || step(s, b, &loss, &e) < 0)
		printf("# one_step: %s\n", e.msg);
	ml_session_free(s);
	const float *d = tdata(g, pname);
	if (d != NULL)
		memcpy(p, d, sizeof(float) * (size_t)np);
	return loss;
}

static struct ml_graph *
mlg_roundtrip(const struct ml_graph *g)
{
	struct ml_err e = { 0 };
	uint8_t *buf = NULL;
	size_t len = 0;
	struct ml_graph *r = NULL;
	if (ml_mlg_encode(g, &buf, &len, &e) < 0 || ml_mlg_decode(&r, buf, len, &e) < 0 ||
	    ml_graph_toposort(r, &e) < 0 || ml_graph_validate(r, &e) < 0 ||
	    ml_graph_infer(r, &e) < 0) {
		printf("# roundtrip: %s\n", e.msg);
		ml_graph_free(r);
		r = NULL;
	}
	ml_free(buf);
	return r;
}

/* wide: n rows of 300 features, 3 classes, for products past one k block of the SGEMM */
static void
wide(struct batch *b, int n)
{
	struct ml_err e = { 0 };
	int64_t xd[2] = { n, 300 }, yd[1] = { n };
	ml_tval_clear(&b->x);
	ml_tval_clear(&b->y);
	ml_tval_alloc(&b->x, ML_F32, 2, xd, &e);
	ml_tval_alloc(&b->y, ML_I64, 1, yd, &e);
	for (int i = 0; i < n; i++) {
		int k = (int)(urand() * 3) % 3;
		((int64_t *)b->y.data)[i] = k;
		for (int j = 0; j < 300; j++)
			((float *)b->x.data)[i * 300 + j] = (j % 3 == k ? 0.5f : 0.0f) + (float)nrand();
	}
}

static const char *wide_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 4>\n"
	"mlp (float[N,300] x) => (float[N,3] y)\n"
	"{\n    dense(units=40, act=relu)\n    dense(units=19, act=relu)\n    dense(units=3)\n}\n";

static int
count_op(const struct ml_graph *g, enum ml_op op)
{
	int n = 0;
	for (int i = 0; i < g->n_nodes; i++)
		n += g->nodes[i].op == op;
	return n;
}

/*
 * ml_train_fuse: the fused step (TrainGemm with Relu and ReluGrad,
 * GemmSGDUpdate) trains as the step it was made from, for SGD with and
 * without momentum, Nesterov and weight decay, a batch whose weight
 * gradients span two k blocks of the SGEMM, and gradient accumulation (the
 * sums added in the product's epilogue, the group's mean read there), and
 * leaves clipped updates alone.
 */
static void
test_fuse(void)
{
	static const struct {
		double mom, wd;
		bool nest;
		int batch, acc;
	} cfg[] = { { 0.9, 0, false, 37, 1 }, { 0, 1e-3, false, 64, 1 }, { 0.9, 1e-3, true, 270, 1 },
		    { 0.9, 0, false, 37, 2 }, { 0, 1e-3, false, 64, 3 }, { 0.9, 1e-3, true, 270, 3 } };
	for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
		struct ml_err e = { 0 };
		struct ml_graph *m = from_text(wide_text), *g[2] = { NULL, NULL };
		struct ml_session *s[2] = { NULL, NULL };
		struct ml_train_opts o;
		struct batch b = { 0 };
		bool good = m != NULL, shape = false;
		double l[2] = { 0, 0 };
		ml_train_opts_init(&o);
		o.momentum = cfg[ci].mom;
		o.weight_decay = cfg[ci].wd;
		o.nesterov = cfg[ci].nest;
		o.accumulate = cfg[ci].acc;
		for (int f = 0; f < 2 && good; f++)
			good = ml_train_step_graph(&g[f], m, &o, &e) == 0 &&
			       (f == 0 || ml_train_fuse(g[f], true, &e) == 0) &&
			       ml_session_new(&s[f], g[f], NULL, &e) == 0;
		if (good)
			shape = count_op(g[1], ML_OP_GEMM) == 0 && count_op(g[1], ML_OP_RELU) == 0 &&
				count_op(g[1], ML_OP_RELU_GRAD) == 0 &&
				count_op(g[1], ML_OP_GEMM_SGD_UPDATE) == 3 &&
				count_op(g[1], ML_OP_SGD_UPDATE) == 3 &&
				count_op(g[1], ML_OP_TRAIN_GEMM) == 5 && side_effects_last(g[1]);
		set_lr(&b, 0.05f);
		double worst = 0;
		/* with accumulate 3, the 4th step leaves a gradient in the sums */
		for (int it = 0; it < 4 && good; it++) {
			wide(&b, cfg[ci].batch);
			for (int f = 0; f < 2 && good; f++)
				good = step(s[f], &b, &l[f], &e) == 0;
			worst = fmax(worst, fabs(l[0] - l[1]));
		}
		static const char *const names[] = { "dense1.weight", "dense2.weight", "dense3.bias",
						     "dense1.weight.momentum", "dense1.weight.grad_acc",
						     "dense3.bias.grad_acc" };
		for (int k = 0; k < 6 && good; k++) {
			int t0 = ml_graph_find(g[0], names[k]), t1 = ml_graph_find(g[1], names[k]);
			if (t0 < 0 && ((k == 3 && cfg[ci].mom == 0) || (k > 3 && cfg[ci].acc == 1)))
				continue;
			good = t0 >= 0 && t1 >= 0;
			const struct ml_tensor *a = good ? g[0]->tensors[t0] : NULL;
			const struct ml_tensor *c = good ? g[1]->tensors[t1] : NULL;
			for (size_t i = 0; good && i < a->nbytes / 4; i++)
				worst = fmax(worst, fabs(((const float *)a->data)[i] -
							 ((const float *)c->data)[i]));
		}
		if (!good)
			printf("# fuse: %s\n", e.msg);
		printf("# fused vs unfused: largest difference %g\n", worst);
		char what[160];
		snprintf(what, sizeof what, "a fused CPU step trains as the unfused one (momentum %g, "
			 "weight decay %g%s, batch %d, accumulate %d)", cfg[ci].mom, cfg[ci].wd,
			 cfg[ci].nest ? ", Nesterov" : "", cfg[ci].batch, cfg[ci].acc);
		ok(good && shape && worst < 1e-4, what);
		for (int f = 0; f < 2; f++) {
			ml_session_free(s[f]);
			ml_graph_free(g[f]);
		}
		batch_free(&b);
		ml_graph_free(m);
	}
	/* a clipped gradient is needed whole: its update keeps its own node */
	struct ml_err e = { 0 };
	struct ml_graph *m = from_text(wide_text), *g = NULL;
	struct ml_train_opts o;
	ml_train_opts_init(&o);
	o.momentum = 0.9;
	o.clip_norm = 1;
	bool good = m != NULL && ml_train_step_graph(&g, m, &o, &e) == 0 &&
		    ml_train_fuse(g, true, &e) == 0;
	ok(good && count_op(g, ML_OP_GEMM_SGD_UPDATE) == 0 && count_op(g, ML_OP_SGD_UPDATE) == 6 &&
	   count_op(g, ML_OP_TRAIN_GEMM) == 8, "ml_train_fuse leaves clipped updates unfused");
	ml_graph_free(g);
	g = NULL;
	/*
	 * fold_updates false (MPI): the products fused, the updates left for
	 * ml_train_distribute, which then all-reduces every gradient; the step
	 * trains as the unfused one
	 */
	o.clip_norm = 0;
	struct ml_graph *p = NULL;
	struct ml_session *s[2] = { NULL, NULL };
	struct ml_dist_opts dopt;
	ml_dist_opts_init(&dopt);
	dopt.force = true;
	dopt.bucket_mb = 0;
	good = ml_train_step_graph(&g, m, &o, &e) == 0 && ml_train_step_graph(&p, m, &o, &e) == 0 &&
	       ml_train_fuse(g, false, &e) == 0;
	bool shape = good && count_op(g, ML_OP_GEMM_SGD_UPDATE) == 0 &&
		     count_op(g, ML_OP_SGD_UPDATE) == 6 && count_op(g, ML_OP_TRAIN_GEMM) == 8 &&
		     count_op(g, ML_OP_RELU) == 0 && count_op(g, ML_OP_RELU_GRAD) == 0;
	good = good && ml_train_distribute(g, &dopt, &e) >= 0 &&
	       ml_train_distribute(p, &dopt, &e) >= 0;
	shape = shape && good && count_op(g, ML_OP_ALLREDUCE_START) == 6 &&
		count_op(p, ML_OP_ALLREDUCE_START) == 6;
	good = good && ml_session_new(&s[0], p, NULL, &e) == 0 &&
	       ml_session_new(&s[1], g, NULL, &e) == 0;
	struct batch b = { 0 };
	double l[2] = { 0, 0 }, worst = 0;
	set_lr(&b, 0.05f);
	for (int it = 0; it < 4 && good; it++) {
		wide(&b, 64);
		for (int f = 0; f < 2 && good; f++)
			good = step(s[f], &b, &l[f], &e) == 0;
		worst = fmax(worst, fabs(l[0] - l[1]));
	}
	if (!good)
		printf("# fuse for MPI: %s\n", e.msg);
	ok(good && shape && worst < 1e-4,
	   "ml_train_fuse without folding the updates leaves every gradient to all-reduce, and trains the same");
	for (int f = 0; f < 2; f++)
		ml_session_free(s[f]);
	batch_free(&b);
	ml_graph_free(p);
	ml_graph_free(g);
	ml_graph_free(m);
}

/* put: a stored tensor NAME of dtype dt and shape dims filled from v (as doubles). */
static void
put(struct ml_graph *g, const char *name, enum ml_tkind kind, enum ml_dtype dt, int rank,
    const int64_t *dims, const double *v, int64_t n)
{
	struct ml_err e = { 0 };
	void *buf = malloc((size_t)n * 8 + 8);
	for (int64_t i = 0; i < n; i++)
		ml_set_f64(buf, dt, i, v[i]);
	ml_graph_set_data(g, ml_graph_tensor(g, name), kind, dt, rank, dims, buf,
			  (size_t)n * (dt == ML_F64 ? 8 : 4), &e);
	free(buf);
}

/* prod: alpha op(A) op(B), A stored [m, k] ([k, m] when ta), B [k, n] ([n, k] when tb). */
static double
prod(const double *a, const double *b, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
     int64_t i, int64_t j)
{
	double s = 0;
	for (int64_t p = 0; p < k; p++)
		s += a[ta ? p * m + i : i * k + p] * b[tb ? j * k + p : p * n + j];
	return s;
}

/*
 * The kernels of TrainGemm and GemmSGDUpdate against products computed
 * here, over transposes, the shapes of C (a row bias goes to the SGEMM's
 * epilogue, others to the Gemm kernel), alpha and beta, each act, SGD with
 * and without momentum, Nesterov and weight decay, f32 and f64 (the
 * fallback), and sizes past one k block and with partial tiles.
 */
static void
test_fused_kernels(void)
{
	const int64_t M = 13, N = 37;
	int bad = 0, cases = 0;
	for (int dt = 0; dt < 2; dt++)
	for (int kk = 0; kk < 2; kk++)
	for (int t = 0; t < 4; t++)
	for (int cm = 0; cm < 5; cm++)
	for (int act = 0; act < 4; act++) {
		struct ml_err e = { 0 };
		struct ml_graph *g = NULL;
		struct ml_session *s = NULL;
		enum ml_dtype ty = dt ? ML_F64 : ML_F32;
		bool ta = t & 1, tb = t & 2;
		int64_t K = kk ? 300 : 20;
		double alpha = cm == 3 ? 2 : 1, beta = cm == 2 ? 0.5 : 1, mu = act == 1 ? 0 : 0.9;
		double wd = act == 2 ? 1e-2 : 0, lr = 0.1;
		bool sgd = cm == 4, nest = act == 3;
		static double a[300 * 37], b[300 * 37], c[37 * 13], r[13 * 37], p[13 * 37], mo[13 * 37];
		for (int64_t i = 0; i < K * N || i < K * M; i++) {
			a[i] = nrand();
			b[i] = nrand();
		}
		for (int64_t i = 0; i < M * N; i++) {
			c[i] = nrand();
			r[i] = nrand();
			p[i] = nrand();
			mo[i] = nrand();
		}
		/* C: 0 none, 1 [N], 2 [M, N] beta 0.5, 3 [1, N] alpha 2; 4: GemmSGDUpdate */
		int64_t ad[2] = { ta ? K : M, ta ? M : K }, bd[2] = { tb ? N : K, tb ? K : N };
		int64_t cd[2] = { cm == 2 ? M : 1, N }, yd[2] = { M, N };
		ml_graph_new(&g, &e);
		ml_graph_set_opset(g, "", 17, &e);
		ml_graph_set_opset(g, "ml", 1, &e);
		put(g, "A", ML_TK_CONST, ty, 2, ad, a, M * K);
		put(g, "B", ML_TK_CONST, ty, 2, bd, b, N * K);
		put(g, "C", ML_TK_CONST, ty, cm == 1 ? 1 : 2, cm == 1 ? cd + 1 : cd, c,
		    cm == 2 ? M * N : N);
		put(g, "R", ML_TK_CONST, ty, 2, yd, r, M * N);
		put(g, "P", ML_TK_PARAM, ty, 2, yd, p, M * N);
		put(g, "Mo", ML_TK_PARAM, ty, 2, yd, mo, M * N);
		put(g, "lr", ML_TK_CONST, ty, 0, NULL, &lr, 1);
		static const char *const acts[4] = { "none", "relu", "relu_grad", "none" };
		const char *in[5] = { "A", "B", cm == 0 || cm == 4 ? "" : "C", "R" }, *out = "Y";
		int ni;
		if (sgd) {
			const char *si[5] = { "P", "A", "B", "lr", mu != 0 ? "Mo" : "" };
			ni = ml_graph_add_node(g, "GemmSGDUpdate", "ml", "u", mu != 0 ? 5 : 4, si, 0,
					       NULL, &e);
			ml_node_set_float(g, ni, "momentum", mu);
			ml_node_set_float(g, ni, "weight_decay", wd);
			ml_node_set_int(g, ni, "nesterov", nest);
			/* a graph needs an output: the lr scalar, through an Identity */
			const char *li = "lr", *lo = "lro";
			ml_graph_add_node(g, "Identity", "", "id", 1, &li, 1, &lo, &e);
			ml_graph_add_output(g, ml_graph_find(g, "lro"), &e);
		} else {
			ni = ml_graph_add_node(g, "TrainGemm", "ml", "tg", act == 2 ? 4 : 3, in, 1, &out,
					       &e);
			ml_node_set_string(g, ni, "act", acts[act]);
			ml_graph_add_output(g, ml_graph_find(g, "Y"), &e);
		}
		ml_node_set_int(g, ni, "transA", ta);
		ml_node_set_int(g, ni, "transB", tb);
		ml_node_set_float(g, ni, "alpha", alpha);
		if (!sgd)
			ml_node_set_float(g, ni, "beta", beta);
		bool good = ml_graph_toposort(g, &e) == 0 && ml_graph_validate(g, &e) == 0 &&
			    ml_graph_infer(g, &e) == 0 && ml_session_new(&s, g, NULL, &e) == 0 &&
			    ml_session_run(s, &e) == 0 && ml_session_sync(s, &e) == 0;
		double worst = 0;
		const struct ml_tval *y = good && !sgd ? ml_session_output(s, 0) : NULL;
		const struct ml_tensor *pt = good ? g->tensors[ml_graph_find(g, "P")] : NULL;
		const struct ml_tensor *mt = good ? g->tensors[ml_graph_find(g, "Mo")] : NULL;
		for (int64_t i = 0; good && i < M; i++)
			for (int64_t j = 0; j < N; j++) {
				double v = alpha * prod(a, b, ta, tb, M, N, K, i, j), got, want;
				int64_t o = i * N + j;
				if (sgd) {
					double gr = v + wd * p[o], vel = mu * mo[o] + gr;
					double d = mu == 0 ? gr : nest ? gr + mu * vel : vel;
					want = p[o] - lr * d;
					got = ml_get_f64(pt->data, ty, o);
					if (mu != 0)
						worst = fmax(worst, fabs(ml_get_f64(mt->data, ty, o) - vel));
				} else {
					if (cm != 0)
						v += beta * c[cm == 2 ? o : j];
					want = act == 1 ? fmax(v, 0) : act == 2 && r[o] <= 0 ? 0 : v;
					got = ml_get_f64(y->data, ty, o);
				}
				worst = fmax(worst, fabs(got - want));
			}
		cases++;
		if (!good || worst > (dt ? 1e-9 : 1e-4)) {
			bad++;
			printf("# %s f%d K %lld ta %d tb %d C %d act %d: %s worst %g\n",
			       sgd ? "GemmSGDUpdate" : "TrainGemm", dt ? 64 : 32, (long long)K, ta, tb,
			       cm, act, good ? "" : e.msg, worst);
		}
		ml_session_free(s);
		ml_graph_free(g);
	}
	printf("# %d cases of the fused kernels, %d wrong\n", cases, bad);
	ok(bad == 0, "TrainGemm and GemmSGDUpdate compute Gemm and its act, and the SGD update");
}

/*
 * old_lr_at: mltrain's learning rate before the schedules moved into the
 * library (cmd/mltrain.c lr_at, as of d40ee07), the reference ml_lr_at
 * must equal bit for bit: a resumed run depends on it.
 */
static double
old_lr_at(const char *schedule, double lr0, double gamma, double lr_min, int64_t lr_step,
	  int64_t warmup, int64_t epochs, int64_t spe, uint64_t s)
{
	double lr = lr0, total = (double)epochs * (double)spe;
	if (strcmp(schedule, "step") == 0)
		lr *= pow(gamma, floor((double)(s / (uint64_t)spe) / (double)lr_step));
	else if (strcmp(schedule, "cosine") == 0 && total > 0)
		lr = lr_min + (lr0 - lr_min) * 0.5 * (1 + cos(M_PI * (double)s / total));
	if (warmup > 0 && s < (uint64_t)warmup)
		lr *= (double)(s + 1) / (double)warmup;
	return lr;
}

/* near: a and b equal to 1e-12 relative (hand-computed values). */
static bool
near(double a, double b)
{
	return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b));
}

/*
 * schedules: ml_lr_at of each kind at steps worked out by hand, equal to
 * mltrain's former computation over many steps, and the names and checks.
 */
static void
schedules(void)
{
	struct ml_err e = { 0 };
	struct ml_lr_schedule sc;

	ml_lr_schedule_init(&sc);
	ok(sc.kind == ML_LR_CONSTANT && sc.lr == 0.01 && sc.step_epochs == 1 && sc.gamma == 0.1 &&
	   sc.warmup == 0, "ml_lr_schedule_init gives mltrain's defaults");
	sc.lr = 0.1;
	ok(ml_lr_at(&sc, 0) == 0.1 && ml_lr_at(&sc, 12345) == 0.1, "constant: lr at every step");

	/* step: 10 steps an epoch, halved every 2 epochs */
	sc.kind = ML_LR_STEP;
	sc.steps_per_epoch = 10;
	sc.step_epochs = 2;
	sc.gamma = 0.5;
	ok(ml_lr_at(&sc, 0) == 0.1 && ml_lr_at(&sc, 19) == 0.1 && near(ml_lr_at(&sc, 20), 0.05) &&
	   near(ml_lr_at(&sc, 39), 0.05) && near(ml_lr_at(&sc, 40), 0.025) &&
	   near(ml_lr_at(&sc, 65), 0.0125), "step: lr 0.1 halved every 2 epochs of 10 steps");

	/* cosine: from 0.1 to 0.01 over 2 epochs of 5 steps */
	ml_lr_schedule_init(&sc);
	sc.kind = ML_LR_COSINE;
	sc.lr = 0.1;
	sc.lr_min = 0.01;
	sc.epochs = 2;
	sc.steps_per_epoch = 5;
	ok(near(ml_lr_at(&sc, 0), 0.1) && near(ml_lr_at(&sc, 5), 0.055) &&
	   near(ml_lr_at(&sc, 10), 0.01) &&
	   near(ml_lr_at(&sc, 2), 0.01 + 0.045 * (1 + cos(M_PI / 5))),
	   "cosine: 0.1 at the start, 0.055 half-way, 0.01 at the end");
	sc.epochs = 0;
	ok(ml_lr_at(&sc, 3) == 0.1, "cosine of no length: lr");

	/* warmup: 100 steps by default, or as many as given, over any kind */
	ml_lr_schedule_init(&sc);
	sc.kind = ML_LR_WARMUP;
	sc.lr = 0.1;
	ok(near(ml_lr_at(&sc, 0), 0.001) && near(ml_lr_at(&sc, 49), 0.05) &&
	   near(ml_lr_at(&sc, 99), 0.1) && ml_lr_at(&sc, 100) == 0.1,
	   "warmup: linear over ML_LR_WARMUP_DEFAULT (100) steps, then lr");
	sc.warmup = 4;
	ok(near(ml_lr_at(&sc, 0), 0.025) && near(ml_lr_at(&sc, 3), 0.1) && ml_lr_at(&sc, 4) == 0.1,
	   "warmup: linear over the steps given");
	sc.kind = ML_LR_STEP;
	sc.steps_per_epoch = 10;
	sc.gamma = 0.5;
	sc.warmup = 5;
	ok(near(ml_lr_at(&sc, 2), 0.06) && near(ml_lr_at(&sc, 10), 0.05),
	   "a warm-up applies to the step schedule too");

	/* every kind, with and without warm-up, equals mltrain's former lr_at */
	int bad = 0, n = 0;
	for (int k = 0; k < 4; k++) {
		for (int w = 0; w < 3; w++) {
			int64_t warm = w == 0 ? 0 : w == 1 ? 7 : 130;
			ml_lr_schedule_init(&sc);
			sc.kind = k;
			sc.lr = 0.05;
			sc.gamma = 0.3;
			sc.lr_min = 1e-4;
			sc.step_epochs = 3;
			sc.epochs = 5;
			sc.steps_per_epoch = 37;
			sc.warmup = warm;
			/* mltrain turned --lr-schedule warmup without --warmup-steps into 100 */
			int64_t oldwarm = k == ML_LR_WARMUP && warm == 0 ? 100 : warm;
			for (uint64_t s = 0; s < 250; s++, n++) {
				double want = old_lr_at(ml_lr_schedule_name(k), 0.05, 0.3, 1e-4, 3,
							oldwarm, 5, 37, s);
				if (ml_lr_at(&sc, s) != want)
					bad++;
			}
		}
	}
	printf("# %d rates compared with the former mltrain, %d differ\n", n, bad);
	ok(bad == 0, "ml_lr_at equals mltrain's former rate bit for bit, every kind and warm-up");

	ok(ml_lr_schedule_from_name("cosine") == ML_LR_COSINE &&
	   ml_lr_schedule_from_name("warmup") == ML_LR_WARMUP &&
	   ml_lr_schedule_from_name("linear") == -1 && ml_lr_schedule_from_name(NULL) == -1 &&
	   strcmp(ml_lr_schedule_name(ML_LR_STEP), "step") == 0 && ml_lr_schedule_name(9) == NULL,
	   "schedule names map both ways");

	ml_lr_schedule_init(&sc);
	ok(ml_lr_schedule_check(&sc, &e) == 0, "the default schedule is valid");
	sc.kind = ML_LR_STEP;
	bool refused = ml_lr_schedule_check(&sc, &e) == ML_EINVAL;
	ok(refused && ml_lr_at(&sc, 42) == 0.01,
	   "a step schedule without steps an epoch is ML_EINVAL, and ml_lr_at gives lr");
	sc.kind = 7;
	ok(ml_lr_schedule_check(&sc, &e) == ML_EINVAL, "an unknown kind is ML_EINVAL");
	ml_lr_schedule_init(&sc);
	sc.warmup = -1;
	ok(ml_lr_schedule_check(&sc, &e) == ML_EINVAL, "negative warm-up steps are ML_EINVAL");
	sc.warmup = 0;
	sc.lr = NAN;
	ok(ml_lr_schedule_check(&sc, &e) == ML_EINVAL, "a rate that is not finite is ML_EINVAL");
}

/* parse_fails: text is refused with ML_EFORMAT and leaves the config empty. */
static bool
parse_fails(const char *text)
{
	struct ml_err e = { 0 };
	struct ml_train_config c;
	int rc = ml_train_config_parse(&c, text, &e);
	bool good = rc == ML_EFORMAT && c.n == 0 && c.items == NULL &&
		    strstr(e.msg, "training state: ") == e.msg;
	if (!good)
		printf("# '%s': rc %d (%s)\n", text, rc, e.msg);
	ml_train_config_free(&c);
	return good;
}

/*
 * train_config: the checkpoint's training state as mltrain writes it reads
 * back exactly; keys are found as keys only; bad JSON is refused.
 */
static void
train_config(void)
{
	struct ml_err e = { 0 };
	struct ml_train_config c;
	double v;
	int64_t n;

	/* what mltrain's config_json writes (a resumed checkpoint of the SGD MLP) */
	static const char written[] =
		"{\"loss\": \"softmax-cross-entropy\", \"optimizer\": \"sgd\", \"lr_schedule\": "
		"\"cosine\", \"lr\": 0.10000000000000001, \"momentum\": 0.90000000000000002, "
		"\"beta1\": 0.90000000000000002, \"beta2\": 0.999, \"eps\": 1e-08, "
		"\"weight_decay\": 0, \"clip_norm\": 0, \"lr_gamma\": 0.10000000000000001, "
		"\"lr_min\": 0, \"val_split\": 0, \"nesterov\": 0, \"lr_step\": 1, "
		"\"warmup_steps\": 0, \"batch\": 64, \"epochs\": 3, \"seed\": 9223372036854775807, "
		"\"shuffle\": 1, \"checkpoint_every\": 0, \"steps_per_epoch\": 938, "
		"\"epoch_step\": 17, \"epoch_loss_sum\": 1234.5678901234567, \"epoch_correct\": 1003, "
		"\"epoch_seen\": 1088, \"keep_denormals\": 0}";
	bool good = ml_train_config_parse(&c, written, &e) == 0 && c.n == 27;
	good = good && strcmp(ml_train_config_str(&c, "loss"), "softmax-cross-entropy") == 0 &&
	       strcmp(ml_train_config_str(&c, "lr_schedule"), "cosine") == 0 &&
	       ml_train_config_num(&c, "lr", &v) && v == 0.1 &&
	       ml_train_config_num(&c, "eps", &v) && v == 1e-8 &&
	       ml_train_config_num(&c, "epoch_loss_sum", &v) && v == 1234.5678901234567 &&
	       ml_train_config_int(&c, "steps_per_epoch", &n) && n == 938 &&
	       ml_train_config_int(&c, "epoch_seen", &n) && n == 1088 &&
	       ml_train_config_int(&c, "seed", &n) && n == INT64_MAX;
	ok(good, "mltrain's training state reads back: strings, doubles bit for bit, a seed of "
	   "2^63-1 exactly");
	ok(ml_train_config_str(&c, "lr") == NULL && !ml_train_config_num(&c, "loss", &v) &&
	   !ml_train_config_num(&c, "absent", &v) && !ml_train_config_int(&c, "lr", &n) &&
	   !ml_train_config_int(&c, "epoch_loss_sum", &n) &&
	   !ml_train_config_int(&c, "eps", &n),
	   "a key of another type, absent, or a number that is not an integer is not found");
	ml_train_config_free(&c);
	ok(c.n == 0 && c.items == NULL, "ml_train_config_free leaves the config empty");

	/* strstr found "lr": inside a string value; a parser finds keys only */
	good = ml_train_config_parse(&c, "{\"note\": \"\\\"lr\\\": 5\", \"lr\": 0.25}", &e) == 0 &&
	       ml_train_config_num(&c, "lr", &v) && v == 0.25 &&
	       strcmp(ml_train_config_str(&c, "note"), "\"lr\": 5") == 0;
	ml_train_config_free(&c);
	ok(good, "a key is found as a key, not as text inside a string value");

	good = ml_train_config_parse(&c, " \n{ \"a\" :1.5e2,\"b\":[1, {\"c\": [true]}],\"d\":{},"
				     "\"e\": \"caf\\u00e9 \\ud83d\\ude00\\n\", \"f\": null, "
				     "\"g\": false, \"a\": 7 }\t", &e) == 0 &&
	       c.n == 7 && ml_train_config_num(&c, "a", &v) && v == 150 &&
	       ml_train_config_int(&c, "a", &n) && n == 150 && c.items[1].type == ML_CFG_NESTED &&
	       c.items[2].type == ML_CFG_NESTED && c.items[4].type == ML_CFG_NULL &&
	       c.items[5].type == ML_CFG_BOOL && c.items[5].num == 0 &&
	       strcmp(ml_train_config_str(&c, "e"), "caf\xc3\xa9 \xf0\x9f\x98\x80\n") == 0;
	ml_train_config_free(&c);
	ok(good, "blanks, exponents, nested values, escapes and surrogate pairs; the first of "
	   "two equal keys wins");

	good = ml_train_config_parse(&c, "", &e) == 0 && c.n == 0 &&
	       ml_train_config_parse(&c, NULL, &e) == 0 && c.n == 0 &&
	       ml_train_config_parse(&c, " {} ", &e) == 0 && c.n == 0;
	ok(good, "an empty text (a model exported without a state) is an empty object");

	char deep[300];
	memset(deep, '[', sizeof deep);
	memcpy(deep, "{\"a\": ", 6);
	deep[sizeof deep - 1] = '\0';
	ok(parse_fails("{\"a\": 1,}") && parse_fails("{\"a\" 1}") && parse_fails("[1]") &&
	   parse_fails("{\"a\": 01}") && parse_fails("{\"a\": \"x") &&
	   parse_fails("{\"a\": \"\\u0000\"}") &&
	   parse_fails("{\"a\": tru}") && parse_fails("{\"a\": 1} x") && parse_fails("{\"a\": }") &&
	   parse_fails("{\"a\": -}") && parse_fails("{\"a\": 1.}") && parse_fails("{\"a\": .5}") &&
	   parse_fails("{\"a\": \"\\x\"}") && parse_fails("{\"a\": \"\\ud800\"}") &&
	   parse_fails("{\"a\": \"tab\there\"}") && parse_fails("{a: 1}") && parse_fails("{") &&
	   parse_fails(deep),
	   "malformed JSON is ML_EFORMAT, the config left empty");
}

/* concat: the batches bs[0..k-1] as one */
static void
concat(struct batch *out, const struct batch *bs, int k)
{
	struct ml_err e = { 0 };
	int64_t n = 0;
	for (int i = 0; i < k; i++)
		n += bs[i].x.dims[0];
	int64_t xd[2] = { n, 4 }, yd[1] = { n }, at = 0;
	ml_tval_alloc(&out->x, ML_F32, 2, xd, &e);
	ml_tval_alloc(&out->y, ML_I64, 1, yd, &e);
	for (int i = 0; i < k; i++) {
		int64_t m = bs[i].x.dims[0];
		memcpy((float *)out->x.data + at * 4, bs[i].x.data, (size_t)m * 4 * sizeof(float));
		memcpy((int64_t *)out->y.data + at, bs[i].y.data, (size_t)m * sizeof(int64_t));
		at += m;
	}
}

/* params_diff: the largest relative difference of the float PARAM tensors of a and b */
static double
params_diff(const struct ml_graph *a, const struct ml_graph *b)
{
	double worst = 0;
	for (int t = 0; t < a->n_tensors; t++) {
		const struct ml_tensor *x = a->tensors[t];
		if (x->kind != ML_TK_PARAM || x->dtype != ML_F32 || x->data == NULL ||
		    strstr(x->name, "grad_acc") != NULL)
			continue;
		int u = ml_graph_find(b, x->name);
		if (u < 0 || b->tensors[u]->data == NULL)
			return INFINITY;
		int64_t n = 1;
		for (int k = 0; k < x->rank; k++)
			n *= x->dims[k];
		for (int64_t i = 0; i < n; i++) {
			double p = ((const float *)x->data)[i], q = ((const float *)b->tensors[u]->data)[i];
			double d = fabs(p - q) / (fabs(q) + 1e-3);
			worst = d > worst ? d : worst;
		}
	}
	return worst;
}

/*
 * Gradient accumulation: 3 groups of 4 micro-batches of 8 samples with
 * accumulate 4 against the same 3 batches of 32 with accumulate 1, for
 * SGD with momentum and weight decay, Adam, and SGD with clipping; and
 * the parameters stay unchanged until a group's last micro-batch.
 */
static void
test_accumulate(void)
{
	static const char *const what[3] = { "SGD momentum + weight decay", "Adam", "SGD + clipping" };
	for (int v = 0; v < 3; v++) {
		struct ml_err e = { 0 };
		struct ml_train_opts o;
		ml_train_opts_init(&o);
		if (v == 0)
			o.momentum = 0.9, o.weight_decay = 0.01;
		if (v == 1)
			o.optimizer = ML_OPTIM_ADAM;
		if (v == 2)
			o.clip_norm = 0.05;
		struct ml_graph *m = from_text(mlp_text), *sa = NULL, *sb = NULL;
		struct ml_session *a = NULL, *b = NULL;
		struct batch mb[4], big;
		memset(mb, 0, sizeof mb);
		memset(&big, 0, sizeof big);
		bool good = m != NULL && ml_train_step_graph(&sb, m, &o, &e) == 0;
		o.accumulate = 4;
		good = good && ml_train_step_graph(&sa, m, &o, &e) == 0 &&
		       ml_session_new(&a, sa, NULL, &e) == 0 && ml_session_new(&b, sb, NULL, &e) == 0;
		bool still = true;
		for (int grp = 0; good && grp < 3; grp++) {
			double l;
			for (int i = 0; i < 4; i++) {
				blobs(&mb[i], 8);
				set_lr(&mb[i], 0.1f);
			}
			concat(&big, mb, 4);
			set_lr(&big, 0.1f);
			for (int i = 0; good && i < 4; i++) {
				good = step(a, &mb[i], &l, &e) == 0;
				if (grp == 0 && i == 2) {
					/* mid-group: the model's weights are what they were */
					good = good && ml_train_export(m, sa, &e) == 0;
					struct ml_graph *m0 = from_text(mlp_text);
					still = m0 != NULL && params_diff(m0, m) == 0;
					ml_graph_free(m0);
				}
			}
			good = good && step(b, &big, &l, &e) == 0;
			for (int i = 0; i < 4; i++)
				batch_free(&mb[i]);
			batch_free(&big);
		}
		if (!good)
			printf("# accumulate: %s\n", e.msg);
		struct ml_graph *ma = from_text(mlp_text), *mbg = from_text(mlp_text);
		good = good && ma != NULL && mbg != NULL && ml_train_export(ma, sa, &e) == 0 &&
		       ml_train_export(mbg, sb, &e) == 0;
		double d = good ? params_diff(ma, mbg) : INFINITY;
		printf("# %s: largest relative difference %.3g\n", what[v], d);
		char msg[200];
		snprintf(msg, sizeof msg, "%s: accumulate 4 x 8 trains as batch 32", what[v]);
		ok(good && d < 1e-4, msg);
		snprintf(msg, sizeof msg, "%s: no update before a group's last micro-batch", what[v]);
		ok(good && still, msg);
		ml_session_free(a);
		ml_session_free(b);
		ml_graph_free(sa);
		ml_graph_free(sb);
		ml_graph_free(m);
		ml_graph_free(ma);
		ml_graph_free(mbg);
	}
	struct ml_err e = { 0 };
	struct ml_train_opts o;
	struct ml_graph *m = from_text(mlp_text), *sg = NULL;
	ml_train_opts_init(&o);
	o.accumulate = -2;
	ok(m != NULL && ml_train_step_graph(&sg, m, &o, &e) == ML_EINVAL && sg == NULL,
	   "accumulate -2 is refused");
	ml_graph_free(m);
}

/*
 * Mixed precision (ml_train_opts.precision = ML_PREC_BF16): one plain SGD
 * step (lr 1, so each parameter moves by its gradient) of an MLP and a CNN,
 * smooth (tanh, average pooling: a Relu or a max pool that flips on a
 * rounded value moves a small model's gradients by 10%, in PyTorch too),
 * fp32 against bf16: the gradients agree within bf16's rounding (a
 * relative 1e-2 of each tensor's norm) but are not the same (the products
 * did round), unfused and fused (TrainGemm, GemmSGDUpdate); the emulation
 * (the fallback set by name: the f32 kernels on rounded operands) agrees
 * with the vdpbf16ps path to the order of the f32 sums; the product nodes
 * carry precision "bf16" and fp16 is refused.
 */
static void
rand_batch(struct batch *b, int n, int rank, const int64_t *xd, int classes)
{
	struct ml_err e = { 0 };
	int64_t yd[1] = { n }, nx = 1;
	ml_tval_clear(&b->x);
	ml_tval_clear(&b->y);
	ml_tval_alloc(&b->x, ML_F32, rank, xd, &e);
	ml_tval_alloc(&b->y, ML_I64, 1, yd, &e);
	for (int i = 0; i < rank; i++)
		nx *= xd[i];
	for (int64_t i = 0; i < nx; i++)
		((float *)b->x.data)[i] = (float)nrand();
	for (int i = 0; i < n; i++)
		((int64_t *)b->y.data)[i] = (int64_t)(urand() * classes) % classes;
}

/* grads: the parameters' moves of one SGD step with lr 1 (their gradients), concatenated */
static double *
grads(const char *text, struct batch *b, int prec, bool fuse, int64_t *n, int *marked)
{
	struct ml_err e = { 0 };
	struct ml_train_opts o;
	struct ml_graph *m = from_text(text), *sg = NULL, *after = from_text(text);
	struct ml_session *s = NULL;
	double *g = NULL, l;
	ml_train_opts_init(&o);
	o.precision = prec;
	if (m == NULL || after == NULL || ml_train_step_graph(&sg, m, &o, &e) < 0 ||
	    (fuse && ml_train_fuse(sg, true, &e) < 0) || ml_session_new(&s, sg, NULL, &e) < 0 ||
	    step(s, b, &l, &e) < 0 || ml_train_export(after, sg, &e) < 0) {
		printf("# grads: %s\n", e.msg);
		goto out;
	}
	*marked = 0;
	for (int i = 0; i < sg->n_nodes; i++)
		*marked += strcmp(ml_attr_str(&sg->nodes[i], "precision", ""), "bf16") == 0;
	*n = 0;
	for (int t = 0; t < m->n_tensors; t++) {
		const struct ml_tensor *a = m->tensors[t];
		int64_t c = 1;
		for (int d = 0; d < a->rank; d++)
			c *= a->dims[d];
		if (a->kind == ML_TK_PARAM && a->dtype == ML_F32 && a->data != NULL)
			*n += c;
	}
	g = calloc((size_t)*n + 1, sizeof *g);
	int64_t k = 0;
	for (int t = 0; g != NULL && t < m->n_tensors; t++) {
		const struct ml_tensor *a = m->tensors[t], *z = after->tensors[t];
		if (a->kind != ML_TK_PARAM || a->dtype != ML_F32 || a->data == NULL)
			continue;
		int64_t c = 1;
		for (int d = 0; d < a->rank; d++)
			c *= a->dims[d];
		for (int64_t i = 0; i < c; i++)
			g[k++] = (double)((const float *)a->data)[i] - ((const float *)z->data)[i];
	}
out:
	ml_session_free(s);
	ml_graph_free(sg);
	ml_graph_free(m);
	ml_graph_free(after);
	return g;
}

static double
rel_diff(const double *a, const double *b, int64_t n)
{
	double d = 0, r = 0;
	for (int64_t i = 0; i < n; i++) {
		d += (a[i] - b[i]) * (a[i] - b[i]);
		r += b[i] * b[i];
	}
	return r > 0 ? sqrt(d / r) : INFINITY;
}

static const char *wmlp_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 4>\n"
	"mlp (float[N,40] x) => (float[N,5] y)\n"
	"{\n    dense(units=48, act=tanh)\n    dense(units=24, act=tanh)\n    dense(units=5)\n}\n";

static const char *pcnn_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 5>\n"
	"cnn (float[N,3,8,8] x) => (float[N,4] y)\n"
	"{\n    conv(filters=8, kernel=3, pad=1, act=tanh)\n    conv(filters=24, kernel=3, pad=1)\n"
	"    act(tanh)\n    pool(avg, size=2, stride=2)\n    flatten\n    dense(units=4)\n}\n";

static void
test_precision(void)
{
	static const char *const name[2] = { "MLP", "CNN" };
	const char *text[2] = { wmlp_text, pcnn_text };
	int64_t xd[2][4] = { { 32, 40 }, { 16, 3, 8, 8 } };
	int rank[2] = { 2, 4 }, classes[2] = { 5, 4 };
	/*
	 * native: the step's products round (AMX, or a vdpbf16ps as fast as the
	 * FMAs); elsewhere they run as f32 (no AVX512_BF16, or one too slow)
	 */
	ml_bf16_set_path(ML_BF16_AUTO);
	bool native = ml_bf16_train_path() == 2;
	for (int v = 0; v < 2; v++) {
		struct batch b = { 0 };
		char msg[200];
		int64_t n32 = 0, n16 = 0, nf = 0, ne = 0;
		int m32 = 0, m16 = 0, mf = 0, me = 0;
		rand_batch(&b, (int)xd[v][0], rank[v], xd[v], classes[v]);
		set_lr(&b, 1.0f);
		ml_bf16_set_path(ML_BF16_AUTO);
		double *g32 = grads(text[v], &b, ML_PREC_F32, false, &n32, &m32);
		double *g16 = grads(text[v], &b, ML_PREC_BF16, false, &n16, &m16);
		double *gf = grads(text[v], &b, ML_PREC_BF16, true, &nf, &mf);
		ml_bf16_set_path(ML_BF16_F32);
		double *ge = grads(text[v], &b, ML_PREC_BF16, v == 0, &ne, &me);
		ml_bf16_set_path(ML_BF16_AUTO);
		bool have = g32 != NULL && g16 != NULL && gf != NULL && ge != NULL && n32 == n16 &&
			    n32 == nf && n32 == ne && n32 > 0;
		double d16 = have ? rel_diff(g16, g32, n32) : INFINITY;
		double df = have ? rel_diff(gf, g32, n32) : INFINITY;
		double de = have ? rel_diff(ge, g32, n32) : INFINITY;
		double dpe = have ? rel_diff(g16, ge, n32) : INFINITY;
		printf("# %s: bf16 vs fp32 %.3g (fused %.3g), emulated vs fp32 %.3g, bf16 vs emulated "
		       "%.3g; %d and %d products marked\n", name[v], d16, df, de, dpe, m16, mf);
		/*
		 * without AVX512_BF16, or with a vdpbf16ps no faster than the FMAs and
		 * no AMX, the products run as f32 (ml_bf16_train_path 0: never slower
		 * than fp32), so only the emulation rounds
		 */
		bool rounds = native ? d16 < 1e-2 && d16 > 1e-6 && df < 1e-2 && df > 1e-6 :
				       d16 == 0 && df < 1e-5;	/* fused: f32 sums reordered */
		snprintf(msg, sizeof msg, "%s: bf16 gradients within 1e-2 of fp32's, and rounded%s",
			 name[v], native ? "" : " (emulated; the f32 fallback equals fp32)");
		ok(rounds && de < 1e-2 && de > 1e-6, msg);
		snprintf(msg, sizeof msg, "%s: the products (and only with bf16) say precision bf16",
			 name[v]);
		ok(m32 == 0 && m16 >= (v == 0 ? 6 : 7) && mf >= 5, msg);
		snprintf(msg, sizeof msg, "%s: the emulation (ML_BF16=f32) matches vdpbf16ps", name[v]);
		if (!native)
			printf("ok %d - %s # SKIP no bf16 products here (no AVX512_BF16, or a slow one)\n",
			       ++ntest, msg);
		else
			ok(dpe < 1e-4, msg);
		free(g32);
		free(g16);
		free(gf);
		free(ge);
		batch_free(&b);
	}
	struct ml_err e = { 0 };
	struct ml_train_opts o;
	struct ml_graph *m = from_text(mlp_text), *sg = NULL;
	ml_train_opts_init(&o);
	o.precision = ML_PREC_F16;
	int n16 = 0;
	if (m != NULL && ml_train_step_graph(&sg, m, &o, &e) == 0)
		for (int i = 0; i < sg->n_nodes; i++)
			n16 += strcmp(ml_attr_str(&sg->nodes[i], "precision", ""), "fp16") == 0;
	ml_graph_free(sg);
	sg = NULL;
	/* the two layers' forward products, and their gradients' (the first needs no dx) */
	ok(n16 == 5, "precision fp16 marks the products precision = \"fp16\" (the OpenCL kernels "
	   "round them)");
	o.precision = 7;
	ok(ml_train_step_graph(&sg, m, &o, &e) == ML_EINVAL && sg == NULL,
	   "an unknown precision is ML_EINVAL");
	ok(ml_precision_from_name("bf16") == ML_PREC_BF16 &&
	   ml_precision_from_name("fp32") == ML_PREC_F32 && ml_precision_from_name("x") == -1 &&
	   strcmp(ml_precision_name(ML_PREC_F16), "fp16") == 0, "precision names map both ways");
	ml_graph_free(m);
}

/* same_state: every field of state.def equal (doubles bit for bit), step and epoch too. */
static bool
same_state(const struct ml_train_state *a, const struct ml_train_state *b)
{
	bool eq = a->step == b->step && a->epoch == b->epoch;
#define X(name, member, type) eq &= memcmp(&a->member, &b->member, sizeof a->member) == 0;
#include "train/state.def"
#undef X
	return eq;
}

/*
 * train_state: a run's state (ml_train_state_*) kept in a model survives the
 * .mlg and text forms; the JSON object of older checkpoints reads into the
 * same fields; damaged ones are refused; ml_train_checkpoint_save writes a
 * checkpoint that loads back; ml_train_strip leaves the model's parameters
 * and refuses a step graph. mlp is a model with a training state
 * (ml_train_export of sg).
 */
static void
train_state(const struct ml_graph *mlp, const struct ml_graph *sg)
{
	struct ml_err e = { 0 };
	struct ml_train_state st, back;
	struct ml_graph *g = NULL, *r = NULL;

	ml_train_state_init(&st);
	ok(st.opts.loss == ML_LOSS_SCE && st.opts.optimizer == ML_OPTIM_SGD && st.batch == 64 &&
	   st.shuffle && st.sched.lr == 0.01 && st.sched.epochs == 1 && st.step == 0,
	   "ml_train_state_init: mltrain's defaults");
	st.opts.optimizer = ML_OPTIM_ADAM;
	st.opts.momentum = 0.1 + 0.2;
	st.opts.seed = UINT64_MAX;
	st.opts.nesterov = true;
	st.sched.kind = ML_LR_COSINE;
	st.sched.lr = 1.0 / 3;
	st.sched.steps_per_epoch = 938;
	st.sched.warmup = 7;
	st.val_split = 0.125;
	st.checkpoint_every = 100;
	st.keep_denormals = true;
	st.step = 1955;
	st.epoch = 2;
	st.epoch_step = 79;
	st.epoch_loss_sum = 1234.5678901234567;
	st.epoch_correct = 5000;
	st.epoch_seen = 5056;
	bool good = ml_graph_clone(&g, mlp, &e) == 0 && ml_train_state_set(g, &st, &e) == 0 &&
		    g->train->step == 1955 && g->train->epoch == 2 && g->train->config == NULL &&
		    strcmp(g->train->optimizer, "adam") == 0;
	r = good ? mlg_roundtrip(g) : NULL;
	ml_train_state_init(&back);
	good = good && r != NULL && ml_train_state_get(&back, r, &e) == 0 && same_state(&st, &back);
	ok(good, "a run's state survives the .mlg writer and reader, bit for bit");
	ml_graph_free(r);
	r = NULL;
	char *text = NULL;
	size_t len = 0;
	ml_train_state_init(&back);
	good = ml_text_encode(g, &text, &len, &e) == 0 &&
	       ml_text_decode(&r, text, len, "state.mlt", &e) == 0 &&
	       ml_train_state_get(&back, r, &e) == 0 && same_state(&st, &back);
	if (!good)
		printf("# text: %s\n", e.msg);
	ok(good, "and the text form's run: {...}");
	ml_free(text);
	ml_graph_free(r);
	r = NULL;

	/* the JSON form of older checkpoints */
	static const char old[] =
		"{\"loss\": \"mse\", \"optimizer\": \"adamw\", \"lr_schedule\": \"cosine\", "
		"\"lr\": 0.10000000000000001, \"momentum\": 0.90000000000000002, "
		"\"beta1\": 0.90000000000000002, \"beta2\": 0.999, \"eps\": 1e-08, "
		"\"weight_decay\": 0, \"clip_norm\": 0, \"lr_gamma\": 0.10000000000000001, "
		"\"lr_min\": 0, \"val_split\": 0, \"nesterov\": 0, \"lr_step\": 1, "
		"\"warmup_steps\": 0, \"batch\": 32, \"epochs\": 3, \"seed\": 9223372036854775807, "
		"\"shuffle\": 0, \"checkpoint_every\": 0, \"steps_per_epoch\": 938, "
		"\"epoch_step\": 17, \"epoch_loss_sum\": 1234.5678901234567, \"epoch_correct\": 1003, "
		"\"epoch_seen\": 1088, \"keep_denormals\": 1}";
	g->train->run = NULL;
	g->train->config = ml_graph_strdup(g, old);
	ml_train_state_init(&back);
	good = ml_train_state_get(&back, g, &e) == 0 && back.opts.loss == ML_LOSS_MSE &&
	       back.opts.optimizer == ML_OPTIM_ADAMW && back.sched.kind == ML_LR_COSINE &&
	       back.sched.lr == 0.1 && back.opts.momentum == 0.9 && back.batch == 32 &&
	       back.sched.epochs == 3 && back.opts.seed == INT64_MAX && !back.shuffle &&
	       back.sched.steps_per_epoch == 938 && back.epoch_step == 17 &&
	       back.epoch_loss_sum == 1234.5678901234567 && back.epoch_correct == 1003 &&
	       back.epoch_seen == 1088 && back.keep_denormals && back.step == 1955 &&
	       back.epoch == 2 && back.opts.output == 0;
	ok(good, "an older checkpoint's JSON state reads into the same fields");
	static const char *const bad[] = {
		"{\"batch\": 1.5}", "{\"loss\": \"hinge\"}", "{\"seed\": -1}", "{\"lr\": \"x\"}",
		"{\"epoch_step\": 939, \"steps_per_epoch\": 938}", "{\"batch\": 0}", "{\"a\": ",
		"{\"optimizer\": 1}",
	};
	good = true;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		g->train->config = ml_graph_strdup(g, bad[i]);
		ml_train_state_init(&back);
		int rc = ml_train_state_get(&back, g, &e);
		if (rc != ML_EFORMAT || strstr(e.msg, "damaged training state") != e.msg) {
			printf("# %s: %d %s\n", bad[i], rc, e.msg);
			good = false;
		}
	}
	ok(good, "a damaged JSON state is ML_EFORMAT, \"damaged training state...\"");
	g->train->config = ml_graph_strdup(g, "{}");
	int rc1 = ml_train_state_get(&back, g, &e);
	g->train->config = NULL;
	int rc2 = ml_train_state_get(&back, g, &e);
	ok(rc1 == ML_EINVAL && rc2 == ML_EINVAL && ml_train_state_get(&back, sg, &e) == ML_EINVAL,
	   "no run state in either form (a step graph has none) is ML_EINVAL");
	ml_graph_free(g);
	g = NULL;

	/* a checkpoint written and read; the model stripped */
	const char *path = "test_train_ckpt.mlg";
	ml_train_state_init(&st);
	st.step = mlp->train->step;
	st.epoch = 1;
	good = ml_graph_clone(&g, mlp, &e) == 0 &&
	       ml_train_checkpoint_save(g, sg, &st, path, &e) == 0 &&
	       ml_model_load(&r, path, ML_FMT_AUTO, &e) == 0 && r->train != NULL &&
	       r->train->n_slots == mlp->train->n_slots && ml_train_state_get(&back, r, &e) == 0 &&
	       same_state(&st, &back);
	remove(path);
	if (!good)
		printf("# checkpoint: %s\n", e.msg);
	ok(good, "ml_train_checkpoint_save writes a checkpoint that loads back with its state");
	int64_t c0, b0, c1, b1;
	ml_graph_param_stats(r != NULL ? r : g, &c0, &b0);
	int n = r != NULL ? r->train->n_slots : -1;
	int dropped = r != NULL ? ml_train_strip(r, &e) : -1;
	struct ml_graph *model = from_text(mlp_text);
	good = dropped == n && r->train == NULL && model != NULL;
	if (good) {
		ml_graph_param_stats(r, &c1, &b1);
		int64_t cm, bm;
		ml_graph_param_stats(model, &cm, &bm);
		good = c1 == cm && c0 > 2 * cm && ml_graph_find(r, "train.step") < 0 &&
		       ml_graph_validate(r, &e) == 0;
	}
	ok(good, "ml_train_strip drops the slots: the model's own parameter count is left");
	ok(ml_train_strip(r, &e) == 0, "stripping a model without a training state drops nothing");
	ok(ml_train_is_step(sg) && !ml_train_is_step(mlp),
	   "ml_train_is_step tells a step graph from a model");
	struct ml_graph *sc = NULL;
	good = ml_graph_clone(&sc, sg, &e) == 0 && ml_train_strip(sc, &e) == ML_EINVAL &&
	       sc->train != NULL && sc->n_tensors == sg->n_tensors;
	ok(good, "ml_train_strip refuses a step graph and leaves it as it was");
	ml_graph_free(sc);
	ml_graph_free(model);
	ml_graph_free(r);
	ml_graph_free(g);
}

/*
 * Loss scaling: a step graph of o.loss_scale takes "loss_scale" and outputs
 * "train.finite" last. A scale whose gradients overflow (an infinite
 * one: the loss output stays finite, every gradient is not) skips the step: the weights, the Adam moments and train.step keep their bytes;
 * then S = 4 steps as S = 0 does (a power of two unscales exactly).
 */
static void
test_loss_scale(void)
{
	struct ml_err e = { 0 };
	struct ml_train_opts o;
	struct ml_graph *m = from_text(mlp_text), *g = NULL, *ref = NULL;
	struct ml_session *s = NULL, *rs = NULL;
	struct batch b = { 0 };
	struct ml_tval ls = { 0 };
	bool good = m != NULL;
	ml_train_opts_init(&o);
	o.optimizer = ML_OPTIM_ADAM;
	o.clip_norm = 1;
	if (good && ml_train_step_graph(&ref, m, &o, &e) < 0)
		good = false;
	o.loss_scale = 65536;
	if (good && ml_train_step_graph(&g, m, &o, &e) < 0)
		good = false;
	int fin = -1;
	for (int i = 0; good && i < g->n_outputs; i++)
		if (strcmp(g->tensors[g->outputs[i]]->name, "train.finite") == 0)
			fin = i;
	ok(good && fin == g->n_outputs - 1 && ml_graph_find(g, "loss_scale") >= 0 &&
	   ml_graph_find(ref, "loss_scale") < 0, "loss scaling adds the input loss_scale and the "
	   "output train.finite, last");
	/* the stored tensors (weights, moments, train.step) a skipped step must leave alone */
	size_t nbytes = 0;
	for (int t = 0; good && t < g->n_tensors; t++)
		if (g->tensors[t]->kind == ML_TK_PARAM)
			nbytes += g->tensors[t]->nbytes;
	uint8_t *before = malloc(nbytes + 1), *p;
	blobs(&b, 16);
	set_lr(&b, 0.05f);
	good = good && before != NULL && ml_tval_alloc(&ls, ML_F32, 0, NULL, &e) == 0 &&
	       ml_session_new(&s, g, NULL, &e) == 0 && ml_session_new(&rs, ref, NULL, &e) == 0;
	double l, lr_;
	bool skipped = false, stepped = false, same = false;
	if (good) {
		p = before;
		for (int t = 0; t < g->n_tensors; t++)
			if (g->tensors[t]->kind == ML_TK_PARAM) {
				memcpy(p, g->tensors[t]->data, g->tensors[t]->nbytes);
				p += g->tensors[t]->nbytes;
			}
		*(float *)ls.data = INFINITY;
		good = ml_session_set_input(s, "loss_scale", &ls, &e) == 0 && step(s, &b, &l, &e) == 0 &&
		       ml_session_sync(s, &e) == 0;
		const struct ml_tval *f = good ? ml_session_output(s, fin) : NULL;
		skipped = f != NULL && ml_get_f64(f->data, f->dtype, 0) == 0 && isfinite(l);
		p = before;
		for (int t = 0; good && t < g->n_tensors; t++)
			if (g->tensors[t]->kind == ML_TK_PARAM) {
				skipped &= memcmp(p, g->tensors[t]->data,
						  g->tensors[t]->nbytes) == 0;
				p += g->tensors[t]->nbytes;
			}
		*(float *)ls.data = 4;
		good = good && ml_session_set_input(s, "loss_scale", &ls, &e) == 0 &&
		       step(s, &b, &l, &e) == 0 && step(rs, &b, &lr_, &e) == 0 &&
		       ml_session_sync(s, &e) == 0 && ml_session_sync(rs, &e) == 0;
		f = good ? ml_session_output(s, fin) : NULL;
		stepped = f != NULL && ml_get_f64(f->data, f->dtype, 0) == 1 && l == lr_;
		const int64_t *st = (const int64_t *)g->tensors[ml_graph_find(g, "train.step")]->data;
		stepped &= *st == 1;
		same = good;
		for (int t = 0; good && t < g->n_tensors; t++) {
			const struct ml_tensor *x = g->tensors[t];
			int r = ml_graph_find(ref, x->name);
			if (x->kind != ML_TK_PARAM)
				continue;
			same &= r >= 0 && memcmp(x->data, ref->tensors[r]->data,
						 x->nbytes) == 0;
		}
	}
	if (!good)
		printf("# loss scale: %s\n", e.msg);
	ok(good && skipped, "an overflowing scale skips the step: weights, moments and train.step "
	   "keep their bytes");
	ok(good && stepped && same, "a power-of-two scale then steps as no scaling does, bit for bit "
	   "(Adam, clipping)");
	free(before);
	ml_tval_clear(&ls);
	batch_free(&b);
	ml_session_free(s);
	ml_session_free(rs);
	ml_graph_free(g);
	ml_graph_free(ref);
	ml_graph_free(m);
}

int
main(void)
{
	struct ml_err e = { 0 };
	struct ml_train_opts o;
	double loss, acc;

	ml_set_threads(1);
	test_loss_scale();

	/* MLP on blobs */
	struct ml_graph *mlp = from_text(mlp_text), *sg = NULL;
	ml_train_opts_init(&o);
	o.momentum = 0.9;
	bool tr = mlp != NULL && train(mlp, &o, blobs, 300, 32, &loss, &acc, &sg) == 0;
	ok(tr && loss < 0.1 && acc > 0.95, "a tiny MLP reaches a low loss with SGD momentum");
	ok(sg != NULL && phases_ok(sg), "every node of a step graph is named with its phase");
	ok(sg != NULL && side_effects_last(sg), "the update nodes come after every other node");

	/* export, eval, resume */
	if (sg != NULL && mlp != NULL) {
		struct batch b = { 0 };
		blobs(&b, 16);
		set_lr(&b, 0.05f);
		bool good = ml_train_export(mlp, sg, &e) == 0;
		/* the exported model, in eval mode, computes what the step graph's forward does */
		struct ml_session *s = NULL, *ms = NULL;
		good = good && ml_session_new(&s, sg, NULL, &e) == 0 &&
		       ml_session_new(&ms, mlp, NULL, &e) == 0;
		double l;
		good = good && ml_session_set_input(ms, "x", &b.x, &e) == 0 &&
		       ml_session_run(ms, &e) == 0 && step(s, &b, &l, &e) == 0;
		if (good) {
			const struct ml_tval *a = ml_session_output(ms, 0), *c = ml_session_output(s, 1);
			for (int64_t i = 0; i < ml_tval_numel(a); i++)
				good &= fabsf(((float *)a->data)[i] - ((float *)c->data)[i]) < 1e-5f;
		}
		ml_session_free(s);
		ml_session_free(ms);
		ok(good, "the exported model computes the trained forward pass in eval mode");
		/* resume: export again (after that step), save, reload, one more step each */
		good = ml_train_export(mlp, sg, &e) == 0 && mlp->train != NULL &&
		       mlp->train->n_slots > 0 && mlp->train->step == 301;
		struct ml_graph *saved = good ? mlg_roundtrip(mlp) : NULL, *sg2 = NULL;
		good = good && saved != NULL && ml_train_step_graph(&sg2, saved, &o, &e) == 0;
		float p1[64], p2[64];
		double l1 = good ? one_step(sg, &b, "dense2.weight", p1, 48) : 0;
		double l2 = good ? one_step(sg2, &b, "dense2.weight", p2, 48) : 1;
		good = good && l1 == l2 && memcmp(p1, p2, sizeof(float) * 48) == 0;
		if (!good)
			printf("# resume: %s (loss %g vs %g)\n", e.msg, l1, l2);
		ok(good, "a saved model resumes exactly (parameters, momentum, step count)");
		/* the step graph round-trips through the graph file */
		struct ml_graph *rt = mlg_roundtrip(sg);
		l1 = one_step(sg, &b, "dense2.weight", p1, 48);
		l2 = rt != NULL ? one_step(rt, &b, "dense2.weight", p2, 48) : 0;
		ok(rt != NULL && l1 == l2 && memcmp(p1, p2, sizeof(float) * 48) == 0,
		   "a step graph round-trips through the .mlg writer and reader");
		ok(rt != NULL && side_effects_last(rt), "the update nodes stay last after reading");
		train_state(mlp, sg);
		ml_graph_free(rt);
		ml_graph_free(saved);
		ml_graph_free(sg2);
		batch_free(&b);
	}
	ml_graph_free(sg);
	sg = NULL;

	/* Adam and AdamW train the MLP too; clipping keeps working */
	ml_graph_free(mlp);
	mlp = from_text(mlp_text);
	ml_train_opts_init(&o);
	o.optimizer = ML_OPTIM_ADAMW;
	o.weight_decay = 0.01;
	o.clip_norm = 1.0;
	tr = mlp != NULL && train(mlp, &o, blobs, 300, 32, &loss, &acc, NULL) == 0;
	ok(tr && loss < 0.1, "a tiny MLP reaches a low loss with AdamW and gradient clipping");
	ml_train_opts_init(&o);
	o.momentum = 0.9;
	o.nesterov = true;
	o.weight_decay = 1e-4;
	tr = mlp != NULL && train(mlp, &o, blobs, 300, 32, &loss, &acc, NULL) == 0;
	ok(tr && loss < 0.1, "a tiny MLP reaches a low loss with Nesterov SGD and weight decay");
	ml_graph_free(mlp);

	/* frozen parameters stay as they are and get no optimizer state */
	mlp = from_text(mlp_text);
	if (mlp != NULL) {
		const char *fz[1] = { "dense1.weight" };
		float before[64];
		memcpy(before, tdata(mlp, "dense1.weight"), sizeof before);
		ml_train_opts_init(&o);
		o.momentum = 0.9;
		o.frozen = fz;
		o.n_frozen = 1;
		tr = train(mlp, &o, blobs, 100, 32, &loss, &acc, &sg) == 0;
		ok(tr && memcmp(before, tdata(sg, "dense1.weight"), sizeof before) == 0 &&
		   ml_graph_find(sg, "dense1.weight.momentum") < 0 &&
		   ml_graph_find(sg, "dense2.weight.momentum") >= 0 && loss < 0.3,
		   "frozen parameters are not trained");
		ml_graph_free(sg);
		sg = NULL;
		ml_graph_free(mlp);
	}

	/* CNN on bars */
	struct ml_graph *cnn = from_text(cnn_text);
	ml_train_opts_init(&o);
	o.momentum = 0.9;
	tr = cnn != NULL && train(cnn, &o, bars, 200, 32, &loss, &acc, &sg) == 0;
	ok(tr && loss < 0.15 && acc > 0.9,
	   "a tiny CNN (conv, batchnorm, relu, maxpool, dense) reaches a low loss");
	if (sg != NULL) {
		/* running statistics moved and come back into the model */
		bool good = ml_train_export(cnn, sg, &e) == 0;
		const float *var = tdata(cnn, "norm1.var");
		if (var == NULL)
			var = tdata(cnn, "norm2.var");
		int bn = 0;
		for (int i = 0; i < cnn->n_nodes; i++)
			bn += cnn->nodes[i].op == ML_OP_BATCH_NORM;
		good = good && bn == 1;
		for (int t = 0; t < cnn->n_tensors; t++) {
			const struct ml_tensor *ten = cnn->tensors[t];
			size_t L = strlen(ten->name);
			if (L > 4 && strcmp(ten->name + L - 4, ".var") == 0)
				good &= ((const float *)ten->data)[0] != 1.0f;
		}
		(void)var;
		ok(good, "BatchNormalization's running statistics are trained and exported (eval "
			 "mode kept)");
	}
	ml_graph_free(sg);
	sg = NULL;
	ml_graph_free(cnn);

	/*
	 * PyTorch's exporter shares equal initializers through Identity nodes
	 * (a running variance of ones read from a BatchNorm scale of ones):
	 * training gives each its own storage, and the export too.
	 */
	cnn = from_text(cnn_text);
	if (cnn != NULL) {
		int bn = -1;
		for (int i = 0; i < cnn->n_nodes; i++)
			if (cnn->nodes[i].op == ML_OP_BATCH_NORM)
				bn = i;
		const char *in = cnn->tensors[cnn->nodes[bn].in[1]]->name, *out = "shared_var";
		char scale[64];
		snprintf(scale, sizeof scale, "%s", in);
		ml_graph_add_node(cnn, "Identity", "", "dedup", 1, &in, 1, &out, &e);
		cnn->nodes[bn].in[4] = ml_graph_find(cnn, "shared_var");
		bool good = ml_graph_toposort(cnn, &e) == 0 && ml_graph_infer(cnn, &e) == 0;
		ml_train_opts_init(&o);
		o.momentum = 0.9;
		good = good && train(cnn, &o, bars, 50, 32, &loss, &acc, &sg) == 0 &&
		       ml_train_export(cnn, sg, &e) == 0;
		int v = ml_graph_find(cnn, "shared_var"), sc = ml_graph_find(cnn, scale);
		good = good && v >= 0 && cnn->tensors[v]->kind == ML_TK_CONST &&
		       cnn->tensors[v]->data != NULL && sc >= 0 &&
		       memcmp(cnn->tensors[v]->data, cnn->tensors[sc]->data, 4 * 4) != 0;
		for (int i = 0; i < cnn->n_nodes; i++)
			good &= cnn->nodes[i].op != ML_OP_IDENTITY;
		ok(good, "parameters shared through Identity nodes train apart and export apart");
		ml_graph_free(sg);
		sg = NULL;
		ml_graph_free(cnn);
	}

	/* Dropout in training mode */
	struct ml_graph *dm = from_text(drop_text);
	ml_train_opts_init(&o);
	o.momentum = 0.9;
	o.seed = 42;
	tr = dm != NULL && train(dm, &o, blobs, 300, 32, &loss, &acc, &sg) == 0;
	int rt = sg != NULL ? ml_graph_find(sg, "train.rng") : -1;
	ok(tr && loss < 0.2 && rt >= 0 && ((int64_t *)sg->tensors[rt]->data)[0] == 42 &&
	   ((int64_t *)sg->tensors[rt]->data)[1] == 300,
	   "Dropout trains in training mode with a seeded RNG state that counts steps");
	ml_graph_free(sg);
	sg = NULL;
	ml_graph_free(dm);

	test_sgd_by_hand(false);
	test_sgd_by_hand(true);
	test_fuse();
	test_fused_kernels();

	/* toposort places nodes without outputs last */
	{
		struct ml_graph *g = NULL;
		ml_graph_new(&g, &e);
		int64_t d = 2;
		float v[2] = { 1, 2 };
		ml_graph_set_data(g, ml_graph_tensor(g, "p"), ML_TK_PARAM, ML_F32, 1, &d, v, sizeof v, &e);
		const char *a_in[2] = { "p", "q" }, *n_in[1] = { "p" }, *q = "q", *r = "r";
		ml_graph_add_node(g, "Assign", "ml", "assign", 2, a_in, 0, NULL, &e);
		ml_graph_add_node(g, "Neg", "", "neg", 1, n_in, 1, &q, &e);
		const char *r_in[1] = { "p" };
		ml_graph_add_node(g, "Relu", "", "relu", 1, r_in, 1, &r, &e);
		ml_graph_add_output(g, ml_graph_find(g, "r"), &e);
		bool good = ml_graph_toposort(g, &e) == 0 && strcmp(g->nodes[2].name, "assign") == 0 &&
			    strcmp(g->nodes[0].name, "neg") == 0;
		ok(good, "toposort puts ml.Assign after every reader of its target");
		ml_graph_free(g);
	}

	/* bad options and unsupported models */
	mlp = from_text(mlp_text);
	if (mlp != NULL) {
		ml_train_opts_init(&o);
		o.output = 3;
		int rc = ml_train_step_graph(&sg, mlp, &o, &e);
		ok(rc == ML_EINVAL && sg == NULL, "a loss on an output the model lacks is ML_EINVAL");
		ml_train_opts_init(&o);
		o.momentum = 1.5;
		rc = ml_train_step_graph(&sg, mlp, &o, &e);
		ok(rc == ML_EINVAL, "a momentum out of range is ML_EINVAL");
		ml_train_opts_init(&o);
		o.loss = 9;
		rc = ml_train_step_graph(&sg, mlp, &o, &e);
		ok(rc == ML_EINVAL, "an unknown loss is ML_EINVAL");
		ok(ml_loss_from_name("softmax-cross-entropy") == ML_LOSS_SCE &&
		   ml_loss_from_name("bce-with-logits") == ML_LOSS_BCE_LOGITS &&
		   ml_optim_from_name("adamw") == ML_OPTIM_ADAMW && ml_optim_from_name("x") == -1 &&
		   strcmp(ml_loss_name(ML_LOSS_MSE), "mse") == 0,
		   "loss and optimizer names map both ways");
		int np;
		int64_t ne;
		ml_train_param_count(mlp, NULL, &np, &ne);
		ok(np == 4 && ne == 4 * 16 + 16 + 16 * 3 + 3, "ml_train_param_count counts the MLP");
		ml_graph_free(mlp);
	}
	schedules();
	train_config();
	test_accumulate();	/* its draws must not move the other tests' */
	test_precision();	/* after test_accumulate, for the same reason */
	printf("1..%d\n", ntest);
	return nfail != 0;
}
