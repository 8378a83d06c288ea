/*
 * text_layers.c: the layer shorthands of the .mlt text form (dense, conv,
 * pool, ...; text.c defines them): their arguments, the shapes they give,
 * and the ops and initialised parameters each one expands into.
 */
#include "text.h"

enum lkind { L_DENSE, L_CONV, L_POOL, L_GPOOL, L_FLATTEN, L_DROPOUT, L_NORM, L_ACT, L_RESHAPE,
	     L_COUNT };

static const char *const lnames[L_COUNT] = { "dense", "conv", "pool", "gpool", "flatten",
					     "dropout", "norm", "act", "reshape" };

bool
mlt_is_layer(const struct mlt_tok *t)
{
	for (int i = 0; i < L_COUNT; i++)
		if (mlt_word(t, lnames[i]))
			return true;
	return false;
}

#define MAX_ARGS 16

/* struct lctx: one layer being expanded. */
struct lctx {
	struct mlt_parser *p;
	struct mlt_gstate *gs;
	struct ml_graph *g;
	struct mlt_tok kw;
	enum lkind kind;
	struct mlt_larg args[MAX_ARGS];
	int nargs;
	char *L;		/* the layer's name, the stem of its tensors' names */
	char *out;		/* its output value */
	char *nb;		/* scratch for composed names */
	int in;			/* its input value */
	struct ml_tval x;	/* what is known of the input */
	enum ml_dtype dt;	/* the parameters' type */
};

/* Activations: word, op_type, domain. Index 0 is none. */
static const char *const acts[][3] = {
	{ "none", NULL, NULL }, { "relu", "Relu", "" }, { "sigmoid", "Sigmoid", "" },
	{ "tanh", "Tanh", "" }, { "gelu", "Gelu", "ml" }, { "silu", "Silu", "ml" },
	{ "softmax", "Softmax", "" }, { "log_softmax", "LogSoftmax", "" },
	{ "leaky_relu", "LeakyRelu", "" }, { "elu", "Elu", "" }, { "softplus", "Softplus", "" },
};
#define N_ACTS ((int)(sizeof acts / sizeof acts[0]))

enum init { INIT_KAIMING, INIT_XAVIER, INIT_HE, INIT_ZEROS };

/*
 * Arguments.
 */
static int
parse_args(struct lctx *c)
{
	struct mlt_parser *p = c->p;
	struct mlt_tok nx;

	if (!mlt_is(&p->tok, '('))
		return 0;
	ML_TRY(mlt_next(p));
	while (!mlt_is(&p->tok, ')')) {
		if (c->nargs > 0)
			ML_TRY(mlt_expect(p, ','));
		if (c->nargs == MAX_ARGS)
			return mlt_err(p, NULL, ML_EFORMAT, "%s: more than %d arguments",
				       lnames[c->kind], MAX_ARGS);
		struct mlt_larg *a = &c->args[c->nargs++];
		memset(a, 0, sizeof *a);
		a->at = p->tok;
		if (p->tok.kind == MLT_IDENT) {
			ML_TRY(mlt_peek_tok(p, &nx));
			if (mlt_is(&nx, '=')) {
				if (p->tok.n >= sizeof a->key)
					return mlt_err(p, NULL, ML_EFORMAT, "unknown argument");
				memcpy(a->key, p->tok.s, p->tok.n);
				a->key[p->tok.n] = '\0';
				ML_TRY(mlt_next(p));
				ML_TRY(mlt_next(p));
			}
		}
		a->val = p->tok;
		if (mlt_is(&p->tok, '[')) {
			ML_TRY(mlt_next(p));
			while (!mlt_is(&p->tok, ']')) {
				if (a->n > 0)
					ML_TRY(mlt_expect(p, ','));
				if (a->n == ML_MAX_RANK * 2)
					return mlt_err(p, NULL, ML_EFORMAT, "a list of more than %d",
						       ML_MAX_RANK * 2);
				ML_TRY(mlt_tok_int(p, &p->tok, &a->ints[a->n]));
				a->n++;
				ML_TRY(mlt_next(p));
			}
		} else if (p->tok.kind != MLT_NUMBER && p->tok.kind != MLT_IDENT &&
			   p->tok.kind != MLT_STRING) {
			char d[40];
			snprintf(d, sizeof d, "a value for %s", lnames[c->kind]);
			return mlt_err(p, NULL, ML_EFORMAT, "expected %s", d);
		}
		ML_TRY(mlt_next(p));
	}
	return mlt_next(p);
}

/* arg: the argument called key, else the pos-th positional one (pos >= 0), or NULL. */
static struct mlt_larg *
arg(struct lctx *c, const char *key, int pos)
{
	int k = 0;
	for (int i = 0; i < c->nargs; i++)
		if (strcmp(c->args[i].key, key) == 0) {
			c->args[i].used = true;
			return &c->args[i];
		}
	for (int i = 0; i < c->nargs && pos >= 0; i++)
		if (c->args[i].key[0] == '\0' && k++ == pos) {
			c->args[i].used = true;
			return &c->args[i];
		}
	return NULL;
}

static int
bad_arg(struct lctx *c, const struct mlt_larg *a, const char *want)
{
	return mlt_err(c->p, &a->at, ML_EFORMAT, "%s: %s%sexpects %s", lnames[c->kind], a->key,
		       a->key[0] ? " " : "", want);
}

