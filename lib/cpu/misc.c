/*
 * misc.c: CPU kernels of the misc family: the kernel table, and the
 * kernels of NonMaxSuppression, MaxUnpool, Det, the random generators and
 * TfIdfVectorizer. Einsum, the samplers and the signal ops have files of
 * their own (lib/cpu/misc_*.c).
 */
#include "cpu/elem.h"
#include "cpu/misc.h"
#include "cpu/shape.h"

static int
nomem(struct ml_opctx *c)
{
	return ml_opfail(c, ML_ENOMEM, "out of memory");
}

/*
 * NonMaxSuppression, as ONNX Runtime does it: per batch and class, boxes
 * above score_threshold in descending score order (ties: lower index
 * first), each kept unless its IoU with a kept box exceeds iou_threshold.
 */
struct nbox {
	double y1, x1, y2, x2;	/* y1 <= y2, x1 <= x2 */
};

struct cand {
	double score;
	int64_t idx;
};

static int
cand_cmp(const void *a, const void *b)
{
	const struct cand *p = a, *q = b;
	if (p->score != q->score)
		return p->score > q->score ? -1 : 1;
	return p->idx < q->idx ? -1 : p->idx > q->idx;
}

static bool
iou_over(const struct nbox *a, const struct nbox *b, double thr)
{
	double ix1 = ML_MAX(a->x1, b->x1), iy1 = ML_MAX(a->y1, b->y1);
	double ix2 = ML_MIN(a->x2, b->x2), iy2 = ML_MIN(a->y2, b->y2);

	if (ix2 <= ix1 || iy2 <= iy1)
		return false;
	double inter = (ix2 - ix1) * (iy2 - iy1);
	double a1 = (a->x2 - a->x1) * (a->y2 - a->y1), a2 = (b->x2 - b->x1) * (b->y2 - b->y1);
	if (a1 <= 0 || a2 <= 0)
		return false;
	double uni = a1 + a2 - inter;
	return uni > 0 && inter / uni > thr;
}

