/*
 * fused_mm.c: the CPU kernels of the fused products that do more than
 * call a base kernel: FusedMatMul through the packed SGEMM of nn_gemm.c
 * (B as mlopt's pack-weights stored it, or packed here) with its bias,
 * residual and activation applied to each tile of Y while the tile is
 * still in cache; the same for a pointwise FusedConv; and Attention
 * (softmax(scale Q Kt) V) one head at a time, its scores never leaving L1.
 *
 * The SGEMM paths run when ml_pgemm_ok() (AVX-512F, or AVX2 and FMA) and
 * the product has at least FAST_MIN multiply-adds (a packed B: any size).
 * Elsewhere, and when the environment says ML_PGEMM=0, the entry points
 * return 1 and lib/cpu/fused.c runs the base kernel and a separate
 * epilogue pass (unpacking a packed B first). The epilogue loops are
 * compiled for AVX-512, AVX2 and the baseline, chosen at run time.
 */
#pragma GCC optimize("O3", "no-trapping-math")

#include <stdlib.h>

#include "ml_impl.h"
#include "cpu/elem.h"
#include "cpu/fastmath.h"
#include "cpu/nn.h"
#include "ops/fused.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define FM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FM_CLONES
#endif

/* rows of one FusedMatMul tile, about (the micro-kernel takes 12 at a time) */
#define TILE_M 48
/* multiply-adds below which FusedMatMul leaves the product to the MatMul kernel */
#define FAST_MIN ML_FUSED_PACK_MIN
/* multiply-adds a work item should have at least (what a thread wake-up costs) */
#define ITEM_WORK (1 << 18)

/*
 * ml_fused_tile_epi (ops/fused.h): over rows [0, m) of a tile n wide (row
 * stride ldc) of y: add bias[0..n) (NULL: none) and z (same strides, NULL:
 * none), then the activation. One function per loop body, so that each
 * vectorises.
 */
FM_CLONES static void
tile_add(float *y, int64_t m, int64_t n, int64_t ldc, const float *bias, const float *z)
{
	for (int64_t i = 0; i < m; i++) {
		float *r = y + i * ldc;
		if (bias != NULL)
			for (int64_t j = 0; j < n; j++)
				r[j] += bias[j];
		if (z != NULL) {
			const float *zr = z + i * ldc;
			for (int64_t j = 0; j < n; j++)
				r[j] += zr[j];
		}
	}
}

#define ACT_FN(NAME, EXPR) \
	FM_CLONES static void \
	NAME(float *y, int64_t m, int64_t n, int64_t ldc, float lo, float hi) \
	{ \
		(void)lo, (void)hi; \
		for (int64_t i = 0; i < m; i++) { \
			float *r = y + i * ldc; \
			for (int64_t j = 0; j < n; j++) { \
				float v = r[j]; \
				r[j] = (EXPR); \
			} \
		} \
	}

ACT_FN(act_relu, v > 0.0f ? v : 0.0f)
ACT_FN(act_clip, v < lo ? lo : v > hi ? hi : v)

/*
 * ADD_ACT_FN: the bias (not NULL), then Relu or Clip, in one pass over
 * the tile instead of tile_add's and the activation's (the same
 * operations in the same order: the same bits).
 */
#define ADD_ACT_FN(NAME, EXPR) \
	FM_CLONES static void \
	NAME(float *y, int64_t m, int64_t n, int64_t ldc, const float *bias, float lo, float hi) \
	{ \
		(void)lo, (void)hi; \
		for (int64_t i = 0; i < m; i++) { \
			float *r = y + i * ldc; \
			for (int64_t j = 0; j < n; j++) { \
				float v = r[j] + bias[j]; \
				r[j] = (EXPR); \
			} \
		} \
	}

ADD_ACT_FN(add_relu, v > 0.0f ? v : 0.0f)
ADD_ACT_FN(add_clip, v < lo ? lo : v > hi ? hi : v)

void
ml_fused_tile_epi(float *y, int64_t m, int64_t n, int64_t ldc, const float *bias, const float *z,
		  int act, float lo, float hi)
{
	if (bias != NULL && z == NULL && act == ML_ACT_RELU) {
		add_relu(y, m, n, ldc, bias, lo, hi);
		return;
	}
	if (bias != NULL && z == NULL && act == ML_ACT_CLIP) {
		add_clip(y, m, n, ldc, bias, lo, hi);
		return;
	}
	if (bias != NULL || z != NULL)
		tile_add(y, m, n, ldc, bias, z);
	if (act == ML_ACT_RELU)
		act_relu(y, m, n, ldc, lo, hi);
	else if (act == ML_ACT_CLIP)
		act_clip(y, m, n, ldc, lo, hi);
	else if (act > ML_ACT_NONE && act <= ML_ACT_GELU && n == ldc)
		/* Sigmoid, Tanh, SiLU, GELU (ML_ACT_* are ML_UN_* codes): vmath.c, whole rows in one call */
		ml_vunary(act, y, y, m * n);
	else if (act > ML_ACT_NONE && act <= ML_ACT_GELU)
		for (int64_t i = 0; i < m; i++)
			ml_vunary(act, y + i * ldc, y + i * ldc, n);
}

/*
 * FusedMatMul.
 */
/* How fmm_pack reads B: [k, n] f32, [n, k] f32 (a convolution's weight), [k, n] fp16 or bf16. */
enum { PK_PLAIN, PK_TRANS, PK_HALF, PK_BF16 };

