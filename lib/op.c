/*
 * op.c: the op registry built from ops.def and the family tables, name
 * lookup, and whole-graph static shape inference with propagation of
 * small computed values (shape arithmetic), and FLOP estimates.
 */
#include <pthread.h>

#include "ml_impl.h"

static const struct {
	const char *name, *domain, *family;
} optab[ML_OP_COUNT] = {
#define X(id, nm, dom, fam) [ML_OP_##id] = { nm, dom, #fam },
#include "ops.def"
#undef X
};

static const struct ml_opdef *defs[ML_OP_COUNT];
static int (*cpu_kernels[ML_OP_COUNT])(struct ml_opctx *);
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;


static void
reg_init(void)
{
	static const struct ml_opdef *const dtabs[] = {
#define F(name, grad) ml_opdefs_##name,
#include "families.def"
#undef F
	};
	static const struct ml_cpu_kernel *const ktabs[] = {
#define F(name, grad) ml_cpu_##name,
#include "families.def"
#undef F
	};
	for (size_t f = 0; f < sizeof dtabs / sizeof dtabs[0]; f++)
		for (const struct ml_opdef *d = dtabs[f]; d->op != ML_OP_NONE; d++)
			defs[d->op] = d;
	for (size_t f = 0; f < sizeof ktabs / sizeof ktabs[0]; f++)
		for (const struct ml_cpu_kernel *k = ktabs[f]; k->op != ML_OP_NONE; k++)
			cpu_kernels[k->op] = k->run;
}

const struct ml_opdef *
ml_opdef_get(enum ml_op op)
{
	pthread_once(&reg_once, reg_init);
	return (unsigned)op < ML_OP_COUNT ? defs[op] : NULL;
}

unsigned
ml_op_flags(enum ml_op op)
{
	const struct ml_opdef *d = ml_opdef_get(op);
	return d != NULL ? d->flags : 0;
}

unsigned
ml_op_weights(enum ml_op op)
{
	const struct ml_opdef *d = ml_opdef_get(op);
	return d != NULL ? d->weights : 0;
}

unsigned
ml_op_host_inputs(enum ml_op op)
{
	const struct ml_opdef *d = ml_opdef_get(op);
	return d != NULL ? d->host_in : 0;
}

enum ml_qclass
ml_op_qclass(enum ml_op op)
{
	const struct ml_opdef *d = ml_opdef_get(op);
	return d != NULL ? d->qclass : ML_QC_NONE;
}

int
ml_op_unary(enum ml_op op)
{
	static const struct {
		enum ml_op op;
		int code;
	} rows[] = {
#define ML_UN_ROW(id, opid, act, fe, ug, nm) { ML_OP_##opid, ML_UN_##id },
		ML_UNARY_LIST(ML_UN_ROW)
#undef ML_UN_ROW
	};
	for (size_t i = 0; op != ML_OP_NONE && i < sizeof rows / sizeof rows[0]; i++)
		if (rows[i].op == op)
			return rows[i].code;
	return -1;
}

int (*ml_cpu_kernel_get(enum ml_op op))(struct ml_opctx *)
{
	pthread_once(&reg_once, reg_init);
	return (unsigned)op < ML_OP_COUNT ? cpu_kernels[op] : NULL;
}

const char *
ml_op_name(enum ml_op op)
{
	return (unsigned)op < ML_OP_COUNT ? optab[op].name : "?";
}

const char *
ml_op_domain(enum ml_op op)
{
	return (unsigned)op < ML_OP_COUNT ? optab[op].domain : "?";
}

const char *
ml_op_family(enum ml_op op)
{
	return (unsigned)op < ML_OP_COUNT ? optab[op].family : "?";
}

enum ml_op
ml_op_lookup(const char *name, const char *domain)
{
	if (domain == NULL || strcmp(domain, "ai.onnx") == 0)
		domain = "";
	for (int i = 1; i < ML_OP_COUNT; i++)
		if (strcmp(optab[i].name, name) == 0 && strcmp(optab[i].domain, domain) == 0)
			return (enum ml_op)i;
	return ML_OP_NONE;
}

int
ml_node_ctx(struct ml_opctx *c, const struct ml_graph *g, const struct ml_node *n,
	    struct ml_tval **in, struct ml_tval **out, struct ml_err *e)
{
	memset(c, 0, sizeof *c);
	c->g = g;
	c->node = n;
	c->n_in = n->n_in;
	c->n_out = n->n_out;
	c->in = in;
	c->out = out;
	c->opset = ml_graph_opset(g, "", 17);
	c->err = e;
	return 0;
}

