/*
 * shape.c: definitions (arity, shape and dtype inference) of the shape op
 * family: reshapes, layout changes, slicing and joining, index ops, and
 * Resize. Inference reads input values where they are known (a Reshape's
 * shape, a Slice's starts) to give exact shapes, and -1 dims where not.
 */
#include "ops/shape.h"

static int
need(struct ml_opctx *c, int i)
{
	if (ML_IN(c, i) == NULL)
		return ml_opfail(c, ML_EINVAL, "input %d is required", i);
	return 0;
}

static int
check_rank(struct ml_opctx *c, int rank)
{
	if (rank > ML_MAX_RANK)
		return ml_opfail(c, ML_ENOTSUP, "rank %d is over the maximum of %d", rank,
				 ML_MAX_RANK);
	return 0;
}

static int
check_index_dtype(struct ml_opctx *c, const struct ml_tval *t, const char *what)
{
	if (t->dtype != ML_UNDEF && t->dtype != ML_I64 && t->dtype != ML_I32)
		return ml_opfail(c, ML_EINVAL, "%s must be int32 or int64, not %s", what,
				 ml_dtype_name(t->dtype));
	return 0;
}

int
ml_shape_ints(struct ml_opctx *c, const struct ml_tval *t, int64_t *v, int max, const char *what)
{
	int64_t n = ml_tval_numel(t);

	if (!ml_dtype_is_int(t->dtype))
		return ml_opfail(c, ML_EINVAL, "%s must be an integer tensor, not %s", what,
				 ml_dtype_name(t->dtype));
	if (t->rank > 1 || n < 0)
		return ml_opfail(c, ML_EINVAL, "%s must be a 1-D tensor", what);
	if (n > max)
		return ml_opfail(c, ML_EINVAL, "%s has %lld values, over the %d allowed", what,
				 (long long)n, max);
	for (int64_t i = 0; i < n; i++)
		v[i] = ml_get_i64(t->data, t->dtype, i);
	return (int)n;
}

/*
 * axes_attr_or_input: the axes of Squeeze/Unsqueeze (and the like): the
 * attribute before opset 13, input 1 from 13 (either is accepted). Returns
 * the count, 0 with *have false when there are none, and -2 in *have's
 * place (via *unknown) when the input's value is not known.
 */
static int
axes_of(struct ml_opctx *c, int input, int64_t *v, int max, bool *have, bool *unknown)
{
	const int64_t *a;
	int n = ml_attr_ints(c->node, "axes", &a);
	const struct ml_tval *t = ML_IN(c, input);

	*have = false;
	*unknown = false;
	if (n >= 0) {
		if (n > max)
			return ml_opfail(c, ML_EINVAL, "too many axes (%d)", n);
		memcpy(v, a, (size_t)n * sizeof *v);
		*have = true;
		return n;
	}
	if (t == NULL)
		return 0;
	if (!ml_shape_known(t)) {
		*unknown = true;
		return 0;
	}
	*have = true;
	return ml_shape_ints(c, t, v, max, "axes");
}

/* norm_axes: map axes to [0, rank) and refuse repeats. */
static int
norm_axes(struct ml_opctx *c, int64_t *v, int n, int rank)
{
	for (int i = 0; i < n; i++) {
		int a;
		ML_TRY(ml_norm_axis(c, v[i], rank, &a));
		v[i] = a;
		for (int j = 0; j < i; j++)
			if (v[j] == a)
				return ml_opfail(c, ML_EINVAL, "axis %d is repeated", a);
	}
	return 0;
}

static int
infer_identity(struct ml_opctx *c)
{
	return ml_infer_same(c);
}

/*
 * Reshape: 0 copies the input's dim (unless allowzero), -1 takes what is
 * left of the element count. Without the shape's value only its length,
 * the output rank, is known.
 */
static int
infer_reshape(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *s = ML_IN(c, 1), *o = c->out[0];
	int64_t v[ML_MAX_RANK];
	bool allowzero = ml_attr_int(c->node, "allowzero", 0) != 0;

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(check_index_dtype(c, s, "shape"));
	o->dtype = x->dtype;
	if (!ml_shape_known(s)) {
		o->rank = -1;
		if (s->rank == 1 && s->dims[0] >= 0) {
			ML_TRY(check_rank(c, (int)s->dims[0]));
			ml_set_shape(o, x->dtype, (int)s->dims[0], NULL);
		}
		return 0;
	}
	int n = ml_shape_ints(c, s, v, ML_MAX_RANK, "shape");
	ML_TRY(n);
	int neg = -1;
	bool zero = false, prod_known = true;
	int64_t prod = 1;
	for (int i = 0; i < n; i++) {
		int64_t d = v[i];
		if (d == 0 && !allowzero) {
			if (x->rank >= 0 && i >= x->rank)
				return ml_opfail(c, ML_EINVAL, "shape[%d] is 0 but the input has rank %d",
						 i, x->rank);
			d = x->rank >= 0 ? x->dims[i] : -1;
		} else if (d == -1) {
			if (neg >= 0)
				return ml_opfail(c, ML_EINVAL, "shape has more than one -1");
			neg = i;
			continue;
		} else if (d < -1) {
			return ml_opfail(c, ML_EINVAL, "shape[%d] is %lld", i, (long long)d);
		}
		if (d == 0)
			zero = true;
		o->dims[i] = d;
		if (d < 0)
			prod_known = false;
		else if (!ml_mul_ok(prod, d, &prod))
			return ml_opfail(c, ML_EINVAL, "shape overflows");
	}
	o->rank = n;
	int64_t total = ml_tval_numel(x);
	if (neg >= 0) {
		if (allowzero && zero)
			return ml_opfail(c, ML_EINVAL, "shape has both 0 and -1 with allowzero");
		o->dims[neg] = -1;
		if (total < 0 && x->rank >= 0) {
			/*
			 * An unknown dim that a 0 copies cancels out: [0, -1] over
			 * [?, 3, 4] is [?, 12], the common reshape(batch, -1).
			 */
			int64_t in_rest = 1, out_rest = 1;
			bool ok = true;
			for (int i = 0; i < x->rank && ok; i++) {
				bool copied = !allowzero && i < n && v[i] == 0;
				if (!copied)
					ok = x->dims[i] >= 0 && ml_mul_ok(in_rest, x->dims[i], &in_rest);
			}
			for (int i = 0; i < n && ok; i++) {
				bool copied = !allowzero && v[i] == 0;
				if (i != neg && !copied)
					ok = ml_mul_ok(out_rest, v[i], &out_rest);
			}
			if (ok && out_rest > 0 && in_rest % out_rest == 0)
				o->dims[neg] = in_rest / out_rest;
		}
		if (total >= 0 && prod_known) {
			if (prod == 0) {
				if (total != 0)
					return ml_opfail(c, ML_EINVAL, "cannot infer -1 beside a 0 dim");
				o->dims[neg] = 0;
			} else {
				if (total % prod != 0)
					return ml_opfail(c, ML_EINVAL,
							 "%lld elements do not reshape to a multiple of %lld",
							 (long long)total, (long long)prod);
				o->dims[neg] = total / prod;
			}
		}
	} else if (total >= 0 && prod_known && total != prod) {
		return ml_opfail(c, ML_EINVAL, "cannot reshape %lld elements into %lld",
				 (long long)total, (long long)prod);
	}
	return 0;
}