struct fmm {
	const float *a, *b, *bias, *z, *bp;
	const int32_t *boff;		/* fmm_narrow: the panel's rows, ML_PG_NR apart */
	int src;			/* fmm_pack's PK_* */
	float *y;
	int64_t m, n, k;
	int64_t ntm, ntn, rm, wn;	/* row and column tiles, a tile's rows and columns */
	int act;
	float lo, hi;
};

_Static_assert(ML_PG_NR == ML_FUSED_PANEL, "the packed layout of fused.h is ml_pgemm's");

void
ml_fused_unpack(const float *bp, int64_t k, int64_t n, float *b)
{
	for (int64_t p = 0; p < (n + ML_PG_NR - 1) / ML_PG_NR; p++) {
		int64_t j0 = p * ML_PG_NR, w = ML_MIN((int64_t)ML_PG_NR, n - j0);
		for (int64_t r = 0; r < k; r++)
			memcpy(b + r * n + j0, bp + (p * k + r) * ML_PG_NR, sizeof(float) * (size_t)w);
	}
}

/* fmm_pack: panels [b, e) of B (as f->src says) into bp (ml_pgemm's layout, zeros past n). */
static void
fmm_pack(void *ctx, int64_t b, int64_t e)
{
	const struct fmm *f = ctx;
	const uint16_t *h = (const uint16_t *)f->b;
	for (int64_t p = b; p < e; p++) {
		float *dst = (float *)f->bp + p * ML_PG_NR * f->k;
		int64_t j0 = p * ML_PG_NR, w = ML_MIN((int64_t)ML_PG_NR, f->n - j0);
		for (int64_t r = 0; r < f->k; r++) {
			float *d = dst + r * ML_PG_NR;
			if (f->src == PK_PLAIN)
				memcpy(d, f->b + r * f->n + j0, sizeof(float) * (size_t)w);
			else if (f->src == PK_TRANS)
				for (int64_t jj = 0; jj < w; jj++)
					d[jj] = f->b[(j0 + jj) * f->k + r];
			else if (f->src == PK_HALF)
				for (int64_t jj = 0; jj < w; jj++)
					d[jj] = ml_f16_to_f32(h[r * f->n + j0 + jj]);
			else
				for (int64_t jj = 0; jj < w; jj++)
					d[jj] = ml_bf16_to_f32(h[r * f->n + j0 + jj]);
			for (int64_t jj = w; jj < ML_PG_NR; jj++)
				d[jj] = 0.0f;
		}
	}
}

/* fmm_narrow: runs of rows [b, e) (of j->rows) of a product of 16 columns or fewer */
struct fmm_nj {
	const struct fmm *f;
	int64_t rows;
};

static void
fmm_narrow(void *ctx, int64_t b, int64_t e)
{
	const struct fmm_nj *j = ctx;
	const struct fmm *f = j->f;
	for (int64_t t = b; t < e; t++) {
		int64_t i0 = t * j->rows, r = ML_MIN(j->rows, f->m - i0);
		float *y = f->y + i0 * f->n;
		/* inside a pool item ml_pgemm_narrow runs on this thread */
		ml_pgemm_narrow(r, f->n, f->k, f->a + i0 * f->k, f->k, f->bp, f->boff, NULL, y, f->n);
		ml_fused_tile_epi(y, r, f->n, f->n, f->bias, f->z != NULL ? f->z + i0 * f->n : NULL,
				  f->act, f->lo, f->hi);
	}
}

static void
fmm_tiles(void *ctx, int64_t b, int64_t e)
{
	const struct fmm *f = ctx;
	for (int64_t t = b; t < e; t++) {
		int64_t ti = t / f->ntn, tj = t % f->ntn;
		int64_t i0 = ti * f->rm, i1 = ML_MIN(f->m, i0 + f->rm);
		int64_t j0 = tj * f->wn, j1 = ML_MIN(f->n, j0 + f->wn);
		float *y = f->y + i0 * f->n + j0;
		/* inside a pool item ml_pgemm runs on this thread */
		ml_pgemm(i1 - i0, j1 - j0, f->k, f->a + i0 * f->k, f->k, f->bp + j0 * f->k, NULL, y,
			 f->n, false);
		ml_fused_tile_epi(y, i1 - i0, j1 - j0, f->n, f->bias != NULL ? f->bias + j0 : NULL,
			 f->z != NULL ? f->z + i0 * f->n + j0 : NULL, f->act, f->lo, f->hi);
	}
}

/*
 * A FusedMatMul of a few rows (batch-1 tokens of a late stage: ConvNeXt's
 * 2x2 maps give m = 4 against megabytes of weights) is a GEMV in all but
 * name and bound by reading B. With B packed by mlopt, each work item
 * streams whole panels (k x 32 floats, contiguous) from memory once and
 * keeps the m x 32 sums in registers (ml_pgemm_panel: up to 8 rows at a
 * time, 3 on AVX2): the order the hardware prefetcher likes, where the
 * tiled SGEMM walks k blocks across panels.
 */
#define SMALL_M 8
struct fsm {
	const float *a, *bp, *bias, *z;
	float *y;
	int64_t m, n, k;
	int act;
	float lo, hi;
};

