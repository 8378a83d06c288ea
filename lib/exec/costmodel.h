/*
 * costmodel.h: the measured cost model of --device auto (costmodel.c),
 * for device.c. Internal to lib/exec.
 */
#ifndef ML_EXEC_COSTMODEL_H
#define ML_EXEC_COSTMODEL_H

#include "ml_impl.h"

struct ml_session;

/*
 * The cost model. Per device and op type: nanoseconds per FLOP (or per
 * byte, for ops without FLOPs), measured on this machine by running the
 * session's graph on each device with profiling (the best of two runs per
 * node), and kept in $ML_CL_CACHE (else $XDG_CACHE_HOME/ml or
 * ~/.cache/ml)/costmodel.txt as lines "DEVICE OP sum_ns sum_flops
 * sum_bytes nodes [min_ns]" (min_ns: the smallest node's time; 0 when
 * absent). OP is the op type, or a class of it where one op's speed
 * differs by kind ("Conv:group": grouped and depthwise convolutions). The
 * row "DEVICE __launch__ sum_ns 0 0 nodes min_ns" is the host's cost per
 * node launched on the device beyond the device's own time (enqueue,
 * queue latency), from the wall time of a run without profiling, and in
 * min_ns the device's cheapest kernel, the least any kernel there is
 * predicted to take; "DEVICE __copy__ sum_ns 0 sum_bytes copies min_ns"
 * the copies between the host and the device (min_ns the fixed cost of
 * one). ML_COSTMODEL=FILE names another file.
 */
struct ml_cm_row {
	char dev[64];
	char op[48];
	double sum_ns, sum_flops, sum_bytes;
	int64_t nodes;
	double min_ns;		/* the smallest node's time; 0 unknown */
};

#define ML_CM_LAUNCH "__launch__"
#define ML_CM_COPY "__copy__"

struct ml_costmodel {
	struct ml_cm_row *rows;
	int n, cap;
	bool changed;
};

/* ml_cm_key: the model's key of node n (its op type, or a class of it in buf) */
const char *ml_cm_key(const struct ml_node *n, char *buf, size_t len);
/* ml_cm_path: the model's file (ML_COSTMODEL, else the cache folder's costmodel.txt); "" none */
void ml_cm_path(char *buf, size_t n);
/* ml_cm_find: the row of (dev, op); with add, a new zero one when none (NULL: no memory) */
struct ml_cm_row *ml_cm_find(struct ml_costmodel *cm, const char *dev, const char *op, bool add);
/* ml_cm_load: the rows of the model's file, when it is a .txt one */
void ml_cm_load(struct ml_costmodel *cm);
/* ml_cm_save: write the model's file back (atomically) when rows changed */
void ml_cm_save(struct ml_costmodel *cm);
/*
 * ml_cm_load_json: the rows of mlprof --calibrate's JSON model at path that
 * cm lacks; its "cl:N" rows are cl_name's when N is cl_index.
 */
void ml_cm_load_json(struct ml_costmodel *cm, const char *path, int cl_index, const char *cl_name);
/*
 * ml_cm_predict: microseconds for a node of kind op (else base, its op
 * type) with fl FLOPs and by bytes on dev; -1 when the model has no row.
 */
double ml_cm_predict(struct ml_costmodel *cm, const char *dev, const char *op, const char *base,
		     double fl, double by);
/*
 * ml_cm_launch: the host's microseconds per node launched on dev beyond its
 * own time, and in *floor the least microseconds a kernel took there.
 */
double ml_cm_launch(struct ml_costmodel *cm, const char *dev, double *floor);
/* ml_cm_add: add the times t[] (seconds) of s's nodes i with nd[i] == want and missing[i] */
void ml_cm_add(struct ml_costmodel *cm, struct ml_session *s, const char *dev, const int *nd,
	       int want, bool *missing, const double *t);

#endif
