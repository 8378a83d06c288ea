/*
 * ml_opt.h: graph passes (lib/opt): the pass manager and its passes.
 * Included by ml.h. Owner: mlopt (issue 7).
 */
#ifndef ML_OPT_H
#define ML_OPT_H

#endif
