/*
 * misc_sample.c: the sampling kernels of the misc family. GridSample
 * follows PyTorch's grid_sampler_2d (which ONNX's definition cites):
 * unnormalize, then pad (border clamps, reflection folds the coordinate
 * back) before nearest or bilinear interpolation, while bicubic pads each
 * of its 16 taps. RoiAlign follows ONNX Runtime: per output bin, a grid
 * of bilinear samples averaged (or the largest weighted corner taken).
 * Both run f32 and f64 (f16 as f32), in the input's precision.
 */
#include "cpu/elem.h"
#include "cpu/misc.h"

enum gs_mode { GS_BILINEAR, GS_NEAREST, GS_BICUBIC };
enum gs_pad { GS_ZEROS, GS_BORDER, GS_REFLECTION };

struct gsjob {
	const void *x, *grid;
	void *y;
	int64_t N, C, H, W, Ho, Wo;
	enum gs_mode mode;
	enum gs_pad pad;
	bool ac;
};

#define DEF_GS(SUF, T, FLOOR, FABS, FMOD, RINT)					\
static T									\
gs_unnorm_##SUF(T v, int64_t size, bool ac)					\
{										\
	return ac ? (v + 1) / 2 * (T)(size - 1) : ((v + 1) * (T)size - 1) / 2;	\
}										\
										\
static T									\
gs_clip_##SUF(T v, int64_t size)						\
{										\
	v = v > 0 ? v : 0;							\
	return v < (T)(size - 1) ? v : (T)(size - 1);				\
}										\
										\
static T									\
gs_reflect_##SUF(T v, T tlo, T thi)						\
{										\
	if (tlo == thi)								\
		return 0;							\
	T mn = tlo / 2, span = (thi - tlo) / 2;					\
	v = FABS(v - mn);							\
	T extra = FMOD(v, span);						\
	/* the parity of floor(v / span), without an int cast that may overflow */ \
	bool even = FMOD(FLOOR(v / span), (T)2) == 0;				\
	return even ? extra + mn : span - extra + mn;				\
}										\
										\
static T									\
gs_pad_##SUF(const struct gsjob *j, T v, int64_t size)				\
{										\
	if (j->pad == GS_BORDER) {						\
		v = gs_clip_##SUF(v, size);					\
	} else if (j->pad == GS_REFLECTION) {					\
		if (j->ac)							\
			v = gs_reflect_##SUF(v, 0, (T)(2 * (size - 1)));	\
		else								\
			v = gs_reflect_##SUF(v, -1, (T)(2 * size - 1));		\
		v = gs_clip_##SUF(v, size);					\
	}									\
	return v;								\
}										\
										\
static inline T									\
gs_at_##SUF(const T *p, int64_t H, int64_t W, int64_t yy, int64_t xx)		\
{										\
	return yy >= 0 && yy < H && xx >= 0 && xx < W ? p[yy * W + xx] : 0;	\
}										\
										\
static T									\
gs_tap_##SUF(const struct gsjob *j, const T *p, T yy, T xx)			\
{										\
	xx = gs_pad_##SUF(j, xx, j->W);						\
	yy = gs_pad_##SUF(j, yy, j->H);						\
	if (!(xx > -2 && xx < (T)j->W + 1 && yy > -2 && yy < (T)j->H + 1))	\
		return 0;							\
	return gs_at_##SUF(p, j->H, j->W, (int64_t)yy, (int64_t)xx);		\
}										\
										\
static void									\
gs_cubic_##SUF(T t, T *w)							\
{										\
	const T A = (T)-0.75;							\
	T x1 = t + 1, x2 = t, x3 = 1 - t, x4 = 2 - t;				\
	w[0] = ((A * x1 - 5 * A) * x1 + 8 * A) * x1 - 4 * A;			\
	w[1] = ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1;				\
	w[2] = ((A + 2) * x3 - (A + 3)) * x3 * x3 + 1;				\
	w[3] = ((A * x4 - 5 * A) * x4 + 8 * A) * x4 - 4 * A;			\
}										\
										\
