/*
 * ml_train.h: training (lib/train): reverse-mode autodiff as a graph to
 * graph transformation, losses, optimizers, training-step graphs,
 * learning-rate schedules (schedule.c), evaluation graphs (eval.c) and the
 * training state a checkpoint keeps, read back (state.c). Included by ml.h.
 * Owner: autodiff (issue 5).
 *
 * A training step is an ordinary graph. ml_train_step_graph copies a model,
 * puts BatchNormalization and Dropout into training mode, appends a loss,
 * the gradients of the loss (ml_grad) and the optimizer's updates, which
 * write the new parameter values in place through internal side-effect ops
 * (ml.Assign, ml.SGDUpdate, ml.AdamUpdate: nodes without outputs, placed
 * after every other node by ml_graph_toposort). Running the step graph's
 * session once is one optimizer step:
 *
 *	struct ml_train_opts o;
 *	ml_train_opts_init(&o);
 *	o.loss = ML_LOSS_SCE; o.optimizer = ML_OPTIM_SGD; o.momentum = 0.9;
 *	ml_train_step_graph(&step, model, &o, &err);
 *	ml_session_new(&s, step, NULL, &err);
 *	for each batch:
 *		ml_session_set_input(s, "x", &images, &err);	(the model's inputs)
 *		ml_session_set_input(s, "label", &labels, &err);
 *		ml_session_set_input(s, "lr", &lr, &err);	(f32 scalar)
 *		ml_session_run(s, &err);
 *		loss = ml_session_output(s, 0); logits = ml_session_output(s, 1);
 *	ml_train_export(model, step, &err);	(weights, statistics, state back)
 *	ml_train_strip(model, &err);		(an inference model: no optimizer state)
 *	ml_model_save(model, "out.mlg", ML_FMT_MLG, &err);
 *
 * A checkpoint (ml_train_checkpoint_save, before the strip) keeps the
 * optimizer state and the run's state (struct ml_train_state) so that a
 * later process resumes exactly; see "Checkpoints" below.
 *
 * The step graph's node names start with a phase, "forward/", "loss/",
 * "backward/" or "optimizer/", which mlprof's report groups by.
 */
#ifndef ML_TRAIN_H
#define ML_TRAIN_H

/*
 * ml_grad: append to g the nodes that compute d y / d x[i] for the scalar
 * (one element) float tensor y; gx[i] gets the gradient's tensor index, or
 * -1 where y does not depend on x[i]. The new nodes are ordinary ops (ONNX
 * ops where ONNX has one, internal "ml" ops of the grad family where not),
 * named "backward/..." after the node they differentiate. Gradients of
 * broadcasting ops are summed back to the input's shape. g's tensors must
 * carry inferred shapes (ml_graph_infer). ML_ENOTSUP names an op on the
 * path from x to y that has no gradient rule; ML_EINVAL for a y that is not
 * a scalar float. Nodes appended before a failure stay in g (the caller
 * normally works on a copy).
 */
int ml_grad(struct ml_graph *g, int y, const int *x, int nx, int *gx, struct ml_err *e);

/* Losses the step graph can attach to a model output. */
enum ml_loss {
	ML_LOSS_SCE = 0,	/* softmax cross-entropy: logits [N,C,..] vs int64 classes [N,..] */
	ML_LOSS_NLL = 1,	/* negative log-likelihood of log-probabilities vs int64 classes */
	ML_LOSS_MSE = 2,	/* mean squared error vs a float target shaped like the output */
	ML_LOSS_BCE_LOGITS = 3,	/* binary cross-entropy of logits vs targets in [0,1] */
};

/* Optimizers. */
enum ml_optim {
	ML_OPTIM_SGD = 0,	/* with momentum and Nesterov as in torch.optim.SGD */
	ML_OPTIM_ADAM = 1,	/* torch.optim.Adam (weight decay added to the gradient) */
	ML_OPTIM_ADAMW = 2,	/* torch.optim.AdamW (decoupled weight decay) */
};

/*
 * Precision of a step's products (ml_train_opts.precision). ML_PREC_BF16:
 * MatMul, Gemm and Conv and the products of their gradients multiply bf16
 * operands (rounded to nearest even) with f32 sums; the weights, the
 * optimizer state, the loss, reductions, norms and activations stay f32.
 * The step graph's product nodes carry the attribute precision = "bf16",
 * which the CPU kernels read (vdpbf16ps on AVX512_BF16; elsewhere, and with
 * ML_BF16=f32, the operands rounded and the f32 kernels; a CPU without
 * AVX512_BF16 runs them as f32). Convolutions with few output channels
 * (a LeNet's) stay f32, their direct kernels being faster. ML_PREC_F16
 * marks them precision = "fp16". The OpenCL GEMM and convolution round
 * the operands of a "bf16" or "fp16" node to that precision as they pack
 * them (f32 sums, never CLBlast); the CPU has no fp16 products and runs
 * "fp16" nodes in f32 (mltrain refuses fp16 there), as it runs the nodes
 * OpenCL leaves to it (the convolutions' gradients).
 */
enum ml_precision {
	ML_PREC_F32 = 0,
	ML_PREC_BF16 = 1,
	ML_PREC_F16 = 2,
};

/* ml_precision_name: "fp32", "bf16", "fp16" (NULL: unknown); ml_precision_from_name: -1 unknown. */
const char *ml_precision_name(int prec);
int ml_precision_from_name(const char *s);
/* ml_precision_note: how the CPU runs prec's products, one phrase (-v); NULL for fp32. */
const char *ml_precision_note(int prec);
/* ml_precision_note_cl: the same for OpenCL devices. */
const char *ml_precision_note_cl(int prec);

/*
 * ml_loss_name / ml_optim_name: "softmax-cross-entropy", "nll", "mse",
 * "bce-with-logits"; "sgd", "adam", "adamw" (NULL for an unknown value).
 * ml_loss_from_name / ml_optim_from_name: the inverse, -1 when unknown
 * ("ce" and "cross-entropy" are accepted for softmax-cross-entropy).
 */
const char *ml_loss_name(int loss);
int ml_loss_from_name(const char *s);
const char *ml_optim_name(int optim);
int ml_optim_from_name(const char *s);

/*
 * struct ml_train_opts: what the training step computes. Fill it with
 * ml_train_opts_init (the defaults of PyTorch), then set fields.
 */
