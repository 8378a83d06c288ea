/*
 * quant_grad.c: gradient rules of the quant family (lib/ops/gradrule.h has
 * the rule interface): FakeQuant's straight-through estimator for
 * quantization-aware training (lib/quant/qat.c).
 */
#include "ops/gradrule.h"

/*
 * FakeQuant: dx = dy where x lies in the representable range [(qmin - zp)
 * * scale, (qmax - zp) * scale], 0 outside. Without a scale input the
 * scale is max |x| / qmax (zero point 0), so every x is representable and
 * dx = dy. The scale and zero point (constants) get no gradient; a
 * per-channel or computed scale input is not supported.
 */
static int
grad_fakequant(struct ml_gctx *c)
{
	int x = ml_gin(c, 0), st = ml_gin(c, 1), zt = ml_gin(c, 2);
	const struct ml_node *n = ml_gfwd(c);
	double qmin = (double)ml_attr_int(n, "qmin", 0), qmax = (double)ml_attr_int(n, "qmax", 255);
	double sc, zp = 0;

	if (st < 0) {
		c->dx[0] = c->dy[0];
		return 0;
	}
	const struct ml_tensor *s = ml_gt(c, st), *z = zt >= 0 ? ml_gt(c, zt) : NULL;
	if (s->data == NULL || s->dtype != ML_F32 || s->nbytes != sizeof(float) ||
	    (z != NULL && (z->data == NULL || z->nbytes != (size_t)ml_dtype_size(z->dtype))))
		return ml_gfail(c, ML_ENOTSUP, "FakeQuant needs a constant per-tensor scale and "
				"zero point to be differentiated");
	sc = *(const float *)s->data;
	if (z != NULL)
		zp = ml_get_f64(z->data, z->dtype, 0);
	float lo = (float)((qmin - zp) * sc), hi = (float)((qmax - zp) * sc);
	int in = ml_g2(c, "And", ml_g2(c, "GreaterOrEqual", x, ml_gscalar(c, ML_F32, lo)),
		       ml_g2(c, "LessOrEqual", x, ml_gscalar(c, ML_F32, hi)));
	c->dx[0] = ml_g3(c, "Where", in, c->dy[0], ml_gscalar(c, ML_F32, 0));
	return c->dx[0] < 0 ? c->dx[0] : 0;
}

const struct ml_grad_rule ml_grad_rules_quant[] = {
	{ ML_OP_FAKE_QUANT, grad_fakequant },
	{ .op = ML_OP_NONE },
};
