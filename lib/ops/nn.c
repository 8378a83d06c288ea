/*
 * nn.c: definitions (arity, shape and dtype inference, FLOP estimates) of
 * the nn op family: MatMul and Gemm, convolutions and pools, the
 * normalisations and Dropout. The dtypes accepted here are the ones the
 * CPU kernels (lib/cpu/nn*.c) run.
 */
#include "ops/fused.h"
#include "ops/nn.h"

static int
need(struct ml_opctx *c, int i)
{
	if (ML_IN(c, i) == NULL)
		return ml_opfail(c, ML_EINVAL, "input %d is required", i);
	return 0;
}

static bool
is_float(enum ml_dtype t)
{
	return t == ML_F32 || t == ML_F64 || t == ML_F16 || t == ML_BF16;
}

/* check_float: fail with ML_ENOTSUP unless input i is a float type (or not known yet). */
static int
check_float(struct ml_opctx *c, int i)
{
	const struct ml_tval *t = ML_IN(c, i);

	if (t == NULL || t->dtype == ML_UNDEF || is_float(t->dtype))
		return 0;
	return ml_opfail(c, ML_ENOTSUP, "input %d has unsupported dtype %s", i,
			 ml_dtype_name(t->dtype));
}

/* check_same_dtype: inputs i and j have one dtype (where both are known). */
static int
check_same_dtype(struct ml_opctx *c, int i, int j)
{
	const struct ml_tval *a = ML_IN(c, i), *b = ML_IN(c, j);

	if (a == NULL || b == NULL || a->dtype == ML_UNDEF || b->dtype == ML_UNDEF ||
	    a->dtype == b->dtype)
		return 0;
	return ml_opfail(c, ML_EINVAL, "inputs %d and %d have dtypes %s and %s", i, j,
			 ml_dtype_name(a->dtype), ml_dtype_name(b->dtype));
}

/*
 * check_weight_dtype: input 1 (the weight of a Conv, MatMul or Gemm) has
 * input 0's dtype, or is bf16 or fp16 against an f32 input 0: the
 * products that mlquant --dtype bf16 and fp16 make, computed with f32 sums
 * into an f32 output (lib/cpu/bf16.c; fp16 weights are converted once).
 */
static int
check_weight_dtype(struct ml_opctx *c)
{
	const struct ml_tval *a = ML_IN(c, 0), *b = ML_IN(c, 1);

	/* a 16-bit float weight against f32 data: mlquant --dtype bf16 or fp16 */
	if (a != NULL && b != NULL && a->dtype == ML_F32 && (b->dtype == ML_BF16 || b->dtype == ML_F16))
		return 0;
	return check_same_dtype(c, 0, 1);
}

/* dims_prod: the product of n dims, -1 when one is unknown or it overflows. */
static int64_t
dims_prod(const int64_t *d, int n)
{
	int64_t p = 1;

	for (int i = 0; i < n; i++)
		if (d[i] < 0 || !ml_mul_ok(p, d[i], &p))
			return -1;
	return p;
}

/* fmul: the product of the FLOP factors, 0 when one is unknown. */
static int64_t
flop_prod(int n, const int64_t *f)
{
	int64_t p = 1;

	for (int i = 0; i < n; i++)
		if (f[i] < 0 || !ml_mul_ok(p, f[i], &p))
			return 0;
	return p;
}

/*
 * MatMul: numpy's matmul. A 1-D A is a row and a 1-D B a column, and the
 * added dim is dropped from the result; the batch dims broadcast.
 */
static bool
matmul_dtype_ok(enum ml_dtype t)
{
	return t == ML_UNDEF || is_float(t) || t == ML_I32 || t == ML_I64 || t == ML_U32 ||
	       t == ML_U64;
}

static int
infer_matmul(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	const struct ml_tval *a = c->in[0], *b = c->in[1];
	struct ml_tval *o = c->out[0];

	ML_TRY(check_weight_dtype(c));
	if (!matmul_dtype_ok(a->dtype))
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(a->dtype));
	return ml_matmul_shape(c, a, b, a->dtype != ML_UNDEF ? a->dtype : b->dtype, o);
}

static int64_t
flops_matmul(const struct ml_opctx *c)
{
	const struct ml_tval *a = ML_IN(c, 0), *o = c->out[0];

	if (a == NULL || a->rank < 1 || o->rank < 0)
		return 0;
	/* the output holds batch * m * n elements, each a k-long dot product */
	int64_t f[3] = { 2, ml_tval_numel(o), a->dims[a->rank - 1] };
	return flop_prod(3, f);
}

