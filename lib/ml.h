/*
 * ml.h: the one public header of libml, the library under the ml tools.
 *
 * libml holds a graph IR (tensors, nodes, attributes, shape inference), the
 * file formats (the .mlg graph file, ONNX, the .mlt text form, .npy arrays),
 * one op registry, CPU kernels and an executor that runs a graph from an
 * arena planned by liveness.
 *
 * A short tour: run.c runs a model once on an array bound to its first
 * input and writes its first output (`run net.mlg x.npy y.npy`). It is
 * the whole program; tests/9000-install.bats takes it from this comment,
 * builds it against an installed tree and runs it (README, "Using the
 * library from C", says how to build it).
 *
 *	#include <ml.h>
 *
 *	int
 *	main(int argc, char **argv)
 *	{
 *		struct ml_err err = { 0 };
 *		struct ml_graph *g = NULL;
 *		struct ml_session *s = NULL;
 *		struct ml_tval x = { 0 };
 *		char shape[64];
 *		int rc = 0;
 *
 *		if (argc != 4) {
 *			fprintf(stderr, "usage: run MODEL INPUT.npy OUTPUT.npy\n");
 *			return 2;
 *		}
 *		if (ml_model_load(&g, argv[1], ML_FMT_AUTO, &err) == 0 &&
 *		    (g->n_inputs < 1 || g->n_outputs < 1))
 *			ml_fail(&err, ML_EINVAL, "%s has no input or no output", argv[1]);
 *		if (err.code < 0 ||
 *		    ml_npy_load(&x, argv[2], &err) < 0 ||
 *		    ml_session_new(&s, g, NULL, &err) < 0 ||
 *		    ml_session_set_input(s, ml_graph_t(g, g->inputs[0])->name, &x, &err) < 0 ||
 *		    ml_session_run(s, &err) < 0 ||
 *		    ml_npy_save(ml_session_output(s, 0), argv[3], &err) < 0) {
 *			fprintf(stderr, "run: %s\n", err.msg);
 *			rc = ml_exit_status(err.code);
 *		} else {
 *			printf("%s\n", ml_tval_shape_str(ml_session_output(s, 0), shape,
 *							 sizeof shape));
 *		}
 *		ml_tval_clear(&x);
 *		ml_session_free(s);
 *		ml_graph_free(g);
 *		return rc;
 *	}
 *
 * Conventions: fallible calls return 0 or a negative ML_E* code and fill a
 * caller-owned struct ml_err; *_free accepts NULL; the library never prints
 * and never exits.
 */
#ifndef ML_H
#define ML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ML_VERSION "0.4.0"
#define ML_MAX_RANK 8

/*
 * Error codes. Append only: the values are part of the library's ABI.
 */
enum {
	ML_OK = 0,
	ML_ENOMEM = -1,		/* allocation failed or over the allocation cap */
	ML_EINVAL = -2,		/* invalid argument or input (model, data) */
	ML_EIO = -3,		/* read or write failed */
	ML_EFORMAT = -4,	/* a file is malformed */
	ML_ENOTSUP = -5,	/* unsupported op, dtype or feature */
	ML_ENODEV = -6,		/* no such device */
	ML_ECL = -7,		/* an OpenCL call failed */
	ML_ENONFINITE = -8,	/* a value that must be finite is not (a diverged loss) */
};

/*
 * struct ml_err: details of the last failure, owned by the caller.
 * code is the ML_E* value, msg a one-line message without a trailing
 * newline, cl_status the OpenCL status where an OpenCL call failed.
 */
struct ml_err {
	int code;
	int cl_status;
	char msg[512];
};

/*
 * ml_fail: fill e (which may be NULL) with code and a printf-style message,
 * and return code, so call sites can write `return ml_fail(e, ...)`.
 */
