/*
 * test_qat.c: quantization-aware training (lib/quant/qat.c): FakeQuant's
 * forward values and straight-through gradient; ml_quant_insert_fakequant
 * on a tiny MLP (inserting twice changes nothing); the MLP trains with its
 * fake-quant nodes (loss decreases); ml_quantize of the trained model drops
 * the FakeQuant nodes and takes their activation ranges instead of the
 * calibration data's. Prints TAP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;

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

static int
count_op(const struct ml_graph *g, const char *op)
{
	int n = 0;
	for (int i = 0; i < g->n_nodes; i++)
		n += strcmp(g->nodes[i].op_type, op) == 0;
	return n;
}

/* FakeQuant(x, 0.1, 10) over [0, 255] and d sum(y) / dx: 1 inside [-1, 24.5], else 0 */
static void
test_op(void)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	struct ml_session *s = NULL;
	struct ml_tval x = { 0 };
	static const float xv[8] = { -3, -1.04f, -0.96f, 0, 0.123f, 7.77f, 24.4f, 30 };
	float sc = 0.1f;
	uint8_t zp = 10;
	int64_t d[1] = { 8 };
	bool good = false;

	if (ml_graph_new(&g, &e) < 0)
		goto out;
	ml_graph_set_opset(g, "", 17, &e);
	int xi = ml_graph_tensor(g, "x");
	ml_graph_t(g, xi)->kind = ML_TK_INPUT;
	ml_graph_t(g, xi)->dtype = ML_F32;
	ml_graph_t(g, xi)->rank = 1;
	ml_graph_t(g, xi)->dims[0] = 8;
	ml_graph_add_input(g, xi, &e);
	ml_graph_set_data(g, ml_graph_tensor(g, "s"), ML_TK_CONST, ML_F32, 0, NULL, &sc, 4, &e);
	ml_graph_set_data(g, ml_graph_tensor(g, "z"), ML_TK_CONST, ML_U8, 0, NULL, &zp, 1, &e);
	const char *in[3] = { "x", "s", "z" }, *out[1] = { "y" }, *in2[1] = { "y" }, *o2[1] = { "l" };
	int ni = ml_graph_add_node(g, "FakeQuant", "ml", "fq", 3, in, 1, out, &e);
	ml_node_set_int(g, ni, "qmin", 0);
	ml_node_set_int(g, ni, "qmax", 255);
	ml_graph_add_node(g, "ReduceSum", "", "sum", 1, in2, 1, o2, &e);
	ml_graph_add_output(g, ml_graph_find(g, "y"), &e);
	int gx = -1, li = ml_graph_find(g, "l");
	if (ml_graph_toposort(g, &e) < 0 || ml_graph_infer(g, &e) < 0 ||
	    ml_grad(g, li, &xi, 1, &gx, &e) < 0 || gx < 0 ||
	    ml_graph_add_output(g, gx, &e) < 0 || ml_graph_toposort(g, &e) < 0 ||
	    ml_graph_infer(g, &e) < 0 || ml_session_new(&s, g, NULL, &e) < 0 ||
	    ml_tval_alloc(&x, ML_F32, 1, d, &e) < 0)
		goto out;
	memcpy(x.data, xv, sizeof xv);
	if (ml_session_set_input(s, "x", &x, &e) < 0 || ml_session_run(s, &e) < 0)
		goto out;
	const float *y = ml_session_output(s, 0)->data, *dx = ml_session_output(s, 1)->data;
	bool fwd = true, ste = true;
	for (int i = 0; i < 8; i++) {
		float q = nearbyintf(xv[i] / sc) + zp;
		q = q < 0 ? 0 : q > 255 ? 255 : q;
		float want = (q - zp) * sc, wd = xv[i] >= -1.0f && xv[i] <= 24.5f ? 1 : 0;
		printf("# x %g y %g (want %g) dx %g (want %g)\n", xv[i], y[i], want, dx[i], wd);
		fwd &= fabsf(y[i] - want) < 1e-6f;
		ste &= dx[i] == wd;
	}
	ok(fwd, "FakeQuant forward is (clamp(round(x/s)+zp) - zp) * s");
	ok(ste, "FakeQuant gradient is the straight-through estimator");
	good = true;
out:
	if (!good) {
		printf("# op test: %s\n", e.msg);
		ok(false, "FakeQuant op and gradient");
	}
	ml_tval_clear(&x);
	ml_session_free(s);
	ml_graph_free(g);
}

/* blobs: n points of 4 features in 3 classes */
static void
blobs(struct ml_tval *x, struct ml_tval *y, int n, float gain)
{
	struct ml_err e = { 0 };
	int64_t xd[2] = { n, 4 }, yd[1] = { n };
	static const float mu[3][4] = { { 2, 0, 0, 1 }, { -2, 1, 0, -1 }, { 0, -2, 2, 0 } };
	ml_tval_clear(x);
	ml_tval_clear(y);
	ml_tval_alloc(x, ML_F32, 2, xd, &e);
	ml_tval_alloc(y, ML_I64, 1, yd, &e);
	for (int i = 0; i < n; i++) {
		int k = (int)(urand() * 3) % 3;
		((int64_t *)y->data)[i] = k;
		for (int j = 0; j < 4; j++)
			((float *)x->data)[i * 4 + j] = gain * (mu[k][j] + 0.5f * (float)nrand());
	}
}

