/*
 * nn_conv.c: CPU kernels of Conv and ConvTranspose, over a 3-D view of
 * 1-D, 2-D and 3-D windows (struct ml_conv3).
 *
 * f32 Conv picks one of these per node from its geometry:
 * - one input channel per group (depthwise, any channel multiplier) over
 *   a 2-D window: direct loops over the output planes, split with
 *   ml_parallel_for (a per-channel GEMM would be a tiny GEMV), with
 *   register-blocked kernels for square 3, 5 and 7 wide windows;
 * - at most 4 input channels (the first layer): direct, nn_direct.c;
 * - 3x3 stride 1 on wide layers: Winograd F(4x4, 3x3) (nn_wino.c);
 * - small planes into at most 64 channels, stride 1 (DenseNet's growth
 *   layers): the output positions as the GEMM's rows (nn_tflat.c);
 * - other 2-D windows wider than 1 of one group, stride 1 or 2, on CPUs
 *   with AVX-512 or AVX2: an implicit GEMM that reads the padded input
 *   planes in place (nn_flat.c), no im2col;
 * - everything else, on CPUs with AVX-512 or AVX2: im2col straight into
 *   the packed panels of the library's own SGEMM (nn_gemm.c), which adds
 *   the bias as it stores; a 1x1 stride-1 convolution's im2col is a copy;
 * - otherwise: im2col into a per-thread scratch buffer (in column tiles,
 *   so the buffer stays bounded) and BLAS, except that 1x1 stride-1 needs
 *   no im2col at all.
 * f32 ConvTranspose is SGEMM into columns, then col2im. f64 runs direct
 * loops (correct, not fast); f16 and bf16 run as f32.
 */
#if defined(__GNUC__) && !defined(__clang__)
/* -O2 runs the vectoriser with its "very cheap" cost model, which skips loops with epilogues. */
#pragma GCC optimize("O3")
#endif
#include <stdatomic.h>

#include "cpu/elem.h"
#include "cpu/nn.h"
#include "cpu/train_conv.h"
#include "ops/fused.h"

/* The largest im2col tile, in elements; big enough for one tile in most CNN layers. */
#define COL_MAX ((int64_t)1 << 18)
/* The largest im2col tile (8 MB) that may be taken to reach COL_MIN_TN columns. */
#define COL_BATCH_MAX ((int64_t)1 << 21)
/* The columns a tile of a layer with large weights should have (see conv_pgemm). */
#define COL_MIN_TN 256

int
ml_cpu_conv3(struct ml_opctx *c, struct ml_conv3 *v)
{
	struct ml_conv_geom g;

	ML_TRY(ml_conv_geom(c, &g));
	if (g.nsp < 1 || g.nsp > 3)
		return ml_opfail(c, ML_ENOTSUP, "%d spatial dims are not supported", g.nsp);
	memset(v, 0, sizeof *v);
	v->n = g.n;
	v->cin = g.cin;
	v->cout = g.cout;
	v->group = g.group;
	v->cg = g.cin / g.group;
	v->mg = g.cout / g.group;
	v->ceil_mode = g.ceil_mode;
	v->count_include_pad = g.count_include_pad;
	int sh = 3 - g.nsp;
	for (int i = 0; i < 3; i++) {
		int j = i - sh;
		v->in[i] = j < 0 ? 1 : g.in[j];
		v->out[i] = j < 0 ? 1 : g.out[j];
		v->k[i] = j < 0 ? 1 : g.k[j];
		v->s[i] = j < 0 ? 1 : g.stride[j];
		v->d[i] = j < 0 ? 1 : g.dil[j];
		v->p[i] = j < 0 ? 0 : g.pb[j];
		v->pe[i] = j < 0 ? 0 : g.pe[j];
	}
	v->insz = v->in[0] * v->in[1] * v->in[2];
	v->outsz = v->out[0] * v->out[1] * v->out[2];
	v->ksz = v->k[0] * v->k[1] * v->k[2];
	return 0;
}

/* fill_bias: every plane of y [n, cout, outsz] starts at its channel's bias (or 0). */
static void
fill_bias(float *y, const float *bias, int64_t n, int64_t cout, int64_t sz)
{
	for (int64_t i = 0; i < n * cout; i++) {
		float b = bias != NULL ? bias[i % cout] : 0.0f;
		float *p = y + i * sz;
		for (int64_t j = 0; j < sz; j++)
			p[j] = b;
	}
}

/*
 * SIMD builds of the hot loops: the library is compiled for x86-64-v2
 * (SSE4), so the loops that matter get AVX2+FMA and AVX-512 clones too,
 * picked at load time by the CPU (GCC's ifunc-based target_clones).
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define ML_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ML_CLONES
#endif

/*
 * im2col: rows [r0, r1) of the column matrix for output positions
 * [p0, p0 + tn) of one group. Row r is input channel r / ksz at kernel
 * offset r % ksz; padding reads as 0. Column q of row r goes to
 * col[(q / pw) * pstride + r * rstride + q % pw]: a plain [rows, tn]
 * matrix (pw = tn, rstride = tn) or ml_pgemm's panels (pw = ML_PG_NR).
 * The copy runs in segments that end at an output row or a panel edge,
 * each over the range that reads inside the input. Positions count on
 * across the images of the batch (p0 may be past the first image's
 * plane, and a tile may end in a later image), images xstride floats
 * apart in x, so that one GEMM serves the columns of several images.
 */
struct im2col_job {
	const struct ml_conv3 *v;
	const float *x;		/* the group's first input plane of the first image */
	float *col;
	int64_t p0, tn;
	int64_t pw, pstride, rstride;
	int64_t xstride;	/* floats from one image's input to the next */
	int64_t rbase;		/* the row stored at col: row r goes rstride * (r - rbase) in */
};

ML_CLONES static void
im2col_rows(void *ctx, int64_t r0, int64_t r1)
{
	const struct im2col_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t W = v->in[2], H = v->in[1], D = v->in[0];
	int64_t OW = v->out[2], OH = v->out[1];
	/* the output position of column 0, and its panel offset, tracked without division */
	int64_t img0 = j->p0 / v->outsz, pp = j->p0 % v->outsz;
	int64_t ow00 = pp % OW, oh00 = pp / OW % OH, od00 = pp / (OW * OH);

	for (int64_t r = r0; r < r1; r++) {
		int64_t ci = r / v->ksz, kk = r % v->ksz;
		int64_t kw = kk % v->k[2], kh = kk / v->k[2] % v->k[1], kd = kk / (v->k[2] * v->k[1]);
		const float *xc = j->x + img0 * j->xstride + ci * v->insz;
		int64_t off = kw * v->d[2] - v->p[2], s = v->s[2];
		int64_t vlo, vhi;
		ml_valid_range(off, s, W, OW, &vlo, &vhi);
		int64_t ow0 = ow00, oh = oh00, od = od00, pq = 0;
		float *pbase = j->col + (r - j->rbase) * j->rstride;
		for (int64_t q = 0; q < j->tn;) {
			int64_t run = ML_MIN(ML_MIN(OW - ow0, j->tn - q), j->pw - pq);
			float *dst = pbase + pq;
			int64_t id = od * v->s[0] - v->p[0] + kd * v->d[0];
			int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
			if (id < 0 || id >= D || ih < 0 || ih >= H) {
				memset(dst, 0, sizeof(float) * (size_t)run);
			} else {
				const float *row = xc + (id * H + ih) * W;
				int64_t lo = ML_MIN(ML_MAX(vlo, ow0), ow0 + run);
				int64_t hi = ML_MIN(ML_MAX(vhi, lo), ow0 + run);
				float *qd = dst - ow0;
				for (int64_t ow = ow0; ow < lo; ow++)
					qd[ow] = 0.0f;
				if (s == 1) {
					memcpy(qd + lo, row + lo + off, sizeof(float) * (size_t)(hi - lo));
				} else if (s == 2) {
					const float *rs = row + off;
					for (int64_t ow = lo; ow < hi; ow++)
						qd[ow] = rs[2 * ow];
				} else {
					for (int64_t ow = lo; ow < hi; ow++)
						qd[ow] = row[ow * s + off];
				}
				for (int64_t ow = hi; ow < ow0 + run; ow++)
					qd[ow] = 0.0f;
			}
			q += run;
			pq += run;
			if (pq == j->pw) {
				pq = 0;
				pbase += j->pstride;
			}
			ow0 += run;
			if (ow0 == OW) {
				ow0 = 0;
				if (++oh == OH) {
					oh = 0;
					if (++od == v->out[0]) {
						/* on to the next image of the batch */
						od = 0;
						xc += j->xstride;
					}
				}
			}
		}
	}
}

/*
 * Depthwise (one input channel per group) 2-D convolution, plane by
 * plane. Each kernel tap adds w * (a row of the input) into the output
 * row over the range where it reads inside the input; with stride 1 this
 * is a contiguous multiply-add that vectorises. Square 3, 5 and 7 wide
 * kernels without dilation and with stride 1 or 2 along the row
 * (MobileNet's and EfficientNet's) take a DWK_ROW kernel instead, which
 * sums all taps in registers in one pass over the output row.
 */
/* Kernel widths up to this get their column ranges computed once per call. */
#define DW_MAXK 16

struct dw_job {
	const struct ml_conv3 *v;
	const float *x, *w, *bias;
	float *y;
};

/*
 * DWK_ROW(K, S): one output row of a KxK depthwise convolution without
 * dilation, with stride S along the row, from input rows r[0..K) (a row
 * outside the input comes with zero weights and any valid pointer). The
 * outputs whose window lies inside the row sum all taps in registers, an
 * unrolled loop the compiler vectorises along the row; the few at the
 * edges check each tap.
 */
