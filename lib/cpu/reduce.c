/*
 * reduce.c: CPU kernels of the reduce family: the Reduce* ops, ArgMax and
 * ArgMin, Softmax, LogSoftmax, Hardmax, TopK and CumSum.
 *
 * Every kernel works on an [outer, n, inner] view of its input: n is the
 * reduced (or scanned) extent and inner the contiguous block after it.
 * With inner 1 a reduction is a contiguous row; with inner > 1 it is a sum
 * of rows, vectorised across inner. Reduce* axes that are not adjacent are
 * first gathered into a copy with the reduced axes last. f16 and bf16 run
 * as f32 (ml_cpu_as_f32).
 */
#if defined(__GNUC__) && !defined(__clang__)
/*
 * -O2 runs the vectoriser with its "very cheap" cost model, which skips
 * loops with epilogues; and with trapping math GCC will not if-convert
 * float selects (x < 0 ? 0 : x) into vector blends. No kernel reads the
 * floating-point exception flags, so neither costs any semantics.
 */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <float.h>
#include <tgmath.h>

#include "cpu/elem.h"
#include "cpu/fastmath.h"
#include "ops/reduce.h"

/* The vectorisable f32 exp of fastmath.h, and libm's for f64. */
#define FEXP(v) _Generic((v), float: ml_expf, default: (exp))(v)

/* Columns of the inner dim one task handles, and the block of per-column state on the stack. */
#define IBLOCK 4096
#define SBLOCK 256

static int
unsupported(struct ml_opctx *c, enum ml_dtype t)
{
	return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(t));
}

/*
 * Element arithmetic per dtype class: integers wrap (through uint64_t, so
 * signed overflow is never undefined), floats propagate NaN through Max
 * and Min as numpy does. T is the element type in scope.
 */
#define F_ADD(a, b) ((a) + (b))
#define F_MUL(a, b) ((a) * (b))
#define F_ABS(v) fabs(v)
#define F_MAX(a, v) (((v) > (a) || (v) != (v)) ? (v) : (a))
#define F_MIN(a, v) (((v) < (a) || (v) != (v)) ? (v) : (a))
#define F_DIVN(a, n) ((a) / (T)(n))
#define I_ADD(a, b) ((T)((uint64_t)(a) + (uint64_t)(b)))
#define I_MUL(a, b) ((T)((uint64_t)(a) * (uint64_t)(b)))
#define S_ABS(v) ((v) < 0 ? (T)(0 - (uint64_t)(v)) : (v))
#define U_ABS(v) (v)
#define I_MAX(a, v) ((v) > (a) ? (v) : (a))
#define I_MIN(a, v) ((v) < (a) ? (v) : (a))
#define I_DIVN(a, n) ((n) != 0 ? (T)((a) / (T)(n)) : (T)0)

/*
 * RLOOP: reduce rows o in [o0, o1), columns [i0, i1) of the view, with the
 * accumulator `a` starting at INIT, updated by STEP from element `v`, and
 * finished by FIN (which may use R). A contiguous row (IN == 1) is split
 * over LANES partial accumulators, merged by COMB (`a` with partial `v`):
 * that breaks the loop-carried dependency and lets the loop vectorise.
 */
#define LANES 8
#define RLOOP(INIT, STEP, COMB, FIN) \
	for (int64_t o = o0; o < o1; o++) { \
		const T *xp = x + o * R * IN; \
		T *yp = y + o * IN; \
		if (IN == 1) { \
			T l[LANES]; \
			int64_t r = 0; \
			for (int k = 0; k < LANES; k++) \
				l[k] = INIT; \
			for (; r + LANES <= R; r += LANES) \
				for (int k = 0; k < LANES; k++) { \
					const T v = xp[r + k], a = l[k]; \
					l[k] = STEP; \
				} \
			T a = INIT; \
			for (int k = 0; k < LANES; k++) { \
				const T v = l[k]; \
				a = COMB; \
			} \
			for (; r < R; r++) { \
				const T v = xp[r]; \
				a = STEP; \
			} \
			yp[0] = FIN; \
			continue; \
		} \
		for (int64_t i = i0; i < i1; i++) \
			yp[i] = INIT; \
		for (int64_t r = 0; r < R; r++) { \
			const T *xr = xp + r * IN; \
			for (int64_t i = i0; i < i1; i++) { \
				const T v = xr[i], a = yp[i]; \
				yp[i] = STEP; \
			} \
		} \
		for (int64_t i = i0; i < i1; i++) { \
			const T a = yp[i]; \
			yp[i] = FIN; \
		} \
	}

