/*
 * trainer.c: the training loop (struct ml_trainer): a step graph run over a
 * loader's batches, epoch after epoch, with the learning rate of each step,
 * the epoch's sums, optimizer steps counted with gradient accumulation,
 * evaluation and checkpoints, and under MPI each rank's share of a batch
 * and one all-reduce a step. mltrain is a command line around it; the
 * contracts are in lib/ml_train.h.
 */
#include <math.h>
#include <string.h>

#include "ml_impl.h"

struct ml_trainer {
	struct ml_graph *model, *step;	/* borrowed */
	struct ml_loader *ld;		/* borrowed */
	struct ml_session *sess;	/* NULL with a pipeline */
	struct ml_pipeline *pipe;	/* opts.pipeline's, else NULL */
	struct ml_trainer_opts o;
	struct ml_train_state st;	/* where the run stands */
	const char *xname;		/* the step input of the batches' x */
	int64_t spe;			/* batches an epoch */
	int64_t accum;			/* batches an optimizer step (1 without accumulation) */
	int64_t cur_batch;		/* the batch size the session has bound; 0: none yet */
	uint64_t last_ckpt;		/* the step of the last checkpoint, or UINT64_MAX */
	int stop;			/* the stop code of the last ML_TRAINER_STOPPED */
	struct ml_tval lr;		/* the "lr" input, an f32 scalar */
	struct ml_tval ls;		/* loss scaling: the "loss_scale" input, an f32 scalar */
	int fin;			/* loss scaling: the output "train.finite"; -1: none */
	int64_t skipped;		/* steps skipped this epoch */
};

void
ml_trainer_opts_init(struct ml_trainer_opts *o)
{
	memset(o, 0, sizeof *o);
	o->epochs = 1;
}

int
ml_train_batch_specs(const struct ml_graph *step, const struct ml_dataset *d,
		     struct ml_batch_spec *xs, struct ml_batch_spec *ys, int64_t *classes,
		     struct ml_err *e)
{
	int yi = ml_graph_find(step, "label");
	if (step->n_inputs < 1 || yi < 0 || step->n_outputs < 2)
		return ml_fail(e, ML_EINVAL, "not a training step: no input, 'label' or loss output");
	const struct ml_tensor *xt = step->tensors[step->inputs[0]], *yt = step->tensors[yi];
	memset(xs, 0, sizeof *xs);
	memset(ys, 0, sizeof *ys);
	xs->dtype = xt->dtype == ML_UNDEF ? ML_F32 : xt->dtype;
	if (xt->rank >= 1) {
		xs->rank = xt->rank - 1;
		memcpy(xs->dims, xt->dims + 1, sizeof(int64_t) * (size_t)xs->rank);
	} else {
		xs->rank = d->rank;
		memcpy(xs->dims, d->dims, sizeof xs->dims);
	}
	ys->dtype = yt->dtype;
	ys->rank = yt->rank >= 1 ? yt->rank - 1 : 0;
	memcpy(ys->dims, yt->dims + 1, sizeof(int64_t) * (size_t)ys->rank);
	if (classes != NULL) {
		/* the step's second output is the model output the loss reads */
		const struct ml_tensor *zt = step->tensors[step->outputs[1]];
		*classes = zt->rank >= 2 && d->ytype == ML_I64 ? zt->dims[zt->rank - 1] : -1;
	}
	return 0;
}

int
ml_train_rebatch(struct ml_graph *g, const char *sym, int64_t *old, int *rewritten,
		 struct ml_err *e)
{
	if (g->n_inputs != 1)
		return 0;
	const struct ml_tensor *t = g->tensors[g->inputs[0]];
	if (t->rank < 1 || t->dims[0] < 0)
		return 0;
	struct ml_shape_arg s = { .name = t->name, .rank = t->rank };
	memcpy(s.dims, t->dims, sizeof s.dims);
	memcpy(s.sym, t->sym, sizeof s.sym);
	s.dims[0] = -1;
	s.sym[0] = (char *)sym;
	if (old != NULL)
		*old = t->dims[0];
	ML_TRY(ml_graph_set_input_shapes(g, &s, 1, rewritten, e));
	return 1;
}

int
ml_train_state_bcast(struct ml_train_state *st, int root, struct ml_err *e)
{
	ML_TRY(ml_dist_bcast(st, sizeof *st, root, e));
	st->opts.frozen = NULL;	/* root's pointer: no frozen parameters are kept */
	st->opts.n_frozen = 0;
	return 0;
}