#define DWK_ROW(K, S)								\
ML_CLONES static void								\
dw_row_k##K##_s##S(float *restrict yr, const float *const *r, const float *w, float b, \
		   int64_t OW, int64_t W, int64_t pl)				\
{										\
	int64_t lo = (pl + S - 1) / S, hi = W >= K ? (W - K + pl) / S + 1 : 0;	\
	lo = ML_MIN(lo, OW);							\
	hi = ML_MAX(ML_MIN(hi, OW), lo);					\
	for (int64_t ow = 0; ow < OW; ow++) {					\
		if (ow == lo && hi > lo) {					\
			for (int64_t o = lo; o < hi; o++) {			\
				float acc = b;					\
				_Pragma("GCC unroll 8")				\
				for (int kh = 0; kh < K; kh++) {		\
					const float *p = r[kh] + o * S - pl;	\
					_Pragma("GCC unroll 8")			\
					for (int kw = 0; kw < K; kw++)		\
						acc += w[kh * K + kw] * p[kw];	\
				}						\
				yr[o] = acc;					\
			}							\
			ow = hi - 1;						\
			continue;						\
		}								\
		float acc = b;							\
		for (int64_t kw = 0; kw < K; kw++) {				\
			int64_t iw = ow * S - pl + kw;				\
			if (iw < 0 || iw >= W)					\
				continue;					\
			for (int kh = 0; kh < K; kh++)				\
				acc += w[kh * K + kw] * r[kh][iw];		\
		}								\
		yr[ow] = acc;							\
	}									\
}
DWK_ROW(3, 1)
DWK_ROW(3, 2)
DWK_ROW(5, 1)
DWK_ROW(5, 2)
DWK_ROW(7, 1)
DWK_ROW(7, 2)

/*
 * DWK_FLAT(K): a whole small plane of a KxK depthwise convolution with
 * stride S (1 or 2, the same both ways) at once. The plane is copied,
 * zero-padded, into a buffer of rows Wp wide; the stride-1 output at
 * (r, c) is then the dot product of the kernel with the buffer at flat
 * offset r * Wp + c, a loop over the flat offset that vectorises however
 * narrow the plane is. Each needed row is computed across all Wp columns
 * and every S-th value kept. Row kernels would run mostly in their edge
 * code on the 7x7 and 14x14 planes of MobileNet's and EfficientNet's last
 * stages.
 */
#define DW_FLAT_MAX 4096	/* floats of the padded plane (16 KB, on the stack) */

/* dw_flat_fits: whether the padded plane of v fits the flat kernels' buffer. */
static bool
dw_flat_fits(const struct ml_conv3 *v)
{
	int64_t s = v->s[2], k = v->k[2];
	int64_t wp = (v->out[2] - 1) * s + k, hp = (v->out[1] - 1) * s + k;

	return v->s[1] == s && (s == 1 || s == 2) && wp * hp + k <= DW_FLAT_MAX;
}

#define DWK_FLAT(K)								\
ML_CLONES static void								\
dw_flat_k##K(const struct ml_conv3 *v, const float *x, const float *w, float b, float *y) \
{										\
	int64_t W = v->in[2], H = v->in[1], OW = v->out[2], OH = v->out[1];	\
	int64_t S = v->s[2], Wp = (OW - 1) * S + K, Hp = (OH - 1) * S + K;	\
	float xp[DW_FLAT_MAX + 64], acc[DW_FLAT_MAX];				\
	int64_t lo, hi;								\
	ml_valid_range(-v->p[2], 1, W, Wp, &lo, &hi);				\
	for (int64_t i = 0; i < Hp * Wp + K; i++)				\
		xp[i] = 0.0f;							\
	for (int64_t r = 0; r < Hp; r++) {					\
		int64_t ih = r - v->p[1];					\
		if (ih >= 0 && ih < H)						\
			memcpy(xp + r * Wp + lo, x + ih * W + lo - v->p[2],	\
			       sizeof(float) * (size_t)(hi - lo));		\
	}									\
	/*								\
	 * stride 1: one pass over the whole plane, OH rows of Wp (long	\
	 * enough to vectorise where a 7x7 plane's rows are 9 wide), each	\
	 * row's first OW kept; stride 2: row by row, every other value kept	\
	 */								\
	int64_t rows = S == 1 ? 1 : OH, len = S == 1 ? OH * Wp : Wp;		\
	for (int64_t r = 0; r < rows; r++) {					\
		const float *xr = xp + r * S * Wp;				\
		for (int64_t o = 0; o < len; o++) {				\
			float s = b;						\
			_Pragma("GCC unroll 8")					\
			for (int kh = 0; kh < K; kh++)				\
				_Pragma("GCC unroll 8")				\
				for (int kw = 0; kw < K; kw++)			\
					s += w[kh * K + kw] * xr[o + kh * Wp + kw]; \
			acc[o] = s;						\
		}								\
		if (S == 1)							\
			for (int64_t oh = 0; oh < OH; oh++)			\
				memcpy(y + oh * OW, acc + oh * Wp,		\
				       sizeof(float) * (size_t)OW);		\
		else								\
			for (int64_t ow = 0; ow < OW; ow++)			\
				y[r * OW + ow] = acc[2 * ow];			\
	}									\
}
DWK_FLAT(3)
DWK_FLAT(5)
DWK_FLAT(7)

typedef void (*dwrow_fn)(float *restrict, const float *const *, const float *, float, int64_t,
			 int64_t, int64_t);

/* dw_row_fn: the row kernel for a KxK window of stride sw, or NULL. */
static dwrow_fn
dw_row_fn(int64_t k, int64_t sw)
{
	if (sw != 1 && sw != 2)
		return NULL;
	switch (k) {
	case 3: return sw == 1 ? dw_row_k3_s1 : dw_row_k3_s2;
	case 5: return sw == 1 ? dw_row_k5_s1 : dw_row_k5_s2;
	case 7: return sw == 1 ? dw_row_k7_s1 : dw_row_k7_s2;
	default: return NULL;
	}
}

/* dwk_plane: one plane through a row kernel; rows outside the input get zero weights. */
static void
dwk_plane(const struct ml_conv3 *v, dwrow_fn row, const float *x, const float *w, float b,
	  float *y)
{
	int64_t W = v->in[2], H = v->in[1], OW = v->out[2], OH = v->out[1], K = v->k[1];
	const float *r[7];
	float wr[49];

	for (int64_t oh = 0; oh < OH; oh++) {
		int64_t valid = -1;
		for (int64_t kh = 0; kh < K; kh++) {
			int64_t ih = oh * v->s[1] - v->p[1] + kh;
			if (ih >= 0 && ih < H)
				valid = ih;
		}
		if (valid < 0) {
			for (int64_t ow = 0; ow < OW; ow++)
				y[oh * OW + ow] = b;
			continue;
		}
		for (int64_t kh = 0; kh < K; kh++) {
			int64_t ih = oh * v->s[1] - v->p[1] + kh;
			bool in = ih >= 0 && ih < H;
			r[kh] = x + (in ? ih : valid) * W;
			for (int64_t kw = 0; kw < K; kw++)
				wr[kh * K + kw] = in ? w[kh * K + kw] : 0.0f;
		}
		row(y + oh * OW, r, wr, b, OW, W, v->p[2]);
	}
}

ML_CLONES static void
dw_planes(void *ctx, int64_t b, int64_t e)
{
	const struct dw_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t W = v->in[2], H = v->in[1], OW = v->out[2], OH = v->out[1];
	int64_t KH = v->k[1], KW = v->k[2], sw = v->s[2];
	dwrow_fn rowfn = KH == KW && v->d[1] == 1 && v->d[2] == 1 ? dw_row_fn(KW, sw) : NULL;
	bool flat = rowfn != NULL && dw_flat_fits(v);

	/* the output range of each kernel column, the same for every row and plane */
	int64_t kr[2 * DW_MAXK];
	bool ranges = KW <= DW_MAXK;
	for (int64_t kw = 0; ranges && kw < KW; kw++)
		ml_valid_range(kw * v->d[2] - v->p[2], sw, W, OW, &kr[2 * kw], &kr[2 * kw + 1]);
	for (int64_t pl = b; pl < e; pl++) {
		int64_t n = pl / v->cout, oc = pl % v->cout, ic = oc / v->mg;
		const float *x = j->x + (n * v->cin + ic) * v->insz;
		const float *w = j->w + oc * v->ksz;
		float *y = j->y + pl * v->outsz;
		float bias = j->bias != NULL ? j->bias[oc] : 0.0f;
		if (flat) {
			if (KW == 3)
				dw_flat_k3(v, x, w, bias, y);
			else if (KW == 5)
				dw_flat_k5(v, x, w, bias, y);
			else
				dw_flat_k7(v, x, w, bias, y);
			continue;
		}
		if (rowfn != NULL) {
			dwk_plane(v, rowfn, x, w, bias, y);
			continue;
		}
		for (int64_t i = 0; i < v->outsz; i++)
			y[i] = bias;
		for (int64_t oh = 0; oh < OH; oh++) {
			float *yr = y + oh * OW;
			for (int64_t kh = 0; kh < KH; kh++) {
				int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
				if (ih < 0 || ih >= H)
					continue;
				const float *xr = x + ih * W;
				for (int64_t kw = 0; kw < KW; kw++) {
					float wv = w[kh * KW + kw];
					int64_t off = kw * v->d[2] - v->p[2], lo, hi;
					if (ranges) {
						lo = kr[2 * kw];
						hi = kr[2 * kw + 1];
					} else {
						ml_valid_range(off, sw, W, OW, &lo, &hi);
					}
					if (sw == 1) {
						const float *xs = xr + off;
						for (int64_t ow = lo; ow < hi; ow++)
							yr[ow] += wv * xs[ow];
					} else {
						for (int64_t ow = lo; ow < hi; ow++)
							yr[ow] += wv * xr[ow * sw + off];
					}
				}
			}
		}
	}
}

