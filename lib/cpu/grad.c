/*
 * grad.c: CPU kernels of the grad family (see lib/ops/grad.c for the ops'
 * semantics), for f32 and f64. The kernels on a training step's hot path
 * (ReluGrad, SGDUpdate, AdamUpdate, the pool and convolution gradients, the
 * cross-entropy gradient) are typed loops; the rest read and write through
 * ml_get_f64/ml_set_f64, which costs a call per element but keeps one body
 * for both types.
 *
 * Convolution gradients use im2col per image and group: ConvGradFilter
 * adds dy_g [mg, out] x col^T into dW_g, ConvGradInput computes
 * col = W_g^T dy_g and scatters it back (col2im) into dx. f32 stride-1
 * convolutions with few output channels (ml_train_conv_ok) go to
 * lib/cpu/train_conv.c instead, which needs no column matrix (in bf16
 * too, for a step of mltrain --precision bf16).
 *
 * TrainGemm and GemmSGDUpdate (the dense layers of a fused CPU step) go
 * to ml_tgemm in nn_gemm.c, or to the Gemm kernel and a second pass.
 */
#if defined(__GNUC__) && !defined(__clang__)
/* Vectorised element loops (see lib/cpu/reduce.c); short row copies stay loops, not memcpy calls. */
#pragma GCC optimize("O3", "no-trapping-math", "no-tree-loop-distribute-patterns")
#endif
#include <immintrin.h>

#include "cpu/nn.h"
#include "cpu/train_conv.h"
#include "ops/grad.h"

#define F32(t) ((float *)(t)->data)
#define F64(t) ((double *)(t)->data)

/* stored: input 0 must be a CONST or PARAM tensor of the graph (a side-effect target). */
static int
stored(struct ml_opctx *c)
{
	int t = c->node->in[0];
	if (t < 0 || c->g == NULL || c->g->tensors[t]->kind == ML_TK_INPUT ||
	    c->g->tensors[t]->kind == ML_TK_ACT || c->in[0]->data == NULL)
		return ml_opfail(c, ML_EINVAL, "the target must be a stored tensor (a parameter)");
	return 0;
}

static int
same_numel(struct ml_opctx *c, int i, int j)
{
	if (ml_tval_numel(c->in[i]) != ml_tval_numel(c->in[j]))
		return ml_opfail(c, ML_EINVAL, "inputs %d and %d differ in size", i, j);
	return 0;
}

static double
scalar(const struct ml_tval *t, double def)
{
	return t != NULL ? ml_get_f64(t->data, t->dtype, 0) : def;
}

static int
run_assign(struct ml_opctx *c)
{
	ML_TRY(stored(c));
	ML_TRY(same_numel(c, 0, 1));
	int64_t nb = ml_tval_nbytes(c->in[0]);
	if (nb > 0 && c->in[0]->data != c->in[1]->data)
		memmove(c->in[0]->data, c->in[1]->data, (size_t)nb);
	return 0;
}

static int
run_ema(struct ml_opctx *c)
{
	ML_TRY(stored(c));
	ML_TRY(same_numel(c, 0, 1));
	double a = ml_attr_float(c->node, "momentum", 0.9);
	int64_t n = ml_tval_numel(c->in[0]);
	if (c->in[0]->dtype == ML_F32) {
		float *t = F32(c->in[0]), af = (float)a, bf = (float)(1 - a);
		const float *v = F32(c->in[1]);
		for (int64_t i = 0; i < n; i++)
			t[i] = af * t[i] + bf * v[i];
	} else {
		double *t = F64(c->in[0]);
		const double *v = F64(c->in[1]);
		for (int64_t i = 0; i < n; i++)
			t[i] = a * t[i] + (1 - a) * v[i];
	}
	return 0;
}

/*
 * Gradient accumulation (SGDUpdate's input 6, AdamUpdate's 8: the sum S of
 * the group's gradients so far, attribute accumulate k). Where apply is 0,
 * S += G is the whole kernel, one pass; where it is 1 the update reads its
 * gradient as (S + G) (1/k) (the group's mean, rounded as an Add and a Mul
 * by the f32 or f64 1/k would round it) and S starts again from 0, in the
 * update's own pass.
 */
#define DEF_ACC(SUF, T)								\
static void									\
acc_##SUF(T *s, const T *g, int64_t n)						\
{										\
	for (int64_t i = 0; i < n; i++)						\
		s[i] += g[i];							\
}
DEF_ACC(f32, float)
DEF_ACC(f64, double)

/* GRAD: element i of the update's gradient, the group's mean where acc (a loop invariant) */
#define GRAD(i) (acc != NULL ? (acc[i] + g[i]) * inv : g[i])
#define DONE(i)								\
	do {								\
		if (acc != NULL)					\
			acc[i] = 0;					\
	} while (0)

#define DEF_SGD(SUF, T)								\
static void									\
sgd_##SUF(T *p, const T *g, T *m, int64_t n, T lr, T mu, T wd, T s, bool nest, T *acc,	\
	  T inv)								\
{										\
	if (m == NULL) {							\
		for (int64_t i = 0; i < n; i++) {				\
			p[i] -= lr * (s * GRAD(i) + wd * p[i]);			\
			DONE(i);						\
		}								\
		return;								\
	}									\
	if (nest) {								\
		for (int64_t i = 0; i < n; i++) {				\
			T d = s * GRAD(i) + wd * p[i];				\
			T v = mu * m[i] + d;					\
			m[i] = v;						\
			p[i] -= lr * (d + mu * v);				\
			DONE(i);						\
		}								\
		return;								\
	}									\
	for (int64_t i = 0; i < n; i++) {					\
		T v = mu * m[i] + s * GRAD(i) + wd * p[i];			\
		m[i] = v;							\
		p[i] -= lr * v;							\
		DONE(i);							\
	}									\
}
DEF_SGD(f32, float)
DEF_SGD(f64, double)

/*
 * accum: input ia (the sum S), when present, must be a stored tensor of
 * input 0's size; where apply is 0 (*skip) it gets G (input ig) added.
 * *acc is S's data for the update, and *inv 1/k.
 */
static int
accum(struct ml_opctx *c, int ia, int ig, bool apply, bool *skip, void **acc, double *inv)
{
	const struct ml_tval *s = ML_IN(c, ia);
	*skip = !apply;
	*acc = NULL;
	*inv = 1;
	if (s == NULL)
		return 0;
	int t = c->node->in[ia];
	ML_TRY(same_numel(c, 0, ia));
	if (s->dtype != c->in[0]->dtype || s->data == NULL || c->g == NULL ||
	    (c->g->tensors[t]->kind != ML_TK_PARAM && c->g->tensors[t]->kind != ML_TK_CONST))
		return ml_opfail(c, ML_EINVAL, "the gradient sum must be a stored tensor of P's dtype");
	int64_t k = ml_attr_int(c->node, "accumulate", 1);
	if (k < 1)
		return ml_opfail(c, ML_EINVAL, "accumulate must be 1 or more, not %lld", (long long)k);
	*inv = 1.0 / (double)k;
	*acc = s->data;
	if (apply || ig < 0)
		return 0;
	ML_TRY(same_numel(c, 0, ig));
	if (c->in[ig]->dtype != s->dtype)
		return ml_opfail(c, ML_EINVAL, "the gradient must have P's dtype");
	if (s->dtype == ML_F32)
		acc_f32(F32(s), F32(c->in[ig]), ml_tval_numel(s));
	else
		acc_f64(F64(s), F64(c->in[ig]), ml_tval_numel(s));
	return 0;
}

/*
 * AllFinite: the largest magnitude's bits below an infinity's, for each
 * input; integer maxima, so the loop vectorises (a float sum would not).
 */
static int
run_all_finite(struct ml_opctx *c)
{
	bool fin = true;
	for (int i = 0; i < c->n_in && fin; i++) {
		const struct ml_tval *g = ML_IN(c, i);
		int64_t n = g != NULL ? ml_tval_numel(g) : 0;
		if (g != NULL && g->dtype == ML_F32) {
			const uint32_t *u = g->data;
			uint32_t m = 0;
			for (int64_t k = 0; k < n; k++)
				m = (u[k] & 0x7fffffffu) > m ? u[k] & 0x7fffffffu : m;
			fin = m < 0x7f800000u;
		} else if (g != NULL && g->dtype == ML_F64) {
			const uint64_t *u = g->data;
			uint64_t m = 0;
			for (int64_t k = 0; k < n; k++)
				m = (u[k] & 0x7fffffffffffffffu) > m ? u[k] & 0x7fffffffffffffffu : m;
			fin = m < 0x7ff0000000000000u;
		} else if (g != NULL) {
			return ml_opfail(c, ML_ENOTSUP, "AllFinite of %s", ml_dtype_name(g->dtype));
		}
	}
	ml_set_f64(c->out[0]->data, c->out[0]->dtype, 0, fin);
	if (c->n_out > 1 && c->out[1] != NULL)
		*(int64_t *)c->out[1]->data = fin;
	return 0;
}

