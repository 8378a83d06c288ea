/*
 * mlconvert.c: convert a model between the .mlg graph file, ONNX and the
 * .mlt text form, and describe a model (--info): inputs, outputs, ops,
 * parameters and a FLOP estimate.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char synopsis[] =
	"mlconvert [-fqv] [--from FMT] [--to FMT] [-o OUTPUT] [--info [--json]] [--max-alloc SIZE]\n"
	"                 [--shape NAME=DIMS]... [INPUT | -]";

static const char help_text[] =
	"Convert a model between formats: mlg (the graph file), onnx and mlt (the\n"
	"text form). The input format is detected from the content; the output\n"
	"format comes from --to or OUTPUT's extension, and is mlg otherwise.\n"
	"'-' or no INPUT reads stdin; no -o writes stdout.\n"
	"\n"
	"  -f, --force         write a binary format to a terminal\n"
	"      --from FMT      read the input as FMT (mlg, onnx, mlt)\n"
	"  -h, --help          print this help and exit\n"
	"      --info          describe the model on stdout instead of converting it\n"
	"                      (with -o, convert as well; with -o -, the model goes to\n"
	"                      stdout and the description to stderr)\n"
	"      --json          with --info, print a JSON object\n"
	"      --max-alloc SIZE\n"
	"                      allocate at most SIZE bytes (K, M, G suffixes;\n"
	"                      default ML_MAX_ALLOC or 16G)\n"
	"  -o, --output FILE   write the model to FILE ('-' for stdout)\n"
	"  -q, --quiet         print nothing but errors\n"
	"      --shape NAME=DIMS\n"
	"                      give input NAME the shape DIMS (4x3x224x224, a name such\n"
	"                      as N making a dim symbolic) and infer the model again,\n"
	"                      rewriting Reshape targets that hold the old sizes\n"
	"      --to FMT        write the output as FMT (mlg, onnx, mlt)\n"
	"  -v, --verbose       say what was read and written, on stderr\n"
	"  -V, --version       print the version and exit\n";

static const char *const fmt_names[] = {
	[ML_FMT_AUTO] = "auto", [ML_FMT_MLG] = "mlg", [ML_FMT_ONNX] = "onnx", [ML_FMT_MLT] = "mlt",
};

static enum ml_format
parse_format(const char *opt, const char *s)
{
	for (int f = ML_FMT_MLG; f <= ML_FMT_MLT; f++)
		if (strcmp(s, fmt_names[f]) == 0)
			return (enum ml_format)f;
	usage_error(synopsis, "%s: unknown format '%s' (use mlg, onnx or mlt)", opt, s);
}

/*
 * The model summary.
 */
static int
imax(int a, int b)
{
	return a > b ? a : b;
}

struct opcount {
	char name[160];
	int64_t n;
};

struct census {
	struct opcount *ops;
	int n, cap;
};

static void
count_op(struct census *c, const struct ml_node *n)
{
	char name[160];
	if (n->domain[0] != '\0')
		snprintf(name, sizeof name, "%s.%s", n->domain, n->op_type);
	else
		snprintf(name, sizeof name, "%s", n->op_type);
	for (int i = 0; i < c->n; i++) {
		if (strcmp(c->ops[i].name, name) == 0) {
			c->ops[i].n++;
			return;
		}
	}
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 32;
		c->ops = realloc(c->ops, sizeof *c->ops * (size_t)c->cap);
		if (c->ops == NULL)
			die(EXIT_FAIL, "out of memory");
	}
	snprintf(c->ops[c->n].name, sizeof c->ops[c->n].name, "%s", name);
	c->ops[c->n++].n = 1;
}

/* count_ops: the ops of g and of its subgraphs (If branches, Loop bodies). */
static void
count_ops(struct census *c, const struct ml_graph *g)
{
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		count_op(c, n);
		for (int j = 0; j < n->n_attr; j++) {
			const struct ml_attr *a = &n->attrs[j];
			if (a->type == ML_ATTR_GRAPH || a->type == ML_ATTR_GRAPHS)
				for (int k = 0; k < a->n; k++)
					count_ops(c, a->graphs[k]);
		}
	}
}

