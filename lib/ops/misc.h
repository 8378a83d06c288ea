/*
 * misc.h: what the misc family's inference (lib/ops/misc*.c) shares with
 * its kernels (lib/cpu/misc*.c): the parsed Einsum equation and the
 * scalar-input readers of the signal ops.
 */
#ifndef ML_OPS_MISC_H
#define ML_OPS_MISC_H

#include "ml_impl.h"

/*
 * Einsum. Axes 0-51 are the letters in ASCII order (A-Z, then a-z), so the
 * implicit output's alphabetical order is index order; axes 52.. are the
 * dims the ellipsis stands for, right-aligned as numpy broadcasts them.
 */
#define ML_EINSUM_MAXIN 16
#define ML_EINSUM_NLETTER 52
#define ML_EINSUM_MAXAX (ML_EINSUM_NLETTER + ML_MAX_RANK)

struct ml_einsum {
	int n_in;
	int n_ell;			/* dims the ellipsis stands for; -1 when unknown */
	int64_t size[ML_EINSUM_MAXAX];	/* -1: unknown or unused */
	bool used[ML_EINSUM_MAXAX];
	int rank[ML_EINSUM_MAXIN];	/* -1 when an input's rank is unknown */
	int map[ML_EINSUM_MAXIN][ML_MAX_RANK];	/* input dim -> axis */
	int out_rank;			/* -1 when unknown */
	int out[ML_MAX_RANK];
};

/*
 * ml_einsum_parse: parse c's equation against its inputs' shapes into e,
 * checking that every term fits its input's rank and that the sizes of
 * each axis agree (ellipsis dims broadcast). ML_EINVAL on a bad equation.
 */
int ml_einsum_parse(struct ml_opctx *c, struct ml_einsum *e);

/*
 * ml_scalar_i64 / ml_scalar_f64: the value of the one-element input i;
 * *known is false when it has no value yet (static inference).
 */
int ml_scalar_i64(struct ml_opctx *c, int i, int64_t *v, bool *known);
int ml_scalar_f64(struct ml_opctx *c, int i, double *v, bool *known);

/*
 * ml_dft_axis: DFT's axis (attribute, negative from the back) for an input
 * of rank r: one of the signal dims 1 .. r-2.
 */
int ml_dft_axis(struct ml_opctx *c, int rank, int *axis);

/*
 * ml_stft_geom: STFT's frame length, step and frame count, and whether the
 * output is one-sided, from c's inputs (signal [batch, len, 1 or 2],
 * frame_step, window, frame_length); values not known yet are -1.
 */
int ml_stft_geom(struct ml_opctx *c, int64_t *flen, int64_t *step, int64_t *frames, bool *onesided);

/*
 * ml_tfidf_geom: TfIdfVectorizer's output width (max of ngram_indexes + 1),
 * checking the attributes.
 */
int ml_tfidf_width(struct ml_opctx *c, int64_t *width);

#endif
