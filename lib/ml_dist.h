/*
 * ml_dist.h: data-parallel training over MPI (lib/dist). Included by ml.h.
 * Owner: mpi (issue 10).
 *
 * N copies of a training tool run under mpirun, one per rank. Every rank
 * holds the whole model and trains on its own slice of each global batch;
 * the gradients are averaged across ranks inside the step graph, while the
 * backward pass is still running, so every rank applies the same update
 * and the parameters stay identical. The result equals one process that
 * trains on the same global batches, up to the order of float additions.
 *
 *	struct ml_dist_info di;
 *	if (ml_dist_init(ML_DIST_AUTO, &di, &err) < 0)		(ML_ENOTSUP: no MPI)
 *		fail;
 *	ml_train_step_graph(&step, model, &to, &err);
 *	struct ml_dist_opts dopt;
 *	ml_dist_opts_init(&dopt);				(25 MiB buckets)
 *	ml_train_distribute(step, &dopt, &err);			(no-op on one rank)
 *	ml_dist_bcast_params(step, 0, &err);			(rank 0's weights)
 *	ml_session_new(&s, step, NULL, &err);
 *	for each global batch X of B samples:
 *		ml_dist_shard_batch(X, &x, &w);			(this rank's rows)
 *		ml_dist_set_weight(w);
 *		bind x and its labels, run the session;
 *		loss * w summed with ml_dist_allreduce(ML_DIST_SUM) is the global loss;
 *	rank 0 alone writes checkpoints and the output (ml_dist_rank() == 0);
 *	ml_dist_finalize(&err);
 *
 * MPI is Open MPI (4.x, the libmpi.so.40 ABI), loaded at run time with
 * dlopen: libml links no MPI, the tools run where MPI is not installed, and
 * only a request for distributed training fails there (ML_ENOTSUP, exit 4).
 * ML_MPI_LIB names another library file of the same ABI.
 *
 * All MPI calls after ml_dist_init are made by one communication thread
 * (MPI_THREAD_SERIALIZED), in the order the calls below are made, so every
 * rank issues the same collectives in the same order. The functions below
 * are for the thread that runs the sessions; they are not thread-safe
 * among themselves.
 */
#ifndef ML_DIST_H
#define ML_DIST_H

/* Modes of ml_dist_init. */
enum {
	ML_DIST_AUTO = 0,	/* MPI only when an MPI launcher started more than one process */
	ML_DIST_REQUIRE = 1,	/* MPI always (a lone process is a world of one) */
	ML_DIST_OFF = 2,	/* never: one process, whatever the environment says */
};

/* struct ml_dist_info: where this process stands. */
struct ml_dist_info {
	bool active;		/* MPI is initialised (false: one process, rank 0 of 1) */
	int rank, size;		/* rank in MPI_COMM_WORLD and the world's size */
	int local_rank, local_size;	/* among the ranks on this host (from the launcher) */
	char library[160];	/* MPI_Get_library_version's first line, "" when inactive */
};

/*
 * ml_dist_init: start MPI as mode says and fill info (which may be NULL).
 * In ML_DIST_AUTO, the launcher is recognised by OMPI_COMM_WORLD_SIZE
 * (Open MPI's mpirun), PMIX_RANK (srun and other PMIx launchers) or
 * PMI_SIZE; a world of one (mpirun -np 1) runs without MPI. ML_ENOTSUP
 * when MPI is needed but libmpi.so.40 cannot be loaded (the message says
 * why), ML_EIO when MPI_Init_thread fails or lacks MPI_THREAD_SERIALIZED.
 * A second call returns the state of the first.
 */
int ml_dist_init(int mode, struct ml_dist_info *info, struct ml_err *e);
/*
 * ml_dist_finalize: stop the communication thread and MPI_Finalize; a no-op
 * when MPI is not active. Call it once at the end, after every session
 * that holds distributed nodes has finished running.
 */
int ml_dist_finalize(struct ml_err *e);
/*
 * ml_dist_abort: end every rank of the job with status (MPI_Abort), so a
 * failure on one rank does not leave the others waiting in a collective.
 * MPI_Abort does not return when MPI is active; otherwise (or should it
 * return) this returns status, for the tool to exit with: the library never
 * exits. Tools only.
 */
int ml_dist_abort(int status);
/* ml_dist_rank / ml_dist_size: 0 and 1 when MPI is not active. */
int ml_dist_rank(void);
int ml_dist_size(void);
/* ml_dist_available: 0 when libmpi can be loaded, else ML_ENOTSUP with the reason in e. */
int ml_dist_available(struct ml_err *e);

/*
 * struct ml_dist_opts: how ml_train_distribute buckets a step graph.
 * Fill it with ml_dist_opts_init, then set fields.
 */
struct ml_dist_opts {
	double bucket_mb;	/* MiB of gradients per all-reduce (default 25; 0: one per tensor) */
	bool force;		/* rewrite on a world of one too (tests; the ops are then local) */
	/*
	 * The type float32 gradients cross the network in: ML_F32 (default),
	 * ML_BF16 or ML_F16. A 16-bit type halves the bytes all-reduced: each
	 * rank's weighted gradient is rounded to it (to nearest, ties to
	 * even), and the reduction adds two values in float32 and rounds the
	 * sum back, so each partial sum is rounded once. bf16 keeps float32's
	 * range with 8 bits of mantissa; f16 has 11 bits but flushes values
	 * under 6e-8 to zero and overflows above 65504. float64 gradients stay
	 * float64. On a world of one (force) the values make the same round
	 * trip, so one process shows the rounding. ML_UNDEF (a zeroed
	 * struct) is ML_F32.
	 */
	enum ml_dtype wire;
};
void ml_dist_opts_init(struct ml_dist_opts *o);
/*
 * ml_dist_wire_parse: the wire type named s ("f32", "bf16" or "fp16") into
 * *dt; ML_EINVAL (with the names allowed) for any other name.
 */
