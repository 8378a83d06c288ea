/*
 * nn_pool.c: CPU kernels of MaxPool (with its Indices output),
 * AveragePool, LpPool and the global pools, over the 3-D view of
 * struct ml_conv3. Work splits over the [n, c] planes with
 * ml_parallel_for. MaxPool runs f32, f64, int8 and uint8; the others f32
 * and f64 (with f64 sums); f16 and bf16 run as f32. 2-D f32 MaxPool has
 * AVX-512 and AVX2 kernels (strides 1 and 2 across), chosen at run time;
 * ML_MAXPOOL=avx2 forces the AVX2 one, ML_MAXPOOL=c the plain C one.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <stdatomic.h>

#include "cpu/elem.h"
#include "cpu/nn.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define POOL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define POOL_CLONES
#endif

/* Elements per ml_parallel_for chunk of pooling work. */
#define POOL_GRAIN 32768

/*
 * struct win: for each output index along one dim, the first input index
 * of its window and the range [lo, hi) of kernel taps that land inside the
 * input, so the window loops need no bounds checks; cpad counts the taps
 * inside the padded input (AveragePool's count_include_pad divisor).
 */
struct win {
	int64_t start, lo, hi, cpad;
};

struct pool_job {
	const struct ml_conv3 *v;
	const void *x;
	void *y;
	int64_t *idx;		/* MaxPool's Indices, or NULL */
	bool colmajor;		/* storage_order=1 */
	double p;		/* LpPool */
	int kind;		/* AVG or LP */
	const struct win *w[3];	/* per dim, one entry per output index */
};

enum { POOL_AVG, POOL_LP };

