/*
 * calib.c: calibration for the quantiser: loading the data (.npy, .npz, or
 * a dataset through lib/data), running the float graph over it with every
 * float activation as an extra output, and turning each tensor's statistics
 * into a range by min-max, a percentile of |x|, or entropy (the KL
 * divergence search of TensorRT's calibrator over a 2048-bin histogram).
 */
#include "quant/quant.h"

void
ml_calib_free(struct ml_calib *c)
{
	if (c == NULL)
		return;
	for (int i = 0; i < c->n_batches * c->n_in; i++)
		ml_tval_clear(&c->b[i]);
	ml_free(c->b);
	ml_free(c);
}

struct npzctx {
	const struct ml_graph *g;
	struct ml_tval *arr;	/* one per input */
	struct ml_tval single;
	int n_found, n_arrays;
};

static int
npz_take(void *ctx, const char *name, struct ml_tval *arr, struct ml_err *e)
{
	struct npzctx *z = ctx;
	(void)e;
	z->n_arrays++;
	for (int i = 0; i < z->g->n_inputs; i++) {
		if (strcmp(ml_graph_t(z->g, z->g->inputs[i])->name, name) == 0 &&
		    z->arr[i].data == NULL) {
			z->arr[i] = *arr;
			memset(arr, 0, sizeof *arr);
			z->n_found++;
			return 0;
		}
	}
	if (z->single.data == NULL) {
		z->single = *arr;
		memset(arr, 0, sizeof *arr);
	}
	return 0;
}

/*
 * dims_str: dims[from..rank) as "[a,b,c]" in buf, a symbolic dim by its
 * name (sym may be NULL) or "?".
 */
static const char *
dims_str(char *buf, size_t n, const int64_t *dims, const char *const *sym, int from, int rank)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int d = from; d < rank && k < n; d++) {
		const char *sep = d > from ? "," : "";
		if (dims[d] >= 0)
			k += (size_t)snprintf(buf + k, n - k, "%s%lld", sep, (long long)dims[d]);
		else
			k += (size_t)snprintf(buf + k, n - k, "%s%s", sep,
					      sym != NULL && sym[d] != NULL ? sym[d] : "?");
	}
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

/*
 * misfit: the data a do not fit input in: name the samples' shape (the
 * dims after the first, which counts them) and the one the input takes.
 */
static int
misfit(const char *path, const struct ml_tensor *in, const struct ml_tval *a, struct ml_err *e)
{
	char want[256], got[256];
	dims_str(want, sizeof want, in->dims, (const char *const *)in->sym, 1, in->rank);
	if (a->rank < 1)
		return ml_fail(e, ML_EINVAL, "%s: the data are a scalar; input '%s' takes samples "
			       "of shape %s", path, in->name, want);
	return ml_fail(e, ML_EINVAL, "%s: the data are %lld samples of shape %s; input '%s' "
		       "takes samples of shape %s", path, (long long)a->dims[0],
		       dims_str(got, sizeof got, a->dims, NULL, 1, a->rank), in->name, want);
}

/*
 * cut: the batches of one input's array a (samples along dim 0, or one
 * sample of the input's rank less one) into c->b[k * n_in + ii].
 */
