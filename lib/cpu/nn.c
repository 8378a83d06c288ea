/*
 * nn.c: CPU kernels of the nn family's dense layers (MatMul, Gemm) and
 * Dropout, the per-thread scratch buffers, and the family's one kernel
 * table. Convolutions are in nn_conv.c, pools in nn_pool.c and the
 * normalisations in nn_norm.c. f32 and f64 go to BLAS, integer types run
 * plain loops (wrapping as numpy does), f16 and bf16 run as f32.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "cpu/elem.h"
#include "cpu/nn.h"

static _Thread_local struct {
	void *raw, *p;		/* the allocation, and p: raw aligned up to 64 bytes */
	size_t n;
} scratch[ML_SCRATCH_SLOTS];

/*
 * A thread's buffers go with the thread: a thread that ends (a pipeline
 * stage's, a caller's own) would otherwise leave them behind, out of
 * anyone's reach. The key's value is only a flag that makes the
 * destructor run; the buffers themselves are the thread's _Thread_local.
 */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_keyed;

static void
scratch_drop(void *flag)
{
	(void)flag;
	for (int i = 0; i < ML_SCRATCH_SLOTS; i++) {
		ml_free(scratch[i].raw);
		scratch[i].raw = scratch[i].p = NULL;
		scratch[i].n = 0;
	}
}

static void
scratch_key_init(void)
{
	scratch_keyed = pthread_key_create(&scratch_key, scratch_drop) == 0;
}

/*
 * The loan (ml_cpu_scratch_lend): free arena memory of the node now
 * running, handed out by bumping `used`. gen tells one loan from the next,
 * so a slot's block from an earlier node is never handed out again.
 */
static _Thread_local struct {
	uint8_t *base;
	size_t len, used;
	unsigned gen;
	struct {
		void *p;
		size_t n;
		unsigned gen;
	} slot[ML_SCRATCH_SLOTS];
} loan;

void
ml_cpu_scratch_lend(void *base, size_t len)
{
	/* the arena is only malloc-aligned; the blocks are 64-byte aligned */
	uintptr_t b = ((uintptr_t)base + 63) & ~(uintptr_t)63;
	size_t skip = (size_t)(b - (uintptr_t)base);
	loan.base = base != NULL && len > skip ? (uint8_t *)b : NULL;
	loan.len = loan.base != NULL ? len - skip : 0;
	loan.used = 0;
	loan.gen++;
}

/* from_loan: slot's block of at least n bytes from the loan, or NULL */
static void *
from_loan(int slot, size_t n)
{
	if (loan.base == NULL)
		return NULL;
	if (loan.slot[slot].gen == loan.gen && loan.slot[slot].p != NULL && n <= loan.slot[slot].n)
		return loan.slot[slot].p;
	size_t want = (n + 63) & ~(size_t)63;
	if (want > loan.len - loan.used)
		return NULL;
	void *p = loan.base + loan.used;
	loan.used += want;
	loan.slot[slot].p = p;
	loan.slot[slot].n = want;
	loan.slot[slot].gen = loan.gen;
	return p;
}

size_t
ml_cpu_scratch_room(int slot)
{
	ML_ASSERT(slot >= 0 && slot < ML_SCRATCH_SLOTS);
	size_t r = loan.base != NULL ? loan.len - loan.used : 0;
	if (loan.base != NULL && loan.slot[slot].gen == loan.gen)
		r = ML_MAX(r, loan.slot[slot].n);
	return ML_MAX(r, scratch[slot].p != NULL ? scratch[slot].n : 0);
}

bool
ml_cpu_scratch_fits(int nreq, const int *slot, const size_t *n)
{
	size_t left = loan.base != NULL ? loan.len - loan.used : 0;
	for (int i = 0; i < nreq; i++) {
		int k = slot[i];
		ML_ASSERT(k >= 0 && k < ML_SCRATCH_SLOTS);
		size_t want = (n[i] + 63) & ~(size_t)63;
		if (loan.base != NULL && loan.slot[k].gen == loan.gen && n[i] <= loan.slot[k].n)
			continue;
		if (want <= left)
			left -= want;
		else if (scratch[k].p == NULL || n[i] > scratch[k].n)
			return false;
	}
	return true;
}

