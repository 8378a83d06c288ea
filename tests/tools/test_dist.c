/*
 * test_dist.c: data-parallel training without a second process: the bucket
 * rewriting of ml_train_distribute (which tensors, how many buckets, where
 * the starts and waits go, what the optimizer reads afterwards), that a
 * distributed step graph on one process trains bit for bit like the plain
 * one and survives the graph file, BatchNorm statistics and gradient
 * clipping, failures, sharding arithmetic, and the MPI entry points when
 * MPI is not active. The two-process runs are in tests/7500-mpi.bats.
 * Prints TAP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"
#include "dist/dist.h"	/* ml_dist_sum16, the reduction of 16-bit buckets */

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;

static double
urand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (double)(rs >> 11) / 9007199254740992.0;
}

static const char *mlp_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 1>\n"
	"mlp (float[N,4] x) => (float[N,3] y)\n"
	"{\n    dense(units=16, act=relu)\n    dense(units=8, act=relu)\n    dense(units=3)\n}\n";

static const char *cnn_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 2>\n"
	"cnn (float[N,1,8,8] x) => (float[N,2] y)\n"
	"{\n    conv(filters=4, kernel=3, pad=1)\n    norm(batch)\n    act(relu)\n"
	"    pool(max, size=2, stride=2)\n    flatten\n    dense(units=2)\n}\n";

static struct ml_graph *
from_text(const char *text)
{
	struct ml_graph *g = NULL;
	struct ml_err e = { 0 };
	if (ml_text_decode(&g, text, strlen(text), "test.mlt", &e) < 0 ||
	    ml_graph_toposort(g, &e) < 0 || ml_graph_validate(g, &e) < 0 ||
	    ml_graph_infer(g, &e) < 0) {
		printf("# text: %s\n", e.msg);
		ml_graph_free(g);
		return NULL;
	}
	return g;
}

static struct ml_graph *
step_of(const struct ml_graph *model, const struct ml_train_opts *o)
{
	struct ml_graph *s = NULL;
	struct ml_err e = { 0 };
	if (model == NULL || ml_train_step_graph(&s, model, o, &e) < 0) {
		printf("# step graph: %s\n", e.msg);
		return NULL;
	}
	return s;
}

static int
count_op(const struct ml_graph *g, enum ml_op op)
{
	int n = 0;
	for (int i = 0; i < g->n_nodes; i++)
		n += g->nodes[i].op == op;
	return n;
}

/* is_wait_out: whether tensor t is an output of an AllReduceWait node. */
static bool
is_wait_out(const struct ml_graph *g, int t)
{
	int p = t >= 0 ? g->tensors[t]->producer : -1;
	return p >= 0 && g->nodes[p].op == ML_OP_ALLREDUCE_WAIT;
}

/*
 * placement_ok: every start comes right after the producer of its last
 * input, every wait right before the first reader of its outputs, and
 * every wait after its start.
 */
static bool
placement_ok(const struct ml_graph *g)
{
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (n->op == ML_OP_ALLREDUCE_START) {
			int last = -1;
			for (int j = 0; j < n->n_in; j++)
				if (g->tensors[n->in[j]]->producer > last)
					last = g->tensors[n->in[j]]->producer;
			/* between the producer and the start only other starts may sit */
			for (int k = last + 1; k < i; k++)
				if (g->nodes[k].op != ML_OP_ALLREDUCE_START)
					return false;
		} else if (n->op == ML_OP_ALLREDUCE_WAIT) {
			int first = g->n_nodes;
			for (int k = i + 1; k < g->n_nodes; k++)
				for (int j = 0; j < g->nodes[k].n_in; j++)
					for (int o = 0; o < n->n_out; o++)
						if (g->nodes[k].in[j] == n->out[o] && k < first)
							first = k;
			/* other waits and nodes without outputs (moved last by toposort) */
			for (int k = i + 1; k < first; k++)
				if (g->nodes[k].op != ML_OP_ALLREDUCE_WAIT && g->nodes[k].n_out > 0)
					return false;
			if (g->tensors[n->in[0]]->producer >= i)
				return false;
		}
	}
	return true;
}

/* updates_read_averages: input 1 of every SGD/Adam/EMA update is a wait's output. */
static bool
updates_read_averages(const struct ml_graph *g, int *n_upd)
{
	*n_upd = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (n->op != ML_OP_SGD_UPDATE && n->op != ML_OP_ADAM_UPDATE && n->op != ML_OP_EMA_UPDATE)
			continue;
		(*n_upd)++;
		if (!is_wait_out(g, n->in[1]))
			return false;
	}
	return true;
}

