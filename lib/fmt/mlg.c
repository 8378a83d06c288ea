/*
 * mlg.c: the .mlg graph file: a 16-byte header (magic "MLG\0", u32
 * version, u32 flags, u32 reserved, little-endian) and one zstd frame
 * holding the protobuf ml.Graph of formats/mlg.proto. protobuf-c structs
 * never leave this file.
 */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#define ZSTD_STATIC_LINKING_ONLY	/* ZSTD_d_stableOutBuffer */
#include <zstd.h>

#include "ml_impl.h"
#include "mlg.pb-c.h"
#include "pbcheck.h"

#define HDR_LEN 16
#define ZSTD_LEVEL 3
#define MAX_DEPTH 32

static void
put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t
get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/*
 * Encoding builds protobuf-c structs that borrow the graph's strings and
 * data; everything the encoder allocates comes from one scratch list.
 */
struct scratch {
	struct ml_pbscratch a;
	/* the data blob: top-level tensors in order, and the running offset */
	const struct ml_tensor **bt;
	size_t nbt, capbt;
	uint64_t blob_len;
};

static void *
salloc(struct scratch *s, size_t n)
{
	return ml_pbscratch_alloc(&s->a, n);
}

static void
sfree(struct scratch *s)
{
	ml_pbscratch_free(&s->a);
	free(s->bt);
}

#define BLOB_ALIGN 64

static uint64_t
align_up(uint64_t v)
{
	return (v + BLOB_ALIGN - 1) / BLOB_ALIGN * BLOB_ALIGN;
}

static char *
str_or_empty(const char *s)
{
	return (char *)(s != NULL ? s : "");
}

static Ml__Tensor *
enc_tensor(struct scratch *s, const struct ml_tensor *t, bool in_blob)
{
	Ml__Tensor *m = salloc(s, sizeof *m);
	if (m == NULL)
		return NULL;
	ml__tensor__init(m);
	m->name = str_or_empty(t->name);
	m->dtype = t->dtype;
	m->rank = t->rank;
	if (t->rank > 0) {
		m->n_dims = (size_t)t->rank;
		m->dims = salloc(s, sizeof *m->dims * (size_t)t->rank);
		if (m->dims == NULL)
			return NULL;
		for (int d = 0; d < t->rank; d++) {
			Ml__Dim *dm = salloc(s, sizeof *dm);
			if (dm == NULL)
				return NULL;
			ml__dim__init(dm);
			dm->size = t->dims[d];
			dm->sym = str_or_empty(t->sym[d]);
			m->dims[d] = dm;
		}
	}
	m->kind = t->kind;
	if (t->data != NULL && in_blob && t->nbytes > 0) {
		if (s->nbt == s->capbt) {
			size_t cap = s->capbt ? s->capbt * 2 : 64;
			const struct ml_tensor **q = realloc(s->bt, cap * sizeof *q);
			if (q == NULL)
				return NULL;
			s->bt = q;
			s->capbt = cap;
		}
		s->bt[s->nbt++] = t;
		m->data_off = s->blob_len;
		m->data_len = t->nbytes;
		s->blob_len = align_up(s->blob_len + t->nbytes);
	} else if (t->data != NULL) {
		m->data.data = t->data;
		m->data.len = t->nbytes;
	}
	if (t->q != NULL) {
		Ml__QParam *q = salloc(s, sizeof *q);
		if (q == NULL)
			return NULL;
		ml__qparam__init(q);
		q->qtype = t->q->qtype;
		q->axis = t->q->axis;
		q->n_scale = q->n_zero = (size_t)t->q->n;
		q->scale = t->q->scale;
		q->zero = t->q->zero;
		m->q = q;
	}
	m->device = t->device;
	m->arena_off = t->arena_off;
	m->doc = str_or_empty(t->doc);
	return m;
}

static Ml__Graph *enc_graph(struct scratch *s, const struct ml_graph *g, int depth);

