/*
 * cl_stub.c: the OpenCL device of a build without OpenCL (make OPENCL=0):
 * no device is ever found, so --device cl fails with ML_ENODEV and
 * --device auto runs on the CPU.
 */
#include "exec/device.h"

static int
stub_open(int index, void **ctx, struct ml_err *e)
{
	(void)index;
	*ctx = NULL;
	return ml_fail(e, ML_ENODEV, "no OpenCL platform: this build has no OpenCL support");
}

const struct ml_devops ml_cl_devops = {
	.name = "opencl",
	.open = stub_open,
};

int
ml_cl_count(struct ml_err *e)
{
	ml_fail(e, ML_ENODEV, "no OpenCL platform: this build has no OpenCL support");
	return 0;
}

int
ml_cl_info(int i, struct ml_device_info *out)
{
	(void)i;
	memset(out, 0, sizeof *out);
	return ML_ENODEV;
}