static int
cmp_opcount(const void *a, const void *b)
{
	const struct opcount *x = a, *y = b;
	if (x->n != y->n)
		return x->n > y->n ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* shape_str: "f32[batch,3,224,224]", with "?" for an unknown dim or rank. */
static const char *
shape_str(const struct ml_tensor *t, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "%s[", ml_dtype_name(t->dtype));
	if (t->rank < 0)
		k += (size_t)snprintf(buf + (k < n ? k : n), k < n ? n - k : 0, "?...");
	for (int d = 0; d < t->rank; d++) {
		const char *sep = d ? "," : "";
		size_t room = k < n ? n - k : 0;
		char *p = buf + (k < n ? k : n);
		if (t->dims[d] >= 0)
			k += (size_t)snprintf(p, room, "%s%lld", sep, (long long)t->dims[d]);
		else
			k += (size_t)snprintf(p, room, "%s%s", sep, t->sym[d] ? t->sym[d] : "?");
	}
	snprintf(buf + (k < n ? k : n), k < n ? n - k : 0, "]");
	return buf;
}

/* human: n with a decimal unit prefix and 3 significant digits: "1.82 G". */
static void
human(char *buf, size_t n, double v, const char *unit)
{
	static const char *const pre[] = { "", "K", "M", "G", "T", "P", "E" };
	int i = 0;
	while (v >= 999.5 && i < 6) {
		v /= 1000;
		i++;
	}
	if (i == 0)
		snprintf(buf, n, "%.0f %s", v, unit);
	else
		snprintf(buf, n, "%.*f %s%s", v >= 99.95 ? 0 : v >= 9.995 ? 1 : 2, v, pre[i], unit);
}

/* human_bytes: a byte count in binary units: "44.6 MiB". */
static void
human_bytes(char *buf, size_t n, double v)
{
	static const char *const pre[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	int i = 0;
	while (v >= 1023.5 && i < 5) {
		v /= 1024;
		i++;
	}
	if (i == 0)
		snprintf(buf, n, "%.0f B", v);
	else
		snprintf(buf, n, "%.*f %s", v >= 99.95 ? 0 : v >= 9.995 ? 1 : 2, v, pre[i]);
}

static void
json_shape(FILE *fp, const struct ml_tensor *t)
{
	if (t->rank < 0) {
		fputs("null", fp);
		return;
	}
	fputc('[', fp);
	for (int d = 0; d < t->rank; d++) {
		if (d)
			fputs(", ", fp);
		if (t->dims[d] >= 0)
			fprintf(fp, "%lld", (long long)t->dims[d]);
		else if (t->sym[d] != NULL)
			ml_json_str(fp, t->sym[d]);
		else
			fputs("null", fp);
	}
	fputc(']', fp);
}

static void
json_values(FILE *fp, const char *key, const struct ml_graph *g, int n, const int *idx)
{
	fprintf(fp, ",\n  \"%s\": [", key);
	for (int i = 0; i < n; i++) {
		const struct ml_tensor *t = g->tensors[idx[i]];
		fprintf(fp, "%s\n    {\"name\": ", i ? "," : "");
		ml_json_str(fp, t->name);
		fprintf(fp, ", \"dtype\": \"%s\", \"shape\": ", ml_dtype_name(t->dtype));
		json_shape(fp, t);
		fputc('}', fp);
	}
	fprintf(fp, "%s]", n ? "\n  " : "");
}

/*
 * estimate_flops: the sum of ml_node_flops over the main graph (subgraphs
 * run a data-dependent number of times and are not counted). Unknown input
 * dims are taken as 1 first, so a model with a symbolic batch size gets the
 * estimate for one sample; their names go to assumed (empty when none).
 * This changes g's shapes, so it comes last.
 */
static int64_t
estimate_flops(struct ml_graph *g, char *assumed, size_t n)
{
	struct ml_err err = { 0 };
	size_t k = 0;
	bool changed = false;

	assumed[0] = '\0';
	for (int i = 0; i < g->n_inputs; i++) {
		struct ml_tensor *t = g->tensors[g->inputs[i]];
		if (t->kind != ML_TK_INPUT)
			continue;
		for (int d = 0; d < t->rank; d++) {
			if (t->dims[d] >= 0)
				continue;
			const char *name = t->sym[d] != NULL ? t->sym[d] : "?";
			size_t len = strlen(name);
			bool seen = false;
			for (const char *p = assumed; (p = strstr(p, name)) != NULL; p += len)
				seen |= (p == assumed || p[-1] == ' ') && (p[len] == '=');
			if (!seen && k + len + 4 < n)
				k += (size_t)snprintf(assumed + k, n - k, "%s%s=1", k ? " " : "", name);
			t->dims[d] = 1;
			t->sym[d] = NULL;
			changed = true;
		}
	}
	/* When inference fails on the made-up sizes, the static shapes still give an estimate. */
	if (changed)
		ml_graph_infer(g, &err);
	int64_t flops = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		int64_t f = ml_node_flops(g, i);
		if (f > 0)
			flops += f;
	}
	return flops;
}

