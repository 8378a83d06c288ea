/*
 * cl_prog.c: OpenCL programs from the embedded kernels/ sources: built
 * once per (device, file, options), their binaries cached on disk so that
 * a tool's second start loads instead of compiling, and their kernels kept
 * for reuse. Other per-device results (gemm.c's measured tile) are kept in
 * the same folder under the same kind of key (mlcl_cache_path). A cached
 * binary carries its length and hash and is loaded only when both match;
 * a cache folder that cannot be written is noted once (ml_cache_note).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cl/cl.h"

struct mlcl_kern {
	char name[64];
	cl_kernel k;
	struct mlcl_kern *next;
};

struct mlcl_prog {
	char file[64];
	char *options;
	cl_program p;
	struct mlcl_kern *kernels;
	struct mlcl_prog *next;
};

static uint64_t
fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 1099511628211ull;
	}
	return h;
}

/*
 * source: the text of kernels/FILE.cl (or of FILE itself when it names a
 * .def), from ML_KERNEL_DIR when set, else the embedded copy. *owned says
 * whether the caller frees it. Every program of kernels/ is built from
 * three strings: lib/act.def (the activation and unary-function codes of
 * the C code, so always the embedded copy, which the library was built
 * with), kernels/prelude.cl (the storage macros and activations they
 * share) and its own file; the last two come from the same place.
 */
static int
source(const char *file, const char **src, size_t *len, bool *owned, struct ml_err *e)
{
	const char *dir = getenv("ML_KERNEL_DIR");
	bool def = strstr(file, ".def") != NULL;
	char name[96];
	snprintf(name, sizeof name, def ? "%s" : "%s.cl", file);
	*owned = false;
	if (dir != NULL && dir[0] != '\0' && !def) {
		char path[4096];
		uint8_t *buf;
		snprintf(path, sizeof path, "%s/%s", dir, name);
		ML_TRY(ml_read_file(path, &buf, len, e));
		*src = (const char *)buf;
		*owned = true;
		return 0;
	}
	for (const struct ml_kernel_src *k = ml_kernel_srcs; k->name != NULL; k++)
		if (strcmp(k->name, name) == 0) {
			*src = k->src;
			*len = k->len;
			return 0;
		}
	return ml_fail(e, ML_ENOTSUP, "no OpenCL kernel source '%s' in this build", name);
}

/* the strings of one program: act.def, prelude.cl and FILE.cl, or a generated source alone */
struct progsrc {
	int n;
	const char *s[3];
	size_t len[3];
	bool owned[3];
};

static void
progsrc_free(struct progsrc *ps)
{
	for (int i = 0; i < ps->n; i++)
		if (ps->owned[i])
			ml_free((void *)ps->s[i]);
	ps->n = 0;
}

/* progsrc_load: file's strings, or gen (glen bytes) alone when not NULL */
static int
progsrc_load(struct progsrc *ps, const char *file, const char *gen, size_t glen, struct ml_err *e)
{
	*ps = (struct progsrc){ 0 };
	if (gen != NULL) {
		*ps = (struct progsrc){ .n = 1, .s = { gen }, .len = { glen } };
		return 0;
	}
	static const char *const shared[] = { "act.def", "prelude" };
	for (int i = 0; i < 3; i++) {
		const char *f = i < 2 ? shared[i] : file;
		int rc = source(f, &ps->s[i], &ps->len[i], &ps->owned[i], e);
		if (rc < 0) {
			progsrc_free(ps);
			return i < 2 ? rc : -1;
		}
		ps->n = i + 1;
	}
	return 0;
}

/* cache_dir: the binary cache folder into buf, or false when disabled. */
static bool
cache_dir(char *buf, size_t n)
{
	const char *c = getenv("ML_CL_CACHE");
	if (c != NULL && strcmp(c, "0") == 0)
		return false;
	if (c != NULL && c[0] != '\0') {
		snprintf(buf, n, "%s", c);
		return true;
	}
	const char *x = getenv("XDG_CACHE_HOME");
	if (x != NULL && x[0] == '/') {
		snprintf(buf, n, "%s/ml", x);
		return true;
	}
	const char *h = getenv("HOME");
	if (h == NULL || h[0] == '\0')
		return false;
	snprintf(buf, n, "%s/.cache/ml", h);
	return true;
}

/*
 * key: the disk cache key of kernels/FILE.cl on d: device name, driver and
 * device version, the file, the options (or another tag) and the sources
 * (the prelude and the file, or the generated text).
 */
static uint64_t
key(const struct mlcl_dev *d, const char *file, const char *tag, const struct progsrc *ps)
{
	uint64_t h = 1469598103934665603ull;
	h = fnv(h, d->name, strlen(d->name) + 1);
	h = fnv(h, d->driver, strlen(d->driver) + 1);
	h = fnv(h, d->version, strlen(d->version) + 1);
	h = fnv(h, file, strlen(file) + 1);
	h = fnv(h, tag, strlen(tag) + 1);
	for (int i = 0; i < ps->n; i++)
		h = fnv(h, ps->s[i], ps->len[i]);
	return h;
}

