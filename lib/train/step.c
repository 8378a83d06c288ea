/*
 * step.c: the training-step graph (ml_train_step_graph): a copy of the
 * model in training mode, a loss, its gradients and the optimizer's
 * in-place updates; ml_train_fuse, which rewrites it for the CPU; and
 * ml_train_export, which brings the trained state back into the inference
 * graph. See lib/ml_train.h for the contracts.
 */
#include <math.h>
#include <stdio.h>

#include "ops/gradrule.h"
#include "train/train.h"

static const char *const loss_names[] = { "softmax-cross-entropy", "nll", "mse", "bce-with-logits" };
static const char *const optim_names[] = { "sgd", "adam", "adamw" };

const char *
ml_loss_name(int loss)
{
	return loss >= 0 && loss < 4 ? loss_names[loss] : NULL;
}

int
ml_loss_from_name(const char *s)
{
	if (s == NULL)
		return -1;
	for (int i = 0; i < 4; i++)
		if (strcmp(s, loss_names[i]) == 0)
			return i;
	if (strcmp(s, "ce") == 0 || strcmp(s, "cross-entropy") == 0)
		return ML_LOSS_SCE;
	return -1;
}

const char *
ml_optim_name(int optim)
{
	return optim >= 0 && optim < 3 ? optim_names[optim] : NULL;
}

int
ml_optim_from_name(const char *s)
{
	for (int i = 0; s != NULL && i < 3; i++)
		if (strcmp(s, optim_names[i]) == 0)
			return i;
	return -1;
}

void
ml_train_opts_init(struct ml_train_opts *o)
{
	memset(o, 0, sizeof *o);
	o->loss = ML_LOSS_SCE;
	o->optimizer = ML_OPTIM_SGD;
	o->beta1 = 0.9;
	o->beta2 = 0.999;
	o->eps = 1e-8;
}

/*
 * weight_input: whether input j of node n is a weight, bias or scale of a
 * layer: one its op's descriptor names (ml_op_weights), or the bias of a
 * MatMul, Add(MatMul(..), b).
 */
static bool
weight_input(const struct ml_graph *g, const struct ml_node *n, int j)
{
	if (j < 32 && (ml_op_weights(n->op) >> j & 1))
		return true;
	if (n->op != ML_OP_ADD || j >= 2)
		return false;
	int o = n->in[1 - j];
	return o >= 0 && g->tensors[o]->producer >= 0 &&
	       g->nodes[g->tensors[o]->producer].op == ML_OP_MATMUL;
}

static bool
frozen(const struct ml_train_opts *o, const char *name)
{
	for (int i = 0; o != NULL && i < o->n_frozen; i++)
		if (o->frozen[i] != NULL && strcmp(o->frozen[i], name) == 0)
			return true;
	return false;
}

/*
 * trainable: mark[t] for each trainable tensor of g: a float PARAM or a
 * float CONST weight that some node reads, not frozen, not an optimizer slot.
 */
static void
trainable(const struct ml_graph *g, const struct ml_train_opts *o, bool *mark)
{
	for (int t = 0; t < g->n_tensors; t++)
		mark[t] = false;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t < 0)
				continue;
			const struct ml_tensor *ten = g->tensors[t];
			if (!ml_dtype_is_float(ten->dtype) || ten->data == NULL)
				continue;
			if (ten->kind == ML_TK_PARAM ||
			    (ten->kind == ML_TK_CONST && weight_input(g, n, j)))
				mark[t] = true;
		}
	}
	for (int t = 0; t < g->n_tensors; t++)
		if (mark[t] && frozen(o, g->tensors[t]->name))
			mark[t] = false;
	if (g->train != NULL)
		for (int i = 0; i < g->train->n_slots; i++)
			if (g->train->slots[i] >= 0 && g->train->slots[i] < g->n_tensors)
				mark[g->train->slots[i]] = false;
}

void
ml_train_param_count(const struct ml_graph *g, const struct ml_train_opts *o, int *n_params,
		     int64_t *n_elems)
{
	bool *mark = ml_calloc((size_t)g->n_tensors + 1, 1);
	int np = 0;
	int64_t ne = 0;
	if (mark != NULL) {
		trainable(g, o, mark);
		for (int t = 0; t < g->n_tensors; t++)
			if (mark[t]) {
				struct ml_tval v;
				ml_graph_tval(g, t, &v);
				np++;
				ne += ML_MAX(0, ml_tval_numel(&v));
			}
	}
	ml_free(mark);
	if (n_params != NULL)
		*n_params = np;
	if (n_elems != NULL)
		*n_elems = ne;
}

/* struct sb: what the builder keeps while it appends nodes. */
struct sb {
	struct ml_graph *g;
	struct ml_err *e;
	int seq;
	int *slots;
	int n_slots, cap_slots;
};

/* node: append op (dom) named PHASE/NAME with tensor inputs and new or named outputs. */
static int
node(struct sb *b, const char *op, const char *dom, const char *name, int n_in, const int *in,
     int n_out, const char *const *outn)
{
	const char *inn[16];
	char nm[300];
	for (int i = 0; i < n_in; i++) {
		if (in[i] < -1)
			return in[i];
		inn[i] = in[i] >= 0 ? b->g->tensors[in[i]]->name : "";
	}
	snprintf(nm, sizeof nm, "%s_%d", name, b->seq++);
	int ni = ml_graph_add_node(b->g, op, dom, nm, n_in, inn, n_out, outn, b->e);
	if (ni >= 0 && b->g->nodes[ni].op == ML_OP_NONE)
		return ml_fail(b->e, ML_ENOTSUP, "op '%s' is unknown", op);
	return ni;
}

/* node1: a one-output node; its output is named NAME_k:0. Returns the output tensor. */
static int
node1(struct sb *b, const char *op, const char *dom, const char *name, int n_in, const int *in)
{
	char on[320];
	const char *o = on;
	snprintf(on, sizeof on, "%s_%d:0", name, b->seq);
	int ni = node(b, op, dom, name, n_in, in, 1, &o);
	return ni < 0 ? ni : b->g->nodes[ni].out[0];
}

static int
cnst(struct sb *b, enum ml_dtype dt, int rank, const int64_t *dims, const void *data, size_t nb)
{
	char nm[64];
	snprintf(nm, sizeof nm, "train/const_%d", b->seq++);
	int t = ml_graph_tensor(b->g, nm);
	if (t < 0)
		return ml_fail(b->e, ML_ENOMEM, "out of memory");
	int rc = ml_graph_set_data(b->g, t, ML_TK_CONST, dt, rank, dims, data, nb, b->e);
	return rc < 0 ? rc : t;
}

