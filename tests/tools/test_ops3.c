/*
 * test_ops3.c: C tests of the loss, quant and misc op families through the
 * public graph and session API: tiny one-node graphs whose outputs are
 * checked against values computed here, and error paths (arity, dtypes,
 * attributes, out-of-range data) that must fail with ML_EINVAL or
 * ML_ENOTSUP and a message, never crash. Prints TAP.
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

/* A graph under construction, and the outputs of its last run. */
struct tg {
	struct ml_graph *g;
	int node;
	int n_out;
	struct ml_tval out[4];
	struct ml_err e;
};

static void
tg_init(struct tg *t, int64_t opset)
{
	memset(t, 0, sizeof *t);
	ml_graph_new(&t->g, &t->e);
	ml_graph_set_opset(t->g, "", opset, &t->e);
}

static void
tg_free(struct tg *t)
{
	for (int i = 0; i < 4; i++)
		ml_tval_clear(&t->out[i]);
	ml_graph_free(t->g);
	t->g = NULL;
}

/* tg_input: declare a graph input (its value is given to tg_run). */
static void
tg_input(struct tg *t, const char *name, enum ml_dtype dt, int rank, const int64_t *dims)
{
	int ti = ml_graph_tensor(t->g, name);
	struct ml_tensor *x = t->g->tensors[ti];
	x->dtype = dt;
	x->rank = rank;
	x->kind = ML_TK_INPUT;
	for (int d = 0; d < rank; d++)
		x->dims[d] = dims[d];
	ml_graph_add_input(t->g, ti, &t->e);
}

static void
tg_const(struct tg *t, const char *name, enum ml_dtype dt, int rank, const int64_t *dims,
	 const void *data)
{
	int64_t n = 1;
	for (int d = 0; d < rank; d++)
		n *= dims[d];
	ml_graph_set_data(t->g, ml_graph_tensor(t->g, name), ML_TK_CONST, dt, rank, dims, data,
			  (size_t)n * ml_dtype_size(dt), &t->e);
}

/* tg_node: the one node, with comma-separated input and output names ("" omits one). */
static int
tg_node(struct tg *t, const char *op, const char *ins, const char *outs)
{
	char ib[256], ob[256];
	const char *in[16], *out[8];
	int ni = 0, no = 0;

	snprintf(ib, sizeof ib, "%s", ins);
	snprintf(ob, sizeof ob, "%s", outs);
	for (char *p = ib, *q; ni < 16; p = q + 1) {
		q = strchr(p, ',');
		in[ni++] = p;
		if (q == NULL)
			break;
		*q = '\0';
	}
	if (ins[0] == '\0')
		ni = 0;
	for (char *p = ob, *q; no < 8; p = q + 1) {
		q = strchr(p, ',');
		out[no++] = p;
		if (q == NULL)
			break;
		*q = '\0';
	}
	t->node = ml_graph_add_node(t->g, op, "", "", ni, in, no, out, &t->e);
	for (int i = 0; i < no; i++)
		if (out[i][0] != '\0')
			ml_graph_add_output(t->g, ml_graph_find(t->g, out[i]), &t->e);
	t->n_out = no;
	return t->node;
}

/*
 * tg_run: check, infer and run the graph with the given input values
 * (in input order); outputs are copied into t->out. Returns the first
 * failure's code, with the message in t->e.
 */
static int
tg_run(struct tg *t, int n, const struct ml_tval *vals)
{
	struct ml_session *s = NULL;
	int rc;

	memset(&t->e, 0, sizeof t->e);
	if ((rc = ml_graph_toposort(t->g, &t->e)) < 0 || (rc = ml_graph_validate(t->g, &t->e)) < 0 ||
	    (rc = ml_graph_infer(t->g, &t->e)) < 0 ||
	    (rc = ml_session_new(&s, t->g, NULL, &t->e)) < 0)
		return rc;
	for (int i = 0; i < n; i++) {
		const char *name = t->g->tensors[t->g->inputs[i]]->name;
		if ((rc = ml_session_set_input(s, name, &vals[i], &t->e)) < 0)
			goto out;
	}
	if ((rc = ml_session_run(s, &t->e)) < 0)
		goto out;
	for (int i = 0; i < t->g->n_outputs && i < 4; i++) {
		const struct ml_tval *o = ml_session_output(s, i);
		ml_tval_clear(&t->out[i]);
		if ((rc = ml_tval_alloc(&t->out[i], o->dtype, o->rank, o->dims, &t->e)) < 0)
			goto out;
		memcpy(t->out[i].data, o->data, (size_t)ml_tval_nbytes(o));
	}
out:
	ml_session_free(s);
	return rc;
}

/* tv: an owned tval of dtype dt and shape, filled from data (NULL: zeros). */
static struct ml_tval
tv(enum ml_dtype dt, int rank, const int64_t *dims, const void *data)
{
	struct ml_tval v = { 0 };
	struct ml_err e = { 0 };
	ml_tval_alloc(&v, dt, rank, dims, &e);
	if (data != NULL)
		memcpy(v.data, data, (size_t)ml_tval_nbytes(&v));
	return v;
}

static void
tv_clear(int n, struct ml_tval *v)
{
	for (int i = 0; i < n; i++)
		ml_tval_clear(&v[i]);
}

/* fails: rc is code (or either refusal when code is 0) with a message. */
static bool
fails(const struct tg *t, int rc, int code)
{
	bool c = code != 0 ? rc == code : (rc == ML_EINVAL || rc == ML_ENOTSUP);
	return c && t->e.msg[0] != '\0';
}

static bool
near(double a, double b, double tol)
{
	return fabs(a - b) <= tol * (1 + fabs(b));
}

static bool
all_near_f32(const struct ml_tval *v, const double *want, int64_t n, double tol)
{
	if (v->dtype != ML_F32 || ml_tval_numel(v) != n)
		return false;
	for (int64_t i = 0; i < n; i++)
		if (!near(((const float *)v->data)[i], want[i], tol))
			return false;
	return true;
}

static uint64_t rs = 88172645463325252ull;

static double
frand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (double)(rs >> 11) * 0x1.0p-53;
}

/* --- loss --- */

