/*
 * dist.c: CPU kernels of the dist family (see lib/ops/dist.c): the start
 * and the wait of a bucket's all-reduce, over the runtime of
 * lib/cpu/mpi.c.
 *
 * Both have side effects (a collective across ranks, a bucket's state), so
 * they run only inside a session: static inference and constant folding,
 * which run small kernels ahead of time (c->sess NULL), get ML_ENOTSUP and
 * leave the values unknown.
 */
#include "dist/dist.h"

static int
run_start(struct ml_opctx *c)
{
	struct ml_err e = { 0 };
	if (c->sess == NULL)
		return ml_opfail(c, ML_ENOTSUP, "runs only in a session");
	int64_t id = ml_attr_int(c->node, "bucket", 0);
	bool first = ml_attr_int(c->node, "first", 0) != 0;
	enum ml_dtype wire = (enum ml_dtype)ml_attr_int(c->node, "wire", ML_F32);
	int rc = ml_dist_bucket_start(id, c->n_in, c->in, wire, first, &e);
	if (rc < 0)
		return ml_opfail(c, rc, "%s", e.msg);
	*(int64_t *)c->out[0]->data = id;
	return 0;
}

static int
run_wait(struct ml_opctx *c)
{
	struct ml_err e = { 0 };
	if (c->sess == NULL)
		return ml_opfail(c, ML_ENOTSUP, "runs only in a session");
	int64_t id = ml_attr_int(c->node, "bucket", 0);
	int64_t tok = *(const int64_t *)c->in[0]->data;
	if (tok != id)
		return ml_opfail(c, ML_EINVAL, "the token is of bucket %lld, not %lld",
				 (long long)tok, (long long)id);
	int rc = ml_dist_bucket_wait(id, c->n_out, c->out, &e);
	if (rc < 0)
		return ml_opfail(c, rc, "%s", e.msg);
	return 0;
}

const struct ml_cpu_kernel ml_cpu_dist[] = {
	{ ML_OP_ALLREDUCE_START, run_start },
	{ ML_OP_ALLREDUCE_WAIT, run_wait },
	{ .op = ML_OP_NONE },
};
