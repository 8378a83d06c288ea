/*
 * text.h: internals shared by the files of the .mlt text codec (text_lex.c,
 * the lexer; text.c, the parser and decoder; text_layers.c, the layer
 * shorthands; text_enc.c, the encoder): tokens, parser state, and the
 * number, dtype name and base64 helpers that both directions must agree on.
 */
#ifndef ML_FMT_TEXT_H
#define ML_FMT_TEXT_H

#include "ml_impl.h"

#define MLT_MAX_DEPTH 32		/* subgraph nesting */
#define MLT_MAX_NAME 65536		/* bytes of a name or identifier */
#define MLT_MAX_STRING (64 << 20)	/* bytes of a quoted string as written */
#define MLT_MAX_NUMBER 128		/* characters of a number */
#define MLT_MAX_LIST (1 << 24)		/* elements of a list or tensor literal */
#define MLT_INLINE_MAX 16		/* the encoder writes tensors up to this many elements inline */

enum mlt_tk {
	MLT_EOF,
	MLT_IDENT,	/* [A-Za-z_][A-Za-z0-9_.]* */
	MLT_STRING,	/* "...": n bytes between the quotes, escapes not yet decoded */
	MLT_NUMBER,
	MLT_BASE64,	/* base64"...": n bytes between the quotes */
	MLT_ARROW,	/* => */
	MLT_PUNCT,	/* one of ( ) [ ] { } < > , = : . ? */
};

struct mlt_tok {
	enum mlt_tk kind;
	const char *s;
	size_t n;
	int line, col;
	bool is_float;		/* NUMBER: has a fraction, exponent, inf or nan */
};

/* The lexer's position: what follows the current token. */
struct mlt_pos {
	const char *p;
	int line, col;
};

struct mlt_parser {
	const char *text, *end;
	const char *path;
	struct mlt_tok tok;	/* the current token, not yet consumed */
	struct mlt_pos pos;	/* where the token after tok starts */
	struct ml_err *e;
	uint64_t seed;
	int depth;
	char *sbuf;		/* scratch for decoded strings */
	size_t sbuf_cap;
};

/*
 * struct mlt_shape: what the decoder knows of a value's type while it reads
 * a graph body, for sizing the parameters of layer shorthands.
 */
struct mlt_shape {
	bool known;
	struct ml_tval v;	/* dtype, rank, dims; data never set */
};

/* struct mlt_gstate: the decoder's state for one graph. */
struct mlt_gstate {
	struct ml_graph *g;
	uint8_t *declared;	/* per tensor: a declaration was read */
	struct mlt_shape *shp;	/* per tensor: shapes found while expanding */
	int cap;		/* capacity of declared and shp */
	int prev;		/* the value the next layer reads, or -1 */
	int nlayer[16];		/* per layer kind: how many were expanded */
};

/* Layer arguments: `name = value` or a positional value. */
struct mlt_larg {
	struct mlt_tok at;	/* the argument, for messages */
	char key[64];		/* "" for a positional argument */
	struct mlt_tok val;	/* IDENT, NUMBER or STRING; kind PUNCT '[' for a list */
	int n;			/* list: element count */
	int64_t ints[ML_MAX_RANK * 2];
	bool used;
};

struct mlt_strv {
	char **v;
	int n, cap;
};

/*
 * text_lex.c. The readers consume the current token (take_*) or look at a
 * given one (tok_*); on failure they have filled p->e with the position.
 */
int mlt_err(struct mlt_parser *p, const struct mlt_tok *at, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int mlt_err_expected(struct mlt_parser *p, const char *what);
int mlt_nomem(struct mlt_parser *p);
int mlt_next(struct mlt_parser *p);
int mlt_peek_tok(struct mlt_parser *p, struct mlt_tok *t);
bool mlt_is(const struct mlt_tok *t, char c);
bool mlt_word(const struct mlt_tok *t, const char *w);
bool mlt_is_name(const struct mlt_tok *t);
int mlt_expect(struct mlt_parser *p, char c);
/* mlt_tok_text: an identifier's text or a string's bytes, in scratch valid until the next call. */
int mlt_tok_text(struct mlt_parser *p, const struct mlt_tok *t, char **out, size_t *len);
/* mlt_tok_cstr: like mlt_tok_text, refusing NUL bytes and texts over max bytes. */
int mlt_tok_cstr(struct mlt_parser *p, const struct mlt_tok *t, char **out, size_t max);
int mlt_take_name(struct mlt_parser *p, char **out);	/* a new ml_malloc'd copy */
int mlt_take_string(struct mlt_parser *p, struct ml_graph *g, char **out, size_t *len, bool cstr);
int mlt_tok_int(struct mlt_parser *p, const struct mlt_tok *t, int64_t *v);
int mlt_tok_u64(struct mlt_parser *p, const struct mlt_tok *t, uint64_t *v);
int mlt_take_int(struct mlt_parser *p, int64_t lo, int64_t hi, int64_t *v);
/* mlt_tok_double: a number as the nearest double. */
int mlt_tok_double(struct mlt_parser *p, const struct mlt_tok *t, double *v);
/* mlt_attr_float: a float attribute: decimal as the nearest float32, hexadecimal exactly. */
int mlt_attr_float(struct mlt_parser *p, const struct mlt_tok *t, double *v);
int mlt_strv_push(struct mlt_strv *sv, char *s);	/* takes s, frees it on failure */
void mlt_strv_free(struct mlt_strv *sv);

/* text.c */
int mlt_gs_grow(struct mlt_gstate *gs);
void mlt_shape_of(struct mlt_gstate *gs, int ti, struct ml_tval *out);
void mlt_infer_node(struct mlt_gstate *gs, int ni);

/* text_layers.c */
bool mlt_is_layer(const struct mlt_tok *t);
/*
 * mlt_layer: read the layer statement whose keyword is the current token
 * and expand it into gs's graph; out_name is the name written before it, or
 * NULL.
 */
int mlt_layer(struct mlt_parser *p, struct mlt_gstate *gs, const struct mlt_tok *kw,
	      const char *out_name);

/* Shared helpers (text_enc.c). */
extern const char *const mlt_dtype_names[ML_DTYPE_MAX];
enum ml_dtype mlt_dtype_lookup(const char *s, size_t n, bool *ok);
/* mlt_fmt_f32/f64: the shortest decimal that reads back as exactly v. */
void mlt_fmt_f32(float v, char *buf, size_t n);
void mlt_fmt_f64(double v, char *buf, size_t n);
/*
 * mlt_elem_read: convert the number text s (n bytes) to one element of type
 * dt at dst; a static message on failure, NULL on success.
 */
const char *mlt_elem_read(const char *s, size_t n, enum ml_dtype dt, void *dst);
size_t mlt_b64_len(size_t nbytes);
void mlt_b64_encode(const uint8_t *src, size_t n, char *dst);
/* mlt_b64_table: per byte, its 6-bit value, or -1 bad, -2 white space, -3 '='. */
const int8_t *mlt_b64_table(void);
/* mlt_b64_decoded_len: the bytes n characters decode to (white space skipped), or -1. */
int64_t mlt_b64_decoded_len(const char *s, size_t n);
/* mlt_b64_decode: decode exactly dlen bytes; -1 on a bad character or length. */
int mlt_b64_decode(const char *s, size_t n, uint8_t *dst, size_t dlen);

#endif
