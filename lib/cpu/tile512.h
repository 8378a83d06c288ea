/*
 * tile512.h: the store of a register tile that the AVX-512 GEMM kernels
 * (nn_gemm.c's f32 KERN, bf16.c's BKERN) share: R rows of two zmm
 * accumulators each, c0[i] and c1[i] (columns 0-15 and 16-31, masked by
 * m0 and m1), added to the current C (mode 1) or to the row's bias (mode
 * 0; bias NULL: 0) and stored to the mr valid rows of c (leading dim ldc).
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

#endif