static int
cut(struct ml_calib *c, int ii, const struct ml_tensor *in, const struct ml_tval *a,
    int64_t samples, const char *path, struct ml_err *e)
{
	struct ml_tval v = *a;
	enum ml_dtype dt = in->dtype == ML_UNDEF ? ML_F32 : in->dtype;

	if (in->rank < 1)
		return ml_fail(e, ML_EINVAL, "%s: input '%s' has no batch dim", path, in->name);
	if (v.rank == in->rank - 1) {
		memmove(v.dims + 1, v.dims, sizeof(int64_t) * (size_t)v.rank);
		v.dims[0] = 1;
		v.rank++;
	}
	if (v.rank != in->rank)
		return misfit(path, in, a, e);
	for (int d = 1; d < v.rank; d++)
		if (in->dims[d] >= 0 && in->dims[d] != v.dims[d])
			return misfit(path, in, a, e);
	if (!ml_dtype_is_float(v.dtype) && !ml_dtype_is_int(v.dtype))
		return ml_fail(e, ML_EINVAL, "%s: %s data is not numeric", path,
			       ml_dtype_name(v.dtype));
	int64_t n = v.dims[0];
	if (samples > 0 && n > samples)
		n = samples;
	if (n <= 0)
		return ml_fail(e, ML_EINVAL, "%s: no samples", path);
	int64_t bs = in->dims[0] > 0 ? in->dims[0] : 32;
	if (in->dims[0] > 0 && n % bs != 0 && n < bs)
		return ml_fail(e, ML_EINVAL, "%s: %lld samples, input '%s' takes batches of %lld",
			       path, (long long)n, in->name, (long long)bs);
	int nb = (int)(in->dims[0] > 0 ? n / bs : (n + bs - 1) / bs);
	if (c->b == NULL) {
		c->n_batches = nb;
		c->samples = in->dims[0] > 0 ? nb * bs : n;
		c->b = ml_calloc((size_t)nb * (size_t)c->n_in, sizeof *c->b);
		if (c->b == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
	} else if (nb != c->n_batches) {
		return ml_fail(e, ML_EINVAL, "%s: inputs have different sample counts", path);
	}
	int64_t per = 1;
	for (int d = 1; d < v.rank; d++)
		per *= v.dims[d];
	size_t es = ml_dtype_size(v.dtype);
	for (int k = 0; k < nb; k++) {
		struct ml_tval *o = &c->b[k * c->n_in + ii];
		int64_t m = ML_MIN(bs, n - k * bs);
		int64_t dims[ML_MAX_RANK];
		memcpy(dims, v.dims, sizeof dims);
		dims[0] = m;
		ML_TRY(ml_tval_alloc(o, dt, v.rank, dims, e));
		const char *src = (const char *)v.data + (size_t)(k * bs * per) * es;
		if (ml_convert(o->data, dt, src, v.dtype, m * per) < 0)
			return ml_fail(e, ML_EINVAL, "%s: cannot convert %s data", path,
				       ml_dtype_name(v.dtype));
	}
	return 0;
}

static bool
is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool
ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n >= m && strcmp(s + n - m, suf) == 0;
}

int
ml_calib_load(struct ml_calib **out, const struct ml_graph *g, const char *path, int64_t samples,
	      struct ml_err *e)
{
	struct ml_calib *c = ml_calloc(1, sizeof *c);
	struct npzctx z = { .g = g };
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc = 0;

