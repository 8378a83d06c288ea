/*
 * nn_wino.c: f32 3x3 stride-1 convolution by Winograd's F(4x4, 3x3)
 * (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks").
 *
 * Each 4x4 output tile comes from a 6x6 input tile: the input tiles are
 * transformed (V = B^T d B), the filters too (U = G g G^T), and for each
 * of the 36 transformed positions a GEMM multiplies U [M, C] by V [C,
 * tiles]; the output transform (A^T m A) gives the tiles back. That is 36
 * multiplies per 16 outputs and input channel instead of 144, at the
 * price of the transforms. It pays on the wide layers of ResNet-style
 * networks; ml_wino_ok keeps it to shapes where the GEMMs stay large.
 *
 * The work is split into items, each a group of WG consecutive tiles (one
 * panel of nn_gemm.c's packed SGEMM; tiles count on across the images of
 * the batch, so the images share the GEMMs) by a run of filters, and a
 * thread does all of an item in its own cache, with no barrier between
 * the stages: it transforms the group's tiles for every input channel
 * straight into the panels of V (36 of C x WG), runs the 36 GEMMs on its
 * own thread (ml_pgemm_serial) into M (36 of filters x WG), and
 * transforms those into Y, adding the bias and applying a FusedConv's
 * residual and activation to each tile row's outputs while they are in
 * L1. The transforms have AVX-512 and AVX2 forms (8 lanes: the portable
 * loops took 40% of a 28x28 layer's time on an AVX2-only Zen 3) and a
 * portable one. U is made once per session (the node's cache) when it is
 * at most WINO_CACHE_MAX bytes and the weight a constant, else once per
 * call (4 MB: ResNet's 128 -> 128 layers, 2.3 MB each, made U on every
 * run with the 1 MB of before, 0.5 ms of a 1.8 ms layer on one thread).
 * The transforms amplify rounding: the error is about 1e-5 of the
 * output's magnitude, against 1e-6 for im2col (end to end on ResNet-18,
 * 5e-6 on logits of 2). ML_WINOGRAD=0 in the environment turns it off.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <stdatomic.h>

#include "cpu/nn.h"
#include "ops/fused.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define ML_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ML_CLONES
#endif

/*
 * The fewest tiles (GEMM columns, over the batch) and channels for which
 * Winograd beats im2col + SGEMM: a plane of 28x28 (49 tiles) at batch 1,
 * 14x14 (16 tiles) from batch 2, 7x7 (4 tiles) from batch 8.
 */
#define WINO_MIN_TILES 32
#define WINO_MIN_CHANNELS 16
/* Tiles per work item: one panel of the packed SGEMM. */
#define WG ML_PG_NR
/* The largest U (36 M C floats) Winograd takes, and the largest one a node keeps. */
#define WINO_U_MAX ((int64_t)16 << 20)
#define WINO_CACHE_MAX ((int64_t)4 << 20)

/*
 * wino_level: ml_cpu_fma_level("ML_WINOGRAD"), computed once: 0 off (the
 * environment sets ML_WINOGRAD=0, for results that must match a direct
 * convolution to the last few ulps, or the CPU has no FMA), 2 the AVX-512
 * transforms, 1 the AVX2 ones (ML_WINOGRAD=avx2 forces them), 3 the
 * portable ones (ML_WINOGRAD=c).
 */
static int
wino_level(void)
{
	/* -1 until known; racing first callers compute the same value */
	static atomic_int level = -1;
	int v = atomic_load_explicit(&level, memory_order_relaxed);

	if (v < 0) {
		const char *e = getenv("ML_WINOGRAD");
		v = ml_cpu_fma_level("ML_WINOGRAD");
		if (v > 0 && e != NULL && strcmp(e, "c") == 0)
			v = 3;
		atomic_store_explicit(&level, v, memory_order_relaxed);
	}
	return v;
}

bool
ml_wino_ok(const struct ml_conv3 *v)
{
	int64_t tiles = ((v->out[1] + 3) / 4) * ((v->out[2] + 3) / 4);

	/* the batch's images share the GEMMs (their tiles are columns): they count together */
	return wino_level() > 0 && ml_pgemm_ok() && v->group == 1 && v->k[0] == 1 && v->k[1] == 3 &&
	       v->k[2] == 3 && v->in[0] == 1 && v->out[0] == 1 && v->p[0] == 0 && v->s[1] == 1 &&
	       v->s[2] == 1 && v->d[1] == 1 && v->d[2] == 1 && v->cin >= WINO_MIN_CHANNELS &&
	       v->cout >= WINO_MIN_CHANNELS && tiles * v->n >= WINO_MIN_TILES &&
	       36 * v->cin * v->cout * (int64_t)sizeof(float) <= WINO_U_MAX;
}

struct wino {
	const struct ml_conv3 *v;
	int64_t C, M, TH, TW, T;	/* T: tiles of an image */
	int64_t ngroups, nmr, mr;	/* tile groups; runs of filters per group, of mr each */
	int64_t vs, ms;			/* floats from one position to the next in V and M */
	const float *x, *w, *bias;	/* x, y: the first image's */
	const struct ml_conv_epi *e;	/* FusedConv's residual and activation, or NULL */
	float *y, *U;			/* U [36][M][C] */
	int simd;			/* the transforms: 2 AVX-512, 1 AVX2, 0 portable */
	atomic_int nomem;
};

