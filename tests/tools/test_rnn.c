/*
 * test_rnn.c: C tests of the CPU kernels of RNN, GRU and LSTM
 * (lib/cpu/rnn.c) against a naive double-precision reference written from
 * the ONNX definitions: one-node graphs over the three directions, two
 * sizes (hidden 5, and 37 for the transposes' 4 x 4 blocks with edges),
 * with and without B, initial_h/c and sequence_lens, both layouts, clip,
 * GRU's linear_before_reset, LSTM's peepholes and input_forget, the
 * default activations (the vectorised gates) and others (the scalar
 * loop), each with the step's own product, forced BLAS product
 * (ML_RNN_STEP=blas) and forced own product (ML_RNN_STEP=own); and a size
 * above the own product's limit, where BLAS is chosen by itself. Prints TAP.
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
	fflush(stdout);
}

static uint64_t rs = 88172645463325252ull;

static float
frand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (float)((double)(rs >> 11) * 0x1.0p-53 * 2 - 1);
}

static int
irand(int n)
{
	return (int)((frand() + 1.0f) * 0.5f * (float)n) % n;
}

enum kind { RNN, GRU, LSTM };

/* One case: the op, its sizes and options. */
struct rcase {
	enum kind k;
	int dirs;		/* 1 or 2 */
	bool reverse;		/* with dirs == 1 */
	int64_t seq, batch, in, h;
	bool bias, init, lens, layout1, lbr, peep, cifg, other_acts;
	float clip;
};

/* The activations: the defaults, or others that take the scalar loop. */
enum act { SIG, TANH, RELU, HSIG };

static double
act(enum act a, double x)
{
	switch (a) {
	case SIG:
		return 1.0 / (1.0 + exp(-x));
	case TANH:
		return tanh(x);
	case RELU:
		return x > 0 ? x : 0;
	case HSIG:
		return fmax(0.0, fmin(1.0, 0.2 * x + 0.5));
	}
	return x;
}

static double
clipd(const struct rcase *c, double v)
{
	if (c->clip > 0)
		v = v < -c->clip ? -c->clip : v > c->clip ? c->clip : v;
	return v;
}

/*
 * ref_elem: element j of the new hidden state (and *cv, LSTM's cell, in
 * place) from g = W x + Wb and gr = R h + Rb of the step, h the previous
 * state, rh the direction's R, pd its peepholes (NULL: none).
 */
static double
ref_elem(const struct rcase *c, const enum act *f, int64_t j, const double *g, const double *gr,
	 const float *rb, const float *rh, const float *pd, const double *h, double *cv)
{
	int64_t H = c->h;

	if (c->k == RNN)
		return act(f[0], clipd(c, g[j] + gr[j]));
	if (c->k == GRU) {
		double z = act(f[0], clipd(c, g[j] + gr[j]));
		double rg = act(f[0], clipd(c, g[H + j] + gr[H + j]));
		double hh;
		if (c->lbr) {
			hh = act(f[1], clipd(c, g[2 * H + j] + rg * gr[2 * H + j]));
		} else {
			/* Rh (r . h) + Rbh: the product over r . h, not over h */
			double u = rb ? rb[2 * H + j] : 0;
			for (int64_t i = 0; i < H; i++)
				u += (double)rh[(2 * H + j) * H + i] *
				     act(f[0], clipd(c, g[H + i] + gr[H + i])) * h[i];
			hh = act(f[1], clipd(c, g[2 * H + j] + u));
		}
		return (1 - z) * hh + z * h[j];
	}
	double pi = pd ? pd[j] : 0, po = pd ? pd[H + j] : 0, pf = pd ? pd[2 * H + j] : 0;
	double ig = act(f[0], clipd(c, g[j] + gr[j] + pi * *cv));
	double fg = act(f[0], clipd(c, g[2 * H + j] + gr[2 * H + j] + pf * *cv));
	if (c->cifg)
		fg = 1 - ig;
	double cn = fg * *cv + ig * act(f[1], clipd(c, g[3 * H + j] + gr[3 * H + j]));
	double og = act(f[0], clipd(c, g[H + j] + gr[H + j] + po * cn));
	*cv = cn;
	return og * act(f[2], cn);
}

/*
 * reference: Y [seq, dirs, batch, h] (layout 0) or [batch, seq, dirs, h],
 * Y_h and Y_c [dirs, batch, h] or [batch, dirs, h], in double, one batch
 * entry and one time step at a time, as ONNX writes the equations.
 */
