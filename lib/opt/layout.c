/*
 * layout.c: the layout pass: channels-last (NHWC) regions where they pay.
 * A region is a set of 4-D f32 values that are stored transposed (the
 * physical tensor holds Transpose(v, [0, 2, 3, 1])), joined by the nodes
 * that can run on that form: Conv and FusedConv (as ml.ConvNHWC, weights
 * re-laid-out), the elementwise ops (constant operands re-laid-out) and
 * GlobalAveragePool (as ReduceMean over axes 1 and 2).
 * A Transpose [0, 2, 3, 1] of a region value is then the value itself and
 * goes, and so does a Transpose [0, 3, 1, 2] that makes one; every other
 * reader gets the value back through one Transpose at the boundary, and a
 * value made outside comes in through one. Each region, a connected set,
 * is converted whole or not at all, by a cost estimate: the transposes
 * removed and the faster depthwise kernels against the boundary
 * transposes. ConvNeXt's blocks (depthwise Conv, Transpose, LayerNorm,
 * Linear, GELU, Linear, Transpose, residual Add) so run in NHWC end to end.
 */
#include <stdio.h>

#include "opt/opt.h"
#include "ops/fused.h"
#include "ops/nn.h"

static const int64_t to_nhwc[4] = { 0, 2, 3, 1 }, to_nchw[4] = { 0, 3, 1, 2 };

/*
 * The cost estimate, in the time of transposing one element (about 0.12 ns
 * on the machines the bench runs on). A pointwise convolution (1x1, stride
 * 1, no padding) is one SGEMM in either layout, but in NHWC the pixels are
 * its rows, which tile better than NCHW's few output channels by a short
 * plane (MobileNet's 14x14 and 7x7 stages: 1.4 to 1.75 times faster): a
 * gain of 1/30 of a transposed element per multiply-add where the outputs
 * fill the SGEMM's 32-wide panels and the plane is over 16 pixels, a loss
 * as large where fewer than 32 outputs leave the panels half empty. Other
 * dense convolutions lose 1/25 in NHWC (the im2col of runs of C against
 * NCHW's direct, Winograd and implicit-GEMM kernels). A depthwise one differs per
 * multiply-add by about K / (4 OW) - 0.04 ns (K the window's width, OW the
 * output's): NCHW's loops run along output rows, which lose against
 * channel vectors when rows are short and windows wide (ConvNeXt's 7x7 on
 * 16 to 2 wide planes: 6 to 17 times faster in NHWC), while on wide planes
 * and 3x3 windows (MobileNet's first stages) NCHW is a little faster.
 * In transposed elements per multiply-add that is (K / (4 OW) - 0.04) /
 * 0.12 = (100 K - 16 OW) / (48 OW).
 */
#define DW_NUM(k, ow) (100 * (k) - 16 * (ow))
#define DW_DEN(ow) (48 * (ow))
#define PW_DIV 30
#define DENSE_DIV 25

/*
 * A node's role: outside any region; a Conv or an elementwise node that
 * joins its 4-D operands and output into one region; a GlobalAveragePool
 * that joins its input and output (in NHWC a ReduceMean over axes 1 and 2,
 * whose [N, 1, 1, C] is the NHWC form of [N, C, 1, 1]: EfficientNet's
 * squeeze-excitation blocks so stay in NHWC instead of transposing their
 * whole input back for the pool, a fifth of the model's time); a Transpose to NHWC
 * of a region value (it goes when the region is converted); a Transpose to
 * NCHW that makes a region value (it goes unless the value is also read
 * outside).
 */
enum { R_OTHER, R_CONV, R_ELEM, R_GAP, R_SINK, R_SOURCE };
/* How a region value is made: by a region node, by a Transpose to NCHW, or else (an input). */
enum { P_COUPLED, P_SOURCE, P_OTHER };

