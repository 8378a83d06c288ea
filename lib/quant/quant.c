/*
 * quant.c: the quantiser's rewrites (see ml_quant.h for the forms). Each
 * works in place on a deep copy of the graph: new nodes are appended, the
 * nodes they replace get their outputs renamed to dead tensors, and the
 * graph is then toposorted and swept by mlopt's dead-code pass, which also
 * drops the float weights nothing reads any more.
 */
#include "quant/quant.h"
#include "cpu/quant_q8.h"
#include "ops/nn.h"

/* A layer: a node the int8 forms can take, with the Relu or Clip fused after it. */
enum lkind { L_NONE, L_CONV, L_DW, L_GEMM, L_ADD, L_MAXPOOL, L_GAP, L_FLAT };

struct layer {
	enum lkind kind;
	int node, act;		/* act: the fused Relu/Clip node, or -1 */
	int out;		/* the tensor the layer (with act) produces */
	float amin, amax;	/* the fused activation's clamp (real values) */
	bool on;
	bool transb;
	char why[64];
};

struct qp {
	float scale;
	int32_t zero;
};

struct rw {
	struct ml_graph *q;
	const struct ml_quant_opts *o;
	struct mq_stat *st;
	struct layer *ly;
	int nly;
	int *layer_of;		/* node -> layer index or -1 */
	int *q8;		/* tensor -> its uint8 tensor, or -1 */
	struct qp *qpar;	/* tensor -> its quantisation */
	int *nuse;		/* tensor -> consumer count (+1 for a graph output) */
	bool *native;		/* tensor -> its uint8 version comes from an int8 layer */
	int n_t0;
	int uniq;
	struct ml_err *e;
};

static bool
is_const_f32(const struct ml_graph *g, int t)
{
	if (t < 0)
		return false;
	const struct ml_tensor *x = ml_graph_t(g, t);
	return (x->kind == ML_TK_CONST || x->kind == ML_TK_PARAM) && x->dtype == ML_F32 &&
	       x->data != NULL;
}

static bool
scalar_const(const struct ml_graph *g, int t, float *v)
{
	int p = t >= 0 ? ml_graph_t(g, t)->producer : -1;
	if (p >= 0 && p < g->n_nodes && g->nodes[p].op == ML_OP_CONSTANT) {
		/* a Constant node's scalar value (PyTorch exports Clip bounds so) */
		const struct ml_attr *a = ml_attr_find(&g->nodes[p], "value");
		if (a == NULL || a->type != ML_ATTR_TENSOR || a->tensors == NULL ||
		    a->tensors[0]->dtype != ML_F32 || a->tensors[0]->nbytes != sizeof(float))
			return false;
		memcpy(v, a->tensors[0]->data, sizeof(float));
		return true;
	}
	if (!is_const_f32(g, t) || ml_graph_t(g, t)->nbytes != sizeof(float))
		return false;
	memcpy(v, ml_graph_t(g, t)->data, sizeof(float));
	return true;
}

static bool
excluded(const struct ml_quant_opts *o, const struct ml_graph *g, const struct ml_node *n)
{
	for (int i = 0; i < o->n_exclude; i++) {
		if (strcmp(o->exclude[i], n->name) == 0)
			return true;
		for (int k = 0; k < n->n_out; k++)
			if (n->out[k] >= 0 && strcmp(o->exclude[i], ml_graph_t(g, n->out[k])->name) == 0)
				return true;
	}
	return false;
}

static int
sole_consumer(const struct ml_graph *g, const int *nuse, int t)
{
	if (nuse[t] != 1)
		return -1;
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_in; k++)
			if (g->nodes[i].in[k] == t)
				return i;
	return -1;
}

static int64_t
dimof(const struct ml_graph *g, int t, int d)
{
	const struct ml_tensor *x = ml_graph_t(g, t);
	return d < x->rank ? x->dims[d] : -1;
}

/*
 * The layer checks, one per quantisation class of the ops' descriptors
 * (ml_op_qclass): each returns the layer node n of g can be (filling what
 * the layer keeps in L), or L_NONE when n does not meet the class's
 * preconditions. x is n's input 0.
 */
static enum lkind
l_conv(const struct ml_graph *g, const struct ml_node *n, int x, struct layer *L)
{
	(void)L;
	int w = n->n_in > 1 ? n->in[1] : -1;
	if (!is_const_f32(g, w) || ml_graph_t(g, w)->rank != 4 || dimof(g, x, 1) < 0 ||
	    ml_graph_t(g, x)->rank != 4 ||
	    (n->n_in > 2 && n->in[2] >= 0 && !is_const_f32(g, n->in[2])))
		return L_NONE;
	if (strcmp(ml_attr_str(n, "auto_pad", "NOTSET"), "NOTSET") != 0)
		return L_NONE;
	int64_t grp = ml_attr_int(n, "group", 1);
	if (grp == 1)
		return L_CONV;
	if (grp == dimof(g, x, 1) && dimof(g, w, 0) == grp && dimof(g, w, 1) == 1)
		return L_DW;
	return L_NONE;
}

/*
 * Gemm without transA, alpha or beta, with a rank-1 constant bias; MatMul
 * of an x of rank 2 or 3 (the leading dims as rows); FusedMatMul as
 * unfuse.c leaves it (x of rank 2 or 3, a constant bias of N, no residual,
 * no activation, B not packed).
 */
static enum lkind
l_gemm(const struct ml_graph *g, const struct ml_node *n, int x, struct layer *L)
{
	int w = n->n_in > 1 ? n->in[1] : -1, xr = ml_graph_t(g, x)->rank;
	if (!is_const_f32(g, w) || ml_graph_t(g, w)->rank != 2 ||
	    (xr != 2 && !(xr == 3 && n->op != ML_OP_GEMM)))
		return L_NONE;
	if (n->op == ML_OP_FUSED_MATMUL) {
		int b = n->n_in > 2 ? n->in[2] : -1;
		if (n->n_in > 3 || strcmp(ml_attr_str(n, "activation", ""), "") != 0 ||
		    ml_attr_find(n, "packed_n") != NULL ||
		    (b >= 0 && (!is_const_f32(g, b) || ml_graph_t(g, b)->rank != 1 ||
				dimof(g, b, 0) != dimof(g, w, 1))))
			return L_NONE;
		return L_GEMM;
	}
	if (n->op != ML_OP_GEMM)
		return L_GEMM;
	if (ml_attr_int(n, "transA", 0) != 0 || ml_attr_float(n, "alpha", 1) != 1 ||
	    ml_attr_float(n, "beta", 1) != 1)
		return L_NONE;
	if (n->n_in > 2 && n->in[2] >= 0 &&
	    (!is_const_f32(g, n->in[2]) || ml_graph_t(g, n->in[2])->rank != 1))
		return L_NONE;
	L->transb = ml_attr_int(n, "transB", 0) != 0;
	return L_GEMM;
}

/* the sum of two computed NCHW tensors of one shape but the batch */
static enum lkind
l_add(const struct ml_graph *g, const struct ml_node *n, int x, struct layer *L)
{
	(void)L;
	if (n->n_in != 2 || ml_graph_t(g, x)->rank != 4 || n->in[1] < 0 ||
	    ml_graph_t(g, n->in[1])->rank != 4 || is_const_f32(g, n->in[1]) || is_const_f32(g, x))
		return L_NONE;
	for (int d = 1; d < 4; d++)
		if (dimof(g, x, d) != dimof(g, n->in[1], d) || dimof(g, x, d) < 0)
			return L_NONE;
	return L_ADD;
}

static enum lkind
l_maxpool(const struct ml_graph *g, const struct ml_node *n, int x, struct layer *L)
{
	(void)L;
	const int64_t *v;
	if (ml_graph_t(g, x)->rank != 4 || n->n_out != 1 || ml_attr_int(n, "ceil_mode", 0) != 0 ||
	    strcmp(ml_attr_str(n, "auto_pad", "NOTSET"), "NOTSET") != 0)
		return L_NONE;
	if (ml_attr_ints(n, "dilations", &v) == 2 && (v[0] != 1 || v[1] != 1))
		return L_NONE;
	return L_MAXPOOL;
}

static enum lkind
l_gap(const struct ml_graph *g, const struct ml_node *n, int x, struct layer *L)
{
	(void)n, (void)L;
	return ml_graph_t(g, x)->rank == 4 ? L_GAP : L_NONE;
}

