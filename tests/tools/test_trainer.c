/*
 * test_trainer.c: the training loop of the library (struct ml_trainer)
 * used as a program would, without mltrain: a small MLP with dropout
 * trains two epochs of shuffled batches under a cosine schedule; a second
 * run that stops after the first epoch (or in the middle of one, at a
 * stop request of the poll hook) and goes on from its checkpoint in a
 * fresh process state (model, step graph, loader and trainer loaded anew)
 * ends with the same bytes; the hooks see what they should; a diverged
 * loss and bad arguments fail cleanly. Prints TAP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ml.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static const char *model_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 3>\n"
	"mlp (float[N,4] x) => (float[N,3] y)\n"
	"{\n    dense(units=16, act=relu)\n    dropout(rate=0.2)\n    dense(units=3)\n}\n";

/* data: n samples of 4 features, labelled by which of three sums is largest */
static struct ml_dataset *
data(int64_t n, uint64_t seed)
{
	struct ml_err e = { 0 };
	struct ml_tval x = { 0 }, y = { 0 };
	struct ml_dataset *d = NULL;
	int64_t xd[2] = { n, 4 }, yd[1] = { n };
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
	if (ml_tval_alloc(&x, ML_F32, 2, xd, &e) < 0 || ml_tval_alloc(&y, ML_I64, 1, yd, &e) < 0)
		return NULL;
	float *xv = x.data;
	int64_t *yv = y.data;
	for (int64_t i = 0; i < n; i++) {
		for (int k = 0; k < 4; k++) {
			s ^= s << 13, s ^= s >> 7, s ^= s << 17;
			xv[i * 4 + k] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
		}
		const float *r = xv + i * 4;
		double a = r[0] + r[1], b = r[2] - r[3], c = -r[0] + r[3];
		yv[i] = a >= b && a >= c ? 0 : b >= c ? 1 : 2;
	}
	if (ml_dataset_from_arrays(&d, &x, &y, "synthetic", &e) < 0) {
		printf("# data: %s\n", e.msg);
		return NULL;
	}
	return d;
}

/* What the hooks saw, and when the poll hook asks to stop or for a checkpoint. */
struct seen {
	int epochs_begun, steps, ckpts[4];
	struct ml_trainer_epoch last;
	int stop_at, ask_at;	/* the global batch count at which poll asks; 0: never */
	int polls;
};

static int
poll_hook(void *ctx, bool *checkpoint)
{
	struct seen *s = ctx;
	s->polls++;
	*checkpoint = s->polls == s->ask_at;
	return s->polls == s->stop_at ? 15 : 0;
}

static int
begin_hook(void *ctx, const struct ml_trainer *t, struct ml_err *e)
{
	(void)t, (void)e;
	((struct seen *)ctx)->epochs_begun++;
	return 0;
}

static int
step_hook(void *ctx, const struct ml_trainer *t, struct ml_err *e)
{
	(void)t, (void)e;
	((struct seen *)ctx)->steps++;
	return 0;
}

static int
ckpt_hook(void *ctx, const struct ml_trainer *t, int why, struct ml_err *e)
{
	(void)t, (void)e;
	((struct seen *)ctx)->ckpts[why]++;
	return 0;
}

static int
epoch_hook(void *ctx, const struct ml_trainer *t, const struct ml_trainer_epoch *ep,
	   struct ml_err *e)
{
	(void)t, (void)e;
	((struct seen *)ctx)->last = *ep;
	return 0;
}

/* A run: its graphs, data, loader, evaluation and trainer. */
struct run {
	struct ml_graph *model, *step;
	struct ml_dataset *train, *test;
	struct ml_loader *ld;
	struct ml_train_eval *ev;
	struct ml_batch_spec xs, ys;
	int64_t classes;
	struct ml_trainer *t;
	struct seen seen;
};

