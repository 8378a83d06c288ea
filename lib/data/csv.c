/*
 * csv.c: datasets from CSV text, one sample a line: a label column and
 * feature columns of numbers (f32). Checked strictly: every row has the
 * header's or the first row's field count, every field is a whole number
 * token, and errors name the line.
 */
#include <errno.h>

#include "ml_impl.h"

/* field: parse one number from [p, end); false when it is not exactly one. */
static bool
field(const char *p, const char *end, double *v)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
		end--;
	if (p == end || end - p > 63)
		return false;
	char tmp[64];
	memcpy(tmp, p, (size_t)(end - p));
	tmp[end - p] = '\0';
	char *q;
	errno = 0;
	*v = strtod(tmp, &q);
	return *q == '\0' && errno != ERANGE && isfinite(*v);
}

/* count_fields: fields of the line [p, end). */
static int64_t
count_fields(const char *p, const char *end)
{
	int64_t n = 1;
	for (; p < end; p++)
		n += *p == ',';
	return n;
}

int
ml_csv_decode(struct ml_dataset **out, const char *text, size_t len, int label_col,
	      const char *name, struct ml_err *e)
{
	const char *p = text, *end = text + len;
	int64_t ncol = -1, rows = 0, cap = 0, line = 0;
	float *x = NULL;
	double *y = NULL;
	bool ints = true;
	int rc = 0;

	*out = NULL;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		line++;
		const char *s = p;
		p = nl ? nl + 1 : end;
		bool blank = true;
		for (const char *c = s; c < le; c++)
			if (*c != ' ' && *c != '\t' && *c != '\r')
				blank = false;
		if (blank)
			continue;
		if (memchr(s, '\0', (size_t)(le - s)) != NULL) {
			rc = ml_fail(e, ML_EFORMAT, "line %lld: a NUL byte (not a text file?)",
				     (long long)line);
			goto fail;
		}
		int64_t nf = count_fields(s, le);
		if (nf < 2) {
			rc = ml_fail(e, ML_EFORMAT, "line %lld: one field; a label and features expected",
				     (long long)line);
			goto fail;
		}
		if (ncol >= 0 && nf != ncol) {
			rc = ml_fail(e, ML_EFORMAT, "line %lld: %lld fields, not %lld",
				     (long long)line, (long long)nf, (long long)ncol);
			goto fail;
		}
		int64_t lc = label_col < 0 ? nf - 1 : label_col;
		if (lc >= nf) {
			rc = ml_fail(e, ML_EINVAL, "line %lld: no column %lld for the label",
				     (long long)line, (long long)lc + 1);
			goto fail;
		}
		if (rows == cap) {
			int64_t nc = cap ? cap * 2 : 1024, nb;
			if (!ml_mul_ok(nc, (nf - 1) * (int64_t)sizeof(float), &nb)) {
				rc = ml_fail(e, ML_ENOMEM, "CSV too large");
				goto fail;
			}
			float *nx = ml_realloc(x, (size_t)nb);
			if (nx == NULL) {
				rc = ml_fail(e, ML_ENOMEM, "CSV too large for the allocation cap");
				goto fail;
			}
			x = nx;
			double *ny = ml_realloc(y, (size_t)nc * sizeof *y);
			if (ny == NULL) {
				rc = ml_fail(e, ML_ENOMEM, "out of memory");
				goto fail;
			}
			y = ny;
			cap = nc;
		}
		const char *f = s;
		bool header = false;
		for (int64_t k = 0, j = 0; k < nf; k++) {
			const char *fe = memchr(f, ',', (size_t)(le - f));
			if (fe == NULL)
				fe = le;
			double v;
			if (!field(f, fe, &v)) {
				if (ncol < 0 && rows == 0) {
					header = true;	/* a first line of names */
					break;
				}
				rc = ml_fail(e, ML_EFORMAT, "line %lld, field %lld: not a number",
					     (long long)line, (long long)k + 1);
				goto fail;
			}
			if (k == lc) {
				y[rows] = v;
				ints = ints && v == floor(v) && fabs(v) < 9e15;
			} else {
				x[rows * (nf - 1) + j++] = (float)v;
			}
			f = fe + 1;
		}
		ncol = nf;
		if (!header)
			rows++;
	}
	if (rows == 0) {
		rc = ml_fail(e, ML_EFORMAT, "no samples in the CSV text");
		goto fail;
	}
	struct ml_tval tx = { 0 }, ty = { 0 };
	int64_t xd[2] = { rows, ncol - 1 }, yd[1] = { rows };
	tx = (struct ml_tval){ .dtype = ML_F32, .rank = 2, .dims = { xd[0], xd[1] }, .data = x,
			       .owned = true };
	if ((rc = ml_tval_alloc(&ty, ints ? ML_I64 : ML_F32, 1, yd, e)) < 0) {
		ml_tval_clear(&tx);
		ml_free(y);
		return rc;
	}
	for (int64_t i = 0; i < rows; i++)
		ml_set_f64(ty.data, ty.dtype, i, y[i]);
	ml_free(y);
	return ml_dataset_from_arrays(out, &tx, &ty, name, e);
fail:
	ml_free(x);
	ml_free(y);
	return rc;
}
