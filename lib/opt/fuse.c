/*
 * fuse.c: the passes that fold and fuse patterns of PyTorch exports:
 * BatchNormalization into Conv, the decomposed Gelu, SiLU and layer norm,
 * MatMul + bias to Gemm or FusedMatMul, per-channel scales into weights,
 * and Conv/Gemm/MatMul + bias + residual + activation into one node.
 * Every matcher requires each inner value to have a single reader, so a
 * fusion never recomputes or drops a value someone else reads.
 */
#include <stdio.h>

#include "opt/opt.h"
#include "ops/fused.h"

/* other: the input of binary node n that is not t (-1 when n does not read t). */
static int
other(const struct ml_node *n, int t)
{
	if (n->n_in != 2)
		return -1;
	if (n->in[0] == t)
		return n->in[1];
	if (n->in[1] == t)
		return n->in[0];
	return -1;
}

static bool
near(double v, double want)
{
	return fabs(v - want) <= 1e-4 * fabs(want) + 1e-7;
}

/* nelem: the element count of t's static shape, -1 when unknown. */
static int64_t
nelem(const struct opt *o, int t)
{
	struct ml_tval v;
	ml_graph_tval(o->g, t, &v);
	return ml_tval_numel(&v);
}

/* is_op: node ni is live and of op. */
static bool
is_op(const struct opt *o, int ni, enum ml_op op)
{
	return ni >= 0 && !o->dead[ni] && o->g->nodes[ni].op == op;
}

/*
 * fold-bn
 */
int
ml_pass_fold_bn(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = 0; i < g->n_nodes; i++) {
		if (!is_op(o, i, ML_OP_BATCH_NORM))
			continue;
		const struct ml_node *bn = &g->nodes[i];
		if (bn->n_in != 5 || bn->out[0] < 0 || ml_attr_int(bn, "training_mode", 0) != 0)
			continue;
		bool extra = false;
		for (int j = 1; j < bn->n_out; j++)
			extra |= bn->out[j] >= 0 && (o->nuse[bn->out[j]] > 0 || o->pinned[bn->out[j]]);
		int x = bn->in[0], ci = mlopt_prod(o, x);
		if (extra || !is_op(o, ci, ML_OP_CONV) || mlopt_sole(o, x) != i)
			continue;
		const struct ml_node *cv = &g->nodes[ci];
		int w = cv->in[1], b = cv->n_in > 2 ? cv->in[2] : -1;
		const float *wd = mlopt_const(o, w, ML_F32);
		const float *bd = b >= 0 ? mlopt_const(o, b, ML_F32) : NULL;
		const float *sc = mlopt_const(o, bn->in[1], ML_F32), *sh = mlopt_const(o, bn->in[2], ML_F32);
		const float *mu = mlopt_const(o, bn->in[3], ML_F32), *va = mlopt_const(o, bn->in[4], ML_F32);
		const struct ml_tensor *wt = g->tensors[w];
		if (wd == NULL || (b >= 0 && bd == NULL) || sc == NULL || sh == NULL || mu == NULL ||
		    va == NULL || wt->rank < 1)
			continue;
		int64_t m = wt->dims[0], per = nelem(o, w) / (m > 0 ? m : 1);
		if (m <= 0 || nelem(o, bn->in[1]) != m || nelem(o, bn->in[2]) != m ||
		    nelem(o, bn->in[3]) != m || nelem(o, bn->in[4]) != m || (bd && nelem(o, b) != m))
			continue;
		double eps = ml_attr_float(bn, "epsilon", 1e-5);
		float *nw = ml_malloc(sizeof(float) * (size_t)(m * per));
		float *nb = ml_malloc(sizeof(float) * (size_t)m);
		if (nw == NULL || nb == NULL) {
			ml_free(nw);
			ml_free(nb);
			return ml_fail(o->e, ML_ENOMEM, "out of memory");
		}
		for (int64_t k = 0; k < m; k++) {
			double s = sc[k] / sqrt((double)va[k] + eps);
			for (int64_t j = 0; j < per; j++)
				nw[k * per + j] = (float)(wd[k * per + j] * s);
			nb[k] = (float)(((bd ? bd[k] : 0.0) - mu[k]) * s + sh[k]);
		}
		char base[300];
		snprintf(base, sizeof base, "%.280s_bn", wt->name);
		int tw = mlopt_new_const(o, base, ML_F32, wt->rank, wt->dims, nw);
		snprintf(base, sizeof base, "%.280s_bn_bias", wt->name);
		int tb = tw >= 0 ? mlopt_new_const(o, base, ML_F32, 1, &m, nb) : tw;
		ml_free(nw);
		ml_free(nb);
		if (tb < 0)
			return tb;
		int in[3] = { g->nodes[ci].in[0], tw, tb }, out = g->nodes[i].out[0];
		mlopt_kill(o, ci);
		ML_TRY(mlopt_rewrite(o, i, "Conv", "", 3, in, 1, &out, ci, NULL, 0));
		/* the node keeps the Conv's name: it is that Conv, with other weights */
		g->nodes[i].name = g->nodes[ci].name;
		mlopt_note(o, "Conv+BatchNormalization");
	}
	return o->changes;
}