	*out = NULL;
	if (c == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	c->n_in = g->n_inputs;
	if (g->n_inputs < 1) {
		rc = ml_fail(e, ML_EINVAL, "%s: the model has no inputs", path);
		goto out;
	}
	z.arr = ml_calloc((size_t)g->n_inputs, sizeof *z.arr);
	if (z.arr == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	if (is_dir(path) || (!ends_with(path, ".npy") && !ends_with(path, ".npz"))) {
		struct ml_dataset *ds = NULL;
		if ((rc = ml_data_load(&ds, NULL, path, e)) < 0)
			goto out;
		struct ml_tval x = { .dtype = ds->xtype, .rank = ds->rank + 1, .data = ds->x };
		x.dims[0] = ds->n;
		memcpy(x.dims + 1, ds->dims, sizeof(int64_t) * (size_t)ds->rank);
		/* reshape a sample to the input's own dims where the counts agree */
		const struct ml_tensor *in0 = ml_graph_t(g, g->inputs[0]);
		int64_t per = 1;
		bool known = in0->rank >= 1;
		for (int d = 1; d < in0->rank; d++) {
			known = known && in0->dims[d] > 0;
			per *= in0->dims[d] > 0 ? in0->dims[d] : 1;
		}
		if (known && per == ds->feat) {
			x.rank = in0->rank;
			memcpy(x.dims + 1, in0->dims + 1, sizeof(int64_t) * (size_t)(in0->rank - 1));
		}
		struct ml_tval xf = { 0 };
		if ((rc = ml_tval_alloc(&xf, ML_F32, x.rank, x.dims, e)) == 0) {
			ml_convert(xf.data, ML_F32, x.data, x.dtype, ml_tval_numel(&x));
			if (x.dtype == ML_U8) {
				float *f = xf.data;
				for (int64_t i = 0; i < ml_tval_numel(&xf); i++)
					f[i] /= 255.0f;
			}
			rc = cut(c, 0, in0, &xf, samples, path, e);
		}
		ml_tval_clear(&xf);
		ml_dataset_free(ds);
		if (rc == 0 && g->n_inputs > 1)
			rc = ml_fail(e, ML_EINVAL, "%s: a dataset feeds one input, the model has %d",
				     path, g->n_inputs);
		goto out;
	}
	if ((rc = ml_read_file(path, &buf, &len, e)) < 0)
		goto out;
	if (ends_with(path, ".npy")) {
		if ((rc = ml_npy_decode(&z.single, buf, len, e)) < 0) {
			ml_err_prefix(e, path);
			rc = ML_EINVAL;
			goto out;
		}
	} else if ((rc = ml_npz_decode(buf, len, npz_take, &z, e)) < 0) {
		ml_err_prefix(e, path);
		rc = ML_EINVAL;
		goto out;
	}
	for (int i = 0; i < g->n_inputs; i++) {
		const struct ml_tval *a = z.arr[i].data != NULL ? &z.arr[i] :
					  (g->n_inputs == 1 ? &z.single : NULL);
		if (a == NULL || a->data == NULL) {
			rc = ml_fail(e, ML_EINVAL, "%s: no array for input '%s'", path,
				     ml_graph_t(g, g->inputs[i])->name);
			goto out;
		}
		if ((rc = cut(c, i, ml_graph_t(g, g->inputs[i]), a, samples, path, e)) < 0)
			goto out;
	}
out:
	if (rc < 0 && e != NULL && e->code == ML_EFORMAT)
		e->code = rc = ML_EINVAL;
	ml_free(buf);
	if (z.arr != NULL)
		for (int i = 0; i < g->n_inputs; i++)
			ml_tval_clear(&z.arr[i]);
	ml_free(z.arr);
	ml_tval_clear(&z.single);
	if (rc < 0) {
		ml_calib_free(c);
		return rc < 0 ? rc : ML_EINVAL;
	}
	*out = c;
	return 0;
}

/* ---- statistics ---- */

int
mlq_copy_graph(struct ml_graph **out, const struct ml_graph *g, struct ml_err *e)
{
	int rc = ml_graph_clone(out, g, e);
	if (rc == 0 && (rc = ml_graph_toposort(*out, e)) == 0)
		rc = ml_graph_infer(*out, e);
	if (rc < 0) {
		ml_graph_free(*out);
		*out = NULL;
	}
	return rc;
}

int
mlq_run_all(const struct ml_graph *g, const struct ml_calib *cal, int extra_f32,
	   int (*fn)(void *ctx, struct ml_graph *gx, struct ml_session *s, int batch,
		     struct ml_err *e),
	   void *ctx, struct ml_err *e)
{
	struct ml_graph *gx = NULL;
	struct ml_session *s = NULL;
	int rc;

	if ((rc = mlq_copy_graph(&gx, g, e)) < 0)
		return rc;
	if (extra_f32) {
		int n0 = gx->n_tensors;
		for (int t = 0; t < n0; t++) {
			struct ml_tensor *tt = ml_graph_t(gx, t);
			bool isout = false;
			if (tt->producer < 0 || tt->dtype != ML_F32 || tt->kind != ML_TK_ACT)
				continue;
			for (int o = 0; o < gx->n_outputs; o++)
				isout = isout || gx->outputs[o] == t;
			if (!isout && (rc = ml_graph_add_output(gx, t, e)) < 0)
				goto out;
		}
	}
	if ((rc = ml_session_new(&s, gx, NULL, e)) < 0)
		goto out;
	for (int b = 0; b < cal->n_batches; b++) {
		for (int i = 0; i < gx->n_inputs; i++)
			if ((rc = ml_session_set_input(s, ml_graph_t(gx, gx->inputs[i])->name,
						       &cal->b[b * cal->n_in + i], e)) < 0)
				goto out;
		if ((rc = ml_session_run(s, e)) < 0 || (rc = fn(ctx, gx, s, b, e)) < 0)
			goto out;
	}
out:
	ml_session_free(s);
	ml_graph_free(gx);
	return rc;
}

struct statctx {
	const struct ml_graph *g;
	struct mq_stat *st;	/* one per tensor of g */
	int pass;
	const struct ml_progress *prog;	/* one unit a batch and pass */
	int64_t nb, total;		/* batches a pass; batches of all passes */
};

static int
stat_batch(void *ctx, struct ml_graph *gx, struct ml_session *s, int batch, struct ml_err *e)
{
	struct statctx *sc = ctx;
	(void)e;
	ml_progress_report(sc->prog, "calibrating", sc->pass * sc->nb + batch + 1, sc->total);
	for (int o = 0; o < gx->n_outputs; o++) {
		const struct ml_tval *v = ml_session_output(s, o);
		int t = ml_graph_find(sc->g, ml_graph_t(gx, gx->outputs[o])->name);
		if (t < 0 || v == NULL || v->dtype != ML_F32 || v->data == NULL)
			continue;
		struct mq_stat *st = &sc->st[t];
		const float *f = v->data;
		int64_t n = ml_tval_numel(v);
		if (sc->pass == 0) {
			for (int64_t i = 0; i < n; i++) {
				if (!(f[i] == f[i]) || isinf(f[i]))
					continue;
				if (!st->seen || f[i] < st->min)
					st->min = f[i];
				if (!st->seen || f[i] > st->max)
					st->max = f[i];
				st->seen = true;
			}
			continue;
		}
		double am = fmax(fabs(st->min), fabs(st->max));
		if (!st->seen || am <= 0)
			continue;
		for (int64_t i = 0; i < n; i++) {
			if (!(f[i] == f[i]) || isinf(f[i]))
				continue;
			int bin = (int)(fabs(f[i]) / am * MQ_BINS);
			st->hist[bin >= MQ_BINS ? MQ_BINS - 1 : bin] += 1;
		}
	}
	return 0;
}

int
mlq_collect(const struct ml_graph *g, const struct ml_calib *cal, bool hist,
	    const struct ml_progress *prog, struct mq_stat **out, struct ml_err *e)
{
	struct statctx sc = { .g = g, .prog = prog, .nb = cal->n_batches,
			      .total = (int64_t)cal->n_batches * (hist ? 2 : 1) };
	int rc;

	sc.st = ml_calloc((size_t)g->n_tensors + 1, sizeof *sc.st);
	if (sc.st == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	/* graph inputs are not node outputs: take their ranges from the data itself */
	for (int b = 0; b < cal->n_batches; b++)
		for (int i = 0; i < g->n_inputs; i++) {
			const struct ml_tval *v = &cal->b[b * cal->n_in + i];
			struct mq_stat *st = &sc.st[g->inputs[i]];
			if (v->dtype != ML_F32)
				continue;
			for (int64_t k = 0; k < ml_tval_numel(v); k++) {
				float f = ((const float *)v->data)[k];
				if (!st->seen || f < st->min)
					st->min = f;
				if (!st->seen || f > st->max)
					st->max = f;
				st->seen = true;
			}
		}
	ml_progress_report(prog, "calibrating", 0, sc.total);
	if ((rc = mlq_run_all(g, cal, 1, stat_batch, &sc, e)) < 0)
		goto fail;
	if (hist) {
		sc.pass = 1;
		for (int b = 0; b < cal->n_batches; b++)
			for (int i = 0; i < g->n_inputs; i++) {
				const struct ml_tval *v = &cal->b[b * cal->n_in + i];
				struct mq_stat *st = &sc.st[g->inputs[i]];
				double am = fmax(fabs(st->min), fabs(st->max));
				if (v->dtype != ML_F32 || am <= 0)
					continue;
				for (int64_t k = 0; k < ml_tval_numel(v); k++) {
					int bin = (int)(fabs(((const float *)v->data)[k]) / am * MQ_BINS);
					st->hist[bin >= MQ_BINS ? MQ_BINS - 1 : bin] += 1;
				}
			}
		if ((rc = mlq_run_all(g, cal, 1, stat_batch, &sc, e)) < 0)
			goto fail;
	}
	*out = sc.st;
	return 0;
fail:
	ml_free(sc.st);
	return rc;
}

/* kl: the KL divergence of p (n bins) from its quantisation to levels bins. */
static double
kl_of(const double *hist, int n, int levels)
{
	double p[MQ_BINS], q[MQ_BINS], sp = 0, sq = 0, d = 0;

	for (int i = 0; i < n; i++)
		p[i] = hist[i];
	for (int i = n; i < MQ_BINS; i++)
		p[n - 1] += hist[i];	/* clipped outliers land in the last bin */
	for (int l = 0; l < levels; l++) {
		int b0 = l * n / levels, b1 = (l + 1) * n / levels;
		double s = 0;
		int nz = 0;
		/* Q comes from the bins without the clipped mass, so clipping costs */
		for (int i = b0; i < b1; i++) {
			s += hist[i];
			nz += hist[i] > 0;
		}
		for (int i = b0; i < b1; i++)
			q[i] = hist[i] > 0 && nz > 0 ? s / nz : 0;
	}
	for (int i = 0; i < n; i++) {
		sp += p[i];
		sq += q[i];
	}
	if (sp <= 0 || sq <= 0)
		return 0;
	for (int i = 0; i < n; i++)
		if (p[i] > 0)
			d += p[i] / sp * log((p[i] / sp) / (q[i] > 0 ? q[i] / sq : 1e-4 / sq));
	return d;
}

void
mlq_range(const struct mq_stat *st, int method, double pct, double *lo, double *hi)
{
	double am = fmax(fabs(st->min), fabs(st->max)), t = am, tot = 0;

	*lo = fmin(st->min, 0);
	*hi = fmax(st->max, 0);
	if (!st->seen || method == ML_CALIB_MINMAX || am <= 0)
		return;
	for (int i = 0; i < MQ_BINS; i++)
		tot += st->hist[i];
	if (tot <= 0)
		return;
	if (method == ML_CALIB_PERCENTILE) {
		double want = tot * (pct > 0 ? pct : 99.99) / 100, acc = 0;
		for (int i = 0; i < MQ_BINS; i++) {
			acc += st->hist[i];
			if (acc >= want) {
				t = (i + 1) * am / MQ_BINS;
				break;
			}
		}
	} else {
		/* unsigned data uses all 256 levels on [0, t], signed 128 per side */
		int levels = st->min >= 0 ? 256 : 128;
		double best = INFINITY;
		for (int n = levels; n <= MQ_BINS; n += 16) {
			double d = kl_of(st->hist, n, levels);
			if (d < best) {
				best = d;
				t = n * am / MQ_BINS;
			}
		}
	}
	*hi = fmin(*hi, t);
	*lo = fmax(*lo, -t);
}
