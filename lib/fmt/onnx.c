/*
 * onnx.c: ONNX import and export: an onnx.ModelProto (through the protoc-c
 * code generated from the system's onnx.proto) to a struct ml_graph and
 * back. Tensor data, typed fields, external data files, every attribute
 * kind and nested subgraphs are handled; protobuf-c structs never leave
 * this file.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmt/onnx_func.h"

/*
 * ONNX stores raw_data and external data little-endian; the decoder and
 * encoder copy bytes as they are, which is only right on such a host.
 */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lib/fmt/onnx.c assumes a little-endian host"
#endif

#define MAX_DEPTH 32
#define DEFAULT_OPSET 17
#define DEFAULT_IR 8
/* IR 8 is the first with model-local functions. */
#define FUNC_IR 8
/* IR 4 is the first that lets initializers stay out of the graph inputs. */
#define MIN_IR 4

static const char *
nz(const char *s)
{
	return s != NULL ? s : "";
}

/*
 * Decoding.
 */
struct dec {
	const char *dir;	/* folder of external data files, NULL: none allowed */
	struct ml_err *e;
	/* the model's functions, all of them ones ml_onnx_func_call writes */
	Onnx__FunctionProto **funcs;
	size_t n_funcs;
};

static int dec_graph(struct dec *d, struct ml_graph *g, Onnx__GraphProto *gp, int depth);

/* dec_dtype: an ONNX elem_type as a dtype the library can hold data of. */
static int
dec_dtype(struct dec *d, int32_t v, const char *name, enum ml_dtype *out)
{
	if (v == ML_STRING)
		return ml_fail(d->e, ML_ENOTSUP, "tensor '%s': string tensors are not supported",
			       name);
	if (v <= ML_UNDEF || v >= ML_DTYPE_MAX || ml_dtype_size((enum ml_dtype)v) == 0)
		return ml_fail(d->e, v > 0 && v < 64 ? ML_ENOTSUP : ML_EFORMAT,
			       "tensor '%s': unknown or unsupported data type %d", name, (int)v);
	*out = (enum ml_dtype)v;
	return 0;
}

/* dec_dims: the dims of a TensorProto, checked, and their element count. */
static int
dec_dims(struct dec *d, const Onnx__TensorProto *tp, const char *name, int64_t *dims,
	 int *rank, int64_t *numel)
{
	int64_t n = 1;

	if (tp->n_dims > ML_MAX_RANK)
		return ml_fail(d->e, ML_EINVAL, "tensor '%s': rank %zu exceeds the maximum of %d",
			       name, tp->n_dims, ML_MAX_RANK);
	for (size_t i = 0; i < tp->n_dims; i++) {
		if (tp->dims[i] < 0)
			return ml_fail(d->e, ML_EFORMAT, "tensor '%s': dim %zu is negative (%lld)",
				       name, i, (long long)tp->dims[i]);
		if (!ml_mul_ok(n, tp->dims[i], &n))
			return ml_fail(d->e, ML_EFORMAT, "tensor '%s': element count overflows",
				       name);
		dims[i] = tp->dims[i];
	}
	*rank = (int)tp->n_dims;
	*numel = n;
	return 0;
}

/* parse_u64: a whole non-negative decimal number. */
static bool
parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (s == NULL || *s == '\0')
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return true;
}

/*
 * safe_relpath: whether loc names a file under the model's folder: not
 * absolute, no ".." component. (Symbolic links inside the folder are the
 * folder owner's business, as for the model file itself.)
 */
static bool
safe_relpath(const char *loc)
{
	if (loc[0] == '\0' || loc[0] == '/')
		return false;
	for (const char *p = loc; *p;) {
		const char *q = strchr(p, '/');
		size_t n = q != NULL ? (size_t)(q - p) : strlen(p);
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return false;
		p += n;
		if (*p == '/')
			p++;
	}
	return true;
}

/*
 * dec_external: read nbytes of tensor data from the external file the
 * tensor's external_data entries name (location, offset, length).
 */
