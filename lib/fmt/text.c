/*
 * text.c: the .mlt text form of a graph: its definition (below), the parser
 * and ml_text_decode. The lexer is text_lex.c, the layer shorthands are
 * expanded by text_layers.c and the encoder is text_enc.c.
 *
 * THE .mlt TEXT FORM
 *
 * The syntax follows ONNX's textual form (the one onnx.parser reads), with
 * additions so that every field of the graph IR can be written and read
 * back exactly, and with layer shorthands for writing networks by hand.
 * A file is a header, one graph, and the data of the graph's tensors:
 *
 *	<
 *	    ir_version: 8,
 *	    opset_import: ["" : 17]
 *	>
 *	mlp (float[N,784] x) => (float[N,10] y)
 *	{
 *	    h = Gemm <transB = 1> (x, w, b)
 *	    y = Relu (h)
 *	}
 *	param float[10,784] w = base64"..."
 *	param float[10] b = {0.5, -0.25, 0, 0, 0, 0, 0, 0, 0, 1}
 *
 * Lexical rules. Tokens are separated by white space; `#` starts a comment
 * that runs to the end of the line. An identifier is [A-Za-z_][A-Za-z0-9_.]*;
 * a name that is not an identifier (or is one of the words below) is written
 * as a string. A string is "..." on one line, with the escapes \" \\ \n \r \t
 * and \xHH. Numbers are decimal integers, decimal floats (1.5, 1e-05, inf,
 * -inf, nan) and C99 hexadecimal floats (0x1.8p+1). base64"..." is raw
 * little-endian tensor data in base64; white space inside it, newlines
 * included, is ignored. Limits: names 64 KiB, strings 64 MiB, numbers 128
 * characters, 2^24 elements in a list, subgraphs nested 32 deep. Errors read
 * "PATH:LINE:COLUMN: message", columns counting bytes from 1.
 *
 * Grammar. [x] is optional, x* repeats, 'x' is literal text; NAME is an
 * identifier or a string, INT an integer, NUMBER any number.
 *
 *	file	:= [header] graph decl* EOF
 *	header	:= '<' [hfield (',' hfield)*] '>'
 *	hfield	:= 'ir_version' ':' INT
 *		 | 'opset_import' ':' '[' [STRING ':' INT (',' STRING ':' INT)*] ']'
 *		 | 'producer_name' ':' STRING
 *		 | 'metadata_props' ':' '[' [STRING ':' STRING (',' ...)*] ']'
 *		 | 'arena_bytes' ':' INT
 *		 | 'seed' ':' INT
 *		 | 'training' ':' '{' [tfield (',' tfield)*] '}'
 *		 | ('producer_version' | 'domain' | 'model_version' | 'doc_string') ':' value
 *	tfield	:= 'step' ':' INT | 'epoch' ':' INT | 'optimizer' ':' STRING
 *		 | 'config' ':' STRING | 'rng' ':' BASE64 | 'slots' ':' '[' [NAME (',' NAME)*] ']'
 *		 | 'run' ':' '{' [NAME ':' NUMBER (',' NAME ':' NUMBER)*] '}'
 *	graph	:= NAME '(' [decl (',' decl)*] ')' '=>' '(' [decl (',' decl)*] ')'
 *		   ['<' [decl (',' decl)*] '>'] '{' stmt* '}'
 *	decl	:= [kind] [type] NAME [annot] ['=' literal]
 *	kind	:= 'param' | 'const' | 'input' | 'act'
 *	type	:= DTYPE ['[' [dim (',' dim)*] ']']
 *	dim	:= INT | '?' | NAME ['=' INT]
 *	annot	:= '<' [akey '=' avalue (',' akey '=' avalue)*] '>'
 *	literal	:= '{' [NUMBER (',' NUMBER)*] '}' | BASE64
 *	stmt	:= node | [NAME '='] layer
 *	node	:= ['[' [NAME] (',' ('device' | 'cost_us') '=' NUMBER)* ']']
 *		   [NAME (',' NAME)*] '=' op ['<' [attr (',' attr)*] '>'] '(' [NAME (',' NAME)*] ')'
 *	op	:= IDENT | STRING ['.' STRING]
 *	attr	:= NAME [':' atype] '=' value
 *	value	:= NUMBER | STRING | tensor | subgraph | '[' [value (',' value)*] ']'
 *	tensor	:= [kind] DTYPE ['[' dims ']'] [NAME] [annot] ['='] [literal]
 *	subgraph := [header] graph
 *	layer	:= LAYER ['(' [larg (',' larg)*] ')']
 *	larg	:= [IDENT '='] (NUMBER | IDENT | STRING | '[' [INT (',' INT)*] ']')
 *
 * The header. ir_version and opset_import default to 8 and ["" : 17] in the
 * file's header (subgraphs: 0 and none). metadata_props are the graph's
 * metadata, training its training state (optimizer slots name tensors of the
 * graph; run holds the fields of TrainRun, lib/train/state.def). seed seeds
 * the initialisation of layer parameters (default 0).
 * ONNX's producer_version, domain, model_version and doc_string are read
 * and ignored. A subgraph has a header only where a field differs from its
 * default.
 *
 * Types and declarations. DTYPE is spelled as ONNX does: float, double,
 * float16, bfloat16, int8, uint8, int16, uint16, int32, uint32, int64,
 * uint64, bool, string, complex64, complex128, and `undefined`. `float x`
 * has an unknown rank, `float[] x` is a scalar. A dim is a size, `?`
 * (unknown), a symbolic name (unknown size called N), or N=5 (a known size
 * that also has a name). A tensor is declared in the graph's inputs or
 * outputs, in the value block `<...>` before the body, or, in the file's
 * top graph, after the body; a tensor may be declared once, and a bare name
 * (no kind, type, annotation or literal) only names it. The kind defaults to
 * `input` for a graph input without data, `const` for anything with data,
 * and `act` (computed) otherwise; `param` marks trainable parameters.
 * Annotations: doc = STRING, device = INT, arena_off = INT, and the
 * quantisation parameters qtype = DTYPE, qaxis = INT, qscale = [NUMBER...],
 * qzero = [INT...]. A literal lists every element in row-major order
 * (integers for integer types, range-checked; 0, 1, true or false for bool;
 * numbers for float types, rounded to the type) or gives the raw bytes in
 * base64; complex tensors only in base64.
 *
 * Nodes. `[conv1, device = 1, cost_us = 12.5] y = Conv <...> (x, w, b)`:
 * the bracketed prefix names the node and carries its placement and cost.
 * "" stands for an omitted optional input or output. An op is `Gemm` (ONNX
 * domain), `ml.Gelu` or `com.microsoft.Foo` (the domain is what precedes the
 * last dot), or "Op" / "domain"."Op" for other spellings.
 *
 * Attributes. An integer is an int, any other number a float; a list is
 * ints, floats (when any element is a float), strings, tensors or graphs.
 * `name: TYPE = value` names the type (int, float, string, tensor, graph,
 * ints, floats, strings, tensors, graphs), which an empty list needs.
 * ONNX float attributes are 32-bit, so a decimal float attribute is read as
 * the nearest float32 (then widened); a hexadecimal float is read as an
 * exact double.
 *
 * The canonical form (ml_text_encode) writes: the header with ir_version
 * and opset_import; the signature; a value block declaring every other
 * tensor that has a type, an annotation or a kind of its own, or that no
 * node uses (a bare name); the body, one op per line, with a [name] prefix
 * where the node has a name (layers are written as the ops they expand
 * to); then, after the body, every tensor with data, in the order the body
 * first uses them (in a subgraph, which has no place after its body, they
 * are in the value block). Tensors of up to 16 elements are written inline,
 * each number as the shortest decimal that reads back exactly; larger ones,
 * and any whose bits a decimal cannot hold (NaN payloads, bool bytes other
 * than 0 and 1), in base64, 76 characters a line. Float attributes that
 * float32 cannot hold exactly are written in hexadecimal. Names that are
 * not identifiers, or are one of the words of this grammar (dtype, kind
 * and layer names, base64, inf, nan, true, false), are quoted. Decoding
 * the canonical text gives the same graph (tensors may be numbered
 * differently), and encoding that graph gives the same text, byte for byte.
 *
 * LAYER SHORTHANDS
 *
 *	mlp (float[N,1,28,28] x) => (float[N,10] y) {
 *	    flatten
 *	    dense(units=256, act=relu)
 *	    dense(10)
 *	}
 *
 * A layer reads the previous statement's first output (at the start of the
 * body, the graph's first input); in=NAME reads another value. `h = dense(8)`
 * names a layer's output; an unnamed layer that is the body's last statement
 * writes the graph's first output. A layer L is its output name or, unnamed,
 * its kind and number among the graph's layers of that kind (dense1,
 * dense2, conv1); its parameters are L.weight, L.bias (norm: L.scale,
 * L.bias, L.mean, L.var), its nodes L and L.act, its intermediate values L.pre
 * (before the activation) and L.mm. Parameter sizes come from the type of
 * the input, which the graph's declarations and static inference of the
 * statements before give; declare a value in the value block where neither
 * can. Parameters are float tensors of the input's type and kind param;
 * running statistics, shapes and ratios are const.
 *
 *	dense(units, act=none, bias=true, init=kaiming)
 *		Gemm(transB=1) with weight [units, in] for a 2-D input, else
 *		MatMul with weight [in, units] then Add; then the activation.
 *	conv(filters, kernel=3, stride=1, pad=valid, dilation=1, groups=1, act, bias, init)
 *		Conv with weight [filters, C/groups, k...] and bias [filters].
 *		pad is valid, same (SAME_UPPER: explicit pads where the sizes
 *		are known, else auto_pad), N, or a list of pads.
 *	pool(max|avg, size=2, stride=size, pad=valid)	MaxPool / AveragePool
 *	gpool(avg|max)			GlobalAveragePool / GlobalMaxPool
 *	flatten(axis=1)			Flatten
 *	dropout(rate=0.5)		Dropout (ratio input from opset 12, else attribute)
 *	norm(batch, eps, momentum)	BatchNormalization, scale 1 and bias 0
 *					(param), mean 0 and var 1 (const)
 *	norm(layer, eps)		LayerNormalization over the last axis
 *	act(relu|sigmoid|tanh|gelu|silu|softmax|log_softmax|leaky_relu|elu|softplus,
 *	    alpha, axis)		the op (gelu and silu: ml.Gelu, ml.Silu)
 *	reshape(shape=[...])		Reshape with a const int64 shape
 *
 * Initialisation. init=kaiming (default) is PyTorch's default for Linear
 * and Conv: weight and bias uniform in +-1/sqrt(fan_in), fan_in = in
 * features (times the kernel size). init=xavier: weight uniform in
 * +-sqrt(6/(fan_in+fan_out)); init=he: weight normal with deviation
 * sqrt(2/fan_in); init=zeros; for these three the bias is zero. Each
 * parameter draws from its own splitmix64 stream seeded with seed XOR the
 * 64-bit FNV-1a hash of its name; a uniform draw is (x >> 11) * 2^-53, and
 * a normal draw is Box-Muller's sqrt(-2 ln u1) cos(2 pi u2) with u1 =
 * ((x >> 11) + 1) * 2^-53. Uniform initialisation is bit-exact everywhere;
 * normal follows the C library's log and cos.
 */
