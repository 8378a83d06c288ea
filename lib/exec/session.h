/*
 * session.h: the executor's session and its devices, shared by the files
 * of lib/exec (session.c, plan.c, run.c, devices.c, place.c, calib.c,
 * plan_io.c). Internal to lib/exec.
 */
#ifndef ML_EXEC_SESSION_H
#define ML_EXEC_SESSION_H

#include "ml_impl.h"

struct ml_hx;


struct ml_session {
	struct ml_graph *g;
	struct ml_session *parent;	/* for subgraph sessions: the enclosing one */
	bool *outer;		/* per tensor: resolved from the parent at each run */
	struct ml_session_opts o;
	struct ml_tval *vals;	/* runtime value per tensor */
	bool *bound;		/* per tensor: input bound by the caller */
	int *last_use;		/* per tensor: last node index reading it */
	bool *is_act;		/* per tensor: an activation (g's kind, without the pointer) */
	int64_t *slot_off;	/* per tensor: arena offset, -1 none */
	int64_t *slot_len;
	uint8_t *arena;
	int64_t *room_off, *room_len;	/* per node: the arena's largest gap while it runs */
	int64_t arena_bytes;	/* -1 when the last plan could not be made */
	/*
	 * The plan's key: the dtype and dims of every bound tensor (the
	 * inputs, and a body's enclosing values) the plan was made for; a
	 * run whose bound shapes differ plans again.
	 */
	int *free_t;		/* the tensors a run may bind: inputs, names from enclosing scopes */
	int n_free;
	int64_t *plan_key;
	int plan_key_n, plan_key_cap;
	bool planned;
	/*
	 * The shapes inferred with the plan, once per key (not per run):
	 * shp[t] is tensor t's dtype and shape (no data) from the bound
	 * shapes and the graph's constants, never from a value given at run
	 * time; known[i] says every output of node i is known there, so the
	 * executor takes them from shp[] instead of inferring node i again.
	 */
	struct ml_tval *shp;
	int64_t *shp_bytes;	/* per tensor: the size of shp[t] in bytes, -1 unknown */
	bool *known;
	double *node_time;
	int64_t *node_flops, *node_bytes;	/* with opts.profile: from the run's shapes */
	double *node_start;	/* with opts.profile: ml_now() as each node began */
	struct ml_tval *prof_val;	/* with opts.profile: per tensor, last run's shape (no data) */
	bool check_shapes;	/* ML_CHECK_SHAPES=1: compare results with static inference */
	struct ml_err *err_sink;	/* the error struct of the run in progress */
	struct ml_tval **in, **out;
	int max_io;
	void **node_cache;	/* per node: the CPU kernel's cache (ml_opctx.cache) */
	int64_t opset;		/* the graph's ONNX opset (ml_opctx.opset), looked up once */
	struct ml_hx *hx;	/* devices other than the CPU (device.c); NULL: all on the CPU */
};

/*
 * The session's devices (DESIGN.md "Runtime and heterogeneous execution").
 * Device 0 is the CPU, whose buffers are the session's own host values;
 * device dev_index (N + 1 for cl:N) is the one other device a session may
 * open. Each tensor is valid on the host, on the device or both (loc);
 * copies are made where a reader on the other side needs one. PARAM and
 * CONST tensors stay resident in device memory across runs.
 *
 * The jobs are split by file: devices.c (discovery, opening), place.c
 * (placement: the cost model's prediction, auto, an edited plan),
 * calib.c (measuring the cost model), run.c (the one executor),
 * plan_io.c (the placement as text and JSON), plan.c (memory).
 */
#define ON_HOST 1
#define ON_DEV 2

struct ml_hx {
	const struct ml_devops *ops;
	void *dev;		/* the opened OpenCL device, NULL when none */
	int dev_index;		/* its device index (N + 1) */
	bool is_auto;
	bool active;		/* some node runs on the device */
	bool failed;		/* the device failed: the session is on the CPU now */
	int *node_dev;		/* per node: 0 cpu, dev_index */
	bool *node_ok;		/* per node: the device has a kernel for it */
	double *cost_cpu, *cost_dev;	/* per node: predicted microseconds */
	void **buf;		/* per tensor: device buffer or NULL */
	uint8_t *loc;		/* per tensor: ON_HOST | ON_DEV */
	bool *dirty;		/* per PARAM/CONST tensor: the device copy is newer */
	bool *done;		/* per node: has run in the run in progress */
	void **evset;		/* per node, profiling: its device commands (ops->take) */
	struct ml_transfer *xfers;
	int n_xfers, cap_xfers;
	char note[512];
	char how[160];		/* how auto chose its plan (measured, predicted) */
	double t_probe;
	double bw_ns_per_byte, xfer_us;	/* transfer cost model */
};

