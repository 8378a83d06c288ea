/*
 * train_amx.c: train_conv.c's convolutions in bf16 on AMX tiles (a step
 * of mltrain --precision bf16 on a CPU with AMX-BF16): the same products
 * as train_conv.c's f32 kernels, with the operands rounded to bf16 as they
 * are copied and the sums in f32 (tdpbf16ps). On a Sapphire Rapids Xeon
 * vdpbf16ps alone gains nothing over the f32 FMAs (half the instructions
 * of twice the cost: 0.19 against 0.095 ns each), so there the bf16
 * kernels are these; where it issues at the FMA's rate (AMD Zen 4) and
 * AMX is absent, train_conv.c's ML_TC_DP runs them.
 *
 * A tile product multiplies a 16-row A tile of 16 pairs of bf16 by a B
 * tile of 16 rows (the pairs) of 16 columns, each row read from memory
 * at a constant stride. The copies are laid out so that the taps of a
 * window are rows at one stride:
 * - forward (and the input gradient, the forward convolution of dy with
 *   the kernel flipped): the input as X[image][row][g][col] of 32-bit
 *   pairs, g a pair of "channels" (two channels, or, for one channel,
 *   two columns of the window: the channel shifted by dx); tap (kh, g) of
 *   output row y is row y * G + kh * G + g: one stride, wp words. The
 *   columns of the window that the pairs leave (all kw for channel pairs,
 *   none for shifted ones) are offsets of the B tile's start. C is 16
 *   output columns of one output row by the output channels; two output
 *   rows share each A (weight) tile loaded.
 * - filter gradient: C is 16 taps by the output channels, summed over
 *   every output position: A is 16 taps by 32 positions of a row of
 *   X[image][row][p][col] (bf16, p a channel, or the channel shifted by
 *   dx), B the 32 positions' dy as 16 pairs by the channels (dy
 *   transposed per row). Up to 6 C tiles stay in the tile registers over
 *   a run of rows; runs are fixed (not per thread) and added in order,
 *   so the sums do not depend on the thread count.
 * Taps past the window's (the last tile's rows, the second of an odd
 * pair) have weight 0 or read zeros.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <string.h>

#include "cpu/amx.h"
#include "cpu/train_conv.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_TAMX 1
#include <immintrin.h>
#define TAMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

#define MAXP 64		/* pseudo channels */
#define GF_TILES 6	/* C tiles of the filter gradient held at once */
#define GF_RUNS 4	/* fixed runs of rows of the filter gradient */

bool
ml_train_amx_ok(const struct ml_conv3 *v)
{
#ifdef HAVE_TAMX
	return ml_bf16_path() == ML_BF16_AMX && v->cg <= MAXP && v->mg <= MAXP &&
	       v->k[2] <= MAXP / 2;
#else
	(void)v;
	return false;
#endif
}

#ifdef HAVE_TAMX
/*
 * struct pseudo: the "channels" of a copy: p = (ch[p], dx[p]), channel
 * ch[p] shifted left by dx[p] columns; nr: the window columns left as
 * offsets (kw for real channels, 1 for shifted ones). One channel is
 * shifted where the window is wider than 1, so that its taps fill tiles.
 */
struct pseudo {
	int np, nr;
	int ch[MAXP], dx[MAXP];
};

static void
pseudo_of(struct pseudo *p, int64_t c, int64_t kw)
{
	bool shift = c == 1 && kw > 1;
	p->np = (int)(shift ? kw : c);
	p->nr = (int)(shift ? 1 : kw);
	for (int i = 0; i < p->np; i++) {
		p->ch[i] = shift ? 0 : i;
		p->dx[i] = shift ? i : 0;
	}
}

/* the plane: channel c0 + ch of image i of src [n][ctot][h][w], at (pt, pl) of a padded plane */
struct plane {
	const float *src;
	int64_t ctot, c0, h, w, pt, pl;
};