/*
 * fuse-gelu: x * 0.5 * (1 + erf(x / sqrt 2)) in its export orders.
 */
int
ml_pass_fuse_gelu(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = 0; i < g->n_nodes; i++) {
		if (!is_op(o, i, ML_OP_ERF))
			continue;
		int a = g->nodes[i].in[0], e = g->nodes[i].out[0];
		int di = mlopt_prod(o, a);
		double v;
		if (di < 0 || mlopt_sole(o, a) != i || g->nodes[di].n_in != 2 ||
		    !mlopt_scalar(o, g->nodes[di].in[1], &v))
			continue;
		bool scale = (g->nodes[di].op == ML_OP_DIV && near(v, M_SQRT2)) ||
			     (g->nodes[di].op == ML_OP_MUL && near(v, M_SQRT1_2));
		int x = g->nodes[di].in[0];
		int ai = mlopt_sole(o, e);
		if (!scale || !mlopt_f32(o, x) || !is_op(o, ai, ML_OP_ADD))
			continue;
		int one = other(&g->nodes[ai], e);
		if (!mlopt_scalar(o, one, &v) || v != 1.0)
			continue;
		int s = g->nodes[ai].out[0], m1 = mlopt_sole(o, s);
		if (!is_op(o, m1, ML_OP_MUL))
			continue;
		int h = other(&g->nodes[m1], s), last = -1, half = -1;
		int nodes[6] = { di, i, ai, m1 }, nn = 4;
		if (h == x) {
			/* Mul(x, 1 + erf) then Mul(0.5), or the 0.5 first */
			int m2 = mlopt_sole(o, g->nodes[m1].out[0]);
			if (is_op(o, m2, ML_OP_MUL) &&
			    mlopt_scalar(o, other(&g->nodes[m2], g->nodes[m1].out[0]), &v) && v == 0.5) {
				last = m2;
				nodes[nn++] = m2;
			}
		} else {
			int hi = mlopt_prod(o, h);
			if (is_op(o, hi, ML_OP_MUL) && mlopt_sole(o, h) == m1 &&
			    other(&g->nodes[hi], x) >= 0 &&
			    mlopt_scalar(o, other(&g->nodes[hi], x), &v) && v == 0.5) {
				last = m1;
				half = hi;
			}
		}
		if (last < 0)
			continue;
		if (half >= 0) {
			/* keep graph order in fused_from */
			nodes[0] = half;
			nodes[1] = di;
			nodes[2] = i;
			nodes[3] = ai;
			nodes[4] = m1;
			nn = 5;
		}
		int out = g->nodes[last].out[0];
		for (int k = 0; k < nn; k++)
			if (nodes[k] != last)
				mlopt_kill(o, nodes[k]);
		ML_TRY(mlopt_rewrite(o, last, "Gelu", "ml", 1, &x, 1, &out, -1, nodes, nn));
		mlopt_note(o, "Gelu");
	}
	return o->changes;
}

