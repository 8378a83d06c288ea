/*
 * image.c: image data for training. Decoding PNG and JPEG files with
 * Debian's libpng (its simplified png_image API) and libjpeg-turbo, both
 * loaded with dlopen at first use (as OpenBLAS is), so the tools start on
 * machines without them and only image folders need them; a folder of
 * class folders of such files (torchvision's ImageFolder layout), decoded
 * by worker threads; CIFAR-10's binary batches; and the augmentation of
 * image batches (random crop with zero padding, horizontal flip, per-channel
 * normalisation), seeded per sample so a run is the same whatever the
 * number of workers.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <png.h>

#include "ml_impl.h"

/* ---- the decoders, through dlopen ---- */

static struct {
	bool png_ok, jpeg_ok;
	char png_why[200], jpeg_why[200];
	int (*png_begin)(png_imagep, png_const_voidp, size_t);
	int (*png_finish)(png_imagep, png_const_colorp, void *, png_int_32, void *);
	void (*png_free)(png_imagep);
	struct jpeg_error_mgr *(*jpeg_std_error)(struct jpeg_error_mgr *);
	void (*jpeg_create)(j_decompress_ptr, int, size_t);
	void (*jpeg_mem_src)(j_decompress_ptr, const unsigned char *, unsigned long);
	int (*jpeg_read_header)(j_decompress_ptr, boolean);
	boolean (*jpeg_start)(j_decompress_ptr);
	JDIMENSION (*jpeg_read_scanlines)(j_decompress_ptr, JSAMPARRAY, JDIMENSION);
	boolean (*jpeg_finish)(j_decompress_ptr);
	void (*jpeg_destroy)(j_decompress_ptr);
} lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

/* sym: dlsym into *fp; false (and why) when missing */
static bool
sym(void *h, const char *name, void *fp, char *why, size_t n)
{
	void *p = dlsym(h, name);
	if (p == NULL) {
		snprintf(why, n, "has no %s", name);
		return false;
	}
	memcpy(fp, &p, sizeof p);
	return true;
}

static void
lib_init(void)
{
	void *h = dlopen("libpng16.so.16", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(lib.png_why, sizeof lib.png_why,
			 "libpng16.so.16 is not installed (Debian: libpng16-16)");
	} else {
		lib.png_ok = sym(h, "png_image_begin_read_from_memory", &lib.png_begin, lib.png_why,
				 sizeof lib.png_why) &&
			     sym(h, "png_image_finish_read", &lib.png_finish, lib.png_why,
				 sizeof lib.png_why) &&
			     sym(h, "png_image_free", &lib.png_free, lib.png_why, sizeof lib.png_why);
	}
	h = dlopen("libjpeg.so.62", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(lib.jpeg_why, sizeof lib.jpeg_why,
			 "libjpeg.so.62 is not installed (Debian: libjpeg62-turbo)");
		return;
	}
	char *w = lib.jpeg_why;
	size_t n = sizeof lib.jpeg_why;
	lib.jpeg_ok = sym(h, "jpeg_std_error", &lib.jpeg_std_error, w, n) &&
		      sym(h, "jpeg_CreateDecompress", &lib.jpeg_create, w, n) &&
		      sym(h, "jpeg_mem_src", &lib.jpeg_mem_src, w, n) &&
		      sym(h, "jpeg_read_header", &lib.jpeg_read_header, w, n) &&
		      sym(h, "jpeg_start_decompress", &lib.jpeg_start, w, n) &&
		      sym(h, "jpeg_read_scanlines", &lib.jpeg_read_scanlines, w, n) &&
		      sym(h, "jpeg_finish_decompress", &lib.jpeg_finish, w, n) &&
		      sym(h, "jpeg_destroy_decompress", &lib.jpeg_destroy, w, n);
}

/* pixels of an image, and the bytes they take, with overflow checks */
static int
alloc_image(struct ml_tval *out, int64_t c, int64_t h, int64_t w, const char *name,
	    struct ml_err *e)
{
	if (h <= 0 || w <= 0 || h > (1 << 16) || w > (1 << 16))
		return ml_fail(e, ML_EFORMAT, "%s: an image of %lldx%lld pixels", name,
			       (long long)w, (long long)h);
	int64_t dims[3] = { c, h, w };
	return ml_tval_alloc(out, ML_U8, 3, dims, e);
}

