/*
 * test_bf16.c: TAP tests of the bf16-weight products (lib/cpu/bf16.c): the
 * GEMM against a reference of the same bf16 operands summed in double
 * (tight tolerance: only the f32 sums differ), on odd shapes (k odd, k
 * past one k block, m and n off the 12 x 32 tile), on both paths (the
 * AVX512_BF16 one is skipped where the CPU lacks it); the rounding of the
 * packing against ml_f32_to_bf16; and Conv, FusedConv, MatMul, Gemm and
 * FusedMatMul with a bf16 weight through one-node graphs, against a
 * reference with the weight (and, on the vdpbf16ps path, the input)
 * rounded to bf16; then the op cases again in a child process with
 * ML_BF16=f32, which must force the fallback.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ml.h"
#include "cpu/nn.h"

static int ntest, nfail;
static bool quiet;	/* the child: count failures, print nothing */

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	if (!quiet)
		printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static uint64_t rs = 88172645463325252ull;

static float
frand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (float)((double)(rs >> 11) * 0x1.0p-53 * 2 - 1);
}

static float
rbf(float f)
{
	return ml_bf16_to_f32(ml_f32_to_bf16(f));
}

/* gemm_case: ml_bf16_gemm on m x n x k (B given transposed when tb) against the reference. */
static bool
gemm_case(int64_t m, int64_t n, int64_t k, bool tb, bool bias)
{
	uint16_t *a = malloc(sizeof(uint16_t) * (size_t)(m * k + 1));
	uint16_t *b = malloc(sizeof(uint16_t) * (size_t)(k * n + 1));
	uint16_t *bp = aligned_alloc(64, (sizeof(uint16_t) * (size_t)ml_bf16_packed_len(k, n) + 63) /
					     64 * 64);
	float *c = malloc(sizeof(float) * (size_t)(m * n + 1)), *bv = malloc(sizeof(float) * (size_t)m);
	bool good = a != NULL && b != NULL && bp != NULL && c != NULL && bv != NULL;

	for (int64_t i = 0; good && i < m * k; i++)
		a[i] = ml_f32_to_bf16(frand());
	for (int64_t i = 0; good && i < k * n; i++)
		b[i] = ml_f32_to_bf16(frand());
	for (int64_t i = 0; good && i < m; i++)
		bv[i] = frand();
	if (good) {
		ml_bf16_pack_b(bp, b, k, n, tb);
		ml_bf16_gemm(m, n, k, a, k, bp, bias ? bv : NULL, c, n);
	}
	for (int64_t i = 0; good && i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = bias ? bv[i] : 0, mag = fabs(s);
			for (int64_t q = 0; q < k; q++) {
				double t = (double)ml_bf16_to_f32(a[i * k + q]) *
					   ml_bf16_to_f32(tb ? b[j * k + q] : b[q * n + j]);
				s += t;
				mag += fabs(t);
			}
			if (!(fabs(c[i * n + j] - s) <= 1e-6 * mag + 1e-7)) {
				if (!quiet)
					printf("# [%lld, %lld]: %.9g, want %.9g\n", (long long)i,
					       (long long)j, c[i * n + j], s);
				good = false;
				break;
			}
		}
	free(a);
	free(b);
	free(bp);
	free(c);
	free(bv);
	return good;
}

/*
 * sgemm_case: ml_bf16_sgemm (f32 operands rounded while packing: the
 * products of mltrain --precision bf16) on m x n x k with op(A), op(B) and
 * beta 0 or 1, against the bf16-rounded operands summed in double; on the
 * fallback (the emulation) it must equal ml_sgemm on the rounded operands
 * bit for bit.
 */
