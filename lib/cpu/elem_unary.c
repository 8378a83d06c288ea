/*
 * elem_unary.c: CPU kernels of the elementwise unary ops, the activations
 * and Clip. Each float op is one expression instantiated for f32 and f64
 * through <tgmath.h>; f16 and bf16 run as f32 (ml_cpu_as_f32). The loops
 * are plain counted loops over contiguous data, which GCC vectorises
 * where the expression allows it.
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

/* The vectorisable f32 exp, tanh and erfc of fastmath.h, and libm's for f64. */
#define FEXP(v) _Generic((v), float: ml_expf, default: (exp))(v)
#define FTANH(v) _Generic((v), float: ml_tanhf, default: (tanh))(v)
#define FERFC(v) _Generic((v), float: ml_erfcf, default: (erfc))(v)

/* The attributes of an activation, in the names ONNX gives them. */
struct uparm {
	double alpha, beta, gamma;
	int det_neg, det_pos;
};

typedef void (*unfn)(void *o, const void *x, int64_t n, const struct uparm *p);

/*
 * The float ops: X(NAME, EXPR) with the input element `v` and the
 * attributes `a` (alpha or lambd), `b` (beta or bias) and `g` (gamma), all
 * of the element type T. Constants are cast to T so f32 stays f32.
 */
#define CLAMP01(e) ((e) < (T)0 ? (T)0 : (e) > (T)1 ? (T)1 : (e))
#define FLOAT_UNARY(X) \
	X(ABS, fabs(v)) \
	X(NEG, -v) \
	X(EXP, FEXP(v)) \
	X(LOG, log(v)) \
	X(SQRT, sqrt(v)) \
	X(RECIPROCAL, (T)1 / v) \
	X(FLOOR, floor(v)) \
	X(CEIL, ceil(v)) \
	X(ROUND, rint(v)) \
	X(SIGN, v > 0 ? (T)1 : v < 0 ? (T)-1 : v) \
	X(ERF, erf(v)) \
	X(SIN, sin(v)) \
	X(COS, cos(v)) \
	X(TAN, tan(v)) \
	X(ASIN, asin(v)) \
	X(ACOS, acos(v)) \
	X(ATAN, atan(v)) \
	X(SINH, sinh(v)) \
	X(COSH, cosh(v)) \
	X(ASINH, asinh(v)) \
	X(ACOSH, acosh(v)) \
	X(ATANH, atanh(v)) \
	X(RELU, v < 0 ? (T)0 : v) \
	X(LEAKY_RELU, v < 0 ? a * v : v) \
	X(ELU, v < 0 ? a * expm1(v) : v) \
	X(SELU, v <= 0 ? g * (a * exp(v) - a) : g * v) \
	X(CELU, v > 0 ? v : a * expm1(v / a)) \
	X(SIGMOID, (T)1 / ((T)1 + FEXP(-v))) \
	X(HARD_SIGMOID, CLAMP01(a * v + b)) \
	X(HARD_SWISH, v * CLAMP01(v * (T)(1.0 / 6) + (T)0.5)) \
	X(TANH, FTANH(v)) \
	X(SOFTPLUS, v > 0 ? v + log1p(exp(-v)) : log1p(exp(v))) \
	X(SOFTSIGN, v / ((T)1 + fabs(v))) \
	X(THRESHOLDED_RELU, v > a ? v : (T)0) \
	X(GELU, (T)0.5 * v * FERFC(-v * (T)M_SQRT1_2)) \
	X(SILU, v / ((T)1 + FEXP(-v))) \
	X(SHRINK, v < -a ? v + b : v > a ? v - b : (T)0)

/* Gelu with approximate="tanh" is not an op of its own, so it is listed apart. */
#define GELU_TANH_EXPR \
	((T)0.5 * v * ((T)1 + FTANH((T)0.7978845608028654 * (v + (T)0.044715 * v * v * v))))

