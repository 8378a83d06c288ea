/*
 * shape_index.c: CPU kernels of the shape family's index ops: Gather,
 * GatherElements, GatherND, the Scatters, OneHot, NonZero,
 * ReverseSequence, Compress and Unique. Index inputs may be int32 or
 * int64; negative indices wrap once and anything still out of range is
 * ML_EINVAL before any element moves.
 */
#include "cpu/shape.h"

#define PAR_BYTES (64 * 1024)

/* prod: the product of dims[b..e). */
static int64_t
prod(const int64_t *dims, int b, int e)
{
	int64_t p = 1;
	for (int i = b; i < e; i++)
		p *= dims[i];
	return p;
}

static int
bad_index(struct ml_opctx *c, int64_t v, int64_t n)
{
	return ml_opfail(c, ML_EINVAL, "index %lld is out of range for a dim of %lld",
			 (long long)v, (long long)n);
}

/*
 * load_indices: the values of t as a new int64 array (ml_free it), each
 * negative one wrapped by n and all checked against [0, n). n < 0 skips
 * the wrap and the check (the caller checks per position).
 */
static int
load_indices(struct ml_opctx *c, const struct ml_tval *t, int64_t n, int64_t **out)
{
	int64_t k = ml_tval_numel(t);
	int64_t *v;

	*out = NULL;
	if (t->dtype != ML_I64 && t->dtype != ML_I32)
		return ml_opfail(c, ML_EINVAL, "indices must be int32 or int64");
	if ((v = ml_malloc((size_t)ML_MAX(k, 1) * sizeof *v)) == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	for (int64_t i = 0; i < k; i++) {
		/* memcpy loads: constant data in a graph need not be aligned. */
		int64_t x;
		if (t->dtype == ML_I64) {
			memcpy(&x, (const uint8_t *)t->data + 8 * i, 8);
		} else {
			int32_t x32;
			memcpy(&x32, (const uint8_t *)t->data + 4 * i, 4);
			x = x32;
		}
		v[i] = x;
		if (n >= 0) {
			if (x < 0)
				x += n;
			if (x < 0 || x >= n) {
				int rc = bad_index(c, v[i], n);
				ml_free(v);
				return rc;
			}
			v[i] = x;
		}
	}
	*out = v;
	return 0;
}

struct gather_job {
	uint8_t *dst;
	const uint8_t *src;
	const int64_t *idx;
	int64_t nidx, n;
	size_t inner;		/* bytes of one gathered slice */
};

static void
gather_run(void *ctx, int64_t b, int64_t e)
{
	const struct gather_job *j = ctx;
	size_t in = j->inner;

	for (int64_t u = b; u < e; u++) {
		int64_t o = u / j->nidx, k = u % j->nidx;
		const uint8_t *s = j->src + (size_t)(o * j->n + j->idx[k]) * in;
		uint8_t *d = j->dst + (size_t)u * in;
		if (in == 4)
			memcpy(d, s, 4);
		else if (in == 8)
			memcpy(d, s, 8);
		else
			memcpy(d, s, in);
	}
}

int
ml_cpu_gather(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *ix = c->in[1], *o = c->out[0];
	struct gather_job j;
	int64_t *idx;
	size_t es;
	int a;

	ML_TRY(ml_elem_size(c, x, &es));
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &a));
	int64_t outer = prod(x->dims, 0, a), inner = prod(x->dims, a + 1, x->rank);
	j.nidx = ml_tval_numel(ix);
	j.n = x->dims[a];
	j.inner = (size_t)inner * es;
	if (ml_tval_numel(o) != outer * j.nidx * inner)
		return ml_opfail(c, ML_EINVAL, "output shape does not match");
	if (ml_tval_numel(o) == 0)
		return 0;
	ML_TRY(load_indices(c, ix, j.n, &idx));
	j.dst = o->data;
	j.src = x->data;
	j.idx = idx;
	int64_t units = outer * j.nidx;
	if (ml_tval_nbytes(o) < PAR_BYTES)
		gather_run(&j, 0, units);
	else
		ml_parallel_for(units, ML_MAX(1, PAR_BYTES / 4 / (int64_t)j.inner), gather_run, &j);
	ml_free(idx);
	return 0;
}

/* Reductions of ScatterElements and ScatterND. */
enum { R_NONE, R_ADD, R_MUL, R_MAX, R_MIN };

