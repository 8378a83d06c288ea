/*
 * quant_gemm.c: the packed u8 x s8 GEMM of the int8 engine, with the
 * requantisation fused into its epilogue (see quant_q8.h for the layouts).
 *
 * Five micro-kernels compute a block of rows by one or two 16-column
 * panels over the whole K, in int32: AMX (tdpbusd on 16 x 64-byte tiles,
 * 32 rows x 2 panels in four accumulator tiles, see amx_units; about 3x
 * VNNI on large GEMMs), AVX-512 VNNI (vpdpbusd, 8 rows x 16 columns in
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
 * over the thread pool, on every path; inside one, each panel (kp x 16
 * bytes, at most 72 KB for a 3x3x512 convolution) stays in cache while the
 * row block passes over it.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <stdatomic.h>
#include <stdio.h>

#include "cpu/amx.h"
#include "cpu/nn.h"
#include "cpu/quant_q8.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
/*
 * The AMX kernel is gcc's only: clang (the fuzz build) would need its own
 * spelling of the tile intrinsics, and there the path simply does not exist.
 */
#if !defined(__clang__)
#define HAVE_AMX 1
#endif
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
 * 4 rows x 16 columns in eight ymm, about twice kern_avx2_epi's speed.
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
 * epi8_avx2: 8 columns' int32 sums s (bias not yet added) through epi_c's
 * epilogue into y (8 bytes, or 8 floats with f32out): clamped to [lo -
 * zero, hi - zero] before cvtps, which rounds half to even as epi_c does
 * (the same bytes as epi_c's clamps to +-4e6 and then to [lo, hi]: the
 * bounds are integers), as epi512_row does.
 */
__attribute__((target("avx2,fma"), always_inline)) static inline void
epi8_avx2(__m256i s, __m256i bias, __m256 mult, const struct ml_q8_epi *ep, char *y)
{
	__m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s, bias)), mult);
	if (ep->f32out) {
		_mm256_storeu_ps((float *)y, v);
		return;
	}
	v = _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps((float)(ep->hi - ep->yzero))),
			  _mm256_set1_ps((float)(ep->lo - ep->yzero)));
	__m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(ep->yzero));
	__m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
	_mm_storel_epi64((__m128i *)y, _mm_packus_epi16(w16, w16));
}

/*
 * epi_avx2: the epilogue on 8 lanes at a time (epi8_avx2); cvtps rounds
 * half to even in the default rounding mode, as epi_c's rounding does.
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
	size_t ysz = ep->f32out ? sizeof(float) : 1;
	for (int h = 0; h < 2; h++)
		epi8_avx2(_mm256_loadu_si256((const __m256i *)(acc + 8 * h)),
			  _mm256_loadu_si256((const __m256i *)(ep->bias + j0 + 8 * h)),
			  _mm256_loadu_ps(ep->mult + j0 + 8 * h), ep, (char *)y + 8 * h * ysz);
}

/*
 * kern_avx2_epi: exact for any int8 weights (vpmaddubsw, which adds two u8
 * x s8 products into a saturating int16, is not): the 4 bytes of a row's
 * K group widened to int16 and broadcast, the panel's 64 bytes widened to
 * int16 in four ymm (4 columns x 4 k each), vpmaddwd into int32 pairs (k0
 * + k1 and k2 + k3 of each column). 2 rows at a time: 8 accumulators, 4
 * weight registers. Then the epilogue on the registers: each column's two
 * pair sums added by vphaddd (a lane permute puts the columns in order)
 * instead of through a tile in memory and a call per row; bias and mult
 * of the panel (ep's, zero-padded by the caller where nc < 16) loaded
 * once. The integer sums are exact, so the results are epi_avx2's to the
 * bit.
 */
