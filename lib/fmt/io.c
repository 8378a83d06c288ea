/*
 * io.c: model format detection and the model load/save entry points, over
 * lib/util/file.c's reading and atomic writing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ml_impl.h"

static const char *
ext_of(const char *path)
{
	const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
	if (dot == NULL || (slash != NULL && dot < slash))
		return "";
	return dot + 1;
}

enum ml_format
ml_format_from_name(const char *s)
{
	if (s == NULL)
		return ML_FMT_AUTO;
	const char *x = strchr(s, '.') != NULL ? ext_of(s) : s;
	if (strcmp(x, "mlg") == 0)
		return ML_FMT_MLG;
	if (strcmp(x, "onnx") == 0)
		return ML_FMT_ONNX;
	if (strcmp(x, "mlt") == 0)
		return ML_FMT_MLT;
	return ML_FMT_AUTO;
}

enum ml_format
ml_format_detect(const uint8_t *buf, size_t len, const char *path)
{
	if (len >= 4 && memcmp(buf, "MLG", 4) == 0)
		return ML_FMT_MLG;
	/*
	 * ONNX has no magic: a ModelProto starts with field 1 (ir_version,
	 * varint, tag 0x08) in practice, or another small field tag.
	 */
	enum ml_format byext = path != NULL ? ml_format_from_name(ext_of(path)) : ML_FMT_AUTO;
	if (byext != ML_FMT_AUTO)
		return byext;
	if (len > 0 && buf[0] == 0x08)
		return ML_FMT_ONNX;
	/* text: printable start */
	size_t i = 0;
	while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r'))
		i++;
	if (i < len && (buf[i] == '<' || buf[i] == '#' || buf[i] == '_' ||
			(buf[i] >= 'a' && buf[i] <= 'z') || (buf[i] >= 'A' && buf[i] <= 'Z')))
		return ML_FMT_MLT;
	return ML_FMT_AUTO;
}

static char *
dir_of(const char *path)
{
	char *p = strdup(path);
	if (p == NULL)
		return NULL;
	char *d = strdup(dirname(p));
	free(p);
	return d;
}

/* read up to n bytes, retrying short reads; returns the count or -1 */
static ssize_t
read_full(int fd, uint8_t *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = read(fd, p + got, n - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (k == 0)
			break;
		got += (size_t)k;
	}
	return (ssize_t)got;
}

/*
 * load_any: decode a model from path. A graph file is decompressed as it
 * is read (its weights are then in memory once); other formats are read
 * whole first.
 */
static int
load_any(struct ml_graph **g, const char *path, const char *shown, enum ml_format fmt,
	 struct ml_err *e)
{
	bool is_stdin = strcmp(path, "-") == 0;
	uint8_t head[16], *buf = NULL;
	size_t len = 0;
	int rc;

	int fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ml_fail(e, errno == ENOENT ? ML_EINVAL : ML_EIO, "cannot open '%s': %s", shown,
			       strerror(errno));
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
		if (!is_stdin)
			close(fd);
		return ml_fail(e, ML_EINVAL, "'%s' is a directory", shown);
	}
	ssize_t hn = read_full(fd, head, sizeof head);
	if (hn < 0) {
		rc = ml_fail(e, ML_EIO, "cannot read '%s': %s", shown, strerror(errno));
		goto out;
	}
	if ((fmt == ML_FMT_AUTO || fmt == ML_FMT_MLG) && hn == (ssize_t)sizeof head &&
	    memcmp(head, "MLG", 4) == 0) {
		rc = ml_mlg_read_fd(g, fd, head, sizeof head, e);
		goto out;
	}
	/* the rest of the file, after the bytes already read */
	if ((rc = ml_read_fd(fd, shown, (size_t)hn, &buf, &len, e)) < 0)
		goto out;
	memcpy(buf, head, (size_t)hn);
	if (fmt == ML_FMT_AUTO)
		fmt = ml_format_detect(buf, len, is_stdin ? NULL : path);
	switch (fmt) {
	case ML_FMT_MLG:
		rc = ml_mlg_decode(g, buf, len, e);
		break;
	case ML_FMT_ONNX: {
		char *dir = is_stdin ? strdup(".") : dir_of(path);
		rc = ml_onnx_decode(g, buf, len, dir, e);
		free(dir);
		break;
	}
	case ML_FMT_MLT:
		rc = ml_text_decode(g, (const char *)buf, len, shown, e);
		break;
	default:
		rc = ml_fail(e, ML_EFORMAT, "not a model file (mlg, onnx or mlt)");
		break;
	}
out:
	ml_free(buf);
	if (!is_stdin)
		close(fd);
	return rc;
}

int
ml_model_load(struct ml_graph **out, const char *path, enum ml_format fmt, struct ml_err *e)
{
	struct ml_graph *g = NULL;
	const char *shown = strcmp(path, "-") == 0 ? "<stdin>" : path;
	int rc;

	*out = NULL;
	rc = load_any(&g, path, shown, fmt, e);
	if (rc == 0 && (rc = ml_graph_toposort(g, e)) == 0 && (rc = ml_graph_validate(g, e)) == 0)
		rc = ml_graph_infer(g, e);
	if (rc < 0) {
		ml_graph_free(g);
		/* name the file in front of the message, once */
		if (e != NULL && strncmp(e->msg, shown, strlen(shown)) != 0 &&
		    strncmp(e->msg, "cannot ", 7) != 0 && strncmp(e->msg, "'", 1) != 0)
			ml_err_prefix(e, shown);
		return rc;
	}
	*out = g;
	return 0;
}

int
ml_model_save(const struct ml_graph *g, const char *path, enum ml_format fmt, struct ml_err *e)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	if (fmt == ML_FMT_AUTO)
		fmt = strcmp(path, "-") == 0 ? ML_FMT_MLG : ml_format_from_name(ext_of(path));
	if (fmt == ML_FMT_AUTO)
		fmt = ML_FMT_MLG;
	switch (fmt) {
	case ML_FMT_MLG:
		rc = ml_mlg_encode(g, &buf, &len, e);
		break;
	case ML_FMT_ONNX:
		rc = ml_onnx_encode(g, &buf, &len, e);
		break;
	case ML_FMT_MLT: {
		char *t = NULL;
		rc = ml_text_encode(g, &t, &len, e);
		buf = (uint8_t *)t;
		break;
	}
	default:
		return ml_fail(e, ML_EINVAL, "unknown output format");
	}
	if (rc < 0)
		return rc;
	rc = ml_write_atomic(path, buf, len, e);
	ml_free(buf);
	return rc;
}
