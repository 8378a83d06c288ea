/*
 * bf16.c: the products with a bf16 weight that mlquant --dtype bf16 makes
 * (Conv, MatMul, Gemm and mlopt's FusedConv, FusedMatMul, FusedGemm whose
 * input 1 is a bf16 constant and input 0 f32): bf16 operands, f32 sums,
 * an f32 output; bias, residual and activation stay f32.
 *
 * On CPUs with AVX512_BF16 a GEMM built on vdpbf16ps computes them:
 * C[m, n] = A[m, k] B[k, n] with A bf16 rows (each 32-bit word a pair of
 * consecutive k, the operand vdpbf16ps broadcasts) and B bf16 panels of
 * ML_BF_NR columns, a panel being (k + 1) / 2 rows of 32 pairs, each pair
 * two consecutive k of one column (the operand vdpbf16ps multiplies
 * lane by lane; an odd k's last pair holds a zero). A convolution's
 * weights are A. A pointwise one's [cout, cin] are such rows as stored,
 * and its packing converts the input as it copies it; for wider windows
 * (group 1, 2-D) the weights are reordered once per session (the node's
 * cache, ml_opctx.cache) to (kernel offset, channel) order, the input is
 * rounded to bf16 once per image, two channels to a pair, and im2col
 * (nn_conv.c) copies pairs into the panels, each work item packing the
 * columns it multiplies. Small planes with many channels (14x14, 7x7)
 * swap the roles: output positions are A's rows and the weights, packed
 * once, B's panels, which the output channels fill where 49 positions
 * would leave a quarter of a panel empty. A MatMul's weights are B: packed into panels
 * once per session and its activations converted to bf16 rows per call.
 * The micro-kernel keeps 12 x 32 sums in
 * 24 zmm registers, as nn_gemm.c's SGEMM does, but each vdpbf16ps does
 * two multiply-adds per lane: twice the work per instruction, half the
 * bytes per weight.
 *
 * On CPUs with AMX the same packed operands feed tdpbf16ps (amx_block):
 * a 32 x 32 block of C in four tiles over all of k, about 20 times the
 * vdpbf16ps kernel's rate on large products.
 *
 * Elsewhere (no AVX512_BF16, ML_BF16=f32 in the environment, or shapes
 * the GEMM does not take: depthwise convolutions, batched B, transposed A)
 * the weight is converted to f32 once per session, into the node's cache,
 * and the node's f32 kernel runs on it: never slower than the f32 model.
 * So does inference on a CPU with AVX512_BF16 but no AMX, where the
 * vdpbf16ps kernels measured slower than the f32 ones on every product of
 * ResNet-18 (ML_BF16=dp runs them anyway; training steps still use them).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <math.h>
#include <stdatomic.h>
#include <time.h>

#include "ml_impl.h"
#include "cpu/nn.h"
#include "ops/fused.h"
#include "cpu/train_conv.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_BF16 1
#include <immintrin.h>
#include "cpu/tile512.h"
#include "cpu/amx.h"
#define BF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

#define KCP 128			/* k block in pairs: a panel's block of 128 x 32 pairs is 16 KB */
#define MB 96			/* rows per work item: 8 blocks of 12 */

/* ---- path ---- */

static atomic_int cur_path = -1;
static atomic_int emulate = -1;	/* ml_bf16_train_path's 1 or 0; -1: not yet asked */

bool
ml_bf16_path_ok(enum ml_bf16_path p)
{
	switch (p) {
	case ML_BF16_AUTO:
	case ML_BF16_F32:
		return true;
#ifdef HAVE_BF16
	case ML_BF16_DP:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
	case ML_BF16_AMX:
		/* the packing and the small products stay on vdpbf16ps */
		return ml_bf16_path_ok(ML_BF16_DP) && ml_amx_ok();
#endif
	default:
		return false;
	}
}

const char *
ml_bf16_path_name(enum ml_bf16_path p)
{
	static const char *const names[] = { "auto", "f32", "avx512bf16", "amx" };
	return (unsigned)p < 4 ? names[p] : "?";
}

static atomic_int dp_set;	/* ml_bf16_set_path(ML_BF16_DP) was called */

/*
 * ml_bf16_dp_asked: vdpbf16ps for inference too, where AMX is absent: ML_BF16=dp,
 * or ml_bf16_set_path(ML_BF16_DP) (the tests)
 */
bool
ml_bf16_dp_asked(void)
{
	const char *env = getenv("ML_BF16");
	return atomic_load(&dp_set) || (env != NULL && strcmp(env, "dp") == 0);
}

static enum ml_bf16_path
best_path(void)
{
	const char *env = getenv("ML_BF16");
	/* ML_BF16=f32 forces the fallback (tests, comparisons) */
	if (env != NULL && strcmp(env, "f32") == 0)
		return ML_BF16_F32;
	/* ML_BF16=dp: vdpbf16ps on an AMX machine (the tests, comparisons) */
	bool dp = env != NULL && strcmp(env, "dp") == 0;
	if (!dp && ml_bf16_path_ok(ML_BF16_AMX))
		return ML_BF16_AMX;
	return ml_bf16_path_ok(ML_BF16_DP) ? ML_BF16_DP : ML_BF16_F32;
}

enum ml_bf16_path
ml_bf16_path(void)
{
	int v = atomic_load_explicit(&cur_path, memory_order_relaxed);
	if (v < 0) {
		v = (int)best_path();
		atomic_store_explicit(&cur_path, v, memory_order_relaxed);
	}
	return (enum ml_bf16_path)v;
}

bool
ml_bf16_set_path(enum ml_bf16_path p)
{
	if (!ml_bf16_path_ok(p))
		return false;
	atomic_store(&cur_path, (int)(p == ML_BF16_AUTO ? best_path() : p));
	atomic_store(&dp_set, p == ML_BF16_DP);
	/* the fallback asked for by name emulates bf16 products; AUTO asks again */
	atomic_store(&emulate, p == ML_BF16_F32 ? 1 : -1);
	return true;
}

/*
 * The products of a step graph marked precision "bf16" run as: 2, the
 * vdpbf16ps GEMM; 1, the f32 kernels on operands rounded to bf16 (the
 * emulation: ML_BF16=f32, or ml_bf16_set_path(ML_BF16_F32)), the tests'
 * reference, which costs the copies (about 12% of a small MLP's step);
 * 0, on a CPU without AVX512_BF16, or with it but no AMX and a vdpbf16ps
 * no faster than its FMAs (ml_bf16_dp_fast; ML_BF16=dp uses it anyway),
 * the f32 kernels as they are, so that --precision bf16 is never slower
 * there than fp32.
 */
#ifdef HAVE_BF16
/*
 * dp_loop, fma_loop: n rounds of 8 independent vdpbf16ps or FMA chains.
 * Each chain starts from its own value: from the same zero, the compiler
 * merged the 8 into one and the ratio measured was the latencies' (1.5 on
 * a Zen 4 whose vdpbf16ps issues at the FMA's rate).
 */
#define DP8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
BF_TARGET __attribute__((noinline)) static float
dp_loop(int64_t n)
{
#define DP_Z(i) __m512 a##i = _mm512_set1_ps((float)(i));
#define DP_S(i) a##i = _mm512_dpbf16_ps(a##i, x, x);
#define DP_R(i) +_mm512_reduce_add_ps(a##i)
	DP8(DP_Z)
	__m512bh x = (__m512bh)_mm512_set1_epi32(0x3c003c00);
	for (int64_t k = 0; k < n; k++) {
		DP8(DP_S)
		__asm__ volatile("" : "+v"(x));
	}
	return 0.0f DP8(DP_R);
}