static int
dec_external(struct dec *d, const Onnx__TensorProto *tp, const char *name, uint8_t *dst,
	     size_t nbytes)
{
	const char *loc = NULL;
	uint64_t off = 0, len = nbytes;

	for (size_t i = 0; i < tp->n_external_data; i++) {
		const Onnx__StringStringEntryProto *kv = tp->external_data[i];
		const char *k = nz(kv->key);
		if (strcmp(k, "location") == 0) {
			loc = nz(kv->value);
		} else if (strcmp(k, "offset") == 0) {
			if (!parse_u64(kv->value, &off))
				return ml_fail(d->e, ML_EFORMAT, "tensor '%s': bad external offset '%s'",
					       name, nz(kv->value));
		} else if (strcmp(k, "length") == 0) {
			if (!parse_u64(kv->value, &len))
				return ml_fail(d->e, ML_EFORMAT, "tensor '%s': bad external length '%s'",
					       name, nz(kv->value));
		}
	}
	if (loc == NULL)
		return ml_fail(d->e, ML_EFORMAT, "tensor '%s': external data without a location",
			       name);
	if (!safe_relpath(loc))
		return ml_fail(d->e, ML_EFORMAT,
			       "tensor '%s': external data location '%s' is outside the model's folder",
			       name, loc);
	if (d->dir == NULL)
		return ml_fail(d->e, ML_EINVAL,
			       "tensor '%s': external data '%s' needs the model's folder", name, loc);
	if (len != nbytes)
		return ml_fail(d->e, ML_EFORMAT,
			       "tensor '%s': external length %llu does not match "
			       "the %zu bytes of its shape",
			       name, (unsigned long long)len, nbytes);
	size_t plen = strlen(d->dir) + strlen(loc) + 2;
	char *path = malloc(plen);
	if (path == NULL)
		return ml_fail(d->e, ML_ENOMEM, "out of memory");
	snprintf(path, plen, "%s/%s", d->dir, loc);
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
	struct stat st;
	if (fd < 0) {
		rc = ml_fail(d->e, errno == ENOENT ? ML_EINVAL : ML_EIO,
			     "tensor '%s': cannot open external data '%s': %s", name, path,
			     strerror(errno));
		goto out;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = ml_fail(d->e, ML_EINVAL, "tensor '%s': external data '%s' is not a regular file",
			     name, path);
		goto out;
	}
	if (off > (uint64_t)st.st_size || len > (uint64_t)st.st_size - off) {
		rc = ml_fail(d->e, ML_EFORMAT,
			     "tensor '%s': external data '%s' holds %lld bytes, "
			     "too few for offset %llu and length %llu",
			     name, path, (long long)st.st_size, (unsigned long long)off,
			     (unsigned long long)len);
		goto out;
	}
	for (size_t done = 0; done < nbytes;) {
		ssize_t k = pread(fd, dst + done, nbytes - done, (off_t)(off + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			rc = ml_fail(d->e, ML_EIO, "tensor '%s': cannot read external data '%s': %s",
				     name, path, k < 0 ? strerror(errno) : "unexpected end of file");
			goto out;
		}
		done += (size_t)k;
	}
out:
	if (fd >= 0)
		close(fd);
	free(path);
	return rc;
}

/*
 * dec_typed: copy the typed repeated field that ONNX uses for dtype dt into
 * dst. Narrow integer types, bool, f16 and bf16 travel in int32_data (f16
 * and bf16 as their bit patterns); u32 and u64 in uint64_data; complex
 * numbers as pairs of floats or doubles.
 */
static int
dec_typed(struct dec *d, const Onnx__TensorProto *tp, const char *name, enum ml_dtype dt,
	  int64_t numel, uint8_t *dst)
{
	size_t have, want = (size_t)numel * (dt == ML_C64 || dt == ML_C128 ? 2 : 1);
	const char *field;

	switch (dt) {
	case ML_F32: case ML_C64: have = tp->n_float_data; field = "float_data"; break;
	case ML_F64: case ML_C128: have = tp->n_double_data; field = "double_data"; break;
	case ML_I64: have = tp->n_int64_data; field = "int64_data"; break;
	case ML_U32: case ML_U64: have = tp->n_uint64_data; field = "uint64_data"; break;
	default: have = tp->n_int32_data; field = "int32_data"; break;
	}
	if (have != want)
		return ml_fail(d->e, ML_EFORMAT,
			       "tensor '%s': %zu values in %s for a shape of %lld elements", name,
			       have, field, (long long)numel);
	if (want == 0)
		return 0;
	switch (dt) {
	case ML_F32: case ML_C64:
		memcpy(dst, tp->float_data, want * sizeof(float));
		break;
	case ML_F64: case ML_C128:
		memcpy(dst, tp->double_data, want * sizeof(double));
		break;
	case ML_I64:
		memcpy(dst, tp->int64_data, want * sizeof(int64_t));
		break;
	case ML_U64:
		memcpy(dst, tp->uint64_data, want * sizeof(uint64_t));
		break;
	case ML_U32:
		for (size_t i = 0; i < want; i++) {
			uint32_t v = (uint32_t)tp->uint64_data[i];
			memcpy(dst + 4 * i, &v, 4);
		}
		break;
	case ML_I32:
		memcpy(dst, tp->int32_data, want * sizeof(int32_t));
		break;
	case ML_I16: case ML_U16: case ML_F16: case ML_BF16:
		for (size_t i = 0; i < want; i++) {
			uint16_t v = (uint16_t)tp->int32_data[i];
			memcpy(dst + 2 * i, &v, 2);
		}
		break;
	case ML_BOOL:
		for (size_t i = 0; i < want; i++)
			dst[i] = tp->int32_data[i] != 0;
		break;
	default:	/* I8, U8 */
		for (size_t i = 0; i < want; i++)
			dst[i] = (uint8_t)tp->int32_data[i];
		break;
	}
	return 0;
}

/*
 * dec_tensor: the dtype, shape and data of a TensorProto. *data is nbytes
 * long (at least 1 byte), from ml_malloc when arena is NULL, else from that
 * graph's arena. Large raw_data buffers are taken over from the unpacked
 * message instead of copied, which is why tp is not const.
 */
static int
dec_tensor(struct dec *d, Onnx__TensorProto *tp, const char *name, struct ml_graph *arena,
	   enum ml_dtype *dt, int *rank, int64_t *dims, void **data, size_t *nbytes)
{
	int64_t numel = 0;

	if (tp->segment != NULL)
		return ml_fail(d->e, ML_ENOTSUP, "tensor '%s': segmented tensors are not supported",
			       name);
	if (!tp->has_data_type)
		return ml_fail(d->e, ML_EFORMAT, "tensor '%s' has no data type", name);
	ML_TRY(dec_dtype(d, tp->data_type, name, dt));
	ML_TRY(dec_dims(d, tp, name, dims, rank, &numel));
	int64_t nb;
	if (!ml_mul_ok(numel, (int64_t)ml_dtype_size(*dt), &nb) || (uint64_t)nb > SIZE_MAX - 16)
		return ml_fail(d->e, ML_EFORMAT, "tensor '%s': size overflows", name);
	*nbytes = (size_t)nb;
	bool external = tp->has_data_location &&
		tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
	if (!external && tp->has_raw_data && tp->raw_data.len != *nbytes)
		return ml_fail(d->e, ML_EFORMAT,
			       "tensor '%s': %zu bytes of raw data for a shape needing %zu", name,
			       tp->raw_data.len, *nbytes);
	if (!external && tp->has_raw_data && arena == NULL && *nbytes > 0) {
		*data = tp->raw_data.data;
		tp->raw_data.data = NULL;
		tp->raw_data.len = 0;
		return 0;
	}
	uint8_t *p = arena != NULL ? ml_graph_alloc(arena, *nbytes + 1) : ml_malloc(*nbytes + 1);
	if (p == NULL)
		return ml_fail(d->e, ML_ENOMEM, "tensor '%s': cannot allocate %zu bytes", name,
			       *nbytes);
	int rc;
	if (external)
		rc = dec_external(d, tp, name, p, *nbytes);
	else if (tp->has_raw_data)
		rc = (memcpy(p, tp->raw_data.data, *nbytes), 0);
	else
		rc = dec_typed(d, tp, name, *dt, numel, p);
	if (rc < 0) {
		if (arena == NULL)
			ml_free(p);
		return rc;
	}
	*data = p;
	return 0;
}

/* dec_initializer: make the named tensor of g a constant holding tp's data. */
static int
dec_initializer(struct dec *d, struct ml_graph *g, Onnx__TensorProto *tp)
{
	const char *name = nz(tp->name);
	enum ml_dtype dt;
	int rank;
	int64_t dims[ML_MAX_RANK];
	void *data = NULL;
	size_t nbytes;

	if (name[0] == '\0')
		return ml_fail(d->e, ML_EFORMAT, "an initializer has no name");
	if (ml_graph_find(g, name) >= 0)
		return ml_fail(d->e, ML_EFORMAT, "initializer '%s' appears twice", name);
	int ti = ml_graph_tensor(g, name);
	if (ti < 0)
		return ml_fail(d->e, ML_ENOMEM, "out of memory");
	ML_TRY(dec_tensor(d, tp, name, NULL, &dt, &rank, dims, &data, &nbytes));
	struct ml_tensor *t = g->tensors[ti];
	t->kind = ML_TK_CONST;
	t->dtype = dt;
	t->rank = rank;
	for (int i = 0; i < rank; i++)
		t->dims[i] = dims[i];
	t->data = data;
	t->nbytes = nbytes;
	if (tp->doc_string != NULL && tp->doc_string[0] != '\0')
		t->doc = ml_graph_strdup(g, tp->doc_string);
	return 0;
}

/*
 * dec_type: the declared type of tensor t (a graph input, output or
 * value_info entry). Only tensor types are supported; with strict, other
 * kinds (sequences, maps, optionals) are refused, else ignored.
 */
static int
dec_type(struct dec *d, struct ml_graph *g, struct ml_tensor *t, const Onnx__TypeProto *tp,
	 bool strict)
{
	if (tp == NULL || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET)
		return 0;
	if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
		if (!strict)
			return 0;
		static const char *const kinds[] = {
			[ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE] = "a sequence",
			[ONNX__TYPE_PROTO__VALUE_MAP_TYPE] = "a map",
			[ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE] = "an optional",
			[ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE] = "a sparse tensor",
		};
		unsigned k = (unsigned)tp->value_case;
		const char *kind = k < sizeof kinds / sizeof kinds[0] && kinds[k] ? kinds[k] :
			"not a tensor";
		return ml_fail(d->e, ML_ENOTSUP, "value '%s' is %s; only tensors are supported",
			       t->name, kind);
	}
	const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
	if (tt == NULL)
		return 0;
	/*
	 * Outside graph inputs and outputs a type is only a hint, which
	 * inference redoes: one this library cannot hold is dropped.
	 */
	const Onnx__TensorShapeProto *sh = tt->shape;
	if (!strict) {
		bool ok = !tt->has_elem_type || tt->elem_type == 0 ||
			(tt->elem_type > 0 && tt->elem_type < ML_DTYPE_MAX &&
			 ml_dtype_size((enum ml_dtype)tt->elem_type) > 0);
		for (size_t i = 0; ok && sh != NULL && i < sh->n_dim; i++)
			ok = sh->n_dim <= ML_MAX_RANK && (sh->dim[i]->value_case !=
				ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
				sh->dim[i]->dim_value >= 0);
		if (!ok)
			return 0;
	}
	if (tt->has_elem_type && tt->elem_type != 0)
		ML_TRY(dec_dtype(d, tt->elem_type, t->name, &t->dtype));
	if (sh == NULL)
		return 0;
	if (sh->n_dim > ML_MAX_RANK)
		return ml_fail(d->e, ML_EINVAL, "tensor '%s': rank %zu exceeds the maximum of %d",
			       t->name, sh->n_dim, ML_MAX_RANK);
	t->rank = (int)sh->n_dim;
	for (int i = 0; i < t->rank; i++) {
		const Onnx__TensorShapeProto__Dimension *dm = sh->dim[i];
		t->dims[i] = -1;
		t->sym[i] = NULL;
		if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
			if (dm->dim_value < 0)
				return ml_fail(d->e, ML_EFORMAT, "tensor '%s': dim %d is negative (%lld)",
					       t->name, i, (long long)dm->dim_value);
			t->dims[i] = dm->dim_value;
		} else if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
			   dm->dim_param != NULL && dm->dim_param[0] != '\0') {
			if ((t->sym[i] = ml_graph_strdup(g, dm->dim_param)) == NULL)
				return ml_fail(d->e, ML_ENOMEM, "out of memory");
		}
	}
	return 0;
}