#define DEF_UNARY(NAME, TT, SUF, EXPR) \
static void \
un_##NAME##_##SUF(void *o_, const void *x_, int64_t n, const struct uparm *p) \
{ \
	typedef TT T; \
	T *o = o_; \
	const T *x = x_; \
	const T a = (T)p->alpha, b = (T)p->beta, g = (T)p->gamma; \
	(void)a; (void)b; (void)g; \
	for (int64_t i = 0; i < n; i++) { \
		const T v = x[i]; \
		o[i] = (EXPR); \
	} \
}

#define X(NAME, EXPR) DEF_UNARY(NAME, float, f32, EXPR) DEF_UNARY(NAME, double, f64, EXPR)
FLOAT_UNARY(X)
X(GELU_TANH, GELU_TANH_EXPR)
#undef X

/*
 * SIMD builds of the two activations CNNs run after every convolution
 * (Relu, and Clip as ReLU6): the library is compiled for x86-64-v2, so
 * these get AVX2 and AVX-512 clones, picked at load time.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define UN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define UN_CLONES
#endif

UN_CLONES static void
un_relu_simd_f32(void *o_, const void *x_, int64_t n, const struct uparm *p)
{
	float *o = o_;
	const float *x = x_;
	(void)p;
	for (int64_t i = 0; i < n; i++)
		o[i] = x[i] < 0 ? 0.0f : x[i];
}

/* Sigmoid, Tanh, SiLU, GELU (exact) and Exp on f32: vmath.c's vector loops. */
#define DEF_VUNARY(NAME, UN) \
static void \
NAME(void *o, const void *x, int64_t n, const struct uparm *p) \
{ \
	(void)p; \
	ml_vunary(UN, o, x, n); \
}
DEF_VUNARY(un_vsigmoid_f32, ML_UN_SIGMOID)
DEF_VUNARY(un_vtanh_f32, ML_UN_TANH)
DEF_VUNARY(un_vsilu_f32, ML_UN_SILU)
DEF_VUNARY(un_vgelu_f32, ML_UN_GELU)
DEF_VUNARY(un_vexp_f32, ML_UN_EXP)

/* IsNaN and IsInf read floats and write bool. */
#define DEF_CLASSIFY(T, SUF) \
static void \
un_ISNAN_##SUF(void *o_, const void *x_, int64_t n, const struct uparm *p) \
{ \
	uint8_t *o = o_; \
	const T *x = x_; \
	(void)p; \
	for (int64_t i = 0; i < n; i++) \
		o[i] = x[i] != x[i]; \
} \
static void \
un_ISINF_##SUF(void *o_, const void *x_, int64_t n, const struct uparm *p) \
{ \
	uint8_t *o = o_; \
	const T *x = x_; \
	for (int64_t i = 0; i < n; i++) \
		o[i] = (p->det_pos && x[i] == (T)INFINITY) || (p->det_neg && x[i] == -(T)INFINITY); \
}
DEF_CLASSIFY(float, f32)
DEF_CLASSIFY(double, f64)

/*
 * Integer ops. Negation goes through uint64_t so that the most negative
 * value wraps, as numpy does, instead of overflowing.
 */