static bool
sgemm_case(int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool beta, bool exact)
{
	int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
	int64_t ar = ta ? k : m, br = tb ? n : k;
	float *a = malloc(sizeof(float) * (size_t)(ar * lda + 1));
	float *b = malloc(sizeof(float) * (size_t)(br * ldb + 1));
	float *ra = malloc(sizeof(float) * (size_t)(ar * lda + 1));
	float *rb = malloc(sizeof(float) * (size_t)(br * ldb + 1));
	float *c = malloc(sizeof(float) * (size_t)(m * ldc + 1));
	float *c2 = malloc(sizeof(float) * (size_t)(m * ldc + 1));
	bool good = a != NULL && b != NULL && ra != NULL && rb != NULL && c != NULL && c2 != NULL;

	for (int64_t i = 0; good && i < ar * lda; i++)
		ra[i] = rbf(a[i] = frand() * 3);
	for (int64_t i = 0; good && i < br * ldb; i++)
		rb[i] = rbf(b[i] = frand());
	for (int64_t i = 0; good && i < m * ldc; i++)
		c[i] = c2[i] = frand();
	good = good && ml_bf16_sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta ? 1.0f : 0.0f, c, ldc);
	if (good && exact) {
		good = ml_sgemm(ta, tb, m, n, k, 1.0f, ra, lda, rb, ldb, beta ? 1.0f : 0.0f, c2, ldc);
		for (int64_t i = 0; good && i < m; i++)
			good = memcmp(c + i * ldc, c2 + i * ldc, sizeof(float) * (size_t)n) == 0;
	}
	for (int64_t i = 0; good && i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double sum = beta ? c2[i * ldc + j] : 0, mag = fabs(sum);
			if (exact)
				sum = mag = 0;
			for (int64_t q = 0; q < k && !exact; q++) {
				double t = (double)ra[ta ? q * lda + i : i * lda + q] *
					   rb[tb ? j * ldb + q : q * ldb + j];
				sum += t;
				mag += fabs(t);
			}
			if (!exact && !(fabs(c[i * ldc + j] - sum) <= 1e-6 * mag + 1e-7)) {
				if (!quiet)
					printf("# [%lld, %lld]: %.9g, want %.9g\n", (long long)i,
					       (long long)j, c[i * ldc + j], sum);
				good = false;
				break;
			}
		}
	free(a);
	free(b);
	free(ra);
	free(rb);
	free(c);
	free(c2);
	return good;
}

/* pack_case: ml_bf16_pack_pair and ml_bf16_from_f32 round as ml_f32_to_bf16 does. */
static bool
pack_case(int64_t n)
{
	int64_t kp = 3, npan = (n + ML_BF_NR - 1) / ML_BF_NR;
	float *r = malloc(sizeof(float) * (size_t)(2 * n));
	uint16_t *p = calloc((size_t)(npan * kp * 2 * ML_BF_NR), sizeof(uint16_t));
	uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
	bool good = r != NULL && p != NULL && h != NULL;

	for (int64_t i = 0; good && i < 2 * n; i++)
		r[i] = frand() * 1000;
	if (good) {
		/* the pair row 1 of 3; row 2 gets r0 only (the odd tail) */
		ml_bf16_pack_pair(p + 2 * ML_BF_NR, kp * 2 * ML_BF_NR, r, r + n, n);
		ml_bf16_pack_pair(p + 4 * ML_BF_NR, kp * 2 * ML_BF_NR, r, NULL, n);
		ml_bf16_from_f32(h, r, n);
	}
	for (int64_t j = 0; good && j < npan * ML_BF_NR; j++) {
		const uint16_t *pan = p + (j / ML_BF_NR) * kp * 2 * ML_BF_NR + (j % ML_BF_NR) * 2;
		uint16_t w0 = j < n ? ml_f32_to_bf16(r[j]) : 0, w1 = j < n ? ml_f32_to_bf16(r[n + j]) : 0;
		good = pan[0] == 0 && pan[1] == 0 && pan[64] == w0 && pan[65] == w1 &&
		       pan[128] == w0 && pan[129] == 0 && (j >= n || h[j] == w0);
	}
	free(r);
	free(p);
	free(h);
	return good;
}

/* One-node graphs. */
enum { OP_CONV, OP_FCONV, OP_MATMUL, OP_GEMM, OP_FMATMUL, OP_FGEMM };

struct opcase {
	int op;
	int64_t n, c, h, w, m, k, s, p, group;	/* Conv: x [n, c, h, w], w [m, c / group, k, k] */
	bool relu;
};

static void
set_input(struct ml_graph *g, const char *name, int rank, const int64_t *d)
{
	int t = ml_graph_tensor(g, name);
	g->tensors[t]->dtype = ML_F32;
	g->tensors[t]->rank = rank;
	g->tensors[t]->kind = ML_TK_INPUT;
	memcpy(g->tensors[t]->dims, d, sizeof(int64_t) * (size_t)rank);
	ml_graph_add_input(g, t, NULL);
}

