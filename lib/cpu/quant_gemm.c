/*
 * quant_gemm.c: the packed u8 x s8 GEMM of the int8 engine, with the
 * requantisation fused into its epilogue (see quant_q8.h for the layouts).
 *
 * Four micro-kernels compute a block of rows by one 16-column panel over
 * the whole K, in int32: AVX-512 VNNI (vpdpbusd, 8 rows x 16 columns in
 * eight zmm, the epilogue applied in registers), AVX-VNNI (vpdpbusd on
 * ymm, 8 rows x 16 columns in sixteen ymm, for CPUs with AVX-VNNI but not
 * AVX-512), AVX2 (both operands widened to int16, vpmaddwd into int32, 2
 * rows x 16 columns in eight ymm; for 7-bit weights vpmaddubsw, about twice
 * as fast) and portable C. The path is chosen once at run time from
 * __builtin_cpu_supports (the build is x86-64-v2, so the vector kernels
 * carry target attributes). The ymm VNNI kernel is one source compiled
 * twice: VEX-encoded (avxvnni) where the CPU has AVX-VNNI, else
 * EVEX-encoded (avx512vnni + avx512vl), which is how the tests run it on an
 * AVX-512 VNNI machine that lacks AVX-VNNI (AMD EPYC Zen 4).
 *
 * Work items are (a block of MB rows) x (a group of NBP panels) and split
 * over the thread pool; inside one, each panel (kp x 16 bytes, at most
 * 72 KB for a 3x3x512 convolution) stays in cache while the row block passes
 * over it.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <stdatomic.h>
#include <stdio.h>

#include "cpu/quant_q8.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#define MB 64			/* rows per work item (a multiple of every kernel's rows) */
#define NBP 4			/* panels per work item */

void
ml_q8_pack(int8_t *dst, const int8_t *w, int64_t m, int64_t k)
{
	int64_t kp = ml_q8_kpad(k), np = (m + ML_Q8_NR - 1) / ML_Q8_NR;

	memset(dst, 0, (size_t)(np * ML_Q8_NR * kp));
	for (int64_t j = 0; j < m; j++) {
		int8_t *pan = dst + (j / ML_Q8_NR) * ML_Q8_NR * kp + (j % ML_Q8_NR) * ML_Q8_KG;
		for (int64_t q = 0; q < k; q++)
			pan[(q / ML_Q8_KG) * ML_Q8_NR * ML_Q8_KG + q % ML_Q8_KG] = w[j * k + q];
	}
}

/*
 * A micro-kernel: c[r][0..15] = sum over kq groups of rows r < mr of a
 * (stride lda) times panel b. Rows past mr are computed from row 0 and
 * ignored.
 */
typedef void (*q8_kern)(int mr, int64_t kq, const uint8_t *a, int64_t lda, const int8_t *b,
			int32_t *c);
/* An epilogue for one row of nc <= 16 columns starting at column j0. */
typedef void (*q8_epi_fn)(const int32_t *acc, int nc, int64_t j0, const struct ml_q8_epi *ep,
			  void *y);

static void
kern_c(int mr, int64_t kq, const uint8_t *a, int64_t lda, const int8_t *b, int32_t *c)
{
	for (int r = 0; r < mr; r++) {
		const uint8_t *ar = a + r * lda;
		int32_t acc[ML_Q8_NR] = { 0 };
		for (int64_t q = 0; q < kq; q++) {
			const int8_t *bq = b + q * ML_Q8_NR * ML_Q8_KG;
			const uint8_t *aq = ar + q * ML_Q8_KG;
			for (int j = 0; j < ML_Q8_NR; j++)
				for (int t = 0; t < ML_Q8_KG; t++)
					acc[j] += (int32_t)aq[t] * bq[j * ML_Q8_KG + t];
		}
		memcpy(c + r * ML_Q8_NR, acc, sizeof acc);
	}
}