/* A batch of blobs: x [n,4], labels [n] in 3 classes. */
struct batch {
	struct ml_tval x, y, lr;
};

static void
blobs(struct batch *b, int n, bool img)
{
	struct ml_err e = { 0 };
	int64_t xd[4] = { n, 4 }, xi[4] = { n, 1, 8, 8 }, yd[1] = { n };
	ml_tval_clear(&b->x);
	ml_tval_clear(&b->y);
	ml_tval_alloc(&b->x, ML_F32, img ? 4 : 2, img ? xi : xd, &e);
	ml_tval_alloc(&b->y, ML_I64, 1, yd, &e);
	int64_t feat = ml_tval_numel(&b->x) / n;
	for (int i = 0; i < n; i++) {
		int k = (int)(urand() * (img ? 2 : 3)) % (img ? 2 : 3);
		((int64_t *)b->y.data)[i] = k;
		for (int64_t j = 0; j < feat; j++)
			((float *)b->x.data)[i * feat + j] = (float)(k == (int)(j % 3)) +
							     0.4f * (float)(urand() - 0.5);
	}
	if (b->lr.data == NULL)
		ml_tval_alloc(&b->lr, ML_F32, 0, NULL, &e);
	*(float *)b->lr.data = 0.1f;
}

static void
batch_free(struct batch *b)
{
	ml_tval_clear(&b->x);
	ml_tval_clear(&b->y);
	ml_tval_clear(&b->lr);
}

/* train: k steps of g on the same seeded batches; 0 or a negative code. */
static int
train(struct ml_graph *g, int k, bool img, uint64_t seed)
{
	struct ml_err e = { 0 };
	struct ml_session *s = NULL;
	struct batch b = { 0 };
	int rc = ml_session_new(&s, g, NULL, &e);
	rs = seed;
	for (int i = 0; rc == 0 && i < k; i++) {
		blobs(&b, 12, img);
		if ((rc = ml_session_set_input(s, "x", &b.x, &e)) < 0 ||
		    (rc = ml_session_set_input(s, "label", &b.y, &e)) < 0 ||
		    (rc = ml_session_set_input(s, "lr", &b.lr, &e)) < 0)
			break;
		rc = ml_session_run(s, &e);
	}
	if (rc < 0)
		printf("# train: %s\n", e.msg);
	batch_free(&b);
	ml_session_free(s);
	return rc;
}

/* same_params: every PARAM and CONST of a has the same bytes in b. */
static bool
same_params(const struct ml_graph *a, const struct ml_graph *b, int *n)
{
	*n = 0;
	for (int t = 0; t < a->n_tensors; t++) {
		const struct ml_tensor *x = a->tensors[t];
		if ((x->kind != ML_TK_PARAM && x->kind != ML_TK_CONST) || x->data == NULL)
			continue;
		int u = ml_graph_find(b, x->name);
		if (u < 0 || b->tensors[u]->nbytes != x->nbytes ||
		    memcmp(b->tensors[u]->data, x->data, x->nbytes) != 0) {
			printf("# %s differs\n", x->name);
			return false;
		}
		(*n)++;
	}
	return true;
}