#include <errno.h>
#include <stdarg.h>

#include "text.h"

enum dctx { D_INPUT, D_OUTPUT, D_VALUE, D_ATTR };

/* struct decl: one tensor declaration as read, before it is applied. */
struct decl {
	struct mlt_tok at;
	char *name;
	bool bare;
	bool has_kind, has_type, has_lit, has_doc, has_device, has_arena, has_q;
	enum ml_tkind kind;
	enum ml_dtype dtype;
	int rank;
	int64_t dims[ML_MAX_RANK];
	char *sym[ML_MAX_RANK];
	uint8_t *data;
	size_t nbytes;
	char *doc;
	int device;
	int64_t arena_off;
	enum ml_dtype qtype;
	int qaxis, qn_scale, qn_zero;
	float *qscale;
	int32_t *qzero;
};

static int parse_graph(struct mlt_parser *p, struct ml_graph *g, bool top);

/*
 * Per-graph state: which tensors were declared, and the shapes learnt
 * while reading the body.
 */
int
mlt_gs_grow(struct mlt_gstate *gs)
{
	int n = gs->g->n_tensors;
	if (n <= gs->cap)
		return 0;
	int cap = gs->cap ? gs->cap : 64;
	while (cap < n)
		cap *= 2;
	uint8_t *d = ml_realloc(gs->declared, (size_t)cap);
	if (d == NULL)
		return ML_ENOMEM;
	gs->declared = d;
	struct mlt_shape *s = ml_realloc(gs->shp, sizeof *s * (size_t)cap);
	if (s == NULL)
		return ML_ENOMEM;
	gs->shp = s;
	memset(gs->declared + gs->cap, 0, (size_t)(cap - gs->cap));
	memset(gs->shp + gs->cap, 0, sizeof *s * (size_t)(cap - gs->cap));
	gs->cap = cap;
	return 0;
}

void
mlt_shape_of(struct mlt_gstate *gs, int ti, struct ml_tval *out)
{
	const struct ml_tensor *t = gs->g->tensors[ti];
	if (ti < gs->cap && gs->shp[ti].known) {
		*out = gs->shp[ti].v;
		out->data = NULL;
	} else {
		ml_graph_tval(gs->g, ti, out);
	}
	out->owned = false;
	if (t->kind == ML_TK_CONST || t->kind == ML_TK_PARAM)
		out->data = t->data;
	else
		out->data = NULL;
}

/*
 * mlt_infer_node: learn node ni's output types by its op's inference over
 * what is known of its inputs. Failure is not an error here: the graph is
 * checked as a whole once read, and a layer that needs a size reports it.
 */
void
mlt_infer_node(struct mlt_gstate *gs, int ni)
{
	enum { MAXIO = 32 };
	const struct ml_node *n = &gs->g->nodes[ni];
	struct ml_tval iv[MAXIO], ov[MAXIO], *in[MAXIO], *out[MAXIO];
	struct ml_err e2 = { 0 };

	const struct ml_opdef *d = n->op != ML_OP_NONE ? ml_opdef_get(n->op) : NULL;

	/*
	 * Inference trusts the arity the registry gives, as ml_graph_validate
	 * checks it before any other inference runs; here it runs first.
	 */
	if (d == NULL || d->infer == NULL || n->n_in > MAXIO || n->n_out > MAXIO ||
	    n->n_in < d->min_in || (d->max_in >= 0 && n->n_in > d->max_in) ||
	    n->n_out < d->min_out || (d->max_out >= 0 && n->n_out > d->max_out) ||
	    mlt_gs_grow(gs) < 0)
		return;
	for (int j = 0; j < d->min_in; j++)
		if (n->in[j] < 0)
			return;
	for (int j = 0; j < n->n_in; j++) {
		in[j] = NULL;
		if (n->in[j] >= 0) {
			mlt_shape_of(gs, n->in[j], &iv[j]);
			in[j] = &iv[j];
		}
	}
	for (int j = 0; j < n->n_out; j++) {
		memset(&ov[j], 0, sizeof ov[j]);
		ov[j].rank = -1;
		out[j] = &ov[j];
	}
	int rc = ml_node_infer(gs->g, n, in, out, &e2);
	for (int j = 0; j < n->n_out; j++) {
		if (rc == 0 && n->out[j] >= 0 && ov[j].rank <= ML_MAX_RANK) {
			struct mlt_shape *s = &gs->shp[n->out[j]];
			s->known = true;
			s->v = ov[j];
			s->v.data = NULL;
			s->v.owned = false;
		}
		ml_tval_clear(&ov[j]);
	}
}

/*
 * Declarations.
 */
static void
decl_clear(struct decl *d)
{
	ml_free(d->name);
	for (int i = 0; i < ML_MAX_RANK; i++)
		ml_free(d->sym[i]);
	ml_free(d->data);
	ml_free(d->doc);
	ml_free(d->qscale);
	ml_free(d->qzero);
	memset(d, 0, sizeof *d);
}