static int
run_sgd(struct ml_opctx *c)
{
	const struct ml_tval *m = ML_IN(c, 3);
	bool skip;
	void *acc;
	double inv;
	ML_TRY(accum(c, 6, 1, scalar(ML_IN(c, 5), 1) != 0, &skip, &acc, &inv));
	if (skip)
		return 0;	/* accumulating: not the group's last micro-batch */
	ML_TRY(stored(c));
	ML_TRY(same_numel(c, 0, 1));
	if (m != NULL) {
		ML_TRY(same_numel(c, 0, 3));
		int t = c->node->in[3];
		if (c->g->tensors[t]->kind != ML_TK_PARAM && c->g->tensors[t]->kind != ML_TK_CONST)
			return ml_opfail(c, ML_EINVAL, "the momentum must be a stored tensor");
	}
	double lr = scalar(c->in[2], 0), s = scalar(ML_IN(c, 4), 1);
	double mu = ml_attr_float(c->node, "momentum", 0);
	double wd = ml_attr_float(c->node, "weight_decay", 0);
	bool nest = ml_attr_int(c->node, "nesterov", 0) != 0;
	int64_t n = ml_tval_numel(c->in[0]);
	if (c->in[0]->dtype == ML_F32)
		sgd_f32(F32(c->in[0]), F32(c->in[1]), m != NULL ? F32(m) : NULL, n, (float)lr,
			(float)mu, (float)wd, (float)s, nest, acc, (float)inv);
	else
		sgd_f64(F64(c->in[0]), F64(c->in[1]), m != NULL ? F64(m) : NULL, n, lr, mu, wd, s,
			nest, acc, inv);
	return 0;
}

/*
 * The fused dense products of a CPU training step (lib/train's
 * ml_train_fuse): TrainGemm is Gemm followed by act (Relu, or the Relu
 * gradient's mask R), GemmSGDUpdate an SGDUpdate whose gradient is a
 * product. Both go to ml_tgemm (nn_gemm.c), which applies the rest as
 * each tile of the product leaves the registers; otherwise (no AVX-512,
 * f64, alpha or beta not 1) the Gemm kernel computes the product and a
 * second pass the rest, as the unfused nodes would.
 */
static int
tg_act(struct ml_opctx *c, int *act)
{
	const char *s = ml_attr_str(c->node, "act", "none");
	*act = strcmp(s, "none") == 0 ? ML_TG_NONE : strcmp(s, "relu") == 0 ? ML_TG_RELU :
	       strcmp(s, "relu_grad") == 0 ? ML_TG_RELU_GRAD : -1;
	if (*act < 0)
		return ml_opfail(c, ML_EINVAL, "unknown act '%s'", s);
	return 0;
}

/* tg_dims: m, n, k of op(a) op(b) for the node's transA and transB. */
static int
tg_dims(struct ml_opctx *c, const struct ml_tval *a, const struct ml_tval *b, bool ta, bool tb,
	int64_t *m, int64_t *n, int64_t *k)
{
	if (a->rank != 2 || b->rank != 2)
		return ml_opfail(c, ML_EINVAL, "A and B must be 2-D");
	*m = a->dims[ta ? 1 : 0];
	*k = a->dims[ta ? 0 : 1];
	*n = b->dims[tb ? 0 : 1];
	if (b->dims[tb ? 1 : 0] != *k)
		return ml_opfail(c, ML_EINVAL, "inner dims differ");
	return 0;
}

/*
 * tg_bf16: the operands of a fused product: 0, a's and b's data (f32, a
 * node without precision "bf16", or a CPU without AVX512_BF16); 1, rounded
 * copies of them (the emulation, ML_BF16=f32), which the f32 kernel
 * multiplies exactly as the bf16 GEMM would, in another order of the sums;
 * 2, the Gemm kernel's vdpbf16ps GEMM is to compute it. Below 0: out of
 * memory.
 */
