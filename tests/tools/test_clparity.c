/*
 * test_clparity.c: backend parity. Every op (and dtype) the OpenCL device
 * has a kernel for runs in one-node graphs on random inputs, on the CPU
 * and with --device cl, and the two results must agree within the op's
 * bound: max |cl - cpu| <= tol * (1 + max |cpu|). Each case also checks
 * that the node really ran on the device. Prints TAP; every case is
 * skipped where there is no OpenCL device. ML_CL_CACHE is honoured.
 * The cases run again with f16 tensors, which every OpenCL device runs
 * (half storage, f32 arithmetic, cl_khr_fp16 or not), against the CPU's
 * f16 kernels on the same f16 inputs, within the op's f16 bound: 0 where
 * both sides must give the same bits (selection, copies, and the sums and
 * products that f32 holds exactly before the one rounding to half), else
 * 2e-3, two half ulps at the top of the range: both sides compute in f32
 * and round once, so only values on a rounding boundary may differ, by one
 * ulp. A case whose op the CPU has no f16 kernel for is skipped.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"
#ifndef ML_NO_OPENCL
#include "cl/cl.h"
#endif

static int ntest, nfail;
static enum ml_dtype fdt = ML_F32;	/* the dtype of inputs and weights */
static uint64_t rng = 88172645463325252ull;

static double
urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

/* the case under construction */
struct pc {
	struct ml_graph *g;
	struct ml_err e;
	int node;
	int n_in;
	struct ml_tval in[8];
	char names[8][16];
	double lo, hi;		/* range of random inputs */
	double tol;		/* the bound on f32 tensors */
	double tol16;		/* on f16 tensors */
};

static void
pc_init(struct pc *p, int64_t opset)
{
	memset(p, 0, sizeof *p);
	ml_graph_new(&p->g, &p->e);
	ml_graph_set_opset(p->g, "", opset, &p->e);
	p->lo = -2;
	p->hi = 2;
	p->tol = 1e-5;
	p->tol16 = 2e-3;
}

/*
 * exact16: ops whose f16 result must be the CPU's bit for bit: selections,
 * copies and views, and Add, Sub, Mul of two halves, which both sides
 * compute as the same correctly rounded f32 operation before rounding to
 * half. A case made of such ops only has the f16 bound 0.
 */
static bool
exact16(const char *op)
{
	static const char *ops[] = { "Relu", "Neg", "Abs", "Floor", "Ceil", "Clip", "Add", "Sub",
				     "Mul", "Max", "Min", "PRelu", "Transpose", "Concat", "Split",
				     "Slice", "Expand", "Gather", "Cast", "MaxPool", "GlobalMaxPool",
				     "ReduceMax", "ReduceMin", "Reshape", "Flatten", "Squeeze",
				     "Unsqueeze", "Identity" };
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (strcmp(op, ops[i]) == 0)
			return true;
	return false;
}

/* pc_x: a random f32 input of the given shape */
static void
pc_x(struct pc *p, const char *name, int rank, const int64_t *dims)
{
	int ti = ml_graph_tensor(p->g, name);
	struct ml_tensor *t = p->g->tensors[ti];
	t->dtype = fdt;
	t->rank = rank;
	t->kind = ML_TK_INPUT;
	memcpy(t->dims, dims, sizeof *dims * (size_t)rank);
	ml_graph_add_input(p->g, ti, &p->e);
	struct ml_tval *v = &p->in[p->n_in];
	ml_tval_alloc(v, fdt, rank, dims, &p->e);
	for (int64_t i = 0; i < ml_tval_numel(v); i++)
		ml_set_f64(v->data, fdt, i, p->lo + (p->hi - p->lo) * urand());
	snprintf(p->names[p->n_in++], sizeof p->names[0], "%s", name);
}

/* pc_w: a random f32 constant (weights) */
static void
pc_w(struct pc *p, const char *name, int rank, const int64_t *dims, double lo, double hi)
{
	int64_t n = 1;
	for (int d = 0; d < rank; d++)
		n *= dims[d];
	size_t es = ml_dtype_size(fdt);
	void *f = malloc(es * (size_t)(n ? n : 1));
	for (int64_t i = 0; i < n; i++)
		ml_set_f64(f, fdt, i, lo + (hi - lo) * urand());
	ml_graph_set_data(p->g, ml_graph_tensor(p->g, name), ML_TK_CONST, fdt, rank, dims, f,
			  es * (size_t)n, &p->e);
	free(f);
}

static void
pc_i64(struct pc *p, const char *name, int n, const int64_t *v)
{
	int64_t dims[1] = { n };
	ml_graph_set_data(p->g, ml_graph_tensor(p->g, name), ML_TK_CONST, ML_I64, 1, dims, v,
			  sizeof *v * (size_t)n, &p->e);
}

static void
pc_f32c(struct pc *p, const char *name, float v)
{
	unsigned char buf[8];
	ml_set_f64(buf, fdt, 0, v);
	ml_graph_set_data(p->g, ml_graph_tensor(p->g, name), ML_TK_CONST, fdt, 0, NULL, buf,
			  ml_dtype_size(fdt), &p->e);
}

/* pc_node_d: the node of domain dom, inputs and outputs comma-separated ("" omits one) */
static int
pc_node_d(struct pc *p, const char *dom, const char *op, const char *ins, const char *outs)
{
	char ib[256], ob[256];
	const char *in[16], *out[8];
	int ni = 0, no = 0;
	snprintf(ib, sizeof ib, "%s", ins);
	snprintf(ob, sizeof ob, "%s", outs);
	for (char *s = ib, *q; ni < 16; s = q + 1) {
		q = strchr(s, ',');
		in[ni++] = s;
		if (q == NULL)
			break;
		*q = '\0';
	}
	for (char *s = ob, *q; no < 8; s = q + 1) {
		q = strchr(s, ',');
		out[no++] = s;
		if (q == NULL)
			break;
		*q = '\0';
	}
	p->node = ml_graph_add_node(p->g, op, dom, op, ni, in, no, out, &p->e);
	for (int i = 0; i < no; i++)
		if (out[i][0] != '\0')
			ml_graph_add_output(p->g, ml_graph_find(p->g, out[i]), &p->e);
	return p->node;
}

/* pc_node: an ONNX node (pc_node_d) */
static int
pc_node(struct pc *p, const char *op, const char *ins, const char *outs)
{
	return pc_node_d(p, "", op, ins, outs);
}

static bool have_cl;
static char cl_type[16];	/* cl:0's type: "cpu", "gpu", ... */

