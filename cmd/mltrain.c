/*
 * mltrain.c: train a model from the command line: load a model and a
 * dataset, build the training-step graph (lib/train), run it batch after
 * batch, evaluate each epoch, and write checkpoints that resume exactly.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char synopsis[] =
	"mltrain [-qv] --data PATH -o OUT.mlg [--loss L] [--optimizer O] [--lr F] [--momentum F]\n"
	"               [--nesterov] [--weight-decay F] [--clip-norm F] [--lr-schedule S]\n"
	"               [--batch N] [--epochs N] [--seed S] [--val-split F] [--checkpoint-every N]\n"
	"               [--resume CKPT.mlg] [--device DEV] [--threads N] [--log FILE] [--json]\n"
	"               [--bucket-mb MiB] [--mpi] [--qat] [--keep-denormals] [MODEL]";

static const char help_text[] =
	"Train a model (.mlt, .mlg or .onnx) on a dataset; write the trained model.\n"
	"\n"
	"  -d, --data PATH         training data: a folder (IDX, x_train.npy/y_train.npy,\n"
	"                          train.npz or train.csv, and their test sets) or a .npz/.csv\n"
	"  -o, --output FILE       the trained model (.mlg); also the checkpoint\n"
	"      --loss L            softmax-cross-entropy (default), nll, mse, bce-with-logits\n"
	"      --optimizer O       sgd (default), adam, adamw\n"
	"      --lr F              learning rate (default 0.01)\n"
	"      --momentum F        SGD momentum (default 0)\n"
	"      --nesterov          Nesterov momentum (SGD)\n"
	"      --beta1 F           Adam beta1 (default 0.9)\n"
	"      --beta2 F           Adam beta2 (default 0.999)\n"
	"      --eps F             Adam epsilon (default 1e-8)\n"
	"      --weight-decay F    weight decay (default 0; adamw 0.01)\n"
	"      --clip-norm F       clip the global gradient norm to F (default off)\n"
	"      --lr-schedule S     constant (default), step, cosine, warmup\n"
	"      --lr-step N         step: epochs between decays (default 1)\n"
	"      --lr-gamma F        step: factor of each decay (default 0.1)\n"
	"      --lr-min F          cosine: the final learning rate (default 0)\n"
	"      --warmup-steps N    linear warm-up over the first N steps (warmup: default 100)\n"
	"      --batch N           samples per step (default 64)\n"
	"      --epochs N          epochs to train in all, resumed ones included (default 1)\n"
	"      --seed S            seed of shuffling, splits and dropout (default 0)\n"
	"      --no-shuffle        keep the data in file order\n"
	"      --val-split F       hold out fraction F of the training data for validation\n"
	"                          (default: evaluate the test set, when there is one)\n"
	"      --checkpoint-every N  write a checkpoint every N steps (default: each epoch)\n"
	"      --checkpoint FILE   write checkpoints to FILE (default: the output)\n"
	"      --resume CKPT       continue the run that wrote checkpoint CKPT\n"
	"      --dump-step FILE    write the training-step graph to FILE and exit\n"
	"      --device DEV        cpu (default), cl, cl:N or auto\n"
	"      --threads N         threads for kernels and BLAS (default: all cores)\n"
	"      --bucket-mb MiB     under mpirun: all-reduce gradients in MiB buckets (default 25)\n"
	"      --mpi               train with MPI even when no MPI launcher is detected\n"
	"      --qat               quantisation-aware training: fake-quantise weights and\n"
	"                          activations (ranges from the first batch); mlquant then\n"
	"                          converts the result with the trained ranges\n"
	"      --keep-denormals    keep subnormal floats in the CPU kernels (default: flush\n"
	"                          them to zero, much faster once gradients underflow)\n"
	"      --log FILE          append one JSON line per epoch to FILE\n"
	"      --json              print a JSON report on stdout at the end\n"
	"      --max-alloc SIZE    allocate at most SIZE bytes (K, M, G suffixes)\n"
	"  -q, --quiet             print nothing but errors\n"
	"  -v, --verbose           print more (the step graph, checkpoints)\n"
	"  -h, --help              print this help and exit\n"
	"  -V, --version           print the version and exit\n";

/* The options, as given or as the checkpoint saved them. */
struct opts {
	const char *loss, *optimizer, *schedule;
	double lr, momentum, beta1, beta2, eps, wd, clip, lr_gamma, lr_min, val_split;
	int64_t nesterov, lr_step, warmup, batch, epochs, seed, shuffle, every, keep_dn;
};

enum { S_LOSS, S_OPT, S_SCHED, S_LR, S_MOM, S_B1, S_B2, S_EPS, S_WD, S_CLIP, S_GAMMA, S_LRMIN,
       S_VAL, S_NEST, S_LRSTEP, S_WARM, S_BATCH, S_EPOCHS, S_SEED, S_SHUF, S_EVERY,
       S_KEEPDN, S_N };
static bool given[S_N];

static volatile sig_atomic_t got_int, got_usr1;
/* -q: the watchdog ends the run without its line (an MPI job torn down by mpirun -q) */
static volatile sig_atomic_t quiet_watchdog;
/*
 * distributed: a rank that dies ends every rank (MPI_Abort), with its own
 * exit status (die, die_err and usage_error go through dist_exit; any other
 * exit before the end, through dist_atexit, with status 1), so no rank is
 * left waiting in a collective
 */
static bool dist_clean;
static void
dist_exit(int status)
{
	if (!dist_clean && ml_dist_size() > 1)
		(void)ml_dist_abort(status);	/* returns only if MPI_Abort does: the caller exits */
}

static void
dist_atexit(void)
{
	dist_exit(EXIT_FAIL);
}

/*
 * dist_resume_state: rank 0's training state of the checkpoint it resumes,
 * on every rank: the step, the epoch and the saved configuration (the
 * options, the position in the epoch and its sums), so every rank takes the
 * same batches from the same point. The weights, the optimizer state and
 * the RNG state ("train.rng") are PARAM tensors that ml_dist_bcast_params
 * gives every rank later. Every rank must call it.
 */
static void
dist_resume_state(struct ml_graph *model)
{
	struct ml_err err = { 0 };
	struct ml_train *t = model->train;
	uint64_t hdr[3] = { t->step, t->epoch, t->config != NULL ? strlen(t->config) + 1 : 0 };
	if (ml_dist_bcast(hdr, sizeof hdr, 0, &err) < 0)
		die_err(&err);
	if (hdr[2] == 0 || hdr[2] > (1u << 20))
		die(EXIT_INVALID, "rank 0's checkpoint has no training state");
	char *cfg = malloc(hdr[2]);
	if (cfg == NULL)
		die(EXIT_FAIL, "out of memory");
	if (ml_dist_rank() == 0)
		memcpy(cfg, t->config, hdr[2]);
	if (ml_dist_bcast(cfg, hdr[2], 0, &err) < 0)
		die_err(&err);
	cfg[hdr[2] - 1] = '\0';
	t->step = hdr[0];
	t->epoch = hdr[1];
	if ((t->config = ml_graph_strdup(model, cfg)) == NULL)
		die(EXIT_FAIL, "out of memory");
	free(cfg);
}