/*
 * LogSumExp subtracts each column's maximum before exponentiating, so
 * large inputs do not overflow; a non-finite maximum is not subtracted.
 */
#define DEF_REDUCE(SUF, TT, ADD, MUL, ABS, MAX, MIN, DIVN, LOWEST, HIGHEST) \
static void \
red_##SUF(enum ml_op op, const void *x_, void *y_, int64_t R, int64_t IN, int64_t o0, \
	  int64_t o1, int64_t i0, int64_t i1) \
{ \
	typedef TT T; \
	const T *x = x_; \
	T *y = y_; \
	switch (op) { \
	case ML_OP_REDUCE_SUM: RLOOP((T)0, ADD(a, v), ADD(a, v), a) break; \
	case ML_OP_REDUCE_MEAN: RLOOP((T)0, ADD(a, v), ADD(a, v), DIVN(a, R)) break; \
	case ML_OP_REDUCE_MAX: RLOOP(LOWEST, MAX(a, v), MAX(a, v), a) break; \
	case ML_OP_REDUCE_MIN: RLOOP(HIGHEST, MIN(a, v), MIN(a, v), a) break; \
	case ML_OP_REDUCE_PROD: RLOOP((T)1, MUL(a, v), MUL(a, v), a) break; \
	case ML_OP_REDUCE_L1: RLOOP((T)0, ADD(a, ABS(v)), ADD(a, v), a) break; \
	case ML_OP_REDUCE_L2: RLOOP((T)0, ADD(a, MUL(v, v)), ADD(a, v), (T)sqrt(a)) break; \
	case ML_OP_REDUCE_LOG_SUM: RLOOP((T)0, ADD(a, v), ADD(a, v), (T)log(a)) break; \
	case ML_OP_REDUCE_SUM_SQUARE: RLOOP((T)0, ADD(a, MUL(v, v)), ADD(a, v), a) break; \
	case ML_OP_REDUCE_LOG_SUM_EXP: \
		for (int64_t o = o0; o < o1; o++) { \
			const T *xp = x + o * R * IN; \
			for (int64_t ib = i0; ib < i1; ib += SBLOCK) { \
				int64_t ie = ML_MIN(i1, ib + SBLOCK); \
				T m[SBLOCK]; \
				double s[SBLOCK]; \
				for (int64_t i = ib; i < ie; i++) { \
					m[i - ib] = LOWEST; \
					s[i - ib] = 0; \
				} \
				for (int64_t r = 0; r < R; r++) \
					for (int64_t i = ib; i < ie; i++) \
						m[i - ib] = MAX(m[i - ib], xp[r * IN + i]); \
				for (int64_t i = ib; i < ie; i++) \
					if (!isfinite((double)m[i - ib])) \
						m[i - ib] = 0; \
				for (int64_t r = 0; r < R; r++) \
					for (int64_t i = ib; i < ie; i++) \
						s[i - ib] += exp((double)xp[r * IN + i] - \
								 (double)m[i - ib]); \
				for (int64_t i = ib; i < ie; i++) \
					y[o * IN + i] = (T)(log(s[i - ib]) + (double)m[i - ib]); \
			} \
		} \
		break; \
	default: \
		break; \
	} \
}

#define REDUCE_TYPES(X) \
	X(f32, float, F_ADD, F_MUL, F_ABS, F_MAX, F_MIN, F_DIVN, -INFINITY, INFINITY, ML_F32) \
	X(f64, double, F_ADD, F_MUL, F_ABS, F_MAX, F_MIN, F_DIVN, -INFINITY, INFINITY, ML_F64) \
	X(i8, int8_t, I_ADD, I_MUL, S_ABS, I_MAX, I_MIN, I_DIVN, INT8_MIN, INT8_MAX, ML_I8) \
	X(i16, int16_t, I_ADD, I_MUL, S_ABS, I_MAX, I_MIN, I_DIVN, INT16_MIN, INT16_MAX, ML_I16) \
	X(i32, int32_t, I_ADD, I_MUL, S_ABS, I_MAX, I_MIN, I_DIVN, INT32_MIN, INT32_MAX, ML_I32) \
	X(i64, int64_t, I_ADD, I_MUL, S_ABS, I_MAX, I_MIN, I_DIVN, INT64_MIN, INT64_MAX, ML_I64) \
	X(u8, uint8_t, I_ADD, I_MUL, U_ABS, I_MAX, I_MIN, I_DIVN, 0, UINT8_MAX, ML_U8) \
	X(u16, uint16_t, I_ADD, I_MUL, U_ABS, I_MAX, I_MIN, I_DIVN, 0, UINT16_MAX, ML_U16) \
	X(u32, uint32_t, I_ADD, I_MUL, U_ABS, I_MAX, I_MIN, I_DIVN, 0, UINT32_MAX, ML_U32) \
	X(u64, uint64_t, I_ADD, I_MUL, U_ABS, I_MAX, I_MIN, I_DIVN, 0, UINT64_MAX, ML_U64)

