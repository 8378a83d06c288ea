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

/*
 * Input shapes (lib/opt/inshape.c), the --shape NAME=DIMS of every tool.
 * struct ml_shape_arg: one input's new shape: a size per dim, or -1 with
 * the dim's symbolic name in sym[d]. name and sym[] are malloc'd.
 */
struct ml_shape_arg {
	char *name;
	int rank;
	int64_t dims[ML_MAX_RANK];
	char *sym[ML_MAX_RANK];
};

/*
 * ml_shape_arg_parse: read "NAME=D1xD2x..." (or "NAME=D1,D2,...", for
 * names that hold an 'x') into out: a dim is a size from 1 to 2^31-1 or
 * a name ([A-Za-z_][A-Za-z0-9_]*), which makes it symbolic. NAME is what
 * precedes the last '='. ML_EINVAL with the reason for anything else (no
 * '=', an empty, zero, negative or malformed dim, more than ML_MAX_RANK
 * dims); out is then empty. Release with ml_shape_arg_clear (NULL and an
 * empty arg are no-ops).
 */
int ml_shape_arg_parse(struct ml_shape_arg *out, const char *s, struct ml_err *e);
void ml_shape_arg_clear(struct ml_shape_arg *a);

/*
 * ml_graph_set_input_shapes: give the inputs named in a[0..n-1] their new
 * shapes and infer every activation of g again (g as ml_model_load leaves
 * it). Reshape nodes whose constant target holds sizes that changed (a
 * batch-1 export's [1, 512], [12, 4, 16] for seq x batch*heads x dim) get
 * a target that holds for the new sizes, -1 (or 0, a copy of the input's
 * dim) at the dim that carries the change, so that symbolic sizes work as
 * well; *rewritten (may be NULL) counts them. An Expand whose target,
 * made of constants, holds an old size that a consumer needs to grow,
 * broadcast from a 1 (a ViT's class token), gets the new size when it is
 * a number. A symbolic input dim names
 * the activation dims that are exactly it.
 *
 * ML_EINVAL, with g unchanged: an input the model lacks (the message lists
 * its inputs), a rank other than the input's, an input given twice.
 * ML_ENOTSUP, with g unchanged: a node the new sizes do not fit (a shape
 * constant that cannot be traced, an Expand to a symbolic size, a Tile, an
 * output rank that depends on the size), named in the message, with the
 * input that keeps an old size where one does (a constant made at the
 * export's batch, an Expand to a shape made of constants). Other
 * failures (ML_ENOMEM) may leave g half changed; it can still be freed.
 * Subgraphs (If, Loop bodies) are left as they are. Not thread-safe for
 * one g.
 */
int ml_graph_set_input_shapes(struct ml_graph *g, const struct ml_shape_arg *a, int n,
			      int *rewritten, struct ml_err *e);

#endif
