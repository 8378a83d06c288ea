/*
 * mltrain.c: train a model from the command line: load a model and a
 * dataset, build the training-step graph (lib/train) and run the library's
 * training loop (struct ml_trainer, lib/train/trainer.c), which evaluates
 * each epoch and writes checkpoints that resume exactly; its hooks are
 * this tool's part: the progress bar, the report of each epoch, the
 * signals. At the end, the trained model for inference.
 */
#include <errno.h>
#include <stddef.h>
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
	"               [--batch N] [--accumulate K] [--epochs N] [--seed S] [--val-split F]\n"
	"               [--checkpoint-every N] [--precision P] [--loss-scale S]\n"
	"               [--loss-scale-window N]\n"
	"               [--checkpoint FILE] [--resume CKPT.mlg] [--device DEV] [--threads N]\n"
	"               [--log FILE] [--json] [--bucket-mb MiB] [--allreduce-dtype T] [--mpi]\n"
	"               [--qat] [--keep-denormals]\n"
	"               [--pipeline auto|measured|FILE] [--micro-batches M]\n"
	"               [--schedule gpipe|1f1b]\n"
	"               [--pipeline-trace FILE]\n"
	"               [--augment A] [--normalize M/S] [--workers N] [--shape NAME=DIMS]...\n"
	"               [--[no-]progress]\n"
	"               [MODEL]";

static const char help_text[] =
	"Train a model (.mlt, .mlg or .onnx) on a dataset; write the trained model.\n"
	"\n"
	"  -d, --data PATH         training data: a folder (IDX, x_train.npy/y_train.npy,\n"
	"                          train.npz or train.csv, and their test sets; train/ and\n"
	"                          test/ of class folders of PNG/JPEG images; CIFAR-10's\n"
	"                          binary batches) or a .npz/.csv\n"
	"  -o, --output FILE       the trained model for inference (.mlg): parameters only\n"
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
	"      --batch N           samples per step (default 64); a model exported with a\n"
	"                          fixed batch is re-batched to any size (-v says so)\n"
	"      --accumulate K      sum the gradients of K batches (micro-batches) and update\n"
	"                          once with their mean: trains as batch K*N (default 1)\n"
	"      --precision P       fp32 (default), bf16 or fp16: MatMul, Gemm, Conv and\n"
	"                          their gradients' products on operands rounded to P,\n"
	"                          with f32 sums; weights, optimizer state, loss and\n"
	"                          activations stay f32 (fp16: --device cl only)\n"
	"      --loss-scale S      scale the loss's gradient by S, unscaled in the update;\n"
	"                          a step whose gradients overflow is skipped. S a number\n"
	"                          (fixed), dynamic[:S] (halved on an overflow, doubled\n"
	"                          after --loss-scale-window clean steps; S 65536), or\n"
	"                          off (default: dynamic for fp16, off otherwise)\n"
	"      --loss-scale-window N  clean steps before a dynamic scale doubles (2000)\n"
	"      --epochs N          epochs to train in all, resumed ones included (default 1)\n"
	"      --seed S            seed of shuffling, splits and dropout (default 0)\n"
	"      --no-shuffle        keep the data in file order\n"
	"      --augment A         augment training images: crop=P (random crop of the image\n"
	"                          padded with P zeros), flip (horizontal, p 1/2), or both\n"
	"                          (crop=4,flip); seeded per sample by --seed and the epoch\n"
	"      --normalize M/S     (x - M) / S per channel on all images, training and\n"
	"                          evaluation (M, S: one value or one per channel)\n"
	"      --workers N         threads building batches (default 1; 1 to 16)\n"
	"      --val-split F       hold out fraction F of the training data for validation\n"
	"                          (default: evaluate the test set, when there is one)\n"
	"      --checkpoint-every N  write a checkpoint every N steps (default: each epoch)\n"
	"      --checkpoint FILE   write checkpoints, with the optimizer state, to FILE\n"
	"                          (default: the output's name, .mlg replaced by .ckpt.mlg)\n"
	"      --resume CKPT       continue the run that wrote checkpoint CKPT\n"
	"      --dump-step FILE    write the training-step graph to FILE and exit\n"
	"      --device DEV        cpu (default), cl, cl:N or auto; with --pipeline, one\n"
	"                          device a stage: cpu,cl:0 (the CPU may take several)\n"
	"      --pipeline STAGES   pipeline parallelism: the model cut into stages, each on\n"
	"                          its device and thread, the batch in micro-batches;\n"
	"                          STAGES is auto (as many stages as --device names,\n"
	"                          of even FLOPs), measured (of even node times measured\n"
	"                          on each stage's device at the start: faster on unequal\n"
	"                          devices, but the cut may differ between runs) or a\n"
	"                          file of lines NODE STAGE, FIRST..LAST STAGE and\n"
	"                          stage N DEVICE (man mltrain)\n"
	"      --micro-batches M   with --pipeline: micro-batches a batch is split into\n"
	"                          (default 4; must divide --batch); one update a batch\n"
	"      --schedule S        with --pipeline: gpipe (default: every forward, then\n"
	"                          every backward) or 1f1b (one forward, one backward)\n"
	"      --pipeline-trace FILE  with --pipeline: the last batch as a Chrome trace,\n"
	"                          one lane a stage\n"
	"      --threads N         threads for kernels and BLAS (default: all cores)\n"
	"      --bucket-mb MiB     under mpirun: all-reduce gradients in MiB buckets (default 25)\n"
	"      --allreduce-dtype T under mpirun: send the gradients as f32 (default), bf16 or\n"
	"                          fp16, summed in f32: 16 bits halve the bytes all-reduced\n"
	"      --mpi               train with MPI even when no MPI launcher is detected\n"
	"      --qat               quantisation-aware training: fake-quantise weights and\n"
	"                          activations (ranges from the first batch); mlquant then\n"
	"                          converts the result with the trained ranges\n"
	"      --keep-denormals    keep subnormal floats in the CPU kernels (default: flush\n"
	"                          them to zero, much faster once gradients underflow)\n"
	"      --shape NAME=DIMS   give input NAME the shape DIMS (Nx1x28x28, a name making\n"
	"                          a dim symbolic) and infer the model again, rewriting\n"
	"                          Reshape targets that hold the old sizes\n"
	"      --log FILE          append one JSON line per epoch to FILE\n"
	"      --json              print a JSON report on stdout at the end\n"
	"      --progress          draw the progress bar of each epoch (steps, rate, ETA,\n"
	"                          running loss and accuracy) on stderr even when it is\n"
	"                          no terminal\n"
	"      --no-progress       draw no progress bar (the default unless on a terminal)\n"
	"      --max-alloc SIZE    allocate at most SIZE bytes (K, M, G suffixes)\n"
	"  -q, --quiet             print nothing but errors\n"
	"  -v, --verbose           print more (the step graph, checkpoints, what it wrote)\n"
	"  -h, --help              print this help and exit\n"
	"  -V, --version           print the version and exit\n";

/* The options, as given or as the checkpoint saved them. */
struct opts {
	const char *loss, *optimizer, *schedule;
	double lr, momentum, beta1, beta2, eps, wd, clip, lr_gamma, lr_min, val_split;
	int64_t nesterov, lr_step, warmup, batch, epochs, seed, shuffle, every, keep_dn, accum;
	int prec;		/* enum ml_precision; kept apart from take_config's table */
	double ls;		/* --loss-scale: the scale; 0: off; -1: the precision's default */
	int64_t ls_window;	/* clean steps before it doubles; 0: fixed; -1: 2000 if dynamic */
};