struct ml_train_opts {
	int loss;		/* enum ml_loss (default ML_LOSS_SCE) */
	int output;		/* index of the model output the loss reads (default 0) */
	int optimizer;		/* enum ml_optim (default ML_OPTIM_SGD) */
	double momentum;	/* SGD momentum (default 0) */
	bool nesterov;		/* SGD Nesterov momentum (needs momentum > 0) */
	double beta1, beta2;	/* Adam/AdamW (defaults 0.9, 0.999) */
	double eps;		/* Adam/AdamW (default 1e-8) */
	double weight_decay;	/* L2 (SGD, Adam) or decoupled (AdamW) decay; default 0
				 * (AdamW's PyTorch default 0.01 is the caller's to set) */
	double clip_norm;	/* clip the global gradient norm to this; 0: off */
	int n_frozen;		/* parameters (by tensor name) kept fixed */
	const char *const *frozen;
	uint64_t seed;		/* initial RNG state of Dropout in training mode */
	int accumulate;		/* > 1: sum the gradients of this many runs (micro-batches)
				 * and update on the last with their mean (0, 1: every run);
				 * the updates keep the sums (P.grad_acc) themselves */
	bool accuracy;		/* also output "train.correct" (default false; see below) */
	int precision;		/* enum ml_precision of the products (default ML_PREC_F32) */
	double loss_scale;	/* > 0: loss scaling (see below), the scale S a run starts
				 * with (the step takes S as an input); 0: off (default) */
};

/* ml_train_opts_init: the defaults above. */
void ml_train_opts_init(struct ml_train_opts *o);

/*
 * ml_train_step_graph: build in *out (a new graph; NULL on failure) the
 * graph of one training step of model (which is not changed):
 *   inputs:  the model's inputs, then "label" (int64 class indices [N(,d..)]
 *            for SCE and NLL; float shaped like the loss's output for MSE
 *            and BCE), then "lr" (f32 scalar, so schedules need no rebuild);
 *   outputs: "loss" (f32 scalar, the batch mean) and the model output the
 *            loss reads (under its own name); with o->accuracy a third,
 *            "train.correct": the samples of the batch whose output picks
 *            their label, a scalar of the output's dtype, counted as
 *            ml_train_eval counts them (ML_EINVAL for an output of rank
 *            below 2).
 * Loss scaling (o->loss_scale > 0; ML_ENOTSUP with o->accumulate > 1): one
 * more input, "loss_scale" (f32 scalar S, after "lr"): the gradients are
 * those of S loss (the output "loss" stays unscaled), and the updates take
 * 1/S as their gradient factor (times clipping's, which measures the
 * unscaled norm); one more output, last, "train.finite" (1 or 0, the
 * parameters' dtype): 0 when a gradient holds an inf or a nan, and then
 * the updates change nothing, "train.step" included (Adam's t counts the
 * applied steps). The caller adjusts S (ml_trainer does).
 * Trainable parameters are the model's PARAM tensors, and float CONST
 * tensors that feed weight, bias or scale inputs of Conv, ConvTranspose,
 * Gemm, MatMul, BatchNormalization, LayerNormalization, InstanceNormalization
 * and GroupNormalization (the initializers of an imported ONNX model); they
 * are PARAM in the step graph. Frozen ones stay as they are.
 * Optimizer state lives in PARAM tensors of the step graph named
 * "PARAM.momentum" (SGD), "PARAM.m" and "PARAM.v" (Adam, AdamW) and
 * "train.step" (i64 scalar, steps taken), listed in (*out)->train->slots;
 * where model->train holds slots of those names (a resumed model) their
 * values are taken over, else they start at zero. Dropout's RNG state is the
 * PARAM tensor "train.rng" (i64 [2]: seed, counter), also a slot, so a
 * resumed run draws the same masks.
 * Parameters that an ONNX export shares through Identity nodes of one
 * initializer (PyTorch keeps one copy of equal initial values) get storage
 * of their own, so they train apart as they do in PyTorch.
 * The update nodes write the stored data of their targets in place (the
 * CPU kernels do); a device that keeps parameters resident must run them
 * there or copy the results back.
 * BatchNormalization uses batch statistics and updates its running mean and
 * variance (momentum as the node's attribute, unbiased variance as PyTorch);
 * Dropout is active. ML_ENOTSUP names an op without a gradient rule or a
 * loss/output combination that is not supported; ML_EINVAL for bad options.
 */
int ml_train_step_graph(struct ml_graph **out, const struct ml_graph *model,
			const struct ml_train_opts *o, struct ml_err *e);

/*
 * Evaluation. The loss and accuracy of a model over data are a graph too,
 * run batch by batch by an ordinary session on the run's device: the model
 * (in eval mode, as it is) with the step's loss per sample (reduction
 * "none"; BCE written out as Relu(x) - x t + Softplus(-|x|)), the accuracy
 * as ArgMax, Equal and Cast, each summed over the batch under a mask, so a
 * last batch smaller than the session's is padded with copies of its first
 * sample that count for nothing (a model with a fixed batch evaluates every
 * sample). Only the two sums leave the device. The graph is built once;
 * each evaluation takes the current weights by name:
 *
 *	struct ml_train_eval_opts eo;
 *	ml_train_eval_opts_init(&eo);
 *	eo.loss = ML_LOSS_SCE; eo.device = "cl";
 *	ml_train_eval_new(&ev, model, &eo, &err);
 *	after each epoch of training:
 *		ml_session_sync(step_session, &err);	(weights back from a device)
 *		ml_train_eval_run(ev, step, test, &xs, &ys, &loss, &acc, &err);
 *	ml_train_eval_free(ev);
 *
 * or, with batches of one's own: ml_train_eval_reset(ev, step, &err); then
 * ml_train_eval_batch(ev, &x, &y, &err) for each; ml_train_eval_result.
 * loss is the mean over samples of each sample's loss (its mean over the
 * sample's values, as the step's loss of a batch is the mean over the
 * batch); acc the share of samples whose output picks their label (NAN
 * without opts.accuracy).
 */
struct ml_train_eval;
struct ml_dataset;	/* ml_data.h */
struct ml_batch_spec;
struct ml_augment;
struct ml_train_eval_opts {
	int loss;		/* enum ml_loss, as the step's (default ML_LOSS_SCE) */
	int output;		/* index of the model output the loss reads (default 0) */
	bool accuracy;		/* count hits (needs an output [N, C, ...]; default false) */
	int64_t batch;		/* samples a run, at most (default 1000); a model
				 * with a fixed batch runs at that batch */
	const char *device;	/* the session's device, as struct ml_session_opts
				 * (default NULL: the CPU); copied */
	const struct ml_augment *augment;	/* ml_train_eval_run's batches' (normally
				 * only a normalisation); borrowed; default NULL: none */
};

