/*
 * ckpt.c: checkpoints of a training run: the run's state (struct
 * ml_train_state, the fields of state.def) kept in a model's training state
 * and read back, from the TrainRun message or from the JSON object older
 * checkpoints kept (state.c parses it); the checkpoint written; and the
 * training state stripped from a model, which makes it an inference model.
 * See lib/ml_train.h for the contracts.
 */
#include <math.h>
#include <string.h>

#include "ml_impl.h"

void
ml_train_state_init(struct ml_train_state *st)
{
	memset(st, 0, sizeof *st);
	ml_train_opts_init(&st->opts);
	ml_lr_schedule_init(&st->sched);
	st->batch = 64;
	st->shuffle = true;
	st->sched.epochs = 1;
}

/* damaged: ML_EFORMAT for the field key of a checkpoint's state. */
static int
damaged(struct ml_err *e, const char *key, const char *what)
{
	return ml_fail(e, ML_EFORMAT, "damaged training state: %s %s", key, what);
}

/* json_int: an integer of the old JSON form into *v, if there (ML_EFORMAT when not an integer). */
static int
json_int(const struct ml_train_config *c, const char *key, int64_t *v, struct ml_err *e)
{
	double d;
	if (ml_train_config_int(c, key, v))
		return 1;
	if (ml_train_config_num(c, key, &d))
		return damaged(e, key, "is not an integer");
	if (ml_train_config_str(c, key) != NULL)
		return damaged(e, key, "is a string, not a number");
	return 0;
}

/* json_name: an enum of the old JSON form, written by name, into *v (from: the name's lookup). */
static int
json_name(const struct ml_train_config *c, const char *key, int *v, int (*from)(const char *),
	  struct ml_err *e)
{
	const char *s = ml_train_config_str(c, key);
	if (s == NULL) {
		double d;
		return ml_train_config_num(c, key, &d) ? damaged(e, key, "is not a name") : 0;
	}
	int k = from(s);
	if (k < 0)
		return ml_fail(e, ML_EFORMAT, "damaged training state: unknown %s '%.64s'", key, s);
	*v = k;
	return 1;
}

/*
 * from_json: the state of an older checkpoint, the JSON object mltrain
 * kept in TrainState.config, over st (a key that is absent leaves its
 * field as it was).
 */
