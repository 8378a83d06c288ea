/*
 * quant.cl: the internal int8 ops of mlquant's integer form (Q8Quantize,
 * Q8Dequantize, Q8Conv, Q8Add, Q8MaxPool, Q8GlobalAveragePool; see
 * lib/ops/quant_q8.c) on an OpenCL device; the host side is lib/cl/quant.c.
 *
 * Activations are uchar, channels last ([N, H, W, C], or [N, C]); Q8Conv's
 * weights are the packed int8 panels of lib/cpu/quant_q8.h (group 1) or
 * [KH*KW][C] (depthwise). Every result equals the CPU kernels' bit for bit
 * (lib/cpu/quant_q8.c, quant_gemm.c): sums are exact int32, each float
 * operation is the CPU's single IEEE operation in the same order
 * (contraction into fma is off), and rint rounds half to even as the CPU
 * paths do. No kernel uses local memory or barriers, so any work-group
 * size is correct.
 */
#pragma OPENCL FP_CONTRACT OFF

/* q8_req: round v (clamped to +-4e6, far past any clamp below) plus z, clamped to [lo, hi] */
static uchar
q8_req(float v, int z, int lo, int hi)
{
	v = v > 4e6f ? 4e6f : v < -4e6f ? -4e6f : v;
	int q = (int)rint(v) + z;
	return (uchar)(q < lo ? lo : q > hi ? hi : q);
}

/*
 * Q8Quantize: f32 [N, C, HW] to uchar [N, HW, C]; a NaN quantises as 0.
 * One work-item per input element. NDRange: total rounded up.
 */
kernel void
ml_q8_quantize(global const float *restrict x, global uchar *restrict y, long total, int C,
	       int HW, float inv, int zero)
{
	long i = get_global_id(0);
	if (i >= total)
		return;
	long n = i / ((long)C * HW);
	int ch = (int)(i / HW % C), p = (int)(i % HW);
	float v = x[i] * inv;
	v = isnan(v) ? 0.0f : v;
	y[(n * HW + p) * C + ch] = q8_req(v, zero, 0, 255);
}

/* Q8Dequantize: uchar [N, HW, C] to f32 [N, C, HW]. One work-item per output element. */
kernel void
ml_q8_dequantize(global const uchar *restrict x, global float *restrict y, long total, int C,
		 int HW, float scale, int zero)
{
	long i = get_global_id(0);
	if (i >= total)
		return;
	long n = i / ((long)C * HW);
	int ch = (int)(i / HW % C), p = (int)(i % HW);
	y[i] = (float)((int)x[(n * HW + p) * C + ch] - zero) * scale;
}

/*
 * Q8Conv with group 1 (and the matrix product, H = W = KH = KW = 1): one
 * work-item computes the 16 output channels of one weight panel for one
 * output pixel r = (n*OH + oy)*OW + ox, reading the input window in place
 * (the zero point where it leaves the input) in the packed order k =
 * (ky*KW + kx)*C + c. Panel pn holds, for each group g of 4 k, 16 columns
 * of 4 bytes: w[pn*KP*16 + g*64 + j*4 + k%4]. With C a multiple of 4 each
 * group is one uchar4 of x against four char16 loads; otherwise k goes one
 * at a time. geo: C, H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, M, KP,
 * xzero, yzero, lo, hi, f32out. Output y[r*M + j], uchar, or float (the
 * dequantised value v) when f32out. NDRange: (P rounded up, panels).
 */
kernel void
ml_q8_conv(global const uchar *restrict x, global const char *restrict w,
	   global const int *restrict bias, global const float *restrict mult,
	   global uchar *restrict y, global float *restrict yf, long P, int C, int H, int W,
	   int OH, int OW, int KH, int KW, int sh, int sw, int dh, int dw, int pt, int pl, int M,
	   int KP, int xzero, int yzero, int lo, int hi, int f32out)
{
	long r = get_global_id(0);
	int pn = get_global_id(1);
	if (r >= P)
		return;
	long n = r / ((long)OH * OW);
	int oy = (int)(r / OW % OH), ox = (int)(r % OW);
	global const char *pan = w + (long)pn * KP * 16;
	int16 acc = (int16)(0);
	uchar4 zz = (uchar4)((uchar)xzero);
	for (int ky = 0; ky < KH; ky++) {
		int iy = oy * sh - pt + ky * dh;
		for (int kx = 0; kx < KW; kx++) {
			int ix = ox * sw - pl + kx * dw;
			bool in = iy >= 0 && iy < H && ix >= 0 && ix < W;
			global const uchar *src = x + ((n * H + iy) * W + ix) * C;
			int k0 = (ky * KW + kx) * C;
			if ((C & 3) == 0) {
				for (int c = 0; c < C; c += 4) {
					uchar4 a = in ? vload4(0, src + c) : zz;
					global const char *b = pan + (k0 + c) / 4 * 64;
					char16 b0 = vload16(0, b), b1 = vload16(1, b);
					char16 b2 = vload16(2, b), b3 = vload16(3, b);
					acc += (int)a.s0 * convert_int16((char16)(b0.s048c, b1.s048c,
										 b2.s048c, b3.s048c));
					acc += (int)a.s1 * convert_int16((char16)(b0.s159d, b1.s159d,
										 b2.s159d, b3.s159d));
					acc += (int)a.s2 * convert_int16((char16)(b0.s26ae, b1.s26ae,
										 b2.s26ae, b3.s26ae));
					acc += (int)a.s3 * convert_int16((char16)(b0.s37bf, b1.s37bf,
										 b2.s37bf, b3.s37bf));
				}
			} else {
				for (int c = 0; c < C; c++) {
					int k = k0 + c;
					int a = in ? (int)src[c] : xzero;
					global const char *b = pan + k / 4 * 64 + k % 4;
					int16 bv = (int16)(b[0], b[4], b[8], b[12], b[16], b[20], b[24],
							   b[28], b[32], b[36], b[40], b[44], b[48],
							   b[52], b[56], b[60]);
					acc += a * bv;
				}
			}
		}
	}
	int s[16];
	vstore16(acc, 0, s);
	int j0 = pn * 16;
	for (int j = 0; j < 16 && j0 + j < M; j++) {
		float v = (float)(s[j] + bias[j0 + j]) * mult[j0 + j];
		if (f32out)
			yf[r * M + j0 + j] = v;
		else
			y[r * M + j0 + j] = q8_req(v, yzero, lo, hi);
	}
}

