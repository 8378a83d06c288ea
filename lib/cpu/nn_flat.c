/*
 * nn_flat.c: the f32 2-D convolution of one group (any window, stride 1
 * or 2, any padding, no dilation) as an implicit GEMM: the input is copied
 * once into zero-padded planes and the product reads its rows there, in
 * place, instead of from an im2col matrix (K = 9 cin rows of the whole
 * plane for a 3x3 window: writing and reading it cost as much as the
 * product on ResNet's 14x14 and 7x7 layers).
 *
 * The padded plane of a channel is laid out so that every output position
 * has one flat offset f = oh * Wq + ow, and the input under tap (kh, kw)
 * is at f plus a constant: with stride 1 the plane is the padded input,
 * rows Wq = OW + KW - 1 wide, less the padding columns that a row's right
 * edge and the next row's left can share; with stride 2 it is cut into four phase
 * planes (even and odd rows by even and odd columns: Q_ab[i][j] =
 * X[2i + a][2j + b]), so that tap (kh, kw) reads phase (kh % 2, kw % 2)
 * at (kh / 2) Wq + kw / 2, again a contiguous run of f. The product is
 * then Y (flat) = W [cout, cin KH KW] times B, where B's row (ci, kh, kw)
 * is that run: ml_pgemm_rows (nn_gemm.c's 12 x 32 micro-kernel, B's rows
 * by offset) reads it where it lies. The Wq - OW junk columns of each row
 * are computed and dropped when the flat result is copied to Y, with the
 * bias and a FusedConv's residual and activation. The images of a batch
 * follow each other in the planes (image stride PS per phase), so their
 * positions are columns of one GEMM and the filter is read once for
 * several images.
 *
 * Every thread of the product pads the planes into a buffer of its own
 * (ml_pgemm_own) rather than each padding some channels for all: the
 * threads split C by rows, so each reads all of B, and the lines another
 * core had written missed in its cache on every pass over a panel
 * (ResNet-18's 64 -> 128 stride-2 layer alone 604 -> 446 us, the model 3%
 * and DenseNet-121 5% faster; 2 threads, Xeon AMX). The copy is one pass
 * over the input per thread. Products of 16 columns or fewer
 * (ml_pgemm_narrow) and the portable loop keep one shared copy.
 *
 * It needs AVX-512 or AVX2 with FMA (ml_pgemm_rows_ok: the 12 x 32 or the
 * 6 x 16 micro-kernel); elsewhere the convolutions go through im2col and
 * BLAS. ML_CONV_FLAT=c forces a portable loop over the same planes
 * (tests), ML_CONV_FLAT=0 turns the path off.
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

/* The flat result of one GEMM (cout x images' columns) is kept near this many floats. */
#define FLAT_OUT_MAX ((int64_t)1 << 21)
/*
 * The most floats one image's planes, or its flat result, may take (64 MB):
 * larger images (segmentation at full resolution) go through im2col, whose
 * column tiles stay bounded, rather than double their activations here.
 */
#define FLAT_IMAGE_MAX ((int64_t)1 << 24)
/* The largest window side. */
#define FLAT_MAX_K 11

/* flat_level: 0 off, 1 the portable loop, 2 ml_pgemm_rows; computed once. */
static int
flat_level(void)
{
	/* -1 until known; racing first callers compute the same value */
	static atomic_int level = -1;
	int v = atomic_load_explicit(&level, memory_order_relaxed);

	if (v < 0) {
		const char *e = getenv("ML_CONV_FLAT");
		v = ml_pgemm_rows_ok() ? 2 : 0;
		if (e != NULL && strcmp(e, "c") == 0)
			v = 1;
		if (e != NULL && strcmp(e, "0") == 0)
			v = 0;
		atomic_store_explicit(&level, v, memory_order_relaxed);
	}
	return v;
}

/* The layout of the planes for v (see the top of the file). */
struct flat_geom {
	int64_t s, Wq, Hq;	/* stride; a phase plane's row length and rows */
	int64_t PS;		/* floats per image in a phase plane */
	int64_t tail;		/* the most a B row reads past a phase plane's last image */
};

static void
flat_geom(const struct ml_conv3 *v, struct flat_geom *f)
{
	f->s = v->s[1];
	/*
	 * Rows Wq apart, where the last few columns of a row (j >= Wq) that
	 * taps read wrap into the next row's first ones: so that they read
	 * zeros, those must be right padding in every phase, and land in the
	 * next row's left padding (3x3, pad 1: rows W + 1 wide, not W + 2).
	 */
	int64_t full = v->out[2] + (v->k[2] - 1) / f->s, hi_max = 0, lo_min = full;
	for (int64_t b = 0; b < f->s; b++) {
		int64_t lo, hi;
		ml_valid_range(b - v->p[2], f->s, v->in[2], full, &lo, &hi);
		hi_max = ML_MAX(hi_max, hi);
		lo_min = ML_MIN(lo_min, lo);
	}
	f->Wq = ML_MAX(hi_max, full - lo_min);
	f->Hq = v->out[1] + (v->k[1] - 1) / f->s;
	f->PS = f->Hq * f->Wq;
	/* the last GEMM panel reads up to ML_PG_NR - 1 past the columns, plus the largest tap */
	f->tail = ML_PG_NR + (v->k[1] - 1) / f->s * f->Wq + (v->k[2] - 1) / f->s;
}

