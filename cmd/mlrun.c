/*
 * mlrun.c: run a model on given or random inputs; write the outputs as
 * .npy files or print them; time repeated runs.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ml_data.h"

static const char synopsis[] =
	"mlrun [-qv] [--device DEV] [--threads N] [-i NAME=FILE.npy | -i FILE.npz]...\n"
	"             [--random [--seed S]] [--dim NAME=N]... [--shape NAME=DIMS]... [-o DIR]\n"
	"             [--repeat N | --duration S] [--warmup K | --warmup Ts] [--[no-]progress]\n"
	"             [--compare DIR|FILE.npz [--rtol R] [--atol A]] [--top K]\n"
	"             [--json [--json-values]] [--max-alloc SIZE] [--plan] [--placement FILE]\n"
	"             [--timeout SECS]\n"
	"             [MODEL | -]\n"
	"       mlrun --devices [--json]";

static const char help_text[] =
	"Run a model (.mlg, .onnx or .mlt; '-' reads stdin) on the CPU or OpenCL devices.\n"
	"\n"
	"  -i, --input NAME=FILE   bind graph input NAME to a .npy file (any numeric dtype,\n"
	"                          converted to the input's; C or Fortran order); FILE may\n"
	"                          also be zeros, ones or random (shape from the model)\n"
	"  -i, --input FILE.npz    bind each array of FILE.npz to the input of its name\n"
	"      --random            make every input not given with -i from random numbers\n"
	"      --seed S            seed for --random (default 0)\n"
	"      --dim NAME=N        size of symbolic dim NAME for made-up inputs (default 1)\n"
	"      --shape NAME=DIMS   give input NAME the shape DIMS (4x3x224x224, a name such\n"
	"                          as N making a dim symbolic) and infer the model again,\n"
	"                          rewriting Reshape targets that hold the old sizes\n"
	"  -o, --output-dir DIR    write each output to DIR/NAME.npy, making DIR and its\n"
	"                          missing parents (NAME with characters other than\n"
	"                          A-Z a-z 0-9 . _ - made '_'; two outputs whose names\n"
	"                          collide so are an error)\n"
	"      --compare REF       compare each output with REF/NAME.npy (REF a folder, NAME\n"
	"                          as -o writes it) or the array NAME of REF.npz: print\n"
	"                          the max abs and rel errors and their indices; status 1\n"
	"                          when an element is beyond both --atol and --rtol\n"
	"      --rtol R            --compare's relative tolerance (default 1e-5)\n"
	"      --atol A            --compare's absolute tolerance (default 1e-5)\n"
	"      --top K             print the K largest values of each row of each output\n"
	"                          (the last dim) with their indices\n"
	"      --repeat N          run N times and report latency (min, median, p90, p95,\n"
	"                          p99, max) and throughput\n"
	"      --duration S        run for S seconds (at least once) instead of N times;\n"
	"                          S may end in s or ms\n"
	"      --warmup K          untimed runs before the timed ones (default 1 with\n"
	"                          --repeat or --duration); K ending in s or ms (2s, 500ms)\n"
	"                          warms up for that long instead (at least one run)\n"
	"      --progress          with --repeat or --duration, draw a progress bar of the\n"
	"                          runs on stderr even when it is no terminal\n"
	"      --no-progress       draw no progress bar (the default unless on a terminal)\n"
	"      --json              print a JSON report on stdout (with each run's latency)\n"
	"      --json-values       with --json, each output's values too (a flat array in\n"
	"                          row-major order; NaN and infinities as null)\n"
	"      --max-alloc SIZE    allocate at most SIZE bytes (K, M, G suffixes;\n"
	"                          default ML_MAX_ALLOC or 16G)\n"
	"      --threads N         threads for kernels and BLAS (default: all cores)\n"
	"      --timeout SECS      stop with status 1 when the run takes over SECS seconds\n"
	"      --device DEV        cpu (default), cl, cl:N or auto\n"
	"      --devices           list the devices (CPU and every OpenCL device) and exit\n"
	"      --plan              print each node's device, the bytes copied between\n"
	"                          devices and the predicted cost, and exit (--json: as JSON)\n"
	"      --placement FILE    run with the placement in FILE (an edited --plan --json,\n"
	"                          or lines 'NODE DEVICE')\n"
	"  -q, --quiet             print nothing but errors\n"
	"  -v, --verbose           print more on stderr (each timed run's time, the arena\n"
	"                          size, how the CPU runs bf16 weights' products, the\n"
	"                          OpenCL set-up times)\n"
	"  -h, --help              print this help and exit\n"
	"  -V, --version           print the version and exit\n";

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void
safe_name(char *dst, size_t n, const char *src)
{
	size_t i = 0;
	for (; src[i] && i + 1 < n; i++) {
		char c = src[i];
		bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			  c == '.' || c == '_' || c == '-';
		dst[i] = ok ? c : '_';
	}
	dst[i] = '\0';
}

/*
 * check_names: die with status 3, naming both, when two outputs would be
 * written to the same file of -o DIR once their names are made safe
 * ("a/b" and "a_b" both give a_b.npy), before anything runs: one would
 * silently overwrite the other. The same tensor listed twice is one file.
 */
static void
check_names(const struct ml_graph *g, const char *outdir)
{
	for (int i = 0; i < g->n_outputs; i++) {
		char a[512], b[512];
		safe_name(a, sizeof a, g->tensors[g->outputs[i]]->name);
		for (int j = 0; j < i; j++) {
			safe_name(b, sizeof b, g->tensors[g->outputs[j]]->name);
			if (g->outputs[i] != g->outputs[j] && strcmp(a, b) == 0)
				die(EXIT_INVALID, "outputs '%s' and '%s' would both be written to %s/%s.npy",
				    g->tensors[g->outputs[j]]->name, g->tensors[g->outputs[i]]->name,
				    outdir, a);
		}
	}
}

