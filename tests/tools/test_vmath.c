/*
 * test_vmath.c: lib/cpu/vmath.c's vector activations (Sigmoid, Tanh, SiLU,
 * GELU, Exp) against libm in double precision, on every path this CPU
 * has: AVX-512, AVX2 (ML_VMATH=avx2) and the scalar loops of fastmath.h
 * (ML_VMATH=0), each in a child forked before the path is chosen. Inputs:
 * a dense sweep over the range where the functions change, lengths that
 * leave every tail, large magnitudes, infinities, NaN, zeros and
 * denormals; and y == x in place. Bounds: a few ulp (GELU 1e-5: e^(-z^2)
 * from z^2 in floats), and 1e-33 absolute near the underflow, where the
 * vector paths give 0 for results below 2^-126. Prints TAP.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ml_impl.h"
#include "cpu/elem.h"
#include "cpu/nn.h"

static int ntest, nfail;

static void
ok(bool cond, const char *what)
{
	ntest++;
	if (!cond)
		nfail++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntest, what);
	fflush(stdout);
}

static double
ref(int un, double x)
{
	switch (un) {
	case ML_UN_SIGMOID: return 1.0 / (1.0 + exp(-x));
	case ML_UN_SILU: return x / (1.0 + exp(-x));
	case ML_UN_TANH: return tanh(x);
	case ML_UN_GELU: return 0.5 * x * erfc(-x * M_SQRT1_2);
	default: return exp(x);
	}
}

static const struct { int un; const char *name; double rel; } FNS[] = {
	{ ML_UN_SIGMOID, "sigmoid", 4e-7 }, { ML_UN_SILU, "silu", 4e-7 },
	{ ML_UN_TANH, "tanh", 6e-7 }, { ML_UN_GELU, "gelu", 1e-5 }, { ML_UN_EXP, "exp", 4e-7 },
};

/* the inputs: a sweep of [-110, 110], then the special values */
static int64_t
inputs(float *x)
{
	int64_t n = 0;
	for (int i = -22000; i <= 22000; i++)
		x[n++] = (float)i * 0.005f;
	static const float sp[] = { 0.0f, -0.0f, 1e-45f, -1e-45f, 1e-38f, 3e-4f, -3e-4f, 5e-4f, 88.7f,
				    88.75f, 89.0f, -87.0f, -88.0f, -103.0f, -104.5f, -150.0f, 1e30f,
				    -1e30f, INFINITY, -INFINITY, NAN, 7.9f, -7.9f, 8.5f, 20.0f, -20.0f };
	for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
		x[n++] = sp[i];
	return n;
}

/* check: every function over every input, in lengths 1..40 from offset 0 and in one call; 0 when all hold */
static int
check(bool verbose)
{
	static float x[45000], y[45000];
	int64_t n = inputs(x);
	int bad = 0;
	for (size_t f = 0; f < sizeof FNS / sizeof FNS[0]; f++) {
		int un = FNS[f].un, worst_i = -1;
		double worst = 0;
		bool good = ml_vunary(un, y, x, n) == 0;
		/* the tails: short calls over the first elements give the same values as the long call */
		for (int64_t len = 1; len <= 40 && good; len++) {
			float t[40];
			ml_vunary(un, t, x + 20000, len);
			for (int64_t i = 0; i < len; i++)
				good &= memcmp(&t[i], &y[20000 + i], sizeof(float)) == 0;
		}
		for (int64_t i = 0; i < n && good; i++) {
			double r = ref(un, x[i]);
			if (fabs(r) > FLT_MAX)
				r = r > 0 ? INFINITY : -INFINITY;
			/* x inf / (1 + e^inf) and -inf erfc(inf): libm's NaN, a limit of 0 elsewhere */
			if (isinf(x[i]) && isnan(r))
				continue;
			if (isnan(r) || isnan(y[i])) {
				good = isnan(r) == isnan(y[i]);
				if (!good)
					worst_i = (int)i;
				continue;
			}
			if (isinf(r) || isinf(y[i])) {
				good = r == (double)y[i];
				if (!good)
					worst_i = (int)i;
				continue;
			}
			double e = fabs((double)y[i] - r) - FNS[f].rel * fabs(r);
			if (e > 1e-33 && e > worst) {
				worst = e;
				worst_i = (int)i;
			}
		}
		good &= worst_i < 0;
		/* in place */
		float z[37];
		memcpy(z, x + 21000, sizeof z);
		ml_vunary(un, z, z, 37);
		good &= memcmp(z, y + 21000, sizeof z) == 0;
		if (!good && worst_i >= 0)
			fprintf(stderr, "# %s(%.9g) = %.9g, libm %.9g\n", FNS[f].name, x[worst_i],
				y[worst_i], ref(un, x[worst_i]));
		if (verbose) {
			char what[128];
			snprintf(what, sizeof what, "%s within %.0e of libm over %lld inputs, tails, in place",
				 FNS[f].name, FNS[f].rel, (long long)n);
			ok(good, what);
		}
		bad += !good;
	}
	return bad;
}

/* child: the checks with ML_VMATH=val, in a process that has not chosen a path yet */
static void
child(const char *val, const char *what)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("ML_VMATH", val, 1);
		_exit(check(false) == 0 ? 0 : 1);
	}
	int st = 0;
	bool waited = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
	ok(waited && WEXITSTATUS(st) == 0, what);
}

int
main(void)
{
	if (ml_cpu_fma_level("ML_VMATH_PROBE") >= 1)
		child("avx2", "the AVX2 path (ML_VMATH=avx2): every function within bounds");
	else
		printf("ok %d - the AVX2 path # SKIP no AVX2 and FMA\n", ++ntest);
	child("0", "the scalar path (ML_VMATH=0): every function within bounds");
	check(true);
	ok(ml_vunary(ML_UN_RELU, NULL, NULL, 4) == 1 && !ml_vunary_has(ML_UN_RELU) &&
		   ml_vunary_has(ML_UN_SILU), "other codes are declined");
	printf("1..%d\n", ntest);
	return nfail != 0;
}