/* fsm_panels: panels [b, e) of f: every row by each (nn_gemm.c's kernels), then its epilogue */
static void
fsm_panels(void *ctx, int64_t b, int64_t e)
{
	const struct fsm *f = ctx;

	for (int64_t p = b; p < e; p++) {
		int64_t n0 = p * ML_PG_NR, w = ML_MIN(ML_PG_NR, f->n - n0);
		ml_pgemm_panel(f->m, f->k, f->a, f->k, f->bp + p * f->k * ML_PG_NR, f->y + n0, f->n, w,
			       true);
		ml_fused_tile_epi(f->y + n0, f->m, w, f->n, f->bias != NULL ? f->bias + n0 : NULL,
				  f->z != NULL ? f->z + n0 : NULL, f->act, f->lo, f->hi);
	}
}

void
ml_cpu_pack_panels(const float *b, int64_t k, int64_t n, float *bp)
{
	struct fmm f = { .b = b, .bp = bp, .k = k, .n = n, .src = PK_PLAIN };
	fmm_pack(&f, 0, (n + ML_PG_NR - 1) / ML_PG_NR);
}

const float *
ml_cpu_wpanels(struct ml_opctx *c, int64_t k, int64_t n, bool trans)
{
	bool fill;
	void *tmp;
	bool bf = c->in[1]->dtype == ML_BF16, half = c->in[1]->dtype == ML_F16 || bf;

	if (!ml_cpu_wconst(c) || (half && trans) || (!half && c->in[1]->dtype != ML_F32))
		return NULL;
	float *bp = ml_cpu_wcache(c, trans ? ML_WC_PANELS_T : half ? ML_WC_PANELS_H : ML_WC_PANELS,
				  sizeof(float) * (size_t)ml_pgemm_packed_len(k, n), &fill, &tmp);
	if (bp != NULL && fill) {
		struct fmm f = { .b = c->in[1]->data, .bp = bp, .k = k, .n = n,
				 .src = trans ? PK_TRANS : bf ? PK_BF16 : half ? PK_HALF : PK_PLAIN };
		ml_parallel_for((n + ML_PG_NR - 1) / ML_PG_NR,
				ML_MAX(1, (int64_t)(1 << 16) / (k * ML_PG_NR)), fmm_pack, &f);
	}
	return bp;
}

static void fmm_run(struct fmm *fp, const float *bp);

/*
 * streams: a product of m rows streams B's panels (fsm_panels); ML_FUSED_SMALLM=off: never.
 * On AVX2 up to SMALL_M_AVX2 rows: its tiles pass over each panel's block once per
 * 16-column half, every other line of it each time, where B comes from memory
 * (ConvNeXt's 4x4 and 8x8 stages, MobileNet-V2's 7x7 pointwise layers: 12-25% slower
 * than streaming whole panels three rows at a time, the panel then in L2; Zen 3).
 */
#define SMALL_M_AVX2 64

static bool
streams(int64_t m)
{
	const char *sm = getenv("ML_FUSED_SMALLM");
	int64_t most = ml_pgemm_avx2() ? SMALL_M_AVX2 : SMALL_M;
	return m <= most && (sm == NULL || strcmp(sm, "off") != 0);
}

int
ml_cpu_fmatmul_fast(struct ml_opctx *c)
{
	const struct ml_tval *a = c->in[0], *b = c->in[1], *bias = ML_IN(c, 2), *z = ML_IN(c, 3);
	struct ml_tval *y = c->out[0];
	int64_t pn = ml_attr_int(c->node, "packed_n", 0);

	if (!ml_pgemm_ok() || a->dtype != ML_F32 || b->dtype != ML_F32 || a->rank < 2 ||
	    b->rank != (pn > 0 ? 3 : 2) || (bias != NULL && bias->dtype != ML_F32) ||
	    (z != NULL && z->dtype != ML_F32))
		return 1;
	int64_t k = b->dims[pn > 0 ? 1 : 0], n = pn > 0 ? pn : b->dims[1];
	int64_t total = ml_tval_numel(y);
	if (k <= 0 || n <= 0 || total <= 0 || a->dims[a->rank - 1] != k ||
	    ml_tval_numel(a) % k != 0 || (z != NULL && ml_tval_numel(z) != total))
		return 1;
	int64_t m = ml_tval_numel(a) / k;
	/* small products: OpenBLAS's small-matrix kernels need no packing and win */
	if (m * n != total || (pn <= 0 && m * n * k < FAST_MIN))
		return 1;
	struct fmm f = { .a = a->data, .b = b->data, .bias = bias != NULL ? bias->data : NULL,
			 .z = z != NULL ? z->data : NULL, .y = y->data, .m = m, .n = n, .k = k,
			 .act = ml_fused_act(c->node) };
	f.lo = (float)ml_attr_float(c->node, "clip_min", -INFINITY);
	f.hi = (float)ml_attr_float(c->node, "clip_max", INFINITY);
	int64_t npan = (n + ML_PG_NR - 1) / ML_PG_NR;
	bool packed = pn > 0 && b->dims[0] == npan && b->dims[2] == ML_PG_NR;
	/* a constant B [k, n]: its panels packed once, in the node's cache */
	const float *bpan = packed ? b->data : pn <= 0 ? ml_cpu_wpanels(c, k, n, false) : NULL;
	packed |= bpan != NULL;
	/*
	 * packed (by mlopt, or once into the cache): the panels as they are,
	 * when aligned as the tiles load them (a few rows stream them, aligned
	 * or not); else a copy, or B packed now
	 */
	if (packed && (((uintptr_t)bpan & 63) == 0 || streams(m))) {
		fmm_run(&f, bpan);
		return 0;
	}
	float *bp = ml_cpu_scratch(2, sizeof(float) * (size_t)ml_pgemm_packed_len(k, n));
	if (bp == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory packing B (%lld x %lld)", (long long)k,
				 (long long)n);
	f.bp = bp;
	if (pn > 0)
		memcpy(bp, b->data, sizeof(float) * (size_t)ml_pgemm_packed_len(k, n));
	else
		ml_parallel_for(npan, ML_MAX(1, (int64_t)(1 << 16) / (k * ML_PG_NR)), fmm_pack, &f);
	fmm_run(&f, bp);
	return 0;
}

