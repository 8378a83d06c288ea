/*
 * cli.c: helpers every tool shares: diagnostics in the `tool: message`
 * form with the exit statuses of DESIGN.md, checked number parsing, the
 * terminal rule for binary output, the final stdout check, the signals
 * and the --timeout timer that end a tool cleanly, and the inputs of a
 * run (-i, --dim, --random) and the device list (--devices) that mlrun and
 * mlprof share.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "cli.h"

const char *progname = "ml";

/* the hook of cli_set_exit_hook, run by leave */
static void (*exit_hook)(int status);

void
cli_set_exit_hook(void (*fn)(int status))
{
	exit_hook = fn;
}

/* leave: exit with status, through the hook when one is set. */
static _Noreturn void
leave(int status)
{
	if (exit_hook != NULL)
		exit_hook(status);
	exit(status);
}

/* size_value: a byte count with an optional K/M/G suffix (powers of 1024) and B. */
static bool
size_value(const char *s, uint64_t *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end != '\0' || errno == ERANGE || v > UINT64_MAX / mul)
		return false;
	*out = v * mul;
	return true;
}

/*
 * on_fatal_signal: SIGINT, SIGTERM or SIGHUP: remove the temporary files
 * of the writes in progress, then die of the signal as if there were no
 * handler (SA_RESETHAND restored the default; the signal raised again is
 * delivered when the handler returns), so the parent sees the signal.
 */
static void
on_fatal_signal(int sig)
{
	ml_tmp_cleanup();
	raise(sig);
}

/*
 * catch_signals: on_fatal_signal for SIGINT, SIGTERM and SIGHUP; a signal
 * ignored by whoever started us (nohup, a shell's &) stays ignored.
 */
static void
catch_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		struct sigaction sa, old;
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		memset(&sa, 0, sizeof sa);
		sigemptyset(&sa.sa_mask);
		sa.sa_handler = on_fatal_signal;
		sa.sa_flags = SA_RESETHAND;
		sigaction(sigs[i], &sa, NULL);
	}
}

/* The state of --timeout: the message, ready for write(2), and whether outputs are being written. */
static char timeout_msg[128];
static size_t timeout_len;
static volatile sig_atomic_t committing;

/*
 * on_timer: the --timeout has passed. Unless the outputs are being written
 * (they are then complete in a moment, and the run did finish in time),
 * the run stops here: the temporary files go, the message goes out in one
 * write, and the status is 1. Only async-signal-safe calls.
 */
static void
on_timer(int sig)
{
	(void)sig;
	if (committing)
		return;
	ml_tmp_cleanup();
	(void)!write(STDERR_FILENO, timeout_msg, timeout_len);
	_exit(EXIT_FAIL);
}

void
cli_set_timeout(double secs)
{
	if (!(secs > 0))
		return;
	int n = snprintf(timeout_msg, sizeof timeout_msg, "%s: timed out after %g s\n", progname,
			 secs);
	timeout_len = n < 0 ? 0 : (size_t)n < sizeof timeout_msg ? (size_t)n : sizeof timeout_msg - 1;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_timer;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { 0 };
	it.it_value.tv_sec = (time_t)secs;
	it.it_value.tv_usec = (suseconds_t)((secs - (double)(time_t)secs) * 1e6);
	if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0)
		it.it_value.tv_usec = 1;
	setitimer(ITIMER_REAL, &it, NULL);
}

void
cli_commit(void)
{
	committing = 1;
}

double
parse_timeout(const char *s, const char *synopsis)
{
	double v = parse_double("--timeout", s, synopsis);
	if (!(v > 0) || v > 1e7)
		usage_error(synopsis, "--timeout: '%s' is not a number of seconds in (0, 1e7]", s);
	return v;
}

void
cli_init(int argc, char **argv)
{
	(void)argc;
	if (argv[0] != NULL) {
		const char *s = strrchr(argv[0], '/');
		progname = s != NULL ? s + 1 : argv[0];
	}
	/* a closed pipe is an error on write, reported once, not a signal */
	signal(SIGPIPE, SIG_IGN);
	/* an interrupted write leaves no temporary file */
	catch_signals();
	const char *cap = getenv("ML_MAX_ALLOC");
	uint64_t v;
	if (cap != NULL && *cap != '\0') {
		if (!size_value(cap, &v) || v == 0)
			die(EXIT_USAGE, "ML_MAX_ALLOC: '%s' is not a size (bytes, or with K, M or G)",
			    cap);
		ml_set_alloc_cap(v);
	}
	ml_alloc_cap();
}

/*
 * put_msg: "progname: msg" and a newline on stderr, with control
 * characters escaped: names in messages come from files, and one with a
 * newline must not make the diagnostic two lines. The line goes out in one
 * write, so that the lines of processes sharing stderr (the ranks of an
 * MPI job, tools in a pipeline) do not interleave.
 */