static bool
is_kind_word(const struct mlt_tok *t, enum ml_tkind *k)
{
	static const char *const w[] = { "act", "input", "const", "param" };
	for (int i = 0; i < 4; i++)
		if (mlt_word(t, w[i])) {
			*k = (enum ml_tkind)i;
			return true;
		}
	return false;
}

static bool
is_dtype_word(const struct mlt_tok *t, enum ml_dtype *dt)
{
	bool ok;
	if (t->kind != MLT_IDENT)
		return false;
	*dt = mlt_dtype_lookup(t->s, t->n, &ok);
	return ok;
}

static int
parse_dims(struct mlt_parser *p, struct decl *d)
{
	ML_TRY(mlt_next(p));	/* '[' */
	d->rank = 0;
	if (mlt_is(&p->tok, ']'))
		return mlt_next(p);
	for (;;) {
		if (d->rank == ML_MAX_RANK)
			return mlt_err(p, NULL, ML_EFORMAT, "more than %d dims", ML_MAX_RANK);
		int k = d->rank++;
		d->dims[k] = -1;
		if (mlt_is(&p->tok, '?')) {
			ML_TRY(mlt_next(p));
		} else if (p->tok.kind == MLT_NUMBER) {
			int64_t v;
			ML_TRY(mlt_tok_int(p, &p->tok, &v));
			if (v < 0)
				return mlt_err(p, NULL, ML_EFORMAT,
					       "a dim cannot be negative (write ? for unknown)");
			d->dims[k] = v;
			ML_TRY(mlt_next(p));
		} else if (mlt_is_name(&p->tok)) {
			ML_TRY(mlt_take_name(p, &d->sym[k]));
			if (mlt_is(&p->tok, '=')) {
				ML_TRY(mlt_next(p));
				ML_TRY(mlt_take_int(p, 0, INT64_MAX, &d->dims[k]));
			}
		} else {
			return mlt_err_expected(p, "a dim");
		}
		if (mlt_is(&p->tok, ']'))
			return mlt_next(p);
		ML_TRY(mlt_expect(p, ','));
	}
}

static int
literal_size(struct mlt_parser *p, const struct decl *d, int64_t *numel, int64_t *nbytes)
{
	int64_t n = 1;
	if (d->dtype == ML_STRING)
		return mlt_err(p, NULL, ML_ENOTSUP, "string tensors are not supported");
	if (d->dtype == ML_UNDEF || ml_dtype_size(d->dtype) == 0 || d->rank < 0)
		return mlt_err(p, NULL, ML_EFORMAT,
			       "data needs a type and a shape (write float[] for a scalar)");
	for (int i = 0; i < d->rank; i++) {
		if (d->dims[i] < 0)
			return mlt_err(p, NULL, ML_EFORMAT, "data needs every dim to be known");
		if (!ml_mul_ok(n, d->dims[i], &n))
			return mlt_err(p, NULL, ML_EFORMAT, "the shape's size overflows");
	}
	*numel = n;
	if (!ml_mul_ok(n, (int64_t)ml_dtype_size(d->dtype), nbytes) || *nbytes > INT64_MAX / 2)
		return mlt_err(p, NULL, ML_EFORMAT, "the shape's size overflows");
	return 0;
}

static int
parse_literal(struct mlt_parser *p, struct decl *d)
{
	int64_t numel = 0, nbytes = 0;
	ML_TRY(literal_size(p, d, &numel, &nbytes));
	size_t esz = ml_dtype_size(d->dtype);
	d->has_lit = true;
	if (p->tok.kind == MLT_BASE64) {
		int64_t dl = mlt_b64_decoded_len(p->tok.s, p->tok.n);
		if (dl < 0)
			return mlt_err(p, NULL, ML_EFORMAT, "malformed base64 data");
		if (dl != nbytes)
			return mlt_err(p, NULL, ML_EFORMAT,
				       "%lld bytes of data for a shape of %lld bytes",
				       (long long)dl, (long long)nbytes);
		if ((d->data = ml_malloc((size_t)nbytes + 1)) == NULL)
			return mlt_err(p, NULL, ML_ENOMEM, "cannot allocate %lld bytes",
				       (long long)nbytes);
		if (mlt_b64_decode(p->tok.s, p->tok.n, d->data, (size_t)nbytes) < 0)
			return mlt_err(p, NULL, ML_EFORMAT, "malformed base64 data");
		d->nbytes = (size_t)nbytes;
		return mlt_next(p);
	}
	if (!mlt_is(&p->tok, '{'))
		return mlt_err_expected(p, "'{' or base64\"...\"");
	if (d->dtype == ML_C64 || d->dtype == ML_C128)
		return mlt_err(p, NULL, ML_ENOTSUP, "complex tensors are written in base64");
	struct mlt_tok open = p->tok;
	ML_TRY(mlt_next(p));
	int64_t k = 0, cap = 0;
	while (!mlt_is(&p->tok, '}')) {
		if (k > 0)
			ML_TRY(mlt_expect(p, ','));
		if (k == numel)
			return mlt_err(p, NULL, ML_EFORMAT, "more than %lld elements for the shape",
				       (long long)numel);
		if (k == cap) {
			cap = cap ? ML_MIN(cap * 2, numel) : ML_MIN(numel, 64);
			uint8_t *b = ml_realloc(d->data, (size_t)cap * esz + 1);
			if (b == NULL)
				return mlt_nomem(p);
			d->data = b;
		}
		if (p->tok.kind != MLT_NUMBER && p->tok.kind != MLT_IDENT)
			return mlt_err_expected(p, "a number");
		const char *m = mlt_elem_read(p->tok.s, p->tok.n, d->dtype, d->data + k * esz);
		if (m != NULL)
			return mlt_err(p, NULL, ML_EFORMAT, "%s", m);
		k++;
		ML_TRY(mlt_next(p));
	}
	if (k != numel)
		return mlt_err(p, &open, ML_EFORMAT, "%lld elements for a shape of %lld",
			       (long long)k, (long long)numel);
	if (d->data == NULL && (d->data = ml_malloc(1)) == NULL)
		return mlt_nomem(p);
	d->nbytes = (size_t)nbytes;
	return mlt_next(p);
}

/* number_list: '[' NUMBER, ... ']' read as elements of type dt into a new array. */
static int
number_list(struct mlt_parser *p, enum ml_dtype dt, void **out, int *count)
{
	size_t esz = ml_dtype_size(dt);
	uint8_t *v = NULL;
	int n = 0, cap = 0, rc;

	ML_TRY(mlt_expect(p, '['));
	while (!mlt_is(&p->tok, ']')) {
		if (n > 0 && (rc = mlt_expect(p, ',')) < 0)
			goto fail;
		if (n == MLT_MAX_LIST) {
			rc = mlt_err(p, NULL, ML_EFORMAT, "a list is longer than %d", MLT_MAX_LIST);
			goto fail;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			uint8_t *b = ml_realloc(v, esz * (size_t)cap);
			if (b == NULL) {
				rc = mlt_nomem(p);
				goto fail;
			}
			v = b;
		}
		const char *m = p->tok.kind == MLT_NUMBER || p->tok.kind == MLT_IDENT ?
			mlt_elem_read(p->tok.s, p->tok.n, dt, v + esz * (size_t)n) : "expected a number";
		if (m != NULL) {
			rc = mlt_err(p, NULL, ML_EFORMAT, "%s", m);
			goto fail;
		}
		n++;
		if ((rc = mlt_next(p)) < 0)
			goto fail;
	}
	*out = v;
	*count = n;
	return mlt_next(p);
fail:
	ml_free(v);
	return rc;
}

