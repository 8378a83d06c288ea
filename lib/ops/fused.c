/*
 * fused.c: definitions of the fused op family, internal ops (domain "ml")
 * that mlopt's passes make out of several ONNX ops (lib/opt):
 *
 *   FusedConv(X, W, [B], [Z])       Conv, plus Z (a residual of Y's shape), then activation
 *   FusedGemm(A, B, [C])            Gemm, then activation
 *   FusedMatMul(A, B, [bias], [Z])  MatMul, plus bias[N] on the last dim, plus Z, activation
 *   LayerNormalization(X, S, [B])   ONNX's LayerNormalization (opset 17) for older opsets
 *   FusedElementwise(X, ...)        a chain of elementwise ops in one loop
 *   Attention(Q, Kt, V)             Softmax(scale * Q Kt over the last axis) V
 *
 * The base op's attributes keep their names and meaning. activation is one
 * of "" (none), Relu, Clip (with clip_min, clip_max), Sigmoid, Tanh, Silu,
 * Gelu. FusedElementwise has ops (STRINGS: op types applied in order to
 * the running value, which starts as X), args (INTS: per op the input
 * index of its second operand, -1 for a unary op) and swap (INTS: 1 where
 * the running value is the second operand, e.g. Sub(c, v)); every other
 * input broadcasts to X's shape as one block of dims (a scalar, X's
 * shape, [C, 1, 1] or [N] against X's last dims).
 * FusedMatMul with INT packed_n takes B packed for the CPU's SGEMM (fused.h).
 * Attention takes Q [..., L, D], Kt [..., D, S] (K transposed, as the
 * export's MatMul reads it) and V [..., S, Dv] of equal batch dims, and
 * the FLOAT attribute scale (default 1); Y is [..., L, Dv].
 * Every fused node carries fused_from, the nodes it replaces (ml_opt.h).
 * Inference delegates to the base op's definition. All are f32 only.
 */
#include "ml_impl.h"
#include "ops/fused.h"

/* the rows of lib/act.def: the op computed, its flags and its lower-case name */
static const struct {
	enum ml_op op;
	bool act, fe;
	const char *name;
} unary[] = {
#define ROW(id, opid, act, fe, ug, nm) [ML_UN_##id] = { ML_OP_##opid, act, fe, nm },
	ML_UNARY_LIST(ROW)
#undef ROW
};

/* act_attr: the activation code named by n's attribute attr ("" or absent: none), or -1 */
static int
act_attr(const struct ml_node *n, const char *attr)
{
	const char *s = ml_attr_str(n, attr, "");
	for (int i = 0; i < ML_UN_COUNT; i++)
		if (unary[i].act && strcmp(s, ml_op_name(unary[i].op)) == 0)
			return i;
	return -1;
}

int
ml_fused_act(const struct ml_node *n)
{
	return act_attr(n, "activation");
}

int
ml_fused_pre_act(const struct ml_node *n)
{
	return act_attr(n, "pre_activation");
}

const char *
ml_fused_act_name(int act)
{
	return act >= 0 && act < ML_UN_COUNT && unary[act].act ? ml_op_name(unary[act].op) : NULL;
}

/* base_infer: run op's inference on c with only the first n_in inputs. */
static int
base_infer(struct ml_opctx *c, enum ml_op op, int n_in)
{
	const struct ml_opdef *d = ml_opdef_get(op);
	struct ml_opctx b = *c;
	/* the base op's code reads the node's op (Conv and pools share geometry) */
	struct ml_node nb = *c->node;
	nb.op = op;
	b.node = &nb;
	b.n_in = ML_MIN(c->n_in, n_in);
	return d->infer(&b);
}

static int
check_f32(struct ml_opctx *c)
{
	for (int i = 0; i < c->n_in; i++) {
		const struct ml_tval *t = c->in[i];
		/* the products' weight may be bf16 or fp16 (ML_OPF_HALF_WEIGHT) */
		if (t != NULL && t->dtype != ML_UNDEF && t->dtype != ML_F32 &&
		    (i != 1 || (t->dtype != ML_BF16 && t->dtype != ML_F16) ||
		     !(ml_op_flags(c->node->op) & ML_OPF_HALF_WEIGHT)))
			return ml_opfail(c, ML_ENOTSUP, "input %d is %s; fused ops take f32", i,
					 ml_dtype_name(t->dtype));
	}
	if (ml_fused_act(c->node) < 0)
		return ml_opfail(c, ML_EINVAL, "unknown activation '%s'",
				 ml_attr_str(c->node, "activation", ""));
	return 0;
}