static int
arg_int(struct lctx *c, const char *key, int pos, int64_t def, int64_t lo, int64_t hi,
	int64_t *v)
{
	struct mlt_larg *a = arg(c, key, pos);
	*v = def;
	if (a == NULL) {
		if (def < lo)
			return mlt_err(c->p, &c->kw, ML_EFORMAT, "%s needs %s=N", lnames[c->kind],
				       key);
		return 0;
	}
	if (a->val.kind != MLT_NUMBER || a->val.is_float)
		return bad_arg(c, a, "an integer");
	ML_TRY(mlt_tok_int(c->p, &a->val, v));
	if (*v < lo || *v > hi)
		return mlt_err(c->p, &a->val, ML_EFORMAT, "%s: %s %lld is out of range",
			       lnames[c->kind], key, (long long)*v);
	return 0;
}

/* arg_float: a float argument, rounded to float32 as ONNX's float attributes are. */
static int
arg_float(struct lctx *c, const char *key, int pos, double def, bool *given, double *v)
{
	struct mlt_larg *a = arg(c, key, pos);
	*v = def;
	if (given != NULL)
		*given = a != NULL;
	if (a == NULL)
		return 0;
	if (a->val.kind != MLT_NUMBER && !mlt_word(&a->val, "inf"))
		return bad_arg(c, a, "a number");
	ML_TRY(mlt_tok_double(c->p, &a->val, v));
	*v = (double)(float)*v;
	return 0;
}

static bool
val_is(const struct mlt_tok *t, const char *w)
{
	return (t->kind == MLT_IDENT || t->kind == MLT_STRING) && strlen(w) == t->n &&
	       memcmp(t->s, w, t->n) == 0;
}

/* arg_word: the index in words[] of a word argument; def when absent (-1: required). */
static int
arg_word(struct lctx *c, const char *key, int pos, const char *const *words, int nw, int def,
	 int *v)
{
	struct mlt_larg *a = arg(c, key, pos);
	char list[256];
	size_t k = 0;

	*v = def;
	for (int i = 0; i < nw; i++)
		k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? "|" : "", words[i]);
	if (a == NULL) {
		if (def < 0)
			return mlt_err(c->p, &c->kw, ML_EFORMAT, "%s needs %s (%s)",
				       lnames[c->kind], key, list);
		return 0;
	}
	for (int i = 0; i < nw; i++)
		if (val_is(&a->val, words[i])) {
			*v = i;
			return 0;
		}
	return bad_arg(c, a, list);
}

static int
arg_bool(struct lctx *c, const char *key, bool def, bool *v)
{
	static const char *const w[] = { "false", "true", "0", "1" };
	int i;
	ML_TRY(arg_word(c, key, -1, w, 4, def ? 1 : 0, &i));
	*v = i % 2 == 1;
	return 0;
}

/* arg_ints: sp positive values, from one integer or a list of sp; def[] when absent. */
static int
arg_ints(struct lctx *c, const char *key, int sp, const int64_t *def, int64_t *v)
{
	struct mlt_larg *a = arg(c, key, -1);
	for (int i = 0; i < sp; i++)
		v[i] = def[i];
	if (a == NULL)
		return 0;
	if (a->val.kind == MLT_NUMBER && !a->val.is_float) {
		int64_t x;
		ML_TRY(mlt_tok_int(c->p, &a->val, &x));
		for (int i = 0; i < sp; i++)
			v[i] = x;
	} else if (mlt_is(&a->val, '[') && a->n == sp) {
		for (int i = 0; i < sp; i++)
			v[i] = a->ints[i];
	} else {
		char want[48];
		snprintf(want, sizeof want, "an integer or a list of %d", sp);
		return bad_arg(c, a, want);
	}
	for (int i = 0; i < sp; i++)
		if (v[i] < 1 || v[i] > INT32_MAX)
			return bad_arg(c, a, "positive sizes");
	return 0;
}

static int
check_unused(struct lctx *c)
{
	for (int i = 0; i < c->nargs; i++)
		if (!c->args[i].used) {
			if (c->args[i].key[0] != '\0')
				return mlt_err(c->p, &c->args[i].at, ML_EFORMAT,
					       "%s has no argument '%s'", lnames[c->kind],
					       c->args[i].key);
			return mlt_err(c->p, &c->args[i].at, ML_EFORMAT,
				       "%s: too many positional arguments", lnames[c->kind]);
		}
	return 0;
}

/*
 * Shapes, names, parameters and nodes.
 */
static void
shape_str(const struct ml_tval *v, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "%s", (unsigned)v->dtype < ML_DTYPE_MAX ?
				    mlt_dtype_names[v->dtype] : "?");
	if (v->rank < 0)
		return;
	k += (size_t)snprintf(buf + k, n - k, "[");
	for (int i = 0; i < v->rank && k < n; i++) {
		if (v->dims[i] >= 0)
			k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "",
					      (long long)v->dims[i]);
		else
			k += (size_t)snprintf(buf + k, n - k, "%s?", i ? "," : "");
	}
	if (k < n)
		snprintf(buf + k, n - k, "]");
}

/* need: fail unless the input's dim d (from the end when negative) is known. */
static int
need(struct lctx *c, int min_rank, int d, int64_t *size)
{
	char s[128];
	const char *nm = c->g->tensors[c->in]->name;
	shape_str(&c->x, s, sizeof s);
	if (c->x.rank < 0)
		return mlt_err(c->p, &c->kw, ML_EFORMAT,
			       "%s: the shape of '%s' is not known; declare it in the value block",
			       lnames[c->kind], nm);
	if (c->x.rank < min_rank)
		return mlt_err(c->p, &c->kw, ML_EFORMAT, "%s needs a rank %d input, '%s' is %s",
			       lnames[c->kind], min_rank, nm, s);
	if (size == NULL)
		return 0;
	int k = d < 0 ? c->x.rank + d : d;
	if (c->x.dims[k] <= 0)
		return mlt_err(c->p, &c->kw, ML_EFORMAT,
			       "%s needs dim %d of '%s' (%s) to be known", lnames[c->kind], k, nm, s);
	*size = c->x.dims[k];
	return 0;
}