/*
 * Depthwise Q8Conv (group == C == M): one work-item per output element
 * (r, ch), w [KH*KW][C]. geo as ml_q8_conv's. NDRange: P * C rounded up.
 */
kernel void
ml_q8_dwconv(global const uchar *restrict x, global const char *restrict w,
	     global const int *restrict bias, global const float *restrict mult,
	     global uchar *restrict y, long total, int C, int H, int W, int OH, int OW, int KH,
	     int KW, int sh, int sw, int dh, int dw, int pt, int pl, int xzero, int yzero, int lo,
	     int hi)
{
	long i = get_global_id(0);
	if (i >= total)
		return;
	long r = i / C;
	int ch = (int)(i % C);
	long n = r / ((long)OH * OW);
	int oy = (int)(r / OW % OH), ox = (int)(r % OW);
	int acc = bias[ch];
	for (int ky = 0; ky < KH; ky++) {
		int iy = oy * sh - pt + ky * dh;
		for (int kx = 0; kx < KW; kx++) {
			int ix = ox * sw - pl + kx * dw;
			int a = iy >= 0 && iy < H && ix >= 0 && ix < W ?
				(int)x[((n * H + iy) * W + ix) * C + ch] : xzero;
			acc += a * (int)w[(ky * KW + kx) * C + ch];
		}
	}
	y[i] = q8_req((float)acc * mult[ch], yzero, lo, hi);
}

/* Q8Add over the flat arrays: fa = a_scale / y_scale, fb likewise (floats from the host). */
kernel void
ml_q8_add(global const uchar *restrict a, global const uchar *restrict b, global uchar *restrict y,
	  long total, float fa, float fb, int za, int zb, int zy, int lo)
{
	long i = get_global_id(0);
	if (i >= total)
		return;
	float va = (float)((int)a[i] - za) * fa;
	float vb = (float)((int)b[i] - zb) * fb;
	y[i] = q8_req(va + vb, zy, lo, 255);
}

/*
 * Q8MaxPool: one work-item per output element of [N, OH, OW, C]; the
 * padding never wins (the maximum starts at 0). NDRange: total rounded up.
 */
kernel void
ml_q8_maxpool(global const uchar *restrict x, global uchar *restrict y, long total, int C, int H,
	      int W, int OH, int OW, int KH, int KW, int sh, int sw, int pt, int pl)
{
	long i = get_global_id(0);
	if (i >= total)
		return;
	int ch = (int)(i % C);
	long r = i / C;
	long n = r / ((long)OH * OW);
	int oy = (int)(r / OW % OH), ox = (int)(r % OW);
	uchar m = 0;
	for (int ky = 0; ky < KH; ky++) {
		int iy = oy * sh - pt + ky;
		if (iy < 0 || iy >= H)
			continue;
		for (int kx = 0; kx < KW; kx++) {
			int ix = ox * sw - pl + kx;
			if (ix >= 0 && ix < W)
				m = max(m, x[((n * H + iy) * W + ix) * C + ch]);
		}
	}
	y[i] = m;
}

/* Q8GlobalAveragePool: one work-item per (n, c), the mean rounded half up. */
kernel void
ml_q8_gap(global const uchar *restrict x, global uchar *restrict y, long total, int C, long HW)
{
	long i = get_global_id(0);
	if (i >= total)
		return;
	long n = i / C;
	int ch = (int)(i % C);
	long acc = 0;
	for (long p = 0; p < HW; p++)
		acc += x[(n * HW + p) * C + ch];
	y[i] = HW > 0 ? (uchar)((acc + HW / 2) / HW) : 0;
}