/* new_session: the step graph's session, afresh (device state synced back first). */
static int
new_session(struct ml_trainer *t, struct ml_err *e)
{
	struct ml_session_opts so = { .device = t->o.device != NULL ? t->o.device : "cpu",
				      .verbose = t->o.verbose };
	if (t->pipe != NULL)
		return 0;	/* the pipeline makes its sessions, per micro-batch size */
	if (t->sess != NULL)
		ML_TRY(ml_trainer_sync(t, e));
	ml_session_free(t->sess);
	t->sess = NULL;
	return ml_session_new(&t->sess, t->step, &so, e);
}

int
ml_trainer_new(struct ml_trainer **out, struct ml_graph *model, struct ml_graph *step,
	       struct ml_loader *loader, const struct ml_train_state *st,
	       const struct ml_trainer_opts *o, struct ml_err *e)
{
	struct ml_trainer *t;
	int rc;

	*out = NULL;
	if (model == NULL || step == NULL || loader == NULL || st == NULL)
		return ml_fail(e, ML_EINVAL, "trainer: a model, a step graph, a loader and a state are needed");
	if ((t = ml_calloc(1, sizeof *t)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	t->model = model;
	t->step = step;
	t->ld = loader;
	t->st = *st;
	if (o != NULL)
		t->o = *o;
	else
		ml_trainer_opts_init(&t->o);
	/* the state's own pointer: the caller's list of frozen names need not outlive it */
	t->st.opts.frozen = NULL;
	t->st.opts.n_frozen = 0;
	t->last_ckpt = UINT64_MAX;
	t->accum = st->opts.accumulate > 1 ? st->opts.accumulate : 1;
	t->spe = ml_loader_batches(loader);
	if (t->o.input != NULL) {
		t->xname = t->o.input;
	} else if (step->n_inputs > 0) {
		t->xname = step->tensors[step->inputs[0]]->name;
	}
	if (t->xname == NULL || ml_graph_find(step, t->xname) < 0 || ml_graph_find(step, "label") < 0 ||
	    ml_graph_find(step, "lr") < 0) {
		rc = ml_fail(e, ML_EINVAL, "trainer: the step graph has no input '%s', 'label' or 'lr'",
			     t->xname != NULL ? t->xname : "");
		goto fail;
	}
	if (t->o.eval != NULL && (t->o.eval_data == NULL || t->o.eval_x == NULL || t->o.eval_y == NULL)) {
		rc = ml_fail(e, ML_EINVAL, "trainer: an evaluation without its data or specs");
		goto fail;
	}
	if (t->spe <= 0) {
		rc = ml_fail(e, ML_EINVAL, "trainer: the loader has no batch");
		goto fail;
	}
	if (t->spe % t->accum != 0) {
		rc = ml_fail(e, ML_EINVAL, "trainer: accumulating %lld batches does not divide the %lld "
			     "of an epoch", (long long)t->accum, (long long)t->spe);
		goto fail;
	}
	if (st->epoch_step < 0 || st->epoch_step > t->spe || st->epoch_seen < 0 ||
	    st->epoch_correct < 0) {
		rc = ml_fail(e, ML_EINVAL, "trainer: step %lld of an epoch of %lld",
			     (long long)st->epoch_step, (long long)t->spe);
		goto fail;
	}
	t->fin = -1;
	if (st->opts.loss_scale > 0) {
		for (int i = 0; i < step->n_outputs; i++)
			if (strcmp(step->tensors[step->outputs[i]]->name, "train.finite") == 0)
				t->fin = i;
		if (t->fin < 0 || ml_graph_find(step, "loss_scale") < 0) {
			rc = ml_fail(e, ML_EINVAL, "trainer: loss scaling without a step of loss scaling");
			goto fail;
		}
		if (ml_dist_size() > 1) {
			rc = ml_fail(e, ML_ENOTSUP, "loss scaling under MPI");
			goto fail;
		}
		if ((rc = ml_tval_alloc(&t->ls, ML_F32, 0, NULL, e)) < 0)
			goto fail;
	}
	if (t->o.pipeline != NULL && t->fin >= 0) {
		rc = ml_fail(e, ML_ENOTSUP, "trainer: loss scaling with a pipeline");
		goto fail;
	}
	if (t->o.pipeline != NULL) {
		if (t->accum > 1 || ml_dist_size() > 1) {
			rc = ml_fail(e, ML_ENOTSUP, "trainer: a pipeline splits each batch itself: it "
				     "takes neither accumulation nor MPI");
			goto fail;
		}
		if ((rc = ml_pipeline_new(&t->pipe, step, t->o.pipeline, e)) < 0)
			goto fail;
		t->o.pipeline = NULL;	/* the caller's, which need not outlive the call */
	}
	if ((rc = ml_tval_alloc(&t->lr, ML_F32, 0, NULL, e)) < 0 || (rc = new_session(t, e)) < 0)
		goto fail;
	*out = t;
	return 0;
fail:
	ml_trainer_free(t);
	return rc;
}

void
ml_trainer_free(struct ml_trainer *t)
{
	if (t == NULL)
		return;
	ml_session_free(t->sess);
	ml_pipeline_free(t->pipe);
	ml_tval_clear(&t->lr);
	ml_tval_clear(&t->ls);
	ml_free(t);
}

const struct ml_train_state *
ml_trainer_state(const struct ml_trainer *t)
{
	return &t->st;
}

int64_t
ml_trainer_batches(const struct ml_trainer *t)
{
	return t->spe;
}

uint64_t
ml_trainer_last_checkpoint(const struct ml_trainer *t)
{
	return t->last_ckpt;
}

int
ml_trainer_stop_code(const struct ml_trainer *t)
{
	return t->stop;
}

int
ml_trainer_sync(struct ml_trainer *t, struct ml_err *e)
{
	return t->pipe != NULL ? ml_pipeline_sync(t->pipe, e) : ml_session_sync(t->sess, e);
}

const struct ml_pipeline *
ml_trainer_pipeline(const struct ml_trainer *t)
{
	return t->pipe;
}

int
ml_trainer_export(struct ml_trainer *t, struct ml_err *e)
{
	ML_TRY(ml_trainer_sync(t, e));
	ML_TRY(ml_train_export(t->model, t->step, e));
	return ml_train_state_set(t->model, &t->st, e);
}

int
ml_trainer_checkpoint(struct ml_trainer *t, int why, struct ml_err *e)
{
	ML_TRY(ml_trainer_export(t, e));
	if (ml_dist_rank() == 0 && t->o.checkpoint != NULL)
		ML_TRY(ml_model_save(t->model, t->o.checkpoint, ML_FMT_MLG, e));
	t->last_ckpt = t->st.step;
	if (t->o.hooks.on_checkpoint != NULL)
		ML_TRY(t->o.hooks.on_checkpoint(t->o.hooks.ctx, t, why, e));
	return 0;
}

/* diverged: ML_ENONFINITE for the loss of the step after the state's. */
static int
diverged(const struct ml_trainer *t, double loss, struct ml_err *e)
{
	const char *what = isnan(loss) ? "nan" : "infinite";
	unsigned long long s = (unsigned long long)t->st.step + 1;
	if (t->last_ckpt != UINT64_MAX && t->o.checkpoint != NULL)
		return ml_fail(e, ML_ENONFINITE, "step %llu: the loss is %s; stopping (the checkpoint "
			       "of step %llu is kept in %s)", s, what,
			       (unsigned long long)t->last_ckpt, t->o.checkpoint);
	return ml_fail(e, ML_ENONFINITE, "step %llu: the loss is %s; stopping (no checkpoint was "
		       "written)", s, what);
}

/*
 * scale_after: loss scaling after a step that ran with S (finite: its
 * gradients were): an overflow's step changed nothing, S halves and the
 * clean count restarts; window clean steps double S. A fixed S (window 0)
 * stays. S below 2^-24 gives up (every step would overflow).
 */
static int
scale_after(struct ml_trainer *t, bool finite, struct ml_err *e)
{
	struct ml_train_state *st = &t->st;
	double old = st->opts.loss_scale;
	if (!finite) {
		st->loss_scale_skipped++;
		t->skipped++;
		st->loss_scale_clean = 0;
		if (st->loss_scale_window > 0)
			st->opts.loss_scale = old / 2;
		if (st->opts.loss_scale < 0x1p-24)
			return ml_fail(e, ML_ENONFINITE, "step %llu: the gradients overflow at a loss "
				       "scale of %g; stopping", (unsigned long long)st->step + 1, old);
	} else if (st->loss_scale_window > 0 && ++st->loss_scale_clean >= st->loss_scale_window) {
		st->loss_scale_clean = 0;
		if (old < 0x1p32)
			st->opts.loss_scale = old * 2;
	}
	if ((!finite || st->opts.loss_scale != old) && t->o.hooks.on_loss_scale != NULL)
		return t->o.hooks.on_loss_scale(t->o.hooks.ctx, t, old, !finite, e);
	return 0;
}

/*
 * batch: train one batch of the loader (x, y): 0 when done (or dropped),
 * ML_TRAINER_STOPPED, or an error.
 */
static int
batch(struct ml_trainer *t, const struct ml_tval *x, const struct ml_tval *y, struct ml_err *e)
{
	struct ml_train_state *st = &t->st;
	int nranks = ml_dist_size();
	if (nranks > 1 && x->dims[0] < nranks)
		return 0;	/* a last batch of fewer samples than ranks: dropped */
	/*
	 * The session checks a symbolic batch dim against the inputs already
	 * bound, so a batch of another size (the last of an epoch) needs a new
	 * session; the weights live in the graph.
	 */
	if (x->dims[0] != t->cur_batch) {
		if (t->cur_batch > 0)
			ML_TRY(new_session(t, e));
		t->cur_batch = x->dims[0];
	}
	*(float *)t->lr.data = (float)ml_lr_at(&st->sched, st->step);
	struct ml_tval xv, yv;
	double w = 1;
	if (nranks > 1) {
		ml_dist_shard_batch(x, &xv, &w);
		ml_dist_shard_batch(y, &yv, NULL);
		ml_dist_set_weight(w);
	} else {
		xv = *x;
		yv = *y;
	}
	double loss = 0;
	int64_t b = x->dims[0], nok = 0;
	if (t->pipe != NULL) {
		double h = 0;
		ML_TRY(ml_pipeline_run(t->pipe, t->xname, &xv, &yv, *(float *)t->lr.data, &loss, &h,
				       e));
		if (t->o.hits)
			nok = llround(h);
	} else {
		ML_TRY(ml_session_set_input(t->sess, t->xname, &xv, e));
		ML_TRY(ml_session_set_input(t->sess, "label", &yv, e));
		ML_TRY(ml_session_set_input(t->sess, "lr", &t->lr, e));
		if (t->fin >= 0) {
			*(float *)t->ls.data = (float)st->opts.loss_scale;
			ML_TRY(ml_session_set_input(t->sess, "loss_scale", &t->ls, e));
		}
		ML_TRY(ml_session_run(t->sess, e));
		const struct ml_tval *lv = ml_session_output(t->sess, 0);
		loss = ml_get_f64(lv->data, lv->dtype, 0);
	}
	if (t->pipe == NULL && t->o.hits && t->step->n_outputs > 2) {
		const struct ml_tval *h = ml_session_output(t->sess, 2);
		nok = llround(ml_get_f64(h->data, h->dtype, 0));
	}
	/*
	 * What this step does about requests: those the caller has now, under
	 * MPI what any rank has. A request that comes later (while this rank
	 * waits in the reduction, which is much of the time) stays the
	 * caller's for the next step: deciding on the caller's flags
	 * themselves would let one overwrite, or stop one rank alone.
	 */
	bool ask = false;
	int stop = t->o.hooks.poll != NULL ? t->o.hooks.poll(t->o.hooks.ctx, &ask) : 0;
	if (nranks > 1) {
		/* the global loss, the requests and the hits, the same on all ranks */
		double red[4] = { loss * w, stop ? 1 : 0, ask ? 1 : 0, (double)nok };
		ML_TRY(ml_dist_allreduce(red, 4, ML_F64, ML_DIST_SUM, e));
		loss = red[0];
		stop = red[1] > 0 ? (stop ? stop : ML_TRAINER_STOP_PEER) : 0;
		ask = red[2] > 0;
		nok = (int64_t)red[3];
	}
	if (!isfinite(loss))
		return diverged(t, loss, e);
	if (t->fin >= 0) {
		const struct ml_tval *f = ml_session_output(t->sess, t->fin);
		ML_TRY(scale_after(t, ml_get_f64(f->data, f->dtype, 0) != 0, e));
	}
	/* a skipped step counts as a step: the schedule, the epoch and checkpoints go on */
	st->epoch_step++;
	/* with accumulation the optimizer steps on every accum-th batch of the epoch */
	bool stepped = t->accum <= 1 || st->epoch_step % t->accum == 0;
	st->step += stepped;
	st->epoch_loss_sum += loss * (double)b;
	st->epoch_seen += b;
	st->epoch_correct += nok;
	if (stop) {
		t->stop = stop;
		return ML_TRAINER_STOPPED;
	}
	if (ask)
		ML_TRY(ml_trainer_checkpoint(t, ML_TRAINER_CKPT_ASKED, e));
	else if (st->checkpoint_every > 0 && stepped &&
		 st->step % (uint64_t)st->checkpoint_every == 0 && st->epoch_step < t->spe)
		ML_TRY(ml_trainer_checkpoint(t, ML_TRAINER_CKPT_EVERY, e));
	if (t->o.hooks.on_step != NULL)
		ML_TRY(t->o.hooks.on_step(t->o.hooks.ctx, t, e));
	return 0;
}

int
ml_trainer_epoch(struct ml_trainer *t, struct ml_err *e)
{
	struct ml_train_state *st = &t->st;
	const struct ml_trainer_hooks *h = &t->o.hooks;
	const struct ml_tval *x, *y;
	double t0 = ml_now();
	int64_t seen0 = st->epoch_seen;
	int rc;

	t->stop = 0;
	t->skipped = 0;
	ml_dist_stats_reset();	/* the communication of this epoch, for the caller's report */
	ML_TRY(ml_loader_start(t->ld, st->epoch, st->epoch_step, e));
	if (h->on_epoch_begin != NULL)
		ML_TRY(h->on_epoch_begin(h->ctx, t, e));
	/*
	 * The time the loop blocked in ml_loader_next: near zero while the
	 * loader's threads keep ahead of the steps, the step's idle time when
	 * they do not (augmentation, image decoding).
	 */
	double wait = 0, w0 = ml_now();
	while ((rc = ml_loader_next(t->ld, &x, &y, e)) > 0) {
		wait += ml_now() - w0;
		if ((rc = batch(t, x, y, e)) != 0)
			return rc;
		w0 = ml_now();
	}
	if (rc < 0)
		return rc;

	struct ml_trainer_epoch ep = { .eval_loss = NAN, .eval_acc = NAN };
	ep.secs = ml_now() - t0;
	ep.loader_wait_s = wait + (ml_now() - w0);
	ep.samples = st->epoch_seen - seen0;
	ep.samples_per_s = (double)ep.samples / (ep.secs > 0 ? ep.secs : 1e-9);
	st->epoch++;
	ep.epoch = st->epoch;
	ep.step = st->step;
	ep.loss = st->epoch_loss_sum / (double)(st->epoch_seen ? st->epoch_seen : 1);
	ep.acc = t->o.hits ? (double)st->epoch_correct / (double)(st->epoch_seen ? st->epoch_seen : 1) :
			     NAN;
	ep.lr = ml_lr_at(&st->sched, st->step ? st->step - 1 : 0);
	ep.skipped = t->skipped;
	if (t->o.eval != NULL) {
		ML_TRY(ml_trainer_sync(t, e));
		ML_TRY(ml_train_eval_run(t->o.eval, t->step, t->o.eval_data, t->o.eval_x, t->o.eval_y,
					 &ep.eval_loss, &ep.eval_acc, e));
	}
	if (h->on_epoch != NULL)
		ML_TRY(h->on_epoch(h->ctx, t, &ep, e));
	st->epoch_step = 0;
	st->epoch_loss_sum = 0;
	st->epoch_correct = st->epoch_seen = 0;
	if ((int64_t)st->epoch < t->o.epochs)
		ML_TRY(ml_trainer_checkpoint(t, ML_TRAINER_CKPT_EPOCH, e));
	return 0;
}

int
ml_trainer_run(struct ml_trainer *t, struct ml_err *e)
{
	while ((int64_t)t->st.epoch < t->o.epochs) {
		int rc = ml_trainer_epoch(t, e);
		if (rc != 0)
			return rc;
	}
	t->st.epoch_step = 0;	/* a run that ends stands at the start of the next epoch */
	return 0;
}