static void
run_free(struct run *r)
{
	ml_trainer_free(r->t);
	ml_train_eval_free(r->ev);
	ml_loader_free(r->ld);
	ml_dataset_free(r->train);
	ml_dataset_free(r->test);
	ml_graph_free(r->step);
	ml_graph_free(r->model);
	memset(r, 0, sizeof *r);
}

static int64_t every;	/* the next new run's checkpoint_every */

/*
 * start: a run of the model in from (text, or a checkpoint file when
 * ckpt), with the state of the checkpoint or a new one, to train epochs
 * in all, writing checkpoints to path.
 */
static int
start(struct run *r, const char *from, bool ckpt, int64_t epochs, const char *path,
      double lr, int accumulate, struct ml_err *e)
{
	struct ml_train_state st;
	memset(r, 0, sizeof *r);
	ml_train_state_init(&st);
	if (ckpt) {
		ML_TRY(ml_model_load(&r->model, from, ML_FMT_AUTO, e));
		ML_TRY(ml_train_state_get(&st, r->model, e));
	} else {
		ML_TRY(ml_text_decode(&r->model, from, strlen(from), "test.mlt", e));
		ML_TRY(ml_graph_toposort(r->model, e));
		ML_TRY(ml_graph_infer(r->model, e));
		st.opts.optimizer = ML_OPTIM_SGD;
		st.opts.momentum = 0.9;
		st.opts.seed = 7;
		st.opts.accumulate = accumulate;
		st.batch = 16;
		st.sched.kind = ML_LR_COSINE;
		st.sched.lr = lr;
		st.sched.epochs = epochs;
		st.checkpoint_every = every;
	}
	st.opts.accuracy = true;
	ML_TRY(ml_train_step_graph(&r->step, r->model, &st.opts, e));
	if ((r->train = data(100, 1)) == NULL || (r->test = data(40, 2)) == NULL)
		return ml_fail(e, ML_ENOMEM, "no data");
	ML_TRY(ml_train_batch_specs(r->step, r->train, &r->xs, &r->ys, &r->classes, e));
	ML_TRY(ml_dataset_check(r->train, &r->xs, &r->ys, r->classes, e));
	struct ml_loader_opts lo = { .batch = st.batch, .shuffle = st.shuffle, .prefetch = true,
				     .seed = st.opts.seed, .x = r->xs, .y = r->ys };
	ML_TRY(ml_loader_new(&r->ld, r->train, &lo, e));
	/* 100 samples in batches of 16: 7 a epoch, the last of 4 (a session made again) */
	st.sched.steps_per_epoch = ml_loader_batches(r->ld) / (accumulate > 1 ? accumulate : 1);
	struct ml_train_eval_opts eo;
	ml_train_eval_opts_init(&eo);
	eo.accuracy = true;
	ML_TRY(ml_train_eval_new(&r->ev, r->model, &eo, e));
	struct ml_trainer_opts to;
	ml_trainer_opts_init(&to);
	to.epochs = epochs;
	to.checkpoint = path;
	to.hits = true;
	to.eval = r->ev;
	to.eval_data = r->test;
	to.eval_x = &r->xs;
	to.eval_y = &r->ys;
	to.hooks = (struct ml_trainer_hooks){ .ctx = &r->seen, .poll = poll_hook,
		.on_epoch_begin = begin_hook, .on_step = step_hook, .on_checkpoint = ckpt_hook,
		.on_epoch = epoch_hook };
	return ml_trainer_new(&r->t, r->model, r->step, r->ld, &st, &to, e);
}

/* same_params: every stored float tensor of a has the bytes of b's of its name */
static bool
same_params(const struct ml_graph *a, const struct ml_graph *b)
{
	int n = 0;
	for (int i = 0; i < a->n_tensors; i++) {
		const struct ml_tensor *t = a->tensors[i];
		if (t->data == NULL || t->dtype != ML_F32)
			continue;
		int j = ml_graph_find(b, t->name);
		if (j < 0 || b->tensors[j]->data == NULL ||
		    memcmp(t->data, b->tensors[j]->data, t->nbytes) != 0 || t->nbytes != b->tensors[j]->nbytes) {
			printf("# '%s' differs\n", t->name);
			return false;
		}
		n++;
	}
	return n >= 4;
}

