/*
 * ml_data.h: training data (lib/data): IDX files (gzipped or not), .npy and
 * .npz arrays, CSV; datasets in memory, validation splits, and a loader that
 * shuffles with a seed, cuts batches shaped for a model and prepares them
 * on a background thread. Included by ml.h. Owner: mltrain (issue 5).
 *
 *	struct ml_dataset *train = NULL, *test = NULL;
 *	struct ml_loader *ld = NULL;
 *	ml_data_load(&train, &test, "/usr/share/datasets/fashion-mnist", &err);
 *	struct ml_loader_opts lo = { .batch = 64, .shuffle = true, .seed = 0,
 *				     .prefetch = true, .x = xspec, .y = yspec };
 *	ml_loader_new(&ld, train, &lo, &err);
 *	ml_loader_start(ld, epoch, 0, &err);
 *	const struct ml_tval *x, *y;
 *	while ((rc = ml_loader_next(ld, &x, &y, &err)) > 0)
 *		... bind x and y, run a step ...
 *
 * Readers of files (IDX, .npz, CSV) treat their input as untrusted: every
 * size is checked against the bytes present, with overflow-safe arithmetic
 * and the library's allocation cap; a damaged file is ML_EFORMAT.
 */
#ifndef ML_DATA_H
#define ML_DATA_H

/*
 * ml_gunzip: when buf holds a gzip (or zlib) stream, inflate it whole
 * into a new ml_malloc'd buffer (*out, *out_len; the caller ml_frees it)
 * and return 1; return 0 and leave *out NULL when buf is not compressed.
 * Concatenated gzip members are read in turn; the trailer's CRC and size
 * are checked. ML_EFORMAT for a damaged stream, ML_ENOMEM past the cap.
 */
int ml_gunzip(const uint8_t *buf, size_t len, uint8_t **out, size_t *out_len, struct ml_err *e);

/*
 * ml_idx_decode: read an IDX file (LeCun's MNIST format: two zero bytes,
 * a type code, a dim count, big-endian u32 dims, big-endian data) from
 * buf, gzipped or not, into an owned tval of the native dtype (u8, i8,
 * i16, i32, f32, f64). The data size must equal what the header says.
 */
int ml_idx_decode(struct ml_tval *out, const uint8_t *buf, size_t len, struct ml_err *e);
/* ml_idx_load: ml_idx_decode of a file; errors name the file. */
int ml_idx_load(struct ml_tval *out, const char *path, struct ml_err *e);
/* ml_idx_encode: write t (u8, i8, i16, i32, f32, f64; rank 1..8) as an IDX image. */
int ml_idx_encode(const struct ml_tval *t, uint8_t **buf, size_t *len, struct ml_err *e);

/*
 * ml_npz_decode: the arrays of a .npz archive (a zip of .npy files, stored
 * or deflated, zip64 fields allowed), in archive order: fn gets each name
 * without its ".npy" and an owned array it may keep (by moving it out and
 * clearing *arr) or leave to be freed. A negative return of fn stops the
 * walk and is returned.
 */
int ml_npz_decode(const uint8_t *buf, size_t len,
		  int (*fn)(void *ctx, const char *name, struct ml_tval *arr, struct ml_err *e),
		  void *ctx, struct ml_err *e);

/*
 * struct ml_dataset: labelled samples in memory. Sample i is feat values
 * of x (xtype ML_U8, or ML_F32) at x + i * feat, shaped dims[0..rank-1];
 * its label is ylen values of y (ytype ML_I64 class indices with ylen 1,
 * or ML_F32 targets). U8 samples are scaled to [0, 1] when batched.
 */
struct ml_dataset {
	int64_t n;
	int rank;
	int64_t dims[ML_MAX_RANK];
	int64_t feat;
	enum ml_dtype xtype;
	void *x;
	enum ml_dtype ytype;
	int64_t ylen;
	void *y;
	char name[256];		/* the file(s) it came from, for messages */
};

void ml_dataset_free(struct ml_dataset *d);	/* NULL is a no-op */

/*
 * ml_dataset_from_arrays: a dataset of samples x (first dim: samples) and
 * labels y (as many rows); takes over both arrays' data (they are cleared,
 * also on failure). Integer labels become ML_I64, float ones ML_F32; a
 * u8 x stays u8, any other numeric x becomes f32. name is for messages.
 */
int ml_dataset_from_arrays(struct ml_dataset **out, struct ml_tval *x, struct ml_tval *y,
			   const char *name, struct ml_err *e);

