/*
 * cl_buf.c: device buffers from a pool, host<->device copies, kernel
 * launches and their profiling events.
 */
#include "cl/cl.h"

size_t
mlcl_round_up(size_t n, size_t m)
{
	return m == 0 ? n : (n + m - 1) / m * m;
}

size_t
mlcl_wg(const struct mlcl_dev *d, size_t n)
{
	size_t m = d->wg_multiple ? d->wg_multiple : 8;
	size_t wg = 64;
	while (wg > m && wg / 2 >= n)
		wg /= 2;
	if (wg > d->max_wg)
		wg = d->max_wg;
	return wg;
}

/* size classes: 256-byte steps to 64 KiB, then quarter powers of two */
static size_t
size_class(size_t n)
{
	if (n <= 65536)
		return mlcl_round_up(n ? n : 1, 256);
	size_t p = 65536;
	while (p < n)
		p *= 2;
	size_t q = p / 8;
	return mlcl_round_up(n, q);
}

/*
 * oom: device memory ran out. ML_ECL (an OpenCL failure: exit status 4,
 * and --device auto falls back to the CPU), not ML_ENOMEM, which is the
 * host's.
 */
static int
oom(struct mlcl_dev *d, struct ml_err *e, cl_int st, size_t n, const char *why)
{
	if (e != NULL)
		e->cl_status = st;
	return ml_fail(e, ML_ECL, "out of device memory on '%s': cannot allocate %zu bytes (%s)",
		       d->name, n, why);
}

int
mlcl_buf_get(struct mlcl_dev *d, size_t n, struct mlcl_buf **out, struct ml_err *e)
{
	size_t want = size_class(n);
	struct mlcl_buf **best = NULL;

	*out = NULL;
	if (mlcl_fault("alloc"))
		return oom(d, e, CL_MEM_OBJECT_ALLOCATION_FAILURE, n, "ML_CL_FAULT=alloc");
	for (struct mlcl_buf **p = &d->pool; *p != NULL; p = &(*p)->next)
		if ((*p)->size >= want && (*p)->size <= 2 * want &&
		    (best == NULL || (*p)->size < (*best)->size))
			best = p;
	if (best != NULL) {
		struct mlcl_buf *b = *best;
		*best = b->next;
		b->next = NULL;
		b->refs = 1;
		d->pool_bytes -= b->size;
		d->live_bytes += b->size;
		*out = b;
		return 0;
	}
	if ((d->max_alloc > 0 && want > d->max_alloc) ||
	    (d->global_mem > 0 && d->live_bytes + want > d->global_mem))
		return oom(d, e, CL_MEM_OBJECT_ALLOCATION_FAILURE, n, "over the device's memory");
	struct mlcl_buf *b = calloc(1, sizeof *b);
	if (b == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	cl_int st;
	b->mem = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, want, NULL, &st);
	if (b->mem == NULL || st != CL_SUCCESS) {
		/* free the pool and try once more */
		mlcl_pool_trim(d);
		b->mem = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, want, NULL, &st);
	}
	if (b->mem == NULL || st != CL_SUCCESS) {
		free(b);
		return oom(d, e, st, n, mlcl_status_str(st));
	}
	b->size = want;
	b->refs = 1;
	d->live_bytes += want;
	*out = b;
	return 0;
}

void
mlcl_buf_put(struct mlcl_dev *d, struct mlcl_buf *b)
{
	if (b == NULL || --b->refs > 0)
		return;
	d->live_bytes -= b->size;
	if (d->lost) {
		clReleaseMemObject(b->mem);
		free(b);
		return;
	}
	b->next = d->pool;
	d->pool = b;
	d->pool_bytes += b->size;
}

void
mlcl_pool_trim(struct mlcl_dev *d)
{
	while (d->pool != NULL) {
		struct mlcl_buf *b = d->pool;
		d->pool = b->next;
		clReleaseMemObject(b->mem);
		free(b);
	}
	d->pool_bytes = 0;
}

void
mlcl_record(struct mlcl_dev *d, cl_event ev)
{
	if (ev == NULL)
		return;
	if (!d->profiling) {
		clReleaseEvent(ev);
		return;
	}
	if (d->n_evs == d->cap_evs) {
		int cap = d->cap_evs ? 2 * d->cap_evs : 256;
		cl_event *ne = ml_realloc(d->evs, sizeof *ne * (size_t)cap);
		if (ne == NULL) {
			clReleaseEvent(ev);
			return;
		}
		d->evs = ne;
		d->cap_evs = cap;
	}
	d->evs[d->n_evs++] = ev;
}

static int
lost(struct mlcl_dev *d, cl_int st, const char *what, struct ml_err *e)
{
	if (st == CL_MEM_OBJECT_ALLOCATION_FAILURE || st == CL_OUT_OF_HOST_MEMORY) {
		if (e != NULL)
			e->cl_status = st;
		return ml_fail(e, ML_ECL, "out of device memory on '%s' (%s)", d->name, what);
	}
	d->lost = true;
	if (e != NULL)
		e->cl_status = st;
	return ml_fail(e, ML_ECL, "OpenCL device '%s' failed: %s: %s", d->name, what,
		       mlcl_status_str(st));
}