/* check_same: z (when given and known) has y's shape. */
static int
check_same(struct ml_opctx *c, const struct ml_tval *z, const struct ml_tval *y, const char *what)
{
	if (z == NULL || z->rank < 0 || y->rank < 0)
		return 0;
	bool ok = z->rank == y->rank;
	for (int d = 0; ok && d < z->rank; d++)
		ok = z->dims[d] < 0 || y->dims[d] < 0 || z->dims[d] == y->dims[d];
	if (!ok)
		return ml_opfail(c, ML_EINVAL, "%s does not have the output's shape", what);
	return 0;
}

static int
infer_fconv(struct ml_opctx *c)
{
	ML_TRY(check_f32(c));
	ML_TRY(base_infer(c, ML_OP_CONV, 3));
	return check_same(c, ML_IN(c, 3), c->out[0], "Z");
}

static int
infer_fgemm(struct ml_opctx *c)
{
	ML_TRY(check_f32(c));
	return base_infer(c, ML_OP_GEMM, 3);
}

/*
 * unpacked: for a FusedMatMul with packed_n, c2 is c with input 1 seen as
 * the [K, N] matrix it packs (bk, ins: the caller's storage); 0, or a
 * failure when B is not [ceil(N / 32), K, 32].
 */
static int
unpacked(const struct ml_opctx *c, struct ml_opctx *c2, struct ml_tval **ins, struct ml_tval *bk)
{
	int64_t pn = ml_attr_int(c->node, "packed_n", 0);
	*c2 = *c;
	if (pn <= 0 || c->n_in < 2 || c->in[1] == NULL)
		return 0;
	const struct ml_tval *b = c->in[1];
	if (b->rank >= 0 && (b->rank != 3 || b->dims[2] != ML_FUSED_PANEL ||
			     (b->dims[0] >= 0 && b->dims[0] != (pn + ML_FUSED_PANEL - 1) / ML_FUSED_PANEL)))
		return ml_opfail((struct ml_opctx *)c, ML_EINVAL,
				 "packed B must be [ceil(%lld / 32), K, 32]", (long long)pn);
	*bk = *b;
	bk->data = NULL;
	bk->owned = false;
	bk->rank = b->rank < 0 ? -1 : 2;
	bk->dims[0] = b->rank < 0 ? -1 : b->dims[1];
	bk->dims[1] = pn;
	for (int i = 0; i < c->n_in && i < 4; i++)
		ins[i] = c->in[i];
	ins[1] = bk;
	c2->in = ins;
	return 0;
}

static int
infer_fmatmul(struct ml_opctx *c0)
{
	struct ml_opctx cc, *c = &cc;
	struct ml_tval *ins[4], bk;
	ML_TRY(unpacked(c0, &cc, ins, &bk));
	ML_TRY(check_f32(c));
	ML_TRY(base_infer(c, ML_OP_MATMUL, 2));
	const struct ml_tval *b = ML_IN(c, 2), *y = c->out[0];
	if (b != NULL && b->rank >= 0) {
		int64_t n = y->rank > 0 ? y->dims[y->rank - 1] : 1;
		if (b->rank != 1 || (b->dims[0] >= 0 && n >= 0 && b->dims[0] != n))
			return ml_opfail(c, ML_EINVAL, "bias must be 1-D of the last dim's size");
	}
	return check_same(c, ML_IN(c, 3), y, "Z");
}

static int
infer_flayernorm(struct ml_opctx *c)
{
	ML_TRY(check_f32(c));
	return base_infer(c, ML_OP_LAYER_NORM, 3);
}

