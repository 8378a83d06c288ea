/*
 * pipeline.c: pipeline parallelism over devices (lib/ml_train.h, "Pipeline
 * parallelism"). The step graph's nodes are split into parts: per stage a
 * forward part (F), a backward part (B) and its updates (U), and one
 * global part (G, the step counter) run once a batch on the CPU before the
 * updates. Each part is a graph of its own whose inputs are the tensors it
 * reads from other parts and whose outputs are the tensors others read;
 * its stored tensors (weights, optimizer state) are the step graph's data,
 * borrowed, so every session of every part reads and writes the same
 * parameters. An ordinary session (the one executor of lib/exec) runs each
 * part on its stage's device. Per batch, one thread per stage runs its
 * parts in the schedule's order; a part waits (one mutex, one condition
 * variable) until the parts it reads have done its micro-batch. The
 * crossing tensors go through a host-side table, one row per micro-batch
 * in flight (all M for GPipe, S for 1F1B, a row reused once its readers
 * are done); the weight gradients (B to U) are summed there instead, and
 * scaled to the mean by their producer after the last micro-batch. After
 * the updates, each stage's sessions copy what their device changed back
 * to the step's data (ml_session_sync) and upload it again before their
 * next use (ml_session_reload).
 */
#include <pthread.h>
#include <stdio.h>

#include "ml_impl.h"
#include "train/train.h"

enum { PH_F, PH_B, PH_U, PH_N };

static const char *const sched_names[] = { "gpipe", "1f1b" };

const char *
ml_pipe_schedule_name(int s)
{
	return s >= 0 && s < 2 ? sched_names[s] : NULL;
}

int
ml_pipe_schedule_from_name(const char *s)
{
	for (int i = 0; s != NULL && i < 2; i++)
		if (strcmp(s, sched_names[i]) == 0)
			return i;
	return -1;
}

void
ml_pipeline_opts_init(struct ml_pipeline_opts *o)
{
	memset(o, 0, sizeof *o);
	o->n_stages = 1;
	o->micro = 1;
	o->schedule = ML_PIPE_GPIPE;
}

/* struct part: one stage's phase (or the global part) as a graph and its session. */
struct part {
	struct ml_graph *g;	/* NULL: the part has no node */
	struct ml_session *s;
	const char *device;
	int n_in, n_out;
	int *in, *out;		/* step tensor indices of g's inputs and outputs */
	int *in_part;		/* per input: the part producing it, -1 fed by the caller */
	int n_readers;
	int *readers;		/* forward and backward parts reading its outputs' rows */
	int n_nodes;
};

/* struct ev: one part run of the last batch, for the trace. */
struct ev {
	int ph, m;
	double t0, t1;		/* seconds after the batch began */
};

struct stage {
	struct ml_pipeline *p;
	int idx;
	pthread_t th;
	struct ml_err err;
	int rc;
	struct ev *ev;
	int n_ev;
	double busy, busy_all;
	int n_fwd, first, last;	/* forward nodes: count, first and last node index */
	double work, predicted;
	int64_t send;
};

struct ml_pipeline {
	struct ml_graph *step;	/* borrowed */
	int S, M, sched;
	int n_parts;		/* 3 S + 1: part 3 s + ph, then the global part */
	struct part *parts;
	struct stage *st;
	char **dev;		/* per stage: its device (copied) */
	int *node_part;		/* per step node */
	double *node_time;	/* measure_rows: per step node, its seconds on its stage's
				 * device a micro-batch; NULL else */
	/* tensors that cross parts: xid[t] >= 0, their index in the tables */
	int *xid, n_x;
	bool *to_fb;		/* per crossing tensor: read by a forward or backward part */
	bool *to_u;		/* per crossing tensor: read by an update part (summed) */
	struct ml_tval *vals;	/* (R + 1) rows of n_x: micro-batch m's in row m % R, then
				 * the batch's (the global part's) */
	struct ml_tval *gsum;	/* n_x: the sums of the gradients the updates read */
	int loss_t, hits_t, label_t, lr_t;
	double *loss_m, *hits_m;	/* per micro-batch */
	int cap_m;		/* rows allocated (R + 1) */
	int R;			/* rows of micro-batch values: M (GPipe), S (1F1B) */
	int64_t rows;		/* the micro-batch size the sessions were made for */
	/* the batch in progress */
	int mb;			/* its micro-batches */
	const struct ml_tval *x, *y;
	int x_t;
	struct ml_tval lr;
	double t_start;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int *done;		/* per part: micro-batches done */
	bool failed;
	/* the figures */
	int64_t batches;
	double wall;
};

static int
part_id(int s, int ph)
{
	return 3 * s + ph;
}