bool
ml_flat_ok(const struct ml_conv3 *v)
{
	if (flat_level() == 0 || v->group != 1 || v->in[0] != 1 || v->k[0] != 1 ||
	    v->out[0] != 1 || v->p[0] != 0 || v->d[1] != 1 || v->d[2] != 1 ||
	    v->s[1] != v->s[2] || v->s[1] < 1 || v->s[1] > 2 || v->k[1] > FLAT_MAX_K ||
	    v->k[2] > FLAT_MAX_K || v->out[1] < 1 || v->out[2] < 1)
		return false;
	struct flat_geom f;
	flat_geom(v, &f);
	/*
	 * An image's planes and result bounded (B's offsets are int32 too); a
	 * 1x1 window is a copy, or a strided one, and a GEMM: nn_conv.c's paths.
	 */
	return v->ksz > 1 && v->cin * f.s * f.s * (f.PS + f.tail) <= FLAT_IMAGE_MAX &&
	       v->cout * f.PS <= FLAT_IMAGE_MAX;
}

struct flat {
	const struct ml_conv3 *v;
	struct flat_geom g;
	const float *x, *w, *bias;	/* x, y: the first image of the chunk */
	const struct ml_conv_epi *e;
	const float *z;			/* e's residual for the chunk's first image, or NULL */
	float *y, *xp, *cf;
	const int32_t *off;
	int64_t nimg;			/* images in the chunk */
	int64_t CS, PP;			/* floats per channel, per phase plane */
	int64_t N, ldc;			/* GEMM columns, and cf's row length */
};

/* pad_range: the phase planes of channels [b, e) of the chunk's images into xp (zero padding) */
ML_CLONES static void
pad_range(const struct flat *j, float *xp, int64_t b, int64_t e)
{
	const struct ml_conv3 *v = j->v;
	int64_t H = v->in[1], W = v->in[2], s = j->g.s, Wq = j->g.Wq;

	for (int64_t ci = b; ci < e; ci++)
		for (int64_t ph = 0; ph < s * s; ph++) {
			int64_t a = ph / s, bb = ph % s;
			float *q = xp + ci * j->CS + ph * j->PP;
			/* a phase no tap reads (a 1x1 window's odd ones) */
			if (a >= v->k[1] || bb >= v->k[2])
				continue;
			memset(q, 0, sizeof(float) * (size_t)j->PP);
			/* the columns j of a row with 0 <= s j + bb - p < W */
			int64_t lo, hi;
			ml_valid_range(bb - v->p[2], s, W, Wq, &lo, &hi);
			for (int64_t n = 0; n < j->nimg; n++) {
				const float *xc = j->x + (n * v->cin + ci) * v->insz;
				for (int64_t i = 0; i < j->g.Hq; i++) {
					int64_t ih = s * i + a - v->p[1];
					if (ih < 0 || ih >= H)
						continue;
					float *d = q + n * j->g.PS + i * Wq;
					const float *r = xc + ih * W + bb - v->p[2];
					if (s == 1)
						memcpy(d + lo, r + lo, sizeof(float) * (size_t)(hi - lo));
					else
						for (int64_t c = lo; c < hi; c++)
							d[c] = r[2 * c];
				}
			}
		}
}

/* pad_planes: pad_range over the pool, into the planes all threads read */
static void
pad_planes(void *ctx, int64_t b, int64_t e)
{
	const struct flat *j = ctx;
	pad_range(j, j->xp, b, e);
}

/* pad_own: every channel's planes, into a thread's own copy (ml_pgemm_own) */
static void
pad_own(void *ctx, float *xp)
{
	const struct flat *j = ctx;
	pad_range(j, xp, 0, j->v->cin);
}

/*
 * copy_out: planes [b, e) (image b / cout, channel b % cout) of the flat
 * result to Y, junk columns dropped, bias added, then the epilogue.
 */
