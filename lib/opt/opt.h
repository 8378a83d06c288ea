/*
 * opt.h: what the pass files of lib/opt share: the pass context with use
 * counts, and the rewriting helpers (replace a value, rewrite a node in
 * place, make constants, record what a pass did).
 */
#ifndef ML_OPT_INTERNAL_H
#define ML_OPT_INTERNAL_H

#include "ml_impl.h"

/*
 * struct opt: one pass over one graph. Nodes are removed by marking them
 * dead; mlopt_commit() then compacts nodes and tensors, toposorts and infers.
 * nuse[t] counts the live node inputs reading t; pinned[t] says t must keep
 * its name (a graph input or output, or read by a subgraph); cons[t] is a
 * live consumer of t (the only one when nuse[t] == 1).
 */
struct opt {
	struct ml_graph *g;
	struct ml_err *e;
	bool *dead;
	int *nuse, *cons;
	bool *pinned;
	int cap_t, cap_n;
	int changes;
	int nnotes;
	struct { char what[48]; int n; } notes[8];
};

/* mlopt_index: recompute dead[]'s companions (uses, consumers, producers, pins). */
int mlopt_index(struct opt *o);
/* mlopt_commit: drop dead nodes and unused tensors, toposort, infer. */
int mlopt_commit(struct opt *o);
/* mlopt_note: count one change described by what ("Conv+Relu"). */
void mlopt_note(struct opt *o, const char *what);
/* mlopt_kill: mark node ni dead. */
void mlopt_kill(struct opt *o, int ni);

/* mlopt_sole: the only live consumer of t, -1 when t has another or is pinned. */
int mlopt_sole(const struct opt *o, int t);
/* mlopt_prod: the live producer of t, or -1. */
int mlopt_prod(const struct opt *o, int t);
/*
 * mlopt_replace: make every reader of from read to instead. When from is
 * pinned, to's producer is made to write from itself (and to's readers
 * read from); false when that is not possible (nothing changes then).
 */
bool mlopt_replace(struct opt *o, int from, int to);

/* mlopt_const: the data of t when it is a constant of dtype dt (ML_UNDEF: any), else NULL. */
const void *mlopt_const(const struct opt *o, int t, enum ml_dtype dt);
/* mlopt_scalar: t is a constant float holding one value (any shape of numel 1), in *v. */
bool mlopt_scalar(const struct opt *o, int t, double *v);
/* mlopt_new_const: a new constant tensor named after base; its index or negative. */
int mlopt_new_const(struct opt *o, const char *base, enum ml_dtype dt, int rank, const int64_t *dims,
		  const void *data);
/* mlopt_unique: a tensor or node name "BASE" or "BASE_N" no tensor uses yet, in the arena. */
char *mlopt_unique(struct opt *o, const char *base);

/*
 * mlopt_rewrite: turn node ni into op (type, domain "ml" or "") with these
 * inputs and outputs (tensor indices, -1 omitted) and no attributes but
 * those copied from node src (-1: none) minus fused_from; srcs[0..nsrc)
 * become its fused_from list (their own lists flattened in).
 */
int mlopt_rewrite(struct opt *o, int ni, const char *op_type, const char *domain, int n_in,
		const int *in, int n_out, const int *out, int src, const int *srcs, int nsrc);

/* mlopt_same_attrs: whether two nodes have equal attributes (subgraph attrs never compare equal). */
bool mlopt_same_attrs(const struct ml_node *a, const struct ml_node *b);
/* mlopt_is_f32: t is f32 with a fully known shape; mlopt_f32: f32 of known rank (dims may be symbolic). */
bool mlopt_is_f32(const struct opt *o, int t);
bool mlopt_f32(const struct opt *o, int t);

/* The passes: return the number of changes or a negative code. */
int ml_pass_fold_constants(struct opt *o);
int ml_pass_fold_shapes(struct opt *o);
int ml_pass_eliminate(struct opt *o);
int ml_pass_dce(struct opt *o);
int ml_pass_strip_training(struct opt *o);
int ml_pass_cse(struct opt *o);
int ml_pass_fold_bn(struct opt *o);
int ml_pass_matmul_gemm(struct opt *o);
int ml_pass_fuse_gelu(struct opt *o);
int ml_pass_fuse_silu(struct opt *o);
int ml_pass_fuse_layernorm(struct opt *o);
int ml_pass_fold_scale(struct opt *o);
int ml_pass_fuse_attention(struct opt *o);
int ml_pass_fuse_bias_act(struct opt *o);
int ml_pass_layout(struct opt *o);
int ml_pass_fuse_expand(struct opt *o);
int ml_pass_fuse_elementwise(struct opt *o);
int ml_pass_pack_weights(struct opt *o);
int ml_pass_plan_memory(struct opt *o);

#endif
