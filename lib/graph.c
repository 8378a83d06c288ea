/*
 * graph.c: the graph IR: an arena that owns tensors, nodes, attributes and
 * names; name lookup by hash; building, topological order, validation and
 * whole-graph shape inference.
 */
#include "ml_impl.h"

/*
 * The arena is a chain of blocks; big requests get a block of their own.
 * Tensor data is not in the arena (it can be large and is allocated with
 * ml_malloc so the allocation cap applies), but is freed with the graph.
 */
struct ml_arena_blk {
	struct ml_arena_blk *next;
	size_t used, cap;
	max_align_t data[];
};

#define BLK_SIZE (64 * 1024)

void *
ml_graph_alloc(struct ml_graph *g, size_t n)
{
	struct ml_arena_blk *b = g->arena;

	n = (n + 15) & ~(size_t)15;
	if (b == NULL || b->cap - b->used < n) {
		size_t cap = n > BLK_SIZE / 4 ? n : BLK_SIZE;
		struct ml_arena_blk *nb = ml_malloc(sizeof *nb + cap);
		if (nb == NULL)
			return NULL;
		nb->used = 0;
		nb->cap = cap;
		if (cap == n && b != NULL) {
			/* a big block goes behind the current one, which keeps its free space */
			nb->next = b->next;
			b->next = nb;
		} else {
			nb->next = b;
			g->arena = nb;
		}
		b = nb;
	}
	void *p = (char *)b->data + b->used;
	b->used += n;
	memset(p, 0, n);
	return p;
}

char *
ml_graph_strndup(struct ml_graph *g, const char *s, size_t n)
{
	if (s == NULL && n > 0)
		return NULL;
	char *p = ml_graph_alloc(g, n + 1);
	if (p != NULL && n > 0)
		memcpy(p, s, n);
	return p;
}

char *
ml_graph_strdup(struct ml_graph *g, const char *s)
{
	return s == NULL ? NULL : ml_graph_strndup(g, s, strlen(s));
}

int
ml_graph_new(struct ml_graph **out, struct ml_err *e)
{
	struct ml_graph *g = ml_calloc(1, sizeof *g);
	if (g == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	*out = g;
	return 0;
}

static void
free_attr_graphs(struct ml_attr *a)
{
	if ((a->type == ML_ATTR_GRAPH || a->type == ML_ATTR_GRAPHS) && a->graphs != NULL)
		for (int k = 0; k < a->n; k++)
			ml_graph_free(a->graphs[k]);
}

void
ml_graph_free(struct ml_graph *g)
{
	if (g == NULL)
		return;
	for (int i = 0; i < g->n_nodes; i++)
		for (int j = 0; j < g->nodes[i].n_attr; j++)
			free_attr_graphs(&g->nodes[i].attrs[j]);
	for (int i = 0; i < g->n_tensors; i++)
		if (ml_graph_owns_data(g, g->tensors[i]))
			ml_free(g->tensors[i]->data);
	ml_free(g->blob);
	ml_free(g->tensors);
	ml_free(g->nodes);
	ml_free(g->hash);
	struct ml_arena_blk *b = g->arena;
	while (b != NULL) {
		struct ml_arena_blk *n = b->next;
		ml_free(b);
		b = n;
	}
	ml_free(g);
}

bool
ml_graph_owns_data(const struct ml_graph *g, const struct ml_tensor *t)
{
	const uint8_t *p = t->data;
	return p != NULL && !(g->blob != NULL && p >= g->blob && p < g->blob + g->blob_len);
}

static uint64_t
hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return h;
}

static int
rehash(struct ml_graph *g, int cap)
{
	int *h = ml_malloc(sizeof *h * (size_t)cap);
	if (h == NULL)
		return ML_ENOMEM;
	for (int i = 0; i < cap; i++)
		h[i] = -1;
	for (int i = 0; i < g->n_tensors; i++) {
		uint64_t k = hash_str(g->tensors[i]->name) & (uint64_t)(cap - 1);
		while (h[k] >= 0)
			k = (k + 1) & (uint64_t)(cap - 1);
		h[k] = i;
	}
	ml_free(g->hash);
	g->hash = h;
	g->hash_cap = cap;
	return 0;
}

int
ml_graph_find(const struct ml_graph *g, const char *name)
{
	if (g->hash_cap == 0 || name == NULL)
		return -1;
	uint64_t k = hash_str(name) & (uint64_t)(g->hash_cap - 1);
	while (g->hash[k] >= 0) {
		if (strcmp(g->tensors[g->hash[k]]->name, name) == 0)
			return g->hash[k];
		k = (k + 1) & (uint64_t)(g->hash_cap - 1);
	}
	return -1;
}

/*
 * Cloning. Everything the graph owns is copied into the clone's arena, and
 * the tensor data into one blob (as a graph read from a file holds it), so
 * the copy shares nothing with g and is freed by one ml_graph_free.
 */

/* dup_mem: a copy of n bytes at p in c's arena; NULL for NULL; *bad set on failure. */
static void *
dup_mem(struct ml_graph *c, const void *p, size_t n, bool *bad)
{
	if (p == NULL)
		return NULL;
	void *q = ml_graph_alloc(c, n > 0 ? n : 1);
	if (q == NULL)
		*bad = true;
	else if (n > 0)
		memcpy(q, p, n);
	return q;
}

