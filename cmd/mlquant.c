/*
 * mlquant.c: quantise a model: int8 with calibration (integer ops or QDQ),
 * weights only, or fp16/bf16; reads and writes graph files through pipes.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char synopsis[] =
	"mlquant [-fqv] [-c DATA] [--samples N] [--method minmax|percentile|entropy]\n"
	"               [--percentile P] [--dtype uint8|int8|fp16|bf16] [--qdq | --dynamic]\n"
	"               [--pow2] [--reduce-range] [--exclude NODES]... [--budget DB]\n"
	"               [--report] [--json] [--threads N] [--max-alloc SIZE] [--shape NAME=DIMS]...\n"
	"               [--[no-]progress] [-o OUTPUT]\n"
	"               [MODEL | -]";

static const char help_text[] =
	"Quantise a model (.mlg, .onnx or .mlt; '-' reads stdin) and write it\n"
	"(.mlg unless OUTPUT ends in .onnx or .mlt; '-' or no -o writes stdout).\n"
	"\n"
	"  -c, --calib DATA        calibration data: a .npy (samples along the first dim),\n"
	"                          a .npz (one array per input name) or a dataset folder\n"
	"                          (IDX, .npy/.npz, CSV)\n"
	"      --samples N         use at most N calibration samples (default 256)\n"
	"      --method M          activation ranges by minmax, percentile or entropy\n"
	"                          (KL divergence); default minmax\n"
	"      --percentile P      the percentile of |x| for --method percentile (99.99)\n"
	"      --dtype T           uint8 (asymmetric activations, default), int8 (symmetric\n"
	"                          activations), fp16 or bf16 (16-bit weights, no calibration)\n"
	"      --qdq               QuantizeLinear/DequantizeLinear form (exports to ONNX)\n"
	"                          instead of the project's int8 ops\n"
	"      --dynamic           quantise weights only (no calibration)\n"
	"      --pow2              power-of-two weight levels (non-uniform)\n"
	"      --reduce-range      7-bit weights: less accurate, about twice as fast on\n"
	"                          CPUs without VNNI (AVX2)\n"
	"      --exclude NODES     comma-separated node or output names that stay float\n"
	"      --budget DB         keep the output SQNR at least DB decibels: layers slower\n"
	"                          in int8, then the least accurate ones, stay float; the\n"
	"                          float model is written if int8 is not faster\n"
	"      --report            print the per-layer report (SQNR, size, time): on stdout\n"
	"                          with -o FILE, on stderr when the model goes to stdout\n"
	"      --json              the report as JSON (implies --report)\n"
	"      --shape NAME=DIMS   give input NAME the shape DIMS (4x3x224x224, a name such\n"
	"                          as N making a dim symbolic) and infer the model again,\n"
	"                          rewriting Reshape targets that hold the old sizes\n"
	"      --threads N         threads for kernels and BLAS (default: all cores)\n"
	"      --max-alloc SIZE    allocate at most SIZE bytes (K, M, G suffixes)\n"
	"      --progress          draw the progress bar of calibration, measuring and the\n"
	"                          --budget search on stderr even when it is no terminal\n"
	"      --no-progress       draw no progress bar (the default unless on a terminal)\n"
	"  -o, --output OUTPUT     write the quantised model to OUTPUT\n"
	"  -f, --force             write binary output to a terminal\n"
	"  -q, --quiet             print nothing but errors\n"
	"  -v, --verbose           say what was read and written and how many layers\n"
	"                          were quantised, on stderr\n"
	"  -h, --help              print this help and exit\n"
	"  -V, --version           print the version and exit\n";

enum {
	OPT_BUDGET = 256, OPT_DTYPE, OPT_DYNAMIC, OPT_EXCLUDE, OPT_JSON, OPT_MAX_ALLOC, OPT_METHOD,
	OPT_PERCENTILE, OPT_POW2, OPT_QDQ, OPT_REDUCE, OPT_REPORT, OPT_SAMPLES, OPT_THREADS,
	OPT_SHAPE,
};

/*
 * print_report: --report and --json: the per-layer report on fp (stdout,
 * or stderr when the model goes to stdout: the rule of every tool).
 */
