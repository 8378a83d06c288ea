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

/*
 * The header is a Python dict literal with exactly the keys descr,
 * fortran_order and shape, as numpy writes and reads it (numpy refuses
 * anything else too): parsing it strictly means a damaged header is
 * refused instead of read as some other array.
 */
struct npy_hdr {
	const char *descr;	/* between the quotes */
	size_t descr_len;
	int fortran;		/* -1 until seen */
	int rank;		/* -1 until seen */
	int64_t dims[ML_MAX_RANK];
};

/* quoted: a '...' or "..." string at *p; its body in *s, *n. */
static bool
quoted(const char **p, const char *end, const char **s, size_t *n)
{
	if (*p >= end)
		return false;
	char q = **p;
	if (q != '\'' && q != '"')
		return false;
	const char *c = memchr(*p + 1, q, (size_t)(end - *p - 1));
	if (c == NULL)
		return false;
	*s = *p + 1;
	*n = (size_t)(c - *s);
	*p = c + 1;
	return true;
}

/* word: whether the identifier w is at *p (and not a prefix of a longer one). */
static bool
word(const char **p, const char *end, const char *w)
{
	size_t n = strlen(w);
	if ((size_t)(end - *p) < n || memcmp(*p, w, n) != 0 ||
	    (*p + n < end && (isalnum((unsigned char)(*p)[n]) || (*p)[n] == '_')))
		return false;
	*p += n;
	return true;
}

