/*
 * ml_quant.h: quantisation (lib/quant): calibration, int8 QDQ and integer
 * forms, fp16/bf16 conversion. Included by ml.h. Owner: mlquant (issue 8).
 *
 *	struct ml_calib *cal = NULL;
 *	struct ml_quant_opts o = { .form = ML_QFORM_INT, .method = ML_CALIB_ENTROPY };
 *	struct ml_quant_report rep = { 0 };
 *	struct ml_graph *q = NULL;
 *	if (ml_calib_load(&cal, g, "imgs.npy", 100, &err) < 0 ||
 *	    ml_quantize(&q, g, cal, &o, &rep, &err) < 0) ...
 *	ml_quant_report_free(&rep);
 *	ml_calib_free(cal);
 *
 * The integer form (ML_QFORM_INT) replaces Conv, Gemm and MatMul (with a
 * constant weight, and a Relu or Clip after them fused), Add, MaxPool,
 * GlobalAveragePool and Flatten by the internal Q8* ops of
 * lib/ops/quant_q8.c: uint8 channels-last activations between them,
 * quantised once where a float value enters the int8 region and
 * dequantised where one leaves it; weights int8 per output channel in 7
 * bits, packed for the GEMM. The QDQ form keeps every op and puts
 * QuantizeLinear/DequantizeLinear pairs in front of the inputs of those
 * ops and int8 weights behind DequantizeLinear, as ONNX Runtime expects.
 * The dynamic form quantises weights only (int8 + DequantizeLinear).
 * ML_QFORM_BF16 makes the weights of the products (Conv, MatMul, Gemm
 * and the fused forms, which it does not split) bf16 with no Cast: their
 * CPU kernels compute with them (lib/cpu/bf16.c). ML_QFORM_F16 makes them
 * fp16 the same way (the kernels convert them to f32 once per session) and
 * stores the other float constants of rank 2 and up in 16 bits behind a
 * Cast.
 */
#ifndef ML_QUANT_H
#define ML_QUANT_H

struct ml_progress;	/* ml_util.h */

enum ml_quant_form { ML_QFORM_INT = 0, ML_QFORM_QDQ = 1, ML_QFORM_DYNAMIC = 2, ML_QFORM_F16 = 3,
		     ML_QFORM_BF16 = 4 };
enum ml_calib_method { ML_CALIB_MINMAX = 0, ML_CALIB_PERCENTILE = 1, ML_CALIB_ENTROPY = 2 };

/*
 * struct ml_calib: calibration batches, each one array per graph input in
 * the graph's input order, as f32 (or the input's dtype).
 */
struct ml_calib {
	int n_in;
	int n_batches;
	int64_t samples;
	struct ml_tval *b;	/* [n_batches * n_in] */
};

/*
 * ml_calib_load: the calibration data of path for graph g: a .npy file
 * (samples along the first dim, or one sample), a .npz file (one array per
 * input, by input name, or a single array), or a dataset folder or file
 * that ml_data_load reads (IDX, .npy/.npz, CSV: its training samples,
 * u8 scaled to [0, 1]). At most samples samples (0: all) are taken, in
 * batches the input's batch dim allows. ML_EINVAL (and the file's name)
 * for data that does not fit the model. ml_calib_free accepts NULL.
 */
int ml_calib_load(struct ml_calib **out, const struct ml_graph *g, const char *path,
		  int64_t samples, struct ml_err *e);
void ml_calib_free(struct ml_calib *c);

