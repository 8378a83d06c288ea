/*
 * clgemm_bench.c: SGEMM throughput of the library's OpenCL GEMM
 * (mlcl_sgemm), of CLBlast on the same device (libclblast.so, loaded with
 * dlopen so nothing links it; left out when it is missing) and of OpenBLAS
 * on the CPU, row-major C = A * B, for each size given. Prints one line per
 * (implementation, size): "gemm IMPL MxNxK best=G median=G runs=R
 * maxrelerr=E cpu=G" in GFLOP/s (cpu: GFLOP per CPU-second of the process,
 * less sensitive to other load), checking each result against OpenBLAS's.
 * Used by tests/bench/bench_clgemm.py.
 * Usage: clgemm_bench [-cp] [-r RUNS] [-d DEVICE] [-x clblast,openblas] SIZE...
 *        -p also prints the times of the kernels of one profiled run;
 *        -c also times mlcl_conv2d on ResNet-18 and MobileNet-V2 layers.
 *        SIZE is N (N x N x N) or MxNxK, with a final T for a transposed
 *        B (N x K, as Gemm's weights).
 * IMPL "ml" is mlcl_sgemm on our kernels (ML_CL_GEMM=own), "auto" is
 * mlcl_sgemm with the engine the library chooses (ML_CL_GEMM as set, by
 * default the measured choice), "clblast" CLBlastSgemm called directly.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#ifdef ML_NO_OPENCL
/* a build without OpenCL (make OPENCL=0): exit 4, as for no device */
int
main(void)
{
	fprintf(stderr, "clgemm_bench: built without OpenCL\n");
	return 4;
}
#else
#include "cl/cl.h"

typedef int (*clblast_sgemm_fn)(int layout, int ta, int tb, size_t m, size_t n, size_t k,
				float alpha, cl_mem a, size_t aoff, size_t lda, cl_mem b,
				size_t boff, size_t ldb, float beta, cl_mem c, size_t coff,
				size_t ldc, cl_command_queue *q, cl_event *ev);

static double
now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* the CPU time of the process, all threads, so that a loaded machine can be told apart */
static double
cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/*
 * report: best and median over the runs' wall times t, and the GFLOP per
 * CPU-second (cpu: the process's CPU time over all runs), which other load
 * on the machine changes less than the wall time.
 */
static void
report(const char *impl, long m, long n, long k, bool tb, double *t, int runs, double cpu,
       double err)
{
	qsort(t, (size_t)runs, sizeof *t, cmp);
	double fl = 2.0 * (double)m * (double)n * (double)k * 1e-9;
	double med = runs % 2 ? t[runs / 2] : (t[runs / 2 - 1] + t[runs / 2]) / 2;
	printf("gemm %s %ldx%ldx%ld%s best=%.2f median=%.2f runs=%d maxrelerr=%.2g cpu=%.2f\n",
	       impl, m, n, k, tb ? "T" : "", fl / t[0], fl / med, runs, err, fl * runs / cpu);
	fflush(stdout);
}

static double
relerr(const float *got, const float *want, size_t n)
{
	double mx = 0, worst = 0;
	for (size_t i = 0; i < n; i++)
		if (fabs(want[i]) > mx)
			mx = fabs(want[i]);
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - want[i]) / (mx > 0 ? mx : 1);
		if (!(d <= worst))
			worst = d;
	}
	return worst;
}

/* print the kernel times of one profiled convolution */
static void
profile_conv(struct mlcl_dev *d, const struct mlcl_conv *p, cl_mem x, cl_mem w, cl_mem b, cl_mem y)
{
	struct ml_err e = { 0 };
	cl_event *evs = NULL;
	int nev = 0;
	mlcl_profile(d, true);
	mlcl_events_take(d, &evs, &nev);
	for (int i = 0; i < nev; i++)
		clReleaseEvent(evs[i]);
	ml_free(evs);
	mlcl_conv2d(d, p, false, x, 0, w, 0, b, 0, y, 0, &e);
	mlcl_finish(d, &e);
	mlcl_events_take(d, &evs, &nev);
	printf("kernels:");
	for (int i = 0; i < nev; i++) {
		double t0 = 0, t1 = 0;
		mlcl_event_times(d, evs[i], &t0, &t1);
		printf(" %.3f ms", (t1 - t0) * 1e3);
		clReleaseEvent(evs[i]);
	}
	printf("\n");
	ml_free(evs);
	mlcl_profile(d, false);
}