static int
add_slot(struct sb *b, int t)
{
	if (b->n_slots == b->cap_slots) {
		int cap = b->cap_slots ? 2 * b->cap_slots : 16;
		int *s = ml_realloc(b->slots, sizeof(int) * (size_t)cap);
		if (s == NULL)
			return ml_fail(b->e, ML_ENOMEM, "out of memory");
		b->slots = s;
		b->cap_slots = cap;
	}
	b->slots[b->n_slots++] = t;
	return 0;
}

/*
 * slot: the optimizer state tensor NAME (a PARAM shaped like tensor like,
 * or with the given dtype and shape when like is -1): taken over when the
 * graph has it already (a resumed model), else zeros (or init).
 */
static int
slot(struct sb *b, const char *name, int like, enum ml_dtype dt, int rank, const int64_t *dims,
     const void *init)
{
	struct ml_graph *g = b->g;
	int64_t d[ML_MAX_RANK];
	if (like >= 0) {
		const struct ml_tensor *l = g->tensors[like];
		dt = l->dtype;
		rank = l->rank;
		memcpy(d, l->dims, sizeof d);
	} else if (rank > 0) {
		memcpy(d, dims, sizeof(int64_t) * (size_t)rank);
	}
	int t = ml_graph_find(g, name);
	if (t >= 0) {
		struct ml_tensor *s = g->tensors[t];
		bool ok = s->data != NULL && s->dtype == dt && s->rank == rank &&
			  (s->kind == ML_TK_PARAM || s->kind == ML_TK_CONST);
		for (int i = 0; ok && i < rank; i++)
			ok = s->dims[i] == d[i];
		if (!ok)
			return ml_fail(b->e, ML_EINVAL, "optimizer state '%s' does not match its "
				       "parameter (a different optimizer or model?)", name);
		s->kind = ML_TK_PARAM;
	} else {
		struct ml_tval v = { .dtype = dt, .rank = rank };
		memcpy(v.dims, d, sizeof v.dims);
		if ((t = ml_graph_tensor(g, name)) < 0)
			return ml_fail(b->e, ML_ENOMEM, "out of memory");
		ML_TRY(ml_graph_set_data(g, t, ML_TK_PARAM, dt, rank, d, init,
					 init != NULL ? (size_t)ml_tval_nbytes(&v) : 0, b->e));
	}
	ML_TRY(add_slot(b, t));
	return t;
}

/* set_node_op: turn node ni into op (domain dom) over new inputs and outputs. */
static int
set_node_op(struct sb *b, int ni, enum ml_op op, int n_in, const int *in, int n_out,
	    const int *out)
{
	struct ml_graph *g = b->g;
	int *ni_in = ml_graph_alloc(g, sizeof(int) * (size_t)(n_in + 1));
	int *ni_out = ml_graph_alloc(g, sizeof(int) * (size_t)(n_out + 1));
	char *ot = ml_graph_strdup(g, ml_op_name(op)), *dom = ml_graph_strdup(g, ml_op_domain(op));
	if (ni_in == NULL || ni_out == NULL || ot == NULL || dom == NULL)
		return ml_fail(b->e, ML_ENOMEM, "out of memory");
	if (n_in > 0)
		memcpy(ni_in, in, sizeof(int) * (size_t)n_in);
	if (n_out > 0)
		memcpy(ni_out, out, sizeof(int) * (size_t)n_out);
	struct ml_node *n = &g->nodes[ni];
	n->op = op;
	n->op_type = ot;
	n->domain = dom;
	n->in = ni_in;
	n->n_in = n_in;
	n->out = ni_out;
	n->n_out = n_out;
	return 0;
}

/* new_act: a fresh activation tensor called NAME. */
static int
new_act(struct sb *b, const char *name)
{
	char nm[320];
	snprintf(nm, sizeof nm, "%s_%d", name, b->seq++);
	int t = ml_graph_tensor(b->g, nm);
	return t < 0 ? ml_fail(b->e, ML_ENOMEM, "out of memory") : t;
}

/*
 * training_mode: BatchNormalization becomes ml.BatchNormTraining plus two
 * ml.EmaUpdate nodes of its running statistics; Dropout becomes
 * ml.DropoutTraining over the RNG state, which one Assign advances.
 */
static int
training_mode(struct sb *b, const struct ml_train_opts *o)
{
	struct ml_graph *g = b->g;
	int rng = -1, streams = 0, nn = g->n_nodes;
	for (int i = 0; i < nn; i++) {
		struct ml_node *n = &g->nodes[i];
		if (n->op == ML_OP_BATCH_NORM) {
			if (n->n_in < 5 || n->in[3] < 0 || n->in[4] < 0)
				return ml_fail(b->e, ML_EINVAL, "node '%s': BatchNormalization needs "
					       "its running mean and variance", n->name);
			for (int j = 1; j < n->n_out; j++)
				if (n->out[j] >= 0)
					return ml_fail(b->e, ML_ENOTSUP, "node '%s': BatchNormalization "
						       "in training mode already", n->name);
			double mom = ml_attr_float(n, "momentum", 0.9);
			int x = n->in[0], sc = n->in[1], bb = n->in[2], mean = n->in[3], var = n->in[4];
			int y = n->out[0];
			char base[300];
			snprintf(base, sizeof base, "%s/batch", n->name);
			int bm = new_act(b, base), bv = new_act(b, base);
			if (bm < 0 || bv < 0)
				return ML_ENOMEM;
			int in[3] = { x, sc, bb }, out[3] = { y, bm, bv };
			ML_TRY(set_node_op(b, i, ML_OP_BN_TRAINING, 3, in, 3, out));
			int e1[2] = { mean, bm }, e2[2] = { var, bv };
			int k = node(b, "EmaUpdate", "ml", "optimizer/running_mean", 2, e1, 0, NULL);
			if (k < 0 || ml_node_set_float(g, k, "momentum", mom) < 0)
				return k < 0 ? k : ML_ENOMEM;
			k = node(b, "EmaUpdate", "ml", "optimizer/running_var", 2, e2, 0, NULL);
			if (k < 0 || ml_node_set_float(g, k, "momentum", mom) < 0)
				return k < 0 ? k : ML_ENOMEM;
		} else if (n->op == ML_OP_DROPOUT) {
			double ratio = ml_attr_float(n, "ratio", 0.5);
			if (n->n_in > 1 && n->in[1] >= 0) {
				const struct ml_tensor *r = g->tensors[n->in[1]];
				if (r->data == NULL)
					return ml_fail(b->e, ML_ENOTSUP, "node '%s': the ratio must be "
						       "a constant", n->name);
				ratio = ml_get_f64(r->data, r->dtype, 0);
			}
			if (n->n_out > 1 && n->out[1] >= 0)
				return ml_fail(b->e, ML_ENOTSUP, "node '%s': Dropout's mask output is "
					       "not supported in training", n->name);
			if (rng < 0) {
				int64_t two = 2, init[2] = { (int64_t)o->seed, 0 };
				if ((rng = slot(b, "train.rng", -1, ML_I64, 1, &two, init)) < 0)
					return rng;
			}
			n = &g->nodes[i];
			char base[300];
			snprintf(base, sizeof base, "%s/mask", n->name);
			int mask = new_act(b, base);
			if (mask < 0)
				return mask;
			int in[2] = { n->in[0], rng }, out[2] = { n->out[0], mask };
			ML_TRY(set_node_op(b, i, ML_OP_DROPOUT_TRAINING, 2, in, 2, out));
			if (ml_node_set_float(g, i, "ratio", ratio) < 0 ||
			    ml_node_set_int(g, i, "stream", streams++) < 0)
				return ML_ENOMEM;
		}
	}
	if (rng >= 0) {
		int64_t two = 2, inc[2] = { 0, 1 };
		int ci = cnst(b, ML_I64, 1, &two, inc, sizeof inc);
		int in[2] = { rng, ci };
		int nx = node1(b, "Add", "", "optimizer/rng", 2, in);
		int as[2] = { rng, nx };
		if (nx < 0)
			return nx;
		ML_TRY(node(b, "Assign", "ml", "optimizer/rng_assign", 2, as, 0, NULL));
	}
	return 0;
}

