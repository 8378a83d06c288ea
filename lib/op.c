/*
 * op.c: the op registry built from ops.def and the family tables (each
 * op's descriptor), name lookup, one node's shape inference, and FLOP
 * estimates. Whole-graph inference, which runs CPU kernels on what is
 * known ahead, is the CPU device's (lib/cpu/infer.c).
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
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void
reg_init(void)
{
	static const struct ml_opdef *const dtabs[] = {
#define F(name, grad) ml_opdefs_##name,
#include "families.def"
#undef F
	};
	for (size_t f = 0; f < sizeof dtabs / sizeof dtabs[0]; f++)
		for (const struct ml_opdef *d = dtabs[f]; d->op != ML_OP_NONE; d++)
			defs[d->op] = d;
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

bool
ml_node_alias(const struct ml_node *n, const struct ml_tval *x)
{
	const struct ml_opdef *d = ml_opdef_get(n->op);
	return d != NULL && (d->flags & ML_OPF_ALIAS) && (d->alias == NULL || d->alias(n, x));
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

void *
ml_node_prep(struct ml_opctx *c, size_t bytes)
{
	if (c->cache == NULL)
		return NULL;
	if (*c->cache == NULL)
		*c->cache = ml_calloc(1, bytes);
	return *c->cache;
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
		/* -1 is an unknown dim; below that an op's rule took a bad attribute */
		for (int d = 0; d < o->rank && d < ML_MAX_RANK; d++)
			if (o->dims[d] < -1)
				return ml_fail(e, ML_EINVAL,
					       "node '%s' (%s): output %d has dim %d of %lld",
					       n->name, n->op_type, i, d, (long long)o->dims[d]);
		if (known && (ml_tval_numel(o) < 0 || ml_tval_nbytes(o) < 0)) {
			char buf[256];
			return ml_fail(e, ML_EINVAL, "node '%s' (%s): output %d of shape %s is too large",
				       n->name, n->op_type, i, ml_tval_shape_str(o, buf, sizeof buf));
		}
	}
	return 0;
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
