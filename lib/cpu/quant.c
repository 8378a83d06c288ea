/*
 * quant.c: CPU kernels of the quant family. QuantizeLinear and
 * DequantizeLinear work per tensor or per axis on an [outer, channel,
 * inner] view. The integer products subtract the zero points into int16
 * copies of their operands (8-bit values minus 8-bit zero points always fit)
 * and multiply them with igemm, a tiled integer GEMM that accumulates in
 * 32 bits (wrapping, as int32 hardware does) and runs over the thread pool;
 * ConvInteger and QLinearConv feed it an im2col matrix. The QLinear* ops
 * then requantize: y = saturate(round(acc * scale) + zero_point).
 */
#if defined(__GNUC__) && !defined(__clang__)
/* See lib/cpu/reduce.c: -O3 lets the integer tile loops vectorise. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include "cpu/elem.h"
#include "cpu/nn.h"
#include "ops/quant.h"
#include "cpu/quant_q8.h"

static int
nomem(struct ml_opctx *c)
{
	return ml_opfail(c, ML_ENOMEM, "out of memory");
}

/* q_lo/q_hi: the range of an 8-bit quantized type. */
static int
q_lo(enum ml_dtype t)
{
	return t == ML_I8 ? -128 : 0;
}

static int
q_hi(enum ml_dtype t)
{
	return t == ML_I8 ? 127 : 255;
}

/* q_sat: round-half-even v, add zp, and clamp into [lo, hi] (NaN becomes the zero point). */
static inline int32_t
q_sat(double v, int32_t zp, int lo, int hi)
{
	double r = rint(v);
	if (r != r)
		r = 0;
	r += zp;
	return r < lo ? lo : r > hi ? hi : (int32_t)r;
}

static inline int32_t
q_satf(float v, int32_t zp, int lo, int hi)
{
	float r = rintf(v);
	r = r != r ? 0.0f : r;
	r += (float)zp;
	r = r < (float)lo ? (float)lo : r;
	r = r > (float)hi ? (float)hi : r;
	return (int32_t)r;
}

static void
q_store(void *p, enum ml_dtype t, int64_t i, int32_t v)
{
	if (t == ML_I8)
		((int8_t *)p)[i] = (int8_t)v;
	else
		((uint8_t *)p)[i] = (uint8_t)v;
}

/*
 * Per-axis parameters. struct qview is x as [outer, ch, inner], where ch
 * is the axis's size for a per-axis scale and 1 for a per-tensor one.
 */
struct qview {
	int64_t outer, ch, inner;
};

static int
q_view(struct ml_opctx *c, const struct ml_tval *x, const struct ml_tval *s,
       const struct ml_tval *z, struct qview *v)
{
	int64_t n = ml_tval_numel(s);
	int axis;

	if (z != NULL && ml_tval_numel(z) != n)
		return ml_opfail(c, ML_EINVAL, "scale and zero point differ in size");
	v->outer = 1;
	v->ch = 1;
	v->inner = ml_tval_numel(x);
	if (n == 1)
		return 0;
	if (s->rank != 1 || x->rank < 1)
		return ml_opfail(c, ML_EINVAL, "a per-axis scale must be a vector");
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 1), x->rank, &axis));
	if (x->dims[axis] != n)
		return ml_opfail(c, ML_EINVAL, "the scale has %lld values, axis %d has size %lld",
				 (long long)n, axis, (long long)x->dims[axis]);
	v->ch = n;
	v->outer = 1;
	for (int d = 0; d < axis; d++)
		v->outer *= x->dims[d];
	v->inner = 1;
	for (int d = axis + 1; d < x->rank; d++)
		v->inner *= x->dims[d];
	return 0;
}

struct qjob {
	const struct ml_tval *x, *s, *z;
	struct ml_tval *y;
	struct qview v;
	int lo, hi;
};

