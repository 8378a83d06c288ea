/*
 * pbcheck.c: protobuf helpers shared by the ONNX and graph-file codecs: a
 * pre-pass over wire data that bounds how deeply messages nest, the
 * scratch list encoders allocate from, and the unpackers' allocator hook.
 */
#include <protobuf-c/protobuf-c.h>

#include "ml_impl.h"
#include "pbcheck.h"

/*
 * check_nesting: walk the wire format of buf as a message of type desc and
 * fail when sub-messages nest deeper than MAX_NEST. protobuf-c's unpacker
 * recurses once per level, so a small crafted file (a graph attribute
 * inside a graph attribute, a hundred thousand times) would otherwise
 * exhaust the stack. Other damage is left for the unpacker to find.
 */

static bool
get_varint(const uint8_t *p, size_t end, size_t *pos, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64 && *pos < end; shift += 7) {
		uint8_t b = p[(*pos)++];
		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return true;
	}
	return false;
}

int
ml_pb_check_nesting(const uint8_t *buf, size_t len, const ProtobufCMessageDescriptor *desc,
		    struct ml_err *e)
{
	struct { size_t end; const ProtobufCMessageDescriptor *desc; } st[MAX_NEST];
	int top = 0;
	size_t pos = 0;

	st[0].end = len;
	st[0].desc = desc;
	while (top >= 0) {
		if (pos >= st[top].end) {
			pos = st[top--].end;
			continue;
		}
		uint64_t tag, n;
		if (!get_varint(buf, st[top].end, &pos, &tag))
			return 0;
		switch (tag & 7) {
		case 0:
			if (!get_varint(buf, st[top].end, &pos, &n))
				return 0;
			break;
		case 1:
			pos += 8;
			break;
		case 5:
			pos += 4;
			break;
		case 2: {
			if (!get_varint(buf, st[top].end, &pos, &n) || n > st[top].end - pos)
				return 0;
			const ProtobufCFieldDescriptor *f = tag >> 3 > UINT32_MAX ? NULL :
				protobuf_c_message_descriptor_get_field(st[top].desc,
									(unsigned)(tag >> 3));
			if (f == NULL || f->type != PROTOBUF_C_TYPE_MESSAGE) {
				pos += n;
				break;
			}
			if (top + 1 >= MAX_NEST)
				return ml_fail(e, ML_EFORMAT, "the model's messages nest deeper "
					       "than %d levels", MAX_NEST);
			top++;
			st[top].end = pos + n;
			st[top].desc = f->descriptor;
			break;
		}
		default:
			return 0;
		}
	}
	return 0;
}

bool
ml_pb_has_ctl(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
		if (*p < 0x20 || *p == 0x7f)
			return true;
	return false;
}

void *
ml_pbscratch_alloc(struct ml_pbscratch *s, size_t n)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		void **q = realloc(s->p, cap * sizeof *q);
		if (q == NULL)
			return NULL;
		s->p = q;
		s->cap = cap;
	}
	void *m = calloc(1, n ? n : 1);
	if (m != NULL)
		s->p[s->n++] = m;
	return m;
}

void
ml_pbscratch_free(struct ml_pbscratch *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->p[i]);
	free(s->p);
	memset(s, 0, sizeof *s);
}

static void *
pb_alloc(void *ud, size_t n)
{
	void *p = ml_malloc(n);
	/* tell a refused allocation from a malformed message */
	if (p == NULL)
		*(bool *)ud = true;
	return p;
}

static void
pb_free(void *ud, void *p)
{
	(void)ud;
	ml_free(p);
}

ProtobufCAllocator
ml_pb_allocator(bool *nomem)
{
	return (ProtobufCAllocator){ pb_alloc, pb_free, nomem };
}
