/*
 * prof_out.c: the profile for people: the text table (one row per node or
 * group, devices side by side, the memory plan), CSV for spreadsheets and
 * an SVG picture (a timeline of the median run and a bar chart of time).
 */
#include "prof.h"

/* fit: s cut to w characters, the middle replaced by "..", into buf. */
static const char *
fit(const char *s, int w, char *buf, size_t n)
{
	size_t len = strlen(s);
	if (w < 5 || len <= (size_t)w || (size_t)w >= n) {
		snprintf(buf, n, "%s", s);
		return buf;
	}
	size_t head = ((size_t)w - 2) / 2, tail = (size_t)w - 2 - head;
	snprintf(buf, n, "%.*s..%s", (int)head, s, s + len - tail);
	return buf;
}

static double
rate(int64_t count, double s)
{
	return s > 0 ? (double)count / s / 1e9 : 0;
}

static void
put_rate(FILE *fp, int64_t count, double s)
{
	if (count <= 0 || s <= 0)
		fprintf(fp, " %8s", "-");
	else
		fprintf(fp, " %8.2f", rate(count, s));
}

static void
memory_table(FILE *fp, const struct ml_prof *p)
{
	const struct ml_graph *g = p->g;
	struct prof_memsum m;
	char b[6][32], nb[32];
	int wn = 6, ws = 5;

	mlprof_memory(p, &m);
	fprintf(fp, "\nmemory: peak %s = arena %s (planned) + heap %s + inputs %s; weights %s\n",
		mlprof_fmt_bytes(m.peak, b[0], 32), mlprof_fmt_bytes(m.arena, b[1], 32),
		mlprof_fmt_bytes(m.heap_peak, b[2], 32), mlprof_fmt_bytes(m.inputs, b[3], 32),
		mlprof_fmt_bytes(m.weights, b[4], 32));
	if (m.peak_node >= 0)
		fprintf(fp, "live activations peak at node %d '%s': %s (the arena is %.0f%% of that)\n",
			m.peak_node, mlprof_node_name(g, m.peak_node, nb, sizeof nb),
			mlprof_fmt_bytes(m.peak_live, b[5], 32),
			m.peak_live > 0 ? 100.0 * (double)m.arena / (double)m.peak_live : 0);
	for (int t = 0; t < g->n_tensors; t++) {
		char sh[128];
		if (g->tensors[t]->kind != ML_TK_ACT || p->mem[t].first < 0)
			continue;
		wn = ML_MAX(wn, (int)strlen(g->tensors[t]->name));
		if (p->mem[t].shape.rank >= 0)
			ws = ML_MAX(ws, (int)strlen(ml_tval_shape_str(&p->mem[t].shape, sh, sizeof sh)));
	}
	wn = ML_MIN(wn, 36);
	ws = ML_MIN(ws, 28);
	fprintf(fp, "\n%-*s  %-*s  %10s  %-5s  %12s  %s\n", wn, "tensor", ws, "shape", "bytes", "where",
		"offset", "lifetime (nodes)");
	for (int t = 0; t < g->n_tensors; t++) {
		const struct ml_tensor_mem *tm = &p->mem[t];
		char nm[64], sh[128], shf[64], off[32], life[48];
		if (g->tensors[t]->kind != ML_TK_ACT || tm->first < 0)
			continue;
		if (tm->off >= 0)
			snprintf(off, sizeof off, "%lld", (long long)tm->off);
		else
			snprintf(off, sizeof off, "-");
		if (tm->last >= p->n)
			snprintf(life, sizeof life, "%d..end (output)", tm->first);
		else if (tm->last < 0)
			snprintf(life, sizeof life, "%d (unread)", tm->first);
		else
			snprintf(life, sizeof life, "%d..%d", tm->first, tm->last);
		fprintf(fp, "%-*s  %-*s  %10lld  %-5s  %12s  %s\n", wn,
			fit(g->tensors[t]->name, wn, nm, sizeof nm), ws,
			fit(tm->shape.rank >= 0 ? ml_tval_shape_str(&tm->shape, sh, sizeof sh) : "?", ws,
			    shf, sizeof shf),
			(long long)tm->bytes, tm->off >= 0 ? "arena" : "heap", off, life);
	}
}