#define DEF_SINT(T, SUF) \
static void un_ABS_##SUF(void *o_, const void *x_, int64_t n, const struct uparm *p) \
{ \
	T *o = o_; const T *x = x_; (void)p; \
	for (int64_t i = 0; i < n; i++) \
		o[i] = x[i] < 0 ? (T)(0 - (uint64_t)x[i]) : x[i]; \
} \
static void un_NEG_##SUF(void *o_, const void *x_, int64_t n, const struct uparm *p) \
{ \
	T *o = o_; const T *x = x_; (void)p; \
	for (int64_t i = 0; i < n; i++) \
		o[i] = (T)(0 - (uint64_t)x[i]); \
} \
static void un_SIGN_##SUF(void *o_, const void *x_, int64_t n, const struct uparm *p) \
{ \
	T *o = o_; const T *x = x_; (void)p; \
	for (int64_t i = 0; i < n; i++) \
		o[i] = (T)((x[i] > 0) - (x[i] < 0)); \
} \
static void un_RELU_##SUF(void *o_, const void *x_, int64_t n, const struct uparm *p) \
{ \
	T *o = o_; const T *x = x_; (void)p; \
	for (int64_t i = 0; i < n; i++) \
		o[i] = x[i] < 0 ? 0 : x[i]; \
}
#define DEF_UINT(T, SUF) \
static void un_NEG_##SUF(void *o_, const void *x_, int64_t n, const struct uparm *p) \
{ \
	T *o = o_; const T *x = x_; (void)p; \
	for (int64_t i = 0; i < n; i++) \
		o[i] = (T)(0 - (uint64_t)x[i]); \
} \
static void un_SIGN_##SUF(void *o_, const void *x_, int64_t n, const struct uparm *p) \
{ \
	T *o = o_; const T *x = x_; (void)p; \
	for (int64_t i = 0; i < n; i++) \
		o[i] = x[i] != 0; \
}
DEF_SINT(int8_t, i8)
DEF_SINT(int16_t, i16)
DEF_SINT(int32_t, i32)
DEF_SINT(int64_t, i64)
DEF_UINT(uint8_t, u8)
DEF_UINT(uint16_t, u16)
DEF_UINT(uint32_t, u32)
DEF_UINT(uint64_t, u64)

/* Bitwise Not depends only on the element size; Not on bool is !x. */
#define DEF_BNOT(T, SUF) \
static void un_BNOT_##SUF(void *o_, const void *x_, int64_t n, const struct uparm *p) \
{ \
	T *o = o_; const T *x = x_; (void)p; \
	for (int64_t i = 0; i < n; i++) \
		o[i] = (T)~x[i]; \
}
DEF_BNOT(uint8_t, 8)
DEF_BNOT(uint16_t, 16)
DEF_BNOT(uint32_t, 32)
DEF_BNOT(uint64_t, 64)

static void
un_NOT_bool(void *o_, const void *x_, int64_t n, const struct uparm *p)
{
	uint8_t *o = o_;
	const uint8_t *x = x_;
	(void)p;
	for (int64_t i = 0; i < n; i++)
		o[i] = !x[i];
}

/* ABS and RELU of unsigned values are copies. */
static void
un_copy(void *o, const void *x, int64_t n, const struct uparm *p)
{
	(void)p;
	if (o != x && n > 0)
		memcpy(o, x, (size_t)n);
}

/*
 * lookup: the kernel of op for dtype t, or NULL. un_copy takes a byte
 * count, so lookup reports the byte scale in *scale (1 otherwise).
 */
static unfn
lookup(enum ml_op op, enum ml_dtype t, bool gelu_tanh, int64_t *scale)
{
	*scale = 1;
	if (t == ML_F32 || t == ML_F64) {
		bool d = t == ML_F64;
		if (op == ML_OP_GELU && gelu_tanh)
			return d ? un_GELU_TANH_f64 : un_GELU_TANH_f32;
		if (op == ML_OP_RELU && !d)
			return un_relu_simd_f32;
		if (!d) {
			switch (op) {
			case ML_OP_SIGMOID: return un_vsigmoid_f32;
			case ML_OP_TANH: return un_vtanh_f32;
			case ML_OP_SILU: return un_vsilu_f32;
			case ML_OP_GELU: return un_vgelu_f32;
			case ML_OP_EXP: return un_vexp_f32;
			default: break;
			}
		}
		switch (op) {
#define X(NAME, EXPR) case ML_OP_##NAME: return d ? un_##NAME##_f64 : un_##NAME##_f32;
		FLOAT_UNARY(X)
#undef X
		case ML_OP_ISNAN:
			return d ? un_ISNAN_f64 : un_ISNAN_f32;
		case ML_OP_ISINF:
			return d ? un_ISINF_f64 : un_ISINF_f32;
		default:
			return NULL;
		}
	}
	if (op == ML_OP_NOT)
		return t == ML_BOOL ? un_NOT_bool : NULL;
	if (op == ML_OP_BITWISE_NOT && ml_dtype_is_int(t)) {
		switch (ml_dtype_size(t)) {
		case 1: return un_BNOT_8;
		case 2: return un_BNOT_16;
		case 4: return un_BNOT_32;
		default: return un_BNOT_64;
		}
	}
	switch (t) {
#define SCASE(T, SUF, DT) \
	case DT: \
		switch (op) { \
		case ML_OP_ABS: return un_ABS_##SUF; \
		case ML_OP_NEG: return un_NEG_##SUF; \
		case ML_OP_SIGN: return un_SIGN_##SUF; \
		case ML_OP_RELU: return un_RELU_##SUF; \
		default: return NULL; \
		}
#define UCASE(T, SUF, DT) \
	case DT: \
		switch (op) { \
		case ML_OP_ABS: case ML_OP_RELU: *scale = sizeof(T); return un_copy; \
		case ML_OP_NEG: return un_NEG_##SUF; \
		case ML_OP_SIGN: return un_SIGN_##SUF; \
		default: return NULL; \
		}
	SCASE(int8_t, i8, ML_I8)
	SCASE(int16_t, i16, ML_I16)
	SCASE(int32_t, i32, ML_I32)
	SCASE(int64_t, i64, ML_I64)
	UCASE(uint8_t, u8, ML_U8)
	UCASE(uint16_t, u16, ML_U16)
	UCASE(uint32_t, u32, ML_U32)
	UCASE(uint64_t, u64, ML_U64)
#undef SCASE
#undef UCASE
	default:
		return NULL;
	}
}