void
ml_cpu_fmm_panels(int64_t m, int64_t k, int64_t n, const float *a, const float *bp,
		  const float *bias, const float *z, float *y, int act, float lo, float hi)
{
	struct fmm f = { .a = a, .bias = bias, .z = z, .y = y, .m = m, .n = n, .k = k, .act = act,
			 .lo = lo, .hi = hi };
	fmm_run(&f, bp);
}

/*
 * fmm_run: f's product against the packed panels bp (64-byte aligned): a
 * few rows stream each panel once (ML_FUSED_SMALLM=off: not), more run in
 * tiles. f->bp is set here.
 */
static void
fmm_run(struct fmm *fp, const float *bp)
{
	struct fmm f = *fp;
	int64_t m = f.m, n = f.n, k = f.k, npan = (n + ML_PG_NR - 1) / ML_PG_NR;
	if (streams(m)) {
		struct fsm s = { .a = f.a, .bp = bp, .bias = f.bias, .z = f.z, .y = f.y,
				 .m = m, .n = n, .k = k, .act = f.act, .lo = f.lo, .hi = f.hi };
		ml_parallel_for(npan, ML_MAX(1, ITEM_WORK / ML_MAX(1, m * ML_PG_NR * k)), fsm_panels,
				&s);
		return;
	}
	f.bp = bp;
	/*
	 * 16 columns or fewer (MobileNet-V2's and EfficientNet's 32 -> 16
	 * projections at 112x112, channels last): ml_pgemm_narrow's one
	 * 16-lane vector a row of C, reading the panel's rows for 16 floats,
	 * instead of the 32-wide kernel over a half-empty panel
	 */
	int32_t *boff = n <= 16 && k <= (1 << 20) ? ml_malloc(sizeof(int32_t) * (size_t)k) : NULL;
	if (boff != NULL) {
		for (int64_t p = 0; p < k; p++)
			boff[p] = (int32_t)(p * ML_PG_NR);
		f.boff = boff;
		int64_t rows = ML_MAX(12, ITEM_WORK / ML_MAX(1, 16 * k) / 12 * 12);
		ml_parallel_for((m + rows - 1) / rows, 1, fmm_narrow, &(struct fmm_nj){ &f, rows });
		ml_free(boff);
		return;
	}
	/*
	 * Tiles: about TILE_M rows (a multiple of 4, a whole number of row
	 * tiles per thread when there are rows enough) by runs of panels,
	 * enough of them for every thread twice. A row tile streams all of
	 * its panels of B, so few rows split by columns only.
	 */
	int64_t nt = ml_get_threads();
	f.ntm = (m + TILE_M - 1) / TILE_M;
	if (m >= 24 * nt)
		f.ntm = (f.ntm + nt - 1) / nt * nt;
	f.rm = ((m + f.ntm - 1) / f.ntm + 3) / 4 * 4;
	f.ntm = (m + f.rm - 1) / f.rm;
	int64_t runs = ML_MAX(1, ML_MIN(npan, (2 * nt + f.ntm - 1) / f.ntm));
	f.wn = (npan + runs - 1) / runs * ML_PG_NR;
	f.ntn = (n + f.wn - 1) / f.wn;
	int64_t work = f.rm * f.wn * k;
	ml_parallel_for(f.ntm * f.ntn, ML_MAX(1, ITEM_WORK / ML_MAX(1, work)), fmm_tiles, &f);
}

/*
 * FusedConv of a pointwise convolution (1x1 window, stride 1, no padding,
 * one group): per image Y[Cout, HW] = W[Cout, Cin] X[Cin, HW] + bias, the
 * GEMM of nn_conv.c's conv_pgemm, but in column tiles small enough that a
 * tile of packed X and of Y stay in L2, each packed by the thread that
 * multiplies it, and the residual and activation applied to the tile of Y
 * just stored. Items are (image, column tile, group of rows); a thread
 * packs a column tile once for consecutive row groups of it.
 */
struct fpw {
	const float *x, *w, *bias, *z;
	float *y;
	int64_t cout, cin, hw, tn, ntn, rg, nrg;
	int act;
	float lo, hi;
	_Atomic int failed;
};

/* fpw_pack: panels [j0, j1) (in columns) of the columns p0.. of x (rows k, stride hw) into bp. */
static void
fpw_pack(float *bp, const float *x, int64_t k, int64_t hw, int64_t p0, int64_t cur, int64_t j0,
	 int64_t j1)
{
	for (; j0 < j1 && j0 < cur; j0 += ML_PG_NR) {
		float *dst = bp + j0 * k;
		int64_t w = ML_MIN((int64_t)ML_PG_NR, cur - j0);
		for (int64_t r = 0; r < k; r++) {
			memcpy(dst + r * ML_PG_NR, x + r * hw + p0 + j0, sizeof(float) * (size_t)w);
			for (int64_t j = w; j < ML_PG_NR; j++)
				dst[r * ML_PG_NR + j] = 0.0f;
		}
	}
}