static void									\
gs_rows_##SUF(void *ctx, int64_t b, int64_t e)					\
{										\
	const struct gsjob *j = ctx;						\
	const int64_t H = j->H, W = j->W, C = j->C, P = j->Ho * j->Wo;		\
	for (int64_t r = b; r < e; r++) {					\
		int64_t n = r / j->Ho, oh = r % j->Ho;				\
		const T *g = (const T *)j->grid + (n * P + oh * j->Wo) * 2;	\
		const T *xn = (const T *)j->x + n * C * H * W;			\
		T *yn = (T *)j->y + n * C * P + oh * j->Wo;			\
		for (int64_t ow = 0; ow < j->Wo; ow++) {			\
			T gx = g[2 * ow], gy = g[2 * ow + 1];			\
			T ix = gs_unnorm_##SUF(gx, W, j->ac);			\
			T iy = gs_unnorm_##SUF(gy, H, j->ac);			\
			if (j->mode == GS_BICUBIC) {				\
				T fx = FLOOR(ix), fy = FLOOR(iy), wx[4], wy[4];	\
				gs_cubic_##SUF(ix - fx, wx);			\
				gs_cubic_##SUF(iy - fy, wy);			\
				for (int64_t ch = 0; ch < C; ch++) {		\
					const T *p = xn + ch * H * W;		\
					T acc = 0;				\
					for (int a = 0; a < 4; a++) {		\
						T row = 0;			\
						for (int q = 0; q < 4; q++)	\
							row += wx[q] * gs_tap_##SUF(j, p, \
								fy - 1 + a, fx - 1 + q); \
						acc += wy[a] * row;		\
					}					\
					yn[ch * P + ow] = acc;			\
				}						\
				continue;					\
			}							\
			ix = gs_pad_##SUF(j, ix, W);				\
			iy = gs_pad_##SUF(j, iy, H);				\
			if (j->mode == GS_NEAREST) {				\
				T rx = RINT(ix), ry = RINT(iy);			\
				bool in = rx >= 0 && rx < (T)W && ry >= 0 && ry < (T)H; \
				int64_t xi = in ? (int64_t)rx : 0, yi = in ? (int64_t)ry : 0; \
				for (int64_t ch = 0; ch < C; ch++)		\
					yn[ch * P + ow] = in ? xn[ch * H * W + yi * W + xi] : 0; \
				continue;					\
			}							\
			T fx = FLOOR(ix), fy = FLOOR(iy);			\
			if (!(fx > -2 && fx < (T)W + 1 && fy > -2 && fy < (T)H + 1)) { \
				for (int64_t ch = 0; ch < C; ch++)		\
					yn[ch * P + ow] = 0;			\
				continue;					\
			}							\
			int64_t x0 = (int64_t)fx, y0 = (int64_t)fy;		\
			T lx = ix - fx, ly = iy - fy;				\
			T wnw = (1 - lx) * (1 - ly), wne = lx * (1 - ly);	\
			T wsw = (1 - lx) * ly, wse = lx * ly;			\
			for (int64_t ch = 0; ch < C; ch++) {			\
				const T *p = xn + ch * H * W;			\
				yn[ch * P + ow] = wnw * gs_at_##SUF(p, H, W, y0, x0) + \
						  wne * gs_at_##SUF(p, H, W, y0, x0 + 1) + \
						  wsw * gs_at_##SUF(p, H, W, y0 + 1, x0) + \
						  wse * gs_at_##SUF(p, H, W, y0 + 1, x0 + 1); \
			}							\
		}								\
	}									\
}

DEF_GS(f32, float, floorf, fabsf, fmodf, rintf)
DEF_GS(f64, double, floor, fabs, fmod, rint)

int
ml_cpu_grid_sample(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *g = c->in[1];
	const char *mode = ml_attr_str(c->node, "mode", "bilinear");
	const char *pad = ml_attr_str(c->node, "padding_mode", "zeros");
	struct gsjob j;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_grid_sample);
	if (x->dtype != g->dtype || (x->dtype != ML_F32 && x->dtype != ML_F64))
		return ml_opfail(c, ML_ENOTSUP, "X and grid must both be f32 or f64");
	if (x->rank != 4 || g->rank != 4 || g->dims[3] != 2 || g->dims[0] != x->dims[0])
		return ml_opfail(c, ML_EINVAL, "X must be [N, C, H, W] and grid [N, H, W, 2]");
	memset(&j, 0, sizeof j);
	j.mode = strcmp(mode, "nearest") == 0 ? GS_NEAREST :
		 strcmp(mode, "bicubic") == 0 || strcmp(mode, "cubic") == 0 ? GS_BICUBIC :
									   GS_BILINEAR;
	j.pad = strcmp(pad, "border") == 0 ? GS_BORDER :
		strcmp(pad, "reflection") == 0 ? GS_REFLECTION : GS_ZEROS;
	j.ac = ml_attr_int(c->node, "align_corners", 0) != 0;
	j.x = x->data;
	j.grid = g->data;
	j.y = c->out[0]->data;
	j.N = x->dims[0];
	j.C = x->dims[1];
	j.H = x->dims[2];
	j.W = x->dims[3];
	j.Ho = g->dims[1];
	j.Wo = g->dims[2];
	if (j.H == 0 || j.W == 0) {
		memset(j.y, 0, (size_t)ml_tval_nbytes(c->out[0]));
		return 0;
	}
	int64_t per = ML_MAX(1, j.Wo * j.C * (j.mode == GS_BICUBIC ? 16 : 4));
	ml_parallel_for(j.N * j.Ho, ML_MAX(1, ML_GRAIN / per),
			x->dtype == ML_F32 ? gs_rows_f32 : gs_rows_f64, &j);
	return 0;
}

