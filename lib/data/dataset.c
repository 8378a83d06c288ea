/*
 * dataset.c: labelled datasets in memory: made from arrays, found in a
 * folder or a file (IDX, .npy pairs, .npz, CSV), split for validation,
 * checked against what a model takes, and cut into batches.
 */
#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <sys/stat.h>

#include "ml_impl.h"

void
ml_dataset_free(struct ml_dataset *d)
{
	if (d == NULL)
		return;
	ml_free(d->x);
	ml_free(d->y);
	ml_free(d);
}

int
ml_dataset_from_arrays(struct ml_dataset **out, struct ml_tval *x, struct ml_tval *y,
		       const char *name, struct ml_err *e)
{
	struct ml_dataset *d = NULL;
	int rc = 0;

	*out = NULL;
	if (x->rank < 1 || y->rank < 1) {
		rc = ml_fail(e, ML_EFORMAT, "%s: samples and labels need a first dim (of samples)",
			     name);
		goto out;
	}
	if (x->dims[0] != y->dims[0]) {
		rc = ml_fail(e, ML_EFORMAT, "%s: %lld samples but %lld labels", name,
			     (long long)x->dims[0], (long long)y->dims[0]);
		goto out;
	}
	if (x->dims[0] == 0) {
		rc = ml_fail(e, ML_EFORMAT, "%s: no samples", name);
		goto out;
	}
	if (!ml_dtype_is_float(x->dtype) && !ml_dtype_is_int(x->dtype) && x->dtype != ML_BOOL) {
		rc = ml_fail(e, ML_EFORMAT, "%s: samples of type %s", name, ml_dtype_name(x->dtype));
		goto out;
	}
	if (!ml_dtype_is_float(y->dtype) && !ml_dtype_is_int(y->dtype) && y->dtype != ML_BOOL) {
		rc = ml_fail(e, ML_EFORMAT, "%s: labels of type %s", name, ml_dtype_name(y->dtype));
		goto out;
	}
	if ((d = ml_calloc(1, sizeof *d)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	snprintf(d->name, sizeof d->name, "%s", name);
	d->n = x->dims[0];
	d->rank = x->rank - 1;
	d->feat = 1;
	for (int i = 1; i < x->rank; i++) {
		d->dims[i - 1] = x->dims[i];
		d->feat *= x->dims[i];
	}
	d->ylen = 1;
	for (int i = 1; i < y->rank; i++)
		d->ylen *= y->dims[i];
	if (d->feat == 0 || d->ylen == 0) {
		rc = ml_fail(e, ML_EFORMAT, "%s: empty samples or labels", name);
		goto out;
	}
	int64_t n = d->n * d->feat;
	if (x->dtype == ML_U8 || x->dtype == ML_F32) {
		d->xtype = x->dtype;
		d->x = x->data;
		x->owned = false;
	} else {
		d->xtype = ML_F32;
		if ((d->x = ml_malloc((size_t)n * sizeof(float))) == NULL) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
		if ((rc = ml_convert(d->x, ML_F32, x->data, x->dtype, n)) < 0) {
			rc = ml_fail(e, ML_EFORMAT, "%s: the samples' type %s cannot be read as float", name,
				     ml_dtype_name(x->dtype));
			goto out;
		}
	}
	int64_t ny = d->n * d->ylen;
	d->ytype = ml_dtype_is_float(y->dtype) ? ML_F32 : ML_I64;
	if (y->dtype == d->ytype) {
		d->y = y->data;
		y->owned = false;
	} else {
		if ((d->y = ml_malloc((size_t)ny * 8)) == NULL) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
		if ((rc = ml_convert(d->y, d->ytype, y->data, y->dtype, ny)) < 0) {
			rc = ml_fail(e, ML_EFORMAT, "%s: the labels' type %s cannot be read as %s", name,
				     ml_dtype_name(y->dtype), ml_dtype_name(d->ytype));
			goto out;
		}
	}
	*out = d;
	d = NULL;
out:
	ml_dataset_free(d);
	ml_tval_clear(x);
	ml_tval_clear(y);
	return rc;
}

/*
 * Finding the files. A folder is searched for the known layouts in turn;
 * names are matched loosely for IDX (train-images-idx3-ubyte, with .gz or
 * with a dot before idx as some mirrors write it).
 */
static bool
exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* find_idx: DIR/<prefix>-<what>[-.]idxN-ubyte[.gz] into out. */
static bool
find_idx(const char *dir, const char *prefix, const char *what, char *out, size_t n)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	bool found = false;
	char want[64];
	snprintf(want, sizeof want, "%s-%s", prefix, what);
	if (dp == NULL)
		return false;
	while (!found && (de = readdir(dp)) != NULL) {
		const char *nm = de->d_name;
		size_t wl = strlen(want);
		if (strncmp(nm, want, wl) != 0 || (nm[wl] != '-' && nm[wl] != '.') ||
		    strncmp(nm + wl + 1, "idx", 3) != 0)
			continue;
		const char *rest = nm + wl + 4;
		if (rest[0] < '1' || rest[0] > '9' || strncmp(rest + 1, "-ubyte", 6) != 0 ||
		    (rest[7] != '\0' && strcmp(rest + 7, ".gz") != 0))
			continue;
		snprintf(out, n, "%s/%s", dir, nm);
		found = exists(out);
	}
	closedir(dp);
	return found;
}

static int
load_idx_pair(struct ml_dataset **out, const char *xp, const char *yp, struct ml_err *e)
{
	struct ml_tval x = { 0 }, y = { 0 };
	ML_TRY(ml_idx_load(&x, xp, e));
	int rc = ml_idx_load(&y, yp, e);
	if (rc < 0) {
		ml_tval_clear(&x);
		return rc;
	}
	const char *base = strrchr(xp, '/');
	return ml_dataset_from_arrays(out, &x, &y, base ? base + 1 : xp, e);
}

static int
load_npy_pair(struct ml_dataset **out, const char *xp, const char *yp, struct ml_err *e)
{
	struct ml_tval x = { 0 }, y = { 0 };
	int rc = ml_npy_load(&x, xp, e);
	if (rc < 0) {
		ml_err_prefix(e, xp);
		return rc;
	}
	if ((rc = ml_npy_load(&y, yp, e)) < 0) {
		ml_err_prefix(e, yp);
		ml_tval_clear(&x);
		return rc;
	}
	return ml_dataset_from_arrays(out, &x, &y, xp, e);
}

/* The arrays of one .npz file that a dataset is made of. */
struct npz_arrays {
	struct ml_tval a[4];	/* x_train, y_train, x_test, y_test (or x, y) */
};

static int
npz_take(void *ctx, const char *name, struct ml_tval *arr, struct ml_err *e)
{
	struct npz_arrays *z = ctx;
	static const char *const names[4][2] = {
		{ "x_train", "x" }, { "y_train", "y" }, { "x_test", NULL }, { "y_test", NULL },
	};
	(void)e;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 2; j++)
			if (names[i][j] != NULL && strcmp(name, names[i][j]) == 0 &&
			    z->a[i].data == NULL) {
				z->a[i] = *arr;
				memset(arr, 0, sizeof *arr);
				return 0;
			}
	return 0;
}