/*
 * fuse-silu: Mul(x, Sigmoid(x)).
 */
int
ml_pass_fuse_silu(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = 0; i < g->n_nodes; i++) {
		if (!is_op(o, i, ML_OP_SIGMOID))
			continue;
		int x = g->nodes[i].in[0], s = g->nodes[i].out[0], m = mlopt_sole(o, s);
		if (!is_op(o, m, ML_OP_MUL) || other(&g->nodes[m], s) != x || !mlopt_f32(o, x))
			continue;
		int out = g->nodes[m].out[0], nodes[2] = { i, m };
		mlopt_kill(o, i);
		ML_TRY(mlopt_rewrite(o, m, "Silu", "ml", 1, &x, 1, &out, -1, nodes, 2));
		mlopt_note(o, "Silu");
	}
	return o->changes;
}

/* reduce_last: ReduceMean node ni reduces exactly the last k dims of a rank-r input, keepdims. */
static int
reduce_last(const struct opt *o, int ni, int r)
{
	const struct ml_node *n = &o->g->nodes[ni];
	const int64_t *ax = NULL;
	int na = ml_attr_ints(n, "axes", &ax);
	if (na < 0 && n->n_in > 1) {
		ax = mlopt_const(o, n->in[1], ML_I64);
		na = ax != NULL ? (int)nelem(o, n->in[1]) : -1;
	}
	if (na <= 0 || na > r || ml_attr_int(n, "keepdims", 1) != 1)
		return -1;
	bool seen[ML_MAX_RANK] = { false };
	for (int k = 0; k < na; k++) {
		int64_t a = ax[k] < 0 ? ax[k] + r : ax[k];
		if (a < r - na || a >= r || seen[a])
			return -1;
		seen[a] = true;
	}
	return na;
}

/*
 * fuse-layernorm: ReduceMean, Sub, Pow 2 (or Mul by itself), ReduceMean,
 * Add eps, Sqrt, Div, then Mul by a scale and Add of a bias (optional).
 */
