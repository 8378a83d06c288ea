/*
 * nn_norm.c: CPU kernels of the normalisations: BatchNormalization
 * (inference and training mode), InstanceNormalization,
 * LayerNormalization, GroupNormalization, LRN, LpNormalization and
 * MeanVarianceNormalization. Each is written once over a type T for f32
 * and f64, with statistics in double; f16 and bf16 run as f32. Work splits
 * with ml_parallel_for over the independent rows or planes.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include "cpu/elem.h"
#include "cpu/nn.h"

/* Elements per ml_parallel_for chunk. */
#define NORM_GRAIN 32768

static int
unsupported(struct ml_opctx *c, enum ml_dtype t)
{
	return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(t));
}

static int64_t
grain_for(int64_t per_item)
{
	return ML_MAX(1, NORM_GRAIN / ML_MAX(per_item, 1));
}

/* get_vec: n values of t (any numeric dtype) as doubles into a new array, NULL on ENOMEM. */
static double *
get_vec(const struct ml_tval *t, int64_t n)
{
	double *v = ml_malloc(sizeof(double) * (size_t)ML_MAX(n, 1));

	if (v != NULL)
		for (int64_t i = 0; i < n; i++)
			v[i] = ml_get_f64(t->data, t->dtype, i);
	return v;
}

/*
 * Affine planes: y = x * a[ch] + b[ch] over planes of sz elements, ch
 * being the plane index modulo nch. BatchNormalization in inference mode
 * reduces to this once a and b fold in the statistics.
 */
struct affine_job {
	const void *x;
	void *y;
	const double *a, *b;
	int64_t sz, nch;
};

#define AFFINE(SUF, T)								\
static void									\
affine_##SUF(void *ctx, int64_t b0, int64_t e)					\
{										\
	const struct affine_job *j = ctx;					\
	for (int64_t pl = b0; pl < e; pl++) {					\
		const T *x = (const T *)j->x + pl * j->sz;			\
		T *y = (T *)j->y + pl * j->sz;					\
		T a = (T)j->a[pl % j->nch], b = (T)j->b[pl % j->nch];		\
		for (int64_t i = 0; i < j->sz; i++)				\
			y[i] = x[i] * a + b;					\
	}									\
}
AFFINE(f32, float)
AFFINE(f64, double)

/*
 * sum8: the sum of n values of p (float or double), and with m given the
 * sum of their squared differences from m, in 8 partial sums of doubles:
 * one running sum would make each add wait for the previous one, 4 cycles
 * an element (a row of 64 in an encoder's LayerNorm took 0.2 us so).
 */
#define SUM8(SUF, T)								\
static inline __attribute__((always_inline)) double				\
sum8_##SUF(const T *p, int64_t n, double m, bool sq)			\
{										\
	double a[8] = { 0 };							\
	int64_t i = 0;								\
	for (; i + 8 <= n; i += 8)						\
		for (int u = 0; u < 8; u++) {					\
			double d = (double)p[i + u] - m;			\
			a[u] += sq ? d * d : d;					\
		}								\
	for (; i < n; i++) {							\
		double d = (double)p[i] - m;					\
		a[0] += sq ? d * d : d;						\
	}									\
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); \
}
SUM8(f32, float)
SUM8(f64, double)

/* plane_stats: the mean and (biased) variance of n values of dtype t. */
static inline __attribute__((always_inline)) void
plane_stats(const void *x, enum ml_dtype t, int64_t n, double *mean, double *var)
{
	if (n <= 0) {
		*mean = *var = 0;
		return;
	}
	double m = (t == ML_F32 ? sum8_f32(x, n, 0, false) : sum8_f64(x, n, 0, false)) / (double)n;
	double q = t == ML_F32 ? sum8_f32(x, n, m, true) : sum8_f64(x, n, m, true);
	*mean = m;
	*var = q / (double)n;
}

static void
run_affine(const struct ml_tval *x, struct ml_tval *y, const double *a, const double *b,
	   int64_t planes, int64_t sz, int64_t nch)
{
	struct affine_job j = { x->data, y->data, a, b, sz, nch };

	ml_parallel_for(planes, grain_for(sz), x->dtype == ML_F32 ? affine_f32 : affine_f64, &j);
}

