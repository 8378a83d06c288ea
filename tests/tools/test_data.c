/*
 * test_data.c: C tests of the data layer (lib/data): the IDX reader and
 * writer (plain and gzipped, damaged headers), CSV datasets, seeded
 * shuffles, validation splits, checks against a model's input and labels,
 * batches (scaling, one-hot rows) and the loader with and without its
 * prefetch thread or several workers, which must give the same batches;
 * image augmentation (crop with padding, flip, normalisation) against a
 * direct reading of its definition; image decoding's refusals. Prints TAP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ml.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

/* gz: a gzip image of buf (deflate through zlib's gzip wrapper). */
static uint8_t *
gz(const uint8_t *buf, size_t len, size_t *out)
{
	z_stream zs;
	memset(&zs, 0, sizeof zs);
	deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
	size_t cap = deflateBound(&zs, len) + 64;
	uint8_t *p = malloc(cap);
	zs.next_in = (Bytef *)buf;
	zs.avail_in = (uInt)len;
	zs.next_out = p;
	zs.avail_out = (uInt)cap;
	deflate(&zs, Z_FINISH);
	*out = cap - zs.avail_out;
	deflateEnd(&zs);
	return p;
}

static void
test_idx(void)
{
	struct ml_err e = { 0 };
	struct ml_tval t = { 0 }, back = { 0 };
	int64_t dims[3] = { 2, 3, 2 };
	ml_tval_alloc(&t, ML_F32, 3, dims, &e);
	for (int i = 0; i < 12; i++)
		((float *)t.data)[i] = (float)i * 0.5f - 2;
	uint8_t *buf = NULL;
	size_t len = 0;
	ok(ml_idx_encode(&t, &buf, &len, &e) == 0 && len == 4 + 12 + 48, "IDX f32 encodes");
	ok(buf[2] == 0x0D && buf[3] == 3 && buf[7] == 2, "IDX header is big-endian, type 0x0d");
	ok(ml_idx_decode(&back, buf, len, &e) == 0 && back.dtype == ML_F32 && back.rank == 3 &&
		   back.dims[1] == 3 && memcmp(back.data, t.data, 48) == 0,
	   "IDX f32 reads back");
	ml_tval_clear(&back);
	size_t zl;
	uint8_t *z = gz(buf, len, &zl);
	ok(ml_idx_decode(&back, z, zl, &e) == 0 && memcmp(back.data, t.data, 48) == 0,
	   "gzipped IDX reads back");
	ml_tval_clear(&back);
	ok(ml_idx_decode(&back, z, zl - 4, &e) == ML_EFORMAT, "truncated gzip is ML_EFORMAT");
	z[zl - 8] ^= 1;	/* the CRC */
	ok(ml_idx_decode(&back, z, zl, &e) == ML_EFORMAT, "gzip with a bad CRC is ML_EFORMAT");
	free(z);
	ok(ml_idx_decode(&back, buf, len - 1, &e) == ML_EFORMAT &&
		   strstr(e.msg, "header says") != NULL,
	   "IDX one byte short is ML_EFORMAT naming the sizes");
	buf[2] = 0x07;
	ok(ml_idx_decode(&back, buf, len, &e) == ML_EFORMAT, "IDX unknown type code is refused");
	buf[2] = 0x0D;
	buf[0] = 1;
	ok(ml_idx_decode(&back, buf, len, &e) == ML_EFORMAT, "IDX bad magic is refused");
	buf[0] = 0;
	buf[3] = 0;
	ok(ml_idx_decode(&back, buf, len, &e) == ML_EFORMAT, "IDX with 0 dims is refused");
	buf[3] = 200;
	ok(ml_idx_decode(&back, buf, len, &e) == ML_EFORMAT, "IDX with 200 dims is refused");
	buf[3] = 3;
	memset(buf + 4, 0xff, 12);
	ok(ml_idx_decode(&back, buf, len, &e) == ML_EFORMAT, "IDX dims that overflow are refused");
	ok(ml_idx_decode(&back, buf, 3, &e) == ML_EFORMAT, "a 3-byte file is refused");
	ml_free(buf);
	ml_tval_clear(&t);

	int64_t d1[1] = { 5 };
	ml_tval_alloc(&t, ML_I16, 1, d1, &e);
	for (int i = 0; i < 5; i++)
		((int16_t *)t.data)[i] = (int16_t)(i * 1000 - 2000);
	ml_idx_encode(&t, &buf, &len, &e);
	ok(buf[4 + 4] == 0xF8 && buf[4 + 5] == 0x30, "IDX i16 data are big-endian");
	ok(ml_idx_decode(&back, buf, len, &e) == 0 && ((int16_t *)back.data)[4] == 2000,
	   "IDX i16 reads back");
	ml_tval_clear(&back);
	ml_tval_clear(&t);
	ml_free(buf);
}

