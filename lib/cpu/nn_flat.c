/*
 * nn_flat.c: f32 3x3 convolution, stride 1, padding 1, on small planes
 * with filters up to 1 MB (DenseNet's 128 -> 32 on 16x16 to 2x2 at a
 * 64x64 input, SqueezeNet's 13x13 expands), computed directly, without
 * im2col. There im2col + SGEMM spent as long writing and reading the
 * column matrix (K = 9 * cin rows of the whole plane, a megabyte at 128
 * channels of 16x16) as in the product, and the plane fills few of the
 * GEMM's 32-wide panels; Winograd's transforms do not pay under 32 tiles.
 *
 * Each input plane is copied, zero-padded, into rows Wp = W + 1 wide (a
 * row's right padding is the next row's left; channels CS floats apart,
 * with slack after the plane so that every read below is in bounds). The
 * output at (r, c) is then the sum, over the channels and the nine taps
 * (kh, kw), of the weight by the padded plane at the flat offset
 * r * Wp + c + kh * Wp + kw: one loop over flat offsets f = r * Wp + c
 * serves every row whatever the width, computing one junk column per row
 * (c = W) that is dropped at the store. A work item is a block of 8
 * output channels by 32 flat offsets (16 by 16 on planes up to 8 wide,
 * which round less of the plane up): 16 zmm accumulators, per tap the
 * plane's vectors loaded and the block's weights broadcast from the
 * filter as it is ([cout, cin, 3, 3]). A packed filter (each block's
 * weights in one stream) measured about 12% faster on DenseNet's layers,
 * but packing per call cost more than that on the 4x4 and 2x2 planes, and
 * a packed copy kept per node would add a third of DenseNet's weights; the
 * bias goes in at the store.
 *
 * The AVX-512 kernel is picked at run time (__builtin_cpu_supports); the
 * portable kernel is the same loop nest in plain C (built as target
 * clones). Without AVX-512 the path is off by default (im2col + the AVX2
 * SGEMM, as before); ML_CONV_FLAT=c forces the portable kernel, and
 * ML_CONV_FLAT=0 turns the path off.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <stdatomic.h>

#include "cpu/nn.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_AVX512 1
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define ML_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ML_CLONES
#endif

#define FLAT_ACC 256		/* accumulators of a block: 8 x 32 or 16 x 16 */
#define FLAT_MAX_PLANE 1024	/* the largest padded plane, (H + 2) * (W + 2) floats */
/*
 * The largest filter, in floats (1 MB). Each block of output channels reads
 * its weights once per block of offsets, from L2 where the filter fits;
 * ResNet's 256- and 512-channel layers (2.4 and 9.4 MB) ran no faster or
 * slower than im2col + SGEMM, which reads the filter once.
 */
#define FLAT_MAX_FILTER ((int64_t)1 << 18)

/* flat_level: 0 off, 1 the portable kernel, 2 AVX-512; computed once. */
static int
flat_level(void)
{
	/* -1 until known; racing first callers compute the same value */
	static atomic_int level = -1;
	int v = atomic_load_explicit(&level, memory_order_relaxed);

	if (v < 0) {
		const char *e = getenv("ML_CONV_FLAT");
		v = 0;
#ifdef HAVE_AVX512
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx512f"))
			v = 2;
#endif
		if (e != NULL && strcmp(e, "c") == 0)
			v = 1;
		if (e != NULL && strcmp(e, "0") == 0)
			v = 0;
		atomic_store_explicit(&level, v, memory_order_relaxed);
	}
	return v;
}

bool
ml_flat_ok(const struct ml_conv3 *v)
{
	return flat_level() > 0 && v->group == 1 && v->cin >= 8 && v->cout % 8 == 0 &&
	       v->in[0] == 1 && v->k[0] == 1 && v->out[0] == 1 && v->p[0] == 0 &&
	       v->k[1] == 3 && v->k[2] == 3 && v->s[1] == 1 && v->s[2] == 1 && v->d[1] == 1 &&
	       v->d[2] == 1 && v->p[1] == 1 && v->p[2] == 1 && v->out[1] == v->in[1] &&
	       v->out[2] == v->in[2] && v->in[1] >= 1 && v->in[2] >= 1 &&
	       (v->in[1] + 2) * (v->in[2] + 2) <= FLAT_MAX_PLANE &&
	       v->cout * v->cin * 9 <= FLAT_MAX_FILTER;
}

