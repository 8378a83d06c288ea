/*
 * fused.c: CPU kernels of the fused op family (lib/ops/fused.c). Large
 * FusedMatMuls and pointwise FusedConvs, and Attention, run in
 * fused_mm.c; otherwise each calls the base op's kernel (Conv, Gemm,
 * MatMul, LayerNormalization of lib/cpu/nn*.c, through the registry) into
 * its output, then makes one pass over the output while it is still in
 * cache, which adds the bias and the residual and applies the activation.
 * FusedElementwise evaluates its chain on blocks of 256 elements that stay in L1, one loop per op that
 * GCC vectorises; exp, tanh and erfc come from fastmath.h, as in the
 * elementwise kernels, so fused and unfused results agree to a few ulp.
 */
/* as in elem_unary.c: vectorise the activation loops (fastmath.h has no calls) */
#pragma GCC optimize("O3", "no-trapping-math")

#include "ml_impl.h"
#include "cpu/elem.h"
#include "cpu/nn.h"
#include "ops/fused.h"

/* The grain, in elements, of the output passes (as ML_GRAIN in elem.h). */
#define GRAIN 16384

struct epi {
	float *y;
	const float *bias;	/* per column of a row, NULL: none */
	const float *z;		/* residual, y's shape, NULL: none */
	int64_t rowlen;
	int act;
	float lo, hi;
};

static void
epi_rows(void *ctx, int64_t b, int64_t e)
{
	const struct epi *p = ctx;
	int64_t n = p->rowlen;
	ml_fused_tile_epi(p->y + b * n, e - b, n, n, p->bias, p->z != NULL ? p->z + b * n : NULL,
			  p->act, p->lo, p->hi);
}

/*
 * ml_cpu_fused_epilogue: bias (per last dim of rowlen), residual z and the
 * node's activation over y, in one pass (ml_fused_tile_epi, whose loops
 * are vectorised for AVX-512 and AVX2 with runtime dispatch).
 */
void
ml_cpu_fused_epilogue(struct ml_opctx *c, struct ml_tval *y, const float *bias,
		      int64_t rowlen, const struct ml_tval *z)
{
	struct epi p = { .y = y->data, .bias = bias, .z = z != NULL ? z->data : NULL,
			 .act = ml_fused_act(c->node) };
	int64_t total = ml_tval_numel(y);
	if (total <= 0 || (bias == NULL && p.z == NULL && p.act == ML_ACT_NONE))
		return;
	p.lo = (float)ml_attr_float(c->node, "clip_min", -INFINITY);
	p.hi = (float)ml_attr_float(c->node, "clip_max", INFINITY);
	if (rowlen <= 0 || total % rowlen != 0)
		rowlen = total;
	/* rows of at most GRAIN elements when nothing ties the row length */
	if (bias == NULL) {
		rowlen = total;
		while (rowlen > GRAIN && rowlen % 2 == 0)
			rowlen /= 2;
	}
	p.rowlen = rowlen;
	ml_parallel_for(total / rowlen, ML_MAX(1, GRAIN / rowlen), epi_rows, &p);
}

/* base: run op's kernel on c with its first n_in inputs. */
static int
base(struct ml_opctx *c, enum ml_op op, int n_in)
{
	struct ml_opctx b = *c;
	struct ml_node nb = *c->node;
	nb.op = op;
	b.node = &nb;
	b.n_in = ML_MIN(c->n_in, n_in);
	return ml_cpu_kernel_get(op)(&b);
}

static int
run_fconv(struct ml_opctx *c)
{
	/* a bf16 weight (mlquant --dtype bf16): bf16.c */
	int rc = ml_cpu_bf16_run(c);
	if (rc <= 0)
		return rc;
	if ((rc = ml_cpu_fconv_conv(c)) <= 0)
		return rc;
	ML_TRY(base(c, ML_OP_CONV, 3));
	ml_cpu_fused_epilogue(c, c->out[0], NULL, 0, ML_IN(c, 3));
	return 0;
}

static int
run_fgemm(struct ml_opctx *c)
{
	/* a bf16 weight (mlquant --dtype bf16): bf16.c */
	int rc = ml_cpu_bf16_run(c);
	if (rc <= 0)
		return rc;
	ML_TRY(base(c, ML_OP_GEMM, 3));
	ml_cpu_fused_epilogue(c, c->out[0], NULL, 0, NULL);
	return 0;
}