static int
run_on(struct pc *p, const char *dev, struct ml_tval *outs, int *n_out, int *ran_on,
       struct ml_err *e)
{
	struct ml_session *s = NULL;
	struct ml_session_opts o = { .device = dev };
	int rc = ml_session_new(&s, p->g, &o, e);
	for (int i = 0; rc == 0 && i < p->n_in; i++)
		rc = ml_session_set_input(s, p->names[i], &p->in[i], e);
	if (rc == 0)
		rc = ml_session_run(s, e);
	if (rc == 0) {
		*n_out = p->g->n_outputs;
		for (int i = 0; i < p->g->n_outputs && i < 4; i++) {
			const struct ml_tval *v = ml_session_output(s, i);
			ml_tval_alloc(&outs[i], v->dtype, v->rank, v->dims, e);
			if (ml_tval_nbytes(v) > 0)
				memcpy(outs[i].data, v->data, (size_t)ml_tval_nbytes(v));
		}
		*ran_on = ml_session_node_device(s, p->node);
	}
	ml_session_free(s);
	return rc;
}

/*
 * compare: output i, a (the CPU's) against b, within tol (relative to
 * 1 + max |a|); the worst error so far in *worst, what failed in msg.
 */
static bool
compare(const struct ml_tval *a, const struct ml_tval *b, int i, double tol, double *worst,
	char *msg, size_t n)
{
	bool ok = a->dtype == b->dtype && a->rank == b->rank;
	for (int d = 0; ok && d < a->rank; d++)
		ok = a->dims[d] == b->dims[d];
	if (!ok) {
		snprintf(msg, n, "output %d: shapes differ", i);
		return false;
	}
	double ref = 0, diff = 0;
	for (int64_t k = 0; k < ml_tval_numel(a); k++) {
		double x = ml_get_f64(a->data, a->dtype, k);
		double y = ml_get_f64(b->data, b->dtype, k);
		ref = fmax(ref, fabs(x));
		if (isnan(x) != isnan(y))
			diff = INFINITY;
		else if (!isnan(x))
			diff = fmax(diff, fabs(x - y));
	}
	double err = diff / (1 + ref);
	*worst = fmax(*worst, err);
	if (err > tol) {
		snprintf(msg, n, "output %d: error %.3g over the bound %.3g", i, err, tol);
		return false;
	}
	return true;
}

/* pc_check: run on both devices and compare; frees the case */
static void
pc_check(struct pc *p, const char *what)
{
	char msg[600], wbuf[300];
	const char *only = getenv("CLPARITY_ONLY");
	if (fdt == ML_F16) {
		snprintf(wbuf, sizeof wbuf, "f16 %s", what);
		what = wbuf;
	}
	ntest++;
	if (only != NULL && strstr(what, only) == NULL) {
		printf("ok %d - %s # SKIP not in CLPARITY_ONLY\n", ntest, what);
		goto out;
	}
	if (!have_cl) {
		printf("ok %d - %s # SKIP no OpenCL device\n", ntest, what);
		goto out;
	}
	struct ml_tval a[4] = { 0 }, b[4] = { 0 };
	int na = 0, nb = 0, dev = -1, dummy;
	struct ml_err e = { 0 };
	bool ok = false;
	bool half = fdt == ML_F16;
	bool exact = p->e.code == 0;
	for (int i = 0; exact && i < p->g->n_nodes; i++)
		exact = exact16(p->g->nodes[i].op_type);
	double tol = half ? (exact ? 0 : p->tol16) : p->tol;
	msg[0] = '\0';
	if (half && p->e.code == 0 && ml_graph_toposort(p->g, &e) == 0 &&
	    ml_graph_validate(p->g, &e) == 0 && ml_graph_infer(p->g, &e) == 0 &&
	    run_on(p, "cpu", a, &na, &dummy, &e) == ML_ENOTSUP) {
		printf("ok %d - %s # SKIP the CPU has no f16 kernel (%s)\n", ntest, what, e.msg);
		goto out;
	}
	for (int i = 0; i < 4; i++)
		ml_tval_clear(&a[i]);
	memset(&e, 0, sizeof e);
	if (p->e.code != 0) {
		snprintf(msg, sizeof msg, "building: %s", p->e.msg);
	} else if (ml_graph_toposort(p->g, &e) < 0 || ml_graph_validate(p->g, &e) < 0 ||
		   ml_graph_infer(p->g, &e) < 0) {
		snprintf(msg, sizeof msg, "graph: %s", e.msg);
	} else if (run_on(p, "cpu", a, &na, &dummy, &e) < 0) {
		snprintf(msg, sizeof msg, "cpu: %s", e.msg);
	} else if (run_on(p, "cl", b, &nb, &dev, &e) < 0) {
		snprintf(msg, sizeof msg, "cl: %s", e.msg);
	} else if (dev != 1) {
		snprintf(msg, sizeof msg, "the node ran on device %d, not cl:0", dev);
	} else {
		ok = na == nb;
		double worst = 0;
		for (int i = 0; ok && i < na; i++)
			ok = compare(&a[i], &b[i], i, tol, &worst, msg, sizeof msg);
		if (ok)
			snprintf(msg, sizeof msg, "error %.2g, bound %.2g", worst, tol);
	}
	if (!ok)
		nfail++;
	printf("%sok %d - %s (%s)\n", ok ? "" : "not ", ntest, what, msg);
	for (int i = 0; i < 4; i++) {
		ml_tval_clear(&a[i]);
		ml_tval_clear(&b[i]);
	}
out:
	for (int i = 0; i < p->n_in; i++)
		ml_tval_clear(&p->in[i]);
	ml_graph_free(p->g);
	p->g = NULL;
}

#define D(...) ((const int64_t[]){ __VA_ARGS__ })
#define R(...) (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t))
#define X(p, name, ...) pc_x((p), (name), R(__VA_ARGS__), D(__VA_ARGS__))
#define W(p, name, ...) pc_w((p), (name), R(__VA_ARGS__), D(__VA_ARGS__), -1, 1)

