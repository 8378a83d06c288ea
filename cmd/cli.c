/*
 * cli.c: helpers every tool shares: diagnostics in the `tool: message`
 * form with the exit statuses of DESIGN.md, checked number parsing, the
 * terminal rule for binary output, and the final stdout check.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

const char *progname = "ml";

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
	ml_alloc_cap();
}

void
warnx(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

_Noreturn void
die(int status, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

_Noreturn void
die_err(const struct ml_err *err)
{
	fprintf(stderr, "%s: %s\n", progname, err->msg[0] ? err->msg : ml_strerror(err->code));
	exit(ml_exit_status(err->code));
}

_Noreturn void
usage_error(const char *synopsis, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fprintf(stderr, "usage: %s\n", synopsis);
	exit(EXIT_USAGE);
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
	char *end;
	errno = 0;
	if (*s == '-')
		usage_error(synopsis, "%s: '%s' is not a size", opt, s);
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mul = 1;
	if (end != s) {
		switch (*end) {
		case 'k': case 'K': mul = 1ull << 10; end++; break;
		case 'm': case 'M': mul = 1ull << 20; end++; break;
		case 'g': case 'G': mul = 1ull << 30; end++; break;
		}
		if (*end == 'B' || *end == 'b')
			end++;
	}
	if (end == s || *end != '\0' || errno == ERANGE || v > UINT64_MAX / mul)
		usage_error(synopsis, "%s: '%s' is not a size", opt, s);
	return v * mul;
}

void
refuse_tty_stdout(const char *path, bool force)
{
	if (strcmp(path, "-") == 0 && !force && isatty(STDOUT_FILENO))
		die(EXIT_USAGE, "refusing to write binary data to a terminal (use -o FILE or -f)");
}

int
finish_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: write error: %s\n", progname, strerror(errno));
		exit(EXIT_FAIL);
	}
	if (fclose(stdout) != 0) {
		fprintf(stderr, "%s: write error: %s\n", progname, strerror(errno));
		exit(EXIT_FAIL);
	}
	return 0;
}

void
json_str(FILE *fp, const char *s)
{
	fputc('"', fp);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", fp); break;
		case '\\': fputs("\\\\", fp); break;
		case '\n': fputs("\\n", fp); break;
		case '\t': fputs("\\t", fp); break;
		case '\r': fputs("\\r", fp); break;
		default:
			if (*p < 0x20)
				fprintf(fp, "\\u%04x", *p);
			else
				fputc(*p, fp);
		}
	}
	fputc('"', fp);
}