static int
parse_annot(struct mlt_parser *p, struct decl *d)
{
	bool first = true;
	ML_TRY(mlt_next(p));	/* '<' */
	while (!mlt_is(&p->tok, '>')) {
		if (!first)
			ML_TRY(mlt_expect(p, ','));
		first = false;
		struct mlt_tok key = p->tok;
		if (key.kind != MLT_IDENT)
			return mlt_err_expected(p, "an annotation name");
		ML_TRY(mlt_next(p));
		ML_TRY(mlt_expect(p, '='));
		if (mlt_word(&key, "doc")) {
			char *s;
			size_t n;
			if (p->tok.kind != MLT_STRING)
				return mlt_err_expected(p, "a string");
			ML_TRY(mlt_tok_cstr(p, &p->tok, &s, MLT_MAX_STRING));
			n = strlen(s);
			ml_free(d->doc);
			if ((d->doc = ml_malloc(n + 1)) == NULL)
				return mlt_nomem(p);
			memcpy(d->doc, s, n + 1);
			d->has_doc = true;
			ML_TRY(mlt_next(p));
		} else if (mlt_word(&key, "device")) {
			int64_t v;
			ML_TRY(mlt_take_int(p, -1, INT32_MAX, &v));
			d->device = (int)v;
			d->has_device = true;
		} else if (mlt_word(&key, "arena_off")) {
			ML_TRY(mlt_take_int(p, INT64_MIN, INT64_MAX, &d->arena_off));
			d->has_arena = true;
		} else if (mlt_word(&key, "qtype")) {
			if (!is_dtype_word(&p->tok, &d->qtype))
				return mlt_err_expected(p, "a dtype");
			d->has_q = true;
			ML_TRY(mlt_next(p));
		} else if (mlt_word(&key, "qaxis")) {
			int64_t v;
			ML_TRY(mlt_take_int(p, INT32_MIN, INT32_MAX, &v));
			d->qaxis = (int)v;
			d->has_q = true;
		} else if (mlt_word(&key, "qscale")) {
			ml_free(d->qscale);
			d->qscale = NULL;
			ML_TRY(number_list(p, ML_F32, (void **)&d->qscale, &d->qn_scale));
			d->has_q = true;
		} else if (mlt_word(&key, "qzero")) {
			ml_free(d->qzero);
			d->qzero = NULL;
			ML_TRY(number_list(p, ML_I32, (void **)&d->qzero, &d->qn_zero));
			d->has_q = true;
		} else {
			return mlt_err(p, &key, ML_EFORMAT, "unknown tensor annotation '%.*s'",
				       (int)ML_MIN(key.n, 64), key.s);
		}
	}
	if (d->qn_scale != d->qn_zero)
		return mlt_err(p, NULL, ML_EFORMAT, "qscale has %d values and qzero %d",
			       d->qn_scale, d->qn_zero);
	return mlt_next(p);
}

/*
 * parse_decl: [kind] [type] NAME [annot] ['=' literal]. In attributes (D_ATTR)
 * the type is required, the name optional and the '=' too.
 */
static int
parse_decl(struct mlt_parser *p, enum dctx ctx, struct decl *d)
{
	struct mlt_tok nx;
	enum ml_tkind k;
	enum ml_dtype dt;

	memset(d, 0, sizeof *d);
	d->rank = -1;
	d->device = -1;
	d->arena_off = -1;
	d->qaxis = -1;
	d->at = p->tok;
	if (is_kind_word(&p->tok, &k)) {
		ML_TRY(mlt_peek_tok(p, &nx));
		if (mlt_is_name(&nx)) {
			d->has_kind = true;
			d->kind = k;
			ML_TRY(mlt_next(p));
		}
	}
	if (is_dtype_word(&p->tok, &dt)) {
		ML_TRY(mlt_peek_tok(p, &nx));
		if (ctx == D_ATTR || mlt_is_name(&nx) || mlt_is(&nx, '[')) {
			d->has_type = true;
			d->dtype = dt;
			ML_TRY(mlt_next(p));
			if (mlt_is(&p->tok, '['))
				ML_TRY(parse_dims(p, d));
		}
	}
	if (ctx == D_ATTR && !d->has_type)
		return mlt_err_expected(p, "a tensor type");
	d->at = p->tok;
	if (mlt_is_name(&p->tok))
		ML_TRY(mlt_take_name(p, &d->name));
	else if (ctx != D_ATTR)
		return mlt_err_expected(p, "a tensor name");
	if (mlt_is(&p->tok, '<'))
		ML_TRY(parse_annot(p, d));
	if (mlt_is(&p->tok, '=')) {
		ML_TRY(mlt_next(p));
		if (!d->has_type)
			return mlt_err(p, NULL, ML_EFORMAT, "data needs a type: write float[2] %s = ...",
				       d->name);
		ML_TRY(parse_literal(p, d));
	} else if (ctx == D_ATTR && (mlt_is(&p->tok, '{') || p->tok.kind == MLT_BASE64)) {
		ML_TRY(parse_literal(p, d));
	}
	d->bare = !d->has_kind && !d->has_type && !d->has_lit && !d->has_doc && !d->has_device &&
		  !d->has_arena && !d->has_q;
	return 0;
}

/* set_fields: type, data and annotations of d onto t (data into g's arena when arena). */
static int
set_fields(struct mlt_parser *p, struct ml_graph *g, struct ml_tensor *t, struct decl *d)
{
	if (d->has_type) {
		t->dtype = d->dtype;
		t->rank = d->rank;
		for (int i = 0; i < ML_MAX_RANK; i++) {
			t->dims[i] = i < d->rank ? d->dims[i] : 0;
			t->sym[i] = NULL;
			if (i < d->rank && d->sym[i] != NULL &&
			    (t->sym[i] = ml_graph_strdup(g, d->sym[i])) == NULL)
				return mlt_nomem(p);
		}
	}
	if (d->has_doc && (t->doc = ml_graph_strdup(g, d->doc)) == NULL)
		return mlt_nomem(p);
	if (d->has_device)
		t->device = d->device;
	if (d->has_arena)
		t->arena_off = d->arena_off;
	if (d->has_q) {
		struct ml_qparam *q = ml_graph_alloc(g, sizeof *q);
		if (q == NULL)
			return mlt_nomem(p);
		q->qtype = d->qtype;
		q->axis = d->qaxis;
		q->n = d->qn_scale;
		q->scale = ml_graph_alloc(g, sizeof(float) * (size_t)(q->n + 1));
		q->zero = ml_graph_alloc(g, sizeof(int32_t) * (size_t)(q->n + 1));
		if (q->scale == NULL || q->zero == NULL)
			return mlt_nomem(p);
		if (q->n > 0) {
			memcpy(q->scale, d->qscale, sizeof(float) * (size_t)q->n);
			memcpy(q->zero, d->qzero, sizeof(int32_t) * (size_t)q->n);
		}
		t->q = q;
	}
	return 0;
}

/* apply_decl: make d true of the graph's tensor of that name; its index in *ti. */
static int
apply_decl(struct mlt_parser *p, struct mlt_gstate *gs, struct decl *d, enum dctx ctx, int *ti)
{
	struct ml_graph *g = gs->g;
	int i = ml_graph_tensor(g, d->name);
	if (i < 0 || mlt_gs_grow(gs) < 0)
		return mlt_nomem(p);
	*ti = i;
	if (d->bare)
		return 0;
	if (gs->declared[i])
		return mlt_err(p, &d->at, ML_EFORMAT, "tensor '%s' is declared twice", d->name);
	gs->declared[i] = 1;
	struct ml_tensor *t = g->tensors[i];
	if (d->has_lit) {
		/*
		 * parse_literal checked the size against the shape; the buffer
		 * moves to the graph, so big weights are never held twice.
		 */
		if (ml_graph_owns_data(g, t))
			ml_free(t->data);
		t->data = d->data;
		t->nbytes = d->nbytes;
		d->data = NULL;
		t->kind = d->has_kind ? d->kind : ML_TK_CONST;
	} else if (d->has_kind) {
		t->kind = d->kind;
	} else if (ctx == D_INPUT) {
		t->kind = ML_TK_INPUT;
	}
	return set_fields(p, g, t, d);
}

