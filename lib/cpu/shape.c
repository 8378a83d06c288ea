/*
 * shape.c: CPU kernels of the shape family's layout ops (reshapes,
 * Transpose, Concat, Split, Slice, Expand, Tile, Pad, DepthToSpace and the
 * like) and its generators (Constant, Range, EyeLike), and the family's
 * kernel table. Data moves by element size, so every fixed-size dtype
 * works; most ops are views handed to one strided copy.
 */
#include "cpu/shape.h"

#ifdef __SSE2__
#include <immintrin.h>
#endif

/* Below this many bytes a copy runs on the calling thread alone. */
#define PAR_BYTES (64 * 1024)

int
ml_elem_size(struct ml_opctx *c, const struct ml_tval *t, size_t *es)
{
	*es = ml_dtype_size(t->dtype);
	if (*es == 0)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(t->dtype));
	return 0;
}

int
ml_out_prepare(struct ml_opctx *c, int i, enum ml_dtype dt, int rank, const int64_t *dims)
{
	struct ml_tval *o = c->out[i];

	if (o == NULL)
		return 0;
	if (o->data == NULL)
		return ml_tval_alloc(o, dt, rank, dims, c->err);
	bool same = o->dtype == dt && o->rank == rank;
	for (int d = 0; same && d < rank; d++)
		same = o->dims[d] == dims[d];
	if (!same)
		return ml_opfail(c, ML_EINVAL, "output %d was allocated with another shape", i);
	return 0;
}

/*
 * copy_elems: n elements from s (stride st bytes) to contiguous d. The
 * switch gives the compiler a constant size in each case, so the memcpy
 * calls become single moves.
 */
static inline void
copy_elems(uint8_t *d, const uint8_t *s, int64_t n, int64_t st, size_t es)
{
	switch (es) {
	case 1:
		for (int64_t j = 0; j < n; j++)
			d[j] = s[j * st];
		break;
	case 2:
		for (int64_t j = 0; j < n; j++)
			memcpy(d + 2 * j, s + j * st, 2);
		break;
	case 4:
		for (int64_t j = 0; j < n; j++)
			memcpy(d + 4 * j, s + j * st, 4);
		break;
	case 8:
		for (int64_t j = 0; j < n; j++)
			memcpy(d + 8 * j, s + j * st, 8);
		break;
	default:
		for (int64_t j = 0; j < n; j++)
			memcpy(d + (size_t)j * es, s + j * st, es);
		break;
	}
}

/* fill_elems: n copies of the element at s into d. */
static inline void
fill_elems(uint8_t *d, const uint8_t *s, int64_t n, size_t es)
{
	if (es == 1) {
		memset(d, s[0], (size_t)n);
		return;
	}
	copy_elems(d, s, n, 0, es);
}

enum { K_RUN, K_FILL, K_T2, K_GEN };
#define TILE 64

struct sview {
	int rank, kind, nr;	/* nr: the dims a work unit's index decomposes over */
	int64_t dims[ML_VIEW_MAX];
	int64_t stride[ML_VIEW_MAX];
	size_t es;
	uint8_t *dst;
	const uint8_t *src;
	int64_t tiles;		/* K_T2: tiles of TILE rows per batch */
};

/* unit_offset: the source offset of outer index u over dims[0..nr). */
static int64_t
unit_offset(const struct sview *v, int64_t u, int64_t *coord)
{
	int64_t off = 0;
	for (int d = v->nr - 1; d >= 0; d--) {
		coord[d] = u % v->dims[d];
		u /= v->dims[d];
		off += coord[d] * v->stride[d];
	}
	return off;
}

#ifdef __SSE2__
/*
 * t4x4_f32: out[i][j] = src[i + j * ld] for a 4x4 block of 4-byte
 * elements: four 16-byte loads along i, a register transpose, four
 * 16-byte stores along j (ld and ldo in elements).
 */
static inline void
t4x4_f32(uint8_t *d, const uint8_t *s, int64_t ld, int64_t ldo)
{
	__m128 r0 = _mm_loadu_ps((const float *)(const void *)s);
	__m128 r1 = _mm_loadu_ps((const float *)(const void *)(s + 4 * ld));
	__m128 r2 = _mm_loadu_ps((const float *)(const void *)(s + 8 * ld));
	__m128 r3 = _mm_loadu_ps((const float *)(const void *)(s + 12 * ld));
	_MM_TRANSPOSE4_PS(r0, r1, r2, r3);
	_mm_storeu_ps((float *)(void *)d, r0);
	_mm_storeu_ps((float *)(void *)(d + 4 * ldo), r1);
	_mm_storeu_ps((float *)(void *)(d + 8 * ldo), r2);
	_mm_storeu_ps((float *)(void *)(d + 12 * ldo), r3);
}
#endif

