/*
 * rnn.c: CPU kernels of the rnn family: RNN, GRU and LSTM in f32 (f16 and
 * bf16 run as f32), every direction, sequence_lens, initial states, both
 * layouts, the activations attributes, clip, GRU's linear_before_reset
 * and LSTM's peepholes and input_forget.
 *
 * Per direction, the input projection of every time step is one SGEMM
 * (X W^T plus the biases, [seq * batch, gates * hidden]); each step then
 * adds H_{t-1} R^T and applies the gates elementwise. A batch entry past
 * its sequence length keeps its state and writes zeros to Y, and in
 * reverse it starts at its own last step.
 *
 * The step is where the time goes at the small sizes these ops have in
 * practice (batch 1, hidden 32 to 256: a GEMV of a few thousand
 * multiply-adds, 16 to 100 times in a row), so it avoids everything that
 * costs more than the arithmetic: where batch * gates * hidden is small
 * (STEP_OWN_MAX) the product is a loop of this file on the calling thread,
 * over R transposed once per run (no thread pool, no OpenBLAS call per
 * step), and with the default activations the gates are one vectorised
 * pass per step with fastmath.h's exp and tanh (libm's are calls the
 * vectoriser cannot see through, and were half the time). Larger products
 * go to ml_sgemm, and other activations to a scalar loop over act().
 * ML_RNN_STEP=blas or own forces either product (tests, comparisons).
 */
#if defined(__GNUC__) && !defined(__clang__)
/*
 * -O2's "very cheap" vectoriser skips loops with epilogues, and trapping
 * math keeps the clip's selects from becoming blends; -std=c11 turns off
 * the contraction of a * b + c into an FMA, which the step's loop wants.
 */
#pragma GCC optimize("O3", "no-trapping-math", "fp-contract=fast")
#endif
#include <strings.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

#include "cpu/elem.h"
#include "cpu/fastmath.h"
#include "cpu/nn.h"

/* AVX2 and AVX-512 builds of the step's loops, picked at load time (GCC's target_clones). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define RNN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RNN_CLONES
#endif

/*
 * The most batch * gates * hidden multiply-adds a step computes with its
 * own loop: R^T up to 768 KiB, which a 1 MiB L2 keeps. Above it a step is
 * worth OpenBLAS's kernels and two threads' bandwidth (AMD EPYC, batch 1,
 * sequence 100: GRU hidden 256, 196608, own 1.32 ms, BLAS 1.36 ms; LSTM
 * hidden 256, 262144, own 2.07 ms, BLAS 1.85 ms).
 */
#define STEP_OWN_MAX ((int64_t)3 << 16)

enum act_kind {
	A_SIGMOID, A_TANH, A_RELU, A_AFFINE, A_LEAKY_RELU, A_THRESHOLDED_RELU, A_SCALED_TANH,
	A_HARD_SIGMOID, A_ELU, A_SOFTSIGN, A_SOFTPLUS
};

struct act {
	enum act_kind kind;
	float alpha, beta;
};

/* The activation names of ONNX's RNN ops, with how many of alpha and beta each takes. */
static const struct {
	const char *name;
	enum act_kind kind;
	int nparams;
	float alpha, beta;	/* defaults */
} act_tab[] = {
	{ "Sigmoid", A_SIGMOID, 0, 0, 0 },
	{ "Tanh", A_TANH, 0, 0, 0 },
	{ "Relu", A_RELU, 0, 0, 0 },
	{ "Affine", A_AFFINE, 2, 1.0f, 0.0f },
	{ "LeakyRelu", A_LEAKY_RELU, 1, 0.01f, 0 },
	{ "ThresholdedRelu", A_THRESHOLDED_RELU, 1, 1.0f, 0 },
	{ "ScaledTanh", A_SCALED_TANH, 2, 1.0f, 1.0f },
	{ "HardSigmoid", A_HARD_SIGMOID, 2, 0.2f, 0.5f },
	{ "Elu", A_ELU, 1, 1.0f, 0 },
	{ "Softsign", A_SOFTSIGN, 0, 0, 0 },
	{ "Softplus", A_SOFTPLUS, 0, 0, 0 },
};