static int
run_fmatmul(struct ml_opctx *c)
{
	struct ml_tval *y = c->out[0];
	const struct ml_tval *b = ML_IN(c, 2);
	/* a bf16 weight (mlquant --dtype bf16): bf16.c */
	int rc = ml_cpu_bf16_run(c);
	if (rc <= 0)
		return rc;
	rc = ml_cpu_fmatmul_fast(c);
	if (rc <= 0)
		return rc;
	int64_t pn = ml_attr_int(c->node, "packed_n", 0);
	if (pn > 0) {
		/* B packed by mlopt, and no packed SGEMM here: the MatMul kernel on B unpacked */
		const struct ml_tval *bp = c->in[1];
		if (bp->rank != 3 || bp->dims[0] != (pn + ML_FUSED_PANEL - 1) / ML_FUSED_PANEL ||
		    bp->dims[2] != ML_FUSED_PANEL || bp->dtype != ML_F32)
			return ml_opfail(c, ML_EINVAL, "packed B must be [ceil(N / 32), K, 32] f32");
		struct ml_tval bk = { .dtype = ML_F32, .rank = 2, .dims = { bp->dims[1], pn } };
		struct ml_tval *ins[4];
		for (int i = 0; i < c->n_in && i < 4; i++)
			ins[i] = c->in[i];
		ins[1] = &bk;
		bk.data = ml_malloc(sizeof(float) * (size_t)(bp->dims[1] * pn) + 1);
		if (bk.data == NULL)
			return ml_opfail(c, ML_ENOMEM, "out of memory unpacking B");
		ml_fused_unpack(bp->data, bp->dims[1], pn, bk.data);
		struct ml_opctx c2 = *c;
		c2.in = ins;
		rc = base(&c2, ML_OP_MATMUL, 2);
		ml_free(bk.data);
		ML_TRY(rc);
	} else {
		ML_TRY(base(c, ML_OP_MATMUL, 2));
	}
	int64_t n = y->rank > 0 ? y->dims[y->rank - 1] : 1;
	ml_cpu_fused_epilogue(c, y, b != NULL ? b->data : NULL, n, ML_IN(c, 3));
	return 0;
}

static int
run_flayernorm(struct ml_opctx *c)
{
	return base(c, ML_OP_LAYER_NORM, 3);
}

/*
 * FusedElementwise.
 */
#define BLK 256

struct operand {
	const float *p;
	int64_t inner, cnt;
};

struct felem {
	const float *x;
	float *y;
	int nops;
	int op[64], arg[64], swap[64];
	struct operand in[64];
};

static void
load(const struct operand *a, int64_t i0, int64_t n, float *buf)
{
	if (a->cnt == 1) {
		for (int64_t j = 0; j < n; j++)
			buf[j] = a->p[0];
	} else if (a->inner == 1 && a->cnt >= i0 + n) {
		memcpy(buf, a->p + i0, sizeof(float) * (size_t)n);
	} else {
		/* element i is p[(i / inner) % cnt]: runs of one value (or of p, inner 1) */
		int64_t q = i0 / a->inner % a->cnt, r = i0 % a->inner;
		for (int64_t j = 0; j < n;) {
			if (a->inner == 1) {
				int64_t run = ML_MIN(a->cnt - q, n - j);
				memcpy(buf + j, a->p + q, sizeof(float) * (size_t)run);
				j += run;
				q = 0;
				continue;
			}
			int64_t run = ML_MIN(a->inner - r, n - j);
			float v = a->p[q];
			for (int64_t k = 0; k < run; k++)
				buf[j + k] = v;
			j += run;
			r = 0;
			if (++q == a->cnt)
				q = 0;
		}
	}
}

#define BIN(EXPR) \
	for (int64_t j = 0; j < n; j++) { \
		float u = v[j], w = b[j]; \
		if (sw) { float t_ = u; u = w; w = t_; } \
		v[j] = (EXPR); \
	}
#define UN(EXPR) \
	for (int64_t j = 0; j < n; j++) { \
		float u = v[j]; \
		v[j] = (EXPR); \
	}