void *
ml_cpu_scratch(int slot, size_t n)
{
	ML_ASSERT(slot >= 0 && slot < ML_SCRATCH_SLOTS);
	void *p = from_loan(slot, n);
	if (p != NULL)
		return p;
	if (n <= scratch[slot].n && scratch[slot].p != NULL)
		return scratch[slot].p;
	ml_free(scratch[slot].raw);
	/* grow by a quarter more than asked, so a slowly growing size reallocates rarely */
	size_t want = n + n / 4 + 64;
	scratch[slot].raw = ml_malloc(want + 64);
	scratch[slot].p = scratch[slot].raw == NULL ? NULL :
		(void *)(((uintptr_t)scratch[slot].raw + 63) & ~(uintptr_t)63);
	scratch[slot].n = scratch[slot].raw != NULL ? want : 0;
	pthread_once(&scratch_once, scratch_key_init);
	if (scratch_keyed && scratch[slot].raw != NULL && pthread_getspecific(scratch_key) == NULL)
		pthread_setspecific(scratch_key, &scratch_keyed);
	return scratch[slot].p;
}

/*
 * The node's cache (ml_opctx.cache) holds one block: this header, then the
 * weight in the form the kernel wants, 64 bytes in. src and kind tell
 * whether it is still the one asked for.
 */
struct wc {
	const void *src;
	int kind;		/* ML_WC_* */
	size_t bytes;
};

/* wkind: the kind of c's weight tensor, or -1 when c has no graph or no weight */
static int
wkind(const struct ml_opctx *c)
{
	int t = c->node != NULL && c->node->n_in > 1 ? c->node->in[1] : -1;

	return c->g != NULL && t >= 0 && t < c->g->n_tensors ? (int)c->g->tensors[t]->kind : -1;
}

bool
ml_cpu_wconst(const struct ml_opctx *c)
{
	return c != NULL && c->cache != NULL && wkind(c) == ML_TK_CONST;
}

void *
ml_cpu_wcache(struct ml_opctx *c, int kind, size_t bytes, bool *fill, void **tmp)
{
	const void *src = c->in[1]->data;
	int k = wkind(c);

	*tmp = NULL;
	*fill = true;
	if (c->cache != NULL && (k == ML_TK_CONST || k == ML_TK_PARAM)) {
		struct wc *h = *c->cache;
		if (h != NULL && h->src == src && h->kind == kind && h->bytes == bytes) {
			*fill = false;
			return (char *)h + 64;
		}
		ml_free(h);
		*c->cache = NULL;
		if ((h = ml_malloc(bytes + 64)) == NULL)
			return NULL;
		*h = (struct wc){ src, kind, bytes };
		*c->cache = h;
		return (char *)h + 64;
	}
	*tmp = ml_malloc(bytes + 64);
	return *tmp != NULL ? (char *)*tmp + 64 : NULL;
}

static int
unsupported(struct ml_opctx *c, enum ml_dtype t)
{
	return ml_opfail(c, ML_ENOTSUP, "dtype %s is not supported", ml_dtype_name(t));
}

static int
too_large(struct ml_opctx *c)
{
	return ml_opfail(c, ML_ENOTSUP, "matrix sizes exceed what BLAS can index");
}

/*
 * Integer matrix products: out[m, n] = alpha * a[m, k] b[k, n] (+ beta c),
 * with arithmetic in the unsigned type of the same width so that overflow
 * wraps instead of being undefined.
 */
#define INT_MM(SUF, T, U)							\
static void									\
mm_##SUF(const void *av, const void *bv, void *ov, int64_t m, int64_t n, int64_t k, \
	 bool ta, bool tb)							\
{										\
	const T *a = av, *b = bv;						\
	T *o = ov;								\
	for (int64_t i = 0; i < m; i++)						\
		for (int64_t j = 0; j < n; j++) {				\
			U s = 0;						\
			for (int64_t p = 0; p < k; p++)				\
				s += (U)a[ta ? p * m + i : i * k + p] *		\
				     (U)b[tb ? j * k + p : p * n + j];		\
			o[i * n + j] = (T)s;					\
		}								\
}
INT_MM(i32, int32_t, uint32_t)
INT_MM(i64, int64_t, uint64_t)
INT_MM(u32, uint32_t, uint32_t)
INT_MM(u64, uint64_t, uint64_t)

typedef void (*mmfn)(const void *, const void *, void *, int64_t, int64_t, int64_t, bool, bool);

