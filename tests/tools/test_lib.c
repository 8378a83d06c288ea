/*
 * test_lib.c: C unit tests of the library core: dtypes, the graph arena,
 * topological order, the .mlg and .npy codecs and their failure paths,
 * the allocation cap and the executor's arena plan. Prints TAP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "ml_impl.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static struct ml_graph *
small_graph(void)
{
	struct ml_err e = { 0 };
	struct ml_graph *g;
	if (ml_graph_new(&g, &e) < 0)
		return NULL;
	g->name = ml_graph_strdup(g, "small");
	ml_graph_set_opset(g, "", 17, &e);
	int x = ml_graph_tensor(g, "x");
	g->tensors[x]->dtype = ML_F32;
	g->tensors[x]->rank = 2;
	g->tensors[x]->dims[0] = -1;
	g->tensors[x]->sym[0] = ml_graph_strdup(g, "N");
	g->tensors[x]->dims[1] = 4;
	ml_graph_add_input(g, x, &e);
	int w = ml_graph_tensor(g, "w");
	float wd[4] = { 1, 2, 3, 4 };
	int64_t wdims[1] = { 4 };
	ml_graph_set_data(g, w, ML_TK_PARAM, ML_F32, 1, wdims, wd, sizeof wd, &e);
	const char *in[2] = { "x", "w" }, *mid[1] = { "h" }, *out[1] = { "y" };
	/* added out of order on purpose: toposort must fix it */
	int n1 = ml_graph_add_node(g, "Relu", "", "relu", 1, mid, 1, out, &e);
	int n0 = ml_graph_add_node(g, "Mul", "", "mul", 2, in, 1, mid, &e);
	ml_node_set_int(g, n1, "dummy", 7);
	int64_t iv[3] = { 1, -2, 3 };
	ml_node_set_ints(g, n0, "list", 3, iv);
	ml_graph_add_output(g, ml_graph_find(g, "y"), &e);
	ml_graph_set_meta(g, "author", "test", &e);
	return g;
}

static void
test_dtypes(void)
{
	bool good = true;
	for (uint32_t h = 0; h < 0x10000; h++) {
		uint16_t x = (uint16_t)h;
		if ((x & 0x7c00) == 0x7c00 && (x & 0x3ff))
			continue;	/* NaN payloads need not survive */
		if (ml_f32_to_f16(ml_f16_to_f32(x)) != x)
			good = false;
	}
	ok(good, "every f16 value survives f16 -> f32 -> f16");
	ok(ml_f32_to_f16(65520.0f) == 0x7c00, "f32 above the f16 range rounds to infinity");
	ok(ml_bf16_to_f32(ml_f32_to_bf16(1.5f)) == 1.5f, "bf16 keeps 1.5");
	int32_t dst[3];
	float src[3] = { 2.9f, -2.9f, 1e20f };
	ml_convert(dst, ML_I32, src, ML_F32, 3);
	ok(dst[0] == 2 && dst[1] == -2 && dst[2] == INT32_MAX, "f32 -> i32 truncates and saturates");
	ok(strcmp(ml_dtype_name(ML_BF16), "bf16") == 0 && ml_dtype_from_name("i64") == ML_I64,
	   "dtype names round-trip");
	int64_t r;
	ok(!ml_mul_ok(INT64_MAX / 2, 3, &r) && ml_mul_ok(1 << 20, 1 << 20, &r) && r == 1ll << 40,
	   "ml_mul_ok detects overflow");
}

