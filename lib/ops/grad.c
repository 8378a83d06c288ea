/*
 * grad.c: definitions of the grad family, the internal ("ml" domain) ops
 * that gradients and optimizers need where ONNX has no op: gradient kernels
 * of activations, pools, convolutions and normalizations, the losses'
 * gradients, training-mode BatchNormalization and Dropout, and the
 * side-effect ops that update stored tensors in place.
 *
 * Side-effect ops (Assign, EmaUpdate, SGDUpdate, AdamUpdate) have no
 * outputs: their kernels write into the data of their first input, which
 * must be a CONST or PARAM tensor of the graph. ml_graph_toposort places
 * nodes without outputs after all others, so they run after every reader
 * of what they overwrite. Their semantics (T is the target, G a gradient,
 * s the optional gradient scale of global norm clipping, 1 when absent):
 *
 *   Assign(T, V):                 T = V
 *   EmaUpdate(T, V) momentum=a:   T = a T + (1 - a) V
 *   SGDUpdate(P, G, lr[, M[, s]]) momentum, nesterov, weight_decay:
 *       g = s G + wd P; M = mu M + g; g = nesterov ? g + mu M : M; P -= lr g
 *       (with M absent: P -= lr g), as torch.optim.SGD with dampening 0
 *   AdamUpdate(P, G, lr, t, M, V[, s]) beta1, beta2, epsilon, weight_decay,
 *       decoupled: g = s G (+ wd P unless decoupled); M = b1 M + (1-b1) g;
 *       V = b2 V + (1-b2) g^2; P -= lr wd P when decoupled;
 *       P -= lr (M / (1-b1^t)) / (sqrt(V / (1-b2^t)) + eps), as torch.optim.Adam(W)
 *   SGDUpdate(P, G, lr, M, s, apply), AdamUpdate(P, G, lr, t, M, V, s, apply): the
 *       same, done only where the float scalar apply is not 0 (else nothing
 *       changes): gradient accumulation's optimizer step on the group's
 *       last micro-batch (M, s may be absent, "")
 *   SGDUpdate(P, G, lr, M, s, apply, S), AdamUpdate(P, G, lr, t, M, V, s, apply, S)
 *       accumulate=k: gradient accumulation with its sum S (a stored tensor
 *       shaped as P): where apply is 0, S += G and nothing else; else the
 *       update as above of the gradient (S + G) (1/k), and S = 0; one pass
 *       over the parameter-sized tensors either way
 *   GemmSGDUpdate(P, A, B, lr[, M[, apply, S]]) transA, transB, alpha and
 *       SGDUpdate's attributes: SGDUpdate(P, Gemm(A, B), lr[, M]) (with S,
 *       SGDUpdate(P, Gemm(A, B), lr, M, "", apply, S)), the weight gradient's
 *       product and the update (or the sum) in one pass (lib/train's ml_train_fuse)
 *   AllFinite(G...) -> f[, i]: scalars 1 when no G holds an inf or a nan, else 0; f of
 *       the Gs' float dtype, i int64: loss scaling's overflow check, the apply of the
 *       updates and the step counter's increment, in one read of the gradients
 *
 * Gradient ops (dy is the incoming gradient, the result has x's shape):
 *   ReluGrad(dy, y)               dy where y > 0, else 0 (y: Relu's output)
 *   UnaryGrad(dy, x) fn=NAME      dy f'(x) for fn in leaky_relu (alpha),
 *       gelu (approximate), silu, erf, sigmoid, tanh, exp, log, sqrt, softplus, abs
 *   MaxPoolGrad(dy, x), AveragePoolGrad(dy, x)   MaxPool's / AveragePool's attributes
 *   ConvGradInput(dy, W, x) -> dx; ConvGradFilter(dy, x, W) -> dW[, dB]   Conv's attributes
 *   BatchNormTraining(x, scale, B) epsilon -> y, batch mean [C], unbiased batch var [C]
 *   BatchNormTrainingGrad(dy, x, scale) epsilon -> dx, dscale, dB
 *   LayerNormGrad(dy, x, scale) axis, epsilon -> dx, dscale, dB
 *   SoftmaxCrossEntropyGrad(dl, scores, labels), NegativeLogLikelihoodGrad(dl, logp,
 *       labels): reduction, ignore_index as the losses
 *   BCEWithLogitsLoss(x, t) -> mean loss; BCEWithLogitsGrad(dl, x, t) -> dx
 *   DropoutTraining(x, rng) ratio, stream -> y, mask: rng is int64 [2] (seed, counter); the
 *       mask (x's dtype) is 0 or 1/(1-ratio), a hash of (seed, counter, stream, index)
 *   TrainGemm(A, B[, C[, R]]) Gemm's attributes, act -> Y: Gemm(A, B, C), then for act
 *       "relu" max(0, Y), for "relu_grad" Y where R > 0, else 0 (R shaped as Y; a Gemm
 *       and the Relu after it, or the ReluGrad after it, in one pass)
 */
