/*
 * misc_signal.c: the signal kernels of the misc family: the Hann, Hamming
 * and Blackman windows, DFT, STFT and MelWeightMatrix. Transforms run in
 * double: a radix-2 FFT for power-of-two lengths, a direct sum over a
 * twiddle table for short other lengths, and Bluestein's chirp-z through
 * a power-of-two FFT for long ones.
 */
#include "cpu/elem.h"
#include "cpu/misc.h"

static int
nomem(struct ml_opctx *c)
{
	return ml_opfail(c, ML_ENOMEM, "out of memory");
}

int
ml_cpu_window(struct ml_opctx *c)
{
	struct ml_tval *y = c->out[0];
	enum ml_op op = c->node->op;
	bool periodic = ml_attr_int(c->node, "periodic", 1) != 0;
	int64_t n = ml_get_i64(c->in[0]->data, c->in[0]->dtype, 0);

	if (n < 0)
		return ml_opfail(c, ML_EINVAL, "size %lld is negative", (long long)n);
	if (y->data == NULL)
		ML_TRY(ml_tval_alloc(y, y->dtype, 1, &n, c->err));
	else if (ml_tval_numel(y) != n)
		return ml_opfail(c, ML_EINVAL, "the output has the wrong size");
	/* as ONNX's reference: a symmetric window of 1 divides by zero */
	double den = (double)(periodic ? n : n - 1);
	for (int64_t i = 0; i < n; i++) {
		double t = 2 * M_PI * (double)i / den, v;
		if (op == ML_OP_HANN_WINDOW)
			v = 0.5 - 0.5 * cos(t);
		else if (op == ML_OP_HAMMING_WINDOW)
			v = 25.0 / 46.0 - 21.0 / 46.0 * cos(t);
		else
			v = 0.42 - 0.5 * cos(t) + 0.08 * cos(2 * t);
		ml_set_f64(y->data, y->dtype, i, v);
	}
	return 0;
}

/*
 * struct fft: a plan for complex transforms of length n (forward; the
 * inverse conjugates around it). For Bluestein, m is the power-of-two
 * length of the convolution, chirp the sequence w[k] = e^{-i pi k^2 / n},
 * and fchirp the FFT of its conjugate, zero-padded and wrapped.
 */
struct fft {
	int64_t n, m;
	int kind;		/* 0 radix-2, 1 direct, 2 Bluestein */
	double *tw;		/* radix-2: m/2 twiddles (re, im); direct: n */
	double *chirp, *fchirp;
};

static bool
pow2(int64_t n)
{
	return n > 0 && (n & (n - 1)) == 0;
}

/* fft2: in-place radix-2 transform of x (n complex, interleaved) with twiddles tw. */
static void
fft2(double *x, int64_t n, const double *tw, int64_t twn)
{
	for (int64_t i = 1, j = 0; i < n; i++) {
		int64_t bit = n >> 1;
		for (; j & bit; bit >>= 1)
			j ^= bit;
		j ^= bit;
		if (i < j) {
			double tr = x[2 * i], ti = x[2 * i + 1];
			x[2 * i] = x[2 * j];
			x[2 * i + 1] = x[2 * j + 1];
			x[2 * j] = tr;
			x[2 * j + 1] = ti;
		}
	}
	for (int64_t len = 2; len <= n; len <<= 1) {
		int64_t half = len / 2, step = twn / half;
		for (int64_t s = 0; s < n; s += len)
			for (int64_t k = 0; k < half; k++) {
				double wr = tw[2 * k * step], wi = tw[2 * k * step + 1];
				double *a = x + 2 * (s + k), *b = x + 2 * (s + k + half);
				double br = b[0] * wr - b[1] * wi, bi = b[0] * wi + b[1] * wr;
				b[0] = a[0] - br;
				b[1] = a[1] - bi;
				a[0] += br;
				a[1] += bi;
			}
	}
}

static double *
twiddles(int64_t n, int64_t count)
{
	double *t = ml_malloc(sizeof(double) * 2 * (size_t)ML_MAX(count, 1));
	if (t != NULL)
		for (int64_t k = 0; k < count; k++) {
			double a = -2 * M_PI * (double)k / (double)n;
			t[2 * k] = cos(a);
			t[2 * k + 1] = sin(a);
		}
	return t;
}

static void
fft_free(struct fft *p)
{
	ml_free(p->tw);
	ml_free(p->chirp);
	ml_free(p->fchirp);
}