static mmfn
int_mm(enum ml_dtype t)
{
	switch (t) {
	case ML_I32: return mm_i32;
	case ML_I64: return mm_i64;
	case ML_U32: return mm_u32;
	case ML_U64: return mm_u64;
	default: return NULL;
	}
}

/*
 * gemm_any: one product of dtype t, out = a b (beta 0) or out += a b
 * (accumulate, float types only). lda etc. are the dense strides.
 */
static int
gemm_any(struct ml_opctx *c, enum ml_dtype t, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
	 double alpha, const void *a, const void *b, bool accumulate, void *o)
{
	int64_t lda = ta ? m : k, ldb = tb ? k : n;
	bool ok;

	/* BLAS wants leading dims of at least 1 even for empty matrices */
	lda = ML_MAX(lda, 1);
	ldb = ML_MAX(ldb, 1);
	if (t == ML_F32 && alpha == 1 && ml_node_bf16(c->node))
		/* a step graph's product in bf16 (mltrain --precision bf16) */
		ok = ml_bf16_sgemm(ta, tb, m, n, k, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, o,
				   ML_MAX(n, 1));
	else if (t == ML_F32)
		ok = ml_sgemm(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, accumulate ? 1.0f : 0.0f,
			      o, ML_MAX(n, 1));
	else if (t == ML_F64)
		ok = ml_dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, accumulate ? 1.0 : 0.0, o,
			      ML_MAX(n, 1));
	else
		return unsupported(c, t);
	return ok ? 0 : too_large(c);
}

/*
 * MatMul. The batch dims of A and B broadcast; each output matrix is one
 * GEMM. When B has a single matrix and A's batch is not broadcast, the
 * batch folds into A's rows and the whole op is one GEMM.
 */
static int
run_matmul(struct ml_opctx *c)
{
	const struct ml_tval *a = c->in[0], *b = c->in[1];
	struct ml_tval *o = c->out[0];

	/* a bf16 weight (mlquant --dtype bf16): bf16.c */
	int brc = ml_cpu_bf16_run(c);
	if (brc <= 0)
		return brc;
	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_matmul);
	int ra = a->rank, rb = b->rank;
	int64_t m = ra == 1 ? 1 : a->dims[ra - 2], k = a->dims[ra - 1];
	int64_t n = rb == 1 ? 1 : b->dims[rb - 1];
	int nb = o->rank - (ra > 1) - (rb > 1);
	int64_t nbatch = 1, abatch = 1, bbatch = 1;
	int64_t sa[ML_MAX_RANK], sb[ML_MAX_RANK];
	size_t es = ml_dtype_size(a->dtype);
	enum ml_dtype t = a->dtype;

	if (a->dtype != b->dtype)
		return ml_opfail(c, ML_EINVAL, "A and B have dtypes %s and %s",
				 ml_dtype_name(a->dtype), ml_dtype_name(b->dtype));
	/* per output batch dim, the step in whole matrices of A and of B (0 where broadcast) */
	int64_t s1 = 1, s2 = 1;
	for (int d = nb - 1; d >= 0; d--) {
		int ka = d - (nb - (ra - 2)), kb = d - (nb - (rb - 2));
		int64_t da = ka >= 0 && ra > 2 ? a->dims[ka] : 1, db = kb >= 0 && rb > 2 ? b->dims[kb] : 1;
		sa[d] = da == 1 ? 0 : s1;
		sb[d] = db == 1 ? 0 : s2;
		s1 *= da;
		s2 *= db;
		nbatch *= o->dims[d];
	}
	abatch = s1;
	bbatch = s2;
	if (ml_tval_numel(o) == 0)
		return 0;
	int64_t amat = m * k, bmat = k * n, omat = m * n;
	if (bbatch == 1 && abatch == nbatch && int_mm(t) == NULL)
		return gemm_any(c, t, false, false, nbatch * m, n, k, 1.0, a->data, b->data, false,
				o->data);
	mmfn imm = int_mm(t);
	for (int64_t bi = 0; bi < nbatch; bi++) {
		int64_t r = bi, oa = 0, ob = 0;
		for (int d = nb - 1; d >= 0; d--) {
			int64_t i = r % o->dims[d];
			r /= o->dims[d];
			oa += i * sa[d];
			ob += i * sb[d];
		}
		const char *pa = (const char *)a->data + (size_t)(oa * amat) * es;
		const char *pb = (const char *)b->data + (size_t)(ob * bmat) * es;
		char *po = (char *)o->data + (size_t)(bi * omat) * es;
		if (imm != NULL)
			imm(pa, pb, po, m, n, k, false, false);
		else
			ML_TRY(gemm_any(c, t, false, false, m, n, k, 1.0, pa, pb, false, po));
	}
	return 0;
}

