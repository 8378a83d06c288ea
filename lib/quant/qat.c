/*
 * qat.c: quantization-aware training. ml_quant_insert_fakequant puts
 * ml.FakeQuant nodes in front of the inputs of Conv, Gemm and MatMul (see
 * lib/ml_quant.h): the weight one computes its per-channel scale from the
 * weights each time it runs (so the STE gradient is dy everywhere), the
 * activation one holds the per-tensor uint8 range of the first calibration
 * batch as constants (its STE gradient is zero outside that range).
 * mlq_qat_strip is ml_quantize's side: it removes the FakeQuant nodes of a
 * trained graph and turns their ranges into calibration statistics.
 */
#include "quant/quant.h"

static bool
is_fq(const struct ml_graph *g, int t)
{
	int p = t >= 0 ? ml_graph_t(g, t)->producer : -1;
	return p >= 0 && p < g->n_nodes && g->nodes[p].op == ML_OP_FAKE_QUANT;
}

/* fq_node: the FakeQuant of tensor t named "<t>.fq" (made once); its output's index. */
static int
fq_node(struct ml_graph *g, int t, bool weight, int axis, int qmax, const struct mq_stat *st,
	struct ml_err *e)
{
	char name[256], yn[256], sn[256], zn[256];
	const char *tn = ml_graph_t(g, t)->name;
	int y, ni, rc;

	snprintf(yn, sizeof yn, "%s.fq", tn);
	if ((y = ml_graph_find(g, yn)) >= 0)
		return y;
	snprintf(name, sizeof name, "fakequant/%s", tn);
	if (weight) {
		const char *in[1] = { tn }, *out[1] = { yn };
		if ((ni = ml_graph_add_node(g, "FakeQuant", "ml", name, 1, in, 1, out, e)) < 0)
			return ni;
		if ((rc = ml_node_set_int(g, ni, "axis", axis)) < 0 ||
		    (rc = ml_node_set_int(g, ni, "qmin", -qmax)) < 0 ||
		    (rc = ml_node_set_int(g, ni, "qmax", qmax)) < 0)
			return ml_fail(e, rc, "out of memory");
	} else {
		/* asymmetric uint8, as mlquant's qparams does it */
		double lo = fmin(st->min, 0), hi = fmax(st->max, 0);
		float sc = (float)(hi - lo > 0 ? (hi - lo) / 255 : 1.0);
		double z = rint(-lo / sc);
		uint8_t zp = (uint8_t)(z < 0 ? 0 : z > 255 ? 255 : z);
		snprintf(sn, sizeof sn, "%s.fq.scale", tn);
		snprintf(zn, sizeof zn, "%s.fq.zero_point", tn);
		int si = ml_graph_tensor(g, sn), zi = ml_graph_tensor(g, zn);
		if (si < 0 || zi < 0)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		ML_TRY(ml_graph_set_data(g, si, ML_TK_CONST, ML_F32, 0, NULL, &sc, sizeof sc, e));
		ML_TRY(ml_graph_set_data(g, zi, ML_TK_CONST, ML_U8, 0, NULL, &zp, 1, e));
		const char *in[3] = { tn, sn, zn }, *out[1] = { yn };
		if ((ni = ml_graph_add_node(g, "FakeQuant", "ml", name, 3, in, 1, out, e)) < 0)
			return ni;
		if ((rc = ml_node_set_int(g, ni, "qmin", 0)) < 0 ||
		    (rc = ml_node_set_int(g, ni, "qmax", 255)) < 0)
			return ml_fail(e, rc, "out of memory");
	}
	if ((y = ml_graph_find(g, yn)) < 0)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	return y;
}

int
ml_quant_insert_fakequant(struct ml_graph *g, const struct ml_quant_qat_opts *o,
			  struct ml_err *e)
{
	struct mq_stat *st = NULL;
	int qmax = o != NULL && o->weight_qmax > 0 ? o->weight_qmax : 127;
	int rc = 0, n0, nt0;

	if (qmax > 32767)
		return ml_fail(e, ML_EINVAL, "weight qmax %d is too large", qmax);
	if ((rc = ml_graph_toposort(g, e)) < 0 || (rc = ml_graph_infer(g, e)) < 0)
		return rc;
	if (o != NULL && o->cal != NULL && o->cal->n_batches > 0) {
		struct ml_calib one = *o->cal;
		one.n_batches = 1;
		if ((rc = mlq_collect(g, &one, false, NULL, &st, e)) < 0)
			return rc;
	}
	n0 = g->n_nodes;
	nt0 = g->n_tensors;
	for (int i = 0; i < n0; i++) {
		enum ml_op op = g->nodes[i].op;
		if ((op != ML_OP_CONV && op != ML_OP_GEMM && op != ML_OP_MATMUL) ||
		    g->nodes[i].n_in < 2)
			continue;
		int a = g->nodes[i].in[0], w = g->nodes[i].in[1], axis = 0;
		const struct ml_tensor *wt = ml_graph_t(g, w);
		if ((wt->kind == ML_TK_CONST || wt->kind == ML_TK_PARAM) && wt->dtype == ML_F32 &&
		    wt->data != NULL && wt->rank >= 2) {
			if (op == ML_OP_GEMM)
				axis = ml_attr_int(&g->nodes[i], "transB", 0) ? 0 : 1;
			else if (op == ML_OP_MATMUL)
				axis = wt->rank - 1;
			ml_graph_t(g, w)->kind = ML_TK_PARAM;
			int y = fq_node(g, w, true, axis, qmax, NULL, e);
			if (y < 0) {
				rc = y;
				goto out;
			}
			g->nodes[i].in[1] = y;
		}
		const struct ml_tensor *at = ml_graph_t(g, a);
		if (st != NULL && a < nt0 && st[a].seen && !is_fq(g, a) &&
		    at->kind != ML_TK_CONST && at->kind != ML_TK_PARAM && at->dtype == ML_F32) {
			int y = fq_node(g, a, false, 0, 0, &st[a], e);
			if (y < 0) {
				rc = y;
				goto out;
			}
			g->nodes[i].in[0] = y;
		}
	}
	if ((rc = ml_graph_toposort(g, e)) < 0 || (rc = ml_graph_infer(g, e)) < 0)
		goto out;
	rc = 0;
out:
	ml_free(st);
	return rc;
}