__attribute__((target("avx512f"), noinline)) static float
fma_loop(int64_t n)
{
#define FM_S(i) a##i = _mm512_fmadd_ps(y, y, a##i);
	DP8(DP_Z)
	__m512 y = _mm512_set1_ps(1e-3f);
	for (int64_t k = 0; k < n; k++) {
		DP8(FM_S)
		__asm__ volatile("" : "+v"(y));
	}
	return 0.0f DP8(DP_R);
}

static double
now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#endif

static atomic_int dp_fast_v = -1;

void
ml_bf16_dp_fast_set(int v)
{
	atomic_store(&dp_fast_v, v < 0 ? -1 : v != 0);
}

/*
 * ml_bf16_dp_fast: whether this CPU's vdpbf16ps, two multiply-adds a lane,
 * issues at close to its FMA's rate (measured once: the best of 5 runs of
 * 8 chains of each, about 0.2 ms in all). It does on the AMD Zen 4 and 5
 * cores measured earlier (mltrain's bf16 MLP 1.4-1.56x fp32 there); on the
 * Sapphire Rapids Xeons here it issues at half the FMA's rate, so products
 * on it are no faster than f32 ones plus their rounding (the bf16 MLP step
 * 0.72x fp32 with AMX turned off).
 */
bool
ml_bf16_dp_fast(void)
{
	int v = atomic_load_explicit(&dp_fast_v, memory_order_relaxed);
	if (v >= 0)
		return v != 0;
	v = 0;
#ifdef HAVE_BF16
	if (ml_bf16_path_ok(ML_BF16_DP)) {
		double tdp = 1e30, tfm = 1e30;
		volatile float sink = 0;
		for (int r = 0; r < 5; r++) {
			double t0 = now_s();
			sink += dp_loop(4096);
			double t1 = now_s();
			sink += fma_loop(4096);
			double t2 = now_s();
			tdp = t1 - t0 < tdp ? t1 - t0 : tdp;
			tfm = t2 - t1 < tfm ? t2 - t1 : tfm;
		}
		(void)sink;
		v = tdp <= 1.3 * tfm;
	}
#endif
	atomic_store_explicit(&dp_fast_v, v, memory_order_relaxed);
	return v != 0;
}

const char *
ml_bf16_note(void)
{
	switch (ml_bf16_path()) {
	case ML_BF16_AMX:
		return "bf16 products on AMX tiles (tdpbf16ps; under 16 rows vdpbf16ps)";
	case ML_BF16_DP:
		if (ml_bf16_dp_asked())
			return "bf16 products on vdpbf16ps (AVX512_BF16; ML_BF16=dp: all of them)";
		if (ml_bf16_dp_fast())
			return "bf16 products on vdpbf16ps (AVX512_BF16), but for Winograd's 3x3, "
			       "few-channel stems of stride 1 across and products of 16 columns or "
			       "fewer: their weights widened to f32 once";
		return "bf16 weights widened to f32 once: this CPU's vdpbf16ps is no faster "
		       "than its f32 FMAs (measured; ML_BF16=dp uses it)";
	default:
		return ml_bf16_path_ok(ML_BF16_DP) ?
			       "bf16 weights widened to f32 once (ML_BF16=f32)" :
			       "bf16 weights widened to f32 once: this CPU has no AVX512_BF16";
	}
}

int
ml_bf16_train_path(void)
{
	/*
	 * vdpbf16ps alone: only where it issues at about an FMA's rate (else
	 * the f32 kernels as they are, never slower than fp32), or asked for
	 */
	if (ml_bf16_path() == ML_BF16_AMX ||
	    (ml_bf16_path() == ML_BF16_DP && (ml_bf16_dp_asked() || ml_bf16_dp_fast())))
		return 2;
	if (ml_bf16_path() == ML_BF16_DP)
		return 0;
	int v = atomic_load_explicit(&emulate, memory_order_relaxed);
	if (v < 0) {
		const char *env = getenv("ML_BF16");
		v = env != NULL && strcmp(env, "f32") == 0;
		atomic_store_explicit(&emulate, v, memory_order_relaxed);
	}
	return v;
}

int64_t
ml_bf16_packed_len(int64_t k, int64_t n)
{
	return (n + ML_BF_NR - 1) / ML_BF_NR * ML_BF_NR * ((k + 1) / 2) * 2;
}

/* ---- packing (portable: these run once per weight) ---- */

void
ml_bf16_pack_b(uint16_t *bp, const uint16_t *b, int64_t k, int64_t n, bool tb)
{
	int64_t kp = (k + 1) / 2, npan = (n + ML_BF_NR - 1) / ML_BF_NR;

	for (int64_t p = 0; p < npan; p++) {
		uint16_t *pan = bp + p * kp * 2 * ML_BF_NR;
		for (int64_t q = 0; q < kp; q++)
			for (int64_t j = 0; j < ML_BF_NR; j++)
				for (int e = 0; e < 2; e++) {
					int64_t kk = 2 * q + e, jj = p * ML_BF_NR + j;
					uint16_t v = 0;
					if (kk < k && jj < n)
						v = tb ? b[jj * k + kk] : b[kk * n + jj];
					pan[(q * ML_BF_NR + j) * 2 + e] = v;
				}
	}
}

/* repack: B packed as mlopt packs f32 ([ceil(n / 32), k, 32], here in bf16) into pair panels. */
static void
repack_b(uint16_t *bp, const uint16_t *b, int64_t k, int64_t n)
{
	int64_t kp = (k + 1) / 2, npan = (n + ML_BF_NR - 1) / ML_BF_NR;

	for (int64_t p = 0; p < npan; p++) {
		uint16_t *pan = bp + p * kp * 2 * ML_BF_NR;
		const uint16_t *src = b + p * k * ML_BF_NR;
		for (int64_t q = 0; q < kp; q++)
			for (int64_t j = 0; j < ML_BF_NR; j++)
				for (int e = 0; e < 2; e++) {
					int64_t kk = 2 * q + e;
					pan[(q * ML_BF_NR + j) * 2 + e] =
						kk < k ? src[kk * ML_BF_NR + j] : 0;
				}
	}
}

#ifdef HAVE_BF16
/*
 * pair_store: 32 columns of rows r0 and r1 (w valid; r1 NULL: zeros) as
 * 32 bf16 pairs at dst, rounded to nearest even.
 */
BF_TARGET static inline void
pair_store(uint16_t *dst, const float *r0, const float *r1, int w)
{
	for (int h = 0; h < 2; h++) {
		int wh = w - 16 * h;
		__mmask16 m = (__mmask16)(wh >= 16 ? 0xffff : wh <= 0 ? 0 : (1u << wh) - 1);
		__m512 x0 = _mm512_maskz_loadu_ps(m, r0 + 16 * h);
		__m512 x1 = r1 != NULL ? _mm512_maskz_loadu_ps(m, r1 + 16 * h) : _mm512_setzero_ps();
		__m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x0));
		__m512i hi = _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x1)), 16);
		_mm512_storeu_si512(dst + 32 * h, _mm512_or_si512(lo, hi));
	}
}

BF_TARGET static void
pack_pair_dp(uint16_t *dst, int64_t pstride, const float *r0, const float *r1, int64_t n)
{
	for (int64_t j0 = 0; j0 < n; j0 += ML_BF_NR, dst += pstride)
		pair_store(dst, r0 + j0, r1 != NULL ? r1 + j0 : NULL,
			   (int)ML_MIN((int64_t)ML_BF_NR, n - j0));
}
#endif