/*
 * conv_fold_enabled: false when the environment sets ML_CONV_FOLD=0, which
 * makes conv_pgemm run one image at a time (tests force that path).
 */
static bool
conv_fold_enabled(void)
{
	/* -1 until known; racing first callers compute the same value */
	static atomic_int on = -1;
	int v = atomic_load_explicit(&on, memory_order_relaxed);

	if (v < 0) {
		const char *e = getenv("ML_CONV_FOLD");
		v = e != NULL && strcmp(e, "0") == 0 ? 0 : 1;
		atomic_store_explicit(&on, v, memory_order_relaxed);
	}
	return v == 1;
}

/*
 * A GEMM tile that spans images lands in a [mg, cur] buffer first; rows
 * [b, e) of it go to their images' planes here.
 */
struct scatter_job {
	const float *cs;	/* [mg, cur] */
	float *y;		/* the group's first output plane of the first image */
	const float *z;		/* e's residual at the same place, or NULL */
	const struct ml_conv_epi *e;
	int64_t p0, cur, outsz, ystride;
};

static void
scatter_rows(void *ctx, int64_t b, int64_t e)
{
	const struct scatter_job *j = ctx;

	for (int64_t i = b; i < e; i++) {
		const float *src = j->cs + i * j->cur;
		for (int64_t q = j->p0, off = 0; off < j->cur;) {
			int64_t img = q / j->outsz, pp = q % j->outsz;
			int64_t run = ML_MIN(j->outsz - pp, j->cur - off);
			int64_t at = img * j->ystride + i * j->outsz + pp;
			memcpy(j->y + at, src + off, sizeof(float) * (size_t)run);
			if (j->e != NULL)
				ml_fused_tile_epi(j->y + at, 1, run, run, NULL,
						  j->z != NULL ? j->z + at : NULL, j->e->act,
						  j->e->lo, j->e->hi);
			off += run;
			q += run;
		}
	}
}

/*
 * epi_tile: e over a GEMM tile of Y just stored (m rows of n, ldc apart),
 * split over the pool by rows.
 */
struct epi_job {
	const struct ml_conv_epi *e;
	float *y;
	const float *z;
	int64_t n, ldc;
};

static void
epi_rows(void *ctx, int64_t b, int64_t e)
{
	const struct epi_job *j = ctx;

	ml_fused_tile_epi(j->y + b * j->ldc, e - b, j->n, j->ldc, NULL,
			  j->z != NULL ? j->z + b * j->ldc : NULL, j->e->act, j->e->lo, j->e->hi);
}

static void
epi_tile(const struct ml_conv_epi *e, float *y, const float *z, int64_t m, int64_t n,
	 int64_t ldc)
{
	struct epi_job j = { e, y, z, n, ldc };
	ml_parallel_for(m, ML_MAX(1, 16384 / ML_MAX(n, 1)), epi_rows, &j);
}

/*
 * conv_pgemm: the im2col variant over ml_pgemm, with im2col (and, for a
 * pointwise convolution, the plain copy it reduces to) writing B in
 * ml_pgemm's panels and the bias added by the GEMM's store.
 * Where a plane is narrower than a tile, the batch is folded into the
 * GEMM's columns: the output positions of all images are one run of
 * N * outsz columns, cut into tiles of at least
 * COL_MIN_TN columns where COL_BATCH_MAX allows, so that the weights (A,
 * megabytes in the 14x14 and 7x7 layers, where an image has 49 or 196
 * columns) are read once per tile instead of once per image. A tile that
 * spans images is computed into scratch slot 1 and copied to the planes.
 */
static int
conv_pgemm(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
	   const float *bias, const struct ml_conv_epi *e, float *y)
{
	int64_t K = v->cg * v->ksz, K1 = ML_MAX(K, 1);
	int64_t lo = ML_MAX(COL_MAX / K1, ML_MIN(COL_MIN_TN, COL_BATCH_MAX / K1));
	int64_t tmax = ML_MAX(lo / ML_PG_NR * ML_PG_NR, ML_PG_NR);
	/* fold when a tile holds a whole plane; larger planes fill tiles on their own */
	bool fold = v->n > 1 && v->outsz < tmax && conv_fold_enabled();
	int64_t span = fold ? v->n * v->outsz : v->outsz, tn = span;

	if (K * tn > COL_MAX)
		tn = ML_MIN(tn, tmax);
	/* narrower tiles, down to 4 panels, where that avoids allocating */
	int64_t fit = (int64_t)(ml_cpu_scratch_room(0) / sizeof(float)) / K1 / ML_PG_NR * ML_PG_NR;
	if (ml_pgemm_packed_len(K, tn) > fit * K && fit >= 4 * ML_PG_NR)
		tn = fit;
	/* tiles of even width, whole panels each */
	int64_t ntiles = (span + tn - 1) / tn;
	tn = ML_MIN(tn, ((span + ntiles - 1) / ntiles + ML_PG_NR - 1) / ML_PG_NR * ML_PG_NR);
	float *col = ml_cpu_scratch(0, sizeof(float) * (size_t)ml_pgemm_packed_len(K, tn));
	if (col == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate %lld bytes for im2col",
				 (long long)(ml_pgemm_packed_len(K, tn) * 4));
	int64_t nimg = fold ? 1 : v->n, xs = v->cin * v->insz, ys = v->cout * v->outsz;
	for (int64_t n = 0; n < nimg; n++)
		for (int64_t g = 0; g < v->group; g++) {
			const float *xg = x + n * xs + g * v->cg * v->insz;
			const float *wg = w + g * v->mg * K;
			float *yg = y + n * ys + g * v->mg * v->outsz;
			const float *bg = bias != NULL ? bias + g * v->mg : NULL;
			const float *zg = e != NULL && e->z != NULL ? e->z + (yg - y) : NULL;
			for (int64_t p0 = 0; p0 < span; p0 += tn) {
				int64_t cur = ML_MIN(tn, span - p0);
				struct im2col_job j = { v, xg, col, p0, cur, ML_PG_NR, ML_PG_NR * K,
							ML_PG_NR, xs, 0 };
				ml_parallel_for(K, ML_MAX(1, 16384 / cur), im2col_rows, &j);
				int64_t img = p0 / v->outsz, pp = p0 % v->outsz;
				if (pp + cur <= v->outsz) {
					ml_pgemm(v->mg, cur, K, wg, K, col, bg, yg + img * ys + pp,
						 v->outsz, false);
					if (e != NULL)
						epi_tile(e, yg + img * ys + pp,
							 zg != NULL ? zg + img * ys + pp : NULL,
							 v->mg, cur, v->outsz);
					continue;
				}
				size_t csz = sizeof(float) * (size_t)(v->mg * cur);
				float *cs = ml_cpu_scratch(1, csz);
				if (cs == NULL)
					return ml_opfail(c, ML_ENOMEM, "cannot allocate %zu bytes "
							 "for a GEMM tile", csz);
				ml_pgemm(v->mg, cur, K, wg, K, col, bg, cs, cur, false);
				struct scatter_job sj = { cs, yg, zg, e, p0, cur, v->outsz, ys };
				ml_parallel_for(v->mg, ML_MAX(1, 16384 / cur), scatter_rows, &sj);
			}
		}
	return 0;
}

/*
 * The bf16 convolution (bf16.c): a column tile's im2col a pair of rows at
 * a time, each pair computed in f32 into a thread's scratch and rounded to
 * bf16 into the pair panels as it is packed.
 */
struct bf_col_job {
	const struct ml_conv3 *v;
	const float *x;
	uint16_t *col;
	int64_t p0, tn, k, xstride;
	_Atomic int failed;
	bool fast;		/* bf_pair_dp applies */
	bool pointwise;		/* 1x1 window, stride 1, no padding: rows are planes */
	/* channel pairs (ml_conv_bf16's cpair): x as pairs, xps apart; cp pairs (0: not) */
	const uint32_t *xp;
	int64_t xps, cp;
};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_BF_IM2COL 1
#include <immintrin.h>
#include "cpu/tile512.h"
#define BF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/*
 * bf_load: the inputs of c (<= 16) output columns from ow on, at stride s
 * (1 or 2), of one input row W wide (NULL: a padding row), starting at
 * input column ow * s + off; zeros outside [0, W). The masked loads touch
 * only the lanes inside the row (masked-off lanes never fault).
 */
BF_TARGET static inline __m512
bf_load(const float *row, int64_t W, int64_t ow, int64_t off, int64_t s, int c)
{
	if (row == NULL)
		return _mm512_setzero_ps();
	int64_t i0 = ow * s + off, n = (int64_t)c * s;
	int64_t lo = ML_MAX(0, -i0), hi = ML_MIN(n, W - i0);
	if (hi <= lo)
		return _mm512_setzero_ps();
	uint32_t m = (uint32_t)(((uint64_t)1 << hi) - ((uint64_t)1 << lo));
	const float *p = row + i0;
	if (s == 1)
		return _mm512_maskz_loadu_ps((__mmask16)m, p);
	__m512 a = _mm512_maskz_loadu_ps((__mmask16)(m & 0xffff), p);
	__m512 b = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), p + 16);
	const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6,
					      4, 2, 0);
	return _mm512_permutex2var_ps(a, even, b);
}