static int
need_float(struct lctx *c)
{
	const char *nm = c->g->tensors[c->in]->name;
	if (c->x.dtype == ML_UNDEF)
		return mlt_err(c->p, &c->kw, ML_EFORMAT,
			       "%s: the type of '%s' is not known; declare it in the value block",
			       lnames[c->kind], nm);
	if (!ml_dtype_is_float(c->x.dtype))
		return mlt_err(c->p, &c->kw, ML_EFORMAT, "%s needs a float input, '%s' is %s",
			       lnames[c->kind], nm, mlt_dtype_names[c->x.dtype]);
	c->dt = c->x.dtype;
	return 0;
}

/* sub: "L" followed by suffix, in c->nb (valid until the next call). */
static const char *
sub(struct lctx *c, const char *suffix)
{
	snprintf(c->nb, strlen(c->L) + 32, "%s%s", c->L, suffix);
	return c->nb;
}

static int
fresh(struct lctx *c, const char *name)
{
	if (ml_graph_find(c->g, name) >= 0)
		return mlt_err(c->p, &c->kw, ML_EFORMAT,
			       "%s: the name '%s' is taken; name the layer's output", lnames[c->kind],
			       name);
	return 0;
}

static int
record(struct lctx *c, const char *name, enum ml_dtype dt, int rank, const int64_t *dims)
{
	int ti = ml_graph_find(c->g, name);
	if (ti < 0 || mlt_gs_grow(c->gs) < 0)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	struct mlt_shape *s = &c->gs->shp[ti];
	memset(s, 0, sizeof *s);
	s->known = true;
	s->v.dtype = dt;
	s->v.rank = rank;
	for (int i = 0; i < rank; i++)
		s->v.dims[i] = dims[i];
	return 0;
}

static uint64_t
fnv1a64(const char *s)
{
	uint64_t h = 14695981039346656037ull;
	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return h;
}

enum fill { F_CONST, F_UNIFORM, F_NORMAL };

/*
 * param: a new tensor L<suffix> of the parameters' type, filled with v
 * (F_CONST), uniform in [-v, v) or normal with deviation v.
 */
static int
param(struct lctx *c, const char *suffix, enum ml_tkind kind, enum ml_dtype dt, int rank,
      const int64_t *dims, enum fill f, double v)
{
	const char *name = sub(c, suffix);
	struct ml_tval tv = { .dtype = dt, .rank = rank };
	struct ml_err e2 = { 0 };

	ML_TRY(fresh(c, name));
	for (int i = 0; i < rank; i++)
		tv.dims[i] = dims[i];
	int64_t n = ml_tval_numel(&tv), nb = ml_tval_nbytes(&tv);
	if (n < 0 || nb < 0)
		return mlt_err(c->p, &c->kw, ML_EFORMAT, "%s: the parameters are too big",
			       lnames[c->kind]);
	int ti = ml_graph_tensor(c->g, name);
	if (ti < 0)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	int rc = ml_graph_set_data(c->g, ti, kind, dt, rank, dims, NULL, (size_t)nb, &e2);
	if (rc < 0)
		return mlt_err(c->p, &c->kw, rc, "%s", e2.msg);
	if (mlt_gs_grow(c->gs) < 0)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	c->gs->declared[ti] = 1;	/* a later declaration of it is a conflict */
	void *data = c->g->tensors[ti]->data;
	uint64_t s = c->p->seed ^ fnv1a64(name);
	for (int64_t i = 0; i < n; i++) {
		double x = v;
		if (f == F_UNIFORM) {
			double u = (double)(ml_splitmix64(&s) >> 11) * 0x1p-53;
			x = (2 * u - 1) * v;
		} else if (f == F_NORMAL) {
			double u1 = (double)((ml_splitmix64(&s) >> 11) + 1) * 0x1p-53;
			double u2 = (double)(ml_splitmix64(&s) >> 11) * 0x1p-53;
			x = v * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
		}
		ml_set_f64(data, dt, i, x);
	}
	return 0;
}

/* weights: the weight and bias of a dense or conv layer per init. */
static int
weights(struct lctx *c, int init, bool bias, int rank, const int64_t *wdims, int64_t nout,
	int64_t fan_in, int64_t fan_out)
{
	double bound = 1 / sqrt((double)fan_in);
	switch (init) {
	case INIT_KAIMING:
		ML_TRY(param(c, ".weight", ML_TK_PARAM, c->dt, rank, wdims, F_UNIFORM, bound));
		break;
	case INIT_XAVIER:
		ML_TRY(param(c, ".weight", ML_TK_PARAM, c->dt, rank, wdims, F_UNIFORM,
			     sqrt(6.0 / (double)(fan_in + fan_out))));
		break;
	case INIT_HE:
		ML_TRY(param(c, ".weight", ML_TK_PARAM, c->dt, rank, wdims, F_NORMAL,
			     sqrt(2.0 / (double)fan_in)));
		break;
	default:
		ML_TRY(param(c, ".weight", ML_TK_PARAM, c->dt, rank, wdims, F_CONST, 0));
		break;
	}
	if (bias)
		ML_TRY(param(c, ".bias", ML_TK_PARAM, c->dt, 1, &nout,
			     init == INIT_KAIMING ? F_UNIFORM : F_CONST,
			     init == INIT_KAIMING ? bound : 0));
	return 0;
}

