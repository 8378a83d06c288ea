/*
 * quant_q8.h: the int8 engine under the internal "ml" Q8* ops (lib/ops/quant_q8.c,
 * lib/cpu/quant_q8.c, lib/cpu/quant_gemm.c), shared with the quantiser (lib/quant/).
 *
 * Activations between Q8 ops are uint8, channels last (NHWC, or [N, C] for a
 * matrix), with a per-tensor scale and zero point. Weights are int8, symmetric
 * per output channel, in [-127, 127]; every path (AMX's tdpbusd, VNNI's
 * vpdpbusd, AVX2's vpmaddwd on operands widened to int16, portable C) sums
 * the products exactly in int32, so every path computes the same integers.
 * A Q8Conv
 * of weight_bits 7 (mlquant --reduce-range) promises weights in [-64, 63],
 * for which AVX2's faster vpmaddubsw (two u8 x s8 products into a
 * saturating int16) cannot saturate (2 * 255 * 64 < 32768).
 */
#ifndef ML_CPU_QUANT_Q8_H
#define ML_CPU_QUANT_Q8_H

#include "ml_impl.h"

/* Columns (output channels) per packed weight panel, and K bytes per group. */
#define ML_Q8_NR 16
#define ML_Q8_KG 4
/* The weight range the quantiser writes (see above). */
#define ML_Q8_WMIN (-127)
#define ML_Q8_WMAX 127
/* ... and with weight_bits 7 */
#define ML_Q8_W7MIN (-64)
#define ML_Q8_W7MAX 63

/* ml_q8_kpad: K rounded up to a multiple of ML_Q8_KG. */
static inline int64_t
ml_q8_kpad(int64_t k)
{
	return (k + ML_Q8_KG - 1) / ML_Q8_KG * ML_Q8_KG;
}

/*
 * ml_q8_packed_len: bytes of the packed form of an [m, k] weight matrix:
 * panels of ML_Q8_NR columns; panel p holds, for each group g of 4 k, the 16
 * columns' 4 bytes: byte (p * kpad * 16) + g * 64 + (j % 16) * 4 + k % 4.
 */
static inline int64_t
ml_q8_packed_len(int64_t k, int64_t m)
{
	return (m + ML_Q8_NR - 1) / ML_Q8_NR * ML_Q8_NR * ml_q8_kpad(k);
}

/* ml_q8_pack: pack w ([m, k] row-major int8) into dst (ml_q8_packed_len bytes, zero padded). */
void ml_q8_pack(int8_t *dst, const int8_t *w, int64_t m, int64_t k);

/*
 * struct ml_q8_epi: the epilogue fused into the GEMM. For output column j
 * and int32 sum acc: v = acc + bias[j]; with f32out y = v * mult[j] (float),
 * otherwise y = clamp(round(v * mult[j]) + yzero, lo, hi) as uint8
 * (round half to even). w7: the weights are in [ML_Q8_W7MIN, ML_Q8_W7MAX]
 * (the AVX2 path may then use vpmaddubsw; weights outside would saturate it).
 */
struct ml_q8_epi {
	const int32_t *bias;
	const float *mult;
	int32_t yzero, lo, hi;
	bool f32out, w7;
};

/* Dispatch paths of ml_q8_gemm; ml_q8_path_ok says whether this CPU runs one. */
enum ml_q8_path {
	ML_Q8_AUTO = 0, ML_Q8_C = 1, ML_Q8_AVX2 = 2, ML_Q8_VNNI = 3, ML_Q8_AVXVNNI = 4,
	ML_Q8_AMX = 5		/* AMX tiles; needs AVX-512 VNNI too (ml_amx_ok, cpu/amx.h) */
};
bool ml_q8_path_ok(enum ml_q8_path p);
/*
 * ml_q8_path_name: "c", "avx2", "avx512vnni", "avxvnni" (the ymm VNNI
 * kernel: VEX-encoded on CPUs with AVX-VNNI, else EVEX on AVX-512 VNNI),
 * "amx" (tdpbusd on tiles; the rows short of a tile on AVX-512 VNNI).
 * Every path >= ML_Q8_AVX2 has AVX2, and ML_Q8_AMX has AVX-512 VNNI.
 */
const char *ml_q8_path_name(enum ml_q8_path p);
/*
 * ml_q8_set_path: force a path for later calls (tests); AUTO picks the best
 * the CPU has. Returns false (and changes nothing) when the CPU lacks it.
 * ML_Q8_PATH=c|avx2|vnni|avxvnni|amx in the environment does the same at
 * first use (ignored when the CPU lacks it; ML_AMX=0 makes it lack amx).
 */
bool ml_q8_set_path(enum ml_q8_path p);
enum ml_q8_path ml_q8_path(void);

/*
 * ml_q8_gemm: y[i, j] = epilogue(sum_k a[i, k] * w[j, k]) for i < p, j < m,
 * with a uint8 rows of stride lda holding kp = ml_q8_kpad(k) bytes each (the
 * bytes past k may hold anything: the packed weights are zero there), bp the
 * packed weights, y rows of stride ldy elements (uint8, or float with
 * ep->f32out). Splits over ml_parallel_for.
 */
void ml_q8_gemm(int64_t p, int64_t m, int64_t kp, const uint8_t *a, int64_t lda, const int8_t *bp,
		const struct ml_q8_epi *ep, void *y, int64_t ldy);

/* Kernels of the internal Q8 ops (lib/cpu/quant_q8.c). */
int ml_q8_run_quantize(struct ml_opctx *c);
int ml_q8_run_dequantize(struct ml_opctx *c);
int ml_q8_run_conv(struct ml_opctx *c);
int ml_q8_run_add(struct ml_opctx *c);
int ml_q8_run_maxpool(struct ml_opctx *c);
int ml_q8_run_gap(struct ml_opctx *c);

#endif
