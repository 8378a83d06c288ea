/*
 * plan.c: memory. The one liveness planner of the library (ml_arena_plan:
 * best fit over the blocks live at each node, a block released after its
 * last reader), the executor's plan of a session's arena for the bound
 * input shapes (ml_session_plan), and mlopt's plan-memory pass builds on
 * the same planner (lib/opt/chain.c).
 */
#include "exec/plan.h"
#include "exec/session.h"

struct blk {
	int64_t off, len;
	int t;
};

/*
 * note_room: the largest stretch of the arena free while node i runs (its
 * inputs and outputs are in live): the widest gap between live blocks in
 * gap_*, the end of the blocks in room_off (room_len -1 until the arena's
 * final top is known).
 */
static void
note_room(struct ml_arena *a, int i, const struct blk *live, int nlive, int64_t *gap_off,
	  int64_t *gap_len)
{
	int64_t end = 0;
	gap_off[i] = gap_len[i] = 0;
	for (int k = 0; k < nlive; k++) {
		if (live[k].off - end > gap_len[i]) {
			gap_off[i] = end;
			gap_len[i] = live[k].off - end;
		}
		end = ML_MAX(end, live[k].off + live[k].len);
	}
	a->room_off[i] = end;
	a->room_len[i] = -1;
}

int
ml_arena_plan(const struct ml_graph *g, struct ml_arena *a, struct ml_err *e)
{
	bool room = a->room_off != NULL && a->room_len != NULL;
	struct blk *live = ml_calloc((size_t)g->n_tensors + 1, sizeof *live);
	int64_t *gap_off = room ? ml_calloc((size_t)g->n_nodes + 1, sizeof *gap_off) : NULL;
	int64_t *gap_len = room ? ml_calloc((size_t)g->n_nodes + 1, sizeof *gap_len) : NULL;
	int nlive = 0;
	int64_t top = 0;

	if (live == NULL || (room && (gap_off == NULL || gap_len == NULL))) {
		ml_free(live);
		ml_free(gap_off);
		ml_free(gap_len);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	for (int t = 0; t < g->n_tensors; t++) {
		a->off[t] = -1;
		a->len[t] = 0;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_out; j++) {
			int t = n->out[j];
			if (t < 0 || a->bytes[t] < 0)
				continue;
			int r = a->root != NULL ? a->root[t] : -1;
			if (r >= 0 && a->off[r] >= 0) {
				/* a share of a block some earlier node placed */
				a->off[t] = a->off[r] + a->delta[t];
				a->len[t] = a->bytes[t];
				continue;
			}
			int64_t len = (a->bytes[r >= 0 ? r : t] + ML_ARENA_ALIGN - 1) / ML_ARENA_ALIGN *
				      ML_ARENA_ALIGN;
			if (len == 0)
				len = ML_ARENA_ALIGN;
			/* an elementwise op may write over its dying first input */
			int src = j == 0 && a->inplace != NULL && r < 0 ? a->inplace(a->arg, i) : -1;
			if (src >= 0 && a->root != NULL && a->root[src] >= 0)
				src = -1;
			int k = 0;
			while (src >= 0 && k < nlive && live[k].t != src)
				k++;
			if (src >= 0 && k < nlive && a->len[src] == len) {
				live[k].t = t;
				a->off[t] = live[k].off;
				a->len[t] = len;
				continue;
			}
			/* best fit among gaps of the offset-sorted live list */
			int64_t best = -1, best_gap = INT64_MAX, prev_end = 0;
			int best_pos = nlive;
			for (k = 0; k <= nlive; k++) {
				int64_t next = k < nlive ? live[k].off : INT64_MAX;
				int64_t gap = next - prev_end;
				if (gap >= len && (best < 0 || gap < best_gap)) {
					best = prev_end;
					best_gap = gap;
					best_pos = k;
				}
				if (k < nlive)
					prev_end = live[k].off + live[k].len;
			}
			memmove(&live[best_pos + 1], &live[best_pos],
				sizeof *live * (size_t)(nlive - best_pos));
			live[best_pos] = (struct blk){ best, len, r >= 0 ? r : t };
			nlive++;
			if (r >= 0) {
				/* the first share written places its block */
				a->off[r] = best;
				a->len[r] = len;
				a->off[t] = best + a->delta[t];
				a->len[t] = a->bytes[t];
			} else {
				a->off[t] = best;
				a->len[t] = len;
			}
			top = ML_MAX(top, best + len);
		}
		if (room)
			note_room(a, i, live, nlive, gap_off, gap_len);
		/* release what this node was the last to read, and unread outputs */
		for (int k = 0; k < nlive;) {
			int t = live[k].t;
			int lu = a->last[t];
			if (lu == i || (lu < 0 && g->tensors[t]->producer == i)) {
				memmove(&live[k], &live[k + 1], sizeof *live * (size_t)(nlive - k - 1));
				nlive--;
			} else {
				k++;
			}
		}
	}
	for (int i = 0; room && i < g->n_nodes; i++) {
		a->room_len[i] = top - a->room_off[i];
		if (gap_len[i] > a->room_len[i]) {
			a->room_off[i] = gap_off[i];
			a->room_len[i] = gap_len[i];
		}
	}
	a->top = top;
	ml_free(live);
	ml_free(gap_off);
	ml_free(gap_len);
	return 0;
}

