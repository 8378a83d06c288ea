/*
 * file.c: whole-file reading (files and stdin) and atomic writing through a
 * temporary file and rename (through symbolic links, keeping the mode,
 * cleaning up after signals and after writers that were killed), which
 * every layer that reads or writes a file uses: the formats, the OpenCL
 * caches, the cost model, the profiler's reports.
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

int
ml_read_fd(int fd, const char *shown, size_t prefix, uint8_t **buf, size_t *len,
	   struct ml_err *e)
{
	size_t cap = 1 << 16, n = prefix;
	uint8_t *p = NULL;
	struct stat st;
	bool hit0 = ml_alloc_cap_hit();

	if (fstat(fd, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return ml_fail(e, ML_EINVAL, "'%s' is a directory", shown);
		if (S_ISREG(st.st_mode) && st.st_size > 0)
			cap = (size_t)st.st_size + 1;
	}
	cap += prefix;
	if ((p = ml_malloc(cap + 1)) == NULL)
		goto nomem;
	for (;;) {
		if (n == cap) {
			if (cap > SIZE_MAX / 2 - 1)
				goto nomem;
			uint8_t *q = ml_realloc(p, cap * 2 + 1);
			if (q == NULL)
				goto nomem;
			p = q;
			cap *= 2;
		}
		ssize_t k = read(fd, p + n, cap - n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			ml_free(p);
			return ml_fail(e, ML_EIO, "cannot read '%s': %s", shown, strerror(err));
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
	p[n] = 0;
	*buf = p;
	*len = n;
	return 0;
nomem:
	ml_free(p);
	/*
	 * The cap refused it (or the size does not fit in memory at all): the
	 * input is too large, which the tools report as such; otherwise the
	 * system is out of memory (ulimit -v, overcommit off), a runtime
	 * failure.
	 */
	if ((ml_alloc_cap_hit() && !hit0) || cap > SIZE_MAX / 2 - 1)
		return ml_fail(e, ML_ENOMEM, "'%s': file too large for the allocation cap", shown);
	return ml_fail(e, ML_ENOMEM, "cannot read '%s': out of memory", shown);
}

int
ml_read_file(const char *path, uint8_t **buf, size_t *len, struct ml_err *e)
{
	bool is_stdin = strcmp(path, "-") == 0;
	const char *shown = is_stdin ? "<stdin>" : path;
	int fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return ml_fail(e, errno == ENOENT ? ML_EINVAL : ML_EIO, "cannot open '%s': %s", shown,
			       strerror(errno));
	int rc = ml_read_fd(fd, shown, 0, buf, len, e);
	if (!is_stdin)
		close(fd);
	return rc;
}

static int
write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len > 0) {
		ssize_t k = write(fd, p, len);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += k;
		len -= (size_t)k;
	}
	return 0;
}

/*
 * The temporary files being written, for ml_tmp_cleanup: a signal handler
 * removes them before the process dies. Their names live in static slots,
 * never freed, so a handler running in another thread never reads freed
 * memory; a slot holds the template while mkstemp fills it in, so a file
 * is never created unregistered. Slots are claimed with a compare-and-swap
 * because several threads may write (the OpenCL binary cache, the cost
 * model). A write that finds no slot (32 at once, or a name of 4 KiB) is
 * atomic all the same, only not cleaned up after a signal.
 */
#define TMP_SLOTS 32
#define TMP_NAME 4096
static char tmp_names[TMP_SLOTS][TMP_NAME];
static atomic_int tmp_state[TMP_SLOTS];	/* 0 free, 1 being named, 2 a name to remove */

/* tmp_claim: a slot holding the template "dst.tmp.XXXXXX", or -1 when none is free. */
static int
tmp_claim(const char *dst)
{
	if (strlen(dst) + sizeof ".tmp.XXXXXX" > TMP_NAME)
		return -1;
	for (int i = 0; i < TMP_SLOTS; i++) {
		int expect = 0;
		if (atomic_compare_exchange_strong(&tmp_state[i], &expect, 1)) {
			snprintf(tmp_names[i], TMP_NAME, "%s.tmp.XXXXXX", dst);
			atomic_store(&tmp_state[i], 2);
			return i;
		}
	}
	return -1;
}

static void
tmp_release(int slot)
{
	if (slot >= 0)
		atomic_store(&tmp_state[slot], 0);
}

void
ml_tmp_cleanup(void)
{
	for (int i = 0; i < TMP_SLOTS; i++)
		if (atomic_load(&tmp_state[i]) == 2)
			unlink(tmp_names[i]);
}