#include "ops/grad.h"

static bool
float_ok(enum ml_dtype t)
{
	return t == ML_UNDEF || t == ML_F32 || t == ML_F64;
}

static int
need_in(struct ml_opctx *c, int n)
{
	for (int i = 0; i < n; i++)
		if (ML_IN(c, i) == NULL)
			return ml_opfail(c, ML_EINVAL, "input %d is required", i);
	return 0;
}

static int
need_float(struct ml_opctx *c, int i)
{
	const struct ml_tval *t = ML_IN(c, i);
	if (t != NULL && !float_ok(t->dtype))
		return ml_opfail(c, ML_ENOTSUP, "input %d: dtype %s is not supported", i,
				 ml_dtype_name(t->dtype));
	return 0;
}

/* same_dtype: inputs i and j, when present and known, have one dtype. */
static int
same_dtype(struct ml_opctx *c, int i, int j)
{
	const struct ml_tval *a = ML_IN(c, i), *b = ML_IN(c, j);
	if (a != NULL && b != NULL && a->dtype != ML_UNDEF && b->dtype != ML_UNDEF &&
	    a->dtype != b->dtype)
		return ml_opfail(c, ML_EINVAL, "inputs %d and %d have dtypes %s and %s", i, j,
				 ml_dtype_name(a->dtype), ml_dtype_name(b->dtype));
	return 0;
}

bool
ml_grad_same_shape(const struct ml_tval *a, const struct ml_tval *b)
{
	if (a->rank < 0 || b->rank < 0)
		return true;
	if (a->rank != b->rank)
		return false;
	for (int d = 0; d < a->rank; d++)
		if (a->dims[d] >= 0 && b->dims[d] >= 0 && a->dims[d] != b->dims[d])
			return false;
	return true;
}

static int
same_shape(struct ml_opctx *c, int i, int j)
{
	const struct ml_tval *a = ML_IN(c, i), *b = ML_IN(c, j);
	if (a != NULL && b != NULL && !ml_grad_same_shape(a, b))
		return ml_opfail(c, ML_EINVAL, "inputs %d and %d differ in shape", i, j);
	return 0;
}

/* numel_is: t is known to have n elements, or is unknown. */
static bool
numel_is(const struct ml_tval *t, int64_t n)
{
	int64_t k = ml_tval_numel(t);
	return k < 0 || k == n;
}

/* Assign, EmaUpdate: T and V agree in dtype and element count. */
static int
infer_assign(struct ml_opctx *c)
{
	ML_TRY(need_in(c, 2));
	ML_TRY(same_dtype(c, 0, 1));
	if (c->node->op == ML_OP_EMA_UPDATE)
		ML_TRY(need_float(c, 0));
	int64_t n = ml_tval_numel(c->in[0]);
	if (n >= 0 && !numel_is(c->in[1], n))
		return ml_opfail(c, ML_EINVAL, "target and value differ in size");
	return 0;
}

/* lr, t and s are scalars (one element). */
static int
need_scalar(struct ml_opctx *c, int i, bool is_float)
{
	const struct ml_tval *t = ML_IN(c, i);
	if (t == NULL)
		return 0;
	if (!numel_is(t, 1))
		return ml_opfail(c, ML_EINVAL, "input %d must be a scalar", i);
	if (is_float && t->dtype != ML_UNDEF && t->dtype != ML_F32 && t->dtype != ML_F64)
		return ml_opfail(c, ML_EINVAL, "input %d must be a float scalar", i);
	if (!is_float && t->dtype != ML_UNDEF && t->dtype != ML_I64)
		return ml_opfail(c, ML_EINVAL, "input %d must be an int64 scalar", i);
	return 0;
}