static Ml__Attr *
enc_attr(struct scratch *s, const struct ml_attr *a, int depth)
{
	Ml__Attr *m = salloc(s, sizeof *m);
	if (m == NULL)
		return NULL;
	ml__attr__init(m);
	m->name = str_or_empty(a->name);
	m->type = a->type;
	switch (a->type) {
	case ML_ATTR_FLOAT:
		m->f = a->f;
		m->f_negzero = a->f == 0 && signbit(a->f);
		break;
	case ML_ATTR_INT: m->i = a->i; break;
	case ML_ATTR_STRING:
		m->s.data = (uint8_t *)a->s;
		m->s.len = a->s_len;
		break;
	case ML_ATTR_FLOATS:
		m->n_floats = (size_t)a->n;
		m->floats = a->floats;
		break;
	case ML_ATTR_INTS:
		m->n_ints = (size_t)a->n;
		m->ints = a->ints;
		break;
	case ML_ATTR_STRINGS:
		m->n_strings = (size_t)a->n;
		m->strings = salloc(s, sizeof *m->strings * (size_t)(a->n + 1));
		if (m->strings == NULL)
			return NULL;
		for (int k = 0; k < a->n; k++) {
			m->strings[k].data = (uint8_t *)a->strings[k];
			m->strings[k].len = strlen(a->strings[k]);
		}
		break;
	case ML_ATTR_TENSOR:
	case ML_ATTR_TENSORS: {
		int n = a->type == ML_ATTR_TENSOR ? 1 : a->n;
		m->n_tensors = (size_t)n;
		m->tensors = salloc(s, sizeof *m->tensors * (size_t)(n + 1));
		if (m->tensors == NULL)
			return NULL;
		for (int k = 0; k < n; k++)
			if ((m->tensors[k] = enc_tensor(s, a->tensors[k], false)) == NULL)
				return NULL;
		break;
	}
	case ML_ATTR_GRAPH:
	case ML_ATTR_GRAPHS: {
		int n = a->type == ML_ATTR_GRAPH ? 1 : a->n;
		m->n_graphs = (size_t)n;
		m->graphs = salloc(s, sizeof *m->graphs * (size_t)(n + 1));
		if (m->graphs == NULL)
			return NULL;
		for (int k = 0; k < n; k++)
			if ((m->graphs[k] = enc_graph(s, a->graphs[k], depth + 1)) == NULL)
				return NULL;
		break;
	}
	default:
		break;
	}
	return m;
}

static char *
tname(const struct ml_graph *g, int i)
{
	return i < 0 ? "" : g->tensors[i]->name;
}

static Ml__Graph *
enc_graph(struct scratch *s, const struct ml_graph *g, int depth)
{
	if (depth > MAX_DEPTH)
		return NULL;
	Ml__Graph *m = salloc(s, sizeof *m);
	if (m == NULL)
		return NULL;
	ml__graph__init(m);
	m->name = str_or_empty(g->name);
	m->producer = str_or_empty(g->producer);
	m->n_tensors = (size_t)g->n_tensors;
	m->tensors = salloc(s, sizeof *m->tensors * (size_t)(g->n_tensors + 1));
	m->n_nodes = (size_t)g->n_nodes;
	m->nodes = salloc(s, sizeof *m->nodes * (size_t)(g->n_nodes + 1));
	m->n_inputs = (size_t)g->n_inputs;
	m->inputs = salloc(s, sizeof(char *) * (size_t)(g->n_inputs + 1));
	m->n_outputs = (size_t)g->n_outputs;
	m->outputs = salloc(s, sizeof(char *) * (size_t)(g->n_outputs + 1));
	m->n_meta = (size_t)g->n_meta;
	m->meta = salloc(s, sizeof *m->meta * (size_t)(g->n_meta + 1));
	m->n_opsets = (size_t)g->n_opsets;
	m->opsets = salloc(s, sizeof *m->opsets * (size_t)(g->n_opsets + 1));
	if (m->tensors == NULL || m->nodes == NULL || m->inputs == NULL || m->outputs == NULL ||
	    m->meta == NULL || m->opsets == NULL)
		return NULL;
	for (int i = 0; i < g->n_tensors; i++)
		if ((m->tensors[i] = enc_tensor(s, g->tensors[i], depth == 0)) == NULL)
			return NULL;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		Ml__Node *nm = salloc(s, sizeof *nm);
		if (nm == NULL)
			return NULL;
		ml__node__init(nm);
		nm->name = str_or_empty(n->name);
		nm->op = str_or_empty(n->op_type);
		nm->domain = str_or_empty(n->domain);
		nm->n_inputs = (size_t)n->n_in;
		nm->inputs = salloc(s, sizeof(char *) * (size_t)(n->n_in + 1));
		nm->n_outputs = (size_t)n->n_out;
		nm->outputs = salloc(s, sizeof(char *) * (size_t)(n->n_out + 1));
		nm->n_attrs = (size_t)n->n_attr;
		nm->attrs = salloc(s, sizeof *nm->attrs * (size_t)(n->n_attr + 1));
		if (nm->inputs == NULL || nm->outputs == NULL || nm->attrs == NULL)
			return NULL;
		for (int j = 0; j < n->n_in; j++)
			nm->inputs[j] = tname(g, n->in[j]);
		for (int j = 0; j < n->n_out; j++)
			nm->outputs[j] = tname(g, n->out[j]);
		for (int j = 0; j < n->n_attr; j++)
			if ((nm->attrs[j] = enc_attr(s, &n->attrs[j], depth)) == NULL)
				return NULL;
		nm->device = n->device;
		nm->cost_us = n->cost_us;
		m->nodes[i] = nm;
	}
	for (int i = 0; i < g->n_inputs; i++)
		m->inputs[i] = tname(g, g->inputs[i]);
	for (int i = 0; i < g->n_outputs; i++)
		m->outputs[i] = tname(g, g->outputs[i]);
	for (int i = 0; i < g->n_meta; i++) {
		Ml__KV *kv = salloc(s, sizeof *kv);
		if (kv == NULL)
			return NULL;
		ml__kv__init(kv);
		kv->key = str_or_empty(g->meta[i].key);
		kv->value = str_or_empty(g->meta[i].value);
		m->meta[i] = kv;
	}
	for (int i = 0; i < g->n_opsets; i++) {
		Ml__Opset *o = salloc(s, sizeof *o);
		if (o == NULL)
			return NULL;
		ml__opset__init(o);
		o->domain = str_or_empty(g->opset_domain[i]);
		o->version = g->opset_version[i];
		m->opsets[i] = o;
	}
	m->ir_version = g->ir_version;
	m->arena_bytes = g->arena_bytes;
	if (g->train != NULL) {
		Ml__TrainState *ts = salloc(s, sizeof *ts);
		if (ts == NULL)
			return NULL;
		ml__train_state__init(ts);
		ts->step = g->train->step;
		ts->epoch = g->train->epoch;
		ts->optimizer = str_or_empty(g->train->optimizer);
		ts->config = str_or_empty(g->train->config);
		ts->rng.data = g->train->rng;
		ts->rng.len = g->train->rng_len;
		ts->n_slots = (size_t)g->train->n_slots;
		ts->slots = salloc(s, sizeof(char *) * (size_t)(g->train->n_slots + 1));
		if (ts->slots == NULL)
			return NULL;
		for (int i = 0; i < g->train->n_slots; i++)
			ts->slots[i] = tname(g, g->train->slots[i]);
		if (g->train->run != NULL) {
			const struct ml_train_state *st = g->train->run;
			Ml__TrainRun *r = salloc(s, sizeof *r);
			if (r == NULL)
				return NULL;
			ml__train_run__init(r);
#define X(name, member, type) r->name = st->member;
#include "train/state.def"
#undef X
			ts->run = r;
		}
		m->train = ts;
	}
	return m;
}