/* same_file: whether two files hold the same bytes */
static bool
same_file(const char *p, const char *q)
{
	FILE *a = fopen(p, "rb"), *b = fopen(q, "rb");
	bool same = a != NULL && b != NULL;
	int x, y;
	while (same && ((x = getc(a)) != EOF) + ((y = getc(b)) != EOF) > 0)
		same = x == y;
	if (a != NULL)
		fclose(a);
	if (b != NULL)
		fclose(b);
	return same;
}

static char dir[64];

static const char *
tmp(const char *name)
{
	static char buf[4][128];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
	return buf[k];
}

/* finish: export and save a run's model (training state and all) to path */
static int
finish(struct run *r, const char *path, struct ml_err *e)
{
	ML_TRY(ml_trainer_export(r->t, e));
	return ml_model_save(r->model, path, ML_FMT_MLG, e);
}

static void
test_resume(void)
{
	struct ml_err e = { 0 };
	struct run a, b;

	/* the whole run: two epochs; the trainer writes the first epoch's checkpoint */
	int rc = start(&a, model_text, false, 2, tmp("a.ckpt.mlg"), 0.1, 1, &e);
	if (rc == 0)
		rc = ml_trainer_run(a.t, &e);
	ok(rc == 0, "two epochs train through ml_trainer_run");
	ok(a.xs.dtype == ML_F32 && a.xs.rank == 1 && a.xs.dims[0] == 4 && a.ys.dtype == ML_I64 &&
	   a.ys.rank == 0 && a.classes == 3, "ml_train_batch_specs: f32 [4] samples, 3 classes");
	if (rc != 0)
		printf("# %s\n", e.msg);
	ok(a.seen.epochs_begun == 2 && a.seen.steps == 14, "on_epoch_begin and on_step once each");
	ok(a.seen.ckpts[ML_TRAINER_CKPT_EPOCH] == 1 && a.seen.ckpts[ML_TRAINER_CKPT_EVERY] == 0,
	   "one checkpoint, at the end of the first epoch (the last writes none)");
	ok(a.seen.last.epoch == 2 && a.seen.last.step == 14 && a.seen.last.samples == 100,
	   "on_epoch: the epoch, the steps, the samples");
	ok(a.seen.last.loss > 0 && a.seen.last.loss < 1.2 && a.seen.last.acc > 0.3 &&
	   !isnan(a.seen.last.eval_loss) && !isnan(a.seen.last.eval_acc),
	   "on_epoch: the loss, the accuracy and the evaluation");
	ok(fabs(a.seen.last.lr - ml_lr_at(&ml_trainer_state(a.t)->sched, 13)) == 0,
	   "on_epoch: the rate of the last step");
	ok(a.seen.last.loader_wait_s >= 0 && a.seen.last.loader_wait_s <= a.seen.last.secs,
	   "on_epoch: the loader's wait is part of the epoch's time");
	ok(ml_trainer_state(a.t)->epoch == 2 && ml_trainer_state(a.t)->epoch_step == 0,
	   "the run ends at the start of the third epoch");
	rc = finish(&a, tmp("a.mlg"), &e);
	ok(rc == 0, "the finished run exports and saves");

	/* the same run in parts: the first epoch, a checkpoint, the rest in a fresh trainer */
	rc = start(&b, model_text, false, 2, tmp("b.ckpt.mlg"), 0.1, 1, &e);
	if (rc == 0)
		rc = ml_trainer_epoch(b.t, &e);
	if (rc == 0 && b.seen.ckpts[ML_TRAINER_CKPT_EPOCH] != 1)
		rc = ml_fail(&e, ML_EINVAL, "no checkpoint after the first epoch");
	ok(rc == 0 && same_file(tmp("a.ckpt.mlg"), tmp("b.ckpt.mlg")),
	   "the first epoch's checkpoint is the whole run's, byte for byte");
	run_free(&b);
	if (rc == 0)
		rc = start(&b, tmp("b.ckpt.mlg"), true, 2, tmp("b.ckpt.mlg"), 0, 1, &e);
	ok(rc == 0 && ml_trainer_state(b.t)->epoch == 1 && ml_trainer_state(b.t)->step == 7,
	   "a fresh trainer resumes from the checkpoint at epoch 1, step 7");
	if (rc == 0)
		rc = ml_trainer_run(b.t, &e);
	if (rc == 0)
		rc = finish(&b, tmp("b.mlg"), &e);
	if (rc != 0)
		printf("# %s\n", e.msg);
	ok(rc == 0 && same_params(a.model, b.model), "the resumed run's weights are bit-identical");
	ok(rc == 0 && same_file(tmp("a.mlg"), tmp("b.mlg")),
	   "and its model with its training state is the same file");
	run_free(&b);

	/* a stop request in the middle of the first epoch, and a checkpoint request */
	rc = start(&b, model_text, false, 2, tmp("c.ckpt.mlg"), 0.1, 1, &e);
	b.seen.ask_at = 2;
	b.seen.stop_at = 4;
	if (rc == 0)
		rc = ml_trainer_run(b.t, &e);
	ok(rc == ML_TRAINER_STOPPED && ml_trainer_stop_code(b.t) == 15 &&
	   ml_trainer_state(b.t)->epoch_step == 4 && ml_trainer_state(b.t)->step == 4,
	   "a stop request ends the run after its step, accounted for");
	ok(b.seen.ckpts[ML_TRAINER_CKPT_ASKED] == 1 && ml_trainer_last_checkpoint(b.t) == 2,
	   "a checkpoint request writes one at its step");
	ok(b.seen.steps == 3, "on_step is not called for the step that stops");
	if (rc == ML_TRAINER_STOPPED)
		rc = ml_trainer_checkpoint(b.t, ML_TRAINER_CKPT_CALL, &e);
	run_free(&b);
	if (rc == 0)
		rc = start(&b, tmp("c.ckpt.mlg"), true, 2, tmp("c.ckpt.mlg"), 0, 1, &e);
	ok(rc == 0 && ml_trainer_state(b.t)->epoch == 0 && ml_trainer_state(b.t)->epoch_step == 4,
	   "the stopped run resumes in the middle of its epoch");
	if (rc == 0)
		rc = ml_trainer_run(b.t, &e);
	if (rc == 0)
		rc = finish(&b, tmp("c.mlg"), &e);
	if (rc != 0)
		printf("# %s\n", e.msg);
	ok(rc == 0 && same_params(a.model, b.model) && same_file(tmp("a.mlg"), tmp("c.mlg")),
	   "and ends bit-identical to the uninterrupted run");
	run_free(&b);
	run_free(&a);
}