static inline float
act(const struct act *a, float x)
{
	switch (a->kind) {
	case A_SIGMOID:
		return 1.0f / (1.0f + expf(-x));
	case A_TANH:
		return tanhf(x);
	case A_RELU:
		return x > 0 ? x : 0.0f;
	case A_AFFINE:
		return a->alpha * x + a->beta;
	case A_LEAKY_RELU:
		return x >= 0 ? x : a->alpha * x;
	case A_THRESHOLDED_RELU:
		return x > a->alpha ? x : 0.0f;
	case A_SCALED_TANH:
		return a->alpha * tanhf(a->beta * x);
	case A_HARD_SIGMOID:
		return fmaxf(0.0f, fminf(1.0f, a->alpha * x + a->beta));
	case A_ELU:
		return x >= 0 ? x : a->alpha * (expf(x) - 1.0f);
	case A_SOFTSIGN:
		return x / (1.0f + fabsf(x));
	case A_SOFTPLUS:
		return log1pf(expf(x));
	}
	return x;
}

/*
 * parse_acts: the node's activations for dirs directions, nper each (the
 * defaults when the attribute is absent). A list of nper names serves
 * both directions. alpha and beta values are taken in order by the
 * functions that use them, as onnxruntime does.
 */
static int
parse_acts(struct ml_opctx *c, int dirs, int nper, const enum act_kind *defs, struct act *out)
{
	const struct ml_attr *names = ml_attr_find(c->node, "activations");
	const double *al = NULL, *be = NULL;
	int nal = ml_attr_floats(c->node, "activation_alpha", &al);
	int nbe = ml_attr_floats(c->node, "activation_beta", &be);
	int ia = 0, ib = 0;

	if (names == NULL || names->type != ML_ATTR_STRINGS || names->n == 0) {
		for (int i = 0; i < dirs * nper; i++)
			out[i] = (struct act){ defs[i % nper], 0, 0 };
		return 0;
	}
	if (names->n != nper && names->n != dirs * nper)
		return ml_opfail(c, ML_EINVAL, "activations has %d names, not %d", names->n,
				 dirs * nper);
	for (int i = 0; i < names->n; i++) {
		size_t k;
		for (k = 0; k < sizeof act_tab / sizeof act_tab[0]; k++)
			if (strcasecmp(names->strings[i], act_tab[k].name) == 0)
				break;
		if (k == sizeof act_tab / sizeof act_tab[0])
			return ml_opfail(c, ML_ENOTSUP, "activation \"%s\" is not supported",
					 names->strings[i]);
		out[i].kind = act_tab[k].kind;
		out[i].alpha = act_tab[k].alpha;
		out[i].beta = act_tab[k].beta;
		if (act_tab[k].nparams >= 1 && ia < nal)
			out[i].alpha = (float)al[ia++];
		if (act_tab[k].nparams >= 2 && ib < nbe)
			out[i].beta = (float)be[ib++];
	}
	if (names->n == nper)
		for (int i = nper; i < dirs * nper; i++)
			out[i] = out[i - nper];
	return 0;
}

struct rnn {
	enum ml_op op;
	int ng;			/* gate blocks: 1, 3 or 4 */
	int64_t seq, batch, in, h, dirs;
	bool layout1, lbr, input_forget;
	float clip;		/* 0: no clipping */
	const float *x, *w, *r, *b, *init_h, *init_c, *p;
	int64_t *lens;		/* per batch entry */
	float *y, *yh, *yc;	/* outputs, NULL when not wanted */
	struct act acts[6];
};

static inline float
clipv(const struct rnn *s, float v)
{
	if (s->clip > 0)
		v = v < -s->clip ? -s->clip : v > s->clip ? s->clip : v;
	return v;
}

/* Offsets of (time t, direction d, batch b) in Y and of (d, b) in Y_h and the states. */
static inline int64_t
y_off(const struct rnn *s, int64_t t, int64_t d, int64_t b)
{
	return (s->layout1 ? (b * s->seq + t) * s->dirs + d : (t * s->dirs + d) * s->batch + b) * s->h;
}

static inline int64_t
h_off(const struct rnn *s, int64_t d, int64_t b)
{
	return (s->layout1 ? b * s->dirs + d : d * s->batch + b) * s->h;
}

/*
 * transpose: rt[p, j] = r[j, p] for r [n, k] row-major, in 4 x 4 SSE
 * blocks on x86-64 (any x86-64 has SSE), scalar at the edges and
 * elsewhere. Once per run and direction; scalar, it was a fifth of the
 * LSTM's time at sequence 16.
 */
