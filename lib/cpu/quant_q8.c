/*
 * quant_q8.c: CPU kernels of the internal int8 ops (see lib/ops/quant_q8.c
 * for their definitions and lib/cpu/quant_q8.h for the layouts).
 *
 * Q8Conv with group 1 is one packed GEMM (lib/cpu/quant_gemm.c): a 1x1
 * stride-1 convolution or a matrix product over rows whose length is a
 * multiple of 4 reads x in place (channels last makes x the GEMM's A);
 * anything else first gathers an int8 im2col matrix, padded with the input
 * zero point, in the channels-last order of the packed weights
 * ((ky, kx, c) fastest last). Depthwise convolutions, Add and the pools
 * are loops the compiler vectorises, cloned for AVX2 at run time.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include "cpu/nn.h"
#include "cpu/quant_q8.h"
#include "ops/quant.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define Q8_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define Q8_CLONES
#endif

/*
 * q8_round: round half to even by the 1.5 * 2^23 trick, which vectorises
 * where nearbyintf does not; exact for |v| < 2^22, and the callers clamp
 * far smaller values.
 */
static inline int32_t
q8_round(float v)
{
	v = v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
	return (int32_t)((v + 12582912.0f) - 12582912.0f);
}

static inline uint8_t
q8_clamp(int32_t v, int32_t lo, int32_t hi)
{
	return (uint8_t)(v < lo ? lo : v > hi ? hi : v);
}

static int
nomem(struct ml_opctx *c)
{
	return ml_opfail(c, ML_ENOMEM, "out of memory");
}

/* Q8Quantize and Q8Dequantize: one job over (n, h) rows of an NCHW/NHWC pair. */
struct qjob {
	const void *x;
	void *y;
	int64_t c, h, w;
	float scale, inv;
	int32_t zero;
};

Q8_CLONES static void
quant_rows(void *ctx, int64_t b, int64_t e)
{
	const struct qjob *j = ctx;
	const float *x = j->x;
	uint8_t *y = j->y;

	for (int64_t r = b; r < e; r++) {
		int64_t n = r / j->h, h = r % j->h;
		for (int64_t ch = 0; ch < j->c; ch++) {
			const float *xr = x + ((n * j->c + ch) * j->h + h) * j->w;
			uint8_t *yr = y + (n * j->h + h) * j->w * j->c + ch;
			for (int64_t w = 0; w < j->w; w++) {
				float v = xr[w] * j->inv;
				v = v != v ? 0.0f : v;
				yr[w * j->c] = q8_clamp(q8_round(v) + j->zero, 0, 255);
			}
		}
	}
}

Q8_CLONES static void
dequant_rows(void *ctx, int64_t b, int64_t e)
{
	const struct qjob *j = ctx;
	const uint8_t *x = j->x;
	float *y = j->y;

	for (int64_t r = b; r < e; r++) {
		int64_t n = r / j->h, h = r % j->h;
		for (int64_t ch = 0; ch < j->c; ch++) {
			const uint8_t *xr = x + (n * j->h + h) * j->w * j->c + ch;
			float *yr = y + ((n * j->c + ch) * j->h + h) * j->w;
			for (int64_t w = 0; w < j->w; w++)
				yr[w] = (float)((int32_t)xr[w * j->c] - j->zero) * j->scale;
		}
	}
}

/* qjob_of: the [n, c, h, w] view of an NCHW x (rank 4) or [n, c] (rank 2). */
static void
qjob_of(struct qjob *j, const struct ml_tval *nchw)
{
	if (nchw->rank == 4) {
		j->c = nchw->dims[1];
		j->h = nchw->dims[2];
		j->w = nchw->dims[3];
	} else {
		j->c = nchw->dims[1];
		j->h = 1;
		j->w = 1;
	}
}

int
ml_q8_run_quantize(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	struct qjob j = { .x = x->data, .y = c->out[0]->data };

	j.scale = (float)ml_attr_float(c->node, "scale", 1.0);
	j.inv = 1.0f / j.scale;
	j.zero = (int32_t)ml_attr_int(c->node, "zero_point", 0);
	qjob_of(&j, x);
	if (ml_tval_numel(x) == 0)
		return 0;
	ml_parallel_for(x->dims[0] * j.h, 4096 / (j.c * j.w + 1) + 1, quant_rows, &j);
	return 0;
}

