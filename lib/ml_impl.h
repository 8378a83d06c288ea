/*
 * ml_impl.h: the library's internal API: op definitions, kernel tables,
 * and the helpers kernels share. Tools never include this; lib/ files do.
 */
#ifndef ML_IMPL_H
#define ML_IMPL_H

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ml.h"
#include "act.def"

/* ML_ASSERT: internal invariants only, never input checks (git BUG()). */
#define ML_ASSERT(x) assert(x)
#define ML_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ML_MAX(a, b) ((a) > (b) ? (a) : (b))

/*
 * struct ml_opctx: what inference and kernels see of one node.
 * in[i] is NULL for an omitted optional input (and for i >= n_in).
 *
 * In inference (ml_opdef.infer), in[i]->data is non-NULL only when the
 * value is known (constants, small computed shapes), dims may be -1, and
 * rank may be -1. infer fills dtype, rank and dims of every out[i], using
 * -1 for what it cannot know, and checks attributes and input types:
 * ML_EINVAL for inputs that cannot be valid, ML_ENOTSUP for a valid but
 * unsupported case. infer must never write out[i]->data.
 *
 * In a kernel (ml_cpu_kernel.run) every present input has data, and each
 * out[i] has been allocated by the executor with the shape infer gave it
 * (from the planned arena: the memory is NOT zeroed, the kernel writes
 * every output element);
 * where infer left a dim at -1 (data-dependent shapes, e.g. NonZero) the
 * output is unallocated (data NULL) and the kernel calls ml_tval_alloc.
 */
struct ml_opctx {
	const struct ml_graph *g;
	const struct ml_node *node;
	int n_in, n_out;
	struct ml_tval **in;
	struct ml_tval **out;
	int64_t opset;		/* the graph's ONNX opset, for version-dependent semantics */
	struct ml_err *err;
	struct ml_session *sess;	/* the running session; NULL in static inference */
	const struct ml_body_ops *body;	/* how to run a subgraph; NULL with sess */
	/*
	 * The node's cache: a block (ml_malloc) a CPU kernel may keep across
	 * runs, derived from constant inputs (a weight converted or packed
	 * once); the session frees it. NULL: no cache, derive per call.
	 */
	void **cache;
};

/* IN(c, i): input i or NULL when omitted or beyond n_in. */
#define ML_IN(c, i) ((i) < (c)->n_in ? (c)->in[(i)] : NULL)

/*
 * Op flags (struct ml_opdef.flags).
 * ML_OPF_INPLACE: pointwise; output 0 has input 0's shape and dtype where
 *   the shapes agree, and the CPU kernel reads each element of input 0
 *   before it writes the same element of output 0, so the executor may
 *   give output 0 input 0's memory when input 0 dies there.
 * ML_OPF_SIDE_EFFECT: the op writes a tensor of the graph in place (a
 *   parameter or an optimizer slot, named by its inputs) instead of, or as
 *   well as, producing outputs: executors keep it in order and count the
 *   written copy as the current one.
 * ML_OPF_RANDOM: the outputs are drawn from a random generator, so static
 *   inference never computes them ahead from known inputs.
 * ML_OPF_SHAPE_ONLY: the kernels read their inputs' dtype and shape, never
 *   their data, so known shapes make the outputs known.
 * ML_OPF_ALIAS: output 0 holds input 0's bytes unchanged, in another shape
 *   (a reshape; for an op with an alias rule, only where the rule says so
 *   for input 0's shape: ml_node_alias), and the CPU kernel copies nothing
 *   when the two share memory, so the executor may give output 0 input
 *   0's memory when input 0 dies there.
 * ML_OPF_HALF_WEIGHT: a product whose weight (input 1) may be bf16 or fp16
 *   against an f32 input 0 (mlquant --dtype bf16 and fp16 make them): the
 *   CPU kernels take it (lib/cpu/bf16.c), OpenCL widens an fp16 one, the
 *   ONNX export casts it to float in front of the product.
 */
enum {
	ML_OPF_INPLACE = 1u << 0,
	ML_OPF_SIDE_EFFECT = 1u << 1,
	ML_OPF_RANDOM = 1u << 2,
	ML_OPF_SHAPE_ONLY = 1u << 3,
	ML_OPF_ALIAS = 1u << 4,
	ML_OPF_HALF_WEIGHT = 1u << 5,
};

/*
 * ml_qclass: what mlquant's integer and QDQ forms (lib/quant/quant.c) may
 * make of an op: the layer it can become, or an activation it can fuse
 * into the layer before it. Each class has its own preconditions there.
 */
enum ml_qclass {
	ML_QC_NONE,		/* left in float */
	ML_QC_CONV,		/* a 2-D convolution (grouped: depthwise) over weight input 1 */
	ML_QC_GEMM,		/* a product with a constant weight input 1 (Gemm, MatMul) */
	ML_QC_ADD,		/* a residual add of two activations (integer form) */
	ML_QC_MAXPOOL,		/* a 2-D max pool (integer form) */
	ML_QC_GAP,		/* a global average pool (integer form) */
	ML_QC_FLATTEN,		/* [N, C, 1, 1] to [N, C] (integer form) */
	ML_QC_ACT,		/* an activation fused into the layer before (Relu, Clip) */
};

