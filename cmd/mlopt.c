/*
 * mlopt.c: optimise a graph: run the passes of an -O level or a list
 * (lib/opt), report what each changed, and with --verify run the graph
 * after every pass and stop at the first that moves an output beyond the
 * tolerance.
 */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char synopsis[] =
	"mlopt [-fqv] [-O LEVEL] [--passes LIST] [--disable LIST] [--report [--json]] [-o OUTPUT]\n"
	"             [--verify [--rtol R] [--atol A] [-i NAME=FILE.npy]... [--dim NAME=N]...\n"
	"             [--seed S] [--timeout SECS] [--[no-]progress]] [--max-alloc SIZE]\n"
	"             [--shape NAME=DIMS]... [INPUT | -]\n"
	"       mlopt --list-passes [--json]";

static const char help_text[] =
	"Optimise a model with graph passes and write it out. '-' or no INPUT reads\n"
	"stdin; no -o writes stdout (mlg unless OUTPUT's extension says otherwise).\n"
	"\n"
	"      --atol A        --verify's absolute tolerance (default 1e-5)\n"
	"      --dim NAME=N    with --verify, the size of a symbolic dim of made-up inputs\n"
	"      --disable LIST  leave out these passes (comma-separated)\n"
	"  -f, --force         write a binary format to a terminal\n"
	"  -h, --help          print this help and exit\n"
	"  -i, --input NAME=FILE\n"
	"                      with --verify, input NAME from FILE.npy (others: random)\n"
	"      --json          print the report or the pass list as JSON\n"
	"      --list-passes   print the passes with their levels and exit\n"
	"      --max-alloc SIZE\n"
	"                      allocate at most SIZE bytes (K, M, G suffixes)\n"
	"      --no-progress   draw no progress bar (the default unless on a terminal)\n"
	"  -O, --level LEVEL   0 (nothing), 1 (cleaning), 2 (fusion, the default), 3\n"
	"  -o, --output FILE   write the model to FILE ('-' for stdout)\n"
	"      --passes LIST   run exactly these passes, in this order (comma-separated)\n"
	"      --progress      with --verify, draw a progress bar of the passes on stderr\n"
	"                      even when it is no terminal\n"
	"  -q, --quiet         print nothing but errors\n"
	"      --report        print per pass the nodes before and after and what changed\n"
	"                      (on stdout with -o FILE, else on stderr)\n"
	"      --rtol R        --verify's relative tolerance (default 1e-4)\n"
	"      --seed S        seed of --verify's random inputs (default 0)\n"
	"      --shape NAME=DIMS\n"
	"                      give input NAME the shape DIMS (4x3x224x224, a name such\n"
	"                      as N making a dim symbolic) and infer the model again,\n"
	"                      rewriting Reshape targets that hold the old sizes\n"
	"      --timeout SECS  with --verify, stop with status 1 when the whole run\n"
	"                      (reading, passes, verifying) takes over SECS seconds\n"
	"      --verify        run the graph after every pass and fail (status 1) naming\n"
	"                      the first pass that moves an output beyond the tolerance\n"
	"  -v, --verbose       say what was read, optimised and written, on stderr\n"
	"  -V, --version       print the version and exit\n";

/*
 * --verify: the reference outputs of the graph as read, and a check after
 * each pass against them.
 */
struct verify {
	const char *path;
	struct cli_inputs *in;
	double rtol, atol;
	int n;
	struct ml_tval *ref;
	char **names;
	bool broke;
	int verbose;
};