/*
 * node: add op (domain dom) named L<nsuffix> from the n inputs to out;
 * returns its index. Input names are copied at once, so callers may pass
 * c->nb for one of them.
 */
static int
node(struct lctx *c, const char *op, const char *dom, const char *nsuffix, int n,
     const char *const *ins, const char *out)
{
	struct ml_err e2 = { 0 };
	char *nname = ml_malloc(strlen(c->L) + 32);
	if (nname == NULL)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	snprintf(nname, strlen(c->L) + 32, "%s%s", c->L, nsuffix);
	int ni = ml_graph_add_node(c->g, op, dom, nname, n, ins, 1, &out, &e2);
	ml_free(nname);
	if (ni < 0)
		return mlt_err(c->p, &c->kw, ni, "%s", e2.msg);
	if (dom[0] != '\0' && ml_graph_opset(c->g, dom, -1) < 0 &&
	    ml_graph_set_opset(c->g, dom, 1, &e2) < 0)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	return ni;
}

static int
set_ints(struct lctx *c, int ni, const char *name, int n, const int64_t *v)
{
	if (ml_node_set_ints(c->g, ni, name, n, v) < 0)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	return 0;
}

static int
set_int(struct lctx *c, int ni, const char *name, int64_t v)
{
	if (ml_node_set_int(c->g, ni, name, v) < 0)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	return 0;
}

static int
set_float(struct lctx *c, int ni, const char *name, double v)
{
	if (ml_node_set_float(c->g, ni, name, v) < 0)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	return 0;
}

/* act_node: activation a from in to out, node L<nsuffix>, with its optional arguments. */
static int
act_node(struct lctx *c, int a, const char *in, const char *out, const char *nsuffix,
	 bool has_alpha, double alpha, bool has_axis, int64_t axis)
{
	int ni = node(c, acts[a][1], acts[a][2], nsuffix, 1, &in, out);
	if (ni < 0)
		return ni;
	if (has_alpha)
		ML_TRY(set_float(c, ni, "alpha", alpha));
	if (has_axis)
		ML_TRY(set_int(c, ni, "axis", axis));
	return 0;
}

static int
arg_act(struct lctx *c, int *a)
{
	const char *w[N_ACTS];
	for (int i = 0; i < N_ACTS; i++)
		w[i] = acts[i][0];
	return arg_word(c, "act", -1, w, N_ACTS, 0, a);
}

static int
arg_init(struct lctx *c, int *init)
{
	static const char *const w[] = { "kaiming", "xavier", "he", "zeros" };
	return arg_word(c, "init", -1, w, 4, INIT_KAIMING, init);
}

/*
 * The layers.
 */
static int
l_dense(struct lctx *c)
{
	int64_t units, k;
	int a, init;
	bool bias;

	ML_TRY(arg_int(c, "units", 0, -1, 1, INT32_MAX, &units));
	ML_TRY(arg_act(c, &a));
	ML_TRY(arg_bool(c, "bias", true, &bias));
	ML_TRY(arg_init(c, &init));
	ML_TRY(check_unused(c));
	ML_TRY(need_float(c));
	ML_TRY(need(c, 1, -1, &k));
	int r = c->x.rank;
	bool gemm = r == 2;
	int64_t wd[2] = { gemm ? units : k, gemm ? k : units };
	ML_TRY(weights(c, init, bias, 2, wd, units, k, units));
	int64_t od[ML_MAX_RANK];
	for (int i = 0; i < r; i++)
		od[i] = c->x.dims[i];
	od[r - 1] = units;
	/* pre holds the layer's output name when there is no activation */
	char *pre = ml_malloc(strlen(c->L) + strlen(c->out) + 32), *w = ml_malloc(strlen(c->L) + 32);
	char *b = ml_malloc(strlen(c->L) + 32);
	int rc = 0;
	if (pre == NULL || w == NULL || b == NULL) {
		rc = mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
		goto out;
	}
	strcpy(pre, a != 0 ? sub(c, ".pre") : c->out);
	strcpy(w, sub(c, ".weight"));
	strcpy(b, sub(c, ".bias"));
	const char *xin = c->g->tensors[c->in]->name;
	if (a != 0 && (rc = fresh(c, pre)) < 0)
		goto out;
	if (gemm) {
		const char *ins[3] = { xin, w, b };
		int ni = node(c, "Gemm", "", "", bias ? 3 : 2, ins, pre);
		if ((rc = ni) < 0 || (rc = set_int(c, ni, "transB", 1)) < 0)
			goto out;
	} else {
		const char *mm = bias ? sub(c, ".mm") : pre;
		char *mmc = ml_malloc(strlen(mm) + 1);
		if (mmc == NULL) {
			rc = mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
			goto out;
		}
		strcpy(mmc, mm);
		const char *ins[2] = { xin, w };
		if ((!bias || (rc = fresh(c, mmc)) == 0) &&
		    (rc = node(c, "MatMul", "", "", 2, ins, mmc)) >= 0 && bias) {
			const char *ins2[2] = { mmc, b };
			if ((rc = record(c, mmc, c->dt, r, od)) == 0)
				rc = node(c, "Add", "", ".add", 2, ins2, pre);
		}
		ml_free(mmc);
		if (rc < 0)
			goto out;
	}
	if ((rc = record(c, pre, c->dt, r, od)) < 0)
		goto out;
	if (a != 0 && (rc = act_node(c, a, pre, c->out, ".act", false, 0, false, 0)) < 0)
		goto out;
	rc = record(c, c->out, c->dt, r, od);
out:
	ml_free(pre);
	ml_free(w);
	ml_free(b);
	return rc < 0 ? rc : 0;
}