static void
test_loss(void)
{
	struct tg t;
	float x[6] = { 1, 2, 3, -1, 0, 2 }, w[3] = { 0.5f, 1, 2 };
	int64_t lab[2] = { 2, 0 }, dx[2] = { 2, 3 }, dl[1] = { 2 }, dw[1] = { 3 };

	/* SoftmaxCrossEntropyLoss, weighted mean */
	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 2, dx);
	tg_input(&t, "y", ML_I64, 1, dl);
	tg_input(&t, "w", ML_F32, 1, dw);
	tg_node(&t, "SoftmaxCrossEntropyLoss", "x,y,w", "z,lp");
	struct ml_tval in[3] = { tv(ML_F32, 2, dx, x), tv(ML_I64, 1, dl, lab), tv(ML_F32, 1, dw, w) };
	int rc = tg_run(&t, 3, in);
	double num = 0, den = 0, lp[6];
	for (int r = 0; r < 2; r++) {
		double m = fmax(fmax(x[3 * r], x[3 * r + 1]), x[3 * r + 2]), s = 0;
		for (int k = 0; k < 3; k++)
			s += exp(x[3 * r + k] - m);
		for (int k = 0; k < 3; k++)
			lp[3 * r + k] = x[3 * r + k] - m - log(s);
		num += -lp[3 * r + lab[r]] * w[lab[r]];
		den += w[lab[r]];
	}
	double want = num / den;
	ok(rc == 0 && t.out[0].rank == 0 && all_near_f32(&t.out[0], &want, 1, 1e-5),
	   "SoftmaxCrossEntropyLoss weighted mean is sum(w l) / sum(w)");
	ok(rc == 0 && all_near_f32(&t.out[1], lp, 6, 1e-5), "SoftmaxCrossEntropyLoss log_prob");
	tg_free(&t);

	/* ignore_index drops the ignored element from the mean's weights */
	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 2, dx);
	tg_input(&t, "y", ML_I64, 1, dl);
	tg_input(&t, "w", ML_F32, 1, dw);
	ml_node_set_int(t.g, tg_node(&t, "SoftmaxCrossEntropyLoss", "x,y,w", "z"), "ignore_index", 0);
	rc = tg_run(&t, 3, in);
	want = -lp[2];
	ok(rc == 0 && all_near_f32(&t.out[0], &want, 1, 1e-5), "ignore_index is left out of the mean");
	tg_free(&t);

	/* NegativeLogLikelihoodLoss over [N, C, d] with reduction none */
	float x3[12];
	int64_t d3[3] = { 2, 3, 2 }, dt3[2] = { 2, 2 }, l3[4] = { 0, 2, 1, 1 };
	for (int i = 0; i < 12; i++)
		x3[i] = (float)i * 0.25f - 1;
	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 3, d3);
	tg_input(&t, "t", ML_I64, 2, dt3);
	ml_node_set_string(t.g, tg_node(&t, "NegativeLogLikelihoodLoss", "x,t", "l"), "reduction",
			   "none");
	struct ml_tval in3[2] = { tv(ML_F32, 3, d3, x3), tv(ML_I64, 2, dt3, l3) };
	rc = tg_run(&t, 2, in3);
	double w3[4];
	for (int n = 0; n < 2; n++)
		for (int d = 0; d < 2; d++)
			w3[n * 2 + d] = -x3[(n * 3 + l3[n * 2 + d]) * 2 + d];
	ok(rc == 0 && t.out[0].rank == 2 && all_near_f32(&t.out[0], w3, 4, 1e-6),
	   "NegativeLogLikelihoodLoss reduction=none over [N, C, d]");
	tg_free(&t);

	/* errors */
	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 3, d3);
	tg_input(&t, "t", ML_I64, 2, dt3);
	ml_node_set_string(t.g, tg_node(&t, "NegativeLogLikelihoodLoss", "x,t", "l"), "reduction",
			   "average");
	ok(fails(&t, tg_run(&t, 2, in3), ML_EINVAL), "a bad reduction is refused");
	tg_free(&t);

	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 3, d3);
	tg_input(&t, "t", ML_F32, 2, dt3);
	tg_node(&t, "NegativeLogLikelihoodLoss", "x,t", "l");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "a float target is refused");
	tg_free(&t);

	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 3, d3);
	tg_node(&t, "NegativeLogLikelihoodLoss", "x", "l");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "NegativeLogLikelihoodLoss with one input");
	tg_free(&t);

	tg_init(&t, 13);
	tg_input(&t, "x", ML_I32, 3, d3);
	tg_input(&t, "t", ML_I64, 2, dt3);
	tg_node(&t, "SoftmaxCrossEntropyLoss", "x,t", "l");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_ENOTSUP), "integer scores are not supported");
	tg_free(&t);

	int64_t bad[4] = { 0, 3, 1, 1 };
	struct ml_tval inb[2] = { tv(ML_F32, 3, d3, x3), tv(ML_I64, 2, dt3, bad) };
	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 3, d3);
	tg_input(&t, "t", ML_I64, 2, dt3);
	tg_node(&t, "SoftmaxCrossEntropyLoss", "x,t", "l");
	ok(fails(&t, tg_run(&t, 2, inb), ML_EINVAL), "a target out of [0, C) fails at run time");
	tg_free(&t);

	int64_t dtw[2] = { 2, 3 };
	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 3, d3);
	tg_input(&t, "t", ML_I64, 2, dtw);
	tg_node(&t, "SoftmaxCrossEntropyLoss", "x,t", "l");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "a target of the wrong shape is refused");
	tg_free(&t);
	tv_clear(3, in);
	tv_clear(2, in3);
	tv_clear(2, inb);
}

/* --- quant --- */

static void
ref_mm(const int32_t *a, const int32_t *b, int64_t M, int64_t K, int64_t N, int64_t *c)
{
	for (int64_t i = 0; i < M; i++)
		for (int64_t j = 0; j < N; j++) {
			int64_t s = 0;
			for (int64_t k = 0; k < K; k++)
				s += (int64_t)a[i * K + k] * b[k * N + j];
			c[i * N + j] = s;
		}
}

static void
test_matmul_integer(int64_t M, int64_t K, int64_t N)
{
	struct tg t;
	int64_t da[2] = { M, K }, db[2] = { K, N }, dz[1] = { 1 };
	uint8_t *a = malloc((size_t)(M * K)), az = 7;
	int8_t *b = malloc((size_t)(K * N)), bz = -3;
	int32_t *ai = malloc(sizeof(int32_t) * (size_t)(M * K));
	int32_t *bi = malloc(sizeof(int32_t) * (size_t)(K * N));
	int64_t *want = malloc(sizeof(int64_t) * (size_t)(M * N));
	char what[96];

	for (int64_t i = 0; i < M * K; i++) {
		a[i] = (uint8_t)(frand() * 256);
		ai[i] = a[i] - az;
	}
	for (int64_t i = 0; i < K * N; i++) {
		b[i] = (int8_t)(frand() * 256 - 128);
		bi[i] = b[i] - bz;
	}
	ref_mm(ai, bi, M, K, N, want);
	tg_init(&t, 13);
	tg_input(&t, "a", ML_U8, 2, da);
	tg_input(&t, "b", ML_I8, 2, db);
	tg_const(&t, "az", ML_U8, 1, dz, &az);
	tg_const(&t, "bz", ML_I8, 1, dz, &bz);
	tg_node(&t, "MatMulInteger", "a,b,az,bz", "y");
	struct ml_tval in[2] = { tv(ML_U8, 2, da, a), tv(ML_I8, 2, db, b) };
	int rc = tg_run(&t, 2, in);
	bool good = rc == 0 && t.out[0].dtype == ML_I32 && ml_tval_numel(&t.out[0]) == M * N;
	for (int64_t i = 0; good && i < M * N; i++)
		good = ((const int32_t *)t.out[0].data)[i] == want[i];
	snprintf(what, sizeof what, "MatMulInteger u8 x i8 [%lld,%lld]x[%lld,%lld] is exact",
		 (long long)M, (long long)K, (long long)K, (long long)N);
	ok(good, what);
	tg_free(&t);
	tv_clear(2, in);
	free(a);
	free(b);
	free(ai);
	free(bi);
	free(want);
}