int
ml_pass_fuse_layernorm(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = 0; i < g->n_nodes; i++) {
		if (!is_op(o, i, ML_OP_SUB))
			continue;
		int x = g->nodes[i].in[0], mean = g->nodes[i].in[1], d = g->nodes[i].out[0];
		int r1 = mlopt_prod(o, mean);
		if (!mlopt_f32(o, x) || !is_op(o, r1, ML_OP_REDUCE_MEAN) || g->nodes[r1].in[0] != x ||
		    mlopt_sole(o, mean) != i)
			continue;
		int rank = g->tensors[x]->rank, k = reduce_last(o, r1, rank);
		if (k < 0 || o->pinned[d])
			continue;
		/* d's readers: the square and the Div */
		int sq = -1, dv = -1;
		bool bad = false;
		for (int j = 0; j < g->n_nodes; j++) {
			if (o->dead[j])
				continue;
			const struct ml_node *n = &g->nodes[j];
			bool reads = false;
			for (int q = 0; q < n->n_in; q++)
				reads |= n->in[q] == d;
			if (!reads)
				continue;
			double v;
			if (n->op == ML_OP_POW && n->in[0] == d && mlopt_scalar(o, n->in[1], &v) && v == 2.0 &&
			    sq < 0)
				sq = j;
			else if (n->op == ML_OP_MUL && n->in[0] == d && n->in[1] == d && sq < 0)
				sq = j;
			else if (n->op == ML_OP_DIV && n->in[0] == d && n->in[1] != d && dv < 0)
				dv = j;
			else
				bad = true;
		}
		if (bad || sq < 0 || dv < 0)
			continue;
		int r2 = mlopt_sole(o, g->nodes[sq].out[0]);
		if (!is_op(o, r2, ML_OP_REDUCE_MEAN) || reduce_last(o, r2, rank) != k)
			continue;
		int ae = mlopt_sole(o, g->nodes[r2].out[0]);
		double eps;
		if (!is_op(o, ae, ML_OP_ADD) ||
		    !mlopt_scalar(o, other(&g->nodes[ae], g->nodes[r2].out[0]), &eps))
			continue;
		int st = mlopt_sole(o, g->nodes[ae].out[0]);
		if (!is_op(o, st, ML_OP_SQRT) || g->nodes[dv].in[1] != g->nodes[st].out[0] ||
		    mlopt_sole(o, g->nodes[st].out[0]) != dv)
			continue;
		int nodes[10] = { r1, i, sq, r2, ae, st, dv }, nn = 7, last = dv;
		int64_t nrm = 1;
		for (int q = rank - k; q < rank; q++)
			nrm = g->tensors[x]->dims[q] < 0 ? -1 : nrm * g->tensors[x]->dims[q];
		if (nrm <= 0)
			continue;	/* the normalised dims must be known */
		int scale = -1, bias = -1;
		int mi = mlopt_sole(o, g->nodes[dv].out[0]);
		if (is_op(o, mi, ML_OP_MUL)) {
			int s = other(&g->nodes[mi], g->nodes[dv].out[0]);
			if (mlopt_const(o, s, ML_F32) != NULL && nelem(o, s) == nrm &&
			    g->tensors[s]->rank <= k) {
				scale = s;
				last = mi;
				nodes[nn++] = mi;
				int bi = mlopt_sole(o, g->nodes[mi].out[0]);
				int b = is_op(o, bi, ML_OP_ADD) ? other(&g->nodes[bi], g->nodes[mi].out[0])
								: -1;
				if (b >= 0 && mlopt_const(o, b, ML_F32) != NULL && nelem(o, b) == nrm &&
				    g->tensors[b]->rank <= k) {
					bias = b;
					last = bi;
					nodes[nn++] = bi;
				}
			}
		}
		/* scale and bias take the normalised dims' shape */
		const int64_t *nd = &g->tensors[x]->dims[rank - k];
		char base[300];
		if (scale < 0 || g->tensors[scale]->rank != k) {
			float *ones = ml_malloc(sizeof(float) * (size_t)nrm);
			if (ones == NULL)
				return ml_fail(o->e, ML_ENOMEM, "out of memory");
			for (int64_t q = 0; q < nrm; q++)
				ones[q] = scale >= 0 ? ((const float *)g->tensors[scale]->data)[q] : 1.0f;
			snprintf(base, sizeof base, "%.280s_ln_scale", g->nodes[last].name);
			scale = mlopt_new_const(o, base, ML_F32, k, nd, ones);
			ml_free(ones);
			if (scale < 0)
				return scale;
		}
		if (bias >= 0 && g->tensors[bias]->rank != k) {
			snprintf(base, sizeof base, "%.280s_ln_bias", g->nodes[last].name);
			bias = mlopt_new_const(o, base, ML_F32, k, nd, g->tensors[bias]->data);
			if (bias < 0)
				return bias;
		}
		int in[3] = { x, scale, bias }, out = g->nodes[last].out[0];
		for (int q = 0; q < nn; q++)
			if (nodes[q] != last)
				mlopt_kill(o, nodes[q]);
		bool onnx = ml_graph_opset(g, "", 1) >= 17;
		ML_TRY(mlopt_rewrite(o, last, "LayerNormalization", onnx ? "" : "ml", bias >= 0 ? 3 : 2,
				   in, 1, &out, -1, onnx ? NULL : nodes, onnx ? 0 : nn));
		ML_TRY(ml_node_set_int(g, last, "axis", rank - k));
		ML_TRY(ml_node_set_float(g, last, "epsilon", eps));
		mlopt_note(o, "LayerNormalization");
	}
	return o->changes;
}

/*
 * matmul-gemm: MatMul(A, B const [K, N]) then Add of a constant bias of N.
 */
