/*
 * cli.h: helpers every tool shares: program name, diagnostics with the
 * exit statuses of DESIGN.md, checked number parsing, stdout checks.
 */
#ifndef CLI_H
#define CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ml.h"

/* Exit statuses, the same in every tool and man page. */
enum {
	EXIT_OK = 0,
	EXIT_FAIL = 1,		/* runtime failure (I/O, out of memory) */
	EXIT_USAGE = 2,		/* bad option or operand */
	EXIT_INVALID = 3,	/* invalid input: file, model, data */
	EXIT_UNSUP = 4,		/* unsupported op, dtype, device */
};

extern const char *progname;

/*
 * cli_init: set progname from argv[0], apply ML_MAX_ALLOC, ignore SIGPIPE,
 * and catch SIGINT, SIGTERM and SIGHUP (unless ignored at start) so that
 * they remove the temporary files of the writes in progress
 * (ml_tmp_cleanup) before the tool dies of the signal.
 */
void cli_init(int argc, char **argv);
/*
 * cli_set_timeout: stop the tool after secs seconds of wall time (--timeout):
 * "progname: timed out after S s" and status 1, no output left partial or
 * temporary. Once cli_commit has been called (the outputs are being
 * written) the timer no longer stops it. secs <= 0: no timer.
 */
void cli_set_timeout(double secs);
/* cli_commit: the run is done and its outputs are being written (see cli_set_timeout). */
void cli_commit(void);
/* parse_timeout: the seconds of --timeout, in (0, 1e7], else a usage error. */
double parse_timeout(const char *s, const char *synopsis);
/*
 * cli_set_exit_hook: have die, die_err and usage_error call fn(status)
 * before they exit (NULL: none). mltrain under MPI ends the whole job with
 * the status there (MPI_Abort), so a rank that fails never leaves the
 * others waiting.
 */
void cli_set_exit_hook(void (*fn)(int status));
/* die: print "progname: msg" to stderr and exit with status. */
_Noreturn void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* die_err: print "progname: err->msg" and exit with ml_exit_status(err->code). */
_Noreturn void die_err(const struct ml_err *err);
/* warnx: print "progname: msg" to stderr. */
void warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* usage_error: "progname: msg", then the synopsis line, to stderr; exit 2. */
_Noreturn void usage_error(const char *synopsis, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* show_help: "usage: SYNOPSIS", a blank line and the help text on stdout; exit 0. */
_Noreturn void show_help(const char *synopsis, const char *help);
/* print_version: "progname (ml) 0.4.0", with build features when verbose. */
void print_version(int verbose);
/* parse_int: a whole decimal integer in [lo, hi], else usage error naming opt. */
int64_t parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, const char *synopsis);
/* parse_double: a finite number, else usage error. */
double parse_double(const char *opt, const char *s, const char *synopsis);
/* parse_size: a byte count with an optional K/M/G suffix (powers of 1024). */
uint64_t parse_size(const char *opt, const char *s, const char *synopsis);
/* refuse_tty_stdout: die with status 2 when path is "-" and stdout is a terminal, unless force. */
void refuse_tty_stdout(const char *path, bool force);
/* finish_stdout: flush and close stdout; on a write error print "write error" and exit 1. */
int finish_stdout(void);

/*
 * Progress bars (DESIGN.md: progress on long work goes to stderr, only when
 * stderr is a terminal). One bar at a time, one line: "LABEL [###...]
 * DONE/TOTAL RATE/s ETA M:SS EXTRA", redrawn in place (\r, erase to the
 * end of the line) at most 10 times a second and fitted to the terminal's
 * width (COLUMNS, else the terminal's own, else 80). A phase whose total
 * is unknown shows its count and elapsed time instead of bar and ETA.
 * --progress forces the bar on when stderr is not a terminal (tests,
 * logs), --no-progress turns it off; -q turns it off too.
 */
enum { CLI_PROGRESS_OFF = -1, CLI_PROGRESS_AUTO = 0, CLI_PROGRESS_ON = 1 };
/* The options every tool with long work takes, for their getopt_long tables. */
enum { CLI_OPT_PROGRESS = 0x1000, CLI_OPT_NO_PROGRESS };
/* cli_progress_setup: --progress (ON), --no-progress (OFF) or neither (AUTO); quiet: off. */
void cli_progress_setup(int mode, bool quiet);
/* cli_progress_on: whether updates are drawn (decided by cli_progress_setup and stderr). */
bool cli_progress_on(void);
/* cli_progress: the callback for the library's long calls; NULL when no bar is drawn. */
const struct ml_progress *cli_progress(void);
/*
 * cli_progress_update: done of total (0: unknown) in phase what, with
 * extra text after the ETA (NULL: none). Another what than the last ends
 * the bar on the line (as cli_progress_end(true)) and starts a new one
 * whose rate counts from this done. Rate-limited; a phase's done == total
 * is always drawn.
 */
void cli_progress_update(const char *what, int64_t done, int64_t total, const char *extra);
/*
 * cli_progress_end: end the bar: keep leaves its last state on its line
 * and a newline; otherwise the line is erased (a report line follows).
 * Nothing when no bar is drawn.
 */
