/*
 * vmath.c: the transcendental activations (Sigmoid, Tanh, SiLU, GELU, Exp)
 * over f32 arrays in AVX-512 and AVX2 registers: the unary ops, the fused
 * products' epilogues and FusedElementwise's links call ml_vunary (the
 * recurrent cells still run fastmath.h's scalar functions per gate).
 *
 * The formulas are fastmath.h's (Cephes' expf, Eigen's rational tanh, the
 * erfc of Numerical Recipes for GELU), evaluated on vectors: GCC does
 * vectorise the scalar functions, but through a 2^n built from integers in
 * two halves, a float division and blends that cost about 30 cycles a
 * vector (0.5 ns an element; EfficientNet's SiLU epilogues took a fifth of
 * the model's time). Here 2^n is vscalefps (AVX-512) or one exponent add
 * (AVX2, n clamped so that it stays normal: results below 2^-126 become
 * 0 instead of denormals), and the quotients are a reciprocal estimate and
 * one Newton step. Errors stay within a few ulp of fastmath.h's; NaN stays
 * NaN, and the limits (exp: 0 and inf; sigmoid: 0 and 1) are kept.
 *
 * ml_cpu_fma_level("ML_VMATH") picks the path per call: ML_VMATH=avx2
 * forces the AVX2 one on an AVX-512 CPU, ML_VMATH=0 the scalar loops of
 * fastmath.h, which other CPUs run (test_vmath checks each against libm).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <stdatomic.h>

#include "ml_impl.h"
#include "cpu/fastmath.h"
#include "cpu/elem.h"
#include "cpu/nn.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_VMATH 1
#include <immintrin.h>
#endif

/* The constants of fastmath.h's functions. */
#define EXP_HI 88.72283935546875f
#define EXP_LO -104.0f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define EP0 1.9875691500e-4f
#define EP1 1.3981999507e-3f
#define EP2 8.3334519073e-3f
#define EP3 4.1665795894e-2f
#define EP4 1.6666665459e-1f
#define EP5 5.0000001201e-1f
#define TANH_CLAMP 7.90531110763549805f

/* scalar: fastmath.h, one element at a time (the tails, and CPUs without AVX2) */
static void
un_scalar(int un, float *y, const float *x, int64_t n)
{
	switch (un) {
	case ML_UN_SIGMOID:
		for (int64_t i = 0; i < n; i++)
			y[i] = 1.0f / (1.0f + ml_expf(-x[i]));
		break;
	case ML_UN_SILU:
		for (int64_t i = 0; i < n; i++)
			y[i] = x[i] / (1.0f + ml_expf(-x[i]));
		break;
	case ML_UN_TANH:
		for (int64_t i = 0; i < n; i++)
			y[i] = ml_tanhf(x[i]);
		break;
	case ML_UN_GELU:
		for (int64_t i = 0; i < n; i++)
			y[i] = 0.5f * x[i] * ml_erfcf(-x[i] * (float)M_SQRT1_2);
		break;
	case ML_UN_EXP:
		for (int64_t i = 0; i < n; i++)
			y[i] = ml_expf(x[i]);
		break;
	}
}

#ifdef HAVE_VMATH
/*
 * The AVX-512 bodies. Each takes and returns one vector; the loop below
 * runs them over 16 lanes at a time and the tail through a mask.
 */
#define V16 __attribute__((target("avx512f"), always_inline)) static inline __m512

/* e^r for |r| <= ln2/2: fastmath.h's polynomial */
V16
exp_poly16(__m512 r)
{
	__m512 z = _mm512_mul_ps(r, r);
	__m512 p = _mm512_fmadd_ps(_mm512_set1_ps(EP0), r, _mm512_set1_ps(EP1));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EP2));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EP3));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EP4));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EP5));
	return _mm512_add_ps(_mm512_fmadd_ps(p, z, r), _mm512_set1_ps(1.0f));
}

/* e^x for x clamped to [EXP_LO, EXP_HI] (NaN becomes a number: the callers put it back) */
V16
exp_clamped16(__m512 x)
{
	__m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(EXP_LO)), _mm512_set1_ps(EXP_HI));
	__m512 nf = _mm512_roundscale_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(LOG2E), _mm512_set1_ps(0.5f)),
					 _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(LN2_HI), xc);
	r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(LN2_LO), r);
	return _mm512_scalef_ps(exp_poly16(r), nf);
}

/* 1 / d for d >= 1 (or +inf): the estimate and one Newton step */
V16
recip16(__m512 d)
{
	__m512 r = _mm512_rcp14_ps(d);
	return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
}

