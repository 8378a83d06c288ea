/*
 * onnx_func.c: the internal ops (domain "ml") as ONNX model-local functions,
 * so that an optimised or quantised model exported to ONNX runs in any ONNX
 * runtime.
 *
 * Each internal node becomes a call of a FunctionProto of domain "ml" whose
 * body is standard ONNX ops of the model's own opset (11 or later). The
 * body is written for the node's attribute values, which it holds as
 * constants (its structure depends on them: the activation, the ops of a
 * FusedElementwise chain, the shapes of packed weights), so one function
 * serves all the nodes of one op with identical bodies. It is named by the
 * op type, the activation when there is one, and a number from the second
 * body on: FusedConv, FusedConv_relu, FusedConv_relu_2. The call keeps the
 * node's attributes, declared by the function (which leaves them unused),
 * so that the decoder rebuilds the node exactly from the call and its
 * name (ml_onnx_func_op).
 *
 * The bodies compute what the CPU kernels compute: the int8 ops round half
 * to even and saturate as QuantizeLinear does, Q8Conv sums in int32
 * (ConvInteger on the unpacked weights, the input padded with its zero
 * point) and scales in float, Q8GlobalAveragePool rounds half up in int32.
 * Training, distributed and fake-quantisation ops have no such body and are
 * refused (ML_ENOTSUP).
 */
#include <math.h>
#include <stdarg.h>

#include "fmt/onnx_func.h"
#include "ops/fused.h"
#include "ops/nn.h"
#include "cpu/quant_q8.h"

/* ONNX data types of the constants bodies hold */
enum { T_F32 = 1, T_U8 = 2, T_I32 = 6, T_I64 = 7 };
#define MIN_FUNC_OPSET 11
#define MAX_BODY_ATTRS 8

/* struct fb: one body being built, for node n of graph g. */
struct fb {
	struct ml_onnx_funcs *fs;
	const struct ml_graph *g;
	const struct ml_node *n;
	Onnx__NodeProto **nodes;
	size_t n_nodes, cap;
	Onnx__NodeProto *last;	/* the node attributes go to */
	int tmp;
	bool bad;		/* an allocation failed */
};

static void *
fa(struct fb *b, size_t n)
{
	void *p = ml_pbscratch_alloc(b->fs->s, n);
	if (p == NULL)
		b->bad = true;
	return p;
}

static void *
pnew(struct fb *b, const ProtobufCMessageDescriptor *desc)
{
	void *m = fa(b, desc->sizeof_message);
	if (m != NULL)
		protobuf_c_message_init(desc, m);
	return m;
}

static char *
fstr(struct fb *b, const char *fmt, ...)
{
	va_list ap;
	char tmp[64];
	va_start(ap, fmt);
	int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	char *s = fa(b, (size_t)k + 1);
	if (s != NULL)
		memcpy(s, tmp, (size_t)k + 1);
	return s;
}

/* notsup: refuse node n with a message naming it. */
static int
notsup(struct fb *b, const char *why)
{
	const char *nm = b->n->name != NULL ? b->n->name : "";
	return ml_fail(b->fs->e, ML_ENOTSUP, "cannot export ml.%s%s%s%s to ONNX: %s",
		       b->n->op_type, nm[0] ? " (node '" : "", nm, nm[0] ? "')" : "", why);
}

/* op_: a body node of type type on inputs in ("" for an absent one); its output's name. */
static const char *
op_(struct fb *b, const char *type, const char *const *in, int nin)
{
	Onnx__NodeProto *np = pnew(b, &onnx__node_proto__descriptor);
	char **ins = fa(b, sizeof(char *) * (size_t)(nin + 1));
	char **outs = fa(b, sizeof(char *) * 2);
	Onnx__AttributeProto **attrs = fa(b, sizeof *attrs * MAX_BODY_ATTRS);
	char *out = fstr(b, "t%d", b->tmp++);
	if (np == NULL || ins == NULL || outs == NULL || attrs == NULL || out == NULL)
		return NULL;
	if (b->n_nodes == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 32;
		Onnx__NodeProto **a = fa(b, sizeof *a * cap);
		if (a == NULL)
			return NULL;
		if (b->n_nodes)
			memcpy(a, b->nodes, sizeof *a * b->n_nodes);
		b->nodes = a;
		b->cap = cap;
	}
	for (int j = 0; j < nin; j++) {
		if (in[j] == NULL)
			return NULL;	/* an earlier step failed */
		ins[j] = (char *)in[j];
	}
	np->op_type = (char *)type;
	np->n_input = (size_t)nin;
	np->input = ins;
	np->n_output = 1;
	np->output = outs;
	outs[0] = out;
	np->attribute = attrs;
	b->nodes[b->n_nodes++] = np;
	b->last = np;
	return out;
}