int ml_fail(struct ml_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* ml_err_prefix: put "prefix: " in front of e's message (NULL e is a no-op). */
void ml_err_prefix(struct ml_err *e, const char *prefix);
/* ml_strerror: a static text for an ML_E* code. */
const char *ml_strerror(int code);
/* ml_exit_status: the tool exit status of DESIGN.md for an ML_E* code. */
int ml_exit_status(int code);

#define ML_TRY(x) do { int rc_ = (x); if (rc_ < 0) return rc_; } while (0)

/*
 * Data types. The values are ONNX's TensorProto.DataType values, and are
 * stored in files: never renumber.
 */
enum ml_dtype {
	ML_UNDEF = 0,
	ML_F32 = 1,
	ML_U8 = 2,
	ML_I8 = 3,
	ML_U16 = 4,
	ML_I16 = 5,
	ML_I32 = 6,
	ML_I64 = 7,
	ML_STRING = 8,
	ML_BOOL = 9,
	ML_F16 = 10,
	ML_F64 = 11,
	ML_U32 = 12,
	ML_U64 = 13,
	ML_C64 = 14,
	ML_C128 = 15,
	ML_BF16 = 16,
	ML_DTYPE_MAX = 17
};

/* ml_dtype_size: bytes per element, 0 for an unknown or variable-size type. */
size_t ml_dtype_size(enum ml_dtype t);
/* ml_dtype_name: "f32", "i64", ...; "?" for an unknown value. */
const char *ml_dtype_name(enum ml_dtype t);
/* ml_dtype_from_name: the inverse of ml_dtype_name; ML_UNDEF when unknown. */
enum ml_dtype ml_dtype_from_name(const char *s);
bool ml_dtype_is_float(enum ml_dtype t);
bool ml_dtype_is_int(enum ml_dtype t);	/* signed or unsigned integers, not bool */
float ml_f16_to_f32(uint16_t h);
uint16_t ml_f32_to_f16(float f);
float ml_bf16_to_f32(uint16_t h);
uint16_t ml_f32_to_bf16(float f);
/*
 * ml_convert: convert n elements from src (type st) to dst (type dt).
 * Floats to integers truncate toward zero as C casts do, saturating out of
 * range; anything to bool is `!= 0`. Returns ML_ENOTSUP for strings.
 */
int ml_convert(void *dst, enum ml_dtype dt, const void *src, enum ml_dtype st, int64_t n);
/* ml_get_f64/ml_set_f64: read or write element i of a typed array as a double. */
double ml_get_f64(const void *p, enum ml_dtype t, int64_t i);
void ml_set_f64(void *p, enum ml_dtype t, int64_t i, double v);
int64_t ml_get_i64(const void *p, enum ml_dtype t, int64_t i);

/*
 * struct ml_tval: a concrete array, as kernels and sessions see it: a dtype,
 * a shape and row-major contiguous data. A tval describes memory it may or
 * may not own; `owned` says whether ml_tval_clear frees data.
 * In shape inference, data may be NULL (value unknown) and dims may be -1
 * (size unknown); rank is -1 when even the rank is unknown.
 */
struct ml_tval {
	enum ml_dtype dtype;
	int rank;
	int64_t dims[ML_MAX_RANK];
	void *data;
	bool owned;
};

/* ml_tval_numel: the element count, or -1 when a dim or the rank is unknown. */
int64_t ml_tval_numel(const struct ml_tval *t);
/* ml_tval_nbytes: numel times the element size, or -1. */
int64_t ml_tval_nbytes(const struct ml_tval *t);
/*
 * ml_tval_alloc: set dtype and shape and allocate owned, zeroed data.
 * Checks the size arithmetic and the allocation cap.
 */
int ml_tval_alloc(struct ml_tval *t, enum ml_dtype dt, int rank, const int64_t *dims,
		  struct ml_err *e);
/* ml_tval_clear: free owned data and reset to an empty tval. */
void ml_tval_clear(struct ml_tval *t);
/* ml_tval_shape_str: "f32[1,3,224,224]" into buf; returns buf. */
char *ml_tval_shape_str(const struct ml_tval *t, char *buf, size_t n);

/*
 * Allocation with a cap. All large allocations of the library go through
 * these, so a file cannot make a tool allocate more than the cap
 * (ML_MAX_ALLOC environment variable, or ml_set_alloc_cap; default 16 GiB).
 * Every block is 64-byte aligned.
 */
void *ml_malloc(size_t n);
void *ml_calloc(size_t n, size_t size);
void *ml_realloc(void *p, size_t n);
void ml_free(void *p);
void ml_set_alloc_cap(uint64_t bytes);
uint64_t ml_alloc_cap(void);
/* ml_alloc_cap_hit: whether any allocation so far was refused for the cap (not by the system). */
bool ml_alloc_cap_hit(void);
/* ml_mul_ok: *out = a * b; false on overflow or a negative operand. */
bool ml_mul_ok(int64_t a, int64_t b, int64_t *out);

/*
 * The op registry. lib/ops.def is the one list of ops; this enum comes from
 * it. Files store an op by its name (ONNX op_type and domain), so the order
 * of this enum is free to change.
 */
enum ml_op {
#define X(id, name, domain, family) ML_OP_##id,
#include "ops.def"
#undef X
	ML_OP_COUNT
};

/* ml_op_name: the ONNX op_type of op, e.g. "Conv". */
const char *ml_op_name(enum ml_op op);
/* ml_op_domain: "" for the ONNX default domain, "ml" for internal ops. */
const char *ml_op_domain(enum ml_op op);
/* ml_op_family: the family name (the file of its definition), e.g. "nn". */
const char *ml_op_family(enum ml_op op);
/* ml_op_lookup: the op for an (op_type, domain) pair; ML_OP_NONE when unknown. */
enum ml_op ml_op_lookup(const char *name, const char *domain);

/*
 * Attributes, after ONNX's AttributeProto.
 */
enum ml_attr_type {
	ML_ATTR_UNDEF = 0,
	ML_ATTR_FLOAT = 1,
	ML_ATTR_INT = 2,
	ML_ATTR_STRING = 3,
	ML_ATTR_TENSOR = 4,
	ML_ATTR_GRAPH = 5,
	ML_ATTR_FLOATS = 6,
	ML_ATTR_INTS = 7,
	ML_ATTR_STRINGS = 8,
	ML_ATTR_TENSORS = 9,
	ML_ATTR_GRAPHS = 10,
};

struct ml_graph;
struct ml_tensor;

struct ml_attr {
	char *name;
	enum ml_attr_type type;
	double f;
	int64_t i;
	char *s;		/* STRING: NUL-terminated, s_len bytes */
	size_t s_len;
	int n;			/* element count of FLOATS/INTS/STRINGS/TENSORS/GRAPHS */
	double *floats;
	int64_t *ints;
	char **strings;
	struct ml_tensor **tensors;	/* TENSOR: tensors[0]; struct and data in the graph arena */
	struct ml_graph **graphs;	/* GRAPH: graphs[0]; subgraphs owned by the graph */
};

/*
 * Tensor kinds: how a value of the graph gets its data.
 */
enum ml_tkind {
	ML_TK_ACT = 0,		/* computed by a node */
	ML_TK_INPUT = 1,	/* a graph input, given at run time */
	ML_TK_CONST = 2,	/* constant data stored in the graph */
	ML_TK_PARAM = 3,	/* trainable parameter stored in the graph */
};

/*
 * struct ml_qparam: quantization parameters of a tensor: one scale and zero
 * point per tensor (axis -1) or per channel along axis.
 */
struct ml_qparam {
	enum ml_dtype qtype;	/* ML_I8, ML_U8, ... */
	int axis;
	int n;
	float *scale;
	int32_t *zero;
};

/*
 * struct ml_tensor: a named value of a graph. Shape fields describe what is
 * known statically: rank -1 means unknown, dims[i] -1 an unknown or
 * symbolic size with its name in sym[i]. CONST and PARAM tensors hold their
 * data in `data` (owned by the graph, `nbytes` long, row-major).
 */
struct ml_tensor {
	char *name;
	enum ml_dtype dtype;
	int rank;
	int64_t dims[ML_MAX_RANK];
	char *sym[ML_MAX_RANK];
	enum ml_tkind kind;
	void *data;
	size_t nbytes;
	int producer;		/* index of the node that writes it, or -1 */
	struct ml_qparam *q;	/* NULL when not quantized */
	int device;		/* placement: -1 unset, 0 cpu, 1+ OpenCL device index + 1 */
	int64_t arena_off;	/* offset in the planned arena, -1 when not planned */
	char *doc;
};

/*
 * struct ml_node: one op application. in[] and out[] are tensor indices of
 * the owning graph; an omitted optional input is -1. op_type and domain are
 * kept as read, so an op the registry lacks survives a conversion and is
 * refused only when run (op is then ML_OP_NONE).
 */
struct ml_node {
	char *name;
	enum ml_op op;
	char *op_type;
	char *domain;
	int n_in, n_out;
	int *in, *out;
	int n_attr;
	struct ml_attr *attrs;
	int device;		/* placement, as for tensors */
	double cost_us;		/* profile-derived cost, 0 when unknown */
};

struct ml_kv {
	char *key;
	char *value;
};

/*
 * struct ml_train: the training state a checkpoint keeps in a graph file
 * (lib/ml_train.h says how to write and read one). slots holds optimizer
 * moments and the like, as named tensors of the graph.
 */
struct ml_train {
	uint64_t step;
	uint64_t epoch;
	char *optimizer;
	char *config;		/* free-form text; before run, mltrain kept its state here as JSON */
	uint8_t *rng;
	size_t rng_len;
	int n_slots;
	int *slots;		/* tensor indices */
	struct ml_train_state *run;	/* the run's options and place (ml_train.h); NULL: none */
};

/*
 * struct ml_graph: an arena that owns its tensors, nodes, names and data.
 * One ml_graph_free() releases everything, subgraphs included.
 */
struct ml_graph {
	char *name;
	char *producer;
	int n_tensors, cap_tensors;
	struct ml_tensor **tensors;
	int n_nodes, cap_nodes;
	struct ml_node *nodes;
	int n_inputs, n_outputs;
	int *inputs, *outputs;	/* tensor indices */
	int n_meta;
	struct ml_kv *meta;
	int n_opsets;
	char **opset_domain;
	int64_t *opset_version;
	int64_t ir_version;
	struct ml_train *train;	/* NULL when the graph has no training state */
	int64_t arena_bytes;	/* planned arena size, 0 when not planned */
	struct ml_graph *parent;	/* for subgraphs: the enclosing graph */
	/* private */
	struct ml_arena_blk *arena;
	int *hash;
	int hash_cap;
	uint8_t *blob;		/* tensor data read from a graph file, shared by its tensors */
	size_t blob_len;
};

/*
 * ml_graph_owns_data: whether tensor t's data is a block of its own (freed
 * with the graph or replaced by ml_graph_set_data) rather than a view of
 * the graph file's data blob.
 */
bool ml_graph_owns_data(const struct ml_graph *g, const struct ml_tensor *t);

/* ml_graph_new: an empty graph. */
int ml_graph_new(struct ml_graph **out, struct ml_err *e);
/*
 * ml_graph_clone: a deep copy of g that shares nothing with it (tensor data,
 * training state and subgraphs included; a subgraph's copy has the copy
 * as its parent, the top copy g's parent). ML_ENOMEM.
 */
int ml_graph_clone(struct ml_graph **out, const struct ml_graph *g, struct ml_err *e);
/* ml_graph_free: release g and all it owns; NULL is a no-op. */
void ml_graph_free(struct ml_graph *g);
/* ml_graph_alloc: zeroed memory owned by g's arena (freed with g). NULL on failure. */
void *ml_graph_alloc(struct ml_graph *g, size_t n);
/* ml_graph_strdup: a copy of s (NULL gives NULL) in g's arena. */
char *ml_graph_strdup(struct ml_graph *g, const char *s);
char *ml_graph_strndup(struct ml_graph *g, const char *s, size_t n);
/* ml_graph_find: the index of the tensor called name, or -1. */
int ml_graph_find(const struct ml_graph *g, const char *name);
/*
 * ml_graph_tensor: the index of the tensor called name, created (kind ACT,
 * dtype UNDEF, rank -1) when absent. -1 on allocation failure.
 */
int ml_graph_tensor(struct ml_graph *g, const char *name);
/* ml_graph_t: borrow tensor i (no bounds check beyond ML_ASSERT). */
#define ml_graph_t(g, i) ((g)->tensors[(i)])
/*
 * ml_graph_set_data: make tensor ti a CONST (or PARAM) holding a copy of
 * nbytes of data (data NULL: zeroed), with the given dtype and shape.
 */
int ml_graph_set_data(struct ml_graph *g, int ti, enum ml_tkind kind, enum ml_dtype dt, int rank,
		      const int64_t *dims, const void *data, size_t nbytes, struct ml_err *e);
/*
 * ml_graph_add_node: append a node of op_type/domain with the named inputs
 * (NULL or "" for an omitted optional input) and outputs; tensors are
 * created as needed. Returns the node index or a negative code.
 */
int ml_graph_add_node(struct ml_graph *g, const char *op_type, const char *domain, const char *name,
		      int n_in, const char *const *in, int n_out, const char *const *out,
		      struct ml_err *e);
/* ml_graph_add_input / ml_graph_add_output: append tensor ti to the graph's inputs/outputs. */
int ml_graph_add_input(struct ml_graph *g, int ti, struct ml_err *e);
int ml_graph_add_output(struct ml_graph *g, int ti, struct ml_err *e);
/* ml_graph_set_meta: set (or replace) metadata key to value. */
int ml_graph_set_meta(struct ml_graph *g, const char *key, const char *value, struct ml_err *e);
const char *ml_graph_get_meta(const struct ml_graph *g, const char *key);
/* ml_graph_set_opset: record an opset import (domain "" is ONNX). */
int ml_graph_set_opset(struct ml_graph *g, const char *domain, int64_t version, struct ml_err *e);
/* ml_graph_opset: the opset version for domain, or def when none is recorded. */
int64_t ml_graph_opset(const struct ml_graph *g, const char *domain, int64_t def);

/* Attribute setters: add an attribute to node ni (copies all data into g's arena). */
struct ml_attr *ml_node_add_attr(struct ml_graph *g, int ni, const char *name,
				 enum ml_attr_type type);
int ml_node_set_int(struct ml_graph *g, int ni, const char *name, int64_t v);
int ml_node_set_float(struct ml_graph *g, int ni, const char *name, double v);
int ml_node_set_string(struct ml_graph *g, int ni, const char *name, const char *v);
int ml_node_set_ints(struct ml_graph *g, int ni, const char *name, int n, const int64_t *v);
int ml_node_set_floats(struct ml_graph *g, int ni, const char *name, int n, const double *v);

/* Attribute getters: borrow; return def (or NULL / -1) when the attribute is absent. */
const struct ml_attr *ml_attr_find(const struct ml_node *n, const char *name);
int64_t ml_attr_int(const struct ml_node *n, const char *name, int64_t def);
double ml_attr_float(const struct ml_node *n, const char *name, double def);
const char *ml_attr_str(const struct ml_node *n, const char *name, const char *def);
/* ml_attr_ints: the INTS value in *v and its count, or -1 when absent. */
int ml_attr_ints(const struct ml_node *n, const char *name, const int64_t **v);
/* ml_attr_ints_all: n's INTS attribute name is absent or every value of it is v. */
bool ml_attr_ints_all(const struct ml_node *n, const char *name, int64_t v);
int ml_attr_floats(const struct ml_node *n, const char *name, const double **v);

/*
 * ml_graph_toposort: reorder g->nodes topologically (stable: a valid order
 * is kept, except that nodes without outputs, the in-place updates of
 * training such as ml.Assign, go after all others, in their order) and
 * refresh every tensor's producer. ML_EINVAL on a cycle, a
 * tensor written twice, or a node input that nothing defines.
 */
int ml_graph_toposort(struct ml_graph *g, struct ml_err *e);
/*
 * ml_graph_validate: check structure (indices, arity per the registry,
 * ranks and dims in range, data sizes matching shapes, unique names).
 */
int ml_graph_validate(const struct ml_graph *g, struct ml_err *e);
/*
 * ml_graph_infer: static shape and dtype inference over the whole graph,
 * filling dtype/rank/dims of every activation that can be inferred
 * (unknown sizes stay -1). Fails on an op whose inputs cannot be valid.
 */
int ml_graph_infer(struct ml_graph *g, struct ml_err *e);
/* ml_graph_param_stats: count and bytes of CONST and PARAM tensors. */
void ml_graph_param_stats(const struct ml_graph *g, int64_t *count, int64_t *bytes);
/* ml_graph_tval: describe tensor ti as a tval (data borrowed, may be NULL). */
void ml_graph_tval(const struct ml_graph *g, int ti, struct ml_tval *out);

/*
 * File formats. Model files are detected by content (magic) first, then by
 * extension: .mlg graph files, .onnx models, .mlt text. Path "-" is stdin
 * or stdout.
 */
enum ml_format { ML_FMT_AUTO = 0, ML_FMT_MLG, ML_FMT_ONNX, ML_FMT_MLT };

#define ML_MLG_VERSION 1

/*
 * ml_read_file: read all of path ("-" = stdin) into a malloc'd buffer
 * (NUL-terminated beyond *len). ML_EIO with strerror in the message.
 */
int ml_read_file(const char *path, uint8_t **buf, size_t *len, struct ml_err *e);
/*
 * ml_write_atomic: write buf to path through a temporary file in the same
 * folder and a rename, so readers never see a partial file; "-" writes to
 * stdout. On failure nothing is left behind. A symbolic link is written
 * through (its target is replaced; a dangling link is refused), the file
 * replaced keeps its mode, and the folder is synced after the rename.
 * Temporary files of path that a killed writer left (name path.tmp.XXXXXX,
 * this user's, unlocked, a minute old) are removed first. Thread-safe.
 */
int ml_write_atomic(const char *path, const void *buf, size_t len, struct ml_err *e);
/*
 * ml_tmp_cleanup: remove the temporary files that ml_write_atomic calls are
 * writing at this moment. Async-signal-safe: for a handler of SIGINT,
 * SIGTERM or a timer that ends the process, so that it leaves nothing
 * behind. The interrupted writes then fail (their rename finds no file).
 */
void ml_tmp_cleanup(void);
/*
 * ml_write_check: whether ml_write_atomic could write path now, without
 * writing anything: not a folder, not a dangling symbolic link, a device
 * that can be opened for writing, or a regular file (or none) in a folder
 * that exists and can be written. ML_EIO with the reason, as the write
 * would say it. For tools that write at the end of long work.
 */
int ml_write_check(const char *path, struct ml_err *e);
/*
 * ml_cache_note: record, once per process, why a cache on disk (OpenCL
 * program binaries, measured tuning) could not be written; later calls
 * keep the first note. ml_cache_note_get: that note, or NULL; the tools
 * print it under -v. Thread-safe.
 */
void ml_cache_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *ml_cache_note_get(void);
enum ml_format ml_format_detect(const uint8_t *buf, size_t len, const char *path);
/* ml_format_from_name: "mlg", "onnx", "mlt" (or a path's extension); AUTO when unknown. */
enum ml_format ml_format_from_name(const char *s);

/*
 * Decoders build a new graph in *out (NULL on failure). Encoders return a
 * buffer allocated with ml_malloc in *buf (the caller frees it with
 * ml_free) and its length in *len.
 */
/* The .mlg graph file (lib/fmt/mlg.c). */
int ml_mlg_decode(struct ml_graph **out, const uint8_t *buf, size_t len, struct ml_err *e);
int ml_mlg_encode(const struct ml_graph *g, uint8_t **buf, size_t *len, struct ml_err *e);
/* ONNX (lib/fmt/onnx.c). dir is the folder for external data files (may be NULL). */
int ml_onnx_decode(struct ml_graph **out, const uint8_t *buf, size_t len, const char *dir,
		   struct ml_err *e);
int ml_onnx_encode(const struct ml_graph *g, uint8_t **buf, size_t *len, struct ml_err *e);
/* The .mlt text form (lib/fmt/text.c). */
int ml_text_decode(struct ml_graph **out, const char *text, size_t len, const char *path,
		   struct ml_err *e);
int ml_text_encode(const struct ml_graph *g, char **text, size_t *len, struct ml_err *e);

/*
 * ml_model_load: read path in any model format (fmt AUTO: detected) and
 * check it (toposort, validate, infer). Errors name the file.
 */
int ml_model_load(struct ml_graph **out, const char *path, enum ml_format fmt, struct ml_err *e);
/* ml_model_save: encode g as fmt and write it atomically to path. */
int ml_model_save(const struct ml_graph *g, const char *path, enum ml_format fmt,
		  struct ml_err *e);

/*
 * NumPy arrays (lib/fmt/npy.c). ml_npy_decode reads a .npy image into an
 * owned tval (Fortran order read into C order); ml_npy_encode writes one. ml_npz_decode reads the arrays of
 * an uncompressed or deflated .npz, calling fn for each (name, array).
 */
int ml_npy_decode(struct ml_tval *out, const uint8_t *buf, size_t len, struct ml_err *e);
int ml_npy_load(struct ml_tval *out, const char *path, struct ml_err *e);
int ml_npy_encode(const struct ml_tval *t, uint8_t **buf, size_t *len, struct ml_err *e);
int ml_npy_save(const struct ml_tval *t, const char *path, struct ml_err *e);

/*
 * The thread pool (lib/cpu/pool.c). Kernels split work with
 * ml_parallel_for; BLAS calls run on the calling thread with OpenBLAS's own
 * threads, and ml_set_threads sets both so the two never oversubscribe.
 */
void ml_set_threads(int n);	/* 0: all cores */
int ml_get_threads(void);
/*
 * ml_set_flush_denormals: whether the calling thread and the pool's
 * workers flush subnormal floats to zero (x86 FTZ and DAZ, the FZ bit on
 * AArch64; a no-op elsewhere). Off by default, as IEEE 754 has it;
 * mltrain turns it on (each operation on a subnormal costs a microcode
 * assist of about 100 cycles on x86, and gradients underflow late in
 * training). OpenBLAS's own threads keep their mode.
 */
void ml_set_flush_denormals(bool on);
/* ml_parallel_for: call fn(ctx, begin, end) over [0, n) in chunks of at least grain. */
void ml_parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t b, int64_t e),
		     void *ctx);

