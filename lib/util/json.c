/*
 * json.c: JSON output, the one string escaper of the library and the tools
 * (ml_util.h).
 */
#include <math.h>

#include "ml.h"

void
ml_json_str(FILE *fp, const char *s)
{
	fputc('"', fp);
	for (const unsigned char *p = (const unsigned char *)(s != NULL ? s : ""); *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", fp); break;
		case '\\': fputs("\\\\", fp); break;
		case '\n': fputs("\\n", fp); break;
		case '\t': fputs("\\t", fp); break;
		case '\r': fputs("\\r", fp); break;
		default:
			if (*p < 0x20)
				fprintf(fp, "\\u%04x", *p);
			else
				fputc(*p, fp);
		}
	}
	fputc('"', fp);
}

void
ml_json_num(FILE *fp, double x)
{
	if (isfinite(x))
		fprintf(fp, "%.9g", x);
	else
		fputs("null", fp);
}
