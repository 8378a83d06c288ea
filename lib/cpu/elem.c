/*
 * elem.c: CPU kernels of the elem family's binary, variadic and ternary
 * ops (numpy broadcasting), Cast, and the family's one kernel table; the
 * unary ops and Clip are in elem_unary.c. f16 and bf16 run as f32.
 *
 * Broadcasting: the output shape and each input's strides (0 on broadcast
 * dims) are coalesced into as few dims as possible, so a same-shape op is
 * one flat row and a bias add is rows of a contiguous and a broadcast
 * operand. A row kernel gets each input's inner stride, 0 or 1, and has a
 * tight loop for each case, which is what lets the compiler vectorise.
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
#include "cpu/elem.h"

#define NOPS 3

/* A row kernel: n output elements from inputs whose inner strides are s[k] (0 or 1). */
typedef void (*rowfn)(void *o, const void *const *in, const int *s, int64_t n);

struct bview {
	int rank, nin;
	int64_t dims[ML_MAX_RANK];
	int64_t st[NOPS][ML_MAX_RANK];
};

/*
 * bview_init: the coalesced view of ins broadcast to out. Size-1 output
 * dims are dropped; two adjacent dims merge when every input's outer
 * stride is its inner stride times the inner size. Rank is at least 1.
 */
static void
bview_init(struct bview *v, const struct ml_tval *out, int nin, const struct ml_tval *const *ins)
{
	int64_t st[NOPS][ML_MAX_RANK];
	int r = 0;

	v->nin = nin;
	for (int k = 0; k < nin; k++)
		ml_bcast_strides(ins[k], out, st[k]);
	for (int d = 0; d < out->rank; d++) {
		if (out->dims[d] == 1)
			continue;
		if (r > 0) {
			bool merge = true;
			for (int k = 0; k < nin; k++)
				if (v->st[k][r - 1] != st[k][d] * out->dims[d])
					merge = false;
			if (merge) {
				v->dims[r - 1] *= out->dims[d];
				for (int k = 0; k < nin; k++)
					v->st[k][r - 1] = st[k][d];
				continue;
			}
		}
		v->dims[r] = out->dims[d];
		for (int k = 0; k < nin; k++)
			v->st[k][r] = st[k][d];
		r++;
	}
	if (r == 0) {
		v->dims[0] = 1;
		for (int k = 0; k < nin; k++)
			v->st[k][0] = 0;
		r = 1;
	}
	v->rank = r;
}

struct bjob {
	struct bview v;
	rowfn row;
	char *o;
	size_t osz;
	const char *in[NOPS];
	size_t isz[NOPS];
};

/* bjob_chunk: output elements [b, e), row by row of the view's inner dim. */
static void
bjob_chunk(void *ctx, int64_t b, int64_t e)
{
	const struct bjob *j = ctx;
	const struct bview *v = &j->v;
	int r = v->rank, s[NOPS];
	int64_t idx[ML_MAX_RANK], rem = b, len = v->dims[r - 1];

	for (int d = r - 1; d >= 0; d--) {
		idx[d] = rem % v->dims[d];
		rem /= v->dims[d];
	}
	for (int k = 0; k < v->nin; k++)
		s[k] = v->st[k][r - 1] != 0;
	for (int64_t pos = b; pos < e;) {
		int64_t n = ML_MIN(len - idx[r - 1], e - pos);
		const void *ip[NOPS];
		for (int k = 0; k < v->nin; k++) {
			int64_t off = 0;
			for (int d = 0; d < r; d++)
				off += idx[d] * v->st[k][d];
			ip[k] = j->in[k] + off * (int64_t)j->isz[k];
		}
		j->row(j->o + pos * (int64_t)j->osz, ip, s, n);
		pos += n;
		idx[r - 1] += n;
		for (int d = r - 1; d > 0 && idx[d] == v->dims[d]; d--) {
			idx[d] = 0;
			idx[d - 1]++;
		}
	}
}

/* run_bcast: out = row(ins...) elementwise with broadcasting, in parallel. */
static void
run_bcast(rowfn row, int nin, const struct ml_tval *const *ins, struct ml_tval *out)
{
	struct bjob j;
	int64_t n = ml_tval_numel(out);

	if (n <= 0)
		return;
	bview_init(&j.v, out, nin, ins);
	j.row = row;
	j.o = out->data;
	j.osz = ml_dtype_size(out->dtype);
	for (int k = 0; k < nin; k++) {
		j.in[k] = ins[k]->data;
		j.isz[k] = ml_dtype_size(ins[k]->dtype);
	}
	ml_parallel_for(n, ML_GRAIN, bjob_chunk, &j);
}

