/*
 * fuzz_mlg.c: the .mlg graph file reader, both ways a tool reads one:
 * decoding a buffer in memory (ml_mlg_decode) and streaming from a file
 * descriptor (ml_mlg_read_fd, as ml_model_load does for files and pipes).
 * Random changes to a compressed, checksummed frame rarely get past zstd,
 * so each input is also taken as frame content (the length-prefixed graph
 * message and the data blob) and wrapped in a valid header and frame: the
 * corpus holds such contents as well as whole files.
 */
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

#include "ml_impl.h"
#include "fuzz.h"

/*
 * read_from_fd: put the input in a memory file and read it back through
 * the streaming reader, with the 16 header bytes read first as io.c does.
 */
static void
read_from_fd(const uint8_t *data, size_t size)
{
	static int fd = -1;
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;

	if (size < 16)
		return;
	if (fd < 0 && (fd = memfd_create("fuzz_mlg", MFD_CLOEXEC)) < 0)
		return;
	if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size ||
	    lseek(fd, 16, SEEK_SET) != 16)
		return;
	if (ml_mlg_read_fd(&g, fd, data, 16, &e) == 0)
		ml_graph_free(g);
}

/* as_content: data as the content of a well-formed graph file. */
static void
as_content(const uint8_t *data, size_t size)
{
	static const uint8_t head[16] = { 'M', 'L', 'G', 0, 1 };
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;
	size_t cap = 16 + ZSTD_compressBound(size);
	uint8_t *file = ml_malloc(cap);

	if (file == NULL)
		return;
	memcpy(file, head, sizeof head);
	size_t n = ZSTD_compress(file + 16, cap - 16, data, size, 1);
	if (!ZSTD_isError(n) && ml_mlg_decode(&g, file, 16 + n, &e) == 0)
		fuzz_check_graph(g);
	ml_free(file);
}

int
fuzz_mlg(const uint8_t *data, size_t size)
{
	struct ml_err e = { 0 };
	struct ml_graph *g = NULL;

	read_from_fd(data, size);
	if (ml_mlg_decode(&g, data, size, &e) == 0)
		fuzz_check_graph(g);
	as_content(data, size);
	return 0;
}

FUZZ_TARGET(fuzz_mlg)