/* run_graph: run g once on the verify inputs; outputs copied into out[] (owned). */
static int
run_graph(struct verify *v, struct ml_graph *g, struct ml_tval *out, struct ml_err *e)
{
	struct ml_session *s = NULL;
	int rc;
	if ((rc = ml_session_new(&s, g, NULL, e)) < 0)
		return rc;
	cli_bind_inputs(s, g, v->path, v->in);
	if ((rc = ml_session_run(s, e)) < 0)
		goto out;
	for (int i = 0; i < g->n_outputs; i++) {
		const struct ml_tval *y = ml_session_output(s, i);
		memset(&out[i], 0, sizeof out[i]);
		if ((rc = ml_tval_alloc(&out[i], y->dtype, y->rank, y->dims, e)) < 0)
			goto out;
		int64_t nb = ml_tval_nbytes(y);
		if (nb > 0)
			memcpy(out[i].data, y->data, (size_t)nb);
	}
out:
	ml_session_free(s);
	return rc;
}

static int
check_pass(void *ctx, struct ml_graph *g, const char *pass, struct ml_err *e)
{
	struct verify *v = ctx;
	struct ml_tval *got = calloc((size_t)v->n + 1, sizeof *got);
	int rc = 0;
	if (got == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	if (g->n_outputs != v->n) {
		rc = ml_fail(e, ML_EINVAL, "--verify: pass '%s' changed the number of outputs", pass);
		v->broke = true;
		goto out;
	}
	if ((rc = run_graph(v, g, got, e)) < 0) {
		ml_err_prefix(e, pass);
		ml_err_prefix(e, "--verify: after pass");
		v->broke = true;
		goto out;
	}
	double worst = 0;
	for (int i = 0; i < v->n; i++) {
		const struct ml_tval *a = &got[i], *b = &v->ref[i];
		bool shape = a->dtype == b->dtype && a->rank == b->rank;
		for (int d = 0; shape && d < a->rank; d++)
			shape = a->dims[d] == b->dims[d];
		if (!shape) {
			char s1[128], s2[128];
			rc = ml_fail(e, ML_EINVAL, "--verify: pass '%s' changed output '%s' from %s to %s",
				     pass, v->names[i], ml_tval_shape_str(b, s1, sizeof s1),
				     ml_tval_shape_str(a, s2, sizeof s2));
			v->broke = true;
			goto out;
		}
		int64_t n = ml_tval_numel(a);
		bool fl = ml_dtype_is_float(a->dtype);
		for (int64_t k = 0; k < n; k++) {
			double x = ml_get_f64(a->data, a->dtype, k), y = ml_get_f64(b->data, b->dtype, k);
			double d = fabs(x - y), lim = fl ? v->atol + v->rtol * fabs(y) : 0;
			bool ok = d <= lim || (isnan(x) && isnan(y));
			if (lim > 0 && d / lim > worst)
				worst = d / lim;
			if (!ok) {
				rc = ml_fail(e, ML_EINVAL,
					     "--verify: pass '%s' changed output '%s' beyond the tolerance "
					     "(element %lld: %.9g, was %.9g)",
					     pass, v->names[i], (long long)k, x, y);
				v->broke = true;
				goto out;
			}
		}
	}
	if (v->verbose) {
		cli_progress_clear();
		fprintf(stderr, "%s: --verify: %s: outputs within tolerance (%.3g of it at worst)\n",
			progname, pass, worst);
	}
out:
	for (int i = 0; i < v->n; i++)
		ml_tval_clear(&got[i]);
	free(got);
	return rc;
}

static void
list_passes(bool json)
{
	int n;
	const struct ml_opt_pass_info *p = ml_opt_passes(&n);
	if (json)
		printf("[");
	for (int i = 0; i < n; i++) {
		if (json) {
			printf("%s\n  {\"name\": ", i ? "," : "");
			ml_json_str(stdout, p[i].name);
			printf(", \"level\": %d, \"doc\": ", p[i].level);
			ml_json_str(stdout, p[i].doc);
			printf("}");
		} else {
			printf("%-18s -O%d  %s\n", p[i].name, p[i].level, p[i].doc);
		}
	}
	if (json)
		printf("\n]\n");
}

static void
print_report(FILE *fp, const struct ml_opt_report *r, bool json, int level, const char *passes)
{
	if (json) {
		fprintf(fp, "{\n  \"level\": %d,\n  \"passes\": ", level);
		if (passes != NULL)
			ml_json_str(fp, passes);
		else
			fputs("null", fp);
		fprintf(fp, ",\n  \"nodes_before\": %d,\n  \"nodes_after\": %d,\n  \"rounds\": %d,\n"
			"  \"arena_bytes\": %lld,\n  \"runs\": [", r->nodes_before, r->nodes_after,
			r->rounds, (long long)r->arena_bytes);
		for (int i = 0; i < r->n; i++) {
			const struct ml_opt_row *w = &r->rows[i];
			fprintf(fp, "%s\n    {\"pass\": ", i ? "," : "");
			ml_json_str(fp, w->pass);
			fprintf(fp, ", \"round\": %d, \"nodes_before\": %d, \"nodes_after\": %d, "
				"\"changes\": %d, \"what\": ", w->round, w->nodes_before,
				w->nodes_after, w->changes);
			ml_json_str(fp, w->what);
			fprintf(fp, "}");
		}
		fprintf(fp, "%s]\n}\n", r->n ? "\n  " : "");
		return;
	}
	fprintf(fp, "%-18s %5s %6s %6s %7s  %s\n", "pass", "round", "before", "after", "changes",
		"what");
	for (int i = 0; i < r->n; i++) {
		const struct ml_opt_row *w = &r->rows[i];
		fprintf(fp, "%-18s %5d %6d %6d %7d  %s\n", w->pass, w->round, w->nodes_before,
			w->nodes_after, w->changes, w->what[0] ? w->what : "-");
	}
	double pct = r->nodes_before > 0 ?
			     100.0 * (r->nodes_before - r->nodes_after) / r->nodes_before : 0;
	fprintf(fp, "nodes: %d -> %d (%.1f%% fewer) in %d round%s\n", r->nodes_before,
		r->nodes_after, pct, r->rounds, r->rounds == 1 ? "" : "s");
}

/* The options of one run, as parsed. */
struct opts {
	struct cli_inputs in;
	struct cli_shapes shapes;	/* --shape */
	struct ml_opt_opts oo;
	const char *input, *output;
	enum ml_format to;
	bool force, list, report, json, verify, version;
	double rtol, atol, timeout;
	int verbose, quiet, progress;
};

/* parse_args: read argv into o; usage errors exit 2, -h exits 0. */
static void
parse_args(struct opts *o, int argc, char **argv)
{
	enum { OPT_PASSES = 256, OPT_DISABLE, OPT_LIST, OPT_REPORT, OPT_JSON, OPT_VERIFY, OPT_RTOL,
	       OPT_ATOL, OPT_SEED, OPT_DIM, OPT_MAX_ALLOC, OPT_TIMEOUT, OPT_SHAPE };
	static const struct option longopts[] = {
		{ "atol", required_argument, NULL, OPT_ATOL },
		{ "dim", required_argument, NULL, OPT_DIM },
		{ "disable", required_argument, NULL, OPT_DISABLE },
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ "input", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "level", required_argument, NULL, 'O' },
		{ "list-passes", no_argument, NULL, OPT_LIST },
		{ "max-alloc", required_argument, NULL, OPT_MAX_ALLOC },
		{ "no-progress", no_argument, NULL, CLI_OPT_NO_PROGRESS },
		{ "output", required_argument, NULL, 'o' },
		{ "passes", required_argument, NULL, OPT_PASSES },
		{ "progress", no_argument, NULL, CLI_OPT_PROGRESS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "report", no_argument, NULL, OPT_REPORT },
		{ "rtol", required_argument, NULL, OPT_RTOL },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "shape", required_argument, NULL, OPT_SHAPE },
		{ "verbose", no_argument, NULL, 'v' },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "verify", no_argument, NULL, OPT_VERIFY },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "fhi:O:o:qvV", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			o->force = true;
			break;
		case 'h':
			show_help(synopsis, help_text);
		case 'i':
			cli_add_input(&o->in, optarg, synopsis);
			break;
		case 'O':
			o->oo.level = (int)parse_int("-O", optarg, 0, 3, synopsis);
			break;
		case 'o':
			o->output = optarg;
			break;
		case 'q':
			o->quiet = 1;
			break;
		case 'v':
			o->verbose++;
			break;
		case 'V':
			o->version = true;
			break;
		case OPT_PASSES:
			o->oo.passes = optarg;
			break;
		case OPT_DISABLE:
			o->oo.disable = optarg;
			break;
		case OPT_LIST:
			o->list = true;
			break;
		case OPT_REPORT:
			o->report = true;
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_VERIFY:
			o->verify = true;
			break;
		case OPT_RTOL:
			o->rtol = parse_double("--rtol", optarg, synopsis);
			break;
		case OPT_ATOL:
			o->atol = parse_double("--atol", optarg, synopsis);
			break;
		case OPT_SHAPE:
			cli_add_shape(&o->shapes, optarg, synopsis);
			break;
		case OPT_SEED:
			o->in.seed = (uint64_t)parse_int("--seed", optarg, 0, INT64_MAX, synopsis);
			break;
		case OPT_DIM:
			cli_add_dim(&o->in, optarg, synopsis);
			break;
		case OPT_MAX_ALLOC:
			ml_set_alloc_cap(parse_size("--max-alloc", optarg, synopsis));
			break;
		case OPT_TIMEOUT:
			o->timeout = parse_timeout(optarg, synopsis);
			break;
		case CLI_OPT_PROGRESS:
			o->progress = CLI_PROGRESS_ON;
			break;
		case CLI_OPT_NO_PROGRESS:
			o->progress = CLI_PROGRESS_OFF;
			break;
		default:
			fprintf(stderr, "usage: %s\n", synopsis);
			exit(EXIT_USAGE);
		}
	}
}