static void
unary_cases(void)
{
	static const char *ops[] = { "Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "Celu",
				     "HardSigmoid", "HardSwish", "Erf", "Exp", "Neg", "Abs",
				     "Reciprocal", "Softplus", "Softsign", "Floor", "Ceil", "Sin",
				     "Cos", "Log", "Sqrt" };
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		struct pc p;
		pc_init(&p, 14);
		if (strcmp(ops[i], "Log") == 0 || strcmp(ops[i], "Sqrt") == 0 ||
		    strcmp(ops[i], "Reciprocal") == 0)
			p.lo = 0.1;
		p.tol = 1e-5;
		X(&p, "x", 3, 5, 7);
		pc_node(&p, ops[i], "x", "y");
		char what[64];
		snprintf(what, sizeof what, "%s f32[3,5,7]", ops[i]);
		pc_check(&p, what);
	}
	struct pc p;
	pc_init(&p, 13);
	X(&p, "x", 4, 9);
	pc_f32c(&p, "lo", -0.5f);
	pc_f32c(&p, "hi", 0.75f);
	pc_node(&p, "Clip", "x,lo,hi", "y");
	pc_check(&p, "Clip with min and max inputs");
	pc_init(&p, 6);
	X(&p, "x", 4, 9);
	pc_node(&p, "Clip", "x", "y");
	ml_node_set_float(p.g, p.node, "min", 0);
	ml_node_set_float(p.g, p.node, "max", 6);
	pc_check(&p, "Clip opset 6 attributes (ReLU6)");
}

static void
binary_cases(void)
{
	static const char *ops[] = { "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min" };
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		struct pc p;
		char what[80];
		pc_init(&p, 14);
		p.lo = 0.5;
		p.tol = 1e-5;
		X(&p, "a", 2, 3, 4);
		X(&p, "b", 2, 3, 4);
		pc_node(&p, ops[i], "a,b", "y");
		snprintf(what, sizeof what, "%s same shapes", ops[i]);
		pc_check(&p, what);
		pc_init(&p, 14);
		p.lo = 0.5;
		X(&p, "a", 2, 1, 4, 5);
		X(&p, "b", 3, 1, 5);
		pc_node(&p, ops[i], "a,b", "y");
		snprintf(what, sizeof what, "%s broadcast [2,1,4,5] [3,1,5]", ops[i]);
		pc_check(&p, what);
		pc_init(&p, 14);
		p.lo = 0.5;
		X(&p, "a", 6, 7);
		X(&p, "b", 1);
		pc_node(&p, ops[i], "a,b", "y");
		snprintf(what, sizeof what, "%s with a scalar", ops[i]);
		pc_check(&p, what);
	}
	struct pc p;
	pc_init(&p, 14);
	X(&p, "x", 2, 3, 4, 4);
	W(&p, "slope", 3, 1, 1);
	pc_node(&p, "PRelu", "x,slope", "y");
	pc_check(&p, "PRelu per channel");
}

static void
shape_cases(void)
{
	struct pc p;
	pc_init(&p, 14);
	X(&p, "x", 2, 3, 4, 5);
	pc_node(&p, "Transpose", "x", "y");
	ml_node_set_ints(p.g, p.node, "perm", 4, D(0, 2, 3, 1));
	pc_check(&p, "Transpose perm 0,2,3,1");
	pc_init(&p, 14);
	X(&p, "x", 3, 4, 5);
	pc_node(&p, "Transpose", "x", "y");
	pc_check(&p, "Transpose default perm");
	pc_init(&p, 14);
	X(&p, "a", 2, 3, 4);
	X(&p, "b", 2, 5, 4);
	X(&p, "c", 2, 1, 4);
	pc_node(&p, "Concat", "a,b,c", "y");
	ml_node_set_int(p.g, p.node, "axis", 1);
	pc_check(&p, "Concat axis 1 of three");
	pc_init(&p, 14);
	X(&p, "x", 2, 9, 4);
	pc_i64(&p, "split", 3, D(2, 3, 4));
	pc_node(&p, "Split", "x,split", "y0,y1,y2");
	ml_node_set_int(p.g, p.node, "axis", 1);
	pc_check(&p, "Split axis 1 into 2,3,4");
	pc_init(&p, 14);
	X(&p, "x", 6, 8, 5);
	pc_i64(&p, "st", 2, D(1, -1));
	pc_i64(&p, "en", 2, D(5, 0));
	pc_i64(&p, "ax", 2, D(0, 1));
	pc_i64(&p, "sp", 2, D(2, -2));
	pc_node(&p, "Slice", "x,st,en,ax,sp", "y");
	pc_check(&p, "Slice with steps 2 and -2");
	pc_init(&p, 14);
	X(&p, "x", 3, 1);
	pc_i64(&p, "shape", 3, D(2, 3, 4));
	pc_node(&p, "Expand", "x,shape", "y");
	pc_check(&p, "Expand [3,1] to [2,3,4]");
	pc_init(&p, 14);
	X(&p, "x", 5, 4, 3);
	pc_i64(&p, "idx", 4, D(3, 0, -1, 2));
	pc_node(&p, "Gather", "x,idx", "y");
	ml_node_set_int(p.g, p.node, "axis", 1);
	pc_check(&p, "Gather axis 1, a negative index");
	pc_init(&p, 14);
	p.tol = 0;
	p.lo = -60000;	/* f16's whole range (an inf would make the error relative to inf) */
	p.hi = 60000;
	X(&p, "x", 2, 3, 40);
	pc_node(&p, "Cast", "x", "y");
	ml_node_set_int(p.g, p.node, "to", fdt == ML_F32 ? 10 : 1);	/* FLOAT16 : FLOAT */
	pc_check(&p, "Cast to the other float type");
	pc_init(&p, 14);
	p.tol = 0;
	X(&p, "x", 2, 3, 4);
	pc_node(&p, "Cast", "x", "y");
	ml_node_set_int(p.g, p.node, "to", fdt == ML_F32 ? 1 : 10);
	pc_check(&p, "Cast to the same type");
	pc_init(&p, 14);
	X(&p, "x", 2, 3, 4);
	pc_i64(&p, "shape", 2, D(6, -1));
	pc_node(&p, "Reshape", "x,shape", "t");
	pc_node(&p, "Relu", "t", "y");
	p.node = 0;
	pc_check(&p, "Reshape as a view, then Relu");
	pc_init(&p, 14);
	X(&p, "x", 2, 3, 4);
	pc_node(&p, "Flatten", "x", "t");
	pc_node(&p, "Neg", "t", "y");
	p.node = 0;
	pc_check(&p, "Flatten as a view");
	pc_init(&p, 14);
	X(&p, "x", 2, 1, 4);
	pc_i64(&p, "ax", 1, D(1));
	pc_node(&p, "Squeeze", "x,ax", "t");
	pc_i64(&p, "ax2", 1, D(0));
	pc_node(&p, "Unsqueeze", "t,ax2", "u");
	pc_node(&p, "Identity", "u", "y");
	p.node = 1;
	pc_check(&p, "Squeeze, Unsqueeze, Identity as views");
}

