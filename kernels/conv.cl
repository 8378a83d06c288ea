/*
 * conv.cl: the parts of 2-D convolution (NCHW and NHWC) that are not GEMM; the host
 * (lib/cl/conv.c) runs the rest through kernels/gemm.cl.
 *
 *   ml_conv_im2col_T  unfolds one group of a chunk of images into columns,
 *                     written in the GEMM's packed B layout; the GEMM
 *                     W_g * col (mlcl_gemm_pb) follows.
 *   ml_conv_im2col_plain_T  the same columns as a plain row-major K x P
 *                     matrix per image, for a GEMM engine that packs its
 *                     own operands (CLBlast, through mlcl_gemm_ex).
 *   ml_conv_dw_T      depthwise convolution (group == C, one input channel
 *                     per output channel, channel multiplier M / C) done
 *                     directly: a GEMM with K = KH*KW would waste the
 *                     packing; bias, residual and activation are fused.
 *                     One work-item per output row (a CPU device vectorises
 *                     along it).
 *   ml_conv_dw_px_T   the same, one work-item per output element, for a
 *                     GPU: a 7x7 map of 960 channels is 47k work-items
 *                     instead of 7k, and neighbours read neighbours.
 *   ml_conv_nhwc_dw_T, ml_conv_nhwc_im2col_T  the same for channels-last
 *                     data (ConvNHWC): depthwise direct, channels fastest;
 *                     plain im2col rows for the GEMM col x W.
 *
 * T is f32, or f16 storage with -DML_F16 (vload_half/vstore_half, f32
 * arithmetic and accumulation, no cl_khr_fp16 needed, so f16 runs on every
 * device). Offsets are in elements. Neither
 * kernel uses local memory or barriers, so any work-group size is correct.
 */
#ifndef NR
#define NR 16
#endif
/* T, LD, ST, KN and the activations (ACT_FN): kernels/prelude.cl */
ACT_FN(act_s, float)

/*
 * im2col straight into the packed B layout of kernels/gemm.cl (f32 panels
 * of NR columns, [panel][k][NR], -DNR= must match the GEMM's tile), so the
 * GEMM needs no packing pass of its own: column p = oh*OW + ow, row
 * r = (ci*KH + kh)*KW + kw of image i goes to
 * col[i*cstride + (p/NR)*K*NR + r*NR + p%NR], K = CG*KH*KW, zero for
 * padding and for p >= OH*OW up to the panel's end. One work-item writes
 * the NR contiguous values of one (row, panel), so the divisions happen
 * once per NR values and consecutive work-items write consecutive memory.
 * Image i of the chunk is read at x + xoff + i*ximg, channels c0 ..
 * c0+CG-1 (the group); sh, sw are the strides, dh, dw the dilations, pt,
 * pl the top and left pads. nr is NR again, as an argument: with a
 * constant trip count the loop would be unrolled and POCL would vectorise
 * across work-items instead, turning the stores into slow scatters.
 * NDRange: (K rounded up to the work-group size, panels, images).
 */
kernel void
KN(ml_conv_im2col)(global const T *x, long xoff, long ximg, int c0, int CG, global float *col,
		   long cstride, int H, int W, int KH, int KW, int sh, int sw, int dh, int dw,
		   int pt, int pl, int OH, int OW, int nr)
{
	int r = get_global_id(0), K = CG * KH * KW;
	if (r >= K)
		return;
	int pn = get_global_id(1);
	long img = get_global_id(2);
	int kw = r % KW, kh = (r / KW) % KH, ci = r / (KW * KH);
	int P = OH * OW, p = pn * NR;
	int oh = p / OW, ow = p % OW;
	global const T *px = x + xoff + img * ximg + (long)(c0 + ci) * H * W;
	global float *pc = col + img * cstride + ((long)pn * K + r) * NR;
	int dy = kh * dh - pt, dx = kw * dw - pl;
	for (int j = 0; j < nr; j++, p++) {
		float v = 0.0f;
		int ih = oh * sh + dy, iw = ow * sw + dx;
		if (p < P && ih >= 0 && ih < H && iw >= 0 && iw < W)
			v = RND(LD(px, ih * W + iw));
		pc[j] = v;
		if (++ow == OW) {
			ow = 0;
			oh++;
		}
	}
}

/*
 * im2col into a plain matrix: row r = (ci*KH + kh)*KW + kw, column
 * p = oh*OW + ow of image i at col[i*cstride + r*P + p], P = OH*OW, zero
 * for padding. One work-item per element, consecutive work-items along p,
 * so a GPU's loads (along iw, for stride 1) and stores coalesce.
 * NDRange: (P rounded up to the work-group size, K, images).
 */
