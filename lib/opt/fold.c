/*
 * fold.c: the cleaning passes: constant folding, folding of values static
 * inference knows (shape arithmetic), removal of no-op nodes, common
 * subexpression elimination and dead-code elimination.
 */
#include <stdio.h>

#include "opt/opt.h"

/* The largest result constant folding makes, in bytes: folding must not blow a file up. */
#define FOLD_MAX_BYTES (64 << 20)

static bool
is_random(enum ml_op op)
{
	return op == ML_OP_BERNOULLI || op == ML_OP_RANDOM_UNIFORM || op == ML_OP_RANDOM_NORMAL ||
	       op == ML_OP_RANDOM_UNIFORM_LIKE || op == ML_OP_RANDOM_NORMAL_LIKE ||
	       op == ML_OP_DROPOUT;
}

/* foldable: node n may be replaced by its values (known op, no side effects, no graph output). */
static bool
foldable(const struct opt *o, const struct ml_node *n)
{
	if (n->op == ML_OP_NONE || is_random(n->op) || ml_node_has_body(n) || n->n_out < 1 ||
	    ml_opdef_get(n->op) == NULL || ml_cpu_kernel_get(n->op) == NULL)
		return false;
	for (int j = 0; j < n->n_out; j++) {
		int t = n->out[j];
		if (t >= 0 && o->pinned[t] && o->g->tensors[t]->kind != ML_TK_INPUT)
			for (int k = 0; k < o->g->n_outputs; k++)
				if (o->g->outputs[k] == t)
					return false;
	}
	return true;
}

/* set_const: tensor t becomes a constant holding v. */
static int
set_const(struct opt *o, int t, const struct ml_tval *v)
{
	if (ml_dtype_size(v->dtype) == 0 || v->rank < 0)
		return ML_ENOTSUP;
	int64_t nb = ml_tval_nbytes(v);
	if (nb < 0)
		return ML_ENOTSUP;
	return ml_graph_set_data(o->g, t, ML_TK_CONST, v->dtype, v->rank, v->dims, v->data,
				 (size_t)nb, o->e);
}

int
ml_pass_fold_constants(struct opt *o)
{
	struct ml_graph *g = o->g;
	struct ml_tval iv[32], ov[16], *in[32], *out[16];

	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (o->dead[i] || !foldable(o, n) || n->n_in > 32 || n->n_out > 16)
			continue;
		bool all = n->n_in > 0 || n->op == ML_OP_CONSTANT;
		for (int j = 0; j < n->n_in && all; j++)
			all = n->in[j] < 0 || mlopt_const(o, n->in[j], ML_UNDEF) != NULL;
		if (!all)
			continue;
		for (int j = 0; j < n->n_in; j++) {
			in[j] = NULL;
			if (n->in[j] >= 0) {
				ml_graph_tval(g, n->in[j], &iv[j]);
				in[j] = &iv[j];
			}
		}
		struct ml_err e2 = { 0 };
		for (int j = 0; j < n->n_out; j++) {
			memset(&ov[j], 0, sizeof ov[j]);
			ov[j].rank = -1;
			out[j] = &ov[j];
		}
		bool ok = ml_node_infer(g, n, in, out, &e2) == 0;
		int64_t total = 0;
		for (int j = 0; j < n->n_out && ok; j++) {
			int64_t nb = ml_tval_nbytes(out[j]);
			if (nb < 0) {
				ok = false;	/* data-dependent: the kernel allocates */
				continue;
			}
			total += nb;
			ok = total <= FOLD_MAX_BYTES &&
			     ml_tval_alloc(out[j], out[j]->dtype, out[j]->rank, out[j]->dims, &e2) == 0;
		}
		if (ok) {
			struct ml_opctx c;
			ml_node_ctx(&c, g, n, in, out, &e2);
			ok = ml_cpu_kernel_get(n->op)(&c) == 0;
		}
		for (int j = 0; j < n->n_out && ok; j++)
			ok = ml_dtype_size(out[j]->dtype) > 0 && out[j]->data != NULL;
		if (ok) {
			for (int j = 0; j < n->n_out; j++)
				if (g->nodes[i].out[j] >= 0 &&
				    set_const(o, g->nodes[i].out[j], out[j]) < 0)
					ok = false;
			if (!ok) {
				for (int j = 0; j < n->n_out; j++)
					ml_tval_clear(out[j]);
				return o->e->code < 0 ? o->e->code : ML_ENOMEM;
			}
			mlopt_kill(o, i);
			mlopt_note(o, g->nodes[i].op_type);
		}
		for (int j = 0; j < n->n_out; j++)
			ml_tval_clear(out[j]);
	}
	return o->changes;
}