struct lay {
	struct opt *o;
	int nt;
	int *root;		/* union-find over tensors; -1: not a 4-D candidate */
	int *role;		/* per node */
	int64_t *score;		/* per root: cost of converting minus what it saves */
	int *phys;		/* per tensor in a converted region: its NHWC tensor */
	int *resolve;		/* per removed Transpose's output: the tensor holding it */
	int *relaid;		/* per constant: its re-laid-out copy */
	int *kind;		/* per region tensor: its producer's kind (P_*) */
	bool *logical;		/* per region tensor: read outside the region, or pinned */
	int *psink;		/* per tensor: the Transpose that goes and writes a pinned name */
};

static int64_t
numel(const struct opt *o, int t)
{
	struct ml_tval v;
	ml_graph_tval(o->g, t, &v);
	return ml_tval_numel(&v);
}

/* cand: t may be stored transposed: an f32 activation or input of known 4-D shape. */
static bool
cand(const struct opt *o, int t)
{
	return t >= 0 && mlopt_is_f32(o, t) && o->g->tensors[t]->rank == 4 &&
	       mlopt_const(o, t, ML_UNDEF) == NULL && o->g->tensors[t]->kind != ML_TK_CONST;
}

static int
find(struct lay *l, int t)
{
	while (l->root[t] != t)
		t = l->root[t] = l->root[l->root[t]];
	return t;
}

static void
unite(struct lay *l, int a, int b)
{
	a = find(l, a);
	b = find(l, b);
	/* the smaller index is the root: the same graph gives the same roots */
	if (a < b)
		l->root[b] = a;
	else if (b < a)
		l->root[a] = b;
}

/* perm_is: node n is a Transpose by perm p (of 4). */
static bool
perm_is(const struct ml_node *n, const int64_t *p)
{
	const int64_t *perm;
	if (n->op != ML_OP_TRANSPOSE || ml_attr_ints(n, "perm", &perm) != 4)
		return false;
	for (int k = 0; k < 4; k++)
		if (perm[k] != p[k])
			return false;
	return true;
}

/* const_ok: a constant operand of rank <= 4 that can be re-laid-out. */
static bool
const_ok(const struct opt *o, int t)
{
	return mlopt_const(o, t, ML_F32) != NULL && o->g->tensors[t]->rank <= 4;
}

/* nhwc_shape: the shape of t broadcast to rank 4 (leading 1s), then transposed to NHWC. */
static void
nhwc_shape(const struct opt *o, int t, struct ml_tval *v)
{
	struct ml_tval s;
	ml_graph_tval(o->g, t, &s);
	int64_t d4[4] = { 1, 1, 1, 1 };
	for (int k = 0; k < s.rank; k++)
		d4[4 - s.rank + k] = s.dims[k];
	*v = (struct ml_tval){ .dtype = s.dtype, .rank = 4 };
	for (int k = 0; k < 4; k++)
		v->dims[k] = d4[to_nhwc[k]];
}

/*
 * conv_ok: a Conv or FusedConv that ConvNHWC computes: 2-D, f32, constant
 * weights and bias, explicit pads, and one group or depthwise (one input
 * channel per group, multiplier 1).
 */
static bool
conv_ok(const struct opt *o, int ni)
{
	const struct ml_node *n = &o->g->nodes[ni];
	if ((n->op != ML_OP_CONV && n->op != ML_OP_FUSED_CONV) || n->n_in < 2 || n->n_out != 1 ||
	    !cand(o, n->in[0]) || !cand(o, n->out[0]))
		return false;
	int w = n->in[1], b = n->n_in > 2 ? n->in[2] : -1, z = n->n_in > 3 ? n->in[3] : -1;
	const struct ml_tensor *wt = o->g->tensors[w];
	if (mlopt_const(o, w, ML_F32) == NULL || wt->rank != 4 ||
	    (b >= 0 && (mlopt_const(o, b, ML_F32) == NULL || o->g->tensors[b]->rank != 1)) ||
	    (z >= 0 && !cand(o, z)) || (n->op == ML_OP_FUSED_CONV && ml_fused_act(n) < 0))
		return false;
	const char *ap = ml_attr_str(n, "auto_pad", "NOTSET");
	if (strcmp(ap, "NOTSET") != 0 && ap[0] != '\0')
		return false;
	int64_t group = ml_attr_int(n, "group", 1), cin = o->g->tensors[n->in[0]]->dims[1];
	return group == 1 || (group == cin && wt->dims[0] == cin && wt->dims[1] == 1);
}