kernel void
KN(ml_conv_im2col_plain)(global const T *x, long xoff, long ximg, int c0, int CG,
			 global float *col, long cstride, int H, int W, int KH, int KW, int sh,
			 int sw, int dh, int dw, int pt, int pl, int OH, int OW)
{
	int p = get_global_id(0), r = get_global_id(1);
	long img = get_global_id(2);
	int P = OH * OW;
	if (p >= P)
		return;
	int kw = r % KW, kh = (r / KW) % KH, ci = r / (KW * KH);
	int oh = p / OW, ow = p % OW;
	int ih = oh * sh + kh * dh - pt, iw = ow * sw + kw * dw - pl;
	float v = 0.0f;
	if (ih >= 0 && ih < H && iw >= 0 && iw < W)
		v = LD(x + xoff + img * ximg + (long)(c0 + ci) * H * W, ih * W + iw);
	col[img * cstride + (long)r * P + p] = v;
}

/*
 * Depthwise: output channel oc of image n reads input channel oc / mult
 * (mult = M / C) with the KH x KW filter w[woff + oc*KH*KW ...]. flags & 1:
 * add bias[boff + oc]; flags & 2: add the residual z at y's own index
 * (z + zoff for y + yoff); then activation a (act_s; 0 none, Clip within
 * [clo, chi]), the CPU's FusedConv order: act(conv + bias + z).
 * One work-item computes one output row, accumulating in place one filter
 * tap at a time over the range of ow whose input is inside the image, so
 * the inner loop has no branches (and vectorises when the stride is 1; x,
 * z and y must not overlap, hence restrict). NDRange: (OH rounded up, N*M).
 */
kernel void
KN(ml_conv_dw)(global const T *restrict x, long xoff, global const T *restrict w, long woff,
	       global const T *restrict bias, long boff, global T *restrict y, long yoff, int C,
	       int M, int H, int W, int KH, int KW, int sh, int sw, int dh, int dw, int pt, int pl,
	       int OH, int OW, int flags, global const T *restrict z, long zoff, int a, float clo,
	       float chi)
{
	int oh = get_global_id(0);
	if (oh >= OH)
		return;
	long nm = get_global_id(1);
	long n = nm / M;
	int oc = nm % M, ic = oc / (M / C);
	global const T *px = x + xoff + (n * C + ic) * H * W;
	global const T *pw = w + woff + (long)oc * KH * KW;
	global T *py = y + yoff + (nm * OH + oh) * OW;
	global const T *pz = z + zoff + (nm * OH + oh) * OW;
	float b0 = (flags & 1) ? LD(bias, boff + oc) : 0.0f;
#ifdef ML_F16
	/*
	 * Accumulating in y would round to half after every tap; here each
	 * output sums its taps in a float, in the same order, and is rounded
	 * once, as the CPU's f16 (f32 arithmetic) kernels are.
	 */
	for (int ow = 0; ow < OW; ow++) {
		float acc = b0;
		for (int kh = 0; kh < KH; kh++) {
			int ih = oh * sh - pt + kh * dh;
			if (ih < 0 || ih >= H)
				continue;
			for (int kw = 0; kw < KW; kw++) {
				int iw = ow * sw - pl + kw * dw;
				if (iw >= 0 && iw < W)
					acc = fma(LD(px, (long)ih * W + iw), LD(pw, kh * KW + kw), acc);
			}
		}
		if (flags & 2)
			acc += LD(pz, ow);
		ST(py, ow, act_s(acc, a, clo, chi));
	}
	return;
#endif
	for (int ow = 0; ow < OW; ow++)
		ST(py, ow, b0);
	for (int kh = 0; kh < KH; kh++) {
		int ih = oh * sh - pt + kh * dh;
		if (ih < 0 || ih >= H)
			continue;
		global const T *row = px + (long)ih * W;
		for (int kw = 0; kw < KW; kw++) {
			float wv = LD(pw, kh * KW + kw);
			int off = kw * dw - pl;
			/* iw = ow*sw + off in [0, W): ow in [lo, hi) */
			int lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
			int hi = W - 1 - off < 0 ? 0 : (W - 1 - off) / sw + 1;
			if (hi > OW)
				hi = OW;
			for (int ow = lo; ow < hi; ow++)
				ST(py, ow, fma(LD(row, ow * sw + off), wv, LD(py, ow)));
		}
	}
	if ((flags & 2) || a != 0)
		for (int ow = 0; ow < OW; ow++) {
			float v = LD(py, ow);
			if (flags & 2)
				v += LD(pz, ow);
			ST(py, ow, act_s(v, a, clo, chi));
		}
}

/*
 * Depthwise, one output element per work-item (the arguments of
 * ml_conv_dw): p = oh*OW + ow. The taps are summed in ml_conv_dw's order
 * (bias, then kh, kw with fma, then z), so the results are the same bits.
 * Consecutive work-items take consecutive ow, so their loads and the store
 * coalesce. NDRange: (OH*OW rounded up, N*M).
 */