static void
reference(const struct rcase *c, const float *x, const float *w, const float *r, const float *b,
	  const int32_t *lens, const float *h0, const float *c0, const float *p,
	  const enum act *acts, double *y, double *yh, double *yc)
{
	int64_t H = c->h, I = c->in, ng = c->k == LSTM ? 4 : c->k == GRU ? 3 : 1, G = ng * H;
	int nact = c->k == LSTM ? 3 : c->k == GRU ? 2 : 1;
	double *hv = calloc((size_t)H, sizeof(double)), *cv = calloc((size_t)H, sizeof(double));
	double *g = calloc((size_t)G, sizeof(double)), *gr = calloc((size_t)G, sizeof(double));
	double *hn = calloc((size_t)H, sizeof(double));

	memset(y, 0, sizeof(double) * (size_t)(c->seq * c->dirs * c->batch * H));
	for (int64_t db = 0; db < c->dirs * c->batch; db++) {
		int64_t d = db / c->batch, bi = db % c->batch;
		bool rev = c->dirs == 2 ? d == 1 : c->reverse;
		const float *wd = w + d * G * I, *rd = r + d * G * H;
		const float *wb = b ? b + d * 2 * G : NULL, *rb = b ? wb + G : NULL;
		const float *pd = p ? p + d * 3 * H : NULL;
		int64_t len = lens ? lens[bi] : c->seq;
		int64_t so = c->layout1 ? bi * c->dirs + d : d * c->batch + bi;
		for (int64_t j = 0; j < H; j++) {
			hv[j] = h0 ? h0[so * H + j] : 0;
			cv[j] = c0 ? c0[so * H + j] : 0;
		}
		for (int64_t s = 0; s < len; s++) {
			int64_t t = rev ? len - 1 - s : s;
			int64_t row = c->layout1 ? bi * c->seq + t : t * c->batch + bi;
			const float *xt = x + row * I;
			for (int64_t q = 0; q < G; q++) {
				double v = wb ? wb[q] : 0, u = rb ? rb[q] : 0;
				for (int64_t i = 0; i < I; i++)
					v += (double)wd[q * I + i] * xt[i];
				for (int64_t i = 0; i < H; i++)
					u += (double)rd[q * H + i] * hv[i];
				g[q] = v;
				gr[q] = u;
			}
			for (int64_t j = 0; j < H; j++)
				hn[j] = ref_elem(c, acts + d * nact, j, g, gr, rb, rd, pd, hv,
						 &cv[j]);
			memcpy(hv, hn, sizeof(double) * (size_t)H);
			int64_t yo = c->layout1 ? ((bi * c->seq + t) * c->dirs + d) * H :
						  ((t * c->dirs + d) * c->batch + bi) * H;
			memcpy(y + yo, hv, sizeof(double) * (size_t)H);
		}
		memcpy(yh + so * H, hv, sizeof(double) * (size_t)H);
		memcpy(yc + so * H, cv, sizeof(double) * (size_t)H);
	}
	free(hv);
	free(cv);
	free(g);
	free(gr);
	free(hn);
}

static const char *const act_names[] = { "Sigmoid", "Tanh", "Relu", "HardSigmoid" };

/* set_const: tensor name as a constant of random floats (or given ints). */
static float *
set_const(struct ml_graph *g, const char *name, int rank, const int64_t *dims, struct ml_err *e)
{
	int64_t n = 1;
	for (int i = 0; i < rank; i++)
		n *= dims[i];
	float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
	for (int64_t i = 0; i < n; i++)
		v[i] = frand();
	ml_graph_set_data(g, ml_graph_tensor(g, name), ML_TK_CONST, ML_F32, rank, dims, v,
			  sizeof(float) * (size_t)n, e);
	return v;
}