static void
fpw_items(void *ctx, int64_t b, int64_t e)
{
	struct fpw *f = ctx;
	int64_t k = f->cin;
	float *bp = ml_cpu_scratch(1, sizeof(float) * (size_t)ml_pgemm_packed_len(k, f->tn));
	if (bp == NULL) {
		f->failed = 1;
		return;
	}
	int64_t packed = -1;	/* the (image, column tile) in bp */
	for (int64_t it = b; it < e; it++) {
		int64_t ri = it % f->nrg, col = it / f->nrg, bi = col / f->ntn, tj = col % f->ntn;
		int64_t p0 = tj * f->tn, cur = ML_MIN(f->tn, f->hw - p0);
		if (packed != col)
			fpw_pack(bp, f->x + bi * f->cin * f->hw, k, f->hw, p0, cur, 0, cur);
		packed = col;
		int64_t r0 = ri * f->rg, r1 = ML_MIN(f->cout, r0 + f->rg);
		if (r0 >= r1)
			continue;
		int64_t off = bi * f->cout * f->hw + r0 * f->hw + p0;
		float *y = f->y + off;
		ml_pgemm(r1 - r0, cur, k, f->w + r0 * k, k, bp, f->bias != NULL ? f->bias + r0 : NULL,
			 y, f->hw, false);
		ml_fused_tile_epi(y, r1 - r0, cur, f->hw, NULL, f->z != NULL ? f->z + off : NULL, f->act, f->lo,
			 f->hi);
	}
}

/*
 * Small planes in few images (DenseNet's 8x8 and 4x4 at batch 1), where
 * the items would be groups of rows of one column tile, each packing that
 * tile again: X packed once for all (rows split over the pool), then one
 * packed SGEMM per image over all threads, then the epilogue.
 */
struct fpw_pk {
	const struct fpw *f;
	float *bp;
	int64_t plen;
};

static void
fpw_pack_rows(void *ctx, int64_t b, int64_t e)
{
	const struct fpw_pk *p = ctx;
	const struct fpw *f = p->f;
	int64_t npan = (f->hw + ML_PG_NR - 1) / ML_PG_NR;

	for (int64_t it = b; it < e; it++) {
		int64_t bi = it / f->cin, r = it % f->cin;
		const float *src = f->x + it * f->hw;
		float *dst = p->bp + bi * p->plen + r * ML_PG_NR;
		for (int64_t jp = 0; jp < npan; jp++) {
			int64_t w = ML_MIN((int64_t)ML_PG_NR, f->hw - jp * ML_PG_NR);
			float *d = dst + jp * ML_PG_NR * f->cin;
			memcpy(d, src + jp * ML_PG_NR, sizeof(float) * (size_t)w);
			memset(d + w, 0, sizeof(float) * (size_t)(ML_PG_NR - w));
		}
	}
}

/*
 * Planes of 16 positions or fewer (DenseNet's 4x4 and 2x2): X's rows are
 * B's rows as they are (copied into rows of 16 when shorter, so that the
 * 16-lane loads stay inside), through ml_pgemm_narrow: nothing packed and
 * no half-empty panel; then the epilogue.
 */
#define NARROW_MIN ((int64_t)1 << 15)

static int
fpw_narrow(struct ml_opctx *c, const struct fpw *f, int64_t nb)
{
	int64_t ld = f->hw == 16 ? 16 : ML_PG_NR / 2;
	int32_t *off = ml_cpu_scratch(0, sizeof(int32_t) * (size_t)f->cin);
	float *xs = f->hw == 16 ? NULL : ml_cpu_scratch(1, sizeof(float) * (size_t)(f->cin * ld));

	if (off == NULL || (f->hw != 16 && xs == NULL))
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	for (int64_t k = 0; k < f->cin; k++)
		off[k] = (int32_t)(k * ld);
	for (int64_t bi = 0; bi < nb; bi++) {
		const float *xb = f->x + bi * f->cin * f->hw;
		if (xs != NULL) {
			for (int64_t k = 0; k < f->cin; k++) {
				memcpy(xs + k * ld, xb + k * f->hw, sizeof(float) * (size_t)f->hw);
				memset(xs + k * ld + f->hw, 0, sizeof(float) * (size_t)(ld - f->hw));
			}
			xb = xs;
		}
		ml_pgemm_narrow(f->cout, f->hw, f->cin, f->w, f->cin, xb, off, f->bias,
				f->y + bi * f->cout * f->hw, f->hw);
	}
	ml_cpu_fused_epilogue(c, c->out[0], NULL, 0, ML_IN(c, 3));
	return 0;
}

/* fpw_pack_own: all of X's rows (one image) into a thread's own panels (ml_pgemm_own) */
static void
fpw_pack_own(void *ctx, float *bp)
{
	struct fpw_pk p = *(const struct fpw_pk *)ctx;
	p.bp = bp;
	fpw_pack_rows(&p, 0, p.f->cin);
}

