/*
 * npz.c: .npz archives, the zip files numpy.savez and savez_compressed
 * write: the central directory is read (zip64 sizes and offsets too), each
 * member located through its local header, inflated when deflated, and
 * decoded by the .npy reader. Every offset and size is checked against the
 * archive's length before it is used.
 */
#include <zlib.h>

#include "ml_impl.h"

static uint16_t
le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t
le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t
le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* inflate_raw: a raw deflate stream of exactly want bytes of output. */
static int
inflate_raw(const uint8_t *src, size_t n, uint8_t *dst, size_t want, struct ml_err *e)
{
	z_stream zs;
	memset(&zs, 0, sizeof zs);
	if (n > UINT32_MAX || want > UINT32_MAX)
		return ml_fail(e, ML_ENOTSUP, ".npz member over 4 GiB");
	if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	zs.next_in = (Bytef *)src;
	zs.avail_in = (uInt)n;
	zs.next_out = dst;
	zs.avail_out = (uInt)want;
	int z = inflate(&zs, Z_FINISH);
	size_t got = want - zs.avail_out;
	inflateEnd(&zs);
	if (z != Z_STREAM_END || got != want)
		return ml_fail(e, ML_EFORMAT, "damaged deflate data in .npz member");
	return 0;
}

int
ml_npz_decode(const uint8_t *buf, size_t len,
	      int (*fn)(void *ctx, const char *name, struct ml_tval *arr, struct ml_err *e),
	      void *ctx, struct ml_err *e)
{
	/* the end of central directory record: 22 bytes plus a comment of up to 64 KiB */
	if (len < 22)
		return ml_fail(e, ML_EFORMAT, "not a .npz file (too short)");
	size_t eocd = SIZE_MAX;
	size_t lo = len > 22 + 65535 ? len - 22 - 65535 : 0;
	for (size_t i = len - 22 + 1; i-- > lo;)
		if (le32(buf + i) == 0x06054b50 && i + 22 + le16(buf + i + 20) == len) {
			eocd = i;
			break;
		}
	if (eocd == SIZE_MAX)
		return ml_fail(e, ML_EFORMAT, "not a .npz file (no zip directory)");
	uint64_t count = le16(buf + eocd + 10), cd_size = le32(buf + eocd + 12),
		 cd_off = le32(buf + eocd + 16);
	if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
		/* zip64: the locator sits right before the record */
		if (eocd < 20 || le32(buf + eocd - 20) != 0x07064b50)
			return ml_fail(e, ML_EFORMAT, "damaged .npz (zip64 locator missing)");
		uint64_t r = le64(buf + eocd - 20 + 8);
		if (r > len || len - r < 56 || le32(buf + r) != 0x06064b50)
			return ml_fail(e, ML_EFORMAT, "damaged .npz (zip64 directory record)");
		count = le64(buf + r + 32);
		cd_size = le64(buf + r + 40);
		cd_off = le64(buf + r + 48);
	}
	if (cd_off > len || cd_size > len - cd_off)
		return ml_fail(e, ML_EFORMAT, "damaged .npz (directory out of the file)");
	size_t p = (size_t)cd_off, cd_end = (size_t)(cd_off + cd_size);
	for (uint64_t k = 0; k < count; k++) {
		if (cd_end - p < 46 || le32(buf + p) != 0x02014b50)
			return ml_fail(e, ML_EFORMAT, "damaged .npz (directory entry %llu)",
				       (unsigned long long)k);
		uint16_t flags = le16(buf + p + 8), method = le16(buf + p + 10);
		uint64_t csize = le32(buf + p + 20), usize = le32(buf + p + 24);
		size_t nlen = le16(buf + p + 28), xlen = le16(buf + p + 30), clen = le16(buf + p + 32);
		uint64_t loff = le32(buf + p + 42);
		if (cd_end - p - 46 < nlen + xlen + clen)
			return ml_fail(e, ML_EFORMAT, "damaged .npz (directory entry %llu)",
				       (unsigned long long)k);
		const uint8_t *name = buf + p + 46, *x = name + nlen;
		/* zip64 extra field: the 0xFFFFFFFF fields, in order */
		for (size_t q = 0; q + 4 <= xlen;) {
			size_t id = le16(x + q), sz = le16(x + q + 2), f = q + 4;
			if (q + 4 + sz > xlen)
				return ml_fail(e, ML_EFORMAT, "damaged .npz (extra field)");
			if (id == 1) {
				uint64_t *fields[3] = { &usize, &csize, &loff };
				for (int j = 0; j < 3; j++) {
					if (*fields[j] != 0xFFFFFFFF)
						continue;
					if (f + 8 > q + 4 + sz)
						return ml_fail(e, ML_EFORMAT,
							       "damaged .npz (zip64 extra field)");
					*fields[j] = le64(x + f);
					f += 8;
				}
			}
			q += 4 + sz;
		}
		if (flags & 1)
			return ml_fail(e, ML_ENOTSUP, "encrypted .npz members are not supported");
		if (method != 0 && method != 8)
			return ml_fail(e, ML_ENOTSUP, ".npz compression method %u is not supported",
				       method);
		if (loff > len || len - loff < 30 || le32(buf + loff) != 0x04034b50)
			return ml_fail(e, ML_EFORMAT, "damaged .npz (local header of member %llu)",
				       (unsigned long long)k);
		uint64_t data = loff + 30 + le16(buf + loff + 26) + le16(buf + loff + 28);
		if (data > len || csize > len - data)
			return ml_fail(e, ML_EFORMAT, "damaged .npz (member %llu is out of the file)",
				       (unsigned long long)k);
		if (method == 0 && csize != usize)
			return ml_fail(e, ML_EFORMAT, "damaged .npz (stored member sizes differ)");
		char nm[256];
		size_t nl = nlen < sizeof nm ? nlen : sizeof nm - 1;
		memcpy(nm, name, nl);
		nm[nl] = '\0';
		if (nl >= 4 && strcmp(nm + nl - 4, ".npy") == 0)
			nm[nl - 4] = '\0';
		const uint8_t *src = buf + data;
		uint8_t *tmp = NULL;
		if (method == 8) {
			/* deflate rarely shrinks below 1/1032 of its output */
			if (usize / 1032 > csize + 1)
				return ml_fail(e, ML_EFORMAT, "damaged .npz (member sizes)");
			if ((tmp = ml_malloc(usize ? (size_t)usize : 1)) == NULL)
				return ml_fail(e, ML_ENOMEM, "out of memory");
			int rc = inflate_raw(src, (size_t)csize, tmp, (size_t)usize, e);
			if (rc < 0) {
				ml_free(tmp);
				return rc;
			}
			src = tmp;
		}
		struct ml_tval arr = { 0 };
		int rc = ml_npy_decode(&arr, src, (size_t)usize, e);
		ml_free(tmp);
		if (rc < 0) {
			char m[sizeof e->msg];
			snprintf(m, sizeof m, "%s", e ? e->msg : "");
			return ml_fail(e, rc, "member '%s': %s", nm, m);
		}
		rc = fn(ctx, nm, &arr, e);
		ml_tval_clear(&arr);
		if (rc < 0)
			return rc;
		p += 46 + nlen + xlen + clen;
	}
	return 0;
}