/*
 * RoiAlign over [rois, channels] units. RA_MAXGRID bounds the adaptive
 * sampling grid of one bin, so that a huge RoI is refused instead of
 * running for ever.
 */
#define RA_MAXGRID 4096
struct rajob {
	const void *x, *rois;
	const int64_t *bidx;
	void *y;
	int64_t C, H, W, oh, ow;
	int64_t sr;
	double scale;
	bool half, max;
};

#define DEF_RA(SUF, T, CEIL)							\
static void									\
ra_units_##SUF(void *ctx, int64_t b, int64_t e)					\
{										\
	const struct rajob *j = ctx;						\
	const int64_t H = j->H, W = j->W;					\
	for (int64_t u = b; u < e; u++) {					\
		int64_t r = u / j->C, ch = u % j->C;				\
		const T *roi = (const T *)j->rois + r * 4;			\
		const T *p = (const T *)j->x + (j->bidx[r] * j->C + ch) * H * W; \
		T *out = (T *)j->y + u * j->oh * j->ow;				\
		T off = j->half ? (T)0.5 : 0, sc = (T)j->scale;			\
		T sw = roi[0] * sc - off, sh = roi[1] * sc - off;		\
		T rw = roi[2] * sc - off - sw, rh = roi[3] * sc - off - sh;	\
		if (!j->half) {							\
			rw = rw > 1 ? rw : 1;					\
			rh = rh > 1 ? rh : 1;					\
		}								\
		T bh = rh / (T)j->oh, bw = rw / (T)j->ow;			\
		T fgh = CEIL(rh / (T)j->oh), fgw = CEIL(rw / (T)j->ow);		\
		/* a bad RoI (checked before) must not reach an int cast */	\
		fgh = fgh > 0 && fgh <= RA_MAXGRID ? fgh : 0;			\
		fgw = fgw > 0 && fgw <= RA_MAXGRID ? fgw : 0;			\
		int64_t gh = j->sr > 0 ? j->sr : (int64_t)fgh;			\
		int64_t gw = j->sr > 0 ? j->sr : (int64_t)fgw;			\
		T count = (T)ML_MAX(gh * gw, 1);				\
		for (int64_t ph = 0; ph < j->oh; ph++)				\
			for (int64_t pw = 0; pw < j->ow; pw++) {		\
				T acc = 0;					\
				bool first = true;				\
				for (int64_t iy = 0; iy < gh; iy++) {		\
					T y = sh + (T)ph * bh + ((T)iy + (T)0.5) * bh / (T)gh; \
					for (int64_t ix = 0; ix < gw; ix++) {	\
						T x = sw + (T)pw * bw +		\
						      ((T)ix + (T)0.5) * bw / (T)gw; \
						T v[4] = { 0, 0, 0, 0 };	\
						if (!(y < -1 || y > (T)H || x < -1 || x > (T)W)) { \
							T yy = y > 0 ? y : 0, xx = x > 0 ? x : 0; \
							int64_t y0 = (int64_t)yy, y1; \
							int64_t x0 = (int64_t)xx, x1; \
							if (y0 >= H - 1) {	\
								y0 = y1 = H - 1; \
								yy = (T)y0;	\
							} else {		\
								y1 = y0 + 1;	\
							}			\
							if (x0 >= W - 1) {	\
								x0 = x1 = W - 1; \
								xx = (T)x0;	\
							} else {		\
								x1 = x0 + 1;	\
							}			\
							T ly = yy - (T)y0, lx = xx - (T)x0; \
							T hy = 1 - ly, hx = 1 - lx; \
							v[0] = hy * hx * p[y0 * W + x0]; \
							v[1] = hy * lx * p[y0 * W + x1]; \
							v[2] = ly * hx * p[y1 * W + x0]; \
							v[3] = ly * lx * p[y1 * W + x1]; \
						}				\
						if (j->max) {			\
							T m = v[0];		\
							for (int k = 1; k < 4; k++) \
								m = v[k] > m ? v[k] : m; \
							acc = first || m > acc ? m : acc; \
							first = false;		\
						} else {			\
							acc += v[0] + v[1] + v[2] + v[3]; \
						}				\
					}					\
				}						\
				out[ph * j->ow + pw] = j->max ? acc : acc / count; \
			}							\
	}									\
}