/* decl_list: decls separated by ',' up to the closing character. */
static int
decl_list(struct mlt_parser *p, struct mlt_gstate *gs, enum dctx ctx, char close)
{
	struct decl d;
	int ti;
	bool first = true;

	while (!mlt_is(&p->tok, close)) {
		if (!first)
			ML_TRY(mlt_expect(p, ','));
		first = false;
		int rc = parse_decl(p, ctx, &d);
		if (rc == 0)
			rc = apply_decl(p, gs, &d, ctx, &ti);
		bool explicit_kind = d.has_kind;
		enum ml_tkind kind = d.kind;
		decl_clear(&d);
		if (rc < 0)
			return rc;
		if (ctx == D_INPUT || ctx == D_OUTPUT) {
			struct ml_err e2 = { 0 };
			if ((ctx == D_INPUT ? ml_graph_add_input(gs->g, ti, &e2) :
			     ml_graph_add_output(gs->g, ti, &e2)) < 0)
				return mlt_nomem(p);
			/* add_input turns an act into an input; an explicit kind wins */
			if (explicit_kind)
				gs->g->tensors[ti]->kind = kind;
		}
	}
	return mlt_next(p);
}

/*
 * Attribute values.
 */
struct aval {
	enum ml_attr_type type;
	int64_t i;
	double f;
	char *s;
	size_t s_len;
	struct ml_tensor *t;
	struct ml_graph *g;
};

static int
attr_tensor(struct mlt_parser *p, struct ml_graph *g, struct ml_tensor **out)
{
	struct decl d;
	int rc = parse_decl(p, D_ATTR, &d);
	if (rc < 0)
		goto out;
	struct ml_tensor *t = ml_graph_alloc(g, sizeof *t);
	if (t == NULL || (t->name = ml_graph_strdup(g, d.name != NULL ? d.name : "")) == NULL) {
		rc = mlt_nomem(p);
		goto out;
	}
	t->rank = -1;
	t->producer = -1;
	t->device = -1;
	t->arena_off = -1;
	t->kind = d.has_kind ? d.kind : d.has_lit ? ML_TK_CONST : ML_TK_ACT;
	if ((rc = set_fields(p, g, t, &d)) < 0)
		goto out;
	if (d.has_lit) {
		if ((t->data = ml_graph_alloc(g, d.nbytes + 1)) == NULL) {
			rc = mlt_nomem(p);
			goto out;
		}
		memcpy(t->data, d.data, d.nbytes);
		t->nbytes = d.nbytes;
	}
	*out = t;
out:
	decl_clear(&d);
	return rc;
}

static int
attr_graph(struct mlt_parser *p, struct ml_graph *g, struct ml_graph **out)
{
	struct ml_graph *sub;
	if (ml_graph_new(&sub, p->e) < 0)
		return mlt_nomem(p);
	sub->parent = g;
	int rc = parse_graph(p, sub, false);
	if (rc < 0) {
		ml_graph_free(sub);
		return rc;
	}
	*out = sub;
	return 0;
}

static int
parse_scalar(struct mlt_parser *p, struct ml_graph *g, struct aval *v)
{
	struct mlt_tok nx;
	enum ml_tkind k;
	enum ml_dtype dt;

	memset(v, 0, sizeof *v);
	if (p->tok.kind == MLT_NUMBER || mlt_word(&p->tok, "inf") || mlt_word(&p->tok, "nan")) {
		if (p->tok.is_float || p->tok.kind == MLT_IDENT) {
			v->type = ML_ATTR_FLOAT;
			ML_TRY(mlt_attr_float(p, &p->tok, &v->f));
		} else {
			v->type = ML_ATTR_INT;
			ML_TRY(mlt_tok_int(p, &p->tok, &v->i));
		}
		return mlt_next(p);
	}
	if (mlt_is(&p->tok, '<')) {
		v->type = ML_ATTR_GRAPH;
		return attr_graph(p, g, &v->g);
	}
	if (!mlt_is_name(&p->tok))
		return mlt_err_expected(p, "an attribute value");
	ML_TRY(mlt_peek_tok(p, &nx));
	if (mlt_is(&nx, '(')) {
		v->type = ML_ATTR_GRAPH;
		return attr_graph(p, g, &v->g);
	}
	if (p->tok.kind == MLT_STRING) {
		v->type = ML_ATTR_STRING;
		return mlt_take_string(p, g, &v->s, &v->s_len, false);
	}
	if (is_kind_word(&p->tok, &k) || is_dtype_word(&p->tok, &dt)) {
		v->type = ML_ATTR_TENSOR;
		return attr_tensor(p, g, &v->t);
	}
	return mlt_err_expected(p, "an attribute value");
}

static enum ml_attr_type
atype_lookup(const struct mlt_tok *t)
{
	static const char *const w[] = { NULL, "float", "int", "string", "tensor", "graph",
					 "floats", "ints", "strings", "tensors", "graphs" };
	for (int i = 1; i <= ML_ATTR_GRAPHS; i++)
		if (mlt_word(t, w[i]))
			return (enum ml_attr_type)i;
	return ML_ATTR_UNDEF;
}

static void
free_avals(struct aval *v, int n)
{
	for (int i = 0; i < n; i++)
		ml_graph_free(v[i].g);
	ml_free(v);
}

/* fill_list: the attribute a of list type ty from the n values in v (graphs move to a). */
static int
fill_list(struct mlt_parser *p, struct ml_graph *g, struct ml_attr *a, enum ml_attr_type ty,
	  struct aval *v, int n)
{
	size_t m = (size_t)n + 1;
	switch (ty) {
	case ML_ATTR_INTS:
		if ((a->ints = ml_graph_alloc(g, sizeof *a->ints * m)) == NULL)
			return mlt_nomem(p);
		for (int i = 0; i < n; i++)
			a->ints[i] = v[i].i;
		break;
	case ML_ATTR_FLOATS:
		if ((a->floats = ml_graph_alloc(g, sizeof *a->floats * m)) == NULL)
			return mlt_nomem(p);
		for (int i = 0; i < n; i++)
			a->floats[i] = v[i].type == ML_ATTR_INT ? (double)v[i].i : v[i].f;
		break;
	case ML_ATTR_STRINGS:
		if ((a->strings = ml_graph_alloc(g, sizeof *a->strings * m)) == NULL)
			return mlt_nomem(p);
		for (int i = 0; i < n; i++) {
			if (strlen(v[i].s) != v[i].s_len)
				return mlt_err(p, NULL, ML_EFORMAT,
					       "a string in a list cannot contain a NUL byte");
			a->strings[i] = v[i].s;
		}
		break;
	case ML_ATTR_TENSORS:
		if ((a->tensors = ml_graph_alloc(g, sizeof *a->tensors * m)) == NULL)
			return mlt_nomem(p);
		for (int i = 0; i < n; i++)
			a->tensors[i] = v[i].t;
		break;
	case ML_ATTR_GRAPHS:
		if ((a->graphs = ml_graph_alloc(g, sizeof *a->graphs * m)) == NULL)
			return mlt_nomem(p);
		for (int i = 0; i < n; i++) {
			a->graphs[i] = v[i].g;
			v[i].g = NULL;
		}
		break;
	default:
		break;
	}
	/* set last: attrs_free reads n graphs only once they are in place */
	a->type = ty;
	a->n = n;
	return 0;
}

static enum ml_attr_type
list_of(enum ml_attr_type t)
{
	switch (t) {
	case ML_ATTR_INT: return ML_ATTR_INTS;
	case ML_ATTR_FLOAT: return ML_ATTR_FLOATS;
	case ML_ATTR_STRING: return ML_ATTR_STRINGS;
	case ML_ATTR_TENSOR: return ML_ATTR_TENSORS;
	case ML_ATTR_GRAPH: return ML_ATTR_GRAPHS;
	default: return ML_ATTR_UNDEF;
	}
}

/*
 * parse_value: an attribute value into a (name set by the caller). The
 * payload goes to g's arena; a subgraph is owned by a once the call returns.
 */