static int
run_nms(struct ml_opctx *c)
{
	const struct ml_tval *bx = c->in[0], *sc = c->in[1];
	const struct ml_tval *mo = ML_IN(c, 2), *it = ML_IN(c, 3), *stt = ML_IN(c, 4);
	bool center = ml_attr_int(c->node, "center_point_box", 0) != 0;
	int64_t B = bx->dims[0], S = bx->dims[1], C = sc->dims[1];
	int64_t maxo = mo != NULL && ml_tval_numel(mo) > 0 ? ml_get_i64(mo->data, mo->dtype, 0) : 0;
	double iou = it != NULL && ml_tval_numel(it) > 0 ? ml_get_f64(it->data, it->dtype, 0) : 0;
	bool has_st = stt != NULL && ml_tval_numel(stt) > 0;
	double st = has_st ? ml_get_f64(stt->data, stt->dtype, 0) : 0;
	struct nbox *boxes = NULL;
	const struct nbox **kept = NULL;
	struct cand *cands = NULL;
	int64_t *sel = NULL, nsel = 0, cap = 0;
	int rc = 0;

	if (sc->dims[0] != B || sc->dims[2] != S || bx->dims[2] != 4)
		return ml_opfail(c, ML_EINVAL, "boxes and scores disagree in shape");
	if (maxo > S)
		maxo = S;
	if (maxo > 0 && B * C * S > 0) {
		boxes = ml_malloc(sizeof *boxes * (size_t)(B * S));
		cands = ml_malloc(sizeof *cands * (size_t)S);
		kept = ml_malloc(sizeof *kept * (size_t)S);
		if (boxes == NULL || cands == NULL || kept == NULL) {
			rc = nomem(c);
			goto out;
		}
		for (int64_t i = 0; i < B * S; i++) {
			double v[4];
			for (int k = 0; k < 4; k++)
				v[k] = ml_get_f64(bx->data, bx->dtype, i * 4 + k);
			struct nbox *p = &boxes[i];
			if (center) {
				p->x1 = v[0] - v[2] / 2;
				p->x2 = v[0] + v[2] / 2;
				p->y1 = v[1] - v[3] / 2;
				p->y2 = v[1] + v[3] / 2;
			} else {
				p->y1 = ML_MIN(v[0], v[2]);
				p->y2 = ML_MAX(v[0], v[2]);
				p->x1 = ML_MIN(v[1], v[3]);
				p->x2 = ML_MAX(v[1], v[3]);
			}
		}
	}
	for (int64_t b = 0; maxo > 0 && b < B; b++)
		for (int64_t k = 0; k < C; k++) {
			int64_t nc = 0, nk = 0;
			for (int64_t i = 0; i < S; i++) {
				double s = ml_get_f64(sc->data, sc->dtype, (b * C + k) * S + i);
				if (!has_st || s > st)
					cands[nc++] = (struct cand){ s, i };
			}
			qsort(cands, (size_t)nc, sizeof *cands, cand_cmp);
			for (int64_t q = 0; q < nc && nk < maxo; q++) {
				const struct nbox *p = &boxes[b * S + cands[q].idx];
				bool drop = false;
				for (int64_t r = 0; r < nk && !drop; r++)
					drop = iou_over(kept[r], p, iou);
				if (drop)
					continue;
				kept[nk++] = p;
				if (nsel == cap) {
					cap = cap ? 2 * cap : 64;
					int64_t *ns = ml_realloc(sel, sizeof *sel * 3 * (size_t)cap);
					if (ns == NULL) {
						rc = nomem(c);
						goto out;
					}
					sel = ns;
				}
				sel[3 * nsel] = b;
				sel[3 * nsel + 1] = k;
				sel[3 * nsel + 2] = cands[q].idx;
				nsel++;
			}
		}
	int64_t dims[2] = { nsel, 3 };
	if ((rc = ml_out_prepare(c, 0, ML_I64, 2, dims)) < 0)
		goto out;
	if (nsel > 0)
		memcpy(c->out[0]->data, sel, sizeof *sel * 3 * (size_t)nsel);
out:
	ml_free(boxes);
	ml_free(cands);
	ml_free(kept);
	ml_free(sel);
	return rc;
}

/*
 * MaxUnpool: zeros, with X's values at I's flat indices. The indices
 * address the unpooled shape (in - 1) * stride - pads + kernel; an
 * output_shape that differs from it (ONNX ignores pads then) gets that
 * block at its origin, cropped or zero-extended, as ONNX's test data does.
 */
static int
run_max_unpool(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *ind = c->in[1];
	struct ml_tval *y = c->out[0];
	size_t es = ml_dtype_size(x->dtype);
	int64_t n = ml_tval_numel(x), ny = ml_tval_numel(y);
	const int64_t *ip = ind->data;
	const int64_t *ks, *st, *pads;
	int nk = ml_attr_ints(c->node, "kernel_shape", &ks);
	int ns = ml_attr_ints(c->node, "strides", &st);
	int np = ml_attr_ints(c->node, "pads", &pads);
	int64_t inf[ML_MAX_RANK], ninf = 1;
	bool same = true;

	if (ml_tval_numel(ind) != n || es == 0 || y->dtype != x->dtype || nk != x->rank - 2 ||
	    y->rank != x->rank)
		return ml_opfail(c, ML_EINVAL, "X, I and the output disagree in shape");
	inf[0] = x->dims[0];
	inf[1] = x->dims[1];
	for (int i = 0; i < nk; i++) {
		int64_t p = np > 0 && ML_IN(c, 2) == NULL ? pads[i] + pads[nk + i] : 0;
		inf[2 + i] = (x->dims[2 + i] - 1) * (ns > 0 ? st[i] : 1) - p + ks[i];
	}
	for (int d = 0; d < x->rank; d++) {
		ninf *= inf[d];
		same = same && inf[d] == y->dims[d];
	}
	memset(y->data, 0, es * (size_t)ny);
	for (int64_t i = 0; i < n; i++) {
		int64_t at = ip[i];
		if (at < 0 || at >= (same ? ny : ninf))
			return ml_opfail(c, ML_EINVAL, "index %lld is outside the %lld unpooled "
					 "elements", (long long)at, (long long)(same ? ny : ninf));
		if (!same) {
			int64_t rem = at, pos = 0, mul = 1;
			bool in = true;
			for (int d = x->rank - 1; d >= 0; d--) {
				int64_t q = rem % inf[d];
				rem /= inf[d];
				in = in && q < y->dims[d];
				pos += q * mul;
				mul *= y->dims[d];
			}
			if (!in)
				continue;
			at = pos;
		}
		memcpy((uint8_t *)y->data + es * (size_t)at, (const uint8_t *)x->data + es * (size_t)i,
		       es);
	}
	return 0;
}

