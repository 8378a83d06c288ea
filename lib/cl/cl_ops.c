/*
 * cl_ops.c: the OpenCL device behind the executor's device interface
 * (lib/exec/device.h): which ops it has (one table keyed by op), their
 * host-side launch code over kernels/elem.cl, nn.cl, reduce.cl and
 * clgemm's GEMM and convolution (gemm.c, conv.c), buffers and copies.
 *
 * Every kernel here takes f32 tensors and f16 ones, on every device: f16
 * programs are built with -DML_F16, which stores half through the core
 * vload_half/vstore_half and computes in f32 (no cl_khr_fp16 needed, and
 * one rounding per op, as the CPU's f16 kernels). Native half arithmetic,
 * where a device has cl_khr_fp16, is not used: it would be a second path
 * to test and less accurate. A case a kernel does not cover at run time
 * (a broadcast MatMul batch, a 3-D pool, ...) returns ML_ENOTSUP and the
 * executor runs that node on the CPU.
 */
#include <pthread.h>

#include "cl/cl.h"
#include "exec/device.h"
#include "ops/fused.h"
#include "ops/nn.h"
#include "ops/reduce.h"

/* the by-value kernel arguments: the same layouts as in kernels/ */
struct ml_shape {
	cl_long dims[8], sa[8], sb[8];
	cl_long n;
	cl_int rank, pad_[3];
};

struct ml_pool {
	cl_long n, c, h, w, oh, ow;
	cl_long kh, kw, sh, sw, ph, pw, dh, dw, peh, pew;
	cl_int is_max, count_pad;
};

struct ml_red {
	cl_long od[8], os[8], rd[8], rs[8];
	cl_long nout, nred;
	cl_int orank, rrank, op, pad_;
};

#define MEM(b) (((struct mlcl_buf *)(b))->mem)

static bool
f16(const struct ml_tval *t)
{
	return t->dtype == ML_F16;
}

/* opts: the build options of a program for dtype dt */
static const char *
opts(enum ml_dtype dt)
{
	return dt == ML_F16 ? "-DML_F16=1" : NULL;
}

/* kern: kernel kname of kernels/FILE.cl for the dtype of t */
static int
kern(struct mlcl_dev *d, const char *file, const char *kname, const struct ml_tval *t,
     cl_kernel *k, struct ml_err *e)
{
	return mlcl_kernel(d, file, kname, opts(t->dtype), k, e);
}

#define ARG(k, i, v) clSetKernelArg((k), (i), sizeof(v), &(v))

int
mlcl_launch1(struct mlcl_dev *d, cl_kernel k, size_t n, struct ml_err *e)
{
	size_t wg = mlcl_wg(d, n);
	size_t gws = mlcl_round_up(n, wg);
	return mlcl_launch(d, k, 1, &gws, &wg, e);
}

int
mlcl_argfail(struct ml_opctx *c, cl_int st)
{
	if (c->err != NULL)
		c->err->cl_status = st;
	return ml_opfail(c, ML_ECL, "clSetKernelArg: %s", mlcl_status_str(st));
}

/*
 * Unary ops: kernels/elem.cl's ml_unary computes the function of the op's
 * code, ml_op_unary's ML_UN_* of lib/act.def (the program's first source).
 */
static int
run_unary(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_node *n = c->node;
	cl_int op = ml_op_unary(n->op);
	float a = 0, b = 0;
	switch (n->op) {
	case ML_OP_LEAKY_RELU: a = (float)ml_attr_float(n, "alpha", 0.01); break;
	case ML_OP_ELU: a = (float)ml_attr_float(n, "alpha", 1.0); break;
	case ML_OP_CELU: a = (float)ml_attr_float(n, "alpha", 1.0); break;
	case ML_OP_SELU:
		a = (float)ml_attr_float(n, "alpha", 1.67326319217681884765625);
		b = (float)ml_attr_float(n, "gamma", 1.05070102214813232421875);
		break;
	case ML_OP_HARD_SIGMOID:
		a = (float)ml_attr_float(n, "alpha", 0.2);
		b = (float)ml_attr_float(n, "beta", 0.5);
		break;
	case ML_OP_GELU:
		if (strcmp(ml_attr_str(n, "approximate", "none"), "none") != 0)
			return ml_opfail(c, ML_ENOTSUP, "tanh-approximate Gelu on OpenCL");
		break;
	case ML_OP_CLIP:
		a = -INFINITY;
		b = INFINITY;
		if (c->opset < 11) {
			a = (float)ml_attr_float(n, "min", -INFINITY);
			b = (float)ml_attr_float(n, "max", INFINITY);
		} else {
			const struct ml_tval *lo = ML_IN(c, 1), *hi = ML_IN(c, 2);
			if (lo != NULL && ml_tval_numel(lo) == 1)
				a = (float)ml_get_f64(lo->data, lo->dtype, 0);
			if (hi != NULL && ml_tval_numel(hi) == 1)
				b = (float)ml_get_f64(hi->data, hi->dtype, 0);
		}
		break;
	default:
		break;
	}
	cl_kernel k;
	ML_TRY(kern(d, "elem", "ml_unary", c->out[0], &k, c->err));
	cl_ulong nel = (cl_ulong)ml_tval_numel(c->out[0]);
	cl_int st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bout[0])) | ARG(k, 2, nel) |
		    ARG(k, 3, op) | ARG(k, 4, a) | ARG(k, 5, b);
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, nel, c->err);
}

/*
 * Binary ops with broadcasting.
 */
enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_PRELU };

static int
bop(enum ml_op op)
{
	switch (op) {
	case ML_OP_ADD: case ML_OP_SUM: return B_ADD;
	case ML_OP_SUB: return B_SUB;
	case ML_OP_MUL: return B_MUL;
	case ML_OP_DIV: return B_DIV;
	case ML_OP_POW: return B_POW;
	case ML_OP_MAX: return B_MAX;
	case ML_OP_MIN: return B_MIN;
	case ML_OP_PRELU: return B_PRELU;
	default: return -1;
	}
}

static bool
same_shape(const struct ml_tval *a, const struct ml_tval *b)
{
	if (a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return false;
	return true;
}

static void
contig_strides(const struct ml_tval *t, cl_long *st)
{
	cl_long s = 1;
	for (int i = t->rank - 1; i >= 0; i--) {
		st[i] = s;
		s *= t->dims[i];
	}
}

static int
run_binary(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *a = c->in[0], *b = c->in[1], *y = c->out[0];
	int op = bop(c->node->op);
	if (c->n_in != 2 || b == NULL)
		return ml_opfail(c, ML_ENOTSUP, "only two operands on OpenCL");
	if (a->dtype != b->dtype || y->rank > 8)
		return ml_opfail(c, ML_ENOTSUP, "mixed types on OpenCL");
	cl_kernel k;
	cl_int st;
	cl_ulong nel = (cl_ulong)ml_tval_numel(y);
	if (same_shape(a, y) && (same_shape(b, y) || ml_tval_numel(b) == 1)) {
		cl_int scalar = !same_shape(b, y);
		ML_TRY(kern(d, "elem", "ml_binary_flat", y, &k, c->err));
		st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bin[1])) | ARG(k, 2, MEM(bout[0])) |
		     ARG(k, 3, nel) | ARG(k, 4, op) | ARG(k, 5, scalar);
	} else {
		struct ml_shape s = { 0 };
		int64_t sa[ML_MAX_RANK], sb[ML_MAX_RANK];
		ml_bcast_strides(a, y, sa);
		ml_bcast_strides(b, y, sb);
		s.rank = y->rank;
		s.n = (cl_long)nel;
		for (int i = 0; i < y->rank; i++) {
			s.dims[i] = y->dims[i];
			s.sa[i] = sa[i];
			s.sb[i] = sb[i];
		}
		ML_TRY(kern(d, "elem", "ml_binary_bcast", y, &k, c->err));
		st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bin[1])) | ARG(k, 2, MEM(bout[0])) |
		     ARG(k, 3, s) | ARG(k, 4, op);
	}
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, nel, c->err);
}

