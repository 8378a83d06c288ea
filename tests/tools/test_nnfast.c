/*
 * test_nnfast.c: C tests of the CPU fast paths against naive references:
 * the thread pool (every index of every job runs exactly once, whether
 * the workers are spinning or asleep, and nested calls run inline), the
 * packed SGEMM of lib/cpu/nn_gemm.c (odd sizes, k past one k block, bias,
 * accumulate, batches, 1 and 2 threads; the AVX-512 kernel and, in a
 * child process with ML_PGEMM=avx2, the AVX2 one), the 2-D f32 MaxPool
 * (strides 1 to 3, pads, dilation, ceil_mode) and 3x3 Conv (Winograd over
 * several tile groups and runs of filters, its transforms AVX-512, AVX2
 * (ML_WINOGRAD=avx2) and portable (ML_WINOGRAD=c), and im2col; also
 * through BLAS in a child with ML_PGEMM=0; batches folded into the GEMMs, and
 * image by image with ML_CONV_FOLD=0; the direct kernel for few input
 * channels, AVX-512, AVX2 and portable; the flat kernel for 3x3 on small
 * planes, AVX-512, AVX2 (ML_PGEMM=avx2), portable (ML_CONV_FLAT=c) and
 * off; MaxPool's AVX-512 kernel and, with ML_MAXPOOL=avx2 and =c, the
 * AVX2 and portable ones), each through a one-node graph, and the
 * kernels' scratch lent from the arena's free room (ml_cpu_scratch_lend).
 * Prints TAP.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ml.h"
#include "cpu/nn.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
	fflush(stdout);
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

/* The thread pool. */
struct pjob {
	int64_t n;
	unsigned char *hits;
	atomic_int bad;
	atomic_int nested;
};

static void
nested_fn(void *ctx, int64_t b, int64_t e)
{
	struct pjob *j = ctx;
	for (int64_t i = b; i < e; i++)
		atomic_fetch_add(&j->nested, 1);
}

static void
pjob_fn(void *ctx, int64_t b, int64_t e)
{
	struct pjob *j = ctx;

	if (b < 0 || e > j->n || b >= e)
		atomic_store(&j->bad, 1);
	for (int64_t i = b; i < e && i < j->n; i++)
		j->hits[i]++;
	if (b == 0) {
		/* inline inside a job; a job of its own when the outer one ran inline */
		struct pjob in = { .n = 10 };
		ml_parallel_for(10, 1, nested_fn, &in);
		if (atomic_load(&in.nested) != 10)
			atomic_store(&j->bad, 1);
	}
}

/* which thread ran each index (slow enough that the workers take chunks) */
struct tjob {
	int n;
	atomic_int count;
	pthread_t who[64];
};

static void
tjob_fn(void *ctx, int64_t b, int64_t e)
{
	struct tjob *t = ctx;
	for (int64_t i = b; i < e; i++) {
		volatile float x = 1;
		for (int k = 0; k < 2000; k++)
			x = x * 1.0001f;
		t->who[i] = pthread_self();
		atomic_fetch_add(&t->count, 1);
	}
}

