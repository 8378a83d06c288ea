/*
 * replay.c: run the fuzz targets over files without libFuzzer, so that
 * `make test` replays every corpus input (seeds and past crashes) with the
 * normal compiler, or under AddressSanitizer in `make asan`.
 *
 *	fuzz_replay CORPUS            each CORPUS/<target>/ folder; TAP, one test per target
 *	fuzz_replay TARGET FILE...    the given files through one target
 *
 * Each input runs in a child process with a time limit, so a crash or a
 * hang names its file and the other inputs still run.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"

#define TIME_LIMIT 60

static const struct {
	const char *name;
	int (*fn)(const uint8_t *, size_t);
} targets[] = {
	{ "mlg", fuzz_mlg },
	{ "onnx", fuzz_onnx },
	{ "text", fuzz_text },
	{ "npy", fuzz_npy },
	{ "idx", fuzz_idx },
};
#define N_TARGETS (int)(sizeof targets / sizeof targets[0])

/* read_all: the whole file in a malloc'd buffer; NULL (errno set) on failure. */
static uint8_t *
read_all(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t n = 0, cap = 0;

	if (fp == NULL)
		return NULL;
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 4096;
			uint8_t *q = realloc(buf, cap);
			if (q == NULL) {
				free(buf);
				fclose(fp);
				return NULL;
			}
			buf = q;
		}
		size_t k = fread(buf + n, 1, cap - n, fp);
		n += k;
		if (k == 0)
			break;
	}
	int bad = ferror(fp);
	fclose(fp);
	if (bad) {
		free(buf);
		errno = EIO;
		return NULL;
	}
	*len = n;
	return buf;
}

/*
 * run_one: target t on the file at path, in a child process. Returns 0 when
 * it ran to the end, else prints why not (as a TAP comment) and returns -1.
 */
static int
run_one(int t, const char *path)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		printf("# %s: fork: %s\n", path, strerror(errno));
		return -1;
	}
	if (pid == 0) {
		size_t len = 0;
		uint8_t *buf = read_all(path, &len);
		if (buf == NULL) {
			printf("# %s: cannot read: %s\n", path, strerror(errno));
			_exit(2);
		}
		alarm(TIME_LIMIT);
		/* An exact-size copy, so that a read past the end is caught as in libFuzzer. */
		uint8_t *exact = malloc(len ? len : 1);
		if (exact == NULL)
			_exit(2);
		memcpy(exact, buf, len);
		free(buf);
		targets[t].fn(exact, len);
		free(exact);
		exit(0);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			printf("# %s: waitpid: %s\n", path, strerror(errno));
			return -1;
		}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (WIFSIGNALED(st))
		printf("# %s: %s: killed by signal %d%s\n", targets[t].name, path, WTERMSIG(st),
		       WTERMSIG(st) == SIGALRM ? " (over the time limit)" : "");
	else
		printf("# %s: %s: exit status %d\n", targets[t].name, path, WEXITSTATUS(st));
	return -1;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* run_dir: every regular file of dir through target t; counts in *n and *bad. */
static void
run_dir(int t, const char *dir, int *n, int *bad)
{
	DIR *d = opendir(dir);
	char **names = NULL;
	size_t nn = 0, cap = 0;
	struct dirent *de;

	*n = *bad = 0;
	if (d == NULL) {
		printf("# %s: %s\n", dir, strerror(errno));
		(*bad)++;
		return;
	}
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (nn == cap) {
			cap = cap ? cap * 2 : 64;
			char **q = realloc(names, cap * sizeof *q);
			if (q == NULL)
				break;
			names = q;
		}
		size_t l = strlen(dir) + strlen(de->d_name) + 2;
		if ((names[nn] = malloc(l)) == NULL)
			break;
		snprintf(names[nn++], l, "%s/%s", dir, de->d_name);
	}
	closedir(d);
	qsort(names, nn, sizeof *names, cmp_str);
	for (size_t i = 0; i < nn; i++) {
		(*n)++;
		if (run_one(t, names[i]) < 0)
			(*bad)++;
		free(names[i]);
	}
	free(names);
}

static int
find_target(const char *name)
{
	for (int t = 0; t < N_TARGETS; t++)
		if (strcmp(targets[t].name, name) == 0)
			return t;
	return -1;
}

int
main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: fuzz_replay CORPUS | fuzz_replay TARGET FILE...\n");
		return 2;
	}
	fuzz_setup();
	if (argc > 2) {
		int t = find_target(argv[1]), bad = 0;
		if (t < 0) {
			fprintf(stderr, "fuzz_replay: unknown target '%s' (mlg, onnx, text, npy, idx)\n",
				argv[1]);
			return 2;
		}
		for (int i = 2; i < argc; i++)
			bad += run_one(t, argv[i]) < 0;
		printf("%d inputs, %d failed\n", argc - 2, bad);
		return bad ? 1 : 0;
	}
	int failed = 0;
	printf("1..%d\n", N_TARGETS);
	for (int t = 0; t < N_TARGETS; t++) {
		char dir[4096];
		int n, bad;
		snprintf(dir, sizeof dir, "%s/%s", argv[1], targets[t].name);
		run_dir(t, dir, &n, &bad);
		printf("%s %d - fuzz corpus %s: %d inputs, %d failed\n", bad || n == 0 ? "not ok" : "ok",
		       t + 1, targets[t].name, n, bad);
		failed += bad || n == 0;
	}
	return failed ? 1 : 0;
}