/* the convolutions of ResNet-18 and MobileNet-V2 at batch 1, timed like the GEMMs */
static int
conv_bench(struct mlcl_dev *d, int runs, bool prof)
{
	static const struct {
		const char *name;
		int64_t c, hw, m, k, s, g;
	} L[] = {
		{ "resnet-conv1-7x7s2", 3, 224, 64, 7, 2, 1 },
		{ "resnet-3x3-64", 64, 56, 64, 3, 1, 1 },
		{ "resnet-3x3-128", 128, 28, 128, 3, 1, 1 },
		{ "resnet-3x3-256", 256, 14, 256, 3, 1, 1 },
		{ "resnet-3x3-512", 512, 7, 512, 3, 1, 1 },
		{ "mbv2-1x1-144-24", 144, 56, 24, 1, 1, 1 },
		{ "mbv2-dw3x3-144", 144, 56, 144, 3, 1, 144 },
	};
	struct ml_err e = { 0 };
	double *t = malloc((size_t)runs * sizeof *t);
	for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
		int64_t pad = L[i].k / 2, oh, ow;
		struct mlcl_conv p = { .n = 1, .c = L[i].c, .h = L[i].hw, .w = L[i].hw, .m = L[i].m,
				       .kh = L[i].k, .kw = L[i].k, .group = L[i].g,
				       .stride = { L[i].s, L[i].s }, .dil = { 1, 1 },
				       .pad = { pad, pad, pad, pad }, .relu = true };
		if (mlcl_conv_out(&p, &oh, &ow, &e) < 0)
			return 1;
		size_t nx = (size_t)(p.c * p.h * p.w), nw = (size_t)(p.m * p.c / p.group * p.kh * p.kw);
		size_t ny = (size_t)(p.m * oh * ow);
		struct mlcl_buf *x = NULL, *w = NULL, *b = NULL, *y = NULL;
		float *h = calloc(nx > nw ? nx : nw, sizeof(float));
		if (h == NULL || mlcl_buf_get(d, nx * 4, &x, &e) < 0 ||
		    mlcl_buf_get(d, nw * 4, &w, &e) < 0 ||
		    mlcl_buf_get(d, (size_t)p.m * 4, &b, &e) < 0 ||
		    mlcl_buf_get(d, ny * 4, &y, &e) < 0 || mlcl_write(d, x->mem, 0, h, nx * 4, &e) < 0 ||
		    mlcl_write(d, w->mem, 0, h, nw * 4, &e) < 0 ||
		    mlcl_write(d, b->mem, 0, h, (size_t)p.m * 4, &e) < 0) {
			fprintf(stderr, "clgemm_bench: %s\n", e.msg);
			return 1;
		}
		for (int r = -1; r < runs; r++) {
			double t0 = now();
			if (mlcl_conv2d(d, &p, false, x->mem, 0, w->mem, 0, b->mem, 0, y->mem, 0, &e) < 0 ||
			    mlcl_finish(d, &e) < 0) {
				fprintf(stderr, "clgemm_bench: mlcl_conv2d: %s\n", e.msg);
				return 1;
			}
			if (r >= 0)
				t[r] = now() - t0;
		}
		if (prof)
			profile_conv(d, &p, x->mem, w->mem, b->mem, y->mem);
		qsort(t, (size_t)runs, sizeof *t, cmp);
		double fl = 2.0 * (double)ny * (double)(p.c / p.group * p.kh * p.kw) * 1e-9;
		printf("conv %s best=%.2f median=%.2f ms=%.3f\n", L[i].name, fl / t[0],
		       fl / t[runs / 2], t[runs / 2] * 1e3);
		mlcl_buf_put(d, x);
		mlcl_buf_put(d, w);
		mlcl_buf_put(d, b);
		mlcl_buf_put(d, y);
		free(h);
	}
	free(t);
	return 0;
}