static int
parse_value(struct mlt_parser *p, struct ml_graph *g, struct ml_attr *a, enum ml_attr_type forced,
	    const struct mlt_tok *at)
{
	if (!mlt_is(&p->tok, '[')) {
		struct aval v;
		if (forced >= ML_ATTR_FLOATS)
			return mlt_err(p, NULL, ML_EFORMAT, "expected a list for this type");
		ML_TRY(parse_scalar(p, g, &v));
		if (forced == ML_ATTR_FLOAT && v.type == ML_ATTR_INT) {
			v.type = ML_ATTR_FLOAT;
			v.f = (double)v.i;
		}
		if (forced != ML_ATTR_UNDEF && forced != v.type) {
			ml_graph_free(v.g);
			return mlt_err(p, at, ML_EFORMAT, "the value does not have the type named");
		}
		a->i = v.i;
		a->f = v.f;
		a->s = v.s;
		a->s_len = v.s_len;
		if (v.type == ML_ATTR_TENSOR) {
			if ((a->tensors = ml_graph_alloc(g, sizeof *a->tensors)) == NULL)
				return mlt_nomem(p);
			a->tensors[0] = v.t;
			a->n = 1;
		} else if (v.type == ML_ATTR_GRAPH) {
			if ((a->graphs = ml_graph_alloc(g, sizeof *a->graphs)) == NULL) {
				ml_graph_free(v.g);
				return mlt_nomem(p);
			}
			a->graphs[0] = v.g;
			a->n = 1;
		}
		a->type = v.type;
		return 0;
	}
	if (forced != ML_ATTR_UNDEF && forced < ML_ATTR_FLOATS)
		return mlt_err(p, NULL, ML_EFORMAT, "expected a single value for this type");
	struct mlt_tok open = p->tok;
	struct aval *v = NULL;
	int n = 0, cap = 0, rc = 0;
	unsigned seen = 0;
	enum ml_attr_type ty = forced;
	if ((rc = mlt_next(p)) < 0)
		return rc;
	while (!mlt_is(&p->tok, ']')) {
		if (n > 0 && (rc = mlt_expect(p, ',')) < 0)
			goto out;
		if (n == MLT_MAX_LIST) {
			rc = mlt_err(p, NULL, ML_EFORMAT, "a list is longer than %d", MLT_MAX_LIST);
			goto out;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			struct aval *b = ml_realloc(v, sizeof *v * (size_t)cap);
			if (b == NULL) {
				rc = mlt_nomem(p);
				goto out;
			}
			v = b;
		}
		if ((rc = parse_scalar(p, g, &v[n])) < 0)
			goto out;
		seen |= 1u << v[n].type;
		n++;
	}
	ty = forced;
	if (seen == (1u << ML_ATTR_INT) && forced == ML_ATTR_FLOATS)
		seen = 1u << ML_ATTR_FLOAT;
	if (seen == ((1u << ML_ATTR_INT) | (1u << ML_ATTR_FLOAT)))
		seen = 1u << ML_ATTR_FLOAT;
	if (n == 0) {
		if (ty == ML_ATTR_UNDEF)
			ty = ML_ATTR_INTS;
	} else {
		enum ml_attr_type el = ML_ATTR_UNDEF;
		for (int t = ML_ATTR_FLOAT; t <= ML_ATTR_GRAPH; t++)
			if (seen == 1u << t)
				el = (enum ml_attr_type)t;
		if (el == ML_ATTR_UNDEF) {
			rc = mlt_err(p, &open, ML_EFORMAT, "a list mixes values of different types");
			goto out;
		}
		if (ty != ML_ATTR_UNDEF && ty != list_of(el)) {
			rc = mlt_err(p, at, ML_EFORMAT, "the list does not have the type named");
			goto out;
		}
		ty = list_of(el);
	}
	if ((rc = fill_list(p, g, a, ty, v, n)) < 0)
		goto out;
	rc = mlt_next(p);
out:
	free_avals(v, n);	/* graphs that moved to a are NULL here */
	return rc;
}

/*
 * Nodes and statements.
 */
struct attrs {
	struct ml_attr *v;
	int n, cap;
};

static void
attrs_free(struct attrs *as)
{
	for (int i = 0; i < as->n; i++) {
		struct ml_attr *a = &as->v[i];
		if (a->type == ML_ATTR_GRAPH || a->type == ML_ATTR_GRAPHS)
			for (int k = 0; k < a->n; k++)
				ml_graph_free(a->graphs[k]);
	}
	ml_free(as->v);
	memset(as, 0, sizeof *as);
}

static int
parse_attrs(struct mlt_parser *p, struct ml_graph *g, struct attrs *as)
{
	ML_TRY(mlt_next(p));	/* '<' */
	while (!mlt_is(&p->tok, '>')) {
		if (as->n > 0)
			ML_TRY(mlt_expect(p, ','));
		if (as->n == as->cap) {
			int cap = as->cap ? as->cap * 2 : 8;
			struct ml_attr *b = ml_realloc(as->v, sizeof *b * (size_t)cap);
			if (b == NULL)
				return mlt_nomem(p);
			as->v = b;
			as->cap = cap;
		}
		struct ml_attr *a = &as->v[as->n];
		memset(a, 0, sizeof *a);
		struct mlt_tok at = p->tok;
		char *s;
		if (!mlt_is_name(&p->tok))
			return mlt_err_expected(p, "an attribute name");
		ML_TRY(mlt_tok_cstr(p, &p->tok, &s, MLT_MAX_NAME));
		if ((a->name = ml_graph_strdup(g, s)) == NULL)
			return mlt_nomem(p);
		ML_TRY(mlt_next(p));
		enum ml_attr_type forced = ML_ATTR_UNDEF;
		if (mlt_is(&p->tok, ':')) {
			ML_TRY(mlt_next(p));
			if ((forced = atype_lookup(&p->tok)) == ML_ATTR_UNDEF)
				return mlt_err_expected(p, "an attribute type");
			ML_TRY(mlt_next(p));
		}
		ML_TRY(mlt_expect(p, '='));
		as->n++;	/* counted now so a subgraph read in part is freed */
		ML_TRY(parse_value(p, g, a, forced, &at));
	}
	return mlt_next(p);
}

/* name_list: NAME (',' NAME)* up to (not including) a token that is not ','. */
static int
name_list(struct mlt_parser *p, struct mlt_strv *sv, char close)
{
	while (!mlt_is(&p->tok, close)) {
		char *s;
		if (sv->n > 0)
			ML_TRY(mlt_expect(p, ','));
		if (sv->n >= (1 << 20))
			return mlt_err(p, NULL, ML_EFORMAT, "too many names in a list");
		ML_TRY(mlt_take_name(p, &s));
		if (mlt_strv_push(sv, s) < 0)
			return mlt_nomem(p);
	}
	return 0;
}

