/*
 * test_cli.c: C tests of the tools' shared helpers (cmd/cli.c): the
 * progress bar's line, cli_progress_format, at its edge cases: no time
 * elapsed yet, an unknown total, done == total, a resumed phase, narrow
 * terminals and long rates; and the drawing (cli_progress_update): the
 * redraws rate-limited, a phase's end always drawn, a new phase on a new
 * line, an erased bar, nothing when off. Prints TAP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../cmd/cli.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
}

/* is: the line for these arguments equals want (printed when it does not). */
static void
is(int width, const char *what, int64_t done, int64_t total, int64_t done0, double elapsed,
   const char *extra, const char *want, const char *name)
{
	char buf[512];
	size_t n = cli_progress_format(buf, sizeof buf, width, what, done, total, done0, elapsed,
				       extra);
	bool good = strcmp(buf, want) == 0 && n == strlen(buf);
	if (!good)
		printf("# got  '%s'\n# want '%s'\n", buf, want);
	ok(good, name);
}

static void
test_format(void)
{
	is(80, "calibrating", 0, 8, 0, 0, NULL,
	   "calibrating [..............................] 0/8    --/s ETA --:--",
	   "nothing done and no time elapsed: rate and ETA unknown");
	is(80, "calibrating", 3, 8, 0, 0, NULL,
	   "calibrating [###########...................] 3/8    --/s ETA --:--",
	   "work done in zero elapsed time: no rate (no division by zero)");
	is(80, "calibrating", 2, 8, 0, 4, NULL,
	   "calibrating [#######.......................] 2/8  0.50/s ETA 0:12",
	   "2 of 8 in 4 s: 0.50/s, 12 s left");
	is(80, "calibrating", 8, 8, 0, 3.2, NULL,
	   "calibrating [##############################] 8/8  2.50/s elapsed 0:03",
	   "done == total: a full bar and the time it took instead of an ETA");
	is(80, "running", 120, 100, 0, 1, NULL,
	   "running [##############################] 120/100   120/s elapsed 0:01",
	   "done beyond total: the bar stays full");
	is(80, "budget search", 3, 0, 0, 75, NULL, "budget search 3  0.04/s elapsed 1:15",
	   "unknown total: count, rate and elapsed time, no bar and no ETA");
	is(80, "budget search", 0, 0, 0, 0, NULL, "budget search 0    --/s elapsed 0:00",
	   "unknown total, nothing done yet");
	is(80, "epoch 2/5", 60, 100, 50, 2, "loss 0.5000",
	   "epoch 2/5 [###############..........]  60/100  5.00/s ETA 0:08  loss 0.5000",
	   "a resumed phase counts its rate from where it began");
	is(80, "x", 1, 10000, 0, 1, NULL,
	   "x [..............................]     1/10000  1.00/s ETA 2:46:39",
	   "an ETA of hours is H:MM:SS");
	is(80, "x", 1, 100000000000LL, 0, 1, NULL,
	   "x [............................]            1/100000000000  1.00/s ETA --:--",
	   "an ETA of 100 hours or more is unknown");
	is(80, "x", 5, 10, 0, 1e-9, NULL,
	   "x [###############...............]  5/10 5000000000/s ETA 0:00",
	   "a huge rate is printed whole");
	is(80, "x", 1, 10, 0, 1000, NULL,
	   "x [###...........................]  1/10 <0.01/s ETA 2:30:00", "a tiny rate");
	is(50, "epoch 1/5", 40, 94, 0, 4, "loss 0.4231 acc 86.20%",
	   "epoch 1/5 [####......] 40/94  10.0/s ETA 0:05",
	   "a narrow terminal: the bar shrinks and extra goes first");
	is(30, "epoch 1/5", 40, 94, 0, 4, "loss 0.4231 acc 86.20%",
	   "epoch 1/5 40/94  10.0/s ETA 0",
	   "narrower still: no bar, and the line is cut to width - 1");
	is(1, "x", 1, 2, 0, 1, NULL, "", "a width of 1 leaves an empty line");
	char small[8];
	size_t n = cli_progress_format(small, sizeof small, 80, "calibrating", 1, 2, 0, 1, NULL);
	ok(n == 7 && strcmp(small, "calibra") == 0, "the buffer's size is respected");
}

/* count: how many times s occurs in buf. */
static int
count(const char *buf, const char *s)
{
	int n = 0;
	for (const char *p = strstr(buf, s); p != NULL; p = strstr(p + 1, s))
		n++;
	return n;
}

/* drawn: what the bar wrote to stderr (a temporary file) while fn ran. */
static char *
drawn(void (*fn)(void))
{
	static char buf[65536];
	FILE *tmp = tmpfile();
	int saved = dup(fileno(stderr));
	fflush(stderr);
	dup2(fileno(tmp), fileno(stderr));
	fn();
	fflush(stderr);
	dup2(saved, fileno(stderr));
	close(saved);
	rewind(tmp);
	size_t n = fread(buf, 1, sizeof buf - 1, tmp);
	buf[n] = '\0';
	fclose(tmp);
	return buf;
}

static void
many_updates(void)
{
	for (int i = 0; i <= 1000; i++)
		cli_progress_update("work", i, 1000, NULL);
	cli_progress_update("more", 1, 0, NULL);
	cli_progress_end(false);
}

static void
test_draw(void)
{
	setenv("COLUMNS", "80", 1);
	cli_progress_setup(CLI_PROGRESS_ON, false);
	ok(cli_progress_on() && cli_progress() != NULL, "--progress: on, with a callback");
	char *out = drawn(many_updates);
	/* 1001 updates in far less than 0.1 s: the first and the last are drawn */
	ok(count(out, "\rwork [") == 2, "updates are rate-limited; the first and done == total drawn");
	ok(strstr(out, "work [##############################] 1000/1000") != NULL,
	   "the phase's last state is drawn");
	ok(strstr(out, "1000/1000") < strstr(out, "\n\rmore 1 "),
	   "another phase ends the bar's line and starts a new one");
	size_t len = strlen(out);
	ok(len > 4 && strcmp(out + len - 4, "\r\033[K") == 0, "end without keep erases the line");

	cli_progress_setup(CLI_PROGRESS_ON, true);
	ok(!cli_progress_on() && cli_progress() == NULL, "-q turns the bar off");
	out = drawn(many_updates);
	ok(out[0] == '\0', "nothing is drawn when off");
	cli_progress_setup(CLI_PROGRESS_OFF, false);
	ok(!cli_progress_on(), "--no-progress turns the bar off");
}

int
main(void)
{
	test_format();
	test_draw();
	printf("1..%d\n", ntest);
	return nfail ? 1 : 0;
}