/* Det: LU decomposition with partial pivoting, in double, per matrix. */
static int
run_det(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	struct ml_tval *y = c->out[0];
	int64_t n = x->dims[x->rank - 1], nm = ml_tval_numel(y), nn;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_det);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(x->dtype));
	if (!ml_mul_ok(n, n, &nn))
		return ml_opfail(c, ML_EINVAL, "the matrices are too large");
	double *a = ml_malloc(sizeof(double) * (size_t)ML_MAX(nn, 1));
	if (a == NULL)
		return nomem(c);
	for (int64_t m = 0; m < nm; m++) {
		for (int64_t i = 0; i < nn; i++)
			a[i] = ml_get_f64(x->data, x->dtype, m * nn + i);
		double det = 1;
		for (int64_t k = 0; k < n && det != 0; k++) {
			int64_t p = k;
			for (int64_t i = k + 1; i < n; i++)
				if (fabs(a[i * n + k]) > fabs(a[p * n + k]))
					p = i;
			if (a[p * n + k] == 0) {
				det = 0;
				break;
			}
			if (p != k) {
				for (int64_t j = 0; j < n; j++) {
					double t = a[k * n + j];
					a[k * n + j] = a[p * n + j];
					a[p * n + j] = t;
				}
				det = -det;
			}
			double piv = a[k * n + k];
			det *= piv;
			for (int64_t i = k + 1; i < n; i++) {
				double f = a[i * n + k] / piv;
				if (f == 0)
					continue;
				for (int64_t j = k + 1; j < n; j++)
					a[i * n + j] -= f * a[k * n + j];
			}
		}
		ml_set_f64(y->data, y->dtype, m, det);
	}
	ml_free(a);
	return 0;
}

/*
 * The random ops: xoshiro256** seeded through splitmix64, from the seed
 * attribute when there is one (so a seeded node gives the same values on
 * every run), else from a process-wide counter and the clock.
 */
static void
rng_init(struct ml_opctx *c, struct ml_rng *r)
{
	static uint64_t counter;
	const struct ml_attr *a = ml_attr_find(c->node, "seed");
	uint64_t x;

	if (a != NULL) {
		double s = a->type == ML_ATTR_INT ? (double)a->i : a->f;
		memcpy(&x, &s, sizeof x);
	} else {
		double t = ml_now();
		memcpy(&x, &t, sizeof x);
		x ^= __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED) * 0xd1342543de82ef95ull;
	}
	ml_rng_seed(r, x);
}