/*
 * is_tmp_of: whether name is base ".tmp." and six characters of mkstemp's
 * alphabet: the name of a temporary file of ml_write_atomic for base.
 */
static bool
is_tmp_of(const char *name, const char *base)
{
	size_t n = strlen(base);
	if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp.", 5) != 0 ||
	    strlen(name + n + 5) != 6)
		return false;
	for (const char *c = name + n + 5; *c != '\0'; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
			return false;
	return true;
}

/*
 * remove_stale: remove the temporary files of path that a writer killed
 * before it could clean up (SIGKILL, a crash, a power cut) left in the
 * folder: those named as ours, regular files of this user, last written
 * over ML_TMP_STALE_S seconds ago and not locked. A live writer holds an
 * flock on its temporary file until the rename, so a slow concurrent
 * write of the same target is never removed; the age covers the moment
 * between its mkstemp and its flock. Best effort: errors are ignored.
 */
#define ML_TMP_STALE_S 60
static void
remove_stale(const char *path)
{
	char *dcopy = strdup(path), *bcopy = strdup(path);
	DIR *d = NULL;
	if (dcopy == NULL || bcopy == NULL)
		goto out;
	const char *base = basename(bcopy);
	if ((d = opendir(dirname(dcopy))) == NULL)
		goto out;
	time_t now = time(NULL);
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		struct stat st;
		if (!is_tmp_of(de->d_name, base) ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
		    now - st.st_mtime < ML_TMP_STALE_S)
			continue;
		int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			unlinkat(dirfd(d), de->d_name, 0);
		close(fd);
	}
out:
	if (d != NULL)
		closedir(d);
	free(dcopy);
	free(bcopy);
}

/* sync_dir: fsync the folder of path, so that a rename into it survives a crash. */
static int
sync_dir(const char *path)
{
	char *copy = strdup(path);
	if (copy == NULL)
		return 0;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd < 0)
		return 0;
	/* file systems that cannot sync a folder say EINVAL (or EROFS, EBADF): nothing to do */
	int bad = fsync(fd) < 0 && errno == EIO ? EIO : 0;
	close(fd);
	return bad;
}

/* write_device: write buf to a path that is not a regular file (/dev/null, /dev/full, a FIFO). */
static int
write_device(const char *path, const char *shown, const void *buf, size_t len, struct ml_err *e)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return ml_fail(e, ML_EIO, "cannot open '%s': %s", shown, strerror(errno));
	int bad = write_all(fd, buf, len) < 0 ? errno : 0;
	if (close(fd) < 0 && bad == 0)
		bad = errno;
	if (bad)
		return ml_fail(e, ML_EIO, "cannot write '%s': %s", shown, strerror(bad));
	return 0;
}

/*
 * resolve_link: where writing path goes: itself (*dst = path, *real NULL),
 * or, for a symbolic link, the file it names (*real, malloc'd, the caller
 * frees it). A link to nothing is refused rather than replaced by a file.
 */
static int
resolve_link(const char *path, char **real, const char **dst, struct ml_err *e)
{
	struct stat st;
	*real = NULL;
	*dst = path;
	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
		if ((*real = realpath(path, NULL)) == NULL) {
			int err = errno;
			return ml_fail(e, ML_EIO, "cannot write '%s': %s", path,
				       err == ENOENT ? "not writing through a dangling symbolic link"
						     : strerror(err));
		}
		*dst = *real;
	}
	return 0;
}