/*
 * The per-channel scale and shift of an inference BatchNormalization whose
 * four parameters are stored tensors, kept in the node's cache: computing
 * them reads 4 * ch values through ml_get_f64 and takes ch square roots,
 * which cost more than the affine pass itself on DenseNet's small maps
 * (1024 channels of 2x2). The values are those of the path without a
 * cache (doubles, rounded to float as affine_f32 rounds them).
 */
struct bn_cache {
	const void *src[4];
	int64_t ch;
	double eps;
	float *a, *b;
};

struct faffine_job {
	const float *x;
	float *y;
	const float *a, *b;
	int64_t sz, nch;
};

static void
faffine_f32(void *ctx, int64_t b0, int64_t e)
{
	const struct faffine_job *j = ctx;
	for (int64_t pl = b0; pl < e; pl++) {
		const float *x = j->x + pl * j->sz;
		float *y = j->y + pl * j->sz;
		float a = j->a[pl % j->nch], b = j->b[pl % j->nch];
		for (int64_t i = 0; i < j->sz; i++)
			y[i] = x[i] * a + b;
	}
}

/* bn_cached: the cached scale and shift of node c, made when absent or stale; NULL when none may be kept */
static const struct bn_cache *
bn_cached(struct ml_opctx *c, int64_t ch, double eps)
{
	if (c->cache == NULL || c->g == NULL || c->n_in < 5)
		return NULL;
	for (int i = 1; i < 5; i++) {
		int t = c->node->in[i];
		/* the graph's own data, not a converted copy (ml_cpu_as_f32) */
		if (t < 0 || t >= c->g->n_tensors || (c->g->tensors[t]->kind != ML_TK_CONST &&
						     c->g->tensors[t]->kind != ML_TK_PARAM) ||
		    c->g->tensors[t]->data != c->in[i]->data)
			return NULL;
	}
	struct bn_cache *h = *c->cache;
	if (h != NULL && h->ch < 0)
		return NULL;	/* a node of the graph writes a parameter (EMA_UPDATE) */
	if (h != NULL && h->ch == ch && h->eps == eps && h->src[0] == c->in[1]->data &&
	    h->src[1] == c->in[2]->data && h->src[2] == c->in[3]->data &&
	    h->src[3] == c->in[4]->data)
		return h;
	ml_free(h);
	*c->cache = NULL;
	if ((h = ml_malloc(sizeof *h + sizeof(float) * 2 * (size_t)ML_MAX(ch, 1))) == NULL)
		return NULL;
	h->a = (float *)(h + 1);
	h->b = h->a + ch;
	*c->cache = h;
	for (int i = 0; i < c->g->n_nodes; i++) {
		const struct ml_node *w = &c->g->nodes[i];
		if ((ml_op_flags(w->op) & ML_OPF_SIDE_EFFECT) == 0 || w->n_in < 1)
			continue;
		for (int k = 1; k < 5; k++)
			if (w->in[0] == c->node->in[k]) {
				h->ch = -1;
				return NULL;
			}
	}
	for (int i = 0; i < 4; i++)
		h->src[i] = c->in[i + 1]->data;
	h->ch = ch;
	h->eps = eps;
	for (int64_t k = 0; k < ch; k++) {
		double sc = ml_get_f64(c->in[1]->data, c->in[1]->dtype, k);
		double bi = ml_get_f64(c->in[2]->data, c->in[2]->dtype, k);
		double m = ml_get_f64(c->in[3]->data, c->in[3]->dtype, k);
		double v = ml_get_f64(c->in[4]->data, c->in[4]->dtype, k);
		double a = sc / sqrt(v + eps);
		h->a[k] = (float)a;
		h->b[k] = (float)(bi - m * a);
	}
	return h;
}

/*
 * BatchNormalization. Inference: y = (x - mean) / sqrt(var + eps) * scale
 * + B with the given statistics. Training mode uses the batch's own mean
 * and (biased) variance, and outputs the running statistics updated with
 * momentum (and, before opset 14, the batch's statistics too).
 */
