/*
 * fused_elem.c: ml.FusedElementwise on OpenCL (lib/ops/fused.c), one
 * kernel generated for each distinct chain. The chain of a node (its ops,
 * args and swap, and how each operand is read) becomes straight-line
 * OpenCL C, here Sigmoid then Add(v, b) with b [C, 1, 1]:
 *
 *   __kernel void
 *   ml_fused_elem(__global const float *x, __global float *y, uint n,
 *                 __global const float *a1, uint in1)
 *   {
 *       uint i = get_global_id(0);
 *       if (i >= n)
 *           return;
 *       uint e = i * 16;
 *       T b1 = (T)a1[e / in1];          (T is float16)
 *       T v = vload16(i, x);
 *       v = fe_sigmoid(v);
 *       v = fe_add(v, b1);
 *       vstore16(v, i, y);
 *   }
 *
 * so the running value stays in registers and the data is read and
 * written once, as the CPU kernel's blocks do (lib/cpu/fused.c). A
 * work-item computes vw consecutive elements in a floatN: the native float
 * vector of a CPU device (POCL with AVX-512: 16, which runs a chain with
 * exp about 5 times faster than one float per work-item, the explicit
 * vectors reaching its vector exp), 4 elsewhere (a GPU's 128-bit loads),
 * halved until vw divides the element count (1: plain float, odd sizes).
 *
 * Each other operand broadcasts to X's shape as one block of dims
 * (ml_fused_block: cnt steps of inner elements): a scalar, X's shape,
 * cnt * inner == n (a[e / inner]), inner == 1 (a row, a[e % cnt]) or the
 * rest (a[(e / inner) % cnt]). It is read once per work-item (load()):
 * a vector load where its vw values are consecutive, one value for all
 * lanes where they share one, two values and a per-lane select where a
 * block boundary falls among the lanes, one load per lane otherwise. The
 * sizes are arguments, so the chain on tensors of other shapes reuses the
 * kernel while vw and what divides what stay the same. Indices are 32-bit
 * below 2^32 elements (a 64-bit division costs several 32-bit ones),
 * 64-bit above. The ops are the fe_* functions of the preamble below,
 * which compute what the CPU kernel does (NaN-propagating Max and Min,
 * Gelu as 0.5 u erfc(-u / sqrt 2)); where OpenCL's built-ins (exp, tanh,
 * erf) and the CPU's fastmath.h differ, it is by a few ulp.
 *
 * The source goes through the program cache (mlcl_kernel_src) under the
 * name fused_elem-HASH, HASH the FNV-1a hash of the text: a model whose
 * layers repeat one chain builds it once per process, and a tool's second
 * start loads its binary from the disk cache. f32 only (the op's
 * definition takes nothing else); more than ML_FE_CL_IN operands, which
 * would pass the smallest parameter space a device may have, is
 * ML_ENOTSUP and the node runs on the CPU.
 */
#include <stdarg.h>
#include <stdio.h>

#include <pthread.h>

#include "cl/cl.h"
#include "ops/fused.h"

#define ML_FE_CL_IN 32
#define ML_FE_CL_OPS 64

/* how operand j reads element i: see the comment at the top */
enum { IX_SCALAR, IX_FULL, IX_DIV, IX_MOD, IX_BLOCK };

struct chain {
	int nops, nin;
	int op[ML_FE_CL_OPS], arg[ML_FE_CL_OPS], swap[ML_FE_CL_OPS];
	int ix[ML_FE_CL_IN];
	int64_t inner[ML_FE_CL_IN], cnt[ML_FE_CL_IN];
	int vw;			/* elements per work-item */
	bool wide;		/* 64-bit indices */
};

/*
 * The op semantics of lib/cpu/fused.c felem_chunk: fe_NAME for each code's
 * ml_fused_elem_name (lib/act.def's NAME of a unary one), on T (float, or
 * floatN: a vector's relations are -1 where true, which ?: reads per lane).
 */