#define X(SUF, T, ADD, MUL, ABS, MAX, MIN, DIVN, LO, HI, DT) \
	DEF_REDUCE(SUF, T, ADD, MUL, ABS, MAX, MIN, DIVN, LO, HI)
REDUCE_TYPES(X)
#undef X

typedef void (*redfn)(enum ml_op op, const void *x, void *y, int64_t R, int64_t IN, int64_t o0,
		      int64_t o1, int64_t i0, int64_t i1);

static redfn
red_lookup(enum ml_dtype t)
{
	switch (t) {
#define X(SUF, T, ADD, MUL, ABS, MAX, MIN, DIVN, LO, HI, DT) case DT: return red_##SUF;
	REDUCE_TYPES(X)
#undef X
	default:
		return NULL;
	}
}

/*
 * Work splitting shared by the kernels: a task is one outer row and one
 * block of at most IBLOCK inner columns (ibs), so both many small rows and
 * one wide row spread over the threads.
 */
struct rjob {
	enum ml_op op;
	redfn fn;
	const void *x;
	void *y;
	int64_t O, R, IN, nb, ibs;
	void *aux;
};

static int64_t
rjob_grain(const struct rjob *j)
{
	int64_t per = ML_MAX(1, j->R) * j->ibs;
	return ML_MAX(1, ML_GRAIN / ML_MAX(1, per));
}

/*
 * rjob_split: the inner block size. With few outer rows the inner dim is
 * cut finer (down to 256 columns), so that even one outer row (a reduction
 * over axis 0) gives the threads enough tasks.
 */
static void
rjob_split(struct rjob *j)
{
	int64_t ibs = j->IN;

	if (j->O < 16 && j->IN > 256)
		ibs = ML_MAX(256, j->IN * j->O / 16);
	j->ibs = ML_MIN(ibs, IBLOCK);
	j->nb = (j->IN + j->ibs - 1) / j->ibs;
}

static void
red_chunk(void *ctx, int64_t b, int64_t e)
{
	const struct rjob *j = ctx;

	if (j->nb == 1) {
		j->fn(j->op, j->x, j->y, j->R, j->IN, b, e, 0, j->IN);
		return;
	}
	for (int64_t u = b; u < e; u++) {
		int64_t o = u / j->nb, ib = (u % j->nb) * j->ibs;
		j->fn(j->op, j->x, j->y, j->R, j->IN, o, o + 1, ib, ML_MIN(j->IN, ib + j->ibs));
	}
}

/*
 * Sums of rows: Sum and Mean of f32 over R rows of IN columns when the
 * outer rows and column blocks are too few to keep the threads busy (the
 * squeeze-excitation pools of an NHWC EfficientNet: one [H W, C] sum,
 * which ran on one thread). The rows are cut into fixed runs of about
 * CS_ELEMS elements, not by the thread count, so the result does not
 * depend on it; each run is summed into its own partial row, and the
 * partial rows are then added in order.
 */
#define CS_ELEMS 16384
/* below this many tasks (outer rows by column blocks): a constant, so that the path does not depend on the threads */
#define CS_TASKS 8

struct csjob {
	const float *x;
	float *part;
	int64_t R, IN, rows, nch;
};

static void
cs_chunk(void *ctx, int64_t b, int64_t e)
{
	const struct csjob *j = ctx;
	for (int64_t u = b; u < e; u++) {
		int64_t o = u / j->nch, r0 = u % j->nch * j->rows, r1 = ML_MIN(j->R, r0 + j->rows);
		const float *xp = j->x + (o * j->R + r0) * j->IN;
		float *p = j->part + u * j->IN;
		memcpy(p, xp, sizeof(float) * (size_t)j->IN);
		for (int64_t r = 1; r < r1 - r0; r++)
			for (int64_t i = 0; i < j->IN; i++)
				p[i] += xp[r * j->IN + i];
	}
}