int
ml_cpu_batchnorm(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	double eps = ml_attr_float(c->node, "epsilon", 1e-5);
	double mom = ml_attr_float(c->node, "momentum", 0.9);
	int64_t n = x->dims[0], ch = x->rank > 1 ? x->dims[1] : 1;
	int64_t sz = n * ch > 0 ? ml_tval_numel(x) / (n * ch) : 0;
	bool train = c->opset >= 14 ? ml_attr_int(c->node, "training_mode", 0) != 0 : c->n_out > 1;
	double *p[5] = { NULL }, *a = NULL, *b = NULL, *bm = NULL, *bv = NULL;
	int rc = 0;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_batchnorm);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return unsupported(c, x->dtype);
	for (int i = 1; i < 5; i++)
		if (ml_tval_numel(c->in[i]) != ch)
			return ml_opfail(c, ML_EINVAL, "input %d must have %lld values", i,
					 (long long)ch);
	if (!train && c->n_out == 1 && x->dtype == ML_F32) {
		const struct bn_cache *h = bn_cached(c, ch, eps);
		if (h != NULL) {
			struct faffine_job j = { x->data, c->out[0]->data, h->a, h->b, sz, ch };
			ml_parallel_for(n * ch, grain_for(sz), faffine_f32, &j);
			return 0;
		}
	}
	a = ml_malloc(sizeof(double) * (size_t)ML_MAX(ch, 1) * 4);
	for (int i = 1; i < 5; i++)
		p[i] = get_vec(c->in[i], ch);
	if (a == NULL || p[1] == NULL || p[2] == NULL || p[3] == NULL || p[4] == NULL) {
		rc = ml_opfail(c, ML_ENOMEM, "out of memory");
		goto out;
	}
	b = a + ch;
	bm = b + ch;
	bv = bm + ch;
	for (int64_t k = 0; k < ch; k++) {
		bm[k] = p[3][k];
		bv[k] = p[4][k];
	}
	if (train) {
		/* the batch statistics of channel k, over every image's plane k */
		size_t es = ml_dtype_size(x->dtype);
		for (int64_t k = 0; k < ch; k++) {
			double s = 0, q = 0, m, v;
			for (int64_t i = 0; i < n; i++) {
				plane_stats((const char *)x->data + (size_t)((i * ch + k) * sz) * es,
					    x->dtype, sz, &m, &v);
				s += m;
				q += v + m * m;
			}
			bm[k] = n > 0 ? s / (double)n : 0;
			bv[k] = n > 0 ? q / (double)n - bm[k] * bm[k] : 0;
			if (bv[k] < 0)
				bv[k] = 0;
		}
	}
	for (int64_t k = 0; k < ch; k++) {
		a[k] = p[1][k] / sqrt(bv[k] + eps);
		b[k] = p[2][k] - bm[k] * a[k];
	}
	run_affine(x, c->out[0], a, b, n * ch, sz, ch);
	for (int j = 1; j < c->n_out && j < 5; j++) {
		struct ml_tval *o = c->out[j];
		for (int64_t k = 0; k < ch && ml_tval_numel(o) == ch; k++) {
			double v;
			if (j == 1)
				v = train ? p[3][k] * mom + bm[k] * (1 - mom) : p[3][k];
			else if (j == 2)
				v = train ? p[4][k] * mom + bv[k] * (1 - mom) : p[4][k];
			else
				v = j == 3 ? bm[k] : bv[k];
			ml_set_f64(o->data, o->dtype, k, v);
		}
	}
out:
	ml_free(a);
	for (int i = 1; i < 5; i++)
		ml_free(p[i]);
	return rc;
}

/*
 * Row normalisation shared by InstanceNormalization, LayerNormalization
 * and GroupNormalization: each row of len elements is normalised by its
 * own mean and variance, then scaled and shifted. The scale and shift
 * come from sc/sh: element i of row r uses index (r % rmod) * rstep + i /
 * div, so one layout serves per-row, per-channel and per-element
 * parameters.
 */
struct rows_job {
	const void *x;
	void *y;
	int64_t len;
	double eps;
	const double *sc, *sh;	/* per-parameter doubles; sh may be NULL */
	int64_t rmod, rstep, div;
	double *mean, *inv;	/* per-row statistics out, or NULL */
};