static int
reduction_of(struct ml_opctx *c, int *red)
{
	static const char *const names[] = { "none", "add", "mul", "max", "min" };
	const char *s = ml_attr_str(c->node, "reduction", "none");
	for (int i = 0; i < 5; i++)
		if (strcmp(s, names[i]) == 0) {
			*red = i;
			return 0;
		}
	return ml_opfail(c, ML_EINVAL, "unknown reduction '%s'", s);
}

#define RED_LOOP(T) do { \
	T *d_ = (T *)dst; const T *s_ = (const T *)src; \
	for (int64_t i = 0; i < n; i++) { \
		T a_ = d_[i], b_ = s_[i]; \
		d_[i] = red == R_ADD ? (T)(a_ + b_) : red == R_MUL ? (T)(a_ * b_) : \
			red == R_MAX ? (a_ > b_ ? a_ : b_) : (a_ < b_ ? a_ : b_); \
	} } while (0)

/*
 * reduce_into: dst[i] = dst[i] (op) src[i] for n elements of type t.
 * Integer add and mul wrap as the unsigned types do; half types compute
 * in float.
 */
static int
reduce_into(struct ml_opctx *c, void *dst, const void *src, int64_t n, enum ml_dtype t, int red)
{
	switch (t) {
	case ML_F32: RED_LOOP(float); break;
	case ML_F64: RED_LOOP(double); break;
	case ML_I8: case ML_U8: case ML_BOOL:
		if (t == ML_I8) {
			RED_LOOP(int8_t);
		} else if (t == ML_U8) {
			RED_LOOP(uint8_t);
		} else {
			uint8_t *d = dst;
			const uint8_t *s = src;
			for (int64_t i = 0; i < n; i++)
				d[i] = red == R_ADD || red == R_MAX ? (d[i] || s[i]) : (d[i] && s[i]);
		}
		break;
	case ML_I16: RED_LOOP(int16_t); break;
	case ML_U16: RED_LOOP(uint16_t); break;
	case ML_I32: RED_LOOP(int32_t); break;
	case ML_U32: RED_LOOP(uint32_t); break;
	case ML_I64: RED_LOOP(int64_t); break;
	case ML_U64: RED_LOOP(uint64_t); break;
	case ML_F16: case ML_BF16:
		for (int64_t i = 0; i < n; i++) {
			double a = ml_get_f64(dst, t, i), b = ml_get_f64(src, t, i);
			double v = red == R_ADD ? a + b : red == R_MUL ? a * b :
				red == R_MAX ? (a > b ? a : b) : (a < b ? a : b);
			ml_set_f64(dst, t, i, v);
		}
		break;
	default:
		return ml_opfail(c, ML_ENOTSUP, "reduction over dtype %s", ml_dtype_name(t));
	}
	return 0;
}

/*
 * elements_walk: GatherElements and ScatterElements visit every position
 * of indices (whose dims may be smaller than data's) and the data element
 * it names along the axis: gather copies it out, scatter writes into it.
 */
static int
elements_walk(struct ml_opctx *c, struct ml_tval *x, struct ml_tval *ix, void *dst,
	      const void *upd, bool scatter)
{
	int64_t st[ML_MAX_RANK], coord[ML_MAX_RANK] = { 0 }, *idx, n = ml_tval_numel(ix);
	int a, red = R_NONE, rc = 0;
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &a));
	if (scatter)
		ML_TRY(reduction_of(c, &red));
	if (ix->rank != x->rank)
		return ml_opfail(c, ML_EINVAL, "indices and data differ in rank");
	for (int d = 0; d < x->rank; d++)
		if (d != a && ix->dims[d] > x->dims[d])
			return ml_opfail(c, ML_EINVAL, "indices dim %d is over data's", d);
	if (n == 0)
		return 0;
	ML_TRY(load_indices(c, ix, x->dims[a], &idx));
	int64_t s = 1;
	for (int d = x->rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= x->dims[d];
	}
	int64_t base = 0;
	for (int64_t i = 0; i < n; i++) {
		int64_t off = base + idx[i] * st[a];
		if (!scatter) {
			memcpy((uint8_t *)dst + (size_t)i * es, (const uint8_t *)x->data + (size_t)off * es,
			       es);
		} else if (red == R_NONE) {
			memcpy((uint8_t *)dst + (size_t)off * es, (const uint8_t *)upd + (size_t)i * es,
			       es);
		} else if ((rc = reduce_into(c, (uint8_t *)dst + (size_t)off * es,
					     (const uint8_t *)upd + (size_t)i * es, 1, x->dtype,
					     red)) < 0) {
			break;
		}
		for (int d = x->rank - 1; d >= 0; d--) {
			if (d != a)
				base += st[d];
			if (++coord[d] < ix->dims[d])
				break;
			if (d != a)
				base -= st[d] * ix->dims[d];
			coord[d] = 0;
		}
	}
	ml_free(idx);
	return rc;
}