/*
 * Sessions (lib/exec/session.c): a graph bound to a device, with inputs
 * set, run in topological order from an arena planned by liveness.
 */
struct ml_session;
struct ml_session_opts {
	const char *device;	/* "cpu" (default), "cl", "cl:N", "auto" */
	int verbose;
	bool profile;		/* record per-node times (ml_session_node_time) */
};
int ml_session_new(struct ml_session **out, struct ml_graph *g, const struct ml_session_opts *o,
		   struct ml_err *e);
void ml_session_free(struct ml_session *s);
/* ml_session_set_input: bind graph input name to a copy of v (checked against its declared type). */
int ml_session_set_input(struct ml_session *s, const char *name, const struct ml_tval *v,
			 struct ml_err *e);
/* ml_session_run: run the graph once on the bound inputs. */
int ml_session_run(struct ml_session *s, struct ml_err *e);
/* ml_session_output: borrow output i after a run (valid until the next run or free). */
const struct ml_tval *ml_session_output(const struct ml_session *s, int i);
/* ml_session_arena_bytes: the planned arena size of the last run; -1 when unplanned. */
int64_t ml_session_arena_bytes(const struct ml_session *s);
/*
 * ml_bf16_note: how this CPU runs the products of bf16 weights (mlquant
 * --dtype bf16), one phrase for -v.
 */