int
ml_fused_block(const struct ml_tval *x, const struct ml_tval *y, int64_t *inner, int64_t *cnt)
{
	int off = y->rank - x->rank;
	int lo = -1, hi = -1;
	if (off < 0)
		return -1;
	for (int d = 0; d < x->rank; d++) {
		/* a broadcast dim; one of size 1 in both belongs to any block around it */
		if (x->dims[d] == 1 && y->dims[d + off] != 1)
			continue;
		if (x->dims[d] != y->dims[d + off])
			return -1;
		if (lo < 0)
			lo = d + off;
		else if (hi != d + off)
			return -1;	/* a gap: not one block */
		hi = d + off + 1;
	}
	*inner = 1;
	*cnt = 1;
	if (lo < 0)
		return 0;
	for (int d = lo; d < hi; d++)
		*cnt *= y->dims[d];
	for (int d = hi; d < y->rank; d++)
		*inner *= y->dims[d];
	return 0;
}

/* the binary ops of a chain, by ML_FE_* code */
static const struct {
	enum ml_op op;
	const char *name;
} binary[ML_FE_UNARY] = {
	[ML_FE_ADD] = { ML_OP_ADD, "add" }, [ML_FE_SUB] = { ML_OP_SUB, "sub" },
	[ML_FE_MUL] = { ML_OP_MUL, "mul" }, [ML_FE_DIV] = { ML_OP_DIV, "div" },
	[ML_FE_MAX] = { ML_OP_MAX, "max" }, [ML_FE_MIN] = { ML_OP_MIN, "min" },
};

int
ml_fused_elem_op(const char *s)
{
	for (int i = 0; i < ML_FE_UNARY; i++)
		if (strcmp(s, ml_op_name(binary[i].op)) == 0)
			return i;
	for (int i = 0; i < ML_UN_COUNT; i++)
		if (unary[i].fe && strcmp(s, ml_op_name(unary[i].op)) == 0)
			return ML_FE_UNARY + i;
	return -1;
}

const char *
ml_fused_elem_name(int op)
{
	if (op >= 0 && op < ML_FE_UNARY)
		return binary[op].name;
	if (op >= ML_FE_UNARY && op < ML_FE_UNARY + ML_UN_COUNT && unary[op - ML_FE_UNARY].fe)
		return unary[op - ML_FE_UNARY].name;
	return NULL;
}

static int
infer_felem(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	const struct ml_attr *ops = ml_attr_find(c->node, "ops");
	const int64_t *args, *swap;
	int na = ml_attr_ints(c->node, "args", &args), ns = ml_attr_ints(c->node, "swap", &swap);

	ML_TRY(check_f32(c));
	if (ops == NULL || ops->type != ML_ATTR_STRINGS || ops->n < 1 || na != ops->n ||
	    ns != ops->n)
		return ml_opfail(c, ML_EINVAL, "needs ops, args and swap of one length");
	for (int k = 0; k < ops->n; k++) {
		int op = ml_fused_elem_op(ops->strings[k]);
		if (op < 0)
			return ml_opfail(c, ML_EINVAL, "op '%s' is not fusable", ops->strings[k]);
		bool binary = op < ML_FE_UNARY;
		if (binary != (args[k] >= 0) || args[k] >= c->n_in || args[k] == 0)
			return ml_opfail(c, ML_EINVAL, "op %d: bad operand %lld", k, (long long)args[k]);
	}
	ml_set_shape(c->out[0], ML_F32, x->rank, x->dims);
	for (int i = 1; i < c->n_in; i++) {
		const struct ml_tval *a = c->in[i];
		int64_t inner, cnt;
		if (a == NULL)
			return ml_opfail(c, ML_EINVAL, "input %d is missing", i);
		bool known = a->rank >= 0 && x->rank >= 0;
		for (int d = 0; known && d < a->rank; d++)
			known = a->dims[d] >= 0;
		for (int d = 0; known && d < x->rank; d++)
			known = x->dims[d] >= 0;
		if (known && ml_fused_block(a, x, &inner, &cnt) < 0)
			return ml_opfail(c, ML_EINVAL, "input %d does not broadcast as one block", i);
	}
	return 0;
}

/* dim_eq: two dims that may be equal (-1: unknown). */
static bool
dim_eq(int64_t a, int64_t b)
{
	return a < 0 || b < 0 || a == b;
}