static int
tg_bf16(struct ml_opctx *c, const struct ml_tval *a, const struct ml_tval *b, int64_t m, int64_t n,
	int64_t k, const float **pa, const float **pb)
{
	*pa = a->dtype == ML_F32 ? F32(a) : NULL;
	*pb = b->dtype == ML_F32 ? F32(b) : NULL;
	if (a->dtype != ML_F32 || b->dtype != ML_F32 || !ml_node_bf16(c->node))
		return 0;
	int tp = ml_bf16_train_path();
	if (tp != 1)
		return tp;
	*pa = ml_bf16_rounded(4, F32(a), 1, m * k, m * k);
	*pb = ml_bf16_rounded(5, F32(b), 1, k * n, k * n);
	if (*pa == NULL || *pb == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	return 1;
}

/* base_gemm: the Gemm kernel over inputs in[0..n_in) into y. */
static int
base_gemm(struct ml_opctx *c, struct ml_tval **in, int n_in, struct ml_tval *y)
{
	struct ml_opctx b = *c;
	struct ml_node nb = *c->node;
	nb.op = ML_OP_GEMM;
	b.node = &nb;
	b.in = in;
	b.n_in = n_in;
	b.out = &y;
	b.n_out = 1;
	return ml_cpu_kernel_get(ML_OP_GEMM)(&b);
}

static int
run_train_gemm(struct ml_opctx *c)
{
	struct ml_tval *a = c->in[0], *b = c->in[1], *cc = ML_IN(c, 2), *r = ML_IN(c, 3);
	struct ml_tval *y = c->out[0];
	bool ta = ml_attr_int(c->node, "transA", 0) != 0, tb = ml_attr_int(c->node, "transB", 0) != 0;
	double alpha = ml_attr_float(c->node, "alpha", 1), beta = ml_attr_float(c->node, "beta", 1);
	int64_t m = 0, n = 0, k = 0;
	int act;
	ML_TRY(tg_act(c, &act));
	ML_TRY(tg_dims(c, a, b, ta, tb, &m, &n, &k));
	if (act == ML_TG_RELU_GRAD && (r == NULL || ml_tval_numel(r) != m * n || r->dtype != y->dtype))
		return ml_opfail(c, ML_EINVAL, "the mask R must have Y's shape and dtype");
	/* a bias along the columns goes to the epilogue; other C shapes to the Gemm kernel */
	bool rowbias = cc == NULL || (beta == 1 && ml_tval_numel(cc) == n &&
				     (cc->rank == 1 || (cc->rank == 2 && cc->dims[0] == 1)));
	/*
	 * bf16 products (mltrain --precision bf16): on AVX512_BF16 the Gemm
	 * kernel's vdpbf16ps GEMM; elsewhere the fused kernel on rounded copies
	 */
	const float *pa = NULL, *pb = NULL;
	int bf = tg_bf16(c, a, b, m, n, k, &pa, &pb);
	if (bf < 0)
		return bf;
	if (y->dtype == ML_F32 && a->dtype == ML_F32 && alpha == 1 && rowbias && bf != 2) {
		struct ml_tgemm_epi e = { .act = act, .bias = cc != NULL ? F32(cc) : NULL,
					  .mask = r != NULL ? F32(r) : NULL };
		if (ml_tgemm(ta, tb, m, n, k, pa, ta ? m : k, pb, tb ? k : n, F32(y), n, &e))
			return 0;
	}
	struct ml_tval *in[3] = { a, b, cc };
	ML_TRY(base_gemm(c, in, cc != NULL ? 3 : 2, y));
	int64_t len = m * n;
	if (act == ML_TG_NONE)
		return 0;
	if (y->dtype == ML_F32) {
		float *v = F32(y);
		const float *rv = r != NULL ? F32(r) : NULL;
		for (int64_t i = 0; i < len; i++)
			v[i] = act == ML_TG_RELU ? (v[i] > 0 ? v[i] : 0.0f) : (rv[i] > 0 ? v[i] : 0.0f);
	} else {
		double *v = F64(y);
		const double *rv = r != NULL ? F64(r) : NULL;
		for (int64_t i = 0; i < len; i++)
			v[i] = act == ML_TG_RELU ? (v[i] > 0 ? v[i] : 0.0) : (rv[i] > 0 ? v[i] : 0.0);
	}
	return 0;
}

/*
 * GemmSGDUpdate(P, A, B, lr[, M[, apply, S]]): SGDUpdate(P, alpha op(A) op(B), lr[, M]),
 * or with S SGDUpdate(P, alpha op(A) op(B), lr, M, "", apply, S).
 */
static int
run_gemm_sgd(struct ml_opctx *c)
{
	struct ml_tval *p = c->in[0], *a = c->in[1], *b = c->in[2], *mt = ML_IN(c, 4);
	bool ta = ml_attr_int(c->node, "transA", 0) != 0, tb = ml_attr_int(c->node, "transB", 0) != 0;
	double alpha = ml_attr_float(c->node, "alpha", 1);
	int64_t m = 0, n = 0, k = 0;
	bool skip;
	void *acc;
	double inv;
	ML_TRY(stored(c));
	ML_TRY(tg_dims(c, a, b, ta, tb, &m, &n, &k));
	if (ml_tval_numel(p) != m * n || a->dtype != p->dtype || b->dtype != p->dtype)
		return ml_opfail(c, ML_EINVAL, "P must have the product's shape and dtype");
	if (mt != NULL) {
		ML_TRY(same_numel(c, 0, 4));
		int t = c->node->in[4];
		if (c->g->tensors[t]->kind != ML_TK_PARAM && c->g->tensors[t]->kind != ML_TK_CONST)
			return ml_opfail(c, ML_EINVAL, "the momentum must be a stored tensor");
	}
	/* S's sum is added below, with the product; the update happens where apply is not 0 */
	bool apply = scalar(ML_IN(c, 5), 1) != 0;
	ML_TRY(accum(c, 6, -1, apply, &skip, &acc, &inv));
	if (skip && acc == NULL)
		return 0;
	double lr = scalar(c->in[3], 0), mu = ml_attr_float(c->node, "momentum", 0);
	double wd = ml_attr_float(c->node, "weight_decay", 0);
	bool nest = ml_attr_int(c->node, "nesterov", 0) != 0;
	const float *pa = NULL, *pb = NULL;
	int bf = tg_bf16(c, a, b, m, n, k, &pa, &pb);
	if (bf < 0)
		return bf;
	if (p->dtype == ML_F32 && alpha == 1 && bf != 2) {
		struct ml_tgemm_epi e = { .act = skip ? ML_TG_ACC : ML_TG_SGD, .p = F32(p),
					  .mom = mt ? F32(mt) : NULL, .acc = acc, .inv = (float)inv,
					  .lr = (float)lr, .mu = (float)mu, .wd = (float)wd,
					  .nesterov = nest };
		if (ml_tgemm(ta, tb, m, n, k, pa, ta ? m : k, pb, tb ? k : n, NULL, n, &e))
			return 0;
	}
	/* the gradient in scratch (slot 2, which the Gemm kernel does not use) */
	struct ml_tval g = { .dtype = p->dtype, .rank = 2, .dims = { m, n } }, *in[2] = { a, b };
	if ((g.data = ml_cpu_scratch(2, (size_t)(m * n) * ml_dtype_size(p->dtype) + 64)) == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	int rc = base_gemm(c, in, 2, &g);
	if (rc == 0 && skip && p->dtype == ML_F32)
		acc_f32(acc, F32(&g), m * n);
	else if (rc == 0 && skip)
		acc_f64(acc, F64(&g), m * n);
	else if (rc == 0 && p->dtype == ML_F32)
		sgd_f32(F32(p), F32(&g), mt ? F32(mt) : NULL, m * n, (float)lr, (float)mu, (float)wd,
			1.0f, nest, acc, (float)inv);
	else if (rc == 0)
		sgd_f64(F64(p), F64(&g), mt ? F64(mt) : NULL, m * n, lr, mu, wd, 1.0, nest, acc, inv);
	return rc;
}

#define DEF_ADAM(SUF, T, SQRT)							\
static void									\
adam_##SUF(T *p, const T *g, T *m, T *v, int64_t n, double lr, double b1, double b2,	\
	   double eps, double wd, bool dec, double s, int64_t t, T *acc, T inv)	\
{										\
	double c1 = 1 - pow(b1, (double)t), c2 = 1 - pow(b2, (double)t);	\
	T step = (T)(lr / c1), ic2 = (T)(1 / sqrt(c2)), e = (T)eps;		\
	T B1 = (T)b1, B2 = (T)b2, A1 = (T)(1 - b1), A2 = (T)(1 - b2), S = (T)s;	\
	T wdg = dec ? 0 : (T)wd, wdp = dec ? (T)(1 - lr * wd) : 1;		\
	for (int64_t i = 0; i < n; i++) {					\
		T d = S * GRAD(i) + wdg * p[i];					\
		T mi = B1 * m[i] + A1 * d;					\
		T vi = B2 * v[i] + A2 * d * d;					\
		m[i] = mi;							\
		v[i] = vi;							\
		p[i] = wdp * p[i] - step * mi / (SQRT(vi) * ic2 + e);		\
		DONE(i);							\
	}									\
}
DEF_ADAM(f32, float, sqrtf)
DEF_ADAM(f64, double, sqrt)

static int
run_adam(struct ml_opctx *c)
{
	bool skip;
	void *acc;
	double inv;
	ML_TRY(accum(c, 8, 1, scalar(ML_IN(c, 7), 1) != 0, &skip, &acc, &inv));
	if (skip)
		return 0;	/* accumulating: not the group's last micro-batch */
	ML_TRY(stored(c));
	for (int i = 1; i < 6; i++)
		if (i != 2 && i != 3)
			ML_TRY(same_numel(c, 0, i));
	for (int i = 4; i < 6; i++) {
		int t = c->node->in[i];
		if (c->g->tensors[t]->kind != ML_TK_PARAM && c->g->tensors[t]->kind != ML_TK_CONST)
			return ml_opfail(c, ML_EINVAL, "the moments must be stored tensors");
	}
	double lr = scalar(c->in[2], 0), s = scalar(ML_IN(c, 6), 1);
	int64_t t = ml_get_i64(c->in[3]->data, c->in[3]->dtype, 0);
	if (t < 1)
		return ml_opfail(c, ML_EINVAL, "the step count must be 1 or more");
	double b1 = ml_attr_float(c->node, "beta1", 0.9), b2 = ml_attr_float(c->node, "beta2", 0.999);
	double eps = ml_attr_float(c->node, "epsilon", 1e-8);
	double wd = ml_attr_float(c->node, "weight_decay", 0);
	bool dec = ml_attr_int(c->node, "decoupled", 0) != 0;
	int64_t n = ml_tval_numel(c->in[0]);
	if (c->in[0]->dtype == ML_F32)
		adam_f32(F32(c->in[0]), F32(c->in[1]), F32(c->in[4]), F32(c->in[5]), n, lr, b1, b2,
			 eps, wd, dec, s, t, acc, (float)inv);
	else
		adam_f64(F64(c->in[0]), F64(c->in[1]), F64(c->in[4]), F64(c->in[5]), n, lr, b1, b2,
			 eps, wd, dec, s, t, acc, inv);
	return 0;
}

static int
run_relu_grad(struct ml_opctx *c)
{
	ML_TRY(same_numel(c, 0, 1));
	int64_t n = ml_tval_numel(c->in[0]);
	if (c->in[0]->dtype == ML_F32) {
		/* branch-free: the sign of y is random, a branch would mispredict half the time */
		const float *dy = F32(c->in[0]), *y = F32(c->in[1]);
		float *dx = F32(c->out[0]);
		int64_t i = 0;
		__m128 z = _mm_setzero_ps();
		for (; i + 4 <= n; i += 4) {
			__m128 m = _mm_cmpgt_ps(_mm_loadu_ps(y + i), z);
			_mm_storeu_ps(dx + i, _mm_and_ps(m, _mm_loadu_ps(dy + i)));
		}
		for (; i < n; i++)
			dx[i] = y[i] > 0 ? dy[i] : 0.0f;
	} else {
		const double *dy = F64(c->in[0]), *y = F64(c->in[1]);
		double *dx = F64(c->out[0]);
		for (int64_t i = 0; i < n; i++)
			dx[i] = y[i] > 0 ? dy[i] : 0.0;
	}
	return 0;
}

/* dfn: the derivative of UnaryGrad's function fn at x. */
static double
dfn(int fn, double x, double alpha, bool tanh_gelu)
{
	switch (fn) {
	case ML_UG_LEAKY_RELU:
		return x > 0 ? 1 : alpha;
	case ML_UG_ELU:
		return x > 0 ? 1 : alpha * exp(x);
	case ML_UG_GELU:
		if (tanh_gelu) {
			double k = sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x);
			double th = tanh(u);
			return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
		}
		return 0.5 * (1 + erf(x * M_SQRT1_2)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
	case ML_UG_SILU: {
		double s = 1 / (1 + exp(-x));
		return s * (1 + x * (1 - s));
	}
	case ML_UG_ERF:
		return 2 / sqrt(M_PI) * exp(-x * x);
	case ML_UG_SIGMOID: {
		double s = 1 / (1 + exp(-x));
		return s * (1 - s);
	}
	case ML_UG_TANH: {
		double t = tanh(x);
		return 1 - t * t;
	}
	case ML_UG_EXP:
		return exp(x);
	case ML_UG_LOG:
		return 1 / x;
	case ML_UG_SQRT:
		return 0.5 / sqrt(x);
	case ML_UG_SOFTPLUS:
		return 1 / (1 + exp(-x));
	case ML_UG_ABS:
		return x > 0 ? 1 : x < 0 ? -1 : 0;
	default:
		return 0;
	}
}

static int
run_unary_grad(struct ml_opctx *c)
{
	ML_TRY(same_numel(c, 0, 1));
	int fn = ml_unary_grad_fn(ml_attr_str(c->node, "fn", ""));
	double alpha = ml_attr_float(c->node, "alpha", fn == ML_UG_ELU ? 1.0 : 0.01);
	bool tg = strcmp(ml_attr_str(c->node, "approximate", "none"), "tanh") == 0;
	int64_t n = ml_tval_numel(c->in[0]);
	enum ml_dtype dt = c->in[0]->dtype;
	if (dt == ML_F32) {
		const float *dy = F32(c->in[0]), *x = F32(c->in[1]);
		float *dx = F32(c->out[0]);
		for (int64_t i = 0; i < n; i++)
			dx[i] = (float)(dy[i] * dfn(fn, x[i], alpha, tg));
	} else {
		const double *dy = F64(c->in[0]), *x = F64(c->in[1]);
		double *dx = F64(c->out[0]);
		for (int64_t i = 0; i < n; i++)
			dx[i] = dy[i] * dfn(fn, x[i], alpha, tg);
	}
	return 0;
}

/* conv3: the 3-D geometry of the forward op over x (and w). */
static int
conv3(struct ml_opctx *c, enum ml_op op, struct ml_tval *x, struct ml_tval *w, struct ml_conv3 *v)
{
	struct ml_node nn = *c->node;
	struct ml_tval *in[2] = { x, w };
	struct ml_opctx cc = *c;
	nn.op = op;
	cc.node = &nn;
	cc.in = in;
	cc.n_in = w != NULL ? 2 : 1;
	return ml_cpu_conv3(&cc, v);
}

/* check_dy: dy has the forward op's output shape [n, cout, out...]. */
static int
check_dy(struct ml_opctx *c, const struct ml_tval *dy, const struct ml_conv3 *v)
{
	if (ml_tval_numel(dy) != v->n * v->cout * v->outsz)
		return ml_opfail(c, ML_EINVAL, "dy does not have the forward output's shape");
	return 0;
}

#define DEF_POOL(SUF, T)							\
static void									\
maxpool_grad_##SUF(const struct ml_conv3 *v, const T *dy, const T *x, T *dx)	\
{										\
	for (int64_t pl = 0; pl < v->n * v->cin; pl++) {			\
		const T *xp = x + pl * v->insz;					\
		const T *dp = dy + pl * v->outsz;				\
		T *gp = dx + pl * v->insz;					\
		for (int64_t i = 0; i < v->insz; i++)				\
			gp[i] = 0;						\
		for (int64_t od = 0; od < v->out[0]; od++)			\
		for (int64_t oh = 0; oh < v->out[1]; oh++)			\
		for (int64_t ow = 0; ow < v->out[2]; ow++) {			\
			int64_t best = -1;					\
			T bv = 0;						\
			for (int64_t kd = 0; kd < v->k[0]; kd++) {		\
				int64_t id = od * v->s[0] - v->p[0] + kd * v->d[0];	\
				if (id < 0 || id >= v->in[0])			\
					continue;				\
				for (int64_t kh = 0; kh < v->k[1]; kh++) {	\
					int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];	\
					if (ih < 0 || ih >= v->in[1])		\
						continue;			\
					const T *row = xp + (id * v->in[1] + ih) * v->in[2];	\
					for (int64_t kw = 0; kw < v->k[2]; kw++) {	\
						int64_t iw = ow * v->s[2] - v->p[2] + kw * v->d[2];	\
						if (iw < 0 || iw >= v->in[2])	\
							continue;		\
						if (best < 0 || row[iw] > bv) {	\
							bv = row[iw];		\
							best = (id * v->in[1] + ih) * v->in[2] + iw;	\
						}				\
					}					\
				}						\
			}							\
			if (best >= 0)						\
				gp[best] += dp[(od * v->out[1] + oh) * v->out[2] + ow];	\
		}								\
	}									\
}										\
static void									\
avgpool_grad_##SUF(const struct ml_conv3 *v, const T *dy, T *dx)		\
{										\
	for (int64_t pl = 0; pl < v->n * v->cin; pl++) {			\
		const T *dp = dy + pl * v->outsz;				\
		T *gp = dx + pl * v->insz;					\
		for (int64_t i = 0; i < v->insz; i++)				\
			gp[i] = 0;						\
		for (int64_t od = 0; od < v->out[0]; od++)			\
		for (int64_t oh = 0; oh < v->out[1]; oh++)			\
		for (int64_t ow = 0; ow < v->out[2]; ow++) {			\
			int64_t o[3] = { od, oh, ow }, lo[3], hi[3], cnt = 1, pc = 1;	\
			for (int k = 0; k < 3; k++) {				\
				int64_t a = o[k] * v->s[k] - v->p[k];		\
				int64_t b = a + (v->k[k] - 1) * v->d[k] + 1;	\
				int64_t pa = ML_MAX(a, -v->p[k]);		\
				int64_t pb = ML_MIN(b, v->in[k] + v->pe[k]);	\
				pc *= (pb - pa + v->d[k] - 1) / v->d[k];	\
				lo[k] = a;					\
				hi[k] = b;					\
				int64_t va = a, vb = ML_MIN(b, v->in[k]);	\
				while (va < 0)					\
					va += v->d[k];				\
				cnt *= vb > va ? (vb - va + v->d[k] - 1) / v->d[k] : 0;	\
			}							\
			int64_t div = v->count_include_pad ? pc : cnt;		\
			if (div <= 0)						\
				continue;					\
			T g = dp[(od * v->out[1] + oh) * v->out[2] + ow] / (T)div;	\
			for (int64_t id = lo[0]; id < hi[0]; id += v->d[0]) {	\
				if (id < 0 || id >= v->in[0])			\
					continue;				\
				for (int64_t ih = lo[1]; ih < hi[1]; ih += v->d[1]) {	\
					if (ih < 0 || ih >= v->in[1])		\
						continue;			\
					T *row = gp + (id * v->in[1] + ih) * v->in[2];	\
					for (int64_t iw = lo[2]; iw < hi[2]; iw += v->d[2])	\
						if (iw >= 0 && iw < v->in[2])	\
							row[iw] += g;		\
				}						\
			}							\
		}								\
	}									\
}
DEF_POOL(f32, float)
DEF_POOL(f64, double)