static void
put_u64(uint8_t *p, uint64_t v)
{
	put_u32(p, (uint32_t)v);
	put_u32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t
get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* feed one piece of the frame content to the compressor */
static int
zfeed(ZSTD_CCtx *cc, ZSTD_outBuffer *ob, const void *p, size_t n, struct ml_err *e)
{
	ZSTD_inBuffer ib = { p, n, 0 };
	while (ib.pos < ib.size) {
		size_t r = ZSTD_compressStream2(cc, ob, &ib, ZSTD_e_continue);
		if (ZSTD_isError(r))
			return ml_fail(e, ML_EIO, "zstd: %s", ZSTD_getErrorName(r));
	}
	return 0;
}

int
ml_mlg_encode(const struct ml_graph *g, uint8_t **buf, size_t *len, struct ml_err *e)
{
	static const uint8_t zeros[BLOB_ALIGN];
	struct scratch s = { 0 };
	Ml__Graph *m = enc_graph(&s, g, 0);
	uint8_t *pb = NULL, *out = NULL;
	ZSTD_CCtx *cc = NULL;
	int rc = 0;

	if (m == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory encoding the graph");
		goto done;
	}
	size_t n = ml__graph__get_packed_size(m);
	if ((pb = ml_malloc(n + 8 + BLOB_ALIGN)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory encoding the graph");
		goto done;
	}
	put_u64(pb, n);
	ml__graph__pack(m, pb + 8);
	uint64_t head = align_up(8 + n);
	memset(pb + 8 + n, 0, head - 8 - n);
	uint64_t content = head + s.blob_len;
	size_t bound = ZSTD_compressBound((size_t)content);
	if ((out = ml_malloc(bound + HDR_LEN)) == NULL || (cc = ZSTD_createCCtx()) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory compressing the graph");
		goto done;
	}
	memcpy(out, "MLG", 4);
	put_u32(out + 4, ML_MLG_VERSION);
	put_u32(out + 8, 0);
	put_u32(out + 12, 0);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, ZSTD_LEVEL);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
	ZSTD_CCtx_setPledgedSrcSize(cc, content);
	ZSTD_outBuffer ob = { out + HDR_LEN, bound, 0 };
	if ((rc = zfeed(cc, &ob, pb, (size_t)head, e)) < 0)
		goto done;
	uint64_t pos = 0;
	for (size_t i = 0; i < s.nbt; i++) {
		const struct ml_tensor *t = s.bt[i];
		if ((rc = zfeed(cc, &ob, t->data, t->nbytes, e)) < 0)
			goto done;
		pos += t->nbytes;
		uint64_t pad = align_up(pos) - pos;
		if ((rc = zfeed(cc, &ob, zeros, (size_t)pad, e)) < 0)
			goto done;
		pos += pad;
	}
	ZSTD_inBuffer ib = { NULL, 0, 0 };
	for (;;) {
		size_t r = ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_end);
		if (ZSTD_isError(r)) {
			rc = ml_fail(e, ML_EIO, "zstd: %s", ZSTD_getErrorName(r));
			goto done;
		}
		if (r == 0)
			break;
	}
	*buf = out;
	*len = ob.pos + HDR_LEN;
	out = NULL;
done:
	ZSTD_freeCCtx(cc);
	ml_free(out);
	ml_free(pb);
	sfree(&s);
	return rc;
}

