/*
 * cl_dev.c: OpenCL device discovery over the ICD loader, opening a device
 * (context and an in-order profiling queue), status names and the fault
 * switch of ML_CL_FAULT.
 */
#include <pthread.h>

#include "cl/cl.h"

#define MAX_DEVS 32

static struct mlcl_dev devs[MAX_DEVS];
static int n_devs = -1;		/* -1: not probed */
static struct ml_err probe_err;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

const char *
mlcl_status_str(cl_int s)
{
	switch (s) {
#define S(x) case x: return #x;
	S(CL_SUCCESS) S(CL_DEVICE_NOT_FOUND) S(CL_DEVICE_NOT_AVAILABLE)
	S(CL_COMPILER_NOT_AVAILABLE) S(CL_MEM_OBJECT_ALLOCATION_FAILURE)
	S(CL_OUT_OF_RESOURCES) S(CL_OUT_OF_HOST_MEMORY) S(CL_PROFILING_INFO_NOT_AVAILABLE)
	S(CL_BUILD_PROGRAM_FAILURE) S(CL_INVALID_VALUE) S(CL_INVALID_DEVICE)
	S(CL_INVALID_CONTEXT) S(CL_INVALID_COMMAND_QUEUE) S(CL_INVALID_MEM_OBJECT)
	S(CL_INVALID_BINARY) S(CL_INVALID_BUILD_OPTIONS) S(CL_INVALID_PROGRAM)
	S(CL_INVALID_PROGRAM_EXECUTABLE) S(CL_INVALID_KERNEL_NAME) S(CL_INVALID_KERNEL)
	S(CL_INVALID_ARG_INDEX) S(CL_INVALID_ARG_VALUE) S(CL_INVALID_ARG_SIZE)
	S(CL_INVALID_KERNEL_ARGS) S(CL_INVALID_WORK_DIMENSION) S(CL_INVALID_WORK_GROUP_SIZE)
	S(CL_INVALID_WORK_ITEM_SIZE) S(CL_INVALID_GLOBAL_OFFSET) S(CL_INVALID_EVENT)
	S(CL_INVALID_BUFFER_SIZE) S(CL_INVALID_GLOBAL_WORK_SIZE) S(CL_INVALID_PLATFORM)
	S(CL_MISALIGNED_SUB_BUFFER_OFFSET)
	S(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
#undef S
	case -1001:
		return "CL_PLATFORM_NOT_FOUND_KHR";
	default:
		return "unknown OpenCL status";
	}
}

bool
mlcl_fault(const char *what)
{
	/* read on every call: the tests set it in the middle of a process */
	const char *f = getenv("ML_CL_FAULT");
	return f != NULL && strcmp(f, what) == 0;
}

static void
str_info(cl_device_id id, cl_device_info p, char *buf, size_t n)
{
	buf[0] = '\0';
	if (clGetDeviceInfo(id, p, n, buf, NULL) != CL_SUCCESS)
		buf[0] = '\0';
	buf[n - 1] = '\0';
	/* drivers pad some strings with blanks */
	size_t k = strlen(buf);
	while (k > 0 && buf[k - 1] == ' ')
		buf[--k] = '\0';
}

static void
describe(struct mlcl_dev *d, cl_platform_id p, cl_device_id id)
{
	d->platform = p;
	d->id = id;
	if (clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof d->platform_name, d->platform_name,
			      NULL) != CL_SUCCESS)
		d->platform_name[0] = '\0';
	d->platform_name[sizeof d->platform_name - 1] = '\0';
	str_info(id, CL_DEVICE_NAME, d->name, sizeof d->name);
	str_info(id, CL_DEVICE_VENDOR, d->vendor, sizeof d->vendor);
	str_info(id, CL_DRIVER_VERSION, d->driver, sizeof d->driver);
	str_info(id, CL_DEVICE_VERSION, d->version, sizeof d->version);
	clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof d->type, &d->type, NULL);
	clGetDeviceInfo(id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof d->compute_units,
			&d->compute_units, NULL);
	clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof d->global_mem, &d->global_mem, NULL);
	clGetDeviceInfo(id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof d->local_mem, &d->local_mem, NULL);
	clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof d->max_alloc, &d->max_alloc, NULL);
	clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof d->max_wg, &d->max_wg, NULL);
	if (d->max_wg == 0)
		d->max_wg = 64;
	d->wg_multiple = 8;
	size_t extn = 0;
	if (clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &extn) == CL_SUCCESS && extn > 0) {
		char *ext = ml_malloc(extn + 1);
		if (ext != NULL && clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, extn, ext, NULL) ==
				       CL_SUCCESS) {
			ext[extn] = '\0';
			d->has_fp16 = strstr(ext, "cl_khr_fp16") != NULL;
			d->has_fp64 = strstr(ext, "cl_khr_fp64") != NULL;
		}
		ml_free(ext);
	}
}