static void
test_rewrite(void)
{
	struct ml_err e = { 0 };
	struct ml_dist_opts o;
	struct ml_graph *model = from_text(mlp_text);
	struct ml_graph *g = step_of(model, NULL), *plain = step_of(model, NULL);

	/* a world of one without force: nothing changes */
	ml_dist_opts_init(&o);
	ok(o.bucket_mb == 25 && !o.force, "ml_dist_opts_init: 25 MiB buckets, no force");
	int nn = g != NULL ? g->n_nodes : -1;
	int rc = g != NULL ? ml_train_distribute(g, &o, &e) : -99;
	ok(rc == 0 && g->n_nodes == nn && count_op(g, ML_OP_ALLREDUCE_START) == 0,
	   "on one process without force the step graph is left as it is");

	/* all gradients in one bucket */
	o.force = true;
	rc = g != NULL ? ml_train_distribute(g, &o, &e) : -99;
	if (rc < 0)
		printf("# %s\n", e.msg);
	ok(rc == 1 && count_op(g, ML_OP_ALLREDUCE_START) == 1 &&
	   count_op(g, ML_OP_ALLREDUCE_WAIT) == 1 && g->n_nodes == nn + 2,
	   "25 MiB: the MLP's six gradients go in one bucket (one start, one wait)");
	int n_upd = 0;
	ok(rc == 1 && updates_read_averages(g, &n_upd) && n_upd == 6,
	   "every SGD update reads the averaged gradient");
	ok(rc == 1 && placement_ok(g), "the start follows the last gradient, the wait precedes its first reader");
	int si = -1, wi = -1, first_upd = -1, last_bwd = -1;
	for (int i = 0; g != NULL && i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (n->op == ML_OP_ALLREDUCE_START)
			si = i;
		if (n->op == ML_OP_ALLREDUCE_WAIT)
			wi = i;
		if (n->op == ML_OP_SGD_UPDATE && first_upd < 0)
			first_upd = i;
		if (strncmp(n->name, "backward/", 9) == 0 && n->op != ML_OP_ALLREDUCE_START)
			last_bwd = i;
	}
	printf("# start at node %d, last backward node %d, wait %d, first update %d\n", si, last_bwd,
	       wi, first_upd);
	ok(si >= 0 && wi > si && first_upd > wi,
	   "one bucket: the wait comes after the start and before the first update");
	rc = g != NULL ? ml_train_distribute(g, &o, &e) : -99;
	ok(rc == ML_EINVAL && strstr(e.msg, "distributed already") != NULL,
	   "a graph distributed already is refused with ML_EINVAL");

	/* one process, forced: training equals the plain step graph, bit for bit */
	int np = 0;
	bool same = g != NULL && plain != NULL && train(g, 5, false, 7) == 0 &&
		    train(plain, 5, false, 7) == 0 && same_params(g, plain, &np);
	ok(same && np >= 6, "5 SGD steps of the distributed graph on one process equal the plain graph's");
	struct ml_dist_stats st;
	ml_dist_stats(&st);
	printf("# steps %lld buckets %lld comm %g wait %g\n", (long long)st.steps,
	       (long long)st.buckets, st.comm_s, st.wait_s);
	ok(st.steps == 5 && st.comm_s == 0 && st.wait_s == 0,
	   "ml_dist_stats counts the steps; no communication on one process");

	/* the graph file keeps the ops and attributes */
	uint8_t *buf = NULL;
	size_t len = 0;
	struct ml_graph *back = NULL;
	rc = g != NULL ? ml_mlg_encode(g, &buf, &len, &e) : -99;
	if (rc == 0)
		rc = ml_mlg_decode(&back, buf, len, &e);
	if (rc == 0)
		rc = ml_graph_toposort(back, &e) < 0 || ml_graph_validate(back, &e) < 0 ||
		     ml_graph_infer(back, &e) < 0;
	ok(rc == 0 && count_op(back, ML_OP_ALLREDUCE_WAIT) == 1 && train(back, 2, false, 9) == 0 &&
	   train(g, 2, false, 9) == 0 && same_params(back, g, &np),
	   "a distributed step graph round-trips through the graph file and trains alike");
	ml_free(buf);
	ml_graph_free(back);
	ml_graph_free(g);
	ml_graph_free(plain);

	/* bucket_mb 0: a bucket per gradient, started in the order backward makes them */
	g = step_of(model, NULL);
	o.bucket_mb = 0;
	rc = g != NULL ? ml_train_distribute(g, &o, &e) : -99;
	ok(rc == 6 && count_op(g, ML_OP_ALLREDUCE_START) == 6 && placement_ok(g) &&
	   updates_read_averages(g, &n_upd),
	   "bucket size 0: one bucket per gradient, each started right after its gradient");
	/* the output layer's gradients come first */
	int first_start = -1;
	for (int i = 0; g != NULL && i < g->n_nodes; i++)
		if (g->nodes[i].op == ML_OP_ALLREDUCE_START) {
			first_start = i;
			break;
		}
	const char *fn = first_start >= 0 ? g->tensors[g->nodes[first_start].in[0]]->name : "";
	printf("# first bucket: %s\n", fn);
	ok(first_start >= 0 && strstr(fn, "dense3") != NULL &&
	   ml_attr_int(&g->nodes[first_start], "first", 0) == 1,
	   "the first bucket holds a gradient of the last layer and is marked first");
	bool inter = false;
	for (int i = 0, seen_start = 0; g != NULL && i < g->n_nodes; i++) {
		if (g->nodes[i].op == ML_OP_ALLREDUCE_START)
			seen_start = 1;
		else if (seen_start && strncmp(g->nodes[i].name, "backward/", 9) == 0)
			inter = true;
	}
	ok(inter, "starts are interleaved with the backward pass (communication overlaps it)");
	ml_graph_free(g);

	/*
	 * A bucket between: dense3 (8x3 + 3 floats) and dense2 (16x8 + 8) and
	 * dense1 (4x16 + 16): 600 bytes close a bucket after the weights of
	 * dense3 and its bias and dense2's bias... count the buckets only.
	 */
	g = step_of(model, NULL);
	o.bucket_mb = 600.0 / 1048576.0;
	rc = g != NULL ? ml_train_distribute(g, &o, &e) : -99;
	ok(rc > 1 && rc < 6 && placement_ok(g) && updates_read_averages(g, &n_upd),
	   "a 600-byte bucket cap gives between one and six buckets");
	printf("# %d buckets of 600 bytes\n", rc);
	ml_graph_free(g);

	g = step_of(model, NULL);
	o.bucket_mb = -1;
	rc = g != NULL ? ml_train_distribute(g, &o, &e) : -99;
	ok(rc == ML_EINVAL, "a negative bucket size is refused with ML_EINVAL");
	ml_graph_free(g);

	/* clipping reads the averages too, and Adam trains alike */
	struct ml_train_opts to;
	ml_train_opts_init(&to);
	to.clip_norm = 0.5;
	to.optimizer = ML_OPTIM_ADAM;
	g = step_of(model, &to);
	plain = step_of(model, &to);
	o.bucket_mb = 25;
	rc = g != NULL ? ml_train_distribute(g, &o, &e) : -99;
	bool clip_ok = rc == 1;
	for (int i = 0; clip_ok && i < g->n_nodes; i++)
		if (g->nodes[i].op == ML_OP_REDUCE_SUM_SQUARE)
			clip_ok = is_wait_out(g, g->nodes[i].in[0]);
	ok(clip_ok && updates_read_averages(g, &n_upd) && n_upd == 6,
	   "with clipping, the norm and the Adam updates read the averaged gradients");
	ok(clip_ok && train(g, 4, false, 3) == 0 && train(plain, 4, false, 3) == 0 &&
	   same_params(g, plain, &np), "Adam with clipping: distributed on one process equals plain");
	ml_graph_free(g);
	ml_graph_free(plain);
	ml_graph_free(model);

	/* BatchNorm: the batch statistics are averaged too, the running ones stay alike */
	model = from_text(cnn_text);
	g = step_of(model, NULL);
	plain = step_of(model, NULL);
	rc = g != NULL ? ml_train_distribute(g, &o, &e) : -99;
	int n_ema = count_op(g, ML_OP_EMA_UPDATE);
	ok(rc >= 1 && updates_read_averages(g, &n_upd) && n_ema == 2 && n_upd == 2 + 6,
	   "BatchNorm: the batch mean and variance that EmaUpdate folds in are reduced too");
	ok(rc >= 1 && placement_ok(g), "BatchNorm: starts and waits are placed right");
	ok(rc >= 1 && train(g, 3, true, 5) == 0 && train(plain, 3, true, 5) == 0 &&
	   same_params(g, plain, &np), "a CNN with BatchNorm: distributed on one process equals plain");
	ml_graph_free(g);
	ml_graph_free(plain);
	ml_graph_free(model);

	/* a plain inference graph has nothing to reduce */
	model = from_text(mlp_text);
	rc = model != NULL ? ml_train_distribute(model, &o, &e) : -99;
	ok(rc == 0 && count_op(model, ML_OP_ALLREDUCE_START) == 0,
	   "an inference graph has no gradients: 0 buckets, unchanged");
	ml_graph_free(model);
}

