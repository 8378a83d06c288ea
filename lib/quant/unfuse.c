/*
 * unfuse.c: ml_quantize's first step on a graph that mlopt has already
 * optimised: its FusedConv and FusedGemm nodes (lib/ops/fused.c) with no
 * activation, Relu or Clip are split back into Conv or Gemm, an Add of the
 * residual Z (FusedConv) and the activation, which the quantiser knows
 * (Conv + Relu or Clip becomes one Q8Conv, Add + Relu one Q8Add). A
 * FusedMatMul with a constant B and an input of rank 2 or 3 keeps its op
 * and its bias (the quantiser takes FusedMatMul(A, B, bias) as a product
 * with a bias) and loses its residual Z and activation to an Add and a
 * Relu or Clip; a B that mlopt packed for the SGEMM is unpacked first. A
 * fused node with another activation (Sigmoid, Tanh, Silu, Gelu) stays
 * float, as mlquant(1) says. A channels-last ConvNHWC (mlopt's layout
 * pass) goes back to NCHW first, as a FusedConv between two Transposes,
 * which cancel in pairs between neighbouring convolutions; one with a
 * pointwise prologue (mlopt's fuse-expand) is two ConvNHWC nodes again
 * before that.
 */
#include <stdio.h>

#include "ops/fused.h"
#include "ops/nn.h"
#include "quant/quant.h"

/* const_f32: t is a constant f32 tensor with data */
static bool
const_f32(const struct ml_graph *g, int t)
{
	const struct ml_tensor *x = t >= 0 ? ml_graph_t(g, t) : NULL;
	return x != NULL && (x->kind == ML_TK_CONST || x->kind == ML_TK_PARAM) &&
	       x->dtype == ML_F32 && x->data != NULL;
}

/* splittable: a fused node of g this file splits */
static bool
splittable(const struct ml_graph *g, const struct ml_node *n)
{
	if (n->op != ML_OP_FUSED_CONV && n->op != ML_OP_FUSED_GEMM && n->op != ML_OP_FUSED_MATMUL)
		return false;
	const char *a = ml_attr_str(n, "activation", "");
	if (strcmp(a, "") != 0 && strcmp(a, "Relu") != 0 && strcmp(a, "Clip") != 0)
		return false;
	if (n->op != ML_OP_FUSED_MATMUL)
		return true;
	/* FusedMatMul: only what the quantiser can take once split */
	if (n->n_in < 2 || n->in[0] < 0 || !const_f32(g, n->in[1]))
		return false;
	int ra = ml_graph_t(g, n->in[0])->rank, rb = ml_graph_t(g, n->in[1])->rank;
	bool packed = ml_attr_find(n, "packed_n") != NULL;
	return (ra == 2 || ra == 3) && rb == (packed ? 3 : 2) &&
	       (n->n_in < 3 || n->in[2] < 0 || const_f32(g, n->in[2]));
}

/* fresh_t: a new tensor named base + suffix (made unique with a number) */
static int
fresh_t(struct ml_graph *c, const char *base, const char *suffix)
{
	char nm[600];
	snprintf(nm, sizeof nm, "%s%s", base, suffix);
	for (int k = 1; ml_graph_find(c, nm) >= 0 && k < 1000; k++)
		snprintf(nm, sizeof nm, "%s%s.%d", base, suffix, k);
	return ml_graph_tensor(c, nm);
}

