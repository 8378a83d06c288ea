/*
 * nn.cl: pools (max, average, global), normalizations (batch in inference
 * mode, layer, instance), softmax and log-softmax. NCHW row-major
 * contiguous buffers; one work-item per output element (pools, batch
 * norm) or per row (softmax, layer and instance norm: a row is short next
 * to the work a launch needs on a CPU device, and a serial loop keeps the
 * sums in the CPU kernels' order). T as in elem.cl.
 */
#ifndef T
#define T float
#endif
#ifdef ML_F16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif

/* struct ml_pool in lib/cl/cl_ops.c: the same layout */
typedef struct {
	long n, c, h, w, oh, ow;
	long kh, kw, sh, sw, ph, pw, dh, dw, peh, pew;
	int is_max, count_pad;
} ml_pool;

__kernel void
ml_pool2d(__global const T *x, __global T *y, ml_pool p)
{
	size_t i = get_global_id(0);
	if (i >= p.n * p.c * p.oh * p.ow)
		return;
	long ox = i % p.ow, oy = (i / p.ow) % p.oh, nc = i / (p.ow * p.oh);
	__global const T *xp = x + nc * p.h * p.w;
	float acc = p.is_max ? -INFINITY : 0.0f;
	long cnt = 0;
	for (long ky = 0; ky < p.kh; ky++) {
		long iy = oy * p.sh - p.ph + ky * p.dh;
		for (long kx = 0; kx < p.kw; kx++) {
			long ix = ox * p.sw - p.pw + kx * p.dw;
			bool in = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
			if (p.is_max) {
				if (in) {
					float v = (float)xp[iy * p.w + ix];
					acc = isnan(v) || v > acc ? v : acc;
				}
			} else if (in) {
				acc += (float)xp[iy * p.w + ix];
				cnt++;
			} else if (p.count_pad && iy < p.h + p.peh && ix < p.w + p.pew) {
				cnt++;
			}
		}
	}
	y[i] = (T)(p.is_max ? acc : cnt > 0 ? acc / (float)cnt : 0.0f);
}

/* ml_global_pool: one work-item per (n, c) plane of hw elements */
__kernel void
ml_global_pool(__global const T *x, __global T *y, long planes, long hw, int is_max)
{
	size_t i = get_global_id(0);
	if (i >= planes)
		return;
	__global const T *xp = x + i * hw;
	float acc = is_max ? -INFINITY : 0.0f;
	for (long k = 0; k < hw; k++)
		acc = is_max ? fmax(acc, (float)xp[k]) : acc + (float)xp[k];
	y[i] = (T)(is_max ? acc : acc / (float)hw);
}

/* ml_batchnorm: y = (x - mean[c]) * scale[c] / sqrt(var[c] + eps) + bias[c] */
__kernel void
ml_batchnorm(__global const T *x, __global const T *scale, __global const T *bias,
	     __global const T *mean, __global const T *var, __global T *y, long n, long c,
	     long inner, float eps)
{
	size_t i = get_global_id(0);
	if (i >= n * c * inner)
		return;
	long ch = (i / inner) % c;
	float s = (float)scale[ch] / sqrt((float)var[ch] + eps);
	y[i] = (T)(((float)x[i] - (float)mean[ch]) * s + (float)bias[ch]);
}

/*
 * ml_softmax: over rows of len elements spaced inner apart: row r is
 * (r / inner) * len * inner + r % inner. logsm gives log-softmax.
 */
__kernel void
ml_softmax(__global const T *x, __global T *y, long rows, long len, long inner, int logsm)
{
	size_t r = get_global_id(0);
	if (r >= rows)
		return;
	long base = (r / inner) * len * inner + r % inner;
	float m = -INFINITY;
	for (long k = 0; k < len; k++)
		m = fmax(m, (float)x[base + k * inner]);
	float sum = 0.0f;
	for (long k = 0; k < len; k++)
		sum += exp((float)x[base + k * inner] - m);
	float ls = log(sum);
	for (long k = 0; k < len; k++) {
		float v = (float)x[base + k * inner] - m;
		y[base + k * inner] = (T)(logsm ? v - ls : exp(v) / sum);
	}
}

/*
 * ml_layernorm: each of rows rows of len contiguous elements normalized
 * to zero mean, unit variance, then times scale[k] plus bias[k] (has_bias
 * 0: none); scale and bias broadcast over rows.
 */
__kernel void
ml_layernorm(__global const T *x, __global const T *scale, __global const T *bias,
	     __global T *y, long rows, long len, float eps, int has_bias)
{
	size_t r = get_global_id(0);
	if (r >= rows)
		return;
	__global const T *xp = x + r * len;
	float mean = 0.0f;
	for (long k = 0; k < len; k++)
		mean += (float)xp[k];
	mean /= (float)len;
	float var = 0.0f;
	for (long k = 0; k < len; k++) {
		float d = (float)xp[k] - mean;
		var += d * d;
	}
	var /= (float)len;
	float is = 1.0f / sqrt(var + eps);
	for (long k = 0; k < len; k++) {
		float v = ((float)xp[k] - mean) * is * (float)scale[k];
		if (has_bias)
			v += (float)bias[k];
		y[r * len + k] = (T)v;
	}
}

/* ml_instnorm: per (n, c) plane of hw elements, scale and bias per channel c */
__kernel void
ml_instnorm(__global const T *x, __global const T *scale, __global const T *bias,
	    __global T *y, long planes, long c, long hw, float eps)
{
	size_t r = get_global_id(0);
	if (r >= planes)
		return;
	__global const T *xp = x + r * hw;
	float mean = 0.0f;
	for (long k = 0; k < hw; k++)
		mean += (float)xp[k];
	mean /= (float)hw;
	float var = 0.0f;
	for (long k = 0; k < hw; k++) {
		float d = (float)xp[k] - mean;
		var += d * d;
	}
	var /= (float)hw;
	float s = (float)scale[r % c] / sqrt(var + eps), b = (float)bias[r % c];
	for (long k = 0; k < hw; k++)
		y[r * hw + k] = (T)(((float)xp[k] - mean) * s + b);
}