/* x where x is NaN, else v */
V16
keep_nan16(__m512 x, __m512 v)
{
	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), v, x);
}

V16
exp16(__m512 x)
{
	__m512 y = exp_clamped16(x);
	y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_HI), _CMP_GT_OQ), y,
				 _mm512_set1_ps(INFINITY));
	return keep_nan16(x, y);
}

/* 1 / (1 + e^-x): e^-x at most e^88 keeps 1 + e^-x finite for the reciprocal */
V16
sigmoid16(__m512 x)
{
	__m512 e = exp_clamped16(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), x), _mm512_set1_ps(88.0f)));
	__m512 y = recip16(_mm512_add_ps(e, _mm512_set1_ps(1.0f)));
	/* below -88 the answer is under 1e-38: 0, so that SiLU's x sigmoid(x) is 0 too */
	y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-88.0f), _CMP_GE_OQ), y);
	return keep_nan16(x, y);
}

V16
tanh16(__m512 x)
{
	__m512 lim = _mm512_set1_ps(TANH_CLAMP);
	__m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
	__m512 x2 = _mm512_mul_ps(xc, xc);
	__m512 p = _mm512_fmadd_ps(_mm512_set1_ps(-2.76076847742355e-16f), x2,
				   _mm512_set1_ps(2.00018790482477e-13f));
	p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-8.60467152213735e-11f));
	p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(5.12229709037114e-08f));
	p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.48572235717979e-05f));
	p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(6.37261928875436e-04f));
	p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(4.89352455891786e-03f));
	p = _mm512_mul_ps(p, xc);
	__m512 q = _mm512_fmadd_ps(_mm512_set1_ps(1.19825839466702e-06f), x2,
				   _mm512_set1_ps(1.18534705686654e-04f));
	q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(2.26843463243900e-03f));
	q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(4.89352518554385e-03f));
	__m512 y = _mm512_div_ps(p, q);
	__mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(0.0004f), _CMP_LT_OQ);
	return keep_nan16(x, _mm512_mask_blend_ps(tiny, y, x));
}

/* 0.5 x erfc(-x / sqrt 2), erfc(z) = t e^(-z^2 + P(t)) for z >= 0, t = 1 / (1 + |z| / 2) */
V16
gelu16(__m512 x)
{
	__m512 z = _mm512_mul_ps(x, _mm512_set1_ps(-(float)M_SQRT1_2));
	/* |z| beyond 16: erfc is 0 or 2 in floats; the bound keeps t finite for |x| = inf */
	__m512 a = _mm512_min_ps(_mm512_abs_ps(z), _mm512_set1_ps(16.0f));
	__m512 t = recip16(_mm512_fmadd_ps(a, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f)));
	__m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.17087277f), t, _mm512_set1_ps(-0.82215223f));
	p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.48851587f));
	p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.13520398f));
	p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.27886807f));
	p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.18628806f));
	p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.09678418f));
	p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.37409196f));
	p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.00002368f));
	p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.26551223f));
	__m512 r = _mm512_mul_ps(t, exp_clamped16(_mm512_fnmadd_ps(a, a, p)));
	__mmask16 neg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
	r = _mm512_mask_sub_ps(r, neg, _mm512_set1_ps(2.0f), r);
	return keep_nan16(x, _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)), r));
}

#define LOOP16(F)								\
	do {									\
		int64_t i = 0;							\
		for (; i + 16 <= n; i += 16)					\
			_mm512_storeu_ps(y + i, F(_mm512_loadu_ps(x + i)));	\
		if (i < n) {							\
			__mmask16 m = (__mmask16)((1u << (n - i)) - 1);		\
			_mm512_mask_storeu_ps(y + i, m, F(_mm512_maskz_loadu_ps(m, x + i))); \
		}								\
	} while (0)

#define SILU16(v) _mm512_mul_ps((v), sigmoid16(v))

__attribute__((target("avx512f")))
static void
un_avx512(int un, float *y, const float *x, int64_t n)
{
	switch (un) {
	case ML_UN_SIGMOID: LOOP16(sigmoid16); break;
	case ML_UN_SILU: LOOP16(SILU16); break;
	case ML_UN_TANH: LOOP16(tanh16); break;
	case ML_UN_GELU: LOOP16(gelu16); break;
	case ML_UN_EXP: LOOP16(exp16); break;
	}
}