static const char *
group_title(int group)
{
	switch (group) {
	case ML_PROF_BY_OP: return "op";
	case ML_PROF_BY_PREFIX: return "prefix";
	case ML_PROF_BY_PHASE: return "phase";
	default: return "node";
	}
}

/* find_row: the row of rs with key, or -1. */
static int
find_row(const struct prof_row *rs, int n, const struct prof_row *want, bool by_node)
{
	for (int k = 0; k < n; k++)
		if (by_node ? rs[k].index == want->index : strcmp(rs[k].key, want->key) == 0)
			return k;
	return -1;
}

int
ml_prof_write_table(struct ml_prof *const *ps, int n, const struct ml_prof_opts *o, FILE *fp,
		    struct ml_err *e)
{
	struct ml_prof *p = ps[0];
	struct prof_row *r = NULL, **rr = NULL;
	int nr = 0, *nrr = NULL, rc = 0;
	bool by_node = o->group == ML_PROF_BY_NODE, cmp = o->compare || n > 1;
	char buf[4][32];

	if ((rr = ml_calloc((size_t)n, sizeof *rr)) == NULL ||
	    (nrr = ml_calloc((size_t)n, sizeof *nrr)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = mlprof_rows(p, o, true, &r, &nr, e)) < 0)
		goto out;
	for (int k = 1; k < n; k++)
		if ((rc = mlprof_rows(ps[k], o, false, &rr[k], &nrr[k], e)) < 0)
			goto out;
	int64_t shown = o->top > 0 && o->top < nr ? o->top : nr;
	int wk = 4, wo = 2, ws = 5;
	for (int64_t k = 0; k < shown; k++) {
		wk = ML_MAX(wk, (int)strlen(r[k].key));
		wo = ML_MAX(wo, (int)strlen(r[k].op));
		ws = ML_MAX(ws, (int)strlen(r[k].shape));
	}
	wk = ML_MIN(wk, 40);
	wo = ML_MIN(wo, 24);
	ws = ML_MIN(ws, 24);