int
ml_q8_run_dequantize(struct ml_opctx *c)
{
	const struct ml_tval *y = c->out[0];
	struct qjob j = { .x = c->in[0]->data, .y = y->data };

	j.scale = (float)ml_attr_float(c->node, "scale", 1.0);
	j.zero = (int32_t)ml_attr_int(c->node, "zero_point", 0);
	qjob_of(&j, y);
	if (ml_tval_numel(y) == 0)
		return 0;
	ml_parallel_for(y->dims[0] * j.h, 4096 / (j.c * j.w + 1) + 1, dequant_rows, &j);
	return 0;
}

/*
 * im2col: row (n, oy, ox) of a [P, kp] uint8 matrix gets the kh x kw
 * window of x, channels last, the zero point where the window leaves x,
 * and zeros from k to kp.
 */
struct i2cjob {
	const struct ml_q8_geom *g;
	const uint8_t *x;
	uint8_t *a;
	int64_t kp;
};

static void
i2c_rows(void *ctx, int64_t b, int64_t e)
{
	const struct i2cjob *j = ctx;
	const struct ml_q8_geom *g = j->g;
	size_t cb = (size_t)g->c;

	for (int64_t r = b; r < e; r++) {
		int64_t n = r / (g->oh * g->ow), oy = r / g->ow % g->oh, ox = r % g->ow;
		uint8_t *dst = j->a + r * j->kp;
		for (int64_t ky = 0; ky < g->kh; ky++) {
			int64_t iy = oy * g->sh - g->pt + ky * g->dh;
			for (int64_t kx = 0; kx < g->kw; kx++, dst += cb) {
				int64_t ix = ox * g->sw - g->pl + kx * g->dw;
				bool out = iy < 0 || iy >= g->h || ix < 0 || ix >= g->w;
				const uint8_t *src = out ? NULL : j->x + ((n * g->h + iy) * g->w + ix) * g->c;
				if (cb < 16) {	/* few channels: calls would cost more than the bytes */
					for (size_t q = 0; q < cb; q++)
						dst[q] = out ? (uint8_t)g->xzero : src[q];
				} else if (out) {
					memset(dst, g->xzero, cb);
				} else {
					memcpy(dst, src, cb);
				}
			}
		}
		memset(dst, 0, (size_t)(j->kp - g->k));
	}
}

/* Depthwise: one job over (n, oy) output rows. */
struct dwjob {
	const struct ml_q8_geom *g;
	const uint8_t *x, *zrow;
	const int8_t *w;
	const int32_t *bias;
	const float *mult;
	uint8_t *y;
};

/*
 * dw_tap and dw_out: the depthwise inner loops over channels, with
 * restrict so that the uint8 loads (which may alias anything) do not stop
 * the compiler from vectorising them.
 */
static inline void
dw_tap(int32_t *restrict acc, const uint8_t *restrict src, const int8_t *restrict wt, int64_t C)
{
	for (int64_t ch = 0; ch < C; ch++)
		acc[ch] += (int32_t)src[ch] * (int32_t)wt[ch];
}

static inline void
dw_out(uint8_t *restrict y, const int32_t *restrict acc, const float *restrict mult, int64_t C,
       int32_t zy, int32_t lo, int32_t hi)
{
	for (int64_t ch = 0; ch < C; ch++) {
		float v = (float)acc[ch] * mult[ch];
		v = v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
		int32_t q = (int32_t)((v + 12582912.0f) - 12582912.0f) + zy;
		y[ch] = (uint8_t)(q < lo ? lo : q > hi ? hi : q);
	}
}

