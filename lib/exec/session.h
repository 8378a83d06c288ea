/*
 * session.h: the executor's session, shared by session.c (planning, the
 * CPU run) and device.c (placement and the run over several devices).
 * Internal to lib/exec.
 */
#ifndef ML_EXEC_SESSION_H
#define ML_EXEC_SESSION_H

#include "ml_impl.h"

struct ml_hx;

#define ALIGN 64

struct ml_session {
	struct ml_graph *g;
	struct ml_session *parent;	/* for subgraph sessions: the enclosing one */
	bool *outer;		/* per tensor: resolved from the parent at each run */
	struct ml_session_opts o;
	struct ml_tval *vals;	/* runtime value per tensor */
	bool *bound;		/* per tensor: input bound by the caller */
	int *last_use;		/* per tensor: last node index reading it */
	int64_t *slot_off;	/* per tensor: arena offset, -1 none */
	int64_t *slot_len;
	uint8_t *arena;
	int64_t *room_off, *room_len;	/* per node: the arena's largest gap while it runs */
	int64_t arena_bytes;	/* -1 when the last plan could not be made */
	int64_t plan_key[64];	/* input dims the plan was made for */
	int plan_key_n;
	bool planned;
	double *node_time;
	int64_t *node_flops, *node_bytes;	/* with opts.profile: from the run's shapes */
	double *node_start;	/* with opts.profile: ml_now() as each node began */
	struct ml_tval *prof_val;	/* with opts.profile: per tensor, last run's shape (no data) */
	bool check_shapes;
	struct ml_err *err_sink;	/* the error struct of the run in progress */	/* ML_CHECK_SHAPES=1: compare results with static inference */
	struct ml_tval **in, **out;
	int max_io;
	struct ml_hx *hx;	/* devices other than the CPU (device.c); NULL: all on the CPU */
};

/* device.c: the session's devices. */
int ml_hx_new(struct ml_session *s, struct ml_err *e);
void ml_hx_free(struct ml_session *s);
/* ml_hx_active: whether a run goes through ml_hx_run (some node is off the CPU). */
bool ml_hx_active(const struct ml_session *s);
/* ml_hx_run: run the planned graph over the session's devices. */
int ml_hx_run(struct ml_session *s, struct ml_err *e);
/*
 * ml_session_run_node: run node i of the planned graph: check inputs, infer
 * and place outputs (arena or heap), then kern(arg, c), or the CPU kernel
 * when kern is NULL; record the profile; release heap values after their
 * last reader.
 */
int ml_session_run_node(struct ml_session *s, int i, int (*kern)(void *arg, struct ml_opctx *c),
			void *arg, struct ml_err *e);
/* ml_session_check_static: session.c's check_static, for device.c. */
int ml_session_check_static(struct ml_session *s, const struct ml_node *n);

#endif