static void
put_msg(const char *msg)
{
	char line[4 * 2048 + 256];
	int h = snprintf(line, sizeof line, "%s: ", progname);
	size_t n = h < 0 ? 0 : (size_t)h < sizeof line ? (size_t)h : sizeof line - 1;

	for (const unsigned char *p = (const unsigned char *)msg; *p != '\0' && n + 6 < sizeof line;
	     p++) {
		if (*p == '\n') {
			line[n++] = '\\', line[n++] = 'n';
		} else if (*p == '\t') {
			line[n++] = '\\', line[n++] = 't';
		} else if (*p < 0x20 || *p == 0x7f) {
			snprintf(line + n, 5, "\\x%02x", *p);
			n += 4;
		} else {
			line[n++] = (char)*p;
		}
	}
	line[n++] = '\n';
	fwrite(line, 1, n, stderr);
}

static void
vput_msg(const char *fmt, va_list ap)
{
	char buf[2048];
	vsnprintf(buf, sizeof buf, fmt, ap);
	put_msg(buf);
}

void
warnx(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vput_msg(fmt, ap);
	va_end(ap);
}

_Noreturn void
die(int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vput_msg(fmt, ap);
	va_end(ap);
	leave(status);
}

/*
 * stdout_gone: whether stdout is a pipe or socket whose reader has left.
 * Output that nobody reads any more is no error to report: the tool
 * stops quietly (status 1), as a tool killed by SIGPIPE would.
 */
static bool
stdout_gone(void)
{
	struct pollfd p = { .fd = STDOUT_FILENO, .events = 0 };
	return errno == EPIPE || (poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0);
}

_Noreturn void
die_err(const struct ml_err *err)
{
	if (err->code == ML_EIO && stdout_gone())
		leave(EXIT_FAIL);
	const char *msg = err->msg[0] ? err->msg : ml_strerror(err->code);
	if (err->code == ML_ENOMEM && (ml_alloc_cap_hit() || strstr(msg, "allocation cap"))) {
		/* say which limit it was and how to raise it */
		char buf[sizeof err->msg + 128];
		snprintf(buf, sizeof buf, "%s (%s %llu bytes; see ML_MAX_ALLOC)", msg,
			 strstr(msg, "allocation cap") ? "the cap is" : "over the allocation cap of",
			 (unsigned long long)ml_alloc_cap());
		put_msg(buf);
		/* a limit the input breaks, as a cycle or an absurd dim does (exit 3) */
		leave(ml_exit_status(ML_EINVAL));
	}
	put_msg(msg);
	leave(ml_exit_status(err->code));
}

_Noreturn void
usage_error(const char *synopsis, const char *fmt, ...)
{
	va_list ap;
	char msg[2048], all[4096];
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* one write, as put_msg */
	int n = snprintf(all, sizeof all, "%s: %s\nusage: %s\n", progname, msg, synopsis);
	fwrite(all, 1, n < 0 ? 0 : (size_t)n < sizeof all ? (size_t)n : sizeof all - 1, stderr);
	leave(EXIT_USAGE);
}

void
print_version(int verbose)
{
	printf("%s (ml) %s\n", progname, ML_VERSION);
	if (verbose)
		printf("features: opencl=no openblas=yes zstd=yes protobuf-c=yes threads=%d\n",
		       ml_get_threads());
}

int64_t
parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, const char *synopsis)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno == ERANGE)
		usage_error(synopsis, "%s: '%s' is not an integer", opt, s);
	if (v < lo || v > hi)
		usage_error(synopsis, "%s: %lld is out of range [%lld, %lld]", opt, v, (long long)lo,
			    (long long)hi);
	return v;
}

double
parse_double(const char *opt, const char *s, const char *synopsis)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v))
		usage_error(synopsis, "%s: '%s' is not a number", opt, s);
	return v;
}

uint64_t
parse_size(const char *opt, const char *s, const char *synopsis)
{
	uint64_t v;
	if (!size_value(s, &v))
		usage_error(synopsis, "%s: '%s' is not a size", opt, s);
	return v;
}

void
refuse_tty_stdout(const char *path, bool force)
{
	if (strcmp(path, "-") == 0 && !force && isatty(STDOUT_FILENO))
		die(EXIT_USAGE, "refusing to write binary data to a terminal (use -o FILE or -f)");
}

void
show_help(const char *synopsis, const char *help)
{
	printf("usage: %s\n\n%s", synopsis, help);
	exit(finish_stdout());
}