/*
 * bf_pair_dp: pair q of a column tile (rows 2q and 2q + 1 of the im2col
 * matrix; the second absent past k) straight into the bf16 panels: per
 * run of at most 16 columns inside one output row and one panel, a masked
 * load per row, the conversion to bf16, and one store of the pairs. For
 * 2-D windows with a column stride of 1 or 2 (im2col_rows otherwise).
 */
BF_TARGET static void
bf_pair_dp(const struct bf_col_job *j, int64_t q)
{
	const struct ml_conv3 *v = j->v;
	int64_t W = v->in[2], H = v->in[1], OW = v->out[2], s = v->s[2];
	int64_t kp = (j->k + 1) / 2, pstride = kp * 2 * ML_BF_NR;
	const float *xc[2];
	int64_t offw[2], offh[2];
	bool have[2];
	for (int e = 0; e < 2; e++) {
		int64_t r = 2 * q + e;
		have[e] = r < j->k;
		int64_t ci = have[e] ? r / v->ksz : 0, kk = have[e] ? r % v->ksz : 0;
		int64_t kw = kk % v->k[2], kh = kk / v->k[2];
		xc[e] = j->x + ci * v->insz;
		offw[e] = kw * v->d[2] - v->p[2];
		offh[e] = kh * v->d[1] - v->p[1];
	}
	int64_t pp = j->p0, oh = pp / OW, ow = pp % OW;
	uint16_t *base = j->col + q * 2 * ML_BF_NR;
	/*
	 * A pointwise convolution's rows are whole planes: runs of 16 columns
	 * across output rows, each a full store of the half panel it fills.
	 */
	if (j->pointwise) {
		for (int64_t qc = 0; qc < j->tn; qc += 16) {
			int c = (int)ML_MIN((int64_t)16, j->tn - qc);
			__mmask16 m = (__mmask16)((1u << c) - 1);
			__m512 x0 = _mm512_maskz_loadu_ps(m, xc[0] + pp + qc);
			__m512 x1 = have[1] ? _mm512_maskz_loadu_ps(m, xc[1] + pp + qc) :
					      _mm512_setzero_ps();
			__m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x0));
			__m512i hi = _mm512_slli_epi32(
				_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x1)), 16);
			_mm512_storeu_si512(base + qc / ML_BF_NR * pstride + qc % ML_BF_NR * 2,
					    _mm512_or_si512(lo, hi));
		}
		if (j->tn % ML_BF_NR != 0 && j->tn % ML_BF_NR <= 16)
			_mm512_storeu_si512(base + j->tn / ML_BF_NR * pstride + 32,
					    _mm512_setzero_si512());
		return;
	}
	for (int64_t qc = 0; qc < j->tn;) {
		const float *row[2];
		for (int e = 0; e < 2; e++) {
			int64_t ih = oh * v->s[1] + offh[e];
			row[e] = have[e] && ih >= 0 && ih < H ? xc[e] + ih * W : NULL;
		}
		int64_t seg = ML_MIN(OW - ow, j->tn - qc);
		for (int64_t done = 0; done < seg;) {
			int c = (int)ML_MIN(ML_MIN((int64_t)16, seg - done), ML_BF_NR - qc % ML_BF_NR);
			__m512 x0 = bf_load(row[0], W, ow + done, offw[0], s, c);
			__m512 x1 = bf_load(row[1], W, ow + done, offw[1], s, c);
			__m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x0));
			__m512i hi = _mm512_slli_epi32(
				_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x1)), 16);
			uint16_t *dst = base + qc / ML_BF_NR * pstride + qc % ML_BF_NR * 2;
			_mm512_mask_storeu_epi32(dst, (__mmask16)((1u << c) - 1),
						 _mm512_or_si512(lo, hi));
			done += c;
			qc += c;
		}
		ow += seg;
		if (ow == OW) {
			ow = 0;
			oh++;
		}
	}
	/* the last panel's columns past the tile: zeros */
	if (j->tn % ML_BF_NR != 0) {
		uint16_t *dst = base + j->tn / ML_BF_NR * pstride;
		for (int64_t c = j->tn % ML_BF_NR; c < ML_BF_NR; c++)
			dst[2 * c] = dst[2 * c + 1] = 0;
	}
}
#endif

#ifdef HAVE_BF_IM2COL
/* bf_load32: bf_load over a row of pairs (32-bit elements, already bf16) */
BF_TARGET static inline __m512i
bf_load32(const uint32_t *row, int64_t W, int64_t ow, int64_t off, int64_t s, int c)
{
	if (row == NULL)
		return _mm512_setzero_si512();
	int64_t i0 = ow * s + off, n = (int64_t)c * s;
	int64_t lo = ML_MAX(0, -i0), hi = ML_MIN(n, W - i0);
	if (hi <= lo)
		return _mm512_setzero_si512();
	uint32_t m = (uint32_t)(((uint64_t)1 << hi) - ((uint64_t)1 << lo));
	const uint32_t *p = row + i0;
	if (s == 1)
		return _mm512_maskz_loadu_epi32((__mmask16)m, p);
	__m512i a = _mm512_maskz_loadu_epi32((__mmask16)(m & 0xffff), p);
	__m512i b = _mm512_maskz_loadu_epi32((__mmask16)(m >> 16), p + 16);
	const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6,
					      4, 2, 0);
	return _mm512_permutex2var_epi32(a, even, b);
}

/*
 * bf_cpair_dp: pair row q of the channel-pair order (kernel offset q / cp,
 * channel pair q % cp) of a column tile: copies of runs of the input's
 * pairs, which were rounded to bf16 once per image; no conversion here.
 */
BF_TARGET static void
bf_cpair_dp(const struct bf_col_job *j, int64_t q)
{
	const struct ml_conv3 *v = j->v;
	int64_t W = v->in[2], H = v->in[1], OW = v->out[2], s = v->s[2];
	int64_t pstride = (j->k / 2) * 2 * ML_BF_NR;
	int64_t kk = q / j->cp, cpi = q % j->cp;
	int64_t offw = kk % v->k[2] * v->d[2] - v->p[2], offh = kk / v->k[2] * v->d[1] - v->p[1];
	const uint32_t *plane = j->xp + cpi * j->xps;
	uint32_t *base = (uint32_t *)(j->col + q * 2 * ML_BF_NR);
	int64_t pp = j->p0, oh = pp / OW, ow = pp % OW;

	if (j->pointwise) {
		for (int64_t qc = 0; qc < j->tn; qc += 16) {
			int c = (int)ML_MIN((int64_t)16, j->tn - qc);
			__m512i x = _mm512_maskz_loadu_epi32((__mmask16)((1u << c) - 1),
							     plane + pp + qc);
			_mm512_storeu_si512(base + qc / ML_BF_NR * (pstride / 2) + qc % ML_BF_NR, x);
		}
		if (j->tn % ML_BF_NR != 0 && j->tn % ML_BF_NR <= 16)
			_mm512_storeu_si512(base + j->tn / ML_BF_NR * (pstride / 2) + 16,
					    _mm512_setzero_si512());
		return;
	}
	for (int64_t qc = 0; qc < j->tn;) {
		int64_t ih = oh * v->s[1] + offh;
		const uint32_t *row = ih >= 0 && ih < H ? plane + ih * W : NULL;
		int64_t seg = ML_MIN(OW - ow, j->tn - qc);
		for (int64_t done = 0; done < seg;) {
			int c = (int)ML_MIN(ML_MIN((int64_t)16, seg - done), ML_BF_NR - qc % ML_BF_NR);
			__m512i x = bf_load32(row, W, ow + done, offw, s, c);
			_mm512_mask_storeu_epi32(base + qc / ML_BF_NR * (pstride / 2) + qc % ML_BF_NR,
						 (__mmask16)((1u << c) - 1), x);
			done += c;
			qc += c;
		}
		ow += seg;
		if (ow == OW) {
			ow = 0;
			oh++;
		}
	}
	if (j->tn % ML_BF_NR != 0) {
		uint32_t *dst = base + j->tn / ML_BF_NR * (pstride / 2);
		for (int64_t c = j->tn % ML_BF_NR; c < ML_BF_NR; c++)
			dst[c] = 0;
	}
}

/*
 * The fused variant, where the columns make enough panels for every
 * thread: an item packs a run of columns into its thread's scratch and
 * multiplies all output channels by it at once, so the packed columns go
 * from the packing to the GEMM in the thread's own cache.
 */
struct bf_fused_job {
	const struct ml_conv3 *v;
	const float *x, *bias, *z;
	const uint16_t *w;
	float *y;
	const struct ml_conv_epi *e;
	int64_t k, cols;
	bool pointwise;
	_Atomic int failed;
	const uint32_t *xp;
	int64_t xps, cp;
};