enum { S_LOSS, S_OPT, S_SCHED, S_LR, S_MOM, S_B1, S_B2, S_EPS, S_WD, S_CLIP, S_GAMMA, S_LRMIN,
       S_VAL, S_NEST, S_LRSTEP, S_WARM, S_BATCH, S_EPOCHS, S_SEED, S_SHUF, S_EVERY,
       S_KEEPDN, S_ACCUM, S_N };
static bool given[S_N];
static bool prec_given, ls_given, ls_dynamic;
static int64_t ls_window_given;	/* --loss-scale-window; 0: not given */

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
	struct ml_trainer *tr;		/* the training loop (lib/train/trainer.c) */
	struct ml_train_eval *ev;	/* the evaluation of r->eval (make_eval) */
	struct ml_dataset *train, *eval;
	struct ml_loader *ld;
	const char *xname;
	struct ml_batch_spec xs, ys;
	int64_t classes;
	int64_t spe;		/* steps per epoch */
	struct ml_lr_schedule sched;	/* the learning rate of each step (make_schedule) */
	struct ml_train_state ck;	/* --resume: the state of the run the checkpoint saved */
	int verbose, quiet;
	struct ml_augment aug, norm;	/* training batches' augmentation; evaluation's normalisation */
	int workers;
	const char *device;
	const char *eval_device;	/* the evaluation's: the device, or the first stage's */
	const char *pipeline;	/* --pipeline: "auto" or a stage file; NULL none */
	const char *ptrace;	/* --pipeline-trace */
	int micro, psched;
	struct ml_pipeline_opts po;	/* make_pipeline */
	struct cli_pipeline cp;
	FILE *log;
	/* the last epoch's figures, for --json */
	double train_secs;	/* time in training steps and batches, this process */
	int64_t train_samples;
	double last_loss, last_acc, last_eval_loss, last_eval_acc, last_sps;
};

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
	to->accumulate = (int)o->accum;
	to->precision = o->prec;
	to->loss_scale = o->ls > 0 ? o->ls : 0;
}

/*
 * run_state: the state of the run that a checkpoint keeps (lib/ml_train.h),
 * where the trainer starts: at the resumed checkpoint's place, else at 0.
 */
static void
run_state(const struct run *r, struct ml_train_state *st)
{
	const struct opts *o = &r->o;
	ml_train_state_init(st);
	train_opts(&st->opts, o);
	st->sched = r->sched;
	st->batch = o->batch;
	st->shuffle = o->shuffle != 0;
	st->val_split = o->val_split;
	st->checkpoint_every = o->every;
	st->keep_denormals = o->keep_dn != 0;
	st->step = r->ck.step;
	st->epoch = r->ck.epoch;
	st->epoch_step = r->ck.epoch_step;
	st->epoch_loss_sum = r->ck.epoch_loss_sum;
	st->epoch_correct = r->ck.epoch_correct;
	st->epoch_seen = r->ck.epoch_seen;
	st->loss_scale_window = o->ls > 0 ? o->ls_window : 0;
	st->loss_scale_clean = ls_given ? 0 : r->ck.loss_scale_clean;
	st->loss_scale_skipped = r->ck.loss_scale_skipped;
}

/*
 * take_config: the options the checkpoint saved (st, its run's state) for
 * those not given on the command line; options that fix the data order
 * must not differ, nor the loss and the optimizer.
 */
static void
take_config(struct opts *o, const struct ml_train_state *st)
{
	static const char *const keys[S_N] = {
		"loss", "optimizer", "lr_schedule", "lr", "momentum", "beta1", "beta2", "eps",
		"weight_decay", "clip_norm", "lr_gamma", "lr_min", "val_split", "nesterov",
		"lr_step", "warmup_steps", "batch", "epochs", "seed", "shuffle", "checkpoint_every",
		"keep_denormals", "accumulate",
	};
	static const size_t off[S_N] = {
		offsetof(struct opts, loss), offsetof(struct opts, optimizer),
		offsetof(struct opts, schedule), offsetof(struct opts, lr),
		offsetof(struct opts, momentum), offsetof(struct opts, beta1),
		offsetof(struct opts, beta2), offsetof(struct opts, eps), offsetof(struct opts, wd),
		offsetof(struct opts, clip), offsetof(struct opts, lr_gamma),
		offsetof(struct opts, lr_min), offsetof(struct opts, val_split),
		offsetof(struct opts, nesterov), offsetof(struct opts, lr_step),
		offsetof(struct opts, warmup), offsetof(struct opts, batch),
		offsetof(struct opts, epochs), offsetof(struct opts, seed),
		offsetof(struct opts, shuffle), offsetof(struct opts, every),
		offsetof(struct opts, keep_dn), offsetof(struct opts, accum),
	};
	const struct ml_lr_schedule *sc = &st->sched;
	struct opts ck = {
		.loss = ml_loss_name(st->opts.loss), .optimizer = ml_optim_name(st->opts.optimizer),
		.schedule = ml_lr_schedule_name(sc->kind), .lr = sc->lr,
		.momentum = st->opts.momentum, .beta1 = st->opts.beta1, .beta2 = st->opts.beta2,
		.eps = st->opts.eps, .wd = st->opts.weight_decay, .clip = st->opts.clip_norm,
		.lr_gamma = sc->gamma, .lr_min = sc->lr_min, .val_split = st->val_split,
		.nesterov = st->opts.nesterov, .lr_step = sc->step_epochs, .warmup = sc->warmup,
		.batch = st->batch, .epochs = sc->epochs, .seed = (int64_t)st->opts.seed,
		.shuffle = st->shuffle, .every = st->checkpoint_every, .keep_dn = st->keep_denormals,
		.accum = st->opts.accumulate > 1 ? st->opts.accumulate : 1,
	};
	for (int i = 0; i < S_N; i++) {
		bool order = i == S_BATCH || i == S_SEED || i == S_SHUF || i == S_VAL;
		char *mine = (char *)o + off[i];
		const char *theirs = (const char *)&ck + off[i];
		if (i <= S_SCHED) {
			const char **m = (const char **)(void *)mine;
			const char *t = *(const char *const *)(const void *)theirs;
			if (given[i] && strcmp(t, *m) != 0 && i != S_SCHED)
				die(EXIT_USAGE, "--%s %s differs from the checkpoint's %s", keys[i], *m, t);
			if (!given[i])
				*m = t;
			continue;
		}
		size_t n = i <= S_VAL ? sizeof(double) : sizeof(int64_t);
		if (given[i] && order && memcmp(mine, theirs, n) != 0)
			die(EXIT_USAGE,
			    "--%s differs from the checkpoint's (%g); a resumed run keeps its data order",
			    keys[i], i <= S_VAL ? *(const double *)(const void *)theirs :
					    (double)*(const int64_t *)(const void *)theirs);
		if (!given[i])
			memcpy(mine, theirs, n);
	}
	/*
	 * The precision is the checkpoint's unless given: the weights and the
	 * optimizer state are f32 in both, so a resume may change it (the run
	 * then differs from one that kept it by the products' rounding).
	 */
	if (!prec_given)
		o->prec = st->opts.precision;
	/* and so is loss scaling, where the run stands (the scale, its clean steps) */
	if (!ls_given) {
		o->ls = st->opts.loss_scale;
		o->ls_window = st->loss_scale_window;
	}
}