/* Gemm: Y = alpha * op(A) op(B) + beta * C, C broadcasting to [M, N]. */
static int
infer_gemm(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	const struct ml_tval *a = c->in[0], *b = c->in[1], *cc = ML_IN(c, 2);
	bool ta = ml_attr_int(c->node, "transA", 0) != 0;
	bool tb = ml_attr_int(c->node, "transB", 0) != 0;
	struct ml_tval *o = c->out[0];

	ML_TRY(check_weight_dtype(c));
	if (!matmul_dtype_ok(a->dtype))
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(a->dtype));
	if ((a->rank >= 0 && a->rank != 2) || (b->rank >= 0 && b->rank != 2))
		return ml_opfail(c, ML_EINVAL, "A and B must be 2-D");
	int64_t m = -1, k = -1, kb = -1, n = -1;
	if (a->rank == 2) {
		m = a->dims[ta ? 1 : 0];
		k = a->dims[ta ? 0 : 1];
	}
	if (b->rank == 2) {
		kb = b->dims[tb ? 1 : 0];
		n = b->dims[tb ? 0 : 1];
	}
	if (k >= 0 && kb >= 0 && k != kb)
		return ml_opfail(c, ML_EINVAL, "inner dims differ (%lld vs %lld)", (long long)k,
				 (long long)kb);
	if (cc != NULL && cc->rank >= 0) {
		int64_t want[2] = { m, n };
		if (cc->rank > 2)
			return ml_opfail(c, ML_EINVAL, "C must have rank 2 or less");
		for (int d = 0; d < cc->rank; d++) {
			int64_t x = cc->dims[d], w = want[2 - cc->rank + d];
			if (x >= 0 && x != 1 && w >= 0 && x != w)
				return ml_opfail(c, ML_EINVAL, "C cannot broadcast to [M, N]");
		}
		if (cc->dtype != ML_UNDEF && a->dtype != ML_UNDEF && cc->dtype != a->dtype)
			return ml_opfail(c, ML_EINVAL, "C has dtype %s, A %s",
					 ml_dtype_name(cc->dtype), ml_dtype_name(a->dtype));
	}
	int64_t dims[2] = { m, n };
	ml_set_shape(o, a->dtype != ML_UNDEF ? a->dtype : b->dtype, 2, dims);
	return 0;
}

static int64_t
flops_gemm(const struct ml_opctx *c)
{
	const struct ml_tval *a = ML_IN(c, 0), *o = c->out[0];
	bool ta = ml_attr_int(c->node, "transA", 0) != 0;

	if (a == NULL || a->rank != 2 || o->rank != 2)
		return 0;
	int64_t f[4] = { 2, o->dims[0], o->dims[1], a->dims[ta ? 0 : 1] };
	return flop_prod(4, f);
}

/*
 * Window geometry. The attribute readers check counts and ranges; the
 * output size follows ONNX: explicit pads with floor (or ceil_mode's
 * ceil, never starting a window in the end padding, as PyTorch and
 * onnxruntime do), SAME_UPPER/SAME_LOWER giving ceil(in / stride) with the
 * odd pad at the end or the beginning, VALID no pads.
 */
enum { AP_NOTSET, AP_SAME_UPPER, AP_SAME_LOWER, AP_VALID };

static int
read_ints(struct ml_opctx *c, const char *name, int want, int64_t def, int64_t lo, int64_t *v)
{
	const int64_t *a;
	int n = ml_attr_ints(c->node, name, &a);

	if (n < 0) {
		for (int i = 0; i < want; i++)
			v[i] = def;
		return 0;
	}
	if (n != want)
		return ml_opfail(c, ML_EINVAL, "%s has %d values, not %d", name, n, want);
	for (int i = 0; i < n; i++) {
		if (a[i] < lo || a[i] > ((int64_t)1 << 40))
			return ml_opfail(c, ML_EINVAL, "%s[%d] = %lld is out of range", name, i,
					 (long long)a[i]);
		v[i] = a[i];
	}
	return 0;
}

static int
auto_pad(struct ml_opctx *c, int *ap)
{
	const char *s = ml_attr_str(c->node, "auto_pad", "NOTSET");

	if (strcmp(s, "NOTSET") == 0 || s[0] == '\0')
		*ap = AP_NOTSET;
	else if (strcmp(s, "SAME_UPPER") == 0)
		*ap = AP_SAME_UPPER;
	else if (strcmp(s, "SAME_LOWER") == 0)
		*ap = AP_SAME_LOWER;
	else if (strcmp(s, "VALID") == 0)
		*ap = AP_VALID;
	else
		return ml_opfail(c, ML_EINVAL, "unknown auto_pad \"%s\"", s);
	return 0;
}

/*
 * split_pad: total padding into before/after, the odd one after for
 * SAME_UPPER and before otherwise. The halving floors, as ONNX's reference
 * does, which matters for ConvTranspose's negative totals (an output_shape
 * past the full output): the extra output then goes at the end.
 */
static void
split_pad(int64_t total, bool upper, int64_t *pb, int64_t *pe)
{
	int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);

	if (upper) {
		*pb = half;
		*pe = total - half;
	} else {
		*pe = half;
		*pb = total - half;
	}
}

/* The output sizes of a forward window (Conv and the pools). */
static int
geom_forward(struct ml_opctx *c, struct ml_conv_geom *g, int ap)
{
	for (int i = 0; i < g->nsp; i++) {
		int64_t in = g->in[i], s = g->stride[i];
		int64_t ek = g->k[i] < 0 ? -1 : (g->k[i] - 1) * g->dil[i] + 1;
		if (ap == AP_VALID)
			g->pb[i] = g->pe[i] = 0;
		if (in < 0 || ek < 0) {
			g->out[i] = -1;
			if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
				g->pb[i] = g->pe[i] = -1;
				if (in >= 0)
					g->out[i] = (in + s - 1) / s;
			}
			continue;
		}
		if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
			g->out[i] = (in + s - 1) / s;
			int64_t total = ML_MAX(0, (g->out[i] - 1) * s + ek - in);
			split_pad(total, ap == AP_SAME_UPPER, &g->pb[i], &g->pe[i]);
			continue;
		}
		int64_t span = in + g->pb[i] + g->pe[i] - ek;
		if (span < 0)
			return ml_opfail(c, ML_EINVAL,
					 "window of %lld exceeds the padded input of %lld at dim %d",
					 (long long)ek, (long long)(in + g->pb[i] + g->pe[i]), i);
		if (g->ceil_mode) {
			g->out[i] = (span + s - 1) / s + 1;
			if ((g->out[i] - 1) * s >= in + g->pb[i])
				g->out[i]--;
		} else {
			g->out[i] = span / s + 1;
		}
	}
	return 0;
}