static void
test_pool(void)
{
	unsigned char *hits = malloc(20000);
	bool good = true;
	int jobs = 0;

	ml_set_threads(3);
	for (int r = 0; r < 400; r++) {
		int64_t n = 1 + (r * 7919) % 20000, grain = 1 + (r * 31) % 3000;
		struct pjob j = { .n = n, .hits = hits };
		memset(hits, 0, (size_t)n);
		ml_parallel_for(n, grain, pjob_fn, &j);
		for (int64_t i = 0; i < n; i++)
			if (hits[i] != 1)
				good = false;
		if (atomic_load(&j.bad))
			good = false;
		jobs++;
		if (r % 40 == 39) {
			/* long enough for the workers to stop spinning and sleep */
			struct timespec ts = { 0, 3 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
	}
	free(hits);
	ok(good && jobs == 400, "thread pool: 400 jobs, each index once, with sleeps between some");

	/* fewer threads than workers started: the workers beyond the count sit the jobs out */
	ml_set_threads(2);
	int most = 0;
	good = true;
	for (int r = 0; r < 200; r++) {
		struct tjob t = { .n = 64 };
		ml_parallel_for(t.n, 1, tjob_fn, &t);
		int distinct = 0;
		for (int i = 0; i < t.n; i++) {
			bool seen = false;
			for (int k = 0; k < i; k++)
				seen = seen || pthread_equal(t.who[k], t.who[i]);
			distinct += !seen;
		}
		most = distinct > most ? distinct : most;
		good = good && atomic_load(&t.count) == t.n;
	}
	char what[160];
	snprintf(what, sizeof what, "thread pool: 3 threads then 2: each job on at most 2 threads "
		 "(at most %d seen in 200 jobs)", most);
	ok(good && most >= 1 && most <= 2, what);
}

/* each index: a subnormal product of normal operands, or zero where they are flushed */
struct dnjob {
	volatile float a, b;
	float out[4096];
};

static void
dn_fn(void *ctx, int64_t b, int64_t e)
{
	struct dnjob *j = ctx;
	for (int64_t i = b; i < e; i++)
		j->out[i] = j->a * j->b * (float)(1 + i % 2);
	/* slow enough that the workers take chunks too */
	struct timespec ts = { 0, 20 * 1000 };
	nanosleep(&ts, NULL);
}

/* how many of the job's results are subnormal (not flushed) */
static int
dn_count(void)
{
	static struct dnjob j;
	int sub = 0;
	j.a = 1e-20f;
	j.b = 1e-20f;
	ml_parallel_for(4096, 64, dn_fn, &j);
	for (int i = 0; i < 4096; i++)
		sub += j.out[i] != 0;
	return sub;
}

static void
test_denormals(void)
{
	ml_set_threads(3);
	int keep = dn_count();
	ml_set_flush_denormals(true);
	int flush = dn_count();
	volatile float tiny = 1e-40f, one = 1;
	volatile float daz = tiny * one;	/* a subnormal operand reads as zero */
	ml_set_flush_denormals(false);
	int back = dn_count();
	char what[200];
	snprintf(what, sizeof what,
		 "ml_set_flush_denormals: the caller and the workers flush subnormals and stop again "
		 "(subnormal products: %d before, %d flushing, %d after; 1e-40 * 1 = %g)", keep, flush, back, (double)daz);
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
	ok(keep == 4096 && flush == 0 && back == 4096 && daz == 0, what);
#else
	ok(keep == 4096 && back == 4096, what);	/* no mode to set here */
	(void)daz;
#endif
	ml_set_threads(2);
}

/* ml_pgemm against a double-precision reference. */
static int
gemm_case(int64_t nb, int64_t m, int64_t n, int64_t k, bool bias, bool acc)
{
	int64_t lda = k + 3, ldc = n + 5, plen = ml_pgemm_packed_len(k, n);
	float *a = malloc(sizeof(float) * (size_t)(nb * m * lda));
	float *bp = aligned_alloc(64, sizeof(float) * (size_t)(nb * plen + 16));
	float *b = malloc(sizeof(float) * (size_t)(nb * k * n));
	float *c = malloc(sizeof(float) * (size_t)(nb * m * ldc));
	float *c0 = malloc(sizeof(float) * (size_t)(nb * m * ldc));
	float *bs = malloc(sizeof(float) * (size_t)m);
	int bad = 0;

	for (int64_t i = 0; i < nb * m * lda; i++)
		a[i] = frand();
	for (int64_t i = 0; i < nb * k * n; i++)
		b[i] = frand();
	for (int64_t i = 0; i < nb * plen; i++)
		bp[i] = NAN;	/* the last panel's spare columns must not leak in */
	for (int64_t bi = 0; bi < nb; bi++)
		for (int64_t p = 0; p < k; p++)
			for (int64_t jj = 0; jj < n; jj++)
				bp[bi * plen + jj / ML_PG_NR * ML_PG_NR * k + p * ML_PG_NR +
				   jj % ML_PG_NR] = b[(bi * k + p) * n + jj];
	for (int64_t i = 0; i < m; i++)
		bs[i] = frand();
	for (int64_t i = 0; i < nb * m * ldc; i++)
		c[i] = c0[i] = frand();
	ml_pgemm_batch(nb, m, n, k, a, lda, m * lda, bp, plen, bias ? bs : NULL, c, ldc, m * ldc,
		       acc);
	for (int64_t bi = 0; bi < nb; bi++)
		for (int64_t i = 0; i < m; i++) {
			for (int64_t jj = 0; jj < n; jj++) {
				double s = acc ? c0[(bi * m + i) * ldc + jj] : bias ? bs[i] : 0;
				double mag = fabs(s);
				for (int64_t p = 0; p < k; p++) {
					double t = (double)a[(bi * m + i) * lda + p] *
						   b[(bi * k + p) * n + jj];
					s += t;
					mag += fabs(t);
				}
				float got = c[(bi * m + i) * ldc + jj];
				if (!(fabs(got - s) <= 1e-5 * (mag + 1)))
					bad++;
			}
			/* the padding between rows of C stays untouched */
			for (int64_t jj = n; jj < ldc; jj++)
				if (c[(bi * m + i) * ldc + jj] != c0[(bi * m + i) * ldc + jj])
					bad++;
		}
	free(a);
	free(bp);
	free(b);
	free(c);
	free(c0);
	free(bs);
	return bad;
}

/* gemm_all: every case on 1 and 2 threads; the number of cases that failed. */
static int
gemm_all(int *ncase)
{
	static const int64_t ms[] = { 1, 5, 12, 13, 37, 100, 200 };
	static const int64_t ns[] = { 1, 17, 32, 33, 49, 100, 196 };
	static const int64_t ks[] = { 1, 7, 256, 300 };
	int fails = 0;

	*ncase = 0;
	for (int th = 1; th <= 2; th++) {
		ml_set_threads(th);
		for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
			for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
				for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
					int v = (int)(mi + ni + ki);
					(*ncase)++;
					fails += gemm_case(1, ms[mi], ns[ni], ks[ki], v % 2 == 0,
							   v % 3 == 0) != 0;
				}
		(*ncase) += 2;
		fails += gemm_case(3, 29, 70, 40, true, false) != 0;
		fails += gemm_case(36, 64, 16, 64, false, false) != 0;
	}
	return fails;
}

/* pool_avg: maxpool_case makes an AveragePool instead (dil must be 1), compared within 1e-6 */
static bool pool_avg;
/* maxpool_case's input with a NaN every 7 values: a NaN never wins (the reference's 'x > m') */
static bool pool_nan;

/* input4: an f32 graph input NAME of the 4 dims d */
static void
input4(struct ml_graph *g, const char *name, const int64_t d[4], struct ml_err *e)
{
	int t = ml_graph_tensor(g, name);
	g->tensors[t]->dtype = ML_F32;
	g->tensors[t]->rank = 4;
	g->tensors[t]->kind = ML_TK_INPUT;
	memcpy(g->tensors[t]->dims, d, sizeof(int64_t) * 4);
	ml_graph_add_input(g, t, e);
}

/* A graph with one MaxPool node, run on x [2, 3, H, W]; compared with a naive loop. */
static bool
maxpool_case(int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t dil, int ceil)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	struct ml_session *ss = NULL;
	int64_t xd[4] = { 2, 3, H, W };
	struct ml_tval x = { 0 };
	bool good = false;

	if (ml_graph_new(&g, &e) < 0 || ml_graph_set_opset(g, "", 13, &e) < 0)
		goto out;
	input4(g, "x", xd, &e);
	const char *in[] = { "x" }, *outn[] = { "y" };
	int nd = ml_graph_add_node(g, pool_avg ? "AveragePool" : "MaxPool", "", "", 1, in, 1, outn,
				   &e);
	ml_node_set_ints(g, nd, "kernel_shape", 2, (int64_t[]){ k, k });
	ml_node_set_ints(g, nd, "strides", 2, (int64_t[]){ s, s });
	ml_node_set_ints(g, nd, "pads", 4, (int64_t[]){ pad, pad, pad, pad });
	if (!pool_avg)
		ml_node_set_ints(g, nd, "dilations", 2, (int64_t[]){ dil, dil });
	ml_node_set_int(g, nd, "ceil_mode", ceil);
	ml_graph_add_output(g, ml_graph_find(g, "y"), &e);
	if (ml_graph_toposort(g, &e) < 0 || ml_graph_validate(g, &e) < 0 ||
	    ml_graph_infer(g, &e) < 0 || ml_session_new(&ss, g, NULL, &e) < 0 ||
	    ml_tval_alloc(&x, ML_F32, 4, xd, &e) < 0)
		goto out;
	float *xv = x.data;
	for (int64_t i = 0; i < ml_tval_numel(&x); i++)
		xv[i] = !pool_nan ? frand() : i % 7 == 3 ? NAN : frand();
	if (ml_session_set_input(ss, "x", &x, &e) < 0 || ml_session_run(ss, &e) < 0)
		goto out;
	const struct ml_tval *y = ml_session_output(ss, 0);
	int64_t ek = (k - 1) * dil + 1, span = H + 2 * pad - ek;
	int64_t OH = ceil ? (span + s - 1) / s + 1 : span / s + 1;
	span = W + 2 * pad - ek;
	int64_t OW = ceil ? (span + s - 1) / s + 1 : span / s + 1;
	/* ONNX: a ceil_mode window must start inside the input or left padding */
	if (ceil && (OH - 1) * s >= H + pad)
		OH--;
	if (ceil && (OW - 1) * s >= W + pad)
		OW--;
	if (y->rank != 4 || y->dims[2] != OH || y->dims[3] != OW)
		goto out;
	good = true;
	for (int64_t pl = 0; pl < 6; pl++)
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				float m = -INFINITY;
				double sum = 0;
				int cnt = 0;
				for (int64_t kh = 0; kh < k; kh++)
					for (int64_t kw = 0; kw < k; kw++) {
						int64_t ih = oh * s - pad + kh * dil;
						int64_t iw = ow * s - pad + kw * dil;
						if (ih < 0 || ih >= H || iw < 0 || iw >= W)
							continue;
						sum += xv[(pl * H + ih) * W + iw];
						cnt++;
						if (xv[(pl * H + ih) * W + iw] > m)
							m = xv[(pl * H + ih) * W + iw];
					}
				float got = ((const float *)y->data)[(pl * OH + oh) * OW + ow];
				if (pool_avg ? fabs(got - sum / cnt) > 1e-6 * (fabs(sum / cnt) + 1) :
					       memcmp(&got, &m, sizeof m) != 0)
					good = false;
			}