/*
 * The session's plan.
 */

struct inplace_arg {
	const struct ml_session *s;
	const struct ml_tval *sv;	/* the planned shapes */
};

/*
 * inplace_input: the input node i's output 0 may be written over, or
 * share: n is pointwise (ML_OPF_INPLACE) and its first input has exactly
 * the output's type and shape, or n only reshapes (ML_OPF_ALIAS, where
 * ml_node_alias holds for its input's shape) and its first input has the
 * output's type and size; that input is an
 * activation node i reads last and reads once. -1 if none. The output
 * takes the input's block, which then lives as long as the output does.
 */
static int
inplace_input(void *arg, int i)
{
	const struct inplace_arg *ia = arg;
	const struct ml_session *s = ia->s;
	const struct ml_graph *g = s->g;
	const struct ml_node *n = &g->nodes[i];
	const struct ml_tval *sv = ia->sv;
	unsigned f = ml_op_flags(n->op);
	if (!(f & (ML_OPF_INPLACE | ML_OPF_ALIAS)) || n->n_in < 1 || n->in[0] < 0 || n->out[0] < 0)
		return -1;
	int a = n->in[0], t = n->out[0];
	if (!(f & ML_OPF_INPLACE) && !ml_node_alias(n, &sv[a]))
		return -1;
	if (s->last_use[a] != i || g->tensors[a]->kind != ML_TK_ACT || sv[a].dtype != sv[t].dtype)
		return -1;
	if (f & ML_OPF_INPLACE) {
		if (sv[a].rank != sv[t].rank)
			return -1;
		for (int d = 0; d < sv[a].rank; d++)
			if (sv[a].dims[d] != sv[t].dims[d])
				return -1;
	} else if (ml_tval_nbytes(&sv[a]) < 0 || ml_tval_nbytes(&sv[a]) != ml_tval_nbytes(&sv[t])) {
		return -1;
	}
	for (int k = 1; k < n->n_in; k++)
		if (n->in[k] == a)
			return -1;
	return a;
}

/*
 * Concat in place. A Concat along an axis with only 1s before it (batch 1,
 * NCHW channels) lays its inputs end to end in its output, so each input
 * may be written by its producer straight into its slice of the output,
 * and the Concat then copies nothing (cat_run skips a piece already in
 * place). DenseNet concatenates every earlier feature map again in each
 * layer; there it saves the copies, O(layers^2) bytes per block, and as
 * each layer's Concat is a prefix of the block's last one, the whole block
 * shares one buffer.
 *
 * cat_share: the slices of g's Concats, in root[] and delta[] (struct
 * ml_arena's); last[] is last_use with a shared block's owner made to
 * outlive all its shares. Concats are taken from the last one up, so a
 * Concat fed to a later one is first given its slice there and then lays
 * its own inputs into that slice. A tensor gets one place: an input already
 * placed elsewhere, a second copy of the same input, a graph input or
 * output, a constant, or an input whose slice would be misaligned is left
 * where it is and the Concat copies it. A Concat whose inputs all lie end
 * to end already (DenseNet's earlier layers) takes their place and copies
 * nothing. Only for sessions wholly on the CPU: a device writes its
 * buffers. ML_CONCAT_INPLACE=0 turns this off.
 */
