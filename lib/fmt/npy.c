/*
 * npy.c: NumPy .npy arrays (format versions 1.0, 2.0 and 3.0), read into
 * and written from struct ml_tval. Every header field is checked: the
 * shape's size must match the bytes that follow.
 */
#include <ctype.h>
#include <errno.h>

#include "ml_impl.h"

static const struct {
	const char *code;	/* descr without the byte-order character */
	enum ml_dtype dt;
} dcodes[] = {
	{ "f4", ML_F32 }, { "f8", ML_F64 }, { "f2", ML_F16 }, { "i1", ML_I8 }, { "u1", ML_U8 },
	{ "i2", ML_I16 }, { "u2", ML_U16 }, { "i4", ML_I32 }, { "u4", ML_U32 }, { "i8", ML_I64 },
	{ "u8", ML_U64 }, { "b1", ML_BOOL }, { "c8", ML_C64 }, { "c16", ML_C128 },
};

static const char *
skip_ws(const char *p, const char *end)
{
	while (p < end && isspace((unsigned char)*p))
		p++;
	return p;
}

/* find the value after 'key': in the header dict */
static const char *
dict_value(const char *h, const char *end, const char *key)
{
	size_t kl = strlen(key);
	for (const char *p = h; p + kl + 2 < end; p++) {
		if ((*p == '\'' || *p == '"') && memcmp(p + 1, key, kl) == 0 && p[kl + 1] == *p) {
			p = skip_ws(p + kl + 2, end);
			if (p >= end || *p != ':')
				return NULL;
			/* a key at the very end of the header has no value */
			p = skip_ws(p + 1, end);
			return p < end ? p : NULL;
		}
	}
	return NULL;
}

int
ml_npy_decode(struct ml_tval *out, const uint8_t *buf, size_t len, struct ml_err *e)
{
	memset(out, 0, sizeof *out);
	if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
		return ml_fail(e, ML_EFORMAT, "not a .npy file (bad magic)");
	unsigned major = buf[6];
	size_t hlen, off;
	if (major == 1) {
		hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
		off = 10;
	} else if (major == 2 || major == 3) {
		if (len < 12)
			return ml_fail(e, ML_EFORMAT, "truncated .npy header");
		hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
		       (size_t)buf[11] << 24;
		off = 12;
	} else {
		return ml_fail(e, ML_ENOTSUP, ".npy format version %u is not supported", major);
	}
	if (hlen > len - off)
		return ml_fail(e, ML_EFORMAT, "truncated .npy header");
	const char *h = (const char *)buf + off, *end = h + hlen;
	const char *d = dict_value(h, end, "descr");
	if (d == NULL || (*d != '\'' && *d != '"'))
		return ml_fail(e, ML_EFORMAT, ".npy header has no descr");
	char q = *d++;
	const char *dend = memchr(d, q, (size_t)(end - d));
	if (dend == NULL || dend - d < 2 || dend - d > 8)
		return ml_fail(e, ML_EFORMAT, "bad .npy descr");
	char order = d[0];
	if (order != '<' && order != '>' && order != '|' && order != '=')
		return ml_fail(e, ML_EFORMAT, "bad .npy descr");
	enum ml_dtype dt = ML_UNDEF;
	for (size_t i = 0; i < sizeof dcodes / sizeof dcodes[0]; i++)
		if ((size_t)(dend - d - 1) == strlen(dcodes[i].code) &&
		    memcmp(d + 1, dcodes[i].code, (size_t)(dend - d - 1)) == 0)
			dt = dcodes[i].dt;
	if (dt == ML_UNDEF)
		return ml_fail(e, ML_ENOTSUP, ".npy dtype '%.*s' is not supported", (int)(dend - d), d);
	const char *fo = dict_value(h, end, "fortran_order");
	if (fo == NULL)
		return ml_fail(e, ML_EFORMAT, ".npy header has no fortran_order");
	bool fortran = (size_t)(end - fo) >= 4 && memcmp(fo, "True", 4) == 0;
	const char *sp = dict_value(h, end, "shape");
	if (sp == NULL || *sp != '(')
		return ml_fail(e, ML_EFORMAT, ".npy header has no shape");
	int rank = 0;
	int64_t dims[ML_MAX_RANK];
	sp++;
	for (;;) {
		sp = skip_ws(sp, end);
		if (sp < end && *sp == ')')
			break;
		if (sp >= end || !isdigit((unsigned char)*sp))
			return ml_fail(e, ML_EFORMAT, "bad .npy shape");
		if (rank == ML_MAX_RANK)
			return ml_fail(e, ML_ENOTSUP, ".npy rank above %d is not supported",
				       ML_MAX_RANK);
		int64_t v = 0;
		while (sp < end && isdigit((unsigned char)*sp)) {
			if (v > (INT64_MAX - 9) / 10)
				return ml_fail(e, ML_EFORMAT, ".npy dim is too large");
			v = v * 10 + (*sp++ - '0');
		}
		dims[rank++] = v;
		sp = skip_ws(sp, end);
		if (sp < end && *sp == ',')
			sp++;
	}
	struct ml_tval t = { .dtype = dt, .rank = rank };
	memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
	int64_t nb = ml_tval_nbytes(&t);
	size_t data_off = off + hlen;
	if (nb < 0 || (uint64_t)nb > len - data_off)
		return ml_fail(e, ML_EFORMAT, ".npy data is truncated (%zu bytes for shape needing %lld)",
			       len - data_off, (long long)nb);
	if (dt == ML_C64 || dt == ML_C128)
		return ml_fail(e, ML_ENOTSUP, "complex .npy arrays are not supported");
	if (fortran && rank > 1)
		return ml_fail(e, ML_ENOTSUP, "Fortran-order .npy arrays are not supported");
	ML_TRY(ml_tval_alloc(out, dt, rank, dims, e));
	memcpy(out->data, buf + data_off, (size_t)nb);
	size_t es = ml_dtype_size(dt);
	if (order == '>' && es > 1) {
		uint8_t *p = out->data;
		for (int64_t i = 0; i < nb; i += (int64_t)es)
			for (size_t a = 0, b = es - 1; a < b; a++, b--) {
				uint8_t s = p[i + (int64_t)a];
				p[i + (int64_t)a] = p[i + (int64_t)b];
				p[i + (int64_t)b] = s;
			}
	}
	return 0;
}