int
ml_cpu_gather_elements(struct ml_opctx *c)
{
	struct ml_tval *o = c->out[0];

	if (ml_tval_numel(o) != ml_tval_numel(c->in[1]))
		return ml_opfail(c, ML_EINVAL, "output shape does not match");
	return elements_walk(c, c->in[0], c->in[1], o->data, NULL, false);
}

static int
copy_input(struct ml_opctx *c, struct ml_tval *x, struct ml_tval *o)
{
	int64_t nb = ml_tval_nbytes(x);

	if (nb != ml_tval_nbytes(o) || o->dtype != x->dtype)
		return ml_opfail(c, ML_EINVAL, "output shape does not match");
	if (nb > 0 && o->data != x->data)
		memcpy(o->data, x->data, (size_t)nb);
	return 0;
}

int
ml_cpu_scatter_elements(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *ix = c->in[1], *u = c->in[2], *o = c->out[0];

	if (u->rank != ix->rank || u->dtype != x->dtype)
		return ml_opfail(c, ML_EINVAL, "updates must match indices' shape and data's dtype");
	for (int d = 0; d < u->rank; d++)
		if (u->dims[d] != ix->dims[d])
			return ml_opfail(c, ML_EINVAL, "updates must match indices' shape");
	ML_TRY(copy_input(c, x, o));
	return elements_walk(c, x, ix, o->data, u->data, true);
}

/*
 * nd_offsets: for GatherND and ScatterND, the element offset in data of
 * each index tuple (the last dim of indices), per batch when batch_dims b
 * > 0. Returns a new array of count tuples (ml_free it).
 */
static int
nd_offsets(struct ml_opctx *c, const struct ml_tval *x, const struct ml_tval *ix, int b,
	   int64_t **out, int64_t *count)
{
	int r = x->rank, q = ix->rank;
	int64_t *raw, *off;

	*out = NULL;
	if (q < 1 || b < 0 || b >= ML_MIN(r, q))
		return ml_opfail(c, ML_EINVAL, "bad ranks for batch_dims %d", b);
	int64_t k = ix->dims[q - 1];
	if (k < 0 || k > r - b)
		return ml_opfail(c, ML_EINVAL, "indices' last dim %lld does not fit", (long long)k);
	for (int i = 0; i < b; i++)
		if (ix->dims[i] != x->dims[i])
			return ml_opfail(c, ML_EINVAL, "batch dim %d differs", i);
	int64_t n = prod(ix->dims, 0, q - 1), per = prod(ix->dims, b, q - 1);
	int64_t bstride = prod(x->dims, b, r);
	ML_TRY(load_indices(c, ix, -1, &raw));
	if ((off = ml_malloc((size_t)ML_MAX(n, 1) * sizeof *off)) == NULL) {
		ml_free(raw);
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	}
	for (int64_t t = 0; t < n; t++) {
		int64_t o = (t / ML_MAX(per, 1)) * bstride;
		for (int64_t j = 0; j < k; j++) {
			int64_t dim = x->dims[b + j], v = raw[t * k + j];
			if (v < 0)
				v += dim;
			if (v < 0 || v >= dim) {
				int rc = bad_index(c, raw[t * k + j], dim);
				ml_free(raw);
				ml_free(off);
				return rc;
			}
			o += v * prod(x->dims, b + (int)j + 1, r);
		}
		off[t] = o;
	}
	ml_free(raw);
	*out = off;
	*count = n;
	return 0;
}

int
ml_cpu_gather_nd(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *ix = c->in[1], *o = c->out[0];
	int b = (int)ml_attr_int(c->node, "batch_dims", 0);
	int64_t *off, n;
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	if (ix->rank < 1)
		return ml_opfail(c, ML_EINVAL, "indices must have rank 1 or more");
	ML_TRY(nd_offsets(c, x, ix, b, &off, &n));
	int64_t slice = prod(x->dims, b + (int)ix->dims[ix->rank - 1], x->rank);
	size_t sb = (size_t)slice * es;
	if (ml_tval_numel(o) != n * slice) {
		ml_free(off);
		return ml_opfail(c, ML_EINVAL, "output shape does not match");
	}
	for (int64_t t = 0; t < n; t++)
		memcpy((uint8_t *)o->data + (size_t)t * sb, (const uint8_t *)x->data + (size_t)off[t] * es,
		       sb);
	ml_free(off);
	return 0;
}