/* classify: node_part[i] for each node of the step, or ML_ENOTSUP/ML_EINVAL. */
static int
classify(struct ml_pipeline *p, const int *stage_of, struct ml_err *e)
{
	const struct ml_graph *g = p->step;
	int S = p->S, G = 3 * S, rc = 0;
	int *pstage = ml_malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
	int *tstage = ml_malloc(sizeof(int) * ((size_t)g->n_tensors + 1));	/* forward producer's */
	if (pstage == NULL || tstage == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int t = 0; t < g->n_tensors; t++)
		pstage[t] = tstage[t] = -1;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		int part = -1;
		if (ml_node_has_body(n)) {
			rc = ml_fail(e, ML_ENOTSUP, "node '%s' (%s): control flow cannot be pipelined",
				     n->name, n->op_type);
			goto out;
		}
		if (ml_pipe_is_forward(n)) {
			int s = stage_of != NULL ? stage_of[i] : -1;
			if (s < 0 || s >= S) {
				rc = ml_fail(e, ML_EINVAL, "forward node '%s' has no stage in [0, %d)",
					     n->name + 8, S);
				goto out;
			}
			part = part_id(s, PH_F);
		} else if (strncmp(n->name, "loss/", 5) == 0) {
			part = part_id(S - 1, PH_F);
		} else if (strncmp(n->name, "backward/", 9) == 0) {
			int o = ml_pipe_owner(g, i), s = -1;
			if (o >= 0 && o < i)
				s = p->node_part[o] / 3;
			/* else: the latest stage among the backward and forward nodes it reads */
			for (int j = 0; s < 0 && j < n->n_in; j++)
				if (n->in[j] >= 0 && tstage[n->in[j]] > s)
					s = tstage[n->in[j]];
			part = part_id(s >= 0 ? s : S - 1, PH_B);
		} else if (n->op == ML_OP_SGD_UPDATE || n->op == ML_OP_ADAM_UPDATE) {
			int w = n->in[0];
			part = part_id(w >= 0 && pstage[w] >= 0 ? pstage[w] : S - 1, PH_U);
		} else if (n->op == ML_OP_EMA_UPDATE && n->n_in > 1 && n->in[1] >= 0 &&
			   tstage[n->in[1]] >= 0) {
			part = part_id(tstage[n->in[1]], PH_F);
		} else if (strncmp(n->name, "optimizer/step", 14) == 0 &&
			   (n->op == ML_OP_ADD || n->op == ML_OP_ASSIGN)) {
			part = G;
		} else if (n->op == ML_OP_GEMM_SGD_UPDATE) {
			rc = ml_fail(e, ML_ENOTSUP, "node '%s': a fused step (ml_train_fuse with updates "
				     "folded) cannot be pipelined", n->name);
			goto out;
		} else {
			rc = ml_fail(e, ML_ENOTSUP, "node '%s' (%s): gradient clipping, accumulation "
				     "and Dropout cannot be pipelined", n->name, n->op_type);
			goto out;
		}
		p->node_part[i] = part;
		if (part < G && part % 3 != PH_U)
			for (int j = 0; j < n->n_out; j++)
				if (n->out[j] >= 0)
					tstage[n->out[j]] = part / 3;
		if (part % 3 == PH_F && part < G)
			for (int j = 0; j < n->n_in; j++) {
				int t = n->in[j];
				if (t >= 0 && ml_graph_t(g, t)->kind == ML_TK_PARAM &&
				    (pstage[t] < 0 || pstage[t] > part / 3))
					pstage[t] = part / 3;
			}
	}
out:
	ml_free(pstage);
	ml_free(tstage);
	return rc;
}

/*
 * check_edges: every tensor read from another part comes from a part that
 * has run by then in any schedule: a forward part reads forward parts of
 * its stage or earlier ones, a backward part backward parts of its stage or
 * later ones (and any forward part), an update part backward parts and
 * the global part, the global part nothing. Sets xid, to_fb, to_u.
 */
static int
check_edges(struct ml_pipeline *p, struct ml_err *e)
{
	const struct ml_graph *g = p->step;
	int G = 3 * p->S;
	int *prod = ml_malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
	if (prod == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int t = 0; t < g->n_tensors; t++)
		prod[t] = -1;
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_out; j++)
			if (g->nodes[i].out[j] >= 0)
				prod[g->nodes[i].out[j]] = i;
	int rc = 0;
	for (int i = 0; i < g->n_nodes && rc == 0; i++) {
		const struct ml_node *n = &g->nodes[i];
		int c = p->node_part[i];
		for (int j = 0; j < n->n_in && rc == 0; j++) {
			int t = n->in[j];
			if (t < 0 || prod[t] < 0 || p->node_part[prod[t]] == c)
				continue;
			int q = p->node_part[prod[t]];
			int cs = c / 3, cp = c % 3, qs = q / 3, qp = q % 3;
			bool ok;
			if (c == G)
				ok = false;
			else if (q == G)
				ok = cp == PH_U;
			else if (cp == PH_F)
				ok = qp == PH_F && qs <= cs;
			else if (cp == PH_B)
				ok = qp == PH_F || (qp == PH_B && qs >= cs);
			else
				ok = qp == PH_B;
			if (!ok) {
				static const char *const ph[] = { "forward", "backward", "update" };
				rc = ml_fail(e, ML_EINVAL, "node '%s' (%s of stage %d) reads '%s' of "
					     "stage %d's %s: a stage's forward reads only earlier stages",
					     n->name, c == G ? "step" : ph[cp], cs, g->tensors[t]->name,
					     qs, q == G ? "step" : ph[qp]);
				break;
			}
			if (p->xid[t] < 0)
				p->xid[t] = p->n_x++;
		}
	}
	for (int k = 0; k < g->n_outputs; k++) {
		int t = g->outputs[k];
		if (t >= 0 && prod[t] >= 0 && p->xid[t] < 0)
			p->xid[t] = p->n_x++;
	}
	if (rc == 0 && ((p->to_fb = ml_calloc((size_t)p->n_x + 1, 1)) == NULL ||
			(p->to_u = ml_calloc((size_t)p->n_x + 1, 1)) == NULL))
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < g->n_nodes && rc == 0; i++) {
		const struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t < 0 || prod[t] < 0 || p->xid[t] < 0)
				continue;
			int q = p->node_part[prod[t]], c = p->node_part[i];
			if (c % 3 == PH_U && c < G && q % 3 == PH_B && q < G)
				p->to_u[p->xid[t]] = true;
			else
				p->to_fb[p->xid[t]] = true;
		}
	}
	ml_free(prod);
	return rc;
}