/* attr_type: an attribute's type, inferred from its fields when unset (old models). */
static int
attr_type(const Onnx__AttributeProto *a)
{
	if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED)
		return a->type;
	if (a->has_f) return ML_ATTR_FLOAT;
	if (a->has_i) return ML_ATTR_INT;
	if (a->has_s) return ML_ATTR_STRING;
	if (a->t != NULL) return ML_ATTR_TENSOR;
	if (a->g != NULL) return ML_ATTR_GRAPH;
	if (a->n_floats) return ML_ATTR_FLOATS;
	if (a->n_ints) return ML_ATTR_INTS;
	if (a->n_strings) return ML_ATTR_STRINGS;
	if (a->n_tensors) return ML_ATTR_TENSORS;
	if (a->n_graphs) return ML_ATTR_GRAPHS;
	return ML_ATTR_UNDEF;
}

/* dec_attr_tensor: a tensor-valued attribute, struct and data in g's arena. */
static int
dec_attr_tensor(struct dec *d, struct ml_graph *g, Onnx__TensorProto *tp, const char *aname,
		struct ml_tensor **out)
{
	struct ml_tensor *t = ml_graph_alloc(g, sizeof *t);
	if (t == NULL || (t->name = ml_graph_strdup(g, tp->name != NULL ? tp->name : aname)) == NULL)
		return ml_fail(d->e, ML_ENOMEM, "out of memory");
	t->producer = -1;
	t->device = -1;
	t->arena_off = -1;
	t->kind = ML_TK_CONST;
	ML_TRY(dec_tensor(d, tp, t->name, g, &t->dtype, &t->rank, t->dims, &t->data, &t->nbytes));
	*out = t;
	return 0;
}

static int
dec_subgraph(struct dec *d, struct ml_graph *g, Onnx__GraphProto *gp, int depth,
	     struct ml_graph **out)
{
	ML_TRY(ml_graph_new(out, d->e));
	(*out)->parent = g;
	return dec_graph(d, *out, gp, depth + 1);
}

static int
dec_attr(struct dec *d, struct ml_graph *g, int ni, Onnx__AttributeProto *ap, int depth)
{
	const char *nname = g->nodes[ni].name;
	const char *name = nz(ap->name);
	int type = attr_type(ap);

	if (name[0] == '\0')
		return ml_fail(d->e, ML_EFORMAT, "node '%s': an attribute has no name", nname);
	if (ap->ref_attr_name != NULL)
		return ml_fail(d->e, ML_ENOTSUP,
			       "node '%s': attribute '%s' refers to a function attribute", nname, name);
	if (type < ML_ATTR_FLOAT || type > ML_ATTR_GRAPHS)
		return ml_fail(d->e, type == ML_ATTR_UNDEF ? ML_EFORMAT : ML_ENOTSUP,
			       "node '%s': attribute '%s' has %s type %d", nname, name,
			       type == ML_ATTR_UNDEF ? "no" : "the unsupported", type);
	struct ml_attr *a = ml_node_add_attr(g, ni, name, (enum ml_attr_type)type);
	if (a == NULL)
		return ml_fail(d->e, ML_ENOMEM, "out of memory");
	switch (type) {
	case ML_ATTR_FLOAT:
		a->f = ap->f;
		break;
	case ML_ATTR_INT:
		a->i = ap->i;
		break;
	case ML_ATTR_STRING:
		a->s_len = ap->s.len;
		a->s = ml_graph_strndup(g, ap->s.len ? (const char *)ap->s.data : "", ap->s.len);
		if (a->s == NULL)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		break;
	case ML_ATTR_FLOATS:
		a->n = (int)ap->n_floats;
		if ((a->floats = ml_graph_alloc(g, sizeof(double) * (ap->n_floats + 1))) == NULL)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		for (size_t k = 0; k < ap->n_floats; k++)
			a->floats[k] = ap->floats[k];
		break;
	case ML_ATTR_INTS:
		a->n = (int)ap->n_ints;
		if ((a->ints = ml_graph_alloc(g, sizeof(int64_t) * (ap->n_ints + 1))) == NULL)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		if (ap->n_ints)
			memcpy(a->ints, ap->ints, sizeof(int64_t) * ap->n_ints);
		break;
	case ML_ATTR_STRINGS:
		a->n = (int)ap->n_strings;
		if ((a->strings = ml_graph_alloc(g, sizeof(char *) * (ap->n_strings + 1))) == NULL)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		for (size_t k = 0; k < ap->n_strings; k++) {
			const ProtobufCBinaryData *b = &ap->strings[k];
			if ((a->strings[k] = ml_graph_strndup(g, b->len ? (const char *)b->data : "",
							      b->len)) == NULL)
				return ml_fail(d->e, ML_ENOMEM, "out of memory");
		}
		break;
	case ML_ATTR_TENSOR:
		if (ap->t == NULL)
			return ml_fail(d->e, ML_EFORMAT, "node '%s': attribute '%s' has no tensor",
				       nname, name);
		a->n = 1;
		if ((a->tensors = ml_graph_alloc(g, sizeof(struct ml_tensor *) * 2)) == NULL)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		ML_TRY(dec_attr_tensor(d, g, ap->t, name, &a->tensors[0]));
		break;
	case ML_ATTR_TENSORS:
		a->n = (int)ap->n_tensors;
		if ((a->tensors = ml_graph_alloc(g, sizeof(struct ml_tensor *) *
						 (ap->n_tensors + 1))) == NULL)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		for (size_t k = 0; k < ap->n_tensors; k++)
			ML_TRY(dec_attr_tensor(d, g, ap->tensors[k], name, &a->tensors[k]));
		break;
	case ML_ATTR_GRAPH:
		if (ap->g == NULL)
			return ml_fail(d->e, ML_EFORMAT, "node '%s': attribute '%s' has no graph",
				       nname, name);
		if ((a->graphs = ml_graph_alloc(g, sizeof(struct ml_graph *) * 2)) == NULL)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		/*
		 * n counts the subgraphs made so far, so that ml_graph_free
		 * releases exactly those when decoding fails half way.
		 */
		a->n = 1;
		ML_TRY(dec_subgraph(d, g, ap->g, depth, &a->graphs[0]));
		break;
	case ML_ATTR_GRAPHS:
		if ((a->graphs = ml_graph_alloc(g, sizeof(struct ml_graph *) *
						(ap->n_graphs + 1))) == NULL)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		for (size_t k = 0; k < ap->n_graphs; k++) {
			a->n = (int)k + 1;
			ML_TRY(dec_subgraph(d, g, ap->graphs[k], depth, &a->graphs[k]));
		}
		break;
	}
	return 0;
}

