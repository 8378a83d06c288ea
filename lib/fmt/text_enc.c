/*
 * text_enc.c: ml_text_encode, which writes a graph in the canonical .mlt
 * form that text.c defines, and the helpers both directions share: dtype
 * names, exact number formatting and reading, and base64.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>

#include "text.h"

const char *const mlt_dtype_names[ML_DTYPE_MAX] = {
	[ML_UNDEF] = "undefined", [ML_F32] = "float", [ML_U8] = "uint8", [ML_I8] = "int8",
	[ML_U16] = "uint16", [ML_I16] = "int16", [ML_I32] = "int32", [ML_I64] = "int64",
	[ML_STRING] = "string", [ML_BOOL] = "bool", [ML_F16] = "float16", [ML_F64] = "double",
	[ML_U32] = "uint32", [ML_U64] = "uint64", [ML_C64] = "complex64",
	[ML_C128] = "complex128", [ML_BF16] = "bfloat16",
};

enum ml_dtype
mlt_dtype_lookup(const char *s, size_t n, bool *ok)
{
	for (int i = 0; i < ML_DTYPE_MAX; i++) {
		if (strlen(mlt_dtype_names[i]) == n && memcmp(mlt_dtype_names[i], s, n) == 0) {
			*ok = true;
			return (enum ml_dtype)i;
		}
	}
	*ok = false;
	return ML_UNDEF;
}

/*
 * Numbers. The shortest "%.*g" that reads back to the same value is
 * deterministic and, with a correctly rounding strtod, exact.
 */
void
mlt_fmt_f32(float v, char *buf, size_t n)
{
	if (isnan(v)) {
		snprintf(buf, n, "%s", signbit(v) ? "-nan" : "nan");
		return;
	}
	if (isinf(v)) {
		snprintf(buf, n, "%s", v < 0 ? "-inf" : "inf");
		return;
	}
	for (int prec = 1; prec <= 9; prec++) {
		snprintf(buf, n, "%.*g", prec, (double)v);
		if (strtof(buf, NULL) == v)
			return;
	}
}