/* add_idx: append v to the list *a of *n (grown by one). */
static int
add_idx(int **a, int *n, int v)
{
	int *b = ml_realloc(*a, sizeof(int) * ((size_t)*n + 1));
	if (b == NULL)
		return ML_ENOMEM;
	b[(*n)++] = v;
	*a = b;
	return 0;
}

/* copy_meta: tensor dt of d takes the type, shape and kind of tensor st of s. */
static void
copy_meta(struct ml_tensor *d, const struct ml_tensor *s)
{
	d->dtype = s->dtype;
	d->rank = s->rank;
	memcpy(d->dims, s->dims, sizeof d->dims);
	memcpy(d->sym, s->sym, sizeof d->sym);	/* the step's strings outlive the part */
	d->q = s->q;
}

/*
 * build_part: part pid's graph: its nodes in the step's order (attributes
 * shared with the step, which outlives it), its inputs and outputs, and its
 * stored tensors as views of the step's data (drop_part clears them before
 * the graph is freed).
 */
static int
build_part(struct ml_pipeline *p, int pid, struct ml_err *e)
{
	const struct ml_graph *sg = p->step;
	struct part *pt = &p->parts[pid];
	struct ml_graph *g = NULL;
	int rc;
	char *mark = ml_calloc((size_t)sg->n_tensors + 1, 1);	/* 1 made here, 2 input */
	if (mark == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < sg->n_nodes; i++)
		if (p->node_part[i] == pid) {
			pt->n_nodes++;
			for (int j = 0; j < sg->nodes[i].n_out; j++)
				if (sg->nodes[i].out[j] >= 0)
					mark[sg->nodes[i].out[j]] = 1;
		}
	if (pt->n_nodes == 0) {
		ml_free(mark);
		return 0;
	}
	if ((rc = ml_graph_new(&g, e)) < 0)
		goto out;
	for (int k = 0; k < sg->n_opsets; k++)
		if ((rc = ml_graph_set_opset(g, sg->opset_domain[k], sg->opset_version[k], e)) < 0)
			goto out;
	for (int i = 0; i < sg->n_nodes; i++) {
		if (p->node_part[i] != pid)
			continue;
		const struct ml_node *n = &sg->nodes[i];
		const char **inn = ml_calloc((size_t)n->n_in + 1, sizeof *inn);
		const char **outn = ml_calloc((size_t)n->n_out + 1, sizeof *outn);
		if (inn == NULL || outn == NULL) {
			ml_free(inn);
			ml_free(outn);
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			inn[j] = t >= 0 ? sg->tensors[t]->name : "";
			if (t >= 0 && mark[t] == 0 && sg->tensors[t]->kind != ML_TK_CONST &&
			    sg->tensors[t]->kind != ML_TK_PARAM) {
				mark[t] = 2;
				int prod = p->xid[t] >= 0 || sg->tensors[t]->kind == ML_TK_INPUT ? 0 : -1;
				if (prod < 0) {
					ml_free(inn);
					ml_free(outn);
					rc = ml_fail(e, ML_EINVAL, "tensor '%s' has no producer",
						     sg->tensors[t]->name);
					goto out;
				}
				if (add_idx(&pt->in, &pt->n_in, t) < 0) {
					ml_free(inn);
					ml_free(outn);
					rc = ml_fail(e, ML_ENOMEM, "out of memory");
					goto out;
				}
			}
		}
		for (int j = 0; j < n->n_out; j++)
			outn[j] = n->out[j] >= 0 ? sg->tensors[n->out[j]]->name : "";
		int ni = ml_graph_add_node(g, n->op_type, n->domain, n->name, n->n_in, inn, n->n_out,
					   outn, e);
		ml_free(inn);
		ml_free(outn);
		if (ni < 0) {
			rc = ni;
			goto out;
		}
		g->nodes[ni].attrs = n->attrs;
		g->nodes[ni].n_attr = n->n_attr;
	}
	/* every tensor of the part: the step's type and shape; stored ones, its data */
	for (int t = 0; t < g->n_tensors; t++) {
		struct ml_tensor *d = g->tensors[t];
		int st = ml_graph_find(sg, d->name);
		ML_ASSERT(st >= 0);
		const struct ml_tensor *s = sg->tensors[st];
		copy_meta(d, s);
		if (s->kind == ML_TK_CONST || s->kind == ML_TK_PARAM) {
			d->kind = s->kind;
			d->data = s->data;
			d->nbytes = s->nbytes;
		}
	}
	for (int k = 0; k < pt->n_in; k++)
		if ((rc = ml_graph_add_input(g, ml_graph_find(g, sg->tensors[pt->in[k]]->name), e)) < 0)
			goto out;
	for (int t = 0; t < sg->n_tensors; t++)
		if (mark[t] == 1 && p->xid[t] >= 0) {
			if (add_idx(&pt->out, &pt->n_out, t) < 0 ||
			    (rc = ml_graph_add_output(g, ml_graph_find(g, sg->tensors[t]->name), e)) < 0) {
				rc = rc < 0 ? rc : ml_fail(e, ML_ENOMEM, "out of memory");
				goto out;
			}
		}
	if ((rc = ml_graph_toposort(g, e)) < 0)
		goto out;
	pt->g = g;
	g = NULL;
	/* where each input comes from */
	if ((pt->in_part = ml_malloc(sizeof(int) * ((size_t)pt->n_in + 1))) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int k = 0; k < pt->n_in; k++) {
		int t = pt->in[k];
		pt->in_part[k] = -1;
		for (int i = 0; i < sg->n_nodes && pt->in_part[k] < 0; i++)
			for (int j = 0; j < sg->nodes[i].n_out; j++)
				if (sg->nodes[i].out[j] == t)
					pt->in_part[k] = p->node_part[i];
	}
out:
	if (g != NULL) {
		for (int t = 0; t < g->n_tensors; t++)
			if (g->tensors[t]->kind == ML_TK_CONST || g->tensors[t]->kind == ML_TK_PARAM)
				g->tensors[t]->data = NULL;
		ml_graph_free(g);
	}
	ml_free(mark);
	return rc;
}