static void
test_shard(void)
{
	bool good = true;
	for (int size = 1; size <= 7; size++)
		for (int64_t n = 0; n <= 40; n++) {
			int64_t prev = 0;
			for (int r = 0; r < size; r++) {
				int64_t lo, hi;
				ml_dist_shard(n, r, size, &lo, &hi);
				good &= lo == prev && hi >= lo && hi - lo <= n / size + 1 &&
					hi - lo >= n / size;
				prev = hi;
			}
			good &= prev == n;
		}
	ok(good, "ml_dist_shard: contiguous slices that cover the batch, sizes within one");
	int64_t lo, hi;
	ml_dist_shard(10, 1, 4, &lo, &hi);
	ok(lo == 2 && hi == 5, "ml_dist_shard(10, rank 1 of 4) is [2, 5)");
	struct ml_tval x = { 0 }, v;
	struct ml_err e = { 0 };
	int64_t d[2] = { 6, 3 };
	double w = 0;
	ml_tval_alloc(&x, ML_F32, 2, d, &e);
	ml_dist_shard_batch(&x, &v, &w);
	ok(v.data == x.data && v.dims[0] == 6 && !v.owned && w == 1,
	   "ml_dist_shard_batch on one process: the whole batch, borrowed, weight 1");
	ml_tval_clear(&x);
}