static void
transpose(const float *restrict r, int64_t n, int64_t k, float *restrict rt)
{
	int64_t j = 0;
#ifdef __SSE__
	for (; j + 4 <= n; j += 4) {
		const float *r0 = r + j * k, *r1 = r0 + k, *r2 = r1 + k, *r3 = r2 + k;
		int64_t p = 0;
		for (; p + 4 <= k; p += 4) {
			__m128 a = _mm_loadu_ps(r0 + p), b = _mm_loadu_ps(r1 + p);
			__m128 c = _mm_loadu_ps(r2 + p), d = _mm_loadu_ps(r3 + p);
			_MM_TRANSPOSE4_PS(a, b, c, d);
			_mm_storeu_ps(rt + p * n + j, a);
			_mm_storeu_ps(rt + (p + 1) * n + j, b);
			_mm_storeu_ps(rt + (p + 2) * n + j, c);
			_mm_storeu_ps(rt + (p + 3) * n + j, d);
		}
		for (; p < k; p++) {
			rt[p * n + j] = r0[p];
			rt[p * n + j + 1] = r1[p];
			rt[p * n + j + 2] = r2[p];
			rt[p * n + j + 3] = r3[p];
		}
	}
#endif
	for (; j < n; j++)
		for (int64_t p = 0; p < k; p++)
			rt[p * n + j] = r[j * k + p];
}

/*
 * step_own: out[b, 0:n] = h[b, 0:k] rt[0:k, 0:n] for b < nb (rows ldh,
 * ldr and ldo apart): the recurrent product as scaled rows of R^T, four
 * of them per pass so that out is read and written k / 4 times.
 */
RNN_CLONES static void
step_own(int64_t nb, int64_t k, int64_t n, const float *restrict h, int64_t ldh,
	 const float *restrict rt, int64_t ldr, float *restrict out, int64_t ldo)
{
	for (int64_t b = 0; b < nb; b++) {
		const float *hb = h + b * ldh;
		float *restrict o = out + b * ldo;
		int64_t p = 0;
		for (int64_t j = 0; j < n; j++)
			o[j] = 0.0f;
		for (; p + 4 <= k; p += 4) {
			const float a0 = hb[p], a1 = hb[p + 1], a2 = hb[p + 2], a3 = hb[p + 3];
			const float *r0 = rt + p * ldr, *r1 = r0 + ldr;
			const float *r2 = r1 + ldr, *r3 = r2 + ldr;
			for (int64_t j = 0; j < n; j++)
				o[j] += a0 * r0[j] + a1 * r1[j] + a2 * r2[j] + a3 * r3[j];
		}
		for (; p < k; p++) {
			const float a = hb[p], *r0 = rt + p * ldr;
			for (int64_t j = 0; j < n; j++)
				o[j] += a * r0[j];
		}
	}
}

/*
 * The gates with the default activations, one batch entry, one step: xr
 * is the entry's row of the input projection (biases in), hb its row of
 * H_{t-1} R^T, h (and c) its state, updated in place; cl the clip bound
 * (INFINITY: none). Each is one loop GCC vectorises; they compute what
 * run_dir's scalar loop does with sigmoid and tanh.
 */
static inline float
clampv(float v, float cl)
{
	return v < -cl ? -cl : v > cl ? cl : v;
}

static inline float
sigm(float v)
{
	return 1.0f / (1.0f + ml_expf(-v));
}

RNN_CLONES static void
gates_rnn(int64_t H, const float *restrict xr, const float *restrict hb, float *restrict h,
	  float cl)
{
	for (int64_t j = 0; j < H; j++)
		h[j] = ml_tanhf(clampv(xr[j] + hb[j], cl));
}

/* GRU with linear_before_reset: rbh is Rb's h block (zeros without B). */
RNN_CLONES static void
gates_gru_lbr(int64_t H, const float *restrict xr, const float *restrict hb,
	      const float *restrict rbh, float *restrict h, float cl)
{
	for (int64_t j = 0; j < H; j++) {
		float z = sigm(clampv(xr[j] + hb[j], cl));
		float r = sigm(clampv(xr[H + j] + hb[H + j], cl));
		float n = ml_tanhf(clampv(xr[2 * H + j] + r * (hb[2 * H + j] + rbh[j]), cl));
		h[j] = (1.0f - z) * n + z * h[j];
	}
}