/* drop_part: free part pt's session and graph (its stored data is the step's). */
static void
drop_part(struct part *pt)
{
	ml_session_free(pt->s);
	pt->s = NULL;
	if (pt->g != NULL) {
		for (int t = 0; t < pt->g->n_tensors; t++)
			if (pt->g->tensors[t]->kind == ML_TK_CONST ||
			    pt->g->tensors[t]->kind == ML_TK_PARAM)
				pt->g->tensors[t]->data = NULL;
		ml_graph_free(pt->g);
	}
	pt->g = NULL;
	ml_free(pt->in);
	ml_free(pt->out);
	ml_free(pt->in_part);
	ml_free(pt->readers);
}

/* stage_figures: the stage's forward nodes, predicted work and bytes sent. */
static void
stage_figures(struct ml_pipeline *p)
{
	const struct ml_graph *g = p->step;
	double total = 0;
	double *w = ml_calloc((size_t)p->S + 1, sizeof(double));
	for (int s = 0; s < p->S; s++)
		p->st[s].first = p->st[s].last = -1;
	for (int i = 0; i < g->n_nodes; i++) {
		int pid = p->node_part[i];
		if (pid >= 3 * p->S)
			continue;
		int s = pid / 3;
		if (pid % 3 == PH_F && ml_pipe_is_forward(&g->nodes[i])) {
			struct stage *st = &p->st[s];
			st->n_fwd++;
			if (st->first < 0)
				st->first = i;
			st->last = i;
		}
		int64_t f = ml_pipe_sample_flops(g, i);
		double c = p->node_time != NULL ? p->node_time[i] :
			   (f > 0 ? (double)f : 0) + ML_PIPE_NODE_COST;
		if (w != NULL)
			w[s] += c;
		total += c;
	}
	for (int s = 0; s < p->S; s++) {
		p->st[s].work = w != NULL && total > 0 ? w[s] / total : 0;
		p->st[s].predicted = p->node_time != NULL && w != NULL ? w[s] : 0;
	}
	/* what a forward part sends: its outputs that another stage reads (once each) */
	bool *sent = ml_calloc((size_t)g->n_tensors + 1, 1);
	for (int s = 0; sent != NULL && s < p->S; s++) {
		const struct part *f = &p->parts[part_id(s, PH_F)];
		for (int k = 0; k < f->n_out; k++) {
			int t = f->out[k];
			bool other = false;
			for (int i = 0; i < g->n_nodes && !other; i++)
				for (int j = 0; j < g->nodes[i].n_in && !other; j++)
					other = g->nodes[i].in[j] == t && p->node_part[i] < 3 * p->S &&
						p->node_part[i] / 3 != s;
			if (!other || sent[t])
				continue;
			sent[t] = true;
			const struct ml_tensor *x = g->tensors[t];
			int64_t n = ml_dtype_size(x->dtype);
			for (int d = 1; d < x->rank; d++)
				n *= x->dims[d] > 0 ? x->dims[d] : 1;
			p->st[s].send += n;
		}
	}
	ml_free(sent);
	ml_free(w);
}

