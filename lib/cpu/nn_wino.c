/*
 * nn_wino.c: f32 3x3 stride-1 convolution by Winograd's F(4x4, 3x3)
 * (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks").
 *
 * Each 4x4 output tile comes from a 6x6 input tile: the input tiles are
 * transformed (V = B^T d B), the filters too (U = G g G^T), and for each
 * of the 36 transformed positions one SGEMM multiplies U [M, C] by
 * V [C, tiles]; the output transform (A^T m A) gives the tiles back. That
 * is 36 multiplies per 16 outputs and input channel instead of 144, at
 * the price of the transforms, which are linear passes over memory split
 * over ml_parallel_for. It pays on the wide layers of ResNet-style
 * networks; ml_wino_ok keeps it to shapes where the GEMMs stay large.
 * The tiles of a batch's images are the columns of the same GEMMs (groups
 * of tile rows run on across images), so the transformed filters are made
 * and read once per group of tiles, not once per image, and small planes
 * (14x14: 16 tiles) reach Winograd at batch 2 and more. A FusedConv's
 * residual and activation are applied as the output transform writes rows.
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
 * Winograd beats im2col + SGEMM. 32 takes in ResNet's 7x7 layers at batch
 * 8 (4 tiles an image): their three 3x3 stride-1 convolutions measured
 * 0.6-0.8x of im2col's time with the batch folded (AMD EPYC, 2 threads).
 */
#define WINO_MIN_TILES 32
#define WINO_MIN_CHANNELS 16
/*
 * The scratch is bounded by working on groups of about WINO_GROUP tiles
 * (whole tile rows) and, when all the transformed filters would take more
 * than WINO_U_MAX bytes, on blocks of filters, each transformed just
 * before its GEMMs; so V, M and U stay near a megabyte each whatever the
 * layer, instead of 36 copies of a whole layer's input and output.
 */
#define WINO_GROUP 64
#define WINO_U_MAX ((int64_t)1 << 20)

/*
 * wino_enabled: false when the environment sets ML_WINOGRAD=0, for
 * results that must match a direct convolution to the last few ulps.
 */
static bool
wino_enabled(void)
{
	/* -1 until known; racing first callers compute the same value */
	static atomic_int on = -1;
	int v = atomic_load_explicit(&on, memory_order_relaxed);

	if (v < 0) {
		const char *e = getenv("ML_WINOGRAD");
		v = e != NULL && strcmp(e, "0") == 0 ? 0 : 1;
		atomic_store_explicit(&on, v, memory_order_relaxed);
	}
	return v == 1;
}

bool
ml_wino_ok(const struct ml_conv3 *v)
{
	int64_t tiles = ((v->out[1] + 3) / 4) * ((v->out[2] + 3) / 4);

	/* the batch's images share the GEMMs (their tiles are columns): they count together */
	return wino_enabled() && v->group == 1 && v->k[0] == 1 && v->k[1] == 3 && v->k[2] == 3 && v->in[0] == 1 &&
	       v->out[0] == 1 && v->p[0] == 0 && v->s[1] == 1 && v->s[2] == 1 && v->d[1] == 1 &&
	       v->d[2] == 1 && v->cin >= WINO_MIN_CHANNELS && v->cout >= WINO_MIN_CHANNELS &&
	       tiles * v->n >= WINO_MIN_TILES;
}

struct wino {
	const struct ml_conv3 *v;
	int64_t C, M, TH, TW, T;
	/*
	 * The tile rows of the current group, and its tiles. Rows count on
	 * across the batch (row ty is row ty % TH of image ty / TH), so a
	 * group, and the GEMMs over it, may take the tiles of several images.
	 */
	int64_t ty0, ty1, Tg;
	int64_t m0, Mb;		/* the first filter and the filters of the current block */
	const float *x, *w, *bias;	/* x, y: the first image's */
	const struct ml_conv_epi *e;	/* FusedConv's residual and activation, or NULL */
	float *y, *U, *V, *Mo;
	bool packed;		/* V in ml_pgemm's panels, vstride floats per position */
	int64_t vstride;
	atomic_int nomem;
};

/*
 * The filter transform U = G g G^T, for filters [m0, m1) of the current
 * block (filter j->m0 + m). The 36 values of a filter go to 36 rows of U
 * that lie Mb * C apart, often a power of
 * two that would map every store to the same cache set, so a block of
 * channels is transformed into a local buffer first and each row written
 * in one contiguous run.
 */
#define WINO_CB 64

