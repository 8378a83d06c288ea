/*
 * nn.h: what the CPU kernel files of the nn and rnn families share: the
 * BLAS wrappers of lib/cpu/blas.c (the one file that includes cblas.h),
 * the per-thread scratch buffer, and the kernels that ml_cpu_nn[] lists.
 */
#ifndef ML_CPU_NN_H
#define ML_CPU_NN_H

#include "ops/nn.h"

/*
 * ml_sgemm / ml_dgemm: C[m, n] = alpha * op(A) op(B) + beta * C, row-major,
 * op transposing where ta/tb are set (A is then stored [k, m], B [n, k]).
 * lda, ldb, ldc are row strides in elements. A single row or column goes
 * to gemv. Call these from the calling thread only, never from inside
 * ml_parallel_for: OpenBLAS runs its own threads. Returns false when a size
 * does not fit BLAS's int (nothing is computed).
 */
bool ml_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
	      int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
bool ml_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
	      int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc);

/*
 * ml_cpu_scratch: a buffer of at least n bytes, aligned to 64, owned by the
 * calling thread and slot (0 .. ML_SCRATCH_SLOTS-1), reused across calls so that kernels
 * run without allocating; NULL when allocation fails. The buffer lives
 * until the thread's next larger request for that slot (or process exit);
 * a kernel must not hold it across a call to another kernel.
 */
#define ML_SCRATCH_SLOTS 7
void *ml_cpu_scratch(int slot, size_t n);
/*
 * ml_cpu_scratch_room: the most bytes a request for slot would get now
 * without a new allocation (the node's loan, or the slot's heap block), so a
 * kernel that can work in smaller tiles may size them to fit.
 */
size_t ml_cpu_scratch_room(int slot);
/*
 * ml_cpu_scratch_fits: whether requests of n[i] bytes for slot[i], made in
 * that order, would all be served without a new allocation.
 */
bool ml_cpu_scratch_fits(int nreq, const int *slot, const size_t *n);

/*
 * ml_cpu_wcache: room for a form of c's weight (input 1) that a kernel
 * derives (kind ML_WC_*, bytes): the node's cached block when the weight
 * is a constant or parameter of the graph and the session keeps a cache
 * (*fill: false when it holds that form of that weight already), else a
 * new block that the caller frees (*tmp). NULL when out of memory. A node
 * caches one form: asking for another replaces it.
 * ml_cpu_wconst: whether c's weight is a constant (never a parameter,
 * which training updates in place) and c's node has a cache.
 */
enum {
	ML_WC_F32 = 1, ML_WC_PANELS, ML_WC_CPAIR, ML_WC_ROWS, ML_WC_WINO, ML_WC_PANELS_T,
	ML_WC_PANELS_H, ML_WC_TAPS
};
void *ml_cpu_wcache(struct ml_opctx *c, int kind, size_t bytes, bool *fill, void **tmp);
bool ml_cpu_wconst(const struct ml_opctx *c);
/*
 * ml_cpu_wpanels (fused_mm.c): c's constant weight (input 1) as a [k, n]
 * matrix (trans: the transpose of the [n, k] weight, as a convolution's
 * [M, C kH kW]) in ml_pgemm's panels, packed at the first call into the
 * node's cache (an fp16 weight, not transposed, widened as it is packed);
 * NULL when the weight is not a constant or c has no cache (the caller
 * packs per call then), or out of memory.
 * ml_cpu_fmm_panels: y [m, n] = a [m, k] times those panels (bp, 64-byte
 * aligned), plus bias (n; NULL: none), plus z ([m, n]; NULL: none), then
 * activation act (ML_ACT_*, Clip within [lo, hi]): FusedMatMul's kernel,
 * a few rows streaming each panel once.
 */
const float *ml_cpu_wpanels(struct ml_opctx *c, int64_t k, int64_t n, bool trans);
/* ml_cpu_pack_panels: b [k, n] into bp, ml_pgemm_packed_len(k, n) floats, on this thread. */
void ml_cpu_pack_panels(const float *b, int64_t k, int64_t n, float *bp);
void ml_cpu_fmm_panels(int64_t m, int64_t k, int64_t n, const float *a, const float *bp,
		       const float *bias, const float *z, float *y, int act, float lo, float hi);

