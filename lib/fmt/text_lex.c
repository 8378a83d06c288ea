/*
 * text_lex.c: the lexer of the .mlt text form and the readers of its
 * tokens (names, strings, numbers), with the error messages that point at
 * a line and column. text.c defines the lexical rules.
 */
#include <errno.h>
#include <stdarg.h>

#include "text.h"

/*
 * Errors and tokens.
 */
static void
tok_desc(const struct mlt_tok *t, char *buf, size_t n)
{
	switch (t->kind) {
	case MLT_EOF:
		snprintf(buf, n, "the end of the file");
		return;
	case MLT_STRING:
		snprintf(buf, n, "a string");
		return;
	case MLT_BASE64:
		snprintf(buf, n, "base64 data");
		return;
	default:
		break;
	}
	size_t k = t->n > 24 ? 24 : t->n;
	snprintf(buf, n, "'%.*s%s'", (int)k, t->s, t->n > k ? "..." : "");
}

int
mlt_err(struct mlt_parser *p, const struct mlt_tok *at, int code, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (at == NULL)
		at = &p->tok;
	if (p->path != NULL)
		return ml_fail(p->e, code, "%s:%d:%d: %s", p->path, at->line, at->col, msg);
	return ml_fail(p->e, code, "%d:%d: %s", at->line, at->col, msg);
}

int
mlt_err_expected(struct mlt_parser *p, const char *what)
{
	char d[64];
	tok_desc(&p->tok, d, sizeof d);
	return mlt_err(p, NULL, ML_EFORMAT, "expected %s, found %s", what, d);
}

int
mlt_nomem(struct mlt_parser *p)
{
	return mlt_err(p, NULL, ML_ENOMEM, "out of memory");
}

