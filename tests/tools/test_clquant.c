/*
 * test_clquant.c: the OpenCL int8 kernels (lib/cl/quant.c, kernels/quant.cl)
 * against the CPU int8 kernels (lib/cpu/quant_q8.c). Each internal Q8 op
 * runs in one-node graphs on random inputs, over geometries that reach
 * every branch (channels a multiple of 4 or not, strides, pads, dilations,
 * depthwise, the matrix product with a float output, zero points, NaN and
 * infinite floats), on the CPU and with --device cl; the outputs must be
 * equal byte for byte, and the node must have run on the device. Prints
 * TAP; every case is skipped where there is no OpenCL device.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"
#include "cpu/quant_q8.h"

static int ntest, nfail;
static bool have_cl;
static uint64_t rng = 88172645463325252ull;

static uint32_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* the case under construction: one node, its graph inputs */
struct qc {
	struct ml_graph *g;
	struct ml_err e;
	int node, n_in;
	struct ml_tval in[4];
	char names[4][8];
};

static void
qc_init(struct qc *q)
{
	memset(q, 0, sizeof *q);
	ml_graph_new(&q->g, &q->e);
	ml_graph_set_opset(q->g, "", 13, &q->e);
}

/* qc_x: a random input (uint8, or f32 in [-3, 3] with a NaN and infinities) */
static void
qc_x(struct qc *q, const char *name, enum ml_dtype dt, int rank, const int64_t *dims)
{
	int ti = ml_graph_tensor(q->g, name);
	struct ml_tensor *t = q->g->tensors[ti];
	t->dtype = dt;
	t->rank = rank;
	t->kind = ML_TK_INPUT;
	memcpy(t->dims, dims, sizeof *dims * (size_t)rank);
	ml_graph_add_input(q->g, ti, &q->e);
	struct ml_tval *v = &q->in[q->n_in];
	ml_tval_alloc(v, dt, rank, dims, &q->e);
	int64_t n = ml_tval_numel(v);
	for (int64_t i = 0; i < n; i++) {
		if (dt == ML_U8)
			((uint8_t *)v->data)[i] = (uint8_t)rnd();
		else
			((float *)v->data)[i] = (float)((double)(rnd() % 60001) / 10000.0 - 3.0);
	}
	if (dt == ML_F32 && n >= 3) {
		((float *)v->data)[0] = NAN;
		((float *)v->data)[1] = INFINITY;
		((float *)v->data)[2] = -INFINITY;
	}
	snprintf(q->names[q->n_in++], sizeof q->names[0], "%s", name);
}

static void
qc_const(struct qc *q, const char *name, enum ml_dtype dt, int64_t n, const void *data)
{
	ml_graph_set_data(q->g, ml_graph_tensor(q->g, name), ML_TK_CONST, dt, 1, &n, data,
			  (size_t)n * ml_dtype_size(dt), &q->e);
}

static int
qc_node(struct qc *q, const char *op, int n_in, const char *const *in)
{
	const char *out[1] = { "y" };
	q->node = ml_graph_add_node(q->g, op, "ml", op, n_in, in, 1, out, &q->e);
	ml_graph_add_output(q->g, ml_graph_find(q->g, "y"), &q->e);
	return q->node;
}

static int
run_on(struct qc *q, const char *dev, struct ml_tval *out, int *ran_on, struct ml_err *e)
{
	struct ml_session *s = NULL;
	struct ml_session_opts o = { .device = dev };
	int rc = ml_session_new(&s, q->g, &o, e);
	for (int i = 0; rc == 0 && i < q->n_in; i++)
		rc = ml_session_set_input(s, q->names[i], &q->in[i], e);
	if (rc == 0)
		rc = ml_session_run(s, e);
	if (rc == 0) {
		const struct ml_tval *v = ml_session_output(s, 0);
		rc = ml_tval_alloc(out, v->dtype, v->rank, v->dims, e);
		if (rc == 0 && ml_tval_nbytes(v) > 0)
			memcpy(out->data, v->data, (size_t)ml_tval_nbytes(v));
		*ran_on = ml_session_node_device(s, q->node);
	}
	ml_session_free(s);
	return rc;
}