static void
conv_case(const char *what, int64_t n, int64_t c, int64_t h, int64_t w, int64_t m, int64_t k,
	  int64_t stride, int64_t pad, int64_t group, bool bias)
{
	struct pc p;
	pc_init(&p, 14);
	p.tol = 1e-4;
	X(&p, "x", n, c, h, w);
	W(&p, "w", m, c / group, k, k);
	if (bias)
		W(&p, "b", m);
	pc_node(&p, "Conv", bias ? "x,w,b" : "x,w", "y");
	ml_node_set_ints(p.g, p.node, "strides", 2, D(stride, stride));
	ml_node_set_ints(p.g, p.node, "pads", 4, D(pad, pad, pad, pad));
	ml_node_set_int(p.g, p.node, "group", group);
	pc_check(&p, what);
}

/*
 * FusedConv, mlopt's act(Conv + B + Z), on each of the device's
 * convolution paths (im2col strided, padded and grouped; the direct 1x1
 * GEMM; depthwise), every activation with B and Z, and B, Z or neither
 * alone. The op is f32 only (lib/ops/fused.c), so there is no f16
 * FusedConv graph: in the f16 pass the inputs are rounded to half, the
 * CPU runs the f32 node on them and cl:0 the same convolution through
 * mlcl_conv2d_ex on half buffers (the -DML_F16 kernels), within the f16
 * bound.
 */
static const char *const acts[] = { "", "Relu", "Clip", "Sigmoid", "Tanh", "Silu", "Gelu" };

struct fcv {
	const char *what;
	int64_t n, c, h, w, m, k, stride, pad, group;
};

#ifndef ML_NO_OPENCL
static void
fcv_geom(const struct fcv *f, int act, struct mlcl_conv *cv)
{
	*cv = (struct mlcl_conv){ .n = f->n, .c = f->c, .h = f->h, .w = f->w, .m = f->m,
				  .kh = f->k, .kw = f->k, .group = f->group,
				  .stride = { f->stride, f->stride }, .dil = { 1, 1 },
				  .pad = { f->pad, f->pad, f->pad, f->pad }, .act = act,
				  .lo = -0.5f, .hi = 0.75f };
}

/* half_values: round n floats to the nearest half */
static void
half_values(float *v, int64_t n)
{
	unsigned char h[2];
	for (int64_t i = 0; i < n; i++) {
		ml_set_f64(h, ML_F16, 0, v[i]);
		v[i] = (float)ml_get_f64(h, ML_F16, 0);
	}
}

/*
 * cl_fconv16: the convolution cv on cl:0 in f16 storage, from the f32
 * operands src (x, w, b, z; b and z may be NULL) of cnt elements, into
 * y (ny floats, widened from the device's halves).
 */
static int
cl_fconv16(const struct mlcl_conv *cv, const float *const *src, const int64_t *cnt, int64_t ny,
	   float *y, struct ml_err *e)
{
	struct mlcl_dev *d = NULL;
	struct mlcl_buf *buf[5] = { 0 };
	int64_t most = ny;
	for (int i = 0; i < 4; i++)
		most = cnt[i] > most ? cnt[i] : most;
	unsigned char *h = malloc((size_t)most * 2);
	int rc = h != NULL ? mlcl_device(0, &d, e) : ML_ENOMEM;
	for (int i = 0; rc == 0 && i < 5; i++) {
		if (i < 4 && src[i] == NULL)
			continue;
		rc = mlcl_buf_get(d, (size_t)(i < 4 ? cnt[i] : ny) * 2, &buf[i], e);
		for (int64_t k = 0; rc == 0 && i < 4 && k < cnt[i]; k++)
			ml_set_f64(h, ML_F16, k, src[i][k]);
		if (rc == 0 && i < 4)
			rc = mlcl_write(d, buf[i]->mem, 0, h, (size_t)cnt[i] * 2, e);
	}
	if (rc == 0)
		rc = mlcl_conv2d_ex(d, cv, true, buf[0]->mem, 0, buf[1]->mem, 0,
				    buf[2] != NULL ? buf[2]->mem : NULL, 0,
				    buf[3] != NULL ? buf[3]->mem : NULL, 0, buf[4]->mem, 0, e);
	if (rc == 0)
		rc = mlcl_read(d, buf[4]->mem, 0, h, (size_t)ny * 2, e);
	for (int64_t k = 0; rc == 0 && k < ny; k++)
		y[k] = (float)ml_get_f64(h, ML_F16, k);
	for (int i = 0; i < 5; i++)
		if (buf[i] != NULL)
			mlcl_buf_put(d, buf[i]);
	free(h);
	return rc;
}

/* fconv16_check: pc_check for the f16 pass of a FusedConv case (see above); frees the case */
static void
fconv16_check(struct pc *p, const struct fcv *f, bool bias, bool z, int act, const char *what)
{
	char msg[600] = "";
	const char *only = getenv("CLPARITY_ONLY");
	bool ok = false;
	ntest++;
	if (only != NULL && strstr(what, only) == NULL) {
		printf("ok %d - f16 %s # SKIP not in CLPARITY_ONLY\n", ntest, what);
		goto out;
	}
	if (!have_cl) {
		printf("ok %d - f16 %s # SKIP no OpenCL device\n", ntest, what);
		goto out;
	}
	struct ml_tval a[4] = { 0 }, b = { 0 };
	struct ml_err e = { 0 };
	struct mlcl_conv cv;
	const float *src[4] = { NULL };
	int64_t cnt[4] = { 0 };
	int na = 0, dummy;
	const char *names[4] = { "x", "w", bias ? "b" : NULL, z ? "z" : NULL };
	for (int i = 0; i < 4; i++) {
		if (names[i] == NULL)
			continue;
		struct ml_tensor *t = p->g->tensors[ml_graph_find(p->g, names[i])];
		float *v = t->data;
		cnt[i] = (int64_t)(t->nbytes / sizeof(float));
		if (v == NULL) {	/* an input: x is p->in[0], z p->in[1] */
			struct ml_tval *in = &p->in[i == 0 ? 0 : 1];
			v = in->data;
			cnt[i] = ml_tval_numel(in);
		}
		half_values(v, cnt[i]);
		src[i] = v;
	}
	fcv_geom(f, act, &cv);
	if (p->e.code != 0) {
		snprintf(msg, sizeof msg, "building: %s", p->e.msg);
	} else if (ml_graph_toposort(p->g, &e) < 0 || ml_graph_validate(p->g, &e) < 0 ||
		   ml_graph_infer(p->g, &e) < 0) {
		snprintf(msg, sizeof msg, "graph: %s", e.msg);
	} else if (run_on(p, "cpu", a, &na, &dummy, &e) < 0) {
		snprintf(msg, sizeof msg, "cpu: %s", e.msg);
	} else if (ml_tval_alloc(&b, ML_F32, a[0].rank, a[0].dims, &e) < 0 ||
		   cl_fconv16(&cv, src, cnt, ml_tval_numel(&b), b.data, &e) < 0) {
		snprintf(msg, sizeof msg, "cl: %s", e.msg);
	} else {
		double worst = 0;
		ok = compare(&a[0], &b, 0, p->tol16, &worst, msg, sizeof msg);
		if (ok)
			snprintf(msg, sizeof msg, "error %.2g, bound %.2g", worst, p->tol16);
	}
	if (!ok)
		nfail++;
	printf("%sok %d - f16 %s (%s)\n", ok ? "" : "not ", ntest, what, msg);
	for (int i = 0; i < 4; i++)
		ml_tval_clear(&a[i]);
	ml_tval_clear(&b);
out:
	for (int i = 0; i < p->n_in; i++)
		ml_tval_clear(&p->in[i]);
	ml_graph_free(p->g);
	p->g = NULL;
}