static const char preamble[] =
	"static T fe_add(T u, T w) { return u + w; }\n"
	"static T fe_sub(T u, T w) { return u - w; }\n"
	"static T fe_mul(T u, T w) { return u * w; }\n"
	"static T fe_div(T u, T w) { return u / w; }\n"
	"static T fe_max(T u, T w) { return (u > w) | isnan(u) ? u : w; }\n"
	"static T fe_min(T u, T w) { return (u < w) | isnan(u) ? u : w; }\n"
	"static T fe_relu(T u) { return u > 0.0f ? u : (T)0.0f; }\n"
	"static T fe_sigmoid(T u) { return 1.0f / (1.0f + exp(-u)); }\n"
	"static T fe_tanh(T u) { return tanh(u); }\n"
	"static T fe_exp(T u) { return exp(u); }\n"
	"static T fe_neg(T u) { return -u; }\n"
	"static T fe_abs(T u) { return fabs(u); }\n"
	"static T fe_sqrt(T u) { return sqrt(u); }\n"
	"static T fe_erf(T u) { return erf(u); }\n"
	"static T fe_gelu(T u) { return 0.5f * u * erfc(-u * 0.70710678118654752f); }\n"
	"static T fe_silu(T u) { return u / (1.0f + exp(-u)); }\n"
	"static T fe_reciprocal(T u) { return 1.0f / u; }\n";

/* chain_of: node c's chain and operand geometry, or ML_ENOTSUP / ML_EINVAL. */
static int
chain_of(struct ml_opctx *c, struct chain *ch)
{
	const struct ml_attr *ops = ml_attr_find(c->node, "ops");
	const struct ml_tval *y = c->out[0];
	const int64_t *args, *swap;
	int na = ml_attr_ints(c->node, "args", &args), ns = ml_attr_ints(c->node, "swap", &swap);
	int64_t n = ml_tval_numel(y);

	for (int j = 0; j < c->n_in; j++)
		if (c->in[j] == NULL || c->in[j]->dtype != ML_F32)
			return ml_opfail(c, ML_ENOTSUP, "operand %d is not f32 on OpenCL", j);
	if (y->dtype != ML_F32)
		return ml_opfail(c, ML_ENOTSUP, "a %s output on OpenCL", ml_dtype_name(y->dtype));
	if (ops == NULL || ops->type != ML_ATTR_STRINGS || na != ops->n || ns != ops->n)
		return ml_opfail(c, ML_EINVAL, "needs ops, args and swap of one length");
	if (ops->n > ML_FE_CL_OPS || c->n_in > ML_FE_CL_IN)
		return ml_opfail(c, ML_ENOTSUP, "more than %d ops or %d operands on OpenCL",
				 ML_FE_CL_OPS, ML_FE_CL_IN);
	ch->nops = ops->n;
	ch->nin = c->n_in;
	for (int k = 0; k < ops->n; k++) {
		ch->op[k] = ml_fused_elem_op(ops->strings[k]);
		bool binary = ch->op[k] >= 0 && ch->op[k] < ML_FE_UNARY;
		if (ch->op[k] < 0 || binary != (args[k] >= 0) || args[k] == 0 || args[k] >= c->n_in)
			return ml_opfail(c, ML_EINVAL, "op %d: bad op or operand", k);
		ch->arg[k] = (int)args[k];
		ch->swap[k] = swap[k] != 0;
	}
	ch->ix[0] = IX_FULL;
	for (int j = 1; j < c->n_in; j++) {
		int64_t in, cnt;
		if (ml_fused_block(c->in[j], y, &in, &cnt) < 0 || ml_tval_numel(c->in[j]) == 0)
			return ml_opfail(c, ML_EINVAL, "input %d does not broadcast as one block", j);
		ch->inner[j] = in;
		ch->cnt[j] = cnt;
		ch->ix[j] = cnt == 1 ? IX_SCALAR : in * cnt == n ? (in == 1 ? IX_FULL : IX_DIV) :
			    in == 1 ? IX_MOD : IX_BLOCK;
	}
	ch->wide = n > (int64_t)UINT32_MAX;
	return 0;
}

struct sbuf {
	char *p;
	size_t len, cap;
};

static void __attribute__((format(printf, 2, 3)))
put(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(b->p + b->len, b->len < b->cap ? b->cap - b->len : 0, fmt, ap);
	va_end(ap);
	b->len += k > 0 ? (size_t)k : 0;
}

/*
 * load: the statements that read operand j's values at the vw elements
 * from e into bj. One load for the scalar kernel and a scalar; a vector
 * load where the elements are consecutive in the operand (X's shape, or a
 * row whose length vw divides); one element for all where they share one
 * (blocks of inner elements that vw divides). Else one load per lane: for
 * a period (row length or inner) of at least vw the lanes cross at most
 * one boundary, so one division gives every lane's index; a shorter
 * period takes a division per lane.
 */