/*
 * pads: the pads argument for sp spatial dims (explicit begins then ends,
 * as ONNX orders them), or *autopad when SAME needs sizes nobody knows.
 */
static int
pads(struct lctx *c, int sp, const int64_t *k, const int64_t *s, const int64_t *d, int64_t *pd,
     bool *autopad)
{
	struct mlt_larg *a = arg(c, "pad", -1);
	*autopad = false;
	for (int i = 0; i < 2 * sp; i++)
		pd[i] = 0;
	if (a == NULL || val_is(&a->val, "valid"))
		return 0;
	if (val_is(&a->val, "same")) {
		for (int i = 0; i < sp; i++) {
			int64_t in = c->x.dims[2 + i], total;
			if (s[i] == 1) {
				total = d[i] * (k[i] - 1);
			} else if (in > 0) {
				int64_t o = (in + s[i] - 1) / s[i];
				total = ML_MAX(0, (o - 1) * s[i] + d[i] * (k[i] - 1) + 1 - in);
			} else {
				*autopad = true;
				return 0;
			}
			pd[i] = total / 2;
			pd[i + sp] = total - total / 2;
		}
		return 0;
	}
	if (a->val.kind == MLT_NUMBER && !a->val.is_float) {
		int64_t v;
		ML_TRY(mlt_tok_int(c->p, &a->val, &v));
		if (v < 0 || v > INT32_MAX)
			return bad_arg(c, a, "a size of at least 0");
		for (int i = 0; i < 2 * sp; i++)
			pd[i] = v;
		return 0;
	}
	if (mlt_is(&a->val, '[') && (a->n == sp || a->n == 2 * sp)) {
		for (int i = 0; i < 2 * sp; i++) {
			pd[i] = a->ints[a->n == sp ? i % sp : i];
			if (pd[i] < 0 || pd[i] > INT32_MAX)
				return bad_arg(c, a, "sizes of at least 0");
		}
		return 0;
	}
	char want[64];
	snprintf(want, sizeof want, "valid, same, N or a list of %d or %d", sp, 2 * sp);
	return bad_arg(c, a, want);
}

/* spatial: output sizes of a window op; fails when a known size comes out empty. */
static int
spatial(struct lctx *c, int sp, const int64_t *k, const int64_t *s, const int64_t *d,
	const int64_t *pd, bool autopad, int64_t *od)
{
	for (int i = 0; i < sp; i++) {
		int64_t in = c->x.dims[2 + i];
		if (in < 0) {
			od[2 + i] = -1;
		} else if (autopad) {
			od[2 + i] = (in + s[i] - 1) / s[i];
		} else {
			int64_t span = in + pd[i] + pd[i + sp] - d[i] * (k[i] - 1) - 1;
			if (span < 0)
				return mlt_err(c->p, &c->kw, ML_EFORMAT,
					       "%s: the window is bigger than the input (dim %d is %lld)",
					       lnames[c->kind], 2 + i, (long long)in);
			od[2 + i] = span / s[i] + 1;
		}
	}
	return 0;
}

static int
window_attrs(struct lctx *c, int ni, int sp, const int64_t *k, const int64_t *s,
	     const int64_t *pd, bool autopad)
{
	bool any = false;
	for (int i = 0; i < 2 * sp; i++)
		any |= pd[i] != 0;
	ML_TRY(set_ints(c, ni, "kernel_shape", sp, k));
	ML_TRY(set_ints(c, ni, "strides", sp, s));
	if (autopad && ml_node_set_string(c->g, ni, "auto_pad", "SAME_UPPER") < 0)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	if (!autopad && any)
		ML_TRY(set_ints(c, ni, "pads", 2 * sp, pd));
	return 0;
}

