/*
 * test_opreg.c: checks over the whole op registry, so every op added later
 * is covered too: each row of ops.def has a definition and a CPU kernel;
 * wrong arity is refused with ML_EINVAL naming the op; bad attribute values
 * and random input shapes and dtypes end in a result or in ML_EINVAL /
 * ML_ENOTSUP with a message naming the node, never in a crash; and where a
 * run succeeds, the outputs have the shapes inference gave them. Prints TAP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml_impl.h"

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

int
main(void)
{
	int missing = 0;
	char buf[256];

	ml_set_threads(1);
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
