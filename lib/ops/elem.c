/*
 * elem.c: definitions of the elem op family: elementwise unary ops and
 * activations, binary and variadic ops with numpy broadcasting,
 * comparisons, logical and bit ops, Where and Cast. Inference checks each
 * op's dtype class, which must agree with what lib/cpu/elem*.c can run.
 */
#include "ml_impl.h"

/*
 * Dtype classes. FLOAT takes f16/bf16 too (the kernels compute those in
 * f32); NUM is every fixed-size numeric type; INT the integers; UINT the
 * unsigned ones (BitShift); BOOL only bool; ANY anything with a size.
 */
enum dclass { D_FLOAT, D_NUM, D_NUMB, D_INT, D_UINT, D_BOOL, D_ANY };

static bool
in_class(enum ml_dtype t, enum dclass k)
{
	switch (k) {
	case D_FLOAT:
		return ml_dtype_is_float(t);
	case D_NUM:
		return ml_dtype_is_float(t) || ml_dtype_is_int(t);
	case D_NUMB:
		return ml_dtype_is_float(t) || ml_dtype_is_int(t) || t == ML_BOOL;
	case D_INT:
		return ml_dtype_is_int(t);
	case D_UINT:
		return t == ML_U8 || t == ML_U16 || t == ML_U32 || t == ML_U64;
	case D_BOOL:
		return t == ML_BOOL;
	case D_ANY:
		return ml_dtype_size(t) > 0 && t != ML_C64 && t != ML_C128;
	}
	return false;
}

/*
 * check_class: fail with ML_ENOTSUP unless t is in class k. An unknown
 * dtype (ML_UNDEF, possible in static inference of a partial graph) passes.
 */
static int
check_class(struct ml_opctx *c, const struct ml_tval *t, int idx, enum dclass k)
{
	if (t->dtype == ML_UNDEF || in_class(t->dtype, k))
		return 0;
	return ml_opfail(c, ML_ENOTSUP, "input %d has unsupported dtype %s", idx,
			 ml_dtype_name(t->dtype));
}

static enum dclass
op_class(enum ml_op op)
{
	switch (op) {
	case ML_OP_ABS: case ML_OP_NEG: case ML_OP_SIGN: case ML_OP_RELU: case ML_OP_CLIP:
	case ML_OP_ADD: case ML_OP_SUB: case ML_OP_MUL: case ML_OP_DIV: case ML_OP_MOD:
	case ML_OP_MAX: case ML_OP_MIN: case ML_OP_SUM: case ML_OP_POW: case ML_OP_PRELU:
	case ML_OP_LESS: case ML_OP_LESS_OR_EQUAL: case ML_OP_GREATER:
	case ML_OP_GREATER_OR_EQUAL:
		return D_NUM;
	case ML_OP_EQUAL:
		return D_NUMB;
	case ML_OP_NOT: case ML_OP_AND: case ML_OP_OR: case ML_OP_XOR:
		return D_BOOL;
	case ML_OP_BITWISE_NOT: case ML_OP_BITWISE_AND: case ML_OP_BITWISE_OR:
	case ML_OP_BITWISE_XOR:
		return D_INT;
	case ML_OP_BITSHIFT:
		return D_UINT;
	case ML_OP_CAST: case ML_OP_CAST_LIKE: case ML_OP_WHERE:
		return D_ANY;
	default:
		return D_FLOAT;
	}
}

static bool
bool_out(enum ml_op op)
{
	switch (op) {
	case ML_OP_ISNAN: case ML_OP_ISINF: case ML_OP_EQUAL: case ML_OP_LESS:
	case ML_OP_LESS_OR_EQUAL: case ML_OP_GREATER: case ML_OP_GREATER_OR_EQUAL:
		return true;
	default:
		return false;
	}
}

static int
need(struct ml_opctx *c, int i)
{
	if (ML_IN(c, i) == NULL)
		return ml_opfail(c, ML_EINVAL, "input %d is required", i);
	return 0;
}

/* Unary ops and activations: the output has the input's shape. */
static int
infer_unary(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	const struct ml_tval *x = c->in[0];
	ML_TRY(check_class(c, x, 0, op_class(c->node->op)));
	ml_set_shape(c->out[0], bool_out(c->node->op) ? ML_BOOL : x->dtype, x->rank, x->dims);
	if (c->node->op == ML_OP_GELU) {
		const char *a = ml_attr_str(c->node, "approximate", "none");
		if (strcmp(a, "none") != 0 && strcmp(a, "tanh") != 0)
			return ml_opfail(c, ML_EINVAL,
					 "approximate must be \"none\" or \"tanh\", not \"%s\"", a);
	}
	return 0;
}