/*
 * bf16_cast_of: for the name of a Cast's output that the export of a bf16
 * (or fp16) weight writes (enc_bf16_cast: the weight's name and "::f32"),
 * the weight's tensor when g holds it as a bf16 or fp16 constant; else -1.
 */
static int
bf16_cast_of(struct ml_graph *g, const char *name)
{
	static const char sfx[] = "::f32";
	size_t len = strlen(name);
	if (len <= sizeof sfx - 1 || strcmp(name + len - (sizeof sfx - 1), sfx) != 0)
		return -1;
	char buf[1024];
	if (len - (sizeof sfx - 1) >= sizeof buf)
		return -1;
	memcpy(buf, name, len - (sizeof sfx - 1));
	buf[len - (sizeof sfx - 1)] = '\0';
	int t = ml_graph_find(g, buf);
	return t >= 0 && (g->tensors[t]->dtype == ML_BF16 || g->tensors[t]->dtype == ML_F16) &&
	       (g->tensors[t]->kind == ML_TK_CONST || g->tensors[t]->kind == ML_TK_PARAM) ? t : -1;
}

/* bf16_cast_node: np is such a Cast, which the import drops */
static bool
bf16_cast_node(struct ml_graph *g, const Onnx__NodeProto *np)
{
	if (strcmp(nz(np->op_type), "Cast") != 0 || nz(np->domain)[0] != '\0' ||
	    np->n_input != 1 || np->n_output != 1 || np->input[0] == NULL || np->output[0] == NULL)
		return false;
	int t = bf16_cast_of(g, np->output[0]);
	return t >= 0 && strcmp(g->tensors[t]->name, np->input[0]) == 0;
}

static int
dec_node(struct dec *d, struct ml_graph *g, Onnx__NodeProto *np, int depth)
{
	if (np->op_type == NULL || np->op_type[0] == '\0')
		return ml_fail(d->e, ML_EFORMAT, "node '%s' has no op_type", nz(np->name));
	if (ml_pb_has_ctl(np->op_type) || ml_pb_has_ctl(nz(np->domain)) ||
	    ml_pb_has_ctl(nz(np->name)))
		return ml_fail(d->e, ML_EFORMAT, "node '%s': its name, op type or domain holds a control character",
			       nz(np->name));
	for (size_t j = 0; j < np->n_attribute; j++)
		if (ml_pb_has_ctl(nz(np->attribute[j]->name)))
			return ml_fail(d->e, ML_EFORMAT,
				       "node '%s': an attribute name holds a control character",
				       nz(np->name));
	if (np->n_input > (1u << 20) || np->n_output > (1u << 20))
		return ml_fail(d->e, ML_EFORMAT, "node '%s': too many inputs or outputs",
			       nz(np->name));
	/* a call of a function this library writes is the internal op it stands for */
	const char *type = np->op_type;
	for (size_t i = 0; i < d->n_funcs; i++)
		if (strcmp(nz(np->domain), "ml") == 0 && strcmp(type, d->funcs[i]->name) == 0) {
			type = ml_onnx_func_op(type);
			break;
		}
	/* a product's weight that the export cast from bf16: the bf16 weight itself */
	const char *const *ins = (const char *const *)np->input;
	int w = np->n_input >= 2 && np->input[1] != NULL &&
		(ml_op_flags(ml_op_lookup(type, nz(np->domain))) & ML_OPF_HALF_WEIGHT) ?
		bf16_cast_of(g, np->input[1]) : -1;
	const char **insv = NULL;
	if (w >= 0) {
		insv = ml_malloc(sizeof *insv * np->n_input);
		if (insv == NULL)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		for (size_t j = 0; j < np->n_input; j++)
			insv[j] = np->input[j];
		insv[1] = g->tensors[w]->name;
		ins = insv;
	}
	int ni = ml_graph_add_node(g, type, np->domain, np->name, (int)np->n_input, ins,
				   (int)np->n_output, (const char *const *)np->output, d->e);
	ml_free(insv);
	if (ni < 0)
		return ni;
	for (size_t j = 0; j < np->n_attribute; j++) {
		const char *an = nz(np->attribute[j]->name);
		if (ml_attr_find(&g->nodes[ni], an) != NULL)
			return ml_fail(d->e, ML_EFORMAT, "node '%s': attribute '%s' appears twice",
				       nz(np->name), an);
		ML_TRY(dec_attr(d, g, ni, np->attribute[j], depth));
	}
	return 0;
}

static bool
is_const(const struct ml_graph *g, int ti)
{
	return g->tensors[ti]->kind == ML_TK_CONST || g->tensors[ti]->kind == ML_TK_PARAM;
}

static bool
produced(const struct ml_graph *g, int ti)
{
	for (int i = g->n_nodes - 1; i >= 0; i--)
		for (int j = 0; j < g->nodes[i].n_out; j++)
			if (g->nodes[i].out[j] == ti)
				return true;
	return false;
}

