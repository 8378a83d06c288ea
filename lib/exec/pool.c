/*
 * pool.c: the thread pool kernels split loops over. Workers sleep on a
 * condition variable between jobs; the calling thread takes a share of
 * every job. OpenBLAS gets the same thread count and is only called from
 * the calling thread while the workers sleep, so the two never run more
 * threads than cores between them.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "ml_impl.h"

/* OpenBLAS's own entry point, declared here so only lib/cpu includes cblas.h */
void openblas_set_num_threads(int n);

#define MAX_THREADS 256

static struct {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	int nthreads;		/* total, the caller included */
	int started;		/* worker threads running */
	uint64_t gen;		/* job generation */
	/* the current job */
	void (*fn)(void *, int64_t, int64_t);
	void *ctx;
	int64_t n, chunk;
	atomic_long next;	/* next chunk index */
	int64_t nchunks;
	int active;		/* workers still in the job */
} P = { .mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER,
	.done = PTHREAD_COND_INITIALIZER };

static _Thread_local bool in_pool;

static void
run_chunks(void)
{
	for (;;) {
		long c = atomic_fetch_add(&P.next, 1);
		if (c >= P.nchunks)
			break;
		int64_t b = c * P.chunk, e = ML_MIN(P.n, b + P.chunk);
		P.fn(P.ctx, b, e);
	}
}

static void *
worker(void *arg)
{
	uint64_t seen = 0;
	(void)arg;
	in_pool = true;
	pthread_mutex_lock(&P.mu);
	for (;;) {
		while (P.gen == seen)
			pthread_cond_wait(&P.go, &P.mu);
		seen = P.gen;
		pthread_mutex_unlock(&P.mu);
		run_chunks();
		pthread_mutex_lock(&P.mu);
		if (--P.active == 0)
			pthread_cond_signal(&P.done);
	}
	return NULL;
}

static int
ncores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

void
ml_set_threads(int n)
{
	if (n <= 0)
		n = ncores();
	if (n > MAX_THREADS)
		n = MAX_THREADS;
	pthread_mutex_lock(&P.mu);
	P.nthreads = n;
	pthread_mutex_unlock(&P.mu);
	openblas_set_num_threads(n);
}

int
ml_get_threads(void)
{
	if (P.nthreads == 0)
		ml_set_threads(0);
	return P.nthreads;
}

void
ml_parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t b, int64_t e), void *ctx)
{
	if (n <= 0)
		return;
	if (grain < 1)
		grain = 1;
	int nt = ml_get_threads();
	int64_t want = (n + grain - 1) / grain;
	if (nt <= 1 || want <= 1 || in_pool) {
		fn(ctx, 0, n);
		return;
	}
	if (want > nt)
		want = nt;
	pthread_mutex_lock(&P.mu);
	/* workers are started lazily and never stopped; extra ones just sleep */
	while (P.started < nt - 1) {
		pthread_t th;
		if (pthread_create(&th, NULL, worker, NULL) != 0)
			break;
		pthread_detach(th);
		P.started++;
	}
	int workers = ML_MIN(P.started, (int)want - 1);
	if (workers <= 0) {
		pthread_mutex_unlock(&P.mu);
		fn(ctx, 0, n);
		return;
	}
	P.fn = fn;
	P.ctx = ctx;
	P.n = n;
	P.chunk = (n + want - 1) / want;
	P.nchunks = (n + P.chunk - 1) / P.chunk;
	atomic_store(&P.next, 0);
	P.active = P.started;
	P.gen++;
	pthread_cond_broadcast(&P.go);
	pthread_mutex_unlock(&P.mu);
	in_pool = true;
	run_chunks();
	in_pool = false;
	pthread_mutex_lock(&P.mu);
	while (P.active > 0)
		pthread_cond_wait(&P.done, &P.mu);
	pthread_mutex_unlock(&P.mu);
}