/*
 * drop_node: remove node ni from g (its outputs keep their tensors).
 * Producers are refreshed by the next ml_graph_toposort.
 */
static void
drop_node(struct ml_graph *g, int ni)
{
	memmove(&g->nodes[ni], &g->nodes[ni + 1], sizeof *g->nodes * (size_t)(g->n_nodes - ni - 1));
	g->n_nodes--;
}

/* stored_identity: node ni is Identity of a stored tensor into a tensor that is not an output. */
static bool
stored_identity(const struct ml_graph *g, int ni)
{
	const struct ml_node *n = &g->nodes[ni];
	if (n->op != ML_OP_IDENTITY || n->n_in != 1 || n->n_out != 1 || n->in[0] < 0 ||
	    n->out[0] < 0)
		return false;
	const struct ml_tensor *t = g->tensors[n->in[0]];
	if ((t->kind != ML_TK_CONST && t->kind != ML_TK_PARAM) || t->data == NULL ||
	    !ml_dtype_is_float(t->dtype))
		return false;
	for (int i = 0; i < g->n_outputs; i++)
		if (g->outputs[i] == n->out[0])
			return false;
	return true;
}

/* stat_only: tensor t is read only as BatchNormalization's running mean or variance. */
static bool
stat_only(const struct ml_graph *g, int t)
{
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_in; j++)
			if (g->nodes[i].in[j] == t && (g->nodes[i].op != ML_OP_BATCH_NORM || j < 3))
				return false;
	return true;
}

/*
 * ml_train_unshare: PyTorch's ONNX export keeps one initializer for
 * parameters of equal initial values (every BatchNorm scale of ones, say)
 * and makes the others Identity nodes of it. Trained, they part ways, so
 * each such Identity output becomes a stored tensor of its own, with a
 * copy of the data (ml_train_export does the same to the model).
 */
int
ml_train_unshare(struct ml_graph *g, struct ml_err *e)
{
	for (int i = 0; i < g->n_nodes;) {
		if (!stored_identity(g, i)) {
			i++;
			continue;
		}
		const struct ml_tensor *src = g->tensors[g->nodes[i].in[0]];
		int t = g->nodes[i].out[0];
		int64_t dims[ML_MAX_RANK];
		memcpy(dims, src->dims, sizeof dims);
		ML_TRY(ml_graph_set_data(g, t, stat_only(g, t) ? ML_TK_CONST : src->kind, src->dtype,
					 src->rank, dims, src->data, src->nbytes, e));
		drop_node(g, i);
	}
	return 0;
}