/* hwc_to_chw: interleaved rows (the decoders') to planes (the models') */
static void
hwc_to_chw(uint8_t *dst, const uint8_t *src, int64_t c, int64_t h, int64_t w)
{
	for (int64_t y = 0; y < h; y++)
		for (int64_t x = 0; x < w; x++)
			for (int64_t k = 0; k < c; k++)
				dst[(k * h + y) * w + x] = src[(y * w + x) * c + k];
}

static int
decode_png(struct ml_tval *out, const uint8_t *buf, size_t len, int channels, const char *name,
	   struct ml_err *e)
{
	if (!lib.png_ok)
		return ml_fail(e, ML_ENOTSUP, "%s: cannot decode PNG: %s", name, lib.png_why);
	png_image im;
	memset(&im, 0, sizeof im);
	im.version = PNG_IMAGE_VERSION;
	if (!lib.png_begin(&im, buf, len))
		return ml_fail(e, ML_EFORMAT, "%s: not a valid PNG image (%s)", name, im.message);
	if (channels == 0)
		channels = (im.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
	im.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
	int rc = alloc_image(out, channels, im.height, im.width, name, e);
	uint8_t *rows = rc < 0 ? NULL : ml_malloc(PNG_IMAGE_SIZE(im));
	if (rc < 0 || rows == NULL) {
		lib.png_free(&im);
		ml_tval_clear(out);
		return rc < 0 ? rc : ml_fail(e, ML_ENOMEM, "out of memory");
	}
	if (!lib.png_finish(&im, NULL, rows, 0, NULL)) {
		ml_free(rows);
		ml_tval_clear(out);
		return ml_fail(e, ML_EFORMAT, "%s: damaged PNG image (%s)", name, im.message);
	}
	hwc_to_chw(out->data, rows, channels, im.height, im.width);
	ml_free(rows);
	return 0;
}

/* libjpeg reports errors through error_exit, which must not return */
struct jerr {
	struct jpeg_error_mgr mgr;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
};

static void
jpeg_fail(j_common_ptr c)
{
	struct jerr *j = (struct jerr *)c->err;
	c->err->format_message(c, j->msg);
	longjmp(j->jb, 1);
}

static void
jpeg_quiet(j_common_ptr c, int level)
{
	(void)c, (void)level;	/* warnings (corrupt data it can recover from) are not printed */
}

static int
decode_jpeg(struct ml_tval *out, const uint8_t *buf, size_t len, int want, const char *name,
	    struct ml_err *e)
{
	volatile int channels = want;	/* set after setjmp */
	if (!lib.jpeg_ok)
		return ml_fail(e, ML_ENOTSUP, "%s: cannot decode JPEG: %s", name, lib.jpeg_why);
	struct jpeg_decompress_struct c;
	struct jerr je;
	uint8_t *volatile rows = NULL;
	memset(&c, 0, sizeof c);
	c.err = lib.jpeg_std_error(&je.mgr);
	je.mgr.error_exit = jpeg_fail;
	je.mgr.emit_message = jpeg_quiet;
	if (setjmp(je.jb)) {
		lib.jpeg_destroy(&c);
		ml_free(rows);
		ml_tval_clear(out);
		return ml_fail(e, ML_EFORMAT, "%s: damaged JPEG image (%s)", name, je.msg);
	}
	lib.jpeg_create(&c, JPEG_LIB_VERSION, sizeof c);
	lib.jpeg_mem_src(&c, buf, (unsigned long)len);
	lib.jpeg_read_header(&c, TRUE);
	if (channels == 0)
		channels = c.num_components == 1 ? 1 : 3;
	c.out_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
	lib.jpeg_start(&c);
	int rc = alloc_image(out, channels, c.output_height, c.output_width, name, e);
	if (rc == 0 && (rows = ml_malloc((size_t)c.output_height * c.output_width *
					 (size_t)channels)) == NULL)
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
	if (rc < 0) {
		lib.jpeg_destroy(&c);
		ml_tval_clear(out);
		return rc;
	}
	while (c.output_scanline < c.output_height) {
		JSAMPROW row = rows + (size_t)c.output_scanline * c.output_width * (size_t)channels;
		lib.jpeg_read_scanlines(&c, &row, 1);
	}
	lib.jpeg_finish(&c);
	lib.jpeg_destroy(&c);
	hwc_to_chw(out->data, rows, channels, c.output_height, c.output_width);
	ml_free(rows);
	return 0;
}

int
ml_image_decode(struct ml_tval *out, const uint8_t *buf, size_t len, int channels,
		const char *name, struct ml_err *e)
{
	memset(out, 0, sizeof *out);
	if (channels != 0 && channels != 1 && channels != 3)
		return ml_fail(e, ML_EINVAL, "%s: images have 1 or 3 channels, not %d", name,
			       channels);
	pthread_once(&lib_once, lib_init);
	static const uint8_t png_sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	if (len >= 8 && memcmp(buf, png_sig, 8) == 0)
		return decode_png(out, buf, len, channels, name, e);
	if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff)
		return decode_jpeg(out, buf, len, channels, name, e);
	return ml_fail(e, ML_EFORMAT, "%s: not a PNG or JPEG image", name);
}