static int
infer_flatten(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];
	int64_t axis = ml_attr_int(c->node, "axis", 1);

	ML_TRY(need(c, 0));
	ml_set_shape(o, x->dtype, 2, NULL);
	if (x->rank < 0)
		return 0;
	if (axis < -x->rank || axis > x->rank)
		return ml_opfail(c, ML_EINVAL, "axis %lld is out of range for rank %d",
				 (long long)axis, x->rank);
	if (axis < 0)
		axis += x->rank;
	int64_t a = 1, b = 1;
	for (int i = 0; i < x->rank; i++) {
		int64_t *p = i < axis ? &a : &b;
		if (x->dims[i] < 0 || *p < 0)
			*p = -1;
		else if (!ml_mul_ok(*p, x->dims[i], p))
			return ml_opfail(c, ML_EINVAL, "shape overflows");
	}
	o->dims[0] = a;
	o->dims[1] = b;
	return 0;
}

static int
infer_squeeze(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];
	int64_t ax[ML_MAX_RANK];
	bool have, unknown;
	int n;

	ML_TRY(need(c, 0));
	ML_TRY(n = axes_of(c, 1, ax, ML_MAX_RANK, &have, &unknown));
	o->dtype = x->dtype;
	o->rank = -1;
	if (x->rank < 0 || unknown)
		return 0;
	if (have) {
		bool drop[ML_MAX_RANK] = { false };
		ML_TRY(norm_axes(c, ax, n, x->rank));
		for (int i = 0; i < n; i++) {
			if (x->dims[ax[i]] > 1 || x->dims[ax[i]] == 0)
				return ml_opfail(c, ML_EINVAL, "dim %lld has size %lld, not 1",
						 (long long)ax[i], (long long)x->dims[ax[i]]);
			drop[ax[i]] = true;
		}
		int k = 0;
		for (int i = 0; i < x->rank; i++)
			if (!drop[i])
				o->dims[k++] = x->dims[i];
		o->rank = k;
		return 0;
	}
	/* Without axes every dim of size 1 goes, which needs every dim known. */
	int k = 0;
	for (int i = 0; i < x->rank; i++) {
		if (x->dims[i] < 0)
			return 0;
		if (x->dims[i] != 1)
			o->dims[k++] = x->dims[i];
	}
	o->rank = k;
	return 0;
}

static int
infer_unsqueeze(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];
	int64_t ax[ML_MAX_RANK];
	bool have, unknown;
	int n;

	ML_TRY(need(c, 0));
	ML_TRY(n = axes_of(c, 1, ax, ML_MAX_RANK, &have, &unknown));
	o->dtype = x->dtype;
	o->rank = -1;
	if (!have && !unknown)
		return ml_opfail(c, ML_EINVAL, "axes are required");
	if (x->rank < 0)
		return 0;
	if (unknown) {
		const struct ml_tval *t = ML_IN(c, 1);
		if (t->rank == 1 && t->dims[0] >= 0) {
			ML_TRY(check_rank(c, x->rank + (int)t->dims[0]));
			ml_set_shape(o, x->dtype, x->rank + (int)t->dims[0], NULL);
		}
		return 0;
	}
	int r = x->rank + n;
	ML_TRY(check_rank(c, r));
	ML_TRY(norm_axes(c, ax, n, r));
	bool add[ML_MAX_RANK] = { false };
	for (int i = 0; i < n; i++)
		add[ax[i]] = true;
	for (int i = 0, k = 0; i < r; i++)
		o->dims[i] = add[i] ? 1 : x->dims[k++];
	o->rank = r;
	return 0;
}

/*
 * transpose_alias: a Transpose that moves only dims of size 1 keeps the
 * order of the others, so its output is its input's bytes unchanged (the
 * [T, 1, C] to [1, T, C] of a batch-first model at batch 1).
 */
static bool
transpose_alias(const struct ml_node *n, const struct ml_tval *x)
{
	const int64_t *perm;
	int k = ml_attr_ints(n, "perm", &perm), last = -1;
	if (x->rank < 0 || (k >= 0 && k != x->rank))
		return false;
	for (int i = 0; i < x->rank; i++) {
		int64_t p = k >= 0 ? perm[i] : x->rank - 1 - i;
		if (p < 0 || p >= x->rank || x->dims[p] < 0)
			return false;
		if (x->dims[p] == 1)
			continue;
		if (p < last)
			return false;
		last = (int)p;
	}
	return true;
}

static int
infer_transpose(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];
	const int64_t *perm;
	int n = ml_attr_ints(c->node, "perm", &perm);

	ML_TRY(need(c, 0));
	o->dtype = x->dtype;
	o->rank = -1;
	if (x->rank < 0) {
		if (n >= 0 && n <= ML_MAX_RANK)
			ml_set_shape(o, x->dtype, n, NULL);
		return 0;
	}
	if (n < 0) {
		for (int i = 0; i < x->rank; i++)
			o->dims[i] = x->dims[x->rank - 1 - i];
		o->rank = x->rank;
		return 0;
	}
	if (n != x->rank)
		return ml_opfail(c, ML_EINVAL, "perm has %d values for rank %d", n, x->rank);
	bool seen[ML_MAX_RANK] = { false };
	for (int i = 0; i < n; i++) {
		if (perm[i] < 0 || perm[i] >= n || seen[perm[i]])
			return ml_opfail(c, ML_EINVAL, "perm is not a permutation");
		seen[perm[i]] = true;
		o->dims[i] = x->dims[perm[i]];
	}
	o->rank = n;
	return 0;
}