/*
 * The AVX2 bodies: the same steps on 8 lanes; 2^n by adding n to the
 * exponent field, n clamped to -126 so the scale stays a normal number.
 */
#define V8 __attribute__((target("avx2,fma"), always_inline)) static inline __m256

V8
exp_poly8(__m256 r)
{
	__m256 z = _mm256_mul_ps(r, r);
	__m256 p = _mm256_fmadd_ps(_mm256_set1_ps(EP0), r, _mm256_set1_ps(EP1));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EP2));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EP3));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EP4));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EP5));
	return _mm256_add_ps(_mm256_fmadd_ps(p, z, r), _mm256_set1_ps(1.0f));
}

V8
exp_clamped8(__m256 x)
{
	__m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
	__m256 nf = _mm256_floor_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(LOG2E), _mm256_set1_ps(0.5f)));
	__m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(LN2_HI), xc);
	r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(LN2_LO), r);
	__m256 p = exp_poly8(r);
	/* p in [0.7, 1.5]: 2^n p for n in [-126, 127] by the exponent; n = 128 as 2 (2^127 p) */
	__m256 top = _mm256_cmp_ps(nf, _mm256_set1_ps(127.0f), _CMP_GT_OQ);
	__m256 under = _mm256_cmp_ps(nf, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
	nf = _mm256_max_ps(_mm256_min_ps(nf, _mm256_set1_ps(127.0f)), _mm256_set1_ps(-126.0f));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nf), _mm256_set1_epi32(127)), 23);
	__m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
	y = _mm256_blendv_ps(y, _mm256_add_ps(y, y), top);
	return _mm256_andnot_ps(under, y);
}

V8
recip8(__m256 d)
{
	__m256 r = _mm256_rcp_ps(d);
	r = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(1.0f)), r);
	return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(1.0f)), r);
}

V8
keep_nan8(__m256 x, __m256 v)
{
	return _mm256_blendv_ps(v, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

V8
abs8(__m256 x)
{
	return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
}

V8
exp8(__m256 x)
{
	__m256 y = exp_clamped8(x);
	y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY),
			     _mm256_cmp_ps(x, _mm256_set1_ps(EXP_HI), _CMP_GT_OQ));
	return keep_nan8(x, y);
}

/*
 * sigmoid8: 1 / (1 + e^-x) with e^-x for -x clamped to [-87, 88], where
 * 2^n of the reduction stays a normal float without exp_clamped8's
 * checks: n from the round-to-nearest of adding 1.5 2^23 (its low bits
 * are n), 2^n p by adding n to p's exponent. Below -87 the quotient's
 * reciprocal estimate of e^88 gives 0 (SiLU's x sigmoid(x) is 0 there
 * too); above 87, 1. NaN stays NaN.
 */
V8
sigmoid8(__m256 x)
{
	const __m256 magic = _mm256_set1_ps(12582912.0f);
	__m256 t = _mm256_min_ps(_mm256_set1_ps(88.0f),
				 _mm256_max_ps(_mm256_set1_ps(-87.0f), _mm256_sub_ps(_mm256_setzero_ps(), x)));
	__m256 z = _mm256_fmadd_ps(t, _mm256_set1_ps(LOG2E), magic);
	__m256 nf = _mm256_sub_ps(z, magic);
	__m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(LN2_HI), t);
	r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(LN2_LO), r);
	__m256 p = exp_poly8(r);
	__m256i e = _mm256_add_epi32(_mm256_castps_si256(p),
				     _mm256_slli_epi32(_mm256_castps_si256(z), 23));
	/* 1 / d: the estimate and one Newton step (within 3e-7: d >= 1, no tails to keep) */
	__m256 d = _mm256_add_ps(_mm256_castsi256_ps(e), _mm256_set1_ps(1.0f));
	__m256 y = _mm256_rcp_ps(d);
	y = _mm256_fmadd_ps(y, _mm256_fnmadd_ps(d, y, _mm256_set1_ps(1.0f)), y);
	return keep_nan8(x, y);
}