static void
bf_fused_items(void *ctx, int64_t b, int64_t e)
{
	struct bf_fused_job *f = ctx;
	const struct ml_conv3 *v = f->v;

	for (int64_t it = b; it < e; it++) {
		int64_t c0 = it * f->cols, cur = ML_MIN(f->cols, v->outsz - c0);
		uint16_t *col = ml_cpu_scratch(3, sizeof(uint16_t) *
						      (size_t)ml_bf16_packed_len(f->k, cur));
		if (col == NULL) {
			f->failed = 1;
			return;
		}
		struct bf_col_job pj = { v, f->x, col, c0, cur, f->k, 0, 0, true, f->pointwise,
					 f->xp, f->xps, f->cp };
		for (int64_t q = 0; q < (f->k + 1) / 2; q++) {
			if (f->cp > 0)
				bf_cpair_dp(&pj, q);
			else
				bf_pair_dp(&pj, q);
		}
		ml_bf16_gemm_here(v->mg, cur, f->k, f->w, f->k, col, f->bias, f->y + c0, v->outsz);
		if (f->e != NULL)
			ml_fused_tile_epi(f->y + c0, v->mg, cur, v->outsz, NULL,
					  f->z != NULL ? f->z + c0 : NULL, f->e->act, f->e->lo,
					  f->e->hi);
	}
}
#endif

static void
bf_col_pairs(void *ctx, int64_t b, int64_t e)
{
	struct bf_col_job *j = ctx;
	int64_t kp = (j->k + 1) / 2;

#ifdef HAVE_BF_IM2COL
	if (j->fast) {
		for (int64_t q = b; q < e; q++) {
			if (j->cp > 0)
				bf_cpair_dp(j, q);
			else
				bf_pair_dp(j, q);
		}
		return;
	}
#endif
	float *tmp = ml_cpu_scratch(3, sizeof(float) * (size_t)(2 * j->tn));
	if (tmp == NULL) {
		j->failed = 1;
		return;
	}
	for (int64_t q = b; q < e; q++) {
		int64_t r0 = 2 * q, r1 = ML_MIN(r0 + 2, j->k);
		struct im2col_job ij = { j->v, j->x, tmp, j->p0, j->tn, j->tn, 0, j->tn, j->xstride,
					 r0 };
		im2col_rows(&ij, r0, r1);
		ml_bf16_pack_pair(j->col + q * 2 * ML_BF_NR, kp * 2 * ML_BF_NR, tmp,
				  r1 - r0 > 1 ? tmp + j->tn : NULL, j->tn);
	}
}

bool
ml_conv_bf16_cpair_ok(const struct ml_conv3 *v)
{
#ifdef HAVE_BF_IM2COL
	/* a pointwise convolution reads each input once: converting as it packs is cheaper */
	return ml_bf16_path() >= ML_BF16_DP && v->ksz > 1 && v->group == 1 && v->in[0] == 1 &&
	       v->k[0] == 1 &&
	       v->out[0] == 1 && v->p[0] == 0 && (v->s[2] == 1 || v->s[2] == 2);
#else
	(void)v;
	return false;
#endif
}

/* cpair_items: channel pairs [b, e) of an image rounded to bf16 pairs (x's planes 2i, 2i + 1) */
struct cpair_job {
	const struct ml_conv3 *v;
	const float *x;
	uint32_t *xp;
	int64_t xps;
};

static void
cpair_items(void *ctx, int64_t b, int64_t e)
{
	const struct cpair_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	for (int64_t i = b; i < e; i++)
		ml_bf16_pack_pair((uint16_t *)(j->xp + i * j->xps), 2 * ML_BF_NR,
				  j->x + 2 * i * v->insz,
				  2 * i + 1 < v->cin ? j->x + (2 * i + 1) * v->insz : NULL, v->insz);
}

int
ml_conv_bf16(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const uint16_t *w,
	     bool cpair, const float *bias, const struct ml_conv_epi *e, float *y)
{
	int64_t K = v->cg * v->ksz, K1;
	/* channel pairs: the input rounded to pairs once, K in (kernel offset, channel) order */
	int64_t ncp = cpair ? (v->cin + 1) / 2 : 0, xps = (v->insz + ML_BF_NR - 1) / ML_BF_NR * ML_BF_NR;
	uint32_t *xp = NULL;
	if (cpair) {
		K = v->ksz * 2 * ncp;
		size_t xsz = sizeof(uint32_t) * (size_t)(ncp * xps);
		if ((xp = ml_cpu_scratch(1, xsz)) == NULL)
			return ml_opfail(c, ML_ENOMEM, "cannot allocate %zu bytes for bf16 pairs", xsz);
	}
	K1 = ML_MAX(K, 1);
	/* column tiles whose packed columns (K x tn bf16) stay within 1 MB, 32 wide */
	int64_t tmax = ML_MAX((int64_t)(1 << 19) / K1 / ML_BF_NR * ML_BF_NR, (int64_t)ML_BF_NR);
	int64_t ntiles = (v->outsz + tmax - 1) / tmax;
	int64_t tn = ((v->outsz + ntiles - 1) / ntiles + ML_BF_NR - 1) / ML_BF_NR * ML_BF_NR;
	size_t csz = sizeof(uint16_t) * (size_t)ml_bf16_packed_len(K, tn);
	uint16_t *col = ml_cpu_scratch(0, csz);
	if (col == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate %zu bytes for im2col", csz);
	int64_t xs = v->cin * v->insz, ys = v->cout * v->outsz;
	/* 2-D windows at column stride 1 or 2 pack straight to bf16 (bf_pair_dp) */
	bool fast = cpair;
#ifdef HAVE_BF_IM2COL
	fast = ml_bf16_path() >= ML_BF16_DP && v->in[0] == 1 && v->k[0] == 1 &&
	       v->out[0] == 1 && v->p[0] == 0 && (v->s[2] == 1 || v->s[2] == 2);
#endif
	ML_ASSERT(!cpair || (fast && v->group == 1));
	bool pointwise = v->ksz == 1;
	for (int i = 0; i < 3; i++)
		if (v->s[i] != 1 || v->p[i] != 0 || v->pe[i] != 0 || v->in[i] != v->out[i])
			pointwise = false;
	int64_t nt = ml_get_threads(), npan = (v->outsz + ML_BF_NR - 1) / ML_BF_NR;
	/* runs of panels: 4 per thread, their packing within 512 KB */
	int64_t ppi = ML_MIN((npan + 4 * nt - 1) / (4 * nt), ML_MAX(1, 4096 / ((K + 1) / 2)));
	bool fused = fast && npan >= 2 * nt;
	(void)fused, (void)ppi;	/* without the AVX-512 packing: the tile path only */
	for (int64_t n = 0; n < v->n; n++)
		for (int64_t g = 0; g < v->group; g++) {
			const float *xg = x + n * xs + g * v->cg * v->insz;
			const uint16_t *wg = w + g * v->mg * K;
			if (cpair) {
				struct cpair_job cj = { v, xg, xp, xps };
				ml_parallel_for(ncp, ML_MAX(1, 16384 / xps), cpair_items, &cj);
			}
#ifdef HAVE_BF_IM2COL
			if (fused) {
				float *yg = y + n * ys + g * v->mg * v->outsz;
				struct bf_fused_job f = {
					v, xg, bias != NULL ? bias + g * v->mg : NULL,
					e != NULL && e->z != NULL ? e->z + (yg - y) : NULL, wg, yg, e,
					K, ppi * ML_BF_NR, pointwise, 0, xp, xps, ncp };
				int64_t nit = (v->outsz + f.cols - 1) / f.cols;
				ml_parallel_for(nit, 1, bf_fused_items, &f);
				if (f.failed)
					return ml_opfail(c, ML_ENOMEM, "out of memory packing columns");
				continue;
			}
#endif
			float *yg = y + n * ys + g * v->mg * v->outsz;
			const float *bg = bias != NULL ? bias + g * v->mg : NULL;
			const float *zg = e != NULL && e->z != NULL ? e->z + (yg - y) : NULL;
			for (int64_t p0 = 0; p0 < v->outsz; p0 += tn) {
				int64_t cur = ML_MIN(tn, v->outsz - p0);
				struct bf_col_job j = { v, xg, col, p0, cur, K, xs, 0, fast,
							pointwise, xp, xps, ncp };
				ml_parallel_for((K + 1) / 2, ML_MAX(1, 8192 / cur), bf_col_pairs, &j);
				if (j.failed)
					return ml_opfail(c, ML_ENOMEM, "out of memory in im2col");
				ml_bf16_gemm(v->mg, cur, K, wg, K, col, bg, yg + p0, v->outsz);
				if (e != NULL)
					epi_tile(e, yg + p0, zg != NULL ? zg + p0 : NULL, v->mg, cur,
						 v->outsz);
			}
		}
	return 0;
}

#ifdef HAVE_BF_IM2COL
/*
 * The bf16 convolution of a small plane (few output positions, many
 * channels: 14x14 and 7x7 layers) as Y^T = im2col(X)^T W^T: the output
 * positions are the GEMM's rows, so its 32-wide panels run over output
 * channels, which fill them, instead of over 49 or 196 positions, which
 * leave a panel a quarter or an eighth empty. The input is rounded to
 * bf16 pairs channels last (xq[pos][channel pair]), so that a row of A is
 * a copy of ksz runs of pairs; the product lands in a [positions, cout]
 * buffer that the store transposes into Y with the bias.
 */
struct bf_rows_job {
	const struct ml_conv3 *v;
	const float *x, *bias;
	uint32_t *xq;
	uint16_t *a;
	float *t, *y;
	int64_t ncp, k2;
	const struct ml_conv_epi *e;	/* FusedConv's residual (z: this image's) and activation */
	const float *z;
};

/*
 * bf_rows_xq: positions [b, e) of xq, 16 at a time: two channels' runs
 * rounded (vcvtneps2bf16) and paired
 */
BF_TARGET static void
bf_rows_xq(void *ctx, int64_t b, int64_t e)
{
	const struct bf_rows_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	uint32_t t[16];
	for (int64_t p0 = b; p0 < e; p0 += 16) {
		int w = (int)ML_MIN(16, e - p0);
		__mmask16 m = (__mmask16)((1u << w) - 1);
		for (int64_t cp = 0; cp < j->ncp; cp++) {
			const float *x0 = j->x + 2 * cp * v->insz + p0;
			__m512i lo = _mm512_cvtepu16_epi32(
				(__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x0)));
			__m512i hi = _mm512_setzero_si512();
			if (2 * cp + 1 < v->cin)
				hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
					_mm512_maskz_loadu_ps(m, x0 + v->insz)));
			_mm512_storeu_si512(t, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
			uint32_t *d = j->xq + p0 * j->ncp + cp;
			for (int i = 0; i < w; i++)
				d[i * j->ncp] = t[i];
		}
	}
}

