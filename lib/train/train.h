/*
 * train.h: what the files of lib/train share and nothing else includes:
 * the label input and the unsharing of the step graph (step.c), which the
 * evaluation graph builds alike, and the accuracy nodes (eval.c), which
 * the step graph adds too.
 */
#ifndef ML_TRAIN_TRAIN_H
#define ML_TRAIN_TRAIN_H

#include "ml.h"

/*
 * ml_train_unshare: every Identity of a stored float tensor into a tensor
 * that is not a graph output becomes a stored tensor of its own with a copy
 * of the data (the node goes): parameters that an ONNX export shares train
 * apart. ML_ENOMEM.
 */
int ml_train_unshare(struct ml_graph *g, struct ml_err *e);

/*
 * ml_train_label: add the graph input "label" that loss (enum ml_loss)
 * compares output tensor out with: int64 class indices shaped like out
 * without its class dim (dim 1) for SCE and NLL, out's dtype and shape for
 * MSE and BCE; symbolic dims are out's. Returns its tensor index, or
 * ML_EINVAL for an output that is not float (or has no class dim where the
 * loss needs one), ML_ENOMEM. The caller checks that no tensor is called
 * "label" already.
 */
int ml_train_label(struct ml_graph *g, int loss, int out, struct ml_err *e);

/*
 * ml_train_hits: append nodes (named PREFIX/OP_k) that count the samples
 * whose output out (a float [N, C, ...]) picks their label: for SCE and NLL
 * ArgMax over the class dim (1) equals the int64 label, position by
 * position, each sample counting the share of its positions that do; for
 * MSE and BCE the largest value of the whole sample is where the label
 * (shaped like out: one-hot rows) has its largest. The first of equal
 * values wins on both sides, as ONNX ArgMax has it. With mask >= 0 (a
 * float [N] tensor of out's dtype) each sample counts times its mask
 * value. The count is a scalar of out's dtype called name; returns its
 * tensor index, or ML_EINVAL for an output of rank below 2, ML_ENOMEM.
 */
int ml_train_hits(struct ml_graph *g, int loss, int out, int label, int mask, const char *prefix,
		  const char *name, struct ml_err *e);

/*
 * ml_train_mark_precision (precision.c): the step graph's f32 products
 * (MatMul, Gemm, Conv, ConvGradInput, ConvGradFilter) get the attribute
 * precision = "bf16" for ML_PREC_BF16, "fp16" for ML_PREC_F16; nothing for
 * ML_PREC_F32; ML_EINVAL for another value, ML_ENOMEM.
 */
int ml_train_mark_precision(struct ml_graph *g, int prec, struct ml_err *e);

/*
 * pipeline_plan.c, for pipeline.c: ml_pipe_is_forward, whether node n is
 * a forward node of a step graph (forward/...); ml_pipe_owner, the
 * forward or loss node whose gradient rule made backward node bi (its
 * name is backward/BASE/OP_K), -1 when none.
 */
bool ml_pipe_is_forward(const struct ml_node *n);
/*
 * ml_pipe_sample_flops: the FLOPs of node ni for one sample (unknown dims
 * taken as 1); ML_PIPE_NODE_COST, what a node costs besides, in FLOPs
 * (about 1 us of launch and bookkeeping at 2 GFLOP/s, over a batch of 64).
 */
int64_t ml_pipe_sample_flops(const struct ml_graph *g, int ni);
#define ML_PIPE_NODE_COST 30.0
int ml_pipe_owner(const struct ml_graph *g, int bi);

#endif