static void
test_quant(void)
{
	struct tg t;
	int64_t dx[2] = { 2, 3 }, d2[1] = { 2 }, d3[1] = { 3 };
	float x[6] = { 0.5f, 1.5f, 2.5f, -10, 300, 0.26f }, sc[3] = { 1, 1, 0.5f };
	uint8_t zp[3] = { 0, 10, 128 };

	/* per-axis QuantizeLinear: round half to even, saturate */
	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 2, dx);
	tg_const(&t, "s", ML_F32, 1, d3, sc);
	tg_const(&t, "z", ML_U8, 1, d3, zp);
	tg_node(&t, "QuantizeLinear", "x,s,z", "y");
	struct ml_tval in[1] = { tv(ML_F32, 2, dx, x) };
	int rc = tg_run(&t, 1, in);
	uint8_t want[6] = { 0, 12, 133, 0, 255, 129 };
	ok(rc == 0 && t.out[0].dtype == ML_U8 && memcmp(t.out[0].data, want, 6) == 0,
	   "QuantizeLinear per axis rounds half to even and saturates");
	tg_free(&t);

	/* DequantizeLinear per tensor, int8 */
	int8_t q[2] = { -128, 5 }, qz = -3;
	float qs = 0.25f;
	int64_t d0[1] = { 1 };
	tg_init(&t, 13);
	tg_input(&t, "x", ML_I8, 1, d2);
	tg_const(&t, "s", ML_F32, 0, d0, &qs);
	tg_const(&t, "z", ML_I8, 0, d0, &qz);
	tg_node(&t, "DequantizeLinear", "x,s,z", "y");
	struct ml_tval inq[1] = { tv(ML_I8, 1, d2, q) };
	rc = tg_run(&t, 1, inq);
	double wd[2] = { (-128 + 3) * 0.25, (5 + 3) * 0.25 };
	ok(rc == 0 && all_near_f32(&t.out[0], wd, 2, 0), "DequantizeLinear int8 per tensor");
	tg_free(&t);

	/* DynamicQuantizeLinear */
	float dxv[4] = { -1, 0, 1, 2 };
	int64_t d4[1] = { 4 };
	tg_init(&t, 11);
	tg_input(&t, "x", ML_F32, 1, d4);
	tg_node(&t, "DynamicQuantizeLinear", "x", "y,ys,yz");
	struct ml_tval ind[1] = { tv(ML_F32, 1, d4, dxv) };
	rc = tg_run(&t, 1, ind);
	float s = 3.0f / 255;
	ok(rc == 0 && t.out[1].dtype == ML_F32 && ((float *)t.out[1].data)[0] == s &&
	   ((uint8_t *)t.out[2].data)[0] == 85 && ((uint8_t *)t.out[0].data)[3] == 255 &&
	   ((uint8_t *)t.out[0].data)[0] == 0, "DynamicQuantizeLinear range, scale and zero point");
	tg_free(&t);

	test_matmul_integer(3, 4, 5);
	test_matmul_integer(37, 300, 270);

	/* QLinearMatMul against a reference requantization */
	uint8_t a[6] = { 0, 10, 200, 255, 128, 7 }, b[6] = { 1, 2, 3, 250, 100, 0 }, one = 1;
	float as = 0.02f, bs = 0.03f, ys = 0.05f;
	uint8_t az = 3, bz = 100, yz = 120;
	int64_t da[2] = { 2, 3 }, db[2] = { 3, 2 };
	(void)one;
	tg_init(&t, 13);
	tg_input(&t, "a", ML_U8, 2, da);
	tg_input(&t, "b", ML_U8, 2, db);
	tg_const(&t, "as", ML_F32, 0, d0, &as);
	tg_const(&t, "az", ML_U8, 0, d0, &az);
	tg_const(&t, "bs", ML_F32, 0, d0, &bs);
	tg_const(&t, "bz", ML_U8, 0, d0, &bz);
	tg_const(&t, "ys", ML_F32, 0, d0, &ys);
	tg_const(&t, "yz", ML_U8, 0, d0, &yz);
	tg_node(&t, "QLinearMatMul", "a,as,az,b,bs,bz,ys,yz", "y");
	struct ml_tval inm[2] = { tv(ML_U8, 2, da, a), tv(ML_U8, 2, db, b) };
	rc = tg_run(&t, 2, inm);
	bool good = rc == 0 && t.out[0].dtype == ML_U8 && ml_tval_numel(&t.out[0]) == 4;
	for (int i = 0; good && i < 2; i++)
		for (int j = 0; j < 2; j++) {
			int32_t acc = 0;
			for (int k = 0; k < 3; k++)
				acc += (a[i * 3 + k] - az) * (b[k * 2 + j] - bz);
			double v = rint((double)acc * as * bs / ys) + yz;
			v = v < 0 ? 0 : v > 255 ? 255 : v;
			good = good && fabs(((uint8_t *)t.out[0].data)[i * 2 + j] - v) <= 1;
		}
	ok(good, "QLinearMatMul requantizes the int32 product");
	tg_free(&t);

	/* ConvInteger with padding, against a direct loop */
	uint8_t cx[16], cw[4] = { 1, 2, 3, 4 }, cxz = 2;
	int64_t dcx[4] = { 1, 1, 4, 4 }, dcw[4] = { 1, 1, 2, 2 }, pads[4] = { 1, 1, 1, 1 };
	for (int i = 0; i < 16; i++)
		cx[i] = (uint8_t)(i * 3);
	tg_init(&t, 13);
	tg_input(&t, "x", ML_U8, 4, dcx);
	tg_const(&t, "w", ML_U8, 4, dcw, cw);
	tg_const(&t, "xz", ML_U8, 0, d0, &cxz);
	ml_node_set_ints(t.g, tg_node(&t, "ConvInteger", "x,w,xz", "y"), "pads", 4, pads);
	struct ml_tval inc[1] = { tv(ML_U8, 4, dcx, cx) };
	rc = tg_run(&t, 1, inc);
	good = rc == 0 && t.out[0].dtype == ML_I32 && t.out[0].dims[2] == 5 && t.out[0].dims[3] == 5;
	for (int oh = 0; good && oh < 5; oh++)
		for (int ow = 0; ow < 5; ow++) {
			int32_t acc = 0;
			for (int kh = 0; kh < 2; kh++)
				for (int kw = 0; kw < 2; kw++) {
					int ih = oh - 1 + kh, iw = ow - 1 + kw;
					if (ih >= 0 && ih < 4 && iw >= 0 && iw < 4)
						acc += (cx[ih * 4 + iw] - cxz) * cw[kh * 2 + kw];
				}
			good = good && ((int32_t *)t.out[0].data)[oh * 5 + ow] == acc;
		}
	ok(good, "ConvInteger with pads (padding is the zero point)");
	tg_free(&t);

	/* errors */
	tg_init(&t, 13);
	tg_input(&t, "x", ML_I8, 2, dx);
	tg_const(&t, "s", ML_F32, 0, d0, &qs);
	tg_node(&t, "QuantizeLinear", "x,s", "y");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_ENOTSUP), "QuantizeLinear of int8 is refused");
	tg_free(&t);

	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 2, dx);
	tg_const(&t, "s", ML_F32, 1, d2, sc);
	tg_node(&t, "QuantizeLinear", "x,s", "y");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "a per-axis scale of the wrong length");
	tg_free(&t);

	tg_init(&t, 13);
	tg_input(&t, "a", ML_F32, 2, da);
	tg_input(&t, "b", ML_F32, 2, db);
	tg_node(&t, "MatMulInteger", "a,b", "y");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_ENOTSUP), "MatMulInteger of floats is refused");
	tg_free(&t);

	tg_init(&t, 13);
	tg_input(&t, "a", ML_U8, 2, da);
	tg_input(&t, "b", ML_U8, 2, da);
	tg_node(&t, "MatMulInteger", "a,b", "y");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "MatMulInteger with mismatched inner dims");
	tg_free(&t);

	tg_init(&t, 13);
	tg_input(&t, "a", ML_U8, 2, da);
	tg_node(&t, "QLinearMatMul", "a,a,a", "y");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "QLinearMatMul with three inputs");
	tg_free(&t);

	tg_init(&t, 13);
	tg_input(&t, "x", ML_U8, 4, dcx);
	tg_const(&t, "w", ML_U8, 4, dcw, cw);
	tg_node(&t, "ConvInteger", "x,w", "y");
	ml_node_set_int(t.g, t.node, "group", 0);
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "ConvInteger with group 0");
	tg_free(&t);
	tv_clear(1, in);
	tv_clear(1, inq);
	tv_clear(1, ind);
	tv_clear(2, inm);
	tv_clear(1, inc);
}