static void
print_values(const struct ml_tval *v)
{
	int64_t n = ml_tval_numel(v), show = n < 10 ? n : 10;
	fputs("  ", stdout);
	for (int64_t i = 0; i < show; i++) {
		if (ml_dtype_is_float(v->dtype))
			printf("%s%.6g", i ? " " : "", ml_get_f64(v->data, v->dtype, i));
		else
			printf("%s%lld", i ? " " : "", (long long)ml_get_i64(v->data, v->dtype, i));
	}
	if (n > show)
		printf(" ... (%lld values)", (long long)n);
	putchar('\n');
}

/* The options of one run, as parsed. */
struct opts;
static void add_npz(struct opts *o, const char *path);

/* is_npz: whether path names a .npz file (by its suffix). */
static bool
is_npz(const char *path)
{
	size_t n = strlen(path);
	return n > 4 && strcmp(path + n - 4, ".npz") == 0;
}

/* The options of one run, as parsed. */
struct opts {
	struct cli_inputs in;
	struct cli_shapes shapes;	/* --shape */
	const char **npz;	/* -i FILE.npz */
	int nnpz;
	int verbose, quiet, json, threads, progress;
	int64_t repeat, warmup, top;
	double duration;	/* --duration S: seconds of timed runs; 0: none */
	double warmup_s;	/* --warmup Ts: seconds of untimed runs; 0: count them */
	double timeout, rtol, atol;
	bool json_values;	/* --json-values */
	const char *compare;	/* --compare REF */
	const char *outdir, *device, *placement, *path;
	bool version, list_devices, plan;
};

/* has_unit: whether s, a number of --warmup or --duration, ends in a unit (s or ms). */
static bool
has_unit(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && s[n - 1] == 's';
}

/*
 * parse_secs: a number of seconds in (0, 1e7] for opt: plain or ending in
 * s, or in ms for milliseconds; else a usage error (status 2).
 */
static double
parse_secs(const char *opt, const char *s)
{
	char tmp[64];
	double scale = 1;
	size_t n = strlen(s);
	if (n >= sizeof tmp)
		usage_error(synopsis, "%s: '%s' is not a number of seconds", opt, s);
	memcpy(tmp, s, n + 1);
	if (n > 2 && strcmp(tmp + n - 2, "ms") == 0) {
		tmp[n - 2] = '\0';
		scale = 1e-3;
	} else if (n > 1 && tmp[n - 1] == 's') {
		tmp[n - 1] = '\0';
	}
	char *end;
	double v = strtod(tmp, &end) * scale;
	if (tmp[0] == '\0' || *end != '\0' || !(v > 0) || v > 1e7)
		usage_error(synopsis, "%s: '%s' is not a number of seconds in (0, 1e7] "
			    "(e.g. 10, 2s, 500ms)", opt, s);
	return v;
}

/* parse_args: read argv into o; usage errors exit 2, -h exits 0. */
static void
parse_args(struct opts *o, int argc, char **argv)
{
	enum { OPT_RANDOM = 256, OPT_SEED, OPT_REPEAT, OPT_WARMUP, OPT_JSON, OPT_THREADS,
	       OPT_DEVICE, OPT_DIM, OPT_MAX_ALLOC, OPT_DEVICES, OPT_PLAN, OPT_PLACEMENT,
	       OPT_TIMEOUT, OPT_COMPARE, OPT_RTOL, OPT_ATOL, OPT_TOP, OPT_SHAPE, OPT_DURATION,
	       OPT_JSON_VALUES };
	static const struct option longopts[] = {
		{ "atol", required_argument, NULL, OPT_ATOL },
		{ "compare", required_argument, NULL, OPT_COMPARE },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "devices", no_argument, NULL, OPT_DEVICES },
		{ "dim", required_argument, NULL, OPT_DIM },
		{ "duration", required_argument, NULL, OPT_DURATION },
		{ "help", no_argument, NULL, 'h' },
		{ "input", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "json-values", no_argument, NULL, OPT_JSON_VALUES },
		{ "max-alloc", required_argument, NULL, OPT_MAX_ALLOC },
		{ "no-progress", no_argument, NULL, CLI_OPT_NO_PROGRESS },
		{ "output-dir", required_argument, NULL, 'o' },
		{ "placement", required_argument, NULL, OPT_PLACEMENT },
		{ "plan", no_argument, NULL, OPT_PLAN },
		{ "progress", no_argument, NULL, CLI_OPT_PROGRESS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "random", no_argument, NULL, OPT_RANDOM },
		{ "repeat", required_argument, NULL, OPT_REPEAT },
		{ "rtol", required_argument, NULL, OPT_RTOL },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "shape", required_argument, NULL, OPT_SHAPE },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "top", required_argument, NULL, OPT_TOP },
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
			if (strchr(optarg, '=') == NULL && is_npz(optarg))
				add_npz(o, optarg);
			else
				cli_add_input(&o->in, optarg, synopsis);
			break;
		case 'o':
			o->outdir = optarg;
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
		case OPT_DEVICE:
			o->device = optarg;
			break;
		case OPT_DEVICES:
			o->list_devices = true;
			break;
		case OPT_PLAN:
			o->plan = true;
			break;
		case OPT_PLACEMENT:
			o->placement = optarg;
			break;
		case OPT_DIM:
			cli_add_dim(&o->in, optarg, synopsis);
			break;
		case OPT_SHAPE:
			cli_add_shape(&o->shapes, optarg, synopsis);
			break;
		case OPT_JSON:
			o->json = 1;
			break;
		case OPT_JSON_VALUES:
			o->json_values = true;
			break;
		case OPT_DURATION:
			o->duration = parse_secs("--duration", optarg);
			break;
		case OPT_MAX_ALLOC:
			ml_set_alloc_cap(parse_size("--max-alloc", optarg, synopsis));
			break;
		case OPT_RANDOM:
			o->in.random = true;
			break;
		case OPT_REPEAT:
			o->repeat = parse_int("--repeat", optarg, 1, 1000000000, synopsis);
			break;
		case OPT_SEED:
			o->in.seed = (uint64_t)parse_int("--seed", optarg, 0, INT64_MAX, synopsis);
			break;
		case OPT_THREADS:
			o->threads = (int)parse_int("--threads", optarg, 1, 256, synopsis);
			break;
		case OPT_TIMEOUT:
			o->timeout = parse_timeout(optarg, synopsis);
			break;
		case OPT_COMPARE:
			o->compare = optarg;
			break;
		case OPT_RTOL:
			o->rtol = parse_double("--rtol", optarg, synopsis);
			if (!(o->rtol >= 0))
				usage_error(synopsis, "--rtol must be 0 or more");
			break;
		case OPT_ATOL:
			o->atol = parse_double("--atol", optarg, synopsis);
			if (!(o->atol >= 0))
				usage_error(synopsis, "--atol must be 0 or more");
			break;
		case OPT_TOP:
			o->top = parse_int("--top", optarg, 1, 1000000, synopsis);
			break;
		case OPT_WARMUP:
			if (has_unit(optarg)) {
				o->warmup_s = parse_secs("--warmup", optarg);
				o->warmup = 0;
			} else {
				o->warmup = parse_int("--warmup", optarg, 0, 1000000000, synopsis);
				o->warmup_s = 0;
			}
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