static void
epi_c(const int32_t *acc, int nc, int64_t j0, const struct ml_q8_epi *ep, void *y)
{
	for (int j = 0; j < nc; j++) {
		float v = (float)(acc[j] + ep->bias[j0 + j]) * ep->mult[j0 + j];
		if (ep->f32out) {
			((float *)y)[j] = v;
			continue;
		}
		/*
		 * round half to even by the 1.5 * 2^23 trick, exact below 2^22
		 * (past +-4e6 every result clamps the same); nearbyintf is a
		 * libm call per value, which showed in narrow layers
		 */
		float vc = v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
		float r = ((vc + 12582912.0f) - 12582912.0f) + (float)ep->yzero;
		r = r < (float)ep->lo ? (float)ep->lo : r > (float)ep->hi ? (float)ep->hi : r;
		((uint8_t *)y)[j] = (uint8_t)(int32_t)r;
	}
}

#ifdef HAVE_X86
static inline int32_t
ld32(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

/*
 * kern_avx2_w7: for weights in [-64, 63] (a Q8Conv of weight_bits 7,
 * mlquant --reduce-range): vpmaddubsw into int16 pairs, which cannot
 * saturate there (2 * 255 * 64 < 32768), then vpmaddwd by ones into int32;
 * 4 rows x 16 columns in eight ymm, about twice kern_avx2's speed.
 */
__attribute__((target("avx2,fma"))) static void
kern_avx2_w7(int mr, int64_t kq, const uint8_t *a, int64_t lda, const int8_t *b, int32_t *c)
{
	const uint8_t *a0 = a, *a1 = a + (mr > 1 ? lda : 0), *a2 = a + (mr > 2 ? 2 * lda : 0),
		      *a3 = a + (mr > 3 ? 3 * lda : 0);
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,
		c21 = c00, c30 = c00, c31 = c00;

	for (int64_t q = 0; q < kq; q++) {
		__m256i b0 = _mm256_loadu_si256((const __m256i *)(b + q * 64));
		__m256i b1 = _mm256_loadu_si256((const __m256i *)(b + q * 64 + 32));
		__m256i x, t0, t1;
#define ROW(ar, ca, cb)							\
		x = _mm256_set1_epi32(ld32(ar + q * 4));		\
		t0 = _mm256_madd_epi16(_mm256_maddubs_epi16(x, b0), ones);	\
		t1 = _mm256_madd_epi16(_mm256_maddubs_epi16(x, b1), ones);	\
		ca = _mm256_add_epi32(ca, t0);				\
		cb = _mm256_add_epi32(cb, t1);
		ROW(a0, c00, c01)
		ROW(a1, c10, c11)
		ROW(a2, c20, c21)
		ROW(a3, c30, c31)
#undef ROW
	}
	_mm256_storeu_si256((__m256i *)(c + 0), c00);
	_mm256_storeu_si256((__m256i *)(c + 8), c01);
	_mm256_storeu_si256((__m256i *)(c + 16), c10);
	_mm256_storeu_si256((__m256i *)(c + 24), c11);
	_mm256_storeu_si256((__m256i *)(c + 32), c20);
	_mm256_storeu_si256((__m256i *)(c + 40), c21);
	_mm256_storeu_si256((__m256i *)(c + 48), c30);
	_mm256_storeu_si256((__m256i *)(c + 56), c31);
}


/*
 * kern_avx2: exact for any int8 weights (vpmaddubsw, which adds two u8 x
 * s8 products into a saturating int16, is not): the 4 bytes of a row's K
 * group widened to int16 and broadcast, the panel's 64 bytes widened to
 * int16 in four ymm (4 columns x 4 k each), vpmaddwd into int32 pairs
 * (k0 + k1 and k2 + k3 of each column), the pairs added at the end. 2 rows
 * at a time: 8 accumulators, 4 weight registers.
 */
__attribute__((target("avx2,fma"))) static void
kern_avx2(int mr, int64_t kq, const uint8_t *a, int64_t lda, const int8_t *b, int32_t *c)
{
	const uint8_t *a0 = a, *a1 = a + (mr > 1 ? lda : 0);
	__m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00, c10 = c00,
		c11 = c00, c12 = c00, c13 = c00;

	for (int64_t q = 0; q < kq; q++) {
		const int8_t *bq = b + q * 64;
		__m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)bq));
		__m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bq + 16)));
		__m256i w2 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bq + 32)));
		__m256i w3 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bq + 48)));
		__m256i x0 = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(ld32(a0 + q * 4))));
		__m256i x1 = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(ld32(a1 + q * 4))));
		c00 = _mm256_add_epi32(c00, _mm256_madd_epi16(x0, w0));
		c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(x0, w1));
		c02 = _mm256_add_epi32(c02, _mm256_madd_epi16(x0, w2));
		c03 = _mm256_add_epi32(c03, _mm256_madd_epi16(x0, w3));
		c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(x1, w0));
		c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(x1, w1));
		c12 = _mm256_add_epi32(c12, _mm256_madd_epi16(x1, w2));
		c13 = _mm256_add_epi32(c13, _mm256_madd_epi16(x1, w3));
	}
	const __m256i acc[8] = { c00, c01, c02, c03, c10, c11, c12, c13 };
	for (int v = 0; v < 8; v++) {
		int32_t t[8];
		_mm256_storeu_si256((__m256i *)t, acc[v]);
		for (int jj = 0; jj < 4; jj++)	/* row v / 4, columns 4 (v % 4) + jj */
			c[(v / 4) * ML_Q8_NR + (v % 4) * 4 + jj] = t[2 * jj] + t[2 * jj + 1];
	}
}