/*
 * Strided copies: Transpose, Slice, Concat, Split, Expand.
 */
static int
strided(struct mlcl_dev *d, struct ml_opctx *c, cl_mem x, cl_long xbase, cl_mem y, cl_long ybase,
	const struct ml_shape *sh, const struct ml_tval *t)
{
	if (sh->n == 0)
		return 0;
	cl_kernel k;
	ML_TRY(kern(d, "elem", "ml_strided", t, &k, c->err));
	cl_int st = ARG(k, 0, x) | ARG(k, 1, xbase) | ARG(k, 2, y) | ARG(k, 3, ybase) |
		    ARG(k, 4, *sh);
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, (size_t)sh->n, c->err);
}

static int
run_transpose(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0], *y = c->out[0];
	const int64_t *perm;
	int np = ml_attr_ints(c->node, "perm", &perm);
	if (x->rank > 8)
		return ml_opfail(c, ML_ENOTSUP, "rank over 8");
	cl_long xs[8];
	contig_strides(x, xs);
	struct ml_shape s = { 0 };
	s.rank = y->rank;
	s.n = ml_tval_numel(y);
	cl_long ys[8];
	contig_strides(y, ys);
	for (int i = 0; i < y->rank; i++) {
		int p = np == y->rank ? (int)perm[i] : y->rank - 1 - i;
		if (p < 0)
			p += x->rank;
		if (p < 0 || p >= x->rank)
			return ml_opfail(c, ML_EINVAL, "bad perm");
		s.dims[i] = y->dims[i];
		s.sa[i] = xs[p];
		s.sb[i] = ys[i];
	}
	return strided(d, c, MEM(bin[0]), 0, MEM(bout[0]), 0, &s, y);
}

static int
run_concat(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *y = c->out[0];
	int axis;
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), y->rank, &axis));
	cl_long ys[8];
	contig_strides(y, ys);
	cl_long off = 0;
	for (int j = 0; j < c->n_in; j++) {
		const struct ml_tval *x = c->in[j];
		if (x == NULL)
			continue;
		struct ml_shape s = { 0 };
		cl_long xs[8];
		contig_strides(x, xs);
		s.rank = x->rank;
		s.n = ml_tval_numel(x);
		for (int i = 0; i < x->rank; i++) {
			s.dims[i] = x->dims[i];
			s.sa[i] = xs[i];
			s.sb[i] = ys[i];
		}
		if (s.n > 0)
			ML_TRY(strided(d, c, MEM(bin[j]), 0, MEM(bout[0]), off * ys[axis], &s, y));
		off += x->dims[axis];
	}
	return 0;
}

static int
run_split(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0];
	int axis;
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &axis));
	cl_long xs[8];
	contig_strides(x, xs);
	cl_long off = 0;
	for (int j = 0; j < c->n_out; j++) {
		const struct ml_tval *y = c->out[j];
		struct ml_shape s = { 0 };
		cl_long ys[8];
		contig_strides(y, ys);
		s.rank = y->rank;
		s.n = ml_tval_numel(y);
		for (int i = 0; i < y->rank; i++) {
			s.dims[i] = y->dims[i];
			s.sa[i] = xs[i];
			s.sb[i] = ys[i];
		}
		if (bout[j] != NULL && s.n > 0)
			ML_TRY(strided(d, c, MEM(bin[0]), off * xs[axis], MEM(bout[j]), 0, &s, y));
		off += y->dims[axis];
	}
	return 0;
}

static int
run_slice(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0], *y = c->out[0];
	int64_t start[ML_MAX_RANK] = { 0 }, step[ML_MAX_RANK];
	for (int i = 0; i < x->rank; i++)
		step[i] = 1;
	const struct ml_tval *ts = ML_IN(c, 1), *ta = ML_IN(c, 3), *tp = ML_IN(c, 4);
	const struct ml_tval *te = ML_IN(c, 2);
	if (c->opset < 10 || ts == NULL || te == NULL)
		return ml_opfail(c, ML_ENOTSUP, "Slice before opset 10 on OpenCL");
	int64_t ns = ml_tval_numel(ts);
	for (int64_t k = 0; k < ns; k++) {
		int64_t ax = ta != NULL ? ml_get_i64(ta->data, ta->dtype, k) : k;
		if (ax < 0)
			ax += x->rank;
		if (ax < 0 || ax >= x->rank)
			return ml_opfail(c, ML_EINVAL, "bad axis");
		int64_t dim = x->dims[ax];
		int64_t st = tp != NULL ? ml_get_i64(tp->data, tp->dtype, k) : 1;
		int64_t b = ml_get_i64(ts->data, ts->dtype, k);
		if (st == 0)
			return ml_opfail(c, ML_EINVAL, "step 0");
		if (b < 0)
			b += dim;
		if (st > 0)
			b = b < 0 ? 0 : b > dim ? dim : b;
		else
			b = b < 0 ? -1 : b > dim - 1 ? dim - 1 : b;
		start[ax] = b;
		step[ax] = st;
	}
	cl_long xs[8], ys[8];
	contig_strides(x, xs);
	contig_strides(y, ys);
	struct ml_shape s = { 0 };
	s.rank = y->rank;
	s.n = ml_tval_numel(y);
	cl_long base = 0;
	for (int i = 0; i < y->rank; i++) {
		s.dims[i] = y->dims[i];
		s.sa[i] = xs[i] * step[i];
		s.sb[i] = ys[i];
		if (y->dims[i] > 0)
			base += start[i] * xs[i];
	}
	return strided(d, c, MEM(bin[0]), base, MEM(bout[0]), 0, &s, y);
}

static int
run_expand(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0], *y = c->out[0];
	int64_t sa[ML_MAX_RANK];
	ml_bcast_strides(x, y, sa);
	cl_long ys[8];
	contig_strides(y, ys);
	struct ml_shape s = { 0 };
	s.rank = y->rank;
	s.n = ml_tval_numel(y);
	for (int i = 0; i < y->rank; i++) {
		s.dims[i] = y->dims[i];
		s.sa[i] = sa[i];
		s.sb[i] = ys[i];
	}
	return strided(d, c, MEM(bin[0]), 0, MEM(bout[0]), 0, &s, y);
}

static int
run_gather(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0], *ind = c->in[1], *y = c->out[0];
	if (ind->dtype != ML_I64)
		return ml_opfail(c, ML_ENOTSUP, "Gather indices of %s on OpenCL",
				 ml_dtype_name(ind->dtype));
	int axis;
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &axis));
	cl_long outer = 1, inner = 1, len = x->dims[axis], nidx = ml_tval_numel(ind);
	for (int i = 0; i < axis; i++)
		outer *= x->dims[i];
	for (int i = axis + 1; i < x->rank; i++)
		inner *= x->dims[i];
	if (outer * nidx * inner == 0)
		return 0;
	cl_kernel k;
	ML_TRY(kern(d, "elem", "ml_gather", y, &k, c->err));
	cl_int st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bin[1])) | ARG(k, 2, MEM(bout[0])) |
		    ARG(k, 3, outer) | ARG(k, 4, nidx) | ARG(k, 5, inner) | ARG(k, 6, len);
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, (size_t)(outer * nidx * inner), c->err);
}

/*
 * Cast between f32 and f16 (the Casts behind mlquant --dtype fp16's
 * weights, so that they stay on the device in half); the same type is a
 * copy. cl_supports admits no other types.
 */