out:
	ml_tval_clear(&x);
	ml_session_free(ss);
	ml_graph_free(g);
	return good;
}

/*
 * A graph with one KxK Conv (stride s, pads p, bias, conv_groups groups),
 * run on random x [N, C, H, W] and weights; compared with a
 * double-precision direct convolution. The shapes below reach Winograd
 * F(4x4, 3x3), over several groups of tiles (across images too) and runs
 * of filters, the implicit GEMM, and im2col with the batch folded into the
 * GEMM's columns, tiles that span images included.
 */
/* conv_case's Concat of conv_room copies of y after the Conv: arena room while the Conv runs */
static int conv_room;
/* conv_nks's groups (C: depthwise) */
static int64_t conv_groups = 1;
/* conv_nks's weights as a graph input, not a constant (no kernel may cache what it derives) */
static bool conv_w_in;
/* conv_nks as a FusedConv with a residual z (a graph input) and Relu */
static bool conv_fused;

static bool
conv_nks(int64_t N, int64_t C, int64_t M, int64_t H, int64_t W, int64_t K, int64_t s, int64_t p)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	struct ml_session *ss = NULL;
	int64_t G = conv_groups, CG = C / G;
	int64_t xd[4] = { N, C, H, W }, wd[4] = { M, CG, K, K }, bd[1] = { M };
	struct ml_tval x = { 0 }, wt = { 0 }, zt = { 0 };
	int64_t KK = K * K;
	int64_t OH = (H + 2 * p - K) / s + 1, OW = (W + 2 * p - K) / s + 1;
	int64_t zd[4] = { N, M, OH, OW };
	float *w = malloc(sizeof(float) * (size_t)(M * CG * KK)), *b = malloc(sizeof(float) * (size_t)M);
	bool good = false;

	for (int64_t i = 0; i < M * CG * KK; i++)
		w[i] = frand();
	for (int64_t i = 0; i < M; i++)
		b[i] = frand();
	if (ml_graph_new(&g, &e) < 0 || ml_graph_set_opset(g, "", 13, &e) < 0)
		goto out;
	input4(g, "x", xd, &e);
	if (conv_w_in)
		input4(g, "w", wd, &e);
	else
		ml_graph_set_data(g, ml_graph_tensor(g, "w"), ML_TK_CONST, ML_F32, 4, wd, w,
				  sizeof(float) * (size_t)(M * CG * KK), &e);
	ml_graph_set_data(g, ml_graph_tensor(g, "b"), ML_TK_CONST, ML_F32, 1, bd, b,
			  sizeof(float) * (size_t)M, &e);
	if (conv_fused)
		input4(g, "z", zd, &e);
	const char *in[] = { "x", "w", "b", "z" }, *outn[] = { "y" };
	int nd = ml_graph_add_node(g, conv_fused ? "FusedConv" : "Conv", conv_fused ? "ml" : "", "",
				   conv_fused ? 4 : 3, in, 1, outn, &e);
	if (conv_fused)
		ml_node_set_string(g, nd, "activation", "Relu");
	ml_node_set_ints(g, nd, "kernel_shape", 2, (int64_t[]){ K, K });
	ml_node_set_ints(g, nd, "strides", 2, (int64_t[]){ s, s });
	ml_node_set_ints(g, nd, "pads", 4, (int64_t[]){ p, p, p, p });
	ml_node_set_int(g, nd, "group", G);
	ml_graph_add_output(g, ml_graph_find(g, "y"), &e);
	if (conv_room > 0) {
		const char *cin[64], *cout[] = { "z" };
		for (int i = 0; i < conv_room && i < 64; i++)
			cin[i] = "y";
		int cn = ml_graph_add_node(g, "Concat", "", "", ML_MIN(conv_room, 64), cin, 1, cout,
					   &e);
		ml_node_set_int(g, cn, "axis", 1);
		ml_graph_add_output(g, ml_graph_find(g, "z"), &e);
	}
	if (ml_graph_toposort(g, &e) < 0 || ml_graph_validate(g, &e) < 0 ||
	    ml_graph_infer(g, &e) < 0 || ml_session_new(&ss, g, NULL, &e) < 0 ||
	    ml_tval_alloc(&x, ML_F32, 4, xd, &e) < 0)
		goto out;
	float *xv = x.data;
	for (int64_t i = 0; i < ml_tval_numel(&x); i++)
		xv[i] = frand();
	if (conv_w_in) {
		if (ml_tval_alloc(&wt, ML_F32, 4, wd, &e) < 0)
			goto out;
		memcpy(wt.data, w, sizeof(float) * (size_t)(M * CG * KK));
		if (ml_session_set_input(ss, "w", &wt, &e) < 0)
			goto out;
	}
	if (conv_fused) {
		if (ml_tval_alloc(&zt, ML_F32, 4, zd, &e) < 0)
			goto out;
		for (int64_t i = 0; i < ml_tval_numel(&zt); i++)
			((float *)zt.data)[i] = frand();
		if (ml_session_set_input(ss, "z", &zt, &e) < 0)
			goto out;
	}
	/* twice: a kernel's cache, made by the first run, serves the second */
	if (ml_session_set_input(ss, "x", &x, &e) < 0 || ml_session_run(ss, &e) < 0 ||
	    ml_session_run(ss, &e) < 0)
		goto out;
	const struct ml_tval *y = ml_session_output(ss, 0);
	if (y->rank != 4 || y->dims[0] != N || y->dims[1] != M || y->dims[2] != OH ||
	    y->dims[3] != OW)
		goto out;
	good = true;
	for (int64_t n = 0; n < N; n++)
	for (int64_t m = 0; m < M; m++)
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				double sum = b[m], mag = fabs(b[m]);
				for (int64_t c = m / (M / G) * CG; c < (m / (M / G) + 1) * CG; c++)
					for (int64_t kh = 0; kh < K; kh++)
						for (int64_t kw = 0; kw < K; kw++) {
							int64_t ih = oh * s - p + kh, iw = ow * s - p + kw;
							if (ih < 0 || ih >= H || iw < 0 || iw >= W)
								continue;
							double t = (double)w[((m * CG + c % CG) * K + kh) * K + kw] *
								   xv[((n * C + c) * H + ih) * W + iw];
							sum += t;
							mag += fabs(t);
						}
				int64_t at = ((n * M + m) * OH + oh) * OW + ow;
				if (conv_fused) {
					sum += ((const float *)zt.data)[at];
					mag += fabs(((const float *)zt.data)[at]);
					sum = sum > 0 ? sum : 0;
				}
				float got = ((const float *)y->data)[at];
				if (!(fabs(got - sum) <= 1e-5 * mag + 1e-6))
					good = false;
			}