static int
load_npz(struct ml_dataset **train, struct ml_dataset **test, const char *path,
	 struct ml_err *e)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	struct npz_arrays z;
	int rc;

	memset(&z, 0, sizeof z);
	ML_TRY(ml_read_file(path, &buf, &len, e));
	rc = ml_npz_decode(buf, len, npz_take, &z, e);
	ml_free(buf);
	if (rc < 0) {
		ml_err_prefix(e, path);
		goto out;
	}
	if (z.a[0].data == NULL || z.a[1].data == NULL) {
		rc = ml_fail(e, ML_EFORMAT, "%s: no arrays x and y (or x_train and y_train)", path);
		goto out;
	}
	if ((rc = ml_dataset_from_arrays(train, &z.a[0], &z.a[1], path, e)) < 0)
		goto out;
	if (test != NULL && z.a[2].data != NULL && z.a[3].data != NULL &&
	    (rc = ml_dataset_from_arrays(test, &z.a[2], &z.a[3], path, e)) < 0) {
		ml_dataset_free(*train);
		*train = NULL;
	}
out:
	for (int i = 0; i < 4; i++)
		ml_tval_clear(&z.a[i]);
	return rc;
}

static int
load_csv(struct ml_dataset **out, const char *path, struct ml_err *e)
{
	uint8_t *buf = NULL, *raw = NULL;
	size_t len = 0, rlen = 0;
	ML_TRY(ml_read_file(path, &buf, &len, e));
	int rc = ml_gunzip(buf, len, &raw, &rlen, e);
	if (rc >= 0)
		rc = ml_csv_decode(out, raw ? (char *)raw : (char *)buf, raw ? rlen : len, 0, path,
				   e);
	if (rc < 0 && strncmp(e->msg, path, strlen(path)) != 0)
		ml_err_prefix(e, path);
	ml_free(buf);
	ml_free(raw);
	return rc;
}

