/*
 * pool.c: the CPU device's thread pool, which its kernels split loops
 * over. A job of n items is cut into chunks (up to four per thread), and
 * each thread owns a contiguous run of them: the caller the first, worker
 * 1 the next, and so on. A thread claims its own run's chunks in order
 * from a word in a cache line of its own (the job's generation, the run's
 * end and its next chunk), then takes what is left of the others' runs,
 * so a late or descheduled worker never holds the caller up: the caller
 * runs whatever is left itself and waits only for chunks already claimed.
 *
 * The runs keep the data where it was: the same item range of two
 * consecutive kernels over tensors of one shape (an elementwise chain, a
 * convolution's output and the next op's input) falls to the same thread,
 * whose L2 still holds it. A single ticket for all threads handed chunks
 * out in whatever order the threads came, so half of each tensor moved
 * between the cores' caches from one kernel to the next, and each claim
 * moved the ticket's cache line: a job of 64 blocks of 4096 floats took
 * 19.5 us on 2 threads against 17.5 on 1 (Xeon, 2 cores), and takes 10.1
 * now; an empty job 1.6 us, now 0.4. The kernels order their items so
 * that the runs are alike in work (nn_wino.c's filter runs outermost).
 *
 * Between jobs a worker polls the job generation for a while (ML_SPIN_US),
 * since the next kernel usually follows within microseconds and a
 * condition-variable wake-up costs tens of them, more than a small
 * elementwise kernel; after a few hundred polls it yields the CPU on every
 * poll, so on a machine with more runnable threads than cores it gives
 * way; then it sleeps on a condition variable. The caller waits for the
 * last claimed chunks the same way.
 *
 * OpenBLAS gets the same thread count and is only called from the calling
 * thread, outside jobs (a worker may still be polling then, for at most
 * the spin time). One job runs at a time: a call made while another
 * thread's job runs, or from inside a job, runs inline.
 */
#include <pthread.h>
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "ml_impl.h"

#define MAX_THREADS 256
#define CHUNKS_PER_THREAD 4
/* How long a worker polls for the next job, and the caller for the end of one. */
#define ML_SPIN_US 50
/* Polls with only a pause instruction before each later one also yields. */
#define SPIN_PAUSES 64

typedef void (*ml_pfn)(void *, int64_t, int64_t);

/*
 * A thread's run of chunks: gen << 32 | end << 16 | next. The end rides
 * in the word, so a claim checks it against the same job's generation, and
 * a worker still holding an old generation finds nothing to claim (each
 * finished job left every run with next == end).
 */
struct run {
	_Alignas(64) atomic_uint_fast64_t w;
};
#define RUN_WORD(g, e, c) ((uint_fast64_t)(g) << 32 | (uint_fast64_t)(e) << 16 | (uint_fast64_t)(c))
#define RUN_GEN(w) ((uint32_t)((w) >> 32))
#define RUN_END(w) ((int64_t)((w) >> 16 & 0xffffu))
#define RUN_NEXT(w) ((int64_t)((w) & 0xffffu))

static struct {
	pthread_mutex_t mu;	/* guards the fields below up to the job */
	pthread_mutex_t job;	/* held by the thread whose job runs */
	pthread_cond_t go, done;
	int nthreads;		/* total, the caller included */
	int started;		/* worker threads running, numbered 1 .. started */
	uint32_t gen;		/* the last job's generation (the job owner's) */
	int sleepers;		/* workers waiting on go */
	bool caller_waits;	/* the caller is waiting on done */
	/* the current job: written before its generation is published */
	_Atomic(ml_pfn) fn;
	_Atomic(void *) ctx;
	atomic_llong n, chunk, nchunks;
	atomic_int nruns;		/* threads with a run: the caller and workers 1 .. nruns - 1 */
	_Alignas(64) atomic_uint jobgen;	/* the workers poll it */
	_Alignas(64) atomic_llong finished;	/* chunks run to the end */
	struct run runs[MAX_THREADS];
} P = { .mu = PTHREAD_MUTEX_INITIALIZER, .job = PTHREAD_MUTEX_INITIALIZER,
	.go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER };

