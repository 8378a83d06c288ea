/*
 * test_text.c: C unit tests of the .mlt text form: round trips of a graph
 * that uses every field of the IR, the layer shorthands and the shapes of
 * their parameters, error messages with line and column for malformed
 * text, and mutated inputs that must fail cleanly. Prints TAP.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml_impl.h"

static int ntest, nfail;

static void
ok(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
ok(bool cond, const char *fmt, ...)
{
	va_list ap;
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - ", cond ? "" : "not ", ntest);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/*
 * Semantic comparison of two graphs: tensors are matched by name, since a
 * reader may number them differently; everything else must be equal bit
 * for bit. why receives the first difference.
 */
static char why[512];

#define DIFF(...) do { snprintf(why, sizeof why, __VA_ARGS__); return false; } while (0)

static bool
str_eq(const char *a, const char *b)
{
	return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

static bool graph_eq(const struct ml_graph *a, const struct ml_graph *b, int depth);

static bool
tensor_eq(const struct ml_tensor *x, const struct ml_tensor *y)
{
	if (!str_eq(x->name, y->name))
		DIFF("tensor names %s / %s", x->name, y->name);
	if (x->dtype != y->dtype || x->rank != y->rank || x->kind != y->kind)
		DIFF("tensor '%s': dtype %d/%d rank %d/%d kind %d/%d", x->name, x->dtype, y->dtype,
		     x->rank, y->rank, x->kind, y->kind);
	for (int i = 0; i < x->rank; i++) {
		if (x->dims[i] != y->dims[i])
			DIFF("tensor '%s': dim %d", x->name, i);
		if ((x->sym[i] == NULL) != (y->sym[i] == NULL) ||
		    (x->sym[i] != NULL && strcmp(x->sym[i], y->sym[i]) != 0))
			DIFF("tensor '%s': sym %d", x->name, i);
	}
	if ((x->data == NULL) != (y->data == NULL) || x->nbytes != y->nbytes ||
	    (x->data != NULL && memcmp(x->data, y->data, x->nbytes) != 0))
		DIFF("tensor '%s': data", x->name);
	if (x->device != y->device || x->arena_off != y->arena_off)
		DIFF("tensor '%s': device or arena_off", x->name);
	if ((x->doc == NULL) != (y->doc == NULL) || (x->doc != NULL && strcmp(x->doc, y->doc)))
		DIFF("tensor '%s': doc", x->name);
	if ((x->q == NULL) != (y->q == NULL))
		DIFF("tensor '%s': q", x->name);
	if (x->q != NULL && (x->q->qtype != y->q->qtype || x->q->axis != y->q->axis ||
			     x->q->n != y->q->n ||
			     memcmp(x->q->scale, y->q->scale, sizeof(float) * (size_t)x->q->n) ||
			     memcmp(x->q->zero, y->q->zero, sizeof(int32_t) * (size_t)x->q->n)))
		DIFF("tensor '%s': q fields", x->name);
	return true;
}

static bool
attr_eq(const struct ml_attr *x, const struct ml_attr *y, int depth)
{
	if (!str_eq(x->name, y->name) || x->type != y->type)
		DIFF("attribute %s/%s type %d/%d", x->name, y->name, x->type, y->type);
	switch (x->type) {
	case ML_ATTR_INT:
		if (x->i != y->i)
			DIFF("attribute %s: int", x->name);
		return true;
	case ML_ATTR_FLOAT:
		if (memcmp(&x->f, &y->f, sizeof x->f) != 0)
			DIFF("attribute %s: float %a / %a", x->name, x->f, y->f);
		return true;
	case ML_ATTR_STRING:
		if (x->s_len != y->s_len || memcmp(x->s, y->s, x->s_len) != 0)
			DIFF("attribute %s: string", x->name);
		return true;
	default:
		break;
	}
	int n = x->type == ML_ATTR_TENSOR || x->type == ML_ATTR_GRAPH ? 1 : x->n;
	if (x->n != y->n && !(x->type == ML_ATTR_TENSOR || x->type == ML_ATTR_GRAPH))
		DIFF("attribute %s: %d / %d values", x->name, x->n, y->n);
	for (int i = 0; i < n; i++) {
		switch (x->type) {
		case ML_ATTR_INTS:
			if (x->ints[i] != y->ints[i])
				DIFF("attribute %s: ints[%d]", x->name, i);
			break;
		case ML_ATTR_FLOATS:
			if (memcmp(&x->floats[i], &y->floats[i], sizeof(double)) != 0)
				DIFF("attribute %s: floats[%d]", x->name, i);
			break;
		case ML_ATTR_STRINGS:
			if (strcmp(x->strings[i], y->strings[i]) != 0)
				DIFF("attribute %s: strings[%d]", x->name, i);
			break;
		case ML_ATTR_TENSOR: case ML_ATTR_TENSORS:
			if (!tensor_eq(x->tensors[i], y->tensors[i]))
				return false;
			break;
		default:
			if (!graph_eq(x->graphs[i], y->graphs[i], depth + 1))
				return false;
			break;
		}
	}
	return true;
}

static const char *
tn(const struct ml_graph *g, int i)
{
	return i < 0 ? "" : g->tensors[i]->name;
}

static bool
graph_eq(const struct ml_graph *a, const struct ml_graph *b, int depth)
{
	if (!str_eq(a->name, b->name) || !str_eq(a->producer, b->producer))
		DIFF("graph name or producer (depth %d)", depth);
	if (a->ir_version != b->ir_version || a->arena_bytes != b->arena_bytes)
		DIFF("ir_version %lld/%lld or arena_bytes (depth %d)", (long long)a->ir_version,
		     (long long)b->ir_version, depth);
	if (a->n_opsets != b->n_opsets)
		DIFF("opset count %d/%d (depth %d)", a->n_opsets, b->n_opsets, depth);
	for (int i = 0; i < a->n_opsets; i++)
		if (strcmp(a->opset_domain[i], b->opset_domain[i]) ||
		    a->opset_version[i] != b->opset_version[i])
			DIFF("opset %d", i);
	if (a->n_meta != b->n_meta)
		DIFF("meta count");
	for (int i = 0; i < a->n_meta; i++)
		if (strcmp(a->meta[i].key, b->meta[i].key) || !str_eq(a->meta[i].value, b->meta[i].value))
			DIFF("meta %d", i);
	if (a->n_tensors != b->n_tensors)
		DIFF("tensor count %d/%d (depth %d)", a->n_tensors, b->n_tensors, depth);
	for (int i = 0; i < a->n_tensors; i++) {
		int j = ml_graph_find(b, a->tensors[i]->name);
		if (j < 0)
			DIFF("tensor '%s' is missing", a->tensors[i]->name);
		if (!tensor_eq(a->tensors[i], b->tensors[j]))
			return false;
	}
	if (a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs)
		DIFF("input or output count");
	for (int i = 0; i < a->n_inputs; i++)
		if (strcmp(tn(a, a->inputs[i]), tn(b, b->inputs[i])))
			DIFF("input %d", i);
	for (int i = 0; i < a->n_outputs; i++)
		if (strcmp(tn(a, a->outputs[i]), tn(b, b->outputs[i])))
			DIFF("output %d", i);
	if (a->n_nodes != b->n_nodes)
		DIFF("node count %d/%d", a->n_nodes, b->n_nodes);
	for (int i = 0; i < a->n_nodes; i++) {
		const struct ml_node *x = &a->nodes[i], *y = &b->nodes[i];
		if (!str_eq(x->name, y->name) || strcmp(x->op_type, y->op_type) ||
		    strcmp(x->domain, y->domain) || x->op != y->op || x->n_in != y->n_in ||
		    x->n_out != y->n_out || x->n_attr != y->n_attr || x->device != y->device ||
		    memcmp(&x->cost_us, &y->cost_us, sizeof x->cost_us) != 0)
			DIFF("node %d ('%s' / '%s')", i, x->name, y->name);
		for (int j = 0; j < x->n_in; j++)
			if (strcmp(tn(a, x->in[j]), tn(b, y->in[j])))
				DIFF("node %d input %d", i, j);
		for (int j = 0; j < x->n_out; j++)
			if (strcmp(tn(a, x->out[j]), tn(b, y->out[j])))
				DIFF("node %d output %d", i, j);
		for (int j = 0; j < x->n_attr; j++)
			if (!attr_eq(&x->attrs[j], &y->attrs[j], depth))
				return false;
	}
	if ((a->train == NULL) != (b->train == NULL))
		DIFF("training state");
	if (a->train != NULL) {
		const struct ml_train *x = a->train, *y = b->train;
		if (x->step != y->step || x->epoch != y->epoch || !str_eq(x->optimizer, y->optimizer) ||
		    !str_eq(x->config, y->config) || x->rng_len != y->rng_len ||
		    (x->rng_len && memcmp(x->rng, y->rng, x->rng_len)) || x->n_slots != y->n_slots)
			DIFF("training fields");
		for (int i = 0; i < x->n_slots; i++)
			if (strcmp(tn(a, x->slots[i]), tn(b, y->slots[i])))
				DIFF("training slot %d", i);
	}
	return true;
}

/*
 * A graph that uses every field the text form must keep.
 */
static int
tensor_with(struct ml_graph *g, const char *name, enum ml_tkind kind, enum ml_dtype dt, int rank,
	    const int64_t *dims, const void *data, size_t nbytes)
{
	struct ml_err e = { 0 };
	int ti = ml_graph_tensor(g, name);
	if (ti < 0 || ml_graph_set_data(g, ti, kind, dt, rank, dims, data, nbytes, &e) < 0) {
		fprintf(stderr, "tensor_with %s: %s\n", name, e.msg);
		exit(2);
	}
	return ti;
}

static struct ml_graph *
sub_graph(struct ml_graph *parent, const char *name, float v)
{
	struct ml_err e = { 0 };
	struct ml_graph *s;
	ml_graph_new(&s, &e);
	s->parent = parent;
	s->name = ml_graph_strdup(s, name);
	s->ir_version = name[0] == 't' ? 3 : 0;
	int64_t d1[1] = { 2 };
	float c[2] = { v, -v };
	tensor_with(s, "c", ML_TK_CONST, ML_F32, 1, d1, c, sizeof c);
	int y = ml_graph_tensor(s, "out");
	s->tensors[y]->dtype = ML_F32;
	s->tensors[y]->rank = 1;
	s->tensors[y]->dims[0] = 2;
	const char *in[2] = { "c", "outer_x" }, *out[1] = { "out" };
	ml_graph_add_node(s, "Add", "", "add", 2, in, 1, out, &e);
	ml_graph_add_output(s, y, &e);
	return s;
}

static struct ml_graph *
rich_graph(void)
{
	struct ml_err e = { 0 };
	struct ml_graph *g;
	ml_graph_new(&g, &e);
	g->name = ml_graph_strdup(g, "rich graph");
	g->producer = ml_graph_strdup(g, "test_text \"quoted\"");
	g->ir_version = 8;
	g->arena_bytes = 4096;
	ml_graph_set_opset(g, "", 13, &e);
	ml_graph_set_opset(g, "ml", 1, &e);
	ml_graph_set_opset(g, "com.example", 2, &e);
	ml_graph_set_meta(g, "author", "me\nmyself\t\"I\"", &e);
	ml_graph_set_meta(g, "utf8", "gr\xc3\xbc\xc3\x9f", &e);

	/* inputs: symbolic, named-and-sized, unknown, unknown rank */
	int x = ml_graph_tensor(g, "x");
	struct ml_tensor *t = g->tensors[x];
	t->dtype = ML_F32;
	t->rank = 4;
	t->dims[0] = -1;
	t->sym[0] = ml_graph_strdup(g, "N");
	t->dims[1] = 3;
	t->dims[2] = 5;
	t->sym[2] = ml_graph_strdup(g, "H");
	t->dims[3] = -1;
	t->doc = ml_graph_strdup(g, "the image, \\ and \x01");
	ml_graph_add_input(g, x, &e);
	int u = ml_graph_tensor(g, "onnx::Unknown_7");
	g->tensors[u]->dtype = ML_I64;
	ml_graph_add_input(g, u, &e);
	int nt = ml_graph_tensor(g, "untyped");
	ml_graph_add_input(g, nt, &e);
	/* an input with data, ONNX's old style */
	int64_t d2[1] = { 2 };
	int64_t iv[2] = { INT64_MIN, INT64_MAX };
	int wi = tensor_with(g, "with_default", ML_TK_CONST, ML_I64, 1, d2, iv, sizeof iv);
	ml_graph_add_input(g, wi, &e);

	/* data of every kind: floats with NaN payloads, -0, inf, subnormals */
	float f[40];
	for (int i = 0; i < 40; i++)
		f[i] = (float)sin(i * 1.7) * powf(10, (float)(i % 7) - 3);
	uint32_t nanbits = 0x7fc01234u, nan2 = 0x7fc00000u;
	memcpy(&f[3], &nanbits, 4);
	f[4] = -0.0f;
	f[5] = INFINITY;
	f[6] = 1e-45f;
	int64_t d40[2] = { 5, 8 };
	tensor_with(g, "big.weight", ML_TK_PARAM, ML_F32, 2, d40, f, sizeof f);
	float small[4] = { 0.1f, -0.0f, -INFINITY, 3e38f };
	memcpy(&small[0], &nan2, 4);
	int64_t d4[1] = { 4 };
	tensor_with(g, "small", ML_TK_CONST, ML_F32, 1, d4, small, sizeof small);
	float small2[3] = { 0.1f, 1e-45f, 16777216.0f };
	int64_t d3[1] = { 3 };
	tensor_with(g, "small2", ML_TK_PARAM, ML_F32, 1, d3, small2, sizeof small2);
	double dd[3] = { 0.1, 1.0 / 3, -1e-310 };
	tensor_with(g, "dbl", ML_TK_CONST, ML_F64, 1, d3, dd, sizeof dd);
	uint16_t hh[3] = { 0x3c00, 0x0001, 0x7e01 };	/* 1, smallest subnormal, a NaN */
	tensor_with(g, "half", ML_TK_CONST, ML_F16, 1, d3, hh, sizeof hh);
	uint16_t bb[3] = { 0x3f80, 0xc049, 0x0001 };
	tensor_with(g, "bf", ML_TK_CONST, ML_BF16, 1, d3, bb, sizeof bb);
	int8_t i8[3] = { -128, 0, 127 };
	tensor_with(g, "i8", ML_TK_CONST, ML_I8, 1, d3, i8, sizeof i8);
	uint64_t u64[2] = { 0, UINT64_MAX };
	tensor_with(g, "u64", ML_TK_CONST, ML_U64, 1, d2, u64, sizeof u64);
	uint8_t bo[3] = { 1, 0, 2 };	/* 2 is not a bool a literal can write */
	tensor_with(g, "bools", ML_TK_CONST, ML_BOOL, 1, d3, bo, sizeof bo);
	float cx[4] = { 1, 2, 3, 4 };
	tensor_with(g, "cplx", ML_TK_CONST, ML_C64, 1, d2, cx, sizeof cx);
	int32_t sc = 7;
	tensor_with(g, "scalar", ML_TK_CONST, ML_I32, 0, NULL, &sc, sizeof sc);
	int64_t d0[2] = { 0, 3 };
	tensor_with(g, "empty", ML_TK_CONST, ML_F32, 2, d0, NULL, 0);
	int qt = tensor_with(g, "float", ML_TK_CONST, ML_I8, 1, d3, i8, sizeof i8);
	struct ml_qparam *q = ml_graph_alloc(g, sizeof *q);
	q->qtype = ML_I8;
	q->axis = 0;
	q->n = 3;
	q->scale = ml_graph_alloc(g, 3 * sizeof(float));
	q->zero = ml_graph_alloc(g, 3 * sizeof(int32_t));
	q->scale[0] = 0.5f;
	q->scale[1] = 0.1f;
	q->scale[2] = 1e-30f;
	q->zero[0] = -3;
	q->zero[2] = 100;
	g->tensors[qt]->q = q;
	g->tensors[qt]->device = 0;
	g->tensors[qt]->arena_off = 128;
	/* a large random tensor, for base64 on many lines */
	static uint8_t rnd[3000];
	uint64_t s = 1;
	for (size_t i = 0; i < sizeof rnd; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		rnd[i] = (uint8_t)(s >> 56);
	}
	int64_t d750[1] = { 750 };
	tensor_with(g, "rnd", ML_TK_PARAM, ML_F32, 1, d750, rnd, sizeof rnd);
	/* an optimizer slot nothing uses, and a typed value nothing uses */
	tensor_with(g, "adam.m.big", ML_TK_CONST, ML_F32, 2, d40, NULL, sizeof f);
	int lone = ml_graph_tensor(g, "lonely");
	g->tensors[lone]->dtype = ML_BOOL;
	g->tensors[lone]->rank = 0;
	ml_graph_tensor(g, "orphan");

	/* nodes: quoting, domains, omitted inputs, attributes of every type */
	const char *in1[4] = { "x", "", "big.weight", "" }, *out1[2] = { "h", "" };
	int n1 = ml_graph_add_node(g, "Conv", "", "/features/0/Conv", 4, in1, 2, out1, &e);
	g->nodes[n1].device = 1;
	g->nodes[n1].cost_us = 12.345678901234;
	int64_t ks[2] = { 3, 3 };
	ml_node_set_ints(g, n1, "kernel_shape", 2, ks);
	ml_node_set_ints(g, n1, "empty_ints", 0, NULL);
	ml_node_set_floats(g, n1, "empty_floats", 0, NULL);
	ml_node_set_float(g, n1, "alpha", 0.1);	/* not float32-exact: hexadecimal */
	ml_node_set_float(g, n1, "beta", (double)0.1f);
	ml_node_set_float(g, n1, "gamma", 2.0);
	ml_node_set_float(g, n1, "neg_zero", -0.0);
	ml_node_set_float(g, n1, "inf", INFINITY);
	double fl[3] = { 1, 0.25, 1e300 };
	ml_node_set_floats(g, n1, "floats", 3, fl);
	ml_node_set_int(g, n1, "big", INT64_MIN);
	struct ml_attr *a = ml_node_add_attr(g, n1, "bytes", ML_ATTR_STRING);
	a->s = ml_graph_alloc(g, 5);
	memcpy(a->s, "a\0b\"", 4);
	a->s_len = 4;
	a = ml_node_add_attr(g, n1, "strs", ML_ATTR_STRINGS);
	a->n = 2;
	a->strings = ml_graph_alloc(g, 2 * sizeof(char *));
	a->strings[0] = ml_graph_strdup(g, "SAME_UPPER");
	a->strings[1] = ml_graph_strdup(g, "no");	/* "" trips mlg.c, see the report */
	a = ml_node_add_attr(g, n1, "value", ML_ATTR_TENSOR);
	a->n = 1;
	a->tensors = ml_graph_alloc(g, sizeof(struct ml_tensor *));
	struct ml_tensor *at = ml_graph_alloc(g, sizeof *at);
	at->name = ml_graph_strdup(g, "");
	at->dtype = ML_F32;
	at->rank = 1;
	at->dims[0] = 2;
	at->kind = ML_TK_CONST;
	at->data = ml_graph_alloc(g, 8);
	memcpy(at->data, small2, 8);
	at->nbytes = 8;
	at->device = -1;
	at->arena_off = -1;
	a->tensors[0] = at;
	a = ml_node_add_attr(g, n1, "tlist", ML_ATTR_TENSORS);
	a->n = 2;
	a->tensors = ml_graph_alloc(g, 2 * sizeof(struct ml_tensor *));
	for (int k = 0; k < 2; k++) {
		struct ml_tensor *tt = ml_graph_alloc(g, sizeof *tt);
		tt->name = ml_graph_strdup(g, k ? "named" : "param");
		tt->dtype = k ? ML_UNDEF : ML_I32;
		tt->rank = k ? -1 : 0;
		tt->kind = k ? ML_TK_ACT : ML_TK_PARAM;
		tt->device = -1;
		tt->arena_off = k ? 64 : -1;
		if (!k) {
			tt->data = ml_graph_alloc(g, 4);
			memcpy(tt->data, &sc, 4);
			tt->nbytes = 4;
		}
		a->tensors[k] = tt;
	}
	const char *in2[1] = { "h" }, *out2[1] = { "y" };
	int n2 = ml_graph_add_node(g, "If", "", "", 1, in2, 1, out2, &e);
	a = ml_node_add_attr(g, n2, "then_branch", ML_ATTR_GRAPH);
	a->n = 1;
	a->graphs = ml_graph_alloc(g, sizeof(struct ml_graph *));
	a->graphs[0] = sub_graph(g, "then", 1.5f);
	a = ml_node_add_attr(g, n2, "branches", ML_ATTR_GRAPHS);
	a->n = 2;
	a->graphs = ml_graph_alloc(g, 2 * sizeof(struct ml_graph *));
	a->graphs[0] = sub_graph(g, "b0", 2);
	a->graphs[1] = sub_graph(g, "", 3);
	const char *in3[3] = { "y", "small", "scalar" }, *out3[1] = { "z" };
	ml_graph_add_node(g, "Gelu", "ml", "gelu", 3, in3, 1, out3, &e);
	const char *in4[2] = { "z", "dbl" }, *out4[2] = { "w", "w2" };
	ml_graph_add_node(g, "My Op", "com.example", "odd", 2, in4, 2, out4, &e);
	const char *in5[8] = { "w", "half", "bf", "i8", "u64", "bools", "cplx", "empty" };
	const char *out5[1] = { "flatten" };
	ml_graph_add_node(g, "dense", "", "", 8, in5, 1, out5, &e);
	const char *in6[4] = { "flatten", "float", "rnd", "small2" }, *out6[1] = { "out" };
	ml_graph_add_node(g, "Sum", "", "sum", 4, in6, 1, out6, &e);
	const char *in7[1] = { "out" };
	ml_graph_add_node(g, "Print", "com.example", "sink", 1, in7, 0, NULL, &e);
	int hh2 = ml_graph_find(g, "h");
	g->tensors[hh2]->dtype = ML_F32;
	g->tensors[hh2]->rank = 2;
	g->tensors[hh2]->dims[0] = -1;
	g->tensors[hh2]->dims[1] = 8;
	ml_graph_add_output(g, ml_graph_find(g, "out"), &e);
	ml_graph_add_output(g, x, &e);	/* an input that is also an output */
	ml_graph_add_output(g, ml_graph_find(g, "out"), &e);

	struct ml_train *tr = ml_graph_alloc(g, sizeof *tr);
	tr->step = UINT64_MAX;
	tr->epoch = 3;
	tr->optimizer = ml_graph_strdup(g, "adam");
	tr->config = ml_graph_strdup(g, "{\"lr\": 0.001}");
	tr->rng_len = 5;
	tr->rng = ml_graph_alloc(g, 5);
	memcpy(tr->rng, "\x00\xff\x10\x20\x30", 5);
	tr->n_slots = 2;
	tr->slots = ml_graph_alloc(g, 2 * sizeof(int));
	tr->slots[0] = ml_graph_find(g, "adam.m.big");
	tr->slots[1] = ml_graph_find(g, "orphan");
	g->train = tr;
	return g;
}

static char *
encode(const struct ml_graph *g, size_t *len)
{
	struct ml_err e = { 0 };
	char *t = NULL;
	if (ml_text_encode(g, &t, len, &e) < 0) {
		printf("# encode: %s\n", e.msg);
		return NULL;
	}
	return t;
}

static struct ml_graph *
decode(const char *text, size_t len, struct ml_err *e)
{
	struct ml_graph *g = NULL;
	if (ml_text_decode(&g, text, len, "t.mlt", e) < 0)
		return NULL;
	return g;
}

static void
test_round_trip(void)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = rich_graph();
	size_t l1, l2;
	char *t1 = encode(g, &l1);
	ok(t1 != NULL, "encode a graph that uses every field");
	if (t1 == NULL)
		return;
	if (getenv("TEST_TEXT_SHOW") != NULL)
		fwrite(t1, 1, l1, stderr);
	struct ml_graph *g2 = decode(t1, l1, &e);
	ok(g2 != NULL, "decode it back%s%s", g2 ? "" : ": ", g2 ? "" : e.msg);
	if (g2 == NULL)
		return;
	bool same = graph_eq(g, g2, 0);
	ok(same, "graph -> text -> graph keeps every field%s%s", same ? "" : ": ", same ? "" : why);
	char *t2 = encode(g2, &l2);
	ok(t2 != NULL && l1 == l2 && memcmp(t1, t2, l1) == 0,
	   "text -> graph -> text is byte-identical");
	/*
	 * Through the graph file too. proto3 does not store a double -0.0,
	 * so that one attribute becomes +0 first.
	 */
	for (int j = 0; j < g2->nodes[0].n_attr; j++)
		if (strcmp(g2->nodes[0].attrs[j].name, "neg_zero") == 0)
			g2->nodes[0].attrs[j].f = 0;
	ml_free(t1);
	t1 = encode(g2, &l1);
	uint8_t *m = NULL;
	size_t ml = 0;
	struct ml_graph *g3 = NULL;
	bool mok = ml_mlg_encode(g2, &m, &ml, &e) == 0 && ml_mlg_decode(&g3, m, ml, &e) == 0;
	size_t l3 = 0;
	char *t3 = mok ? encode(g3, &l3) : NULL;
	ok(t3 != NULL && l3 == l1 && memcmp(t1, t3, l1) == 0, "text -> graph -> mlg -> graph -> text "
	   "is byte-identical%s%s", mok ? "" : ": ", mok ? "" : e.msg);
	ok(strstr(t1, "alpha = 0x1.999999999999ap-4") != NULL &&
	   strstr(t1, "beta = 0.1,") != NULL && strstr(t1, "gamma = 2.0") != NULL,
	   "float attributes: float32 in decimal, other doubles in hexadecimal");
	ok(strstr(t1, "param float[3] small2 = {0.1, 1e-45, 16777216}") != NULL,
	   "small tensors are inline with the shortest exact decimals");
	ok(strstr(t1, "\"onnx::Unknown_7\"") != NULL && strstr(t1, "\"float\"") != NULL &&
	   strstr(t1, "= \"dense\" (") != NULL && strstr(t1, "\"com.example\".\"My Op\"") != NULL,
	   "odd names and reserved words are quoted");
	ml_free(t3);
	ml_free(m);
	ml_graph_free(g3);
	ml_free(t1);
	ml_free(t2);
	ml_graph_free(g2);
	ml_graph_free(g);
}

