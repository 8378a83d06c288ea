/*
 * loader.c: seeded shuffling and the batch loader. A loader cuts an
 * epoch's permutation into batches; with prefetch a background thread
 * builds batches into a ring of slots while the caller trains on the one
 * it holds, so reading and scaling samples overlaps the step; with
 * workers > 1 several threads build batches at once (each batch whole, by
 * one thread), for augmentation that costs more than a step. A batch's
 * content depends only on (seed, epoch, batch), never on which thread
 * built it or when.
 */
#include <pthread.h>

#include "ml_impl.h"

void
ml_shuffle(int64_t *perm, int64_t n, uint64_t seed, uint64_t epoch)
{
	struct ml_rng r;
	ml_rng_seed(&r, seed ^ (epoch * 0xd1342543de82ef95ULL));
	for (int64_t i = 0; i < n; i++)
		perm[i] = i;
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)ml_rng_below(&r, (uint64_t)i + 1);
		int64_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

/*
 * The ring: NSLOT slots at most, fewer for big batches (SLOT_BYTES in
 * all, 3 at least: the one the caller holds and two ahead). The thread
 * sleeps when the ring is full and the caller wakes it only when half the
 * ring is free (or before it waits itself), so the two threads hand over
 * once every few batches: waking a sleeping thread costs tens of
 * microseconds on a virtual machine, several percent of a small model's
 * step.
 */
#define NSLOT 24
#define MAX_WORKERS 16
#define SLOT_BYTES ((int64_t)4 << 20)

struct slot {
	struct ml_tval x, y;
	int64_t batch;		/* the batch it holds, -1 when free */
	bool busy;		/* a thread is building a batch into it */
	int rc;			/* a failure building it */
	struct ml_err err;
};

struct ml_loader {
	const struct ml_dataset *d;
	struct ml_loader_opts o;
	int64_t nbatch;
	int64_t *perm;
	int64_t next;		/* the batch ml_loader_next returns next */
	int held;		/* the slot the caller holds, -1 none */
	int nslot;		/* slots in use (3 .. NSLOT; 1 + 2 per worker at least) */
	struct slot slots[NSLOT];
	/* the prefetch threads and what they share, under mu */
	pthread_t th[MAX_WORKERS];
	int nth;		/* threads started */
	uint64_t epoch;
	bool running, stop;
	int prod_waits;		/* threads sleeping on free */
	bool cons_waits;	/* the caller sleeps on ready */
	int64_t produce;	/* the batch the thread builds next */
	pthread_mutex_t mu;
	pthread_cond_t free, ready;
};

static int64_t
batch_len(const struct ml_loader *l, int64_t b)
{
	int64_t s = b * l->o.batch, n = l->d->n - s;
	return n < l->o.batch ? n : l->o.batch;
}

static int
build(struct ml_loader *l, struct slot *sl, int64_t b, struct ml_err *e)
{
	const int64_t *idx = l->perm + b * l->o.batch;
	ML_TRY(ml_dataset_batch(l->d, idx, batch_len(l, b), &l->o.x, &l->o.y, &sl->x, &sl->y, e));
	return ml_augment_apply(l->o.augment, &sl->x, idx, l->o.seed, l->epoch, e);
}

/* full: whether no slot is free for the next batch to build (under mu) */
static bool
full(const struct ml_loader *l)
{
	int s = (int)(l->produce % l->nslot);
	return l->slots[s].batch >= 0 || l->slots[s].busy || l->held == s;
}

/*
 * The thread fills free slots with the batches after the caller's, in
 * order: batch b always goes to slot b % nslot, so the caller knows where
 * to wait for it, and the slot it holds (next - 1) is never touched.
 */