Q8_CLONES static void
dw_rows(void *ctx, int64_t b, int64_t e)
{
	const struct dwjob *j = ctx;
	const struct ml_q8_geom *g = j->g;
	int64_t C = g->c;
	int32_t *acc = ml_malloc(sizeof(int32_t) * (size_t)C);

	if (acc == NULL)
		return;		/* checked by the caller's probe allocation */
	for (int64_t r = b; r < e; r++) {
		int64_t n = r / g->oh, oy = r % g->oh;
		for (int64_t ox = 0; ox < g->ow; ox++) {
			memcpy(acc, j->bias, sizeof(int32_t) * (size_t)C);
			for (int64_t ky = 0; ky < g->kh; ky++) {
				int64_t iy = oy * g->sh - g->pt + ky * g->dh;
				for (int64_t kx = 0; kx < g->kw; kx++) {
					int64_t ix = ox * g->sw - g->pl + kx * g->dw;
					const uint8_t *src = iy < 0 || iy >= g->h || ix < 0 ||
								     ix >= g->w ? j->zrow :
							     j->x + ((n * g->h + iy) * g->w + ix) * C;
					dw_tap(acc, src, j->w + (ky * g->kw + kx) * C, C);
				}
			}
			dw_out(j->y + ((n * g->oh + oy) * g->ow + ox) * C, acc, j->mult, C, g->yzero,
			       g->lo, g->hi);
		}
	}
	ml_free(acc);
}

int
ml_q8_run_conv(struct ml_opctx *c)
{
	struct ml_q8_geom g;
	const uint8_t *x = c->in[0]->data;
	const int8_t *w = c->in[1]->data;

	ML_TRY(ml_q8_geom(c, &g));
	int64_t P = g.n * g.oh * g.ow;
	if (P == 0 || g.m == 0)
		return 0;
	if (g.group != 1) {
		struct dwjob j = { .g = &g, .x = x, .w = w, .bias = c->in[2]->data,
				   .mult = c->in[3]->data, .y = c->out[0]->data };
		uint8_t *zrow = ml_malloc((size_t)g.c);
		void *probe = ml_malloc(sizeof(int32_t) * (size_t)g.c);
		if (zrow == NULL || probe == NULL) {
			ml_free(zrow);
			ml_free(probe);
			return nomem(c);
		}
		ml_free(probe);
		memset(zrow, g.xzero, (size_t)g.c);
		j.zrow = zrow;
		ml_parallel_for(g.n * g.oh, 1, dw_rows, &j);
		ml_free(zrow);
		return 0;
	}
	struct ml_q8_epi ep = { .bias = c->in[2]->data, .mult = c->in[3]->data, .yzero = g.yzero,
				.lo = g.lo, .hi = g.hi, .f32out = g.f32out };
	int64_t kp = ml_q8_kpad(g.k);
	const uint8_t *a = x;
	int64_t lda = g.c;
	bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 &&
		      g.oh == g.h && g.ow == g.w && g.c % ML_Q8_KG == 0;
	if (!direct) {
		int64_t bytes;
		if (!ml_mul_ok(P, kp, &bytes))
			return nomem(c);
		uint8_t *buf = ml_cpu_scratch(0, (size_t)bytes);
		if (buf == NULL)
			return nomem(c);
		struct i2cjob ij = { .g = &g, .x = x, .a = buf, .kp = kp };
		ml_parallel_for(P, 65536 / (kp + 1) + 1, i2c_rows, &ij);
		a = buf;
		lda = kp;
	}
	ml_q8_gemm(P, g.m, kp, a, lda, w, &ep, c->out[0]->data, g.m);
	return 0;
}

/* Q8Add over the flat arrays. */
struct addjob {
	const uint8_t *a, *b;
	uint8_t *y;
	float fa, fb;
	int32_t za, zb, zy, lo;
};

Q8_CLONES static void
add_range(void *ctx, int64_t b, int64_t e)
{
	const struct addjob *j = ctx;
	const uint8_t *restrict a = j->a, *restrict bb = j->b;
	uint8_t *restrict y = j->y;
	const float fa = j->fa, fb = j->fb;
	const int32_t za = j->za, zb = j->zb, zy = j->zy, lo = j->lo;

	for (int64_t i = b; i < e; i++) {
		float v = (float)((int32_t)a[i] - za) * fa + (float)((int32_t)bb[i] - zb) * fb;
		v = v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
		int32_t q = (int32_t)((v + 12582912.0f) - 12582912.0f) + zy;
		y[i] = (uint8_t)(q < lo ? lo : q > 255 ? 255 : q);
	}
}