/*
 * struct ml_conv3: a convolution or pool geometry (struct ml_conv_geom) seen
 * as 3-D: 1-D and 2-D windows get leading spatial dims of size 1, so one
 * loop nest serves them all. Index 0 is depth, 1 height, 2 width. cg and mg
 * are the input and output channels per group; insz, outsz and ksz the
 * element counts of an input plane, an output plane and a kernel.
 */
struct ml_conv3 {
	int64_t n, cin, cout, group, cg, mg;
	int64_t in[3], out[3], k[3], s[3], d[3], p[3], pe[3];	/* p: pads before */
	int64_t insz, outsz, ksz;
	bool ceil_mode, count_include_pad;
};

/*
 * ml_cpu_conv3: the 3-D view of c's node geometry (shapes from c's
 * inputs, which are concrete in a kernel). ML_ENOTSUP for more than three
 * spatial dims.
 */
int ml_cpu_conv3(struct ml_opctx *c, struct ml_conv3 *v);

/*
 * ml_valid_range: the j in [0, n) with 0 <= j * s + off < lim, as [*lo, *hi)
 * (empty when *lo == *hi): which outputs of a window row read inside the
 * input, so inner loops need no bounds checks.
 */
static inline void
ml_valid_range(int64_t off, int64_t s, int64_t lim, int64_t n, int64_t *lo, int64_t *hi)
{
	int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
	int64_t h = lim - off <= 0 ? 0 : (lim - off + s - 1) / s;

	h = ML_MIN(h, n);
	*lo = ML_MIN(l, h);
	*hi = h;
}

/* Kernels of lib/cpu/nn_conv.c. */
int ml_cpu_conv(struct ml_opctx *c);
int ml_cpu_conv_transpose(struct ml_opctx *c);
/* The kernel of lib/cpu/nn_nhwc.c: ConvNHWC (any group; fast depthwise and group 1). */
int ml_cpu_conv_nhwc(struct ml_opctx *c);
/*
 * lib/cpu/nn_gemm.c: an AVX-512 SGEMM with B packed, for the f32
 * convolutions. ml_pgemm_ok: whether this CPU runs it. B packed is
 * ml_pgemm_packed_len(k, n) floats, 64-byte aligned: column j of row p at
 * [(j / ML_PG_NR) * ML_PG_NR * k + p * ML_PG_NR + j % ML_PG_NR] (the last
 * panel's columns past n may hold anything). ml_pgemm: C[m, n] = A[m, k]
 * (row stride lda) times B, plus bias[row] (NULL: 0), or plus C when
 * accumulate; it splits over ml_parallel_for itself. ml_pgemm_serial: the
 * same on the calling thread only (for callers inside ml_parallel_for).
 */
#define ML_PG_NR 32
bool ml_pgemm_ok(void);
/* ml_pgemm_avx2: whether it runs its AVX2 kernels (no AVX-512F, or ML_PGEMM=avx2) */
bool ml_pgemm_avx2(void);
int64_t ml_pgemm_packed_len(int64_t k, int64_t n);
void ml_pgemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *bp,
	      const float *bias, float *c, int64_t ldc, bool accumulate);
void ml_pgemm_serial(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
		     const float *bp, const float *bias, float *c, int64_t ldc, bool accumulate);
/*
 * ml_pgemm_rows: C[m, n] = A[m, k] times B (+ bias[row], NULL: 0) where B's
 * row p is the n floats at b + boff[p], read in place (so B can be rows of
 * padded input planes: an implicit im2col), each read up to a whole panel
 * past n (the caller leaves slack); only where ml_pgemm_rows_ok() (AVX-512,
 * or AVX2 with FMA: ml_pgemm_ok()'s kernels).
 */