void
ml_bf16_pack_pair(uint16_t *dst, int64_t pstride, const float *r0, const float *r1, int64_t n)
{
#ifdef HAVE_BF16
	if (ml_bf16_path() >= ML_BF16_DP) {
		pack_pair_dp(dst, pstride, r0, r1, n);
		return;
	}
#endif
	for (int64_t j0 = 0; j0 < n; j0 += ML_BF_NR, dst += pstride)
		for (int64_t j = 0; j < ML_BF_NR; j++) {
			bool in = j0 + j < n;
			dst[2 * j] = in ? ml_f32_to_bf16(r0[j0 + j]) : 0;
			dst[2 * j + 1] = in && r1 != NULL ? ml_f32_to_bf16(r1[j0 + j]) : 0;
		}
}

#ifdef HAVE_BF16
BF_TARGET static void
rows_dp(uint16_t *dst, const float *a, int64_t n)
{
	int64_t j = 0;
	for (; j + 16 <= n; j += 16)
		_mm256_storeu_si256((__m256i *)(dst + j),
				    (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(a + j)));
	if (j < n) {
		__mmask16 m = (__mmask16)((1u << (n - j)) - 1);
		_mm256_mask_storeu_epi16(dst + j, m,
					 (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, a + j)));
	}
}
#endif

void
ml_bf16_from_f32(uint16_t *dst, const float *src, int64_t n)
{
#ifdef HAVE_BF16
	if (ml_bf16_path() >= ML_BF16_DP) {
		rows_dp(dst, src, n);
		return;
	}
#endif
	for (int64_t j = 0; j < n; j++)
		dst[j] = ml_f32_to_bf16(src[j]);
}

/* ---- the GEMM ---- */

/* a product's epilogue: ml_fused_tile_epi's bias of n columns, Z, activation */
struct epi_job {
	float *y;
	const float *bias, *z;
	int64_t n;
	int act;
	float lo, hi;
};

#ifdef HAVE_BF16
/* ld_pair: the 32-bit word of the pair of a at k index 2q (a[2q + 1] = 0 when odd says so) */
static inline uint32_t
ld_pair(const uint16_t *a, bool last_odd)
{
	uint32_t v;
	if (last_odd)
		return a[0];
	memcpy(&v, a, 4);
	return v;
}

/*
 * BKERN(R): C[R rows (mr valid), 32 columns (masks m0, m1)] = sum over the
 * kq pairs from q0 of A B, plus the bias (mode 0; NULL: 0) or the current
 * C (mode 1). odd: the last pair of the block is k's odd tail.
 */
#define BKERN(R)								\
BF_TARGET static void								\
bk##R(int64_t kq, const uint16_t *a, int64_t lda, const uint16_t *bp, float *c,	\
      int64_t ldc, int mr, __mmask16 m0, __mmask16 m1, const float *bias, int mode, \
      bool odd, const uint16_t *pf, int64_t npf)				\
{										\
	const uint16_t *ar[R];							\
	__m512 c0[R], c1[R];							\
	for (int i = 0; i < R; i++) {						\
		ar[i] = a + (i < mr ? i : 0) * lda;				\
		c0[i] = _mm512_setzero_ps();					\
		c1[i] = _mm512_setzero_ps();					\
	}									\
	int64_t full = odd ? kq - 1 : kq;					\
	for (int64_t q = 0; q < full; q++) {					\
		__m512bh b0 = (__m512bh)_mm512_load_si512(bp + q * 64);		\
		__m512bh b1 = (__m512bh)_mm512_load_si512(bp + q * 64 + 32);	\
		if (q < npf) {							\
			_mm_prefetch((const char *)(pf + q * 64), _MM_HINT_T1);	\
			_mm_prefetch((const char *)(pf + q * 64 + 32), _MM_HINT_T1); \
		}								\
		_Pragma("GCC unroll 12")					\
		for (int i = 0; i < R; i++) {					\
			__m512bh av = (__m512bh)_mm512_set1_epi32((int)ld_pair(ar[i] + 2 * q, false)); \
			c0[i] = _mm512_dpbf16_ps(c0[i], av, b0);		\
			c1[i] = _mm512_dpbf16_ps(c1[i], av, b1);		\
		}								\
	}									\
	if (odd) {								\
		int64_t q = kq - 1;						\
		__m512bh b0 = (__m512bh)_mm512_load_si512(bp + q * 64);		\
		__m512bh b1 = (__m512bh)_mm512_load_si512(bp + q * 64 + 32);	\
		for (int i = 0; i < R; i++) {					\
			__m512bh av = (__m512bh)_mm512_set1_epi32((int)ld_pair(ar[i] + 2 * q, true)); \
			c0[i] = _mm512_dpbf16_ps(c0[i], av, b0);		\
			c1[i] = _mm512_dpbf16_ps(c1[i], av, b1);		\
		}								\
	}									\
	TILE512_STORE(c0, c1, mr, c, ldc, m0, m1, bias, mode)			\
}
BKERN(12)
BKERN(8)
BKERN(4)

struct bg_job {
	int64_t m, n, k, kp, lda, ldc;
	int64_t nblk, ngroups, npan, npchunks;
	int64_t rb;		/* rows per block: 12 (vdpbf16ps) or AMX_RB */
	bool amx;
	const uint16_t *a, *bp;
	const float *bias;
	float *c;
	const struct epi_job *epi;	/* AMX: each block's epilogue (NULL: none) */
};

/* bg_block: rows [i0, i1) of C by panels [p0, p1), k block by k block, on this thread. */
static void
bg_block(const struct bg_job *j, int64_t i0, int64_t i1, int64_t p0, int64_t p1)
{
	for (int64_t q0 = 0; q0 < j->kp; q0 += KCP) {
		int64_t kq = ML_MIN(KCP, j->kp - q0);
		bool odd = (j->k & 1) != 0 && q0 + kq == j->kp;
		int mode = q0 > 0 ? 1 : 0;
		for (int64_t jp = p0; jp < p1; jp++) {
			int64_t n0 = jp * ML_BF_NR, w = ML_MIN(ML_BF_NR, j->n - n0);
			__mmask16 m0 = (__mmask16)(w >= 16 ? 0xffff : (1u << w) - 1);
			__mmask16 m1 = (__mmask16)(w >= 32 ? 0xffff : w <= 16 ? 0 :
						   (1u << (w - 16)) - 1);
			const uint16_t *bpk = j->bp + (jp * j->kp + q0) * 2 * ML_BF_NR;
			/* the panel's next k block, into L2 while the first row block runs */
			int64_t npf = ML_MIN(KCP, j->kp - q0 - kq);
			for (int64_t i = i0; i < i1;) {
				int64_t rem = i1 - i;
				const uint16_t *a = j->a + i * j->lda + 2 * q0;
				float *c = j->c + i * j->ldc + n0;
				const float *bias = j->bias != NULL ? j->bias + i : NULL;
				/*
				 * A 4-row tail (64 = 5 x 12 + 4) runs at a third of
				 * the speed: 8 rows first, so that the tail is 8.
				 */
				int mr = (int)ML_MIN(rem, 12);
				if (rem > 12 && rem % 12 != 0 && rem % 12 <= 4)
					mr = 8;
				(mr > 8 ? bk12 : mr > 4 ? bk8 : bk4)(kq, a, j->lda, bpk, c, j->ldc, mr, m0,
								  m1, bias, mode, odd,
								  bpk + kq * 2 * ML_BF_NR,
								  i == i0 ? npf : 0);
				i += mr;
			}
		}
	}
}