/* Flatten or Reshape of [N, C, 1, 1] to [N, C] */
static enum lkind
l_flat(const struct ml_graph *g, const struct ml_node *n, int x, struct layer *L)
{
	(void)L;
	if (ml_graph_t(g, x)->rank != 4 || dimof(g, x, 2) != 1 || dimof(g, x, 3) != 1 ||
	    ml_graph_t(g, n->out[0])->rank != 2 || dimof(g, n->out[0], 1) != dimof(g, x, 1) ||
	    dimof(g, x, 1) < 0)
		return L_NONE;
	return L_FLAT;
}

typedef enum lkind (*layer_fn)(const struct ml_graph *g, const struct ml_node *n, int x,
			       struct layer *L);

/* each class's check, and whether only the integer form takes it */
static const struct {
	layer_fn check;
	bool int_only;
} qclasses[] = {
	[ML_QC_CONV] = { l_conv, false },
	[ML_QC_GEMM] = { l_gemm, false },
	[ML_QC_ADD] = { l_add, true },
	[ML_QC_MAXPOOL] = { l_maxpool, true },
	[ML_QC_GAP] = { l_gap, true },
	[ML_QC_FLATTEN] = { l_flat, true },
};

/*
 * clip_bounds: Clip node cn's bounds (inputs of opset 11, else attributes),
 * false when an input bound is not a constant scalar.
 */
static bool
clip_bounds(const struct ml_graph *g, const struct ml_node *cn, float *lo, float *hi)
{
	bool ok = true;
	*lo = -INFINITY;
	*hi = INFINITY;
	if (cn->n_in > 1 && cn->in[1] >= 0)
		ok = scalar_const(g, cn->in[1], lo);
	else if (ml_attr_find(cn, "min"))
		*lo = (float)ml_attr_float(cn, "min", 0);
	if (cn->n_in > 2 && cn->in[2] >= 0)
		ok = ok && scalar_const(g, cn->in[2], hi);
	else if (ml_attr_find(cn, "max"))
		*hi = (float)ml_attr_float(cn, "max", 0);
	return ok;
}

/*
 * fuse_act: fuse into L the activation (an ML_QC_ACT op: Relu, or Clip
 * with constant bounds) that is the only consumer of L's output.
 */
static void
fuse_act(const struct rw *r, struct layer *L)
{
	const struct ml_graph *g = r->q;
	int a = sole_consumer(g, r->nuse, L->out);
	if (a < 0 || ml_op_qclass(g->nodes[a].op) != ML_QC_ACT || g->nodes[a].in[0] != L->out)
		return;
	float lo = 0, hi = INFINITY;
	if (g->nodes[a].op == ML_OP_CLIP && !clip_bounds(g, &g->nodes[a], &lo, &hi))
		return;
	if (L->kind == L_ADD && hi < INFINITY)
		return;		/* Q8Add clamps below only */
	L->act = a;
	L->amin = lo;
	L->amax = hi;
	L->out = g->nodes[a].out[0];
}

/*
 * layer_check: the check of node i's quantisation class, or NULL when it
 * cannot start a layer (no class, a class of the integer form only in the
 * QDQ form, no input or output, or already in a layer as its activation).
 */
static layer_fn
layer_check(const struct rw *r, int i)
{
	const struct ml_node *n = &r->q->nodes[i];
	enum ml_qclass qc = ml_op_qclass(n->op);
	if (r->layer_of[i] >= 0 || n->n_out < 1 || n->out[0] < 0 || n->n_in < 1 || n->in[0] < 0)
		return NULL;
	if (qc >= sizeof qclasses / sizeof qclasses[0])
		return NULL;
	if (qclasses[qc].int_only && r->o->form != ML_QFORM_INT)
		return NULL;
	return qclasses[qc].check;
}

/* add_layer: record L, with its fused activation, as the next layer. */
static void
add_layer(struct rw *r, struct layer *L)
{
	const struct ml_graph *g = r->q;
	L->out = g->nodes[L->node].out[0];
	if (L->kind == L_CONV || L->kind == L_DW || L->kind == L_GEMM || L->kind == L_ADD)
		fuse_act(r, L);
	L->on = true;
	if (excluded(r->o, g, &g->nodes[L->node]) ||
	    (L->act >= 0 && excluded(r->o, g, &g->nodes[L->act]))) {
		L->on = false;
		snprintf(L->why, sizeof L->why, "excluded");
	}
	r->layer_of[L->node] = r->nly;
	if (L->act >= 0)
		r->layer_of[L->act] = r->nly;
	r->ly[r->nly++] = *L;
}

/* classify: find the layers of g and whether each can be quantised. */
static int
classify(struct rw *r)
{
	struct ml_graph *g = r->q;

	r->ly = ml_calloc((size_t)g->n_nodes + 1, sizeof *r->ly);
	r->layer_of = ml_malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
	if (r->ly == NULL || r->layer_of == NULL)
		return ml_fail(r->e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < g->n_nodes; i++)
		r->layer_of[i] = -1;
	for (int i = 0; i < g->n_nodes; i++) {
		layer_fn check = layer_check(r, i);
		struct layer L = { .node = i, .act = -1, .amin = -INFINITY, .amax = INFINITY };
		if (check == NULL)
			continue;
		L.kind = check(g, &g->nodes[i], g->nodes[i].in[0], &L);
		if (L.kind != L_NONE)
			add_layer(r, &L);
	}
	return 0;
}

/* ---- helpers that build ---- */

static int
fresh(struct rw *r, const char *base, const char *suffix)
{
	char name[512];
	snprintf(name, sizeof name, "%s%s", base, suffix);
	while (ml_graph_find(r->q, name) >= 0)
		snprintf(name, sizeof name, "%s%s.%d", base, suffix, ++r->uniq);
	int t = ml_graph_tensor(r->q, name);
	if (t < 0)
		return ml_fail(r->e, ML_ENOMEM, "out of memory");
	return t;
}

static int
new_const(struct rw *r, const char *base, const char *suffix, enum ml_dtype dt, int rank,
	  const int64_t *dims, const void *data, size_t nbytes)
{
	int t = fresh(r, base, suffix);
	if (t < 0)
		return t;
	ML_TRY(ml_graph_set_data(r->q, t, ML_TK_CONST, dt, rank, dims, data, nbytes, r->e));
	return t;
}

static int
add_node(struct rw *r, const char *op, const char *dom, const char *name, int n_in, const int *in,
	 int out)
{
	const char *inn[8];
	const char *outn[1] = { ml_graph_t(r->q, out)->name };
	for (int i = 0; i < n_in; i++)
		inn[i] = in[i] >= 0 ? ml_graph_t(r->q, in[i])->name : "";
	return ml_graph_add_node(r->q, op, dom, name, n_in, inn, 1, outn, r->e);
}

/* kill_output: rename node ni's output k to a dead tensor, so nothing reads what it writes. */
static int
kill_output(struct rw *r, int ni, int k)
{
	int t = fresh(r, ml_graph_t(r->q, r->q->nodes[ni].out[k])->name, ".dead");
	if (t < 0)
		return ML_ENOMEM;
	r->q->nodes[ni].out[k] = t;
	return 0;
}

/* qparams of tensor t from its statistics (uint8; zero point 128 when signed). */
static int
qparams(struct rw *r, int t, struct qp *p)
{
	const struct mq_stat *st = &r->st[t];
	double lo, hi;

	if (t >= r->n_t0 || !st->seen)
		return ml_fail(r->e, ML_EINVAL, "tensor '%s' has no calibration statistics",
			       ml_graph_t(r->q, t)->name);
	mlq_range(st, r->o->method, r->o->percentile, &lo, &hi);
	if (r->o->act_signed) {
		double am = fmax(fabs(lo), fabs(hi));
		p->scale = (float)(am > 0 ? am / 127 : 1.0);
		p->zero = 128;
	} else {
		double s = hi - lo > 0 ? (hi - lo) / 255 : 1.0;
		p->scale = (float)s;
		p->zero = (int32_t)lrint(-lo / s);
		p->zero = p->zero < 0 ? 0 : p->zero > 255 ? 255 : p->zero;
	}
	return 0;
}