/*
 * Decoding: every string and array is copied into the graph arena, every
 * count is checked, and tensors are looked up by name.
 */
struct blobref;
static int dec_graph(struct ml_graph *g, const Ml__Graph *m, int depth,
		     const struct blobref *blob, struct ml_err *e);

/* the blob of the graph being decoded: bounds for Tensor.data_off/data_len */
struct blobref {
	uint8_t *p;
	uint64_t len;
};

static int
dec_tensor_fields(struct ml_graph *g, struct ml_tensor *t, const Ml__Tensor *m, bool arena_data,
		  const struct blobref *blob, struct ml_err *e)
{
	if (m->rank < -1 || m->rank > ML_MAX_RANK || (m->rank >= 0 && m->n_dims != (size_t)m->rank) ||
	    (m->rank < 0 && m->n_dims != 0))
		return ml_fail(e, ML_EFORMAT, "tensor '%s': bad rank %d", t->name, m->rank);
	if (m->dtype < 0 || m->dtype >= ML_DTYPE_MAX)
		return ml_fail(e, ML_EFORMAT, "tensor '%s': unknown dtype %d", t->name, m->dtype);
	if (m->kind < 0 || m->kind > ML_TK_PARAM)
		return ml_fail(e, ML_EFORMAT, "tensor '%s': unknown kind %d", t->name, m->kind);
	t->dtype = (enum ml_dtype)m->dtype;
	t->rank = m->rank;
	for (int d = 0; d < m->rank; d++) {
		if (m->dims[d]->size < -1)
			return ml_fail(e, ML_EFORMAT, "tensor '%s': bad dim", t->name);
		t->dims[d] = m->dims[d]->size;
		t->sym[d] = m->dims[d]->sym[0] ? ml_graph_strdup(g, m->dims[d]->sym) : NULL;
	}
	t->kind = (enum ml_tkind)m->kind;
	t->device = m->device;
	t->arena_off = m->arena_off;
	t->doc = m->doc[0] ? ml_graph_strdup(g, m->doc) : NULL;
	if (m->q != NULL) {
		const Ml__QParam *q = m->q;
		if (q->n_scale != q->n_zero || q->n_scale > (1u << 24))
			return ml_fail(e, ML_EFORMAT, "tensor '%s': bad quantization parameters",
				       t->name);
		t->q = ml_graph_alloc(g, sizeof *t->q);
		if (t->q == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		t->q->qtype = (enum ml_dtype)q->qtype;
		t->q->axis = q->axis;
		t->q->n = (int)q->n_scale;
		t->q->scale = ml_graph_alloc(g, sizeof(float) * (q->n_scale + 1));
		t->q->zero = ml_graph_alloc(g, sizeof(int32_t) * (q->n_zero + 1));
		if (t->q->scale == NULL || t->q->zero == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		/* protobuf-c leaves empty repeated fields NULL, and memcpy must not get NULL */
		if (q->n_scale > 0) {
			memcpy(t->q->scale, q->scale, sizeof(float) * q->n_scale);
			memcpy(t->q->zero, q->zero, sizeof(int32_t) * q->n_zero);
		}
	}
	if (m->data_len > 0) {
		struct ml_tval v = { .dtype = t->dtype, .rank = t->rank };
		for (int d = 0; d < t->rank; d++)
			v.dims[d] = t->dims[d];
		int64_t nb = ml_tval_nbytes(&v);
		if (blob == NULL || m->data.len > 0 || m->data_off > blob->len ||
		    m->data_len > blob->len - m->data_off || m->data_off % BLOB_ALIGN != 0)
			return ml_fail(e, ML_EFORMAT, "tensor '%s': data lies outside the file",
				       t->name);
		if (nb < 0 || (uint64_t)nb != m->data_len || ml_dtype_size(t->dtype) == 0)
			return ml_fail(e, ML_EFORMAT,
				       "tensor '%s': %llu data bytes do not match its shape", t->name,
				       (unsigned long long)m->data_len);
		t->data = blob->p + m->data_off;
		t->nbytes = (size_t)m->data_len;
	} else if (m->data.len > 0 || t->kind == ML_TK_CONST || t->kind == ML_TK_PARAM) {
		struct ml_tval v;
		memset(&v, 0, sizeof v);
		v.dtype = t->dtype;
		v.rank = t->rank;
		for (int d = 0; d < t->rank; d++)
			v.dims[d] = t->dims[d];
		int64_t nb = ml_tval_nbytes(&v);
		if (nb < 0 || (uint64_t)nb != m->data.len || ml_dtype_size(t->dtype) == 0)
			return ml_fail(e, ML_EFORMAT,
				       "tensor '%s': %zu data bytes do not match its shape", t->name,
				       m->data.len);
		void *p = arena_data ? ml_graph_alloc(g, m->data.len + 1) : ml_malloc(m->data.len + 1);
		if (p == NULL)
			return ml_fail(e, ML_ENOMEM, "tensor '%s': cannot allocate %zu bytes", t->name,
				       m->data.len);
		if (m->data.len > 0)
			memcpy(p, m->data.data, m->data.len);
		t->data = p;
		t->nbytes = m->data.len;
	}
	return 0;
}

static int
dec_attr(struct ml_graph *g, struct ml_attr *a, const Ml__Attr *m, int depth, struct ml_err *e)
{
	if (m->type < ML_ATTR_FLOAT || m->type > ML_ATTR_GRAPHS)
		return ml_fail(e, ML_EFORMAT, "attribute '%s': unknown type %d", m->name, m->type);
	a->type = (enum ml_attr_type)m->type;
	a->f = m->f_negzero ? -0.0 : m->f;
	a->i = m->i;
	switch (a->type) {
	case ML_ATTR_STRING:
		a->s = ml_graph_strndup(g, (const char *)m->s.data, m->s.len);
		a->s_len = m->s.len;
		if (a->s == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		break;
	case ML_ATTR_FLOATS:
		a->n = (int)m->n_floats;
		a->floats = ml_graph_alloc(g, sizeof(double) * (m->n_floats + 1));
		if (a->floats == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		if (m->n_floats > 0)
			memcpy(a->floats, m->floats, sizeof(double) * m->n_floats);
		break;
	case ML_ATTR_INTS:
		a->n = (int)m->n_ints;
		a->ints = ml_graph_alloc(g, sizeof(int64_t) * (m->n_ints + 1));
		if (a->ints == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		if (m->n_ints > 0)
			memcpy(a->ints, m->ints, sizeof(int64_t) * m->n_ints);
		break;
	case ML_ATTR_STRINGS:
		a->n = (int)m->n_strings;
		a->strings = ml_graph_alloc(g, sizeof(char *) * (m->n_strings + 1));
		if (a->strings == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		for (size_t k = 0; k < m->n_strings; k++)
			if ((a->strings[k] = ml_graph_strndup(g, (const char *)m->strings[k].data,
							      m->strings[k].len)) == NULL)
				return ml_fail(e, ML_ENOMEM, "out of memory");
		break;
	case ML_ATTR_TENSOR:
	case ML_ATTR_TENSORS:
		if (a->type == ML_ATTR_TENSOR && m->n_tensors != 1)
			return ml_fail(e, ML_EFORMAT, "attribute '%s': expected one tensor", m->name);
		a->n = (int)m->n_tensors;
		a->tensors = ml_graph_alloc(g, sizeof(struct ml_tensor *) * (m->n_tensors + 1));
		if (a->tensors == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		for (size_t k = 0; k < m->n_tensors; k++) {
			struct ml_tensor *t = ml_graph_alloc(g, sizeof *t);
			if (t == NULL || (t->name = ml_graph_strdup(g, m->tensors[k]->name)) == NULL)
				return ml_fail(e, ML_ENOMEM, "out of memory");
			t->producer = -1;
			ML_TRY(dec_tensor_fields(g, t, m->tensors[k], true, NULL, e));
			a->tensors[k] = t;
		}
		break;
	case ML_ATTR_GRAPH:
	case ML_ATTR_GRAPHS:
		if (a->type == ML_ATTR_GRAPH && m->n_graphs != 1)
			return ml_fail(e, ML_EFORMAT, "attribute '%s': expected one graph", m->name);
		a->n = (int)m->n_graphs;
		a->graphs = ml_graph_alloc(g, sizeof(struct ml_graph *) * (m->n_graphs + 1));
		if (a->graphs == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		for (size_t k = 0; k < m->n_graphs; k++) {
			ML_TRY(ml_graph_new(&a->graphs[k], e));
			a->graphs[k]->parent = g;
			ML_TRY(dec_graph(a->graphs[k], m->graphs[k], depth + 1, NULL, e));
		}
		break;
	default:
		break;
	}
	return 0;
}

static int
dec_graph(struct ml_graph *g, const Ml__Graph *m, int depth, const struct blobref *blob,
	  struct ml_err *e)
{
	if (depth > MAX_DEPTH)
		return ml_fail(e, ML_EFORMAT, "subgraphs nest deeper than %d", MAX_DEPTH);
	if (ml_pb_has_ctl(m->name))
		return ml_fail(e, ML_EFORMAT, "the graph name holds a control character");
	g->name = ml_graph_strdup(g, m->name);
	g->producer = ml_graph_strdup(g, m->producer);
	g->ir_version = m->ir_version;
	g->arena_bytes = m->arena_bytes;
	for (size_t i = 0; i < m->n_opsets; i++) {
		if (ml_pb_has_ctl(m->opsets[i]->domain))
			return ml_fail(e, ML_EFORMAT, "an opset domain holds a control character");
		ML_TRY(ml_graph_set_opset(g, m->opsets[i]->domain, m->opsets[i]->version, e));
	}
	for (size_t i = 0; i < m->n_meta; i++)
		ML_TRY(ml_graph_set_meta(g, m->meta[i]->key, m->meta[i]->value, e));
	for (size_t i = 0; i < m->n_tensors; i++) {
		const Ml__Tensor *tm = m->tensors[i];
		if (tm->name[0] == '\0')
			return ml_fail(e, ML_EFORMAT, "a tensor has no name");
		if (ml_graph_find(g, tm->name) >= 0)
			return ml_fail(e, ML_EFORMAT, "tensor '%s' appears twice", tm->name);
		int ti = ml_graph_tensor(g, tm->name);
		if (ti < 0)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		ML_TRY(dec_tensor_fields(g, g->tensors[ti], tm, false, blob, e));
	}
	for (size_t i = 0; i < m->n_nodes; i++) {
		const Ml__Node *nm = m->nodes[i];
		if (nm->n_inputs > (1u << 20) || nm->n_outputs > (1u << 20))
			return ml_fail(e, ML_EFORMAT, "node '%s': too many inputs", nm->name);
		if (ml_pb_has_ctl(nm->op) || ml_pb_has_ctl(nm->domain) || ml_pb_has_ctl(nm->name))
			return ml_fail(e, ML_EFORMAT,
				       "node '%s': its name, op type or domain holds a control character",
				       nm->name);
		for (size_t j = 0; j < nm->n_attrs; j++)
			if (ml_pb_has_ctl(nm->attrs[j]->name))
				return ml_fail(e, ML_EFORMAT,
					       "node '%s': an attribute name holds a control character",
					       nm->name);
		int ni = ml_graph_add_node(g, nm->op, nm->domain, nm->name, (int)nm->n_inputs,
					   (const char *const *)nm->inputs, (int)nm->n_outputs,
					   (const char *const *)nm->outputs, e);
		if (ni < 0)
			return ni;
		struct ml_node *n = &g->nodes[ni];
		n->device = nm->device;
		n->cost_us = nm->cost_us;
		if (nm->n_attrs > 0) {
			n->attrs = ml_graph_alloc(g, sizeof *n->attrs * nm->n_attrs);
			if (n->attrs == NULL)
				return ml_fail(e, ML_ENOMEM, "out of memory");
			for (size_t j = 0; j < nm->n_attrs; j++) {
				n->attrs[j].name = ml_graph_strdup(g, nm->attrs[j]->name);
				n->n_attr = (int)j + 1;
				ML_TRY(dec_attr(g, &n->attrs[j], nm->attrs[j], depth, e));
			}
		}
	}
	for (size_t i = 0; i < m->n_inputs; i++) {
		int ti = ml_graph_find(g, m->inputs[i]);
		if (ti < 0)
			return ml_fail(e, ML_EFORMAT, "graph input '%s' has no tensor", m->inputs[i]);
		ML_TRY(ml_graph_add_input(g, ti, e));
	}
	for (size_t i = 0; i < m->n_outputs; i++) {
		int ti = ml_graph_find(g, m->outputs[i]);
		if (ti < 0)
			return ml_fail(e, ML_EFORMAT, "graph output '%s' has no tensor", m->outputs[i]);
		ML_TRY(ml_graph_add_output(g, ti, e));
	}
	if (m->train != NULL) {
		const Ml__TrainState *ts = m->train;
		struct ml_train *t = ml_graph_alloc(g, sizeof *t);
		if (t == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		t->step = ts->step;
		t->epoch = ts->epoch;
		t->optimizer = ml_graph_strdup(g, ts->optimizer);
		t->config = ml_graph_strdup(g, ts->config);
		if (ts->rng.len > 0) {
			t->rng = ml_graph_alloc(g, ts->rng.len);
			if (t->rng == NULL)
				return ml_fail(e, ML_ENOMEM, "out of memory");
			memcpy(t->rng, ts->rng.data, ts->rng.len);
			t->rng_len = ts->rng.len;
		}
		t->slots = ml_graph_alloc(g, sizeof(int) * (ts->n_slots + 1));
		if (t->slots == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		for (size_t i = 0; i < ts->n_slots; i++) {
			int ti = ml_graph_find(g, ts->slots[i]);
			if (ti < 0)
				return ml_fail(e, ML_EFORMAT, "training slot '%s' has no tensor",
					       ts->slots[i]);
			t->slots[t->n_slots++] = ti;
		}
		if (ts->run != NULL) {
			const Ml__TrainRun *r = ts->run;
			if ((t->run = ml_graph_alloc(g, sizeof *t->run)) == NULL)
				return ml_fail(e, ML_ENOMEM, "out of memory");
			memset(t->run, 0, sizeof *t->run);
#define X(name, member, type) t->run->member = r->name;
#include "train/state.def"
#undef X
		}
		g->train = t;
	}
	return 0;
}

/*
 * decode_content: raw is the whole frame content (ml_malloc'd, raw_len
 * bytes); on success the graph takes it over as its blob.
 */
static int
decode_content(struct ml_graph **out, uint8_t *raw, size_t raw_len, struct ml_err *e)
{
	bool nomem = false;
	ProtobufCAllocator pa = ml_pb_allocator(&nomem);
	struct ml_graph *g = NULL;
	Ml__Graph *m = NULL;
	int rc;

	if (raw_len < 8) {
		ml_free(raw);
		return ml_fail(e, ML_EFORMAT, "graph content is truncated");
	}
	uint64_t mlen = get_u64(raw);
	if (mlen > raw_len - 8) {
		ml_free(raw);
		return ml_fail(e, ML_EFORMAT, "graph message length %llu exceeds the file",
			       (unsigned long long)mlen);
	}
	uint64_t head = align_up(8 + mlen);
	struct blobref blob = { raw + ML_MIN(head, raw_len), head <= raw_len ? raw_len - head : 0 };
	if ((rc = ml_pb_check_nesting(raw + 8, (size_t)mlen, &ml__graph__descriptor, e)) < 0)
		goto fail;
	m = ml__graph__unpack(&pa, (size_t)mlen, raw + 8);
	if (m == NULL) {
		rc = nomem ? ml_fail(e, ML_ENOMEM, "out of memory reading the graph message")
			   : ml_fail(e, ML_EFORMAT, "corrupt graph message");
		goto fail;
	}
	if ((rc = ml_graph_new(&g, e)) < 0)
		goto fail;
	g->blob = raw;
	g->blob_len = raw_len;
	raw = NULL;
	if ((rc = dec_graph(g, m, 0, &blob, e)) < 0)
		goto fail;
	ml__graph__free_unpacked(m, &pa);
	*out = g;
	return 0;
fail:
	if (m != NULL)
		ml__graph__free_unpacked(m, &pa);
	ml_graph_free(g);
	ml_free(raw);
	return rc;
}

static int
check_header(const uint8_t *buf, size_t len, struct ml_err *e)
{
	if (len < 4 || memcmp(buf, "MLG", 4) != 0)
		return ml_fail(e, ML_EFORMAT, "not an mlg file (bad magic)");
	if (len < HDR_LEN)
		return ml_fail(e, ML_EFORMAT, "truncated mlg header (%zu bytes)", len);
	uint32_t version = get_u32(buf + 4);
	if (version > ML_MLG_VERSION)
		return ml_fail(e, ML_EFORMAT,
			       "graph file version %u is newer than %u; upgrade the ml tools", version,
			       ML_MLG_VERSION);
	if (version == 0)
		return ml_fail(e, ML_EFORMAT, "bad graph file version 0");
	return 0;
}

/*
 * content_size: the frame's content size from its header. frame_len is the
 * whole frame's compressed size when known (0 when not, as on a pipe): a
 * zstd block holds at most 128 KiB and takes at least 3 bytes, so a frame
 * claiming more than that bound is corrupt, whatever the allocation cap.
 */
static int
content_size(const uint8_t *z, size_t zlen, uint64_t frame_len, uint64_t *out, struct ml_err *e)
{
	unsigned long long raw_len = ZSTD_getFrameContentSize(z, zlen);
	if (raw_len == ZSTD_CONTENTSIZE_ERROR || raw_len == ZSTD_CONTENTSIZE_UNKNOWN)
		return ml_fail(e, ML_EFORMAT, "corrupt or truncated zstd frame");
	if (frame_len > 0 && raw_len / ZSTD_BLOCKSIZE_MAX > frame_len / 3 + 1)
		return ml_fail(e, ML_EFORMAT,
			       "corrupt zstd frame: it claims %llu bytes, more than %llu compressed "
			       "bytes can hold", raw_len, (unsigned long long)frame_len);
	if (raw_len > ml_alloc_cap() || raw_len > SIZE_MAX - 1)
		return ml_fail(e, ML_ENOMEM, "graph of %llu bytes exceeds the allocation cap",
			       raw_len);
	*out = raw_len;
	return 0;
}

int
ml_mlg_decode(struct ml_graph **out, const uint8_t *buf, size_t len, struct ml_err *e)
{
	uint64_t raw_len;
	uint8_t *raw;

	*out = NULL;
	ML_TRY(check_header(buf, len, e));
	const uint8_t *z = buf + HDR_LEN;
	size_t zlen = len - HDR_LEN;
	ML_TRY(content_size(z, zlen, zlen, &raw_len, e));
	size_t flen = ZSTD_findFrameCompressedSize(z, zlen);
	if (ZSTD_isError(flen))
		return ml_fail(e, ML_EFORMAT, "corrupt or truncated zstd frame: %s",
			       ZSTD_getErrorName(flen));
	if (flen != zlen)
		return ml_fail(e, ML_EFORMAT, "%zu bytes of trailing garbage after the zstd frame",
			       zlen - flen);
	if ((raw = ml_malloc((size_t)raw_len + 1)) == NULL)
		return ml_fail(e, ML_ENOMEM, "cannot allocate %llu bytes",
			       (unsigned long long)raw_len);
	size_t got = ZSTD_decompress(raw, (size_t)raw_len, z, zlen);
	if (ZSTD_isError(got) || got != raw_len) {
		ml_free(raw);
		return ml_fail(e, ML_EFORMAT, "corrupt zstd frame: %s",
			       ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size");
	}
	return decode_content(out, raw, (size_t)raw_len, e);
}

/*
 * ml_mlg_read_fd: decode a graph file from fd, whose first head_len bytes
 * (at least the 16-byte header) the caller has already read into head.
 * Decompresses as it reads, so the weights are in memory once.
 */
int
ml_mlg_read_fd(struct ml_graph **out, int fd, const uint8_t *head, size_t head_len,
	       struct ml_err *e)
{
	enum { CHUNK = 1 << 17 };
	uint8_t *in = NULL, *raw = NULL;
	ZSTD_DCtx *dc = NULL;
	uint64_t raw_len = 0;
	size_t have = 0;
	int rc = 0;

	*out = NULL;
	ML_TRY(check_header(head, head_len, e));
	if ((in = ml_malloc(CHUNK)) == NULL || (dc = ZSTD_createDCtx()) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto done;
	}
	have = head_len - HDR_LEN;
	memcpy(in, head + HDR_LEN, have);
	/* the zstd frame header, up to 18 bytes, gives the content size */
	while (have < 18) {
		ssize_t k = read(fd, in + have, CHUNK - have);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			rc = ml_fail(e, ML_EIO, "read error: %s", strerror(errno));
			goto done;
		}
		if (k == 0)
			break;
		have += (size_t)k;
	}
	/* a file's size bounds the frame; a pipe's is unknown */
	struct stat st;
	uint64_t flen = 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > HDR_LEN)
		flen = (uint64_t)st.st_size - HDR_LEN;
	if ((rc = content_size(in, have, flen, &raw_len, e)) < 0)
		goto done;
	if ((raw = ml_malloc((size_t)raw_len + 1)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "cannot allocate %llu bytes", (unsigned long long)raw_len);
		goto done;
	}
	/*
	 * The output buffer holds the whole content and never moves, so zstd
	 * can use it as its window instead of allocating one of its own.
	 */
	ZSTD_DCtx_setParameter(dc, ZSTD_d_stableOutBuffer, 1);
	ZSTD_outBuffer ob = { raw, (size_t)raw_len, 0 };
	size_t r = 1;
	bool eof = false;
	while (r != 0) {
		ZSTD_inBuffer ib = { in, have, 0 };
		r = ZSTD_decompressStream(dc, &ob, &ib);
		if (ZSTD_isError(r)) {
			rc = ml_fail(e, ML_EFORMAT, "corrupt zstd frame: %s", ZSTD_getErrorName(r));
			goto done;
		}
		memmove(in, in + ib.pos, have - ib.pos);
		have -= ib.pos;
		if (r == 0)
			break;
		if (ob.pos == ob.size && have == 0 && eof) {
			rc = ml_fail(e, ML_EFORMAT, "corrupt zstd frame");
			goto done;
		}
		if (eof && ib.pos == 0) {
			rc = ml_fail(e, ML_EFORMAT, "truncated zstd frame");
			goto done;
		}
		ssize_t k = read(fd, in + have, CHUNK - have);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			rc = ml_fail(e, ML_EIO, "read error: %s", strerror(errno));
			goto done;
		}
		if (k == 0)
			eof = true;
		have += (size_t)k;
	}
	if (ob.pos != raw_len) {
		rc = ml_fail(e, ML_EFORMAT, "zstd frame content is shorter than its header says");
		goto done;
	}
	/* anything after the frame is an error, as for in-memory decoding */
	for (;;) {
		uint8_t extra[64];
		if (have > 0) {
			rc = ml_fail(e, ML_EFORMAT, "trailing garbage after the zstd frame");
			goto done;
		}
		ssize_t k = read(fd, extra, sizeof extra);
		if (k < 0 && errno == EINTR)
			continue;
		if (k > 0) {
			rc = ml_fail(e, ML_EFORMAT, "trailing garbage after the zstd frame");
			goto done;
		}
		break;
	}
	rc = decode_content(out, raw, (size_t)raw_len, e);
	raw = NULL;
done:
	ZSTD_freeDCtx(dc);
	ml_free(in);
	ml_free(raw);
	return rc;
}
