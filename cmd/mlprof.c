/*
 * mlprof.c: profile a model: time every node over repeated runs and report
 * a table, CSV or JSON, a trace-event file, an SVG picture, the memory plan
 * and a cost model; `mlprof diff` compares two JSON reports.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char synopsis[] =
	"mlprof [-qv] [--device DEV] [--threads N] [-i NAME=FILE.npy]... [--random [--seed S]]\n"
	"              [--dim NAME=N]... [--shape NAME=DIMS]... [--repeat N] [--warmup K]\n"
	"              [--sort KEY] [--top N]\n"
	"              [--group BY] [--json | --csv] [--memory] [--trace FILE] [--svg FILE]\n"
	"              [--calibrate] [-o FILE] [--max-alloc SIZE] [--timeout SECS]\n"
	"              [--pipeline auto|measured|FILE [--micro-batches M] [--schedule S]]\n"
	"              [--[no-]progress] [MODEL | -]\n"
	"       mlprof diff [-fq] [--threshold PCT] [--top N] [--json] A.json B.json\n"
	"       mlprof --devices [--json]";

static const char diff_synopsis[] =
	"mlprof diff [-fq] [--threshold PCT] [--top N] [--json] A.json B.json";

static const char help_text[] =
	"Time every node of a model (.mlg, .onnx or .mlt; '-' reads stdin) over\n"
	"repeated runs and print one row per node, largest total time first.\n"
	"\n"
	"  -i, --input NAME=FILE   bind graph input NAME to a .npy file; FILE may also be\n"
	"                          zeros, ones or random (shape from the model)\n"
	"      --random            make every input not given with -i from random numbers\n"
	"      --seed S            seed for --random (default 0)\n"
	"      --dim NAME=N        size of symbolic dim NAME for made-up inputs (default 1)\n"
	"      --shape NAME=DIMS   give input NAME the shape DIMS (4x3x224x224, a name such\n"
	"                          as N making a dim symbolic) and infer the model again,\n"
	"                          rewriting Reshape targets that hold the old sizes\n"
	"      --repeat N          timed runs (default 10)\n"
	"      --warmup K          untimed runs before the timed ones (default 1)\n"
	"      --sort KEY          row order: time (default), median, order, name, op,\n"
	"                          flops, bytes, gflops or gbps\n"
	"      --top N             print only the first N rows\n"
	"      --group BY          one row per node (default), op, prefix[:DEPTH] or phase\n"
	"      --json              print the JSON report (what mlprof diff reads)\n"
	"      --csv               print the rows as CSV\n"
	"      --memory            add the memory plan and tensor lifetimes to the table\n"
	"      --trace FILE        write a Chrome trace-event file (Perfetto, chrome://tracing);\n"
	"                          '-': stdout, and the report goes to stderr\n"
	"      --svg FILE          write an SVG timeline and bar chart of the time, with a\n"
	"                          legend of its colours ('-': as --trace -)\n"
	"      --calibrate         write the cost model of the run (for mlrun --device auto)\n"
	"  -o, --output FILE       write the report, or with --calibrate the cost model, to FILE\n"
	"      --max-alloc SIZE    allocate at most SIZE bytes (K, M, G suffixes;\n"
	"                          default ML_MAX_ALLOC or 16G)\n"
	"      --threads N         threads for kernels and BLAS (default: all cores)\n"
	"      --timeout SECS      stop with status 1 when profiling takes over SECS seconds\n"
	"      --progress          draw a progress bar of the runs on stderr even when it is\n"
	"                          no terminal\n"
	"      --no-progress       draw no progress bar (the default unless on a terminal)\n"
	"      --device DEV        cpu (default), cl, cl:N, auto, or all: each device in turn;\n"
	"                          with --pipeline, one device a stage (cpu,cl:0)\n"
	"      --pipeline STAGES   profile a training step (mltrain --dump-step) run as\n"
	"                          mltrain --pipeline runs it: STAGES is auto, measured\n"
	"                          or a stage file; one row (and one --trace lane) a stage,\n"
	"                          and the bubble fraction; the batch is --dim's (default 1)\n"
	"      --micro-batches M   with --pipeline: micro-batches a batch (default 4)\n"
	"      --schedule S        with --pipeline: gpipe (default) or 1f1b\n"
	"      --devices           list the devices as mlrun --devices does (--json: as\n"
	"                          JSON) and exit; status 3 without an OpenCL device\n"
	"  -q, --quiet             print nothing but errors\n"
	"  -v, --verbose           print more (each run's time, on stderr)\n"
	"  -h, --help              print this help and exit\n"
	"  -V, --version           print the version and exit\n"
	"\n"
	"mlprof diff compares two --json reports, a baseline A and B, per node and in total\n"
	"with 95% confidence intervals, and exits 1 when the total is slower beyond noise\n"
	"and beyond the threshold:\n"
	"      --threshold PCT     the slowdown of the total that fails (default 5)\n"
	"  -f, --force             compare reports of different models (inputs and outputs\n"
	"                          differ; refused with status 3 otherwise), with a warning\n"
	"      --top N             print only the N nodes that changed most\n"
	"      --json              print the comparison as JSON\n";

#define MAX_DEVICES 17

/*
 * probe_devices: the ids of the devices a session can be made on (as
 * --devices lists them): the CPU, then each OpenCL device. *why gets the
 * reason when there is no OpenCL device.
 */
