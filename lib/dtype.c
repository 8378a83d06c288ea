/*
 * dtype.c: element types: sizes, names, half-precision conversion and the
 * generic element conversion used by Cast, the readers and the writers.
 */
#include "ml_impl.h"

static const struct {
	const char *name;
	size_t size;
} dtab[ML_DTYPE_MAX] = {
	[ML_UNDEF] = { "undef", 0 },
	[ML_F32] = { "f32", 4 },
	[ML_U8] = { "u8", 1 },
	[ML_I8] = { "i8", 1 },
	[ML_U16] = { "u16", 2 },
	[ML_I16] = { "i16", 2 },
	[ML_I32] = { "i32", 4 },
	[ML_I64] = { "i64", 8 },
	[ML_STRING] = { "string", 0 },
	[ML_BOOL] = { "bool", 1 },
	[ML_F16] = { "f16", 2 },
	[ML_F64] = { "f64", 8 },
	[ML_U32] = { "u32", 4 },
	[ML_U64] = { "u64", 8 },
	[ML_C64] = { "c64", 8 },
	[ML_C128] = { "c128", 16 },
	[ML_BF16] = { "bf16", 2 },
};

size_t
ml_dtype_size(enum ml_dtype t)
{
	return (unsigned)t < ML_DTYPE_MAX ? dtab[t].size : 0;
}

const char *
ml_dtype_name(enum ml_dtype t)
{
	return (unsigned)t < ML_DTYPE_MAX && dtab[t].name != NULL ? dtab[t].name : "?";
}

enum ml_dtype
ml_dtype_from_name(const char *s)
{
	for (int i = 1; i < ML_DTYPE_MAX; i++)
		if (dtab[i].name != NULL && strcmp(dtab[i].name, s) == 0)
			return (enum ml_dtype)i;
	return ML_UNDEF;
}

bool
ml_dtype_is_float(enum ml_dtype t)
{
	return t == ML_F32 || t == ML_F64 || t == ML_F16 || t == ML_BF16;
}

bool
ml_dtype_is_int(enum ml_dtype t)
{
	switch (t) {
	case ML_U8: case ML_I8: case ML_U16: case ML_I16: case ML_I32: case ML_I64:
	case ML_U32: case ML_U64:
		return true;
	default:
		return false;
	}
}

float
ml_f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
	float f;

	if (e == 0) {
		/* zero or subnormal: value m * 2^-24 */
		f = (float)m * 5.9604644775390625e-8f;
		memcpy(&u, &f, 4);
		u |= s;
	} else if (e == 31) {
		u = s | 0x7f800000 | (m << 13);
	} else {
		u = s | ((e + 112) << 23) | (m << 13);
	}
	memcpy(&f, &u, 4);
	return f;
}

uint16_t
ml_f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t s = (u >> 16) & 0x8000;
	int32_t e = (int32_t)((u >> 23) & 0xff);
	uint32_t m = u & 0x7fffff;

	if (e == 255)
		return (uint16_t)(s | 0x7c00 | (m ? 0x200 | (m >> 13) : 0));
	e -= 112;
	if (e >= 31)
		return (uint16_t)(s | 0x7c00);
	if (e <= 0) {
		if (e < -10)
			return (uint16_t)s;
		/* subnormal: shift in the implicit bit, round to nearest even */
		m |= 0x800000;
		int shift = 14 - e;
		uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return (uint16_t)(s | r);
	}
	uint32_t r = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
		r++;		/* may carry into the exponent, which is right */
	return (uint16_t)(s | r);
}

float
ml_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t
ml_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