int
ml_pipeline_new(struct ml_pipeline **out, struct ml_graph *step,
		const struct ml_pipeline_opts *o, struct ml_err *e)
{
	struct ml_pipeline *p;
	int rc;
	*out = NULL;
	if (o->n_stages < 1 || o->n_stages > 64)
		return ml_fail(e, ML_EINVAL, "pipeline: %d stages (1 to 64)", o->n_stages);
	if (o->micro < 1 || o->micro > 4096)
		return ml_fail(e, ML_EINVAL, "pipeline: %d micro-batches (1 to 4096)", o->micro);
	if (ml_pipe_schedule_name(o->schedule) == NULL)
		return ml_fail(e, ML_EINVAL, "pipeline: unknown schedule %d", o->schedule);
	for (int s = 0; o->devices != NULL && s < o->n_stages; s++) {
		const char *d = o->devices[s] != NULL ? o->devices[s] : "cpu";
		if (strcmp(d, "cpu") != 0 && strcmp(d, "cl") != 0 && strncmp(d, "cl:", 3) != 0)
			return ml_fail(e, ML_EINVAL, "pipeline: stage %d: unknown device '%s' (cpu, "
				       "cl, cl:N)", s, d);
		for (int k = 0; k < s && strcmp(d, "cpu") != 0; k++) {
			const char *dk = o->devices[k] != NULL ? o->devices[k] : "cpu";
			bool same = strcmp(d, dk) == 0 || (strcmp(d, "cl") == 0 && strcmp(dk, "cl:0") == 0) ||
				    (strcmp(d, "cl:0") == 0 && strcmp(dk, "cl") == 0);
			if (same)
				return ml_fail(e, ML_ENOTSUP, "pipeline: device '%s' takes stages %d and "
					       "%d: an OpenCL device takes one stage (the CPU may take "
					       "several)", d, k, s);
		}
	}
	if ((p = ml_calloc(1, sizeof *p)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	p->step = step;
	p->S = o->n_stages;
	p->M = o->micro;
	p->sched = o->schedule;
	p->n_parts = 3 * p->S + 1;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	int *auto_of = NULL;
	p->parts = ml_calloc((size_t)p->n_parts, sizeof *p->parts);
	p->st = ml_calloc((size_t)p->S, sizeof *p->st);
	p->dev = ml_calloc((size_t)p->S, sizeof *p->dev);
	p->node_part = ml_malloc(sizeof(int) * ((size_t)step->n_nodes + 1));
	p->xid = ml_malloc(sizeof(int) * ((size_t)step->n_tensors + 1));
	p->done = ml_calloc((size_t)p->n_parts, sizeof(int));
	if (p->parts == NULL || p->st == NULL || p->dev == NULL || p->node_part == NULL ||
	    p->xid == NULL || p->done == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto fail;
	}
	for (int t = 0; t < step->n_tensors; t++)
		p->xid[t] = -1;
	for (int s = 0; s < p->S; s++) {
		const char *d = o->devices != NULL && o->devices[s] != NULL ? o->devices[s] : "cpu";
		size_t n = strlen(d) + 1;
		if ((p->dev[s] = ml_malloc(n)) == NULL) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto fail;
		}
		memcpy(p->dev[s], d, n);
		p->st[s].p = p;
		p->st[s].idx = s;
		if ((p->st[s].ev = ml_calloc(2 * (size_t)p->M + 2, sizeof(struct ev))) == NULL) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto fail;
		}
	}
	const int *stage_of = o->stage_of;
	double *times = NULL;
	if (stage_of == NULL) {
		if ((auto_of = ml_malloc(sizeof(int) * ((size_t)step->n_nodes + 1))) == NULL) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto fail;
		}
		/*
		 * Measured node times where the caller gave the micro-batch
		 * size; the FLOPs where not, or where a device could not run
		 * the whole step for the measurement.
		 */
		rc = -1;
		if (o->measure_rows > 0 &&
		    (times = ml_malloc(sizeof(double) * ((size_t)p->S * (size_t)step->n_nodes + 1))) != NULL) {
			struct ml_err me = { 0 };
			rc = ml_pipeline_auto_measured(step, p->S, (const char *const *)p->dev,
						       o->measure_rows, auto_of, times, &me);
			if (rc == ML_EINVAL) {
				*e = me;
				ml_free(times);
				goto fail;
			}
		}
		if (rc < 0) {
			ml_free(times);
			times = NULL;
			if ((rc = ml_pipeline_auto(step, p->S, auto_of, e)) < 0)
				goto fail;
		}
		stage_of = auto_of;
	}
	if ((rc = classify(p, stage_of, e)) < 0 || (rc = check_edges(p, e)) < 0) {
		ml_free(times);
		goto fail;
	}
	if (times != NULL) {
		if ((p->node_time = ml_calloc((size_t)step->n_nodes + 1, sizeof(double))) != NULL)
			for (int i = 0; i < step->n_nodes; i++)
				if (p->node_part[i] < 3 * p->S)
					p->node_time[i] = times[(size_t)(p->node_part[i] / 3) *
								(size_t)step->n_nodes + (size_t)i];
		ml_free(times);
	}
	for (int pid = 0; pid < p->n_parts; pid++) {
		p->parts[pid].device = pid < 3 * p->S ? p->dev[pid / 3] : "cpu";
		if ((rc = build_part(p, pid, e)) < 0)
			goto fail;
	}
	for (int q = 0; q < 3 * p->S; q++) {
		const struct part *r = &p->parts[q];
		if (q % 3 == PH_U)
			continue;
		for (int k = 0; k < r->n_in; k++) {
			int from = r->in_part[k];
			bool seen = from < 0 || from >= 3 * p->S || from == q;
			struct part *f = seen ? NULL : &p->parts[from];
			for (int j = 0; f != NULL && j < f->n_readers && !seen; j++)
				seen = f->readers[j] == q;
			if (!seen && add_idx(&f->readers, &f->n_readers, q) < 0) {
				rc = ml_fail(e, ML_ENOMEM, "out of memory");
				goto fail;
			}
		}
	}
	/*
	 * GPipe holds every micro-batch's values until the backward; 1F1B
	 * has at most S micro-batches in flight, so S rows do, each reused
	 * once its readers are done with it.
	 */
	p->R = p->sched == ML_PIPE_1F1B ? ML_MIN(p->S, p->M) : p->M;
	for (int s = 0; s < p->S; s++)
		if (p->parts[part_id(s, PH_F)].g == NULL) {
			rc = ml_fail(e, ML_EINVAL, "pipeline: stage %d has no forward node", s);
			goto fail;
		}
	stage_figures(p);
	p->loss_t = ml_graph_find(step, "loss");
	p->hits_t = ml_graph_find(step, "train.correct");
	p->label_t = ml_graph_find(step, "label");
	p->lr_t = ml_graph_find(step, "lr");
	if (p->loss_t < 0 || p->label_t < 0 || p->lr_t < 0) {
		rc = ml_fail(e, ML_EINVAL, "pipeline: not a training step (no loss, label or lr)");
		goto fail;
	}
	if ((rc = ml_tval_alloc(&p->lr, ML_F32, 0, NULL, e)) < 0)
		goto fail;
	ml_free(auto_of);
	*out = p;
	return 0;
fail:
	ml_free(auto_of);
	ml_pipeline_free(p);
	return rc;
}