/* get_q8: the uint8 version of tensor t, made by a Q8Quantize where it has none. */
static int
get_q8(struct rw *r, int t)
{
	if (r->q8[t] >= 0)
		return r->q8[t];
	struct qp p;
	ML_TRY(qparams(r, t, &p));
	int o = fresh(r, ml_graph_t(r->q, t)->name, ".q8");
	if (o < 0)
		return ML_ENOMEM;
	char nm[512];
	snprintf(nm, sizeof nm, "%s.quantize", ml_graph_t(r->q, t)->name);
	int ni = add_node(r, "Q8Quantize", "ml", nm, 1, &t, o);
	if (ni < 0)
		return ni;
	ml_node_set_float(r->q, ni, "scale", p.scale);
	ml_node_set_int(r->q, ni, "zero_point", p.zero);
	r->q8[t] = o;
	r->qpar[t] = p;
	return o;
}

/*
 * quant_weights: per output channel m of w (viewed [m][k] through index
 * function idx), int8 values in [-qmax, qmax] into wq (m * k), scales
 * into ws; pow2 puts values on 0, +-2^i.
 */
static void
quant_weights(const float *w, int64_t m, int64_t k, int64_t (*idx)(int64_t, int64_t, const int64_t *),
	      const int64_t *geo, int qmax, bool pow2, int8_t *wq, float *ws, double *sig, double *noise)
{
	for (int64_t j = 0; j < m; j++) {
		double am = 0;
		for (int64_t q = 0; q < k; q++)
			am = fmax(am, fabs(w[idx(j, q, geo)]));
		int top = qmax;
		if (pow2)	/* the largest power of two <= qmax */
			for (top = 1; top * 2 <= qmax; top *= 2)
				;
		double s = am > 0 ? am / top : 1.0;
		ws[j] = (float)s;
		for (int64_t q = 0; q < k; q++) {
			double v = w[idx(j, q, geo)] / s, a = fabs(v);
			long iv;
			if (pow2) {
				/* nearest level in the log domain; below 1/sqrt(2) rounds to 0 */
				iv = a < M_SQRT1_2 ? 0 : 1L << (int)ML_MIN(lrint(log2(a)), 30);
				iv = iv > top ? top : iv;
				iv = v < 0 ? -iv : iv;
			} else {
				iv = lrint(v);
				iv = iv > qmax ? qmax : iv < -qmax ? -qmax : iv;
			}
			wq[j * k + q] = (int8_t)iv;
			double d = w[idx(j, q, geo)] - iv * s;
			*sig += (double)w[idx(j, q, geo)] * w[idx(j, q, geo)];
			*noise += d * d;
		}
	}
}

/* Index functions: geo holds the weight's dims. */
static int64_t
idx_conv(int64_t m, int64_t q, const int64_t *geo)	/* w [M, C, KH, KW], q = (ky, kx, c) */
{
	int64_t C = geo[1], KH = geo[2], KW = geo[3];
	int64_t c = q % C, kx = q / C % KW, ky = q / C / KW;
	return ((m * C + c) * KH + ky) * KW + kx;
}

static int64_t
idx_dw(int64_t m, int64_t q, const int64_t *geo)	/* w [C, 1, KH, KW], q = (ky, kx) */
{
	return m * geo[2] * geo[3] + q;
}

static int64_t
idx_rows(int64_t m, int64_t q, const int64_t *geo)	/* w [M, K] */
{
	return m * geo[1] + q;
}

static int64_t
idx_cols(int64_t m, int64_t q, const int64_t *geo)	/* w [K, M] */
{
	return q * geo[1] + m;
}

struct wq {
	int64_t m, k;
	int8_t *q;
	float *s;
	double sig, noise;
};

/* weights_of: the int8 weights of layer L (m outputs by k inputs). */
static int
weights_of(struct rw *r, const struct layer *L, int qmax, struct wq *W)
{
	const struct ml_node *n = &r->q->nodes[L->node];
	const struct ml_tensor *w = ml_graph_t(r->q, n->in[1]);
	int64_t (*idx)(int64_t, int64_t, const int64_t *);

	memset(W, 0, sizeof *W);
	if (L->kind == L_CONV) {
		W->m = w->dims[0];
		W->k = w->dims[1] * w->dims[2] * w->dims[3];
		idx = idx_conv;
	} else if (L->kind == L_DW) {
		W->m = w->dims[0];
		W->k = w->dims[2] * w->dims[3];
		idx = idx_dw;
	} else if (L->transb) {
		W->m = w->dims[0];
		W->k = w->dims[1];
		idx = idx_rows;
	} else {
		W->m = w->dims[1];
		W->k = w->dims[0];
		idx = idx_cols;
	}
	W->q = ml_malloc((size_t)(W->m * W->k) + 1);
	W->s = ml_malloc(sizeof(float) * (size_t)W->m + 1);
	if (W->q == NULL || W->s == NULL)
		return ml_fail(r->e, ML_ENOMEM, "out of memory");
	quant_weights(w->data, W->m, W->k, idx, w->dims, qmax, r->o->pow2, W->q, W->s, &W->sig,
		      &W->noise);
	return 0;
}

static void
wq_free(struct wq *W)
{
	ml_free(W->q);
	ml_free(W->s);
}

static const float *
bias_of(struct rw *r, const struct layer *L)
{
	const struct ml_node *n = &r->q->nodes[L->node];
	if (L->kind == L_ADD || n->n_in < 3 || n->in[2] < 0)
		return NULL;
	return ml_graph_t(r->q, n->in[2])->data;
}