static void
print_report(FILE *fp, const struct ml_quant_report *r, bool json)
{

	if (json) {
		fprintf(fp, "{\"output_sqnr_db\": %.2f, \"bytes_in\": %lld, \"bytes_out\": %lld, "
			"\"rounds\": %d, ", r->out_sqnr_db, (long long)r->bytes_in,
			(long long)r->bytes_out, r->rounds);
		if (r->ms_f32 > 0)
			fprintf(fp, "\"ms_f32\": %.4f, \"ms_q\": %.4f, \"kept_f32\": %s, ", r->ms_f32,
				r->ms_q, r->kept_f32 ? "true" : "false");
		fprintf(fp, "\"layers\": [");
		for (int i = 0; i < r->n; i++) {
			const struct ml_quant_layer *L = &r->layers[i];
			fprintf(fp, "%s{\"name\": ", i ? ", " : "");
			ml_json_str(fp, L->name);
			fprintf(fp, ", \"op\": ");
			ml_json_str(fp, L->op);
			fprintf(fp, ", \"quantized\": %s, \"why\": ", L->quantized ? "true" : "false");
			ml_json_str(fp, L->why);
			fprintf(fp, ", \"weight_sqnr_db\": %.2f, \"bytes_f32\": %lld, \"bytes_q\": %lld, "
				"\"us_f32\": %.1f, \"us_q\": %.1f}", L->sqnr_db, (long long)L->bytes_f32,
				(long long)L->bytes_q, L->us_f32, L->us_q);
		}
		fprintf(fp, "]}\n");
		return;
	}
	fprintf(fp, "%-32s %-22s %-6s %9s %10s %10s %9s %9s\n", "layer", "op", "form", "wSQNR dB",
		"f32 bytes", "q bytes", "f32 us", "q us");
	for (int i = 0; i < r->n; i++) {
		const struct ml_quant_layer *L = &r->layers[i];
		fprintf(fp, "%-32.32s %-22.22s %-6s %9.1f %10lld %10lld %9.1f %9.1f%s%s\n", L->name,
			L->op, L->quantized ? "int8" : "float", L->sqnr_db, (long long)L->bytes_f32,
			(long long)L->bytes_q, L->us_f32, L->us_q, L->why[0] ? "  " : "", L->why);
	}
	fprintf(fp, "constants %lld -> %lld bytes (%.3fx)", (long long)r->bytes_in,
		(long long)r->bytes_out, r->bytes_in > 0 ? (double)r->bytes_out / r->bytes_in : 0.0);
	if (r->out_sqnr_db != 0)
		fprintf(fp, ", output SQNR %.1f dB", r->out_sqnr_db);
	if (r->rounds > 0)
		fprintf(fp, ", %d budget rounds", r->rounds);
	fprintf(fp, "\n");
}

/*
 * print_budget: what --budget did with the whole-model latencies: kept
 * the int8 model, or wrote the float one because int8 was not faster.
 */
static void
print_budget(const struct ml_quant_report *r)
{
	if (r->ms_f32 <= 0)
		return;
	if (r->kept_f32)
		fprintf(stderr, "%s: --budget: the int8 model is not faster than the float one on "
			"this CPU (%.3f ms against %.3f ms): wrote the float model\n", progname,
			r->ms_q, r->ms_f32);
	else
		fprintf(stderr, "%s: --budget: int8 %.3f ms against float %.3f ms (%.2fx): wrote "
			"the int8 model\n", progname, r->ms_q, r->ms_f32, r->ms_q / r->ms_f32);
}

/*
 * fake_latency: ML_QUANT_FAKE_LATENCY=F,Q (milliseconds), for tests of
 * --budget's decision without timing: reports F for the float model and Q
 * for the quantised one.
 */
static int
fake_latency(void *ctx, const struct ml_graph *f, const struct ml_graph *q,
	     const struct ml_calib *cal, double *ms_f, double *ms_q, struct ml_err *e)
{
	const double *v = ctx;
	(void)f, (void)q, (void)cal, (void)e;
	*ms_f = v[0];
	*ms_q = v[1];
	return 0;
}

/* The options of one run, as parsed. */
struct opts {
	struct ml_quant_opts q;
	struct cli_shapes shapes;	/* --shape */
	const char *calib, *output, *path;
	const char **excl;
	int nexcl, verbose, quiet, threads, progress;
	bool force, version, report, json, qdq, dynamic;
	int64_t samples;
	int half;
};