/*
 * run_t2: the blocked transpose. Each unit is TILE output rows of one
 * batch; tiles of TILE x TILE keep both sides in cache, and 4-byte
 * elements move in 4x4 register blocks.
 */
static void
run_t2(const struct sview *v, int64_t b, int64_t e)
{
	int64_t coord[ML_VIEW_MAX];
	int64_t A = v->dims[v->rank - 2], B = v->dims[v->rank - 1], ld = v->stride[v->rank - 1];
	size_t es = v->es;

	for (int64_t u = b; u < e; u++) {
		int64_t bi = u / v->tiles, i0 = (u % v->tiles) * TILE, i1 = ML_MIN(A, i0 + TILE);
		const uint8_t *s = v->src + unit_offset(v, bi, coord);
		uint8_t *d = v->dst + (size_t)(bi * A) * (size_t)B * es;
		for (int64_t j0 = 0; j0 < B; j0 += TILE) {
			int64_t j1 = ML_MIN(B, j0 + TILE), i = i0;
#ifdef __SSE2__
			/* (rows of fewer than 4 elements have no 4x4 block: the loop below) */
			if (es == 4 && ld % 4 == 0 && j1 - j0 >= 4) {
				int64_t jn = j0 + (j1 - j0) / 4 * 4;
				for (; i + 4 <= i1; i += 4) {
					for (int64_t j = j0; j < jn; j += 4)
						t4x4_f32(d + ((size_t)i * (size_t)B + (size_t)j) * 4,
							 s + (size_t)i * 4 + j * ld, ld / 4, B);
					for (int k = 0; k < 4 && jn < j1; k++)
						copy_elems(d + ((size_t)(i + k) * (size_t)B + (size_t)jn) * 4,
							   s + (size_t)(i + k) * 4 + jn * ld, j1 - jn, ld, 4);
				}
			}
#endif
			/* rows of 4 or fewer 4-byte elements (an RGB image to NHWC): one loop, no call per row */
			if (es == 4 && B <= 4) {
				uint32_t *df = (uint32_t *)(void *)d;
				const uint32_t *sf = (const uint32_t *)(const void *)s;
				int64_t lf = ld / 4;
				if (ld % 4 == 0 && B == 3)
					for (; i < i1; i++) {
						df[i * 3] = sf[i];
						df[i * 3 + 1] = sf[i + lf];
						df[i * 3 + 2] = sf[i + 2 * lf];
					}
				else if (ld % 4 == 0)
					for (; i < i1; i++)
						for (int64_t j = 0; j < B; j++)
							df[i * B + j] = sf[i + j * lf];
			}
			for (; i < i1; i++)
				copy_elems(d + ((size_t)i * (size_t)B + (size_t)j0) * es,
					   s + (size_t)i * es + j0 * ld, j1 - j0, ld, es);
		}
	}
}

/*
 * copy_row: row bytes from s to d. The small sizes of a transformer's
 * heads (16 to 64 floats) get a constant size, which the compiler turns
 * into a few vector moves instead of a call to memcpy per row.
 */
static inline void
copy_row(uint8_t *d, const uint8_t *s, size_t row)
{
	switch (row) {
	case 16:
		memcpy(d, s, 16);
		break;
	case 32:
		memcpy(d, s, 32);
		break;
	case 64:
		memcpy(d, s, 64);
		break;
	case 128:
		memcpy(d, s, 128);
		break;
	case 256:
		memcpy(d, s, 256);
		break;
	default:
		memcpy(d, s, row);
		break;
	}
}

static void
run_units(void *ctx, int64_t b, int64_t e)
{
	const struct sview *v = ctx;
	int64_t coord[ML_VIEW_MAX];

	if (v->kind == K_T2) {
		run_t2(v, b, e);
		return;
	}
	int64_t n = v->dims[v->rank - 1], st = v->stride[v->rank - 1];
	size_t row = (size_t)n * v->es;
	int64_t off = unit_offset(v, b, coord);
	for (int64_t u = b; u < e; u++) {
		uint8_t *d = v->dst + (size_t)u * row;
		const uint8_t *s = v->src + off;
		if (v->kind == K_RUN)
			copy_row(d, s, row);
		else if (v->kind == K_FILL)
			fill_elems(d, s, n, v->es);
		else
			copy_elems(d, s, n, st, v->es);
		for (int k = v->nr - 1; k >= 0; k--) {
			off += v->stride[k];
			if (++coord[k] < v->dims[k])
				break;
			off -= v->stride[k] * v->dims[k];
			coord[k] = 0;
		}
	}
}

