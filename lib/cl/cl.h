/*
 * cl.h: the OpenCL layer's internal API (lib/cl): devices, programs built
 * from the embedded kernels/ sources and cached on disk, a buffer pool,
 * host<->device copies and kernel launches with profiling events.
 * Only lib/cl/ and the executor (lib/exec) include it; cl_mem
 * never reaches cmd/.
 *
 * Threading: one thread drives a device at a time (the executor's). The
 * device list is made once per process (mlcl_device is safe to call from
 * any thread).
 *
 * Fault injection: ML_CL_FAULT=noplatform|build|alloc|enqueue makes the
 * platform probe, a program build, a buffer allocation or a kernel launch
 * fail as the real failure would (the tests use it); clblast makes every
 * CLBlast call fail (clblast.c).
 */
#ifndef ML_CL_H
#define ML_CL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

#include "ml_impl.h"

/*
 * ML_CL: run an OpenCL call; on failure record the status and the call's
 * text in e and return ML_ECL from the enclosing function.
 */
#define ML_CL(e, call) do { cl_int s_ = (call); if (s_ != CL_SUCCESS) { \
	if ((e) != NULL) (e)->cl_status = s_; \
	return ml_fail((e), ML_ECL, "%s: %s", #call, mlcl_status_str(s_)); } } while (0)

/* mlcl_status_str: the CL_* name of an OpenCL status, e.g. "CL_OUT_OF_RESOURCES". */
const char *mlcl_status_str(cl_int s);

/*
 * struct mlcl_buf: a device buffer from the pool. refs counts the tensors
 * (views included) that use it; mlcl_buf_put returns it to the pool when
 * the last one lets go. size is the bytes the buffer holds (at least the
 * bytes asked for).
 */
struct mlcl_buf {
	cl_mem mem;
	size_t size;
	int refs;
	struct mlcl_buf *next;	/* private: the pool's free list */
};

struct mlcl_prog;

/* the GEMM's engines, and the shape classes each is chosen for (gemm.c) */
enum { MLCL_OWN = 0, MLCL_CLBLAST = 1 };
enum { MLCL_GEMM_SQUARE, MLCL_GEMM_TALL, MLCL_GEMM_BATCHED, MLCL_GEMM_GEMV, MLCL_GEMM_CLASSES };

/*
 * struct mlcl_tile: the GEMM's register tile (kernels/gemm.cl): mr rows by
 * vw * nv columns per work-item (vw the vector width: 4, 8 or 16), wg
 * work-items per work-group.
 */
struct mlcl_tile {
	int mr, vw, nv, wg;
};

/*
 * struct mlcl_dev: one OpenCL device, opened (context and queue made) by
 * mlcl_device. The queue is in-order with profiling enabled, so a buffer
 * may go back to the pool as soon as its last reader is enqueued.
 */
struct mlcl_dev {
	int index;		/* 0-based over all platforms' devices (cl:N) */
	cl_platform_id platform;
	cl_device_id id;
	cl_context ctx;		/* NULL until opened */
	cl_command_queue q;
	char name[128];
	char vendor[128];
	char driver[64];	/* CL_DRIVER_VERSION */
	char version[128];	/* CL_DEVICE_VERSION */
	char platform_name[128];
	cl_device_type type;
	cl_uint compute_units;
	cl_ulong global_mem, local_mem, max_alloc;
	size_t max_wg;		/* CL_DEVICE_MAX_WORK_GROUP_SIZE */
	size_t wg_multiple;	/* preferred work-group size multiple (8 when unknown) */
	bool has_fp16, has_fp64;	/* cl_khr_fp16, cl_khr_fp64 (reported; f16 needs neither) */
	bool lost;		/* a launch or copy failed: the device is not used again */
	/* private */
	struct mlcl_prog *progs;	/* built programs and their kernels */
	struct mlcl_buf *pool;		/* free buffers */
	size_t pool_bytes, live_bytes;	/* bytes in the pool / handed out */
	cl_event *evs;			/* with profiling on: events since mlcl_events_take */
	int n_evs, cap_evs;
	bool profiling;
	double clock_off;		/* ml_now() = profiling ns * 1e-9 + clock_off */
	double xfer_t[2];		/* with profiling on: the last blocking copy's start, end */
	bool xfer_timed;		/* xfer_t holds a copy not yet taken by mlcl_xfer_times */
	double t_setup;			/* seconds spent opening (context, queue) */
	double t_programs;		/* seconds spent loading or building programs */
	int n_built, n_cached;		/* programs compiled / loaded from the disk cache */
	struct mlcl_tile tile;		/* the GEMM's tile, once chosen (mlcl_gemm_tile) */
	const char *tile_how;		/* how it was chosen; NULL until then */
	double t_tune;			/* seconds spent measuring tiles and engines */
	/* the GEMM's engine per shape class (mlcl_gemm_engine), once chosen */
	unsigned char gemm_eng[MLCL_GEMM_CLASSES];	/* MLCL_OWN or MLCL_CLBLAST */
	const char *eng_how;		/* how it was chosen; NULL until then */
	char eng_note[96];		/* why CLBlast is not used, or its failure; "" if none */
	bool clb_failed[2];		/* CLBlast failed for f32 / f16 calls: ours from then on */
	bool eng_bad;			/* ML_CL_GEMM holds no engine's name */
};

/*
 * mlcl_count: the number of OpenCL devices over all platforms (0 when
 * there is no platform). Probes the ICD loader once per process; a probe
 * failure gives 0 and the reason in e (ML_ENODEV).
 */
int mlcl_count(struct ml_err *e);
/*
 * mlcl_info: borrow device i's description (fields above ctx filled, not
 * opened). NULL when i is out of range.
 */
const struct mlcl_dev *mlcl_info(int i);
/*
 * mlcl_device: device i, opened (context, in-order profiling queue). The
 * device belongs to the library for the rest of the process.
 * ML_ENODEV when there is no such device, ML_ECL when opening fails.
 */
int mlcl_device(int i, struct mlcl_dev **out, struct ml_err *e);

/*
 * mlcl_cache_path: the path of a disk-cache entry for d and kernels/FILE.cl
 * into buf: DIR/FILE-TAG-KEY.EXT in the program cache's folder, KEY hashing
 * d's name, driver and version, FILE, TAG and FILE's source, as a program's
 * key does, so the entry goes stale with them. False when the disk cache
 * is off or the path does not fit. mlcl_cache_write writes n bytes there
 * atomically (making the folder); false when it cannot.
 */
bool mlcl_cache_path(const struct mlcl_dev *d, const char *file, const char *tag, const char *ext,
		     char *buf, size_t n);
bool mlcl_cache_write(const char *path, const void *data, size_t n);

/*
 * mlcl_kernel: kernel kname of the program built from the embedded source
 * kernels/FILE.cl (file without ".cl", e.g. "elem") with build options
 * (NULL = none; the layer adds -cl-std and -DML_WG itself).
 * Programs are built once per (device, file, options) and the kernel is
 * borrowed from that cache (do not release it; set its arguments and
 * launch it before asking for it again elsewhere). Binaries are cached on
 * disk, keyed by device name, driver version, source hash and options,
 * under $ML_CL_CACHE, else $XDG_CACHE_HOME/ml, else ~/.cache/ml
 * (ML_CL_CACHE=0 disables the disk cache). ML_KERNEL_DIR=DIR reads
 * DIR/FILE.cl instead of the embedded copy, and DIR/prelude.cl, the text
 * every program of kernels/ starts with (a generated source is built
 * alone). A build failure returns ML_ECL
 * with the first line of the build log in e.
 */
int mlcl_kernel(struct mlcl_dev *d, const char *file, const char *kname, const char *options,
		cl_kernel *out, struct ml_err *e);
/*
 * mlcl_kernel_src: mlcl_kernel for a program generated at run time: src
 * (len bytes) is its text, file its name in both caches (at most 63
 * bytes, one per distinct source: the caller puts a hash of src in it).
 * src NULL is mlcl_kernel's embedded kernels/FILE.cl.
 */
int mlcl_kernel_src(struct mlcl_dev *d, const char *file, const char *src, size_t len,
		    const char *kname, const char *options, cl_kernel *out, struct ml_err *e);

/*
 * Buffers. mlcl_buf_get hands out a buffer of at least n bytes (n 0 gives
 * a small one) with refs 1, from the pool when one fits, else newly
 * created; ML_ENOMEM when the device cannot allocate it. mlcl_buf_put
 * drops a reference (NULL is a no-op). mlcl_pool_trim releases the free
 * buffers.
 */
int mlcl_buf_get(struct mlcl_dev *d, size_t n, struct mlcl_buf **out, struct ml_err *e);
void mlcl_buf_put(struct mlcl_dev *d, struct mlcl_buf *b);
void mlcl_pool_trim(struct mlcl_dev *d);

/*
 * Copies. mlcl_write copies n bytes from host src to buffer m at byte
 * offset off; it returns once src may be reused. mlcl_read copies back
 * into dst and waits for it (and for everything enqueued before).
 * mlcl_copy copies n bytes between buffers on the device (enqueued).
 */
int mlcl_write(struct mlcl_dev *d, cl_mem m, size_t off, const void *src, size_t n,
	       struct ml_err *e);
/*
 * mlcl_write_async: mlcl_write that returns at once: src must stay valid
 * and unchanged until the copy is done (until mlcl_finish, or a blocking
 * copy, on d's in-order queue).
 */
int mlcl_write_async(struct mlcl_dev *d, cl_mem m, size_t off, const void *src, size_t n,
		     struct ml_err *e);
int mlcl_read(struct mlcl_dev *d, cl_mem m, size_t off, void *dst, size_t n, struct ml_err *e);
int mlcl_copy(struct mlcl_dev *d, cl_mem dst, size_t doff, cl_mem src, size_t soff, size_t n,
	      struct ml_err *e);

/*
 * mlcl_launch: enqueue kernel k (arguments already set) over dims
 * dimensions of global size gws (local size lws, NULL = the driver's
 * choice). Records the event for profiling when the device profiles.
 * Every kernel launch of the library goes through here.
 */
int mlcl_launch(struct mlcl_dev *d, cl_kernel k, cl_uint dims, const size_t *gws,
		const size_t *lws, struct ml_err *e);
/* mlcl_launch1: mlcl_launch over n items in one dimension, work groups of mlcl_wg(d, n). */
int mlcl_launch1(struct mlcl_dev *d, cl_kernel k, size_t n, struct ml_err *e);
/* mlcl_argfail: fail op c for clSetKernelArg's status st (kept in c->err->cl_status). */
int mlcl_argfail(struct ml_opctx *c, cl_int st);
/* mlcl_finish: wait for everything enqueued on d. */
int mlcl_finish(struct mlcl_dev *d, struct ml_err *e);

/*
 * mlcl_wg: a 1-D work-group size for n work-items on d (a multiple of the
 * preferred multiple, at most max_wg), and mlcl_round_up(n, m).
 */
size_t mlcl_wg(const struct mlcl_dev *d, size_t n);
size_t mlcl_round_up(size_t n, size_t m);

/*
 * Profiling: mlcl_profile turns event recording on or off; mlcl_events_take
 * moves the events recorded since the last take into *evs (the caller
 * releases them with clReleaseEvent and frees the array with ml_free).
 * mlcl_event_times gives an event's start and end on the ml_now() clock
 * (after the event has completed; the device clock is fitted to ml_now()
 * when the device is opened).
 */
void mlcl_profile(struct mlcl_dev *d, bool on);
/*
 * mlcl_xfer_times: with profiling on, the start and end (ml_now() clock)
 * of the last blocking mlcl_write or mlcl_read as the device ran it: from
 * the copy's own start (CL_PROFILING_COMMAND_START), not from when it was
 * queued behind the kernels before it. 0 and the times, once per copy; -1
 * when there is none to give.
 */
int mlcl_xfer_times(struct mlcl_dev *d, double *start, double *end);
int mlcl_events_take(struct mlcl_dev *d, cl_event **evs, int *n);
int mlcl_event_times(struct mlcl_dev *d, cl_event ev, double *start, double *end);
/*
 * mlcl_record: hand ev, an event of work enqueued on d's queue by someone
 * other than mlcl_launch (CLBlast), to the profiling record: kept when d
 * profiles, else released. NULL is a no-op.
 */
void mlcl_record(struct mlcl_dev *d, cl_event ev);

/*
 * mlcl_fault: whether ML_CL_FAULT names what ("noplatform", "build",
 * "alloc", "enqueue").
 */
bool mlcl_fault(const char *what);

/*
 * The embedded kernel sources (generated from the kernels/ sources by
 * tools/cl2c.sh into $(B)/gen/kernels.c). name is "FILE.cl".
 */
struct ml_kernel_src {
	const char *name;
	const char *src;
	size_t len;
};
extern const struct ml_kernel_src ml_kernel_srcs[];

/* gemm.c, conv.c (clgemm) */

/*
 * GEMM (gemm.c, kernels/gemm.cl): strided-batched, row-major
 *   C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b],  b = 0 .. batch-1,
 * op(A) M x K (A is K x M when ta), op(B) K x N (B is N x K when tb), C M x N.
 * Offsets, leading dimensions and batch strides are in elements, not bytes;
 * A[b] starts at element a_off + b * stride_a of buffer A, and so on. A
 * batch stride of 0 broadcasts that operand (it is also packed only once).
 * With beta == 0, C is not read (it may hold NaNs). The work is enqueued on
 * d's in-order queue (through mlcl_launch, so it is profiled as the rest);
 * the call returns without waiting. A scratch buffer for the packed op(B)
 * ((N rounded up to the tile's columns) * K floats per batch; plus
 * (M rounded up to its rows) * K for op(A) with f16 or ML_GEMM_PACK_A=1, which
 * packs an f32 A too instead of reading it in place) comes from d's pool
 * and returns to it at once.
 * Returns 0, ML_EINVAL on a negative size or a leading dimension smaller
 * than a row, ML_ENOTSUP for a dimension over INT_MAX, ML_ENOMEM, ML_ECL.
 * mlcl_hgemm is the same on f16 buffers (A, B, C half; f32 arithmetic);
 * it needs no cl_khr_fp16 (vload_half/vstore_half are core OpenCL).
 * The engine (ours or CLBlast) is mlcl_gemm_engine's choice for the
 * call's shape class; ours uses mlcl_gemm_tile(d)'s tile, and its GEMV
 * kernel when M or N is 1. There is no event out-parameter: the
 * launches are recorded by mlcl_launch (CLBlast's by mlcl_record) when d
 * profiles, and the in-order queue orders them before whatever is
 * enqueued next. ML_EINVAL also for an invalid ML_CL_GEMM.
 */
int mlcl_sgemm(struct mlcl_dev *d, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
	       cl_mem A, size_t a_off, int64_t lda, cl_mem B, size_t b_off, int64_t ldb, float beta,
	       cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a,
	       int64_t stride_b, int64_t stride_c, struct ml_err *e);
int mlcl_hgemm(struct mlcl_dev *d, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
	       cl_mem A, size_t a_off, int64_t lda, cl_mem B, size_t b_off, int64_t ldb, float beta,
	       cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a,
	       int64_t stride_b, int64_t stride_c, struct ml_err *e);
/*
 * struct mlcl_epi: an epilogue fused into the GEMM's store, after alpha and
 * beta: C[m][n] += bias[bias_off + m * bias_sm + n * bias_sn] when bias is
 * not NULL (same dtype as C; bias_sm 1, bias_sn 0 for a bias per row as
 * Conv's; 0, 1 per column as Gemm's), then C[b][m][n] += z[z_off +
 * b * stride_c + m * ldc + n] (C's own index) when z is not NULL (C's
 * dtype; it may be C's buffer only at C's own elements), then the
 * activation act, an ML_ACT_* code of ops/fused.h (Clip within [lo, hi]):
 * FusedConv's act(conv + bias + z). relu is act ML_ACT_RELU, for callers
 * that fuse nothing else; ML_EINVAL for an unknown act.
 */
struct mlcl_epi {
	cl_mem bias;
	size_t bias_off;
	int64_t bias_sm, bias_sn;
	bool relu;
	int act;
	float lo, hi;
	cl_mem z;
	size_t z_off;
	int round;	/* MLCL_ROUND_*: the operands rounded while packed (f32 sums) */
};
/*
 * A training step's product precision (the node attribute precision):
 * MLCL_ROUND_F16 rounds both operands of the product to fp16, BF16 to
 * bf16 (nearest even; kernels/prelude.cl's RND), as they are packed; such
 * products run on our GEMM, never CLBlast's (which would not round), and
 * not on the GEMV (which reads its operands in place).
 */
enum { MLCL_ROUND_F16 = 1, MLCL_ROUND_BF16 = 2 };
/* mlcl_gemm_ex: mlcl_sgemm (f16 false) or mlcl_hgemm (true) with an epilogue (NULL = none). */
int mlcl_gemm_ex(struct mlcl_dev *d, bool f16, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
		 float alpha, cl_mem A, size_t a_off, int64_t lda, cl_mem B, size_t b_off,
		 int64_t ldb, float beta, cl_mem C, size_t c_off, int64_t ldc, int64_t batch,
		 int64_t stride_a, int64_t stride_b, int64_t stride_c, const struct mlcl_epi *epi,
		 struct ml_err *e);
/*
 * The tile. mlcl_gemm_tiles writes d's candidate tiles into out (at most
 * max; best guess first: by device type and native vector width) and
 * returns how many. mlcl_gemm_tile gives the tile d uses, chosen at the
 * first call: ML_GEMM_TILE=MR,VW,NV,WG when valid (MR 1..16 rows, VW 4, 8
 * or 16, NV 1..4 vectors per row, WG 1..1024 work-items); else the choice
 * cached in DIR/gemm-tune-KEY.txt (mlcl_cache_path); else the candidates
 * are timed on a 512^3 SGEMM (about 5 ms each once built; the third and
 * later only while the measuring has taken under 1.5 s, as building is
 * most of the cost) and the fastest is kept and cached; with the disk
 * cache off, or when no candidate runs,
 * the first candidate. It never fails: a tuning failure (a build, an
 * allocation, a lost device) leaves the first candidate, and the real
 * call then reports the failure. d->tile_how says which way it went.
 * mlcl_gemm_use makes d use tile t from now on (tests, benchmarks).
 */
int mlcl_gemm_tiles(const struct mlcl_dev *d, struct mlcl_tile *out, int max);
const struct mlcl_tile *mlcl_gemm_tile(struct mlcl_dev *d);
void mlcl_gemm_use(struct mlcl_dev *d, const struct mlcl_tile *t);
/*
 * mlcl_gemm_prepare: choose d's tile and build (or load) the GEMM program
 * for f32 or f16 now, so that the first call does not. ML_ECL on a build
 * failure.
 */
int mlcl_gemm_prepare(struct mlcl_dev *d, bool f16, struct ml_err *e);

/*
 * The engine. mlcl_sgemm, mlcl_hgemm and mlcl_gemm_ex run either our
 * kernels (kernels/gemm.cl: the tiled GEMM, and a GEMV when M or N is 1)
 * or CLBlast's GEMM (clblast.c), followed by a small kernel for the
 * epilogue (CLBlast has none), whichever measured faster on d for the
 * call's shape class:
 *   MLCL_GEMM_GEMV     M == 1 or N == 1 (a classifier; timed at 1 x 1000 x 1280, B transposed)
 *   MLCL_GEMM_BATCHED  batch > 1 (attention's products; timed at 12 x 128 x 128 x 64)
 *   MLCL_GEMM_TALL     one side 8 times the other (1x1 convolutions; 64 x 3136 x 576)
 *   MLCL_GEMM_SQUARE   the rest (timed at 1024^3)
 * Batches that share one B (stride_b 0) and whose A and C rows follow each
 * other (stride_a = M * lda, stride_c = M * ldc, A not transposed, no bias
 * per row) run as one product of batch * M rows, on either engine.
 * mlcl_gemm_pb (im2col's packed columns) always runs ours, and so do f16
 * products unless ML_CL_GEMM=clblast forces CLBlast (its HGEMM computes
 * in half precision, ours in f32; most GPU drivers lack cl_khr_fp16,
 * which it needs).
 * mlcl_gemm_engine chooses d's engines at its first call (later calls
 * return at once): ML_CL_GEMM=own or clblast forces one for every class,
 * auto (or unset) measures: the choice cached in DIR/gemm-engine-KEY.txt
 * (mlcl_cache_path) when it names the CLBlast library loaded now, else
 * the square class is timed on both engines first (CLBlast's first call
 * compiles its kernels: under a second on a GPU, 10 to 30 s on POCL when
 * POCL's own cache does not have them) and the other classes only when
 * CLBlast was within 2x of ours there; the choice is written back. No
 * CLBlast library (ML_CLBLAST_LIB=FILE names another one for dlopen, as
 * tests do) or no disk cache: ours everywhere. ML_EINVAL when ML_CL_GEMM
 * is not own, clblast or auto (every GEMM then fails with that message).
 * A CLBlast call that fails (status != 0) is redone with ours, and CLBlast
 * is not used again for that precision on d; eng_note says why.
 * mlcl_gemm_engine_forget drops the choice (and the failures), so that the
 * next call chooses again (tests: a second choice reads the cache).
 * mlcl_gemm_describe writes what -v shows: the tile and how it was chosen,
 * then the engines, as "8x32/16 (the tuning cache), engine own (cached)"
 * or "..., engine clblast: square tall batched (measured)"; "" before
 * the first GEMM.
 */
int mlcl_gemm_engine(struct mlcl_dev *d, struct ml_err *e);
/*
 * mlcl_gemm_on_clblast: in *yes, whether mlcl_gemm_ex would run an M x N
 * product of batch batches on CLBlast (choosing d's engines first, so
 * errors are mlcl_gemm_engine's). The convolution writes plain columns
 * for CLBlast and packed ones for our kernels.
 */
int mlcl_gemm_on_clblast(struct mlcl_dev *d, bool f16, int64_t M, int64_t N, int64_t batch,
			 bool *yes, struct ml_err *e);
void mlcl_gemm_engine_forget(struct mlcl_dev *d);
void mlcl_gemm_describe(const struct mlcl_dev *d, char *buf, size_t n);

/*
 * CLBlast (clblast.c), loaded with dlopen at the first use (no link-time
 * dependency): ML_CLBLAST_LIB, else libclblast.so.1, else libclblast.so.
 * mlcl_clblast_load says whether it is loaded (loading it when the name
 * changed since the last try; thread-safe), with the reason in *why
 * (static text) when not. mlcl_clblast_lib names the file loaded (the
 * versioned name the soname resolves to, e.g. "libclblast.so.1.5.3"), ""
 * when none.
 * mlcl_clblast_gemm enqueues CLBlast's row-major strided-batched GEMM
 * (CLBlastSgemm or CLBlastHgemm when batch is 1, their StridedBatched
 * form otherwise) on d's queue, with mlcl_sgemm's arguments (f16: half
 * buffers; alpha and beta are rounded to half); its event goes to
 * mlcl_record. It returns CLBlast's status: 0, or a negative
 * CLBlastStatusCode (also -1017 for a zero M, N or K, which CLBlast
 * refuses); -2040 (unknown error) when CLBlast is not loaded or with
 * ML_CL_FAULT=clblast, CL_OUT_OF_RESOURCES with ML_CL_FAULT=enqueue.
 * mlcl_clblast_status_str names a status.
 */
bool mlcl_clblast_load(const char **why);
const char *mlcl_clblast_lib(void);
int mlcl_clblast_gemm(struct mlcl_dev *d, bool f16, bool ta, bool tb, int64_t M, int64_t N,
		      int64_t K, float alpha, cl_mem A, size_t a_off, int64_t lda,
		      int64_t stride_a, cl_mem B, size_t b_off, int64_t ldb, int64_t stride_b,
		      float beta, cl_mem C, size_t c_off, int64_t ldc, int64_t stride_c,
		      int64_t batch);
const char *mlcl_clblast_status_str(int status);

/*
 * mlcl_gemm_pb: mlcl_gemm_ex with op(B) already packed by the caller (as
 * conv.cl's im2col does): PB holds, per batch (pb_stride floats apart; 0 =
 * one for all batches), ceil(N / nr) panels of K x nr f32 values, panel j
 * row k at PB[j*K*nr + k*nr], holding op(B)[k][j*nr .. j*nr+nr-1], zeros
 * past N; nr = mlcl_gemm_nr(d), the tile width the device's GEMM uses.
 */
int mlcl_gemm_nr(struct mlcl_dev *d);
int mlcl_gemm_pb(struct mlcl_dev *d, bool f16, bool ta, int64_t M, int64_t N, int64_t K,
		 float alpha, cl_mem A, size_t a_off, int64_t lda, cl_mem PB, int64_t pb_stride,
		 float beta, cl_mem C, size_t c_off, int64_t ldc, int64_t batch, int64_t stride_a,
		 int64_t stride_c, const struct mlcl_epi *epi, struct ml_err *e);

/*
 * Conv (conv.c, kernels/conv.cl): 2-D convolution, NCHW, ONNX Conv's
 * semantics: X n x c x h x w, W m x (c / group) x kh x kw, optional bias
 * (m), Y n x m x oh x ow, with oh = (h + pad[0] + pad[2] - dil[0]*(kh-1) - 1)
 * / stride[0] + 1 and ow likewise (mlcl_conv_out computes them; ML_EINVAL
 * when either is < 1 or c, m are not multiples of group). pad is ONNX's
 * order: top, left, bottom, right. act (ML_ACT_* of ops/fused.h, Clip
 * within [lo, hi]; relu is act ML_ACT_RELU) is applied after the bias, and
 * with mlcl_conv2d_ex after the residual z too (Y's shape and dtype, at
 * element z_off; not overlapping Y): FusedConv's act(conv + bias + z).
 * Depthwise (group == c > 1, m any multiple of c) runs a direct kernel;
 * 1x1 with stride 1 and no padding is a GEMM on X itself; the rest is
 * im2col, written in the
 * GEMM's packed layout into a pool scratch buffer (in chunks of images, at
 * most about 64 MiB), plus the GEMM (mlcl_gemm_pb).
 * Offsets are in elements; f16 means every buffer holds halves. Enqueued
 * on d's queue without waiting. Returns 0, ML_EINVAL, ML_ENOMEM, ML_ECL.
 */
struct mlcl_conv {
	int64_t n, c, h, w;	/* input */
	int64_t m, kh, kw;	/* output channels, kernel size */
	int64_t group;
	int64_t stride[2], dil[2], pad[4];
	bool relu;
	int act;
	float lo, hi;
	int round;	/* MLCL_ROUND_*: im2col and the GEMM round the operands; a
			 * depthwise convolution stays f32 */
};
int mlcl_conv_out(const struct mlcl_conv *p, int64_t *oh, int64_t *ow, struct ml_err *e);
int mlcl_conv2d(struct mlcl_dev *d, const struct mlcl_conv *p, bool f16, cl_mem x, size_t x_off,
		cl_mem w, size_t w_off, cl_mem bias, size_t b_off, cl_mem y, size_t y_off,
		struct ml_err *e);
int mlcl_conv2d_ex(struct mlcl_dev *d, const struct mlcl_conv *p, bool f16, cl_mem x,
		   size_t x_off, cl_mem w, size_t w_off, cl_mem bias, size_t b_off, cl_mem z,
		   size_t z_off, cl_mem y, size_t y_off, struct ml_err *e);
/*
 * mlcl_conv2d_nhwc: the same convolution on channels-last data (ConvNHWC),
 * f32: X n x h x w x c, W kh x kw x (c / group) x m, Y n x oh x ow x m, z
 * Y's shape. Depthwise (group == c == m) by a direct kernel; otherwise per
 * group the product im2col(X) [rows, kh kw c/group] x W_g, where a 1x1
 * window with stride 1 and no padding is X itself, through mlcl_gemm_ex
 * (ours or CLBlast, as measured), bias, z and act in its store. ML_ENOTSUP
 * for other groups (several channels per group and more than one group).
 */
int mlcl_conv2d_nhwc(struct mlcl_dev *d, const struct mlcl_conv *p, cl_mem x, cl_mem w,
		     cl_mem bias, cl_mem z, cl_mem y, struct ml_err *e);

/*
 * int8 (quant.c, kernels/quant.cl): the internal Q8* ops of mlquant's
 * integer form, bit-identical to the CPU kernels. mlcl_q8_supports says
 * whether node n's operand dtypes and output shape suit them; mlcl_q8_run
 * is its entry of cl_ops.c's op table.
 */
bool mlcl_q8_supports(const struct ml_graph *g, const struct ml_node *n);
int mlcl_q8_run(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout);

/*
 * ml.FusedElementwise (fused_elem.c): a kernel generated for the node's
 * chain, built once per distinct chain; f32 only (ML_ENOTSUP otherwise, and
 * for more than 32 operands). cl_ops.c's op table entry.
 */
int mlcl_fused_elem_run(struct mlcl_dev *d, struct ml_opctx *c, void **bin, void **bout);

#endif