/* ml_train_eval_opts_init: the defaults above. */
void ml_train_eval_opts_init(struct ml_train_eval_opts *o);

/*
 * ml_train_eval_new: build in *out the evaluation of model (not changed;
 * its current weights are the first ones evaluated): its inputs, then
 * "label" (as ml_train_step_graph's) and "eval.mask" (the output's float
 * type, [N]); outputs "eval.loss_sum" and, with accuracy, "eval.hits".
 * Every model input must have a batch dim first. ML_EINVAL for bad options,
 * an output the loss cannot read, or a model with tensors of those names;
 * ML_ENOTSUP for an input without a batch dim; ML_ENOMEM. *out is NULL on
 * failure.
 */
int ml_train_eval_new(struct ml_train_eval **out, const struct ml_graph *model,
		      const struct ml_train_eval_opts *o, struct ml_err *e);

/*
 * ml_train_eval_reset: start an evaluation: the sums go to zero and, when
 * from is not NULL, every stored (CONST or PARAM) tensor of the evaluation
 * takes the data of from's stored tensor of that name: from is a step graph
 * of the model (after ml_session_sync where it ran on a device) or the
 * model after ml_train_export. The session is made again at the next batch.
 * ML_EINVAL when a tensor of that name differs in dtype or size; ML_ENOMEM.
 */
int ml_train_eval_reset(struct ml_train_eval *ev, const struct ml_graph *from, struct ml_err *e);

/*
 * ml_train_eval_batch: evaluate one batch and add it to the sums: x[i] for
 * the model's input i (in the order of model->inputs), y the labels as the
 * step takes them, all with the same number of samples (one or more) first.
 * A batch larger than the session's is run in parts; a smaller one padded.
 * The first batch after ml_train_eval_new or _reset makes the session, at
 * the model's fixed batch or at opts.batch or this batch's size, whichever
 * is smaller. ML_EINVAL for inputs that differ in samples or do not fit
 * the model; the session's errors.
 */
int ml_train_eval_batch(struct ml_train_eval *ev, const struct ml_tval *x, const struct ml_tval *y,
			struct ml_err *e);

/*
 * ml_train_eval_result: the samples evaluated since the last reset; *loss
 * their mean loss and *acc their accuracy (NAN when there were none, and
 * acc without opts.accuracy). Either pointer may be NULL.
 */
int64_t ml_train_eval_result(const struct ml_train_eval *ev, double *loss, double *acc);

/*
 * ml_train_eval_run: ml_train_eval_reset(ev, from), then every sample of d
 * in order (batches of opts.batch, or the model's fixed batch) through
 * ml_train_eval_batch, and the result in *loss and *acc (either may be
 * NULL). xs and ys are the model's input and label specs as
 * ml_dataset_check resolved them for d. ML_ENOTSUP for a model of more
 * than one input; ML_EINVAL for an empty d; the loader's and the
 * session's errors.
 */
int ml_train_eval_run(struct ml_train_eval *ev, const struct ml_graph *from,
		      const struct ml_dataset *d, const struct ml_batch_spec *xs,
		      const struct ml_batch_spec *ys, double *loss, double *acc, struct ml_err *e);

/* ml_train_eval_free: release ev, its graph and its session; NULL is a no-op. */
void ml_train_eval_free(struct ml_train_eval *ev);

/*
 * ml_train_fuse: rewrite a step graph of ml_train_step_graph for the CPU:
 * each f32 Gemm becomes an ml.TrainGemm that also applies the Relu or
 * ReluGrad that alone reads its output, and a weight gradient's Gemm that
 * only an SGDUpdate reads (no clipping) merges into it as ml.GemmSGDUpdate
 * (see lib/ops/grad.c), so the gradient is never stored (accumulating, it
 * is added to its sum as it leaves the product, or the group's mean that
 * the update reads is formed there). The result is
 * the same step. Other devices run these ops on the CPU: call it only for
 * a step that runs on the CPU. With fold_updates false the updates keep
 * their nodes and the gradients stay tensors, as ml_train_distribute
 * (which all-reduces them) needs: call it before that.
 */
int ml_train_fuse(struct ml_graph *g, bool fold_updates, struct ml_err *e);

/*
 * ml_train_export: copy the trained state of step (a graph of
 * ml_train_step_graph of this model, after some runs) back into model:
 * every parameter and running statistic by name (a trained ONNX initializer
 * becomes PARAM), and the optimizer slots, as PARAM tensors that no node
 * reads, listed in model->train->slots (created when absent), with
 * model->train->step set from "train.step" and model->train->optimizer to
 * the optimizer's name. model stays an inference graph (eval mode, no loss,
 * no optimizer; Identity nodes that shared an initializer become stored
 * tensors of their own), so a saved model runs in mlrun and a later
 * ml_train_step_graph on it resumes exactly. The caller may set
 * model->train->epoch and the run's state (ml_train_state_set) afterwards;
 * ml_train_strip then makes it an inference model.
 */
int ml_train_export(struct ml_graph *model, const struct ml_graph *step, struct ml_err *e);

/*
 * ml_train_param_count: the number of trainable tensors and their total
 * element count in a step graph (or, before ml_train_step_graph, what it
 * would train in a model, frozen ones aside). Either out pointer may be NULL.
 */
void ml_train_param_count(const struct ml_graph *g, const struct ml_train_opts *o, int *n_params,
			  int64_t *n_elems);

/*
 * Learning-rate schedules. The step graph reads its rate from the "lr"
 * input, so a schedule is the caller's loop setting that input to
 * ml_lr_at(&sched, step) before each run:
 *
 *	struct ml_lr_schedule sc;
 *	ml_lr_schedule_init(&sc);
 *	sc.kind = ML_LR_COSINE; sc.lr = 0.1; sc.epochs = 10; sc.steps_per_epoch = 500;
 *	for (uint64_t s = 0; ...; s++)
 *		*(float *)lr.data = (float)ml_lr_at(&sc, s);
 */
enum ml_lr_kind {
	ML_LR_CONSTANT = 0,	/* lr at every step */
	ML_LR_STEP = 1,		/* lr * gamma^floor(epoch / step_epochs) */
	ML_LR_COSINE = 2,	/* lr_min + (lr - lr_min) (1 + cos(pi s / (epochs spe))) / 2 */
	ML_LR_WARMUP = 3,	/* constant; warmup 0 means ML_LR_WARMUP_DEFAULT steps */
};
#define ML_LR_WARMUP_DEFAULT 100