/* elem_ok: an elementwise node whose 4-D operands can all be NHWC (constants re-laid-out). */
static bool
elem_ok(const struct opt *o, int ni)
{
	const struct ml_node *n = &o->g->nodes[ni];
	const char *type = n->op == ML_OP_GELU || n->op == ML_OP_SILU || n->domain[0] == '\0' ?
				   n->op_type : "";
	bool felem = n->op == ML_OP_FUSED_ELEMWISE;
	if ((ml_fused_elem_op(type) < 0 && n->op != ML_OP_CLIP && !felem) || n->n_out != 1 ||
	    !cand(o, n->out[0]))
		return false;
	struct ml_tval y;
	nhwc_shape(o, n->out[0], &y);
	bool any = false;
	for (int j = 0; j < n->n_in; j++) {
		int t = n->in[j];
		if (t < 0)
			continue;
		if (!cand(o, t) && !const_ok(o, t))
			return false;
		any |= cand(o, t);
		/* FusedElementwise's operands must stay one block of dims */
		struct ml_tval a;
		int64_t inner, cnt;
		nhwc_shape(o, t, &a);
		if (felem && ((j == 0 && !cand(o, t)) || ml_fused_block(&a, &y, &inner, &cnt) < 0))
			return false;
	}
	return any;
}

/* conv_gain: what running Conv node ni in NHWC saves (negative: costs), by the estimate above. */
static int64_t
conv_gain(const struct opt *o, int ni)
{
	const struct ml_node *n = &o->g->nodes[ni];
	const struct ml_tensor *w = o->g->tensors[n->in[1]], *y = o->g->tensors[n->out[0]];
	int64_t macs = numel(o, n->out[0]) * w->dims[2] * w->dims[3], ow = ML_MAX(y->dims[3], 1);
	if (ml_attr_int(n, "group", 1) == 1) {
		bool pw = w->dims[2] == 1 && w->dims[3] == 1 && ml_attr_ints_all(n, "strides", 1) &&
			  ml_attr_ints_all(n, "pads", 0);
		macs *= w->dims[1];
		if (!pw)
			return -macs / DENSE_DIV;
		if (y->dims[2] * y->dims[3] <= 16)
			return 0;
		return w->dims[0] >= 32 ? macs / PW_DIV : -macs / PW_DIV;
	}
	return macs * DW_NUM(w->dims[3], ow) / DW_DEN(ow);
}

/* classify: every live node's role, the regions (unions), and their scores. */
static void
classify(struct lay *l)
{
	struct opt *o = l->o;
	struct ml_graph *g = o->g;

	for (int t = 0; t < l->nt; t++)
		l->root[t] = cand(o, t) ? t : -1;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		l->role[i] = R_OTHER;
		if (o->dead[i])
			continue;
		if (conv_ok(o, i)) {
			l->role[i] = R_CONV;
			unite(l, n->in[0], n->out[0]);
			if (n->n_in > 3 && n->in[3] >= 0)
				unite(l, n->in[3], n->out[0]);
		} else if (n->op == ML_OP_GLOBAL_AVERAGE_POOL && n->n_in == 1 && n->n_out == 1 &&
			   cand(o, n->in[0]) && cand(o, n->out[0]) &&
			   ml_graph_opset(g, "", 13) < 18) {
			/* (from opset 18 ReduceMean takes its axes as an input) */
			l->role[i] = R_GAP;
			unite(l, n->in[0], n->out[0]);
		} else if (elem_ok(o, i)) {
			l->role[i] = R_ELEM;
			for (int j = 0; j < n->n_in; j++)
				if (n->in[j] >= 0 && cand(o, n->in[j]))
					unite(l, n->in[j], n->out[0]);
		} else if (perm_is(n, to_nhwc) && cand(o, n->in[0])) {
			l->role[i] = R_SINK;
		} else if (perm_is(n, to_nchw) && cand(o, n->out[0])) {
			l->role[i] = R_SOURCE;
		}
	}
	/*
	 * A Transpose to NHWC that writes a pinned name (a graph output) goes
	 * only when a region node makes its input: that node writes the name.
	 */
	for (int t = 0; t < l->nt; t++) {
		l->score[t] = 0;
		l->psink[t] = -1;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (l->role[i] != R_SINK || !o->pinned[n->out[0]])
			continue;
		int p = mlopt_prod(o, n->in[0]), x = n->in[0];
		if (p >= 0 && (l->role[p] == R_CONV || l->role[p] == R_ELEM || l->role[p] == R_GAP) &&
		    l->psink[x] < 0)
			l->psink[x] = i;
		else
			l->role[i] = R_OTHER;
	}
}