/*
 * epi_avx2: the epilogue on 8 lanes at a time; cvtps rounds half to even
 * in the default rounding mode, as epi_c's rounding does.
 */
__attribute__((target("avx2,fma"))) static void
epi_avx2(const int32_t *acc, int nc, int64_t j0, const struct ml_q8_epi *ep, void *y)
{
	if (nc < ML_Q8_NR) {
		/* a narrow last panel: all 16 lanes over zero-padded bias and mult, nc stored */
		int32_t bias[ML_Q8_NR] = { 0 };
		float mult[ML_Q8_NR] = { 0 }, tmp[ML_Q8_NR];
		struct ml_q8_epi e = *ep;
		memcpy(bias, ep->bias + j0, sizeof(int32_t) * (size_t)nc);
		memcpy(mult, ep->mult + j0, sizeof(float) * (size_t)nc);
		e.bias = bias;
		e.mult = mult;
		epi_avx2(acc, ML_Q8_NR, 0, &e, tmp);
		memcpy(y, tmp, (size_t)nc * (ep->f32out ? sizeof(float) : 1));
		return;
	}
	const __m256i zy = _mm256_set1_epi32(ep->yzero), lo = _mm256_set1_epi32(ep->lo),
		      hi = _mm256_set1_epi32(ep->hi);
	__m256 v[2];
	for (int h = 0; h < 2; h++) {
		__m256i s = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(acc + 8 * h)),
					     _mm256_loadu_si256((const __m256i *)(ep->bias + j0 + 8 * h)));
		v[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_loadu_ps(ep->mult + j0 + 8 * h));
	}
	if (ep->f32out) {
		_mm256_storeu_ps((float *)y, v[0]);
		_mm256_storeu_ps((float *)y + 8, v[1]);
		return;
	}
	/* the clamp to +-4e6 of epi_c, so that out-of-range values saturate alike */
	const __m256 vmax = _mm256_set1_ps(4e6f), vmin = _mm256_set1_ps(-4e6f);
	v[0] = _mm256_max_ps(_mm256_min_ps(v[0], vmax), vmin);
	v[1] = _mm256_max_ps(_mm256_min_ps(v[1], vmax), vmin);
	__m256i q0 = _mm256_add_epi32(_mm256_cvtps_epi32(v[0]), zy);
	__m256i q1 = _mm256_add_epi32(_mm256_cvtps_epi32(v[1]), zy);
	q0 = _mm256_min_epi32(_mm256_max_epi32(q0, lo), hi);
	q1 = _mm256_min_epi32(_mm256_max_epi32(q1, lo), hi);
	/* packs work per 128-bit lane: fix the order with a permute */
	__m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
	__m128i b8 = _mm_packus_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
	_mm_storeu_si128((__m128i *)y, b8);
}

