/*
 * infer.c: the CPU device's kernel table (ml_cpu_kernel_get, from each
 * family's lib/cpu/FAMILY.c table) and whole-graph inference that runs
 * those kernels on what is known ahead (ml_infer_values, ml_graph_infer):
 * static shapes propagated through shape arithmetic. It lives with the
 * CPU's kernels, not with the op registry (lib/op.c), because it runs
 * them: the registry below the devices never calls up into them.
 */
#include <pthread.h>

#include "ml_impl.h"

static int (*cpu_kernels[ML_OP_COUNT])(struct ml_opctx *);
static pthread_once_t kern_once = PTHREAD_ONCE_INIT;

static void
kern_init(void)
{
	static const struct ml_cpu_kernel *const ktabs[] = {
#define F(name, grad) ml_cpu_##name,
#include "families.def"
#undef F
	};
	for (size_t f = 0; f < sizeof ktabs / sizeof ktabs[0]; f++)
		for (const struct ml_cpu_kernel *k = ktabs[f]; k->op != ML_OP_NONE; k++)
			cpu_kernels[k->op] = k->run;
}

int (*ml_cpu_kernel_get(enum ml_op op))(struct ml_opctx *)
{
	pthread_once(&kern_once, kern_init);
	return (unsigned)op < ML_OP_COUNT ? cpu_kernels[op] : NULL;
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
ml_infer_values_range(const struct ml_graph *g, struct ml_tval *vals, int from, int to,
		      struct ml_err *e)
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
	for (int i = from; i < to && i < g->n_nodes; i++) {
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
		if (known && kern != NULL && n->n_out > 0 && total >= 0 && total <= PROPAGATE_MAX &&
		    !is_random(n->op)) {
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
ml_infer_values(const struct ml_graph *g, struct ml_tval *vals, struct ml_err *e)
{
	return ml_infer_values_range(g, vals, 0, g->n_nodes, e);
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