struct ujob {
	unfn fn;
	char *o;
	const char *x;
	size_t osz, xsz;
	int64_t scale;
	struct uparm p;
};

static void
ujob_chunk(void *ctx, int64_t b, int64_t e)
{
	const struct ujob *j = ctx;
	j->fn(j->o + b * j->osz, j->x + b * j->xsz, (e - b) * j->scale, &j->p);
}

/* The attribute defaults are ONNX's. */
static void
get_parm(const struct ml_node *nd, struct uparm *p)
{
	double a = 0, b = 0, g = 0;

	switch (nd->op) {
	case ML_OP_LEAKY_RELU: a = 0.01; break;
	case ML_OP_ELU: case ML_OP_CELU: case ML_OP_THRESHOLDED_RELU: a = 1.0; break;
	case ML_OP_SELU: a = 1.67326319217681884765625; g = 1.05070102214813232421875; break;
	case ML_OP_HARD_SIGMOID: a = 0.2; b = 0.5; break;
	default: break;
	}
	if (nd->op == ML_OP_SHRINK) {
		p->alpha = ml_attr_float(nd, "lambd", 0.5);
		p->beta = ml_attr_float(nd, "bias", 0.0);
	} else {
		p->alpha = ml_attr_float(nd, "alpha", a);
		p->beta = ml_attr_float(nd, "beta", b);
	}
	p->gamma = ml_attr_float(nd, "gamma", g);
	p->det_neg = ml_attr_int(nd, "detect_negative", 1) != 0;
	p->det_pos = ml_attr_int(nd, "detect_positive", 1) != 0;
}

int
ml_cpu_unary(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	struct ml_tval *o = c->out[0];
	struct ujob j;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_unary);
	bool gt = c->node->op == ML_OP_GELU &&
		  strcmp(ml_attr_str(c->node, "approximate", "none"), "tanh") == 0;
	j.fn = lookup(c->node->op, x->dtype, gt, &j.scale);
	if (j.fn == NULL)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(x->dtype));
	if (c->node->op == ML_OP_CELU && ml_attr_float(c->node, "alpha", 1.0) == 0)
		return ml_opfail(c, ML_EINVAL, "alpha must not be 0");
	get_parm(c->node, &j.p);
	j.o = o->data;
	j.x = x->data;
	j.osz = ml_dtype_size(o->dtype);
	j.xsz = ml_dtype_size(x->dtype);
	ml_parallel_for(ml_tval_numel(x), ML_GRAIN, ujob_chunk, &j);
	return 0;
}

