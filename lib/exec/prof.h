/*
 * prof.h: what the profiler's files (prof.c, prof_out.c, prof_diff.c)
 * share: the profile itself, its statistics, rows of a report, and the
 * small formatting helpers of the text and JSON writers.
 */
#ifndef ML_PROF_H
#define ML_PROF_H

#include "ml_impl.h"

/* struct prof_stat: a summary of n samples, in seconds. */
struct prof_stat {
	double median, mean, sd, min, max, total;
	int64_t n;
};

/*
 * struct ml_prof: samples are runs x nodes, row-major by run: t[r * n + i]
 * is node i's time in run r and st[r * n + i] its start after the run's
 * start. Statistics are made once, when a writer first needs them.
 */
struct ml_prof {
	const struct ml_graph *g;
	char device[32];	/* the device asked for: cpu, cl, cl:N, auto */
	char ran_on[32];	/* where the nodes ran: auto places every node on the CPU for now */
	int n;			/* nodes */
	int64_t cap, runs;
	double *t, *st;
	double *wall, *t0;	/* per run: wall seconds, absolute start */
	double *nsum;		/* per run: the sum of its node times */
	int64_t *flops, *bytes;	/* per node, from the last run */
	struct ml_tensor_mem *mem;	/* per tensor, from the last run */
	int64_t arena_bytes;
	const char **phase;	/* per node: its training phase, NULL none */
	int *dev;		/* per node: the device index it ran on in the last run */
	char (*dev_name)[32];	/* per node: that device's id, "cpu" or "cl:N" */
	struct prof_xfer *xf;	/* the transfers between devices of every run */
	int64_t nxf, cap_xf;
	bool has_phase;
	struct prof_stat *ns;	/* per node */
	struct prof_stat wall_st, sum_st;
	bool ready;
};

/* struct prof_xfer: one copy between devices in run `run` (see ml_session_transfers). */
struct prof_xfer {
	int64_t run;
	struct ml_transfer t;
};

/*
 * struct prof_row: one row of a report: a node, or a group of nodes
 * (by op, prefix or phase), whose median is the sum of its nodes' medians.
 */
struct prof_row {
	char key[160];		/* node name or group name */
	const char *op;		/* the op type, "" for a group of several */
	const char *phase;
	char shape[64];
	int index;		/* node index, -1 for a group */
	int nodes;
	int64_t calls;
	double median, total, share;	/* seconds, and a fraction of all nodes' time */
	int64_t flops, bytes;	/* per call */
	int sort;		/* the sort key, for the comparison */
};

/* mlprof_ready: make the statistics (idempotent); ML_ENOMEM. */
int mlprof_ready(struct ml_prof *p, struct ml_err *e);
/* mlprof_stat_of: the summary of x[0..n-1] (reorders a copy in tmp, n doubles). */
void mlprof_stat_of(const double *x, int64_t n, double *tmp, struct prof_stat *st);
/* mlprof_median: the median of x[0..n-1], sorting x in place. */
double mlprof_median(double *x, int64_t n);
/* mlprof_node_name: a node's name, or "#i" for a node without one, in buf. */
const char *mlprof_node_name(const struct ml_graph *g, int i, char *buf, size_t n);
/*
 * mlprof_fused_parts: for a fused node i (attribute fused_from), the op
 * types it came from in ops[] and each one's share of its time in w[]
 * (room for 32); 0 when i is not fused.
 */
int mlprof_fused_parts(const struct ml_prof *p, int i, const char **ops, double *w);
/* mlprof_rows: the rows of o's grouping in o's order (unsorted: graph order), *nrows of them. */
int mlprof_rows(struct ml_prof *p, const struct ml_prof_opts *o, bool sorted, struct prof_row **rows,
	      int *nrows, struct ml_err *e);
/*
 * mlprof_live: the arena bytes (the union of the live slots) and the heap
 * bytes in use at node i; tmp has room for one interval per tensor (NULL:
 * the arena bytes are a plain sum, an upper bound).
 */
struct prof_ival {
	int64_t a, b;
};
void mlprof_live(const struct ml_prof *p, int i, struct prof_ival *tmp, int64_t *arena,
	       int64_t *heap);
/* mlprof_memory: the summary numbers of the memory plan; peak_live is the largest of mlprof_live. */
struct prof_memsum {
	int64_t arena, peak_live, heap_peak, inputs, weights, peak;
	int peak_node;
};
void mlprof_memory(const struct ml_prof *p, struct prof_memsum *m);
/* mlprof_fmt_time: "12.35 ms", "456.7 us" into buf; mlprof_fmt_bytes: "1.5 MiB". */
const char *mlprof_fmt_time(double s, char *buf, size_t n);
const char *mlprof_fmt_bytes(int64_t b, char *buf, size_t n);

#endif