static void *
prefetch_main(void *arg)
{
	struct ml_loader *l = arg;
	pthread_mutex_lock(&l->mu);
	for (;;) {
		while (!l->stop && (l->produce >= l->nbatch || full(l))) {
			l->prod_waits++;
			pthread_cond_wait(&l->free, &l->mu);
			l->prod_waits--;
		}
		if (l->stop)
			break;
		int64_t b = l->produce++;
		struct slot *sl = &l->slots[b % l->nslot];
		sl->busy = true;
		pthread_mutex_unlock(&l->mu);
		memset(&sl->err, 0, sizeof sl->err);
		int rc = build(l, sl, b, &sl->err);
		pthread_mutex_lock(&l->mu);
		sl->rc = rc;
		sl->batch = b;
		sl->busy = false;
		if (l->cons_waits)
			pthread_cond_broadcast(&l->ready);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* wake_producer: wake the threads if they sleep with work to do (under mu) */
static void
wake_producer(struct ml_loader *l)
{
	if (l->prod_waits > 0 && l->produce < l->nbatch && !full(l))
		pthread_cond_broadcast(&l->free);
}

static void
stop_thread(struct ml_loader *l)
{
	if (!l->running)
		return;
	pthread_mutex_lock(&l->mu);
	l->stop = true;
	pthread_cond_broadcast(&l->free);
	pthread_mutex_unlock(&l->mu);
	for (int i = 0; i < l->nth; i++)
		pthread_join(l->th[i], NULL);
	l->nth = 0;
	l->running = false;
	l->stop = false;
}

int
ml_loader_new(struct ml_loader **out, const struct ml_dataset *d, const struct ml_loader_opts *o,
	      struct ml_err *e)
{
	*out = NULL;
	if (o->batch <= 0)
		return ml_fail(e, ML_EINVAL, "a batch needs at least one sample");
	if (o->workers < 0 || o->workers > MAX_WORKERS)
		return ml_fail(e, ML_EINVAL, "%d loader workers (1 to %d)", o->workers, MAX_WORKERS);
	if (ml_augment_active(o->augment))
		ML_TRY(ml_augment_check(o->augment, &o->x, e));
	struct ml_loader *l = ml_calloc(1, sizeof *l);
	if (l == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	l->d = d;
	l->o = *o;
	l->nbatch = o->drop_last ? d->n / o->batch : (d->n + o->batch - 1) / o->batch;
	l->held = -1;
	int64_t per = (d->feat > 0 ? d->feat : 1) * 4 + (d->ylen > 0 ? d->ylen : 1) * 8;
	int64_t fit = SLOT_BYTES / (o->batch * per > 0 ? o->batch * per : 1);
	/* the caller's slot, and two ahead per worker at least */
	int least = 1 + 2 * (o->workers > 1 ? o->workers : 1);
	l->nslot = fit < least ? least : fit > NSLOT ? NSLOT : (int)fit;
	if (l->nslot < least)
		l->nslot = least;
	if ((l->perm = ml_malloc((size_t)d->n * sizeof *l->perm)) == NULL) {
		ml_free(l);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	for (int i = 0; i < NSLOT; i++)
		l->slots[i].batch = -1;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->free, NULL);
	pthread_cond_init(&l->ready, NULL);
	*out = l;
	return 0;
}

void
ml_loader_free(struct ml_loader *l)
{
	if (l == NULL)
		return;
	stop_thread(l);
	for (int i = 0; i < NSLOT; i++) {
		ml_tval_clear(&l->slots[i].x);
		ml_tval_clear(&l->slots[i].y);
	}
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->free);
	pthread_cond_destroy(&l->ready);
	ml_free(l->perm);
	ml_free(l);
}

int64_t
ml_loader_batches(const struct ml_loader *l)
{
	return l->nbatch;
}

int
ml_loader_start(struct ml_loader *l, uint64_t epoch, int64_t first, struct ml_err *e)
{
	if (first < 0 || first > l->nbatch)
		return ml_fail(e, ML_EINVAL, "batch %lld of an epoch of %lld", (long long)first,
			       (long long)l->nbatch);
	stop_thread(l);
	if (l->o.shuffle) {
		ml_shuffle(l->perm, l->d->n, l->o.seed, epoch);
	} else {
		for (int64_t i = 0; i < l->d->n; i++)
			l->perm[i] = i;
	}
	for (int i = 0; i < NSLOT; i++) {
		l->slots[i].batch = -1;
		l->slots[i].busy = false;
	}
	l->epoch = epoch;
	l->next = first;
	l->produce = first;
	l->held = -1;
	if (l->o.prefetch && first < l->nbatch) {
		int want = l->o.workers > 1 ? l->o.workers : 1;
		for (l->nth = 0; l->nth < want; l->nth++)
			if (pthread_create(&l->th[l->nth], NULL, prefetch_main, l) != 0)
				break;
		if (l->nth == 0)
			return ml_fail(e, ML_ENOMEM, "cannot start the prefetch thread");
		l->running = true;
	}
	return 0;
}

int
ml_loader_next(struct ml_loader *l, const struct ml_tval **x, const struct ml_tval **y,
	       struct ml_err *e)
{
	*x = *y = NULL;
	if (!l->running) {
		if (l->next >= l->nbatch)
			return 0;
		struct slot *sl = &l->slots[0];
		ML_TRY(build(l, sl, l->next, e));
		l->next++;
		*x = &sl->x;
		*y = &sl->y;
		return 1;
	}
	pthread_mutex_lock(&l->mu);
	/* give back the slot held since the last call; wake the thread when half the ring is free */
	if (l->held >= 0) {
		l->slots[l->held].batch = -1;
		l->held = -1;
		int64_t ahead = l->produce - l->next;	/* built or being built */
		if (ahead <= l->nslot / 2)
			wake_producer(l);
	}
	if (l->next >= l->nbatch) {
		pthread_mutex_unlock(&l->mu);
		return 0;
	}
	int64_t b = l->next;
	struct slot *sl = &l->slots[b % l->nslot];
	while (sl->batch != b) {
		wake_producer(l);
		l->cons_waits = true;
		pthread_cond_wait(&l->ready, &l->mu);
		l->cons_waits = false;
	}
	l->held = (int)(b % l->nslot);
	l->next++;
	int rc = sl->rc;
	if (rc < 0 && e != NULL)
		*e = sl->err;
	pthread_mutex_unlock(&l->mu);
	if (rc < 0)
		return rc;
	*x = &sl->x;
	*y = &sl->y;
	return 1;
}