__attribute__((target("avx2,fma"))) static void
kern_avx2_epi(int mr, int64_t kq, const uint8_t *a, int64_t lda, const int8_t *b,
	      const struct ml_q8_epi *ep, int64_t c0, int nc, char *y, int64_t ldy)
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
	/* c0v holds columns 4v .. 4v + 3 as pairs: hadd gives (0 1 4 5 | 2 3 6 7), 0xd8 orders them */
	__m256i bias0 = _mm256_loadu_si256((const __m256i *)(ep->bias + c0));
	__m256i bias1 = _mm256_loadu_si256((const __m256i *)(ep->bias + c0 + 8));
	__m256 mult0 = _mm256_loadu_ps(ep->mult + c0), mult1 = _mm256_loadu_ps(ep->mult + c0 + 8);
	size_t ysz = ep->f32out ? sizeof(float) : 1;
	for (int i = 0; i < mr; i++) {
		__m256i s0 = _mm256_permute4x64_epi64(
			i == 0 ? _mm256_hadd_epi32(c00, c01) : _mm256_hadd_epi32(c10, c11), 0xd8);
		__m256i s1 = _mm256_permute4x64_epi64(
			i == 0 ? _mm256_hadd_epi32(c02, c03) : _mm256_hadd_epi32(c12, c13), 0xd8);
		char *yr = y + i * ldy;
		if (nc == ML_Q8_NR) {
			epi8_avx2(s0, bias0, mult0, ep, yr);
			epi8_avx2(s1, bias1, mult1, ep, yr + 8 * ysz);
		} else {
			char tmp[ML_Q8_NR * sizeof(float)];
			epi8_avx2(s0, bias0, mult0, ep, tmp);
			epi8_avx2(s1, bias1, mult1, ep, tmp + 8 * ysz);
			memcpy(yr, tmp, (size_t)nc * ysz);
		}
	}
}

#define T512 "avx512f,avx512bw,avx512vl,avx512vnni"

/*
 * struct epi512: one panel's epilogue in zmm, for the fused kernels (VNNI
 * and AMX): the panel's bias and scales loaded once, the columns past nc
 * masked off (their bias and scale read as zero, nothing stored).
 */
struct epi512 {
	__m512i bias, zy;
	__m512 mult, flo, fhi;	/* lo - yzero, hi - yzero */
	__mmask16 m;
	bool f32out;
};

__attribute__((target(T512), always_inline)) static inline void
epi512_init(struct epi512 *e, const struct ml_q8_epi *ep, int64_t c0, int nc)
{
	e->m = nc >= ML_Q8_NR ? (__mmask16)0xffff : (__mmask16)((1u << nc) - 1);
	e->bias = _mm512_maskz_loadu_epi32(e->m, ep->bias + c0);
	e->mult = _mm512_maskz_loadu_ps(e->m, ep->mult + c0);
	e->zy = _mm512_set1_epi32(ep->yzero);
	e->flo = _mm512_set1_ps((float)(ep->lo - ep->yzero));
	e->fhi = _mm512_set1_ps((float)(ep->hi - ep->yzero));
	e->f32out = ep->f32out;
}

/*
 * epi512_row: one row's 16 int32 sums (biased: with the bias already in
 * them) through the epilogue into y. epi_c clamps to +-4e6, rounds half to
 * even, adds the zero point and clamps to [lo, hi]; clamping to [lo - zero,
 * hi - zero] before the rounding (cvtps) gives the same bytes, the bounds
 * being integers, in two operations fewer.
 */
__attribute__((target(T512), always_inline)) static inline void
epi512_row(const struct epi512 *e, __m512i acc, char *y, bool biased)
{
	if (!biased)
		acc = _mm512_add_epi32(acc, e->bias);
	__m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), e->mult);
	if (e->f32out) {
		_mm512_mask_storeu_ps(y, e->m, v);
		return;
	}
	v = _mm512_max_ps(_mm512_min_ps(v, e->fhi), e->flo);
	__m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), e->zy);
	_mm_mask_storeu_epi8(y, e->m, _mm512_cvtepi32_epi8(q));
}

/*
 * kern_vnni_epi: the AVX-512 VNNI kernel, 8 rows x 16 columns in eight
 * zmm (vpdpbusd), with the epilogue applied to the accumulators in
 * registers (no tile, no call per row): rows r < mr of y (stride ys bytes)
 * get columns c0 .. c0 + nc - 1, a narrow panel's columns masked.
 */