static int
probe_devices(char names[MAX_DEVICES][64], struct ml_err *why)
{
	struct ml_device_info *v;
	int n;
	if (ml_devices(&v, &n, why) < 0)
		die_err(why);
	if (n > MAX_DEVICES)
		n = MAX_DEVICES;
	for (int k = 0; k < n; k++)
		snprintf(names[k], 64, "%s", v[k].id);
	ml_free(v);
	return n;
}

/*
 * write_out: run fn into memory, then write it to path atomically ('-':
 * stdout; "/dev/stderr": stderr, for the report when stdout carries the
 * trace or the picture).
 */
static void
write_out(const char *path, int (*fn)(void *, FILE *, struct ml_err *), void *ctx)
{
	struct ml_err err = { 0 };
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);
	if (fp == NULL)
		die(EXIT_FAIL, "out of memory");
	int rc = fn(ctx, fp, &err);
	if (fclose(fp) != 0 && rc == 0)
		rc = ml_fail(&err, ML_ENOMEM, "out of memory");
	bool err_stream = strcmp(path, "/dev/stderr") == 0;
	if (rc == 0 && (strcmp(path, "-") == 0 || err_stream)) {
		if (fwrite(buf, 1, len, err_stream ? stderr : stdout) != len)
			rc = ml_fail(&err, ML_EIO, "write error: %s", strerror(errno));
	} else if (rc == 0) {
		rc = ml_write_atomic(path, buf, len, &err);
	}
	free(buf);
	if (rc < 0)
		die_err(&err);
}

struct job {
	struct ml_prof **ps;
	int n;
	struct ml_prof_opts *o;
	int what;
};

enum { OUT_TABLE, OUT_JSON, OUT_CSV, OUT_TRACE, OUT_SVG, OUT_COST };

static int
emit(void *ctx, FILE *fp, struct ml_err *e)
{
	struct job *j = ctx;
	switch (j->what) {
	case OUT_JSON: return ml_prof_write_json(j->ps, j->n, j->o, fp, e);
	case OUT_CSV: return ml_prof_write_csv(j->ps[0], j->o, fp, e);
	case OUT_TRACE: return ml_prof_write_trace(j->ps, j->n, j->o, fp, e);
	case OUT_SVG: return ml_prof_write_svg(j->ps[0], j->o, fp, e);
	case OUT_COST: return ml_prof_write_costmodel(j->ps, j->n, j->o, fp, e);
	default: return ml_prof_write_table(j->ps, j->n, j->o, fp, e);
	}
}

/* mkdirs: make every folder of path's parent; die with status 1 when one cannot be made. */
static void
mkdirs(const char *path)
{
	char buf[4096];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0777) < 0 && errno != EEXIST)
			die(EXIT_FAIL, "cannot create '%s': %s", buf, strerror(errno));
		*p = '/';
	}
}