/* --- einsum --- */

/*
 * check_einsum: run eq over f64 operands of the given shapes filled with
 * random values, and compare with want(), a reference written per test.
 */
typedef double (*eref_fn)(const double *const *x, const int64_t *idx);

static void
einsum_case(const char *eq, int n, const int *ranks, const int64_t (*dims)[4], int orank,
	    const int64_t *odims, eref_fn ref, enum ml_dtype dt)
{
	struct tg t;
	struct ml_tval in[3];
	double *xs[3];
	char names[64] = "", what[700];

	tg_init(&t, 13);
	for (int i = 0; i < n; i++) {
		char nm[16];
		int64_t cnt = 1;
		snprintf(nm, sizeof nm, "x%d", i);
		tg_input(&t, nm, dt, ranks[i], dims[i]);
		strcat(names, i ? ",x" : "x");
		snprintf(names + strlen(names), sizeof names - strlen(names), "%d", i);
		for (int d = 0; d < ranks[i]; d++)
			cnt *= dims[i][d];
		xs[i] = malloc(sizeof(double) * (size_t)cnt);
		in[i] = tv(dt, ranks[i], dims[i], NULL);
		for (int64_t k = 0; k < cnt; k++) {
			xs[i][k] = dt == ML_I64 ? (double)(int)(frand() * 9 - 4) : frand() * 2 - 1;
			ml_set_f64(in[i].data, dt, k, xs[i][k]);
		}
	}
	ml_node_set_string(t.g, tg_node(&t, "Einsum", names, "y"), "equation", eq);
	int rc = tg_run(&t, n, in);
	bool good = rc == 0 && t.out[0].dtype == dt && t.out[0].rank == orank;
	int64_t on = 1;
	for (int d = 0; good && d < orank; d++) {
		good = t.out[0].dims[d] == odims[d];
		on *= odims[d];
	}
	for (int64_t o = 0; good && o < on; o++) {
		int64_t idx[8], rem = o;
		for (int d = orank - 1; d >= 0; d--) {
			idx[d] = rem % odims[d];
			rem /= odims[d];
		}
		double want = ref((const double *const *)xs, idx);
		good = near(ml_get_f64(t.out[0].data, dt, o), want, dt == ML_F32 ? 1e-5 : 1e-9);
	}
	snprintf(what, sizeof what, "Einsum '%s' (%s)%s%s", eq, ml_dtype_name(dt),
		 rc < 0 ? ": " : "", rc < 0 ? t.e.msg : "");
	ok(good, what);
	tg_free(&t);
	tv_clear(n, in);
	for (int i = 0; i < n; i++)
		free(xs[i]);
}

static double
ref_mm23(const double *const *x, const int64_t *i)	/* [2,3] x [3,4] */
{
	double s = 0;
	for (int k = 0; k < 3; k++)
		s += x[0][i[0] * 3 + k] * x[1][k * 4 + i[1]];
	return s;
}

static double
ref_bmm_t(const double *const *x, const int64_t *i)	/* bij,bkj->bik: [2,3,5] [2,4,5] */
{
	double s = 0;
	for (int j = 0; j < 5; j++)
		s += x[0][(i[0] * 3 + i[1]) * 5 + j] * x[1][(i[0] * 4 + i[2]) * 5 + j];
	return s;
}

static double
ref_diag(const double *const *x, const int64_t *i)	/* ii->i over [4,4] */
{
	return x[0][i[0] * 4 + i[0]];
}

static double
ref_trace(const double *const *x, const int64_t *i)
{
	(void)i;
	double s = 0;
	for (int k = 0; k < 4; k++)
		s += x[0][k * 4 + k];
	return s;
}

static double
ref_ell_t(const double *const *x, const int64_t *i)	/* ...ij->...ji over [2,3,4] */
{
	return x[0][(i[0] * 3 + i[2]) * 4 + i[1]];
}

static double
ref_chain(const double *const *x, const int64_t *i)	/* ij,jk,kl->il: [2,3] [3,4] [4,2] */
{
	double s = 0;
	for (int j = 0; j < 3; j++)
		for (int k = 0; k < 4; k++)
			s += x[0][i[0] * 3 + j] * x[1][j * 4 + k] * x[2][k * 2 + i[1]];
	return s;
}

static double
ref_outer_sum(const double *const *x, const int64_t *i)	/* ij,j->ji, [3,4] [4]... */
{
	return x[0][i[1] * 4 + i[0]] * x[1][i[0]];
}

static double
ref_bcast(const double *const *x, const int64_t *i)	/* ...j,...j->... : [2,3] [1,3]... */
{
	double s = 0;
	for (int j = 0; j < 3; j++)
		s += x[0][i[0] * 3 + j] * x[1][j];
	return s;
}

