/*
 * idx.c: IDX files, the format of MNIST and Fashion-MNIST, gzipped or not,
 * read into and written from struct ml_tval; and ml_gunzip, the inflater
 * the data readers share. Files are untrusted: the header's sizes are
 * multiplied with overflow checks and must account for every byte, and a
 * gzipped file may not claim more than its stream can unpack to.
 */
#include <zlib.h>

#include "ml_impl.h"

/*
 * The most a deflate stream can unpack to per byte: a match of 258 bytes
 * costs at least two bits, so 1032 to 1 (zlib's technical notes); plus
 * room for the gzip headers of tiny files.
 */
#define DEFLATE_MAX_RATIO 1032
#define DEFLATE_SLACK 4096

/*
 * gunzip_limit: ml_gunzip, with the output stopped after limit bytes
 * (the caller then sees more data than it expected, and says so).
 * It inflates into a buffer that doubles as it fills, so a small file
 * that claims to unpack into gigabytes costs only what it really unpacks
 * to, and the allocation cap bounds that.
 */
static int
gunzip_limit(const uint8_t *buf, size_t len, size_t limit, uint8_t **out, size_t *out_len,
	     struct ml_err *e)
{
	*out = NULL;
	*out_len = 0;
	bool gz = len >= 2 && buf[0] == 0x1f && buf[1] == 0x8b;
	if (!gz)
		return 0;
	z_stream zs;
	memset(&zs, 0, sizeof zs);
	if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	size_t cap = len < ((size_t)1 << 20) ? ((size_t)1 << 16) : len * 4, n = 0;
	if (cap > limit)
		cap = limit > 0 ? limit : 1;
	uint8_t *p = ml_malloc(cap);
	int rc = 0;
	if (p == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	const uint8_t *in = buf, *end = buf + len;
	for (;;) {
		/* zlib counts in uInt: feed at most 1 GiB at a time */
		if (zs.avail_in == 0 && in < end) {
			size_t k = (size_t)(end - in);
			if (k > ((size_t)1 << 30))
				k = (size_t)1 << 30;
			zs.next_in = (Bytef *)in;
			zs.avail_in = (uInt)k;
			in += k;
		}
		if (n >= limit)
			break;
		if (n == cap) {
			if (cap > SIZE_MAX / 2) {
				rc = ml_fail(e, ML_ENOMEM, "decompressed data too large");
				goto out;
			}
			size_t ncap = cap * 2 < limit ? cap * 2 : limit;
			uint8_t *q = ml_realloc(p, ncap);
			if (q == NULL) {
				rc = ml_fail(e, ML_ENOMEM,
					     "decompressed data larger than the allocation cap");
				goto out;
			}
			p = q;
			cap = ncap;
		}
		size_t room = cap - n;
		if (room > ((size_t)1 << 30))
			room = (size_t)1 << 30;
		zs.next_out = p + n;
		zs.avail_out = (uInt)room;
		int z = inflate(&zs, Z_NO_FLUSH);
		n += room - zs.avail_out;
		if (z == Z_STREAM_END) {
			/* another gzip member may follow (as `cat a.gz b.gz` makes) */
			size_t left = (size_t)(end - in) + zs.avail_in;
			if (left == 0)
				break;
			const uint8_t *next = end - left;
			if (left < 2 || next[0] != 0x1f || next[1] != 0x8b) {
				rc = ml_fail(e, ML_EFORMAT, "junk after the end of the gzip data");
				goto out;
			}
			if (inflateReset(&zs) != Z_OK) {
				rc = ml_fail(e, ML_EFORMAT, "damaged gzip data");
				goto out;
			}
			zs.next_in = (Bytef *)next;
			zs.avail_in = 0;
			in = next;
			continue;
		}
		if (z == Z_BUF_ERROR && zs.avail_in == 0 && in == end) {
			rc = ml_fail(e, ML_EFORMAT, "truncated gzip data");
			goto out;
		}
		if (z != Z_OK && z != Z_BUF_ERROR) {
			rc = ml_fail(e, ML_EFORMAT, "damaged gzip data%s%s", zs.msg ? ": " : "",
				     zs.msg ? zs.msg : "");
			goto out;
		}
	}
out:
	inflateEnd(&zs);
	if (rc < 0) {
		ml_free(p);
		return rc;
	}
	*out = p;
	*out_len = n;
	return 1;
}

int
ml_gunzip(const uint8_t *buf, size_t len, uint8_t **out, size_t *out_len, struct ml_err *e)
{
	return gunzip_limit(buf, len, SIZE_MAX, out, out_len, e);
}

/*
 * gz_head: the first n bytes a gzip stream unpacks to, into head; the
 * count it gave (fewer for a short or damaged stream, which the full
 * inflate reports later).
 */
static size_t
gz_head(const uint8_t *buf, size_t len, uint8_t *head, size_t n)
{
	z_stream zs;
	memset(&zs, 0, sizeof zs);
	if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
		return 0;
	zs.next_in = (Bytef *)buf;
	zs.avail_in = len > ((size_t)1 << 30) ? (uInt)1 << 30 : (uInt)len;
	zs.next_out = head;
	zs.avail_out = (uInt)n;
	while (zs.avail_out > 0) {
		int z = inflate(&zs, Z_NO_FLUSH);
		if (z != Z_OK)
			break;
	}
	size_t got = n - zs.avail_out;
	inflateEnd(&zs);
	return got;
}

static const struct {
	uint8_t code;
	enum ml_dtype dt;
} idx_types[] = {
	{ 0x08, ML_U8 }, { 0x09, ML_I8 }, { 0x0B, ML_I16 }, { 0x0C, ML_I32 }, { 0x0D, ML_F32 },
	{ 0x0E, ML_F64 },
};
#define N_IDX_TYPES ((int)(sizeof idx_types / sizeof idx_types[0]))

static uint32_t
be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* decode_raw: an uncompressed IDX image. */
static int
decode_raw(struct ml_tval *out, const uint8_t *buf, size_t len, struct ml_err *e)
{
	if (len < 4)
		return ml_fail(e, ML_EFORMAT, "not an IDX file (%zu bytes)", len);
	if (buf[0] != 0 || buf[1] != 0)
		return ml_fail(e, ML_EFORMAT, "not an IDX file (bad magic bytes)");
	enum ml_dtype dt = ML_UNDEF;
	for (int i = 0; i < N_IDX_TYPES; i++)
		if (idx_types[i].code == buf[2])
			dt = idx_types[i].dt;
	if (dt == ML_UNDEF)
		return ml_fail(e, ML_EFORMAT, "IDX type code 0x%02x is not one of 08 09 0b 0c 0d 0e",
			       buf[2]);
	int rank = buf[3];
	if (rank < 1 || rank > ML_MAX_RANK)
		return ml_fail(e, ML_EFORMAT, "IDX file with %d dims (1 to %d are supported)", rank,
			       ML_MAX_RANK);
	size_t hdr = 4 + 4 * (size_t)rank;
	if (len < hdr)
		return ml_fail(e, ML_EFORMAT, "truncated IDX header (%zu of %zu bytes)", len, hdr);
	int64_t dims[ML_MAX_RANK], numel = 1, nbytes;
	for (int d = 0; d < rank; d++) {
		dims[d] = be32(buf + 4 + 4 * d);
		if (!ml_mul_ok(numel, dims[d], &numel))
			return ml_fail(e, ML_EFORMAT, "IDX dims overflow");
	}
	size_t es = ml_dtype_size(dt);
	if (!ml_mul_ok(numel, (int64_t)es, &nbytes))
		return ml_fail(e, ML_EFORMAT, "IDX dims overflow");
	if ((uint64_t)nbytes != (uint64_t)(len - hdr))
		return ml_fail(e, ML_EFORMAT, "IDX header says %lld bytes of data, the file has %zu",
			       (long long)nbytes, len - hdr);
	ML_TRY(ml_tval_alloc(out, dt, rank, dims, e));
	const uint8_t *src = buf + hdr;
	uint8_t *dst = out->data;
	if (es == 1) {
		memcpy(dst, src, (size_t)nbytes);
		return 0;
	}
	/* big-endian to the host's order (x86: little-endian) */
	for (int64_t i = 0; i < numel; i++)
		for (size_t b = 0; b < es; b++)
			dst[(size_t)i * es + b] = src[(size_t)i * es + es - 1 - b];
	return 0;
}

/*
 * idx_claim: the bytes (header and data) the IDX header in head claims,
 * or 0 when it is no header (decode_raw says what is wrong later).
 */
static uint64_t
idx_claim(const uint8_t *head, size_t n)
{
	if (n < 4 || head[0] != 0 || head[1] != 0 || head[3] < 1 || head[3] > ML_MAX_RANK)
		return 0;
	size_t es = 0;
	for (int i = 0; i < N_IDX_TYPES; i++)
		if (idx_types[i].code == head[2])
			es = ml_dtype_size(idx_types[i].dt);
	size_t hdr = 4 + 4 * (size_t)head[3];
	if (es == 0 || n < hdr)
		return 0;
	int64_t numel = (int64_t)es;
	for (int d = 0; d < head[3]; d++)
		if (!ml_mul_ok(numel, be32(head + 4 + 4 * d), &numel))
			return UINT64_MAX;
	return (uint64_t)numel + hdr;
}

int
ml_idx_decode(struct ml_tval *out, const uint8_t *buf, size_t len, struct ml_err *e)
{
	uint8_t *raw = NULL;
	size_t rlen = 0, limit = SIZE_MAX;
	memset(out, 0, sizeof *out);
	if (len >= 2 && buf[0] == 0x1f && buf[1] == 0x8b) {
		/*
		 * A gzipped file: its header is read first, and a size that the
		 * stream cannot hold (over 1032 bytes out per byte in) is refused
		 * before anything is allocated; the output then stops one byte
		 * past the size claimed.
		 */
		uint8_t head[4 + 4 * ML_MAX_RANK];
		size_t got = gz_head(buf, len, head, sizeof head);
		uint64_t claim = idx_claim(head, got);
		uint64_t most = (uint64_t)len * DEFLATE_MAX_RATIO + DEFLATE_SLACK;
		if (claim > most)
			return ml_fail(e, ML_EFORMAT,
				       "IDX header says %llu bytes, more than %zu bytes of gzip data "
				       "can unpack to",
				       claim == UINT64_MAX ? (unsigned long long)UINT64_MAX
							   : (unsigned long long)claim, len);
		if (claim > 0 && claim < SIZE_MAX)
			limit = (size_t)claim + 1;
		else if (claim == 0 && got == sizeof head)
			limit = sizeof head;	/* no IDX header: its first bytes say so */
	}
	int z = gunzip_limit(buf, len, limit, &raw, &rlen, e);
	if (z < 0)
		return z;
	int rc = z > 0 ? decode_raw(out, raw, rlen, e) : decode_raw(out, buf, len, e);
	ml_free(raw);
	return rc;
}

int
ml_idx_load(struct ml_tval *out, const char *path, struct ml_err *e)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	memset(out, 0, sizeof *out);
	ML_TRY(ml_read_file(path, &buf, &len, e));
	int rc = ml_idx_decode(out, buf, len, e);
	ml_free(buf);
	if (rc < 0 && rc != ML_ENOMEM)
		ml_err_prefix(e, path);
	return rc;
}