/* prod_kind: how tensor t of a region is made: by a region node, a Transpose that goes, or else. */
static int
prod_kind(const struct lay *l, int t)
{
	int p = mlopt_prod(l->o, t);
	if (p < 0)
		return P_OTHER;
	if (l->role[p] == R_CONV || l->role[p] == R_ELEM || l->role[p] == R_GAP)
		return P_COUPLED;
	return l->role[p] == R_SOURCE ? P_SOURCE : P_OTHER;
}

/* needs_logical: t is read by a node outside the region (a removable Transpose is not), or pinned. */
static bool
needs_logical(const struct lay *l, int t)
{
	const struct opt *o = l->o;
	if (o->pinned[t])
		return true;
	for (int i = 0; i < o->g->n_nodes; i++) {
		const struct ml_node *n = &o->g->nodes[i];
		if (o->dead[i] || l->role[i] == R_CONV || l->role[i] == R_ELEM ||
		    l->role[i] == R_GAP || l->role[i] == R_SINK)
			continue;
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] == t)
				return true;
	}
	return false;
}

static void
score(struct lay *l)
{
	struct opt *o = l->o;
	struct ml_graph *g = o->g;

	for (int t = 0; t < l->nt; t++) {
		if (l->root[t] < 0)
			continue;
		int64_t s = 0, n = numel(o, t);
		bool logical = l->logical[t] = needs_logical(l, t);
		switch ((l->kind[t] = prod_kind(l, t))) {
		case P_COUPLED:
			s = logical ? n : 0;
			break;
		case P_SOURCE:
			s = logical ? 0 : -n;
			break;
		default:
			s = n;
			break;
		}
		l->score[find(l, t)] += s;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (l->role[i] == R_SINK)
			l->score[find(l, n->in[0])] -= numel(o, n->in[0]);
		else if (l->role[i] == R_CONV)
			l->score[find(l, n->out[0])] -= conv_gain(o, i);
	}
}

/* flipped: t (a tensor of the graph as it was) is in a region that is converted. */
static bool
flipped(struct lay *l, int t)
{
	return t >= 0 && t < l->nt && l->root[t] >= 0 && l->score[find(l, t)] < 0;
}

/* resolved: the tensor that holds t's value once the Transposes that go are gone. */
static int
resolved(const struct lay *l, int t)
{
	while (t >= 0 && t < l->nt && l->resolve[t] >= 0)
		t = l->resolve[t];
	return t;
}

/* new_act: a new activation tensor named after t with suffix. */
static int
new_act(struct opt *o, int t, const char *suffix)
{
	char base[300];
	snprintf(base, sizeof base, "%.280s%s", o->g->tensors[t]->name, suffix);
	char *name = mlopt_unique(o, base);
	if (name == NULL)
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	int k = ml_graph_tensor(o->g, name);
	return k < 0 ? ml_fail(o->e, ML_ENOMEM, "out of memory") : k;
}

/* add_transpose: a node Transpose(in, perm) writing out. */
static int
add_transpose(struct opt *o, int in, int out, const int64_t *perm)
{
	struct ml_graph *g = o->g;
	const char *inn[1] = { g->tensors[in]->name }, *outn[1] = { g->tensors[out]->name };
	int ni = ml_graph_add_node(g, "Transpose", "", g->tensors[out]->name, 1, inn, 1, outn, o->e);
	if (ni < 0)
		return ni;
	ML_TRY(ml_node_set_ints(g, ni, "perm", 4, perm));
	mlopt_note(o, "boundary Transpose");
	return 0;
}