out:
	free(w);
	free(b);
	ml_tval_clear(&x);
	ml_tval_clear(&wt);
	ml_tval_clear(&zt);
	ml_session_free(ss);
	ml_graph_free(g);
	return good;
}

/*
 * wino_cases: Winograd where a tile group's filters split into runs (few
 * groups for the threads: 32 tiles over two images, 70 filters), and with
 * the weights a graph input (transformed per run, never cached).
 */
static bool
wino_cases(void)
{
	bool good = conv_nks(2, 48, 70, 14, 14, 3, 1, 1) && conv_nks(1, 40, 30, 17, 9, 3, 1, 1);
	conv_w_in = true;
	good = good && conv_nks(2, 48, 70, 14, 14, 3, 1, 1) && conv_nks(1, 24, 16, 30, 30, 3, 1, 1);
	conv_w_in = false;
	return good;
}

/*
 * narrow_cases: pointwise convolutions of planes of 16 positions or fewer
 * (ml_pgemm_narrow, AVX-512 or AVX2: X's rows read in place at 4x4, copied
 * into rows of 16 at 2x3), and a 3x3 one on 2x2 (the implicit GEMM's 6
 * columns).
 */
static bool
narrow_cases(void)
{
	return conv_nks(1, 300, 40, 4, 4, 1, 1, 0) && conv_nks(2, 200, 50, 2, 3, 1, 1, 0) &&
	       conv_nks(3, 130, 26, 2, 2, 3, 1, 1);
}

/*
 * pw_cases: pointwise convolutions of one image on planes of 17 to 3025
 * positions (fused_mm.c's fpw_whole: each thread packs X for itself, then
 * one SGEMM over the pool): DenseNet's 256 -> 128 on 16x16, 70 outputs
 * (row blocks of 12 and a short one) on 8x8, SqueezeNet's 13x13 (a
 * partial panel); constant weights and weights as an input.
 */
static bool
pw_cases(void)
{
	bool good = true;
	for (int k = 0; k < 2 && good; k++) {
		conv_w_in = k == 1;
		good = conv_nks(1, 256, 128, 16, 16, 1, 1, 0) && conv_nks(1, 240, 70, 8, 8, 1, 1, 0) &&
		       conv_nks(1, 128, 64, 13, 13, 1, 1, 0);
	}
	conv_w_in = false;
	/*
	 * planes of 1024 positions and more (fused_mm.c's fpw_rows where AVX2
	 * or ML_CONV_PWROWS=1: X's rows read in place, the last columns copied):
	 * SqueezeNet's 55x55 squeeze and expand (a tail of 17 columns), 32x32
	 * (no tail), 33x41 into 70 outputs (row blocks of 6 and a short one);
	 * with FusedConv's residual and Relu too
	 */
	for (int k = 0; k < 3 && good; k++) {
		conv_w_in = k == 1;
		conv_fused = k == 2;
		good = conv_nks(1, 128, 16, 55, 55, 1, 1, 0) && conv_nks(1, 16, 64, 55, 55, 1, 1, 0) &&
		       conv_nks(1, 40, 24, 32, 32, 1, 1, 0) && conv_nks(1, 33, 70, 33, 41, 1, 1, 0);
	}
	conv_w_in = false;
	conv_fused = false;
	return good;
}