static void
quant_units(void *ctx, int64_t b, int64_t e)
{
	const struct qjob *j = ctx;
	const struct ml_tval *x = j->x;
	enum ml_dtype yt = j->y->dtype;

	for (int64_t u = b; u < e; u++) {
		int64_t ch = u % j->v.ch, base = u * j->v.inner;
		double s = ml_get_f64(j->s->data, j->s->dtype, ch);
		int32_t zp = j->z != NULL ? (int32_t)ml_get_i64(j->z->data, j->z->dtype, ch) : 0;
		if (x->dtype == ML_F32) {
			/* as ONNX's reference: the quotient in f32, then rounded */
			const float *xp = (const float *)x->data + base;
			float sf = (float)s;
			if (yt == ML_U8) {
				uint8_t *yp = (uint8_t *)j->y->data + base;
				for (int64_t i = 0; i < j->v.inner; i++)
					yp[i] = (uint8_t)q_satf(xp[i] / sf, zp, 0, 255);
			} else {
				int8_t *yp = (int8_t *)j->y->data + base;
				for (int64_t i = 0; i < j->v.inner; i++)
					yp[i] = (int8_t)q_satf(xp[i] / sf, zp, -128, 127);
			}
			continue;
		}
		for (int64_t i = 0; i < j->v.inner; i++) {
			double xv = ml_get_f64(x->data, x->dtype, base + i);
			q_store(j->y->data, yt, base + i, q_sat(xv / s, zp, j->lo, j->hi));
		}
	}
}

static int
run_quantize(struct ml_opctx *c)
{
	struct qjob j = { .x = c->in[0], .s = c->in[1], .z = ML_IN(c, 2), .y = c->out[0] };

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_quantize);
	if (j.y->dtype != ML_U8 && j.y->dtype != ML_I8)
		return ml_opfail(c, ML_ENOTSUP, "output dtype %s is not supported",
				 ml_dtype_name(j.y->dtype));
	ML_TRY(q_view(c, j.x, j.s, j.z, &j.v));
	for (int64_t i = 0; i < ml_tval_numel(j.s); i++)
		if (!(ml_get_f64(j.s->data, j.s->dtype, i) != 0))
			return ml_opfail(c, ML_EINVAL, "y_scale must not be zero");
	j.lo = q_lo(j.y->dtype);
	j.hi = q_hi(j.y->dtype);
	ml_parallel_for(j.v.outer * j.v.ch, ML_MAX(1, ML_GRAIN / ML_MAX(j.v.inner, 1)), quant_units,
			&j);
	return 0;
}

static void
dequant_units(void *ctx, int64_t b, int64_t e)
{
	const struct qjob *j = ctx;
	const struct ml_tval *x = j->x;
	float *y = j->y->data;

	for (int64_t u = b; u < e; u++) {
		int64_t ch = u % j->v.ch, base = u * j->v.inner;
		float s = (float)ml_get_f64(j->s->data, j->s->dtype, ch);
		int32_t zp = j->z != NULL ? (int32_t)ml_get_i64(j->z->data, j->z->dtype, ch) : 0;
		float *yp = y + base;
		if (x->dtype == ML_U8) {
			const uint8_t *xp = (const uint8_t *)x->data + base;
			for (int64_t i = 0; i < j->v.inner; i++)
				yp[i] = (float)((int32_t)xp[i] - zp) * s;
		} else if (x->dtype == ML_I8) {
			const int8_t *xp = (const int8_t *)x->data + base;
			for (int64_t i = 0; i < j->v.inner; i++)
				yp[i] = (float)((int32_t)xp[i] - zp) * s;
		} else {
			const int32_t *xp = (const int32_t *)x->data + base;
			for (int64_t i = 0; i < j->v.inner; i++)
				yp[i] = (float)((int64_t)xp[i] - zp) * s;
		}
	}
}

static int
run_dequantize(struct ml_opctx *c)
{
	struct qjob j = { .x = c->in[0], .s = c->in[1], .z = ML_IN(c, 2), .y = c->out[0] };

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_dequantize);
	if (j.y->dtype != ML_F32)
		return ml_opfail(c, ML_ENOTSUP, "output dtype %s is not supported",
				 ml_dtype_name(j.y->dtype));
	ML_TRY(q_view(c, j.x, j.s, j.z, &j.v));
	ml_parallel_for(j.v.outer * j.v.ch, ML_MAX(1, ML_GRAIN / ML_MAX(j.v.inner, 1)),
			dequant_units, &j);
	return 0;
}

/*
 * DynamicQuantizeLinear: the range [min(x, 0), max(x, 0)] maps onto
 * [0, 255], computed in f32 as ONNX's reference does.
 */