/*
 * struct ml_lr_schedule: a schedule over optimizer steps s = 0, 1, ...;
 * epoch of step s is s / steps_per_epoch. A linear warm-up multiplies the
 * rate of any kind by (s + 1) / warmup for s < warmup.
 */
struct ml_lr_schedule {
	int kind;		/* enum ml_lr_kind (default ML_LR_CONSTANT) */
	double lr;		/* the base rate (default 0.01) */
	int64_t steps_per_epoch;	/* step and cosine: optimizer steps an epoch */
	int64_t epochs;		/* cosine: the epochs of the whole run (0: the rate stays lr) */
	int64_t step_epochs;	/* step: epochs between decays (default 1) */
	double gamma;		/* step: the factor of each decay (default 0.1) */
	double lr_min;		/* cosine: the rate at the end (default 0) */
	int64_t warmup;		/* linear warm-up steps (default 0: none, but see ML_LR_WARMUP) */
};

/* ml_lr_schedule_init: the defaults above. */
void ml_lr_schedule_init(struct ml_lr_schedule *s);
/*
 * ml_lr_schedule_name: "constant", "step", "cosine", "warmup" (NULL for an
 * unknown kind); ml_lr_schedule_from_name: the inverse, -1 when unknown.
 */
const char *ml_lr_schedule_name(int kind);
int ml_lr_schedule_from_name(const char *name);
/*
 * ml_lr_schedule_check: ML_EINVAL, with the reason in e, for an unknown
 * kind, a rate that is not finite, negative warm-up steps, a step schedule
 * without steps_per_epoch and step_epochs of at least 1, or a cosine one
 * with a negative length; else 0.
 */
int ml_lr_schedule_check(const struct ml_lr_schedule *s, struct ml_err *e);
/*
 * ml_lr_at: the learning rate of step (0-based). Defined for any s: a
 * schedule that ml_lr_schedule_check refuses gives lr for the parts it
 * cannot compute (no decay without steps_per_epoch, no cosine without a
 * length), never a division by zero.
 */
double ml_lr_at(const struct ml_lr_schedule *s, uint64_t step);

/*
 * The JSON form of a run's state, which checkpoints kept before the
 * TrainRun message (ml_train_state_get reads both; a caller that resumes
 * needs nothing here). model->train->config is free text; mltrain before
 * TrainRun kept one flat JSON object there: its options ("loss", "lr",
 * "batch", ...) and its place in the epoch ("steps_per_epoch",
 * "epoch_step", "epoch_loss_sum", ...). Parsed once, its keys looked up:
 *
 *	struct ml_train_config c;
 *	if (ml_train_config_parse(&c, model->train->config, &err) < 0) ...
 *	int64_t b;
 *	if (ml_train_config_int(&c, "batch", &b)) ...
 *	ml_train_config_free(&c);
 */
enum ml_cfg_type {
	ML_CFG_NUM = 1, ML_CFG_STR = 2, ML_CFG_BOOL = 3, ML_CFG_NULL = 4,
	ML_CFG_NESTED = 5,	/* an object or an array: checked, not kept */
};
struct ml_train_config_item {
	char *key;
	int type;		/* enum ml_cfg_type */
	double num;		/* ML_CFG_NUM (strtod of the text), ML_CFG_BOOL (0 or 1) */
	bool exact;		/* a number written as an integer that fits int64: i */
	int64_t i;
	char *str;		/* ML_CFG_STR, unescaped (UTF-8) */
};
struct ml_train_config {
	int n;
	struct ml_train_config_item *items;	/* in the order of the text */
};

/*
 * ml_train_config_parse: parse text (RFC 8259; NULL, empty or blank text
 * is an empty object) into *c, which the caller frees with
 * ml_train_config_free. The top level must be one object; its values may be
 * strings, numbers, true, false, null, or nested objects and arrays (kept
 * as ML_CFG_NESTED). ML_EFORMAT, with the offset of the error, for anything
 * else (a string with \u0000 among it); ML_ENOMEM. On failure *c is empty.
 */
int ml_train_config_parse(struct ml_train_config *c, const char *text, struct ml_err *e);
/*
 * ml_train_config_num / _int / _str: the value of key (the first, when the
 * text has it twice): false (NULL) when absent or of another type;
 * ml_train_config_int also when the number is not an integer in int64
 * range. An integer written without fraction or exponent is exact (a seed
 * above 2^53 too). The string is c's.
 */
bool ml_train_config_num(const struct ml_train_config *c, const char *key, double *v);
bool ml_train_config_int(const struct ml_train_config *c, const char *key, int64_t *v);
const char *ml_train_config_str(const struct ml_train_config *c, const char *key);
/* ml_train_config_free: release c's items; c is left empty (NULL is a no-op). */
void ml_train_config_free(struct ml_train_config *c);

/*
 * Checkpoints. A checkpoint is a model file (.mlg) that also holds the
 * training state: the optimizer's slots (PARAM tensors that no node reads,
 * listed in model->train->slots, "train.step" and "train.rng" among them),
 * and the state of the run, struct ml_train_state below, which the file
 * keeps as the TrainRun message of formats/mlg.proto (mlg(5)). A program
 * saves one between steps and resumes from it:
 *
 *	struct ml_train_state st;
 *	ml_train_state_init(&st);
 *	st.opts = o; st.sched = sc; st.batch = 64;
 *	... train; after each step st.step++, st.epoch_step++ ...
 *	ml_train_checkpoint_save(model, step, &st, "run.ckpt.mlg", &err);
 *
 *	ml_model_load(&model, "run.ckpt.mlg", ML_FMT_AUTO, &err);	(later)
 *	ml_train_state_init(&st);
 *	ml_train_state_get(&st, model, &err);
 *	ml_train_step_graph(&step, model, &st.opts, &err);	(slots taken over)
 *	... continue from st.step, st.epoch and st.epoch_step ...
 *
 * Checkpoints written before TrainRun existed kept the same state as a
 * JSON object in model->train->config; ml_train_state_get reads those too.
 */