/*
 * rows_cases: outputs of 8 positions or fewer in all (nn_conv.c's
 * conv_rows: positions as the product's rows against W^T packed once):
 * DenseNet's 1x1 1024 -> 128 and 3x3 128 -> 32 on 2x2, two images of 1x2,
 * a stride-2 3x3 down to 2x2, eight 1x1 images, 70 outputs (a partial
 * panel) on 3x2; with constant weights (the cached panels) and weights as
 * an input (the other kernels).
 */
static bool
rows_cases(void)
{
	bool good = true;
	for (int k = 0; k < 2 && good; k++) {
		conv_w_in = k == 1;
		good = conv_nks(1, 1024, 128, 2, 2, 1, 1, 0) && conv_nks(1, 128, 32, 2, 2, 3, 1, 1) &&
		       conv_nks(2, 200, 50, 1, 2, 1, 1, 0) && conv_nks(1, 64, 40, 4, 4, 3, 2, 1) &&
		       conv_nks(8, 30, 20, 1, 1, 1, 1, 0) && conv_nks(1, 20, 70, 3, 2, 3, 1, 1);
	}
	conv_w_in = false;
	return good;
}

/*
 * dw_cases: depthwise convolutions (nn_conv.c's row and flat kernels):
 * MobileNet's 3x3 stride 1 and 2 on 112 and 56 wide planes, EfficientNet's
 * 5x5, ConvNeXt's 7x7 pad 3, odd widths, small planes, no padding, a
 * channel multiplier of 2, and a batch.
 */
static bool
dw_cases(void)
{
	bool good = true;
	const int64_t c[][8] = { { 1, 32, 32, 112, 112, 3, 1, 1 }, { 1, 24, 24, 112, 112, 3, 2, 1 },
				 { 2, 16, 16, 37, 41, 3, 1, 1 }, { 1, 16, 16, 37, 41, 3, 2, 1 },
				 { 1, 24, 24, 29, 29, 5, 1, 2 }, { 1, 24, 24, 29, 30, 5, 2, 2 },
				 { 1, 16, 16, 14, 14, 7, 1, 3 }, { 1, 8, 8, 7, 7, 7, 2, 3 },
				 { 1, 16, 16, 7, 7, 3, 1, 1 }, { 1, 8, 8, 2, 3, 3, 2, 1 },
				 { 1, 8, 8, 20, 70, 3, 1, 0 }, { 1, 8, 16, 19, 19, 3, 2, 1 } };
	for (size_t i = 0; i < sizeof c / sizeof c[0] && good; i++) {
		conv_groups = c[i][1];
		good = conv_nks(c[i][0], c[i][1], c[i][2], c[i][3], c[i][4], c[i][5], c[i][6], c[i][7]);
		if (!good)
			printf("# depthwise case %zu wrong\n", i);
	}
	conv_groups = 1;
	return good;
}

/* conv_case: a 3x3 stride-1 Conv of one image. */
static bool
conv_case(int64_t C, int64_t M, int64_t H, int64_t W, int64_t p)
{
	return conv_nks(1, C, M, H, W, 3, 1, p);
}

/*
 * Batches: Winograd with tile groups across images (14x14 planes, 16
 * tiles each; 7x7, 4 each), the implicit GEMM with all images in one
 * product (5x5 windows on 7x7, 3x3 stride 2 on 25x25) and one image a
 * product (256 channels of 64x64, stride 2), a 1x1 stride-2 convolution
 * (ResNet's downsample), 1x1 stride-1 ones (MobileNet's projections,
 * through fused_mm.c's kernel when large) and a 7x7 stride-2 one with 3
 * input channels (the first layer). With ML_CONV_FLAT=0 the same shapes
 * go through im2col, tiles that span images included.
 */
static bool
conv_batch_cases(void)
{
	return conv_nks(3, 32, 40, 14, 14, 3, 1, 1) && conv_nks(8, 64, 36, 7, 7, 3, 1, 1) &&
	       conv_nks(8, 64, 36, 7, 7, 5, 1, 2) &&
	       conv_nks(8, 300, 30, 25, 25, 3, 2, 1) && conv_nks(4, 48, 64, 14, 14, 1, 2, 0) &&
	       conv_nks(8, 144, 24, 28, 28, 1, 1, 0) && conv_nks(3, 40, 24, 9, 11, 1, 1, 0) &&
	       conv_nks(3, 3, 16, 37, 37, 7, 2, 3) && conv_nks(2, 256, 8, 64, 64, 3, 2, 1);
}

/*
 * Few input channels (nn_direct.c): 7x7 s2 (ResNet's first layer), 3x3 s2
 * unpadded with channels left over from the blocks of 8 (SqueezeNet's),
 * 5x5 s1 on one channel, 3x3 s3 on 4 channels, rows wider than a block;
 * rows that the AVX-512 kernel cuts into blocks of 48, 32 and 16 columns:
 * 112 (ResNet's: 48 + 32 + 32), 111 (SqueezeNet's), 100 (48 + 32 + 20),
 * 49 (32 + 17), 47 and 16; stride-2 inputs narrower than the 16 columns
 * that the AVX-512 phase split loads, padded on both sides (11 and 5 wide);
 * and conv_direct_fused's FusedConvs.
 */
/*
 * conv_direct_fused: FusedConv's residual and Relu through the direct
 * kernels: ResNet's rows (112: the AVX2 kernel's 4 x 24 + 16), SqueezeNet's
 * (111) with a channel block half full, and a 5x5 window
 */
static bool
conv_direct_fused(void)
{
	conv_fused = true;
	bool good = conv_nks(1, 3, 16, 9, 224, 7, 2, 3) && conv_nks(1, 3, 12, 5, 223, 3, 2, 0) &&
		    conv_nks(1, 2, 9, 6, 100, 5, 1, 2);
	conv_fused = false;
	return good;
}