/* relay_const: constant t broadcast to rank 4 and transposed to NHWC (a copy, made once). */
static int
relay_const(struct lay *l, int t)
{
	struct opt *o = l->o;
	if (numel(o, t) == 1)
		return t;
	if (l->relaid[t] >= 0)
		return l->relaid[t];
	struct ml_tval s, v;
	ml_graph_tval(o->g, t, &s);
	nhwc_shape(o, t, &v);
	int64_t d4[4] = { 1, 1, 1, 1 };
	for (int k = 0; k < s.rank; k++)
		d4[4 - s.rank + k] = s.dims[k];
	const float *src = mlopt_const(o, t, ML_F32);
	float *dst = ml_malloc(sizeof(float) * (size_t)numel(o, t) + 1);
	if (dst == NULL)
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	/* dst [n, h, w, c] from src [n, c, h, w] */
	for (int64_t n = 0, q = 0; n < d4[0]; n++)
		for (int64_t h = 0; h < d4[2]; h++)
			for (int64_t w = 0; w < d4[3]; w++)
				for (int64_t c = 0; c < d4[1]; c++)
					dst[q++] = src[((n * d4[1] + c) * d4[2] + h) * d4[3] + w];
	char base[300];
	snprintf(base, sizeof base, "%.280s_nhwc", o->g->tensors[t]->name);
	int k = mlopt_new_const(o, base, ML_F32, 4, v.dims, dst);
	ml_free(dst);
	if (k < 0)
		return k;
	l->relaid[t] = k;
	return k;
}

/*
 * conv_weights: W of Conv node ni re-laid-out for ConvNHWC, [kH, kW, C /
 * group, M] (HWIO): each device derives its own form from it (the CPU packs
 * a group's [kH kW C, M] matrix in its SGEMM's panels once per session;
 * OpenCL multiplies it as it is).
 */
static int
conv_weights(struct opt *o, int ni)
{
	const struct ml_node *n = &o->g->nodes[ni];
	const struct ml_tensor *wt = o->g->tensors[n->in[1]];
	const float *w = mlopt_const(o, n->in[1], ML_F32);
	int64_t M = wt->dims[0], cg = wt->dims[1], KH = wt->dims[2], KW = wt->dims[3];
	float *d = ml_calloc((size_t)(M * cg * KH * KW) + 1, sizeof(float));
	if (d == NULL)
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	for (int64_t m = 0; m < M; m++)
		for (int64_t c = 0; c < cg; c++)
			for (int64_t kh = 0; kh < KH; kh++)
				for (int64_t kw = 0; kw < KW; kw++)
					d[((kh * KW + kw) * cg + c) * M + m] =
						w[((m * cg + c) * KH + kh) * KW + kw];
	int64_t hd[4] = { KH, KW, cg, M };
	char base[300];
	snprintf(base, sizeof base, "%.280s_nhwc", wt->name);
	int k = mlopt_new_const(o, base, ML_F32, 4, hd, d);
	ml_free(d);
	return k;
}

/* to_conv: Conv node ni (its inputs and output already mapped) as ConvNHWC. */
static int
to_conv(struct lay *l, int ni, const int *in, int nin, int out)
{
	struct opt *o = l->o;
	int64_t ks[2] = { o->g->tensors[o->g->nodes[ni].in[1]]->dims[2],
			  o->g->tensors[o->g->nodes[ni].in[1]]->dims[3] };
	int w = conv_weights(o, ni);
	if (w < 0)
		return w;
	int ins[4] = { in[0], w, nin > 2 ? in[2] : -1, nin > 3 ? in[3] : -1 };
	const char *name = o->g->nodes[ni].name;
	ML_TRY(mlopt_rewrite(o, ni, "ConvNHWC", "ml", nin, ins, 1, &out, ni, &ni, 1));
	o->g->nodes[ni].name = (char *)name;
	/* the Conv's own kernel_shape, when it has one, holds the same values */
	if (ml_attr_find(&o->g->nodes[ni], "kernel_shape") == NULL)
		ML_TRY(ml_node_set_ints(o->g, ni, "kernel_shape", 2, ks));
	mlopt_note(o, "Conv to NHWC");
	return 0;
}