bool ml_pgemm_rows_ok(void);
void ml_pgemm_rows(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
		   const int32_t *boff, const float *bias, float *c, int64_t ldc);
/*
 * ml_pgemm_rows_epi: ml_pgemm_rows, k > 0, then e (struct ml_conv_epi below;
 * its z in C's layout, ldc) over each work item's block of C as soon as it
 * is complete, while it is in cache
 */
struct ml_conv_epi;
void ml_pgemm_rows_epi(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
		       const float *b, const int32_t *boff, const float *bias, float *c,
		       int64_t ldc, const struct ml_conv_epi *e);
/*
 * ml_pgemm_own: ml_pgemm_rows (boff NULL: ml_pgemm, B packed) where each
 * thread that takes part builds B for itself, once per call: fill(ctx, b)
 * writes it (bbytes) into the thread's scratch slot `slot`, and B's row p
 * is at b + boff[p] (or B's panels are at b). A B that one thread writes
 * and every thread reads (the padded planes of nn_flat.c, the packed X of
 * a pointwise convolution; the row groups of C split over the threads)
 * costs each thread a miss in the other core's cache for half its lines,
 * again and again; a copy of its own costs one pass. -1 when a thread's
 * buffer could not be allocated (C then holds anything), else 0.
 */
int ml_pgemm_own(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
		 void (*fill)(void *ctx, float *b), void *ctx, size_t bbytes, int slot,
		 const int32_t *boff, const float *bias, float *c, int64_t ldc);
/*
 * ml_pgemm_narrow: the same for n <= 16 (planes of 16 positions or fewer),
 * each B row read for 16 floats (the caller leaves slack past n): one
 * 16-lane vector per row of C instead of a half-empty 32-wide panel.
 */
void ml_pgemm_narrow(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
		     const int32_t *boff, const float *bias, float *c, int64_t ldc);
/*
 * ml_pgemm_panel: C[m, w] = A[m, k] (rows lda apart) times one packed panel
 * (k rows of ML_PG_NR floats, aligned or not), w <= ML_PG_NR columns of C
 * stored, all of k at once: a few rows (FusedMatMul's streamed products)
 * read the panel once per 8 rows. On AVX2, 6 rows of 16 columns at a time
 * (the panel's halves in turn), or with stream (the panel read from
 * memory) and w > 16, 3 rows of whole rows of the panel, read in order.
 * Only where ml_pgemm_ok().
 */
void ml_pgemm_panel(int64_t m, int64_t k, const float *a, int64_t lda, const float *panel, float *c,
		    int64_t ldc, int64_t w, bool stream);
/* ml_pgemm_batch: nb such products, A, packed B and C of product i at a + i * sa, etc. */
void ml_pgemm_batch(int64_t nb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
		    int64_t sa, const float *bp, int64_t sb, const float *bias, float *c,
		    int64_t ldc, int64_t sc, bool accumulate);

/*
 * lib/cpu/bf16.c: the products with a bf16 weight (mlquant --dtype bf16).
 * ml_cpu_bf16_run: c's Conv, MatMul, Gemm or fused form with an f32 input
 * 0, a bf16 input 1 and an f32 output, computed; 1 (nothing done) for any
 * other node. Paths: ML_BF16_AMX, AMX tiles (tdpbf16ps) for products of 16
 * rows or more and vdpbf16ps for the rest and for the packing;
 * ML_BF16_DP, vdpbf16ps (AVX512_BF16); ML_BF16_F32, the weight converted
 * to f32 once and the f32 kernel. ml_bf16_path: the one in use (ML_BF16=f32
 * in the environment forces ML_BF16_F32, ML_BF16=dp or ML_AMX=0 keeps an
 * AMX machine on ML_BF16_DP); the paths from ML_BF16_DP up share the
 * packing, so code that asks for vdpbf16ps's layout tests >= ML_BF16_DP.
 * ml_bf16_set_path
 * forces one for later calls (tests), false when this CPU lacks it.
 *
 * ml_bf16_gemm: C[m, n] = A[m, k] B + bias[row] (NULL: 0), A bf16 rows lda
 * apart, B ml_bf16_packed_len(k, n) bf16 in panels of ML_BF_NR columns,
 * 64-byte aligned: element (p, j) at [(j / 32) * 32 * 2 * ((k + 1) / 2) +
 * (p / 2) * 64 + (j % 32) * 2 + p % 2], zeros past k and n. On the F32 path
 * it runs a portable loop (the reference of the tests). ml_bf16_pack_b packs
 * a bf16 [k, n] matrix ([n, k] when tb); ml_bf16_pack_pair rounds rows 2q
 * and 2q + 1 (r1 NULL: zeros) of n columns to bf16 into the pair row of a
 * packing that starts at dst, panels pstride elements apart;
 * ml_bf16_from_f32 rounds n floats to bf16 (to nearest even).
 */