/* colsum: the rows-split Sum or Mean; 1 when it does not apply, -1 out of memory */
static int
colsum(const struct rjob *rj)
{
	if ((rj->op != ML_OP_REDUCE_SUM && rj->op != ML_OP_REDUCE_MEAN) || rj->fn != red_f32 ||
	    rj->IN < 8 || rj->O * rj->nb >= CS_TASKS || rj->R * rj->IN < 2 * CS_ELEMS)
		return 1;
	struct csjob j = { .x = rj->x, .R = rj->R, .IN = rj->IN };
	j.rows = ML_MAX(1, CS_ELEMS / j.IN);
	j.nch = (j.R + j.rows - 1) / j.rows;
	j.part = malloc(sizeof(float) * (size_t)(rj->O * j.nch * j.IN));
	if (j.part == NULL)
		return -1;
	ml_parallel_for(rj->O * j.nch, 1, cs_chunk, &j);
	float *y = rj->y;
	for (int64_t o = 0; o < rj->O; o++) {
		const float *p = j.part + o * j.nch * j.IN;
		float *yo = y + o * j.IN;
		memcpy(yo, p, sizeof(float) * (size_t)j.IN);
		for (int64_t ch = 1; ch < j.nch; ch++)
			for (int64_t i = 0; i < j.IN; i++)
				yo[i] += p[ch * j.IN + i];
		if (rj->op == ML_OP_REDUCE_MEAN)
			for (int64_t i = 0; i < j.IN; i++)
				yo[i] /= (float)j.R;
	}
	free(j.part);
	return 0;
}

/*
 * gather_perm: copy x (rank, dims) into dst transposed by perm, i.e. dst
 * has dims[perm[0]], dims[perm[1]], ... Only for element sizes 1-8.
 */
static void
gather_perm(void *dst, const void *src, size_t esz, int rank, const int64_t *dims, const int *perm)
{
	int64_t st[ML_MAX_RANK], pst[ML_MAX_RANK], pd[ML_MAX_RANK], idx[ML_MAX_RANK] = { 0 };
	int64_t s = 1, n = 1;

	for (int d = rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= dims[d];
	}
	for (int k = 0; k < rank; k++) {
		pd[k] = dims[perm[k]];
		pst[k] = st[perm[k]];
		n *= pd[k];
	}
	int64_t off = 0;
	for (int64_t i = 0; i < n; i++) {
		switch (esz) {
		case 1: ((uint8_t *)dst)[i] = ((const uint8_t *)src)[off]; break;
		case 2: ((uint16_t *)dst)[i] = ((const uint16_t *)src)[off]; break;
		case 4: ((uint32_t *)dst)[i] = ((const uint32_t *)src)[off]; break;
		default: ((uint64_t *)dst)[i] = ((const uint64_t *)src)[off]; break;
		}
		for (int k = rank - 1; k >= 0; k--) {
			off += pst[k];
			if (++idx[k] < pd[k])
				break;
			off -= pst[k] * pd[k];
			idx[k] = 0;
		}
	}
}

static int
run_reduce(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	struct ml_tval *y = c->out[0];
	struct ml_tval tmp = { 0 };
	bool mask[ML_MAX_RANK], known, noop;
	struct rjob j = { .op = c->node->op, .x = x->data, .y = y->data };

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_reduce);
	if ((j.fn = red_lookup(x->dtype)) == NULL)
		return unsupported(c, x->dtype);
	ML_TRY(ml_reduce_axes(c, x->rank, mask, &known, &noop));
	if (!known)
		return ml_opfail(c, ML_EINVAL, "the axes have no value");
	if (noop) {
		if (ml_tval_nbytes(x) > 0)
			memcpy(y->data, x->data, (size_t)ml_tval_nbytes(x));
		return 0;
	}
	/* size-1 dims do not matter to the layout, so they are dropped first */
	int nd = 0, first = -1, last = -1, perm[ML_MAX_RANK];
	int64_t dims[ML_MAX_RANK];
	bool red[ML_MAX_RANK], contiguous = true;
	for (int d = 0; d < x->rank; d++) {
		if (x->dims[d] == 1)
			continue;
		dims[nd] = x->dims[d];
		red[nd] = mask[d];
		if (red[nd]) {
			if (first < 0)
				first = nd;
			else if (last != nd - 1)
				contiguous = false;
			last = nd;
		}
		nd++;
	}
	j.O = j.R = j.IN = 1;
	if (first < 0) {
		j.O = ml_tval_numel(x);
	} else if (contiguous) {
		for (int d = 0; d < nd; d++)
			*(d < first ? &j.O : d <= last ? &j.R : &j.IN) *= dims[d];
	} else {
		int k = 0;
		for (int d = 0; d < nd; d++)
			if (!red[d]) {
				perm[k++] = d;
				j.O *= dims[d];
			}
		for (int d = 0; d < nd; d++)
			if (red[d]) {
				perm[k++] = d;
				j.R *= dims[d];
			}
		ML_TRY(ml_tval_alloc(&tmp, x->dtype, x->rank, x->dims, c->err));
		gather_perm(tmp.data, x->data, ml_dtype_size(x->dtype), nd, dims, perm);
		j.x = tmp.data;
	}
	rjob_split(&j);
	int cs = j.O * j.IN > 0 ? colsum(&j) : 0;
	if (cs < 0) {
		ml_tval_clear(&tmp);
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	}
	if (cs > 0 && j.O * j.IN > 0)
		ml_parallel_for(j.O * j.nb, rjob_grain(&j), red_chunk, &j);
	ml_tval_clear(&tmp);
	return 0;
}

