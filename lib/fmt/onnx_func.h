/*
 * onnx_func.h: what the ONNX encoder and decoder (lib/fmt/onnx.c) share with
 * lib/fmt/onnx_func.c, which writes the internal ops (domain "ml") as
 * ONNX model-local functions and recognises them when a model is read back.
 */
#ifndef ML_FMT_ONNX_FUNC_H
#define ML_FMT_ONNX_FUNC_H

#include "ml_impl.h"
#include "onnx.pb-c.h"
#include "pbcheck.h"

/*
 * struct ml_onnx_funcs: the functions an export has made so far. s is the
 * encoder's scratch list (every struct comes from it), opset the ONNX
 * opset the functions import (the model's own: ONNX Runtime wants them
 * equal). f, and key (each function packed under its op type, for
 * sharing one function between nodes of identical bodies), grow together.
 */
struct ml_onnx_funcs {
	struct ml_pbscratch *s;
	struct ml_err *e;
	int64_t opset;
	Onnx__FunctionProto **f;
	ProtobufCBinaryData *key;
	int n, cap;
	int rc;			/* the failure when one is more specific than ENOMEM */
};

/*
 * ml_onnx_func_call: the function a call of internal node n (of graph g)
 * names as its op type, made (or shared) in fs. NULL on failure: fs->rc
 * holds ML_ENOTSUP, with the message in fs->e, when n has no body of
 * standard ONNX ops (training, distributed and fake-quantisation ops) or
 * needs what the opset cannot express; else allocation failed.
 */
const char *ml_onnx_func_call(struct ml_onnx_funcs *fs, const struct ml_graph *g,
			      const struct ml_node *n);

/*
 * ml_onnx_func_op: the internal op type that function name (of domain
 * "ml") stands for, as ml_onnx_func_call names them (the op type, or the
 * op type, '_' and a variant: "FusedConv_relu_2"); NULL when the name is
 * not one of those. The result points into a static table.
 */
const char *ml_onnx_func_op(const char *name);

#endif
