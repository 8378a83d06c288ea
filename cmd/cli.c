/*
 * cli.c: helpers every tool shares: diagnostics in the `tool: message`
 * form with the exit statuses of DESIGN.md, checked number parsing, the
 * terminal rule for binary output, the final stdout check, the signals
 * and the --timeout timer that end a tool cleanly, the progress bar of
 * long work, and the inputs of a run (-i, --dim, --random) and the device
 * list (--devices) that mlrun and
 * mlprof share.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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
/* whether a progress bar is on stderr's line now (the timer's message erases it first) */
static volatile sig_atomic_t bar_shown;

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
	if (bar_shown)
		(void)!write(STDERR_FILENO, "\r\033[K", 4);
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
	cli_progress_clear();	/* the message takes the bar's line; the bar comes back below */
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

/* ---- progress bars ---- */

/*
 * The bar: the mode the options chose (on, off, or on when stderr is a
 * terminal: decided at the first update), the phase in progress (its
 * label, when it began and at which count, its last report) and when the
 * line was last drawn. One bar at a time: a tool's long work is one
 * thing after another.
 */
static struct {
	int mode;		/* CLI_PROGRESS_* */
	int on;			/* -1: not decided yet; 0 or 1 */
	bool active;		/* a phase is in progress */
	char what[64];
	char extra[128];
	int64_t done, total, done0;
	double t0, drawn_at;
	bool dirty;		/* reported since the last draw */
} bar = { .on = -1 };

static void build_cb(void *user, const char *what, int64_t done, int64_t total);

void
cli_progress_setup(int mode, bool quiet)
{
	static const struct ml_progress builds = { .fn = build_cb };
	bar.mode = quiet ? CLI_PROGRESS_OFF : mode;
	bar.on = -1;
	ml_progress_set_builds(cli_progress_on() ? &builds : NULL);
}

bool
cli_progress_on(void)
{
	if (bar.on < 0)
		bar.on = bar.mode == CLI_PROGRESS_ON ||
			 (bar.mode == CLI_PROGRESS_AUTO && isatty(STDERR_FILENO));
	return bar.on == 1;
}

