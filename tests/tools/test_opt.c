/*
 * test_opt.c: C tests of the pass manager (lib/opt, ml_opt.h): the pass
 * registry, level and list handling, a pipeline on a small text-form graph
 * whose result must compute what the original does, the report, fused_from
 * and idempotence. Prints TAP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"
#include "ml_impl.h"
#include "ops/fused.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static const char model[] =
	"<ir_version: 8, opset_import: [\"\" : 14]>\n"
	"t (float[2,4] x) => (float[2,4] y)\n"
	"{\n"
	"    [id] a = Identity (x)\n"
	"    [mul] b = Mul (a, k)\n"
	"    [add] c = Add (b, s)\n"
	"    [relu] y = Relu (c)\n"
	"    [dead] z = Neg (c)\n"
	"}\n"
	"float[4] k = {1, -2, 3, -4}\n"
	"float[] s = {0.5}\n";

/* Pads: by zeros (eliminate drops it) and by +1 and -1 (a shift, kept); both read inside */
static const char pmodel[] =
	"<ir_version: 8, opset_import: [\"\" : 14]>\n"
	"p (float[2,4] x) => (float[2,4] y, float[2,4] w)\n"
	"{\n"
	"    [zero] a = Pad (x, zp)\n"
	"    [ry] y = Relu (a)\n"
	"    [shift] b = Pad (x, sp)\n"
	"    [rw] w = Relu (b)\n"
	"}\n"
	"int64[4] zp = {0, 0, 0, 0}\n"
	"int64[4] sp = {0, 1, 0, -1}\n";

static struct ml_graph *
load(void)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	if (ml_text_decode(&g, model, strlen(model), "t.mlt", &e) < 0 ||
	    ml_graph_toposort(g, &e) < 0 || ml_graph_validate(g, &e) < 0 ||
	    ml_graph_infer(g, &e) < 0) {
		printf("# %s\n", e.msg);
		ml_graph_free(g);
		return NULL;
	}
	return g;
}

/* run: y of g on x = [-2, -1.5, ..., 1.5] into out[8]. */
static bool
run(struct ml_graph *g, float *out)
{
	struct ml_err e = { 0 };
	struct ml_session *s = NULL;
	float xv[8];
	for (int i = 0; i < 8; i++)
		xv[i] = -2.0f + 0.5f * (float)i;
	struct ml_tval x = { .dtype = ML_F32, .rank = 2, .dims = { 2, 4 }, .data = xv };
	bool good = ml_session_new(&s, g, NULL, &e) == 0 &&
		    ml_session_set_input(s, "x", &x, &e) == 0 && ml_session_run(s, &e) == 0;
	if (good)
		memcpy(out, ml_session_output(s, 0)->data, sizeof(float) * 8);
	else
		printf("# %s\n", e.msg);
	ml_session_free(s);
	return good;
}

/* attention: ml.Attention on Q [1, 2, 3], Kt [1, 3, KS] and V [1, 2, 2]; infers or not. */
static bool
attention(int ks, float *out)
{
	char text[1024];
	snprintf(text, sizeof text,
		 "<ir_version: 8, opset_import: [\"\" : 14]>\n"
		 "t (float[1,2,3] q, float[1,3,%d] kt, float[1,2,2] v) => (float[1,2,2] y)\n"
		 "{\n    [att] y = ml.Attention <scale = 0.5> (q, kt, v)\n}\n", ks);
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	struct ml_session *s = NULL;
	bool good = ml_text_decode(&g, text, strlen(text), "a.mlt", &e) == 0 &&
		    ml_graph_toposort(g, &e) == 0 && ml_graph_infer(g, &e) == 0;
	if (good && out != NULL) {
		float qv[6] = { 1, 0, -1, 0.5f, 2, 0 }, kv[6] = { 1, -1, 0, 2, 0.5f, 1 };
		float vv[4] = { 1, 2, 3, 4 };
		struct ml_tval q = { .dtype = ML_F32, .rank = 3, .dims = { 1, 2, 3 }, .data = qv };
		struct ml_tval k = { .dtype = ML_F32, .rank = 3, .dims = { 1, 3, 2 }, .data = kv };
		struct ml_tval v = { .dtype = ML_F32, .rank = 3, .dims = { 1, 2, 2 }, .data = vv };
		good = ml_session_new(&s, g, NULL, &e) == 0 &&
		       ml_session_set_input(s, "q", &q, &e) == 0 &&
		       ml_session_set_input(s, "kt", &k, &e) == 0 &&
		       ml_session_set_input(s, "v", &v, &e) == 0 && ml_session_run(s, &e) == 0;
		if (good)
			memcpy(out, ml_session_output(s, 0)->data, sizeof(float) * 4);
	}
	if (!good)
		printf("# %s\n", e.msg);
	ml_session_free(s);
	ml_graph_free(g);
	return good;
}