	fprintf(fp, "%s on %s", o->model != NULL ? o->model : "model", p->device);
	for (int k = 1; k < n; k++)
		fprintf(fp, ", %s", ps[k]->device);
	fprintf(fp, ": %d threads, %lld runs after %lld warm-up\n", o->threads, (long long)p->runs,
		(long long)o->warmup);
	if (by_node)
		fprintf(fp, "%5s  %-*s  %-*s", "#", wk, "node", wo, "op");
	else
		fprintf(fp, "%-*s  %5s", wk, group_title(o->group), "nodes");
	if (cmp) {
		if (by_node)
			fprintf(fp, "  %-*s", ws, "shape");
		for (int k = 0; k < n; k++) {
			char h[48];
			snprintf(h, sizeof h, "%s median", ps[k]->device);
			fprintf(fp, "  %12s", h);
		}
		fprintf(fp, "  %-8s %6s\n", "best", "share");
	} else {
		if (by_node)
			fprintf(fp, "  %-6s  %-*s", "device", ws, "shape");
		fprintf(fp, "  %6s  %10s  %10s  %6s %8s %8s\n", "calls", "median", "total", "share",
			"GFLOP/s", "GB/s");
	}
	for (int64_t k = 0; k < shown; k++) {
		const struct prof_row *x = &r[k];
		char kf[64], of[32], sf[32];
		if (by_node)
			fprintf(fp, "%5d  %-*s  %-*s", x->index, wk, fit(x->key, wk, kf, sizeof kf), wo,
				fit(x->op, wo, of, sizeof of));
		else
			fprintf(fp, "%-*s  %5d", wk, fit(x->key, wk, kf, sizeof kf), x->nodes);
		if (cmp) {
			double best = x->median;
			const char *bd = ps[0]->device;
			if (by_node)
				fprintf(fp, "  %-*s", ws, fit(x->shape, ws, sf, sizeof sf));
			fprintf(fp, "  %12s", mlprof_fmt_time(x->median, buf[0], 32));
			for (int d = 1; d < n; d++) {
				int j = find_row(rr[d], nrr[d], x, by_node);
				if (j < 0) {
					fprintf(fp, "  %12s", "-");
					continue;
				}
				fprintf(fp, "  %12s", mlprof_fmt_time(rr[d][j].median, buf[0], 32));
				if (rr[d][j].median < best) {
					best = rr[d][j].median;
					bd = ps[d]->device;
				}
			}
			fprintf(fp, "  %-8s %5.1f%%\n", bd, 100 * x->share);
			continue;
		}
		if (by_node)
			fprintf(fp, "  %-6s  %-*s", p->dev_name[x->index], ws,
				fit(x->shape, ws, sf, sizeof sf));
		fprintf(fp, "  %6lld  %10s  %10s  %5.1f%%", (long long)x->calls,
			mlprof_fmt_time(x->median, buf[0], 32), mlprof_fmt_time(x->total, buf[1], 32), 100 * x->share);
		put_rate(fp, x->flops, x->median);
		put_rate(fp, x->bytes, x->median);
		fputc('\n', fp);
	}
	if (shown < nr) {
		double rest = 0, share = 0;
		for (int k = (int)shown; k < nr; k++) {
			rest += r[k].median;
			share += r[k].share;
		}
		fprintf(fp, "(%lld more rows: %s, %.1f%%)\n", (long long)(nr - shown),
			mlprof_fmt_time(rest, buf[0], 32), 100 * share);
	}
	for (int k = 0; k < n; k++) {
		struct ml_prof *q = ps[k];
		double wall = q->wall_st.median, sum = q->sum_st.median;
		fprintf(fp, "total%s%s: %s per run (median of %lld), nodes %s, %.1f%% of the run\n",
			n > 1 ? " on " : "", n > 1 ? q->device : "", mlprof_fmt_time(wall, buf[0], 32),
			(long long)q->runs, mlprof_fmt_time(sum, buf[1], 32),
			wall > 0 ? 100 * sum / wall : 0);
	}
	if (p->has_phase && o->group != ML_PROF_BY_PHASE) {
		struct ml_prof_opts po = *o;
		struct prof_row *ph;
		int np;
		po.group = ML_PROF_BY_PHASE;
		po.sort = ML_PROF_SORT_ORDER;
		if ((rc = mlprof_rows(p, &po, true, &ph, &np, e)) < 0)
			goto out;
		fputs("phases:", fp);
		for (int k = 0; k < np; k++)
			fprintf(fp, "%s %s %s (%.1f%%)", k ? "," : "", ph[k].key,
				mlprof_fmt_time(ph[k].median, buf[0], 32), 100 * ph[k].share);
		fputc('\n', fp);
		ml_free(ph);
	}
	if (o->memory)
		memory_table(fp, p);
out:
	ml_free(r);
	if (rr != NULL)
		for (int k = 0; k < n; k++)
			ml_free(rr[k]);
	ml_free(rr);
	ml_free(nrr);
	return rc;
}

/* csv_field: s as one CSV field, quoted when it holds a comma, quote or newline. */
static void
csv_field(FILE *fp, const char *s)
{
	if (strpbrk(s, ",\"\n\r") == NULL) {
		fputs(s, fp);
		return;
	}
	fputc('"', fp);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', fp);
		fputc(*s, fp);
	}
	fputc('"', fp);
}

int
ml_prof_write_csv(struct ml_prof *p, const struct ml_prof_opts *o, FILE *fp, struct ml_err *e)
{
	struct prof_row *r;
	int nr;
	bool by_node = o->group == ML_PROF_BY_NODE;
	ML_TRY(mlprof_rows(p, o, true, &r, &nr, e));
	int64_t shown = o->top > 0 && o->top < nr ? o->top : nr;
	if (by_node)
		fputs("index,name,op,device,shape,phase,", fp);
	else
		fprintf(fp, "%s,nodes,", group_title(o->group));
	fputs("calls,median_ms,total_ms,share,flops,bytes,gflops_per_s,gb_per_s\n", fp);
	for (int64_t k = 0; k < shown; k++) {
		const struct prof_row *x = &r[k];
		if (by_node) {
			fprintf(fp, "%d,", x->index);
			csv_field(fp, p->g->nodes[x->index].name);
			fputc(',', fp);
			csv_field(fp, x->op);
			fputc(',', fp);
			csv_field(fp, p->dev_name[x->index]);
			fputc(',', fp);
			csv_field(fp, x->shape);
			fputc(',', fp);
			csv_field(fp, x->phase != NULL ? x->phase : "");
		} else {
			csv_field(fp, x->key);
			fprintf(fp, ",%d", x->nodes);
		}
		fprintf(fp, ",%lld,%.6f,%.6f,%.6f,%lld,%lld,%.4f,%.4f\n", (long long)x->calls,
			x->median * 1e3, x->total * 1e3, x->share, (long long)x->flops,
			(long long)x->bytes, rate(x->flops, x->median), rate(x->bytes, x->median));
	}
	ml_free(r);
	return 0;
}

