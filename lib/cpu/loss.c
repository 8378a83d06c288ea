/*
 * loss.c: CPU kernels of the loss family: NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss, for f32 and f64 (f16 and bf16 run as f32).
 *
 * Scores are seen as [N, C, D] with D the product of the trailing dims.
 * Work is split into units of one n and a block of up to DBLOCK columns d;
 * each unit computes its log-sum-exp (SoftmaxCrossEntropyLoss), writes its
 * log_prob and per-element losses, and leaves its partial loss and weight
 * sums in part[], which are added in unit order afterwards, so a reduced
 * loss is the same for any thread count.
 */
#if defined(__GNUC__) && !defined(__clang__)
/* See lib/cpu/reduce.c: lets the lane loops below vectorise. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include "cpu/elem.h"
#include "cpu/fastmath.h"
#include "ops/loss.h"

#define DBLOCK 256
#define LANES 8

struct ljob {
	const void *x, *lab, *w;
	void *loss, *lp;
	enum ml_dtype lt;
	int64_t N, C, D, nb;
	int64_t ii;
	bool has_ii, sce, none;
	double *part;
	int bad;
	int64_t bad_label;
};

static inline int64_t
label_at(const struct ljob *j, int64_t i)
{
	return j->lt == ML_I64 ? ((const int64_t *)j->lab)[i] : ((const int32_t *)j->lab)[i];
}

static void
mark_bad(struct ljob *j, int64_t t)
{
	__atomic_store_n(&j->bad_label, t, __ATOMIC_RELAXED);
	__atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
}

/*
 * DEF_LOSS: the unit loop for element type T, with EXP the vectorisable
 * exponential and LOG the logarithm of that type.
 */
#define DEF_LOSS(SUF, T, EXP, LOG)						\
static void									\
lse_row_##SUF(const T *x, int64_t C, T *lp, T *lse)				\
{										\
	T l[LANES], m;								\
	int64_t c = 0;								\
	for (int k = 0; k < LANES; k++)						\
		l[k] = -INFINITY;						\
	for (; c + LANES <= C; c += LANES)					\
		for (int k = 0; k < LANES; k++)					\
			l[k] = x[c + k] > l[k] ? x[c + k] : l[k];		\
	m = -INFINITY;								\
	for (int k = 0; k < LANES; k++)						\
		m = l[k] > m ? l[k] : m;					\
	for (; c < C; c++)							\
		m = x[c] > m ? x[c] : m;					\
	/* an all -inf row keeps its -inf (a NaN makes everything NaN anyway) */ \
	T ms = isfinite(m) ? m : 0;						\
	for (int k = 0; k < LANES; k++)						\
		l[k] = 0;							\
	for (c = 0; c + LANES <= C; c += LANES)					\
		for (int k = 0; k < LANES; k++)					\
			l[k] += EXP(x[c + k] - ms);				\
	T s = 0;								\
	for (int k = 0; k < LANES; k++)						\
		s += l[k];							\
	for (; c < C; c++)							\
		s += EXP(x[c] - ms);						\
	T v = ms + LOG(s);							\
	*lse = v;								\
	if (lp != NULL)								\
		for (c = 0; c < C; c++)						\
			lp[c] = x[c] - v;					\
}										\
										\
static void									\
lse_cols_##SUF(const T *x, int64_t C, int64_t D, int64_t nd, T *lp, T *lse)	\
{										\
	T m[DBLOCK], s[DBLOCK];							\
	for (int64_t k = 0; k < nd; k++) {					\
		m[k] = -INFINITY;						\
		s[k] = 0;							\
	}									\
	for (int64_t c = 0; c < C; c++) {					\
		const T *xc = x + c * D;					\
		for (int64_t k = 0; k < nd; k++)				\
			m[k] = xc[k] > m[k] ? xc[k] : m[k];			\
	}									\
	for (int64_t k = 0; k < nd; k++)					\
		m[k] = isfinite(m[k]) ? m[k] : 0;				\
	for (int64_t c = 0; c < C; c++) {					\
		const T *xc = x + c * D;					\
		for (int64_t k = 0; k < nd; k++)				\
			s[k] += EXP(xc[k] - m[k]);				\
	}									\
	for (int64_t k = 0; k < nd; k++)					\
		lse[k] = m[k] + LOG(s[k]);					\
	if (lp != NULL)								\
		for (int64_t c = 0; c < C; c++)					\
			for (int64_t k = 0; k < nd; k++)			\
				lp[c * D + k] = x[c * D + k] - lse[k];		\
}										\
										\