/*
 * check_args: the combinations parse_args cannot see, the operand, and the
 * output's format (from its extension; mlg for stdout or an unknown one).
 */
static void
check_args(struct opts *o, int argc, char **argv)
{
	if (optind + 1 < argc)
		usage_error(synopsis, "too many operands");
	if (o->json && !o->report)
		usage_error(synopsis, "--json needs --report or --list-passes");
	if (o->rtol < 0 || o->atol < 0)
		usage_error(synopsis, "tolerances must not be negative");
	if ((o->in.nbinds > 0 || o->in.ndims > 0) && !o->verify)
		usage_error(synopsis, "-i and --dim need --verify");
	if (o->timeout > 0 && !o->verify)
		usage_error(synopsis, "--timeout needs --verify");
	struct ml_err err = { 0 };
	if (ml_opt_check_names(o->oo.passes, &err) < 0 ||
	    ml_opt_check_names(o->oo.disable, &err) < 0)
		usage_error(synopsis, "%s", err.msg);
	o->input = optind < argc ? argv[optind] : "-";
	if (o->output != NULL && o->output[0] == '\0')
		usage_error(synopsis, "-o: empty file name");
	if (o->output == NULL)
		o->output = "-";
	o->to = ML_FMT_MLG;
	if (strcmp(o->output, "-") != 0) {
		const char *dot = strrchr(o->output, '.'), *slash = strrchr(o->output, '/');
		if (dot != NULL && (slash == NULL || dot > slash) &&
		    ml_format_from_name(dot + 1) != ML_FMT_AUTO)
			o->to = ml_format_from_name(dot + 1);
	}
	if (o->to != ML_FMT_MLT)
		refuse_tty_stdout(o->output, o->force);
}