/* GRU without it, first half: rh = r * H_{t-1}, the operand of (r * H_{t-1}) Rh^T. */
RNN_CLONES static void
gates_gru_r(int64_t H, const float *restrict xr, const float *restrict hb,
	    const float *restrict h, float *restrict rh, float cl)
{
	for (int64_t j = 0; j < H; j++)
		rh[j] = sigm(clampv(xr[H + j] + hb[H + j], cl)) * h[j];
}

/* ... and second half, once hb's h block holds (r * H_{t-1}) Rh^T. */
RNN_CLONES static void
gates_gru(int64_t H, const float *restrict xr, const float *restrict hb, float *restrict h,
	  float cl)
{
	for (int64_t j = 0; j < H; j++) {
		float z = sigm(clampv(xr[j] + hb[j], cl));
		float n = ml_tanhf(clampv(xr[2 * H + j] + hb[2 * H + j], cl));
		h[j] = (1.0f - z) * n + z * h[j];
	}
}

/*
 * LSTM, gates in ONNX's order i, o, f, c; p the peepholes i, o, f (zeros
 * without P). One loop per value of input_forget (cifg): a test of it
 * inside the loop, even as a select, keeps GCC from vectorising it.
 */
static inline __attribute__((always_inline)) void
lstm_body(int64_t H, const float *restrict xr, const float *restrict hb,
	  const float *restrict p, float *restrict h, float *restrict c, float cl, bool cifg)
{
	for (int64_t j = 0; j < H; j++) {
		float cp = c[j];
		float i = sigm(clampv(xr[j] + hb[j] + p[j] * cp, cl));
		float f = cifg ? 1.0f - i :
			  sigm(clampv(xr[2 * H + j] + hb[2 * H + j] + p[2 * H + j] * cp, cl));
		float cn = f * cp + i * ml_tanhf(clampv(xr[3 * H + j] + hb[3 * H + j], cl));
		float o = sigm(clampv(xr[H + j] + hb[H + j] + p[H + j] * cn, cl));
		c[j] = cn;
		h[j] = o * ml_tanhf(cn);
	}
}

RNN_CLONES static void
gates_lstm(int64_t H, const float *restrict xr, const float *restrict hb,
	   const float *restrict p, float *restrict h, float *restrict c, float cl, bool cifg)
{
	if (cifg)
		lstm_body(H, xr, hb, p, h, c, cl, true);
	else
		lstm_body(H, xr, hb, p, h, c, cl, false);
}

/* The scratch of one direction (see run_rnn), each [batch, ...] in rows. */
struct rnn_buf {
	float *xw;		/* [seq * batch, ng * h]: the input projection */
	float *hr;		/* [batch, ng * h]: H_{t-1} R^T */
	float *hs, *cs, *rh;	/* [batch, h]: hidden and cell states, GRU's r * H_{t-1} */
	float *rt;		/* [h, ng * h]: R^T for step_own; NULL: ml_sgemm */
	float *zero;		/* [3 * h] zeros: absent peepholes and Rb */
};

/*
 * step_product: hr[:, c0:c0 + n] = a R[c0:c0 + n]^T for the batch's rows
 * of a ([batch, h]), R being the direction's [ng * h, h] and rt its
 * transpose when step_own computes it.
 */
static int
step_product(struct ml_opctx *c, const struct rnn *s, const float *r, const struct rnn_buf *w,
	     const float *a, int64_t c0, int64_t n)
{
	int64_t H = s->h, G = s->ng * H;

	if (w->rt != NULL) {
		step_own(s->batch, H, n, a, H, w->rt + c0, G, w->hr + c0, G);
		return 0;
	}
	if (!ml_sgemm(false, true, s->batch, n, H, 1.0f, a, H, r + c0 * H, H, 0.0f, w->hr + c0, G))
		return ml_opfail(c, ML_ENOTSUP, "sizes exceed BLAS's range");
	return 0;
}

/*
 * gates_slow: the gates of batch entry b through act(), for activations
 * other than the defaults: the ONNX formulas one element at a time.
 */
