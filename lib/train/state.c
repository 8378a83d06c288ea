/*
 * state.c: the training state that checkpoints written before the TrainRun
 * message kept in model->train->config, read back for ckpt.c: a flat JSON
 * object (mltrain wrote its options and its place in the epoch there)
 * parsed by a small RFC 8259 parser, so a key is found as a key, never as
 * text inside another value. Kept so that old checkpoints resume. See
 * lib/ml_train.h for the contracts.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"

/* Nested objects and arrays are skipped; this deep, the text is refused. */
#define MAX_DEPTH 64

/* The parser's place in the text, and the first error. */
struct parser {
	const char *s, *p;
	struct ml_err *e;
};

/* bad: ML_EFORMAT naming the offset of the error. */
static int
bad(struct parser *ps, const char *what)
{
	return ml_fail(ps->e, ML_EFORMAT, "training state: %s at offset %lld", what,
		       (long long)(ps->p - ps->s));
}

static void
skip_ws(struct parser *ps)
{
	while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
		ps->p++;
}

/* hex4: the value of four hex digits at p, or -1. */
static long
hex4(const char *p)
{
	long v = 0;
	for (int i = 0; i < 4; i++) {
		int c = p[i], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/* put_utf8: code point u as UTF-8 at *q (room for 4 bytes). */
static void
put_utf8(char **q, long u)
{
	char *o = *q;
	if (u < 0x80) {
		*o++ = (char)u;
	} else if (u < 0x800) {
		*o++ = (char)(0xc0 | (u >> 6));
		*o++ = (char)(0x80 | (u & 0x3f));
	} else if (u < 0x10000) {
		*o++ = (char)(0xe0 | (u >> 12));
		*o++ = (char)(0x80 | ((u >> 6) & 0x3f));
		*o++ = (char)(0x80 | (u & 0x3f));
	} else {
		*o++ = (char)(0xf0 | (u >> 18));
		*o++ = (char)(0x80 | ((u >> 12) & 0x3f));
		*o++ = (char)(0x80 | ((u >> 6) & 0x3f));
		*o++ = (char)(0x80 | (u & 0x3f));
	}
	*q = o;
}

/*
 * string: the string at p (which is at its opening quote), unescaped into
 * a new buffer in *out (NULL: checked and skipped). A \u0000 escape is
 * refused: the value is a C string.
 */
static int
string(struct parser *ps, char **out)
{
	const char *p = ps->p + 1;
	size_t n = 0;
	for (const char *t = p; *t != '"'; t++, n++) {
		if (*t == '\0')
			return bad(ps, "unterminated string");
		if (*t == '\\' && t[1] != '\0')
			t++;
	}
	char *buf = out != NULL ? malloc(n + 1) : NULL, *q = buf;
	if (out != NULL && buf == NULL)
		return ml_fail(ps->e, ML_ENOMEM, "out of memory");
	for (; *p != '"'; p++) {
		unsigned char c = (unsigned char)*p;
		if (c < 0x20) {
			ps->p = p;
			free(buf);
			return bad(ps, "control character in a string");
		}
		if (c != '\\') {
			if (q != NULL)
				*q++ = (char)c;
			continue;
		}
		static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
		const char *k = strchr(from, *++p);
		if (*p != 'u' && (k == NULL || *p == '\0')) {
			ps->p = p;
			free(buf);
			return bad(ps, "bad escape in a string");
		}
		if (*p != 'u') {
			if (q != NULL)
				*q++ = to[k - from];
			continue;
		}
		long u = hex4(p + 1);
		p += 4;
		if (u >= 0xd800 && u < 0xdc00 && p[1] == '\\' && p[2] == 'u') {
			long lo = hex4(p + 3);
			if (lo >= 0xdc00 && lo < 0xe000) {
				u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
				p += 6;
			}
		}
		if (u <= 0 || (u >= 0xd800 && u < 0xe000)) {
			ps->p = p;
			free(buf);
			return bad(ps, u == 0 ? "NUL in a string" : "bad \\u escape in a string");
		}
		/* an escape of 6 (or 12) bytes gives at most 3 (or 4): the buffer has room */
		if (q != NULL)
			put_utf8(&q, u);
	}
	if (q != NULL) {
		*q = '\0';
		*out = buf;
	}
	ps->p = p + 1;
	return 0;
}

/* number: a JSON number at p, its span checked against the grammar, its value in *v. */
static int
number(struct parser *ps, double *v, const char **end)
{
	const char *p = ps->p;
	if (*p == '-')
		p++;
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		while (*p >= '0' && *p <= '9')
			p++;
	else
		return bad(ps, *p == '-' ? "bad number" : "expected a value");
	if (*p == '.') {
		if (!(*++p >= '0' && *p <= '9'))
			return bad(ps, "bad number");
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!(*p >= '0' && *p <= '9'))
			return bad(ps, "bad number");
		while (*p >= '0' && *p <= '9')
			p++;
	}
	*v = strtod(ps->p, NULL);
	*end = p;
	return 0;
}

/* skip_value: check and pass over any value (nested ones to MAX_DEPTH). */
static int
skip_value(struct parser *ps, int depth)
{
	double v;
	const char *end;
	if (depth > MAX_DEPTH)
		return bad(ps, "values nested too deep");
	switch (*ps->p) {
	case '"':
		return string(ps, NULL);
	case '{':
	case '[': {
		char close = *ps->p == '{' ? '}' : ']';
		ps->p++;
		skip_ws(ps);
		if (*ps->p == close) {
			ps->p++;
			return 0;
		}
		for (;;) {
			if (close == '}') {
				if (*ps->p != '"')
					return bad(ps, "expected a key");
				ML_TRY(string(ps, NULL));
				skip_ws(ps);
				if (*ps->p++ != ':')
					return bad(ps, "expected ':'");
				skip_ws(ps);
			}
			ML_TRY(skip_value(ps, depth + 1));
			skip_ws(ps);
			if (*ps->p == close) {
				ps->p++;
				return 0;
			}
			if (*ps->p++ != ',')
				return bad(ps, "expected ',' or the end");
			skip_ws(ps);
		}
	}
	default:
		break;
	}
	static const char *const words[] = { "true", "false", "null" };
	for (int i = 0; i < 3; i++)
		if (strncmp(ps->p, words[i], strlen(words[i])) == 0) {
			ps->p += strlen(words[i]);
			return 0;
		}
	ML_TRY(number(ps, &v, &end));
	ps->p = end;
	return 0;
}

/* add_item: room for one more item in c. */
static struct ml_train_config_item *
add_item(struct ml_train_config *c, struct ml_err *e)
{
	struct ml_train_config_item *it = realloc(c->items, sizeof *it * (size_t)(c->n + 1));
	if (it == NULL) {
		ml_fail(e, ML_ENOMEM, "out of memory");
		return NULL;
	}
	c->items = it;
	memset(&it[c->n], 0, sizeof it[c->n]);
	return &it[c->n++];
}

/* value: the value of the item it, at p. */
static int
value(struct parser *ps, struct ml_train_config_item *it)
{
	const char *start = ps->p, *end;
	switch (*ps->p) {
	case '"':
		it->type = ML_CFG_STR;
		return string(ps, &it->str);
	case '-':
	case '0': case '1': case '2': case '3': case '4':
	case '5': case '6': case '7': case '8': case '9':
		it->type = ML_CFG_NUM;
		ML_TRY(number(ps, &it->num, &end));
		ps->p = end;
		/* an integer written without fraction or exponent is also kept exactly */
		if (memchr(start, '.', (size_t)(end - start)) == NULL &&
		    memchr(start, 'e', (size_t)(end - start)) == NULL &&
		    memchr(start, 'E', (size_t)(end - start)) == NULL) {
			errno = 0;
			long long i = strtoll(start, NULL, 10);
			it->exact = errno == 0;
			it->i = i;
		}
		return 0;
	case 't':
	case 'f':
		it->type = ML_CFG_BOOL;
		it->num = *ps->p == 't';
		return skip_value(ps, 1);
	case 'n':
		it->type = ML_CFG_NULL;
		return skip_value(ps, 1);
	default:
		it->type = ML_CFG_NESTED;
		return skip_value(ps, 1);
	}
}

int
ml_train_config_parse(struct ml_train_config *c, const char *text, struct ml_err *e)
{
	struct parser ps = { text != NULL ? text : "", text != NULL ? text : "", e };
	int rc;
	memset(c, 0, sizeof *c);
	skip_ws(&ps);
	if (*ps.p == '\0')
		return 0;	/* no state: an empty object */
	if (*ps.p++ != '{')
		return bad(&ps, "not a JSON object");
	skip_ws(&ps);
	if (*ps.p == '}') {
		ps.p++;
		goto end;
	}
	for (;;) {
		struct ml_train_config_item *it;
		if (*ps.p != '"') {
			rc = bad(&ps, "expected a key");
			goto fail;
		}
		if ((it = add_item(c, e)) == NULL) {
			rc = ML_ENOMEM;
			goto fail;
		}
		if ((rc = string(&ps, &it->key)) < 0)
			goto fail;
		skip_ws(&ps);
		if (*ps.p++ != ':') {
			ps.p--;
			rc = bad(&ps, "expected ':'");
			goto fail;
		}
		skip_ws(&ps);
		if ((rc = value(&ps, it)) < 0)
			goto fail;
		skip_ws(&ps);
		if (*ps.p == '}') {
			ps.p++;
			break;
		}
		if (*ps.p != ',') {
			rc = bad(&ps, "expected ',' or '}'");
			goto fail;
		}
		ps.p++;
		skip_ws(&ps);
	}
end:
	skip_ws(&ps);
	if (*ps.p == '\0')
		return 0;
	rc = bad(&ps, "text after the object");
fail:
	ml_train_config_free(c);
	return rc;
}

/* find: the first item of key (JSON leaves duplicates open; the first wins, as it always did). */
static const struct ml_train_config_item *
find(const struct ml_train_config *c, const char *key)
{
	for (int i = 0; i < c->n; i++)
		if (strcmp(c->items[i].key, key) == 0)
			return &c->items[i];
	return NULL;
}

bool
ml_train_config_num(const struct ml_train_config *c, const char *key, double *v)
{
	const struct ml_train_config_item *it = find(c, key);
	if (it == NULL || it->type != ML_CFG_NUM)
		return false;
	*v = it->num;
	return true;
}

bool
ml_train_config_int(const struct ml_train_config *c, const char *key, int64_t *v)
{
	const struct ml_train_config_item *it = find(c, key);
	if (it == NULL || it->type != ML_CFG_NUM)
		return false;
	if (it->exact) {
		*v = it->i;
		return true;
	}
	/* 2^63 is the first double out of range */
	if (it->num != floor(it->num) || !(fabs(it->num) < 9223372036854775808.0))
		return false;
	*v = (int64_t)it->num;
	return true;
}

const char *
ml_train_config_str(const struct ml_train_config *c, const char *key)
{
	const struct ml_train_config_item *it = find(c, key);
	return it != NULL && it->type == ML_CFG_STR ? it->str : NULL;
}

void
ml_train_config_free(struct ml_train_config *c)
{
	if (c == NULL)
		return;
	for (int i = 0; i < c->n; i++) {
		free(c->items[i].key);
		free(c->items[i].str);
	}
	free(c->items);
	c->items = NULL;
	c->n = 0;
}
