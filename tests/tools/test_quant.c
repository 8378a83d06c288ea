/*
 * test_quant.c: TAP tests of the int8 engine (lib/cpu/quant_gemm.c): the
 * packed u8 x s8 GEMM with its fused epilogue against a plain integer
 * reference, on random and odd shapes, on every dispatch path this CPU
 * has (a path is skipped where the CPU lacks it), and on saturation edge
 * cases (all-255 activations against pairs of equal extreme weights, 127
 * and -128, whose products would saturate an int16 pair sum such as
 * vpmaddubsw's); the shapes include the AMX kernel's edges (rows short of
 * its 16- and 32-row blocks, an odd last panel, K tails of 1 to 15 groups
 * of 4, k = 4 and 4608); ML_AMX=0 turns the AMX path off (checked in a
 * child process, as the probe runs once); and the
 * depthwise Q8Conv on every path (the AVX2 kernel on the AVX2, VNNI and AMX
 * paths, the portable loop on the C path) against a direct reference;
 * and Q8Quantize of a matrix (quant_flat_avx2 on the AVX2 and later paths,
 * the portable loop on the C path) against nearbyintf, over halves (round
 * to even), values past the clamp, infinities and NaN.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ml.h"
#include "cpu/quant_q8.h"

static int ntest;

static void
ok(bool cond, const char *what)
{
	ntest++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static uint64_t rng = 88172645463325252ull;

static uint32_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* ref: the same epilogue in doubles, rounding half to even. */
static void
ref_gemm(int64_t p, int64_t m, int64_t k, const uint8_t *a, int64_t lda, const int8_t *w,
	 const struct ml_q8_epi *ep, void *y)
{
	for (int64_t i = 0; i < p; i++)
		for (int64_t j = 0; j < m; j++) {
			int64_t acc = 0;
			for (int64_t q = 0; q < k; q++)
				acc += (int64_t)a[i * lda + q] * w[j * k + q];
			float v = (float)(int32_t)(acc + ep->bias[j]) * ep->mult[j];
			if (ep->f32out) {
				((float *)y)[i * m + j] = v;
				continue;
			}
			float r = nearbyintf(v) + (float)ep->yzero;
			r = r < ep->lo ? ep->lo : r > ep->hi ? ep->hi : r;
			((uint8_t *)y)[i * m + j] = (uint8_t)(int)r;
		}
}

/*
 * one_case: p x m x k with fill mode (0 random, 1 saturating extremes;
 * 2 and 3 the same in 7 bits, with ep.w7: 3 is all-255 activations against
 * pairs of -64 and of 63); true when equal.
 */
static bool
one_case(int64_t p, int64_t m, int64_t k, int mode, bool f32out)
{
	int64_t kp = ml_q8_kpad(k), lda = kp + (rnd() % 3) * 4;
	uint8_t *a = calloc((size_t)(p * lda + 64), 1);
	int8_t *w = malloc((size_t)(m * k + 1));
	int8_t *bp = malloc((size_t)ml_q8_packed_len(k, m) + 64);
	int32_t *bias = malloc(sizeof(int32_t) * (size_t)m);
	float *mult = malloc(sizeof(float) * (size_t)m);
	size_t ys = f32out ? 4 : 1;
	void *y = calloc((size_t)(p * m), ys), *yr = calloc((size_t)(p * m), ys);
	bool same = true;

	for (int64_t i = 0; i < p; i++)
		for (int64_t q = 0; q < lda; q++)
			a[i * lda + q] = q >= k ? (uint8_t)rnd() : mode & 1 ? 255 : (uint8_t)rnd();
	for (int64_t i = 0; i < m * k; i++)
		if (mode == 1)
			w[i] = (int8_t)((i / 2 & 1) ? INT8_MIN : INT8_MAX);
		else if (mode == 3)
			w[i] = (int8_t)((i / 2 & 1) ? ML_Q8_W7MIN : ML_Q8_W7MAX);
		else if (mode == 2)
			w[i] = (int8_t)(ML_Q8_W7MIN + (int)(rnd() % (ML_Q8_W7MAX - ML_Q8_W7MIN + 1)));
		else
			w[i] = (int8_t)(ML_Q8_WMIN + (int)(rnd() % (ML_Q8_WMAX - ML_Q8_WMIN + 1)));
	for (int64_t j = 0; j < m; j++) {
		bias[j] = (int32_t)(rnd() % 20001) - 10000;
		/* saturating modes: every other column's scale (+-1e5) takes v past int32 */
		mult[j] = mode & 1 ? (j % 2 ? 1e-3f : j % 4 ? -1e5f : 1e5f) :
			  (float)(rnd() % 1000 + 1) * 1e-6f;
	}
	struct ml_q8_epi ep = { .bias = bias, .mult = mult, .yzero = (int32_t)(rnd() % 256),
				.lo = 0, .hi = 255, .f32out = f32out, .w7 = mode >= 2 };
	if (rnd() % 2) {
		int32_t hi = 255 - (int32_t)(rnd() % 40);
		ep.lo = ep.yzero;
		ep.hi = ML_MAX(ep.lo, hi);	/* lo <= hi, as Q8Conv requires */
	}
	ml_q8_pack(bp, w, m, k);
	ml_q8_gemm(p, m, kp, a, lda, bp, &ep, y, m);
	ref_gemm(p, m, k, a, lda, w, &ep, yr);
	if (f32out) {
		for (int64_t i = 0; i < p * m && same; i++) {
			float u = ((float *)y)[i], v = ((float *)yr)[i];
			same = fabsf(u - v) <= 1e-5f * fmaxf(1.0f, fabsf(v));
		}
	} else {
		same = memcmp(y, yr, (size_t)(p * m)) == 0;
		for (int64_t i = 0; i < p * m && !same; i++)
			if (((uint8_t *)y)[i] != ((uint8_t *)yr)[i]) {
				printf("# first difference: [%lld, %lld] %d, want %d\n",
				       (long long)(i / m), (long long)(i % m), ((uint8_t *)y)[i],
				       ((uint8_t *)yr)[i]);
				break;
			}
	}
	free(a);
	free(w);
	free(bp);
	free(bias);
	free(mult);
	free(y);
	free(yr);
	return same;
}