static int
infer_concat(struct ml_opctx *c)
{
	struct ml_tval *o = c->out[0];
	int64_t axis = ml_attr_int(c->node, "axis", INT64_MIN);
	int rank = -1, a;

	if (ml_attr_find(c->node, "axis") == NULL)
		return ml_opfail(c, ML_EINVAL, "attribute axis is required");
	o->rank = -1;
	o->dtype = ML_UNDEF;
	for (int i = 0; i < c->n_in; i++) {
		const struct ml_tval *t = c->in[i];
		if (t == NULL)
			return ml_opfail(c, ML_EINVAL, "input %d is missing", i);
		if (o->dtype == ML_UNDEF)
			o->dtype = t->dtype;
		else if (t->dtype != ML_UNDEF && t->dtype != o->dtype)
			return ml_opfail(c, ML_EINVAL, "inputs mix %s and %s", ml_dtype_name(o->dtype),
					 ml_dtype_name(t->dtype));
		if (t->rank >= 0) {
			if (rank >= 0 && t->rank != rank)
				return ml_opfail(c, ML_EINVAL, "inputs mix ranks %d and %d", rank,
						 t->rank);
			rank = t->rank;
		}
	}
	if (rank < 0)
		return 0;
	ML_TRY(ml_norm_axis(c, axis, rank, &a));
	for (int d = 0; d < rank; d++)
		o->dims[d] = d == a ? 0 : -1;
	for (int i = 0; i < c->n_in; i++) {
		const struct ml_tval *t = c->in[i];
		if (t->rank < 0) {
			o->dims[a] = -1;
			continue;
		}
		for (int d = 0; d < rank; d++) {
			int64_t v = t->dims[d];
			if (d == a) {
				o->dims[a] = o->dims[a] < 0 || v < 0 ? -1 : o->dims[a] + v;
			} else if (v >= 0) {
				if (o->dims[d] >= 0 && o->dims[d] != v)
					return ml_opfail(c, ML_EINVAL,
							 "inputs differ in dim %d (%lld vs %lld)", d,
							 (long long)o->dims[d], (long long)v);
				o->dims[d] = v;
			}
		}
	}
	o->rank = rank;
	return 0;
}

/*
 * Split: sizes from the split attribute (opset < 13) or input; otherwise
 * equal parts, the last one smaller when num_outputs (opset 18) is given.
 */
static int
infer_split(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0);
	const struct ml_tval *st = ML_IN(c, 1);
	const int64_t *sa;
	int ns = ml_attr_ints(c->node, "split", &sa);
	int64_t axis = ml_attr_int(c->node, "axis", 0);
	int a, n = c->n_out, rc = 0;
	int64_t *sizes = NULL;

	ML_TRY(need(c, 0));
	for (int i = 0; i < n; i++)
		if (c->out[i] != NULL)
			ml_set_shape(c->out[i], x->dtype, x->rank, x->dims);
	if (x->rank < 0)
		return 0;
	ML_TRY(ml_norm_axis(c, axis, x->rank, &a));
	int64_t dim = x->dims[a];
	if ((sizes = ml_calloc((size_t)n, sizeof *sizes)) == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	if (ns >= 0 || ml_shape_present(st)) {
		int k;
		if (ns >= 0) {
			k = ns;
			if (k == n)
				memcpy(sizes, sa, (size_t)n * sizeof *sizes);
		} else if (!ml_shape_known(st)) {
			for (int i = 0; i < n; i++)
				sizes[i] = -1;
			k = n;
		} else {
			k = (int)ML_MIN(ml_tval_numel(st), (int64_t)n + 1);
			if (k == n && (rc = ml_shape_ints(c, st, sizes, n, "split")) < 0)
				goto done;
		}
		if (k != n) {
			rc = ml_opfail(c, ML_EINVAL, "split has %d sizes for %d outputs", k, n);
			goto done;
		}
		int64_t sum = 0;
		for (int i = 0; i < n && sum >= 0; i++) {
			if (sizes[i] < 0)
				sum = -1;
			else
				sum += sizes[i];
		}
		if (sum >= 0 && dim >= 0 && sum != dim) {
			rc = ml_opfail(c, ML_EINVAL, "split sizes add up to %lld, not %lld",
				       (long long)sum, (long long)dim);
			goto done;
		}
	} else {
		int64_t no = ml_attr_int(c->node, "num_outputs", n);
		if (no != n) {
			rc = ml_opfail(c, ML_EINVAL, "num_outputs is %lld for %d outputs",
				       (long long)no, n);
			goto done;
		}
		for (int i = 0; i < n; i++)
			sizes[i] = -1;
		if (dim >= 0) {
			int64_t part = (dim + n - 1) / n;
			if (dim % n != 0 && ml_attr_find(c->node, "num_outputs") == NULL) {
				rc = ml_opfail(c, ML_EINVAL, "dim %lld does not split into %d equal parts",
					       (long long)dim, n);
				goto done;
			}
			for (int i = 0; i < n; i++)
				sizes[i] = ML_MAX(0, ML_MIN(part, dim - part * i));
		}
	}
	for (int i = 0; i < n; i++)
		if (c->out[i] != NULL)
			c->out[i]->dims[a] = sizes[i];
done:
	ml_free(sizes);
	return rc;
}

/* slice_len: the element count from start toward end by step, never negative. */
static int64_t
slice_len(int64_t s, int64_t e, int64_t step)
{
	uint64_t diff, ast;

	if (step > 0) {
		if (e <= s)
			return 0;
		diff = (uint64_t)e - (uint64_t)s;
		ast = (uint64_t)step;
	} else {
		if (s <= e)
			return 0;
		diff = (uint64_t)s - (uint64_t)e;
		ast = (uint64_t)0 - (uint64_t)step;
	}
	return (int64_t)((diff - 1) / ast + 1);
}