/*
 * on_signal: SIGINT or SIGTERM asks the loop to stop after the step that
 * runs, with a checkpoint; SIGUSR1 asks for a checkpoint. A step normally
 * ends in milliseconds, but one can take much longer (a large batch, a
 * product waiting for memory), so a watchdog (on_watchdog) ends the run a
 * second after the signal if the loop has not taken it by then; a second
 * SIGINT or SIGTERM ends it at once. Either way the temporary file of a
 * checkpoint being written goes, and the last checkpoint written stays.
 */
static void
on_signal(int sig)
{
	if (sig == SIGUSR1) {
		got_usr1 = 1;
		return;
	}
	if (got_int) {
		ml_tmp_cleanup();
		_exit(128 + sig);	/* a second interrupt: stop at once */
	}
	got_int = sig;
	alarm(1);
}

static void
on_watchdog(int sig)
{
	static const char msg[] = ": interrupted in the middle of a step; the last checkpoint is kept\n";
	(void)sig;
	ml_tmp_cleanup();
	if (!quiet_watchdog) {
		(void)!write(STDERR_FILENO, progname, strlen(progname));
		(void)!write(STDERR_FILENO, msg, sizeof msg - 1);
	}
	_exit(128 + (got_int ? got_int : SIGTERM));
}

/* The state of a run between steps. */
struct run {
	struct opts o;
	const char *model_path, *out, *ckpt, *data_path;
	struct ml_graph *model, *step;
	struct ml_session *sess;
	struct ml_dataset *train, *eval;
	struct ml_loader *ld;
	const char *xname;
	struct ml_batch_spec xs, ys;
	int64_t classes;
	int64_t spe;		/* steps per epoch */
	struct ml_lr_schedule sched;	/* the learning rate of each step (make_schedule) */
	uint64_t step_no;	/* optimizer steps taken */
	uint64_t epoch;		/* epochs completed */
	int64_t in_epoch;	/* batches of the current epoch done */
	double loss_sum;	/* of the current epoch, over samples */
	int64_t correct, seen;
	uint64_t last_ckpt;	/* the step of the last checkpoint written, or UINT64_MAX */
	struct ml_train_config cfg;	/* --resume: the checkpoint's training state, parsed */
	int verbose, quiet;
	const char *device;
	FILE *log;
	/* the last epoch's figures, for --json */
	int64_t cur_batch;	/* the batch size the session has bound */
	double train_secs;	/* time in training steps and batches, this process */
	int64_t train_samples;
	double last_loss, last_acc, last_eval_loss, last_eval_acc, last_sps;
};

static char *
config_json(const struct run *r)
{
	static char buf[2048];
	const struct opts *o = &r->o;
	snprintf(buf, sizeof buf,
		 "{\"loss\": \"%s\", \"optimizer\": \"%s\", \"lr_schedule\": \"%s\", "
		 "\"lr\": %.17g, \"momentum\": %.17g, \"beta1\": %.17g, \"beta2\": %.17g, "
		 "\"eps\": %.17g, \"weight_decay\": %.17g, \"clip_norm\": %.17g, \"lr_gamma\": %.17g, "
		 "\"lr_min\": %.17g, \"val_split\": %.17g, \"nesterov\": %lld, \"lr_step\": %lld, "
		 "\"warmup_steps\": %lld, \"batch\": %lld, \"epochs\": %lld, \"seed\": %lld, "
		 "\"shuffle\": %lld, \"checkpoint_every\": %lld, \"steps_per_epoch\": %lld, "
		 "\"epoch_step\": %lld, \"epoch_loss_sum\": %.17g, \"epoch_correct\": %lld, "
		 "\"epoch_seen\": %lld, \"keep_denormals\": %lld}",
		 o->loss, o->optimizer, o->schedule, o->lr, o->momentum, o->beta1, o->beta2, o->eps,
		 o->wd, o->clip, o->lr_gamma, o->lr_min, o->val_split, (long long)o->nesterov,
		 (long long)o->lr_step, (long long)o->warmup, (long long)o->batch,
		 (long long)o->epochs, (long long)o->seed, (long long)o->shuffle,
		 (long long)o->every, (long long)r->spe, (long long)r->in_epoch, r->loss_sum,
		 (long long)r->correct, (long long)r->seen, (long long)o->keep_dn);
	return buf;
}

/* state_int: an integer of the training state into *v if there; status 3 when not an integer. */
static bool
state_int(const struct ml_train_config *c, const char *key, int64_t *v, const char *resume)
{
	double d;
	if (ml_train_config_int(c, key, v))
		return true;
	if (ml_train_config_num(c, key, &d))
		die(EXIT_INVALID, "%s: damaged training state: %s is %g, not an integer",
		    resume, key, d);
	return false;
}

/*
 * take_config: the options the checkpoint saved (cfg, its training state
 * parsed) for those not given on the command line; options that fix the
 * data order must not differ. resume names the checkpoint in errors.
 */
static void
take_config(struct opts *o, const struct ml_train_config *cfg, const char *resume)
{
	static const char *const keys[S_N] = {
		"loss", "optimizer", "lr_schedule", "lr", "momentum", "beta1", "beta2", "eps",
		"weight_decay", "clip_norm", "lr_gamma", "lr_min", "val_split", "nesterov",
		"lr_step", "warmup_steps", "batch", "epochs", "seed", "shuffle", "checkpoint_every",
		"keep_denormals",
	};
	double *dbl[S_N] = { [S_LR] = &o->lr, [S_MOM] = &o->momentum, [S_B1] = &o->beta1,
			     [S_B2] = &o->beta2, [S_EPS] = &o->eps, [S_WD] = &o->wd,
			     [S_CLIP] = &o->clip, [S_GAMMA] = &o->lr_gamma, [S_LRMIN] = &o->lr_min,
			     [S_VAL] = &o->val_split };
	int64_t *ints[S_N] = { [S_NEST] = &o->nesterov, [S_LRSTEP] = &o->lr_step,
			       [S_WARM] = &o->warmup, [S_BATCH] = &o->batch,
			       [S_EPOCHS] = &o->epochs, [S_SEED] = &o->seed,
			       [S_SHUF] = &o->shuffle, [S_EVERY] = &o->every,
			       [S_KEEPDN] = &o->keep_dn };
	const char **strs[S_N] = { [S_LOSS] = &o->loss, [S_OPT] = &o->optimizer,
				   [S_SCHED] = &o->schedule };
	for (int i = 0; i < S_N; i++) {
		bool order = i == S_BATCH || i == S_SEED || i == S_SHUF || i == S_VAL;
		double v;
		int64_t n;
		const char *s;
		if (strs[i] != NULL && (s = ml_train_config_str(cfg, keys[i])) != NULL) {
			if (given[i] && strcmp(s, *strs[i]) != 0 && i != S_SCHED)
				die(EXIT_USAGE, "--%s %s differs from the checkpoint's %s", keys[i],
				    *strs[i], s);
			if (!given[i] && (*strs[i] = strdup(s)) == NULL)
				die(EXIT_FAIL, "out of memory");
		} else if (dbl[i] != NULL && ml_train_config_num(cfg, keys[i], &v)) {
			if (given[i] && order && *dbl[i] != v)
				die(EXIT_USAGE,
				    "--%s differs from the checkpoint's (%g); a resumed run keeps its data order",
				    keys[i], v);
			if (!given[i])
				*dbl[i] = v;
		} else if (ints[i] != NULL && state_int(cfg, keys[i], &n, resume)) {
			if (given[i] && order && *ints[i] != n)
				die(EXIT_USAGE,
				    "--%s differs from the checkpoint's (%g); a resumed run keeps its data order",
				    keys[i], (double)n);
			if (!given[i])
				*ints[i] = n;
		}
	}
}

