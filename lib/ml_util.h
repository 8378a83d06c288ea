/*
 * ml_util.h: the small helpers the library and the tools share (lib/util):
 * JSON output, the random number generator and progress reports. Included
 * by ml.h.
 *
 * There is one of each: every JSON report (mlprof, mlopt, the device plan,
 * the tools' --json) escapes strings with ml_json_str, and every random
 * stream (parameter init, shuffling, the random ops, dropout masks, the
 * bootstrap of mlprof --diff, the tools' random inputs) is splitmix64 or
 * xoshiro256** seeded through splitmix64. The streams are part of the file
 * formats' meaning (a seed gives the same weights, a resumed training run
 * the same batches), so they never change.
 */
#ifndef ML_UTIL_H
#define ML_UTIL_H

#include <stdint.h>
#include <stdio.h>

/*
 * ml_json_str: write s as a JSON string literal to fp: quote and backslash
 * escaped, \n \r \t as such, other bytes below 0x20 as \u00XX, the rest
 * (UTF-8 included) as they are. NULL writes "".
 */
void ml_json_str(FILE *fp, const char *s);
/* ml_json_num: write x as a JSON number ("%.9g"), or null when it is not finite. */
void ml_json_num(FILE *fp, double x);

/*
 * ml_mix64: the splitmix64 output function of z + 0x9e3779b97f4a7c15 (Steele,
 * Lea, Flood): a bijective hash of 64 bits, for counter-based streams.
 */
uint64_t ml_mix64(uint64_t z);
/* ml_splitmix64: the next value of the splitmix64 stream *state (advances it). */
uint64_t ml_splitmix64(uint64_t *state);

/* struct ml_rng: a xoshiro256** generator (Blackman, Vigna). */
struct ml_rng {
	uint64_t s[4];
};
/* ml_rng_seed: r's state from four splitmix64 draws of the stream seed. */
void ml_rng_seed(struct ml_rng *r, uint64_t seed);
/* ml_rng_next: the next 64 bits of r. */
uint64_t ml_rng_next(struct ml_rng *r);
/* ml_rng_below: a uniform draw in [0, n), n > 0, without modulo bias (Lemire). */
uint64_t ml_rng_below(struct ml_rng *r, uint64_t n);
/* ml_rng_unit: a uniform double in [0, 1) with 53 random bits. */
double ml_rng_unit(struct ml_rng *r);

/*
 * Progress of long library calls (lib/util/progress.c). The library never
 * prints: a call that can take seconds (calibration, the --budget search,
 * ml_opt_run's passes) takes a const struct ml_progress * in its options
 * and reports how far it is through fn; the tools draw the bar (cmd/cli.c).
 * fn is called on the calling thread, with a short name of the phase
 * ("calibrating", "budget search"; valid during the call only: copy it),
 * the units of work done in that phase and their total (0 when it is not
 * known in advance). A phase's reports start at done 0 or more and grow;
 * the last one of a phase with a known total has done == total. fn must
 * not call back into the library on the objects of the call that reports.
 */
struct ml_progress {
	void (*fn)(void *user, const char *what, int64_t done, int64_t total);
	void *user;
};
/* ml_progress_report: call p->fn with the report; p or p->fn NULL: nothing. */
void ml_progress_report(const struct ml_progress *p, const char *what, int64_t done,
			int64_t total);
/*
 * ml_progress_set_builds: where OpenCL program builds (seconds each on first
 * use, then cached) report, as a phase of total 1 per program: done 0 as the
 * compiler starts, 1 when it is through. Set it once, before the sessions
 * run: reports go out only on the thread that set it. NULL: none.
 * ml_progress_builds: the hook, or NULL on any other thread.
 */
void ml_progress_set_builds(const struct ml_progress *p);
const struct ml_progress *ml_progress_builds(void);

#endif