int
ml_pass_matmul_gemm(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = 0; i < g->n_nodes; i++) {
		if (!is_op(o, i, ML_OP_MATMUL))
			continue;
		int a = g->nodes[i].in[0], b = g->nodes[i].in[1], y = g->nodes[i].out[0];
		int ai = mlopt_sole(o, y);
		if (!mlopt_f32(o, a) || mlopt_const(o, b, ML_F32) == NULL || g->tensors[b]->rank != 2 ||
		    !is_op(o, ai, ML_OP_ADD))
			continue;
		int64_t n = g->tensors[b]->dims[1];
		int bias = other(&g->nodes[ai], y);
		const struct ml_tensor *bt = bias >= 0 ? g->tensors[bias] : NULL;
		if (bias < 0 || mlopt_const(o, bias, ML_F32) == NULL || nelem(o, bias) != n ||
		    bt->rank < 1 || bt->dims[bt->rank - 1] != n)
			continue;
		if (bt->rank != 1) {
			char base[300];
			snprintf(base, sizeof base, "%.280s_1d", bt->name);
			if ((bias = mlopt_new_const(o, base, ML_F32, 1, &n, bt->data)) < 0)
				return bias;
		}
		int in[3] = { a, b, bias }, out = g->nodes[ai].out[0], nodes[2] = { i, ai };
		bool gemm = g->tensors[a]->rank == 2;
		mlopt_kill(o, i);
		ML_TRY(mlopt_rewrite(o, ai, gemm ? "Gemm" : "FusedMatMul", gemm ? "" : "ml", 3, in, 1,
				   &out, -1, gemm ? NULL : nodes, gemm ? 0 : 2));
		g->nodes[ai].name = g->nodes[i].name;
		mlopt_note(o, gemm ? "MatMul+Add to Gemm" : "MatMul+Add");
	}
	return o->changes;
}

/*
 * fold-scale: Mul(P(x), s) with s constant along one dim of P's output
 * that is P's output-channel dim (or a scalar), P a Conv, Gemm, MatMul or
 * FusedMatMul with constant weights and no activation or residual: scale
 * the weights and the bias instead. A Transpose between P and the Mul (as
 * ConvNeXt's layer scale has) is looked through.
 */
static int
scale_axis(const struct opt *o, int s, int y)
{
	const struct ml_tensor *st = o->g->tensors[s], *yt = o->g->tensors[y];
	int off = yt->rank - st->rank, axis = -2;
	if (off < 0)
		return -3;
	for (int d = 0; d < st->rank; d++) {
		if (st->dims[d] == 1)
			continue;
		if (axis != -2 || st->dims[d] != yt->dims[d + off])
			return -3;
		axis = d + off;
	}
	return axis;	/* -2: a scalar */
}