double
ml_get_f64(const void *p, enum ml_dtype t, int64_t i)
{
	switch (t) {
	case ML_F32: return ((const float *)p)[i];
	case ML_F64: return ((const double *)p)[i];
	case ML_F16: return ml_f16_to_f32(((const uint16_t *)p)[i]);
	case ML_BF16: return ml_bf16_to_f32(((const uint16_t *)p)[i]);
	case ML_U8: return ((const uint8_t *)p)[i];
	case ML_BOOL: return ((const uint8_t *)p)[i] != 0;
	case ML_I8: return ((const int8_t *)p)[i];
	case ML_U16: return ((const uint16_t *)p)[i];
	case ML_I16: return ((const int16_t *)p)[i];
	case ML_I32: return ((const int32_t *)p)[i];
	case ML_U32: return ((const uint32_t *)p)[i];
	case ML_I64: return (double)((const int64_t *)p)[i];
	case ML_U64: return (double)((const uint64_t *)p)[i];
	default: return 0;
	}
}

int64_t
ml_get_i64(const void *p, enum ml_dtype t, int64_t i)
{
	switch (t) {
	case ML_I64: return ((const int64_t *)p)[i];
	case ML_U64: return (int64_t)((const uint64_t *)p)[i];
	case ML_I32: return ((const int32_t *)p)[i];
	case ML_U32: return ((const uint32_t *)p)[i];
	case ML_I16: return ((const int16_t *)p)[i];
	case ML_U16: return ((const uint16_t *)p)[i];
	case ML_I8: return ((const int8_t *)p)[i];
	case ML_U8: return ((const uint8_t *)p)[i];
	case ML_BOOL: return ((const uint8_t *)p)[i] != 0;
	default: {
		double v = ml_get_f64(p, t, i);
		if (v != v)
			return 0;
		if (v >= 9.2e18)
			return INT64_MAX;
		if (v <= -9.2e18)
			return INT64_MIN;
		return (int64_t)v;
	}
	}
}

#define SAT(T, lo, hi) do { \
	if (v != v) { ((T *)p)[i] = 0; return; } \
	if (v <= (double)(lo)) { ((T *)p)[i] = (lo); return; } \
	if (v >= (double)(hi)) { ((T *)p)[i] = (hi); return; } \
	((T *)p)[i] = (T)v; return; } while (0)

void
ml_set_f64(void *p, enum ml_dtype t, int64_t i, double v)
{
	switch (t) {
	case ML_F32: ((float *)p)[i] = (float)v; return;
	case ML_F64: ((double *)p)[i] = v; return;
	case ML_F16: ((uint16_t *)p)[i] = ml_f32_to_f16((float)v); return;
	case ML_BF16: ((uint16_t *)p)[i] = ml_f32_to_bf16((float)v); return;
	case ML_BOOL: ((uint8_t *)p)[i] = v != 0; return;
	case ML_U8: SAT(uint8_t, 0, UINT8_MAX);
	case ML_I8: SAT(int8_t, INT8_MIN, INT8_MAX);
	case ML_U16: SAT(uint16_t, 0, UINT16_MAX);
	case ML_I16: SAT(int16_t, INT16_MIN, INT16_MAX);
	case ML_I32: SAT(int32_t, INT32_MIN, INT32_MAX);
	case ML_U32: SAT(uint32_t, 0, UINT32_MAX);
	case ML_I64: SAT(int64_t, INT64_MIN, INT64_MAX);
	case ML_U64: SAT(uint64_t, 0, UINT64_MAX);
	default: return;
	}
}

static void
set_i64(void *p, enum ml_dtype t, int64_t i, int64_t v)
{
	switch (t) {
	case ML_I64: ((int64_t *)p)[i] = v; return;
	case ML_U64: ((uint64_t *)p)[i] = (uint64_t)v; return;
	case ML_I32: ((int32_t *)p)[i] = (int32_t)v; return;
	case ML_U32: ((uint32_t *)p)[i] = (uint32_t)v; return;
	case ML_I16: ((int16_t *)p)[i] = (int16_t)v; return;
	case ML_U16: ((uint16_t *)p)[i] = (uint16_t)v; return;
	case ML_I8: ((int8_t *)p)[i] = (int8_t)v; return;
	case ML_U8: ((uint8_t *)p)[i] = (uint8_t)v; return;
	case ML_BOOL: ((uint8_t *)p)[i] = v != 0; return;
	default: ml_set_f64(p, t, i, (double)v); return;
	}
}