/*
 * q8conv_run: a one-node graph of Q8Conv (x u8 [xd], weight w of nw bytes,
 * bias and mult of m, a k x k window, stride st, pad pd, dilation dl,
 * group g) run on path p; whether its output is ny bytes equal to ref.
 */
static bool
q8conv_run(enum ml_q8_path p, const int64_t *xd, const uint8_t *x, const int8_t *w, int64_t nw,
	   const int32_t *bias, const float *mult, int64_t m, int64_t k, int64_t st, int64_t pd,
	   int64_t dl, int64_t g, int32_t xz, int32_t yz, const uint8_t *ref, int64_t ny)
{
	struct ml_err e = { 0 };
	struct ml_graph *gr = NULL;
	bool good = false;

	ml_graph_new(&gr, &e);
	ml_graph_set_opset(gr, "", 13, &e);
	int tx = ml_graph_tensor(gr, "x");
	gr->tensors[tx]->dtype = ML_U8;
	gr->tensors[tx]->rank = 4;
	gr->tensors[tx]->kind = ML_TK_INPUT;
	memcpy(gr->tensors[tx]->dims, xd, sizeof(int64_t) * 4);
	ml_graph_add_input(gr, tx, &e);
	ml_graph_set_data(gr, ml_graph_tensor(gr, "w"), ML_TK_CONST, ML_I8, 1, &nw, w, (size_t)nw, &e);
	ml_graph_set_data(gr, ml_graph_tensor(gr, "b"), ML_TK_CONST, ML_I32, 1, &m, bias,
			  sizeof *bias * (size_t)m, &e);
	ml_graph_set_data(gr, ml_graph_tensor(gr, "m"), ML_TK_CONST, ML_F32, 1, &m, mult,
			  sizeof *mult * (size_t)m, &e);
	const char *in[] = { "x", "w", "b", "m" }, *out[] = { "y" };
	int ni = ml_graph_add_node(gr, "Q8Conv", "ml", "cv", 4, in, 1, out, &e);
	ml_graph_add_output(gr, ml_graph_find(gr, "y"), &e);
	ml_node_set_ints(gr, ni, "kernel_shape", 2, (const int64_t[]){ k, k });
	ml_node_set_ints(gr, ni, "strides", 2, (const int64_t[]){ st, st });
	ml_node_set_ints(gr, ni, "pads", 4, (const int64_t[]){ pd, pd, pd, pd });
	ml_node_set_ints(gr, ni, "dilations", 2, (const int64_t[]){ dl, dl });
	ml_node_set_int(gr, ni, "group", g);
	ml_node_set_int(gr, ni, "x_zero_point", xz);
	ml_node_set_int(gr, ni, "y_zero_point", yz);

	struct ml_tval xv = { 0 };
	struct ml_session *s = NULL;
	ml_q8_set_path(p);
	if (e.code == 0 && ml_graph_toposort(gr, &e) == 0 && ml_graph_infer(gr, &e) == 0 &&
	    ml_tval_alloc(&xv, ML_U8, 4, xd, &e) == 0 && ml_session_new(&s, gr, NULL, &e) == 0) {
		memcpy(xv.data, x, (size_t)(xd[0] * xd[1] * xd[2] * xd[3]));
		if (ml_session_set_input(s, "x", &xv, &e) == 0 && ml_session_run(s, &e) == 0) {
			const struct ml_tval *y = ml_session_output(s, 0);
			good = ml_tval_numel(y) == ny && memcmp(y->data, ref, (size_t)ny) == 0;
		}
	}
	if (e.code != 0)
		printf("# Q8Conv case: %s\n", e.msg);
	ml_session_free(s);
	ml_tval_clear(&xv);
	ml_graph_free(gr);
	return good;
}