/* run_case: build, run and compare one case; false on any difference or error. */
static bool
run_case(const struct rcase *c)
{
	static const char *const ops[] = { "RNN", "GRU", "LSTM" };
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	struct ml_session *ss = NULL;
	struct ml_tval xt = { 0 };
	int64_t H = c->h, ng = c->k == LSTM ? 4 : c->k == GRU ? 3 : 1;
	int nact = c->k == LSTM ? 3 : c->k == GRU ? 2 : 1, nout = c->k == LSTM ? 3 : 2;
	int64_t xd[3] = { c->layout1 ? c->batch : c->seq, c->layout1 ? c->seq : c->batch, c->in };
	int64_t sd[3] = { c->layout1 ? c->batch : c->dirs, c->layout1 ? c->dirs : c->batch, H };
	float *w = NULL, *r = NULL, *b = NULL, *h0 = NULL, *c0 = NULL, *p = NULL;
	int32_t lens[8];
	enum act acts[6];
	bool good = false;

	if (ml_graph_new(&g, &e) < 0 || ml_graph_set_opset(g, "", 14, &e) < 0)
		goto out;
	int xi = ml_graph_tensor(g, "x");
	g->tensors[xi]->dtype = ML_F32;
	g->tensors[xi]->rank = 3;
	g->tensors[xi]->kind = ML_TK_INPUT;
	memcpy(g->tensors[xi]->dims, xd, sizeof xd);
	ml_graph_add_input(g, xi, &e);
	w = set_const(g, "w", 3, (int64_t[]){ c->dirs, ng * H, c->in }, &e);
	r = set_const(g, "r", 3, (int64_t[]){ c->dirs, ng * H, H }, &e);
	if (c->bias)
		b = set_const(g, "b", 2, (int64_t[]){ c->dirs, 2 * ng * H }, &e);
	if (c->lens) {
		for (int64_t i = 0; i < c->batch; i++)
			lens[i] = (int32_t)(i == 0 ? c->seq : irand((int)c->seq + 1));
		ml_graph_set_data(g, ml_graph_tensor(g, "sl"), ML_TK_CONST, ML_I32, 1,
				  (int64_t[]){ c->batch }, lens, sizeof(int32_t) * (size_t)c->batch,
				  &e);
	}
	if (c->init) {
		h0 = set_const(g, "h0", 3, sd, &e);
		if (c->k == LSTM)
			c0 = set_const(g, "c0", 3, sd, &e);
	}
	if (c->peep)
		p = set_const(g, "p", 2, (int64_t[]){ c->dirs, 3 * H }, &e);
	const char *in[8] = { "x", "w", "r", c->bias ? "b" : "", c->lens ? "sl" : "",
			      c->init ? "h0" : "", c->init ? "c0" : "", c->peep ? "p" : "" };
	const char *outn[3] = { "y", "yh", "yc" };
	int nd = ml_graph_add_node(g, ops[c->k], "", "", c->k == LSTM ? 8 : 6, in, nout, outn, &e);
	if (nd < 0)
		goto out;
	ml_node_set_int(g, nd, "hidden_size", H);
	ml_node_set_string(g, nd, "direction", c->dirs == 2 ? "bidirectional" :
				     c->reverse ? "reverse" : "forward");
	if (c->layout1)
		ml_node_set_int(g, nd, "layout", 1);
	if (c->clip > 0)
		ml_node_set_float(g, nd, "clip", c->clip);
	if (c->lbr)
		ml_node_set_int(g, nd, "linear_before_reset", 1);
	if (c->cifg)
		ml_node_set_int(g, nd, "input_forget", 1);
	for (int d = 0; d < c->dirs; d++) {
		static const enum act def[3][3] = { { TANH }, { SIG, TANH }, { SIG, TANH, TANH } };
		static const enum act oth[3][3] = { { RELU }, { HSIG, TANH }, { SIG, TANH, RELU } };
		for (int i = 0; i < nact; i++)
			acts[d * nact + i] = c->other_acts && d == c->dirs - 1 ? oth[c->k][i] :
					     def[c->k][i];
	}
	if (c->other_acts) {
		struct ml_attr *a = ml_node_add_attr(g, nd, "activations", ML_ATTR_STRINGS);
		a->n = nact * c->dirs;
		a->strings = ml_graph_alloc(g, sizeof(char *) * (size_t)a->n);
		for (int i = 0; i < a->n; i++)
			a->strings[i] = ml_graph_strdup(g, act_names[acts[i]]);
	}
	for (int i = 0; i < nout; i++)
		ml_graph_add_output(g, ml_graph_find(g, outn[i]), &e);
	if (ml_graph_toposort(g, &e) < 0 || ml_graph_validate(g, &e) < 0 ||
	    ml_graph_infer(g, &e) < 0 || ml_session_new(&ss, g, NULL, &e) < 0 ||
	    ml_tval_alloc(&xt, ML_F32, 3, xd, &e) < 0)
		goto out;
	float *xv = xt.data;
	for (int64_t i = 0; i < ml_tval_numel(&xt); i++)
		xv[i] = frand();
	if (ml_session_set_input(ss, "x", &xt, &e) < 0 || ml_session_run(ss, &e) < 0)
		goto out;
	int64_t ny = c->seq * c->dirs * c->batch * H, nh = c->dirs * c->batch * H;
	double *ry = malloc(sizeof(double) * (size_t)ny), *rh = malloc(sizeof(double) * (size_t)nh);
	double *rc = malloc(sizeof(double) * (size_t)nh);
	reference(c, xv, w, r, b, c->lens ? lens : NULL, h0, c0, p, acts, ry, rh, rc);
	good = true;
	const double *want[3] = { ry, rh, rc };
	int64_t cnt[3] = { ny, nh, nh };
	for (int o = 0; o < nout; o++) {
		const struct ml_tval *v = ml_session_output(ss, o);
		if (v == NULL || ml_tval_numel(v) != cnt[o]) {
			good = false;
			continue;
		}
		for (int64_t i = 0; i < cnt[o]; i++) {
			double got = ((const float *)v->data)[i];
			if (!(fabs(got - want[o][i]) <= 2e-5 + 2e-5 * fabs(want[o][i]))) {
				if (good)
					printf("# output %d [%lld]: %.7g, want %.7g\n", o,
					       (long long)i, got, want[o][i]);
				good = false;
			}
		}
	}
	free(ry);
	free(rh);
	free(rc);
out:
	if (e.msg[0] != '\0' && !good)
		printf("# %s\n", e.msg);
	ml_tval_clear(&xt);
	ml_session_free(ss);
	ml_graph_free(g);
	free(w);
	free(r);
	free(b);
	free(h0);
	free(c0);
	free(p);
	return good;
}