static int
l_conv(struct lctx *c)
{
	int64_t f, ch, groups, k[ML_MAX_RANK], s[ML_MAX_RANK], d[ML_MAX_RANK], pd[2 * ML_MAX_RANK];
	int64_t three[ML_MAX_RANK], one[ML_MAX_RANK];
	int a, init;
	bool bias, autopad;

	ML_TRY(arg_int(c, "filters", 0, -1, 1, INT32_MAX, &f));
	ML_TRY(need(c, 3, 1, &ch));
	int r = c->x.rank, sp = r - 2;
	for (int i = 0; i < sp; i++) {
		three[i] = 3;
		one[i] = 1;
	}
	ML_TRY(arg_ints(c, "kernel", sp, three, k));
	ML_TRY(arg_ints(c, "stride", sp, one, s));
	ML_TRY(arg_ints(c, "dilation", sp, one, d));
	ML_TRY(arg_int(c, "groups", -1, 1, 1, INT32_MAX, &groups));
	ML_TRY(pads(c, sp, k, s, d, pd, &autopad));
	ML_TRY(arg_act(c, &a));
	ML_TRY(arg_bool(c, "bias", true, &bias));
	ML_TRY(arg_init(c, &init));
	ML_TRY(check_unused(c));
	ML_TRY(need_float(c));
	if (ch % groups != 0 || f % groups != 0)
		return mlt_err(c->p, &c->kw, ML_EFORMAT,
			       "conv: groups=%lld must divide the %lld input channels and %lld filters",
			       (long long)groups, (long long)ch, (long long)f);
	int64_t wd[ML_MAX_RANK], rf = 1, od[ML_MAX_RANK];
	wd[0] = f;
	wd[1] = ch / groups;
	for (int i = 0; i < sp; i++) {
		wd[2 + i] = k[i];
		if (!ml_mul_ok(rf, k[i], &rf))
			return mlt_err(c->p, &c->kw, ML_EFORMAT, "conv: the kernel is too big");
	}
	ML_TRY(spatial(c, sp, k, s, d, pd, autopad, od));
	od[0] = c->x.dims[0];
	od[1] = f;
	ML_TRY(weights(c, init, bias, r, wd, f, wd[1] * rf, f * rf));

	/* pre holds the layer's output name when there is no activation */
	char *pre = ml_malloc(strlen(c->L) + strlen(c->out) + 32), *w = ml_malloc(strlen(c->L) + 32);
	char *b = ml_malloc(strlen(c->L) + 32);
	int rc = 0;
	if (pre == NULL || w == NULL || b == NULL) {
		rc = mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
		goto out;
	}
	strcpy(pre, a != 0 ? sub(c, ".pre") : c->out);
	strcpy(w, sub(c, ".weight"));
	strcpy(b, sub(c, ".bias"));
	if (a != 0 && (rc = fresh(c, pre)) < 0)
		goto out;
	const char *ins[3] = { c->g->tensors[c->in]->name, w, b };
	int ni = node(c, "Conv", "", "", bias ? 3 : 2, ins, pre);
	if ((rc = ni) < 0 || (rc = window_attrs(c, ni, sp, k, s, pd, autopad)) < 0)
		goto out;
	bool dil = false;
	for (int i = 0; i < sp; i++)
		dil |= d[i] != 1;
	if ((dil && (rc = set_ints(c, ni, "dilations", sp, d)) < 0) ||
	    (groups != 1 && (rc = set_int(c, ni, "group", groups)) < 0) ||
	    (rc = record(c, pre, c->dt, r, od)) < 0)
		goto out;
	if (a != 0 && (rc = act_node(c, a, pre, c->out, ".act", false, 0, false, 0)) < 0)
		goto out;
	rc = record(c, c->out, c->dt, r, od);
out:
	ml_free(pre);
	ml_free(w);
	ml_free(b);
	return rc < 0 ? rc : 0;
}

static int
l_pool(struct lctx *c)
{
	static const char *const modes[] = { "max", "avg" };
	int64_t k[ML_MAX_RANK], s[ML_MAX_RANK], d[ML_MAX_RANK], pd[2 * ML_MAX_RANK], two[ML_MAX_RANK];
	int mode;
	bool autopad;

	ML_TRY(arg_word(c, "mode", 0, modes, 2, 0, &mode));
	ML_TRY(need(c, 3, 0, NULL));
	int r = c->x.rank, sp = r - 2;
	for (int i = 0; i < sp; i++) {
		two[i] = 2;
		d[i] = 1;
	}
	ML_TRY(arg_ints(c, "size", sp, two, k));
	ML_TRY(arg_ints(c, "stride", sp, k, s));
	ML_TRY(pads(c, sp, k, s, d, pd, &autopad));
	ML_TRY(check_unused(c));
	int64_t od[ML_MAX_RANK];
	od[0] = c->x.dims[0];
	od[1] = c->x.dims[1];
	ML_TRY(spatial(c, sp, k, s, d, pd, autopad, od));
	const char *in = c->g->tensors[c->in]->name;
	int ni = node(c, mode == 0 ? "MaxPool" : "AveragePool", "", "", 1, &in, c->out);
	if (ni < 0)
		return ni;
	ML_TRY(window_attrs(c, ni, sp, k, s, pd, autopad));
	return record(c, c->out, c->x.dtype, r, od);
}

static int
l_gpool(struct lctx *c)
{
	static const char *const modes[] = { "avg", "max" };
	int mode;

	ML_TRY(arg_word(c, "mode", 0, modes, 2, 0, &mode));
	ML_TRY(check_unused(c));
	const char *in = c->g->tensors[c->in]->name;
	int ni = node(c, mode == 0 ? "GlobalAveragePool" : "GlobalMaxPool", "", "", 1, &in,
		      c->out);
	if (ni < 0)
		return ni;
	if (c->x.rank < 3)
		return c->x.rank < 0 ? 0 : need(c, 3, 0, NULL);
	int64_t od[ML_MAX_RANK];
	for (int i = 0; i < c->x.rank; i++)
		od[i] = i < 2 ? c->x.dims[i] : 1;
	return record(c, c->out, c->x.dtype, c->x.rank, od);
}

static int64_t
prod(const int64_t *d, int a, int b)
{
	int64_t p = 1;
	for (int i = a; i < b; i++)
		if (d[i] < 0 || !ml_mul_ok(p, d[i], &p))
			return -1;
	return p;
}

static int
l_flatten(struct lctx *c)
{
	int64_t axis;
	ML_TRY(arg_int(c, "axis", 0, 1, -ML_MAX_RANK, ML_MAX_RANK, &axis));
	ML_TRY(check_unused(c));
	const char *in = c->g->tensors[c->in]->name;
	int ni = node(c, "Flatten", "", "", 1, &in, c->out);
	if (ni < 0)
		return ni;
	if (axis != 1)
		ML_TRY(set_int(c, ni, "axis", axis));
	int64_t od[2] = { -1, -1 };
	int r = c->x.rank;
	if (r >= 0) {
		int64_t a = axis < 0 ? axis + r : axis;
		if (a < 0 || a > r)
			return mlt_err(c->p, &c->kw, ML_EFORMAT, "flatten: axis %lld is out of range",
				       (long long)axis);
		od[0] = prod(c->x.dims, 0, (int)a);
		od[1] = prod(c->x.dims, (int)a, r);
	}
	return record(c, c->out, c->x.dtype, 2, od);
}