int
ml_pass_fold_shapes(struct opt *o)
{
	struct ml_graph *g = o->g;
	struct ml_tval *vals = ml_calloc((size_t)g->n_tensors + 1, sizeof *vals);
	int rc = 0;

	if (vals == NULL)
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	for (int t = 0; t < g->n_tensors; t++) {
		ml_graph_tval(g, t, &vals[t]);
		if (g->tensors[t]->kind != ML_TK_CONST && g->tensors[t]->kind != ML_TK_PARAM)
			vals[t].data = NULL;
	}
	if ((rc = ml_infer_values(g, vals, o->e)) < 0)
		goto out;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (o->dead[i] || !foldable(o, n))
			continue;
		bool known = true, has_in = false;
		for (int j = 0; j < n->n_out && known; j++)
			known = n->out[j] < 0 || (vals[n->out[j]].data != NULL && vals[n->out[j]].owned);
		/* nodes of constants alone are fold-constants' (it needs no size limit) */
		for (int j = 0; j < n->n_in; j++)
			has_in |= n->in[j] >= 0 && mlopt_const(o, n->in[j], ML_UNDEF) == NULL;
		if (!known || !has_in)
			continue;
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] >= 0 && (rc = set_const(o, n->out[j], &vals[n->out[j]])) < 0)
				goto out;
		mlopt_kill(o, i);
		mlopt_note(o, n->op_type);
	}
	rc = o->changes;
out:
	for (int t = 0; t < g->n_tensors; t++)
		ml_tval_clear(&vals[t]);
	ml_free(vals);
	return rc;
}

/* same_type: tensors a and b have the same dtype and the same fully known shape. */
static bool
same_type(const struct ml_graph *g, int a, int b)
{
	const struct ml_tensor *x = g->tensors[a], *y = g->tensors[b];
	if (x->dtype != y->dtype || x->dtype == ML_UNDEF || x->rank < 0 || x->rank != y->rank)
		return false;
	for (int d = 0; d < x->rank; d++)
		if (x->dims[d] < 0 || x->dims[d] != y->dims[d])
			return false;
	return true;
}

static bool
reshape_like(enum ml_op op)
{
	return op == ML_OP_RESHAPE || op == ML_OP_FLATTEN || op == ML_OP_SQUEEZE ||
	       op == ML_OP_UNSQUEEZE;
}

/* drop: node ni computes its output 0 as its input 0 unchanged; remove it. */
static void
drop(struct opt *o, int ni, const char *what)
{
	const struct ml_node *n = &o->g->nodes[ni];
	if (mlopt_replace(o, n->out[0], n->in[0])) {
		mlopt_kill(o, ni);
		mlopt_note(o, what);
	}
}