static int
infer_sgd(struct ml_opctx *c)
{
	ML_TRY(need_in(c, 3));
	ML_TRY(need_float(c, 0));
	ML_TRY(same_dtype(c, 0, 1));
	ML_TRY(same_dtype(c, 0, 3));
	ML_TRY(same_shape(c, 0, 1));
	ML_TRY(same_shape(c, 0, 3));
	ML_TRY(need_scalar(c, 2, true));
	ML_TRY(need_scalar(c, 4, true));
	ML_TRY(need_scalar(c, 5, true));
	ML_TRY(same_dtype(c, 0, 6));
	ML_TRY(same_shape(c, 0, 6));
	return 0;
}

static int
infer_adam(struct ml_opctx *c)
{
	ML_TRY(need_in(c, 6));
	ML_TRY(need_float(c, 0));
	for (int i = 1; i < 6; i++)
		if (i != 2 && i != 3) {
			ML_TRY(same_dtype(c, 0, i));
			ML_TRY(same_shape(c, 0, i));
		}
	ML_TRY(need_scalar(c, 2, true));
	ML_TRY(need_scalar(c, 3, false));
	ML_TRY(need_scalar(c, 6, true));
	ML_TRY(need_scalar(c, 7, true));
	ML_TRY(same_dtype(c, 0, 8));
	ML_TRY(same_shape(c, 0, 8));
	return 0;
}

/* dy and x (inputs 0 and 1) of one dtype and shape; the result is like x. */
static int
infer_pointwise_grad(struct ml_opctx *c)
{
	ML_TRY(need_in(c, 2));
	ML_TRY(need_float(c, 0));
	ML_TRY(same_dtype(c, 0, 1));
	ML_TRY(same_shape(c, 0, 1));
	if (c->node->op == ML_OP_UNARY_GRAD) {
		int fn = ml_unary_grad_fn(ml_attr_str(c->node, "fn", ""));
		if (fn < 0)
			return ml_opfail(c, ML_EINVAL, "fn '%s' is not a known function",
					 ml_attr_str(c->node, "fn", ""));
	}
	ml_set_shape(c->out[0], c->in[1]->dtype, c->in[1]->rank, c->in[1]->dims);
	return 0;
}