static const char *mlp_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 1>\n"
	"mlp (float[N,4] x) => (float[N,3] y)\n"
	"{\n    dense(units=16, act=relu)\n    dense(units=3)\n}\n";

static float
const_f32(const struct ml_graph *g, const char *name)
{
	int t = ml_graph_find(g, name);
	return t >= 0 && ml_graph_t(g, t)->data != NULL ? *(const float *)ml_graph_t(g, t)->data : NAN;
}

static void
test_mlp(void)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL, *sg = NULL, *q = NULL, *qi = NULL;
	struct ml_session *s = NULL;
	struct ml_tval x = { 0 }, y = { 0 }, lr = { 0 }, cx = { 0 }, cy = { 0 };
	struct ml_train_opts to;
	bool good = false;

	if (ml_text_decode(&g, mlp_text, strlen(mlp_text), "mlp.mlt", &e) < 0 ||
	    ml_graph_toposort(g, &e) < 0 || ml_graph_infer(g, &e) < 0)
		goto out;
	int n0 = g->n_nodes;
	blobs(&x, &y, 64, 1);
	struct ml_calib cal = { .n_in = 1, .n_batches = 1, .samples = 64, .b = &x };
	struct ml_quant_qat_opts qo = { .cal = &cal };
	if (ml_quant_insert_fakequant(g, &qo, &e) < 0)
		goto out;
	int nfq = count_op(g, "FakeQuant");
	printf("# %d nodes, %d FakeQuant after insertion\n", g->n_nodes, nfq);
	ok(nfq == 4 && g->n_nodes == n0 + 4, "FakeQuant on both weights and both activations");
	float xs = const_f32(g, "x.fq.scale");
	ok(xs > 0, "the input's range is fixed from the first batch");
	int nn = g->n_nodes, nt = g->n_tensors;
	if (ml_quant_insert_fakequant(g, &qo, &e) < 0)
		goto out;
	ok(g->n_nodes == nn && g->n_tensors == nt && count_op(g, "FakeQuant") == 4,
	   "inserting twice changes nothing");

	ml_train_opts_init(&to);
	to.momentum = 0.9;
	if (ml_train_step_graph(&sg, g, &to, &e) < 0 || ml_session_new(&s, sg, NULL, &e) < 0 ||
	    ml_tval_alloc(&lr, ML_F32, 0, NULL, &e) < 0)
		goto out;
	*(float *)lr.data = 0.05f;
	double first = 0, last = 0;
	for (int i = 0; i < 150; i++) {
		blobs(&x, &y, 32, 1);
		if (ml_session_set_input(s, "x", &x, &e) < 0 ||
		    ml_session_set_input(s, "label", &y, &e) < 0 ||
		    ml_session_set_input(s, "lr", &lr, &e) < 0 || ml_session_run(s, &e) < 0)
			goto out;
		const struct ml_tval *l = ml_session_output(s, 0);
		double v = ml_get_f64(l->data, l->dtype, 0);
		if (i < 10)
			first += v / 10;
		if (i >= 130)
			last += v / 20;
	}
	printf("# loss: first 10 steps %.4f, last 20 steps %.4f\n", first, last);
	ok(last < first * 0.5 && last < 0.4, "the MLP trains with fake quantisation");
	if (ml_train_export(g, sg, &e) < 0)
		goto out;
	ok(count_op(g, "FakeQuant") == 4, "the exported model keeps its FakeQuant nodes");

	/* calibration data 10 times as large: mlquant must not use it for fake-quantised tensors */
	blobs(&cx, &cy, 64, 10);
	struct ml_calib cal10 = { .n_in = 1, .n_batches = 1, .samples = 64, .b = &cx };
	struct ml_quant_opts o = { .form = ML_QFORM_QDQ };
	if (ml_quantize(&q, g, &cal10, &o, NULL, &e) < 0)
		goto out;
	float qs = NAN;
	for (int i = 0; i < q->n_nodes; i++)
		if (strcmp(q->nodes[i].op_type, "QuantizeLinear") == 0 &&
		    strcmp(ml_graph_t(q, q->nodes[i].in[0])->name, "x") == 0)
			qs = *(const float *)ml_graph_t(q, q->nodes[i].in[1])->data;
	printf("# x: FakeQuant scale %g, QDQ scale %g\n", xs, qs);
	ok(count_op(q, "FakeQuant") == 0, "the quantised model has no FakeQuant");
	ok(qs == xs, "the QDQ model quantises x with the trained range");
	struct ml_quant_opts oi = { .form = ML_QFORM_INT };
	if (ml_quantize(&qi, g, NULL, &oi, NULL, &e) < 0)
		goto out;
	ok(count_op(qi, "FakeQuant") == 0 && count_op(qi, "Gemm") == 0,
	   "the integer form needs no calibration data for a QAT model");
	good = true;
out:
	if (!good) {
		printf("# mlp: %s\n", e.msg);
		ok(false, "QAT of the MLP");
	}
	ml_session_free(s);
	ml_graph_free(sg);
	ml_graph_free(q);
	ml_graph_free(qi);
	ml_graph_free(g);
	ml_tval_clear(&x);
	ml_tval_clear(&y);
	ml_tval_clear(&cx);
	ml_tval_clear(&cy);
	ml_tval_clear(&lr);
}

int
main(void)
{
	test_op();
	test_mlp();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