static int
dec_graph(struct dec *d, struct ml_graph *g, Onnx__GraphProto *gp, int depth)
{
	bool is_main = g->parent == NULL;

	if (depth > MAX_DEPTH)
		return ml_fail(d->e, ML_EFORMAT, "subgraphs nest deeper than %d", MAX_DEPTH);
	if (gp->n_sparse_initializer > 0)
		return ml_fail(d->e, ML_ENOTSUP, "sparse initializers are not supported");
	if (ml_pb_has_ctl(nz(gp->name)))
		return ml_fail(d->e, ML_EFORMAT, "the graph name holds a control character");
	if (gp->name != NULL && (g->name = ml_graph_strdup(g, gp->name)) == NULL)
		return ml_fail(d->e, ML_ENOMEM, "out of memory");
	for (size_t i = 0; i < gp->n_initializer; i++)
		ML_TRY(dec_initializer(d, g, gp->initializer[i]));
	for (size_t i = 0; i < gp->n_input; i++) {
		const Onnx__ValueInfoProto *vi = gp->input[i];
		const char *name = nz(vi->name);
		if (name[0] == '\0')
			return ml_fail(d->e, ML_EFORMAT, "a graph input has no name");
		int ti = ml_graph_find(g, name);
		/* Before IR 4, initializers were listed as inputs too. */
		if (ti >= 0 && is_const(g, ti))
			continue;
		if (ti >= 0)
			return ml_fail(d->e, ML_EFORMAT, "graph input '%s' appears twice", name);
		if ((ti = ml_graph_tensor(g, name)) < 0)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		ML_TRY(dec_type(d, g, g->tensors[ti], vi->type, is_main));
		if (vi->doc_string != NULL && vi->doc_string[0] != '\0')
			g->tensors[ti]->doc = ml_graph_strdup(g, vi->doc_string);
		ML_TRY(ml_graph_add_input(g, ti, d->e));
	}
	for (size_t i = 0; i < gp->n_node; i++)
		if (!bf16_cast_node(g, gp->node[i]))
			ML_TRY(dec_node(d, g, gp->node[i], depth));
	for (size_t i = 0; i < gp->n_output; i++) {
		const Onnx__ValueInfoProto *vi = gp->output[i];
		const char *name = nz(vi->name);
		if (name[0] == '\0')
			return ml_fail(d->e, ML_EFORMAT, "a graph output has no name");
		int ti = ml_graph_tensor(g, name);
		if (ti < 0)
			return ml_fail(d->e, ML_ENOMEM, "out of memory");
		/*
		 * A main graph's output must come from somewhere; a subgraph's
		 * may be a value of an enclosing graph.
		 */
		if (is_main && g->tensors[ti]->kind == ML_TK_ACT && !produced(g, ti))
			return ml_fail(d->e, ML_EFORMAT, "graph output '%s' is never computed", name);
		if (!is_const(g, ti))
			ML_TRY(dec_type(d, g, g->tensors[ti], vi->type, is_main));
		if (vi->doc_string != NULL && vi->doc_string[0] != '\0')
			g->tensors[ti]->doc = ml_graph_strdup(g, vi->doc_string);
		ML_TRY(ml_graph_add_output(g, ti, d->e));
	}
	for (size_t i = 0; i < gp->n_value_info; i++) {
		const Onnx__ValueInfoProto *vi = gp->value_info[i];
		int ti = ml_graph_find(g, nz(vi->name));
		/* Entries for names no node uses are harmless; skip them. */
		if (ti < 0 || is_const(g, ti))
			continue;
		ML_TRY(dec_type(d, g, g->tensors[ti], vi->type, false));
	}
	return 0;
}

static int
dec_model(struct dec *d, struct ml_graph *g, Onnx__ModelProto *m)
{
	if (m->graph == NULL)
		return ml_fail(d->e, ML_EFORMAT, "the model has no graph");
	/*
	 * Functions: those of domain "ml" named after an internal op are the
	 * ones the encoder writes, read back as their op; any other is refused.
	 */
	for (size_t i = 0; i < m->n_functions; i++) {
		const Onnx__FunctionProto *f = m->functions[i];
		if (f->name == NULL || ml_pb_has_ctl(f->name) || ml_pb_has_ctl(nz(f->domain)))
			return ml_fail(d->e, ML_EFORMAT, "a model-local function has no valid name");
		if (strcmp(nz(f->domain), "ml") != 0 || ml_onnx_func_op(f->name) == NULL)
			return ml_fail(d->e, ML_ENOTSUP,
				       "model-local function '%s' (domain '%s') is not supported; "
				       "only the ml functions this library writes are read",
				       f->name, nz(f->domain));
	}
	d->funcs = m->functions;
	d->n_funcs = m->n_functions;
	g->ir_version = m->has_ir_version ? m->ir_version : 0;
	if (m->producer_name != NULL && m->producer_name[0] != '\0' &&
	    (g->producer = ml_graph_strdup(g, m->producer_name)) == NULL)
		return ml_fail(d->e, ML_ENOMEM, "out of memory");
	for (size_t i = 0; i < m->n_opset_import; i++) {
		const Onnx__OperatorSetIdProto *o = m->opset_import[i];
		if (ml_pb_has_ctl(nz(o->domain)))
			return ml_fail(d->e, ML_EFORMAT, "an opset domain holds a control character");
		ML_TRY(ml_graph_set_opset(g, nz(o->domain), o->has_version ? o->version : 1, d->e));
	}
	for (size_t i = 0; i < m->n_metadata_props; i++) {
		const Onnx__StringStringEntryProto *kv = m->metadata_props[i];
		if (kv->key == NULL || kv->key[0] == '\0')
			return ml_fail(d->e, ML_EFORMAT, "a metadata entry has no key");
		ML_TRY(ml_graph_set_meta(g, kv->key, nz(kv->value), d->e));
	}
	return dec_graph(d, g, m->graph, 0);
}

int
ml_onnx_decode(struct ml_graph **out, const uint8_t *buf, size_t len, const char *dir,
	       struct ml_err *e)
{
	bool nomem = false;
	ProtobufCAllocator pa = ml_pb_allocator(&nomem);
	struct dec d = { .dir = dir, .e = e };
	struct ml_graph *g = NULL;
	int rc;

	*out = NULL;
	if (len == 0)
		return ml_fail(e, ML_EFORMAT, "empty file, not an ONNX model");
	ML_TRY(ml_pb_check_nesting(buf, len, &onnx__model_proto__descriptor, e));
	Onnx__ModelProto *m = onnx__model_proto__unpack(&pa, len, buf);
	if (m == NULL && nomem)
		return ml_fail(e, ML_ENOMEM, "out of memory reading the ONNX model");
	if (m == NULL)
		return ml_fail(e, ML_EFORMAT, "not an ONNX model (protobuf parse failed)");
	if ((rc = ml_graph_new(&g, e)) == 0 && (rc = dec_model(&d, g, m)) < 0) {
		ml_graph_free(g);
		g = NULL;
	}
	onnx__model_proto__free_unpacked(m, &pa);
	*out = g;
	return rc;
}