static void
bf_rows_a(void *ctx, int64_t b, int64_t e)
{
	const struct bf_rows_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	size_t run = sizeof(uint32_t) * (size_t)j->ncp;
	for (int64_t p = b; p < e; p++) {
		int64_t oh = p / v->out[2], ow = p % v->out[2];
		uint32_t *row = (uint32_t *)(j->a + p * j->k2);
		for (int64_t kk = 0; kk < v->ksz; kk++) {
			int64_t ih = oh * v->s[1] - v->p[1] + kk / v->k[2] * v->d[1];
			int64_t iw = ow * v->s[2] - v->p[2] + kk % v->k[2] * v->d[2];
			if (ih < 0 || ih >= v->in[1] || iw < 0 || iw >= v->in[2])
				memset(row + kk * j->ncp, 0, run);
			else
				memcpy(row + kk * j->ncp, j->xq + (ih * v->in[2] + iw) * j->ncp, run);
		}
	}
}

/*
 * bf_rows_store: blocks [b, e) of 16 output channels of Y from T
 * [positions, cout], 16 positions at a time transposed in registers, plus
 * the bias; then FusedConv's residual and activation on those rows while
 * they are in cache.
 */
BF_TARGET static void
bf_rows_store(void *ctx, int64_t b, int64_t e)
{
	const struct bf_rows_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t P = v->outsz;
	for (int64_t mb = b; mb < e; mb++) {
		int64_t m0 = 16 * mb;
		float *y0 = j->y + m0 * P;
		for (int64_t p0 = 0; p0 < P; p0 += 16) {
			int w = (int)ML_MIN(16, P - p0);
			__mmask16 pm = (__mmask16)((1u << w) - 1);
			__m512 r[16];
			for (int i = 0; i < 16; i++)
				r[i] = i < w ? _mm512_loadu_ps(j->t + (p0 + i) * v->cout + m0)
					     : _mm512_setzero_ps();
			tile512_tr16(r);
			for (int c = 0; c < 16; c++) {
				__m512 bm = _mm512_set1_ps(j->bias != NULL ? j->bias[m0 + c] : 0.0f);
				_mm512_mask_storeu_ps(y0 + c * P + p0, pm, _mm512_add_ps(r[c], bm));
			}
		}
		if (j->e != NULL)
			ml_fused_tile_epi(y0, 16, P, P, NULL, j->z != NULL ? j->z + m0 * P : NULL,
					  j->e->act, j->e->lo, j->e->hi);
	}
}
#endif

bool
ml_conv_bf16_rows_ok(const struct ml_conv3 *v)
{
	/*
	 * Whole panels of output channels, and positions that would fill few
	 * panels; not pointwise, whose packing converts as it copies anyway
	 * (measured slower this way on MobileNet-V2's 7x7 and 14x14 layers).
	 */
#ifdef HAVE_BF_IM2COL
	return ml_bf16_path() >= ML_BF16_DP && v->group == 1 && v->in[0] == 1 && v->k[0] == 1 &&
	       v->out[0] == 1 && v->p[0] == 0 && v->outsz <= 256 && v->cout % ML_BF_NR == 0 &&
	       v->cout >= 4 * ML_BF_NR && v->ksz > 1;
#else
	(void)v;
	return false;
#endif
}

int
ml_conv_bf16_rows(struct ml_opctx *c, const struct ml_conv3 *v, const float *x,
		  const uint16_t *bp, const float *bias, const struct ml_conv_epi *e, float *y)
{
#ifdef HAVE_BF_IM2COL
	int64_t ncp = (v->cin + 1) / 2, k2 = v->ksz * 2 * ncp;
	size_t xqsz = sizeof(uint32_t) * (size_t)(v->insz * ncp);
	size_t asz = sizeof(uint16_t) * (size_t)(v->outsz * k2);
	size_t tsz = sizeof(float) * (size_t)(v->outsz * v->cout);
	uint32_t *xq = ml_cpu_scratch(1, xqsz);
	uint16_t *a = ml_cpu_scratch(0, asz);
	float *t = ml_cpu_scratch(2, tsz);
	if (xq == NULL || a == NULL || t == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate %zu bytes for a bf16 convolution",
				 xqsz + asz + tsz);
	for (int64_t n = 0; n < v->n; n++) {
		float *yn = y + n * v->cout * v->outsz;
		struct bf_rows_job j = { v, x + n * v->cin * v->insz, bias, xq, a, t, yn, ncp, k2,
					 e, e != NULL && e->z != NULL ? e->z + (yn - y) : NULL };
		ml_parallel_for(v->insz, ML_MAX(1, 4096 / ncp), bf_rows_xq, &j);
		ml_parallel_for(v->outsz, ML_MAX(1, 8192 / k2), bf_rows_a, &j);
		ml_bf16_gemm(v->outsz, v->cout, k2, a, k2, bp, NULL, t, v->cout);
		ml_parallel_for(v->cout / 16, ML_MAX(1, 1024 / v->outsz), bf_rows_store, &j);
	}
	return 0;
#else
	/* ml_conv_bf16_rows_ok is false without AVX-512's packing */
	(void)v, (void)x, (void)bp, (void)bias, (void)e, (void)y;
	return ml_opfail(c, ML_ENOTSUP, "the bf16 small-plane convolution needs AVX-512");
#endif
}

/*
 * Tiny outputs (ROWS_MAX positions in all or fewer: DenseNet's 2x2 layers
 * at batch 1) of one group with a constant weight: the positions are the
 * rows of the product, Y^T [N P, M] = im2col rows [N P, C kH kW] times
 * W^T, W^T packed in the SGEMM's panels once per session, which
 * FusedMatMul's kernel streams once for all the rows (the bias, Z^T and the
 * activation in its epilogue); then Y^T back to [N, M, P]. Against NCHW's
 * products, whose 16- or 32-wide panels of positions would be mostly empty,
 * 1.7 to 2 times faster (a 1x1 1024 -> 128 and a 3x3 128 -> 32 on 2x2);
 * with 16 rows the tiled SGEMM it falls to loses to those (a 4x4 plane: 2
 * times slower), hence the bound. ML_CONV_ROWS=0 turns it off.
 */
#define ROWS_MAX 8

struct rows_job {
	const struct ml_conv3 *v;
	const float *x, *z;
	float *a, *zt, *yt, *y;
	int64_t K;
};

/*
 * rows_im2col: rows [b, e) (image n, position p) of the im2col rows, (c, kh,
 * kw) order: each tap's offset in a channel plane found once per row (-1
 * where it reads padding), then the channels copied through them.
 */
#define ROWS_TAPS 64

static void
rows_im2col(void *ctx, int64_t b, int64_t e)
{
	const struct rows_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t H = v->in[1], W = v->in[2], KH = v->k[1], KW = v->k[2], T = KH * KW;
	int64_t off[ROWS_TAPS];

	for (int64_t r = b; r < e; r++) {
		int64_t n = r / v->outsz, p = r % v->outsz, oh = p / v->out[2], ow = p % v->out[2];
		float *dst = j->a + r * j->K;
		const float *xn = j->x + n * v->cin * v->insz;
		bool taps = T <= ROWS_TAPS;
		for (int64_t t = 0; taps && t < T; t++) {
			int64_t ih = oh * v->s[1] - v->p[1] + t / KW * v->d[1];
			int64_t iw = ow * v->s[2] - v->p[2] + t % KW * v->d[2];
			off[t] = ih >= 0 && ih < H && iw >= 0 && iw < W ? ih * W + iw : -1;
		}
		if (T == 1 && off[0] >= 0) {
			/* a 1x1 window inside the plane: a strided copy */
			for (int64_t ci = 0; ci < v->cin; ci++)
				dst[ci] = xn[ci * v->insz + off[0]];
			continue;
		}
		for (int64_t ci = 0; ci < v->cin; ci++) {
			const float *xp = xn + ci * v->insz;
			if (taps) {
				for (int64_t t = 0; t < T; t++)
					*dst++ = off[t] >= 0 ? xp[off[t]] : 0.0f;
				continue;
			}
			for (int64_t kh = 0; kh < KH; kh++) {
				int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
				for (int64_t kw = 0; kw < KW; kw++) {
					int64_t iw = ow * v->s[2] - v->p[2] + kw * v->d[2];
					*dst++ = ih >= 0 && ih < H && iw >= 0 && iw < W ? xp[ih * W + iw]
											: 0.0f;
				}
			}
		}
	}
}