/*
 * conv_case: a dense Q8Conv (x [n, h, w, c], m outputs, k x k, stride st,
 * pad pd, zero points xz, yz: the im2col path, its padded copy for a few
 * channels) on path p against a direct integer reference with dw_out's
 * epilogue. Whether they agree byte for byte.
 */
static bool
conv_case(enum ml_q8_path p, int64_t n, int64_t h, int64_t w, int64_t c, int64_t m, int64_t k,
	  int64_t st, int64_t pd, int32_t xz, int32_t yz)
{
	int64_t K = k * k * c, xd[4] = { n, h, w, c };
	int64_t oh = (h + 2 * pd - k) / st + 1, ow = (w + 2 * pd - k) / st + 1;
	int64_t nx = n * h * w * c, ny = n * oh * ow * m, np = ml_q8_packed_len(K, m);
	uint8_t *x = malloc((size_t)nx), *ref = malloc((size_t)ny);
	int8_t *wt = malloc((size_t)(K * m)), *wp = calloc((size_t)np, 1);
	int32_t *bias = malloc(sizeof *bias * (size_t)m);
	float *mult = malloc(sizeof *mult * (size_t)m);

	for (int64_t i = 0; i < nx; i++)
		x[i] = (uint8_t)rnd();
	for (int64_t i = 0; i < K * m; i++)
		wt[i] = (int8_t)(ML_Q8_WMIN + (int)(rnd() % (ML_Q8_WMAX - ML_Q8_WMIN + 1)));
	for (int64_t j = 0; j < m; j++) {
		bias[j] = (int32_t)(rnd() % 40001) - 20000;
		mult[j] = (float)(1.0 / (40.0 * (double)K * (1.0 + (double)(rnd() % 100) / 50.0)));
	}
	ml_q8_pack(wp, wt, m, K);
	for (int64_t b = 0; b < n; b++)
		for (int64_t oy = 0; oy < oh; oy++)
			for (int64_t ox = 0; ox < ow; ox++)
				for (int64_t o = 0; o < m; o++) {
					int32_t acc = bias[o];
					for (int64_t ky = 0; ky < k; ky++)
						for (int64_t kx = 0; kx < k; kx++)
							for (int64_t ch = 0; ch < c; ch++) {
								int64_t iy = oy * st - pd + ky, ix = ox * st - pd + kx;
								int32_t a = iy < 0 || iy >= h || ix < 0 || ix >= w ?
										    xz : x[((b * h + iy) * w + ix) * c + ch];
								acc += a * wt[o * K + (ky * k + kx) * c + ch];
							}
					float v = (float)acc * mult[o];
					v = v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
					int32_t q = (int32_t)nearbyintf(v) + yz;
					ref[((b * oh + oy) * ow + ox) * m + o] = (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
				}
	bool good = q8conv_run(p, xd, x, wp, np, bias, mult, m, k, st, pd, 1, 1, xz, yz, ref, ny);
	ml_q8_set_path(ML_Q8_AUTO);
	free(x);
	free(ref);
	free(wt);
	free(wp);
	free(bias);
	free(mult);
	return good;
}

/*
 * dw_case: a depthwise Q8Conv (x [n, h, w, c], k x k, stride st, pad pd,
 * dilation dl, zero points xz, yz) run as a one-node graph on path p,
 * against a direct integer reference with dw_out's epilogue. Returns
 * whether they agree byte for byte.
 */
static bool
dw_case(enum ml_q8_path p, int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t st,
	int64_t pd, int64_t dl, int32_t xz, int32_t yz)
{
	int64_t T = k * k, xd[4] = { n, h, w, c };
	int64_t oh = (h + 2 * pd - dl * (k - 1) - 1) / st + 1, ow = (w + 2 * pd - dl * (k - 1) - 1) / st + 1;
	int64_t nx = n * h * w * c, ny = n * oh * ow * c;
	uint8_t *x = malloc((size_t)nx), *ref = malloc((size_t)ny);
	int8_t *wt = malloc((size_t)(T * c));
	int32_t *bias = malloc(sizeof *bias * (size_t)c);
	float *mult = malloc(sizeof *mult * (size_t)c);

	for (int64_t i = 0; i < nx; i++)
		x[i] = (uint8_t)rnd();
	for (int64_t i = 0; i < T * c; i++)
		wt[i] = (int8_t)(ML_Q8_WMIN + (int)(rnd() % (ML_Q8_WMAX - ML_Q8_WMIN + 1)));
	for (int64_t j = 0; j < c; j++) {
		bias[j] = (int32_t)(rnd() % 40001) - 20000;
		mult[j] = (float)(1.0 / (40.0 * (double)T * (1.0 + (double)(rnd() % 100) / 50.0)));
	}
	for (int64_t b = 0; b < n; b++)
		for (int64_t oy = 0; oy < oh; oy++)
			for (int64_t ox = 0; ox < ow; ox++)
				for (int64_t ch = 0; ch < c; ch++) {
					int32_t acc = bias[ch];
					for (int64_t ky = 0; ky < k; ky++)
						for (int64_t kx = 0; kx < k; kx++) {
							int64_t iy = oy * st - pd + ky * dl, ix = ox * st - pd + kx * dl;
							int32_t a = iy < 0 || iy >= h || ix < 0 || ix >= w ? xz :
								    x[((b * h + iy) * w + ix) * c + ch];
							acc += a * wt[(ky * k + kx) * c + ch];
						}
					float v = (float)acc * mult[ch];
					v = v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
					int32_t q = (int32_t)nearbyintf(v) + yz;
					ref[((b * oh + oy) * ow + ox) * c + ch] = (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
				}

	bool good = q8conv_run(p, xd, x, wt, T * c, bias, mult, c, k, st, pd, dl, c, xz, yz, ref, ny);
	ml_q8_set_path(ML_Q8_AUTO);
	free(x);
	free(ref);
	free(wt);
	free(bias);
	free(mult);
	return good;
}

/*
 * pool_case: Q8MaxPool of a random u8 [n, h, w, c] with window k x k,
 * stride st and pads pd (top and left; bottom and right the same) against
 * the plain maximum over the window's taps inside x. True when equal byte
 * for byte.
 */
static bool
pool_case(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t st, int64_t pd)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	int64_t xd[4] = { n, h, w, c }, oh = (h + 2 * pd - k) / st + 1, ow = (w + 2 * pd - k) / st + 1;
	int64_t nx = n * h * w * c, ny = n * oh * ow * c;
	uint8_t *x = malloc((size_t)nx), *ref = calloc((size_t)ny, 1);
	bool good = false;

	for (int64_t i = 0; i < nx; i++)
		x[i] = (uint8_t)(rnd() % 256);
	for (int64_t b = 0; b < n; b++)
		for (int64_t oy = 0; oy < oh; oy++)
			for (int64_t ox = 0; ox < ow; ox++)
				for (int64_t ch = 0; ch < c; ch++) {
					uint8_t m = 0;
					for (int64_t ky = 0; ky < k; ky++)
						for (int64_t kx = 0; kx < k; kx++) {
							int64_t iy = oy * st - pd + ky, ix = ox * st - pd + kx;
							if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
								uint8_t v = x[((b * h + iy) * w + ix) * c + ch];
								m = v > m ? v : m;
							}
						}
					ref[((b * oh + oy) * ow + ox) * c + ch] = m;
				}
	ml_graph_new(&g, &e);
	ml_graph_set_opset(g, "", 13, &e);
	int tx = ml_graph_tensor(g, "x");
	g->tensors[tx]->dtype = ML_U8;
	g->tensors[tx]->rank = 4;
	g->tensors[tx]->kind = ML_TK_INPUT;
	memcpy(g->tensors[tx]->dims, xd, sizeof xd);
	ml_graph_add_input(g, tx, &e);
	const char *in[] = { "x" }, *out[] = { "y" };
	int ni = ml_graph_add_node(g, "Q8MaxPool", "ml", "p", 1, in, 1, out, &e);
	ml_graph_add_output(g, ml_graph_find(g, "y"), &e);
	int64_t ks[2] = { k, k }, ss[2] = { st, st }, ps[4] = { pd, pd, pd, pd };
	ml_node_set_ints(g, ni, "kernel_shape", 2, ks);
	ml_node_set_ints(g, ni, "strides", 2, ss);
	ml_node_set_ints(g, ni, "pads", 4, ps);
	struct ml_tval xv = { 0 };
	struct ml_session *s = NULL;
	if (e.code == 0 && ml_graph_toposort(g, &e) == 0 && ml_graph_infer(g, &e) == 0 &&
	    ml_tval_alloc(&xv, ML_U8, 4, xd, &e) == 0 && ml_session_new(&s, g, NULL, &e) == 0) {
		memcpy(xv.data, x, (size_t)nx);
		if (ml_session_set_input(s, "x", &xv, &e) == 0 && ml_session_run(s, &e) == 0) {
			const struct ml_tval *y = ml_session_output(s, 0);
			good = ml_tval_numel(y) == ny && memcmp(y->data, ref, (size_t)ny) == 0;
		}
	}
	if (e.code != 0)
		printf("# pool case: %s\n", e.msg);
	ml_session_free(s);
	ml_tval_clear(&xv);
	ml_graph_free(g);
	free(x);
	free(ref);
	return good;
}

