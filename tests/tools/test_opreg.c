/*
 * test_opreg.c: checks over the whole op registry, so every op added later
 * is covered too: each row of ops.def has a definition and a CPU kernel;
 * wrong arity is refused with ML_EINVAL naming the op; bad attribute values
 * and random input shapes and dtypes end in a result or in ML_EINVAL /
 * ML_ENOTSUP with a message naming the node, never in a crash; and where a
 * run succeeds, the outputs have the shapes inference gave them. And the
 * descriptors agree with themselves and with the other tables: flags with
 * arity and inference, quantisation classes with weight inputs, gradient
 * rules with families.def, lib/act.def's codes with the ops, the fused
 * ops, UnaryGrad and the OpenCL programs. Prints TAP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml_impl.h"
#include "ops/fused.h"
#include "ops/grad.h"
#include "ops/gradrule.h"
#ifndef ML_NO_OPENCL
#include "cl/cl.h"
#endif

static int ntest, nfail;

static void
ok(bool cond, const char *fmt, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - ", cond ? "" : "not ", ntest);
	printf(fmt, what);
	putchar('\n');
}

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t
next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static const enum ml_dtype dtypes[] = { ML_F32, ML_F32, ML_F32, ML_I64, ML_I32, ML_U8, ML_BOOL,
					ML_F16, ML_F64, ML_I8 };

/* a graph with one node of op: n_in inputs x0.. of random type, n_out outputs */
static struct ml_graph *
one_node(enum ml_op op, int n_in, int n_out, bool attrs, struct ml_tval *inputs)
{
	struct ml_err e = { 0 };
	struct ml_graph *g;
	char names[16][8], outs[16][8];
	const char *in[16], *out[16];

	if (ml_graph_new(&g, &e) < 0)
		return NULL;
	ml_graph_set_opset(g, "", 17, &e);
	for (int i = 0; i < n_in; i++) {
		snprintf(names[i], sizeof names[i], "x%d", i);
		in[i] = names[i];
		int ti = ml_graph_tensor(g, names[i]);
		ml_graph_add_input(g, ti, &e);
		if (inputs != NULL) {
			struct ml_tval *v = &inputs[i];
			enum ml_dtype dt = dtypes[next() % (sizeof dtypes / sizeof dtypes[0])];
			int rank = (int)(next() % 4);
			int64_t dims[4];
			for (int d = 0; d < rank; d++)
				dims[d] = 1 + (int64_t)(next() % 4);
			ml_tval_alloc(v, dt, rank, dims, &e);
			int64_t k = ml_tval_numel(v);
			for (int64_t j = 0; j < k; j++)
				ml_set_f64(v->data, dt, j, (double)(int64_t)(next() % 7) - 2);
		}
	}
	for (int i = 0; i < n_out; i++) {
		snprintf(outs[i], sizeof outs[i], "y%d", i);
		out[i] = outs[i];
	}
	int ni = ml_graph_add_node(g, ml_op_name(op), ml_op_domain(op), "n0", n_in, in, n_out, out,
				   &e);
	if (attrs) {
		/* values that are out of range for any op that reads them */
		ml_node_set_int(g, ni, "axis", 1000);
		int64_t bad[3] = { 7, -9, 100 };
		ml_node_set_ints(g, ni, "axes", 3, bad);
		ml_node_set_ints(g, ni, "perm", 3, bad);
		ml_node_set_ints(g, ni, "kernel_shape", 3, bad);
		ml_node_set_int(g, ni, "to", 99);
		ml_node_set_int(g, ni, "k", -5);
		ml_node_set_string(g, ni, "mode", "no-such-mode");
	}
	for (int i = 0; i < n_out; i++)
		ml_graph_add_output(g, ml_graph_tensor(g, outs[i]), &e);
	return g;
}