int
ml_node_infer(const struct ml_graph *g, const struct ml_node *n, struct ml_tval **in,
	      struct ml_tval **out, struct ml_err *e)
{
	struct ml_opctx c;
	const struct ml_opdef *d = n->op != ML_OP_NONE ? ml_opdef_get(n->op) : NULL;

	if (d == NULL || d->infer == NULL)
		return ml_fail(e, ML_ENOTSUP, "unsupported op '%s%s%s'%s%s%s",
			       n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type,
			       n->name[0] ? " (node '" : "", n->name, n->name[0] ? "')" : "");
	ml_node_ctx(&c, g, n, in, out, e);
	for (int i = 0; i < n->n_out; i++) {
		out[i]->dtype = ML_UNDEF;
		out[i]->rank = -1;
	}
	ML_TRY(d->infer(&c));
	/*
	 * A shape from attributes or input values (Expand, ConstantOfShape,
	 * Tile, ...) can be too large for any size arithmetic: refuse it here,
	 * for loading and running alike, rather than in every op.
	 */
	for (int i = 0; i < n->n_out; i++) {
		const struct ml_tval *o = out[i];
		bool known = o->rank >= 0;
		for (int d = 0; known && d < o->rank && d < ML_MAX_RANK; d++)
			known = o->dims[d] >= 0;
		if (o->rank > ML_MAX_RANK)
			return ml_fail(e, ML_EINVAL, "node '%s' (%s): output %d has rank %d, above %d",
				       n->name, n->op_type, i, o->rank, ML_MAX_RANK);
		if (known && (ml_tval_numel(o) < 0 || ml_tval_nbytes(o) < 0)) {
			char buf[256];
			return ml_fail(e, ML_EINVAL, "node '%s' (%s): output %d of shape %s is too large",
				       n->name, n->op_type, i, ml_tval_shape_str(o, buf, sizeof buf));
		}
	}
	return 0;
}

/*
 * Whole-graph inference. vals[t] holds the value of tensor t when known:
 * constant data (borrowed) or the result of running a cheap node whose
 * inputs are all known (owned), which is how shape computations such as
 * Shape -> Gather -> Concat -> Reshape resolve statically.
 */
#define PROPAGATE_MAX 4096

static bool
is_random(enum ml_op op)
{
	return (ml_op_flags(op) & ML_OPF_RANDOM) != 0;
}

/* shape_only: a fully known shape makes the op's value known (ML_OPF_SHAPE_ONLY). */
static bool
shape_only(enum ml_op op)
{
	return (ml_op_flags(op) & ML_OPF_SHAPE_ONLY) != 0;
}

int
ml_infer_values(const struct ml_graph *g, struct ml_tval *vals, struct ml_err *e)
{
	int rc = 0;
	struct ml_tval **in = NULL, **out = NULL, *outv = NULL;
	int max_io = 1;

	for (int i = 0; i < g->n_nodes; i++) {
		max_io = ML_MAX(max_io, g->nodes[i].n_in);
		max_io = ML_MAX(max_io, g->nodes[i].n_out);
	}
	in = ml_calloc((size_t)max_io, sizeof *in);
	out = ml_calloc((size_t)max_io, sizeof *out);
	outv = ml_calloc((size_t)max_io, sizeof *outv);
	if (in == NULL || out == NULL || outv == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto done;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		bool known = true;
		for (int j = 0; j < n->n_in; j++) {
			in[j] = n->in[j] >= 0 ? &vals[n->in[j]] : NULL;
			if (in[j] != NULL && in[j]->data == NULL &&
			    !(shape_only(n->op) && ml_tval_numel(in[j]) >= 0))
				known = false;
		}
		for (int j = 0; j < n->n_out; j++) {
			memset(&outv[j], 0, sizeof outv[j]);
			outv[j].rank = -1;
			out[j] = &outv[j];
		}
		/*
		 * An op this build does not know leaves its outputs unknown, so
		 * the model still loads, converts and prints; running it fails.
		 */
		if (n->op == ML_OP_NONE || ml_opdef_get(n->op) == NULL)
			known = false;
		else if ((rc = ml_node_infer(g, n, in, out, e)) < 0)
			goto done;
		int64_t total = 0;
		for (int j = 0; j < n->n_out; j++) {
			int64_t k = ml_tval_numel(out[j]);
			total = k < 0 || total < 0 ? -1 : total + k;
		}
		int (*kern)(struct ml_opctx *) = ml_cpu_kernel_get(n->op);
		if (known && kern != NULL && n->n_out > 0 && total >= 0 && total <= PROPAGATE_MAX && !is_random(n->op)) {
			struct ml_opctx c;
			struct ml_err e2 = { 0 };
			bool ok = true;
			for (int j = 0; j < n->n_out && ok; j++)
				if (ml_tval_alloc(out[j], out[j]->dtype, out[j]->rank, out[j]->dims,
						  &e2) < 0)
					ok = false;
			ml_node_ctx(&c, g, n, in, out, &e2);
			if (ok && kern(&c) < 0)
				ok = false;
			if (!ok)
				for (int j = 0; j < n->n_out; j++) {
					if (out[j]->owned)
						ml_free(out[j]->data);
					out[j]->data = NULL;
					out[j]->owned = false;
				}
		}
		for (int j = 0; j < n->n_out; j++) {
			int t = n->out[j];
			if (t < 0) {
				ml_tval_clear(out[j]);
				continue;
			}
			ml_tval_clear(&vals[t]);
			vals[t] = *out[j];
		}
	}
done:
	ml_free(in);
	ml_free(out);
	ml_free(outv);
	return rc;
}

