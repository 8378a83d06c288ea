/*
 * misc_einsum.c: the Einsum kernel. Two f32 or f64 operands whose every
 * index is a batch index (in both and the output), a row or column index
 * (in one and the output) or a contracted index (in both, not the output)
 * become batched GEMMs: each operand is brought to [batch, m, k] or
 * [batch, k, n] order (or its transpose, which GEMM takes as is), and the
 * product is permuted into the output order where that differs. Anything
 * else (one operand, diagonals, indices summed within one operand,
 * broadcasting, integers, three or more operands) runs a generic loop:
 * per output element, a sum over the contracted indices of the product of
 * the operands, with strides summed for repeated indices.
 */
#include "cpu/elem.h"
#include "cpu/misc.h"
#include "cpu/nn.h"
#include "cpu/shape.h"

static int
nomem(struct ml_opctx *c)
{
	return ml_opfail(c, ML_ENOMEM, "out of memory");
}

/*
 * struct ejob: the generic loop. Output dim d has size osz[d] and stride
 * ost[i][d] in operand i; contracted axis r has size rsz[r] and strides
 * rst[i][r].
 */
struct ejob {
	int nin, nout, nr;
	const void *x[ML_EINSUM_MAXIN];
	void *y;
	enum ml_dtype dt;
	int64_t osz[ML_MAX_RANK], ost[ML_EINSUM_MAXIN][ML_MAX_RANK];
	int64_t rsz[ML_EINSUM_MAXAX], rst[ML_EINSUM_MAXIN][ML_EINSUM_MAXAX];
	int64_t rtotal;
};

/*
 * DEF_EGEN: the loop for element type T accumulated in A; the innermost
 * contracted axis runs as a plain strided loop, the others as an odometer.
 */
#define DEF_EGEN(SUF, T, A, WRAP)						\
static void									\
egen_##SUF(void *ctx, int64_t b, int64_t e)					\
{										\
	const struct ejob *j = ctx;						\
	const int nin = j->nin, nr = j->nr;					\
	T *y = j->y;								\
	const T *x[ML_EINSUM_MAXIN];						\
	for (int i = 0; i < nin; i++)						\
		x[i] = j->x[i];							\
	for (int64_t o = b; o < e; o++) {					\
		int64_t base[ML_EINSUM_MAXIN] = { 0 }, rem = o;			\
		for (int d = j->nout - 1; d >= 0; d--) {			\
			int64_t q = rem % j->osz[d];				\
			rem /= j->osz[d];					\
			for (int i = 0; i < nin; i++)				\
				base[i] += q * j->ost[i][d];			\
		}								\
		A acc = 0;							\
		if (nr == 0) {							\
			A p = 1;						\
			for (int i = 0; i < nin; i++)				\
				p = WRAP(p * (A)x[i][base[i]]);			\
			y[o] = (T)p;						\
			continue;						\
		}								\
		if (j->rtotal == 0) {						\
			y[o] = 0;						\
			continue;						\
		}								\
		int64_t idx[ML_EINSUM_MAXAX] = { 0 }, off[ML_EINSUM_MAXIN];	\
		const int last = nr - 1;					\
		const int64_t n = j->rsz[last];					\
		for (int i = 0; i < nin; i++)					\
			off[i] = base[i];					\
		for (;;) {							\
			if (nin == 1) {						\
				const T *p0 = x[0] + off[0];			\
				const int64_t s0 = j->rst[0][last];		\
				for (int64_t t = 0; t < n; t++)			\
					acc = WRAP(acc + (A)p0[t * s0]);	\
			} else if (nin == 2) {					\
				const T *p0 = x[0] + off[0], *p1 = x[1] + off[1]; \
				const int64_t s0 = j->rst[0][last], s1 = j->rst[1][last]; \
				for (int64_t t = 0; t < n; t++)			\
					acc = WRAP(acc + WRAP((A)p0[t * s0] * (A)p1[t * s1])); \
			} else {						\
				for (int64_t t = 0; t < n; t++) {		\
					A p = 1;				\
					for (int i = 0; i < nin; i++)		\
						p = WRAP(p * (A)x[i][off[i] + t * j->rst[i][last]]); \
					acc = WRAP(acc + p);			\
				}						\
			}							\
			int r = last - 1;					\
			for (; r >= 0; r--) {					\
				idx[r]++;					\
				for (int i = 0; i < nin; i++)			\
					off[i] += j->rst[i][r];			\
				if (idx[r] < j->rsz[r])				\
					break;					\
				for (int i = 0; i < nin; i++)			\
					off[i] -= idx[r] * j->rst[i][r];	\
				idx[r] = 0;					\
			}							\
			if (r < 0)						\
				break;						\
		}								\
		y[o] = (T)acc;							\
	}									\
}