/* dup_str: a copy of s in c's arena, as dup_mem. */
static char *
dup_str(struct ml_graph *c, const char *s, bool *bad)
{
	return s == NULL ? NULL : dup_mem(c, s, strlen(s) + 1, bad);
}

/*
 * dup_tensor: the fields of t into ct (in c's arena) except the data, which
 * the caller places; q, names, symbols and doc copied.
 */
static void
dup_tensor(struct ml_graph *c, const struct ml_tensor *t, struct ml_tensor *ct, bool *bad)
{
	*ct = *t;
	ct->name = dup_str(c, t->name, bad);
	ct->doc = dup_str(c, t->doc, bad);
	for (int i = 0; i < ML_MAX_RANK; i++)
		ct->sym[i] = dup_str(c, t->sym[i], bad);
	if (t->q != NULL) {
		struct ml_qparam *q = dup_mem(c, t->q, sizeof *t->q, bad);
		if (q != NULL) {
			q->scale = dup_mem(c, t->q->scale, sizeof(float) * (size_t)t->q->n, bad);
			q->zero = dup_mem(c, t->q->zero, sizeof(int32_t) * (size_t)t->q->n, bad);
		}
		ct->q = q;
	}
}

static int clone_into(struct ml_graph *c, const struct ml_graph *g, struct ml_err *e);

/* dup_attr: a deep copy of attribute a into ca; subgraphs cloned with c as their parent. */
static int
dup_attr(struct ml_graph *c, const struct ml_attr *a, struct ml_attr *ca, struct ml_err *e)
{
	bool bad = false;
	/* a TENSOR or GRAPH attribute holds one, whatever n says (as the encoder reads it) */
	int nt = a->type == ML_ATTR_TENSOR ? 1 : a->type == ML_ATTR_TENSORS ? a->n : 0;
	int ng = a->type == ML_ATTR_GRAPH ? 1 : a->type == ML_ATTR_GRAPHS ? a->n : 0;
	*ca = *a;
	ca->name = dup_str(c, a->name, &bad);
	ca->s = dup_mem(c, a->s, a->s_len + 1, &bad);
	ca->floats = dup_mem(c, a->floats, sizeof(double) * (size_t)a->n, &bad);
	ca->ints = dup_mem(c, a->ints, sizeof(int64_t) * (size_t)a->n, &bad);
	ca->strings = dup_mem(c, a->strings, sizeof(char *) * (size_t)a->n, &bad);
	for (int k = 0; ca->strings != NULL && k < a->n; k++)
		ca->strings[k] = dup_str(c, a->strings[k], &bad);
	ca->tensors = dup_mem(c, a->tensors, sizeof(struct ml_tensor *) * (size_t)nt, &bad);
	for (int k = 0; ca->tensors != NULL && k < nt; k++) {
		const struct ml_tensor *t = a->tensors[k];
		struct ml_tensor *ct = t != NULL ? ml_graph_alloc(c, sizeof *ct) : NULL;
		if (t != NULL && ct == NULL) {
			bad = true;
			break;
		}
		if (t != NULL) {
			dup_tensor(c, t, ct, &bad);
			ct->data = dup_mem(c, t->data, t->nbytes, &bad);
		}
		ca->tensors[k] = ct;
	}
	ca->graphs = NULL;
	if (a->graphs != NULL) {
		/* zeroed, so that ml_graph_free of c after a failure frees what was made */
		if ((ca->graphs = ml_graph_alloc(c, sizeof(struct ml_graph *) * (size_t)(ng + 1))) == NULL)
			bad = true;
		for (int k = 0; !bad && k < ng; k++) {
			if (a->graphs[k] == NULL)
				continue;
			ML_TRY(ml_graph_new(&ca->graphs[k], e));
			ca->graphs[k]->parent = c;
			ML_TRY(clone_into(ca->graphs[k], a->graphs[k], e));
		}
	}
	return bad ? ml_fail(e, ML_ENOMEM, "out of memory") : 0;
}