int
ml_cpu_scatter_nd(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *ix = c->in[1], *u = c->in[2], *o = c->out[0];
	int64_t *off, n;
	int red, rc = 0;
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	ML_TRY(reduction_of(c, &red));
	if (ix->rank < 1)
		return ml_opfail(c, ML_EINVAL, "indices must have rank 1 or more");
	int q = ix->rank;
	int64_t k = ix->dims[q - 1];
	/* updates' shape is indices.shape[:-1] + data.shape[k:] */
	bool ok = u->dtype == x->dtype && k <= x->rank && u->rank == q - 1 + x->rank - k;
	for (int i = 0; ok && i < u->rank; i++)
		ok = u->dims[i] == (i < q - 1 ? ix->dims[i] : x->dims[k + i - (q - 1)]);
	if (!ok)
		return ml_opfail(c, ML_EINVAL, "updates do not match indices and data");
	ML_TRY(copy_input(c, x, o));
	ML_TRY(nd_offsets(c, x, ix, 0, &off, &n));
	int64_t slice = prod(x->dims, (int)k, x->rank);
	size_t sb = (size_t)slice * es;
	for (int64_t t = 0; t < n && rc == 0; t++) {
		uint8_t *d = (uint8_t *)o->data + (size_t)off[t] * es;
		const uint8_t *s = (const uint8_t *)u->data + (size_t)t * sb;
		if (red == R_NONE)
			memcpy(d, s, sb);
		else
			rc = reduce_into(c, d, s, slice, x->dtype, red);
	}
	ml_free(off);
	return rc;
}

int
ml_cpu_one_hot(struct ml_opctx *c)
{
	struct ml_tval *ix = c->in[0], *vs = c->in[2], *o = c->out[0];
	int r = ix->rank + 1, a;
	size_t es;

	ML_TRY(ml_elem_size(c, vs, &es));
	ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", -1), r, &a));
	if (o->rank != r || ml_tval_numel(vs) != 2)
		return ml_opfail(c, ML_EINVAL, "output shape does not match");
	int64_t depth = o->dims[a], outer = prod(ix->dims, 0, a), inner = prod(ix->dims, a, ix->rank);
	const uint8_t *off = vs->data, *on = (const uint8_t *)vs->data + es;
	uint8_t *d = o->data;
	int64_t total = ml_tval_numel(o);
	for (int64_t i = 0; i < total; i++)
		memcpy(d + (size_t)i * es, off, es);
	for (int64_t p = 0; p < outer; p++)
		for (int64_t i = 0; i < inner; i++) {
			int64_t v = ml_get_i64(ix->data, ix->dtype, p * inner + i);
			if (v < 0)
				v += depth;
			/* Out-of-range indices give a row of off values, as ONNX says. */
			if (v < 0 || v >= depth)
				continue;
			memcpy(d + (size_t)((p * depth + v) * inner + i) * es, on, es);
		}
	return 0;
}

/* is_nonzero: element i of t is not zero (floats by value: -0.0 is zero). */
static bool
is_nonzero(const struct ml_tval *t, int64_t i, size_t es)
{
	if (ml_dtype_is_float(t->dtype))
		return ml_get_f64(t->data, t->dtype, i) != 0;
	const uint8_t *p = (const uint8_t *)t->data + (size_t)i * es;
	for (size_t j = 0; j < es; j++)
		if (p[j] != 0)
			return true;
	return false;
}

int
ml_cpu_nonzero(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0];
	int64_t n = ml_tval_numel(x), k = 0, dims[2];
	int r = ML_MAX(x->rank, 1);
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	for (int64_t i = 0; i < n; i++)
		k += is_nonzero(x, i, es);
	dims[0] = r;
	dims[1] = k;
	ML_TRY(ml_out_prepare(c, 0, ML_I64, 2, dims));
	int64_t *o = c->out[0]->data, j = 0;
	for (int64_t i = 0; i < n; i++) {
		if (!is_nonzero(x, i, es))
			continue;
		int64_t rem = i;
		for (int d = x->rank - 1; d >= 0; d--) {
			o[d * k + j] = rem % x->dims[d];
			rem /= x->dims[d];
		}
		if (x->rank == 0)
			o[j] = 0;
		j++;
	}
	return 0;
}