/* ---- a folder of class folders ---- */

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool
is_image_name(const char *s)
{
	static const char *const ext[] = { ".png", ".jpg", ".jpeg", ".PNG", ".JPG", ".JPEG" };
	size_t n = strlen(s);
	for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
		size_t k = strlen(ext[i]);
		if (n > k && strcmp(s + n - k, ext[i]) == 0)
			return true;
	}
	return false;
}

struct names {
	char **v;
	int64_t n, cap;
};

static void
names_free(struct names *s)
{
	for (int64_t i = 0; i < s->n; i++)
		ml_free(s->v[i]);
	ml_free(s->v);
	memset(s, 0, sizeof *s);
}

static int
names_add(struct names *s, const char *a, const char *b, struct ml_err *e)
{
	if (s->n == s->cap) {
		int64_t cap = s->cap ? s->cap * 2 : 64;
		char **v = ml_realloc(s->v, (size_t)cap * sizeof *v);
		if (v == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		s->v = v;
		s->cap = cap;
	}
	size_t n = strlen(a) + strlen(b) + 2;
	if ((s->v[s->n] = ml_malloc(n)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	snprintf(s->v[s->n++], n, b[0] ? "%s/%s" : "%s%s", a, b);
	return 0;
}

/*
 * list: the entries of dir, sorted: folders (dirs true) or image files.
 * Hidden entries are skipped.
 */
static int
list(struct names *out, const char *dir, bool dirs, struct ml_err *e)
{
	memset(out, 0, sizeof *out);
	DIR *d = opendir(dir);
	if (d == NULL)
		return ml_fail(e, ML_EINVAL, "cannot open '%s': %s", dir, strerror(errno));
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char p[4096];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		if (stat(p, &st) < 0)
			continue;
		if (dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode) && is_image_name(de->d_name))
			rc = names_add(out, de->d_name, "", e);
	}
	closedir(d);
	if (rc < 0) {
		names_free(out);
		return rc;
	}
	if (out->n > 1)
		qsort(out->v, (size_t)out->n, sizeof *out->v, cmp_str);
	return 0;
}

/* the decoding job of one worker: files i = w, w + nw, ...; rc is checked by the others */
struct folder_job {
	char **files;
	int64_t n, w, nw;
	int channels, h, wd;	/* the first image's */
	uint8_t *x;
	int64_t feat;
	int rc;
	struct ml_err err;
	pthread_t th;
};

static int
decode_into(struct folder_job *j, int64_t i)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	struct ml_tval im;
	int rc = ml_read_file(j->files[i], &buf, &len, &j->err);
	if (rc < 0)
		return rc;
	rc = ml_image_decode(&im, buf, len, j->channels, j->files[i], &j->err);
	ml_free(buf);
	if (rc < 0)
		return rc;
	if (im.dims[1] != j->h || im.dims[2] != j->wd) {
		rc = ml_fail(&j->err, ML_EFORMAT,
			     "%s is %lldx%lld; the first image is %dx%d (all images of a folder must have one size)",
			     j->files[i], (long long)im.dims[2], (long long)im.dims[1], j->wd, j->h);
	} else {
		memcpy(j->x + i * j->feat, im.data, (size_t)j->feat);
	}
	ml_tval_clear(&im);
	return rc;
}

static void *
folder_worker(void *arg)
{
	struct folder_job *j = arg;
	for (int64_t i = j->w; i < j->n && j->rc == 0; i += j->nw)
		j->rc = decode_into(j, i);
	return NULL;
}