static int
run_random(struct ml_opctx *c)
{
	enum ml_op op = c->node->op;
	struct ml_tval *y = c->out[0];
	int64_t n = ml_tval_numel(y);
	struct ml_rng r;

	rng_init(c, &r);
	if (op == ML_OP_BERNOULLI) {
		const struct ml_tval *p = c->in[0];
		for (int64_t i = 0; i < n; i++)
			ml_set_f64(y->data, y->dtype, i,
				   ml_rng_unit(&r) < ml_get_f64(p->data, p->dtype, i) ? 1 : 0);
		return 0;
	}
	if (op == ML_OP_RANDOM_UNIFORM || op == ML_OP_RANDOM_UNIFORM_LIKE) {
		double lo = ml_attr_float(c->node, "low", 0), hi = ml_attr_float(c->node, "high", 1);
		for (int64_t i = 0; i < n; i++)
			ml_set_f64(y->data, y->dtype, i, lo + (hi - lo) * ml_rng_unit(&r));
		return 0;
	}
	/* Box-Muller, two values per pair of uniforms */
	double mean = ml_attr_float(c->node, "mean", 0), scale = ml_attr_float(c->node, "scale", 1);
	for (int64_t i = 0; i < n; i += 2) {
		double u1 = 1.0 - ml_rng_unit(&r), u2 = ml_rng_unit(&r);
		double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
		ml_set_f64(y->data, y->dtype, i, mean + scale * rad * cos(th));
		if (i + 1 < n)
			ml_set_f64(y->data, y->dtype, i + 1, mean + scale * rad * sin(th));
	}
	return 0;
}

/*
 * TfIdfVectorizer over integer tokens. The pool's n-grams of each length
 * are sorted (as indices) so that each n-gram of a row is found by binary
 * search. As in ONNX Runtime, 1-grams are counted once (skips do not
 * apply to them) and longer n-grams once per skip distance 1 .. skip + 1.
 */
struct tfidf {
	const int64_t *pool, *cnt;
	int nc, np;
	int64_t *order;		/* per length: gram ids sorted by content */
	int64_t *first;		/* per length: first gram id, gram count in first[L + 1] - first[L] */
};

static const int64_t *
gram_at(const struct tfidf *t, int len, int64_t id)
{
	return t->pool + t->cnt[len - 1] + (id - t->first[len - 1]) * len;
}

struct gram_key {
	const struct tfidf *t;
	int len;
};

static int
gram_cmp(const void *a, const void *b, void *ctx)
{
	const struct gram_key *k = ctx;
	const int64_t *p = gram_at(k->t, k->len, *(const int64_t *)a);
	const int64_t *q = gram_at(k->t, k->len, *(const int64_t *)b);
	for (int i = 0; i < k->len; i++)
		if (p[i] != q[i])
			return p[i] < q[i] ? -1 : 1;
	return 0;
}