/*
 * The AMX GEMM: C tiles 0-3 hold a block of 32 rows x one 32-column panel
 * (tile 0 rows 0-15 x columns 0-15, 1 rows 0-15 x 16-31, 2 and 3 rows
 * 16-31), tiles 4 and 5 the two 16-row A tiles of 32 k, tiles 6 and 7 the
 * panel's two halves of 16 pair rows: a pair row is 32 columns x 2 bf16 =
 * 128 bytes, so each half is a B tile of 64-byte rows 128 bytes apart,
 * read from the packing as it is. The sums stay in the tiles over all of k.
 * A's k tail (k % 32) is copied into a zero-padded tile so that no row is
 * read past k (an odd k's pair would pair garbage with B's zero, and
 * garbage can be a NaN), B's tail likewise so that no panel is read past
 * its end; blocks of fewer rows load a configuration with fewer rows.
 */
#define AMX_RB 32		/* rows per block */

AMX_TARGET static void
amx_config(int r0, int r1)
{
	struct ml_amx_cfg cfg;

	memset(&cfg, 0, sizeof cfg);
	ml_amx_tile(&cfg, 0, r0, 64);
	ml_amx_tile(&cfg, 1, r0, 64);
	ml_amx_tile(&cfg, 4, r0, 64);
	if (r1 > 0) {
		ml_amx_tile(&cfg, 2, r1, 64);
		ml_amx_tile(&cfg, 3, r1, 64);
		ml_amx_tile(&cfg, 5, r1, 64);
	}
	ml_amx_tile(&cfg, 6, 16, 64);
	ml_amx_tile(&cfg, 7, 16, 64);
	_tile_loadconfig(&cfg);
}

/*
 * amx_store: the block's sums (mr rows, w columns; the tiles started from
 * the rows' bias) into c: straight from the tiles when whole, else through
 * ct. Adding the bias after a store would read C back while the tile store
 * is still in flight (a third of amx_block's time on MobileNet-V2).
 */
AMX_TARGET static void
amx_store(float *c, int64_t ldc, int mr, int w, float *ct)
{
	if (mr == AMX_RB && w == ML_BF_NR) {
		_tile_stored(0, c, ldc * 4);
		_tile_stored(1, c + 16, ldc * 4);
		_tile_stored(2, c + 16 * ldc, ldc * 4);
		_tile_stored(3, c + 16 * ldc + 16, ldc * 4);
		return;
	}
	_tile_stored(0, ct, 128);
	_tile_stored(1, ct + 16, 128);
	if (mr > 16) {
		_tile_stored(2, ct + 16 * 32, 128);
		_tile_stored(3, ct + 16 * 32 + 16, 128);
	}
	__mmask16 m0 = (__mmask16)(w >= 16 ? 0xffff : (1u << w) - 1);
	__mmask16 m1 = (__mmask16)(w >= 32 ? 0xffff : w <= 16 ? 0 : (1u << (w - 16)) - 1);
	for (int r = 0; r < mr; r++) {
		float *cr = c + r * ldc;
		_mm512_mask_storeu_ps(cr, m0, _mm512_load_ps(ct + r * 32));
		_mm512_mask_storeu_ps(cr + 16, m1, _mm512_load_ps(ct + r * 32 + 16));
	}
}

/* amx_block: rows [i0, i1) of C by panels [p0, p1) on this thread's tiles */
AMX_TARGET static void
amx_block(const struct bg_job *j, int64_t i0, int64_t i1, int64_t p0, int64_t p1)
{
	_Alignas(64) uint16_t at[AMX_RB * 32];
	_Alignas(64) uint16_t bt[16 * 2 * ML_BF_NR];
	_Alignas(64) float ct[AMX_RB * 32];
	_Alignas(64) float bb[AMX_RB * 16];	/* row r: bias[i + r] 16 times */
	int64_t kb = j->k / 32, kt = j->k - 32 * kb, tq = j->kp - 16 * kb;
	int64_t sa = j->lda * 2;
	int cfg = -1;

	for (int64_t i = i0; i < i1; i += AMX_RB) {
		int mr = (int)ML_MIN(AMX_RB, i1 - i);
		int r1 = mr > 16 ? mr - 16 : 0;
		if (mr != cfg) {
			amx_config(mr - r1, r1);
			cfg = mr;
		}
		const uint16_t *a = j->a + i * j->lda;
		if (j->bias != NULL)
			for (int r = 0; r < mr; r++)
				_mm512_store_ps(bb + r * 16, _mm512_set1_ps(j->bias[i + r]));
		if (kt > 0) {
			memset(at, 0, sizeof at);
			for (int r = 0; r < mr; r++)
				memcpy(at + r * 32, a + r * j->lda + 32 * kb, (size_t)kt * 2);
		}
		for (int64_t jp = p0; jp < p1; jp++) {
			const uint16_t *bpk = j->bp + jp * j->kp * 2 * ML_BF_NR;
			int64_t n0 = jp * ML_BF_NR;
			if (j->bias != NULL) {
				_tile_loadd(0, bb, 64);
				_tile_loadd(1, bb, 64);
			} else {
				_tile_zero(0);
				_tile_zero(1);
			}
			if (r1 > 0) {
				if (j->bias != NULL) {
					_tile_loadd(2, bb + 16 * 16, 64);
					_tile_loadd(3, bb + 16 * 16, 64);
				} else {
					_tile_zero(2);
					_tile_zero(3);
				}
				for (int64_t q = 0; q < kb; q++) {
					const uint16_t *bq = bpk + q * 16 * 2 * ML_BF_NR;
					_tile_loadd(6, bq, 128);
					_tile_loadd(7, bq + 32, 128);
					_tile_loadd(4, a + q * 32, sa);
					_tile_loadd(5, a + 16 * j->lda + q * 32, sa);
					_tile_dpbf16ps(0, 4, 6);
					_tile_dpbf16ps(1, 4, 7);
					_tile_dpbf16ps(2, 5, 6);
					_tile_dpbf16ps(3, 5, 7);
				}
			} else {
				for (int64_t q = 0; q < kb; q++) {
					const uint16_t *bq = bpk + q * 16 * 2 * ML_BF_NR;
					_tile_loadd(6, bq, 128);
					_tile_loadd(7, bq + 32, 128);
					_tile_loadd(4, a + q * 32, sa);
					_tile_dpbf16ps(0, 4, 6);
					_tile_dpbf16ps(1, 4, 7);
				}
			}
			if (kt > 0) {
				memset(bt, 0, sizeof bt);
				memcpy(bt, bpk + kb * 16 * 2 * ML_BF_NR, (size_t)tq * 2 * ML_BF_NR * 2);
				_tile_loadd(6, bt, 128);
				_tile_loadd(7, bt + 32, 128);
				_tile_loadd(4, at, 64);
				_tile_dpbf16ps(0, 4, 6);
				_tile_dpbf16ps(1, 4, 7);
				if (r1 > 0) {
					_tile_loadd(5, at + 16 * 32, 64);
					_tile_dpbf16ps(2, 5, 6);
					_tile_dpbf16ps(3, 5, 7);
				}
			}
			int w = (int)ML_MIN(ML_BF_NR, j->n - n0);
			amx_store(j->c + i * j->ldc + n0, j->ldc, mr, w, ct);
			/* the epilogue on the block while it is in L1, not in a pass over C */
			if (j->epi != NULL)
				ml_fused_tile_epi(j->c + i * j->ldc + n0, mr, w, j->ldc,
						  j->epi->bias != NULL ? j->epi->bias + n0 : NULL,
						  j->epi->z != NULL ? j->epi->z + i * j->ldc + n0 : NULL,
						  j->epi->act, j->epi->lo, j->epi->hi);
		}
	}
	_tile_release();
}