/*
 * make_schedule: the learning-rate schedule of the options (lib/train's
 * ml_lr_at gives each step's rate), once the data have given the steps of
 * an epoch. A checkpoint's unknown schedule name keeps the rate constant.
 */
static void
make_schedule(struct run *r)
{
	const struct opts *o = &r->o;
	struct ml_lr_schedule *sc = &r->sched;
	ml_lr_schedule_init(sc);
	sc->kind = ml_lr_schedule_from_name(o->schedule);
	if (sc->kind < 0)
		sc->kind = ML_LR_CONSTANT;
	sc->lr = o->lr;
	sc->steps_per_epoch = r->spe;
	sc->epochs = o->epochs;
	sc->step_epochs = o->lr_step;
	sc->gamma = o->lr_gamma;
	sc->lr_min = o->lr_min;
	sc->warmup = o->warmup;
}

static void
die_run(const struct ml_err *err, const char *what)
{
	die(ml_exit_status(err->code), "%s%s%s", what ? what : "", what ? ": " : "", err->msg);
}

/* export: the trained state back into the model (weights on a device first). */
static void
export_state(struct run *r)
{
	struct ml_err err = { 0 };
	if (ml_session_sync(r->sess, &err) < 0 || ml_train_export(r->model, r->step, &err) < 0)
		die_run(&err, NULL);
	r->model->train->epoch = r->epoch;
	r->model->train->config = ml_graph_strdup(r->model, config_json(r));
	if (r->model->train->config == NULL)
		die(EXIT_FAIL, "out of memory");
}

static void
checkpoint(struct run *r, const char *why)
{
	struct ml_err err = { 0 };
	export_state(r);
	if (ml_dist_rank() == 0 && ml_model_save(r->model, r->ckpt, ML_FMT_MLG, &err) < 0)
		die_err(&err);
	r->last_ckpt = r->step_no;
	if (r->verbose)
		fprintf(stderr, "%s: checkpoint at step %llu (%s) in %s\n", progname,
			(unsigned long long)r->step_no, why, r->ckpt);
}

/* host_loss: the loss of one row of logits, as the step graph's loss computes it. */
static double
row_loss(const char *loss, const float *z, int64_t c, const struct ml_tval *y, int64_t i)
{
	if (strcmp(loss, "softmax-cross-entropy") == 0 || strcmp(loss, "nll") == 0) {
		int64_t k = ml_get_i64(y->data, y->dtype, i);
		if (strcmp(loss, "nll") == 0)
			return -z[k];
		double m = z[0], s = 0;
		for (int64_t j = 1; j < c; j++)
			m = z[j] > m ? z[j] : m;
		for (int64_t j = 0; j < c; j++)
			s += exp(z[j] - m);
		return m + log(s) - z[k];
	}
	double s = 0;
	for (int64_t j = 0; j < c; j++) {
		double t = ml_get_f64(y->data, y->dtype, i * c + j), x = z[j];
		if (strcmp(loss, "mse") == 0)
			s += (x - t) * (x - t);
		else
			s += fmax(x, 0) - x * t + log1p(exp(-fabs(x)));
	}
	return s / (double)c;
}

/* argmax_ok: whether row i's largest logit is its class. */
static bool
argmax_ok(const float *z, int64_t c, const struct ml_tval *y, int64_t i)
{
	int64_t best = 0, k;
	for (int64_t j = 1; j < c; j++)
		if (z[j] > z[best])
			best = j;
	if (ml_dtype_is_int(y->dtype)) {
		k = ml_get_i64(y->data, y->dtype, i);
	} else {
		k = 0;
		for (int64_t j = 1; j < c; j++)
			if (ml_get_f64(y->data, y->dtype, i * c + j) >
			    ml_get_f64(y->data, y->dtype, i * c + k))
				k = j;
	}
	return best == k;
}

/* evaluate: loss and accuracy of the model (eval mode) on r->eval. */
static void
evaluate(struct run *r, double *loss, double *acc)
{
	struct ml_err err = { 0 };
	struct ml_session *s = NULL;
	struct ml_session_opts so = { .device = r->device };
	struct ml_loader *ld = NULL;
	struct ml_loader_opts lo = { .batch = 1000, .prefetch = true, .x = r->xs, .y = r->ys };
	const struct ml_tval *x, *y;
	double ls = 0;
	int64_t ok = 0, n = 0;
	int rc;

	export_state(r);
	if (ml_session_new(&s, r->model, &so, &err) < 0 || ml_loader_new(&ld, r->eval, &lo, &err) < 0 ||
	    ml_loader_start(ld, 0, 0, &err) < 0)
		die_run(&err, NULL);
	while ((rc = ml_loader_next(ld, &x, &y, &err)) > 0) {
		if (ml_session_set_input(s, r->xname, x, &err) < 0 || ml_session_run(s, &err) < 0)
			die_run(&err, NULL);
		const struct ml_tval *z = ml_session_output(s, 0);
		int64_t b = x->dims[0], c = ml_tval_numel(z) / b;
		for (int64_t i = 0; i < b; i++) {
			const float *row = (const float *)z->data + i * c;
			ls += row_loss(r->o.loss, row, c, y, i);
			ok += r->classes > 0 && argmax_ok(row, c, y, i);
		}
		n += b;
	}
	if (rc < 0)
		die_run(&err, NULL);
	ml_loader_free(ld);
	ml_session_free(s);
	*loss = ls / (double)n;
	*acc = r->classes > 0 ? (double)ok / (double)n : NAN;
}

static void
progress(const struct run *r, double t0, bool done)
{
	static double last;
	double now = ml_now();
	if (!done && now - last < 0.2)
		return;
	last = now;
	if (done) {
		fputs("\r\033[K", stderr);
		return;
	}
	double sps = (double)r->seen / (now - t0 > 0 ? now - t0 : 1e-9);
	fprintf(stderr, "\repoch %llu/%lld %lld/%lld loss %.4f %.0f samples/s\033[K",
		(unsigned long long)r->epoch + 1, (long long)r->o.epochs, (long long)r->in_epoch,
		(long long)r->spe, r->seen ? r->loss_sum / (double)r->seen : 0.0, sps);
}