/*
 * Encoding builds protobuf-c structs that borrow the graph's strings and
 * data; what the encoder allocates itself comes from one scratch list,
 * freed at the end.
 */
#define salloc ml_pbscratch_alloc
#define sfree ml_pbscratch_free

struct enc {
	struct ml_pbscratch s;
	struct ml_err *e;
	int rc;			/* the failure when one is more specific than ENOMEM */
	/* domains the nodes use, for the model's opset imports */
	const char **domains;
	int n_domains;
	bool default_domain;	/* whether a node uses ONNX's default domain */
	struct ml_onnx_funcs fn;	/* the functions of the internal ops */
};

static Onnx__GraphProto *enc_graph(struct enc *x, const struct ml_graph *g, int depth);

/* pnew: a message of the type desc describes, initialized, from the scratch list */
static void *
pnew(struct enc *x, const ProtobufCMessageDescriptor *desc)
{
	void *m = salloc(&x->s, desc->sizeof_message);
	if (m != NULL)
		protobuf_c_message_init(desc, m);
	return m;
}

static int
note_domain(struct enc *x, const char *dom)
{
	if (dom == NULL || dom[0] == '\0') {
		x->default_domain = true;
		return 0;
	}
	for (int i = 0; i < x->n_domains; i++)
		if (strcmp(x->domains[i], dom) == 0)
			return 0;
	const char **a = salloc(&x->s, sizeof *a * (size_t)(x->n_domains + 1));
	if (a == NULL)
		return -1;
	if (x->n_domains)
		memcpy(a, x->domains, sizeof *a * (size_t)x->n_domains);
	a[x->n_domains++] = dom;
	x->domains = a;
	return 0;
}

static Onnx__TensorProto *
enc_tensor(struct enc *x, const struct ml_tensor *t)
{
	if (t->rank < 0 || ml_dtype_size(t->dtype) == 0 || (t->data == NULL && t->nbytes > 0)) {
		x->rc = ml_fail(x->e, ML_EINVAL, "constant '%s' has no dtype, shape or data",
				t->name);
		return NULL;
	}
	Onnx__TensorProto *tp = pnew(x, &onnx__tensor_proto__descriptor);
	if (tp == NULL)
		return NULL;
	tp->name = (char *)t->name;
	tp->has_data_type = 1;
	tp->data_type = t->dtype;
	tp->n_dims = (size_t)t->rank;
	tp->dims = (int64_t *)t->dims;
	tp->has_raw_data = 1;
	tp->raw_data.len = t->nbytes;
	tp->raw_data.data = t->data;
	if (t->doc != NULL && t->doc[0] != '\0')
		tp->doc_string = t->doc;
	return tp;
}

static Onnx__TypeProto *
enc_type(struct enc *x, const struct ml_tensor *t)
{
	Onnx__TypeProto *tp = pnew(x, &onnx__type_proto__descriptor);
	Onnx__TypeProto__Tensor *tt = pnew(x, &onnx__type_proto__tensor__descriptor);
	if (tp == NULL || tt == NULL)
		return NULL;
	tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
	tp->tensor_type = tt;
	tt->has_elem_type = t->dtype != ML_UNDEF;
	tt->elem_type = t->dtype;
	if (t->rank < 0)
		return tp;
	Onnx__TensorShapeProto *sh = pnew(x, &onnx__tensor_shape_proto__descriptor);
	if (sh == NULL)
		return NULL;
	tt->shape = sh;
	sh->n_dim = (size_t)t->rank;
	sh->dim = salloc(&x->s, sizeof *sh->dim * (size_t)(t->rank + 1));
	if (sh->dim == NULL)
		return NULL;
	for (int i = 0; i < t->rank; i++) {
		Onnx__TensorShapeProto__Dimension *dm =
			pnew(x, &onnx__tensor_shape_proto__dimension__descriptor);
		if (dm == NULL)
			return NULL;
		if (t->dims[i] >= 0) {
			dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
			dm->dim_value = t->dims[i];
		} else if (t->sym[i] != NULL && t->sym[i][0] != '\0') {
			dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
			dm->dim_param = t->sym[i];
		}
		sh->dim[i] = dm;
	}
	return tp;
}

static Onnx__ValueInfoProto *
enc_value_info(struct enc *x, const struct ml_tensor *t)
{
	Onnx__ValueInfoProto *vi = pnew(x, &onnx__value_info_proto__descriptor);
	if (vi == NULL || (vi->type = enc_type(x, t)) == NULL)
		return NULL;
	vi->name = t->name;
	if (t->doc != NULL && t->doc[0] != '\0')
		vi->doc_string = t->doc;
	return vi;
}

static Onnx__AttributeProto *
enc_attr(struct enc *x, const struct ml_attr *a, int depth)
{
	Onnx__AttributeProto *ap = pnew(x, &onnx__attribute_proto__descriptor);
	if (ap == NULL)
		return NULL;
	ap->name = a->name;
	ap->has_type = 1;
	ap->type = (Onnx__AttributeProto__AttributeType)a->type;
	switch (a->type) {
	case ML_ATTR_FLOAT:
		ap->has_f = 1;
		ap->f = (float)a->f;
		break;
	case ML_ATTR_INT:
		ap->has_i = 1;
		ap->i = a->i;
		break;
	case ML_ATTR_STRING:
		ap->has_s = 1;
		ap->s.len = a->s_len;
		ap->s.data = (uint8_t *)a->s;
		break;
	case ML_ATTR_FLOATS:
		ap->n_floats = (size_t)a->n;
		if ((ap->floats = salloc(&x->s, sizeof(float) * (size_t)(a->n + 1))) == NULL)
			return NULL;
		for (int k = 0; k < a->n; k++)
			ap->floats[k] = (float)a->floats[k];
		break;
	case ML_ATTR_INTS:
		ap->n_ints = (size_t)a->n;
		ap->ints = a->ints;
		break;
	case ML_ATTR_STRINGS:
		ap->n_strings = (size_t)a->n;
		if ((ap->strings = salloc(&x->s, sizeof *ap->strings * (size_t)(a->n + 1))) == NULL)
			return NULL;
		for (int k = 0; k < a->n; k++) {
			ap->strings[k].data = (uint8_t *)a->strings[k];
			ap->strings[k].len = strlen(a->strings[k]);
		}
		break;
	case ML_ATTR_TENSOR:
		if (a->tensors == NULL || (ap->t = enc_tensor(x, a->tensors[0])) == NULL)
			return NULL;
		break;
	case ML_ATTR_TENSORS:
		ap->n_tensors = (size_t)a->n;
		if ((ap->tensors = salloc(&x->s, sizeof *ap->tensors * (size_t)(a->n + 1))) == NULL)
			return NULL;
		for (int k = 0; k < a->n; k++)
			if ((ap->tensors[k] = enc_tensor(x, a->tensors[k])) == NULL)
				return NULL;
		break;
	case ML_ATTR_GRAPH:
		if (a->graphs == NULL || (ap->g = enc_graph(x, a->graphs[0], depth + 1)) == NULL)
			return NULL;
		break;
	case ML_ATTR_GRAPHS:
		ap->n_graphs = (size_t)a->n;
		if ((ap->graphs = salloc(&x->s, sizeof *ap->graphs * (size_t)(a->n + 1))) == NULL)
			return NULL;
		for (int k = 0; k < a->n; k++)
			if ((ap->graphs[k] = enc_graph(x, a->graphs[k], depth + 1)) == NULL)
				return NULL;
		break;
	default:
		x->rc = ml_fail(x->e, ML_EINVAL, "attribute '%s' has an unknown type %d", a->name,
				a->type);
		return NULL;
	}
	return ap;
}