/*
 * use_amx: the AMX path for m rows. A tdpbf16ps costs the same for 1 row
 * as for 16, so below 16 rows vdpbf16ps, which computes only the rows
 * there are, does as well or better.
 */
static bool
use_amx(int64_t m)
{
	return m >= 16 && ml_bf16_path() == ML_BF16_AMX;
}

static void
bg_items(void *ctx, int64_t b, int64_t e)
{
	const struct bg_job *j = ctx;

	for (int64_t it = b; it < e; it++) {
		int64_t g = it / j->npchunks, pc = it % j->npchunks;
		int64_t i0 = g * j->nblk / j->ngroups * j->rb;
		int64_t i1 = ML_MIN(j->m, (g + 1) * j->nblk / j->ngroups * j->rb);
		int64_t p0 = pc * j->npan / j->npchunks, p1 = (pc + 1) * j->npan / j->npchunks;
		if (j->amx)
			amx_block(j, i0, i1, p0, p1);
		else
			bg_block(j, i0, i1, p0, p1);
	}
}
#endif

void
ml_bf16_gemm_here(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
		  const uint16_t *bp, const float *bias, float *c, int64_t ldc)
{
#ifdef HAVE_BF16
	if (m > 0 && n > 0 && k > 0 && ml_bf16_path() >= ML_BF16_DP) {
		struct bg_job j = { .m = m, .n = n, .k = k, .kp = (k + 1) / 2, .lda = lda,
				    .ldc = ldc, .a = a, .bp = bp, .bias = bias, .c = c };
		if (use_amx(m))
			amx_block(&j, 0, m, 0, (n + ML_BF_NR - 1) / ML_BF_NR);
		else
			bg_block(&j, 0, m, 0, (n + ML_BF_NR - 1) / ML_BF_NR);
		return;
	}
#endif
	ml_bf16_gemm(m, n, k, a, lda, bp, bias, c, ldc);
}

/*
 * gemm_epi: ml_bf16_gemm, with epi (columns' bias, Z of C's strides,
 * activation; NULL: none) applied to each block on AMX: true, or false
 * when epi is left to the caller (not on AMX).
 */
static bool
gemm_epi(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda, const uint16_t *bp,
	 const float *bias, float *c, int64_t ldc, const struct epi_job *epi);

void
ml_bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda, const uint16_t *bp,
	     const float *bias, float *c, int64_t ldc)
{
	gemm_epi(m, n, k, a, lda, bp, bias, c, ldc, NULL);
}

static bool
gemm_epi(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda, const uint16_t *bp,
	 const float *bias, float *c, int64_t ldc, const struct epi_job *epi)
{
	(void)epi;	/* used on AMX only */
	if (m <= 0 || n <= 0)
		return true;
	if (k <= 0) {
		for (int64_t i = 0; i < m; i++)
			for (int64_t jj = 0; jj < n; jj++)
				c[i * ldc + jj] = bias != NULL ? bias[i] : 0.0f;
		return false;
	}
#ifdef HAVE_BF16
	if (ml_bf16_path() >= ML_BF16_DP) {
		struct bg_job j = { .m = m, .n = n, .k = k, .kp = (k + 1) / 2, .lda = lda,
				    .ldc = ldc, .a = a, .bp = bp, .bias = bias, .c = c };
		j.amx = use_amx(m);
		j.epi = j.amx ? epi : NULL;
		j.rb = j.amx ? AMX_RB : 12;
		j.nblk = (m + j.rb - 1) / j.rb;
		j.ngroups = (j.nblk + MB / j.rb - 1) / (MB / j.rb);
		j.npan = (n + ML_BF_NR - 1) / ML_BF_NR;
		int64_t nt = ml_get_threads();
		j.npchunks = ML_MAX(1, ML_MIN(j.npan, (2 * nt + j.ngroups - 1) / j.ngroups));
		int64_t work = ML_MAX(1, m / j.ngroups * ML_BF_NR * j.npan / j.npchunks * k);
		ml_parallel_for(j.ngroups * j.npchunks, ML_MAX(1, (int64_t)(1 << 20) / work),
				bg_items, &j);
		return j.epi != NULL;
	}
#endif
	/* the reference: the same bf16 products, f32 sums in k order */
	int64_t kp = (k + 1) / 2;
	for (int64_t i = 0; i < m; i++)
		for (int64_t jj = 0; jj < n; jj++) {
			const uint16_t *pan = bp + (jj / ML_BF_NR) * kp * 2 * ML_BF_NR +
					      (jj % ML_BF_NR) * 2;
			float s = 0.0f;
			for (int64_t kk = 0; kk < k; kk++)
				s += ml_bf16_to_f32(a[i * lda + kk]) *
				     ml_bf16_to_f32(pan[kk / 2 * 2 * ML_BF_NR + (kk & 1)]);
			c[i * ldc + jj] = s + (bias != NULL ? bias[i] : 0.0f);
		}
	return false;
}

/* ---- f32 operands rounded while packing (mltrain --precision bf16) ---- */

/*
 * A training step's products have f32 weights that change every step, so
 * nothing is packed once: both operands are rounded to bf16 as they are
 * packed for each call, which costs O(mk + kn) against the product's
 * O(mnk). The fallback rounds them into f32 copies and runs the f32 GEMM,
 * so both paths compute the same products (exact in f32: 8 x 8 bits) and
 * differ only in the order of the f32 sums.
 */
static void
round_copy(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld)
{
	/* ml_f32_to_bf16 inline, so that the loop vectorises: NaN stays NaN (quiet) */
	for (int64_t i = 0; i < rows; i++) {
		const uint32_t *s = (const uint32_t *)(const void *)(src + i * ld);
		uint32_t *d = (uint32_t *)(void *)(dst + i * cols);
		for (int64_t j = 0; j < cols; j++) {
			uint32_t u = s[j];
			uint32_t r = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
			d[j] = (u & 0x7fffffff) > 0x7f800000 ? (u | 0x400000) & 0xffff0000u : r;
		}
	}
}

#ifdef HAVE_BF16
/*
 * pack_bt_dp: B stored [n, k] (ldb apart), transposed into pair panels: a
 * pair of column j is two consecutive floats of row j, so each panel's 32
 * rows are rounded to bf16 words into w (32 x kp words), and each pair row
 * of the panel gathers word q of the 32 rows.
 */
BF_TARGET static void
pack_bt_dp(uint16_t *bp, const float *b, int64_t ldb, int64_t k, int64_t n, uint32_t *w)
{
	int64_t kp = (k + 1) / 2, npan = (n + ML_BF_NR - 1) / ML_BF_NR;
	__m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5,
							  4, 3, 2, 1, 0), _mm512_set1_epi32((int)kp));
	for (int64_t p = 0; p < npan; p++) {
		uint32_t *pan = (uint32_t *)(bp + p * kp * 2 * ML_BF_NR);
		for (int64_t j = 0; j < ML_BF_NR; j++) {
			int64_t jj = p * ML_BF_NR + j;
			uint16_t *row = (uint16_t *)(w + j * kp);
			if (jj < n)
				rows_dp(row, b + jj * ldb, k);
			else
				memset(row, 0, sizeof(uint16_t) * (size_t)k);
			if (k & 1)
				row[k] = 0;
		}
		for (int64_t q = 0; q < kp; q++) {
			_mm512_store_si512(pan + q * 32, _mm512_i32gather_epi32(idx, w + q, 4));
			_mm512_store_si512(pan + q * 32 + 16,
					   _mm512_i32gather_epi32(idx, w + 16 * kp + q, 4));
		}
	}
}
#endif