/*
 * op_case: the product of oc with a bf16 weight against a double reference
 * of the bf16 weight and the input, rounded to bf16 when round_x.
 */
static bool
op_case(const struct opcase *oc, bool round_x)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	struct ml_session *ss = NULL;
	struct ml_tval x = { 0 }, z = { 0 };
	bool conv = oc->op == OP_CONV || oc->op == OP_FCONV, good = false;
	int64_t cg = conv ? oc->c / oc->group : 0;
	/* MatMul-like: x [n, c], w [c, m] ([m, c] for Gemm, transB) */
	int64_t xd[4] = { oc->n, oc->c, oc->h, oc->w }, xr = conv ? 4 : 2;
	int64_t wd[4] = { oc->m, cg, oc->k, oc->k }, wr = conv ? 4 : 2;
	if (!conv) {
		bool tb = oc->op == OP_GEMM || oc->op == OP_FGEMM;
		wd[0] = tb ? oc->m : oc->c;
		wd[1] = tb ? oc->c : oc->m;
	}
	int64_t nw = conv ? oc->m * cg * oc->k * oc->k : oc->c * oc->m, bd[1] = { oc->m };
	uint16_t *w = malloc(sizeof(uint16_t) * (size_t)nw);
	float *b = malloc(sizeof(float) * (size_t)oc->m);
	int64_t OH = conv ? (oc->h + 2 * oc->p - oc->k) / oc->s + 1 : 1;
	int64_t OW = conv ? (oc->w + 2 * oc->p - oc->k) / oc->s + 1 : 1;

	for (int64_t i = 0; i < nw; i++)
		w[i] = ml_f32_to_bf16(frand());
	for (int64_t i = 0; i < oc->m; i++)
		b[i] = frand();
	if (ml_graph_new(&g, &e) < 0 || ml_graph_set_opset(g, "", 13, &e) < 0)
		goto out;
	set_input(g, "x", (int)xr, xd);
	bool resid = oc->op == OP_FCONV || oc->op == OP_FMATMUL;
	int64_t zd[4] = { oc->n, oc->m, OH, OW };
	if (resid)
		set_input(g, "z", (int)xr, zd);
	ml_graph_set_data(g, ml_graph_tensor(g, "w"), ML_TK_CONST, ML_BF16, (int)wr, wd, w,
			  sizeof(uint16_t) * (size_t)nw, &e);
	ml_graph_set_data(g, ml_graph_tensor(g, "b"), ML_TK_CONST, ML_F32, 1, bd, b,
			  sizeof(float) * (size_t)oc->m, &e);
	const char *in[] = { "x", "w", "b", "z" }, *outn[] = { "y" };
	static const char *const opn[] = { "Conv", "FusedConv", "MatMul", "Gemm", "FusedMatMul",
					   "FusedGemm" };
	bool fused = oc->op == OP_FCONV || oc->op == OP_FMATMUL || oc->op == OP_FGEMM;
	int nin = oc->op == OP_MATMUL ? 2 : resid ? 4 : 3;
	int nd = ml_graph_add_node(g, opn[oc->op], fused ? "ml" : "", "", nin, in, 1, outn, &e);
	if (nd < 0)
		goto out;
	if (conv) {
		ml_node_set_ints(g, nd, "kernel_shape", 2, (int64_t[]){ oc->k, oc->k });
		ml_node_set_ints(g, nd, "strides", 2, (int64_t[]){ oc->s, oc->s });
		ml_node_set_ints(g, nd, "pads", 4, (int64_t[]){ oc->p, oc->p, oc->p, oc->p });
		ml_node_set_int(g, nd, "group", oc->group);
	}
	if (oc->op == OP_GEMM || oc->op == OP_FGEMM)
		ml_node_set_int(g, nd, "transB", 1);
	if (fused && oc->relu)
		ml_node_set_string(g, nd, "activation", "Relu");
	ml_graph_add_output(g, ml_graph_find(g, "y"), &e);
	if (ml_graph_toposort(g, &e) < 0 || ml_graph_validate(g, &e) < 0 ||
	    ml_graph_infer(g, &e) < 0 || ml_session_new(&ss, g, NULL, &e) < 0 ||
	    ml_tval_alloc(&x, ML_F32, (int)xr, xd, &e) < 0 ||
	    (resid && ml_tval_alloc(&z, ML_F32, (int)xr, zd, &e) < 0))
		goto out;
	float *xv = x.data, *zv = z.data;
	for (int64_t i = 0; i < ml_tval_numel(&x); i++)
		xv[i] = frand();
	for (int64_t i = 0; resid && i < ml_tval_numel(&z); i++)
		zv[i] = frand();
	if (ml_session_set_input(ss, "x", &x, &e) < 0 ||
	    (resid && ml_session_set_input(ss, "z", &z, &e) < 0))
		goto out;
	/* twice: the second run takes the weight from the node's cache */
	for (int run = 0; run < 2; run++) {
		if (ml_session_run(ss, &e) < 0)
			goto out;
		const struct ml_tval *y = ml_session_output(ss, 0);
		if (y->dtype != ML_F32 || ml_tval_numel(y) != oc->n * oc->m * OH * OW)
			goto out;
		const float *yv = y->data;
		good = true;
		for (int64_t n = 0; n < oc->n; n++)
		for (int64_t m = 0; m < oc->m; m++)
		for (int64_t oh = 0; oh < OH; oh++)
		for (int64_t ow = 0; ow < OW; ow++) {
			double s = oc->op == OP_MATMUL ? 0 : b[m], mag = fabs(s);
			if (conv) {
				int64_t g0 = m / (oc->m / oc->group) * cg;
				for (int64_t c = 0; c < cg; c++)
				for (int64_t kh = 0; kh < oc->k; kh++)
				for (int64_t kw = 0; kw < oc->k; kw++) {
					int64_t ih = oh * oc->s - oc->p + kh, iw = ow * oc->s - oc->p + kw;
					if (ih < 0 || ih >= oc->h || iw < 0 || iw >= oc->w)
						continue;
					float xx = xv[((n * oc->c + g0 + c) * oc->h + ih) * oc->w + iw];
					double t = (double)ml_bf16_to_f32(w[((m * cg + c) * oc->k + kh) *
									     oc->k + kw]) *
						   (round_x ? rbf(xx) : xx);
					s += t;
					mag += fabs(t);
				}
			} else {
				for (int64_t c = 0; c < oc->c; c++) {
					float xx = xv[n * oc->c + c];
					bool tb = oc->op == OP_GEMM || oc->op == OP_FGEMM;
					uint16_t wv = tb ? w[m * oc->c + c] : w[c * oc->m + m];
					double t = (double)ml_bf16_to_f32(wv) * (round_x ? rbf(xx) : xx);
					s += t;
					mag += fabs(t);
				}
			}
			int64_t at = ((n * oc->m + m) * OH + oh) * OW + ow;
			if (resid) {
				s += zv[at];
				mag += fabs(zv[at]);
			}
			if (fused && oc->relu && s < 0)
				s = 0;
			if (!(fabs(yv[at] - s) <= 1e-5 * mag + 1e-6)) {
				if (!quiet)
					printf("# at %lld: %.9g, want %.9g\n", (long long)at, yv[at], s);
				good = false;
				goto out;
			}
		}
	}