void
mlt_fmt_f64(double v, char *buf, size_t n)
{
	if (isnan(v)) {
		snprintf(buf, n, "%s", signbit(v) ? "-nan" : "nan");
		return;
	}
	if (isinf(v)) {
		snprintf(buf, n, "%s", v < 0 ? "-inf" : "inf");
		return;
	}
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, n, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

const char *
mlt_elem_read(const char *s, size_t n, enum ml_dtype dt, void *dst)
{
	char buf[MLT_MAX_NUMBER + 1], *end;

	if (n > MLT_MAX_NUMBER)
		return "a number is too long";
	memcpy(buf, s, n);
	buf[n] = '\0';
	errno = 0;
	switch (dt) {
	case ML_BOOL: {
		uint8_t b;
		if (strcmp(buf, "0") == 0 || strcmp(buf, "false") == 0)
			b = 0;
		else if (strcmp(buf, "1") == 0 || strcmp(buf, "true") == 0)
			b = 1;
		else
			return "expected 0, 1, true or false";
		memcpy(dst, &b, 1);
		return NULL;
	}
	case ML_F32: case ML_F16: case ML_BF16: {
		float f = strtof(buf, &end);
		if (*end != '\0' || end == buf)
			return "expected a number";
		if (errno == ERANGE && isinf(f))
			return "a number is out of range for float";
		if (dt == ML_F32) {
			memcpy(dst, &f, 4);
		} else {
			uint16_t h = dt == ML_F16 ? ml_f32_to_f16(f) : ml_f32_to_bf16(f);
			memcpy(dst, &h, 2);
		}
		return NULL;
	}
	case ML_F64: {
		double d = strtod(buf, &end);
		if (*end != '\0' || end == buf)
			return "expected a number";
		if (errno == ERANGE && isinf(d))
			return "a number is out of range for double";
		memcpy(dst, &d, 8);
		return NULL;
	}
	case ML_I8: case ML_I16: case ML_I32: case ML_I64: {
		long long x = strtoll(buf, &end, 10);
		if (*end != '\0' || end == buf)
			return "expected an integer";
		int bits = (int)ml_dtype_size(dt) * 8;
		if (errno == ERANGE || (bits < 64 && (x < -(1ll << (bits - 1)) ||
						       x >= (1ll << (bits - 1)))))
			return "an integer is out of range for its type";
		int8_t i8 = (int8_t)x;
		int16_t i16 = (int16_t)x;
		int32_t i32 = (int32_t)x;
		int64_t i64 = x;
		memcpy(dst, bits == 8 ? (void *)&i8 : bits == 16 ? (void *)&i16 :
		       bits == 32 ? (void *)&i32 : (void *)&i64, (size_t)bits / 8);
		return NULL;
	}
	case ML_U8: case ML_U16: case ML_U32: case ML_U64: {
		if (buf[0] == '-')
			return "an unsigned integer cannot be negative";
		unsigned long long x = strtoull(buf, &end, 10);
		if (*end != '\0' || end == buf)
			return "expected an integer";
		int bits = (int)ml_dtype_size(dt) * 8;
		if (errno == ERANGE || (bits < 64 && x >= (1ull << bits)))
			return "an integer is out of range for its type";
		uint8_t u8 = (uint8_t)x;
		uint16_t u16 = (uint16_t)x;
		uint32_t u32 = (uint32_t)x;
		uint64_t u64 = x;
		memcpy(dst, bits == 8 ? (void *)&u8 : bits == 16 ? (void *)&u16 :
		       bits == 32 ? (void *)&u32 : (void *)&u64, (size_t)bits / 8);
		return NULL;
	}
	case ML_C64: case ML_C128:
		return "complex tensors are written in base64";
	default:
		return "this type has no literal";
	}
}

/*
 * Base64, standard alphabet with '=' padding.
 */
static const char b64c[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t
mlt_b64_len(size_t nbytes)
{
	return (nbytes + 2) / 3 * 4;
}

void
mlt_b64_encode(const uint8_t *src, size_t n, char *dst)
{
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
		*dst++ = b64c[v >> 18];
		*dst++ = b64c[(v >> 12) & 63];
		*dst++ = b64c[(v >> 6) & 63];
		*dst++ = b64c[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < n ? (uint32_t)src[i + 1] << 8 : 0);
		*dst++ = b64c[v >> 18];
		*dst++ = b64c[(v >> 12) & 63];
		*dst++ = i + 1 < n ? b64c[(v >> 6) & 63] : '=';
		*dst++ = '=';
	}
}

/*
 * b64tab: per byte, its 6-bit value, or B64_SPACE, B64_PAD, B64_BAD. Big
 * tensors are hundreds of megabytes of base64, so decoding is one table
 * look-up a character.
 */
enum { B64_BAD = -1, B64_SPACE = -2, B64_PAD = -3 };
static int8_t b64tab[256];
static pthread_once_t b64_once = PTHREAD_ONCE_INIT;

static void
b64_init(void)
{
	for (int i = 0; i < 256; i++)
		b64tab[i] = B64_BAD;
	for (int i = 0; i < 64; i++)
		b64tab[(unsigned char)b64c[i]] = (int8_t)i;
	b64tab[' '] = b64tab['\t'] = b64tab['\n'] = b64tab['\r'] = B64_SPACE;
	b64tab['='] = B64_PAD;
}

const int8_t *
mlt_b64_table(void)
{
	pthread_once(&b64_once, b64_init);
	return b64tab;
}

int64_t
mlt_b64_decoded_len(const char *s, size_t n)
{
	int64_t chars = 0, pad = 0;
	pthread_once(&b64_once, b64_init);
	for (size_t i = 0; i < n; i++) {
		int v = b64tab[(unsigned char)s[i]];
		if (v >= 0) {
			if (pad > 0)
				return -1;
			chars++;
		} else if (v == B64_PAD) {
			pad++;
			chars++;
		} else if (v == B64_BAD) {
			return -1;
		}
	}
	if (chars % 4 != 0 || pad > 2)
		return -1;
	return chars / 4 * 3 - pad;
}

int
mlt_b64_decode(const char *s, size_t n, uint8_t *dst, size_t dlen)
{
	const unsigned char *q = (const unsigned char *)s, *end = q + n;
	uint32_t acc = 0;
	int k = 0;
	size_t o = 0;

	pthread_once(&b64_once, b64_init);
	while (q < end) {
		/* the common case: four data characters in a row */
		if (k == 0 && end - q >= 4 && o + 3 <= dlen) {
			int a = b64tab[q[0]], b = b64tab[q[1]], c = b64tab[q[2]], d = b64tab[q[3]];
			if ((a | b | c | d) >= 0) {
				uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 |
					     (uint32_t)d;
				dst[o] = (uint8_t)(v >> 16);
				dst[o + 1] = (uint8_t)(v >> 8);
				dst[o + 2] = (uint8_t)v;
				o += 3;
				q += 4;
				continue;
			}
		}
		int v = b64tab[*q++];
		if (v == B64_SPACE || v == B64_PAD)
			continue;
		if (v < 0)
			return -1;
		acc = acc << 6 | (uint32_t)v;
		if (++k == 4) {
			for (int j = 2; j >= 0; j--) {
				if (o < dlen)
					dst[o] = (uint8_t)(acc >> (8 * j));
				o++;
			}
			acc = 0;
			k = 0;
		}
	}
	if (k == 2) {
		if (o < dlen)
			dst[o] = (uint8_t)(acc >> 4);
		o++;
	} else if (k == 3) {
		for (int j = 1; j >= 0; j--) {
			if (o < dlen)
				dst[o] = (uint8_t)(acc >> (2 + 8 * j));
			o++;
		}
	} else if (k != 0) {
		return -1;
	}
	return o == dlen ? 0 : -1;
}

/*
 * The output buffer. Allocation failure is remembered and reported once at
 * the end, so the writers below need not check every call.
 */
struct sb {
	char *p;
	size_t n, cap;
	bool oom;
};

static bool
sb_room(struct sb *b, size_t k)
{
	if (b->oom)
		return false;
	if (b->cap - b->n > k)
		return true;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap - b->n <= k) {
		if (cap > SIZE_MAX / 2) {
			b->oom = true;
			return false;
		}
		cap *= 2;
	}
	char *q = ml_realloc(b->p, cap);
	if (q == NULL) {
		b->oom = true;
		return false;
	}
	b->p = q;
	b->cap = cap;
	return true;
}