static void
test_csv(void)
{
	struct ml_err e = { 0 };
	struct ml_dataset *d = NULL;
	const char *txt = "label,a,b,c\n1,0.5,2,3\n\n0,1,1,1\r\n2,-1,0,4e1\n";
	ok(ml_csv_decode(&d, txt, strlen(txt), 0, "t.csv", &e) == 0 && d->n == 3 &&
		   d->feat == 3 && d->ytype == ML_I64,
	   "CSV with a header: 3 samples of 3 features, class labels");
	if (d != NULL)
		ok(((int64_t *)d->y)[2] == 2 && ((float *)d->x)[8] == 40.0f &&
			   ((float *)d->x)[0] == 0.5f,
		   "CSV values in place");
	ml_dataset_free(d);
	d = NULL;
	const char *rag = "1,2,3\n1,2\n";
	ok(ml_csv_decode(&d, rag, strlen(rag), 0, "t.csv", &e) == ML_EFORMAT &&
		   strstr(e.msg, "line 2") != NULL,
	   "ragged CSV is ML_EFORMAT naming the line");
	const char *junk = "1,2,3\n1,x,3\n";
	ok(ml_csv_decode(&d, junk, strlen(junk), 0, "t.csv", &e) == ML_EFORMAT &&
		   strstr(e.msg, "line 2, field 2") != NULL,
	   "a non-number in CSV is ML_EFORMAT naming line and field");
	const char *fl = "0.5,1\n1.5,2\n";
	ok(ml_csv_decode(&d, fl, strlen(fl), -1, "t.csv", &e) == 0 && d->ytype == ML_I64 &&
		   ((float *)d->x)[1] == 1.5f,
	   "CSV label in the last column");
	ml_dataset_free(d);
	d = NULL;
	ok(ml_csv_decode(&d, fl, strlen(fl), 0, "t.csv", &e) == 0 && d->ytype == ML_F32,
	   "CSV float labels are targets");
	ml_dataset_free(d);
	d = NULL;
	ok(ml_csv_decode(&d, "", 0, 0, "t.csv", &e) == ML_EFORMAT, "empty CSV is refused");
}

/* mkds: n samples of 2x2 u8 values i*4+k, labels i % classes. */
static struct ml_dataset *
mkds(int64_t n, int64_t classes)
{
	struct ml_err e = { 0 };
	struct ml_tval x = { 0 }, y = { 0 };
	int64_t xd[3] = { n, 2, 2 }, yd[1] = { n };
	ml_tval_alloc(&x, ML_U8, 3, xd, &e);
	ml_tval_alloc(&y, ML_U8, 1, yd, &e);
	for (int64_t i = 0; i < n * 4; i++)
		((uint8_t *)x.data)[i] = (uint8_t)i;
	for (int64_t i = 0; i < n; i++)
		((uint8_t *)y.data)[i] = (uint8_t)(i % classes);
	struct ml_dataset *d = NULL;
	ml_dataset_from_arrays(&d, &x, &y, "mem", &e);
	return d;
}