static void
test_einsum(void)
{
	const int64_t d_mm[2][4] = { { 2, 3 }, { 3, 4 } }, o_mm[2] = { 2, 4 };
	const int64_t d_bt[2][4] = { { 2, 3, 5 }, { 2, 4, 5 } }, o_bt[3] = { 2, 3, 4 };
	const int64_t d_sq[1][4] = { { 4, 4 } }, o_d[1] = { 4 };
	const int64_t d_e[1][4] = { { 2, 3, 4 } }, o_e[3] = { 2, 4, 3 };
	const int64_t d_ch[3][4] = { { 2, 3 }, { 3, 4 }, { 4, 2 } }, o_ch[2] = { 2, 2 };
	const int64_t d_os[2][4] = { { 3, 4 }, { 4 } }, o_os[2] = { 4, 3 };
	const int64_t d_bc[2][4] = { { 2, 3 }, { 1, 3 } }, o_bc[1] = { 2 };
	int r22[2] = { 2, 2 }, r33[2] = { 3, 3 }, r2[1] = { 2 }, r3[1] = { 3 }, r222[3] = { 2, 2, 2 };
	int r21[2] = { 2, 1 };

	einsum_case("ij,jk->ik", 2, r22, d_mm, 2, o_mm, ref_mm23, ML_F64);
	einsum_case("ij,jk", 2, r22, d_mm, 2, o_mm, ref_mm23, ML_F32);
	einsum_case("ij,jk->ik", 2, r22, d_mm, 2, o_mm, ref_mm23, ML_I64);
	einsum_case("bij,bkj->bik", 2, r33, d_bt, 3, o_bt, ref_bmm_t, ML_F64);
	einsum_case("ii->i", 1, r2, d_sq, 1, o_d, ref_diag, ML_F64);
	einsum_case("ii", 1, r2, d_sq, 0, o_d, ref_trace, ML_F64);
	einsum_case("...ij->...ji", 1, r3, d_e, 3, o_e, ref_ell_t, ML_F64);
	einsum_case("ij,jk,kl->il", 3, r222, d_ch, 2, o_ch, ref_chain, ML_F64);
	einsum_case("ij,j->ji", 2, r21, d_os, 2, o_os, ref_outer_sum, ML_F64);
	einsum_case("...j,...j->...", 2, r22, d_bc, 1, o_bc, ref_bcast, ML_F64);

	/* errors */
	struct tg t;
	int64_t dx[2] = { 2, 3 };
	const char *bad[] = { "ij,jk->iz", "ij->ii", "ijk->i", "i.j->i", "ij->i->j", "i$->i" };
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		char what[64];
		tg_init(&t, 13);
		tg_input(&t, "x", ML_F32, 2, dx);
		ml_node_set_string(t.g, tg_node(&t, "Einsum", "x", "y"), "equation", bad[k]);
		snprintf(what, sizeof what, "Einsum refuses '%s'", bad[k]);
		ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), what);
		tg_free(&t);
	}
	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 2, dx);
	tg_node(&t, "Einsum", "x", "y");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "Einsum without an equation");
	tg_free(&t);
	tg_init(&t, 13);
	tg_input(&t, "x", ML_BOOL, 2, dx);
	ml_node_set_string(t.g, tg_node(&t, "Einsum", "x", "y"), "equation", "ij->ji");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_ENOTSUP), "Einsum of bool is not supported");
	tg_free(&t);
}

/* --- misc --- */

static void
naive_dft(const double *x, int64_t n, double *y)
{
	for (int64_t k = 0; k < n; k++) {
		double sr = 0, si = 0;
		for (int64_t t = 0; t < n; t++) {
			double a = -2 * M_PI * (double)((k * t) % n) / (double)n;
			sr += x[t] * cos(a);
			si += x[t] * sin(a);
		}
		y[2 * k] = sr;
		y[2 * k + 1] = si;
	}
}

static void
test_dft(int64_t n)
{
	struct tg t;
	int64_t dx[3] = { 1, n, 1 };
	double *x = malloc(sizeof(double) * (size_t)n), *want = malloc(sizeof(double) * 2 * (size_t)n);
	char what[64];

	for (int64_t i = 0; i < n; i++)
		x[i] = frand() - 0.5;
	naive_dft(x, n, want);
	tg_init(&t, 17);
	tg_input(&t, "x", ML_F64, 3, dx);
	tg_node(&t, "DFT", "x", "y");
	struct ml_tval in[1] = { tv(ML_F64, 3, dx, x) };
	int rc = tg_run(&t, 1, in);
	bool good = rc == 0 && t.out[0].rank == 3 && t.out[0].dims[2] == 2;
	for (int64_t i = 0; good && i < 2 * n; i++)
		good = fabs(((double *)t.out[0].data)[i] - want[i]) < 1e-9 * (double)n;
	snprintf(what, sizeof what, "DFT of length %lld matches the direct sum", (long long)n);
	ok(good, what);
	tg_free(&t);

	/* the inverse of the forward transform gives x back */
	int64_t dy[3] = { 1, n, 2 };
	tg_init(&t, 17);
	tg_input(&t, "y", ML_F64, 3, dy);
	ml_node_set_int(t.g, tg_node(&t, "DFT", "y", "z"), "inverse", 1);
	struct ml_tval iy[1] = { tv(ML_F64, 3, dy, want) };
	rc = tg_run(&t, 1, iy);
	good = rc == 0;
	for (int64_t i = 0; good && i < n; i++)
		good = fabs(((double *)t.out[0].data)[2 * i] - x[i]) < 1e-12 * (double)n &&
		       fabs(((double *)t.out[0].data)[2 * i + 1]) < 1e-12 * (double)n;
	snprintf(what, sizeof what, "inverse DFT of length %lld inverts", (long long)n);
	ok(good, what);
	tg_free(&t);
	tv_clear(1, in);
	tv_clear(1, iy);
	free(x);
	free(want);
}