/*
 * maxpool_grad_tiled: the common case of f32 2-D windows that tile the
 * input (kernel == stride, no pads or dilations, a whole number of
 * windows): each window's gradient goes to its first maximum, the rest of
 * dx is zero, and every element of dx is written once.
 */
static bool
maxpool_tiled(const struct ml_conv3 *v)
{
	return v->k[0] == 1 && v->s[0] == 1 && v->k[1] == v->s[1] && v->k[2] == v->s[2] &&
	       v->d[1] == 1 && v->d[2] == 1 && v->p[1] == 0 && v->p[2] == 0 &&
	       v->out[1] * v->k[1] == v->in[1] && v->out[2] * v->k[2] == v->in[2] &&
	       v->in[0] == 1;
}

/* 4-wide GCC vectors (SSE on the x86-64-v2 baseline, plain C elsewhere). */
typedef float pv4 __attribute__((vector_size(16)));
typedef int32_t pv4i __attribute__((vector_size(16)));

static inline pv4
pv_load(const float *p)
{
	pv4 v;
	memcpy(&v, p, sizeof v);
	return v;
}

/*
 * PV_SHUF: the lanes i0..i3 of the eight of a and b. GCC before 12 has
 * only __builtin_shuffle with a mask vector, clang only
 * __builtin_shufflevector with constant indices; both give one shufps.
 */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define PV_SHUF(a, b, i0, i1, i2, i3) __builtin_shufflevector(a, b, i0, i1, i2, i3)
