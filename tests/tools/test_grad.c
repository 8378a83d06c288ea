/*
 * test_grad.c: every gradient rule against central finite differences.
 * Each case builds a small graph whose inputs are PARAM tensors of random
 * values, reduces the op's output to a scalar y = sum(out * R) with a
 * random R, appends ml_grad's nodes and compares each gradient element
 * with (y(x + h) - y(x - h)) / 2h. Cases run in f64 where the kernels
 * support it and fall back to f32 with a looser tolerance. Prints TAP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"
#include "ml_train.h"
#include "cpu/nn.h"
#include "train/train.h"

static int ntest, nfail;

static void
ok(bool cond, const char *fmt, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - ", cond ? "" : "not ", ntest);
	printf(fmt, what);
	putchar('\n');
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double
urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

/* A case under construction. */
struct tc {
	struct ml_graph *g;
	struct ml_err e;
	enum ml_dtype dt;
	int diff[8], ndiff;
	int seq;
	bool bad;
};

static void
tc_init(struct tc *t, enum ml_dtype dt)
{
	memset(t, 0, sizeof *t);
	t->dt = dt;
	ml_graph_new(&t->g, &t->e);
	ml_graph_set_opset(t->g, "", 17, &t->e);
	ml_graph_set_opset(t->g, "ml", 1, &t->e);
}

/* param: a PARAM input of random values in [lo, hi) that the check differentiates. */
static const char *
param(struct tc *t, const char *name, int rank, const int64_t *dims, double lo, double hi,
      bool diff)
{
	int64_t n = 1;
	for (int d = 0; d < rank; d++)
		n *= dims[d];
	double *v = malloc(sizeof(double) * (size_t)(n + 1));
	uint8_t *buf = malloc(8 * (size_t)(n + 1));
	for (int64_t i = 0; i < n; i++) {
		v[i] = lo + (hi - lo) * urand();
		ml_set_f64(buf, t->dt, i, v[i]);
	}
	int ti = ml_graph_tensor(t->g, name);
	if (ml_graph_set_data(t->g, ti, ML_TK_PARAM, t->dt, rank, dims, buf,
			      (size_t)n * ml_dtype_size(t->dt), &t->e) < 0)
		t->bad = true;
	if (diff)
		t->diff[t->ndiff++] = ti;
	free(v);
	free(buf);
	return t->g->tensors[ti]->name;
}

static const char *
ints(struct tc *t, const char *name, int n, const int64_t *v)
{
	int64_t d = n;
	int ti = ml_graph_tensor(t->g, name);
	ml_graph_set_data(t->g, ti, ML_TK_CONST, ML_I64, 1, &d, v, sizeof(int64_t) * (size_t)n,
			  &t->e);
	return t->g->tensors[ti]->name;
}

static const char *
scalar_const(struct tc *t, const char *name, double v)
{
	uint8_t buf[8];
	ml_set_f64(buf, t->dt, 0, v);
	int ti = ml_graph_tensor(t->g, name);
	ml_graph_set_data(t->g, ti, ML_TK_CONST, t->dt, 0, NULL, buf, ml_dtype_size(t->dt), &t->e);
	return t->g->tensors[ti]->name;
}

/* node: op over inputs, outputs named o0, o1, ... of this node; returns the node index. */
static int
node(struct tc *t, const char *op, const char *dom, int n_in, const char *const *in, int n_out,
     const char **out)
{
	static char names[8][32];
	const char *on[8];
	char nn[32];
	for (int j = 0; j < n_out; j++) {
		snprintf(names[j], sizeof names[j], "n%d_o%d", t->seq, j);
		on[j] = names[j];
	}
	snprintf(nn, sizeof nn, "node%d", t->seq++);
	int ni = ml_graph_add_node(t->g, op, dom, nn, n_in, in, n_out, on, &t->e);
	if (ni < 0)
		t->bad = true;
	for (int j = 0; j < n_out && out != NULL; j++)
		out[j] = t->g->tensors[t->g->nodes[ni].out[j]]->name;
	return ni;
}

/* run_y: run s and return output 0 as a double. */
static double
run_y(struct ml_session *s, struct ml_err *e)
{
	if (ml_session_run(s, e) < 0)
		return NAN;
	const struct ml_tval *v = ml_session_output(s, 0);
	return ml_get_f64(v->data, v->dtype, 0);
}

/*
 * check: y = ReduceSum(out * R); compare ml_grad's gradients of y with
 * finite differences. Returns 0 when they agree, 1 when they do not, -1
 * when the case could not run in this dtype (the caller retries in f32).
 */