/* accumulation: an optimizer step every 7 batches, one an epoch; checkpoints count steps */
static void
test_accumulate(void)
{
	struct ml_err e = { 0 };
	struct run r;
	int rc = start(&r, model_text, false, 2, NULL, 0.1, 7, &e);
	if (rc == 0)
		rc = ml_trainer_run(r.t, &e);
	ok(rc == 0 && ml_trainer_state(r.t)->step == 2 && r.seen.last.step == 2 &&
	   r.seen.steps == 14, "accumulating 7 batches: one optimizer step an epoch");
	run_free(&r);

	every = 3;
	rc = start(&r, model_text, false, 2, NULL, 0.1, 1, &e);
	if (rc == 0)
		rc = ml_trainer_run(r.t, &e);
	every = 0;
	/* steps 3, 6, 9 and 12 (epochs of 7 steps); step 7 has the epoch's checkpoint */
	ok(rc == 0 && r.seen.ckpts[ML_TRAINER_CKPT_EVERY] == 4 &&
	   r.seen.ckpts[ML_TRAINER_CKPT_EPOCH] == 1 && ml_trainer_last_checkpoint(r.t) == 12,
	   "checkpoint_every: a checkpoint every 3 steps within epochs");
	run_free(&r);
}

/* a fixed batch made symbolic; the resume state on every rank (one here) */
static void
test_rebatch(void)
{
	static const char *fixed =
		"<ir_version: 8, opset_import: [\"\" : 17], seed: 3>\n"
		"mlp (float[4,4] x) => (float[4,3] y)\n{\n    dense(units=3)\n}\n";
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	int64_t old = 0;
	int nr = -1, rc = -1;
	if (ml_text_decode(&g, fixed, strlen(fixed), "fixed.mlt", &e) == 0 &&
	    ml_graph_toposort(g, &e) == 0 && ml_graph_infer(g, &e) == 0)
		rc = ml_train_rebatch(g, "N", &old, &nr, &e);
	const struct ml_tensor *x = g != NULL ? g->tensors[g->inputs[0]] : NULL;
	ok(rc == 1 && old == 4 && nr == 0 && x->dims[0] < 0 && strcmp(x->sym[0], "N") == 0,
	   "ml_train_rebatch: a fixed batch of 4 becomes N");
	ok(ml_train_rebatch(g, "N", NULL, NULL, &e) == 0, "and a symbolic one stays");
	ml_graph_free(g);

	struct ml_train_state st;
	static const char *const frozen[] = { "w" };
	ml_train_state_init(&st);
	st.step = 42;
	st.opts.frozen = frozen;
	st.opts.n_frozen = 1;
	rc = ml_train_state_bcast(&st, 0, &e);
	ok(rc == 0 && st.step == 42 && st.opts.frozen == NULL && st.opts.n_frozen == 0,
	   "ml_train_state_bcast: the state stays, its frozen list does not travel");
}