static _Thread_local bool in_pool;

/* the denormal mode every pool thread runs in, and the one this thread has set */
static atomic_int flush_dn;
static _Thread_local int flush_set = -1;	/* -1: not set yet (a thread inherits its creator's) */

static void
set_fp_flush(bool on)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned m = _mm_getcsr() & ~0x8040u;	/* FTZ (bit 15), DAZ (bit 6) */
	_mm_setcsr(on ? m | 0x8040u : m);
#elif defined(__aarch64__)
	uint64_t r;
	__asm__ volatile("mrs %0, fpcr" : "=r"(r));
	r = on ? r | (1ull << 24) : r & ~(1ull << 24);
	__asm__ volatile("msr fpcr, %0" : : "r"(r));
#else
	(void)on;
#endif
}

/* sync_fp_mode: this thread into the pool's denormal mode, when it differs */
static inline void
sync_fp_mode(void)
{
	int want = atomic_load_explicit(&flush_dn, memory_order_relaxed);
	if (flush_set != want) {
		set_fp_flush(want != 0);
		flush_set = want;
	}
}

void
ml_set_flush_denormals(bool on)
{
	atomic_store(&flush_dn, on ? 1 : 0);
	sync_fp_mode();
}

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * spin_until: poll done(arg) for about ML_SPIN_US, pausing, then also
 * yielding, between polls; true as soon as it holds, false when the time
 * ran out.
 */
static bool
spin_until(bool (*done)(const void *), const void *arg)
{
	int64_t t0 = 0;

	for (int i = 0;; i++) {
		if (done(arg))
			return true;
		cpu_relax();
		if (i >= SPIN_PAUSES)
			sched_yield();
		if ((i & 15) == 15) {
			int64_t t = now_us();
			if (t0 == 0)
				t0 = t;
			else if (t - t0 > ML_SPIN_US)
				return false;
		}
	}
}

/*
 * claim: the next chunk of run r of job g, or -1 when it has none left
 * (or has moved on to a later job). A successful claim proves job g is
 * still open, so the job's fields read before it are job g's: the caller
 * writes the next job's only once every chunk of this one has finished,
 * and publishes them (release) before its runs.
 */
static int64_t
claim(int r, uint32_t g, ml_pfn *fn, void **ctx, int64_t *n, int64_t *chunk)
{
	uint_fast64_t w = atomic_load_explicit(&P.runs[r].w, memory_order_acquire);
	for (;;) {
		if (RUN_GEN(w) != g || RUN_NEXT(w) >= RUN_END(w))
			return -1;
		*fn = atomic_load_explicit(&P.fn, memory_order_acquire);
		*ctx = atomic_load_explicit(&P.ctx, memory_order_acquire);
		*n = atomic_load_explicit(&P.n, memory_order_acquire);
		*chunk = atomic_load_explicit(&P.chunk, memory_order_acquire);
		if (atomic_compare_exchange_weak(&P.runs[r].w, &w, w + 1))
			return RUN_NEXT(w);
	}
}

/*
 * run_chunks: thread me runs the chunks of job g it can claim, its own
 * run's first, then the others' from the next thread's on; the count is
 * added to finished once, at the end, and the waiting caller woken by
 * whoever finishes the last.
 */
static void
run_chunks(uint32_t g, int me)
{
	int nr = atomic_load_explicit(&P.nruns, memory_order_acquire);
	int64_t done = 0;

	if (nr < 1 || nr > MAX_THREADS)
		return;
	for (int k = 0; k < nr; k++) {
		int r = (me + k) % nr;
		ml_pfn fn;
		void *ctx;
		int64_t n, chunk, c;
		while ((c = claim(r, g, &fn, &ctx, &n, &chunk)) >= 0) {
			fn(ctx, c * chunk, ML_MIN(n, (c + 1) * chunk));
			done++;
		}
	}
	if (done == 0)
		return;
	int64_t nchunks = atomic_load(&P.nchunks);
	if (atomic_fetch_add(&P.finished, done) + done == nchunks) {
		pthread_mutex_lock(&P.mu);
		if (P.caller_waits)
			pthread_cond_signal(&P.done);
		pthread_mutex_unlock(&P.mu);
	}
}