static int
run_dynquant(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	int64_t n = ml_tval_numel(x);

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_dynquant);
	if (x->dtype != ML_F32)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(x->dtype));
	const float *xp = x->data;
	float lo = 0, hi = 0;
	for (int64_t i = 0; i < n; i++) {
		lo = xp[i] < lo ? xp[i] : lo;
		hi = xp[i] > hi ? xp[i] : hi;
	}
	float scale = (hi - lo) / 255.0f;
	int32_t zp = 0;
	if (scale != 0)
		zp = q_satf(0.0f - lo / scale, 0, 0, 255);
	uint8_t *y = c->out[0]->data;
	for (int64_t i = 0; i < n; i++)
		y[i] = scale != 0 ? (uint8_t)q_satf(xp[i] / scale, zp, 0, 255) : 0;
	if (c->n_out > 1 && c->out[1]->data != NULL)
		((float *)c->out[1]->data)[0] = scale;
	if (c->n_out > 2 && c->out[2]->data != NULL)
		((uint8_t *)c->out[2]->data)[0] = (uint8_t)zp;
	return 0;
}

/*
 * igemm: C[b] = A[b] B[b] for nb batches, A [M, K] and B [K, N] in int16,
 * C int32, A and B of batch b at offsets aoff[b] and boff[b] (NULL: 0),
 * C at b * M * N. A unit is a tile of up to 4 rows and TN columns over
 * the full K, so each loaded row of B serves four rows of A.
 */
#define TN 256

struct igemm {
	const int16_t *a, *b;
	int32_t *c;
	int64_t M, N, K, nb;
	const int64_t *aoff, *boff;
	int64_t rg, nt;		/* row groups and column tiles per batch */
};

static void
igemm_units(void *ctx, int64_t b, int64_t e)
{
	const struct igemm *j = ctx;
	const int64_t M = j->M, N = j->N, K = j->K;
	uint32_t acc[4][TN];

	for (int64_t u = b; u < e; u++) {
		int64_t bi = u / (j->rg * j->nt), r = u % (j->rg * j->nt);
		int64_t i0 = (r / j->nt) * 4, j0 = (r % j->nt) * TN;
		int64_t nr = ML_MIN(4, M - i0), nc = ML_MIN(TN, N - j0);
		const int16_t *A = j->a + (j->aoff != NULL ? j->aoff[bi] : 0) + i0 * K;
		const int16_t *B = j->b + (j->boff != NULL ? j->boff[bi] : 0) + j0;
		int32_t *C = j->c + bi * M * N + i0 * N + j0;

		memset(acc, 0, sizeof acc);
		if (nr == 4) {
			for (int64_t k = 0; k < K; k++) {
				const int16_t *bk = B + k * N;
				uint32_t a0 = (uint32_t)A[k], a1 = (uint32_t)A[K + k];
				uint32_t a2 = (uint32_t)A[2 * K + k], a3 = (uint32_t)A[3 * K + k];
				for (int64_t q = 0; q < nc; q++) {
					uint32_t bv = (uint32_t)(int32_t)bk[q];
					acc[0][q] += a0 * bv;
					acc[1][q] += a1 * bv;
					acc[2][q] += a2 * bv;
					acc[3][q] += a3 * bv;
				}
			}
		} else {
			for (int64_t rr = 0; rr < nr; rr++)
				for (int64_t k = 0; k < K; k++) {
					const int16_t *bk = B + k * N;
					uint32_t av = (uint32_t)A[rr * K + k];
					for (int64_t q = 0; q < nc; q++)
						acc[rr][q] += av * (uint32_t)(int32_t)bk[q];
				}
		}
		for (int64_t rr = 0; rr < nr; rr++)
			for (int64_t q = 0; q < nc; q++)
				C[rr * N + q] = (int32_t)acc[rr][q];
	}
}

static void
igemm_run(struct igemm *j)
{
	j->rg = (j->M + 3) / 4;
	j->nt = (j->N + TN - 1) / TN;
	int64_t units = j->nb * j->rg * j->nt;
	int64_t work = 4 * ML_MIN(j->N, TN) * ML_MAX(j->K, 1);
	if (j->K == 0) {
		memset(j->c, 0, sizeof(int32_t) * (size_t)(j->nb * j->M * j->N));
		return;
	}
	ml_parallel_for(units, ML_MAX(1, 65536 / work), igemm_units, j);
}

/* zp_at: zero point number i of z (0 when z is NULL). */
static inline int32_t
zp_at(const struct ml_tval *z, int64_t i)
{
	if (z == NULL)
		return 0;
	return z->dtype == ML_I8 ? ((const int8_t *)z->data)[i] : ((const uint8_t *)z->data)[i];
}