DEF_RA(f32, float, ceilf)
DEF_RA(f64, double, ceil)

int
ml_cpu_roi_align(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *rois = c->in[1], *bi = c->in[2];
	struct ml_tval *y = c->out[0];
	struct rajob j;
	int64_t R = rois->dims[0];

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_roi_align);
	if (x->dtype != rois->dtype || (x->dtype != ML_F32 && x->dtype != ML_F64))
		return ml_opfail(c, ML_ENOTSUP, "X and rois must both be f32 or f64");
	if (ml_tval_numel(bi) != R || rois->dims[1] != 4)
		return ml_opfail(c, ML_EINVAL, "rois must be [num_rois, 4] with one batch index each");
	memset(&j, 0, sizeof j);
	int64_t *bidx = ml_malloc(sizeof(int64_t) * (size_t)ML_MAX(R, 1));
	if (bidx == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	j.oh = y->dims[2];
	j.ow = y->dims[3];
	j.sr = ml_attr_int(c->node, "sampling_ratio", 0);
	j.scale = ml_attr_float(c->node, "spatial_scale", 1.0);
	if (j.sr > RA_MAXGRID)
		return ml_opfail(c, ML_EINVAL, "sampling_ratio %lld is too large", (long long)j.sr);
	for (int64_t r = 0; r < R * 4; r++) {
		double v = ml_get_f64(rois->data, rois->dtype, r) * j.scale;
		if (!(fabs(v) <= 1e7)) {
			ml_free(bidx);
			return ml_opfail(c, ML_EINVAL, "RoI coordinate %g is not finite or too large",
					 ml_get_f64(rois->data, rois->dtype, r));
		}
		if (j.sr == 0 && r % 4 >= 2) {
			double ext = v - ml_get_f64(rois->data, rois->dtype, r - 2) * j.scale;
			double bins = r % 4 == 2 ? (double)j.ow : (double)j.oh;
			if (ext / bins > RA_MAXGRID) {
				ml_free(bidx);
				return ml_opfail(c, ML_EINVAL, "an RoI needs too many samples");
			}
		}
	}
	for (int64_t r = 0; r < R; r++) {
		bidx[r] = ml_get_i64(bi->data, bi->dtype, r);
		if (bidx[r] < 0 || bidx[r] >= x->dims[0]) {
			long long v = (long long)bidx[r];
			ml_free(bidx);
			return ml_opfail(c, ML_EINVAL, "batch index %lld is out of range", v);
		}
	}
	j.x = x->data;
	j.rois = rois->data;
	j.bidx = bidx;
	j.y = y->data;
	j.C = x->dims[1];
	j.H = x->dims[2];
	j.W = x->dims[3];
	/* opset 16 added the attribute, defaulting to the corrected half_pixel */
	j.half = strcmp(ml_attr_str(c->node, "coordinate_transformation_mode",
				    c->opset >= 16 ? "half_pixel" : "output_half_pixel"),
			"half_pixel") == 0;
	j.max = strcmp(ml_attr_str(c->node, "mode", "avg"), "max") == 0;
	if (j.H == 0 || j.W == 0) {
		memset(j.y, 0, (size_t)ml_tval_nbytes(y));
		ml_free(bidx);
		return 0;
	}
	ml_parallel_for(R * j.C, ML_MAX(1, ML_GRAIN / ML_MAX(j.oh * j.ow * 16, 1)),
			x->dtype == ML_F32 ? ra_units_f32 : ra_units_f64, &j);
	ml_free(bidx);
	return 0;
}