/* max_param_diff: the largest |a - b| over the float PARAMs of a and b (INFINITY: unlike graphs). */
static double
max_param_diff(const struct ml_graph *a, const struct ml_graph *b)
{
	double md = 0;
	for (int t = 0; t < a->n_tensors; t++) {
		const struct ml_tensor *x = a->tensors[t];
		if (x->kind != ML_TK_PARAM || x->data == NULL || x->dtype != ML_F32)
			continue;
		int u = ml_graph_find(b, x->name);
		if (u < 0 || b->tensors[u]->nbytes != x->nbytes)
			return INFINITY;
		const float *p = x->data, *q = b->tensors[u]->data;
		for (size_t i = 0; i < x->nbytes / 4; i++)
			md = fmax(md, fabs((double)p[i] - q[i]));
	}
	return md;
}

/* sum16_ref: the sum of two 16-bit values of type t through the library's scalar conversions. */
static uint16_t
sum16_ref(enum ml_dtype t, uint16_t a, uint16_t b)
{
	if (t == ML_BF16)
		return ml_f32_to_bf16(ml_bf16_to_f32(a) + ml_bf16_to_f32(b));
	return ml_f32_to_f16(ml_f16_to_f32(a) + ml_f16_to_f32(b));
}

static bool
is_nan16(enum ml_dtype t, uint16_t h)
{
	return t == ML_BF16 ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00;
}

/*
 * test_wire: gradients sent as bf16 or fp16: the names, the reduction op
 * (float32 sum rounded to nearest even; the F16C path against the
 * portable one), and a forced 16-bit step graph on one process, whose
 * values make the round trip: close to float32, but not equal.
 */