#else
#define PV_SHUF(a, b, i0, i1, i2, i3) __builtin_shuffle(a, b, (pv4i){ i0, i1, i2, i3 })
#endif

static inline pv4
pv_and(pv4 a, pv4i m)
{
	return (pv4)((pv4i)a & m);
}

/*
 * maxpool_grad_2x2: maxpool_grad_tiled for 2 x 2 windows, four windows at
 * a time without branches (the winner of random data mispredicts): each
 * window's gradient goes to its first maximum in row-major order.
 */
static void
maxpool_grad_2x2(const struct ml_conv3 *v, const float *restrict dy, const float *restrict x,
		 float *restrict dx)
{
	int64_t W = v->in[2], oh = v->out[1], ow = v->out[2];
	for (int64_t pl = 0; pl < v->n * v->cin; pl++) {
		const float *xp = x + pl * v->insz, *dp = dy + pl * v->outsz;
		float *gp = dx + pl * v->insz;
		for (int64_t r = 0; r < oh; r++) {
			const float *x0 = xp + 2 * r * W, *x1 = x0 + W;
			float *g0 = gp + 2 * r * W, *g1 = g0 + W;
			const float *d = dp + r * ow;
			int64_t q = 0;
			for (; q + 4 <= ow; q += 4) {
				pv4 p0 = pv_load(x0 + 2 * q), p1 = pv_load(x0 + 2 * q + 4);
				pv4 p2 = pv_load(x1 + 2 * q), p3 = pv_load(x1 + 2 * q + 4);
				/* even and odd lanes: the windows' left and right columns */
				pv4 a = PV_SHUF(p0, p1, 0, 2, 4, 6), b = PV_SHUF(p0, p1, 1, 3, 5, 7);
				pv4 c = PV_SHUF(p2, p3, 0, 2, 4, 6), e = PV_SHUF(p2, p3, 1, 3, 5, 7);
				pv4i sb = b > a;
				pv4 m = (pv4)(((pv4i)b & sb) | ((pv4i)a & ~sb));
				pv4i sc = c > m;
				m = (pv4)(((pv4i)c & sc) | ((pv4i)m & ~sc));
				pv4i se = e > m;
				pv4i wc = sc & ~se, wb = sb & ~sc & ~se, wa = ~sb & ~sc & ~se;
				pv4 g = pv_load(d + q);
				pv4 ga = pv_and(g, wa), gb = pv_and(g, wb), gc = pv_and(g, wc);
				pv4 ge = pv_and(g, se);
				pv4 o0 = PV_SHUF(ga, gb, 0, 4, 1, 5), o1 = PV_SHUF(ga, gb, 2, 6, 3, 7);
				pv4 o2 = PV_SHUF(gc, ge, 0, 4, 1, 5), o3 = PV_SHUF(gc, ge, 2, 6, 3, 7);
				memcpy(g0 + 2 * q, &o0, sizeof o0);
				memcpy(g0 + 2 * q + 4, &o1, sizeof o1);
				memcpy(g1 + 2 * q, &o2, sizeof o2);
				memcpy(g1 + 2 * q + 4, &o3, sizeof o3);
			}
			for (; q < ow; q++) {
				float a = x0[2 * q], b = x0[2 * q + 1], c = x1[2 * q], e = x1[2 * q + 1];
				int i = b > a ? 1 : 0;
				float m = b > a ? b : a;
				i = c > m ? 2 : i;
				m = c > m ? c : m;
				i = e > m ? 3 : i;
				g0[2 * q] = i == 0 ? d[q] : 0.0f;
				g0[2 * q + 1] = i == 1 ? d[q] : 0.0f;
				g1[2 * q] = i == 2 ? d[q] : 0.0f;
				g1[2 * q + 1] = i == 3 ? d[q] : 0.0f;
			}
		}
	}
}

static void
maxpool_grad_tiled(const struct ml_conv3 *v, const float *restrict dy, const float *restrict x,
		   float *restrict dx)
{
	int64_t kh = v->k[1], kw = v->k[2], W = v->in[2];
	if (kh == 2 && kw == 2) {
		maxpool_grad_2x2(v, dy, x, dx);
		return;
	}
	for (int64_t pl = 0; pl < v->n * v->cin; pl++) {
		const float *xp = x + pl * v->insz, *dp = dy + pl * v->outsz;
		float *gp = dx + pl * v->insz;
		for (int64_t oh = 0; oh < v->out[1]; oh++) {
			const float *xr = xp + oh * kh * W;
			float *gr = gp + oh * kh * W;
			for (int64_t i = 0; i < kh * W; i++)
				gr[i] = 0;
			for (int64_t ow = 0; ow < v->out[2]; ow++) {
				int64_t best = ow * kw;
				float bv = xr[best];
				for (int64_t a = 0; a < kh; a++)
					for (int64_t b = 0; b < kw; b++) {
						int64_t o = a * W + ow * kw + b;
						if (xr[o] > bv) {
							bv = xr[o];
							best = o;
						}
					}
				gr[best] = dp[oh * v->out[2] + ow];
			}
		}
	}
}

static int
run_pool_grad(struct ml_opctx *c)
{
	struct ml_conv3 v;
	bool mx = c->node->op == ML_OP_MAXPOOL_GRAD;
	ML_TRY(conv3(c, mx ? ML_OP_MAX_POOL : ML_OP_AVERAGE_POOL, c->in[1], NULL, &v));
	ML_TRY(check_dy(c, c->in[0], &v));
	if (mx && c->in[0]->dtype == ML_F32 && maxpool_tiled(&v)) {
		maxpool_grad_tiled(&v, F32(c->in[0]), F32(c->in[1]), F32(c->out[0]));
		return 0;
	}
	if (c->in[0]->dtype == ML_F32) {
		if (mx)
			maxpool_grad_f32(&v, F32(c->in[0]), F32(c->in[1]), F32(c->out[0]));
		else
			avgpool_grad_f32(&v, F32(c->in[0]), F32(c->out[0]));
	} else {
		if (mx)
			maxpool_grad_f64(&v, F64(c->in[0]), F64(c->in[1]), F64(c->out[0]));
		else
			avgpool_grad_f64(&v, F64(c->in[0]), F64(c->out[0]));
	}
	return 0;
}

/*
 * im2col / col2im of one image and group: col holds rows (ci, kd, kh, kw)
 * of cg * ksz, each row ld elements apart, and one column per output
 * position; x points at the group's first channel. col2im adds col back
 * into (zeroed) x.
 */