/* check_args: the operand, --warmup's default and the device (ML_DEVICE, else cpu). */
static void
check_args(struct opts *o, int argc, char **argv)
{
	if (optind + 1 < argc)
		usage_error(synopsis, "too many operands");
	o->path = optind < argc ? argv[optind] : "-";
	if (o->repeat > 0 && o->duration > 0)
		usage_error(synopsis, "--repeat and --duration exclude each other");
	bool timed = o->repeat > 0 || o->duration > 0;
	if ((o->warmup >= 0 || o->warmup_s > 0) && !timed)
		usage_error(synopsis, "--warmup needs --repeat or --duration");
	if (o->warmup < 0)
		o->warmup = timed && o->warmup_s == 0 ? 1 : 0;
	cli_progress_setup(o->progress, o->quiet);
	if (o->json_values && !o->json)
		usage_error(synopsis, "--json-values needs --json");
	if ((o->rtol != -1 || o->atol != -1) && o->compare == NULL)
		usage_error(synopsis, "--rtol and --atol need --compare");
	/* polygraphy's defaults */
	if (o->rtol == -1)
		o->rtol = 1e-5;
	if (o->atol == -1)
		o->atol = 1e-5;
	if (o->device == NULL) {
		/* ML_DEVICE: the default device (the conformance runner passes no options) */
		o->device = getenv("ML_DEVICE");
		if (o->device == NULL || o->device[0] == '\0')
			o->device = "cpu";
	}
}

/* apply_placement: --placement FILE: move the nodes of s to the devices FILE names. */
static void
apply_placement(struct ml_session *s, const struct ml_graph *g, const char *file)
{
	struct ml_err err = { 0 };
	int *pl = calloc((size_t)g->n_nodes + 1, sizeof *pl);
	if (pl == NULL)
		die(EXIT_FAIL, "out of memory");
	for (int i = 0; i < g->n_nodes; i++)
		pl[i] = ml_session_node_device(s, i);
	if (ml_placement_read(g, file, pl, &err) < 0 || ml_session_place(s, pl, &err) < 0)
		die_err(&err);
	free(pl);
}

/*
 * make_dir: create outdir (a prefix of -o DIR full) unless it is there;
 * dies with status 1, naming full, when it cannot or it is not a directory.
 */
static void
make_dir(const char *outdir, const char *full)
{
	struct stat st;
	if (stat(outdir, &st) < 0) {
		/* another mlrun may make it at the same moment */
		if (mkdir(outdir, 0777) < 0 &&
		    (errno != EEXIST || stat(outdir, &st) < 0 || !S_ISDIR(st.st_mode)))
			die(EXIT_FAIL, "cannot create '%s': %s", full, strerror(errno));
	} else if (!S_ISDIR(st.st_mode)) {
		if (strcmp(outdir, full) == 0)
			die(EXIT_FAIL, "'%s' is not a directory", full);
		die(EXIT_FAIL, "cannot create '%s': '%s' is not a directory", full, outdir);
	}
}

/* make_outdir: -o DIR: create DIR and its missing parents (as mkdir -p). */
static void
make_outdir(const char *outdir)
{
	size_t n = strlen(outdir);
	char *p = malloc(n + 1);
	if (p == NULL)
		die(EXIT_FAIL, "out of memory");
	memcpy(p, outdir, n + 1);
	for (size_t i = 1; i < n; i++) {
		if (p[i] != '/' || p[i - 1] == '/')
			continue;
		p[i] = '\0';
		make_dir(p, outdir);
		p[i] = '/';
	}
	make_dir(p, outdir);
	free(p);
}

/* The latencies of the timed runs, in ms. */
struct lat {
	int64_t nrun, nwarm;	/* timed runs, warm-up runs done */
	double min, med, p90, p95, p99, max, total, thr;
	double *runs;		/* each timed run's latency, in run order (nrun) */
};

/* pct: the p-th percentile (0..1) of the n sorted values v, by the nearest rank. */
static double
pct(const double *v, int64_t n, double p)
{
	return v[(int64_t)((double)(n - 1) * p + 0.5)];
}

/* run_one: one run of s; its latency in ms. Dies on failure. */
static double
run_one(struct ml_session *s)
{
	struct ml_err err = { 0 };
	double t0 = ml_now();
	if (ml_session_run(s, &err) < 0)
		die_err(&err);
	return (ml_now() - t0) * 1e3;
}