static void
test_graph(void)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = small_graph();
	ok(g != NULL && g->n_nodes == 2 && g->n_tensors == 4, "graph builds with 2 nodes, 4 tensors");
	ok(ml_graph_toposort(g, &e) == 0 && strcmp(g->nodes[0].name, "mul") == 0,
	   "toposort puts the producer first");
	ok(ml_graph_validate(g, &e) == 0, "the graph validates");
	ok(ml_graph_infer(g, &e) == 0, "shape inference runs");
	int y = ml_graph_find(g, "y");
	ok(g->tensors[y]->dtype == ML_F32 && g->tensors[y]->rank == 2 && g->tensors[y]->dims[1] == 4 &&
	   g->tensors[y]->dims[0] == -1, "y is inferred as f32[?,4]");
	int64_t pc, pb;
	ml_graph_param_stats(g, &pc, &pb);
	ok(pc == 4 && pb == 16, "parameter stats count 4 values, 16 bytes");

	uint8_t *b1, *b2;
	size_t l1, l2;
	struct ml_graph *g2 = NULL;
	ok(ml_mlg_encode(g, &b1, &l1, &e) == 0, "mlg encodes");
	ok(ml_mlg_decode(&g2, b1, l1, &e) == 0, "mlg decodes");
	ok(g2 != NULL && ml_mlg_encode(g2, &b2, &l2, &e) == 0 && l1 == l2 && memcmp(b1, b2, l1) == 0,
	   "mlg decode -> encode is byte-identical");
	ok(g2 != NULL && strcmp(ml_graph_get_meta(g2, "author"), "test") == 0 &&
	   g2->tensors[ml_graph_find(g2, "x")]->sym[0] != NULL &&
	   strcmp(g2->tensors[ml_graph_find(g2, "x")]->sym[0], "N") == 0,
	   "metadata and symbolic dims survive");
	ml_free(b2);
	ml_graph_free(g2);

	/* failure paths */
	g2 = NULL;
	ok(ml_mlg_decode(&g2, b1, 10, &e) == ML_EFORMAT && g2 == NULL, "a truncated header is refused");
	ok(ml_mlg_decode(&g2, b1, l1 - 5, &e) == ML_EFORMAT, "a truncated frame is refused");
	uint8_t *bad = malloc(l1);
	memcpy(bad, b1, l1);
	bad[0] = 'X';
	ok(ml_mlg_decode(&g2, bad, l1, &e) == ML_EFORMAT && strstr(e.msg, "magic") != NULL,
	   "bad magic is refused");
	memcpy(bad, b1, l1);
	bad[4] = 99;
	ok(ml_mlg_decode(&g2, bad, l1, &e) == ML_EFORMAT && strstr(e.msg, "newer") != NULL,
	   "a newer version is refused with a message");
	memcpy(bad, b1, l1);
	for (size_t i = 24; i < l1; i += 7)
		bad[i] ^= 0x5a;
	int rc = ml_mlg_decode(&g2, bad, l1, &e);
	ok(rc == ML_EFORMAT || rc == ML_EINVAL, "a corrupt frame is refused");
	free(bad);
	ml_free(b1);

	/* a cycle */
	struct ml_graph *c;
	ml_graph_new(&c, &e);
	const char *a[1] = { "a" }, *b[1] = { "b" };
	ml_graph_add_node(c, "Relu", "", "r1", 1, a, 1, b, &e);
	ml_graph_add_node(c, "Relu", "", "r2", 1, b, 1, a, &e);
	ok(ml_graph_toposort(c, &e) == ML_EINVAL && strstr(e.msg, "cycle") != NULL,
	   "a cycle is refused");
	ml_graph_free(c);
	ml_graph_free(g);
}

static void
test_npy(void)
{
	struct ml_err e = { 0 };
	struct ml_tval t = { 0 }, u = { 0 };
	int64_t dims[3] = { 2, 3, 1 };
	ml_tval_alloc(&t, ML_I16, 3, dims, &e);
	for (int i = 0; i < 6; i++)
		((int16_t *)t.data)[i] = (int16_t)(i * 100 - 250);
	uint8_t *buf;
	size_t len;
	ok(ml_npy_encode(&t, &buf, &len, &e) == 0 && (len - 12) % 64 == 0,
	   ".npy encodes with a 64-byte aligned header");
	ok(ml_npy_decode(&u, buf, len, &e) == 0 && u.dtype == ML_I16 && u.rank == 3 &&
	   u.dims[1] == 3 && memcmp(u.data, t.data, 12) == 0, ".npy decodes to the same array");
	ml_tval_clear(&u);
	ok(ml_npy_decode(&u, buf, len - 1, &e) == ML_EFORMAT, "truncated .npy data is refused");
	ok(ml_npy_decode(&u, (const uint8_t *)"hello world", 11, &e) == ML_EFORMAT,
	   "a file that is not .npy is refused");
	ml_free(buf);
	ml_tval_clear(&t);
}

static void
test_cap(void)
{
	struct ml_err e = { 0 };
	struct ml_tval t = { 0 };
	uint64_t old = ml_alloc_cap();
	ml_set_alloc_cap(1 << 20);
	int64_t dims[1] = { 1 << 20 };
	ok(ml_tval_alloc(&t, ML_F32, 1, dims, &e) == ML_ENOMEM, "the allocation cap refuses 4 MiB under a 1 MiB cap");
	ml_set_alloc_cap(old);
	int64_t huge[2] = { INT64_MAX / 2, 4 };
	ok(ml_tval_alloc(&t, ML_F32, 2, huge, &e) == ML_EINVAL, "a size that overflows is refused");
}