/*
 * Gemm. Y starts as beta * C broadcast to [M, N] and the product
 * accumulates onto it, so the bias costs one pass over Y.
 */
static int
run_gemm(struct ml_opctx *c)
{
	const struct ml_tval *a = c->in[0], *b = c->in[1], *cc = ML_IN(c, 2);
	struct ml_tval *o = c->out[0];
	bool ta = ml_attr_int(c->node, "transA", 0) != 0;
	bool tb = ml_attr_int(c->node, "transB", 0) != 0;
	double alpha = ml_attr_float(c->node, "alpha", 1.0);
	double beta = ml_attr_float(c->node, "beta", 1.0);
	enum ml_dtype t = a->dtype;

	/* a bf16 weight (mlquant --dtype bf16): bf16.c */
	int brc = ml_cpu_bf16_run(c);
	if (brc <= 0)
		return brc;
	if (ml_cpu_has_half(c))
		return ml_cpu_as_f32(c, run_gemm);
	int64_t m = o->dims[0], n = o->dims[1], k = a->dims[ta ? 0 : 1];
	bool acc = cc != NULL && beta != 0 && ml_tval_numel(cc) > 0;
	if (m == 0 || n == 0)
		return 0;
	if (acc) {
		int64_t cm = cc->rank == 2 ? cc->dims[0] : 1;
		int64_t cn = cc->rank >= 1 ? cc->dims[cc->rank - 1] : 1;
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				int64_t src = (cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j);
				if (t == ML_F32)
					((float *)o->data)[i * n + j] =
						(float)beta * ((const float *)cc->data)[src];
				else
					ml_set_f64(o->data, t, i * n + j,
						   beta * ml_get_f64(cc->data, t, src));
			}
	}
	mmfn imm = int_mm(t);
	if (imm == NULL)
		return gemm_any(c, t, ta, tb, m, n, k, alpha, a->data, b->data, acc, o->data);
	/* integer Gemm: the product into a temporary, then alpha and the bias */
	struct ml_tval tmp = { 0 };
	ML_TRY(ml_tval_alloc(&tmp, t, 2, o->dims, c->err));
	imm(a->data, b->data, tmp.data, m, n, k, ta, tb);
	for (int64_t i = 0; i < m * n; i++) {
		int64_t v = (int64_t)((uint64_t)ml_get_i64(tmp.data, t, i) * (uint64_t)(int64_t)alpha);
		if (acc)
			v = (int64_t)((uint64_t)v + (uint64_t)ml_get_i64(o->data, t, i));
		ml_set_f64(o->data, t, i, (double)v);
	}
	ml_tval_clear(&tmp);
	return 0;
}

/*
 * MT19937 as numpy's legacy RandomState has it, so that a Dropout with a
 * seed draws the same mask as numpy.random.seed(seed) followed by
 * numpy.random.uniform(0, 1, shape) (the ONNX reference).
 */
struct mt {
	uint32_t s[624];
	int i;
};

static void
mt_seed(struct mt *m, uint32_t seed)
{
	m->s[0] = seed;
	for (int i = 1; i < 624; i++)
		m->s[i] = 1812433253u * (m->s[i - 1] ^ (m->s[i - 1] >> 30)) + (uint32_t)i;
	m->i = 624;
}