static void
test_failures(void)
{
	struct ml_err e = { 0 };
	struct run r;

	/* a rate that makes the loss overflow */
	int rc = start(&r, model_text, false, 1, NULL, 1e30, 1, &e);
	if (rc == 0)
		rc = ml_trainer_run(r.t, &e);
	ok(rc == ML_ENONFINITE && strstr(e.msg, "the loss is") != NULL &&
	   strstr(e.msg, "no checkpoint was written") != NULL,
	   "a loss that is not finite stops the run with ML_ENONFINITE");
	ok(ml_exit_status(ML_ENONFINITE) == 1 && strcmp(ml_strerror(ML_ENONFINITE), "unknown error") != 0,
	   "ML_ENONFINITE is a runtime failure with a text");
	run_free(&r);

	/* 7 batches do not make optimizer steps of 2 */
	e = (struct ml_err){ 0 };
	rc = start(&r, model_text, false, 1, NULL, 0.1, 2, &e);
	ok(rc == ML_EINVAL && r.t == NULL && strstr(e.msg, "does not divide") != NULL,
	   "accumulation that does not divide an epoch is refused");
	run_free(&r);

	struct ml_trainer *t = (struct ml_trainer *)1;
	struct ml_train_state st;
	ml_train_state_init(&st);
	rc = ml_trainer_new(&t, NULL, NULL, NULL, &st, NULL, &e);
	ok(rc == ML_EINVAL && t == NULL, "a trainer without a step graph is refused");
	ml_trainer_free(NULL);
}

int
main(void)
{
	snprintf(dir, sizeof dir, "/tmp/test_trainer.XXXXXX");
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	test_resume();
	test_accumulate();
	test_rebatch();
	test_failures();
	const char *names[] = { "a.ckpt.mlg", "b.ckpt.mlg", "c.ckpt.mlg", "a.mlg", "b.mlg", "c.mlg" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		unlink(tmp(names[i]));
	rmdir(dir);
	printf("1..%d\n", ntest);
	return nfail != 0;
}