V8
tanh8(__m256 x)
{
	__m256 lim = _mm256_set1_ps(TANH_CLAMP);
	__m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim);
	__m256 x2 = _mm256_mul_ps(xc, xc);
	__m256 p = _mm256_fmadd_ps(_mm256_set1_ps(-2.76076847742355e-16f), x2,
				   _mm256_set1_ps(2.00018790482477e-13f));
	p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-8.60467152213735e-11f));
	p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(5.12229709037114e-08f));
	p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.48572235717979e-05f));
	p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(6.37261928875436e-04f));
	p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(4.89352455891786e-03f));
	p = _mm256_mul_ps(p, xc);
	__m256 q = _mm256_fmadd_ps(_mm256_set1_ps(1.19825839466702e-06f), x2,
				   _mm256_set1_ps(1.18534705686654e-04f));
	q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(2.26843463243900e-03f));
	q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(4.89352518554385e-03f));
	__m256 y = _mm256_div_ps(p, q);
	__m256 tiny = _mm256_cmp_ps(abs8(x), _mm256_set1_ps(0.0004f), _CMP_LT_OQ);
	return keep_nan8(x, _mm256_blendv_ps(y, x, tiny));
}

V8
gelu8(__m256 x)
{
	__m256 z = _mm256_mul_ps(x, _mm256_set1_ps(-(float)M_SQRT1_2));
	__m256 a = _mm256_min_ps(abs8(z), _mm256_set1_ps(16.0f));
	__m256 t = recip8(_mm256_fmadd_ps(a, _mm256_set1_ps(0.5f), _mm256_set1_ps(1.0f)));
	__m256 p = _mm256_fmadd_ps(_mm256_set1_ps(0.17087277f), t, _mm256_set1_ps(-0.82215223f));
	p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
	p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
	p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
	p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
	p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
	p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
	p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
	p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
	__m256 r = _mm256_mul_ps(t, exp_clamped8(_mm256_fnmadd_ps(a, a, p)));
	__m256 neg = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
	r = _mm256_blendv_ps(r, _mm256_sub_ps(_mm256_set1_ps(2.0f), r), neg);
	return keep_nan8(x, _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.5f)), r));
}

#define LOOP8(F)								\
	do {									\
		int64_t i = 0;							\
		/* four vectors an iteration: their chains overlap */		\
		for (; i + 32 <= n; i += 32) {					\
			__m256 u0 = F(_mm256_loadu_ps(x + i));			\
			__m256 u1 = F(_mm256_loadu_ps(x + i + 8));		\
			__m256 u2 = F(_mm256_loadu_ps(x + i + 16));		\
			__m256 u3 = F(_mm256_loadu_ps(x + i + 24));		\
			_mm256_storeu_ps(y + i, u0);				\
			_mm256_storeu_ps(y + i + 8, u1);			\
			_mm256_storeu_ps(y + i + 16, u2);			\
			_mm256_storeu_ps(y + i + 24, u3);			\
		}								\
		for (; i + 8 <= n; i += 8)					\
			_mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i)));	\
		if (i < n) {							\
			float t[8] = { 0 };					\
			memcpy(t, x + i, sizeof(float) * (size_t)(n - i));	\
			_mm256_storeu_ps(t, F(_mm256_loadu_ps(t)));		\
			memcpy(y + i, t, sizeof(float) * (size_t)(n - i));	\
		}								\
	} while (0)

#define SILU8(v) _mm256_mul_ps((v), sigmoid8(v))

__attribute__((target("avx2,fma")))
static void
un_avx2(int un, float *y, const float *x, int64_t n)
{
	switch (un) {
	case ML_UN_SIGMOID: LOOP8(sigmoid8); break;
	case ML_UN_SILU: LOOP8(SILU8); break;
	case ML_UN_TANH: LOOP8(tanh8); break;
	case ML_UN_GELU: LOOP8(gelu8); break;
	case ML_UN_EXP: LOOP8(exp8); break;
	}
}
#endif

/* vmath_level: ml_cpu_fma_level("ML_VMATH"), computed once */
static int
vmath_level(void)
{
	static atomic_int level = -1;
	int v = atomic_load_explicit(&level, memory_order_relaxed);
	if (v < 0) {
		v = ml_cpu_fma_level("ML_VMATH");
		atomic_store_explicit(&level, v, memory_order_relaxed);
	}
	return v;
}

bool
ml_vunary_has(int un)
{
	return un == ML_UN_SIGMOID || un == ML_UN_SILU || un == ML_UN_TANH || un == ML_UN_GELU ||
	       un == ML_UN_EXP;
}

int
ml_vunary(int un, float *y, const float *x, int64_t n)
{
	if (!ml_vunary_has(un))
		return 1;
	if (n <= 0)
		return 0;
#ifdef HAVE_VMATH
	int level = vmath_level();
	if (level == 2) {
		un_avx512(un, y, x, n);
		return 0;
	}
	if (level == 1) {
		un_avx2(un, y, x, n);
		return 0;
	}
#endif
	un_scalar(un, y, x, n);
	return 0;
}