/*
 * shapes: ml_shape_arg_parse and ml_graph_set_input_shapes on a batch-1
 * graph whose Reshape target spells out the batch.
 */
static const char rmodel[] =
	"<ir_version: 8, opset_import: [\"\" : 14]>\n"
	"r (float[1,6] x) => (float[1,2,3] y)\n"
	"{\n"
	"    [re] r = Reshape (x, s)\n"
	"    [relu] y = Relu (r)\n"
	"}\n"
	"int64[3] s = {1, 2, 3}\n";

static const char smodel[] =
	"<ir_version: 8, opset_import: [\"\" : 14]>\n"
	"q (float[1,6] x) => (float[2,3] y)\n"
	"{\n"
	"    [re] r = Reshape (x, s)\n"
	"    [sq] y = Squeeze (r, ax)\n"
	"}\n"
	"int64[3] s = {1, 2, 3}\n"
	"int64[1] ax = {0}\n";

/* a constant made at batch 2 (a folded torch.zeros(batch, 3)) joined to x */
static const char cmodel[] =
	"<ir_version: 8, opset_import: [\"\" : 14]>\n"
	"c (float[2,3] x) => (float[2,6] y)\n"
	"{\n"
	"    [cat] y = Concat <axis = 1> (x, z)\n"
	"}\n"
	"float[2,3] z = {0, 0, 0, 0, 0, 0}\n";

/* a class token expanded to the export's batch, 2, by a constant target */
static const char emodel[] =
	"<ir_version: 8, opset_import: [\"\" : 14]>\n"
	"e (float[2,3] x) => (float[2,6] y)\n"
	"{\n"
	"    [ex] c = Expand (tok, s)\n"
	"    [cat] y = Concat <axis = 1> (c, x)\n"
	"}\n"
	"float[1,3] tok = {1, 2, 3}\n"
	"int64[2] s = {2, 3}\n";

