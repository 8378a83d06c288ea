/*
 * progress.c: the one way library calls report how far they are
 * (ml_util.h): through the caller's callback, never by printing.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "ml.h"

void
ml_progress_report(const struct ml_progress *p, const char *what, int64_t done, int64_t total)
{
	if (p == NULL || p->fn == NULL)
		return;
	p->fn(p->user, what != NULL ? what : "", done, total < 0 ? 0 : total);
}

/*
 * The hook for work that no call's options reach: OpenCL programs are built
 * on first use, deep in a session's run, on a device that sessions share.
 * Reports go out on the thread that set the hook only, so that a callback
 * written for one thread (the tools' bar) is never entered from another (a
 * pipeline stage's).
 */
static _Atomic(const struct ml_progress *) builds;
static pthread_t builds_thread;

void
ml_progress_set_builds(const struct ml_progress *p)
{
	atomic_store_explicit(&builds, NULL, memory_order_release);
	builds_thread = pthread_self();
	atomic_store_explicit(&builds, p, memory_order_release);
}

const struct ml_progress *
ml_progress_builds(void)
{
	const struct ml_progress *p = atomic_load_explicit(&builds, memory_order_acquire);
	return p != NULL && pthread_equal(builds_thread, pthread_self()) ? p : NULL;
}