/* run g on inputs; returns the code; checks the message names the node */
static int
try_run(struct ml_graph *g, struct ml_tval *inputs, int n_in, bool *named, bool *shapes_ok)
{
	struct ml_err e = { 0 };
	struct ml_session *s = NULL;
	int rc;

	*named = true;
	*shapes_ok = true;
	if ((rc = ml_graph_toposort(g, &e)) < 0 || (rc = ml_graph_validate(g, &e)) < 0 ||
	    (rc = ml_graph_infer(g, &e)) < 0)
		goto out;
	if ((rc = ml_session_new(&s, g, NULL, &e)) < 0)
		goto out;
	for (int i = 0; i < n_in; i++) {
		char nm[8];
		snprintf(nm, sizeof nm, "x%d", i);
		if ((rc = ml_session_set_input(s, nm, &inputs[i], &e)) < 0)
			goto out;
	}
	if ((rc = ml_session_run(s, &e)) < 0)
		goto out;
	for (int i = 0; i < g->n_outputs; i++) {
		const struct ml_tensor *t = g->tensors[g->outputs[i]];
		const struct ml_tval *v = ml_session_output(s, i);
		if (t->rank >= 0 && t->rank != v->rank)
			*shapes_ok = false;
		for (int d = 0; t->rank >= 0 && d < t->rank && d < v->rank; d++)
			if (t->dims[d] >= 0 && t->dims[d] != v->dims[d])
				*shapes_ok = false;
	}
out:
	if (rc < 0)
		*named = e.msg[0] != '\0';
	ml_session_free(s);
	return rc;
}

/*
 * inplace_ok: op (ML_OPF_INPLACE) has one output, and inference over f32
 * [2, 3] inputs gives it input 0's shape and dtype, as the executor's
 * in-place reuse of input 0's memory assumes.
 */
static bool
inplace_ok(enum ml_op op, const struct ml_opdef *d)
{
	struct ml_err e = { 0 };
	struct ml_tval iv[4] = { 0 }, ov = { 0 }, *in[4], *out[1] = { &ov };
	int64_t dims[2] = { 2, 3 };

	if (d->max_out != 1 || d->min_in < 1 || d->min_in > 4 || (d->host_in & 1))
		return false;
	struct ml_graph *g = one_node(op, d->min_in, 1, false, NULL);
	for (int i = 0; i < d->min_in; i++) {
		ml_set_shape(&iv[i], ML_F32, 2, dims);
		in[i] = &iv[i];
	}
	bool ok = g != NULL && ml_node_infer(g, &g->nodes[0], in, out, &e) == 0 &&
		  ov.dtype == ML_F32 && ov.rank == 2 && ov.dims[0] == 2 && ov.dims[1] == 3;
	if (!ok)
		printf("# %s: %s\n", ml_op_name(op), e.msg);
	ml_graph_free(g);
	return ok;
}