#define NOWRAP(v) (v)
/* integers wrap through uint64_t, so overflow is never undefined */
#define U64WRAP(v) ((int64_t)(uint64_t)(v))
DEF_EGEN(f32, float, double, NOWRAP)
DEF_EGEN(f64, double, double, NOWRAP)
DEF_EGEN(i32, int32_t, uint64_t, NOWRAP)
DEF_EGEN(i64, int64_t, uint64_t, NOWRAP)

/* axis strides: st[i][a], the element stride of axis a in operand i (0 where broadcast). */
static void
axis_strides(struct ml_opctx *c, const struct ml_einsum *e, int64_t st[][ML_EINSUM_MAXAX])
{
	for (int i = 0; i < e->n_in; i++) {
		const struct ml_tval *x = c->in[i];
		int64_t s = 1;
		memset(st[i], 0, sizeof st[i]);
		for (int d = x->rank - 1; d >= 0; d--) {
			int a = e->map[i][d];
			if (!(x->dims[d] == 1 && e->size[a] != 1))
				st[i][a] += s;
			s *= x->dims[d];
		}
	}
}

static int
run_generic(struct ml_opctx *c, const struct ml_einsum *e, int64_t st[][ML_EINSUM_MAXAX])
{
	struct ejob j;
	bool in_out[ML_EINSUM_MAXAX] = { false };
	void (*fn)(void *, int64_t, int64_t);
	int64_t per = 1;

	memset(&j, 0, sizeof j);
	j.nin = e->n_in;
	j.nout = e->out_rank;
	j.y = c->out[0]->data;
	for (int i = 0; i < e->n_in; i++)
		j.x[i] = c->in[i]->data;
	for (int d = 0; d < e->out_rank; d++) {
		int a = e->out[d];
		in_out[a] = true;
		j.osz[d] = e->size[a];
		for (int i = 0; i < e->n_in; i++)
			j.ost[i][d] = st[i][a];
	}
	j.rtotal = 1;
	for (int a = 0; a < ML_EINSUM_MAXAX; a++) {
		if (!e->used[a] || in_out[a])
			continue;
		j.rsz[j.nr] = e->size[a];
		for (int i = 0; i < e->n_in; i++)
			j.rst[i][j.nr] = st[i][a];
		j.nr++;
		j.rtotal *= e->size[a];
	}
	switch (c->out[0]->dtype) {
	case ML_F32: fn = egen_f32; break;
	case ML_F64: fn = egen_f64; break;
	case ML_I32: fn = egen_i32; break;
	case ML_I64: fn = egen_i64; break;
	default:
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported",
				 ml_dtype_name(c->out[0]->dtype));
	}
	per = ML_MAX(1, j.rtotal * e->n_in);
	ml_parallel_for(ml_tval_numel(c->out[0]), ML_MAX(1, ML_GRAIN / per), fn, &j);
	return 0;
}

/*
 * struct gview: one GEMM operand or result as a list of axes in memory
 * order, which the GEMM path needs as [batch..., rows..., cols...].
 */
struct gview {
	int n;
	int ax[ML_MAX_RANK];
};

static void
gv_add(struct gview *v, int a)
{
	v->ax[v->n++] = a;
}