/*
 * A segment: the tiles of one tile row of one image that an item holds,
 * nt of them from column tx0, the item's tiles tl on.
 */
struct seg {
	int64_t img, ty, tx0, nt, tl;
};

/* segs: the segments of tiles [t0, t1) into s (at most WG); their count */
static int
segs(const struct wino *j, int64_t t0, int64_t t1, struct seg *s)
{
	int ns = 0;

	for (int64_t t = t0; t < t1; ns++) {
		int64_t lt = t % j->T, tx = lt % j->TW;
		s[ns] = (struct seg){ t / j->T, lt / j->TW, tx, ML_MIN(t1 - t, j->TW - tx), t - t0 };
		t += s[ns].nt;
	}
	return ns;
}

/*
 * in_seg: the input transform V = B^T d B of segment s for every input
 * channel, into V's panels (position xi's panel at V + xi * vs, channel c's
 * row of it at c * WG, the tile's column at its s->tl on). Per channel the
 * six input rows are combined down the columns, vectorised along the row,
 * then across each tile; rows inside the input are read where they are,
 * the others copied with their padding zeros.
 */
ML_CLONES static void
in_seg(const struct wino *j, const struct seg *s, float *V)
{
	const struct ml_conv3 *v = j->v;
	int64_t H = v->in[1], W = v->in[2], WP = 4 * s->nt + 2, vs = j->vs;
	int64_t col0 = 4 * s->tx0 - v->p[2], row0 = 4 * s->ty - v->p[1];
	int64_t lo = ML_MIN(ML_MAX(-col0, 0), WP), hi = ML_MIN(ML_MAX(W - col0, lo), WP);
	float buf[13 * (4 * WG + 2)];
	float *rows = buf, *t = buf + 6 * WP, *zero = buf + 12 * WP;

	memset(zero, 0, sizeof(float) * (size_t)WP);
	for (int64_t c = 0; c < j->C; c++) {
		const float *xc = j->x + (s->img * j->C + c) * v->insz;
		const float *d[6];
		for (int i = 0; i < 6; i++) {
			int64_t ih = row0 + i;
			if (ih < 0 || ih >= H) {
				d[i] = zero;
			} else if (lo == 0 && hi == WP) {
				d[i] = xc + ih * W + col0;
			} else {
				float *rw = rows + i * WP;
				memset(rw, 0, sizeof(float) * (size_t)lo);
				memcpy(rw + lo, xc + ih * W + col0 + lo, sizeof(float) * (size_t)(hi - lo));
				memset(rw + hi, 0, sizeof(float) * (size_t)(WP - hi));
				d[i] = rw;
			}
		}
		const float *d0 = d[0], *d1 = d[1], *d2 = d[2], *d3 = d[3], *d4 = d[4], *d5 = d[5];
		for (int64_t q = 0; q < WP; q++) {
			t[q] = 4 * d0[q] - 5 * d2[q] + d4[q];
			t[WP + q] = -4 * d1[q] - 4 * d2[q] + d3[q] + d4[q];
			t[2 * WP + q] = 4 * d1[q] - 4 * d2[q] - d3[q] + d4[q];
			t[3 * WP + q] = -2 * d1[q] - d2[q] + 2 * d3[q] + d4[q];
			t[4 * WP + q] = 2 * d1[q] - d2[q] - 2 * d3[q] + d4[q];
			t[5 * WP + q] = 4 * d1[q] - 5 * d3[q] + d5[q];
		}
		for (int r = 0; r < 6; r++) {
			const float *tr = t + r * WP;
			float *o = V + (r * 6) * vs + c * WG + s->tl;
			for (int64_t tx = 0; tx < s->nt; tx++) {
				const float *e = tr + 4 * tx;
				o[tx] = 4 * e[0] - 5 * e[2] + e[4];
				o[vs + tx] = -4 * e[1] - 4 * e[2] + e[3] + e[4];
				o[2 * vs + tx] = 4 * e[1] - 4 * e[2] - e[3] + e[4];
				o[3 * vs + tx] = -2 * e[1] - e[2] + 2 * e[3] + e[4];
				o[4 * vs + tx] = 2 * e[1] - e[2] - 2 * e[3] + e[4];
				o[5 * vs + tx] = 4 * e[1] - 5 * e[3] + e[5];
			}
		}
	}
}

/*
 * out_seg: the output transform Y = A^T m A plus the bias of segment s
 * for filters [m0, m1), from Mo (position xi's rows at Mo + xi * ms, filter
 * m's at (m - m0) * WG): across the tiles first, vectorised along the
 * segment, then down, into four row buffers whose valid part is copied
 * to Y; then the epilogue over those rows of Y, still in L1.
 */