static void
sb_put(struct sb *b, const char *s, size_t k)
{
	if (sb_room(b, k)) {
		memcpy(b->p + b->n, s, k);
		b->n += k;
		b->p[b->n] = '\0';
	}
}

static void
sb_puts(struct sb *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void
sb_printf(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
sb_printf(struct sb *b, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (k >= 0 && (size_t)k < sizeof tmp)
		sb_put(b, tmp, (size_t)k);
	else
		b->oom = true;	/* every caller prints a few numbers */
}

static void
sb_indent(struct sb *b, int n)
{
	for (int i = 0; i < n; i++)
		sb_put(b, " ", 1);
}

/* sb_quoted: s (n bytes) as a string with escapes; bytes >= 0x80 pass through. */
static void
sb_quoted(struct sb *b, const char *s, size_t n)
{
	sb_put(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		switch (c) {
		case '"': sb_puts(b, "\\\""); break;
		case '\\': sb_puts(b, "\\\\"); break;
		case '\n': sb_puts(b, "\\n"); break;
		case '\r': sb_puts(b, "\\r"); break;
		case '\t': sb_puts(b, "\\t"); break;
		default:
			if (c < 0x20 || c == 0x7f)
				sb_printf(b, "\\x%02x", c);
			else
				sb_put(b, (const char *)&c, 1);
		}
	}
	sb_put(b, "\"", 1);
}

/* Words that a bare name could be mistaken for. */
static bool
reserved(const char *s)
{
	static const char *const w[] = { "param", "const", "input", "act", "base64", "inf",
					 "nan", "true", "false" };
	bool ok;
	for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
		if (strcmp(s, w[i]) == 0)
			return true;
	mlt_dtype_lookup(s, strlen(s), &ok);
	if (ok)
		return true;
	struct mlt_tok t = { .kind = MLT_IDENT, .s = s, .n = strlen(s) };
	return mlt_is_layer(&t);
}

static bool
is_ident(const char *s, bool dots)
{
	if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
		return false;
	for (const char *q = s + 1; *q; q++)
		if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_' ||
		      (*q >= '0' && *q <= '9') || (dots && *q == '.')))
			return false;
	return strlen(s) <= MLT_MAX_NAME;
}

static void
sb_name(struct sb *b, const char *s)
{
	if (s == NULL)
		s = "";
	if (is_ident(s, true) && !reserved(s))
		sb_puts(b, s);
	else
		sb_quoted(b, s, strlen(s));
}

/* A float attribute: float32-exact values in decimal, others in hexadecimal. */
static void
sb_attr_float(struct sb *b, double v)
{
	char buf[64];
	if (isnan(v) || isinf(v) || (double)(float)v == v) {
		mlt_fmt_f32((float)v, buf, sizeof buf);
		if (strpbrk(buf, ".eEni") == NULL)
			strcat(buf, ".0");
	} else {
		snprintf(buf, sizeof buf, "%a", v);
	}
	sb_puts(b, buf);
}

/*
 * Tensors.
 */