void
ml_strided_copy(void *dst, const void *src, int rank, const int64_t *dims, const int64_t *stride,
		size_t es)
{
	struct sview v = { .es = es, .dst = dst, .src = src };
	int r = 0;

	/* Drop dims of size 1 and merge neighbours that are contiguous in src. */
	for (int d = 0; d < rank; d++) {
		if (dims[d] == 0)
			return;
		if (dims[d] == 1)
			continue;
		if (r > 0 && v.stride[r - 1] == stride[d] * dims[d]) {
			v.dims[r - 1] *= dims[d];
			v.stride[r - 1] = stride[d];
			continue;
		}
		v.dims[r] = dims[d];
		v.stride[r] = stride[d];
		r++;
	}
	if (r == 0) {
		memcpy(dst, src, es);
		return;
	}
	v.rank = r;
	int64_t total = 1, units = 1;
	for (int d = 0; d < r; d++)
		total *= v.dims[d];
	if (v.stride[r - 1] == (int64_t)es) {
		v.kind = K_RUN;
	} else if (v.stride[r - 1] == 0) {
		v.kind = K_FILL;
	} else if (r >= 2 && v.stride[r - 2] == (int64_t)es && v.dims[r - 2] >= 4 &&
		   (v.dims[r - 1] >= 4 || (es == 4 && v.dims[r - 1] >= 2))) {
		/* (rows of 2 or 3 4-byte elements: run_t2's loop for short rows, an image to NHWC) */
		v.kind = K_T2;
	} else {
		v.kind = K_GEN;
	}
	v.nr = v.kind == K_T2 ? r - 2 : r - 1;
	for (int d = 0; d < v.nr; d++)
		units *= v.dims[d];
	if (v.kind == K_T2) {
		v.tiles = (v.dims[r - 2] + TILE - 1) / TILE;
		units *= v.tiles;
	}
	int64_t per = total / units;
	if ((uint64_t)total * es < PAR_BYTES || units == 1) {
		run_units(&v, 0, units);
		return;
	}
	ml_parallel_for(units, ML_MAX(1, (PAR_BYTES / 4) / (int64_t)es / ML_MAX(per, 1)),
			run_units, &v);
}

/* strides_of: the byte strides of a contiguous tensor of shape t. */
static void
strides_of(const struct ml_tval *t, size_t es, int64_t *st)
{
	int64_t s = (int64_t)es;
	for (int d = t->rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= t->dims[d];
	}
}

/*
 * The copy ops: Identity, Reshape, Flatten, Squeeze and Unsqueeze only
 * change the shape, which the executor has already given the output.
 */
static int
k_copy(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *o = c->out[0];
	int64_t nb = ml_tval_nbytes(x);
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	if (nb != ml_tval_nbytes(o))
		return ml_opfail(c, ML_EINVAL, "output size differs from the input's");
	if (nb > 0 && o->data != x->data)
		memcpy(o->data, x->data, (size_t)nb);
	return 0;
}

static int
k_transpose(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *o = c->out[0];
	int64_t st[ML_MAX_RANK], vs[ML_MAX_RANK], dims[ML_MAX_RANK];
	const int64_t *perm;
	int n = ml_attr_ints(c->node, "perm", &perm);
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	/* the executor shares the two only where the transpose moves no data */
	if (o->data == x->data && ml_tval_numel(o) > 0)
		return ml_node_alias(c->node, x) ? 0 : ml_opfail(c, ML_EINVAL, "output is the input");
	strides_of(x, es, st);
	for (int i = 0; i < x->rank; i++) {
		int p = n >= 0 ? (int)perm[i] : x->rank - 1 - i;
		dims[i] = x->dims[p];
		vs[i] = st[p];
		if (o->dims[i] != dims[i])
			return ml_opfail(c, ML_EINVAL, "output shape does not match");
	}
	if (ml_tval_numel(o) > 0)
		ml_strided_copy(o->data, x->data, x->rank, dims, vs, es);
	return 0;
}

/*
 * Concat and Split share one loop: the joined tensor is outer rows, each
 * the pieces' rows side by side (a piece's row: its dim along the axis
 * times the inner size).
 */
struct cat {
	uint8_t *big;
	int64_t row, outer;
	int n;
	uint8_t **part;
	int64_t *prow;
	bool split;
};

static void
cat_run(void *ctx, int64_t b, int64_t e)
{
	const struct cat *k = ctx;

	for (int64_t r = b; r < e; r++) {
		uint8_t *p = k->big + (size_t)(r * k->row);
		for (int i = 0; i < k->n; i++) {
			size_t nb = (size_t)k->prow[i];
			if (nb == 0)
				continue;
			if (k->split)
				memcpy(k->part[i] + (size_t)r * nb, p, nb);
			else if (p != k->part[i] + (size_t)r * nb)	/* placed there (lib/exec/plan.c) */
				memcpy(p, k->part[i] + (size_t)r * nb, nb);
			p += nb;
		}
	}
}