ML_CLONES static void
out_seg(const struct wino *j, const struct seg *s, const float *Mo, int64_t m0, int64_t m1)
{
	const struct ml_conv3 *v = j->v;
	int64_t OH = v->out[1], OW = v->out[2], nt = s->nt, ms = j->ms;
	int64_t oh0 = 4 * s->ty, ow0 = 4 * s->tx0;
	int64_t nr = ML_MIN((int64_t)4, OH - oh0), ncol = ML_MIN(4 * nt, OW - ow0);
	float t[24 * WG], orow[4 * 4 * WG];

	for (int64_t m = m0; m < m1; m++) {
		float b = j->bias != NULL ? j->bias[m] : 0.0f;
		/* t[r][c][tx]: row r of the tile reduced across to output column c */
		for (int r = 0; r < 6; r++) {
			const float *p = Mo + (r * 6) * ms + (m - m0) * WG + s->tl;
			float *t0 = t + (r * 4) * WG, *t1 = t0 + WG, *t2 = t1 + WG, *t3 = t2 + WG;
			for (int64_t tx = 0; tx < nt; tx++) {
				float e0 = p[tx], e1 = p[ms + tx], e2 = p[2 * ms + tx];
				float e3 = p[3 * ms + tx], e4 = p[4 * ms + tx], e5 = p[5 * ms + tx];
				t0[tx] = e0 + e1 + e2 + e3 + e4;
				t1[tx] = e1 - e2 + 2 * (e3 - e4);
				t2[tx] = e1 + e2 + 4 * (e3 + e4);
				t3[tx] = e1 - e2 + 8 * (e3 - e4) + e5;
			}
		}
		for (int c = 0; c < 4; c++) {
			const float *a0 = t + (0 * 4 + c) * WG, *a1 = t + (1 * 4 + c) * WG;
			const float *a2 = t + (2 * 4 + c) * WG, *a3 = t + (3 * 4 + c) * WG;
			const float *a4 = t + (4 * 4 + c) * WG, *a5 = t + (5 * 4 + c) * WG;
			for (int64_t tx = 0; tx < nt; tx++) {
				float e0 = a0[tx], e1 = a1[tx], e2 = a2[tx], e3 = a3[tx];
				float e4 = a4[tx], e5 = a5[tx];
				orow[0 * 4 * WG + 4 * tx + c] = b + e0 + e1 + e2 + e3 + e4;
				orow[1 * 4 * WG + 4 * tx + c] = b + e1 - e2 + 2 * (e3 - e4);
				orow[2 * 4 * WG + 4 * tx + c] = b + e1 + e2 + 4 * (e3 + e4);
				orow[3 * 4 * WG + 4 * tx + c] = b + e1 - e2 + 8 * (e3 - e4) + e5;
			}
		}
		int64_t off = (s->img * j->M + m) * v->outsz + oh0 * OW + ow0;
		for (int64_t q = 0; q < nr; q++)
			memcpy(j->y + off + q * OW, orow + q * 4 * WG, sizeof(float) * (size_t)ncol);
		if (j->e != NULL)
			ml_fused_tile_epi(j->y + off, nr, ncol, OW, NULL,
					  j->e->z != NULL ? j->e->z + off : NULL, j->e->act, j->e->lo,
					  j->e->hi);
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_WINO512 1
#include <immintrin.h>
#define W512 __attribute__((target("avx512f")))
/* the row stride of in_simd's buffer: a row of 4 WG + 2 floats, and over-reads */
#define TS (4 * WG + 32)

/* bt6: B^T e, the input transform of six values (each lane its own) */
W512 static inline void
bt6(const __m512 e[6], __m512 o[6])
{
	__m512 four = _mm512_set1_ps(4), five = _mm512_set1_ps(5), two = _mm512_set1_ps(2);
	__m512 s42 = _mm512_sub_ps(e[4], e[2]);

	o[0] = _mm512_fmadd_ps(four, e[0], _mm512_fnmadd_ps(five, e[2], e[4]));
	o[1] = _mm512_fnmadd_ps(four, _mm512_add_ps(e[1], e[2]), _mm512_add_ps(e[3], e[4]));
	o[2] = _mm512_fmadd_ps(four, _mm512_sub_ps(e[1], e[2]), _mm512_sub_ps(e[4], e[3]));
	o[3] = _mm512_fmadd_ps(two, _mm512_sub_ps(e[3], e[1]), s42);
	o[4] = _mm512_fmadd_ps(two, _mm512_sub_ps(e[1], e[3]), s42);
	o[5] = _mm512_fmadd_ps(four, e[1], _mm512_fnmadd_ps(five, e[3], e[5]));
}

/* at4: A^T e, the output transform of six values (each lane its own) */
W512 static inline void
at4(const __m512 e[6], __m512 o[4])
{
	__m512 p12 = _mm512_add_ps(e[1], e[2]), m12 = _mm512_sub_ps(e[1], e[2]);
	__m512 p34 = _mm512_add_ps(e[3], e[4]), m34 = _mm512_sub_ps(e[3], e[4]);

	o[0] = _mm512_add_ps(_mm512_add_ps(e[0], p12), p34);
	o[1] = _mm512_fmadd_ps(_mm512_set1_ps(2), m34, m12);
	o[2] = _mm512_fmadd_ps(_mm512_set1_ps(4), p34, p12);
	o[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8), m34, m12), e[5]);
}