struct fjob {
	const struct ml_conv3 *v;
	const float *x;		/* the image's input planes */
	float *xp;		/* the padded planes, CS floats apart */
	const float *w, *bias;	/* w: the filter [cout, cin, 3, 3] */
	float *y;		/* the image's output planes */
	int64_t Wp, CS, nfb, nob;
	int64_t foc, fnb;	/* a block: 8 x 32 or 16 x 16 */
	/* the weight of block ob, channel o, tap t, input ci: w[ob * bs + o * os + t * ts + ci * cs] */
	int64_t bs, os, ts, cs;
	int level;
};

/* pad_planes: channels [b, e) of the image into xp, zero-padded (the slack too) */
static void
pad_planes(void *ctx, int64_t b, int64_t e)
{
	const struct fjob *j = ctx;
	int64_t H = j->v->in[1], W = j->v->in[2], Wp = j->Wp;

	for (int64_t ci = b; ci < e; ci++) {
		float *d = j->xp + ci * j->CS;
		const float *s = j->x + ci * H * W;
		memset(d, 0, sizeof(float) * (size_t)j->CS);
		for (int64_t r = 0; r < H; r++)
			memcpy(d + (r + 1) * Wp + 1, s + r * W, sizeof(float) * (size_t)W);
		(void)W;
	}
}

/*
 * store_block: acc (foc channels by fnb flat offsets from f0, row o at
 * acc + o * fnb) to the output positions it holds, bias added.
 */
static void
store_block(const struct fjob *j, int64_t ob, int64_t f0, const float *acc)
{
	int64_t H = j->v->out[1], W = j->v->out[2], osz = j->v->outsz;
	int64_t r0 = f0 / j->Wp, c0 = f0 % j->Wp;

	for (int o = 0; o < j->foc; o++) {
		int64_t oc = ob * j->foc + o;
		float b = j->bias != NULL ? j->bias[oc] : 0.0f;
		float *yo = j->y + oc * osz;
		const float *ao = acc + o * j->fnb;
		int64_t r = r0, c = c0;
		for (int f = 0; f < j->fnb && r < H; f++) {
			if (c < W)
				yo[r * W + c] = ao[f] + b;
			if (++c == j->Wp) {
				c = 0;
				r++;
			}
		}
	}
}

/* The portable kernel: block (ob, fb) of the image. */
ML_CLONES static void
flat_block_c(const struct fjob *j, int64_t ob, int64_t fb)
{
	float acc[FLAT_ACC] = { 0 };
	int64_t Wp = j->Wp, cin = j->v->cin, foc = j->foc, fnb = j->fnb, f0 = fb * fnb;
	const float *wb = j->w + ob * j->bs;

	for (int64_t ci = 0; ci < cin; ci++) {
		const float *xc = j->xp + ci * j->CS + f0;
		const float *wc = wb + ci * j->cs;
		for (int t = 0; t < 9; t++) {
			const float *xs = xc + (t / 3) * Wp + t % 3;
			for (int64_t o = 0; o < foc; o++) {
				float w = wc[o * j->os + t * j->ts];
				for (int64_t f = 0; f < fnb; f++)
					acc[o * fnb + f] += w * xs[f];
			}
		}
	}
	store_block(j, ob, f0, acc);
}

#ifdef HAVE_AVX512
/*
 * FLAT8(NAME, OS_, TS_, CS_): 8 channels by 32 offsets, 16 accumulators, per
 * tap 2 loads and 8 broadcasts; the weight of channel o, tap t, input
 * channel ci at o * OS_ + t * TS_ + ci * CS_ from the block's first.
 */
#define FLAT8(NAME, OS_, TS_, CS_)							\
__attribute__((target("avx512f"))) static void					\
NAME(const struct fjob *j, int64_t ob, int64_t fb)				\
{										\
	__m512 a[8][2];								\
	int64_t Wp = j->Wp, cin = j->v->cin, f0 = fb * 32;			\
	const float *wb = j->w + ob * j->bs;					\
	for (int o = 0; o < 8; o++)						\
		a[o][0] = a[o][1] = _mm512_setzero_ps();			\
	for (int64_t ci = 0; ci < cin; ci++) {					\
		const float *xc = j->xp + ci * j->CS + f0;			\
		const float *wc = wb + ci * (CS_);				\
		for (int t = 0; t < 9; t++) {					\
			const float *xs = xc + (t / 3) * Wp + t % 3;		\
			__m512 x0 = _mm512_loadu_ps(xs), x1 = _mm512_loadu_ps(xs + 16); \
			for (int o = 0; o < 8; o++) {				\
				__m512 w = _mm512_set1_ps(wc[o * (OS_) + t * (TS_)]); \
				a[o][0] = _mm512_fmadd_ps(w, x0, a[o][0]);	\
				a[o][1] = _mm512_fmadd_ps(w, x1, a[o][1]);	\
			}							\
		}								\
	}									\
	float acc[8 * 32];							\
	for (int o = 0; o < 8; o++) {						\
		_mm512_storeu_ps(acc + o * 32, a[o][0]);			\
		_mm512_storeu_ps(acc + o * 32 + 16, a[o][1]);			\
	}									\
	store_block(j, ob, f0, acc);						\
}