/* prefix_names: forward/ in front of every node name so far (unnamed ones get OP_i). */
static int
prefix_names(struct ml_graph *g, int upto, struct ml_err *e)
{
	for (int i = 0; i < upto; i++) {
		struct ml_node *n = &g->nodes[i];
		size_t len = strlen(n->name) + strlen(n->op_type) + 40;
		char *s = ml_graph_alloc(g, len);
		if (s == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		if (n->name[0] != '\0')
			snprintf(s, len, "forward/%s", n->name);
		else
			snprintf(s, len, "forward/%s_%d", n->op_type, i);
		n->name = s;
	}
	return 0;
}

/* declare: give graph input t a dtype and shape. */
static void
declare(struct ml_tensor *t, enum ml_dtype dt, int rank, const int64_t *dims, char *const *sym)
{
	t->kind = ML_TK_INPUT;
	t->dtype = dt;
	t->rank = rank;
	for (int d = 0; d < rank; d++) {
		t->dims[d] = dims[d];
		t->sym[d] = sym != NULL ? sym[d] : NULL;
	}
}

int
ml_train_label(struct ml_graph *g, int loss, int out, struct ml_err *e)
{
	const struct ml_tensor *ot = g->tensors[out];
	if (!ml_dtype_is_float(ot->dtype) || ot->rank < 1)
		return ml_fail(e, ML_EINVAL, "output '%s' is not a float tensor", ot->name);
	bool cls = loss == ML_LOSS_SCE || loss == ML_LOSS_NLL;
	if (cls && ot->rank < 2)
		return ml_fail(e, ML_EINVAL, "output '%s' must be [N, classes, ...] for %s",
			       ot->name, ml_loss_name(loss));
	int lab = ml_graph_tensor(g, "label");
	if (lab < 0)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	ot = g->tensors[out];
	int64_t dims[ML_MAX_RANK];
	char *sym[ML_MAX_RANK];
	int r = 0;
	for (int d = 0; d < ot->rank; d++)
		if (!cls || d != 1) {
			dims[r] = ot->dims[d];
			sym[r++] = ot->sym[d];
		}
	declare(g->tensors[lab], cls ? ML_I64 : ot->dtype, r, dims, sym);
	ML_TRY(ml_graph_add_input(g, lab, e));
	/* what --random of mlrun and mlprof should give it: a class index, or a target in [0, 1) */
	char range[64];
	if (cls && ot->dims[1] > 0)
		snprintf(range, sizeof range, "0 %lld", (long long)ot->dims[1]);
	else
		snprintf(range, sizeof range, "0 1");
	if (!cls || ot->dims[1] > 0)
		ML_TRY(ml_graph_set_meta(g, "random:label", range, e));
	return lab;
}

/* add_loss: the label input and the loss nodes; returns the loss tensor. */
static int
add_loss(struct sb *b, const struct ml_train_opts *o, int out)
{
	struct ml_graph *g = b->g;
	if (ml_graph_find(g, "label") >= 0 || ml_graph_find(g, "lr") >= 0 ||
	    ml_graph_find(g, "loss") >= 0 || (o->accuracy && ml_graph_find(g, "train.correct") >= 0))
		return ml_fail(b->e, ML_EINVAL, "the model has a tensor called label, lr, loss "
			       "or train.correct already");
	int lab = ml_train_label(g, o->loss, out, b->e);
	if (lab < 0)
		return lab;
	const char *ln = "loss";
	int in[2] = { out, lab }, ni;
	switch (o->loss) {
	case ML_LOSS_SCE:
		ni = node(b, "SoftmaxCrossEntropyLoss", "", "loss/softmax_cross_entropy", 2, in, 1, &ln);
		break;
	case ML_LOSS_NLL:
		ni = node(b, "NegativeLogLikelihoodLoss", "", "loss/nll", 2, in, 1, &ln);
		break;
	case ML_LOSS_BCE_LOGITS:
		ni = node(b, "BCEWithLogitsLoss", "ml", "loss/bce_with_logits", 2, in, 1, &ln);
		break;
	case ML_LOSS_MSE: {
		int d = node1(b, "Sub", "", "loss/diff", 2, in);
		int sq[2] = { d, d };
		int s = node1(b, "Mul", "", "loss/square", 2, sq);
		ni = node(b, "ReduceMean", "", "loss/mean", 1, &s, 1, &ln);
		if (ni >= 0 && ml_node_set_int(g, ni, "keepdims", 0) < 0)
			return ML_ENOMEM;
		break;
	}
	default:
		return ml_fail(b->e, ML_EINVAL, "unknown loss %d", o->loss);
	}
	if (ni < 0)
		return ni;
	return ml_graph_find(g, "loss");
}

/* add_int: Add(t, an int64 1); the result is named name. */
static int
increment(struct sb *b, int t, const char *name)
{
	int64_t one = 1;
	int c1 = cnst(b, ML_I64, 0, NULL, &one, sizeof one);
	int in[2] = { t, c1 };
	return node1(b, "Add", "", name, 2, in);
}

/*
 * clip_scale: min(1, clip / (||g|| + 1e-6)) over all gradients, as torch's
 * clip_grad_norm_; with inv >= 0 (1/S, loss scaling) the gradients are S g:
 * the norm is taken of g and the result is the factor of S g, times inv.
 */
static int
clip_scale(struct sb *b, const int *gx, int n, double clip, enum ml_dtype dt, int inv)
{
	int total = -1;
	for (int i = 0; i < n; i++) {
		if (gx[i] < 0)
			continue;
		int s = node1(b, "ReduceSumSquare", "", "optimizer/clip_sumsq", 1, &gx[i]);
		if (s < 0)
			return s;
		if (ml_node_set_int(b->g, b->g->n_nodes - 1, "keepdims", 0) < 0)
			return ML_ENOMEM;
		if (total < 0) {
			total = s;
		} else {
			int in[2] = { total, s };
			if ((total = node1(b, "Add", "", "optimizer/clip_sum", 2, in)) < 0)
				return total;
		}
	}
	if (total < 0)
		return -1;
	uint8_t buf[8];
	ml_set_f64(buf, dt, 0, 1e-6);
	int eps = cnst(b, dt, 0, NULL, buf, ml_dtype_size(dt));
	ml_set_f64(buf, dt, 0, clip);
	int cl = cnst(b, dt, 0, NULL, buf, ml_dtype_size(dt));
	ml_set_f64(buf, dt, 0, 1);
	int one = cnst(b, dt, 0, NULL, buf, ml_dtype_size(dt));
	int nrm = node1(b, "Sqrt", "", "optimizer/clip_norm", 1, &total);
	if (inv >= 0) {
		int un[2] = { nrm, inv };
		nrm = node1(b, "Mul", "", "optimizer/clip_unscale", 2, un);
	}
	int a1[2] = { nrm, eps };
	int den = node1(b, "Add", "", "optimizer/clip_den", 2, a1);
	int a2[2] = { cl, den };
	int q = node1(b, "Div", "", "optimizer/clip_ratio", 2, a2);
	int a3[2] = { q, one };
	int f = node1(b, "Min", "", "optimizer/clip_scale", 2, a3);
	if (inv < 0 || f < 0)
		return f;
	int a4[2] = { f, inv };
	return node1(b, "Mul", "", "optimizer/clip_scale_unscale", 2, a4);
}

/* scalar: a constant scalar v of dtype dt */
static int
scalar_const(struct sb *b, enum ml_dtype dt, double v)
{
	uint8_t buf[8];
	ml_set_f64(buf, dt, 0, v);
	return cnst(b, dt, 0, NULL, buf, ml_dtype_size(dt));
}

/*
 * accumulate: gradient accumulation over groups of k micro-batches (one
 * step graph run each). A micro-batch counter (slot train.micro) tells the
 * group's last run, where apply (*apply, a dt scalar) is 1, else 0. Each
 * gradient gx[i] has its sum, slot P.grad_acc (acc[i]), which the update
 * reads (its input S, attribute accumulate k): it adds gx[i] there where
 * apply is 0, and where it is 1 steps with the group's mean (sum + gx[i]) / k
 * and sets the sum to 0, so that a micro-batch costs one pass over the
 * parameter-sized tensors. Returns apply as int64 (the optimizer step's
 * increment).
 */
static int
accumulate(struct sb *b, int k, const int *params, const int *gx, int n, enum ml_dtype dt,
	   int *apply, int *acc)
{
	struct ml_graph *g = b->g;
	int64_t zero = 0, kk = k;
	char nm[400];
	int micro = slot(b, "train.micro", -1, ML_I64, 0, NULL, &zero);
	int m1 = micro < 0 ? micro : increment(b, micro, "optimizer/micro");
	if (m1 < 0)
		return m1;
	int as[2] = { micro, m1 };
	ML_TRY(node(b, "Assign", "ml", "optimizer/micro_assign", 2, as, 0, NULL));
	int md[2] = { m1, cnst(b, ML_I64, 0, NULL, &kk, sizeof kk) };
	int r = node1(b, "Mod", "", "optimizer/micro_mod", 2, md);
	int eq[2] = { r, cnst(b, ML_I64, 0, NULL, &zero, sizeof zero) };
	int last = node1(b, "Equal", "", "optimizer/group_end", 2, eq);
	int ap = node1(b, "Cast", "", "optimizer/apply", 1, &last);
	if (ap < 0 || ml_node_set_int(g, g->n_nodes - 1, "to", (int64_t)dt) < 0)
		return ap < 0 ? ap : ML_ENOMEM;
	int api = node1(b, "Cast", "", "optimizer/apply_i64", 1, &last);
	if (api < 0 || ml_node_set_int(g, g->n_nodes - 1, "to", (int64_t)ML_I64) < 0)
		return api < 0 ? api : ML_ENOMEM;
	for (int i = 0; i < n; i++) {
		acc[i] = -1;
		if (gx[i] < 0)
			continue;
		snprintf(nm, sizeof nm, "%s.grad_acc", g->tensors[params[i]]->name);
		if ((acc[i] = slot(b, nm, params[i], 0, 0, NULL, NULL)) < 0)
			return acc[i];
	}
	*apply = ap;
	return api;
}

/*
 * group_mean: gm[i] = (acc[i] + gx[i]) / k, the gradients that clipping
 * measures when accumulating (the updates compute them again in their pass).
 */
static int
group_mean(struct sb *b, int k, const int *acc, const int *gx, int *gm, int n, enum ml_dtype dt)
{
	int inv = scalar_const(b, dt, 1.0 / k);
	if (inv < 0)
		return inv;
	for (int i = 0; i < n; i++) {
		gm[i] = -1;
		if (gx[i] < 0)
			continue;
		int sa[2] = { acc[i], gx[i] };
		int sum = node1(b, "Add", "", "optimizer/grad_sum", 2, sa);
		int mi[2] = { sum, inv };
		if ((gm[i] = node1(b, "Mul", "", "optimizer/grad_mean", 2, mi)) < 0)
			return gm[i];
	}
	return 0;
}

/*
 * overflow_check: loss scaling's overflow check, one AllFinite node over
 * every gradient: its output "train.finite" (the gradients' dtype, 1 or 0)
 * is the updates' apply (0: nothing changes), *fi (int64) the step counter's increment. A
 * CPU op: the CPU's updates read the gradients anyway, and a reduction per
 * gradient on OpenCL cost more than the fp16 products saved (0.65 ms a
 * step for the MLP's 784 x 256 on POCL, with a round trip per scalar).
 */
static int
overflow_check(struct sb *b, const int *gx, int n, int *fi)
{
	struct ml_graph *g = b->g;
	const char **inn = ml_malloc(sizeof(char *) * ((size_t)n + 1));
	int k = 0;
	if (inn == NULL)
		return ml_fail(b->e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < n; i++)
		if (gx[i] >= 0)
			inn[k++] = g->tensors[gx[i]]->name;
	char nm[64], on[80];
	snprintf(nm, sizeof nm, "optimizer/finite_%d", b->seq++);
	snprintf(on, sizeof on, "%s:1", nm);
	const char *outn[2] = { "train.finite", on };
	int ni = k > 0 ? ml_graph_add_node(g, "AllFinite", "ml", nm, k, inn, 2, outn, b->e) : -1;
	ml_free(inn);
	if (k == 0)
		return ml_fail(b->e, ML_EINVAL, "loss scaling without a gradient");
	if (ni < 0)
		return ni;
	*fi = g->nodes[ni].out[1];
	return g->nodes[ni].out[0];
}

/* updates: the optimizer's update of each parameter (with apply and acc: accumulating) */
static int
updates(struct sb *b, const struct ml_train_opts *o, const int *params, const int *gx, int n,
	int lr, int t, int scale, int apply, const int *acc)
{
	struct ml_graph *g = b->g;
	char nm[400];
	for (int i = 0; i < n; i++) {
		if (gx[i] < 0)
			continue;
		int p = params[i];
		const char *pn = g->tensors[p]->name;
		int ni;
		if (o->optimizer == ML_OPTIM_SGD) {
			int m = -1;
			if (o->momentum != 0) {
				snprintf(nm, sizeof nm, "%s.momentum", pn);
				if ((m = slot(b, nm, p, 0, 0, NULL, NULL)) < 0)
					return m;
			}
			int in[7] = { p, gx[i], lr, m, scale, apply, acc != NULL ? acc[i] : -1 };
			snprintf(nm, sizeof nm, "optimizer/%s", g->tensors[p]->name);
			ni = node(b, "SGDUpdate", "ml", nm,
				  acc != NULL ? 7 : apply >= 0 ? 6 : scale >= 0 ? 5 : m >= 0 ? 4 : 3,
				  in, 0, NULL);
			if (ni < 0)
				return ni;
			if ((acc != NULL && ml_node_set_int(g, ni, "accumulate", o->accumulate) < 0) ||
			    (o->momentum != 0 && ml_node_set_float(g, ni, "momentum", o->momentum) < 0) ||
			    (o->nesterov && ml_node_set_int(g, ni, "nesterov", 1) < 0) ||
			    (o->weight_decay != 0 &&
			     ml_node_set_float(g, ni, "weight_decay", o->weight_decay) < 0))
				return ML_ENOMEM;
		} else {
			snprintf(nm, sizeof nm, "%s.m", pn);
			int m = slot(b, nm, p, 0, 0, NULL, NULL);
			if (m < 0)
				return m;
			snprintf(nm, sizeof nm, "%s.v", g->tensors[p]->name);
			int v = slot(b, nm, p, 0, 0, NULL, NULL);
			if (v < 0)
				return v;
			int in[9] = { p, gx[i], lr, t, m, v, scale, apply, acc != NULL ? acc[i] : -1 };
			snprintf(nm, sizeof nm, "optimizer/%s", g->tensors[p]->name);
			ni = node(b, "AdamUpdate", "ml", nm,
				  acc != NULL ? 9 : apply >= 0 ? 8 : scale >= 0 ? 7 : 6, in, 0, NULL);
			if (ni < 0)
				return ni;
			if ((acc != NULL && ml_node_set_int(g, ni, "accumulate", o->accumulate) < 0) ||
			    ml_node_set_float(g, ni, "beta1", o->beta1) < 0 ||
			    ml_node_set_float(g, ni, "beta2", o->beta2) < 0 ||
			    ml_node_set_float(g, ni, "epsilon", o->eps) < 0 ||
			    ml_node_set_float(g, ni, "weight_decay", o->weight_decay) < 0 ||
			    (o->optimizer == ML_OPTIM_ADAMW && ml_node_set_int(g, ni, "decoupled", 1) < 0))
				return ML_ENOMEM;
		}
	}
	return 0;
}

/*
 * optimizer: the updates and the step counter; ls >= 0 is loss scaling's
 * input S: the updates scale the gradients by 1/S (with clipping's factor)
 * and apply only where every gradient is finite, and the counter (Adam's t)
 * counts the applied steps.
 */
static int
optimizer(struct sb *b, const struct ml_train_opts *o, const int *params, int *gx, int n,
	  int lr, int ls)
{
	struct ml_graph *g = b->g;
	int64_t zero = 0;
	enum ml_dtype dt = ML_F32;
	for (int i = 0; i < n; i++)
		if (gx[i] >= 0) {
			dt = g->tensors[params[i]]->dtype;
			break;
		}
	int step = slot(b, "train.step", -1, ML_I64, 0, NULL, &zero);
	if (step < 0)
		return step;
	int apply = -1, t, rc = 0;
	int *acc = NULL, *gm = NULL;
	if (o->accumulate > 1) {
		acc = ml_malloc(sizeof(int) * ((size_t)n + 1));
		gm = ml_malloc(sizeof(int) * ((size_t)n + 1));
		if (acc == NULL || gm == NULL) {
			rc = ml_fail(b->e, ML_ENOMEM, "out of memory");
			goto out;
		}
		int applyi = accumulate(b, o->accumulate, params, gx, n, dt, &apply, acc);
		if (applyi < 0) {
			rc = applyi;
			goto out;
		}
		int in[2] = { step, applyi };
		t = node1(b, "Add", "", "optimizer/step", 2, in);
	} else if (ls >= 0) {
		int fi = -1;
		if ((apply = overflow_check(b, gx, n, &fi)) < 0) {
			rc = apply;
			goto out;
		}
		int in[2] = { step, fi };
		t = node1(b, "Add", "", "optimizer/step", 2, in);
	} else {
		t = increment(b, step, "optimizer/step");
	}
	if (t < 0) {
		rc = t;
		goto out;
	}
	int as[2] = { step, t };
	if ((rc = node(b, "Assign", "ml", "optimizer/step_assign", 2, as, 0, NULL)) < 0)
		goto out;
	int scale = -1, inv = -1;
	if (ls >= 0 && (scale = inv = node1(b, "Reciprocal", "", "optimizer/unscale", 1, &ls)) < 0) {
		rc = inv;
		goto out;
	}
	if (o->clip_norm > 0) {
		if (acc != NULL && (rc = group_mean(b, o->accumulate, acc, gx, gm, n, dt)) < 0)
			goto out;
		if ((scale = clip_scale(b, acc != NULL ? gm : gx, n, o->clip_norm, dt, inv)) < -1) {
			rc = scale;
			goto out;
		}
	}
	rc = updates(b, o, params, gx, n, lr, t, scale, apply, acc);
out:
	ml_free(acc);
	ml_free(gm);
	return rc;
}

static int
check_opts(const struct ml_train_opts *o, const struct ml_graph *model, struct ml_err *e)
{
	if (o->loss < 0 || o->loss > ML_LOSS_BCE_LOGITS)
		return ml_fail(e, ML_EINVAL, "unknown loss %d", o->loss);
	if (o->optimizer < 0 || o->optimizer > ML_OPTIM_ADAMW)
		return ml_fail(e, ML_EINVAL, "unknown optimizer %d", o->optimizer);
	if (o->output < 0 || o->output >= model->n_outputs)
		return ml_fail(e, ML_EINVAL, "the model has no output %d", o->output);
	if (!(o->momentum >= 0 && o->momentum < 1) || (o->nesterov && o->momentum <= 0))
		return ml_fail(e, ML_EINVAL, "momentum must be in [0, 1) (and above 0 for Nesterov)");
	if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1) || !(o->eps > 0))
		return ml_fail(e, ML_EINVAL, "betas must be in [0, 1) and eps above 0");
	if (!(o->weight_decay >= 0) || !(o->clip_norm >= 0))
		return ml_fail(e, ML_EINVAL, "weight decay and the clipping norm must be 0 or more");
	if (o->accumulate < 0 || o->accumulate > 65536)
		return ml_fail(e, ML_EINVAL, "accumulate over 1 to 65536 micro-batches, not %d",
			       o->accumulate);
	if (o->precision < ML_PREC_F32 || o->precision > ML_PREC_F16)
		return ml_fail(e, ML_EINVAL, "unknown precision %d", o->precision);
	if (!(o->loss_scale >= 0) || isinf(o->loss_scale))
		return ml_fail(e, ML_EINVAL, "the loss scale must be finite and 0 or more");
	if (o->loss_scale > 0 && o->accumulate > 1)
		return ml_fail(e, ML_ENOTSUP, "loss scaling with gradient accumulation");
	return 0;
}