/* the descriptor's properties, one case each */
static void
check_descriptors(void)
{
	int bad_inplace = 0, bad_side = 0, bad_masks = 0, bad_qc = 0;
	for (int op = 1; op < ML_OP_COUNT; op++) {
		const struct ml_opdef *d = ml_opdef_get((enum ml_op)op);
		const char *name = ml_op_name((enum ml_op)op);
		if (d == NULL)
			continue;
		if ((d->flags & ML_OPF_INPLACE) && !inplace_ok((enum ml_op)op, d))
			bad_inplace++;
		/* an op without outputs is there for what it writes, and only such an op */
		if (((d->flags & ML_OPF_SIDE_EFFECT) != 0) != (d->max_out == 0)) {
			printf("# %s: side effect %d, max_out %d\n", name,
			       (d->flags & ML_OPF_SIDE_EFFECT) != 0, d->max_out);
			bad_side++;
		}
		if ((d->max_in >= 0 && d->max_in < 32 && (d->weights >> d->max_in) != 0) ||
		    (d->weights & d->host_in) != 0) {
			printf("# %s: weights 0x%x, host_in 0x%x\n", name, d->weights, d->host_in);
			bad_masks++;
		}
		enum ml_qclass qc = d->qclass;
		int un = ml_op_unary((enum ml_op)op);
		bool qc_ok = qc <= ML_QC_ACT;
		if (qc == ML_QC_CONV || qc == ML_QC_GEMM)
			qc_ok &= (d->weights & 2) != 0;
		if (qc == ML_QC_ACT)
			qc_ok &= un > ML_ACT_NONE && un < ML_ACT_COUNT;
		if (qc != ML_QC_NONE)
			qc_ok &= d->min_in >= 1 && d->min_out >= 1;
		if (!qc_ok) {
			printf("# %s: quantisation class %d\n", name, (int)qc);
			bad_qc++;
		}
	}
	ok(bad_inplace == 0, "%s", "in-place ops have one output shaped and typed like input 0");
	ok(bad_side == 0, "%s", "the side-effect ops are the ops without outputs");
	ok(bad_masks == 0, "%s", "weight masks name inputs the ops have, never a host input");
	ok(bad_qc == 0, "%s",
	   "quantised layers read a weight input 1; fused activations have an ML_ACT code");

	/* every op with a gradient rule is in a family that families.def marks, and is its own */
	int bad_grad = 0, n_rules = 0;
#define F(fam, grad) ML_GRAD_IF_##grad( \
	for (const struct ml_grad_rule *r = ml_grad_rules_##fam; r->op != ML_OP_NONE; r++) { \
		n_rules++; \
		if (strcmp(ml_op_family(r->op), #fam) != 0 || ml_opdef_get(r->op) == NULL || \
		    ml_grad_rule_get(r->op) != r->fn) { \
			printf("# rule of %s in the %s table\n", ml_op_name(r->op), #fam); \
			bad_grad++; \
		} \
	})
#include "families.def"
#undef F
	for (int op = 1; op < ML_OP_COUNT; op++) {
		bool fam_grad = false;
#define F(fam, grad) fam_grad |= grad && strcmp(ml_op_family((enum ml_op)op), #fam) == 0;
#include "families.def"
#undef F
		if (ml_grad_rule_get((enum ml_op)op) != NULL && !fam_grad) {
			printf("# %s has a rule outside the gradient families\n",
			       ml_op_name((enum ml_op)op));
			bad_grad++;
		}
	}
	ok(bad_grad == 0 && n_rules > 0, "%s",
	   "every gradient rule is in its own family's table, a family with grad 1");

	/* lib/act.def: each row's code for its op, fused activation, chain link and UnaryGrad fn */
	int bad_codes = 0;
	struct ml_err e = { 0 };
	struct ml_graph *g = one_node(ML_OP_FUSED_CONV, 2, 1, false, NULL);
#define ROW(id, opid, act, fe, ug, nm) \
	{ \
		enum ml_op o = ML_OP_##opid; \
		bool row_ok = o == ML_OP_NONE ? ML_UN_##id == 0 : \
			      ml_op_unary(o) == ML_UN_##id && ml_opdef_get(o) != NULL; \
		g->nodes[0].n_attr = 0; /* set_string appends; the first one counts */ \
		ml_node_set_string(g, 0, "activation", ml_op_name(o)); \
		row_ok &= (ml_fused_act(&g->nodes[0]) == ML_UN_##id) == (act); \
		row_ok &= (act) ? strcmp(ml_fused_act_name(ML_UN_##id), ml_op_name(o)) == 0 : \
				ml_fused_act_name(ML_UN_##id) == NULL; \
		if (fe) { \
			row_ok &= ml_fused_elem_op(ml_op_name(o)) == ML_FE_UNARY + ML_UN_##id; \
			row_ok &= strcmp(ml_fused_elem_name(ML_FE_UNARY + ML_UN_##id), nm) == 0; \
		} else { \
			row_ok &= ml_fused_elem_op(ml_op_name(o)) < 0; \
		} \
		row_ok &= (ml_unary_grad_fn(nm) == ML_UN_##id) == (ug); \
		if (!row_ok) { \
			printf("# act.def row %s disagrees\n", #id); \
			bad_codes++; \
		} \
	}
	ML_UNARY_LIST(ROW)
#undef ROW
	ml_graph_free(g);
	(void)e;
	ok(bad_codes == 0, "%s", "act.def's codes are the ops', the fused activations', the chains' "
	   "and UnaryGrad's");

#ifndef ML_NO_OPENCL
	/*
	 * The OpenCL programs read the codes from the embedded act.def, which
	 * must be this build's lib/act.def (read from the repository root, where
	 * tests/run.sh runs), and no kernel source may keep codes of its own.
	 */
	const struct ml_kernel_src *act = NULL;
	bool own_codes = false;
	for (const struct ml_kernel_src *k = ml_kernel_srcs; k->name != NULL; k++) {
		if (strcmp(k->name, "act.def") == 0)
			act = k;
		else if (strstr(k->src, "#define ACT_RELU") != NULL ||
			 strstr(k->src, "U_RELU") != NULL)
			own_codes = true;
	}
	FILE *f = fopen("lib/act.def", "rb");
	if (f == NULL) {
		ntest++;
		printf("ok %d - # SKIP lib/act.def is not in the current folder\n", ntest);
	} else {
		static char buf[1 << 16];
		size_t n = fread(buf, 1, sizeof buf, f);
		fclose(f);
		ok(act != NULL && act->len == n && memcmp(act->src, buf, n) == 0, "%s",
		   "the OpenCL programs' act.def is lib/act.def");
	}
	ok(!own_codes, "%s", "no kernel source defines activation or unary codes of its own");
#endif
}

int
main(void)
{
	int missing = 0;
	char buf[256];

	ml_set_threads(1);
	check_descriptors();
	for (int op = 1; op < ML_OP_COUNT; op++)
		if (ml_opdef_get((enum ml_op)op) == NULL || ml_cpu_kernel_get((enum ml_op)op) == NULL) {
			printf("# %s has no %s\n", ml_op_name((enum ml_op)op),
			       ml_opdef_get((enum ml_op)op) == NULL ? "definition" : "CPU kernel");
			missing++;
		}
	snprintf(buf, sizeof buf, "%d", ML_OP_COUNT - 1);
	ok(missing == 0, "all %s ops of ops.def have a definition and a CPU kernel", buf);

	for (int op = 1; op < ML_OP_COUNT; op++) {
		const struct ml_opdef *d = ml_opdef_get((enum ml_op)op);
		const char *name = ml_op_name((enum ml_op)op);
		if (d == NULL)
			continue;
		/* arity */
		bool arity_ok = true;
		struct ml_err e = { 0 };
		if (d->max_in >= 0 && d->max_in < 15) {
			struct ml_graph *g = one_node((enum ml_op)op, d->max_in + 1, ML_MAX(d->min_out, 1),
						      false, NULL);
			arity_ok &= ml_graph_validate(g, &e) == ML_EINVAL && strstr(e.msg, name) != NULL;
			ml_graph_free(g);
		}
		if (d->min_in > 0) {
			struct ml_graph *g = one_node((enum ml_op)op, d->min_in - 1, ML_MAX(d->min_out, 1),
						      false, NULL);
			arity_ok &= ml_graph_validate(g, &e) == ML_EINVAL && strstr(e.msg, name) != NULL;
			ml_graph_free(g);
		}
		if (d->max_out >= 0 && d->max_out < 15) {
			struct ml_graph *g = one_node((enum ml_op)op, d->min_in, d->max_out + 1, false,
						      NULL);
			arity_ok &= ml_graph_validate(g, &e) == ML_EINVAL;
			ml_graph_free(g);
		}
		ok(arity_ok, "%s: wrong input or output counts are refused with ML_EINVAL", name);

		/* random inputs, with and without bad attributes: no crash, a clear refusal */
		bool codes_ok = true, named_ok = true, shapes_ok = true;
		int n_in = d->min_in > 0 ? d->min_in : 1;
		if (d->max_in >= 0 && n_in > d->max_in)
			n_in = d->max_in;
		int n_out = d->min_out > 0 ? d->min_out : 1;
		for (int trial = 0; trial < 24; trial++) {
			struct ml_tval inputs[16] = { 0 };
			int k = n_in + (d->max_in < 0 || d->max_in > n_in ? (int)(next() % 2) : 0);
			if (k > 15)
				k = 15;
			struct ml_graph *g = one_node((enum ml_op)op, k, n_out, trial % 3 == 2, inputs);
			bool named, sh;
			int rc = try_run(g, inputs, k, &named, &sh);
			if (rc != 0 && rc != ML_EINVAL && rc != ML_ENOTSUP) {
				printf("# %s trial %d: code %d\n", name, trial, rc);
				codes_ok = false;
			}
			named_ok &= named;
			shapes_ok &= sh;
			for (int i = 0; i < k; i++)
				ml_tval_clear(&inputs[i]);
			ml_graph_free(g);
		}
		ok(codes_ok && named_ok, "%s: random shapes, dtypes and bad attributes end in a result or "
		   "a clear EINVAL/ENOTSUP", name);
		ok(shapes_ok, "%s: outputs have the shapes static inference gave them", name);
	}
	printf("1..%d\n", ntest);
	return nfail != 0;
}
