/*
 * pbcheck.h: bounds on protobuf nesting before protobuf-c unpacks (which
 * recurses once per level, so a small crafted file could exhaust the stack),
 * and the one allocator hook the unpackers use.
 */
#ifndef ML_PBCHECK_H
#define ML_PBCHECK_H

#include <protobuf-c/protobuf-c.h>

#include "ml.h"

/* sub-messages may nest this deep; enough for 32 levels of subgraphs */
#define MAX_NEST (3 * 32 + 16)

/*
 * ml_pb_check_nesting: walk buf as a message of type desc; ML_EFORMAT when
 * sub-messages nest deeper than MAX_NEST. Other damage is left for the
 * unpacker to find (returns 0).
 */
int ml_pb_check_nesting(const uint8_t *buf, size_t len, const ProtobufCMessageDescriptor *desc,
			struct ml_err *e);
/*
 * ml_pb_allocator: the protobuf-c allocator of every unpack (mlg and ONNX):
 * ml_malloc and ml_free, so unpacking obeys the allocation cap; sets
 * *nomem when it refuses a block, to tell that from a malformed message.
 */
ProtobufCAllocator ml_pb_allocator(bool *nomem);

/*
 * ml_pb_has_ctl: whether s holds a control character. Op types, domains
 * and attribute names are identifiers; one with such a byte comes from a
 * damaged file (a string length that grew over the bytes after it), and
 * taking it would turn the damage into an unknown op or attribute.
 */
bool ml_pb_has_ctl(const char *s);

/*
 * struct ml_pbscratch: what an encoder allocates while it builds protobuf-c
 * structs that borrow the graph's strings and data; one call frees it all.
 * ml_pbscratch_alloc returns zeroed memory or NULL.
 */
struct ml_pbscratch {
	void **p;
	size_t n, cap;
};
void *ml_pbscratch_alloc(struct ml_pbscratch *s, size_t n);
void ml_pbscratch_free(struct ml_pbscratch *s);

#endif