/* xml_text: s with XML's special characters escaped. */
static void
xml_text(FILE *fp, const char *s)
{
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		switch (*c) {
		case '<': fputs("&lt;", fp); break;
		case '>': fputs("&gt;", fp); break;
		case '&': fputs("&amp;", fp); break;
		case '"': fputs("&quot;", fp); break;
		default:
			if (*c >= 0x20 || *c == '\t')
				fputc(*c, fp);
		}
	}
}

/*
 * struct palette: a colour per name (op type, or group), given in order of
 * first use and stepped round the colour wheel by the golden angle, so
 * that the names of one picture get colours far apart; #rrggbb at 60%
 * saturation and 55% lightness (70% for the alternate shade that tells
 * neighbours of one colour apart), since SVG 1.1 has no hsl().
 */
struct palette {
	const char **names;
	int n;
};

static const char *
shade(struct palette *pl, const char *name, bool alt, char *buf, size_t n)
{
	int k = 0;
	while (k < pl->n && strcmp(pl->names[k], name) != 0)
		k++;
	if (k == pl->n)
		pl->names[pl->n++] = name;
	double hue = fmod(k * 137.508, 360) / 60, sat = 0.6, lit = alt ? 0.7 : 0.55;
	double c = (1 - fabs(2 * lit - 1)) * sat, x = c * (1 - fabs(fmod(hue, 2) - 1)), m = lit - c / 2;
	double rgb[6][3] = { { c, x, 0 }, { x, c, 0 }, { 0, c, x }, { 0, x, c }, { x, 0, c }, { c, 0, x } };
	const double *v = rgb[(int)hue % 6];
	snprintf(buf, n, "#%02x%02x%02x", (int)((v[0] + m) * 255 + 0.5), (int)((v[1] + m) * 255 + 0.5),
		 (int)((v[2] + m) * 255 + 0.5));
	return buf;
}

static const char *
colour(struct palette *pl, const char *name, char *buf, size_t n)
{
	return shade(pl, name, false, buf, n);
}

/* The legend's layout: one swatch and name per colour, in rows across the picture. */
#define LEGEND_ROW 20.0
#define LEGEND_CHAR 7.0

/* legend_width: the width of a legend entry for name (swatch, gap, text, space). */
static double
legend_width(const char *name)
{
	return 14 + 4 + LEGEND_CHAR * (double)ML_MIN(strlen(name), 40) + 16;
}

/*
 * legend_rows: the rows the legend of pl's names (and the transfers'
 * grey with xfer) takes in a width of tw.
 */
static int
legend_rows(const struct palette *pl, bool xfer, double tw)
{
	int rows = 1;
	double x = LEGEND_CHAR * 7;	/* "colour:" */
	for (int k = 0; k <= pl->n; k++) {
		if (k == pl->n && !xfer)
			break;
		double w = legend_width(k < pl->n ? pl->names[k] : "transfer");
		if (x + w > tw && x > LEGEND_CHAR * 7) {
			rows++;
			x = LEGEND_CHAR * 7;
		}
		x += w;
	}
	return rows;
}

/* write_legend: the legend at (l, y), as legend_rows laid it out. */
static void
write_legend(FILE *fp, struct palette *pl, bool xfer, double l, double y, double tw)
{
	char col[8], nm[64];
	double x = LEGEND_CHAR * 7;
	fprintf(fp, "<g class=\"legend\"><text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">"
		"colour:</text>\n", l, y + 11);
	for (int k = 0; k <= pl->n; k++) {
		if (k == pl->n && !xfer)
			break;
		const char *name = k < pl->n ? pl->names[k] : "transfer";
		double w = legend_width(name);
		if (x + w > tw && x > LEGEND_CHAR * 7) {
			y += LEGEND_ROW;
			x = LEGEND_CHAR * 7;
		}
		fprintf(fp, "<rect x=\"%.1f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"%s\"/>"
			"<text x=\"%.1f\" y=\"%.0f\">", l + x, y, k < pl->n ?
			colour(pl, name, col, sizeof col) : "#888", l + x + 18, y + 11);
		xml_text(fp, fit(name, 40, nm, sizeof nm));
		fputs("</text>\n", fp);
		x += w;
	}
	fputs("</g>\n", fp);
}