/* make_wins: the struct win tables of v's three dims, in one allocation (free *w[0]). */
static int
make_wins(struct ml_opctx *c, const struct ml_conv3 *v, const struct win **w)
{
	struct win *t = ml_malloc(sizeof *t * (size_t)(v->out[0] + v->out[1] + v->out[2] + 1));

	if (t == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	for (int a = 0; a < 3; a++) {
		w[a] = t;
		for (int64_t o = 0; o < v->out[a]; o++, t++) {
			int64_t st = o * v->s[a] - v->p[a], lo, hi;
			/* taps k with 0 <= st + k * d < in */
			ml_valid_range(st, v->d[a], v->in[a], v->k[a], &lo, &hi);
			t->start = st;
			t->lo = lo;
			t->hi = hi;
			t->cpad = 0;
			for (int64_t k = 0; k < v->k[a]; k++) {
				int64_t q = st + k * v->d[a];
				if (q >= -v->p[a] && q < v->in[a] + v->pe[a])
					t->cpad++;
			}
		}
	}
	return 0;
}

static int64_t
plane_grain(const struct ml_conv3 *v)
{
	int64_t work = ML_MAX(v->outsz * v->ksz, 1);
	return ML_MAX(1, POOL_GRAIN / work);
}

/*
 * Max over each window; padding never wins. The index is that of the
 * flattened input, row-major, or column-major over the spatial dims
 * with storage_order=1; either way the first of equal maxima is kept.
 * A window wholly in the padding gives the type's lowest value.
 */
#define MAXPOOL(SUF, T, LOWEST)							\
static void									\
maxpool_##SUF(void *ctx, int64_t b, int64_t e)					\
{										\
	const struct pool_job *j = ctx;						\
	const struct ml_conv3 *v = j->v;					\
	int64_t D = v->in[0], H = v->in[1], W = v->in[2];			\
	int64_t dd = v->d[0], dh = v->d[1], dw = v->d[2];			\
	for (int64_t pl = b; pl < e; pl++) {					\
		const T *x = (const T *)j->x + pl * v->insz;			\
		T *y = (T *)j->y + pl * v->outsz;				\
		int64_t *ix = j->idx != NULL ? j->idx + pl * v->outsz : NULL;	\
		int64_t o = 0;							\
		for (int64_t od = 0; od < v->out[0]; od++) {			\
		const struct win *wd = &j->w[0][od];				\
		for (int64_t oh = 0; oh < v->out[1]; oh++) {			\
		const struct win *wh = &j->w[1][oh];				\
		for (int64_t ow = 0; ow < v->out[2]; ow++, o++) {		\
			const struct win *ww = &j->w[2][ow];			\
			T best = LOWEST;					\
			int64_t bi = -1;					\
			for (int64_t kd = wd->lo; kd < wd->hi; kd++) {		\
				int64_t id = wd->start + kd * dd;		\
				for (int64_t kh = wh->lo; kh < wh->hi; kh++) {	\
					int64_t ih = wh->start + kh * dh;	\
					const T *row = x + (id * H + ih) * W + ww->start; \
					if (ix == NULL) {			\
						for (int64_t kw = ww->lo; kw < ww->hi; kw++) \
							best = row[kw * dw] > best ? row[kw * dw] : best; \
						continue;			\
					}					\
					for (int64_t kw = ww->lo; kw < ww->hi; kw++) { \
						if (bi < 0 || row[kw * dw] > best) { \
							int64_t iw = ww->start + kw * dw; \
							best = row[kw * dw];	\
							bi = j->colmajor ? id + ih * D + iw * D * H : \
							     (id * H + ih) * W + iw; \
						}				\
					}					\
				}						\
			}							\
			y[o] = best;						\
			if (ix != NULL)						\
				ix[o] = pl * v->insz + ML_MAX(bi, 0);		\
		}								\
		}								\
		}								\
	}									\
}
MAXPOOL(f32, float, -INFINITY)
MAXPOOL(f64, double, -INFINITY)
MAXPOOL(i8, int8_t, INT8_MIN)
MAXPOOL(u8, uint8_t, 0)

/*
 * row_interior: [*olo, *ohi), the outputs of a row whose whole window lies
 * inside the input row (empty: both OW).
 */
static void
row_interior(const struct pool_job *j, int64_t *olo, int64_t *ohi)
{
	int64_t OW = j->v->out[2], KW = j->v->k[2];

	*olo = *ohi = OW;
	for (int64_t ow = 0; ow < OW; ow++)
		if (j->w[2][ow].lo == 0 && j->w[2][ow].hi == KW) {
			if (*olo == OW)
				*olo = ow;
			*ohi = ow + 1;
		} else if (*olo < OW) {
			break;
		}
}

/*
 * row_edges: the outputs of a row outside [olo, ohi) into dst, each the max
 * over its window's taps inside the row r (taps dw apart); NaN never wins.
 */
static void
row_edges(const struct pool_job *j, const float *r, int64_t dw, float *dst, int64_t olo,
	  int64_t ohi)
{
	for (int64_t ow = 0; ow < j->v->out[2]; ow++) {
		if (ow == olo && ohi > olo) {
			ow = ohi - 1;
			continue;
		}
		const struct win *ww = &j->w[2][ow];
		const float *p = r + ww->start;
		float m = -INFINITY;
		for (int64_t kw = ww->lo; kw < ww->hi; kw++)
			m = p[kw * dw] > m ? p[kw * dw] : m;
		dst[ow] = m;
	}
}

/*
 * 2-D f32 MaxPool without Indices, separably: the max across each
 * window's columns for every input row first (tap by tap over the outputs
 * whose window lies inside the row, a strided loop that vectorises; the
 * few at the edges window by window), then down each window's rows, which
 * is contiguous along the output row and vectorises. A chunk of planes
 * shares one [in rows, out cols] buffer.
 */
POOL_CLONES static void
maxpool2d_f32(void *ctx, int64_t b, int64_t e)
{
	const struct pool_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t H = v->in[1], W = v->in[2], OH = v->out[1], OW = v->out[2];
	int64_t dh = v->d[1], dw = v->d[2];
	int64_t KW = v->k[2], sw = v->s[2], olo, ohi;
	float *hm = ml_malloc(sizeof(float) * (size_t)ML_MAX(H * OW, 1));

	/* [olo, ohi): the outputs whose whole window lies inside the row */
	row_interior(j, &olo, &ohi);

	if (hm == NULL) {
		/* no memory for the fast way: the general loop needs none */
		maxpool_f32(ctx, b, e);
		return;
	}
	for (int64_t pl = b; pl < e; pl++) {
		const float *x = (const float *)j->x + pl * v->insz;
		float *y = (float *)j->y + pl * v->outsz;
		for (int64_t ih = 0; ih < H; ih++) {
			const float *xr = x + ih * W;
			float *hr = hm + ih * OW;
			/* the windows inside the row: tap by tap across the outputs, which vectorises */
			for (int64_t ow = olo; ow < ohi; ow++)
				hr[ow] = -INFINITY;
			for (int64_t kw = 0; kw < KW; kw++) {
				const float *p = xr + kw * dw - v->p[2];
				if (sw == 1) {
					for (int64_t ow = olo; ow < ohi; ow++)
						hr[ow] = p[ow] > hr[ow] ? p[ow] : hr[ow];
				} else if (sw == 2) {
					for (int64_t ow = olo; ow < ohi; ow++)
						hr[ow] = p[2 * ow] > hr[ow] ? p[2 * ow] : hr[ow];
				} else {
					for (int64_t ow = olo; ow < ohi; ow++)
						hr[ow] = p[ow * sw] > hr[ow] ? p[ow * sw] : hr[ow];
				}
			}
			row_edges(j, xr, dw, hr, olo, ohi);
		}
		for (int64_t oh = 0; oh < OH; oh++) {
			const struct win *wh = &j->w[1][oh];
			float *yr = y + oh * OW;
			for (int64_t ow = 0; ow < OW; ow++)
				yr[ow] = -INFINITY;
			for (int64_t kh = wh->lo; kh < wh->hi; kh++) {
				const float *hr = hm + (wh->start + kh * dh) * OW;
				for (int64_t ow = 0; ow < OW; ow++)
					yr[ow] = hr[ow] > yr[ow] ? hr[ow] : yr[ow];
			}
		}
	}
	ml_free(hm);
}

/*
 * 2 x 2 windows at stride 2, no padding, none past the input's edge (the
 * LeNet and VGG pools): two input rows per output row, no window tables
 * and no buffer. The comparisons are maxpool2d_f32's, in its order (each
 * row's pair, then the two rows), so the results are the same bits,
 * NaN and signed zeros included.
 */
POOL_CLONES static void
maxpool2x2_f32(void *ctx, int64_t b, int64_t e)
{
	const struct pool_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t W = v->in[2], OH = v->out[1], OW = v->out[2];

	for (int64_t pl = b; pl < e; pl++) {
		const float *x = (const float *)j->x + pl * v->insz;
		float *y = (float *)j->y + pl * v->outsz;
		for (int64_t oh = 0; oh < OH; oh++) {
			const float *restrict r0 = x + 2 * oh * W, *restrict r1 = r0 + W;
			float *restrict yr = y + oh * OW;
			for (int64_t ow = 0; ow < OW; ow++) {
				float a = -INFINITY, c = -INFINITY, m = -INFINITY;
				a = r0[2 * ow] > a ? r0[2 * ow] : a;
				a = r0[2 * ow + 1] > a ? r0[2 * ow + 1] : a;
				c = r1[2 * ow] > c ? r1[2 * ow] : c;
				c = r1[2 * ow + 1] > c ? r1[2 * ow + 1] : c;
				m = a > m ? a : m;
				m = c > m ? c : m;
				yr[ow] = m;
			}
		}
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_POOL512 1
#include <immintrin.h>
#endif

/*
 * pool_simd: 2 when the AVX-512 MaxPool kernel runs (the CPU has
 * AVX-512F and ML_MAXPOOL is neither "c" nor "avx2"), 1 the AVX2 one,
 * else 0 (maxpool2d_f32, plain C built as target clones). Computed once.
 */
static int
pool_simd(void)
{
	/* -1 until known; racing first callers compute the same value */
	static atomic_int level = -1;
	int v = atomic_load_explicit(&level, memory_order_relaxed);

	if (v < 0) {
		const char *e = getenv("ML_MAXPOOL");
		v = 0;
#ifdef HAVE_POOL512
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx512f"))
			v = 2;
		else if (__builtin_cpu_supports("avx2"))
			v = 1;
		if (v == 2 && e != NULL && strcmp(e, "avx2") == 0)
			v = 1;
#endif
		if (e != NULL && strcmp(e, "c") == 0)
			v = 0;
		atomic_store_explicit(&level, v, memory_order_relaxed);
	}
	return v;
}

#ifdef HAVE_POOL512
/*
 * 2-D f32 MaxPool without Indices, window rows first, in AVX-512: for
 * each output row, the max down its window's input rows (contiguous, 16
 * columns at a time) into a row buffer, then across each window of that
 * row: at stride 1 a tap is an unaligned load, at stride 2 the even
 * elements of two loads (one permute), 16 outputs at a time; the few
 * windows at the edges read the buffer through the window table. Each
 * comparison keeps the current value unless the new one is greater, as
 * maxpool2d_f32 does (NaN never wins). The 3x3 stride-2 windows of the
 * stems' pools (SqueezeNet's, ResNet's) have their taps unrolled: a whole
 * window's 3 rows with no loop, and across, taps 0 and 1 the even and odd
 * elements of the same two loads (4 loads for 3 taps, not 6), in the same
 * order of comparisons (Zen 4, one thread: SqueezeNet's three pools 146,
 * 94, 70 -> 121, 74, 48 us).
 */
/*
 * t where t > acc, else acc (as `t > acc ? t : acc`, lane by lane): vmaxps
 * is exactly that (its second operand where either is NaN, and where the
 * two compare equal, -0 and +0), one instruction where a compare into a
 * mask and a blend were two in the chain (SqueezeNet's first 3x3 stride-2
 * pool, AMD Zen 4, one thread: 160 -> 148 us; the rest is reading the
 * 3 MB input).
 */
#define GT_KEEP(t, acc) _mm512_max_ps((t), (acc))

__attribute__((target("avx512f"))) static void
maxpool2d_f32_avx512(void *ctx, int64_t b, int64_t e)
{
	const struct pool_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t W = v->in[2], OH = v->out[1], OW = v->out[2];
	int64_t dh = v->d[1], KW = v->k[2], sw = v->s[2], pl0 = v->p[2], olo, ohi;
	/* the row buffer, with room for the last block's loads past the row (never stored) */
	float *vb = ml_malloc(sizeof(float) * (size_t)(W + 2 * KW + 64));
	const __m512 ninf = _mm512_set1_ps(-INFINITY);
	const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
					      2, 0);
	const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
	bool s2w3 = sw == 2 && KW == 3 && v->d[2] == 1;

	if (vb == NULL) {
		maxpool2d_f32(ctx, b, e);
		return;
	}
	for (int64_t i = W; i < W + 2 * KW + 64; i++)
		vb[i] = -INFINITY;
	row_interior(j, &olo, &ohi);
	for (int64_t pl = b; pl < e; pl++) {
		const float *x = (const float *)j->x + pl * v->insz;
		float *y = (float *)j->y + pl * v->outsz;
		for (int64_t oh = 0; oh < OH; oh++) {
			const struct win *wh = &j->w[1][oh];
			float *yr = y + oh * OW;
			bool whole3 = wh->lo == 0 && wh->hi == 3 && v->k[1] == 3 && dh == 1;
			for (int64_t iw = 0; iw < W; iw += 16) {
				int64_t nw = ML_MIN((int64_t)16, W - iw);
				__mmask16 m = (__mmask16)(nw >= 16 ? 0xffff : (1u << nw) - 1);
				__m512 acc = ninf;
				if (whole3) {
					/* a whole window of 3 rows: the taps unrolled, same order */
					const float *xr = x + wh->start * W + iw;
					acc = GT_KEEP(_mm512_maskz_loadu_ps(m, xr), acc);
					acc = GT_KEEP(_mm512_maskz_loadu_ps(m, xr + W), acc);
					acc = GT_KEEP(_mm512_maskz_loadu_ps(m, xr + 2 * W), acc);
				} else {
					for (int64_t kh = wh->lo; kh < wh->hi; kh++) {
						const float *xr = x + (wh->start + kh * dh) * W + iw;
						__m512 t = _mm512_maskz_loadu_ps(m, xr);
						acc = GT_KEEP(t, acc);
					}
				}
				_mm512_mask_storeu_ps(vb + iw, m, acc);
			}
			for (int64_t ow = olo; ow < ohi; ow += 16) {
				int64_t n = ML_MIN((int64_t)16, ohi - ow);
				__mmask16 m = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
				__m512 acc = ninf;
				if (s2w3) {
					/* 3 wide, stride 2: taps 0 and 1 from the same two loads */
					const float *p = vb + ow * 2 - pl0;
					__m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
					acc = GT_KEEP(_mm512_permutex2var_ps(a, even, b), acc);
					acc = GT_KEEP(_mm512_permutex2var_ps(a, odd, b), acc);
					acc = GT_KEEP(_mm512_permutex2var_ps(_mm512_loadu_ps(p + 2), even,
									     _mm512_loadu_ps(p + 18)),
						      acc);
					_mm512_mask_storeu_ps(yr + ow, m, acc);
					continue;
				}
				for (int64_t kw = 0; kw < KW; kw++) {
					const float *p = vb + ow * sw + kw - pl0;
					__m512 t;
					if (sw == 1)
						t = _mm512_loadu_ps(p);
					else
						t = _mm512_permutex2var_ps(_mm512_loadu_ps(p), even,
									   _mm512_loadu_ps(p + 16));
					acc = GT_KEEP(t, acc);
				}
				_mm512_mask_storeu_ps(yr + ow, m, acc);
			}
			row_edges(j, vb, 1, yr, olo, ohi);
		}
	}
	ml_free(vb);
}

/*
 * maxpool2d_f32_avx2: the AVX-512 kernel's passes on AVX2, 8 columns at a
 * time (stride 2 across: the even elements of two loads by one shuffle
 * and one lane permute), the ragged ends of rows in scalar loops. The
 * stems' 3x3 stride-2 windows unrolled as there; across, the three taps'
 * shuffles share one lane order, so one permute puts the result in order.
 */
#define GT_KEEP8(t, acc) _mm256_max_ps((t), (acc))

__attribute__((target("avx2"))) static void
maxpool2d_f32_avx2(void *ctx, int64_t b, int64_t e)
{
	const struct pool_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t W = v->in[2], OH = v->out[1], OW = v->out[2];
	int64_t dh = v->d[1], KW = v->k[2], sw = v->s[2], pl0 = v->p[2], olo, ohi;
	/* the row buffer, with room for the last block's loads past the row (never stored) */
	float *vb = ml_malloc(sizeof(float) * (size_t)(W + 2 * KW + 64));
	const __m256 ninf = _mm256_set1_ps(-INFINITY);
	bool s2w3 = sw == 2 && KW == 3 && v->d[2] == 1;

	if (vb == NULL) {
		maxpool2d_f32(ctx, b, e);
		return;
	}
	for (int64_t i = W; i < W + 2 * KW + 64; i++)
		vb[i] = -INFINITY;
	row_interior(j, &olo, &ohi);
	int64_t W8 = W / 8 * 8;
	for (int64_t pl = b; pl < e; pl++) {
		const float *x = (const float *)j->x + pl * v->insz;
		float *y = (float *)j->y + pl * v->outsz;
		for (int64_t oh = 0; oh < OH; oh++) {
			const struct win *wh = &j->w[1][oh];
			float *yr = y + oh * OW;
			bool whole3 = wh->lo == 0 && wh->hi == 3 && v->k[1] == 3 && dh == 1;
			for (int64_t iw = 0; iw < W8; iw += 8) {
				__m256 acc = ninf;
				if (whole3) {
					/* a whole window of 3 rows: the taps unrolled, same order */
					const float *xr = x + wh->start * W + iw;
					acc = GT_KEEP8(_mm256_loadu_ps(xr), acc);
					acc = GT_KEEP8(_mm256_loadu_ps(xr + W), acc);
					acc = GT_KEEP8(_mm256_loadu_ps(xr + 2 * W), acc);
					_mm256_storeu_ps(vb + iw, acc);
					continue;
				}
				for (int64_t kh = wh->lo; kh < wh->hi; kh++) {
					__m256 t = _mm256_loadu_ps(x + (wh->start + kh * dh) * W + iw);
					acc = GT_KEEP8(t, acc);
				}
				_mm256_storeu_ps(vb + iw, acc);
			}
			for (int64_t iw = W8; iw < W; iw++) {
				float acc = -INFINITY;
				for (int64_t kh = wh->lo; kh < wh->hi; kh++) {
					float t = x[(wh->start + kh * dh) * W + iw];
					acc = t > acc ? t : acc;
				}
				vb[iw] = acc;
			}
			for (int64_t ow = olo; ow < ohi; ow += 8) {
				int64_t n = ML_MIN((int64_t)8, ohi - ow);
				__m256 acc = ninf;
				if (s2w3) {
					/*
					 * 3 wide, stride 2: taps 0 and 1 the even and odd
					 * elements of the same two loads, all three in the
					 * shuffles' lane order, put in order once at the end
					 */
					const float *p = vb + ow * 2 - pl0;
					__m256 a = _mm256_loadu_ps(p), c = _mm256_loadu_ps(p + 8);
					acc = GT_KEEP8(_mm256_shuffle_ps(a, c, _MM_SHUFFLE(2, 0, 2, 0)), acc);
					acc = GT_KEEP8(_mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 1, 3, 1)), acc);
					acc = GT_KEEP8(_mm256_shuffle_ps(_mm256_loadu_ps(p + 2),
									 _mm256_loadu_ps(p + 10),
									 _MM_SHUFFLE(2, 0, 2, 0)), acc);
					acc = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(acc),
										     _MM_SHUFFLE(3, 1, 2, 0)));
				}
				for (int64_t kw = 0; kw < KW && !s2w3; kw++) {
					const float *p = vb + ow * sw + kw - pl0;
					__m256 t;
					if (sw == 1) {
						t = _mm256_loadu_ps(p);
					} else {
						/* [p0 p2 q0 q2 | p4 p6 q4 q6], then the middle 64-bit lanes swapped */
						__m256 q = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8),
									     _MM_SHUFFLE(2, 0, 2, 0));
						t = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(q),
											   _MM_SHUFFLE(3, 1, 2, 0)));
					}
					acc = GT_KEEP8(t, acc);
				}
				if (n == 8) {
					_mm256_storeu_ps(yr + ow, acc);
				} else {
					float tmp[8];
					_mm256_storeu_ps(tmp, acc);
					memcpy(yr + ow, tmp, sizeof(float) * (size_t)n);
				}
			}
			row_edges(j, vb, 1, yr, olo, ohi);
		}
	}
	ml_free(vb);
}
#endif