/*
 * Clip: bounds from inputs 1 and 2 (opset 11+, either may be omitted) or
 * from the min/max attributes (before 11, floats only). The order of the
 * two comparisons makes min > max give max, as ONNX's min(max(x, lo), hi).
 */
#define DEF_CLIP(T, SUF) \
UN_CLONES static void \
clip_##SUF(void *o_, const void *x_, int64_t n, T lo, T hi) \
{ \
	T *o = o_; \
	const T *x = x_; \
	for (int64_t i = 0; i < n; i++) { \
		T v = x[i] < lo ? lo : x[i]; \
		o[i] = v > hi ? hi : v; \
	} \
}
#define CLIP_TYPES(X) \
	X(float, f32, ML_F32, -FLT_MAX, FLT_MAX) \
	X(double, f64, ML_F64, -DBL_MAX, DBL_MAX) \
	X(int8_t, i8, ML_I8, INT8_MIN, INT8_MAX) \
	X(int16_t, i16, ML_I16, INT16_MIN, INT16_MAX) \
	X(int32_t, i32, ML_I32, INT32_MIN, INT32_MAX) \
	X(int64_t, i64, ML_I64, INT64_MIN, INT64_MAX) \
	X(uint8_t, u8, ML_U8, 0, UINT8_MAX) \
	X(uint16_t, u16, ML_U16, 0, UINT16_MAX) \
	X(uint32_t, u32, ML_U32, 0, UINT32_MAX) \
	X(uint64_t, u64, ML_U64, 0, UINT64_MAX)
#define X(T, SUF, DT, LO, HI) DEF_CLIP(T, SUF)
CLIP_TYPES(X)
#undef X

struct cjob {
	enum ml_dtype dt;
	char *o;
	const char *x;
	size_t sz;
	union {
		float f32; double f64;
		int8_t i8; int16_t i16; int32_t i32; int64_t i64;
		uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
	} lo, hi;
};

static void
cjob_chunk(void *ctx, int64_t b, int64_t e)
{
	const struct cjob *j = ctx;
	void *o = j->o + b * j->sz;
	const void *x = j->x + b * j->sz;

	switch (j->dt) {
#define X(T, SUF, DT, LO, HI) case DT: clip_##SUF(o, x, e - b, j->lo.SUF, j->hi.SUF); break;
	CLIP_TYPES(X)
#undef X
	default:
		break;
	}
}

int
ml_cpu_clip(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	const struct ml_tval *lo = ML_IN(c, 1), *hi = ML_IN(c, 2);
	struct cjob j = { .dt = x->dtype, .o = c->out[0]->data, .x = x->data };

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_clip);
	for (int i = 1; i < 3; i++) {
		const struct ml_tval *b = ML_IN(c, i);
		if (b != NULL && (b->dtype != x->dtype || ml_tval_numel(b) < 1))
			return ml_opfail(c, ML_EINVAL, "input %d must be a scalar of x's dtype", i);
	}
	switch (x->dtype) {
#define X(T, SUF, DT, LO, HI) \
	case DT: \
		j.lo.SUF = lo != NULL ? ((const T *)lo->data)[0] : (T)(LO); \
		j.hi.SUF = hi != NULL ? ((const T *)hi->data)[0] : (T)(HI); \
		break;
	CLIP_TYPES(X)
#undef X
	default:
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(x->dtype));
	}
	if (c->opset < 11) {
		if (x->dtype == ML_F32) {
			j.lo.f32 = (float)ml_attr_float(c->node, "min", -FLT_MAX);
			j.hi.f32 = (float)ml_attr_float(c->node, "max", FLT_MAX);
		} else if (x->dtype == ML_F64) {
			j.lo.f64 = ml_attr_float(c->node, "min", -DBL_MAX);
			j.hi.f64 = ml_attr_float(c->node, "max", DBL_MAX);
		}
	}
	j.sz = ml_dtype_size(x->dtype);
	ml_parallel_for(ml_tval_numel(x), ML_GRAIN, cjob_chunk, &j);
	return 0;
}