static void
test_shuffle_split(void)
{
	int64_t a[100], b[100], c[100];
	ml_shuffle(a, 100, 7, 0);
	ml_shuffle(b, 100, 7, 0);
	ml_shuffle(c, 100, 7, 1);
	ok(memcmp(a, b, sizeof a) == 0, "same seed and epoch, same permutation");
	ok(memcmp(a, c, sizeof a) != 0, "another epoch, another permutation");
	bool seen[100] = { 0 }, perm = true;
	for (int i = 0; i < 100; i++) {
		perm = perm && a[i] >= 0 && a[i] < 100 && !seen[a[i]];
		if (a[i] >= 0 && a[i] < 100)
			seen[a[i]] = true;
	}
	ok(perm, "a shuffle is a permutation");

	struct ml_err e = { 0 };
	struct ml_dataset *d = mkds(100, 10), *v = NULL;
	ok(ml_dataset_split(d, 0.2, 3, &v, &e) == 0 && d->n == 80 && v->n == 20,
	   "a 0.2 split of 100 samples keeps 80 and holds out 20");
	int64_t sum = 0;
	for (int64_t i = 0; i < d->n; i++)
		sum += ((int64_t *)d->y)[i];
	for (int64_t i = 0; i < v->n; i++)
		sum += ((int64_t *)v->y)[i];
	ok(sum == 450, "a split keeps every sample once (labels sum to 450)");
	ml_dataset_free(v);
	v = NULL;
	ok(ml_dataset_split(d, 1.5, 3, &v, &e) == ML_EINVAL, "a split of 1.5 is refused");
	ml_dataset_free(d);
}

static void
test_check_batch(void)
{
	struct ml_err e = { 0 };
	struct ml_dataset *d = mkds(10, 3);
	struct ml_batch_spec xs = { .dtype = ML_F32, .rank = 3, .dims = { 1, 2, 2 } };
	struct ml_batch_spec ys = { .dtype = ML_I64, .rank = 0 };
	ok(ml_dataset_check(d, &xs, &ys, 3, &e) == 0, "2x2 samples fit a 1x2x2 input");
	ok(ml_dataset_check(d, &xs, &ys, 2, &e) == ML_EINVAL &&
		   strstr(e.msg, "label 2 of sample 2 is out of range for 2 classes") != NULL,
	   "a label out of range is ML_EINVAL naming it");
	struct ml_batch_spec bad = { .dtype = ML_F32, .rank = 1, .dims = { 5 } };
	ok(ml_dataset_check(d, &bad, &ys, 3, &e) == ML_EINVAL && strstr(e.msg, "do not fit") != NULL,
	   "4 values do not fit an input of 5");
	struct ml_batch_spec unk = { .dtype = ML_F32, .rank = 2, .dims = { 1, -1 } };
	ok(ml_dataset_check(d, &unk, &ys, 3, &e) == 0 && unk.dims[1] == 4,
	   "an unknown dim takes what is left");
	int64_t idx[2] = { 3, 1 };
	struct ml_tval x = { 0 }, y = { 0 };
	ok(ml_dataset_batch(d, idx, 2, &xs, &ys, &x, &y, &e) == 0 && x.rank == 4 &&
		   x.dims[0] == 2 && y.dtype == ML_I64 && y.rank == 1,
	   "a batch of 2 is [2,1,2,2] and labels [2]");
	ok(((float *)x.data)[0] == 12.0f / 255.0f && ((float *)x.data)[4] == 4.0f / 255.0f &&
		   ((int64_t *)y.data)[0] == 0 && ((int64_t *)y.data)[1] == 1,
	   "u8 samples scale by 1/255, labels follow their samples");
	struct ml_batch_spec oh = { .dtype = ML_F32, .rank = 1, .dims = { 3 } };
	ok(ml_dataset_check(d, &xs, &oh, 3, &e) == 0 &&
		   ml_dataset_batch(d, idx, 2, &xs, &oh, &x, &y, &e) == 0 &&
		   ((float *)y.data)[0] == 1 && ((float *)y.data)[1] == 0 &&
		   ((float *)y.data)[4] == 1,
	   "float labels of 3 values take one-hot rows");
	ml_tval_clear(&x);
	ml_tval_clear(&y);
	ml_dataset_free(d);
}

/* digest: a sum over the batches of an epoch, position-weighted. */
static double
epoch_digest(struct ml_loader *l, uint64_t epoch, int64_t first, int64_t *nb, int64_t *last)
{
	struct ml_err e = { 0 };
	const struct ml_tval *x, *y;
	double s = 0;
	int64_t k = first;
	*nb = 0;
	ml_loader_start(l, epoch, first, &e);
	while (ml_loader_next(l, &x, &y, &e) > 0) {
		for (int64_t i = 0; i < ml_tval_numel(x); i++)
			s += ((const float *)x->data)[i] * (double)(k * 1000 + i + 1);
		*last = x->dims[0];
		(*nb)++;
		k++;
	}
	return s;
}