/* The output sizes and pads of ConvTranspose. */
static int
geom_transpose(struct ml_opctx *c, struct ml_conv_geom *g, int ap)
{
	int64_t opad[ML_CONV_MAXSP], oshape[ML_CONV_MAXSP];
	const int64_t *os;
	int nos = ml_attr_ints(c->node, "output_shape", &os);

	ML_TRY(read_ints(c, "output_padding", g->nsp, 0, 0, opad));
	if (nos >= 0) {
		/* some exporters write the whole shape, batch and channels included */
		if (nos == g->nsp + 2)
			os += 2, nos -= 2;
		if (nos != g->nsp)
			return ml_opfail(c, ML_EINVAL, "output_shape has %d values, not %d", nos,
					 g->nsp);
		for (int i = 0; i < g->nsp; i++) {
			if (os[i] < 1 || os[i] > ((int64_t)1 << 40))
				return ml_opfail(c, ML_EINVAL, "output_shape[%d] is out of range", i);
			oshape[i] = os[i];
		}
	}
	for (int i = 0; i < g->nsp; i++) {
		int64_t in = g->in[i], s = g->stride[i];
		int64_t ek = g->k[i] < 0 ? -1 : (g->k[i] - 1) * g->dil[i] + 1;
		if (opad[i] >= ML_MAX(s, g->dil[i]))
			return ml_opfail(c, ML_EINVAL, "output_padding[%d] must be less than the stride",
					 i);
		int64_t want = -1;
		if (nos >= 0)
			want = oshape[i];
		else if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER)
			want = in < 0 ? -1 : in * s;
		if (nos >= 0 || ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
			g->out[i] = want;
			if (in < 0 || ek < 0 || want < 0) {
				g->pb[i] = g->pe[i] = -1;
				continue;
			}
			int64_t total = s * (in - 1) + opad[i] + ek - want;
			split_pad(total, ap == AP_SAME_UPPER, &g->pb[i], &g->pe[i]);
			continue;
		}
		if (ap == AP_VALID)
			g->pb[i] = g->pe[i] = 0;
		if (in < 0 || ek < 0) {
			g->out[i] = -1;
			continue;
		}
		g->out[i] = s * (in - 1) + opad[i] + ek - g->pb[i] - g->pe[i];
		if (g->out[i] < 1)
			return ml_opfail(c, ML_EINVAL, "the output would be empty at dim %d", i);
	}
	return 0;
}

int
ml_conv_geom(struct ml_opctx *c, struct ml_conv_geom *g)
{
	enum ml_op op = c->node->op;
	bool conv = op == ML_OP_CONV || op == ML_OP_CONV_TRANSPOSE || op == ML_OP_FUSED_CONV;
	const struct ml_tval *x = ML_IN(c, 0), *w = conv ? ML_IN(c, 1) : NULL;
	const int64_t *ks;
	int nks = ml_attr_ints(c->node, "kernel_shape", &ks);
	int ap = AP_NOTSET;

	memset(g, 0, sizeof *g);
	ML_TRY(need(c, 0));
	if (conv)
		ML_TRY(need(c, 1));
	if (x->rank >= 0 && x->rank < 3)
		return ml_opfail(c, ML_EINVAL, "X must have rank 3 or more, not %d", x->rank);
	if (w != NULL && w->rank >= 0 && w->rank < 3)
		return ml_opfail(c, ML_EINVAL, "W must have rank 3 or more, not %d", w->rank);
	if (x->rank >= 0)
		g->nsp = x->rank - 2;
	else if (w != NULL && w->rank >= 0)
		g->nsp = w->rank - 2;
	else if (nks > 0)
		g->nsp = nks;
	else
		return 0;
	if (g->nsp > ML_CONV_MAXSP)
		return ml_opfail(c, ML_EINVAL, "too many spatial dims (%d)", g->nsp);
	if (w != NULL && w->rank >= 0 && w->rank != g->nsp + 2)
		return ml_opfail(c, ML_EINVAL, "W has rank %d, X %d", w->rank, g->nsp + 2);
	g->n = x->rank >= 0 ? x->dims[0] : -1;
	g->cin = x->rank >= 0 ? x->dims[1] : -1;
	for (int i = 0; i < g->nsp; i++)
		g->in[i] = x->rank >= 0 ? x->dims[2 + i] : -1;

	/* the kernel: kernel_shape, else W's spatial dims; pools need the attribute */
	if (nks >= 0) {
		if (nks != g->nsp)
			return ml_opfail(c, ML_EINVAL, "kernel_shape has %d values, not %d", nks,
					 g->nsp);
		for (int i = 0; i < nks; i++) {
			if (ks[i] < 1 || ks[i] > ((int64_t)1 << 30))
				return ml_opfail(c, ML_EINVAL, "kernel_shape[%d] is out of range", i);
			if (w != NULL && w->rank >= 0 && w->dims[2 + i] >= 0 && w->dims[2 + i] != ks[i])
				return ml_opfail(c, ML_EINVAL, "kernel_shape does not match W");
			g->k[i] = ks[i];
		}
	} else if (conv) {
		for (int i = 0; i < g->nsp; i++)
			g->k[i] = w->rank >= 0 ? w->dims[2 + i] : -1;
	} else {
		return ml_opfail(c, ML_EINVAL, "kernel_shape is required");
	}

	/* channels and groups */
	g->group = conv ? ml_attr_int(c->node, "group", 1) : 1;
	if (g->group < 1 || g->group > ((int64_t)1 << 30))
		return ml_opfail(c, ML_EINVAL, "group must be 1 or more");
	if (op == ML_OP_CONV || op == ML_OP_FUSED_CONV) {
		int64_t wc = w->rank >= 0 ? w->dims[1] : -1;
		g->cout = w->rank >= 0 ? w->dims[0] : -1;
		if (g->cin >= 0 && wc >= 0 && g->cin != wc * g->group)
			return ml_opfail(c, ML_EINVAL,
					 "X has %lld channels, W expects %lld in %lld groups",
					 (long long)g->cin, (long long)wc, (long long)g->group);
		if (g->cout >= 0 && g->cout % g->group != 0)
			return ml_opfail(c, ML_EINVAL, "W's %lld filters do not split into %lld groups",
					 (long long)g->cout, (long long)g->group);
	} else if (op == ML_OP_CONV_TRANSPOSE) {
		int64_t wc = w->rank >= 0 ? w->dims[0] : -1;
		g->cout = w->rank >= 0 && w->dims[1] >= 0 ? w->dims[1] * g->group : -1;
		if (g->cin >= 0 && wc >= 0 && g->cin != wc)
			return ml_opfail(c, ML_EINVAL, "X has %lld channels, W %lld", (long long)g->cin,
					 (long long)wc);
		if (g->cin >= 0 && g->cin % g->group != 0)
			return ml_opfail(c, ML_EINVAL, "%lld channels do not split into %lld groups",
					 (long long)g->cin, (long long)g->group);
	} else {
		g->cout = g->cin;
	}

	ML_TRY(read_ints(c, "strides", g->nsp, 1, 1, g->stride));
	ML_TRY(read_ints(c, "dilations", g->nsp, 1, 1, g->dil));
	int64_t pads[2 * ML_CONV_MAXSP];
	ML_TRY(read_ints(c, "pads", 2 * g->nsp, 0, 0, pads));
	for (int i = 0; i < g->nsp; i++) {
		g->pb[i] = pads[i];
		g->pe[i] = pads[g->nsp + i];
	}
	ML_TRY(auto_pad(c, &ap));
	g->ceil_mode = ml_attr_int(c->node, "ceil_mode", 0) != 0;
	g->count_include_pad = ml_attr_int(c->node, "count_include_pad", 0) != 0;
	if (op == ML_OP_CONV_TRANSPOSE)
		return geom_transpose(c, g, ap);
	return geom_forward(c, g, ap);
}