int ml_dist_wire_parse(const char *s, enum ml_dtype *dt, struct ml_err *e);
/* ml_dist_wire_name: "f32", "bf16" or "fp16" (the names of --allreduce-dtype). */
const char *ml_dist_wire_name(enum ml_dtype dt);

/*
 * ml_train_distribute: rewrite a step graph of ml_train_step_graph so its
 * gradients are averaged across ranks. The tensors reduced are the
 * gradients that the optimizer updates read (input 1 of ml.SGDUpdate and
 * ml.AdamUpdate, and any backward/ value an optimizer/ node reads) and the
 * batch statistics ml.EmaUpdate folds into BatchNorm's running mean and
 * variance, so those stay identical across ranks too. In the order the
 * graph produces them they are cut into buckets of about bucket_mb MiB;
 * after the node that produces a bucket's last tensor comes an
 * ml.AllReduceStart (it packs the bucket, hands it to the communication
 * thread and returns), and before the first node that reads one of the
 * bucket's tensors an ml.AllReduceWait (it waits and unpacks the averages
 * into new tensors, which those readers then read); a start whose bucket
 * crosses the wire in a 16-bit type (o->wire) says so in its attribute
 * wire (the dtype), so the graph file keeps it. Returns the number of
 * buckets (0: nothing changed, as on a world of one without force).
 * ML_EINVAL for a graph distributed already, a bad bucket size or wire type,
 * ML_ENOTSUP for a reduced tensor without a static shape.
 */
int ml_train_distribute(struct ml_graph *step, const struct ml_dist_opts *o, struct ml_err *e);

/*
 * ml_dist_bcast_params: give every PARAM and CONST tensor of g (parameters,
 * running statistics, optimizer state) rank root's values, so all ranks
 * start alike (the initial parameters, or a resumed checkpoint). Every rank
 * must pass the same graph: a rank whose tensors differ in names, types or
 * sizes makes all ranks fail with ML_EINVAL. A no-op when MPI is inactive.
 */
int ml_dist_bcast_params(struct ml_graph *g, int root, struct ml_err *e);
/*
 * ml_dist_param_divergence: the largest |x - x_root| over every element of
 * every PARAM tensor of g, across all ranks, into *maxdiff (0 on one rank).
 * A check that training kept the ranks identical; costs one broadcast of
 * the parameters.
 */
int ml_dist_param_divergence(const struct ml_graph *g, int root, double *maxdiff,
			     struct ml_err *e);

/* Reductions of ml_dist_allreduce. */
enum { ML_DIST_SUM = 0, ML_DIST_MEAN = 1, ML_DIST_MAX = 2, ML_DIST_MIN = 3 };
/*
 * ml_dist_allreduce: reduce n values of buf (f32, f64, i32 or i64) over all
 * ranks in place: metrics such as the loss or correct counts. MEAN divides
 * the sum by the size (floats only). Every rank must make the same calls.
 */
int ml_dist_allreduce(void *buf, int64_t n, enum ml_dtype dt, int op, struct ml_err *e);
/* ml_dist_bcast: nbytes of buf from rank root to every rank. */
int ml_dist_bcast(void *buf, size_t nbytes, int root, struct ml_err *e);
/* ml_dist_barrier: wait until every rank has called it. */
int ml_dist_barrier(struct ml_err *e);

/*
 * Sharding. A global batch of n samples is cut into contiguous slices, one
 * per rank: rank r takes [n*r/size, n*(r+1)/size). Every rank must see the
 * same global batches in the same order (the loader's order depends only on
 * the seed and the epoch), so the ranks together train on exactly what one
 * process would.
 */
void ml_dist_shard(int64_t n, int rank, int size, int64_t *lo, int64_t *hi);
/*
 * ml_dist_shard_batch: view (borrowed: no copy, valid while global is) of
 * this rank's rows of global (a batch, first dim the samples), and in
 * *weight (may be NULL) its share of the batch, rows / n, to pass to
 * ml_dist_set_weight. On one rank the view is the whole batch. A rank may
 * get no rows when the batch has fewer samples than there are ranks; the
 * tool should then drop that batch on every rank (the step graph cannot run
 * on an empty batch).
 */
void ml_dist_shard_batch(const struct ml_tval *global, struct ml_tval *view, double *weight);
/*
 * ml_dist_set_weight: this rank's share of the coming steps' global batch
 * (its samples / the global batch's): each rank's reduced tensors are
 * multiplied by it before they are summed, so a mean loss over unequal
 * slices still averages right. Default 1/size. Ignored when inactive.
 */
void ml_dist_set_weight(double w);

/*
 * struct ml_dist_stats: what the distributed nodes cost, summed since
 * ml_dist_init or the last ml_dist_stats_reset. comm_s is the time the
 * communication thread spent in MPI_Allreduce of buckets (overlapped with
 * computation where the backward pass still ran); wait_s the time the
 * step's thread spent blocked in ml.AllReduceWait (not hidden).
 */
struct ml_dist_stats {
	int64_t steps;		/* step graph runs (first buckets started) */
	int64_t buckets;	/* buckets reduced */
	int64_t bytes;		/* bytes of buckets reduced, per rank (as sent: 2 a value in bf16) */
	int64_t values;		/* values of buckets reduced, per rank */
	enum ml_dtype wire;	/* the wire type of the last bucket reduced (ML_UNDEF: none) */
	double comm_s;
	double wait_s;
	double other_s;		/* time of the other collectives (metrics, broadcasts) */
};
void ml_dist_stats(struct ml_dist_stats *st);
void ml_dist_stats_reset(void);

#endif
