/*
 * gemm.cl: register-blocked GEMM, C = alpha * op(A) * op(B) + beta * C, in
 * three steps that the host (lib/cl/gemm.c) enqueues in order:
 *
 *   ml_gemm_pack_a_T, ml_gemm_pack_b_T
 *                   copy op(A) into row panels of MR rows and op(B) into
 *                   column panels of NR columns, k-major inside a panel
 *                   ([panel][k][MR] and [panel][k][NR]), padding the last
 *                   panel with zeros. Transposes, leading dimensions,
 *                   offsets and the f16 -> f32 conversion all happen here,
 *                   so the inner loop sees one layout only, and reads both
 *                   operands sequentially (unpacked, the k rows of B lie
 *                   ldb apart; at 1024 floats that 4 KiB stride maps them
 *                   all to one L1 set). conv.cl's im2col writes this packed
 *                   B layout directly (mlcl_gemm_pb). An f32 A is normally
 *                   read in place instead (its MR rows are MR sequential
 *                   streams, and weights are then not repacked on every
 *                   call); f16 A is always packed, to f32.
 *   ml_gemm_T       one work-item per MR x NR tile of C: the tile lives in
 *                   MR * NV vector registers over the whole K loop, each k
 *                   step loads NV vectors of B and broadcasts MR scalars of A
 *                   (MR * NV fused multiply-adds per MR + NV loads), then
 *                   the tile is scaled and stored with bounds checks, the
 *                   epilogue (bias, residual, activation) fused into the
 *                   store.
 *
 * and two kernels on their own: ml_gemv_T, the product with M == 1 or N == 1
 * as a matrix-vector product (nothing packed; a work-group's work-items
 * split K and add their sums in local memory), and ml_gemm_epi_T, the
 * epilogue alone, after a GEMM that has none (CLBlast's, lib/cl/clblast.c).
 *
 * T is f32, or f16 when built with -DML_F16 (stored as half through the
 * core vload_half/vstore_half, so it needs no cl_khr_fp16; arithmetic and
 * accumulation stay in f32). Matrices are row-major; every offset, leading
 * dimension and batch stride is in elements. Batches are the third NDRange
 * dimension; a packed batch stride of 0 shares one packed operand across
 * all batches (broadcast weights).
 *
 * Tuning (compile options, measured per device by the host, lib/cl/gemm.c):
 * -DMR=rows per tile (1..16), -DVW=vector width (4, 8 or 16), -DNV=vectors
 * per tile row (1..4), so NR = VW * NV; -DWG=work-group size of ml_gemm_T
 * along dimension 0. MR=6, VW=8, NV=2 is the 6x16 AVX2 micro-kernel (12
 * accumulators + 2 B vectors + 1 broadcast = 15 ymm registers); with
 * AVX-512's 32 zmm registers VW=16 tiles of 6 or 8 rows by 32 columns hold
 * 12 or 16 accumulators, and on POCL over 2 Zen 5 cores run the 1024^3
 * SGEMM about 3 times faster than 6x16. The kernels use no local memory
 * and no barriers: POCL runs a work-group as a loop over its work-items,
 * and values that live across a barrier would be spilled to per-work-item
 * arrays; without barriers the accumulators stay in registers. Correctness
 * does not depend on the tile or the work-group size (test_clgemm runs
 * every candidate). An unrolled K loop gained nothing.
 */
#ifndef MR
#define MR 6
#endif
#ifndef VW
#define VW 8
#endif
#ifndef NV
#define NV 2
#endif
#ifndef WG
#define WG 16
#endif
#define NR (VW * NV)

#if VW == 16
typedef float16 floatv;
#define VLOAD vload16
#define VSTORE vstore16
#elif VW == 8
typedef float8 floatv;
#define VLOAD vload8
#define VSTORE vstore8
#elif VW == 4
typedef float4 floatv;
#define VLOAD vload4
#define VSTORE vstore4
#else
#error "VW must be 4, 8 or 16"
#endif