/*
 * check_precision: what the device cannot do is refused before any work:
 * no device here computes fp16 steps, and the OpenCL step has f32 kernels
 * only (it would ignore the precision, so asking for it there is an error).
 */
static void
check_precision(struct run *r)
{
	const char *p = ml_precision_name(r->o.prec);
	/* one OpenCL device; a --pipeline list of CPU stages is the CPU */
	bool cl = strncmp(r->device, "cl", 2) == 0 && strchr(r->device, ',') == NULL;
	bool cpu = true;
	for (const char *d = r->device; cpu; d++) {
		size_t n = strcspn(d, ",");
		cpu = n == 3 && strncmp(d, "cpu", 3) == 0;
		if (d[n] == '\0')
			break;
		d += n;
	}
	if (r->o.prec == ML_PREC_F16 && !cl)
		die(EXIT_UNSUP, "--precision fp16: --device %s has no fp16 products (use --device cl; "
		    "bf16 is the CPU's half precision)", r->device);
	if (r->o.prec != ML_PREC_F32 && !cl && !cpu)
		die(EXIT_UNSUP, "--precision %s: --device %s may train in fp32 only (use --device cpu "
		    "or cl)", p != NULL ? p : "?", r->device);
	/* loss scaling: fp16's dynamic default, which gradient accumulation cannot have */
	struct opts *o = &r->o;
	if (o->ls < 0) {
		o->ls = o->prec == ML_PREC_F16 && o->accum <= 1 ? 65536 : 0;
		o->ls_window = -1;
	} else if (ls_given) {
		o->ls_window = ls_dynamic ? -1 : 0;
	}
	if (ls_window_given > 0 && (o->ls == 0 || o->ls_window == 0))
		usage_error(synopsis, "--loss-scale-window: the loss scale is not dynamic");
	if (o->ls > 0 && ls_window_given > 0)
		o->ls_window = ls_window_given;
	else if (o->ls > 0 && o->ls_window < 0)
		o->ls_window = 2000;
	if (o->ls > 0 && o->accum > 1)
		die(EXIT_UNSUP, "--loss-scale: not with --accumulate (use --loss-scale off)");
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
	sc->steps_per_epoch = r->spe / (o->accum > 1 ? o->accum : 1);	/* optimizer steps */
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

/* on_checkpoint: -v: say where and why a checkpoint was written. */
static int
on_checkpoint(void *ctx, const struct ml_trainer *t, int why, struct ml_err *e)
{
	static const char *const whys[] = {
		[ML_TRAINER_CKPT_CALL] = "interrupted", [ML_TRAINER_CKPT_ASKED] = "SIGUSR1",
		[ML_TRAINER_CKPT_EVERY] = "every N steps", [ML_TRAINER_CKPT_EPOCH] = "end of epoch",
	};
	const struct run *r = ctx;
	(void)e;
	if (r->verbose) {
		cli_progress_clear();
		fprintf(stderr, "%s: checkpoint at step %llu (%s) in %s\n", progname,
			(unsigned long long)ml_trainer_state(t)->step, whys[why], r->ckpt);
	}
	return 0;
}

/*
 * progress: the bar of the epoch in progress (cmd/cli.c: steps done of
 * the epoch's, their rate, the ETA) with the running mean loss and
 * accuracy of the epoch so far; the trainer's on_epoch_begin (the bar
 * from where the epoch starts, mid-way on resume) and on_step hook.
 */
static int
progress(void *ctx, const struct ml_trainer *t, struct ml_err *e)
{
	const struct run *r = ctx;
	const struct ml_train_state *st = ml_trainer_state(t);
	char what[64], extra[96] = "";
	double n = (double)st->epoch_seen;
	(void)e;
	if (!cli_progress_on())
		return 0;
	snprintf(what, sizeof what, "epoch %llu/%lld", (unsigned long long)st->epoch + 1,
		 (long long)r->o.epochs);
	int k = st->epoch_seen > 0 ? snprintf(extra, sizeof extra, "loss %.4f",
					      st->epoch_loss_sum / n) : 0;
	if (st->epoch_seen > 0 && r->classes > 0 && k > 0 && (size_t)k < sizeof extra)
		snprintf(extra + k, sizeof extra - (size_t)k, " acc %.2f%%",
			 100.0 * (double)st->epoch_correct / n);
	cli_progress_update(what, st->epoch_step, r->spe, extra);
	return 0;
}

/*
 * make_eval: the evaluation of the model on r->eval (lib/train's graph of
 * the model, the loss and the accuracy), in batches of 1000 on the run's
 * device; it takes the step's weights at each epoch's end.
 */
static void
make_eval(struct run *r)
{
	struct ml_err err = { 0 };
	struct ml_train_eval_opts eo;
	if (r->eval == NULL)
		return;
	ml_train_eval_opts_init(&eo);
	eo.loss = ml_loss_from_name(r->o.loss);
	eo.accuracy = r->classes > 0;
	eo.device = r->eval_device;
	eo.augment = &r->norm;
	if (ml_train_eval_new(&r->ev, r->model, &eo, &err) < 0)
		die_run(&err, r->model_path);
}

/* setup_data: load, split, check against the model, make the loader and the evaluation. */
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
	const struct ml_tensor *xt = r->step->tensors[r->step->inputs[0]];
	r->xname = xt->name;
	if (xt->rank >= 1 && xt->dims[0] >= 0 && xt->dims[0] != r->o.batch)
		die(EXIT_INVALID, "%s: the model's input '%s' has a fixed batch of %lld, not %lld",
		    r->model_path, xt->name, (long long)xt->dims[0], (long long)r->o.batch);
	if (ml_train_batch_specs(r->step, r->train, &r->xs, &r->ys, &r->classes, &err) < 0)
		die_run(&err, r->model_path);
	struct ml_batch_spec xs = r->xs, ys = r->ys;
	if (ml_dataset_check(r->train, &r->xs, &r->ys, r->classes, &err) < 0)
		die_err(&err);
	if (r->eval != NULL && ml_dataset_check(r->eval, &xs, &ys, r->classes, &err) < 0)
		die_err(&err);
	/* the normalisation goes with the augmentation of training batches, and alone to evaluation's */
	r->aug.nnorm = r->norm.nnorm;
	memcpy(r->aug.mean, r->norm.mean, sizeof r->aug.mean);
	memcpy(r->aug.std, r->norm.std, sizeof r->aug.std);
	if (ml_augment_check(&r->aug, &r->xs, &err) < 0)
		die(EXIT_INVALID, "%s: %s", r->model_path, err.msg);
	struct ml_loader_opts lo = { .batch = r->o.batch, .shuffle = r->o.shuffle != 0,
				     .prefetch = true, .seed = (uint64_t)r->o.seed, .x = r->xs,
				     .y = r->ys, .drop_last = xt->rank >= 1 && xt->dims[0] >= 0,
				     .workers = r->workers, .augment = &r->aug };
	if (ml_loader_new(&r->ld, r->train, &lo, &err) < 0)
		die_err(&err);
	r->spe = ml_loader_batches(r->ld);
	if (r->spe == 0)
		die(EXIT_INVALID, "%s: fewer samples than one batch", r->data_path);
	if (r->o.accum > 1 && r->spe % r->o.accum != 0)
		die(EXIT_INVALID, "--accumulate %lld does not divide the %lld batches of an epoch "
		    "(%lld samples in batches of %lld%s)", (long long)r->o.accum, (long long)r->spe,
		    (long long)r->train->n, (long long)r->o.batch,
		    lo.drop_last ? ", the last partial one dropped" : "");
	make_eval(r);
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
	long long bps = (long long)((double)st.bytes / n + 0.5);
	const char *wire = st.buckets > 0 ? ml_dist_wire_name(st.wire) : "none";
	if (json)
		fprintf(fp, ", \"ranks\": %d, \"dist_steps\": %lld, \"allreduce_ms_per_step\": %.4f, "
			"\"wait_ms_per_step\": %.4f, \"metrics_ms_per_step\": %.4f, "
			"\"allreduce_mb_per_step\": %.4f, \"allreduce_bytes_per_step\": %lld, "
			"\"allreduce_dtype\": \"%s\", \"comm_share\": %.4f", ml_dist_size(),
			(long long)st.steps, ar, wt, mt, (double)st.bytes / n / (1 << 20), bps, wire,
			share);
	else
		fprintf(fp, "%s: rank %d of %d: all-reduce %.3f ms/step (%.3f ms not hidden) of "
			"%lld bytes/step (%s), metrics %.3f ms/step: %.1f%% of the epoch waiting on "
			"communication\n", progname, ml_dist_rank(), ml_dist_size(), ar, wt, bps, wire,
			mt, 100 * share);
}