/* gv_cat: the axes of a, then b, then c. */
static struct gview
gv_cat(const struct gview *a, const struct gview *b, const struct gview *c)
{
	struct gview r = { 0 };
	for (int i = 0; i < a->n; i++)
		gv_add(&r, a->ax[i]);
	for (int i = 0; i < b->n; i++)
		gv_add(&r, b->ax[i]);
	for (int i = 0; i < c->n; i++)
		gv_add(&r, c->ax[i]);
	return r;
}

static bool
gv_eq(const struct gview *a, const int *ax, int n)
{
	if (a->n != n)
		return false;
	for (int i = 0; i < n; i++)
		if (a->ax[i] != ax[i])
			return false;
	return true;
}

struct einsum_sizes {
	const int64_t *size;
};

static int64_t
gv_numel(const struct einsum_sizes *s, const struct gview *v)
{
	int64_t n = 1;
	for (int i = 0; i < v->n; i++)
		n *= s->size[v->ax[i]];
	return n;
}

/*
 * gather: operand i (strides st) as the contiguous layout v, into a new
 * buffer *buf, unless its memory already is that layout (then *p points
 * at it and *buf stays NULL).
 */
static int
gather(struct ml_opctx *c, const struct ml_einsum *e, int i, const int64_t *st,
       const struct gview *v, const void **p, void **buf)
{
	const struct ml_tval *x = c->in[i];
	size_t es = ml_dtype_size(x->dtype);
	int64_t dims[ML_MAX_RANK], bst[ML_MAX_RANK];

	*buf = NULL;
	*p = x->data;
	if (gv_eq(v, e->map[i], x->rank))
		return 0;
	for (int k = 0; k < v->n; k++) {
		dims[k] = e->size[v->ax[k]];
		bst[k] = st[v->ax[k]] * (int64_t)es;
	}
	struct einsum_sizes s = { e->size };
	*buf = ml_malloc(es * (size_t)ML_MAX(gv_numel(&s, v), 1));
	if (*buf == NULL)
		return nomem(c);
	ml_strided_copy(*buf, x->data, v->n, dims, bst, es);
	*p = *buf;
	return 0;
}

/*
 * try_gemm: the GEMM path; *done is false (and nothing is written) when
 * the equation does not fit it.
 */