static void
felem_chunk(void *ctx, int64_t b0, int64_t e0)
{
	const struct felem *f = ctx;
	float b[BLK];
	for (int64_t i0 = b0 * BLK; i0 < e0 * BLK; i0 += BLK) {
		int64_t n = ML_MIN((int64_t)BLK, f->in[0].cnt - i0);
		if (n <= 0)
			break;
		float *v = f->y + i0;
		if (v != f->x + i0)
			memcpy(v, f->x + i0, sizeof(float) * (size_t)n);
		for (int k = 0; k < f->nops; k++) {
			bool sw = f->swap[k] != 0;
			if (f->op[k] < ML_FE_UNARY)
				load(&f->in[f->arg[k]], i0, n, b);
			switch (f->op[k]) {
			case ML_FE_ADD: BIN(u + w) break;
			case ML_FE_SUB: BIN(u - w) break;
			case ML_FE_MUL: BIN(u * w) break;
			case ML_FE_DIV: BIN(u / w) break;
			case ML_FE_MAX: BIN(u > w || u != u ? u : w) break;
			case ML_FE_MIN: BIN(u < w || u != u ? u : w) break;
			case ML_FE_RELU: UN(u > 0.0f ? u : 0.0f) break;
			case ML_FE_SIGMOID: ml_vunary(ML_UN_SIGMOID, v, v, n); break;
			case ML_FE_TANH: ml_vunary(ML_UN_TANH, v, v, n); break;
			case ML_FE_EXP: ml_vunary(ML_UN_EXP, v, v, n); break;
			case ML_FE_NEG: UN(-u) break;
			case ML_FE_ABS: UN(fabsf(u)) break;
			case ML_FE_SQRT: UN(sqrtf(u)) break;
			case ML_FE_ERF: UN(erff(u)) break;
			case ML_FE_GELU: ml_vunary(ML_UN_GELU, v, v, n); break;
			case ML_FE_SILU: ml_vunary(ML_UN_SILU, v, v, n); break;
			case ML_FE_RECIPROCAL: UN(1.0f / u) break;
			default: break;
			}
		}
	}
}

static int
run_felem(struct ml_opctx *c)
{
	struct felem f = { .x = c->in[0]->data, .y = c->out[0]->data };
	const struct ml_attr *ops = ml_attr_find(c->node, "ops");
	const int64_t *args, *swap;
	ml_attr_ints(c->node, "args", &args);
	ml_attr_ints(c->node, "swap", &swap);
	if (ops->n > 64 || c->n_in > 64)
		return ml_opfail(c, ML_ENOTSUP, "more than 64 ops or inputs");
	f.nops = ops->n;
	for (int k = 0; k < ops->n; k++) {
		f.op[k] = ml_fused_elem_op(ops->strings[k]);
		f.arg[k] = (int)args[k];
		f.swap[k] = (int)swap[k];
	}
	int64_t total = ml_tval_numel(c->out[0]);
	f.in[0] = (struct operand){ f.x, 1, total };
	for (int i = 1; i < c->n_in; i++) {
		f.in[i].p = c->in[i]->data;
		if (ml_fused_block(c->in[i], c->out[0], &f.in[i].inner, &f.in[i].cnt) < 0)
			return ml_opfail(c, ML_EINVAL, "input %d does not broadcast as one block", i);
		if (ml_tval_numel(c->in[i]) == 0)
			return ml_opfail(c, ML_EINVAL, "input %d is empty", i);
	}
	if (total <= 0)
		return 0;
	ml_parallel_for((total + BLK - 1) / BLK, GRAIN / BLK, felem_chunk, &f);
	return 0;
}

const struct ml_cpu_kernel ml_cpu_fused[] = {
	{ ML_OP_FUSED_CONV, run_fconv },
	{ ML_OP_FUSED_GEMM, run_fgemm },
	{ ML_OP_FUSED_MATMUL, run_fmatmul },
	{ ML_OP_ML_LAYER_NORM, run_flayernorm },
	{ ML_OP_FUSED_ELEMWISE, run_felem },
	{ ML_OP_FUSED_ATTENTION, ml_cpu_attention },
	{ .op = ML_OP_NONE },
};