/* ld16: 16 floats of padded row y from column x on of pseudo channel p (zeros outside) */
TAMX static inline __m512
ld16(const struct plane *s, const struct pseudo *ps, int p, int64_t i, int64_t y, int64_t x)
{
	int64_t ys = y - s->pt, xs = x + ps->dx[p] - s->pl;
	if (p >= ps->np || ys < 0 || ys >= s->h || xs >= s->w || xs + 16 <= 0)
		return _mm512_setzero_ps();
	uint32_t m = 0xffff;
	if (xs < 0)
		m &= 0xffffu << -xs;
	if (xs + 16 > s->w)
		m &= 0xffffu >> (xs + 16 - s->w);
	const float *row = s->src + ((i * s->ctot + s->c0 + ps->ch[p]) * s->h + ys) * s->w;
	return _mm512_maskz_loadu_ps((__mmask16)m, row + xs);
}

TAMX static inline __m512i
bf16x16(__m512 v)
{
	return _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v));
}

/* ---- forward (and input gradient) ---- */

struct fwd {
	struct plane s;
	struct pseudo ps;
	int64_t n, hp, oh, ow, m;	/* m: output channels (C rows) */
	int64_t G, wpp, is;		/* pair channels, words a row, words an image */
	int64_t ntt, nxt, nyp;		/* tap tiles, column tiles, pairs of output rows */
	uint32_t *x;			/* [n][is] */
	const uint32_t *a;		/* [mb][nr][ntt][16][16] */
	float *y;			/* [n][ytot][oh][ow] at channel yc0 */
	int64_t ytot, yc0;
	const float *bias;
	int rows;			/* rows of A and C: m, or 16 by blocks */
};