static int
try_gemm(struct ml_opctx *c, const struct ml_einsum *e, int64_t st[][ML_EINSUM_MAXAX],
	 bool *done)
{
	const struct ml_tval *A = c->in[0], *B = ML_IN(c, 1);
	struct ml_tval *Y = c->out[0];
	struct gview bt = { 0 }, mv = { 0 }, nv = { 0 }, kv = { 0 };
	int inA[ML_EINSUM_MAXAX] = { 0 }, inB[ML_EINSUM_MAXAX] = { 0 };
	bool inO[ML_EINSUM_MAXAX] = { false };
	struct einsum_sizes sz = { e->size };

	*done = false;
	if (e->n_in != 2 || (Y->dtype != ML_F32 && Y->dtype != ML_F64))
		return 0;
	for (int d = 0; d < A->rank; d++)
		if (inA[e->map[0][d]]++ > 0 || A->dims[d] != e->size[e->map[0][d]])
			return 0;	/* a diagonal or a broadcast dim */
	for (int d = 0; d < B->rank; d++)
		if (inB[e->map[1][d]]++ > 0 || B->dims[d] != e->size[e->map[1][d]])
			return 0;
	for (int d = 0; d < e->out_rank; d++)
		inO[e->out[d]] = true;
	/* batch, m and n axes in output order; k axes in A's order */
	for (int d = 0; d < e->out_rank; d++) {
		int a = e->out[d];
		if (inA[a] && inB[a])
			gv_add(&bt, a);
		else if (inA[a])
			gv_add(&mv, a);
		else
			gv_add(&nv, a);
	}
	for (int d = 0; d < A->rank; d++) {
		int a = e->map[0][d];
		if (!inO[a]) {
			if (!inB[a])
				return 0;	/* summed within A alone */
			gv_add(&kv, a);
		}
	}
	for (int d = 0; d < B->rank; d++)
		if (!inO[e->map[1][d]] && !inA[e->map[1][d]])
			return 0;
	int64_t nb = gv_numel(&sz, &bt), M = gv_numel(&sz, &mv), N = gv_numel(&sz, &nv);
	int64_t K = gv_numel(&sz, &kv);
	/* operands as they are when they already have a GEMM layout, else gathered */
	struct gview amk = gv_cat(&bt, &mv, &kv), akm = gv_cat(&bt, &kv, &mv);
	struct gview bkn = gv_cat(&bt, &kv, &nv), bnk = gv_cat(&bt, &nv, &kv);
	struct gview ymn = gv_cat(&bt, &mv, &nv);
	bool ta = !gv_eq(&amk, e->map[0], A->rank) && gv_eq(&akm, e->map[0], A->rank);
	bool tb = !gv_eq(&bkn, e->map[1], B->rank) && gv_eq(&bnk, e->map[1], B->rank);
	const void *pa, *pb;
	void *ba = NULL, *bb = NULL, *by = NULL;
	int rc = 0;
	if (!ta && (rc = gather(c, e, 0, st[0], &amk, &pa, &ba)) < 0)
		goto out;
	if (ta)
		pa = A->data;
	if (!tb && (rc = gather(c, e, 1, st[1], &bkn, &pb, &bb)) < 0)
		goto out;
	if (tb)
		pb = B->data;
	size_t es = ml_dtype_size(Y->dtype);
	bool direct = gv_eq(&ymn, e->out, e->out_rank);
	void *py = Y->data;
	if (!direct) {
		by = ml_malloc(es * (size_t)ML_MAX(nb * M * N, 1));
		if (by == NULL) {
			rc = nomem(c);
			goto out;
		}
		py = by;
	}
	for (int64_t b = 0; b < nb; b++) {
		bool ok;
		if (Y->dtype == ML_F32)
			ok = ml_sgemm(ta, tb, M, N, K, 1.0f, (const float *)pa + b * M * K,
				      ta ? M : K, (const float *)pb + b * K * N, tb ? K : N, 0.0f,
				      (float *)py + b * M * N, N);
		else
			ok = ml_dgemm(ta, tb, M, N, K, 1.0, (const double *)pa + b * M * K,
				      ta ? M : K, (const double *)pb + b * K * N, tb ? K : N, 0.0,
				      (double *)py + b * M * N, N);
		if (!ok) {
			rc = ml_opfail(c, ML_ENOTSUP, "matrix sizes exceed what BLAS can index");
			goto out;
		}
	}
	if (!direct) {
		/* the product [batch, m, n] permuted into the output's order */
		int64_t dims[ML_MAX_RANK], bst[ML_MAX_RANK], pst[ML_EINSUM_MAXAX] = { 0 }, s = 1;
		for (int k = ymn.n - 1; k >= 0; k--) {
			pst[ymn.ax[k]] = s;
			s *= e->size[ymn.ax[k]];
		}
		for (int d = 0; d < e->out_rank; d++) {
			dims[d] = e->size[e->out[d]];
			bst[d] = pst[e->out[d]] * (int64_t)es;
		}
		ml_strided_copy(Y->data, by, e->out_rank, dims, bst, es);
	}
	*done = true;
out:
	ml_free(ba);
	ml_free(bb);
	ml_free(by);
	return rc;
}

int
ml_cpu_einsum(struct ml_opctx *c)
{
	struct ml_einsum e;
	int64_t st[ML_EINSUM_MAXIN][ML_EINSUM_MAXAX];
	bool done;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_einsum);
	ML_TRY(ml_einsum_parse(c, &e));
	if (e.out_rank < 0)
		return ml_opfail(c, ML_EINVAL, "the output's rank is unknown");
	for (int i = 0; i < e.n_in; i++)
		if (c->in[i]->dtype != c->out[0]->dtype)
			return ml_opfail(c, ML_EINVAL, "inputs differ in dtype");
	axis_strides(c, &e, st);
	ML_TRY(try_gemm(c, &e, st, &done));
	if (done)
		return 0;
	return run_generic(c, &e, st);
}