/* parse_dtype: --dtype T into o (the activations' sign, or a 16-bit form). */
static void
parse_dtype(struct opts *o, const char *s)
{
	if (strcmp(s, "uint8") == 0 || strcmp(s, "u8") == 0)
		o->q.act_signed = false;
	else if (strcmp(s, "int8") == 0 || strcmp(s, "i8") == 0)
		o->q.act_signed = true;
	else if (strcmp(s, "fp16") == 0 || strcmp(s, "f16") == 0)
		o->half = ML_QFORM_F16;
	else if (strcmp(s, "bf16") == 0)
		o->half = ML_QFORM_BF16;
	else
		usage_error(synopsis, "unknown dtype '%s' (uint8, int8, fp16, bf16)", s);
}

/* parse_method: --method M into o. */
static void
parse_method(struct opts *o, const char *s)
{
	if (strcmp(s, "minmax") == 0)
		o->q.method = ML_CALIB_MINMAX;
	else if (strcmp(s, "percentile") == 0)
		o->q.method = ML_CALIB_PERCENTILE;
	else if (strcmp(s, "entropy") == 0 || strcmp(s, "kl") == 0)
		o->q.method = ML_CALIB_ENTROPY;
	else
		usage_error(synopsis, "unknown method '%s' (minmax, percentile, entropy)", s);
}

/* add_excludes: the names of one --exclude LIST (split in place; empty ones skipped). */
static void
add_excludes(struct opts *o, char *s)
{
	char *tok;
	while ((tok = strsep(&s, ",")) != NULL) {
		if (*tok == '\0')
			continue;
		const char **n = realloc(o->excl, sizeof *o->excl * (size_t)(o->nexcl + 1));
		if (n == NULL)
			die(EXIT_FAIL, "out of memory");
		o->excl = n;
		o->excl[o->nexcl++] = tok;
	}
}

/* parse_args: read argv into o; usage errors exit 2, -h exits 0. */
static void
parse_args(struct opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "budget", required_argument, NULL, OPT_BUDGET },
		{ "calib", required_argument, NULL, 'c' },
		{ "dtype", required_argument, NULL, OPT_DTYPE },
		{ "dynamic", no_argument, NULL, OPT_DYNAMIC },
		{ "exclude", required_argument, NULL, OPT_EXCLUDE },
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "max-alloc", required_argument, NULL, OPT_MAX_ALLOC },
		{ "method", required_argument, NULL, OPT_METHOD },
		{ "no-progress", no_argument, NULL, CLI_OPT_NO_PROGRESS },
		{ "output", required_argument, NULL, 'o' },
		{ "percentile", required_argument, NULL, OPT_PERCENTILE },
		{ "pow2", no_argument, NULL, OPT_POW2 },
		{ "progress", no_argument, NULL, CLI_OPT_PROGRESS },
		{ "reduce-range", no_argument, NULL, OPT_REDUCE },
		{ "qdq", no_argument, NULL, OPT_QDQ },
		{ "quiet", no_argument, NULL, 'q' },
		{ "report", no_argument, NULL, OPT_REPORT },
		{ "samples", required_argument, NULL, OPT_SAMPLES },
		{ "shape", required_argument, NULL, OPT_SHAPE },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "c:fho:qvV", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->calib = optarg;
			break;
		case 'f':
			o->force = true;
			break;
		case 'h':
			show_help(synopsis, help_text);
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
		case OPT_BUDGET:
			o->q.budget = parse_double("--budget", optarg, synopsis);
			if (o->q.budget <= 0)
				usage_error(synopsis, "--budget must be positive");
			break;
		case OPT_DTYPE:
			parse_dtype(o, optarg);
			break;
		case OPT_DYNAMIC:
			o->dynamic = true;
			break;
		case OPT_EXCLUDE:
			add_excludes(o, optarg);
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_MAX_ALLOC:
			ml_set_alloc_cap(parse_size("--max-alloc", optarg, synopsis));
			break;
		case OPT_METHOD:
			parse_method(o, optarg);
			break;
		case OPT_PERCENTILE:
			o->q.percentile = parse_double("--percentile", optarg, synopsis);
			if (o->q.percentile <= 50 || o->q.percentile > 100)
				usage_error(synopsis, "--percentile must be in (50, 100]");
			break;
		case OPT_REDUCE:
			o->q.reduce_range = true;
			break;
		case OPT_POW2:
			o->q.pow2 = true;
			break;
		case CLI_OPT_PROGRESS:
			o->progress = CLI_PROGRESS_ON;
			break;
		case CLI_OPT_NO_PROGRESS:
			o->progress = CLI_PROGRESS_OFF;
			break;
		case OPT_QDQ:
			o->qdq = true;
			break;
		case OPT_REPORT:
			o->report = true;
			break;
		case OPT_SHAPE:
			cli_add_shape(&o->shapes, optarg, synopsis);
			break;
		case OPT_SAMPLES:
			o->samples = parse_int("--samples", optarg, 1, 1000000000, synopsis);
			break;
		case OPT_THREADS:
			o->threads = (int)parse_int("--threads", optarg, 1, 256, synopsis);
			break;
		default:
			fprintf(stderr, "usage: %s\n", synopsis);
			exit(EXIT_USAGE);
		}
	}
}