int
finish_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		if (!stdout_gone())
			fprintf(stderr, "%s: write error: %s\n", progname, strerror(errno));
		exit(EXIT_FAIL);
	}
	if (fclose(stdout) != 0) {
		if (!stdout_gone())
			fprintf(stderr, "%s: write error: %s\n", progname, strerror(errno));
		exit(EXIT_FAIL);
	}
	return 0;
}

int
cli_print_devices(bool json, int verbose)
{
	struct ml_device_info *v;
	struct ml_err why = { 0 };
	int n;
	if (ml_devices(&v, &n, &why) < 0)
		die_err(&why);
	if (json) {
		printf("{\"devices\": [");
		for (int i = 0; i < n; i++) {
			printf("%s\n  {\"id\": ", i ? "," : "");
			ml_json_str(stdout, v[i].id);
			printf(", \"index\": %d, \"name\": ", v[i].index);
			ml_json_str(stdout, v[i].name);
			printf(", \"type\": ");
			ml_json_str(stdout, v[i].type);
			printf(", \"platform\": ");
			ml_json_str(stdout, v[i].platform);
			printf(", \"vendor\": ");
			ml_json_str(stdout, v[i].vendor);
			printf(", \"version\": ");
			ml_json_str(stdout, v[i].version);
			printf(", \"driver\": ");
			ml_json_str(stdout, v[i].driver);
			printf(", \"compute_units\": %d, \"global_mem\": %lld, "
			       "\"local_mem\": %lld, "
			       "\"max_alloc\": %lld, \"max_work_group\": %lld, \"fp16\": %s, "
			       "\"fp64\": %s}", v[i].compute_units, (long long)v[i].global_mem,
			       (long long)v[i].local_mem, (long long)v[i].max_alloc,
			       (long long)v[i].max_work_group, v[i].fp16 ? "true" : "false",
			       v[i].fp64 ? "true" : "false");
		}
		printf("\n]");
		if (n == 1) {
			printf(", \"opencl\": ");
			ml_json_str(stdout, why.msg);
		}
		printf("}\n");
	} else {
		printf("%-6s %-5s %-36s %-28s %5s %10s %9s %4s %4s\n", "ID", "TYPE", "NAME",
		       "PLATFORM", "CU", "MEMORY", "LOCAL", "FP16", "FP64");
		for (int i = 0; i < n; i++) {
			char mem[32] = "-", loc[32] = "-";
			if (v[i].global_mem > 0)
				snprintf(mem, sizeof mem, "%.1f GiB",
					 (double)v[i].global_mem / 1073741824.0);
			if (v[i].local_mem > 0)
				snprintf(loc, sizeof loc, "%lld KiB",
					 (long long)v[i].local_mem / 1024);
			printf("%-6s %-5s %-36.36s %-28.28s %5d %10s %9s %4s %4s\n", v[i].id,
			       v[i].type, v[i].name, i == 0 ? "-" : v[i].platform,
			       v[i].compute_units, mem, loc, v[i].fp16 ? "yes" : "no",
			       v[i].fp64 ? "yes" : "no");
			if (verbose && i > 0)
				printf("       %s, driver %s\n", v[i].version, v[i].driver);
		}
		if (n == 1)
			fprintf(stderr, "%s: no OpenCL device: %s\n", progname,
				why.msg[0] ? why.msg : "none found");
	}
	ml_free(v);
	return n;
}

void
cli_add_input(struct cli_inputs *in, char *arg, const char *synopsis)
{
	char *eq = strchr(arg, '=');
	if (eq == NULL || eq == arg || eq[1] == '\0')
		usage_error(synopsis, "--input: '%s' is not NAME=FILE", arg);
	struct cli_bind *nb = realloc(in->binds, sizeof *nb * (size_t)(in->nbinds + 1));
	if (nb == NULL)
		die(EXIT_FAIL, "out of memory");
	in->binds = nb;
	*eq = '\0';
	in->binds[in->nbinds].name = arg;
	in->binds[in->nbinds].file = eq + 1;
	in->nbinds++;
}

void
cli_add_dim(struct cli_inputs *in, char *arg, const char *synopsis)
{
	char *eq = strchr(arg, '=');
	if (eq == NULL || eq == arg)
		usage_error(synopsis, "--dim: '%s' is not NAME=N", arg);
	*eq = '\0';
	struct cli_dim *nd = realloc(in->dims, sizeof *nd * (size_t)(in->ndims + 1));
	if (nd == NULL)
		die(EXIT_FAIL, "out of memory");
	in->dims = nd;
	in->dims[in->ndims].name = arg;
	in->dims[in->ndims].v = parse_int("--dim", eq + 1, 0, INT32_MAX, synopsis);
	in->ndims++;
}