static int
cat_common(struct ml_opctx *c, struct ml_tval *big, struct ml_tval **parts, int n, bool split)
{
	struct cat k = { .big = big->data, .n = n, .split = split };
	int64_t axis = ml_attr_int(c->node, "axis", 0), inner = 1;
	int a, rc = 0;
	size_t es;

	ML_TRY(ml_elem_size(c, big, &es));
	ML_TRY(ml_norm_axis(c, axis, big->rank, &a));
	k.outer = 1;
	for (int d = 0; d < a; d++)
		k.outer *= big->dims[d];
	for (int d = a + 1; d < big->rank; d++)
		inner *= big->dims[d];
	k.part = ml_calloc((size_t)n, sizeof *k.part);
	k.prow = ml_calloc((size_t)n, sizeof *k.prow);
	if (k.part == NULL || k.prow == NULL) {
		rc = ml_opfail(c, ML_ENOMEM, "out of memory");
		goto done;
	}
	int64_t sum = 0;
	for (int i = 0; i < n; i++) {
		struct ml_tval *t = parts[i];
		if (t == NULL || t->rank != big->rank || t->dtype != big->dtype) {
			rc = ml_opfail(c, ML_EINVAL, "piece %d does not match", i);
			goto done;
		}
		for (int d = 0; d < big->rank; d++)
			if (d != a && t->dims[d] != big->dims[d]) {
				rc = ml_opfail(c, ML_EINVAL, "piece %d differs in dim %d", i, d);
				goto done;
			}
		k.part[i] = t->data;
		k.prow[i] = t->dims[a] * inner * (int64_t)es;
		sum += t->dims[a];
	}
	if (sum != big->dims[a]) {
		rc = ml_opfail(c, ML_EINVAL, "pieces add up to %lld along the axis, not %lld",
			       (long long)sum, (long long)big->dims[a]);
		goto done;
	}
	k.row = big->dims[a] * inner * (int64_t)es;
	if (k.row == 0 || k.outer == 0)
		goto done;
	if (k.row * k.outer < PAR_BYTES)
		cat_run(&k, 0, k.outer);
	else
		ml_parallel_for(k.outer, ML_MAX(1, PAR_BYTES / 4 / k.row), cat_run, &k);
done:
	ml_free(k.part);
	ml_free(k.prow);
	return rc;
}

static int
k_concat(struct ml_opctx *c)
{
	return cat_common(c, c->out[0], c->in, c->n_in, false);
}

static int
k_split(struct ml_opctx *c)
{
	return cat_common(c, c->in[0], c->out, c->n_out, true);
}

/*
 * struct slice_prep: what a Slice node keeps in its session cache
 * (ml_node_prep): the bounds ml_shape_slice made of its starts, ends,
 * axes and steps (constants of the graph, or attributes) for the input
 * shape in dims, so a run does not decode and clamp them again.
 */
struct slice_prep {
	bool valid;
	int rank;
	int64_t dims[ML_MAX_RANK];
	int64_t start[ML_MAX_RANK], step[ML_MAX_RANK], len[ML_MAX_RANK];
};

/* slice_bounds: ml_shape_slice of c, from the node's cache where it holds for x's shape */
static int
slice_bounds(struct ml_opctx *c, const struct ml_tval *x, int64_t *start, int64_t *step,
	     int64_t *len)
{
	/* only bounds that cannot change between runs: constants or attributes */
	bool fixed = x->rank <= ML_MAX_RANK;
	for (int i = 1; i < c->node->n_in && fixed; i++) {
		int t = c->node->in[i];
		fixed = t < 0 || c->g->tensors[t]->kind == ML_TK_CONST;
	}
	struct slice_prep *p = fixed ? ml_node_prep(c, sizeof *p) : NULL;
	size_t nb = sizeof(int64_t) * (size_t)ML_MAX(x->rank, 0);
	if (p != NULL && p->valid && p->rank == x->rank && memcmp(p->dims, x->dims, nb) == 0) {
		memcpy(start, p->start, nb);
		memcpy(step, p->step, nb);
		memcpy(len, p->len, nb);
		return 0;
	}
	ML_TRY(ml_shape_slice(c, x, start, step, len));
	if (p != NULL) {
		p->rank = x->rank;
		memcpy(p->dims, x->dims, nb);
		memcpy(p->start, start, nb);
		memcpy(p->step, step, nb);
		memcpy(p->len, len, nb);
		p->valid = true;
	}
	return 0;
}