static const char mlp_text[] =
	"<\n"
	"    ir_version: 8,\n"
	"    opset_import: [\"\" : 17],\n"
	"    seed: 0\n"
	">\n"
	"mlp (float[N,1,28,28] x) => (float[N,10] y)\n"
	"{\n"
	"    flatten\n"
	"    dense(units=256, act=relu)\n"
	"    dense(units=128, act=relu)\n"
	"    dense(units=10)\n"
	"}\n";

static const char lenet_text[] =
	"lenet (float[N,1,28,28] x) => (float[N,10] y) {\n"
	"    conv(filters=6, kernel=5, pad=2, act=relu)\n"
	"    pool(max, size=2, stride=2)\n"
	"    conv(filters=16, kernel=5, act=relu)\n"
	"    pool(max, size=2, stride=2)\n"
	"    flatten\n"
	"    dense(units=120, act=relu)\n"
	"    dense(units=84, act=relu)\n"
	"    dense(units=10)\n"
	"}\n";

static bool
has_shape(const struct ml_graph *g, const char *name, enum ml_tkind kind, int rank, ...)
{
	va_list ap;
	int ti = ml_graph_find(g, name);
	if (ti < 0)
		return false;
	const struct ml_tensor *t = g->tensors[ti];
	bool good = t->kind == kind && t->rank == rank && t->data != NULL;
	va_start(ap, rank);
	for (int i = 0; i < rank; i++)
		good &= t->dims[i] == va_arg(ap, int64_t);
	va_end(ap);
	return good;
}