/* mlq_qat_strip: see the declaration in quant.c. */
int mlq_qat_strip(const struct ml_graph *g, struct ml_graph **out, struct mq_stat **stp,
		 struct ml_err *e);

int
mlq_qat_strip(const struct ml_graph *g, struct ml_graph **out, struct mq_stat **stp,
	     struct ml_err *e)
{
	struct ml_graph *c = NULL, *c2 = NULL;
	struct mq_stat *st = NULL;
	int *rx = NULL, nr = 0, rc, nfq = 0;
	float *rlo = NULL, *rhi = NULL;

	*out = NULL;
	*stp = NULL;
	for (int i = 0; i < g->n_nodes; i++)
		nfq += g->nodes[i].op == ML_OP_FAKE_QUANT;
	if (nfq == 0)
		return 0;
	if ((rc = mlq_copy_graph(&c, g, e)) < 0)
		return rc;
	rx = ml_malloc(sizeof(int) * (size_t)nfq);
	rlo = ml_malloc(sizeof(float) * (size_t)nfq);
	rhi = ml_malloc(sizeof(float) * (size_t)nfq);
	if (rx == NULL || rlo == NULL || rhi == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	int keep = 0;
	for (int i = 0; i < c->n_nodes; i++) {
		struct ml_node *n = &c->nodes[i];
		if (n->op != ML_OP_FAKE_QUANT) {
			c->nodes[keep++] = *n;
			continue;
		}
		int x = n->in[0], y = n->out[0];
		const struct ml_tensor *s = n->n_in > 1 && n->in[1] >= 0 ? ml_graph_t(c, n->in[1]) : NULL;
		const struct ml_tensor *z = n->n_in > 2 && n->in[2] >= 0 ? ml_graph_t(c, n->in[2]) : NULL;
		if (s != NULL && s->data != NULL && s->dtype == ML_F32 && s->nbytes == sizeof(float) &&
		    (z == NULL || (z->data != NULL && z->nbytes == ml_dtype_size(z->dtype)))) {
			double sc = *(const float *)s->data, zp = z != NULL ? ml_get_f64(z->data, z->dtype, 0) : 0;
			rx[nr] = x;
			rlo[nr] = (float)(((double)ml_attr_int(n, "qmin", 0) - zp) * sc);
			rhi[nr] = (float)(((double)ml_attr_int(n, "qmax", 255) - zp) * sc);
			nr++;
		}
		bool is_out = false;
		for (int k = 0; k < c->n_outputs; k++)
			is_out |= c->outputs[k] == y;
		if (is_out) {
			/* keep the output's name: the FakeQuant becomes an Identity */
			n->op = ML_OP_IDENTITY;
			n->op_type = ml_graph_strdup(c, "Identity");
			n->domain = ml_graph_strdup(c, "");
			n->n_in = 1;
			n->n_attr = 0;
			c->nodes[keep++] = *n;
			continue;
		}
		for (int j = 0; j < c->n_nodes; j++)
			for (int k = 0; k < c->nodes[j].n_in; k++)
				if (c->nodes[j].in[k] == y)
					c->nodes[j].in[k] = x;
	}
	c->n_nodes = keep;
	if ((rc = ml_graph_toposort(c, e)) < 0 || (rc = mlq_copy_graph(&c2, c, e)) < 0)
		goto out;
	st = ml_calloc((size_t)c2->n_tensors + 1, sizeof *st);
	if (st == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int r = 0; r < nr; r++) {
		int t = ml_graph_find(c2, ml_graph_t(c, rx[r])->name);
		if (t < 0)
			continue;
		st[t].seen = true;
		st[t].min = rlo[r];
		st[t].max = rhi[r];
	}
	*out = c2;
	*stp = st;
	c2 = NULL;
	st = NULL;
	rc = 0;
out:
	ml_graph_free(c);
	ml_graph_free(c2);
	ml_free(st);
	ml_free(rx);
	ml_free(rlo);
	ml_free(rhi);
	return rc;
}