/* qc_check: run on both devices, compare the bytes; frees the case */
static void
qc_check(struct qc *q, const char *what)
{
	char msg[600] = "";
	struct ml_tval a = { 0 }, b = { 0 };
	struct ml_err e = { 0 };
	int dev = -1, dummy;
	bool ok = false;

	ntest++;
	if (!have_cl) {
		printf("ok %d - %s # SKIP no OpenCL device\n", ntest, what);
		goto out;
	}
	if (q->e.code != 0)
		snprintf(msg, sizeof msg, "building: %s", q->e.msg);
	else if (ml_graph_toposort(q->g, &e) < 0 || ml_graph_validate(q->g, &e) < 0 ||
		 ml_graph_infer(q->g, &e) < 0)
		snprintf(msg, sizeof msg, "graph: %s", e.msg);
	else if (run_on(q, "cpu", &a, &dummy, &e) < 0)
		snprintf(msg, sizeof msg, "cpu: %s", e.msg);
	else if (run_on(q, "cl", &b, &dev, &e) < 0)
		snprintf(msg, sizeof msg, "cl: %s", e.msg);
	else if (dev != 1)
		snprintf(msg, sizeof msg, "the node ran on device %d, not cl:0", dev);
	else if (a.dtype != b.dtype || ml_tval_nbytes(&a) != ml_tval_nbytes(&b))
		snprintf(msg, sizeof msg, "the outputs differ in type or size");
	else {
		int64_t nb = ml_tval_nbytes(&a), diff = 0, first = -1;
		const uint8_t *pa = a.data, *pb = b.data;
		for (int64_t i = 0; i < nb; i++)
			if (pa[i] != pb[i]) {
				diff++;
				if (first < 0)
					first = i;
			}
		ok = diff == 0 && nb > 0;
		if (ok)
			snprintf(msg, sizeof msg, "%lld bytes equal", (long long)nb);
		else
			snprintf(msg, sizeof msg, "%lld of %lld bytes differ, first at %lld",
				 (long long)diff, (long long)nb, (long long)first);
	}
	if (!ok)
		nfail++;
	printf("%sok %d - %s (%s)\n", ok ? "" : "not ", ntest, what, msg);
out:
	ml_tval_clear(&a);
	ml_tval_clear(&b);
	for (int i = 0; i < q->n_in; i++)
		ml_tval_clear(&q->in[i]);
	ml_graph_free(q->g);
	q->g = NULL;
}

/*
 * conv_case: Q8Conv of x [n, h, w, c] (h = w = 0: a matrix [n, c]; h < 0:
 * a batch of matrices [n, -h, c]) to m
 * channels, kernel k, stride s, pad p, dilation d, depthwise when dw.
 */