static int
fft_plan(struct fft *p, int64_t n)
{
	memset(p, 0, sizeof *p);
	p->n = n;
	if (pow2(n)) {
		p->kind = 0;
		p->m = n;
		p->tw = twiddles(n, n / 2);
		return p->tw != NULL ? 0 : ML_ENOMEM;
	}
	if (n <= 64) {
		p->kind = 1;
		p->tw = twiddles(n, n);
		return p->tw != NULL ? 0 : ML_ENOMEM;
	}
	p->kind = 2;
	p->m = 1;
	while (p->m < 2 * n - 1)
		p->m <<= 1;
	p->tw = twiddles(p->m, p->m / 2);
	p->chirp = ml_malloc(sizeof(double) * 2 * (size_t)n);
	p->fchirp = ml_calloc(2 * (size_t)p->m, sizeof(double));
	if (p->tw == NULL || p->chirp == NULL || p->fchirp == NULL) {
		fft_free(p);
		return ML_ENOMEM;
	}
	for (int64_t k = 0; k < n; k++) {
		/* k^2 mod 2n keeps the angle small and exact */
		double a = -M_PI * (double)((k * k) % (2 * n)) / (double)n;
		p->chirp[2 * k] = cos(a);
		p->chirp[2 * k + 1] = sin(a);
	}
	for (int64_t k = 0; k < n; k++) {
		double re = p->chirp[2 * k], im = -p->chirp[2 * k + 1];
		p->fchirp[2 * k] = re;
		p->fchirp[2 * k + 1] = im;
		if (k > 0) {
			p->fchirp[2 * (p->m - k)] = re;
			p->fchirp[2 * (p->m - k) + 1] = im;
		}
	}
	fft2(p->fchirp, p->m, p->tw, p->m / 2);
	return 0;
}

/* fft_work: doubles of scratch fft_run needs. */
static int64_t
fft_work(const struct fft *p)
{
	return p->kind == 2 ? 2 * p->m : 2 * p->n;
}

/*
 * fft_run: transform x (n complex, interleaved) in place, forward or
 * inverse (the inverse scaled by 1/n), with work holding fft_work doubles.
 */
static void
fft_run(const struct fft *p, double *x, bool inverse, double *work)
{
	int64_t n = p->n;

	if (inverse)
		for (int64_t k = 0; k < n; k++)
			x[2 * k + 1] = -x[2 * k + 1];
	if (p->kind == 0) {
		fft2(x, n, p->tw, n / 2);
	} else if (p->kind == 1) {
		for (int64_t k = 0; k < n; k++) {
			double sr = 0, si = 0;
			for (int64_t t = 0; t < n; t++) {
				int64_t q = (k * t) % n;
				double wr = p->tw[2 * q], wi = p->tw[2 * q + 1];
				sr += x[2 * t] * wr - x[2 * t + 1] * wi;
				si += x[2 * t] * wi + x[2 * t + 1] * wr;
			}
			work[2 * k] = sr;
			work[2 * k + 1] = si;
		}
		memcpy(x, work, sizeof(double) * 2 * (size_t)n);
	} else {
		int64_t m = p->m;
		memset(work, 0, sizeof(double) * 2 * (size_t)m);
		for (int64_t k = 0; k < n; k++) {
			double cr = p->chirp[2 * k], ci = p->chirp[2 * k + 1];
			work[2 * k] = x[2 * k] * cr - x[2 * k + 1] * ci;
			work[2 * k + 1] = x[2 * k] * ci + x[2 * k + 1] * cr;
		}
		fft2(work, m, p->tw, m / 2);
		for (int64_t k = 0; k < m; k++) {
			double ar = work[2 * k], ai = work[2 * k + 1];
			double br = p->fchirp[2 * k], bi = p->fchirp[2 * k + 1];
			/* conjugate the product, so the forward FFT below acts as an inverse */
			work[2 * k] = ar * br - ai * bi;
			work[2 * k + 1] = -(ar * bi + ai * br);
		}
		fft2(work, m, p->tw, m / 2);
		for (int64_t k = 0; k < n; k++) {
			double ar = work[2 * k] / (double)m, ai = -work[2 * k + 1] / (double)m;
			double cr = p->chirp[2 * k], ci = p->chirp[2 * k + 1];
			x[2 * k] = ar * cr - ai * ci;
			x[2 * k + 1] = ar * ci + ai * cr;
		}
	}
	if (inverse)
		for (int64_t k = 0; k < n; k++) {
			x[2 * k] /= (double)n;
			x[2 * k + 1] = -x[2 * k + 1] / (double)n;
		}
}

/*
 * struct djob: DFT over lines: input [outer, L, inner, comp] (comp 1 real
 * or 2 complex), output [outer, nout, inner, 2]; each line's first
 * min(L, n) samples, zero-padded to n, are transformed.
 */
struct djob {
	const struct fft *p;
	const void *x;
	void *y;
	enum ml_dtype dt;
	int64_t L, inner, comp, nout;
	bool inverse;
	int bad;
};