/*
 * on_loss_scale: -v and --log: a step skipped for an overflow, or the scale
 * doubled, with the step's number (the skipped step counts).
 */
static int
on_loss_scale(void *ctx, const struct ml_trainer *t, double old, bool skipped, struct ml_err *e)
{
	struct run *r = ctx;
	const struct ml_train_state *st = ml_trainer_state(t);
	unsigned long long step = (unsigned long long)st->step + 1;
	(void)e;
	if (r->verbose) {
		cli_progress_end(false);
		if (skipped)
			fprintf(stderr, "%s: step %llu: the gradients overflow at loss scale %g: step "
				"skipped, scale %g\n", progname, step, old, st->opts.loss_scale);
		else
			fprintf(stderr, "%s: step %llu: %lld clean steps: loss scale %g\n", progname,
				step, (long long)st->loss_scale_window, st->opts.loss_scale);
	}
	if (r->log != NULL)
		fprintf(r->log, "{\"step\": %llu, \"loss_scale\": %.17g, \"previous\": %.17g, "
			"\"overflow\": %s}\n", step, st->opts.loss_scale, old,
			skipped ? "true" : "false");
	return 0;
}

/*
 * report_epoch: the trainer's on_epoch hook: the epoch's line on stderr
 * (it replaces the bar), its --log line, and its figures for --json.
 */