static void
conv_case(int64_t n, int64_t h, int64_t w, int64_t c, int64_t m, int64_t k, int64_t s,
	  int64_t p, int64_t d, bool dw, int64_t xz, int64_t yz, int64_t lo, int64_t hi,
	  bool f32out)
{
	struct qc q;
	qc_init(&q);
	bool mat = h <= 0;
	int64_t kk = mat ? c : dw ? k * k : k * k * c;
	if (h < 0)
		qc_x(&q, "x", ML_U8, 3, (const int64_t[]){ n, -h, c });
	else if (mat)
		qc_x(&q, "x", ML_U8, 2, (const int64_t[]){ n, c });
	else
		qc_x(&q, "x", ML_U8, 4, (const int64_t[]){ n, h, w, c });
	int64_t wn = dw ? kk * c : ml_q8_packed_len(kk, m);
	int8_t *raw = malloc((size_t)(m * kk)), *wp = malloc((size_t)wn);
	int32_t *bias = malloc(sizeof *bias * (size_t)m);
	float *mult = malloc(sizeof *mult * (size_t)m);
	for (int64_t i = 0; i < m * kk; i++)
		raw[i] = (int8_t)(ML_Q8_WMIN + (int)(rnd() % (ML_Q8_WMAX - ML_Q8_WMIN + 1)));
	if (dw)
		memcpy(wp, raw, (size_t)wn);
	else
		ml_q8_pack(wp, raw, m, kk);
	for (int64_t j = 0; j < m; j++) {
		bias[j] = (int32_t)(rnd() % 20001) - 10000;
		mult[j] = (float)(1.0 / (64.0 * (double)kk * (1.0 + (double)(rnd() % 100) / 50.0)));
	}
	qc_const(&q, "w", ML_I8, wn, wp);
	qc_const(&q, "b", ML_I32, m, bias);
	qc_const(&q, "m", ML_F32, m, mult);
	const char *in[] = { "x", "w", "b", "m" };
	int ni = qc_node(&q, "Q8Conv", 4, in);
	if (!mat) {
		ml_node_set_ints(q.g, ni, "kernel_shape", 2, (const int64_t[]){ k, k });
		ml_node_set_ints(q.g, ni, "strides", 2, (const int64_t[]){ s, s });
		ml_node_set_ints(q.g, ni, "pads", 4, (const int64_t[]){ p, p, p, p });
		ml_node_set_ints(q.g, ni, "dilations", 2, (const int64_t[]){ d, d });
	}
	if (dw)
		ml_node_set_int(q.g, ni, "group", c);
	ml_node_set_int(q.g, ni, "x_zero_point", xz);
	ml_node_set_int(q.g, ni, "y_zero_point", yz);
	ml_node_set_int(q.g, ni, "act_min", lo);
	ml_node_set_int(q.g, ni, "act_max", hi);
	if (f32out)
		ml_node_set_int(q.g, ni, "out_float", 1);
	char what[160];
	snprintf(what, sizeof what, "Q8Conv%s x[%lld,%lld,%lld,%lld] m %lld k %lld s %lld p %lld "
		 "d %lld zx %lld zy %lld [%lld,%lld]%s", dw ? " depthwise" : mat ? " matrix" : "",
		 (long long)n, (long long)h, (long long)w, (long long)c, (long long)m, (long long)k,
		 (long long)s, (long long)p, (long long)d, (long long)xz, (long long)yz,
		 (long long)lo, (long long)hi, f32out ? " f32 out" : "");
	qc_check(&q, what);
	free(raw);
	free(wp);
	free(bias);
	free(mult);
}

static void
qdq_cases(void)
{
	for (int rank = 2; rank <= 4; rank++) {
		const int64_t d4[] = { 2, 5, 7, 3 }, d2[] = { 3, 37 }, d3[] = { 2, 3, 37 };
		char what[64];
		struct qc q;
		qc_init(&q);
		qc_x(&q, "x", ML_F32, rank, rank == 4 ? d4 : rank == 3 ? d3 : d2);
		const char *in[] = { "x" };
		int ni = qc_node(&q, "Q8Quantize", 1, in);
		ml_node_set_float(q.g, ni, "scale", 0.0237);
		ml_node_set_int(q.g, ni, "zero_point", 119);
		snprintf(what, sizeof what, "Q8Quantize f32%s", rank == 4 ? "[2,5,7,3] (NaN, inf)" :
			 rank == 3 ? "[2,3,37]" : "[3,37]");
		qc_check(&q, what);

		const int64_t e4[] = { 2, 7, 3, 5 };
		qc_init(&q);
		qc_x(&q, "x", ML_U8, rank, rank == 4 ? e4 : rank == 3 ? d3 : d2);
		ni = qc_node(&q, "Q8Dequantize", 1, in);
		ml_node_set_float(q.g, ni, "scale", 0.0137);
		ml_node_set_int(q.g, ni, "zero_point", 77);
		snprintf(what, sizeof what, "Q8Dequantize u8%s", rank == 4 ? "[2,7,3,5]" :
			 rank == 3 ? "[2,3,37]" : "[3,37]");
		qc_check(&q, what);
	}
}