static char *
tname(const struct ml_graph *g, int i)
{
	return i < 0 ? "" : g->tensors[i]->name;
}

static Onnx__NodeProto *
enc_node(struct enc *x, const struct ml_graph *g, const struct ml_node *n, int depth)
{
	Onnx__NodeProto *np = pnew(x, &onnx__node_proto__descriptor);
	if (np == NULL)
		return NULL;
	if (n->name != NULL && n->name[0] != '\0')
		np->name = n->name;
	np->op_type = n->op_type;
	if (n->domain != NULL && n->domain[0] != '\0')
		np->domain = n->domain;
	/* an internal op calls the function that computes it in standard ops */
	if (strcmp(nz(n->domain), "ml") == 0 &&
	    (np->op_type = (char *)ml_onnx_func_call(&x->fn, g, n)) == NULL) {
		x->rc = x->fn.rc;
		return NULL;
	}
	if (note_domain(x, n->domain) < 0)
		return NULL;
	np->n_input = (size_t)n->n_in;
	np->n_output = (size_t)n->n_out;
	np->n_attribute = (size_t)n->n_attr;
	np->input = salloc(&x->s, sizeof(char *) * (size_t)(n->n_in + 1));
	np->output = salloc(&x->s, sizeof(char *) * (size_t)(n->n_out + 1));
	np->attribute = salloc(&x->s, sizeof *np->attribute * (size_t)(n->n_attr + 1));
	if (np->input == NULL || np->output == NULL || np->attribute == NULL)
		return NULL;
	for (int j = 0; j < n->n_in; j++)
		np->input[j] = tname(g, n->in[j]);
	for (int j = 0; j < n->n_out; j++)
		np->output[j] = tname(g, n->out[j]);
	for (int j = 0; j < n->n_attr; j++)
		if ((np->attribute[j] = enc_attr(x, &n->attrs[j], depth)) == NULL)
			return NULL;
	return np;
}

/*
 * bf16 weights. mlquant --dtype bf16 (and fp16) gives Conv, MatMul, Gemm
 * and the fused products a bf16 (fp16) weight against an f32 input, which
 * ONNX's ops (one type T for both) do not take: the export casts the weight
 * to float in front of them, one Cast per weight, named after it
 * (BF16_CAST_OUT), and the import drops those Casts again, so the graph
 * reads back as it was.
 */
#define BF16_CAST_OUT "::f32"

/* bf16_weight: the bf16 constant n takes as its weight against an f32 input 0, or -1 */
static int
bf16_weight(const struct ml_graph *g, const struct ml_node *n)
{
	if (n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0 || !(ml_op_flags(n->op) & ML_OPF_HALF_WEIGHT))
		return -1;
	const struct ml_tensor *w = g->tensors[n->in[1]];
	return (w->dtype == ML_BF16 || w->dtype == ML_F16) && g->tensors[n->in[0]]->dtype == ML_F32 &&
	       (w->kind == ML_TK_CONST || w->kind == ML_TK_PARAM) ? n->in[1] : -1;
}

/* enc_bf16_cast: the node Cast(w) -> w BF16_CAST_OUT, to float */
static Onnx__NodeProto *
enc_bf16_cast(struct enc *x, const struct ml_tensor *w)
{
	Onnx__NodeProto *np = pnew(x, &onnx__node_proto__descriptor);
	Onnx__AttributeProto *ap = pnew(x, &onnx__attribute_proto__descriptor);
	size_t len = strlen(w->name);
	char *out = salloc(&x->s, len + sizeof BF16_CAST_OUT);
	char *name = salloc(&x->s, len + sizeof "::cast");
	if (np == NULL || ap == NULL || out == NULL || name == NULL)
		return NULL;
	memcpy(out, w->name, len);
	memcpy(out + len, BF16_CAST_OUT, sizeof BF16_CAST_OUT);
	memcpy(name, w->name, len);
	memcpy(name + len, "::cast", sizeof "::cast");
	np->name = name;
	np->op_type = "Cast";
	np->n_input = np->n_output = np->n_attribute = 1;
	np->input = salloc(&x->s, sizeof(char *));
	np->output = salloc(&x->s, sizeof(char *));
	np->attribute = salloc(&x->s, sizeof *np->attribute);
	if (np->input == NULL || np->output == NULL || np->attribute == NULL)
		return NULL;
	np->input[0] = w->name;
	np->output[0] = out;
	ap->name = "to";
	ap->has_type = 1;
	ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
	ap->has_i = 1;
	ap->i = 1;	/* FLOAT */
	np->attribute[0] = ap;
	x->default_domain = true;
	return np;
}