int
ml_shape_slice(struct ml_opctx *c, const struct ml_tval *x, int64_t *start, int64_t *step,
	       int64_t *len)
{
	int64_t sv[ML_MAX_RANK], ev[ML_MAX_RANK], av[ML_MAX_RANK], tv[ML_MAX_RANK];
	int r = x->rank, ns, ne, na = -1, nt = -1;
	bool unknown = false, axes_unknown = false;

	for (int d = 0; d < r; d++) {
		start[d] = 0;
		step[d] = 1;
		len[d] = x->dims[d];
	}
	if (c->opset < 10 || ml_attr_find(c->node, "starts") != NULL) {
		const int64_t *p;
		if ((ns = ml_attr_ints(c->node, "starts", &p)) < 0 || ns > ML_MAX_RANK)
			return ml_opfail(c, ML_EINVAL, "attribute starts is missing or too long");
		memcpy(sv, p, (size_t)ns * sizeof *sv);
		if ((ne = ml_attr_ints(c->node, "ends", &p)) < 0 || ne > ML_MAX_RANK)
			return ml_opfail(c, ML_EINVAL, "attribute ends is missing or too long");
		memcpy(ev, p, (size_t)ne * sizeof *ev);
		if ((na = ml_attr_ints(c->node, "axes", &p)) > ML_MAX_RANK)
			return ml_opfail(c, ML_EINVAL, "attribute axes is too long");
		if (na >= 0)
			memcpy(av, p, (size_t)na * sizeof *av);
	} else {
		const struct ml_tval *ts = ML_IN(c, 1), *te = ML_IN(c, 2);
		const struct ml_tval *ta = ML_IN(c, 3), *tt = ML_IN(c, 4);
		if (ts == NULL || te == NULL)
			return ml_opfail(c, ML_EINVAL, "inputs starts and ends are required");
		ns = ne = 0;
		if (ml_shape_known(ts) && ml_shape_known(te)) {
			ML_TRY(ns = ml_shape_ints(c, ts, sv, ML_MAX_RANK, "starts"));
			ML_TRY(ne = ml_shape_ints(c, te, ev, ML_MAX_RANK, "ends"));
		} else {
			unknown = true;
		}
		if (ta != NULL) {
			if (ml_shape_known(ta))
				ML_TRY(na = ml_shape_ints(c, ta, av, ML_MAX_RANK, "axes"));
			else
				axes_unknown = true;
		}
		if (tt != NULL) {
			if (ml_shape_known(tt))
				ML_TRY(nt = ml_shape_ints(c, tt, tv, ML_MAX_RANK, "steps"));
			else
				unknown = true;
		}
	}
	if (axes_unknown) {
		for (int d = 0; d < r; d++)
			len[d] = -1;
		return 0;
	}
	if (unknown) {
		/* Only the listed axes change; without axes, the leading ones. */
		const struct ml_tval *ts = ML_IN(c, 1);
		int k = na >= 0 ? na : ts->rank == 1 && ts->dims[0] >= 0 ? (int)ts->dims[0] : r;
		if (na >= 0)
			ML_TRY(norm_axes(c, av, na, r));
		for (int i = 0; i < k && i < r; i++)
			len[na >= 0 ? av[i] : i] = -1;
		return 0;
	}
	if (ns != ne || (na >= 0 && na != ns) || (nt >= 0 && nt != ns))
		return ml_opfail(c, ML_EINVAL, "starts, ends, axes and steps differ in length");
	if (na < 0) {
		if (ns > r)
			return ml_opfail(c, ML_EINVAL, "%d starts for rank %d", ns, r);
		for (int i = 0; i < ns; i++)
			av[i] = i;
	}
	ML_TRY(norm_axes(c, av, ns, r));
	for (int i = 0; i < ns; i++) {
		int a = (int)av[i];
		int64_t st = nt >= 0 ? tv[i] : 1, dim = x->dims[a], s = sv[i], e = ev[i];
		if (st == 0)
			return ml_opfail(c, ML_EINVAL, "step is 0");
		step[a] = st;
		if (dim < 0) {
			len[a] = -1;
			continue;
		}
		if (s < 0)
			s += dim;
		if (e < 0)
			e += dim;
		if (st > 0) {
			s = ML_MAX(0, ML_MIN(s, dim));
			e = ML_MAX(0, ML_MIN(e, dim));
		} else {
			s = ML_MAX(0, ML_MIN(s, dim - 1));
			e = ML_MAX(-1, ML_MIN(e, dim - 1));
		}
		start[a] = s;
		len[a] = slice_len(s, e, st);
	}
	return 0;
}

static int
infer_slice(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];
	int64_t start[ML_MAX_RANK], step[ML_MAX_RANK];

	ML_TRY(need(c, 0));
	o->dtype = x->dtype;
	o->rank = -1;
	if (x->rank < 0)
		return 0;
	for (int i = 1; i < 5; i++)
		if (ML_IN(c, i) != NULL)
			ML_TRY(check_index_dtype(c, ML_IN(c, i), "slice parameter"));
	ML_TRY(ml_shape_slice(c, x, start, step, o->dims));
	o->rank = x->rank;
	return 0;
}

static int
infer_gather(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *ix = ML_IN(c, 1), *o = c->out[0];
	int a;

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(check_index_dtype(c, ix, "indices"));
	o->dtype = x->dtype;
	o->rank = -1;
	if (x->rank < 0 || ix->rank < 0)
		return 0;
	if (x->rank == 0)
		return ml_opfail(c, ML_EINVAL, "data must have rank 1 or more");
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &a));
	int r = x->rank - 1 + ix->rank, k = 0;
	ML_TRY(check_rank(c, r));
	for (int i = 0; i < a; i++)
		o->dims[k++] = x->dims[i];
	for (int i = 0; i < ix->rank; i++)
		o->dims[k++] = ix->dims[i];
	for (int i = a + 1; i < x->rank; i++)
		o->dims[k++] = x->dims[i];
	o->rank = r;
	return 0;
}

static int
infer_gather_elements(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *ix = ML_IN(c, 1), *o = c->out[0];
	int a;

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(check_index_dtype(c, ix, "indices"));
	ml_set_shape(o, x->dtype, ix->rank, ix->dims);
	if (x->rank < 0 || ix->rank < 0)
		return 0;
	if (x->rank != ix->rank || x->rank == 0)
		return ml_opfail(c, ML_EINVAL, "data and indices must have the same rank (>= 1)");
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &a));
	return 0;
}

static int
infer_gather_nd(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *ix = ML_IN(c, 1), *o = c->out[0];
	int64_t b = ml_attr_int(c->node, "batch_dims", 0);

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	if (ix->dtype != ML_UNDEF && ix->dtype != ML_I64)
		ML_TRY(check_index_dtype(c, ix, "indices"));
	o->dtype = x->dtype;
	o->rank = -1;
	if (x->rank < 0 || ix->rank < 0)
		return 0;
	int r = x->rank, q = ix->rank;
	if (r < 1 || q < 1 || b < 0 || b >= ML_MIN(r, q))
		return ml_opfail(c, ML_EINVAL, "bad ranks %d, %d for batch_dims %lld", r, q,
				 (long long)b);
	int64_t k = ix->dims[q - 1];
	if (k < 0)
		return 0;
	if (k > r - b)
		return ml_opfail(c, ML_EINVAL, "indices' last dim %lld is over rank %d - %lld",
				 (long long)k, r, (long long)b);
	for (int i = 0; i < b; i++)
		if (x->dims[i] >= 0 && ix->dims[i] >= 0 && x->dims[i] != ix->dims[i])
			return ml_opfail(c, ML_EINVAL, "batch dim %d differs", i);
	int orank = q - 1 + r - (int)k - (int)b, n = 0;
	ML_TRY(check_rank(c, orank));
	for (int i = 0; i < q - 1; i++)
		o->dims[n++] = ix->dims[i];
	for (int i = (int)(b + k); i < r; i++)
		o->dims[n++] = x->dims[i];
	o->rank = orank;
	return 0;
}

static int
check_reduction(struct ml_opctx *c)
{
	const char *r = ml_attr_str(c->node, "reduction", "none");
	if (strcmp(r, "none") != 0 && strcmp(r, "add") != 0 && strcmp(r, "mul") != 0 &&
	    strcmp(r, "max") != 0 && strcmp(r, "min") != 0)
		return ml_opfail(c, ML_EINVAL, "unknown reduction '%s'", r);
	return 0;
}

static int
infer_scatter_elements(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *ix = ML_IN(c, 1), *u = ML_IN(c, 2);
	int a;

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(need(c, 2));
	ML_TRY(check_index_dtype(c, ix, "indices"));
	ML_TRY(check_reduction(c));
	ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
	if (x->rank < 0 || ix->rank < 0)
		return 0;
	if (x->rank != ix->rank || x->rank == 0 || (u->rank >= 0 && u->rank != ix->rank))
		return ml_opfail(c, ML_EINVAL, "data, indices and updates must have one rank");
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &a));
	return 0;
}

