/*
 * dist.c: definitions of the dist family, the internal ("ml" domain) ops
 * of data-parallel training that ml_train_distribute (lib/dist/rewrite.c)
 * puts into a step graph:
 *
 *   AllReduceStart(X_1, ..., X_k) -> token   bucket=ID [first=1] [wire=DT]
 *       packs the float arrays X_i into bucket ID, each times this rank's
 *       weight (ml_dist_set_weight), hands the bucket to the communication
 *       thread for an MPI_Allreduce (sum) and returns at once; the token
 *       (i64 scalar, the bucket id) orders the wait after it. first marks
 *       the bucket that starts a step (statistics only). wire (ML_BF16 or
 *       ML_F16; default float32) is the type the packed values cross the
 *       network in: rounded to it, summed in float32, rounded back.
 *   AllReduceWait(token) -> Y_1, ..., Y_k     bucket=ID dtypes=[..] ranks=[..] dims=[..]
 *       waits until bucket ID is reduced and unpacks Y_i (the averages of
 *       X_i over the ranks), typed and shaped by the attributes (dims holds
 *       every Y_i's dims, one after another).
 *
 * Without MPI (one process) the pair is the identity: Y_i = X_i. The
 * outputs of the wait are new tensors rather than the start's inputs, so
 * the gradients die at the start and the pair costs no extra memory.
 */
#include "dist/dist.h"

static int
bucket_attr(struct ml_opctx *c, int64_t *id)
{
	*id = ml_attr_int(c->node, "bucket", 0);
	if (*id < 0 || *id >= ML_DIST_MAX_BUCKETS)
		return ml_opfail(c, ML_EINVAL, "bucket %lld is out of range [0, %d)",
				 (long long)*id, ML_DIST_MAX_BUCKETS);
	return 0;
}

static int
infer_start(struct ml_opctx *c)
{
	int64_t id;
	ML_TRY(bucket_attr(c, &id));
	int64_t wire = ml_attr_int(c->node, "wire", ML_F32);
	if (wire != ML_F32 && wire != ML_BF16 && wire != ML_F16)
		return ml_opfail(c, ML_EINVAL, "wire type %lld is not f32, bf16 or f16",
				 (long long)wire);
	for (int i = 0; i < c->n_in; i++) {
		const struct ml_tval *x = ML_IN(c, i);
		if (x == NULL)
			return ml_opfail(c, ML_EINVAL, "input %d is required", i);
		if (x->dtype != ML_UNDEF && !ml_dist_reduce_dtype(x->dtype))
			return ml_opfail(c, ML_EINVAL, "input %d: cannot reduce %s values", i,
					 ml_dtype_name(x->dtype));
	}
	ml_set_shape(c->out[0], ML_I64, 0, NULL);
	return 0;
}

/*
 * wait_shapes: the dtype, rank and dims of output i from the attributes
 * dtypes, ranks and dims (checked against the output count).
 */
static int
wait_shapes(struct ml_opctx *c, int i, enum ml_dtype *dt, int *rank, const int64_t **dims)
{
	const int64_t *dts, *rks, *dms;
	int nd = ml_attr_ints(c->node, "dtypes", &dts);
	int nr = ml_attr_ints(c->node, "ranks", &rks);
	int nm = ml_attr_ints(c->node, "dims", &dms);
	if (nd != c->n_out || nr != c->n_out)
		return ml_opfail(c, ML_EINVAL, "attributes dtypes and ranks must have one value per "
				 "output (%d)", c->n_out);
	int64_t off = 0;
	for (int k = 0; k < c->n_out; k++) {
		if (rks[k] < 0 || rks[k] > ML_MAX_RANK)
			return ml_opfail(c, ML_EINVAL, "output %d: rank %lld", k, (long long)rks[k]);
		if (!ml_dist_reduce_dtype((enum ml_dtype)dts[k]))
			return ml_opfail(c, ML_EINVAL, "output %d: cannot reduce dtype %lld", k,
					 (long long)dts[k]);
		if (k == i) {
			*dt = (enum ml_dtype)dts[k];
			*rank = (int)rks[k];
			*dims = dms + off;
		}
		off += rks[k];
	}
	if (nm < 0 ? off != 0 : nm != off)
		return ml_opfail(c, ML_EINVAL, "attribute dims has %d values; the ranks add up to %lld",
				 nm < 0 ? 0 : nm, (long long)off);
	for (int64_t k = 0; k < off; k++)
		if (dms[k] < 0)
			return ml_opfail(c, ML_EINVAL, "attribute dims holds %lld", (long long)dms[k]);
	return 0;
}

static int
infer_wait(struct ml_opctx *c)
{
	int64_t id;
	ML_TRY(bucket_attr(c, &id));
	const struct ml_tval *tok = ML_IN(c, 0);
	if (tok == NULL)
		return ml_opfail(c, ML_EINVAL, "the token input is required");
	int64_t k = ml_tval_numel(tok);
	if ((tok->dtype != ML_UNDEF && tok->dtype != ML_I64) || tok->rank > 1 || (k >= 0 && k != 1))
		return ml_opfail(c, ML_EINVAL, "the token must be an int64 scalar");
	for (int i = 0; i < c->n_out; i++) {
		enum ml_dtype dt = ML_UNDEF;
		int rank = 0;
		const int64_t *dims = NULL;
		ML_TRY(wait_shapes(c, i, &dt, &rank, &dims));
		ml_set_shape(c->out[i], dt, rank, dims);
	}
	return 0;
}

/* One pass over every element: the inputs packed, or the outputs unpacked. */
static int64_t
flops_elems(const struct ml_opctx *c)
{
	bool start = c->node->op == ML_OP_ALLREDUCE_START;
	int n = start ? c->n_in : c->n_out;
	int64_t sum = 0;
	for (int i = 0; i < n; i++) {
		const struct ml_tval *t = start ? c->in[i] : c->out[i];
		int64_t k = t != NULL ? ml_tval_numel(t) : -1;
		sum += k > 0 ? k : 0;
	}
	return sum;
}

const struct ml_opdef ml_opdefs_dist[] = {
	{ ML_OP_ALLREDUCE_START, 1, -1, 1, 1, infer_start, flops_elems },
	{ ML_OP_ALLREDUCE_WAIT, 1, 1, 1, -1, infer_wait, flops_elems },
	{ .op = ML_OP_NONE },
};

/* the dtypes an all-reduce sums (the CPU's lib/cpu/mpi.c and these ops' inference) */
bool
ml_dist_reduce_dtype(enum ml_dtype t)
{
	return t == ML_F32 || t == ML_F64 || t == ML_F16 || t == ML_BF16;
}