int
ml_pass_fold_scale(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = 0; i < g->n_nodes; i++) {
		if (!is_op(o, i, ML_OP_MUL))
			continue;
		const struct ml_node *mul = &g->nodes[i];
		int s = -1, v = -1;
		for (int q = 0; q < 2; q++)
			if (mlopt_const(o, mul->in[q], ML_F32) != NULL) {
				s = mul->in[q];
				v = mul->in[1 - q];
			}
		int y = mul->out[0];
		if (s < 0 || !mlopt_is_f32(o, v) || !mlopt_is_f32(o, y) || !mlopt_is_f32(o, s))
			continue;
		int axis = scale_axis(o, s, y);
		if (axis == -3 || !mlopt_is_f32(o, v) || g->tensors[v]->rank != g->tensors[y]->rank)
			continue;
		int pv = v, ti = -1, pi = mlopt_prod(o, v);
		if (is_op(o, pi, ML_OP_TRANSPOSE) && mlopt_sole(o, v) == i) {
			const int64_t *perm;
			int np = ml_attr_ints(&g->nodes[pi], "perm", &perm);
			if (np != g->tensors[v]->rank)
				continue;
			ti = pi;
			pv = g->nodes[pi].in[0];
			if (axis >= 0)
				axis = (int)perm[axis];
			pi = mlopt_prod(o, pv);
		}
		if (pi < 0 || mlopt_sole(o, pv) != (ti >= 0 ? ti : i) || !mlopt_is_f32(o, pv))
			continue;
		const struct ml_node *p = &g->nodes[pi];
		int r = g->tensors[pv]->rank;
		int wi = 1, bi = 2;
		bool cols;	/* the channel is W's columns (MatMul) or rows (Conv, Gemm transB) */
		switch (p->op) {
		case ML_OP_CONV:
			if (axis != 1 && axis != -2)
				continue;
			cols = false;
			break;
		case ML_OP_MATMUL:
		case ML_OP_FUSED_MATMUL:
			if ((axis != r - 1 && axis != -2) ||
			    (p->op == ML_OP_FUSED_MATMUL &&
			     (ml_fused_act(p) != 0 || p->n_in > 3 || ml_attr_find(p, "packed_n"))))
				continue;
			cols = true;
			break;
		case ML_OP_GEMM:
			if ((axis != 1 && axis != -2) || ml_attr_int(p, "transA", 0) != 0)
				continue;
			cols = ml_attr_int(p, "transB", 0) == 0;
			break;
		default:
			continue;
		}
		int w = p->in[wi], b = p->n_in > bi ? p->in[bi] : -1;
		const float *wd = mlopt_const(o, w, ML_F32), *bd = b >= 0 ? mlopt_const(o, b, ML_F32) : NULL;
		const float *sd = mlopt_const(o, s, ML_F32);
		if (wd == NULL || (b >= 0 && bd == NULL) || g->tensors[w]->rank < 2 ||
		    (p->op != ML_OP_CONV && g->tensors[w]->rank != 2))
			continue;
		const struct ml_tensor *wt = g->tensors[w];
		int64_t nw = nelem(o, w), ch = cols ? wt->dims[1] : wt->dims[0];
		int64_t ns = nelem(o, s);
		if ((ns != 1 && ns != ch) || (b >= 0 && nelem(o, b) != ch && nelem(o, b) != 1))
			continue;
		if (b >= 0 && p->op == ML_OP_GEMM && nelem(o, b) != ch)
			continue;	/* a [M, N] or scalar C does not scale per column */
		float *w2 = ml_malloc(sizeof(float) * (size_t)nw);
		float *b2 = b >= 0 ? ml_malloc(sizeof(float) * (size_t)ch) : NULL;
		if (w2 == NULL || (b >= 0 && b2 == NULL)) {
			ml_free(w2);
			ml_free(b2);
			return ml_fail(o->e, ML_ENOMEM, "out of memory");
		}
		int64_t per = nw / ch;
		for (int64_t q = 0; q < nw; q++) {
			int64_t c = cols ? q % ch : q / per;
			w2[q] = wd[q] * sd[ns == 1 ? 0 : c];
		}
		for (int64_t c = 0; b >= 0 && c < ch; c++)
			b2[c] = bd[nelem(o, b) == 1 ? 0 : c] * sd[ns == 1 ? 0 : c];
		char base[300];
		snprintf(base, sizeof base, "%.280s_scaled", wt->name);
		int tw = mlopt_new_const(o, base, ML_F32, wt->rank, wt->dims, w2);
		int tb = -1;
		if (tw >= 0 && b >= 0) {
			snprintf(base, sizeof base, "%.280s_scaled", g->tensors[b]->name);
			tb = mlopt_new_const(o, base, ML_F32, 1, &ch, b2);
		}
		ml_free(w2);
		ml_free(b2);
		if (tw < 0 || (b >= 0 && tb < 0))
			return tw < 0 ? tw : tb;
		struct ml_node *pn = &g->nodes[pi];
		o->nuse[pn->in[wi]]--;
		pn->in[wi] = tw;
		o->nuse[tw]++;
		if (b >= 0) {
			o->nuse[pn->in[bi]]--;
			pn->in[bi] = tb;
			o->nuse[tb]++;
		}
		/* the Mul's value is now the Transpose's output (or P's) */
		int keep = ti >= 0 ? g->nodes[ti].out[0] : pv;
		if (!mlopt_replace(o, y, keep))
			return ml_fail(o->e, ML_EINVAL, "cannot remove the Mul '%s'", g->nodes[i].name);
		mlopt_kill(o, i);
		mlopt_note(o, "Mul into weights");
	}
	return o->changes;
}