/* emit_q8conv: layer L as a Q8Conv. */
static int
emit_q8conv(struct rw *r, struct layer *L, struct ml_quant_layer *rep)
{
	struct ml_graph *q = r->q;
	const struct ml_node *n = &q->nodes[L->node];
	int x = n->in[0];
	struct wq W;
	int rc;

	/* the output is float for a matrix product that nothing int8 reads */
	bool f32out = false;
	if (L->kind == L_GEMM && L->act < 0) {
		f32out = true;
		for (int i = 0; i < q->n_nodes && f32out; i++)
			for (int k = 0; k < q->nodes[i].n_in; k++)
				if (q->nodes[i].in[k] == L->out && r->layer_of[i] >= 0 &&
				    r->ly[r->layer_of[i]].on)
					f32out = false;
	}
	struct qp yp = { 1, 0 };
	if (!f32out)
		ML_TRY(qparams(r, L->out, &yp));
	int xq = get_q8(r, x);
	if (xq < 0)
		return xq;
	n = &q->nodes[L->node];	/* get_q8 may add a node, which may move the nodes */
	struct qp xp = r->qpar[x];
	if ((rc = weights_of(r, L, r->o->reduce_range ? ML_Q8_W7MAX : ML_Q8_WMAX, &W)) < 0)
		goto out;
	const float *b = bias_of(r, L);
	int32_t *bias = ml_malloc(sizeof(int32_t) * (size_t)W.m + 1);
	float *mult = ml_malloc(sizeof(float) * (size_t)W.m + 1);
	int64_t plen = L->kind == L_DW ? W.m * W.k : ml_q8_packed_len(W.k, W.m);
	int8_t *packed = ml_malloc((size_t)plen + 1);
	if (bias == NULL || mult == NULL || packed == NULL) {
		rc = ml_fail(r->e, ML_ENOMEM, "out of memory");
		goto out2;
	}
	for (int64_t j = 0; j < W.m; j++) {
		double sxw = (double)xp.scale * W.s[j];
		int64_t sum = 0;
		for (int64_t k = 0; k < W.k; k++)
			sum += W.q[j * W.k + k];
		double bj = b != NULL ? llround(b[j] / sxw) : 0;
		bj = fmax(fmin(bj, 1e9), -1e9);
		bias[j] = (int32_t)(bj - (double)xp.zero * (double)sum);
		mult[j] = (float)(f32out ? sxw : sxw / yp.scale);
	}
	if (L->kind == L_DW) {
		/* [C, K] to [K, C]: tap-major, channels fastest */
		for (int64_t j = 0; j < W.m; j++)
			for (int64_t k = 0; k < W.k; k++)
				packed[k * W.m + j] = W.q[j * W.k + k];
	} else {
		ml_q8_pack(packed, W.q, W.m, W.k);
	}
	const char *base = n->name[0] ? n->name : ml_graph_t(q, L->out)->name;
	int64_t dm = W.m, dl = plen;
	int tw = new_const(r, base, ".w8", ML_I8, 1, &dl, packed, (size_t)plen);
	int tb = tw < 0 ? tw : new_const(r, base, ".b32", ML_I32, 1, &dm, bias, sizeof(int32_t) * (size_t)W.m);
	int tm = tb < 0 ? tb : new_const(r, base, ".mult", ML_F32, 1, &dm, mult, sizeof(float) * (size_t)W.m);
	if (tm < 0) {
		rc = tm;
		goto out2;
	}
	int lastn = L->act >= 0 ? L->act : L->node;
	int o;
	if (f32out) {
		o = L->out;
		if ((rc = kill_output(r, lastn, 0)) < 0)
			goto out2;
	} else {
		o = fresh(r, ml_graph_t(q, L->out)->name, ".q8");
	}
	int ins[4] = { xq, tw, tb, tm };
	char nm[512];
	snprintf(nm, sizeof nm, "%s", base);
	int ni = add_node(r, "Q8Conv", "ml", nm, 4, ins, o);
	if (ni < 0) {
		rc = ni;
		goto out2;
	}
	n = &q->nodes[L->node];	/* add_node may move the nodes */
	if (L->kind == L_CONV || L->kind == L_DW) {
		const struct ml_tensor *w = ml_graph_t(q, n->in[1]);
		const int64_t *v;
		int64_t ks[2] = { w->dims[2], w->dims[3] };
		ml_node_set_ints(q, ni, "kernel_shape", 2, ks);
		if (ml_attr_ints(n, "strides", &v) == 2)
			ml_node_set_ints(q, ni, "strides", 2, v);
		if (ml_attr_ints(n, "pads", &v) == 4)
			ml_node_set_ints(q, ni, "pads", 4, v);
		if (ml_attr_ints(n, "dilations", &v) == 2)
			ml_node_set_ints(q, ni, "dilations", 2, v);
		if (L->kind == L_DW)
			ml_node_set_int(q, ni, "group", W.m);
	}
	ml_node_set_int(q, ni, "x_zero_point", xp.zero);
	if (r->o->reduce_range)
		ml_node_set_int(q, ni, "weight_bits", 7);
	if (f32out) {
		ml_node_set_int(q, ni, "out_float", 1);
	} else {
		long lo = 0, hi = 255;
		if (L->amin > -INFINITY)
			lo = ML_MAX(0, lrint(L->amin / yp.scale) + yp.zero);
		if (L->amax < INFINITY)
			hi = ML_MIN(255, lrint(L->amax / yp.scale) + yp.zero);
		if (lo > hi)
			lo = hi;
		ml_node_set_int(q, ni, "y_zero_point", yp.zero);
		ml_node_set_int(q, ni, "act_min", lo);
		ml_node_set_int(q, ni, "act_max", hi);
		r->q8[L->out] = o;
		r->qpar[L->out] = yp;
		r->native[L->out] = true;
	}
	if (rep != NULL) {
		rep->bytes_f32 = W.m * W.k * 4;
		rep->bytes_q = plen + 8 * W.m;
		rep->sqnr_db = W.noise > 0 ? 10 * log10(W.sig / W.noise) : 99;
	}
	rc = 0;
out2:
	ml_free(bias);
	ml_free(mult);
	ml_free(packed);
out:
	wq_free(&W);
	return rc;
}

static int
emit_simple(struct rw *r, struct layer *L)
{
	struct ml_graph *q = r->q;
	const struct ml_node *n = &q->nodes[L->node];
	char nm[512];
	snprintf(nm, sizeof nm, "%s", n->name[0] ? n->name : ml_graph_t(q, L->out)->name);

	if (L->kind == L_ADD) {
		struct qp yp;
		ML_TRY(qparams(r, L->out, &yp));
		int a = get_q8(r, n->in[0]);
		if (a < 0)
			return a;
		int b = get_q8(r, q->nodes[L->node].in[1]);
		if (b < 0)
			return b;
		n = &q->nodes[L->node];
		struct qp ap = r->qpar[n->in[0]], bp = r->qpar[n->in[1]];
		int o = fresh(r, ml_graph_t(q, L->out)->name, ".q8");
		int ins[2] = { a, b };
		int ni = add_node(r, "Q8Add", "ml", nm, 2, ins, o);
		if (ni < 0)
			return ni;
		ml_node_set_float(q, ni, "a_scale", ap.scale);
		ml_node_set_int(q, ni, "a_zero_point", ap.zero);
		ml_node_set_float(q, ni, "b_scale", bp.scale);
		ml_node_set_int(q, ni, "b_zero_point", bp.zero);
		ml_node_set_float(q, ni, "y_scale", yp.scale);
		ml_node_set_int(q, ni, "y_zero_point", yp.zero);
		if (L->amin > -INFINITY)
			ml_node_set_int(q, ni, "act_min", ML_MAX(0, lrint(L->amin / yp.scale) + yp.zero));
		r->q8[L->out] = o;
		r->qpar[L->out] = yp;
		r->native[L->out] = true;
		return 0;
	}
	/* pools and flatten keep their input's quantisation; they need an int8 input to pay */
	int x = n->in[0];
	if (r->q8[x] < 0 && L->kind != L_MAXPOOL)
		return 1;
	int xq = get_q8(r, x);
	if (xq < 0)
		return xq;
	n = &q->nodes[L->node];
	int o = fresh(r, ml_graph_t(q, L->out)->name, ".q8");
	int ni;
	if (L->kind == L_FLAT) {
		int ins[2] = { xq, n->n_in > 1 ? n->in[1] : -1 };
		ni = add_node(r, n->op_type, "", nm, n->op == ML_OP_RESHAPE ? 2 : 1, ins, o);
		if (ni >= 0 && q->nodes[L->node].op == ML_OP_FLATTEN)
			ml_node_set_int(q, ni, "axis", ml_attr_int(&q->nodes[L->node], "axis", 1));
	} else {
		ni = add_node(r, L->kind == L_GAP ? "Q8GlobalAveragePool" : "Q8MaxPool", "ml", nm, 1,
			      &xq, o);
		if (ni >= 0 && L->kind == L_MAXPOOL) {
			const struct ml_node *pn = &q->nodes[L->node];
			const int64_t *v;
			if (ml_attr_ints(pn, "kernel_shape", &v) == 2)
				ml_node_set_ints(q, ni, "kernel_shape", 2, v);
			if (ml_attr_ints(pn, "strides", &v) == 2)
				ml_node_set_ints(q, ni, "strides", 2, v);
			if (ml_attr_ints(pn, "pads", &v) == 4)
				ml_node_set_ints(q, ni, "pads", 4, v);
		}
	}
	if (ni < 0)
		return ni;
	r->q8[L->out] = o;
	r->qpar[L->out] = r->qpar[x];
	r->native[L->out] = true;
	return 0;
}

/* finish: dequantise what float nodes and outputs still read, kill replaced nodes, sweep. */
static int sweep(struct rw *r);

static int
finish(struct rw *r, int n_nodes0)
{
	struct ml_graph *q = r->q;

	for (int i = 0; i < r->nly; i++) {
		struct layer *L = &r->ly[i];
		if (!L->on)
			continue;
		int lastn = L->act >= 0 ? L->act : L->node;
		if (q->nodes[lastn].out[0] == L->out)
			ML_TRY(kill_output(r, lastn, 0));
		if (L->act >= 0 && q->nodes[L->node].out[0] != L->out)
			ML_TRY(kill_output(r, L->node, 0));
	}
	/* a Q8 value whose float original something still reads gets a Q8Dequantize */
	int nt = r->n_t0;
	for (int t = 0; t < nt; t++) {
		if (r->q8[t] < 0 || !r->native[t])
			continue;
		bool used = false;
		for (int o = 0; o < q->n_outputs; o++)
			used = used || q->outputs[o] == t;
		for (int i = 0; i < q->n_nodes && !used; i++) {
			if (i < n_nodes0 && r->layer_of[i] >= 0 && r->ly[r->layer_of[i]].on)
				continue;
			for (int k = 0; k < q->nodes[i].n_in; k++)
				used = used || q->nodes[i].in[k] == t;
		}
		bool produced = false;
		for (int i = 0; i < q->n_nodes && !produced; i++)
			for (int k = 0; k < q->nodes[i].n_out; k++)
				produced = produced || q->nodes[i].out[k] == t;
		if (!used || produced)
			continue;
		char nm[512];
		snprintf(nm, sizeof nm, "%s.dequantize", ml_graph_t(q, t)->name);
		int ni = add_node(r, "Q8Dequantize", "ml", nm, 1, &r->q8[t], t);
		if (ni < 0)
			return ni;
		ml_node_set_float(q, ni, "scale", r->qpar[t].scale);
		ml_node_set_int(q, ni, "zero_point", r->qpar[t].zero);
	}
	/* the replaced nodes go; the sweep then drops their float weights */
	int w = 0;
	for (int i = 0; i < q->n_nodes; i++)
		if (!(i < n_nodes0 && r->layer_of[i] >= 0 && r->ly[r->layer_of[i]].on))
			q->nodes[w++] = q->nodes[i];
	q->n_nodes = w;
	for (int t = 0; t < q->n_tensors; t++) {
		struct ml_tensor *tt = ml_graph_t(q, t);
		if (tt->kind == ML_TK_ACT) {
			tt->rank = -1;
			tt->dtype = ML_UNDEF;
		}
	}
	return sweep(r);
}

