/*
 * train.c: CPU kernels of the train family (Adagrad, Momentum, Adam) for
 * f32 and f64. The scalar factors (learning rate after decay or bias
 * correction) are computed once in double; the loop over each tensor is
 * one pass that reads X, G and the state and writes the new X and state,
 * element by element, so outputs may share memory with their inputs.
 */
#if defined(__GNUC__) && !defined(__clang__)
/* See lib/cpu/reduce.c: lets the loops below vectorise. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include "cpu/elem.h"
#include "ops/train.h"

/* struct tjob: one tensor's update: its arrays and the op's factors. */
struct tjob {
	const void *x, *g, *s1, *s2;	/* s1: H (Adagrad) or V; s2: H of Adam */
	void *xo, *s1o, *s2o;
	double lr, nc, ncp, alpha, beta, eps;
	bool nesterov;
};

#define DEF_TRAIN(SUF, T, SQRT)							\
static void									\
adagrad_##SUF(void *ctx, int64_t b, int64_t e)					\
{										\
	const struct tjob *j = ctx;						\
	const T *x = j->x, *g = j->g, *h = j->s1;				\
	T *xo = j->xo, *ho = j->s1o;						\
	const T lr = (T)j->lr, nc = (T)j->nc, eps = (T)j->eps;			\
	for (int64_t i = b; i < e; i++) {					\
		T gr = nc * x[i] + g[i];					\
		T hn = h[i] + gr * gr;						\
		T xn = x[i] - lr * gr / (SQRT(hn) + eps);			\
		ho[i] = hn;							\
		xo[i] = xn;							\
	}									\
}										\
										\
static void									\
momentum_##SUF(void *ctx, int64_t b, int64_t e)					\
{										\
	const struct tjob *j = ctx;						\
	const T *x = j->x, *g = j->g, *v = j->s1;				\
	T *xo = j->xo, *vo = j->s1o;						\
	const T lr = (T)j->lr, nc = (T)j->nc, al = (T)j->alpha, be = (T)j->beta; \
	if (j->nesterov) {							\
		for (int64_t i = b; i < e; i++) {				\
			T gr = nc * x[i] + g[i];				\
			T vn = al * v[i] + be * gr;				\
			T xn = x[i] - lr * (gr + al * vn);			\
			vo[i] = vn;						\
			xo[i] = xn;						\
		}								\
	} else {								\
		for (int64_t i = b; i < e; i++) {				\
			T gr = nc * x[i] + g[i];				\
			T vn = al * v[i] + be * gr;				\
			T xn = x[i] - lr * vn;					\
			vo[i] = vn;						\
			xo[i] = xn;						\
		}								\
	}									\
}										\
										\
static void									\
adam_##SUF(void *ctx, int64_t b, int64_t e)					\
{										\
	const struct tjob *j = ctx;						\
	const T *x = j->x, *g = j->g, *v = j->s1, *h = j->s2;			\
	T *xo = j->xo, *vo = j->s1o, *ho = j->s2o;				\
	const T lr = (T)j->lr, nc = (T)j->nc, eps = (T)j->eps;			\
	const T al = (T)j->alpha, be = (T)j->beta;				\
	const T al1 = (T)(1 - j->alpha), be1 = (T)(1 - j->beta);		\
	const T post = (T)(1 - j->ncp);						\
	for (int64_t i = b; i < e; i++) {					\
		T gr = nc * x[i] + g[i];					\
		T vn = al * v[i] + al1 * gr;					\
		T hn = be * h[i] + be1 * (gr * gr);				\
		T xn = post * (x[i] - lr * (vn / (SQRT(hn) + eps)));		\
		vo[i] = vn;							\
		ho[i] = hn;							\
		xo[i] = xn;							\
	}									\
}

DEF_TRAIN(f32, float, sqrtf)
DEF_TRAIN(f64, double, sqrt)

static int
run_train(struct ml_opctx *c)
{
	struct ml_train_attrs a;
	struct tjob j = { 0 };

	ML_TRY(ml_train_attrs(c, &a));
	const struct ml_tval *r = c->in[0], *t = c->in[1];
	if (ml_tval_numel(r) != 1 || ml_tval_numel(t) != 1)
		return ml_opfail(c, ML_EINVAL, "R and T must be scalars");
	double lr = ml_get_f64(r->data, r->dtype, 0);
	int64_t step = ml_get_i64(t->data, t->dtype, 0);
	enum ml_dtype dt = c->in[2]->dtype;
	bool f32 = dt == ML_F32;
	if (!f32 && dt != ML_F64)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(dt));

	void (*fn)(void *, int64_t, int64_t);
	j.nc = a.norm_coefficient;
	j.eps = a.epsilon;
	j.alpha = a.alpha;
	j.nesterov = a.nesterov;
	switch (c->node->op) {
	case ML_OP_ADAGRAD:
		j.lr = lr / (1 + (double)step * a.decay_factor);
		fn = f32 ? adagrad_f32 : adagrad_f64;
		break;
	case ML_OP_MOMENTUM:
		/* the first step takes the whole gradient */
		j.lr = lr;
		j.beta = step > 0 ? a.beta : 1;
		fn = f32 ? momentum_f32 : momentum_f64;
		break;
	default:
		/* Adam's bias correction applies from the first counted step on */
		j.lr = step > 0 ? lr * sqrt(1 - pow(a.beta, (double)step)) /
				  (1 - pow(a.alpha, (double)step)) : lr;
		j.beta = a.beta;
		j.ncp = a.norm_coefficient_post;
		fn = f32 ? adam_f32 : adam_f64;
		break;
	}
	int n = a.groups;
	for (int i = 0; i < n; i++) {
		const struct ml_tval *x = c->in[2 + i];
		int64_t k = ml_tval_numel(x);
		/* the executor does not check inputs against each other */
		for (int s = 1; s < a.per_in; s++)
			if (ml_tval_numel(c->in[2 + s * n + i]) != k ||
			    c->in[2 + s * n + i]->dtype != dt)
				return ml_opfail(c, ML_EINVAL, "input %d does not match X_%d",
						 2 + s * n + i, i + 1);
		j.x = x->data;
		j.g = c->in[2 + n + i]->data;
		j.s1 = c->in[2 + 2 * n + i]->data;
		j.s2 = a.per_in > 3 ? c->in[2 + 3 * n + i]->data : NULL;
		j.xo = c->out[i]->data;
		j.s1o = c->out[n + i]->data;
		j.s2o = a.per_out > 2 ? c->out[2 * n + i]->data : NULL;
		if (k > 0)
			ml_parallel_for(k, ML_GRAIN, fn, &j);
	}
	return 0;
}

const struct ml_cpu_kernel ml_cpu_train[] = {
	{ ML_OP_ADAGRAD, run_train },
	{ ML_OP_MOMENTUM, run_train },
	{ ML_OP_ADAM, run_train },
	{ .op = ML_OP_NONE },
};