static int
report_epoch(void *ctx, const struct ml_trainer *t, const struct ml_trainer_epoch *ep,
	     struct ml_err *e)
{
	struct run *r = ctx;
	double tl = ep->loss, ta = ep->acc, vl = ep->eval_loss, va = ep->eval_acc;
	double secs = ep->secs, sps = ep->samples_per_s;
	(void)t, (void)e;
	cli_progress_end(false);
	r->train_secs += secs;
	r->train_samples += ep->samples;
	const char *what = r->o.val_split > 0 ? "val" : "test";
	if (!r->quiet) {
		fprintf(stderr, "epoch %llu/%lld: loss %.4f", (unsigned long long)ep->epoch,
			(long long)r->o.epochs, tl);
		if (!isnan(ta))
			fprintf(stderr, " acc %.2f%%", 100 * ta);
		if (r->eval != NULL) {
			fprintf(stderr, ", %s loss %.4f", what, vl);
			if (!isnan(va))
				fprintf(stderr, " acc %.2f%%", 100 * va);
		}
		fprintf(stderr, ", %.0f samples/s, %.1f s\n", sps, secs);
		if (r->verbose)
			fprintf(stderr, "%s: waited %.3f s for the loader, %.1f%% of the epoch\n",
				progname, ep->loader_wait_s,
				secs > 0 ? 100 * ep->loader_wait_s / secs : 0.0);
	}
	if (r->verbose && ml_dist_size() > 1)
		log_dist(stderr, secs, false);
	if (r->log != NULL) {
		fprintf(r->log, "{\"epoch\": %llu, \"step\": %llu, \"loss\": %.6g",
			(unsigned long long)ep->epoch, (unsigned long long)ep->step, tl);
		if (!isnan(ta))
			fprintf(r->log, ", \"accuracy\": %.6g", ta);
		if (r->eval != NULL) {
			fprintf(r->log, ", \"%s_loss\": %.6g", what, vl);
			if (!isnan(va))
				fprintf(r->log, ", \"%s_accuracy\": %.6g", what, va);
		}
		fprintf(r->log, ", \"samples_per_s\": %.1f, \"seconds\": %.3f, \"loader_wait_s\": "
			"%.4f, \"lr\": %.6g", sps, secs, ep->loader_wait_s, ep->lr);
		if (ml_trainer_state(t)->opts.loss_scale > 0)
			fprintf(r->log, ", \"loss_scale\": %.17g, \"skipped_steps\": %lld",
				ml_trainer_state(t)->opts.loss_scale, (long long)ep->skipped);
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
	return 0;
}

static void
json_num(FILE *fp, const char *key, double v)
{
	if (isnan(v))
		fprintf(fp, ", \"%s\": null", key);
	else
		fprintf(fp, ", \"%s\": %.6g", key, v);
}

/*
 * poll_signals: the trainer's question after each step: stop (SIGINT or SIGTERM,
 * the signal's number), and a checkpoint (SIGUSR1, whose flag this takes).
 */
static int
poll_signals(void *ctx, bool *checkpoint)
{
	(void)ctx;
	*checkpoint = got_usr1 != 0;
	if (*checkpoint)
		got_usr1 = 0;
	return got_int;
}

/* What the command line gives besides the training options (struct opts). */
struct args {
	const char *resume, *dump, *logpath;
	const char *from;	/* the model read: the checkpoint resumed, else MODEL */
	int threads, json, dmode, progress;
	bool qat, version;
	struct cli_shapes shapes;	/* --shape */
	struct ml_dist_opts dopt;
	struct ml_dist_info di;
};

/*
 * rebatch: a model exported with a fixed batch (a PyTorch export at batch 4)
 * gets a symbolic one, N, so that it trains at --batch and evaluates at
 * its own batch; the trained model then runs at any batch. A model that
 * cannot take N (a class token's Expand, which takes sizes only) gets
 * --batch itself, and one that cannot take that either (a constant made
 * at the export's batch) but whose batch is --batch trains as it is. An
 * input that --shape set is left as it is.
 */
static void
rebatch(struct run *r, const struct args *a)
{
	struct ml_err err = { 0 };
	const struct ml_graph *g = r->model;
	for (int i = 0; g->n_inputs == 1 && i < a->shapes.n; i++)
		if (strcmp(a->shapes.a[i].name, g->tensors[g->inputs[0]]->name) == 0)
			return;
	int64_t old = 0;
	int nr = 0, rc = ml_train_rebatch(r->model, "N", &old, &nr, &err);
	const struct ml_tensor *t = g->tensors[g->inputs[0]];
	char to[32] = "N";
	if (rc < 0 && err.code == ML_ENOTSUP && old != r->o.batch) {
		struct ml_err e2 = { 0 };
		struct ml_shape_arg s = { .name = t->name, .rank = t->rank };
		memcpy(s.dims, t->dims, sizeof s.dims);
		memcpy(s.sym, t->sym, sizeof s.sym);
		s.dims[0] = r->o.batch;
		s.sym[0] = NULL;
		if (ml_graph_set_input_shapes(r->model, &s, 1, &nr, &e2) == 0) {
			rc = 1;
			snprintf(to, sizeof to, "%lld", (long long)r->o.batch);
		}
	}
	if (rc < 0 && old == r->o.batch) {
		if (r->verbose)
			fprintf(stderr, "%s: %s: input '%s' keeps its fixed batch of %lld "
				"(a symbolic one: %s)\n", progname, a->from, t->name,
				(long long)old, err.msg);
		return;
	}
	if (rc < 0)
		die(ml_exit_status(err.code),
		    "%s: the model's input '%s' has a fixed batch of %lld that cannot be changed "
		    "(%s); give --shape", a->from, t->name, (long long)old, err.msg);
	if (rc > 0 && r->verbose)
		fprintf(stderr, "%s: %s: input '%s' had a fixed batch of %lld; re-batched to %s "
			"(--batch %lld), %d Reshape target%s rewritten\n", progname, a->from,
			ml_graph_t(r->model, r->model->inputs[0])->name, (long long)old, to,
			(long long)r->o.batch, nr, nr == 1 ? "" : "s");
}

/* parse_loss_scale: --loss-scale S (fixed), dynamic[:S] or off into o. */
static void
parse_loss_scale(struct opts *o, const char *s)
{
	ls_given = true;
	ls_dynamic = strncmp(s, "dynamic", 7) == 0 && (s[7] == '\0' || s[7] == ':');
	if (strcmp(s, "off") == 0) {
		o->ls = 0;
		return;
	}
	const char *v = ls_dynamic ? (s[7] == ':' ? s + 8 : NULL) : s;
	o->ls = v != NULL ? parse_double("--loss-scale", v, synopsis) : 65536;
	if (!(o->ls >= 0x1p-24 && o->ls <= 0x1p64))
		usage_error(synopsis, "--loss-scale: %s is not a scale from 2^-24 to 2^64", v);
}

/* parse_args: read argv into r's options and a; usage errors exit 2, -h exits 0. */
static void
parse_args(struct run *r, struct args *a, int argc, char **argv)
{
	enum { O_LOSS = 256, O_OPT, O_LR, O_MOM, O_NEST, O_B1, O_B2, O_EPS, O_WD, O_CLIP, O_SCHED,
	       O_LRSTEP, O_GAMMA, O_LRMIN, O_WARM, O_BATCH, O_EPOCHS, O_SEED, O_NOSHUF, O_VAL,
	       O_EVERY, O_CKPT, O_RESUME, O_DUMP, O_DEVICE, O_THREADS, O_LOG, O_JSON, O_MAXALLOC,
	       O_BUCKET, O_WIRE, O_MPI, O_QAT, O_KEEPDN, O_AUG, O_NORM, O_WORKERS, O_SHAPE, O_ACCUM,
	       O_PREC, O_LSCALE, O_LSWIN, O_PIPE, O_MICRO, O_SCHEDULE, O_PTRACE };
	struct ml_err err = { 0 };
	static const struct option longopts[] = {
		{ "accumulate", required_argument, NULL, O_ACCUM },
		{ "precision", required_argument, NULL, O_PREC },
		{ "loss-scale", required_argument, NULL, O_LSCALE },
		{ "loss-scale-window", required_argument, NULL, O_LSWIN },
		{ "pipeline", required_argument, NULL, O_PIPE },
		{ "pipeline-trace", required_argument, NULL, O_PTRACE },
		{ "micro-batches", required_argument, NULL, O_MICRO },
		{ "schedule", required_argument, NULL, O_SCHEDULE },
		{ "allreduce-dtype", required_argument, NULL, O_WIRE },
		{ "augment", required_argument, NULL, O_AUG },
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
		{ "normalize", required_argument, NULL, O_NORM },
		{ "no-progress", no_argument, NULL, CLI_OPT_NO_PROGRESS },
		{ "no-shuffle", no_argument, NULL, O_NOSHUF },
		{ "optimizer", required_argument, NULL, O_OPT },
		{ "output", required_argument, NULL, 'o' },
		{ "progress", no_argument, NULL, CLI_OPT_PROGRESS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "resume", required_argument, NULL, O_RESUME },
		{ "seed", required_argument, NULL, O_SEED },
		{ "shape", required_argument, NULL, O_SHAPE },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "val-split", required_argument, NULL, O_VAL },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ "warmup-steps", required_argument, NULL, O_WARM },
		{ "weight-decay", required_argument, NULL, O_WD },
		{ "workers", required_argument, NULL, O_WORKERS },
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
		INT(O_ACCUM, accum, S_ACCUM, 1, 65536);
#undef INT
		case O_PREC:
			if (ml_precision_from_name(optarg) < 0)
				usage_error(synopsis, "unknown precision '%s' (fp32, bf16, fp16)", optarg);
			o->prec = ml_precision_from_name(optarg);
			prec_given = true;
			break;
		case O_LSCALE: parse_loss_scale(o, optarg); break;
		case O_LSWIN:
			ls_window_given = parse_int("--loss-scale-window", optarg, 1, INT32_MAX,
						    synopsis);
			break;
		case O_NEST: o->nesterov = 1; given[S_NEST] = true; break;
		case O_NOSHUF: o->shuffle = 0; given[S_SHUF] = true; break;
		case O_CKPT: r->ckpt = optarg; break;
		case O_RESUME: a->resume = optarg; break;
		case O_SHAPE: cli_add_shape(&a->shapes, optarg, synopsis); break;
		case O_DUMP: a->dump = optarg; break;
		case O_DEVICE: r->device = optarg; break;
		case O_PIPE: r->pipeline = optarg; break;
		case O_PTRACE: r->ptrace = optarg; break;
		case O_MICRO: r->micro = (int)parse_int("--micro-batches", optarg, 1, 4096, synopsis); break;
		case O_SCHEDULE:
			if ((r->psched = ml_pipe_schedule_from_name(optarg)) < 0)
				die(EXIT_USAGE, "unknown schedule '%s' (gpipe, 1f1b)", optarg);
			break;
		case O_THREADS: a->threads = (int)parse_int("--threads", optarg, 1, 256, synopsis); break;
		case O_LOG: a->logpath = optarg; break;
		case O_JSON: a->json = 1; break;
		case O_BUCKET:
			a->dopt.bucket_mb = parse_double("--bucket-mb", optarg, synopsis);
			if (a->dopt.bucket_mb < 0 || a->dopt.bucket_mb > 1 << 20)
				usage_error(synopsis, "--bucket-mb: %g is out of range [0, %d]",
					    a->dopt.bucket_mb, 1 << 20);
			break;
		case O_WIRE:
			/* one line: the message names the values allowed */
			if (ml_dist_wire_parse(optarg, &a->dopt.wire, &err) < 0)
				die(EXIT_USAGE, "--allreduce-dtype: %s", err.msg);
			break;
		case O_MPI: a->dmode = ML_DIST_REQUIRE; break;
		case O_QAT: a->qat = true; break;
		case O_KEEPDN: o->keep_dn = 1; given[S_KEEPDN] = true; break;
		case O_AUG:
			if (ml_augment_parse(&r->aug, optarg, &err) < 0)
				usage_error(synopsis, "--augment: %s", err.msg);
			break;
		case O_NORM:
			if (ml_normalize_parse(&r->norm, optarg, &err) < 0)
				usage_error(synopsis, "%s", err.msg);
			break;
		case O_WORKERS: r->workers = (int)parse_int("--workers", optarg, 1, 16, synopsis); break;
		case O_MAXALLOC: ml_set_alloc_cap(parse_size("--max-alloc", optarg, synopsis)); break;
		case CLI_OPT_PROGRESS: a->progress = CLI_PROGRESS_ON; break;
		case CLI_OPT_NO_PROGRESS: a->progress = CLI_PROGRESS_OFF; break;
		default:
			fprintf(stderr, "usage: %s\n", synopsis);
			exit(EXIT_USAGE);
		}
	}
}