#define ROWS(SUF, T)								\
static void									\
rows_##SUF(void *ctx, int64_t b0, int64_t e)					\
{										\
	const struct rows_job *j = ctx;						\
	for (int64_t r = b0; r < e; r++) {					\
		const T *x = (const T *)j->x + r * j->len;			\
		T *y = (T *)j->y + r * j->len;					\
		double m, v;							\
		plane_stats(x, sizeof(T) == 4 ? ML_F32 : ML_F64, j->len, &m, &v); \
		double inv = 1 / sqrt(v + j->eps);				\
		if (j->mean != NULL) {						\
			j->mean[r] = m;						\
			j->inv[r] = inv;					\
		}								\
		const double *sc = j->sc + (r % j->rmod) * j->rstep;		\
		const double *sh = j->sh != NULL ? j->sh + (r % j->rmod) * j->rstep : NULL; \
		if (j->div == 1) {						\
			for (int64_t i = 0; i < j->len; i++)			\
				y[i] = (T)((x[i] - m) * inv * sc[i] + (sh != NULL ? sh[i] : 0)); \
		} else {							\
			for (int64_t i = 0; i < j->len; i++) {			\
				int64_t q = i / j->div;				\
				y[i] = (T)((x[i] - m) * inv * sc[q] + (sh != NULL ? sh[q] : 0)); \
			}							\
		}								\
	}									\
}
ROWS(f32, float)
ROWS(f64, double)

static void
run_rows(const struct ml_tval *x, struct rows_job *j, int64_t rows)
{
	ml_parallel_for(rows, grain_for(j->len * 2), x->dtype == ML_F32 ? rows_f32 : rows_f64, j);
}

/* InstanceNormalization: one row per [n, c] plane, per-channel parameters. */
int
ml_cpu_instnorm(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	int64_t n = x->dims[0], ch = x->dims[1];
	int64_t sz = n * ch > 0 ? ml_tval_numel(x) / (n * ch) : 0;
	int rc = 0;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_instnorm);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return unsupported(c, x->dtype);
	if (ml_tval_numel(c->in[1]) != ch || ml_tval_numel(c->in[2]) != ch)
		return ml_opfail(c, ML_EINVAL, "scale and B must have %lld values", (long long)ch);
	double *sc = get_vec(c->in[1], ch), *sh = get_vec(c->in[2], ch);
	if (sc == NULL || sh == NULL) {
		rc = ml_opfail(c, ML_ENOMEM, "out of memory");
		goto out;
	}
	struct rows_job j = { x->data, c->out[0]->data, sz, ml_attr_float(c->node, "epsilon", 1e-5),
			      sc, sh, ch, 1, ML_MAX(sz, 1), NULL, NULL };
	run_rows(x, &j, n * ch);
out:
	ml_free(sc);
	ml_free(sh);
	return rc;
}

/*
 * expand: t's values broadcast (numpy, right-aligned) to the r dims in
 * dims, as a new array of doubles; NULL on ENOMEM.
 */
static double *
expand(const struct ml_tval *t, int r, const int64_t *dims, int64_t total)
{
	struct ml_tval shp = { .rank = r };
	int64_t st[ML_MAX_RANK];
	double *v = ml_malloc(sizeof(double) * (size_t)ML_MAX(total, 1));

	if (v == NULL)
		return NULL;
	memcpy(shp.dims, dims, sizeof(int64_t) * (size_t)r);
	ml_bcast_strides(t, &shp, st);
	for (int64_t i = 0; i < total; i++) {
		int64_t rem = i, src = 0;
		for (int d = r - 1; d >= 0; d--) {
			src += rem % dims[d] * st[d];
			rem /= dims[d];
		}
		v[i] = ml_get_f64(t->data, t->dtype, src);
	}
	return v;
}

/*
 * The LayerNormalization of an f32 x whose Scale and B are f32 of the
 * normalised shape itself (the case of every exported transformer): no
 * parameters copied to doubles, no allocation, the row's affine step in
 * floats. A row of an encoder is short (64 to 1024), where the copies and
 * broadcasts of the general path cost more than the normalisation.
 */
struct lnf_job {
	const float *x, *sc, *sh;
	float *y;
	int64_t len;
	double eps;
};

