/*
 * ml_opt.h: graph passes (lib/opt): the pass manager and its passes.
 * Included by ml.h. Owner: mlopt (issue 7).
 *
 * A pass rewrites a graph in place and leaves it valid: toposorted, every
 * activation's shape inferred, no tensor left that nothing uses. The pass
 * manager runs a pipeline (a level's passes, or a list) over and over until
 * a round changes nothing, so optimising an optimised graph changes nothing,
 * and every pass is deterministic: the same graph gives the same bytes.
 *
 *	struct ml_opt_opts o = { .level = 2 };
 *	struct ml_opt_report r = { 0 };
 *	if (ml_opt_run(g, &o, &r, &err) < 0) ...
 *	ml_opt_report_free(&r);
 *
 * Fused nodes (ops of domain "ml": FusedConv, FusedGemm, FusedMatMul,
 * LayerNormalization, FusedElementwise) carry a STRINGS attribute
 * "fused_from" listing the nodes they replace as "NAME:OP_TYPE", in graph
 * order, so a profiler can attribute the fused node's time to them. A node
 * fused again keeps the list of what it came from.
 */
#ifndef ML_OPT_H
#define ML_OPT_H

struct ml_progress;	/* ml_util.h */

/*
 * The registry of passes, in pipeline order. level is the lowest -O level
 * that runs the pass (0: only by --passes).
 */
struct ml_opt_pass_info {
	const char *name;
	int level;
	const char *doc;	/* one line */
};
/* ml_opt_passes: the passes, *n set to their count; static storage. */
const struct ml_opt_pass_info *ml_opt_passes(int *n);

/*
 * The per-pass check of --verify: called after every pass that changed the
 * graph with the pass's name and the graph as it now is (valid, inferred).
 * Return 0 to go on, or a negative ML_E* code (with e filled) to stop:
 * ml_opt_run then returns that code.
 */
typedef int (*ml_opt_check_fn)(void *ctx, struct ml_graph *g, const char *pass, struct ml_err *e);

struct ml_opt_opts {
	int level;		/* 0..3: the passes of that level, when passes is NULL */
	const char *passes;	/* comma-separated list: exactly these, in this order */
	const char *disable;	/* comma-separated list of passes to leave out */
	ml_opt_check_fn check;	/* NULL: no checks */
	void *check_ctx;
	int max_rounds;		/* 0: 8 */
	/*
	 * NULL, or where each pass run is reported (ml_util.h): phase "passes,
	 * round N", a unit a pass of the round (checked ones included), worth
	 * giving when check makes the passes slow.
	 */
	const struct ml_progress *progress;
};

/* One row of the report: one run of one pass. */
struct ml_opt_row {
	char pass[32];
	int round;		/* 1-based */
	int nodes_before, nodes_after;
	int changes;		/* rewrites made (nodes fused, folded, removed, ...) */
	char what[256];		/* "12 Conv+BatchNormalization, 3 Identity" */
	double ms;
};
struct ml_opt_report {
	int n, cap;
	struct ml_opt_row *rows;
	int rounds;
	int nodes_before, nodes_after;
	int64_t arena_bytes;	/* the stored plan, 0 when no plan was made */
};
void ml_opt_report_free(struct ml_opt_report *r);

/*
 * ml_opt_check_names: ML_EINVAL (naming it) when a name in the
 * comma-separated list is no pass; NULL or "" is an empty list.
 */
int ml_opt_check_names(const char *list, struct ml_err *e);

/*
 * ml_opt_run: optimise g in place. g must have passed ml_model_load's
 * checks. r (may be NULL) gets one row per pass run in the first round and
 * per pass that changed something in a later one. Subgraphs (If, Loop
 * bodies) are left as they are. On failure g may be half rewritten but
 * is still a graph ml_graph_free can release.
 */
int ml_opt_run(struct ml_graph *g, const struct ml_opt_opts *o, struct ml_opt_report *r,
	       struct ml_err *e);

#endif