/* xfer_done: a blocking copy's event ev, complete: keep its times when profiling; release it. */
static void
xfer_done(struct mlcl_dev *d, cl_event ev)
{
	if (d->profiling)
		d->xfer_timed = mlcl_event_times(d, ev, &d->xfer_t[0], &d->xfer_t[1]) == 0;
	clReleaseEvent(ev);
}

int
mlcl_xfer_times(struct mlcl_dev *d, double *start, double *end)
{
	if (!d->xfer_timed)
		return -1;
	*start = d->xfer_t[0];
	*end = d->xfer_t[1];
	d->xfer_timed = false;
	return 0;
}

int
mlcl_write(struct mlcl_dev *d, cl_mem m, size_t off, const void *src, size_t n, struct ml_err *e)
{
	if (n == 0)
		return 0;
	cl_event ev;
	cl_int st = clEnqueueWriteBuffer(d->q, m, CL_TRUE, off, n, src, 0, NULL, &ev);
	if (st != CL_SUCCESS)
		return lost(d, st, "clEnqueueWriteBuffer", e);
	xfer_done(d, ev);
	return 0;
}

int
mlcl_write_async(struct mlcl_dev *d, cl_mem m, size_t off, const void *src, size_t n,
		 struct ml_err *e)
{
	if (n == 0)
		return 0;
	d->xfer_timed = false;	/* not waited for: no times of its own to give */
	cl_int st = clEnqueueWriteBuffer(d->q, m, CL_FALSE, off, n, src, 0, NULL, NULL);
	if (st != CL_SUCCESS)
		return lost(d, st, "clEnqueueWriteBuffer", e);
	return 0;
}

int
mlcl_read(struct mlcl_dev *d, cl_mem m, size_t off, void *dst, size_t n, struct ml_err *e)
{
	if (n == 0)
		return mlcl_finish(d, e);
	cl_event ev;
	cl_int st = clEnqueueReadBuffer(d->q, m, CL_TRUE, off, n, dst, 0, NULL, &ev);
	if (st != CL_SUCCESS)
		return lost(d, st, "clEnqueueReadBuffer", e);
	xfer_done(d, ev);
	return 0;
}

int
mlcl_copy(struct mlcl_dev *d, cl_mem dst, size_t doff, cl_mem src, size_t soff, size_t n,
	  struct ml_err *e)
{
	if (n == 0)
		return 0;
	cl_event ev = NULL;
	cl_int st = clEnqueueCopyBuffer(d->q, src, dst, soff, doff, n, 0, NULL,
					d->profiling ? &ev : NULL);
	if (st != CL_SUCCESS)
		return lost(d, st, "clEnqueueCopyBuffer", e);
	mlcl_record(d, ev);
	return 0;
}

int
mlcl_launch(struct mlcl_dev *d, cl_kernel k, cl_uint dims, const size_t *gws, const size_t *lws,
	    struct ml_err *e)
{
	if (mlcl_fault("enqueue"))
		return lost(d, CL_OUT_OF_RESOURCES, "clEnqueueNDRangeKernel (ML_CL_FAULT=enqueue)", e);
	for (cl_uint i = 0; i < dims; i++)
		if (gws[i] == 0)
			return 0;
	/* an event only when profiling: creating and releasing one per launch is not free */
	cl_event ev = NULL;
	cl_int st = clEnqueueNDRangeKernel(d->q, k, dims, NULL, gws, lws, 0, NULL,
					   d->profiling ? &ev : NULL);
	if (st != CL_SUCCESS) {
		if (st == CL_INVALID_WORK_GROUP_SIZE || st == CL_INVALID_KERNEL_ARGS ||
		    st == CL_INVALID_ARG_SIZE || st == CL_INVALID_WORK_ITEM_SIZE) {
			/* a bug of the caller, not of the device */
			if (e != NULL)
				e->cl_status = st;
			return ml_fail(e, ML_ECL, "clEnqueueNDRangeKernel: %s", mlcl_status_str(st));
		}
		return lost(d, st, "clEnqueueNDRangeKernel", e);
	}
	mlcl_record(d, ev);
	return 0;
}

int
mlcl_finish(struct mlcl_dev *d, struct ml_err *e)
{
	cl_int st = clFinish(d->q);
	if (st != CL_SUCCESS)
		return lost(d, st, "clFinish", e);
	return 0;
}

void
mlcl_profile(struct mlcl_dev *d, bool on)
{
	d->profiling = on;
}

int
mlcl_events_take(struct mlcl_dev *d, cl_event **evs, int *n)
{
	*evs = d->evs;
	*n = d->n_evs;
	d->evs = NULL;
	d->n_evs = d->cap_evs = 0;
	return 0;
}

int
mlcl_event_times(struct mlcl_dev *d, cl_event ev, double *start, double *end)
{
	cl_ulong a = 0, b = 0;
	if (clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL) !=
		    CL_SUCCESS ||
	    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL) != CL_SUCCESS)
		return ML_ECL;
	*start = (double)a * 1e-9 + d->clock_off;
	*end = (double)b * 1e-9 + d->clock_off;
	return 0;
}
