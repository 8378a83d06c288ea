/*
 * progress.c: the one way library calls report how far they are
 * (ml_util.h): through the caller's callback, never by printing.
 */
#include "ml.h"

void
ml_progress_report(const struct ml_progress *p, const char *what, int64_t done, int64_t total)
{
	if (p == NULL || p->fn == NULL)
		return;
	p->fn(p->user, what != NULL ? what : "", done, total < 0 ? 0 : total);
}