static int
diff_main(int argc, char **argv)
{
	enum { OPT_THRESHOLD = 256, OPT_TOP, OPT_JSON };
	static const struct option longopts[] = {
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "quiet", no_argument, NULL, 'q' },
		{ "threshold", required_argument, NULL, OPT_THRESHOLD },
		{ "top", required_argument, NULL, OPT_TOP },
		{ NULL, 0, NULL, 0 },
	};
	struct ml_prof_diff_opts o = { .threshold = 0.05 };
	struct ml_err err = { 0 };
	bool quiet = false, regressed = false;
	int c;

	argv[0] = (char *)progname;	/* getopt's messages name the tool, not "diff" */
	while ((c = getopt_long(argc, argv, "fhq", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			o.force = true;
			break;
		case 'h':
			show_help(synopsis, help_text);
		case 'q':
			quiet = true;
			break;
		case OPT_JSON:
			o.as_json = true;
			break;
		case OPT_THRESHOLD: {
			char tmp[64];
			size_t n = strlen(optarg);
			snprintf(tmp, sizeof tmp, "%s", optarg);
			if (n > 0 && n < sizeof tmp && tmp[n - 1] == '%')
				tmp[n - 1] = '\0';
			o.threshold = parse_double("--threshold", tmp, diff_synopsis) / 100;
			if (o.threshold < 0)
				usage_error(diff_synopsis, "--threshold: '%s' is negative", optarg);
			break;
		}
		case OPT_TOP:
			o.top = parse_int("--top", optarg, 1, INT32_MAX, diff_synopsis);
			break;
		default:
			fprintf(stderr, "usage: %s\n", diff_synopsis);
			exit(EXIT_USAGE);
		}
	}
	if (argc - optind != 2)
		usage_error(diff_synopsis, "diff needs two reports, A.json and B.json");
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);
	if (fp == NULL)
		die(EXIT_FAIL, "out of memory");
	int rc = ml_prof_diff(argv[optind], argv[optind + 1], &o, fp, &regressed, &err);
	fclose(fp);
	if (rc < 0)
		die_err(&err);
	if (err.msg[0] != '\0' && !quiet)
		warnx("%s", err.msg);	/* --force: the models differ */
	if (!quiet)
		fwrite(buf, 1, len, stdout);
	free(buf);
	finish_stdout();
	if (regressed) {
		warnx("%s is slower than %s beyond the %g%% threshold", argv[optind + 1], argv[optind],
		      o.threshold * 100);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

static int
parse_group(const char *s, int *depth)
{
	*depth = 1;
	if (strcmp(s, "node") == 0)
		return ML_PROF_BY_NODE;
	if (strcmp(s, "op") == 0)
		return ML_PROF_BY_OP;
	if (strcmp(s, "phase") == 0)
		return ML_PROF_BY_PHASE;
	if (strcmp(s, "prefix") == 0)
		return ML_PROF_BY_PREFIX;
	if (strncmp(s, "prefix:", 7) == 0) {
		*depth = (int)parse_int("--group", s + 7, 1, 64, synopsis);
		return ML_PROF_BY_PREFIX;
	}
	usage_error(synopsis, "--group: '%s' is not node, op, prefix[:DEPTH] or phase", s);
}

/* The options of one run, as parsed. */
struct opts {
	struct cli_inputs in;
	struct cli_shapes shapes;	/* --shape */
	struct ml_prof_opts po;
	int verbose, quiet, threads, fmt, progress;
	int64_t repeat, warmup;
	double timeout;
	const char *device, *outpath, *trace, *svg, *path;
	const char *pipeline;	/* --pipeline: auto or a stage file */
	int micro, psched;
	bool version, calibrate, list_devices;
	bool report_stderr;	/* the trace or the picture goes to stdout: the report to stderr */
	char costpath[4096];	/* --calibrate: where the cost model goes */
	bool cost_default;	/* costpath is the default one (its folders may need making) */
};

/* parse_args: read argv into o; usage errors exit 2, -h exits 0. */
static void
parse_args(struct opts *o, int argc, char **argv)
{
	enum { OPT_RANDOM = 256, OPT_SEED, OPT_REPEAT, OPT_WARMUP, OPT_JSON, OPT_THREADS,
	       OPT_DEVICE, OPT_DIM, OPT_CSV, OPT_SORT, OPT_TOP, OPT_GROUP, OPT_MEMORY, OPT_TRACE,
	       OPT_SVG, OPT_CALIBRATE, OPT_DEVICES, OPT_MAX_ALLOC, OPT_TIMEOUT, OPT_SHAPE,
	       OPT_PIPE, OPT_MICRO, OPT_PSCHED };
	static const struct option longopts[] = {
		{ "calibrate", no_argument, NULL, OPT_CALIBRATE },
		{ "csv", no_argument, NULL, OPT_CSV },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "devices", no_argument, NULL, OPT_DEVICES },
		{ "dim", required_argument, NULL, OPT_DIM },
		{ "group", required_argument, NULL, OPT_GROUP },
		{ "help", no_argument, NULL, 'h' },
		{ "input", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "max-alloc", required_argument, NULL, OPT_MAX_ALLOC },
		{ "memory", no_argument, NULL, OPT_MEMORY },
		{ "no-progress", no_argument, NULL, CLI_OPT_NO_PROGRESS },
		{ "output", required_argument, NULL, 'o' },
		{ "progress", no_argument, NULL, CLI_OPT_PROGRESS },
		{ "micro-batches", required_argument, NULL, OPT_MICRO },
		{ "pipeline", required_argument, NULL, OPT_PIPE },
		{ "schedule", required_argument, NULL, OPT_PSCHED },
		{ "quiet", no_argument, NULL, 'q' },
		{ "random", no_argument, NULL, OPT_RANDOM },
		{ "repeat", required_argument, NULL, OPT_REPEAT },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "shape", required_argument, NULL, OPT_SHAPE },
		{ "sort", required_argument, NULL, OPT_SORT },
		{ "svg", required_argument, NULL, OPT_SVG },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "top", required_argument, NULL, OPT_TOP },
		{ "trace", required_argument, NULL, OPT_TRACE },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ "warmup", required_argument, NULL, OPT_WARMUP },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "hi:o:qvV", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			show_help(synopsis, help_text);
		case 'i':
			cli_add_input(&o->in, optarg, synopsis);
			break;
		case 'o':
			o->outpath = optarg;
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
		case OPT_CALIBRATE:
			o->calibrate = true;
			break;
		case OPT_CSV:
		case OPT_JSON:
			if (o->fmt != OUT_TABLE && o->fmt != (c == OPT_CSV ? OUT_CSV : OUT_JSON))
				usage_error(synopsis, "--json and --csv exclude each other");
			o->fmt = c == OPT_CSV ? OUT_CSV : OUT_JSON;
			break;
		case OPT_DEVICE:
			o->device = optarg;
			break;
		case OPT_DEVICES:
			o->list_devices = true;
			break;
		case OPT_PIPE:
			o->pipeline = optarg;
			break;
		case OPT_MICRO:
			o->micro = (int)parse_int("--micro-batches", optarg, 1, 4096, synopsis);
			break;
		case OPT_PSCHED:
			if ((o->psched = ml_pipe_schedule_from_name(optarg)) < 0)
				die(EXIT_USAGE, "unknown schedule '%s' (gpipe, 1f1b)", optarg);
			break;
		case OPT_SHAPE:
			cli_add_shape(&o->shapes, optarg, synopsis);
			break;
		case OPT_DIM:
			cli_add_dim(&o->in, optarg, synopsis);
			break;
		case OPT_GROUP:
			o->po.group = parse_group(optarg, &o->po.prefix_depth);
			break;
		case OPT_MAX_ALLOC:
			ml_set_alloc_cap(parse_size("--max-alloc", optarg, synopsis));
			break;
		case OPT_MEMORY:
			o->po.memory = true;
			break;
		case OPT_RANDOM:
			o->in.random = true;
			break;
		case OPT_REPEAT:
			o->repeat = parse_int("--repeat", optarg, 1, 1000000, synopsis);
			break;
		case OPT_SEED:
			o->in.seed = (uint64_t)parse_int("--seed", optarg, 0, INT64_MAX, synopsis);
			break;
		case OPT_SORT:
			if ((o->po.sort = ml_prof_sort_from_name(optarg)) < 0)
				usage_error(synopsis, "--sort: '%s' is not time, median, order, name, op, "
					    "flops, bytes, gflops or gbps", optarg);
			break;
		case OPT_SVG:
			o->svg = optarg;
			break;
		case OPT_THREADS:
			o->threads = (int)parse_int("--threads", optarg, 1, 256, synopsis);
			break;
		case OPT_TOP:
			o->po.top = parse_int("--top", optarg, 1, INT32_MAX, synopsis);
			break;
		case OPT_TRACE:
			o->trace = optarg;
			break;
		case OPT_TIMEOUT:
			o->timeout = parse_timeout(optarg, synopsis);
			break;
		case OPT_WARMUP:
			o->warmup = parse_int("--warmup", optarg, 0, 1000000000, synopsis);
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
 * list_devices: --devices: mlrun's table of the devices (--json: as JSON);
 * status 3 when there is no OpenCL device.
 */