int
ml_idx_encode(const struct ml_tval *t, uint8_t **buf, size_t *len, struct ml_err *e)
{
	uint8_t code = 0;
	for (int i = 0; i < N_IDX_TYPES; i++)
		if (idx_types[i].dt == t->dtype)
			code = idx_types[i].code;
	if (code == 0)
		return ml_fail(e, ML_ENOTSUP, "IDX files cannot hold %s", ml_dtype_name(t->dtype));
	if (t->rank < 1 || t->rank > ML_MAX_RANK)
		return ml_fail(e, ML_ENOTSUP, "IDX files hold 1 to %d dims, not %d", ML_MAX_RANK,
			       t->rank);
	for (int d = 0; d < t->rank; d++)
		if (t->dims[d] < 0 || t->dims[d] > UINT32_MAX)
			return ml_fail(e, ML_ENOTSUP, "dim %lld does not fit an IDX header",
				       (long long)t->dims[d]);
	int64_t nb = ml_tval_nbytes(t);
	size_t hdr = 4 + 4 * (size_t)t->rank, es = ml_dtype_size(t->dtype);
	uint8_t *p = ml_malloc(hdr + (size_t)nb);
	if (p == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	p[0] = p[1] = 0;
	p[2] = code;
	p[3] = (uint8_t)t->rank;
	for (int d = 0; d < t->rank; d++) {
		uint32_t v = (uint32_t)t->dims[d];
		p[4 + 4 * d] = (uint8_t)(v >> 24);
		p[5 + 4 * d] = (uint8_t)(v >> 16);
		p[6 + 4 * d] = (uint8_t)(v >> 8);
		p[7 + 4 * d] = (uint8_t)v;
	}
	const uint8_t *src = t->data;
	for (int64_t i = 0; i < nb / (int64_t)es; i++)
		for (size_t b = 0; b < es; b++)
			p[hdr + (size_t)i * es + b] = src[(size_t)i * es + es - 1 - b];
	*buf = p;
	*len = hdr + (size_t)nb;
	return 0;
}