static int
parse_node(struct mlt_parser *p, struct mlt_gstate *gs)
{
	struct ml_graph *g = gs->g;
	struct mlt_strv outs = { 0 }, ins = { 0 };
	struct attrs as = { 0 };
	char *nname = NULL, *op = NULL, *dom = NULL;
	int device = -1, rc = 0;
	double cost = 0;
	bool prefix = false;
	struct mlt_tok nx, start = p->tok;

#define T(x) do { if ((rc = (x)) < 0) goto out; } while (0)
	if (mlt_is(&p->tok, '[')) {
		prefix = true;
		T(mlt_next(p));
		T(mlt_peek_tok(p, &nx));
		if (mlt_is_name(&p->tok) && !mlt_is(&nx, '='))
			T(mlt_take_name(p, &nname));
		bool first = nname == NULL;
		while (!mlt_is(&p->tok, ']')) {
			if (!first)
				T(mlt_expect(p, ','));
			first = false;
			struct mlt_tok key = p->tok;
			T(mlt_next(p));
			T(mlt_expect(p, '='));
			if (mlt_word(&key, "device")) {
				int64_t v;
				T(mlt_take_int(p, -1, INT32_MAX, &v));
				device = (int)v;
			} else if (mlt_word(&key, "cost_us")) {
				T(mlt_tok_double(p, &p->tok, &cost));
				T(mlt_next(p));
			} else {
				rc = mlt_err(p, &key, ML_EFORMAT, "unknown node field (device, cost_us)");
				goto out;
			}
		}
		T(mlt_next(p));
	}
	if (!prefix && mlt_is_layer(&p->tok)) {
		T(mlt_peek_tok(p, &nx));
		if (!mlt_is(&nx, '=') && !mlt_is(&nx, ',')) {
			struct mlt_tok kw = p->tok;
			rc = mlt_layer(p, gs, &kw, NULL);
			goto out;
		}
	}
	T(name_list(p, &outs, '='));
	T(mlt_expect(p, '='));
	if (mlt_is_layer(&p->tok)) {
		if (prefix || outs.n != 1) {
			rc = mlt_err(p, &start, ML_EFORMAT,
				     "a layer takes one output name and no [...] prefix");
			goto out;
		}
		struct mlt_tok kw = p->tok;
		rc = mlt_layer(p, gs, &kw, outs.v[0]);
		goto out;
	}
	struct mlt_tok optok = p->tok;
	if (p->tok.kind == MLT_IDENT) {
		const char *dot = NULL;
		for (size_t i = 0; i < p->tok.n; i++)
			if (p->tok.s[i] == '.')
				dot = p->tok.s + i;
		size_t dl = dot != NULL ? (size_t)(dot - p->tok.s) : 0;
		size_t ol = p->tok.n - (dot != NULL ? dl + 1 : 0);
		dom = ml_malloc(dl + 1);
		op = ml_malloc(ol + 1);
		if (dom == NULL || op == NULL) {
			rc = mlt_nomem(p);
			goto out;
		}
		memcpy(dom, p->tok.s, dl);
		dom[dl] = '\0';
		memcpy(op, p->tok.s + (dot != NULL ? dl + 1 : 0), ol);
		op[ol] = '\0';
		T(mlt_next(p));
	} else if (p->tok.kind == MLT_STRING) {
		T(mlt_take_name(p, &op));
		if (mlt_is(&p->tok, '.')) {
			T(mlt_next(p));
			dom = op;
			op = NULL;
			if (p->tok.kind != MLT_STRING) {
				rc = mlt_err_expected(p, "an op name string");
				goto out;
			}
			T(mlt_take_name(p, &op));
		}
	} else {
		rc = mlt_err_expected(p, "an op or a layer");
		goto out;
	}
	if (op[0] == '\0') {
		rc = mlt_err(p, &optok, ML_EFORMAT, "an op needs a name");
		goto out;
	}
	if (mlt_is(&p->tok, '<'))
		T(parse_attrs(p, g, &as));
	T(mlt_expect(p, '('));
	T(name_list(p, &ins, ')'));
	T(mlt_next(p));
	struct ml_err e2 = { 0 };
	int ni = ml_graph_add_node(g, op, dom != NULL ? dom : "", nname, ins.n,
				   (const char *const *)ins.v, outs.n, (const char *const *)outs.v, &e2);
	if (ni < 0) {
		rc = mlt_err(p, &start, ni, "%s", e2.msg);
		goto out;
	}
	struct ml_node *n = &g->nodes[ni];
	n->device = device;
	n->cost_us = cost;
	if (as.n > 0) {
		if ((n->attrs = ml_graph_alloc(g, sizeof *n->attrs * (size_t)as.n)) == NULL) {
			rc = mlt_nomem(p);
			goto out;
		}
		memcpy(n->attrs, as.v, sizeof *n->attrs * (size_t)as.n);
		n->n_attr = as.n;
		as.n = 0;	/* the node owns the subgraphs now */
	}
	if (mlt_gs_grow(gs) < 0) {
		rc = mlt_nomem(p);
		goto out;
	}
	mlt_infer_node(gs, ni);
	if (n->n_out > 0 && n->out[0] >= 0)
		gs->prev = n->out[0];
out:
#undef T
	mlt_strv_free(&outs);
	mlt_strv_free(&ins);
	attrs_free(&as);
	ml_free(nname);
	ml_free(op);
	ml_free(dom);
	return rc;
}

/*
 * Header.
 */
struct hdr {
	bool has_ir, has_opsets;
	struct mlt_strv slots;
	struct mlt_tok slots_at;
};

static int
skip_value(struct mlt_parser *p)
{
	if (p->tok.kind != MLT_STRING && p->tok.kind != MLT_NUMBER)
		return mlt_err_expected(p, "a string or a number");
	return mlt_next(p);
}

/*
 * parse_run: the training state's `run: {NAME: number, ...}`, the fields
 * of TrainRun (lib/train/state.def); absent ones are zero, as in the
 * message.
 */