/* is_stored: whether tensor t of g is a PARAM or CONST (resident on a device) */
static inline bool
ml_is_stored(const struct ml_graph *g, int t)
{
	return g->tensors[t]->kind == ML_TK_CONST || g->tensors[t]->kind == ML_TK_PARAM;
}

/* ml_tensor_bytes: the static size of tensor t of g; 0 when not known */
static inline int64_t
ml_tensor_bytes(const struct ml_graph *g, int t)
{
	struct ml_tval v;
	ml_graph_tval(g, t, &v);
	int64_t nb = ml_tval_nbytes(&v);
	return nb > 0 ? nb : 0;
}

/* devices.c */
/*
 * ml_hx_open: open the OpenCL device named by dev ("cl", "cl:N", "auto":
 * cl:0) into s->hx (ops, dev, dev_index, t_probe). ML_EINVAL for a name
 * that is none of these, ML_ENODEV (or the probe's code) when absent.
 */
int ml_hx_open(struct ml_session *s, const char *dev, struct ml_err *e);

/* place.c */
/*
 * ml_hx_arrays: allocate hx's per-node and per-tensor arrays for g, zeroed
 * (ml_hx_free frees them, also after a failure here). ML_ENOMEM.
 */
int ml_hx_arrays(struct ml_hx *hx, const struct ml_graph *g, struct ml_err *e);
/* ml_hx_new: the session's devices and placement (s->o.device not "cpu"). */
int ml_hx_new(struct ml_session *s, struct ml_err *e);
void ml_hx_free(struct ml_session *s);
/* ml_hx_active: whether some node of s runs off the CPU. */
bool ml_hx_active(const struct ml_session *s);
/* ml_hx_prepare: build what the device's nodes need (programs). */
int ml_hx_prepare(struct ml_session *s, struct ml_err *e);
/* ml_hx_release: drop every device buffer of s's nt tensors. */
void ml_hx_release(struct ml_hx *hx, int nt);
/* ml_hx_fall_back: every node on the CPU from now on, and the note says why. */
void ml_hx_fall_back(struct ml_session *s, const char *why);
/*
 * ml_hx_predicted: the predicted microseconds of placement nd[] (nodes and
 * copies); the bytes copied in *xfer_bytes when not NULL.
 */
double ml_hx_predicted(const struct ml_session *s, const int *nd, double *xfer_bytes);

/* calib.c */
struct ml_costmodel;
/*
 * ml_hx_calibrate: measure the per-op costs s's graph needs and cm lacks
 * by running it on the CPU and on the device (devname, the model's key)
 * with profiling; adds rows to cm. 0 also when nothing could be measured.
 */
int ml_hx_calibrate(struct ml_session *s, struct ml_costmodel *cm, const char *devname,
		    struct ml_err *e);

/*
 * ml_hx_measure: the wall time (seconds, the best of 2 runs after a first)
 * of s's graph under each of n placements cand[k] (per node: 0 the CPU,
 * else s's device), on random inputs of the graph's static shapes, in a
 * session of its own; wall[k] -1 where the placement fails or the inputs
 * have no static shape. ML_ENOMEM.
 */
int ml_hx_measure(struct ml_session *s, int *const *cand, int n, double *wall, struct ml_err *e);

/* run.c: the executor */
/*
 * ml_exec_run: run the planned graph of s: every node on its device (the
 * CPU's kernels over the arena, the device's over its buffers), the copies
 * between them, device nodes enqueued ahead of CPU ones where they depend
 * on nothing pending; waits for the device once, at the end.
 */
int ml_exec_run(struct ml_session *s, struct ml_err *e);
/* ml_hx_settle: wait for the profiled device commands of the last run; record their times. */
void ml_hx_settle(struct ml_session *s, bool record);

/* plan.c: memory */
/*
 * ml_session_plan: when the bound input shapes differ from the last plan's,
 * plan the arena again (liveness, best fit, in place where an elementwise
 * node may write over its dying first input).
 */
int ml_session_plan(struct ml_session *s, struct ml_err *e);

/* session.c */
/* ml_session_check_static: with ML_CHECK_SHAPES=1, node n's results against static inference. */
int ml_session_check_static(struct ml_session *s, const struct ml_node *n);
/*
 * ml_session_reset_values: drop every value a run made and give each
 * unbound PARAM/CONST tensor its graph value, as a run starts.
 */
void ml_session_reset_values(struct ml_session *s);

#endif