static int
run_cast(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0], *y = c->out[0];
	cl_ulong nel = (cl_ulong)ml_tval_numel(y);
	if (x->dtype == y->dtype)
		return mlcl_copy(d, MEM(bout[0]), 0, MEM(bin[0]), 0, (size_t)ml_tval_nbytes(y),
				 c->err);
	cl_kernel k;
	ML_TRY(kern(d, "elem", x->dtype == ML_F16 ? "ml_cast_f16_f32" : "ml_cast_f32_f16", y, &k,
		    c->err));
	cl_int st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bout[0])) | ARG(k, 2, nel);
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, nel, c->err);
}

/*
 * nn: Conv and GEMMs through clgemm's functions, pools, norms, softmax.
 */
/*
 * node_round: the operand rounding of a training step's product node (its
 * attribute precision, lib/train/precision.c), MLCL_ROUND_*, 0 for f32.
 */
static int
node_round(const struct ml_node *n)
{
	const char *p = ml_attr_str(n, "precision", "f32");
	return strcmp(p, "fp16") == 0 ? MLCL_ROUND_F16 : strcmp(p, "bf16") == 0 ? MLCL_ROUND_BF16 : 0;
}

/*
 * conv_params: the convolution of Conv, FusedConv or ConvNHWC node c (its
 * geometry seen through gc, c itself but for ConvNHWC's NCHW view) into p,
 * with FusedConv's and ConvNHWC's activation.
 */
static int
conv_params(struct ml_opctx *c, struct ml_opctx *gc, struct mlcl_conv *p)
{
	struct ml_conv_geom g;
	ML_TRY(ml_conv_geom(gc, &g));
	if (g.nsp < 1 || g.nsp > 2)
		return ml_opfail(c, ML_ENOTSUP, "%d-D convolution on OpenCL", g.nsp);
	int o = g.nsp == 1 ? 1 : 0;	/* 1-D: a 2-D convolution of height 1 */
	*p = (struct mlcl_conv){ 0 };
	p->n = g.n;
	p->c = g.cin;
	p->m = g.cout;
	p->group = g.group;
	p->h = o ? 1 : g.in[0];
	p->w = g.in[1 - o];
	p->kh = o ? 1 : g.k[0];
	p->kw = g.k[1 - o];
	p->stride[0] = o ? 1 : g.stride[0];
	p->stride[1] = g.stride[1 - o];
	p->dil[0] = o ? 1 : g.dil[0];
	p->dil[1] = g.dil[1 - o];
	p->pad[0] = o ? 0 : g.pb[0];
	p->pad[1] = g.pb[1 - o];
	p->pad[2] = o ? 0 : g.pe[0];
	p->pad[3] = g.pe[1 - o];
	p->round = node_round(c->node);
	/* FusedConv, ConvNHWC: act(conv + B + Z), all of it in the convolution's store */
	if (c->node->op != ML_OP_CONV) {
		p->act = ml_fused_act(c->node);
		if (p->act < 0)
			return ml_opfail(c, ML_EINVAL, "unknown activation '%s'",
					 ml_attr_str(c->node, "activation", ""));
		p->lo = (float)ml_attr_float(c->node, "clip_min", -INFINITY);
		p->hi = (float)ml_attr_float(c->node, "clip_max", INFINITY);
		/* (a ConvNHWC's prologue has Wp where Z would be) */
		const struct ml_tval *z = ml_conv_nhwc_pre(c->node) ? NULL : ML_IN(c, 3);
		if (z != NULL && ml_tval_numel(z) != ml_tval_numel(c->out[0]))
			return ml_opfail(c, ML_EINVAL, "Z does not have the output's shape");
	}
	int64_t oh, ow;
	ML_TRY(mlcl_conv_out(p, &oh, &ow, c->err));
	if (oh * ow != g.out[0] * (g.nsp == 2 ? g.out[1] : 1))
		return ml_opfail(c, ML_ENOTSUP, "convolution geometry");
	return 0;
}

static int
run_conv(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	struct mlcl_conv p;
	ML_TRY(conv_params(c, c, &p));
	const struct ml_tval *b = ML_IN(c, 2), *z = c->node->op == ML_OP_FUSED_CONV ? ML_IN(c, 3) : NULL;
	return mlcl_conv2d_ex(d, &p, f16(c->out[0]), MEM(bin[0]), 0, MEM(bin[1]), 0,
			      b != NULL ? MEM(bin[2]) : NULL, 0, z != NULL ? MEM(bin[3]) : NULL, 0,
			      MEM(bout[0]), 0, c->err);
}

/* run_conv_nhwc: ConvNHWC (W as the layout pass writes it, [kH, kW, C / group, M]), f32. */
static int
run_conv_nhwc(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	struct ml_opctx nc;
	struct ml_node node;
	struct ml_tval *ins[3], xv, wv;
	bool known;
	struct mlcl_conv p;

	if (ml_attr_int(c->node, "packed_n", 0) > 0)
		return ml_opfail(c, ML_ENOTSUP, "ConvNHWC with W packed for the CPU");
	ML_TRY(ml_conv_nhwc_view(c, &nc, &node, ins, &xv, &wv, &known));
	if (!known)
		return ml_opfail(c, ML_EINVAL, "ConvNHWC's shapes are not known");
	ML_TRY(conv_params(c, &nc, &p));
	bool pre = ml_conv_nhwc_pre(c->node);
	const struct ml_tval *b = ML_IN(c, 2), *z = pre ? NULL : ML_IN(c, 3);
	const struct ml_tval *wp = pre ? ML_IN(c, ML_NHWC_WP) : NULL;
	const struct ml_tval *bp = pre ? ML_IN(c, ML_NHWC_BP) : NULL;
	if (wp == NULL)
		return mlcl_conv2d_nhwc(d, &p, MEM(bin[0]), MEM(bin[1]),
					b != NULL ? MEM(bin[2]) : NULL, z != NULL ? MEM(bin[3]) : NULL,
					MEM(bout[0]), c->err);
	/*
	 * a prologue (mlopt's fuse-expand): X Wp + Bp, then pre_activation, as
	 * a GEMM of the pixels into a pool buffer that the convolution reads
	 * (the in-order queue runs them in turn before the buffer is reused)
	 */
	int64_t cx = wp->dims[2], C = wp->dims[3], rows = ml_tval_numel(c->in[0]) / ML_MAX(cx, 1);
	struct mlcl_epi epi = { .act = ml_fused_pre_act(c->node) };
	epi.lo = (float)ml_attr_float(c->node, "pre_clip_min", -INFINITY);
	epi.hi = (float)ml_attr_float(c->node, "pre_clip_max", INFINITY);
	if (bp != NULL) {
		epi.bias = MEM(bin[ML_NHWC_BP]);
		epi.bias_sn = 1;
	}
	struct mlcl_buf *t;
	ML_TRY(mlcl_buf_get(d, sizeof(float) * (size_t)(rows * C), &t, c->err));
	int rc = mlcl_gemm_ex(d, false, false, false, rows, C, cx, 1.0f, MEM(bin[0]), 0, cx,
			      MEM(bin[ML_NHWC_WP]), 0, C, 0.0f, t->mem, 0, C, 1, 0, 0, 0, &epi, c->err);
	if (rc == 0)
		rc = mlcl_conv2d_nhwc(d, &p, t->mem, MEM(bin[1]), b != NULL ? MEM(bin[2]) : NULL,
				      z != NULL ? MEM(bin[3]) : NULL, MEM(bout[0]), c->err);
	mlcl_buf_put(d, t);
	return rc;
}

/*
 * fused_epi: a FusedGemm's or FusedMatMul's activation into the GEMM's
 * epilogue (which applies it last: act(alpha A B + beta C + bias + Z)).
 */
static int
fused_epi(struct ml_opctx *c, struct mlcl_epi *epi, struct mlcl_epi **ep)
{
	epi->act = ml_fused_act(c->node);
	if (epi->act < 0)
		return ml_opfail(c, ML_EINVAL, "unknown activation '%s'",
				 ml_attr_str(c->node, "activation", ""));
	epi->lo = (float)ml_attr_float(c->node, "clip_min", -INFINITY);
	epi->hi = (float)ml_attr_float(c->node, "clip_max", INFINITY);
	*ep = epi;
	return 0;
}