static void
copy_out(void *ctx, int64_t b, int64_t e)
{
	const struct flat *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t OH = v->out[1], OW = v->out[2];

	for (int64_t it = b; it < e; it++) {
		int64_t n = it / v->cout, m = it % v->cout;
		float bv = j->bias != NULL ? j->bias[m] : 0.0f;
		const float *src = j->cf + m * j->ldc + n * j->g.PS;
		int64_t at = (n * v->cout + m) * v->outsz;
		float *d = j->y + at;
		for (int64_t r = 0; r < OH; r++)
			for (int64_t c = 0; c < OW; c++)
				d[r * OW + c] = src[r * j->g.Wq + c] + bv;
		if (j->e != NULL)
			ml_fused_tile_epi(d, 1, v->outsz, v->outsz, NULL,
					  j->z != NULL ? j->z + at : NULL, j->e->act, j->e->lo, j->e->hi);
	}
}

/*
 * The portable loop (ML_CONV_FLAT=c): output channels [b, e) over all
 * columns, one scaled B row at a time.
 */
ML_CLONES static void
rows_c(void *ctx, int64_t b, int64_t e)
{
	const struct flat *j = ctx;
	int64_t K = j->v->cin * j->v->ksz;

	for (int64_t m = b; m < e; m++) {
		float *c = j->cf + m * j->ldc;
		const float *wm = j->w + m * K;
		memset(c, 0, sizeof(float) * (size_t)j->N);
		for (int64_t k = 0; k < K; k++) {
			const float *r = j->xp + j->off[k];
			float a = wm[k];
			for (int64_t f = 0; f < j->N; f++)
				c[f] += a * r[f];
		}
	}
}

int
ml_flat_conv(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
	     const float *bias, const struct ml_conv_epi *e, float *y)
{
	struct flat j = { .v = v, .w = w, .bias = bias, .e = e };
	int64_t KH = v->k[1], KW = v->k[2], K = v->cin * KH * KW;

	flat_geom(v, &j.g);
	int64_t s = j.g.s;
	/* images per GEMM: as many as keep the flat result and the planes near FLAT_OUT_MAX floats */
	int64_t big = ML_MAX(v->cout, v->cin * s * s) * j.g.PS;
	int64_t per = ML_MAX(1, ML_MIN(v->n, FLAT_OUT_MAX / ML_MAX(big, 1)));
	j.PP = (per * j.g.PS + j.g.tail + 15) / 16 * 16;
	j.CS = s * s * j.PP;
	int64_t ldc_max = (per * j.g.PS + ML_PG_NR - 1) / ML_PG_NR * ML_PG_NR;
	/* the planes: each thread's own (ml_pgemm_own), else one copy, made at first need */
	size_t xbytes = sizeof(float) * (size_t)(v->cin * j.CS);
	int32_t *off = ml_cpu_scratch(1, sizeof(int32_t) * (size_t)ML_MAX(K, 1));
	j.cf = ml_cpu_scratch(2, sizeof(float) * (size_t)(v->cout * ldc_max));
	if (off == NULL || j.cf == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate the convolution's padded planes");
	/* the taps' offsets within a channel, then every channel's */
	for (int64_t kh = 0; kh < KH; kh++)
		for (int64_t kw = 0; kw < KW; kw++)
			off[kh * KW + kw] = (int32_t)(((kh % s) * s + kw % s) * j.PP + kh / s * j.g.Wq +
						      kw / s);
	for (int64_t k = KH * KW; k < K; k++)
		off[k] = off[k - KH * KW] + (int32_t)j.CS;
	j.off = off;
	for (int64_t n0 = 0; n0 < v->n; n0 += per) {
		j.nimg = ML_MIN(per, v->n - n0);
		j.x = x + n0 * v->cin * v->insz;
		j.y = y + n0 * v->cout * v->outsz;
		j.z = e != NULL && e->z != NULL ? e->z + n0 * v->cout * v->outsz : NULL;
		/* the last image's rows past OH are not outputs */
		j.N = (j.nimg - 1) * j.g.PS + v->out[1] * j.g.Wq;
		j.ldc = (j.N + ML_PG_NR - 1) / ML_PG_NR * ML_PG_NR;
		if (flat_level() == 2 && j.N > 16) {
			if (ml_pgemm_own(v->cout, j.N, K, w, K, pad_own, &j, xbytes, 0, off, NULL, j.cf,
					 j.ldc) < 0)
				return ml_opfail(c, ML_ENOMEM,
						 "cannot allocate the convolution's padded planes");
		} else {
			if (j.xp == NULL && (j.xp = ml_cpu_scratch(0, xbytes)) == NULL)
				return ml_opfail(c, ML_ENOMEM,
						 "cannot allocate the convolution's padded planes");
			ml_parallel_for(v->cin, ML_MAX(1, 16384 / j.CS), pad_planes, &j);
			if (flat_level() == 2)
				ml_pgemm_narrow(v->cout, j.N, K, w, K, j.xp, off, NULL, j.cf, j.ldc);
			else
				ml_parallel_for(v->cout, 1, rows_c, &j);
		}
		ml_parallel_for(j.nimg * v->cout, ML_MAX(1, 16384 / ML_MAX(v->outsz, 1)), copy_out,
				&j);
	}
	return 0;
}
