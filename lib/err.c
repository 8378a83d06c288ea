/*
 * err.c: error reporting (ml_fail, ml_strerror), the exit statuses of
 * DESIGN.md, and the capped allocator every large allocation goes through.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>

#include "ml_impl.h"

int
ml_fail(struct ml_err *e, int code, const char *fmt, ...)
{
	va_list ap;

	if (e == NULL)
		return code;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	return code;
}

void
ml_err_prefix(struct ml_err *e, const char *prefix)
{
	char tmp[2 * sizeof e->msg];

	if (e == NULL)
		return;
	snprintf(tmp, sizeof tmp, "%s: %s", prefix, e->msg);
	memcpy(e->msg, tmp, sizeof e->msg - 1);
	e->msg[sizeof e->msg - 1] = '\0';
}

const char *
ml_strerror(int code)
{
	switch (code) {
	case ML_OK: return "success";
	case ML_ENOMEM: return "out of memory";
	case ML_EINVAL: return "invalid input";
	case ML_EIO: return "input/output error";
	case ML_EFORMAT: return "malformed file";
	case ML_ENOTSUP: return "not supported";
	case ML_ENODEV: return "no such device";
	case ML_ECL: return "OpenCL error";
	case ML_ENONFINITE: return "value not finite";
	}
	return "unknown error";
}

int
ml_exit_status(int code)
{
	switch (code) {
	case ML_OK: return 0;
	case ML_EINVAL: case ML_EFORMAT: return 3;
	case ML_ENOTSUP: case ML_ENODEV: case ML_ECL: return 4;
	default: return 1;
	}
}

/*
 * The allocation cap. Each block carries a header with its size (HDR) so
 * that ml_free can keep the running total; the total and the cap are atomic
 * because kernels allocate from pool threads. The cap comes from
 * ML_MAX_ALLOC once (cap_once), before any ml_set_alloc_cap takes effect.
 */
static _Atomic uint64_t alloc_total;
static _Atomic uint64_t alloc_cap;
static pthread_once_t cap_once = PTHREAD_ONCE_INIT;
static atomic_int cap_hit;	/* set once an allocation is refused for the cap */

/* cap_from_env: the cap ML_MAX_ALLOC sets, 16 GiB without it; run once. */
static void
cap_from_env(void)
{
	const char *s = getenv("ML_MAX_ALLOC");
	uint64_t cap = (uint64_t)16 << 30;
	if (s != NULL && *s != '\0') {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(s, &end, 10);
		uint64_t mul = 1;
		switch (*end) {
		case 'k': case 'K': mul = 1ull << 10; end++; break;
		case 'm': case 'M': mul = 1ull << 20; end++; break;
		case 'g': case 'G': mul = 1ull << 30; end++; break;
		}
		if (errno == 0 && *end == '\0' && v > 0 && v <= UINT64_MAX / mul)
			cap = v * mul;
	}
	atomic_store(&alloc_cap, cap);
}

uint64_t
ml_alloc_cap(void)
{
	pthread_once(&cap_once, cap_from_env);
	return atomic_load_explicit(&alloc_cap, memory_order_relaxed);
}

void
ml_set_alloc_cap(uint64_t bytes)
{
	pthread_once(&cap_once, cap_from_env);
	atomic_store(&alloc_cap, bytes);
}

bool
ml_alloc_cap_hit(void)
{
	return atomic_load(&cap_hit) != 0;
}

/*
 * Each block starts with a header holding its size, 64 bytes so that every
 * block is 64-byte aligned: a cache line, an AVX-512 vector, and so the
 * 64-byte aligned tensors inside a graph file's blob (and SGEMM panels packed
 * by mlopt) are aligned in memory too and are used in place.
 */
#define HDR 64

void *
ml_malloc(size_t n)
{
	uint64_t cap = ml_alloc_cap();
	if (n > cap || n > SIZE_MAX - HDR) {
		atomic_store(&cap_hit, 1);
		return NULL;
	}
	uint64_t now = atomic_fetch_add(&alloc_total, n);
	if (now + n > cap) {
		atomic_fetch_sub(&alloc_total, n);
		atomic_store(&cap_hit, 1);
		return NULL;
	}
	void *v = NULL;
	unsigned char *p = posix_memalign(&v, HDR, n + HDR) == 0 ? v : NULL;
	if (p == NULL) {
		atomic_fetch_sub(&alloc_total, n);
		return NULL;
	}
	memcpy(p, &n, sizeof n);
	return p + HDR;
}

void *
ml_calloc(size_t n, size_t size)
{
	if (size != 0 && n > SIZE_MAX / size)
		return NULL;
	void *p = ml_malloc(n * size);
	if (p != NULL)
		memset(p, 0, n * size);
	return p;
}

void
ml_free(void *p)
{
	size_t n;

	if (p == NULL)
		return;
	unsigned char *b = (unsigned char *)p - HDR;
	memcpy(&n, b, sizeof n);
	atomic_fetch_sub(&alloc_total, n);
	free(b);
}

void *
ml_realloc(void *p, size_t n)
{
	size_t old;

	if (p == NULL)
		return ml_malloc(n);
	memcpy(&old, (unsigned char *)p - HDR, sizeof old);
	void *q = ml_malloc(n);
	if (q == NULL)
		return NULL;
	memcpy(q, p, old < n ? old : n);
	ml_free(p);
	return q;
}

bool
ml_mul_ok(int64_t a, int64_t b, int64_t *out)
{
	if (a < 0 || b < 0)
		return false;
#if defined(__GNUC__)
	/* no 64-bit division: the executor asks this of every tensor of every run */
	int64_t p;
	if (__builtin_mul_overflow(a, b, &p))
		return false;
	*out = p;
#else
	if (a != 0 && b > INT64_MAX / a)
		return false;
	*out = a * b;
#endif
	return true;
}

double
ml_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}