static bool
cat_shareable(const struct ml_session *s, const int64_t *bytes, int t)
{
	const struct ml_graph *g = s->g;
	if (t < 0 || s->bound[t] || g->tensors[t]->kind != ML_TK_ACT ||
	    g->tensors[t]->producer < 0 || bytes[t] <= 0 || s->last_use[t] == g->n_nodes)
		return false;
	return true;
}

/* cat_axis_ok: whether Concat node n's pieces lie end to end in its output */
static bool
cat_axis_ok(const struct ml_node *n, const struct ml_tval *sv)
{
	const struct ml_tval *o = &sv[n->out[0]];
	int64_t a = ml_attr_int(n, "axis", 0);
	if (o->rank < 1 || a < -o->rank || a >= o->rank)
		return false;
	if (a < 0)
		a += o->rank;
	for (int d = 0; d < a; d++)
		if (o->dims[d] != 1)
			return false;
	for (int j = 0; j < n->n_in; j++)
		if (n->in[j] < 0 || sv[n->in[j]].dtype != o->dtype)
			return false;
	return true;
}

static bool
cat_inplace_enabled(void)
{
	const char *e = getenv("ML_CONCAT_INPLACE");
	return e == NULL || strcmp(e, "0") != 0;
}

static void
cat_share(const struct ml_session *s, const struct ml_tval *sv, const int64_t *bytes, int *root,
	  int64_t *delta, int *last)
{
	const struct ml_graph *g = s->g;

	for (int t = 0; t < g->n_tensors; t++) {
		root[t] = -1;
		delta[t] = 0;
		last[t] = s->last_use[t];
	}
	if (s->hx != NULL || !cat_inplace_enabled())
		return;
	for (int i = g->n_nodes - 1; i >= 0; i--) {
		const struct ml_node *n = &g->nodes[i];
		int t = n->n_out == 1 ? n->out[0] : -1;
		if (n->op != ML_OP_CONCAT || n->n_in < 1 || !cat_shareable(s, bytes, t) ||
		    !cat_axis_ok(n, sv))
			continue;
		int64_t sum = 0;
		for (int j = 0; j < n->n_in; j++)
			sum += bytes[n->in[j]] > 0 ? bytes[n->in[j]] : INT64_MIN / 4;
		if (sum != bytes[t])
			continue;
		/* where the output goes: its slice of a later Concat, or its own block */
		int r = root[t];
		int64_t base = delta[t];
		if (r < 0) {
			/* all inputs end to end already: take their place */
			int x0 = n->in[0];
			bool all = root[x0] >= 0;
			int64_t off = all ? delta[x0] : 0;
			for (int j = 0; all && j < n->n_in; j++) {
				int x = n->in[j];
				all = root[x] == root[x0] && delta[x] == off;
				off += bytes[x];
			}
			r = all ? root[x0] : t;
			base = all ? delta[x0] : 0;
		}
		int64_t off = base;
		int shared = 0;
		for (int j = 0; j < n->n_in; j++) {
			int x = n->in[j];
			if (root[x] == r && delta[x] == off)
				shared++;
			else if (root[x] < 0 && x != r && off % ML_ARENA_ALIGN == 0 &&
				 cat_shareable(s, bytes, x)) {
				root[x] = r;
				delta[x] = off;
				shared++;
			}
			off += bytes[x];
		}
		if (shared == 0 || r == t) {
			if (shared > 0) {
				root[t] = t;
				delta[t] = 0;
			}
		} else {
			root[t] = r;
			delta[t] = base;
		}
	}
	/* a block lives from its first share written to the last one read */
	for (int t = 0; t < g->n_tensors; t++) {
		int r = root[t];
		if (r < 0)
			continue;
		int lu = s->last_use[t] >= 0 ? s->last_use[t] : g->tensors[t]->producer;
		if (lu > last[r])
			last[r] = lu;
	}
}