struct ml_train_state {
	/* how the run trains (the fields of lib/train/state.def) */
	struct ml_train_opts opts;	/* the step's options; frozen is not kept */
	struct ml_lr_schedule sched;	/* sched.steps_per_epoch: the length of an epoch */
	int64_t batch;		/* samples per step (default 64) */
	bool shuffle;		/* the data shuffled each epoch (default true) */
	double val_split;	/* the share of the data held out for validation (default 0) */
	int64_t checkpoint_every;	/* steps between checkpoints; 0: each epoch (default) */
	bool keep_denormals;	/* subnormal floats kept (default false: flushed) */
	/* where it stands */
	uint64_t step;		/* optimizer steps taken (model->train->step) */
	uint64_t epoch;		/* epochs completed (model->train->epoch) */
	int64_t epoch_step;	/* batches of the current epoch done */
	double epoch_loss_sum;	/* the current epoch's loss summed over its samples */
	int64_t epoch_correct;	/* its samples classified right */
	int64_t epoch_seen;	/* its samples */
	/* loss scaling (opts.loss_scale > 0, the current S; ml_trainer keeps it) */
	int64_t loss_scale_window;	/* clean steps before S doubles; 0: S is fixed */
	int64_t loss_scale_clean;	/* clean steps since S last changed */
	int64_t loss_scale_skipped;	/* steps skipped for an overflow, in all */
};

/* ml_train_state_init: the defaults above (ml_train_opts_init, ml_lr_schedule_init), at step 0. */
void ml_train_state_init(struct ml_train_state *st);

/*
 * ml_train_state_get: the run's state of the checkpoint ckpt into st: from
 * its TrainRun message, or from the JSON object of an older checkpoint
 * (whose absent keys leave st's fields as they are, so initialise st
 * first); step and epoch from ckpt->train. ML_EINVAL ("not a checkpoint")
 * when ckpt has no training state or no run state in either form;
 * ML_EFORMAT, naming the field, for a damaged one (JSON that does not
 * parse, a name no loss, optimizer or schedule has, a count that is not an
 * integer, an epoch position beyond its epoch); ML_ENOMEM.
 */
int ml_train_state_get(struct ml_train_state *st, const struct ml_graph *ckpt, struct ml_err *e);

/*
 * ml_train_state_set: keep st in model's training state (created when
 * absent), as the TrainRun message a save writes: model->train->run, step
 * and epoch from st, optimizer named after st->opts.optimizer; an old JSON
 * config is dropped. The slots are ml_train_export's to set. ML_ENOMEM.
 */
int ml_train_state_set(struct ml_graph *model, const struct ml_train_state *st, struct ml_err *e);

/*
 * ml_train_checkpoint_save: write a checkpoint of a run to path (atomically,
 * as ml_model_save): ml_train_export(model, step) then ml_train_state_set
 * (model, st), then the model with its training state. model keeps the
 * state afterwards (strip it for an inference model). Errors of those calls.
 */
int ml_train_checkpoint_save(struct ml_graph *model, const struct ml_graph *step,
			     const struct ml_train_state *st, const char *path, struct ml_err *e);

/*
 * ml_train_strip: make g an inference model: drop its training state
 * (g->train) and the tensors only it names (the optimizer's slots, the step
 * counter and RNG state), and unread PARAM or constant tensors named
 * "train.step" or "train.rng" that an export to ONNX left behind. Returns
 * the number of tensors dropped (0 when g has no training state). A
 * training-step graph (ml_train_is_step) is refused with ML_EINVAL and
 * left as it was. ML_ENOMEM.
 */
int ml_train_strip(struct ml_graph *g, struct ml_err *e);

/*
 * ml_train_is_step: whether g is a training step (ml_train_step_graph), not
 * a model: it has update nodes (nodes without outputs, such as ml.Assign
 * and ml.SGDUpdate) or nodes that read its optimizer slots.
 */
bool ml_train_is_step(const struct ml_graph *g);

/*
 * The training loop. A trainer runs a step graph over a loader's batches,
 * epoch after epoch, from where a run's state (struct ml_train_state) says
 * it stands: it sets each batch, the label and the step's learning rate
 * (ml_lr_at of the state's schedule), sums the loss and the hits of the
 * epoch, counts optimizer steps (one every st.opts.accumulate batches),
 * evaluates at each epoch's end and writes checkpoints (every
 * checkpoint_every steps, at each epoch's end but the last, and when
 * asked), so that a fresh trainer made from a checkpoint's state goes on
 * with the same batches and the same bytes. Under MPI (ml_dist_init with
 * more than one rank) each rank trains its share of each batch, and the
 * loss, the hits and the requests are summed over the ranks in one
 * all-reduce a step. The caller keeps what is its own through hooks: a
 * progress display, a report, and the requests to stop or write a
 * checkpoint (from signals, say), which the loop polls once a step:
 *
 *	struct ml_train_state st;		(or ml_train_state_get of a checkpoint)
 *	ml_train_state_init(&st);
 *	st.opts = o; st.sched = sc; st.batch = 64;
 *	struct ml_trainer_opts to;
 *	ml_trainer_opts_init(&to);
 *	to.epochs = 10; to.checkpoint = "run.ckpt.mlg";
 *	to.hooks.on_epoch = report; to.hooks.ctx = &mine;
 *	ml_trainer_new(&t, model, step, loader, &st, &to, &err);
 *	rc = ml_trainer_run(t, &err);		(0: done; ML_TRAINER_STOPPED)
 *	ml_trainer_export(t, &err);		(the weights and the state into model)
 *	ml_trainer_free(t);
 *
 * A trainer is used by one thread at a time; the hooks run on that thread.
 */
struct ml_trainer;
struct ml_loader;	/* ml_data.h */

/* Why a checkpoint is written (the on_checkpoint hook's why). */
enum ml_trainer_ckpt {
	ML_TRAINER_CKPT_CALL = 0,	/* the caller's ml_trainer_checkpoint */
	ML_TRAINER_CKPT_ASKED = 1,	/* the poll hook asked for one (on some rank) */
	ML_TRAINER_CKPT_EVERY = 2,	/* every st.checkpoint_every optimizer steps */
	ML_TRAINER_CKPT_EPOCH = 3,	/* an epoch ended, and more are to come */
};

/* ml_trainer_run and ml_trainer_epoch: a poll hook asked to stop (not an error). */
#define ML_TRAINER_STOPPED 1
/* ml_trainer_stop_code: the stop was asked by another rank alone. */
#define ML_TRAINER_STOP_PEER (-1)

