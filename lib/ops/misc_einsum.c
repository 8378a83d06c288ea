/*
 * misc_einsum.c: Einsum's equation parser, shared by its shape inference
 * (lib/ops/misc.c) and its kernel (lib/cpu/misc_einsum.c): terms of
 * letters with at most one ellipsis each, an optional explicit output
 * after "->", and numpy's implicit output otherwise (the broadcast dims,
 * then the letters used once, in ASCII order).
 */
#include "ops/misc.h"

struct term {
	int n;			/* letters */
	int ax[ML_MAX_RANK];
	int ell;		/* position of the ellipsis among the letters, -1: none */
};

static int
letter_axis(char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return 26 + ch - 'a';
	return -1;
}

/* parse_term: s[0..len) into t, ignoring spaces. */
static int
parse_term(struct ml_opctx *c, const char *s, size_t len, struct term *t)
{
	t->n = 0;
	t->ell = -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == ' ' || s[i] == '\t')
			continue;
		if (s[i] == '.') {
			if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.' || t->ell >= 0)
				return ml_opfail(c, ML_EINVAL, "bad ellipsis in the equation");
			t->ell = t->n;
			i += 2;
			continue;
		}
		int a = letter_axis(s[i]);
		if (a < 0)
			return ml_opfail(c, ML_EINVAL, "bad character '%c' in the equation", s[i]);
		if (t->n >= ML_MAX_RANK)
			return ml_opfail(c, ML_EINVAL, "a term of the equation is too long");
		t->ax[t->n++] = a;
	}
	return 0;
}

/* set_size: axis a meets a dim of size d; 1 broadcasts, -1 is unknown. */
static int
set_size(struct ml_opctx *c, struct ml_einsum *e, bool *unk, int a, int64_t d)
{
	e->used[a] = true;
	if (d < 0) {
		unk[a] = true;
		return 0;
	}
	if (d == 1)
		return 0;
	if (e->size[a] > 1 && e->size[a] != d)
		return ml_opfail(c, ML_EINVAL, "dims of size %lld and %lld meet on one index",
				 (long long)e->size[a], (long long)d);
	e->size[a] = d;
	return 0;
}