/* decode_all: files[0..n-1] into x (n * feat bytes) on nw threads */
static int
decode_all(struct folder_job *proto, int nw, struct ml_err *e)
{
	struct folder_job jobs[64];
	nw = nw < 1 ? 1 : nw > 64 ? 64 : nw;
	if (nw > proto->n)
		nw = (int)proto->n;
	int started = 0, rc = 0;
	for (int w = 0; w < nw; w++) {
		jobs[w] = *proto;
		jobs[w].w = w;
		jobs[w].nw = nw;
		memset(&jobs[w].err, 0, sizeof jobs[w].err);
		if (w > 0 && pthread_create(&jobs[w].th, NULL, folder_worker, &jobs[w]) != 0)
			break;
		started = w + 1;
	}
	if (started < nw) {	/* fewer threads: the rest of the files go to this one */
		for (int w = 0; w < started; w++)
			jobs[w].nw = started;
		nw = started;
	}
	folder_worker(&jobs[0]);
	for (int w = 1; w < nw; w++)
		pthread_join(jobs[w].th, NULL);
	for (int w = 0; w < nw && rc == 0; w++)
		if (jobs[w].rc < 0) {
			rc = jobs[w].rc;
			*e = jobs[w].err;
		}
	return rc;
}

int
ml_image_folder_load(struct ml_dataset **out, const char *dir, int workers, struct ml_err *e)
{
	struct names classes, files = { 0 };
	int64_t *label = NULL;
	uint8_t *x = NULL;
	int rc;
	*out = NULL;
	ML_TRY(list(&classes, dir, true, e));
	if (classes.n == 0) {
		names_free(&classes);
		return ml_fail(e, ML_EINVAL, "%s: no class folders (one folder of PNG/JPEG images per class)",
			       dir);
	}
	for (int64_t c = 0; c < classes.n; c++) {
		char p[4096];
		struct names f;
		snprintf(p, sizeof p, "%s/%s", dir, classes.v[c]);
		if ((rc = list(&f, p, false, e)) < 0)
			goto fail;
		if (f.n == 0) {
			names_free(&f);
			rc = ml_fail(e, ML_EINVAL, "%s: class folder '%s' has no PNG or JPEG images", dir,
				     classes.v[c]);
			goto fail;
		}
		int64_t *nl = ml_realloc(label, (size_t)(files.n + f.n) * sizeof *label);
		if (nl == NULL) {
			names_free(&f);
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto fail;
		}
		label = nl;
		for (int64_t i = 0; i < f.n && rc == 0; i++) {
			label[files.n] = c;
			rc = names_add(&files, p, f.v[i], e);
		}
		names_free(&f);
		if (rc < 0)
			goto fail;
	}
	/* the first image sets the channels and the size */
	struct folder_job j = { .files = files.v, .n = files.n };
	{
		uint8_t *buf = NULL;
		size_t len = 0;
		struct ml_tval im;
		if ((rc = ml_read_file(files.v[0], &buf, &len, e)) < 0)
			goto fail;
		rc = ml_image_decode(&im, buf, len, 0, files.v[0], e);
		ml_free(buf);
		if (rc < 0)
			goto fail;
		j.channels = (int)im.dims[0];
		j.h = (int)im.dims[1];
		j.wd = (int)im.dims[2];
		ml_tval_clear(&im);
	}
	j.feat = (int64_t)j.channels * j.h * j.wd;
	if (files.n > INT64_MAX / j.feat || (x = ml_malloc((size_t)(files.n * j.feat))) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory for %lld images of %lld bytes",
			     (long long)files.n, (long long)j.feat);
		goto fail;
	}
	j.x = x;
	if ((rc = decode_all(&j, workers, e)) < 0)
		goto fail;
	struct ml_dataset *d = ml_calloc(1, sizeof *d);
	if (d == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto fail;
	}
	d->n = files.n;
	d->rank = 3;
	d->dims[0] = j.channels;
	d->dims[1] = j.h;
	d->dims[2] = j.wd;
	d->feat = j.feat;
	d->xtype = ML_U8;
	d->x = x;
	d->ytype = ML_I64;
	d->ylen = 1;
	d->y = label;
	snprintf(d->name, sizeof d->name, "%s", dir);
	names_free(&classes);
	names_free(&files);
	*out = d;
	return 0;
fail:
	ml_free(x);
	ml_free(label);
	names_free(&classes);
	names_free(&files);
	return rc;
}

/* ---- CIFAR-10 binary batches ---- */

#define CIFAR_REC (1 + 3 * 32 * 32)