static int
list_devices(const struct opts *o, int argc)
{
	if (optind < argc)
		usage_error(synopsis, "--devices takes no model");
	ml_set_threads(o->threads);
	int nd = cli_print_devices(o->fmt == OUT_JSON, o->verbose);
	finish_stdout();
	return nd == 1 ? EXIT_INVALID : EXIT_OK;
}

/*
 * check_args: the operand, the outputs to '-' (the trace or the picture
 * there sends the report to stderr: the rule of every tool's reports), and
 * --calibrate's file (-o FILE, else the cache folder's costmodel.json),
 * which then takes -o from the report.
 */
static void
check_args(struct opts *o, int argc, char **argv)
{
	if (optind + 1 < argc)
		usage_error(synopsis, "too many operands");
	o->path = optind < argc ? argv[optind] : "-";
	/* a trace or picture on stdout quiets the report below, not the bar on stderr */
	cli_progress_setup(o->progress, o->quiet);
	int to_stdout = (o->trace != NULL && strcmp(o->trace, "-") == 0) +
			(o->svg != NULL && strcmp(o->svg, "-") == 0);
	if (to_stdout > 1)
		usage_error(synopsis, "only one of --trace and --svg can write to '-'");
	if (to_stdout > 0 && o->outpath == NULL)
		o->report_stderr = true;	/* the trace or the picture is the output */
	if (o->pipeline == NULL && (o->micro > 0 || o->psched >= 0))
		die(EXIT_USAGE, "--micro-batches and --schedule need --pipeline");
	if (o->pipeline == NULL && strchr(o->device, ',') != NULL)
		die(EXIT_USAGE, "--device %s: a list of devices needs --pipeline", o->device);
	if (o->pipeline != NULL) {
		if (o->micro == 0)
			o->micro = 4;
		if (o->psched < 0)
			o->psched = ML_PIPE_GPIPE;
		if (o->calibrate || o->svg != NULL || o->fmt == OUT_CSV || o->po.memory)
			die(EXIT_USAGE, "--pipeline cannot combine with --calibrate, --svg, --csv or "
			    "--memory");
		if ((strcmp(o->pipeline, "auto") == 0 || strcmp(o->pipeline, "measured") == 0) &&
		    strchr(o->device, ',') == NULL)
			die(EXIT_USAGE, "--pipeline %s: give one device a stage (--device cpu,cl:0)",
			    o->pipeline);
	}
	if (!o->calibrate)
		return;
	o->cost_default = o->outpath == NULL;
	if (o->outpath != NULL) {
		snprintf(o->costpath, sizeof o->costpath, "%s", o->outpath);
	} else {
		const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
		if (xdg != NULL && xdg[0] == '/')
			snprintf(o->costpath, sizeof o->costpath, "%s/ml/costmodel.json", xdg);
		else if (home != NULL && home[0] != '\0')
			snprintf(o->costpath, sizeof o->costpath, "%s/.cache/ml/costmodel.json",
				 home);
		else
			usage_error(synopsis, "--calibrate: HOME is not set; give -o FILE");
	}
	o->outpath = NULL;
}