static int
parse_run(struct mlt_parser *p, struct ml_graph *g, struct ml_train *t)
{
	if ((t->run = ml_graph_alloc(g, sizeof *t->run)) == NULL)
		return mlt_nomem(p);
	struct ml_train_state *st = t->run;
	ML_TRY(mlt_expect(p, '{'));
	bool first = true;
	while (!mlt_is(&p->tok, '}')) {
		if (!first)
			ML_TRY(mlt_expect(p, ','));
		first = false;
		struct mlt_tok key = p->tok;
		if (key.kind != MLT_IDENT)
			return mlt_err_expected(p, "a run field");
		ML_TRY(mlt_next(p));
		ML_TRY(mlt_expect(p, ':'));
		double d;
		int64_t i;
		uint64_t u;
#define DBL(m) ML_TRY(mlt_tok_double(p, &p->tok, &d)); st->m = d
#define I64(m) ML_TRY(mlt_tok_int(p, &p->tok, &i)); st->m = i
#define U64(m) ML_TRY(mlt_tok_u64(p, &p->tok, &u)); st->m = u
#define INT(m) \
	ML_TRY(mlt_tok_int(p, &p->tok, &i)); \
	if (i < INT32_MIN || i > INT32_MAX) \
		return mlt_err(p, NULL, ML_EFORMAT, "%lld is out of range", (long long)i); \
	st->m = (int)i
#define BOOL(m) \
	ML_TRY(mlt_tok_int(p, &p->tok, &i)); \
	if (i != 0 && i != 1) \
		return mlt_err(p, NULL, ML_EFORMAT, "expected 0 or 1"); \
	st->m = i != 0
#define LOSS(m) INT(m)
#define OPTIM(m) INT(m)
#define SCHED(m) INT(m)
#define X(name, member, type) \
		if (mlt_word(&key, #name)) { \
			type(member); \
		} else
#include "train/state.def"
#undef X
#undef DBL
#undef I64
#undef U64
#undef INT
#undef BOOL
#undef LOSS
#undef OPTIM
#undef SCHED
		{
			return mlt_err(p, &key, ML_EFORMAT, "unknown run field '%.*s'",
				       (int)ML_MIN(key.n, 64), key.s);
		}
		ML_TRY(mlt_next(p));
	}
	return mlt_next(p);
}

static int
parse_training(struct mlt_parser *p, struct ml_graph *g, struct hdr *h)
{
	struct ml_train *t = ml_graph_alloc(g, sizeof *t);
	if (t == NULL)
		return mlt_nomem(p);
	g->train = t;
	ML_TRY(mlt_expect(p, '{'));
	bool first = true;
	while (!mlt_is(&p->tok, '}')) {
		if (!first)
			ML_TRY(mlt_expect(p, ','));
		first = false;
		struct mlt_tok key = p->tok;
		if (key.kind != MLT_IDENT)
			return mlt_err_expected(p, "a training field");
		ML_TRY(mlt_next(p));
		ML_TRY(mlt_expect(p, ':'));
		if (mlt_word(&key, "step") || mlt_word(&key, "epoch")) {
			ML_TRY(mlt_tok_u64(p, &p->tok, mlt_word(&key, "step") ? &t->step : &t->epoch));
			ML_TRY(mlt_next(p));
		} else if (mlt_word(&key, "optimizer")) {
			ML_TRY(mlt_take_string(p, g, &t->optimizer, NULL, true));
		} else if (mlt_word(&key, "config")) {
			ML_TRY(mlt_take_string(p, g, &t->config, NULL, true));
		} else if (mlt_word(&key, "run")) {
			ML_TRY(parse_run(p, g, t));
		} else if (mlt_word(&key, "rng")) {
			if (p->tok.kind != MLT_BASE64)
				return mlt_err_expected(p, "base64\"...\"");
			int64_t n = mlt_b64_decoded_len(p->tok.s, p->tok.n);
			if (n < 0)
				return mlt_err(p, NULL, ML_EFORMAT, "malformed base64 data");
			if ((t->rng = ml_graph_alloc(g, (size_t)n + 1)) == NULL)
				return mlt_nomem(p);
			if (mlt_b64_decode(p->tok.s, p->tok.n, t->rng, (size_t)n) < 0)
				return mlt_err(p, NULL, ML_EFORMAT, "malformed base64 data");
			t->rng_len = (size_t)n;
			ML_TRY(mlt_next(p));
		} else if (mlt_word(&key, "slots")) {
			h->slots_at = p->tok;
			mlt_strv_free(&h->slots);
			ML_TRY(mlt_expect(p, '['));
			ML_TRY(name_list(p, &h->slots, ']'));
			ML_TRY(mlt_next(p));
		} else {
			return mlt_err(p, &key, ML_EFORMAT, "unknown training field '%.*s'",
				       (int)ML_MIN(key.n, 64), key.s);
		}
	}
	return mlt_next(p);
}

static int
parse_header(struct mlt_parser *p, struct ml_graph *g, struct hdr *h)
{
	struct ml_err e2 = { 0 };
	ML_TRY(mlt_next(p));	/* '<' */
	bool first = true;
	while (!mlt_is(&p->tok, '>')) {
		if (!first)
			ML_TRY(mlt_expect(p, ','));
		first = false;
		struct mlt_tok key = p->tok;
		if (key.kind != MLT_IDENT)
			return mlt_err_expected(p, "a header field");
		ML_TRY(mlt_next(p));
		ML_TRY(mlt_expect(p, ':'));
		if (mlt_word(&key, "ir_version")) {
			ML_TRY(mlt_take_int(p, INT64_MIN, INT64_MAX, &g->ir_version));
			h->has_ir = true;
		} else if (mlt_word(&key, "arena_bytes")) {
			ML_TRY(mlt_take_int(p, INT64_MIN, INT64_MAX, &g->arena_bytes));
		} else if (mlt_word(&key, "seed")) {
			ML_TRY(mlt_tok_u64(p, &p->tok, &p->seed));
			ML_TRY(mlt_next(p));
		} else if (mlt_word(&key, "producer_name")) {
			ML_TRY(mlt_take_string(p, g, &g->producer, NULL, true));
		} else if (mlt_word(&key, "opset_import") || mlt_word(&key, "metadata_props")) {
			bool ops = mlt_word(&key, "opset_import");
			h->has_opsets |= ops;
			ML_TRY(mlt_expect(p, '['));
			bool f2 = true;
			while (!mlt_is(&p->tok, ']')) {
				char *k, *v;
				int64_t ver;
				if (!f2)
					ML_TRY(mlt_expect(p, ','));
				f2 = false;
				ML_TRY(mlt_take_string(p, g, &k, NULL, true));
				ML_TRY(mlt_expect(p, ':'));
				if (ops) {
					ML_TRY(mlt_take_int(p, INT64_MIN, INT64_MAX, &ver));
					if (ml_graph_set_opset(g, k, ver, &e2) < 0)
						return mlt_nomem(p);
				} else {
					ML_TRY(mlt_take_string(p, g, &v, NULL, true));
					if (ml_graph_set_meta(g, k, v, &e2) < 0)
						return mlt_nomem(p);
				}
			}
			ML_TRY(mlt_next(p));
		} else if (mlt_word(&key, "training")) {
			ML_TRY(parse_training(p, g, h));
		} else if (mlt_word(&key, "producer_version") || mlt_word(&key, "domain") ||
			   mlt_word(&key, "model_version") || mlt_word(&key, "doc_string")) {
			ML_TRY(skip_value(p));
		} else {
			return mlt_err(p, &key, ML_EFORMAT, "unknown header field '%.*s'",
				       (int)ML_MIN(key.n, 64), key.s);
		}
	}
	return mlt_next(p);
}

/*
 * Graphs.
 */
static int
parse_body(struct mlt_parser *p, struct mlt_gstate *gs)
{
	struct mlt_tok open = p->tok;
	ML_TRY(mlt_expect(p, '{'));
	while (!mlt_is(&p->tok, '}')) {
		if (p->tok.kind == MLT_EOF)
			return mlt_err(p, &open, ML_EFORMAT, "this '{' is never closed");
		ML_TRY(parse_node(p, gs));
	}
	return mlt_next(p);
}

static int
parse_graph(struct mlt_parser *p, struct ml_graph *g, bool top)
{
	struct hdr h = { 0 };
	struct mlt_gstate gs = { .g = g, .prev = -1 };
	struct ml_err e2 = { 0 };
	int rc = 0;

#define T(x) do { if ((rc = (x)) < 0) goto out; } while (0)
	if (++p->depth > MLT_MAX_DEPTH) {
		rc = mlt_err(p, NULL, ML_EFORMAT, "subgraphs nest deeper than %d", MLT_MAX_DEPTH);
		goto out;
	}
	if (mlt_is(&p->tok, '<'))
		T(parse_header(p, g, &h));
	if (top && !h.has_ir)
		g->ir_version = 8;
	if (top && !h.has_opsets && ml_graph_set_opset(g, "", 17, &e2) < 0) {
		rc = mlt_nomem(p);
		goto out;
	}
	char *name;
	if (!mlt_is_name(&p->tok)) {
		rc = mlt_err_expected(p, "a graph name");
		goto out;
	}
	T(mlt_tok_cstr(p, &p->tok, &name, MLT_MAX_NAME));
	if ((g->name = ml_graph_strdup(g, name)) == NULL) {
		rc = mlt_nomem(p);
		goto out;
	}
	T(mlt_next(p));
	T(mlt_expect(p, '('));
	T(decl_list(p, &gs, D_INPUT, ')'));
	if (p->tok.kind != MLT_ARROW) {
		rc = mlt_err_expected(p, "'=>'");
		goto out;
	}
	T(mlt_next(p));
	T(mlt_expect(p, '('));
	T(decl_list(p, &gs, D_OUTPUT, ')'));
	if (mlt_is(&p->tok, '<')) {
		T(mlt_next(p));
		T(decl_list(p, &gs, D_VALUE, '>'));
	}
	for (int i = 0; i < g->n_inputs && gs.prev < 0; i++)
		if (g->tensors[g->inputs[i]]->kind == ML_TK_INPUT)
			gs.prev = g->inputs[i];
	T(parse_body(p, &gs));
	while (top && p->tok.kind != MLT_EOF) {
		struct decl d;
		int ti;
		rc = parse_decl(p, D_VALUE, &d);
		if (rc == 0)
			rc = apply_decl(p, &gs, &d, D_VALUE, &ti);
		decl_clear(&d);
		if (rc < 0)
			goto out;
	}
	if (h.slots.n > 0) {
		if ((g->train->slots = ml_graph_alloc(g, sizeof(int) * (size_t)h.slots.n)) == NULL) {
			rc = mlt_nomem(p);
			goto out;
		}
		for (int i = 0; i < h.slots.n; i++) {
			int ti = ml_graph_find(g, h.slots.v[i]);
			if (ti < 0) {
				rc = mlt_err(p, &h.slots_at, ML_EFORMAT,
					     "training slot '%s' names no tensor", h.slots.v[i]);
				goto out;
			}
			g->train->slots[g->train->n_slots++] = ti;
		}
	}
out:
#undef T
	p->depth--;
	mlt_strv_free(&h.slots);
	ml_free(gs.declared);
	ml_free(gs.shp);
	return rc;
}

int
ml_text_decode(struct ml_graph **out, const char *text, size_t len, const char *path,
	       struct ml_err *e)
{
	struct mlt_parser p = { .text = text, .end = text + len, .path = path, .e = e };
	struct ml_graph *g = NULL;
	int rc;

	*out = NULL;
	if (len > INT32_MAX)
		return ml_fail(e, ML_EFORMAT, "%s: a text graph of %zu bytes is too big",
			       path != NULL ? path : "<text>", len);
	p.pos.p = text;
	p.pos.line = 1;
	p.pos.col = 1;
	/* a UTF-8 byte order mark is not part of the text */
	if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
		p.pos.p += 3;
	if ((rc = ml_graph_new(&g, e)) < 0)
		return rc;
	if ((rc = mlt_next(&p)) == 0 && (rc = parse_graph(&p, g, true)) == 0 &&
	    p.tok.kind != MLT_EOF)
		rc = mlt_err_expected(&p, "the end of the file");
	ml_free(p.sbuf);
	if (rc < 0) {
		ml_graph_free(g);
		return rc;
	}
	*out = g;
	return 0;
}