static void
mkdirs(const char *dir)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", dir);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(tmp, 0755);
			*p = '/';
		}
	mkdir(tmp, 0755);
}

/*
 * A cached binary file is a header, then the binary: the magic "MLCLBIN1",
 * the binary's length and its 64-bit FNV-1a hash, each as 8 little-endian
 * bytes. The driver is never handed a file whose length or hash disagrees
 * (a write cut short, a damaged disk, a file of an older build, one
 * edited by hand): that is a miss, and the program is built from its
 * source and the file written again. FNV-1a finds damage, not an
 * attacker, who could write the hash too; the cache folder is the user's.
 */
#define BIN_MAGIC "MLCLBIN1"
#define BIN_HDR 24

static void
put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* note_unwritable: say once (ml_cache_note) that the cache folder cannot be written. */
static void
note_unwritable(const char *dir, const struct ml_err *e)
{
	const char *why = strstr(e->msg, "': ");
	ml_cache_note("the OpenCL cache folder '%s' cannot be written (%s): programs are built "
		      "and tuning measured again at every start", dir,
		      why != NULL ? why + 3 : e->msg);
}

/* load_binary: a program from the disk cache, built; NULL on any miss. */
static cl_program
load_binary(struct mlcl_dev *d, const char *path, const char *opts)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	struct ml_err e = { 0 };
	if (access(path, R_OK) != 0 || ml_read_file(path, &buf, &len, &e) < 0)
		return NULL;
	if (len < BIN_HDR || memcmp(buf, BIN_MAGIC, 8) != 0 || get_le64(buf + 8) != len - BIN_HDR ||
	    get_le64(buf + 16) != fnv(1469598103934665603ull, buf + BIN_HDR, len - BIN_HDR)) {
		ml_free(buf);
		return NULL;
	}
	cl_int st, bst;
	const unsigned char *bin = buf + BIN_HDR;
	len -= BIN_HDR;
	cl_program p = clCreateProgramWithBinary(d->ctx, 1, &d->id, &len, &bin, &bst, &st);
	ml_free(buf);
	if (p == NULL || st != CL_SUCCESS || bst != CL_SUCCESS) {
		if (p != NULL)
			clReleaseProgram(p);
		return NULL;
	}
	if (clBuildProgram(p, 1, &d->id, opts, NULL, NULL) != CL_SUCCESS) {
		clReleaseProgram(p);
		return NULL;
	}
	return p;
}

/* save_binary: write p's binary to path atomically; failures are ignored. */
static void
save_binary(struct mlcl_dev *d, cl_program p, const char *dir, const char *path)
{
	size_t len = 0;
	if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL) != CL_SUCCESS ||
	    len == 0)
		return;
	uint8_t *file = ml_malloc(len + BIN_HDR);
	if (file == NULL)
		return;
	unsigned char *bin = file + BIN_HDR;
	(void)d;
	if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS) {
		struct ml_err e = { 0 };
		memcpy(file, BIN_MAGIC, 8);
		put_le64(file + 8, len);
		put_le64(file + 16, fnv(1469598103934665603ull, bin, len));
		mkdirs(dir);
		if (ml_write_atomic(path, file, len + BIN_HDR, &e) < 0)
			note_unwritable(dir, &e);
	}
	ml_free(file);
}