/*
 * pick_devices: the devices to profile on into devs, their number
 * returned: --device all gives every device found (said on stderr), else
 * the one named.
 */
static int
pick_devices(struct opts *o, char devs[MAX_DEVICES][64])
{
	if (strcmp(o->device, "all") != 0) {
		snprintf(devs[0], sizeof devs[0], "%s", o->device);
		if (strlen(o->device) >= sizeof devs[0])
			usage_error(synopsis, "--device: '%s' is not a device", o->device);
		return 1;
	}
	struct ml_err why = { 0 };
	int nd = probe_devices(devs, &why);
	if (!o->quiet || o->verbose)
		fprintf(stderr, "%s: devices: %s", progname, devs[0]);
	for (int k = 1; k < nd; k++)
		fprintf(stderr, ", %s", devs[k]);
	if (nd == 1)
		fprintf(stderr, " (no OpenCL device: %s)", why.msg[0] ? why.msg : "none found");
	fputc('\n', stderr);
	o->po.compare = true;
	return nd;
}

/* profile: the warmup and timed runs of g on device dev, recorded in a new *pp. */
static void
profile(struct ml_prof **pp, struct ml_graph *g, const char *dev, const struct opts *o)
{
	struct ml_err err = { 0 };
	struct ml_session *s = NULL;
	struct ml_session_opts so = { .device = dev, .verbose = o->verbose, .profile = true };
	if (ml_session_new(&s, g, &so, &err) < 0)
		die_err(&err);
	cli_bind_inputs(s, g, o->path, &o->in);
	if (ml_prof_new(pp, g, dev, o->repeat, &err) < 0)
		die_err(&err);
	/* the bar counts the warm-up runs and the timed ones */
	char what[96];
	int64_t total = o->warmup + o->repeat;
	snprintf(what, sizeof what, "profiling on %.63s", dev);
	cli_progress_update(what, 0, total, NULL);
	for (int64_t i = 0; i < o->warmup; i++) {
		if (ml_session_run(s, &err) < 0)
			die_err(&err);
		cli_progress_update(what, i + 1, total, NULL);
	}
	for (int64_t i = 0; i < o->repeat; i++) {
		double t0 = ml_now();
		if (ml_session_run(s, &err) < 0)
			die_err(&err);
		double wall = ml_now() - t0;
		if (ml_prof_record(*pp, s, t0, wall, &err) < 0)
			die_err(&err);
		if (o->verbose) {
			cli_progress_clear();
			fprintf(stderr, "%s: %s run %lld: %.3f ms\n", progname, dev, (long long)i,
				wall * 1e3);
		}
		cli_progress_update(what, o->warmup + i + 1, total, NULL);
	}
	cli_progress_end(true);
	ml_session_free(s);
}

