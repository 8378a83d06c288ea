/*
 * test_pipeline.c: pipeline parallelism of the library (ml_pipeline_*)
 * against one session of the same step graph: the losses and the weights
 * after a few steps agree up to rounding (2 stages on the CPU, and cpu +
 * cl:0 where an OpenCL device exists); GPipe and 1F1B agree bit for bit
 * (3 stages, more micro-batches than stages, so 1F1B reuses its rows); a
 * batch the micro-batches do not divide; the trace; and what
 * ml_pipeline_new refuses. Prints TAP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

static const char *model_text =
	"<ir_version: 8, opset_import: [\"\" : 17], seed: 3>\n"
	"mlp (float[N,6] x) => (float[N,3] y)\n"
	"{\n    dense(units=16, act=relu)\n    dense(units=8, act=relu)\n    dense(units=3)\n}\n";

/* step: a fresh step graph of the model (SGD, momentum), or NULL. */
static struct ml_graph *
step(int accumulate)
{
	struct ml_err e = { 0 };
	struct ml_graph *m = NULL, *s = NULL;
	struct ml_train_opts o;
	ml_train_opts_init(&o);
	o.momentum = 0.9;
	o.accuracy = true;
	o.accumulate = accumulate;
	if (ml_text_decode(&m, model_text, strlen(model_text), "t.mlt", &e) < 0 ||
	    ml_graph_toposort(m, &e) < 0 || ml_graph_infer(m, &e) < 0 ||
	    ml_train_step_graph(&s, m, &o, &e) < 0)
		printf("# step: %s\n", e.msg);
	ml_graph_free(m);
	return s;
}

/* batch: n samples of x and their labels, the k-th batch (deterministic). */
static void
batch(int64_t n, int k, struct ml_tval *x, struct ml_tval *y)
{
	struct ml_err e = { 0 };
	int64_t xd[2] = { n, 6 }, yd[1] = { n };
	ml_tval_alloc(x, ML_F32, 2, xd, &e);
	ml_tval_alloc(y, ML_I64, 1, yd, &e);
	uint64_t s = (uint64_t)k * 0x9e3779b97f4a7c15ull + 12345;
	for (int64_t i = 0; i < n; i++) {
		float *r = (float *)x->data + i * 6;
		for (int j = 0; j < 6; j++) {
			s ^= s << 13, s ^= s >> 7, s ^= s << 17;
			r[j] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
		}
		((int64_t *)y->data)[i] = r[0] + r[1] > r[2] ? 0 : r[3] > r[4] ? 1 : 2;
	}
}

/* one_device: the step's losses over steps batches of n, by one session on the CPU. */
static int
one_device(struct ml_graph *g, int steps, int64_t n, double *loss)
{
	struct ml_err e = { 0 };
	struct ml_session *s = NULL;
	struct ml_tval lr = { 0 };
	int rc = ml_session_new(&s, g, NULL, &e);
	if (rc == 0)
		rc = ml_tval_alloc(&lr, ML_F32, 0, NULL, &e);
	for (int k = 0; rc == 0 && k < steps; k++) {
		struct ml_tval x = { 0 }, y = { 0 };
		batch(n, k, &x, &y);
		*(float *)lr.data = 0.05f;
		if ((rc = ml_session_set_input(s, "x", &x, &e)) == 0 &&
		    (rc = ml_session_set_input(s, "label", &y, &e)) == 0 &&
		    (rc = ml_session_set_input(s, "lr", &lr, &e)) == 0 &&
		    (rc = ml_session_run(s, &e)) == 0)
			loss[k] = ml_get_f64(ml_session_output(s, 0)->data, ML_F32, 0);
		ml_tval_clear(&x);
		ml_tval_clear(&y);
	}
	if (rc < 0)
		printf("# one device: %s\n", e.msg);
	ml_tval_clear(&lr);
	ml_session_free(s);
	return rc;
}

/* piped: the same through a pipeline of opts; its losses. */
static int
piped(struct ml_graph *g, const struct ml_pipeline_opts *po, int steps, int64_t n, double *loss,
      struct ml_pipeline **keep)
{
	struct ml_err e = { 0 };
	struct ml_pipeline *p = NULL;
	int rc = ml_pipeline_new(&p, g, po, &e);
	for (int k = 0; rc == 0 && k < steps; k++) {
		struct ml_tval x = { 0 }, y = { 0 };
		double hits = -1;
		batch(n, k, &x, &y);
		rc = ml_pipeline_run(p, "x", &x, &y, 0.05, &loss[k], &hits, &e);
		if (rc == 0 && !(hits >= 0 && hits <= (double)n))
			rc = ml_fail(&e, ML_EINVAL, "hits %g of %lld", hits, (long long)n);
		ml_tval_clear(&x);
		ml_tval_clear(&y);
	}
	if (rc == 0)
		rc = ml_pipeline_sync(p, &e);
	if (rc < 0)
		printf("# pipeline: %s\n", e.msg);
	if (keep != NULL && rc == 0)
		*keep = p;
	else
		ml_pipeline_free(p);
	return rc;
}