/*
 * run_timed: the warm-up (o->warmup runs, or o->warmup_s seconds of them,
 * at least one), then the timed runs: o->repeat of them, or as many as fit
 * in o->duration seconds (at least one), else one. Their latencies and
 * statistics go in l (l->runs to be freed); -v prints each on stderr.
 */
static void
run_timed(struct ml_session *s, const struct opts *o, struct lat *l)
{
	*l = (struct lat){ 0 };
	/* the bar: runs done of all (unknown when counted by time); more than one run in all */
	bool bytime = o->warmup_s > 0 || o->duration > 0;
	int64_t total = bytime ? 0 : o->warmup + (o->repeat > 0 ? o->repeat : 1), done = 0;
	bool bar = bytime || total > 1;
	if (bar)
		cli_progress_update("running", 0, total, NULL);
	if (o->warmup_s > 0) {
		double end = ml_now() + o->warmup_s;
		do {
			run_one(s);
			l->nwarm++;
			if (bar)
				cli_progress_update("running", ++done, total, NULL);
		} while (ml_now() < end);
	}
	for (int64_t i = 0; i < o->warmup; i++, l->nwarm++) {
		run_one(s);
		if (bar)
			cli_progress_update("running", ++done, total, NULL);
	}
	int64_t cap = o->repeat > 0 ? o->repeat : o->duration > 0 ? 1024 : 1;
	double end = ml_now() + o->duration;
	l->runs = malloc(sizeof *l->runs * (size_t)cap);
	if (l->runs == NULL)
		die(EXIT_FAIL, "out of memory");
	for (;;) {
		if (l->nrun == cap) {
			double *r = realloc(l->runs, sizeof *r * (size_t)cap * 2);
			if (r == NULL)
				die(EXIT_FAIL, "out of memory");
			l->runs = r;
			cap *= 2;
		}
		double ms = run_one(s);
		l->runs[l->nrun++] = ms;
		double now = ml_now();
		bool last = o->duration > 0 ? now >= end : l->nrun >= (o->repeat > 0 ? o->repeat : 1);
		if (bar) {
			/* counted by time, the runs have no total: the time left stands for the ETA */
			char left[32] = "";
			if (o->duration > 0 && !last) {
				long long sl = (long long)ceil(end - now);
				snprintf(left, sizeof left, "%lld:%02lld left", sl / 60, sl % 60);
			}
			cli_progress_update("running", ++done, total, left[0] ? left : NULL);
		}
		if (o->verbose && (o->repeat > 0 || o->duration > 0)) {
			cli_progress_clear();
			fprintf(stderr, "%s: run %lld: %.3f ms\n", progname,
				(long long)l->nrun - 1, ms);
		}
		if (last)
			break;
	}
	cli_progress_end(true);
	int64_t n = l->nrun;
	double *lat = malloc(sizeof *lat * (size_t)n);
	if (lat == NULL)
		die(EXIT_FAIL, "out of memory");
	memcpy(lat, l->runs, sizeof *lat * (size_t)n);
	qsort(lat, (size_t)n, sizeof *lat, cmp_double);
	l->min = lat[0];
	l->max = lat[n - 1];
	l->med = n % 2 ? lat[n / 2] : (lat[n / 2 - 1] + lat[n / 2]) / 2;
	l->p90 = pct(lat, n, 0.90);
	l->p95 = pct(lat, n, 0.95);
	l->p99 = pct(lat, n, 0.99);
	for (int64_t i = 0; i < n; i++)
		l->total += lat[i];
	l->thr = l->total > 0 ? (double)n / (l->total / 1e3) : 0;
	free(lat);
}

/* write_outputs: -o DIR: each output of s to DIR/NAME.npy (NAME made safe). */
static void
write_outputs(struct ml_session *s, const struct ml_graph *g, const char *outdir)
{
	struct ml_err err = { 0 };
	for (int i = 0; i < g->n_outputs; i++) {
		char name[512], file[4096];
		safe_name(name, sizeof name, g->tensors[g->outputs[i]]->name);
		snprintf(file, sizeof file, "%s/%s.npy", outdir, name);
		if (ml_npy_save(ml_session_output(s, i), file, &err) < 0)
			die_err(&err);
	}
}

/* json_values: --json-values: the values of v as a flat JSON array (NaN, infinities: null). */
static void
json_values(const struct ml_tval *v)
{
	int64_t n = ml_tval_numel(v);
	bool flt = ml_dtype_is_float(v->dtype), num = flt || ml_dtype_is_int(v->dtype);
	/* enough digits to read the same value back */
	int prec = v->dtype == ML_F64 ? 17 : 9;
	putchar('[');
	for (int64_t i = 0; i < n; i++) {
		if (i)
			fputs(", ", stdout);
		if (v->dtype == ML_BOOL) {
			fputs(ml_get_i64(v->data, v->dtype, i) ? "true" : "false", stdout);
		} else if (!num) {
			fputs("null", stdout);
		} else if (flt) {
			double x = ml_get_f64(v->data, v->dtype, i);
			if (isfinite(x))
				printf("%.*g", prec, x);
			else
				fputs("null", stdout);
		} else {
			printf("%lld", (long long)ml_get_i64(v->data, v->dtype, i));
		}
	}
	putchar(']');
}

/*
 * print_json: --json: the run's report on stdout: the latency statistics,
 * each timed run's latency in run order, and each output's name, dtype and
 * shape (with --json-values its values).
 */