static int
infer_scatter_nd(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *ix = ML_IN(c, 1);

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(need(c, 2));
	if (ix->dtype != ML_UNDEF && ix->dtype != ML_I64)
		ML_TRY(check_index_dtype(c, ix, "indices"));
	ML_TRY(check_reduction(c));
	ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
	if (x->rank >= 0 && ix->rank >= 0 &&
	    (ix->rank < 1 || (ix->dims[ix->rank - 1] > x->rank)))
		return ml_opfail(c, ML_EINVAL, "indices do not fit data of rank %d", x->rank);
	return 0;
}

static int
infer_shape(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];

	ML_TRY(need(c, 0));
	ml_set_shape(o, ML_I64, 1, NULL);
	if (x->rank < 0)
		return 0;
	int64_t r = x->rank, s = ml_attr_int(c->node, "start", 0), e = ml_attr_int(c->node, "end", r);
	s = s < 0 ? ML_MAX(0, s + r) : ML_MIN(s, r);
	e = e < 0 ? ML_MAX(0, e + r) : ML_MIN(e, r);
	o->dims[0] = ML_MAX(0, e - s);
	return 0;
}

static int
infer_size(struct ml_opctx *c)
{
	ML_TRY(need(c, 0));
	ml_set_shape(c->out[0], ML_I64, 0, NULL);
	return 0;
}

int
ml_shape_constant(struct ml_opctx *c, struct ml_shape_const *k)
{
	const struct ml_attr *a;

	memset(k, 0, sizeof *k);
	if ((a = ml_attr_find(c->node, "value")) != NULL) {
		const struct ml_tensor *t = a->type == ML_ATTR_TENSOR && a->tensors != NULL ?
			a->tensors[0] : NULL;
		if (t == NULL)
			return ml_opfail(c, ML_EINVAL, "attribute value is not a tensor");
		if (t->rank < 0 || t->rank > ML_MAX_RANK || ml_dtype_size(t->dtype) == 0)
			return ml_opfail(c, ML_ENOTSUP, "value of dtype %s and rank %d",
					 ml_dtype_name(t->dtype), t->rank);
		k->dtype = t->dtype;
		k->rank = t->rank;
		memcpy(k->dims, t->dims, sizeof k->dims);
		k->data = t->data;
		struct ml_tval v = { .dtype = k->dtype, .rank = k->rank };
		memcpy(v.dims, k->dims, sizeof v.dims);
		int64_t nb = ml_tval_nbytes(&v);
		if (nb < 0 || (nb > 0 && (t->data == NULL || (uint64_t)nb != t->nbytes)))
			return ml_opfail(c, ML_EINVAL, "value's data does not match its shape");
	} else if ((a = ml_attr_find(c->node, "value_float")) != NULL) {
		k->dtype = ML_F32;
		k->fv = a->type == ML_ATTR_INT ? (double)a->i : a->f;
	} else if ((a = ml_attr_find(c->node, "value_floats")) != NULL &&
		   a->type == ML_ATTR_FLOATS) {
		k->dtype = ML_F32;
		k->rank = 1;
		k->dims[0] = a->n;
		k->floats = a->floats;
	} else if ((a = ml_attr_find(c->node, "value_int")) != NULL) {
		k->dtype = ML_I64;
		k->iv = a->type == ML_ATTR_FLOAT ? (int64_t)a->f : a->i;
	} else if ((a = ml_attr_find(c->node, "value_ints")) != NULL && a->type == ML_ATTR_INTS) {
		k->dtype = ML_I64;
		k->rank = 1;
		k->dims[0] = a->n;
		k->ints = a->ints;
	} else if (ml_attr_find(c->node, "value_string") != NULL ||
		   ml_attr_find(c->node, "value_strings") != NULL ||
		   ml_attr_find(c->node, "sparse_value") != NULL) {
		return ml_opfail(c, ML_ENOTSUP, "string and sparse constants are not supported");
	} else {
		return ml_opfail(c, ML_EINVAL, "no value attribute");
	}
	return 0;
}

static int
infer_constant(struct ml_opctx *c)
{
	struct ml_shape_const k;

	ML_TRY(ml_shape_constant(c, &k));
	ml_set_shape(c->out[0], k.dtype, k.rank, k.dims);
	return 0;
}

/* shape_input: read a 1-D int64 shape input into o's dims, -1s when unknown. */
static int
shape_input(struct ml_opctx *c, const struct ml_tval *s, int64_t *v, int *rank)
{
	*rank = -1;
	ML_TRY(check_index_dtype(c, s, "shape"));
	if (s->rank > 1)
		return ml_opfail(c, ML_EINVAL, "shape must be 1-D");
	if (!ml_shape_known(s)) {
		if (s->rank == 1 && s->dims[0] >= 0) {
			ML_TRY(check_rank(c, (int)s->dims[0]));
			*rank = (int)s->dims[0];
			for (int i = 0; i < *rank; i++)
				v[i] = -1;
		}
		return 0;
	}
	if (ml_tval_numel(s) > ML_MAX_RANK)
		return check_rank(c, (int)ML_MIN(ml_tval_numel(s), INT32_MAX));
	ML_TRY(*rank = ml_shape_ints(c, s, v, ML_MAX_RANK, "shape"));
	return 0;
}

static int
infer_constant_of_shape(struct ml_opctx *c)
{
	struct ml_tval *o = c->out[0];
	const struct ml_attr *a = ml_attr_find(c->node, "value");
	enum ml_dtype dt = ML_F32;
	int64_t v[ML_MAX_RANK];
	int r;

	ML_TRY(need(c, 0));
	if (a != NULL) {
		const struct ml_tensor *t = a->type == ML_ATTR_TENSOR && a->tensors != NULL ?
			a->tensors[0] : NULL;
		struct ml_tval tv;
		if (t == NULL)
			return ml_opfail(c, ML_EINVAL, "attribute value is not a tensor");
		memset(&tv, 0, sizeof tv);
		tv.dtype = t->dtype;
		tv.rank = t->rank;
		for (int i = 0; i < t->rank && i < ML_MAX_RANK; i++)
			tv.dims[i] = t->dims[i];
		if (ml_tval_numel(&tv) != 1 || ml_dtype_size(t->dtype) == 0 || t->data == NULL)
			return ml_opfail(c, ML_EINVAL, "value must hold one element");
		dt = t->dtype;
	}
	ML_TRY(shape_input(c, ML_IN(c, 0), v, &r));
	o->dtype = dt;
	o->rank = -1;
	if (r < 0)
		return 0;
	for (int i = 0; i < r; i++)
		if (v[i] < 0 && ml_shape_known(ML_IN(c, 0)))
			return ml_opfail(c, ML_EINVAL, "negative dim %lld", (long long)v[i]);
	ml_set_shape(o, dt, r, v);
	return 0;
}