/* lanes: the mask of the first n (<= 16 or more) lanes */
static inline __mmask16
lanes(int64_t n)
{
	return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* deint: a[4 l + k] for l < 16, from the 64 floats at a (a k-phase of 16 tiles) */
W512 static inline __m512
deint(const __m512 a[4], __m512i idx)
{
	return _mm512_shuffle_f32x4(_mm512_permutex2var_ps(a[0], idx, a[1]),
				    _mm512_permutex2var_ps(a[2], idx, a[3]), 0x44);
}

/*
 * in_chan512: in_chan_fn with AVX-512: the rows 16 columns at a time,
 * then the tiles 16 at a time (their six columns are phases of the row)
 */
W512 static void
in_chan512(const float *const xr[6], int64_t lo, int64_t hi, int64_t WP, int64_t nt, float *t,
	   float *o, int64_t vs)
{
	__m512i idx[2];

	for (int k = 0; k < 2; k++)
		idx[k] = _mm512_set_epi32(28 + k, 24 + k, 20 + k, 16 + k, 12 + k, 8 + k, 4 + k, k,
					  28 + k, 24 + k, 20 + k, 16 + k, 12 + k, 8 + k, 4 + k, k);
	__m512i idx2 = _mm512_add_epi32(idx[0], _mm512_set1_epi32(2));
	__m512i idx3 = _mm512_add_epi32(idx[0], _mm512_set1_epi32(3));
	/* down the columns: t[r][q], q < WP (the rest of the last 16 zeros) */
	for (int64_t q = 0; q < WP; q += 16) {
		__mmask16 m = lanes(hi - q) & (__mmask16)~lanes(lo - q);
		__m512 e[6], u[6];
		for (int i = 0; i < 6; i++)
			e[i] = xr[i] == NULL ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, xr[i] + q);
		bt6(e, u);
		for (int r = 0; r < 6; r++)
			_mm512_store_ps(t + r * TS + q, u[r]);
	}
	/* across each tile */
	for (int r = 0; r < 6; r++) {
		const float *tr = t + r * TS;
		float *orow = o + (r * 6) * vs;
		for (int64_t h = 0; h < nt; h += 16) {
			__m512 a[4], b[4], e[6], u[6];
			for (int k = 0; k < 4; k++) {
				a[k] = _mm512_loadu_ps(tr + 4 * h + 16 * k);
				b[k] = _mm512_loadu_ps(tr + 4 * h + 4 + 16 * k);
			}
			e[0] = deint(a, idx[0]);
			e[1] = deint(a, idx[1]);
			e[2] = deint(a, idx2);
			e[3] = deint(a, idx3);
			e[4] = deint(b, idx[0]);
			e[5] = deint(b, idx[1]);
			bt6(e, u);
			__mmask16 m = lanes(nt - h);
			for (int k = 0; k < 6; k++)
				_mm512_mask_storeu_ps(orow + k * vs + h, m, u[k]);
		}
	}
}

/* g6: G g, the filter transform of three values (each lane its own) */
W512 static inline void
g6(__m512 g0, __m512 g1, __m512 g2, __m512 o[6])
{
	__m512 s02 = _mm512_add_ps(g0, g2);
	__m512 a = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 24), g0,
				   _mm512_mul_ps(_mm512_set1_ps(1.0f / 6), g2));
	__m512 b = _mm512_mul_ps(_mm512_set1_ps(1.0f / 12), g1);

	o[0] = _mm512_mul_ps(_mm512_set1_ps(0.25f), g0);
	o[1] = _mm512_mul_ps(_mm512_set1_ps(-1.0f / 6), _mm512_add_ps(s02, g1));
	o[2] = _mm512_mul_ps(_mm512_set1_ps(-1.0f / 6), _mm512_sub_ps(s02, g1));
	o[3] = _mm512_add_ps(a, b);
	o[4] = _mm512_sub_ps(a, b);
	o[5] = g2;
}

/* filters512: wino_filters with AVX-512, 16 input channels of a filter at a time */
W512 static void
filters512(const struct wino *j, int64_t m0, int64_t m1)
{
	int64_t C = j->C, MC = j->M * j->C;
	__m512i i9 = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
							 1, 0), _mm512_set1_epi32(9));

	for (int64_t m = m0; m < m1; m++)
		for (int64_t c = 0; c < C; c += 16) {
			__mmask16 k = lanes(C - c);
			const float *g = j->w + (m * C + c) * 9;
			__m512 gv[9], t[6][3];
			for (int q = 0; q < 9; q++)
				gv[q] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, i9, g + q, 4);
			for (int q = 0; q < 3; q++) {
				__m512 o[6];
				g6(gv[q], gv[3 + q], gv[6 + q], o);
				for (int r = 0; r < 6; r++)
					t[r][q] = o[r];
			}
			float *u = j->U + m * C + c;
			for (int r = 0; r < 6; r++) {
				__m512 o[6];
				g6(t[r][0], t[r][1], t[r][2], o);
				for (int q = 0; q < 6; q++)
					_mm512_mask_storeu_ps(u + (r * 6 + q) * MC, k, o[q]);
			}
		}
}

/*
 * il4: out[0..3] = the 64 floats c[0][l], c[1][l], c[2][l], c[3][l] for
 * l < 16 (four columns of 16 tiles interleaved into rows).
 */