int
ml_npy_load(struct ml_tval *out, const char *path, struct ml_err *e)
{
	uint8_t *buf;
	size_t len;
	ML_TRY(ml_read_file(path, &buf, &len, e));
	int rc = ml_npy_decode(out, buf, len, e);
	ml_free(buf);
	if (rc < 0)
		ml_err_prefix(e, path);
	return rc;
}

int
ml_npy_encode(const struct ml_tval *t, uint8_t **buf, size_t *len, struct ml_err *e)
{
	const char *code = NULL;
	for (size_t i = 0; i < sizeof dcodes / sizeof dcodes[0]; i++)
		if (dcodes[i].dt == t->dtype)
			code = dcodes[i].code;
	if (code == NULL)
		return ml_fail(e, ML_ENOTSUP, "dtype %s has no .npy equivalent",
			       ml_dtype_name(t->dtype));
	char hdr[512];
	int k = snprintf(hdr, sizeof hdr, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
			 ml_dtype_size(t->dtype) == 1 ? '|' : '<', code);
	for (int i = 0; i < t->rank; i++)
		k += snprintf(hdr + k, sizeof hdr - (size_t)k, "%lld%s", (long long)t->dims[i],
			      t->rank == 1 ? "," : (i + 1 < t->rank ? ", " : ""));
	k += snprintf(hdr + k, sizeof hdr - (size_t)k, "), }");
	/* pad with spaces so that data starts on a 64-byte boundary, ending in '\n' */
	size_t total = 10 + (size_t)k + 1;
	size_t pad = (64 - total % 64) % 64;
	size_t hlen = (size_t)k + pad + 1;
	int64_t nb = ml_tval_nbytes(t);
	if (nb < 0)
		return ml_fail(e, ML_EINVAL, "array size overflows");
	uint8_t *p = ml_malloc(10 + hlen + (size_t)nb);
	if (p == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	memcpy(p, "\x93NUMPY\x01\x00", 8);
	p[8] = (uint8_t)(hlen & 0xff);
	p[9] = (uint8_t)(hlen >> 8);
	memcpy(p + 10, hdr, (size_t)k);
	memset(p + 10 + k, ' ', pad);
	p[10 + hlen - 1] = '\n';
	if (nb > 0)
		memcpy(p + 10 + hlen, t->data, (size_t)nb);
	*buf = p;
	*len = 10 + hlen + (size_t)nb;
	return 0;
}

int
ml_npy_save(const struct ml_tval *t, const char *path, struct ml_err *e)
{
	uint8_t *buf;
	size_t len;
	ML_TRY(ml_npy_encode(t, &buf, &len, e));
	int rc = ml_write_atomic(path, buf, len, e);
	ml_free(buf);
	return rc;
}