static uint32_t
mt_next(struct mt *m)
{
	if (m->i >= 624) {
		for (int k = 0; k < 624; k++) {
			uint32_t y = (m->s[k] & 0x80000000u) | (m->s[(k + 1) % 624] & 0x7fffffffu);
			m->s[k] = m->s[(k + 397) % 624] ^ (y >> 1) ^ (y & 1 ? 0x9908b0dfu : 0);
		}
		m->i = 0;
	}
	uint32_t y = m->s[m->i++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	y ^= y >> 18;
	return y;
}

static double
mt_double(struct mt *m)
{
	uint32_t a = mt_next(m) >> 5, b = mt_next(m) >> 6;
	return (a * 67108864.0 + b) / 9007199254740992.0;
}

/*
 * Dropout. In inference (the default) it is the identity and the mask is
 * all true. In training mode each element is kept with probability
 * 1 - ratio and scaled by 1 / (1 - ratio); without a seed attribute each
 * run draws a new mask.
 */
static int
run_dropout(struct ml_opctx *c)
{
	const struct ml_tval *x = c->in[0], *r = ML_IN(c, 1), *tm = ML_IN(c, 2);
	struct ml_tval *o = c->out[0], *mask = c->n_out > 1 ? c->out[1] : NULL;
	int64_t n = ml_tval_numel(x);
	double ratio = ml_attr_float(c->node, "ratio", 0.5);
	bool train = false;

	if (r != NULL && ml_tval_numel(r) == 1)
		ratio = (float)ml_get_f64(r->data, r->dtype, 0);
	if (tm != NULL && ml_tval_numel(tm) == 1)
		train = ((const uint8_t *)tm->data)[0] != 0;
	if (train && (ratio < 0 || ratio > 1))
		return ml_opfail(c, ML_EINVAL, "ratio %g is not in [0, 1]", ratio);
	if (!train || ratio == 0) {
		if (o->data != x->data)
			memcpy(o->data, x->data, (size_t)ml_tval_nbytes(x));
		if (mask != NULL)
			for (int64_t i = 0; i < n; i++)
				ml_set_f64(mask->data, mask->dtype, i, 1);
		return 0;
	}
	static atomic_uint counter;
	const struct ml_attr *sa = ml_attr_find(c->node, "seed");
	uint32_t seed;
	if (sa != NULL)
		seed = (uint32_t)(sa->type == ML_ATTR_FLOAT ? (int64_t)sa->f : sa->i);
	else
		seed = (uint32_t)(ml_now() * 1e6) ^ (atomic_fetch_add(&counter, 1) * 2654435761u);
	struct mt *mt = ml_malloc(sizeof *mt);
	if (mt == NULL)
		return ml_opfail(c, ML_ENOMEM, "out of memory");
	mt_seed(mt, seed);
	float scale = ratio < 1 ? 1.0f / (1.0f - (float)ratio) : 0.0f;
	for (int64_t i = 0; i < n; i++) {
		bool keep = mt_double(mt) >= ratio;
		if (x->dtype == ML_F32)
			((float *)o->data)[i] = keep ? ((const float *)x->data)[i] * scale : 0.0f;
		else
			ml_set_f64(o->data, o->dtype, i,
				   keep ? ml_get_f64(x->data, x->dtype, i) * scale : 0.0);
		if (mask != NULL)
			ml_set_f64(mask->data, mask->dtype, i, keep);
	}
	ml_free(mt);
	return 0;
}

const struct ml_cpu_kernel ml_cpu_nn[] = {
	{ ML_OP_MATMUL, run_matmul },
	{ ML_OP_GEMM, run_gemm },
	{ ML_OP_CONV, ml_cpu_conv },
	{ ML_OP_CONV_TRANSPOSE, ml_cpu_conv_transpose },
	{ ML_OP_MAX_POOL, ml_cpu_max_pool },
	{ ML_OP_AVERAGE_POOL, ml_cpu_avg_pool },
	{ ML_OP_LP_POOL, ml_cpu_lp_pool },
	{ ML_OP_GLOBAL_AVERAGE_POOL, ml_cpu_global_pool },
	{ ML_OP_GLOBAL_MAX_POOL, ml_cpu_global_pool },
	{ ML_OP_GLOBAL_LP_POOL, ml_cpu_global_pool },
	{ ML_OP_BATCH_NORM, ml_cpu_batchnorm },
	{ ML_OP_INSTANCE_NORM, ml_cpu_instnorm },
	{ ML_OP_LAYER_NORM, ml_cpu_layernorm },
	{ ML_OP_GROUP_NORM, ml_cpu_groupnorm },
	{ ML_OP_LRN, ml_cpu_lrn },
	{ ML_OP_LP_NORM, ml_cpu_lpnorm },
	{ ML_OP_MVN, ml_cpu_mvn },
	{ ML_OP_DROPOUT, run_dropout },
	{ ML_OP_CONV_NHWC, ml_cpu_conv_nhwc },
	{ .op = ML_OP_NONE },
};
