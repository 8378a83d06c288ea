/*
 * prelude.cl: what every program of kernels/ shares. lib/cl/cl_prog.c
 * passes it as the second of three source strings to each build, after
 * lib/act.def (the codes of the activations and unary functions, shared
 * with the C code) and before the program's file, and hashes all three
 * into the binary cache key; ML_KERNEL_DIR supplies it with the rest
 * (act.def always comes from the build), so the files below do not
 * repeat it. Generated programs (the fused
 * elementwise chains of lib/cl/fused_elem.c) bring their own definitions.
 *
 * T is the stored element type: float, or half with -DML_F16, where every
 * element goes through LD (vload_half) and ST (vstore_half, round to
 * nearest even) and the arithmetic stays in float. That is core OpenCL
 * 1.2, so f16 tensors run on every device, cl_khr_fp16 or not. LD8 reads
 * eight consecutive elements as a float8. KN(name) is a kernel's name with
 * its type suffix (name_f32 or name_f16).
 */
#ifdef ML_F16
#define T half
#define LD(p, i) vload_half((i), (p))
#define LD8(p, i) vload_half8(0, (p) + (i))
#define ST(p, i, v) vstore_half((v), (i), (p))
#define KN(name) name##_f16
#else
#define T float
#define LD(p, i) ((p)[i])
#define LD8(p, i) vload8(0, (p) + (i))
#define ST(p, i, v) ((p)[i] = (v))
#define KN(name) name##_f32
#endif

/*
 * The fused activations, by their ML_ACT_* codes of lib/act.def (the
 * first source string of every program, ahead of this one), with the
 * formulas of the CPU's fused kernels (lib/cpu/fused_mm.c): Clip lets NaN
 * through (both comparisons are false) and Gelu is the erf form,
 * 0.5 v erfc(-v / sqrt 2). ACT_FN(NAME, TY) defines NAME(v, act, lo, hi)
 * on TY, a float or a float vector; a file instantiates the ones it uses.
 */
#define ACT_FN(NAME, TY) \
	inline TY NAME(TY v, int act, float lo, float hi) \
	{ \
		switch (act) { \
		case ML_ACT_RELU: return fmax(v, (TY)(0.0f)); \
		case ML_ACT_CLIP: return select(select(v, (TY)(hi), v > hi), (TY)(lo), v < lo); \
		case ML_ACT_SIGMOID: return 1.0f / (1.0f + exp(-v)); \
		case ML_ACT_TANH: return tanh(v); \
		case ML_ACT_SILU: return v / (1.0f + exp(-v)); \
		case ML_ACT_GELU: return 0.5f * v * erfc(-v * 0.70710678118654752f); \
		default: return v; \
		} \
	}

/*
 * RND(v): a product's operand as a training step's precision rounds it
 * (the node attribute precision, lib/train/precision.c): -DML_ROUND=1 to
 * fp16, 2 to bf16, to nearest even and back to float, as the operands are
 * packed; the products and their sums stay f32. Integer operations on the
 * bits, so every device rounds alike, cl_khr_fp16 or not, and as the CPU's
 * ml_f32_to_f16 and ml_f32_to_bf16 do (f16 subnormals kept; beyond 65504
 * an infinity, which loss scaling's overflow check then sees).
 */
#if defined(ML_ROUND) && ML_ROUND == 1
inline float
RND(float x)
{
	float a = fabs(x);
	if (isnan(x))
		return x;
	if (a >= 65520.0f)	/* halfway past 65504, the largest half */
		return copysign(INFINITY, x);
	if (a < 0x1p-14f)	/* subnormal halves: multiples of 2^-24 */
		return rint(x * 0x1p24f) * 0x1p-24f;
	uint u = as_uint(x);
	u += 0xfffu + ((u >> 13) & 1u);
	return as_float(u & ~0x1fffu);
}

/* RND8: RND of eight values, branch-free (the packing's vector path) */
inline float8
RND8(float8 x)
{
	float8 a = fabs(x);
	uint8 u = as_uint8(x);
	float8 r = as_float8((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
	r = select(r, rint(x * 0x1p24f) * 0x1p-24f, a < 0x1p-14f);
	r = select(r, copysign((float8)(INFINITY), x), a >= 65520.0f);
	return select(r, x, isnan(x));
}
#elif defined(ML_ROUND) && ML_ROUND == 2
inline float
RND(float x)
{
	uint u = as_uint(x);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return x;
	u += 0x7fffu + ((u >> 16) & 1u);
	return as_float(u & 0xffff0000u);
}

inline float8
RND8(float8 x)
{
	uint8 u = as_uint8(x);
	return select(as_float8((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u), x, isnan(x));
}
#else
#define RND(x) (x)
#define RND8(x) (x)
#endif