static bool
in_bounds(const struct ml_graph *g, const char *name, double bound, bool *spread)
{
	int ti = ml_graph_find(g, name);
	const struct ml_tensor *t = g->tensors[ti];
	const float *v = t->data;
	size_t n = t->nbytes / 4;
	double lo = 0, hi = 0, sum = 0;
	for (size_t i = 0; i < n; i++) {
		if (!(fabs(v[i]) <= bound))
			return false;
		lo = fmin(lo, v[i]);
		hi = fmax(hi, v[i]);
		sum += v[i];
	}
	/* uniform in +-bound: the extremes come close and the mean is near 0 */
	*spread = lo < -0.9 * bound && hi > 0.9 * bound && fabs(sum / (double)n) < 0.1 * bound;
	return true;
}

static void
test_layers(void)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = decode(mlp_text, sizeof mlp_text - 1, &e);
	ok(g != NULL, "the MLP shorthand decodes%s%s", g ? "" : ": ", g ? "" : e.msg);
	if (g == NULL)
		return;
	ok(has_shape(g, "dense1.weight", ML_TK_PARAM, 2, (int64_t)256, (int64_t)784) &&
	   has_shape(g, "dense1.bias", ML_TK_PARAM, 1, (int64_t)256) &&
	   has_shape(g, "dense2.weight", ML_TK_PARAM, 2, (int64_t)128, (int64_t)256) &&
	   has_shape(g, "dense3.weight", ML_TK_PARAM, 2, (int64_t)10, (int64_t)128) &&
	   has_shape(g, "dense3.bias", ML_TK_PARAM, 1, (int64_t)10),
	   "dense parameters have the shapes nn.Linear gives, as trainable params");
	bool spread = false, inb = in_bounds(g, "dense1.weight", 1 / sqrt(784.0), &spread);
	bool spread2 = false, inb2 = in_bounds(g, "dense2.bias", 1 / sqrt(256.0), &spread2);
	ok(inb && spread && inb2 && spread2, "Kaiming-uniform weights and biases within 1/sqrt(fan_in)");
	const char *ops[] = { "Flatten", "Gemm", "Relu", "Gemm", "Relu", "Gemm" };
	bool opsok = g->n_nodes == 6;
	for (int i = 0; opsok && i < 6; i++)
		opsok = strcmp(g->nodes[i].op_type, ops[i]) == 0;
	ok(opsok && ml_attr_int(&g->nodes[1], "transB", 0) == 1 &&
	   g->nodes[5].out[0] == g->outputs[0] && g->nodes[0].in[0] == g->inputs[0],
	   "layers chain from the input to the graph output: Flatten Gemm Relu Gemm Relu Gemm");
	struct ml_graph *g2 = decode(mlp_text, sizeof mlp_text - 1, &e);
	int wi = ml_graph_find(g, "dense2.weight"), wj = ml_graph_find(g2, "dense2.weight");
	ok(g2 != NULL && memcmp(g->tensors[wi]->data, g2->tensors[wj]->data,
				g->tensors[wi]->nbytes) == 0, "initialisation is deterministic");
	char *seeded = malloc(sizeof mlp_text);
	memcpy(seeded, mlp_text, sizeof mlp_text);
	strstr(seeded, "seed: 0")[6] = '7';
	struct ml_graph *g3 = decode(seeded, sizeof mlp_text - 1, &e);
	int wk = g3 != NULL ? ml_graph_find(g3, "dense2.weight") : -1;
	ok(wk >= 0 && memcmp(g->tensors[wi]->data, g3->tensors[wk]->data,
			     g->tensors[wi]->nbytes) != 0, "another seed gives other weights");
	free(seeded);
	/* expanded layers are written as ops and read back the same */
	size_t l1, l2;
	char *t1 = encode(g, &l1);
	struct ml_graph *g4 = t1 != NULL ? decode(t1, l1, &e) : NULL;
	char *t2 = g4 != NULL ? encode(g4, &l2) : NULL;
	bool same = g4 != NULL && graph_eq(g, g4, 0);
	ok(same && t2 != NULL && l1 == l2 && memcmp(t1, t2, l1) == 0 &&
	   strstr(t1, "dense(") == NULL && strstr(t1, "Gemm <transB = 1>") != NULL,
	   "the expanded MLP round-trips as op-level text%s%s", same ? "" : ": ", same ? "" : why);
	ml_free(t1);
	ml_free(t2);
	ml_graph_free(g4);
	ml_graph_free(g3);
	ml_graph_free(g2);
	ml_graph_free(g);

	g = decode(lenet_text, sizeof lenet_text - 1, &e);
	ok(g != NULL, "the LeNet shorthand decodes%s%s", g ? "" : ": ", g ? "" : e.msg);
	if (g == NULL)
		return;
	ok(has_shape(g, "conv1.weight", ML_TK_PARAM, 4, (int64_t)6, (int64_t)1, (int64_t)5,
		     (int64_t)5) &&
	   has_shape(g, "conv1.bias", ML_TK_PARAM, 1, (int64_t)6) &&
	   has_shape(g, "conv2.weight", ML_TK_PARAM, 4, (int64_t)16, (int64_t)6, (int64_t)5,
		     (int64_t)5) &&
	   has_shape(g, "dense1.weight", ML_TK_PARAM, 2, (int64_t)120, (int64_t)400) &&
	   has_shape(g, "dense2.weight", ML_TK_PARAM, 2, (int64_t)84, (int64_t)120) &&
	   has_shape(g, "dense3.weight", ML_TK_PARAM, 2, (int64_t)10, (int64_t)84),
	   "conv and dense parameter shapes follow the tracked shapes (400 = 16*5*5)");
	const int64_t *pads = NULL;
	int np = ml_attr_ints(&g->nodes[0], "pads", &pads);
	const int64_t *ks = NULL;
	int nk = ml_attr_ints(&g->nodes[2], "kernel_shape", &ks);
	ok(np == 4 && pads[0] == 2 && pads[3] == 2 && nk == 2 && ks[0] == 2 &&
	   strcmp(g->nodes[2].op_type, "MaxPool") == 0 && g->n_nodes == 12,
	   "conv pads and pool windows are attributes");
	ml_graph_free(g);

	static const char more[] =
		"m (float[N,3,32,32] x) => (y) {\n"
		"  a = conv(8, kernel=[3,3], stride=2, pad=same, bias=false, init=he)\n"
		"  norm(batch, eps=0.001)\n"
		"  act(leaky_relu, alpha=0.2)\n"
		"  dropout(0.25)\n"
		"  gpool\n"
		"  reshape(shape=[0, -1])\n"
		"  norm(layer)\n"
		"  h = dense(4, init=xavier, act=softmax)\n"
		"  z = Identity (h)\n"
		"  dense(units=2, in=a)\n"
		"}\n";
	g = decode(more, sizeof more - 1, &e);
	ok(g != NULL, "other layers decode%s%s", g ? "" : ": ", g ? "" : e.msg);
	if (g == NULL)
		return;
	ok(has_shape(g, "a.weight", ML_TK_PARAM, 4, (int64_t)8, (int64_t)3, (int64_t)3, (int64_t)3) &&
	   ml_graph_find(g, "a.bias") < 0 &&
	   has_shape(g, "norm1.scale", ML_TK_PARAM, 1, (int64_t)8) &&
	   has_shape(g, "norm1.mean", ML_TK_CONST, 1, (int64_t)8) &&
	   has_shape(g, "dropout1.ratio", ML_TK_CONST, 0) &&
	   has_shape(g, "reshape1.shape", ML_TK_CONST, 1, (int64_t)2) &&
	   has_shape(g, "norm2.scale", ML_TK_PARAM, 1, (int64_t)8) &&
	   has_shape(g, "h.weight", ML_TK_PARAM, 2, (int64_t)4, (int64_t)8) &&
	   has_shape(g, "dense2.weight", ML_TK_PARAM, 2, (int64_t)16, (int64_t)2) &&
	   strcmp(g->nodes[g->n_nodes - 2].op_type, "MatMul") == 0,
	   "conv/norm/dropout/reshape/dense parameters; dense on a 4-D value uses MatMul");
	np = ml_attr_ints(&g->nodes[0], "pads", &pads);
	ok(np == 4 && pads[0] == 0 && pads[2] == 1 && ml_graph_opset(g, "", 0) == 17,
	   "pad=same with stride 2 gives SAME_UPPER pads from the known size");
	ml_graph_free(g);
}