static void
print_json(struct ml_session *s, const struct ml_graph *g, const struct opts *o,
	   const struct lat *l)
{
	printf("{\"model\": ");
	ml_json_str(stdout, o->path);
	printf(", \"device\": ");
	ml_json_str(stdout, o->device);
	printf(", \"threads\": %d, \"runs\": %lld, \"warmup\": %lld", ml_get_threads(),
	       (long long)l->nrun, (long long)l->nwarm);
	if (o->duration > 0)
		printf(", \"duration_s\": %g", o->duration);
	if (o->warmup_s > 0)
		printf(", \"warmup_s\": %g", o->warmup_s);
	printf(", \"latency_ms\": {\"min\": %.4f, \"median\": %.4f, \"p50\": %.4f, "
	       "\"p90\": %.4f, \"p95\": %.4f, \"p99\": %.4f, \"max\": %.4f, \"mean\": %.4f}",
	       l->min, l->med, l->med, l->p90, l->p95, l->p99, l->max, l->total / (double)l->nrun);
	printf(", \"latencies_ms\": [");
	for (int64_t i = 0; i < l->nrun; i++)
		printf("%s%.4f", i ? ", " : "", l->runs[i]);
	printf("], \"throughput_per_s\": %.3f, \"arena_bytes\": %lld, \"outputs\": [", l->thr,
	       (long long)ml_session_arena_bytes(s));
	for (int i = 0; i < g->n_outputs; i++) {
		const struct ml_tval *v = ml_session_output(s, i);
		printf("%s{\"name\": ", i ? ", " : "");
		ml_json_str(stdout, g->tensors[g->outputs[i]]->name);
		printf(", \"dtype\": \"%s\", \"shape\": [", ml_dtype_name(v->dtype));
		for (int d = 0; d < v->rank; d++)
			printf("%s%lld", d ? ", " : "", (long long)v->dims[d]);
		printf("]");
		if (o->json_values) {
			printf(", \"values\": ");
			json_values(v);
		}
		printf("}");
	}
	printf("]}\n");
}

/*
 * print_text: the outputs' values (without -o), the latencies (with
 * --repeat or --duration) on stdout; with -v the arena, the session's note and the
 * OpenCL set-up times (t_new: the session's creation) on stderr.
 */
static void
print_text(struct ml_session *s, const struct ml_graph *g, const struct opts *o,
	   const struct lat *l, double t_new)
{
	if (o->outdir == NULL) {
		for (int i = 0; i < g->n_outputs; i++) {
			const struct ml_tval *v = ml_session_output(s, i);
			char shape[256];
			printf("%s %s\n", g->tensors[g->outputs[i]]->name,
			       ml_tval_shape_str(v, shape, sizeof shape));
			print_values(v);
		}
	}
	if (o->repeat > 0 || o->duration > 0) {
		printf("latency ms: min %.3f  median %.3f  p90 %.3f  p95 %.3f  p99 %.3f  max %.3f  "
		       "(%lld runs, %lld warmup, %d threads)\n", l->min, l->med, l->p90, l->p95,
		       l->p99, l->max, (long long)l->nrun, (long long)l->nwarm, ml_get_threads());
		printf("throughput: %.2f runs/s\n", l->thr);
	}
	if (!o->verbose)
		return;
	fprintf(stderr, "%s: arena %lld bytes\n", progname, (long long)ml_session_arena_bytes(s));
	if (ml_session_note(s) != NULL)
		fprintf(stderr, "%s: %s\n", progname, ml_session_note(s));
	for (int i = 0; strcmp(o->device, "cpu") == 0 && i < g->n_tensors; i++)
		if (g->tensors[i]->dtype == ML_BF16) {
			fprintf(stderr, "%s: %s\n", progname, ml_bf16_note());
			break;
		}
	if (strcmp(o->device, "cpu") != 0) {
		struct ml_session_devstats ds;
		ml_session_device_stats(s, &ds);
		fprintf(stderr, "%s: opencl: probe %.1f ms, set-up %.1f ms, programs %.1f ms "
			"(%d built, %d from the cache), session %.1f ms\n", progname,
			ds.t_probe * 1e3, ds.t_setup * 1e3, ds.t_programs * 1e3, ds.n_built,
			ds.n_cached, t_new * 1e3);
		if (ds.gemm_tile[0] != '\0')
			fprintf(stderr, "%s: opencl: GEMM tile %s\n", progname, ds.gemm_tile);
	}
}

/* print_plan: --plan: each node's device and the predicted cost, on stdout. */
static void
print_plan(struct ml_session *s, const struct opts *o)
{
	struct ml_err err = { 0 };
	if (o->verbose && ml_session_note(s) != NULL)
		fprintf(stderr, "%s: %s\n", progname, ml_session_note(s));
	if (ml_session_plan_write(s, stdout, o->json, &err) < 0)
		die_err(&err);
}

/* add_npz: take -i FILE.npz. */
static void
add_npz(struct opts *o, const char *path)
{
	const char **n = realloc(o->npz, sizeof *n * (size_t)(o->nnpz + 1));
	if (n == NULL)
		die(EXIT_FAIL, "out of memory");
	o->npz = n;
	o->npz[o->nnpz++] = path;
}

/* input_of: the input tensor of g named name, or NULL. */
static const struct ml_tensor *
input_of(const struct ml_graph *g, const char *name)
{
	for (int i = 0; i < g->n_inputs; i++)
		if (strcmp(g->tensors[g->inputs[i]]->name, name) == 0)
			return g->tensors[g->inputs[i]];
	return NULL;
}

/* no_input: die with status 3: g has no input name (from where); list g's inputs. */
static void
no_input(const struct ml_graph *g, const char *path, const char *name, const char *where)
{
	char list[1024] = "";
	size_t k = 0;
	for (int i = 0; i < g->n_inputs && k < sizeof list; i++) {
		const struct ml_tensor *t = g->tensors[g->inputs[i]];
		if (t->kind == ML_TK_CONST || t->kind == ML_TK_PARAM)
			continue;
		k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "", t->name);
	}
	die(EXIT_INVALID, "%s: the model has no input '%s'%s (its inputs: %s)", path, name, where,
	    k ? list : "none");
}

/* A file array bound to an input, converted to its dtype. */
struct bound {
	const char *name, *file;
	struct ml_tval v;
};