#endif

static void fmm_act(struct pc *p, int act);

/* conv_attrs: f's window, strides, pads, group and activation act on the convolution p->node */
static void
conv_attrs(struct pc *p, const struct fcv *f, int act)
{
	ml_node_set_ints(p->g, p->node, "kernel_shape", 2, D(f->k, f->k));
	ml_node_set_ints(p->g, p->node, "strides", 2, D(f->stride, f->stride));
	ml_node_set_ints(p->g, p->node, "pads", 4, D(f->pad, f->pad, f->pad, f->pad));
	ml_node_set_int(p->g, p->node, "group", f->group);
	fmm_act(p, act);
}

/* fconv_build: the FusedConv case of f (an f32 graph in either pass) */
static void
fconv_build(struct pc *p, const struct fcv *f, bool bias, bool z, int act)
{
	int64_t oh = (f->h + 2 * f->pad - f->k) / f->stride + 1;
	int64_t ow = (f->w + 2 * f->pad - f->k) / f->stride + 1;
	enum ml_dtype dt = fdt;
	fdt = ML_F32;
	pc_init(p, 14);
	p->tol = 1e-4;
	X(p, "x", f->n, f->c, f->h, f->w);
	W(p, "w", f->m, f->c / f->group, f->k, f->k);
	if (bias)
		W(p, "b", f->m);
	if (z)
		X(p, "z", f->n, f->m, oh, ow);
	pc_node_d(p, "ml", "FusedConv", bias ? (z ? "x,w,b,z" : "x,w,b") : (z ? "x,w,,z" : "x,w"),
		  "y");
	conv_attrs(p, f, act);
	fdt = dt;
}

static void
fconv_case(const struct fcv *f, bool bias, bool z, int act)
{
	struct pc p;
	char what[200];
	snprintf(what, sizeof what, "FusedConv %s%s%s, %s", f->what, bias ? " +B" : "",
		 z ? " +Z" : "", act ? acts[act] : "no activation");
	fconv_build(&p, f, bias, z, act);
#ifndef ML_NO_OPENCL
	if (fdt == ML_F16) {
		fconv16_check(&p, f, bias, z, act, what);
		return;
	}
#endif
	pc_check(&p, what);	/* f32; without OpenCL f16 too, which it skips */
}

/* cpu_check: case p runs, and its node on the CPU, not on cl:0 (a device refusal); frees the case */
static void
cpu_check(struct pc *p, const char *what)
{
	ntest++;
	if (!have_cl) {
		printf("ok %d - %s # SKIP no OpenCL device\n", ntest, what);
	} else {
		struct ml_tval a[4] = { 0 };
		struct ml_err e = { 0 };
		int na = 0, dev = -1;
		int rc = ml_graph_toposort(p->g, &e);
		if (rc == 0)
			rc = ml_graph_infer(p->g, &e);
		if (rc == 0)
			rc = run_on(p, "cl", a, &na, &dev, &e);
		bool ok = rc == 0 && dev == 0;
		if (!ok)
			nfail++;
		printf("%sok %d - %s (rc %d, device %d%s%s)\n", ok ? "" : "not ", ntest, what, rc,
		       dev, rc ? ": " : "", rc ? e.msg : "");
		for (int i = 0; i < 4; i++)
			ml_tval_clear(&a[i]);
	}
	for (int i = 0; i < p->n_in; i++)
		ml_tval_clear(&p->in[i]);
	ml_graph_free(p->g);
	p->g = NULL;
}

/*
 * fconv_refusals: what the device must not take: a FusedConv carrying
 * packed_n (weights packed for the CPU) stays on the CPU, right; an
 * unknown activation code is ML_EINVAL from mlcl_conv2d_ex.
 */
static void
fconv_refusals(void)
{
	static const struct fcv f = { "1x1", 1, 8, 4, 4, 8, 1, 1, 0, 1 };
	struct pc p;
	fconv_build(&p, &f, true, true, 1);
	ml_node_set_int(p.g, p.node, "packed_n", 8);
	cpu_check(&p, "FusedConv with packed_n stays on the CPU");
	ntest++;
	if (!have_cl) {
		printf("ok %d - mlcl_conv2d_ex refuses activation code 7 # SKIP no OpenCL device\n",
		       ntest);
		return;
	}
#ifndef ML_NO_OPENCL
	struct mlcl_dev *d = NULL;
	struct mlcl_conv cv;
	struct ml_err e = { 0 };
	struct mlcl_buf *b = NULL;
	fcv_geom(&f, 7, &cv);
	int rc = mlcl_device(0, &d, &e);
	if (rc == 0)
		rc = mlcl_buf_get(d, 1024, &b, &e);
	if (rc == 0)
		rc = mlcl_conv2d_ex(d, &cv, false, b->mem, 0, b->mem, 0, NULL, 0, NULL, 0, b->mem, 0,
				    &e);
	mlcl_buf_put(d, b);
	if (rc != ML_EINVAL)
		nfail++;
	printf("%sok %d - mlcl_conv2d_ex refuses activation code 7 (%d: %s)\n",
	       rc == ML_EINVAL ? "" : "not ", ntest, rc, e.msg);
#endif
}

/*
 * ConvNHWC (mlopt's layout pass; W [kH, kW, C / group, M]) on cl:0 against
 * the CPU: depthwise, pointwise (the GEMM on X itself), padded and strided
 * windows through the NHWC im2col, an RGB stem, with and without bias, Z
 * and activations. The device takes ConvNHWC on a CPU device (POCL) only
 * with ML_CL_NHWC=1, which these cases set; without it there, the node
 * stays on the CPU, and so does one whose W is packed for the CPU.
 */