/*
 * Malformed text: each case must fail with ML_EFORMAT (or ENOTSUP), a
 * message starting with "t.mlt:LINE:COL: ", and the given words.
 */
static void
test_errors(void)
{
	static const struct {
		const char *text, *where, *words;
		int code;
	} cases[] = {
		{ "g (float x) => (y) {\n  y = Relu (x\n}\n", "t.mlt:3:1: ", "expected ','", ML_EFORMAT },
		{ "g (\"x) => (y) {}\n", "t.mlt:1:4: ", "unterminated string", ML_EFORMAT },
		{ "<ir_version: 99999999999999999999999> g () => () {}", "t.mlt:1:14: ",
		  "out of range", ML_EFORMAT },
		{ "<ir_version: 8, colour: 3> g () => () {}", "t.mlt:1:17: ", "unknown header field",
		  ML_EFORMAT },
		{ "g (float[2] x) => (x) {\n", "t.mlt:1:23: ", "never closed", ML_EFORMAT },
		{ "g () => () {}\nfloat[2] w = {1, 2, 3}\n", "t.mlt:2:21: ", "more than 2 elements",
		  ML_EFORMAT },
		{ "g () => () {}\nint8[2] w = {1, 300}\n", "t.mlt:2:17: ", "out of range", ML_EFORMAT },
		{ "g () => () {}\nfloat[2] w = base64\"AAAA\"\n", "t.mlt:2:14: ", "3 bytes", ML_EFORMAT },
		{ "g () => () {}\nfloat[1] w = base64\"AA!A\"\n", "t.mlt:2:23: ", "bad character",
		  ML_EFORMAT },
		{ "g (float[2] x) => () {}\nfloat[2] x = {1, 2}\n", "t.mlt:2:10: ", "declared twice",
		  ML_EFORMAT },
		{ "g (float[N,4] x) => (y) {\n  dense(units=3, colour=red)\n}", "t.mlt:2:18: ",
		  "dense has no argument 'colour'", ML_EFORMAT },
		{ "g (float[N,4] x) => (y) {\n  dense(act=relu)\n}", "t.mlt:2:3: ", "dense needs units",
		  ML_EFORMAT },
		{ "g (float x) => (y) {\n  dense(4)\n}", "t.mlt:2:3: ", "not known", ML_EFORMAT },
		{ "g () => (y) {\n  flatten\n}", "t.mlt:2:3: ", "no input", ML_EFORMAT },
		{ "g (x) => (y) {\n  y = Relu (x)\n}\n\x01", "t.mlt:4:1: ", "unexpected byte 0x01",
		  ML_EFORMAT },
		{ "", "t.mlt:1:1: ", "expected a graph name", ML_EFORMAT },
		{ "<ir_version: 8>", "t.mlt:1:16: ", "expected a graph name", ML_EFORMAT },
		{ "<training: {step: 1, slots: [m]}> g () => () {}", "t.mlt:1:29: ",
		  "training slot 'm' names no tensor", ML_EFORMAT },
		{ "g (float[-1] x) => () {}", "t.mlt:1:10: ", "negative", ML_EFORMAT },
		{ "g (float[1,2,3,4,5,6,7,8,9] x) => () {}", "t.mlt:1:26: ", "more than 8 dims",
		  ML_EFORMAT },
		{ "g () => () {\n  y = Op <a = [1, \"s\"]> ()\n}", "t.mlt:2:15: ", "mixes", ML_EFORMAT },
		{ "g () => () {\n  y = Op <a = \"\\q\"> ()\n}", "t.mlt:2:16: ", "unknown escape",
		  ML_EFORMAT },
		{ "g () => () {}\nstring[1] s = {1}\n", "t.mlt:2:15: ", "string tensors",
		  ML_ENOTSUP },
		{ "g () => () {}\nfloat[] s = {1e39}\n", "t.mlt:2:14: ", "out of range", ML_EFORMAT },
		{ "g () => () {}\nfloat[99999999999,99999999999] s = {1}\n", "t.mlt:2:36: ",
		  "overflows", ML_EFORMAT },
		{ "g () => () {}\nfloat[1000000000000] s = {1}\n", "t.mlt:2:26: ",
		  "1 elements for a shape of 1000000000000", ML_EFORMAT },
		{ "g (float[N,4] x) => (y) {\n  conv(4)\n}", "t.mlt:2:3: ", "rank 3", ML_EFORMAT },
		{ "g (float[N,1,2,2] x) => (y) {\n  pool(max, size=3)\n}", "t.mlt:2:3: ",
		  "window is bigger", ML_EFORMAT },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct ml_err e = { 0 };
		struct ml_graph *g = decode(cases[i].text, strlen(cases[i].text), &e);
		bool good = g == NULL && e.code == cases[i].code &&
			    strncmp(e.msg, cases[i].where, strlen(cases[i].where)) == 0 &&
			    strstr(e.msg, cases[i].words) != NULL && strchr(e.msg, '\n') == NULL;
		ok(good, "error %zu: %s%s%s", i + 1, cases[i].words, good ? "" : " -- got: ", good ? "" : e.msg);
		ml_graph_free(g);
	}
	/* NUL bytes and subgraphs nested too deep */
	static const char nul[] = "g () => () {\n  y = A (\0)\n}";
	struct ml_err e = { 0 };
	struct ml_graph *g = decode(nul, sizeof nul - 1, &e);
	ok(g == NULL && strncmp(e.msg, "t.mlt:2:10: unexpected byte 0x00", 32) == 0,
	   "a NUL byte is an error at its position");
	char deep[8192];
	size_t k = 0;
	for (int d = 0; d < 40; d++)
		k += (size_t)snprintf(deep + k, sizeof deep - k, "g () => () { y = If <b = ");
	k += (size_t)snprintf(deep + k, sizeof deep - k, "g () => () {}");
	for (int d = 0; d < 40; d++)
		k += (size_t)snprintf(deep + k, sizeof deep - k, "> () }");
	g = decode(deep, k, &e);
	ok(g == NULL && strstr(e.msg, "nest deeper than 32") != NULL, "deep nesting is refused: %s",
	   e.msg);
	k = 0;
	for (int d = 0; d < 20; d++)
		k += (size_t)snprintf(deep + k, sizeof deep - k, "g () => () { y = If <b = ");
	k += (size_t)snprintf(deep + k, sizeof deep - k, "g () => () {}");
	for (int d = 0; d < 20; d++)
		k += (size_t)snprintf(deep + k, sizeof deep - k, "> () }");
	g = decode(deep, k, &e);
	ok(g != NULL, "20 nested subgraphs are fine%s%s", g ? "" : ": ", g ? "" : e.msg);
	ml_graph_free(g);
}