/*
 * sweep: toposort, then mlopt's dead-code pass, which removes the nodes
 * nothing reads and, when it removed any, every tensor nothing uses; a
 * dead Identity makes sure it removes one.
 */
static int
sweep(struct rw *r)
{
	int rc;
	if (r->q->n_inputs > 0) {
		int t = fresh(r, "mlquant", ".sweep");
		if (t < 0)
			return t;
		if ((rc = add_node(r, "Identity", "", "mlquant.sweep", 1, &r->q->inputs[0], t)) < 0)
			return rc;
	}
	struct ml_opt_opts oo = { .passes = "dce" };
	struct ml_opt_report orep = { 0 };
	if ((rc = ml_graph_toposort(r->q, r->e)) < 0)
		return rc;
	rc = ml_opt_run(r->q, &oo, &orep, r->e);
	ml_opt_report_free(&orep);
	if (rc < 0)
		return rc;
	if ((rc = ml_graph_toposort(r->q, r->e)) < 0 || (rc = ml_graph_infer(r->q, r->e)) < 0)
		return rc;
	return ml_graph_validate(r->q, r->e);
}

/* ---- the QDQ and dynamic forms ---- */

static int
qdq_act(struct rw *r, int t, int *dq)
{
	if (r->q8[t] >= 0) {
		*dq = r->q8[t];
		return 0;
	}
	struct qp p;
	ML_TRY(qparams(r, t, &p));
	const char *nm = ml_graph_t(r->q, t)->name;
	bool s8 = r->o->act_signed;
	float sc = p.scale;
	uint8_t z8 = (uint8_t)(s8 ? 0 : p.zero);
	int ts = new_const(r, nm, ".scale", ML_F32, 0, NULL, &sc, sizeof sc);
	int tz = ts < 0 ? ts : new_const(r, nm, ".zero", s8 ? ML_I8 : ML_U8, 0, NULL, &z8, 1);
	int tq = tz < 0 ? tz : fresh(r, nm, ".q");
	int td = tq < 0 ? tq : fresh(r, nm, ".dq");
	if (td < 0)
		return td;
	char n1[512], n2[512];
	snprintf(n1, sizeof n1, "%s.QuantizeLinear", nm);
	snprintf(n2, sizeof n2, "%s.DequantizeLinear", nm);
	int a[3] = { t, ts, tz }, b[3] = { tq, ts, tz };
	int rc = add_node(r, "QuantizeLinear", "", n1, 3, a, tq);
	if (rc >= 0)
		rc = add_node(r, "DequantizeLinear", "", n2, 3, b, td);
	if (rc < 0)
		return rc;
	r->q8[t] = td;
	*dq = td;
	return 0;
}

static int
qdq_weight(struct rw *r, struct layer *L, struct ml_quant_layer *rep)
{
	struct ml_graph *q = r->q;
	struct wq W;
	int rc;

	/* QDQ weights are 8-bit; a depthwise weight is [C, 1, KH, KW], axis 0 as for Conv */
	if ((rc = weights_of(r, L, 127, &W)) < 0)
		goto out;
	const struct ml_tensor *w = ml_graph_t(q, q->nodes[L->node].in[1]);
	int axis = (L->kind == L_GEMM && !L->transb) ? 1 : 0;
	int8_t *data = ml_malloc(w->nbytes / 4 + 1);
	int8_t *zeros = ml_calloc((size_t)W.m + 1, 1);
	if (data == NULL || zeros == NULL) {
		ml_free(data);
		ml_free(zeros);
		rc = ml_fail(r->e, ML_ENOMEM, "out of memory");
		goto out;
	}
	int64_t (*idx)(int64_t, int64_t, const int64_t *) =
		L->kind == L_CONV ? idx_conv : L->kind == L_DW ? idx_dw :
		L->transb ? idx_rows : idx_cols;
	for (int64_t j = 0; j < W.m; j++)
		for (int64_t k = 0; k < W.k; k++)
			data[idx(j, k, w->dims)] = W.q[j * W.k + k];
	char base[256];
	snprintf(base, sizeof base, "%s", w->name);
	int64_t dims[ML_MAX_RANK], dm = W.m;
	int rank = w->rank;
	memcpy(dims, w->dims, sizeof dims);
	int tq = new_const(r, base, ".int8", ML_I8, rank, dims, data, w->nbytes / 4);
	int ts = tq < 0 ? tq : new_const(r, base, ".scale", ML_F32, 1, &dm, W.s, sizeof(float) * (size_t)W.m);
	int tz = ts < 0 ? ts : new_const(r, base, ".zero", ML_I8, 1, &dm, zeros, (size_t)W.m);
	int td = tz < 0 ? tz : fresh(r, base, ".dq");
	ml_free(data);
	ml_free(zeros);
	if (td < 0) {
		rc = td;
		goto out;
	}
	char nm[512];
	snprintf(nm, sizeof nm, "%s.DequantizeLinear", base);
	int a[3] = { tq, ts, tz };
	int ni = add_node(r, "DequantizeLinear", "", nm, 3, a, td);
	if (ni < 0) {
		rc = ni;
		goto out;
	}
	ml_node_set_int(q, ni, "axis", axis);
	q->nodes[L->node].in[1] = td;
	if (rep != NULL) {
		rep->bytes_f32 = (int64_t)w->nbytes;
		rep->bytes_q = (int64_t)w->nbytes / 4 + 5 * W.m;
		rep->sqnr_db = W.noise > 0 ? 10 * log10(W.sig / W.noise) : 99;
	}
	rc = 0;
out:
	wq_free(&W);
	return rc;
}

/* ---- fp16 / bf16 ---- */

/*
 * half_weights: every f32 constant that only the products read, and only
 * as their weight (input 1) against an f32 input 0, becomes bf16 (or fp16:
 * bf false) in place: no Cast, the kernel reads it as it is.
 */
static int
half_weights(struct rw *r, bool bf)
{
	struct ml_graph *q = r->q;
	int nt = q->n_tensors;
	int *uses = ml_calloc((size_t)nt + 1, sizeof(int)), rc = 0;
	bool *bad = ml_calloc((size_t)nt + 1, sizeof(bool));

	if (uses == NULL || bad == NULL) {
		rc = ml_fail(r->e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int k = 0; k < q->n_outputs; k++)
		bad[q->outputs[k]] = true;
	for (int i = 0; i < q->n_nodes; i++) {
		const struct ml_node *n = &q->nodes[i];
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t < 0)
				continue;
			uses[t]++;
			if (j != 1 || !(ml_op_flags(n->op) & ML_OPF_HALF_WEIGHT) || n->in[0] < 0 ||
			    ml_graph_t(q, n->in[0])->dtype != ML_F32)
				bad[t] = true;
			/*
			 * A grouped convolution's weight stays f32: the kernels
			 * convert it back to f32 once per session anyway (no bf16
			 * GEMM takes it), and the rounding costs accuracy for
			 * nothing: a random-init MobileNet-V2's SQNR is 23.5 dB
			 * with bf16 depthwise weights and their products still f32.
			 */
			if (bf && j == 1 && ml_attr_int(n, "group", 1) != 1)
				bad[t] = true;
			/*
			 * mlopt's channels-last convolution multiplies in bf16
			 * where it is one GEMM (pointwise: bf16.c); other ones
			 * have no bf16 kernel, and their weight stays f32 for
			 * bf16 (fp16's is converted once)
			 */
			if (bf && n->op == ML_OP_CONV_NHWC &&
			    !ml_conv_nhwc_pointwise(n, ml_graph_t(q, t)->rank, ml_graph_t(q, t)->dims))
				bad[t] = true;
		}
	}
	for (int t = 0; t < nt && rc == 0; t++) {
		struct ml_tensor *x = ml_graph_t(q, t);
		if ((x->kind != ML_TK_CONST && x->kind != ML_TK_PARAM) || x->dtype != ML_F32 ||
		    uses[t] == 0 || bad[t] || x->data == NULL)
			continue;
		int64_t n = (int64_t)x->nbytes / 4;
		uint16_t *h = ml_malloc((size_t)n * 2 + 2);
		if (h == NULL) {
			rc = ml_fail(r->e, ML_ENOMEM, "out of memory");
			break;
		}
		const float *f = x->data;
		for (int64_t i = 0; i < n; i++)
			h[i] = bf ? ml_f32_to_bf16(f[i]) : ml_f32_to_f16(f[i]);
		int64_t dims[ML_MAX_RANK];
		memcpy(dims, x->dims, sizeof dims);
		rc = ml_graph_set_data(q, t, x->kind, bf ? ML_BF16 : ML_F16, x->rank, dims, h,
				       (size_t)n * 2, r->e);
		ml_free(h);
	}