/*
 * train_stats: the elements and bytes of a checkpoint's training state (the
 * tensors its slots name: optimizer moments, step counter, RNG), which are
 * no parameters of the model.
 */
static void
train_stats(const struct ml_graph *g, int64_t *count, int64_t *bytes)
{
	*count = *bytes = 0;
	for (int i = 0; g->train != NULL && i < g->train->n_slots; i++) {
		int t = g->train->slots[i];
		struct ml_tval v;
		if (t < 0 || t >= g->n_tensors || g->tensors[t]->data == NULL)
			continue;
		ml_graph_tval(g, t, &v);
		*count += ml_tval_numel(&v);
		*bytes += (int64_t)g->tensors[t]->nbytes;
	}
}

static void
print_info(FILE *fp, struct ml_graph *g, const char *path, bool json)
{
	struct census c = { 0 };
	int64_t params = 0, pbytes = 0, flops;
	char buf[1024], assumed[256];

	count_ops(&c, g);
	/* a graph without nodes has no op list, and qsort must not get NULL */
	if (c.n > 0)
		qsort(c.ops, (size_t)c.n, sizeof *c.ops, cmp_opcount);
	ml_graph_param_stats(g, &params, &pbytes);
	int64_t tvals, tbytes;
	train_stats(g, &tvals, &tbytes);
	params -= tvals;
	pbytes -= tbytes;
	const char *name = g->name != NULL ? g->name : "";
	if (json) {
		fprintf(fp, "{\n  \"model\": ");
		ml_json_str(fp, path);
		fprintf(fp, ",\n  \"graph\": ");
		ml_json_str(fp, name);
		fprintf(fp, ",\n  \"producer\": ");
		ml_json_str(fp, g->producer != NULL ? g->producer : "");
		fprintf(fp, ",\n  \"ir_version\": %lld,\n  \"opset\": {", (long long)g->ir_version);
		for (int i = 0; i < g->n_opsets; i++) {
			fprintf(fp, "%s", i ? ", " : "");
			ml_json_str(fp, g->opset_domain[i][0] ? g->opset_domain[i] : "ai.onnx");
			fprintf(fp, ": %lld", (long long)g->opset_version[i]);
		}
		fprintf(fp, "}");
		json_values(fp, "inputs", g, g->n_inputs, g->inputs);
		json_values(fp, "outputs", g, g->n_outputs, g->outputs);
		fprintf(fp, ",\n  \"nodes\": %d,\n  \"ops\": {", g->n_nodes);
		for (int i = 0; i < c.n; i++) {
			fprintf(fp, "%s", i ? ", " : "");
			ml_json_str(fp, c.ops[i].name);
			fprintf(fp, ": %lld", (long long)c.ops[i].n);
		}
		flops = estimate_flops(g, assumed, sizeof assumed);
		fprintf(fp, "},\n  \"params\": %lld,\n  \"param_bytes\": %lld,\n  \"flops\": %lld",
		       (long long)params, (long long)pbytes, (long long)flops);
		fprintf(fp, ",\n  \"flops_assume\": ");
		ml_json_str(fp, assumed);
		if (g->train != NULL)
			fprintf(fp, ",\n  \"training_state\": {\"step\": %llu, \"epoch\": %llu, "
				"\"values\": %lld, \"bytes\": %lld}", (unsigned long long)g->train->step,
				(unsigned long long)g->train->epoch, (long long)tvals, (long long)tbytes);
		fprintf(fp, "\n}\n");
		free(c.ops);
		return;
	}
	fprintf(fp, "graph: %s\n", name[0] ? name : "(unnamed)");
	if (g->producer != NULL && g->producer[0] != '\0')
		fprintf(fp, "producer: %s\n", g->producer);
	fprintf(fp, "opset:");
	if (g->n_opsets == 0)
		fprintf(fp, " (none)");
	for (int i = 0; i < g->n_opsets; i++)
		fprintf(fp, "%s %s %lld", i ? "," : "",
		       g->opset_domain[i][0] ? g->opset_domain[i] : "ai.onnx",
		       (long long)g->opset_version[i]);
	fputc('\n', fp);
	int w = 4;
	for (int i = 0; i < g->n_inputs; i++)
		w = imax(w, (int)strlen(g->tensors[g->inputs[i]]->name));
	for (int i = 0; i < g->n_outputs; i++)
		w = imax(w, (int)strlen(g->tensors[g->outputs[i]]->name));
	if (w > 48)
		w = 48;
	fprintf(fp, "inputs:%s\n", g->n_inputs ? "" : " (none)");
	for (int i = 0; i < g->n_inputs; i++) {
		const struct ml_tensor *t = g->tensors[g->inputs[i]];
		fprintf(fp, "  %-*s  %s\n", w, t->name, shape_str(t, buf, sizeof buf));
	}
	fprintf(fp, "outputs:%s\n", g->n_outputs ? "" : " (none)");
	for (int i = 0; i < g->n_outputs; i++) {
		const struct ml_tensor *t = g->tensors[g->outputs[i]];
		fprintf(fp, "  %-*s  %s\n", w, t->name, shape_str(t, buf, sizeof buf));
	}
	int64_t total = 0;
	for (int i = 0; i < c.n; i++)
		total += c.ops[i].n;
	if (total != g->n_nodes)
		fprintf(fp, "ops: %d nodes, %lld with subgraphs\n", g->n_nodes, (long long)total);
	else
		fprintf(fp, "ops: %d nodes\n", g->n_nodes);
	w = 4;
	for (int i = 0; i < c.n; i++)
		w = imax(w, (int)strlen(c.ops[i].name));
	for (int i = 0; i < c.n; i++)
		fprintf(fp, "  %-*s  %lld\n", w, c.ops[i].name, (long long)c.ops[i].n);
	char b1[64], b2[64];
	human_bytes(b2, sizeof b2, (double)pbytes);
	fprintf(fp, "parameters: %lld (%s)\n", (long long)params, b2);
	if (g->train != NULL) {
		human_bytes(b1, sizeof b1, (double)tbytes);
		fprintf(fp, "training state: step %llu, epoch %llu, %lld values (%s)\n",
			(unsigned long long)g->train->step, (unsigned long long)g->train->epoch,
			(long long)tvals, b1);
	}
	flops = estimate_flops(g, assumed, sizeof assumed);
	human(b1, sizeof b1, (double)flops, "FLOP");
	fprintf(fp, "flops: %s%s%s%s\n", b1, assumed[0] ? " (" : "", assumed,
		assumed[0] ? ")" : "");
	free(c.ops);
}