#define KERN_VNNI_EPI(NAME, R)								\
__attribute__((target(T512))) static void						\
NAME(int mr, int64_t kq, const uint8_t *a, int64_t lda, const int8_t *b,		\
     const struct ml_q8_epi *ep, int64_t c0, int nc, char *y, int64_t ys)		\
{											\
	const uint8_t *ar[R];								\
	__m512i acc[R];									\
	struct epi512 e;								\
											\
	epi512_init(&e, ep, c0, nc);							\
	for (int r = 0; r < R; r++) {							\
		ar[r] = a + (r < mr ? r * lda : 0);					\
		acc[r] = e.bias;							\
	}										\
	for (int64_t q = 0; q < kq; q++) {						\
		__m512i bq = _mm512_loadu_si512((const void *)(b + q * 64));		\
		for (int r = 0; r < R; r++)						\
			acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(ld32(ar[r] + q * 4)), bq); \
	}										\
	for (int r = 0; r < mr; r++)							\
		epi512_row(&e, acc[r], y + r * ys, true);				\
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
#ifdef HAVE_AMX
	case ML_Q8_AMX:
		/* the rows short of a tile and its epilogue are AVX-512's */
		return has_vnni512() && ml_amx_ok();
#endif
	default:
		return false;
	}
}

const char *
ml_q8_path_name(enum ml_q8_path p)
{
	static const char *const names[] = { "auto", "c", "avx2", "avx512vnni", "avxvnni", "amx" };
	return (unsigned)p < 6 ? names[p] : "?";
}

static enum ml_q8_path
best_path(void)
{
	const char *env = getenv("ML_Q8_PATH");
	if (env != NULL) {
		enum ml_q8_path p = strcmp(env, "c") == 0 ? ML_Q8_C :
				    strcmp(env, "avx2") == 0 ? ML_Q8_AVX2 :
				    strcmp(env, "vnni") == 0 ? ML_Q8_VNNI :
				    strcmp(env, "avxvnni") == 0 ? ML_Q8_AVXVNNI :
				    strcmp(env, "amx") == 0 ? ML_Q8_AMX : ML_Q8_AUTO;
		if (p != ML_Q8_AUTO && ml_q8_path_ok(p))
			return p;
	}
	if (ml_q8_path_ok(ML_Q8_AMX))
		return ML_Q8_AMX;
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
	bool fused2;		/* kern_avx2_epi instead of kern and epi */
	bool amx;		/* amx_units instead of all of the above */
};

#ifdef HAVE_AMX
#define TAMX "amx-tile,amx-int8," T512

/*
 * amx_pack_a: rows [0, nr) of a (stride lda, kp = 4 kq bytes each) into
 * ap as AMX A tiles: for each K step s of 64 bytes, 32 rows of 64 bytes,
 * the last step's bytes past kp zero, and rows nr .. nt - 1 zero (their
 * sums are never stored, but their bytes are then defined). Tile loads of
 * 16 rows at stride lda were slower than contiguous ones here (16 strided
 * streams per tile, from L2 once K is long), and the copy also pads the K
 * tail and the rows short of a tile, so that no tile reads past a row's kp
 * bytes or past A's last row.
 */
__attribute__((target(TAMX))) static void
amx_pack_a(uint8_t *ap, const uint8_t *a, int64_t lda, int nr, int nt, int64_t kq)
{
	const int64_t kb = kq / 16, tq = kq % 16, ks = kb + (tq > 0);
	const __mmask64 tm = tq == 0 ? 0 : (__mmask64)(~0ull >> (64 - 4 * tq));

	for (int i = nr; i < nt; i++)
		for (int64_t s = 0; s < ks; s++)
			_mm512_store_si512((void *)(ap + i * 64 + s * 2048), _mm512_setzero_si512());
	for (int i = 0; i < nr; i++) {
		const uint8_t *ar = a + i * lda;
		uint8_t *d = ap + i * 64;
		for (int64_t s = 0; s < kb; s++)
			_mm512_store_si512((void *)(d + s * 2048), _mm512_loadu_si512((const void *)(ar + s * 64)));
		if (tq > 0)
			_mm512_store_si512((void *)(d + kb * 2048),
					   _mm512_maskz_loadu_epi8(tm, (const void *)(ar + kb * 64)));
	}
}