int
ml_cpu_max_pool(struct ml_opctx *c)
{
	struct ml_conv3 v;
	void (*fn)(void *, int64_t, int64_t);

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_max_pool);
	ML_TRY(ml_cpu_conv3(c, &v));
	switch (c->in[0]->dtype) {
	case ML_F32: fn = maxpool_f32; break;
	case ML_F64: fn = maxpool_f64; break;
	case ML_I8: fn = maxpool_i8; break;
	case ML_U8: fn = maxpool_u8; break;
	default:
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported",
				 ml_dtype_name(c->in[0]->dtype));
	}
	struct pool_job j = { &v, c->in[0]->data, c->out[0]->data,
			      c->n_out > 1 ? c->out[1]->data : NULL,
			      ml_attr_int(c->node, "storage_order", 0) == 1, 0, 0, { NULL } };
	ML_TRY(make_wins(c, &v, j.w));
	if (fn == maxpool_f32 && j.idx == NULL && v.in[0] == 1 && v.k[0] == 1 && v.out[0] == 1 &&
	    v.p[0] == 0)
		fn = maxpool2d_f32;
	if (fn == maxpool2d_f32 && v.k[1] == 2 && v.k[2] == 2 && v.s[1] == 2 && v.s[2] == 2 &&
	    v.d[1] == 1 && v.d[2] == 1 && v.p[1] == 0 && v.p[2] == 0 && 2 * v.out[1] <= v.in[1] &&
	    2 * v.out[2] <= v.in[2])
		fn = maxpool2x2_f32;