static void
wino_filters(void *ctx, int64_t m0, int64_t m1)
{
	struct wino *j = ctx;
	int64_t C = j->C, MC = j->Mb * j->C;
	float ub[36][WINO_CB];

	for (int64_t m = m0; m < m1; m++)
		for (int64_t cb = 0; cb < C; cb += WINO_CB) {
			int64_t nc = ML_MIN(WINO_CB, C - cb);
			for (int64_t ci = 0; ci < nc; ci++) {
				const float *g = j->w + ((j->m0 + m) * C + cb + ci) * 9;
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

/*
 * The input transform V = B^T d B for channels [c0, c1), over the tile
 * rows of the current group (of one image or several).
 * Per tile row, the six input rows (zero-padded) are first combined down
 * the columns, vectorised along the row, then across each tile.
 */
ML_CLONES static void
wino_inputs(void *ctx, int64_t c0, int64_t c1)
{
	struct wino *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t H = v->in[1], W = v->in[2], WP = 4 * j->TW + 2, CT = j->C * j->Tg;
	float *rows = ml_malloc(sizeof(float) * (size_t)(12 * WP));

	if (rows == NULL) {
		atomic_store(&j->nomem, 1);
		return;
	}
	float *t = rows + 6 * WP;
	for (int64_t c = c0; c < c1; c++) {
		for (int64_t ty = j->ty0; ty < j->ty1; ty++) {
			const float *xc = j->x + ((ty / j->TH) * j->C + c) * v->insz;
			int64_t ly = ty % j->TH;
			for (int i = 0; i < 6; i++) {
				int64_t ih = 4 * ly - v->p[1] + i;
				float *rw = rows + i * WP;
				if (ih < 0 || ih >= H) {
					memset(rw, 0, sizeof(float) * (size_t)WP);
					continue;
				}
				/* row q holds input column q - pad: zeros, then the row, then zeros */
				int64_t lo = ML_MIN(v->p[2], WP), hi = ML_MIN(v->p[2] + W, WP);
				memset(rw, 0, sizeof(float) * (size_t)lo);
				memcpy(rw + lo, xc + ih * W + (lo - v->p[2]), sizeof(float) * (size_t)(hi - lo));
				memset(rw + hi, 0, sizeof(float) * (size_t)(WP - hi));
			}
			const float *d0 = rows, *d1 = rows + WP, *d2 = rows + 2 * WP;
			const float *d3 = rows + 3 * WP, *d4 = rows + 4 * WP, *d5 = rows + 5 * WP;
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
				if (j->packed) {
					/* position xi's [C, T] in panels: (c, t) at (t / NR) * NR * C + c * NR + t % NR */
					int64_t vs = j->vstride, t0 = (ty - j->ty0) * j->TW;
					float *o = j->V + (r * 6) * vs + c * ML_PG_NR;
					for (int64_t tx = 0; tx < j->TW; tx++) {
						const float *e = tr + 4 * tx;
						int64_t tt = t0 + tx;
						float *q = o + tt / ML_PG_NR * ML_PG_NR * j->C + tt % ML_PG_NR;
						q[0] = 4 * e[0] - 5 * e[2] + e[4];
						q[vs] = -4 * e[1] - 4 * e[2] + e[3] + e[4];
						q[2 * vs] = 4 * e[1] - 4 * e[2] - e[3] + e[4];
						q[3 * vs] = -2 * e[1] - e[2] + 2 * e[3] + e[4];
						q[4 * vs] = 2 * e[1] - e[2] - 2 * e[3] + e[4];
						q[5 * vs] = 4 * e[1] - 5 * e[3] + e[5];
					}
					continue;
				}
				float *o = j->V + (r * 6) * CT + c * j->Tg + (ty - j->ty0) * j->TW;
				for (int64_t tx = 0; tx < j->TW; tx++) {
					const float *e = tr + 4 * tx;
					o[tx] = 4 * e[0] - 5 * e[2] + e[4];
					o[CT + tx] = -4 * e[1] - 4 * e[2] + e[3] + e[4];
					o[2 * CT + tx] = 4 * e[1] - 4 * e[2] - e[3] + e[4];
					o[3 * CT + tx] = -2 * e[1] - e[2] + 2 * e[3] + e[4];
					o[4 * CT + tx] = 2 * e[1] - e[2] - 2 * e[3] + e[4];
					o[5 * CT + tx] = 4 * e[1] - 5 * e[3] + e[5];
				}
			}
		}
	}
	ml_free(rows);
}

/*
 * The output transform Y = A^T m A (plus the bias) for filters [m0, m1)
 * of the current block, over the tile rows of the current group:
 * across the tiles first, vectorised along the tile row, then down, into
 * four row buffers whose valid part is copied to Y.
 */
ML_CLONES static void
wino_outputs(void *ctx, int64_t m0, int64_t m1)
{
	struct wino *j = ctx;
	const struct ml_conv3 *v = j->v;
	int64_t OH = v->out[1], OW = v->out[2], TW = j->TW, MT = j->Mb * j->Tg;
	float *t = ml_malloc(sizeof(float) * (size_t)(24 * TW + 16 * TW));

	if (t == NULL) {
		atomic_store(&j->nomem, 1);
		return;
	}
	float *orow = t + 24 * TW;	/* [4][4 * TW] */
	for (int64_t m = m0; m < m1; m++) {
		float b = j->bias != NULL ? j->bias[j->m0 + m] : 0.0f;
		for (int64_t ty = j->ty0; ty < j->ty1; ty++) {
			/* t[r][s][tx]: row r of the tile reduced across to output column s */
			for (int r = 0; r < 6; r++) {
				const float *p = j->Mo + (r * 6) * MT + m * j->Tg + (ty - j->ty0) * TW;
				float *t0 = t + (r * 4) * TW, *t1 = t0 + TW, *t2 = t1 + TW, *t3 = t2 + TW;
				for (int64_t tx = 0; tx < TW; tx++) {
					float e0 = p[tx], e1 = p[MT + tx], e2 = p[2 * MT + tx];
					float e3 = p[3 * MT + tx], e4 = p[4 * MT + tx], e5 = p[5 * MT + tx];
					t0[tx] = e0 + e1 + e2 + e3 + e4;
					t1[tx] = e1 - e2 + 2 * (e3 - e4);
					t2[tx] = e1 + e2 + 4 * (e3 + e4);
					t3[tx] = e1 - e2 + 8 * (e3 - e4) + e5;
				}
			}
			for (int s = 0; s < 4; s++) {
				const float *a0 = t + (0 * 4 + s) * TW, *a1 = t + (1 * 4 + s) * TW;
				const float *a2 = t + (2 * 4 + s) * TW, *a3 = t + (3 * 4 + s) * TW;
				const float *a4 = t + (4 * 4 + s) * TW, *a5 = t + (5 * 4 + s) * TW;
				for (int64_t tx = 0; tx < TW; tx++) {
					float e0 = a0[tx], e1 = a1[tx], e2 = a2[tx], e3 = a3[tx];
					float e4 = a4[tx], e5 = a5[tx];
					orow[0 * 4 * TW + 4 * tx + s] = b + e0 + e1 + e2 + e3 + e4;
					orow[1 * 4 * TW + 4 * tx + s] = b + e1 - e2 + 2 * (e3 - e4);
					orow[2 * 4 * TW + 4 * tx + s] = b + e1 + e2 + 4 * (e3 + e4);
					orow[3 * 4 * TW + 4 * tx + s] = b + e1 - e2 + 8 * (e3 - e4) + e5;
				}
			}
			int64_t ly = ty % j->TH;
			float *ym = j->y + ((ty / j->TH) * j->M + j->m0 + m) * v->outsz;
			for (int q = 0; q < 4 && 4 * ly + q < OH; q++)
				memcpy(ym + (4 * ly + q) * OW, orow + q * 4 * TW,
				       sizeof(float) * (size_t)OW);
			if (j->e != NULL) {
				/* the tile row's output rows, still in L1 */
				int64_t nr = ML_MIN((int64_t)4, OH - 4 * ly);
				int64_t off = ym + 4 * ly * OW - j->y;
				ml_fused_tile_epi(j->y + off, nr, OW, OW, NULL,
						  j->e->z != NULL ? j->e->z + off : NULL, j->e->act,
						  j->e->lo, j->e->hi);
			}
		}
	}
	ml_free(t);
}

/* wino_fits: whether U, V and Mo for TR tile rows and MB filters fit memory already there */
static bool
wino_fits(const struct wino *j, int64_t TR, int64_t MB)
{
	int64_t T = TR * j->TW, vs = j->packed ? ml_pgemm_packed_len(j->C, T) : j->C * T;
	const int slots[3] = { 2, 0, 1 };
	const size_t sz[3] = { sizeof(float) * (size_t)(36 * MB * j->C),
			       sizeof(float) * (size_t)(36 * vs),
			       sizeof(float) * (size_t)(36 * MB * T) };
	return ml_cpu_scratch_fits(3, slots, sz);
}

/*
 * wino_shape: tile rows per group (TR) and filters per block (MB). The
 * defaults when their buffers fit memory already there (the stretch of the
 * arena the session lends while this node runs, or earlier blocks), so that
 * the run's peak memory stays the plan's; else the pair that fits at the
 * least estimated cost: tile columns padded to whole GEMM panels, small
 * filter blocks, and filters transformed again for each group of rows.
 * The defaults again when nothing fits (the heap then).
 */
static void
wino_shape(const struct wino *j, int64_t *TR, int64_t *MB)
{
	int64_t tr0 = *TR, mb0 = *MB;
	double best = 0;
	if (wino_fits(j, tr0, mb0))
		return;
	for (int64_t tr = tr0; tr >= 1; tr--)
		for (int64_t mb = mb0; mb >= 1; mb = mb > 12 ? (mb - 1) / 12 * 12 : 0) {
			if (!wino_fits(j, tr, mb))
				continue;
			int64_t t = tr * j->TW, pad = j->packed ? ml_pgemm_packed_len(1, t) : t;
			double cost = (double)pad / (double)t * (1 + 6.0 / (double)mb) *
				      (mb < j->M ? 1 + 2.0 / (double)t : 1);
			if (best == 0 || cost < best) {
				best = cost;
				*TR = tr;
				*MB = mb;
			}
		}
}

int
ml_wino_conv(struct ml_opctx *c, const struct ml_conv3 *v, const float *x, const float *w,
	     const float *bias, const struct ml_conv_epi *e, float *y)
{
	struct wino j = { .v = v, .C = v->cin, .M = v->cout, .w = w, .bias = bias, .e = e };

	j.TH = (v->out[1] + 3) / 4;
	j.TW = (v->out[2] + 3) / 4;
	j.T = j.TH * j.TW;
	atomic_init(&j.nomem, 0);
	/* tile rows per group, and filters per block (all when U fits WINO_U_MAX) */
	int64_t TR = ML_MIN(v->n * j.TH, ML_MAX(1, WINO_GROUP / j.TW));
	int64_t MB = ML_MAX(1, WINO_U_MAX / (36 * (int64_t)sizeof(float) * j.C));
	MB = MB >= j.M ? j.M : ML_MAX(12, MB / 12 * 12);
	j.packed = ml_pgemm_ok();
	wino_shape(&j, &TR, &MB);
	int64_t Tmax = TR * j.TW;
	j.U = ml_cpu_scratch(2, sizeof(float) * (size_t)(36 * MB * j.C));
	j.vstride = j.packed ? ml_pgemm_packed_len(j.C, Tmax) : j.C * Tmax;
	j.V = ml_cpu_scratch(0, sizeof(float) * (size_t)(36 * j.vstride));
	j.Mo = ml_cpu_scratch(1, sizeof(float) * (size_t)(36 * MB * Tmax));
	if (j.U == NULL || j.V == NULL || j.Mo == NULL)
		return ml_opfail(c, ML_ENOMEM, "cannot allocate Winograd buffers");
	bool once = MB == j.M;
	if (once) {
		j.m0 = 0;
		j.Mb = j.M;
		ml_parallel_for(j.M, ML_MAX(1, 4096 / (j.C * 8)), wino_filters, &j);
	}
	j.x = x;
	j.y = y;
	{
		int64_t rows = v->n * j.TH;
		for (j.ty0 = 0; j.ty0 < rows; j.ty0 = j.ty1) {
			j.ty1 = ML_MIN(rows, j.ty0 + TR);
			j.Tg = (j.ty1 - j.ty0) * j.TW;
			if (j.packed)
				j.vstride = ml_pgemm_packed_len(j.C, j.Tg);
			ml_parallel_for(j.C, ML_MAX(1, 16384 / (TR * 16 * j.TW * 4)), wino_inputs, &j);
			if (atomic_load(&j.nomem))
				return ml_opfail(c, ML_ENOMEM, "out of memory");
			for (j.m0 = 0; j.m0 < j.M; j.m0 += MB) {
				j.Mb = ML_MIN(MB, j.M - j.m0);
				if (!once)
					ml_parallel_for(j.Mb, ML_MAX(1, 4096 / (j.C * 8)), wino_filters,
							&j);
				int64_t MC = j.Mb * j.C, MT = j.Mb * j.Tg;
				if (j.packed)
					ml_pgemm_batch(36, j.Mb, j.Tg, j.C, j.U, j.C, MC, j.V, j.vstride,
						       NULL, j.Mo, j.Tg, MT, false);
				for (int xi = 0; xi < 36 && !j.packed; xi++)
					if (!ml_sgemm(false, false, j.Mb, j.Tg, j.C, 1.0f, j.U + xi * MC,
						      j.C, j.V + xi * j.C * j.Tg, j.Tg, 0.0f,
						      j.Mo + xi * MT, j.Tg))
						return ml_opfail(c, ML_ENOTSUP, "sizes exceed BLAS's range");
				ml_parallel_for(j.Mb, ML_MAX(1, 16384 / (TR * 16 * j.TW * 4)),
						wino_outputs, &j);
				if (atomic_load(&j.nomem))
					return ml_opfail(c, ML_ENOMEM, "out of memory");
			}
		}
	}
	return 0;
}