int
ml_convert(void *dst, enum ml_dtype dt, const void *src, enum ml_dtype st, int64_t n)
{
	if (dt == ML_STRING || st == ML_STRING || ml_dtype_size(dt) == 0 || ml_dtype_size(st) == 0)
		return ML_ENOTSUP;
	if (dt == st) {
		memmove(dst, src, (size_t)n * ml_dtype_size(dt));
		return 0;
	}
	if (st == ML_F32 && dt == ML_F16) {
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)dst)[i] = ml_f32_to_f16(((const float *)src)[i]);
		return 0;
	}
	if (st == ML_F16 && dt == ML_F32) {
		for (int64_t i = 0; i < n; i++)
			((float *)dst)[i] = ml_f16_to_f32(((const uint16_t *)src)[i]);
		return 0;
	}
	/* integer to integer keeps all 64 bits (wrapping as C does); others go through double */
	bool sint = ml_dtype_is_int(st) || st == ML_BOOL;
	bool dint = ml_dtype_is_int(dt);
	for (int64_t i = 0; i < n; i++) {
		if (sint && dint)
			set_i64(dst, dt, i, ml_get_i64(src, st, i));
		else
			ml_set_f64(dst, dt, i, ml_get_f64(src, st, i));
	}
	return 0;
}

int64_t
ml_tval_numel(const struct ml_tval *t)
{
	int64_t n = 1;

	if (t->rank < 0)
		return -1;
	for (int i = 0; i < t->rank; i++) {
		if (t->dims[i] < 0 || !ml_mul_ok(n, t->dims[i], &n))
			return -1;
	}
	return n;
}

int64_t
ml_tval_nbytes(const struct ml_tval *t)
{
	int64_t n = ml_tval_numel(t), b;
	if (n < 0 || !ml_mul_ok(n, (int64_t)ml_dtype_size(t->dtype), &b))
		return -1;
	return b;
}

int
ml_tval_alloc(struct ml_tval *t, enum ml_dtype dt, int rank, const int64_t *dims, struct ml_err *e)
{
	if (rank < 0 || rank > ML_MAX_RANK)
		return ml_fail(e, ML_EINVAL, "rank %d is out of range", rank);
	if (ml_dtype_size(dt) == 0)
		return ml_fail(e, ML_ENOTSUP, "dtype %s has no fixed size", ml_dtype_name(dt));
	struct ml_tval nt = { .dtype = dt, .rank = rank };
	for (int i = 0; i < rank; i++) {
		if (dims[i] < 0)
			return ml_fail(e, ML_EINVAL, "negative dim %lld", (long long)dims[i]);
		nt.dims[i] = dims[i];
	}
	int64_t nb = ml_tval_nbytes(&nt);
	if (nb < 0)
		return ml_fail(e, ML_EINVAL, "tensor size overflows");
	nt.data = ml_calloc(1, nb > 0 ? (size_t)nb : 1);
	if (nt.data == NULL)
		return ml_fail(e, ML_ENOMEM, "cannot allocate %lld bytes", (long long)nb);
	nt.owned = true;
	ml_tval_clear(t);
	*t = nt;
	return 0;
}

void
ml_tval_clear(struct ml_tval *t)
{
	if (t == NULL)
		return;
	if (t->owned)
		ml_free(t->data);
	memset(t, 0, sizeof *t);
}

char *
ml_tval_shape_str(const struct ml_tval *t, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "%s[", ml_dtype_name(t->dtype));
	if (t->rank < 0) {
		snprintf(buf + ML_MIN(k, n), n - ML_MIN(k, n), "?]");
		return buf;
	}
	for (int i = 0; i < t->rank && k < n; i++) {
		if (t->dims[i] < 0)
			k += (size_t)snprintf(buf + k, n - k, "%s?", i ? "," : "");
		else
			k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "",
					      (long long)t->dims[i]);
	}
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}