static const char *
describe(const struct rcase *c, const char *mode)
{
	static char buf[256];
	static const char *const ops[] = { "RNN", "GRU", "LSTM" };
	snprintf(buf, sizeof buf,
		 "%s %s seq %lld batch %lld in %lld h %lld%s%s%s%s%s%s%s%s clip %g, step %s",
		 ops[c->k], c->dirs == 2 ? "bidirectional" : c->reverse ? "reverse" : "forward",
		 (long long)c->seq, (long long)c->batch, (long long)c->in, (long long)c->h,
		 c->bias ? " B" : "", c->init ? " initial" : "", c->lens ? " lens" : "",
		 c->layout1 ? " layout 1" : "", c->lbr ? " lbr" : "", c->peep ? " P" : "",
		 c->cifg ? " input_forget" : "", c->other_acts ? " other activations" : "",
		 (double)c->clip, mode);
	return buf;
}

int
main(void)
{
	static const char *const modes[] = { NULL, "blas", "own" };
	static const int64_t hs[] = { 5, 37 };

	/* op x direction (forward, reverse, both) x hidden x 4 variants of the options */
	for (int i = 0; i < 3 * 3 * 2 * 4; i++) {
		int k = i / 24, dir = i / 8 % 3, v = i % 4;
		struct rcase c = {
			.k = (enum kind)k, .dirs = dir == 2 ? 2 : 1, .reverse = dir == 1,
			.seq = 1 + irand(5), .batch = 1 + irand(3), .in = 3 + irand(14),
			.h = hs[i / 4 % 2],
			/* every option on in some variant, off in another */
			.bias = v != 1, .init = v >= 2, .lens = v == 1 || v == 3, .layout1 = v == 2,
			.lbr = k == GRU && (v & 1), .peep = k == LSTM && (v == 0 || v == 3),
			.cifg = k == LSTM && v == 2, .other_acts = v == 3,
			.clip = v == 1 ? 0.7f : 0.0f,
		};
		for (int m = 0; m < 3; m++) {
			if (modes[m] != NULL)
				setenv("ML_RNN_STEP", modes[m], 1);
			else
				unsetenv("ML_RNN_STEP");
			ok(run_case(&c), describe(&c, modes[m] ? modes[m] : "auto"));
		}
	}
	/* above the own product's limit (batch * 4h * h > 3 * 2^16): BLAS chosen; own forced */
	struct rcase big = { .k = LSTM, .dirs = 1, .seq = 2, .batch = 3, .in = 8, .h = 160,
			     .bias = true, .init = true };
	unsetenv("ML_RNN_STEP");
	ok(run_case(&big), describe(&big, "auto"));
	setenv("ML_RNN_STEP", "own", 1);
	ok(run_case(&big), describe(&big, "own"));
	unsetenv("ML_RNN_STEP");
	printf("1..%d\n", ntest);
	return nfail != 0;
}