#ifdef HAVE_POOL512
	/* windows down the rows in any form; across, stride 1 or 2 without dilation */
	if (fn == maxpool2d_f32 && v.d[2] == 1 && (v.s[2] == 1 || v.s[2] == 2) && pool_simd() > 0)
		fn = pool_simd() == 2 ? maxpool2d_f32_avx512 : maxpool2d_f32_avx2;
#endif
	ml_parallel_for(v.n * v.cin, plane_grain(&v), fn, &j);
	ml_free((void *)j.w[0]);
	return 0;
}

/*
 * Window sums for AveragePool and LpPool. AveragePool divides by the
 * window's elements inside the input, or with count_include_pad inside
 * the padded input (a ceil_mode window may reach past even that). LpPool
 * sums |x|^p over the elements inside; padding adds nothing.
 */
#define SUMPOOL(SUF, T)								\
static void									\
sumpool_##SUF(void *ctx, int64_t b, int64_t e)					\
{										\
	const struct pool_job *j = ctx;						\
	const struct ml_conv3 *v = j->v;					\
	int64_t H = v->in[1], W = v->in[2];					\
	int64_t dd = v->d[0], dh = v->d[1], dw = v->d[2];			\
	double p = j->p;							\
	for (int64_t pl = b; pl < e; pl++) {					\
		const T *x = (const T *)j->x + pl * v->insz;			\
		T *y = (T *)j->y + pl * v->outsz;				\
		int64_t o = 0;							\
		for (int64_t od = 0; od < v->out[0]; od++) {			\
		const struct win *wd = &j->w[0][od];				\
		for (int64_t oh = 0; oh < v->out[1]; oh++) {			\
		const struct win *wh = &j->w[1][oh];				\
		for (int64_t ow = 0; ow < v->out[2]; ow++, o++) {		\
			const struct win *ww = &j->w[2][ow];			\
			double s = 0;						\
			for (int64_t kd = wd->lo; kd < wd->hi; kd++) {		\
				int64_t id = wd->start + kd * dd;		\
				for (int64_t kh = wh->lo; kh < wh->hi; kh++) {	\
					int64_t ih = wh->start + kh * dh;	\
					const T *row = x + (id * H + ih) * W + ww->start; \
					for (int64_t kw = ww->lo; kw < ww->hi; kw++) { \
						double xv = row[kw * dw];	\
						if (j->kind == POOL_AVG)	\
							s += xv;		\
						else if (p == 2)		\
							s += xv * xv;		\
						else				\
							s += pow(fabs(xv), p);	\
					}					\
				}						\
			}							\
			if (j->kind == POOL_AVG) {				\
				int64_t dv = v->count_include_pad ?		\
					wd->cpad * wh->cpad * ww->cpad :	\
					(wd->hi - wd->lo) * (wh->hi - wh->lo) * (ww->hi - ww->lo); \
				y[o] = (T)(dv > 0 ? s / (double)dv : 0);	\
			} else {						\
				y[o] = (T)(p == 2 ? sqrt(s) : p == 1 ? s : pow(s, 1 / p)); \
			}							\
		}								\
		}								\
		}								\
	}									\
}
SUMPOOL(f32, float)
SUMPOOL(f64, double)