/*
 * to_i16: dst[i] = src[i] - zero point, where the zero point of element i
 * is z[(i / div) % mod] (a scalar z has one value).
 */
static void
to_i16(int16_t *dst, const struct ml_tval *src, const struct ml_tval *z, int64_t div, int64_t mod)
{
	int64_t n = ml_tval_numel(src), nz = z != NULL ? ml_tval_numel(z) : 1;
	bool i8 = src->dtype == ML_I8;
	const int8_t *s8 = src->data;
	const uint8_t *u8 = src->data;

	if (nz == 1) {
		int32_t zp = zp_at(z, 0);
		for (int64_t i = 0; i < n; i++)
			dst[i] = (int16_t)((i8 ? s8[i] : u8[i]) - zp);
		return;
	}
	for (int64_t i = 0; i < n; i++)
		dst[i] = (int16_t)((i8 ? s8[i] : u8[i]) - zp_at(z, (i / div) % mod));
}

/*
 * struct mm: a matmul's geometry (numpy rules): batches of A [M, K] and
 * B [K, N] broadcast to the output's batch dims, offsets per batch.
 */
struct mm {
	int64_t M, N, K, nb, a_batches, b_batches;
	int64_t *aoff, *boff;
};

static int64_t
bcast_index(const int64_t *odims, int orank, const int64_t *idims, int irank, int64_t o)
{
	int64_t idx = 0, stride = 1;
	for (int d = orank - 1; d >= 0; d--) {
		int64_t od = odims[d], oi = o % od;
		o /= od;
		int k = d - (orank - irank);
		if (k < 0)
			continue;
		if (idims[k] != 1)
			idx += oi * stride;
		stride *= idims[k];
	}
	return idx;
}

static int
mm_geom(struct ml_opctx *c, const struct ml_tval *a, const struct ml_tval *b,
	const struct ml_tval *y, struct mm *g)
{
	int ra = a->rank, rb = b->rank;
	int bra = ML_MAX(ra - 2, 0), brb = ML_MAX(rb - 2, 0);
	int bro = y->rank - (ra > 1) - (rb > 1);

	memset(g, 0, sizeof *g);
	g->M = ra == 1 ? 1 : a->dims[ra - 2];
	g->K = a->dims[ra - 1];
	g->N = rb == 1 ? 1 : b->dims[rb - 1];
	if ((rb == 1 ? b->dims[0] : b->dims[rb - 2]) != g->K)
		return ml_opfail(c, ML_EINVAL, "inner dims differ");
	g->nb = 1;
	for (int d = 0; d < bro; d++)
		g->nb *= y->dims[d];
	g->a_batches = 1;
	for (int d = 0; d < bra; d++)
		g->a_batches *= a->dims[d];
	g->b_batches = 1;
	for (int d = 0; d < brb; d++)
		g->b_batches *= b->dims[d];
	if (g->nb == 0)
		return 0;
	g->aoff = ml_malloc(sizeof(int64_t) * 2 * (size_t)g->nb);
	if (g->aoff == NULL)
		return nomem(c);
	g->boff = g->aoff + g->nb;
	for (int64_t o = 0; o < g->nb; o++) {
		g->aoff[o] = bcast_index(y->dims, bro, a->dims, bra, o) * g->M * g->K;
		g->boff[o] = bcast_index(y->dims, bro, b->dims, brb, o) * g->K * g->N;
	}
	return 0;
}

/*
 * mm_acc: acc = (A - a_zp)(B - b_zp) in int32. a_zp is a scalar, one
 * value per row of A's last matrix, or one per row of all of A; b_zp a
 * scalar, one per column, or one per column of every matrix of B.
 */