static int
check(struct tc *t, const char *out, const char *label)
{
	struct ml_graph *g = t->g;
	struct ml_session *s = NULL;
	int rc = 1, oi = ml_graph_find(g, out);
	if (t->bad || oi < 0 || ml_graph_toposort(g, &t->e) < 0 || ml_graph_infer(g, &t->e) < 0) {
		printf("# %s: build: %s\n", label, t->e.msg);
		return t->e.code == ML_ENOTSUP ? -1 : 1;
	}
	const struct ml_tensor *ot = g->tensors[oi];
	int64_t dims[ML_MAX_RANK];
	memcpy(dims, ot->dims, sizeof dims);
	for (int d = 0; d < ot->rank; d++)
		if (dims[d] < 0)
			return 1;
	const char *r = param(t, "R", ot->rank, dims, -1, 1, false);
	const char *m[2] = { out, r }, *p, *y;
	node(t, "Mul", "", 2, m, 1, &p);
	int ni = node(t, "ReduceSum", "", 1, &p, 1, &y);
	ml_node_set_int(g, ni, "keepdims", 0);
	int yi = ml_graph_find(g, y);
	ml_graph_add_output(g, yi, &t->e);
	if (ml_graph_toposort(g, &t->e) < 0 || ml_graph_infer(g, &t->e) < 0) {
		printf("# %s: %s\n", label, t->e.msg);
		return 1;
	}
	int gx[8];
	if (ml_grad(g, yi, t->diff, t->ndiff, gx, &t->e) < 0) {
		printf("# %s: ml_grad: %s\n", label, t->e.msg);
		return 1;
	}
	for (int i = 0; i < t->ndiff; i++) {
		if (gx[i] < 0) {
			printf("# %s: no gradient for input %d\n", label, i);
			return 1;
		}
		ml_graph_add_output(g, gx[i], &t->e);
	}
	if (ml_graph_toposort(g, &t->e) < 0 || ml_graph_validate(g, &t->e) < 0 ||
	    ml_graph_infer(g, &t->e) < 0 || ml_session_new(&s, g, NULL, &t->e) < 0) {
		printf("# %s: %s\n", label, t->e.msg);
		return t->e.code == ML_ENOTSUP ? -1 : 1;
	}
	double y0 = run_y(s, &t->e);
	if (isnan(y0)) {
		printf("# %s: run: %s\n", label, t->e.msg);
		rc = t->e.code == ML_ENOTSUP ? -1 : 1;
		goto out;
	}
	bool f64 = t->dt == ML_F64;
	double h = f64 ? 1e-6 : 1e-2, rtol = f64 ? 1e-5 : 5e-3, worst = 0;
	rc = 0;
	for (int i = 0; i < t->ndiff && rc == 0; i++) {
		/* the finite differences of earlier inputs ran the session: run it at x again */
		run_y(s, &t->e);
		const struct ml_tval *gv = ml_session_output(s, 1 + i);
		struct ml_tensor *x = g->tensors[t->diff[i]];
		int64_t n = (int64_t)(x->nbytes / ml_dtype_size(x->dtype));
		if (ml_tval_numel(gv) != n) {
			printf("# %s: gradient %d has %lld elements, not %lld\n", label, i,
			       (long long)ml_tval_numel(gv), (long long)n);
			rc = 1;
			break;
		}
		double *an = malloc(sizeof(double) * (size_t)n), scale = 1e-3;
		for (int64_t k = 0; k < n; k++) {
			an[k] = ml_get_f64(gv->data, gv->dtype, k);
			scale = fmax(scale, fabs(an[k]));
		}
		for (int64_t k = 0; k < n; k++) {
			double v = ml_get_f64(x->data, x->dtype, k);
			ml_set_f64(x->data, x->dtype, k, v + h);
			double yp = run_y(s, &t->e);
			ml_set_f64(x->data, x->dtype, k, v - h);
			double ym = run_y(s, &t->e);
			ml_set_f64(x->data, x->dtype, k, v);
			double num = (yp - ym) / (2 * h);
			double err = fabs(num - an[k]) / scale;
			worst = fmax(worst, err);
			if (!(err <= rtol)) {
				printf("# %s: input %d element %lld: analytic %.8g numeric %.8g\n",
				       label, i, (long long)k, an[k], num);
				rc = 1;
				break;
			}
		}
		free(an);
	}
	if (rc == 0)
		printf("# %s (%s): worst relative error %.2g\n", label, ml_dtype_name(t->dt), worst);
out:
	ml_session_free(s);
	return rc;
}

/* A case: a builder that fills tc and names the output to check. */
typedef const char *(*build_fn)(struct tc *t);

static void
run_case_dt(const char *label, build_fn fn, bool f32_only)
{
	uint64_t seed = rng;
	int rc = -1;
	for (int pass = f32_only ? 1 : 0; pass < 2 && rc < 0; pass++) {
		struct tc t;
		rng = seed;
		tc_init(&t, pass == 0 ? ML_F64 : ML_F32);
		const char *out = fn(&t);
		rc = out != NULL ? check(&t, out, label) : 1;
		ml_graph_free(t.g);
	}
	ok(rc == 0, f32_only ? "gradient of %s matches finite differences in f32"
			     : "gradient of %s matches finite differences", label);
}

static void
run_case(const char *label, build_fn fn)
{
	run_case_dt(label, fn, false);
}

#define D(...) ((const int64_t[]){ __VA_ARGS__ })

/* binary op of two inputs with the given shapes */
static const char *
binary(struct tc *t, const char *op, int ra, const int64_t *da, int rb, const int64_t *db,
       double lo, double hi)
{
	const char *in[2] = { param(t, "a", ra, da, lo, hi, true), param(t, "b", rb, db, lo, hi, true) };
	const char *o;
	node(t, op, "", 2, in, 1, &o);
	return o;
}

static const char *c_add(struct tc *t) { return binary(t, "Add", 2, D(3, 4), 1, D(4), -1, 1); }
static const char *c_add_b(struct tc *t) { return binary(t, "Add", 3, D(2, 1, 4), 2, D(3, 1), -1, 1); }
static const char *c_sub(struct tc *t) { return binary(t, "Sub", 2, D(3, 1), 2, D(3, 4), -1, 1); }
static const char *c_mul(struct tc *t) { return binary(t, "Mul", 3, D(2, 3, 4), 2, D(1, 4), -1, 1); }
static const char *c_div(struct tc *t) { return binary(t, "Div", 2, D(3, 4), 1, D(4), 0.5, 2); }
static const char *c_pow(struct tc *t) { return binary(t, "Pow", 2, D(3, 4), 0, NULL, 0.5, 2); }

static const char *
unary(struct tc *t, const char *op, const char *dom, double lo, double hi)
{
	const char *x = param(t, "x", 2, D(3, 5), lo, hi, true), *o;
	node(t, op, dom, 1, &x, 1, &o);
	return o;
}