/*
 * quant_case: Q8Quantize of an f32 [rows, cols] x with scale sc and zero
 * point zp, one node run on path p, against nearbyintf with the clamps of
 * q8_round (|v| <= 4e6, NaN to the zero point). True when equal byte for byte.
 */
static bool
quant_case4(enum ml_q8_path p, int64_t rows, int64_t cols, int64_t ch, int64_t hh, float sc,
	    int32_t zp);

static bool
quant_case(enum ml_q8_path p, int64_t rows, int64_t cols, float sc, int32_t zp)
{
	return quant_case4(p, rows, cols, 0, 0, sc, zp);
}

/*
 * quant_case4: as quant_case; with ch > 0 an NCHW image [rows, ch, hh,
 * cols] quantised into NHWC [rows, hh, cols, ch].
 */
static bool
quant_case4(enum ml_q8_path p, int64_t rows, int64_t cols, int64_t ch, int64_t hh, float sc,
	    int32_t zp)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	int rank = ch > 0 ? 4 : 2;
	int64_t n = rows * cols * (ch > 0 ? ch * hh : 1), xd[4] = { rows, cols, 0, 0 };
	if (ch > 0) {
		xd[1] = ch;
		xd[2] = hh;
		xd[3] = cols;
	}
	float *x = malloc(sizeof *x * (size_t)n);
	uint8_t *ref = malloc((size_t)n);
	bool good = false;

	for (int64_t i = 0; i < n; i++) {
		int r = (int)(rnd() % 16);
		/* halves of the scale test rounding to even; the rest the clamps and NaN */
		x[i] = r < 8 ? ((float)(int)(rnd() % 600) - 300.0f) * sc :
		       r < 12 ? ((float)(int)(rnd() % 600) - 300.0f + 0.5f) * sc :
		       r == 12 ? (rnd() % 2 ? 1e30f : -1e30f) :
		       r == 13 ? (rnd() % 2 ? INFINITY : -INFINITY) :
		       r == 14 ? NAN : ((float)(rnd() % 2000001) - 1e6f) * 1e-3f;
	}
	for (int64_t i = 0; i < n; i++) {
		float v = x[i] * (1.0f / sc);
		v = v != v ? 0.0f : v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
		int32_t q = (int32_t)nearbyintf(v) + zp;
		int64_t o = i;
		if (ch > 0) {
			/* NCHW element i at NHWC */
			int64_t xw = i % cols, y = i / cols % hh, c = i / (cols * hh) % ch,
				b = i / (cols * hh * ch);
			o = ((b * hh + y) * cols + xw) * ch + c;
		}
		ref[o] = (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
	}
	ml_graph_new(&g, &e);
	ml_graph_set_opset(g, "", 13, &e);
	int tx = ml_graph_tensor(g, "x");
	g->tensors[tx]->dtype = ML_F32;
	g->tensors[tx]->rank = rank;
	g->tensors[tx]->kind = ML_TK_INPUT;
	memcpy(g->tensors[tx]->dims, xd, sizeof(int64_t) * (size_t)rank);
	ml_graph_add_input(g, tx, &e);
	const char *in[] = { "x" }, *out[] = { "y" };
	int ni = ml_graph_add_node(g, "Q8Quantize", "ml", "q", 1, in, 1, out, &e);
	ml_graph_add_output(g, ml_graph_find(g, "y"), &e);
	ml_node_set_float(g, ni, "scale", sc);
	ml_node_set_int(g, ni, "zero_point", zp);

	struct ml_tval xv = { 0 };
	struct ml_session *s = NULL;
	ml_q8_set_path(p);
	if (e.code == 0 && ml_graph_toposort(g, &e) == 0 && ml_graph_infer(g, &e) == 0 &&
	    ml_tval_alloc(&xv, ML_F32, rank, xd, &e) == 0 && ml_session_new(&s, g, NULL, &e) == 0) {
		memcpy(xv.data, x, sizeof *x * (size_t)n);
		if (ml_session_set_input(s, "x", &xv, &e) == 0 && ml_session_run(s, &e) == 0) {
			const struct ml_tval *y = ml_session_output(s, 0);
			good = ml_tval_numel(y) == n && y->dtype == ML_U8 &&
			       memcmp(y->data, ref, (size_t)n) == 0;
			for (int64_t i = 0; i < n && !good && ml_tval_numel(y) == n; i++)
				if (((uint8_t *)y->data)[i] != ref[i]) {
					printf("# first difference: [%lld] x %g: %d, want %d\n",
					       (long long)i, x[i], ((uint8_t *)y->data)[i], ref[i]);
					break;
				}
		}
	}
	if (e.code != 0)
		printf("# quantize case: %s\n", e.msg);
	ml_session_free(s);
	ml_tval_clear(&xv);
	ml_graph_free(g);
	ml_q8_set_path(ML_Q8_AUTO);
	free(x);
	free(ref);
	return good;
}