static int
mm_acc(struct ml_opctx *c, const struct ml_tval *a, const struct ml_tval *az,
       const struct ml_tval *b, const struct ml_tval *bz, struct mm *g, int32_t *acc)
{
	int64_t na = ml_tval_numel(a), nbv = ml_tval_numel(b);
	int64_t nza = az != NULL ? ml_tval_numel(az) : 1, nzb = bz != NULL ? ml_tval_numel(bz) : 1;
	int64_t amod, bdiv, bmod;

	if (nza == 1 || nza == g->M)
		amod = nza;
	else if (nza == g->a_batches * g->M)
		amod = nza;
	else
		return ml_opfail(c, ML_EINVAL, "a_zero_point has %lld values for %lld rows",
				 (long long)nza, (long long)g->M);
	/* B's zero point of element (batch, k, n): n, or batch * N + n */
	if (nzb == 1 || nzb == g->N) {
		bdiv = 1;
		bmod = g->N;
	} else if (nzb == g->b_batches * g->N) {
		bdiv = 1;
		bmod = 0;
	} else {
		return ml_opfail(c, ML_EINVAL, "b_zero_point has %lld values for %lld columns",
				 (long long)nzb, (long long)g->N);
	}
	int16_t *a16 = ml_malloc(sizeof(int16_t) * (size_t)(na + nbv) + 2);
	if (a16 == NULL)
		return nomem(c);
	int16_t *b16 = a16 + na;
	to_i16(a16, a, az, g->K, amod);
	if (bmod != 0 || nzb == 1) {
		to_i16(b16, b, bz, bdiv, bmod == 0 ? 1 : bmod);
	} else {
		/* per column of every matrix: batch index * N + column */
		for (int64_t i = 0; i < nbv; i++) {
			int64_t col = i % g->N, bb = i / (g->K * g->N);
			int32_t v = b->dtype == ML_I8 ? ((const int8_t *)b->data)[i]
						      : ((const uint8_t *)b->data)[i];
			b16[i] = (int16_t)(v - zp_at(bz, bb * g->N + col));
		}
	}
	struct igemm j = { a16, b16, acc, g->M, g->N, g->K, g->nb, g->aoff, g->boff, 0, 0 };
	igemm_run(&j);
	ml_free(a16);
	return 0;
}

static int
run_matmul_integer(struct ml_opctx *c)
{
	struct mm g;
	int rc;

	ML_TRY(mm_geom(c, c->in[0], c->in[1], c->out[0], &g));
	rc = g.nb > 0 ? mm_acc(c, c->in[0], ML_IN(c, 2), c->in[1], ML_IN(c, 3), &g,
			       c->out[0]->data) : 0;
	ml_free(g.aoff);
	return rc;
}

/* load_f32: the n values of a scale tensor as floats (malloc'd), or NULL. */
static float *
load_f32(const struct ml_tval *t)
{
	int64_t n = ml_tval_numel(t);
	float *p = ml_malloc(sizeof(float) * (size_t)ML_MAX(n, 1));
	if (p != NULL)
		for (int64_t i = 0; i < n; i++)
			p[i] = (float)ml_get_f64(t->data, t->dtype, i);
	return p;
}

/*
 * struct rq: requantization of acc [nb, M, N] into y: the effective scale
 * of element (m, n) is sa[m] * sb[n] / sy[m], with the output zero point
 * zy[m]; each of those has 1 or M (N for sb) values. bias (QLinearConv)
 * is one int32 per row.
 */
struct rq {
	const int32_t *acc, *bias;
	void *y;
	enum ml_dtype yt;
	const float *sa, *sb, *sy;
	const struct ml_tval *zy;
	int64_t nsa, nsb, nsy, nzy;
	int64_t M, N;
	int lo, hi;
};

static void
rq_rows(void *ctx, int64_t b, int64_t e)
{
	const struct rq *j = ctx;

	for (int64_t r = b; r < e; r++) {
		int64_t m = r % j->M;
		float sa = j->sa[j->nsa == 1 ? 0 : m], sy = j->sy[j->nsy == 1 ? 0 : m];
		int32_t zp = zp_at(j->zy, j->nzy == 1 ? 0 : m);
		int32_t bias = j->bias != NULL ? j->bias[m] : 0;
		const int32_t *ap = j->acc + r * j->N;
		for (int64_t q = 0; q < j->N; q++) {
			float sc = sa * j->sb[j->nsb == 1 ? 0 : q] / sy;
			int32_t v = q_satf((float)((int64_t)ap[q] + bias) * sc, zp, j->lo, j->hi);
			q_store(j->y, j->yt, r * j->N + q, v);
		}
	}
}

static int
check_n(struct ml_opctx *c, const struct ml_tval *t, int64_t n, const char *what)
{
	int64_t k = ml_tval_numel(t);
	if (k == 1 || k == n)
		return 0;
	return ml_opfail(c, ML_EINVAL, "%s has %lld values, expected 1 or %lld", what,
			 (long long)k, (long long)n);
}