out:
	if (!good && !quiet && e.msg[0] != '\0')
		printf("# %s\n", e.msg);
	ml_session_free(ss);
	ml_graph_free(g);
	ml_tval_clear(&x);
	ml_tval_clear(&z);
	free(w);
	free(b);
	return good;
}

static const struct opcase opcases[] = {
	/* op, n, c, h, w, m, k, s, p, group, relu */
	{ OP_CONV, 1, 16, 9, 11, 20, 3, 1, 1, 1, false },	/* K = 144 */
	{ OP_CONV, 2, 3, 17, 15, 13, 7, 2, 3, 1, false },	/* K = 147, odd; the first layer */
	{ OP_CONV, 1, 33, 8, 8, 70, 1, 1, 0, 1, false },	/* pointwise, K odd */
	{ OP_CONV, 1, 300, 6, 5, 25, 3, 2, 1, 1, false },	/* K = 2700: several k blocks */
	{ OP_CONV, 1, 12, 7, 7, 18, 3, 1, 1, 3, false },	/* grouped */
	{ OP_CONV, 1, 8, 9, 9, 8, 3, 1, 1, 8, false },		/* depthwise: the fallback */
	{ OP_CONV, 1, 64, 40, 41, 24, 3, 1, 1, 1, false },	/* two column tiles */
	{ OP_CONV, 1, 5, 23, 29, 7, 5, 2, 2, 1, false },	/* K = 125, stride 2, odd widths */
	{ OP_CONV, 1, 4, 11, 10, 6, 3, 3, 1, 1, false },	/* column stride 3: im2col_rows */
	/* stems of stride 2: nn_direct.c's kernel on pairs of taps (ml_direct_conv_bf16) */
	{ OP_FCONV, 1, 3, 21, 47, 16, 3, 2, 0, 1, true },	/* SqueezeNet's, residual, Relu */
	{ OP_CONV, 1, 1, 12, 37, 8, 5, 2, 2, 1, false },	/* one channel, 3 pairs a row */
	{ OP_CONV, 2, 4, 9, 70, 12, 7, 2, 3, 1, false },	/* 35 columns: blocks of 32 and 3 */
	/* small planes, many channels: positions as the GEMM's rows */
	{ OP_CONV, 1, 64, 7, 7, 128, 3, 1, 1, 1, false },
	{ OP_CONV, 2, 16, 9, 9, 128, 3, 1, 1, 1, false },
	{ OP_FCONV, 1, 33, 14, 13, 160, 3, 2, 1, 1, true },
	{ OP_CONV, 1, 40, 7, 7, 192, 1, 1, 0, 1, false },	/* pointwise */
	{ OP_FCONV, 1, 24, 10, 10, 40, 3, 1, 1, 1, true },
	{ OP_FCONV, 1, 9, 6, 6, 13, 1, 1, 0, 1, false },
	{ OP_MATMUL, 1, 512, 0, 0, 1000, 0, 0, 0, 0, false },	/* batch-1 classifier */
	{ OP_MATMUL, 13, 77, 0, 0, 33, 0, 0, 0, 0, false },
	{ OP_GEMM, 3, 129, 0, 0, 70, 0, 0, 0, 0, false },
	{ OP_FMATMUL, 25, 64, 0, 0, 45, 0, 0, 0, 0, true },
	{ OP_FGEMM, 2, 100, 0, 0, 37, 0, 0, 0, 0, true },
};
#define NOPCASES ((int)(sizeof opcases / sizeof opcases[0]))