/* the epilogue's activations (ACT_FN: kernels/prelude.cl); act_s on one float, act_v on a floatv */
ACT_FN(act_s, float)
ACT_FN(act_v, floatv)

/*
 * Pack a rows x cols matrix X (element (r, c) at x[off + r*ld + c], or at
 * x[off + c*ld + r] when trans) into panels of P rows: panel p holds rows
 * p*P .. p*P+P-1 as dst[p*cols*P + c*P + r'], zero beyond the last row.
 * One work-item per (c, panel), so P is a constant; consecutive work-items
 * read consecutive addresses: NDRange (cols, panels, batches) when !trans,
 * (panels, cols, batches) when trans, any size rounded up (extra items
 * return). Batch b reads x + off + b*xstride and writes dst + b*dstride.
 * Built with -DML_ROUND, each value is rounded (RND, prelude.cl) on its way:
 * a training step's fp16 or bf16 products.
 */
inline void
pack(global const T *x, long off, long ld, int trans, long rows, long cols, long xstride,
     global float *dst, long dstride, const int P)
{
	long c = trans ? get_global_id(1) : get_global_id(0);
	long p = trans ? get_global_id(0) : get_global_id(1);
	long b = get_global_id(2);
	if (c >= cols || p * P >= rows)
		return;
	long r0 = p * P;
	global const T *px = x + off + b * xstride;
	global float *pd = dst + b * dstride + (p * cols + c) * P;
	if (r0 + P <= rows) {
		if (trans && P % 8 == 0) {
			/* rows of a row-major B: contiguous on both sides */
			for (int r = 0; r < P; r += 8)
				vstore8(RND8(LD8(px, c * ld + r0 + r)), 0, pd + r);
		} else if (trans) {
			for (int r = 0; r < P; r++)
				pd[r] = RND(LD(px, c * ld + r0 + r));
		} else {
			for (int r = 0; r < P; r++)
				pd[r] = RND(LD(px, (r0 + r) * ld + c));
		}
		return;
	}
	for (int r = 0; r < P; r++)
		pd[r] = r0 + r >= rows ? 0.0f :
			RND(LD(px, trans ? c * ld + r0 + r : (r0 + r) * ld + c));
}

/* ml_gemm_pack_a_T packs op(A) into MR-row panels, ml_gemm_pack_b_T op(B)^T into NR-row ones. */
kernel void
KN(ml_gemm_pack_a)(global const T *x, long off, long ld, int trans, long rows, long cols,
		   long xstride, global float *dst, long dstride)
{
	pack(x, off, ld, trans, rows, cols, xstride, dst, dstride, MR);
}

kernel void
KN(ml_gemm_pack_b)(global const T *x, long off, long ld, int trans, long rows, long cols,
		   long xstride, global float *dst, long dstride)
{
	pack(x, off, ld, trans, rows, cols, xstride, dst, dstride, NR);
}

/*
 * The micro-kernel: work-item (pm, pn, b) computes rows pm*MR.. and columns
 * pn*NR.. of batch b from op(A) and the packed panels bp (NR-column panels,
 * each K*NR floats). Element (i, k) of A's panel pm is read at
 * ap[aoff + b*astride + pm*apstride + i*ars + k*aks]: packed panels have
 * apstride = K*MR, ars = 1, aks = MR; an f32 A read in place has
 * (MR*lda, lda, 1), or (MR, 1, lda) when transposed. C is written at
 * c[coff + b*cstride + m*ldc + n]; with beta == 0 C is not read, so it may
 * hold NaNs. The epilogue then adds bias[boff + m*bsm + n*bsn] when flags & 1
 * (bsm = 1, bsn = 0: a bias per row, as Conv's per output channel; 0, 1: per
 * column, as Gemm's) and the residual z[zoff + b*cstride + m*ldc + n] (C's
 * own index) when flags & 2, then applies activation act (0 none; Clip
 * within [lo, hi]): C = act(alpha * A * B + beta * C + bias + z), the CPU's
 * FusedConv order. z must not overlap C but at C's own elements.
 * NDRange: (nmb rounded up to WG, nnb, batches), local (WG, 1, 1).
 */
kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
KN(ml_gemm)(global const float *ap, long aoff, long astride, long apstride, long ars, long aks,
	    global const float *bp, long bstride,
	    global T *c, long coff, long ldc, long cstride, long M, long N, int K,
	    float alpha, float beta, int nmb, global const T *bias, long boff, long bsm, long bsn,
	    int flags, global const T *z, long zoff, int act, float lo, float hi)
{
	int pm = get_global_id(0);
	if (pm >= nmb)
		return;
	long pn = get_global_id(1), b = get_global_id(2);
	global const float *pa = ap + aoff + b * astride + pm * apstride;
	long m0 = (long)pm * MR, n0 = pn * NR;
	/* rows past M (only when A is read in place) repeat row M-1; they are not stored */
	long ao[MR];
#pragma unroll
	for (int i = 0; i < MR; i++)
		ao[i] = (m0 + i < M ? i : M - 1 - m0) * ars;
	global const float *pb = bp + b * bstride + pn * K * NR;
	floatv acc[MR][NV];
#pragma unroll
	for (int i = 0; i < MR; i++)
#pragma unroll
		for (int j = 0; j < NV; j++)
			acc[i][j] = (floatv)(0.0f);
	for (int k = 0; k < K; k++) {
		floatv bv[NV];
#pragma unroll
		for (int j = 0; j < NV; j++)
			bv[j] = VLOAD(j, pb);
#pragma unroll
		for (int i = 0; i < MR; i++) {
			floatv av = (floatv)(pa[ao[i]]);
#pragma unroll
			for (int j = 0; j < NV; j++)
				acc[i][j] = fma(av, bv[j], acc[i][j]);
		}
		pa += aks;
		pb += NR;
	}

	global T *pc = c + coff + b * cstride + m0 * ldc + n0;
	global const T *pz = z + zoff + b * cstride + m0 * ldc + n0;
	bool full = m0 + MR <= M && n0 + NR <= N;
#pragma unroll
	for (int i = 0; i < MR; i++) {
		if (!full && m0 + i >= M)
			break;
#pragma unroll
		for (int j = 0; j < NV; j++) {
			floatv v = alpha * acc[i][j];
#ifndef ML_F16
			/* a whole vector: no bounds, and a bias per row is one value */
			if (full && ((flags & 1) == 0 || bsn == 0)) {
				if (beta != 0.0f)
					v = fma((floatv)(beta), VLOAD(j, pc + i * ldc), v);
				if (flags & 1)
					v += (floatv)(bias[boff + (m0 + i) * bsm]);
				if (flags & 2)
					v += VLOAD(j, pz + i * ldc);
				if (act != 0)
					v = act_v(v, act, lo, hi);
				VSTORE(v, j, pc + i * ldc);
				continue;
			}
#endif
			float t[VW];
			VSTORE(v, 0, t);
			for (int q = 0; q < VW; q++) {
				long n = n0 + j * VW + q;
				if (n >= N)
					break;
				float o = t[q];
				if (beta != 0.0f)
					o = fma(beta, LD(pc, i * ldc + j * VW + q), o);
				if (flags & 1)
					o += LD(bias, boff + (m0 + i) * bsm + n * bsn);
				if (flags & 2)
					o += LD(pz, i * ldc + j * VW + q);
				if (act != 0)
					o = act_s(o, act, lo, hi);
				ST(pc, i * ldc + j * VW + q, o);
			}
		}
	}
}

