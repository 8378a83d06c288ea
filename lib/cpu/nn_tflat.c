/*
 * nn_tflat.c: the f32 2-D convolution of a small plane into few output
 * channels (DenseNet's growth layers: 3x3, 128 -> 32 channels on 16x16
 * down to 4x4 planes) with the output positions as the GEMM's rows.
 *
 * nn_flat.c's implicit GEMM puts the output channels on the rows of its
 * 12 x 32 tiles and the positions on the columns: 32 channels are three
 * row blocks of 12, 12 and 8, and an 8x8 plane's 72 flat positions three
 * panels of 32 of which the last holds 8, so half the multiply-adds of
 * such a layer are waste (94 GFLOP/s on 8x8, 60 on 4x4, against 157 on
 * 16x16; AMD EPYC Zen 4, 2 threads). Transposed, Y^T [P, M] = sum over
 * the taps t of X^T shifted by t times W_t^T [C, M]: the M <= 64 channels
 * fill one or two 32-wide panels, and the positions run in row blocks of
 * 12.
 *
 * The input is copied zero-padded and channels last: Xt [Hp * Wp, C], rows
 * of Wp = W plus the wider of the side pads (the narrower one shared with
 * the next row), so that output position p = oh * Wp + ow (ow < OW; the
 * Wp - OW others are junk rows, computed and dropped) under tap (kh, kw)
 * is row p + kh * Wp + kw of Xt, and the rows of a block under one tap are rows of Xt C apart:
 * each tap is a plain GEMM over the block (ml_pgemm_serial, nn_gemm.c's
 * kernels), the taps summing into the block's result. The weights are
 * packed once per session, a matrix [C, M] of panels per tap. The result
 * is transposed back into Y's planes by 16 x 16 blocks in registers, with
 * the bias, then a FusedConv's residual and activation. One pool job does
 * it all: each thread's run of row blocks copies the rows of Xt it reads
 * into its own scratch, computes its rows and puts them into Y, so that no
 * core reads what another wrote, and a layer of 4x4 pays one dispatch,
 * not three.
 *
 * Stride 1, one group, 2-D, on AVX-512 (the copies transpose 16 x 16 in
 * registers) and on AVX2 with FMA (8 x 8 blocks, and nn_gemm.c's 6 x 16
 * kernel: DenseNet's 16x16 to 4x4 layers there took the implicit GEMM at
 * 100-130 GFLOP/s and 4x4 at half that; Zen 3); elsewhere nn_flat.c's
 * implicit GEMM. ML_CONV_TFLAT=0 turns it off, ML_CONV_TFLAT=avx2 forces
 * the AVX2 copies (tests, comparisons).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <stdatomic.h>

#include "cpu/nn.h"
#include "ops/fused.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_TFLAT 1
#include <immintrin.h>
#include "cpu/tile512.h"
#endif

#define TF_MAX_COUT 64		/* two panels */
#define TF_MAX_POS 256		/* output positions of an image: 16x16 */
#define TF_MIN_CIN 16
#define TF_MAX_K 7
#define TF_MAX_FLOATS ((int64_t)1 << 22)	/* an image's Xt and result */

/*
 * tf_level: 2 the AVX-512 copies, 1 the AVX2 ones, 0 off (neither, no
 * packed SGEMM, or ML_CONV_TFLAT=0); computed once.
 */
static int
tf_level(void)
{
	static atomic_int level = -1;
	int v = atomic_load_explicit(&level, memory_order_relaxed);

	if (v < 0) {
		v = 0;
#ifdef HAVE_TFLAT
		v = ml_pgemm_ok() ? ml_cpu_fma_level("ML_CONV_TFLAT") : 0;
#endif
		atomic_store_explicit(&level, v, memory_order_relaxed);
	}
	return v;
}

/* The geometry of v's transposed product. */
struct tf_geom {
	int64_t Hp, Wp;		/* the padded plane */
	int64_t P;		/* flat positions of an image: (OH - 1) Wp + OW */
	int64_t xs;		/* floats of an image's Xt */
};