/* clone_into: g's contents into the empty graph c (whose parent is set). */
static int
clone_into(struct ml_graph *c, const struct ml_graph *g, struct ml_err *e)
{
	bool bad = false;
	c->name = dup_str(c, g->name, &bad);
	c->producer = dup_str(c, g->producer, &bad);
	c->ir_version = g->ir_version;
	c->arena_bytes = g->arena_bytes;
	c->n_meta = g->n_meta;
	c->meta = dup_mem(c, g->meta, sizeof *g->meta * (size_t)g->n_meta, &bad);
	for (int i = 0; c->meta != NULL && i < g->n_meta; i++) {
		c->meta[i].key = dup_str(c, g->meta[i].key, &bad);
		c->meta[i].value = dup_str(c, g->meta[i].value, &bad);
	}
	c->n_opsets = g->n_opsets;
	c->opset_version = dup_mem(c, g->opset_version, sizeof(int64_t) * (size_t)g->n_opsets, &bad);
	c->opset_domain = dup_mem(c, g->opset_domain, sizeof(char *) * (size_t)g->n_opsets, &bad);
	for (int i = 0; c->opset_domain != NULL && i < g->n_opsets; i++)
		c->opset_domain[i] = dup_str(c, g->opset_domain[i], &bad);
	c->n_inputs = g->n_inputs;
	c->inputs = dup_mem(c, g->inputs, sizeof(int) * (size_t)g->n_inputs, &bad);
	c->n_outputs = g->n_outputs;
	c->outputs = dup_mem(c, g->outputs, sizeof(int) * (size_t)g->n_outputs, &bad);
	if (g->train != NULL && (c->train = dup_mem(c, g->train, sizeof *g->train, &bad)) != NULL) {
		c->train->optimizer = dup_str(c, g->train->optimizer, &bad);
		c->train->config = dup_str(c, g->train->config, &bad);
		c->train->rng = dup_mem(c, g->train->rng, g->train->rng_len, &bad);
		c->train->slots = dup_mem(c, g->train->slots, sizeof(int) * (size_t)g->train->n_slots,
					  &bad);
		c->train->run = dup_mem(c, g->train->run, sizeof *g->train->run, &bad);
	}
	if (bad)
		return ml_fail(e, ML_ENOMEM, "out of memory");

	/* the tensors, their data in one 64-byte aligned blob */
	size_t blob = 0;
	for (int i = 0; i < g->n_tensors; i++)
		if (g->tensors[i]->data != NULL)
			blob += (g->tensors[i]->nbytes + 64) & ~(size_t)63;
	if (blob > 0 && (c->blob = ml_malloc(blob)) == NULL)
		return ml_fail(e, ML_ENOMEM, "cannot allocate %zu bytes of tensor data", blob);
	c->blob_len = blob;
	if (g->n_tensors > 0 &&
	    (c->tensors = ml_malloc(sizeof *c->tensors * (size_t)g->n_tensors)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	c->cap_tensors = g->n_tensors;
	size_t off = 0;
	for (int i = 0; i < g->n_tensors; i++) {
		const struct ml_tensor *t = g->tensors[i];
		struct ml_tensor *ct = ml_graph_alloc(c, sizeof *ct);
		if (ct == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		dup_tensor(c, t, ct, &bad);
		if (t->data != NULL) {
			ct->data = c->blob + off;
			memcpy(ct->data, t->data, t->nbytes);
			off += (t->nbytes + 64) & ~(size_t)63;
		}
		c->tensors[c->n_tensors++] = ct;
	}
	if (bad)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	int cap = 128;
	while (cap < 2 * (c->n_tensors + 1))
		cap *= 2;
	if (rehash(c, cap) < 0)
		return ml_fail(e, ML_ENOMEM, "out of memory");

	/* the nodes */
	if (g->n_nodes > 0 && (c->nodes = ml_malloc(sizeof *c->nodes * (size_t)g->n_nodes)) == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	c->cap_nodes = g->n_nodes;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		struct ml_node *cn = &c->nodes[i];
		*cn = *n;
		cn->n_attr = 0;
		cn->attrs = NULL;
		c->n_nodes = i + 1;
		cn->name = dup_str(c, n->name, &bad);
		cn->op_type = dup_str(c, n->op_type, &bad);
		cn->domain = dup_str(c, n->domain, &bad);
		/* one spare entry, as ml_graph_add_node allocates them */
		cn->in = ml_graph_alloc(c, sizeof(int) * (size_t)(n->n_in + 1));
		cn->out = ml_graph_alloc(c, sizeof(int) * (size_t)(n->n_out + 1));
		if (cn->in == NULL || cn->out == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		if (n->n_in > 0)
			memcpy(cn->in, n->in, sizeof(int) * (size_t)n->n_in);
		if (n->n_out > 0)
			memcpy(cn->out, n->out, sizeof(int) * (size_t)n->n_out);
		if (n->n_attr > 0 &&
		    (cn->attrs = ml_graph_alloc(c, sizeof *cn->attrs * (size_t)n->n_attr)) == NULL)
			bad = true;
		if (bad)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		for (int j = 0; j < n->n_attr; j++) {
			cn->n_attr = j + 1;
			ML_TRY(dup_attr(c, &n->attrs[j], &cn->attrs[j], e));
		}
	}
	return 0;
}

int
ml_graph_clone(struct ml_graph **out, const struct ml_graph *g, struct ml_err *e)
{
	struct ml_graph *c;
	*out = NULL;
	ML_TRY(ml_graph_new(&c, e));
	c->parent = g->parent;
	int rc = clone_into(c, g, e);
	if (rc < 0) {
		ml_graph_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int
ml_graph_tensor(struct ml_graph *g, const char *name)
{
	int i = ml_graph_find(g, name);
	if (i >= 0)
		return i;
	if (g->n_tensors == g->cap_tensors) {
		int cap = g->cap_tensors ? g->cap_tensors * 2 : 64;
		struct ml_tensor **t = ml_realloc(g->tensors, sizeof *t * (size_t)cap);
		if (t == NULL)
			return -1;
		g->tensors = t;
		g->cap_tensors = cap;
	}
	if ((g->n_tensors + 1) * 2 > g->hash_cap && rehash(g, g->hash_cap ? g->hash_cap * 2 : 128) < 0)
		return -1;
	struct ml_tensor *t = ml_graph_alloc(g, sizeof *t);
	if (t == NULL || (t->name = ml_graph_strdup(g, name)) == NULL)
		return -1;
	t->rank = -1;
	t->producer = -1;
	t->device = -1;
	t->arena_off = -1;
	i = g->n_tensors++;
	g->tensors[i] = t;
	uint64_t k = hash_str(name) & (uint64_t)(g->hash_cap - 1);
	while (g->hash[k] >= 0)
		k = (k + 1) & (uint64_t)(g->hash_cap - 1);
	g->hash[k] = i;
	return i;
}

int
ml_graph_set_data(struct ml_graph *g, int ti, enum ml_tkind kind, enum ml_dtype dt, int rank,
		  const int64_t *dims, const void *data, size_t nbytes, struct ml_err *e)
{
	struct ml_tensor *t = g->tensors[ti];
	struct ml_tval v = { .dtype = dt, .rank = rank };

	if (rank < 0 || rank > ML_MAX_RANK)
		return ml_fail(e, ML_EINVAL, "tensor '%s': rank %d is out of range", t->name, rank);
	for (int i = 0; i < rank; i++) {
		if (dims[i] < 0)
			return ml_fail(e, ML_EINVAL, "tensor '%s': negative dim", t->name);
		v.dims[i] = dims[i];
	}
	int64_t want = ml_tval_nbytes(&v);
	if (want < 0)
		return ml_fail(e, ML_EINVAL, "tensor '%s': size overflows", t->name);
	if (ml_dtype_size(dt) == 0)
		return ml_fail(e, ML_ENOTSUP, "tensor '%s': dtype %s is not supported", t->name,
			       ml_dtype_name(dt));
	if (data != NULL && (uint64_t)want != nbytes)
		return ml_fail(e, ML_EINVAL, "tensor '%s': %zu data bytes for shape needing %lld",
			       t->name, nbytes, (long long)want);
	void *p = ml_malloc(want > 0 ? (size_t)want : 1);
	if (p == NULL)
		return ml_fail(e, ML_ENOMEM, "tensor '%s': cannot allocate %lld bytes", t->name,
			       (long long)want);
	if (data != NULL)
		memcpy(p, data, (size_t)want);
	else
		memset(p, 0, want > 0 ? (size_t)want : 1);
	if (ml_graph_owns_data(g, t))
		ml_free(t->data);
	t->data = p;
	t->nbytes = (size_t)want;
	t->kind = kind;
	t->dtype = dt;
	t->rank = rank;
	for (int i = 0; i < rank; i++) {
		t->dims[i] = dims[i];
		t->sym[i] = NULL;
	}
	return 0;
}

int
ml_graph_add_node(struct ml_graph *g, const char *op_type, const char *domain, const char *name,
		  int n_in, const char *const *in, int n_out, const char *const *out,
		  struct ml_err *e)
{
	if (g->n_nodes == g->cap_nodes) {
		int cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
		struct ml_node *n = ml_realloc(g->nodes, sizeof *n * (size_t)cap);
		if (n == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		g->nodes = n;
		g->cap_nodes = cap;
	}
	if (n_in < 0 || n_out < 0 || n_in > 1 << 20 || n_out > 1 << 20)
		return ml_fail(e, ML_EINVAL, "node '%s': bad input or output count", name ? name : "");
	struct ml_node *n = &g->nodes[g->n_nodes];
	memset(n, 0, sizeof *n);
	if (domain == NULL || strcmp(domain, "ai.onnx") == 0)
		domain = "";
	n->op_type = ml_graph_strdup(g, op_type ? op_type : "");
	n->domain = ml_graph_strdup(g, domain);
	n->name = ml_graph_strdup(g, name ? name : "");
	n->op = ml_op_lookup(op_type ? op_type : "", domain);
	n->device = -1;
	n->n_in = n_in;
	n->n_out = n_out;
	n->in = ml_graph_alloc(g, sizeof(int) * (size_t)(n_in + 1));
	n->out = ml_graph_alloc(g, sizeof(int) * (size_t)(n_out + 1));
	if (n->op_type == NULL || n->domain == NULL || n->name == NULL || n->in == NULL || n->out == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < n_in; i++) {
		n->in[i] = -1;
		if (in[i] != NULL && in[i][0] != '\0' && (n->in[i] = ml_graph_tensor(g, in[i])) < 0)
			return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	for (int i = 0; i < n_out; i++) {
		n->out[i] = -1;
		if (out[i] != NULL && out[i][0] != '\0' && (n->out[i] = ml_graph_tensor(g, out[i])) < 0)
			return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	return g->n_nodes++;
}

/*
 * The input and output lists are small; they live outside the arena so
 * they can grow, and are freed with the tensors array below.
 */
int
ml_graph_add_input(struct ml_graph *g, int ti, struct ml_err *e)
{
	int *a = ml_graph_alloc(g, sizeof(int) * (size_t)(g->n_inputs + 1));
	if (a == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	if (g->n_inputs)
		memcpy(a, g->inputs, sizeof(int) * (size_t)g->n_inputs);
	a[g->n_inputs++] = ti;
	g->inputs = a;
	if (g->tensors[ti]->kind == ML_TK_ACT)
		g->tensors[ti]->kind = ML_TK_INPUT;
	return 0;
}

int
ml_graph_add_output(struct ml_graph *g, int ti, struct ml_err *e)
{
	int *a = ml_graph_alloc(g, sizeof(int) * (size_t)(g->n_outputs + 1));
	if (a == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	if (g->n_outputs)
		memcpy(a, g->outputs, sizeof(int) * (size_t)g->n_outputs);
	a[g->n_outputs++] = ti;
	g->outputs = a;
	return 0;
}

int
ml_graph_set_meta(struct ml_graph *g, const char *key, const char *value, struct ml_err *e)
{
	for (int i = 0; i < g->n_meta; i++) {
		if (strcmp(g->meta[i].key, key) == 0) {
			if ((g->meta[i].value = ml_graph_strdup(g, value)) == NULL)
				return ml_fail(e, ML_ENOMEM, "out of memory");
			return 0;
		}
	}
	struct ml_kv *m = ml_graph_alloc(g, sizeof *m * (size_t)(g->n_meta + 1));
	if (m == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	if (g->n_meta)
		memcpy(m, g->meta, sizeof *m * (size_t)g->n_meta);
	m[g->n_meta].key = ml_graph_strdup(g, key);
	m[g->n_meta].value = ml_graph_strdup(g, value);
	g->meta = m;
	g->n_meta++;
	return 0;
}

const char *
ml_graph_get_meta(const struct ml_graph *g, const char *key)
{
	for (int i = 0; i < g->n_meta; i++)
		if (strcmp(g->meta[i].key, key) == 0)
			return g->meta[i].value;
	return NULL;
}

int
ml_graph_set_opset(struct ml_graph *g, const char *domain, int64_t version, struct ml_err *e)
{
	if (domain == NULL || strcmp(domain, "ai.onnx") == 0)
		domain = "";
	for (int i = 0; i < g->n_opsets; i++) {
		if (strcmp(g->opset_domain[i], domain) == 0) {
			g->opset_version[i] = version;
			return 0;
		}
	}
	char **d = ml_graph_alloc(g, sizeof *d * (size_t)(g->n_opsets + 1));
	int64_t *v = ml_graph_alloc(g, sizeof *v * (size_t)(g->n_opsets + 1));
	if (d == NULL || v == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < g->n_opsets; i++) {
		d[i] = g->opset_domain[i];
		v[i] = g->opset_version[i];
	}
	d[g->n_opsets] = ml_graph_strdup(g, domain);
	v[g->n_opsets] = version;
	g->opset_domain = d;
	g->opset_version = v;
	g->n_opsets++;
	return 0;
}

int64_t
ml_graph_opset(const struct ml_graph *g, const char *domain, int64_t def)
{
	for (; g != NULL; g = g->parent)
		for (int i = 0; i < g->n_opsets; i++)
			if (strcmp(g->opset_domain[i], domain) == 0)
				return g->opset_version[i];
	return def;
}

struct ml_attr *
ml_node_add_attr(struct ml_graph *g, int ni, const char *name, enum ml_attr_type type)
{
	struct ml_node *n = &g->nodes[ni];
	struct ml_attr *a = ml_graph_alloc(g, sizeof *a * (size_t)(n->n_attr + 1));
	if (a == NULL)
		return NULL;
	if (n->n_attr)
		memcpy(a, n->attrs, sizeof *a * (size_t)n->n_attr);
	n->attrs = a;
	a = &n->attrs[n->n_attr++];
	a->name = ml_graph_strdup(g, name);
	a->type = type;
	return a->name == NULL ? NULL : a;
}

int
ml_node_set_int(struct ml_graph *g, int ni, const char *name, int64_t v)
{
	struct ml_attr *a = ml_node_add_attr(g, ni, name, ML_ATTR_INT);
	if (a == NULL)
		return ML_ENOMEM;
	a->i = v;
	return 0;
}

int
ml_node_set_float(struct ml_graph *g, int ni, const char *name, double v)
{
	struct ml_attr *a = ml_node_add_attr(g, ni, name, ML_ATTR_FLOAT);
	if (a == NULL)
		return ML_ENOMEM;
	a->f = v;
	return 0;
}

int
ml_node_set_string(struct ml_graph *g, int ni, const char *name, const char *v)
{
	struct ml_attr *a = ml_node_add_attr(g, ni, name, ML_ATTR_STRING);
	if (a == NULL || (a->s = ml_graph_strdup(g, v)) == NULL)
		return ML_ENOMEM;
	a->s_len = strlen(v);
	return 0;
}

int
ml_node_set_ints(struct ml_graph *g, int ni, const char *name, int n, const int64_t *v)
{
	struct ml_attr *a = ml_node_add_attr(g, ni, name, ML_ATTR_INTS);
	if (a == NULL || (a->ints = ml_graph_alloc(g, sizeof *v * (size_t)(n + 1))) == NULL)
		return ML_ENOMEM;
	a->n = n;
	if (n)
		memcpy(a->ints, v, sizeof *v * (size_t)n);
	return 0;
}

int
ml_node_set_floats(struct ml_graph *g, int ni, const char *name, int n, const double *v)
{
	struct ml_attr *a = ml_node_add_attr(g, ni, name, ML_ATTR_FLOATS);
	if (a == NULL || (a->floats = ml_graph_alloc(g, sizeof *v * (size_t)(n + 1))) == NULL)
		return ML_ENOMEM;
	a->n = n;
	if (n)
		memcpy(a->floats, v, sizeof *v * (size_t)n);
	return 0;
}

const struct ml_attr *
ml_attr_find(const struct ml_node *n, const char *name)
{
	for (int i = 0; i < n->n_attr; i++)
		if (strcmp(n->attrs[i].name, name) == 0)
			return &n->attrs[i];
	return NULL;
}

bool
ml_node_has_body(const struct ml_node *n)
{
	for (int a = 0; a < n->n_attr; a++)
		if (n->attrs[a].type == ML_ATTR_GRAPH || n->attrs[a].type == ML_ATTR_GRAPHS)
			return true;
	return false;
}

int64_t
ml_attr_int(const struct ml_node *n, const char *name, int64_t def)
{
	const struct ml_attr *a = ml_attr_find(n, name);
	if (a == NULL)
		return def;
	if (a->type == ML_ATTR_FLOAT) {
		/* a float out of int64's range (or NaN) has no C cast: saturate */
		if (isnan(a->f))
			return def;
		if (a->f >= 0x1p63)
			return INT64_MAX;
		if (a->f < -0x1p63)
			return INT64_MIN;
		return (int64_t)a->f;
	}
	return a->type == ML_ATTR_INT ? a->i : def;
}

double
ml_attr_float(const struct ml_node *n, const char *name, double def)
{
	const struct ml_attr *a = ml_attr_find(n, name);
	if (a == NULL)
		return def;
	if (a->type == ML_ATTR_INT)
		return (double)a->i;
	return a->type == ML_ATTR_FLOAT ? a->f : def;
}

const char *
ml_attr_str(const struct ml_node *n, const char *name, const char *def)
{
	const struct ml_attr *a = ml_attr_find(n, name);
	return a != NULL && a->type == ML_ATTR_STRING ? a->s : def;
}

int
ml_attr_ints(const struct ml_node *n, const char *name, const int64_t **v)
{
	const struct ml_attr *a = ml_attr_find(n, name);
	if (a == NULL || a->type != ML_ATTR_INTS)
		return -1;
	*v = a->ints;
	return a->n;
}

bool
ml_attr_ints_all(const struct ml_node *n, const char *name, int64_t v)
{
	const int64_t *a;
	int na = ml_attr_ints(n, name, &a);
	for (int i = 0; i < na; i++)
		if (a[i] != v)
			return false;
	return true;
}

int
ml_attr_floats(const struct ml_node *n, const char *name, const double **v)
{
	const struct ml_attr *a = ml_attr_find(n, name);
	if (a == NULL || a->type != ML_ATTR_FLOATS)
		return -1;
	*v = a->floats;
	return a->n;
}

/*
 * Topological sort by Kahn's algorithm over node indices, picking the
 * lowest ready index first, so an already valid order is kept.
 * Tensors are available when they are inputs, constants, or outputs of
 * placed nodes. Names an outer graph defines (subgraphs) count as given.
 */
static bool
defined_outside(const struct ml_graph *g, const char *name)
{
	for (const struct ml_graph *p = g->parent; p != NULL; p = p->parent)
		if (ml_graph_find(p, name) >= 0)
			return true;
	return false;
}

int
ml_graph_toposort(struct ml_graph *g, struct ml_err *e)
{
	int rc = 0, nn = g->n_nodes;
	int *prod = ml_malloc(sizeof(int) * (size_t)(g->n_tensors + 1));
	int *pending = ml_calloc((size_t)nn + 1, sizeof(int));
	int *order = ml_malloc(sizeof(int) * (size_t)(nn + 1));
	int *users_off = ml_calloc((size_t)g->n_tensors + 2, sizeof(int));
	int *users = NULL, *heap = ml_malloc(sizeof(int) * (size_t)(nn + 1)), nheap = 0;
	struct ml_node *sorted = NULL;

	if (prod == NULL || pending == NULL || order == NULL || users_off == NULL || heap == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < g->n_tensors; i++)
		prod[i] = -1;
	for (int i = 0; i < nn; i++) {
		for (int j = 0; j < g->nodes[i].n_out; j++) {
			int t = g->nodes[i].out[j];
			if (t < 0)
				continue;
			if (prod[t] >= 0 || g->tensors[t]->kind == ML_TK_INPUT ||
			    g->tensors[t]->kind == ML_TK_CONST || g->tensors[t]->kind == ML_TK_PARAM) {
				rc = ml_fail(e, ML_EINVAL, "tensor '%s' is written twice",
					     g->tensors[t]->name);
				goto out;
			}
			prod[t] = i;
		}
	}
	/* count, per node, the inputs produced by nodes; build user lists */
	int total = 0;
	for (int i = 0; i < nn; i++) {
		for (int j = 0; j < g->nodes[i].n_in; j++) {
			int t = g->nodes[i].in[j];
			if (t < 0)
				continue;
			if (prod[t] >= 0) {
				pending[i]++;
				users_off[t + 1]++;
				total++;
			} else if (g->tensors[t]->kind == ML_TK_ACT &&
				   !defined_outside(g, g->tensors[t]->name)) {
				rc = ml_fail(e, ML_EINVAL, "node '%s' (%s): input '%s' is never defined",
					     g->nodes[i].name, g->nodes[i].op_type, g->tensors[t]->name);
				goto out;
			}
		}
	}
	for (int t = 0; t < g->n_tensors; t++)
		users_off[t + 1] += users_off[t];
	users = ml_malloc(sizeof(int) * (size_t)(total + 1));
	int *fill = ml_calloc((size_t)g->n_tensors + 1, sizeof(int));
	if (users == NULL || fill == NULL) {
		ml_free(fill);
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < nn; i++)
		for (int j = 0; j < g->nodes[i].n_in; j++) {
			int t = g->nodes[i].in[j];
			if (t >= 0 && prod[t] >= 0)
				users[users_off[t] + fill[t]++] = i;
		}
	ml_free(fill);
	/* min-heap of ready nodes */
#define HPUSH(v) do { int k_ = nheap++; heap[k_] = (v); \
	while (k_ > 0 && heap[(k_ - 1) / 2] > heap[k_]) { int p_ = (k_ - 1) / 2, s_ = heap[p_]; \
	heap[p_] = heap[k_]; heap[k_] = s_; k_ = p_; } } while (0)
	/*
	 * Nodes without outputs (ml.Assign and the optimizer updates, which
	 * overwrite a stored tensor) wait in a list of their own and are
	 * placed after every other node, hence after every reader of what
	 * they overwrite; nothing can depend on them.
	 */
	int *late = ml_malloc(sizeof(int) * (size_t)(nn + 1)), nlate = 0;
	if (late == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < nn; i++)
		if (pending[i] == 0) {
			if (g->nodes[i].n_out == 0)
				late[nlate++] = i;
			else
				HPUSH(i);
		}
	int placed = 0;
	while (nheap > 0) {
		int v = heap[0];
		heap[0] = heap[--nheap];
		for (int k = 0;;) {
			int l = 2 * k + 1, r = l + 1, m = k;
			if (l < nheap && heap[l] < heap[m]) m = l;
			if (r < nheap && heap[r] < heap[m]) m = r;
			if (m == k) break;
			int s = heap[m]; heap[m] = heap[k]; heap[k] = s; k = m;
		}
		order[placed++] = v;
		for (int j = 0; j < g->nodes[v].n_out; j++) {
			int t = g->nodes[v].out[j];
			if (t < 0)
				continue;
			for (int u = users_off[t]; u < users_off[t + 1]; u++)
				if (--pending[users[u]] == 0) {
					if (g->nodes[users[u]].n_out == 0)
						late[nlate++] = users[u];
					else
						HPUSH(users[u]);
				}
		}
	}
	/* nothing waits on the late nodes: place them last, in index order */
	for (int i = 1; i < nlate; i++)
		for (int j = i; j > 0 && late[j - 1] > late[j]; j--) {
			int t = late[j]; late[j] = late[j - 1]; late[j - 1] = t;
		}
	for (int i = 0; i < nlate; i++)
		order[placed++] = late[i];
	ml_free(late);
#undef HPUSH
	if (placed != nn) {
		for (int i = 0; i < nn; i++)
			if (pending[i] > 0) {
				rc = ml_fail(e, ML_EINVAL, "the graph has a cycle through node '%s' (%s)",
					     g->nodes[i].name, g->nodes[i].op_type);
				goto out;
			}
	}
	sorted = ml_malloc(sizeof *sorted * (size_t)(g->cap_nodes ? g->cap_nodes : 1));
	if (sorted == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < nn; i++)
		sorted[i] = g->nodes[order[i]];
	ml_free(g->nodes);
	g->nodes = sorted;
	for (int t = 0; t < g->n_tensors; t++)
		g->tensors[t]->producer = -1;
	for (int i = 0; i < nn; i++)
		for (int j = 0; j < g->nodes[i].n_out; j++)
			if (g->nodes[i].out[j] >= 0)
				g->tensors[g->nodes[i].out[j]]->producer = i;
out:
	ml_free(prod);
	ml_free(pending);
	ml_free(order);
	ml_free(users_off);
	ml_free(users);
	ml_free(heap);
	return rc;
}

static bool
has_ctl(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; p != NULL && *p != '\0'; p++)
		if (*p < 0x20 || *p == 0x7f)
			return true;
	return false;
}

/*
 * check_names: no graph, node, op type, domain or attribute name of g or
 * its subgraphs holds a control character. Such names are the mark of a
 * damaged file, they break one-line diagnostics, and the graph file
 * reader refuses them, so no reader may let one through to a writer.
 */
static int
check_names(const struct ml_graph *g, int depth, struct ml_err *e)
{
	if (depth > 64)
		return ml_fail(e, ML_EINVAL, "subgraphs nest deeper than 64");
	if (has_ctl(g->name))
		return ml_fail(e, ML_EINVAL, "a graph name holds a control character");
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (has_ctl(n->name) || has_ctl(n->op_type) || has_ctl(n->domain))
			return ml_fail(e, ML_EINVAL, "a node's name, op type or domain holds a "
				       "control character");
		for (int j = 0; j < n->n_attr; j++) {
			const struct ml_attr *a = &n->attrs[j];
			if (has_ctl(a->name))
				return ml_fail(e, ML_EINVAL, "node '%s': an attribute name holds a "
					       "control character", n->name);
			if (a->type == ML_ATTR_GRAPH || a->type == ML_ATTR_GRAPHS)
				for (int k = 0; k < a->n; k++)
					ML_TRY(check_names(a->graphs[k], depth + 1, e));
		}
	}
	for (int i = 0; i < g->n_opsets; i++)
		if (has_ctl(g->opset_domain[i]))
			return ml_fail(e, ML_EINVAL, "an opset domain holds a control character");
	return 0;
}

int
ml_graph_validate(const struct ml_graph *g, struct ml_err *e)
{
	ML_TRY(check_names(g, 0, e));
	for (int i = 0; i < g->n_tensors; i++) {
		const struct ml_tensor *t = g->tensors[i];
		if (t->rank < -1 || t->rank > ML_MAX_RANK)
			return ml_fail(e, ML_EINVAL, "tensor '%s': rank %d is out of range", t->name,
				       t->rank);
		if ((unsigned)t->dtype >= ML_DTYPE_MAX)
			return ml_fail(e, ML_EINVAL, "tensor '%s': unknown dtype %d", t->name, t->dtype);
		bool known = true;
		for (int d = 0; d < t->rank; d++) {
			if (t->dims[d] < -1)
				return ml_fail(e, ML_EINVAL, "tensor '%s': dim %d is %lld", t->name, d,
					       (long long)t->dims[d]);
			known &= t->dims[d] >= 0;
		}
		/* a declared shape whose byte size overflows could never be allocated */
		if (known && t->rank >= 0) {
			struct ml_tval v;
			ml_graph_tval(g, i, &v);
			if (ml_tval_numel(&v) < 0 || ml_tval_nbytes(&v) < 0) {
				char buf[256];
				return ml_fail(e, ML_EINVAL, "tensor '%s': shape %s is too large", t->name,
					       ml_tval_shape_str(&v, buf, sizeof buf));
			}
		}
		if (t->kind == ML_TK_CONST || t->kind == ML_TK_PARAM) {
			struct ml_tval v;
			ml_graph_tval(g, i, &v);
			int64_t nb = ml_tval_nbytes(&v);
			if (t->data == NULL || nb < 0 || (uint64_t)nb != t->nbytes)
				return ml_fail(e, ML_EINVAL,
					       "tensor '%s': %zu data bytes do not match its shape",
					       t->name, t->nbytes);
		}
	}
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		for (int j = 0; j < n->n_in; j++)
			if (n->in[j] < -1 || n->in[j] >= g->n_tensors)
				return ml_fail(e, ML_EINVAL, "node '%s': bad input index", n->name);
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] < -1 || n->out[j] >= g->n_tensors)
				return ml_fail(e, ML_EINVAL, "node '%s': bad output index", n->name);
		const struct ml_opdef *d = n->op != ML_OP_NONE ? ml_opdef_get(n->op) : NULL;
		if (d == NULL)
			continue;
		if (n->n_in < d->min_in || (d->max_in >= 0 && n->n_in > d->max_in))
			return ml_fail(e, ML_EINVAL, "node '%s' (%s): %d inputs, expected %d to %d",
				       n->name, n->op_type, n->n_in, d->min_in, d->max_in);
		if (n->n_out < d->min_out || (d->max_out >= 0 && n->n_out > d->max_out))
			return ml_fail(e, ML_EINVAL, "node '%s' (%s): %d outputs, expected %d to %d",
				       n->name, n->op_type, n->n_out, d->min_out, d->max_out);
		for (int j = 0; j < d->min_in && j < n->n_in; j++)
			if (n->in[j] < 0)
				return ml_fail(e, ML_EINVAL, "node '%s' (%s): input %d is required",
					       n->name, n->op_type, j);
	}
	for (int i = 0; i < g->n_inputs; i++)
		if (g->inputs[i] < 0 || g->inputs[i] >= g->n_tensors)
			return ml_fail(e, ML_EINVAL, "bad graph input index");
	for (int i = 0; i < g->n_outputs; i++)
		if (g->outputs[i] < 0 || g->outputs[i] >= g->n_tensors)
			return ml_fail(e, ML_EINVAL, "bad graph output index");
	return 0;
}

void
ml_graph_tval(const struct ml_graph *g, int ti, struct ml_tval *out)
{
	const struct ml_tensor *t = g->tensors[ti];
	memset(out, 0, sizeof *out);
	out->dtype = t->dtype;
	out->rank = t->rank;
	for (int i = 0; i < t->rank && i < ML_MAX_RANK; i++)
		out->dims[i] = t->dims[i];
	out->data = t->data;
}

void
ml_graph_param_stats(const struct ml_graph *g, int64_t *count, int64_t *bytes)
{
	int64_t c = 0, b = 0;
	for (int i = 0; i < g->n_tensors; i++) {
		const struct ml_tensor *t = g->tensors[i];
		if (t->kind != ML_TK_CONST && t->kind != ML_TK_PARAM)
			continue;
		struct ml_tval v;
		ml_graph_tval(g, i, &v);
		int64_t n = ml_tval_numel(&v);
		if (n > 0)
			c += n;
		b += (int64_t)t->nbytes;
	}
	*count = c;
	*bytes = b;
}