static const char *c_neg(struct tc *t) { return unary(t, "Neg", "", -1, 1); }
static const char *c_relu(struct tc *t) { return unary(t, "Relu", "", -1, 1); }
static const char *c_sigmoid(struct tc *t) { return unary(t, "Sigmoid", "", -2, 2); }
static const char *c_tanh(struct tc *t) { return unary(t, "Tanh", "", -2, 2); }
static const char *c_exp(struct tc *t) { return unary(t, "Exp", "", -1, 1); }
static const char *c_log(struct tc *t) { return unary(t, "Log", "", 0.5, 2); }
static const char *c_sqrt(struct tc *t) { return unary(t, "Sqrt", "", 0.5, 2); }
static const char *c_erf(struct tc *t) { return unary(t, "Erf", "", -1.5, 1.5); }
static const char *c_gelu(struct tc *t) { return unary(t, "Gelu", "ml", -2, 2); }
static const char *c_silu(struct tc *t) { return unary(t, "Silu", "ml", -2, 2); }
static const char *c_softplus(struct tc *t) { return unary(t, "Softplus", "", -2, 2); }
static const char *c_reciprocal(struct tc *t) { return unary(t, "Reciprocal", "", 0.5, 2); }
static const char *c_identity(struct tc *t) { return unary(t, "Identity", "", -1, 1); }

static const char *
c_leaky(struct tc *t)
{
	const char *o = unary(t, "LeakyRelu", "", -1, 1);
	ml_node_set_float(t->g, t->g->n_nodes - 1, "alpha", 0.2);
	return o;
}

static const char *
c_clip(struct tc *t)
{
	const char *in[3] = { param(t, "x", 2, D(3, 5), -1, 1, true), scalar_const(t, "lo", -0.5),
			      scalar_const(t, "hi", 0.6) }, *o;
	node(t, "Clip", "", 3, in, 1, &o);
	return o;
}

static const char *
c_cast(struct tc *t)
{
	const char *x = param(t, "x", 2, D(3, 5), -1, 1, true), *o;
	int ni = node(t, "Cast", "", 1, &x, 1, &o);
	ml_node_set_int(t->g, ni, "to", t->dt);
	return o;
}

static const char *
c_softmax(struct tc *t)
{
	const char *o = unary(t, "Softmax", "", -2, 2);
	ml_node_set_int(t->g, t->g->n_nodes - 1, "axis", 1);
	return o;
}

static const char *
c_log_softmax(struct tc *t)
{
	const char *x = param(t, "x", 3, D(2, 4, 3), -2, 2, true), *o;
	int ni = node(t, "LogSoftmax", "", 1, &x, 1, &o);
	ml_node_set_int(t->g, ni, "axis", 1);
	return o;
}

static const char *
c_gemm(struct tc *t)
{
	const char *in[3] = { param(t, "a", 2, D(4, 3), -1, 1, true),
			      param(t, "b", 2, D(5, 3), -1, 1, true),
			      param(t, "c", 1, D(5), -1, 1, true) }, *o;
	int ni = node(t, "Gemm", "", 3, in, 1, &o);
	ml_node_set_int(t->g, ni, "transB", 1);
	ml_node_set_float(t->g, ni, "alpha", 0.7);
	ml_node_set_float(t->g, ni, "beta", 1.3);
	return o;
}

static const char *
c_gemm_ta(struct tc *t)
{
	const char *in[3] = { param(t, "a", 2, D(3, 4), -1, 1, true),
			      param(t, "b", 2, D(3, 5), -1, 1, true),
			      param(t, "c", 2, D(4, 1), -1, 1, true) }, *o;
	int ni = node(t, "Gemm", "", 3, in, 1, &o);
	ml_node_set_int(t->g, ni, "transA", 1);
	return o;
}

static const char *c_matmul(struct tc *t) { return binary(t, "MatMul", 2, D(4, 3), 2, D(3, 5), -1, 1); }
static const char *c_matmul3(struct tc *t) { return binary(t, "MatMul", 3, D(2, 4, 3), 2, D(3, 5), -1, 1); }
static const char *c_matmulb(struct tc *t) { return binary(t, "MatMul", 3, D(2, 4, 3), 4, D(3, 1, 3, 2), -1, 1); }

static const char *
conv(struct tc *t, int64_t group, int64_t stride, int64_t pad, int64_t dil)
{
	int64_t cin = 4, cout = 4;
	const char *in[3] = { param(t, "x", 4, D(2, cin, 6, 5), -1, 1, true),
			      param(t, "w", 4, D(cout, cin / group, 3, 2), -1, 1, true),
			      param(t, "b", 1, D(cout), -1, 1, true) }, *o;
	int ni = node(t, "Conv", "", 3, in, 1, &o);
	ml_node_set_int(t->g, ni, "group", group);
	ml_node_set_ints(t->g, ni, "strides", 2, D(stride, 1));
	ml_node_set_ints(t->g, ni, "pads", 4, D(pad, 0, pad, 1));
	ml_node_set_ints(t->g, ni, "dilations", 2, D(dil, 1));
	return o;
}

static const char *c_conv(struct tc *t) { return conv(t, 1, 1, 0, 1); }
static const char *c_conv_g(struct tc *t) { return conv(t, 2, 2, 1, 1); }
static const char *c_conv_d(struct tc *t) { return conv(t, 1, 1, 1, 2); }

static const char *
c_conv1x1(struct tc *t)
{
	const char *in[2] = { param(t, "x", 4, D(2, 3, 4, 4), -1, 1, true),
			      param(t, "w", 4, D(5, 3, 1, 1), -1, 1, true) }, *o;
	node(t, "Conv", "", 2, in, 1, &o);
	return o;
}

static const char *
pool(struct tc *t, const char *op, int64_t k, int64_t s, int64_t p, bool incl)
{
	const char *x = param(t, "x", 4, D(2, 3, 6, 5), -1, 1, true), *o;
	int ni = node(t, op, "", 1, &x, 1, &o);
	ml_node_set_ints(t->g, ni, "kernel_shape", 2, D(k, k));
	ml_node_set_ints(t->g, ni, "strides", 2, D(s, s));
	ml_node_set_ints(t->g, ni, "pads", 4, D(p, p, p, p));
	if (incl)
		ml_node_set_int(t->g, ni, "count_include_pad", 1);
	return o;
}