int
ml_cifar_load(struct ml_dataset **out, const char *const *paths, int npaths, struct ml_err *e)
{
	uint8_t **bufs = ml_calloc((size_t)npaths, sizeof *bufs);
	size_t *lens = ml_calloc((size_t)npaths, sizeof *lens);
	int64_t n = 0;
	int rc = 0;
	*out = NULL;
	if (bufs == NULL || lens == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto done;
	}
	for (int i = 0; i < npaths && rc == 0; i++) {
		if ((rc = ml_read_file(paths[i], &bufs[i], &lens[i], e)) < 0)
			break;
		if (lens[i] == 0 || lens[i] % CIFAR_REC != 0)
			rc = ml_fail(e, ML_EFORMAT,
				     "%s: %zu bytes is not a whole number of CIFAR-10 records (%d bytes each)",
				     paths[i], lens[i], CIFAR_REC);
		n += (int64_t)(lens[i] / CIFAR_REC);
	}
	if (rc < 0)
		goto done;
	struct ml_dataset *d = ml_calloc(1, sizeof *d);
	uint8_t *x = ml_malloc((size_t)n * (CIFAR_REC - 1));
	int64_t *y = ml_malloc((size_t)n * sizeof *y);
	if (d == NULL || x == NULL || y == NULL) {
		ml_free(d), ml_free(x), ml_free(y);
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto done;
	}
	int64_t k = 0;
	for (int i = 0; i < npaths && rc == 0; i++)
		for (size_t r = 0; r < lens[i] / CIFAR_REC && rc == 0; r++, k++) {
			const uint8_t *rec = bufs[i] + r * CIFAR_REC;
			if (rec[0] > 9)
				rc = ml_fail(e, ML_EFORMAT, "%s: record %zu has label %d (CIFAR-10 has 0..9)",
					     paths[i], r, rec[0]);
			y[k] = rec[0];
			memcpy(x + k * (CIFAR_REC - 1), rec + 1, CIFAR_REC - 1);
		}
	if (rc < 0) {
		ml_free(d), ml_free(x), ml_free(y);
		goto done;
	}
	d->n = n;
	d->rank = 3;
	d->dims[0] = 3;
	d->dims[1] = d->dims[2] = 32;
	d->feat = CIFAR_REC - 1;
	d->xtype = ML_U8;
	d->x = x;
	d->ytype = ML_I64;
	d->ylen = 1;
	d->y = y;
	snprintf(d->name, sizeof d->name, "%s", paths[0]);
	*out = d;
done:
	for (int i = 0; bufs != NULL && i < npaths; i++)
		ml_free(bufs[i]);
	ml_free(bufs);
	ml_free(lens);
	return rc;
}

/* ---- augmentation ---- */

/* parse_floats: "a,b,c" into v (at most 4); the count, or -1 */
static int
parse_floats(const char *s, size_t len, float *v)
{
	int n = 0;
	char buf[256];
	if (len == 0 || len >= sizeof buf)
		return -1;
	memcpy(buf, s, len);
	buf[len] = 0;
	for (char *p = buf, *q; *p; p = q + (*q == ',')) {
		if (n == 4)
			return -1;
		errno = 0;
		double d = strtod(p, &q);
		if (q == p || errno != 0 || (*q != ',' && *q != 0) || !(d == d) || d > 1e30 ||
		    d < -1e30)
			return -1;
		v[n++] = (float)d;
		if (*q == ',' && q[1] == 0)
			return -1;
	}
	return n;
}

int
ml_augment_parse(struct ml_augment *a, const char *spec, struct ml_err *e)
{
	const char *p = spec;
	if (*p == 0)
		return ml_fail(e, ML_EINVAL, "an empty augmentation (crop=P, flip)");
	while (*p) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n == 4 && strncmp(p, "flip", 4) == 0) {
			a->flip = true;
		} else if (n > 5 && strncmp(p, "crop=", 5) == 0) {
			char *q;
			errno = 0;
			long v = strtol(p + 5, &q, 10);
			if (q != p + n || errno != 0 || v < 0 || v > 1024)
				return ml_fail(e, ML_EINVAL,
					       "'%.*s': crop=P takes a padding of 0 to 1024 pixels",
					       (int)n, p);
			a->pad = (int)v;
		} else {
			return ml_fail(e, ML_EINVAL, "unknown augmentation '%.*s' (crop=P, flip)",
				       (int)n, p);
		}
		p += n;
		if (*p == ',' && *++p == 0)
			return ml_fail(e, ML_EINVAL, "'%s' ends with a comma", spec);
	}
	return 0;
}