static void
fmt_elem(const void *data, enum ml_dtype dt, int64_t i, char *buf, size_t n)
{
	const uint8_t *p = (const uint8_t *)data + (size_t)i * ml_dtype_size(dt);
	switch (dt) {
	case ML_F32: { float f; memcpy(&f, p, 4); mlt_fmt_f32(f, buf, n); break; }
	case ML_F64: { double d; memcpy(&d, p, 8); mlt_fmt_f64(d, buf, n); break; }
	case ML_F16: case ML_BF16: {
		uint16_t h;
		memcpy(&h, p, 2);
		mlt_fmt_f32(dt == ML_F16 ? ml_f16_to_f32(h) : ml_bf16_to_f32(h), buf, n);
		break;
	}
	case ML_BOOL: snprintf(buf, n, "%u", p[0]); break;
	case ML_U8: case ML_U16: case ML_U32: case ML_U64:
		snprintf(buf, n, "%llu", (unsigned long long)ml_get_i64(data, dt, i));
		if (dt == ML_U64) {
			uint64_t u;
			memcpy(&u, p, 8);
			snprintf(buf, n, "%llu", (unsigned long long)u);
		}
		break;
	default:
		snprintf(buf, n, "%lld", (long long)ml_get_i64(data, dt, i));
		break;
	}
}

/*
 * sb_inline: the elements of t as {a, b, ...} when there are few and each
 * reads back to the same bits; false (nothing written) otherwise.
 */
static bool
sb_inline(struct sb *b, const struct ml_tensor *t, int64_t numel)
{
	char txt[MLT_INLINE_MAX * 48 + 8], one[48];
	uint8_t back[16];
	size_t esz = ml_dtype_size(t->dtype), k = 0;

	if (numel > MLT_INLINE_MAX || t->dtype == ML_C64 || t->dtype == ML_C128 || esz == 0 ||
	    esz > sizeof back)
		return false;
	txt[k++] = '{';
	for (int64_t i = 0; i < numel; i++) {
		fmt_elem(t->data, t->dtype, i, one, sizeof one);
		if (mlt_elem_read(one, strlen(one), t->dtype, back) != NULL ||
		    memcmp(back, (const uint8_t *)t->data + (size_t)i * esz, esz) != 0)
			return false;
		k += (size_t)snprintf(txt + k, sizeof txt - k, "%s%s", i ? ", " : "", one);
	}
	txt[k++] = '}';
	sb_put(b, txt, k);
	return true;
}

static void
sb_base64(struct sb *b, const uint8_t *data, size_t n, int indent)
{
	size_t len = mlt_b64_len(n);
	if (!sb_room(b, len + len / 76 * (size_t)(indent + 6) + 16))
		return;
	if (len <= 64) {
		sb_puts(b, "base64\"");
		mlt_b64_encode(data, n, b->p + b->n);
		b->n += len;
		sb_puts(b, "\"");
		return;
	}
	/* whole lines of 57 bytes are 76 characters */
	sb_puts(b, "base64\"");
	for (size_t off = 0; off < n; off += 57) {
		size_t k = ML_MIN((size_t)57, n - off);
		sb_puts(b, "\n");
		sb_indent(b, indent + 4);
		if (!sb_room(b, 80))
			return;
		mlt_b64_encode(data + off, k, b->p + b->n);
		b->n += mlt_b64_len(k);
		b->p[b->n] = '\0';
	}
	sb_puts(b, "\"");
}

static int
sb_literal(struct sb *b, const struct ml_tensor *t, int indent, struct ml_err *e)
{
	struct ml_tval v = { .dtype = t->dtype, .rank = t->rank };
	for (int i = 0; i < t->rank && i < ML_MAX_RANK; i++)
		v.dims[i] = t->dims[i];
	int64_t numel = ml_tval_numel(&v), nb = ml_tval_nbytes(&v);
	if (t->rank < 0 || numel < 0 || nb < 0 || (uint64_t)nb != t->nbytes ||
	    ml_dtype_size(t->dtype) == 0)
		return ml_fail(e, ML_EINVAL, "tensor '%s': %zu data bytes do not match its shape",
			       t->name, t->nbytes);
	if (!sb_inline(b, t, numel))
		sb_base64(b, t->data, t->nbytes, indent);
	return 0;
}

static void
sb_type(struct sb *b, const struct ml_tensor *t, bool need)
{
	if (t->dtype == ML_UNDEF && t->rank < 0 && !need)
		return;
	sb_puts(b, (unsigned)t->dtype < ML_DTYPE_MAX ? mlt_dtype_names[t->dtype] : "undefined");
	if (t->rank >= 0) {
		sb_puts(b, "[");
		for (int i = 0; i < t->rank && i < ML_MAX_RANK; i++) {
			if (i)
				sb_puts(b, ",");
			if (t->sym[i] != NULL) {
				sb_name(b, t->sym[i]);
				if (t->dims[i] >= 0)
					sb_printf(b, "=%lld", (long long)t->dims[i]);
			} else if (t->dims[i] >= 0) {
				sb_printf(b, "%lld", (long long)t->dims[i]);
			} else {
				sb_puts(b, "?");
			}
		}
		sb_puts(b, "]");
	}
	sb_puts(b, " ");
}