const char *ml_bf16_note(void);
/* ml_session_node_time: seconds node i took in the last run (with opts.profile). */
double ml_session_node_time(const struct ml_session *s, int i);
/*
 * ml_session_node_flops / ml_session_node_bytes: with opts.profile, the
 * FLOPs and the bytes read and written by node i in the last run, from
 * that run's shapes.
 */
int64_t ml_session_node_flops(const struct ml_session *s, int i);
int64_t ml_session_node_bytes(const struct ml_session *s, int i);
/* ml_node_flops: an estimate of the floating-point operations of node ni, from static shapes. */
int64_t ml_node_flops(const struct ml_graph *g, int ni);

/* ml_now: a monotonic clock in seconds. */
double ml_now(void);

/*
 * Profiling (lib/exec/prof.c, prof_out.c, prof_diff.c): the library side of
 * mlprof. A struct ml_prof collects, run after run, what a session made
 * with opts.profile measured: per node its time, its start and its FLOP and
 * byte counts, and per tensor where it lived. From those it writes the
 * reports: a table, CSV, a JSON report (which `mlprof diff` reads back), a
 * Chrome trace-event file, an SVG picture and a cost model. Writers print
 * to a caller-given stream and leave error checks of that stream to the
 * caller; they fail only when memory runs out.
 */