static void
other_cases(void)
{
	struct qc q;
	qc_init(&q);
	qc_x(&q, "a", ML_U8, 4, (const int64_t[]){ 2, 5, 6, 7 });
	qc_x(&q, "b", ML_U8, 4, (const int64_t[]){ 2, 5, 6, 7 });
	const char *in2[] = { "a", "b" };
	int ni = qc_node(&q, "Q8Add", 2, in2);
	ml_node_set_float(q.g, ni, "a_scale", 0.0195);
	ml_node_set_int(q.g, ni, "a_zero_point", 3);
	ml_node_set_float(q.g, ni, "b_scale", 0.0275);
	ml_node_set_int(q.g, ni, "b_zero_point", 123);
	ml_node_set_float(q.g, ni, "y_scale", 0.0271);
	ml_node_set_int(q.g, ni, "y_zero_point", 40);
	ml_node_set_int(q.g, ni, "act_min", 40);
	qc_check(&q, "Q8Add u8[2,5,6,7] zero points, act_min");

	const int64_t pools[][3] = { { 2, 2, 0 }, { 3, 2, 1 }, { 3, 1, 1 } };
	for (int i = 0; i < 3; i++) {
		qc_init(&q);
		qc_x(&q, "x", ML_U8, 4, (const int64_t[]){ 2, 9, 11, 5 });
		const char *in[] = { "x" };
		ni = qc_node(&q, "Q8MaxPool", 1, in);
		int64_t k = pools[i][0], s = pools[i][1], p = pools[i][2];
		ml_node_set_ints(q.g, ni, "kernel_shape", 2, (const int64_t[]){ k, k });
		ml_node_set_ints(q.g, ni, "strides", 2, (const int64_t[]){ s, s });
		ml_node_set_ints(q.g, ni, "pads", 4, (const int64_t[]){ p, p, p, p });
		char what[80];
		snprintf(what, sizeof what, "Q8MaxPool u8[2,9,11,5] k %lld s %lld p %lld",
			 (long long)k, (long long)s, (long long)p);
		qc_check(&q, what);
	}
	qc_init(&q);
	qc_x(&q, "x", ML_U8, 4, (const int64_t[]){ 3, 7, 6, 19 });
	const char *in[] = { "x" };
	qc_node(&q, "Q8GlobalAveragePool", 1, in);
	qc_check(&q, "Q8GlobalAveragePool u8[3,7,6,19]");
}

int
main(void)
{
	struct ml_err e = { 0 };
	struct ml_device_info *devs = NULL;
	int nd = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (ml_devices(&devs, &nd, &e) == 0) {
		have_cl = nd > 1;
		ml_free(devs);
	}
	qdq_cases();
	/* n, h, w, c, m, k, s, p, d, dw, xzero, yzero, lo, hi, f32out */
	conv_case(2, 9, 8, 3, 8, 3, 1, 1, 1, false, 0, 0, 0, 255, false);
	conv_case(1, 11, 10, 16, 24, 3, 2, 1, 1, false, 17, 128, 0, 255, false);
	conv_case(2, 7, 7, 20, 33, 1, 1, 0, 1, false, 0, 5, 5, 200, false);
	conv_case(1, 9, 9, 5, 17, 3, 1, 2, 2, false, 200, 30, 30, 255, false);
	conv_case(1, 12, 12, 8, 16, 5, 2, 2, 1, false, 9, 0, 0, 255, false);
	conv_case(2, 28, 28, 1, 6, 5, 1, 2, 1, false, 31, 3, 0, 255, false);	/* LeNet's first */
	conv_case(1, 15, 13, 2, 5, 3, 2, 1, 1, false, 0, 7, 0, 255, false);
	conv_case(2, 10, 9, 16, 16, 3, 1, 1, 1, true, 0, 0, 0, 255, false);
	conv_case(1, 11, 11, 21, 21, 3, 2, 1, 1, true, 113, 70, 0, 180, false);
	conv_case(1, 9, 9, 32, 32, 3, 1, 2, 2, true, 4, 128, 0, 255, false);
	conv_case(3, 0, 0, 37, 10, 1, 1, 0, 1, false, 7, 0, 0, 255, true);
	conv_case(4, 0, 0, 64, 19, 1, 1, 0, 1, false, 0, 128, 0, 255, false);
	conv_case(2, -5, 0, 36, 21, 1, 1, 0, 1, false, 3, 0, 0, 255, true);
	conv_case(3, -4, 0, 64, 40, 1, 1, 0, 1, false, 0, 100, 100, 255, false);
	other_cases();
	printf("1..%d\n", ntest);
	return nfail == 0 ? 0 : 1;
}