/* ckpt_name: the default checkpoint of output out: its name, .mlg replaced by .ckpt.mlg. */
static const char *
ckpt_name(const char *out)
{
	size_t n = strlen(out);
	if (n > 4 && strcmp(out + n - 4, ".mlg") == 0)
		n -= 4;
	char *p = malloc(n + sizeof ".ckpt.mlg");
	if (p == NULL)
		die(EXIT_FAIL, "out of memory");
	memcpy(p, out, n);
	memcpy(p + n, ".ckpt.mlg", sizeof ".ckpt.mlg");
	return p;
}

/*
 * check_pipeline: --pipeline's options and what they cannot combine with:
 * accumulation (the pipeline splits a batch itself), clipping (a norm over
 * every stage's gradients), MPI. The micro-batches must divide the batch.
 */
static void
check_pipeline(struct run *r, const struct args *a)
{
	const struct opts *o = &r->o;
	bool list = strchr(r->device, ',') != NULL;
	if (r->pipeline == NULL) {
		if (list)
			die(EXIT_USAGE, "--device %s: a list of devices needs --pipeline", r->device);
		if (r->micro > 0 || r->psched >= 0 || r->ptrace != NULL)
			die(EXIT_USAGE, "--micro-batches, --schedule and --pipeline-trace need "
			    "--pipeline");
		r->eval_device = r->device;
		return;
	}
	if (r->micro == 0)
		r->micro = 4;
	if (r->psched < 0)
		r->psched = ML_PIPE_GPIPE;
	if (o->accum > 1)
		die(EXIT_USAGE, "--pipeline cannot combine with --accumulate: it splits each "
		    "batch itself (--micro-batches)");
	if (o->clip > 0)
		die(EXIT_USAGE, "--pipeline cannot combine with --clip-norm");
	if (a->dmode == ML_DIST_REQUIRE)
		die(EXIT_USAGE, "--pipeline cannot combine with --mpi");
	if (strcmp(r->device, "auto") == 0 || strstr(r->device, "auto") != NULL)
		die(EXIT_USAGE, "--pipeline: name each stage's device (cpu, cl, cl:N), not auto");
	/* a resumed run's batch is its checkpoint's: make_pipeline checks that one */
	if ((a->resume == NULL || given[S_BATCH]) && o->batch % r->micro != 0)
		die(EXIT_USAGE, "--micro-batches %d does not divide --batch %lld", r->micro,
		    (long long)o->batch);
	if ((strcmp(r->pipeline, "auto") == 0 || strcmp(r->pipeline, "measured") == 0) && !list)
		die(EXIT_USAGE, "--pipeline %s: give one device a stage (--device cpu,cl:0)",
		    r->pipeline);
	/* the evaluation runs on the first stage's device */
	size_t n = strcspn(r->device, ",");
	char *d = malloc(n + 1);
	if (d == NULL)
		die(EXIT_FAIL, "out of memory");
	memcpy(d, r->device, n);
	d[n] = '\0';
	r->eval_device = d;
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
		usage_error(synopsis, "-o: give a file, not '-'");
	if (o->val_split != 0 && !(o->val_split > 0 && o->val_split < 1))
		usage_error(synopsis, "--val-split takes a fraction between 0 and 1");
	if (o->lr <= 0 || o->momentum < 0 || o->wd < 0 || o->clip < 0)
		usage_error(synopsis, "--lr must be positive; --momentum, --weight-decay and --clip-norm not negative");
	if (o->nesterov && o->momentum <= 0 && a->resume == NULL)
		usage_error(synopsis, "--nesterov needs --momentum");
	if (r->ckpt == NULL && r->out != NULL)
		r->ckpt = ckpt_name(r->out);
	if (r->ckpt != NULL && r->out != NULL && strcmp(r->ckpt, r->out) == 0)
		usage_error(synopsis, "--checkpoint and -o name the same file; the output has no "
			    "optimizer state");
	a->from = a->resume != NULL ? a->resume : r->model_path;
	check_pipeline(r, a);
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
	const char *outs[] = { a->dump, r->out, r->ckpt, r->ptrace };
	for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
		if (outs[i] != NULL && ml_write_check(outs[i], &err) < 0)
			die_err(&err);
	if (a->dump == NULL && a->logpath != NULL && (r->log = fopen(a->logpath, "a")) == NULL)
		die(EXIT_FAIL, "cannot open '%s': %s", a->logpath, strerror(errno));
}

/*
 * take_state: --resume: the state of the run the checkpoint saved (in the
 * TrainRun message, or as JSON in an older checkpoint; status 3 when it has
 * none or a damaged one), its options for those not given, the step and
 * epoch it stopped at, and the position and sums of its epoch.
 */