/* unpack_b: FusedMatMul node ni's packed B (fused.h) as a new [K, N] constant input 1 */
static int
unpack_b(struct ml_graph *c, int ni, struct ml_err *e)
{
	const struct ml_node *n = &c->nodes[ni];
	const struct ml_tensor *bp = ml_graph_t(c, n->in[1]);
	int64_t nn = ml_attr_int(n, "packed_n", 0), k = bp->dims[1], want;
	int64_t d[2] = { k, nn };
	if (nn <= 0 || k <= 0 || bp->dims[2] != ML_FUSED_PANEL ||
	    bp->dims[0] != (nn + ML_FUSED_PANEL - 1) / ML_FUSED_PANEL ||
	    !ml_mul_ok(bp->dims[0] * k, ML_FUSED_PANEL * (int64_t)sizeof(float), &want) ||
	    (int64_t)bp->nbytes != want)
		return ml_fail(e, ML_EINVAL, "node '%s': a packed B of the wrong shape", n->name);
	float *b = ml_malloc(sizeof(float) * (size_t)(k * nn));
	if (b == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	ml_fused_unpack(bp->data, k, nn, b);
	char base[512];
	snprintf(base, sizeof base, "%s", bp->name);
	int t = fresh_t(c, base, ".unpacked");
	int rc = t < 0 ? ml_fail(e, ML_ENOMEM, "out of memory") :
		 ml_graph_set_data(c, t, ML_TK_CONST, ML_F32, 2, d, b,
				   sizeof(float) * (size_t)(k * nn), e);
	ml_free(b);
	if (rc < 0)
		return rc;
	c->nodes[ni].in[1] = t;
	return 0;
}

static int
add1(struct ml_graph *c, const char *op, const char *name, int n_in, const int *in, int out,
     struct ml_err *e)
{
	const char *inn[3], *outn[1] = { ml_graph_t(c, out)->name };
	for (int i = 0; i < n_in; i++)
		inn[i] = in[i] >= 0 ? ml_graph_t(c, in[i])->name : "";
	return ml_graph_add_node(c, op, "", name, n_in, inn, 1, outn, e);
}

/*
 * nchw_able: a ConvNHWC node (mlopt's layout pass) that unlayout can turn
 * back into FusedConv: f32 data, a constant f32 W as the pass writes it
 * ([kH, kW, C / group, M], or packed for the CPU by an older mlopt).
 */
static bool
nchw_able(const struct ml_graph *g, const struct ml_node *n)
{
	if (n->op != ML_OP_CONV_NHWC || n->n_in < 2 || n->n_out != 1 || n->in[0] < 0 ||
	    n->out[0] < 0 || !const_f32(g, n->in[1]))
		return false;
	const struct ml_tensor *x = ml_graph_t(g, n->in[0]), *w = ml_graph_t(g, n->in[1]);
	int64_t pn = ml_attr_int(n, "packed_n", 0);
	return x->rank == 4 && x->dtype == ML_F32 && w->rank == (pn > 0 ? 3 : 4);
}

/* transpose4: a Transpose of tensor from into to, perm p (4 values), named name */
static int
transpose4(struct ml_graph *c, const char *name, int from, int to, const int64_t *p,
	   struct ml_err *e)
{
	int k = add1(c, "Transpose", name, 1, &from, to, e);
	if (k < 0)
		return k;
	return ml_node_set_ints(c, k, "perm", 4, p);
}

/*
 * unlayout: ConvNHWC node ni of c back to NCHW, which the quantiser's
 * kernels take: Transpose(X), FusedConv with W [M, C / group, kH, kW] and
 * the node's attributes, Transpose back to Y; the same for Z. Between two
 * such convolutions the Transposes meet in pairs, which mlopt's eliminate
 * pass then removes (mlq_unfuse).
 */
static int
unlayout(struct ml_graph *c, int ni, struct ml_err *e)
{
	static const int64_t to_nchw[4] = { 0, 3, 1, 2 }, to_nhwc[4] = { 0, 2, 3, 1 };
	const struct ml_node *n = &c->nodes[ni];
	const struct ml_tensor *wt = ml_graph_t(c, n->in[1]);
	const int64_t *ks;
	int64_t pn = ml_attr_int(n, "packed_n", 0), M, cg, KH, KW;
	if (ml_attr_ints(n, "kernel_shape", &ks) != 2)
		return ml_fail(e, ML_EINVAL, "node '%s': ConvNHWC without kernel_shape", n->name);
	KH = ks[0];
	KW = ks[1];
	if (pn > 0) {
		M = pn;
		cg = KH * KW > 0 ? wt->dims[1] / (KH * KW) : 0;
	} else {
		M = wt->dims[3];
		cg = wt->dims[2];
		if (wt->dims[0] != KH || wt->dims[1] != KW)
			return ml_fail(e, ML_EINVAL, "node '%s': W does not match kernel_shape",
				       n->name);
	}
	int64_t K = KH * KW * cg, want, np = (M + ML_FUSED_PANEL - 1) / ML_FUSED_PANEL;
	if (M <= 0 || cg <= 0 || K <= 0 ||
	    !ml_mul_ok(pn > 0 ? np * ML_FUSED_PANEL * K : K * M, (int64_t)sizeof(float), &want) ||
	    (int64_t)wt->nbytes != want ||
	    (pn > 0 && (wt->dims[0] != np || wt->dims[1] != K || wt->dims[2] != ML_FUSED_PANEL)))
		return ml_fail(e, ML_EINVAL, "node '%s': W of the wrong shape", n->name);
	/* W as the [kH kW C, M] matrix: the file's, or an older mlopt's panels unpacked */
	float *plain = pn > 0 ? ml_malloc(sizeof(float) * (size_t)(K * M)) : NULL;
	float *oihw = ml_malloc(sizeof(float) * (size_t)(K * M));
	if (oihw == NULL || (pn > 0 && plain == NULL)) {
		ml_free(plain);
		ml_free(oihw);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	if (pn > 0)
		ml_fused_unpack(wt->data, K, M, plain);
	const float *hwio = pn > 0 ? plain : wt->data;
	for (int64_t m = 0; m < M; m++)
		for (int64_t ci = 0; ci < cg; ci++)
			for (int64_t r = 0; r < KH * KW; r++)
				oihw[(m * cg + ci) * KH * KW + r] = hwio[(r * cg + ci) * M + m];
	ml_free(plain);
	char base[512], name[512], tn[600];
	snprintf(base, sizeof base, "%s", ml_graph_t(c, n->out[0])->name);
	snprintf(name, sizeof name, "%s", n->name != NULL ? n->name : "conv");
	int w2 = fresh_t(c, base, ".w_oihw");
	int rc = w2 < 0 ? ml_fail(e, ML_ENOMEM, "out of memory") :
		 ml_graph_set_data(c, w2, ML_TK_CONST, ML_F32, 4, (int64_t[]){ M, cg, KH, KW },
				   oihw, sizeof(float) * (size_t)(K * M), e);
	ml_free(oihw);
	if (rc < 0)
		return rc;
	int x = n->in[0], z = n->n_in > 3 ? n->in[3] : -1, y = n->out[0];
	int xt = fresh_t(c, base, ".x_nchw"), yt = fresh_t(c, base, ".nchw");
	int zt = z >= 0 ? fresh_t(c, base, ".z_nchw") : -1;
	if (xt < 0 || yt < 0 || (z >= 0 && zt < 0))
		return ml_fail(e, ML_ENOMEM, "out of memory");
	struct ml_node *nn = &c->nodes[ni];
	nn->op = ML_OP_FUSED_CONV;
	nn->op_type = ml_graph_strdup(c, "FusedConv");
	if (nn->op_type == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	nn->in[0] = xt;
	nn->in[1] = w2;
	if (z >= 0)
		nn->in[3] = zt;
	nn->out[0] = yt;
	int keep = 0;
	for (int i = 0; i < nn->n_attr; i++)
		if (strcmp(nn->attrs[i].name, "packed_n") != 0)
			nn->attrs[keep++] = nn->attrs[i];
	nn->n_attr = keep;
	snprintf(tn, sizeof tn, "%s.to_nchw", name);
	ML_TRY(transpose4(c, tn, x, xt, to_nchw, e));
	if (z >= 0) {
		snprintf(tn, sizeof tn, "%s.z_to_nchw", name);
		ML_TRY(transpose4(c, tn, z, zt, to_nchw, e));
	}
	snprintf(tn, sizeof tn, "%s.to_nhwc", name);
	return transpose4(c, tn, yt, y, to_nhwc, e);
}

/* perm_is: node n is a Transpose with the 4 values of p as its perm */
static bool
perm_is(const struct ml_node *n, const int64_t *p)
{
	const int64_t *v;
	return n->op == ML_OP_TRANSPOSE && n->n_in == 1 && n->n_out == 1 &&
	       ml_attr_ints(n, "perm", &v) == 4 && memcmp(v, p, 4 * sizeof *v) == 0;
}

/*
 * sink_unary: where an elementwise op of one value (Relu, Clip with scalar
 * bounds, ...) sits between a Transpose to NHWC and Transposes back to
 * NCHW (a Clip that mlopt left unfused between two convolutions that
 * unlayout made NCHW again), the op reads the NCHW value itself and the
 * Transposes after it become Identity, which eliminate removes; the layout
 * pass's pooling (ReduceMean over axes 1 and 2) so becomes
 * GlobalAveragePool again. Returns how many it moved.
 */
static int
sink_unary(struct ml_graph *c, struct ml_err *e)
{
	static const int64_t to_nchw[4] = { 0, 3, 1, 2 }, to_nhwc[4] = { 0, 2, 3, 1 };
	int moved = 0;
	for (int ui = 0; ui < c->n_nodes; ui++) {
		struct ml_node *u = &c->nodes[ui];
		switch (u->op) {
		case ML_OP_RELU: case ML_OP_CLIP: case ML_OP_LEAKY_RELU: case ML_OP_SIGMOID:
		case ML_OP_TANH: case ML_OP_HARD_SIGMOID: case ML_OP_HARD_SWISH: case ML_OP_ELU:
		case ML_OP_SILU: case ML_OP_GELU: case ML_OP_NEG: case ML_OP_ABS:
			break;
		case ML_OP_REDUCE_MEAN: {
			/* the layout pass's pool: ReduceMean over H and W of the NHWC value */
			const int64_t *ax;
			if (ml_attr_ints(u, "axes", &ax) != 2 || ax[0] != 1 || ax[1] != 2 ||
			    ml_attr_int(u, "keepdims", 1) != 1 || u->n_in != 1)
				continue;
			break;
		}
		default:
			continue;
		}
		if (u->n_out != 1 || u->out[0] < 0 || u->n_in < 1 || u->in[0] < 0)
			continue;
		bool ok = true;
		for (int j = 1; j < u->n_in && ok; j++) {
			const struct ml_tensor *b = u->in[j] >= 0 ? ml_graph_t(c, u->in[j]) : NULL;
			ok = b == NULL || (const_f32(c, u->in[j]) && b->nbytes == sizeof(float));
		}
		int t1 = -1, uses = 0;
		for (int k = 0; k < c->n_nodes && ok; k++) {
			const struct ml_node *m = &c->nodes[k];
			for (int o = 0; o < m->n_out; o++)
				if (m->out[o] == u->in[0])
					t1 = perm_is(m, to_nhwc) ? k : -2;
			for (int j = 0; j < m->n_in && ok; j++)
				if (m->in[j] == u->out[0]) {
					ok = perm_is(m, to_nchw);
					uses++;
				}
		}
		for (int o = 0; o < c->n_outputs && ok; o++)
			ok = c->outputs[o] != u->out[0];
		if (!ok || t1 < 0 || uses == 0)
			continue;
		u->in[0] = c->nodes[t1].in[0];
		if (u->op == ML_OP_REDUCE_MEAN) {
			u->op = ML_OP_GLOBAL_AVERAGE_POOL;
			u->op_type = ml_graph_strdup(c, "GlobalAveragePool");
			if (u->op_type == NULL)
				return ml_fail(e, ML_ENOMEM, "out of memory");
			u->n_attr = 0;
		}
		for (int k = 0; k < c->n_nodes; k++) {
			struct ml_node *m = &c->nodes[k];
			if (m->n_in < 1 || m->in[0] != u->out[0])
				continue;
			m->op = ML_OP_IDENTITY;
			m->op_type = ml_graph_strdup(c, "Identity");
			if (m->op_type == NULL)
				return ml_fail(e, ML_ENOMEM, "out of memory");
			m->n_attr = 0;
		}
		moved++;
	}
	return moved;
}

/* split: node ni of c, already known splittable; < 0 on failure (e set) */
static int
split(struct ml_graph *c, int ni, struct ml_err *e)
{
	if (c->nodes[ni].op == ML_OP_FUSED_MATMUL && ml_attr_find(&c->nodes[ni], "packed_n") != NULL)
		ML_TRY(unpack_b(c, ni, e));
	struct ml_node *n = &c->nodes[ni];
	bool conv = n->op == ML_OP_FUSED_CONV, mm = n->op == ML_OP_FUSED_MATMUL;
	const char *act = ml_attr_str(n, "activation", "");
	float lo = (float)ml_attr_float(n, "clip_min", -INFINITY);
	float hi = (float)ml_attr_float(n, "clip_max", INFINITY);
	int z = (conv || mm) && n->n_in > 3 ? n->in[3] : -1;
	int y = n->out[0];
	char name[512], base[512];
	snprintf(name, sizeof name, "%s", n->name != NULL ? n->name : "fused");
	snprintf(base, sizeof base, "%s", ml_graph_t(c, y)->name);

	/*
	 * the node itself becomes the base op (FusedMatMul stays, with its
	 * bias), without the fused attributes
	 */
	if (!mm) {
		n->op = conv ? ML_OP_CONV : ML_OP_GEMM;
		n->op_type = ml_graph_strdup(c, conv ? "Conv" : "Gemm");
		n->domain = ml_graph_strdup(c, "");
		if (n->op_type == NULL || n->domain == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	if (n->n_in > 3)
		n->n_in = 3;
	int keep = 0;
	for (int i = 0; i < n->n_attr; i++) {
		const char *an = n->attrs[i].name;
		if (strcmp(an, "activation") != 0 && strcmp(an, "clip_min") != 0 &&
		    strcmp(an, "clip_max") != 0 && strcmp(an, "fused_from") != 0 &&
		    strcmp(an, "packed_n") != 0)
			n->attrs[keep++] = n->attrs[i];
	}
	n->n_attr = keep;
	bool has_act = strcmp(act, "") != 0;
	if (z < 0 && !has_act)
		return 0;
	int t = fresh_t(c, base, conv ? ".conv" : mm ? ".matmul" : ".gemm");
	if (t < 0)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	c->nodes[ni].out[0] = t;	/* n may move as nodes are added below */
	if (z >= 0) {
		int s = has_act ? fresh_t(c, base, ".sum") : y;
		if (s < 0)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		char an[600];
		snprintf(an, sizeof an, "%s.add", name);
		int in[2] = { t, z };
		ML_TRY(add1(c, "Add", an, 2, in, s, e));
		t = s;
	}
	if (!has_act)
		return 0;
	char an[600];
	snprintf(an, sizeof an, "%s.%s", name, strcmp(act, "Relu") == 0 ? "relu" : "clip");
	if (strcmp(act, "Relu") == 0)
		return add1(c, "Relu", an, 1, &t, y, e);
	if (ml_graph_opset(c, "", 13) < 11) {
		int k = add1(c, "Clip", an, 1, &t, y, e);
		if (k < 0)
			return k;
		ml_node_set_float(c, k, "min", lo);
		ml_node_set_float(c, k, "max", hi);
		return 0;
	}
	int b[2];
	float v[2] = { lo, hi };
	for (int i = 0; i < 2; i++) {
		b[i] = fresh_t(c, base, i == 0 ? ".clip_min" : ".clip_max");
		if (b[i] < 0)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		ML_TRY(ml_graph_set_data(c, b[i], ML_TK_CONST, ML_F32, 0, NULL, &v[i], sizeof(float),
					 e));
	}
	int in[3] = { t, b[0], b[1] };
	return add1(c, "Clip", an, 3, in, y, e);
}

/*
 * split_pre: ConvNHWC node ni's prologue (mlopt's fuse-expand: inputs Wp,
 * Bp and the pre_ attributes) back into a pointwise ConvNHWC of its own,
 * which the depthwise node then reads.
 */
static int
split_pre(struct ml_graph *c, int ni, struct ml_err *e)
{
	const struct ml_node *n = &c->nodes[ni];
	char base[512], name[600];
	snprintf(base, sizeof base, "%s", ml_graph_t(c, n->out[0])->name);
	snprintf(name, sizeof name, "%s_expand", n->name != NULL ? n->name : "conv");
	int t = fresh_t(c, base, ".expanded");
	if (t < 0)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	/* its shape, which unlayout needs before inference runs: X's with Wp's C channels */
	const struct ml_tensor *x = ml_graph_t(c, n->in[0]), *wp = ml_graph_t(c, n->in[ML_NHWC_WP]);
	struct ml_tensor *tt = ml_graph_t(c, t);
	tt->dtype = x->dtype;
	tt->rank = x->rank;
	for (int d = 0; d < x->rank && d < ML_MAX_RANK; d++)
		tt->dims[d] = d == 3 && wp->rank == 4 ? wp->dims[3] : x->dims[d];
	const char *inn[3] = { ml_graph_t(c, n->in[0])->name, ml_graph_t(c, n->in[ML_NHWC_WP])->name,
			       n->n_in > ML_NHWC_BP && n->in[ML_NHWC_BP] >= 0 ?
			       ml_graph_t(c, n->in[ML_NHWC_BP])->name : "" };
	const char *outn[1] = { ml_graph_t(c, t)->name };
	const char *act = ml_attr_str(n, "pre_activation", "");
	double lo = ml_attr_float(n, "pre_clip_min", -INFINITY);
	double hi = ml_attr_float(n, "pre_clip_max", INFINITY);
	int k = ml_graph_add_node(c, "ConvNHWC", "ml", name, inn[2][0] != '\0' ? 3 : 2, inn, 1, outn,
				  e);
	if (k < 0)
		return k;
	int rc = ml_node_set_ints(c, k, "kernel_shape", 2, (int64_t[]){ 1, 1 });
	if (rc == 0 && act[0] != '\0')
		rc = ml_node_set_string(c, k, "activation", act);
	if (rc == 0 && lo != -INFINITY)
		rc = ml_node_set_float(c, k, "clip_min", lo);
	if (rc == 0 && hi != INFINITY)
		rc = ml_node_set_float(c, k, "clip_max", hi);
	if (rc < 0)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	/* the depthwise node reads the new tensor and loses the prologue */
	struct ml_node *d = &c->nodes[ni];
	d->in[0] = t;
	d->n_in = 3;
	int na = 0;
	for (int a = 0; a < d->n_attr; a++)
		if (strncmp(d->attrs[a].name, "pre_", 4) != 0 && strcmp(d->attrs[a].name, "prologue") != 0)
			d->attrs[na++] = d->attrs[a];
	d->n_attr = na;
	return 0;
}

int
mlq_unfuse(const struct ml_graph *g, struct ml_graph **out, struct ml_err *e)
{
	struct ml_graph *c = NULL, *c2 = NULL;
	int nf = 0, rc;

	*out = NULL;
	for (int i = 0; i < g->n_nodes; i++)
		nf += splittable(g, &g->nodes[i]) || nchw_able(g, &g->nodes[i]);
	if (nf == 0)
		return 0;
	if ((rc = mlq_copy_graph(&c, g, e)) < 0)
		return rc;
	for (int i = 0, n1 = c->n_nodes; i < n1 && rc == 0; i++)
		if (c->nodes[i].op == ML_OP_CONV_NHWC && ml_conv_nhwc_pre(&c->nodes[i]) &&
		    c->nodes[i].n_in > ML_NHWC_WP && c->nodes[i].in[ML_NHWC_WP] >= 0)
			rc = split_pre(c, i, e) < 0 ? -1 : 0;
	int n0 = c->n_nodes, nl = 0;
	for (int i = 0; i < n0 && rc == 0; i++)
		if (nchw_able(c, &c->nodes[i])) {
			rc = unlayout(c, i, e) < 0 ? -1 : 0;
			nl++;
		}
	for (int i = 0; i < n0 && rc == 0; i++)
		if (splittable(c, &c->nodes[i]))
			rc = split(c, i, e) < 0 ? -1 : 0;
	for (int k; nl > 0 && rc == 0 && (k = sink_unary(c, e)) != 0;)
		rc = k < 0 ? -1 : 0;
	if (rc == 0 && (rc = ml_graph_toposort(c, e)) == 0 && (rc = mlq_copy_graph(&c2, c, e)) == 0) {
		/* the Transpose pairs between convolutions made NCHW again go */
		struct ml_opt_opts oo = { .passes = "eliminate,dce" };
		if (nl > 0 && (rc = ml_opt_run(c2, &oo, NULL, e)) < 0) {
			ml_graph_free(c2);
			c2 = NULL;
		}
		*out = c2;
		c2 = NULL;
	}
	ml_graph_free(c);
	ml_graph_free(c2);
	return rc < 0 ? (e != NULL && e->code < 0 ? e->code : ML_EINVAL) : 0;
}