static int
run_gemm(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *a = c->in[0], *b = c->in[1], *cc = ML_IN(c, 2), *y = c->out[0];
	bool ta = ml_attr_int(c->node, "transA", 0) != 0;
	bool tb = ml_attr_int(c->node, "transB", 0) != 0;
	float alpha = (float)ml_attr_float(c->node, "alpha", 1.0);
	float beta = (float)ml_attr_float(c->node, "beta", 1.0);
	if (a->rank != 2 || b->rank != 2 || y->rank != 2)
		return ml_opfail(c, ML_ENOTSUP, "Gemm of rank other than 2");
	int64_t M = y->dims[0], N = y->dims[1], K = ta ? a->dims[0] : a->dims[1];
	struct mlcl_epi epi = { 0 }, *ep = NULL;
	float bt = 0;
	if (cc != NULL && beta != 0 && ml_tval_numel(cc) > 0) {
		int64_t cn = ml_tval_numel(cc);
		if (cc->rank == 2 && cc->dims[0] == M && cc->dims[1] == N) {
			ML_TRY(mlcl_copy(d, MEM(bout[0]), 0, MEM(bin[2]), 0,
					 (size_t)ml_tval_nbytes(y), c->err));
			bt = beta;
		} else if (beta == 1 && cn == N && (cc->rank == 1 || cc->dims[0] == 1)) {
			epi.bias = MEM(bin[2]);
			epi.bias_sm = 0;
			epi.bias_sn = 1;
			ep = &epi;
		} else if (beta == 1 && cn == M && cc->rank == 2 && cc->dims[1] == 1) {
			epi.bias = MEM(bin[2]);
			epi.bias_sm = 1;
			epi.bias_sn = 0;
			ep = &epi;
		} else {
			return ml_opfail(c, ML_ENOTSUP, "this Gemm bias on OpenCL");
		}
	}
	if (c->node->op == ML_OP_FUSED_GEMM)
		ML_TRY(fused_epi(c, &epi, &ep));
	if ((epi.round = node_round(c->node)) != 0)
		ep = &epi;
	return mlcl_gemm_ex(d, f16(y), ta, tb, M, N, K, alpha, MEM(bin[0]), 0, a->dims[1],
			    MEM(bin[1]), 0, b->dims[1], bt, MEM(bout[0]), 0, N, 1, 0, 0, 0, ep,
			    c->err);
}

static int
run_matmul(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *a = c->in[0], *b = c->in[1], *y = c->out[0];
	if (a->rank < 2 || b->rank < 1 || a->dtype != b->dtype)
		return ml_opfail(c, ML_ENOTSUP, "this MatMul on OpenCL");
	int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1];
	int64_t N = b->rank == 1 ? 1 : b->dims[b->rank - 1];
	int64_t ba = 1, bb = 1, by = 1;
	for (int i = 0; i < a->rank - 2; i++)
		ba *= a->dims[i];
	for (int i = 0; i < b->rank - 2; i++)
		bb *= b->dims[i];
	by = ml_tval_numel(y) / (M * N > 0 ? M * N : 1);
	int64_t sa = M * K, sb = b->rank >= 2 ? K * N : 0;
	if (M * N == 0 || by == 0)
		return 0;
	if (bb == 1)
		sb = 0;	/* one B for every batch */
	if (ba == 1 && by > 1)
		sa = 0;
	if ((ba != 1 && ba != by) || (bb != 1 && bb != by))
		return ml_opfail(c, ML_ENOTSUP, "a broadcast MatMul batch on OpenCL");
	/* equal batch counts must also be equal batch shapes */
	if (ba == by && bb == by && by > 1 && a->rank != b->rank)
		return ml_opfail(c, ML_ENOTSUP, "a broadcast MatMul batch on OpenCL");
	if (K == 0)
		return ml_opfail(c, ML_ENOTSUP, "an empty MatMul on OpenCL");
	/* FusedMatMul: act(A B + bias[N] + Z), Z of Y's shape, in the GEMM's store */
	struct mlcl_epi epi = { 0 }, *ep = NULL;
	if (c->node->op == ML_OP_FUSED_MATMUL) {
		const struct ml_tval *bias = ML_IN(c, 2), *z = ML_IN(c, 3);
		ML_TRY(fused_epi(c, &epi, &ep));
		if (bias != NULL && ml_tval_numel(bias) > 0) {
			if (ml_tval_numel(bias) != N)
				return ml_opfail(c, ML_EINVAL, "the bias has %lld values, not N = %lld",
						 (long long)ml_tval_numel(bias), (long long)N);
			epi.bias = MEM(bin[2]);
			epi.bias_sn = 1;
		}
		if (z != NULL) {
			if (ml_tval_numel(z) != ml_tval_numel(y))
				return ml_opfail(c, ML_EINVAL, "Z does not have the output's shape");
			epi.z = MEM(bin[3]);
		}
	}
	if ((epi.round = node_round(c->node)) != 0)
		ep = &epi;
	return mlcl_gemm_ex(d, f16(y), false, false, M, N, K, 1.0f, MEM(bin[0]), 0, K,
			    MEM(bin[1]), 0, N, 0.0f, MEM(bout[0]), 0, N, by, sa, sb, M * N, ep,
			    c->err);
}

static int
run_pool(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0], *y = c->out[0];
	struct ml_pool p = { 0 };
	cl_kernel k;
	cl_int st;
	if (c->node->op == ML_OP_GLOBAL_AVERAGE_POOL || c->node->op == ML_OP_GLOBAL_MAX_POOL) {
		if (x->rank < 3)
			return ml_opfail(c, ML_ENOTSUP, "rank");
		cl_long planes = x->dims[0] * x->dims[1], hw = ml_tval_numel(x) / ML_MAX(planes, 1);
		cl_int is_max = c->node->op == ML_OP_GLOBAL_MAX_POOL;
		ML_TRY(kern(d, "nn", "ml_global_pool", y, &k, c->err));
		st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bout[0])) | ARG(k, 2, planes) |
		     ARG(k, 3, hw) | ARG(k, 4, is_max);
		if (st != CL_SUCCESS)
			return mlcl_argfail(c, st);
		return mlcl_launch1(d, k, (size_t)planes, c->err);
	}
	if (c->n_out > 1 && c->node->out[1] >= 0)
		return ml_opfail(c, ML_ENOTSUP, "MaxPool indices on OpenCL");
	struct ml_conv_geom g;
	ML_TRY(ml_conv_geom(c, &g));
	if (g.nsp < 1 || g.nsp > 2)
		return ml_opfail(c, ML_ENOTSUP, "%d-D pool on OpenCL", g.nsp);
	int o = g.nsp == 1;
	p.n = g.n;
	p.c = g.cin;
	p.h = o ? 1 : g.in[0];
	p.w = g.in[1 - o];
	p.oh = o ? 1 : g.out[0];
	p.ow = g.out[1 - o];
	p.kh = o ? 1 : g.k[0];
	p.kw = g.k[1 - o];
	p.sh = o ? 1 : g.stride[0];
	p.sw = g.stride[1 - o];
	p.dh = o ? 1 : g.dil[0];
	p.dw = g.dil[1 - o];
	p.ph = o ? 0 : g.pb[0];
	p.pw = g.pb[1 - o];
	p.peh = o ? 0 : g.pe[0];
	p.pew = g.pe[1 - o];
	p.is_max = c->node->op == ML_OP_MAX_POOL;
	p.count_pad = g.count_include_pad;
	size_t nel = (size_t)ml_tval_numel(y);
	ML_TRY(kern(d, "nn", "ml_pool2d", y, &k, c->err));
	st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bout[0])) | ARG(k, 2, p);
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, nel, c->err);
}