static const char *c_maxpool(struct tc *t) { return pool(t, "MaxPool", 2, 2, 0, false); }
static const char *c_maxpool_o(struct tc *t) { return pool(t, "MaxPool", 3, 2, 1, false); }
static const char *c_avgpool(struct tc *t) { return pool(t, "AveragePool", 3, 2, 1, false); }
static const char *c_avgpool_i(struct tc *t) { return pool(t, "AveragePool", 3, 1, 1, true); }
static const char *c_gap(struct tc *t) { return unary(t, "GlobalAveragePool", "", -1, 1); }

static const char *
c_gap4(struct tc *t)
{
	const char *x = param(t, "x", 4, D(2, 3, 4, 3), -1, 1, true), *o;
	node(t, "GlobalAveragePool", "", 1, &x, 1, &o);
	return o;
}

static const char *
c_bn_train(struct tc *t)
{
	const char *in[3] = { param(t, "x", 4, D(3, 2, 3, 2), -1, 1, true),
			      param(t, "s", 1, D(2), 0.5, 1.5, true),
			      param(t, "b", 1, D(2), -1, 1, true) }, *o[3];
	node(t, "BatchNormTraining", "ml", 3, in, 3, o);
	return o[0];
}

static const char *
c_layernorm(struct tc *t)
{
	const char *in[3] = { param(t, "x", 3, D(2, 3, 4), -1, 1, true),
			      param(t, "s", 2, D(3, 4), 0.5, 1.5, true),
			      param(t, "b", 2, D(3, 4), -1, 1, true) }, *o;
	int ni = node(t, "LayerNormalization", "", 3, in, 1, &o);
	ml_node_set_int(t->g, ni, "axis", 1);
	return o;
}

static const char *
reshape_like(struct tc *t, const char *op, int rank, const int64_t *dims, const char *shape_in)
{
	const char *in[2] = { param(t, "x", rank, dims, -1, 1, true), shape_in }, *o;
	node(t, op, "", shape_in != NULL ? 2 : 1, in, 1, &o);
	return o;
}

static const char *c_flatten(struct tc *t) { return reshape_like(t, "Flatten", 4, D(2, 3, 2, 2), NULL); }
static const char *c_reshape(struct tc *t) { return reshape_like(t, "Reshape", 3, D(2, 3, 4), ints(t, "s", 2, D(4, -1))); }
static const char *c_squeeze(struct tc *t) { return reshape_like(t, "Squeeze", 3, D(2, 1, 4), ints(t, "s", 1, D(1))); }
static const char *c_unsqueeze(struct tc *t) { return reshape_like(t, "Unsqueeze", 2, D(2, 4), ints(t, "s", 2, D(0, 2))); }

static const char *
c_transpose(struct tc *t)
{
	const char *x = param(t, "x", 3, D(2, 3, 4), -1, 1, true), *o;
	int ni = node(t, "Transpose", "", 1, &x, 1, &o);
	ml_node_set_ints(t->g, ni, "perm", 3, D(1, 2, 0));
	return o;
}

static const char *
c_concat(struct tc *t)
{
	const char *in[3] = { param(t, "a", 2, D(2, 3), -1, 1, true),
			      param(t, "b", 2, D(2, 1), -1, 1, true),
			      param(t, "c", 2, D(2, 2), -1, 1, true) }, *o;
	int ni = node(t, "Concat", "", 3, in, 1, &o);
	ml_node_set_int(t->g, ni, "axis", -1);
	return o;
}

static const char *
c_slice(struct tc *t)
{
	const char *in[4] = { param(t, "x", 3, D(3, 5, 4), -1, 1, true), ints(t, "st", 2, D(1, -3)),
			      ints(t, "en", 2, D(3, 100)), ints(t, "ax", 2, D(1, 2)) }, *o;
	node(t, "Slice", "", 4, in, 1, &o);
	return o;
}

static const char *
c_gather(struct tc *t)
{
	const char *in[2] = { param(t, "x", 2, D(5, 3), -1, 1, true), ints(t, "i", 4, D(0, 3, 3, 1)) },
		   *o;
	node(t, "Gather", "", 2, in, 1, &o);
	return o;
}

static const char *
c_expand(struct tc *t)
{
	const char *in[2] = { param(t, "x", 2, D(3, 1), -1, 1, true), ints(t, "s", 3, D(2, 3, 4)) },
		   *o;
	node(t, "Expand", "", 2, in, 1, &o);
	return o;
}

static const char *
reduce(struct tc *t, const char *op, bool keep)
{
	const char *in[2] = { param(t, "x", 3, D(2, 3, 4), -1, 1, true), ints(t, "ax", 2, D(0, -1)) },
		   *o;
	int ni = node(t, op, "", 2, in, 1, &o);
	ml_node_set_int(t->g, ni, "keepdims", keep);
	return o;
}

static const char *c_rsum(struct tc *t) { return reduce(t, "ReduceSum", true); }
static const char *c_rsum0(struct tc *t) { return reduce(t, "ReduceSum", false); }

static const char *
c_rmean(struct tc *t)
{
	const char *x = param(t, "x", 3, D(2, 3, 4), -1, 1, true), *o;
	int ni = node(t, "ReduceMean", "", 1, &x, 1, &o);
	ml_node_set_ints(t->g, ni, "axes", 1, D(1));
	ml_node_set_int(t->g, ni, "keepdims", 0);
	return o;
}

static const char *
c_dropout(struct tc *t)
{
	const char *x = param(t, "x", 2, D(3, 4), -1, 1, true), *o;
	node(t, "Dropout", "", 1, &x, 1, &o);
	return o;
}

