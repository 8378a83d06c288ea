/*
 * common.c: inference helpers the op families share: same-shape outputs,
 * numpy broadcasting, axis normalisation, dtype checks, node-prefixed errors.
 */
#include <stdarg.h>

#include "ml_impl.h"

int
ml_opfail(struct ml_opctx *c, int code, const char *fmt, ...)
{
	char buf[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (c->node->name[0] == '\0')
		return ml_fail(c->err, code, "%s: %s", c->node->op_type, buf);
	return ml_fail(c->err, code, "node '%s' (%s): %s", c->node->name, c->node->op_type, buf);
}

void
ml_set_shape(struct ml_tval *out, enum ml_dtype dt, int rank, const int64_t *dims)
{
	out->dtype = dt;
	out->rank = rank;
	for (int i = 0; i < rank && i < ML_MAX_RANK; i++)
		out->dims[i] = dims != NULL ? dims[i] : -1;
}

int
ml_infer_same(struct ml_opctx *c)
{
	struct ml_tval *a = ML_IN(c, 0);
	if (a == NULL)
		return ml_opfail(c, ML_EINVAL, "input 0 is required");
	ml_set_shape(c->out[0], a->dtype, a->rank, a->dims);
	return 0;
}

int
ml_broadcast_shape(int n, const struct ml_tval *const *ts, struct ml_tval *out, struct ml_err *e)
{
	int rank = 0;

	for (int i = 0; i < n; i++) {
		if (ts[i] == NULL)
			continue;
		if (ts[i]->rank < 0) {
			out->rank = -1;
			return 0;
		}
		rank = ML_MAX(rank, ts[i]->rank);
	}
	out->rank = rank;
	for (int d = 0; d < rank; d++) {
		int64_t v = 1;
		bool unknown = false;
		for (int i = 0; i < n; i++) {
			if (ts[i] == NULL)
				continue;
			int k = d - (rank - ts[i]->rank);
			if (k < 0)
				continue;
			int64_t x = ts[i]->dims[k];
			if (x < 0) {
				unknown = true;
				continue;
			}
			if (x == 1)
				continue;
			if (v != 1 && v != x)
				return ml_fail(e, ML_EINVAL, "shapes cannot broadcast (%lld vs %lld at dim %d)",
					       (long long)v, (long long)x, d);
			v = x;
		}
		out->dims[d] = unknown && v == 1 ? -1 : v;
	}
	return 0;
}

int
ml_norm_axis(struct ml_opctx *c, int64_t axis, int rank, int *out)
{
	if (axis < -rank || axis >= rank || (rank == 0 && axis != 0))
		return ml_opfail(c, ML_EINVAL, "axis %lld is out of range for rank %d",
				 (long long)axis, rank);
	*out = (int)(axis < 0 ? axis + rank : axis);
	return 0;
}

int
ml_check_dtype(struct ml_opctx *c, const struct ml_tval *t, const enum ml_dtype *ok, int n)
{
	for (int i = 0; i < n; i++)
		if (t->dtype == ok[i])
			return 0;
	return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(t->dtype));
}

void
ml_bcast_strides(const struct ml_tval *in, const struct ml_tval *out, int64_t *strides)
{
	int64_t s = 1;
	for (int d = out->rank - 1; d >= 0; d--) {
		int k = d - (out->rank - in->rank);
		if (k < 0 || in->dims[k] == 1) {
			strides[d] = 0;
		} else {
			strides[d] = s;
		}
		if (k >= 0)
			s *= in->dims[k];
	}
}

int
ml_matmul_shape(struct ml_opctx *c, const struct ml_tval *a, const struct ml_tval *b,
		enum ml_dtype dt, struct ml_tval *o)
{
	o->dtype = dt;
	if (a->rank < 0 || b->rank < 0) {
		o->rank = -1;
		return 0;
	}
	if (a->rank == 0 || b->rank == 0)
		return ml_opfail(c, ML_EINVAL, "operands must have rank 1 or more");
	int ra = a->rank, rb = b->rank;
	int64_t m = ra == 1 ? 1 : a->dims[ra - 2], k = a->dims[ra - 1];
	int64_t kb = rb == 1 ? b->dims[0] : b->dims[rb - 2], n = rb == 1 ? 1 : b->dims[rb - 1];
	if (k >= 0 && kb >= 0 && k != kb)
		return ml_opfail(c, ML_EINVAL, "inner dims differ (%lld vs %lld)", (long long)k,
				 (long long)kb);
	struct ml_tval ba = { .rank = ML_MAX(ra - 2, 0) }, bb = { .rank = ML_MAX(rb - 2, 0) }, bo;
	memcpy(ba.dims, a->dims, sizeof(int64_t) * (size_t)ba.rank);
	memcpy(bb.dims, b->dims, sizeof(int64_t) * (size_t)bb.rank);
	const struct ml_tval *bs[2] = { &ba, &bb };
	int rc = ml_broadcast_shape(2, bs, &bo, c->err);
	if (rc < 0)
		return ml_opfail(c, rc, "batch dims cannot broadcast");
	int r = bo.rank;
	if (ra > 1)
		bo.dims[r++] = m;
	if (rb > 1)
		bo.dims[r++] = n;
	if (r > ML_MAX_RANK)
		return ml_opfail(c, ML_ENOTSUP, "rank %d is over the maximum", r);
	ml_set_shape(o, dt, r, bo.dims);
	return 0;
}