/*
 * pipe_report: --pipeline's report: a row a stage (its device, forward
 * nodes, busy time a batch and its share of the wall time) and the bubble
 * fraction, as a table or JSON.
 */
struct pipe_job {
	const struct ml_pipeline *p;
	const struct opts *o;
	double wall, *busy;	/* over the timed runs */
	int64_t runs, rows;
};

static int
pipe_report(void *ctx, FILE *fp, struct ml_err *e)
{
	const struct pipe_job *j = ctx;
	int ns = ml_pipeline_stages(j->p);
	double sum = 0;
	for (int s = 0; s < ns; s++)
		sum += j->busy[s];
	double bubble = j->wall > 0 ? 1 - sum / (ns * j->wall) : 0;
	if (bubble < 0)
		bubble = 0;
	double per = 1e3 / (double)j->runs;
	if (j->o->fmt == OUT_JSON) {
		fprintf(fp, "{\"model\": ");
		ml_json_str(fp, j->o->path);
		fprintf(fp, ", \"pipeline\": {\"stages\": %d, \"micro_batches\": %d, \"batch\": "
			"%lld, \"schedule\": \"%s\", \"runs\": %lld, \"wall_ms\": %.4f, "
			"\"bubble_fraction\": %.4f, \"lanes\": [", ns, j->o->micro, (long long)j->rows,
			ml_pipe_schedule_name(j->o->psched), (long long)j->runs, j->wall * per, bubble);
		for (int s = 0; s < ns; s++) {
			struct ml_pipeline_stage_info in;
			ml_pipeline_stage(j->p, s, &in);
			fprintf(fp, "%s{\"stage\": %d, \"device\": \"%s\", \"forward_nodes\": %d, "
				"\"nodes\": %d, \"first\": ", s ? ", " : "", s, in.device, in.n_forward,
				in.n_nodes);
			ml_json_str(fp, in.first);
			fprintf(fp, ", \"last\": ");
			ml_json_str(fp, in.last);
			fprintf(fp, ", \"predicted_share\": %.4f, \"predicted_ms\": %.4f, "
				"\"busy_ms\": %.4f}", in.work, 1e3 * in.predicted_s, j->busy[s] * per);
		}
		fprintf(fp, "]}}\n");
	} else {
		fprintf(fp, "%s: %d stages, batch %lld in %d micro-batches, %s, %lld runs\n",
			j->o->path, ns, (long long)j->rows, j->o->micro,
			ml_pipe_schedule_name(j->o->psched), (long long)j->runs);
		fprintf(fp, "%-6s %-8s %5s %-30s %9s %8s %8s %10s\n", "lane", "device", "fwd",
			"first .. last", "predicted", "pred ms", "busy ms", "busy share");
		for (int s = 0; s < ns; s++) {
			struct ml_pipeline_stage_info in;
			char nodes[64];
			ml_pipeline_stage(j->p, s, &in);
			snprintf(nodes, sizeof nodes, "%.14s .. %.14s", in.first, in.last);
			char pred[32] = "-";
			if (in.predicted_s > 0)	/* measured: a micro-batch's node times */
				snprintf(pred, sizeof pred, "%.3f", 1e3 * in.predicted_s);
			fprintf(fp, "%-6d %-8s %5d %-30s %8.0f%% %8s %8.3f %9.1f%%\n", s, in.device,
				in.n_forward, nodes, 100 * in.work, pred, j->busy[s] * per,
				j->wall > 0 ? 100 * j->busy[s] / j->wall : 0.0);
		}
		fprintf(fp, "wall %.3f ms a batch; bubble fraction %.3f (the stages' idle share: "
			"1 - busy / (stages x wall))\n", j->wall * per, bubble);
	}
	return ferror(fp) ? ml_fail(e, ML_EIO, "write error") : 0;
}