static void
shapes(void)
{
	struct ml_err e = { 0 };
	struct ml_shape_arg a = { 0 };
	ok(ml_shape_arg_parse(&a, "x=Nx6", &e) == 0 && strcmp(a.name, "x") == 0 && a.rank == 2 &&
		   a.dims[0] == -1 && strcmp(a.sym[0], "N") == 0 && a.dims[1] == 6 && a.sym[1] == NULL,
	   "x=Nx6 parses as a symbolic N and a 6");
	ml_shape_arg_clear(&a);
	ok(ml_shape_arg_parse(&a, "a=b=max_len,4", &e) == 0 && strcmp(a.name, "a=b") == 0 &&
		   a.rank == 2 && strcmp(a.sym[0], "max_len") == 0 && a.dims[1] == 4,
	   "commas separate dims of names that hold an x; NAME ends at the last '='");
	ml_shape_arg_clear(&a);
	const char *bad[] = { "x=0x6", "x=-1x6", "x=2xx6", "x=2x", "x=", "x", "=2", "x=2.5",
			      "x=2x$", "x=1x1x1x1x1x1x1x1x1", "x=99999999999" };
	bool refused = true;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		refused &= ml_shape_arg_parse(&a, bad[i], &e) == ML_EINVAL && a.name == NULL;
		ml_shape_arg_clear(&a);
	}
	ok(refused, "malformed, zero, negative and too many dims are refused");

	struct ml_graph *g = NULL;
	int nr = -1;
	if (ml_text_decode(&g, rmodel, strlen(rmodel), "r.mlt", &e) < 0 ||
	    ml_graph_toposort(g, &e) < 0 || ml_graph_infer(g, &e) < 0 ||
	    ml_shape_arg_parse(&a, "x=Nx6", &e) < 0 ||
	    ml_graph_set_input_shapes(g, &a, 1, &nr, &e) < 0)
		printf("# %s\n", e.msg);
	const struct ml_tensor *y = g != NULL ? ml_graph_t(g, g->outputs[0]) : NULL;
	ok(nr == 1 && y != NULL && y->rank == 3 && y->dims[0] == -1 && y->sym[0] != NULL &&
		   strcmp(y->sym[0], "N") == 0 && y->dims[1] == 2 && y->dims[2] == 3,
	   "a symbolic batch reaches the output, named, through a rewritten Reshape");
	const struct ml_node *re = NULL;
	for (int i = 0; g != NULL && i < g->n_nodes; i++)
		if (strcmp(g->nodes[i].name, "re") == 0)
			re = &g->nodes[i];
	const int64_t *tv = re != NULL ? ml_graph_t(g, re->in[1])->data : NULL;
	ok(tv != NULL && tv[0] == 0 && tv[1] == 2 && tv[2] == 3 && ml_graph_find(g, "s") < 0,
	   "the target becomes [0, 2, 3] and the old constant goes");
	struct ml_session *ss = NULL;
	struct ml_tval x = { 0 };
	int64_t xd[2] = { 3, 6 };
	bool ran = g != NULL && ml_tval_alloc(&x, ML_F32, 2, xd, &e) == 0;
	for (int i = 0; ran && i < 18; i++)
		((float *)x.data)[i] = (float)i - 9;
	ran = ran && ml_session_new(&ss, g, NULL, &e) == 0 &&
	      ml_session_set_input(ss, "x", &x, &e) == 0 && ml_session_run(ss, &e) == 0;
	const struct ml_tval *out = ran ? ml_session_output(ss, 0) : NULL;
	bool good = out != NULL && out->rank == 3 && out->dims[0] == 3;
	for (int i = 0; good && i < 18; i++)
		good = ((float *)out->data)[i] == (i < 9 ? 0.0f : (float)i - 9);
	ok(good, "and runs at batch 3");
	ml_session_free(ss);
	ml_tval_clear(&x);
	ml_shape_arg_clear(&a);

	ok(g != NULL && ml_shape_arg_parse(&a, "y=2x6", &e) == 0 &&
		   ml_graph_set_input_shapes(g, &a, 1, NULL, &e) == ML_EINVAL &&
		   strcmp(e.msg, "the model has no input 'y' (its inputs: x)") == 0,
	   "an unknown input is refused, listing the inputs");
	ml_shape_arg_clear(&a);
	ok(g != NULL && ml_shape_arg_parse(&a, "x=2x6x1", &e) == 0 &&
		   ml_graph_set_input_shapes(g, &a, 1, NULL, &e) == ML_EINVAL,
	   "so is a rank other than the input's");
	ml_shape_arg_clear(&a);
	ml_graph_free(g);

	/* a Squeeze of the batch: refused, naming it, and the graph as it was */
	g = NULL;
	if (ml_text_decode(&g, smodel, strlen(smodel), "q.mlt", &e) < 0 ||
	    ml_graph_toposort(g, &e) < 0 || ml_graph_infer(g, &e) < 0 ||
	    ml_shape_arg_parse(&a, "x=4x6", &e) < 0)
		printf("# %s\n", e.msg);
	int nt = g != NULL ? g->n_tensors : -1, rc = -1, ri = -1;
	if (g != NULL)
		rc = ml_graph_set_input_shapes(g, &a, 1, NULL, &e);
	for (int i = 0; g != NULL && i < g->n_nodes; i++)
		if (strcmp(g->nodes[i].name, "re") == 0)
			ri = i;
	ok(rc == ML_ENOTSUP && strstr(e.msg, "node 'sq' (Squeeze) does not fit the new sizes") &&
		   g->n_tensors == nt && ri >= 0 && g->nodes[ri].in[1] == ml_graph_find(g, "s") &&
		   ml_graph_t(g, g->inputs[0])->dims[0] == 1,
	   "a Squeeze of the old batch is refused by name and the graph is left as it was");
	ml_shape_arg_clear(&a);
	ml_graph_free(g);

	/* the constant that holds the old batch is named, not only the Concat */
	g = NULL;
	if (ml_text_decode(&g, cmodel, strlen(cmodel), "c.mlt", &e) < 0 ||
	    ml_graph_toposort(g, &e) < 0 || ml_graph_infer(g, &e) < 0 ||
	    ml_shape_arg_parse(&a, "x=5x3", &e) < 0)
		printf("# %s\n", e.msg);
	rc = g != NULL ? ml_graph_set_input_shapes(g, &a, 1, NULL, &e) : -1;
	ok(rc == ML_ENOTSUP && strcmp(e.msg, "node 'cat' (Concat) does not fit the new sizes: its "
				     "input 'z' (a constant) keeps [2,3]: dim 0 holds the "
				     "export's size 2 (export with dynamic_axes, or keep that size)") == 0 &&
		   ml_graph_t(g, g->inputs[0])->dims[0] == 2,
	   "a constant made at the old batch is named as the cause");
	if (rc != ML_ENOTSUP || strstr(e.msg, "its input 'z'") == NULL)
		printf("# %s\n", e.msg);
	ml_shape_arg_clear(&a);
	ml_graph_free(g);

	/* the Expand's constant target takes a new batch, not a symbolic one */
	g = NULL;
	nr = -1;
	if (ml_text_decode(&g, emodel, strlen(emodel), "e.mlt", &e) < 0 ||
	    ml_graph_toposort(g, &e) < 0 || ml_graph_infer(g, &e) < 0 ||
	    ml_shape_arg_parse(&a, "x=5x3", &e) < 0 ||
	    ml_graph_set_input_shapes(g, &a, 1, &nr, &e) < 0)
		printf("# %s\n", e.msg);
	y = g != NULL ? ml_graph_t(g, g->outputs[0]) : NULL;
	const struct ml_node *ex = NULL;
	for (int i = 0; g != NULL && i < g->n_nodes; i++)
		if (strcmp(g->nodes[i].name, "ex") == 0)
			ex = &g->nodes[i];
	tv = ex != NULL ? ml_graph_t(g, ex->in[1])->data : NULL;
	ok(nr == 0 && y != NULL && y->rank == 2 && y->dims[0] == 5 && y->dims[1] == 6 &&
		   tv != NULL && tv[0] == 5 && tv[1] == 3,
	   "an Expand of a token to the old batch takes the new one, [5, 3]");
	ml_shape_arg_clear(&a);
	ml_graph_free(g);
	g = NULL;
	if (ml_text_decode(&g, emodel, strlen(emodel), "e.mlt", &e) < 0 ||
	    ml_graph_toposort(g, &e) < 0 || ml_graph_infer(g, &e) < 0 ||
	    ml_shape_arg_parse(&a, "x=Nx3", &e) < 0)
		printf("# %s\n", e.msg);
	rc = g != NULL ? ml_graph_set_input_shapes(g, &a, 1, NULL, &e) : -1;
	ok(rc == ML_ENOTSUP && strstr(e.msg, "its input 'c' (from node 'ex' (Expand)) keeps [2,3]") &&
		   strstr(e.msg, "an Expand takes a size there, not a name"),
	   "a symbolic batch is refused, naming the Expand");
	ml_shape_arg_clear(&a);
	ml_graph_free(g);
}