/* ML_HOST_REST: a host_in mask where every input after the first is read on the host. */
#define ML_HOST_REST (~1u)

/*
 * struct ml_opdef: an op's descriptor: arity, shape inference, cost, and
 * the properties the passes and executors read instead of switching on
 * ops. max_in/max_out -1 means variadic. Fields after flops default to 0
 * (none). An op's gradient rule (training) is in its family's
 * lib/ops/FAMILY_grad.c table, for the families that families.def marks
 * with grad 1 (see lib/train/grad.h); its activation or unary-function
 * code, where it has one, is its row of lib/act.def.
 */
struct ml_opdef {
	enum ml_op op;
	int min_in, max_in;
	int min_out, max_out;
	int (*infer)(struct ml_opctx *c);
	/* optional: FLOP estimate from the (static or concrete) shapes in c */
	int64_t (*flops)(const struct ml_opctx *c);
	unsigned flags;		/* ML_OPF_* */
	/* bit j: input j is a weight, bias or scale of a layer (trainable when constant) */
	unsigned weights;
	/*
	 * bit j: input j is a parameter of the op that kernels read on the host
	 * (a shape, axes, bounds), never the data a device computes on
	 */
	unsigned host_in;
	enum ml_qclass qclass;
	/*
	 * optional, with ML_OPF_ALIAS: whether output 0 is input 0's bytes
	 * unchanged when input 0 has x's shape (NULL: always)
	 */
	bool (*alias)(const struct ml_node *n, const struct ml_tval *x);
};

/* struct ml_cpu_kernel: a CPU kernel of an op. */
struct ml_cpu_kernel {
	enum ml_op op;
	int (*run)(struct ml_opctx *c);
};

/* Each family's tables, terminated by a row with op ML_OP_NONE. */
#define F(name, grad) extern const struct ml_opdef ml_opdefs_##name[]; \
	extern const struct ml_cpu_kernel ml_cpu_##name[];
#include "families.def"
#undef F

/* ml_opdef_get: the definition of op, or NULL when no family defines it. */
const struct ml_opdef *ml_opdef_get(enum ml_op op);
/*
 * The descriptor's properties of op, 0 (ML_QC_NONE) for an op without a
 * definition: ml_op_flags (ML_OPF_*), ml_op_weights and ml_op_host_inputs
 * (input bit masks), ml_op_qclass. Thread-safe (the registry is built once).
 */
unsigned ml_op_flags(enum ml_op op);
unsigned ml_op_weights(enum ml_op op);
unsigned ml_op_host_inputs(enum ml_op op);
enum ml_qclass ml_op_qclass(enum ml_op op);
/*
 * ml_node_alias: whether node n's output 0 is its input 0's bytes
 * unchanged when input 0 has x's shape (ML_OPF_ALIAS and the op's alias
 * rule), so that the two may share memory.
 */
bool ml_node_alias(const struct ml_node *n, const struct ml_tval *x);
/*
 * ml_op_unary: the ML_UN_* code (lib/act.def) of the unary function op
 * computes, -1 when op is none of them.
 */
int ml_op_unary(enum ml_op op);
/*
 * ml_infer_values: inference over g given vals[] (one per tensor, preset
 * for inputs and constants: dtype, shape, and data where known). Fills
 * vals[] of every node output with dtype and shape, and with data (owned)
 * where all inputs are known and the result is small, by running the CPU
 * kernel (shape arithmetic). The caller clears vals[] afterwards.
 */
int ml_infer_values(const struct ml_graph *g, struct ml_tval *vals, struct ml_err *e);
/*
 * ml_infer_values_range: the same over nodes [from, to) only, for a caller
 * that looks at (or changes) the graph between one node and the next.
 */
int ml_infer_values_range(const struct ml_graph *g, struct ml_tval *vals, int from, int to,
			  struct ml_err *e);
/*
 * ml_cpu_scratch_lend: lend the calling thread's kernels [base, base + len),
 * memory the session's plan leaves free while one node runs, for their
 * scratch (ml_cpu_scratch serves a request from it before the heap).
 * base NULL ends the loan. lib/cpu/nn.c.
 */
void ml_cpu_scratch_lend(void *base, size_t len);
/* ml_cpu_kernel_get: the CPU kernel of op, or NULL. */
int (*ml_cpu_kernel_get(enum ml_op op))(struct ml_opctx *c);
/*
 * ml_node_has_body: whether n holds subgraphs (GRAPH or GRAPHS attributes:
 * If, Loop, Scan), which read enclosing values by name (lib/graph.c).
 */
bool ml_node_has_body(const struct ml_node *n);
/*
 * ml_node_prep: the block of bytes a CPU kernel keeps in its node's
 * session cache (ml_opctx.cache) for what it derives once per session
 * rather than per run (attributes decoded and checked, say, with the input
 * shapes they were checked for): zeroed when made, the same block on every
 * later call. NULL without a cache (static inference, a kernel called
 * outside a session) or out of memory: the kernel then derives per call.
 * The block is the node's only cache: a kernel that also keeps weights
 * there (lib/cpu/bf16.c) must not use it. The session frees it.
 */