static void									\
loss_chunk_##SUF(void *ctx, int64_t b, int64_t e)				\
{										\
	struct ljob *j = ctx;							\
	const T *x = j->x, *w = j->w;						\
	T *lo = j->loss, *lp = j->lp;						\
	const int64_t C = j->C, D = j->D;					\
	T lse[DBLOCK];								\
										\
	for (int64_t u = b; u < e; u++) {					\
		int64_t n = u / j->nb, d0 = (u % j->nb) * DBLOCK;		\
		int64_t nd = ML_MIN(D - d0, DBLOCK);				\
		const T *xn = x + n * C * D;					\
		if (j->sce) {							\
			T *lpn = lp != NULL ? lp + n * C * D + d0 : NULL;	\
			if (D == 1)						\
				lse_row_##SUF(xn, C, lpn, lse);			\
			else							\
				lse_cols_##SUF(xn + d0, C, D, nd, lpn, lse);	\
		}								\
		double ls = 0, ws = 0;						\
		for (int64_t k = 0; k < nd; k++) {				\
			int64_t d = d0 + k, i = n * D + d;			\
			int64_t t = label_at(j, i);				\
			T val = 0, wt = 0;					\
			if (j->has_ii && t == j->ii) {				\
				/* ignored: no loss, no weight */		\
			} else if (t < 0 || t >= C) {				\
				mark_bad(j, t);					\
			} else {						\
				T xv = xn[t * D + d];				\
				if (j->sce)					\
					xv -= lse[k];				\
				wt = w != NULL ? w[t] : 1;			\
				val = -xv * wt;					\
			}							\
			if (j->none) {						\
				lo[i] = val;					\
			} else {						\
				ls += val;					\
				ws += wt;					\
			}							\
		}								\
		if (!j->none) {							\
			j->part[2 * u] = ls;					\
			j->part[2 * u + 1] = ws;				\
		}								\
	}									\
}

DEF_LOSS(f32, float, ml_expf, logf)
DEF_LOSS(f64, double, exp, log)

static int
run_loss(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *t = c->in[1], *w = ML_IN(c, 2);
	struct ml_tval *y = c->out[0];
	struct ljob j = { 0 };
	enum ml_loss_red red;
	int rc = 0;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_loss);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported",
				 ml_dtype_name(x->dtype));
	if ((t->dtype != ML_I32 && t->dtype != ML_I64) || (w != NULL && w->dtype != x->dtype))
		return ml_opfail(c, ML_EINVAL, "target or weight has the wrong dtype");
	ML_TRY(ml_loss_reduction(c, &red));
	j.N = x->dims[0];
	j.C = x->dims[1];
	j.D = 1;
	for (int d = 2; d < x->rank; d++)
		j.D *= x->dims[d];
	if (w != NULL && ml_tval_numel(w) != j.C)
		return ml_opfail(c, ML_EINVAL, "weight has %lld values for %lld classes",
				 (long long)ml_tval_numel(w), (long long)j.C);
	if (ml_tval_numel(t) != j.N * j.D)
		return ml_opfail(c, ML_EINVAL, "target does not match the scores' shape");
	j.x = x->data;
	j.lab = t->data;
	j.lt = t->dtype;
	j.w = w != NULL ? w->data : NULL;
	j.loss = y->data;
	j.lp = c->n_out > 1 && c->out[1] != NULL ? c->out[1]->data : NULL;
	j.sce = c->node->op == ML_OP_SCE_LOSS;
	j.none = red == ML_RED_NONE;
	j.has_ii = ml_attr_find(c->node, "ignore_index") != NULL;
	j.ii = ml_attr_int(c->node, "ignore_index", 0);
	j.nb = (j.D + DBLOCK - 1) / DBLOCK;
	int64_t units = j.N * j.nb;
	if (j.C == 0 && units > 0)
		return ml_opfail(c, ML_EINVAL, "scores have no classes");
	if (!j.none && units > 0) {
		j.part = ml_malloc(sizeof(double) * 2 * (size_t)units);
		if (j.part == NULL)
			return ml_opfail(c, ML_ENOMEM, "out of memory");
	}
	int64_t work = j.C * ML_MIN(j.D, DBLOCK) * (j.sce ? 4 : 1);
	ml_parallel_for(units, ML_MAX(1, ML_GRAIN / ML_MAX(work, 1)),
			x->dtype == ML_F32 ? loss_chunk_f32 : loss_chunk_f64, &j);
	if (j.bad) {
		rc = ml_opfail(c, ML_EINVAL, "target %lld is out of range [0, %lld)",
			       (long long)j.bad_label, (long long)j.C);
		goto out;
	}
	if (!j.none) {
		double ls = 0, ws = 0;
		for (int64_t u = 0; u < units; u++) {
			ls += j.part[2 * u];
			ws += j.part[2 * u + 1];
		}
		/* a mean over no counted element is 0/0, NaN, as in ONNX's reference */
		double v = red == ML_RED_MEAN ? ls / ws : ls;
		ml_set_f64(y->data, y->dtype, 0, v);
	}
out:
	ml_free(j.part);
	return rc;
}

const struct ml_cpu_kernel ml_cpu_loss[] = {
	{ ML_OP_NLL_LOSS, run_loss },
	{ ML_OP_SCE_LOSS, run_loss },
	{ .op = ML_OP_NONE },
};
