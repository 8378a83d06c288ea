/*
 * ml_device.h: devices (lib/cl, lib/exec): the CPU and the OpenCL devices
 * behind one interface, device discovery, placement. Included by ml.h.
 * Owner: the OpenCL runtime (issue 4).
 */
#ifndef ML_DEVICE_H
#define ML_DEVICE_H

#endif
