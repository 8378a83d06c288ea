/*
 * test_clfused.c: ml.FusedElementwise's generated OpenCL kernels
 * (lib/cl/fused_elem.c) against the CPU kernel (lib/cpu/fused.c). Random
 * chains of every op the node holds, on X of rank 0 to 5 with odd sizes
 * and operands of every broadcast the op allows (scalars, X's shape,
 * leading, trailing and middle blocks, X itself), run in one-node graphs
 * on the CPU and on cl:0; the node must have run on the device and agree
 * elementwise within |cl - cpu| <= 1e-5 (1 + |cpu|), non-finite values
 * exactly. Special values (NaN, infinities, signed zeros, overflow) per
 * op; the kernel cache: a chain builds once per process, whatever its
 * shapes and however many nodes hold it; more operands than the device
 * kernel takes fall back to the CPU; fixed operand shapes take every way
 * the vector kernels read an operand. Prints TAP; skips without an OpenCL
 * device. CLFUSED_CASES=N sets the number of random chains (default 150).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"

static int ntest, nfail;
static bool have_cl;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static const char *const ops[] = {
	"Add", "Sub", "Mul", "Div", "Max", "Min", "Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs",
	"Sqrt", "Erf", "Gelu", "Silu", "Reciprocal",
};
#define NOPS (int)(sizeof ops / sizeof ops[0])
#define NBIN 6		/* ops[0 .. NBIN-1] take a second operand */

static uint64_t
next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int
irand(int n)
{
	return (int)(next() % (uint64_t)n);
}

static double
urand(double lo, double hi)
{
	return lo + (hi - lo) * (double)(next() >> 11) / 9007199254740992.0;
}