/*
 * The rows are built for AVX2 and AVX-512 too (picked at load): the
 * statistics' double sums (plane_stats and sum8, inlined into each clone:
 * a call would go to the baseline build) then take 4 or 8 lanes a vector
 * instead of 2, in the same lanes and order, so the results are the same
 * bits. An encoder's rows are short (12 x 64 took 0.8 us, now 0.5).
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void
ln_rows_f32(void *ctx, int64_t b, int64_t e)
{
	const struct lnf_job *j = ctx;
	for (int64_t r = b; r < e; r++) {
		const float *restrict x = j->x + r * j->len;
		float *restrict y = j->y + r * j->len;
		double m, v;
		plane_stats(x, ML_F32, j->len, &m, &v);
		const float fm = (float)m, inv = (float)(1 / sqrt(v + j->eps));
		const float *restrict sc = j->sc, *restrict sh = j->sh;
		if (sh != NULL)
			for (int64_t i = 0; i < j->len; i++)
				y[i] = (x[i] - fm) * inv * sc[i] + sh[i];
		else
			for (int64_t i = 0; i < j->len; i++)
				y[i] = (x[i] - fm) * inv * sc[i];
	}
}

/*
 * LayerNormalization: one row per index of dims [0, axis), normalised
 * over the rest; Scale and B broadcast to the normalised shape. The
 * optional Mean and InvStdDev outputs hold the per-row statistics.
 */
int
ml_cpu_layernorm(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *bt = ML_IN(c, 2);
	int axis, rc = 0;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_layernorm);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return unsupported(c, x->dtype);
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", -1), x->rank, &axis));
	int64_t rows = 1, len = 1;
	for (int d = 0; d < x->rank; d++)
		if (d < axis)
			rows *= x->dims[d];
		else
			len *= x->dims[d];
	const struct ml_tval *s = c->in[1];
	if (x->dtype == ML_F32 && s->dtype == ML_F32 && ml_tval_numel(s) == len &&
	    (bt == NULL || (bt->dtype == ML_F32 && ml_tval_numel(bt) == len)) && c->n_out == 1) {
		/* Scale and B broadcast to the normalised shape with len values: they are that shape */
		struct lnf_job j = { x->data, s->data, bt != NULL ? bt->data : NULL, c->out[0]->data,
				     len, ml_attr_float(c->node, "epsilon", 1e-5) };
		ml_parallel_for(rows, grain_for(len * 2), ln_rows_f32, &j);
		return 0;
	}
	int r = x->rank - axis;
	double *sc = expand(c->in[1], r, x->dims + axis, len);
	double *sh = bt != NULL ? expand(bt, r, x->dims + axis, len) : NULL;
	double *st = c->n_out > 1 ? ml_malloc(sizeof(double) * (size_t)ML_MAX(rows, 1) * 2) : NULL;
	if (sc == NULL || (bt != NULL && sh == NULL) || (c->n_out > 1 && st == NULL)) {
		rc = ml_opfail(c, ML_ENOMEM, "out of memory");
		goto out;
	}
	struct rows_job j = { x->data, c->out[0]->data, len, ml_attr_float(c->node, "epsilon", 1e-5),
			      sc, sh, 1, 0, 1, st, st != NULL ? st + rows : NULL };
	run_rows(x, &j, rows);
	for (int k = 1; k < c->n_out && k < 3; k++) {
		struct ml_tval *o = c->out[k];
		for (int64_t i = 0; i < rows && ml_tval_numel(o) == rows; i++)
			ml_set_f64(o->data, o->dtype, i, k == 1 ? st[i] : st[rows + i]);
	}
out:
	ml_free(sc);
	ml_free(sh);
	ml_free(st);
	return rc;
}

/*
 * GroupNormalization: one row per [n, group], each row being the group's
 * channels' planes. Scale and bias hold one value per channel (opset 21)
 * or per group (opset 18).
 */