/*
 * verify_setup: --verify: run g as read on the inputs (random for those
 * not given) and keep its outputs as the reference every pass is checked
 * against; dies when the graph as read does not run.
 */
static void
verify_setup(struct verify *v, struct opts *o, struct ml_graph *g)
{
	struct ml_err err = { 0 };
	o->in.random = true;
	v->n = g->n_outputs;
	v->ref = calloc((size_t)v->n + 1, sizeof *v->ref);
	v->names = calloc((size_t)v->n + 1, sizeof *v->names);
	if (v->ref == NULL || v->names == NULL)
		die(EXIT_FAIL, "out of memory");
	for (int i = 0; i < v->n; i++)
		v->names[i] = strdup(g->tensors[g->outputs[i]]->name);
	if (run_graph(v, g, v->ref, &err) < 0) {
		ml_err_prefix(&err, "--verify: the graph as read");
		die_err(&err);
	}
	o->oo.check = check_pass;
	o->oo.check_ctx = v;
	/* the passes are slow only when each is verified */
	cli_progress_setup(o->progress, o->quiet);
	o->oo.progress = cli_progress();
}

/* verify_free: release what verify_setup kept. */
static void
verify_free(struct verify *v)
{
	for (int i = 0; i < v->n; i++) {
		ml_tval_clear(&v->ref[i]);
		free(v->names[i]);
	}
	free(v->ref);
	free(v->names);
}