/* build: program file from its source, gen (glen bytes) when not NULL */
static int
build(struct mlcl_dev *d, const char *file, const char *gen, size_t glen, const char *options,
      cl_program *out, struct ml_err *e)
{
	struct progsrc ps;
	char opts[1024];

	*out = NULL;
	snprintf(opts, sizeof opts, "-cl-std=CL1.2 -DML_WG=%zu%s%s", mlcl_wg(d, 1 << 20),
		 options != NULL ? " " : "", options != NULL ? options : "");
	ML_TRY(progsrc_load(&ps, file, gen, glen, e));
	if (mlcl_fault("build")) {
		progsrc_free(&ps);
		return ml_fail(e, ML_ECL, "cannot build kernels/%s.cl on '%s': "
			       "CL_BUILD_PROGRAM_FAILURE (ML_CL_FAULT=build)", file, d->name);
	}
	uint64_t h = key(d, file, opts, &ps);
	char dir[3500], path[4096];
	bool cache = cache_dir(dir, sizeof dir);
	if (cache) {
		snprintf(path, sizeof path, "%s/%s-%016llx.bin", dir, file, (unsigned long long)h);
		if ((*out = load_binary(d, path, opts)) != NULL) {
			d->n_cached++;
			progsrc_free(&ps);
			return 0;
		}
	}
	cl_int st;
	cl_program p = clCreateProgramWithSource(d->ctx, (cl_uint)ps.n, ps.s, ps.len, &st);
	progsrc_free(&ps);
	if (p == NULL || st != CL_SUCCESS) {
		if (e != NULL)
			e->cl_status = st;
		return ml_fail(e, ML_ECL, "cannot make program kernels/%s.cl: %s", file,
			       mlcl_status_str(st));
	}
	/* the compiler takes seconds where nothing is cached yet: say so */
	const struct ml_progress *pg = ml_progress_builds();
	char what[96];
	snprintf(what, sizeof what, "building OpenCL program %s.cl (once)", file);
	ml_progress_report(pg, what, 0, 1);
	st = clBuildProgram(p, 1, &d->id, opts, NULL, NULL);
	ml_progress_report(pg, what, 1, 1);
	if (st != CL_SUCCESS) {
		char log[400] = "";
		clGetProgramBuildInfo(p, d->id, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
		log[sizeof log - 1] = '\0';
		/* the first line that says something */
		char *l = log;
		while (*l == '\n' || *l == ' ')
			l++;
		char *nl = strchr(l, '\n');
		if (nl != NULL)
			*nl = '\0';
		clReleaseProgram(p);
		if (e != NULL)
			e->cl_status = st;
		return ml_fail(e, ML_ECL, "cannot build kernels/%s.cl on '%s': %s%s%s", file,
			       d->name, mlcl_status_str(st), l[0] ? ": " : "", l);
	}
	d->n_built++;
	if (cache)
		save_binary(d, p, dir, path);
	*out = p;
	return 0;
}

int
mlcl_kernel(struct mlcl_dev *d, const char *file, const char *kname, const char *options,
	    cl_kernel *out, struct ml_err *e)
{
	return mlcl_kernel_src(d, file, NULL, 0, kname, options, out, e);
}

int
mlcl_kernel_src(struct mlcl_dev *d, const char *file, const char *src, size_t len,
		const char *kname, const char *options, cl_kernel *out, struct ml_err *e)
{
	struct mlcl_prog *pr;
	const char *o = options != NULL ? options : "";

	*out = NULL;
	for (pr = d->progs; pr != NULL; pr = pr->next)
		if (strcmp(pr->file, file) == 0 && strcmp(pr->options, o) == 0)
			break;
	if (pr == NULL) {
		double t0 = ml_now();
		cl_program p;
		int rc = build(d, file, src, len, options, &p, e);
		d->t_programs += ml_now() - t0;
		if (rc < 0)
			return rc;
		if ((pr = calloc(1, sizeof *pr)) == NULL || (pr->options = strdup(o)) == NULL) {
			free(pr);
			clReleaseProgram(p);
			return ml_fail(e, ML_ENOMEM, "out of memory");
		}
		snprintf(pr->file, sizeof pr->file, "%s", file);
		pr->p = p;
		pr->next = d->progs;
		d->progs = pr;
	}
	for (struct mlcl_kern *k = pr->kernels; k != NULL; k = k->next)
		if (strcmp(k->name, kname) == 0) {
			*out = k->k;
			return 0;
		}
	cl_int st;
	cl_kernel k = clCreateKernel(pr->p, kname, &st);
	if (k == NULL || st != CL_SUCCESS) {
		if (e != NULL)
			e->cl_status = st;
		return ml_fail(e, ML_ECL, "no kernel '%s' in kernels/%s.cl: %s", kname, file,
			       mlcl_status_str(st));
	}
	struct mlcl_kern *kk = calloc(1, sizeof *kk);
	if (kk == NULL) {
		clReleaseKernel(k);
		return ml_fail(e, ML_ENOMEM, "out of memory");
	}
	snprintf(kk->name, sizeof kk->name, "%s", kname);
	kk->k = k;
	kk->next = pr->kernels;
	pr->kernels = kk;
	*out = k;
	return 0;
}

bool
mlcl_cache_path(const struct mlcl_dev *d, const char *file, const char *tag, const char *ext,
		char *buf, size_t n)
{
	struct progsrc ps;
	char dir[3500];
	struct ml_err e = { 0 };
	if (!cache_dir(dir, sizeof dir) || progsrc_load(&ps, file, NULL, 0, &e) < 0)
		return false;
	uint64_t h = key(d, file, tag, &ps);
	progsrc_free(&ps);
	return snprintf(buf, n, "%s/%s-%s-%016llx.%s", dir, file, tag, (unsigned long long)h,
			ext) < (int)n;
}

bool
mlcl_cache_write(const char *path, const void *data, size_t n)
{
	char dir[4096];
	struct ml_err e = { 0 };
	snprintf(dir, sizeof dir, "%s", path);
	char *sl = strrchr(dir, '/');
	if (sl != NULL && sl != dir) {
		*sl = '\0';
		mkdirs(dir);
	}
	if (ml_write_atomic(path, data, n, &e) == 0)
		return true;
	note_unwritable(dir, &e);
	return false;
}