static int
l_dropout(struct lctx *c)
{
	double rate;
	ML_TRY(arg_float(c, "rate", 0, 0.5, NULL, &rate));
	ML_TRY(check_unused(c));
	if (!(rate >= 0 && rate < 1))
		return mlt_err(c->p, &c->kw, ML_EFORMAT, "dropout: rate must be in [0, 1)");
	const char *ins[2] = { c->g->tensors[c->in]->name, NULL };
	int ni;
	if (ml_graph_opset(c->g, "", 17) >= 12) {
		ML_TRY(param(c, ".ratio", ML_TK_CONST, ML_F32, 0, NULL, F_CONST, rate));
		char *rn = ml_malloc(strlen(c->L) + 32);
		if (rn == NULL)
			return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
		strcpy(rn, sub(c, ".ratio"));
		ins[1] = rn;
		ni = node(c, "Dropout", "", "", 2, ins, c->out);
		ml_free(rn);
		if (ni < 0)
			return ni;
	} else {
		if ((ni = node(c, "Dropout", "", "", 1, ins, c->out)) < 0)
			return ni;
		ML_TRY(set_float(c, ni, "ratio", rate));
	}
	return record(c, c->out, c->x.dtype, c->x.rank, c->x.dims);
}

static int
l_norm(struct lctx *c)
{
	static const char *const kinds[] = { "batch", "layer" };
	int k;
	double eps, mom;
	bool has_eps, has_mom = false;
	int64_t ch;

	ML_TRY(arg_word(c, "type", 0, kinds, 2, -1, &k));
	ML_TRY(arg_float(c, "eps", -1, 1e-5, &has_eps, &eps));
	if (k == 0)
		ML_TRY(arg_float(c, "momentum", -1, 0.9, &has_mom, &mom));
	ML_TRY(check_unused(c));
	ML_TRY(need_float(c));
	ML_TRY(need(c, k == 0 ? 2 : 1, k == 0 ? 1 : -1, &ch));
	ML_TRY(param(c, ".scale", ML_TK_PARAM, c->dt, 1, &ch, F_CONST, 1));
	ML_TRY(param(c, ".bias", ML_TK_PARAM, c->dt, 1, &ch, F_CONST, 0));
	if (k == 0) {
		ML_TRY(param(c, ".mean", ML_TK_CONST, c->dt, 1, &ch, F_CONST, 0));
		ML_TRY(param(c, ".var", ML_TK_CONST, c->dt, 1, &ch, F_CONST, 1));
	}
	size_t ln = strlen(c->L) + 8;
	char *names = ml_malloc(4 * ln);
	if (names == NULL)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	static const char *const sfx[] = { ".scale", ".bias", ".mean", ".var" };
	const char *ins[5] = { c->g->tensors[c->in]->name };
	for (int i = 0; i < 4; i++) {
		snprintf(names + (size_t)i * ln, ln, "%s%s", c->L, sfx[i]);
		ins[1 + i] = names + (size_t)i * ln;
	}
	int ni = node(c, k == 0 ? "BatchNormalization" : "LayerNormalization", "", "",
		      k == 0 ? 5 : 3, ins, c->out);
	ml_free(names);
	if (ni < 0)
		return ni;
	if (k == 1)
		ML_TRY(set_int(c, ni, "axis", -1));
	if (has_eps)
		ML_TRY(set_float(c, ni, "epsilon", eps));
	if (has_mom)
		ML_TRY(set_float(c, ni, "momentum", mom));
	return record(c, c->out, c->x.dtype, c->x.rank, c->x.dims);
}

static int
l_act(struct lctx *c)
{
	const char *w[N_ACTS - 1];
	int a;
	double alpha;
	int64_t axis;
	bool has_alpha;

	for (int i = 1; i < N_ACTS; i++)
		w[i - 1] = acts[i][0];
	ML_TRY(arg_word(c, "fn", 0, w, N_ACTS - 1, -1, &a));
	a++;
	ML_TRY(arg_float(c, "alpha", -1, 0, &has_alpha, &alpha));
	struct mlt_larg *ax = arg(c, "axis", -1);
	if (ax != NULL)
		ax->used = false;
	ML_TRY(arg_int(c, "axis", -1, -1, -ML_MAX_RANK, ML_MAX_RANK, &axis));
	ML_TRY(check_unused(c));
	if (has_alpha && strcmp(acts[a][0], "leaky_relu") != 0 && strcmp(acts[a][0], "elu") != 0)
		return mlt_err(c->p, &c->kw, ML_EFORMAT, "act: %s takes no alpha", acts[a][0]);
	if (ax != NULL && strcmp(acts[a][1], "Softmax") != 0 && strcmp(acts[a][1], "LogSoftmax") != 0)
		return mlt_err(c->p, &c->kw, ML_EFORMAT, "act: %s takes no axis", acts[a][0]);
	ML_TRY(act_node(c, a, c->g->tensors[c->in]->name, c->out, "", has_alpha, alpha, ax != NULL,
			axis));
	return record(c, c->out, c->x.dtype, c->x.rank, c->x.dims);
}