out:
	ml_free(uses);
	ml_free(bad);
	return rc;
}

/*
 * half_form: both make the products' weights 16-bit with no Cast
 * (half_weights): bf16 for kernels that compute in bf16, fp16 for storage
 * (the CPU converts such a weight to f32 once per session, so an fp16
 * model runs as fast as its f32 one). bf16 leaves the other constants
 * (biases, norms, small tensors) f32, as the compute around the products
 * is; fp16 stores the other large ones (an RNN's weights, embeddings) in 16
 * bits behind a Cast, but not vectors (biases, norm scales: small, and
 * read where the compute is f32).
 */
static int
half_form(struct rw *r, bool bf)
{
	struct ml_graph *q = r->q;

	ML_TRY(half_weights(r, bf));
	if (bf)
		return sweep(r);
	int nt = q->n_tensors;
	for (int t = 0; t < nt; t++) {
		struct ml_tensor *x = ml_graph_t(q, t);
		if ((x->kind != ML_TK_CONST && x->kind != ML_TK_PARAM) || x->dtype != ML_F32 ||
		    x->nbytes < 256 || x->rank <= 1)
			continue;
		int64_t n = (int64_t)x->nbytes / 4;
		uint16_t *h = ml_malloc((size_t)n * 2);
		if (h == NULL)
			return ml_fail(r->e, ML_ENOMEM, "out of memory");
		const float *f = x->data;
		for (int64_t i = 0; i < n; i++)
			h[i] = bf ? ml_f32_to_bf16(f[i]) : ml_f32_to_f16(f[i]);
		char base[256];
		snprintf(base, sizeof base, "%s", x->name);
		int64_t dims[ML_MAX_RANK];
		int rank = x->rank;
		memcpy(dims, x->dims, sizeof dims);
		int th = new_const(r, base, bf ? ".bf16" : ".f16", bf ? ML_BF16 : ML_F16, rank, dims, h,
				   (size_t)n * 2);
		ml_free(h);
		if (th < 0)
			return th;
		x = ml_graph_t(q, t);
		if (ml_graph_owns_data(q, x))
			ml_free(x->data);
		x->data = NULL;
		x->nbytes = 0;
		x->kind = ML_TK_ACT;
		char nm[512];
		snprintf(nm, sizeof nm, "%s.Cast", base);
		int ni = add_node(r, "Cast", "", nm, 1, &th, t);
		if (ni < 0)
			return ni;
		ml_node_set_int(q, ni, "to", ML_F32);
	}
	return sweep(r);
}

void
ml_quant_report_free(struct ml_quant_report *r)
{
	if (r == NULL)
		return;
	ml_free(r->layers);
	memset(r, 0, sizeof *r);
}

static const char *const kind_names[] = { "", "Conv", "ConvDepthwise", "Gemm", "Add", "MaxPool",
					  "GlobalAveragePool", "Flatten" };

/* build: one quantisation of g with the layers' on flags in *onv (NULL: all on). */
static int
build(struct ml_graph **out, const struct ml_graph *g, struct mq_stat *st,
      const struct ml_quant_opts *o, const bool *onv, struct ml_quant_report *rep,
      struct ml_err *e)
{
	struct rw r = { .o = o, .st = st, .e = e };
	int rc;

	*out = NULL;
	if ((rc = mlq_copy_graph(&r.q, g, e)) < 0)
		return rc;
	/*
	 * A quantised model is for inference: mltrain's state (optimizer
	 * moments of the float weights) cannot resume it, so it is dropped,
	 * and the sweep removes the slot tensors that nothing reads.
	 */
	r.q->train = NULL;
	r.n_t0 = r.q->n_tensors;
	if (r.n_t0 != g->n_tensors) {
		rc = ml_fail(e, ML_EINVAL, "the graph changed in a copy");
		goto out;
	}
	if (o->form == ML_QFORM_F16 || o->form == ML_QFORM_BF16) {
		rc = half_form(&r, o->form == ML_QFORM_BF16);
		goto out;
	}
	r.q8 = ml_malloc(sizeof(int) * (size_t)(r.n_t0 * 4 + 64));
	r.qpar = ml_calloc((size_t)(r.n_t0 * 4 + 64), sizeof *r.qpar);
	r.nuse = ml_calloc((size_t)(r.n_t0 + 1), sizeof(int));
	r.native = ml_calloc((size_t)(r.n_t0 + 1), sizeof(bool));
	if (r.native == NULL || r.q8 == NULL || r.qpar == NULL || r.nuse == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int t = 0; t < r.n_t0 * 4 + 64; t++)
		r.q8[t] = -1;
	for (int i = 0; i < r.q->n_nodes; i++)
		for (int k = 0; k < r.q->nodes[i].n_in; k++)
			if (r.q->nodes[i].in[k] >= 0)
				r.nuse[r.q->nodes[i].in[k]]++;
	for (int k = 0; k < r.q->n_outputs; k++)
		r.nuse[r.q->outputs[k]]++;
	if ((rc = classify(&r)) < 0)
		goto out;
	if (onv != NULL)
		for (int i = 0; i < r.nly; i++)
			if (!onv[i] && r.ly[i].on) {
				r.ly[i].on = false;
				snprintf(r.ly[i].why, sizeof r.ly[i].why, "budget");
			}
	if (rep != NULL) {
		ml_free(rep->layers);
		rep->layers = ml_calloc((size_t)r.nly + 1, sizeof *rep->layers);
		rep->n = r.nly;
		if (rep->layers == NULL) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
	}
	int n_nodes0 = r.q->n_nodes;
	for (int i = 0; i < r.nly; i++) {
		struct layer *L = &r.ly[i];
		struct ml_quant_layer *rl = rep != NULL ? &rep->layers[i] : NULL;
		if (rl != NULL) {
			snprintf(rl->name, sizeof rl->name, "%s", r.q->nodes[L->node].name);
			snprintf(rl->op, sizeof rl->op, "%s%s", kind_names[L->kind],
				 L->act >= 0 ? (r.q->nodes[L->act].op == ML_OP_RELU ? "+Relu" : "+Clip") : "");
		}
		if (L->on && o->form != ML_QFORM_INT && L->kind != L_CONV && L->kind != L_DW &&
		    L->kind != L_GEMM)
			L->on = false;
		if (L->on) {
			if (o->form == ML_QFORM_INT) {
				if (L->kind == L_CONV || L->kind == L_DW || L->kind == L_GEMM)
					rc = emit_q8conv(&r, L, rl);
				else if ((rc = emit_simple(&r, L)) == 1) {
					L->on = false;
					snprintf(L->why, sizeof L->why, "float input");
					rc = 0;
				}
			} else {
				int dq = -1;
				if (o->form == ML_QFORM_QDQ) {
					rc = qdq_act(&r, r.q->nodes[L->node].in[0], &dq);
					if (rc == 0)
						r.q->nodes[L->node].in[0] = dq;
				}
				if (rc == 0)
					rc = qdq_weight(&r, L, rl);
			}
			if (rc < 0)
				goto out;
		}
		if (rl != NULL) {
			rl->quantized = L->on;
			snprintf(rl->why, sizeof rl->why, "%s", L->why);
		}
	}
	if (o->form == ML_QFORM_INT) {
		rc = finish(&r, n_nodes0);
	} else {
		if (o->form == ML_QFORM_QDQ || o->form == ML_QFORM_DYNAMIC) {
			if (ml_graph_opset(r.q, "", 13) < 13)
				ml_graph_set_opset(r.q, "", 13, e);
		}
		rc = sweep(&r);
	}
out:
	if (rc == 0) {
		ml_graph_set_meta(r.q, "quantized", o->form == ML_QFORM_INT ? "int8" :
				  o->form == ML_QFORM_QDQ ? "qdq" : o->form == ML_QFORM_DYNAMIC ?
				  "dynamic" : o->form == ML_QFORM_F16 ? "f16" : "bf16", e);
		*out = r.q;
	} else {
		ml_graph_free(r.q);
	}
	ml_free(r.ly);
	ml_free(r.layer_of);
	ml_free(r.q8);
	ml_free(r.qpar);
	ml_free(r.nuse);
	ml_free(r.native);
	return rc;
}