/*
 * struct ml_tensor_mem: where one tensor lived in a session's last run.
 * off is its arena offset and len the bytes the plan reserved (off -1 and
 * len 0: on the heap, or not an activation); bytes is the size of its value
 * in the last profiled run; first is its producer node (-1: an input or a
 * constant) and last its last reader (-1: none; n_nodes: a graph output).
 * shape has dtype and dims of the last profiled run, data NULL.
 */
struct ml_tensor_mem {
	int64_t off, len, bytes;
	int first, last;
	struct ml_tval shape;
};
/* ml_session_node_start: ml_now() when node i began in the last run (with opts.profile). */
double ml_session_node_start(const struct ml_session *s, int i);
/* ml_session_tensor_mem: fill m for tensor t; ML_EINVAL when t is out of range. */
int ml_session_tensor_mem(const struct ml_session *s, int t, struct ml_tensor_mem *m);

struct ml_prof;

/* Row groupings of the reports: one row per node, per op type, per name prefix, per phase. */
enum ml_prof_group { ML_PROF_BY_NODE, ML_PROF_BY_OP, ML_PROF_BY_PREFIX, ML_PROF_BY_PHASE };
/* Sort keys of the table and CSV rows (ml_prof_sort_from_name: -1 when unknown). */
enum ml_prof_sort {
	ML_PROF_SORT_TIME, ML_PROF_SORT_MEDIAN, ML_PROF_SORT_ORDER, ML_PROF_SORT_NAME,
	ML_PROF_SORT_OP, ML_PROF_SORT_FLOPS, ML_PROF_SORT_BYTES, ML_PROF_SORT_GFLOPS,
	ML_PROF_SORT_GBPS
};
int ml_prof_sort_from_name(const char *s);

