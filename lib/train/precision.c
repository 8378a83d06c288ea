/*
 * precision.c: the precision of a training step's products (mltrain
 * --precision): which nodes of the step graph multiply in bf16 or fp16.
 * The kernels read the node attribute precision = "bf16" or "fp16" (the
 * CPU's lib/cpu/bf16.c ml_node_bf16, OpenCL's lib/cl/cl_ops.c node_round)
 * rather than a dtype of the tensors, so the weights, the optimizer state
 * and every tensor between nodes stay f32: only the operands of a product
 * are rounded, as the GEMM packs them.
 */
#include <string.h>

#include "cpu/nn.h"
#include "train/train.h"

static const char *const prec_names[] = { "fp32", "bf16", "fp16" };

const char *
ml_precision_name(int prec)
{
	return prec >= 0 && prec < 3 ? prec_names[prec] : NULL;
}

int
ml_precision_from_name(const char *s)
{
	for (int i = 0; s != NULL && i < 3; i++)
		if (strcmp(s, prec_names[i]) == 0)
			return i;
	if (s != NULL && (strcmp(s, "f32") == 0 || strcmp(s, "float32") == 0))
		return ML_PREC_F32;
	if (s != NULL && strcmp(s, "bfloat16") == 0)
		return ML_PREC_BF16;
	return -1;
}

int
ml_train_mark_precision(struct ml_graph *g, int prec, struct ml_err *e)
{
	if (prec == ML_PREC_F32)
		return 0;
	if (prec != ML_PREC_BF16 && prec != ML_PREC_F16)
		return ml_fail(e, ML_EINVAL, "unknown precision %d", prec);
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		switch (n->op) {
		case ML_OP_MATMUL:
		case ML_OP_GEMM:
		case ML_OP_CONV:
		case ML_OP_CONV_GRAD_INPUT:
		case ML_OP_CONV_GRAD_FILTER:
			break;
		default:
			continue;
		}
		/* the f32 products only: f64 steps (the gradient checks) stay exact */
		if (n->n_in < 1 || n->in[0] < 0 || g->tensors[n->in[0]]->dtype != ML_F32)
			continue;
		if (ml_node_set_string(g, i, "precision", prec == ML_PREC_F16 ? "fp16" : "bf16") < 0)
			return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	return 0;
}

const char *
ml_precision_note(int prec)
{
	if (prec != ML_PREC_BF16)
		return NULL;
	switch (ml_bf16_train_path()) {
	case 2:
		return ml_bf16_path() == ML_BF16_AMX ?
			       "bf16 products on AMX tiles (tdpbf16ps; under 16 rows vdpbf16ps)" :
			       "bf16 products on vdpbf16ps (AVX512_BF16)";
	case 1:
		return "bf16 products emulated: f32 kernels on rounded operands (ML_BF16=f32)";
	default:
		return ml_bf16_path() >= ML_BF16_DP ?
			       "bf16 products run as f32: this CPU's vdpbf16ps is no faster than its "
			       "f32 FMAs (measured; ML_BF16=dp uses it)" :
			       "bf16 products run as f32: this CPU has no AVX512_BF16";
	}
}

const char *
ml_precision_note_cl(int prec)
{
	/*
	 * Rounding, not half arithmetic, on every device: cl_khr_fp16's
	 * products would also sum in half, and bf16 has no OpenCL type.
	 */
	if (prec == ML_PREC_F16)
		return "fp16 products on OpenCL: operands rounded to fp16 as they are packed "
		       "(emulated rounding, f32 sums; not CLBlast); ConvGradInput, ConvGradFilter "
		       "and depthwise convolutions stay f32";
	if (prec == ML_PREC_BF16)
		return "bf16 products on OpenCL: operands rounded to bf16 as they are packed "
		       "(emulated rounding, f32 sums; not CLBlast); ConvGradInput, ConvGradFilter "
		       "and depthwise convolutions stay f32";
	return NULL;
}