int
ml_einsum_parse(struct ml_opctx *c, struct ml_einsum *e)
{
	const char *eq = ml_attr_str(c->node, "equation", NULL);
	struct term terms[ML_EINSUM_MAXIN], out;
	bool unk[ML_EINSUM_MAXAX] = { false }, any_ell = false, ell_known = true;
	int count[ML_EINSUM_NLETTER] = { 0 };

	memset(e, 0, sizeof *e);
	if (eq == NULL)
		return ml_opfail(c, ML_EINVAL, "the equation attribute is required");
	if (c->n_in < 1 || c->n_in > ML_EINSUM_MAXIN)
		return ml_opfail(c, ML_EINVAL, "takes 1 to %d inputs, not %d", ML_EINSUM_MAXIN,
				 c->n_in);
	e->n_in = c->n_in;
	const char *arrow = strstr(eq, "->");
	size_t lhs = arrow != NULL ? (size_t)(arrow - eq) : strlen(eq);
	if (arrow != NULL && strstr(arrow + 2, "->") != NULL)
		return ml_opfail(c, ML_EINVAL, "the equation has two '->'");
	/* the input terms, split at commas */
	int nt = 0;
	size_t st = 0;
	for (size_t i = 0; i <= lhs; i++) {
		if (i < lhs && eq[i] != ',')
			continue;
		if (nt >= c->n_in)
			return ml_opfail(c, ML_EINVAL, "the equation has more terms than the %d inputs",
					 c->n_in);
		ML_TRY(parse_term(c, eq + st, i - st, &terms[nt]));
		nt++;
		st = i + 1;
	}
	if (nt != c->n_in)
		return ml_opfail(c, ML_EINVAL, "the equation has %d terms for %d inputs", nt, c->n_in);
	/* the ellipsis dims: the most any input has, right-aligned */
	e->n_ell = 0;
	for (int i = 0; i < nt; i++) {
		const struct ml_tval *x = ML_IN(c, i);
		if (x == NULL)
			return ml_opfail(c, ML_EINVAL, "input %d is required", i);
		e->rank[i] = x->rank;
		if (terms[i].ell >= 0)
			any_ell = true;
		if (x->rank < 0) {
			if (terms[i].ell >= 0)
				ell_known = false;
			continue;
		}
		if (terms[i].ell < 0 ? x->rank != terms[i].n : x->rank < terms[i].n)
			return ml_opfail(c, ML_EINVAL, "term %d has %d indices for an input of rank %d",
					 i, terms[i].n, x->rank);
		if (terms[i].ell >= 0)
			e->n_ell = ML_MAX(e->n_ell, x->rank - terms[i].n);
	}
	if (!ell_known)
		e->n_ell = -1;
	for (int a = 0; a < ML_EINSUM_MAXAX; a++)
		e->size[a] = -1;
	/* map every dim of every input of known rank to its axis */
	for (int i = 0; i < nt; i++) {
		const struct ml_tval *x = c->in[i];
		const struct term *t = &terms[i];
		for (int k = 0; k < t->n; k++)
			count[t->ax[k]]++;
		if (x->rank < 0) {
			for (int k = 0; k < t->n; k++)
				e->used[t->ax[k]] = true;
			continue;
		}
		int ne = t->ell >= 0 ? x->rank - t->n : 0, d = 0;
		for (int k = 0; k <= t->n; k++) {
			if (k == t->ell)
				for (int q = 0; q < ne; q++, d++)
					e->map[i][d] = e->n_ell >= 0 ?
						ML_EINSUM_NLETTER + e->n_ell - ne + q : -1;
			if (k < t->n)
				e->map[i][d++] = t->ax[k];
		}
		for (d = 0; d < x->rank; d++)
			if (e->map[i][d] >= 0)
				ML_TRY(set_size(c, e, unk, e->map[i][d], x->dims[d]));
	}
	for (int a = 0; a < ML_EINSUM_MAXAX; a++)
		if (e->used[a] && e->size[a] < 0 && !unk[a])
			e->size[a] = 1;		/* only dims of size 1 met it */
		else if (unk[a] && e->size[a] <= 1)
			e->size[a] = -1;
	/* the output */
	e->out_rank = 0;
	if (arrow != NULL) {
		ML_TRY(parse_term(c, arrow + 2, strlen(arrow + 2), &out));
		if (out.ell >= 0 && !any_ell)
			return ml_opfail(c, ML_EINVAL, "the output has an ellipsis the inputs lack");
		bool seen[ML_EINSUM_NLETTER] = { false };
		for (int k = 0; k < out.n; k++) {
			int a = out.ax[k];
			if (!e->used[a])
				return ml_opfail(c, ML_EINVAL, "output index '%c' is in no input",
						 a < 26 ? 'A' + a : 'a' + a - 26);
			if (seen[out.ax[k]])
				return ml_opfail(c, ML_EINVAL, "output index repeated");
			seen[out.ax[k]] = true;
		}
	} else {
		out.n = 0;
		out.ell = any_ell ? 0 : -1;
		for (int a = 0; a < ML_EINSUM_NLETTER; a++)
			if (count[a] == 1)
				out.ax[out.n++] = a;
	}
	if (out.ell >= 0 && e->n_ell < 0) {
		e->out_rank = -1;
		return 0;
	}
	int r = 0;
	for (int k = 0; k <= out.n; k++) {
		if (k == out.ell)
			for (int q = 0; q < e->n_ell; q++) {
				if (r >= ML_MAX_RANK)
					return ml_opfail(c, ML_EINVAL, "the output has too many dims");
				e->out[r++] = ML_EINSUM_NLETTER + q;
			}
		if (k < out.n) {
			if (r >= ML_MAX_RANK)
				return ml_opfail(c, ML_EINVAL, "the output has too many dims");
			e->out[r++] = out.ax[k];
		}
	}
	e->out_rank = r;
	return 0;
}