/* rows_zt, rows_y: Z [N, M, P] into Z^T rows [N P, M], Y^T rows back into Y (images [b, e)) */
static void
rows_swap(const struct rows_job *j, float *dst, const float *src, bool to_rows, int64_t b,
	  int64_t e)
{
	int64_t M = j->v->cout, P = j->v->outsz;
	for (int64_t n = b; n < e; n++)
		for (int64_t m = 0; m < M; m++)
			for (int64_t p = 0; p < P; p++) {
				int64_t r = (n * P + p) * M + m, c = (n * M + m) * P + p;
				dst[to_rows ? r : c] = src[to_rows ? c : r];
			}
}

static void
rows_zt(void *ctx, int64_t b, int64_t e)
{
	const struct rows_job *j = ctx;
	rows_swap(j, j->zt, j->z, true, b, e);
}

static void
rows_y(void *ctx, int64_t b, int64_t e)
{
	const struct rows_job *j = ctx;
	rows_swap(j, j->y, j->yt, false, b, e);
}

/* conv_rows: the small-plane product above; 1 when it does not apply (nothing done) */
static int
conv_rows(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *bias,
	  const struct ml_conv_epi *e, float *y)
{
	if (v->group != 1 || v->n * v->outsz > ROWS_MAX || v->in[0] != 1 || v->k[0] != 1 ||
	    !ml_pgemm_ok() || !ml_cpu_wconst(c))
		return 1;
	const char *env = getenv("ML_CONV_ROWS");
	if (env != NULL && strcmp(env, "0") == 0)
		return 1;
	int64_t K = v->cin * v->ksz, M = v->cout, R = v->n * v->outsz;
	const float *bp = ml_cpu_wpanels(c, K, M, true);
	struct rows_job j = { v, x, e != NULL ? e->z : NULL, NULL, NULL, NULL, y, K };
	if (bp == NULL ||
	    (j.a = ml_cpu_scratch(0, sizeof(float) * (size_t)(R * K))) == NULL ||
	    (j.yt = ml_cpu_scratch(1, sizeof(float) * (size_t)(R * M))) == NULL ||
	    (j.z != NULL && (j.zt = ml_cpu_scratch(3, sizeof(float) * (size_t)(R * M))) == NULL))
		return ml_opfail(c, ML_ENOMEM, "out of memory for a small-plane convolution");
	ml_parallel_for(R, ML_MAX(1, 2048 / ML_MAX(K, 1)), rows_im2col, &j);
	if (j.z != NULL)
		ml_parallel_for(v->n, 1, rows_zt, &j);
	ml_cpu_fmm_panels(R, K, M, j.a, bp, bias, j.zt, j.yt, e != NULL ? e->act : ML_ACT_NONE,
			  e != NULL ? e->lo : -INFINITY, e != NULL ? e->hi : INFINITY);
	ml_parallel_for(v->n, 1, rows_y, &j);
	return 0;
}

static int
conv_f32(struct ml_opctx *c, const struct ml_conv3 *v)
{
	const float *x = c->in[0]->data, *w = c->in[1]->data;
	const float *bias = ML_IN(c, 2) != NULL ? c->in[2]->data : NULL;
	float *y = c->out[0]->data;
	int64_t K = v->cg * v->ksz;

	if (v->outsz == 0 || v->n == 0 || v->cout == 0)
		return 0;
	/* batches of few output channels, not depthwise (training a small CNN): train_conv.c */
	if (v->n >= 2 && (v->group == 1 || v->cg > 1) && ml_train_conv_ok(v))
		return ml_train_conv_fwd(c, v, ml_train_conv_mode(c->node, v), x, w, bias, y);
	int rc = conv_rows(c, v, x, bias, NULL, y);
	if (rc <= 0)
		return rc;
	/* pointwise, one group: fused_mm.c's kernel (images: column tiles of one job) */
	if (v->ksz == 1 && v->group == 1 && (rc = ml_cpu_fconv_fast(c)) <= 0)
		return rc;
	if (v->cg == 1 && v->in[0] == 1 && v->k[0] == 1 && v->out[0] == 1 &&
	    v->p[0] == 0) {
		struct dw_job j = { v, x, w, bias, y };
		int64_t work = v->outsz * v->ksz;
		ml_parallel_for(v->n * v->cout, ML_MAX(1, 32768 / ML_MAX(work, 1)), dw_planes, &j);
		return 0;
	}
	if (ml_direct_ok(v))
		return ml_direct_conv(c, v, x, w, bias, NULL, y);
	if (ml_wino_ok(v))
		return ml_wino_conv(c, v, x, w, bias, NULL, y);
	if (ml_tflat_ok(v))
		return ml_tflat_conv(c, v, x, w, bias, NULL, y);
	if (ml_flat_ok(v))
		return ml_flat_conv(c, v, x, w, bias, NULL, y);
	/* a few output columns would fill little of ml_pgemm's 32-wide panels: BLAS's GEMV wins */
	if (ml_pgemm_ok() && v->outsz >= 16)
		return conv_pgemm(c, v, x, w, bias, NULL, y);
	fill_bias(y, bias, v->n, v->cout, v->outsz);
	bool pointwise = v->ksz == 1;
	for (int i = 0; i < 3; i++)
		if (v->s[i] != 1 || v->p[i] != 0 || v->in[i] != v->out[i])
			pointwise = false;
	int64_t tn = v->outsz;
	float *col = NULL;
	if (!pointwise) {
		if (K * tn > COL_MAX)
			tn = ML_MIN(tn, ML_MAX(COL_MAX / ML_MAX(K, 1), 64));
		col = ml_cpu_scratch(0, sizeof(float) * (size_t)(K * tn));
		if (col == NULL)
			return ml_opfail(c, ML_ENOMEM, "cannot allocate %lld bytes for im2col",
					 (long long)(K * tn * 4));
	}
	for (int64_t n = 0; n < v->n; n++)
		for (int64_t g = 0; g < v->group; g++) {
			const float *xg = x + (n * v->cin + g * v->cg) * v->insz;
			const float *wg = w + g * v->mg * K;
			float *yg = y + (n * v->cout + g * v->mg) * v->outsz;
			if (pointwise) {
				if (!ml_sgemm(false, false, v->mg, v->outsz, K, 1.0f, wg, K, xg,
					      v->insz, 1.0f, yg, v->outsz))
					return ml_opfail(c, ML_ENOTSUP, "sizes exceed BLAS's range");
				continue;
			}
			for (int64_t p0 = 0; p0 < v->outsz; p0 += tn) {
				int64_t cur = ML_MIN(tn, v->outsz - p0);
				struct im2col_job j = { v, xg, col, p0, cur, cur, 0, cur, 0, 0 };
				ml_parallel_for(K, ML_MAX(1, 16384 / cur), im2col_rows, &j);
				if (!ml_sgemm(false, false, v->mg, cur, K, 1.0f, wg, K, col, cur, 1.0f,
					      yg + p0, v->outsz))
					return ml_opfail(c, ML_ENOTSUP, "sizes exceed BLAS's range");
			}
		}
	return 0;
}

/* Direct f64 convolution: the reference loop nest. */
static void
conv_f64(const struct ml_conv3 *v, const double *x, const double *w, const double *bias,
	 double *y)
{
	for (int64_t n = 0; n < v->n; n++)
		for (int64_t oc = 0; oc < v->cout; oc++) {
			int64_t g = oc / v->mg;
			double *yp = y + (n * v->cout + oc) * v->outsz;
			for (int64_t od = 0; od < v->out[0]; od++)
			for (int64_t oh = 0; oh < v->out[1]; oh++)
			for (int64_t ow = 0; ow < v->out[2]; ow++) {
				double s = bias != NULL ? bias[oc] : 0.0;
				for (int64_t ci = 0; ci < v->cg; ci++) {
					const double *xp = x + (n * v->cin + g * v->cg + ci) * v->insz;
					const double *wp = w + (oc * v->cg + ci) * v->ksz;
					for (int64_t kd = 0; kd < v->k[0]; kd++) {
						int64_t id = od * v->s[0] - v->p[0] + kd * v->d[0];
						if (id < 0 || id >= v->in[0])
							continue;
						for (int64_t kh = 0; kh < v->k[1]; kh++) {
							int64_t ih = oh * v->s[1] - v->p[1] + kh * v->d[1];
							if (ih < 0 || ih >= v->in[1])
								continue;
							for (int64_t kw = 0; kw < v->k[2]; kw++) {
								int64_t iw = ow * v->s[2] - v->p[2] +
									     kw * v->d[2];
								if (iw < 0 || iw >= v->in[2])
									continue;
								s += xp[(id * v->in[1] + ih) * v->in[2] + iw] *
								     wp[(kd * v->k[1] + kh) * v->k[2] + kw];
							}
						}
					}
				}
				yp[(od * v->out[1] + oh) * v->out[2] + ow] = s;
			}
		}
}

int
ml_cpu_conv(struct ml_opctx *c)
{
	struct ml_conv3 v;
	int rc;

	/* a bf16 weight (mlquant --dtype bf16): bf16.c */
	if ((rc = ml_cpu_bf16_run(c)) <= 0)
		return rc;
	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_conv);
	ML_TRY(ml_cpu_conv3(c, &v));
	switch (c->in[0]->dtype) {
	case ML_F32:
		return conv_f32(c, &v);
	case ML_F64:
		conv_f64(&v, c->in[0]->data, c->in[1]->data,
			 ML_IN(c, 2) != NULL ? c->in[2]->data : NULL, c->out[0]->data);
		return 0;
	default:
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported",
				 ml_dtype_name(c->in[0]->dtype));
	}
}