/* Conv and ConvTranspose: Y [n, cout, out...]; the optional bias is [cout]. */
static int
infer_conv(struct ml_opctx *c)
{
	struct ml_conv_geom g;
	const struct ml_tval *x = ML_IN(c, 0), *b = ML_IN(c, 2);

	ML_TRY(ml_conv_geom(c, &g));
	ML_TRY(check_float(c, 0));
	ML_TRY(check_weight_dtype(c));
	if (b != NULL) {
		ML_TRY(check_same_dtype(c, 0, 2));
		if (b->rank >= 0 && (b->rank != 1 || (b->dims[0] >= 0 && g.cout >= 0 &&
						      b->dims[0] != g.cout)))
			return ml_opfail(c, ML_EINVAL, "B must be a vector of the %lld output channels",
					 (long long)g.cout);
	}
	enum ml_dtype dt = x->dtype != ML_UNDEF ? x->dtype : c->in[1]->dtype;
	if (g.nsp == 0) {
		c->out[0]->dtype = dt;
		c->out[0]->rank = -1;
		return 0;
	}
	int64_t dims[ML_MAX_RANK] = { g.n, g.cout };
	memcpy(dims + 2, g.out, sizeof(int64_t) * (size_t)g.nsp);
	ml_set_shape(c->out[0], dt, g.nsp + 2, dims);
	return 0;
}

static int64_t
flops_conv(const struct ml_opctx *c)
{
	struct ml_opctx cc = *c;
	struct ml_conv_geom g;

	if (ml_conv_geom(&cc, &g) < 0 || g.nsp == 0)
		return 0;
	int64_t kp = dims_prod(g.k, g.nsp);
	if (c->node->op == ML_OP_CONV) {
		int64_t f[6] = { 2, g.n, g.cout, dims_prod(g.out, g.nsp),
				 g.cin < 0 ? -1 : g.cin / g.group, kp };
		return flop_prod(6, f);
	}
	int64_t f[6] = { 2, g.n, g.cin, dims_prod(g.in, g.nsp), g.cout < 0 ? -1 : g.cout / g.group,
			 kp };
	return flop_prod(6, f);
}

/*
 * ConvNHWC (domain ml, made by mlopt's layout pass): Conv on channels-last
 * data, X [N, H, W, C] and Y [N, OH, OW, M], with Conv's attributes and
 * FusedConv's additions (a residual Z of Y's shape, then activation).
 * Inference runs Conv's on the NCHW view of the shapes. A depthwise one
 * may have a pointwise prologue instead of Z (mlopt's fuse-expand,
 * attribute prologue 1): inputs 3 and 4, Wp [1, 1, Cx, C] and Bp [C],
 * make its input pre_activation(X Wp + Bp) for an X of [N, H, W, Cx]. (Not
 * inputs 4 and 5 after an absent Z: an ONNX function call cannot leave an
 * input out before one it passes.)
 */
bool
ml_conv_nhwc_pre(const struct ml_node *n)
{
	return ml_attr_int(n, "prologue", 0) != 0;
}

bool
ml_conv_nhwc_pointwise(const struct ml_node *n, int wrank, const int64_t *wd)
{
	return n->op == ML_OP_CONV_NHWC && wrank == 4 && wd[0] == 1 && wd[1] == 1 &&
	       ml_attr_int(n, "group", 1) == 1 && ml_attr_int(n, "packed_n", 0) == 0 &&
	       ml_attr_ints_all(n, "strides", 1) && ml_attr_ints_all(n, "pads", 0) &&
	       !ml_conv_nhwc_pre(n);
}