static const char *
c_dropout_train(struct tc *t)
{
	int64_t two = 2, v[2] = { 7, 3 };
	int ri = ml_graph_tensor(t->g, "rng");
	ml_graph_set_data(t->g, ri, ML_TK_PARAM, ML_I64, 1, &two, v, sizeof v, &t->e);
	const char *in[2] = { param(t, "x", 2, D(4, 5), -1, 1, true), "rng" }, *o[2];
	int ni = node(t, "DropoutTraining", "ml", 2, in, 2, o);
	ml_node_set_float(t->g, ni, "ratio", 0.3);
	return o[0];
}

static const char *
loss(struct tc *t, const char *op, const char *dom, bool cls, const char *red)
{
	int64_t lab[6] = { 2, 0, 3, 1, 3, 2 };
	const char *in[2];
	in[0] = param(t, "x", 2, D(6, 4), -2, 2, true);
	if (cls) {
		in[1] = ints(t, "t", 6, lab);
	} else {
		in[1] = param(t, "t", 2, D(6, 4), 0, 1, false);
	}
	const char *o;
	int ni = node(t, op, dom, 2, in, 1, &o);
	if (red != NULL)
		ml_node_set_string(t->g, ni, "reduction", red);
	return o;
}

static const char *c_sce(struct tc *t) { return loss(t, "SoftmaxCrossEntropyLoss", "", true, NULL); }
static const char *c_sce_sum(struct tc *t) { return loss(t, "SoftmaxCrossEntropyLoss", "", true, "sum"); }
static const char *c_nll(struct tc *t) { return loss(t, "NegativeLogLikelihoodLoss", "", true, NULL); }
static const char *c_bce(struct tc *t) { return loss(t, "BCEWithLogitsLoss", "ml", false, NULL); }

static const char *
c_sce3(struct tc *t)
{
	int64_t lab[6] = { 2, 0, 1, 1, 0, 2 };
	const char *in[2] = { param(t, "x", 3, D(2, 3, 3), -2, 2, true), NULL }, *o;
	int64_t d2[2] = { 2, 3 };
	int ti = ml_graph_tensor(t->g, "t");
	ml_graph_set_data(t->g, ti, ML_TK_CONST, ML_I64, 2, d2, lab, sizeof lab, &t->e);
	in[1] = "t";
	int ni = node(t, "SoftmaxCrossEntropyLoss", "", 2, in, 1, &o);
	ml_node_set_int(t->g, ni, "ignore_index", 1);
	return o;
}

/* a chain that reuses a tensor: y = x * x + x, with fan-out accumulation */
static const char *
c_fanout(struct tc *t)
{
	const char *x = param(t, "x", 2, D(3, 4), -1, 1, true), *a, *b;
	const char *m[2] = { x, x };
	node(t, "Mul", "", 2, m, 1, &a);
	const char *s[2] = { a, x };
	node(t, "Add", "", 2, s, 1, &b);
	return b;
}

/* the MSE loss the step graph builds: mean((x - t)^2) */
static const char *
c_mse(struct tc *t)
{
	const char *in[2] = { param(t, "x", 2, D(3, 4), -1, 1, true),
			      param(t, "t", 2, D(3, 4), -1, 1, false) }, *d, *sq, *o;
	node(t, "Sub", "", 2, in, 1, &d);
	const char *m[2] = { d, d };
	node(t, "Mul", "", 2, m, 1, &sq);
	int ni = node(t, "ReduceMean", "", 1, &sq, 1, &o);
	ml_node_set_int(t->g, ni, "keepdims", 0);
	return o;
}

/*
 * The small-channel f32 convolution kernels (lib/cpu/train_conv.c) against
 * the f64 reference loops: the same case, built from the same random
 * values in f64 and in f32, runs forward and backward; y, the output and
 * every gradient must agree to f32 rounding.
 */
static const char *
conv_geo(struct tc *t, int64_t n, int64_t cin, int64_t h, int64_t w, int64_t cout, int64_t kh,
	 int64_t kw, int64_t group, const int64_t *pads)
{
	const char *in[3] = { param(t, "x", 4, D(n, cin, h, w), -1, 1, true),
			      param(t, "w", 4, D(cout, cin / group, kh, kw), -1, 1, true),
			      param(t, "b", 1, D(cout), -1, 1, true) }, *o;
	int ni = node(t, "Conv", "", 3, in, 1, &o);
	ml_node_set_int(t->g, ni, "group", group);
	ml_node_set_ints(t->g, ni, "pads", 4, pads);
	return o;
}

static const char *p_lenet1(struct tc *t) { return conv_geo(t, 3, 1, 12, 12, 6, 5, 5, 1, D(2, 2, 2, 2)); }
static const char *p_lenet2(struct tc *t) { return conv_geo(t, 3, 6, 9, 9, 16, 5, 5, 1, D(0, 0, 0, 0)); }
static const char *p_group(struct tc *t) { return conv_geo(t, 2, 4, 7, 6, 6, 3, 2, 2, D(1, 0, 0, 1)); }
static const char *p_odd(struct tc *t) { return conv_geo(t, 2, 3, 8, 11, 13, 3, 3, 1, D(1, 1, 1, 1)); }
/* one channel, a 3x7 window over rows of 40 (two tiles of columns, two runs of 32) */
static const char *p_wide1(struct tc *t) { return conv_geo(t, 3, 1, 7, 40, 16, 3, 7, 1, D(1, 3, 0, 2)); }
/* 20 input channels: the input gradient's 20 rows in tiles of 16 */
static const char *p_cg20(struct tc *t) { return conv_geo(t, 2, 20, 5, 6, 5, 3, 3, 1, D(1, 1, 1, 1)); }