static void
test_session(void)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = small_graph();
	struct ml_session *s = NULL;
	if (ml_graph_toposort(g, &e) < 0 || ml_graph_infer(g, &e) < 0 ||
	    ml_opdef_get(ML_OP_MUL) == NULL || ml_cpu_kernel_get(ML_OP_MUL) == NULL ||
	    ml_cpu_kernel_get(ML_OP_RELU) == NULL) {
		ok(false, "session test needs Mul and Relu kernels");
		ml_graph_free(g);
		return;
	}
	ok(ml_session_new(&s, g, NULL, &e) == 0, "a session opens");
	struct ml_tval x = { 0 };
	int64_t dims[2] = { 2, 4 };
	ml_tval_alloc(&x, ML_F32, 2, dims, &e);
	for (int i = 0; i < 8; i++)
		((float *)x.data)[i] = (float)(i - 3);
	ok(ml_session_set_input(s, "x", &x, &e) == 0, "input binds with N = 2");
	ok(ml_session_run(s, &e) == 0, "the session runs");
	const struct ml_tval *y = ml_session_output(s, 0);
	float want[8] = { 0, 0, 0, 0, 1, 4, 9, 16 };
	ok(y->rank == 2 && y->dims[0] == 2 && memcmp(y->data, want, sizeof want) == 0,
	   "y = relu(x * w) is right");
	ok(ml_session_arena_bytes(s) > 0, "the arena is planned");
	int64_t bad[2] = { 2, 5 };
	struct ml_tval z = { 0 };
	ml_tval_alloc(&z, ML_F32, 2, bad, &e);
	ok(ml_session_set_input(s, "x", &z, &e) == ML_EINVAL && strstr(e.msg, "expected") != NULL,
	   "a mismatched input shape is refused");
	ok(ml_session_set_input(s, "nope", &x, &e) == ML_EINVAL, "an unknown input name is refused");
	ml_tval_clear(&x);
	ml_tval_clear(&z);
	ml_session_free(s);
	ml_graph_free(g);
}

/*
 * The executor's shapes and aliases. y = Reshape(-x) + Reshape(|x|): each
 * Reshape's input dies there, so the output takes its block (no copy),
 * and |x| is made while the first alias is live: a plan that let it
 * overwrite that block gives wrong sums. m = Sigmoid(x) is read after
 * its Reshape: no alias there. z = Reshape(x, t) takes its shape from
 * the data of input t, which differs between runs of the same shapes.
 * u = Transpose(Reshape(-x)) [2, N, 3] moves only a dim of size 1 at
 * batch 1 (it shares its input's block then) but not at batch 4.
 * w = x[:, 1:-1] is a Slice whose bounds its node keeps per input shape.
 */
static const char shape_model[] =
	"<ir_version: 8, opset_import: [\"\" : 14]>\n"
	"c (float[N,6] x, int64[2] t) => (float[N,2,3] y, float[N,2,3] v, float[?,?] z, "
	"float[2,N,3] u, float[N,4] w)\n"
	"{\n"
	"    [neg] a = Neg (x)\n"
	"    [ra] r = Reshape (a, k)\n"
	"    [abs] b = Abs (x)\n"
	"    [rb] q = Reshape (b, k)\n"
	"    [add] y = Add (r, q)\n"
	"    [sig] m = Sigmoid (x)\n"
	"    [rm] n = Reshape (m, k)\n"
	"    [sq] o = Mul (m, m)\n"
	"    [ro] p = Reshape (o, k)\n"
	"    [sub] v = Sub (n, p)\n"
	"    [rz] z = Reshape (x, t)\n"
	"    [ne] e = Neg (x)\n"
	"    [rf] f = Reshape (e, k)\n"
	"    [tr] u = Transpose <perm = [1, 0, 2]> (f)\n"
	"    [sl] w = Slice (x, s0, s1, s2)\n"
	"}\n"
	"int64[3] k = {-1, 2, 3}\n"
	"int64[1] s0 = {1}\n"
	"int64[1] s1 = {-1}\n"
	"int64[1] s2 = {1}\n";