/*
 * convert: v to the dtype of input t (unless it has it or none); under -v
 * names the conversion and whether it changed values. Dies with status 4
 * for a dtype that has no conversion (complex, bool to or from numbers).
 */
static void
convert(struct ml_tval *v, const struct ml_tensor *t, const char *file, int verbose)
{
	struct ml_err err = { 0 };
	enum ml_dtype to = t->dtype, from = v->dtype;
	if (to == ML_UNDEF || to == from)
		return;
	bool fnum = ml_dtype_is_float(from) || ml_dtype_is_int(from);
	bool tnum = ml_dtype_is_float(to) || ml_dtype_is_int(to);
	if (!fnum || !tnum)
		die(EXIT_UNSUP, "%s: input '%s' is %s; the model wants %s", file, t->name,
		    ml_dtype_name(from), ml_dtype_name(to));
	struct ml_tval c;
	if (ml_tval_alloc(&c, to, v->rank, v->dims, &err) < 0)
		die_err(&err);
	int64_t n = ml_tval_numel(v), changed = 0;
	for (int64_t i = 0; i < n; i++) {
		double x = ml_dtype_is_int(from) ? (double)ml_get_i64(v->data, from, i) :
						   ml_get_f64(v->data, from, i);
		if (ml_dtype_is_int(to)) {
			/* the range that every integer dtype's cast keeps defined */
			double lo = to == ML_U8 || to == ML_U16 || to == ML_U32 || to == ML_U64 ?
					    0 : -9.2e18, hi = 1.8e19;
			if (x != x || x < lo || x > hi)
				die(EXIT_INVALID, "%s: value %g of input '%s' does not fit %s", file, x,
				    t->name, ml_dtype_name(to));
		}
		ml_set_f64(c.data, to, i, x);
		double y = ml_dtype_is_int(to) ? (double)ml_get_i64(c.data, to, i) :
						 ml_get_f64(c.data, to, i);
		changed += y != x && !(x != x && y != y);
	}
	if (verbose)
		fprintf(stderr, "%s: input '%s': %s converted to %s (%s: %lld of %lld values changed)\n",
			progname, t->name, ml_dtype_name(from), ml_dtype_name(to),
			changed ? "lossy" : "exact", (long long)changed, (long long)n);
	ml_tval_clear(v);
	*v = c;
}

/* The arrays of -i FILE.npz, as read. */
struct npz_ctx {
	struct bound *b;
	int n;
	const char *file;
};