static bool
conv_direct_cases(void)
{
	return conv_nks(2, 3, 64, 37, 37, 7, 2, 3) && conv_nks(2, 3, 10, 20, 23, 3, 2, 0) &&
	       conv_nks(1, 1, 12, 15, 40, 5, 1, 2) && conv_nks(3, 4, 8, 9, 70, 3, 3, 1) &&
	       conv_nks(1, 3, 16, 9, 224, 7, 2, 3) && conv_nks(1, 3, 12, 5, 223, 3, 2, 0) &&
	       conv_nks(2, 2, 9, 6, 100, 5, 1, 2) && conv_nks(1, 3, 8, 7, 49, 3, 1, 1) &&
	       conv_nks(1, 4, 8, 6, 94, 3, 2, 0) && conv_nks(1, 3, 8, 5, 16, 3, 1, 1) &&
	       conv_nks(1, 3, 8, 9, 11, 7, 2, 3) && conv_nks(2, 2, 8, 5, 5, 3, 2, 2) &&
	       conv_direct_fused();
}

/*
 * 3x3 stride-1 pad-1 on small planes (nn_flat.c's implicit GEMM): DenseNet's
 * 128 -> 32 on 16x16, 8x8, 4x4, 2x2, a 1x1 plane, output channels not a
 * multiple of 16 on a narrow plane, a batch, non-square planes, 30x30, one
 * with 8 channels, and ResNet's 512 -> 512 on 7x7 (the filter past the L2).
 * Each with constant weights and with weights as an input.
 */
static bool
conv_flat_cases(void)
{
	bool good = true;
	for (int k = 0; k < 2 && good; k++) {
		conv_w_in = k == 1;
		good = conv_nks(1, 128, 32, 16, 16, 3, 1, 1) && conv_nks(1, 128, 32, 8, 8, 3, 1, 1) &&
		       conv_nks(1, 64, 32, 4, 4, 3, 1, 1) && conv_nks(1, 40, 16, 2, 2, 3, 1, 1) &&
		       conv_nks(1, 20, 16, 1, 1, 3, 1, 1) && conv_nks(2, 24, 24, 4, 7, 3, 1, 1) &&
		       conv_nks(1, 16, 48, 13, 5, 3, 1, 1) && conv_nks(1, 9, 8, 30, 30, 3, 1, 1) &&
		       conv_nks(3, 8, 40, 7, 7, 3, 1, 1) && conv_nks(1, 512, 512, 7, 7, 3, 1, 1);
		/*
		 * nn_tflat.c's (positions as rows, where AVX-512 or AVX2): channel counts
		 * that are not multiples of 16, 5x5, no padding, two panels of
		 * channels, rows wider than 16, batches
		 */
		good = good && conv_nks(1, 17, 20, 9, 11, 3, 1, 1) &&
		       conv_nks(2, 32, 64, 6, 5, 5, 1, 2) && conv_nks(1, 16, 40, 16, 16, 3, 1, 0) &&
		       conv_nks(1, 24, 48, 12, 20, 3, 1, 1) && conv_nks(3, 33, 7, 4, 4, 3, 1, 1);
	}
	conv_w_in = false;
	/* with FusedConv's residual and Relu */
	conv_fused = true;
	good = good && conv_nks(1, 128, 32, 8, 8, 3, 1, 1) && conv_nks(2, 17, 20, 9, 11, 3, 1, 1) &&
	       conv_nks(1, 64, 32, 16, 16, 3, 1, 1) && conv_nks(1, 9, 8, 30, 30, 3, 1, 1);
	conv_fused = false;
	return good;
}

static void
test_conv(void)
{
	ok(conv_flat_cases(), "Conv on small planes (implicit GEMM, positions as rows "
			      "for few channels), Conv and FusedConv");
	ok(rows_cases(), "Conv of 8 output positions or fewer: positions as rows, W^T packed once");
	ok(conv_batch_cases(), "Conv batches: Winograd and im2col over several images");
	ok(conv_direct_cases(), "Conv with few input channels (direct kernel)");
	ok(conv_case(16, 20, 24, 24, 1), "Conv 3x3 16->20 on 24x24 (Winograd, one group)");
	ok(conv_case(16, 24, 10, 130, 1), "Conv 3x3 16->24 on 10x130 (Winograd, tile groups across tile rows)");
	ok(conv_case(256, 40, 23, 25, 1), "Conv 3x3 256->40 on 23x25 (Winograd, 256 channels)");
	ok(conv_case(130, 50, 30, 29, 0), "Conv 3x3 130->50 on 30x29, no pads (Winograd, partial tiles)");
	ok(wino_cases(), "Conv 3x3 by Winograd: filters split across threads, weights not constant");
	ok(narrow_cases(), "Conv on planes of 16 positions or fewer (narrow GEMM where AVX-512)");
	ok(pw_cases(), "pointwise Conv of one image on planes of 17 to 3025 positions");
	ok(dw_cases(), "depthwise Conv: 3x3, 5x5, 7x7, strides 1 and 2, edges, multiplier 2");
	ok(conv_case(8, 5, 9, 7, 1), "Conv 3x3 8->5 on 9x7 (im2col)");
}

/*
 * The scratch loan (ml_cpu_scratch_lend): blocks come from the lent memory,
 * 64-byte aligned and apart per slot, a slot's block is reused while it is
 * large enough, what does not fit comes from the heap, and a new loan
 * starts over. Then Winograd in a session whose plan leaves only some
 * arena room at the Conv, and too little (its buffers then come from the
 * heap). Run in a child, whose heap blocks start empty.
 */