int
ml_normalize_parse(struct ml_augment *a, const char *spec, struct ml_err *e)
{
	const char *slash = strchr(spec, '/');
	int nm, ns;
	if (slash == NULL ||
	    (nm = parse_floats(spec, (size_t)(slash - spec), a->mean)) < 0 ||
	    (ns = parse_floats(slash + 1, strlen(slash + 1), a->std)) < 0 || nm != ns)
		return ml_fail(e, ML_EINVAL,
			       "'%s': --normalize takes MEAN/STD with one value or one per channel each (e.g. 0.49,0.48,0.45/0.25,0.24,0.26)",
			       spec);
	for (int i = 0; i < ns; i++)
		if (!(a->std[i] > 0))
			return ml_fail(e, ML_EINVAL, "'%s': a standard deviation must be > 0", spec);
	a->nnorm = nm;
	return 0;
}

int
ml_augment_check(const struct ml_augment *a, const struct ml_batch_spec *x, struct ml_err *e)
{
	if (a->pad == 0 && !a->flip && a->nnorm == 0)
		return 0;
	if (x->dtype != ML_F32 || x->rank != 3)
		return ml_fail(e, ML_EINVAL,
			       "augmentation and normalisation take images (f32 [C,H,W] samples); the model's input takes %s samples of rank %d",
			       ml_dtype_name(x->dtype), x->rank);
	if (a->nnorm > 1 && a->nnorm != x->dims[0])
		return ml_fail(e, ML_EINVAL, "--normalize gives %d values per channel; the images have %lld channels",
			       a->nnorm, (long long)x->dims[0]);
	if (a->pad > 0 && (a->pad >= x->dims[1] || a->pad >= x->dims[2]))
		return ml_fail(e, ML_EINVAL, "crop=%d: the padding must be smaller than the image (%lldx%lld)",
			       a->pad, (long long)x->dims[2], (long long)x->dims[1]);
	return 0;
}

bool
ml_augment_active(const struct ml_augment *a)
{
	return a != NULL && (a->pad > 0 || a->flip || a->nnorm > 0);
}

int
ml_augment_apply(const struct ml_augment *a, struct ml_tval *x, const int64_t *idx,
		 uint64_t seed, uint64_t epoch, struct ml_err *e)
{
	int64_t n = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3], plane = h * w;
	float *tmp = NULL;
	if (!ml_augment_active(a))
		return 0;
	if (a->pad > 0 || a->flip) {
		if ((tmp = ml_malloc((size_t)(c * plane) * sizeof *tmp)) == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	for (int64_t i = 0; i < n; i++) {
		float *s = (float *)x->data + i * c * plane;
		int64_t dy = 0, dx = 0;
		bool flip = false;
		if (tmp != NULL) {
			/* one stream per (seed, epoch, sample): the same whichever worker builds it */
			struct ml_rng r;
			ml_rng_seed(&r, seed ^ (epoch * 0x9e3779b97f4a7c15ULL) ^
					       ((uint64_t)idx[i] * 0xbf58476d1ce4e5b9ULL) ^ 0x61756775ULL);
			if (a->pad > 0) {
				dy = (int64_t)ml_rng_below(&r, 2 * (uint64_t)a->pad + 1) - a->pad;
				dx = (int64_t)ml_rng_below(&r, 2 * (uint64_t)a->pad + 1) - a->pad;
			}
			flip = a->flip && (ml_rng_next(&r) >> 63);
			memcpy(tmp, s, (size_t)(c * plane) * sizeof *tmp);
			/* out[y][x] = in[y + dy][x' + dx] of the zero-padded image, x' mirrored when flipped */
			for (int64_t k = 0; k < c; k++)
				for (int64_t y = 0; y < h; y++) {
					int64_t sy = y + dy;
					float *o = s + k * plane + y * w;
					if (sy < 0 || sy >= h) {
						memset(o, 0, (size_t)w * sizeof *o);
						continue;
					}
					const float *in = tmp + k * plane + sy * w;
					for (int64_t xx = 0; xx < w; xx++) {
						int64_t sx = (flip ? w - 1 - xx : xx) + dx;
						o[xx] = sx >= 0 && sx < w ? in[sx] : 0.0f;
					}
				}
		}
		for (int64_t k = 0; a->nnorm > 0 && k < c; k++) {
			int j = a->nnorm == 1 ? 0 : (int)k;
			float m = a->mean[j], inv = 1.0f / a->std[j];
			float *p = s + k * plane;
			for (int64_t q = 0; q < plane; q++)
				p[q] = (p[q] - m) * inv;
		}
	}
	ml_free(tmp);
	return 0;
}