/* the convolutions of the parity checks (f32, bf16 on AMX, bf16's fallback) */
struct pcase {
	const char *name;
	build_fn fn;
};
#define NCONV 6
static const struct pcase conv_cases[NCONV] = {
	{ "Conv 5x5 pad 2, 1 -> 6 channels (LeNet conv1)", p_lenet1 },
	{ "Conv 5x5, 6 -> 16 channels (LeNet conv2)", p_lenet2 },
	{ "Conv with groups, a 3x2 window, uneven pads", p_group },
	{ "Conv 3x3 pad 1, 13 output channels", p_odd },
	{ "Conv 3x7, 1 channel, rows of 40", p_wide1 },
	{ "Conv 3x3, 20 -> 5 channels", p_cg20 },
};

/* parity_prec: ML_PREC_BF16 marks the products of parity_run's graph precision bf16 */
static int parity_prec = ML_PREC_F32;

/* 2 x 2 max pools that tile the input: the branch-free f32 gradient, 8 windows at once and a tail */
static const char *
p_pool2(struct tc *t)
{
	const char *x = param(t, "x", 4, D(2, 3, 6, 18), -1, 1, true), *o;
	int ni = node(t, "MaxPool", "", 1, &x, 1, &o);
	ml_node_set_ints(t->g, ni, "kernel_shape", 2, D(2, 2));
	ml_node_set_ints(t->g, ni, "strides", 2, D(2, 2));
	return o;
}

/* parity_run: y, the output and the gradients of case fn in dt, as doubles; NULL on failure. */
static double *
parity_run(build_fn fn, enum ml_dtype dt, uint64_t seed, int64_t *len)
{
	struct tc t;
	struct ml_session *s = NULL;
	double *v = NULL;
	rng = seed;
	tc_init(&t, dt);
	const char *out = fn(&t);
	struct ml_graph *g = t.g;
	int oi = ml_graph_find(g, out);
	if (t.bad || oi < 0 || ml_graph_toposort(g, &t.e) < 0 || ml_graph_infer(g, &t.e) < 0)
		goto done;
	int64_t dims[ML_MAX_RANK];
	memcpy(dims, g->tensors[oi]->dims, sizeof dims);
	const char *r = param(&t, "R", g->tensors[oi]->rank, dims, -1, 1, false);
	const char *m[2] = { out, r }, *p, *y;
	node(&t, "Mul", "", 2, m, 1, &p);
	int ni = node(&t, "ReduceSum", "", 1, &p, 1, &y);
	ml_node_set_int(g, ni, "keepdims", 0);
	int yi = ml_graph_find(g, y), gx[8];
	ml_graph_add_output(g, yi, &t.e);
	ml_graph_add_output(g, ml_graph_find(g, out), &t.e);
	if (ml_graph_toposort(g, &t.e) < 0 || ml_graph_infer(g, &t.e) < 0 ||
	    ml_grad(g, yi, t.diff, t.ndiff, gx, &t.e) < 0)
		goto done;
	for (int i = 0; i < t.ndiff; i++)
		ml_graph_add_output(g, gx[i], &t.e);
	if (ml_graph_toposort(g, &t.e) < 0 || ml_graph_infer(g, &t.e) < 0 ||
	    ml_train_mark_precision(g, parity_prec, &t.e) < 0 ||
	    ml_session_new(&s, g, NULL, &t.e) < 0 || ml_session_run(s, &t.e) < 0)
		goto done;
	int64_t total = 0;
	for (int i = 0; i < 2 + t.ndiff; i++)
		total += ml_tval_numel(ml_session_output(s, i));
	v = malloc(sizeof(double) * (size_t)(total + 1));
	int64_t k = 0;
	for (int i = 0; i < 2 + t.ndiff; i++) {
		const struct ml_tval *o = ml_session_output(s, i);
		for (int64_t j = 0; j < ml_tval_numel(o); j++)
			v[k++] = ml_get_f64(o->data, o->dtype, j);
	}
	*len = total;
done:
	if (v == NULL)
		printf("# parity: %s\n", t.e.msg);
	ml_session_free(s);
	ml_graph_free(g);
	return v;
}

/* conv_parity: each case; returns the number that failed. */
static int
conv_parity(bool report)
{
	struct pcase pc[NCONV + 1];
	memcpy(pc, conv_cases, sizeof conv_cases);
	pc[NCONV] = (struct pcase){ "MaxPool 2x2 tiling its input", p_pool2 };
	int bad = 0;
	for (size_t i = 0; i < sizeof pc / sizeof pc[0]; i++) {
		uint64_t seed = rng;
		int64_t n64 = 0, n32 = 0;
		double *a = parity_run(pc[i].fn, ML_F64, seed, &n64);
		double *b = parity_run(pc[i].fn, ML_F32, seed, &n32);
		bool same = a != NULL && b != NULL && n64 == n32 && n64 > 0;
		double scale = 1e-3, worst = 0;
		for (int64_t k = 0; same && k < n64; k++)
			scale = fmax(scale, fabs(a[k]));
		for (int64_t k = 0; same && k < n64; k++)
			worst = fmax(worst, fabs(a[k] - b[k]) / scale);
		same = same && worst < 1e-5;
		if (report) {
			printf("# f32 %s: worst relative difference %.2g\n", pc[i].name, worst);
			ok(same, "f32 %s and its gradients match the f64 reference", pc[i].name);
		}
		bad += !same;
		free(a);
		free(b);
	}
	return bad;
}

/*
 * The same convolutions marked precision bf16 (mltrain --precision bf16):
 * on AMX (train_amx.c) and on vdpbf16ps (train_conv.c's ML_TC_DP) against
 * their reference, the f32 kernels on operands rounded to bf16
 * (ML_BF16=f32), which differs by the order of the f32 sums only; both
 * against f64 within bf16's rounding, and not equal to the f32 results
 * (the operands did round).
 */