/* setup_data: load, split, check against the model, make the loader. */
static void
setup_data(struct run *r)
{
	struct ml_err err = { 0 };
	struct ml_dataset *test = NULL;
	if (ml_data_load(&r->train, &test, r->data_path, &err) < 0)
		die_err(&err);
	if (r->o.val_split > 0) {
		ml_dataset_free(test);
		if (ml_dataset_split(r->train, r->o.val_split, (uint64_t)r->o.seed, &r->eval, &err) < 0)
			die_err(&err);
	} else {
		r->eval = test;
	}
	const struct ml_graph *g = r->step;
	int xi = g->inputs[0], yi = ml_graph_find(g, "label");
	const struct ml_tensor *xt = g->tensors[xi], *yt = g->tensors[yi];
	r->xname = xt->name;
	if (xt->rank >= 1 && xt->dims[0] >= 0 && xt->dims[0] != r->o.batch)
		die(EXIT_INVALID, "%s: the model's input '%s' has a fixed batch of %lld, not %lld",
		    r->model_path, xt->name, (long long)xt->dims[0], (long long)r->o.batch);
	r->xs.dtype = xt->dtype == ML_UNDEF ? ML_F32 : xt->dtype;
	if (xt->rank >= 1) {
		r->xs.rank = xt->rank - 1;
		memcpy(r->xs.dims, xt->dims + 1, sizeof(int64_t) * (size_t)r->xs.rank);
	} else {
		r->xs.rank = r->train->rank;
		memcpy(r->xs.dims, r->train->dims, sizeof r->xs.dims);
	}
	r->ys.dtype = yt->dtype;
	r->ys.rank = yt->rank >= 1 ? yt->rank - 1 : 0;
	memcpy(r->ys.dims, yt->dims + 1, sizeof(int64_t) * (size_t)r->ys.rank);
	/* classes: the last dim of the output the loss reads */
	const struct ml_tensor *zt = r->model->tensors[r->model->outputs[0]];
	r->classes = zt->rank >= 2 ? zt->dims[zt->rank - 1] : -1;
	if (r->train->ytype != ML_I64)
		r->classes = -1;
	struct ml_batch_spec xs = r->xs, ys = r->ys;
	if (ml_dataset_check(r->train, &r->xs, &r->ys, r->classes, &err) < 0)
		die_err(&err);
	if (r->eval != NULL && ml_dataset_check(r->eval, &xs, &ys, r->classes, &err) < 0)
		die_err(&err);
	struct ml_loader_opts lo = { .batch = r->o.batch, .shuffle = r->o.shuffle != 0,
				     .prefetch = true, .seed = (uint64_t)r->o.seed, .x = r->xs,
				     .y = r->ys, .drop_last = xt->rank >= 1 && xt->dims[0] >= 0 };
	if (ml_loader_new(&r->ld, r->train, &lo, &err) < 0)
		die_err(&err);
	r->spe = ml_loader_batches(r->ld);
	if (r->spe == 0)
		die(EXIT_INVALID, "%s: fewer samples than one batch", r->data_path);
}

/*
 * log_dist: this rank's communication in the epoch just trained (secs of
 * steps), as --log fields (json) or one line for -v: the gradient
 * all-reduces on the communication thread (partly hidden behind the
 * backward pass), the step blocked waiting for them, the per-step metric
 * all-reduce, and the share of the epoch the training thread spent blocked
 * on communication.
 */
static void
log_dist(FILE *fp, double secs, bool json)
{
	struct ml_dist_stats st;
	ml_dist_stats(&st);
	double n = st.steps > 0 ? (double)st.steps : 1;
	double ar = 1e3 * st.comm_s / n, wt = 1e3 * st.wait_s / n, mt = 1e3 * st.other_s / n;
	double share = secs > 0 ? (st.wait_s + st.other_s) / secs : 0;
	if (json)
		fprintf(fp, ", \"ranks\": %d, \"dist_steps\": %lld, \"allreduce_ms_per_step\": %.4f, "
			"\"wait_ms_per_step\": %.4f, \"metrics_ms_per_step\": %.4f, "
			"\"allreduce_mb_per_step\": %.4f, \"comm_share\": %.4f", ml_dist_size(),
			(long long)st.steps, ar, wt, mt, (double)st.bytes / n / (1 << 20), share);
	else
		fprintf(fp, "%s: rank %d of %d: all-reduce %.3f ms/step (%.3f ms not hidden), "
			"metrics %.3f ms/step: %.1f%% of the epoch waiting on communication\n",
			progname, ml_dist_rank(), ml_dist_size(), ar, wt, mt, 100 * share);
}

static void
report_epoch(struct run *r, double secs, double sps)
{
	double vl = NAN, va = NAN;
	double tl = r->loss_sum / (double)(r->seen ? r->seen : 1);
	double ta = r->classes > 0 ? (double)r->correct / (double)(r->seen ? r->seen : 1) : NAN;
	if (r->eval != NULL)
		evaluate(r, &vl, &va);
	const char *what = r->o.val_split > 0 ? "val" : "test";
	if (!r->quiet) {
		fprintf(stderr, "epoch %llu/%lld: loss %.4f", (unsigned long long)r->epoch,
			(long long)r->o.epochs, tl);
		if (!isnan(ta))
			fprintf(stderr, " acc %.2f%%", 100 * ta);
		if (r->eval != NULL) {
			fprintf(stderr, ", %s loss %.4f", what, vl);
			if (!isnan(va))
				fprintf(stderr, " acc %.2f%%", 100 * va);
		}
		fprintf(stderr, ", %.0f samples/s, %.1f s\n", sps, secs);
	}
	if (r->verbose && ml_dist_size() > 1)
		log_dist(stderr, secs, false);
	if (r->log != NULL) {
		fprintf(r->log, "{\"epoch\": %llu, \"step\": %llu, \"loss\": %.6g",
			(unsigned long long)r->epoch, (unsigned long long)r->step_no, tl);
		if (!isnan(ta))
			fprintf(r->log, ", \"accuracy\": %.6g", ta);
		if (r->eval != NULL) {
			fprintf(r->log, ", \"%s_loss\": %.6g", what, vl);
			if (!isnan(va))
				fprintf(r->log, ", \"%s_accuracy\": %.6g", what, va);
		}
		fprintf(r->log, ", \"samples_per_s\": %.1f, \"seconds\": %.3f, \"lr\": %.6g", sps,
			secs, ml_lr_at(&r->sched, r->step_no ? r->step_no - 1 : 0));
		if (ml_dist_size() > 1)
			log_dist(r->log, secs, true);
		fputs("}\n", r->log);
		fflush(r->log);
	}
	r->last_loss = tl;
	r->last_acc = ta;
	r->last_eval_loss = vl;
	r->last_eval_acc = va;
	r->last_sps = sps;
}

static void
json_num(FILE *fp, const char *key, double v)
{
	if (isnan(v))
		fprintf(fp, ", \"%s\": null", key);
	else
		fprintf(fp, ", \"%s\": %.6g", key, v);
}

/* new_session: the step graph's session, afresh (device state synced back first). */
static void
new_session(struct run *r)
{
	struct ml_err err = { 0 };
	struct ml_session_opts so = { .device = r->device, .verbose = r->verbose };
	if (r->sess != NULL && ml_session_sync(r->sess, &err) < 0)
		die_run(&err, NULL);
	ml_session_free(r->sess);
	r->sess = NULL;
	if (ml_session_new(&r->sess, r->step, &so, &err) < 0)
		die_err(&err);
}