bool
ml_bf16_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
	      const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
	if (m <= 0 || n <= 0)
		return true;
#ifdef HAVE_BF16
	if (ml_bf16_train_path() == 2 && k > 0) {
		/* scratch slots 4 to 6: callers (the Gemm kernel, the conv gradients) use 0 to 3 */
		int64_t kp = (k + 1) / 2, pstride = kp * 2 * ML_BF_NR;
		size_t abytes = sizeof(uint16_t) * (size_t)(m * k) * (ta ? 2 : 1) + 64;
		size_t bbytes = sizeof(uint16_t) * (size_t)ml_bf16_packed_len(k, n) + 64;
		size_t wbytes = sizeof(uint32_t) * (size_t)(ML_BF_NR * kp) + 64;
		uint16_t *a16 = ml_cpu_scratch(4, abytes);
		uint16_t *bp = ml_cpu_scratch(5, bbytes);
		void *w = ml_cpu_scratch(6, ML_MAX(wbytes, beta != 0 ? sizeof(float) * (size_t)(m * n) + 64 : 0));
		if (a16 == NULL || bp == NULL || w == NULL)
			return false;
		/* A: bf16 rows of k (pairs along k, as vdpbf16ps broadcasts them) */
		if (!ta) {
			for (int64_t i = 0; i < m; i++)
				rows_dp(a16 + i * k, a + i * lda, k);
		} else {
			/* rounded as stored ([k, m]), then transposed: A is the small side where ta */
			uint16_t *at = a16 + m * k;
			for (int64_t kk = 0; kk < k; kk++)
				rows_dp(at + kk * m, a + kk * lda, m);
			for (int64_t i = 0; i < m; i++)
				for (int64_t kk = 0; kk < k; kk++)
					a16[i * k + kk] = at[kk * m + i];
		}
		/* B: pair panels, rounded as they are interleaved */
		if (!tb)
			for (int64_t q = 0; q < kp; q++)
				pack_pair_dp(bp + q * 2 * ML_BF_NR, pstride, b + 2 * q * ldb,
					     2 * q + 1 < k ? b + (2 * q + 1) * ldb : NULL, n);
		else
			pack_bt_dp(bp, b, ldb, k, n, w);
		if (beta == 0) {
			ml_bf16_gemm(m, n, k, a16, k, bp, NULL, c, ldc);
			return true;
		}
		float *tmp = w;
		ml_bf16_gemm(m, n, k, a16, k, bp, NULL, tmp, n);
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++)
				c[i * ldc + j] = beta * c[i * ldc + j] + tmp[i * n + j];
		return true;
	}
#endif
	if (ml_bf16_train_path() == 0)
		return ml_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
	const float *ra = ml_bf16_rounded(4, a, ta ? k : m, ta ? m : k, lda);
	const float *rb = ml_bf16_rounded(5, b, tb ? n : k, tb ? k : n, ldb);
	return ra != NULL && rb != NULL &&
	       ml_sgemm(ta, tb, m, n, k, 1.0f, ra, ML_MAX(ta ? m : k, 1), rb, ML_MAX(tb ? k : n, 1),
			beta, c, ldc);
}

const float *
ml_bf16_rounded(int slot, const float *src, int64_t rows, int64_t cols, int64_t ld)
{
	float *d = ml_cpu_scratch(slot, sizeof(float) * (size_t)ML_MAX(rows * cols, 1) + 64);
	if (d != NULL)
		round_copy(d, src, rows, cols, ld);
	return d;
}

bool
ml_node_bf16(const struct ml_node *n)
{
	return strcmp(ml_attr_str(n, "precision", "f32"), "bf16") == 0;
}

/* ---- the ops ---- */


struct to_f32 {
	const uint16_t *s;
	float *d;
	bool f16;		/* fp16, else bf16 */
};

static void
to_f32_items(void *ctx, int64_t b, int64_t e)
{
	const struct to_f32 *j = ctx;
	for (int64_t i = b; i < e; i++)
		j->d[i] = j->f16 ? ml_f16_to_f32(j->s[i]) : ml_bf16_to_f32(j->s[i]);
}

/*
 * as_f32: the fallback: c's kernel on the weight converted to f32 (once
 * per session where the node has a cache).
 */
static int
as_f32(struct ml_opctx *c)
{
	const struct ml_tval *w = c->in[1];
	int64_t n = ml_tval_numel(w);
	bool fill;
	void *tmp;
	float *wf = ml_cpu_wcache(c, ML_WC_F32, sizeof(float) * (size_t)ML_MAX(n, 1), &fill, &tmp);

	if (wf == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory converting a %s weight",
				 ml_dtype_name(w->dtype));
	if (fill) {
		struct to_f32 j = { w->data, wf, w->dtype == ML_F16 };
		ml_parallel_for(n, 1 << 16, to_f32_items, &j);
	}
	struct ml_tval wt = *w, *ins[8];
	wt.dtype = ML_F32;
	wt.data = wf;
	wt.owned = false;
	for (int i = 0; i < c->n_in && i < 8; i++)
		ins[i] = c->in[i];
	ins[1] = &wt;
	struct ml_opctx c2 = *c;
	/* the kernel may keep a derived weight of its own: wf lives in this node's cache */
	c2.cache = NULL;
	c2.in = ins;
	c2.n_in = ML_MIN(c->n_in, 8);
	int rc = ml_cpu_kernel_get(c->node->op)(&c2);
	ml_free(tmp);
	return rc;
}

/*
 * cpair_order: the bf16 weight w [cout, cin, ksz] in (kernel offset, channel
 * pair) order, [cout, ksz, 2 * ceil(cin / 2)], an odd cin padded with a zero.
 */
static void
cpair_order(uint16_t *d, const uint16_t *w, const struct ml_conv3 *v)
{
	int64_t c2 = 2 * ((v->cin + 1) / 2), k2 = v->ksz * c2;
	for (int64_t m = 0; m < v->cout; m++)
		for (int64_t kk = 0; kk < v->ksz; kk++)
			for (int64_t ci = 0; ci < c2; ci++)
				d[m * k2 + kk * c2 + ci] = ci < v->cin ? w[(m * v->cin + ci) * v->ksz + kk] : 0;
}

/*
 * dp_only: vdpbf16ps runs every product it can (AMX, or ML_BF16=dp asks);
 * else, at the FMA's rate alone, only those where twice the multiply-adds
 * a cycle are not lost elsewhere: the f32 kernels keep Winograd's 3x3
 * (ResNet-18's 56x56 layers 0.51-0.58 ms in f32, 0.75-0.78 on vdpbf16ps;
 * 28x28 even), the few-channel stems of stride 1 (through im2col: 1.31
 * against the f32 direct kernel's 1.19 ms; those of stride 2 across run
 * nn_direct.c's kernel on pairs of taps, ml_direct_conv_bf16) and products of
 * at most 16 columns, half a panel (MobileNet-V2's 32 -> 16 on 112x112: 93
 * against 136 us; AMD EPYC Zen 4, 2 threads).
 */
static bool
dp_only(void)
{
	return ml_bf16_path() == ML_BF16_AMX || ml_bf16_dp_asked();
}