int
ml_train_step_graph(struct ml_graph **out, const struct ml_graph *model,
		    const struct ml_train_opts *o, struct ml_err *e)
{
	struct ml_train_opts def;
	struct ml_graph *g = NULL;
	struct sb b = { .e = e };
	bool *mark = NULL;
	int *params = NULL, *gx = NULL, np = 0, rc;

	*out = NULL;
	if (o == NULL) {
		ml_train_opts_init(&def);
		o = &def;
	}
	if ((rc = check_opts(o, model, e)) < 0)
		return rc;
	if ((rc = ml_graph_clone(&g, model, e)) < 0)
		return rc;
	b.g = g;
	if ((rc = ml_train_unshare(g, e)) < 0 || (rc = ml_graph_toposort(g, e)) < 0 ||
	    (rc = ml_graph_infer(g, e)) < 0)
		goto fail;
	int out_t = g->outputs[o->output];
	/* trainable tensors become PARAM */
	if ((mark = ml_calloc((size_t)g->n_tensors + 1, 1)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto fail;
	}
	trainable(g, o, mark);
	params = ml_malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
	gx = ml_malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
	if (params == NULL || gx == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto fail;
	}
	for (int t = 0; t < g->n_tensors; t++)
		if (mark[t]) {
			g->tensors[t]->kind = ML_TK_PARAM;
			params[np++] = t;
		}
	/* earlier slots are found again by name; the list is rebuilt */
	if (g->train != NULL)
		g->train->n_slots = 0;
	int nfwd = g->n_nodes;
	if ((rc = prefix_names(g, nfwd, e)) < 0 || (rc = training_mode(&b, o)) < 0)
		goto fail;
	int loss = add_loss(&b, o, out_t);
	if (loss < 0) {
		rc = loss;
		goto fail;
	}
	int lr = ml_graph_tensor(g, "lr");
	if (lr < 0) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto fail;
	}
	declare(g->tensors[lr], ML_F32, 0, NULL, NULL);
	if ((rc = ml_graph_add_input(g, lr, e)) < 0 ||
	    (rc = ml_graph_set_meta(g, "random:lr", "0.01 0.01", e)) < 0)
		goto fail;
	/* outputs: the loss, the output it reads, and (o->accuracy) its hits */
	int hits = -1;
	if (o->accuracy && (hits = ml_train_hits(g, o->loss, out_t, ml_graph_find(g, "label"), -1,
						 "loss/accuracy", "train.correct", e)) < 0) {
		rc = hits;
		goto fail;
	}
	g->n_outputs = 0;
	if ((rc = ml_graph_add_output(g, loss, e)) < 0 || (rc = ml_graph_add_output(g, out_t, e)) < 0 ||
	    (hits >= 0 && (rc = ml_graph_add_output(g, hits, e)) < 0))
		goto fail;
	if ((rc = ml_graph_toposort(g, e)) < 0 || (rc = ml_graph_infer(g, e)) < 0)
		goto fail;
	/* y (the loss) was not a node output when outputs were planned; find it again */
	loss = ml_graph_find(g, "loss");
	/* loss scaling: the gradients are those of S loss, S the input "loss_scale" */
	int ls = -1;
	if (o->loss_scale > 0) {
		if ((ls = ml_graph_tensor(g, "loss_scale")) < 0) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto fail;
		}
		declare(g->tensors[ls], ML_F32, 0, NULL, NULL);
		int in[2] = { loss, ls };
		if ((rc = ml_graph_add_input(g, ls, e)) < 0 ||
		    (rc = ml_graph_set_meta(g, "random:loss_scale", "1 1", e)) < 0 ||
		    (rc = loss = node1(&b, "Mul", "", "loss/scaled", 2, in)) < 0 ||
		    (rc = ml_graph_infer(g, e)) < 0)
			goto fail;
	}
	if ((rc = ml_grad(g, loss, params, np, gx, e)) < 0)
		goto fail;
	if ((rc = optimizer(&b, o, params, gx, np, lr, ls)) < 0)
		goto fail;
	if (ls >= 0 && (rc = ml_graph_add_output(g, ml_graph_find(g, "train.finite"), e)) < 0)
		goto fail;
	if (g->train == NULL && (g->train = ml_graph_alloc(g, sizeof *g->train)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto fail;
	}
	g->train->slots = ml_graph_alloc(g, sizeof(int) * (size_t)(b.n_slots + 1));
	if (g->train->slots == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto fail;
	}
	memcpy(g->train->slots, b.slots, sizeof(int) * (size_t)b.n_slots);
	g->train->n_slots = b.n_slots;
	g->train->optimizer = ml_graph_strdup(g, ml_optim_name(o->optimizer));
	int st = ml_graph_find(g, "train.step");
	if (st >= 0 && g->tensors[st]->data != NULL)
		g->train->step = (uint64_t)*(int64_t *)g->tensors[st]->data;
	if ((rc = ml_graph_set_opset(g, "ml", 1, e)) < 0 || (rc = ml_graph_toposort(g, e)) < 0 ||
	    (rc = ml_graph_validate(g, e)) < 0 || (rc = ml_graph_infer(g, e)) < 0 ||
	    (rc = ml_train_mark_precision(g, o->precision, e)) < 0)
		goto fail;
	ml_free(mark);
	ml_free(params);
	ml_free(gx);
	ml_free(b.slots);
	*out = g;
	return 0;
fail:
	ml_free(mark);
	ml_free(params);
	ml_free(gx);
	ml_free(b.slots);
	ml_graph_free(g);
	return rc;
}