static int
run_qlinear_matmul(struct ml_opctx *c)
{
	struct mm g;
	struct rq q = { 0 };
	int32_t *acc = NULL;
	int rc;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_qlinear_matmul);
	ML_TRY(mm_geom(c, c->in[0], c->in[3], c->out[0], &g));
	if ((rc = check_n(c, c->in[1], g.M, "a_scale")) < 0 ||
	    (rc = check_n(c, c->in[4], g.N, "b_scale")) < 0 ||
	    (rc = check_n(c, c->in[6], g.M, "y_scale")) < 0 ||
	    (rc = check_n(c, c->in[7], g.M, "y_zero_point")) < 0)
		goto out;
	int64_t total = g.nb * g.M * g.N;
	acc = ml_malloc(sizeof(int32_t) * (size_t)ML_MAX(total, 1));
	q.sa = load_f32(c->in[1]);
	q.sb = load_f32(c->in[4]);
	q.sy = load_f32(c->in[6]);
	if (acc == NULL || q.sa == NULL || q.sb == NULL || q.sy == NULL) {
		rc = nomem(c);
		goto out;
	}
	if (g.nb > 0 && (rc = mm_acc(c, c->in[0], c->in[2], c->in[3], c->in[5], &g, acc)) < 0)
		goto out;
	q.acc = acc;
	q.y = c->out[0]->data;
	q.yt = c->out[0]->dtype;
	q.zy = c->in[7];
	q.nsa = ml_tval_numel(c->in[1]);
	q.nsb = ml_tval_numel(c->in[4]);
	q.nsy = ml_tval_numel(c->in[6]);
	q.nzy = ml_tval_numel(c->in[7]);
	q.M = g.M;
	q.N = g.N;
	q.lo = q_lo(q.yt);
	q.hi = q_hi(q.yt);
	ml_parallel_for(g.nb * g.M, ML_MAX(1, ML_GRAIN / ML_MAX(g.N, 1)), rq_rows, &q);
out:
	ml_free(acc);
	ml_free((void *)q.sa);
	ml_free((void *)q.sb);
	ml_free((void *)q.sy);
	ml_free(g.aoff);
	return rc;
}

/* im2col of one image and group into int16 col [cg * ksz, outsz], zero point subtracted. */
struct i2c {
	const struct ml_conv3 *v;
	const void *x;		/* the group's first channel */
	bool i8;
	int32_t zp;
	int16_t *col;
};

static void
i2c_rows(void *ctx, int64_t r0, int64_t r1)
{
	const struct i2c *j = ctx;
	const struct ml_conv3 *v = j->v;

	for (int64_t r = r0; r < r1; r++) {
		int64_t ci = r / v->ksz, kk = r % v->ksz;
		int64_t kd = kk / (v->k[1] * v->k[2]), kh = kk / v->k[2] % v->k[1], kw = kk % v->k[2];
		int16_t *dst = j->col + r * v->outsz;
		for (int64_t od = 0; od < v->out[0]; od++) {
			int64_t id = od * v->s[0] - v->p[0] + kd * v->d[0];
			for (int64_t oh = 0; oh < v->out[1]; oh++) {
				int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
				int16_t *dp = dst + (od * v->out[1] + oh) * v->out[2];
				bool rowin = id >= 0 && id < v->in[0] && ih >= 0 && ih < v->in[1];
				int64_t base = ((ci * v->in[0] + id) * v->in[1] + ih) * v->in[2];
				for (int64_t ow = 0; ow < v->out[2]; ow++) {
					int64_t iw = ow * v->s[2] - v->p[2] + kw * v->d[2];
					int32_t xv = j->zp;
					if (rowin && iw >= 0 && iw < v->in[2])
						xv = j->i8 ? ((const int8_t *)j->x)[base + iw]
							   : ((const uint8_t *)j->x)[base + iw];
					dp[ow] = (int16_t)(xv - j->zp);
				}
			}
		}
	}
}

/*
 * ConvInteger and QLinearConv: per image and group, im2col then
 * acc[mg, outsz] = W[mg, cg * ksz] col; QLinearConv requantizes acc with
 * its bias and per-channel weight scale.
 */