/* FLAT16(NAME, OS_, TS_, CS_): 16 channels by 16 offsets, for narrow planes: per tap 1 load, 16 broadcasts */
#define FLAT16(NAME, OS_, TS_, CS_)						\
__attribute__((target("avx512f"))) static void					\
NAME(const struct fjob *j, int64_t ob, int64_t fb)				\
{										\
	__m512 a[16];								\
	int64_t Wp = j->Wp, cin = j->v->cin, f0 = fb * 16;			\
	const float *wb = j->w + ob * j->bs;					\
	for (int o = 0; o < 16; o++)						\
		a[o] = _mm512_setzero_ps();					\
	for (int64_t ci = 0; ci < cin; ci++) {					\
		const float *xc = j->xp + ci * j->CS + f0;			\
		const float *wc = wb + ci * (CS_);				\
		for (int t = 0; t < 9; t++) {					\
			__m512 x0 = _mm512_loadu_ps(xc + (t / 3) * Wp + t % 3);	\
			for (int o = 0; o < 16; o++)				\
				a[o] = _mm512_fmadd_ps(_mm512_set1_ps(wc[o * (OS_) + t * (TS_)]), \
						       x0, a[o]);		\
		}								\
	}									\
	float acc[16 * 16];							\
	for (int o = 0; o < 16; o++)						\
		_mm512_storeu_ps(acc + o * 16, a[o]);				\
	store_block(j, ob, f0, acc);						\
}

/* the filter as given: [cout, cin, 3, 3] */
FLAT8(flat_8x32, j->os, 1, 9)
FLAT16(flat_16x16, j->os, 1, 9)
#endif

static void
flat_items(void *ctx, int64_t b, int64_t e)
{
	const struct fjob *j = ctx;

	for (int64_t it = b; it < e; it++) {
		int64_t ob = it / j->nfb, fb = it % j->nfb;
#ifdef HAVE_AVX512
		if (j->level == 2) {
			if (j->foc == 16)
				flat_16x16(j, ob, fb);
			else
				flat_8x32(j, ob, fb);
			continue;
		}
#endif
		flat_block_c(j, ob, fb);
	}
}

int
ml_flat_conv(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
	     const float *bias, float *y)
{
	/*
	 * Rows W + 1 wide: a row's right padding is the next row's left. The
	 * narrow planes (W <= 8: 72 offsets or fewer) take 16-wide blocks,
	 * which round less of the plane up than 32-wide ones.
	 */
	int64_t H = v->in[1], W = v->in[2], Wp = W + 1;
	int64_t foc = W <= 8 && v->cout % 16 == 0 ? 16 : 8, fnb = FLAT_ACC / foc;
	int64_t nfb = (H * Wp + fnb - 1) / fnb;
	/* the last block reads up to 2 * Wp + 2 past its end */
	int64_t CS = (nfb * fnb + 2 * Wp + 2 + 15) / 16 * 16;
	float *xp = ml_cpu_scratch(0, sizeof(float) * (size_t)(v->cin * CS));
	if (xp == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate %lld bytes for the padded input",
				 (long long)(v->cin * CS * 4));
	struct fjob j = { v, x, xp, w, bias, y, Wp, CS, nfb, v->cout / foc, foc, fnb,
			  foc * v->cin * 9, v->cin * 9, 1, 9, flat_level() };
	int64_t work = v->cin * 9 * FLAT_ACC;
	for (int64_t n = 0; n < v->n; n++) {
		j.x = x + n * v->cin * v->insz;
		j.y = y + n * v->cout * v->outsz;
		ml_parallel_for(v->cin, ML_MAX(1, 16384 / CS), pad_planes, &j);
		ml_parallel_for(j.nob * nfb, ML_MAX(1, (1 << 16) / work), flat_items, &j);
	}
	return 0;
}