#define DEF_COL(SUF, T)								\
static void									\
im2col_##SUF(const struct ml_conv3 *v, const T *restrict x, T *restrict col, int64_t ld)	\
{										\
	for (int64_t ci = 0; ci < v->cg; ci++)					\
	for (int64_t kd = 0; kd < v->k[0]; kd++)				\
	for (int64_t kh = 0; kh < v->k[1]; kh++)				\
	for (int64_t kw = 0; kw < v->k[2]; kw++, col += ld) {			\
		const T *xp = x + ci * v->insz;					\
		T *cp = col;							\
		int64_t lo, hi;							\
		ml_valid_range(kw * v->d[2] - v->p[2], v->s[2], v->in[2], v->out[2], &lo, &hi);	\
		for (int64_t od = 0; od < v->out[0]; od++) {			\
			int64_t id = od * v->s[0] - v->p[0] + kd * v->d[0];	\
			for (int64_t oh = 0; oh < v->out[1]; oh++, cp += v->out[2]) {	\
				int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];	\
				if (id < 0 || id >= v->in[0] || ih < 0 || ih >= v->in[1]) {	\
					for (int64_t ow = 0; ow < v->out[2]; ow++)	\
						cp[ow] = 0;			\
					continue;				\
				}						\
				const T *xr = xp + (id * v->in[1] + ih) * v->in[2] - v->p[2] + kw * v->d[2];	\
				for (int64_t ow = 0; ow < lo; ow++)		\
					cp[ow] = 0;				\
				if (v->s[2] == 1)				\
					for (int64_t ow = lo; ow < hi; ow++)	\
						cp[ow] = xr[ow];		\
				else						\
					for (int64_t ow = lo; ow < hi; ow++)	\
						cp[ow] = xr[ow * v->s[2]];	\
				for (int64_t ow = hi; ow < v->out[2]; ow++)	\
					cp[ow] = 0;				\
			}							\
		}								\
	}									\
}										\
static void									\
col2im_##SUF(const struct ml_conv3 *v, const T *restrict col, int64_t ld, T *restrict x)	\
{										\
	for (int64_t ci = 0; ci < v->cg; ci++)					\
	for (int64_t kd = 0; kd < v->k[0]; kd++)				\
	for (int64_t kh = 0; kh < v->k[1]; kh++)				\
	for (int64_t kw = 0; kw < v->k[2]; kw++, col += ld) {			\
		T *xp = x + ci * v->insz;					\
		const T *cp = col;						\
		int64_t lo, hi;							\
		ml_valid_range(kw * v->d[2] - v->p[2], v->s[2], v->in[2], v->out[2], &lo, &hi);	\
		for (int64_t od = 0; od < v->out[0]; od++) {			\
			int64_t id = od * v->s[0] - v->p[0] + kd * v->d[0];	\
			for (int64_t oh = 0; oh < v->out[1]; oh++, cp += v->out[2]) {	\
				int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];	\
				if (id < 0 || id >= v->in[0] || ih < 0 || ih >= v->in[1])	\
					continue;				\
				T *xr = xp + (id * v->in[1] + ih) * v->in[2] - v->p[2] + kw * v->d[2];	\
				if (v->s[2] == 1)				\
					for (int64_t ow = lo; ow < hi; ow++)	\
						xr[ow] += cp[ow];		\
				else						\
					for (int64_t ow = lo; ow < hi; ow++)	\
						xr[ow * v->s[2]] += cp[ow];	\
			}							\
		}								\
	}									\
}										\
/* gather_dy: dy of images [n0, n0 + nb), group g, as [mg, nb * outsz] rows ld apart; adds bias sums */	\
static void									\
gather_dy_##SUF(const struct ml_conv3 *v, const T *restrict dy, int64_t n0, int64_t nb,	\
		int64_t g, T *restrict dst, int64_t ld, T *restrict db)		\
{										\
	for (int64_t i = 0; i < nb; i++)					\
		for (int64_t m = 0; m < v->mg; m++) {				\
			const T *src = dy + ((n0 + i) * v->cout + g * v->mg + m) * v->outsz;	\
			T *d = dst + m * ld + i * v->outsz;			\
			memcpy(d, src, sizeof(T) * (size_t)v->outsz);		\
			if (db == NULL)						\
				continue;					\
			T l[8] = { 0 }, s = 0;					\
			int64_t j = 0;						\
			for (; j + 8 <= v->outsz; j += 8)			\
				for (int q = 0; q < 8; q++)			\
					l[q] += src[j + q];			\
			for (; j < v->outsz; j++)				\
				s += src[j];					\
			for (int q = 0; q < 8; q++)				\
				s += l[q];					\
			db[g * v->mg + m] += s;					\
		}								\
}
DEF_COL(f32, float)
DEF_COL(f64, double)

/* gemm: ty 0 f64, 1 f32, 2 f32 operands rounded to bf16 (precision "bf16") */
static bool
gemm(int ty, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
     const void *b, int64_t ldb, double beta, void *cc, int64_t ldc)
{
	if (ty == 2)
		return ml_bf16_sgemm(ta, tb, m, n, k, a, lda, b, ldb, (float)beta, cc, ldc);
	if (ty == 1)
		return ml_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, (float)beta, cc, ldc);
	return ml_dgemm(ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, cc, ldc);
}

/* The most elements of the column matrix of one chunk of images (1 MiB of f32: cache-sized). */
#define COL_CHUNK ((int64_t)1 << 18)

/*
 * run_conv_grad: ConvGradInput and ConvGradFilter (with the bias gradient
 * as an optional second output). Images go in chunks whose column matrix
 * fits COL_CHUNK elements: per chunk and group, dy is gathered into
 * dyT [mg, nb * outsz], so one GEMM covers the chunk:
 *   filter: dW_g += dyT col^T; input: col = W_g^T dyT, then col2im.
 * A 1x1 window with stride 1 and no pads needs no column matrix.
 */