static Onnx__GraphProto *
enc_graph(struct enc *x, const struct ml_graph *g, int depth)
{
	if (depth > MAX_DEPTH) {
		x->rc = ml_fail(x->e, ML_EINVAL, "subgraphs nest deeper than %d", MAX_DEPTH);
		return NULL;
	}
	Onnx__GraphProto *gp = pnew(x, &onnx__graph_proto__descriptor);
	bool *produced = salloc(&x->s, (size_t)g->n_tensors + 1);
	bool *listed = salloc(&x->s, (size_t)g->n_tensors + 1);
	if (gp == NULL || produced == NULL || listed == NULL)
		return NULL;
	/* ONNX's checker wants every graph, subgraphs included, to have a name. */
	gp->name = g->name != NULL && g->name[0] != '\0' ? g->name : "graph";
	int nconst = 0, nvi = 0, ncast = 0;
	for (int i = 0; i < g->n_tensors; i++)
		nconst += is_const(g, i);
	int nbf = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		int w = bf16_weight(g, &g->nodes[i]);
		ncast += w >= 0;
		nbf += w >= 0 && g->tensors[w]->dtype == ML_BF16;
	}
	/* Cast takes bfloat16 from opset 13 on (float16 from the start) */
	if (nbf > 0 && x->fn.opset < 13) {
		x->rc = ml_fail(x->e, ML_ENOTSUP, "bf16 weights need opset 13 or later, not %lld",
				(long long)x->fn.opset);
		return NULL;
	}
	bool *cast = salloc(&x->s, (size_t)g->n_tensors + 1);
	gp->node = salloc(&x->s, sizeof *gp->node * (size_t)(g->n_nodes + ncast + 1));
	if (cast == NULL)
		return NULL;
	gp->initializer = salloc(&x->s, sizeof *gp->initializer * (size_t)(nconst + 1));
	gp->input = salloc(&x->s, sizeof *gp->input * (size_t)(g->n_inputs + 1));
	gp->output = salloc(&x->s, sizeof *gp->output * (size_t)(g->n_outputs + 1));
	gp->value_info = salloc(&x->s, sizeof *gp->value_info * (size_t)(g->n_tensors + 1));
	if (gp->node == NULL || gp->initializer == NULL || gp->input == NULL ||
	    gp->output == NULL || gp->value_info == NULL)
		return NULL;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		int w = bf16_weight(g, n);
		if (w >= 0 && !cast[w]) {
			if ((gp->node[gp->n_node++] = enc_bf16_cast(x, g->tensors[w])) == NULL)
				return NULL;
			cast[w] = true;
		}
		Onnx__NodeProto *np = enc_node(x, g, n, depth);
		if ((gp->node[gp->n_node++] = np) == NULL)
			return NULL;
		if (w >= 0) {
			size_t len = strlen(g->tensors[w]->name);
			char *in = salloc(&x->s, len + sizeof BF16_CAST_OUT);
			if (in == NULL)
				return NULL;
			memcpy(in, g->tensors[w]->name, len);
			memcpy(in + len, BF16_CAST_OUT, sizeof BF16_CAST_OUT);
			np->input[1] = in;
		}
		for (int j = 0; j < n->n_out; j++)
			if (n->out[j] >= 0)
				produced[n->out[j]] = true;
	}
	for (int i = 0; i < g->n_tensors; i++)
		if (is_const(g, i) &&
		    (gp->initializer[gp->n_initializer++] = enc_tensor(x, g->tensors[i])) == NULL)
			return NULL;
	for (int i = 0; i < g->n_inputs; i++) {
		const struct ml_tensor *t = g->tensors[g->inputs[i]];
		listed[g->inputs[i]] = true;
		if ((gp->input[gp->n_input++] = enc_value_info(x, t)) == NULL)
			return NULL;
	}
	for (int i = 0; i < g->n_outputs; i++) {
		const struct ml_tensor *t = g->tensors[g->outputs[i]];
		listed[g->outputs[i]] = true;
		if ((gp->output[gp->n_output++] = enc_value_info(x, t)) == NULL)
			return NULL;
	}
	/*
	 * value_info for the intermediates whose type is known. Names a
	 * subgraph takes from an enclosing graph are not produced here and
	 * get no entry, so they never shadow the outer declaration.
	 */
	for (int i = 0; i < g->n_tensors; i++) {
		const struct ml_tensor *t = g->tensors[i];
		if (!produced[i] || listed[i] || is_const(g, i) || t->dtype == ML_UNDEF)
			continue;
		if ((gp->value_info[nvi++] = enc_value_info(x, t)) == NULL)
			return NULL;
	}
	gp->n_value_info = (size_t)nvi;
	return gp;
}

static int
add_opset(struct enc *x, Onnx__ModelProto *m, const char *dom, int64_t version)
{
	Onnx__OperatorSetIdProto *o = pnew(x, &onnx__operator_set_id_proto__descriptor);
	if (o == NULL)
		return -1;
	o->domain = (char *)dom;
	o->has_version = 1;
	o->version = version;
	m->opset_import[m->n_opset_import++] = o;
	return 0;
}

static Onnx__ModelProto *
enc_model(struct enc *x, const struct ml_graph *g)
{
	Onnx__ModelProto *m = pnew(x, &onnx__model_proto__descriptor);
	x->fn.s = &x->s;
	x->fn.e = x->e;
	x->fn.opset = ml_graph_opset(g, "", DEFAULT_OPSET);
	if (m == NULL || (m->graph = enc_graph(x, g, 0)) == NULL)
		return NULL;
	m->has_ir_version = 1;
	m->ir_version = g->ir_version > 0 ? ML_MAX(g->ir_version, MIN_IR) : DEFAULT_IR;
	if (x->fn.n > 0) {
		m->ir_version = ML_MAX(m->ir_version, FUNC_IR);
		m->n_functions = (size_t)x->fn.n;
		m->functions = x->fn.f;
	}
	if (g->producer != NULL && g->producer[0] != '\0') {
		m->producer_name = g->producer;
	} else {
		m->producer_name = "ml";
		m->producer_version = ML_VERSION;
	}
	/*
	 * Opset imports: the graph's own, ONNX's default when it has none and
	 * a node needs it, and version 1 of any other domain a node uses
	 * (internal "ml" ops).
	 */
	m->opset_import = salloc(&x->s, sizeof *m->opset_import *
				 (size_t)(g->n_opsets + x->n_domains + 2));
	if (m->opset_import == NULL)
		return NULL;
	bool have_default = false;
	for (int i = 0; i < g->n_opsets; i++) {
		have_default |= g->opset_domain[i][0] == '\0';
		if (add_opset(x, m, g->opset_domain[i], g->opset_version[i]) < 0)
			return NULL;
	}
	if (!have_default && (x->default_domain || g->n_opsets == 0) &&
	    add_opset(x, m, "", DEFAULT_OPSET) < 0)
		return NULL;
	for (int i = 0; i < x->n_domains; i++)
		if (ml_graph_opset(g, x->domains[i], -1) < 0 && add_opset(x, m, x->domains[i], 1) < 0)
			return NULL;
	m->metadata_props = salloc(&x->s, sizeof *m->metadata_props * (size_t)(g->n_meta + 1));
	if (m->metadata_props == NULL)
		return NULL;
	for (int i = 0; i < g->n_meta; i++) {
		Onnx__StringStringEntryProto *kv =
			pnew(x, &onnx__string_string_entry_proto__descriptor);
		if (kv == NULL)
			return NULL;
		kv->key = g->meta[i].key;
		kv->value = (char *)nz(g->meta[i].value);
		m->metadata_props[m->n_metadata_props++] = kv;
	}
	return m;
}

int
ml_onnx_encode(const struct ml_graph *g, uint8_t **buf, size_t *len, struct ml_err *e)
{
	struct enc x = { .e = e };
	int rc = 0;

	*buf = NULL;
	*len = 0;
	Onnx__ModelProto *m = enc_model(&x, g);
	if (m == NULL) {
		rc = x.rc < 0 ? x.rc : ml_fail(e, ML_ENOMEM, "out of memory encoding the ONNX model");
		goto done;
	}
	size_t n = onnx__model_proto__get_packed_size(m);
	/* protobuf (and so every ONNX reader) refuses messages of 2 GiB and more. */
	if (n > INT32_MAX) {
		rc = ml_fail(e, ML_ENOTSUP,
			     "the ONNX model would be %zu bytes, over protobuf's 2 GiB limit", n);
		goto done;
	}
	if ((*buf = ml_malloc(n + 1)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory encoding the ONNX model");
		goto done;
	}
	*len = onnx__model_proto__pack(m, *buf);
done:
	sfree(&x.s);
	return rc;
}