static void
bf16_parity(void)
{
	const struct pcase *pc = conv_cases;
	for (int path = ML_BF16_DP; path <= ML_BF16_AMX; path++) {
		bool here = ml_bf16_set_path((enum ml_bf16_path)path) &&
			    ml_bf16_path() == (enum ml_bf16_path)path;
		/* vdpbf16ps runs the convolutions where it issues at the FMA's rate */
		bool fast = path == ML_BF16_AMX || ml_bf16_dp_fast();
		ml_bf16_set_path(ML_BF16_AUTO);
		const char *on = path == ML_BF16_AMX ? "AMX" : "vdpbf16ps";
		for (size_t i = 0; i < NCONV; i++) {
			char msg[200];
			snprintf(msg, sizeof msg, "bf16 %s on %s: the rounded f32 reference's sums, "
				 "within bf16 of f64's, not f32's", pc[i].name, on);
			if (!here || !fast) {
				printf("ok %d - %s # SKIP %s\n", ++ntest, msg,
				       !here ? "not on this CPU (or ML_BF16 says otherwise)" :
				       "vdpbf16ps slower than the FMAs here: f32 runs");
				continue;
			}
			uint64_t seed = rng;
			int64_t n64 = 0, n32 = 0, nb = 0, nr = 0;
			double *a = parity_run(pc[i].fn, ML_F64, seed, &n64);
			double *f = parity_run(pc[i].fn, ML_F32, seed, &n32);
			parity_prec = ML_PREC_BF16;
			ml_bf16_set_path((enum ml_bf16_path)path);
			double *b = parity_run(pc[i].fn, ML_F32, seed, &nb);
			ml_bf16_set_path(ML_BF16_F32);
			double *r = parity_run(pc[i].fn, ML_F32, seed, &nr);
			ml_bf16_set_path(ML_BF16_AUTO);
			parity_prec = ML_PREC_F32;
			bool same = a != NULL && f != NULL && b != NULL && r != NULL && n64 == n32 &&
				    n64 == nb && n64 == nr && n64 > 0;
			double scale = 1e-3, dr = 0, d64 = 0, d32 = 0;
			for (int64_t k = 0; same && k < n64; k++)
				scale = fmax(scale, fabs(a[k]));
			for (int64_t k = 0; same && k < n64; k++) {
				dr = fmax(dr, fabs(b[k] - r[k]) / scale);
				d64 = fmax(d64, fabs(b[k] - a[k]) / scale);
				d32 = fmax(d32, fabs(b[k] - f[k]) / scale);
			}
			printf("# bf16 %s on %s: against the rounded reference %.2g, f64 %.2g, "
			       "f32 %.2g\n", pc[i].name, on, dr, d64, d32);
			ok(same && dr < 1e-5 && d64 < 2e-2 && d32 > 1e-5, "%s", msg);
			free(a);
			free(f);
			free(b);
			free(r);
		}
	}
}

/*
 * bf16_fallback: where neither AMX nor vdpbf16ps runs them (ML_AMX=0 and
 * a vdpbf16ps slower than the FMAs, or train_conv.c's AVX2 kernels) the
 * few-channel convolutions marked bf16 run the f32 kernels: the same bits
 * as unmarked. The number of cases that differ.
 */
static int
bf16_fallback(void)
{
	int bad = 0;
	for (size_t i = 0; i < NCONV; i++) {
		uint64_t seed = rng;
		int64_t n32 = 0, nb = 0;
		double *f = parity_run(conv_cases[i].fn, ML_F32, seed, &n32);
		parity_prec = ML_PREC_BF16;
		double *b = parity_run(conv_cases[i].fn, ML_F32, seed, &nb);
		parity_prec = ML_PREC_F32;
		bad += f == NULL || b == NULL || n32 != nb || n32 == 0 ||
		       memcmp(f, b, sizeof(double) * (size_t)n32) != 0;
		free(f);
		free(b);
	}
	return bad;
}