void
cli_inputs_free(struct cli_inputs *in)
{
	free(in->binds);
	free(in->dims);
	in->binds = NULL;
	in->dims = NULL;
	in->nbinds = in->ndims = 0;
}

static uint64_t rng_state;

/* rng_next: splitmix64, small, seedable, the same on every machine */
static uint64_t
rng_next(void)
{
	return ml_splitmix64(&rng_state);
}

static double
rng_unit(void)
{
	return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

static void
make_input(struct ml_tval *v, const struct ml_graph *g, const struct ml_tensor *t,
	   const char *how, const struct cli_inputs *in)
{
	struct ml_err err = { 0 };
	/*
	 * The range of random values: [-1, 1) for floats, [0, 10) for
	 * integers, unless the graph's metadata "random:NAME" says "LO HI"
	 * (mltrain's step graphs do so for their label and lr inputs).
	 */
	double lo = 0, hi = 10;
	bool ranged = false;
	char key[300];
	snprintf(key, sizeof key, "random:%s", t->name);
	for (int k = 0; k < g->n_meta; k++)
		if (strcmp(g->meta[k].key, key) == 0 &&
		    sscanf(g->meta[k].value, "%lf %lf", &lo, &hi) == 2 && lo <= hi)
			ranged = true;
	int64_t dims[ML_MAX_RANK];
	if (t->rank < 0)
		die(EXIT_INVALID, "input '%s' has an unknown rank; give it with -i %s=FILE.npy",
		    t->name, t->name);
	for (int d = 0; d < t->rank; d++) {
		dims[d] = t->dims[d];
		if (dims[d] < 0) {
			dims[d] = 1;
			for (int k = 0; k < in->ndims; k++)
				if (t->sym[d] != NULL && strcmp(in->dims[k].name, t->sym[d]) == 0)
					dims[d] = in->dims[k].v;
		}
	}
	enum ml_dtype dt = t->dtype == ML_UNDEF ? ML_F32 : t->dtype;
	if (ml_tval_alloc(v, dt, t->rank, dims, &err) < 0)
		die_err(&err);
	int64_t n = ml_tval_numel(v);
	for (int64_t i = 0; i < n; i++) {
		double x;
		if (strcmp(how, "zeros") == 0)
			x = 0;
		else if (strcmp(how, "ones") == 0)
			x = 1;
		else if (ml_dtype_is_float(dt))
			x = ranged ? lo + rng_unit() * (hi - lo) : rng_unit() * 2 - 1;
		else if (dt == ML_BOOL)
			x = (double)(rng_next() & 1);
		else if (ranged && hi - lo >= 1)
			x = lo + (double)(rng_next() % (uint64_t)(hi - lo));
		else
			x = ranged ? lo : (double)(rng_next() % 10);
		ml_set_f64(v->data, dt, i, x);
	}
}

void
cli_bind_inputs(struct ml_session *s, const struct ml_graph *g, const char *path,
		const struct cli_inputs *in)
{
	struct ml_err err = { 0 };

	rng_state = in->seed;
	for (int i = 0; i < in->nbinds; i++) {
		struct ml_tval v = { 0 };
		const char *f = in->binds[i].file;
		if (strcmp(f, "zeros") == 0 || strcmp(f, "ones") == 0 || strcmp(f, "random") == 0) {
			int ti = ml_graph_find(g, in->binds[i].name);
			bool isin = false;
			for (int k = 0; k < g->n_inputs; k++)
				isin |= g->inputs[k] == ti;
			if (ti < 0 || !isin)
				die(EXIT_INVALID, "%s: the model has no input '%s'", path,
				    in->binds[i].name);
			make_input(&v, g, g->tensors[ti], f, in);
		} else if (ml_npy_load(&v, f, &err) < 0) {
			die_err(&err);
		}
		if (ml_session_set_input(s, in->binds[i].name, &v, &err) < 0) {
			ml_err_prefix(&err, f);
			die_err(&err);
		}
		ml_tval_clear(&v);
	}
	for (int i = 0; i < g->n_inputs; i++) {
		const struct ml_tensor *t = g->tensors[g->inputs[i]];
		bool given = false;
		for (int k = 0; k < in->nbinds; k++)
			given |= strcmp(in->binds[k].name, t->name) == 0;
		if (given || t->kind == ML_TK_CONST || t->kind == ML_TK_PARAM)
			continue;
		if (!in->random)
			die(EXIT_INVALID, "%s: input '%s' is not given (use -i %s=FILE.npy or --random)",
			    path, t->name, t->name);
		struct ml_tval v = { 0 };
		make_input(&v, g, t, "random", in);
		if (ml_session_set_input(s, t->name, &v, &err) < 0)
			die_err(&err);
		ml_tval_clear(&v);
	}
}