int
main(int argc, char **argv)
{
	enum { OPT_FROM = 256, OPT_TO, OPT_INFO, OPT_JSON, OPT_MAX_ALLOC, OPT_SHAPE };
	static const struct option longopts[] = {
		{ "force", no_argument, NULL, 'f' },
		{ "from", required_argument, NULL, OPT_FROM },
		{ "help", no_argument, NULL, 'h' },
		{ "info", no_argument, NULL, OPT_INFO },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "max-alloc", required_argument, NULL, OPT_MAX_ALLOC },
		{ "output", required_argument, NULL, 'o' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "shape", required_argument, NULL, OPT_SHAPE },
		{ "to", required_argument, NULL, OPT_TO },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	enum ml_format from = ML_FMT_AUTO, to = ML_FMT_AUTO;
	const char *output = NULL;
	bool force = false, info = false, json = false, version = false;
	int verbose = 0, quiet = 0, c;
	struct cli_shapes shapes = { 0 };

	cli_init(argc, argv);
	while ((c = getopt_long(argc, argv, "fho:qvV", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			force = true;
			break;
		case 'h':
			show_help(synopsis, help_text);
		case 'o':
			output = optarg;
			break;
		case 'q':
			quiet = 1;
			break;
		case 'v':
			verbose++;
			break;
		case 'V':
			version = true;
			break;
		case OPT_FROM:
			from = parse_format("--from", optarg);
			break;
		case OPT_TO:
			to = parse_format("--to", optarg);
			break;
		case OPT_INFO:
			info = true;
			break;
		case OPT_JSON:
			json = true;
			break;
		case OPT_MAX_ALLOC:
			ml_set_alloc_cap(parse_size("--max-alloc", optarg, synopsis));
			break;
		case OPT_SHAPE:
			cli_add_shape(&shapes, optarg, synopsis);
			break;
		default:
			fprintf(stderr, "usage: %s\n", synopsis);
			exit(EXIT_USAGE);
		}
	}
	if (version) {
		print_version(verbose);
		return finish_stdout();
	}
	if (optind + 1 < argc)
		usage_error(synopsis, "too many operands");
	if (json && !info)
		usage_error(synopsis, "--json needs --info");
	const char *input = optind < argc ? argv[optind] : "-";
	if (output != NULL && output[0] == '\0')
		usage_error(synopsis, "-o: empty file name");
	bool convert = !info || output != NULL;
	if (output == NULL)
		output = "-";
	/* the reports' rule: stdout, unless the model goes there; then stderr */
	FILE *info_fp = convert && strcmp(output, "-") == 0 ? stderr : stdout;
	if (to == ML_FMT_AUTO && strcmp(output, "-") != 0) {
		const char *dot = strrchr(output, '.'), *slash = strrchr(output, '/');
		if (dot != NULL && (slash == NULL || dot > slash))
			to = ml_format_from_name(dot + 1);
	}
	if (to == ML_FMT_AUTO)
		to = ML_FMT_MLG;
	/* Refuse before reading a large model, not after. */
	if (convert && to != ML_FMT_MLT)
		refuse_tty_stdout(output, force);

	struct ml_err err = { 0 };
	struct ml_graph *g = NULL;
	double t0 = ml_now();
	if (ml_model_load(&g, input, from, &err) < 0)
		die_err(&err);
	cli_apply_shapes(g, input, &shapes, verbose && !quiet);
	double t1 = ml_now();
	const char *shown_in = strcmp(input, "-") == 0 ? "<stdin>" : input;
	if (verbose && !quiet)
		fprintf(stderr, "%s: read %s: %d nodes, %d tensors (%.1f ms)\n", progname, shown_in,
			g->n_nodes, g->n_tensors, (t1 - t0) * 1e3);
	if (convert) {
		if (ml_model_save(g, output, to, &err) < 0)
			die_err(&err);
		if (verbose && !quiet)
			fprintf(stderr, "%s: wrote %s as %s (%.1f ms)\n", progname,
				strcmp(output, "-") == 0 ? "<stdout>" : output, fmt_names[to],
				(ml_now() - t1) * 1e3);
	}
	/* The summary comes last: the FLOP estimate changes the graph's shapes. */
	if (info)
		print_info(info_fp, g, shown_in, json);
	ml_graph_free(g);
	cli_shapes_free(&shapes);
	return finish_stdout();
}