/*
 * BROW: a binary row kernel computing EXPR from x (input 0) and y (input
 * 1), with one loop per stride case. o may alias a (variadic ops
 * accumulate in place), which GCC's runtime alias check handles.
 */
#define BROW(NAME, T, TO, EXPR) \
static void \
NAME(void *o_, const void *const *in, const int *s, int64_t n) \
{ \
	TO *o = o_; \
	const T *a = in[0], *b = in[1]; \
	if (s[0] && s[1]) { \
		for (int64_t i = 0; i < n; i++) { \
			const T x = a[i], y = b[i]; \
			o[i] = (TO)(EXPR); \
		} \
	} else if (s[0]) { \
		const T y = b[0]; \
		for (int64_t i = 0; i < n; i++) { \
			const T x = a[i]; \
			o[i] = (TO)(EXPR); \
		} \
	} else if (s[1]) { \
		const T x = a[0]; \
		for (int64_t i = 0; i < n; i++) { \
			const T y = b[i]; \
			o[i] = (TO)(EXPR); \
		} \
	} else { \
		const T x = a[0], y = b[0]; \
		const TO r = (TO)(EXPR); \
		for (int64_t i = 0; i < n; i++) \
			o[i] = r; \
	} \
}

/* Comparisons write bool for every numeric type. */
#define CMP_ROWS(SUF, T) \
	BROW(r_eq_##SUF, T, uint8_t, x == y) \
	BROW(r_lt_##SUF, T, uint8_t, x < y) \
	BROW(r_le_##SUF, T, uint8_t, x <= y) \
	BROW(r_gt_##SUF, T, uint8_t, x > y) \
	BROW(r_ge_##SUF, T, uint8_t, x >= y)

/*
 * Floats. Max and Min propagate NaN as numpy does. Mod with fmod=0 is
 * Python's %, whose result takes the divisor's sign.
 */
static inline float
pymod_f32(float x, float y)
{
	float r = fmodf(x, y);
	return r != 0 && (r < 0) != (y < 0) ? r + y : r;
}

static inline double
pymod_f64(double x, double y)
{
	double r = fmod(x, y);
	return r != 0 && (r < 0) != (y < 0) ? r + y : r;
}

#define FLOAT_ROWS(SUF, T, POW, FMOD) \
	BROW(r_add_##SUF, T, T, x + y) \
	BROW(r_sub_##SUF, T, T, x - y) \
	BROW(r_mul_##SUF, T, T, x * y) \
	BROW(r_div_##SUF, T, T, x / y) \
	BROW(r_max_##SUF, T, T, (x > y || x != x) ? x : y) \
	BROW(r_min_##SUF, T, T, (x < y || x != x) ? x : y) \
	BROW(r_prelu_##SUF, T, T, x < 0 ? x * y : x) \
	BROW(r_pow_##SUF, T, T, POW(x, y)) \
	BROW(r_sq_##SUF, T, T, ((void)y, x * x)) \
	BROW(r_fmod_##SUF, T, T, FMOD(x, y)) \
	BROW(r_mod_##SUF, T, T, pymod_##SUF(x, y)) \
	CMP_ROWS(SUF, T)
FLOAT_ROWS(f32, float, powf, fmodf)
FLOAT_ROWS(f64, double, pow, fmod)

/*
 * Integers. Add, Sub and Mul wrap (computed in uint64_t, so signed
 * overflow is never undefined). Division by zero gives 0 instead of a
 * trap, and so does the remainder; INT_MIN / -1 wraps. Div truncates
 * toward zero as C does; Mod with fmod=0 takes the divisor's sign.
 */
#define SINT_HELPERS(SUF, T) \
static inline T \
idiv_##SUF(T x, T y) \
{ \
	if (y == 0) \
		return 0; \
	if (y == -1) \
		return (T)(0 - (uint64_t)x); \
	return (T)(x / y); \
} \
static inline T \
irem_##SUF(T x, T y) \
{ \
	return y == 0 || y == -1 ? 0 : (T)(x % y); \
} \
static inline T \
ipymod_##SUF(T x, T y) \
{ \
	T r = irem_##SUF(x, y); \
	return r != 0 && (r < 0) != (y < 0) ? (T)(r + y) : r; \
}
#define UINT_HELPERS(SUF, T) \
static inline T \
idiv_##SUF(T x, T y) \
{ \
	return y == 0 ? 0 : (T)(x / y); \
} \
static inline T \
irem_##SUF(T x, T y) \
{ \
	return y == 0 ? 0 : (T)(x % y); \
} \
static inline T \
ipymod_##SUF(T x, T y) \
{ \
	return irem_##SUF(x, y); \
}

#define INT_ROWS(SUF, T) \
	BROW(r_add_##SUF, T, T, (uint64_t)x + (uint64_t)y) \
	BROW(r_sub_##SUF, T, T, (uint64_t)x - (uint64_t)y) \
	BROW(r_mul_##SUF, T, T, (uint64_t)x * (uint64_t)y) \
	BROW(r_div_##SUF, T, T, idiv_##SUF(x, y)) \
	BROW(r_max_##SUF, T, T, x > y ? x : y) \
	BROW(r_min_##SUF, T, T, x < y ? x : y) \
	BROW(r_fmod_##SUF, T, T, irem_##SUF(x, y)) \
	BROW(r_mod_##SUF, T, T, ipymod_##SUF(x, y)) \
	CMP_ROWS(SUF, T)

#define SINT_TYPES(X) X(i8, int8_t) X(i16, int16_t) X(i32, int32_t) X(i64, int64_t)
#define UINT_TYPES(X) X(u8, uint8_t) X(u16, uint16_t) X(u32, uint32_t) X(u64, uint64_t)
SINT_TYPES(SINT_HELPERS)
UINT_TYPES(UINT_HELPERS)
SINT_TYPES(INT_ROWS)
UINT_TYPES(INT_ROWS)
BROW(r_prelu_i8, int8_t, int8_t, x < 0 ? (uint64_t)x * (uint64_t)y : (uint64_t)x)
BROW(r_prelu_i16, int16_t, int16_t, x < 0 ? (uint64_t)x * (uint64_t)y : (uint64_t)x)
BROW(r_prelu_i32, int32_t, int32_t, x < 0 ? (uint64_t)x * (uint64_t)y : (uint64_t)x)
BROW(r_prelu_i64, int64_t, int64_t, x < 0 ? (uint64_t)x * (uint64_t)y : (uint64_t)x)
/* PRelu of unsigned values, never negative, is x itself. */
#define UPRELU_ROW(SUF, T) BROW(r_prelu_##SUF, T, T, ((void)y, x))
UINT_TYPES(UPRELU_ROW)

/*
 * Integer Pow by squaring, wrapping like numpy's. A negative exponent
 * gives 1/x truncated: 0 except for x = 1 and x = -1.
 */
static inline int64_t
ipow(int64_t x, int64_t y)
{
	uint64_t r = 1, b = (uint64_t)x;

	if (y < 0)
		return x == 1 ? 1 : x == -1 ? (y & 1 ? -1 : 1) : 0;
	while (y > 0) {
		if (y & 1)
			r *= b;
		b *= b;
		y >>= 1;
	}
	return (int64_t)r;
}

BROW(r_pow_i32, int32_t, int32_t, (uint64_t)ipow(x, y))
BROW(r_pow_i64, int64_t, int64_t, ipow(x, y))

/* Bit ops depend only on the element size; And, Or and Xor of bools are theirs on bytes. */
#define BIT_ROWS(SUF, T) \
	BROW(r_band_##SUF, T, T, x & y) \
	BROW(r_bor_##SUF, T, T, x | y) \
	BROW(r_bxor_##SUF, T, T, x ^ y) \
	BROW(r_shl_##SUF, T, T, y >= sizeof(T) * 8 ? 0 : (uint64_t)x << y) \
	BROW(r_shr_##SUF, T, T, y >= sizeof(T) * 8 ? 0 : x >> y)
UINT_TYPES(BIT_ROWS)

/* bin_row: the row kernel of a binary op for dtype t; fmod selects Mod's variant. */
static rowfn
bin_row(enum ml_op op, enum ml_dtype t, bool fmod_attr)
{
	if (op == ML_OP_AND || op == ML_OP_OR || op == ML_OP_XOR) {
		if (t != ML_BOOL)
			return NULL;
		op = op == ML_OP_AND ? ML_OP_BITWISE_AND : op == ML_OP_OR ? ML_OP_BITWISE_OR :
			ML_OP_BITWISE_XOR;
		t = ML_U8;
	}
	if (op == ML_OP_BITWISE_AND || op == ML_OP_BITWISE_OR || op == ML_OP_BITWISE_XOR) {
		if (!ml_dtype_is_int(t) && t != ML_BOOL)
			return NULL;
		int k = op == ML_OP_BITWISE_AND ? 0 : op == ML_OP_BITWISE_OR ? 1 : 2;
		static const rowfn tab[4][3] = {
			{ r_band_u8, r_bor_u8, r_bxor_u8 }, { r_band_u16, r_bor_u16, r_bxor_u16 },
			{ r_band_u32, r_bor_u32, r_bxor_u32 }, { r_band_u64, r_bor_u64, r_bxor_u64 },
		};
		size_t sz = ml_dtype_size(t);
		return tab[sz == 1 ? 0 : sz == 2 ? 1 : sz == 4 ? 2 : 3][k];
	}
	if (t == ML_BOOL && op == ML_OP_EQUAL)
		t = ML_U8;
	switch (t) {
#define COMMON(SUF) \
		case ML_OP_ADD: case ML_OP_SUM: case ML_OP_MEAN: return r_add_##SUF; \
		case ML_OP_SUB: return r_sub_##SUF; \
		case ML_OP_MUL: return r_mul_##SUF; \
		case ML_OP_DIV: return r_div_##SUF; \
		case ML_OP_MAX: return r_max_##SUF; \
		case ML_OP_MIN: return r_min_##SUF; \
		case ML_OP_MOD: return fmod_attr ? r_fmod_##SUF : r_mod_##SUF; \
		case ML_OP_EQUAL: return r_eq_##SUF; \
		case ML_OP_LESS: return r_lt_##SUF; \
		case ML_OP_LESS_OR_EQUAL: return r_le_##SUF; \
		case ML_OP_GREATER: return r_gt_##SUF; \
		case ML_OP_GREATER_OR_EQUAL: return r_ge_##SUF;
#define FCASE(SUF, DT) \
	case DT: \
		switch (op) { \
		COMMON(SUF) \
		case ML_OP_PRELU: return r_prelu_##SUF; \
		case ML_OP_POW: return r_pow_##SUF; \
		default: return NULL; \
		}
#define SCASE(SUF, DT) \
	case DT: \
		switch (op) { \
		COMMON(SUF) \
		case ML_OP_PRELU: return r_prelu_##SUF; \
		default: return NULL; \
		}
#define UCASE(SUF, DT) \
	case DT: \
		switch (op) { \
		COMMON(SUF) \
		case ML_OP_PRELU: return r_prelu_##SUF; \
		default: return NULL; \
		}
	FCASE(f32, ML_F32)
	FCASE(f64, ML_F64)
	SCASE(i8, ML_I8)
	SCASE(i16, ML_I16)
	SCASE(i32, ML_I32)
	SCASE(i64, ML_I64)
	UCASE(u8, ML_U8)
	UCASE(u16, ML_U16)
	UCASE(u32, ML_U32)
	UCASE(u64, ML_U64)
#undef COMMON
#undef FCASE
#undef SCASE
#undef UCASE
	default:
		return NULL;
	}
}

static int
unsupported(struct ml_opctx *c, enum ml_dtype t)
{
	return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(t));
}

/*
 * f32 Add, Sub, Mul and Div of a [M, C] operand by one row of C repeated
 * (either side), the view of an NHWC tensor scaled per channel (the
 * squeeze-excitation Mul) or a bias: one loop per op over whole rows,
 * without the row kernels' per-row dispatch, which cost more than the
 * work on rows of 32 to 144 channels.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define ELEM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ELEM_CLONES
#endif

struct rbjob {
	const float *m, *r;	/* the [M, C] operand and the row */
	float *o;
	int64_t C;
	int op;
	bool row_first;		/* the row is input 0 (matters to Sub and Div) */
};

#define RB_LOOP(EXPR) \
	for (int64_t i = b; i < e; i++) { \
		const float *mp = j->m + i * C; \
		float *yo = j->o + i * C; \
		for (int64_t k = 0; k < C; k++) { \
			float x = mp[k], y = r[k]; \
			yo[k] = (EXPR); \
		} \
	}

ELEM_CLONES static void
rb_rows(void *ctx, int64_t b, int64_t e)
{
	const struct rbjob *j = ctx;
	const float *r = j->r;
	int64_t C = j->C;
	switch (j->op) {
	case ML_OP_ADD: RB_LOOP(x + y) break;
	case ML_OP_MUL: RB_LOOP(x * y) break;
	case ML_OP_SUB: if (j->row_first) { RB_LOOP(y - x) } else { RB_LOOP(x - y) } break;
	case ML_OP_DIV: if (j->row_first) { RB_LOOP(y / x) } else { RB_LOOP(x / y) } break;
	default: break;
	}
}

/* rowbcast: the loop above when it applies; 1 when not */
static int
rowbcast(enum ml_op op, const struct ml_tval *const *ins, struct ml_tval *out)
{
	if ((op != ML_OP_ADD && op != ML_OP_SUB && op != ML_OP_MUL && op != ML_OP_DIV) ||
	    ins[0]->dtype != ML_F32 || out->dtype != ML_F32)
		return 1;
	struct bview v;
	bview_init(&v, out, 2, ins);
	if (v.rank != 2 || v.dims[1] > 4096)
		return 1;
	int64_t C = v.dims[1];
	int k;
	if (v.st[0][0] == C && v.st[0][1] == 1 && v.st[1][0] == 0 && v.st[1][1] == 1)
		k = 0;
	else if (v.st[1][0] == C && v.st[1][1] == 1 && v.st[0][0] == 0 && v.st[0][1] == 1)
		k = 1;
	else
		return 1;
	struct rbjob j = { .m = ins[k]->data, .r = ins[1 - k]->data, .o = out->data, .C = C,
			   .op = op, .row_first = k == 1 };
	ml_parallel_for(v.dims[0], ML_MAX(1, ML_GRAIN / C), rb_rows, &j);
	return 0;
}

/* Binary ops with inputs of one dtype: arithmetic, comparisons, logic, bits, PRelu. */
static int
run_binary(struct ml_opctx *c)
{
	const struct ml_tval *ins[2] = { c->in[0], c->in[1] };
	enum ml_op op = c->node->op;
	rowfn row;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_binary);
	if (ins[0]->dtype != ins[1]->dtype)
		return ml_opfail(c, ML_EINVAL, "inputs have dtypes %s and %s",
				 ml_dtype_name(ins[0]->dtype), ml_dtype_name(ins[1]->dtype));
	if (op == ML_OP_BITSHIFT) {
		bool left = strcmp(ml_attr_str(c->node, "direction", ""), "LEFT") == 0;
		switch (ins[0]->dtype) {
		case ML_U8: row = left ? r_shl_u8 : r_shr_u8; break;
		case ML_U16: row = left ? r_shl_u16 : r_shr_u16; break;
		case ML_U32: row = left ? r_shl_u32 : r_shr_u32; break;
		case ML_U64: row = left ? r_shl_u64 : r_shr_u64; break;
		default: row = NULL; break;
		}
	} else {
		row = bin_row(op, ins[0]->dtype, ml_attr_int(c->node, "fmod", 0) != 0);
	}
	if (row == NULL)
		return unsupported(c, ins[0]->dtype);
	if (ml_tval_numel(c->out[0]) > 0 && rowbcast(op, ins, c->out[0]) == 0)
		return 0;
	run_bcast(row, 2, ins, c->out[0]);
	return 0;
}

int
ml_cpu_tmp_convert(struct ml_tval *dst, const struct ml_tval *src, enum ml_dtype dt,
		   struct ml_err *e)
{
	ML_TRY(ml_tval_alloc(dst, dt, src->rank, src->dims, e));
	if (ml_convert(dst->data, dt, src->data, src->dtype, ml_tval_numel(src)) < 0) {
		ml_tval_clear(dst);
		return ml_fail(e, ML_ENOTSUP, "cannot convert %s to %s", ml_dtype_name(src->dtype),
			       ml_dtype_name(dt));
	}
	return 0;
}

/*
 * Pow: the base's dtype is the output's. A float base takes the exponent
 * converted to its type. An integer base with an integer exponent is
 * computed exactly; with a float exponent, in f64, then truncated.
 */
static int
run_pow(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *y = c->in[1];
	struct ml_tval *o = c->out[0];
	struct ml_tval ty = { 0 }, tx = { 0 }, to = { 0 };
	const struct ml_tval *ins[2] = { x, y };
	int rc = 0;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_pow);
	bool fbase = x->dtype == ML_F32 || x->dtype == ML_F64;
	if (!fbase && x->dtype != ML_I32 && x->dtype != ML_I64)
		return unsupported(c, x->dtype);
	if (!ml_dtype_is_float(y->dtype) && !ml_dtype_is_int(y->dtype))
		return unsupported(c, y->dtype);
	if (fbase || !ml_dtype_is_float(y->dtype)) {
		if (y->dtype != x->dtype) {
			if ((rc = ml_cpu_tmp_convert(&ty, y, x->dtype, c->err)) < 0)
				goto out;
			ins[1] = &ty;
		}
		rowfn row = x->dtype == ML_F32 ? r_pow_f32 : x->dtype == ML_F64 ? r_pow_f64 :
			    x->dtype == ML_I32 ? r_pow_i32 : r_pow_i64;
		/* x^2 is common (decomposed norms) and much cheaper than powf */
		if (x->dtype == ML_F32 && ml_tval_numel(ins[1]) == 1 &&
		    ((const float *)ins[1]->data)[0] == 2.0f)
			row = r_sq_f32;
		if (x->dtype == ML_F64 && ml_tval_numel(ins[1]) == 1 &&
		    ((const double *)ins[1]->data)[0] == 2.0)
			row = r_sq_f64;
		run_bcast(row, 2, ins, o);
		goto out;
	}
	if ((rc = ml_cpu_tmp_convert(&tx, x, ML_F64, c->err)) < 0 ||
	    (rc = ml_cpu_tmp_convert(&ty, y, ML_F64, c->err)) < 0 ||
	    (rc = ml_tval_alloc(&to, ML_F64, o->rank, o->dims, c->err)) < 0)
		goto out;
	ins[0] = &tx;
	ins[1] = &ty;
	run_bcast(r_pow_f64, 2, ins, &to);
	rc = ml_convert(o->data, o->dtype, to.data, ML_F64, ml_tval_numel(o));
out:
	ml_tval_clear(&tx);
	ml_tval_clear(&ty);
	ml_tval_clear(&to);
	return rc;
}

/*
 * Max, Min, Sum and Mean over any number of inputs: the first pair is
 * written to the output, and each further input is folded into it in
 * place (the output has the full broadcast shape). Mean divides at the end.
 */
static int
run_variadic(struct ml_opctx *c)
{
	struct ml_tval *o = c->out[0];
	enum ml_op op = c->node->op;
	int64_t n = ml_tval_numel(o);

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_variadic);
	for (int i = 1; i < c->n_in; i++)
		if (c->in[i]->dtype != c->in[0]->dtype)
			return ml_opfail(c, ML_EINVAL, "inputs have dtypes %s and %s",
					 ml_dtype_name(c->in[0]->dtype),
					 ml_dtype_name(c->in[i]->dtype));
	rowfn row = bin_row(op, o->dtype, false);
	if (row == NULL || (op == ML_OP_MEAN && o->dtype != ML_F32 && o->dtype != ML_F64))
		return unsupported(c, o->dtype);
	if (c->n_in == 1) {
		/* one input: a copy, broadcast as max with itself would be */
		const struct ml_tval *ins[2] = { c->in[0], c->in[0] };
		run_bcast(bin_row(ML_OP_MAX, o->dtype, false), 2, ins, o);
		return 0;
	}
	const struct ml_tval *ins[2] = { c->in[0], c->in[1] };
	run_bcast(row, 2, ins, o);
	for (int i = 2; i < c->n_in; i++) {
		ins[0] = o;
		ins[1] = c->in[i];
		run_bcast(row, 2, ins, o);
	}
	if (op == ML_OP_MEAN) {
		if (o->dtype == ML_F32) {
			float *p = o->data, s = 1.0f / (float)c->n_in;
			for (int64_t i = 0; i < n; i++)
				p[i] *= s;
		} else {
			double *p = o->data, s = 1.0 / c->n_in;
			for (int64_t i = 0; i < n; i++)
				p[i] *= s;
		}
	}
	return 0;
}

/* Where selects by element size only, so it serves every dtype. */
#define WROW(NAME, T) \
static void \
NAME(void *o_, const void *const *in, const int *s, int64_t n) \
{ \
	T *o = o_; \
	const uint8_t *cd = in[0]; \
	const T *x = in[1], *y = in[2]; \
	if (s[0] && s[1] && s[2]) { \
		for (int64_t i = 0; i < n; i++) \
			o[i] = cd[i] ? x[i] : y[i]; \
	} else { \
		for (int64_t i = 0; i < n; i++) \
			o[i] = cd[i * s[0]] ? x[i * s[1]] : y[i * s[2]]; \
	} \
}
WROW(w_8, uint8_t)
WROW(w_16, uint16_t)
WROW(w_32, uint32_t)
WROW(w_64, uint64_t)

static int
run_where(struct ml_opctx *c)
{
	const struct ml_tval *ins[3] = { c->in[0], c->in[1], c->in[2] };
	rowfn row;

	if (ins[0]->dtype != ML_BOOL)
		return ml_opfail(c, ML_EINVAL, "the condition must be bool");
	if (ins[1]->dtype != ins[2]->dtype)
		return ml_opfail(c, ML_EINVAL, "x and y have dtypes %s and %s",
				 ml_dtype_name(ins[1]->dtype), ml_dtype_name(ins[2]->dtype));
	switch (ml_dtype_size(ins[1]->dtype)) {
	case 1: row = w_8; break;
	case 2: row = w_16; break;
	case 4: row = w_32; break;
	case 8: row = w_64; break;
	default: return unsupported(c, ins[1]->dtype);
	}
	run_bcast(row, 3, ins, c->out[0]);
	return 0;
}

/*
 * Cast: ml_convert over chunks in parallel, with direct loops for the
 * conversions real models are full of (masks and indices to and from
 * f32). Floats to integers truncate toward zero; out-of-range values and
 * NaN saturate as ml_convert does.
 */
struct castjob {
	void *o;
	const void *x;
	enum ml_dtype ot, xt;
};

static void
cast_chunk(void *ctx, int64_t b, int64_t e)
{
	const struct castjob *j = ctx;
	size_t os = ml_dtype_size(j->ot), xs = ml_dtype_size(j->xt);
	char *o = (char *)j->o + b * (int64_t)os;
	const char *x = (const char *)j->x + b * (int64_t)xs;
	int64_t n = e - b;

	if (j->xt == ML_I64 && j->ot == ML_F32) {
		for (int64_t i = 0; i < n; i++)
			((float *)o)[i] = (float)((const int64_t *)x)[i];
	} else if (j->xt == ML_I32 && j->ot == ML_F32) {
		for (int64_t i = 0; i < n; i++)
			((float *)o)[i] = (float)((const int32_t *)x)[i];
	} else if ((j->xt == ML_BOOL || j->xt == ML_U8) && j->ot == ML_F32) {
		for (int64_t i = 0; i < n; i++)
			((float *)o)[i] = (float)((const uint8_t *)x)[i];
	} else if (j->xt == ML_F32 && j->ot == ML_BOOL) {
		for (int64_t i = 0; i < n; i++)
			((uint8_t *)o)[i] = ((const float *)x)[i] != 0;
	} else if (j->xt == ML_I64 && j->ot == ML_I32) {
		for (int64_t i = 0; i < n; i++)
			((int32_t *)o)[i] = (int32_t)((const int64_t *)x)[i];
	} else if (j->xt == ML_I32 && j->ot == ML_I64) {
		for (int64_t i = 0; i < n; i++)
			((int64_t *)o)[i] = ((const int32_t *)x)[i];
	} else {
		ml_convert(o, j->ot, x, j->xt, n);
	}
}

static int
run_cast(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	struct ml_tval *o = c->out[0];
	struct castjob j = { o->data, x->data, o->dtype, x->dtype };

	if (x->dtype == ML_STRING || o->dtype == ML_STRING || ml_dtype_size(x->dtype) == 0 ||
	    ml_dtype_size(o->dtype) == 0 || x->dtype == ML_C64 || x->dtype == ML_C128 ||
	    o->dtype == ML_C64 || o->dtype == ML_C128)
		return ml_opfail(c, ML_ENOTSUP, "cast from %s to %s is not supported",
				 ml_dtype_name(x->dtype), ml_dtype_name(o->dtype));
	ml_parallel_for(ml_tval_numel(x), ML_GRAIN, cast_chunk, &j);
	return 0;
}

static bool
is_half(enum ml_dtype t)
{
	return t == ML_F16 || t == ML_BF16;
}

bool
ml_cpu_has_half(const struct ml_opctx *c)
{
	for (int i = 0; i < c->n_in; i++)
		if (c->in[i] != NULL && is_half(c->in[i]->dtype))
			return true;
	for (int i = 0; i < c->n_out; i++)
		if (c->out[i] != NULL && is_half(c->out[i]->dtype))
			return true;
	return false;
}

#define HALF_MAX_IO 16

int
ml_cpu_as_f32(struct ml_opctx *c, int (*fn)(struct ml_opctx *))
{
	struct ml_tval tin[HALF_MAX_IO], tout[HALF_MAX_IO];
	struct ml_tval *pin[HALF_MAX_IO], *pout[HALF_MAX_IO];
	struct ml_opctx c2 = *c;
	int rc = 0;

	if (c->n_in > HALF_MAX_IO || c->n_out > HALF_MAX_IO)
		return ml_opfail(c, ML_ENOTSUP, "f16 with more than %d inputs", HALF_MAX_IO);
	memset(tin, 0, sizeof tin);
	memset(tout, 0, sizeof tout);
	for (int i = 0; i < c->n_in; i++) {
		pin[i] = c->in[i];
		if (pin[i] != NULL && is_half(pin[i]->dtype)) {
			if ((rc = ml_cpu_tmp_convert(&tin[i], pin[i], ML_F32, c->err)) < 0)
				goto out;
			pin[i] = &tin[i];
		}
	}
	for (int i = 0; i < c->n_out; i++) {
		pout[i] = c->out[i];
		if (pout[i] != NULL && is_half(pout[i]->dtype)) {
			if ((rc = ml_tval_alloc(&tout[i], ML_F32, pout[i]->rank, pout[i]->dims,
						c->err)) < 0)
				goto out;
			pout[i] = &tout[i];
		}
	}
	c2.in = pin;
	c2.out = pout;
	if ((rc = fn(&c2)) < 0)
		goto out;
	for (int i = 0; i < c->n_out; i++)
		if (pout[i] == &tout[i])
			ml_convert(c->out[i]->data, c->out[i]->dtype, tout[i].data, ML_F32,
				   ml_tval_numel(&tout[i]));
out:
	for (int i = 0; i < HALF_MAX_IO; i++) {
		ml_tval_clear(&tin[i]);
		ml_tval_clear(&tout[i]);
	}
	return rc;
}

#define K(id, fn) { ML_OP_##id, fn }

const struct ml_cpu_kernel ml_cpu_elem[] = {
	K(ABS, ml_cpu_unary), K(NEG, ml_cpu_unary), K(EXP, ml_cpu_unary), K(LOG, ml_cpu_unary),
	K(SQRT, ml_cpu_unary), K(RECIPROCAL, ml_cpu_unary), K(FLOOR, ml_cpu_unary),
	K(CEIL, ml_cpu_unary), K(ROUND, ml_cpu_unary), K(SIGN, ml_cpu_unary),
	K(ERF, ml_cpu_unary), K(SIN, ml_cpu_unary), K(COS, ml_cpu_unary), K(TAN, ml_cpu_unary),
	K(ASIN, ml_cpu_unary), K(ACOS, ml_cpu_unary), K(ATAN, ml_cpu_unary),
	K(SINH, ml_cpu_unary), K(COSH, ml_cpu_unary), K(ASINH, ml_cpu_unary),
	K(ACOSH, ml_cpu_unary), K(ATANH, ml_cpu_unary), K(NOT, ml_cpu_unary),
	K(ISNAN, ml_cpu_unary), K(ISINF, ml_cpu_unary), K(BITWISE_NOT, ml_cpu_unary),
	K(RELU, ml_cpu_unary), K(LEAKY_RELU, ml_cpu_unary), K(ELU, ml_cpu_unary),
	K(SELU, ml_cpu_unary), K(CELU, ml_cpu_unary), K(SIGMOID, ml_cpu_unary),
	K(HARD_SIGMOID, ml_cpu_unary), K(HARD_SWISH, ml_cpu_unary), K(TANH, ml_cpu_unary),
	K(SOFTPLUS, ml_cpu_unary), K(SOFTSIGN, ml_cpu_unary), K(THRESHOLDED_RELU, ml_cpu_unary),
	K(GELU, ml_cpu_unary), K(SILU, ml_cpu_unary), K(SHRINK, ml_cpu_unary),
	K(CLIP, ml_cpu_clip),
	K(PRELU, run_binary),
	K(ADD, run_binary), K(SUB, run_binary), K(MUL, run_binary), K(DIV, run_binary),
	K(POW, run_pow), K(MOD, run_binary),
	K(MAX, run_variadic), K(MIN, run_variadic), K(SUM, run_variadic), K(MEAN, run_variadic),
	K(EQUAL, run_binary), K(LESS, run_binary), K(LESS_OR_EQUAL, run_binary),
	K(GREATER, run_binary), K(GREATER_OR_EQUAL, run_binary),
	K(AND, run_binary), K(OR, run_binary), K(XOR, run_binary),
	K(BITWISE_AND, run_binary), K(BITWISE_OR, run_binary), K(BITWISE_XOR, run_binary),
	K(BITSHIFT, run_binary),
	K(WHERE, run_where),
	K(CAST, run_cast), K(CAST_LIKE, run_cast),
	{ .op = ML_OP_NONE },
};