int
ml_cpu_groupnorm(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	int64_t ng = ml_attr_int(c->node, "num_groups", 1);
	int64_t n = x->dims[0], ch = x->dims[1];
	int64_t sz = n * ch > 0 ? ml_tval_numel(x) / (n * ch) : 0;
	int rc = 0;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_groupnorm);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return unsupported(c, x->dtype);
	if (ng < 1 || ch % ng != 0)
		return ml_opfail(c, ML_EINVAL, "%lld channels do not split into %lld groups",
				 (long long)ch, (long long)ng);
	int64_t cpg = ch / ng, ns = ml_tval_numel(c->in[1]);
	if (ns != ml_tval_numel(c->in[2]) || (ns != ch && ns != ng))
		return ml_opfail(c, ML_EINVAL, "scale and bias must have C or num_groups values");
	double *sc = get_vec(c->in[1], ns), *sh = get_vec(c->in[2], ns);
	if (sc == NULL || sh == NULL) {
		rc = ml_opfail(c, ML_ENOMEM, "out of memory");
		goto out;
	}
	/* per channel: row r's channels start at (r % ng) * cpg, one per sz elements */
	struct rows_job j = { x->data, c->out[0]->data, cpg * sz,
			      ml_attr_float(c->node, "epsilon", 1e-5), sc, sh, ng, cpg,
			      ML_MAX(sz, 1), NULL, NULL };
	if (ns == ng && ns != ch) {
		j.rstep = 1;
		j.div = ML_MAX(cpg * sz, 1);
	}
	run_rows(x, &j, n * ng);
out:
	ml_free(sc);
	ml_free(sh);
	return rc;
}

/*
 * LRN across channels: y = x / (bias + alpha / size * sum of x^2 over
 * channels c - (size-1)/2 .. c + size/2) ^ beta. The sum of squares is
 * gathered in y itself, plane by plane, so no buffer is needed.
 */
struct lrn_job {
	const void *x;
	void *y;
	int64_t ch, sz, size;
	double alpha, beta, bias;
};

#define LRN(SUF, T)								\
static void									\
lrn_##SUF(void *ctx, int64_t b0, int64_t e)					\
{										\
	const struct lrn_job *j = ctx;						\
	for (int64_t pl = b0; pl < e; pl++) {					\
		int64_t cc = pl % j->ch, base = pl - cc;			\
		int64_t lo = ML_MAX(0, cc - (j->size - 1) / 2);			\
		int64_t hi = ML_MIN(j->ch - 1, cc + j->size / 2);		\
		T *y = (T *)j->y + pl * j->sz;					\
		for (int64_t i = 0; i < j->sz; i++)				\
			y[i] = 0;						\
		for (int64_t k = lo; k <= hi; k++) {				\
			const T *xk = (const T *)j->x + (base + k) * j->sz;	\
			for (int64_t i = 0; i < j->sz; i++)			\
				y[i] += xk[i] * xk[i];				\
		}								\
		const T *x = (const T *)j->x + pl * j->sz;			\
		T a = (T)(j->alpha / (double)j->size), b = (T)j->bias;		\
		if (j->beta == 0.75) {						\
			for (int64_t i = 0; i < j->sz; i++) {			\
				T d = b + a * y[i];				\
				T s = sqrt(d);					\
				y[i] = x[i] / (s * sqrt(s));			\
			}							\
		} else {							\
			for (int64_t i = 0; i < j->sz; i++)			\
				y[i] = x[i] / (T)pow(b + a * y[i], j->beta);	\
		}								\
	}									\
}
LRN(f32, float)
LRN(f64, double)

int
ml_cpu_lrn(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_lrn);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return unsupported(c, x->dtype);
	int64_t n = x->dims[0], ch = x->dims[1];
	int64_t sz = n * ch > 0 ? ml_tval_numel(x) / (n * ch) : 0;
	struct lrn_job j = { x->data, c->out[0]->data, ch, sz, ml_attr_int(c->node, "size", 1),
			     ml_attr_float(c->node, "alpha", 1e-4),
			     ml_attr_float(c->node, "beta", 0.75), ml_attr_float(c->node, "bias", 1) };
	if (j.size < 1)
		return ml_opfail(c, ML_EINVAL, "size must be positive");
	ml_parallel_for(n * ch, grain_for(sz * (j.size + 2)), x->dtype == ML_F32 ? lrn_f32 : lrn_f64,
			&j);
	return 0;
}

/*
 * LpNormalization: x divided by its L1 or L2 norm along axis; a zero
 * vector stays zero. The view is [outer, n, inner] with the norm over n.
 */
struct lpn_job {
	const void *x;
	void *y;
	int64_t n, inner;
	int p;
};