int
ml_graph_infer(struct ml_graph *g, struct ml_err *e)
{
	struct ml_tval *vals = ml_calloc((size_t)g->n_tensors + 1, sizeof *vals);
	int rc;

	if (vals == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int t = 0; t < g->n_tensors; t++) {
		ml_graph_tval(g, t, &vals[t]);
		if (g->tensors[t]->kind != ML_TK_CONST && g->tensors[t]->kind != ML_TK_PARAM)
			vals[t].data = NULL;
	}
	rc = ml_infer_values(g, vals, e);
	for (int i = 0; rc == 0 && i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_out; j++) {
			int t = n->out[j];
			if (t < 0)
				continue;
			struct ml_tensor *ten = g->tensors[t];
			const struct ml_tval *v = &vals[t];
			if (v->dtype != ML_UNDEF)
				ten->dtype = v->dtype;
			if (v->rank < 0)
				continue;
			bool declared = ten->rank == v->rank;
			for (int d = 0; d < v->rank; d++) {
				/* keep a declared symbolic dim where inference knows nothing */
				if (declared && v->dims[d] < 0)
					continue;
				ten->dims[d] = v->dims[d];
				ten->sym[d] = NULL;
			}
			if (!declared)
				for (int d = v->rank; d < ML_MAX_RANK; d++)
					ten->sym[d] = NULL;
			ten->rank = v->rank;
		}
	}
	for (int t = 0; t < g->n_tensors; t++)
		ml_tval_clear(&vals[t]);
	ml_free(vals);
	return rc;
}

int64_t
ml_node_flops(const struct ml_graph *g, int ni)
{
	const struct ml_node *n = &g->nodes[ni];
	const struct ml_opdef *d = n->op != ML_OP_NONE ? ml_opdef_get(n->op) : NULL;
	struct ml_tval iv[16], ov[16], *in[16], *out[16];
	struct ml_opctx c;

	if (d == NULL || n->n_in > 16 || n->n_out > 16)
		return 0;
	for (int j = 0; j < n->n_in; j++) {
		in[j] = NULL;
		if (n->in[j] >= 0) {
			ml_graph_tval(g, n->in[j], &iv[j]);
			in[j] = &iv[j];
		}
	}
	for (int j = 0; j < n->n_out; j++) {
		memset(&ov[j], 0, sizeof ov[j]);
		ov[j].rank = -1;
		if (n->out[j] >= 0)
			ml_graph_tval(g, n->out[j], &ov[j]);
		out[j] = &ov[j];
	}
	ml_node_ctx(&c, g, n, in, out, NULL);
	if (d->flops != NULL)
		return d->flops(&c);
	/* default: one op per output element */
	int64_t s = 0;
	for (int j = 0; j < n->n_out; j++) {
		int64_t k = ml_tval_numel(out[j]);
		if (k > 0)
			s += k;
	}
	return s;
}