static int
infer_expand(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];
	struct ml_tval s = { 0 };
	const struct ml_tval *ts[2];

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(shape_input(c, ML_IN(c, 1), s.dims, &s.rank));
	o->dtype = x->dtype;
	o->rank = -1;
	if (s.rank < 0 || x->rank < 0)
		return 0;
	for (int i = 0; i < s.rank; i++)
		if (s.dims[i] < 0 && ml_shape_known(ML_IN(c, 1)))
			return ml_opfail(c, ML_EINVAL, "negative dim %lld", (long long)s.dims[i]);
	ts[0] = x;
	ts[1] = &s;
	ML_TRY(check_rank(c, ML_MAX(x->rank, s.rank)));
	if (ml_broadcast_shape(2, ts, o, c->err) < 0)
		return ml_opfail(c, ML_EINVAL, "%s", c->err != NULL ? c->err->msg : "bad shape");
	o->dtype = x->dtype;
	return 0;
}

static int
infer_tile(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *rp = ML_IN(c, 1), *o = c->out[0];
	int64_t v[ML_MAX_RANK];

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(check_index_dtype(c, rp, "repeats"));
	ml_set_shape(o, x->dtype, x->rank, NULL);
	if (x->rank < 0 || !ml_shape_known(rp))
		return 0;
	int n = ml_shape_ints(c, rp, v, ML_MAX_RANK, "repeats");
	ML_TRY(n);
	if (n != x->rank)
		return ml_opfail(c, ML_EINVAL, "%d repeats for rank %d", n, x->rank);
	for (int i = 0; i < n; i++) {
		if (v[i] < 0)
			return ml_opfail(c, ML_EINVAL, "negative repeat %lld", (long long)v[i]);
		if (x->dims[i] >= 0 && !ml_mul_ok(x->dims[i], v[i], &o->dims[i]))
			return ml_opfail(c, ML_EINVAL, "shape overflows");
	}
	return 0;
}

int
ml_shape_pads(struct ml_opctx *c, int rank, int64_t *pads, bool *known_out)
{
	int64_t v[4 * ML_MAX_RANK], ax[ML_MAX_RANK];
	const int64_t *p;
	int n = ml_attr_ints(c->node, "pads", &p), na = -1;

	*known_out = true;
	for (int i = 0; i < 2 * rank; i++)
		pads[i] = 0;
	if (n >= 0) {
		if (n > 4 * ML_MAX_RANK)
			return ml_opfail(c, ML_EINVAL, "too many pads");
		memcpy(v, p, (size_t)n * sizeof *v);
	} else {
		const struct ml_tval *tp = ML_IN(c, 1), *ta = ML_IN(c, 3);
		if (tp == NULL)
			return ml_opfail(c, ML_EINVAL, "pads are required");
		ML_TRY(check_index_dtype(c, tp, "pads"));
		if (!ml_shape_known(tp) || (ta != NULL && !ml_shape_known(ta))) {
			*known_out = false;
			return 0;
		}
		ML_TRY(n = ml_shape_ints(c, tp, v, 4 * ML_MAX_RANK, "pads"));
		if (ta != NULL) {
			ML_TRY(na = ml_shape_ints(c, ta, ax, ML_MAX_RANK, "axes"));
			ML_TRY(norm_axes(c, ax, na, rank));
		}
	}
	if (na < 0) {
		if (n != 2 * rank)
			return ml_opfail(c, ML_EINVAL, "%d pads for rank %d", n, rank);
		memcpy(pads, v, (size_t)n * sizeof *v);
		return 0;
	}
	if (n != 2 * na)
		return ml_opfail(c, ML_EINVAL, "%d pads for %d axes", n, na);
	for (int i = 0; i < na; i++) {
		pads[ax[i]] = v[i];
		pads[rank + ax[i]] = v[na + i];
	}
	return 0;
}

static int
infer_pad(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];
	const char *mode = ml_attr_str(c->node, "mode", "constant");
	int64_t pads[2 * ML_MAX_RANK];
	bool k;

	ML_TRY(need(c, 0));
	if (strcmp(mode, "constant") != 0 && strcmp(mode, "reflect") != 0 &&
	    strcmp(mode, "edge") != 0 && strcmp(mode, "wrap") != 0)
		return ml_opfail(c, ML_EINVAL, "unknown mode '%s'", mode);
	ml_set_shape(o, x->dtype, x->rank, NULL);
	if (x->rank < 0)
		return 0;
	ML_TRY(ml_shape_pads(c, x->rank, pads, &k));
	if (!k)
		return 0;
	for (int i = 0; i < x->rank; i++) {
		int64_t d = x->dims[i], b = pads[i], e = pads[x->rank + i];
		if (d < 0)
			continue;
		if (b > INT32_MAX || e > INT32_MAX || b < -d || e < -d || d + b + e < 0)
			return ml_opfail(c, ML_EINVAL, "pads %lld, %lld do not fit dim %lld",
					 (long long)b, (long long)e, (long long)d);
		if (strcmp(mode, "constant") != 0 && d == 0 && (b > 0 || e > 0))
			return ml_opfail(c, ML_EINVAL, "cannot pad an empty dim in mode %s", mode);
		o->dims[i] = d + b + e;
	}
	return 0;
}

/* range_count: Range's element count, or -1 with an error set. */
static int64_t
range_count(struct ml_opctx *c, const struct ml_tval *s, const struct ml_tval *l,
	    const struct ml_tval *d)
{
	enum ml_dtype t = s->dtype;

	if (ml_dtype_is_float(t)) {
		double a = ml_get_f64(s->data, t, 0), b = ml_get_f64(l->data, t, 0);
		double dd = ml_get_f64(d->data, t, 0);
		if (dd == 0 || !isfinite(a) || !isfinite(b) || !isfinite(dd))
			return ml_opfail(c, ML_EINVAL, "bad start, limit or delta");
		double n = ceil((b - a) / dd);
		if (n > 1e15)
			return ml_opfail(c, ML_EINVAL, "range is too long");
		return n > 0 ? (int64_t)n : 0;
	}
	int64_t a = ml_get_i64(s->data, t, 0), b = ml_get_i64(l->data, t, 0);
	int64_t dd = ml_get_i64(d->data, t, 0);
	if (dd == 0)
		return ml_opfail(c, ML_EINVAL, "delta is 0");
	return slice_len(a, b, dd);
}

static int
infer_range(struct ml_opctx *c)
{
	struct ml_tval *s = ML_IN(c, 0), *l = ML_IN(c, 1), *d = ML_IN(c, 2), *o = c->out[0];

	for (int i = 0; i < 3; i++) {
		ML_TRY(need(c, i));
		const struct ml_tval *t = c->in[i];
		if (t->rank > 1 || (t->rank >= 0 && ml_tval_numel(t) != 1 && ml_tval_numel(t) >= 0))
			return ml_opfail(c, ML_EINVAL, "input %d must be a scalar", i);
	}
	if (s->dtype != ML_UNDEF && !ml_dtype_is_float(s->dtype) && !ml_dtype_is_int(s->dtype))
		return ml_opfail(c, ML_ENOTSUP, "dtype %s", ml_dtype_name(s->dtype));
	if (s->dtype != l->dtype || s->dtype != d->dtype)
		return ml_opfail(c, ML_EINVAL, "start, limit and delta must have one dtype");
	ml_set_shape(o, s->dtype, 1, NULL);
	if (ml_shape_known(s) && ml_shape_known(l) && ml_shape_known(d)) {
		int64_t n = range_count(c, s, l, d);
		ML_TRY(n);
		o->dims[0] = n;
	}
	return 0;
}