static void
take_state(struct run *r, const char *resume)
{
	struct ml_err err = { 0 };
	struct ml_train_state *st = &r->ck;
	ml_train_state_init(st);
	if (ml_train_state_get(st, r->model, &err) < 0) {
		if (err.code == ML_ENOMEM)
			die_err(&err);
		if (err.code == ML_EINVAL) {
			/* since -o writes an inference model, resuming it is the likely slip */
			const char *ck = ckpt_name(resume);
			if (access(ck, R_OK) == 0)
				die(EXIT_INVALID, "%s: not a checkpoint of mltrain (no training state); "
				    "the run's checkpoint is probably %s", resume, ck);
			die(EXIT_INVALID, "%s: not a checkpoint of mltrain (no training state)", resume);
		}
		die(EXIT_INVALID, "%s: %s", resume, err.msg);
	}
	/* rank 0's state on every rank, so that every rank takes the same batches */
	if (ml_dist_size() > 1 && ml_train_state_bcast(st, 0, &err) < 0)
		die_err(&err);
	take_config(&r->o, st);
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

/* cl_half: -v's word on whether the device has cl_khr_fp16, which rounding does without */
static const char *
cl_half(const char *device)
{
	struct ml_device_info *v = NULL;
	struct ml_err e = { 0 };
	const char *id = strcmp(device, "cl") == 0 ? "cl:0" : device, *what = "";
	int n = 0;
	if (ml_devices(&v, &n, &e) == 0)
		for (int i = 0; i < n; i++)
			if (strcmp(v[i].id, id) == 0)
				what = v[i].fp16 ? "; the device has cl_khr_fp16 (unused: its half "
						   "products would sum in half)" :
						   "; the device has no cl_khr_fp16 (not needed)";
	ml_free(v);
	return what;
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
	/* the hits of each batch, for the accuracy of an output [N, classes] */
	to.accuracy = r->model->tensors[r->model->outputs[0]]->rank >= 2;
	if (ml_train_step_graph(&r->step, r->model, &to, &err) < 0)
		die_run(&err, a->from);
	if (r->verbose) {
		int np = 0;
		int64_t ne = 0;
		ml_train_param_count(r->step, &to, &np, &ne);
		fprintf(stderr, "%s: %s: %d parameter tensors, %lld values; step graph of %d nodes\n",
			progname, a->from, np, (long long)ne, r->step->n_nodes);
		bool cl = strncmp(r->device, "cl", 2) == 0;
		const char *pn = cl ? ml_precision_note_cl(to.precision) : ml_precision_note(to.precision);
		if (pn != NULL)
			fprintf(stderr, "%s: %s%s\n", progname, pn, cl ? cl_half(r->device) : "");
		if (r->o.ls > 0)
			fprintf(stderr, "%s: loss scale %g, %s\n", progname, r->o.ls,
				r->o.ls_window > 0 ? "dynamic" : "fixed");
	}
	/* under MPI the updates keep their nodes, since the gradients must be all-reduced first */
	if (r->pipeline == NULL && strcmp(r->device, "cpu") == 0 &&
	    ml_train_fuse(r->step, ml_dist_size() <= 1, &err) < 0)
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
		fprintf(stderr, "%s: %d ranks (%s): gradients all-reduced as %s in %d bucket%s of "
			"about %g MiB\n", progname, a->di.size,
			a->di.library[0] ? a->di.library : "MPI", ml_dist_wire_name(a->dopt.wire), nb,
			nb == 1 ? "" : "s", a->dopt.bucket_mb);
}

/* check_resume: a resumed run's data must give the epochs its checkpoint had. */
static void
check_resume(const struct run *r, const char *resume)
{
	int64_t v = r->ck.sched.steps_per_epoch, spe = r->spe / (r->o.accum > 1 ? r->o.accum : 1);
	if (v > 0 && v != spe)
		die(EXIT_INVALID, "%s: the data give %lld steps an epoch, the checkpoint had %lld",
		    r->data_path, (long long)spe, (long long)v);
	const struct ml_train_state *st = &r->ck;
	if (st->epoch_step < 0 || st->epoch_correct < 0 || st->epoch_seen < 0 ||
	    st->epoch_step > r->spe)
		die(EXIT_INVALID, "%s: damaged training state (step %lld of an epoch of %lld)",
		    resume, (long long)st->epoch_step, (long long)r->spe);
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

/*
 * make_pipeline: --pipeline: each stage's device (--device's list, else
 * the stage file's "stage N DEVICE" lines, else --device for all) and each
 * forward node's stage (auto, or the file).
 */
static void
make_pipeline(struct run *r)
{
	if (r->pipeline == NULL)
		return;
	if (ml_dist_size() > 1)
		die(EXIT_USAGE, "--pipeline cannot combine with MPI (%d ranks)", ml_dist_size());
	if (r->o.batch % r->micro != 0)
		die(EXIT_USAGE, "--micro-batches %d does not divide the batch of %lld", r->micro,
		    (long long)r->o.batch);
	cli_pipeline_plan(r->step, r->pipeline, r->device, &r->po, &r->cp);
	r->po.micro = r->micro;
	r->po.schedule = r->psched;
	if (r->cp.measured)
		r->po.measure_rows = r->o.batch / r->micro;
}

/* print_stages: -v: each stage of the pipeline, its nodes and its predicted share. */
static void
print_stages(const struct run *r)
{
	const struct ml_pipeline *p = ml_trainer_pipeline(r->tr);
	if (p == NULL || !r->verbose)
		return;
	fprintf(stderr, "%s: pipeline of %d stages, %d micro-batches of %lld, %s schedule\n",
		progname, ml_pipeline_stages(p), r->micro, (long long)(r->o.batch / r->micro),
		ml_pipe_schedule_name(r->psched));
	for (int s = 0; s < ml_pipeline_stages(p); s++) {
		struct ml_pipeline_stage_info in;
		ml_pipeline_stage(p, s, &in);
		char pred[48] = "";
		if (in.predicted_s > 0)
			snprintf(pred, sizeof pred, " (%.3f ms a micro-batch)", 1e3 * in.predicted_s);
		fprintf(stderr, "%s: stage %d on %s: %d forward nodes (%s .. %s), %d nodes in all, "
			"%.0f%% of the predicted work%s, sends %lld bytes a sample\n", progname, s,
			in.device, in.n_forward, in.first, in.last, in.n_nodes, 100 * in.work, pred,
			(long long)in.send_bytes);
	}
}

/* pipeline_report: -v: each stage's busy time and the bubble fraction; --pipeline-trace. */
static void
pipeline_report(const struct run *r)
{
	struct ml_err err = { 0 };
	const struct ml_pipeline *p = ml_trainer_pipeline(r->tr);
	if (p == NULL)
		return;
	struct ml_pipeline_stats st;
	ml_pipeline_stats(p, &st);
	if (r->verbose) {
		for (int s = 0; s < ml_pipeline_stages(p); s++) {
			struct ml_pipeline_stage_info in;
			ml_pipeline_stage(p, s, &in);
			fprintf(stderr, "%s: stage %d on %s: busy %.3f s of %.3f s\n", progname, s,
				in.device, in.busy_s, st.wall_s);
		}
		fprintf(stderr, "%s: pipeline: bubble fraction %.3f over %lld batches\n", progname,
			st.bubble, (long long)st.batches);
	}
	if (r->ptrace == NULL || ml_dist_rank() != 0)
		return;
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);
	if (fp == NULL)
		die(EXIT_FAIL, "out of memory");
	int rc = ml_pipeline_trace(p, fp, &err);
	if (fclose(fp) != 0 && rc == 0)
		rc = ml_fail(&err, ML_ENOMEM, "out of memory");
	if (rc == 0)
		rc = ml_write_atomic(r->ptrace, buf, len, &err);
	free(buf);
	if (rc < 0)
		die_err(&err);
}

/*
 * make_trainer: the training loop (lib/ml_train.h) of the step over the
 * loader from where the run stands, with the evaluation, the checkpoint
 * file and this tool's hooks: the signals, the bar, the epoch's report and
 * -v's checkpoint lines.
 */
static void
make_trainer(struct run *r)
{
	struct ml_err err = { 0 };
	struct ml_train_state st;
	struct ml_trainer_opts to;
	run_state(r, &st);
	ml_trainer_opts_init(&to);
	to.epochs = r->o.epochs;
	to.input = r->xname;
	to.device = r->device;
	to.verbose = r->verbose;
	to.checkpoint = r->ckpt;
	to.hits = r->classes > 0;
	to.eval = r->ev;
	to.eval_data = r->eval;
	to.eval_x = &r->xs;
	to.eval_y = &r->ys;
	to.pipeline = r->pipeline != NULL ? &r->po : NULL;
	to.hooks = (struct ml_trainer_hooks){ .ctx = r, .poll = poll_signals,
		.on_epoch_begin = progress, .on_step = progress, .on_checkpoint = on_checkpoint,
		.on_epoch = report_epoch, .on_loss_scale = on_loss_scale };
	if (ml_trainer_new(&r->tr, r->model, r->step, r->ld, &st, &to, &err) < 0)
		die_err(&err);
}

/*
 * train: the epochs from where the run stands to --epochs. A stop that a
 * signal asked for (on any rank) is taken in time: the watchdog is off,
 * the checkpoint is written however long it takes, and the run ends with
 * the signal's status (SIGINT's where another rank saw it).
 */
static void
train(struct run *r)
{
	struct ml_err err = { 0 };
	int rc = ml_trainer_run(r->tr, &err);
	if (rc < 0)
		die_err(&err);
	if (rc != ML_TRAINER_STOPPED)
		return;
	int sig = ml_trainer_stop_code(r->tr);
	if (sig == ML_TRAINER_STOP_PEER)
		sig = SIGINT;
	alarm(0);
	cli_progress_end(false);
	if (ml_trainer_checkpoint(r->tr, ML_TRAINER_CKPT_CALL, &err) < 0)
		die_err(&err);
	if (!r->quiet)
		fprintf(stderr, "%s: interrupted at step %llu; the checkpoint is %s\n", progname,
			(unsigned long long)ml_trainer_state(r->tr)->step, r->ckpt);
	dist_clean = true;
	if (ml_dist_size() > 1) {
		ml_dist_barrier(&err);
		ml_dist_finalize(&err);
	}
	exit(128 + sig);
}

/* check_ranks_agree: every rank applied the same averaged gradients: check that they agree. */
static void
check_ranks_agree(struct run *r)
{
	struct ml_err err = { 0 };
	double d = 0;
	if (ml_trainer_sync(r->tr, &err) < 0 ||
	    ml_dist_param_divergence(r->step, 0, &d, &err) < 0)
		die_run(&err, NULL);
	if (d > 0 && ml_dist_rank() == 0)
		warnx("warning: the parameters differ across ranks by up to %g", d);
	else if (r->verbose)
		fprintf(stderr, "%s: the %d ranks hold identical parameters\n", progname,
			ml_dist_size());
}

/*
 * save_final: the checkpoint (the state to resume from, so that a later run
 * can train more epochs), then the model for inference: eval mode, its
 * parameters without the optimizer state (ml_train_strip).
 */
static void
save_final(struct run *r)
{
	struct ml_err err = { 0 };
	if (ml_trainer_export(r->tr, &err) < 0)
		die_err(&err);
	if (ml_dist_rank() != 0)
		return;
	if (ml_model_save(r->model, r->ckpt, ML_FMT_MLG, &err) < 0 ||
	    ml_train_strip(r->model, &err) < 0 || ml_model_save(r->model, r->out, ML_FMT_MLG, &err) < 0)
		die_err(&err);
	if (r->verbose)
		fprintf(stderr, "%s: wrote %s as mlg: %d nodes; the training state in %s\n", progname,
			r->out, r->model->n_nodes, r->ckpt);
}

/* print_json: --json: the run's report on stdout (s0: the step it started at). */
static void
print_json(const struct run *r, const char *from, uint64_t s0, double secs)
{
	printf("{\"model\": ");
	ml_json_str(stdout, from);
	printf(", \"output\": ");
	ml_json_str(stdout, r->out);
	const struct ml_train_state *st = ml_trainer_state(r->tr);
	printf(", \"epochs\": %llu, \"steps\": %llu, \"steps_run\": %llu, \"seconds\": %.3f",
	       (unsigned long long)st->epoch, (unsigned long long)st->step,
	       (unsigned long long)(st->step - s0), secs);
	json_num(stdout, "loss", r->last_loss);
	json_num(stdout, "accuracy", r->last_acc);
	json_num(stdout, r->o.val_split > 0 ? "val_loss" : "test_loss", r->last_eval_loss);
	json_num(stdout, r->o.val_split > 0 ? "val_accuracy" : "test_accuracy", r->last_eval_acc);
	json_num(stdout, "samples_per_s", r->last_sps);
	json_num(stdout, "train_samples_per_s",
		 r->train_secs > 0 ? (double)r->train_samples / r->train_secs : NAN);
	if (ml_trainer_pipeline(r->tr) != NULL) {
		struct ml_pipeline_stats ps;
		ml_pipeline_stats(ml_trainer_pipeline(r->tr), &ps);
		printf(", \"pipeline\": {\"stages\": %d, \"micro_batches\": %d, \"schedule\": "
		       "\"%s\", \"bubble_fraction\": %.4f}", ml_pipeline_stages(ml_trainer_pipeline(r->tr)),
		       r->micro, ml_pipe_schedule_name(r->psched), ps.bubble);
	}
	if (ml_dist_size() > 1) {	/* the gradients' all-reduces of the last epoch */
		struct ml_dist_stats st;
		ml_dist_stats(&st);
		printf(", \"ranks\": %d, \"allreduce_dtype\": \"%s\", \"allreduce_bytes_per_step\": "
		       "%lld", ml_dist_size(), st.buckets > 0 ? ml_dist_wire_name(st.wire) : "none",
		       (long long)((double)st.bytes / (double)(st.steps > 0 ? st.steps : 1) + 0.5));
	}
	printf("}\n");
}

/* free_run: release the run's sessions, data and graphs. */
static void
free_run(struct run *r)
{
	ml_trainer_free(r->tr);
	ml_train_eval_free(r->ev);
	ml_loader_free(r->ld);
	ml_dataset_free(r->train);
	ml_dataset_free(r->eval);
	ml_graph_free(r->step);
	ml_graph_free(r->model);
	cli_pipeline_free(&r->cp);
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
			     .shuffle = 1, .accum = 1, .ls = -1 };
	ml_dist_opts_init(&a.dopt);
	r.device = "cpu";
	r.psched = -1;

	cli_init(argc, argv);
	parse_args(&r, &a, argc, argv);
	if (a.version) {
		print_version(r.verbose);
		return finish_stdout();
	}
	check_args(&r, &a, argc, argv);
	if (a.dump == NULL)
		setup_dist(&r, &a);
	cli_progress_setup(a.progress, r.quiet);	/* after setup_dist: ranks but 0 are quiet */
	check_outputs(&r, &a);
	ml_set_threads(a.threads);
	if (ml_model_load(&r.model, a.from, ML_FMT_AUTO, &err) < 0)
		die_err(&err);
	cli_apply_shapes(r.model, a.from, &a.shapes, r.verbose);
	rebatch(&r, &a);
	if (a.resume != NULL)
		take_state(&r, a.resume);
	check_precision(&r);
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
	make_pipeline(&r);
	make_trainer(&r);
	print_stages(&r);
	catch_signals();
	uint64_t s0 = ml_trainer_state(r.tr)->step;
	if (r.verbose)
		fprintf(stderr, "%s: training from step %llu, %lld steps an epoch\n", progname,
			(unsigned long long)s0, (long long)r.spe);

	double t0 = ml_now();
	train(&r);
	double secs = ml_now() - t0;
	if (ml_dist_size() > 1)
		check_ranks_agree(&r);
	pipeline_report(&r);
	save_final(&r);
	if (r.verbose && ml_cache_note_get() != NULL)
		fprintf(stderr, "%s: %s\n", progname, ml_cache_note_get());
	if (r.log != NULL && fclose(r.log) != 0)
		die(EXIT_FAIL, "write error on '%s'", a.logpath);
	if (a.json)
		print_json(&r, a.from, s0, secs);
	free_run(&r);
	cli_shapes_free(&a.shapes);
	if (ml_dist_size() > 1 && (ml_dist_barrier(&err) < 0 || ml_dist_finalize(&err) < 0))
		die_err(&err);
	dist_clean = true;
	return finish_stdout();
}
