/*
 * prof_diff.c: `mlprof diff`: read two JSON reports back (a small, strict
 * JSON reader with a depth limit), match their nodes, and give each change
 * of time with a 95% confidence interval, so CI can tell a slowdown from
 * noise.
 */
#include <errno.h>

#include "prof.h"

/*
 * The JSON reader. Values form a tree allocated with ml_malloc; numbers
 * are doubles. It accepts exactly RFC 8259 JSON and names the line of the
 * first error.
 */
enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jtype t;
	double num;
	char *str;
	int n;
	struct jv *items;
	char **keys;		/* J_OBJ: the key of each item */
};

struct jparse {
	const char *s, *end, *path;
	int line, depth;
	struct ml_err *e;
};

#define JSON_MAX_DEPTH 64

static void
jv_free(struct jv *v)
{
	if (v == NULL)
		return;
	for (int i = 0; i < v->n; i++) {
		jv_free(&v->items[i]);
		if (v->keys != NULL)
			ml_free(v->keys[i]);
	}
	ml_free(v->items);
	ml_free(v->keys);
	ml_free(v->str);
	memset(v, 0, sizeof *v);
}

static int
jerr(struct jparse *p, const char *what)
{
	return ml_fail(p->e, ML_EFORMAT, "%s: line %d: %s", p->path, p->line, what);
}

static void
jws(struct jparse *p)
{
	while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) {
		if (*p->s == '\n')
			p->line++;
		p->s++;
	}
}

static int jvalue(struct jparse *p, struct jv *v);

static void
put_utf8(char *d, size_t *k, uint32_t c)
{
	if (c < 0x80) {
		d[(*k)++] = (char)c;
	} else if (c < 0x800) {
		d[(*k)++] = (char)(0xc0 | c >> 6);
		d[(*k)++] = (char)(0x80 | (c & 0x3f));
	} else if (c < 0x10000) {
		d[(*k)++] = (char)(0xe0 | c >> 12);
		d[(*k)++] = (char)(0x80 | (c >> 6 & 0x3f));
		d[(*k)++] = (char)(0x80 | (c & 0x3f));
	} else {
		d[(*k)++] = (char)(0xf0 | c >> 18);
		d[(*k)++] = (char)(0x80 | (c >> 12 & 0x3f));
		d[(*k)++] = (char)(0x80 | (c >> 6 & 0x3f));
		d[(*k)++] = (char)(0x80 | (c & 0x3f));
	}
}

static int
hex4(const char *s, uint32_t *out)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