void
ml_pipeline_free(struct ml_pipeline *p)
{
	if (p == NULL)
		return;
	for (int i = 0; p->parts != NULL && i < p->n_parts; i++)
		drop_part(&p->parts[i]);
	for (int k = 0; p->vals != NULL && k < p->cap_m * p->n_x; k++)
		ml_tval_clear(&p->vals[k]);
	for (int k = 0; p->gsum != NULL && k < p->n_x; k++)
		ml_tval_clear(&p->gsum[k]);
	for (int s = 0; p->st != NULL && s < p->S; s++) {
		ml_free(p->st[s].ev);
		if (p->dev != NULL)
			ml_free(p->dev[s]);
	}
	ml_tval_clear(&p->lr);
	ml_free(p->parts);
	ml_free(p->st);
	ml_free(p->dev);
	ml_free(p->node_part);
	ml_free(p->node_time);
	ml_free(p->xid);
	ml_free(p->to_fb);
	ml_free(p->to_u);
	ml_free(p->vals);
	ml_free(p->gsum);
	ml_free(p->loss_m);
	ml_free(p->hits_m);
	ml_free(p->done);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	ml_free(p);
}

int
ml_pipeline_sync(struct ml_pipeline *p, struct ml_err *e)
{
	for (int i = 0; i < p->n_parts; i++)
		if (p->parts[i].s != NULL)
			ML_TRY(ml_session_sync(p->parts[i].s, e));
	return 0;
}

/* sessions: every part's session, made afresh for micro-batches of rows samples. */
static int
sessions(struct ml_pipeline *p, int64_t rows, struct ml_err *e)
{
	if (p->rows == rows)
		return 0;
	ML_TRY(ml_pipeline_sync(p, e));
	for (int i = 0; i < p->n_parts; i++) {
		struct part *pt = &p->parts[i];
		ml_session_free(pt->s);
		pt->s = NULL;
	}
	p->rows = 0;
	for (int i = 0; i < p->n_parts; i++) {
		struct part *pt = &p->parts[i];
		struct ml_session_opts so = { .device = pt->device };
		if (pt->g != NULL && ml_session_new(&pt->s, pt->g, &so, e) < 0) {
			char msg[sizeof e->msg];
			snprintf(msg, sizeof msg, "%s", e->msg);
			return ml_fail(e, e->code, "stage %d (%s): %s", i / 3, pt->device, msg);
		}
	}
	p->rows = rows;
	return 0;
}

/* put: *d = a copy of v (d's memory reused when the size matches). */
static int
put(struct ml_tval *d, const struct ml_tval *v, struct ml_err *e)
{
	int64_t nb = ml_tval_nbytes(v);
	if (nb < 0)
		return ml_fail(e, ML_EINVAL, "pipeline: an output without a value");
	if (!(d->owned && d->data != NULL && ml_tval_nbytes(d) == nb)) {
		ml_tval_clear(d);
		ML_TRY(ml_tval_alloc(d, v->dtype, v->rank, v->dims, e));
	}
	d->dtype = v->dtype;
	d->rank = v->rank;
	memcpy(d->dims, v->dims, sizeof d->dims);
	if (nb > 0)
		memcpy(d->data, v->data, (size_t)nb);
	return 0;
}

/* accum: d += v (same shape), or d = v for the first micro-batch. */
static int
accum(struct ml_tval *d, const struct ml_tval *v, bool first, struct ml_err *e)
{
	if (first)
		return put(d, v, e);
	int64_t n = ml_tval_numel(v);
	if (n != ml_tval_numel(d) || d->dtype != v->dtype)
		return ml_fail(e, ML_EINVAL, "pipeline: a gradient changed shape between micro-batches");
	if (v->dtype == ML_F32) {
		float *a = d->data;
		const float *b = v->data;
		for (int64_t i = 0; i < n; i++)
			a[i] += b[i];
	} else {
		for (int64_t i = 0; i < n; i++)
			ml_set_f64(d->data, d->dtype, i, ml_get_f64(d->data, d->dtype, i) +
				   ml_get_f64(v->data, v->dtype, i));
	}
	return 0;
}

static void
scale(struct ml_tval *d, double k)
{
	int64_t n = ml_tval_numel(d);
	if (d->dtype == ML_F32) {
		float *a = d->data;
		for (int64_t i = 0; i < n; i++)
			a[i] *= (float)k;
	} else {
		for (int64_t i = 0; i < n; i++)
			ml_set_f64(d->data, d->dtype, i, ml_get_f64(d->data, d->dtype, i) * k);
	}
}

/* slice: micro-batch m of the batch v (its first dim split in p->mb). */
static void
slice(const struct ml_pipeline *p, const struct ml_tval *v, int m, struct ml_tval *out)
{
	*out = *v;
	out->owned = false;
	int64_t rows = v->dims[0] / p->mb;
	out->dims[0] = rows;
	int64_t nb = ml_tval_nbytes(out);
	out->data = (uint8_t *)v->data + (size_t)nb * (size_t)m;
}

/* input_of: the value input k of part pid reads in micro-batch m. */
static int
input_of(struct ml_pipeline *p, int pid, int k, int m, struct ml_tval *tmp,
	 const struct ml_tval **v, struct ml_err *e)
{
	const struct part *pt = &p->parts[pid];
	int t = pt->in[k], q = pt->in_part[k];
	if (q < 0) {
		if (t == p->x_t) {
			slice(p, p->x, m, tmp);
			*v = tmp;
		} else if (t == p->label_t) {
			slice(p, p->y, m, tmp);
			*v = tmp;
		} else if (t == p->lr_t) {
			*v = &p->lr;
		} else {
			return ml_fail(e, ML_EINVAL, "pipeline: the step input '%s' is not fed",
				       p->step->tensors[t]->name);
		}
		return 0;
	}
	int x = p->xid[t];
	if (q == 3 * p->S)
		*v = &p->vals[p->R * p->n_x + x];
	else if (pid % 3 == PH_U && q % 3 == PH_B)
		*v = &p->gsum[x];
	else
		*v = &p->vals[(m % p->R) * p->n_x + x];
	return 0;
}