/* struct ml_prof_opts: how the reports look; zero is a valid default. */
struct ml_prof_opts {
	const char *model;	/* the model path the reports name */
	int threads;
	int64_t warmup;		/* untimed runs made before the profile */
	int sort;		/* enum ml_prof_sort */
	int64_t top;		/* rows of the table and CSV, 0: all */
	int group;		/* enum ml_prof_group */
	int prefix_depth;	/* components of a name for ML_PROF_BY_PREFIX (default 1) */
	bool memory;		/* the table adds the memory plan and tensor lifetimes */
	bool compare;		/* devices side by side (table, JSON), even one */
};

/*
 * ml_prof_new: an empty profile of g on device dev for up to runs timed
 * runs. g must outlive the profile. ml_prof_free accepts NULL.
 */
int ml_prof_new(struct ml_prof **out, const struct ml_graph *g, const char *dev, int64_t runs,
		struct ml_err *e);
void ml_prof_free(struct ml_prof *p);
/*
 * ml_prof_record: add the last run of s (a session of the profile's graph
 * made with opts.profile) that began at t0 (ml_now()) and took wall seconds.
 * ML_EINVAL when the profile already holds its runs.
 */
int ml_prof_record(struct ml_prof *p, const struct ml_session *s, double t0, double wall,
		   struct ml_err *e);