static int
run_conv_grad(struct ml_opctx *c)
{
	struct ml_conv3 v;
	bool gi = c->node->op == ML_OP_CONV_GRAD_INPUT;
	struct ml_tval *dy = c->in[0], *x = gi ? c->in[2] : c->in[1], *w = gi ? c->in[1] : c->in[2];
	struct ml_tval *dbt = !gi && c->n_out > 1 ? c->out[1] : NULL;
	ML_TRY(conv3(c, ML_OP_CONV, x, w, &v));
	ML_TRY(check_dy(c, dy, &v));
	if (dbt != NULL && ml_tval_numel(dbt) != v.cout)
		return ml_opfail(c, ML_EINVAL, "the bias gradient must have the output channels");
	bool f32 = dy->dtype == ML_F32;
	size_t es = f32 ? 4 : 8;
	int64_t rows = v.cg * v.ksz, wsz = v.mg * rows;
	bool direct = v.ksz == 1 && v.insz == v.outsz && v.p[0] + v.p[1] + v.p[2] == 0 &&
		      v.s[0] * v.s[1] * v.s[2] == 1;
	/*
	 * bf16 (on AVX512_BF16, or emulated): the column GEMMs, which round
	 * their operands; where train_conv.c's kernels apply (few output
	 * channels), those, in the node's precision
	 */
	int ty = !f32 ? 0 : ml_node_bf16(c->node) && ml_bf16_train_path() != 0 &&
				    (direct || !ml_train_conv_ok(&v)) ? 2 : 1;
	if (ty == 1 && !direct && ml_train_conv_ok(&v) && getenv("ML_TRAIN_CONV_BLAS") == NULL) {
		if (gi || v.n == 0)
			memset(c->out[0]->data, 0, (size_t)ml_tval_nbytes(c->out[0]));
		if (dbt != NULL)
			memset(dbt->data, 0, (size_t)ml_tval_nbytes(dbt));
		if (v.n == 0)
			return 0;
		return ml_train_conv_grad(c, &v, ml_train_conv_mode(c->node, &v), gi, F32(dy), F32(x),
					  F32(w), F32(c->out[0]), dbt != NULL ? F32(dbt) : NULL);
	}
	int64_t per = ML_MAX(rows, v.mg) * v.outsz;
	int64_t nb = per > 0 ? ML_MAX(1, ML_MIN(v.n, COL_CHUNK / per)) : 1;
	if (per <= 0 || rows > COL_CHUNK || v.outsz > COL_CHUNK)
		nb = 1;
	int64_t colsz, dysz;
	if (!ml_mul_ok(rows * nb, v.outsz, &colsz) || !ml_mul_ok(v.mg * nb, v.outsz, &dysz))
		return ml_opfail(c, ML_EINVAL, "the column matrix is too large");
	uint8_t *col = direct ? NULL : ml_cpu_scratch(0, (size_t)colsz * es + 64);
	uint8_t *dyt = ml_cpu_scratch(1, (size_t)dysz * es + 64);
	if ((!direct && col == NULL) || dyt == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	uint8_t *out = c->out[0]->data;
	const uint8_t *dyp = dy->data, *xp = x->data, *wp = w->data;
	if (gi || v.n == 0)
		memset(out, 0, (size_t)ml_tval_nbytes(c->out[0]));
	if (dbt != NULL)
		memset(dbt->data, 0, (size_t)ml_tval_nbytes(dbt));
	for (int64_t n0 = 0; n0 < v.n; n0 += nb) {
		int64_t k = ML_MIN(nb, v.n - n0), ld = k * v.outsz;
		for (int64_t g = 0; g < v.group; g++) {
			const uint8_t *wg = wp + (size_t)(g * wsz) * es;
			bool ok = true;
			if (f32)
				gather_dy_f32(&v, (const float *)dyp, n0, k, g, (float *)dyt, ld,
					      dbt != NULL ? (float *)dbt->data : NULL);
			else
				gather_dy_f64(&v, (const double *)dyp, n0, k, g, (double *)dyt, ld,
					      dbt != NULL ? (double *)dbt->data : NULL);
			if (direct) {
				/* per image: x_n is its own [cg, outsz] column matrix */
				for (int64_t i = 0; i < k && ok; i++) {
					size_t xoff = (size_t)(((n0 + i) * v.cin + g * v.cg) * v.insz) * es;
					const uint8_t *dyi = dyt + (size_t)(i * v.outsz) * es;
					if (gi)
						ok = gemm(ty, true, false, rows, v.outsz, v.mg, wg, rows, dyi,
							  ld, 0.0, out + xoff, v.outsz);
					else
						ok = gemm(ty, false, true, v.mg, rows, v.outsz, dyi, ld,
							  xp + xoff, v.outsz, n0 + i == 0 ? 0.0 : 1.0,
							  out + (size_t)(g * wsz) * es, rows);
				}
			} else if (gi) {
				ok = gemm(ty, true, false, rows, ld, v.mg, wg, rows, dyt, ld, 0.0, col, ld);
				for (int64_t i = 0; i < k && ok; i++) {
					size_t xoff = (size_t)(((n0 + i) * v.cin + g * v.cg) * v.insz) * es;
					const uint8_t *ci = col + (size_t)(i * v.outsz) * es;
					if (f32)
						col2im_f32(&v, (const float *)ci, ld, (float *)(out + xoff));
					else
						col2im_f64(&v, (const double *)ci, ld, (double *)(out + xoff));
				}
			} else {
				for (int64_t i = 0; i < k; i++) {
					size_t xoff = (size_t)(((n0 + i) * v.cin + g * v.cg) * v.insz) * es;
					uint8_t *ci = col + (size_t)(i * v.outsz) * es;
					if (f32)
						im2col_f32(&v, (const float *)(xp + xoff), (float *)ci, ld);
					else
						im2col_f64(&v, (const double *)(xp + xoff), (double *)ci, ld);
				}
				ok = gemm(ty, false, true, v.mg, rows, ld, dyt, ld, col, ld,
					  n0 == 0 ? 0.0 : 1.0, out + (size_t)(g * wsz) * es, rows);
			}
			if (!ok)
				return ml_opfail(c, ML_ENOTSUP, "sizes do not fit BLAS");
		}
	}
	return 0;
}

/* bn_view: x as [n, ch, s]. */
static void
bn_view(const struct ml_tval *x, int64_t *n, int64_t *ch, int64_t *s)
{
	*n = x->dims[0];
	*ch = x->dims[1];
	*s = 1;
	for (int d = 2; d < x->rank; d++)
		*s *= x->dims[d];
}

static int
bn_check(struct ml_opctx *c, const struct ml_tval *x, int si, int bi)
{
	if (x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "X must have rank 2 or more");
	if (ml_tval_numel(c->in[si]) != x->dims[1] || (bi >= 0 && ml_tval_numel(c->in[bi]) !=
							x->dims[1]))
		return ml_opfail(c, ML_EINVAL, "scale and B must have the channel count");
	return 0;
}

/* batch mean and biased variance of channel k, in double */
static void
bn_stats(const struct ml_tval *x, int64_t n, int64_t ch, int64_t s, int64_t k, double *mean,
	 double *var)
{
	double sum = 0, sq = 0;
	for (int64_t i = 0; i < n; i++)
		for (int64_t j = 0; j < s; j++)
			sum += ml_get_f64(x->data, x->dtype, (i * ch + k) * s + j);
	double m = n * s > 0 ? sum / (double)(n * s) : 0;
	for (int64_t i = 0; i < n; i++)
		for (int64_t j = 0; j < s; j++) {
			double d = ml_get_f64(x->data, x->dtype, (i * ch + k) * s + j) - m;
			sq += d * d;
		}
	*mean = m;
	*var = n * s > 0 ? sq / (double)(n * s) : 0;
}

static int
run_bn_train(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *sc = c->in[1], *b = c->in[2];
	ML_TRY(bn_check(c, x, 1, 2));
	int64_t n, ch, s;
	bn_view(x, &n, &ch, &s);
	double eps = ml_attr_float(c->node, "epsilon", 1e-5);
	enum ml_dtype dt = x->dtype;
	for (int64_t k = 0; k < ch; k++) {
		double m, var;
		bn_stats(x, n, ch, s, k, &m, &var);
		double a = ml_get_f64(sc->data, dt, k) / sqrt(var + eps);
		double bb = ml_get_f64(b->data, dt, k) - m * a;
		if (dt == ML_F32) {
			const float *xp = F32(x);
			float *yp = F32(c->out[0]), af = (float)a, bf = (float)bb;
			for (int64_t i = 0; i < n; i++)
				for (int64_t j = 0; j < s; j++) {
					int64_t o = (i * ch + k) * s + j;
					yp[o] = af * xp[o] + bf;
				}
		} else {
			for (int64_t i = 0; i < n; i++)
				for (int64_t j = 0; j < s; j++) {
					int64_t o = (i * ch + k) * s + j;
					F64(c->out[0])[o] = a * F64(x)[o] + bb;
				}
		}
		if (c->n_out > 1)
			ml_set_f64(c->out[1]->data, dt, k, m);
		if (c->n_out > 2)
			ml_set_f64(c->out[2]->data, dt, k,
				   n * s > 1 ? var * (double)(n * s) / (double)(n * s - 1) : var);
	}
	return 0;
}

static int
run_bn_grad(struct ml_opctx *c)
{
	const struct ml_tval *dy = c->in[0], *x = c->in[1], *sc = c->in[2];
	ML_TRY(bn_check(c, x, 2, -1));
	ML_TRY(same_numel(c, 0, 1));
	int64_t n, ch, s;
	bn_view(x, &n, &ch, &s);
	double eps = ml_attr_float(c->node, "epsilon", 1e-5);
	enum ml_dtype dt = x->dtype;
	double cnt = (double)(n * s);
	for (int64_t k = 0; k < ch; k++) {
		double m, var, db = 0, ds = 0;
		bn_stats(x, n, ch, s, k, &m, &var);
		double is = 1 / sqrt(var + eps);
		for (int64_t i = 0; i < n; i++)
			for (int64_t j = 0; j < s; j++) {
				int64_t o = (i * ch + k) * s + j;
				double g = ml_get_f64(dy->data, dt, o);
				db += g;
				ds += g * (ml_get_f64(x->data, dt, o) - m) * is;
			}
		double a = ml_get_f64(sc->data, dt, k) * is / (cnt > 0 ? cnt : 1);
		for (int64_t i = 0; i < n; i++)
			for (int64_t j = 0; j < s; j++) {
				int64_t o = (i * ch + k) * s + j;
				double xh = (ml_get_f64(x->data, dt, o) - m) * is;
				double g = ml_get_f64(dy->data, dt, o);
				ml_set_f64(c->out[0]->data, dt, o, a * (cnt * g - db - xh * ds));
			}
		if (c->n_out > 1 && c->out[1]->data != NULL)
			ml_set_f64(c->out[1]->data, dt, k, ds);
		if (c->n_out > 2 && c->out[2]->data != NULL)
			ml_set_f64(c->out[2]->data, dt, k, db);
	}
	return 0;
}

static int
run_ln_grad(struct ml_opctx *c)
{
	const struct ml_tval *dy = c->in[0], *x = c->in[1], *sc = c->in[2];
	int ax;
	ML_TRY(same_numel(c, 0, 1));
	ML_TRY(ml_grad_ln_axis(c, x->rank, &ax));
	int64_t D = 1, R = 1;
	for (int d = 0; d < x->rank; d++)
		*(d < ax ? &R : &D) *= x->dims[d];
	if (ml_tval_numel(sc) != D)
		return ml_opfail(c, ML_EINVAL, "scale must have X's shape from axis %d", ax);
	double eps = ml_attr_float(c->node, "epsilon", 1e-5);
	enum ml_dtype dt = x->dtype;
	void *dsc = c->n_out > 1 ? c->out[1]->data : NULL, *dbp = c->n_out > 2 ? c->out[2]->data : NULL;
	for (int64_t j = 0; j < D; j++) {
		if (dsc != NULL)
			ml_set_f64(dsc, dt, j, 0);
		if (dbp != NULL)
			ml_set_f64(dbp, dt, j, 0);
	}
	for (int64_t r = 0; r < R; r++) {
		double sum = 0, sq = 0;
		for (int64_t j = 0; j < D; j++)
			sum += ml_get_f64(x->data, dt, r * D + j);
		double m = D > 0 ? sum / (double)D : 0;
		for (int64_t j = 0; j < D; j++) {
			double d = ml_get_f64(x->data, dt, r * D + j) - m;
			sq += d * d;
		}
		double is = 1 / sqrt((D > 0 ? sq / (double)D : 0) + eps), s1 = 0, s2 = 0;
		for (int64_t j = 0; j < D; j++) {
			double xh = (ml_get_f64(x->data, dt, r * D + j) - m) * is;
			double g = ml_get_f64(dy->data, dt, r * D + j);
			double gh = g * ml_get_f64(sc->data, dt, j);
			s1 += gh;
			s2 += gh * xh;
			if (dsc != NULL)
				ml_set_f64(dsc, dt, j, ml_get_f64(dsc, dt, j) + g * xh);
			if (dbp != NULL)
				ml_set_f64(dbp, dt, j, ml_get_f64(dbp, dt, j) + g);
		}
		for (int64_t j = 0; j < D; j++) {
			double xh = (ml_get_f64(x->data, dt, r * D + j) - m) * is;
			double gh = ml_get_f64(dy->data, dt, r * D + j) * ml_get_f64(sc->data, dt, j);
			ml_set_f64(c->out[0]->data, dt, r * D + j,
				   is / (double)D * ((double)D * gh - s1 - xh * s2));
		}
	}
	return 0;
}

/*
 * run_xent_grad: SoftmaxCrossEntropyGrad and NegativeLogLikelihoodGrad.
 * Scores are [N, C, D]; each (n, d) gets (softmax - onehot) w (SCE) or
 * -onehot w (NLL), where w is the loss gradient, divided by the count of
 * labels that are not ignore_index for reduction mean.
 */
static int
run_xent_grad(struct ml_opctx *c)
{
	const struct ml_tval *dl = c->in[0], *x = c->in[1], *lab = c->in[2];
	bool sce = c->node->op == ML_OP_SCE_GRAD;
	const char *red = ml_attr_str(c->node, "reduction", "mean");
	bool none = strcmp(red, "none") == 0, mean = strcmp(red, "mean") == 0;
	const struct ml_attr *iia = ml_attr_find(c->node, "ignore_index");
	int64_t ii = iia != NULL ? iia->i : INT64_MIN;
	if (x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "scores must have rank 2 or more");
	int64_t N = x->dims[0], C = x->dims[1], D = 1;
	for (int d = 2; d < x->rank; d++)
		D *= x->dims[d];
	if (ml_tval_numel(lab) != N * D)
		return ml_opfail(c, ML_EINVAL, "labels must be scores' shape without dim 1");
	if (none ? ml_tval_numel(dl) != N * D : ml_tval_numel(dl) != 1)
		return ml_opfail(c, ML_EINVAL, "the loss gradient has the wrong size");
	int64_t cnt = 0;
	for (int64_t i = 0; i < N * D; i++) {
		int64_t t = ml_get_i64(lab->data, lab->dtype, i);
		if (t == ii)
			continue;
		if (t < 0 || t >= C)
			return ml_opfail(c, ML_EINVAL, "label %lld is out of range [0, %lld)",
					 (long long)t, (long long)C);
		cnt++;
	}
	double w0 = none ? 0 : ml_get_f64(dl->data, dl->dtype, 0) / (mean ? (double)ML_MAX(cnt, 1) : 1);
	bool f32 = x->dtype == ML_F32;
	for (int64_t n = 0; n < N; n++)
		for (int64_t d = 0; d < D; d++) {
			int64_t t = ml_get_i64(lab->data, lab->dtype, n * D + d);
			double w = none ? ml_get_f64(dl->data, dl->dtype, n * D + d) : w0;
			if (t == ii)
				w = 0;
			int64_t base = n * C * D + d;
			if (f32 && D == 1) {
				const float *xr = F32(x) + base;
				float *gr = F32(c->out[0]) + base;
				if (sce) {
					float m = xr[0], s = 0;
					for (int64_t k = 1; k < C; k++)
						m = xr[k] > m ? xr[k] : m;
					for (int64_t k = 0; k < C; k++)
						s += (gr[k] = expf(xr[k] - m));
					float f = (float)w / s;
					for (int64_t k = 0; k < C; k++)
						gr[k] *= f;
				} else {
					for (int64_t k = 0; k < C; k++)
						gr[k] = 0;
				}
				if (t != ii)
					gr[t] -= (float)w;
				continue;
			}
			double m = -INFINITY, s = 0;
			if (sce) {
				for (int64_t k = 0; k < C; k++)
					m = fmax(m, ml_get_f64(x->data, x->dtype, base + k * D));
				for (int64_t k = 0; k < C; k++)
					s += exp(ml_get_f64(x->data, x->dtype, base + k * D) - m);
			}
			for (int64_t k = 0; k < C; k++) {
				double p = sce ? exp(ml_get_f64(x->data, x->dtype, base + k * D) - m) / s : 0;
				double g = (p - (k == t ? 1 : 0)) * w;
				ml_set_f64(c->out[0]->data, x->dtype, base + k * D, g);
			}
		}
	return 0;
}

static int
run_bce(struct ml_opctx *c)
{
	bool grad = c->node->op == ML_OP_BCE_LOGITS_GRAD;
	const struct ml_tval *x = c->in[grad ? 1 : 0], *t = c->in[grad ? 2 : 1];
	if (ml_tval_numel(x) != ml_tval_numel(t))
		return ml_opfail(c, ML_EINVAL, "logits and targets differ in size");
	int64_t n = ml_tval_numel(x);
	enum ml_dtype dt = x->dtype;
	double w = grad ? ml_get_f64(c->in[0]->data, dt, 0) / (double)ML_MAX(n, 1) : 0, sum = 0;
	for (int64_t i = 0; i < n; i++) {
		double xv = ml_get_f64(x->data, dt, i), tv = ml_get_f64(t->data, dt, i);
		if (grad)
			ml_set_f64(c->out[0]->data, dt, i, (1 / (1 + exp(-xv)) - tv) * w);
		else
			sum += fmax(xv, 0) - xv * tv + log1p(exp(-fabs(xv)));
	}
	if (!grad)
		ml_set_f64(c->out[0]->data, dt, 0, n > 0 ? sum / (double)n : 0);
	return 0;
}

static int
run_dropout(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *r = c->in[1];
	double p = ml_attr_float(c->node, "ratio", 0.5);
	uint64_t key = ml_mix64((uint64_t)ml_get_i64(r->data, r->dtype, 0)) ^
		       ml_mix64(ml_mix64((uint64_t)ml_get_i64(r->data, r->dtype, 1))) ^
		       ml_mix64(0x5851f42d4c957f2dull * (uint64_t)(ml_attr_int(c->node, "stream", 0) + 1));
	int64_t n = ml_tval_numel(x);
	double keep = 1 / (1 - p);
	uint64_t thr = (uint64_t)(p * 18446744073709551616.0);
	if (p <= 0)
		thr = 0;
	enum ml_dtype dt = x->dtype;
	for (int64_t i = 0; i < n; i++) {
		double m = ml_mix64(key + (uint64_t)i) >= thr ? keep : 0;
		if (c->n_out > 1)
			ml_set_f64(c->out[1]->data, dt, i, m);
		ml_set_f64(c->out[0]->data, dt, i, m * ml_get_f64(x->data, dt, i));
	}
	return 0;
}

const struct ml_cpu_kernel ml_cpu_grad[] = {
	{ ML_OP_ASSIGN, run_assign },
	{ ML_OP_EMA_UPDATE, run_ema },
	{ ML_OP_SGD_UPDATE, run_sgd },
	{ ML_OP_ADAM_UPDATE, run_adam },
	{ ML_OP_ALL_FINITE, run_all_finite },
	{ ML_OP_RELU_GRAD, run_relu_grad },
	{ ML_OP_UNARY_GRAD, run_unary_grad },
	{ ML_OP_MAXPOOL_GRAD, run_pool_grad },
	{ ML_OP_AVGPOOL_GRAD, run_pool_grad },
	{ ML_OP_CONV_GRAD_INPUT, run_conv_grad },
	{ ML_OP_CONV_GRAD_FILTER, run_conv_grad },
	{ ML_OP_BN_TRAINING, run_bn_train },
	{ ML_OP_BN_TRAINING_GRAD, run_bn_grad },
	{ ML_OP_LN_GRAD, run_ln_grad },
	{ ML_OP_SCE_GRAD, run_xent_grad },
	{ ML_OP_NLL_GRAD, run_xent_grad },
	{ ML_OP_BCE_LOGITS, run_bce },
	{ ML_OP_BCE_LOGITS_GRAD, run_bce },
	{ ML_OP_DROPOUT_TRAINING, run_dropout },
	{ ML_OP_TRAIN_GEMM, run_train_gemm },
	{ ML_OP_GEMM_SGD_UPDATE, run_gemm_sgd },
	{ .op = ML_OP_NONE },
};
