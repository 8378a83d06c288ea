/*
 * ml_data.h: training data (lib/data): IDX (gzipped or not), .npy/.npz
 * pairs, CSV; seeded shuffling, batching, a background prefetch thread.
 * Included by ml.h. Owner: mltrain (issue 5).
 */
#ifndef ML_DATA_H
#define ML_DATA_H

#endif