static int
k_slice(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *o = c->out[0];
	int64_t start[ML_MAX_RANK], step[ML_MAX_RANK], len[ML_MAX_RANK], st[ML_MAX_RANK];
	int64_t vs[ML_MAX_RANK], off = 0;
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	ML_TRY(slice_bounds(c, x, start, step, len));
	strides_of(x, es, st);
	for (int d = 0; d < x->rank; d++) {
		if (len[d] != o->dims[d])
			return ml_opfail(c, ML_EINVAL, "output shape does not match");
		if (len[d] > 0)
			off += start[d] * st[d];
		vs[d] = step[d] * st[d];
	}
	if (ml_tval_numel(o) > 0)
		ml_strided_copy(o->data, (const uint8_t *)x->data + off, x->rank, len, vs, es);
	return 0;
}

static int
k_expand(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *o = c->out[0];
	int64_t st[ML_MAX_RANK], vs[ML_MAX_RANK];
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	if (x->rank > o->rank)
		return ml_opfail(c, ML_EINVAL, "output rank is below the input's");
	strides_of(x, es, st);
	for (int d = 0; d < o->rank; d++) {
		int k = d - (o->rank - x->rank);
		if (k < 0 || x->dims[k] == 1) {
			vs[d] = 0;
		} else if (x->dims[k] == o->dims[d]) {
			vs[d] = st[k];
		} else {
			return ml_opfail(c, ML_EINVAL, "dim %d of size %lld does not expand to %lld",
					 k, (long long)x->dims[k], (long long)o->dims[d]);
		}
	}
	if (ml_tval_numel(o) > 0)
		ml_strided_copy(o->data, x->data, o->rank, o->dims, vs, es);
	return 0;
}

/* Tile: the output of dim d is [repeats, dim] in row-major order, a view with stride 0. */
static int
k_tile(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *o = c->out[0];
	int64_t st[ML_MAX_RANK], vd[ML_VIEW_MAX], vs[ML_VIEW_MAX];
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	if (x->rank != o->rank)
		return ml_opfail(c, ML_EINVAL, "output rank differs");
	strides_of(x, es, st);
	for (int d = 0; d < x->rank; d++) {
		if (x->dims[d] == 0 ? o->dims[d] != 0 : o->dims[d] % x->dims[d] != 0)
			return ml_opfail(c, ML_EINVAL, "output shape does not match");
		vd[2 * d] = x->dims[d] == 0 ? 0 : o->dims[d] / x->dims[d];
		vs[2 * d] = 0;
		vd[2 * d + 1] = x->dims[d];
		vs[2 * d + 1] = st[d];
	}
	if (ml_tval_numel(o) > 0)
		ml_strided_copy(o->data, x->data, 2 * x->rank, vd, vs, es);
	return 0;
}

/* pad_map: the source index of padded index i in a dim of n, or -1 (constant). */
static int64_t
pad_map(int64_t i, int64_t n, int mode)
{
	if (i >= 0 && i < n)
		return i;
	switch (mode) {
	case 1: {		/* reflect */
		if (n == 1)
			return 0;
		int64_t p = 2 * (n - 1);
		i = i < 0 ? -i : i;
		i %= p;
		return i < n ? i : p - i;
	}
	case 2:			/* edge */
		return i < 0 ? 0 : n - 1;
	case 3:			/* wrap */
		return ((i % n) + n) % n;
	default:
		return -1;
	}
}

struct pad_job {
	const struct ml_tval *x, *o;
	int64_t pads[2 * ML_MAX_RANK];
	int mode;
	size_t es;
	_Alignas(16) uint8_t val[16];
};

static void
pad_rows(void *ctx, int64_t b, int64_t e)
{
	const struct pad_job *j = ctx;
	const struct ml_tval *x = j->x, *o = j->o;
	int r = o->rank;
	size_t es = j->es;
	int64_t on = o->dims[r - 1], xn = x->dims[r - 1], p0 = j->pads[r - 1];
	int64_t lo = ML_MAX(0, p0), hi = ML_MIN(on, p0 + xn);

	for (int64_t row = b; row < e; row++) {
		uint8_t *d = (uint8_t *)o->data + (size_t)(row * on) * es;
		int64_t rem = row, src = 0, mul = 1;
		bool outside = false;
		for (int k = r - 2; k >= 0; k--) {
			int64_t ok = rem % o->dims[k];
			rem /= o->dims[k];
			int64_t s = pad_map(ok - j->pads[k], x->dims[k], j->mode);
			if (s < 0)
				outside = true;
			src += s * mul;
			mul *= x->dims[k];
		}
		if (outside) {
			fill_elems(d, j->val, on, es);
			continue;
		}
		const uint8_t *s = (const uint8_t *)x->data + (size_t)(src * xn) * es;
		if (hi > lo)
			memcpy(d + (size_t)lo * es, s + (size_t)(lo - p0) * es, (size_t)(hi - lo) * es);
		for (int64_t i = 0; i < on; i++) {
			if (i == lo && hi > lo) {
				i = hi - 1;
				continue;
			}
			int64_t k = pad_map(i - p0, xn, j->mode);
			memcpy(d + (size_t)i * es, k < 0 ? j->val : s + (size_t)k * es, es);
		}
	}
}