#define OP(b, type, ...) \
	op_((b), (type), (const char *const[]){ __VA_ARGS__ }, \
	    (int)(sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(const char *)))

/* na: a new attribute of the last node. */
static Onnx__AttributeProto *
na(struct fb *b, const char *name, Onnx__AttributeProto__AttributeType type)
{
	if (b->bad || b->last == NULL)
		return NULL;
	ML_ASSERT(b->last->n_attribute < MAX_BODY_ATTRS);
	Onnx__AttributeProto *a = pnew(b, &onnx__attribute_proto__descriptor);
	if (a == NULL)
		return NULL;
	a->name = (char *)name;
	a->has_type = 1;
	a->type = type;
	b->last->attribute[b->last->n_attribute++] = a;
	return a;
}

static void
a_int(struct fb *b, const char *name, int64_t v)
{
	Onnx__AttributeProto *a = na(b, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
	if (a != NULL) {
		a->has_i = 1;
		a->i = v;
	}
}

static void
a_float(struct fb *b, const char *name, float v)
{
	Onnx__AttributeProto *a = na(b, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
	if (a != NULL) {
		a->has_f = 1;
		a->f = v;
	}
}

static void
a_ints(struct fb *b, const char *name, const int64_t *v, int n)
{
	Onnx__AttributeProto *a = na(b, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
	int64_t *c = fa(b, sizeof(int64_t) * (size_t)(n + 1));
	if (a == NULL || c == NULL)
		return;
	memcpy(c, v, sizeof(int64_t) * (size_t)n);
	a->n_ints = (size_t)n;
	a->ints = c;
}

#define PERM(b, x, ...) \
	perm_((b), (x), (const int64_t[]){ __VA_ARGS__ }, \
	      (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)))

static const char *
perm_(struct fb *b, const char *x, const int64_t *p, int n)
{
	const char *y = OP(b, "Transpose", x);
	a_ints(b, "perm", p, n);
	return y;
}

/* a_copy: node n's attribute name on the last body node, when n has it. */
static void
a_copy(struct fb *b, const char *name)
{
	const struct ml_attr *s = ml_attr_find(b->n, name);
	if (s == NULL)
		return;
	switch (s->type) {
	case ML_ATTR_INT:
		a_int(b, name, s->i);
		break;
	case ML_ATTR_FLOAT:
		a_float(b, name, (float)s->f);
		break;
	case ML_ATTR_INTS:
		a_ints(b, name, s->ints, s->n);
		break;
	case ML_ATTR_STRING: {
		Onnx__AttributeProto *a;
		a = na(b, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
		if (a != NULL) {
			a->has_s = 1;
			a->s.len = s->s_len;
			a->s.data = (uint8_t *)s->s;
		}
		break;
	}
	default:
		break;
	}
}

/* konst: a Constant node holding a tensor of dtype dt, rank 0 or 1 (n values). */
static const char *
konst(struct fb *b, int dt, const void *v, size_t esize, int n, int rank)
{
	Onnx__TensorProto *t = pnew(b, &onnx__tensor_proto__descriptor);
	uint8_t *d = fa(b, esize * (size_t)n + 1);
	int64_t *dims = fa(b, sizeof(int64_t) * 2);
	const char *y = op_(b, "Constant", NULL, 0);
	Onnx__AttributeProto *a = na(b, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
	if (t == NULL || d == NULL || dims == NULL || a == NULL)
		return NULL;
	memcpy(d, v, esize * (size_t)n);
	t->has_data_type = 1;
	t->data_type = dt;
	t->n_dims = (size_t)rank;
	dims[0] = n;
	t->dims = dims;
	t->has_raw_data = 1;
	t->raw_data.len = esize * (size_t)n;
	t->raw_data.data = d;
	a->t = t;
	return y;
}

#define KI64(b, ...) \
	konst((b), T_I64, (const int64_t[]){ __VA_ARGS__ }, sizeof(int64_t), \
	      (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)), 1)

static const char *
kf32(struct fb *b, float v)
{
	return konst(b, T_F32, &v, sizeof v, 1, 0);
}

static const char *
ku8(struct fb *b, int64_t v)
{
	uint8_t u = (uint8_t)v;
	return konst(b, T_U8, &u, 1, 1, 0);
}

static const char *
ki32(struct fb *b, int64_t v)
{
	int32_t u = (int32_t)v;
	return konst(b, T_I32, &u, sizeof u, 1, 0);
}

static const char *
cast(struct fb *b, const char *x, int to)
{
	const char *y = OP(b, "Cast", x);
	a_int(b, "to", to);
	return y;
}

static const char *
reshape(struct fb *b, const char *x, const char *shape)
{
	return OP(b, "Reshape", x, shape);
}

/* input j of the call, or "" when the node leaves it out */
static const char *
in_(struct fb *b, int j)
{
	return j < b->n->n_in && b->n->in[j] >= 0 ? fstr(b, "X%d", j) : "";
}

static bool
has_in(const struct fb *b, int j)
{
	return j < b->n->n_in && b->n->in[j] >= 0;
}

/* the graph's tensor of input j (NULL when absent) */
static const struct ml_tensor *
tin(const struct fb *b, int j)
{
	return has_in(b, j) ? b->g->tensors[b->n->in[j]] : NULL;
}

/*
 * reduce: ReduceMean or ReduceSum of x over axes, kept; the axes are an
 * input from opset 18 (13 for sums), an attribute before.
 */
static const char *
reduce(struct fb *b, const char *type, const char *x, const int64_t *axes, int n)
{
	int64_t since = strcmp(type, "ReduceSum") == 0 ? 13 : 18;
	const char *y;
	if (b->fs->opset >= since) {
		const char *ax = konst(b, T_I64, axes, sizeof(int64_t), n, 1);
		y = OP(b, type, x, ax);
	} else {
		y = OP(b, type, x);
		a_ints(b, "axes", axes, n);
	}
	a_int(b, "keepdims", 1);
	return y;
}

/* gelu: 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation. */
static const char *
gelu(struct fb *b, const char *x, bool tanh_form)
{
	const char *u;
	if (tanh_form) {
		const char *x3 = OP(b, "Mul", OP(b, "Mul", x, x), x);
		const char *in = OP(b, "Add", x, OP(b, "Mul", x3, kf32(b, 0.044715f)));
		u = OP(b, "Tanh", OP(b, "Mul", in, kf32(b, (float)sqrt(2.0 / M_PI))));
	} else {
		u = OP(b, "Erf", OP(b, "Mul", x, kf32(b, (float)M_SQRT1_2)));
	}
	return OP(b, "Mul", OP(b, "Mul", x, kf32(b, 0.5f)), OP(b, "Add", u, kf32(b, 1.0f)));
}

/* unary: the unary op of type s (ONNX's, or the internal Silu and Gelu) on x. */
static const char *
unary(struct fb *b, const char *s, const char *x)
{
	if (strcmp(s, "Silu") == 0)
		return OP(b, "Mul", x, OP(b, "Sigmoid", x));
	if (strcmp(s, "Gelu") == 0)
		return gelu(b, x, false);
	return OP(b, s, x);
}

/* act: the node's activation attribute applied to y. */
static const char *
act_pre(struct fb *b, const char *y, int *rc, bool pre)
{
	int a = pre ? ml_fused_pre_act(b->n) : ml_fused_act(b->n);
	if (a < 0) {
		*rc = notsup(b, "unknown activation");
		return NULL;
	}
	if (a == ML_UN_NONE)
		return y;
	if (a == ML_UN_CLIP) {
		const struct ml_attr *lo = ml_attr_find(b->n, pre ? "pre_clip_min" : "clip_min");
		const struct ml_attr *hi = ml_attr_find(b->n, pre ? "pre_clip_max" : "clip_max");
		return OP(b, "Clip", y, lo != NULL ? kf32(b, (float)lo->f) : "",
			  hi != NULL ? kf32(b, (float)hi->f) : "");
	}
	return unary(b, ml_fused_act_name(a), y);
}

/* act: the node's activation over y (a ConvNHWC prologue's: act_pre) */
static const char *
act(struct fb *b, const char *y, int *rc)
{
	return act_pre(b, y, rc, false);
}

/* unpack_panels: B packed as [ceil(N / P), K, P] back to [K, N]. */
static const char *
unpack_panels(struct fb *b, const char *w, int64_t n)
{
	const char *t = PERM(b, w, 1, 0, 2);
	t = reshape(b, t, KI64(b, 0, -1));
	return OP(b, "Slice", t, KI64(b, 0), KI64(b, n), KI64(b, 1));
}

static int
body_fconv(struct fb *b, const char **y)
{
	int rc = 0;
	const char *t = has_in(b, 2) ? OP(b, "Conv", in_(b, 0), in_(b, 1), in_(b, 2)) :
		OP(b, "Conv", in_(b, 0), in_(b, 1));
	static const char *const ca[] = { "auto_pad", "dilations", "group", "kernel_shape",
					  "pads", "strides" };
	for (size_t i = 0; i < sizeof ca / sizeof ca[0]; i++)
		a_copy(b, ca[i]);
	if (has_in(b, 3))
		t = OP(b, "Add", t, in_(b, 3));
	*y = act(b, t, &rc);
	return rc;
}

static int
body_conv_nhwc(struct fb *b, const char **y)
{
	int rc = 0;
	int64_t pn = ml_attr_int(b->n, "packed_n", 0);
	const int64_t *ks;
	const char *x = in_(b, 0), *w;
	bool pre = ml_conv_nhwc_pre(b->n);
	if (pre) {
		/* the prologue: X [N, H, W, Cx] times Wp as [Cx, C], + Bp, pre_activation */
		w = OP(b, "Flatten", in_(b, ML_NHWC_WP));
		a_int(b, "axis", 3);
		x = OP(b, "MatMul", x, w);
		if (has_in(b, ML_NHWC_BP))
			x = OP(b, "Add", x, in_(b, ML_NHWC_BP));
		x = act_pre(b, x, &rc, true);
		if (rc < 0)
			return rc;
	}
	x = PERM(b, x, 0, 3, 1, 2);
	if (pn > 0) {
		if (ml_attr_ints(b->n, "kernel_shape", &ks) != 2)
			return notsup(b, "packed weights without a 2-D kernel_shape");
		w = unpack_panels(b, in_(b, 1), pn);
		w = reshape(b, w, KI64(b, ks[0], ks[1], -1, pn));
		w = PERM(b, w, 3, 2, 0, 1);
	} else {
		w = PERM(b, in_(b, 1), 3, 2, 0, 1);
	}
	const char *t = has_in(b, 2) ? OP(b, "Conv", x, w, in_(b, 2)) : OP(b, "Conv", x, w);
	static const char *const ca[] = { "auto_pad", "dilations", "group", "kernel_shape",
					  "pads", "strides" };
	for (size_t i = 0; i < sizeof ca / sizeof ca[0]; i++)
		a_copy(b, ca[i]);
	t = PERM(b, t, 0, 2, 3, 1);
	if (has_in(b, 3) && !pre)
		t = OP(b, "Add", t, in_(b, 3));
	*y = act(b, t, &rc);
	return rc;
}

static int
body_fgemm(struct fb *b, const char **y)
{
	int rc = 0;
	const char *t = has_in(b, 2) ? OP(b, "Gemm", in_(b, 0), in_(b, 1), in_(b, 2)) :
		OP(b, "Gemm", in_(b, 0), in_(b, 1));
	a_copy(b, "alpha");
	a_copy(b, "beta");
	a_copy(b, "transA");
	a_copy(b, "transB");
	*y = act(b, t, &rc);
	return rc;
}

static int
body_fmatmul(struct fb *b, const char **y)
{
	int rc = 0;
	int64_t pn = ml_attr_int(b->n, "packed_n", 0);
	const char *w = pn > 0 ? unpack_panels(b, in_(b, 1), pn) : in_(b, 1);
	const char *t = OP(b, "MatMul", in_(b, 0), w);
	if (has_in(b, 2))
		t = OP(b, "Add", t, in_(b, 2));
	if (has_in(b, 3))
		t = OP(b, "Add", t, in_(b, 3));
	*y = act(b, t, &rc);
	return rc;
}

static int
body_layernorm(struct fb *b, const char **y)
{
	if (b->fs->opset >= 17) {
		const char *t = has_in(b, 2) ?
			OP(b, "LayerNormalization", in_(b, 0), in_(b, 1), in_(b, 2)) :
			OP(b, "LayerNormalization", in_(b, 0), in_(b, 1));
		a_copy(b, "axis");
		a_copy(b, "epsilon");
		if (b->last != NULL && b->n->n_out > 1) {
			char **outs = fa(b, sizeof(char *) * 4);
			if (outs == NULL)
				return 0;
			outs[0] = (char *)t;
			for (int k = 1; k < b->n->n_out; k++) {
				char *nm = fstr(b, "t%d", b->tmp++);
				outs[k] = nm;
				y[k] = nm;
			}
			b->last->output = outs;
			b->last->n_output = (size_t)b->n->n_out;
		}
		y[0] = t;
		return 0;
	}
	const struct ml_tensor *x = tin(b, 0);
	if (x == NULL || x->rank < 1)
		return notsup(b, "the rank of X is unknown");
	int64_t axis = ml_attr_int(b->n, "axis", -1), axes[ML_MAX_RANK];
	if (axis < 0)
		axis += x->rank;
	if (axis < 0 || axis >= x->rank)
		return notsup(b, "axis out of range");
	int na = 0;
	for (int64_t d = axis; d < x->rank; d++)
		axes[na++] = d;
	float eps = (float)ml_attr_float(b->n, "epsilon", 1e-5);
	const char *mean = reduce(b, "ReduceMean", in_(b, 0), axes, na);
	const char *d = OP(b, "Sub", in_(b, 0), mean);
	const char *var = reduce(b, "ReduceMean", OP(b, "Mul", d, d), axes, na);
	const char *inv = OP(b, "Reciprocal", OP(b, "Sqrt", OP(b, "Add", var, kf32(b, eps))));
	const char *t = OP(b, "Mul", OP(b, "Mul", d, inv), in_(b, 1));
	if (has_in(b, 2))
		t = OP(b, "Add", t, in_(b, 2));
	y[0] = t;
	if (b->n->n_out > 1)
		y[1] = mean;
	if (b->n->n_out > 2)
		y[2] = inv;
	return 0;
}

static int
body_felem(struct fb *b, const char **y)
{
	const struct ml_attr *ops = ml_attr_find(b->n, "ops");
	const int64_t *args, *swap;
	int na = ml_attr_ints(b->n, "args", &args), ns = ml_attr_ints(b->n, "swap", &swap);
	if (ops == NULL || ops->type != ML_ATTR_STRINGS || na != ops->n || ns != ops->n)
		return notsup(b, "ops, args and swap do not match");
	const char *v = in_(b, 0);
	for (int k = 0; k < ops->n; k++) {
		const char *s = ops->strings[k];
		int code = ml_fused_elem_op(s);
		if (code < 0)
			return notsup(b, "an op of its chain is unknown");
		if (code < ML_FE_UNARY) {
			if (args[k] < 1 || !has_in(b, (int)args[k]))
				return notsup(b, "an operand of its chain is missing");
			const char *o = in_(b, (int)args[k]);
			v = swap[k] ? OP(b, s, o, v) : OP(b, s, v, o);
		} else {
			v = unary(b, s, v);
		}
	}
	*y = v;
	return 0;
}

static int
body_attention(struct fb *b, const char **y)
{
	const char *s = OP(b, "MatMul", in_(b, 0), in_(b, 1));
	double scale = ml_attr_float(b->n, "scale", 1.0);
	if (scale != 1.0)
		s = OP(b, "Mul", s, kf32(b, (float)scale));
	s = OP(b, "Softmax", s);
	a_int(b, "axis", -1);
	*y = OP(b, "MatMul", s, in_(b, 2));
	return 0;
}

static int
body_gelu(struct fb *b, const char **y)
{
	*y = gelu(b, in_(b, 0), strcmp(ml_attr_str(b->n, "approximate", "none"), "tanh") == 0);
	return 0;
}

static int
body_silu(struct fb *b, const char **y)
{
	*y = unary(b, "Silu", in_(b, 0));
	return 0;
}

/* rank_of: the rank of input j, refusing the node when it is unknown or not 2, 3 or 4. */
static int
rank_of(struct fb *b, int j, int *rank)
{
	const struct ml_tensor *t = tin(b, j);
	if (t == NULL || t->rank < 2 || t->rank > 4)
		return notsup(b, "its input's rank is unknown or not 2, 3 or 4");
	*rank = t->rank;
	return 0;
}

static int
body_q8_quantize(struct fb *b, const char **y)
{
	int rank;
	ML_TRY(rank_of(b, 0, &rank));
	float inv = 1.0f / (float)ml_attr_float(b->n, "scale", 1.0);
	const char *v = OP(b, "Mul", in_(b, 0), kf32(b, inv));
	v = OP(b, "QuantizeLinear", v, kf32(b, 1.0f), ku8(b, ml_attr_int(b->n, "zero_point", 0)));
	*y = rank == 4 ? PERM(b, v, 0, 2, 3, 1) : v;
	return 0;
}

static int
body_q8_dequantize(struct fb *b, const char **y)
{
	int rank;
	ML_TRY(rank_of(b, 0, &rank));
	const char *x = rank == 4 ? PERM(b, in_(b, 0), 0, 3, 1, 2) : in_(b, 0);
	*y = OP(b, "DequantizeLinear", x, kf32(b, (float)ml_attr_float(b->n, "scale", 1.0)),
		ku8(b, ml_attr_int(b->n, "zero_point", 0)));
	return 0;
}

/* requant: clamp(round(v) + zy, lo, hi) as uint8, rounding half to even. */
static const char *
requant(struct fb *b, const char *v, int64_t zy, int64_t lo, int64_t hi)
{
	if (lo > 0 || hi < 255)
		v = OP(b, "Clip", v, kf32(b, (float)(lo - zy)), kf32(b, (float)(hi - zy)));
	return OP(b, "QuantizeLinear", v, kf32(b, 1.0f), ku8(b, zy));
}

static int
body_q8_conv(struct fb *b, const char **y)
{
	int rank;
	ML_TRY(rank_of(b, 0, &rank));
	const struct ml_tensor *x = tin(b, 0), *bias = tin(b, 2);
	if (bias == NULL || bias->rank != 1 || bias->dims[0] < 0 || x->dims[rank - 1] < 0)
		return notsup(b, "its channel counts are unknown");
	int64_t m = bias->dims[0], c = x->dims[rank - 1], kh = 1, kw = 1;
	int64_t group = ml_attr_int(b->n, "group", 1), pads[4] = { 0 };
	int64_t xz = ml_attr_int(b->n, "x_zero_point", 0);
	int64_t yz = ml_attr_int(b->n, "y_zero_point", 0);
	const int64_t *v;
	if (rank == 4 && ml_attr_ints(b->n, "kernel_shape", &v) == 2)
		kh = v[0], kw = v[1];
	if (rank == 4 && ml_attr_ints(b->n, "pads", &v) == 4)
		memcpy(pads, v, sizeof pads);
	if (group != 1 && group != c)
		return notsup(b, "group is neither 1 nor the channel count");
	if (kh < 1 || kh > 64 || kw < 1 || kw > 64 || m < 1 || c < 1 || m > INT32_MAX ||
	    c > INT32_MAX)
		return notsup(b, "its kernel or channel counts are out of range");
	if (rank == 3 && (x->dims[0] < 0 || x->dims[1] < 0))
		return notsup(b, "its input [N, T, C] has an unknown N or T");
	int64_t d0 = x->dims[0], d1 = rank == 3 ? x->dims[1] : 0;

	/* a matrix, or a batch of them ([N, T, C]: N * T rows), as [rows, C, 1, 1] */
	const char *xi = rank == 4 ? PERM(b, in_(b, 0), 0, 3, 1, 2) :
		reshape(b, in_(b, 0), KI64(b, -1, c, 1, 1));
	if (pads[0] || pads[1] || pads[2] || pads[3])
		xi = OP(b, "Pad", xi, KI64(b, 0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]),
			ku8(b, xz));
	const char *w;
	if (group == 1) {
		int64_t k = kh * kw * c, kp = ml_q8_kpad(k), np = (m + ML_Q8_NR - 1) / ML_Q8_NR;
		w = reshape(b, in_(b, 1), KI64(b, np, kp / ML_Q8_KG, ML_Q8_NR, ML_Q8_KG));
		w = PERM(b, w, 0, 2, 1, 3);
		w = reshape(b, w, KI64(b, np * ML_Q8_NR, kp));
		w = OP(b, "Slice", w, KI64(b, 0, 0), KI64(b, m, k), KI64(b, 0, 1));
		w = reshape(b, w, KI64(b, m, kh, kw, c));
		w = PERM(b, w, 0, 3, 1, 2);
	} else {
		w = reshape(b, in_(b, 1), KI64(b, kh, kw, c, 1));
		w = PERM(b, w, 2, 3, 0, 1);
	}
	const char *acc = OP(b, "ConvInteger", xi, w);
	a_copy(b, "strides");
	a_copy(b, "dilations");
	a_int(b, "group", group);
	acc = OP(b, "Add", acc, reshape(b, in_(b, 2), KI64(b, -1, 1, 1)));
	const char *f = OP(b, "Mul", cast(b, acc, T_F32), reshape(b, in_(b, 3), KI64(b, -1, 1, 1)));
	if (ml_attr_int(b->n, "out_float", 0) == 0)
		f = requant(b, f, yz, ml_attr_int(b->n, "act_min", 0),
			    ml_attr_int(b->n, "act_max", 255));
	*y = rank == 4 ? PERM(b, f, 0, 2, 3, 1) : rank == 3 ? reshape(b, f, KI64(b, d0, d1, m)) :
	     reshape(b, f, KI64(b, 0, -1));
	return 0;
}

static int
body_q8_add(struct fb *b, const char **y)
{
	double sy = ml_attr_float(b->n, "y_scale", 1.0);
	const char *t[2];
	static const char *const sc[] = { "a_scale", "b_scale" }, *const zp[] = { "a_zero_point",
										  "b_zero_point" };
	for (int i = 0; i < 2; i++) {
		float s = (float)(ml_attr_float(b->n, sc[i], 1.0) / sy);
		const char *v = OP(b, "Sub", cast(b, in_(b, i), T_F32),
				   kf32(b, (float)ml_attr_int(b->n, zp[i], 0)));
		t[i] = OP(b, "Mul", v, kf32(b, s));
	}
	*y = requant(b, OP(b, "Add", t[0], t[1]), ml_attr_int(b->n, "y_zero_point", 0),
		     ml_attr_int(b->n, "act_min", 0), 255);
	return 0;
}

static int
body_q8_maxpool(struct fb *b, const char **y)
{
	const char *x = cast(b, PERM(b, in_(b, 0), 0, 3, 1, 2), T_F32);
	x = OP(b, "MaxPool", x);
	a_copy(b, "kernel_shape");
	a_copy(b, "strides");
	a_copy(b, "pads");
	*y = PERM(b, cast(b, x, T_U8), 0, 2, 3, 1);
	return 0;
}

static int
body_q8_gap(struct fb *b, const char **y)
{
	const struct ml_tensor *x = tin(b, 0);
	if (x == NULL || x->rank != 4 || x->dims[1] < 0 || x->dims[2] < 0)
		return notsup(b, "its input's shape is unknown");
	int64_t hw = x->dims[1] * x->dims[2], axes[2] = { 1, 2 };
	if (hw <= 0)
		return notsup(b, "its input is empty");
	const char *s = reduce(b, "ReduceSum", cast(b, in_(b, 0), T_I32), axes, 2);
	s = OP(b, "Div", OP(b, "Add", s, ki32(b, hw / 2)), ki32(b, hw));
	*y = cast(b, s, T_U8);
	return 0;
}

/* body: the body of b->n, its outputs' names in y; 0, or ML_ENOTSUP. */
static int
body(struct fb *b, const char **y)
{
	switch (b->n->op) {
	case ML_OP_FUSED_CONV: return body_fconv(b, y);
	case ML_OP_CONV_NHWC: return body_conv_nhwc(b, y);
	case ML_OP_FUSED_GEMM: return body_fgemm(b, y);
	case ML_OP_FUSED_MATMUL: return body_fmatmul(b, y);
	case ML_OP_ML_LAYER_NORM: return body_layernorm(b, y);
	case ML_OP_FUSED_ELEMWISE: return body_felem(b, y);
	case ML_OP_FUSED_ATTENTION: return body_attention(b, y);
	case ML_OP_GELU: return body_gelu(b, y);
	case ML_OP_SILU: return body_silu(b, y);
	case ML_OP_Q8_QUANTIZE: return body_q8_quantize(b, y);
	case ML_OP_Q8_DEQUANTIZE: return body_q8_dequantize(b, y);
	case ML_OP_Q8_CONV: return body_q8_conv(b, y);
	case ML_OP_Q8_ADD: return body_q8_add(b, y);
	case ML_OP_Q8_MAX_POOL: return body_q8_maxpool(b, y);
	case ML_OP_Q8_GLOBAL_AVG_POOL: return body_q8_gap(b, y);
	case ML_OP_FAKE_QUANT:
		return notsup(b, "a fake-quantisation op of quantisation-aware training has no "
			      "ONNX body (quantise the model with mlquant first)");
	default:
		break;
	}
	const char *fam = ml_op_family(b->n->op);
	if (strcmp(fam, "grad") == 0 || strcmp(fam, "dist") == 0)
		return notsup(b, "a training op has no ONNX body (save the model as .mlg)");
	return notsup(b, "it has no ONNX body");
}

/* fname: the name of a new function for n: op type, activation, a number when taken. */
static char *
fname(struct fb *b)
{
	struct ml_onnx_funcs *fs = b->fs;
	char base[80];
	int a = ml_fused_act(b->n);
	const char *an = a > 0 ? ml_fused_act_name(a) : NULL;
	int k = snprintf(base, sizeof base, "%s", b->n->op_type);
	if (an != NULL && k > 0 && (size_t)k < sizeof base - 2) {
		snprintf(base + k, sizeof base - (size_t)k, "_%s", an);
		for (char *p = base + k; *p; p++)
			*p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
	}
	for (int v = 1;; v++) {
		char *s = v == 1 ? fstr(b, "%s", base) : fstr(b, "%s_%d", base, v);
		bool taken = false;
		if (s == NULL)
			return NULL;
		for (int i = 0; i < fs->n && !taken; i++)
			taken = strcmp(fs->f[i]->name, s) == 0;
		if (!taken)
			return s;
	}
}

const char *
ml_onnx_func_call(struct ml_onnx_funcs *fs, const struct ml_graph *g, const struct ml_node *n)
{
	struct fb b = { .fs = fs, .g = g, .n = n };
	const char *y[4] = { NULL };

	if (fs->opset < MIN_FUNC_OPSET) {
		char why[96];
		snprintf(why, sizeof why, "in opset %lld; its function needs opset %d or later",
			 (long long)fs->opset, MIN_FUNC_OPSET);
		fs->rc = notsup(&b, why);
		return NULL;
	}
	if (n->n_out < 1 || n->n_out > 3) {
		fs->rc = notsup(&b, "it has more outputs than a function of it can have");
		return NULL;
	}
	int rc = body(&b, y);
	if (rc < 0) {
		fs->rc = rc;
		return NULL;
	}
	for (int k = 0; k < n->n_out && !b.bad; k++) {
		if (y[k] == NULL)
			return NULL;
		const char *t = OP(&b, "Identity", y[k]);
		if (t != NULL)
			b.last->output[0] = fstr(&b, "Y%d", k);
	}
	Onnx__FunctionProto *f = pnew(&b, &onnx__function_proto__descriptor);
	Onnx__OperatorSetIdProto *o = pnew(&b, &onnx__operator_set_id_proto__descriptor);
	char **ins = fa(&b, sizeof(char *) * (size_t)(n->n_in + 1));
	char **outs = fa(&b, sizeof(char *) * (size_t)(n->n_out + 1));
	char **attrs = fa(&b, sizeof(char *) * (size_t)(n->n_attr + 1));
	Onnx__OperatorSetIdProto **ops = fa(&b, sizeof *ops * 2);
	if (b.bad || f == NULL || o == NULL || ins == NULL || outs == NULL || attrs == NULL ||
	    ops == NULL)
		return NULL;
	for (int j = 0; j < n->n_in; j++)
		if ((ins[j] = fstr(&b, "X%d", j)) == NULL)
			return NULL;
	for (int k = 0; k < n->n_out; k++)
		if ((outs[k] = fstr(&b, "Y%d", k)) == NULL)
			return NULL;
	for (int a = 0; a < n->n_attr; a++)
		attrs[a] = n->attrs[a].name;
	o->domain = "";
	o->has_version = 1;
	o->version = fs->opset;
	ops[0] = o;
	f->name = n->op_type;
	f->domain = "ml";
	f->doc_string = "the internal op of the ml library, in standard ONNX ops";
	f->n_input = (size_t)n->n_in;
	f->input = ins;
	f->n_output = (size_t)n->n_out;
	f->output = outs;
	f->n_attribute = (size_t)n->n_attr;
	f->attribute = attrs;
	f->n_node = b.n_nodes;
	f->node = b.nodes;
	f->n_opset_import = 1;
	f->opset_import = ops;
	/* the key: the function packed under the op type, before it gets its own name */
	size_t len = onnx__function_proto__get_packed_size(f);
	uint8_t *key = fa(&b, len + 1);
	if (key == NULL)
		return NULL;
	onnx__function_proto__pack(f, key);
	for (int i = 0; i < fs->n; i++)
		if (fs->key[i].len == len && memcmp(fs->key[i].data, key, len) == 0)
			return fs->f[i]->name;
	if ((f->name = fname(&b)) == NULL)
		return NULL;
	if (fs->n == fs->cap) {
		int cap = fs->cap ? 2 * fs->cap : 16;
		Onnx__FunctionProto **nf = fa(&b, sizeof *nf * (size_t)cap);
		ProtobufCBinaryData *nk = fa(&b, sizeof *nk * (size_t)cap);
		if (nf == NULL || nk == NULL)
			return NULL;
		if (fs->n) {
			memcpy(nf, fs->f, sizeof *nf * (size_t)fs->n);
			memcpy(nk, fs->key, sizeof *nk * (size_t)fs->n);
		}
		fs->f = nf;
		fs->key = nk;
		fs->cap = cap;
	}
	fs->f[fs->n] = f;
	fs->key[fs->n].data = key;
	fs->key[fs->n].len = len;
	fs->n++;
	return f->name;
}

const char *
ml_onnx_func_op(const char *name)
{
	char pre[64];
	size_t len = strlen(name);

	for (size_t k = len; k > 0; k--) {
		if (k < len && name[k] != '_')
			continue;
		if (k >= sizeof pre)
			continue;
		memcpy(pre, name, k);
		pre[k] = '\0';
		enum ml_op op = ml_op_lookup(pre, "ml");
		if (op != ML_OP_NONE)
			return ml_op_name(op);
	}
	return NULL;
}