static void
test_wire(void)
{
	struct ml_err e = { 0 };
	enum ml_dtype dt = ML_UNDEF;
	ok(ml_dist_wire_parse("bf16", &dt, &e) == 0 && dt == ML_BF16 &&
	   ml_dist_wire_parse("fp16", &dt, &e) == 0 && dt == ML_F16 &&
	   ml_dist_wire_parse("f32", &dt, &e) == 0 && dt == ML_F32 &&
	   strcmp(ml_dist_wire_name(ML_F16), "fp16") == 0 &&
	   strcmp(ml_dist_wire_name(ML_BF16), "bf16") == 0,
	   "ml_dist_wire_parse and ml_dist_wire_name: f32, bf16, fp16");
	ok(ml_dist_wire_parse("f16", &dt, &e) == ML_EINVAL &&
	   strstr(e.msg, "(f32, bf16, fp16)") != NULL && ml_dist_wire_parse("", &dt, &e) == ML_EINVAL,
	   "another name is ML_EINVAL, with the names allowed");

	/* ties to even: 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7 */
	uint16_t in[3] = { 0x3b80, 0x3b80, 0x7f7f }, io[3] = { 0x3f80, 0x3f81, 0x7f7f };
	ml_dist_sum16(ML_BF16, in, io, 3);
	ok(io[0] == 0x3f80 && io[1] == 0x3f82 && io[2] == 0x7f80,
	   "bf16 sums round to nearest even (1 + 2^-8 -> 1, (1 + 2^-7) + 2^-8 -> 1 + 2^-6), "
	   "overflow to inf");
	/* 2^-11, 2^-11, 65504; nine values, so the F16C path's eight go through it too */
	uint16_t hin[9] = { 0x1000, 0x1000, 0x7bff, 0, 0, 0, 0, 0, 0x1000 };
	uint16_t hio[9] = { 0x3c00, 0x3c01, 0x7bff, 0, 0, 0, 0, 0, 0x3c01 };
	ml_dist_sum16(ML_F16, hin, hio, 9);
	ok(hio[0] == 0x3c00 && hio[1] == 0x3c02 && hio[2] == 0x7c00 && hio[8] == 0x3c02,
	   "fp16 sums round to nearest even (1 + 2^-11 -> 1, (1 + 2^-10) + 2^-11 -> 1 + 2^-9), "
	   "65504 + 65504 overflows to inf");

	/* 100000 random pairs (normals, subnormals, infs, NaNs) against the scalar reference */
	enum { NR = 100003 };	/* odd: the vector loops leave a tail */
	uint16_t *a = malloc(NR * 2), *b = malloc(NR * 2), *c = malloc(NR * 2);
	for (int k = 0; k < 2; k++) {
		enum ml_dtype t = k == 0 ? ML_BF16 : ML_F16;
		int bad = 0;
		for (int i = 0; i < NR; i++) {
			a[i] = (uint16_t)(urand() * 65536);
			b[i] = (uint16_t)(urand() * 65536);
			if (i % 7 == 0)	/* close magnitudes: carries and cancellations */
				b[i] = (uint16_t)((a[i] & 0xff00) | (b[i] & 0xff)) ^ (i % 14 ? 0x8000 : 0);
		}
		memcpy(c, b, NR * 2);
		ml_dist_sum16(t, a, c, NR);
		for (int i = 0; i < NR; i++) {
			uint16_t r = sum16_ref(t, a[i], b[i]);
			if (is_nan16(t, r) ? !is_nan16(t, c[i]) : r != c[i]) {
				if (bad++ < 3)
					printf("# %s: %04x + %04x = %04x, expected %04x\n",
					       ml_dtype_name(t), a[i], b[i], c[i], r);
			}
		}
		char what[120];
		snprintf(what, sizeof what, "%s: the all-reduce op equals float32 addition rounded "
			 "to nearest even on %d pairs", ml_dist_wire_name(t), NR);
		ok(bad == 0, what);
	}
	free(a);
	free(b);
	free(c);

	/* a forced 16-bit bucket on one process: the round trip */
	struct ml_graph *model = from_text(mlp_text);
	struct ml_dist_opts o;
	ml_dist_opts_init(&o);
	ok(o.wire == ML_F32, "ml_dist_opts_init: gradients cross the wire as f32");
	o.force = true;
	o.wire = ML_I32;
	struct ml_graph *g = step_of(model, NULL);
	ok(g != NULL && ml_train_distribute(g, &o, &e) == ML_EINVAL && strstr(e.msg, "i32") != NULL,
	   "an int32 wire type is refused with ML_EINVAL");
	ml_graph_free(g);
	struct ml_dist_opts zero;
	memset(&zero, 0, sizeof zero);
	zero.force = true;
	g = step_of(model, NULL);
	int zrc = g != NULL ? ml_train_distribute(g, &zero, &e) : -99;
	bool no_wire = zrc >= 1;	/* bucket_mb 0: one bucket per gradient */
	for (int i = 0; no_wire && i < g->n_nodes; i++)
		if (g->nodes[i].op == ML_OP_ALLREDUCE_START)
			no_wire = ml_attr_int(&g->nodes[i], "wire", -1) == -1;
	ok(no_wire, "a zeroed ml_dist_opts (wire ML_UNDEF) sends float32: no wire attribute");
	ml_graph_free(g);
	struct ml_graph *plain = step_of(model, NULL);
	int np = 0;
	bool plain_ok = plain != NULL && train(plain, 5, false, 7) == 0;
	for (int k = 0; k < 2; k++) {
		o.wire = k == 0 ? ML_BF16 : ML_F16;
		const char *wn = ml_dist_wire_name(o.wire);
		char what[160];
		g = step_of(model, NULL);
		int rc = g != NULL ? ml_train_distribute(g, &o, &e) : -99;
		int si = -1;
		for (int i = 0; rc == 1 && i < g->n_nodes; i++)
			if (g->nodes[i].op == ML_OP_ALLREDUCE_START)
				si = i;
		snprintf(what, sizeof what, "%s: the start node says wire=%d", wn, (int)o.wire);
		ok(si >= 0 && ml_attr_int(&g->nodes[si], "wire", 0) == o.wire, what);
		ml_dist_stats_reset();
		bool trained = rc == 1 && train(g, 5, false, 7) == 0;
		double md = trained && plain_ok ? max_param_diff(g, plain) : INFINITY;
		printf("# %s: 5 steps: largest parameter difference from f32 %.3g\n", wn, md);
		snprintf(what, sizeof what, "%s: 5 SGD steps on one process differ from f32 by "
			 "rounding only (0 < diff < 2e-3)", wn);
		ok(trained && !same_params(g, plain, &np) && md > 0 && md < 2e-3, what);

		/* the graph file keeps the wire attribute: the reloaded graph trains alike */
		uint8_t *buf = NULL;
		size_t len = 0;
		struct ml_graph *back = NULL;
		rc = trained ? ml_mlg_encode(g, &buf, &len, &e) : -99;
		if (rc == 0)
			rc = ml_mlg_decode(&back, buf, len, &e);
		if (rc == 0)
			rc = ml_graph_toposort(back, &e) < 0 || ml_graph_validate(back, &e) < 0 ||
			     ml_graph_infer(back, &e) < 0;
		snprintf(what, sizeof what, "%s: a 16-bit step graph round-trips through the graph "
			 "file and trains alike", wn);
		ok(rc == 0 && train(back, 2, false, 9) == 0 && train(g, 2, false, 9) == 0 &&
		   same_params(back, g, &np), what);
		ml_free(buf);
		ml_graph_free(back);
		ml_graph_free(g);
	}
	ml_graph_free(plain);
	ml_graph_free(model);
}