static int
k_pad(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *o = c->out[0], *cv = ML_IN(c, 2);
	static const char *const modes[] = { "constant", "reflect", "edge", "wrap" };
	const char *mode = ml_attr_str(c->node, "mode", "constant");
	struct pad_job j = { .x = x, .o = o };
	bool known;

	ML_TRY(ml_elem_size(c, x, &j.es));
	if (j.es > sizeof j.val)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s", ml_dtype_name(x->dtype));
	for (j.mode = 0; j.mode < 4 && strcmp(mode, modes[j.mode]) != 0; j.mode++)
		;
	if (j.mode == 4)
		return ml_opfail(c, ML_EINVAL, "unknown mode '%s'", mode);
	ML_TRY(ml_shape_pads(c, x->rank, j.pads, &known));
	if (!known || o->rank != x->rank)
		return ml_opfail(c, ML_EINVAL, "pads are not known");
	for (int d = 0; d < x->rank; d++)
		if (o->dims[d] != x->dims[d] + j.pads[d] + j.pads[x->rank + d])
			return ml_opfail(c, ML_EINVAL, "output shape does not match");
	if (ml_attr_find(c->node, "pads") != NULL) {
		ml_set_f64(j.val, x->dtype, 0, ml_attr_float(c->node, "value", 0));
	} else if (cv != NULL && ml_tval_numel(cv) > 0) {
		if (cv->dtype != x->dtype)
			return ml_opfail(c, ML_EINVAL, "constant_value's dtype differs from data's");
		memcpy(j.val, cv->data, j.es);
	}
	if (ml_tval_numel(o) == 0)
		return 0;
	if (x->rank == 0) {
		memcpy(o->data, x->data, j.es);
		return 0;
	}
	int64_t rows = ml_tval_numel(o) / o->dims[o->rank - 1];
	if (ml_tval_nbytes(o) < PAR_BYTES)
		pad_rows(&j, 0, rows);
	else
		ml_parallel_for(rows, ML_MAX(1, PAR_BYTES / 4 / (o->dims[o->rank - 1] * (int64_t)j.es)),
				pad_rows, &j);
	return 0;
}

/*
 * DepthToSpace and SpaceToDepth: views of the NCHW input with the block
 * split out of the channel (or spatial) dims, so one strided copy does it.
 */
static int
k_depth_to_space(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *o = c->out[0];
	int64_t b = ml_attr_int(c->node, "blocksize", 0);
	bool crd = strcmp(ml_attr_str(c->node, "mode", "DCR"), "CRD") == 0;
	int64_t d[6], s[6];
	size_t es;

	ML_TRY(ml_elem_size(c, x, &es));
	if (x->rank != 4 || o->rank != 4 || b <= 0)
		return ml_opfail(c, ML_EINVAL, "input must be 4-D");
	int64_t n = x->dims[0], ch = x->dims[1], h = x->dims[2], w = x->dims[3], e = (int64_t)es;
	if (c->node->op == ML_OP_DEPTH_TO_SPACE) {
		int64_t cc = ch / (b * b);
		if (o->dims[1] != cc || o->dims[2] != h * b || o->dims[3] != w * b)
			return ml_opfail(c, ML_EINVAL, "output shape does not match");
		/* The output viewed as [N, C', H, b1, W, b2]. */
		int64_t d6[6] = { n, cc, h, b, w, b };
		int64_t hw = h * w * e;
		int64_t s6[6] = { ch * hw, crd ? b * b * hw : hw, w * e, crd ? b * hw : b * cc * hw, e,
				  crd ? hw : cc * hw };
		memcpy(d, d6, sizeof d);
		memcpy(s, s6, sizeof s);
	} else {
		int64_t hh = h / b, ww = w / b;
		if (o->dims[1] != ch * b * b || o->dims[2] != hh || o->dims[3] != ww)
			return ml_opfail(c, ML_EINVAL, "output shape does not match");
		/* The output viewed as [N, b1, b2, C, H', W']. */
		int64_t d6[6] = { n, b, b, ch, hh, ww };
		int64_t s6[6] = { ch * h * w * e, w * e, e, h * w * e, b * w * e, b * e };
		memcpy(d, d6, sizeof d);
		memcpy(s, s6, sizeof s);
	}
	if (ml_tval_numel(o) > 0)
		ml_strided_copy(o->data, x->data, 6, d, s, es);
	return 0;
}