static void
gates_slow(const struct rnn *s, const struct act *fa, const float *xr, const float *hb,
	   const float *rb, const float *p, float *hv, float *cv)
{
	int64_t H = s->h;

	if (s->op == ML_OP_RNN) {
		for (int64_t j = 0; j < H; j++)
			hv[j] = act(&fa[0], clipv(s, xr[j] + hb[j]));
	} else if (s->op == ML_OP_GRU) {
		for (int64_t j = 0; j < H; j++) {
			float z = act(&fa[0], clipv(s, xr[j] + hb[j]));
			float hh;
			if (s->lbr) {
				float rg = act(&fa[0], clipv(s, xr[H + j] + hb[H + j]));
				float rbh = rb != NULL ? rb[2 * H + j] : 0.0f;
				float u = xr[2 * H + j] + rg * (hb[2 * H + j] + rbh);
				hh = act(&fa[1], clipv(s, u));
			} else {
				hh = act(&fa[1], clipv(s, xr[2 * H + j] + hb[2 * H + j]));
			}
			hv[j] = (1.0f - z) * hh + z * hv[j];
		}
	} else {
		for (int64_t j = 0; j < H; j++) {
			float cp = cv[j];
			float ig = xr[j] + hb[j] + (p != NULL ? p[j] * cp : 0.0f);
			float fg = xr[2 * H + j] + hb[2 * H + j] +
				   (p != NULL ? p[2 * H + j] * cp : 0.0f);
			float cg = xr[3 * H + j] + hb[3 * H + j];
			float i = act(&fa[0], clipv(s, ig));
			float f = s->input_forget ? 1.0f - i : act(&fa[0], clipv(s, fg));
			float cn = f * cp + i * act(&fa[1], clipv(s, cg));
			float og = xr[H + j] + hb[H + j] + (p != NULL ? p[H + j] * cn : 0.0f);
			float o = act(&fa[0], clipv(s, og));
			cv[j] = cn;
			hv[j] = o * act(&fa[2], cn);
		}
	}
}

/* default_acts: whether a direction's activations are the op's defaults (sigmoid, tanh). */
static bool
default_acts(const struct rnn *s, const struct act *fa)
{
	switch (s->op) {
	case ML_OP_RNN:
		return fa[0].kind == A_TANH;
	case ML_OP_GRU:
		return fa[0].kind == A_SIGMOID && fa[1].kind == A_TANH;
	default:
		return fa[0].kind == A_SIGMOID && fa[1].kind == A_TANH && fa[2].kind == A_TANH;
	}
}

