/*
 * fmapeak.c: the machine's fp32 FMA peak, measured: each of T threads runs
 * independent chains of fused multiply-adds on the widest vectors the
 * compiler was told it may use (-march=native), enough chains to hide the
 * FMA latency on two pipes. Prints GFLOP/s (2 per FMA per lane) for T
 * threads. Built and run by tests/bench/bench.py for ResNet-18's fraction
 * of peak; never part of the library.
 * Usage: fmapeak [THREADS [SECONDS]]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__AVX512F__)
#include <immintrin.h>
typedef __m512 vec;
#define LANES 16
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SET1(x) _mm512_set1_ps(x)
#define HSUM(v) _mm512_reduce_add_ps(v)
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
typedef __m256 vec;
#define LANES 8
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SET1(x) _mm256_set1_ps(x)
static float
HSUM(__m256 v)
{
	float t[8];
	_mm256_storeu_ps(t, v);
	return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#else
typedef float vec;
#define LANES 1
#define FMA(a, b, c) ((a) * (b) + (c))
#define SET1(x) (x)
#define HSUM(v) (v)
#endif

#define CHAINS 12
#define INNER 1000

struct job {
	double secs;
	double fmas;
	float sink;
};

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *
work(void *arg)
{
	struct job *j = arg;
	/* named accumulators: an array would live on the stack at -O2 */
	vec a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4), a5 = SET1(5);
	vec a6 = SET1(6), a7 = SET1(7), a8 = SET1(8), a9 = SET1(9), a10 = SET1(10), a11 = SET1(11);
	vec m = SET1(0.999999f), a = SET1(1e-7f);
	double t0 = now(), n = 0;

	do {
		for (int i = 0; i < INNER; i++) {
			a0 = FMA(a0, m, a), a1 = FMA(a1, m, a), a2 = FMA(a2, m, a);
			a3 = FMA(a3, m, a), a4 = FMA(a4, m, a), a5 = FMA(a5, m, a);
			a6 = FMA(a6, m, a), a7 = FMA(a7, m, a), a8 = FMA(a8, m, a);
			a9 = FMA(a9, m, a), a10 = FMA(a10, m, a), a11 = FMA(a11, m, a);
		}
		n += (double)INNER * CHAINS;
	} while (now() - t0 < j->secs);
	j->fmas = n;
	j->secs = now() - t0;
	j->sink = HSUM(a0) + HSUM(a1) + HSUM(a2) + HSUM(a3) + HSUM(a4) + HSUM(a5) + HSUM(a6) +
		HSUM(a7) + HSUM(a8) + HSUM(a9) + HSUM(a10) + HSUM(a11);
	return NULL;
}

int
main(int argc, char **argv)
{
	int t, nt = argc > 1 ? atoi(argv[1]) : 1;
	double secs = argc > 2 ? atof(argv[2]) : 0.5, flops = 0, wall = 0;
	pthread_t th[256];
	struct job j[256];

	if (nt < 1 || nt > 256 || secs <= 0) {
		fprintf(stderr, "usage: fmapeak [THREADS [SECONDS]]\n");
		return 2;
	}
	for (t = 0; t < nt; t++) {
		j[t].secs = secs;
		if (pthread_create(&th[t], NULL, work, &j[t]) != 0) {
			fprintf(stderr, "fmapeak: cannot start a thread\n");
			return 1;
		}
	}
	for (t = 0; t < nt; t++) {
		pthread_join(th[t], NULL);
		flops += 2.0 * LANES * j[t].fmas;
		wall = j[t].secs > wall ? j[t].secs : wall;
	}
	printf("%.1f %d %s\n", flops / wall * 1e-9, LANES, j[0].sink == 12345.0f ? "!" : "");
	return 0;
}