static void
test_misc(void)
{
	struct tg t;
	int rc;

	/* Det */
	double m[9] = { 2, -1, 0, 1, 3, 2, 0, 5, -4 };
	int64_t dm[2] = { 3, 3 };
	tg_init(&t, 13);
	tg_input(&t, "x", ML_F64, 2, dm);
	tg_node(&t, "Det", "x", "y");
	struct ml_tval inm[1] = { tv(ML_F64, 2, dm, m) };
	rc = tg_run(&t, 1, inm);
	ok(rc == 0 && t.out[0].rank == 0 && near(*(double *)t.out[0].data, -48, 1e-12),
	   "Det of a 3x3 matrix");
	tg_free(&t);
	tv_clear(1, inm);
	tg_init(&t, 13);
	int64_t dr[2] = { 2, 3 };
	tg_input(&t, "x", ML_F32, 2, dr);
	tg_node(&t, "Det", "x", "y");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "Det of a non-square matrix");
	tg_free(&t);

	/* windows */
	int64_t four = 4, d0[1] = { 1 };
	tg_init(&t, 17);
	tg_const(&t, "n", ML_I64, 0, d0, &four);
	tg_node(&t, "HannWindow", "n", "w");
	rc = tg_run(&t, 0, NULL);
	double hw[4] = { 0, 0.5, 1, 0.5 };
	ok(rc == 0 && t.out[0].dims[0] == 4 && all_near_f32(&t.out[0], hw, 4, 1e-6),
	   "periodic HannWindow of 4");
	tg_free(&t);
	tg_init(&t, 17);
	tg_input(&t, "n", ML_I64, 0, d0);
	ml_node_set_int(t.g, tg_node(&t, "BlackmanWindow", "n", "w"), "output_datatype", 8);
	ok(fails(&t, tg_run(&t, 0, NULL), 0), "a window of strings is refused");
	tg_free(&t);
	tg_init(&t, 17);
	tg_input(&t, "n", ML_F32, 0, d0);
	tg_node(&t, "HammingWindow", "n", "w");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "a float window size is refused");
	tg_free(&t);

	test_dft(5);
	test_dft(64);
	test_dft(100);

	/* STFT without a window or frame_length */
	int64_t ds[3] = { 1, 16, 1 }, step = 4;
	tg_init(&t, 17);
	tg_input(&t, "s", ML_F32, 3, ds);
	tg_const(&t, "st", ML_I64, 0, d0, &step);
	tg_node(&t, "STFT", "s,st", "y");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "STFT needs a window or a frame_length");
	tg_free(&t);

	/* GridSample: an align_corners identity grid gives the input back */
	float gx[12], gg[24];
	int64_t dgx[4] = { 1, 1, 3, 4 }, dgg[4] = { 1, 3, 4, 2 };
	for (int i = 0; i < 12; i++)
		gx[i] = (float)(i * i) * 0.1f;
	for (int h = 0; h < 3; h++)
		for (int w = 0; w < 4; w++) {
			gg[(h * 4 + w) * 2] = -1 + 2 * (float)w / 3;
			gg[(h * 4 + w) * 2 + 1] = -1 + 2 * (float)h / 2;
		}
	const char *modes[3] = { "bilinear", "nearest", "bicubic" };
	for (int k = 0; k < 3; k++) {
		char what[64];
		double want[12];
		for (int i = 0; i < 12; i++)
			want[i] = gx[i];
		tg_init(&t, 16);
		tg_input(&t, "x", ML_F32, 4, dgx);
		tg_input(&t, "g", ML_F32, 4, dgg);
		int n = tg_node(&t, "GridSample", "x,g", "y");
		ml_node_set_int(t.g, n, "align_corners", 1);
		ml_node_set_string(t.g, n, "mode", modes[k]);
		struct ml_tval ig[2] = { tv(ML_F32, 4, dgx, gx), tv(ML_F32, 4, dgg, gg) };
		rc = tg_run(&t, 2, ig);
		snprintf(what, sizeof what, "GridSample %s on an identity grid", modes[k]);
		ok(rc == 0 && all_near_f32(&t.out[0], want, 12, 1e-5), what);
		tg_free(&t);
		tv_clear(2, ig);
	}
	tg_init(&t, 16);
	tg_input(&t, "x", ML_F32, 4, dgx);
	tg_input(&t, "g", ML_F32, 4, dgg);
	ml_node_set_string(t.g, tg_node(&t, "GridSample", "x,g", "y"), "padding_mode", "wrap");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "GridSample refuses padding_mode wrap");
	tg_free(&t);

	/* RoiAlign of a constant image is that constant */
	float rx[25], rois[8] = { 0, 0, 4, 4, 1, 1.5f, 3, 2 };
	int64_t bidx[2] = { 0, 0 }, drx[4] = { 1, 1, 5, 5 }, drr[2] = { 2, 4 }, drb[1] = { 2 };
	for (int i = 0; i < 25; i++)
		rx[i] = 3.5f;
	tg_init(&t, 16);
	tg_input(&t, "x", ML_F32, 4, drx);
	tg_input(&t, "r", ML_F32, 2, drr);
	tg_input(&t, "b", ML_I64, 1, drb);
	int rn = tg_node(&t, "RoiAlign", "x,r,b", "y");
	ml_node_set_int(t.g, rn, "output_height", 2);
	ml_node_set_int(t.g, rn, "output_width", 3);
	struct ml_tval ir[3] = { tv(ML_F32, 4, drx, rx), tv(ML_F32, 2, drr, rois),
				 tv(ML_I64, 1, drb, bidx) };
	rc = tg_run(&t, 3, ir);
	double c35[12];
	for (int i = 0; i < 12; i++)
		c35[i] = 3.5;
	ok(rc == 0 && t.out[0].dims[0] == 2 && t.out[0].dims[2] == 2 && t.out[0].dims[3] == 3 &&
	   all_near_f32(&t.out[0], c35, 12, 1e-6), "RoiAlign of a constant image");
	tg_free(&t);
	bidx[1] = 3;
	memcpy(ir[2].data, bidx, sizeof bidx);
	tg_init(&t, 16);
	tg_input(&t, "x", ML_F32, 4, drx);
	tg_input(&t, "r", ML_F32, 2, drr);
	tg_input(&t, "b", ML_I64, 1, drb);
	tg_node(&t, "RoiAlign", "x,r,b", "y");
	ok(fails(&t, tg_run(&t, 3, ir), ML_EINVAL), "RoiAlign with a batch index out of range");
	tg_free(&t);
	tv_clear(3, ir);

	/* NonMaxSuppression */
	float boxes[12] = { 0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 10, 1, 11 }, sc[3] = { 0.9f, 0.8f, 0.7f };
	int64_t db[3] = { 1, 3, 4 }, dsc[3] = { 1, 1, 3 }, maxo = 10;
	float iou = 0.5f;
	tg_init(&t, 11);
	tg_input(&t, "b", ML_F32, 3, db);
	tg_input(&t, "s", ML_F32, 3, dsc);
	tg_const(&t, "m", ML_I64, 1, d0, &maxo);
	tg_const(&t, "i", ML_F32, 1, d0, &iou);
	tg_node(&t, "NonMaxSuppression", "b,s,m,i", "sel");
	struct ml_tval in_n[2] = { tv(ML_F32, 3, db, boxes), tv(ML_F32, 3, dsc, sc) };
	rc = tg_run(&t, 2, in_n);
	int64_t wsel[6] = { 0, 0, 0, 0, 0, 2 };
	ok(rc == 0 && t.out[0].dims[0] == 2 && t.out[0].dims[1] == 3 &&
	   memcmp(t.out[0].data, wsel, sizeof wsel) == 0, "NonMaxSuppression drops an overlap");
	tg_free(&t);
	tv_clear(2, in_n);
	int64_t db2[2] = { 3, 4 };
	tg_init(&t, 11);
	tg_input(&t, "b", ML_F32, 2, db2);
	tg_input(&t, "s", ML_F32, 3, dsc);
	tg_node(&t, "NonMaxSuppression", "b,s", "sel");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "NonMaxSuppression of 2-D boxes");
	tg_free(&t);

	/* MaxUnpool */
	float ux[4] = { 1, 2, 3, 4 };
	int64_t ui[4] = { 0, 3, 9, 14 }, dux[4] = { 1, 1, 2, 2 }, k2[2] = { 2, 2 };
	tg_init(&t, 11);
	tg_input(&t, "x", ML_F32, 4, dux);
	tg_input(&t, "i", ML_I64, 4, dux);
	int un = tg_node(&t, "MaxUnpool", "x,i", "y");
	ml_node_set_ints(t.g, un, "kernel_shape", 2, k2);
	ml_node_set_ints(t.g, un, "strides", 2, k2);
	struct ml_tval iu[2] = { tv(ML_F32, 4, dux, ux), tv(ML_I64, 4, dux, ui) };
	rc = tg_run(&t, 2, iu);
	double wu[16] = { 1, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 4, 0 };
	ok(rc == 0 && t.out[0].dims[2] == 4 && all_near_f32(&t.out[0], wu, 16, 0),
	   "MaxUnpool scatters to the flat indices");
	tg_free(&t);
	ui[3] = 16;
	memcpy(iu[1].data, ui, sizeof ui);
	tg_init(&t, 11);
	tg_input(&t, "x", ML_F32, 4, dux);
	tg_input(&t, "i", ML_I64, 4, dux);
	ml_node_set_ints(t.g, tg_node(&t, "MaxUnpool", "x,i", "y"), "kernel_shape", 2, k2);
	ok(fails(&t, tg_run(&t, 2, iu), ML_EINVAL), "MaxUnpool with an index past the output");
	tg_free(&t);
	tg_init(&t, 11);
	tg_input(&t, "x", ML_F32, 4, dux);
	tg_input(&t, "i", ML_I64, 4, dux);
	tg_node(&t, "MaxUnpool", "x,i", "y");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "MaxUnpool without kernel_shape");
	tg_free(&t);
	tv_clear(2, iu);

	/* seeded random ops repeat; values in range */
	int64_t shape[2] = { 3, 50 };
	bool same = true, inrange = true;
	float first[150];
	for (int k = 0; k < 2; k++) {
		tg_init(&t, 15);
		int n = tg_node(&t, "RandomUniform", "", "y");
		ml_node_set_ints(t.g, n, "shape", 2, shape);
		ml_node_set_float(t.g, n, "seed", 5);
		ml_node_set_float(t.g, n, "low", -2);
		ml_node_set_float(t.g, n, "high", 3);
		rc = tg_run(&t, 0, NULL);
		if (rc < 0 || t.out[0].dtype != ML_F32 || ml_tval_numel(&t.out[0]) != 150) {
			same = false;
			tg_free(&t);
			break;
		}
		for (int i = 0; i < 150; i++) {
			float v = ((float *)t.out[0].data)[i];
			inrange = inrange && v >= -2 && v <= 3;
			if (k == 0)
				first[i] = v;
			else
				same = same && first[i] == v;
		}
		tg_free(&t);
	}
	ok(same && inrange, "seeded RandomUniform is in [low, high] and repeats");
	int64_t dn[1] = { 20000 };
	tg_init(&t, 15);
	tg_input(&t, "x", ML_F64, 1, dn);
	int nn = tg_node(&t, "RandomNormalLike", "x", "y");
	ml_node_set_float(t.g, nn, "mean", 1);
	ml_node_set_float(t.g, nn, "scale", 2);
	struct ml_tval ix[1] = { tv(ML_F64, 1, dn, NULL) };
	rc = tg_run(&t, 1, ix);
	double mean = 0, var = 0;
	for (int i = 0; rc == 0 && i < 20000; i++)
		mean += ((double *)t.out[0].data)[i] / 20000;
	for (int i = 0; rc == 0 && i < 20000; i++) {
		double d = ((double *)t.out[0].data)[i] - mean;
		var += d * d / 20000;
	}
	ok(rc == 0 && t.out[0].dtype == ML_F64 && fabs(mean - 1) < 0.1 && fabs(sqrt(var) - 2) < 0.1,
	   "RandomNormalLike has the mean and scale asked for");
	tg_free(&t);
	tv_clear(1, ix);
	tg_init(&t, 15);
	tg_node(&t, "RandomUniform", "", "y");
	ok(fails(&t, tg_run(&t, 0, NULL), ML_EINVAL), "RandomUniform without a shape");
	tg_free(&t);
	tg_init(&t, 15);
	ml_node_set_int(t.g, tg_node(&t, "RandomNormal", "", "y"), "dtype", 6);
	ml_node_set_ints(t.g, t.node, "shape", 2, shape);
	ok(fails(&t, tg_run(&t, 0, NULL), ML_ENOTSUP), "RandomNormal of int32 is not supported");
	tg_free(&t);
	float bp[6] = { 0, 1, 0, 1, 1, 0 };
	int64_t d6[1] = { 6 };
	tg_init(&t, 15);
	tg_input(&t, "p", ML_F32, 1, d6);
	ml_node_set_int(t.g, tg_node(&t, "Bernoulli", "p", "y"), "dtype", 7);
	struct ml_tval ib[1] = { tv(ML_F32, 1, d6, bp) };
	rc = tg_run(&t, 1, ib);
	int64_t wb[6] = { 0, 1, 0, 1, 1, 0 };
	ok(rc == 0 && t.out[0].dtype == ML_I64 && memcmp(t.out[0].data, wb, sizeof wb) == 0,
	   "Bernoulli of probabilities 0 and 1, as int64");
	tg_free(&t);
	tv_clear(1, ib);

	/* TfIdfVectorizer: bigrams with skips, TFIDF weights */
	int32_t tx[8] = { 1, 2, 3, 1, 2, 9, 1, 3 };
	int64_t dtx[1] = { 8 }, pool[6] = { 1, 2, 1, 3, 2, 3 }, cnt[2] = { 0, 0 };
	int64_t idx[3] = { 0, 1, 2 };
	double wts[3] = { 1, 10, 100 };
	tg_init(&t, 9);
	tg_input(&t, "x", ML_I32, 1, dtx);
	int tn = tg_node(&t, "TfIdfVectorizer", "x", "y");
	ml_node_set_int(t.g, tn, "min_gram_length", 2);
	ml_node_set_int(t.g, tn, "max_gram_length", 2);
	ml_node_set_int(t.g, tn, "max_skip_count", 1);
	ml_node_set_string(t.g, tn, "mode", "TFIDF");
	ml_node_set_ints(t.g, tn, "pool_int64s", 6, pool);
	ml_node_set_ints(t.g, tn, "ngram_counts", 2, cnt);
	ml_node_set_ints(t.g, tn, "ngram_indexes", 3, idx);
	ml_node_set_floats(t.g, tn, "weights", 3, wts);
	struct ml_tval it[1] = { tv(ML_I32, 1, dtx, tx) };
	rc = tg_run(&t, 1, it);
	/* (1,2): at 0 and 3; (1,3): at 0+2 and 6+1; (2,3): at 1+1 */
	double wt[3] = { 2 * 1, 2 * 10, 1 * 100 };
	ok(rc == 0 && all_near_f32(&t.out[0], wt, 3, 0), "TfIdfVectorizer TFIDF with skips");
	tg_free(&t);
	tg_init(&t, 9);
	tg_input(&t, "x", ML_I32, 1, dtx);
	tn = tg_node(&t, "TfIdfVectorizer", "x", "y");
	ml_node_set_int(t.g, tn, "min_gram_length", 2);
	ml_node_set_int(t.g, tn, "max_gram_length", 2);
	ml_node_set_string(t.g, tn, "mode", "BM25");
	ml_node_set_ints(t.g, tn, "pool_int64s", 6, pool);
	ml_node_set_ints(t.g, tn, "ngram_counts", 2, cnt);
	ml_node_set_ints(t.g, tn, "ngram_indexes", 3, idx);
	ok(fails(&t, tg_run(&t, 1, it), ML_EINVAL), "TfIdfVectorizer refuses mode BM25");
	tg_free(&t);
	tv_clear(1, it);

	/* MelWeightMatrix shape */
	int32_t nb = 8, dl = 16, sr = 8192;
	float lo = 0, hi = 4096;
	tg_init(&t, 17);
	tg_const(&t, "a", ML_I32, 0, d0, &nb);
	tg_const(&t, "b", ML_I32, 0, d0, &dl);
	tg_const(&t, "c", ML_I32, 0, d0, &sr);
	tg_const(&t, "d", ML_F32, 0, d0, &lo);
	tg_const(&t, "e", ML_F32, 0, d0, &hi);
	tg_node(&t, "MelWeightMatrix", "a,b,c,d,e", "y");
	rc = tg_run(&t, 0, NULL);
	ok(rc == 0 && t.out[0].rank == 2 && t.out[0].dims[0] == 9 && t.out[0].dims[1] == 8 &&
	   ((float *)t.out[0].data)[0] == 1, "MelWeightMatrix is [dft_length / 2 + 1, bins]");
	tg_free(&t);
}