static int
fpw_whole(struct ml_opctx *c, const struct fpw *f, int64_t nb)
{
	struct fpw_pk p = { f, NULL, ml_pgemm_packed_len(f->cin, f->hw) };

	/*
	 * One image: each thread packs X for itself, as the threads split Y
	 * by rows and each reads all of X (a copy the other core had packed
	 * half of missed in cache on every pass: DenseNet's 16x16 and 8x8)
	 */
	if (nb == 1) {
		if (ml_pgemm_own(f->cout, f->hw, f->cin, f->w, f->cin, fpw_pack_own, &p,
				 sizeof(float) * (size_t)p.plen, 0, NULL, f->bias, f->y, f->hw) < 0)
			return ml_opfail(c, ML_ENOMEM, "out of memory packing X");
		ml_cpu_fused_epilogue(c, c->out[0], NULL, 0, ML_IN(c, 3));
		return 0;
	}
	p.bp = ml_cpu_scratch(0, sizeof(float) * (size_t)(nb * p.plen));
	if (p.bp == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory packing X");
	ml_parallel_for(nb * f->cin, ML_MAX(1, 8192 / ML_MAX(f->hw, 1)), fpw_pack_rows, &p);
	ml_pgemm_batch(nb, f->cout, f->hw, f->cin, f->w, f->cin, 0, p.bp, p.plen, f->bias, f->y,
		       f->hw, f->cout * f->hw, false);
	ml_cpu_fused_epilogue(c, c->out[0], NULL, 0, ML_IN(c, 3));
	return 0;
}

/*
 * Large planes of one image on AVX2 (SqueezeNet's 55x55 and 27x27 squeeze
 * and expand layers): X's rows are B's rows where they lie (ml_pgemm_rows,
 * nn_gemm.c's 6 x 16 kernel reading them in place), nothing packed, the
 * epilogue applied to each item's block of Y as it completes. The kernel
 * reads whole panels, so the rows-GEMM takes the columns up to the last
 * whole panel (a row's reads past that stay inside X, in the next row),
 * and the last few columns are copied into rows of one panel for a second.
 * On AVX-512 the tiles of fpw_items stay (not measured against this);
 * ML_CONV_PWROWS=1 or 0 forces either (tests, comparisons).
 */
#define PWROWS_MIN_HW 1024

static bool
pw_rows(int64_t nb, int64_t hw, int64_t cin)
{
	const char *e = getenv("ML_CONV_PWROWS");
	/* X's rows by int32 offsets (ml_pgemm_rows): larger inputs take the tiles */
	if (nb != 1 || hw < PWROWS_MIN_HW || !ml_pgemm_rows_ok() || cin > INT32_MAX / hw)
		return false;
	if (e != NULL && (strcmp(e, "0") == 0 || strcmp(e, "1") == 0))
		return e[0] == '1';
	return ml_pgemm_avx2();
}

static int
fpw_rows(struct ml_opctx *c, const struct fpw *f)
{
	int64_t hw = f->hw, k = f->cin, whole = hw / ML_PG_NR * ML_PG_NR, tail = hw - whole;
	int32_t *off = ml_cpu_scratch(0, sizeof(int32_t) * (size_t)(2 * k));
	float *tb = tail > 0 ? ml_cpu_scratch(1, sizeof(float) * (size_t)(k * ML_PG_NR)) : NULL;

	if (off == NULL || (tail > 0 && tb == NULL))
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	struct ml_conv_epi e = { .z = f->z, .act = f->act, .lo = f->lo, .hi = f->hi };
	for (int64_t p = 0; p < k; p++) {
		off[p] = (int32_t)(p * hw);
		off[k + p] = (int32_t)(p * ML_PG_NR);
	}
	if (whole > 0)
		ml_pgemm_rows_epi(f->cout, whole, k, f->w, k, f->x, off, f->bias, f->y, hw, &e);
	if (tail > 0) {
		for (int64_t p = 0; p < k; p++) {
			memcpy(tb + p * ML_PG_NR, f->x + p * hw + whole, sizeof(float) * (size_t)tail);
			memset(tb + p * ML_PG_NR + tail, 0, sizeof(float) * (size_t)(ML_PG_NR - tail));
		}
		e.z = f->z != NULL ? f->z + whole : NULL;
		ml_pgemm_rows_epi(f->cout, tail, k, f->w, k, tb, off + k, f->bias, f->y + whole, hw,
				  &e);
	}
	return 0;
}

int
ml_cpu_fconv_fast(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *w = c->in[1], *bias = ML_IN(c, 2), *z = ML_IN(c, 3);
	struct ml_tval *y = c->out[0];
	int r = x->rank;

	if (!ml_pgemm_ok() || x->dtype != ML_F32 || w->dtype != ML_F32 || r < 3 || w->rank != r ||
	    y->rank != r || (bias != NULL && bias->dtype != ML_F32) ||
	    (z != NULL && (z->dtype != ML_F32 || ml_tval_numel(z) != ml_tval_numel(y))) ||
	    ml_attr_int(c->node, "group", 1) != 1 || !ml_attr_ints_all(c->node, "strides", 1) ||
	    !ml_attr_ints_all(c->node, "pads", 0) || w->dims[1] != x->dims[1])
		return 1;
	int64_t hw = 1;
	for (int d = 2; d < r; d++) {
		if (w->dims[d] != 1 || y->dims[d] != x->dims[d])
			return 1;
		hw *= x->dims[d];
	}
	int64_t nb = x->dims[0], cin = x->dims[1], cout = w->dims[0];
	bool narrow = hw <= 16 && ml_pgemm_rows_ok() && nb * cout * cin * hw >= NARROW_MIN;
	if (nb <= 0 || hw <= 0 || cout <= 0 || cin <= 0 || y->dims[1] != cout ||
	    (bias != NULL && ml_tval_numel(bias) != cout) ||
	    (nb * cout * cin * hw < FAST_MIN && !narrow))
		return 1;
	struct fpw f = { .x = x->data, .w = w->data, .bias = bias != NULL ? bias->data : NULL,
			 .z = z != NULL ? z->data : NULL, .y = y->data, .cout = cout, .cin = cin,
			 .hw = hw, .act = ml_fused_act(c->node) };
	f.lo = (float)ml_attr_float(c->node, "clip_min", -INFINITY);
	f.hi = (float)ml_attr_float(c->node, "clip_max", INFINITY);
	if (narrow)
		return fpw_narrow(c, &f, nb);
	if (pw_rows(nb, hw, cin))
		return fpw_rows(c, &f);
	/*
	 * Column tiles: a packed tile of X within 128 KB and a tile of Y
	 * within 512 KB, as many per image as threads or a multiple; small
	 * planes (the 14x14 and 7x7 layers) are one tile, split by rows.
	 */
	int64_t nt = ml_get_threads(), hw32 = (hw + ML_PG_NR - 1) / ML_PG_NR * ML_PG_NR;
	int64_t tn = ML_MIN((int64_t)32768 / cin, (int64_t)131072 / cout) / ML_PG_NR * ML_PG_NR;
	tn = ML_MAX(tn, (int64_t)ML_PG_NR);
	if (hw <= 512 || tn >= hw32) {
		f.tn = hw32;
	} else {
		int64_t ntn = (hw + tn - 1) / tn;
		ntn = (ntn + nt - 1) / nt * nt;
		f.tn = ((hw + ntn - 1) / ntn + ML_PG_NR - 1) / ML_PG_NR * ML_PG_NR;
	}
	f.ntn = (hw + f.tn - 1) / f.tn;
	/* groups of rows (at least 12, a multiple of 4) when the tiles are too few, as many per thread */
	int64_t cols = nb * f.ntn;
	if (f.ntn == 1 && cols < 2 * nt)
		return fpw_whole(c, &f, nb);
	f.nrg = (2 * nt + cols - 1) / cols;
	f.nrg = ML_MAX(1, ML_MIN((f.nrg + nt - 1) / nt * nt, cout / 12));
	f.rg = ((cout + f.nrg - 1) / f.nrg + 3) / 4 * 4;
	f.nrg = (cout + f.rg - 1) / f.rg;
	int64_t work = f.rg * f.tn * cin;
	ml_parallel_for(cols * f.nrg, ML_MAX(1, ITEM_WORK / ML_MAX(1, work)), fpw_items, &f);
	if (f.failed)
		return ml_opfail(c, ML_ENOMEM, "out of memory packing a tile of X");
	return 0;
}

/*
 * Attention, one batch entry (head) at a time: Kt and V are copied into
 * buffers whose rows are padded to whole blocks of 8 (zeros), so that the
 * scores of a query row (over the keys) and its output (over V's columns)
 * are computed 8 lanes at a time with no remainder loops; the heads of
 * exported encoders are short (a dozen keys, 16 to 64 columns), where
 * loops of variable length would run element by element.
 */
#define AB 8
/* query rows at a time */
#define AR 4

/* 8 floats as one value (GCC's vector extension: one ymm, or two xmm in the default clone) */
typedef float v8f __attribute__((vector_size(32)));
/* the same, unaligned and allowed to alias floats */
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));