/*
 * probe: list every device of every platform, once. Where the loader finds
 * no platform, the count is 0 and probe_err says why.
 */
static void
probe(void)
{
	cl_platform_id plats[16];
	cl_uint np = 0;

	n_devs = 0;
	if (mlcl_fault("noplatform")) {
		ml_fail(&probe_err, ML_ENODEV, "no OpenCL platform (ML_CL_FAULT=noplatform)");
		return;
	}
	cl_int st = clGetPlatformIDs(16, plats, &np);
	if (st != CL_SUCCESS || np == 0) {
		probe_err.cl_status = st;
		ml_fail(&probe_err, ML_ENODEV, "no OpenCL platform (%s)",
			st != CL_SUCCESS ? mlcl_status_str(st) : "the ICD loader found none");
		return;
	}
	for (cl_uint p = 0; p < np && p < 16; p++) {
		cl_device_id ids[MAX_DEVS];
		cl_uint nd = 0;
		if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_DEVS, ids, &nd) != CL_SUCCESS)
			continue;
		for (cl_uint i = 0; i < nd && n_devs < MAX_DEVS; i++) {
			describe(&devs[n_devs], plats[p], ids[i]);
			devs[n_devs].index = n_devs;
			n_devs++;
		}
	}
	if (n_devs == 0)
		ml_fail(&probe_err, ML_ENODEV, "no OpenCL device on %u platform%s", np,
			np == 1 ? "" : "s");
}

int
mlcl_count(struct ml_err *e)
{
	pthread_mutex_lock(&lock);
	if (n_devs < 0)
		probe();
	int n = n_devs;
	pthread_mutex_unlock(&lock);
	if (n == 0 && e != NULL)
		*e = probe_err;
	return n;
}

const struct mlcl_dev *
mlcl_info(int i)
{
	if (i < 0 || i >= mlcl_count(NULL))
		return NULL;
	return &devs[i];
}

/*
 * clock_sync: fit the device's profiling clock to ml_now(): a marker's end
 * time against the host clock read right after it completes.
 */
static void
clock_sync(struct mlcl_dev *d)
{
	cl_event ev;
	if (clEnqueueMarkerWithWaitList(d->q, 0, NULL, &ev) != CL_SUCCESS)
		return;
	clWaitForEvents(1, &ev);
	double now = ml_now();
	cl_ulong end = 0;
	if (clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) ==
	    CL_SUCCESS)
		d->clock_off = now - (double)end * 1e-9;
	clReleaseEvent(ev);
}

int
mlcl_device(int i, struct mlcl_dev **out, struct ml_err *e)
{
	struct ml_err pe = { 0 };
	int n = mlcl_count(&pe);
	*out = NULL;
	if (n == 0) {
		if (e != NULL)
			*e = pe;
		return ML_ENODEV;
	}
	if (i < 0 || i >= n)
		return ml_fail(e, ML_ENODEV, "no OpenCL device cl:%d (there %s %d)", i,
			       n == 1 ? "is" : "are", n);
	pthread_mutex_lock(&lock);
	struct mlcl_dev *d = &devs[i];
	int rc = 0;
	if (d->ctx == NULL) {
		double t0 = ml_now();
		cl_int st;
		cl_context_properties props[] = { CL_CONTEXT_PLATFORM,
						  (cl_context_properties)d->platform, 0 };
		d->ctx = clCreateContext(props, 1, &d->id, NULL, NULL, &st);
		if (d->ctx == NULL || st != CL_SUCCESS) {
			d->ctx = NULL;
			if (e != NULL)
				e->cl_status = st;
			rc = ml_fail(e, ML_ECL, "cannot open OpenCL device '%s': %s", d->name,
				     mlcl_status_str(st));
		} else {
			d->q = clCreateCommandQueue(d->ctx, d->id, CL_QUEUE_PROFILING_ENABLE, &st);
			if (d->q == NULL || st != CL_SUCCESS) {
				clReleaseContext(d->ctx);
				d->ctx = NULL;
				d->q = NULL;
				if (e != NULL)
					e->cl_status = st;
				rc = ml_fail(e, ML_ECL, "cannot make a queue on '%s': %s", d->name,
					     mlcl_status_str(st));
			} else {
				clock_sync(d);
			}
		}
		d->t_setup = ml_now() - t0;
	}
	pthread_mutex_unlock(&lock);
	if (rc == 0)
		*out = d;
	return rc;
}