/* how load() reads an operand: one branch of it each */
enum { LD_ONE, LD_VEC, LD_VMOD, LD_SAME, LD_WRAP, LD_SPLIT, LD_LANES };

/*
 * load_kind: which way load() reads operand j. The kernel's source
 * depends on it, not on the sizes themselves, so the kernel cache keys
 * on it (cache_key).
 */
static int
load_kind(const struct chain *ch, int j)
{
	int vw = ch->vw, ix = ch->ix[j];
	int64_t period = ix == IX_MOD ? ch->cnt[j] : ch->inner[j];
	if (vw == 1 || ix == IX_SCALAR)
		return LD_ONE;
	if (ix == IX_FULL)
		return LD_VEC;
	if (period % vw == 0)
		return ix == IX_MOD ? LD_VMOD : LD_SAME;
	if (period >= vw && ix == IX_MOD)
		return LD_WRAP;
	if (period >= vw && !ch->wide)
		return LD_SPLIT;
	return LD_LANES;
}

static void
load(struct sbuf *b, const struct chain *ch, int j)
{
	static const char *const lane[] = { "a%d[0]", "a%d[e%s]", "a%d[(e%s) / in%d]",
					    "a%d[(e%s) %% c%d]", "a%d[((e%s) / in%d) %% c%d]" };
	static const char *const off[] = { "", " + 1", " + 2", " + 3", " + 4", " + 5", " + 6",
					   " + 7", " + 8", " + 9", " + 10", " + 11", " + 12",
					   " + 13", " + 14", " + 15" };
	const char *idx = ch->wide ? "ulong" : "uint";
	int vw = ch->vw, ix = ch->ix[j];
	switch (load_kind(ch, j)) {
	case LD_ONE:
		put(b, "\tT b%d = ", j);
		put(b, lane[ix], j, "", j, j);
		break;
	case LD_VEC:
		put(b, "\tT b%d = vload%d(0, a%d + e)", j, vw, j);
		break;
	case LD_VMOD:
		put(b, "\tT b%d = vload%d(0, a%d + e %% c%d)", j, vw, j, j);
		break;
	case LD_SAME:
		put(b, "\tT b%d = (T)", j);
		put(b, lane[ix], j, "", j, j);
		break;
	case LD_WRAP:
		put(b, "\t%s r%d = e %% c%d;\n\tT b%d = (T)(", idx, j, j, j);
		for (int k = 0; k < vw; k++)
			put(b, "%sa%d[r%d + %d < c%d ? r%d + %d : r%d + %d - c%d]", k ? ", " : "", j, j,
			    k, j, j, k, j, k, j);
		put(b, ")");
		break;
	case LD_SPLIT:
		/* the block p of e, and s of e + vw - 1: lanes from in - r on read s */
		put(b, "\tuint q%d = e / in%d, r%d = e - q%d * in%d;\n", j, j, j, j, j);
		if (ix == IX_DIV)
			put(b, "\tuint p%d = q%d, s%d = r%d + %d > in%d ? q%d + 1 : q%d;\n", j, j, j, j,
			    vw, j, j, j);
		else
			put(b, "\tuint p%d = q%d %% c%d, s%d = r%d + %d <= in%d ? p%d : "
			    "p%d + 1 < c%d ? p%d + 1 : 0;\n", j, j, j, j, j, vw, j, j, j, j, j);
		put(b, "\tT b%d = r%d + (uint%d)(", j, j, vw);
		for (int k = 0; k < vw; k++)
			put(b, "%s%d", k ? ", " : "", k);
		put(b, ") < in%d ? (T)a%d[p%d] : (T)a%d[s%d]", j, j, j, j, j);
		break;
	default:
		put(b, "\tT b%d = (T)(", j);
		for (int k = 0; k < vw; k++) {
			put(b, "%s", k ? ", " : "");
			put(b, lane[ix], j, off[k], j, j);
		}
		put(b, ")");
	}
	put(b, ";\n");
}

/*
 * gen: the kernel's source for ch into a buffer of *len bytes that the
 * caller frees; NULL when out of memory. Operand j is read once, into bj.
 */