static void
sb_annot(struct sb *b, const struct ml_tensor *t)
{
	bool any = false;
	char buf[64];
#define SEP() do { sb_puts(b, any ? ", " : " <"); any = true; } while (0)
	if (t->doc != NULL) {
		SEP();
		sb_puts(b, "doc = ");
		sb_quoted(b, t->doc, strlen(t->doc));
	}
	if (t->device != -1) {
		SEP();
		sb_printf(b, "device = %d", t->device);
	}
	if (t->arena_off != -1) {
		SEP();
		sb_printf(b, "arena_off = %lld", (long long)t->arena_off);
	}
	if (t->q != NULL) {
		SEP();
		sb_printf(b, "qtype = %s, qaxis = %d, qscale = [",
			  (unsigned)t->q->qtype < ML_DTYPE_MAX ? mlt_dtype_names[t->q->qtype] :
			  "undefined", t->q->axis);
		for (int i = 0; i < t->q->n; i++) {
			mlt_fmt_f32(t->q->scale[i], buf, sizeof buf);
			sb_printf(b, "%s%s", i ? ", " : "", buf);
		}
		sb_puts(b, "], qzero = [");
		for (int i = 0; i < t->q->n; i++)
			sb_printf(b, "%s%d", i ? ", " : "", (int)t->q->zero[i]);
		sb_puts(b, "]");
	}
	if (any)
		sb_puts(b, ">");
#undef SEP
}

enum ectx { E_INPUT, E_OTHER, E_ATTR };

static const char *const kind_words[] = { "act", "input", "const", "param" };

/* sb_decl: one tensor declaration; an attribute's tensor when ctx is E_ATTR. */
static int
sb_decl(struct sb *b, const struct ml_tensor *t, enum ectx ctx, int indent, struct ml_err *e)
{
	bool data = t->data != NULL;
	enum ml_tkind def = data ? ML_TK_CONST : ctx == E_INPUT ? ML_TK_INPUT : ML_TK_ACT;
	if (t->kind != def) {
		if ((unsigned)t->kind > ML_TK_PARAM)
			return ml_fail(e, ML_EINVAL, "tensor '%s': unknown kind %d", t->name, t->kind);
		sb_puts(b, kind_words[t->kind]);
		sb_puts(b, " ");
	}
	sb_type(b, t, ctx == E_ATTR);
	if (ctx != E_ATTR || (t->name != NULL && t->name[0] != '\0'))
		sb_name(b, t->name);
	else if (b->n > 0 && b->p[b->n - 1] == ' ')
		b->p[--b->n] = '\0';
	sb_annot(b, t);
	if (data) {
		sb_puts(b, ctx == E_ATTR && (t->name == NULL || t->name[0] == '\0') ? " " : " = ");
		ML_TRY(sb_literal(b, t, indent, e));
	}
	return 0;
}

/*
 * Graphs.
 */
static int sb_graph(struct sb *b, const struct ml_graph *g, int depth, int indent, bool top,
		    struct ml_err *e);

/* hsep: what comes before a header field: one a line at the top, else inline. */
static void
hsep(struct sb *b, bool *any, bool top, int indent)
{
	sb_puts(b, *any ? "," : "<");
	if (top) {
		sb_puts(b, "\n");
		sb_indent(b, indent + 4);
	} else if (*any) {
		sb_puts(b, " ");
	}
	*any = true;
}