#define LPN(SUF, T)								\
static void									\
lpn_##SUF(void *ctx, int64_t b0, int64_t e)					\
{										\
	const struct lpn_job *j = ctx;						\
	for (int64_t v = b0; v < e; v++) {					\
		int64_t o = v / j->inner, in = v % j->inner;			\
		const T *x = (const T *)j->x + o * j->n * j->inner + in;	\
		T *y = (T *)j->y + o * j->n * j->inner + in;			\
		double s = 0;							\
		for (int64_t i = 0; i < j->n; i++) {				\
			double xv = x[i * j->inner];				\
			s += j->p == 1 ? fabs(xv) : xv * xv;			\
		}								\
		double nv = j->p == 1 ? s : sqrt(s);				\
		for (int64_t i = 0; i < j->n; i++)				\
			y[i * j->inner] = nv == 0 ? 0 : (T)(x[i * j->inner] / nv); \
	}									\
}
LPN(f32, float)
LPN(f64, double)

int
ml_cpu_lpnorm(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	int axis;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_lpnorm);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return unsupported(c, x->dtype);
	if (x->rank == 0) {
		double v = ml_get_f64(x->data, x->dtype, 0);
		ml_set_f64(c->out[0]->data, x->dtype, 0, v == 0 ? 0 : v / fabs(v));
		return 0;
	}
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", -1), x->rank, &axis));
	int64_t outer = 1, inner = 1;
	for (int d = 0; d < x->rank; d++)
		if (d < axis)
			outer *= x->dims[d];
		else if (d > axis)
			inner *= x->dims[d];
	struct lpn_job j = { x->data, c->out[0]->data, x->dims[axis], inner,
			     (int)ml_attr_int(c->node, "p", 2) };
	ml_parallel_for(outer * inner, grain_for(j.n * 2), x->dtype == ML_F32 ? lpn_f32 : lpn_f64, &j);
	return 0;
}

/*
 * MeanVarianceNormalization over the axes attribute: y = (x - E[x]) /
 * (sqrt(E[x^2] - E[x]^2) + 1e-9), ONNX's function body. Statistics go by
 * the index over the kept dims, gathered in one pass over x.
 */
int
ml_cpu_mvn(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	const int64_t *ax;
	static const int64_t defaxes[3] = { 0, 2, 3 };
	int na = ml_attr_ints(c->node, "axes", &ax);
	bool red[ML_MAX_RANK] = { false };
	int64_t kst[ML_MAX_RANK], kept = 1, total = ml_tval_numel(x);

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_mvn);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return unsupported(c, x->dtype);
	if (na < 0) {
		ax = defaxes;
		na = 3;
	}
	for (int i = 0; i < na; i++) {
		int a;
		ML_TRY(ml_norm_axis(c, ax[i], x->rank, &a));
		red[a] = true;
	}
	for (int d = x->rank - 1; d >= 0; d--) {
		kst[d] = red[d] ? 0 : kept;
		if (!red[d])
			kept *= x->dims[d];
	}
	double *st = ml_calloc((size_t)ML_MAX(kept, 1) * 2, sizeof(double));
	if (st == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	int64_t cnt = kept > 0 ? total / kept : 0;
	for (int pass = 0; pass < 2; pass++) {
		int64_t idx[ML_MAX_RANK] = { 0 }, k = 0;
		for (int64_t i = 0; i < total; i++) {
			double v = ml_get_f64(x->data, x->dtype, i);
			if (pass == 0) {
				st[2 * k] += v;
				st[2 * k + 1] += v * v;
			} else {
				double m = st[2 * k], sd = st[2 * k + 1];
				ml_set_f64(c->out[0]->data, x->dtype, i, (v - m) / (sd + 1e-9));
			}
			for (int d = x->rank - 1; d >= 0; d--) {
				k += kst[d];
				if (++idx[d] < x->dims[d])
					break;
				k -= kst[d] * x->dims[d];
				idx[d] = 0;
			}
		}
		if (pass == 0)
			for (int64_t q = 0; q < kept; q++) {
				double m = st[2 * q] / (double)ML_MAX(cnt, 1);
				double var = st[2 * q + 1] / (double)ML_MAX(cnt, 1) - m * m;
				st[2 * q] = m;
				st[2 * q + 1] = sqrt(var > 0 ? var : 0);
			}
	}
	ml_free(st);
	return 0;
}