/*
 * amx_units: q8_units on AMX. The eight tiles, all 16 rows x 64 bytes:
 * 0-3 the int32 sums of 32 rows x 2 panels (0: rows 0-15 x panel 0, 1:
 * rows 0-15 x panel 1, 2 and 3 rows 16-31), 4-5 the two 16-row slices of
 * A, 6-7 the two panels' B. One tdpbusd is 16 x 16 x 64 multiply-adds; a
 * packed panel's 16 K groups (1 KB, contiguous) are B's tile as they are;
 * A's 32 rows are copied per work item into tile order (amx_pack_a), the
 * copy serving each of the item's panels. The sums stay in the tiles over
 * the whole K, then go through a 4 KB buffer to the AVX-512 epilogue.
 *
 * Edges: the K tail (kq % 16 groups) is zero-padded in A's copy, and its B
 * copied into a buffer, because a full tile there would read past the
 * last panel's end (what lies past the tail in B meets zero A columns, and
 * adds nothing). The last rows of A short of a tile are zero-padded in
 * the copy, except the last 1 to 4 rows, which run kern_vnni_epi4 (a tile
 * for them would be at least 3/4 waste, slower than vpdpbusd; a batch-1
 * MatMul is all such rows); an odd last panel
 * runs with tiles 1 and 3 idle; a narrow last panel is zero-padded by
 * ml_q8_pack, its columns past nc masked in the epilogue.
 *
 * The configuration is loaded once per call (it zeroes the tiles) and the
 * tiles released at the end, so that a pool thread that goes idle does not
 * carry 8 KB of tile state through its context switches.
 */
