/*
 * devices.c: device discovery for the executor: the CPU and every OpenCL
 * device the ICD loader finds (ml_devices), and opening the one a session
 * names (ml_hx_open). The platform probe runs once per process.
 */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "exec/device.h"
#include "exec/session.h"

/*
 * The probe: how many OpenCL devices there are, why none, and how long
 * asking took (the platform probe is POCL's slowest step; mlrun -v shows
 * it). Made once per process, from whichever thread asks first.
 */
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_n;
static struct ml_err probe_err;
static double probe_time;

static void
probe(void)
{
	double t0 = ml_now();
	probe_n = ml_cl_count(&probe_err);
	probe_time = ml_now() - t0;
}

/* cl_probe: the OpenCL device count; when 0, the reason in *why (when not NULL) */
static int
cl_probe(struct ml_err *why, double *t)
{
	pthread_once(&probe_once, probe);
	if (probe_n == 0 && why != NULL)
		*why = probe_err;
	if (t != NULL)
		*t = probe_time;
	return probe_n;
}

int
ml_devices(struct ml_device_info **out, int *n, struct ml_err *e)
{
	struct ml_err pe = { 0 };
	int ncl = cl_probe(&pe, NULL);
	struct ml_device_info *v = ml_calloc((size_t)ncl + 1, sizeof *v);
	*out = NULL;
	*n = 0;
	if (v == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	v[0].index = 0;
	snprintf(v[0].id, sizeof v[0].id, "cpu");
	snprintf(v[0].name, sizeof v[0].name, "host CPU (C kernels, OpenBLAS)");
	snprintf(v[0].type, sizeof v[0].type, "cpu");
	v[0].compute_units = ml_get_threads();
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psz > 0)
		v[0].global_mem = (int64_t)pages * psz;
	v[0].fp16 = v[0].fp64 = true;
	for (int i = 0; i < ncl; i++)
		ml_cl_info(i, &v[i + 1]);
	if (ncl == 0 && e != NULL)
		*e = pe;
	*out = v;
	*n = ncl + 1;
	return 0;
}

int
ml_hx_open(struct ml_session *s, const char *dev, struct ml_err *e)
{
	struct ml_hx *hx = s->hx;
	int idx = 0;
	if (strncmp(dev, "cl:", 3) == 0) {
		char *end;
		errno = 0;
		long v = strtol(dev + 3, &end, 10);
		if (*end != '\0' || end == dev + 3 || v < 0 || v > 1000 || errno != 0)
			return ml_fail(e, ML_EINVAL, "unknown device '%s' (cpu, cl, cl:N, auto)", dev);
		idx = (int)v;
	} else if (strcmp(dev, "cl") != 0 && strcmp(dev, "auto") != 0) {
		return ml_fail(e, ML_EINVAL, "unknown device '%s' (cpu, cl, cl:N, auto)", dev);
	}
	struct ml_err pe = { 0 };
	int n = cl_probe(&pe, &hx->t_probe);
	if (n == 0) {
		if (e != NULL)
			*e = pe;
		return pe.code != 0 ? pe.code : ML_ENODEV;
	}
	if (idx >= n)
		return ml_fail(e, ML_ENODEV, "no OpenCL device cl:%d (there %s %d)", idx,
			       n == 1 ? "is" : "are", n);
	hx->ops = &ml_cl_devops;
	ML_TRY(hx->ops->open(idx, &hx->dev, e));
	hx->dev_index = idx + 1;
	return 0;
}
