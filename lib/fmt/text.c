/*
 * text.c: TEMPORARY stub of the .mlt text form, written by the ONNX helper
 * so the tools link until the text helper's lib/fmt/text.c replaces this
 * file. Both calls refuse with ML_ENOTSUP.
 */
#include "ml_impl.h"

int
ml_text_decode(struct ml_graph **out, const char *text, size_t len, const char *path,
	       struct ml_err *e)
{
	(void)text;
	(void)len;
	(void)path;
	*out = NULL;
	return ml_fail(e, ML_ENOTSUP, "the .mlt text form is not implemented yet");
}

int
ml_text_encode(const struct ml_graph *g, char **text, size_t *len, struct ml_err *e)
{
	(void)g;
	*text = NULL;
	*len = 0;
	return ml_fail(e, ML_ENOTSUP, "the .mlt text form is not implemented yet");
}