int
ml_cpu_fconv_conv(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *w = c->in[1], *b = ML_IN(c, 2), *z = ML_IN(c, 3);
	struct ml_tval *y = c->out[0];
	struct ml_conv3 v;

	if (x->dtype != ML_F32 || w->dtype != ML_F32 || y->dtype != ML_F32 ||
	    (b != NULL && (b->dtype != ML_F32 || ml_tval_numel(b) != w->dims[0])) ||
	    (z != NULL && (z->dtype != ML_F32 || ml_tval_numel(z) != ml_tval_numel(y))) ||
	    ml_cpu_conv3(c, &v) < 0 || v.outsz == 0 || v.n == 0 || v.cout == 0)
		return 1;
	struct ml_conv_epi e = { .z = z != NULL ? z->data : NULL, .act = ml_fused_act(c->node) };
	e.lo = (float)ml_attr_float(c->node, "clip_min", -INFINITY);
	e.hi = (float)ml_attr_float(c->node, "clip_max", INFINITY);
	const float *bias = b != NULL ? b->data : NULL;
	/* conv_f32's choice, where the kernel has the epilogue */
	bool train = v.n >= 2 && (v.group == 1 || v.cg > 1) && ml_train_conv_ok(&v);
	bool dw = v.cg == 1 && v.in[0] == 1 && v.k[0] == 1 && v.out[0] == 1 && v.p[0] == 0;
	int rc;
	if (!train && !dw && (rc = conv_rows(c, &v, x->data, bias, &e, y->data)) <= 0)
		return rc;
	/* pointwise, one group: fused_mm.c's kernel, with the epilogue (1: not that case) */
	if ((rc = ml_cpu_fconv_fast(c)) <= 0)
		return rc;
	if (train || dw)
		return 1;
	if (ml_direct_ok(&v))
		return ml_direct_conv(c, &v, x->data, w->data, bias, &e, y->data);
	if (ml_wino_ok(&v))
		return ml_wino_conv(c, &v, x->data, w->data, bias, &e, y->data);
	if (ml_tflat_ok(&v))
		return ml_tflat_conv(c, &v, x->data, w->data, bias, &e, y->data);
	if (ml_flat_ok(&v))
		return ml_flat_conv(c, &v, x->data, w->data, bias, &e, y->data);
	if (ml_pgemm_ok() && v.outsz >= 16)
		return conv_pgemm(c, &v, x->data, w->data, bias, &e, y->data);
	return 1;
}

/*
 * col2im for ConvTranspose: rows of the column matrix are (output
 * channel, kernel offset) and columns input positions [p0, p0 + tn);
 * each adds into the output position it lands on. The job splits over
 * output channels, so no two chunks write the same plane.
 */
struct col2im_job {
	const struct ml_conv3 *v;	/* in/out as the forward conv: in = Y's, out = X's */
	const float *col;
	float *y;			/* the group's first output plane */
	int64_t p0, tn;
};

static void
col2im_chans(void *ctx, int64_t m0, int64_t m1)
{
	const struct col2im_job *j = ctx;
	const struct ml_conv3 *v = j->v;
	/* Y's sizes (the forward conv's input) and X's (the forward conv's output) */
	int64_t W = v->in[2], H = v->in[1], D = v->in[0];
	int64_t XW = v->out[2], XH = v->out[1];

	for (int64_t m = m0; m < m1; m++)
		for (int64_t kk = 0; kk < v->ksz; kk++) {
			int64_t kw = kk % v->k[2], kh = kk / v->k[2] % v->k[1];
			int64_t kd = kk / (v->k[2] * v->k[1]);
			const float *src = j->col + (m * v->ksz + kk) * j->tn;
			float *yc = j->y + m * v->insz;
			int64_t off = kw * v->d[2] - v->p[2];
			for (int64_t p = j->p0, end = j->p0 + j->tn; p < end;) {
				int64_t iw0 = p % XW, t = p / XW, ih = t % XH, id = t / XH;
				int64_t run = ML_MIN(XW - iw0, end - p);
				int64_t od = id * v->s[0] - v->p[0] + kd * v->d[0];
				int64_t oh = ih * v->s[1] - v->p[1] + kh * v->d[1];
				if (od >= 0 && od < D && oh >= 0 && oh < H) {
					float *row = yc + (od * H + oh) * W;
					int64_t lo, hi, s = v->s[2];
					ml_valid_range(off, s, W, XW, &lo, &hi);
					lo = ML_MIN(ML_MAX(lo, iw0), iw0 + run);
					hi = ML_MIN(ML_MAX(hi, lo), iw0 + run);
					const float *q = src - iw0;
					for (int64_t iw = lo; iw < hi; iw++)
						row[iw * s + off] += q[iw];
				}
				src += run;
				p += run;
			}
		}
}

/*
 * ml_conv3 for ConvTranspose in forward terms: swap the roles of X and Y
 * so that "in" is Y's spatial size and "out" X's, which is how col2im
 * walks the positions. cg is X's channels per group, mg Y's.
 */
static void
transpose_view(const struct ml_conv3 *t, struct ml_conv3 *f)
{
	*f = *t;
	for (int i = 0; i < 3; i++) {
		f->in[i] = t->out[i];
		f->out[i] = t->in[i];
	}
	f->insz = t->outsz;
	f->outsz = t->insz;
}

static int
convt_f32(struct ml_opctx *c, const struct ml_conv3 *t)
{
	const float *x = c->in[0]->data, *w = c->in[1]->data;
	const float *bias = ML_IN(c, 2) != NULL ? c->in[2]->data : NULL;
	float *y = c->out[0]->data;
	struct ml_conv3 v;
	int64_t R = t->mg * t->ksz;	/* rows of the column matrix */

	transpose_view(t, &v);
	fill_bias(y, bias, t->n, t->cout, t->outsz);
	if (t->insz == 0 || t->n == 0 || R == 0)
		return 0;
	int64_t tn = t->insz;
	if (R * tn > COL_MAX)
		tn = ML_MIN(tn, ML_MAX(COL_MAX / R, 64));
	float *col = ml_cpu_scratch(0, sizeof(float) * (size_t)(R * tn));
	if (col == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate %lld bytes for col2im",
				 (long long)(R * tn * 4));
	for (int64_t n = 0; n < t->n; n++)
		for (int64_t g = 0; g < t->group; g++) {
			const float *xg = x + (n * t->cin + g * t->cg) * t->insz;
			const float *wg = w + g * t->cg * R;
			float *yg = y + (n * t->cout + g * t->mg) * t->outsz;
			for (int64_t p0 = 0; p0 < t->insz; p0 += tn) {
				int64_t cur = ML_MIN(tn, t->insz - p0);
				if (!ml_sgemm(true, false, R, cur, t->cg, 1.0f, wg, R, xg + p0, t->insz,
					      0.0f, col, cur))
					return ml_opfail(c, ML_ENOTSUP, "sizes exceed BLAS's range");
				struct col2im_job j = { &v, col, yg, p0, cur };
				ml_parallel_for(t->mg, ML_MAX(1, 16384 / (cur * t->ksz)), col2im_chans,
						&j);
			}
		}
	return 0;
}

/* Direct f64 ConvTranspose: each input element scatters through the kernel. */
static void
convt_f64(const struct ml_conv3 *v, const double *x, const double *w, const double *bias,
	  double *y)
{
	for (int64_t i = 0; i < v->n * v->cout; i++)
		for (int64_t j = 0; j < v->outsz; j++)
			y[i * v->outsz + j] = bias != NULL ? bias[i % v->cout] : 0.0;
	for (int64_t n = 0; n < v->n; n++)
		for (int64_t ci = 0; ci < v->cin; ci++) {
			int64_t g = ci / v->cg;
			const double *xp = x + (n * v->cin + ci) * v->insz;
			for (int64_t m = 0; m < v->mg; m++) {
				const double *wp = w + (ci * v->mg + m) * v->ksz;
				double *yp = y + (n * v->cout + g * v->mg + m) * v->outsz;
				for (int64_t id = 0; id < v->in[0]; id++)
				for (int64_t ih = 0; ih < v->in[1]; ih++)
				for (int64_t iw = 0; iw < v->in[2]; iw++) {
					double xv = xp[(id * v->in[1] + ih) * v->in[2] + iw];
					for (int64_t kd = 0; kd < v->k[0]; kd++) {
						int64_t od = id * v->s[0] - v->p[0] + kd * v->d[0];
						if (od < 0 || od >= v->out[0])
							continue;
						for (int64_t kh = 0; kh < v->k[1]; kh++) {
							int64_t oh = ih * v->s[1] - v->p[1] + kh * v->d[1];
							if (oh < 0 || oh >= v->out[1])
								continue;
							for (int64_t kw = 0; kw < v->k[2]; kw++) {
								int64_t ow = iw * v->s[2] - v->p[2] +
									     kw * v->d[2];
								if (ow < 0 || ow >= v->out[2])
									continue;
								yp[(od * v->out[1] + oh) * v->out[2] + ow] +=
									xv * wp[(kd * v->k[1] + kh) *
										v->k[2] + kw];
							}
						}
					}
				}
			}
		}
}

int
ml_cpu_conv_transpose(struct ml_opctx *c)
{
	struct ml_conv3 v;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_conv_transpose);
	ML_TRY(ml_cpu_conv3(c, &v));
	switch (c->in[0]->dtype) {
	case ML_F32:
		return convt_f32(c, &v);
	case ML_F64:
		convt_f64(&v, c->in[0]->data, c->in[1]->data,
			  ML_IN(c, 2) != NULL ? c->in[2]->data : NULL, c->out[0]->data);
		return 0;
	default:
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported",
				 ml_dtype_name(c->in[0]->dtype));
	}
}