static int
run_batchnorm(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0], *y = c->out[0];
	if (ml_attr_int(c->node, "training_mode", 0) != 0 || (c->n_out > 1 && c->node->out[1] >= 0))
		return ml_opfail(c, ML_ENOTSUP, "BatchNormalization training on OpenCL");
	for (int j = 1; j < 5; j++)
		if (ML_IN(c, j) == NULL || ML_IN(c, j)->dtype != x->dtype)
			return ml_opfail(c, ML_ENOTSUP, "BatchNormalization operands on OpenCL");
	cl_long n = x->dims[0], ch = x->rank > 1 ? x->dims[1] : 1;
	cl_long inner = ml_tval_numel(x) / ML_MAX(n * ch, 1);
	cl_float eps = (cl_float)ml_attr_float(c->node, "epsilon", 1e-5);
	cl_kernel k;
	ML_TRY(kern(d, "nn", "ml_batchnorm", y, &k, c->err));
	cl_int st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bin[1])) | ARG(k, 2, MEM(bin[2])) |
		    ARG(k, 3, MEM(bin[3])) | ARG(k, 4, MEM(bin[4])) | ARG(k, 5, MEM(bout[0])) |
		    ARG(k, 6, n) | ARG(k, 7, ch) | ARG(k, 8, inner) | ARG(k, 9, eps);
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, (size_t)ml_tval_numel(y), c->err);
}

static int
run_softmax(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	int64_t outer, len, inner;
	ML_TRY(ml_softmax_view(c, c->in[0], &outer, &len, &inner));
	cl_long rows = outer * inner, l = len, in = inner;
	cl_int logsm = c->node->op == ML_OP_LOG_SOFTMAX;
	if (rows * l == 0)
		return 0;
	cl_kernel k;
	ML_TRY(kern(d, "nn", "ml_softmax", c->out[0], &k, c->err));
	cl_int st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bout[0])) | ARG(k, 2, rows) |
		    ARG(k, 3, l) | ARG(k, 4, in) | ARG(k, 5, logsm);
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, (size_t)rows, c->err);
}

static int
run_layernorm(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0], *sc = c->in[1], *b = ML_IN(c, 2);
	for (int j = 1; j < c->n_out; j++)
		if (c->node->out[j] >= 0)
			return ml_opfail(c, ML_ENOTSUP, "LayerNormalization statistics on OpenCL");
	int axis;
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", -1), x->rank, &axis));
	cl_long len = 1;
	for (int i = axis; i < x->rank; i++)
		len *= x->dims[i];
	if (ml_tval_numel(sc) != len || (b != NULL && ml_tval_numel(b) != len))
		return ml_opfail(c, ML_ENOTSUP, "a broadcast LayerNormalization scale on OpenCL");
	cl_long rows = ml_tval_numel(x) / ML_MAX(len, 1);
	cl_float eps = (cl_float)ml_attr_float(c->node, "epsilon", 1e-5);
	cl_int has_b = b != NULL;
	cl_kernel k;
	ML_TRY(kern(d, "nn", "ml_layernorm", c->out[0], &k, c->err));
	cl_mem bm = b != NULL ? MEM(bin[2]) : MEM(bin[1]);
	cl_int st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bin[1])) | ARG(k, 2, bm) |
		    ARG(k, 3, MEM(bout[0])) | ARG(k, 4, rows) | ARG(k, 5, len) | ARG(k, 6, eps) |
		    ARG(k, 7, has_b);
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, (size_t)rows, c->err);
}

static int
run_instnorm(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0];
	if (x->rank < 3)
		return ml_opfail(c, ML_ENOTSUP, "rank");
	cl_long planes = x->dims[0] * x->dims[1], ch = x->dims[1];
	cl_long hw = ml_tval_numel(x) / ML_MAX(planes, 1);
	cl_float eps = (cl_float)ml_attr_float(c->node, "epsilon", 1e-5);
	cl_kernel k;
	ML_TRY(kern(d, "nn", "ml_instnorm", c->out[0], &k, c->err));
	cl_int st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bin[1])) | ARG(k, 2, MEM(bin[2])) |
		    ARG(k, 3, MEM(bout[0])) | ARG(k, 4, planes) | ARG(k, 5, ch) | ARG(k, 6, hw) |
		    ARG(k, 7, eps);
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, (size_t)planes, c->err);
}

/*
 * Reductions.
 */
enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_SUMSQ, R_LOGSUM, R_LOGSUMEXP };

static int
rop(enum ml_op op)
{
	switch (op) {
	case ML_OP_REDUCE_SUM: return R_SUM;
	case ML_OP_REDUCE_MEAN: return R_MEAN;
	case ML_OP_REDUCE_MAX: return R_MAX;
	case ML_OP_REDUCE_MIN: return R_MIN;
	case ML_OP_REDUCE_PROD: return R_PROD;
	case ML_OP_REDUCE_L1: return R_L1;
	case ML_OP_REDUCE_L2: return R_L2;
	case ML_OP_REDUCE_SUM_SQUARE: return R_SUMSQ;
	case ML_OP_REDUCE_LOG_SUM: return R_LOGSUM;
	case ML_OP_REDUCE_LOG_SUM_EXP: return R_LOGSUMEXP;
	default: return -1;
	}
}

static int
run_reduce(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	const struct ml_tval *x = c->in[0], *y = c->out[0];
	bool mask[ML_MAX_RANK], known, noop;
	ML_TRY(ml_reduce_axes(c, x->rank, mask, &known, &noop));
	if (!known || x->rank > 8)
		return ml_opfail(c, ML_ENOTSUP, "reduce axes not known");
	if (noop) {
		return mlcl_copy(d, MEM(bout[0]), 0, MEM(bin[0]), 0, (size_t)ml_tval_nbytes(x),
				 c->err);
	}
	struct ml_red p = { 0 };
	cl_long xs[8];
	contig_strides(x, xs);
	p.nout = 1;
	p.nred = 1;
	for (int i = 0; i < x->rank; i++) {
		if (mask[i]) {
			p.rd[p.rrank] = x->dims[i];
			p.rs[p.rrank++] = xs[i];
			p.nred *= x->dims[i];
		} else {
			p.od[p.orank] = x->dims[i];
			p.os[p.orank++] = xs[i];
			p.nout *= x->dims[i];
		}
	}
	if (p.nred == 0 || p.nout != ml_tval_numel(y))
		return ml_opfail(c, ML_ENOTSUP, "an empty reduction on OpenCL");
	p.op = rop(c->node->op);
	cl_kernel k;
	ML_TRY(kern(d, "reduce", "ml_reduce", y, &k, c->err));
	cl_int st = ARG(k, 0, MEM(bin[0])) | ARG(k, 1, MEM(bout[0])) | ARG(k, 2, p);
	if (st != CL_SUCCESS)
		return mlcl_argfail(c, st);
	return mlcl_launch1(d, k, (size_t)p.nout, c->err);
}

/* Views share input 0's buffer; Assign writes its target's device copy. */
static int
run_view(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	(void)d, (void)c;
	struct mlcl_buf *b = bin[0];
	b->refs++;
	bout[0] = b;
	return 0;
}

static int
run_assign(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	(void)bout;
	int64_t nb = ml_tval_nbytes(c->in[0]);
	if (ml_tval_numel(c->in[0]) != ml_tval_numel(c->in[1]) || c->in[0]->dtype != c->in[1]->dtype)
		return ml_opfail(c, ML_EINVAL, "Assign of a different size or type");
	if (bin[0] == bin[1] || nb <= 0)
		return 0;
	return mlcl_copy(d, MEM(bin[0]), 0, MEM(bin[1]), 0, (size_t)nb, c->err);
}