int
ml_q8_run_add(struct ml_opctx *c)
{
	double sy = ml_attr_float(c->node, "y_scale", 1.0);
	struct addjob j = {
		.a = c->in[0]->data, .b = c->in[1]->data, .y = c->out[0]->data,
		.fa = (float)(ml_attr_float(c->node, "a_scale", 1.0) / sy),
		.fb = (float)(ml_attr_float(c->node, "b_scale", 1.0) / sy),
		.za = (int32_t)ml_attr_int(c->node, "a_zero_point", 0),
		.zb = (int32_t)ml_attr_int(c->node, "b_zero_point", 0),
		.zy = (int32_t)ml_attr_int(c->node, "y_zero_point", 0),
		.lo = (int32_t)ml_attr_int(c->node, "act_min", 0),
	};
	int64_t n = ml_tval_numel(c->out[0]);

	if (ml_tval_numel(c->in[0]) != n || ml_tval_numel(c->in[1]) != n)
		return ml_opfail(c, ML_EINVAL, "a and b differ in shape");
	ml_parallel_for(n, 16384, add_range, &j);
	return 0;
}

/* Q8MaxPool: one job over (n, oy) rows. */
struct pooljob {
	const uint8_t *x;
	uint8_t *y;
	int64_t h, w, c, oh, ow, kh, kw, sh, sw, pt, pl;
};

Q8_CLONES static void
maxpool_rows(void *ctx, int64_t b, int64_t e)
{
	const struct pooljob *j = ctx;

	for (int64_t r = b; r < e; r++) {
		int64_t n = r / j->oh, oy = r % j->oh;
		for (int64_t ox = 0; ox < j->ow; ox++) {
			uint8_t *yr = j->y + ((n * j->oh + oy) * j->ow + ox) * j->c;
			memset(yr, 0, (size_t)j->c);
			for (int64_t ky = 0; ky < j->kh; ky++) {
				int64_t iy = oy * j->sh - j->pt + ky;
				if (iy < 0 || iy >= j->h)
					continue;
				for (int64_t kx = 0; kx < j->kw; kx++) {
					int64_t ix = ox * j->sw - j->pl + kx;
					if (ix < 0 || ix >= j->w)
						continue;
					const uint8_t *xr = j->x + ((n * j->h + iy) * j->w + ix) * j->c;
					for (int64_t ch = 0; ch < j->c; ch++)
						yr[ch] = xr[ch] > yr[ch] ? xr[ch] : yr[ch];
				}
			}
		}
	}
}

int
ml_q8_run_maxpool(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *y = c->out[0];
	const int64_t *ks = NULL, *st = NULL, *pd = NULL;
	struct pooljob j = { .x = x->data, .y = y->data, .h = x->dims[1], .w = x->dims[2],
			     .c = x->dims[3], .oh = y->dims[1], .ow = y->dims[2], .kh = 1, .kw = 1,
			     .sh = 1, .sw = 1 };

	if (ml_attr_ints(c->node, "kernel_shape", &ks) == 2)
		j.kh = ks[0], j.kw = ks[1];
	if (ml_attr_ints(c->node, "strides", &st) == 2)
		j.sh = st[0], j.sw = st[1];
	if (ml_attr_ints(c->node, "pads", &pd) == 4)
		j.pt = pd[0], j.pl = pd[1];
	if (ml_tval_numel(y) == 0)
		return 0;
	ml_parallel_for(y->dims[0] * j.oh, 1, maxpool_rows, &j);
	return 0;
}

int
ml_q8_run_gap(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	const uint8_t *xp = x->data;
	uint8_t *y = c->out[0]->data;
	int64_t n = x->dims[0], hw = x->dims[1] * x->dims[2], C = x->dims[3];
	int64_t *acc = ml_calloc((size_t)(C > 0 ? C : 1), sizeof(int64_t));

	if (acc == NULL)
		return nomem(c);
	for (int64_t b = 0; b < n; b++) {
		memset(acc, 0, sizeof(int64_t) * (size_t)C);
		for (int64_t p = 0; p < hw; p++)
			for (int64_t ch = 0; ch < C; ch++)
				acc[ch] += xp[(b * hw + p) * C + ch];
		for (int64_t ch = 0; ch < C; ch++)
			y[b * C + ch] = hw > 0 ? (uint8_t)((acc[ch] + hw / 2) / hw) : 0;
	}
	ml_free(acc);
	return 0;
}