static void
test_loader(void)
{
	struct ml_err e = { 0 };
	struct ml_dataset *d = mkds(50, 5);
	struct ml_loader_opts o = { .batch = 8, .shuffle = true, .seed = 11,
				    .x = { .dtype = ML_F32, .rank = 1, .dims = { 4 } },
				    .y = { .dtype = ML_I64, .rank = 0 } };
	struct ml_loader *a = NULL, *b = NULL;
	ok(ml_loader_new(&a, d, &o, &e) == 0 && ml_loader_batches(a) == 7, "50 samples in batches of 8: 7");
	o.prefetch = true;
	ok(ml_loader_new(&b, d, &o, &e) == 0, "a prefetching loader");
	int64_t na, nb, la = 0, lb = 0;
	double da = epoch_digest(a, 2, 0, &na, &la), db = epoch_digest(b, 2, 0, &nb, &lb);
	ok(na == 7 && nb == 7 && la == 2 && lb == 2, "7 batches, the last of 2 samples");
	ok(da == db, "prefetching gives the same batches in the same order");
	double pa = epoch_digest(a, 2, 3, &na, &la), pb = epoch_digest(b, 2, 3, &nb, &lb);
	ok(na == 4 && pa == pb, "starting at batch 3 gives the rest of the epoch");
	double d3 = epoch_digest(b, 3, 0, &nb, &lb);
	ok(d3 != db, "another epoch, another order");
	/* stop in the middle and start again: the thread restarts cleanly */
	const struct ml_tval *x, *y;
	ml_loader_start(b, 2, 0, &e);
	ml_loader_next(b, &x, &y, &e);
	double again = epoch_digest(b, 2, 0, &nb, &lb);
	ok(again == db, "a restarted epoch is the same");
	ml_loader_free(a);
	o.workers = 4;
	ok(ml_loader_new(&a, d, &o, &e) == 0, "a loader with 4 workers");
	double dw = epoch_digest(a, 2, 0, &na, &la), dw3 = epoch_digest(a, 2, 3, &na, &la);
	ok(dw == db && dw3 == pb, "4 workers give the same batches in the same order");
	ml_loader_free(a);
	o.workers = 17;
	ok(ml_loader_new(&a, d, &o, &e) == ML_EINVAL && a == NULL, "17 workers: ML_EINVAL");
	o.workers = 0;
	ml_loader_free(b);
	o.drop_last = true;
	ok(ml_loader_new(&a, d, &o, &e) == 0 && ml_loader_batches(a) == 6, "drop_last: 6 batches");
	ml_loader_free(a);
	ml_dataset_free(d);
}

/*
 * matches: whether out (C x H x W) is in (same shape) cropped at offset
 * (dy, dx) of its zero-padded image, after a mirror when flip, by direct
 * reading of the definition (a different loop from the library's).
 */
static bool
matches(const float *in, const float *out, int c, int h, int w, int dy, int dx, bool flip)
{
	for (int k = 0; k < c; k++)
		for (int y = 0; y < h; y++)
			for (int x = 0; x < w; x++) {
				int sx = flip ? w - 1 - x : x;	/* the flip of the cropped image */
				int py = y + dy, px = sx + dx;
				float want = py < 0 || py >= h || px < 0 || px >= w ? 0.0f :
					     in[(k * h + py) * w + px];
				if (out[(k * h + y) * w + x] != want)
					return false;
			}
	return true;
}