/*
 * check_args: the operand and the combinations parse_args cannot see; sets
 * the quantiser's form and report options from them.
 */
static void
check_args(struct opts *o, int argc, char **argv)
{
	if (optind + 1 < argc)
		usage_error(synopsis, "too many operands");
	o->path = optind < argc ? argv[optind] : "-";
	if (o->qdq && o->dynamic)
		usage_error(synopsis, "--qdq and --dynamic exclude each other");
	if (o->half && (o->qdq || o->dynamic))
		usage_error(synopsis, "--dtype %s takes no --qdq or --dynamic",
			    o->half == ML_QFORM_F16 ? "fp16" : "bf16");
	if (o->half)
		o->q.form = o->half;
	else
		o->q.form = o->qdq ? ML_QFORM_QDQ : o->dynamic ? ML_QFORM_DYNAMIC : ML_QFORM_INT;
	if (o->calib != NULL && strcmp(o->calib, "-") == 0 && strcmp(o->path, "-") == 0)
		usage_error(synopsis, "the model and the calibration data cannot both be stdin");
	if (o->q.reduce_range && o->q.form != ML_QFORM_INT)
		usage_error(synopsis, "--reduce-range is for the int8 ops (not --qdq, --dynamic, "
			    "fp16 or bf16)");
	o->q.exclude = o->excl;
	o->q.n_exclude = o->nexcl;
	o->q.measure = o->report || o->json;
	o->q.verbose = o->verbose;
	cli_progress_setup(o->progress, o->quiet);
	o->q.progress = cli_progress();
	const char *fake = getenv("ML_QUANT_FAKE_LATENCY");
	if (fake != NULL && fake[0] != '\0') {
		static double fv[2];
		char *end;
		fv[0] = strtod(fake, &end);
		if (*end == ',')
			fv[1] = strtod(end + 1, &end);
		if (*end != '\0' || !(fv[0] > 0) || !(fv[1] > 0))
			usage_error(synopsis, "ML_QUANT_FAKE_LATENCY must be F,Q (two positive "
				    "milliseconds), not '%s'", fake);
		o->q.latency = fake_latency;
		o->q.latency_ctx = fv;
	}
}

/* has_fakequant: whether g was trained with mltrain --qat (its ranges are in FakeQuant nodes). */
static bool
has_fakequant(const struct ml_graph *g)
{
	for (int i = 0; i < g->n_nodes; i++)
		if (strcmp(g->nodes[i].op_type, "FakeQuant") == 0 &&
		    strcmp(g->nodes[i].domain, "ml") == 0)
			return true;
	return false;
}

/* warn_fused: mlopt's fused nodes that the quantiser does not split stay float: say so. */
static void
warn_fused(const struct ml_graph *q)
{
	int nfused = 0;
	const char *fname = NULL;
	for (int i = 0; i < q->n_nodes; i++)
		if (strcmp(q->nodes[i].domain, "ml") == 0 &&
		    strncmp(q->nodes[i].op_type, "Fused", 5) == 0 && nfused++ == 0)
			fname = q->nodes[i].name;
	if (nfused > 0)
		fprintf(stderr, "%s: %d fused node%s (%s%s) stay%s float: quantise before mlopt to "
			"quantise them\n", progname, nfused, nfused > 1 ? "s" : "",
			fname != NULL ? fname : "?", nfused > 1 ? ", ..." : "",
			nfused > 1 ? "" : "s");
}