/* plan: the arena for the bound inputs' shapes */
static int
plan(struct ml_session *s, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	struct ml_tval *sv = ml_calloc((size_t)g->n_tensors + 1, sizeof *sv);
	int64_t *bytes = ml_calloc((size_t)g->n_tensors + 1, sizeof *bytes);
	int64_t *delta = ml_calloc((size_t)g->n_tensors + 1, sizeof *delta);
	int *root = ml_calloc((size_t)g->n_tensors + 1, sizeof *root);
	int *last = ml_calloc((size_t)g->n_tensors + 1, sizeof *last);
	int rc = 0;

	if (sv == NULL || bytes == NULL || delta == NULL || root == NULL || last == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto done;
	}
	/*
	 * Only shapes and constants go in, never a value given at run time
	 * (an input's data, a parameter training changes): what inference
	 * knows from them holds for every run of the same key, so the
	 * executor can take each node's shapes from here; a shape that
	 * depends on such a value stays unknown, inferred as its node runs.
	 */
	for (int t = 0; t < g->n_tensors; t++) {
		s->slot_off[t] = -1;
		s->slot_len[t] = 0;
		if (s->bound[t]) {
			sv[t] = s->vals[t];
			sv[t].owned = false;
			sv[t].data = NULL;
		} else {
			ml_graph_tval(g, t, &sv[t]);
			if (g->tensors[t]->kind != ML_TK_CONST)
				sv[t].data = NULL;
		}
	}
	if ((rc = ml_infer_values(g, sv, e)) < 0)
		goto done;
	for (int t = 0; t < g->n_tensors; t++) {
		bytes[t] = ml_tval_nbytes(&sv[t]);
		s->shp_bytes[t] = bytes[t];
		s->shp[t] = sv[t];
		s->shp[t].data = NULL;
		s->shp[t].owned = false;
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		bool known = true;
		for (int j = 0; j < n->n_out && known; j++) {
			int t = n->out[j];
			known = t >= 0 && s->shp[t].dtype != ML_UNDEF && bytes[t] >= 0;
		}
		s->known[i] = known;
	}
	cat_share(s, sv, bytes, root, delta, last);
	struct inplace_arg ia = { s, sv };
	struct ml_arena a = {
		.bytes = bytes, .last = last, .inplace = inplace_input, .arg = &ia,
		.root = root, .delta = delta,
		.off = s->slot_off, .len = s->slot_len,
		.room_off = s->room_off, .room_len = s->room_len,
	};
	if ((rc = ml_arena_plan(g, &a, e)) < 0)
		goto done;
	ml_free(s->arena);
	s->arena = NULL;
	if (a.top > 0 && (s->arena = ml_malloc((size_t)a.top)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "cannot allocate an arena of %lld bytes", (long long)a.top);
		goto done;
	}
	s->arena_bytes = a.top;
done:
	if (sv != NULL)
		for (int t = 0; t < g->n_tensors; t++)
			if (!s->bound[t])
				ml_tval_clear(&sv[t]);
	ml_free(sv);
	ml_free(bytes);
	ml_free(delta);
	ml_free(root);
	ml_free(last);
	return rc;
}

/*
 * plan_valid: whether the last plan was made for the dtypes and dims of
 * the bound tensors (remembers them). ML_ENOMEM leaves it false.
 */
static bool
plan_valid(struct ml_session *s)
{
	int k = 0;
	/* sized for every tensor bound: index, dtype, rank and the dims */
	int need = 0;
	for (int k = 0; k < s->n_free; k++)
		if (s->bound[s->free_t[k]])
			need += 3 + ML_MAX(s->vals[s->free_t[k]].rank, 0);
	bool same = s->planned;
	if (need > s->plan_key_cap) {
		int64_t *key = ml_realloc(s->plan_key, sizeof *key * (size_t)need);
		if (key == NULL) {
			s->plan_key_n = -1;
			return false;
		}
		s->plan_key = key;
		s->plan_key_cap = need;
	}
	/* compare while writing: the key of this run replaces the last one */
	same = same && need == s->plan_key_n;
	for (int f = 0; f < s->n_free; f++) {
		int t = s->free_t[f];
		if (!s->bound[t])
			continue;
		const struct ml_tval *v = &s->vals[t];
		int64_t w[3 + ML_MAX_RANK] = { t, v->dtype, v->rank };
		int m = 3;
		for (int d = 0; d < v->rank && d < ML_MAX_RANK; d++)
			w[m++] = v->dims[d];
		for (int j = 0; j < m; j++, k++) {
			same = same && s->plan_key[k] == w[j];
			s->plan_key[k] = w[j];
		}
	}
	s->plan_key_n = k;
	return same;
}

int
ml_session_plan(struct ml_session *s, struct ml_err *e)
{
	if (plan_valid(s))
		return 0;
	s->planned = false;
	ML_TRY(plan(s, e));
	s->planned = true;
	return 0;
}