/* ml_prof_runs: the runs recorded; ml_prof_wall_median / ml_prof_nodes_median: seconds per run. */
int64_t ml_prof_runs(const struct ml_prof *p);
double ml_prof_wall_median(struct ml_prof *p);
double ml_prof_nodes_median(struct ml_prof *p);
/* ml_prof_has_phases: whether any node of the graph is marked with a training phase. */
bool ml_prof_has_phases(struct ml_prof *p);

/*
 * The writers. ps[0..n-1] are profiles of the same graph on different
 * devices: the table and the JSON report show them side by side when n > 1;
 * the trace gives each its own lanes. The others use ps[0] alone.
 */
int ml_prof_write_table(struct ml_prof *const *ps, int n, const struct ml_prof_opts *o, FILE *fp,
			struct ml_err *e);
int ml_prof_write_csv(struct ml_prof *p, const struct ml_prof_opts *o, FILE *fp, struct ml_err *e);
int ml_prof_write_json(struct ml_prof *const *ps, int n, const struct ml_prof_opts *o, FILE *fp,
		       struct ml_err *e);
int ml_prof_write_trace(struct ml_prof *const *ps, int n, const struct ml_prof_opts *o, FILE *fp,
			struct ml_err *e);
int ml_prof_write_svg(struct ml_prof *p, const struct ml_prof_opts *o, FILE *fp, struct ml_err *e);
/*
 * ml_prof_write_costmodel: the cost model of --calibrate, as JSON: per
 * device and op type the measured nanoseconds per FLOP, per byte and per
 * node, with the sums they come from.
 */