/* rewrite_node: region node ni reads and writes the NHWC tensors. */
static int
rewrite_node(struct lay *l, int ni)
{
	struct opt *o = l->o;
	struct ml_node *n = &o->g->nodes[ni];
	int in[64], nin = n->n_in;
	if (nin > 64)
		return ml_fail(o->e, ML_ENOTSUP, "node '%s' has more than 64 inputs", n->name);
	for (int j = 0; j < nin; j++) {
		int t = n->in[j];
		in[j] = t;
		if (t < 0 || (l->role[ni] == R_CONV && (j == 1 || j == 2)))
			continue;
		if (flipped(l, t))
			in[j] = l->phys[t];
		else if ((in[j] = relay_const(l, t)) < 0)
			return in[j];
	}
	int out = l->phys[n->out[0]];
	if (l->role[ni] == R_CONV)
		return to_conv(l, ni, in, nin, out);
	if (l->role[ni] == R_GAP) {
		const char *name = n->name;
		ML_TRY(mlopt_rewrite(o, ni, "ReduceMean", "", 1, in, 1, &out, -1, NULL, 0));
		o->g->nodes[ni].name = (char *)name;
		ML_TRY(ml_node_set_ints(o->g, ni, "axes", 2, (int64_t[]){ 1, 2 }));
		ML_TRY(ml_node_set_int(o->g, ni, "keepdims", 1));
		mlopt_note(o, "GlobalAveragePool to NHWC");
		return 0;
	}
	n = &o->g->nodes[ni];
	memcpy(n->in, in, sizeof(int) * (size_t)nin);
	n->out[0] = out;
	return 0;
}

/*
 * convert: the regions whose score is negative. First each value's NHWC
 * tensor (the input of a Transpose that goes, or a new tensor), the
 * Transposes that go, then the region's nodes, the readers of removed
 * Transposes' outputs, and the boundary Transposes.
 */
static int
convert(struct lay *l)
{
	struct opt *o = l->o;
	struct ml_graph *g = o->g;
	int nn = g->n_nodes, nt = l->nt;

	for (int t = 0; t < nt; t++) {
		if (!flipped(l, t))
			continue;
		if (l->kind[t] == P_SOURCE) {
			int p = mlopt_prod(o, t);
			l->phys[t] = g->nodes[p].in[0];
			if (!l->logical[t]) {
				mlopt_kill(o, p);
				mlopt_note(o, "Transpose removed");
			}
		} else if (l->psink[t] >= 0) {
			l->phys[t] = g->nodes[l->psink[t]].out[0];
			mlopt_kill(o, l->psink[t]);
			mlopt_note(o, "Transpose removed");
		} else if ((l->phys[t] = new_act(o, t, "_nhwc")) < 0) {
			return l->phys[t];
		}
	}
	/* the per-tensor arrays of o cover the new tensors from here on */
	ML_TRY(mlopt_index(o));
	for (int i = 0; i < nn; i++)
		if (!o->dead[i] && l->role[i] == R_SINK && flipped(l, g->nodes[i].in[0])) {
			l->resolve[g->nodes[i].out[0]] = l->phys[g->nodes[i].in[0]];
			mlopt_kill(o, i);
			mlopt_note(o, "Transpose removed");
		}
	for (int i = 0; i < nn; i++) {
		if (o->dead[i])
			continue;
		if ((l->role[i] == R_CONV || l->role[i] == R_ELEM || l->role[i] == R_GAP) &&
		    flipped(l, g->nodes[i].out[0]))
			ML_TRY(rewrite_node(l, i));
	}
	for (int t = 0; t < nt; t++) {
		if (!flipped(l, t) || l->kind[t] == P_SOURCE)
			continue;
		if (l->kind[t] == P_OTHER)
			ML_TRY(add_transpose(o, t, l->phys[t], to_nhwc));
		else if (l->logical[t])
			ML_TRY(add_transpose(o, l->phys[t], t, to_nchw));
	}
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_in; j++)
			g->nodes[i].in[j] = resolved(l, g->nodes[i].in[j]);
	return mlopt_index(o);
}

