/*
 * nn.cl: pools (max, average, global), normalizations (batch in inference
 * mode, layer, instance), softmax and log-softmax. NCHW row-major
 * contiguous buffers; one work-item per output element (pools, batch
 * norm) or per row (softmax, layer and instance norm: a row is short next
 * to the work a launch needs on a CPU device, and a serial loop keeps the
 * sums in the CPU kernels' order). T is the stored type, float or (with
 * -DML_F16) half through vload_half/vstore_half, as in elem.cl: core
 * OpenCL, no cl_khr_fp16; sums, means and exponentials are in float.
 */
/* T, LD, ST: kernels/prelude.cl */

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
					float v = LD(xp, iy * p.w + ix);
					acc = isnan(v) || v > acc ? v : acc;
				}
			} else if (in) {
				acc += LD(xp, iy * p.w + ix);
				cnt++;
			} else if (p.count_pad && iy < p.h + p.peh && ix < p.w + p.pew) {
				cnt++;
			}
		}
	}
	ST(y, i, p.is_max ? acc : cnt > 0 ? acc / (float)cnt : 0.0f);
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
		acc = is_max ? fmax(acc, LD(xp, k)) : acc + LD(xp, k);
	ST(y, i, is_max ? acc : acc / (float)hw);
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
	float s = LD(scale, ch) / sqrt(LD(var, ch) + eps);
	ST(y, i, (LD(x, i) - LD(mean, ch)) * s + LD(bias, ch));
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
		m = fmax(m, LD(x, base + k * inner));
	float sum = 0.0f;
	for (long k = 0; k < len; k++)
		sum += exp(LD(x, base + k * inner) - m);
	float ls = log(sum);
	for (long k = 0; k < len; k++) {
		float v = LD(x, base + k * inner) - m;
		ST(y, base + k * inner, logsm ? v - ls : exp(v) / sum);
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
		mean += LD(xp, k);
	mean /= (float)len;
	float var = 0.0f;
	for (long k = 0; k < len; k++) {
		float d = LD(xp, k) - mean;
		var += d * d;
	}
	var /= (float)len;
	float is = 1.0f / sqrt(var + eps);
	for (long k = 0; k < len; k++) {
		float v = (LD(xp, k) - mean) * is * LD(scale, k);
		if (has_bias)
			v += LD(bias, k);
		ST(y, r * len + k, v);
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
		mean += LD(xp, k);
	mean /= (float)hw;
	float var = 0.0f;
	for (long k = 0; k < hw; k++) {
		float d = LD(xp, k) - mean;
		var += d * d;
	}
	var /= (float)hw;
	float s = LD(scale, r % c) / sqrt(var + eps), b = LD(bias, r % c);
	for (long k = 0; k < hw; k++)
		ST(y, r * hw + k, (LD(xp, k) - mean) * s + b);
}