static int
l_reshape(struct lctx *c)
{
	struct mlt_larg *a = arg(c, "shape", 0);
	if (a == NULL)
		return mlt_err(c->p, &c->kw, ML_EFORMAT, "reshape needs shape=[...]");
	if (!mlt_is(&a->val, '[') || a->n > ML_MAX_RANK)
		return bad_arg(c, a, "a list of at most 8 sizes");
	ML_TRY(check_unused(c));
	int64_t n = a->n, od[ML_MAX_RANK], known = 1, total = 1;
	int infer = -1;
	bool copied[ML_MAX_RANK] = { false };
	for (int i = 0; i < a->n; i++) {
		int64_t v = a->ints[i];
		if (v < -1 || (v == -1 && infer >= 0))
			return bad_arg(c, a, "sizes, 0 (copy) and at most one -1");
		od[i] = v == 0 ? (i < c->x.rank ? c->x.dims[i] : -1) : v;
		if (v == -1)
			infer = i;
		else if (v == 0 && i < c->x.rank)
			copied[i] = true;	/* cancels against the same input dim */
		else if (known >= 0 && (od[i] < 0 || !ml_mul_ok(known, od[i], &known)))
			known = -1;
	}
	for (int i = 0; i < c->x.rank && total >= 0; i++)
		if (!copied[i] && (c->x.dims[i] < 0 || !ml_mul_ok(total, c->x.dims[i], &total)))
			total = -1;
	if (c->x.rank < 0)
		total = -1;
	if (infer >= 0)
		od[infer] = total >= 0 && known > 0 && total % known == 0 ? total / known : -1;
	ML_TRY(param(c, ".shape", ML_TK_CONST, ML_I64, 1, &n, F_CONST, 0));
	int ti = ml_graph_find(c->g, sub(c, ".shape"));
	memcpy(c->g->tensors[ti]->data, a->ints, sizeof(int64_t) * (size_t)n);
	char *sn = ml_malloc(strlen(c->nb) + 1);
	if (sn == NULL)
		return mlt_err(c->p, &c->kw, ML_ENOMEM, "out of memory");
	strcpy(sn, c->nb);
	const char *ins[2] = { c->g->tensors[c->in]->name, sn };
	int ni = node(c, "Reshape", "", "", 2, ins, c->out);
	ml_free(sn);
	if (ni < 0)
		return ni;
	return record(c, c->out, c->x.dtype, a->n, od);
}

/*
 * mlt_layer: read the layer statement at kw (the current token) and expand
 * it into g; out_name is the output name written before it, or NULL.
 */
int
mlt_layer(struct mlt_parser *p, struct mlt_gstate *gs, const struct mlt_tok *kw,
	  const char *out_name)
{
	struct lctx c = { .p = p, .gs = gs, .g = gs->g, .kw = *kw, .in = -1 };
	struct ml_graph *g = gs->g;
	int rc = 0;

	for (int i = 0; i < L_COUNT; i++)
		if (mlt_word(kw, lnames[i]))
			c.kind = (enum lkind)i;
	if ((rc = mlt_next(p)) < 0 || (rc = parse_args(&c)) < 0)
		return rc;
	bool last = mlt_is(&p->tok, '}');

	struct mlt_larg *a = arg(&c, "in", -1);
	if (a != NULL) {
		char *nm;
		if (a->val.kind != MLT_IDENT && a->val.kind != MLT_STRING)
			return bad_arg(&c, a, "a value's name");
		ML_TRY(mlt_tok_cstr(p, &a->val, &nm, MLT_MAX_NAME));
		if ((c.in = ml_graph_find(g, nm)) < 0)
			return mlt_err(p, &a->val, ML_EFORMAT, "%s: no value called '%s' yet",
				       lnames[c.kind], nm);
	} else if ((c.in = gs->prev) < 0) {
		return mlt_err(p, kw, ML_EFORMAT,
			       "%s has no input: nothing comes before it; give in=NAME",
			       lnames[c.kind]);
	}
	mlt_shape_of(gs, c.in, &c.x);
	c.x.data = NULL;

	int k = ++gs->nlayer[c.kind];
	const char *L = out_name;
	char auto_name[32];
	if (L == NULL) {
		snprintf(auto_name, sizeof auto_name, "%s%d", lnames[c.kind], k);
		L = auto_name;
	}
	const char *out = L;
	if (out_name == NULL && last && g->n_outputs > 0)
		out = g->tensors[g->outputs[0]]->name;
	c.L = ml_malloc(strlen(L) + 1);
	c.out = ml_malloc(strlen(out) + 1);
	c.nb = ml_malloc(strlen(L) + 32);
	if (c.L == NULL || c.out == NULL || c.nb == NULL) {
		rc = mlt_err(p, kw, ML_ENOMEM, "out of memory");
		goto out;
	}
	strcpy(c.L, L);
	strcpy(c.out, out);
	if (out_name == NULL && out == L && (rc = fresh(&c, out)) < 0)
		goto out;
	int oi = ml_graph_find(g, c.out);
	for (int i = 0; oi >= 0 && i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_out; j++)
			if (g->nodes[i].out[j] == oi) {
				rc = mlt_err(p, kw, ML_EFORMAT, "%s: '%s' is already written by node '%s'",
					     lnames[c.kind], c.out, g->nodes[i].name);
				goto out;
			}
	switch (c.kind) {
	case L_DENSE: rc = l_dense(&c); break;
	case L_CONV: rc = l_conv(&c); break;
	case L_POOL: rc = l_pool(&c); break;
	case L_GPOOL: rc = l_gpool(&c); break;
	case L_FLATTEN: rc = l_flatten(&c); break;
	case L_DROPOUT: rc = l_dropout(&c); break;
	case L_NORM: rc = l_norm(&c); break;
	case L_ACT: rc = l_act(&c); break;
	default: rc = l_reshape(&c); break;
	}
	if (rc == 0)
		gs->prev = ml_graph_find(g, c.out);
out:
	ml_free(c.L);
	ml_free(c.out);
	ml_free(c.nb);
	return rc;
}