/*
 * run_part: part pid on micro-batch m (the batch's row for the global and
 * update parts), once the parts it reads have done m (an update part: every
 * micro-batch). 1 when another stage failed.
 */
static int
run_part(struct ml_pipeline *p, struct stage *st, int pid, int m, struct ml_err *e)
{
	struct part *pt = &p->parts[pid];
	bool whole = pid == 3 * p->S || pid % 3 == PH_U;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		bool ok = true;
		for (int k = 0; k < pt->n_in && ok; k++) {
			int q = pt->in_part[k];
			if (q >= 0 && q < 3 * p->S && p->done[q] < (whole ? p->mb : m + 1))
				ok = false;
		}
		/* the row of micro-batch m is m - R's: its readers must be done with it */
		for (int k = 0; k < pt->n_readers && ok && !whole && m >= p->R; k++)
			if (p->done[pt->readers[k]] < m - p->R + 1)
				ok = false;
		if (ok || p->failed)
			break;
		pthread_cond_wait(&p->cv, &p->mu);
	}
	bool failed = p->failed;
	pthread_mutex_unlock(&p->mu);
	if (failed)
		return 1;
	double t0 = ml_now();
	if (pt->s != NULL) {
		for (int k = 0; k < pt->n_in; k++) {
			struct ml_tval tmp;
			const struct ml_tval *v = NULL;
			ML_TRY(input_of(p, pid, k, m, &tmp, &v, e));
			ML_TRY(ml_session_set_input(pt->s, pt->g->tensors[pt->g->inputs[k]]->name, v,
						    e));
		}
		ML_TRY(ml_session_run(pt->s, e));
		for (int k = 0; k < pt->n_out; k++) {
			int t = pt->out[k], x = p->xid[t];
			const struct ml_tval *v = ml_session_output(pt->s, k);
			if (t == p->loss_t)
				p->loss_m[m] = ml_get_f64(v->data, v->dtype, 0);
			if (t == p->hits_t)
				p->hits_m[m] = ml_get_f64(v->data, v->dtype, 0);
			if (p->to_u[x] && !whole) {
				ML_TRY(accum(&p->gsum[x], v, m == 0, e));
				if (m == p->mb - 1)
					scale(&p->gsum[x], 1.0 / p->mb);
			}
			if (p->to_fb[x] || whole)
				ML_TRY(put(&p->vals[(whole ? p->R : m % p->R) * p->n_x + x], v, e));
		}
	}
	double t1 = ml_now();
	if (st != NULL && pt->s != NULL) {
		st->busy += t1 - t0;
		st->ev[st->n_ev++] = (struct ev){ .ph = pid % 3, .m = m, .t0 = t0 - p->t_start,
						  .t1 = t1 - p->t_start };
	}
	pthread_mutex_lock(&p->mu);
	p->done[pid]++;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return 0;
}