/* run_dir: direction d, with the scratch w (see struct rnn_buf). */
static int
run_dir(struct ml_opctx *c, const struct rnn *s, int64_t d, const struct rnn_buf *w)
{
	int64_t H = s->h, G = s->ng * H;
	const float *wd = s->w + d * G * s->in, *r = s->r + d * G * H;
	const float *wb = s->b != NULL ? s->b + d * 2 * G : NULL, *rb = wb != NULL ? wb + G : NULL;
	const float *p = s->p != NULL ? s->p + d * 3 * H : NULL;
	const struct act *fa = &s->acts[d * (s->op == ML_OP_LSTM ? 3 : s->op == ML_OP_GRU ? 2 : 1)];
	bool rev = s->dirs == 1 ? strcmp(ml_attr_str(c->node, "direction", "forward"), "reverse") == 0
				: d == 1;
	bool fast = default_acts(s, fa);
	float cl = s->clip > 0 ? s->clip : INFINITY;
	int64_t rows = s->seq * s->batch;
	float *xw = w->xw, *hs = w->hs, *cs = w->cs;

	if (!ml_sgemm(false, true, rows, G, s->in, 1.0f, s->x, s->in, wd, s->in, 0.0f, xw, G))
		return ml_opfail(c, ML_ENOTSUP, "sizes exceed BLAS's range");
	/* fold the biases into the projection, except GRU's Rb_h under linear_before_reset */
	if (wb != NULL)
		for (int64_t i = 0; i < rows; i++)
			for (int64_t j = 0; j < G; j++)
				xw[i * G + j] += wb[j] + (s->lbr && j >= 2 * H ? 0.0f : rb[j]);
	if (w->rt != NULL)
		transpose(r, G, H, w->rt);
	for (int64_t b = 0; b < s->batch; b++)
		for (int64_t j = 0; j < H; j++) {
			hs[b * H + j] = s->init_h != NULL ? s->init_h[h_off(s, d, b) + j] : 0.0f;
			if (cs != NULL)
				cs[b * H + j] = s->init_c != NULL ? s->init_c[h_off(s, d, b) + j] : 0.0f;
		}
	for (int64_t st = 0; st < s->seq; st++) {
		/* the recurrent product; GRU without linear_before_reset takes only z and r here */
		bool split = s->op == ML_OP_GRU && !s->lbr;
		ML_TRY(step_product(c, s, r, w, hs, 0, split ? 2 * H : G));
		if (split) {
			/* r = f(...) first, then (r * H_{t-1}) Rh^T into hr's h block */
			for (int64_t b = 0; b < s->batch; b++) {
				int64_t t = rev ? s->lens[b] - 1 - st : st;
				const float *xr = xw + (s->layout1 ? b * s->seq + t : t * s->batch + b) * G;
				float *rhb = w->rh + b * H;
				if (st >= s->lens[b])
					memset(rhb, 0, sizeof(float) * (size_t)H);
				else if (fast)
					gates_gru_r(H, xr, w->hr + b * G, hs + b * H, rhb, cl);
				else
					for (int64_t j = 0; j < H; j++) {
						float u = xr[H + j] + w->hr[b * G + H + j];
						rhb[j] = act(&fa[0], clipv(s, u)) * hs[b * H + j];
					}
			}
			ML_TRY(step_product(c, s, r, w, w->rh, 2 * H, H));
		}
		for (int64_t b = 0; b < s->batch; b++) {
			if (st >= s->lens[b])
				continue;
			int64_t t = rev ? s->lens[b] - 1 - st : st;
			const float *xr = xw + (s->layout1 ? b * s->seq + t : t * s->batch + b) * G;
			const float *hb = w->hr + b * G;
			float *hv = hs + b * H;
			if (!fast)
				gates_slow(s, fa, xr, hb, rb, p, hv,
					   cs != NULL ? cs + b * H : NULL);
			else if (s->op == ML_OP_RNN)
				gates_rnn(H, xr, hb, hv, cl);
			else if (s->op == ML_OP_GRU && s->lbr)
				gates_gru_lbr(H, xr, hb, rb != NULL ? rb + 2 * H : w->zero, hv, cl);
			else if (s->op == ML_OP_GRU)
				gates_gru(H, xr, hb, hv, cl);
			else
				gates_lstm(H, xr, hb, p != NULL ? p : w->zero, hv, cs + b * H, cl,
					   s->input_forget);
			if (s->y != NULL)
				memcpy(s->y + y_off(s, t, d, b), hv, sizeof(float) * (size_t)H);
		}
	}
	for (int64_t b = 0; b < s->batch; b++) {
		if (s->yh != NULL)
			memcpy(s->yh + h_off(s, d, b), hs + b * H, sizeof(float) * (size_t)H);
		if (s->yc != NULL)
			memcpy(s->yc + h_off(s, d, b), cs + b * H, sizeof(float) * (size_t)H);
	}
	return 0;
}

/* step_own_ok: whether the step's product is step_own's (ML_RNN_STEP=blas|own forces it). */
static bool
step_own_ok(const struct rnn *s)
{
	const char *env = getenv("ML_RNN_STEP");
	if (env != NULL && strcmp(env, "blas") == 0)
		return false;
	if (env != NULL && strcmp(env, "own") == 0)
		return true;
	return s->batch * s->ng * s->h <= STEP_OWN_MAX / ML_MAX(s->h, 1);
}