/*
 * fuse-bias-act
 */
static int
act_of(const struct opt *o, int ni, double *lo, double *hi)
{
	const struct ml_node *n = &o->g->nodes[ni];
	int act = ml_op_unary(n->op);
	*lo = -INFINITY;
	*hi = INFINITY;
	switch (act) {
	case ML_ACT_GELU:
		return strcmp(ml_attr_str(n, "approximate", "none"), "none") == 0 ? ML_ACT_GELU : -1;
	case ML_ACT_CLIP:
		if (n->n_in == 1) {
			*lo = ml_attr_float(n, "min", -INFINITY);
			*hi = ml_attr_float(n, "max", INFINITY);
			return ML_ACT_CLIP;
		}
		if ((n->n_in > 1 && n->in[1] >= 0 && !mlopt_scalar(o, n->in[1], lo)) ||
		    (n->n_in > 2 && n->in[2] >= 0 && !mlopt_scalar(o, n->in[2], hi)))
			return -1;
		return ML_ACT_CLIP;
	default:
		/* the other activations of lib/act.def have no parameters */
		return act > ML_ACT_NONE && act < ML_ACT_COUNT ? act : -1;
	}
}

int
ml_pass_fuse_bias_act(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = 0; i < g->n_nodes; i++) {
		if (o->dead[i])
			continue;
		const struct ml_node *p = &g->nodes[i];
		enum ml_op op = p->op;
		bool fused = op == ML_OP_FUSED_CONV || op == ML_OP_FUSED_MATMUL ||
			     op == ML_OP_FUSED_GEMM;
		if (op != ML_OP_CONV && op != ML_OP_GEMM && op != ML_OP_MATMUL && !fused)
			continue;
		if (fused && ml_fused_act(p) != ML_ACT_NONE)
			continue;
		int y = p->out[0];
		if (!mlopt_f32(o, y) || !mlopt_f32(o, p->in[0]))
			continue;
		bool conv = op == ML_OP_CONV || op == ML_OP_FUSED_CONV;
		bool gemm = op == ML_OP_GEMM || op == ML_OP_FUSED_GEMM;
		int zslot = 3;	/* Z of FusedConv and FusedMatMul */
		int z = fused && p->n_in > 3 ? p->in[3] : -1;
		int nodes[4] = { i }, nn = 1, last = i, cur = y;
		/* a residual Add of a value of y's shape, made before this node's position */
		int ai = mlopt_sole(o, cur);
		if (z < 0 && !gemm && is_op(o, ai, ML_OP_ADD)) {
			int zz = other(&g->nodes[ai], cur);
			int out = g->nodes[ai].out[0];
			if (zz >= 0 && zz != cur && mlopt_f32(o, zz) && mlopt_f32(o, out)) {
				const struct ml_tensor *zt = g->tensors[zz], *yt = g->tensors[cur];
				bool same = zt->rank == yt->rank;
				for (int d = 0; same && d < zt->rank; d++)
					same = zt->dims[d] == yt->dims[d] &&
					       (zt->dims[d] >= 0 ||
						(zt->sym[d] != NULL && yt->sym[d] != NULL &&
						 strcmp(zt->sym[d], yt->sym[d]) == 0));
				if (same) {
					z = zz;
					nodes[nn++] = ai;
					last = ai;
					cur = out;
				}
			}
		}
		double lo = -INFINITY, hi = INFINITY;
		int act = ML_ACT_NONE, ci = mlopt_sole(o, cur);
		if (ci >= 0 && !o->dead[ci]) {
			int k = act_of(o, ci, &lo, &hi);
			if (k > 0 && g->nodes[ci].in[0] == cur && mlopt_f32(o, g->nodes[ci].out[0])) {
				act = k;
				nodes[nn++] = ci;
				last = ci;
				cur = g->nodes[ci].out[0];
			}
		}
		if (nn == 1)
			continue;
		int in[4] = { -1, -1, -1, -1 }, nin;
		for (int q = 0; q < p->n_in && q < 3; q++)
			in[q] = p->in[q];
		nin = ML_MIN(p->n_in, 3);
		if (z >= 0) {
			nin = zslot + 1;
			in[zslot] = z;
		}
		const char *type = conv ? "FusedConv" : gemm ? "FusedGemm" : "FusedMatMul";
		char what[48];
		snprintf(what, sizeof what, "%s%s%s%s", ml_op_name(op == ML_OP_FUSED_CONV ? ML_OP_CONV :
								  op == ML_OP_FUSED_MATMUL ? ML_OP_MATMUL :
								  op == ML_OP_FUSED_GEMM ? ML_OP_GEMM : op),
			 z >= 0 ? "+Add" : "", act ? "+" : "", ml_fused_act_name(act));
		const char *name = g->nodes[i].name;
		for (int q = 0; q < nn; q++)
			if (nodes[q] != last)
				mlopt_kill(o, nodes[q]);
		ML_TRY(mlopt_rewrite(o, last, type, "ml", nin, in, 1, &cur, i, nodes, nn));
		g->nodes[last].name = (char *)name;
		if (act != ML_ACT_NONE)
			ML_TRY(ml_node_set_string(g, last, "activation", ml_fused_act_name(act)));
		if (act == ML_ACT_CLIP) {
			if (isfinite(lo))
				ML_TRY(ml_node_set_float(g, last, "clip_min", lo));
			if (isfinite(hi))
				ML_TRY(ml_node_set_float(g, last, "clip_max", hi));
		}
		mlopt_note(o, what);
	}
	return o->changes;
}