int ml_prof_write_costmodel(struct ml_prof *const *ps, int n, const struct ml_prof_opts *o,
			    FILE *fp, struct ml_err *e);

/*
 * ml_prof_diff: compare two JSON reports of ml_prof_write_json, a (the
 * baseline) and b, node by node and in total, with a 95% confidence
 * interval of each change (a bootstrap of the medians from the samples, or
 * Welch's t on the means where a report has no samples). Writes a table,
 * or JSON with as_json, to fp; *regressed is set when the lower end of the
 * total's interval is above threshold (a fraction: 0.05 is 5%).
 * ML_EFORMAT for a file that is not such a report, ML_EINVAL when one
 * cannot be opened, and ML_EINVAL naming both when the reports' model
 * signatures (inputs and outputs as declared) differ, unless force: then
 * the comparison goes ahead, its table and JSON say so, and e->msg holds
 * that one-line note with e->code 0.
 */
struct ml_prof_diff_opts {
	double threshold;
	int64_t top;		/* node rows, 0: all */
	bool as_json;
	bool force;		/* compare reports of different models */
};
int ml_prof_diff(const char *a, const char *b, const struct ml_prof_diff_opts *o, FILE *fp,
		 bool *regressed, struct ml_err *e);

/*
 * Each layer that came later declares what it offers in its own header;
 * they are part of this one (a tool includes ml.h only).
 */
#include "ml_device.h"
#include "ml_train.h"
#include "ml_data.h"
#include "ml_opt.h"
#include "ml_quant.h"
#include "ml_dist.h"
#include "ml_util.h"

#endif
