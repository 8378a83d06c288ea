/*
 * rnn.c: definitions (arity, shape and dtype inference, FLOP estimates) of
 * the rnn op family: RNN, GRU and LSTM. X is [seq, batch, input] (layout
 * 0) or [batch, seq, input] (layout 1); W, R and B hold one slice per
 * direction.
 */
#include "ml_impl.h"

/* gates: how many weight blocks each op stacks in W and R. */
static int
gates(enum ml_op op)
{
	return op == ML_OP_LSTM ? 4 : op == ML_OP_GRU ? 3 : 1;
}

static int
check_rank(struct ml_opctx *c, const struct ml_tval *t, int i, int rank)
{
	if (t != NULL && t->rank >= 0 && t->rank != rank)
		return ml_opfail(c, ML_EINVAL, "input %d must have rank %d, not %d", i, rank, t->rank);
	return 0;
}

/* check_dim: dim d of input i, where known, is want (want -1: anything). */
static int
check_dim(struct ml_opctx *c, int i, int d, int64_t want)
{
	const struct ml_tval *t = ML_IN(c, i);

	if (t == NULL || t->rank <= d || want < 0 || t->dims[d] < 0 || t->dims[d] == want)
		return 0;
	return ml_opfail(c, ML_EINVAL, "input %d has %lld at dim %d, not %lld", i,
			 (long long)t->dims[d], d, (long long)want);
}

static int
infer_rnn(struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0), *w = ML_IN(c, 1), *r = ML_IN(c, 2);
	const char *dir = ml_attr_str(c->node, "direction", "forward");
	int64_t layout = ml_attr_int(c->node, "layout", 0);
	int64_t h = ml_attr_int(c->node, "hidden_size", -1);
	int ng = gates(c->node->op);
	int64_t dirs;

	if (x == NULL || w == NULL || r == NULL)
		return ml_opfail(c, ML_EINVAL, "X, W and R are required");
	if (strcmp(dir, "forward") == 0 || strcmp(dir, "reverse") == 0)
		dirs = 1;
	else if (strcmp(dir, "bidirectional") == 0)
		dirs = 2;
	else
		return ml_opfail(c, ML_EINVAL, "unknown direction \"%s\"", dir);
	if (layout != 0 && layout != 1)
		return ml_opfail(c, ML_EINVAL, "layout must be 0 or 1");
	for (int i = 0; i < 3; i++)
		ML_TRY(check_rank(c, c->in[i], i, 3));
	bool given = ml_attr_find(c->node, "hidden_size") != NULL;
	if (!given && r->rank == 3)
		h = r->dims[2];
	if ((given && h <= 0) || h == 0 || h > ((int64_t)1 << 30))
		return ml_opfail(c, ML_EINVAL, "hidden_size is out of range");
	enum ml_dtype dt = x->dtype;
	if (dt != ML_UNDEF && dt != ML_F32 && dt != ML_F16 && dt != ML_BF16)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(dt));
	for (int i = 1; i < c->n_in; i++) {
		const struct ml_tval *t = c->in[i];
		if (t != NULL && i != 4 && t->dtype != ML_UNDEF && dt != ML_UNDEF && t->dtype != dt)
			return ml_opfail(c, ML_EINVAL, "input %d has dtype %s, X %s", i,
					 ml_dtype_name(t->dtype), ml_dtype_name(dt));
	}
	const struct ml_tval *sl = ML_IN(c, 4);
	if (sl != NULL && sl->dtype != ML_UNDEF && sl->dtype != ML_I32 && sl->dtype != ML_I64)
		return ml_opfail(c, ML_EINVAL, "sequence_lens must be int32");
	int64_t seq = x->rank == 3 ? x->dims[layout ? 1 : 0] : -1;
	int64_t batch = x->rank == 3 ? x->dims[layout ? 0 : 1] : -1;
	int64_t in = x->rank == 3 ? x->dims[2] : -1;
	ML_TRY(check_dim(c, 1, 0, dirs));
	ML_TRY(check_dim(c, 1, 1, h < 0 ? -1 : ng * h));
	ML_TRY(check_dim(c, 1, 2, in));
	ML_TRY(check_dim(c, 2, 0, dirs));
	ML_TRY(check_dim(c, 2, 1, h < 0 ? -1 : ng * h));
	ML_TRY(check_dim(c, 2, 2, h));
	ML_TRY(check_rank(c, ML_IN(c, 3), 3, 2));
	ML_TRY(check_dim(c, 3, 1, h < 0 ? -1 : 2 * ng * h));
	ML_TRY(check_rank(c, sl, 4, 1));
	ML_TRY(check_dim(c, 4, 0, batch));
	for (int i = 5; i < 7 && i < c->n_in; i++) {
		if (i == 6 && c->node->op != ML_OP_LSTM)
			break;
		ML_TRY(check_rank(c, ML_IN(c, i), i, 3));
		ML_TRY(check_dim(c, i, layout ? 1 : 0, dirs));
		ML_TRY(check_dim(c, i, layout ? 0 : 1, batch));
		ML_TRY(check_dim(c, i, 2, h));
	}
	if (c->node->op == ML_OP_LSTM) {
		ML_TRY(check_rank(c, ML_IN(c, 7), 7, 2));
		ML_TRY(check_dim(c, 7, 1, h < 0 ? -1 : 3 * h));
	}
	int64_t ydims[4], hdims[3];
	if (layout == 0) {
		int64_t y[4] = { seq, dirs, batch, h }, hh[3] = { dirs, batch, h };
		memcpy(ydims, y, sizeof y);
		memcpy(hdims, hh, sizeof hh);
	} else {
		int64_t y[4] = { batch, seq, dirs, h }, hh[3] = { batch, dirs, h };
		memcpy(ydims, y, sizeof y);
		memcpy(hdims, hh, sizeof hh);
	}
	if (c->n_out > 0)
		ml_set_shape(c->out[0], dt, 4, ydims);
	for (int j = 1; j < c->n_out; j++)
		ml_set_shape(c->out[j], dt, 3, hdims);
	return 0;
}

/* Two FLOPs per multiply-add of the input and recurrent products, per step and direction. */
static int64_t
flops_rnn(const struct ml_opctx *c)
{
	const struct ml_tval *x = ML_IN(c, 0), *w = ML_IN(c, 1), *r = ML_IN(c, 2);
	int64_t layout = ml_attr_int(c->node, "layout", 0);

	if (x == NULL || w == NULL || r == NULL || x->rank != 3 || w->rank != 3 || r->rank != 3)
		return 0;
	int64_t f[6] = { 2, x->dims[layout ? 1 : 0], x->dims[layout ? 0 : 1], w->dims[0], w->dims[1],
			 w->dims[2] < 0 || r->dims[2] < 0 ? -1 : w->dims[2] + r->dims[2] };
	int64_t p = 1;
	for (int i = 0; i < 6; i++)
		if (f[i] < 0 || !ml_mul_ok(p, f[i], &p))
			return 0;
	return p;
}

const struct ml_opdef ml_opdefs_rnn[] = {
	{ ML_OP_RNN, 3, 6, 0, 2, infer_rnn, flops_rnn },
	{ ML_OP_GRU, 3, 6, 0, 2, infer_rnn, flops_rnn },
	{ ML_OP_LSTM, 3, 8, 0, 3, infer_rnn, flops_rnn },
	{ .op = ML_OP_NONE },
};