/*
 * 2 x 2 windows at stride 2, no padding, none past the input's edge (the
 * DenseNet transitions' AveragePool): two input rows per output row, the
 * four values summed in floats, (a + b) + (c + d), then a quarter (the
 * general loop's double sum rounds once: within an ulp of it).
 */
POOL_CLONES static void
avgpool2x2_f32(void *ctx, int64_t b, int64_t e)
{
	const struct pool_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t W = v->in[2], OH = v->out[1], OW = v->out[2];

	for (int64_t pl = b; pl < e; pl++) {
		const float *x = (const float *)j->x + pl * v->insz;
		float *y = (float *)j->y + pl * v->outsz;
		for (int64_t oh = 0; oh < OH; oh++) {
			const float *restrict r0 = x + 2 * oh * W, *restrict r1 = r0 + W;
			float *restrict yr = y + oh * OW;
			for (int64_t ow = 0; ow < OW; ow++)
				yr[ow] = ((r0[2 * ow] + r0[2 * ow + 1]) + (r1[2 * ow] + r1[2 * ow + 1])) *
					 0.25f;
		}
	}
}

static double
lp_p(const struct ml_node *n)
{
	const struct ml_attr *a = ml_attr_find(n, "p");

	return a == NULL ? 2.0 : a->type == ML_ATTR_FLOAT ? a->f : (double)a->i;
}