static bool
is_id0(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool
is_digit(int c)
{
	return c >= '0' && c <= '9';
}

static bool
is_id(int c)
{
	return is_id0(c) || is_digit(c) || c == '.';
}

/*
 * lex: the token at *pos into t, advancing *pos past it. Lexical errors
 * are reported here so their positions are exact.
 */
static int
lex(struct mlt_parser *p, struct mlt_pos *pos, struct mlt_tok *t)
{
	const char *s = pos->p, *end = p->end;
	int line = pos->line, col = pos->col;

	for (;;) {
		if (s == end)
			break;
		if (*s == '\n') {
			line++;
			col = 1;
			s++;
		} else if (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\f' || *s == '\v') {
			s++;
			col++;
		} else if (*s == '#') {
			while (s < end && *s != '\n')
				s++;
		} else {
			break;
		}
	}
	memset(t, 0, sizeof *t);
	t->line = line;
	t->col = col;
	t->s = s;
	if (s == end) {
		t->kind = MLT_EOF;
		goto done;
	}
	int c = (unsigned char)*s;
	if (is_id0(c)) {
		const char *q = s;
		while (q < end && is_id((unsigned char)*q))
			q++;
		if (q - s > MLT_MAX_NAME)
			return mlt_err(p, t, ML_EFORMAT, "an identifier is longer than %d bytes",
				       MLT_MAX_NAME);
		if (q - s == 6 && memcmp(s, "base64", 6) == 0 && q < end && *q == '"') {
			const char *r = q + 1;
			int l2 = line, c2 = col + 7;
			const int8_t *tab = mlt_b64_table();
			while (r < end && *r != '"') {
				int v = tab[(unsigned char)*r];
				if (*r == '\n') {
					l2++;
					c2 = 1;
				} else if (v == -1) {
					struct mlt_tok at = { .line = l2, .col = c2 };
					return mlt_err(p, &at, ML_EFORMAT,
						       "bad character in base64 data");
				} else {
					c2++;
				}
				r++;
			}
			if (r == end)
				return mlt_err(p, t, ML_EFORMAT, "unterminated base64 data");
			t->kind = MLT_BASE64;
			t->s = q + 1;
			t->n = (size_t)(r - q - 1);
			s = r + 1;
			line = l2;
			col = c2 + 1;
			goto done;
		}
		t->kind = MLT_IDENT;
		t->n = (size_t)(q - s);
		col += (int)(q - s);
		s = q;
		goto done;
	}
	if (c == '"') {
		const char *q = s + 1;
		while (q < end && *q != '"') {
			if (*q == '\n')
				break;
			if (*q == '\\' && q + 1 < end && q[1] != '\n')
				q++;
			q++;
		}
		if (q >= end || *q != '"')
			return mlt_err(p, t, ML_EFORMAT, "unterminated string");
		if (q - s - 1 > MLT_MAX_STRING)
			return mlt_err(p, t, ML_EFORMAT, "a string is longer than %d bytes",
				       MLT_MAX_STRING);
		t->kind = MLT_STRING;
		t->s = s + 1;
		t->n = (size_t)(q - s - 1);
		col += (int)(q - s) + 1;
		s = q + 1;
		goto done;
	}
	if (is_digit(c) || ((c == '-' || c == '+') && s + 1 < end &&
			    (is_digit((unsigned char)s[1]) || s[1] == '.' || s[1] == 'i' ||
			     s[1] == 'n'))) {
		const char *q = s;
		if (*q == '-' || *q == '+')
			q++;
		if (*q == 'i' || *q == 'n') {
			while (q < end && is_id((unsigned char)*q) && q - s <= MLT_MAX_NUMBER)
				q++;
			t->is_float = true;
		} else {
			bool hex = q + 1 < end && q[0] == '0' && (q[1] == 'x' || q[1] == 'X');
			if (hex)
				q += 2;
			while (q < end && q - s <= MLT_MAX_NUMBER) {
				int d = (unsigned char)*q;
				if (d == '.' || (!hex && (d == 'e' || d == 'E')) ||
				    (hex && (d == 'p' || d == 'P')))
					t->is_float = true;
				if (is_id0(d) || is_digit(d) || d == '.') {
					q++;
				} else if ((d == '+' || d == '-') &&
					   ((!hex && (q[-1] == 'e' || q[-1] == 'E')) ||
					    (hex && (q[-1] == 'p' || q[-1] == 'P')))) {
					q++;
				} else {
					break;
				}
			}
		}
		if (q - s > MLT_MAX_NUMBER)
			return mlt_err(p, t, ML_EFORMAT, "a number is longer than %d characters",
				       MLT_MAX_NUMBER);
		t->kind = MLT_NUMBER;
		t->n = (size_t)(q - s);
		col += (int)(q - s);
		s = q;
		goto done;
	}
	if (c == '=' && s + 1 < end && s[1] == '>') {
		t->kind = MLT_ARROW;
		t->n = 2;
		s += 2;
		col += 2;
		goto done;
	}
	if (c != 0 && strchr("()[]{}<>,=:.?", c) != NULL) {
		t->kind = MLT_PUNCT;
		t->n = 1;
		s++;
		col++;
		goto done;
	}
	if (c >= 0x21 && c < 0x7f)
		return mlt_err(p, t, ML_EFORMAT, "unexpected character '%c'", c);
	return mlt_err(p, t, ML_EFORMAT, "unexpected byte 0x%02x", (unsigned)c);
done:
	pos->p = s;
	pos->line = line;
	pos->col = col;
	return 0;
}

/* mlt_next: consume the current token and read the next one. */
int
mlt_next(struct mlt_parser *p)
{
	return lex(p, &p->pos, &p->tok);
}

/* mlt_peek_tok: the token after the current one, without consuming anything. */
int
mlt_peek_tok(struct mlt_parser *p, struct mlt_tok *t)
{
	struct mlt_pos pos = p->pos;
	return lex(p, &pos, t);
}


bool
mlt_is(const struct mlt_tok *t, char c)
{
	return t->kind == MLT_PUNCT && t->s[0] == c;
}

bool
mlt_word(const struct mlt_tok *t, const char *w)
{
	return t->kind == MLT_IDENT && strlen(w) == t->n && memcmp(t->s, w, t->n) == 0;
}

int
mlt_expect(struct mlt_parser *p, char c)
{
	if (!mlt_is(&p->tok, c)) {
		char what[8] = { '\'', c, '\'', 0 };
		return mlt_err_expected(p, what);
	}
	return mlt_next(p);
}

bool
mlt_is_name(const struct mlt_tok *t)
{
	return t->kind == MLT_IDENT || t->kind == MLT_STRING;
}

static int
hexval(int c)
{
	if (is_digit(c))
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * mlt_tok_text: the text of an identifier, or the decoded bytes of a string,
 * in the parser's scratch buffer (valid until the next call), NUL-terminated.
 */
int
mlt_tok_text(struct mlt_parser *p, const struct mlt_tok *t, char **out, size_t *len)
{
	if (p->sbuf_cap < t->n + 1) {
		char *b = ml_realloc(p->sbuf, t->n + 1);
		if (b == NULL)
			return mlt_nomem(p);
		p->sbuf = b;
		p->sbuf_cap = t->n + 1;
	}
	size_t k = 0;
	if (t->kind != MLT_STRING) {
		memcpy(p->sbuf, t->s, t->n);
		k = t->n;
	} else {
		for (size_t i = 0; i < t->n; i++) {
			char c = t->s[i];
			if (c != '\\') {
				p->sbuf[k++] = c;
				continue;
			}
			struct mlt_tok at = { .line = t->line, .col = t->col + 1 + (int)i };
			c = ++i < t->n ? t->s[i] : 0;
			switch (c) {
			case '"': case '\\': p->sbuf[k++] = c; break;
			case 'n': p->sbuf[k++] = '\n'; break;
			case 'r': p->sbuf[k++] = '\r'; break;
			case 't': p->sbuf[k++] = '\t'; break;
			case 'x': {
				int h = i + 2 < t->n ? hexval((unsigned char)t->s[i + 1]) : -1;
				int l = h >= 0 ? hexval((unsigned char)t->s[i + 2]) : -1;
				if (l < 0)
					return mlt_err(p, &at, ML_EFORMAT,
						       "\\x needs two hexadecimal digits");
				p->sbuf[k++] = (char)(h * 16 + l);
				i += 2;
				break;
			}
			default:
				return mlt_err(p, &at, ML_EFORMAT, "unknown escape in a string");
			}
		}
	}
	p->sbuf[k] = '\0';
	*out = p->sbuf;
	if (len != NULL)
		*len = k;
	return 0;
}

/* mlt_tok_cstr: like mlt_tok_text, refusing NUL bytes and over-long names. */
int
mlt_tok_cstr(struct mlt_parser *p, const struct mlt_tok *t, char **out, size_t max)
{
	size_t n;
	ML_TRY(mlt_tok_text(p, t, out, &n));
	if (strlen(*out) != n)
		return mlt_err(p, t, ML_EFORMAT, "a name cannot contain a NUL byte");
	if (n > max)
		return mlt_err(p, t, ML_EFORMAT, "a name is longer than %zu bytes", max);
	return 0;
}

/* mlt_take_name: consume a NAME token into a new ml_malloc'd string. */
int
mlt_take_name(struct mlt_parser *p, char **out)
{
	char *s;
	if (!mlt_is_name(&p->tok))
		return mlt_err_expected(p, "a name");
	ML_TRY(mlt_tok_cstr(p, &p->tok, &s, MLT_MAX_NAME));
	size_t n = strlen(s);
	if ((*out = ml_malloc(n + 1)) == NULL)
		return mlt_nomem(p);
	memcpy(*out, s, n + 1);
	int rc = mlt_next(p);
	if (rc < 0) {
		/* nothing is returned on failure, so callers free nothing */
		ml_free(*out);
		*out = NULL;
	}
	return rc;
}

/* mlt_take_string: consume a STRING token into g's arena. */
int
mlt_take_string(struct mlt_parser *p, struct ml_graph *g, char **out, size_t *len, bool cstr)
{
	char *s;
	size_t n;
	if (p->tok.kind != MLT_STRING)
		return mlt_err_expected(p, "a string");
	ML_TRY(mlt_tok_text(p, &p->tok, &s, &n));
	if (cstr && strlen(s) != n)
		return mlt_err(p, NULL, ML_EFORMAT, "this string cannot contain a NUL byte");
	if ((*out = ml_graph_strndup(g, s, n)) == NULL)
		return mlt_nomem(p);
	if (len != NULL)
		*len = n;
	return mlt_next(p);
}

static int
num_text(struct mlt_parser *p, const struct mlt_tok *t, char *buf)
{
	if ((t->kind != MLT_NUMBER && !mlt_word(t, "inf") && !mlt_word(t, "nan")) ||
	    t->n > MLT_MAX_NUMBER) {
		char d[64];
		tok_desc(t, d, sizeof d);
		return mlt_err(p, t, ML_EFORMAT, "expected a number, found %s", d);
	}
	memcpy(buf, t->s, t->n);
	buf[t->n] = '\0';
	return 0;
}

int
mlt_tok_int(struct mlt_parser *p, const struct mlt_tok *t, int64_t *v)
{
	char buf[MLT_MAX_NUMBER + 1], *end;
	ML_TRY(num_text(p, t, buf));
	errno = 0;
	long long x = strtoll(buf, &end, 10);
	if (t->is_float || *end != '\0' || end == buf)
		return mlt_err(p, t, ML_EFORMAT, "expected an integer, found '%s'", buf);
	if (errno == ERANGE)
		return mlt_err(p, t, ML_EFORMAT, "integer %s is out of range", buf);
	*v = x;
	return 0;
}

int
mlt_tok_u64(struct mlt_parser *p, const struct mlt_tok *t, uint64_t *v)
{
	char buf[MLT_MAX_NUMBER + 1], *end;
	ML_TRY(num_text(p, t, buf));
	errno = 0;
	unsigned long long x = strtoull(buf, &end, 10);
	if (t->is_float || *end != '\0' || buf[0] == '-' || buf[0] == '+')
		return mlt_err(p, t, ML_EFORMAT, "expected an unsigned integer, found '%s'", buf);
	if (errno == ERANGE)
		return mlt_err(p, t, ML_EFORMAT, "integer %s is out of range", buf);
	*v = x;
	return 0;
}

/* mlt_take_int: consume an INT in [lo, hi]. */
int
mlt_take_int(struct mlt_parser *p, int64_t lo, int64_t hi, int64_t *v)
{
	ML_TRY(mlt_tok_int(p, &p->tok, v));
	if (*v < lo || *v > hi)
		return mlt_err(p, NULL, ML_EFORMAT, "%lld is out of range [%lld, %lld]",
			       (long long)*v, (long long)lo, (long long)hi);
	return mlt_next(p);
}

/* mlt_tok_double: a number read as a double (decimal or hexadecimal, exactly rounded). */
int
mlt_tok_double(struct mlt_parser *p, const struct mlt_tok *t, double *v)
{
	char buf[MLT_MAX_NUMBER + 1], *end;
	ML_TRY(num_text(p, t, buf));
	errno = 0;
	*v = strtod(buf, &end);
	if (*end != '\0' || end == buf)
		return mlt_err(p, t, ML_EFORMAT, "bad number '%s'", buf);
	if (errno == ERANGE && isinf(*v))
		return mlt_err(p, t, ML_EFORMAT, "number %s is out of range", buf);
	return 0;
}

/*
 * mlt_attr_float: a float attribute. Decimal text is read as the nearest
 * float32, which is what ONNX stores; hexadecimal text is an exact double.
 */
int
mlt_attr_float(struct mlt_parser *p, const struct mlt_tok *t, double *v)
{
	char buf[MLT_MAX_NUMBER + 1], *end;
	ML_TRY(num_text(p, t, buf));
	bool hex = strchr(buf, 'x') != NULL || strchr(buf, 'X') != NULL;
	errno = 0;
	*v = hex ? strtod(buf, &end) : (double)strtof(buf, &end);
	if (*end != '\0' || end == buf)
		return mlt_err(p, t, ML_EFORMAT, "bad number '%s'", buf);
	if (errno == ERANGE && isinf(*v))
		return mlt_err(p, t, ML_EFORMAT, "number %s is out of range", buf);
	return 0;
}

int
mlt_strv_push(struct mlt_strv *sv, char *s)
{
	if (sv->n == sv->cap) {
		int cap = sv->cap ? sv->cap * 2 : 8;
		char **v = ml_realloc(sv->v, sizeof *v * (size_t)cap);
		if (v == NULL) {
			ml_free(s);
			return ML_ENOMEM;
		}
		sv->v = v;
		sv->cap = cap;
	}
	sv->v[sv->n++] = s;
	return 0;
}

void
mlt_strv_free(struct mlt_strv *sv)
{
	for (int i = 0; i < sv->n; i++)
		ml_free(sv->v[i]);
	ml_free(sv->v);
	memset(sv, 0, sizeof *sv);
}