/* max_rel: the largest relative difference of the stored float tensors of a and b, by name. */
static double
max_rel(const struct ml_graph *a, const struct ml_graph *b)
{
	double worst = 0;
	for (int t = 0; t < a->n_tensors; t++) {
		const struct ml_tensor *x = a->tensors[t];
		int u = ml_graph_find(b, x->name);
		if (x->kind != ML_TK_PARAM || x->dtype != ML_F32 || u < 0)
			continue;
		const struct ml_tensor *y = b->tensors[u];
		if (y->nbytes != x->nbytes)
			return INFINITY;
		double big = 1e-30, d = 0;
		for (size_t i = 0; i < x->nbytes / 4; i++) {
			big = fmax(big, fabs(((const float *)x->data)[i]));
			d = fmax(d, fabs(((const float *)x->data)[i] - ((const float *)y->data)[i]));
		}
		worst = fmax(worst, d / big);
	}
	return worst;
}

static bool
same_params(const struct ml_graph *a, const struct ml_graph *b)
{
	for (int t = 0; t < a->n_tensors; t++) {
		const struct ml_tensor *x = a->tensors[t];
		int u = ml_graph_find(b, x->name);
		if (x->kind != ML_TK_PARAM)
			continue;
		if (u < 0 || b->tensors[u]->nbytes != x->nbytes ||
		    memcmp(b->tensors[u]->data, x->data, x->nbytes) != 0)
			return false;
	}
	return true;
}

static bool
have_cl(void)
{
	struct ml_err e = { 0 };
	struct ml_device_info *v = NULL;
	int n = 0;
	if (ml_devices(&v, &n, &e) < 0)
		return false;
	ml_free(v);
	return n > 1;
}

/* against: pipeline (devices, stages, micro, schedule) vs one device: losses and weights. */
static void
against(const char *const *devs, int ns, int micro, int sched, const char *what)
{
	struct ml_graph *a = step(0), *b = step(0);
	double la[6], lb[6];
	struct ml_pipeline_opts po;
	ml_pipeline_opts_init(&po);
	po.n_stages = ns;
	po.devices = devs;
	po.micro = micro;
	po.schedule = sched;
	bool good = a != NULL && b != NULL && one_device(a, 6, 16, la) == 0 &&
		    piped(b, &po, 6, 16, lb, NULL) == 0;
	double worst = 0;
	for (int k = 0; good && k < 6; k++)
		worst = fmax(worst, fabs(la[k] - lb[k]) / fmax(fabs(la[k]), 1e-30));
	double w = good ? max_rel(a, b) : INFINITY;
	printf("# %s: losses %.7f .. %.7f against %.7f .. %.7f; worst loss %.1e, weights %.1e\n",
	       what, la[0], la[5], lb[0], lb[5], worst, w);
	ok(good && worst < 1e-5 && w < 1e-5 && la[5] < la[0], what);
	ml_graph_free(a);
	ml_graph_free(b);
}