/* train: the epochs from where the run stands to o.epochs. */
static void
train(struct run *r)
{
	struct ml_err err = { 0 };
	struct ml_tval lr = { 0 };
	const struct ml_tval *x, *y;
	int rc;

	if (ml_tval_alloc(&lr, ML_F32, 0, NULL, &err) < 0)
		die_err(&err);
	while ((int64_t)r->epoch < r->o.epochs) {
		double t0 = ml_now(), tstep = 0;
		int64_t seen0 = r->seen;
		ml_dist_stats_reset();	/* the communication of this epoch, for report_epoch */
		if (ml_loader_start(r->ld, r->epoch, r->in_epoch, &err) < 0)
			die_err(&err);
		while ((rc = ml_loader_next(r->ld, &x, &y, &err)) > 0) {
			double ts = ml_now();
			if (ml_dist_size() > 1 && x->dims[0] < ml_dist_size())
				continue;	/* a last batch of fewer samples than ranks: dropped */
			/*
			 * The session checks a symbolic batch dim against the inputs
			 * already bound, so a batch of another size (the last of an
			 * epoch) needs a new session; the weights live in the graph.
			 */
			if (x->dims[0] != r->cur_batch) {
				if (r->cur_batch > 0)
					new_session(r);
				r->cur_batch = x->dims[0];
			}
			*(float *)lr.data = (float)ml_lr_at(&r->sched, r->step_no);
			struct ml_tval xv, yv;
			double w = 1;
			if (ml_dist_size() > 1) {
				ml_dist_shard_batch(x, &xv, &w);
				ml_dist_shard_batch(y, &yv, NULL);
				ml_dist_set_weight(w);
			} else {
				xv = *x;
				yv = *y;
			}
			if (ml_session_set_input(r->sess, r->xname, &xv, &err) < 0 ||
			    ml_session_set_input(r->sess, "label", &yv, &err) < 0 ||
			    ml_session_set_input(r->sess, "lr", &lr, &err) < 0 ||
			    ml_session_run(r->sess, &err) < 0)
				die_run(&err, NULL);
			const struct ml_tval *lv = ml_session_output(r->sess, 0);
			const struct ml_tval *z = ml_session_output(r->sess, 1);
			double loss = ml_get_f64(lv->data, lv->dtype, 0);
			int64_t b = x->dims[0], nok = 0;
			if (r->classes > 0) {
				int64_t lb = xv.dims[0], c = lb > 0 ? ml_tval_numel(z) / lb : 0;
				for (int64_t i = 0; i < lb; i++)
					nok += argmax_ok((const float *)z->data + i * c, c, &yv, i);
			}
			/*
			 * What this step does about signals: the flags as they are now,
			 * under MPI what any rank saw. A signal that arrives later (while
			 * this rank waits in the reduction, which is much of the time)
			 * stays in its flag for the next step: deciding on the flags
			 * themselves would let it overwrite, or stop one rank alone.
			 */
			int stop = got_int, usr1 = got_usr1, usr1_seen = usr1;
			if (ml_dist_size() > 1) {
				/* the global loss, the signals seen and the hits, the same on all ranks */
				double red[4] = { loss * w, stop ? 1 : 0, usr1 ? 1 : 0, (double)nok };
				if (ml_dist_allreduce(red, 4, ML_F64, ML_DIST_SUM, &err) < 0)
					die_run(&err, NULL);
				loss = red[0];
				stop = red[1] > 0 ? (stop ? stop : SIGINT) : 0;
				usr1 = red[2] > 0;
				nok = (int64_t)red[3];
			}
			if (!isfinite(loss)) {
				if (r->last_ckpt != UINT64_MAX)
					die(EXIT_FAIL,
					    "step %llu: the loss is %s; stopping (the checkpoint of step %llu is kept in %s)",
					    (unsigned long long)r->step_no + 1, isnan(loss) ? "nan" : "infinite",
					    (unsigned long long)r->last_ckpt, r->ckpt);
				die(EXIT_FAIL, "step %llu: the loss is %s; stopping (no checkpoint was written)",
				    (unsigned long long)r->step_no + 1, isnan(loss) ? "nan" : "infinite");
			}
			r->step_no++;
			r->in_epoch++;
			r->loss_sum += loss * (double)b;
			r->seen += b;
			r->correct += nok;
			tstep += ml_now() - ts;
			if (stop) {
				/* taken in time: the checkpoint is written, however long it takes */
				alarm(0);
				checkpoint(r, "interrupted");
				if (!r->quiet)
					fprintf(stderr, "%s: interrupted at step %llu; the checkpoint is %s\n",
						progname, (unsigned long long)r->step_no, r->ckpt);
				dist_clean = true;
				if (ml_dist_size() > 1) {
					ml_dist_barrier(&err);
					ml_dist_finalize(&err);
				}
				exit(128 + stop);
			}
			if (usr1) {
				if (usr1_seen)
					got_usr1 = 0;
				checkpoint(r, "SIGUSR1");
			} else if (r->o.every > 0 && r->step_no % (uint64_t)r->o.every == 0 &&
				   r->in_epoch < r->spe) {
				checkpoint(r, "every N steps");
			}
			if (!r->quiet && isatty(STDERR_FILENO))
				progress(r, t0, false);
		}
		if (rc < 0)
			die_err(&err);
		if (!r->quiet && isatty(STDERR_FILENO))
			progress(r, t0, true);
		double secs = ml_now() - t0;
		(void)tstep;
		r->train_secs += secs;
		r->train_samples += r->seen - seen0;
		r->epoch++;
		report_epoch(r, secs, (double)(r->seen - seen0) / (secs > 0 ? secs : 1e-9));
		r->in_epoch = 0;
		r->loss_sum = 0;
		r->correct = r->seen = 0;
		if ((int64_t)r->epoch < r->o.epochs)
			checkpoint(r, "end of epoch");
	}
	ml_tval_clear(&lr);
}

/* What the command line gives besides the training options (struct opts). */
struct args {
	const char *resume, *dump, *logpath;
	const char *from;	/* the model read: the checkpoint resumed, else MODEL */
	int threads, json, dmode;
	bool qat, version;
	struct ml_dist_opts dopt;
	struct ml_dist_info di;
};