/* shape_run: bind x [nb, 6] (x[i] = i - 5) and t, run, check y, v and z [t0, t1]. */
static bool
shape_run(struct ml_session *s, int64_t nb, int64_t t0, int64_t t1)
{
	struct ml_err e = { 0 };
	float xv[4 * 6];
	int64_t tv[2] = { t0, t1 };
	for (int i = 0; i < nb * 6; i++)
		xv[i] = (float)(i - 5);
	struct ml_tval x = { .dtype = ML_F32, .rank = 2, .dims = { nb, 6 }, .data = xv };
	struct ml_tval t = { .dtype = ML_I64, .rank = 1, .dims = { 2 }, .data = tv };
	if (ml_session_set_input(s, "x", &x, &e) < 0 || ml_session_set_input(s, "t", &t, &e) < 0 ||
	    ml_session_run(s, &e) < 0) {
		printf("# %s\n", e.msg);
		return false;
	}
	const struct ml_tval *y = ml_session_output(s, 0), *v = ml_session_output(s, 1);
	const struct ml_tval *z = ml_session_output(s, 2), *u = ml_session_output(s, 3);
	const struct ml_tval *w = ml_session_output(s, 4);
	bool good = y->rank == 3 && y->dims[0] == nb && v->rank == 3 && v->dims[0] == nb &&
		    z->rank == 2 && z->dims[0] == t0 && z->dims[1] == t1 && u->rank == 3 &&
		    u->dims[0] == 2 && u->dims[1] == nb && u->dims[2] == 3 && w->rank == 2 &&
		    w->dims[0] == nb && w->dims[1] == 4;
	for (int i = 0; good && i < nb * 4; i++)
		good = ((const float *)w->data)[i] == xv[i / 4 * 6 + 1 + i % 4];
	for (int i = 0; good && i < nb * 6; i++) {
		float xi = xv[i], sg = 1.0f / (1.0f + expf(-xi));
		good = ((const float *)y->data)[i] == -xi + fabsf(xi) &&
		       fabsf(((const float *)v->data)[i] - (sg - sg * sg)) < 1e-6f &&
		       ((const float *)z->data)[i] == xi;
	}
	for (int i = 0; good && i < nb; i++)
		for (int j = 0; j < 2; j++)
			for (int k = 0; k < 3; k++)
				good = good && ((const float *)u->data)[(j * nb + i) * 3 + k] ==
						       -xv[i * 6 + j * 3 + k];
	return good;
}

static void
test_session_shapes(void)
{
	struct ml_err e = { 0 };
	for (int check = 0; check < 2; check++) {
		struct ml_graph *g = NULL;
		struct ml_session *s = NULL;
		const char *mode = check ? " (ML_CHECK_SHAPES=1)" : "";
		char what[160];
		if (check)
			setenv("ML_CHECK_SHAPES", "1", 1);
		if (ml_text_decode(&g, shape_model, strlen(shape_model), "c.mlt", &e) < 0 ||
		    ml_graph_toposort(g, &e) < 0 || ml_graph_infer(g, &e) < 0 ||
		    ml_session_new(&s, g, NULL, &e) < 0) {
			printf("# %s\n", e.msg);
			ok(false, "the shape model opens");
			ml_graph_free(g);
			return;
		}
		struct ml_tensor_mem mf, mu;
		int tf = ml_graph_find(g, "f"), tu = ml_graph_find(g, "u");
		snprintf(what, sizeof what, "batch 1 runs right%s", mode);
		ok(shape_run(s, 1, 2, 3), what);
		ml_session_tensor_mem(s, tf, &mf);
		ml_session_tensor_mem(s, tu, &mu);
		snprintf(what, sizeof what, "at batch 1 the Transpose shares its input's block%s", mode);
		ok(mf.off >= 0 && mf.off == mu.off, what);
		snprintf(what, sizeof what, "then batch 4 in the same session: shapes inferred again%s",
			 mode);
		ok(shape_run(s, 4, 12, 2), what);
		ml_session_tensor_mem(s, tf, &mf);
		ml_session_tensor_mem(s, tu, &mu);
		snprintf(what, sizeof what, "at batch 4 it does not (it moves data)%s", mode);
		ok(mf.off >= 0 && mu.off >= 0 && mf.off != mu.off, what);
		snprintf(what, sizeof what, "then batch 1 again%s", mode);
		ok(shape_run(s, 1, 2, 3), what);
		snprintf(what, sizeof what,
			 "the same shapes with another Reshape target in t: z follows t's data%s", mode);
		ok(shape_run(s, 1, 3, 2) && shape_run(s, 1, 6, 1), what);
		struct ml_tensor_mem ma, mr, mm, mn;
		ml_session_tensor_mem(s, ml_graph_find(g, "a"), &ma);
		ml_session_tensor_mem(s, ml_graph_find(g, "r"), &mr);
		ml_session_tensor_mem(s, ml_graph_find(g, "m"), &mm);
		ml_session_tensor_mem(s, ml_graph_find(g, "n"), &mn);
		snprintf(what, sizeof what,
			 "a Reshape whose input dies there shares its block, one read later does not%s",
			 mode);
		ok(ma.off >= 0 && ma.off == mr.off && mm.off >= 0 && mn.off >= 0 && mm.off != mn.off,
		   what);
		ml_session_free(s);
		ml_graph_free(g);
	}
	unsetenv("ML_CHECK_SHAPES");
}

int
main(void)
{
	test_dtypes();
	test_graph();
	test_npy();
	test_cap();
	test_session();
	test_session_shapes();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