int
ml_conv_nhwc_view(const struct ml_opctx *c, struct ml_opctx *nc, struct ml_node *node,
		  struct ml_tval **ins, struct ml_tval *xv, struct ml_tval *wv, bool *known)
{
	const struct ml_tval *x = ML_IN(c, 0), *w = ML_IN(c, 1);
	int64_t pn = ml_attr_int(c->node, "packed_n", 0);

	*nc = *c;
	*node = *c->node;
	node->op = ML_OP_CONV;
	nc->node = node;
	nc->n_in = ML_MIN(c->n_in, 3);
	for (int i = 0; i < nc->n_in; i++)
		ins[i] = c->in[i];
	nc->in = ins;
	*known = x != NULL && w != NULL && x->rank >= 0 && w->rank >= 0;
	if (!*known)
		return 0;
	if (x->rank != 4 || w->rank != (pn > 0 ? 3 : 4))
		return ml_opfail((struct ml_opctx *)c, ML_EINVAL,
				 "X must be [N, H, W, C] and W %s", pn > 0 ?
				 "[ceil(M / 32), K, 32] (packed_n)" : "[kH, kW, C / group, M]");
	const struct ml_tval *wp = ml_conv_nhwc_pre(c->node) ? ML_IN(c, ML_NHWC_WP) : NULL;
	if (ml_conv_nhwc_pre(c->node) && wp == NULL)
		return ml_opfail((struct ml_opctx *)c, ML_EINVAL, "a prologue needs Wp (input 3)");
	if (wp != NULL && wp->rank < 0) {
		*known = false;
		return 0;
	}
	if (wp != NULL && (wp->rank != 4 || wp->dims[0] != 1 || wp->dims[1] != 1 ||
			   (x->dims[3] >= 0 && wp->dims[2] >= 0 && wp->dims[2] != x->dims[3]) ||
			   pn > 0 || w->rank != 4 || w->dims[2] != 1 ||
			   ml_attr_int(c->node, "group", 1) != wp->dims[3]))
		return ml_opfail((struct ml_opctx *)c, ML_EINVAL,
				 "a prologue needs a depthwise W [kH, kW, 1, C] and Wp [1, 1, Cx, C] "
				 "for X [N, H, W, Cx]");
	*xv = (struct ml_tval){ .dtype = x->dtype, .rank = 4,
				.dims = { x->dims[0], wp != NULL ? wp->dims[3] : x->dims[3], x->dims[1],
					  x->dims[2] } };
	*wv = (struct ml_tval){ .dtype = w->dtype, .rank = 4 };
	if (pn > 0) {
		const int64_t *ks;
		if (ml_attr_ints(c->node, "kernel_shape", &ks) != 2 || ks[0] < 1 || ks[1] < 1 ||
		    ml_attr_int(c->node, "group", 1) != 1 || w->dims[2] != 32 ||
		    (w->dims[0] >= 0 && w->dims[0] != (pn + 31) / 32) ||
		    (w->dims[1] >= 0 && w->dims[1] % (ks[0] * ks[1]) != 0))
			return ml_opfail((struct ml_opctx *)c, ML_EINVAL,
					 "packed W needs group 1, kernel_shape [kH, kW] and "
					 "[ceil(M / 32), kH kW C, 32]");
		wv->dims[0] = pn;
		wv->dims[1] = w->dims[1] < 0 ? -1 : w->dims[1] / (ks[0] * ks[1]);
		wv->dims[2] = ks[0];
		wv->dims[3] = ks[1];
	} else {
		wv->dims[0] = w->dims[3];
		wv->dims[1] = w->dims[2];
		wv->dims[2] = w->dims[0];
		wv->dims[3] = w->dims[1];
	}
	ins[0] = xv;
	ins[1] = wv;
	return 0;
}

static int
infer_conv_nhwc(struct ml_opctx *c)
{
	struct ml_opctx nc;
	struct ml_node node;
	struct ml_tval *ins[3], xv, wv;
	bool pre = ml_conv_nhwc_pre(c->node);
	const struct ml_tval *z = pre ? NULL : ML_IN(c, 3);
	struct ml_tval *y = c->out[0];
	bool known;

	/* the weight may be fp16 or bf16 (mlquant --dtype fp16, bf16) */
	for (int i = 0; i < c->n_in; i++)
		if (c->in[i] != NULL && c->in[i]->dtype != ML_UNDEF && c->in[i]->dtype != ML_F32 &&
		    (i != 1 || (c->in[i]->dtype != ML_F16 && c->in[i]->dtype != ML_BF16)))
			return ml_opfail(c, ML_ENOTSUP, "input %d is %s; ConvNHWC takes f32", i,
					 ml_dtype_name(c->in[i]->dtype));
	if (ml_fused_act(c->node) < 0)
		return ml_opfail(c, ML_EINVAL, "unknown activation '%s'",
				 ml_attr_str(c->node, "activation", ""));
	if (ml_fused_pre_act(c->node) < 0)
		return ml_opfail(c, ML_EINVAL, "unknown pre_activation '%s'",
				 ml_attr_str(c->node, "pre_activation", ""));
	const struct ml_tval *wp = pre ? ML_IN(c, ML_NHWC_WP) : NULL;
	const struct ml_tval *bp = pre ? ML_IN(c, ML_NHWC_BP) : NULL;
	if (!pre && c->n_in > 4)
		return ml_opfail(c, ML_EINVAL, "ConvNHWC takes 5 inputs only with a prologue");
	if (bp != NULL && bp->rank >= 0 && wp != NULL && wp->rank == 4 && wp->dims[3] >= 0 &&
	    ml_tval_numel(bp) != wp->dims[3])
		return ml_opfail(c, ML_EINVAL, "Bp must have C values");
	ML_TRY(ml_conv_nhwc_view(c, &nc, &node, ins, &xv, &wv, &known));
	if (!known) {
		ml_set_shape(y, ML_F32, -1, NULL);
		return 0;
	}
	nc.out = c->out;
	ML_TRY(infer_conv(&nc));
	if (y->rank != 4)
		return ml_opfail(c, ML_EINVAL, "ConvNHWC takes 2-D windows");
	int64_t m = y->dims[1];
	y->dims[1] = y->dims[2];
	y->dims[2] = y->dims[3];
	y->dims[3] = m;
	if (z != NULL && z->rank >= 0) {
		bool ok = z->rank == 4;
		for (int d = 0; ok && d < 4; d++)
			ok = z->dims[d] < 0 || y->dims[d] < 0 || z->dims[d] == y->dims[d];
		if (!ok)
			return ml_opfail(c, ML_EINVAL, "Z does not have the output's shape");
	}
	return 0;
}