static int
k_shape(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *o = c->out[0];
	int64_t r = x->rank, s = ml_attr_int(c->node, "start", 0), e = ml_attr_int(c->node, "end", r);

	s = s < 0 ? ML_MAX(0, s + r) : ML_MIN(s, r);
	e = e < 0 ? ML_MAX(0, e + r) : ML_MIN(e, r);
	if (o->dtype != ML_I64 || o->rank != 1 || o->dims[0] != ML_MAX(0, e - s))
		return ml_opfail(c, ML_EINVAL, "output shape does not match");
	for (int64_t i = s; i < e; i++)
		((int64_t *)o->data)[i - s] = x->dims[i];
	return 0;
}

static int
k_size(struct ml_opctx *c)
{
	int64_t n = ml_tval_numel(c->in[0]);

	memcpy(c->out[0]->data, &n, sizeof n);
	return 0;
}

static int
k_constant(struct ml_opctx *c)
{
	struct ml_tval *o = c->out[0];
	struct ml_shape_const k;
	int64_t n = ml_tval_numel(o);

	ML_TRY(ml_shape_constant(c, &k));
	if (o->dtype != k.dtype || o->rank != k.rank)
		return ml_opfail(c, ML_EINVAL, "output shape does not match");
	if (k.data != NULL)
		memcpy(o->data, k.data, (size_t)ml_tval_nbytes(o));
	else if (k.ints != NULL)
		memcpy(o->data, k.ints, (size_t)n * sizeof(int64_t));
	else if (k.floats != NULL)
		for (int64_t i = 0; i < n; i++)
			((float *)o->data)[i] = (float)k.floats[i];
	else if (k.dtype == ML_I64)
		memcpy(o->data, &k.iv, sizeof k.iv);
	else if (n > 0)
		ml_set_f64(o->data, ML_F32, 0, k.fv);
	return 0;
}

static int
k_constant_of_shape(struct ml_opctx *c)
{
	struct ml_tval *o = c->out[0];
	const struct ml_attr *a = ml_attr_find(c->node, "value");
	_Alignas(16) uint8_t zero[16] = { 0 };
	const void *v = zero;
	size_t es;

	ML_TRY(ml_elem_size(c, o, &es));
	if (a != NULL && a->type == ML_ATTR_TENSOR && a->tensors != NULL &&
	    a->tensors[0] != NULL && a->tensors[0]->data != NULL &&
	    a->tensors[0]->dtype == o->dtype)
		v = a->tensors[0]->data;
	else if (es > sizeof zero)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s", ml_dtype_name(o->dtype));
	fill_elems(o->data, v, ml_tval_numel(o), es);
	return 0;
}

/* put_i64: store v as element i of an integer array of type t. */
static void
put_i64(void *p, enum ml_dtype t, int64_t i, int64_t v)
{
	switch (t) {
	case ML_I64: case ML_U64: ((int64_t *)p)[i] = v; break;
	case ML_I32: case ML_U32: ((int32_t *)p)[i] = (int32_t)v; break;
	case ML_I16: case ML_U16: ((int16_t *)p)[i] = (int16_t)v; break;
	default: ((int8_t *)p)[i] = (int8_t)v; break;
	}
}

static int
k_range(struct ml_opctx *c)
{
	struct ml_tval *s = c->in[0], *d = c->in[2], *o = c->out[0];
	enum ml_dtype t = s->dtype;
	int64_t n = ml_tval_numel(o);

	if (ml_dtype_is_float(t)) {
		double a = ml_get_f64(s->data, t, 0), dd = ml_get_f64(d->data, t, 0);
		if (t == ML_F32)
			for (int64_t i = 0; i < n; i++)
				((float *)o->data)[i] = (float)(a + (double)i * dd);
		else
			for (int64_t i = 0; i < n; i++)
				ml_set_f64(o->data, t, i, a + (double)i * dd);
	} else if (ml_dtype_is_int(t)) {
		uint64_t a = (uint64_t)ml_get_i64(s->data, t, 0), dd = (uint64_t)ml_get_i64(d->data, t, 0);
		for (int64_t i = 0; i < n; i++)
			put_i64(o->data, t, i, (int64_t)(a + (uint64_t)i * dd));
	} else {
		return ml_opfail(c, ML_ENOTSUP, "dtype %s", ml_dtype_name(t));
	}
	return 0;
}