/*
 * ml_csv_decode: a dataset from CSV text: one sample a line, the label in
 * column label_col (0: the first; -1: the last), the other columns its
 * features (f32); a first line whose fields are not all numbers is a
 * header and skipped. Blank lines are skipped; ragged rows, empty fields
 * or junk are ML_EFORMAT naming the line.
 */
int ml_csv_decode(struct ml_dataset **out, const char *text, size_t len, int label_col,
		  const char *name, struct ml_err *e);

/*
 * ml_data_load: the training set, and the test set when one is there, of
 * path: a folder holding either train-images-idx?-ubyte[.gz] and
 * train-labels-idx1-ubyte[.gz] (with t10k- or test- for the test set),
 * x_train.npy and y_train.npy (x_test.npy, y_test.npy), train.npz and
 * test.npz (arrays x and y), train.csv and test.csv, folders train/ and
 * test/ (or val/) of class folders of images (ml_image_folder_load; a
 * folder holding only class folders is a training set), or CIFAR-10's
 * data_batch_1.bin ... and test_batch.bin (also in cifar-10-batches-bin/);
 * or one file:
 * FILE.npz (x_train, y_train, x_test, y_test, or x and y) or FILE.csv.
 * *test is NULL when there is no test set (test may be NULL to skip it).
 * ML_EINVAL when nothing is found, ML_EFORMAT for damaged files, and for
 * samples and labels whose counts differ.
 */
int ml_data_load(struct ml_dataset **train, struct ml_dataset **test, const char *path,
		 struct ml_err *e);

/*
 * ml_image_decode: a PNG or JPEG image in buf (told apart by its first
 * bytes) as an owned u8 tval [C, H, W], C = channels (1: grey, 3: RGB;
 * 0: as stored, grey or RGB; alpha is dropped). Decoded by Debian's
 * libpng16 and libjpeg-turbo, loaded with dlopen at first use: without
 * them ML_ENOTSUP says which package is missing. name is for messages;
 * a damaged image is ML_EFORMAT with the decoder's reason.
 */
int ml_image_decode(struct ml_tval *out, const uint8_t *buf, size_t len, int channels,
		    const char *name, struct ml_err *e);

/*
 * ml_image_folder_load: a dataset of the PNG/JPEG files (.png, .jpg,
 * .jpeg) in the class folders of dir (torchvision's ImageFolder layout:
 * dir/CLASS/FILE; classes in sorted order are labels 0, 1, ...), decoded
 * on `workers` threads into u8 [C, H, W] samples. The first file (in
 * sorted order) sets the channels and the size; the others are converted
 * to its channels and must have its size (ML_EFORMAT names the first that
 * does not). ML_EINVAL for a folder without class folders or a class
 * folder without images.
 */
int ml_image_folder_load(struct ml_dataset **out, const char *dir, int workers, struct ml_err *e);

/*
 * ml_cifar_load: CIFAR-10's binary batches (data_batch_N.bin,
 * test_batch.bin: records of a label byte and 3x32x32 bytes, planes R, G,
 * B) as one dataset of u8 [3, 32, 32] samples and I64 labels.
 */
int ml_cifar_load(struct ml_dataset **out, const char *const *paths, int npaths,
		  struct ml_err *e);

/*
 * ml_dataset_split: move a seeded random fraction frac (0 < frac < 1) of
 * d's samples into a new dataset *val, keeping the rest in d in their
 * order. At least one sample stays on each side; ML_EINVAL otherwise.
 */
int ml_dataset_split(struct ml_dataset *d, double frac, uint64_t seed, struct ml_dataset **val,
		     struct ml_err *e);

/*
 * struct ml_batch_spec: what a model's input or label takes, per sample:
 * dtype and the dims after the batch dim. A dim of -1 takes what the
 * data has (only where the rest fixes the count). For labels, an integer
 * dtype takes class indices; a float one with one more value per sample
 * than the data has (K values for class labels) takes one-hot rows.
 */
struct ml_batch_spec {
	enum ml_dtype dtype;
	int rank;
	int64_t dims[ML_MAX_RANK];
};

/*
 * ml_dataset_check: whether d fits the specs: each sample's values reshape
 * to x's dims (-1 dims resolved in x), labels fit y, and class labels lie
 * in [0, classes) when classes > 0. ML_EINVAL with a message naming the
 * first sample that does not fit.
 */