int
main(int argc, char **argv)
{
	struct opts o = { .oo.level = 2, .rtol = 1e-4, .atol = 1e-5 };

	cli_init(argc, argv);
	parse_args(&o, argc, argv);
	if (o.version) {
		print_version(o.verbose);
		return finish_stdout();
	}
	if (o.list) {
		if (optind < argc)
			usage_error(synopsis, "--list-passes takes no operand");
		list_passes(o.json);
		return finish_stdout();
	}
	check_args(&o, argc, argv);

	struct ml_err err = { 0 };
	struct ml_graph *g = NULL;
	bool talk = o.verbose && !o.quiet;
	cli_set_timeout(o.timeout);
	double t0 = ml_now();
	if (ml_model_load(&g, o.input, ML_FMT_AUTO, &err) < 0)
		die_err(&err);
	cli_apply_shapes(g, o.input, &o.shapes, talk);
	const char *shown_in = strcmp(o.input, "-") == 0 ? "<stdin>" : o.input;
	if (talk)
		fprintf(stderr, "%s: read %s: %d nodes (%.1f ms)\n", progname, shown_in, g->n_nodes,
			(ml_now() - t0) * 1e3);

	struct verify v = { .path = shown_in, .in = &o.in, .rtol = o.rtol, .atol = o.atol,
			    .verbose = talk };
	if (o.verify)
		verify_setup(&v, &o, g);
	struct ml_opt_report r = { 0 };
	double t1 = ml_now();
	if (ml_opt_run(g, &o.oo, &r, &err) < 0) {
		if (v.broke)
			die(EXIT_FAIL, "%s: %s", shown_in, err.msg);
		die_err(&err);
	}
	cli_progress_end(true);
	if (talk)
		fprintf(stderr, "%s: %d -> %d nodes in %d rounds (%.1f ms)%s\n", progname,
			r.nodes_before, r.nodes_after, r.rounds, (ml_now() - t1) * 1e3,
			o.verify ? ", every pass verified" : "");
	cli_commit();
	double t2 = ml_now();
	if (ml_model_save(g, o.output, o.to, &err) < 0)
		die_err(&err);
	if (talk)
		fprintf(stderr, "%s: wrote %s as %s: %d nodes (%.1f ms)\n", progname,
			strcmp(o.output, "-") == 0 ? "<stdout>" : o.output,
			o.to == ML_FMT_ONNX ? "onnx" : o.to == ML_FMT_MLT ? "mlt" : "mlg",
			g->n_nodes, (ml_now() - t2) * 1e3);
	if (o.report && !o.quiet) {
		FILE *fp = strcmp(o.output, "-") == 0 ? stderr : stdout;
		print_report(fp, &r, o.json, o.oo.level, o.oo.passes);
	}
	ml_opt_report_free(&r);
	verify_free(&v);
	ml_graph_free(g);
	cli_inputs_free(&o.in);
	cli_shapes_free(&o.shapes);
	return finish_stdout();
}