__attribute__((target(TAMX))) static void
amx_units(const struct q8job *j, int64_t b, int64_t e)
{
	struct ml_amx_cfg cfg;
	_Alignas(64) int32_t cs[32 * 32];
	_Alignas(64) int8_t bt[2][16 * 64];
	const int64_t kq = j->kq, kb = kq / 16, tq = kq % 16, lda = j->lda;
	const int64_t ks = kb + (tq > 0);		/* K steps, the tail's included */
	const int64_t pst = ML_Q8_NR * ML_Q8_KG * kq;	/* bytes per panel */
	const size_t ysz = j->ep->f32out ? sizeof(float) : 1;
	const int64_t np = (j->m + ML_Q8_NR - 1) / ML_Q8_NR;
	/* slot 1: the caller's im2col matrix (this thread's, when it is the caller) is in slot 0 */
	uint8_t *ap = ml_cpu_scratch(1, (size_t)ks * 2048);

	memset(&cfg, 0, sizeof cfg);
	for (int t = 0; t < 8; t++)
		ml_amx_tile(&cfg, t, 16, 64);
	memset(bt, 0, sizeof bt);
	/*
	 * gcc's ldtilecfg and tileloadd asm name no memory operand (beyond 8
	 * bytes of the config): this barrier keeps the stores above, and
	 * those into ap and bt below, ahead of the tile instructions
	 */
	__asm__ volatile("" : : "r"(&cfg), "r"(bt) : "memory");
	_tile_loadconfig(&cfg);
	for (int64_t u = b; u < e; u++) {
		int64_t r0 = u / j->nnb * MB, r1 = ML_MIN(r0 + MB, j->p);
		int64_t p0 = u % j->nnb * NBP, p1 = ML_MIN(p0 + NBP, np);
		int64_t r = r0;
		while (ap != NULL && r1 - r > 4) {
			const int nr = (int)ML_MIN(32, r1 - r);
			const bool two = nr > 16;	/* rows 16-31 too */
			amx_pack_a(ap, j->a + r * lda, lda, nr, two ? 32 : 16, kq);
			__asm__ volatile("" : : "r"(ap) : "memory");
			for (int64_t pn = p0; pn < p1; pn += 2) {
				const bool pair = p1 - pn >= 2;	/* panel pn + 1 too */
				const int8_t *b0 = j->bp + pn * pst, *b1 = b0 + pst;
				_tile_zero(0);
				_tile_zero(1);
				_tile_zero(2);
				_tile_zero(3);
				for (int64_t s = 0; s < ks; s++) {
					if (s == kb) {	/* the tail */
						memcpy(bt[0], b0 + kb * 1024, (size_t)tq * 64);
						if (pair)
							memcpy(bt[1], b1 + kb * 1024, (size_t)tq * 64);
						__asm__ volatile("" : : "r"(bt) : "memory");
						b0 = bt[0] - kb * 1024;
						b1 = bt[1] - kb * 1024;
					}
					_tile_loadd(4, ap + s * 2048, 64);
					_tile_loadd(6, b0 + s * 1024, 64);
					_tile_dpbusd(0, 4, 6);
					if (pair) {
						_tile_loadd(7, b1 + s * 1024, 64);
						_tile_dpbusd(1, 4, 7);
					}
					if (two) {
						_tile_loadd(5, ap + s * 2048 + 1024, 64);
						_tile_dpbusd(2, 5, 6);
						if (pair)
							_tile_dpbusd(3, 5, 7);
					}
				}
				_tile_stored(0, cs, 128);
				if (pair)
					_tile_stored(1, cs + 16, 128);
				if (two) {
					_tile_stored(2, cs + 16 * 32, 128);
					if (pair)
						_tile_stored(3, cs + 16 * 32 + 16, 128);
				}
				for (int h = 0; h < (pair ? 2 : 1); h++) {
					int64_t c0 = (pn + h) * ML_Q8_NR;
					struct epi512 ep;
					epi512_init(&ep, j->ep, c0, (int)ML_MIN(ML_Q8_NR, j->m - c0));
					char *y = (char *)j->y + (r * j->ldy + c0) * (int64_t)ysz;
					for (int i = 0; i < nr; i++)
						epi512_row(&ep, _mm512_load_si512(cs + i * 32 + h * 16),
							   y + i * j->ldy * (int64_t)ysz, false);
				}
			}
			r += nr;
		}
		/* the last 1 to 4 rows, or all when the scratch buffer could not be had */
		for (int64_t pn = p0; r < r1 && pn < p1; pn++) {
			int64_t c0 = pn * ML_Q8_NR;
			int nc = (int)ML_MIN(ML_Q8_NR, j->m - c0);
			for (int64_t rr = r; rr < r1; rr += 8) {
				int mr = (int)ML_MIN(8, r1 - rr);
				(mr <= 4 ? kern_vnni_epi4 : kern_vnni_epi)(mr, kq, j->a + rr * lda, lda,
					j->bp + pn * pst, j->ep, c0, nc,
					(char *)j->y + (rr * j->ldy + c0) * (int64_t)ysz, j->ldy * (int64_t)ysz);
			}
		}
	}
	_tile_release();
}
#undef TAMX
#endif

static void
q8_units(void *ctx, int64_t b, int64_t e)
{
	const struct q8job *j = ctx;
	int32_t tile[8 * ML_Q8_NR];
	size_t ysz = j->ep->f32out ? sizeof(float) : 1;
	int64_t np = (j->m + ML_Q8_NR - 1) / ML_Q8_NR;

#ifdef HAVE_AMX
	if (j->amx) {
		amx_units(j, b, e);
		return;
	}
#endif
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
				if (j->fused2) {
					/* pe: the panel's bias and mult, zero-padded where nc < 16 */
					kern_avx2_epi(mr, j->kq, j->a + r * j->lda, j->lda, pan, &pe,
						      pad ? 0 : c0, nc,
						      (char *)j->y + (r * j->ldy + c0) * (int64_t)ysz,
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
	case ML_Q8_AMX:
		j.amx = true;
		break;
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
		/* 8-bit weights: kern_avx2_epi; 7-bit ones: vpmaddubsw, then epi_avx2 per row */
		j.kern = kern_avx2_w7;
		j.epi = epi_avx2;
		j.mr = ep->w7 ? 4 : 2;
		j.fused2 = !ep->w7;
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