/* set_engine: make d's GEMM choose its engine again under ML_CL_GEMM=v (NULL: unset) */
static void
set_engine(struct mlcl_dev *d, const char *v)
{
	if (v != NULL)
		setenv("ML_CL_GEMM", v, 1);
	else
		unsetenv("ML_CL_GEMM");
	mlcl_gemm_engine_forget(d);
}

static int
usage(void)
{
	fprintf(stderr, "usage: clgemm_bench [-cp] [-r runs] [-d device] [-x clblast,openblas] size...\n");
	return 2;
}

int
main(int argc, char **argv)
{
	int runs = 7, devi = 0, opt;
	bool prof = false, conv = false;
	const char *skip = "";
	while ((opt = getopt(argc, argv, "cr:d:x:ph")) != -1) {
		switch (opt) {
		case 'r': runs = atoi(optarg); break;
		case 'd': devi = atoi(optarg); break;
		case 'x': skip = optarg; break;
		case 'p': prof = true; break;
		case 'c': conv = true; break;
		default: return usage();
		}
	}
	if ((optind >= argc && !conv) || runs < 1 || runs > 1000)
		return usage();
	struct ml_err e = { 0 };
	struct mlcl_dev *d = NULL;
	if (mlcl_count(&e) <= devi || mlcl_device(devi, &d, &e) < 0) {
		fprintf(stderr, "clgemm_bench: no OpenCL device %d%s%s\n", devi, e.msg[0] ? ": " : "",
			e.msg);
		return 4;
	}
	printf("device %s (%s), compute units %u\n", d->name, d->driver, d->compute_units);
	const char *ue = getenv("ML_CL_GEMM");
	char *user_engine = ue != NULL ? strdup(ue) : NULL;
	/* the convolutions and the profiled runs are of our kernels */
	set_engine(d, "own");
	clblast_sgemm_fn clblast = NULL;
	if (strstr(skip, "clblast") == NULL) {
		void *h = dlopen("libclblast.so.1", RTLD_NOW);
		if (h == NULL)
			h = dlopen("libclblast.so", RTLD_NOW);
		if (h != NULL)
			*(void **)&clblast = dlsym(h, "CLBlastSgemm");
		if (clblast == NULL)
			printf("clblast: not available (libclblast.so)\n");
	}
	for (int a = optind; a < argc; a++) {
		long m, n, k;
		size_t al = strlen(argv[a]);
		bool tb = al > 0 && argv[a][al - 1] == 'T';
		if (sscanf(argv[a], "%ldx%ldx%ld", &m, &n, &k) != 3) {
			if (sscanf(argv[a], "%ld", &m) != 1)
				return usage();
			n = k = m;
		}
		if (m < 1 || n < 1 || k < 1 || m * n > (1L << 28) || m * k > (1L << 28) ||
		    k * n > (1L << 28))
			return usage();
		float *A = malloc((size_t)(m * k) * 4), *B = malloc((size_t)(k * n) * 4);
		float *C = malloc((size_t)(m * n) * 4), *R = malloc((size_t)(m * n) * 4);
		double *t = malloc((size_t)runs * sizeof *t);
		srand(1);
		for (long i = 0; i < m * k; i++)
			A[i] = (float)rand() / RAND_MAX - 0.5f;
		for (long i = 0; i < k * n; i++)
			B[i] = (float)rand() / RAND_MAX - 0.5f;
		int ldb = tb ? (int)k : (int)n;
		CBLAS_TRANSPOSE cbt = tb ? CblasTrans : CblasNoTrans;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, cbt, (int)m, (int)n, (int)k, 1, A, (int)k,
			    B, ldb, 0, R, (int)n);
		double c0;
		if (strstr(skip, "openblas") == NULL) {
			c0 = cpu_now();
			for (int r = 0; r < runs; r++) {
				double t0 = now();
				cblas_sgemm(CblasRowMajor, CblasNoTrans, cbt, (int)m, (int)n,
					    (int)k, 1, A, (int)k, B, ldb, 0, C, (int)n);
				t[r] = now() - t0;
			}
			report("openblas", m, n, k, tb, t, runs, cpu_now() - c0, 0);
		}
		struct mlcl_buf *dA = NULL, *dB = NULL, *dC = NULL;
		if (mlcl_buf_get(d, (size_t)(m * k) * 4, &dA, &e) < 0 ||
		    mlcl_buf_get(d, (size_t)(k * n) * 4, &dB, &e) < 0 ||
		    mlcl_buf_get(d, (size_t)(m * n) * 4, &dC, &e) < 0 ||
		    mlcl_write(d, dA->mem, 0, A, (size_t)(m * k) * 4, &e) < 0 ||
		    mlcl_write(d, dB->mem, 0, B, (size_t)(k * n) * 4, &e) < 0) {
			fprintf(stderr, "clgemm_bench: %s\n", e.msg);
			return 1;
		}
		/*
		 * One warm-up run each: program builds, CLBlast's kernel compilation
		 * (and for auto, the engine's choice). ml: our kernels; auto: the
		 * engine the library picks (ML_CL_GEMM as the caller set it).
		 */
		for (int pass = 0; pass < 2; pass++) {
			set_engine(d, pass == 0 ? "own" : user_engine);
			c0 = 0;
			for (int r = -1; r < runs; r++) {
				if (r == 0)
					c0 = cpu_now();
				double t0 = now();
				if (mlcl_sgemm(d, false, tb, m, n, k, 1, dA->mem, 0, k, dB->mem, 0,
					       ldb, 0, dC->mem, 0, n, 1, 0, 0, 0, &e) < 0 ||
				    mlcl_finish(d, &e) < 0) {
					fprintf(stderr, "clgemm_bench: mlcl_sgemm: %s\n", e.msg);
					return 1;
				}
				if (r >= 0)
					t[r] = now() - t0;
			}
			mlcl_read(d, dC->mem, 0, C, (size_t)(m * n) * 4, &e);
			report(pass == 0 ? "ml" : "auto", m, n, k, tb, t, runs, cpu_now() - c0,
			       relerr(C, R, (size_t)(m * n)));
			if (pass == 1) {
				char desc[160];
				mlcl_gemm_describe(d, desc, sizeof desc);
				printf("engine %s\n", desc);
			}
		}
		set_engine(d, "own");
		if (prof) {
			/* one more run, profiled: the time of each kernel (packs, GEMM) */
			cl_event *evs = NULL;
			int nev = 0;
			mlcl_profile(d, true);
			mlcl_events_take(d, &evs, &nev);
			for (int i = 0; i < nev; i++)
				clReleaseEvent(evs[i]);
			ml_free(evs);
			mlcl_sgemm(d, false, tb, m, n, k, 1, dA->mem, 0, k, dB->mem, 0, ldb, 0,
				   dC->mem, 0, n, 1, 0, 0, 0, &e);
			mlcl_finish(d, &e);
			mlcl_events_take(d, &evs, &nev);
			printf("kernels:");
			for (int i = 0; i < nev; i++) {
				double t0 = 0, t1 = 0;
				mlcl_event_times(d, evs[i], &t0, &t1);
				printf(" %.3f ms", (t1 - t0) * 1e3);
				clReleaseEvent(evs[i]);
			}
			printf("\n");
			ml_free(evs);
			mlcl_profile(d, false);
		}
		if (clblast != NULL) {
			int st = 0;
			for (int r = -1; r < runs && st == 0; r++) {
				if (r == 0)
					c0 = cpu_now();
				double t0 = now();
				st = clblast(101, 111, tb ? 112 : 111, (size_t)m, (size_t)n,
					     (size_t)k, 1, dA->mem, 0, (size_t)k, dB->mem, 0,
					     (size_t)ldb, 0, dC->mem, 0, (size_t)n, &d->q, NULL);
				clFinish(d->q);
				if (r >= 0)
					t[r] = now() - t0;
			}
			if (st != 0) {
				printf("clblast: CLBlastSgemm failed with status %d\n", st);
			} else {
				mlcl_read(d, dC->mem, 0, C, (size_t)(m * n) * 4, &e);
				report("clblast", m, n, k, tb, t, runs, cpu_now() - c0,
				       relerr(C, R, (size_t)(m * n)));
			}
		}
		mlcl_buf_put(d, dA);
		mlcl_buf_put(d, dB);
		mlcl_buf_put(d, dC);
		free(A);
		free(B);
		free(C);
		free(R);
		free(t);
	}
	return conv ? conv_bench(d, runs, prof) : 0;
}
#endif