static int
infer_one_hot(struct ml_opctx *c)
{
	struct ml_tval *ix = ML_IN(c, 0), *dp = ML_IN(c, 1), *vs = ML_IN(c, 2), *o = c->out[0];
	int64_t axis = ml_attr_int(c->node, "axis", -1);

	for (int i = 0; i < 3; i++)
		ML_TRY(need(c, i));
	o->dtype = vs->dtype;
	o->rank = -1;
	if (vs->rank >= 0 && ml_tval_numel(vs) >= 0 && ml_tval_numel(vs) != 2)
		return ml_opfail(c, ML_EINVAL, "values must hold 2 elements");
	if (dp->rank >= 0 && ml_tval_numel(dp) >= 0 && ml_tval_numel(dp) != 1)
		return ml_opfail(c, ML_EINVAL, "depth must hold 1 element");
	if (ix->rank < 0)
		return 0;
	int r = ix->rank + 1, a;
	ML_TRY(check_rank(c, r));
	ML_TRY(ml_norm_axis(c, axis, r, &a));
	int64_t depth = -1;
	if (ml_shape_known(dp)) {
		double v = ml_get_f64(dp->data, dp->dtype, 0);
		if (!(v >= 1) || v > 1e12)
			return ml_opfail(c, ML_EINVAL, "depth %g must be positive", v);
		depth = (int64_t)v;
	}
	for (int i = 0, k = 0; i < r; i++)
		o->dims[i] = i == a ? depth : ix->dims[k++];
	o->rank = r;
	return 0;
}

static int
infer_trilu(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0);

	ML_TRY(need(c, 0));
	if (x->rank >= 0 && x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "input must have rank 2 or more");
	if (ML_IN(c, 1) != NULL)
		ML_TRY(check_index_dtype(c, ML_IN(c, 1), "k"));
	return ml_infer_same(c);
}

static int
infer_eye_like(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0);
	int64_t dt = ml_attr_int(c->node, "dtype", x != NULL ? x->dtype : 0);

	ML_TRY(need(c, 0));
	if (x->rank >= 0 && x->rank != 2)
		return ml_opfail(c, ML_EINVAL, "input must be 2-D");
	if (dt <= 0 || dt >= ML_DTYPE_MAX || ml_dtype_size((enum ml_dtype)dt) == 0)
		if (dt != ML_UNDEF || ml_attr_find(c->node, "dtype") != NULL)
			return ml_opfail(c, ML_ENOTSUP, "dtype %lld", (long long)dt);
	ml_set_shape(c->out[0], (enum ml_dtype)dt, 2, x->rank == 2 ? x->dims : NULL);
	return 0;
}

/* count_nonzero: the nonzero elements of t (known); floats compare as values. */
static int64_t
count_nonzero(const struct ml_tval *t)
{
	int64_t n = ml_tval_numel(t), k = 0;
	size_t es = ml_dtype_size(t->dtype);

	for (int64_t i = 0; i < n; i++) {
		if (ml_dtype_is_float(t->dtype)) {
			k += ml_get_f64(t->data, t->dtype, i) != 0;
		} else {
			const uint8_t *p = (const uint8_t *)t->data + (size_t)i * es;
			for (size_t j = 0; j < es; j++)
				if (p[j] != 0) {
					k++;
					break;
				}
		}
	}
	return k;
}

static int
infer_nonzero(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];

	ML_TRY(need(c, 0));
	ml_set_shape(o, ML_I64, 2, NULL);
	if (x->rank >= 0)
		o->dims[0] = ML_MAX(x->rank, 1);
	if (ml_shape_known(x) && ml_dtype_size(x->dtype) > 0)
		o->dims[1] = count_nonzero(x);
	return 0;
}

static int
infer_depth_to_space(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *o = c->out[0];
	int64_t b = ml_attr_int(c->node, "blocksize", 0);
	bool d2s = c->node->op == ML_OP_DEPTH_TO_SPACE;
	const char *mode = ml_attr_str(c->node, "mode", "DCR");

	ML_TRY(need(c, 0));
	if (b <= 0 || b > 65536)
		return ml_opfail(c, ML_EINVAL, "blocksize %lld", (long long)b);
	if (d2s && strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
		return ml_opfail(c, ML_EINVAL, "unknown mode '%s'", mode);
	ml_set_shape(o, x->dtype, 4, NULL);
	if (x->rank < 0)
		return 0;
	if (x->rank != 4)
		return ml_opfail(c, ML_EINVAL, "input must be 4-D");
	int64_t n = x->dims[0], ch = x->dims[1], h = x->dims[2], w = x->dims[3];
	o->dims[0] = n;
	if (d2s) {
		if (ch >= 0 && ch % (b * b) != 0)
			return ml_opfail(c, ML_EINVAL, "channels %lld are not a multiple of %lld",
					 (long long)ch, (long long)(b * b));
		o->dims[1] = ch < 0 ? -1 : ch / (b * b);
		o->dims[2] = h < 0 ? -1 : h * b;
		o->dims[3] = w < 0 ? -1 : w * b;
	} else {
		if ((h >= 0 && h % b != 0) || (w >= 0 && w % b != 0))
			return ml_opfail(c, ML_EINVAL, "height and width must be multiples of %lld",
					 (long long)b);
		o->dims[1] = ch < 0 ? -1 : ch * b * b;
		o->dims[2] = h < 0 ? -1 : h / b;
		o->dims[3] = w < 0 ? -1 : w / b;
	}
	return 0;
}

static int
infer_reverse_sequence(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *sl = ML_IN(c, 1);
	int64_t ta = ml_attr_int(c->node, "time_axis", 0), ba = ml_attr_int(c->node, "batch_axis", 1);

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	ML_TRY(check_index_dtype(c, sl, "sequence_lens"));
	if ((ta != 0 && ta != 1) || (ba != 0 && ba != 1) || ta == ba)
		return ml_opfail(c, ML_EINVAL, "time_axis and batch_axis must be 0 and 1");
	if (x->rank >= 0 && x->rank < 2)
		return ml_opfail(c, ML_EINVAL, "input must have rank 2 or more");
	if (sl->rank >= 0 && sl->rank != 1)
		return ml_opfail(c, ML_EINVAL, "sequence_lens must be 1-D");
	if (x->rank >= 2 && sl->rank == 1 && x->dims[ba] >= 0 && sl->dims[0] >= 0 &&
	    x->dims[ba] != sl->dims[0])
		return ml_opfail(c, ML_EINVAL, "sequence_lens has %lld values for batch %lld",
				 (long long)sl->dims[0], (long long)x->dims[ba]);
	return ml_infer_same(c);
}

static int
infer_compress(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0), *cd = ML_IN(c, 1), *o = c->out[0];
	const struct ml_attr *aa = ml_attr_find(c->node, "axis");
	int a = -1;

	ML_TRY(need(c, 0));
	ML_TRY(need(c, 1));
	if (cd->rank > 1)
		return ml_opfail(c, ML_EINVAL, "condition must be 1-D");
	o->dtype = x->dtype;
	o->rank = -1;
	if (aa != NULL) {
		if (x->rank < 0)
			return 0;
		ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &a));
		ml_set_shape(o, x->dtype, x->rank, x->dims);
	} else {
		ml_set_shape(o, x->dtype, 1, NULL);
	}
	int64_t lim = a >= 0 ? x->dims[a] : ml_tval_numel(x);
	int64_t k = -1;
	if (ml_shape_known(cd) && lim >= 0) {
		int64_t n = ml_tval_numel(cd);
		k = 0;
		for (int64_t i = 0; i < n; i++)
			if (ml_get_f64(cd->data, cd->dtype, i) != 0) {
				if (i >= lim)
					return ml_opfail(c, ML_EINVAL, "condition selects past the end");
				k++;
			}
	}
	o->dims[a >= 0 ? a : 0] = k;
	return 0;
}