/*
 * noamx_child: whether, with ML_AMX=0 set before the first AMX probe, the
 * AMX path is refused, the automatic choice avoids it and ML_Q8_PATH=amx
 * falls back. Runs in a child, since the probe's answer is kept for the
 * process, and before the parent's first probe, whose answer fork would copy.
 */
static bool
noamx_child(void)
{
	pid_t pid = fork();
	if (pid < 0)
		return false;
	if (pid == 0) {
		setenv("ML_AMX", "0", 1);
		setenv("ML_Q8_PATH", "amx", 1);
		bool good = !ml_q8_path_ok(ML_Q8_AMX) && !ml_q8_set_path(ML_Q8_AMX) &&
			    ml_q8_path() != ML_Q8_AMX && ml_q8_path_ok(ml_q8_path());
		_exit(good ? 0 : 1);
	}
	int st;
	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int
main(void)
{
	static const enum ml_q8_path paths[] = { ML_Q8_C, ML_Q8_AVX2, ML_Q8_VNNI, ML_Q8_AVXVNNI,
						 ML_Q8_AMX };
	static const int64_t shapes[][3] = {
		{ 1, 1, 1 }, { 1, 16, 4 }, { 3, 5, 7 }, { 4, 16, 64 }, { 17, 33, 27 },
		{ 64, 64, 147 }, { 65, 100, 9 }, { 130, 17, 300 }, { 7, 1000, 512 }, { 200, 64, 576 },
		/*
		 * AMX's edges: rows 32 + 1 and 32 + 16 + 2 and 16 + 15, 3 and 5
		 * panels (the last narrow), K of one group, of 72 whole tiles,
		 * of 15 tiles and 10 groups, of 1 tile and 1 group; one row alone
		 */
		{ 33, 48, 4 }, { 50, 70, 4608 }, { 96, 130, 1000 }, { 31, 17, 68 }, { 1, 20, 4608 },
	};
	int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
	int npaths = (int)(sizeof paths / sizeof paths[0]);
	char what[160];
	bool noamx = noamx_child();

	/* 14: the depthwise cases; 4 and 5: the quantize cases; 5 convs; 5 pools; 3: the checks at the end */
	printf("1..%d\n",
	       npaths * (nshapes * 4 + 6) + npaths * 14 + npaths * 4 + npaths * 5 + npaths * 5 + 5 + 3);
	for (int pi = 0; pi < npaths; pi++) {
		enum ml_q8_path p = paths[pi];
		bool have = ml_q8_set_path(p);
		for (int s = 0; s < nshapes; s++)
			for (int f = 0; f < 4; f++) {	/* f & 1: f32 out; f & 2: 7-bit weights */
				snprintf(what, sizeof what, "%s gemm %lldx%lldx%lld %s%s", ml_q8_path_name(p),
					 (long long)shapes[s][0], (long long)shapes[s][1],
					 (long long)shapes[s][2], f & 1 ? "f32 out" : "u8 out",
					 f & 2 ? ", weight_bits 7" : "");
				if (!have) {
					ntest++;
					printf("ok %d - %s # SKIP this CPU lacks %s\n", ntest, what,
					       ml_q8_path_name(p));
					continue;
				}
				ok(one_case(shapes[s][0], shapes[s][1], shapes[s][2], f & 2, f & 1), what);
			}
		for (int t = 0; t < 6; t++) {
			int64_t k = t % 3 == 0 ? 4 : t % 3 == 1 ? 1024 : 4611;
			snprintf(what, sizeof what, "%s saturation: 255 x %s pairs over k=%lld",
				 ml_q8_path_name(p), t < 3 ? "127 and -128" : "63 and -64 (weight_bits 7)",
				 (long long)k);
			if (!have) {
				ntest++;
				printf("ok %d - %s # SKIP this CPU lacks %s\n", ntest, what,
				       ml_q8_path_name(p));
				continue;
			}
			ok(one_case(9, 20, k, t < 3 ? 1 : 3, t % 3 == 2), what);
		}
	}
	/* depthwise: the AVX2 kernel (AVX2 and later paths) against the reference, as the C loop */
	static const int64_t dws[][9] = {
		/* n, h, w, c, k, stride, pad, dilation, xzero */
		{ 1, 9, 9, 16, 3, 1, 1, 1, 0 }, { 2, 10, 7, 21, 3, 2, 1, 1, 113 },
		{ 1, 8, 8, 32, 5, 1, 2, 1, 7 }, { 1, 9, 9, 40, 3, 1, 2, 2, 0 },
		{ 1, 6, 6, 96, 1, 1, 0, 1, 5 }, { 1, 7, 7, 48, 2, 2, 0, 1, 250 },
		{ 1, 5, 5, 15, 3, 1, 1, 1, 9 },
		/* 32 channels and more (VNNI: blocks of 64 and 32 by columns of quads, the rest as above) */
		{ 2, 9, 11, 64, 3, 1, 1, 1, 77 }, { 1, 10, 9, 144, 3, 2, 1, 1, 3 },
		{ 1, 7, 8, 200, 2, 2, 0, 1, 250 }, { 1, 5, 6, 128, 3, 1, 0, 1, 0 },
		{ 1, 6, 6, 70, 3, 2, 1, 1, 1 }, { 2, 8, 10, 32, 3, 2, 1, 1, 40 },
		{ 1, 6, 7, 112, 3, 1, 1, 1, 200 },
	};
	for (int pi = 0; pi < npaths; pi++) {
		enum ml_q8_path p = paths[pi];
		for (size_t d = 0; d < sizeof dws / sizeof dws[0]; d++) {
			const int64_t *v = dws[d];
			snprintf(what, sizeof what, "%s depthwise x[%lld,%lld,%lld,%lld] k %lld s %lld p %lld "
				 "d %lld zx %lld", ml_q8_path_name(p), (long long)v[0], (long long)v[1],
				 (long long)v[2], (long long)v[3], (long long)v[4], (long long)v[5],
				 (long long)v[6], (long long)v[7], (long long)v[8]);
			if (!ml_q8_path_ok(p)) {
				ntest++;
				printf("ok %d - %s # SKIP this CPU lacks %s\n", ntest, what,
				       ml_q8_path_name(p));
				continue;
			}
			ok(dw_case(p, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], (int32_t)v[8],
				   (int32_t)(d * 37 % 256)), what);
		}
	}
	/* Q8Quantize of a matrix: whole blocks of 32 and tails, on every path */
	static const int64_t qs[][3] = {
		/* rows, cols, zero point */
		{ 12, 64, 128 }, { 1, 1, 0 }, { 3, 37, 255 }, { 129, 33, 17 },
	};
	for (int pi = 0; pi < npaths; pi++) {
		enum ml_q8_path p = paths[pi];
		for (size_t d = 0; d < sizeof qs / sizeof qs[0]; d++) {
			snprintf(what, sizeof what, "%s quantize [%lld, %lld] zero point %lld",
				 ml_q8_path_name(p), (long long)qs[d][0], (long long)qs[d][1],
				 (long long)qs[d][2]);
			if (!ml_q8_path_ok(p)) {
				ntest++;
				printf("ok %d - %s # SKIP this CPU lacks %s\n", ntest, what,
				       ml_q8_path_name(p));
				continue;
			}
			ok(quant_case(p, qs[d][0], qs[d][1], 0.0371f * (float)(d + 1), (int32_t)qs[d][2]),
			   what);
		}
	}
	/* dense Q8Conv by im2col: few channels padded (the padded copy), and others */
	static const int64_t cvs[][10] = {
		/* n, h, w, c, m, k, stride, pad, xzero, yzero */
		{ 1, 28, 28, 1, 6, 5, 1, 2, 13, 128 }, { 2, 9, 7, 2, 5, 3, 1, 1, 0, 3 },
		{ 1, 10, 11, 1, 4, 5, 2, 2, 200, 77 }, { 1, 8, 8, 3, 16, 3, 1, 1, 9, 0 },
		{ 1, 6, 6, 1, 3, 3, 1, 0, 5, 250 },
	};
	for (int pi = 0; pi < npaths; pi++) {
		enum ml_q8_path p = paths[pi];
		for (size_t d = 0; d < sizeof cvs / sizeof cvs[0]; d++) {
			const int64_t *v = cvs[d];
			snprintf(what, sizeof what, "%s conv x[%lld,%lld,%lld,%lld] -> %lld, k %lld s %lld p %lld",
				 ml_q8_path_name(p), (long long)v[0], (long long)v[1], (long long)v[2],
				 (long long)v[3], (long long)v[4], (long long)v[5], (long long)v[6],
				 (long long)v[7]);
			if (!ml_q8_path_ok(p)) {
				ntest++;
				printf("ok %d - %s # SKIP this CPU lacks %s\n", ntest, what,
				       ml_q8_path_name(p));
				continue;
			}
			ok(conv_case(p, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], (int32_t)v[8],
				     (int32_t)v[9]), what);
		}
	}
	/* Q8MaxPool: 2 x 2 at stride 2 (its own loop: odd sizes, 1 to 70 channels), others */
	static const int64_t pl[][7] = {
		/* n, h, w, c, window, stride, pad */
		{ 2, 28, 28, 6, 2, 2, 0 }, { 1, 9, 11, 1, 2, 2, 0 }, { 3, 4, 6, 70, 2, 2, 0 },
		{ 1, 10, 10, 16, 3, 2, 1 }, { 2, 7, 5, 3, 2, 1, 1 },
	};
	for (size_t d = 0; d < sizeof pl / sizeof pl[0]; d++) {
		const int64_t *v = pl[d];
		snprintf(what, sizeof what, "Q8MaxPool %lldx%lld stride %lld pad %lld of [%lld, %lld, %lld, %lld]",
			 (long long)v[4], (long long)v[4], (long long)v[5], (long long)v[6],
			 (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3]);
		ok(pool_case(v[0], v[1], v[2], v[3], v[4], v[5], v[6]), what);
	}
	/* Q8Quantize of NCHW images into NHWC: RGB (a word a pixel), 4 channels, others; one column */
	static const int64_t qi[][5] = {
		/* images, channels, rows, columns, zero point */
		{ 2, 3, 5, 37, 128 }, { 1, 3, 2, 1, 0 }, { 1, 4, 3, 33, 7 }, { 2, 1, 4, 19, 255 },
		{ 1, 6, 3, 11, 64 },
	};
	for (int pi = 0; pi < npaths; pi++) {
		enum ml_q8_path p = paths[pi];
		for (size_t d = 0; d < sizeof qi / sizeof qi[0]; d++) {
			snprintf(what, sizeof what, "%s quantize NCHW [%lld, %lld, %lld, %lld] into NHWC",
				 ml_q8_path_name(p), (long long)qi[d][0], (long long)qi[d][1],
				 (long long)qi[d][2], (long long)qi[d][3]);
			if (!ml_q8_path_ok(p)) {
				ntest++;
				printf("ok %d - %s # SKIP this CPU lacks %s\n", ntest, what,
				       ml_q8_path_name(p));
				continue;
			}
			ok(quant_case4(p, qi[d][0], qi[d][3], qi[d][1], qi[d][2], 0.0213f * (float)(d + 1),
				       (int32_t)qi[d][4]), what);
		}
	}
	ml_q8_set_path(ML_Q8_AUTO);
	ok(ml_q8_path_ok(ML_Q8_C) && ml_q8_path() != ML_Q8_AUTO, "a path is chosen at run time");
	snprintf(what, sizeof what, "auto path is %s", ml_q8_path_name(ml_q8_path()));
	ok(ml_q8_path_ok(ml_q8_path()), what);
	ok(noamx, "ML_AMX=0 turns the amx path off, and ML_Q8_PATH=amx falls back");
	return 0;
}