static bool
has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && strcmp(s + a - b, suf) == 0;
}

static bool
is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/*
 * load_cifar: CIFAR-10's binary batches in dir or dir/cifar-10-batches-bin:
 * data_batch_1.bin ... for training, test_batch.bin for the test set;
 * 1 when found, 0 when not.
 */
static int
load_cifar(struct ml_dataset **out, const char *dir, bool is_test, struct ml_err *e)
{
	char base[4096], names[8][4200];
	const char *paths[8];
	int n = 0;
	for (int sub = 0; sub < 2 && n == 0; sub++) {
		snprintf(base, sizeof base, sub ? "%s/cifar-10-batches-bin" : "%s", dir);
		if (is_test) {
			snprintf(names[0], sizeof names[0], "%s/test_batch.bin", base);
			n = exists(names[0]);
		} else {
			for (int i = 1; i <= 8; i++) {
				snprintf(names[n], sizeof names[n], "%s/data_batch_%d.bin", base, i);
				if (!exists(names[n]))
					break;
				n++;
			}
		}
	}
	for (int i = 0; i < n; i++)
		paths[i] = names[i];
	if (n == 0)
		return 0;
	ML_TRY(ml_cifar_load(out, paths, n, e));
	return 1;
}

/*
 * load_images: images in class folders: dir/train/ (dir/test/ or dir/val/
 * for the test set), or, for the training set, dir itself when it holds
 * only folders; or CIFAR-10's batches. 1 when found, 0 when not.
 */
static int
load_images(struct ml_dataset **out, const char *dir, bool is_test, struct ml_err *e)
{
	char p[4096];
	int rc = load_cifar(out, dir, is_test, e);
	if (rc != 0)
		return rc;
	const char *sub[2] = { is_test ? "test" : "train", is_test ? "val" : NULL };
	for (int i = 0; i < 2; i++) {
		if (sub[i] == NULL)
			continue;
		snprintf(p, sizeof p, "%s/%s", dir, sub[i]);
		if (is_dir(p)) {
			ML_TRY(ml_image_folder_load(out, p, ml_get_threads(), e));
			return 1;
		}
	}
	if (is_test)
		return 0;
	/* a folder of class folders only (no files but hidden ones) */
	DIR *d = opendir(dir);
	struct dirent *de;
	bool folders = false, files = false;
	if (d == NULL)
		return 0;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		if (is_dir(p))
			folders = true;
		else
			files = true;
	}
	closedir(d);
	if (!folders || files)
		return 0;
	ML_TRY(ml_image_folder_load(out, dir, ml_get_threads(), e));
	return 1;
}

