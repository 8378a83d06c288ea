/*
 * dist.h: what the kernels of the dist family (lib/cpu/dist.c) and the
 * graph rewrite (lib/dist/rewrite.c) share with the MPI runtime
 * (lib/cpu/mpi.c): buckets, named by a small integer id per graph.
 */
#ifndef ML_DIST_INTERNAL_H
#define ML_DIST_INTERNAL_H

#include "ml_impl.h"

/* Bucket ids are small: the table of buckets is indexed by them. */
#define ML_DIST_MAX_BUCKETS 65536

/*
 * ml_dist_bucket_start: pack the n arrays in[] (floats) into bucket id's
 * buffer, each scaled by this rank's weight, and hand it to the
 * communication thread (MPI active) or keep it as it is (inactive: the
 * bucket is then complete at once). wire (ML_F32, ML_BF16 or ML_F16) is
 * the type a float32 bucket is packed in and sent as (a float64 bucket
 * ignores it); inactive, the values still make the round trip through it.
 * first counts a step. A bucket still in flight from an earlier, failed
 * run is waited for first. Thread: the session's.
 */
int ml_dist_bucket_start(int64_t id, int n, struct ml_tval *const *in, enum ml_dtype wire,
			 bool first, struct ml_err *e);
/*
 * ml_dist_sum16: inout[i] = round(in[i] + inout[i]) for n values of type t
 * (ML_BF16 or ML_F16), added in float32 and rounded to nearest, ties to
 * even: the reduction of a 16-bit bucket (the MPI user op), exposed for
 * test_dist.
 */
void ml_dist_sum16(enum ml_dtype t, const uint16_t *in, uint16_t *inout, int64_t n);
/*
 * ml_dist_bucket_wait: wait until bucket id is reduced, then unpack it into
 * the n arrays out[] (allocated, with the shapes of the start's inputs in
 * the same order: ML_EINVAL when the counts differ, or when the bucket was
 * never started). The bucket is then free again.
 */
int ml_dist_bucket_wait(int64_t id, int n, struct ml_tval *const *out, struct ml_err *e);

/* ml_dist_reduce_dtype: whether the buckets can hold dtype t (f32, f64, f16, bf16). */
bool ml_dist_reduce_dtype(enum ml_dtype t);

#endif