/* jstring: a string literal at p->s (on the opening quote) into a new buffer. */
static int
jstring(struct jparse *p, char **out)
{
	const char *q = ++p->s;
	while (q < p->end && *q != '"') {
		if (*q == '\\')
			q++;
		q++;
	}
	if (q >= p->end)
		return jerr(p, "unterminated string");
	/* escapes never grow: \uXXXX (6 bytes) is at most 4 bytes of UTF-8 */
	char *d = ml_malloc((size_t)(q - p->s) + 1);
	size_t k = 0;
	if (d == NULL)
		return ml_fail(p->e, ML_ENOMEM, "out of memory");
	while (p->s < q) {
		unsigned char c = (unsigned char)*p->s++;
		if (c < 0x20) {
			ml_free(d);
			return jerr(p, "control character in a string");
		}
		if (c != '\\') {
			d[k++] = (char)c;
			continue;
		}
		char x = *p->s++;
		switch (x) {
		case '"': case '\\': case '/': d[k++] = x; break;
		case 'b': d[k++] = '\b'; break;
		case 'f': d[k++] = '\f'; break;
		case 'n': d[k++] = '\n'; break;
		case 'r': d[k++] = '\r'; break;
		case 't': d[k++] = '\t'; break;
		case 'u': {
			uint32_t u, lo;
			if (q - p->s < 4 || hex4(p->s, &u) < 0) {
				ml_free(d);
				return jerr(p, "bad \\u escape");
			}
			p->s += 4;
			if (u >= 0xd800 && u < 0xdc00 && q - p->s >= 6 && p->s[0] == '\\' &&
			    p->s[1] == 'u' && hex4(p->s + 2, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000) {
				u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
				p->s += 6;
			}
			put_utf8(d, &k, u);
			break;
		}
		default:
			ml_free(d);
			return jerr(p, "bad escape in a string");
		}
	}
	d[k] = '\0';
	p->s = q + 1;
	*out = d;
	return 0;
}

static int
jnumber(struct jparse *p, struct jv *v)
{
	const char *q = p->s;
	if (q < p->end && *q == '-')
		q++;
	if (q >= p->end || *q < '0' || *q > '9')
		return jerr(p, "bad number");
	if (*q == '0')
		q++;
	else
		while (q < p->end && *q >= '0' && *q <= '9')
			q++;
	if (q < p->end && *q == '.') {
		q++;
		if (q >= p->end || *q < '0' || *q > '9')
			return jerr(p, "bad number");
		while (q < p->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < p->end && (*q == 'e' || *q == 'E')) {
		q++;
		if (q < p->end && (*q == '+' || *q == '-'))
			q++;
		if (q >= p->end || *q < '0' || *q > '9')
			return jerr(p, "bad number");
		while (q < p->end && *q >= '0' && *q <= '9')
			q++;
	}
	char tmp[64];
	if (q - p->s >= (long)sizeof tmp)
		return jerr(p, "number too long");
	memcpy(tmp, p->s, (size_t)(q - p->s));
	tmp[q - p->s] = '\0';
	v->t = J_NUM;
	v->num = strtod(tmp, NULL);
	p->s = q;
	return 0;
}

/* jpush: append a zeroed item (and key slot) to an array or object. */
static struct jv *
jpush(struct jv *v, int *cap, bool keyed)
{
	if (v->n == *cap) {
		int nc = *cap ? *cap * 2 : 8;
		struct jv *ni = ml_realloc(v->items, sizeof *ni * (size_t)nc);
		if (ni == NULL)
			return NULL;
		v->items = ni;
		if (keyed) {
			char **nk = ml_realloc(v->keys, sizeof *nk * (size_t)nc);
			if (nk == NULL)
				return NULL;
			v->keys = nk;
		}
		*cap = nc;
	}
	memset(&v->items[v->n], 0, sizeof v->items[v->n]);
	if (keyed)
		v->keys[v->n] = NULL;
	return &v->items[v->n++];
}

static int
jcompound(struct jparse *p, struct jv *v, bool obj)
{
	int cap = 0;
	char close = obj ? '}' : ']';
	v->t = obj ? J_OBJ : J_ARR;
	p->s++;
	if (++p->depth > JSON_MAX_DEPTH)
		return jerr(p, "nested too deeply");
	jws(p);
	if (p->s < p->end && *p->s == close) {
		p->s++;
		p->depth--;
		return 0;
	}
	for (;;) {
		char *key = NULL;
		jws(p);
		if (obj) {
			if (p->s >= p->end || *p->s != '"')
				return jerr(p, "expected a key");
			ML_TRY(jstring(p, &key));
			jws(p);
			if (p->s >= p->end || *p->s != ':') {
				ml_free(key);
				return jerr(p, "expected ':'");
			}
			p->s++;
		}
		struct jv *it = jpush(v, &cap, obj);
		if (it == NULL) {
			ml_free(key);
			return ml_fail(p->e, ML_ENOMEM, "out of memory");
		}
		if (obj)
			v->keys[v->n - 1] = key;
		ML_TRY(jvalue(p, it));
		jws(p);
		if (p->s < p->end && *p->s == ',') {
			p->s++;
			continue;
		}
		if (p->s < p->end && *p->s == close) {
			p->s++;
			p->depth--;
			return 0;
		}
		return jerr(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
	}
}

static int
jword(struct jparse *p, const char *w)
{
	size_t n = strlen(w);
	if ((size_t)(p->end - p->s) < n || memcmp(p->s, w, n) != 0)
		return jerr(p, "unexpected character");
	p->s += n;
	return 0;
}

static int
jvalue(struct jparse *p, struct jv *v)
{
	jws(p);
	if (p->s >= p->end)
		return jerr(p, "unexpected end of file");
	switch (*p->s) {
	case '{': return jcompound(p, v, true);
	case '[': return jcompound(p, v, false);
	case '"': v->t = J_STR; return jstring(p, &v->str);
	case 't': v->t = J_BOOL; v->num = 1; return jword(p, "true");
	case 'f': v->t = J_BOOL; return jword(p, "false");
	case 'n': v->t = J_NULL; return jword(p, "null");
	default: return jnumber(p, v);
	}
}

static int
json_load(const char *path, struct jv *root, struct ml_err *e)
{
	uint8_t *buf;
	size_t len;
	memset(root, 0, sizeof *root);
	ML_TRY(ml_read_file(path, &buf, &len, e));
	struct jparse p = { (const char *)buf, (const char *)buf + len, path, 1, 0, e };
	int rc = jvalue(&p, root);
	if (rc == 0) {
		jws(&p);
		if (p.s != p.end)
			rc = jerr(&p, "text after the JSON value");
	}
	if (rc < 0)
		jv_free(root);
	ml_free(buf);
	return rc;
}

static const struct jv *
jget(const struct jv *o, const char *key)
{
	if (o == NULL || o->t != J_OBJ)
		return NULL;
	for (int i = 0; i < o->n; i++)
		if (strcmp(o->keys[i], key) == 0)
			return &o->items[i];
	return NULL;
}

static double
jgetnum(const struct jv *o, const char *key, double def)
{
	const struct jv *v = jget(o, key);
	return v != NULL && v->t == J_NUM ? v->num : def;
}

static const char *
jgetstr(const struct jv *o, const char *key)
{
	const struct jv *v = jget(o, key);
	return v != NULL && v->t == J_STR ? v->str : "";
}

/*
 * A timed thing of a report (a node or the total): its summary and, when
 * the report has them, the samples (milliseconds).
 */
struct dstat {
	const char *name, *op;
	int index;
	double median, mean, sd;
	int64_t n;
	double *x;
	int nx;
	bool used;
};

struct dreport {
	const char *model, *device;
	const char *sig;	/* the model's signature; "" in reports older than it */
	int64_t runs;
	struct dstat total;
	struct dstat *nodes;
	int nn;
};

static int
dstat_of(const struct jv *o, const char *sfx, const char *samples, struct dstat *d,
	 struct ml_err *e)
{
	char k[32];
	memset(d, 0, sizeof *d);
	snprintf(k, sizeof k, "median%s", sfx);
	d->median = jgetnum(o, k, NAN);
	snprintf(k, sizeof k, "mean%s", sfx);
	d->mean = jgetnum(o, k, d->median);
	snprintf(k, sizeof k, "stddev%s", sfx);
	d->sd = jgetnum(o, k, NAN);
	d->n = (int64_t)jgetnum(o, *sfx ? "calls" : "n", 0);
	const struct jv *s = jget(o, samples);
	if (s != NULL && s->t == J_ARR && s->n > 0) {
		if ((d->x = ml_calloc((size_t)s->n, sizeof *d->x)) == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		for (int i = 0; i < s->n; i++)
			if (s->items[i].t == J_NUM && isfinite(s->items[i].num))
				d->x[d->nx++] = s->items[i].num;
		if (d->n <= 0)
			d->n = d->nx;
	}
	return 0;
}

static void
dreport_free(struct dreport *r)
{
	ml_free(r->total.x);
	for (int i = 0; i < r->nn; i++)
		ml_free(r->nodes[i].x);
	ml_free(r->nodes);
}

static int
dreport_of(const struct jv *root, const char *path, struct dreport *r, struct ml_err *e)
{
	memset(r, 0, sizeof *r);
	const struct jv *prof = jget(root, "profiles");
	if (prof != NULL && prof->t == J_ARR && prof->n > 0)
		root = &prof->items[0];
	const struct jv *total = jget(root, "total"), *nodes = jget(root, "nodes");
	const struct jv *wall = jget(total, "wall_ms");
	if (root->t != J_OBJ || nodes == NULL || nodes->t != J_ARR || wall == NULL ||
	    !isfinite(jgetnum(wall, "median", NAN)))
		return ml_fail(e, ML_EFORMAT,
			       "%s: not an mlprof JSON report (it needs \"nodes\" and \"total\".\"wall_ms\")",
			       path);
	r->model = jgetstr(root, "model");
	r->device = jgetstr(root, "device");
	r->sig = jgetstr(root, "signature");
	r->runs = (int64_t)jgetnum(root, "runs", 0);
	ML_TRY(dstat_of(wall, "", "samples", &r->total, e));
	r->total.name = "total";
	r->total.op = "";
	if ((r->nodes = ml_calloc((size_t)nodes->n + 1, sizeof *r->nodes)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < nodes->n; i++) {
		const struct jv *nd = &nodes->items[i];
		if (nd->t != J_OBJ || !isfinite(jgetnum(nd, "median_ms", NAN)))
			return ml_fail(e, ML_EFORMAT, "%s: node %d of the report has no \"median_ms\"",
				       path, i);
		ML_TRY(dstat_of(nd, "_ms", "samples_ms", &r->nodes[i], e));
		r->nodes[i].name = jgetstr(nd, "name");
		r->nodes[i].op = jgetstr(nd, "op");
		r->nodes[i].index = (int)jgetnum(nd, "index", i);
		r->nn++;
	}
	return 0;
}

/*
 * Confidence intervals. With samples on both sides: a percentile bootstrap
 * of median(b) / median(a) - 1, seeded so a diff is reproducible. Without:
 * Welch's t interval on the means, as a relative change of a's mean.
 */
struct change {
	double a, b;		/* the medians, ms */
	double rel;		/* b / a - 1 */
	double lo, hi;		/* 95% interval of rel; NAN when unknown */
	const char *method;
};

static double
resample_median(const double *x, int n, double *tmp, uint64_t *rng)
{
	for (int i = 0; i < n; i++)
		tmp[i] = x[ml_splitmix64(rng) % (uint64_t)n];
	return mlprof_median(tmp, n);
}

/* t_975: the 97.5% quantile of Student's t with df degrees of freedom. */
static double
t_975(double df)
{
	static const double tab[] = { 0, 12.706, 4.303, 3.182, 2.776, 2.571 };
	if (df < 1)
		return NAN;
	if (df < 5.5)
		return tab[(int)(df + 0.5)];
	/* Cornish-Fisher expansion about the normal quantile, good to 1e-3 from df 5 */
	double z = 1.959964, z3 = z * z * z, z5 = z3 * z * z;
	return z + (z3 + z) / (4 * df) + (5 * z5 + 16 * z3 + 3 * z) / (96 * df * df);
}

static int
cmp_d(const void *x, const void *y)
{
	double u = *(const double *)x, v = *(const double *)y;
	return u < v ? -1 : u > v;
}

static int
change_of(const struct dstat *a, const struct dstat *b, uint64_t seed, int iters, struct change *c,
	  struct ml_err *e)
{
	c->a = a->median;
	c->b = b->median;
	c->rel = a->median > 0 ? b->median / a->median - 1 : NAN;
	c->lo = c->hi = NAN;
	c->method = "none";
	if (a->nx >= 2 && b->nx >= 2 && a->median > 0) {
		int m = ML_MAX(a->nx, b->nx), k = 0;
		double *tmp = ml_calloc((size_t)m, sizeof *tmp), *rs = ml_calloc((size_t)iters, sizeof *rs);
		if (tmp == NULL || rs == NULL) {
			ml_free(tmp);
			ml_free(rs);
			return ml_fail(e, ML_ENOMEM, "out of memory");
		}
		uint64_t rng = seed;
		for (int it = 0; it < iters; it++) {
			double ma = resample_median(a->x, a->nx, tmp, &rng);
			double mb = resample_median(b->x, b->nx, tmp, &rng);
			if (ma > 0)
				rs[k++] = mb / ma - 1;
		}
		if (k >= 40) {
			qsort(rs, (size_t)k, sizeof *rs, cmp_d);
			c->lo = rs[(int)(0.025 * (k - 1) + 0.5)];
			c->hi = rs[(int)(0.975 * (k - 1) + 0.5)];
			c->method = "bootstrap";
		}
		ml_free(tmp);
		ml_free(rs);
		return 0;
	}
	/* Welch: both sides need a spread and at least two runs */
	if (a->n >= 2 && b->n >= 2 && isfinite(a->sd) && isfinite(b->sd) && a->mean > 0) {
		double va = a->sd * a->sd / (double)a->n, vb = b->sd * b->sd / (double)b->n;
		double se = sqrt(va + vb), d = b->mean - a->mean;
		double df = va + vb > 0 ? (va + vb) * (va + vb) /
			(va * va / (double)(a->n - 1) + vb * vb / (double)(b->n - 1)) : 1e9;
		double t = t_975(df);
		c->lo = (d - t * se) / a->mean;
		c->hi = (d + t * se) / a->mean;
		c->method = "welch";
	}
	return 0;
}

static const char *
pct(double x, char *buf, size_t n)
{
	if (!isfinite(x))
		snprintf(buf, n, "?");
	else
		snprintf(buf, n, "%+.1f%%", 100 * x);
	return buf;
}

static void
ms(double x, char *buf, size_t n)
{
	if (!isfinite(x))
		snprintf(buf, n, "-");
	else
		mlprof_fmt_time(x / 1e3, buf, n);
}

/* struct drow: one line of the diff: a node of a, of b, or of both. */
struct drow {
	const struct dstat *a, *b;
	struct change c;
};

static int
cmp_drow(const void *x, const void *y)
{
	const struct drow *u = x, *v = y;
	double du = fabs((u->b ? u->b->median : 0) - (u->a ? u->a->median : 0));
	double dv = fabs((v->b ? v->b->median : 0) - (v->a ? v->a->median : 0));
	if (du != dv)
		return du < dv ? 1 : -1;
	int iu = u->a ? u->a->index : u->b->index, iv = v->a ? v->a->index : v->b->index;
	return iu < iv ? -1 : iu > iv;
}

/*
 * match: the node of b that is a's node x: the one of the same name, or
 * where x has no name or b repeats it, the one of the same index and op.
 */
static struct dstat *
match(struct dreport *b, const struct dstat *x)
{
	if (x->name[0] != '\0') {
		struct dstat *hit = NULL;
		int count = 0;
		for (int i = 0; i < b->nn; i++)
			if (strcmp(b->nodes[i].name, x->name) == 0) {
				hit = &b->nodes[i];
				count++;
			}
		if (count == 1)
			return hit->used ? NULL : hit;
		if (count == 0)
			return NULL;
	}
	for (int i = 0; i < b->nn; i++)
		if (!b->nodes[i].used && b->nodes[i].index == x->index &&
		    strcmp(b->nodes[i].op, x->op) == 0)
			return &b->nodes[i];
	return NULL;
}

static void
jchange(FILE *fp, const struct change *c)
{
	fprintf(fp, "\"a_ms\": ");
	ml_json_num(fp, c->a);
	fprintf(fp, ", \"b_ms\": ");
	ml_json_num(fp, c->b);
	fprintf(fp, ", \"change\": ");
	ml_json_num(fp, c->rel);
	fprintf(fp, ", \"ci95\": [");
	ml_json_num(fp, c->lo);
	fprintf(fp, ", ");
	ml_json_num(fp, c->hi);
	fprintf(fp, "], \"method\": \"%s\"", c->method);
}

int
ml_prof_diff(const char *pa, const char *pb, const struct ml_prof_diff_opts *o, FILE *fp,
	     bool *regressed, struct ml_err *e)
{
	struct jv ja = { 0 }, jb = { 0 };
	struct dreport a = { 0 }, b = { 0 };
	struct drow *rows = NULL;
	struct change tc;
	int nr = 0, rc;
	char s[6][32];

	*regressed = false;
	if ((rc = json_load(pa, &ja, e)) < 0 || (rc = json_load(pb, &jb, e)) < 0)
		goto out;
	if ((rc = dreport_of(&ja, pa, &a, e)) < 0 || (rc = dreport_of(&jb, pb, &b, e)) < 0)
		goto out;
	bool differ = a.sig[0] != '\0' && b.sig[0] != '\0' && strcmp(a.sig, b.sig) != 0;
	if (differ && !o->force) {
		rc = ml_fail(e, ML_EINVAL, "%s and %s profile different models (%s; %s); "
			     "--force compares them anyway", pa, pb, a.sig, b.sig);
		goto out;
	}
	if (differ && e != NULL) {
		snprintf(e->msg, sizeof e->msg, "warning: %s and %s profile different models "
			 "(%s; %s)", pa, pb, a.sig, b.sig);
		e->code = 0;
	}
	if ((rows = ml_calloc((size_t)(a.nn + b.nn) + 1, sizeof *rows)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < a.nn; i++) {
		struct dstat *m = match(&b, &a.nodes[i]);
		rows[nr].a = &a.nodes[i];
		rows[nr].b = m;
		if (m != NULL) {
			m->used = true;
			if ((rc = change_of(&a.nodes[i], m, 0x5eed0000u + (uint64_t)i, 1000, &rows[nr].c,
					    e)) < 0)
				goto out;
		}
		nr++;
	}
	for (int i = 0; i < b.nn; i++)
		if (!b.nodes[i].used)
			rows[nr++].b = &b.nodes[i];
	if ((rc = change_of(&a.total, &b.total, 0x5eedull, 4000, &tc, e)) < 0)
		goto out;
	qsort(rows, (size_t)nr, sizeof *rows, cmp_drow);
	/* beyond the threshold, and so beyond noise: the whole interval is above it */
	*regressed = isfinite(tc.lo) ? tc.lo > o->threshold : isfinite(tc.rel) && tc.rel > o->threshold;
	int shown = o->top > 0 && o->top < nr ? (int)o->top : nr;

	if (o->as_json) {
		fprintf(fp, "{\"a\": ");
		ml_json_str(fp, pa);
		fprintf(fp, ", \"b\": ");
		ml_json_str(fp, pb);
		fprintf(fp, ", \"threshold\": ");
		ml_json_num(fp, o->threshold);
		fprintf(fp, ", \"regressed\": %s, \"same_model\": %s,\n \"total\": {",
			*regressed ? "true" : "false", differ ? "false" : "true");
		jchange(fp, &tc);
		fprintf(fp, "},\n \"nodes\": [");
		for (int k = 0; k < shown; k++) {
			const struct drow *r = &rows[k];
			const struct dstat *x = r->a ? r->a : r->b;
			fprintf(fp, "%s\n  {\"name\": ", k ? "," : "");
			ml_json_str(fp, x->name);
			fprintf(fp, ", \"op\": ");
			ml_json_str(fp, x->op);
			fprintf(fp, ", \"index\": %d, \"status\": \"%s\"", x->index,
				r->a && r->b ? "both" : r->a ? "removed" : "added");
			if (r->a && r->b) {
				fputs(", ", fp);
				jchange(fp, &r->c);
			} else {
				fprintf(fp, ", \"%s\": ", r->a ? "a_ms" : "b_ms");
				ml_json_num(fp, x->median);
			}
			fputc('}', fp);
		}
		fputs("\n]}\n", fp);
		goto out;
	}
	fprintf(fp, "a: %s (%s, %s, %lld runs)\nb: %s (%s, %s, %lld runs)\n", pa, a.model,
		a.device[0] ? a.device : "?", (long long)a.runs, pb, b.model,
		b.device[0] ? b.device : "?", (long long)b.runs);
	if (differ)
		fprintf(fp, "different models: a is %s; b is %s\n", a.sig, b.sig);
	int wk = 4, wo = 2;
	for (int k = 0; k < shown; k++) {
		const struct dstat *x = rows[k].a ? rows[k].a : rows[k].b;
		wk = ML_MAX(wk, (int)strlen(x->name[0] ? x->name : "#0000"));
		wo = ML_MAX(wo, (int)strlen(x->op));
	}
	wk = ML_MIN(wk, 40);
	wo = ML_MIN(wo, 20);
	fprintf(fp, "%-*s  %-*s  %10s  %10s  %8s  %s\n", wk, "node", wo, "op", "a median", "b median",
		"change", "95% CI");
	for (int k = 0; k < shown; k++) {
		const struct drow *r = &rows[k];
		const struct dstat *x = r->a ? r->a : r->b;
		char nm[48], nb[16];
		const char *name = x->name;
		if (name[0] == '\0') {
			snprintf(nb, sizeof nb, "#%d", x->index);
			name = nb;
		}
		if (strlen(name) > (size_t)wk) {
			size_t len = strlen(name), h = ((size_t)wk - 2) / 2;
			snprintf(nm, sizeof nm, "%.*s..%s", (int)h, name, name + len - ((size_t)wk - 2 - h));
			name = nm;
		}
		ms(r->a ? r->a->median : NAN, s[0], 32);
		ms(r->b ? r->b->median : NAN, s[1], 32);
		fprintf(fp, "%-*s  %-*.*s  %10s  %10s", wk, name, wo, wo, x->op, s[0], s[1]);
		if (r->a && r->b && isfinite(r->c.lo))
			fprintf(fp, "  %8s  [%s, %s]\n", pct(r->c.rel, s[2], 32), pct(r->c.lo, s[3], 32),
				pct(r->c.hi, s[4], 32));
		else if (r->a && r->b)
			fprintf(fp, "  %8s\n", pct(r->c.rel, s[2], 32));
		else
			fprintf(fp, "  %8s\n", r->a ? "removed" : "added");
	}
	if (shown < nr)
		fprintf(fp, "(%d more nodes)\n", nr - shown);
	ms(tc.a, s[0], 32);
	ms(tc.b, s[1], 32);
	fprintf(fp, "total: %s -> %s per run (median wall), %s", s[0], s[1], pct(tc.rel, s[2], 32));
	if (isfinite(tc.lo))
		fprintf(fp, ", 95%% CI %s to %s (%s)", pct(tc.lo, s[3], 32), pct(tc.hi, s[4], 32),
			tc.method);
	fputc('\n', fp);
	if (*regressed)
		fprintf(fp, "regression: the total is %.1f%% slower, beyond the %.1f%% threshold\n",
			100 * tc.rel, 100 * o->threshold);
	else
		fprintf(fp, "no regression beyond the %.1f%% threshold\n", 100 * o->threshold);
	rc = 0;
out:
	ml_free(rows);
	dreport_free(&a);
	dreport_free(&b);
	jv_free(&ja);
	jv_free(&jb);
	return rc;
}
