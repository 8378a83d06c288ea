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
/* cli_inputs_free: release what cli_add_input and cli_add_dim took. */
void cli_inputs_free(struct cli_inputs *in);

#endif