/* Clip: optional min and max inputs (opset 11+) are scalars of x's dtype. */
static int
infer_clip(struct ml_opctx *c)
{
	ML_TRY(infer_unary(c));
	for (int i = 1; i < 3; i++) {
		const struct ml_tval *b = ML_IN(c, i);
		if (b == NULL)
			continue;
		if (b->dtype != ML_UNDEF && c->in[0]->dtype != ML_UNDEF && b->dtype != c->in[0]->dtype)
			return ml_opfail(c, ML_EINVAL, "input %d has dtype %s, not %s", i,
					 ml_dtype_name(b->dtype), ml_dtype_name(c->in[0]->dtype));
		if (ml_tval_numel(b) > 1)
			return ml_opfail(c, ML_EINVAL, "input %d must be a scalar", i);
	}
	return 0;
}

/*
 * Binary and variadic ops: numpy broadcasting over all inputs, which must
 * share a dtype except for Pow, whose exponent may have any numeric type
 * and whose base decides the output type.
 */
static int
infer_nary(struct ml_opctx *c)
{
	enum ml_op op = c->node->op;
	const struct ml_tval *ts[64];
	enum ml_dtype dt = ML_UNDEF;

	if (c->n_in > 64)
		return ml_opfail(c, ML_ENOTSUP, "more than 64 inputs");
	for (int i = 0; i < c->n_in; i++) {
		ML_TRY(need(c, i));
		ts[i] = c->in[i];
		enum dclass k = op_class(op);
		if (op == ML_OP_POW && i == 1)
			k = D_NUM;
		ML_TRY(check_class(c, ts[i], i, k));
		if (op == ML_OP_POW && i == 1)
			continue;
		if (ts[i]->dtype == ML_UNDEF)
			continue;
		if (dt != ML_UNDEF && ts[i]->dtype != dt)
			return ml_opfail(c, ML_EINVAL, "input %d has dtype %s, not %s", i,
					 ml_dtype_name(ts[i]->dtype), ml_dtype_name(dt));
		dt = ts[i]->dtype;
	}
	if (op == ML_OP_POW && c->in[0]->dtype != ML_UNDEF && !ml_dtype_is_float(c->in[0]->dtype) &&
	    c->in[0]->dtype != ML_I32 && c->in[0]->dtype != ML_I64)
		return ml_opfail(c, ML_ENOTSUP, "Pow of a %s base is not supported",
				 ml_dtype_name(c->in[0]->dtype));
	if (op == ML_OP_BITSHIFT) {
		const char *d = ml_attr_str(c->node, "direction", "");
		if (strcmp(d, "LEFT") != 0 && strcmp(d, "RIGHT") != 0)
			return ml_opfail(c, ML_EINVAL, "direction must be LEFT or RIGHT");
	}
	if (op == ML_OP_MOD && ml_attr_int(c->node, "fmod", 0) == 0 && dt != ML_UNDEF &&
	    ml_dtype_is_float(dt))
		return ml_opfail(c, ML_EINVAL, "Mod of floats needs fmod=1");
	struct ml_tval *o = c->out[0];
	if (ml_broadcast_shape(c->n_in, ts, o, c->err) < 0)
		return ml_opfail(c, ML_EINVAL, "%s", c->err != NULL ? c->err->msg : "shapes differ");
	o->dtype = bool_out(op) ? ML_BOOL : dt;
	return 0;
}

/* PRelu: slope broadcasts to x (unidirectionally); the output has x's shape. */
static int
infer_prelu(struct ml_opctx *c)
{
	ML_TRY(infer_nary(c));
	const struct ml_tval *x = c->in[0];
	struct ml_tval *o = c->out[0];
	if (x->rank >= 0 && o->rank >= 0 && o->rank != x->rank)
		return ml_opfail(c, ML_EINVAL, "slope has a higher rank than x");
	return 0;
}

/* Where(cond, x, y): the three broadcast, the output takes x's dtype. */
static int
infer_where(struct ml_opctx *c)
{
	const struct ml_tval *ts[3];

	for (int i = 0; i < 3; i++) {
		ML_TRY(need(c, i));
		ts[i] = c->in[i];
	}
	ML_TRY(check_class(c, ts[0], 0, D_BOOL));
	ML_TRY(check_class(c, ts[1], 1, D_ANY));
	if (ts[1]->dtype != ML_UNDEF && ts[2]->dtype != ML_UNDEF && ts[1]->dtype != ts[2]->dtype)
		return ml_opfail(c, ML_EINVAL, "x is %s but y is %s", ml_dtype_name(ts[1]->dtype),
				 ml_dtype_name(ts[2]->dtype));
	struct ml_tval *o = c->out[0];
	if (ml_broadcast_shape(3, ts, o, c->err) < 0)
		return ml_opfail(c, ML_EINVAL, "%s", c->err != NULL ? c->err->msg : "shapes differ");
	o->dtype = ts[1]->dtype != ML_UNDEF ? ts[1]->dtype : ts[2]->dtype;
	return 0;
}