/*
 * Mutations of valid text (truncations, flipped and inserted bytes) must
 * decode or fail cleanly, and whatever decodes must encode.
 */
static void
test_mutations(void)
{
	struct ml_graph *g = rich_graph();
	size_t len;
	char *t = encode(g, &len);
	ml_graph_free(g);
	if (t == NULL)
		return;
	char *buf = malloc(len + 16);
	uint64_t s = 42;
	int decoded = 0, failed = 0, bad = 0, runs = 3000;
	for (int r = 0; r < runs; r++) {
		size_t n = len;
		memcpy(buf, t, len);
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		size_t at = (size_t)(s >> 33) % len;
		int what = (int)((s >> 20) % 4);
		if (what == 0)
			n = at;
		else if (what == 1)
			buf[at] = (char)(s >> 8);
		else if (what == 2)
			buf[at] = "\"{}[]<>(),=:#\\\n0"[(s >> 8) % 16];
		else
			memmove(buf + at, buf + at + 1, len - at - 1), n--;
		struct ml_err e = { 0 };
		struct ml_graph *m = NULL;
		int rc = ml_text_decode(&m, buf, n, "m.mlt", &e);
		if (rc == 0) {
			decoded++;
			size_t l2;
			char *t2 = NULL;
			if (m == NULL || ml_text_encode(m, &t2, &l2, &e) < 0)
				bad++;
			ml_free(t2);
		} else {
			failed++;
			if (m != NULL || strncmp(e.msg, "m.mlt:", 6) != 0 || strchr(e.msg, '\n') != NULL)
				bad++;
		}
		ml_graph_free(m);
	}
	ok(bad == 0, "%d mutated texts: %d decode, %d fail with a positioned message", runs, decoded,
	   failed);
	free(buf);
	ml_free(t);
}