int
ml_cpu_reverse_sequence(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *sl = c->in[1], *o = c->out[0];
	int ta = (int)ml_attr_int(c->node, "time_axis", 0), ba = 1 - ta;
	int64_t *lens;
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	if (x->rank < 2 || ml_tval_nbytes(o) != ml_tval_nbytes(x))
		return ml_opfail(c, ML_EINVAL, "output shape does not match");
	int64_t T = x->dims[ta], B = x->dims[ba];
	if (ml_tval_numel(sl) != B)
		return ml_opfail(c, ML_EINVAL, "sequence_lens has %lld values for batch %lld",
				 (long long)ml_tval_numel(sl), (long long)B);
	ML_TRY(load_indices(c, sl, -1, &lens));
	size_t inner = (size_t)prod(x->dims, 2, x->rank) * es;
	int64_t st = ta == 0 ? B : 1, sb = ta == 0 ? 1 : T;
	for (int64_t b = 0; b < B; b++) {
		int64_t len = lens[b];
		if (len < 0 || len > T) {
			ml_free(lens);
			return ml_opfail(c, ML_EINVAL, "sequence length %lld is over %lld",
					 (long long)len, (long long)T);
		}
		for (int64_t t = 0; t < T; t++) {
			int64_t s = t < len ? len - 1 - t : t;
			memcpy((uint8_t *)o->data + (size_t)(t * st + b * sb) * inner,
			       (const uint8_t *)x->data + (size_t)(s * st + b * sb) * inner, inner);
		}
	}
	ml_free(lens);
	return 0;
}

int
ml_cpu_compress(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *cd = c->in[1];
	bool has_axis = ml_attr_find(c->node, "axis") != NULL;
	int64_t dims[ML_MAX_RANK], outer = 1, n, inner = 1, k = 0;
	int a = 0, r = 1;
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	if (has_axis) {
		ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &a));
		outer = prod(x->dims, 0, a);
		n = x->dims[a];
		inner = prod(x->dims, a + 1, x->rank);
		r = x->rank;
		memcpy(dims, x->dims, sizeof dims);
	} else {
		n = ml_tval_numel(x);
	}
	int64_t nc = ml_tval_numel(cd);
	for (int64_t i = 0; i < nc; i++)
		if (ml_get_f64(cd->data, cd->dtype, i) != 0) {
			if (i >= n)
				return ml_opfail(c, ML_EINVAL, "condition selects past the end");
			k++;
		}
	dims[a] = k;
	ML_TRY(ml_out_prepare(c, 0, x->dtype, r, dims));
	uint8_t *d = c->out[0]->data;
	size_t ib = (size_t)inner * es;
	for (int64_t p = 0; p < outer; p++)
		for (int64_t i = 0; i < nc && i < n; i++) {
			if (ml_get_f64(cd->data, cd->dtype, i) == 0)
				continue;
			memcpy(d, (const uint8_t *)x->data + (size_t)(p * n + i) * ib, ib);
			d += ib;
		}
	return 0;
}

/*
 * Unique sorts the items (elements, or slices along axis) with a stable
 * merge sort, so equal items group with the first occurrence first.
 */
struct uniq {
	const uint8_t *data;
	enum ml_dtype dt;
	size_t es;
	int64_t outer, n, inner;
};

static int
cmp_elem(const uint8_t *a, const uint8_t *b, enum ml_dtype t)
{
	switch (t) {
	case ML_I8: case ML_I16: case ML_I32: case ML_I64: {
		int64_t x = ml_get_i64(a, t, 0), y = ml_get_i64(b, t, 0);
		return (x > y) - (x < y);
	}
	case ML_U8: case ML_U16: case ML_U32: case ML_U64: case ML_BOOL: {
		uint64_t x = (uint64_t)ml_get_i64(a, t, 0), y = (uint64_t)ml_get_i64(b, t, 0);
		return (x > y) - (x < y);
	}
	default: {
		double x = ml_get_f64(a, t, 0), y = ml_get_f64(b, t, 0);
		return (x > y) - (x < y);
	}
	}
}

static int
cmp_items(const struct uniq *u, int64_t i, int64_t j)
{
	for (int64_t o = 0; o < u->outer; o++)
		for (int64_t k = 0; k < u->inner; k++) {
			const uint8_t *a = u->data + (size_t)((o * u->n + i) * u->inner + k) * u->es;
			const uint8_t *b = u->data + (size_t)((o * u->n + j) * u->inner + k) * u->es;
			int r = cmp_elem(a, b, u->dt);
			if (r != 0)
				return r;
		}
	return 0;
}