void *ml_node_prep(struct ml_opctx *c, size_t bytes);
/* ml_node_ctx: fill c for node n of g over the given tval arrays. */
int ml_node_ctx(struct ml_opctx *c, const struct ml_graph *g, const struct ml_node *n,
		struct ml_tval **in, struct ml_tval **out, struct ml_err *e);
/*
 * ml_node_infer: run n's shape inference over in/out (out dtype and rank
 * are reset first). ML_ENOTSUP when the registry has no definition.
 */
int ml_node_infer(const struct ml_graph *g, const struct ml_node *n, struct ml_tval **in,
		  struct ml_tval **out, struct ml_err *e);

/*
 * Inference helpers (lib/ops/common.c).
 */
/* ml_infer_same: out[0] takes in[0]'s dtype and shape. */
int ml_infer_same(struct ml_opctx *c);
/*
 * ml_broadcast_shape: numpy broadcasting of n shapes into out (rank, dims).
 * Unknown dims (-1) stay -1 unless another operand fixes them.
 */
int ml_broadcast_shape(int n, const struct ml_tval *const *ts, struct ml_tval *out,
		       struct ml_err *e);
/* ml_set_shape: out gets dt, rank and dims. */
void ml_set_shape(struct ml_tval *out, enum ml_dtype dt, int rank, const int64_t *dims);
/* ml_norm_axis: axis in [-rank, rank) mapped to [0, rank); ML_EINVAL when out of range. */
int ml_norm_axis(struct ml_opctx *c, int64_t axis, int rank, int *out);
/*
 * ml_matmul_shape: numpy matmul's output shape of a and b (batch dims
 * broadcast, 1-D operands promoted and dropped) into o with dtype dt.
 */
int ml_matmul_shape(struct ml_opctx *c, const struct ml_tval *a, const struct ml_tval *b,
		    enum ml_dtype dt, struct ml_tval *o);
/* ml_opfail: ml_fail with "NODE (OP): " in front of the message. */
int ml_opfail(struct ml_opctx *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* ml_need_float: fail unless t has a float dtype the CPU kernels support (f32, f64, f16). */
int ml_check_dtype(struct ml_opctx *c, const struct ml_tval *t, const enum ml_dtype *ok, int n);

/*
 * Broadcasting iteration for kernels: ml_bcast_strides gives, for an input
 * of shape (rank, dims) broadcast to the output shape, element strides per
 * output dim (0 where broadcast).
 */
void ml_bcast_strides(const struct ml_tval *in, const struct ml_tval *out, int64_t *strides);

/*
 * ml_read_fd: read fd to its end into a new buffer (*buf, *len bytes, a
 * NUL after them; the caller frees it), leaving `prefix` bytes free at its
 * start for bytes the caller already read (counted in *len). shown names
 * the file in errors, which are ml_read_file's (lib/util/file.c).
 */
int ml_read_fd(int fd, const char *shown, size_t prefix, uint8_t **buf, size_t *len,
	       struct ml_err *e);

/*
 * ml_mlg_read_fd: decode a graph file from fd, streaming, given the first
 * head_len (>= 16) bytes already read into head (lib/fmt/mlg.c).
 */
int ml_mlg_read_fd(struct ml_graph **out, int fd, const uint8_t *head, size_t head_len,
		   struct ml_err *e);

/*
 * Subgraphs (control flow). The kernels of If, Loop and Scan run their
 * bodies through c->body, which the executor sets beside c->sess, so
 * lib/cpu does not link the session (the layers of lib/ point one way).
 * open makes a run of body (a GRAPH attribute of the node) whose names not
 * defined inside resolve to values of the running session parent (and
 * its parents) at each run. bind binds input i of the body to v,
 * borrowing v's data until the next run, with no check against the
 * declared type (ONNX bodies often declare loose shapes). run runs it;
 * output borrows output i until the next run; graph borrows the body;
 * close frees the run (NULL is a no-op). Errors as the session's.
 */
struct ml_body_ops {
	int (*open)(struct ml_session *parent, struct ml_graph *body, void **run,
		    struct ml_err *e);
	int (*bind)(void *run, int i, const struct ml_tval *v, struct ml_err *e);
	int (*run)(void *run, struct ml_err *e);
	const struct ml_tval *(*output)(void *run, int i);
	const struct ml_graph *(*graph)(void *run);
	void (*close)(void *run);
};
/* ml_exec_body_ops: the executor's (lib/exec/session.c) */
extern const struct ml_body_ops ml_exec_body_ops;

/* ml_cblas_threads: set OpenBLAS's thread count (lib/cpu/blas.c). */
void ml_cblas_set_threads(int n);
/* ml_blas_name: "openblas" where OpenBLAS loads (at the first call), else "portable". */
const char *ml_blas_name(void);

#endif