static int
run_rnn(struct ml_opctx *c)
{
	static const enum act_kind d_rnn[] = { A_TANH }, d_gru[] = { A_SIGMOID, A_TANH },
		d_lstm[] = { A_SIGMOID, A_TANH, A_TANH };
	struct rnn s = { .op = c->node->op };
	const struct ml_tval *x = c->in[0], *sl = ML_IN(c, 4);
	void *buf = NULL;
	int rc = 0;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_rnn);
	if (x->dtype != ML_F32)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(x->dtype));
	s.ng = s.op == ML_OP_LSTM ? 4 : s.op == ML_OP_GRU ? 3 : 1;
	s.layout1 = ml_attr_int(c->node, "layout", 0) == 1;
	s.seq = x->dims[s.layout1 ? 1 : 0];
	s.batch = x->dims[s.layout1 ? 0 : 1];
	s.in = x->dims[2];
	s.h = c->in[2]->dims[2];
	s.dirs = c->in[1]->dims[0];
	s.lbr = ml_attr_int(c->node, "linear_before_reset", 0) != 0;
	s.input_forget = ml_attr_int(c->node, "input_forget", 0) != 0;
	s.clip = (float)ml_attr_float(c->node, "clip", 0);
	if (s.clip < 0)
		return ml_opfail(c, ML_EINVAL, "clip must be positive");
	s.x = x->data;
	s.w = c->in[1]->data;
	s.r = c->in[2]->data;
	s.b = ML_IN(c, 3) != NULL && ml_tval_numel(c->in[3]) > 0 ? c->in[3]->data : NULL;
	s.init_h = ML_IN(c, 5) != NULL && ml_tval_numel(c->in[5]) > 0 ? c->in[5]->data : NULL;
	if (s.op == ML_OP_LSTM) {
		s.init_c = ML_IN(c, 6) != NULL && ml_tval_numel(c->in[6]) > 0 ? c->in[6]->data : NULL;
		s.p = ML_IN(c, 7) != NULL && ml_tval_numel(c->in[7]) > 0 ? c->in[7]->data : NULL;
	}
	s.y = c->n_out > 0 ? c->out[0]->data : NULL;
	s.yh = c->n_out > 1 ? c->out[1]->data : NULL;
	s.yc = c->n_out > 2 && s.op == ML_OP_LSTM ? c->out[2]->data : NULL;
	ML_TRY(parse_acts(c, (int)s.dirs, s.op == ML_OP_LSTM ? 3 : s.op == ML_OP_GRU ? 2 : 1,
			  s.op == ML_OP_LSTM ? d_lstm : s.op == ML_OP_GRU ? d_gru : d_rnn, s.acts));

	/* xw, hr, then hs, cs and rh, the zeros, and R^T when step_own computes the step */
	bool own = step_own_ok(&s);
	int64_t G = s.ng * s.h, n, sz;
	n = s.seq * s.batch * G + s.batch * (G + 3 * s.h) + 3 * s.h + (own ? s.h * G : 0);
	if (!ml_mul_ok(n, (int64_t)sizeof(float), &sz))
		return ml_opfail(c, ML_ENOMEM, "the RNN's buffers are too large");
	buf = ml_malloc(sizeof(int64_t) * (size_t)ML_MAX(s.batch, 1) + (size_t)sz);
	if (buf == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	s.lens = buf;
	struct rnn_buf w = { .xw = (float *)(s.lens + ML_MAX(s.batch, 1)) };
	w.hr = w.xw + s.seq * s.batch * G;
	w.hs = w.hr + s.batch * G;
	w.cs = s.op == ML_OP_LSTM ? w.hs + s.batch * s.h : NULL;
	w.rh = w.hs + 2 * s.batch * s.h;
	w.zero = w.rh + s.batch * s.h;
	w.rt = own ? w.zero + 3 * s.h : NULL;
	memset(w.zero, 0, sizeof(float) * (size_t)(3 * s.h));
	for (int64_t b = 0; b < s.batch; b++) {
		s.lens[b] = sl != NULL ? ml_get_i64(sl->data, sl->dtype, b) : s.seq;
		if (s.lens[b] < 0 || s.lens[b] > s.seq) {
			rc = ml_opfail(c, ML_EINVAL, "sequence_lens[%lld] = %lld is out of range",
				       (long long)b, (long long)s.lens[b]);
			goto out;
		}
	}
	if (s.y != NULL)
		memset(s.y, 0, sizeof(float) * (size_t)ml_tval_numel(c->out[0]));
	for (int64_t d = 0; d < s.dirs && rc == 0; d++)
		rc = run_dir(c, &s, d, &w);
out:
	ml_free(buf);
	return rc;
}

const struct ml_cpu_kernel ml_cpu_rnn[] = {
	{ ML_OP_RNN, run_rnn },
	{ ML_OP_GRU, run_rnn },
	{ ML_OP_LSTM, run_rnn },
	{ .op = ML_OP_NONE },
};
