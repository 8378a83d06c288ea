/*
 * device.h: the device interface of the executor (DESIGN.md "Runtime"):
 * a small vtable, allocate, free, copy to and from the host, run a node,
 * synchronize, that the CPU (lib/cpu/device.c) and OpenCL (lib/cl/cl_ops.c;
 * lib/cl/cl_stub.c when built with OPENCL=0) fill. The executor
 * (lib/exec/run.c) runs every node through it, CPU nodes included.
 * Internal to lib/.
 */
#ifndef ML_EXEC_DEVICE_H
#define ML_EXEC_DEVICE_H

#include "ml_impl.h"

/*
 * struct ml_devstats: what opening a device and loading its programs cost,
 * for -v and the benchmarks.
 */
struct ml_devstats {
	double t_setup;		/* seconds: context and queue */
	double t_programs;	/* seconds: programs loaded or built */
	int n_built, n_cached;	/* programs compiled / loaded from the disk cache */
	int64_t live_bytes, pool_bytes;
	char gemm_tile[96];	/* the GEMM's tile and how it was chosen; "" when none yet */
};

/*
 * ml_host_input: whether bit j of a host_inputs mask is set; inputs past
 * the mask's 32 bits (a FusedElementwise may have 64) are never host ones.
 */
static inline bool
ml_host_input(unsigned mask, int j)
{
	return j < 32 && (mask >> j & 1);
}

/*
 * struct ml_devops: one kind of device. ctx is what open made. Buffers are
 * opaque (void *) handles owned by the device. Members never NULL unless
 * said so.
 */
struct ml_devops {
	const char *name;	/* "cpu", "opencl" */
	/* open: device index (0-based among this kind) into *ctx. ML_ENODEV when absent. */
	int (*open)(int index, void **ctx, struct ml_err *e);
	/* describe: a one-line name of the opened device */
	const char *(*describe)(void *ctx);
	/*
	 * supports: whether node n of g, with its static shapes and dtypes,
	 * has a kernel here. A kernel may still refuse a run-time case with
	 * ML_ENOTSUP; the executor then runs that node on the CPU.
	 */
	bool (*supports)(void *ctx, const struct ml_graph *g, const struct ml_node *n);
	/* prepare: build what node n needs before the first run (programs) */
	int (*prepare)(void *ctx, const struct ml_graph *g, const struct ml_node *n,
		       struct ml_err *e);
	/* host_inputs: bit j set when input j is read on the host (shapes, axes) */
	unsigned (*host_inputs)(const struct ml_node *n);
	/* view: whether output 0 of n shares input 0's buffer (Reshape and the like) */
	bool (*view)(const struct ml_node *n);
	int (*alloc)(void *ctx, size_t n, void **buf, struct ml_err *e);
	void (*retain)(void *ctx, void *buf);
	void (*free)(void *ctx, void *buf);	/* drops a reference; NULL buf is a no-op */
	int (*upload)(void *ctx, void *buf, const void *src, size_t n, struct ml_err *e);
	/*
	 * upload_keep: upload from a source that stays valid and unchanged
	 * until the next sync (a constant, a bound input): it may return
	 * before the copy is done. May be NULL (upload is used).
	 */
	int (*upload_keep)(void *ctx, void *buf, const void *src, size_t n, struct ml_err *e);
	int (*download)(void *ctx, void *buf, void *dst, size_t n, struct ml_err *e);
	/*
	 * xfer_times: with profiling on, the start and end (ml_now() clock) of
	 * the last upload or download that waited for its copy, as the device
	 * ran it (not counting the wait behind earlier commands); 0, or -1
	 * when it has none (then the executor times the call). May be NULL.
	 */
	int (*xfer_times)(void *ctx, double *start, double *end);
	/*
	 * run: node c->node over c->in/c->out (shapes; host data only for
	 * host_inputs) and the device buffers bin[j]/bout[j] (NULL for an
	 * omitted input; for a view, run sets bout[0]). Errors in c->err.
	 * The CPU's run also takes bin and bout NULL: the operands are then
	 * c's host values themselves.
	 */
	int (*run)(void *ctx, struct ml_opctx *c, void **bin, void **bout);
	int (*sync)(void *ctx, struct ml_err *e);
	/* profile: record per-command times; may be NULL */
	void (*profile)(void *ctx, bool on);
	/*
	 * times: the start and end (ml_now() clock) of the commands enqueued
	 * since the last call; 0 when there were some, -1 when none. May be
	 * NULL. Valid after sync.
	 */
	int (*times)(void *ctx, double *start, double *end);
	/*
	 * take: the commands enqueued since the last take (or times), as an
	 * opaque set, without waiting; NULL when none. span: wait for set's
	 * commands, their start and end (ml_now() clock) in *start and *end
	 * (either NULL to only wait), then free the set; 0, -1 when no times.
	 * Both may be NULL (then the executor syncs after each profiled node).
	 */
	void *(*take)(void *ctx);
	int (*span)(void *ctx, void *set, double *start, double *end);
	void (*stats)(void *ctx, struct ml_devstats *st);	/* may be NULL */
};

extern const struct ml_devops ml_cpu_devops;
extern const struct ml_devops ml_cl_devops;

/* ml_cl_count: OpenCL devices over all platforms; 0 and the reason in e when none. */
int ml_cl_count(struct ml_err *e);
/* ml_cl_info: describe OpenCL device i (lib/cl/cl_run.c); ML_ENODEV when absent. */
int ml_cl_info(int i, struct ml_device_info *out);

#endif