/*
 * kern_vnni_epi: the AVX-512 VNNI kernel, 8 rows x 16 columns in eight
 * zmm (vpdpbusd), with the epilogue applied to the accumulators in
 * registers (no tile, no call per row) and the panel's bias and scales
 * loaded once: rows r < mr of y (stride ys bytes) get columns c0 .. c0 +
 * nc - 1, a narrow panel's columns masked. The clamp to +-4e6 before the
 * conversion is epi_c's, so that out-of-range values saturate alike.
 */
#define KERN_VNNI_EPI(NAME, R)								\
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void		\
NAME(int mr, int64_t kq, const uint8_t *a, int64_t lda, const int8_t *b,		\
     const struct ml_q8_epi *ep, int64_t c0, int nc, char *y, int64_t ys)		\
{											\
	const uint8_t *ar[R];								\
	__m512i acc[R];									\
											\
	for (int r = 0; r < R; r++) {							\
		ar[r] = a + (r < mr ? r * lda : 0);					\
		acc[r] = _mm512_setzero_si512();					\
	}										\
	for (int64_t q = 0; q < kq; q++) {						\
		__m512i bq = _mm512_loadu_si512((const void *)(b + q * 64));		\
		for (int r = 0; r < R; r++)						\
			acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(ld32(ar[r] + q * 4)), bq); \
	}										\
	__mmask16 m = nc >= ML_Q8_NR ? (__mmask16)0xffff : (__mmask16)((1u << nc) - 1); \
	__m512i bias = _mm512_maskz_loadu_epi32(m, ep->bias + c0);			\
	__m512 mult = _mm512_maskz_loadu_ps(m, ep->mult + c0);				\
	const __m512 vmax = _mm512_set1_ps(4e6f), vmin = _mm512_set1_ps(-4e6f);		\
	const __m512i zy = _mm512_set1_epi32(ep->yzero), lo = _mm512_set1_epi32(ep->lo), \
		      hi = _mm512_set1_epi32(ep->hi);					\
	for (int r = 0; r < mr; r++) {							\
		__m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc[r], bias)), mult); \
		if (ep->f32out) {							\
			_mm512_mask_storeu_ps(y + r * ys, m, v);			\
			continue;							\
		}									\
		v = _mm512_max_ps(_mm512_min_ps(v, vmax), vmin);			\
		__m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), zy);		\
		q = _mm512_min_epi32(_mm512_max_epi32(q, lo), hi);			\
		_mm_mask_storeu_epi8(y + r * ys, m, _mm512_cvtepi32_epi8(q));		\
	}										\
}
KERN_VNNI_EPI(kern_vnni_epi, 8)
/* the same on 4 rows: the last rows of a short matrix (an encoder's 12 tokens: 8 + 4) */
KERN_VNNI_EPI(kern_vnni_epi4, 4)
#undef KERN_VNNI_EPI

/*
 * KERN_YMM: the ymm VNNI kernel, 8 rows by the panel's two halves (columns
 * 0-7 are the panel's first 32 bytes of each K group, 8-15 the next),
 * with DP the vpdpbusd intrinsic of target TGT.
 */
#define KERN_YMM(NAME, TGT, DP)								\
__attribute__((target(TGT))) static void						\
NAME(int mr, int64_t kq, const uint8_t *a, int64_t lda, const int8_t *b, int32_t *c)	\
{											\
	const uint8_t *ar[8];								\
	__m256i lo[8], hi[8];								\
	for (int r = 0; r < 8; r++) {							\
		ar[r] = a + (r < mr ? r * lda : 0);					\
		lo[r] = hi[r] = _mm256_setzero_si256();					\
	}										\
	for (int64_t q = 0; q < kq; q++) {						\
		__m256i b0 = _mm256_loadu_si256((const __m256i *)(b + q * 64));		\
		__m256i b1 = _mm256_loadu_si256((const __m256i *)(b + q * 64 + 32));	\
		for (int r = 0; r < 8; r++) {						\
			__m256i x = _mm256_set1_epi32(ld32(ar[r] + q * 4));		\
			lo[r] = DP(lo[r], x, b0);					\
			hi[r] = DP(hi[r], x, b1);					\
		}									\
	}										\
	for (int r = 0; r < 8; r++) {							\
		_mm256_storeu_si256((__m256i *)(c + r * 16), lo[r]);			\
		_mm256_storeu_si256((__m256i *)(c + r * 16 + 8), hi[r]);		\
	}										\
}
KERN_YMM(kern_avxvnni, "avx2,avxvnni", _mm256_dpbusd_avx_epi32)
KERN_YMM(kern_vnni256, "avx2,avx512f,avx512vl,avx512vnni", _mm256_dpbusd_epi32)
#undef KERN_YMM