/*
 * pack-weights: the constant [K, N] B of a FusedMatMul of at least
 * ML_FUSED_PACK_MIN multiply-adds, stored in the panels the CPU's packed
 * SGEMM reads (ops/fused.h), so that no run packs it again; packed_n
 * records N. A layout change only: every value is the same.
 */
int
ml_pass_pack_weights(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = 0; i < g->n_nodes; i++) {
		if (!is_op(o, i, ML_OP_FUSED_MATMUL) || ml_attr_find(&g->nodes[i], "packed_n") != NULL)
			continue;
		const struct ml_node *n = &g->nodes[i];
		int a = n->in[0], b = n->in[1];
		const float *bd = mlopt_const(o, b, ML_F32);
		if (bd == NULL || !mlopt_is_f32(o, a) || !mlopt_is_f32(o, b) || g->tensors[b]->rank != 2)
			continue;
		int64_t k = g->tensors[b]->dims[0], nn = g->tensors[b]->dims[1];
		int64_t na = nelem(o, a);
		if (k <= 0 || nn <= 0 || na <= 0 || na % k != 0 ||
		    g->tensors[a]->dims[g->tensors[a]->rank - 1] != k || na / k * nn * k < ML_FUSED_PACK_MIN)
			continue;
		int64_t np = (nn + ML_FUSED_PANEL - 1) / ML_FUSED_PANEL;
		int64_t dims[3] = { np, k, ML_FUSED_PANEL };
		float *pk = ml_calloc((size_t)(np * k * ML_FUSED_PANEL), sizeof(float));
		if (pk == NULL)
			return ml_fail(o->e, ML_ENOMEM, "out of memory");
		for (int64_t r = 0; r < k; r++)
			for (int64_t j = 0; j < nn; j++)
				pk[((j / ML_FUSED_PANEL) * k + r) * ML_FUSED_PANEL + j % ML_FUSED_PANEL] =
					bd[r * nn + j];
		char base[300];
		snprintf(base, sizeof base, "%.280s_packed", g->tensors[b]->name);
		int tp = mlopt_new_const(o, base, ML_F32, 3, dims, pk);
		ml_free(pk);
		if (tp < 0)
			return tp;
		struct ml_node *pn = &g->nodes[i];
		o->nuse[pn->in[1]]--;
		pn->in[1] = tp;
		o->nuse[tp]++;
		ML_TRY(ml_node_set_int(g, i, "packed_n", nn));
		mlopt_note(o, "FusedMatMul B packed");
	}
	return o->changes;
}