static bool
gen_moved(const void *arg)
{
	return atomic_load_explicit(&P.jobgen, memory_order_acquire) != *(const uint32_t *)arg;
}

static bool
job_over(const void *arg)
{
	(void)arg;
	return atomic_load(&P.finished) == atomic_load(&P.nchunks);
}

static void *
worker(void *arg)
{
	int me = (int)(intptr_t)arg;
	uint32_t seen = 0;

	in_pool = true;
	for (;;) {
		if (!spin_until(gen_moved, &seen)) {
			pthread_mutex_lock(&P.mu);
			P.sleepers++;
			while (!gen_moved(&seen))
				pthread_cond_wait(&P.go, &P.mu);
			P.sleepers--;
			pthread_mutex_unlock(&P.mu);
		}
		seen = atomic_load_explicit(&P.jobgen, memory_order_acquire);
		sync_fp_mode();
		/* a worker beyond this job's thread count sits it out */
		if (me < atomic_load_explicit(&P.nruns, memory_order_acquire))
			run_chunks(seen, me);
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
	ml_cblas_set_threads(n);
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
	sync_fp_mode();
	int nt = ml_get_threads();
	int64_t want = (n + grain - 1) / grain;
	if (nt <= 1 || want <= 1 || in_pool || pthread_mutex_trylock(&P.job) != 0) {
		fn(ctx, 0, n);
		return;
	}
	want = ML_MIN(want, (int64_t)nt * CHUNKS_PER_THREAD);
	pthread_mutex_lock(&P.mu);
	/* workers are started lazily and never stopped; extra ones just sleep */
	while (P.started < nt - 1) {
		pthread_t th;
		if (pthread_create(&th, NULL, worker, (void *)(intptr_t)(P.started + 1)) != 0)
			break;
		pthread_detach(th);
		P.started++;
	}
	if (P.started == 0) {
		pthread_mutex_unlock(&P.mu);
		pthread_mutex_unlock(&P.job);
		fn(ctx, 0, n);
		return;
	}
	int64_t chunk = (n + want - 1) / want;
	int64_t nchunks = (n + chunk - 1) / chunk;
	int nr = (int)ML_MIN((int64_t)ML_MIN(nt, P.started + 1), nchunks);
	uint32_t g = ++P.gen;
	atomic_store_explicit(&P.fn, fn, memory_order_release);
	atomic_store_explicit(&P.ctx, ctx, memory_order_release);
	atomic_store_explicit(&P.n, n, memory_order_release);
	atomic_store_explicit(&P.chunk, chunk, memory_order_release);
	atomic_store_explicit(&P.nchunks, nchunks, memory_order_release);
	atomic_store_explicit(&P.nruns, nr, memory_order_release);
	atomic_store(&P.finished, 0);
	for (int r = 0; r < nr; r++)
		atomic_store_explicit(&P.runs[r].w, RUN_WORD(g, (r + 1) * nchunks / nr, r * nchunks / nr),
				      memory_order_release);
	atomic_store_explicit(&P.jobgen, g, memory_order_release);
	if (P.sleepers > 0)
		pthread_cond_broadcast(&P.go);
	pthread_mutex_unlock(&P.mu);
	in_pool = true;
	run_chunks(g, 0);
	in_pool = false;
	if (!spin_until(job_over, NULL)) {
		pthread_mutex_lock(&P.mu);
		P.caller_waits = true;
		while (!job_over(NULL))
			pthread_cond_wait(&P.done, &P.mu);
		P.caller_waits = false;
		pthread_mutex_unlock(&P.mu);
	}
	pthread_mutex_unlock(&P.job);
}