struct ml_quant_opts {
	int form;		/* enum ml_quant_form */
	int method;		/* enum ml_calib_method */
	double percentile;	/* for ML_CALIB_PERCENTILE; 0: 99.99 */
	bool act_signed;	/* activations symmetric int8 (zero point 0) instead of uint8 */
	bool pow2;		/* weights on power-of-two levels (non-uniform) */
	bool reduce_range;	/* integer form: 7-bit weights ([-64, 63]), faster on AVX2 */
	int n_exclude;
	const char *const *exclude;	/* node names (or output names) that stay float */
	double budget;		/* > 0: minimum output SQNR in dB; worst layers go back to float */
	bool measure;		/* fill the report's SQNR and times (runs the calibration data) */
	int verbose;
	/*
	 * NULL, or where the long phases report (ml_util.h): "calibrating" (a
	 * unit per batch run), "measuring" (the report's runs: the batches
	 * through both models, then the node timings) and "budget search" (a
	 * unit per round, total unknown).
	 */
	const struct ml_progress *progress;
	/*
	 * With budget (integer form): the whole-model latency in ms of the
	 * float model f and of the quantised model q, or NULL to measure it
	 * (ml_quant_latency on the first calibration batch). A test injects
	 * a fake here to test the decision without timing.
	 */
	int (*latency)(void *ctx, const struct ml_graph *f, const struct ml_graph *q,
		       const struct ml_calib *cal, double *ms_f, double *ms_q, struct ml_err *e);
	void *latency_ctx;
};

/* One row of the report: one layer (a quantisable node and what is fused into it). */
struct ml_quant_layer {
	char name[128];
	char op[32];
	bool quantized;
	char why[64];		/* why it stays float, "" when quantized */
	double sqnr_db;		/* its output in the quantised model vs float; 0 when not measured */
	int64_t bytes_f32, bytes_q;	/* its weights */
	double us_f32, us_q;	/* median node time, 0 when not measured */
};

struct ml_quant_report {
	int n;
	struct ml_quant_layer *layers;
	double out_sqnr_db;	/* of the first output over the calibration data */
	int64_t bytes_in, bytes_out;	/* constant bytes before and after */
	int rounds;		/* --budget rounds */
	/* --budget: whole-model latencies (ms), and whether int8 lost and *out is the float model */
	double ms_f32, ms_q;
	bool kept_f32;
};
void ml_quant_report_free(struct ml_quant_report *r);

/*
 * ml_quant_latency: the latency in ms of f and of q on the first batch of
 * cal, measured in interleaved rounds (a few runs of f, then of q, seven
 * times; each round's median, then the median of those), so that a change
 * of load on the machine falls on both alike.
 */
int ml_quant_latency(void *ctx, const struct ml_graph *f, const struct ml_graph *q,
		     const struct ml_calib *cal, double *ms_f, double *ms_q, struct ml_err *e);

/*
 * ml_quantize: a quantised copy of g (which it does not change) in *out.
 * cal may be NULL only for the dynamic, f16 and bf16 forms. ML_ENOTSUP for
 * a graph the chosen form cannot handle. With a budget in the integer
 * form, the result is never slower than g: when the quantised model's
 * measured latency (o->latency) is not below g's, *out is a copy of g and
 * rep->kept_f32 says so.
 */
int ml_quantize(struct ml_graph **out, const struct ml_graph *g, const struct ml_calib *cal,
		const struct ml_quant_opts *o, struct ml_quant_report *rep, struct ml_err *e);

/*
 * Quantisation-aware training (lib/quant/qat.c). ml_quant_insert_fakequant
 * puts ml.FakeQuant nodes (straight-through gradient, lib/ops/quant_grad.c)
 * on the weight inputs of Conv, Gemm and MatMul (symmetric int8 per output
 * channel, the scale max |w| / weight_qmax computed from the weights at
 * every step) and, with calibration data, on the activations those ops read
 * (asymmetric uint8, per tensor: the range min/max of the first calibration
 * batch, fixed from then on as constants; without data no activation is
 * fake-quantised). Weights become PARAM so that ml_train_step_graph trains
 * them through the FakeQuant. Inserting into a graph that has FakeQuant
 * nodes already changes nothing for the inputs they cover (idempotent).
 * ml_quantize of a graph with FakeQuant nodes removes them and takes their
 * ranges instead of calibrating those tensors (cal may then be NULL when
 * every tensor it needs has a FakeQuant range).
 */
struct ml_quant_qat_opts {
	const struct ml_calib *cal;	/* first batch: activation ranges; NULL: weights only */
	int weight_qmax;		/* 0: 127 */
};
int ml_quant_insert_fakequant(struct ml_graph *g, const struct ml_quant_qat_opts *o,
			      struct ml_err *e);

#endif