int
main(int argc, char **argv)
{
	static const struct {
		const char *name;
		build_fn fn;
	} cases[] = {
		{ "Add (bias broadcast)", c_add }, { "Add (both broadcast)", c_add_b },
		{ "Sub", c_sub }, { "Mul", c_mul }, { "Div", c_div }, { "Pow", c_pow },
		{ "Neg", c_neg }, { "Relu", c_relu }, { "LeakyRelu", c_leaky },
		{ "Sigmoid", c_sigmoid }, { "Tanh", c_tanh }, { "Exp", c_exp }, { "Log", c_log },
		{ "Sqrt", c_sqrt }, { "Erf", c_erf }, { "Gelu", c_gelu }, { "Silu", c_silu },
		{ "Softplus", c_softplus }, { "Reciprocal", c_reciprocal },
		{ "Identity", c_identity }, { "Clip", c_clip }, { "Cast", c_cast },
		{ "Softmax", c_softmax }, { "LogSoftmax", c_log_softmax },
		{ "Gemm (transB, alpha, beta)", c_gemm }, { "Gemm (transA, C [4,1])", c_gemm_ta },
		{ "MatMul", c_matmul }, { "MatMul (batch x matrix)", c_matmul3 },
		{ "MatMul (broadcast batches)", c_matmulb },
		{ "Conv", c_conv }, { "Conv (groups, strides, pads)", c_conv_g },
		{ "Conv (dilations)", c_conv_d }, { "Conv (1x1, no bias)", c_conv1x1 },
		{ "MaxPool", c_maxpool }, { "MaxPool (overlapping, pads)", c_maxpool_o },
		{ "AveragePool (pads)", c_avgpool }, { "AveragePool (count_include_pad)", c_avgpool_i },
		{ "GlobalAveragePool", c_gap4 },
		{ "BatchNormTraining", c_bn_train }, { "LayerNormalization", c_layernorm },
		{ "Flatten", c_flatten }, { "Reshape", c_reshape }, { "Squeeze", c_squeeze },
		{ "Unsqueeze", c_unsqueeze }, { "Transpose", c_transpose }, { "Concat", c_concat },
		{ "Slice", c_slice }, { "Gather", c_gather }, { "Expand", c_expand },
		{ "ReduceSum", c_rsum }, { "ReduceSum (keepdims=0)", c_rsum0 },
		{ "ReduceMean", c_rmean }, { "Dropout (inference)", c_dropout },
		{ "DropoutTraining", c_dropout_train },
		{ "SoftmaxCrossEntropyLoss", c_sce }, { "SoftmaxCrossEntropyLoss (sum)", c_sce_sum },
		{ "SoftmaxCrossEntropyLoss ([N,C,D], ignore_index)", c_sce3 },
		{ "NegativeLogLikelihoodLoss", c_nll }, { "BCEWithLogitsLoss", c_bce },
		{ "MSE", c_mse }, { "fan-out (x * x + x)", c_fanout },
	};
	/* the f32 kernels of a training step's hot path, on their own */
	static const struct {
		const char *name;
		build_fn fn;
	} f32_cases[] = {
		{ "Relu", c_relu }, { "Gemm (transB, alpha, beta)", c_gemm }, { "MatMul", c_matmul },
		{ "Conv", c_conv }, { "Conv (groups, strides, pads)", c_conv_g },
		{ "Conv (dilations)", c_conv_d }, { "Conv (1x1, no bias)", c_conv1x1 },
		{ "MaxPool", c_maxpool }, { "AveragePool (pads)", c_avgpool },
		{ "BatchNormTraining", c_bn_train }, { "SoftmaxCrossEntropyLoss", c_sce },
		{ "Sigmoid", c_sigmoid },
	};
	/*
	 * (Overlapping max pools are left to f64: with f32's step of 1e-2 two
	 * values of one window often lie closer than the step.)
	 */
	(void)c_gap;
	ml_set_threads(1);
	if (argc > 1 && strcmp(argv[1], "--conv-parity") == 0)
		return conv_parity(false) ? 1 : 0;
	if (argc > 1 && strcmp(argv[1], "--bf16-fallback") == 0) {
		/* a CPU whose vdpbf16ps is slower than its FMAs (ML_TGEMM=avx2: any) */
		if (getenv("ML_TGEMM") == NULL)
			ml_bf16_dp_fast_set(0);
		return ml_bf16_path() != ML_BF16_AMX && bf16_fallback() == 0 ? 0 : 1;
	}
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		run_case(cases[i].name, cases[i].fn);
	for (size_t i = 0; i < sizeof f32_cases / sizeof f32_cases[0]; i++)
		run_case_dt(f32_cases[i].name, f32_cases[i].fn, true);
	conv_parity(true);
	bf16_parity();
	/* their fallback, in a child: the AMX probe runs once */
	for (int lv = 0; lv < 2; lv++) {
		const char *how = lv == 0 ? "ML_AMX=0, vdpbf16ps slower than the FMAs" :
				  "ML_AMX=0 ML_TGEMM=avx2";
		if (!ml_bf16_path_ok(ML_BF16_DP)) {
			printf("ok %d - bf16 Conv at %s: the f32 kernels' bits # SKIP no AVX512_BF16\n",
			       ++ntest, how);
			continue;
		}
		char cmd[4200];
		snprintf(cmd, sizeof cmd, "ML_AMX=0 %s'%s' --bf16-fallback >/dev/null 2>&1",
			 lv == 0 ? "" : "ML_TGEMM=avx2 ", argv[0]);
		int st = strlen(argv[0]) < 4000 ? system(cmd) : -1;
		ok(st == 0, "bf16 Conv at %s: the f32 kernels' bits", how);
	}
	/* the AVX2 and baseline kernels of train_conv.c, in children (the level is chosen once) */
	for (int lv = 0; lv < 2; lv++) {
		const char *name = lv == 0 ? "avx2" : "0";
		char cmd[4200];
		snprintf(cmd, sizeof cmd, "ML_TGEMM=%s '%s' --conv-parity >/dev/null 2>&1", name,
			 argv[0]);
		int st = strlen(argv[0]) < 4000 ? system(cmd) : -1;
		ok(st == 0, "the f32 Conv kernels at ML_TGEMM=%s match the f64 reference", name);
	}

	/* an op without a rule is refused with ML_ENOTSUP naming it */
	{
		struct tc t;
		tc_init(&t, ML_F32);
		const char *x = param(&t, "x", 1, D(4), -1, 1, true), *o, *y;
		node(&t, "Floor", "", 1, &x, 1, &o);
		int ni = node(&t, "ReduceSum", "", 1, &o, 1, &y);
		ml_node_set_int(t.g, ni, "keepdims", 0);
		ml_graph_infer(t.g, &t.e);
		int gx, xi = ml_graph_find(t.g, "x");
		int rc = ml_grad(t.g, ml_graph_find(t.g, y), &xi, 1, &gx, &t.e);
		ok(rc == ML_ENOTSUP && strstr(t.e.msg, "Floor") != NULL,
		   "%s", "an op without a gradient rule is refused with ML_ENOTSUP naming it");
		/* an input y does not depend on gets -1 */
		const char *z = param(&t, "z", 1, D(4), -1, 1, false);
		(void)z;
		int zi = ml_graph_find(t.g, "z");
		rc = ml_grad(t.g, ml_graph_find(t.g, y), &zi, 1, &gx, &t.e);
		ok(rc == 0 && gx == -1, "%s", "an input y does not depend on gets no gradient (-1)");
		/* y must be a scalar */
		rc = ml_grad(t.g, xi, &xi, 1, &gx, &t.e);
		ok(rc == ML_EINVAL, "%s", "a y that is not a scalar is refused with ML_EINVAL");
		ml_graph_free(t.g);
	}
	printf("1..%d\n", ntest);
	return nfail != 0;
}