W512 static inline void
il4(const __m512 c[4], __m512 out[4])
{
	__m512 lo01 = _mm512_unpacklo_ps(c[0], c[1]), hi01 = _mm512_unpackhi_ps(c[0], c[1]);
	__m512 lo23 = _mm512_unpacklo_ps(c[2], c[3]), hi23 = _mm512_unpackhi_ps(c[2], c[3]);
	/* q[i]: tiles i, i + 4, i + 8, i + 12, one per 128-bit lane */
	__m512 q0 = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(lo01), _mm512_castps_pd(lo23)));
	__m512 q1 = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(lo01), _mm512_castps_pd(lo23)));
	__m512 q2 = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(hi01), _mm512_castps_pd(hi23)));
	__m512 q3 = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(hi01), _mm512_castps_pd(hi23)));
	__m512 t0 = _mm512_shuffle_f32x4(q0, q1, 0x44), t1 = _mm512_shuffle_f32x4(q2, q3, 0x44);
	__m512 t2 = _mm512_shuffle_f32x4(q0, q1, 0xee), t3 = _mm512_shuffle_f32x4(q2, q3, 0xee);

	out[0] = _mm512_shuffle_f32x4(t0, t1, 0x88);
	out[1] = _mm512_shuffle_f32x4(t0, t1, 0xdd);
	out[2] = _mm512_shuffle_f32x4(t2, t3, 0x88);
	out[3] = _mm512_shuffle_f32x4(t2, t3, 0xdd);
}

/* out_tiles512: out_tiles_fn with AVX-512, 16 tiles */
W512 static void
out_tiles512(const float *p, int64_t ms, float b, float *yo, int64_t OW, int64_t nr, int64_t left)
{
	__m512 bv = _mm512_set1_ps(b);
	/* across: tr[r][c], row r of the tiles reduced to output column c */
	__m512 tr[6][4];
	for (int r = 0; r < 6; r++) {
		__m512 e[6];
		for (int k = 0; k < 6; k++)
			e[k] = _mm512_loadu_ps(p + (r * 6 + k) * ms);
		at4(e, tr[r]);
	}
	/* down: output row q, column c; then rows of 64 floats in Y */
	__m512 col[4][4];
	for (int c = 0; c < 4; c++) {
		__m512 e[6] = { tr[0][c], tr[1][c], tr[2][c], tr[3][c], tr[4][c], tr[5][c] };
		__m512 o[4];
		at4(e, o);
		for (int q = 0; q < 4; q++)
			col[q][c] = _mm512_add_ps(o[q], bv);
	}
	for (int64_t q = 0; q < nr; q++) {
		__m512 out[4];
		il4(col[q], out);
		for (int k = 0; k < 4; k++)
			_mm512_mask_storeu_ps(yo + q * OW + 16 * k, lanes(left - 16 * k), out[k]);
	}
}

/*
 * The AVX2 transforms: in_chan512 and out_tiles512 on 8 lanes, for CPUs
 * without AVX-512 (the portable loops took 40% of a 28x28 layer's time on
 * AMD EPYC Zen 3, as much as half its GEMMs).
 */
#define W2 __attribute__((target("avx2,fma")))

/* bt6_2, at4_2: bt6 and at4 on ymm */
W2 static inline void
bt6_2(const __m256 e[6], __m256 o[6])
{
	__m256 four = _mm256_set1_ps(4), five = _mm256_set1_ps(5), two = _mm256_set1_ps(2);
	__m256 s42 = _mm256_sub_ps(e[4], e[2]);

	o[0] = _mm256_fmadd_ps(four, e[0], _mm256_fnmadd_ps(five, e[2], e[4]));
	o[1] = _mm256_fnmadd_ps(four, _mm256_add_ps(e[1], e[2]), _mm256_add_ps(e[3], e[4]));
	o[2] = _mm256_fmadd_ps(four, _mm256_sub_ps(e[1], e[2]), _mm256_sub_ps(e[4], e[3]));
	o[3] = _mm256_fmadd_ps(two, _mm256_sub_ps(e[3], e[1]), s42);
	o[4] = _mm256_fmadd_ps(two, _mm256_sub_ps(e[1], e[3]), s42);
	o[5] = _mm256_fmadd_ps(four, e[1], _mm256_fnmadd_ps(five, e[3], e[5]));
}

W2 static inline void
at4_2(const __m256 e[6], __m256 o[4])
{
	__m256 p12 = _mm256_add_ps(e[1], e[2]), m12 = _mm256_sub_ps(e[1], e[2]);
	__m256 p34 = _mm256_add_ps(e[3], e[4]), m34 = _mm256_sub_ps(e[3], e[4]);

	o[0] = _mm256_add_ps(_mm256_add_ps(e[0], p12), p34);
	o[1] = _mm256_fmadd_ps(_mm256_set1_ps(2), m34, m12);
	o[2] = _mm256_fmadd_ps(_mm256_set1_ps(4), p34, p12);
	o[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8), m34, m12), e[5]);
}

/* lanes2: the maskload/maskstore mask of lanes i with lo <= i < hi */
W2 static inline __m256i
lanes2(int64_t lo, int64_t hi)
{
	__m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	__m256i l = _mm256_set1_epi32((int)ML_MAX(ML_MIN(lo, 8), -1) - 1);
	__m256i h = _mm256_set1_epi32((int)ML_MAX(ML_MIN(hi, 8), -1));

	return _mm256_and_si256(_mm256_cmpgt_epi32(i, l), _mm256_cmpgt_epi32(h, i));
}