/* The figures of an epoch, as the on_epoch hook gets them. */
struct ml_trainer_epoch {
	uint64_t epoch;		/* epochs completed, this one included (1 for the first) */
	uint64_t step;		/* optimizer steps taken */
	int64_t samples;	/* samples trained in this call (a resumed epoch: since the resume) */
	double secs;		/* the time this call took, the evaluation aside */
	double samples_per_s;	/* samples / secs */
	double loader_wait_s;	/* of secs, the time blocked waiting for the loader's batches */
	double loss;		/* the mean loss over the epoch's samples (resumed ones included) */
	double acc;		/* their accuracy; NAN without opts.hits */
	double eval_loss, eval_acc;	/* ml_train_eval_run's; NAN without opts.eval */
	double lr;		/* the rate of the last step */
	int64_t skipped;	/* loss scaling: steps of this call skipped for an overflow */
};

/*
 * struct ml_trainer_hooks: the caller's part of the loop; each may be NULL.
 * A hook that returns a negative code (with e filled) ends the loop, which
 * returns that code. t is the trainer (ml_trainer_state and the other
 * getters may be called; nothing else).
 */
struct ml_trainer_hooks {
	void *ctx;		/* passed to each hook */
	/*
	 * poll: what this process asks after a step ran, before the ranks
	 * agree: a positive code to stop (the run returns ML_TRAINER_STOPPED
	 * after the step's accounting, and ml_trainer_stop_code gives the
	 * code), and *checkpoint true for a checkpoint now. A request is seen
	 * by every rank, so all stop at the same step; the hook consumes a
	 * checkpoint request (one request, one checkpoint), while a stop
	 * request may stay.
	 */
	int (*poll)(void *ctx, bool *checkpoint);
	/* on_epoch_begin: an epoch starts (or resumes, at ml_trainer_state's epoch_step). */
	int (*on_epoch_begin)(void *ctx, const struct ml_trainer *t, struct ml_err *e);
	/* on_step: a batch was trained and accounted for, and its checkpoint written. */
	int (*on_step)(void *ctx, const struct ml_trainer *t, struct ml_err *e);
	/* on_checkpoint: a checkpoint was written (why: enum ml_trainer_ckpt). */
	int (*on_checkpoint)(void *ctx, const struct ml_trainer *t, int why, struct ml_err *e);
	/*
	 * on_epoch: an epoch ended and was evaluated (ep); called before the
	 * epoch's sums are reset and its checkpoint is written.
	 */
	int (*on_epoch)(void *ctx, const struct ml_trainer *t, const struct ml_trainer_epoch *ep,
			struct ml_err *e);
	/*
	 * on_loss_scale: loss scaling changed the scale after a step (the
	 * state has the new one, old is the one the step ran with): halved
	 * after an overflow, whose step was skipped (skipped true), or doubled
	 * after loss_scale_window clean steps.
	 */
	int (*on_loss_scale)(void *ctx, const struct ml_trainer *t, double old, bool skipped,
			     struct ml_err *e);
};

/* struct ml_trainer_opts: how a trainer runs; ml_trainer_opts_init gives the defaults. */
struct ml_trainer_opts {
	int64_t epochs;		/* epochs to train in all, resumed ones included (default 1) */
	const char *input;	/* the step input the batches' x binds (default NULL: the first) */
	const char *device;	/* the step session's device (default NULL: the CPU); borrowed */
	int verbose;		/* the session's verbosity (default 0) */
	const char *checkpoint;	/* the checkpoint file (rank 0 writes it); NULL: none is
				 * written, the state is only exported; borrowed */
	bool hits;		/* sum the step's "train.correct" output (its third; a step
				 * of opts.accuracy) into the accuracy (default false) */
	/* the evaluation at each epoch's end: ml_train_eval_run(eval, step, eval_data,
	 * eval_x, eval_y); all borrowed; eval NULL (default): none */
	struct ml_train_eval *eval;
	const struct ml_dataset *eval_data;
	const struct ml_batch_spec *eval_x, *eval_y;
	struct ml_trainer_hooks hooks;	/* default: none */
	/* the step runs as this pipeline (ml_pipeline_new; read by ml_trainer_new
	 * alone) instead of one session on device; default NULL */
	const struct ml_pipeline_opts *pipeline;
};

/*
 * ml_train_batch_specs: the batches a step graph of ml_train_step_graph
 * takes from dataset d, for ml_dataset_check and the loader: *xs the
 * samples of its first input (its dtype, f32 where undefined, and its
 * dims after the batch dim; an input without dims takes d's samples as
 * they are), *ys the labels of its "label" input; *classes (may be NULL)
 * the classes of the output the loss reads (its last dim, of an output of
 * rank 2 or more) when d's labels are class indices, else -1. Nothing is
 * checked against d (ml_dataset_check does). ML_EINVAL for a graph without
 * an input or a "label" input, or without the loss's output.
 */
int ml_train_batch_specs(const struct ml_graph *step, const struct ml_dataset *d,
			 struct ml_batch_spec *xs, struct ml_batch_spec *ys, int64_t *classes,
			 struct ml_err *e);

/*
 * ml_train_rebatch: a model whose one input has a fixed batch (its first
 * dim; a PyTorch export at batch 4) gets a symbolic one named sym, through
 * ml_graph_set_input_shapes (whose Reshape targets that held the old batch
 * are rewritten; *rewritten, may be NULL, counts them), so that it trains
 * at any batch and the trained model runs at any. *old (may be NULL) gets
 * the fixed batch. Returns 1 when g changed, 0 when it has nothing to
 * change (not one input, an input without dims, a symbolic batch already);
 * the errors of ml_graph_set_input_shapes, with g unchanged.
 */
int ml_train_rebatch(struct ml_graph *g, const char *sym, int64_t *old, int *rewritten,
		     struct ml_err *e);

/*
 * ml_train_state_bcast: under MPI, root's st on every rank (the options,
 * the step and epoch, the place in the epoch and its sums), so that every
 * rank of a resumed run takes the same batches from the same point; the
 * weights, the optimizer's and the RNG's state are PARAM tensors that
 * ml_dist_bcast_params gives every rank. opts.frozen does not travel (it
 * is left NULL). Every rank must call it; ml_dist_bcast's errors.
 */
int ml_train_state_bcast(struct ml_train_state *st, int root, struct ml_err *e);

/* ml_trainer_opts_init: the defaults above. */
void ml_trainer_opts_init(struct ml_trainer_opts *o);