/* load_dir_split: one of train/test from folder dir; 1 when found, 0 when not. */
static int
load_dir_split(struct ml_dataset **out, const char *dir, bool is_test, struct ml_err *e)
{
	char a[4096], b[4096];
	const char *pfx[2] = { is_test ? "t10k" : "train", is_test ? "test" : NULL };
	for (int i = 0; i < 2; i++) {
		if (pfx[i] == NULL)
			continue;
		if (find_idx(dir, pfx[i], "images", a, sizeof a)) {
			if (!find_idx(dir, pfx[i], "labels", b, sizeof b))
				return ml_fail(e, ML_EINVAL, "%s: no labels file (%s-labels-idx1-ubyte) beside '%s'",
					       dir, pfx[i], a);
			ML_TRY(load_idx_pair(out, a, b, e));
			return 1;
		}
	}
	const char *sp = is_test ? "test" : "train";
	snprintf(a, sizeof a, "%s/x_%s.npy", dir, sp);
	snprintf(b, sizeof b, "%s/y_%s.npy", dir, sp);
	if (exists(a)) {
		if (!exists(b))
			return ml_fail(e, ML_EINVAL, "%s: x_%s.npy has no y_%s.npy beside it", dir, sp,
				       sp);
		ML_TRY(load_npy_pair(out, a, b, e));
		return 1;
	}
	snprintf(a, sizeof a, "%s/%s.npz", dir, sp);
	if (exists(a)) {
		ML_TRY(load_npz(out, NULL, a, e));
		return 1;
	}
	snprintf(a, sizeof a, "%s/%s.csv", dir, sp);
	if (exists(a)) {
		ML_TRY(load_csv(out, a, e));
		return 1;
	}
	snprintf(a, sizeof a, "%s/%s.csv.gz", dir, sp);
	if (exists(a)) {
		ML_TRY(load_csv(out, a, e));
		return 1;
	}
	return load_images(out, dir, is_test, e);
}

int
ml_data_load(struct ml_dataset **train, struct ml_dataset **test, const char *path,
	     struct ml_err *e)
{
	struct stat st;
	*train = NULL;
	if (test != NULL)
		*test = NULL;
	if (stat(path, &st) < 0)
		return ml_fail(e, ML_EINVAL, "cannot open '%s': %s", path, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		int rc = load_dir_split(train, path, false, e);
		if (rc < 0)
			return rc;
		if (rc == 0)
			return ml_fail(e, ML_EINVAL,
				       "%s: no training data (train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz], x_train.npy and y_train.npy, train.npz, train.csv, train/ of class folders of images, or CIFAR-10's data_batch_N.bin)",
				       path);
		if (test != NULL && (rc = load_dir_split(test, path, true, e)) < 0) {
			ml_dataset_free(*train);
			*train = NULL;
			return rc;
		}
		return 0;
	}
	if (has_suffix(path, ".npz"))
		return load_npz(train, test, path, e);
	if (has_suffix(path, ".csv") || has_suffix(path, ".csv.gz"))
		return load_csv(train, path, e);
	return ml_fail(e, ML_EINVAL, "%s: not a folder, .npz or .csv file", path);
}

