/*
 * tile512.h: the store of a register tile that the AVX-512 GEMM kernels
 * (nn_gemm.c's f32 KERN, bf16.c's BKERN) share: R rows of two zmm
 * accumulators each, c0[i] and c1[i] (columns 0-15 and 16-31, masked by
 * m0 and m1), added to the current C (mode 1) or to the row's bias (mode
 * 0; bias NULL: 0) and stored to the mr valid rows of c (leading dim ldc).
 * tile512_tr16 transposes 16 x 16 floats in registers (the positions-major
 * results of the transposed convolutions into planes, and back).
 * Include it after <immintrin.h>, inside code built for avx512f.
 */
#ifndef ML_CPU_TILE512_H
#define ML_CPU_TILE512_H

#define TILE512_STORE(c0, c1, mr, c, ldc, m0, m1, bias, mode)			\
	for (int i_ = 0; i_ < (mr); i_++) {					\
		float *cr_ = (c) + i_ * (ldc);					\
		__m512 x0_, x1_;						\
		if ((mode) == 1) {						\
			x0_ = _mm512_maskz_loadu_ps((m0), cr_);			\
			x1_ = _mm512_maskz_loadu_ps((m1), cr_ + 16);		\
		} else {							\
			x0_ = x1_ = _mm512_set1_ps((bias) != NULL ? (bias)[i_] : 0.0f); \
		}								\
		_mm512_mask_storeu_ps(cr_, (m0), _mm512_add_ps((c0)[i_], x0_));	\
		_mm512_mask_storeu_ps(cr_ + 16, (m1), _mm512_add_ps((c1)[i_], x1_)); \
	}

/* tr16: the 16 x 16 floats of r transposed (r[i] lane k: row i, column k) */
__attribute__((target("avx512f"), always_inline)) static inline void
tile512_tr16(__m512 r[16])
{
	__m512 t[16];
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
	}
	/* r[4g + q], 128-bit lane k: rows 4g to 4g + 3 of column 4k + q */
	for (int i = 0; i < 16; i += 4) {
		r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
		r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
		r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
		r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
	}
	for (int q = 0; q < 4; q++) {
		__m512 u0 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x44);
		__m512 u1 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xee);
		__m512 u2 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x44);
		__m512 u3 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xee);
		t[q] = _mm512_shuffle_f32x4(u0, u2, 0x88);
		t[4 + q] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
		t[8 + q] = _mm512_shuffle_f32x4(u1, u3, 0x88);
		t[12 + q] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
	}
	for (int i = 0; i < 16; i++)
		r[i] = t[i];
}

#endif