static void
tf_geom(const struct ml_conv3 *v, struct tf_geom *g)
{
	g->Hp = v->in[1] + v->p[1] + v->pe[1];
	/*
	 * Rows W + max(left, right pad) apart: a window's columns past a row's
	 * end wrap into the next row's left padding (3x3, pad 1: rows of W +
	 * 1, an 8x8 plane's 71 positions, not 78), and the last row's into a
	 * row of zeros after it.
	 */
	g->Wp = v->in[2] + ML_MAX(v->p[2], v->pe[2]);
	g->P = (v->out[1] - 1) * g->Wp + v->out[2];
	g->xs = (g->Hp + 1) * g->Wp * v->cin;
}

bool
ml_tflat_ok(const struct ml_conv3 *v)
{
	if (tf_level() == 0 || v->group != 1 || v->in[0] != 1 || v->k[0] != 1 ||
	    v->out[0] != 1 || v->p[0] != 0 || v->pe[0] != 0 || v->ksz < 2 || v->s[1] != 1 ||
	    v->s[2] != 1 || v->d[1] != 1 || v->d[2] != 1 || v->k[1] > TF_MAX_K ||
	    v->k[2] > TF_MAX_K || v->cout > TF_MAX_COUT || v->cin < TF_MIN_CIN ||
	    v->outsz > TF_MAX_POS || v->out[1] < 1 || v->out[2] < 1)
		return false;
	for (int i = 1; i < 3; i++)
		if (v->p[i] < 0 || v->pe[i] < 0 || v->p[i] >= v->k[i] || v->pe[i] >= v->k[i])
			return false;
	struct tf_geom g;
	tf_geom(v, &g);
	/* the window covers the padded plane exactly (stride 1) */
	if (g.Hp - v->k[1] + 1 != v->out[1] ||
	    v->in[2] + v->p[2] + v->pe[2] - v->k[2] + 1 != v->out[2])
		return false;
	return g.xs + g.P * v->cout <= TF_MAX_FLOATS;
}

#ifdef HAVE_TFLAT
struct tf_job {
	const struct ml_conv3 *v;
	struct tf_geom g;
	const float *x, *wt, *bias;
	const struct ml_conv_epi *e;
	float *y;
	int64_t plen;		/* floats of a tap's packed [C, M] */
	int64_t nitems;		/* row runs of an image */
	atomic_int nomem;
	int32_t off[TF_MAX_K * TF_MAX_K];	/* each tap's row offset in Xt */
};

/*
 * row512: one input row xr (its C channels insz apart, W positions) into
 * the channels-last positions at dst (rows of C), 16 by 16 in registers
 */
__attribute__((target("avx512f"))) static void
row512(const float *xr, int64_t insz, int64_t C, int64_t W, float *dst)
{
	for (int64_t w0 = 0; w0 < W; w0 += 16)
		for (int64_t c0 = 0; c0 < C; c0 += 16)
			tile512_tr_block(xr + c0 * insz + w0, insz, (int)ML_MIN(16, C - c0),
					 (int)ML_MIN(16, W - w0), dst + w0 * C + c0, C, false);
}

/*
 * put512: np positions of one output row, T's rows at tp (M channels
 * each), into Y's planes at yp (P apart), plus the bias: 16 positions by
 * 16 channels transposed in registers
 */