/*
 * The op table: kernel, the program it needs, whether output 0 is a view
 * of input 0. The inputs read on the host are the op's (its descriptor's
 * host_in, ml_op_host_inputs).
 */
struct clop {
	enum ml_op op;
	int (*run)(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout);
	const char *file;
	bool view;
};

static const struct clop clops[] = {
	{ ML_OP_RELU, run_unary, "elem", false },
	{ ML_OP_SIGMOID, run_unary, "elem", false },
	{ ML_OP_TANH, run_unary, "elem", false },
	{ ML_OP_LEAKY_RELU, run_unary, "elem", false },
	{ ML_OP_ELU, run_unary, "elem", false },
	{ ML_OP_SELU, run_unary, "elem", false },
	{ ML_OP_CELU, run_unary, "elem", false },
	{ ML_OP_HARD_SIGMOID, run_unary, "elem", false },
	{ ML_OP_HARD_SWISH, run_unary, "elem", false },
	{ ML_OP_SILU, run_unary, "elem", false },
	{ ML_OP_GELU, run_unary, "elem", false },
	{ ML_OP_ERF, run_unary, "elem", false },
	{ ML_OP_EXP, run_unary, "elem", false },
	{ ML_OP_LOG, run_unary, "elem", false },
	{ ML_OP_NEG, run_unary, "elem", false },
	{ ML_OP_ABS, run_unary, "elem", false },
	{ ML_OP_SQRT, run_unary, "elem", false },
	{ ML_OP_RECIPROCAL, run_unary, "elem", false },
	{ ML_OP_SOFTPLUS, run_unary, "elem", false },
	{ ML_OP_SOFTSIGN, run_unary, "elem", false },
	{ ML_OP_FLOOR, run_unary, "elem", false },
	{ ML_OP_CEIL, run_unary, "elem", false },
	{ ML_OP_SIN, run_unary, "elem", false },
	{ ML_OP_COS, run_unary, "elem", false },
	{ ML_OP_CLIP, run_unary, "elem", false },
	{ ML_OP_ADD, run_binary, "elem", false },
	{ ML_OP_SUB, run_binary, "elem", false },
	{ ML_OP_MUL, run_binary, "elem", false },
	{ ML_OP_DIV, run_binary, "elem", false },
	{ ML_OP_POW, run_binary, "elem", false },
	{ ML_OP_MAX, run_binary, "elem", false },
	{ ML_OP_MIN, run_binary, "elem", false },
	{ ML_OP_SUM, run_binary, "elem", false },
	{ ML_OP_PRELU, run_binary, "elem", false },
	{ ML_OP_TRANSPOSE, run_transpose, "elem", false },
	{ ML_OP_CONCAT, run_concat, "elem", false },
	{ ML_OP_SPLIT, run_split, "elem", false },
	{ ML_OP_SLICE, run_slice, "elem", false },
	{ ML_OP_EXPAND, run_expand, "elem", false },
	{ ML_OP_GATHER, run_gather, "elem", false },
	{ ML_OP_CAST, run_cast, "elem", false },
	{ ML_OP_CONV, run_conv, "conv", false },
	{ ML_OP_FUSED_CONV, run_conv, "conv", false },
	{ ML_OP_CONV_NHWC, run_conv_nhwc, "conv", false },
	{ ML_OP_FUSED_ELEMWISE, mlcl_fused_elem_run, NULL, false },
	{ ML_OP_GEMM, run_gemm, "gemm", false },
	{ ML_OP_MATMUL, run_matmul, "gemm", false },
	{ ML_OP_FUSED_GEMM, run_gemm, "gemm", false },
	{ ML_OP_FUSED_MATMUL, run_matmul, "gemm", false },
	{ ML_OP_MAX_POOL, run_pool, "nn", false },
	{ ML_OP_AVERAGE_POOL, run_pool, "nn", false },
	{ ML_OP_GLOBAL_AVERAGE_POOL, run_pool, "nn", false },
	{ ML_OP_GLOBAL_MAX_POOL, run_pool, "nn", false },
	{ ML_OP_BATCH_NORM, run_batchnorm, "nn", false },
	{ ML_OP_LAYER_NORM, run_layernorm, "nn", false },
	{ ML_OP_INSTANCE_NORM, run_instnorm, "nn", false },
	{ ML_OP_SOFTMAX, run_softmax, "nn", false },
	{ ML_OP_LOG_SOFTMAX, run_softmax, "nn", false },
	{ ML_OP_REDUCE_SUM, run_reduce, "reduce", false },
	{ ML_OP_REDUCE_MEAN, run_reduce, "reduce", false },
	{ ML_OP_REDUCE_MAX, run_reduce, "reduce", false },
	{ ML_OP_REDUCE_MIN, run_reduce, "reduce", false },
	{ ML_OP_REDUCE_PROD, run_reduce, "reduce", false },
	{ ML_OP_REDUCE_L1, run_reduce, "reduce", false },
	{ ML_OP_REDUCE_L2, run_reduce, "reduce", false },
	{ ML_OP_REDUCE_SUM_SQUARE, run_reduce, "reduce", false },
	{ ML_OP_REDUCE_LOG_SUM, run_reduce, "reduce", false },
	{ ML_OP_REDUCE_LOG_SUM_EXP, run_reduce, "reduce", false },
	{ ML_OP_IDENTITY, run_view, NULL, true },
	{ ML_OP_RESHAPE, run_view, NULL, true },
	{ ML_OP_FLATTEN, run_view, NULL, true },
	{ ML_OP_SQUEEZE, run_view, NULL, true },
	{ ML_OP_UNSQUEEZE, run_view, NULL, true },
	{ ML_OP_DROPOUT, run_view, NULL, true },
	{ ML_OP_ASSIGN, run_assign, NULL, false },
	/* int8 (quant.c): operand dtypes checked by mlcl_q8_supports */
	{ ML_OP_Q8_QUANTIZE, mlcl_q8_run, "quant", false },
	{ ML_OP_Q8_DEQUANTIZE, mlcl_q8_run, "quant", false },
	{ ML_OP_Q8_CONV, mlcl_q8_run, "quant", false },
	{ ML_OP_Q8_ADD, mlcl_q8_run, "quant", false },
	{ ML_OP_Q8_MAX_POOL, mlcl_q8_run, "quant", false },
	{ ML_OP_Q8_GLOBAL_AVG_POOL, mlcl_q8_run, "quant", false },
};

/* the table by op, made once per process by whichever thread asks first */
static const struct clop *byop[ML_OP_COUNT];
static pthread_once_t byop_once = PTHREAD_ONCE_INIT;

static void
byop_init(void)
{
	for (size_t i = 0; i < sizeof clops / sizeof clops[0]; i++)
		byop[clops[i].op] = &clops[i];
}

static const struct clop *
find(enum ml_op op)
{
	pthread_once(&byop_once, byop_init);
	return op > ML_OP_NONE && op < ML_OP_COUNT ? byop[op] : NULL;
}

/*
 * The device interface.
 */
static int
cl_open(int index, void **ctx, struct ml_err *e)
{
	struct mlcl_dev *d;
	ML_TRY(mlcl_device(index, &d, e));
	*ctx = d;
	return 0;
}

static const char *
cl_describe(void *ctx)
{
	struct mlcl_dev *d = ctx;
	return d->name;
}

/*
 * half_weight: op is a product (ML_OPF_HALF_WEIGHT) with an fp16 weight w
 * against f32 data x (mlquant --dtype fp16, which leaves no Cast in front
 * of it): cl_run widens the weight to f32 on the device for each call, as
 * the Cast node of the older form did, and the product runs on f32.
 */
static bool
half_weight(enum ml_op op, enum ml_dtype x, enum ml_dtype w)
{
	return (ml_op_flags(op) & ML_OPF_HALF_WEIGHT) && x == ML_F32 && w == ML_F16;
}

