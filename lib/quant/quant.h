/*
 * quant.h: what the files of lib/quant share: calibration statistics
 * (calib.c) and graph helpers for the rewrites (quant.c).
 */
#ifndef ML_QUANT_QUANT_H
#define ML_QUANT_QUANT_H

#include <sys/stat.h>

#include "ml_impl.h"

#define MQ_BINS 2048

/* struct mq_stat: one tensor's statistics: range, and a histogram of |x| over [0, max |x|]. */
struct mq_stat {
	bool seen;
	float min, max;
	double hist[MQ_BINS];
};

/* mlq_copy_graph: a deep copy of g (ml_graph_clone), toposorted and inferred. */
int mlq_copy_graph(struct ml_graph **out, const struct ml_graph *g, struct ml_err *e);
/*
 * mlq_run_all: run a copy of g over every calibration batch (with every f32
 * activation as an extra output when extra_f32), calling fn after each run.
 */
int mlq_run_all(const struct ml_graph *g, const struct ml_calib *cal, int extra_f32,
	       int (*fn)(void *ctx, struct ml_graph *gx, struct ml_session *s, int batch,
			 struct ml_err *e),
	       void *ctx, struct ml_err *e);
/*
 * mlq_collect: statistics of every tensor of g over cal (*out: one per
 * tensor, ml_free it); each batch run is reported to prog ("calibrating",
 * one unit a batch and pass; prog may be NULL).
 */
int mlq_collect(const struct ml_graph *g, const struct ml_calib *cal, bool hist,
		const struct ml_progress *prog, struct mq_stat **out, struct ml_err *e);
/* mlq_range: the calibrated range [lo, hi] (0 always inside) of st by method. */
void mlq_range(const struct mq_stat *st, int method, double pct, double *lo, double *hi);
/*
 * mlq_unfuse (unfuse.c): in *out, a copy of g with mlopt's FusedConv and
 * FusedGemm nodes of no activation, Relu or Clip split back into their ONNX
 * ops; *out is NULL when g has none.
 */
int mlq_unfuse(const struct ml_graph *g, struct ml_graph **out, struct ml_err *e);

#endif