static int64_t
flops_conv_nhwc(const struct ml_opctx *c)
{
	struct ml_opctx nc;
	struct ml_node node;
	struct ml_tval *ins[3], xv, wv;
	bool known;

	if (ml_conv_nhwc_view(c, &nc, &node, ins, &xv, &wv, &known) < 0 || !known)
		return 0;
	int64_t pre = 0;
	const struct ml_tval *wp = ml_conv_nhwc_pre(c->node) ? ML_IN(c, ML_NHWC_WP) : NULL;
	if (wp != NULL && wp->rank == 4 && wp->dims[2] > 0 && ml_tval_numel(c->in[0]) > 0 &&
	    ml_tval_numel(wp) > 0)
		pre = 2 * (ml_tval_numel(c->in[0]) / wp->dims[2]) * ml_tval_numel(wp);
	return flops_conv(&nc) + ML_MAX(ml_tval_numel(c->out[0]), 0) + pre;
}

/* MaxPool, AveragePool, LpPool: Y [n, c, out...]; MaxPool's Indices are int64. */
static int
infer_pool(struct ml_opctx *c)
{
	struct ml_conv_geom g;
	const struct ml_tval *x = ML_IN(c, 0);

	ML_TRY(ml_conv_geom(c, &g));
	if (c->node->op == ML_OP_MAX_POOL) {
		if (x->dtype != ML_UNDEF && !is_float(x->dtype) && x->dtype != ML_I8 &&
		    x->dtype != ML_U8)
			return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported",
					 ml_dtype_name(x->dtype));
		int64_t so = ml_attr_int(c->node, "storage_order", 0);
		if (so != 0 && so != 1)
			return ml_opfail(c, ML_EINVAL, "storage_order must be 0 or 1");
	} else {
		ML_TRY(check_float(c, 0));
	}
	if (c->node->op == ML_OP_LP_POOL) {
		const struct ml_attr *p = ml_attr_find(c->node, "p");
		double pv = p == NULL ? 2 : p->type == ML_ATTR_FLOAT ? p->f : (double)p->i;
		if (!(pv > 0) || pv > 1e6)
			return ml_opfail(c, ML_EINVAL, "p must be positive");
	}
	for (int j = 0; j < c->n_out && j < 2; j++) {
		enum ml_dtype dt = j == 0 ? x->dtype : ML_I64;
		if (g.nsp == 0) {
			c->out[j]->dtype = dt;
			c->out[j]->rank = -1;
			continue;
		}
		int64_t dims[ML_MAX_RANK] = { g.n, g.cout };
		memcpy(dims + 2, g.out, sizeof(int64_t) * (size_t)g.nsp);
		ml_set_shape(c->out[j], dt, g.nsp + 2, dims);
	}
	return 0;
}

static int64_t
flops_pool(const struct ml_opctx *c)
{
	struct ml_opctx cc = *c;
	struct ml_conv_geom g;

	if (ml_conv_geom(&cc, &g) < 0 || g.nsp == 0)
		return 0;
	int64_t f[4] = { g.n, g.cout, dims_prod(g.out, g.nsp), dims_prod(g.k, g.nsp) };
	return flop_prod(4, f);
}

/* GlobalAveragePool, GlobalMaxPool, GlobalLpPool: Y [n, c, 1, ...]. */
static int
infer_global_pool(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	const struct ml_tval *x = c->in[0];
	int64_t dims[ML_MAX_RANK];

	ML_TRY(check_float(c, 0));
	if (x->rank < 0) {
		c->out[0]->dtype = x->dtype;
		c->out[0]->rank = -1;
		return 0;
	}
	if (x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "X must have rank 2 or more, not %d", x->rank);
	for (int d = 0; d < x->rank; d++)
		dims[d] = d < 2 ? x->dims[d] : 1;
	ml_set_shape(c->out[0], x->dtype, x->rank, dims);
	return 0;
}

static int64_t
flops_input_numel(const struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0);
	int64_t n = x != NULL ? ml_tval_numel(x) : -1;

	return n < 0 ? 0 : n;
}

/* check_vec: input i, where given and known, is a vector of n values (n -1: any). */
static int
check_vec(struct ml_opctx *c, int i, int64_t n, const char *what)
{
	const struct ml_tval *t = ML_IN(c, i);

	if (t == NULL || t->rank < 0)
		return 0;
	if (t->rank != 1)
		return ml_opfail(c, ML_EINVAL, "%s must be a vector, not of rank %d", what, t->rank);
	if (n >= 0 && t->dims[0] >= 0 && t->dims[0] != n)
		return ml_opfail(c, ML_EINVAL, "%s has %lld values, not %lld", what,
				 (long long)t->dims[0], (long long)n);
	return 0;
}