TAMX static void
fwd_copy(void *ctx, int64_t b, int64_t e)
{
	const struct fwd *f = ctx;
	for (int64_t i = b; i < e; i++) {
		uint32_t *d = f->x + i * f->is;
		for (int64_t y = 0; y < f->hp; y++)
			for (int64_t g = 0; g < f->G; g++, d += f->wpp)
				for (int64_t x = 0; x < f->wpp; x += 16) {
					__m512i lo = bf16x16(ld16(&f->s, &f->ps, (int)(2 * g), i, y, x));
					__m512i hi = bf16x16(ld16(&f->s, &f->ps, (int)(2 * g + 1), i, y, x));
					_mm512_storeu_si512(d + x, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
				}
		memset(d, 0, sizeof(uint32_t) * (size_t)(f->is - f->hp * f->G * f->wpp));
	}
}

/* fwd_store: C (in ct, rows of 16 floats) of rows m0.. at output row y, columns x0.. */
TAMX static void
fwd_store(const struct fwd *f, const float *ct, int64_t i, int64_t m0, int64_t y, int64_t x0)
{
	int64_t nx = ML_MIN(16, f->ow - x0);
	__mmask16 k = (__mmask16)((1u << nx) - 1);
	for (int64_t r = 0; r < f->rows && m0 + r < f->m; r++) {
		float b = f->bias != NULL ? f->bias[m0 + r] : 0.0f;
		float *d = f->y + ((i * f->ytot + f->yc0 + m0 + r) * f->oh + y) * f->ow + x0;
		_mm512_mask_storeu_ps(d, k, _mm512_add_ps(_mm512_loadu_ps(ct + r * 16), _mm512_set1_ps(b)));
	}
}

TAMX static void
fwd_items(void *ctx, int64_t b, int64_t e)
{
	const struct fwd *f = ctx;
	struct ml_amx_cfg cfg;
	float ct[2][16 * 16];
	memset(&cfg, 0, sizeof cfg);
	ml_amx_tile(&cfg, 0, f->rows, 64);
	ml_amx_tile(&cfg, 1, f->rows, 64);
	ml_amx_tile(&cfg, 2, f->rows, 64);
	ml_amx_tile(&cfg, 3, 16, 64);
	ml_amx_tile(&cfg, 4, 16, 64);
	_tile_loadconfig(&cfg);
	int64_t per = f->nyp * f->nxt, nt = f->ps.nr * f->ntt, mb = (f->m + 15) / 16;
	long stride = (long)(f->wpp * 4);
	for (int64_t it = b; it < e; it++) {
		int64_t i = it / (per * mb), r = it % (per * mb), blk = r / per;
		int64_t y0 = (r % per) / f->nxt * 2, x0 = (r % per) % f->nxt * 16;
		bool two = y0 + 1 < f->oh;
		const uint32_t *a = f->a + blk * nt * 256;
		const uint32_t *xb = f->x + i * f->is + y0 * f->G * f->wpp + x0;
		_tile_zero(0);
		_tile_zero(1);
		for (int64_t q = 0; q < f->ps.nr; q++)
			for (int64_t t = 0; t < f->ntt; t++, a += 256) {
				const uint32_t *bp = xb + t * 16 * f->wpp + q;
				_tile_loadd(2, a, 64);
				_tile_loadd(3, bp, stride);
				_tile_dpbf16ps(0, 2, 3);
				if (two) {
					_tile_loadd(4, bp + f->G * f->wpp, stride);
					_tile_dpbf16ps(1, 2, 4);
				}
			}
		_tile_stored(0, ct[0], 64);
		fwd_store(f, ct[0], i, blk * 16, y0, x0);
		if (two) {
			_tile_stored(1, ct[1], 64);
			fwd_store(f, ct[1], i, blk * 16, y0 + 1, x0);
		}
	}
	_tile_release();
}

/* fwd_pack: the A tiles of weights w [m][cc][kh][kw] (row stride K) */
static void
fwd_pack(const struct fwd *f, const float *w, int64_t cc, int64_t kh, int64_t kw, uint32_t *a)
{
	int64_t K = cc * kh * kw, mb = (f->m + 15) / 16;
	for (int64_t blk = 0; blk < mb; blk++)
		for (int64_t q = 0; q < f->ps.nr; q++)
			for (int64_t t = 0; t < f->ntt; t++)
				for (int64_t r = 0; r < 16; r++)
					for (int64_t j = 0; j < 16; j++) {
						int64_t m = blk * 16 + r, tap = t * 16 + j;
						int64_t a0 = tap / f->G, g = tap % f->G;
						uint32_t v = 0;
						for (int h = 0; h < 2; h++) {
							int p = (int)(2 * g + h);
							if (m >= f->m || a0 >= kh || p >= f->ps.np ||
							    f->ps.dx[p] + q >= kw)
								continue;
							float x = w[m * K + (f->ps.ch[p] * kh + a0) * kw +
								    f->ps.dx[p] + q];
							v |= (uint32_t)ml_f32_to_bf16(x) << (16 * h);
						}
						*a++ = v;
					}
}

/*
 * amx_fwd: y[:, yc0 .. yc0 + m) = conv(the c channels of s, w [m][c][kh][kw]) + bias, stride 1,
 * an oh x ow output from the hp-row padded plane.
 */
static int
amx_fwd(struct ml_opctx *c, const struct plane *s, int64_t n, int64_t cc, int64_t hp, int64_t wp,
	int64_t kh, int64_t kw, int64_t m, const float *w, const float *bias, float *y,
	int64_t ytot, int64_t yc0)
{
	struct fwd f = { .s = *s, .n = n, .hp = hp, .oh = hp - kh + 1, .ow = wp - kw + 1, .m = m,
			 .y = y, .ytot = ytot, .yc0 = yc0, .bias = bias };
	pseudo_of(&f.ps, cc, kw);
	f.G = (f.ps.np + 1) / 2;
	f.ntt = (kh * f.G + 15) / 16;
	f.nxt = (f.ow + 15) / 16;
	f.nyp = (f.oh + 1) / 2;
	f.wpp = (f.nxt * 16 + f.ps.nr - 1 + 15) / 16 * 16;
	f.is = (hp * f.G + 16) * f.wpp;
	f.rows = (int)ML_MIN(m, 16);
	int64_t mb = (m + 15) / 16, na = mb * f.ps.nr * f.ntt * 256;
	uint8_t *p = ml_cpu_scratch(0, sizeof(uint32_t) * (size_t)(n * f.is + na) + 128);
	if (p == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	f.x = (uint32_t *)p;
	uint32_t *a = f.x + n * f.is;
	a = (uint32_t *)(((uintptr_t)a + 63) / 64 * 64);
	f.a = a;
	fwd_pack(&f, w, cc, kh, kw, a);
	ml_parallel_for(n, 1, fwd_copy, &f);
	int64_t items = n * mb * f.nyp * f.nxt;
	int64_t per = ML_MAX(1, f.ps.nr * f.ntt);
	ml_parallel_for(items, ML_MAX(1, 64 / per), fwd_items, &f);
	return 0;
}

/* ---- filter gradient ---- */

struct gf {
	struct plane s;
	struct pseudo ps;
	int64_t n, hp, oh, ow, m, kh;
	int64_t wq, is;			/* bf16 a row of the copy, an image */
	int64_t ntt, nxs, nseg;		/* tap tiles, segments of 32 columns a row, all segments */
	int64_t nct, ngr;		/* C tiles (nr x ntt), groups of GF_TILES */
	uint16_t *x;			/* [n][is] */
	uint32_t *dyt;			/* [nseg][16][m] */
	const float *dy;		/* [n][dtot][oh][ow] at channel dc0 */
	int64_t dtot, dc0;
	float *part;			/* [GF_RUNS][ngr][GF_TILES][16][16] */
};

TAMX static void
gf_copy(void *ctx, int64_t b, int64_t e)
{
	const struct gf *f = ctx;
	for (int64_t i = b; i < e; i++) {
		uint16_t *d = f->x + i * f->is;
		for (int64_t y = 0; y < f->hp; y++)
			for (int p = 0; p < f->ps.np; p++, d += f->wq)
				for (int64_t x = 0; x < f->wq; x += 16)
					_mm256_storeu_si256((__m256i *)(d + x),
							    (__m256i)_mm512_cvtneps_pbh(
								    ld16(&f->s, &f->ps, p, i, y, x)));
		memset(d, 0, sizeof(uint16_t) * (size_t)(f->is - f->hp * f->ps.np * f->wq));
	}
}

/* gf_dyt: segment (image, row, 32 columns) of dy as 16 pairs of columns by the channels */
TAMX static void
gf_dyt(void *ctx, int64_t b, int64_t e)
{
	const struct gf *f = ctx;
	uint32_t t[16][16];
	for (int64_t sg = b; sg < e; sg++) {
		int64_t i = sg / (f->oh * f->nxs), y = sg / f->nxs % f->oh, x0 = sg % f->nxs * 32;
		int64_t nx = ML_MIN(32, f->ow - x0);
		for (int64_t m = 0; m < f->m; m++) {
			const float *s = f->dy + ((i * f->dtot + f->dc0 + m) * f->oh + y) * f->ow + x0;
			__mmask16 k0 = (__mmask16)(nx >= 16 ? 0xffff : (1u << nx) - 1);
			__mmask16 k1 = (__mmask16)(nx <= 16 ? 0 : (1u << (nx - 16)) - 1);
			__m512 v0 = _mm512_maskz_loadu_ps(k0, s), v1 = _mm512_maskz_loadu_ps(k1, s + 16);
			_mm512_storeu_si512(t[m], (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
		}
		uint32_t *d = f->dyt + sg * 16 * f->m;
		for (int64_t q = 0; q < 16; q++)
			for (int64_t m = 0; m < f->m; m++)
				d[q * f->m + m] = t[m][q];
	}
}

/* gf_dp: tdpbf16ps into C tile k (0 .. GF_TILES - 1; the tile numbers must be constants) */
TAMX static inline void
gf_dp(int k)
{
	switch (k) {
	case 0: _tile_dpbf16ps(0, 6, 7); break;
	case 1: _tile_dpbf16ps(1, 6, 7); break;
	case 2: _tile_dpbf16ps(2, 6, 7); break;
	case 3: _tile_dpbf16ps(3, 6, 7); break;
	case 4: _tile_dpbf16ps(4, 6, 7); break;
	default: _tile_dpbf16ps(5, 6, 7); break;
	}
}

TAMX static void
gf_items(void *ctx, int64_t b, int64_t e)
{
	const struct gf *f = ctx;
	struct ml_amx_cfg cfg;
	memset(&cfg, 0, sizeof cfg);
	for (int k = 0; k < GF_TILES; k++)
		ml_amx_tile(&cfg, k, 16, (int)(f->m * 4));
	ml_amx_tile(&cfg, 6, 16, 64);
	ml_amx_tile(&cfg, 7, 16, (int)(f->m * 4));
	_tile_loadconfig(&cfg);
	long sa = (long)(f->wq * 2), sb = (long)(f->m * 4);
	for (int64_t it = b; it < e; it++) {
		int64_t run = it / f->ngr, grp = it % f->ngr;
		int64_t k0 = grp * GF_TILES, nk = ML_MIN(GF_TILES, f->nct - k0);
		int64_t s0 = f->nseg * run / GF_RUNS, s1 = f->nseg * (run + 1) / GF_RUNS;
		_tile_zero(0);
		_tile_zero(1);
		_tile_zero(2);
		_tile_zero(3);
		_tile_zero(4);
		_tile_zero(5);
		for (int64_t sg = s0; sg < s1; sg++) {
			int64_t i = sg / (f->oh * f->nxs), y = sg / f->nxs % f->oh, x0 = sg % f->nxs * 32;
			const uint16_t *xb = f->x + i * f->is + y * f->ps.np * f->wq + x0;
			_tile_loadd(7, f->dyt + sg * 16 * f->m, sb);
			for (int64_t k = 0; k < nk; k++) {
				int64_t q = (k0 + k) / f->ntt, t = (k0 + k) % f->ntt;
				_tile_loadd(6, xb + t * 16 * f->wq + q, sa);
				gf_dp((int)k);
			}
		}
		float *pt = f->part + it * GF_TILES * 256;
		_tile_stored(0, pt, 64);
		_tile_stored(1, pt + 256, 64);
		_tile_stored(2, pt + 512, 64);
		_tile_stored(3, pt + 768, 64);
		_tile_stored(4, pt + 1024, 64);
		_tile_stored(5, pt + 1280, 64);
	}
	_tile_release();
}

/*
 * amx_gf: dw [m][c][kh][kw] = the filter gradient of the stride-1
 * convolution of the c channels of s (an oh x ow output from the hp x wp
 * padded plane) given dy's m channels from dc0 of [n][dtot][oh][ow].
 */
static int
amx_gf(struct ml_opctx *c, const struct plane *s, int64_t n, int64_t cc, int64_t hp, int64_t wp,
       int64_t kh, int64_t kw, int64_t m, const float *dy, int64_t dtot, int64_t dc0, float *dw)
{
	struct gf f = { .s = *s, .n = n, .hp = hp, .oh = hp - kh + 1, .ow = wp - kw + 1, .m = m,
			.kh = kh, .dy = dy, .dtot = dtot, .dc0 = dc0 };
	pseudo_of(&f.ps, cc, kw);
	f.ntt = (kh * f.ps.np + 15) / 16;
	f.nxs = (f.ow + 31) / 32;
	f.nseg = n * f.oh * f.nxs;
	f.wq = (f.nxs * 32 + f.ps.nr - 1 + 15) / 16 * 16;
	f.is = (hp * f.ps.np + 16) * f.wq;
	f.nct = f.ps.nr * f.ntt;
	f.ngr = (f.nct + GF_TILES - 1) / GF_TILES;
	size_t nx = sizeof(uint16_t) * (size_t)(n * f.is), nd = sizeof(uint32_t) * (size_t)(f.nseg * 16 * m);
	size_t np = sizeof(float) * (size_t)(GF_RUNS * f.ngr * GF_TILES * 256);
	nx = (nx + 63) / 64 * 64;
	nd = (nd + 63) / 64 * 64;
	uint8_t *p = ml_cpu_scratch(0, nx + nd + np + 64);
	if (p == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	f.x = (uint16_t *)p;
	f.dyt = (uint32_t *)(p + nx);
	f.part = (float *)(p + nx + nd);
	ml_parallel_for(n, 1, gf_copy, &f);
	ml_parallel_for(f.nseg, 16, gf_dyt, &f);
	ml_parallel_for(GF_RUNS * f.ngr, 1, gf_items, &f);
	/* the runs in order; C tile (q, t) row j is tap t * 16 + j = (a, p) of window column dx[p] + q */
	int64_t K = cc * kh * kw;
	memset(dw, 0, sizeof(float) * (size_t)(m * K));
	for (int64_t run = 0; run < GF_RUNS; run++)
		for (int64_t k = 0; k < f.nct; k++) {
			int64_t q = k / f.ntt, t = k % f.ntt;
			const float *pt = f.part + ((run * f.ngr + k / GF_TILES) * GF_TILES + k % GF_TILES) * 256;
			for (int64_t j = 0; j < 16; j++) {
				int64_t tap = t * 16 + j, a = tap / f.ps.np;
				int p = (int)(tap % f.ps.np);
				if (a >= kh || f.ps.dx[p] + q >= kw)
					continue;
				int64_t o = (f.ps.ch[p] * kh + a) * kw + f.ps.dx[p] + q;
				for (int64_t mm = 0; mm < m; mm++)
					dw[mm * K + o] += pt[j * 16 + mm];
			}
		}
	return 0;
}
#endif

#ifdef HAVE_TAMX
/* x_plane: group g's input channels of x [n][cin][h][w] as v pads them: rows *hp, columns *wp */
static struct plane
x_plane(const struct ml_conv3 *v, const float *x, int64_t g, int64_t *hp, int64_t *wp)
{
	*hp = v->in[1] + v->p[1] + v->pe[1];
	*wp = v->in[2] + v->p[2] + v->pe[2];
	return (struct plane){ x, v->cin, g * v->cg, v->in[1], v->in[2], v->p[1], v->p[2] };
}
#endif

int
ml_train_amx_fwd(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
		 const float *bias, float *y)
{
#ifdef HAVE_TAMX
	int64_t K = v->cg * v->ksz, hp, wp;
	for (int64_t g = 0; g < v->group; g++) {
		struct plane s = x_plane(v, x, g, &hp, &wp);
		ML_TRY(amx_fwd(c, &s, v->n, v->cg, hp, wp, v->k[1], v->k[2], v->mg,
			       w + g * v->mg * K, bias != NULL ? bias + g * v->mg : NULL, y, v->cout,
			       g * v->mg));
	}
	return 0;
#else
	(void)v, (void)x, (void)w, (void)bias, (void)y;
	return ml_opfail(c, ML_ENOTSUP, "no AMX kernels in this build");
#endif
}

int
ml_train_amx_grad(struct ml_opctx *c, const struct ml_conv3 *v, bool gi, const float *dy,
		  const float *x, const float *w, float *out)
{
#ifdef HAVE_TAMX
	int64_t kh = v->k[1], kw = v->k[2], K = v->cg * v->ksz;
	for (int64_t g = 0; g < v->group; g++) {
		if (gi) {
			/* dx_g = conv(dy_g padded by k - 1 - pad, W_g flipped, channels swapped) */
			struct plane s = { dy, v->cout, g * v->mg, v->out[1], v->out[2],
					   kh - 1 - v->p[1], kw - 1 - v->p[2] };
			int64_t Kt = v->mg * kh * kw;
			float *wt = ml_cpu_scratch(2, sizeof(float) * (size_t)(v->cg * Kt) + 64);
			if (wt == NULL)
				return ml_opfail(c, ML_ENOMEM, "out of memory");
			ml_train_conv_flip(v, w + g * v->mg * K, wt);
			ML_TRY(amx_fwd(c, &s, v->n, v->mg, v->in[1] + kh - 1, v->in[2] + kw - 1, kh,
				       kw, v->cg, wt, NULL, out, v->cin, g * v->cg));
		} else {
			int64_t hp, wp;
			struct plane s = x_plane(v, x, g, &hp, &wp);
			ML_TRY(amx_gf(c, &s, v->n, v->cg, hp, wp, kh, kw, v->mg, dy, v->cout, g * v->mg,
				      out + g * v->mg * K));
		}
	}
	return 0;
#else
	(void)v, (void)gi, (void)dy, (void)x, (void)w, (void)out;
	return ml_opfail(c, ML_ENOTSUP, "no AMX kernels in this build");
#endif
}
