/*
 * common.c: the setup and the post-read checks every fuzz target shares
 * (see fuzz.h). A check that fails on a graph the library itself accepted
 * and wrote is a bug, so it aborts, which libFuzzer reports as a crash.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"

void
fuzz_setup(void)
{
	ml_set_alloc_cap(FUZZ_ALLOC_CAP);
	ml_set_threads(1);
}

/* bug: report a broken invariant and abort (a crash to libFuzzer). */
static void
bug(const char *what, const struct ml_err *e)
{
	fprintf(stderr, "fuzz: %s: %s\n", what, e->msg);
	abort();
}

void
fuzz_check_graph(struct ml_graph *g)
{
	struct ml_err e = { 0 };
	uint8_t *buf = NULL;
	char *text = NULL;
	size_t len = 0;

	if (ml_graph_toposort(g, &e) < 0 || ml_graph_validate(g, &e) < 0 ||
	    ml_graph_infer(g, &e) < 0) {
		ml_graph_free(g);
		return;
	}
	/* The writers must take any graph that loads; only the cap may stop them. */
	if (ml_mlg_encode(g, &buf, &len, &e) == 0) {
		struct ml_graph *back = NULL;
		struct ml_err e2 = { 0 };
		if (ml_mlg_decode(&back, buf, len, &e2) < 0 && e2.code != ML_ENOMEM)
			bug("a graph file the writer made does not read back", &e2);
		ml_graph_free(back);
		ml_free(buf);
	} else if (e.code != ML_ENOMEM && e.code != ML_ENOTSUP) {
		bug("the graph file writer refused a graph that loaded", &e);
	}
	buf = NULL;
	if (ml_onnx_encode(g, &buf, &len, &e) == 0)
		ml_free(buf);
	if (ml_text_encode(g, &text, &len, &e) == 0)
		ml_free(text);
	ml_graph_free(g);
}