static int
pipe_trace(void *ctx, FILE *fp, struct ml_err *e)
{
	const struct pipe_job *j = ctx;
	return ml_pipeline_trace(j->p, fp, e);
}

/*
 * profile_pipeline: --pipeline: the step graph g run as mltrain's pipeline
 * (random data at --dim's batch, the step's lr), warm-up and timed runs;
 * the report, and the last run's trace with a lane a stage.
 */
static void
profile_pipeline(struct opts *o, struct ml_graph *g)
{
	struct ml_err err = { 0 };
	struct ml_pipeline_opts po;
	struct cli_pipeline cp;
	struct ml_pipeline *p = NULL;
	if (ml_graph_find(g, "label") < 0 || ml_graph_find(g, "lr") < 0 || g->n_inputs < 1)
		die(EXIT_INVALID, "%s: --pipeline profiles a training step (mltrain --dump-step): "
		    "no 'label' or 'lr' input", o->path);
	cli_pipeline_plan(g, o->pipeline, o->device, &po, &cp);
	const char *xname = g->tensors[g->inputs[0]]->name;
	struct ml_tval x = { 0 }, y = { 0 }, lr = { 0 };
	cli_random_input(&x, g, xname, &o->in);
	cli_random_input(&y, g, "label", &o->in);
	cli_random_input(&lr, g, "lr", &o->in);
	if (x.rank < 1 || x.dims[0] % o->micro != 0)
		die(EXIT_USAGE, "--micro-batches %d does not divide the batch of %lld (--dim)",
		    o->micro, (long long)(x.rank >= 1 ? x.dims[0] : 0));
	po.micro = o->micro;
	po.schedule = o->psched;
	if (cp.measured)
		po.measure_rows = x.dims[0] / o->micro;
	if (ml_pipeline_new(&p, g, &po, &err) < 0)
		die_err(&err);
	double rate = ml_get_f64(lr.data, lr.dtype, 0), loss;
	int ns = ml_pipeline_stages(p);
	double *busy0 = calloc((size_t)ns, sizeof(double)), *busy = calloc((size_t)ns,
									  sizeof(double));
	if (busy0 == NULL || busy == NULL)
		die(EXIT_FAIL, "out of memory");
	/* the bar counts the warm-up steps and the timed ones, as profile's runs */
	const char *what = "profiling the pipeline";
	int64_t total = o->warmup + o->repeat;
	cli_progress_update(what, 0, total, NULL);
	for (int64_t i = 0; i < o->warmup; i++) {
		if (ml_pipeline_run(p, xname, &x, &y, rate, &loss, NULL, &err) < 0)
			die_err(&err);
		cli_progress_update(what, i + 1, total, NULL);
	}
	struct ml_pipeline_stats st0, st1;
	ml_pipeline_stats(p, &st0);
	for (int s = 0; s < ns; s++) {
		struct ml_pipeline_stage_info in;
		ml_pipeline_stage(p, s, &in);
		busy0[s] = in.busy_s;
	}
	for (int64_t i = 0; i < o->repeat; i++) {
		double t0 = ml_now();
		if (ml_pipeline_run(p, xname, &x, &y, rate, &loss, NULL, &err) < 0)
			die_err(&err);
		double wall = ml_now() - t0;
		if (o->verbose) {
			cli_progress_clear();
			fprintf(stderr, "%s: run %lld: %.3f ms, loss %.6f\n", progname, (long long)i,
				wall * 1e3, loss);
		}
		cli_progress_update(what, o->warmup + i + 1, total, NULL);
	}
	cli_progress_end(true);
	ml_pipeline_stats(p, &st1);
	for (int s = 0; s < ns; s++) {
		struct ml_pipeline_stage_info in;
		ml_pipeline_stage(p, s, &in);
		busy[s] = in.busy_s - busy0[s];
	}
	struct pipe_job j = { .p = p, .o = o, .wall = st1.wall_s - st0.wall_s, .busy = busy,
			      .runs = o->repeat, .rows = x.dims[0] };
	cli_commit();
	if (o->trace != NULL)
		write_out(o->trace, pipe_trace, &j);
	if (o->outpath != NULL)
		write_out(o->outpath, pipe_report, &j);
	else if (!o->quiet)
		write_out(o->report_stderr ? "/dev/stderr" : "-", pipe_report, &j);
	free(busy0);
	free(busy);
	ml_tval_clear(&x);
	ml_tval_clear(&y);
	ml_tval_clear(&lr);
	ml_pipeline_free(p);
	cli_pipeline_free(&cp);
}

