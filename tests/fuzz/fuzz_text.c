/*
 * fuzz_text.c: the .mlt text form parser, layer shorthands included. The
 * input is copied with a NUL after it, as ml_read_file leaves it.
 */
#include <string.h>

#include "fuzz.h"

int
fuzz_text(const uint8_t *data, size_t size)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	char *text = ml_malloc(size + 1);

	if (text == NULL)
		return 0;
	if (size > 0)
		memcpy(text, data, size);
	text[size] = '\0';
	int rc = ml_text_decode(&g, text, size, "fuzz.mlt", &e);
	ml_free(text);
	if (rc == 0)
		fuzz_check_graph(g);
	return 0;
}

FUZZ_TARGET(fuzz_text)