/*
 * tr4: the 4 x 4 transposes inside each 128-bit lane of a[0..3]: o[k]'s
 * lane h holds element k of a[0..3]'s lane h, in that order.
 */
W2 static inline void
tr4(const __m256 a[4], __m256 o[4])
{
	__m256 t0 = _mm256_unpacklo_ps(a[0], a[1]), t1 = _mm256_unpackhi_ps(a[0], a[1]);
	__m256 t2 = _mm256_unpacklo_ps(a[2], a[3]), t3 = _mm256_unpackhi_ps(a[2], a[3]);

	o[0] = _mm256_shuffle_ps(t0, t2, 0x44);
	o[1] = _mm256_shuffle_ps(t0, t2, 0xee);
	o[2] = _mm256_shuffle_ps(t1, t3, 0x44);
	o[3] = _mm256_shuffle_ps(t1, t3, 0xee);
}

/*
 * in_chan2: in_chan_fn with AVX2: the rows 8 columns at a time, then the
 * tiles 8 at a time (tile l's six columns start at 4 l; tiles l and l + 4
 * in the two lanes of a ymm make the in-lane transposes give them in order)
 */
W2 static void
in_chan2(const float *const xr[6], int64_t lo, int64_t hi, int64_t WP, int64_t nt, float *t,
	 float *o, int64_t vs)
{
	/* down the columns: t[r][q], q < WP (the rest of the last 8 zeros) */
	for (int64_t q = 0; q < WP; q += 8) {
		bool whole = q >= lo && q + 8 <= hi;
		__m256i m = lanes2(lo - q, hi - q);
		__m256 e[6], u[6];
		for (int i = 0; i < 6; i++)
			e[i] = xr[i] == NULL ? _mm256_setzero_ps() :
			       whole	     ? _mm256_loadu_ps(xr[i] + q) :
					       _mm256_maskload_ps(xr[i] + q, m);
		bt6_2(e, u);
		for (int r = 0; r < 6; r++)
			_mm256_store_ps(t + r * TS + q, u[r]);
	}
	/* across each tile */
	for (int r = 0; r < 6; r++) {
		const float *tr = t + r * TS;
		float *orow = o + (r * 6) * vs;
		for (int64_t h = 0; h < nt; h += 8) {
			const float *p = tr + 4 * h;
			__m256 a[4], b[4], e[6], u[6], x[4];
			for (int k = 0; k < 4; k++) {
				a[k] = _mm256_loadu2_m128(p + 4 * k + 16, p + 4 * k);
				b[k] = _mm256_loadu2_m128(p + 4 * k + 20, p + 4 * k + 4);
			}
			tr4(a, e);
			tr4(b, x);
			e[4] = x[0];
			e[5] = x[1];
			bt6_2(e, u);
			if (nt - h >= 8) {
				for (int k = 0; k < 6; k++)
					_mm256_storeu_ps(orow + k * vs + h, u[k]);
			} else {
				__m256i m = lanes2(0, nt - h);
				for (int k = 0; k < 6; k++)
					_mm256_maskstore_ps(orow + k * vs + h, m, u[k]);
			}
		}
	}
}

/* out_tiles2: out_tiles_fn with AVX2, 8 tiles */
W2 static void
out_tiles2(const float *p, int64_t ms, float b, float *yo, int64_t OW, int64_t nr, int64_t left)
{
	__m256 bv = _mm256_set1_ps(b);
	/* across: tr[r][c], row r of the tiles reduced to output column c */
	__m256 tr[6][4];
	for (int r = 0; r < 6; r++) {
		__m256 e[6];
		for (int k = 0; k < 6; k++)
			e[k] = _mm256_loadu_ps(p + (r * 6 + k) * ms);
		at4_2(e, tr[r]);
	}
	/* down: output row q, column c of the 8 tiles */
	__m256 col[4][4];
	for (int c = 0; c < 4; c++) {
		__m256 e[6] = { tr[0][c], tr[1][c], tr[2][c], tr[3][c], tr[4][c], tr[5][c] };
		__m256 o[4];
		at4_2(e, o);
		for (int q = 0; q < 4; q++)
			col[q][c] = _mm256_add_ps(o[q], bv);
	}
	/* a row's 32 floats: the in-lane transposes give tiles l and l + 4 a ymm */
	for (int64_t q = 0; q < nr; q++) {
		__m256 x[4], out[4];
		tr4(col[q], x);
		out[0] = _mm256_permute2f128_ps(x[0], x[1], 0x20);
		out[1] = _mm256_permute2f128_ps(x[2], x[3], 0x20);
		out[2] = _mm256_permute2f128_ps(x[0], x[1], 0x31);
		out[3] = _mm256_permute2f128_ps(x[2], x[3], 0x31);
		float *yr = yo + q * OW;
		for (int k = 0; k < 4 && 8 * k < left; k++) {
			if (left - 8 * k >= 8)
				_mm256_storeu_ps(yr + 8 * k, out[k]);
			else
				_mm256_maskstore_ps(yr + 8 * k, lanes2(0, left - 8 * k), out[k]);
		}
	}
}

/*
 * in_simd: in_seg's loop over the channels, each channel's six input rows
 * (xr[i] + q is column q of row i, read in [lo, hi); NULL: a padding row)
 * transformed by fn down the columns into t (6 rows of TS floats) and
 * across the tiles into V's panels (o: row 0 of the channel's at the
 * segment's first tile, the others vs apart)
 */