static void
test_runtime(void)
{
	struct ml_err e = { 0 };
	struct ml_dist_info di;
	/* the loader alone, with a library that is not there */
	setenv("ML_MPI_LIB", "/nonexistent/libmpi.so.40", 1);
	int rc = ml_dist_available(&e);
	ok(rc == ML_ENOTSUP && strstr(e.msg, "MPI is not available") != NULL &&
	   ml_exit_status(rc) == 4, "a missing libmpi is ML_ENOTSUP (exit 4) with a clear message");
	printf("# %s\n", e.msg);
	unsetenv("ML_MPI_LIB");
	/* (loading the real libmpi is left to 7500-mpi.bats, outside the sanitizers' view) */
	/* no launcher in the environment: AUTO stays one process */
	unsetenv("OMPI_COMM_WORLD_SIZE");
	unsetenv("PMI_SIZE");
	unsetenv("PMIX_RANK");
	rc = ml_dist_init(ML_DIST_AUTO, &di, &e);
	ok(rc == 0 && !di.active && di.rank == 0 && di.size == 1 && ml_dist_size() == 1,
	   "ml_dist_init(AUTO) without mpirun: one process, rank 0 of 1, MPI not loaded");
	ok(ml_dist_init(99, &di, &e) == 0, "a second ml_dist_init returns the first one's state");
	float f[3] = { 1, 2, 3 };
	rc = ml_dist_allreduce(f, 3, ML_F32, ML_DIST_MEAN, &e);
	ok(rc == 0 && f[0] == 1 && f[2] == 3, "ml_dist_allreduce on one process leaves the values");
	uint8_t u8 = 0;
	ok(ml_dist_allreduce(&u8, 1, ML_U8, ML_DIST_SUM, &e) == ML_ENOTSUP &&
	   ml_dist_allreduce(f, 1, ML_I64, ML_DIST_MEAN, &e) == ML_EINVAL,
	   "ml_dist_allreduce refuses u8 (ENOTSUP) and the mean of integers (EINVAL)");
	ok(ml_dist_bcast(f, sizeof f, 0, &e) == 0 && ml_dist_bcast(f, sizeof f, 1, &e) == ML_EINVAL &&
	   ml_dist_barrier(&e) == 0, "bcast from rank 0 and a barrier are no-ops; rank 1 is refused");
	struct ml_graph *m = from_text(mlp_text);
	double md = -1;
	ok(m != NULL && ml_dist_bcast_params(m, 0, &e) == 0 &&
	   ml_dist_param_divergence(m, 0, &md, &e) == 0 && md == 0,
	   "ml_dist_bcast_params and the divergence check on one process");
	ml_graph_free(m);
	ok(ml_dist_finalize(&e) == 0, "ml_dist_finalize without MPI is a no-op");
}

int
main(void)
{
	ml_set_threads(1);
	test_rewrite();
	test_shard();
	test_wire();
	test_runtime();
	printf("1..%d\n", ntest);
	return nfail != 0;
}