/*
 * BatchNormalization. Inference mode gives Y only. Training mode (the
 * training_mode attribute from opset 14; before that, asking for more
 * than Y) also gives the updated running mean and variance, and before
 * opset 14 the batch's mean and variance as well; all are [C].
 */
static int
infer_batchnorm(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	const struct ml_tval *x = c->in[0];
	int64_t ch = x->rank >= 2 ? x->dims[1] : -1;

	for (int i = 1; i < 5; i++)
		ML_TRY(need(c, i));
	ML_TRY(check_float(c, 0));
	if (x->rank >= 0 && x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "X must have rank 2 or more, not %d", x->rank);
	static const char *const names[] = { "", "scale", "B", "mean", "var" };
	for (int i = 1; i < 5; i++) {
		ML_TRY(check_float(c, i));
		ML_TRY(check_vec(c, i, ch, names[i]));
	}
	ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
	for (int j = 1; j < c->n_out; j++) {
		/* the stats take the mean's dtype (T2 from opset 15) */
		enum ml_dtype dt = c->in[3]->dtype != ML_UNDEF ? c->in[3]->dtype : x->dtype;
		ml_set_shape(c->out[j], dt, 1, &ch);
	}
	return 0;
}

static int64_t
flops_x2(const struct ml_opctx *c)
{
	return 2 * flops_input_numel(c);
}

static int64_t
flops_x8(const struct ml_opctx *c)
{
	return 8 * flops_input_numel(c);
}

/* InstanceNormalization: scale and B are [C]. */
static int
infer_instnorm(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(need(c, 2));
	const struct ml_tval *x = c->in[0];
	int64_t ch = x->rank >= 2 ? x->dims[1] : -1;

	if (x->rank >= 0 && x->rank < 3)
		return ml_opfail(c, ML_EINVAL, "X must have rank 3 or more, not %d", x->rank);
	for (int i = 0; i < 3; i++)
		ML_TRY(check_float(c, i));
	ML_TRY(check_vec(c, 1, ch, "scale"));
	ML_TRY(check_vec(c, 2, ch, "B"));
	return ml_infer_same(c);
}

/*
 * LayerNormalization: normalises over dims [axis, rank). Mean and
 * InvStdDev have X's shape with those dims 1, in stash_type's dtype.
 */
static int
infer_layernorm(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	const struct ml_tval *x = c->in[0];
	int64_t stash = ml_attr_int(c->node, "stash_type", 1);
	int axis;

	for (int i = 0; i < 3; i++)
		ML_TRY(check_float(c, i));
	if (stash != ML_F32 && stash != ML_F64 && stash != ML_F16 && stash != ML_BF16)
		return ml_opfail(c, ML_ENOTSUP, "stash_type %lld is not supported", (long long)stash);
	ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
	if (x->rank < 0) {
		for (int j = 1; j < c->n_out && j < 3; j++) {
			c->out[j]->dtype = (enum ml_dtype)stash;
			c->out[j]->rank = -1;
		}
		return 0;
	}
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", -1), x->rank, &axis));
	for (int i = 1; i < 3; i++) {
		const struct ml_tval *t = ML_IN(c, i);
		if (t == NULL || t->rank < 0)
			continue;
		if (t->rank > x->rank - axis)
			return ml_opfail(c, ML_EINVAL, "input %d has more dims than normalised", i);
		for (int d = 0; d < t->rank; d++) {
			int64_t a = t->dims[d], b = x->dims[x->rank - t->rank + d];
			if (a >= 0 && b >= 0 && a != 1 && a != b)
				return ml_opfail(c, ML_EINVAL, "input %d cannot broadcast to X's dims", i);
		}
	}
	int64_t dims[ML_MAX_RANK];
	for (int d = 0; d < x->rank; d++)
		dims[d] = d < axis ? x->dims[d] : 1;
	for (int j = 1; j < c->n_out && j < 3; j++)
		ml_set_shape(c->out[j], (enum ml_dtype)stash, x->rank, dims);
	return 0;
}

/* GroupNormalization: scale and bias are [num_groups] (opset 18) or [C] (opset 21). */
static int
infer_groupnorm(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(need(c, 2));
	const struct ml_tval *x = c->in[0];
	int64_t ng = ml_attr_int(c->node, "num_groups", -1);
	int64_t ch = x->rank >= 2 ? x->dims[1] : -1;

	for (int i = 0; i < 3; i++)
		ML_TRY(check_float(c, i));
	if (ng < 1)
		return ml_opfail(c, ML_EINVAL, "num_groups is required and must be positive");
	if (x->rank >= 0 && x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "X must have rank 2 or more, not %d", x->rank);
	if (ch >= 0 && ch % ng != 0)
		return ml_opfail(c, ML_EINVAL, "%lld channels do not split into %lld groups",
				 (long long)ch, (long long)ng);
	for (int i = 1; i < 3; i++) {
		const struct ml_tval *t = c->in[i];
		if (t->rank < 0 || t->dims[0] < 0)
			continue;
		if (t->rank != 1 || (t->dims[0] != ng && (ch < 0 || t->dims[0] != ch)))
			return ml_opfail(c, ML_EINVAL, "input %d must have num_groups or C values", i);
	}
	return ml_infer_same(c);
}