/* plain_act: t is computed in the step (or fed), not a stored tensor that updates write. */
static bool
plain_act(const struct ml_graph *g, int t)
{
	return t >= 0 && (g->tensors[t]->kind == ML_TK_ACT || g->tensors[t]->kind == ML_TK_INPUT);
}

/*
 * fuse_gemm: node i (an f32 Gemm) as TrainGemm, taking over the Relu or
 * ReluGrad that is the only reader of its output, or folded into the
 * SGDUpdate that is (as GemmSGDUpdate, when fold); *gone is the node it
 * replaces.
 */
static int
fuse_gemm(struct sb *b, int i, const int *cnt, const int *who, const int *where, bool fold,
	  int *gone)
{
	struct ml_graph *g = b->g;
	const struct ml_node *n = &g->nodes[i];
	int a = n->in[0], bb = n->in[1], cc = n->n_in > 2 ? n->in[2] : -1, y = n->out[0];
	int u = cnt[y] == 1 ? who[y] : -1, uj = u >= 0 ? where[y] : -1;
	const struct ml_node *un = u >= 0 ? &g->nodes[u] : NULL;
	bool ta = ml_attr_int(n, "transA", 0) != 0, tb = ml_attr_int(n, "transB", 0) != 0;
	double alpha = ml_attr_float(n, "alpha", 1);
	*gone = -1;
	/* an SGDUpdate without clipping's scale (accumulating or not) */
	if (fold && un != NULL && un->op == ML_OP_SGD_UPDATE && uj == 1 &&
	    (un->n_in <= 4 || (un->n_in == 7 && un->in[4] < 0)) && cc < 0 && plain_act(g, a) &&
	    plain_act(g, bb)) {
		int in[7] = { un->in[0], a, bb, un->in[2], un->n_in > 3 ? un->in[3] : -1,
			      un->n_in > 5 ? un->in[5] : -1, un->n_in > 6 ? un->in[6] : -1 };
		int nin = in[6] >= 0 ? 7 : in[4] >= 0 ? 5 : 4;
		if ((ta && ml_node_set_int(g, u, "transA", 1) < 0) ||
		    (tb && ml_node_set_int(g, u, "transB", 1) < 0) ||
		    (alpha != 1 && ml_node_set_float(g, u, "alpha", alpha) < 0) ||
		    (strcmp(ml_attr_str(n, "precision", "f32"), "f32") != 0 &&
		     ml_node_set_string(g, u, "precision", ml_attr_str(n, "precision", "f32")) < 0))
			return ml_fail(b->e, ML_ENOMEM, "out of memory");
		*gone = i;
		return set_node_op(b, u, ML_OP_GEMM_SGD_UPDATE, nin, in, 0, NULL);
	}
	int in[4] = { a, bb, cc, -1 }, nin = n->n_in, out = y;
	const char *act = "none";
	if (un != NULL && un->op == ML_OP_RELU && uj == 0) {
		act = "relu";
		out = un->out[0];
		*gone = u;
	} else if (un != NULL && un->op == ML_OP_RELU_GRAD && uj == 0) {
		act = "relu_grad";
		out = un->out[0];
		in[3] = un->in[1];
		nin = 4;
		*gone = u;
	}
	if (ml_node_set_string(g, i, "act", act) < 0)
		return ml_fail(b->e, ML_ENOMEM, "out of memory");
	return set_node_op(b, i, ML_OP_TRAIN_GEMM, nin, in, 1, &out);
}