static int
run_qconv(struct ml_opctx *c)
{
	bool ql = c->node->op == ML_OP_QLINEAR_CONV;
	const struct ml_tval *x = c->in[0], *w = c->in[ql ? 3 : 1];
	const struct ml_tval *xz = ML_IN(c, 2), *wz = ML_IN(c, ql ? 5 : 3);
	const struct ml_tval *bias = ql ? ML_IN(c, 8) : NULL;
	struct ml_tval *y = c->out[0];
	struct ml_qconv_view qv;
	struct ml_conv3 v;
	int16_t *w16 = NULL, *col = NULL;
	int32_t *acc = NULL;
	struct rq q = { 0 };
	int rc = 0;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_qconv);
	ml_qconv_view(c, &qv);
	ML_TRY(ml_cpu_conv3(&qv.c, &v));
	if (xz != NULL && ml_tval_numel(xz) != 1)
		return ml_opfail(c, ML_ENOTSUP, "x_zero_point must be a scalar");
	if (wz != NULL)
		ML_TRY(check_n(c, wz, v.cout, "w_zero_point"));
	if (ql) {
		if ((rc = check_n(c, c->in[1], 1, "x_scale")) < 0 ||
		    (rc = check_n(c, c->in[4], v.cout, "w_scale")) < 0 ||
		    (rc = check_n(c, c->in[6], 1, "y_scale")) < 0 ||
		    (rc = check_n(c, c->in[7], 1, "y_zero_point")) < 0)
			return rc;
		if (bias != NULL && ml_tval_numel(bias) != v.cout)
			return ml_opfail(c, ML_EINVAL, "B has %lld values for %lld channels",
					 (long long)ml_tval_numel(bias), (long long)v.cout);
	}
	int64_t K = v.cg * v.ksz, colsz, total;
	if (!ml_mul_ok(K, v.outsz, &colsz) || !ml_mul_ok(v.n * v.cout, v.outsz, &total))
		return ml_opfail(c, ML_EINVAL, "the convolution is too large");
	w16 = ml_malloc(sizeof(int16_t) * (size_t)ML_MAX(ml_tval_numel(w), 1));
	col = ml_malloc(sizeof(int16_t) * (size_t)ML_MAX(colsz, 1));
	acc = ql ? ml_malloc(sizeof(int32_t) * (size_t)ML_MAX(total, 1)) : y->data;
	if (w16 == NULL || col == NULL || acc == NULL) {
		rc = nomem(c);
		goto out;
	}
	to_i16(w16, w, wz, K, wz != NULL ? ml_tval_numel(wz) : 1);
	size_t es = 1;
	for (int64_t n = 0; n < v.n; n++)
		for (int64_t gi = 0; gi < v.group; gi++) {
			struct i2c ij = { &v, (const uint8_t *)x->data + es * (size_t)((n * v.cin +
				gi * v.cg) * v.insz), x->dtype == ML_I8, zp_at(xz, 0), col };
			ml_parallel_for(K, ML_MAX(1, ML_GRAIN / ML_MAX(v.outsz, 1)), i2c_rows, &ij);
			struct igemm j = { w16 + gi * v.mg * K, col,
					   acc + (n * v.cout + gi * v.mg) * v.outsz, v.mg, v.outsz, K,
					   1, NULL, NULL, 0, 0 };
			igemm_run(&j);
		}
	if (ql) {
		/* rows of [n * cout, outsz]: channel m scales by x_scale * w_scale[m] / y_scale */
		float *sx = load_f32(c->in[1]), *sw = load_f32(c->in[4]), *sy = load_f32(c->in[6]);
		int32_t *bv = NULL;
		if (sx != NULL && sw != NULL && bias != NULL)
			bv = ml_malloc(sizeof(int32_t) * (size_t)ML_MAX(v.cout, 1));
		if (sx == NULL || sw == NULL || sy == NULL || (bias != NULL && bv == NULL)) {
			rc = nomem(c);
		} else {
			for (int64_t m = 0; bv != NULL && m < v.cout; m++)
				bv[m] = (int32_t)ml_get_i64(bias->data, bias->dtype, m);
			float sxy = sx[0];
			q.acc = acc;
			q.bias = bv;
			q.y = y->data;
			q.yt = y->dtype;
			q.sa = sw;
			q.nsa = ml_tval_numel(c->in[4]);
			q.sb = &sxy;
			q.nsb = 1;
			q.sy = sy;
			q.nsy = 1;
			q.zy = c->in[7];
			q.nzy = 1;
			q.M = v.cout;
			q.N = v.outsz;
			q.lo = q_lo(q.yt);
			q.hi = q_hi(q.yt);
			ml_parallel_for(v.n * v.cout, ML_MAX(1, ML_GRAIN / ML_MAX(v.outsz, 1)), rq_rows,
					&q);
		}
		ml_free(sx);
		ml_free(sw);
		ml_free(sy);
		ml_free(bv);
	}