/*
 * ArgMax and ArgMin over one axis. Ties keep the first index, or the last
 * with select_last_index=1; the comparison is strict either way, so NaN
 * never wins over a number.
 */
#define DEF_ARG(SUF, TT) \
static void \
arg_##SUF(const void *x_, int64_t *y, int64_t O, int64_t R, int64_t IN, bool is_max, bool last) \
{ \
	typedef TT T; \
	const T *x = x_; \
	for (int64_t o = 0; o < O; o++) { \
		const T *xp = x + o * R * IN; \
		int64_t *yp = y + o * IN; \
		for (int64_t i = 0; i < IN; i++) { \
			int64_t best = 0; \
			T bv = xp[i]; \
			for (int64_t r = 1; r < R; r++) { \
				T v = xp[r * IN + i]; \
				bool better = is_max ? (last ? v >= bv : v > bv) : \
						       (last ? v <= bv : v < bv); \
				if (better) { \
					bv = v; \
					best = r; \
				} \
			} \
			yp[i] = best; \
		} \
	} \
}
#define ARG_TYPES(X) \
	X(f32, float, ML_F32) X(f64, double, ML_F64) X(i8, int8_t, ML_I8) X(i16, int16_t, ML_I16) \
	X(i32, int32_t, ML_I32) X(i64, int64_t, ML_I64) X(u8, uint8_t, ML_U8) \
	X(u16, uint16_t, ML_U16) X(u32, uint32_t, ML_U32) X(u64, uint64_t, ML_U64)
#define X(SUF, T, DT) DEF_ARG(SUF, T)
ARG_TYPES(X)
#undef X

/* view3: the [outer, n, inner] sizes of x around axis. */
static void
view3(const struct ml_tval *x, int axis, int64_t *O, int64_t *N, int64_t *IN)
{
	*O = *N = *IN = 1;
	for (int d = 0; d < x->rank; d++)
		*(d < axis ? O : d == axis ? N : IN) *= x->dims[d];
}

static int
run_arg(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	int64_t O, R, IN;
	int axis;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_arg);
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &axis));
	view3(x, axis, &O, &R, &IN);
	if (R == 0)
		return ml_opfail(c, ML_EINVAL, "ArgMax/ArgMin of an empty axis");
	bool is_max = c->node->op == ML_OP_ARGMAX;
	bool last = ml_attr_int(c->node, "select_last_index", 0) != 0;
	switch (x->dtype) {
#define X(SUF, T, DT) case DT: arg_##SUF(x->data, c->out[0]->data, O, R, IN, is_max, last); break;
	ARG_TYPES(X)
#undef X
	default:
		return unsupported(c, x->dtype);
	}
	return 0;
}

/*
 * Softmax, LogSoftmax and Hardmax over the n of the [outer, n, inner]
 * view. Softmax subtracts the maximum before exponentiating; Hardmax
 * marks the first maximum.
 */
#define DEF_LANESUM(SUF, TT) \
static TT \
lanesum_##SUF(const TT *x, int64_t n, bool exp_of) \
{ \
	typedef TT T; \
	T l[LANES] = { 0 }, s = 0; \
	int64_t r = 0; \
	if (exp_of) { \
		for (; r + LANES <= n; r += LANES) \
			for (int k = 0; k < LANES; k++) \
				l[k] += FEXP(x[r + k]); \
		for (; r < n; r++) \
			s += FEXP(x[r]); \
	} else { \
		for (; r + LANES <= n; r += LANES) \
			for (int k = 0; k < LANES; k++) \
				l[k] += x[r + k]; \
		for (; r < n; r++) \
			s += x[r]; \
	} \
	for (int k = 0; k < LANES; k++) \
		s += l[k]; \
	return s; \
}
DEF_LANESUM(f32, float)
DEF_LANESUM(f64, double)