static int
npz_take(void *ctx, const char *name, struct ml_tval *arr, struct ml_err *e)
{
	struct npz_ctx *c = ctx;
	struct bound *nb = realloc(c->b, sizeof *nb * (size_t)(c->n + 1));
	char *nm = strdup(name);
	if (nb == NULL || nm == NULL) {
		free(nm);
		if (nb != NULL)
			c->b = nb;
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	c->b = nb;
	c->b[c->n] = (struct bound){ .name = nm, .file = c->file, .v = *arr };
	memset(arr, 0, sizeof *arr);
	c->n++;
	return 0;
}

/* load_files: the .npy files of -i NAME=FILE and the arrays of -i FILE.npz, in c. */
static void
load_files(struct npz_ctx *c, const struct ml_graph *g, const struct opts *o)
{
	struct ml_err err = { 0 };
	for (int i = 0; i < o->nnpz; i++) {
		uint8_t *buf;
		size_t len;
		int n0 = c->n;
		c->file = o->npz[i];
		if (ml_read_file(o->npz[i], &buf, &len, &err) < 0)
			die_err(&err);
		int rc = ml_npz_decode(buf, len, npz_take, c, &err);
		ml_free(buf);
		if (rc < 0) {
			ml_err_prefix(&err, o->npz[i]);
			die_err(&err);
		}
		for (int k = n0; k < c->n; k++)
			if (input_of(g, c->b[k].name) == NULL)
				no_input(g, o->npz[i], c->b[k].name, " for its array");
	}
	for (int i = 0; i < o->in.nbinds; i++) {
		const struct cli_bind *b = &o->in.binds[i];
		const struct ml_tensor *t = input_of(g, b->name);
		if (t == NULL)
			no_input(g, o->path, b->name, "");
		if (strcmp(b->file, "zeros") == 0 || strcmp(b->file, "ones") == 0 ||
		    strcmp(b->file, "random") == 0 || t->rank < 0)
			continue;
		struct ml_tval v;
		if (ml_npy_load(&v, b->file, &err) < 0)
			die_err(&err);
		struct bound *nb = realloc(c->b, sizeof *nb * (size_t)(c->n + 1));
		char *nm = strdup(b->name);
		if (nb == NULL || nm == NULL)
			die(EXIT_FAIL, "out of memory");
		c->b = nb;
		c->b[c->n++] = (struct bound){ .name = nm, .file = b->file, .v = v };
	}
}

/*
 * bind_inputs: bind every input of s: the arrays of the files first
 * converted to the inputs' dtypes, the rest (zeros, ones, random, --random)
 * by cli_bind_inputs, whose made-up inputs take the symbolic dims of the
 * files' arrays. An input bound twice takes its last array.
 */
static void
bind_inputs(struct ml_session *s, const struct ml_graph *g, const struct opts *o)
{
	struct ml_err err = { 0 };
	struct npz_ctx c = { 0 };
	load_files(&c, g, o);
	struct cli_inputs rest = { .random = o->in.random, .seed = o->in.seed };
	rest.binds = calloc((size_t)(o->in.nbinds + c.n) + 1, sizeof *rest.binds);
	int nd = o->in.ndims;
	for (int i = 0; i < c.n; i++)
		nd += c.b[i].v.rank;
	rest.dims = calloc((size_t)nd + 1, sizeof *rest.dims);
	if (rest.binds == NULL || rest.dims == NULL)
		die(EXIT_FAIL, "out of memory");
	for (int i = 0; i < o->in.nbinds; i++) {
		const struct cli_bind *b = &o->in.binds[i];
		if (input_of(g, b->name)->rank < 0 || strcmp(b->file, "zeros") == 0 ||
		    strcmp(b->file, "ones") == 0 || strcmp(b->file, "random") == 0)
			rest.binds[rest.nbinds++] = *b;
	}
	for (int i = 0; i < o->in.ndims; i++)
		rest.dims[rest.ndims++] = o->in.dims[i];
	for (int i = 0; i < c.n; i++) {
		const struct ml_tensor *t = input_of(g, c.b[i].name);
		convert(&c.b[i].v, t, c.b[i].file, o->verbose);
		/* a placeholder of the array's shape, replaced below */
		rest.binds[rest.nbinds++] =
			(struct cli_bind){ .name = (char *)c.b[i].name, .file = (char *)"zeros" };
		for (int d = 0; d < t->rank && d < c.b[i].v.rank; d++)
			if (t->sym[d] != NULL)
				rest.dims[rest.ndims++] =
					(struct cli_dim){ .name = (char *)t->sym[d], .v = c.b[i].v.dims[d] };
	}
	cli_bind_inputs(s, g, o->path, &rest);
	for (int i = 0; i < c.n; i++) {
		if (ml_session_set_input(s, c.b[i].name, &c.b[i].v, &err) < 0) {
			cli_shape_hint(&err, g, c.b[i].name, &c.b[i].v);
			ml_err_prefix(&err, c.b[i].file);
			die_err(&err);
		}
		ml_tval_clear(&c.b[i].v);
		free((char *)c.b[i].name);
	}
	free(c.b);
	cli_inputs_free(&rest);
}

/* fmt_index: element i of v as "[a,b,c]" in buf. */
static const char *
fmt_index(const struct ml_tval *v, int64_t i, char *buf, size_t n)
{
	int64_t idx[ML_MAX_RANK];
	for (int d = v->rank - 1; d >= 0; d--) {
		idx[d] = v->dims[d] > 0 ? i % v->dims[d] : 0;
		i = v->dims[d] > 0 ? i / v->dims[d] : 0;
	}
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int d = 0; d < v->rank && k < n; d++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)idx[d]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

/* value: element i of v as a double (integers exactly up to 2^53). */
static double
value(const struct ml_tval *v, int64_t i)
{
	return ml_dtype_is_float(v->dtype) ? ml_get_f64(v->data, v->dtype, i) :
					     (double)ml_get_i64(v->data, v->dtype, i);
}

/*
 * compare_one: output v (named name) against ref, as polygraphy does: an
 * element fails when its absolute error |v-ref| is above atol and its
 * relative error |v-ref|/|ref| is above rtol; NaN matches only NaN. Prints
 * the largest errors and their indices unless quiet; returns whether it passed.
 */
static bool
compare_one(const char *name, const struct ml_tval *v, const struct ml_tval *ref,
	    const struct opts *o)
{
	char a[256], b[256];
	bool same = v->rank == ref->rank;
	for (int d = 0; same && d < v->rank; d++)
		same = v->dims[d] == ref->dims[d];
	bool num = (ml_dtype_is_float(ref->dtype) || ml_dtype_is_int(ref->dtype) ||
		    ref->dtype == ML_BOOL);
	if (!same || !num) {
		if (!o->quiet)
			printf("compare %s: FAIL: output is %s, reference is %s\n", name,
			       ml_tval_shape_str(v, a, sizeof a), ml_tval_shape_str(ref, b, sizeof b));
		return false;
	}
	int64_t n = ml_tval_numel(v), bad = 0, iabs = 0, irel = 0;
	double mabs = 0, mrel = 0;
	for (int64_t i = 0; i < n; i++) {
		double x = value(v, i), y = value(ref, i);
		double ad = x == y || (x != x && y != y) ? 0 : fabs(x - y);
		if (ad != ad)
			ad = INFINITY;	/* NaN against a number */
		double rd = ad == 0 ? 0 : ad / fabs(y);
		if (rd != rd)
			rd = INFINITY;
		if (ad > mabs) {
			mabs = ad;
			iabs = i;
		}
		if (rd > mrel) {
			mrel = rd;
			irel = i;
		}
		bad += ad > o->atol && rd > o->rtol;
	}
	if (!o->quiet)
		fprintf(o->json ? stderr : stdout,
			"compare %s: max abs err %.6g at %s, max rel err %.6g at %s: %s "
			"(%lld of %lld beyond rtol %g, atol %g)\n",
			name, mabs, fmt_index(v, iabs, a, sizeof a), mrel, fmt_index(v, irel, b, sizeof b),
			bad ? "FAIL" : "PASS", (long long)bad, (long long)n, o->rtol, o->atol);
	return bad == 0;
}

/* The arrays of a --compare FILE.npz. */
struct refs {
	char **names;
	struct ml_tval *v;
	int n;
};

static int
ref_take(void *ctx, const char *name, struct ml_tval *arr, struct ml_err *e)
{
	struct refs *r = ctx;
	char **nn = realloc(r->names, sizeof *nn * (size_t)(r->n + 1));
	if (nn != NULL)
		r->names = nn;
	struct ml_tval *nv = realloc(r->v, sizeof *nv * (size_t)(r->n + 1));
	if (nv != NULL)
		r->v = nv;
	char *s = strdup(name);
	if (nn == NULL || nv == NULL || s == NULL) {
		free(s);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	r->names[r->n] = s;
	r->v[r->n++] = *arr;
	memset(arr, 0, sizeof *arr);
	return 0;
}

/*
 * compare_outputs: --compare REF: each output of s against REF/NAME.npy
 * (NAME made safe as -o makes it) or the array of its name in REF.npz.
 * A missing or unreadable reference dies with status 3; returns whether
 * every output is within tolerance.
 */
static bool
compare_outputs(struct ml_session *s, const struct ml_graph *g, const struct opts *o)
{
	struct ml_err err = { 0 };
	struct refs r = { 0 };
	bool npz = is_npz(o->compare), ok = true;
	if (npz) {
		uint8_t *buf;
		size_t len;
		if (ml_read_file(o->compare, &buf, &len, &err) < 0)
			die_err(&err);
		int rc = ml_npz_decode(buf, len, ref_take, &r, &err);
		ml_free(buf);
		if (rc < 0) {
			ml_err_prefix(&err, o->compare);
			die_err(&err);
		}
	}
	for (int i = 0; i < g->n_outputs; i++) {
		const char *name = g->tensors[g->outputs[i]]->name;
		struct ml_tval ref = { 0 }, *rp = NULL;
		if (npz) {
			for (int k = 0; k < r.n; k++)
				if (strcmp(r.names[k], name) == 0)
					rp = &r.v[k];
			if (rp == NULL)
				die(EXIT_INVALID, "%s: no array '%s' for output '%s'", o->compare, name,
				    name);
		} else {
			char sn[512], file[4096];
			safe_name(sn, sizeof sn, name);
			snprintf(file, sizeof file, "%s/%s.npy", o->compare, sn);
			if (ml_npy_load(&ref, file, &err) < 0)
				die_err(&err);
			rp = &ref;
		}
		ok &= compare_one(name, ml_session_output(s, i), rp, o);
		ml_tval_clear(&ref);
	}
	for (int k = 0; k < r.n; k++) {
		free(r.names[k]);
		ml_tval_clear(&r.v[k]);
	}
	free(r.names);
	free(r.v);
	return ok;
}

/*
 * print_top: --top K: for each output, the K largest values of each row
 * (the last dim; a scalar is one row) with their indices in the row, largest
 * first, ties to the lower index.
 */
static void
print_top(struct ml_session *s, const struct ml_graph *g, int64_t k)
{
	for (int i = 0; i < g->n_outputs; i++) {
		const struct ml_tval *v = ml_session_output(s, i);
		int64_t n = ml_tval_numel(v), w = v->rank > 0 ? v->dims[v->rank - 1] : 1;
		int64_t kk = k < w ? k : w;
		printf("%s top %lld\n", g->tensors[g->outputs[i]]->name, (long long)kk);
		if (w == 0)
			continue;
		int64_t *top = calloc((size_t)kk + 1, sizeof *top);
		if (top == NULL)
			die(EXIT_FAIL, "out of memory");
		for (int64_t row = 0; row < n / w; row++) {
			int64_t base = row * w, m = 0;
			/* insertion into the k best, kept sorted: O(w k), k is small */
			for (int64_t j = 0; j < w; j++) {
				double x = value(v, base + j);
				if (x != x)
					continue;
				int64_t p = m < kk ? m : kk;
				while (p > 0 && value(v, base + top[p - 1]) < x)
					p--;
				if (p >= kk)
					continue;
				for (int64_t q = (m < kk ? m : kk - 1); q > p; q--)
					top[q] = top[q - 1];
				top[p] = j;
				if (m < kk)
					m++;
			}
			printf("  row %lld:", (long long)row);
			for (int64_t q = 0; q < m; q++)
				printf(" %lld=%.6g", (long long)top[q], value(v, base + top[q]));
			putchar('\n');
		}
		free(top);
	}
}

int
main(int argc, char **argv)
{
	struct opts o = { .warmup = -1, .rtol = -1, .atol = -1 };

	cli_init(argc, argv);
	parse_args(&o, argc, argv);
	if (o.version) {
		print_version(o.verbose);
		return finish_stdout();
	}
	if (o.list_devices) {
		if (optind < argc)
			usage_error(synopsis, "--devices takes no model");
		cli_print_devices(o.json, o.verbose);
		return finish_stdout();
	}
	check_args(&o, argc, argv);
	ml_set_threads(o.threads);

	struct ml_err err = { 0 };
	struct ml_graph *g = NULL;
	struct ml_session *s = NULL;
	struct ml_session_opts so = { .device = o.device, .verbose = o.verbose };
	cli_set_timeout(o.timeout);
	if (ml_model_load(&g, o.path, ML_FMT_AUTO, &err) < 0)
		die_err(&err);
	cli_apply_shapes(g, o.path, &o.shapes, o.verbose);
	if (o.outdir != NULL)
		check_names(g, o.outdir);
	double t_new = ml_now();
	if (ml_session_new(&s, g, &so, &err) < 0)
		die_err(&err);
	t_new = ml_now() - t_new;
	if (o.placement != NULL)
		apply_placement(s, g, o.placement);
	if (o.plan) {
		print_plan(s, &o);
		ml_session_free(s);
		ml_graph_free(g);
		cli_inputs_free(&o.in);
		cli_shapes_free(&o.shapes);
		return finish_stdout();
	}
	bind_inputs(s, g, &o);
	if (o.outdir != NULL)
		make_outdir(o.outdir);

	struct lat l;
	run_timed(s, &o, &l);
	cli_commit();
	if (o.outdir != NULL)
		write_outputs(s, g, o.outdir);
	if (o.json)
		print_json(s, g, &o, &l);
	else if (!o.quiet)
		print_text(s, g, &o, &l, t_new);
	if (o.top > 0 && !o.json && !o.quiet)
		print_top(s, g, o.top);
	bool ok = o.compare == NULL || compare_outputs(s, g, &o);
	if (o.verbose && ml_cache_note_get() != NULL)
		fprintf(stderr, "%s: %s\n", progname, ml_cache_note_get());
	cli_inputs_free(&o.in);
	cli_shapes_free(&o.shapes);
	free(o.npz);
	free(l.runs);
	ml_session_free(s);
	ml_graph_free(g);
	finish_stdout();
	return ok ? EXIT_OK : EXIT_FAIL;
}