void cli_progress_end(bool keep);
/* cli_progress_clear: erase the bar before other output to stderr; the next update redraws it. */
void cli_progress_clear(void);
/*
 * cli_progress_format: the bar's line, at most width - 1 characters (so
 * it never wraps), into buf (size bytes, NUL-terminated): what, done of
 * total (0: unknown), elapsed seconds since the phase began at done0, and
 * extra (NULL: none). The rate is unknown ("--/s") until time has passed
 * and work been done, the ETA then "--:--". Returns the line's length.
 */
size_t cli_progress_format(char *buf, size_t size, int width, const char *what, int64_t done,
			   int64_t total, int64_t done0, double elapsed, const char *extra);
/*
 * cli_print_devices: --devices of mlrun and mlprof: every device (the CPU,
 * then each OpenCL device) on stdout as a table (with verbose, each OpenCL
 * device's version and driver on a second line) or as JSON (json); without
 * an OpenCL device, "progname: no OpenCL device: WHY" on stderr (JSON: the
 * reason as "opencl"). Returns the number of devices, 1 when only the CPU;
 * the caller calls finish_stdout. Dies with status 1 when the list cannot
 * be made.
 */
int cli_print_devices(bool json, int verbose);

/*
 * Inputs for a run, shared by mlrun and mlprof: -i NAME=FILE bindings
 * (FILE a .npy file, or zeros, ones, random), --dim NAME=N sizes for
 * symbolic dims of made-up arrays, and --random with --seed for every input
 * not given.
 */
struct cli_bind {
	char *name;
	char *file;
};
struct cli_dim {
	char *name;
	int64_t v;
};
struct cli_inputs {
	struct cli_bind *binds;
	int nbinds;
	struct cli_dim *dims;
	int ndims;
	bool random;
	uint64_t seed;
};
/* cli_add_input: take -i NAME=FILE (arg is split in place); usage error when malformed. */
void cli_add_input(struct cli_inputs *in, char *arg, const char *synopsis);
/* cli_add_dim: take --dim NAME=N; usage error when malformed. */
void cli_add_dim(struct cli_inputs *in, char *arg, const char *synopsis);
/*
 * cli_bind_inputs: bind every input of g in s, the -i ones first in their
 * order, then --random for the rest; dies with status 3 for a missing or
 * unknown input or a bad file. The random numbers restart from the seed at
 * each call, so every session gets the same inputs.
 */
void cli_bind_inputs(struct ml_session *s, const struct ml_graph *g, const char *path,
		     const struct cli_inputs *in);
/*
 * cli_random_input: a random array for input name of g, as --random makes
 * it (its "random:NAME" range; symbolic dims from --dim, else 1); the
 * numbers go on from the last call's. Dies with status 3 without the input.
 */
void cli_random_input(struct ml_tval *v, const struct ml_graph *g, const char *name,
		      const struct cli_inputs *in);
/* cli_inputs_free: release what cli_add_input and cli_add_dim took. */
void cli_inputs_free(struct cli_inputs *in);

/*
 * Input shapes, shared by every tool that reads a model: --shape
 * NAME=D1xD2x... (repeatable) gives an input a new shape, a dim given as
 * a name making it symbolic (ml_graph_set_input_shapes).
 */
struct cli_shapes {
	struct ml_shape_arg *a;
	int n;
};
/* cli_add_shape: take --shape ARG; usage error (status 2) when malformed. */
void cli_add_shape(struct cli_shapes *s, const char *arg, const char *synopsis);
/*
 * cli_apply_shapes: apply s to g, read from path: an input the model lacks
 * or a rank that differs dies with status 3, a model the new shapes do not
 * fit with status 4, naming the node. Under verbose, one line on stderr
 * per input and the count of Reshape targets rewritten. No-op when empty.
 */
void cli_apply_shapes(struct ml_graph *g, const char *path, const struct cli_shapes *s,
		      int verbose);
/*
 * cli_shape_hint: after ml_session_set_input refused v for input name of
 * g, add to err's message that --shape runs the model at v's shape, when
 * v differs from the input in sizes alone.
 */
void cli_shape_hint(struct ml_err *err, const struct ml_graph *g, const char *name,
		    const struct ml_tval *v);
/* cli_shapes_free: release what cli_add_shape took. */
void cli_shapes_free(struct cli_shapes *s);

/*
 * Pipeline stages, shared by mltrain and mlprof: --pipeline STAGES (auto,
 * or a stage file) over --device DEVICES (a comma-separated list, one a
 * stage; with a file, a single device for the stages its "stage N DEVICE"
 * lines leave out; "measured" as auto, from node times). cli_pipeline_plan
 * fills po's stages, devices and stage_of (owned by cp; NULL for measured,
 * which ml_pipeline_new cuts from the times measured at po->measure_rows,
 * the caller's to set with the micro-batches and schedule) for step. Dies with status 2 for a bad device list, 3 for a plan that
 * does not fit the model, 1 for a file that cannot be read.
 */
struct cli_pipeline {
	int *stage_of;
	const char *devs[64];
	char *plan_buf, *dev_buf;
	bool measured;		/* --pipeline measured */
};
void cli_pipeline_plan(const struct ml_graph *step, const char *stages, const char *devices,
		       struct ml_pipeline_opts *po, struct cli_pipeline *cp);
/* cli_pipeline_free: release what cli_pipeline_plan took. */
void cli_pipeline_free(struct cli_pipeline *cp);

#endif