/*
 * Sum and Mean of many rows of few columns with few outer rows (an NHWC
 * [N, H, W, C] pooled over H and W): reduce.c splits the rows into fixed
 * runs, so the sums must match double-precision ones and be the same bits
 * at any thread count.
 */
static void
test_reduce_rows(void)
{
	static const int64_t xd[4] = { 2, 56, 56, 144 }, axes[2] = { 1, 2 };
	int64_t n = xd[0] * xd[1] * xd[2] * xd[3], R = xd[1] * xd[2];
	struct ml_tval in = tv(ML_F32, 4, xd, NULL);
	float *x = in.data;
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)((rs = rs * 6364136223846793005ull + 1442695040888963407ull) >> 40) /
		       (float)(1 << 24) - 0.25f;
	double want[2 * 144];
	for (int o = 0; o < 2; o++)
		for (int c = 0; c < 144; c++) {
			double a = 0;
			for (int64_t r = 0; r < R; r++)
				a += x[(o * R + r) * 144 + c];
			want[o * 144 + c] = a / (double)R;
		}
	struct tg t;
	float first[2 * 144];
	bool same = true, good = true;
	for (int th = 1; th <= 3; th++) {
		ml_set_threads(th);
		tg_init(&t, 13);
		tg_input(&t, "x", ML_F32, 4, xd);
		int ni = tg_node(&t, "ReduceMean", "x", "y");
		ml_node_set_ints(t.g, ni, "axes", 2, axes);
		good &= tg_run(&t, 1, &in) == 0 && all_near_f32(&t.out[0], want, 2 * 144, 1e-5);
		if (good && th == 1)
			memcpy(first, t.out[0].data, sizeof first);
		else if (good)
			same &= memcmp(first, t.out[0].data, sizeof first) == 0;
		tg_free(&t);
	}
	ml_set_threads(0);
	ok(good, "ReduceMean over H and W of [2, 56, 56, 144] (rows split) matches double sums");
	ok(good && same, "... and gives the same bits on 1, 2 and 3 threads");
	/* ReduceSum (axes as an input) over axis 0 of [1000, 40], kept */
	static const int64_t sd[2] = { 1000, 40 }, one = 1;
	static const int64_t ax0 = 0;
	double ws[40];
	for (int c = 0; c < 40; c++) {
		ws[c] = 0;
		for (int r = 0; r < 1000; r++)
			ws[c] += x[r * 40 + c];
	}
	struct ml_tval sx = tv(ML_F32, 2, sd, x);
	tg_init(&t, 13);
	tg_input(&t, "x", ML_F32, 2, sd);
	tg_const(&t, "axes", ML_I64, 1, &one, &ax0);
	tg_node(&t, "ReduceSum", "x,axes", "y");
	good = tg_run(&t, 1, &sx) == 0 && all_near_f32(&t.out[0], ws, 40, 1e-5) &&
	       t.out[0].rank == 2 && t.out[0].dims[0] == 1;
	ok(good, "ReduceSum over axis 0 of [1000, 40] (rows split) matches double sums");
	tg_free(&t);
	tv_clear(1, &sx);
	tv_clear(1, &in);
}