int
ml_train_fuse(struct ml_graph *g, bool fold_updates, struct ml_err *e)
{
	struct sb b = { .g = g, .e = e };
	int nt = g->n_tensors, nn = g->n_nodes, rc = 0;
	int *cnt = ml_calloc((size_t)nt + 1, sizeof(int));
	int *who = ml_calloc((size_t)nt + 1, sizeof(int));
	int *where = ml_calloc((size_t)nt + 1, sizeof(int));
	bool *dead = ml_calloc((size_t)nn + 1, 1);
	if (cnt == NULL || who == NULL || where == NULL || dead == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	/* readers of each tensor (a graph output counts as two), and the last one */
	for (int i = 0; i < g->n_outputs; i++)
		cnt[g->outputs[i]] += 2;
	for (int i = 0; i < nn; i++)
		for (int j = 0; j < g->nodes[i].n_in; j++) {
			int t = g->nodes[i].in[j];
			if (t >= 0) {
				cnt[t]++;
				who[t] = i;
				where[t] = j;
			}
		}
	for (int i = 0; i < nn; i++) {
		const struct ml_node *n = &g->nodes[i];
		int gone;
		if (dead[i] || n->op != ML_OP_GEMM || n->n_in < 2 || n->n_out != 1 || n->in[0] < 0 ||
		    n->in[1] < 0 || n->out[0] < 0 || g->tensors[n->in[0]]->dtype != ML_F32)
			continue;
		if ((rc = fuse_gemm(&b, i, cnt, who, where, fold_updates, &gone)) < 0)
			goto out;
		if (gone >= 0)
			dead[gone] = true;
	}
	int k = 0;
	for (int i = 0; i < nn; i++)
		if (!dead[i])
			g->nodes[k++] = g->nodes[i];
	g->n_nodes = k;
	if ((rc = ml_graph_toposort(g, e)) < 0 || (rc = ml_graph_validate(g, e)) < 0)
		goto out;
	rc = ml_graph_infer(g, e);
out:
	ml_free(cnt);
	ml_free(who);
	ml_free(where);
	ml_free(dead);
	return rc;
}

/* copy_into: tensor t of model gets the data of step's tensor s (same dtype and size). */
static int
copy_into(struct ml_graph *model, int t, const struct ml_tensor *s, enum ml_tkind kind,
	  struct ml_err *e)
{
	struct ml_tensor *m = model->tensors[t];
	if (m->data != NULL && m->nbytes == s->nbytes && m->dtype == s->dtype &&
	    ml_graph_owns_data(model, m)) {
		memcpy(m->data, s->data, s->nbytes);
		m->kind = kind;
		return 0;
	}
	int64_t dims[ML_MAX_RANK];
	memcpy(dims, s->dims, sizeof dims);
	return ml_graph_set_data(model, t, kind, s->dtype, s->rank, dims, s->data, s->nbytes, e);
}

int
ml_train_export(struct ml_graph *model, const struct ml_graph *step, struct ml_err *e)
{
	/* Identity copies of stored tensors that the step graph made stored (unshare) */
	for (int i = 0; i < model->n_nodes;) {
		int s = stored_identity(model, i) ? ml_graph_find(step, model->tensors[
			model->nodes[i].out[0]]->name) : -1;
		const struct ml_tensor *st = s >= 0 ? step->tensors[s] : NULL;
		if (st == NULL || (st->kind != ML_TK_CONST && st->kind != ML_TK_PARAM) ||
		    st->data == NULL) {
			i++;
			continue;
		}
		int64_t dims[ML_MAX_RANK];
		memcpy(dims, st->dims, sizeof dims);
		int t = model->nodes[i].out[0];
		ML_TRY(ml_graph_set_data(model, t, stat_only(model, t) ? ML_TK_CONST : st->kind,
					 st->dtype, st->rank, dims, st->data, st->nbytes, e));
		drop_node(model, i);
	}
	ML_TRY(ml_graph_toposort(model, e));
	/* parameters and running statistics, by name */
	for (int t = 0; t < model->n_tensors; t++) {
		struct ml_tensor *m = model->tensors[t];
		if (m->kind != ML_TK_CONST && m->kind != ML_TK_PARAM)
			continue;
		int s = ml_graph_find(step, m->name);
		if (s < 0)
			continue;
		const struct ml_tensor *st = step->tensors[s];
		if ((st->kind != ML_TK_PARAM && st->kind != ML_TK_CONST) || st->data == NULL ||
		    st->dtype != m->dtype || st->nbytes != m->nbytes)
			continue;
		if (st->kind == ML_TK_CONST && memcmp(st->data, m->data, st->nbytes) == 0)
			continue;
		ML_TRY(copy_into(model, t, st, st->kind == ML_TK_PARAM ? ML_TK_PARAM : m->kind, e));
	}
	/* the optimizer state, as tensors no node reads */
	if (step->train == NULL)
		return 0;
	if (model->train == NULL &&
	    (model->train = ml_graph_alloc(model, sizeof *model->train)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	int n = step->train->n_slots;
	int *slots = ml_graph_alloc(model, sizeof(int) * (size_t)(n + 1));
	if (slots == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < n; i++) {
		const struct ml_tensor *st = step->tensors[step->train->slots[i]];
		int t = ml_graph_find(model, st->name);
		if (t < 0 && (t = ml_graph_tensor(model, st->name)) < 0)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		ML_TRY(copy_into(model, t, st, ML_TK_PARAM, e));
		slots[i] = t;
	}
	model->train->slots = slots;
	model->train->n_slots = n;
	if (step->train->optimizer != NULL)
		model->train->optimizer = ml_graph_strdup(model, step->train->optimizer);
	int st = ml_graph_find(step, "train.step");
	if (st >= 0 && step->tensors[st]->data != NULL)
		model->train->step = (uint64_t)*(const int64_t *)step->tensors[st]->data;
	return 0;
}