static void
test_examples(void)
{
	static const char *const files[] = { "examples/fashion-mlp.mlt", "examples/lenet.mlt" };
	for (int i = 0; i < 2; i++) {
		struct ml_err e = { 0 };
		uint8_t *buf = NULL;
		size_t len;
		if (ml_read_file(files[i], &buf, &len, &e) < 0) {
			printf("ok %d - # SKIP %s not found (run from the repository root)\n", ++ntest,
			       files[i]);
			continue;
		}
		struct ml_graph *g = decode((const char *)buf, len, &e);
		ok(g != NULL, "%s decodes%s%s", files[i], g ? "" : ": ", g ? "" : e.msg);
		ml_graph_free(g);
		ml_free(buf);
	}
}

/* test_clone: ml_graph_clone copies every field and shares no memory with the original. */
static void
test_clone(void)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = rich_graph(), *c = NULL;
	int rc = ml_graph_clone(&c, g, &e);
	ok(rc == 0, "clone a graph that uses every field%s%s", rc == 0 ? "" : ": ", rc == 0 ? "" : e.msg);
	if (c == NULL)
		return;
	bool same = graph_eq(g, c, 0);
	ok(same, "the clone keeps every field%s%s", same ? "" : ": ", same ? "" : why);
	bool apart = c->tensors != g->tensors && c->train != g->train && c->train->rng != g->train->rng;
	for (int i = 0; i < g->n_tensors; i++)
		apart &= c->tensors[i] != g->tensors[i] &&
			 (g->tensors[i]->data == NULL || c->tensors[i]->data != g->tensors[i]->data);
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_attr; j++) {
			const struct ml_attr *a = &c->nodes[i].attrs[j];
			if (a->type == ML_ATTR_GRAPH || a->type == ML_ATTR_GRAPHS)
				for (int k = 0; k < a->n; k++)
					apart &= a->graphs[k] != g->nodes[i].attrs[j].graphs[k] &&
						 a->graphs[k]->parent == c;
		}
	ok(apart, "the clone shares no tensor, data, training state or subgraph; its subgraphs' parent is it");
	uint8_t *b1 = NULL, *b2 = NULL;
	size_t l1 = 0, l2 = 0;
	ok(ml_mlg_encode(g, &b1, &l1, &e) == 0 && ml_mlg_encode(c, &b2, &l2, &e) == 0 && l1 == l2 &&
		   memcmp(b1, b2, l1) == 0,
	   "the clone writes the same graph file");
	ml_free(b1);
	ml_free(b2);
	ml_graph_free(g);
	char *t = encode(c, &l1);
	ok(t != NULL, "the clone outlives the original");
	ml_free(t);
	ml_graph_free(c);
}

int
main(void)
{
	test_round_trip();
	test_clone();
	test_layers();
	test_errors();
	test_mutations();
	test_examples();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