static int
conv_dp(struct ml_opctx *c)
{
	const struct ml_tval *b = ML_IN(c, 2), *z = ML_IN(c, 3);
	struct ml_conv3 v;
	bool fused = c->node->op == ML_OP_FUSED_CONV;

	if (ml_cpu_conv3(c, &v) < 0 || v.outsz == 0 || v.n == 0 || v.cout == 0)
		return 1;
	/* depthwise: a few multiply-adds per weight, which the f32 kernels do best */
	if (v.cg == 1 && v.group > 1)
		return 1;
	/* a stem of stride 2 across: nn_direct.c's kernel on pairs of taps (ml_direct_conv_bf16) */
	bool dbf = ml_direct_bf16_ok(&v);
	if (!dbf && !dp_only() && (ml_wino_ok(&v) || ml_direct_ok(&v) || v.cout <= 16))
		return 1;
	if ((b != NULL && (b->dtype != ML_F32 || ml_tval_numel(b) != v.cout)) ||
	    (fused && z != NULL && (z->dtype != ML_F32 ||
				    ml_tval_numel(z) != ml_tval_numel(c->out[0]))))
		return 1;
	struct ml_conv_epi e = { 0 }, *ep = NULL;
	if (fused) {
		e.z = z != NULL ? z->data : NULL;
		e.act = ml_fused_act(c->node);
		e.lo = (float)ml_attr_float(c->node, "clip_min", -INFINITY);
		e.hi = (float)ml_attr_float(c->node, "clip_max", INFINITY);
		if (e.z != NULL || e.act > ML_ACT_NONE)
			ep = &e;
	}
	if (dbf) {
		int rc = ml_direct_conv_bf16(c, &v, c->in[0]->data, c->in[1]->data,
					     b != NULL ? b->data : NULL, ep, c->out[0]->data);
		/* not taken (a large input): the f32 kernel unless every product is asked for */
		if (rc <= 0 || !dp_only())
			return rc;
	}
	/* the weights in (kernel offset, channel pair) order, once per session */
	int64_t ncp = (v.cin + 1) / 2, k2 = v.ksz * 2 * ncp;
	bool fill;
	void *tmp;
	if (ml_conv_bf16_rows_ok(&v)) {
		/* transposed, [k2, cout] as B's panels */
		size_t bytes = sizeof(uint16_t) * (size_t)ml_bf16_packed_len(k2, v.cout);
		uint16_t *bp = ml_cpu_wcache(c, ML_WC_ROWS, bytes, &fill, &tmp);
		uint16_t *wt = fill ? ml_malloc(sizeof(uint16_t) * (size_t)(v.cout * k2)) : NULL;
		if (bp == NULL || (fill && wt == NULL)) {
			ml_free(tmp);
			return ml_opfail(c, ML_ENOMEM, "out of memory packing a bf16 weight");
		}
		if (fill) {
			cpair_order(wt, c->in[1]->data, &v);
			ml_bf16_pack_b(bp, wt, k2, v.cout, true);
			ml_free(wt);
		}
		int rc = ml_conv_bf16_rows(c, &v, c->in[0]->data, bp, b != NULL ? b->data : NULL,
					   ep, c->out[0]->data);
		ml_free(tmp);
		return rc;
	}
	if (!ml_conv_bf16_cpair_ok(&v))
		return ml_conv_bf16(c, &v, c->in[0]->data, c->in[1]->data, false,
				    b != NULL ? b->data : NULL, ep, c->out[0]->data);
	uint16_t *wp = ml_cpu_wcache(c, ML_WC_CPAIR, sizeof(uint16_t) * (size_t)(v.cout * k2), &fill,
				     &tmp);
	if (wp == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory packing a bf16 weight");
	if (fill)
		cpair_order(wp, c->in[1]->data, &v);
	int rc = ml_conv_bf16(c, &v, c->in[0]->data, wp, true, b != NULL ? b->data : NULL, ep,
			      c->out[0]->data);
	ml_free(tmp);
	return rc;
}

struct rows_job {
	const float *a;
	uint16_t *d;
	int64_t k;
};

static void
rows_items(void *ctx, int64_t b, int64_t e)
{
	const struct rows_job *j = ctx;
	for (int64_t i = b; i < e; i++)
		ml_bf16_from_f32(j->d + i * j->k, j->a + i * j->k, j->k);
}


static void
epi_items(void *ctx, int64_t b, int64_t e)
{
	const struct epi_job *j = ctx;
	ml_fused_tile_epi(j->y + b * j->n, e - b, j->n, j->n, j->bias,
			  j->z != NULL ? j->z + b * j->n : NULL, j->act, j->lo, j->hi);
}

/*
 * mm_dp: MatMul, Gemm and their fused forms with B a bf16 matrix (not
 * batched), and a pointwise ConvNHWC (ml_conv_nhwc_pointwise: X as [NHW,
 * C] times W as [C, M], with FusedMatMul's bias, Z and activation).
 */
static int
mm_dp(struct ml_opctx *c)
{
	const struct ml_tval *a = c->in[0], *b = c->in[1];
	struct ml_tval *y = c->out[0];
	enum ml_op op = c->node->op;
	bool gemm = op == ML_OP_GEMM || op == ML_OP_FUSED_GEMM;
	bool nhwc = op == ML_OP_CONV_NHWC;
	bool tb = gemm && ml_attr_int(c->node, "transB", 0) != 0;
	int64_t pn = op == ML_OP_FUSED_MATMUL ? ml_attr_int(c->node, "packed_n", 0) : 0;
	const struct ml_tval *bias = NULL, *z = NULL;
	struct epi_job ej = { .act = ML_ACT_NONE };

	if (nhwc && (a->rank != 4 || !ml_conv_nhwc_pointwise(c->node, b->rank, b->dims)))
		return 1;
	if (a->rank < 2 || b->rank != (nhwc ? 4 : pn > 0 ? 3 : 2))
		return 1;
	int64_t k = nhwc ? b->dims[2] : pn > 0 ? b->dims[1] : b->dims[tb ? 1 : 0];
	int64_t n = nhwc ? b->dims[3] : pn > 0 ? pn : b->dims[tb ? 0 : 1];
	if (k <= 0 || n <= 0 || a->dims[a->rank - 1] != k || ml_tval_numel(a) % k != 0)
		return 1;
	int64_t m = ml_tval_numel(a) / k;
	if (m * n != ml_tval_numel(y) || m <= 0 || (n <= 16 && !dp_only()))
		return 1;
	if (pn > 0 && (b->dims[0] != (n + ML_BF_NR - 1) / ML_BF_NR || b->dims[2] != ML_BF_NR))
		return 1;
	if (gemm) {
		const struct ml_tval *cc = ML_IN(c, 2);
		double beta = ml_attr_float(c->node, "beta", 1.0);
		if (ml_attr_int(c->node, "transA", 0) != 0 ||
		    ml_attr_float(c->node, "alpha", 1.0) != 1.0)
			return 1;
		if (cc != NULL && beta != 0 && ml_tval_numel(cc) > 0) {
			/* C as a bias per column: [N] or [1, N], beta 1 */
			if (beta != 1.0 || cc->dtype != ML_F32 || ml_tval_numel(cc) != n ||
			    (cc->rank == 2 && cc->dims[0] != 1) || cc->rank > 2 ||
			    (n > 1 && cc->rank == 0))
				return 1;
			bias = cc;
		}
	} else if (op == ML_OP_FUSED_MATMUL || nhwc) {
		bias = ML_IN(c, 2);
		z = ML_IN(c, 3);
		if ((bias != NULL && (bias->dtype != ML_F32 || ml_tval_numel(bias) != n)) ||
		    (z != NULL && (z->dtype != ML_F32 || ml_tval_numel(z) != m * n)))
			return 1;
	}
	if (op == ML_OP_FUSED_MATMUL || op == ML_OP_FUSED_GEMM || nhwc) {
		ej.act = ml_fused_act(c->node);
		ej.lo = (float)ml_attr_float(c->node, "clip_min", -INFINITY);
		ej.hi = (float)ml_attr_float(c->node, "clip_max", INFINITY);
	}
	/* B as pair panels, once per session */
	size_t bbytes = sizeof(uint16_t) * (size_t)ml_bf16_packed_len(k, n);
	bool fill;
	void *tmp;
	uint16_t *bp = ml_cpu_wcache(c, ML_WC_PANELS, bbytes, &fill, &tmp);
	if (bp == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory packing a bf16 weight");
	if (fill) {
		if (pn > 0)
			repack_b(bp, b->data, k, n);
		else
			ml_bf16_pack_b(bp, b->data, k, n, tb);
	}
	/* A as bf16 rows (k apart: pairs need no alignment) */
	uint16_t *ab = ml_cpu_scratch(3, sizeof(uint16_t) * (size_t)(m * k) + 4);
	if (ab == NULL) {
		ml_free(tmp);
		return ml_opfail(c, ML_ENOMEM, "out of memory converting A to bf16");
	}
	struct rows_job rj = { a->data, ab, k };
	ml_parallel_for(m, ML_MAX(1, (1 << 15) / k), rows_items, &rj);
	ej.y = y->data;
	ej.bias = bias != NULL ? bias->data : NULL;
	ej.z = z != NULL ? z->data : NULL;
	ej.n = n;
	bool epi = ej.bias != NULL || ej.z != NULL || ej.act > ML_ACT_NONE;
	bool done = gemm_epi(m, n, k, ab, k, bp, NULL, y->data, n, epi ? &ej : NULL);
	ml_free(tmp);
	if (epi && !done)
		ml_parallel_for(m, ML_MAX(1, 16384 / n), epi_items, &ej);
	return 0;
}

/*
 * conv_step: a step graph's Conv with f32 weights and precision "bf16":
 * the weights change every step, so they are rounded to bf16 on each call
 * (a few thousand values against the product's millions of multiply-adds)
 * and conv_dp runs on them without the session's cache, packing and
 * reordering them anew.
 */
static int
conv_step(struct ml_opctx *c)
{
	struct ml_tval w = *c->in[1], *in[3];
	int64_t nw = ml_tval_numel(c->in[1]);
	uint16_t *w16 = ml_malloc(sizeof(uint16_t) * (size_t)ML_MAX(nw, 1));
	if (w16 == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory rounding a weight to bf16");
	ml_bf16_from_f32(w16, c->in[1]->data, nw);
	w.dtype = ML_BF16;
	w.data = w16;
	for (int i = 0; i < 3; i++)
		in[i] = i < c->n_in ? c->in[i] : NULL;
	in[1] = &w;
	struct ml_opctx cc = *c;
	cc.in = in;
	cc.n_in = ML_MIN(c->n_in, 3);
	cc.cache = NULL;
	int rc = conv_dp(&cc);
	ml_free(w16);
	return rc;
}

/*
 * conv_emulate: the same Conv on the emulation path (ML_BF16=f32): the f32
 * Conv kernel on x and w rounded to bf16 values; in_emulation keeps that
 * call from coming back here.
 */
static _Thread_local bool in_emulation;

static int
conv_emulate(struct ml_opctx *c)
{
	struct ml_tval x = *c->in[0], w = *c->in[1], *in[3];
	const float *rx = ml_bf16_rounded(4, c->in[0]->data, 1, ml_tval_numel(&x), 0);
	const float *rw = ml_bf16_rounded(5, c->in[1]->data, 1, ml_tval_numel(&w), 0);
	if (rx == NULL || rw == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory rounding to bf16");
	/* the kernel may use scratch slots 0 to 3 only: 4 and 5 hold the copies */
	x.data = (void *)rx;
	w.data = (void *)rw;
	for (int i = 0; i < 3; i++)
		in[i] = i < c->n_in ? c->in[i] : NULL;
	in[0] = &x;
	in[1] = &w;
	struct ml_opctx cc = *c;
	cc.in = in;
	cc.n_in = ML_MIN(c->n_in, 3);
	cc.cache = NULL;
	in_emulation = true;
	int rc = ml_cpu_kernel_get(ML_OP_CONV)(&cc);
	in_emulation = false;
	return rc;
}

int
ml_cpu_bf16_run(struct ml_opctx *c)
{
	/* a training step's f32 Conv in bf16 (mltrain --precision bf16) */
	if (c->node->op == ML_OP_CONV && c->n_in >= 2 && c->in[0] != NULL && c->in[1] != NULL &&
	    c->in[0]->dtype == ML_F32 && c->in[1]->dtype == ML_F32 && c->n_out >= 1 &&
	    c->out[0]->dtype == ML_F32 && !in_emulation && ml_node_bf16(c->node)) {
		/*
		 * Few output channels (a LeNet's): train_conv.c's kernels,
		 * bf16 there (nn_conv.c passes the node's precision), beat
		 * the bf16 GEMM, whose 12-row tiles would run mostly empty;
		 * so do their gradients (grad.c).
		 */
		struct ml_conv3 v;
		if (ml_cpu_conv3(c, &v) < 0 || ml_train_conv_ok(&v))
			return 1;
		int tp = ml_bf16_train_path();
		if (tp == 2)
			return conv_step(c);
		if (tp == 1)
			return conv_emulate(c);
	}
	if (c->n_in < 2 || c->in[0] == NULL || c->in[1] == NULL || c->in[0]->dtype != ML_F32 ||
	    (c->in[1]->dtype != ML_BF16 && c->in[1]->dtype != ML_F16) || c->n_out < 1 ||
	    c->out[0]->dtype != ML_F32)
		return 1;
	/* an fp16 weight (mlquant --dtype fp16): storage only, the f32 kernel on it */
	if (c->in[1]->dtype == ML_F16)
		return as_f32(c);
	int rc = ml_cpu_bf16_native(c);
	return rc <= 0 ? rc : as_f32(c);
}

int
ml_cpu_bf16_native(struct ml_opctx *c)
{
	if (c->n_in < 2 || c->in[0] == NULL || c->in[1] == NULL || c->in[0]->dtype != ML_F32 ||
	    c->in[1]->dtype != ML_BF16 || c->n_out < 1 || c->out[0]->dtype != ML_F32)
		return 1;
	/*
	 * vdpbf16ps without AMX: where it issues at half the FMA's rate (the
	 * Sapphire Rapids Xeons with AMX hidden) it lost to the f32 kernels on
	 * every product of ResNet-18, 1.3 to 3.5 times slower, so the weight is
	 * converted once and the f32 kernels run, unless ML_BF16=dp asks. Where
	 * it issues at the FMA's rate (ml_bf16_dp_fast: AMD Zen 4 and 5) it
	 * runs the products that it does faster (dp_only).
	 */
	if (ml_bf16_path() != ML_BF16_AMX &&
	    (ml_bf16_path() != ML_BF16_DP || !(ml_bf16_dp_asked() || ml_bf16_dp_fast())))
		return 1;
	switch (c->node->op) {
	case ML_OP_CONV:
	case ML_OP_FUSED_CONV:
		return conv_dp(c);
	case ML_OP_MATMUL:
	case ML_OP_FUSED_MATMUL:
	case ML_OP_GEMM:
	case ML_OP_FUSED_GEMM:
	case ML_OP_CONV_NHWC:
		return mm_dp(c);
	default:
		return 1;
	}
}