static void
dft_lines(void *ctx, int64_t b, int64_t e)
{
	struct djob *j = ctx;
	int64_t n = j->p->n;
	double *buf = ml_malloc(sizeof(double) * (size_t)(2 * n + fft_work(j->p)));

	if (buf == NULL) {
		__atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
		return;
	}
	for (int64_t u = b; u < e; u++) {
		int64_t o = u / j->inner, i = u % j->inner;
		int64_t take = ML_MIN(j->L, n);
		memset(buf, 0, sizeof(double) * 2 * (size_t)n);
		for (int64_t t = 0; t < take; t++) {
			int64_t src = ((o * j->L + t) * j->inner + i) * j->comp;
			buf[2 * t] = ml_get_f64(j->x, j->dt, src);
			if (j->comp == 2)
				buf[2 * t + 1] = ml_get_f64(j->x, j->dt, src + 1);
		}
		fft_run(j->p, buf, j->inverse, buf + 2 * n);
		for (int64_t k = 0; k < j->nout; k++) {
			int64_t dst = ((o * j->nout + k) * j->inner + i) * 2;
			ml_set_f64(j->y, j->dt, dst, buf[2 * k]);
			ml_set_f64(j->y, j->dt, dst + 1, buf[2 * k + 1]);
		}
	}
	ml_free(buf);
}

int
ml_cpu_dft(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0];
	struct ml_tval *y = c->out[0];
	bool onesided = ml_attr_int(c->node, "onesided", 0) != 0;
	struct djob j;
	struct fft p;
	int axis, rc;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_dft);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(x->dtype));
	ML_TRY(ml_dft_axis(c, x->rank, &axis));
	memset(&j, 0, sizeof j);
	j.x = x->data;
	j.y = y->data;
	j.dt = x->dtype;
	j.L = x->dims[axis];
	j.comp = x->dims[x->rank - 1];
	j.inner = 1;
	for (int d = axis + 1; d < x->rank - 1; d++)
		j.inner *= x->dims[d];
	int64_t outer = 1;
	for (int d = 0; d < axis; d++)
		outer *= x->dims[d];
	int64_t n = j.L;
	if (ML_IN(c, 1) != NULL)
		n = ml_get_i64(c->in[1]->data, c->in[1]->dtype, 0);
	if (n < 1)
		return ml_opfail(c, ML_EINVAL, "the transform length must be positive");
	j.nout = onesided ? n / 2 + 1 : n;
	j.inverse = ml_attr_int(c->node, "inverse", 0) != 0;
	if (y->dims[axis] != j.nout)
		return ml_opfail(c, ML_EINVAL, "the output has the wrong shape");
	if ((rc = fft_plan(&p, n)) < 0)
		return ml_opfail(c, rc, "out of memory");
	j.p = &p;
	ml_parallel_for(outer * j.inner, ML_MAX(1, 4096 / ML_MAX(n, 1)), dft_lines, &j);
	fft_free(&p);
	if (j.bad)
		return nomem(c);
	return 0;
}

/* STFT: per batch and frame, the windowed frame's DFT of length frame_length. */
struct sjob {
	const struct fft *p;
	const void *x, *w;
	void *y;
	enum ml_dtype dt;
	int64_t len, comp, frames, step, bins;
	int bad;
};

static void
stft_frames(void *ctx, int64_t b, int64_t e)
{
	struct sjob *j = ctx;
	int64_t n = j->p->n;
	double *buf = ml_malloc(sizeof(double) * (size_t)(2 * n + fft_work(j->p)));

	if (buf == NULL) {
		__atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
		return;
	}
	for (int64_t u = b; u < e; u++) {
		int64_t bt = u / j->frames, f = u % j->frames;
		for (int64_t t = 0; t < n; t++) {
			int64_t src = (bt * j->len + f * j->step + t) * j->comp;
			double w = j->w != NULL ? ml_get_f64(j->w, j->dt, t) : 1.0;
			buf[2 * t] = w * ml_get_f64(j->x, j->dt, src);
			buf[2 * t + 1] = j->comp == 2 ? w * ml_get_f64(j->x, j->dt, src + 1) : 0;
		}
		fft_run(j->p, buf, false, buf + 2 * n);
		for (int64_t k = 0; k < j->bins; k++) {
			ml_set_f64(j->y, j->dt, (u * j->bins + k) * 2, buf[2 * k]);
			ml_set_f64(j->y, j->dt, (u * j->bins + k) * 2 + 1, buf[2 * k + 1]);
		}
	}
	ml_free(buf);
}