int
ml_pass_eliminate(struct opt *o)
{
	struct ml_graph *g = o->g;

	for (int i = 0; i < g->n_nodes; i++) {
		if (o->dead[i])
			continue;
		const struct ml_node *n = &g->nodes[i];
		if (n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 || n->out[0] < 0)
			continue;
		int x = n->in[0], y = n->out[0];
		switch (n->op) {
		case ML_OP_IDENTITY:
			drop(o, i, "Identity");
			break;
		case ML_OP_DROPOUT: {
			/* inference mode: no training_mode input, or a constant false one */
			int tm = n->n_in > 2 ? n->in[2] : -1;
			const void *p = tm >= 0 ? mlopt_const(o, tm, ML_BOOL) : NULL;
			bool train = tm >= 0 && (p == NULL || *(const uint8_t *)p != 0);
			bool mask = n->n_out > 1 && n->out[1] >= 0 &&
				    (o->nuse[n->out[1]] > 0 || o->pinned[n->out[1]]);
			if (!train && !mask)
				drop(o, i, "Dropout");
			break;
		}
		case ML_OP_PAD: {
			/*
			 * all pads zero (DenseNet's transitions pad by nothing before
			 * their AveragePool, from an export of count_include_pad);
			 * a shape kept by pads of opposite signs is a shift, not this
			 */
			const int64_t *pads = NULL;
			int np = -1;
			if (n->n_in > 1 && n->in[1] >= 0) {
				pads = mlopt_const(o, n->in[1], ML_I64);
				struct ml_tval pv;
				ml_graph_tval(g, n->in[1], &pv);
				np = pads != NULL ? (int)ml_tval_numel(&pv) : -1;
			} else {
				np = ml_attr_ints(n, "pads", &pads);
			}
			bool zero = np >= 0 && same_type(g, x, y);
			for (int k = 0; k < np && zero; k++)
				zero = pads[k] == 0;
			if (zero)
				drop(o, i, "Pad");
			break;
		}
		case ML_OP_CAST:
		case ML_OP_CAST_LIKE:
			if (same_type(g, x, y))
				drop(o, i, "Cast");
			break;
		case ML_OP_RESHAPE:
		case ML_OP_FLATTEN:
		case ML_OP_SQUEEZE:
		case ML_OP_UNSQUEEZE:
		case ML_OP_EXPAND: {
			if (same_type(g, x, y)) {
				drop(o, i, n->op_type);
				break;
			}
			/* a reshape of a reshape is one reshape of the first input */
			int p = mlopt_prod(o, x);
			if (!reshape_like(n->op) || p < 0 || !reshape_like(g->nodes[p].op) ||
			    g->nodes[p].in[0] < 0)
				break;
			const struct ml_tensor *ty = g->tensors[y];
			int src = g->nodes[p].in[0];
			if (!same_type(g, y, y) || ty->rank < 0)
				break;
			if (same_type(g, src, y)) {
				if (mlopt_replace(o, y, src)) {
					mlopt_kill(o, i);
					mlopt_note(o, "Reshape pair");
				}
				break;
			}
			int st = mlopt_new_const(o, "opt_shape", ML_I64, 1, (int64_t[]){ ty->rank },
					       ty->dims);
			if (st < 0)
				return st;
			int ins[2] = { src, st };
			ML_TRY(mlopt_rewrite(o, i, "Reshape", "", 2, ins, 1, &y, -1, NULL, 0));
			mlopt_note(o, "Reshape chain");
			break;
		}
		case ML_OP_TRANSPOSE: {
			const int64_t *perm;
			int np = ml_attr_ints(n, "perm", &perm);
			bool ident = np >= 0;
			for (int k = 0; k < np && ident; k++)
				ident = perm[k] == k;
			if (ident && same_type(g, x, y)) {
				drop(o, i, "Transpose");
				break;
			}
			/* Transpose(Transpose(a, p1), p2) is Transpose(a, p1[p2]) */
			int p = mlopt_prod(o, x);
			const int64_t *p1;
			if (np <= 0 || p < 0 || g->nodes[p].op != ML_OP_TRANSPOSE ||
			    ml_attr_ints(&g->nodes[p], "perm", &p1) != np || np > ML_MAX_RANK)
				break;
			int64_t comp[ML_MAX_RANK];
			bool id2 = true, okp = true;
			for (int k = 0; k < np; k++) {
				okp &= perm[k] >= 0 && perm[k] < np;
				comp[k] = okp ? p1[perm[k]] : 0;
				id2 &= comp[k] == k;
			}
			int src = g->nodes[p].in[0];
			if (!okp || src < 0)
				break;
			if (id2) {
				if (mlopt_replace(o, y, src)) {
					mlopt_kill(o, i);
					mlopt_note(o, "Transpose pair");
				}
				break;
			}
			ML_TRY(mlopt_rewrite(o, i, "Transpose", "", 1, &src, 1, &y, -1, NULL, 0));
			ML_TRY(ml_node_set_ints(g, i, "perm", np, comp));
			mlopt_note(o, "Transpose chain");
			break;
		}
		case ML_OP_CONCAT:
		case ML_OP_SUM:
			if (n->n_in == 1 && same_type(g, x, y))
				drop(o, i, n->op_type);
			break;
		case ML_OP_ADD:
		case ML_OP_SUB:
		case ML_OP_MUL:
		case ML_OP_DIV: {
			double v;
			if (n->n_in != 2 || !mlopt_scalar(o, n->in[1], &v) || !same_type(g, x, y))
				break;
			bool id = (n->op == ML_OP_ADD || n->op == ML_OP_SUB) ? v == 0 : v == 1;
			if (id && ml_dtype_is_float(g->tensors[x]->dtype))
				drop(o, i, n->op == ML_OP_ADD || n->op == ML_OP_SUB ? "Add 0" : "Mul 1");
			break;
		}
		default:
			break;
		}
	}
	return o->changes;
}