int
ml_write_atomic(const char *path, const void *buf, size_t len, struct ml_err *e)
{
	if (strcmp(path, "-") == 0) {
		if (write_all(STDOUT_FILENO, buf, len) < 0) {
			if (errno == EPIPE)
				return ml_fail(e, ML_EIO, "write error: broken pipe");
			return ml_fail(e, ML_EIO, "write error on stdout: %s", strerror(errno));
		}
		return 0;
	}
	/*
	 * A symbolic link is written through, as cp does: the file it names
	 * is replaced (atomically, in its own folder) and the link stays. A
	 * link to nothing is refused rather than replaced by a file.
	 */
	char *real = NULL;
	const char *dst = path;
	struct stat st;
	ML_TRY(resolve_link(path, &real, &dst, e));
	bool exists = stat(dst, &st) == 0;
	int rc = 0, slot = -1, fd = -1, bad = 0;
	char *tmp = NULL, *own = NULL;
	/* a device such as /dev/null or /dev/full cannot be renamed over: write to it directly */
	if (exists && !S_ISREG(st.st_mode)) {
		if (S_ISDIR(st.st_mode))
			rc = ml_fail(e, ML_EIO, "cannot write '%s': Is a directory", path);
		else
			rc = write_device(dst, path, buf, len, e);
		goto out;
	}
	remove_stale(dst);
	if ((slot = tmp_claim(dst)) >= 0) {
		tmp = tmp_names[slot];
	} else {
		size_t n = strlen(dst) + sizeof ".tmp.XXXXXX";
		if ((tmp = own = malloc(n)) == NULL) {
			rc = ml_fail(e, ML_ENOMEM, "out of memory");
			goto out;
		}
		snprintf(tmp, n, "%s.tmp.XXXXXX", dst);
	}
	if ((fd = mkstemp(tmp)) < 0) {
		rc = ml_fail(e, ML_EIO, "cannot write '%s': %s", path, strerror(errno));
		goto out;
	}
	/* held until the rename: remove_stale of another writer leaves a live file alone */
	(void)flock(fd, LOCK_EX);
	/*
	 * The new file gets the mode (and, where allowed, the owner) of the
	 * one it replaces, or the umask-derived mode of a new file; mkstemp
	 * made it 0600.
	 */
	mode_t mode;
	if (exists) {
		if (st.st_uid != geteuid() || st.st_gid != getegid())
			if (fchown(fd, st.st_uid, st.st_gid) < 0)
				(void)!fchown(fd, (uid_t)-1, st.st_gid);
		mode = st.st_mode & 07777;
	} else {
		mode_t um = umask(0);
		umask(um);
		mode = 0666 & ~um;
	}
	bad = write_all(fd, buf, len) < 0 ? errno : 0;
	if (bad == 0 && fchmod(fd, mode) < 0)
		bad = errno;
	if (bad == 0 && fsync(fd) < 0 && errno != EINVAL)
		bad = errno;
	if (bad == 0 && rename(tmp, dst) < 0)
		bad = errno;
	if (bad != 0)
		unlink(tmp);
	if (close(fd) < 0 && bad == 0)
		bad = errno;
	if (bad == 0)
		bad = sync_dir(dst);
	if (bad != 0)
		rc = ml_fail(e, ML_EIO, "cannot write '%s': %s", path, strerror(bad));
out:
	tmp_release(slot);
	free(own);
	free(real);
	return rc;
}

int
ml_write_check(const char *path, struct ml_err *e)
{
	if (strcmp(path, "-") == 0)
		return 0;
	char *real = NULL, *copy = NULL;
	const char *dst = path;
	struct stat st;
	int rc = 0;
	ML_TRY(resolve_link(path, &real, &dst, e));
	bool there = stat(dst, &st) == 0;
	if (there && S_ISDIR(st.st_mode)) {
		rc = ml_fail(e, ML_EIO, "cannot write '%s': Is a directory", path);
	} else if (there && !S_ISREG(st.st_mode)) {
		/* a device or FIFO is opened and written as it is */
		if (access(dst, W_OK) < 0)
			rc = ml_fail(e, ML_EIO, "cannot write '%s': %s", path, strerror(errno));
	} else if ((copy = strdup(dst)) == NULL) {
		rc = ml_fail(e, ML_ENOMEM, "out of memory");
	} else {
		/* the temporary file and the rename need a folder we may write in */
		const char *dir = dirname(copy);
		if (stat(dir, &st) < 0)
			rc = ml_fail(e, ML_EIO, "cannot write '%s': %s", path, strerror(errno));
		else if (!S_ISDIR(st.st_mode))
			rc = ml_fail(e, ML_EIO, "cannot write '%s': Not a directory", path);
		else if (access(dir, W_OK | X_OK) < 0)
			rc = ml_fail(e, ML_EIO, "cannot write '%s': %s", path, strerror(errno));
	}
	free(copy);
	free(real);
	return rc;
}

/*
 * The note of ml_cache_note: set by the first call, kept for the process.
 * A mutex, since OpenCL programs are built from several threads.
 */
static pthread_mutex_t note_mu = PTHREAD_MUTEX_INITIALIZER;
static char note_buf[512];

void
ml_cache_note(const char *fmt, ...)
{
	pthread_mutex_lock(&note_mu);
	if (note_buf[0] == '\0') {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(note_buf, sizeof note_buf, fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&note_mu);
}

const char *
ml_cache_note_get(void)
{
	pthread_mutex_lock(&note_mu);
	const char *n = note_buf[0] != '\0' ? note_buf : NULL;
	pthread_mutex_unlock(&note_mu);
	return n;
}