int
ml_prof_write_svg(struct ml_prof *p, const struct ml_prof_opts *o, FILE *fp, struct ml_err *e)
{
	const struct ml_graph *g = p->g;
	const double W = 1200, L = 10, TW = W - 2 * L;
	struct prof_row *r;
	int nr;
	char buf[3][32];

	ML_TRY(mlprof_ready(p, e));
	/* the timeline shows the run whose wall time is nearest the median */
	int64_t run = 0;
	for (int64_t k = 1; k < p->runs; k++)
		if (fabs(p->wall[k] - p->wall_st.median) < fabs(p->wall[run] - p->wall_st.median))
			run = k;
	struct ml_prof_opts so = *o;
	so.sort = ML_PROF_SORT_TIME;
	ML_TRY(mlprof_rows(p, &so, true, &r, &nr, e));
	struct palette pl = { ml_calloc((size_t)(p->n + nr) + 1, sizeof *pl.names), 0 };
	if (pl.names == NULL) {
		ml_free(r);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	int bars = (int)(o->top > 0 && o->top < nr ? o->top : ML_MIN(nr, 30));
	double wall = p->wall[run] > 0 ? p->wall[run] : 1e-9;
	/* the lanes: each device the nodes ran on (first seen first), then the transfers */
	int lane_dev[8], nl = 0;
	for (int i = 0; i < p->n && nl < 8; i++) {
		int d = ML_MAX(p->dev[i], 0), k = 0;
		while (k < nl && lane_dev[k] != d)
			k++;
		if (k == nl)
			lane_dev[nl++] = d;
	}
	if (nl == 0)
		lane_dev[nl++] = 0;
	bool xlane = false;
	for (int64_t x = 0; x < p->nxf && !xlane; x++)
		xlane = p->xf[x].run == run;
	int lanes = nl + xlane;
	double dy = 50.0 * (lanes - 1);
	/* every colour of the picture, in the order it is drawn, for the legend */
	char col0[8];
	for (int i = 0; i < p->n; i++)
		colour(&pl, g->nodes[i].op_type, col0, sizeof col0);
	for (int k = 0; k < bars; k++)
		colour(&pl, r[k].op[0] ? r[k].op : r[k].key, col0, sizeof col0);
	double ly0 = 152 + dy + 22.0 * bars + (bars < nr ? 22 : 0) + 10;
	double H = ly0 + LEGEND_ROW * legend_rows(&pl, xlane, TW) + 14;

	fprintf(fp, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
		"viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
		W, H, W, H);
	fprintf(fp, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"20\" "
		"font-size=\"15\" font-weight=\"bold\">", L);
	xml_text(fp, o->model != NULL ? o->model : "model");
	fprintf(fp, " on %s: %s per run (median of %lld), %d threads</text>\n", p->device,
		mlprof_fmt_time(p->wall_st.median, buf[0], 32), (long long)p->runs, o->threads);
	fprintf(fp, "<text x=\"%.0f\" y=\"42\">timeline of run %lld (%s), one lane per device "
		"queue; a lighter shade: the next node of the same op</text>\n",
		L, (long long)run, mlprof_fmt_time(p->wall[run], buf[0], 32));
	for (int l = 0; l < lanes; l++) {
		double ly = 50.0 * l;
		if (l < nl && lane_dev[l] == 0)
			fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">cpu queue 0</text>\n", L,
				62 + ly);
		else if (l < nl)
			fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">cl:%d queue 0</text>\n", L,
				62 + ly, lane_dev[l] - 1);
		else
			fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">transfers</text>\n", L,
				62 + ly);
		fprintf(fp, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"30\" fill=\"#f2f2f2\"/>\n",
			L, 66 + ly, TW);
	}
	for (int64_t k = 0; xlane && k < p->nxf; k++) {
		const struct prof_xfer *t = &p->xf[k];
		if (t->run != run)
			continue;
		double x = L + TW * (t->t.start - p->t0[run]) / wall;
		double w = TW * (t->t.end - t->t.start) / wall;
		fprintf(fp, "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"30\" fill=\"#888\">"
			"<title>%s ", ML_MAX(x, L), 66 + 50.0 * nl, ML_MAX(w, 0.3),
			t->t.to_device ? "to device" : "to host");
		xml_text(fp, t->t.tensor >= 0 && t->t.tensor < g->n_tensors ? g->tensors[t->t.tensor]->name : "?");
		fprintf(fp, ": %s</title></rect>\n", mlprof_fmt_bytes(t->t.bytes, buf[0], 32));
	}
	/*
	 * Nodes of one op back to back (a CPU run of fused convolutions) would
	 * merge into one band: each lane alternates the shade of a colour that
	 * repeats, and a node wide enough gets a white edge.
	 */
	int last_node[9];
	bool last_alt[9] = { false };
	for (int l = 0; l < 9; l++)
		last_node[l] = -1;
	for (int i = 0; i < p->n; i++) {
		double x = L + TW * p->st[run * p->n + i] / wall;
		double w = TW * p->t[run * p->n + i] / wall;
		char nb[32];
		char col[8];
		int l = 0;
		while (l < nl - 1 && lane_dev[l] != ML_MAX(p->dev[i], 0))
			l++;
		bool alt = false;
		if (last_node[l] >= 0 &&
		    strcmp(g->nodes[last_node[l]].op_type, g->nodes[i].op_type) == 0)
			alt = !last_alt[l];
		last_node[l] = i;
		last_alt[l] = alt;
		fprintf(fp, "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"30\" "
			"fill=\"%s\"%s><title>", x, 66 + 50.0 * l, ML_MAX(w, 0.3),
			shade(&pl, g->nodes[i].op_type, alt, col, sizeof col),
			w >= 3 ? " stroke=\"white\" stroke-width=\"0.75\"" : "");
		xml_text(fp, mlprof_node_name(g, i, nb, sizeof nb));
		fputs(" (", fp);
		xml_text(fp, g->nodes[i].op_type);
		fprintf(fp, "): %s</title></rect>\n", mlprof_fmt_time(p->t[run * p->n + i], buf[0], 32));
	}
	for (int k = 0; k <= 4; k++) {
		double x = L + TW * k / 4;
		fprintf(fp, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#333\"/>"
			"<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"%s\">%s</text>\n", x, 96 + dy, x,
			102 + dy, x, 115 + dy,
			k == 0 ? "start" : k == 4 ? "end" : "middle", mlprof_fmt_time(wall * k / 4, buf[0], 32));
	}
	fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\">time per %s (median per run, largest first)</text>\n",
		L, 142 + dy, o->group == ML_PROF_BY_OP ? "op type" : o->group == ML_PROF_BY_PREFIX ? "name prefix" :
		o->group == ML_PROF_BY_PHASE ? "phase" : "node");
	double maxm = 0;
	for (int k = 0; k < bars; k++)
		maxm = ML_MAX(maxm, r[k].median);
	const double lx = 330, bw = W - lx - 190;
	for (int k = 0; k < bars; k++) {
		double y = 152 + dy + 22.0 * k, w = maxm > 0 ? bw * r[k].median / maxm : 0;
		char kf[64], col[8];
		fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">", lx - 6, y + 14);
		xml_text(fp, fit(r[k].key, 44, kf, sizeof kf));
		fprintf(fp, "</text><rect x=\"%.0f\" y=\"%.0f\" width=\"%.2f\" height=\"17\" "
			"fill=\"%s\"><title>", lx, y + 2, ML_MAX(w, 0.5),
			colour(&pl, r[k].op[0] ? r[k].op : r[k].key, col, sizeof col));
		xml_text(fp, r[k].key);
		if (r[k].op[0]) {
			fputs(" (", fp);
			xml_text(fp, r[k].op);
			fputc(')', fp);
		}
		fprintf(fp, "</title></rect><text x=\"%.1f\" y=\"%.0f\">%s  %.1f%%</text>\n",
			lx + ML_MAX(w, 0.5) + 6, y + 14, mlprof_fmt_time(r[k].median, buf[0], 32),
			100 * r[k].share);
	}
	if (bars < nr)
		fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">(%d more rows)</text>\n", lx,
			152 + dy + 22.0 * bars + 14, nr - bars);
	write_legend(fp, &pl, xlane, L, ly0, TW);
	fputs("</svg>\n", fp);
	ml_free(pl.names);
	ml_free(r);
	return 0;
}