int
ml_pass_dce(struct opt *o)
{
	struct ml_graph *g = o->g;
	for (int i = g->n_nodes - 1; i >= 0; i--) {
		if (o->dead[i])
			continue;
		const struct ml_node *n = &g->nodes[i];
		/* a node without outputs is an update of a training step (ml.Assign, ...) */
		bool used = n->n_out == 0;
		for (int j = 0; j < n->n_out && !used; j++)
			used = n->out[j] >= 0 && (o->nuse[n->out[j]] > 0 || o->pinned[n->out[j]]);
		if (!used) {
			mlopt_kill(o, i);
			mlopt_note(o, n->op_type);
		}
	}
	return o->changes;
}

static uint64_t
mix(uint64_t h, uint64_t v)
{
	return (h ^ v) * 1099511628211ull;
}

/* The largest constant CSE compares, in bytes. */
#define CSE_CONST_MAX 4096

int
ml_pass_cse(struct opt *o)
{
	struct ml_graph *g = o->g;
	int nt = g->n_tensors;
	uint64_t *th = ml_calloc((size_t)nt + 1, sizeof *th);
	uint64_t *nh = ml_calloc((size_t)g->n_nodes + 1, sizeof *nh);
	if (th == NULL || nh == NULL) {
		ml_free(th);
		ml_free(nh);
		return ml_fail(o->e, ML_ENOMEM, "out of memory");
	}
	/* equal small constants first, so nodes reading them compare equal */
	for (int t = 0; t < nt; t++) {
		const struct ml_tensor *a = g->tensors[t];
		if (mlopt_const(o, t, ML_UNDEF) == NULL || a->nbytes > CSE_CONST_MAX || o->pinned[t] ||
		    o->nuse[t] == 0)
			continue;
		uint64_t h = mix(1469598103934665603ull, (uint64_t)a->dtype);
		for (int d = 0; d < a->rank; d++)
			h = mix(h, (uint64_t)a->dims[d]);
		for (size_t k = 0; k < a->nbytes; k++)
			h = mix(h, ((const uint8_t *)a->data)[k]);
		th[t] = h | 1;
		for (int u = 0; u < t; u++) {
			const struct ml_tensor *b = g->tensors[u];
			if (th[u] != th[t] || b->dtype != a->dtype || b->rank != a->rank ||
			    b->nbytes != a->nbytes || memcmp(b->dims, a->dims, sizeof(int64_t) *
							     (size_t)a->rank) != 0 ||
			    memcmp(a->data, b->data, a->nbytes) != 0)
				continue;
			mlopt_replace(o, t, u);
			mlopt_note(o, "constant");
			th[t] = 0;
			break;
		}
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (o->dead[i] || n->op == ML_OP_NONE || is_random(n->op) || ml_node_has_body(n))
			continue;
		uint64_t h = mix(1469598103934665603ull, (uint64_t)n->op);
		for (int j = 0; j < n->n_in; j++)
			h = mix(h, (uint64_t)(n->in[j] + 1));
		nh[i] = h | 1;
		for (int k = 0; k < i; k++) {
			const struct ml_node *m = &g->nodes[k];
			if (nh[k] != nh[i] || o->dead[k] || m->op != n->op || m->n_in != n->n_in ||
			    m->n_out != n->n_out || memcmp(m->in, n->in, sizeof(int) *
							   (size_t)n->n_in) != 0 ||
			    !mlopt_same_attrs(m, n))
				continue;
			bool ok = true;
			for (int j = 0; j < n->n_out && ok; j++)
				ok = n->out[j] < 0 || m->out[j] >= 0;
			/* a pinned output cannot be renamed away */
			for (int j = 0; j < n->n_out && ok; j++)
				ok = n->out[j] < 0 || !o->pinned[n->out[j]];
			if (!ok)
				continue;
			for (int j = 0; j < n->n_out; j++)
				if (n->out[j] >= 0)
					mlopt_replace(o, n->out[j], m->out[j]);
			mlopt_kill(o, i);
			mlopt_note(o, n->op_type);
			break;
		}
	}
	ml_free(th);
	ml_free(nh);
	return o->changes;
}