int
ml_unary_grad_fn(const char *s)
{
	static const struct {
		const char *name;
		int code;
		bool ug;
	} rows[] = {
#define ROW(id, op, act, fe, ug, nm) { nm, ML_UN_##id, ug },
		ML_UNARY_LIST(ROW)
#undef ROW
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		if (rows[i].ug && strcmp(s, rows[i].name) == 0)
			return rows[i].code;
	return -1;
}

/*
 * geom: the forward node's geometry for a pool or conv gradient: op as
 * the forward op, x and w as its inputs.
 */
int
ml_grad_geom(struct ml_opctx *c, enum ml_op op, const struct ml_tval *x, const struct ml_tval *w,
	     struct ml_conv_geom *g)
{
	struct ml_node nn = *c->node;
	struct ml_tval *in[2] = { (struct ml_tval *)x, (struct ml_tval *)w };
	struct ml_opctx cc = *c;
	nn.op = op;
	cc.node = &nn;
	cc.in = in;
	cc.n_in = w != NULL ? 2 : 1;
	return ml_conv_geom(&cc, g);
}

/* MaxPoolGrad, AveragePoolGrad (dy, x): dy has the pool's output shape; dx is like x. */
static int
infer_pool_grad(struct ml_opctx *c)
{
	struct ml_conv_geom g;
	ML_TRY(need_in(c, 2));
	ML_TRY(need_float(c, 0));
	ML_TRY(same_dtype(c, 0, 1));
	enum ml_op op = c->node->op == ML_OP_MAXPOOL_GRAD ? ML_OP_MAX_POOL : ML_OP_AVERAGE_POOL;
	ML_TRY(ml_grad_geom(c, op, c->in[1], NULL, &g));
	const struct ml_tval *dy = c->in[0];
	if (g.nsp > 0 && dy->rank >= 0) {
		bool ok = dy->rank == g.nsp + 2;
		for (int i = 0; ok && i < g.nsp; i++)
			ok = dy->dims[2 + i] < 0 || g.out[i] < 0 || dy->dims[2 + i] == g.out[i];
		for (int i = 0; ok && i < 2; i++)
			ok = dy->dims[i] < 0 || c->in[1]->dims[i] < 0 ||
			     dy->dims[i] == c->in[1]->dims[i];
		if (!ok)
			return ml_opfail(c, ML_EINVAL, "dy does not have the pool's output shape");
	}
	ml_set_shape(c->out[0], c->in[1]->dtype, c->in[1]->rank, c->in[1]->dims);
	return 0;
}

/* ConvGradInput (dy, W, x) -> like x; ConvGradFilter (dy, x, W) -> like W. */
static int
infer_conv_grad(struct ml_opctx *c)
{
	struct ml_conv_geom g;
	bool gi = c->node->op == ML_OP_CONV_GRAD_INPUT;
	const struct ml_tval *x = gi ? ML_IN(c, 2) : ML_IN(c, 1), *w = gi ? ML_IN(c, 1) : ML_IN(c, 2);
	ML_TRY(need_in(c, 3));
	for (int i = 0; i < 3; i++) {
		ML_TRY(need_float(c, i));
		ML_TRY(same_dtype(c, 0, i));
	}
	ML_TRY(ml_grad_geom(c, ML_OP_CONV, x, w, &g));
	const struct ml_tval *dy = c->in[0];
	if (g.nsp > 0 && dy->rank >= 0) {
		bool ok = dy->rank == g.nsp + 2;
		for (int i = 0; ok && i < g.nsp; i++)
			ok = dy->dims[2 + i] < 0 || g.out[i] < 0 || dy->dims[2 + i] == g.out[i];
		ok = ok && (dy->dims[1] < 0 || g.cout < 0 || dy->dims[1] == g.cout);
		ok = ok && (dy->dims[0] < 0 || g.n < 0 || dy->dims[0] == g.n);
		if (!ok)
			return ml_opfail(c, ML_EINVAL, "dy does not have the convolution's output shape");
	}
	const struct ml_tval *r = gi ? x : w;
	ml_set_shape(c->out[0], r->dtype, r->rank, r->dims);
	if (c->n_out > 1) {
		if (gi)
			return ml_opfail(c, ML_EINVAL, "has only one output");
		int64_t co = w->rank >= 1 ? w->dims[0] : -1;
		ml_set_shape(c->out[1], w->dtype, 1, &co);
	}
	return 0;
}

/* channel vectors of BatchNormTraining(Grad): scale [C] and B [C]. */
static int
check_channel(struct ml_opctx *c, int i, int64_t ch)
{
	const struct ml_tval *t = ML_IN(c, i);
	if (t == NULL || t->rank < 0)
		return 0;
	if (t->rank != 1 || (ch >= 0 && t->dims[0] >= 0 && t->dims[0] != ch))
		return ml_opfail(c, ML_EINVAL, "input %d must be a vector of the %lld channels", i,
				 (long long)ch);
	return 0;
}

static int
infer_bn(struct ml_opctx *c)
{
	bool grad = c->node->op == ML_OP_BN_TRAINING_GRAD;
	int xi = grad ? 1 : 0, si = grad ? 2 : 1;
	ML_TRY(need_in(c, 3));
	for (int i = 0; i < 3; i++) {
		ML_TRY(need_float(c, i));
		ML_TRY(same_dtype(c, 0, i));
	}
	const struct ml_tval *x = c->in[xi];
	if (x->rank >= 0 && x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "X must have rank 2 or more");
	int64_t ch = x->rank >= 2 ? x->dims[1] : -1;
	ML_TRY(check_channel(c, si, ch));
	if (!grad)
		ML_TRY(check_channel(c, 2, ch));
	else
		ML_TRY(same_shape(c, 0, 1));
	ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
	for (int j = 1; j < c->n_out; j++)
		ml_set_shape(c->out[j], x->dtype, 1, &ch);
	return 0;
}

int
ml_grad_ln_axis(struct ml_opctx *c, int rank, int *axis)
{
	return ml_norm_axis(c, ml_attr_int(c->node, "axis", -1), rank, axis);
}

static int
infer_ln_grad(struct ml_opctx *c)
{
	ML_TRY(need_in(c, 3));
	for (int i = 0; i < 3; i++) {
		ML_TRY(need_float(c, i));
		ML_TRY(same_dtype(c, 0, i));
	}
	ML_TRY(same_shape(c, 0, 1));
	const struct ml_tval *x = c->in[1], *s = c->in[2];
	ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
	if (x->rank >= 0) {
		int ax;
		ML_TRY(ml_grad_ln_axis(c, x->rank, &ax));
		if (s->rank >= 0) {
			bool ok = s->rank == x->rank - ax;
			for (int d = 0; ok && d < s->rank; d++)
				ok = s->dims[d] < 0 || x->dims[ax + d] < 0 || s->dims[d] == x->dims[ax + d];
			if (!ok)
				return ml_opfail(c, ML_EINVAL, "scale must have X's shape from axis %d", ax);
		}
		for (int j = 1; j < c->n_out; j++)
			ml_set_shape(c->out[j], x->dtype, x->rank - ax, x->dims + ax);
	} else {
		for (int j = 1; j < c->n_out; j++)
			ml_set_shape(c->out[j], s->dtype, s->rank, s->dims);
	}
	return 0;
}

/* SoftmaxCrossEntropyGrad / NegativeLogLikelihoodGrad (dl, scores, labels). */
static int
infer_loss_grad(struct ml_opctx *c)
{
	ML_TRY(need_in(c, 3));
	ML_TRY(need_float(c, 0));
	ML_TRY(same_dtype(c, 0, 1));
	const struct ml_tval *x = c->in[1], *t = c->in[2];
	const char *r = ml_attr_str(c->node, "reduction", "mean");
	if (strcmp(r, "mean") != 0 && strcmp(r, "sum") != 0 && strcmp(r, "none") != 0)
		return ml_opfail(c, ML_EINVAL, "reduction '%s' is not none, sum or mean", r);
	if (t->dtype != ML_UNDEF && t->dtype != ML_I64 && t->dtype != ML_I32)
		return ml_opfail(c, ML_EINVAL, "labels must be int32 or int64");
	if (x->rank >= 0 && x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "scores must have rank 2 or more");
	if (x->rank >= 0 && t->rank >= 0) {
		bool ok = t->rank == x->rank - 1 && (t->dims[0] < 0 || x->dims[0] < 0 ||
						     t->dims[0] == x->dims[0]);
		for (int d = 1; ok && d < t->rank; d++)
			ok = t->dims[d] < 0 || x->dims[d + 1] < 0 || t->dims[d] == x->dims[d + 1];
		if (!ok)
			return ml_opfail(c, ML_EINVAL, "labels must be scores' shape without dim 1");
	}
	const struct ml_tval *dl = c->in[0];
	if (strcmp(r, "none") != 0 && !numel_is(dl, 1))
		return ml_opfail(c, ML_EINVAL, "the loss gradient must be a scalar");
	if (strcmp(r, "none") == 0 && !ml_grad_same_shape(dl, t))
		return ml_opfail(c, ML_EINVAL, "the loss gradient must have the labels' shape");
	ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
	return 0;
}

static int
infer_bce(struct ml_opctx *c)
{
	bool grad = c->node->op == ML_OP_BCE_LOGITS_GRAD;
	int xi = grad ? 1 : 0;
	ML_TRY(need_in(c, grad ? 3 : 2));
	for (int i = 0; i < c->n_in; i++) {
		ML_TRY(need_float(c, i));
		ML_TRY(same_dtype(c, 0, i));
	}
	ML_TRY(same_shape(c, xi, xi + 1));
	if (grad && !numel_is(c->in[0], 1))
		return ml_opfail(c, ML_EINVAL, "the loss gradient must be a scalar");
	const struct ml_tval *x = c->in[xi];
	if (grad)
		ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
	else
		ml_set_shape(c->out[0], x->dtype, 0, NULL);
	return 0;
}

static int
infer_dropout(struct ml_opctx *c)
{
	ML_TRY(need_in(c, 2));
	ML_TRY(need_float(c, 0));
	const struct ml_tval *x = c->in[0], *r = c->in[1];
	if ((r->dtype != ML_UNDEF && r->dtype != ML_I64) || !numel_is(r, 2))
		return ml_opfail(c, ML_EINVAL, "rng must be int64 [2] (seed, counter)");
	double p = ml_attr_float(c->node, "ratio", 0.5);
	if (!(p >= 0 && p < 1))
		return ml_opfail(c, ML_EINVAL, "ratio must be in [0, 1)");
	for (int j = 0; j < c->n_out; j++)
		ml_set_shape(c->out[j], x->dtype, x->rank, x->dims);
	return 0;
}

/* tg_shape: [m, n] of op(A) op(B) (inputs ia and ia + 1; -1 where unknown). */
static int
tg_shape(struct ml_opctx *c, int ia, int64_t *m, int64_t *n, int64_t *k)
{
	const struct ml_tval *a = c->in[ia], *b = c->in[ia + 1];
	bool ta = ml_attr_int(c->node, "transA", 0) != 0, tb = ml_attr_int(c->node, "transB", 0) != 0;
	*m = *n = *k = -1;
	if ((a->rank >= 0 && a->rank != 2) || (b->rank >= 0 && b->rank != 2))
		return ml_opfail(c, ML_EINVAL, "A and B must be 2-D");
	int64_t kb = -1;
	if (a->rank == 2) {
		*m = a->dims[ta ? 1 : 0];
		*k = a->dims[ta ? 0 : 1];
	}
	if (b->rank == 2) {
		kb = b->dims[tb ? 1 : 0];
		*n = b->dims[tb ? 0 : 1];
	}
	if (*k >= 0 && kb >= 0 && *k != kb)
		return ml_opfail(c, ML_EINVAL, "inner dims differ (%lld vs %lld)", (long long)*k,
				 (long long)kb);
	return 0;
}

static int
infer_train_gemm(struct ml_opctx *c)
{
	int64_t dims[2], k;
	ML_TRY(need_in(c, 2));
	ML_TRY(need_float(c, 0));
	ML_TRY(same_dtype(c, 0, 1));
	ML_TRY(same_dtype(c, 0, 2));
	ML_TRY(same_dtype(c, 0, 3));
	ML_TRY(tg_shape(c, 0, &dims[0], &dims[1], &k));
	const char *act = ml_attr_str(c->node, "act", "none");
	if (strcmp(act, "none") != 0 && strcmp(act, "relu") != 0 && strcmp(act, "relu_grad") != 0)
		return ml_opfail(c, ML_EINVAL, "unknown act '%s'", act);
	if (strcmp(act, "relu_grad") == 0 && ML_IN(c, 3) == NULL)
		return ml_opfail(c, ML_EINVAL, "act relu_grad needs the mask R (input 3)");
	const struct ml_tval *r = ML_IN(c, 3);
	if (r != NULL && dims[0] >= 0 && dims[1] >= 0 && !numel_is(r, dims[0] * dims[1]))
		return ml_opfail(c, ML_EINVAL, "R must have Y's shape");
	ml_set_shape(c->out[0], c->in[0]->dtype, 2, dims);
	return 0;
}

static int
infer_gemm_sgd(struct ml_opctx *c)
{
	int64_t m, n, k;
	ML_TRY(need_in(c, 4));
	ML_TRY(need_float(c, 0));
	ML_TRY(same_dtype(c, 0, 1));
	ML_TRY(same_dtype(c, 0, 2));
	ML_TRY(same_dtype(c, 0, 4));
	ML_TRY(same_shape(c, 0, 4));
	ML_TRY(need_scalar(c, 3, true));
	ML_TRY(need_scalar(c, 5, true));
	ML_TRY(same_dtype(c, 0, 6));
	ML_TRY(same_shape(c, 0, 6));
	ML_TRY(tg_shape(c, 1, &m, &n, &k));
	if (m >= 0 && n >= 0 && !numel_is(c->in[0], m * n))
		return ml_opfail(c, ML_EINVAL, "P must have the product's shape");
	return 0;
}

/* 2 m n k for the product of inputs ia, ia + 1 */
static int64_t
flops_tg(const struct ml_opctx *c)
{
	int ia = c->node->op == ML_OP_GEMM_SGD_UPDATE;
	int64_t m, n, k;
	struct ml_opctx cc = *c;
	if (c->n_in < ia + 2 || c->in[ia] == NULL || c->in[ia + 1] == NULL ||
	    tg_shape(&cc, ia, &m, &n, &k) < 0 || m < 0 || n < 0 || k < 0)
		return 0;
	return 2 * m * n * k;
}

static int64_t
flops_numel(const struct ml_opctx *c)
{
	int64_t n = c->n_in > 0 && c->in[0] != NULL ? ml_tval_numel(c->in[0]) : -1;
	return n < 0 ? 0 : n;
}

static int64_t
flops_conv_grad(const struct ml_opctx *c)
{
	struct ml_conv_geom g;
	bool gi = c->node->op == ML_OP_CONV_GRAD_INPUT;
	struct ml_opctx cc = *c;
	if (c->n_in < 3 || c->in[1] == NULL || c->in[2] == NULL ||
	    ml_grad_geom(&cc, ML_OP_CONV, gi ? c->in[2] : c->in[1], gi ? c->in[1] : c->in[2],
			 &g) < 0 || g.nsp == 0 || g.n < 0 || g.cin < 0 || g.cout < 0)
		return 0;
	int64_t f = 2 * g.n * g.cout * (g.cin / g.group);
	for (int i = 0; i < g.nsp; i++) {
		if (g.out[i] < 0)
			return 0;
		f *= g.out[i] * g.k[i];
	}
	return f;
}

/* AllFinite(G...) -> f[, i]: float inputs of one dtype; scalar outputs */
static int
infer_all_finite(struct ml_opctx *c)
{
	ML_TRY(need_in(c, 1));
	for (int i = 0; i < c->n_in; i++) {
		ML_TRY(need_float(c, i));
		ML_TRY(same_dtype(c, 0, i));
	}
	ml_set_shape(c->out[0], c->in[0]->dtype, 0, NULL);
	if (c->n_out > 1 && c->out[1] != NULL)
		ml_set_shape(c->out[1], ML_I64, 0, NULL);
	return 0;
}

const struct ml_opdef ml_opdefs_grad[] = {
	{ ML_OP_ASSIGN, 2, 2, 0, 0, infer_assign, NULL, .flags = ML_OPF_SIDE_EFFECT },
	{ ML_OP_EMA_UPDATE, 2, 2, 0, 0, infer_assign, flops_numel, .flags = ML_OPF_SIDE_EFFECT },
	{ ML_OP_SGD_UPDATE, 3, 7, 0, 0, infer_sgd, flops_numel, .flags = ML_OPF_SIDE_EFFECT },
	{ ML_OP_ADAM_UPDATE, 6, 9, 0, 0, infer_adam, flops_numel, .flags = ML_OPF_SIDE_EFFECT },
	{ ML_OP_RELU_GRAD, 2, 2, 1, 1, infer_pointwise_grad, flops_numel },
	{ ML_OP_UNARY_GRAD, 2, 2, 1, 1, infer_pointwise_grad, flops_numel },
	{ ML_OP_MAXPOOL_GRAD, 2, 2, 1, 1, infer_pool_grad, flops_numel },
	{ ML_OP_AVGPOOL_GRAD, 2, 2, 1, 1, infer_pool_grad, flops_numel },
	{ ML_OP_CONV_GRAD_INPUT, 3, 3, 1, 1, infer_conv_grad, flops_conv_grad },
	{ ML_OP_CONV_GRAD_FILTER, 3, 3, 1, 2, infer_conv_grad, flops_conv_grad },
	{ ML_OP_BN_TRAINING, 3, 3, 1, 3, infer_bn, flops_numel, .weights = 6 },
	{ ML_OP_BN_TRAINING_GRAD, 3, 3, 1, 3, infer_bn, flops_numel },
	{ ML_OP_LN_GRAD, 3, 3, 1, 3, infer_ln_grad, flops_numel },
	{ ML_OP_SCE_GRAD, 3, 3, 1, 1, infer_loss_grad, flops_numel },
	{ ML_OP_NLL_GRAD, 3, 3, 1, 1, infer_loss_grad, flops_numel },
	{ ML_OP_BCE_LOGITS, 2, 2, 1, 1, infer_bce, flops_numel },
	{ ML_OP_BCE_LOGITS_GRAD, 3, 3, 1, 1, infer_bce, flops_numel },
	{ ML_OP_DROPOUT_TRAINING, 2, 2, 1, 2, infer_dropout, flops_numel, .flags = ML_OPF_RANDOM },
	{ ML_OP_TRAIN_GEMM, 2, 4, 1, 1, infer_train_gemm, flops_tg },
	{ ML_OP_GEMM_SGD_UPDATE, 4, 7, 0, 0, infer_gemm_sgd, flops_tg,
	  .flags = ML_OPF_SIDE_EFFECT },
	{ ML_OP_ALL_FINITE, 1, -1, 1, 2, infer_all_finite, flops_numel },
	{ .op = ML_OP_NONE },
};