/* has_avxvnni: the CPU has AVX-VNNI (VEX); else the ymm kernel runs EVEX-encoded */
static bool
has_avxvnni(void)
{
	/* CPUID leaf 7 subleaf 1, EAX bit 4: clang's __builtin_cpu_supports does not know it */
	unsigned a = 0, b, c, d;
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
	       (a & (1u << 4)) != 0;
}

static bool
has_vnni512(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}
#endif

/*
 * Path selection: -1 until first use; racing first callers compute the same
 * value.
 */
static atomic_int cur_path = -1;

bool
ml_q8_path_ok(enum ml_q8_path p)
{
	switch (p) {
	case ML_Q8_AUTO:
	case ML_Q8_C:
		return true;
#ifdef HAVE_X86
	case ML_Q8_AVX2:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2");
	case ML_Q8_VNNI:
		return has_vnni512();
	case ML_Q8_AVXVNNI:
		return has_avxvnni() || (has_vnni512() && __builtin_cpu_supports("avx512vl"));
#endif
	default:
		return false;
	}
}

const char *
ml_q8_path_name(enum ml_q8_path p)
{
	static const char *const names[] = { "auto", "c", "avx2", "avx512vnni", "avxvnni" };
	return (unsigned)p < 5 ? names[p] : "?";
}

static enum ml_q8_path
best_path(void)
{
	const char *env = getenv("ML_Q8_PATH");
	if (env != NULL) {
		enum ml_q8_path p = strcmp(env, "c") == 0 ? ML_Q8_C :
				    strcmp(env, "avx2") == 0 ? ML_Q8_AVX2 :
				    strcmp(env, "vnni") == 0 ? ML_Q8_VNNI :
				    strcmp(env, "avxvnni") == 0 ? ML_Q8_AVXVNNI : ML_Q8_AUTO;
		if (p != ML_Q8_AUTO && ml_q8_path_ok(p))
			return p;
	}
	if (ml_q8_path_ok(ML_Q8_VNNI))
		return ML_Q8_VNNI;
	if (ml_q8_path_ok(ML_Q8_AVXVNNI))
		return ML_Q8_AVXVNNI;
	if (ml_q8_path_ok(ML_Q8_AVX2))
		return ML_Q8_AVX2;
	return ML_Q8_C;
}

enum ml_q8_path
ml_q8_path(void)
{
	int v = atomic_load_explicit(&cur_path, memory_order_relaxed);
	if (v < 0) {
		v = (int)best_path();
		atomic_store_explicit(&cur_path, v, memory_order_relaxed);
	}
	return (enum ml_q8_path)v;
}

bool
ml_q8_set_path(enum ml_q8_path p)
{
	if (!ml_q8_path_ok(p))
		return false;
	atomic_store(&cur_path, (int)(p == ML_Q8_AUTO ? best_path() : p));
	return true;
}

struct q8job {
	int64_t p, m, kq, lda, ldy, nnb;
	const uint8_t *a;
	const int8_t *bp;
	const struct ml_q8_epi *ep;
	void *y;
	q8_kern kern;
	q8_epi_fn epi;
	int mr;
	bool fused;		/* kern_vnni_epi instead of kern and epi */
};

