/*
 * plan.h: the one memory planner of the library (plan.c), used by the
 * executor for each session's arena and by mlopt's plan-memory pass.
 * Internal to lib/.
 */
#ifndef ML_EXEC_PLAN_H
#define ML_EXEC_PLAN_H

#include "ml_impl.h"

/* ML_ARENA_ALIGN: every block's offset and length are multiples of it */
#define ML_ARENA_ALIGN 64

/*
 * struct ml_arena: a plan of g's node outputs in one arena. The caller
 * gives, per tensor, the bytes it needs (bytes[t] < 0: not planned, it
 * goes to the heap) and the node that reads it last (last[t]: n_nodes
 * keeps it to the end, -1 when nothing reads it: it dies with its
 * producer). inplace, when not NULL, may name for node i's output 0 an
 * input tensor it may be written over (the input dies at i and has the
 * output's type and size), or return -1; the planner takes that input's
 * block only when it is live and exactly the output's (aligned) length.
 * Out: off[t] and len[t] per tensor (-1 and 0 when not planned);
 * with room_off/room_len not NULL, per node the largest stretch of the
 * arena free while it runs (the widest gap between live blocks, or the
 * stretch above the last one up to the arena's top); top, the arena's
 * size.
 * root and delta, when not NULL, share blocks (a Concat's inputs placed
 * in its output): root[t] >= 0 puts t delta[t] bytes into the block of
 * root[t] (root[r] == r, delta[r] == 0 for the owner of a block). The
 * block is placed when the first of its tensors is written and released
 * after last[r], which the caller makes the last use of all of them; no
 * tensor of a shared block is written over in place, nor written in
 * place over its input.
 */
struct ml_arena {
	const int64_t *bytes;
	const int *last;
	int (*inplace)(void *arg, int i);
	void *arg;
	const int *root;
	const int64_t *delta;
	int64_t *off, *len;
	int64_t *room_off, *room_len;
	int64_t top;
};

/*
 * ml_arena_plan: walk g's nodes in order, place each planned output in the
 * best-fitting gap between the blocks still live (or over its dying input,
 * per inplace), and release a block after its last reader. ML_ENOMEM.
 */
int ml_arena_plan(const struct ml_graph *g, struct ml_arena *a, struct ml_err *e);

#endif