/* print_summary: -v's line: how many layers went int8 and the constants' sizes. */
static void
print_summary(const struct ml_quant_report *rep)
{
	int nq = 0;
	for (int i = 0; i < rep->n; i++)
		nq += rep->layers[i].quantized;
	fprintf(stderr, "%s: %d of %d layers quantised, constants %lld -> %lld bytes\n", progname,
		nq, rep->n, (long long)rep->bytes_in, (long long)rep->bytes_out);
}

int
main(int argc, char **argv)
{
	struct opts o = { .q = { .form = ML_QFORM_INT, .method = ML_CALIB_MINMAX },
			  .output = "-", .samples = 256 };

	cli_init(argc, argv);
	parse_args(&o, argc, argv);
	if (o.version) {
		print_version(o.verbose);
		return finish_stdout();
	}
	check_args(&o, argc, argv);
	bool needcal = o.q.form == ML_QFORM_INT || o.q.form == ML_QFORM_QDQ;
	refuse_tty_stdout(o.output, o.force);
	ml_set_threads(o.threads);

	struct ml_err err = { 0 };
	struct ml_graph *g = NULL, *q = NULL;
	struct ml_calib *cal = NULL;
	struct ml_quant_report rep = { 0 };
	bool talk = o.verbose && !o.quiet;
	const char *shown_in = strcmp(o.path, "-") == 0 ? "<stdin>" : o.path;
	double t0 = ml_now();
	if (ml_model_load(&g, o.path, ML_FMT_AUTO, &err) < 0)
		die_err(&err);
	if (talk)
		fprintf(stderr, "%s: read %s: %d nodes (%.1f ms)\n", progname, shown_in, g->n_nodes,
			(ml_now() - t0) * 1e3);
	cli_apply_shapes(g, o.path, &o.shapes, o.verbose && !o.quiet);
	if (needcal && o.calib == NULL && !has_fakequant(g))
		usage_error(synopsis, "int8 activations need calibration data (-c DATA), "
			    "or use --dynamic or --dtype fp16");
	if (o.calib != NULL && ml_calib_load(&cal, g, o.calib, o.samples, &err) < 0)
		die_err(&err);
	if (ml_quantize(&q, g, cal, &o.q, &rep, &err) < 0) {
		ml_err_prefix(&err, shown_in);
		die_err(&err);
	}
	cli_progress_end(true);
	enum ml_format fmt = strcmp(o.output, "-") == 0 ? ML_FMT_MLG :
							  ml_format_from_name(o.output);
	if (fmt == ML_FMT_AUTO)
		fmt = ML_FMT_MLG;
	t0 = ml_now();
	if (ml_model_save(q, o.output, fmt, &err) < 0)
		die_err(&err);
	if (talk)
		fprintf(stderr, "%s: wrote %s as %s: %d nodes (%.1f ms)\n", progname,
			strcmp(o.output, "-") == 0 ? "<stdout>" : o.output,
			fmt == ML_FMT_ONNX ? "onnx" : fmt == ML_FMT_MLT ? "mlt" : "mlg", q->n_nodes,
			(ml_now() - t0) * 1e3);
	if ((o.report || o.json) && !o.quiet)
		print_report(strcmp(o.output, "-") == 0 ? stderr : stdout, &rep, o.json);
	if (!o.quiet)
		print_budget(&rep);
	/* bf16 and fp16 keep the fused nodes, whose kernels take the 16-bit weights */
	if (!o.quiet && !rep.kept_f32 && o.q.form != ML_QFORM_BF16 && o.q.form != ML_QFORM_F16)
		warn_fused(q);
	if (talk)
		print_summary(&rep);
	ml_quant_report_free(&rep);
	ml_calib_free(cal);
	ml_graph_free(q);
	ml_graph_free(g);
	free(o.excl);
	cli_shapes_free(&o.shapes);
	return finish_stdout();
}