static int
k_eye_like(struct ml_opctx *c)
{
	struct ml_tval *o = c->out[0];
	int64_t k = ml_attr_int(c->node, "k", 0);
	size_t es;

	ML_TRY(ml_elem_size(c, o, &es));
	if (o->rank != 2)
		return ml_opfail(c, ML_EINVAL, "output must be 2-D");
	int64_t rows = o->dims[0], cols = o->dims[1];
	memset(o->data, 0, (size_t)ml_tval_nbytes(o));
	for (int64_t i = 0; i < rows; i++) {
		int64_t j = i + k;
		if (j >= 0 && j < cols)
			ml_set_f64(o->data, o->dtype, i * cols + j, 1.0);
	}
	return 0;
}

static int
k_trilu(struct ml_opctx *c)
{
	struct ml_tval *x = c->in[0], *o = c->out[0], *kt = ML_IN(c, 1);
	bool upper = ml_attr_int(c->node, "upper", 1) != 0;
	int64_t k = 0;
	size_t es;

	ML_TRY(k_copy(c));
	ML_TRY(ml_elem_size(c, x, &es));
	if (kt != NULL && ml_tval_numel(kt) > 0)
		k = ml_get_i64(kt->data, kt->dtype, 0);
	int64_t m = x->dims[x->rank - 2], n = x->dims[x->rank - 1];
	int64_t mats = m * n > 0 ? ml_tval_numel(x) / (m * n) : 0;
	for (int64_t b = 0; b < mats; b++)
		for (int64_t i = 0; i < m; i++) {
			uint8_t *row = (uint8_t *)o->data + (size_t)((b * m + i) * n) * es;
			/* Keep j - i >= k (upper) or j - i <= k (lower); zero the rest. */
			int64_t lo, hi;
			if (upper) {
				lo = 0;
				hi = k > INT64_MAX - i ? n : ML_MIN(n, ML_MAX(0, i + k));
			} else {
				lo = k >= INT64_MAX - i ? n : ML_MAX(0, ML_MIN(n, i + k + 1));
				hi = n;
			}
			if (hi > lo)
				memset(row + (size_t)lo * es, 0, (size_t)(hi - lo) * es);
		}
	return 0;
}

const struct ml_cpu_kernel ml_cpu_shape[] = {
	{ ML_OP_IDENTITY, k_copy },
	{ ML_OP_RESHAPE, k_copy },
	{ ML_OP_FLATTEN, k_copy },
	{ ML_OP_SQUEEZE, k_copy },
	{ ML_OP_UNSQUEEZE, k_copy },
	{ ML_OP_TRANSPOSE, k_transpose },
	{ ML_OP_CONCAT, k_concat },
	{ ML_OP_SPLIT, k_split },
	{ ML_OP_SLICE, k_slice },
	{ ML_OP_GATHER, ml_cpu_gather },
	{ ML_OP_GATHER_ELEMENTS, ml_cpu_gather_elements },
	{ ML_OP_GATHER_ND, ml_cpu_gather_nd },
	{ ML_OP_SCATTER_ELEMENTS, ml_cpu_scatter_elements },
	{ ML_OP_SCATTER, ml_cpu_scatter_elements },
	{ ML_OP_SCATTER_ND, ml_cpu_scatter_nd },
	{ ML_OP_SHAPE, k_shape },
	{ ML_OP_SIZE, k_size },
	{ ML_OP_CONSTANT, k_constant },
	{ ML_OP_CONSTANT_OF_SHAPE, k_constant_of_shape },
	{ ML_OP_EXPAND, k_expand },
	{ ML_OP_TILE, k_tile },
	{ ML_OP_PAD, k_pad },
	{ ML_OP_RANGE, k_range },
	{ ML_OP_ONE_HOT, ml_cpu_one_hot },
	{ ML_OP_TRILU, k_trilu },
	{ ML_OP_EYE_LIKE, k_eye_like },
	{ ML_OP_NONZERO, ml_cpu_nonzero },
	{ ML_OP_DEPTH_TO_SPACE, k_depth_to_space },
	{ ML_OP_SPACE_TO_DEPTH, k_depth_to_space },
	{ ML_OP_REVERSE_SEQUENCE, ml_cpu_reverse_sequence },
	{ ML_OP_COMPRESS, ml_cpu_compress },
	{ ML_OP_UNIQUE, ml_cpu_unique },
	{ ML_OP_RESIZE, ml_cpu_resize },
	{ ML_OP_UPSAMPLE, ml_cpu_resize },
	{ .op = ML_OP_NONE },
};