#define DEF_SOFTMAX(SUF, TT) \
static void \
smax_##SUF(enum ml_op op, const void *x_, void *y_, int64_t N, int64_t IN, int64_t o0, \
	   int64_t o1, int64_t i0, int64_t i1) \
{ \
	typedef TT T; \
	const T *x = x_; \
	T *y = y_; \
	for (int64_t o = o0; o < o1; o++) { \
		const T *xp = x + o * N * IN; \
		T *yp = y + o * N * IN; \
		if (IN == 1) { \
			if (op == ML_OP_HARDMAX) { \
				int64_t arg = 0; \
				for (int64_t r = 1; r < N; r++) \
					if (xp[r] > xp[arg]) \
						arg = r; \
				for (int64_t r = 0; r < N; r++) \
					yp[r] = (T)(r == arg); \
				continue; \
			} \
			T l[LANES], m = -INFINITY, s = 0; \
			int64_t r = 0; \
			for (int k = 0; k < LANES; k++) \
				l[k] = -INFINITY; \
			for (; r + LANES <= N; r += LANES) \
				for (int k = 0; k < LANES; k++) \
					l[k] = xp[r + k] > l[k] ? xp[r + k] : l[k]; \
			for (; r < N; r++) \
				m = xp[r] > m ? xp[r] : m; \
			for (int k = 0; k < LANES; k++) \
				m = l[k] > m ? l[k] : m; \
			if (op == ML_OP_LOG_SOFTMAX) { \
				for (int64_t q = 0; q < N; q++) \
					yp[q] = xp[q] - m; \
				s = lanesum_##SUF(yp, N, true); \
				T ls = log(s); \
				for (int64_t q = 0; q < N; q++) \
					yp[q] -= ls; \
				continue; \
			} \
			for (int64_t q = 0; q < N; q++) \
				yp[q] = FEXP(xp[q] - m); \
			s = lanesum_##SUF(yp, N, false); \
			T inv = (T)1 / s; \
			for (int64_t q = 0; q < N; q++) \
				yp[q] *= inv; \
			continue; \
		} \
		for (int64_t ib = i0; ib < i1; ib += SBLOCK) { \
			int64_t ie = ML_MIN(i1, ib + SBLOCK), w = ie - ib; \
			T m[SBLOCK], s[SBLOCK]; \
			if (op == ML_OP_HARDMAX) { \
				int64_t arg[SBLOCK]; \
				for (int64_t i = 0; i < w; i++) { \
					m[i] = -INFINITY; \
					arg[i] = 0; \
				} \
				for (int64_t r = 0; r < N; r++) \
					for (int64_t i = 0; i < w; i++) { \
						T v = xp[r * IN + ib + i]; \
						if (v > m[i]) { \
							m[i] = v; \
							arg[i] = r; \
						} \
					} \
				for (int64_t r = 0; r < N; r++) \
					for (int64_t i = 0; i < w; i++) \
						yp[r * IN + ib + i] = (T)(r == arg[i]); \
				continue; \
			} \
			for (int64_t i = 0; i < w; i++) { \
				m[i] = -INFINITY; \
				s[i] = 0; \
			} \
			for (int64_t r = 0; r < N; r++) \
				for (int64_t i = 0; i < w; i++) { \
					T v = xp[r * IN + ib + i]; \
					m[i] = v > m[i] ? v : m[i]; \
				} \
			if (op == ML_OP_SOFTMAX) { \
				for (int64_t r = 0; r < N; r++) \
					for (int64_t i = 0; i < w; i++) { \
						T e = FEXP(xp[r * IN + ib + i] - m[i]); \
						s[i] += e; \
						yp[r * IN + ib + i] = e; \
					} \
			} else { \
				for (int64_t r = 0; r < N; r++) \
					for (int64_t i = 0; i < w; i++) \
						s[i] += FEXP(xp[r * IN + ib + i] - m[i]); \
			} \
			if (op == ML_OP_LOG_SOFTMAX) { \
				for (int64_t i = 0; i < w; i++) \
					s[i] = m[i] + log(s[i]); \
				for (int64_t r = 0; r < N; r++) \
					for (int64_t i = 0; i < w; i++) \
						yp[r * IN + ib + i] = xp[r * IN + ib + i] - s[i]; \
				continue; \
			} \
			for (int64_t i = 0; i < w; i++) \
				s[i] = (T)1 / s[i]; \
			for (int64_t r = 0; r < N; r++) \
				for (int64_t i = 0; i < w; i++) \
					yp[r * IN + ib + i] *= s[i]; \
		} \
	} \
}
DEF_SOFTMAX(f32, float)
DEF_SOFTMAX(f64, double)