static void __attribute__((format(printf, 2, 3)))
ok(bool cond, const char *fmt, ...)
{
	va_list ap;
	ntest++;
	nfail += !cond;
	printf("%sok %d - ", cond ? "" : "not ", ntest);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

/*
 * struct fcase: a graph of FusedElementwise nodes over one input x (and
 * constant operands), built with the public API.
 */
struct fcase {
	struct ml_graph *g;
	struct ml_err e;
	struct ml_tval x;
	int nconst;
};

static void
fc_init(struct fcase *f, int rank, const int64_t *dims, double lo, double hi)
{
	memset(f, 0, sizeof *f);
	ml_graph_new(&f->g, &f->e);
	ml_graph_set_opset(f->g, "", 17, &f->e);
	ml_graph_set_opset(f->g, "ml", 1, &f->e);
	int xi = ml_graph_tensor(f->g, "x");
	struct ml_tensor *t = f->g->tensors[xi];
	t->dtype = ML_F32;
	t->rank = rank;
	t->kind = ML_TK_INPUT;
	memcpy(t->dims, dims, sizeof *dims * (size_t)rank);
	ml_graph_add_input(f->g, xi, &f->e);
	ml_tval_alloc(&f->x, ML_F32, rank, dims, &f->e);
	for (int64_t i = 0; i < ml_tval_numel(&f->x); i++)
		((float *)f->x.data)[i] = (float)urand(lo, hi);
}

/* fc_const: a constant operand of the given shape (values: vals, else random in ±[lo, hi]) */
static void
fc_const(struct fcase *f, char *name, int rank, const int64_t *dims, const float *vals,
	 double lo, double hi)
{
	int64_t n = 1;
	for (int d = 0; d < rank; d++)
		n *= dims[d];
	float *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
	for (int64_t i = 0; i < n; i++)
		v[i] = vals != NULL ? vals[i] : (float)(irand(2) ? urand(lo, hi) : -urand(lo, hi));
	sprintf(name, "c%d", f->nconst++);
	ml_graph_set_data(f->g, ml_graph_tensor(f->g, name), ML_TK_CONST, ML_F32, rank, dims, v,
			  sizeof *v * (size_t)n, &f->e);
	free(v);
}

/* fc_node: a node applying ops op[0..n-1] (args, swap as the op's attributes) to in[] */
static void
fc_node(struct fcase *f, int n_in, const char *const *in, const char *out, int n,
	const int *op, const int64_t *args, const int64_t *swap)
{
	int ni = ml_graph_add_node(f->g, "FusedElementwise", "ml", out, n_in, in, 1, &out, &f->e);
	if (ni < 0)
		return;
	struct ml_attr *a = ml_node_add_attr(f->g, ni, "ops", ML_ATTR_STRINGS);
	char **s = ml_graph_alloc(f->g, sizeof(char *) * (size_t)n);
	for (int k = 0; k < n && s != NULL; k++)
		s[k] = ml_graph_strdup(f->g, ops[op[k]]);
	a->strings = s;
	a->n = n;
	ml_node_set_ints(f->g, ni, "args", n, args);
	ml_node_set_ints(f->g, ni, "swap", n, swap);
	ml_graph_add_output(f->g, ml_graph_find(f->g, out), &f->e);
}

/*
 * run_on: run f's graph on dev; outputs copied into outs[], *on the device
 * each node ran on (all nodes on one: the first; -1 when they differ).
 */
static int
run_on(struct fcase *f, const char *dev, struct ml_tval *outs, int *on,
       struct ml_session_devstats *st, struct ml_err *e)
{
	struct ml_session *s = NULL;
	struct ml_session_opts o = { .device = dev };
	int rc = ml_session_new(&s, f->g, &o, e);
	if (rc == 0)
		rc = ml_session_set_input(s, "x", &f->x, e);
	if (rc == 0)
		rc = ml_session_run(s, e);
	for (int i = 0; rc == 0 && i < f->g->n_outputs; i++) {
		const struct ml_tval *v = ml_session_output(s, i);
		rc = ml_tval_alloc(&outs[i], v->dtype, v->rank, v->dims, e);
		if (rc == 0 && ml_tval_nbytes(v) > 0)
			memcpy(outs[i].data, v->data, (size_t)ml_tval_nbytes(v));
	}
	if (rc == 0) {
		*on = ml_session_node_device(s, 0);
		for (int i = 1; i < f->g->n_nodes; i++)
			if (ml_session_node_device(s, i) != *on)
				*on = -1;
		if (st != NULL)
			ml_session_device_stats(s, st);
	}
	ml_session_free(s);
	return rc;
}

/*
 * compare: a's values against b's within tol elementwise; the worst error
 * into *worst, what differs first into msg. Non-finite values must match.
 */
static bool
compare(const struct ml_tval *a, const struct ml_tval *b, double tol, double *worst, char *msg,
	size_t len)
{
	int64_t n = ml_tval_numel(a);
	if (a->rank != b->rank || n != ml_tval_numel(b)) {
		snprintf(msg, len, "shapes differ");
		return false;
	}
	for (int64_t i = 0; i < n; i++) {
		float x = ((const float *)a->data)[i], y = ((const float *)b->data)[i];
		bool same = isfinite(x) ? isfinite(y) : isnan(x) ? isnan(y) : x == y;
		double err = !same ? INFINITY : isfinite(x) ? fabs((double)x - y) / (1 + fabs(x)) : 0;
		*worst = fmax(*worst, err);
		if (err > tol) {
			snprintf(msg, len, "element %lld: cpu %.9g, cl %.9g", (long long)i, x, y);
			return false;
		}
	}
	return true;
}

/*
 * fc_check: run on the CPU and cl:0 and compare, then free the case. With
 * dev, the nodes must have run on cl:0 and agree within 1e-5; without, the
 * device must have left them to the CPU: its result exactly.
 */
static void
fc_check(struct fcase *f, const char *what, bool dev)
{
	struct ml_tval a[4] = { 0 }, b[4] = { 0 };
	struct ml_err e = { 0 };
	char msg[600] = "";
	double worst = 0;
	int on_cpu, on_cl;
	bool good = false;
	if (!have_cl) {
		ntest++;
		printf("ok %d - %s # SKIP no OpenCL device\n", ntest, what);
		goto out;
	}
	if (f->e.code != 0)
		snprintf(msg, sizeof msg, "building: %s", f->e.msg);
	else if (ml_graph_toposort(f->g, &e) < 0 || ml_graph_validate(f->g, &e) < 0 ||
		 ml_graph_infer(f->g, &e) < 0)
		snprintf(msg, sizeof msg, "graph: %s", e.msg);
	else if (run_on(f, "cpu", a, &on_cpu, NULL, &e) < 0)
		snprintf(msg, sizeof msg, "cpu: %s", e.msg);
	else if (run_on(f, "cl", b, &on_cl, NULL, &e) < 0)
		snprintf(msg, sizeof msg, "cl: %s", e.msg);
	else if (dev && on_cl != 1)
		snprintf(msg, sizeof msg, "the node ran on device %d, not cl:0", on_cl);
	else
		good = true;
	for (int i = 0; good && i < f->g->n_outputs; i++)
		good = compare(&a[i], &b[i], dev ? 1e-5 : 0, &worst, msg, sizeof msg);
	if (good)
		snprintf(msg, sizeof msg, "error %.2g", worst);
	ok(good, "%s (%s)", what, msg);
	for (int i = 0; i < 4; i++) {
		ml_tval_clear(&a[i]);
		ml_tval_clear(&b[i]);
	}
out:
	ml_tval_clear(&f->x);
	ml_graph_free(f->g);
	f->g = NULL;
}

/*
 * bcast_shape: a random shape that broadcasts to y's as one block: the
 * dims of y[lo..hi) (none: a scalar), 1 elsewhere, with fewer leading
 * dims than y at random.
 */
static int
bcast_shape(int r, const int64_t *y, int64_t *dims, char *desc, size_t len)
{
	if (r == 0 || irand(4) == 0) {
		int ra = irand(r + 1);
		for (int d = 0; d < ra; d++)
			dims[d] = 1;
		snprintf(desc, len, "scalar/%d", ra);
		return ra;
	}
	int lo = irand(r), hi = lo + 1 + irand(r - lo);
	if (irand(3) == 0) {
		lo = 0;
		hi = r;
	}
	int first = irand(lo + 1);	/* the operand's rank is r - first */
	char *p = desc;
	for (int d = first; d < r; d++) {
		dims[d - first] = d >= lo && d < hi ? y[d] : 1;
		p += snprintf(p, len - (size_t)(p - desc), "%s%lld", d > first ? "x" : "",
			      (long long)dims[d - first]);
	}
	return r - first;
}

/*
 * random_chain: a case: X of a random rank and odd dims, 0 to 4 constant
 * operands (magnitudes in [0.5, 2]) and a chain of 1 to 12 ops over
 * them. Sqrt reads |v|, Reciprocal and c / v read sigmoid(tanh(v)), and
 * Exp tanh(v): the guards keep the values moderate and well-conditioned
 * (an exp of a large v magnifies the last bit of v), so the bound can stay
 * tight; the special values are special_values' cases.
 */
static void
random_chain(int id, bool *seen)
{
	/* no 1: ml_fused_block takes a 1 inside X's shape for a gap in the block */
	static const int64_t sizes[] = { 2, 3, 5, 7, 13, 17, 31, 64, 100 };
	int64_t dims[5], cd[5];
	int r = irand(6);
	int64_t n = 1;
	for (int d = 0; d < r; d++) {
		dims[d] = sizes[irand((int)(sizeof sizes / sizeof sizes[0]))];
		if (n * dims[d] > 200000)
			dims[d] = 3;
		n *= dims[d];
	}
	struct fcase f;
	fc_init(&f, r, dims, -3, 3);
	char names[6][8], desc[400], *p = desc;
	const char *in[6] = { "x" };
	int nin = 1 + irand(5);
	p += snprintf(p, sizeof desc, "chain %d: x[", id);
	for (int d = 0; d < r; d++)
		p += snprintf(p, sizeof desc - (size_t)(p - desc), "%s%lld", d ? "x" : "",
			      (long long)dims[d]);
	p += snprintf(p, sizeof desc - (size_t)(p - desc), "]");
	for (int j = 1; j < nin; j++) {
		char sd[64];
		if (irand(6) == 0) {
			in[j] = "x";	/* x * sigmoid(x): X itself as an operand */
			snprintf(sd, sizeof sd, "x");
		} else {
			int ra = bcast_shape(r, dims, cd, sd, sizeof sd);
			fc_const(&f, names[j], ra, cd, NULL, 0.5, 2);
			in[j] = names[j];
		}
		p += snprintf(p, sizeof desc - (size_t)(p - desc), " %s", sd);
	}
	int op[16], k = 0, want = 1 + irand(12);	/* k ends below want + 3 */
	int64_t args[16], swap[16];
	while (k < want) {
		int o = irand(NOPS);
		bool bin = o < NBIN;
		if (bin && nin == 1)
			continue;
		int sw = bin ? irand(2) : 0;
		/* Abs; Tanh, Sigmoid; Tanh (op codes: the order of ops[]) */
		static const int g_sqrt[] = { 11, -1 }, g_recip[] = { 8, 7, -1 }, g_exp[] = { 8, -1 };
		const int *guard = strcmp(ops[o], "Sqrt") == 0 ? g_sqrt :
				   strcmp(ops[o], "Reciprocal") == 0 || (o == 3 && sw) ? g_recip :
				   strcmp(ops[o], "Exp") == 0 ? g_exp : NULL;
		for (int q = 0; guard != NULL && guard[q] >= 0; q++) {
			op[k] = guard[q];
			args[k] = -1;
			swap[k++] = 0;
		}
		op[k] = o;
		args[k] = bin ? 1 + irand(nin - 1) : -1;
		swap[k++] = sw;
		seen[o] = true;
	}
	p += snprintf(p, sizeof desc - (size_t)(p - desc), ":");
	for (int q = 0; q < k && p < desc + sizeof desc - 24; q++)
		p += snprintf(p, sizeof desc - (size_t)(p - desc), " %s%s", ops[op[q]],
			      swap[q] ? "'" : "");
	fc_node(&f, nin, in, "y", k, op, args, swap);
	fc_check(&f, desc, true);
}

/*
 * geometry: one chain over operands chosen to take each way the kernel
 * reads an operand, with 16, 8, 4 or 1 elements per work-item (the size
 * of X picks it): vector loads, one element for all lanes, blocks and rows
 * that the lanes of one work-item cross (longer and shorter than it).
 */
static void
geometry(void)
{
	static const struct {
		int r;
		int64_t x[4];
		int64_t op[4][5];	/* per operand: rank, dims */
	} cases[] = {
		{ 4, { 2, 3, 5, 8 }, { { 3, 3, 1, 1 }, { 2, 5, 1 }, { 1, 8 }, { 4, 2, 1, 1, 1 } } },
		{ 4, { 2, 3, 5, 24 }, { { 1, 24 }, { 4, 2, 1, 1, 1 }, { 3, 3, 5, 1 }, { 1, 1 } } },
		{ 3, { 4, 6, 40 }, { { 2, 6, 1 }, { 1, 40 }, { 3, 4, 1, 1 }, { 2, 6, 40 } } },
		{ 3, { 3, 7, 9 }, { { 2, 7, 1 }, { 1, 9 }, { 3, 3, 1, 1 }, { 0 } } },
		{ 3, { 2, 50, 50 }, { { 2, 50, 1 }, { 1, 50 }, { 3, 2, 1, 1 }, { 2, 50, 50 } } },
		{ 2, { 6, 2 }, { { 1, 2 }, { 2, 6, 1 }, { 1, 1 }, { 2, 6, 2 } } },
		{ 3, { 3, 4, 32 }, { { 2, 4, 1 }, { 1, 32 }, { 3, 3, 1, 1 }, { 1, 1 } } },
		/*
		 * the same chain on rows of 16 then 20: vw (16 or 8) divides the first,
		 * not the second, so the two need kernels of their own (the cache once
		 * gave the second the first's: wrong from the row's first boundary)
		 */
		{ 2, { 4, 16 }, { { 2, 4, 1 }, { 1, 16 }, { 0 }, { 0 } } },
		{ 2, { 4, 20 }, { { 2, 4, 1 }, { 1, 20 }, { 0 }, { 0 } } },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct fcase f;
		char names[4][8], what[200], *p = what;
		const char *in[5] = { "x" };
		p += sprintf(p, "x[%lld", (long long)cases[i].x[0]);
		for (int d = 1; d < cases[i].r; d++)
			p += sprintf(p, "x%lld", (long long)cases[i].x[d]);
		p += sprintf(p, "], operands");
		fc_init(&f, cases[i].r, cases[i].x, -3, 3);
		for (int j = 0; j < 4; j++) {
			const int64_t *o = cases[i].op[j];
			fc_const(&f, names[j], (int)o[0], o + 1, NULL, 0.5, 2);
			in[j + 1] = names[j];
			p += sprintf(p, " [");
			for (int d = 0; d < o[0]; d++)
				p += sprintf(p, "%s%lld", d ? "x" : "", (long long)o[1 + d]);
			p += sprintf(p, "]");
		}
		/* Mul(v, b1) Sigmoid Add(v, b2) Sub(b3, v) Max(v, b4) */
		int op[5] = { 2, 7, 0, 1, 4 };
		int64_t args[5] = { 1, -1, 2, 3, 4 }, swap[5] = { 0, 0, 0, 1, 0 };
		fc_node(&f, 5, in, "y", 5, op, args, swap);
		fc_check(&f, what, true);
	}
}

/* special: each op on NaN, infinities, zeros of both signs, huge and tiny values */
static void
special_values(void)
{
	static const float v[] = { NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 3e38f,
				   -3e38f, 88.0f, 89.0f, -88.0f, -104.0f, 1e-30f, -1e-30f, 20.0f,
				   -20.0f, 7.5f, -7.5f };
	enum { NV = sizeof v / sizeof v[0] };
	for (int o = 0; o < NOPS; o++) {
		for (int sw = 0; sw < (o < NBIN ? 2 : 1); sw++) {
			/* x takes every value against every value of the operand */
			int64_t xd[2] = { NV, NV }, cd[1] = { NV };
			struct fcase f;
			char name[8], what[80];
			fc_init(&f, 2, xd, 0, 0);
			for (int i = 0; i < NV * NV; i++)
				((float *)f.x.data)[i] = v[i / NV];
			const char *in[2] = { "x", name };
			int op[1] = { o };
			int64_t args[1] = { o < NBIN ? 1 : -1 }, swap[1] = { sw };
			if (o < NBIN)
				fc_const(&f, name, 1, cd, v, 0, 0);
			fc_node(&f, o < NBIN ? 2 : 1, in, "y", 1, op, args, swap);
			snprintf(what, sizeof what, "%s%s on special values", ops[o],
				 sw ? " swapped" : "");
			fc_check(&f, what, true);
		}
	}
}

/*
 * reuse_graph: x [4,6,10]; y1 = chain(x), y2 = chain(Reshape(x, [24,10])),
 * y3 = chain(y1), where chain is Mul(v, b) Sigmoid Add(v, s) (op2 instead
 * of Sigmoid when not -1), b of shape bd (rank br) and s a scalar.
 */
static void
reuse_graph(struct fcase *f, int br, const int64_t *bd, int op2)
{
	static const int64_t xd[3] = { 4, 6, 10 }, shape[2] = { 24, 10 }, two[1] = { 2 };
	char b[8], s[8];
	fc_init(f, 3, xd, -1, 1);
	fc_const(f, b, br, bd, NULL, 0.5, 2);
	fc_const(f, s, 0, NULL, NULL, 0.5, 2);
	ml_graph_set_data(f->g, ml_graph_tensor(f->g, "shape"), ML_TK_CONST, ML_I64, 1, two, shape,
			  sizeof shape, &f->e);
	const char *rin[2] = { "x", "shape" }, *rout[1] = { "x2" };
	ml_graph_add_node(f->g, "Reshape", "", "r", 2, rin, 1, rout, &f->e);
	int op[3] = { 2, op2 >= 0 ? op2 : 7, 0 };
	int64_t args[3] = { 1, -1, 2 }, swap[3] = { 0, 0, 0 };
	const char *in1[3] = { "x", b, s }, *in2[3] = { "x2", b, s }, *in3[3] = { "y1", b, s };
	fc_node(f, 3, in1, "y1", 3, op, args, swap);
	fc_node(f, 3, in2, "y2", 3, op, args, swap);
	fc_node(f, 3, in3, "y3", 3, op, args, swap);
}

/* programs: the programs cl:0 has built so far, after running f there (and on the CPU) */
static int
programs(struct fcase *f, char *msg, size_t len)
{
	struct ml_tval a[4] = { 0 }, b[4] = { 0 };
	struct ml_session_devstats st = { 0 };
	struct ml_err e = { 0 };
	double worst = 0;
	int on = -1, dummy, rc = f->e.code != 0 ? f->e.code : ml_graph_toposort(f->g, &e);
	if (rc == 0 && (rc = ml_graph_infer(f->g, &e)) == 0 &&
	    (rc = run_on(f, "cpu", a, &dummy, NULL, &e)) == 0)
		rc = run_on(f, "cl", b, &on, &st, &e);
	if (rc < 0)
		snprintf(msg, len, "%s", f->e.code != 0 ? f->e.msg : e.msg);
	else if (on != 1)
		snprintf(msg, len, "a node ran on device %d", on);
	for (int i = 0; rc == 0 && on == 1 && i < f->g->n_outputs; i++)
		if (!compare(&a[i], &b[i], 1e-5, &worst, msg, len))
			on = -1;
	for (int i = 0; i < 4; i++) {
		ml_tval_clear(&a[i]);
		ml_tval_clear(&b[i]);
	}
	ml_tval_clear(&f->x);
	ml_graph_free(f->g);
	f->g = NULL;
	return rc == 0 && on == 1 ? st.n_built + st.n_cached : -1;
}

/*
 * reuse: the three nodes of reuse_graph, on two shapes, build one program
 * (this runs before any other case; a program loaded from the disk
 * cache counts as one built); a second session builds none; b of another broadcast ([1]:
 * another indexing) or another op each build one more.
 */
static void
reuse(void)
{
	static const int64_t b10[1] = { 10 }, b1[1] = { 1 };
	if (!have_cl) {
		ntest++;
		printf("ok %d - one program per distinct chain # SKIP no OpenCL device\n", ntest);
		return;
	}
	struct fcase f;
	char msg[600] = "";
	int p[4];
	reuse_graph(&f, 1, b10, -1);
	p[0] = programs(&f, msg, sizeof msg);
	reuse_graph(&f, 1, b10, -1);
	p[1] = programs(&f, msg, sizeof msg);
	reuse_graph(&f, 1, b1, -1);
	p[2] = programs(&f, msg, sizeof msg);
	reuse_graph(&f, 1, b10, 8);
	p[3] = programs(&f, msg, sizeof msg);
	ok(p[0] == 1 && p[1] == 1 && p[2] == 2 && p[3] == 3,
	   "one program per distinct chain: 1, 1, 2, 3 after each graph, got %d, %d, %d, %d%s%s",
	   p[0], p[1], p[2], p[3], msg[0] ? ": " : "", msg);
}

/*
 * many_operands: a chain over 40 operands, more than the device kernel
 * takes: cl:0 refuses it at run time and the node runs on the CPU, with
 * the CPU's result to the bit (the Tanh steps would differ by an ulp or
 * so on the device).
 */
static void
many_operands(void)
{
	static const int64_t xd[2] = { 3, 5 };
	struct fcase f;
	char names[40][8];
	const char *in[41] = { "x" };
	int op[60], k = 0;
	int64_t args[60], swap[60];
	fc_init(&f, 2, xd, -1, 1);
	for (int j = 1; j <= 40; j++) {
		fc_const(&f, names[j - 1], 2, xd, NULL, 0.5, 2);
		in[j] = names[j - 1];
		op[k] = j % 3;
		args[k] = j;
		swap[k++] = j % 2;
		if (j % 2 == 0) {
			op[k] = 8;
			args[k] = -1;
			swap[k++] = 0;
		}
	}
	fc_node(&f, 41, in, "y", k, op, args, swap);
	fc_check(&f, "a chain of 40 operands runs on the CPU (more than the device kernel takes)",
		 false);
}

int
main(void)
{
	struct ml_device_info *v;
	struct ml_err e = { 0 };
	int n = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (ml_devices(&v, &n, &e) == 0) {
		have_cl = n > 1;
		ml_free(v);
	}
	reuse();
	many_operands();
	geometry();
	bool seen[NOPS] = { false };
	const char *nc = getenv("CLFUSED_CASES");
	int cases = nc != NULL ? atoi(nc) : 150;
	for (int i = 0; i < cases; i++)
		random_chain(i, seen);
	int unseen = 0;
	for (int o = 0; o < NOPS; o++)
		unseen += !seen[o];
	ok(cases < 100 || unseen == 0, "the random chains held every op (%d missing)", unseen);
	special_values();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