static void
sb_header(struct sb *b, const struct ml_graph *g, bool top, int indent)
{
	bool any = false;
	const char *nl = top ? "\n" : "";
#define SEP() hsep(b, &any, top, indent)
	if (top || g->ir_version != 0) {
		SEP();
		sb_printf(b, "ir_version: %lld", (long long)g->ir_version);
	}
	if (top || g->n_opsets > 0) {
		SEP();
		sb_puts(b, "opset_import: [");
		for (int i = 0; i < g->n_opsets; i++) {
			if (i)
				sb_puts(b, ", ");
			sb_quoted(b, g->opset_domain[i], strlen(g->opset_domain[i]));
			sb_printf(b, " : %lld", (long long)g->opset_version[i]);
		}
		sb_puts(b, "]");
	}
	if (g->producer != NULL && g->producer[0] != '\0') {
		SEP();
		sb_puts(b, "producer_name: ");
		sb_quoted(b, g->producer, strlen(g->producer));
	}
	if (g->n_meta > 0) {
		SEP();
		sb_puts(b, "metadata_props: [");
		for (int i = 0; i < g->n_meta; i++) {
			if (i)
				sb_puts(b, ", ");
			sb_quoted(b, g->meta[i].key, strlen(g->meta[i].key));
			sb_puts(b, " : ");
			const char *v = g->meta[i].value != NULL ? g->meta[i].value : "";
			sb_quoted(b, v, strlen(v));
		}
		sb_puts(b, "]");
	}
	if (g->arena_bytes != 0) {
		SEP();
		sb_printf(b, "arena_bytes: %lld", (long long)g->arena_bytes);
	}
	if (g->train != NULL) {
		const struct ml_train *t = g->train;
		SEP();
		sb_printf(b, "training: {step: %llu, epoch: %llu", (unsigned long long)t->step,
			  (unsigned long long)t->epoch);
		if (t->optimizer != NULL) {
			sb_puts(b, ", optimizer: ");
			sb_quoted(b, t->optimizer, strlen(t->optimizer));
		}
		if (t->config != NULL) {
			sb_puts(b, ", config: ");
			sb_quoted(b, t->config, strlen(t->config));
		}
		if (t->run != NULL) {
			/* the fields of TrainRun, as numbers (enums as their values) */
			const struct ml_train_state *st = t->run;
			char num[40];
			const char *sep = "";
			sb_puts(b, ", run: {");
#define DBL(v) mlt_fmt_f64((double)(v), num, sizeof num)
#define I64(v) snprintf(num, sizeof num, "%lld", (long long)(v))
#define U64(v) snprintf(num, sizeof num, "%llu", (unsigned long long)(v))
#define INT(v) I64(v)
#define BOOL(v) I64(v)
#define LOSS(v) I64(v)
#define OPTIM(v) I64(v)
#define SCHED(v) I64(v)
#define X(name, member, type) \
	type(st->member); \
	sb_printf(b, "%s%s: %s", sep, #name, num); \
	sep = ", ";
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
			sb_puts(b, "}");
		}
		if (t->rng_len > 0) {
			sb_puts(b, ", rng: ");
			sb_base64(b, t->rng, t->rng_len, indent + 4);
		}
		sb_puts(b, ", slots: [");
		for (int i = 0; i < t->n_slots; i++) {
			if (i)
				sb_puts(b, ", ");
			if (t->slots[i] >= 0 && t->slots[i] < g->n_tensors)
				sb_name(b, g->tensors[t->slots[i]]->name);
		}
		sb_puts(b, "]}");
	}
	if (any) {
		sb_puts(b, nl);
		if (top)
			sb_indent(b, indent);
		sb_puts(b, top ? ">\n" : "> ");
	}
#undef SEP
}

static bool
layer_word(const char *s)
{
	struct mlt_tok t = { .kind = MLT_IDENT, .s = s, .n = strlen(s) };
	return mlt_is_layer(&t);
}

static void
sb_op(struct sb *b, const struct ml_node *n)
{
	const char *op = n->op_type != NULL ? n->op_type : "";
	const char *dom = n->domain != NULL ? n->domain : "";
	bool dom_ok = dom[0] == '\0' || (is_ident(dom, true) && dom[strlen(dom) - 1] != '.');
	if (op[0] != '\0' && is_ident(op, false) && dom_ok && !(dom[0] == '\0' && layer_word(op))) {
		if (dom[0] != '\0') {
			sb_puts(b, dom);
			sb_puts(b, ".");
		}
		sb_puts(b, op);
		return;
	}
	if (dom[0] != '\0') {
		sb_quoted(b, dom, strlen(dom));
		sb_puts(b, ".");
	}
	sb_quoted(b, op, strlen(op));
}

static int
sb_attr_value(struct sb *b, const struct ml_graph *g, const struct ml_attr *a, int depth,
	      int indent, struct ml_err *e)
{
	static const char *const tn[] = { NULL, NULL, NULL, NULL, NULL, NULL,
					  "floats", "ints", "strings", "tensors", "graphs" };
	if (a->type >= ML_ATTR_FLOATS && a->type <= ML_ATTR_GRAPHS && a->n == 0) {
		sb_printf(b, ": %s = []", tn[a->type]);
		return 0;
	}
	sb_puts(b, " = ");
	switch (a->type) {
	case ML_ATTR_INT:
		sb_printf(b, "%lld", (long long)a->i);
		return 0;
	case ML_ATTR_FLOAT:
		sb_attr_float(b, a->f);
		return 0;
	case ML_ATTR_STRING:
		sb_quoted(b, a->s != NULL ? a->s : "", a->s != NULL ? a->s_len : 0);
		return 0;
	case ML_ATTR_TENSOR:
		if (a->tensors == NULL || a->tensors[0] == NULL)
			return ml_fail(e, ML_EINVAL, "attribute '%s' has no tensor", a->name);
		return sb_decl(b, a->tensors[0], E_ATTR, indent, e);
	case ML_ATTR_GRAPH:
		if (a->graphs == NULL || a->graphs[0] == NULL)
			return ml_fail(e, ML_EINVAL, "attribute '%s' has no graph", a->name);
		return sb_graph(b, a->graphs[0], depth + 1, indent, false, e);
	default:
		break;
	}
	if (a->type < ML_ATTR_FLOATS || a->type > ML_ATTR_GRAPHS)
		return ml_fail(e, ML_EINVAL, "attribute '%s' has an unknown type %d", a->name,
			       a->type);
	sb_puts(b, "[");
	for (int i = 0; i < a->n; i++) {
		if (i)
			sb_puts(b, ", ");
		switch (a->type) {
		case ML_ATTR_FLOATS:
			sb_attr_float(b, a->floats[i]);
			break;
		case ML_ATTR_INTS:
			sb_printf(b, "%lld", (long long)a->ints[i]);
			break;
		case ML_ATTR_STRINGS:
			sb_quoted(b, a->strings[i], strlen(a->strings[i]));
			break;
		case ML_ATTR_TENSORS:
			ML_TRY(sb_decl(b, a->tensors[i], E_ATTR, indent, e));
			break;
		default:
			ML_TRY(sb_graph(b, a->graphs[i], depth + 1, indent, false, e));
			break;
		}
	}
	sb_puts(b, "]");
	(void)g;
	return 0;
}

static const char *
tname(const struct ml_graph *g, int i)
{
	return i >= 0 && i < g->n_tensors ? g->tensors[i]->name : "";
}

static int
sb_node(struct sb *b, const struct ml_graph *g, const struct ml_node *n, int depth, int indent,
	struct ml_err *e)
{
	sb_indent(b, indent);
	if ((n->name != NULL && n->name[0] != '\0') || n->device != -1 || n->cost_us != 0) {
		sb_puts(b, "[");
		sb_name(b, n->name);
		if (n->device != -1)
			sb_printf(b, ", device = %d", n->device);
		if (n->cost_us != 0) {
			char buf[64];
			mlt_fmt_f64(n->cost_us, buf, sizeof buf);
			sb_printf(b, ", cost_us = %s", buf);
		}
		sb_puts(b, "] ");
	}
	for (int j = 0; j < n->n_out; j++) {
		if (j)
			sb_puts(b, ", ");
		sb_name(b, tname(g, n->out[j]));
	}
	sb_puts(b, n->n_out > 0 ? " = " : "= ");
	sb_op(b, n);
	if (n->n_attr > 0) {
		sb_puts(b, " <");
		for (int j = 0; j < n->n_attr; j++) {
			if (j)
				sb_puts(b, ", ");
			sb_name(b, n->attrs[j].name);
			ML_TRY(sb_attr_value(b, g, &n->attrs[j], depth, indent, e));
		}
		sb_puts(b, ">");
	}
	sb_puts(b, " (");
	for (int j = 0; j < n->n_in; j++) {
		if (j)
			sb_puts(b, ", ");
		sb_name(b, tname(g, n->in[j]));
	}
	sb_puts(b, ")\n");
	return 0;
}

/* struct order: a tensor index with the position of its first use, for sorting. */
struct order {
	int64_t key;
	int ti;
};

static int
order_cmp(const void *x, const void *y)
{
	const struct order *a = x, *b = y;
	if (a->key != b->key)
		return a->key < b->key ? -1 : 1;
	return a->ti - b->ti;
}

static bool
has_info(const struct ml_tensor *t)
{
	return t->dtype != ML_UNDEF || t->rank >= 0 || t->doc != NULL || t->device != -1 ||
	       t->arena_off != -1 || t->q != NULL || t->kind != ML_TK_ACT;
}

static int
sb_graph(struct sb *b, const struct ml_graph *g, int depth, int indent, bool top,
	 struct ml_err *e)
{
	int rc = 0, nt = g->n_tensors;
	uint8_t *state = NULL;	/* 1 in the signature, 2 written there */
	int64_t *first = NULL;
	struct order *ord = NULL;

	if (depth > MLT_MAX_DEPTH)
		return ml_fail(e, ML_EINVAL, "subgraphs nest deeper than %d", MLT_MAX_DEPTH);
	state = ml_calloc((size_t)nt + 1, 1);
	first = ml_malloc(sizeof *first * ((size_t)nt + 1));
	ord = ml_malloc(sizeof *ord * ((size_t)nt + 1));
	if (state == NULL || first == NULL || ord == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < nt; i++)
		first[i] = INT64_MAX;
	int64_t use = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] >= 0 && n->in[j] < nt && first[n->in[j]] == INT64_MAX)
				first[n->in[j]] = use++;
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] >= 0 && n->out[j] < nt && first[n->out[j]] == INT64_MAX)
				first[n->out[j]] = use++;
	}
	for (int i = 0; i < g->n_inputs; i++)
		if (g->inputs[i] >= 0 && g->inputs[i] < nt)
			state[g->inputs[i]] = 1;
	for (int i = 0; i < g->n_outputs; i++)
		if (g->outputs[i] >= 0 && g->outputs[i] < nt)
			state[g->outputs[i]] = 1;

	sb_header(b, g, top, indent);
	sb_name(b, g->name);
	for (int side = 0; side < 2; side++) {
		int cnt = side == 0 ? g->n_inputs : g->n_outputs;
		const int *v = side == 0 ? g->inputs : g->outputs;
		sb_puts(b, side == 0 ? " (" : " => (");
		for (int i = 0; i < cnt; i++) {
			if (i)
				sb_puts(b, ", ");
			if (v[i] < 0 || v[i] >= nt) {
				rc = ml_fail(e, ML_EINVAL, "bad graph input or output index");
				goto out;
			}
			if (state[v[i]] == 2) {
				sb_name(b, g->tensors[v[i]]->name);
			} else {
				state[v[i]] = 2;
				if ((rc = sb_decl(b, g->tensors[v[i]], side == 0 ? E_INPUT : E_OTHER,
						  indent, e)) < 0)
					goto out;
			}
		}
		sb_puts(b, ")");
	}
	sb_puts(b, "\n");
	/* the value block: typed values and, in subgraphs, data */
	bool any = false;
	for (int i = 0; i < nt; i++) {
		const struct ml_tensor *t = g->tensors[i];
		if (state[i] != 0 || (top && t->data != NULL) ||
		    (!has_info(t) && t->data == NULL && first[i] != INT64_MAX))
			continue;
		if (!any) {
			sb_indent(b, indent);
			sb_puts(b, "<\n");
		} else {
			sb_puts(b, ",\n");
		}
		any = true;
		sb_indent(b, indent + 4);
		if ((rc = sb_decl(b, t, E_OTHER, indent + 4, e)) < 0)
			goto out;
	}
	if (any) {
		sb_puts(b, "\n");
		sb_indent(b, indent);
		sb_puts(b, ">\n");
	}
	sb_indent(b, indent);
	sb_puts(b, "{\n");
	for (int i = 0; i < g->n_nodes; i++)
		if ((rc = sb_node(b, g, &g->nodes[i], depth, indent + 4, e)) < 0)
			goto out;
	sb_indent(b, indent);
	sb_puts(b, "}");
	if (top) {
		/*
		 * Data last, in the order the body first uses it: a reader
		 * creates used tensors in that order, so the order survives a
		 * round trip whatever the tensor indices were.
		 */
		int k = 0;
		for (int i = 0; i < nt; i++)
			if (state[i] == 0 && g->tensors[i]->data != NULL)
				ord[k++] = (struct order){ first[i], i };
		qsort(ord, (size_t)k, sizeof *ord, order_cmp);
		sb_puts(b, "\n");
		for (int i = 0; i < k; i++) {
			if ((rc = sb_decl(b, g->tensors[ord[i].ti], E_OTHER, 0, e)) < 0)
				goto out;
			sb_puts(b, "\n");
		}
	}
out:
	ml_free(state);
	ml_free(first);
	ml_free(ord);
	return rc;
}

int
ml_text_encode(const struct ml_graph *g, char **text, size_t *len, struct ml_err *e)
{
	struct sb b = { 0 };
	int rc;

	*text = NULL;
	*len = 0;
	if ((rc = sb_graph(&b, g, 0, 0, true, e)) == 0 && (b.oom || !sb_room(&b, 1)))
		rc = ml_fail(e, ML_ENOMEM, "out of memory writing the text form");
	if (rc < 0) {
		ml_free(b.p);
		return rc;
	}
	*text = b.p;
	*len = b.n;
	return 0;
}