/* float_ok: the element types of the float kernels: f32, and f16 storage on any device */
static bool
float_ok(enum ml_dtype t)
{
	return t == ML_F32 || t == ML_F16;
}

static bool
cl_supports(void *ctx, const struct ml_graph *g, const struct ml_node *n)
{
	struct mlcl_dev *d = ctx;
	const struct clop *o = find(n->op);
	if (o == NULL || d->lost)
		return false;
	if (o->run == mlcl_q8_run)
		return mlcl_q8_supports(g, n);
	/*
	 * FusedConv, FusedGemm, FusedMatMul: the GEMM or convolution store fuses
	 * the bias, the residual Z and every activation; not an unknown one, nor
	 * weights packed for the CPU (packed_n: mlopt's pack-weights pass).
	 */
	if ((n->op == ML_OP_FUSED_CONV || n->op == ML_OP_FUSED_GEMM ||
	     n->op == ML_OP_FUSED_MATMUL || n->op == ML_OP_CONV_NHWC) &&
	    (ml_fused_act(n) < 0 || ml_attr_find(n, "packed_n") != NULL))
		return false;
	/*
	 * ConvNHWC: one group or depthwise (what the layout pass makes), f32
	 * data. Not on a CPU device (POCL), unless ML_CL_NHWC=1: the layout pass
	 * chose NHWC for the CPU's own kernels, which on the same cores run
	 * MobileNet-V2's NHWC convolutions 8 times faster than POCL runs these
	 * (2 to 11 GFLOP/s: it does not vectorise their channel loops), so the
	 * placement leaves them to the CPU device there.
	 */
	if (n->op == ML_OP_CONV_NHWC) {
		const char *force = getenv("ML_CL_NHWC");
		if ((d->type & CL_DEVICE_TYPE_CPU) != 0 && (force == NULL || strcmp(force, "1") != 0))
			return false;
		const struct ml_tensor *x = n->n_in > 1 && n->in[0] >= 0 ? g->tensors[n->in[0]] : NULL;
		const struct ml_tensor *w = x != NULL && n->in[1] >= 0 ? g->tensors[n->in[1]] : NULL;
		/* a prologue's Wp [1, 1, Cx, C]: the convolution reads C channels */
		const struct ml_tensor *wp = ml_conv_nhwc_pre(n) && n->n_in > ML_NHWC_WP &&
					     n->in[ML_NHWC_WP] >= 0 ? g->tensors[n->in[ML_NHWC_WP]] : NULL;
		int64_t grp = ml_attr_int(n, "group", 1);
		if (x == NULL || w == NULL || x->rank != 4 || w->rank != 4 || x->dtype != ML_F32 ||
		    (wp != NULL && (wp->rank != 4 || wp->dtype != ML_F32 ||
				    ml_fused_pre_act(n) < 0)) ||
		    (grp != 1 && (grp != (wp != NULL ? wp->dims[3] : x->dims[3]) || w->dims[2] != 1 ||
				  w->dims[3] != grp)))
			return false;
	}
	/* a view copies nothing: any dtype (the uint8 tensors between int8 ops too) */
	bool anydt = o->view && n->op != ML_OP_DROPOUT;
	/*
	 * Data operands (not the host ones) must be device floats, all of one
	 * type (the kernels read every operand as T) but for Cast's two;
	 * Gather's indices i64.
	 */
	int fdt = 0;
	bool one_type = n->op != ML_OP_CAST;
	bool hw = n->n_in >= 2 && n->in[0] >= 0 && n->in[1] >= 0 &&
		  half_weight(n->op, g->tensors[n->in[0]]->dtype, g->tensors[n->in[1]]->dtype);
	for (int j = 0; j < n->n_in; j++) {
		int t = n->in[j];
		if (t < 0 || ml_host_input(ml_op_host_inputs(n->op), j) || (hw && j == 1))
			continue;
		enum ml_dtype dt = g->tensors[t]->dtype;
		if (n->op == ML_OP_GATHER && j == 1) {
			if (dt != ML_I64)
				return false;
			continue;
		}
		if (anydt)
			continue;
		if (!float_ok(dt) || (one_type && fdt != 0 && (int)dt != fdt))
			return false;
		fdt = (int)dt;
	}
	for (int j = 0; j < n->n_out; j++) {
		int t = n->out[j];
		if (t < 0)
			continue;
		enum ml_dtype dt = g->tensors[t]->dtype;
		if (!anydt && (!float_ok(dt) || (one_type && fdt != 0 && (int)dt != fdt)))
			return false;
		if (g->tensors[t]->rank < 0 || g->tensors[t]->rank > 8)
			return false;
		for (int k = 0; k < g->tensors[t]->rank; k++)
			if (g->tensors[t]->dims[k] < 0 && g->tensors[t]->sym[k] == NULL)
				return false;	/* data-dependent sizes */
	}
	if (n->op == ML_OP_ASSIGN)
		return n->n_in == 2 && n->in[0] >= 0 &&
		       (g->tensors[n->in[0]]->kind == ML_TK_PARAM ||
			g->tensors[n->in[0]]->kind == ML_TK_CONST);
	if (n->op == ML_OP_DROPOUT) {
		/* inference mode only: no mask output, training_mode absent or a constant false */
		if (n->n_out > 1 && n->out[1] >= 0)
			return false;
		if (n->n_in >= 3 && n->in[2] >= 0) {
			const struct ml_tensor *tm = g->tensors[n->in[2]];
			if (tm->kind != ML_TK_CONST || tm->data == NULL || tm->nbytes < 1 ||
			    ((const uint8_t *)tm->data)[0] != 0)
				return false;
		}
		return true;
	}
	return n->n_out >= 1 || n->op == ML_OP_ASSIGN;
}

static int
cl_prepare(void *ctx, const struct ml_graph *g, const struct ml_node *n, struct ml_err *e)
{
	struct mlcl_dev *d = ctx;
	const struct clop *o = find(n->op);
	if (o == NULL || o->file == NULL)
		return 0;
	enum ml_dtype dt = n->n_out > 0 && n->out[0] >= 0 ? g->tensors[n->out[0]]->dtype : ML_F32;
	/* one kernel of the program builds (or loads) all of it */
	static const char *const first[][2] = { { "elem", "ml_unary" }, { "nn", "ml_softmax" },
					  { "reduce", "ml_reduce" } };
	for (size_t i = 0; i < sizeof first / sizeof first[0]; i++)
		if (strcmp(o->file, first[i][0]) == 0) {
			cl_kernel k;
			return mlcl_kernel(d, o->file, first[i][1], opts(dt), &k, e);
		}
	/* the GEMM's tile is measured (once per device) and its program built now */
	if (strcmp(o->file, "gemm") == 0 || strcmp(o->file, "conv") == 0)
		return mlcl_gemm_prepare(d, dt == ML_F16, e);
	return 0;
}

static unsigned
cl_host_inputs(const struct ml_node *n)
{
	const struct clop *o = find(n->op);
	return o != NULL ? ml_op_host_inputs(n->op) : ~0u;
}

static bool
cl_view(const struct ml_node *n)
{
	const struct clop *o = find(n->op);
	return o != NULL && o->view;
}

static int
cl_alloc(void *ctx, size_t n, void **buf, struct ml_err *e)
{
	struct mlcl_buf *b;
	ML_TRY(mlcl_buf_get(ctx, n, &b, e));
	*buf = b;
	return 0;
}

static void
cl_retain(void *ctx, void *buf)
{
	(void)ctx;
	((struct mlcl_buf *)buf)->refs++;
}

static void
cl_free(void *ctx, void *buf)
{
	mlcl_buf_put(ctx, buf);
}

static int
cl_upload(void *ctx, void *buf, const void *src, size_t n, struct ml_err *e)
{
	return mlcl_write(ctx, MEM(buf), 0, src, n, e);
}