/* parse_args: read argv into r's options and a; usage errors exit 2, -h exits 0. */
static void
parse_args(struct run *r, struct args *a, int argc, char **argv)
{
	enum { O_LOSS = 256, O_OPT, O_LR, O_MOM, O_NEST, O_B1, O_B2, O_EPS, O_WD, O_CLIP, O_SCHED,
	       O_LRSTEP, O_GAMMA, O_LRMIN, O_WARM, O_BATCH, O_EPOCHS, O_SEED, O_NOSHUF, O_VAL,
	       O_EVERY, O_CKPT, O_RESUME, O_DUMP, O_DEVICE, O_THREADS, O_LOG, O_JSON, O_MAXALLOC,
	       O_BUCKET, O_MPI, O_QAT, O_KEEPDN };
	static const struct option longopts[] = {
		{ "batch", required_argument, NULL, O_BATCH },
		{ "beta1", required_argument, NULL, O_B1 },
		{ "beta2", required_argument, NULL, O_B2 },
		{ "bucket-mb", required_argument, NULL, O_BUCKET },
		{ "checkpoint", required_argument, NULL, O_CKPT },
		{ "checkpoint-every", required_argument, NULL, O_EVERY },
		{ "clip-norm", required_argument, NULL, O_CLIP },
		{ "data", required_argument, NULL, 'd' },
		{ "device", required_argument, NULL, O_DEVICE },
		{ "dump-step", required_argument, NULL, O_DUMP },
		{ "epochs", required_argument, NULL, O_EPOCHS },
		{ "eps", required_argument, NULL, O_EPS },
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, O_JSON },
		{ "log", required_argument, NULL, O_LOG },
		{ "loss", required_argument, NULL, O_LOSS },
		{ "lr", required_argument, NULL, O_LR },
		{ "lr-gamma", required_argument, NULL, O_GAMMA },
		{ "lr-min", required_argument, NULL, O_LRMIN },
		{ "lr-schedule", required_argument, NULL, O_SCHED },
		{ "lr-step", required_argument, NULL, O_LRSTEP },
		{ "max-alloc", required_argument, NULL, O_MAXALLOC },
		{ "momentum", required_argument, NULL, O_MOM },
		{ "mpi", no_argument, NULL, O_MPI },
		{ "qat", no_argument, NULL, O_QAT },
		{ "keep-denormals", no_argument, NULL, O_KEEPDN },
		{ "nesterov", no_argument, NULL, O_NEST },
		{ "no-shuffle", no_argument, NULL, O_NOSHUF },
		{ "optimizer", required_argument, NULL, O_OPT },
		{ "output", required_argument, NULL, 'o' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "resume", required_argument, NULL, O_RESUME },
		{ "seed", required_argument, NULL, O_SEED },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "val-split", required_argument, NULL, O_VAL },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ "warmup-steps", required_argument, NULL, O_WARM },
		{ "weight-decay", required_argument, NULL, O_WD },
		{ NULL, 0, NULL, 0 },
	};
	struct opts *o = &r->o;
	int c;
	while ((c = getopt_long(argc, argv, "d:ho:qvV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': r->data_path = optarg; break;
		case 'h': show_help(synopsis, help_text);
		case 'o': r->out = optarg; break;
		case 'q': r->quiet = 1, quiet_watchdog = 1; break;
		case 'v': r->verbose++; break;
		case 'V': a->version = true; break;
		case O_LOSS:
			if (ml_loss_from_name(optarg) < 0)
				usage_error(synopsis, "unknown loss '%s' (softmax-cross-entropy, nll, mse, bce-with-logits)", optarg);
			o->loss = ml_loss_name(ml_loss_from_name(optarg));
			given[S_LOSS] = true;
			break;
		case O_OPT:
			if (ml_optim_from_name(optarg) < 0)
				usage_error(synopsis, "unknown optimizer '%s' (sgd, adam, adamw)", optarg);
			o->optimizer = optarg;
			given[S_OPT] = true;
			break;
		case O_SCHED:
			if (ml_lr_schedule_from_name(optarg) < 0)
				usage_error(synopsis, "unknown schedule '%s' (constant, step, cosine, warmup)", optarg);
			o->schedule = optarg;
			given[S_SCHED] = true;
			break;
#define DBL(K, F, S) case K: o->F = parse_double("--" #F, optarg, synopsis); given[S] = true; break
		DBL(O_LR, lr, S_LR);
		DBL(O_MOM, momentum, S_MOM);
		DBL(O_B1, beta1, S_B1);
		DBL(O_B2, beta2, S_B2);
		DBL(O_EPS, eps, S_EPS);
		DBL(O_WD, wd, S_WD);
		DBL(O_CLIP, clip, S_CLIP);
		DBL(O_GAMMA, lr_gamma, S_GAMMA);
		DBL(O_LRMIN, lr_min, S_LRMIN);
		DBL(O_VAL, val_split, S_VAL);
#undef DBL
#define INT(K, F, S, LO, HI) case K: o->F = parse_int("--" #F, optarg, LO, HI, synopsis); given[S] = true; break
		INT(O_LRSTEP, lr_step, S_LRSTEP, 1, INT32_MAX);
		INT(O_WARM, warmup, S_WARM, 0, INT64_MAX / 2);
		INT(O_BATCH, batch, S_BATCH, 1, 1 << 24);
		INT(O_EPOCHS, epochs, S_EPOCHS, 0, 1000000);
		INT(O_SEED, seed, S_SEED, 0, INT64_MAX);
		INT(O_EVERY, every, S_EVERY, 0, INT64_MAX / 2);
#undef INT
		case O_NEST: o->nesterov = 1; given[S_NEST] = true; break;
		case O_NOSHUF: o->shuffle = 0; given[S_SHUF] = true; break;
		case O_CKPT: r->ckpt = optarg; break;
		case O_RESUME: a->resume = optarg; break;
		case O_DUMP: a->dump = optarg; break;
		case O_DEVICE: r->device = optarg; break;
		case O_THREADS: a->threads = (int)parse_int("--threads", optarg, 1, 256, synopsis); break;
		case O_LOG: a->logpath = optarg; break;
		case O_JSON: a->json = 1; break;
		case O_BUCKET:
			a->dopt.bucket_mb = parse_double("--bucket-mb", optarg, synopsis);
			if (a->dopt.bucket_mb < 0 || a->dopt.bucket_mb > 1 << 20)
				usage_error(synopsis, "--bucket-mb: %g is out of range [0, %d]",
					    a->dopt.bucket_mb, 1 << 20);
			break;
		case O_MPI: a->dmode = ML_DIST_REQUIRE; break;
		case O_QAT: a->qat = true; break;
		case O_KEEPDN: o->keep_dn = 1; given[S_KEEPDN] = true; break;
		case O_MAXALLOC: ml_set_alloc_cap(parse_size("--max-alloc", optarg, synopsis)); break;
		default:
			fprintf(stderr, "usage: %s\n", synopsis);
			exit(EXIT_USAGE);
		}
	}
}

/* check_args: the operand and the combinations of options parse_args cannot see. */
static void
check_args(struct run *r, struct args *a, int argc, char **argv)
{
	const struct opts *o = &r->o;
	if (optind + 1 < argc)
		usage_error(synopsis, "too many operands");
	r->model_path = optind < argc ? argv[optind] : NULL;
	if (r->model_path == NULL && a->resume == NULL)
		usage_error(synopsis, "no model given");
	if (a->dump == NULL && r->data_path == NULL)
		usage_error(synopsis, "--data is required");
	if (a->dump == NULL && r->out == NULL)
		usage_error(synopsis, "-o OUT.mlg is required");
	if (r->out != NULL && strcmp(r->out, "-") == 0)
		usage_error(synopsis, "the output is also the checkpoint: give a file, not '-'");
	if (o->val_split != 0 && !(o->val_split > 0 && o->val_split < 1))
		usage_error(synopsis, "--val-split takes a fraction between 0 and 1");
	if (o->lr <= 0 || o->momentum < 0 || o->wd < 0 || o->clip < 0)
		usage_error(synopsis, "--lr must be positive; --momentum, --weight-decay and --clip-norm not negative");
	if (o->nesterov && o->momentum <= 0 && a->resume == NULL)
		usage_error(synopsis, "--nesterov needs --momentum");
	if (r->ckpt == NULL)
		r->ckpt = r->out;
	a->from = a->resume != NULL ? a->resume : r->model_path;
}

