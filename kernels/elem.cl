/*
 * elem.cl: pointwise ops: unary activations and math, binary arithmetic
 * with numpy broadcasting, Clip, strided copies, Gather. Layout: row-major
 * contiguous buffers; sizes in elements.
 *
 * T is the stored element type: float, or half with -DML_F16, where every
 * element goes through LD (vload_half) and ST (vstore_half, round to
 * nearest even) and the arithmetic stays in float. That is core OpenCL
 * 1.2, so f16 tensors run on every device, cl_khr_fp16 or not, and round
 * once per op as the CPU's f16 kernels (f32 arithmetic) do. The copies
 * (ml_strided, ml_gather) move the 16-bit patterns as ushort: exact, NaN
 * payloads included. The Casts between the two (ml_cast_*) name both
 * types and are the same in either build.
 *
 * Variants: ml_binary_flat (both operands shaped like the output, or b a
 * scalar: no index arithmetic) and ml_binary_bcast (any broadcast: the
 * output index is split into up to 8 dims and each operand's offset built
 * from its strides, 0 where it broadcasts).
 */
/* T, LD, ST: kernels/prelude.cl; TC: the type the copies move */
#ifdef ML_F16
#define TC ushort
#else
#define TC float
#endif

/* struct ml_shape in lib/cl/cl_ops.c: the same layout */
typedef struct {
	long dims[8];
	long sa[8];
	long sb[8];
	long n;
	int rank;
	int pad_[3];
} ml_shape;

/*
 * unary: the function of code op, an ML_UN_* of lib/act.def (the
 * program's first source; lib/cl/cl_ops.c passes ml_op_unary of the
 * node's op); the identity for ML_UN_NONE.
 */
static float
unary(int op, float x, float a, float b)
{
	switch (op) {
	case ML_UN_RELU: return x > 0 ? x : 0;
	case ML_UN_SIGMOID: return 1.0f / (1.0f + exp(-x));
	case ML_UN_TANH: return tanh(x);
	case ML_UN_LEAKY_RELU: return x >= 0 ? x : a * x;
	case ML_UN_ELU: return x >= 0 ? x : a * (exp(x) - 1.0f);
	case ML_UN_SELU: return x > 0 ? b * x : b * a * (exp(x) - 1.0f);
	case ML_UN_HARD_SIGMOID: return fmax(0.0f, fmin(1.0f, a * x + b));
	case ML_UN_HARD_SWISH: return x * fmax(0.0f, fmin(1.0f, x / 6.0f + 0.5f));
	case ML_UN_SILU: return x / (1.0f + exp(-x));
	case ML_UN_GELU: return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));
	case ML_UN_ERF: return erf(x);
	case ML_UN_EXP: return exp(x);
	case ML_UN_LOG: return log(x);
	case ML_UN_NEG: return -x;
	case ML_UN_ABS: return fabs(x);
	case ML_UN_SQRT: return sqrt(x);
	case ML_UN_RECIPROCAL: return 1.0f / x;
	case ML_UN_SOFTPLUS: return x > 20.0f ? x : log1p(exp(x));
	case ML_UN_CLIP: return isnan(x) ? x : fmin(fmax(x, a), b);
	case ML_UN_FLOOR: return floor(x);
	case ML_UN_CEIL: return ceil(x);
	case ML_UN_SIN: return sin(x);
	case ML_UN_COS: return cos(x);
	case ML_UN_SOFTSIGN: return x / (1.0f + fabs(x));
	case ML_UN_CELU: return fmax(0.0f, x) + fmin(0.0f, a * (exp(x / a) - 1.0f));
	default: return x;
	}
}

__kernel void
ml_unary(__global const T *x, __global T *y, ulong n, int op, float a, float b)
{
	size_t i = get_global_id(0);
	if (i < n)
		ST(y, i, unary(op, LD(x, i), a, b));
}

/* binary op codes: lib/cl/cl_ops.c bop() */
enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_PRELU };

static float
binary(int op, float a, float b)
{
	switch (op) {
	case B_ADD: return a + b;
	case B_SUB: return a - b;
	case B_MUL: return a * b;
	case B_DIV: return a / b;
	case B_POW: return pow(a, b);
	case B_MAX: return isnan(a) || isnan(b) ? NAN : fmax(a, b);
	case B_MIN: return isnan(a) || isnan(b) ? NAN : fmin(a, b);
	case B_PRELU: return a < 0 ? a * b : a;
	default: return a;
	}
}

/* b_scalar: b has one element */
__kernel void
ml_binary_flat(__global const T *a, __global const T *b, __global T *y, ulong n, int op,
	       int b_scalar)
{
	size_t i = get_global_id(0);
	if (i < n)
		ST(y, i, binary(op, LD(a, i), LD(b, b_scalar ? 0 : i)));
}

__kernel void
ml_binary_bcast(__global const T *a, __global const T *b, __global T *y, ml_shape s, int op)
{
	size_t i = get_global_id(0);
	if (i >= s.n)
		return;
	long r = i, oa = 0, ob = 0;
	for (int d = s.rank - 1; d >= 0; d--) {
		long k = r % s.dims[d];
		r /= s.dims[d];
		oa += k * s.sa[d];
		ob += k * s.sb[d];
	}
	ST(y, i, binary(op, LD(a, oa), LD(b, ob)));
}

/*
 * ml_strided: y[ybase + sum idx[d] * sb[d]] = x[xbase + sum idx[d] * sa[d]]
 * over the index space dims: Transpose, Slice (negative steps too),
 * Concat and Split (one call per operand), Expand (stride 0).
 */
__kernel void
ml_strided(__global const TC *x, long xbase, __global TC *y, long ybase, ml_shape s)
{
	size_t i = get_global_id(0);
	if (i >= s.n)
		return;
	long r = i, ox = xbase, oy = ybase;
	for (int d = s.rank - 1; d >= 0; d--) {
		long k = r % s.dims[d];
		r /= s.dims[d];
		ox += k * s.sa[d];
		oy += k * s.sb[d];
	}
	y[oy] = x[ox];
}

/*
 * ml_gather: y[o][j][in] = x[o][ind[j]][in] for o < outer, j < nidx,
 * in < inner; negative indices count from the end of the axis (len);
 * out of range ones give 0 (the host checks them first).
 */
__kernel void
ml_gather(__global const TC *x, __global const long *ind, __global TC *y, long outer, long nidx,
	  long inner, long len)
{
	size_t i = get_global_id(0);
	if (i >= outer * nidx * inner)
		return;
	long in = i % inner, j = (i / inner) % nidx, o = i / (inner * nidx);
	long k = ind[j];
	if (k < 0)
		k += len;
	y[i] = k >= 0 && k < len ? x[(o * len + k) * inner + in] : (TC)0;
}

/* Cast: f16 to f32 is exact; f32 to f16 rounds to nearest even, as the CPU's Cast */
__kernel void
ml_cast_f16_f32(__global const half *x, __global float *y, ulong n)
{
	size_t i = get_global_id(0);
	if (i < n)
		y[i] = vload_half(i, x);
}

__kernel void
ml_cast_f32_f16(__global const float *x, __global half *y, ulong n)
{
	size_t i = get_global_id(0);
	if (i < n)
		vstore_half(x[i], i, y);
}