enum ml_bf16_path { ML_BF16_AUTO = 0, ML_BF16_F32 = 1, ML_BF16_DP = 2, ML_BF16_AMX = 3 };
#define ML_BF_NR 32
int ml_cpu_bf16_run(struct ml_opctx *c);
/*
 * ml_cpu_bf16_native: ml_cpu_bf16_run's bf16 kernels alone: 1 (nothing
 * done) where none takes c on this path, for a caller that widens the
 * weight itself (ConvNHWC into its panels, once).
 */
int ml_cpu_bf16_native(struct ml_opctx *c);
bool ml_bf16_path_ok(enum ml_bf16_path p);
const char *ml_bf16_path_name(enum ml_bf16_path p);
enum ml_bf16_path ml_bf16_path(void);
bool ml_bf16_set_path(enum ml_bf16_path p);
int64_t ml_bf16_packed_len(int64_t k, int64_t n);
void ml_bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
		  const uint16_t *bp, const float *bias, float *c, int64_t ldc);
/* ml_bf16_gemm_here: the same, on the calling thread only (inside a pool item). */
void ml_bf16_gemm_here(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
		       const uint16_t *bp, const float *bias, float *c, int64_t ldc);
void ml_bf16_pack_b(uint16_t *bp, const uint16_t *b, int64_t k, int64_t n, bool tb);
void ml_bf16_pack_pair(uint16_t *dst, int64_t pstride, const float *r0, const float *r1,
		       int64_t n);
void ml_bf16_from_f32(uint16_t *dst, const float *src, int64_t n);
/*
 * ml_bf16_sgemm: C = op(A) op(B) + beta C with f32 operands rounded to bf16
 * (to nearest even) and f32 sums: the products of a step graph whose nodes
 * say precision "bf16" (ml_node_bf16; mltrain --precision bf16). On
 * ML_BF16_DP both are rounded while packed for vdpbf16ps; elsewhere they
 * are rounded into f32 copies for ml_sgemm. False: out of memory or too
 * large for BLAS.
 */
bool ml_bf16_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
		   const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
bool ml_node_bf16(const struct ml_node *n);
/*
 * ml_bf16_train_path: how products marked bf16 run: 2, vdpbf16ps; 1, the
 * f32 kernels on operands rounded to bf16 (ML_BF16=f32, or the fallback
 * set by name); 0, unchanged f32 (a CPU without AVX512_BF16).
 */
int ml_bf16_train_path(void);
/*
 * ml_bf16_dp_fast: vdpbf16ps issues at about this CPU's FMA rate (measured
 * once), so products on it beat f32 ones; false without AVX512_BF16.
 */
bool ml_bf16_dp_fast(void);
/* ml_bf16_dp_fast_set: the tests' override of ml_bf16_dp_fast (0 or 1; -1: measure) */
void ml_bf16_dp_fast_set(int v);
/* ml_bf16_dp_asked: vdpbf16ps asked for (ML_BF16=dp, or ml_bf16_set_path(ML_BF16_DP)) */
bool ml_bf16_dp_asked(void);
/*
 * ml_bf16_rounded: rows x cols floats of src (rows ld apart) rounded to bf16
 * values, kept as f32, dense, in scratch slot (4 or 5, which the kernels
 * that call the GEMMs leave alone); NULL: out of memory. The fallback's
 * operands: the f32 kernels on them compute the same products.
 */