int
main(void)
{
	struct ml_err e = { 0 };
	int n;
	const struct ml_opt_pass_info *p = ml_opt_passes(&n);
	ok(n >= 15, "the registry lists every pass");
	bool named = true;
	for (int i = 0; i < n; i++)
		named &= p[i].name != NULL && p[i].doc != NULL && p[i].level >= 1 && p[i].level <= 3;
	ok(named, "each pass has a name, a doc line and a level 1 to 3");
	ok(ml_opt_check_names("dce,cse", &e) == 0 && ml_opt_check_names("", &e) == 0 &&
		   ml_opt_check_names(NULL, &e) == 0,
	   "known pass lists are accepted");
	ok(ml_opt_check_names("dce,nope", &e) == ML_EINVAL && strstr(e.msg, "'nope'") != NULL,
	   "an unknown pass is refused naming it");

	/* ml_fused_block: which operands a FusedElementwise reads as one block */
	struct ml_tval bx = { .rank = 3, .dims = { 2, 1, 5 } }, by = { .rank = 3, .dims = { 2, 1, 5 } };
	int64_t inner = 0, cnt = 0;
	ok(ml_fused_block(&bx, &by, &inner, &cnt) == 0 && inner == 1 && cnt == 10,
	   "an operand of Y's own shape with a dim of 1 is one block");
	by.dims[1] = 3;
	ok(ml_fused_block(&bx, &by, &inner, &cnt) < 0, "[2, 1, 5] against [2, 3, 5] is not");
	struct ml_tval cx = { .rank = 4, .dims = { 1, 3, 1, 1 } };
	struct ml_tval cy = { .rank = 4, .dims = { 2, 3, 4, 4 } };
	ok(ml_fused_block(&cx, &cy, &inner, &cnt) == 0 && inner == 16 && cnt == 3,
	   "a per-channel operand steps every plane");

	struct ml_graph *g = load();
	float want[8], got[8];
	ok(g != NULL && run(g, want), "the test graph loads and runs");
	if (g == NULL)
		return 1;
	struct ml_opt_opts o = { .level = 5 };
	ok(ml_opt_run(g, &o, NULL, &e) == ML_EINVAL, "level 5 is refused");
	o = (struct ml_opt_opts){ .level = 0 };
	struct ml_opt_report r = { 0 };
	ok(ml_opt_run(g, &o, &r, &e) == 0 && g->n_nodes == 5 && r.n == 0, "-O0 changes nothing");
	ml_opt_report_free(&r);
	o = (struct ml_opt_opts){ .passes = "eliminate,dce" };
	ok(ml_opt_run(g, &o, &r, &e) == 0 && g->n_nodes == 3, "eliminate and dce remove Identity "
	   "and the unread Neg");
	ok(r.n >= 2 && strcmp(r.rows[0].pass, "eliminate") == 0 && r.rows[0].nodes_before == 5 &&
		   r.rows[0].nodes_after == 4 && strstr(r.rows[0].what, "Identity") != NULL,
	   "the report says what eliminate did");
	ml_opt_report_free(&r);
	ok(run(g, got) && memcmp(got, want, sizeof got) == 0, "the cleaned graph computes the same");
	{
		struct ml_graph *pg = NULL;
		float py[8], py2[8];
		bool built = ml_text_decode(&pg, pmodel, strlen(pmodel), "p.mlt", &e) == 0 &&
			     ml_graph_toposort(pg, &e) == 0 && ml_graph_infer(pg, &e) == 0 &&
			     run(pg, py);
		struct ml_opt_opts po = { .passes = "eliminate,dce" };
		int pads = 0, shift = 0;
		if (built && ml_opt_run(pg, &po, NULL, &e) == 0)
			for (int i = 0; i < pg->n_nodes; i++)
				if (strcmp(pg->nodes[i].op_type, "Pad") == 0) {
					pads++;
					shift += strcmp(pg->nodes[i].name, "shift") == 0;
				}
		ok(built && pg->n_nodes == 3 && pads == 1 && shift == 1 && run(pg, py2) &&
			   memcmp(py, py2, sizeof py) == 0,
		   "eliminate drops a Pad by zeros and keeps one by +1 and -1 (a shift)");
		ml_graph_free(pg);
	}
	o = (struct ml_opt_opts){ .level = 2 };
	ok(ml_opt_run(g, &o, &r, &e) == 0 && g->n_nodes == 1, "-O2 fuses Mul, Add, Relu");
	ok(strcmp(g->nodes[0].op_type, "FusedElementwise") == 0 &&
		   strcmp(g->nodes[0].domain, "ml") == 0,
	   "into one ml.FusedElementwise");
	const struct ml_attr *a = ml_attr_find(&g->nodes[0], "fused_from");
	ok(a != NULL && a->type == ML_ATTR_STRINGS && a->n == 3 &&
		   strcmp(a->strings[0], "mul:Mul") == 0 && strcmp(a->strings[2], "relu:Relu") == 0,
	   "fused_from lists the nodes it replaces as NAME:OP_TYPE");
	ok(g->arena_bytes > 0 && r.arena_bytes == g->arena_bytes, "-O2 stores a memory plan");
	ml_opt_report_free(&r);
	ok(run(g, got), "the fused graph runs");
	bool close = true;
	for (int i = 0; i < 8; i++)
		close &= fabsf(got[i] - want[i]) <= 1e-6f;
	ok(close, "and computes the same");
	uint8_t *b1 = NULL, *b2 = NULL;
	size_t l1 = 0, l2 = 0;
	ml_mlg_encode(g, &b1, &l1, &e);
	ok(ml_opt_run(g, &o, &r, &e) == 0 && r.rounds == 1, "-O2 again stops after one round");
	bool nochange = true;
	for (int i = 0; i < r.n; i++)
		nochange &= r.rows[i].changes == 0;
	ok(nochange, "and changes nothing");
	ml_mlg_encode(g, &b2, &l2, &e);
	ok(b1 != NULL && b2 != NULL && l1 == l2 && memcmp(b1, b2, l1) == 0,
	   "the graph file is byte for byte the same");
	ml_free(b1);
	ml_free(b2);
	ml_opt_report_free(&r);
	ml_graph_free(g);

	/* ml.Attention against softmax(0.5 q kt) v computed here */
	float att[4];
	ok(attention(2, att), "ml.Attention infers and runs");
	{
		const float qv[6] = { 1, 0, -1, 0.5f, 2, 0 }, kv[6] = { 1, -1, 0, 2, 0.5f, 1 };
		const float vv[4] = { 1, 2, 3, 4 };
		bool same = true;
		for (int i = 0; i < 2; i++) {
			double sc[2], mx = -INFINITY, sum = 0;
			for (int j = 0; j < 2; j++) {
				sc[j] = 0;
				for (int t = 0; t < 3; t++)
					sc[j] += 0.5 * qv[i * 3 + t] * kv[t * 2 + j];
				mx = fmax(mx, sc[j]);
			}
			for (int j = 0; j < 2; j++)
				sum += (sc[j] = exp(sc[j] - mx));
			for (int d = 0; d < 2; d++) {
				double y = (sc[0] * vv[d] + sc[1] * vv[2 + d]) / sum;
				same &= fabs(y - att[i * 2 + d]) <= 1e-5 * fabs(y) + 1e-6;
			}
		}
		ok(same, "and computes softmax(scale Q Kt) V");
	}
	ok(!attention(3, NULL), "ml.Attention refuses Kt and V of different key counts");
	shapes();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