/* term_width: the width of stderr's terminal: COLUMNS, else the terminal's, else 80. */
static int
term_width(void)
{
	const char *c = getenv("COLUMNS");
	char *end;
	if (c != NULL && *c != '\0') {
		long v = strtol(c, &end, 10);
		if (*end == '\0' && v > 0 && v < 10000)
			return (int)v;
	}
	struct winsize ws;
	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

/* fmt_secs: s seconds as M:SS or H:MM:SS, "--:--" when unknown (negative) or 100 hours or more. */
static void
fmt_secs(char *buf, size_t n, double s)
{
	if (!(s >= 0) || s >= 100 * 3600.0) {
		snprintf(buf, n, "--:--");
		return;
	}
	long t = (long)(s + 0.5);
	if (t < 3600)
		snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
	else
		snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

/* fmt_rate: r units a second with three significant digits or so; "--/s" when unknown (0). */
static void
fmt_rate(char *buf, size_t n, double r)
{
	if (!(r > 0) || !isfinite(r))
		snprintf(buf, n, "--/s");
	else if (r >= 99.5)
		snprintf(buf, n, "%.0f/s", r);
	else if (r >= 9.95)
		snprintf(buf, n, "%.1f/s", r);
	else if (r >= 0.005)
		snprintf(buf, n, "%.2f/s", r);
	else
		snprintf(buf, n, "<0.01/s");
}

size_t
cli_progress_format(char *buf, size_t size, int width, const char *what, int64_t done,
		    int64_t total, int64_t done0, double elapsed, const char *extra)
{
	char count[48], rate[24], tm[24], eta[32], tail[128];
	bool known = total > 0;
	double r = elapsed > 0 && done > done0 ? (double)(done - done0) / elapsed : 0;

	if (size == 0)
		return 0;
	/* the count and the rate padded, so that the bar keeps its width as they change */
	if (known) {
		int digits = snprintf(NULL, 0, "%lld", (long long)total);
		snprintf(count, sizeof count, "%*lld/%lld", digits, (long long)done, (long long)total);
	} else {
		snprintf(count, sizeof count, "%lld", (long long)done);
	}
	fmt_rate(rate, sizeof rate, r);
	/* the time left while it runs; once done (or with no total) the time it took */
	bool left = known && done < total;
	fmt_secs(tm, sizeof tm, left ? (r > 0 ? (double)(total - done) / r : -1) : elapsed);
	snprintf(eta, sizeof eta, "%s %s", left ? "ETA" : "elapsed", tm);
	snprintf(tail, sizeof tail, "%s %7s %s", count, rate, eta);
	if (extra == NULL)
		extra = "";
	if (what == NULL)
		what = "";
	/*
	 * What fits in width - 1 columns (a full line would wrap on some
	 * terminals, and \r would then go back to the wrong line): the bar
	 * shrinks first (to 10 cells; none below), then extra goes, then the
	 * line is cut.
	 */
	int w = width > 1 ? width - 1 : 0;
	int lw = (int)strlen(what), lt = (int)strlen(tail), le = (int)strlen(extra);
	int fixed = (lw > 0 ? lw + 1 : 0) + lt;
	int cells = 0;
	bool show_extra = le > 0;
	if (known) {
		/* the bar is sized as if the time read "elapsed M:SS", so it keeps its width at the end */
		int room = w - fixed - 3 - (12 - (int)strlen(eta) > 0 ? 12 - (int)strlen(eta) : 0);
		cells = room - (show_extra ? le + 2 : 0);
		if (cells < 10 && show_extra) {
			show_extra = false;
			cells = room;
		}
		cells = cells > 30 ? 30 : cells < 10 ? 0 : cells;
	}
	if (show_extra && fixed + (cells > 0 ? cells + 3 : 0) + 2 + le > w)
		show_extra = false;
	char line[512];
	size_t n = 0;
	if (lw > 0)
		n += (size_t)snprintf(line + n, sizeof line - n, "%s ", what);
	if (cells > 0 && n + (size_t)cells + 3 < sizeof line) {
		int64_t d = done < 0 ? 0 : done > total ? total : done;
		int fill = (int)((double)d / (double)total * cells);
		line[n++] = '[';
		for (int i = 0; i < cells; i++)
			line[n++] = i < fill ? '#' : '.';
		line[n++] = ']';
		line[n++] = ' ';
	}
	if (n < sizeof line)
		n += (size_t)snprintf(line + n, sizeof line - n, "%s", tail);
	if (show_extra && n < sizeof line)
		n += (size_t)snprintf(line + n, sizeof line - n, "  %s", extra);
	if (n >= sizeof line)
		n = sizeof line - 1;
	if (n > (size_t)w)
		n = (size_t)w;
	if (n >= size)
		n = size - 1;
	memcpy(buf, line, n);
	buf[n] = '\0';
	return n;
}

/* draw: the phase's line as it stands, over the one on stderr. */
static void
draw(double now)
{
	char line[512];
	size_t n = cli_progress_format(line, sizeof line, term_width(), bar.what, bar.done,
				       bar.total, bar.done0, now - bar.t0, bar.extra);
	fprintf(stderr, "\r%.*s\033[K", (int)n, line);
	fflush(stderr);
	bar.drawn_at = now;
	bar.dirty = false;
	bar_shown = 1;
}

void
cli_progress_update(const char *what, int64_t done, int64_t total, const char *extra)
{
	if (!cli_progress_on())
		return;
	double now = ml_now();
	if (what == NULL)
		what = "";
	if (!bar.active || strncmp(bar.what, what, sizeof bar.what - 1) != 0) {
		cli_progress_end(true);
		snprintf(bar.what, sizeof bar.what, "%s", what);
		bar.active = true;
		bar.t0 = now;
		bar.done0 = done;
		bar.drawn_at = -1;
	}
	bar.done = done;
	bar.total = total > 0 ? total : 0;
	snprintf(bar.extra, sizeof bar.extra, "%s", extra != NULL ? extra : "");
	bar.dirty = true;
	/* at most 10 draws a second, but the first and a phase's last always */
	if (bar.drawn_at < 0 || now - bar.drawn_at >= 0.1 || (bar.total > 0 && done >= bar.total))
		draw(now);
}

void
cli_progress_end(bool keep)
{
	if (!bar.active)
		return;
	if (keep) {
		if (bar.dirty || !bar_shown)
			draw(ml_now());
		fputc('\n', stderr);
	} else if (bar_shown) {
		fputs("\r\033[K", stderr);
	}
	fflush(stderr);
	bar_shown = 0;
	bar.active = false;
}

void
cli_progress_clear(void)
{
	if (!bar_shown)
		return;
	fputs("\r\033[K", stderr);
	fflush(stderr);
	bar_shown = 0;
	bar.dirty = true;
	bar.drawn_at = -1;	/* the next update draws it again at once */
}

/* progress_cb: the library's reports (struct ml_progress) to the bar. */
static void
progress_cb(void *user, const char *what, int64_t done, int64_t total)
{
	(void)user;
	cli_progress_update(what, done, total, NULL);
}

const struct ml_progress *
cli_progress(void)
{
	static const struct ml_progress cb = { .fn = progress_cb };
	return cli_progress_on() ? &cb : NULL;
}

/* build_cb: an OpenCL program build, shown while the compiler runs, gone when it is through. */
static void
build_cb(void *user, const char *what, int64_t done, int64_t total)
{
	(void)user;
	cli_progress_update(what, done, total, NULL);
	if (done >= total)
		cli_progress_end(false);
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
cli_random_input(struct ml_tval *v, const struct ml_graph *g, const char *name,
		 const struct cli_inputs *in)
{
	int t = ml_graph_find(g, name);
	if (t < 0)
		die(EXIT_INVALID, "the model has no input '%s'", name);
	make_input(v, g, g->tensors[t], "random", in);
}

/*
 * cli_shape_hint: when an array differs from the input it binds in sizes
 * alone, say that --shape runs the model at the array's shape.
 */
void
cli_shape_hint(struct ml_err *err, const struct ml_graph *g, const char *name,
	       const struct ml_tval *v)
{
	int ti = ml_graph_find(g, name);
	if (ti < 0 || err->code != ML_EINVAL || strstr(err->msg, ": expected ") == NULL)
		return;
	const struct ml_tensor *t = g->tensors[ti];
	if (t->rank != v->rank || v->rank < 1 || (t->dtype != ML_UNDEF && t->dtype != v->dtype))
		return;
	char dims[200];
	size_t k = 0;
	for (int d = 0; d < v->rank && k < sizeof dims; d++)
		k += (size_t)snprintf(dims + k, sizeof dims - k, "%s%lld", d ? "x" : "",
				      (long long)v->dims[d]);
	k = strlen(err->msg);
	snprintf(err->msg + k, sizeof err->msg - k, " (--shape %s=%s runs the model at this shape)",
		 name, dims);
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
			cli_shape_hint(&err, g, in->binds[i].name, &v);
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

void
cli_add_shape(struct cli_shapes *s, const char *arg, const char *synopsis)
{
	struct ml_err err = { 0 };
	struct ml_shape_arg a;
	if (ml_shape_arg_parse(&a, arg, &err) < 0) {
		if (err.code == ML_ENOMEM)
			die(EXIT_FAIL, "out of memory");
		usage_error(synopsis, "--shape: %s", err.msg);
	}
	struct ml_shape_arg *na = realloc(s->a, sizeof *na * (size_t)(s->n + 1));
	if (na == NULL)
		die(EXIT_FAIL, "out of memory");
	s->a = na;
	s->a[s->n++] = a;
}

void
cli_apply_shapes(struct ml_graph *g, const char *path, const struct cli_shapes *s, int verbose)
{
	struct ml_err err = { 0 };
	int nr = 0;
	const char *shown = strcmp(path, "-") == 0 ? "<stdin>" : path;

	if (s->n == 0)
		return;
	if (ml_graph_set_input_shapes(g, s->a, s->n, &nr, &err) < 0)
		die(ml_exit_status(err.code), "%s: --shape: %s", shown, err.msg);
	if (!verbose)
		return;
	for (int i = 0; i < s->n; i++) {
		char buf[300];
		size_t k = 0;
		int ti = ml_graph_find(g, s->a[i].name);
		const struct ml_tensor *t = g->tensors[ti];
		for (int d = 0; d < t->rank && k < sizeof buf; d++)
			k += t->dims[d] >= 0 ?
			     (size_t)snprintf(buf + k, sizeof buf - k, "%s%lld", d ? "," : "",
					      (long long)t->dims[d]) :
			     (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", d ? "," : "",
					      t->sym[d] != NULL ? t->sym[d] : "?");
		fprintf(stderr, "%s: input '%s' is now %s[%s]\n", progname, t->name,
			ml_dtype_name(t->dtype), k ? buf : "");
	}
	fprintf(stderr, "%s: --shape rewrote %d Reshape target%s\n", progname, nr,
		nr == 1 ? "" : "s");
}

void
cli_shapes_free(struct cli_shapes *s)
{
	for (int i = 0; i < s->n; i++)
		ml_shape_arg_clear(&s->a[i]);
	free(s->a);
	s->a = NULL;
	s->n = 0;
}

void
cli_pipeline_plan(const struct ml_graph *step, const char *stages, const char *devices,
		  struct ml_pipeline_opts *po, struct cli_pipeline *cp)
{
	struct ml_err err = { 0 };
	memset(cp, 0, sizeof *cp);
	if ((cp->dev_buf = strdup(devices)) == NULL ||
	    (cp->stage_of = malloc(sizeof(int) * ((size_t)step->n_nodes + 1))) == NULL)
		die(EXIT_FAIL, "out of memory");
	int nd = 0, ns;
	for (char *save = NULL, *d = strtok_r(cp->dev_buf, ",", &save); d != NULL;
	     d = strtok_r(NULL, ",", &save)) {
		if (nd == 64)
			die(EXIT_USAGE, "--device: more than 64 stages");
		if (strcmp(d, "cpu") != 0 && strcmp(d, "cl") != 0 && strncmp(d, "cl:", 3) != 0)
			die(EXIT_USAGE, "--device: unknown device '%s' for a stage (cpu, cl, cl:N)", d);
		cp->devs[nd++] = d;
	}
	if (nd == 0)
		die(EXIT_USAGE, "--device: no device");
	cp->measured = strcmp(stages, "measured") == 0;
	if (strcmp(stages, "auto") == 0 || cp->measured) {
		ns = nd;
		if (ml_pipeline_auto(step, ns, cp->stage_of, &err) < 0)
			die(ml_exit_status(err.code), "--pipeline %s: %s", stages, err.msg);
	} else {
		const char *fdev[64];
		if (ml_pipeline_plan_read(step, stages, 64, cp->stage_of, &ns, fdev, &cp->plan_buf,
					  &err) < 0)
			die_err(&err);
		if (nd > 1 && nd != ns)
			die(EXIT_USAGE, "--device names %d devices for the %d stages of %s", nd, ns,
			    stages);
		const char *one = cp->devs[0];
		for (int s = 0; s < ns; s++)
			cp->devs[s] = nd > 1 ? cp->devs[s] : fdev[s] != NULL ? fdev[s] : one;
	}
	ml_pipeline_opts_init(po);
	po->n_stages = ns;
	po->devices = cp->devs;
	/* measured: the library cuts, from the times measured at po->measure_rows */
	po->stage_of = cp->measured ? NULL : cp->stage_of;
}

void
cli_pipeline_free(struct cli_pipeline *cp)
{
	free(cp->stage_of);
	free(cp->plan_buf);
	free(cp->dev_buf);
	memset(cp, 0, sizeof *cp);
}