static int
run_softmax(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	struct rjob j = { .op = c->node->op, .x = x->data, .y = c->out[0]->data };

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_softmax);
	if (x->dtype == ML_F32)
		j.fn = smax_f32;
	else if (x->dtype == ML_F64)
		j.fn = smax_f64;
	else
		return unsupported(c, x->dtype);
	ML_TRY(ml_softmax_view(c, x, &j.O, &j.R, &j.IN));
	rjob_split(&j);
	if (j.O * j.R * j.IN > 0)
		ml_parallel_for(j.O * j.nb, rjob_grain(&j), red_chunk, &j);
	return 0;
}

/*
 * TopK: each slice along the axis is merge-sorted by value (a stable
 * sort, so equal values keep the lower index first, as ONNX specifies),
 * and the first k are written. NaN orders above every number, as in
 * numpy's sort.
 */
#define DEF_TOPK(SUF, TT, ISNAN) \
static void \
topk_##SUF(const void *x_, void *v_, int64_t *ind, int64_t O, int64_t N, int64_t IN, int64_t k, \
	   bool largest, int64_t *idx, int64_t *tmp, void *buf_) \
{ \
	typedef TT T; \
	const T *x = x_; \
	T *vals = v_, *buf = buf_; \
	for (int64_t o = 0; o < O; o++) \
		for (int64_t i = 0; i < IN; i++) { \
			const T *xp = x + o * N * IN + i; \
			for (int64_t r = 0; r < N; r++) { \
				buf[r] = xp[r * IN]; \
				idx[r] = r; \
			} \
			/* bottom-up merge sort of idx by buf */ \
			for (int64_t w = 1; w < N; w *= 2) { \
				for (int64_t lo = 0; lo < N; lo += 2 * w) { \
					int64_t mid = ML_MIN(lo + w, N), hi = ML_MIN(lo + 2 * w, N); \
					int64_t p = lo, q = mid, t = lo; \
					while (p < mid && q < hi) { \
						T a = buf[idx[p]], b = buf[idx[q]]; \
						bool qfirst = largest ? \
							(b > a || (ISNAN(b) && !ISNAN(a))) : \
							(b < a || (ISNAN(a) && !ISNAN(b))); \
						tmp[t++] = qfirst ? idx[q++] : idx[p++]; \
					} \
					while (p < mid) \
						tmp[t++] = idx[p++]; \
					while (q < hi) \
						tmp[t++] = idx[q++]; \
				} \
				memcpy(idx, tmp, (size_t)N * sizeof *idx); \
			} \
			for (int64_t r = 0; r < k; r++) { \
				vals[(o * k + r) * IN + i] = buf[idx[r]]; \
				ind[(o * k + r) * IN + i] = idx[r]; \
			} \
		} \
}
#define F_ISNAN(v) ((v) != (v))
#define I_ISNAN(v) false
DEF_TOPK(f32, float, F_ISNAN)
DEF_TOPK(f64, double, F_ISNAN)
DEF_TOPK(i8, int8_t, I_ISNAN)
DEF_TOPK(i16, int16_t, I_ISNAN)
DEF_TOPK(i32, int32_t, I_ISNAN)
DEF_TOPK(i64, int64_t, I_ISNAN)
DEF_TOPK(u8, uint8_t, I_ISNAN)
DEF_TOPK(u16, uint16_t, I_ISNAN)
DEF_TOPK(u32, uint32_t, I_ISNAN)
DEF_TOPK(u64, uint64_t, I_ISNAN)