int ml_dataset_check(const struct ml_dataset *d, struct ml_batch_spec *x, struct ml_batch_spec *y,
		     int64_t classes, struct ml_err *e);

/*
 * ml_dataset_batch: fill x and y (owned tvals, reallocated as needed) with
 * the n samples idx[0..n-1] of d, shaped [n, spec dims]. Specs as checked.
 */
int ml_dataset_batch(const struct ml_dataset *d, const int64_t *idx, int64_t n,
		     const struct ml_batch_spec *xs, const struct ml_batch_spec *ys,
		     struct ml_tval *x, struct ml_tval *y, struct ml_err *e);

/*
 * ml_shuffle: a seeded permutation of [0, n) into perm: the same for the
 * same (seed, epoch) on every machine (xoshiro256** from splitmix64,
 * Fisher-Yates with unbiased bounded draws).
 */
void ml_shuffle(int64_t *perm, int64_t n, uint64_t seed, uint64_t epoch);

/*
 * struct ml_augment: what the loader does to each image sample ([C, H, W]
 * f32, after u8 scaling to [0, 1]): a random crop of the image padded
 * with pad zeros on each side (pad 0: none), then a horizontal flip with
 * probability 1/2 (flip), then (v - mean[c]) / std[c] for each channel
 * (nnorm values: 0 none, 1 for all channels, or one per channel). The
 * random draws of a sample depend only on (seed, epoch, its index in the
 * dataset). Evaluation data take the normalisation only (pad 0, no flip).
 */
struct ml_augment {
	int pad;
	bool flip;
	int nnorm;
	float mean[4], std[4];
};
/* ml_augment_parse: "crop=P", "flip" or both, comma-separated, into a. */
int ml_augment_parse(struct ml_augment *a, const char *spec, struct ml_err *e);
/* ml_normalize_parse: "M[,M,M]/S[,S,S]" (as many means as deviations, each S > 0) into a. */
int ml_normalize_parse(struct ml_augment *a, const char *spec, struct ml_err *e);
/* ml_augment_check: whether a fits samples of spec x (f32 [C, H, W], pad < H and W, nnorm 1 or C). */
int ml_augment_check(const struct ml_augment *a, const struct ml_batch_spec *x, struct ml_err *e);
/* ml_augment_active: whether a (NULL allowed) changes anything. */
bool ml_augment_active(const struct ml_augment *a);
/*
 * ml_augment_apply: a applied in place to each sample of the batch x
 * ([N, C, H, W] f32), whose samples are idx[0..N-1] of the dataset.
 */
int ml_augment_apply(const struct ml_augment *a, struct ml_tval *x, const int64_t *idx,
		     uint64_t seed, uint64_t epoch, struct ml_err *e);

/*
 * The loader: batches of a dataset in order or shuffled per epoch, built
 * ahead on a background thread with prefetch. Epoch e's order depends only
 * on (seed, e), so a run can start at any batch of any epoch and see what
 * an uninterrupted one saw.
 */
struct ml_loader;
struct ml_loader_opts {
	int64_t batch;		/* samples per batch (> 0) */
	bool shuffle;
	bool drop_last;		/* drop a last partial batch */
	bool prefetch;		/* build batches on a background thread */
	int workers;		/* with prefetch: threads building batches (0 or 1: one) */
	const struct ml_augment *augment;	/* NULL: none (borrowed, outlives the loader) */
	uint64_t seed;
	struct ml_batch_spec x, y;	/* as ml_dataset_check resolved them */
};
/* ml_loader_new: a loader over d (borrowed: it must outlive the loader). */
int ml_loader_new(struct ml_loader **out, const struct ml_dataset *d,
		  const struct ml_loader_opts *o, struct ml_err *e);
void ml_loader_free(struct ml_loader *l);	/* stops the thread; NULL is a no-op */
/* ml_loader_batches: batches per epoch. */
int64_t ml_loader_batches(const struct ml_loader *l);
/* ml_loader_start: begin epoch at batch first (0 <= first <= batches). */
int ml_loader_start(struct ml_loader *l, uint64_t epoch, int64_t first, struct ml_err *e);
/*
 * ml_loader_next: the next batch of the epoch in *x and *y (borrowed until
 * the next call, ml_loader_start or ml_loader_free): 1, or 0 at the end
 * of the epoch, or a negative code.
 */
int ml_loader_next(struct ml_loader *l, const struct ml_tval **x, const struct ml_tval **y,
		   struct ml_err *e);

#endif