static void
q8_units(void *ctx, int64_t b, int64_t e)
{
	const struct q8job *j = ctx;
	int32_t tile[8 * ML_Q8_NR];
	size_t ysz = j->ep->f32out ? sizeof(float) : 1;
	int64_t np = (j->m + ML_Q8_NR - 1) / ML_Q8_NR;

	for (int64_t u = b; u < e; u++) {
		int64_t r0 = u / j->nnb * MB, r1 = ML_MIN(r0 + MB, j->p);
		int64_t p0 = u % j->nnb * NBP, p1 = ML_MIN(p0 + NBP, np);
		for (int64_t pn = p0; pn < p1; pn++) {
			const int8_t *pan = j->bp + pn * ML_Q8_NR * j->kq * ML_Q8_KG;
			int64_t c0 = pn * ML_Q8_NR;
			int nc = (int)ML_MIN(ML_Q8_NR, j->m - c0);
			/*
			 * a narrow last panel on a vector epilogue: bias and mult
			 * zero-padded to 16 once per panel, all lanes computed, nc
			 * values stored (what epi_avx2 does per row when called so)
			 */
			bool pad = nc < ML_Q8_NR && j->epi == epi_avx2;
			struct ml_q8_epi pe = *j->ep;
			int32_t pb[ML_Q8_NR] = { 0 };
			float pm[ML_Q8_NR] = { 0 };
			if (pad) {
				memcpy(pb, j->ep->bias + c0, sizeof(int32_t) * (size_t)nc);
				memcpy(pm, j->ep->mult + c0, sizeof(float) * (size_t)nc);
				pe.bias = pb;
				pe.mult = pm;
			}
			for (int64_t r = r0; r < r1; r += j->mr) {
				int mr = (int)ML_MIN(j->mr, r1 - r);
#ifdef HAVE_X86
				if (j->fused) {
					(mr <= 4 ? kern_vnni_epi4 : kern_vnni_epi)(mr, j->kq, j->a + r * j->lda, j->lda, pan, j->ep, c0,
						      nc, (char *)j->y + (r * j->ldy + c0) * (int64_t)ysz,
						      j->ldy * (int64_t)ysz);
					continue;
				}
#endif
				j->kern(mr, j->kq, j->a + r * j->lda, j->lda, pan, tile);
				for (int i = 0; i < mr; i++) {
					char *yr = (char *)j->y + ((r + i) * j->ldy + c0) * (int64_t)ysz;
					if (pad) {
						float tmp[ML_Q8_NR];
						j->epi(tile + i * ML_Q8_NR, ML_Q8_NR, 0, &pe, tmp);
						memcpy(yr, tmp, (size_t)nc * ysz);
					} else {
						j->epi(tile + i * ML_Q8_NR, nc, c0, j->ep, yr);
					}
				}
			}
		}
	}
}

void
ml_q8_gemm(int64_t p, int64_t m, int64_t kp, const uint8_t *a, int64_t lda, const int8_t *bp,
	   const struct ml_q8_epi *ep, void *y, int64_t ldy)
{
	struct q8job j = { .p = p, .m = m, .kq = kp / ML_Q8_KG, .lda = lda, .ldy = ldy, .a = a,
			   .bp = bp, .ep = ep, .y = y, .kern = kern_c, .epi = epi_c, .mr = 4 };
	int64_t np = (m + ML_Q8_NR - 1) / ML_Q8_NR;

	if (p <= 0 || m <= 0)
		return;
#ifdef HAVE_X86
	switch (ml_q8_path()) {
	case ML_Q8_VNNI:
		j.fused = true;
		j.mr = 8;
		break;
	case ML_Q8_AVXVNNI:
		j.kern = has_avxvnni() ? kern_avxvnni : kern_vnni256;
		j.epi = epi_avx2;
		j.mr = 8;
		break;
	case ML_Q8_AVX2:
		j.kern = ep->w7 ? kern_avx2_w7 : kern_avx2;
		j.epi = epi_avx2;
		j.mr = ep->w7 ? 4 : 2;
		break;
	default:
		break;
	}
#endif
	j.nnb = (np + NBP - 1) / NBP;
	int64_t units = (p + MB - 1) / MB * j.nnb;
	/* about 1 MMAC per item keeps the pool's overhead small */
	int64_t per = ML_MIN(p, MB) * ML_MIN(m, NBP * ML_Q8_NR) * kp;
	ml_parallel_for(units, per >= (1 << 20) ? 1 : (1 << 20) / (per + 1) + 1, q8_units, &j);
}