/*
 * setup_dist: under an MPI launcher (or --mpi), join the job: a rank that
 * dies ends all of them; ranks other than 0 are quiet; the cores are
 * shared among the local ranks unless --threads says; every rank must get
 * a sample of the global batch.
 */
static void
setup_dist(struct run *r, struct args *a)
{
	struct ml_err err = { 0 };
	if (ml_dist_init(a->dmode, &a->di, &err) < 0)
		die_err(&err);
	if (a->di.size <= 1)
		return;
	atexit(dist_atexit);
	cli_set_exit_hook(dist_exit);
	if (a->di.rank != 0)
		r->quiet = 1, r->verbose = 0, a->json = 0, quiet_watchdog = 1;
	if (a->threads == 0) {
		long local = a->di.local_size > 0 ? a->di.local_size : 1;
		long per = sysconf(_SC_NPROCESSORS_ONLN) / local;
		a->threads = per > 1 ? (int)per : 1;
	}
	if (r->o.batch < a->di.size)
		die(EXIT_USAGE, "a global --batch of %lld is less than one sample per rank (%d)",
		    (long long)r->o.batch, a->di.size);
}

/*
 * check_outputs: every file the run writes (rank 0 alone writes) is checked
 * before any work, so that a bad path fails now, not after an epoch of
 * training; the --log file is opened.
 */
static void
check_outputs(struct run *r, const struct args *a)
{
	struct ml_err err = { 0 };
	if (ml_dist_rank() != 0)
		return;
	const char *outs[] = { a->dump, r->out, r->ckpt };
	for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
		if (outs[i] != NULL && ml_write_check(outs[i], &err) < 0)
			die_err(&err);
	if (a->dump == NULL && a->logpath != NULL && (r->log = fopen(a->logpath, "a")) == NULL)
		die(EXIT_FAIL, "cannot open '%s': %s", a->logpath, strerror(errno));
}

/*
 * take_state: --resume: the checkpoint's training state parsed (status 3
 * when it is not a JSON object), its options for those not given, the step
 * and epoch it stopped at, and the position and sums of its epoch.
 */
static void
take_state(struct run *r, const char *resume)
{
	struct ml_err err = { 0 };
	struct ml_train *t = r->model->train;
	if (t == NULL || t->config == NULL)
		die(EXIT_INVALID, "%s: not a checkpoint of mltrain (no training state)", resume);
	if (ml_dist_size() > 1)
		dist_resume_state(r->model);
	t = r->model->train;
	if (ml_train_config_parse(&r->cfg, t->config, &err) < 0) {
		if (err.code == ML_ENOMEM)
			die_err(&err);
		die(EXIT_INVALID, "%s: damaged %s", resume, err.msg);
	}
	take_config(&r->o, &r->cfg, resume);
	r->step_no = t->step;
	r->epoch = t->epoch;
	state_int(&r->cfg, "epoch_step", &r->in_epoch, resume);
	ml_train_config_num(&r->cfg, "epoch_loss_sum", &r->loss_sum);
	state_int(&r->cfg, "epoch_correct", &r->correct, resume);
	state_int(&r->cfg, "epoch_seen", &r->seen, resume);
}

/* train_opts: the library's step options from the command line's. */
static void
train_opts(struct ml_train_opts *to, const struct opts *o)
{
	ml_train_opts_init(to);
	to->loss = ml_loss_from_name(o->loss);
	to->optimizer = ml_optim_from_name(o->optimizer);
	to->momentum = o->momentum;
	to->nesterov = o->nesterov != 0;
	to->beta1 = o->beta1;
	to->beta2 = o->beta2;
	to->eps = o->eps;
	to->weight_decay = o->wd;
	to->clip_norm = o->clip;
	to->seed = (uint64_t)o->seed;
}

/*
 * insert_fakequant: --qat: fake-quant ops on the weights (int8 in [-127, 127] as
 * mlquant's integer form) and on the activations they read, whose ranges
 * come from the first batch of the data; a checkpoint of a --qat run has
 * them already, and inserting again adds nothing.
 */
static void
insert_fakequant(struct run *r, const char *from)
{
	struct ml_err err = { 0 };
	bool has = false;
	for (int i = 0; i < r->model->n_nodes && !has; i++)
		has = strcmp(r->model->nodes[i].op_type, "FakeQuant") == 0;
	struct ml_calib *cal = NULL;
	if (!has && ml_calib_load(&cal, r->model, r->data_path, r->o.batch, &err) < 0)
		die_err(&err);
	struct ml_quant_qat_opts qo = { .cal = cal, .weight_qmax = 127 };
	int qrc = ml_quant_insert_fakequant(r->model, &qo, &err);
	ml_calib_free(cal);
	if (qrc < 0)
		die_run(&err, from);
}

/*
 * build_step: the training-step graph of the model (with --qat its
 * fake-quant ops first); on the CPU, the dense layers' fused kernels.
 */
static void
build_step(struct run *r, const struct args *a)
{
	struct ml_err err = { 0 };
	struct ml_train_opts to;
	train_opts(&to, &r->o);
	if (a->qat)
		insert_fakequant(r, a->from);
	if (ml_train_step_graph(&r->step, r->model, &to, &err) < 0)
		die_run(&err, a->from);
	if (r->verbose) {
		int np = 0;
		int64_t ne = 0;
		ml_train_param_count(r->step, &to, &np, &ne);
		fprintf(stderr, "%s: %s: %d parameter tensors, %lld values; step graph of %d nodes\n",
			progname, a->from, np, (long long)ne, r->step->n_nodes);
	}
	/* under MPI the updates keep their nodes, since the gradients must be all-reduced first */
	if (strcmp(r->device, "cpu") == 0 && ml_train_fuse(r->step, ml_dist_size() <= 1, &err) < 0)
		die_run(&err, a->from);
}

/* distribute: under MPI, the gradients' all-reduces, and rank 0's parameters on every rank. */
static void
distribute(struct run *r, struct args *a)
{
	struct ml_err err = { 0 };
	int nb = ml_train_distribute(r->step, &a->dopt, &err);
	if (nb < 0 || ml_dist_bcast_params(r->step, 0, &err) < 0)
		die_run(&err, NULL);
	if (r->verbose)
		fprintf(stderr, "%s: %d ranks (%s): gradients all-reduced in %d bucket%s of "
			"about %g MiB\n", progname, a->di.size,
			a->di.library[0] ? a->di.library : "MPI", nb, nb == 1 ? "" : "s",
			a->dopt.bucket_mb);
}