typedef void (*in_chan_fn)(const float *const xr[6], int64_t lo, int64_t hi, int64_t WP,
			   int64_t nt, float *t, float *o, int64_t vs);

static void
in_simd(const struct wino *j, const struct seg *s, float *V, in_chan_fn fn)
{
	const struct ml_conv3 *v = j->v;
	int64_t H = v->in[1], W = v->in[2], WP = 4 * s->nt + 2;
	int64_t col0 = 4 * s->tx0 - v->p[2], row0 = 4 * s->ty - v->p[1];
	int64_t lo = ML_MIN(ML_MAX(-col0, 0), WP), hi = ML_MIN(ML_MAX(W - col0, lo), WP);
	float t[6 * TS] __attribute__((aligned(64)));

	memset(t, 0, sizeof t);
	for (int64_t c = 0; c < j->C; c++) {
		const float *xc = j->x + (s->img * j->C + c) * v->insz, *xr[6];
		for (int i = 0; i < 6; i++) {
			int64_t ih = row0 + i;
			xr[i] = ih < 0 || ih >= H ? NULL : xc + ih * W + col0;
		}
		fn(xr, lo, hi, WP, s->nt, t, V + c * WG + s->tl, j->vs);
	}
}

/*
 * out_simd: out_seg's loop over the filters, each filter's tiles L at a
 * time through fn (p: the run's first value at position 0 of Mo, the
 * others ms apart; bias b; yo: the run's first output in Y, rows OW
 * apart, nr of them; left: the row's columns from there), then the
 * epilogue over the filter's rows of Y, still in L1
 */
typedef void (*out_tiles_fn)(const float *p, int64_t ms, float b, float *yo, int64_t OW,
			     int64_t nr, int64_t left);

static void
out_simd(const struct wino *j, const struct seg *s, const float *Mo, int64_t m0, int64_t m1,
	 int64_t L, out_tiles_fn fn)
{
	const struct ml_conv3 *v = j->v;
	int64_t OH = v->out[1], OW = v->out[2], nt = s->nt;
	int64_t oh0 = 4 * s->ty, ow0 = 4 * s->tx0;
	int64_t nr = ML_MIN((int64_t)4, OH - oh0), ncol = ML_MIN(4 * nt, OW - ow0);

	for (int64_t m = m0; m < m1; m++) {
		float b = j->bias != NULL ? j->bias[m] : 0.0f;
		int64_t off = (s->img * j->M + m) * v->outsz + oh0 * OW + ow0;
		for (int64_t h = 0; h < nt; h += L)
			fn(Mo + (m - m0) * WG + s->tl + h, j->ms, b, j->y + off + 4 * h, OW, nr,
			   ncol - 4 * h);
		if (j->e != NULL)
			ml_fused_tile_epi(j->y + off, nr, ncol, OW, NULL,
					  j->e->z != NULL ? j->e->z + off : NULL, j->e->act, j->e->lo,
					  j->e->hi);
	}
}
#endif

/*
 * The filter transform U = G g G^T, for filters [m0, m1). The 36 values
 * of a filter go to 36 rows of U that lie M * C apart, often a power of
 * two that would map every store to the same cache set, so a block of
 * channels is transformed into a local buffer first and each row written
 * in one contiguous run.
 */
#define WINO_CB 64

ML_CLONES static void
wino_filters(void *ctx, int64_t m0, int64_t m1)
{
	struct wino *j = ctx;
	int64_t C = j->C, MC = j->M * j->C;
	float ub[36][WINO_CB];

#ifdef HAVE_WINO512
	if (j->simd == 2) {
		filters512(j, m0, m1);
		return;
	}
#endif
	for (int64_t m = m0; m < m1; m++)
		for (int64_t cb = 0; cb < C; cb += WINO_CB) {
			int64_t nc = ML_MIN(WINO_CB, C - cb);
			for (int64_t ci = 0; ci < nc; ci++) {
				const float *g = j->w + (m * C + cb + ci) * 9;
				float t[6][3];
				for (int k = 0; k < 3; k++) {
					float g0 = g[k], g1 = g[3 + k], g2 = g[6 + k];
					t[0][k] = g0 * 0.25f;
					t[1][k] = (g0 + g1 + g2) * (-1.0f / 6);
					t[2][k] = (g0 - g1 + g2) * (-1.0f / 6);
					t[3][k] = g0 * (1.0f / 24) + g1 * (1.0f / 12) + g2 * (1.0f / 6);
					t[4][k] = g0 * (1.0f / 24) - g1 * (1.0f / 12) + g2 * (1.0f / 6);
					t[5][k] = g2;
				}
				for (int r = 0; r < 6; r++) {
					float g0 = t[r][0], g1 = t[r][1], g2 = t[r][2];
					ub[r * 6 + 0][ci] = g0 * 0.25f;
					ub[r * 6 + 1][ci] = (g0 + g1 + g2) * (-1.0f / 6);
					ub[r * 6 + 2][ci] = (g0 - g1 + g2) * (-1.0f / 6);
					ub[r * 6 + 3][ci] = g0 * (1.0f / 24) + g1 * (1.0f / 12) + g2 * (1.0f / 6);
					ub[r * 6 + 4][ci] = g0 * (1.0f / 24) - g1 * (1.0f / 12) + g2 * (1.0f / 6);
					ub[r * 6 + 5][ci] = g2;
				}
			}
			for (int xi = 0; xi < 36; xi++)
				memcpy(j->U + xi * MC + m * C + cb, ub[xi], sizeof(float) * (size_t)nc);
		}
}