static int
from_json(struct ml_train_state *st, const char *text, struct ml_err *e)
{
	struct ml_train_config c;
	int64_t i;
	double d;
	int rc = ml_train_config_parse(&c, text, e);
	if (rc == ML_EFORMAT && e != NULL) {
		char msg[sizeof e->msg];
		memcpy(msg, e->msg, sizeof msg);
		return ml_fail(e, rc, "damaged %s", msg);	/* "training state: ..." */
	}
	if (rc < 0)
		return rc;
	if (c.n == 0) {
		ml_train_config_free(&c);
		return ml_fail(e, ML_EINVAL, "not a checkpoint (no run state)");
	}
#define LOSS(k, m) rc = json_name(&c, #k, &st->m, ml_loss_from_name, e)
#define OPTIM(k, m) rc = json_name(&c, #k, &st->m, ml_optim_from_name, e)
#define SCHED(k, m) rc = json_name(&c, #k, &st->m, ml_lr_schedule_from_name, e)
#define DBL(k, m) \
	if (ml_train_config_num(&c, #k, &d)) \
		st->m = d; \
	else if (ml_train_config_str(&c, #k) != NULL) \
		rc = damaged(e, #k, "is a string, not a number")
#define I64(k, m) if ((rc = json_int(&c, #k, &i, e)) > 0) st->m = i
#define U64(k, m) \
	if ((rc = json_int(&c, #k, &i, e)) > 0 && i < 0) \
		rc = damaged(e, #k, "is negative"); \
	else if (rc > 0) \
		st->m = (uint64_t)i
#define INT(k, m) \
	if ((rc = json_int(&c, #k, &i, e)) > 0 && (i < INT32_MIN || i > INT32_MAX)) \
		rc = damaged(e, #k, "is out of range"); \
	else if (rc > 0) \
		st->m = (int)i
#define BOOL(k, m) I64(k, m) != 0
#define X(k, m, t) \
	t(k, m); \
	if (rc < 0) \
		goto out;
#include "train/state.def"
#undef X
#undef LOSS
#undef OPTIM
#undef SCHED
#undef DBL
#undef I64
#undef U64
#undef INT
#undef BOOL
	rc = 0;
out:
	ml_train_config_free(&c);
	return rc;
}

/* check_state: the counts of a state read back are possible. */
static int
check_state(const struct ml_train_state *st, struct ml_err *e)
{
	if (ml_loss_name(st->opts.loss) == NULL)
		return damaged(e, "loss", "is no loss");
	if (ml_optim_name(st->opts.optimizer) == NULL)
		return damaged(e, "optimizer", "is no optimizer");
	if (ml_lr_schedule_name(st->sched.kind) == NULL)
		return damaged(e, "lr_schedule", "is no schedule");
	if (st->batch < 1)
		return damaged(e, "batch", "is not positive");
	if (st->epoch_step < 0 || st->epoch_correct < 0 || st->epoch_seen < 0 ||
	    st->epoch_correct > st->epoch_seen)
		return damaged(e, "epoch_step", "and the epoch's counts are not possible");
	if (st->sched.steps_per_epoch > 0 && st->epoch_step > st->sched.steps_per_epoch)
		return ml_fail(e, ML_EFORMAT,
			       "damaged training state (step %lld of an epoch of %lld)",
			       (long long)st->epoch_step, (long long)st->sched.steps_per_epoch);
	if (!isfinite(st->sched.lr) || !isfinite(st->epoch_loss_sum))
		return damaged(e, "lr", "or the epoch's loss is not finite");
	if (!(st->opts.loss_scale >= 0) || isinf(st->opts.loss_scale) ||
	    st->loss_scale_window < 0 || st->loss_scale_clean < 0 || st->loss_scale_skipped < 0)
		return damaged(e, "loss_scale", "or its counts are not possible");
	return 0;
}

int
ml_train_state_get(struct ml_train_state *st, const struct ml_graph *ckpt, struct ml_err *e)
{
	const struct ml_train *t = ckpt->train;
	if (t == NULL)
		return ml_fail(e, ML_EINVAL, "not a checkpoint (no training state)");
	if (t->run != NULL) {
		*st = *t->run;
		st->opts.n_frozen = 0;
		st->opts.frozen = NULL;
	} else if (t->config != NULL && t->config[0] != '\0') {
		ML_TRY(from_json(st, t->config, e));
	} else {
		return ml_fail(e, ML_EINVAL, "not a checkpoint (no run state)");
	}
	st->step = t->step;
	st->epoch = t->epoch;
	return check_state(st, e);
}

int
ml_train_state_set(struct ml_graph *model, const struct ml_train_state *st, struct ml_err *e)
{
	if (model->train == NULL &&
	    (model->train = ml_graph_alloc(model, sizeof *model->train)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	struct ml_train *t = model->train;
	if (t->run == NULL && (t->run = ml_graph_alloc(model, sizeof *t->run)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	*t->run = *st;
	t->run->opts.n_frozen = 0;
	t->run->opts.frozen = NULL;
	/* the place is TrainState's own step and epoch; TrainRun does not repeat it */
	t->run->step = 0;
	t->run->epoch = 0;
	t->step = st->step;
	t->epoch = st->epoch;
	t->config = NULL;
	const char *on = ml_optim_name(st->opts.optimizer);
	if (on != NULL && (t->optimizer == NULL || strcmp(t->optimizer, on) != 0) &&
	    (t->optimizer = ml_graph_strdup(model, on)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	return 0;
}

int
ml_train_checkpoint_save(struct ml_graph *model, const struct ml_graph *step,
			 const struct ml_train_state *st, const char *path, struct ml_err *e)
{
	ML_TRY(ml_train_export(model, step, e));
	ML_TRY(ml_train_state_set(model, st, e));
	return ml_model_save(model, path, ML_FMT_MLG, e);
}

/* read_by_node: whether a node of g reads tensor t. */
static bool
read_by_node(const struct ml_graph *g, int t)
{
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_in; j++)
			if (g->nodes[i].in[j] == t)
				return true;
	return false;
}

/* is_io: whether t is an input or an output of g. */
static bool
is_io(const struct ml_graph *g, int t)
{
	for (int i = 0; i < g->n_inputs; i++)
		if (g->inputs[i] == t)
			return true;
	for (int i = 0; i < g->n_outputs; i++)
		if (g->outputs[i] == t)
			return true;
	return false;
}

/*
 * left_state: an unread stored tensor that held training state: "train.step"
 * or "train.rng", or a moment "P.momentum", "P.m", "P.v" of a stored tensor
 * P of its shape (what an ONNX export of a checkpoint keeps as initializers).
 */
static bool
left_state(const struct ml_graph *g, int t)
{
	const struct ml_tensor *x = g->tensors[t];
	if (x->kind != ML_TK_CONST && x->kind != ML_TK_PARAM)
		return false;
	if (strcmp(x->name, "train.step") == 0 || strcmp(x->name, "train.rng") == 0)
		return true;
	static const char *const sfx[] = { ".momentum", ".m", ".v" };
	size_t n = strlen(x->name);
	for (size_t k = 0; k < sizeof sfx / sizeof sfx[0]; k++) {
		size_t ns = strlen(sfx[k]);
		if (n <= ns || strcmp(x->name + n - ns, sfx[k]) != 0)
			continue;
		char base[256];
		if (n - ns >= sizeof base)
			continue;
		memcpy(base, x->name, n - ns);
		base[n - ns] = '\0';
		int p = ml_graph_find(g, base);
		if (p < 0)
			continue;
		const struct ml_tensor *w = g->tensors[p];
		if ((w->kind == ML_TK_CONST || w->kind == ML_TK_PARAM) && w->dtype == x->dtype &&
		    w->nbytes == x->nbytes && w->rank == x->rank &&
		    memcmp(w->dims, x->dims, sizeof(int64_t) * (size_t)(x->rank > 0 ? x->rank : 0)) == 0)
			return true;
	}
	return false;
}

/* drop_tensors: remove the tensors marked in drop (none of them read or written by a node). */
static int
drop_tensors(struct ml_graph *g, const bool *drop, struct ml_err *e)
{
	int nt = g->n_tensors, rc = 0;
	int *map = ml_malloc(sizeof(int) * (size_t)(nt + 1));
	struct ml_tensor **old = ml_malloc(sizeof *old * (size_t)(nt + 1));
	if (map == NULL || old == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	memcpy(old, g->tensors, sizeof *old * (size_t)nt);
	ml_free(g->hash);
	g->hash = NULL;
	g->hash_cap = 0;
	g->n_tensors = 0;
	for (int t = 0; t < nt; t++) {
		map[t] = -1;
		if (drop[t]) {
			if (ml_graph_owns_data(g, old[t]))
				ml_free(old[t]->data);
			old[t]->data = NULL;
			continue;
		}
		/* the name is there already: the tensor gets a new slot in the arena */
		int k = ml_graph_tensor(g, old[t]->name);
		if (k < 0) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
		*g->tensors[k] = *old[t];
		map[t] = k;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] >= 0)
				n->in[j] = map[n->in[j]];
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] >= 0)
				n->out[j] = map[n->out[j]];
	}
	for (int i = 0; i < g->n_inputs; i++)
		g->inputs[i] = map[g->inputs[i]];
	for (int i = 0; i < g->n_outputs; i++)
		g->outputs[i] = map[g->outputs[i]];
out:
	ml_free(map);
	ml_free(old);
	return rc;
}

bool
ml_train_is_step(const struct ml_graph *g)
{
	for (int i = 0; i < g->n_nodes; i++)
		if (g->nodes[i].n_out == 0)
			return true;	/* an update: ml.Assign, ml.SGDUpdate, ... */
	if (g->train != NULL)
		for (int i = 0; i < g->train->n_slots; i++) {
			int t = g->train->slots[i];
			if (t >= 0 && t < g->n_tensors && read_by_node(g, t))
				return true;
		}
	return false;
}

int
ml_train_strip(struct ml_graph *g, struct ml_err *e)
{
	int nt = g->n_tensors, n = 0, rc;
	if (ml_train_is_step(g))
		return ml_fail(e, ML_EINVAL, "a training step, not a model: its training state is "
			       "what its nodes update");
	bool *drop = ml_calloc((size_t)nt + 1, sizeof(bool));
	if (drop == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	if (g->train != NULL)
		for (int i = 0; i < g->train->n_slots; i++) {
			int t = g->train->slots[i];
			if (t >= 0 && t < nt)
				drop[t] = !is_io(g, t);
		}
	for (int t = 0; t < nt; t++)
		if (!drop[t] && left_state(g, t) && !read_by_node(g, t) && !is_io(g, t))
			drop[t] = true;
	for (int t = 0; t < nt; t++)
		n += drop[t];
	rc = n > 0 ? drop_tensors(g, drop, e) : 0;
	ml_free(drop);
	if (rc < 0)
		return rc;
	g->train = NULL;
	return n;
}