static void
nhwc_build(struct pc *p, const struct fcv *f, bool bias, bool z, int act)
{
	int64_t oh = (f->h + 2 * f->pad - f->k) / f->stride + 1;
	int64_t ow = (f->w + 2 * f->pad - f->k) / f->stride + 1;
	pc_init(p, 14);
	p->tol = 1e-4;
	X(p, "x", f->n, f->h, f->w, f->c);
	W(p, "w", f->k, f->k, f->c / f->group, f->m);
	if (bias)
		W(p, "b", f->m);
	if (z)
		X(p, "z", f->n, oh, ow, f->m);
	pc_node_d(p, "ml", "ConvNHWC", bias ? (z ? "x,w,b,z" : "x,w,b") : (z ? "x,w,,z" : "x,w"),
		  "y");
	conv_attrs(p, f, act);
}

static void
nhwc_cases(void)
{
	static const struct fcv cases[] = {
		{ "depthwise 3x3 pad 1", 2, 24, 9, 7, 24, 3, 1, 1, 24 },
		{ "depthwise 5x5 stride 2 pad 2", 1, 40, 11, 11, 40, 5, 2, 2, 40 },
		{ "pointwise 58 -> 37", 2, 58, 6, 5, 37, 1, 1, 0, 1 },
		{ "3x3 stride 2 pad 1", 1, 19, 9, 10, 33, 3, 2, 1, 1 },
		{ "RGB stem 3x3 stride 2", 1, 3, 17, 16, 32, 3, 2, 1, 1 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		for (int v = 0; v < 4; v++) {
			struct pc p;
			char what[200];
			bool bias = v != 1, z = v >= 2;
			int act = v == 0 ? 0 : v == 1 ? 1 : v == 2 ? 2 : 5;
			snprintf(what, sizeof what, "ConvNHWC %s%s%s, %s", cases[i].what,
				 bias ? " +B" : "", z ? " +Z" : "", act ? acts[act] : "no activation");
			nhwc_build(&p, &cases[i], bias, z, act);
			setenv("ML_CL_NHWC", "1", 1);
			pc_check(&p, what);
			unsetenv("ML_CL_NHWC");
		}
	struct pc p;
	nhwc_build(&p, &cases[3], true, false, 1);
	ml_node_set_int(p.g, p.node, "packed_n", 33);
	setenv("ML_CL_NHWC", "1", 1);
	/* packed W ([ceil(M / 32), K, 32]) is what the attribute promises: make it so */
	int ti = ml_graph_find(p.g, "w");
	float *pw = calloc(2 * 9 * 19 * 32, sizeof(float));
	ml_graph_set_data(p.g, ti, ML_TK_CONST, ML_F32, 3, D(2, 9 * 19, 32), pw,
			  sizeof(float) * 2 * 9 * 19 * 32, &p.e);
	free(pw);
	cpu_check(&p, "ConvNHWC with packed_n stays on the CPU");
	unsetenv("ML_CL_NHWC");
	if (have_cl && strcmp(cl_type, "cpu") == 0) {
		nhwc_build(&p, &cases[2], true, false, 0);
		cpu_check(&p, "ConvNHWC on a CPU device stays on the CPU without ML_CL_NHWC=1");
	}
}

/* fmm_act: activation act (an index of acts) on the fused node p->node */
static void
fmm_act(struct pc *p, int act)
{
	ml_node_set_string(p->g, p->node, "activation", acts[act]);
	if (strcmp(acts[act], "Clip") == 0) {
		ml_node_set_float(p->g, p->node, "clip_min", -0.5);
		ml_node_set_float(p->g, p->node, "clip_max", 0.75);
	}
}

/*
 * FusedGemm (Gemm, then the activation) and FusedMatMul (MatMul + bias[N]
 * + Z, then the activation) on cl:0, every activation, in the GEMM's
 * epilogue; f32 only, as the ops are. A FusedMatMul whose B mlopt packed
 * for the CPU (packed_n) must stay there.
 */
static void
fmm_cases(void)
{
	char what[200];
	struct pc p;
	for (int act = 0; act < 7; act++) {
		const char *an = act ? acts[act] : "no activation";
		pc_init(&p, 14);
		p.tol = 1e-4;
		X(&p, "a", 7, 33);
		W(&p, "b", 20, 33);
		W(&p, "c", 20);
		pc_node_d(&p, "ml", "FusedGemm", "a,b,c", "y");
		ml_node_set_int(p.g, p.node, "transB", 1);
		fmm_act(&p, act);
		snprintf(what, sizeof what, "FusedGemm transB, a row bias, %s", an);
		pc_check(&p, what);
		pc_init(&p, 14);
		p.tol = 1e-4;
		X(&p, "a", 2, 5, 24);
		W(&p, "b", 24, 18);
		W(&p, "bias", 18);
		X(&p, "z", 2, 5, 18);
		pc_node_d(&p, "ml", "FusedMatMul", "a,b,bias,z", "y");
		fmm_act(&p, act);
		snprintf(what, sizeof what, "FusedMatMul batched, +bias +Z, %s", an);
		pc_check(&p, what);
	}
	pc_init(&p, 14);
	p.tol = 1e-4;
	X(&p, "a", 33, 7);
	W(&p, "b", 33, 20);
	W(&p, "c", 7, 20);
	pc_node_d(&p, "ml", "FusedGemm", "a,b,c", "y");
	ml_node_set_int(p.g, p.node, "transA", 1);
	ml_node_set_float(p.g, p.node, "alpha", 0.5);
	ml_node_set_float(p.g, p.node, "beta", 2);
	fmm_act(&p, 2);
	pc_check(&p, "FusedGemm transA, alpha, beta, a full C, Clip after all of it");
	pc_init(&p, 14);
	p.tol = 1e-4;
	X(&p, "a", 9, 16);
	W(&p, "b", 16, 12);
	W(&p, "bias", 12);
	pc_node_d(&p, "ml", "FusedMatMul", "a,b,bias", "y");
	fmm_act(&p, 6);
	pc_check(&p, "FusedMatMul +bias, Gelu");
	pc_init(&p, 14);
	p.tol = 1e-4;
	X(&p, "a", 9, 16);
	W(&p, "b", 16, 12);
	X(&p, "z", 9, 12);
	pc_node_d(&p, "ml", "FusedMatMul", "a,b,,z", "y");
	fmm_act(&p, 1);
	pc_check(&p, "FusedMatMul +Z, Relu");

	/* packed_n: the CPU's panels, which the device does not read */
	pc_init(&p, 14);
	X(&p, "a", 4, 8);
	W(&p, "b", 1, 8, 32);	/* [ceil(N / 32), K, 32] for N = 8 */
	pc_node_d(&p, "ml", "FusedMatMul", "a,b", "y");
	ml_node_set_int(p.g, p.node, "packed_n", 8);
	cpu_check(&p, "FusedMatMul with packed_n stays on the CPU");
}

static void
fconv_cases(void)
{
	static const struct fcv fs[] = {
		{ "3x3 stride 2 pad 1 (im2col)", 1, 8, 16, 16, 16, 3, 2, 1, 1 },
		{ "3x3 pad 1 grouped, 2 images (im2col)", 2, 8, 9, 9, 12, 3, 1, 1, 2 },
		{ "1x1 (direct GEMM)", 1, 16, 7, 7, 24, 1, 1, 0, 1 },
		{ "1x1 grouped, 2 images (direct GEMM)", 2, 8, 6, 6, 12, 1, 1, 0, 2 },
		{ "depthwise 3x3 pad 1", 1, 8, 10, 10, 8, 3, 1, 1, 8 },
		{ "depthwise x2 3x3 stride 2, 2 images", 2, 8, 11, 11, 16, 3, 2, 1, 8 },
	};
	for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
		for (int act = 0; act < 7; act++)
			fconv_case(&fs[i], true, true, act);
		fconv_case(&fs[i], true, false, 2);
		fconv_case(&fs[i], false, true, 1);
		fconv_case(&fs[i], false, false, 1 + (int)(i % 6));
	}
}

static void
nn_cases(void)
{
	conv_case("Conv 3x3 pad 1 with bias", 1, 3, 12, 12, 8, 3, 1, 1, 1, true);
	conv_case("Conv 3x3 stride 2", 2, 4, 11, 9, 6, 3, 2, 1, 1, false);
	conv_case("Conv 1x1", 1, 16, 7, 7, 24, 1, 1, 0, 1, true);
	conv_case("Conv depthwise 3x3", 1, 8, 10, 10, 8, 3, 1, 1, 8, true);
	conv_case("Conv grouped", 1, 8, 6, 6, 4, 3, 1, 0, 2, false);
	conv_case("Conv 7x7 stride 2 pad 3", 1, 3, 32, 32, 16, 7, 2, 3, 1, true);

	struct pc p;
	pc_init(&p, 14);
	p.tol = 1e-4;
	X(&p, "a", 7, 33);
	W(&p, "b", 20, 33);
	W(&p, "c", 20);
	pc_node(&p, "Gemm", "a,b,c", "y");
	ml_node_set_int(p.g, p.node, "transB", 1);
	pc_check(&p, "Gemm transB with a row bias");
	pc_init(&p, 14);
	p.tol = 1e-4;
	X(&p, "a", 33, 7);
	W(&p, "b", 33, 20);
	W(&p, "c", 7, 20);
	pc_node(&p, "Gemm", "a,b,c", "y");
	ml_node_set_int(p.g, p.node, "transA", 1);
	ml_node_set_float(p.g, p.node, "alpha", 0.5);
	ml_node_set_float(p.g, p.node, "beta", 2);
	pc_check(&p, "Gemm transA, alpha, beta, a full C");
	pc_init(&p, 14);
	p.tol = 1e-4;
	X(&p, "a", 3, 5, 17);
	X(&p, "b", 3, 17, 9);
	pc_node(&p, "MatMul", "a,b", "y");
	pc_check(&p, "MatMul batched");
	pc_init(&p, 14);
	p.tol = 1e-4;
	X(&p, "a", 2, 4, 6, 16);
	W(&p, "b", 16, 10);
	pc_node(&p, "MatMul", "a,b", "y");
	pc_check(&p, "MatMul batched times a matrix");

	pc_init(&p, 14);
	X(&p, "x", 2, 3, 11, 11);
	pc_node(&p, "MaxPool", "x", "y");
	ml_node_set_ints(p.g, p.node, "kernel_shape", 2, D(3, 3));
	ml_node_set_ints(p.g, p.node, "strides", 2, D(2, 2));
	ml_node_set_ints(p.g, p.node, "pads", 4, D(1, 1, 1, 1));
	pc_check(&p, "MaxPool 3x3 stride 2 pad 1");
	pc_init(&p, 14);
	X(&p, "x", 1, 4, 9, 10);
	pc_node(&p, "AveragePool", "x", "y");
	ml_node_set_ints(p.g, p.node, "kernel_shape", 2, D(3, 2));
	ml_node_set_ints(p.g, p.node, "pads", 4, D(1, 0, 1, 1));
	ml_node_set_int(p.g, p.node, "ceil_mode", 1);
	ml_node_set_ints(p.g, p.node, "strides", 2, D(2, 2));
	pc_check(&p, "AveragePool ceil_mode, pads excluded");
	pc_init(&p, 14);
	X(&p, "x", 1, 4, 9, 10);
	pc_node(&p, "AveragePool", "x", "y");
	ml_node_set_ints(p.g, p.node, "kernel_shape", 2, D(3, 3));
	ml_node_set_ints(p.g, p.node, "pads", 4, D(1, 1, 1, 1));
	ml_node_set_int(p.g, p.node, "count_include_pad", 1);
	pc_check(&p, "AveragePool count_include_pad");
	pc_init(&p, 14);
	X(&p, "x", 2, 5, 6, 7);
	pc_node(&p, "GlobalAveragePool", "x", "y");
	pc_check(&p, "GlobalAveragePool");
	pc_init(&p, 14);
	X(&p, "x", 2, 5, 6, 7);
	pc_node(&p, "GlobalMaxPool", "x", "y");
	pc_check(&p, "GlobalMaxPool");

	pc_init(&p, 14);
	X(&p, "x", 2, 6, 5, 5);
	W(&p, "s", 6);
	W(&p, "b", 6);
	W(&p, "m", 6);
	pc_w(&p, "v", 1, D(6), 0.5, 2);
	pc_node(&p, "BatchNormalization", "x,s,b,m,v", "y");
	pc_check(&p, "BatchNormalization (inference)");
	pc_init(&p, 17);
	p.tol = 1e-4;
	X(&p, "x", 3, 4, 32);
	W(&p, "s", 32);
	W(&p, "b", 32);
	pc_node(&p, "LayerNormalization", "x,s,b", "y");
	pc_check(&p, "LayerNormalization last axis");
	pc_init(&p, 14);
	p.tol = 1e-4;
	X(&p, "x", 2, 3, 5, 6);
	W(&p, "s", 3);
	W(&p, "b", 3);
	pc_node(&p, "InstanceNormalization", "x,s,b", "y");
	pc_check(&p, "InstanceNormalization");
	pc_init(&p, 14);
	X(&p, "x", 3, 4, 10);
	pc_node(&p, "Softmax", "x", "y");
	pc_check(&p, "Softmax last axis");
	pc_init(&p, 14);
	X(&p, "x", 3, 4, 10);
	pc_node(&p, "Softmax", "x", "y");
	ml_node_set_int(p.g, p.node, "axis", 1);
	pc_check(&p, "Softmax axis 1");
	pc_init(&p, 11);
	X(&p, "x", 3, 4, 10);
	pc_node(&p, "Softmax", "x", "y");
	ml_node_set_int(p.g, p.node, "axis", 1);
	pc_check(&p, "Softmax opset 11 (2-D coercion)");
	pc_init(&p, 14);
	X(&p, "x", 3, 4, 10);
	pc_node(&p, "LogSoftmax", "x", "y");
	pc_check(&p, "LogSoftmax");
}

static void
reduce_cases(void)
{
	static const char *ops[] = { "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
				     "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
				     "ReduceLogSumExp" };
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		struct pc p;
		char what[80];
		pc_init(&p, 13);
		p.tol = 1e-4;
		p.lo = 0.5;
		p.hi = 1.5;
		X(&p, "x", 3, 4, 5, 2);
		pc_node(&p, ops[i], "x", "y");
		ml_node_set_ints(p.g, p.node, "axes", 2, D(1, 3));
		snprintf(what, sizeof what, "%s axes 1,3 keepdims", ops[i]);
		pc_check(&p, what);
		pc_init(&p, 13);
		p.tol = 1e-4;
		p.lo = 0.5;
		p.hi = 1.5;
		X(&p, "x", 3, 4, 5);
		pc_node(&p, ops[i], "x", "y");
		ml_node_set_int(p.g, p.node, "keepdims", 0);
		snprintf(what, sizeof what, "%s all axes", ops[i]);
		pc_check(&p, what);
	}
	struct pc p;
	pc_init(&p, 13);
	p.tol = 1e-4;
	X(&p, "x", 3, 4, 5);
	pc_i64(&p, "axes", 1, D(-1));
	pc_node(&p, "ReduceSum", "x,axes", "y");
	pc_check(&p, "ReduceSum axes input -1");
}

