/*
 * tile512.h: the store of a register tile that the AVX-512 GEMM kernels
 * (nn_gemm.c's f32 KERN, bf16.c's BKERN) share: R rows of two zmm
 * accumulators each, c0[i] and c1[i] (columns 0-15 and 16-31, masked by
 * m0 and m1), added to the current C (mode 1) or to the row's bias (mode
 * 0; bias NULL: 0) and stored to the mr valid rows of c (leading dim ldc).
 * tile512_tr16 transposes 16 x 16 floats in registers, tile512_tr_block a
 * block of up to 16 x 16 through them (the training GEMM's packing, the
 * positions-major products of the convolutions into planes, and back).
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

/* tile512_tr16: r[0..15] rows of a 16 x 16 block become its columns. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile512_tr16(__m512 r[16])
{
	__m512 t[16];
	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 4; i++) {
		__m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
		__m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
		r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
		r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
		r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
		r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
	}
	for (int i = 0; i < 4; i++) {
		t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
		t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
		t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
		t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
	}
	for (int i = 0; i < 8; i++) {
		r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
		r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
	}
}

/*
 * tile512_tr_block: dst row q (q < nc, stride ld) = column q of the nr x nc
 * block of src (row stride ls), nr, nc <= 16; with full, all 16 lanes are
 * stored (zeros past nr), else only the first nr.
 */
__attribute__((target("avx512f"))) static inline void
tile512_tr_block(const float *src, int64_t ls, int nr, int nc, float *dst, int64_t ld, bool full)
{
	__m512 r[16];
	__mmask16 mc = (__mmask16)(nc >= 16 ? 0xffff : nc <= 0 ? 0 : (1u << nc) - 1);
	__mmask16 mr = (__mmask16)(full || nr >= 16 ? 0xffff : nr <= 0 ? 0 : (1u << nr) - 1);
	for (int i = 0; i < 16; i++)
		r[i] = i < nr ? _mm512_maskz_loadu_ps(mc, src + i * ls) : _mm512_setzero_ps();
	tile512_tr16(r);
	for (int q = 0; q < nc; q++)
		_mm512_mask_storeu_ps(dst + q * ld, mr, r[q]);
}

#endif