static bool
loan_case(void)
{
	static uint8_t mem[65536 + 64];
	uint8_t *base = mem + 8, *end = mem + 8 + 65536;
	bool good = true;
	ml_cpu_scratch_lend(base, 65536);
	uint8_t *a = ml_cpu_scratch(0, 1000), *b = ml_cpu_scratch(1, 2000);
	good &= a >= base && a + 1000 <= end && ((uintptr_t)a & 63) == 0;
	good &= b >= a + 1000 && b + 2000 <= end && ((uintptr_t)b & 63) == 0;
	good &= ml_cpu_scratch(0, 900) == a;
	int sl[2] = { 2, 2 };
	size_t big[2] = { 100000, 100 }, small[2] = { 60000, 100 };
	good &= !ml_cpu_scratch_fits(1, sl, big) && ml_cpu_scratch_fits(1, sl, small);
	uint8_t *c = ml_cpu_scratch(2, 100000);
	good &= c != NULL && (c + 100000 <= base || c >= end);
	good &= ml_cpu_scratch_fits(1, sl, big);	/* the heap block is there now */
	ml_cpu_scratch_lend(base, 65536);
	good &= ml_cpu_scratch(1, 100) == a;
	ml_cpu_scratch_lend(NULL, 0);
	uint8_t *d = ml_cpu_scratch(0, 100);
	good &= d != NULL && (d + 100 <= base || d >= end);
	if (!good)
		return false;
	/* y is 40 x 23 x 25 floats, 92 KB: room for 20 copies, then for 2 */
	conv_room = 20;
	good = conv_case(256, 40, 23, 25, 1) && conv_case(64, 64, 56, 56, 1);
	conv_room = 2;
	good = good && conv_case(256, 40, 23, 25, 1);
	conv_room = 0;
	return good;
}

/* NaN in the input: the same bits as the reference's 'x > m' (a window of NaN alone: -inf) */
static bool
maxpool_nan_cases(void)
{
	pool_nan = true;
	bool good = maxpool_case(55, 55, 3, 2, 0, 1, 1) && maxpool_case(40, 37, 3, 1, 1, 1, 0) &&
		    maxpool_case(28, 28, 2, 2, 0, 1, 0);
	pool_nan = false;
	return good;
}

/* The shapes of the AVX-512 MaxPool kernel (strides 1 and 2 across, edges, ceil_mode). */
static bool
maxpool_simd_cases(void)
{
	return maxpool_case(55, 55, 3, 2, 0, 1, 1) && maxpool_case(112, 112, 3, 2, 1, 1, 0) &&
	       maxpool_case(40, 37, 3, 1, 1, 1, 0) && maxpool_case(13, 70, 5, 2, 2, 1, 1) &&
	       maxpool_case(11, 37, 2, 2, 0, 1, 1) && maxpool_case(9, 33, 4, 1, 0, 2, 0) &&
	       maxpool_nan_cases();
}

static void
test_maxpool(void)
{
	ok(maxpool_simd_cases(), "MaxPool 3x3 s2 ceil_mode on 55x55 (SqueezeNet's), s1, 5x5 s2, edges");
	ok(maxpool_case(112, 112, 3, 2, 1, 1, 0), "MaxPool 3x3 s2 p1 on 112x112 (ResNet's)");
	ok(maxpool_case(11, 13, 3, 2, 1, 1, 0), "MaxPool 3x3 s2 p1 on 11x13");
	ok(maxpool_case(9, 10, 2, 1, 0, 1, 0), "MaxPool 2x2 s1 on 9x10");
	ok(maxpool_case(17, 19, 3, 3, 1, 1, 1), "MaxPool 3x3 s3 p1 ceil_mode on 17x19");
	ok(maxpool_case(15, 16, 3, 1, 2, 2, 0), "MaxPool 3x3 s1 p2 dilation 2 on 15x16");
	ok(maxpool_case(3, 2, 3, 2, 1, 1, 0), "MaxPool 3x3 s2 p1 on 3x2 (no interior window)");
	ok(maxpool_case(28, 28, 2, 2, 0, 1, 0), "MaxPool 2x2 s2 on 28x28 (LeNet's, the 2x2 kernel)");
	ok(maxpool_case(10, 10, 2, 2, 0, 1, 0), "MaxPool 2x2 s2 on 10x10");
	ok(maxpool_case(11, 37, 2, 2, 0, 1, 0), "MaxPool 2x2 s2 on 11x37 (odd: the last row and column unread)");
	ok(maxpool_case(11, 37, 2, 2, 0, 1, 1), "MaxPool 2x2 s2 ceil_mode on 11x37 (edge windows: not the 2x2 kernel)");
	ok(maxpool_case(12, 12, 2, 2, 1, 1, 0), "MaxPool 2x2 s2 p1 on 12x12 (padded: not the 2x2 kernel)");
	pool_avg = true;
	ok(maxpool_case(16, 16, 2, 2, 0, 1, 0) && maxpool_case(11, 37, 2, 2, 0, 1, 0),
	   "AveragePool 2x2 s2 on 16x16 and 11x37 (DenseNet's transitions: the 2x2 kernel)");
	ok(maxpool_case(11, 37, 2, 2, 0, 1, 1) && maxpool_case(12, 12, 2, 2, 1, 1, 0) &&
	   maxpool_case(13, 9, 3, 2, 1, 1, 0),
	   "AveragePool 2x2 s2 with ceil_mode or padding, 3x3 s2 p1 (the general loop)");
	pool_avg = false;
}