static int
run_topk(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	int64_t k, O, N, IN;
	int axis, rc = 0;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_topk);
	ML_TRY(ml_topk_k(c, &k));
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", -1), x->rank, &axis));
	view3(x, axis, &O, &N, &IN);
	if (k < 0 || k > N)
		return ml_opfail(c, ML_EINVAL, "k %lld is out of range for an axis of %lld",
				 (long long)k, (long long)N);
	if (c->out[1]->dtype != ML_I64)
		return ml_opfail(c, ML_EINVAL, "the indices output must be int64");
	bool largest = ml_attr_int(c->node, "largest", 1) != 0;
	int64_t *idx = ml_malloc((size_t)ML_MAX(N, 1) * sizeof *idx);
	int64_t *tmp = ml_malloc((size_t)ML_MAX(N, 1) * sizeof *tmp);
	void *buf = ml_malloc((size_t)ML_MAX(N, 1) * ml_dtype_size(x->dtype));
	if (idx == NULL || tmp == NULL || buf == NULL) {
		rc = ml_opfail(c, ML_ENOMEM, "out of memory");
		goto out;
	}
	switch (x->dtype) {
#define X(SUF, T, DT) \
	case DT: \
		topk_##SUF(x->data, c->out[0]->data, c->out[1]->data, O, N, IN, k, largest, idx, tmp, \
			   buf); \
		break;
	ARG_TYPES(X)
#undef X
	default:
		rc = unsupported(c, x->dtype);
		break;
	}
out:
	ml_free(idx);
	ml_free(tmp);
	ml_free(buf);
	return rc;
}

/*
 * CumSum along one axis, forward or reverse, inclusive or exclusive
 * (each output then sums the elements strictly before it).
 */
#define DEF_CUMSUM(SUF, TT, ADD) \
static void \
cumsum_##SUF(const void *x_, void *y_, int64_t O, int64_t N, int64_t IN, bool excl, bool rev) \
{ \
	typedef TT T; \
	const T *x = x_; \
	T *y = y_; \
	for (int64_t o = 0; o < O; o++) { \
		const T *xp = x + o * N * IN; \
		T *yp = y + o * N * IN; \
		for (int64_t k = 0; k < N; k++) { \
			int64_t r = rev ? N - 1 - k : k, p = rev ? r + 1 : r - 1; \
			T *yr = yp + r * IN; \
			const T *xr = xp + r * IN; \
			if (k == 0) { \
				for (int64_t i = 0; i < IN; i++) \
					yr[i] = excl ? (T)0 : xr[i]; \
			} else if (excl) { \
				const T *yq = yp + p * IN, *xq = xp + p * IN; \
				for (int64_t i = 0; i < IN; i++) \
					yr[i] = ADD(yq[i], xq[i]); \
			} else { \
				const T *yq = yp + p * IN; \
				for (int64_t i = 0; i < IN; i++) \
					yr[i] = ADD(yq[i], xr[i]); \
			} \
		} \
	} \
}
#define X(SUF, T, ADD, MUL, ABS, MAX, MIN, DIVN, LO, HI, DT) DEF_CUMSUM(SUF, T, ADD)
REDUCE_TYPES(X)
#undef X

static int
run_cumsum(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	int64_t O, N, IN;
	int axis;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_cumsum);
	ML_TRY(ml_cumsum_axis(c, x->rank, &axis));
	if (axis < 0)
		return ml_opfail(c, ML_EINVAL, "the axis has no value");
	view3(x, axis, &O, &N, &IN);
	bool excl = ml_attr_int(c->node, "exclusive", 0) != 0;
	bool rev = ml_attr_int(c->node, "reverse", 0) != 0;
	switch (x->dtype) {
#define X(SUF, T, ADD, MUL, ABS, MAX, MIN, DIVN, LO, HI, DT) \
	case DT: cumsum_##SUF(x->data, c->out[0]->data, O, N, IN, excl, rev); break;
	REDUCE_TYPES(X)
#undef X
	default:
		return unsupported(c, x->dtype);
	}
	return 0;
}

#define K(id, fn) { ML_OP_##id, fn }

const struct ml_cpu_kernel ml_cpu_reduce[] = {
	K(REDUCE_SUM, run_reduce), K(REDUCE_MEAN, run_reduce), K(REDUCE_MAX, run_reduce),
	K(REDUCE_MIN, run_reduce), K(REDUCE_PROD, run_reduce), K(REDUCE_L1, run_reduce),
	K(REDUCE_L2, run_reduce), K(REDUCE_LOG_SUM, run_reduce),
	K(REDUCE_LOG_SUM_EXP, run_reduce), K(REDUCE_SUM_SQUARE, run_reduce),
	K(ARGMAX, run_arg), K(ARGMIN, run_arg),
	K(SOFTMAX, run_softmax), K(LOG_SOFTMAX, run_softmax), K(HARDMAX, run_softmax),
	K(TOPK, run_topk), K(CUMSUM, run_cumsum),
	{ .op = ML_OP_NONE },
};
