/*
 * strip.c: the strip-training pass: a model that a checkpoint or an older
 * mltrain left with its training state (optimizer moments, the step
 * counter, the RNG state, the run's options) loses it, and with it half
 * its size; what runs is not changed. lib/train's ml_train_strip does the
 * work; a training-step graph, whose nodes read that state, is left alone.
 */
#include "opt/opt.h"

int
ml_pass_strip_training(struct opt *o)
{
	struct ml_graph *g = o->g;
	bool had = g->train != NULL;
	if (ml_train_is_step(g))
		return 0;	/* a step graph: the state is what it updates */
	int n = ml_train_strip(g, o->e);
	if (n < 0)
		return n;
	if (had)
		mlopt_note(o, "training state");
	for (int i = 0; i < n; i++)
		mlopt_note(o, "tensors of it");
	return o->changes;
}