static int
run_sumpool(struct ml_opctx *c, int kind)
{
	struct ml_conv3 v;
	void (*fn)(void *, int64_t, int64_t);

	ML_TRY(ml_cpu_conv3(c, &v));
	switch (c->in[0]->dtype) {
	case ML_F32: fn = sumpool_f32; break;
	case ML_F64: fn = sumpool_f64; break;
	default:
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported",
				 ml_dtype_name(c->in[0]->dtype));
	}
	struct pool_job j = { &v, c->in[0]->data, c->out[0]->data, NULL, false,
			      kind == POOL_LP ? lp_p(c->node) : 0, kind, { NULL } };
	ML_TRY(make_wins(c, &v, j.w));
	if (fn == sumpool_f32 && kind == POOL_AVG && v.in[0] == 1 && v.k[0] == 1 && v.out[0] == 1 &&
	    v.p[0] == 0 && v.k[1] == 2 && v.k[2] == 2 && v.s[1] == 2 && v.s[2] == 2 && v.d[1] == 1 &&
	    v.d[2] == 1 && v.p[1] == 0 && v.p[2] == 0 && 2 * v.out[1] <= v.in[1] &&
	    2 * v.out[2] <= v.in[2])
		fn = avgpool2x2_f32;
	ml_parallel_for(v.n * v.cin, plane_grain(&v), fn, &j);
	ml_free((void *)j.w[0]);
	return 0;
}