static char *
gen(const struct chain *ch, size_t *len)
{
	const char *idx = ch->wide ? "ulong" : "uint";
	bool used[ML_FE_CL_IN] = { false };
	struct sbuf b = { .cap = sizeof preamble + 640 + 64 * (size_t)ch->nops +
				 (192 + 64 * (size_t)ch->vw) * (size_t)ch->nin };
	if ((b.p = ml_malloc(b.cap)) == NULL)
		return NULL;
	put(&b, "/* ml.FusedElementwise, generated by lib/cl/fused_elem.c */\n");
	if (ch->vw > 1)
		put(&b, "#define T float%d\n%s", ch->vw, preamble);
	else
		put(&b, "#define T float\n%s", preamble);
	/* n: work-items, vw elements each */
	put(&b, "__kernel void\nml_fused_elem(__global const float *x, __global float *y, %s n",
	    idx);
	for (int j = 1; j < ch->nin; j++) {
		put(&b, ",\n\t__global const float *a%d", j);
		if (ch->ix[j] == IX_DIV || ch->ix[j] == IX_BLOCK)
			put(&b, ", %s in%d", idx, j);
		if (ch->ix[j] == IX_MOD || ch->ix[j] == IX_BLOCK)
			put(&b, ", %s c%d", idx, j);
	}
	put(&b, ")\n{\n\t%s i = get_global_id(0);\n\tif (i >= n)\n\t\treturn;\n"
		"\t%s e = i * %d;\n", idx, idx, ch->vw);
	for (int k = 0; k < ch->nops; k++)
		if (ch->arg[k] > 0 && !used[ch->arg[k]]) {
			used[ch->arg[k]] = true;
			load(&b, ch, ch->arg[k]);
		}
	if (ch->vw > 1)
		put(&b, "\tT v = vload%d(i, x);\n", ch->vw);
	else
		put(&b, "\tT v = x[i];\n");
	for (int k = 0; k < ch->nops; k++) {
		const char *fn = ml_fused_elem_name(ch->op[k]);
		if (ch->op[k] >= ML_FE_UNARY)
			put(&b, "\tv = fe_%s(v);\n", fn);
		else if (ch->swap[k])
			put(&b, "\tv = fe_%s(b%d, v);\n", fn, ch->arg[k]);
		else
			put(&b, "\tv = fe_%s(v, b%d);\n", fn, ch->arg[k]);
	}
	if (ch->vw > 1)
		put(&b, "\tvstore%d(v, i, y);\n}\n", ch->vw);
	else
		put(&b, "\ty[i] = v;\n}\n");
	ML_ASSERT(b.len < b.cap);
	*len = b.len;
	return b.p;
}

static uint64_t
fnv1a(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ull;
	}
	return h;
}

/*
 * vec_width: elements per work-item on d for n elements: a CPU device's
 * native float vector width (POCL: 16 with AVX-512), else 4 (a GPU's
 * 128-bit loads), halved until it divides n (1: the scalar kernel).
 */
static int
vec_width(const struct mlcl_dev *d, cl_uint nw, int64_t n)
{
	int vw = 4;
	if ((d->type & CL_DEVICE_TYPE_CPU) && nw >= 4)
		vw = nw >= 16 ? 16 : nw >= 8 ? 8 : 4;
	while (vw > 1 && n % vw != 0)
		vw /= 2;
	return vw;
}

/*
 * The kernels made so far, per device: a chain's source depends on its
 * ops, operand indexing, vector width and index type, not on the sizes
 * it is given as arguments, so a node run again (every run of a session)
 * finds its kernel here without generating and hashing its source again.
 * The kernels are borrowed from the device's program cache, which lives
 * as long as the process. Devices may be driven from different threads:
 * the list has a lock.
 */
struct fe_ent {
	const struct mlcl_dev *d;
	struct chain key;	/* inner and cnt zero */
	cl_kernel k;
	struct fe_ent *next;
};

static pthread_mutex_t fe_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fe_ent *fe_cache;

/* native_width: d's native float vector width (0 unknown), asked once per device */
static cl_uint
native_width(const struct mlcl_dev *d)
{
	static struct dev_nw {
		const struct mlcl_dev *d;
		cl_uint nw;
	} seen[16];
	static int nseen;
	cl_uint nw = 0;
	pthread_mutex_lock(&fe_lock);
	for (int i = 0; i < nseen; i++)
		if (seen[i].d == d) {
			nw = seen[i].nw;
			pthread_mutex_unlock(&fe_lock);
			return nw;
		}
	if (clGetDeviceInfo(d->id, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof nw, &nw, NULL) !=
	    CL_SUCCESS)
		nw = 0;
	if (nseen < 16)
		seen[nseen++] = (struct dev_nw){ d, nw };
	pthread_mutex_unlock(&fe_lock);
	return nw;
}