/* check_resume: a resumed run's data must give the epochs its checkpoint had. */
static void
check_resume(const struct run *r, const char *resume)
{
	int64_t v;
	if (state_int(&r->cfg, "steps_per_epoch", &v, resume) && v != r->spe)
		die(EXIT_INVALID, "%s: the data give %lld steps an epoch, the checkpoint had %lld",
		    r->data_path, (long long)r->spe, (long long)v);
	if (r->in_epoch < 0 || r->correct < 0 || r->seen < 0 || r->in_epoch > r->spe)
		die(EXIT_INVALID, "%s: damaged training state (step %lld of an epoch of %lld)",
		    resume, (long long)r->in_epoch, (long long)r->spe);
}

/* catch_signals: on_signal for SIGINT, SIGTERM and SIGUSR1; on_watchdog for SIGALRM. */
static void
catch_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = on_watchdog;
	sigaction(SIGALRM, &sa, NULL);
}

/* check_ranks_agree: every rank applied the same averaged gradients: check that they agree. */
static void
check_ranks_agree(struct run *r)
{
	struct ml_err err = { 0 };
	double d = 0;
	if (ml_session_sync(r->sess, &err) < 0 ||
	    ml_dist_param_divergence(r->step, 0, &d, &err) < 0)
		die_run(&err, NULL);
	if (d > 0 && ml_dist_rank() == 0)
		warnx("warning: the parameters differ across ranks by up to %g", d);
	else if (r->verbose)
		fprintf(stderr, "%s: the %d ranks hold identical parameters\n", progname,
			ml_dist_size());
}

/* save_final: the final model (eval mode, with the state to resume from), and the checkpoint. */
static void
save_final(struct run *r)
{
	struct ml_err err = { 0 };
	r->in_epoch = 0;
	export_state(r);
	if (ml_dist_rank() == 0 && ml_model_save(r->model, r->out, ML_FMT_MLG, &err) < 0)
		die_err(&err);
	if (ml_dist_rank() == 0 && r->ckpt != r->out && strcmp(r->ckpt, r->out) != 0 &&
	    ml_model_save(r->model, r->ckpt, ML_FMT_MLG, &err) < 0)
		die_err(&err);
}

/* print_json: --json: the run's report on stdout (s0: the step it started at). */
static void
print_json(const struct run *r, const char *from, uint64_t s0, double secs)
{
	printf("{\"model\": ");
	ml_json_str(stdout, from);
	printf(", \"output\": ");
	ml_json_str(stdout, r->out);
	printf(", \"epochs\": %llu, \"steps\": %llu, \"steps_run\": %llu, \"seconds\": %.3f",
	       (unsigned long long)r->epoch, (unsigned long long)r->step_no,
	       (unsigned long long)(r->step_no - s0), secs);
	json_num(stdout, "loss", r->last_loss);
	json_num(stdout, "accuracy", r->last_acc);
	json_num(stdout, r->o.val_split > 0 ? "val_loss" : "test_loss", r->last_eval_loss);
	json_num(stdout, r->o.val_split > 0 ? "val_accuracy" : "test_accuracy", r->last_eval_acc);
	json_num(stdout, "samples_per_s", r->last_sps);
	json_num(stdout, "train_samples_per_s",
		 r->train_secs > 0 ? (double)r->train_samples / r->train_secs : NAN);
	printf("}\n");
}

/* free_run: release the run's sessions, data and graphs. */
static void
free_run(struct run *r)
{
	ml_session_free(r->sess);
	ml_loader_free(r->ld);
	ml_dataset_free(r->train);
	ml_dataset_free(r->eval);
	ml_graph_free(r->step);
	ml_graph_free(r->model);
	ml_train_config_free(&r->cfg);
}

int
main(int argc, char **argv)
{
	static struct run r;
	static struct args a = { .dmode = ML_DIST_AUTO };
	struct ml_err err = { 0 };

	r.o = (struct opts){ .loss = "softmax-cross-entropy", .optimizer = "sgd",
			     .schedule = "constant", .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999,
			     .eps = 1e-8, .lr_gamma = 0.1, .lr_step = 1, .batch = 64, .epochs = 1,
			     .shuffle = 1 };
	ml_dist_opts_init(&a.dopt);
	r.device = "cpu";
	r.last_ckpt = UINT64_MAX;

	cli_init(argc, argv);
	parse_args(&r, &a, argc, argv);
	if (a.version) {
		print_version(r.verbose);
		return finish_stdout();
	}
	check_args(&r, &a, argc, argv);
	if (a.dump == NULL)
		setup_dist(&r, &a);
	check_outputs(&r, &a);
	ml_set_threads(a.threads);
	if (ml_model_load(&r.model, a.from, ML_FMT_AUTO, &err) < 0)
		die_err(&err);
	if (a.resume != NULL)
		take_state(&r, a.resume);
	/*
	 * Subnormal floats flushed to zero in this thread and the kernels'
	 * (FTZ/DAZ): late in training, gradients and softmax tails underflow,
	 * and each operation on a subnormal then costs a microcode assist (the
	 * Fashion-MNIST MLP's second epoch ran 15% slower with them).
	 */
	ml_set_flush_denormals(r.o.keep_dn == 0);
	if (strcmp(r.o.optimizer, "adamw") == 0 && !given[S_WD] && a.resume == NULL)
		r.o.wd = 0.01;
	if (strcmp(r.o.schedule, "warmup") == 0 && r.o.warmup == 0)
		r.o.warmup = ML_LR_WARMUP_DEFAULT;
	if (r.model->n_inputs != 1)
		die(EXIT_UNSUP, "%s: models with %d inputs are not supported (one input takes the data)",
		    a.from, r.model->n_inputs);
	build_step(&r, &a);
	if (a.dump != NULL) {
		if (ml_model_save(r.step, a.dump, ML_FMT_MLG, &err) < 0)
			die_err(&err);
		free_run(&r);
		return finish_stdout();
	}
	if (ml_dist_size() > 1)
		distribute(&r, &a);
	setup_data(&r);
	make_schedule(&r);
	if (a.resume != NULL)
		check_resume(&r, a.resume);
	new_session(&r);
	catch_signals();
	if (r.verbose)
		fprintf(stderr, "%s: training from step %llu, %lld steps an epoch\n", progname,
			(unsigned long long)r.step_no, (long long)r.spe);

	double t0 = ml_now();
	uint64_t s0 = r.step_no;
	train(&r);
	double secs = ml_now() - t0;
	if (ml_dist_size() > 1)
		check_ranks_agree(&r);
	save_final(&r);
	if (r.verbose && ml_cache_note_get() != NULL)
		fprintf(stderr, "%s: %s\n", progname, ml_cache_note_get());
	if (r.log != NULL && fclose(r.log) != 0)
		die(EXIT_FAIL, "write error on '%s'", a.logpath);
	if (a.json)
		print_json(&r, a.from, s0, secs);
	free_run(&r);
	if (ml_dist_size() > 1 && (ml_dist_barrier(&err) < 0 || ml_dist_finalize(&err) < 0))
		die_err(&err);
	dist_clean = true;
	return finish_stdout();
}