/* A generator for the splits; ml_shuffle has the loader's. */
int
ml_dataset_split(struct ml_dataset *d, double frac, uint64_t seed, struct ml_dataset **val,
		 struct ml_err *e)
{
	*val = NULL;
	if (!(frac > 0 && frac < 1))
		return ml_fail(e, ML_EINVAL, "a validation fraction must lie between 0 and 1");
	int64_t nv = (int64_t)llround(frac * (double)d->n);
	if (nv < 1 || nv >= d->n)
		return ml_fail(e, ML_EINVAL, "%s: %lld samples cannot be split %g for validation",
			       d->name, (long long)d->n, frac);
	int64_t *perm = ml_malloc((size_t)d->n * sizeof *perm);
	bool *isval = ml_calloc((size_t)d->n, 1);
	struct ml_dataset *v = ml_calloc(1, sizeof *v);
	size_t xs = ml_dtype_size(d->xtype) * (size_t)d->feat, ys = 8 * (size_t)d->ylen;
	if (perm == NULL || isval == NULL || v == NULL)
		goto nomem;
	*v = *d;
	v->n = nv;
	v->x = ml_malloc(xs * (size_t)nv);
	v->y = ml_malloc(ys * (size_t)nv);
	if (v->x == NULL || v->y == NULL)
		goto nomem;
	snprintf(v->name, sizeof v->name, "%.200s (validation)", d->name);
	/* a fixed stream apart from the loader's epochs */
	ml_shuffle(perm, d->n, seed ^ 0x76616c6964ULL, UINT64_MAX);
	for (int64_t i = 0; i < nv; i++)
		isval[perm[i]] = true;
	int64_t kv = 0, kt = 0;
	uint8_t *x = d->x, *y = d->y, *vx = v->x, *vy = v->y;
	ys = ml_dtype_size(d->ytype) * (size_t)d->ylen;
	for (int64_t i = 0; i < d->n; i++) {
		if (isval[i]) {
			memcpy(vx + (size_t)kv * xs, x + (size_t)i * xs, xs);
			memcpy(vy + (size_t)kv * ys, y + (size_t)i * ys, ys);
			kv++;
		} else {
			memmove(x + (size_t)kt * xs, x + (size_t)i * xs, xs);
			memmove(y + (size_t)kt * ys, y + (size_t)i * ys, ys);
			kt++;
		}
	}
	d->n = kt;
	ml_free(perm);
	ml_free(isval);
	*val = v;
	return 0;
nomem:
	ml_free(perm);
	ml_free(isval);
	if (v != NULL) {
		ml_free(v->x == d->x ? NULL : v->x);
		ml_free(v->y == d->y ? NULL : v->y);
		ml_free(v);
	}
	return ml_fail(e, ML_ENOMEM, "out of memory");
}

static char *
dims_str(char *buf, size_t n, int rank, const int64_t *dims)
{
	size_t k = 0;
	buf[0] = '\0';
	for (int i = 0; i < rank && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "x" : "", (long long)dims[i]);
	if (rank == 0)
		snprintf(buf, n, "scalar");
	return buf;
}

int
ml_dataset_check(const struct ml_dataset *d, struct ml_batch_spec *x, struct ml_batch_spec *y,
		 int64_t classes, struct ml_err *e)
{
	char a[128], b[128];
	int64_t known = 1;
	int unknown = -1;
	for (int i = 0; i < x->rank; i++) {
		if (x->dims[i] < 0) {
			if (unknown >= 0)
				return ml_fail(e, ML_EINVAL,
					       "the model's input has more than one unknown dim after the batch dim");
			unknown = i;
		} else {
			known *= x->dims[i];
		}
	}
	if (unknown >= 0 && known > 0 && d->feat % known == 0)
		x->dims[unknown] = d->feat / known;
	else if (unknown >= 0 && d->rank == x->rank)
		x->dims[unknown] = d->dims[unknown];
	int64_t want = 1;
	for (int i = 0; i < x->rank; i++)
		want *= x->dims[i];
	if (want != d->feat)
		return ml_fail(e, ML_EINVAL,
			       "%s: samples of %s (%lld values) do not fit the model's input of %s (%lld values)",
			       d->name, dims_str(a, sizeof a, d->rank, d->dims), (long long)d->feat,
			       dims_str(b, sizeof b, x->rank, x->dims), (long long)want);
	if (!ml_dtype_is_float(x->dtype))
		return ml_fail(e, ML_ENOTSUP, "the model's input is %s; only float inputs are fed",
			       ml_dtype_name(x->dtype));
	/* labels */
	int64_t ywant = 1;
	for (int i = 0; i < y->rank; i++) {
		if (y->dims[i] < 0)
			y->dims[i] = (y->rank == 1 && d->ytype == ML_I64 && classes > 0) ? classes :
				     d->ylen;
		ywant *= y->dims[i];
	}
	bool onehot = ml_dtype_is_float(y->dtype) && d->ytype == ML_I64 && d->ylen == 1 &&
		      ywant > 1;
	if (ml_dtype_is_int(y->dtype) && d->ytype != ML_I64)
		return ml_fail(e, ML_EINVAL, "%s: the loss takes class labels, the data has float targets",
			       d->name);
	if (!onehot && ywant != d->ylen)
		return ml_fail(e, ML_EINVAL, "%s: labels of %lld values do not fit the loss's %lld",
			       d->name, (long long)d->ylen, (long long)ywant);
	if (onehot && classes <= 0)
		classes = ywant;
	if (d->ytype == ML_I64 && (classes > 0 || onehot)) {
		const int64_t *lab = d->y;
		for (int64_t i = 0; i < d->n * d->ylen; i++)
			if (lab[i] < 0 || lab[i] >= classes)
				return ml_fail(e, ML_EINVAL,
					       "%s: label %lld of sample %lld is out of range for %lld classes",
					       d->name, (long long)lab[i], (long long)(i / d->ylen),
					       (long long)classes);
	}
	return 0;
}