const float *ml_bf16_rounded(int slot, const float *src, int64_t rows, int64_t cols, int64_t ld);

/*
 * ml_tgemm (nn_gemm.c): C[m, n] = op(A) op(B), row-major (A stored [k, m]
 * when ta, B [n, k] when tb), then per element the epilogue e: + bias[col]
 * (NULL: none), then act: ML_TG_NONE; ML_TG_RELU, max(0, C); ML_TG_RELU_GRAD,
 * C where mask (C's layout) > 0, else 0; ML_TG_SGD, C is the gradient G of
 * p (C's layout, c unused) and the update is SGDUpdate(p, G, lr, mom) with
 * momentum mu, weight decay wd and nesterov (mom NULL: no momentum), the
 * gradient being (acc + C) inv, and acc set to 0, where acc is not NULL;
 * ML_TG_ACC, acc += C (gradient accumulation: acc is the sum, C's layout,
 * and c unused). It uses scratch slots 0 to 2 and ml_parallel_for. False, with nothing
 * done, without AVX-512 (or ML_PGEMM below it): the caller uses ml_sgemm.
 */
enum { ML_TG_NONE, ML_TG_RELU, ML_TG_RELU_GRAD, ML_TG_SGD, ML_TG_ACC };
struct ml_tgemm_epi {
	int act;
	const float *bias, *mask;
	float *p, *mom, *acc;
	float lr, mu, wd, inv;
	bool nesterov;
};
bool ml_tgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
	      const float *b, int64_t ldb, float *c, int64_t ldc, const struct ml_tgemm_epi *e);

/*
 * ml_cpu_fma_level: 2 with AVX-512F, 1 with AVX2 and FMA, 0 with neither
 * (or off x86-64); the environment variable env_name lowers it: "avx2" to
 * 1, "0" to 0 (for tests and comparisons). Not cached: callers keep it.
 */
int ml_cpu_fma_level(const char *env_name);

/*
 * ml_sgemv_own: ml_sgemm's product for m == 1 or n == 1 (k >= 1) without
 * BLAS, split over ml_parallel_for; false (nothing done) when it does not
 * handle the case (a strided C column of A^T b) or is out of memory.
 */