int
ml_cpu_avg_pool(struct ml_opctx *c)
{
	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_avg_pool);
	return run_sumpool(c, POOL_AVG);
}

int
ml_cpu_lp_pool(struct ml_opctx *c)
{
	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_lp_pool);
	return run_sumpool(c, POOL_LP);
}

/* Global pools: one value per [n, c] plane. */
struct gpool_job {
	const void *x;
	void *y;
	int64_t sz;
	enum ml_op op;
	double p;
};

#define GPOOL(SUF, T)								\
POOL_CLONES static void								\
gpool_##SUF(void *ctx, int64_t b, int64_t e)					\
{										\
	const struct gpool_job *j = ctx;					\
	for (int64_t pl = b; pl < e; pl++) {					\
		const T *x = (const T *)j->x + pl * j->sz;			\
		T *y = (T *)j->y + pl;						\
		if (j->op == ML_OP_GLOBAL_MAX_POOL) {				\
			T m = j->sz > 0 ? x[0] : (T)0;				\
			for (int64_t i = 1; i < j->sz; i++)			\
				m = x[i] > m ? x[i] : m;			\
			*y = m;							\
		} else if (j->op == ML_OP_GLOBAL_AVERAGE_POOL) {		\
			/* 16 partial sums in T vectorise; they add up in double */ \
			T part[16] = { 0 };					\
			int64_t i = 0;						\
			for (; i + 16 <= j->sz; i += 16)			\
				for (int l = 0; l < 16; l++)			\
					part[l] += x[i + l];			\
			double s = 0;						\
			for (; i < j->sz; i++)					\
				s += x[i];					\
			for (int l = 0; l < 16; l++)				\
				s += part[l];					\
			*y = (T)(j->sz > 0 ? s / (double)j->sz : 0);		\
		} else {							\
			double s = 0;						\
			for (int64_t i = 0; i < j->sz; i++)			\
				s += j->p == 2 ? (double)x[i] * x[i] : pow(fabs((double)x[i]), j->p); \
			*y = (T)(j->p == 2 ? sqrt(s) : pow(s, 1 / j->p));	\
		}								\
	}									\
}
GPOOL(f32, float)
GPOOL(f64, double)

int
ml_cpu_global_pool(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_global_pool);
	int64_t planes = x->dims[0] * x->dims[1];
	int64_t sz = planes > 0 ? ml_tval_numel(x) / planes : 0;
	struct gpool_job j = { x->data, c->out[0]->data, sz, c->node->op, lp_p(c->node) };
	void (*fn)(void *, int64_t, int64_t);
	switch (x->dtype) {
	case ML_F32: fn = gpool_f32; break;
	case ML_F64: fn = gpool_f64; break;
	default:
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(x->dtype));
	}
	ml_parallel_for(planes, ML_MAX(1, POOL_GRAIN / ML_MAX(sz, 1)), fn, &j);
	return 0;
}