/*
 * u8_scale: v / 255.0f for every byte (exactly torchvision's x / 255), by
 * table: a lookup is several times faster than a division per value.
 */
static float u8_scale[256];
static pthread_once_t u8_once = PTHREAD_ONCE_INIT;

static void
u8_init(void)
{
	for (int i = 0; i < 256; i++)
		u8_scale[i] = (float)i / 255.0f;
}

int
ml_dataset_batch(const struct ml_dataset *d, const int64_t *idx, int64_t n,
		 const struct ml_batch_spec *xs, const struct ml_batch_spec *ys,
		 struct ml_tval *x, struct ml_tval *y, struct ml_err *e)
{
	int64_t xd[ML_MAX_RANK], yd[ML_MAX_RANK];
	xd[0] = yd[0] = n;
	for (int i = 0; i < xs->rank; i++)
		xd[i + 1] = xs->dims[i];
	for (int i = 0; i < ys->rank; i++)
		yd[i + 1] = ys->dims[i];
	/* reuse the buffers when the shape is the same (the usual case) */
	bool xsame = x->data != NULL && x->dtype == xs->dtype && x->rank == xs->rank + 1 &&
		     memcmp(x->dims, xd, sizeof(int64_t) * (size_t)x->rank) == 0;
	if (!xsame)
		ML_TRY(ml_tval_alloc(x, xs->dtype, xs->rank + 1, xd, e));
	bool ysame = y->data != NULL && y->dtype == ys->dtype && y->rank == ys->rank + 1 &&
		     memcmp(y->dims, yd, sizeof(int64_t) * (size_t)y->rank) == 0;
	if (!ysame)
		ML_TRY(ml_tval_alloc(y, ys->dtype, ys->rank + 1, yd, e));
	int64_t f = d->feat, yl = ml_tval_numel(y) / (n > 0 ? n : 1);
	pthread_once(&u8_once, u8_init);
	for (int64_t b = 0; b < n; b++) {
		int64_t s = idx[b];
		if (xs->dtype == ML_F32) {
			float *dst = (float *)x->data + b * f;
			if (d->xtype == ML_U8) {
				const uint8_t *src = (const uint8_t *)d->x + s * f;
				for (int64_t k = 0; k < f; k++)
					dst[k] = u8_scale[src[k]];
			} else {
				memcpy(dst, (const float *)d->x + s * f, (size_t)f * sizeof(float));
			}
		} else {
			for (int64_t k = 0; k < f; k++) {
				double v = d->xtype == ML_U8 ? ((const uint8_t *)d->x)[s * f + k] / 255.0 :
							       ((const float *)d->x)[s * f + k];
				ml_set_f64(x->data, x->dtype, b * f + k, v);
			}
		}
		if (d->ytype == ML_I64 && ml_dtype_is_float(ys->dtype) && d->ylen == 1 && yl > 1) {
			int64_t c = ((const int64_t *)d->y)[s];
			for (int64_t k = 0; k < yl; k++)
				ml_set_f64(y->data, y->dtype, b * yl + k, k == c ? 1.0 : 0.0);
		} else {
			for (int64_t k = 0; k < yl; k++) {
				int64_t j = s * d->ylen + k;
				if (d->ytype == ML_I64)
					ml_set_f64(y->data, y->dtype, b * yl + k,
						   (double)((const int64_t *)d->y)[j]);
				else
					ml_set_f64(y->data, y->dtype, b * yl + k,
						   ((const float *)d->y)[j]);
			}
		}
	}
	return 0;
}