/* LRN: same shape; size is required. */
static int
infer_lrn(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	const struct ml_tval *x = c->in[0];

	ML_TRY(check_float(c, 0));
	if (ml_attr_int(c->node, "size", 0) < 1)
		return ml_opfail(c, ML_EINVAL, "size is required and must be positive");
	if (x->rank >= 0 && x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "X must have rank 2 or more, not %d", x->rank);
	return ml_infer_same(c);
}

static int64_t
flops_lrn(const struct ml_opctx *c)
{
	return flops_input_numel(c) * (ml_attr_int(c->node, "size", 1) * 2 + 4);
}

/* LpNormalization: p is 1 or 2. */
static int
infer_lpnorm(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	const struct ml_tval *x = c->in[0];
	int64_t p = ml_attr_int(c->node, "p", 2);
	int axis;

	ML_TRY(check_float(c, 0));
	if (p != 1 && p != 2)
		return ml_opfail(c, ML_EINVAL, "p must be 1 or 2, not %lld", (long long)p);
	if (x->rank >= 0)
		ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", -1), x->rank, &axis));
	return ml_infer_same(c);
}

/* MeanVarianceNormalization: axes (default 0, 2, 3) must be valid for X. */
static int
infer_mvn(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	const struct ml_tval *x = c->in[0];
	const int64_t *ax;
	int n = ml_attr_ints(c->node, "axes", &ax);
	int a;

	ML_TRY(check_float(c, 0));
	if (x->rank >= 0 && n < 0 && x->rank < 4)
		return ml_opfail(c, ML_EINVAL, "X must have rank 4 for the default axes");
	for (int i = 0; x->rank >= 0 && i < n; i++)
		ML_TRY(ml_norm_axis(c, ax[i], x->rank, &a));
	return ml_infer_same(c);
}

/*
 * Dropout: output is data's shape; the mask is bool (opset 10+), data's
 * dtype before. The ratio input (opset 12+) is a float scalar and
 * training_mode a bool scalar.
 */
static int
infer_dropout(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	const struct ml_tval *x = c->in[0], *r = ML_IN(c, 1), *t = ML_IN(c, 2);

	ML_TRY(check_float(c, 0));
	if (r != NULL && ((r->dtype != ML_UNDEF && !is_float(r->dtype)) ||
			  (ml_tval_numel(r) >= 0 && ml_tval_numel(r) != 1)))
		return ml_opfail(c, ML_EINVAL, "ratio must be a float scalar");
	if (t != NULL && ((t->dtype != ML_UNDEF && t->dtype != ML_BOOL) ||
			  (ml_tval_numel(t) >= 0 && ml_tval_numel(t) != 1)))
		return ml_opfail(c, ML_EINVAL, "training_mode must be a bool scalar");
	ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
	if (c->n_out > 1)
		ml_set_shape(c->out[1], c->opset >= 10 ? ML_BOOL : x->dtype, x->rank, x->dims);
	return 0;
}

const struct ml_opdef ml_opdefs_nn[] = {
	{ ML_OP_MATMUL, 2, 2, 1, 1, infer_matmul, flops_matmul, ML_OPF_HALF_WEIGHT, .weights = 3,
	  .qclass = ML_QC_GEMM },
	{ ML_OP_GEMM, 2, 3, 1, 1, infer_gemm, flops_gemm, ML_OPF_HALF_WEIGHT, .weights = 6,
	  .qclass = ML_QC_GEMM },
	{ ML_OP_CONV, 2, 3, 1, 1, infer_conv, flops_conv, ML_OPF_HALF_WEIGHT, .weights = 6,
	  .qclass = ML_QC_CONV },
	{ ML_OP_CONV_TRANSPOSE, 2, 3, 1, 1, infer_conv, flops_conv, .weights = 6 },
	{ ML_OP_MAX_POOL, 1, 1, 1, 2, infer_pool, flops_pool, .qclass = ML_QC_MAXPOOL },
	{ ML_OP_AVERAGE_POOL, 1, 1, 1, 1, infer_pool, flops_pool },
	{ ML_OP_LP_POOL, 1, 1, 1, 1, infer_pool, flops_pool },
	{ ML_OP_GLOBAL_AVERAGE_POOL, 1, 1, 1, 1, infer_global_pool, flops_input_numel,
	  .qclass = ML_QC_GAP },
	{ ML_OP_GLOBAL_MAX_POOL, 1, 1, 1, 1, infer_global_pool, flops_input_numel },
	{ ML_OP_GLOBAL_LP_POOL, 1, 1, 1, 1, infer_global_pool, flops_x2 },
	{ ML_OP_BATCH_NORM, 5, 5, 1, 5, infer_batchnorm, flops_x2, .weights = 6 },
	{ ML_OP_INSTANCE_NORM, 3, 3, 1, 1, infer_instnorm, flops_x8, .weights = 6 },
	{ ML_OP_LAYER_NORM, 2, 3, 1, 3, infer_layernorm, flops_x8, .weights = 6 },
	{ ML_OP_GROUP_NORM, 3, 3, 1, 1, infer_groupnorm, flops_x8, .weights = 6 },
	{ ML_OP_LRN, 1, 1, 1, 1, infer_lrn, flops_lrn },
	{ ML_OP_LP_NORM, 1, 1, 1, 1, infer_lpnorm, flops_x2 },
	{ ML_OP_MVN, 1, 1, 1, 1, infer_mvn, flops_x8 },
	{ ML_OP_DROPOUT, 1, 3, 1, 2, infer_dropout, NULL, .host_in = ML_HOST_REST },
	{ ML_OP_CONV_NHWC, 2, 5, 1, 1, infer_conv_nhwc, flops_conv_nhwc, ML_OPF_HALF_WEIGHT },
	{ .op = ML_OP_NONE },
};