/* Cast (attribute `to`) and CastLike (the dtype of input 1). */
static int
infer_cast(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	const struct ml_tval *x = c->in[0];
	enum ml_dtype to;

	if (c->node->op == ML_OP_CAST_LIKE) {
		ML_TRY(need(c, 1));
		to = c->in[1]->dtype;
	} else {
		int64_t v = ml_attr_int(c->node, "to", -1);
		if (v <= 0 || v >= ML_DTYPE_MAX)
			return ml_opfail(c, ML_EINVAL, "attribute 'to' is missing or invalid");
		to = (enum ml_dtype)v;
	}
	ML_TRY(check_class(c, x, 0, D_ANY));
	if (to != ML_UNDEF && !in_class(to, D_ANY))
		return ml_opfail(c, ML_ENOTSUP, "cast to %s is not supported", ml_dtype_name(to));
	ml_set_shape(c->out[0], to, x->rank, x->dims);
	return 0;
}

/* Variadic ops cost one op per output element per extra input. */
static int64_t
flops_nary(const struct ml_opctx *c)
{
	int64_t n = ml_tval_numel(c->out[0]);
	return n < 0 ? 0 : n * ML_MAX(1, c->n_in - 1);
}

/*
 * Transcendental activations cost more than one op per element; these are
 * rough counts of what their kernels do, for cost models only.
 */
static int64_t
flops_transc(const struct ml_opctx *c)
{
	int64_t n = ml_tval_numel(c->out[0]);
	return n < 0 ? 0 : n * 8;
}

/*
 * The rows. I: pointwise and safe in place (ML_OPF_INPLACE: the CPU kernel
 * reads element i of input 0 before it writes element i of the output).
 */
#define I ML_OPF_INPLACE
#define UN(id, fl) { ML_OP_##id, 1, 1, 1, 1, infer_unary, NULL, .flags = (fl) }
#define UNT(id, fl) { ML_OP_##id, 1, 1, 1, 1, infer_unary, flops_transc, .flags = (fl) }
#define BIN(id, fl) { ML_OP_##id, 2, 2, 1, 1, infer_nary, NULL, .flags = (fl) }
#define VAR(id) { ML_OP_##id, 1, -1, 1, 1, infer_nary, flops_nary }

const struct ml_opdef ml_opdefs_elem[] = {
	UN(ABS, I), UN(NEG, I), UNT(EXP, I), UNT(LOG, 0), UN(SQRT, I), UN(RECIPROCAL, I),
	UN(FLOOR, 0), UN(CEIL, 0), UN(ROUND, 0), UN(SIGN, 0), UNT(ERF, I), UNT(SIN, 0),
	UNT(COS, 0), UNT(TAN, 0), UNT(ASIN, 0), UNT(ACOS, 0), UNT(ATAN, 0), UNT(SINH, 0),
	UNT(COSH, 0), UNT(ASINH, 0), UNT(ACOSH, 0), UNT(ATANH, 0), UN(NOT, 0), UN(ISNAN, 0),
	UN(ISINF, 0), UN(BITWISE_NOT, 0),
	{ ML_OP_RELU, 1, 1, 1, 1, infer_unary, NULL, .flags = I, .qclass = ML_QC_ACT },
	UN(LEAKY_RELU, I), UNT(ELU, I), UNT(SELU, I), UNT(CELU, 0), UNT(SIGMOID, I),
	UN(HARD_SIGMOID, I), UN(HARD_SWISH, I), UNT(TANH, I), UNT(SOFTPLUS, I), UN(SOFTSIGN, 0),
	UN(THRESHOLDED_RELU, 0), UNT(GELU, I), UNT(SILU, I), UN(SHRINK, 0),
	/* Clip's bounds (inputs 1 and 2) are scalars its kernels read on the host */
	{ ML_OP_CLIP, 1, 3, 1, 1, infer_clip, NULL, .host_in = 6, .qclass = ML_QC_ACT },
	{ ML_OP_PRELU, 2, 2, 1, 1, infer_prelu, NULL },
	{ ML_OP_ADD, 2, 2, 1, 1, infer_nary, NULL, .flags = I, .qclass = ML_QC_ADD },
	BIN(SUB, I), BIN(MUL, I), BIN(DIV, I), BIN(POW, 0), BIN(MOD, 0),
	VAR(MAX), VAR(MIN), VAR(SUM), VAR(MEAN),
	BIN(EQUAL, 0), BIN(LESS, 0), BIN(LESS_OR_EQUAL, 0), BIN(GREATER, 0),
	BIN(GREATER_OR_EQUAL, 0), BIN(AND, 0), BIN(OR, 0), BIN(XOR, 0), BIN(BITWISE_AND, 0),
	BIN(BITWISE_OR, 0), BIN(BITWISE_XOR, 0), BIN(BITSHIFT, 0),
	{ ML_OP_WHERE, 3, 3, 1, 1, infer_where, NULL },
	{ ML_OP_CAST, 1, 1, 1, 1, infer_cast, NULL },
	{ ML_OP_CAST_LIKE, 2, 2, 1, 1, infer_cast, NULL },
	{ .op = ML_OP_NONE },
};
#undef I