int
main(void)
{
	static const char *const cpu2[] = { "cpu", "cpu" }, *const cpu3[] = { "cpu", "cpu", "cpu" };
	static const char *const mixed[] = { "cpu", "cl:0" }, *const twice[] = { "cl:0", "cl:0" };
	against(cpu2, 2, 4, ML_PIPE_GPIPE, "2 stages on the CPU, GPipe: one device's losses and weights");
	against(cpu3, 3, 8, ML_PIPE_1F1B, "3 stages, 8 micro-batches, 1F1B: the same");
	if (have_cl())
		against(mixed, 2, 4, ML_PIPE_1F1B, "cpu + cl:0: the same");
	else
		printf("ok %d - cpu + cl:0 # SKIP no OpenCL device\n", ++ntest);

	/* GPipe and 1F1B: the same sums in the same order */
	{
		struct ml_graph *a = step(0), *b = step(0);
		double la[6], lb[6];
		struct ml_pipeline_opts po;
		ml_pipeline_opts_init(&po);
		po.n_stages = 3;
		po.devices = cpu3;
		po.micro = 8;
		bool good = a != NULL && b != NULL && piped(a, &po, 6, 16, la, NULL) == 0;
		po.schedule = ML_PIPE_1F1B;
		good = good && piped(b, &po, 6, 16, lb, NULL) == 0;
		ok(good && memcmp(la, lb, sizeof la) == 0 && same_params(a, b),
		   "GPipe and 1F1B agree bit for bit");
		ml_graph_free(a);
		ml_graph_free(b);
	}

	/* a batch of 6 in (at most) 4 micro-batches: 3 of 2 */
	{
		struct ml_graph *a = step(0), *b = step(0);
		double la[2], lb[2];
		struct ml_pipeline_opts po;
		ml_pipeline_opts_init(&po);
		po.n_stages = 2;
		po.devices = cpu2;
		po.micro = 4;
		bool good = a != NULL && b != NULL && one_device(a, 2, 6, la) == 0 &&
			    piped(b, &po, 2, 6, lb, NULL) == 0;
		ok(good && fabs(la[1] - lb[1]) < 1e-5 * fabs(la[1]) && max_rel(a, b) < 1e-5,
		   "a batch that 4 does not divide runs in 3 micro-batches, as one device");
		ml_graph_free(a);
		ml_graph_free(b);
	}

	/* the figures and the trace */
	{
		struct ml_graph *g = step(0);
		struct ml_pipeline *p = NULL;
		double l[3];
		struct ml_pipeline_opts po;
		ml_pipeline_opts_init(&po);
		po.n_stages = 2;
		po.devices = cpu2;
		po.micro = 2;
		bool good = g != NULL && piped(g, &po, 3, 8, l, &p) == 0;
		struct ml_pipeline_stats st;
		struct ml_pipeline_stage_info in0, in1;
		char *buf = NULL;
		size_t len = 0;
		if (good) {
			struct ml_err e = { 0 };
			ml_pipeline_stats(p, &st);
			ml_pipeline_stage(p, 0, &in0);
			ml_pipeline_stage(p, 1, &in1);
			FILE *fp = open_memstream(&buf, &len);
			good = fp != NULL && ml_pipeline_trace(p, fp, &e) == 0;
			if (fp != NULL)
				fclose(fp);
		}
		ok(good && st.batches == 3 && st.bubble >= 0 && st.bubble < 1 &&
		   in0.n_forward + in1.n_forward == 5 && in0.n_forward >= 1 &&
		   strcmp(in1.last, "dense3") == 0 && fabs(in0.work + in1.work - 1) < 1e-9 &&
		   in0.busy_s > 0 && in1.busy_s > 0 && buf != NULL &&
		   strstr(buf, "\"stage 1 (cpu)\"") != NULL && strstr(buf, "\"B1\"") != NULL &&
		   strstr(buf, "\"bubble_fraction\"") != NULL,
		   "stats, stage figures and the trace (a lane per stage)");
		free(buf);
		ml_pipeline_free(p);
		ml_graph_free(g);
	}

	/* what ml_pipeline_new refuses */
	{
		struct ml_err e = { 0 };
		struct ml_graph *g = step(0), *acc = step(2);
		struct ml_pipeline *p = NULL;
		struct ml_pipeline_opts po;
		static const char *const six[] = { "cpu", "cpu", "cpu", "cpu", "cpu", "cpu" };
		static const char *const bad[] = { "cpu", "gpu" };
		ml_pipeline_opts_init(&po);
		po.n_stages = 6;
		po.devices = six;
		ok(g != NULL && ml_pipeline_new(&p, g, &po, &e) == ML_EINVAL && p == NULL &&
		   strstr(e.msg, "6 stages for 5 forward nodes") != NULL, "more stages than nodes");
		po.n_stages = 2;
		po.devices = twice;
		ok(ml_pipeline_new(&p, g, &po, &e) == ML_ENOTSUP && p == NULL,
		   "an OpenCL device for two stages");
		po.devices = bad;
		ok(ml_pipeline_new(&p, g, &po, &e) == ML_EINVAL &&
		   strstr(e.msg, "unknown device 'gpu'") != NULL, "an unknown device");
		po.devices = cpu2;
		ok(acc != NULL && ml_pipeline_new(&p, acc, &po, &e) == ML_ENOTSUP && p == NULL,
		   "a step that accumulates");
		/* the last forward node in stage 0, the rest in stage 1: it reads stage 1 */
		int *of = calloc((size_t)g->n_nodes, sizeof(int));
		int last = -1;
		for (int i = 0; of != NULL && i < g->n_nodes; i++)
			if (strncmp(g->nodes[i].name, "forward/", 8) == 0)
				of[last = i] = 1;
		if (last >= 0)
			of[last] = 0;
		po.stage_of = of;
		ok(of != NULL && ml_pipeline_new(&p, g, &po, &e) == ML_EINVAL &&
		   strstr(e.msg, "a stage's forward reads only earlier stages") != NULL,
		   "a forward node reading a later stage");
		free(of);
		ml_graph_free(g);
		ml_graph_free(acc);
	}
	printf("1..%d\n", ntest);
	return nfail != 0;
}