/* wino_in, wino_out: in_seg and out_seg, with AVX-512 or AVX2 as j->simd says */
static void
wino_in(const struct wino *j, const struct seg *s, float *V)
{
#ifdef HAVE_WINO512
	if (j->simd > 0) {
		in_simd(j, s, V, j->simd == 2 ? in_chan512 : in_chan2);
		return;
	}
#endif
	in_seg(j, s, V);
}

static void
wino_out(const struct wino *j, const struct seg *s, const float *Mo, int64_t m0, int64_t m1)
{
#ifdef HAVE_WINO512
	if (j->simd > 0) {
		out_simd(j, s, Mo, m0, m1, j->simd == 2 ? 16 : 8,
			 j->simd == 2 ? out_tiles512 : out_tiles2);
		return;
	}
#endif
	out_seg(j, s, Mo, m0, m1);
}

/*
 * wino_items: items [b, e): filter run it / ngroups, tile group it %
 * ngroups, so that the pool's contiguous runs of items (one a thread) are
 * alike when the last group is short (ResNet's 28x28: 32 tiles and 17). A
 * thread's V, M (scratch slots 0 and 1, the thread's own) and the tile
 * group it transformed last, which a following item with the same tiles
 * reuses.
 */
static void
wino_items(void *ctx, int64_t b, int64_t e)
{
	struct wino *j = ctx;
	float *V = ml_cpu_scratch(0, sizeof(float) * (size_t)(36 * j->vs));
	float *Mo = ml_cpu_scratch(1, sizeof(float) * (size_t)(36 * j->ms));
	int64_t have = -1;
	struct seg s[WG];
	int ns = 0;

	if (V == NULL || Mo == NULL) {
		atomic_store(&j->nomem, 1);
		return;
	}
	for (int64_t it = b; it < e; it++) {
		int64_t g = it % j->ngroups, r = it / j->ngroups;
		int64_t t0 = g * WG, t1 = ML_MIN(j->v->n * j->T, t0 + WG);
		int64_t m0 = r * j->mr, m1 = ML_MIN(j->M, m0 + j->mr);
		if (m0 >= m1)
			continue;
		if (g != have) {
			ns = segs(j, t0, t1, s);
			for (int i = 0; i < ns; i++)
				wino_in(j, &s[i], V);
			have = g;
		}
		for (int xi = 0; xi < 36; xi++)
			ml_pgemm_serial(m1 - m0, t1 - t0, j->C, j->U + (xi * j->M + m0) * j->C, j->C,
					V + xi * j->vs, NULL, Mo + xi * j->ms, WG, false);
		for (int i = 0; i < ns; i++)
			wino_out(j, &s[i], Mo, m0, m1);
	}
}

int
ml_wino_conv(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
	     const float *bias, const struct ml_conv_epi *e, float *y)
{
	struct wino j = { .v = v, .C = v->cin, .M = v->cout, .x = x, .w = w, .bias = bias, .e = e,
			  .y = y };
	int64_t ubytes = 36 * j.M * j.C * (int64_t)sizeof(float), nt = ml_get_threads();
	bool fill = true;
	void *tmp = NULL;

	atomic_init(&j.nomem, 0);
	j.simd = wino_level() == 3 ? 0 : wino_level();
	j.TH = (v->out[1] + 3) / 4;
	j.TW = (v->out[2] + 3) / 4;
	j.T = j.TH * j.TW;
	j.ngroups = (v->n * j.T + WG - 1) / WG;
	/* runs of filters where the tile groups alone leave threads idle: two items a thread */
	j.nmr = j.ngroups >= 2 * nt ? 1 : ML_MIN((2 * nt + j.ngroups - 1) / j.ngroups,
						   ML_MAX(1, j.M / 24));
	j.mr = ((j.M + j.nmr - 1) / j.nmr + 11) / 12 * 12;
	j.nmr = (j.M + j.mr - 1) / j.mr;
	/* a position's block padded off a multiple of 4 KB, so the 36 do not share cache sets */
	j.vs = j.C * WG + 16;
	j.ms = j.mr * WG + 16;
	if (ml_cpu_wconst(c) && ubytes <= WINO_CACHE_MAX)
		j.U = ml_cpu_wcache(c, ML_WC_WINO, (size_t)ubytes, &fill, &tmp);
	else
		j.U = ml_cpu_scratch(2, (size_t)ubytes);
	if (j.U == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate Winograd buffers");
	if (fill)
		ml_parallel_for(j.M, ML_MAX(1, 4096 / (j.C * 8)), wino_filters, &j);
	ml_parallel_for(j.ngroups * j.nmr, 1, wino_items, &j);
	ml_free(tmp);
	if (atomic_load(&j.nomem))
		return ml_opfail(c, ML_ENOMEM, "cannot allocate Winograd buffers");
	return 0;
}