static int
infer_unique(struct ml_opctx *c)
{
	struct ml_tval *x = ML_IN(c, 0);
	const struct ml_attr *aa = ml_attr_find(c->node, "axis");
	int a = -1;
	int64_t n = -1;

	ML_TRY(need(c, 0));
	if (c->out[0] != NULL)
		ml_set_shape(c->out[0], x->dtype, 1, NULL);
	if (aa != NULL && x->rank >= 0) {
		ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &a));
		if (c->out[0] != NULL) {
			ml_set_shape(c->out[0], x->dtype, x->rank, x->dims);
			c->out[0]->dims[a] = -1;
		}
		n = x->dims[a];
	} else if (aa != NULL) {
		if (c->out[0] != NULL)
			c->out[0]->rank = -1;
	} else {
		n = ml_tval_numel(x);
	}
	for (int i = 1; i < c->n_out && i < 4; i++)
		if (c->out[i] != NULL) {
			ml_set_shape(c->out[i], ML_I64, 1, NULL);
			if (i == 2)
				c->out[i]->dims[0] = n;
		}
	return 0;
}

const struct ml_opdef ml_opdefs_shape[] = {
	{ ML_OP_IDENTITY, 1, 1, 1, 1, infer_identity, NULL, .flags = ML_OPF_ALIAS },
	{ ML_OP_RESHAPE, 2, 2, 1, 1, infer_reshape, NULL, .flags = ML_OPF_ALIAS,
	  .host_in = ML_HOST_REST, .qclass = ML_QC_FLATTEN },
	{ ML_OP_FLATTEN, 1, 1, 1, 1, infer_flatten, NULL, .flags = ML_OPF_ALIAS,
	  .qclass = ML_QC_FLATTEN },
	{ ML_OP_SQUEEZE, 1, 2, 1, 1, infer_squeeze, NULL, .flags = ML_OPF_ALIAS,
	  .host_in = ML_HOST_REST },
	{ ML_OP_UNSQUEEZE, 1, 2, 1, 1, infer_unsqueeze, NULL, .flags = ML_OPF_ALIAS,
	  .host_in = ML_HOST_REST },
	{ ML_OP_TRANSPOSE, 1, 1, 1, 1, infer_transpose, NULL, .flags = ML_OPF_ALIAS,
	  .alias = transpose_alias },
	{ ML_OP_CONCAT, 1, -1, 1, 1, infer_concat, NULL },
	{ ML_OP_SPLIT, 1, 2, 1, -1, infer_split, NULL, .host_in = ML_HOST_REST },
	{ ML_OP_SLICE, 1, 5, 1, 1, infer_slice, NULL, .host_in = ML_HOST_REST },
	{ ML_OP_GATHER, 2, 2, 1, 1, infer_gather, NULL },
	{ ML_OP_GATHER_ELEMENTS, 2, 2, 1, 1, infer_gather_elements, NULL },
	{ ML_OP_GATHER_ND, 2, 2, 1, 1, infer_gather_nd, NULL },
	{ ML_OP_SCATTER_ELEMENTS, 3, 3, 1, 1, infer_scatter_elements, NULL },
	{ ML_OP_SCATTER, 3, 3, 1, 1, infer_scatter_elements, NULL },
	{ ML_OP_SCATTER_ND, 3, 3, 1, 1, infer_scatter_nd, NULL },
	{ ML_OP_SHAPE, 1, 1, 1, 1, infer_shape, NULL, .flags = ML_OPF_SHAPE_ONLY },
	{ ML_OP_SIZE, 1, 1, 1, 1, infer_size, NULL, .flags = ML_OPF_SHAPE_ONLY },
	{ ML_OP_CONSTANT, 0, 0, 1, 1, infer_constant, NULL },
	{ ML_OP_CONSTANT_OF_SHAPE, 1, 1, 1, 1, infer_constant_of_shape, NULL, .host_in = 1 },
	{ ML_OP_EXPAND, 2, 2, 1, 1, infer_expand, NULL, .host_in = ML_HOST_REST },
	{ ML_OP_TILE, 2, 2, 1, 1, infer_tile, NULL, .host_in = ML_HOST_REST },
	{ ML_OP_PAD, 1, 4, 1, 1, infer_pad, NULL, .host_in = ML_HOST_REST },
	{ ML_OP_RANGE, 3, 3, 1, 1, infer_range, NULL, .host_in = 7 },
	{ ML_OP_ONE_HOT, 3, 3, 1, 1, infer_one_hot, NULL },
	{ ML_OP_TRILU, 1, 2, 1, 1, infer_trilu, NULL },
	{ ML_OP_EYE_LIKE, 1, 1, 1, 1, infer_eye_like, NULL, .flags = ML_OPF_SHAPE_ONLY },
	{ ML_OP_NONZERO, 1, 1, 1, 1, infer_nonzero, NULL },
	{ ML_OP_DEPTH_TO_SPACE, 1, 1, 1, 1, infer_depth_to_space, NULL },
	{ ML_OP_SPACE_TO_DEPTH, 1, 1, 1, 1, infer_depth_to_space, NULL },
	{ ML_OP_REVERSE_SEQUENCE, 2, 2, 1, 1, infer_reverse_sequence, NULL },
	{ ML_OP_COMPRESS, 2, 2, 1, 1, infer_compress, NULL },
	{ ML_OP_UNIQUE, 1, 1, 1, 4, infer_unique, NULL },
	{ ML_OP_RESIZE, 1, 4, 1, 1, ml_shape_infer_resize, NULL, .host_in = ML_HOST_REST },
	{ ML_OP_UPSAMPLE, 1, 2, 1, 1, ml_shape_infer_resize, NULL, .host_in = ML_HOST_REST },
	{ .op = ML_OP_NONE },
};