static void
merge_sort(const struct uniq *u, int64_t *v, int64_t *tmp, int64_t n)
{
	for (int64_t w = 1; w < n; w *= 2) {
		for (int64_t lo = 0; lo < n; lo += 2 * w) {
			int64_t mid = ML_MIN(lo + w, n), hi = ML_MIN(lo + 2 * w, n);
			int64_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				tmp[k++] = cmp_items(u, v[j], v[i]) < 0 ? v[j++] : v[i++];
			while (i < mid)
				tmp[k++] = v[i++];
			while (j < hi)
				tmp[k++] = v[j++];
		}
		memcpy(v, tmp, (size_t)n * sizeof *v);
	}
}

int
ml_cpu_unique(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0];
	struct uniq u = { .data = x->data, .dt = x->dtype, .outer = 1, .inner = 1 };
	bool sorted = ml_attr_int(c->node, "sorted", 1) != 0;
	int64_t *buf = NULL, dims[ML_MAX_RANK];
	int a = -1, rc = 0;

	ML_TRY(ml_elem_size(c, x, &u.es));
	if (ml_attr_find(c->node, "axis") != NULL) {
		ML_TRY(ml_norm_axis(c, ml_attr_int(c->node, "axis", 0), x->rank, &a));
		u.outer = prod(x->dims, 0, a);
		u.n = x->dims[a];
		u.inner = prod(x->dims, a + 1, x->rank);
	} else {
		u.n = ml_tval_numel(x);
	}
	int64_t n = u.n;
	/* order, tmp, group of each item, first item of each group, counts, rank of group */
	if ((buf = ml_calloc((size_t)ML_MAX(6 * n, 1), sizeof *buf)) == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	int64_t *ord = buf, *tmp = buf + n, *grp = buf + 2 * n, *first = buf + 3 * n;
	int64_t *cnt = buf + 4 * n, *pos = buf + 5 * n, ng = 0;
	for (int64_t i = 0; i < n; i++)
		ord[i] = i;
	merge_sort(&u, ord, tmp, n);
	for (int64_t i = 0; i < n; i++) {
		if (i == 0 || cmp_items(&u, ord[i - 1], ord[i]) != 0) {
			first[ng] = ord[i];
			cnt[ng] = 0;
			ng++;
		}
		grp[ord[i]] = ng - 1;
		cnt[ng - 1]++;
	}
	/* pos[g]: where group g goes in the output; unsorted keeps first-seen order. */
	if (sorted) {
		for (int64_t g = 0; g < ng; g++)
			pos[g] = g;
	} else {
		int64_t *seen = tmp, k = 0;
		for (int64_t i = 0; i < n; i++)
			seen[i] = -1;
		for (int64_t g = 0; g < ng; g++)
			seen[first[g]] = g;
		for (int64_t i = 0; i < n; i++)
			if (seen[i] >= 0)
				pos[seen[i]] = k++;
	}
	if (a >= 0) {
		memcpy(dims, x->dims, sizeof dims);
		dims[a] = ng;
	} else {
		dims[0] = ng;
	}
	if ((rc = ml_out_prepare(c, 0, x->dtype, a >= 0 ? x->rank : 1, dims)) < 0)
		goto done;
	size_t ib = (size_t)u.inner * u.es;
	uint8_t *y = c->out[0]->data;
	for (int64_t o = 0; o < u.outer; o++)
		for (int64_t g = 0; g < ng; g++)
			memcpy(y + (size_t)(o * ng + pos[g]) * ib,
			       u.data + (size_t)(o * n + first[g]) * ib, ib);
	for (int i = 1; i < c->n_out && i < 4; i++) {
		int64_t len = i == 2 ? n : ng;
		if (c->out[i] == NULL)
			continue;
		if ((rc = ml_out_prepare(c, i, ML_I64, 1, &len)) < 0)
			goto done;
		int64_t *p = c->out[i]->data;
		for (int64_t k = 0; k < len; k++) {
			if (i == 1)
				p[pos[k]] = first[k];
			else if (i == 2)
				p[k] = pos[grp[k]];
			else
				p[pos[k]] = cnt[k];
		}
	}
done:
	ml_free(buf);
	return rc;
}