static void
op_name(const struct opcase *oc, char *buf, size_t n)
{
	static const char *const opn[] = { "Conv", "FusedConv", "MatMul", "Gemm", "FusedMatMul",
					   "FusedGemm" };
	if (oc->op == OP_CONV || oc->op == OP_FCONV)
		snprintf(buf, n, "%s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] s%lld p%lld g%lld%s",
			 opn[oc->op], (long long)oc->n, (long long)oc->c, (long long)oc->h,
			 (long long)oc->w, (long long)oc->m, (long long)(oc->c / oc->group),
			 (long long)oc->k, (long long)oc->k, (long long)oc->s, (long long)oc->p,
			 (long long)oc->group, oc->relu ? " relu" : "");
	else
		snprintf(buf, n, "%s [%lld,%lld] x [%lld,%lld]%s", opn[oc->op], (long long)oc->n,
			 (long long)oc->c, (long long)oc->c, (long long)oc->m,
			 oc->relu ? " relu" : "");
}

int
main(void)
{
	static const int64_t shapes[][3] = {
		{ 1, 1, 1 }, { 3, 5, 7 }, { 12, 32, 2 }, { 13, 33, 3 }, { 64, 64, 147 },
		{ 65, 100, 9 }, { 7, 1000, 512 }, { 100, 40, 577 }, { 25, 70, 1 },
		/* AMX's edges: blocks of 32 rows, tiles of 16, k in steps of 32 */
		{ 32, 64, 64 }, { 16, 32, 32 }, { 17, 31, 33 }, { 31, 96, 31 }, { 48, 33, 96 },
		{ 96, 64, 1152 }, { 33, 65, 63 },
	};
	int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
	static const enum ml_bf16_path paths[] = { ML_BF16_AMX, ML_BF16_DP, ML_BF16_F32 };
	int npaths = (int)(sizeof paths / sizeof paths[0]);
	char what[200], name[160];

	/* the forced fallback, in a child forked before any pool thread exists */
	pid_t pid = fork();
	if (pid == 0) {
		setenv("ML_BF16", "f32", 1);
		quiet = true;
		bool forced = ml_bf16_path() == ML_BF16_F32;
		for (int i = 0; i < NOPCASES; i++)
			ok(op_case(&opcases[i], false), "");
		_exit(forced && nfail == 0 ? 0 : 1);
	}
	int st = 0;
	bool waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	/* ML_BF16=dp and ML_AMX=0 keep an AMX machine on vdpbf16ps */
	bool dp_ok = ml_bf16_path_ok(ML_BF16_DP);
	int st2[2] = { 1, 1 };
	for (int e = 0; e < 2; e++) {
		pid_t p2 = fork();
		if (p2 == 0) {
			setenv(e == 0 ? "ML_BF16" : "ML_AMX", e == 0 ? "dp" : "0", 1);
			_exit(ml_bf16_path() == (dp_ok ? ML_BF16_DP : ML_BF16_F32) ? 0 : 1);
		}
		int w = 0;
		if (p2 > 0 && waitpid(p2, &w, 0) == p2 && WIFEXITED(w))
			st2[e] = WEXITSTATUS(w);
	}

	printf("1..%d\n", npaths * (nshapes * 3 + 2 + NOPCASES) + 3);
	for (int pi = 0; pi < npaths; pi++) {
		enum ml_bf16_path p = paths[pi];
		bool have = ml_bf16_set_path(p);
		for (int s = 0; s < nshapes; s++)
			for (int f = 0; f < 2; f++) {
				snprintf(what, sizeof what, "%s gemm %lldx%lldx%lld%s",
					 ml_bf16_path_name(p), (long long)shapes[s][0],
					 (long long)shapes[s][1], (long long)shapes[s][2],
					 f ? " B transposed, bias" : "");
				if (!have) {
					printf("ok %d - %s # SKIP this CPU lacks %s\n", ++ntest, what,
					       ml_bf16_path_name(p));
					continue;
				}
				ok(gemm_case(shapes[s][0], shapes[s][1], shapes[s][2], f, f), what);
			}
		for (int s2 = 0; s2 < nshapes; s2++) {
			bool ta = s2 & 1, tb = (s2 >> 1) & 1, beta = s2 % 3 == 0;
			snprintf(what, sizeof what, "%s f32 operands rounded: %s%lldx%lldx%lld%s%s",
				 ml_bf16_path_name(p), p == ML_BF16_F32 ? "(= ml_sgemm of the rounded) " : "",
				 (long long)shapes[s2][0], (long long)shapes[s2][1],
				 (long long)shapes[s2][2], ta ? " A^T" : "", tb ? " B^T" : "");
			if (beta)
				snprintf(what + strlen(what), sizeof what - strlen(what), ", beta 1");
			if (!have)
				printf("ok %d - %s # SKIP this CPU lacks %s\n", ++ntest, what,
				       ml_bf16_path_name(p));
			else
				ok(sgemm_case(shapes[s2][0], shapes[s2][1], shapes[s2][2], ta, tb, beta,
					      p == ML_BF16_F32), what);
		}
		for (int t = 0; t < 2; t++) {
			int64_t n = t == 0 ? 32 : 77;
			snprintf(what, sizeof what, "%s packing rounds as ml_f32_to_bf16 (%lld columns)",
				 ml_bf16_path_name(p), (long long)n);
			if (!have)
				printf("ok %d - %s # SKIP this CPU lacks %s\n", ++ntest, what,
				       ml_bf16_path_name(p));
			else
				ok(pack_case(n), what);
		}
		for (int i = 0; i < NOPCASES; i++) {
			op_name(&opcases[i], name, sizeof name);
			snprintf(what, sizeof what, "%s %s", ml_bf16_path_name(p), name);
			if (!have)
				printf("ok %d - %s # SKIP this CPU lacks %s\n", ++ntest, what,
				       ml_bf16_path_name(p));
			else
				/* depthwise (one channel a group, groups > 1) runs on f32 activations */
				ok(op_case(&opcases[i], p >= ML_BF16_DP &&
					   !(opcases[i].group == opcases[i].c && opcases[i].group > 1)),
				   what);
		}
	}
	ok(waited && WEXITSTATUS(st) == 0,
	   "ML_BF16=f32 forces the fallback, whose op results match the reference");
	ok(st2[0] == 0, "ML_BF16=dp chooses vdpbf16ps over AMX");
	ok(st2[1] == 0, "ML_AMX=0 keeps the bf16 products off AMX");
	return nfail > 0;
}