/*
 * The GEMM with M == 1 or N == 1 as a matrix-vector product:
 *   y[j] = act(alpha * sum_k W(j, k) v(k) + beta * y[j] + bias[j] + z[j]),  j < R,
 * W(j, k) at w[woff + b*ws + j*wsj + k*wsk], v(k) at x[xoff + b*xst + k*xs],
 * y[j] at c[coff + b*cs + j*ys], bias[j] at bias[boff + j*bs] (flags & 1),
 * z[j] at z[zoff + b*cs + j*ys] (flags & 2). With M == 1, W is op(B)^T and
 * v op(A)'s one row; with N == 1, W is op(A) and v op(B)'s one column. No
 * operand is packed (the tiled kernel would pack all of B, and compute MR
 * rows where one is wanted). NDRange (R rounded up to LX, LY, batches),
 * local (LX, LY, 1), LY a power of two: work-item (x, y) sums the k = y,
 * y + LY, ... of output j = group * LX + x, and the LY partial sums are
 * added in part (LX * LY floats of local memory). LX = 1 suits a W whose
 * rows are contiguous in k (the LY work-items of a group read one row
 * together: Gemm's transposed weights); LX > 1 one contiguous in j (each
 * k row read across the LX work-items).
 */
kernel void
KN(ml_gemv)(global const T *w, long woff, long ws, long wsj, long wsk, global const T *x,
	    long xoff, long xst, long xs, global T *c, long coff, long cs, long ys, long R, int K,
	    float alpha, float beta, global const T *bias, long boff, long bs, int flags,
	    global const T *z, long zoff, int act, float lo, float hi, local float *part)
{
	long j = get_global_id(0), b = get_global_id(2);
	int lx = get_local_id(0), ly = get_local_id(1);
	int LX = get_local_size(0), LY = get_local_size(1);
	float s = 0.0f;
	if (j < R) {
		global const T *pw = w + woff + b * ws + j * wsj;
		global const T *pv = x + xoff + b * xst;
		int k = ly;
		if (wsk == 1 && xs == 1) {
			/* both contiguous in k: 8 at a time, each work-item its own stretch */
			float8 s8 = (float8)(0.0f);
			for (k = ly * 8; k + 8 <= K; k += LY * 8)
				s8 = fma(LD8(pw, k), LD8(pv, k), s8);
			float4 s4 = s8.lo + s8.hi;
			s = s4.x + s4.y + s4.z + s4.w;
			k = K / 8 * 8 + ly;
		}
		for (; k < K; k += LY)
			s = fma(LD(pw, k * wsk), LD(pv, k * xs), s);
	}
	part[ly * LX + lx] = s;
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int h = LY / 2; h > 0; h /= 2) {
		if (ly < h)
			part[ly * LX + lx] += part[(ly + h) * LX + lx];
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	if (ly != 0 || j >= R)
		return;
	long ci = coff + b * cs + j * ys;
	float o = alpha * part[lx];
	if (beta != 0.0f)
		o = fma(beta, LD(c, ci), o);
	if (flags & 1)
		o += LD(bias, boff + j * bs);
	if (flags & 2)
		o += LD(z, zoff + b * cs + j * ys);
	if (act != 0)
		o = act_s(o, act, lo, hi);
	ST(c, ci, o);
}

/*
 * The epilogue alone, after a GEMM that has none (CLBlast's): C[b][m][n] =
 * act(C[b][m][n] + bias[boff + m*bsm + n*bsn] (flags & 1) + z[zoff +
 * b*cs + m*ldc + n] (flags & 2)), C at c[coff + b*cs + m*ldc + n]: the
 * same sums, in the same order, as ml_gemm_T's store. NDRange (N rounded
 * up, M, batches).
 */
kernel void
KN(ml_gemm_epi)(global T *c, long coff, long ldc, long cs, long M, long N,
		global const T *bias, long boff, long bsm, long bsn, int flags,
		global const T *z, long zoff, int act, float lo, float hi)
{
	long n = get_global_id(0), m = get_global_id(1), b = get_global_id(2);
	if (n >= N || m >= M)
		return;
	long ci = coff + b * cs + m * ldc + n;
	float o = LD(c, ci);
	if (flags & 1)
		o += LD(bias, boff + m * bsm + n * bsn);
	if (flags & 2)
		o += LD(z, zoff + b * cs + m * ldc + n);
	if (act != 0)
		o = act_s(o, act, lo, hi);
	ST(c, ci, o);
}