out:
	ml_free(w16);
	ml_free(col);
	if (ql)
		ml_free(acc);
	return rc;
}

/*
 * FakeQuant (see lib/ops/quant.c): per tensor or per channel of an
 * [outer, channel, inner] view; without a scale input the scale of each
 * channel is max |x| / qmax (1 for an all-zero channel).
 */
static int
run_fakequant(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0), *s = ML_IN(c, 1), *z = ML_IN(c, 2);
	struct ml_tval *y = c->out[0];
	float qmin = (float)ml_attr_int(c->node, "qmin", 0), qmax = (float)ml_attr_int(c->node, "qmax", 255);
	int64_t n = ml_tval_numel(x), ch = 1, inner = 1, outer;
	bool per = ml_attr_find(c->node, "axis") != NULL || (s != NULL && ml_tval_numel(s) > 1);

	if (per && x->rank > 0) {
		int axis;
		ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &axis));
		ch = x->dims[axis];
		for (int d = axis + 1; d < x->rank; d++)
			inner *= x->dims[d];
	} else {
		inner = n;
	}
	if (n == 0)
		return 0;
	outer = n / (ch * inner);
	if (s != NULL && ml_tval_numel(s) != 1 && ml_tval_numel(s) != ch)
		return ml_opfail(c, ML_EINVAL, "scale has %lld values for %lld channels",
				 (long long)ml_tval_numel(s), (long long)ch);
	if (z != NULL && ml_tval_numel(z) != ml_tval_numel(s))
		return ml_opfail(c, ML_EINVAL, "zero_point and scale differ in size");
	const float *xp = x->data;
	float *yp = y->data;
	for (int64_t k = 0; k < ch; k++) {
		float sc, zp = 0;
		if (s != NULL) {
			int64_t j = ml_tval_numel(s) == 1 ? 0 : k;
			sc = ((const float *)s->data)[j];
			if (z != NULL)
				zp = (float)ml_get_f64(z->data, z->dtype, j);
			if (!(sc > 0) || isinf(sc))
				return ml_opfail(c, ML_EINVAL, "scale %g is not positive", (double)sc);
		} else {
			float am = 0;
			for (int64_t o = 0; o < outer; o++)
				for (int64_t i = 0; i < inner; i++) {
					float a = fabsf(xp[(o * ch + k) * inner + i]);
					am = a > am ? a : am;
				}
			sc = am > 0 && !isinf(am) ? am / qmax : 1;
		}
		for (int64_t o = 0; o < outer; o++)
			for (int64_t i = 0; i < inner; i++) {
				int64_t at = (o * ch + k) * inner + i;
				float q = nearbyintf(xp[at] / sc) + zp;
				q = q < qmin ? qmin : q > qmax ? qmax : q;
				yp[at] = (q - zp) * sc;
			}
	}
	return 0;
}

const struct ml_cpu_kernel ml_cpu_quant[] = {
	{ ML_OP_QUANTIZE_LINEAR, run_quantize },
	{ ML_OP_DEQUANTIZE_LINEAR, run_dequantize },
	{ ML_OP_DYNAMIC_QUANTIZE_LINEAR, run_dynquant },
	{ ML_OP_MATMUL_INTEGER, run_matmul_integer },
	{ ML_OP_CONV_INTEGER, run_qconv },
	{ ML_OP_QLINEAR_MATMUL, run_qlinear_matmul },
	{ ML_OP_QLINEAR_CONV, run_qconv },
	{ ML_OP_Q8_QUANTIZE, ml_q8_run_quantize },
	{ ML_OP_Q8_DEQUANTIZE, ml_q8_run_dequantize },
	{ ML_OP_Q8_CONV, ml_q8_run_conv },
	{ ML_OP_Q8_ADD, ml_q8_run_add },
	{ ML_OP_Q8_MAX_POOL, ml_q8_run_maxpool },
	{ ML_OP_Q8_GLOBAL_AVG_POOL, ml_q8_run_gap },
	{ ML_OP_FAKE_QUANT, run_fakequant },
	{ .op = ML_OP_NONE },
};