/* Add, Sub, Mul, Div of [1, 9, 7, 37] and a row of [37] on either side (elem.c's row loop) */
static void
test_row_bcast(void)
{
	static const int64_t md[4] = { 1, 9, 7, 37 }, rd[1] = { 37 };
	static const char *ops[4] = { "Add", "Sub", "Mul", "Div" };
	int64_t n = 9 * 7 * 37;
	float m[9 * 7 * 37], r[37];
	for (int64_t i = 0; i < n; i++)
		m[i] = 0.5f + (float)(i % 13) * 0.25f;
	for (int i = 0; i < 37; i++)
		r[i] = 1.0f + (float)i * 0.125f;
	struct ml_tval vm = tv(ML_F32, 4, md, m), vr = tv(ML_F32, 1, rd, r);
	bool good = true;
	for (int k = 0; k < 4; k++)
		for (int first = 0; first < 2; first++) {
			struct tg t;
			tg_init(&t, 13);
			tg_input(&t, "a", ML_F32, first ? 1 : 4, first ? rd : md);
			tg_input(&t, "b", ML_F32, first ? 4 : 1, first ? md : rd);
			tg_node(&t, ops[k], "a,b", "y");
			struct ml_tval in2[2] = { first ? vr : vm, first ? vm : vr };
			good &= tg_run(&t, 2, in2) == 0 && ml_tval_numel(&t.out[0]) == n;
			for (int64_t i = 0; good && i < n; i++) {
				double x = first ? r[i % 37] : m[i], y = first ? m[i] : r[i % 37];
				double w = k == 0 ? x + y : k == 1 ? x - y : k == 2 ? x * y : x / y;
				good &= near(((const float *)t.out[0].data)[i], w, 1e-6);
			}
			tg_free(&t);
		}
	ok(good, "Add, Sub, Mul, Div of [1, 9, 7, 37] by a row of 37, row second and first");
	tv_clear(1, &vm);
	tv_clear(1, &vr);
}

/*
 * test_short_rows: Transpose [N, C, H, W] -> [N, H, W, C] with C of 1 to 5
 * (an RGB image to NHWC: rows of 2 or 3 floats take the blocked
 * transpose's loop for short rows, not a copy call per row), large enough
 * to split over the threads, and int16 (2-byte elements) with C 3.
 */
static void
test_short_rows(void)
{
	bool good = true;
	for (int c = 1; c <= 6 && good; c++) {
		enum ml_dtype dt = c == 6 ? ML_I16 : ML_F32;
		int64_t C = c == 6 ? 3 : c, H = 61, W = 67, n = 2 * C * H * W;
		int64_t xd[4] = { 2, C, H, W };
		size_t es = dt == ML_F32 ? 4 : 2;
		unsigned char *x = malloc((size_t)n * es);
		for (int64_t i = 0; i < n; i++) {
			if (dt == ML_F32)
				((float *)x)[i] = (float)i;
			else
				((int16_t *)x)[i] = (int16_t)(i % 30000);
		}
		struct ml_tval vx = tv(dt, 4, xd, x);
		struct tg t;
		tg_init(&t, 13);
		tg_input(&t, "x", dt, 4, xd);
		int ni = tg_node(&t, "Transpose", "x", "y");
		ml_node_set_ints(t.g, ni, "perm", 4, (int64_t[]){ 0, 2, 3, 1 });
		good &= tg_run(&t, 1, &vx) == 0 && ml_tval_numel(&t.out[0]) == n;
		for (int64_t b = 0; good && b < 2; b++)
			for (int64_t h = 0; h < H; h++)
				for (int64_t w = 0; w < W; w++)
					for (int64_t k = 0; k < C; k++) {
						int64_t o = ((b * H + h) * W + w) * C + k;
						int64_t i = ((b * C + k) * H + h) * W + w;
						good &= dt == ML_F32 ?
							((const float *)t.out[0].data)[o] == ((float *)x)[i] :
							((const int16_t *)t.out[0].data)[o] == ((int16_t *)x)[i];
					}
		tg_free(&t);
		tv_clear(1, &vx);
		free(x);
	}
	ok(good, "Transpose to NHWC of 1 to 5 channels (rows of 2 and 3 floats), and int16");
}

int
main(void)
{
	test_loss();
	test_quant();
	test_einsum();
	test_misc();
	test_reduce_rows();
	test_row_bcast();
	test_short_rows();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