int
ml_cpu_stft(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *w = ML_IN(c, 2);
	struct ml_tval *y = c->out[0];
	int64_t flen, step, frames;
	bool onesided;
	struct sjob j;
	struct fft p;
	int rc;

	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, ml_cpu_stft);
	if (x->dtype != ML_F32 && x->dtype != ML_F64)
		return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(x->dtype));
	ML_TRY(ml_stft_geom(c, &flen, &step, &frames, &onesided));
	if (flen < 1 || step < 1 || frames < 0)
		return ml_opfail(c, ML_EINVAL, "bad frame_length or frame_step");
	if (w != NULL && ml_tval_numel(w) != flen)
		return ml_opfail(c, ML_EINVAL, "the window has the wrong length");
	memset(&j, 0, sizeof j);
	j.x = x->data;
	j.w = w != NULL ? w->data : NULL;
	j.y = y->data;
	j.dt = x->dtype;
	j.len = x->dims[1];
	j.comp = x->dims[2];
	j.frames = frames;
	j.step = step;
	j.bins = onesided ? flen / 2 + 1 : flen;
	if (y->dims[1] != frames || y->dims[2] != j.bins)
		return ml_opfail(c, ML_EINVAL, "the output has the wrong shape");
	if ((rc = fft_plan(&p, flen)) < 0)
		return ml_opfail(c, rc, "out of memory");
	j.p = &p;
	ml_parallel_for(x->dims[0] * frames, ML_MAX(1, 4096 / flen), stft_frames, &j);
	fft_free(&p);
	if (j.bad)
		return nomem(c);
	return 0;
}

/*
 * MelWeightMatrix exactly as ONNX's reference computes it: num_mel_bins + 2
 * points evenly spaced on the mel scale (the step divides by their count),
 * mapped to spectrogram bins by floor((dft_length + 1) * f / sample_rate),
 * each band a triangle rising from its left point to its center and
 * falling to its right.
 */
int
ml_cpu_mel(struct ml_opctx *c)
{
	struct ml_tval *y = c->out[0];
	int64_t bins = ml_get_i64(c->in[0]->data, c->in[0]->dtype, 0);
	int64_t dftl = ml_get_i64(c->in[1]->data, c->in[1]->dtype, 0);
	int64_t rate = ml_get_i64(c->in[2]->data, c->in[2]->dtype, 0);
	float lo = (float)ml_get_f64(c->in[3]->data, c->in[3]->dtype, 0);
	float hi = (float)ml_get_f64(c->in[4]->data, c->in[4]->dtype, 0);
	int64_t nspec = dftl / 2 + 1, np = bins + 2;

	if (bins < 1 || dftl < 1 || rate < 1)
		return ml_opfail(c, ML_EINVAL, "bad num_mel_bins, dft_length or sample_rate");
	if (y->dims[0] != nspec || y->dims[1] != bins)
		return ml_opfail(c, ML_EINVAL, "the output has the wrong shape");
	int64_t *fb = ml_malloc(sizeof(int64_t) * (size_t)np);
	double *out = ml_calloc((size_t)(nspec * bins), sizeof(double));
	if (fb == NULL || out == NULL) {
		ml_free(fb);
		ml_free(out);
		return nomem(c);
	}
	/* the edges' mels in f32, as the reference's float32 scalars are */
	float lmel = 2595.0f * log10f(1.0f + lo / 700.0f);
	float hmel = 2595.0f * log10f(1.0f + hi / 700.0f);
	double step = ((double)hmel - (double)lmel) / (double)np;
	for (int64_t i = 0; i < np; i++) {
		double f = (double)i * step + (double)lmel;
		f = 700.0 * (pow(10.0, f / 2595.0) - 1.0);
		f = floor((double)(dftl + 1) * f / (double)rate);
		/* out of range (or NaN) edges are refused below, never cast */
		fb[i] = f >= -1 && f <= (double)nspec + 1 ? (int64_t)f : -1;
	}
	int rc = 0;
	for (int64_t i = 0; i < bins && rc == 0; i++) {
		int64_t l = fb[i], m = fb[i + 1], r = fb[i + 2];
		if (l < 0 || r >= nspec + 1 || m >= nspec || l > m || m > r) {
			rc = ml_opfail(c, ML_EINVAL, "the mel bands fall outside the spectrogram");
			break;
		}
		if (m == l)
			out[m * bins + i] = 1;
		else
			for (int64_t k = l; k <= m; k++)
				out[k * bins + i] = (double)(k - l) / (double)(m - l);
		for (int64_t k = m; k < r && r > m; k++)
			out[k * bins + i] = (double)(r - k) / (double)(r - m);
	}
	for (int64_t i = 0; rc == 0 && i < nspec * bins; i++)
		ml_set_f64(y->data, y->dtype, i, out[i]);
	ml_free(fb);
	ml_free(out);
	return rc;
}