/* ---- measuring: output SQNR and node times ---- */

struct outs {
	int n;			/* batches */
	struct ml_tval *v;	/* first output per batch */
	double sig, noise;
	bool compare;
	const struct ml_progress *prog;	/* "measuring": a unit a batch and model, one a timing */
};

static int
keep_out(void *ctx, struct ml_graph *gx, struct ml_session *s, int batch, struct ml_err *e)
{
	struct outs *o = ctx;
	const struct ml_tval *y = ml_session_output(s, 0);
	(void)gx;
	ml_progress_report(o->prog, "measuring", (o->compare ? o->n : 0) + batch + 1,
			   2 * (int64_t)o->n + 2);
	if (y == NULL || y->dtype != ML_F32)
		return 0;
	if (!o->compare) {
		ML_TRY(ml_tval_alloc(&o->v[batch], ML_F32, y->rank, y->dims, e));
		memcpy(o->v[batch].data, y->data, (size_t)ml_tval_nbytes(y));
		return 0;
	}
	const struct ml_tval *ref = &o->v[batch];
	int64_t n = ML_MIN(ml_tval_numel(ref), ml_tval_numel(y));
	for (int64_t i = 0; i < n; i++) {
		double a = ((const float *)ref->data)[i], b = ((const float *)y->data)[i];
		o->sig += a * a;
		o->noise += (a - b) * (a - b);
	}
	return 0;
}

static int64_t
const_bytes(const struct ml_graph *g)
{
	int64_t n = 0, b = 0;
	ml_graph_param_stats(g, &n, &b);
	return b;
}

/* node_times: the median time in microseconds of each node of g over a few runs. */
static int
node_times(const struct ml_graph *g, const struct ml_calib *cal, double **out, struct ml_err *e)
{
	struct ml_graph *gx = NULL;
	struct ml_session *s = NULL;
	struct ml_session_opts so = { .profile = true };
	enum { RUNS = 5 };
	int rc;

	*out = NULL;
	if ((rc = mlq_copy_graph(&gx, g, e)) < 0)
		return rc;
	double *t = ml_calloc((size_t)gx->n_nodes * RUNS + 1, sizeof(double));
	double *m = ml_calloc((size_t)gx->n_nodes + 1, sizeof(double));
	if (t == NULL || m == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = ml_session_new(&s, gx, &so, e)) < 0)
		goto out;
	for (int i = 0; i < gx->n_inputs; i++)
		if ((rc = ml_session_set_input(s, ml_graph_t(gx, gx->inputs[i])->name, &cal->b[i], e)) < 0)
			goto out;
	for (int k = -1; k < RUNS; k++) {
		if ((rc = ml_session_run(s, e)) < 0)
			goto out;
		for (int i = 0; k >= 0 && i < gx->n_nodes; i++)
			t[i * RUNS + k] = ml_session_node_time(s, i) * 1e6;
	}
	for (int i = 0; i < gx->n_nodes; i++) {
		double *v = t + i * RUNS;
		for (int a = 1; a < RUNS; a++)	/* insertion sort of five values */
			for (int b = a; b > 0 && v[b] < v[b - 1]; b--) {
				double x = v[b];
				v[b] = v[b - 1];
				v[b - 1] = x;
			}
		m[i] = v[RUNS / 2];
	}
	*out = m;
	m = NULL;
out:
	ml_free(t);
	ml_free(m);
	ml_session_free(s);
	ml_graph_free(gx);
	return rc;
}

static double
time_of(const struct ml_graph *g, const double *t, const char *name)
{
	double s = 0;
	size_t n = strlen(name);
	for (int i = 0; i < g->n_nodes; i++)
		if (strcmp(g->nodes[i].name, name) == 0 ||
		    (strncmp(g->nodes[i].name, name, n) == 0 && g->nodes[i].name[n] == '.'))
			s += t[i];
	return s;
}

/*
 * measure: the output SQNR of q against g over the calibration data and
 * the node times of both into rep; prog (may be NULL) hears of each run.
 */
static int
measure(const struct ml_graph *g, const struct ml_graph *q, const struct ml_calib *cal,
	struct ml_quant_report *rep, const struct ml_graph *g0, const struct ml_progress *prog,
	struct ml_err *e)
{
	struct outs o = { .n = cal->n_batches, .prog = prog };
	double *tf = NULL, *tq = NULL;
	int rc;