int
main(void)
{
	int n = 0, fails;

	/* the AVX2 kernel, in a child forked before any pool thread exists */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("ML_PGEMM", "avx2", 1);
		setenv("ML_CONV_TFLAT", "avx2", 1);
		if (!ml_pgemm_ok())
			_exit(77);
		_exit(gemm_all(&n) == 0 && conv_batch_cases() && narrow_cases() &&
		      conv_flat_cases() && rows_cases() && pw_cases() ? 0 : 1);
	}
	int st = 0;
	bool waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	if (waited && WEXITSTATUS(st) == 77)
		printf("ok %d - packed SGEMM, AVX2 kernel # SKIP no AVX2 and FMA\n", ++ntest);
	else
		ok(waited && WEXITSTATUS(st) == 0, "packed SGEMM, Conv batches and the implicit GEMM, AVX2 kernel and copies (ML_PGEMM=avx2, ML_CONV_TFLAT=avx2)");
	/* the BLAS path (im2col's; Winograd needs the packed SGEMM), in a child with ML_PGEMM=0 */
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		setenv("ML_PGEMM", "0", 1);
		_exit(conv_case(16, 24, 10, 130, 1) && conv_case(256, 40, 23, 25, 1) &&
		      conv_case(8, 5, 9, 7, 1) && conv_batch_cases() ? 0 : 1);
	}
	waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	ok(waited && WEXITSTATUS(st) == 0, "Conv through BLAS (ML_PGEMM=0): im2col, no Winograd");
	/* Winograd's AVX2 and portable transforms (ML_WINOGRAD=avx2, c) */
	for (int k = 0; k < 2; k++) {
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			setenv("ML_WINOGRAD", k == 0 ? "avx2" : "c", 1);
			_exit(conv_case(16, 24, 10, 130, 1) && conv_case(256, 40, 23, 25, 1) &&
			      conv_case(130, 50, 30, 29, 0) && wino_cases() && conv_batch_cases() ? 0 :
												    1);
		}
		waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
		ok(waited && WEXITSTATUS(st) == 0,
		   k == 0 ? "Conv by Winograd, AVX2 transforms (ML_WINOGRAD=avx2)" :
			    "Conv by Winograd, portable transforms (ML_WINOGRAD=c)");
	}
	/* one image at a time (ML_CONV_FOLD=0), and im2col for every 3x3 (ML_WINOGRAD=0) */
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		setenv("ML_CONV_FOLD", "0", 1);
		setenv("ML_WINOGRAD", "0", 1);
		_exit(conv_batch_cases() ? 0 : 1);
	}
	waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	ok(waited && WEXITSTATUS(st) == 0,
	   "Conv batches image by image (ML_CONV_FOLD=0) and without Winograd (ML_WINOGRAD=0)");
	/* the same tiny outputs through the other kernels (ML_CONV_ROWS=0) */
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		setenv("ML_CONV_ROWS", "0", 1);
		_exit(rows_cases() ? 0 : 1);
	}
	waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	ok(waited && WEXITSTATUS(st) == 0, "Conv of tiny outputs without conv_rows (ML_CONV_ROWS=0)");
	/* the portable and AVX2 MaxPool kernels (ML_MAXPOOL=c, avx2) */
	for (int k = 0; k < 2; k++) {
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			setenv("ML_MAXPOOL", k == 0 ? "c" : "avx2", 1);
			_exit(maxpool_simd_cases() ? 0 : 1);
		}
		waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
		ok(waited && WEXITSTATUS(st) == 0, k == 0 ? "MaxPool, portable kernel (ML_MAXPOOL=c)" :
							    "MaxPool, AVX2 kernel (ML_MAXPOOL=avx2)");
	}
	/* the portable flat kernel (ML_CONV_FLAT=c), and im2col instead (ML_CONV_FLAT=0) */
	for (int k = 0; k < 2; k++) {
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			setenv("ML_CONV_FLAT", k == 0 ? "c" : "0", 1);
			setenv("ML_CONV_TFLAT", "0", 1);
			_exit(conv_flat_cases() && conv_batch_cases() ? 0 : 1);
		}
		waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
		ok(waited && WEXITSTATUS(st) == 0,
		   k == 0 ? "Conv, implicit GEMM's portable loop (ML_CONV_FLAT=c): 3x3, 5x5, stride 2, batches" :
			    "Conv through im2col (ML_CONV_FLAT=0): 3x3, 5x5, stride 2, batches");
	}
	/* large pointwise planes through the tiles of packed X, and X's rows in place */
	for (int k = 0; k < 2; k++) {
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			setenv("ML_CONV_PWROWS", k == 0 ? "0" : "1", 1);
			_exit(pw_cases() ? 0 : 1);
		}
		waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
		ok(waited && WEXITSTATUS(st) == 0,
		   k == 0 ? "pointwise Conv on large planes, tiles of packed X (ML_CONV_PWROWS=0)" :
			    "pointwise Conv on large planes, X's rows in place (ML_CONV_PWROWS=1)");
	}
	/* the implicit GEMM's AVX-512 kernel where the transposed one would run (ML_CONV_TFLAT=0) */
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		setenv("ML_CONV_TFLAT", "0", 1);
		_exit(conv_flat_cases() ? 0 : 1);
	}
	waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	ok(waited && WEXITSTATUS(st) == 0,
	   "Conv on small planes, implicit GEMM with the channels as rows (ML_CONV_TFLAT=0)");
	/*
	 * the portable and AVX2 direct kernels (ML_CONV_DIRECT=c, avx2), the
	 * input rows copied per output row (rows), im2col instead (0)
	 */
	for (int k = 0; k < 4; k++) {
		static const char *const lv[] = { "c", "avx2", "0", "rows" };
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			setenv("ML_CONV_DIRECT", lv[k], 1);
			_exit(conv_direct_cases() ? 0 : 1);
		}
		waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
		ok(waited && WEXITSTATUS(st) == 0,
		   k == 0 ? "Conv with few input channels, portable kernel (ML_CONV_DIRECT=c)" :
		   k == 1 ? "Conv with few input channels, AVX2 kernel (ML_CONV_DIRECT=avx2)" :
		   k == 2 ? "Conv with few input channels through im2col (ML_CONV_DIRECT=0)" :
			    "Conv with few input channels, input rows per output row (ML_CONV_DIRECT=rows)");
	}
	if (ml_pgemm_ok()) {
		fails = gemm_all(&n);
		char what[128];
		snprintf(what, sizeof what, "packed SGEMM, default kernel: %d of %d cases wrong", fails,
			 n);
		ok(fails == 0, what);
	} else {
		printf("ok %d - packed SGEMM # SKIP no AVX-512 or AVX2\n", ++ntest);
	}
	/* the scratch loan, in a child whose heap scratch blocks start empty */
	fflush(stdout);
	pid = fork();
	if (pid == 0)
		_exit(loan_case() ? 0 : 1);
	waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	ok(waited && WEXITSTATUS(st) == 0,
	   "scratch from the arena's free room: blocks, heap fallback, Winograd in less room");
	test_pool();
	test_denormals();
	test_maxpool();
	test_conv();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