/*
 * assign_case: a training-style graph: y = w + x, then ml.Assign(w, y).
 * On the device w stays resident and Assign writes the device copy; after
 * two runs and ml_session_sync the graph's w must be w0 + 2x, as on the
 * CPU, and the second run's output must have read the updated w.
 */
static void
assign_case(void)
{
	ntest++;
	if (!have_cl) {
		printf("ok %d - ml.Assign on the device, ml_session_sync # SKIP no OpenCL device\n",
		       ntest);
		return;
	}
	bool ok = true;
	char msg[700] = "";
	float got[2][8], y2[2][8];
	for (int pass = 0; pass < 2; pass++) {
		struct ml_graph *g = NULL;
		struct ml_err e = { 0 };
		ml_graph_new(&g, &e);
		ml_graph_set_opset(g, "", 14, &e);
		float w0[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
		int64_t dims[1] = { 8 };
		ml_graph_set_data(g, ml_graph_tensor(g, "w"), ML_TK_PARAM, ML_F32, 1, dims, w0,
				  sizeof w0, &e);
		int xi = ml_graph_tensor(g, "x");
		g->tensors[xi]->dtype = ML_F32;
		g->tensors[xi]->rank = 1;
		g->tensors[xi]->dims[0] = 8;
		g->tensors[xi]->kind = ML_TK_INPUT;
		ml_graph_add_input(g, xi, &e);
		const char *in1[] = { "w", "x" }, *out1[] = { "y" }, *in2[] = { "w", "y" };
		ml_graph_add_node(g, "Add", "", "add", 2, in1, 1, out1, &e);
		ml_graph_add_node(g, "Assign", "ml", "assign", 2, in2, 0, NULL, &e);
		ml_graph_add_output(g, ml_graph_find(g, "y"), &e);
		struct ml_session *s = NULL;
		struct ml_session_opts o = { .device = pass ? "cl" : "cpu" };
		struct ml_tval x = { 0 };
		int rc = ml_graph_toposort(g, &e);
		if (rc == 0)
			rc = ml_graph_infer(g, &e);
		if (rc == 0)
			rc = ml_session_new(&s, g, &o, &e);
		ml_tval_alloc(&x, ML_F32, 1, dims, &e);
		for (int i = 0; i < 8; i++)
			((float *)x.data)[i] = 0.5f * (float)i;
		for (int r = 0; rc == 0 && r < 2; r++) {
			rc = ml_session_set_input(s, "x", &x, &e);
			if (rc == 0)
				rc = ml_session_run(s, &e);
		}
		if (rc == 0) {
			memcpy(y2[pass], ml_session_output(s, 0)->data, sizeof y2[pass]);
			rc = ml_session_sync(s, &e);
		}
		if (rc == 0 && pass && ml_session_node_device(s, 1) != 1) {
			snprintf(msg, sizeof msg, "Assign ran on device %d", ml_session_node_device(s, 1));
			ok = false;
		}
		if (rc < 0) {
			snprintf(msg, sizeof msg, "%s: %s", pass ? "cl" : "cpu", e.msg);
			ok = false;
		} else {
			memcpy(got[pass], g->tensors[ml_graph_find(g, "w")]->data, sizeof got[pass]);
		}
		ml_tval_clear(&x);
		ml_session_free(s);
		ml_graph_free(g);
	}
	for (int i = 0; ok && i < 8; i++)
		if (got[0][i] != got[1][i] || y2[0][i] != y2[1][i] ||
		    got[0][i] != (float)(i + 1) + (float)i) {
			snprintf(msg, sizeof msg, "w[%d]: cpu %g, cl %g", i, got[0][i], got[1][i]);
			ok = false;
		}
	if (!ok)
		nfail++;
	printf("%sok %d - ml.Assign on the device, ml_session_sync%s%s\n", ok ? "" : "not ", ntest,
	       msg[0] ? ": " : "", msg);
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
		if (have_cl)
			snprintf(cl_type, sizeof cl_type, "%s", v[1].type);
		if (have_cl)
			printf("# cl:0 %s, cl_khr_fp16 %s (f16 runs there either way)\n", v[1].name,
			       v[1].fp16 ? "yes" : "no");
		ml_free(v);
	}
	unary_cases();
	binary_cases();
	shape_cases();
	nn_cases();
	fconv_cases();
	fconv_refusals();
	nhwc_cases();
	fmm_cases();
	reduce_cases();
	assign_case();
	/* the same cases on f16 tensors */
	fdt = ML_F16;
	unary_cases();
	binary_cases();
	shape_cases();
	nn_cases();
	fconv_cases();
	reduce_cases();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