/*
 * cache_key: ch without its run-time sizes, but with how load() reads
 * each operand, which they decide (whether vw divides a row's length, or
 * a row is shorter than vw): two chains that differ only there are two
 * kernels (a [50, 1] operand's rows of 50 need the per-lane split that
 * rows of 40 do not, at 8 lanes).
 */
static void
cache_key(const struct chain *ch, struct chain *key)
{
	memcpy(key, ch, sizeof *key);
	memset(key->inner, 0, sizeof key->inner);
	memset(key->cnt, 0, sizeof key->cnt);
	for (int j = 0; j < ch->nin && j < ML_FE_CL_IN; j++)
		key->inner[j] = load_kind(ch, j);
}

static cl_kernel
cache_find(const struct mlcl_dev *d, const struct chain *key)
{
	cl_kernel k = NULL;
	pthread_mutex_lock(&fe_lock);
	for (struct fe_ent *e = fe_cache; e != NULL && k == NULL; e = e->next)
		if (e->d == d && memcmp(&e->key, key, sizeof *key) == 0)
			k = e->k;
	pthread_mutex_unlock(&fe_lock);
	return k;
}

static void
cache_add(const struct mlcl_dev *d, const struct chain *key, cl_kernel k)
{
	struct fe_ent *e = malloc(sizeof *e);
	if (e == NULL)
		return;		/* not kept: made again next time */
	e->d = d;
	e->key = *key;
	e->k = k;
	pthread_mutex_lock(&fe_lock);
	e->next = fe_cache;
	fe_cache = e;
	pthread_mutex_unlock(&fe_lock);
}

/* struct args: the kernel's arguments, set in order; st ORs their statuses */
struct args {
	cl_kernel k;
	cl_uint i;
	cl_int st;
	bool wide;
};

static void
arg_buf(struct args *a, void *buf)
{
	cl_mem m = ((struct mlcl_buf *)buf)->mem;
	a->st |= clSetKernelArg(a->k, a->i++, sizeof m, &m);
}

/* arg_size: a size, as the kernel's index type */
static void
arg_size(struct args *a, int64_t v)
{
	cl_ulong l = (cl_ulong)v;
	cl_uint u = (cl_uint)v;
	a->st |= a->wide ? clSetKernelArg(a->k, a->i++, sizeof l, &l) :
			   clSetKernelArg(a->k, a->i++, sizeof u, &u);
}

int
mlcl_fused_elem_run(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout)
{
	struct chain ch, key;
	memset(&ch, 0, sizeof ch);	/* padding too: the cache compares the bytes */
	ML_TRY(chain_of(c, &ch));
	int64_t n = ml_tval_numel(c->out[0]);
	if (n <= 0)
		return 0;
	ch.vw = vec_width(d, native_width(d), n);
	struct args a = { .wide = ch.wide };
	cache_key(&ch, &key);
	if ((a.k = cache_find(d, &key)) == NULL) {
		size_t len;
		char *src = gen(&ch, &len), name[48];
		if (src == NULL)
			return ml_opfail(c, ML_ENOMEM, "out of memory");
		snprintf(name, sizeof name, "fused_elem-%016llx",
			 (unsigned long long)fnv1a(src, len));
		int rc = mlcl_kernel_src(d, name, src, len, "ml_fused_elem", NULL, &a.k, c->err);
		ml_free(src);
		ML_TRY(rc);
		cache_add(d, &key, a.k);
	}
	arg_buf(&a, bin[0]);
	arg_buf(&a, bout[0]);
	arg_size(&a, n / ch.vw);
	for (int j = 1; j < ch.nin; j++) {
		arg_buf(&a, bin[j]);
		if (ch.ix[j] == IX_DIV || ch.ix[j] == IX_BLOCK)
			arg_size(&a, ch.inner[j]);
		if (ch.ix[j] == IX_MOD || ch.ix[j] == IX_BLOCK)
			arg_size(&a, ch.cnt[j]);
	}
	if (a.st != CL_SUCCESS)
		return mlcl_argfail(c, a.st);
	return mlcl_launch1(d, a.k, (size_t)(n / ch.vw), c->err);
}
