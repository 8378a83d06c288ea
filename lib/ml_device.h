/*
 * ml_device.h: devices (lib/cl, lib/exec): the CPU and the OpenCL devices
 * behind one interface, device discovery, placement. Included by ml.h.
 * Owner: the OpenCL runtime (issue 4).
 *
 * A session made with opts.device "cl", "cl:N" or "auto" places each node
 * on a device: "cl" puts every node the OpenCL device has a kernel for
 * there and the rest on the CPU, with the copies between them inserted;
 * "auto" picks, from a cost model measured on this machine (and cached),
 * the placement with the least predicted time, transfers included, which
 * may well be all on the CPU. With "auto" any OpenCL failure (no platform,
 * a program that does not build, device memory, a lost device) makes the
 * session run on the CPU and say why in ml_session_note; with "cl" it is
 * an error (ML_ENODEV, ML_ECL or ML_ENOMEM).
 */
#ifndef ML_DEVICE_H
#define ML_DEVICE_H

/*
 * struct ml_device_info: one device as `mlrun --devices` lists it. id is
 * "cpu" or "cl:N"; index is 0 for the CPU and N + 1 for cl:N (the value
 * of ml_tensor.device and ml_node.device).
 */
struct ml_device_info {
	int index;
	char id[16];
	char name[128];
	char vendor[128];
	char platform[128];
	char version[128];	/* device version */
	char driver[64];
	char type[16];		/* "cpu", "gpu", "accelerator", "other" */
	int64_t global_mem, local_mem, max_alloc;
	int compute_units;
	int64_t max_work_group;
	bool fp16, fp64;
};

/*
 * ml_devices: every device: the CPU first, then each OpenCL device of
 * each platform. *out is ml_malloc'd (ml_free it); *n its length. Where
 * OpenCL has no platform (or the build has no OpenCL) the list holds the
 * CPU alone and e says why (the call still returns 0).
 */
int ml_devices(struct ml_device_info **out, int *n, struct ml_err *e);

/*
 * ml_session_node_device: the device index node i runs on (0 the CPU, N+1
 * cl:N); -1 when i is out of range.
 */
int ml_session_node_device(const struct ml_session *s, int i);
/*
 * ml_session_place: set the placement: dev[i] is the device index of node
 * i (as above; a node the device has no kernel for goes to the CPU). The
 * session must have been made with a device other than "cpu" for indices
 * above 0. ML_ENODEV for an index whose device the session did not open.
 */
int ml_session_place(struct ml_session *s, const int *dev, struct ml_err *e);
/*
 * ml_session_plan_write: the placement as a table (json false) or JSON:
 * per node its device, predicted microseconds and bytes copied in from
 * another device; then totals. The JSON form is what --placement reads
 * back (ml_placement_read).
 */
int ml_session_plan_write(const struct ml_session *s, FILE *fp, bool json, struct ml_err *e);
/*
 * ml_placement_read: read a placement file (the JSON of
 * ml_session_plan_write, or lines "NODE DEVICE" with a node name or index
 * and a device id "cpu"/"cl:N"; '#' starts a comment) for graph g into
 * dev[0..g->n_nodes-1] (nodes not named keep dev[i]). ML_EINVAL names the
 * line or node that is wrong.
 */
int ml_placement_read(const struct ml_graph *g, const char *path, int *dev, struct ml_err *e);

/*
 * ml_session_note: a line saying what the device layer decided that the
 * user did not ask for (a fallback to the CPU and why), or NULL. Tools
 * print it under -v.
 */
const char *ml_session_note(const struct ml_session *s);
/*
 * ml_session_device_stats: seconds the session's OpenCL device spent in
 * set-up (context, queue) and loading programs, and the program counts
 * (built, loaded from the disk cache). Zeroes for an all-CPU session.
 */
struct ml_session_devstats {
	double t_probe;		/* platform and device discovery (once per process) */
	double t_setup;
	double t_programs;
	int n_built, n_cached;
	char gemm_tile[96];	/* "6x32/16 (measured)" and the like; "" when no GEMM ran */
};
void ml_session_device_stats(const struct ml_session *s, struct ml_session_devstats *st);

/*
 * ml_session_sync: copy every PARAM or CONST tensor whose device copy is
 * newer (written by ml.Assign or an update op on a device) back into the
 * graph's host data. A no-op for an all-CPU session. mltrain calls it
 * before a checkpoint.
 */
int ml_session_sync(struct ml_session *s, struct ml_err *e);
/*
 * ml_session_reload: the host data of s's PARAM and CONST tensors changed
 * (another session, or the caller, wrote them): the device copies are
 * uploaded again before their next use. Device copies that are newer than
 * the host's (not yet synced) are kept. A no-op without a device.
 */
void ml_session_reload(struct ml_session *s);

/*
 * Transfers of the last run with opts.profile: tensor index, bytes,
 * direction (true: host to device), start and end on the ml_now() clock.
 * ml_session_transfers borrows the list until the next run and returns its
 * length.
 */
struct ml_transfer {
	int tensor;
	int device;		/* the device index copied to or from */
	int64_t bytes;
	bool to_device;
	double start, end;
};
int ml_session_transfers(const struct ml_session *s, const struct ml_transfer **out);

#endif