/* find_gram: the id of the n-gram x[s], x[s + dist], ... of length len, or -1. */
static int64_t
find_gram(const struct tfidf *t, int len, const int64_t *x, int64_t s, int64_t dist)
{
	int64_t lo = t->first[len - 1], hi = t->first[len];
	const int64_t *ord = t->order;

	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2;
		const int64_t *g = gram_at(t, len, ord[mid]);
		int cmp = 0;
		for (int i = 0; i < len && cmp == 0; i++) {
			int64_t v = x[s + i * dist];
			cmp = v < g[i] ? -1 : v > g[i];
		}
		if (cmp == 0)
			return ord[mid];
		if (cmp < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

static int
run_tfidf(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	struct ml_tval *y = c->out[0];
	const int64_t *idx;
	const double *wts;
	int ni = ml_attr_ints(c->node, "ngram_indexes", &idx);
	int nw = ml_attr_floats(c->node, "weights", &wts);
	int64_t mn = ml_attr_int(c->node, "min_gram_length", 1);
	int64_t mx = ml_attr_int(c->node, "max_gram_length", 1);
	int64_t skip = ml_attr_int(c->node, "max_skip_count", 0);
	const char *mode = ml_attr_str(c->node, "mode", "TF");
	struct tfidf t;
	int64_t width, rows = x->rank == 2 ? x->dims[0] : 1, C = x->dims[x->rank - 1];
	int rc = 0;

	ML_TRY(ml_tfidf_width(c, &width));
	t.np = ml_attr_ints(c->node, "pool_int64s", &t.pool);
	t.nc = ml_attr_ints(c->node, "ngram_counts", &t.cnt);
	t.first = ml_malloc(sizeof(int64_t) * (size_t)(t.nc + 1));
	t.order = ml_malloc(sizeof(int64_t) * (size_t)ML_MAX(ni, 1));
	int64_t *xs = ml_malloc(sizeof(int64_t) * (size_t)ML_MAX(C, 1));
	double *counts = ml_malloc(sizeof(double) * (size_t)ML_MAX(ni, 1));
	if (t.first == NULL || t.order == NULL || xs == NULL || counts == NULL) {
		rc = nomem(c);
		goto out;
	}
	t.first[0] = 0;
	for (int L = 1; L <= t.nc; L++) {
		int64_t hi = L < t.nc ? t.cnt[L] : t.np;
		t.first[L] = t.first[L - 1] + (hi - t.cnt[L - 1]) / L;
	}
	for (int64_t i = 0; i < ni; i++)
		t.order[i] = i;
	for (int L = 1; L <= t.nc; L++) {
		struct gram_key k = { &t, L };
		qsort_r(t.order + t.first[L - 1], (size_t)(t.first[L] - t.first[L - 1]),
			sizeof(int64_t), gram_cmp, &k);
	}
	float *yp = y->data;
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t i = 0; i < C; i++)
			xs[i] = ml_get_i64(x->data, x->dtype, r * C + i);
		memset(counts, 0, sizeof(double) * (size_t)ni);
		for (int64_t dist = 1; dist <= skip + 1; dist++) {
			int64_t lo = dist == 1 ? mn : ML_MAX(mn, 2);
			if (lo > mx || (lo - 1) * dist >= C)
				break;
			for (int64_t s = 0; s < C; s++)
				for (int64_t L = lo; L <= mx && s + (L - 1) * dist < C; L++) {
					int64_t id = find_gram(&t, (int)L, xs, s, dist);
					if (id >= 0)
						counts[id] += 1;
				}
		}
		float *row = yp + r * width;
		for (int64_t i = 0; i < width; i++)
			row[i] = 0;
		for (int64_t i = 0; i < ni; i++) {
			double w = nw > 0 ? wts[i] : 1, v = counts[i];
			if (strcmp(mode, "IDF") == 0)
				v = v > 0 ? w : 0;
			else if (strcmp(mode, "TFIDF") == 0)
				v *= w;
			row[idx[i]] += (float)v;
		}
	}
out:
	ml_free(t.first);
	ml_free(t.order);
	ml_free(xs);
	ml_free(counts);
	return rc;
}

#define K(id, fn) { ML_OP_##id, fn }

const struct ml_cpu_kernel ml_cpu_misc[] = {
	K(EINSUM, ml_cpu_einsum),
	K(NON_MAX_SUPPRESSION, run_nms),
	K(GRID_SAMPLE, ml_cpu_grid_sample),
	K(ROI_ALIGN, ml_cpu_roi_align),
	K(MAX_UNPOOL, run_max_unpool),
	K(DET, run_det),
	K(HANN_WINDOW, ml_cpu_window),
	K(HAMMING_WINDOW, ml_cpu_window),
	K(BLACKMAN_WINDOW, ml_cpu_window),
	K(DFT, ml_cpu_dft),
	K(STFT, ml_cpu_stft),
	K(MEL_WEIGHT_MATRIX, ml_cpu_mel),
	K(BERNOULLI, run_random),
	K(RANDOM_UNIFORM, run_random),
	K(RANDOM_NORMAL, run_random),
	K(RANDOM_UNIFORM_LIKE, run_random),
	K(RANDOM_NORMAL_LIKE, run_random),
	K(TFIDF_VECTORIZER, run_tfidf),
	{ .op = ML_OP_NONE },
};