static int
infer_fattention(struct ml_opctx *c)
{
	const struct ml_tval *q = c->in[0], *kt = c->in[1], *v = c->in[2];

	ML_TRY(check_f32(c));
	if (q->rank < 0 || kt->rank < 0 || v->rank < 0) {
		ml_set_shape(c->out[0], ML_F32, -1, NULL);
		return 0;
	}
	int r = q->rank;
	if (r < 2 || kt->rank != r || v->rank != r)
		return ml_opfail(c, ML_EINVAL, "Q, Kt and V must have one rank of at least 2");
	for (int d = 0; d < r - 2; d++)
		if (!dim_eq(q->dims[d], kt->dims[d]) || !dim_eq(q->dims[d], v->dims[d]))
			return ml_opfail(c, ML_EINVAL, "Q, Kt and V have different batch dims");
	if (!dim_eq(q->dims[r - 1], kt->dims[r - 2]) || !dim_eq(kt->dims[r - 1], v->dims[r - 2]))
		return ml_opfail(c, ML_EINVAL, "Q [.., L, D], Kt [.., D, S] and V [.., S, Dv] do not match");
	int64_t dims[ML_MAX_RANK];
	memcpy(dims, q->dims, sizeof(int64_t) * (size_t)r);
	dims[r - 1] = v->dims[r - 1];
	ml_set_shape(c->out[0], ML_F32, r, dims);
	return 0;
}

static int64_t
flops_fattention(const struct ml_opctx *c)
{
	const struct ml_tval *q = c->in[0], *kt = c->in[1], *y = c->out[0];
	int64_t ny = ml_tval_numel(y), nq = ml_tval_numel(q);
	if (ny < 0 || nq < 0 || kt->rank < 2 || q->rank < 2 || q->dims[q->rank - 1] <= 0)
		return 0;
	int64_t s = kt->dims[kt->rank - 1], rows = nq / q->dims[q->rank - 1];
	/* the scores, their softmax, the weighted sum of V */
	return 2 * nq * s + 5 * rows * s + 2 * ny * s;
}

static int64_t
flops_fused(const struct ml_opctx *c0)
{
	struct ml_opctx cc;
	const struct ml_opctx *c = &cc;
	struct ml_tval *ins[4], bk;
	if (unpacked(c0, &cc, ins, &bk) < 0)
		return 0;
	enum ml_op base = c->node->op == ML_OP_FUSED_CONV	 ? ML_OP_CONV :
			  c->node->op == ML_OP_FUSED_GEMM	 ? ML_OP_GEMM :
			  c->node->op == ML_OP_FUSED_MATMUL	 ? ML_OP_MATMUL :
								   ML_OP_LAYER_NORM;
	const struct ml_opdef *d = ml_opdef_get(base);
	int64_t extra = ML_MAX(ml_tval_numel(c->out[0]), 0);
	struct ml_opctx b = *c;
	struct ml_node nb = *c->node;
	nb.op = base;
	b.node = &nb;
	b.n_in = ML_MIN(c->n_in, 3);
	return (d->flops != NULL ? d->flops(&b) : 0) + extra;
}

static int64_t
flops_felem(const struct ml_opctx *c)
{
	const struct ml_attr *ops = ml_attr_find(c->node, "ops");
	return ML_MAX(ml_tval_numel(c->out[0]), 0) * (ops != NULL ? ops->n : 1);
}

const struct ml_opdef ml_opdefs_fused[] = {
	{ ML_OP_FUSED_CONV, 2, 4, 1, 1, infer_fconv, flops_fused, ML_OPF_HALF_WEIGHT },
	{ ML_OP_FUSED_GEMM, 2, 3, 1, 1, infer_fgemm, flops_fused, ML_OPF_HALF_WEIGHT, .weights = 6 },
	{ ML_OP_FUSED_MATMUL, 2, 4, 1, 1, infer_fmatmul, flops_fused, ML_OPF_HALF_WEIGHT,
	  .weights = 7, .qclass = ML_QC_GEMM },
	{ ML_OP_ML_LAYER_NORM, 2, 3, 1, 3, infer_flayernorm, flops_fused },
	{ ML_OP_FUSED_ELEMWISE, 1, -1, 1, 1, infer_felem, flops_felem },
	{ ML_OP_FUSED_ATTENTION, 3, 3, 1, 1, infer_fattention, flops_fattention },
	{ .op = ML_OP_NONE },
};