kernel void
KN(ml_conv_dw_px)(global const T *restrict x, long xoff, global const T *restrict w, long woff,
		  global const T *restrict bias, long boff, global T *restrict y, long yoff,
		  int C, int M, int H, int W, int KH, int KW, int sh, int sw, int dh, int dw,
		  int pt, int pl, int OH, int OW, int flags, global const T *restrict z, long zoff,
		  int a, float clo, float chi)
{
	int p = get_global_id(0);
	if (p >= OH * OW)
		return;
	long nm = get_global_id(1);
	long n = nm / M;
	int oc = nm % M, ic = oc / (M / C);
	int oh = p / OW, ow = p % OW;
	global const T *px = x + xoff + (n * C + ic) * H * W;
	global const T *pw = w + woff + (long)oc * KH * KW;
	float acc = (flags & 1) ? LD(bias, boff + oc) : 0.0f;
	for (int kh = 0; kh < KH; kh++) {
		int ih = oh * sh - pt + kh * dh;
		if (ih < 0 || ih >= H)
			continue;
		for (int kw = 0; kw < KW; kw++) {
			int iw = ow * sw - pl + kw * dw;
			if (iw >= 0 && iw < W)
				acc = fma(LD(px, (long)ih * W + iw), LD(pw, kh * KW + kw), acc);
		}
	}
	long yi = yoff + nm * OH * OW + p;
	if (flags & 2)
		acc += LD(z, zoff + nm * OH * OW + p);
	ST(y, yi, act_s(acc, a, clo, chi));
}

/*
 * Channels-last (ConvNHWC of mlopt's layout pass): X [N, H, W, C], Y [N, OH,
 * OW, M], W [KH, KW, C / group, M].
 *
 * ml_conv_nhwc_dw_T: depthwise (M == C, one channel per group), W [KH, KW,
 * 1, C]; one work-item per output element with the channel fastest, so
 * neighbouring work-items read neighbouring x, w and y. The arguments are
 * ml_conv_dw's (M, equal to C, unused). NDRange: (C rounded up, OH*OW, N).
 */
kernel void
KN(ml_conv_nhwc_dw)(global const T *restrict x, long xoff, global const T *restrict w, long woff,
		    global const T *restrict bias, long boff, global T *restrict y, long yoff,
		    int C, int M, int H, int W, int KH, int KW, int sh, int sw, int dh, int dw,
		    int pt, int pl, int OH, int OW, int flags, global const T *restrict z, long zoff,
		    int a, float clo, float chi)
{
	int c = get_global_id(0);
	if (c >= C)
		return;
	int p = get_global_id(1);
	long n = get_global_id(2);
	int oh = p / OW, ow = p % OW;
	global const T *px = x + xoff + n * H * W * C + c;
	global const T *pw = w + woff + c;
	float acc = (flags & 1) ? LD(bias, boff + c) : 0.0f;
	(void)M;
	for (int kh = 0; kh < KH; kh++) {
		int ih = oh * sh - pt + kh * dh;
		if (ih < 0 || ih >= H)
			continue;
		for (int kw = 0; kw < KW; kw++) {
			int iw = ow * sw - pl + kw * dw;
			if (iw >= 0 && iw < W)
				acc = fma(LD(px, ((long)ih * W + iw) * C), LD(pw, (kh * KW + kw) * C),
					  acc);
		}
	}
	long yi = (n * OH * OW + p) * C + c;
	if (flags & 2)
		acc += LD(z, zoff + yi);
	ST(y, yoff + yi, act_s(acc, a, clo, chi));
}

/*
 * ml_conv_nhwc_im2col_T: rows r0 .. r0+R-1 of the im2col matrix of group
 * channels c0 .. c0+CG-1 into col, plain row-major [R, K], K = KH*KW*CG,
 * row r = (n*OH + oh)*OW + ow, column k = (kh*KW + kw)*CG + ci (the order of
 * W's rows), zero for padding; columns run along the input's channels, so
 * reads and writes are contiguous. The GEMM col [R, K] x W [K, M] follows.
 * NDRange: (K rounded up, R).
 */
kernel void
KN(ml_conv_nhwc_im2col)(global const T *x, long xoff, int C, int c0, int CG, global float *col,
			long r0, int H, int W, int KH, int KW, int sh, int sw, int dh, int dw,
			int pt, int pl, int OH, int OW)
{
	int k = get_global_id(0), K = CG * KH * KW;
	if (k >= K)
		return;
	long r = get_global_id(1), row = r0 + r;
	int ci = k % CG, kw = (k / CG) % KW, kh = k / (CG * KW);
	int ow = row % OW, oh = (row / OW) % OH;
	long n = row / ((long)OW * OH);
	int ih = oh * sh + kh * dh - pt, iw = ow * sw + kw * dw - pl;
	float v = 0.0f;
	if (ih >= 0 && ih < H && iw >= 0 && iw < W)
		v = LD(x, xoff + ((n * H + ih) * W + iw) * C + c0 + ci);
	col[r * K + k] = v;
}
