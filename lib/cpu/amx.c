/*
 * amx.c: whether this process may use AMX (see amx.h).
 */
#include <pthread.h>
#include <stdlib.h>

#include "cpu/amx.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HAVE_AMX_PROBE 1
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool amx;

static void
probe(void)
{
	const char *env = getenv("ML_AMX");
	if (env != NULL && strcmp(env, "0") == 0)
		return;
#ifdef HAVE_AMX_PROBE
	unsigned a, b, c, d;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return;
	/* EDX bits 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8 */
	unsigned need = (1u << 22) | (1u << 24) | (1u << 25);
	if ((d & need) != need)
		return;
	if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
		return;
	unsigned long perm = 0;
	if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0)
		return;
	amx = (perm & (1ul << XFEATURE_XTILEDATA)) != 0;
#endif
}

bool
ml_amx_ok(void)
{
	pthread_once(&once, probe);
	return amx;
}