static int
cl_upload_keep(void *ctx, void *buf, const void *src, size_t n, struct ml_err *e)
{
	return mlcl_write_async(ctx, MEM(buf), 0, src, n, e);
}

static int
cl_download(void *ctx, void *buf, void *dst, size_t n, struct ml_err *e)
{
	return mlcl_read(ctx, MEM(buf), 0, dst, n, e);
}

static int
cl_xfer_times(void *ctx, double *start, double *end)
{
	return mlcl_xfer_times(ctx, start, end);
}

/* run_wide: o on c with its fp16 weight (half_weight) widened into an f32 buffer first */
static int
run_wide(struct mlcl_dev *d, const struct clop *o, struct ml_opctx *c, void **bin, void **bout)
{
	struct ml_tval w = *c->in[1], *ins[8];
	void *bins[8];
	struct mlcl_buf *wb = NULL;
	cl_ulong nel = (cl_ulong)ml_tval_numel(&w);
	cl_kernel k;

	if (c->n_in > 8 || bin[1] == NULL)
		return ml_opfail(c, ML_ENOTSUP, "an fp16 weight without a buffer");
	w.dtype = ML_F32;
	w.data = NULL;		/* the device's copy only */
	ML_TRY(mlcl_buf_get(d, (size_t)nel * sizeof(float), &wb, c->err));
	int rc = nel > 0 ? kern(d, "elem", "ml_cast_f16_f32", &w, &k, c->err) : 0;
	if (rc == 0 && nel > 0) {
		cl_int st = ARG(k, 0, MEM(bin[1])) | ARG(k, 1, wb->mem) | ARG(k, 2, nel);
		rc = st != CL_SUCCESS ? mlcl_argfail(c, st) : mlcl_launch1(d, k, nel, c->err);
	}
	if (rc == 0) {
		for (int i = 0; i < c->n_in; i++) {
			ins[i] = c->in[i];
			bins[i] = bin[i];
		}
		ins[1] = &w;
		bins[1] = wb;
		struct ml_opctx c2 = *c;
		c2.in = ins;
		/* the in-order queue runs the product before anything reuses wb */
		rc = o->run(d, &c2, bins, bout);
	}
	mlcl_buf_put(d, wb);
	return rc;
}

static int
cl_run(void *ctx, struct ml_opctx *c, void **bin, void **bout)
{
	const struct clop *o = find(c->node->op);
	if (o == NULL)
		return ml_opfail(c, ML_ENOTSUP, "no OpenCL kernel");
	for (int j = 0; j < c->n_out; j++)
		if (c->out[j] != NULL && !o->view && c->node->out[j] >= 0 && bout[j] == NULL)
			return ml_opfail(c, ML_ENOTSUP, "an output without a buffer");
	bool wide = c->n_in >= 2 && c->in[0] != NULL && c->in[1] != NULL &&
		    half_weight(c->node->op, c->in[0]->dtype, c->in[1]->dtype);
	int rc = wide ? run_wide(ctx, o, c, bin, bout) : o->run(ctx, c, bin, bout);
	if (rc < 0 && c->err != NULL && c->err->code == 0)
		c->err->code = rc;
	return rc;
}

static int
cl_sync(void *ctx, struct ml_err *e)
{
	return mlcl_finish(ctx, e);
}

static void
cl_profile(void *ctx, bool on)
{
	mlcl_profile(ctx, on);
}

static int
cl_times(void *ctx, double *start, double *end)
{
	struct mlcl_dev *d = ctx;
	cl_event *evs;
	int n;
	mlcl_events_take(d, &evs, &n);
	int rc = -1;
	for (int i = 0; i < n; i++) {
		double a, b;
		if (mlcl_event_times(d, evs[i], &a, &b) == 0) {
			if (rc < 0 || a < *start)
				*start = a;
			if (rc < 0 || b > *end)
				*end = b;
			rc = 0;
		}
		clReleaseEvent(evs[i]);
	}
	ml_free(evs);
	return rc;
}

struct evset {
	cl_event *evs;
	int n;
};

static void *
cl_take(void *ctx)
{
	struct evset *set = ml_malloc(sizeof *set);
	if (set == NULL)
		return NULL;
	mlcl_events_take(ctx, &set->evs, &set->n);
	if (set->n == 0) {
		ml_free(set->evs);
		ml_free(set);
		return NULL;
	}
	return set;
}

static int
cl_span(void *ctx, void *p, double *start, double *end)
{
	struct mlcl_dev *d = ctx;
	struct evset *set = p;
	int rc = -1;
	if (set == NULL)
		return -1;
	bool ok = clWaitForEvents((cl_uint)set->n, set->evs) == CL_SUCCESS;
	for (int i = 0; i < set->n; i++) {
		double a, b;
		if (ok && start != NULL && end != NULL &&
		    mlcl_event_times(d, set->evs[i], &a, &b) == 0) {
			if (rc < 0 || a < *start)
				*start = a;
			if (rc < 0 || b > *end)
				*end = b;
			rc = 0;
		}
		clReleaseEvent(set->evs[i]);
	}
	ml_free(set->evs);
	ml_free(set);
	return rc;
}

static void
cl_stats(void *ctx, struct ml_devstats *st)
{
	struct mlcl_dev *d = ctx;
	st->t_setup = d->t_setup;
	/* measuring the GEMM's tile is part of getting the programs ready */
	st->t_programs = d->t_programs + d->t_tune;
	st->n_built = d->n_built;
	st->n_cached = d->n_cached;
	mlcl_gemm_describe(d, st->gemm_tile, sizeof st->gemm_tile);
	st->live_bytes = (int64_t)d->live_bytes;
	st->pool_bytes = (int64_t)d->pool_bytes;
}

const struct ml_devops ml_cl_devops = {
	.name = "opencl",
	.open = cl_open,
	.describe = cl_describe,
	.supports = cl_supports,
	.prepare = cl_prepare,
	.host_inputs = cl_host_inputs,
	.view = cl_view,
	.alloc = cl_alloc,
	.retain = cl_retain,
	.free = cl_free,
	.upload = cl_upload,
	.upload_keep = cl_upload_keep,
	.download = cl_download,
	.xfer_times = cl_xfer_times,
	.run = cl_run,
	.sync = cl_sync,
	.profile = cl_profile,
	.times = cl_times,
	.take = cl_take,
	.span = cl_span,
	.stats = cl_stats,
};

int
ml_cl_count(struct ml_err *e)
{
	return mlcl_count(e);
}

int
ml_cl_info(int i, struct ml_device_info *out)
{
	const struct mlcl_dev *d = mlcl_info(i);
	memset(out, 0, sizeof *out);
	if (d == NULL)
		return ML_ENODEV;
	out->index = i + 1;
	snprintf(out->id, sizeof out->id, "cl:%d", i);
	snprintf(out->name, sizeof out->name, "%s", d->name);
	snprintf(out->vendor, sizeof out->vendor, "%s", d->vendor);
	snprintf(out->platform, sizeof out->platform, "%s", d->platform_name);
	snprintf(out->version, sizeof out->version, "%s", d->version);
	snprintf(out->driver, sizeof out->driver, "%s", d->driver);
	snprintf(out->type, sizeof out->type, "%s",
		 d->type & CL_DEVICE_TYPE_GPU ? "gpu" : d->type & CL_DEVICE_TYPE_CPU ? "cpu" :
		 d->type & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator" : "other");
	out->global_mem = (int64_t)d->global_mem;
	out->local_mem = (int64_t)d->local_mem;
	out->max_alloc = (int64_t)d->max_alloc;
	out->compute_units = (int)d->compute_units;
	out->max_work_group = (int64_t)d->max_wg;
	out->fp16 = d->has_fp16;
	out->fp64 = d->has_fp64;
	return 0;
}