/* stage_main: a stage's thread: its forwards and backwards in the schedule's order, its updates. */
static void *
stage_main(void *arg)
{
	struct stage *st = arg;
	struct ml_pipeline *p = st->p;
	int s = st->idx, M = p->mb, f = 0, b = 0, rc = 0;
	int F = part_id(s, PH_F), B = part_id(s, PH_B), U = part_id(s, PH_U);
	int warm = p->sched == ML_PIPE_1F1B ? ML_MIN(p->S - 1 - s, M) : M;
	while (rc == 0 && f < warm)
		rc = run_part(p, st, F, f++, &st->err);
	while (rc == 0 && f < M) {
		if ((rc = run_part(p, st, F, f++, &st->err)) == 0)
			rc = run_part(p, st, B, b++, &st->err);
	}
	while (rc == 0 && b < M)
		rc = run_part(p, st, B, b++, &st->err);
	if (rc == 0)
		rc = run_part(p, st, U, 0, &st->err);
	if (rc < 0) {
		pthread_mutex_lock(&p->mu);
		p->failed = true;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
	st->rc = rc < 0 ? rc : 0;
	return NULL;
}

/* rows: make room for mb micro-batches in the tables. */
static int
rows(struct ml_pipeline *p, struct ml_err *e)
{
	if (p->vals == NULL) {
		p->vals = ml_calloc(((size_t)p->R + 1) * ((size_t)p->n_x + 1), sizeof *p->vals);
		p->gsum = ml_calloc((size_t)p->n_x + 1, sizeof *p->gsum);
		p->loss_m = ml_calloc((size_t)p->M + 1, sizeof(double));
		p->hits_m = ml_calloc((size_t)p->M + 1, sizeof(double));
		if (p->vals == NULL || p->gsum == NULL || p->loss_m == NULL || p->hits_m == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		p->cap_m = p->R + 1;
	}
	return 0;
}

int
ml_pipeline_run(struct ml_pipeline *p, const char *xname, const struct ml_tval *x,
		const struct ml_tval *y, double lr, double *loss, double *hits, struct ml_err *e)
{
	if (x->rank < 1 || y->rank < 1 || x->dims[0] != y->dims[0] || x->dims[0] < 1)
		return ml_fail(e, ML_EINVAL, "pipeline: the data and the labels differ in samples");
	if ((p->x_t = ml_graph_find(p->step, xname)) < 0)
		return ml_fail(e, ML_EINVAL, "pipeline: the step has no input '%s'", xname);
	/* the most micro-batches up to M that divide the batch */
	int64_t n = x->dims[0];
	int mb = p->M;
	while (n % mb != 0)
		mb--;
	p->mb = mb;
	p->x = x;
	p->y = y;
	*(float *)p->lr.data = (float)lr;
	ML_TRY(rows(p, e));
	ML_TRY(sessions(p, n / mb, e));
	for (int i = 0; i < p->n_parts; i++)
		p->done[i] = 0;
	p->failed = false;
	p->t_start = ml_now();
	/* the global part (the step counter) first, on this thread */
	int G = 3 * p->S, rc = 0;
	if (run_part(p, NULL, G, p->M, e) != 0)
		return e->code < 0 ? e->code : ml_fail(e, ML_EINVAL, "pipeline: the step counter failed");
	p->done[G] = p->mb;
	/* stages 1.. on threads of their own, stage 0 on this one */
	int started = 1;
	for (int s = 0; s < p->S; s++) {
		struct stage *st = &p->st[s];
		st->n_ev = 0;
		st->busy = 0;
		st->rc = 0;
	}
	for (int s = 1; s < p->S; s++) {
		if (pthread_create(&p->st[s].th, NULL, stage_main, &p->st[s]) != 0) {
			pthread_mutex_lock(&p->mu);
			p->failed = true;
			pthread_cond_broadcast(&p->cv);
			pthread_mutex_unlock(&p->mu);
			rc = ml_fail(e, ML_ENOMEM, "pipeline: cannot start the thread of stage %d", s);
			break;
		}
		started++;
	}
	stage_main(&p->st[0]);
	for (int s = 1; s < started; s++)
		pthread_join(p->st[s].th, NULL);
	for (int s = 0; s < started && rc == 0; s++)
		if (p->st[s].rc < 0) {
			*e = p->st[s].err;
			rc = ml_fail(e, e->code, "stage %d (%s): %s", s, p->dev[s], p->st[s].err.msg);
		}
	if (rc < 0)
		return rc;
	/*
	 * The updates ran on each stage's device: their results to the host
	 * (the step's data), and every other session of the stage uploads
	 * them again before its next use.
	 */
	for (int s = 0; s < p->S; s++) {
		for (int ph = 0; ph < PH_N; ph++)
			if (p->parts[part_id(s, ph)].s != NULL)
				ML_TRY(ml_session_sync(p->parts[part_id(s, ph)].s, e));
		for (int ph = PH_F; ph <= PH_B; ph++)
			if (p->parts[part_id(s, ph)].s != NULL)
				ml_session_reload(p->parts[part_id(s, ph)].s);
	}
	double wall = ml_now() - p->t_start;
	p->wall += wall;
	p->batches++;
	double l = 0, h = 0;
	for (int m = 0; m < mb; m++) {
		l += p->loss_m[m];
		h += p->hits_m[m];
	}
	for (int s = 0; s < p->S; s++)
		p->st[s].busy_all += p->st[s].busy;
	*loss = l / mb;
	if (hits != NULL)
		*hits = h;
	return 0;
}

int
ml_pipeline_stages(const struct ml_pipeline *p)
{
	return p->S;
}

void
ml_pipeline_stage(const struct ml_pipeline *p, int s, struct ml_pipeline_stage_info *info)
{
	const struct stage *st = &p->st[s];
	memset(info, 0, sizeof *info);
	info->device = p->dev[s];
	info->n_forward = st->n_fwd;
	info->first = st->first >= 0 ? p->step->nodes[st->first].name + 8 : "";
	info->last = st->last >= 0 ? p->step->nodes[st->last].name + 8 : "";
	for (int ph = 0; ph < PH_N; ph++)
		info->n_nodes += p->parts[part_id(s, ph)].n_nodes;
	info->work = st->work;
	info->predicted_s = st->predicted;
	info->send_bytes = st->send;
	info->busy_s = st->busy_all;
}

void
ml_pipeline_stats(const struct ml_pipeline *p, struct ml_pipeline_stats *out)
{
	memset(out, 0, sizeof *out);
	out->batches = p->batches;
	out->wall_s = p->wall;
	for (int s = 0; s < p->S; s++)
		out->busy_s += p->st[s].busy_all;
	out->bubble = p->wall > 0 ? 1 - out->busy_s / (p->S * p->wall) : 0;
	if (out->bubble < 0)
		out->bubble = 0;
}

int
ml_pipeline_trace(const struct ml_pipeline *p, FILE *fp, struct ml_err *e)
{
	static const char *const ph[] = { "F", "B", "update" };
	fprintf(fp, "{\"traceEvents\": [\n");
	bool first = true;
	for (int s = 0; s < p->S; s++) {
		fprintf(fp, "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, "
			"\"args\": {\"name\": \"stage %d (%s)\"}}", first ? "" : ",\n", s, s, p->dev[s]);
		first = false;
	}
	for (int s = 0; s < p->S; s++)
		for (int k = 0; k < p->st[s].n_ev; k++) {
			const struct ev *v = &p->st[s].ev[k];
			char nm[32];
			if (v->ph == PH_U)
				snprintf(nm, sizeof nm, "%s", ph[v->ph]);
			else
				snprintf(nm, sizeof nm, "%s%d", ph[v->ph], v->m);
			fprintf(fp, ",\n{\"name\": \"%s\", \"cat\": \"stage\", \"ph\": \"X\", \"pid\": 1, "
				"\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}", nm, s, v->t0 * 1e6,
				(v->t1 - v->t0) * 1e6);
		}
	struct ml_pipeline_stats st;
	ml_pipeline_stats(p, &st);
	fprintf(fp, "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"stages\": %d, "
		"\"micro_batches\": %d, \"schedule\": \"%s\", \"bubble_fraction\": %.4f}}\n", p->S,
		p->mb, ml_pipe_schedule_name(p->sched), st.bubble);
	if (fflush(fp) != 0 || ferror(fp))
		return ml_fail(e, ML_EIO, "write error on the trace");
	return 0;
}