int
ml_pass_layout(struct opt *o)
{
	struct ml_graph *g = o->g;
	struct lay l = { .o = o, .nt = g->n_tensors };
	int rc = 0;

	/* a training step updates the weights in place: they keep their layout */
	if (g->train != NULL)
		return 0;
	size_t nt = (size_t)l.nt + 1, nn = (size_t)g->n_nodes + 1;
	l.root = ml_malloc(sizeof(int) * nt);
	l.role = ml_malloc(sizeof(int) * nn);
	l.score = ml_malloc(sizeof(int64_t) * nt);
	l.phys = ml_malloc(sizeof(int) * nt);
	l.resolve = ml_malloc(sizeof(int) * nt);
	l.relaid = ml_malloc(sizeof(int) * nt);
	l.kind = ml_malloc(sizeof(int) * nt);
	l.logical = ml_malloc(sizeof(bool) * nt);
	l.psink = ml_malloc(sizeof(int) * nt);
	if (l.root == NULL || l.role == NULL || l.score == NULL || l.phys == NULL ||
	    l.resolve == NULL || l.relaid == NULL || l.kind == NULL || l.logical == NULL ||
	    l.psink == NULL) {
		rc = ml_fail(o->e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int t = 0; t < l.nt; t++)
		l.phys[t] = l.resolve[t] = l.relaid[t] = -1;
	classify(&l);
	score(&l);
	bool any = false;
	for (int t = 0; t < l.nt && !any; t++)
		any = flipped(&l, t);
	if (any && (rc = convert(&l)) < 0)
		goto out;
	rc = o->changes;
out:
	ml_free(l.root);
	ml_free(l.role);
	ml_free(l.score);
	ml_free(l.phys);
	ml_free(l.resolve);
	ml_free(l.relaid);
	ml_free(l.kind);
	ml_free(l.logical);
	ml_free(l.psink);
	return rc;
}

/*
 * fuse-expand: a pointwise ConvNHWC (1x1, stride 1, no padding, one
 * group, constant W [1, 1, Cx, C], no residual) whose output only a
 * depthwise ConvNHWC without a residual reads becomes that node's
 * prologue: ConvNHWC(X, W, B, Wp, Bp) with prologue 1 and pre_activation
 * (and pre_clip_min, pre_clip_max) from the pointwise node. The expansion of an inverted residual block
 * (MobileNet-V2's 16 -> 96 channels at 112x112, EfficientNet's) is then
 * computed row by row as the depthwise window needs it (lib/cpu/nn_nhwc.c),
 * and the C-channel tensor is never written to memory whole. Only for
 * short windows (EXPAND_MAX_KH) and where
 * that tensor is large (EXPAND_MIN_BYTES, all images: smaller ones stay in
 * L2 between the two nodes anyway) and its rows wide (EXPAND_MIN_W: the
 * rows' products of 14 or 7 pixels ran 1.1 to 1.6 times slower than one
 * product of the plane, MobileNet-V2's 14x14 and 7x7 blocks on AVX2).
 */
#define EXPAND_MIN_BYTES ((int64_t)1 << 20)
#define EXPAND_MIN_W 28
/*
 * Windows of at most this many rows: a taller one's runs of output rows
 * compute more input rows twice (EfficientNet-B0's 5x5 stride 2 at 56x56
 * lost 15-25% fused).
 */
#define EXPAND_MAX_KH 3
int
ml_pass_fuse_expand(struct opt *o)
{
	struct ml_graph *g = o->g;
	if (g->train != NULL)
		return 0;
	for (int i = 0; i < g->n_nodes; i++) {
		if (o->dead[i] || g->nodes[i].op != ML_OP_CONV_NHWC)
			continue;
		const struct ml_node *d = &g->nodes[i];
		int64_t grp = ml_attr_int(d, "group", 1);
		if (d->n_in < 2 || d->n_in > 3 || d->in[0] < 0 || d->in[1] < 0 ||
		    ml_attr_find(d, "packed_n") != NULL || ml_conv_nhwc_pre(d) || ml_fused_act(d) < 0)
			continue;
		const struct ml_tensor *dw = g->tensors[d->in[1]];
		if (dw->rank != 4 || dw->dims[0] > EXPAND_MAX_KH || dw->dims[2] != 1 ||
		    dw->dims[3] != grp || grp < 1 || dw->dtype != ML_F32)
			continue;
		int x = d->in[0], pi = mlopt_prod(o, x);
		if (pi < 0 || g->nodes[pi].op != ML_OP_CONV_NHWC || mlopt_sole(o, x) != i)
			continue;
		const struct ml_node *p = &g->nodes[pi];
		if (p->n_in < 2 || p->n_in > 3 || p->in[0] < 0 || p->n_out != 1 ||
		    ml_attr_int(p, "group", 1) != 1 || ml_attr_find(p, "packed_n") != NULL ||
		    !ml_attr_ints_all(p, "strides", 1) || !ml_attr_ints_all(p, "pads", 0) ||
		    strcmp(ml_attr_str(p, "auto_pad", "NOTSET"), "NOTSET") != 0 ||
		    ml_fused_act(p) < 0 || !mlopt_f32(o, p->in[0]) ||
		    mlopt_const(o, p->in[1], ML_F32) == NULL)
			continue;
		const struct ml_tensor *pw = g->tensors[p->in[1]], *xt = g->tensors[x];
		if (numel(o, x) * 4 < EXPAND_MIN_BYTES || xt->rank != 4 || xt->dims[2] < EXPAND_MIN_W)
			continue;
		if (pw->rank != 4 || pw->dims[0] != 1 || pw->dims[1] != 1 || pw->dims[3] != grp ||
		    (p->n_in > 2 && p->in[2] >= 0 && mlopt_const(o, p->in[2], ML_F32) == NULL))
			continue;
		/* ConvNHWC(X, W, B, Wp, [Bp]): a zero B where the depthwise node has none */
		int in[5] = { p->in[0], d->in[1], d->n_in > 2 ? d->in[2] : -1, p->in[1],
			      p->n_in > 2 ? p->in[2] : -1 };
		if (in[2] < 0) {
			float *zb = ml_calloc((size_t)grp, sizeof(float));
			if (zb == NULL)
				return ml_fail(o->e, ML_ENOMEM, "out of memory");
			char base[300];
			snprintf(base, sizeof base, "%.280s_bias", dw->name);
			in[2] = mlopt_new_const(o, base, ML_F32, 1, &grp, zb);
			ml_free(zb);
			if (in[2] < 0)
				return in[2];
		}
		int out = d->out[0], srcs[2] = { pi, i };
		const char *name = d->name, *act = ml_attr_str(p, "activation", "");
		double lo = ml_attr_float(p, "clip_min", -INFINITY);
		double hi = ml_attr_float(p, "clip_max", INFINITY);
		mlopt_kill(o, pi);
		ML_TRY(mlopt_rewrite(o, i, "ConvNHWC", "ml", in[4] >= 0 ? 5 : 4, in, 1, &out, i, srcs,
				     2));
		g->nodes[i].name = (char *)name;
		ML_TRY(ml_node_set_int(g, i, "prologue", 1));
		if (act[0] != '\0')
			ML_TRY(ml_node_set_string(g, i, "pre_activation", act));
		if (lo != -INFINITY)
			ML_TRY(ml_node_set_float(g, i, "pre_clip_min", lo));
		if (hi != INFINITY)
			ML_TRY(ml_node_set_float(g, i, "pre_clip_max", hi));
		mlopt_note(o, "pointwise ConvNHWC into depthwise");
	}
	return o->changes;
}