/*
 * ml_trainer_new: a trainer of step (a graph of ml_train_step_graph of
 * model, after ml_train_fuse or ml_train_distribute as the caller wants)
 * over the batches of loader, from the state st (copied): its schedule
 * gives each step's rate, opts.accumulate the batches of an optimizer step,
 * checkpoint_every the steps between checkpoints, and step, epoch,
 * epoch_step and the epoch's sums where the run stands. model, step and
 * loader are borrowed and must outlive the trainer; model receives the
 * trained state at each checkpoint and ml_trainer_export. The step's
 * session is made here. The loader's batch size is the one that counts
 * (st->batch is only kept in checkpoints). ML_EINVAL for a step without
 * the input or a "label" or "lr" input, an evaluation without its data or
 * specs, a loader without batches, opts.accumulate that does not divide an
 * epoch's batches, or a position outside the epoch; the session's errors;
 * ML_ENOMEM. *out is NULL on failure.
 */
int ml_trainer_new(struct ml_trainer **out, struct ml_graph *model, struct ml_graph *step,
		   struct ml_loader *loader, const struct ml_train_state *st,
		   const struct ml_trainer_opts *o, struct ml_err *e);

/*
 * ml_trainer_epoch: train the rest of the current epoch, evaluate it, call
 * on_epoch, start the next (epoch_step and the sums to 0) and, when
 * opts.epochs are not all done, write a checkpoint. Returns 0;
 * ML_TRAINER_STOPPED when poll asked to stop (after that step's accounting;
 * no checkpoint is written: ml_trainer_checkpoint writes one); the
 * loader's and the session's errors; ML_ENONFINITE when a step's loss is
 * not finite (the message names the step and the last checkpoint), with
 * the state before that step; a hook's code. Under MPI every rank must
 * call it.
 */
int ml_trainer_epoch(struct ml_trainer *t, struct ml_err *e);

/*
 * ml_trainer_run: ml_trainer_epoch until opts.epochs epochs are done
 * (none when they are already); at the end the position is the start of
 * the next epoch (epoch_step 0), as the last checkpoint should keep it.
 * Returns as ml_trainer_epoch.
 */
int ml_trainer_run(struct ml_trainer *t, struct ml_err *e);

/*
 * ml_trainer_export: the weights (synced from the device first) and the
 * optimizer state into model (ml_train_export), and the run's state
 * (ml_train_state_set), as a checkpoint keeps them. Their errors.
 */
int ml_trainer_export(struct ml_trainer *t, struct ml_err *e);

/*
 * ml_trainer_checkpoint: ml_trainer_export, then model saved to
 * opts.checkpoint (by rank 0 alone; atomically, as ml_model_save), then
 * on_checkpoint with why (enum ml_trainer_ckpt; the caller normally passes
 * ML_TRAINER_CKPT_CALL). Their errors. Under MPI every rank must call it.
 */
int ml_trainer_checkpoint(struct ml_trainer *t, int why, struct ml_err *e);

/* ml_trainer_sync: the weights from the step's device back into the step graph. */
int ml_trainer_sync(struct ml_trainer *t, struct ml_err *e);

/*
 * Getters. ml_trainer_state: where the run stands (its step, epoch,
 * epoch_step and the epoch's sums; the rest as given), borrowed until the
 * next call that trains. ml_trainer_batches: the batches of an epoch (the
 * loader's; optimizer steps are batches / opts.accumulate).
 * ml_trainer_last_checkpoint: the step of the last checkpoint written, or
 * UINT64_MAX. ml_trainer_stop_code: the stop code of the last
 * ML_TRAINER_STOPPED (poll's on this process, or ML_TRAINER_STOP_PEER), else 0.
 */
const struct ml_train_state *ml_trainer_state(const struct ml_trainer *t);
int64_t ml_trainer_batches(const struct ml_trainer *t);
uint64_t ml_trainer_last_checkpoint(const struct ml_trainer *t);
int ml_trainer_stop_code(const struct ml_trainer *t);

/* ml_trainer_pipeline: the trainer's pipeline (opts.pipeline), NULL without one. */
const struct ml_pipeline *ml_trainer_pipeline(const struct ml_trainer *t);

/* ml_trainer_free: release t and its session (not what it borrows); NULL is a no-op. */
void ml_trainer_free(struct ml_trainer *t);

/*
 * Pipeline parallelism (lib/train/pipeline.c). A step graph (of
 * ml_train_step_graph, not fused, without accumulation, clipping or
 * Dropout) is cut into stages: each forward node goes to a stage (a plan:
 * automatic, or a file), each backward node to its forward node's stage,
 * each update to its parameter's. Every stage is three subgraphs, its
 * forward part, its backward part and its updates, each run by an ordinary
 * session on the stage's device, from a thread of its own per stage. A
 * batch is split into micro-batches that flow through the stages in a
 * GPipe schedule (every forward, then every backward) or 1F1B (after a
 * warm-up of S - s - 1 forwards, stage s alternates one forward and one
 * backward, so it keeps fewer micro-batches in flight); the tensors that
 * cross stages (activations forward, their gradients backward) are copied
 * between the sessions through the host. Each stage sums its weights'
 * gradients over the micro-batches and updates its parameters once per
 * batch, with their mean: the result is the single-device step of the
 * whole batch up to rounding (BatchNormalization aside, whose statistics
 * are the micro-batch's). The parameters are the step graph's own data,
 * shared by the sessions, so checkpoints, export and evaluation read the
 * step graph as without a pipeline (after ml_pipeline_sync).
 *
 *	struct ml_pipeline_opts po;
 *	ml_pipeline_opts_init(&po);
 *	po.n_stages = 2; po.devices = (const char *[]){ "cpu", "cl:0" };
 *	po.micro = 4; po.schedule = ML_PIPE_1F1B;
 *	ml_pipeline_new(&p, step, &po, &err);		(po.stage_of NULL: auto)
 *	for each batch: ml_pipeline_run(p, "x", &x, &y, lr, &loss, &hits, &err);
 *	ml_pipeline_sync(p, &err); ml_train_export(model, step, &err);
 */
enum ml_pipe_schedule {
	ML_PIPE_GPIPE = 0,
	ML_PIPE_1F1B = 1,
};

/* ml_pipe_schedule_name: "gpipe", "1f1b" (NULL unknown); _from_name: -1 unknown. */
const char *ml_pipe_schedule_name(int sched);
int ml_pipe_schedule_from_name(const char *s);

