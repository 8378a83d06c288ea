/*
 * fastmath.h: branch-free f32 exp and tanh that GCC can vectorise, for
 * the activation and softmax loops (libm's expf and tanhf are calls the
 * vectoriser cannot see through). Both are within a few ulp of the
 * correctly rounded result over the whole float range; see each comment.
 */
#ifndef ML_CPU_FASTMATH_H
#define ML_CPU_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/*
 * ml_expf: e^x as Cephes' expf: x = n ln2 + r with |r| <= ln2/2 (ln2 in
 * two parts, so r is exact), a degree-6 polynomial for e^r, then the
 * scale 2^n applied as two halves so that n from -150 to 128 never leaves
 * the normal exponent range (results underflow gradually, as expf's do).
 * Relative error is below 2 ulp; x > 88.72 gives inf, NaN stays NaN.
 */
static inline float
ml_expf(float x)
{
	/* written so a NaN x clamps to a number (no NaN reaches the int cast) */
	float xc = x <= 88.72283935546875f ? x : 88.72283935546875f;
	xc = xc >= -104.0f ? xc : -104.0f;
	float n = floorf(xc * 1.44269504088896341f + 0.5f);
	float r = xc - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	float z = r * r;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * z + r + 1.0f;
	int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
	uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
	float s1, s2;
	memcpy(&s1, &b1, sizeof s1);
	memcpy(&s2, &b2, sizeof s2);
	float y = p * s1 * s2;
	y = x > 88.72283935546875f ? INFINITY : y;
	return x != x ? x : y;
}

/*
 * ml_tanhf: tanh as Eigen's fast tanh: a 13/6-degree rational function on
 * x clamped to +-7.9 (beyond which tanh rounds to +-1), and x itself for
 * |x| < 0.0004 where tanh(x) rounds to x. Error is a few ulp.
 */
static inline float
ml_tanhf(float x)
{
	float xc = x > 7.90531110763549805f ? 7.90531110763549805f : x;
	xc = xc < -7.90531110763549805f ? -7.90531110763549805f : xc;
	float x2 = xc * xc;
	float p = -2.76076847742355e-16f;
	p = p * x2 + 2.00018790482477e-13f;
	p = p * x2 + -8.60467152213735e-11f;
	p = p * x2 + 5.12229709037114e-08f;
	p = p * x2 + 1.48572235717979e-05f;
	p = p * x2 + 6.37261928875436e-04f;
	p = p * x2 + 4.89352455891786e-03f;
	p = p * xc;
	float q = 1.19825839466702e-06f;
	q = q * x2 + 1.18534705686654e-04f;
	q = q * x2 + 2.26843463243900e-03f;
	q = q * x2 + 4.89352518554385e-03f;
	float y = p / q;
	return fabsf(x) < 0.0004f ? x : y;
}

/*
 * ml_erfcf: the complementary error function by the Chebyshev fit of
 * Numerical Recipes' erfcc, t exp(-z^2 + P(t)) with t = 1/(1 + |z|/2),
 * whose relative error is below 1.2e-7 for every z (reflected as
 * 2 - erfc(|z|) for negative z). Gelu uses it as 1 + erf(y) = erfc(-y),
 * which stays accurate where 1 + erf(y) cancels.
 */
static inline float
ml_erfcf(float z)
{
	float a = fabsf(z);
	float t = 1.0f / (1.0f + 0.5f * a);
	float p = 0.17087277f;
	p = p * t + -0.82215223f;
	p = p * t + 1.48851587f;
	p = p * t + -1.13520398f;
	p = p * t + 0.27886807f;
	p = p * t + -0.18628806f;
	p = p * t + 0.09678418f;
	p = p * t + 0.37409196f;
	p = p * t + 1.00002368f;
	p = p * t + -1.26551223f;
	float r = t * ml_expf(-a * a + p);
	return z < 0 ? 2.0f - r : r;
}

#endif