/* write_reports: the trace, the picture, the cost model and the report, each where asked. */
static void
write_reports(struct opts *o, struct ml_prof **ps, int nd)
{
	struct job j = { ps, nd, &o->po, OUT_TRACE };
	if (o->trace != NULL)
		write_out(o->trace, emit, &j);
	if (o->svg != NULL) {
		j.what = OUT_SVG;
		write_out(o->svg, emit, &j);
	}
	if (o->calibrate) {
		if (o->cost_default)
			mkdirs(o->costpath);
		j.what = OUT_COST;
		write_out(o->costpath, emit, &j);
		if (o->verbose)
			fprintf(stderr, "%s: wrote the cost model to %s\n", progname, o->costpath);
	}
	j.what = o->fmt;
	if (o->outpath != NULL)
		write_out(o->outpath, emit, &j);
	else if (!o->quiet)
		write_out(o->report_stderr ? "/dev/stderr" : "-", emit, &j);
}

int
main(int argc, char **argv)
{
	struct opts o = { .po = { .sort = ML_PROF_SORT_TIME, .group = ML_PROF_BY_NODE },
			  .fmt = OUT_TABLE, .repeat = 10, .warmup = 1, .device = "cpu",
			  .psched = -1 };

	cli_init(argc, argv);
	if (argc > 1 && strcmp(argv[1], "diff") == 0)
		return diff_main(argc - 1, argv + 1);
	parse_args(&o, argc, argv);
	if (o.version) {
		print_version(o.verbose);
		return finish_stdout();
	}
	if (o.list_devices)
		return list_devices(&o, argc);
	check_args(&o, argc, argv);
	ml_set_threads(o.threads);
	cli_set_timeout(o.timeout);

	struct ml_err err = { 0 };
	struct ml_graph *g = NULL;
	char devs[MAX_DEVICES][64];
	if (o.pipeline != NULL) {
		if (ml_model_load(&g, o.path, ML_FMT_AUTO, &err) < 0)
			die_err(&err);
		cli_apply_shapes(g, o.path, &o.shapes, o.verbose && !o.quiet);
		profile_pipeline(&o, g);
		cli_inputs_free(&o.in);
		cli_shapes_free(&o.shapes);
		ml_graph_free(g);
		return finish_stdout();
	}
	int nd = pick_devices(&o, devs);
	if (ml_model_load(&g, o.path, ML_FMT_AUTO, &err) < 0)
		die_err(&err);
	cli_apply_shapes(g, o.path, &o.shapes, o.verbose && !o.quiet);
	struct ml_prof *ps[MAX_DEVICES] = { 0 };
	for (int k = 0; k < nd; k++)
		profile(&ps[k], g, devs[k], &o);
	o.po.model = o.path;
	o.po.threads = ml_get_threads();
	o.po.warmup = o.warmup;
	if (o.po.group == ML_PROF_BY_PHASE && !ml_prof_has_phases(ps[0]) && !o.quiet)
		warnx("no node is marked with a phase (training graphs name nodes forward/..., "
		      "backward/..., optimizer/... or set metadata phase:NODE)");

	cli_commit();
	write_reports(&o, ps, nd);
	if (o.verbose && ml_cache_note_get() != NULL)
		fprintf(stderr, "%s: %s\n", progname, ml_cache_note_get());
	for (int k = 0; k < nd; k++)
		ml_prof_free(ps[k]);
	cli_inputs_free(&o.in);
	cli_shapes_free(&o.shapes);
	ml_graph_free(g);
	return finish_stdout();
}