	o.v = ml_calloc((size_t)o.n + 1, sizeof *o.v);
	if (o.v == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	ml_progress_report(prog, "measuring", 0, 2 * (int64_t)o.n + 2);
	if ((rc = mlq_run_all(g, cal, 0, keep_out, &o, e)) < 0)
		goto out;
	o.compare = true;
	if ((rc = mlq_run_all(q, cal, 0, keep_out, &o, e)) < 0)
		goto out;
	rep->out_sqnr_db = o.noise > 0 ? 10 * log10(o.sig / o.noise) : 99;
	if ((rc = node_times(g, cal, &tf, e)) < 0)
		goto out;
	ml_progress_report(prog, "measuring", 2 * (int64_t)o.n + 1, 2 * (int64_t)o.n + 2);
	if ((rc = node_times(q, cal, &tq, e)) < 0)
		goto out;
	ml_progress_report(prog, "measuring", 2 * (int64_t)o.n + 2, 2 * (int64_t)o.n + 2);
	struct ml_graph *qc = NULL, *gc = NULL;
	if ((rc = mlq_copy_graph(&qc, q, e)) < 0)
		goto out;
	if ((rc = mlq_copy_graph(&gc, g0, e)) < 0) {
		ml_graph_free(qc);
		goto out;
	}
	for (int i = 0; i < rep->n; i++) {
		struct ml_quant_layer *L = &rep->layers[i];
		L->us_f32 = time_of(gc, tf, L->name);
		/* the fused activation's time belongs to the float layer */
		L->us_q = time_of(qc, tq, L->name);
	}
	ml_graph_free(qc);
	ml_graph_free(gc);
out:
	for (int i = 0; i < o.n; i++)
		ml_tval_clear(&o.v[i]);
	ml_free(o.v);
	ml_free(tf);
	ml_free(tq);
	return rc;
}

/* ---- whole-model latency, for --budget's never-slower rule ---- */

static int
lat_session(struct ml_session **s, struct ml_graph **gx, const struct ml_graph *g,
	    const struct ml_calib *cal, struct ml_err *e)
{
	ML_TRY(mlq_copy_graph(gx, g, e));
	ML_TRY(ml_session_new(s, *gx, NULL, e));
	for (int i = 0; i < (*gx)->n_inputs; i++)
		ML_TRY(ml_session_set_input(*s, ml_graph_t(*gx, (*gx)->inputs[i])->name, &cal->b[i],
					    e));
	return ml_session_run(*s, e);	/* the warm-up */
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* timed: the median of k runs of s in ms (*ms) */
static int
timed(struct ml_session *s, int k, double *ms, struct ml_err *e)
{
	double v[64];
	for (int i = 0; i < k; i++) {
		double t0 = ml_now();
		ML_TRY(ml_session_run(s, e));
		v[i] = (ml_now() - t0) * 1e3;
	}
	qsort(v, (size_t)k, sizeof v[0], cmp_double);
	*ms = v[k / 2];
	return 0;
}

int
ml_quant_latency(void *ctx, const struct ml_graph *f, const struct ml_graph *q,
		 const struct ml_calib *cal, double *ms_f, double *ms_q, struct ml_err *e)
{
	enum { ROUNDS = 7 };
	struct ml_graph *gf = NULL, *gq = NULL;
	struct ml_session *sf = NULL, *sq = NULL;
	double rf[ROUNDS], rq[ROUNDS], t0 = 0, t1 = 0;
	int rc;

	(void)ctx;
	*ms_f = *ms_q = 0;
	if ((rc = lat_session(&sf, &gf, f, cal, e)) < 0 || (rc = lat_session(&sq, &gq, q, cal, e)) < 0)
		goto out;
	/* runs per round: about 20 ms of the float model, 3 to 31 */
	if ((rc = timed(sf, 1, &t0, e)) < 0 || (rc = timed(sq, 1, &t1, e)) < 0)
		goto out;
	int k = (int)ML_MIN(31.0, ML_MAX(3.0, 20.0 / (t0 + t1 + 1e-3)));
	for (int r = 0; r < ROUNDS; r++)
		if ((rc = timed(sf, k, &rf[r], e)) < 0 || (rc = timed(sq, k, &rq[r], e)) < 0)
			goto out;
	qsort(rf, ROUNDS, sizeof rf[0], cmp_double);
	qsort(rq, ROUNDS, sizeof rq[0], cmp_double);
	*ms_f = rf[ROUNDS / 2];
	*ms_q = rq[ROUNDS / 2];
out:
	ml_session_free(sf);
	ml_session_free(sq);
	ml_graph_free(gf);
	ml_graph_free(gq);
	return rc;
}

/*
 * never_slower: --budget's last step: the whole quantised model *out
 * against g0 (the graph as given); when it is not faster, *out becomes a
 * copy of g0 and every layer of the report goes back to float.
 */
static int
never_slower(struct ml_graph **out, const struct ml_graph *g0, const struct ml_calib *cal,
	     const struct ml_quant_opts *o, struct ml_quant_report *rep, struct ml_err *e)
{
	double mf = 0, mq = 0;
	int rc = o->latency != NULL ? o->latency(o->latency_ctx, g0, *out, cal, &mf, &mq, e) :
		 ml_quant_latency(NULL, g0, *out, cal, &mf, &mq, e);
	if (rc < 0)
		return rc;
	rep->ms_f32 = mf;
	rep->ms_q = mq;
	if (mq < mf)
		return 0;
	struct ml_graph *c = NULL;
	ML_TRY(mlq_copy_graph(&c, g0, e));
	ml_graph_free(*out);
	*out = c;
	rep->kept_f32 = true;
	rep->bytes_out = rep->bytes_in;
	for (int i = 0; i < rep->n; i++) {
		rep->layers[i].quantized = false;
		snprintf(rep->layers[i].why, sizeof rep->layers[i].why, "int8 model not faster");
	}
	return 0;
}

/*
 * ---- quantisation-aware training (lib/quant/qat.c) ----
 * mlq_qat_strip: for a g with FakeQuant nodes, *out is a copy without them
 * and *st holds the ranges of the tensors they fake-quantised (per tensor
 * index of *out, min/max only); *out stays NULL for a g without any.
 */
int mlq_qat_strip(const struct ml_graph *g, struct ml_graph **out, struct mq_stat **st,
		 struct ml_err *e);

/* qat_ranges: the FakeQuant ranges qst override the calibrated statistics st (when any). */
static void
qat_ranges(struct mq_stat *st, const struct mq_stat *qst, int n)
{
	for (int t = 0; st != NULL && t < n; t++)
		if (qst[t].seen) {
			st[t] = (struct mq_stat){ .seen = true, .min = qst[t].min, .max = qst[t].max };
		}
}
/* ---- end of quantisation-aware training ---- */

int
ml_quantize(struct ml_graph **out, const struct ml_graph *g, const struct ml_calib *cal,
	    const struct ml_quant_opts *o, struct ml_quant_report *rep, struct ml_err *e)
{
	struct mq_stat *st = NULL, *qst = NULL;
	struct ml_graph *gq = NULL, *gu = NULL;
	struct ml_quant_report tmp = { 0 };
	const struct ml_graph *g0 = g;
	bool *onv = NULL;
	int rc;

	*out = NULL;
	if (rep == NULL)
		rep = &tmp;
	/*
	 * A graph mlopt fused: FusedConv/FusedGemm split back (unfuse.c), but
	 * for bf16 and fp16, whose kernels take the fused ops with their 16-bit
	 * weights.
	 */
	if (o->form != ML_QFORM_BF16 && o->form != ML_QFORM_F16 &&
	    (rc = mlq_unfuse(g, &gu, e)) < 0)
		return rc;
	if (gu != NULL)
		g = gu;
	/* a QAT-trained graph: FakeQuant nodes removed, their ranges used (qat.c) */
	if ((rc = mlq_qat_strip(g, &gq, &qst, e)) < 0) {
		ml_graph_free(gu);
		return rc;
	}
	if (gq != NULL)
		g = gq;
	bool needcal = o->form == ML_QFORM_INT || o->form == ML_QFORM_QDQ;
	if (needcal && cal == NULL && gq == NULL) {
		ml_graph_free(gu);
		return ml_fail(e, ML_EINVAL, "this form needs calibration data");
	}
	if (needcal && cal != NULL &&
	    (rc = mlq_collect(g, cal, o->method != ML_CALIB_MINMAX, o->progress, &st, e)) < 0)
		goto out;
	if (needcal && gq != NULL) {
		if (st == NULL) {
			st = qst;
			qst = NULL;
		} else {
			qat_ranges(st, qst, g->n_tensors);
		}
	}
	if ((rc = build(out, g, st, o, NULL, rep, e)) < 0)
		goto out;
	rep->bytes_in = const_bytes(g);
	rep->bytes_out = const_bytes(*out);
	if (cal == NULL || !(o->measure || o->budget > 0))
		goto out;
	if ((rc = measure(g, *out, cal, rep, g, o->progress, e)) < 0)
		goto out;
	if (o->budget <= 0 || o->form != ML_QFORM_INT)
		goto out;
	/*
	 * Accuracy- and speed-driven mixing: layers slower in int8 than in float
	 * go back first, then, while the output SQNR is below the budget, the
	 * quantised layer with the lowest weight SQNR, one per round.
	 */
	onv = ml_calloc((size_t)rep->n + 1, sizeof(bool));
	if (onv == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < rep->n; i++)
		onv[i] = rep->layers[i].quantized;
	/* a unit a round; how many rounds the budget needs is not known before */
	ml_progress_report(o->progress, "budget search", 0, 0);
	for (int round = 0; round < 64; round++) {
		bool changed = false;
		if (round == 0) {
			for (int i = 0; i < rep->n; i++)
				if (onv[i] && rep->layers[i].us_q > rep->layers[i].us_f32 * 1.05 &&
				    rep->layers[i].us_f32 > 0 && rep->layers[i].bytes_f32 > 0) {
					onv[i] = false;
					changed = true;
				}
		} else if (rep->out_sqnr_db < o->budget) {
			int worst = -1;
			for (int i = 0; i < rep->n; i++)
				if (onv[i] && rep->layers[i].bytes_f32 > 0 &&
				    (worst < 0 || rep->layers[i].sqnr_db < rep->layers[worst].sqnr_db))
					worst = i;
			if (worst >= 0) {
				onv[worst] = false;
				changed = true;
			}
		}
		if (!changed) {
			if (round > 0)
				break;
			continue;
		}
		rep->rounds = round + 1;
		ml_graph_free(*out);
		*out = NULL;
		if ((rc = build(out, g, st, o, onv, rep, e)) < 0 ||
		    (rc = measure(g, *out, cal, rep, g, NULL, e)) < 0)
			goto out;
		rep->bytes_out = const_bytes(*out);
		ml_progress_report(o->progress, "budget search", rep->rounds, 0);
	}
	rc = never_slower(out, g0, cal, o, rep, e);
out:
	if (rc < 0) {
		ml_graph_free(*out);
		*out = NULL;
	}
	ml_free(onv);
	ml_free(st);
	ml_free(qst);
	ml_graph_free(gq);
	ml_graph_free(gu);
	ml_quant_report_free(&tmp);
	return rc;
}