bool ml_sgemv_own(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
		  int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/*
 * struct ml_conv_epi: what a FusedConv adds after the convolution and its
 * bias: the residual z (Y's layout, NULL: none), then activation act
 * (ML_ACT_*; ML_ACT_NONE or below: none), Clip within [lo, hi]. The
 * kernels that take one apply it to each block of Y as they store it
 * (ml_fused_tile_epi), instead of in another pass over Y; NULL: nothing.
 */
struct ml_conv_epi {
	const float *z;
	int act;
	float lo, hi;
};

/*
 * lib/cpu/nn_wino.c: ml_wino_ok tells whether the f32 Winograd F(4x4, 3x3)
 * convolution applies to v and pays; ml_wino_conv computes Y (bias
 * included, then e) with it. It uses scratch slots 0 to 2.
 */
bool ml_wino_ok(const struct ml_conv3 *v);
int ml_wino_conv(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
		 const float *bias, const struct ml_conv_epi *e, float *y);
/*
 * ml_conv_bf16 (nn_conv.c): Y of v (bias included, then e) from f32 x and
 * bf16 weights w through ml_bf16_gemm, im2col rounding x to bf16 as it
 * packs. With cpair (where ml_conv_bf16_cpair_ok(v)), x is rounded to bf16
 * once, two channels to a 32-bit pair, and w's rows are in (kernel offset,
 * channel) order, ksz * 2 * ceil(cin / 2) long (a padded channel's weights
 * zero), so that im2col copies pairs without converting. It uses scratch
 * slots 0, 1 and 3.
 */
bool ml_conv_bf16_cpair_ok(const struct ml_conv3 *v);
/*
 * ml_conv_bf16_rows: the same for a small plane (ml_conv_bf16_rows_ok), as
 * im2col(X)^T W^T: bp is W^T, [ksz * 2 * ceil(cin / 2), cout] in the
 * channel-pair order, packed by ml_bf16_pack_b. It uses scratch slots 0 to 2.
 */
bool ml_conv_bf16_rows_ok(const struct ml_conv3 *v);
int ml_conv_bf16_rows(struct ml_opctx *c, const struct ml_conv3 *v, const float *x,
		      const uint16_t *bp, const float *bias, const struct ml_conv_epi *e, float *y);
int ml_conv_bf16(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const uint16_t *w,
		 bool cpair, const float *bias, const struct ml_conv_epi *e, float *y);
/*
 * lib/cpu/nn_direct.c: ml_direct_ok tells whether the direct f32
 * convolution for few input channels (first layers) applies to v (2-D,
 * one group, at most 4 input channels, windows up to 11 wide, strides up
 * to 4, no dilation); ml_direct_conv computes Y (bias included, then e)
 * with it. It uses scratch slots 0 and 2. ML_CONV_DIRECT=c forces its
 * portable kernel, ML_CONV_DIRECT=0 turns it off.
 */
bool ml_direct_ok(const struct ml_conv3 *v);
/*
 * ml_direct_bf16_ok, ml_direct_conv_bf16: the same kernel in bf16 (bf16
 * weights w, the input rounded to bf16 as it is copied, f32 sums on
 * vdpbf16ps) for horizontal stride 2 on AVX-512 with AVX512_BF16; 0, an
 * error set on c, or 1 (not taken: the input's copy would pass 32 MB).
 */
bool ml_direct_bf16_ok(const struct ml_conv3 *v);
int ml_direct_conv_bf16(struct ml_opctx *c, const struct ml_conv3 *v, const float *x,
			const uint16_t *w, const float *bias, const struct ml_conv_epi *e, float *y);
int ml_direct_conv(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
		   const float *bias, const struct ml_conv_epi *e, float *y);
/*
 * lib/cpu/nn_flat.c: ml_flat_ok tells whether the implicit-GEMM f32
 * convolution applies to v (2-D, one group, stride 1 or 2, windows up to
 * 11 wide, no dilation; AVX-512, or forced); ml_flat_conv computes Y (bias
 * included, then e) with it. It uses scratch slots 0 to 2. ML_CONV_FLAT=c
 * forces its portable loop, ML_CONV_FLAT=0 turns it off.
 */
bool ml_flat_ok(const struct ml_conv3 *v);
/*
 * lib/cpu/nn_tflat.c: ml_tflat_ok tells whether the transposed implicit
 * GEMM (output positions as the rows: small planes into at most 64
 * channels, stride 1, AVX-512) takes v; ml_tflat_conv runs it, with
 * FusedConv's epilogue e (NULL: none). 0, or an error set on c.
 */
bool ml_tflat_ok(const struct ml_conv3 *v);
int ml_tflat_conv(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
		  const float *bias, const struct ml_conv_epi *e, float *y);
int ml_flat_conv(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
		 const float *bias, const struct ml_conv_epi *e, float *y);
/* Kernels of lib/cpu/nn_pool.c. */
int ml_cpu_max_pool(struct ml_opctx *c);
int ml_cpu_avg_pool(struct ml_opctx *c);
int ml_cpu_lp_pool(struct ml_opctx *c);
int ml_cpu_global_pool(struct ml_opctx *c);
/* Kernels of lib/cpu/nn_norm.c. */
int ml_cpu_batchnorm(struct ml_opctx *c);
int ml_cpu_instnorm(struct ml_opctx *c);
int ml_cpu_layernorm(struct ml_opctx *c);
int ml_cpu_groupnorm(struct ml_opctx *c);
int ml_cpu_lrn(struct ml_opctx *c);
int ml_cpu_lpnorm(struct ml_opctx *c);
int ml_cpu_mvn(struct ml_opctx *c);

#endif