/* parse_shape: a tuple of decimal integers, "(2, 3)", "(6,)", "()". */
static int
parse_shape(const char **pp, const char *end, struct npy_hdr *h, struct ml_err *e)
{
	const char *p = *pp;
	if (p >= end || *p != '(')
		return ml_fail(e, ML_EFORMAT, "bad .npy shape");
	p = skip_ws(p + 1, end);
	h->rank = 0;
	while (p < end && *p != ')') {
		/* Python refuses a leading zero (04) as numpy's reader does */
		if (!isdigit((unsigned char)*p) ||
		    (*p == '0' && p + 1 < end && isdigit((unsigned char)p[1])))
			return ml_fail(e, ML_EFORMAT, "bad .npy shape");
		if (h->rank == ML_MAX_RANK)
			return ml_fail(e, ML_ENOTSUP, ".npy rank above %d is not supported",
				       ML_MAX_RANK);
		int64_t v = 0;
		while (p < end && isdigit((unsigned char)*p)) {
			if (v > (INT64_MAX - 9) / 10)
				return ml_fail(e, ML_EFORMAT, ".npy dim is too large");
			v = v * 10 + (*p++ - '0');
		}
		/* numpy under Python 2 wrote long integers as 3L */
		if (p < end && *p == 'L')
			p++;
		h->dims[h->rank++] = v;
		p = skip_ws(p, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
		else if (p < end && *p != ')')
			return ml_fail(e, ML_EFORMAT, "bad .npy shape");
	}
	if (p >= end)
		return ml_fail(e, ML_EFORMAT, "bad .npy shape");
	*pp = p + 1;
	return 0;
}

static int
parse_header(const char *p, const char *end, struct npy_hdr *h, struct ml_err *e)
{
	h->descr = NULL;
	h->fortran = h->rank = -1;
	/* numpy ends the header with a newline, after space padding */
	if (p == end || end[-1] != '\n')
		return ml_fail(e, ML_EFORMAT, "bad .npy header: no newline at its end");
	p = skip_ws(p, end);
	if (p >= end || *p != '{')
		return ml_fail(e, ML_EFORMAT, "bad .npy header: not a dict");
	p = skip_ws(p + 1, end);
	while (p < end && *p != '}') {
		const char *k;
		size_t kn;
		if (!quoted(&p, end, &k, &kn))
			return ml_fail(e, ML_EFORMAT, "bad .npy header: expected a key");
		p = skip_ws(p, end);
		if (p >= end || *p != ':')
			return ml_fail(e, ML_EFORMAT, "bad .npy header: expected ':'");
		p = skip_ws(p + 1, end);
		if (kn == 5 && memcmp(k, "descr", 5) == 0 && h->descr == NULL) {
			if (p < end && *p == '[')
				return ml_fail(e, ML_ENOTSUP,
					       "structured .npy dtypes are not supported");
			if (!quoted(&p, end, &h->descr, &h->descr_len))
				return ml_fail(e, ML_EFORMAT, "bad .npy descr");
		} else if (kn == 13 && memcmp(k, "fortran_order", 13) == 0 && h->fortran < 0) {
			if (word(&p, end, "True"))
				h->fortran = 1;
			else if (word(&p, end, "False"))
				h->fortran = 0;
			else
				return ml_fail(e, ML_EFORMAT, "bad .npy fortran_order");
		} else if (kn == 5 && memcmp(k, "shape", 5) == 0 && h->rank < 0) {
			ML_TRY(parse_shape(&p, end, h, e));
		} else {
			return ml_fail(e, ML_EFORMAT, "bad .npy header: unexpected key '%.*s'",
				       (int)ML_MIN(kn, 32), k);
		}
		p = skip_ws(p, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
		else if (p < end && *p != '}')
			return ml_fail(e, ML_EFORMAT, "bad .npy header: expected ',' or '}'");
	}
	if (p >= end)
		return ml_fail(e, ML_EFORMAT, "bad .npy header: no '}'");
	if (skip_ws(p + 1, end) != end)
		return ml_fail(e, ML_EFORMAT, "bad .npy header: junk after the dict");
	if (h->descr == NULL)
		return ml_fail(e, ML_EFORMAT, ".npy header has no descr");
	if (h->fortran < 0)
		return ml_fail(e, ML_EFORMAT, ".npy header has no fortran_order");
	if (h->rank < 0)
		return ml_fail(e, ML_EFORMAT, ".npy header has no shape");
	return 0;
}

/*
 * from_fortran: the elements of src, a Fortran-order (column-major) array
 * of rank dims of es bytes each, into dst in C order: dst's last index
 * runs fastest; in src the first does. No dim is 0 (the caller's check).
 */
static void
from_fortran(uint8_t *dst, const uint8_t *src, size_t es, int rank, const int64_t *dims)
{
	int64_t idx[ML_MAX_RANK] = { 0 }, fstride[ML_MAX_RANK], n = 1;
	for (int d = 0; d < rank; d++) {
		fstride[d] = n;
		n *= dims[d];
	}
	int64_t off = 0;	/* element offset of idx in src */
	for (int64_t i = 0; i < n; i++) {
		memcpy(dst + (size_t)i * es, src + (size_t)off * es, es);
		for (int d = rank - 1; d >= 0; d--) {
			if (++idx[d] < dims[d]) {
				off += fstride[d];
				break;
			}
			off -= fstride[d] * (dims[d] - 1);
			idx[d] = 0;
		}
	}
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
	if (buf[7] != 0)
		return ml_fail(e, ML_ENOTSUP, ".npy format version %u.%u is not supported", major,
			       buf[7]);
	if (hlen > len - off)
		return ml_fail(e, ML_EFORMAT, "truncated .npy header");
	struct npy_hdr hd;
	ML_TRY(parse_header((const char *)buf + off, (const char *)buf + off + hlen, &hd, e));
	const char *d = hd.descr;
	if (hd.descr_len < 2 || hd.descr_len > 8)
		return ml_fail(e, ML_EFORMAT, "bad .npy descr");
	char order = d[0];
	if (order != '<' && order != '>' && order != '|' && order != '=')
		return ml_fail(e, ML_EFORMAT, "bad .npy descr");
	enum ml_dtype dt = ML_UNDEF;
	for (size_t i = 0; i < sizeof dcodes / sizeof dcodes[0]; i++)
		if (hd.descr_len - 1 == strlen(dcodes[i].code) &&
		    memcmp(d + 1, dcodes[i].code, hd.descr_len - 1) == 0)
			dt = dcodes[i].dt;
	if (dt == ML_UNDEF)
		return ml_fail(e, ML_ENOTSUP, ".npy dtype '%.*s' is not supported", (int)hd.descr_len,
			       d);
	bool fortran = hd.fortran == 1;
	int rank = hd.rank;
	int64_t *dims = hd.dims;
	struct ml_tval t = { .dtype = dt, .rank = rank };
	memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
	int64_t nb = ml_tval_nbytes(&t);
	size_t data_off = off + hlen;
	if (nb < 0)
		return ml_fail(e, ML_EFORMAT, ".npy shape is too large: its size overflows");
	if ((uint64_t)nb > len - data_off)
		return ml_fail(e, ML_EFORMAT, ".npy data is truncated (%zu bytes for shape needing %lld)",
			       len - data_off, (long long)nb);
	if ((uint64_t)nb < len - data_off)
		return ml_fail(e, ML_EFORMAT, ".npy file has %zu bytes after the array data",
			       len - data_off - (size_t)nb);
	if (dt == ML_C64 || dt == ML_C128)
		return ml_fail(e, ML_ENOTSUP, "complex .npy arrays are not supported");
	ML_TRY(ml_tval_alloc(out, dt, rank, dims, e));
	size_t es = ml_dtype_size(dt);
	if (fortran && rank > 1 && nb > 0)
		from_fortran(out->data, buf + data_off, es, rank, dims);
	else
		memcpy(out->data, buf + data_off, (size_t)nb);
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