static void
test_augment(void)
{
	struct ml_err e = { 0 };
	struct ml_augment a = { 0 };
	enum { C = 2, H = 5, W = 6, N = 200, P = 2 };
	struct ml_batch_spec xs = { .dtype = ML_F32, .rank = 3, .dims = { C, H, W } };
	ok(ml_augment_parse(&a, "crop=2,flip", &e) == 0 && a.pad == 2 && a.flip, "parse crop=2,flip");
	ok(ml_augment_check(&a, &xs, &e) == 0, "fits 2x5x6 images");
	struct ml_batch_spec flat = { .dtype = ML_F32, .rank = 1, .dims = { 60 } };
	ok(ml_augment_check(&a, &flat, &e) == ML_EINVAL, "refuses flat samples");
	struct ml_tval x = { 0 };
	int64_t dims[4] = { N, C, H, W }, idx[N];
	ml_tval_alloc(&x, ML_F32, 4, dims, &e);
	float in[C * H * W];
	for (int i = 0; i < C * H * W; i++)
		in[i] = (float)(i + 1);
	for (int i = 0; i < N; i++) {
		memcpy((float *)x.data + i * C * H * W, in, sizeof in);
		idx[i] = i;
	}
	ok(ml_augment_apply(&a, &x, idx, 5, 1, &e) == 0, "apply to 200 samples");
	int seen[2 * P + 1][2 * P + 1][2] = { { { 0 } } }, bad = 0;
	for (int i = 0; i < N; i++) {
		const float *o = (const float *)x.data + i * C * H * W;
		int hits = 0;
		for (int dy = -P; dy <= P; dy++)
			for (int dx = -P; dx <= P; dx++)
				for (int f = 0; f < 2; f++)
					if (matches(in, o, C, H, W, dy, dx, f)) {
						seen[dy + P][dx + P][f]++;
						hits++;
					}
		bad += hits != 1;
	}
	ok(bad == 0, "each sample is one crop of the padded image, flipped or not");
	int missing = 0;
	for (int dy = 0; dy <= 2 * P; dy++)
		for (int dx = 0; dx <= 2 * P; dx++)
			missing += seen[dy][dx][0] == 0 && seen[dy][dx][1] == 0;
	ok(missing <= 2, "the 25 offsets all (but at most 2) occur in 200 draws");
	/* the same (seed, epoch, sample) gives the same draw, in any batch position */
	struct ml_tval y = { 0 };
	int64_t d1[4] = { 1, C, H, W }, one = 7;
	ml_tval_alloc(&y, ML_F32, 4, d1, &e);
	memcpy(y.data, in, sizeof in);
	ml_augment_apply(&a, &y, &one, 5, 1, &e);
	ok(memcmp(y.data, (float *)x.data + 7 * C * H * W, sizeof in) == 0,
	   "a sample's draw depends on its index, not its place in the batch");
	memcpy(y.data, in, sizeof in);
	ml_augment_apply(&a, &y, &one, 5, 2, &e);
	memcpy(y.data, in, sizeof in);
	/* normalisation per channel */
	struct ml_augment nm = { 0 };
	ok(ml_normalize_parse(&nm, "1,2/2,4", &e) == 0 && nm.nnorm == 2, "parse 1,2/2,4");
	ok(ml_augment_apply(&nm, &y, &one, 0, 0, &e) == 0 &&
	   ((float *)y.data)[0] == (in[0] - 1) / 2 && ((float *)y.data)[H * W] == (in[H * W] - 2) / 4,
	   "(x - mean[c]) / std[c]");
	ok(ml_normalize_parse(&nm, "1,2/2", &e) == ML_EINVAL, "means and deviations must pair up");
	ok(ml_augment_parse(&nm, "crop=x", &e) == ML_EINVAL, "crop=x is refused");
	ml_tval_clear(&x);
	ml_tval_clear(&y);
	/* decoding: what is not an image, and a PNG signature without an image */
	static const uint8_t junk[] = "GIF89a....", png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
	ok(ml_image_decode(&x, junk, sizeof junk, 0, "junk", &e) == ML_EFORMAT,
	   "a GIF is not a PNG or JPEG image");
	int rc = ml_image_decode(&x, png, sizeof png, 0, "cut.png", &e);
	ok(rc == ML_EFORMAT || rc == ML_ENOTSUP, "a PNG cut after its header is refused");
	ok(ml_image_decode(&x, png, sizeof png, 2, "two", &e) == ML_EINVAL, "2 channels: ML_EINVAL");
}

int
main(void)
{
	test_idx();
	test_csv();
	test_shuffle_split();
	test_check_batch();
	test_loader();
	test_augment();
	printf("1..%d\n", ntest);
	return nfail ? 1 : 0;
}