/* 8 ints, the lanes' masks of a comparison of v8f (and its indices) */
typedef int v8i __attribute__((vector_size(32)));

/* as macros: a function returning a vector type would change the ABI of the default clone */
#define v8_set(x) ((v8f){ (x), (x), (x), (x), (x), (x), (x), (x) })
#define v8i_set(x) ((v8i){ (x), (x), (x), (x), (x), (x), (x), (x) })
/* v's lanes in the order of the 8 indices */
#if defined(__clang__)
#define v8_shuf(v, ...) __builtin_shufflevector((v), (v), __VA_ARGS__)
#else
#define v8_shuf(v, ...) __builtin_shuffle((v), (v8i){ __VA_ARGS__ })
#endif
#define v8_load(p) (*(const v8u *)(p))
#define v8_store(p, v) (*(v8u *)(p) = (v))

struct att {
	const float *q, *kt, *v;
	float *y;
	int64_t l, d, s, dv, s8, dv8;
	float scale;
	_Atomic int failed;	/* a thread could not get its buffers */
};

/* att_softmax: row[0..s) to its softmax, row[s..s8) (the padding) to 0. */
static inline void
att_softmax(float *row, int64_t s, int64_t s8)
{
	float mx = -INFINITY;
	for (int64_t j = 0; j < s; j++)
		mx = row[j] > mx ? row[j] : mx;
	/*
	 * every lane through exp (padded keys score 0: finite) in vector
	 * registers (vmath.c: an encoder's Attention spent most of its time in
	 * a scalar exp a score), then the padding zeroed
	 */
	for (int64_t j = 0; j < s8; j++)
		row[j] -= mx;
	ml_vunary(ML_UN_EXP, row, row, s8);
	v8f vsum = v8_set(0.0f);
	for (int64_t j0 = 0; j0 < s8; j0 += AB) {
		v8f e8 = v8_load(row + j0);
		/*
		 * the padding masked and the lanes summed by whole-vector
		 * operations: a lane written or read one at a time goes
		 * through memory, which stalled most of an encoder's Attention
		 */
		if (j0 + AB > s) {
			v8i keep = (v8i){ 0, 1, 2, 3, 4, 5, 6, 7 } + (int)j0 < v8i_set((int)s);
			e8 = (v8f)((v8i)e8 & keep);
		}
		v8_store(row + j0, e8);
		vsum += e8;
	}
	vsum += v8_shuf(vsum, 4, 5, 6, 7, 0, 1, 2, 3);
	vsum += v8_shuf(vsum, 2, 3, 0, 1, 6, 7, 4, 5);
	vsum += v8_shuf(vsum, 1, 0, 3, 2, 5, 4, 7, 6);
	v8f inv = v8_set(1.0f / vsum[0]);
	for (int64_t j0 = 0; j0 < s8; j0 += AB)
		v8_store(row + j0, v8_load(row + j0) * inv);
}