struct ml_pipeline_opts {
	int n_stages;		/* stages (2 or more; 1 runs the step in one stage) */
	const char *const *devices;	/* per stage: "cpu", "cl", "cl:N"; NULL: all "cpu".
				 * A device other than the CPU takes one stage at most */
	const int *stage_of;	/* per node of the step graph: the stage of each forward
				 * node ("forward/..."), others ignored; NULL: automatic
				 * (ml_pipeline_auto) */
	int micro;		/* micro-batches a batch is split into (default 1) */
	int schedule;		/* enum ml_pipe_schedule (default ML_PIPE_GPIPE) */
	int64_t measure_rows;	/* > 0 with stage_of NULL: the automatic cut from node
				 * times measured on each stage's device at micro-batches of
				 * this many samples (ml_pipeline_auto_measured); 0 (default):
				 * from FLOPs (ml_pipeline_auto) */
};

void ml_pipeline_opts_init(struct ml_pipeline_opts *o);

/*
 * ml_pipeline_auto: stage_of[i] for each node i of step: the forward nodes
 * in order, cut into n contiguous stages whose predicted work (the FLOPs of
 * each forward node and its backward, plus a fixed cost per node) is as
 * even as can be, ties broken by the fewest bytes crossing the cuts; -1 for
 * the other nodes. ML_EINVAL for fewer forward nodes than stages; ML_ENOMEM.
 */
int ml_pipeline_auto(const struct ml_graph *step, int n, int *stage_of, struct ml_err *e);

/*
 * ml_pipeline_auto_measured: as ml_pipeline_auto, but the work of a node
 * on stage s is its time measured on devices[s]: the step graph (a copy:
 * step is not changed) run by a profiling session on each device named, at
 * micro-batches of rows samples of random data (labels 0, lr 0), and each
 * stage costing its nodes' times on its own device, so a slower device
 * gets less. time_s (may be NULL; n x step->n_nodes) gets the seconds
 * node i takes on stage s's device at [s * n_nodes + i]. The sessions' errors (the caller may
 * fall back to ml_pipeline_auto); ML_EINVAL as ml_pipeline_auto.
 */
int ml_pipeline_auto_measured(const struct ml_graph *step, int n, const char *const *devices,
			      int64_t rows, int *stage_of, double *time_s, struct ml_err *e);

/*
 * ml_pipeline_plan_read: a stage file (man mltrain, --pipeline): lines
 * "NODE STAGE" or "FIRST..LAST STAGE", a node given by its name (with or
 * without forward/) or its index among the forward nodes, the range in
 * forward order; and lines "stage N DEVICE". '#' starts a comment. Fills
 * stage_of (per node of step, -1 for nodes not forward), *n_stages (the
 * stages named: the largest stage + 1) and devs[k] for the stages of a
 * "stage" line (borrowed from a buffer that *buf owns, free with free(3);
 * NULL where none; devs has room for max_stages). Every forward node must
 * have a stage and every stage below *n_stages a node. ML_EINVAL (the
 * message names the file's line) for an unknown node, a stage out of
 * [0, max_stages), a forward node without a stage or a stage without a
 * node; ML_EIO when the file cannot be read.
 */
int ml_pipeline_plan_read(const struct ml_graph *step, const char *path, int max_stages,
			  int *stage_of, int *n_stages, const char **devs, char **buf,
			  struct ml_err *e);

/*
 * ml_pipeline_new: the pipeline of step (borrowed; it must outlive the
 * pipeline, and its parameter data with it) under opts: the parts and
 * their sessions (made at the first run). ML_EINVAL for bad options, a
 * stage plan in which a forward node reads a later stage's tensor, a stage
 * without a forward node, more stages than forward nodes; ML_ENOTSUP for a
 * step that it cannot split (clipping, accumulation, Dropout, control
 * flow, a fused step), or an OpenCL device named twice. *out is NULL on
 * failure.
 */
struct ml_pipeline;
int ml_pipeline_new(struct ml_pipeline **out, struct ml_graph *step,
		    const struct ml_pipeline_opts *opts, struct ml_err *e);

/*
 * ml_pipeline_run: one optimizer step on the batch (x for the step input
 * xname, y for "label", both with the batch first) at rate lr: the batch
 * in micro-batches through the stages, then the updates. *loss gets the
 * batch's mean loss, *hits (may be NULL) the sum of "train.correct" (0
 * without it). A batch that the micro-batches do not divide (the last of
 * an epoch) is split into the most micro-batches, up to opts.micro, that
 * divide it. The sessions' errors (the first stage's that failed).
 */
int ml_pipeline_run(struct ml_pipeline *p, const char *xname, const struct ml_tval *x,
		    const struct ml_tval *y, double lr, double *loss, double *hits,
		    struct ml_err *e);

/* ml_pipeline_sync: the stages' device copies of parameters and statistics back into step. */
int ml_pipeline_sync(struct ml_pipeline *p, struct ml_err *e);

/* What a stage is, and what it did (ml_pipeline_stage). */
struct ml_pipeline_stage_info {
	const char *device;
	int n_forward;		/* its forward nodes */
	const char *first, *last;	/* the names of the first and the last */
	int n_nodes;		/* its nodes, forward, backward and updates */
	double work;		/* its share of the predicted work (0 to 1) */
	double predicted_s;	/* its measured nodes' seconds a micro-batch (forward,
				 * backward, updates), with opts.measure_rows; else 0 */
	int64_t send_bytes;	/* bytes a sample its forward sends to later stages */
	double busy_s;		/* seconds its sessions ran, over every batch so far */
};

/* The pipeline's measured figures over every batch so far. */
struct ml_pipeline_stats {
	int64_t batches;
	double wall_s;		/* the batches' wall time, updates included */
	double busy_s;		/* the stages' busy time, summed */
	double bubble;		/* 1 - busy / (stages x wall): the stages' idle share */
};

int ml_pipeline_stages(const struct ml_pipeline *p);
void ml_pipeline_stage(const struct ml_pipeline *p, int s, struct ml_pipeline_stage_info *info);
void ml_pipeline_stats(const struct ml_pipeline *p, struct ml_pipeline_stats *st);

/*
 * ml_pipeline_trace: the last batch as a Chrome trace (chrome://tracing,
 * Perfetto): one lane (thread) per stage named after it and its device,
 * an event per part run ("F3": forward of micro-batch 3, "B3", "update").
 * ML_EIO on a write error.
 */
int ml_pipeline_trace(const struct ml_pipeline *p, FILE *fp, struct ml_err *e);

/* ml_pipeline_free: release p, its sessions and graphs (not step); NULL is a no-op. */
void ml_pipeline_free(struct ml_pipeline *p);

#endif
