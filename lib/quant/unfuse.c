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
 * float, as mlquant(1) says.
 */
#include <stdio.h>

#include "ops/fused.h"
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

int
mlq_unfuse(const struct ml_graph *g, struct ml_graph **out, struct ml_err *e)
{
	struct ml_graph *c = NULL, *c2 = NULL;
	int nf = 0, rc;

	*out = NULL;
	for (int i = 0; i < g->n_nodes; i++)
		nf += splittable(g, &g->nodes[i]);
	if (nf == 0)
		return 0;
	if ((rc = mlq_copy_graph(&c, g, e)) < 0)
		return rc;
	int n0 = c->n_nodes;
	for (int i = 0; i < n0 && rc == 0; i++)
		if (splittable(c, &c->nodes[i]))
			rc = split(c, i, e) < 0 ? -1 : 0;
	if (rc == 0 && (rc = ml_graph_toposort(c, e)) == 0 && (rc = mlq_copy_graph(&c2, c, e)) == 0) {
		*out = c2;
		c2 = NULL;
	}
	ml_graph_free(c);
	ml_graph_free(c2);
	return rc < 0 ? (e != NULL && e->code < 0 ? e->code : ML_EINVAL) : 0;
}