FM_CLONES static void
att_heads(void *ctx, int64_t b, int64_t e)
{
	struct att *p = ctx;
	int64_t l = p->l, d = p->d, s = p->s, dv = p->dv, s8 = p->s8, dv8 = p->dv8;
	float *kp = ml_cpu_scratch(0, sizeof(float) * (size_t)(d * s8 + s * dv8 + (l + 1) * s8));
	if (kp == NULL) {
		p->failed = 1;
		return;
	}
	float *vp = kp + d * s8, *sc = vp + s * dv8;
	for (int64_t bi = b; bi < e; bi++) {
		const float *kt = p->kt + bi * d * s, *v = p->v + bi * s * dv;
		for (int64_t t = 0; t < d; t++) {
			memcpy(kp + t * s8, kt + t * s, sizeof(float) * (size_t)s);
			for (int64_t j = s; j < s8; j++)
				kp[t * s8 + j] = 0.0f;
		}
		for (int64_t j = 0; j < s; j++) {
			memcpy(vp + j * dv8, v + j * dv, sizeof(float) * (size_t)dv);
			for (int64_t t = dv; t < dv8; t++)
				vp[j * dv8 + t] = 0.0f;
		}
		/* AR query rows at a time: independent sums, not one chain of dependent adds */
		for (int64_t i0 = 0; i0 < l; i0 += AR) {
			const float *q[AR];
			float *row[AR];
			for (int r = 0; r < AR; r++) {
				int64_t i = ML_MIN(i0 + r, l - 1);	/* past l: row l - 1 again, unused */
				q[r] = p->q + (bi * l + i) * d;
				row[r] = sc + (i0 + r < l ? i0 + r : l) * s8;
			}
			for (int64_t j0 = 0; j0 < s8; j0 += AB) {
				v8f acc[AR];
				for (int r = 0; r < AR; r++)
					acc[r] = v8_set(0.0f);
				for (int64_t t = 0; t < d; t++) {
					v8f kv = v8_load(kp + t * s8 + j0);
					for (int r = 0; r < AR; r++)
						acc[r] += v8_set(q[r][t]) * kv;
				}
				for (int r = 0; r < AR; r++)
					v8_store(row[r] + j0, acc[r] * v8_set(p->scale));
			}
			for (int r = 0; r < AR && i0 + r < l; r++)
				att_softmax(row[r], s, s8);
			for (int64_t t0 = 0; t0 < dv8; t0 += AB) {
				v8f acc[AR];
				for (int r = 0; r < AR; r++)
					acc[r] = v8_set(0.0f);
				for (int64_t j = 0; j < s; j++) {
					v8f vv = v8_load(vp + j * dv8 + t0);
					for (int r = 0; r < AR; r++)
						acc[r] += v8_set(row[r][j]) * vv;
				}
				int64_t w = ML_MIN((int64_t)AB, dv - t0);
				for (int r = 0; r < AR && i0 + r < l; r++) {
					float *y = p->y + (bi * l + i0 + r) * dv + t0;
					for (int64_t u = 0; u < w; u++)
						y[u] = acc[r][u];
				}
			}
		}
	}
}

int
ml_cpu_attention(struct ml_opctx *c)
{
	const struct ml_tval *q = c->in[0], *kt = c->in[1], *v = c->in[2];
	struct ml_tval *y = c->out[0];
	int r = q->rank;

	if (q->dtype != ML_F32 || kt->dtype != ML_F32 || v->dtype != ML_F32)
		return ml_opfail(c, ML_ENOTSUP, "Attention takes f32");
	if (r < 2 || kt->rank != r || v->rank != r)
		return ml_opfail(c, ML_EINVAL, "Q, Kt and V must have one rank of at least 2");
	int64_t nb = 1;
	for (int d = 0; d < r - 2; d++) {
		if (q->dims[d] != kt->dims[d] || q->dims[d] != v->dims[d])
			return ml_opfail(c, ML_EINVAL, "Q, Kt and V have different batch dims");
		nb *= q->dims[d];
	}
	struct att p = { .q = q->data, .kt = kt->data, .v = v->data, .y = y->data,
			 .l = q->dims[r - 2], .d = q->dims[r - 1], .s = kt->dims[r - 1],
			 .dv = v->dims[r - 1],
			 .scale = (float)ml_attr_float(c->node, "scale", 1.0) };
	if (kt->dims[r - 2] != p.d || v->dims[r - 2] != p.s)
		return ml_opfail(c, ML_EINVAL, "Q [.., L, D], Kt [.., D, S] and V [.., S, Dv] do not match");
	if (nb * p.l <= 0 || p.dv <= 0)
		return 0;
	if (p.s <= 0)
		return ml_opfail(c, ML_EINVAL, "Attention over no keys (S is 0)");
	p.s8 = (p.s + AB - 1) / AB * AB;
	p.dv8 = (p.dv + AB - 1) / AB * AB;
	int64_t per = p.l * p.s8 * (p.d + p.dv8);
	ml_parallel_for(nb, ML_MAX(1, (int64_t)ITEM_WORK / ML_MAX(1, per)), att_heads, &p);
	if (p.failed)
		return ml_opfail(c, ML_ENOMEM, "out of memory for %lld scores", (long long)p.s);
	return 0;
}
