/*
 * ml_train.h: training (lib/train): reverse-mode autodiff as a graph to
 * graph transformation, losses, optimizers, training-step graphs.
 * Included by ml.h. Owner: autodiff (issue 5).
 */
#ifndef ML_TRAIN_H
#define ML_TRAIN_H

#endif