__attribute__((target("avx512f"))) static void
put512(const float *tp, int64_t M, const float *bias, int64_t np, float *yp, int64_t P)
{
	for (int64_t p = 0; p < np; p += 16) {
		int nw = (int)ML_MIN(16, np - p);
		__mmask16 wm = (__mmask16)((1u << nw) - 1);
		for (int64_t m0 = 0; m0 < M; m0 += 16) {
			int nc = (int)ML_MIN(16, M - m0);
			__mmask16 cm = (__mmask16)((1u << nc) - 1);
			__m512 q[16];
			for (int i = 0; i < 16; i++)
				q[i] = i < nw ? _mm512_maskz_loadu_ps(cm, tp + (p + i) * M + m0) :
						_mm512_setzero_ps();
			tile512_tr16(q);
			for (int c = 0; c < nc; c++) {
				__m512 bm = _mm512_set1_ps(bias != NULL ? bias[m0 + c] : 0.0f);
				_mm512_mask_storeu_ps(yp + (m0 + c) * P + p, wm, _mm512_add_ps(q[c], bm));
			}
		}
	}
}

/* tr8: r[0..7] rows of an 8 x 8 block become its columns. */
__attribute__((target("avx2"), always_inline)) static inline void
tr8(__m256 r[8])
{
	__m256 t[8];
	for (int i = 0; i < 4; i++) {
		t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 2; i++) {
		__m256d a = _mm256_castps_pd(t[4 * i]), b = _mm256_castps_pd(t[4 * i + 1]);
		__m256d c = _mm256_castps_pd(t[4 * i + 2]), d = _mm256_castps_pd(t[4 * i + 3]);
		r[4 * i] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));
		r[4 * i + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
		r[4 * i + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
		r[4 * i + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
	}
	for (int i = 0; i < 4; i++) {
		t[i] = _mm256_permute2f128_ps(r[i], r[4 + i], 0x20);
		t[4 + i] = _mm256_permute2f128_ps(r[i], r[4 + i], 0x31);
	}
	for (int i = 0; i < 8; i++)
		r[i] = t[i];
}

/* lanes8: the mask of the first n (0..8) of 8 lanes */
__attribute__((target("avx2"), always_inline)) static inline __m256i
lanes8(int n)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/*
 * tr8_block: dst row q (q < nc, stride ld) = column q of the nr x nc block
 * of src (row stride ls), nr, nc <= 8: its first nr floats
 */
__attribute__((target("avx2"), always_inline)) static inline void
tr8_block(const float *src, int64_t ls, int nr, int nc, float *dst, int64_t ld)
{
	__m256 r[8];
	__m256i mc = lanes8(nc), mr = lanes8(nr);
	for (int i = 0; i < 8; i++)
		r[i] = i >= nr ? _mm256_setzero_ps() : nc == 8 ? _mm256_loadu_ps(src + i * ls) :
			_mm256_maskload_ps(src + i * ls, mc);
	tr8(r);
	for (int q = 0; q < nc; q++) {
		if (nr == 8)
			_mm256_storeu_ps(dst + q * ld, r[q]);
		else
			_mm256_maskstore_ps(dst + q * ld, mr, r[q]);
	}
}

/* row2: row512 with the AVX2 8 x 8 transposes */
__attribute__((target("avx2"))) static void
row2(const float *xr, int64_t insz, int64_t C, int64_t W, float *dst)
{
	for (int64_t w0 = 0; w0 < W; w0 += 8)
		for (int64_t c0 = 0; c0 < C; c0 += 8)
			tr8_block(xr + c0 * insz + w0, insz, (int)ML_MIN(8, C - c0),
				  (int)ML_MIN(8, W - w0), dst + w0 * C + c0, C);
}

/* put2: put512 with the AVX2 8 x 8 transposes */
__attribute__((target("avx2"))) static void
put2(const float *tp, int64_t M, const float *bias, int64_t np, float *yp, int64_t P)
{
	for (int64_t p = 0; p < np; p += 8) {
		int nw = (int)ML_MIN(8, np - p);
		__m256i wm = lanes8(nw);
		for (int64_t m0 = 0; m0 < M; m0 += 8) {
			int nc = (int)ML_MIN(8, M - m0);
			__m256i cm = lanes8(nc);
			__m256 q[8];
			for (int i = 0; i < 8; i++)
				q[i] = i >= nw ? _mm256_setzero_ps() :
				       nc == 8 ? _mm256_loadu_ps(tp + (p + i) * M + m0) :
				       _mm256_maskload_ps(tp + (p + i) * M + m0, cm);
			tr8(q);
			for (int c = 0; c < nc; c++) {
				__m256 r = _mm256_add_ps(q[c], _mm256_set1_ps(bias != NULL ?
									  bias[m0 + c] : 0.0f));
				if (nw == 8)
					_mm256_storeu_ps(yp + (m0 + c) * P + p, r);
				else
					_mm256_maskstore_ps(yp + (m0 + c) * P + p, wm, r);
			}
		}
	}
}

/*
 * tf_rows: padded rows [h0, h1) of image n's Xt at xt: zeros, or an input
 * row's channels transposed into place (row512 or row2, by tf_level).
 */
static void
tf_rows(const struct tf_job *j, int64_t n, float *xt, int64_t h0, int64_t h1)
{
	const struct ml_conv3 *v = j->v;
	int64_t C = v->cin, W = v->in[2], Wp = j->g.Wp, pl = v->p[2];
	bool z512 = tf_level() == 2;

	for (int64_t hp = h0; hp < h1; hp++) {
		int64_t h = hp - v->p[1];
		float *dst = xt + hp * Wp * C;
		if (h < 0 || h >= v->in[1]) {	/* padding, or the row of zeros after the plane */
			memset(dst, 0, sizeof(float) * (size_t)(Wp * C));
			continue;
		}
		memset(dst, 0, sizeof(float) * (size_t)(pl * C));
		memset(dst + (pl + W) * C, 0, sizeof(float) * (size_t)((Wp - pl - W) * C));
		const float *xr = j->x + n * C * v->insz + h * W;
		(z512 ? row512 : row2)(xr, v->insz, C, W, dst + pl * C);
	}
}

/*
 * tf_put: flat positions [r0, r1) of image n, T's rows at t (row r0 first),
 * into Y's planes, plus the bias (put512 or put2, by tf_level); then the
 * epilogue over each output row's run.
 */
static void
tf_put(const struct tf_job *j, int64_t n, const float *t, int64_t r0, int64_t r1)
{
	const struct ml_conv3 *v = j->v;
	const struct ml_conv_epi *ep = j->e;
	int64_t M = v->cout, OW = v->out[2], P = v->outsz, Wp = j->g.Wp;
	float *yn = j->y + n * M * P;
	bool z512 = tf_level() == 2;

	for (int64_t oh = r0 / Wp; oh * Wp < r1; oh++) {
		int64_t lo = ML_MAX(r0, oh * Wp), hi = ML_MIN(r1, oh * Wp + OW);
		if (hi <= lo)
			continue;
		(z512 ? put512 : put2)(t + (lo - r0) * M, M, j->bias, hi - lo,
				       yn + oh * OW + (lo - oh * Wp), P);
		if (ep != NULL && (ep->z != NULL || ep->act > ML_ACT_NONE)) {
			int64_t at = n * M * P + oh * OW + (lo - oh * Wp);
			ml_fused_tile_epi(j->y + at, M, hi - lo, P, NULL,
					  ep->z != NULL ? ep->z + at : NULL, ep->act, ep->lo, ep->hi);
		}
	}
}

/*
 * tf_items: items [b, e), (image, run of row blocks), each all on its
 * thread: the Xt rows the run reads, copied into the thread's own scratch
 * (the runs of one image share a few rows, copied twice, and no thread
 * reads what another core wrote), every tap's product summed into the
 * run's rows of T, and those positions put into Y.
 */
static void
tf_items(void *ctx, int64_t b, int64_t e)
{
	struct tf_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t C = v->cin, M = v->cout, Wp = j->g.Wp, nblk = (j->g.P + 11) / 12;
	int32_t offmax = j->off[v->ksz - 1];

	for (int64_t it = b; it < e; it++) {
		int64_t n = it / j->nitems, q = it % j->nitems;
		int64_t r0 = q * nblk / j->nitems * 12;
		int64_t r1 = ML_MIN(j->g.P, (q + 1) * nblk / j->nitems * 12);
		if (r1 <= r0)
			continue;
		float *xt = ml_cpu_scratch(0, sizeof(float) * (size_t)j->g.xs);
		float *t = ml_cpu_scratch(2, sizeof(float) * (size_t)((r1 - r0) * M));
		if (xt == NULL || t == NULL) {
			atomic_store(&j->nomem, 1);
			return;
		}
		int64_t h1 = ML_MIN(j->g.Hp + 1, (r1 - 1 + offmax) / Wp + 1);
		tf_rows(j, n, xt, r0 / Wp, h1);
		for (int64_t k = 0; k < v->ksz; k++)
			ml_pgemm_serial(r1 - r0, M, C, xt + (r0 + j->off[k]) * C, C,
					j->wt + k * j->plen, NULL, t, M, k > 0);
		tf_put(j, n, t, r0, r1);
	}
}

/* tf_pack: w [M, C, KH, KW] as one [C, M] matrix of panels per tap */
static int
tf_pack(float *wt, const float *w, const struct ml_conv3 *v, int64_t plen)
{
	int64_t C = v->cin, M = v->cout, T = v->ksz;
	float *b = ml_malloc(sizeof(float) * (size_t)(C * M));
	if (b == NULL)
		return -1;
	for (int64_t t = 0; t < T; t++) {
		for (int64_t c = 0; c < C; c++)
			for (int64_t m = 0; m < M; m++)
				b[c * M + m] = w[(m * C + c) * T + t];
		ml_cpu_pack_panels(b, C, M, wt + t * plen);
	}
	ml_free(b);
	return 0;
}
#endif

int
ml_tflat_conv(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
	      const float *bias, const struct ml_conv_epi *e, float *y)
{
#ifdef HAVE_TFLAT
	struct tf_job j = { .v = v, .x = x, .bias = bias, .e = e, .y = y };
	tf_geom(v, &j.g);
	j.plen = ml_pgemm_packed_len(v->cin, v->cout);
	/* the packed weights: the node's, once, for a constant; else packed on each call */
	size_t wbytes = sizeof(float) * (size_t)(v->ksz * j.plen);
	bool fill = true;
	void *tmp = NULL;
	float *wt = NULL;
	if (ml_cpu_wconst(c))
		wt = ml_cpu_wcache(c, ML_WC_TAPS, wbytes, &fill, &tmp);
	else if ((tmp = ml_malloc(wbytes + 64)) != NULL)
		wt = (float *)((char *)tmp + 64);
	if (wt == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory packing the convolution's weights");
	if (fill && tf_pack(wt, w, v, j.plen) < 0) {
		ml_free(tmp);
		return ml_opfail(c, ML_ENOMEM, "out of memory packing the convolution's weights");
	}
	j.wt = wt;
	for (int64_t t = 0; t < v->ksz; t++)
		j.off[t] = (int32_t)(t / v->k[2] * j.g.Wp + t % v->k[2]);
	/* runs of row blocks: as many as the threads (at most the blocks) */
	int64_t nblk = (j.g.P + 11) / 12;
	j.nitems = ML_MAX(1, ML_MIN(nblk, (ml_get_threads() + v->n - 1) / v->n));
	atomic_init(&j.nomem, 0);
	ml_parallel_for(v->n * j.nitems, 1, tf_items, &j);
	ml_free(tmp);
	if (atomic_load(&j.nomem))
		return ml_opfail(c, ML_ENOMEM, "cannot allocate the convolution's copies");
	return 0;
#else
	(void)x, (void)w, (void)bias, (void)e, (void)y, (void)v;
	return ml_opfail(c, ML_ENOTSUP, "the transposed convolution needs AVX-512 or AVX2");
#endif
}
