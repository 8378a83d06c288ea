/*
 * mpi.c: the MPI runtime of data-parallel training, the CPU device's
 * collectives (lib/dist rewrites the graphs that use them): Open MPI
 * loaded with dlopen, one communication thread that makes every MPI call after
 * MPI_Init_thread, the buckets that ml.AllReduceStart hands to it and
 * ml.AllReduceWait takes back, and the collectives of lib/ml_dist.h.
 *
 * Why dlopen and not mpi.h: libml.a is linked by every tool, and only
 * mltrain under mpirun needs MPI. Binding at run time keeps the five other
 * tools (and a build on a machine without libopenmpi-dev) free of libmpi,
 * and turns a missing MPI into one clear ML_ENOTSUP when distributed
 * training is asked for. The price is that we cannot use mpi.h's macros:
 * Open MPI's handles (MPI_Comm, MPI_Datatype, MPI_Op, MPI_Errhandler) are
 * pointers to its predefined objects, so MPI_COMM_WORLD is the address of
 * the exported symbol ompi_mpi_comm_world, MPI_FLOAT of ompi_mpi_float and
 * so on (mpi.h: OMPI_PREDEFINED_GLOBAL), and dlsym gives exactly those
 * addresses. The enum values used (MPI_THREAD_SERIALIZED = 2,
 * MPI_IN_PLACE = (void *)1, MPI_SUCCESS = 0) are fixed by that ABI. MPICH's
 * ABI (integer handles, libmpi.so.12) is not supported.
 *
 * Threads: MPI is initialised with MPI_THREAD_SERIALIZED; after that only
 * the communication thread calls MPI (until ml_dist_finalize joins it and
 * calls MPI_Finalize from the thread that initialised). Requests run in
 * the order they were queued, and every rank queues the same requests in
 * the same order (the same graph, the same calls), so the collectives
 * match across ranks.
 *
 * 16-bit buckets (ml_dist_opts.wire bf16 or fp16): the values are packed
 * as uint16 and reduced with a user op (MPI_Op_create) that adds two
 * buffers in float32 and rounds each sum back to nearest, ties to even:
 * Open MPI's predefined MPI_SUM knows no bf16, and its fp16 type is an
 * extension that not every build has. The op is commutative, so every
 * rank's algorithm may combine the partial sums in its own order; fp
 * addition of two operands is commutative, so the ranks still get the same
 * bits.
 */
#include <dlfcn.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "dist/dist.h"

typedef void *mpi_obj;

#define MPI_SUCCESS_ 0
#define MPI_THREAD_SERIALIZED_ 2
#define MPI_IN_PLACE_ ((void *)1)

/* The functions and predefined objects of Open MPI that we use. */
struct mpi_api {
	int (*Init_thread)(int *, char ***, int, int *);
	int (*Finalize)(void);
	int (*Comm_rank)(mpi_obj, int *);
	int (*Comm_size)(mpi_obj, int *);
	int (*Comm_set_errhandler)(mpi_obj, mpi_obj);
	int (*Allreduce)(const void *, void *, int, mpi_obj, mpi_obj, mpi_obj);
	int (*Bcast)(void *, int, mpi_obj, int, mpi_obj);
	int (*Barrier)(mpi_obj);
	int (*Abort)(mpi_obj, int);
	int (*Error_string)(int, char *, int *);
	int (*Get_library_version)(char *, int *);
	int (*Op_create)(void (*)(void *, void *, int *, mpi_obj *), int, mpi_obj *);
	int (*Op_free)(mpi_obj *);
	mpi_obj comm_world, errors_return;
	mpi_obj t_float, t_double, t_int, t_int64, t_byte, t_uint16;
	mpi_obj op_sum, op_max, op_min;
	mpi_obj op_bf16, op_f16;	/* ours, made by dist_init */
};

enum { REQ_BUCKET, REQ_ALLREDUCE, REQ_BCAST, REQ_BARRIER, REQ_STOP };

/* struct req: one job of the communication thread. */
struct req {
	int kind;
	struct bucket *b;	/* REQ_BUCKET */
	void *buf;
	int64_t count;		/* elements of buf (bytes for REQ_BCAST) */
	size_t elsize;
	mpi_obj dt, op;
	int root;
	bool done;
	int rc;
	char msg[256];
	struct req *next;
};

enum { B_FREE, B_BUSY, B_DONE };

/* struct bucket: the packed values of one ml.AllReduceStart. */
struct bucket {
	int state;
	enum ml_dtype rt;	/* ML_F32, ML_F64, ML_BF16 or ML_F16: what the buffer holds */
	void *buf;
	size_t cap;		/* bytes of buf */
	int64_t total;		/* elements packed */
	int n, cap_counts;
	int64_t *counts;	/* elements of each packed array */
	struct req r;
};

static struct {
	bool inited, active, finalized;
	struct ml_dist_info info;
	struct mpi_api m;
	pthread_t th;
	bool th_running;
	pthread_mutex_t mu;	/* guards everything below and the buckets' state */
	pthread_cond_t cv;
	struct req *head, *tail;
	double weight;
	struct bucket **buckets;
	int n_buckets;
	struct ml_dist_stats st;
} D = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cv = PTHREAD_COND_INITIALIZER,
	.info = { .rank = 0, .size = 1, .local_rank = 0, .local_size = 1 },
	.weight = 1,
};

/* 16-bit buckets. */

/*
 * F16C and AVX2 (every x86-64 since 2013, but not in the x86-64-v2
 * baseline the library is built for): eight values an instruction. F16C
 * converts to fp16 rounding to nearest even, as ml_f32_to_f16 does; the
 * AVX2 bf16 rounding is ml_f32_to_bf16's arithmetic, lane by lane, so both give
 * the bits of the portable loops, which take what remains and other CPUs.
 * (AVX-512 BF16's vcvtneps2bf16 would flush subnormals: not used.)
 */
#if defined(__x86_64__) || defined(__i386__)
static int simd_state;	/* 0: not asked yet, 1: F16C and AVX2, -1: no */

static bool
has_simd(void)
{
	int s = __atomic_load_n(&simd_state, __ATOMIC_RELAXED);
	if (s == 0) {
		__builtin_cpu_init();
		/* F16C by CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not know it */
		unsigned a, b, c = 0, d;
		bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
		s = f16c && __builtin_cpu_supports("avx2") ? 1 : -1;
		__atomic_store_n(&simd_state, s, __ATOMIC_RELAXED);
	}
	return s > 0;
}

#define SIMD __attribute__((target("avx2,f16c")))

SIMD static inline __m256
load_bf16x8(const uint16_t *p)
{
	__m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
	return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* store_bf16x8: ml_f32_to_bf16 of eight floats. */
SIMD static inline void
store_bf16x8(uint16_t *p, __m256 x)
{
	__m256i u = _mm256_castps_si256(x);
	__m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
	__m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
	__m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
	r = _mm256_srli_epi32(r, 16);
	__m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
	r = _mm256_blendv_epi8(r, q, nan);
	/* 32 to 16 bits: the pack works per 128-bit lane, the permute joins them */
	__m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
	_mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(pk));
}

SIMD static inline __m256
load_f16x8(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

SIMD static inline void
store_f16x8(uint16_t *p, __m256 x)
{
	_mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

/* The vector loops return how many values they did (a multiple of 8). */
SIMD static int64_t
sum16_simd(enum ml_dtype t, const uint16_t *in, uint16_t *io, int64_t n)
{
	int64_t i = 0;
	if (t == ML_BF16)
		for (; i + 8 <= n; i += 8)
			store_bf16x8(io + i, _mm256_add_ps(load_bf16x8(in + i), load_bf16x8(io + i)));
	else
		for (; i + 8 <= n; i += 8)
			store_f16x8(io + i, _mm256_add_ps(load_f16x8(in + i), load_f16x8(io + i)));
	return i;
}

SIMD static int64_t
pack16_simd(enum ml_dtype t, uint16_t *d, const float *s, int64_t n, float w)
{
	int64_t i = 0;
	__m256 vw = _mm256_set1_ps(w);
	if (t == ML_BF16)
		for (; i + 8 <= n; i += 8)
			store_bf16x8(d + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), vw));
	else
		for (; i + 8 <= n; i += 8)
			store_f16x8(d + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), vw));
	return i;
}

SIMD static int64_t
unpack16_simd(enum ml_dtype t, float *d, const uint16_t *s, int64_t n)
{
	int64_t i = 0;
	if (t == ML_BF16)
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(d + i, load_bf16x8(s + i));
	else
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(d + i, load_f16x8(s + i));
	return i;
}
#else
static bool has_simd(void) { return false; }
#define sum16_simd(t, in, io, n) ((int64_t)0)
#define pack16_simd(t, d, s, n, w) ((int64_t)0)
#define unpack16_simd(t, d, s, n) ((int64_t)0)
#endif

void
ml_dist_sum16(enum ml_dtype t, const uint16_t *in, uint16_t *inout, int64_t n)
{
	int64_t i = has_simd() ? sum16_simd(t, in, inout, n) : 0;
	if (t == ML_BF16)
		for (; i < n; i++)
			inout[i] = ml_f32_to_bf16(ml_bf16_to_f32(in[i]) + ml_bf16_to_f32(inout[i]));
	else
		for (; i < n; i++)
			inout[i] = ml_f32_to_f16(ml_f16_to_f32(in[i]) + ml_f16_to_f32(inout[i]));
}

/* op_bf16, op_f16: the MPI user ops (MPI_User_function) of 16-bit buckets. */
static void
op_bf16(void *in, void *inout, int *len, mpi_obj *dt)
{
	(void)dt;
	ml_dist_sum16(ML_BF16, in, inout, *len);
}

static void
op_f16(void *in, void *inout, int *len, mpi_obj *dt)
{
	(void)dt;
	ml_dist_sum16(ML_F16, in, inout, *len);
}

/* Loading. */

/* the dlopen handle, loaded once; init_mu serialises load and ml_dist_init */
static void *lib_handle;
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

/* env_int: the integer value of environment variable name, or def. */
static int
env_int(const char *name, int def)
{
	const char *s = getenv(name);
	char *end;
	if (s == NULL || *s == '\0')
		return def;
	long v = strtol(s, &end, 10);
	return *end == '\0' && v >= 0 && v <= 1 << 24 ? (int)v : def;
}

/* load: dlopen libmpi and look up what struct mpi_api needs; with init_mu held. */
static int
load(struct mpi_api *m, struct ml_err *e)
{
	char lib_err[400];
	const char *path = getenv("ML_MPI_LIB");
	if (path == NULL || *path == '\0')
		path = "libmpi.so.40";
	if (lib_handle == NULL) {
		/*
		 * RTLD_GLOBAL: Open MPI's own plugins (mca_*.so), which it
		 * dlopens in MPI_Init, resolve symbols of libmpi.
		 */
		lib_handle = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
		if (lib_handle == NULL) {
			const char *de = dlerror();
			snprintf(lib_err, sizeof lib_err, "%s", de != NULL ? de : path);
			return ml_fail(e, ML_ENOTSUP, "MPI is not available: %s (install Open MPI: "
				       "openmpi-bin and libopenmpi-dev)", lib_err);
		}
	}
	static const char *const fn_names[] = {
		"MPI_Init_thread", "MPI_Finalize", "MPI_Comm_rank", "MPI_Comm_size",
		"MPI_Comm_set_errhandler", "MPI_Allreduce", "MPI_Bcast", "MPI_Barrier", "MPI_Abort",
		"MPI_Error_string", "MPI_Get_library_version", "MPI_Op_create", "MPI_Op_free",
	};
	void *fns[sizeof fn_names / sizeof fn_names[0]];
	static const char *const obj_names[] = {
		"ompi_mpi_comm_world", "ompi_mpi_errors_return", "ompi_mpi_float", "ompi_mpi_double",
		"ompi_mpi_int", "ompi_mpi_int64_t", "ompi_mpi_byte", "ompi_mpi_uint16_t",
		"ompi_mpi_op_sum", "ompi_mpi_op_max", "ompi_mpi_op_min",
	};
	mpi_obj *objs[] = {
		&m->comm_world, &m->errors_return, &m->t_float, &m->t_double, &m->t_int,
		&m->t_int64, &m->t_byte, &m->t_uint16, &m->op_sum, &m->op_max, &m->op_min,
	};
	for (size_t i = 0; i < sizeof fn_names / sizeof fn_names[0]; i++)
		if ((fns[i] = dlsym(lib_handle, fn_names[i])) == NULL)
			return ml_fail(e, ML_ENOTSUP, "MPI library '%s' lacks %s (Open MPI 4 is "
				       "needed)", path, fn_names[i]);
	for (size_t i = 0; i < sizeof obj_names / sizeof obj_names[0]; i++)
		if ((*objs[i] = dlsym(lib_handle, obj_names[i])) == NULL)
			return ml_fail(e, ML_ENOTSUP, "MPI library '%s' is not Open MPI: no %s",
				       path, obj_names[i]);
	/* object pointers to function pointers, as POSIX dlsym allows */
	memcpy(&m->Init_thread, &fns[0], sizeof(void *));
	memcpy(&m->Finalize, &fns[1], sizeof(void *));
	memcpy(&m->Comm_rank, &fns[2], sizeof(void *));
	memcpy(&m->Comm_size, &fns[3], sizeof(void *));
	memcpy(&m->Comm_set_errhandler, &fns[4], sizeof(void *));
	memcpy(&m->Allreduce, &fns[5], sizeof(void *));
	memcpy(&m->Bcast, &fns[6], sizeof(void *));
	memcpy(&m->Barrier, &fns[7], sizeof(void *));
	memcpy(&m->Abort, &fns[8], sizeof(void *));
	memcpy(&m->Error_string, &fns[9], sizeof(void *));
	memcpy(&m->Get_library_version, &fns[10], sizeof(void *));
	memcpy(&m->Op_create, &fns[11], sizeof(void *));
	memcpy(&m->Op_free, &fns[12], sizeof(void *));
	return 0;
}

int
ml_dist_available(struct ml_err *e)
{
	struct mpi_api m;
	pthread_mutex_lock(&init_mu);
	int rc = D.active ? 0 : load(&m, e);
	pthread_mutex_unlock(&init_mu);
	return rc;
}

/* mpi_fail: the MPI error code rc as a message in r (the communication thread's). */
static int
mpi_fail(struct req *r, int rc, const char *what)
{
	char s[300] = "";
	int len = 0;
	if (D.m.Error_string(rc, s, &len) != MPI_SUCCESS_ || len <= 0)
		snprintf(s, sizeof s, "error %d", rc);
	s[sizeof s - 1] = '\0';
	snprintf(r->msg, sizeof r->msg, "%s failed on rank %d: %.200s", what, D.info.rank, s);
	r->rc = ML_EIO;
	return ML_EIO;
}

/* Calls larger than an int count are cut into pieces. */
#define CHUNK ((int64_t)1 << 28)

static int
run_allreduce(struct req *r)
{
	for (int64_t off = 0; off < r->count; off += CHUNK) {
		int64_t k = ML_MIN(CHUNK, r->count - off);
		int rc = D.m.Allreduce(MPI_IN_PLACE_, (char *)r->buf + (size_t)off * r->elsize,
				       (int)k, r->dt, r->op, D.m.comm_world);
		if (rc != MPI_SUCCESS_)
			return mpi_fail(r, rc, "MPI_Allreduce");
	}
	return 0;
}

static int
run_req(struct req *r)
{
	switch (r->kind) {
	case REQ_BUCKET:
	case REQ_ALLREDUCE:
		return run_allreduce(r);
	case REQ_BCAST:
		for (int64_t off = 0; off < r->count; off += CHUNK) {
			int64_t k = ML_MIN(CHUNK, r->count - off);
			int rc = D.m.Bcast((char *)r->buf + off, (int)k, D.m.t_byte, r->root,
					   D.m.comm_world);
			if (rc != MPI_SUCCESS_)
				return mpi_fail(r, rc, "MPI_Bcast");
		}
		return 0;
	case REQ_BARRIER: {
		int rc = D.m.Barrier(D.m.comm_world);
		return rc != MPI_SUCCESS_ ? mpi_fail(r, rc, "MPI_Barrier") : 0;
	}
	default:
		return 0;
	}
}

/* comm_main: the communication thread: runs the queued requests in order. */
static void *
comm_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&D.mu);
	for (;;) {
		while (D.head == NULL)
			pthread_cond_wait(&D.cv, &D.mu);
		struct req *r = D.head;
		D.head = r->next;
		if (D.head == NULL)
			D.tail = NULL;
		if (r->kind == REQ_STOP) {
			r->done = true;
			pthread_cond_broadcast(&D.cv);
			break;
		}
		pthread_mutex_unlock(&D.mu);
		double t0 = ml_now();
		r->rc = 0;
		run_req(r);
		double t = ml_now() - t0;
		pthread_mutex_lock(&D.mu);
		if (r->kind == REQ_BUCKET) {
			D.st.comm_s += t;
			D.st.buckets++;
			D.st.bytes += r->count * (int64_t)r->elsize;
			D.st.values += r->count;
			D.st.wire = r->b->rt;
			r->b->state = B_DONE;
		} else {
			D.st.other_s += t;
		}
		r->done = true;
		pthread_cond_broadcast(&D.cv);
	}
	pthread_mutex_unlock(&D.mu);
	return NULL;
}

/* enqueue: add r to the queue (D.mu held). */
static void
enqueue(struct req *r)
{
	r->next = NULL;
	r->done = false;
	if (D.tail != NULL)
		D.tail->next = r;
	else
		D.head = r;
	D.tail = r;
	pthread_cond_broadcast(&D.cv);
}

/* submit: queue r and wait until the communication thread has run it. */
static int
submit(struct req *r, struct ml_err *e)
{
	pthread_mutex_lock(&D.mu);
	enqueue(r);
	while (!r->done)
		pthread_cond_wait(&D.cv, &D.mu);
	pthread_mutex_unlock(&D.mu);
	return r->rc < 0 ? ml_fail(e, r->rc, "%s", r->msg) : 0;
}

/* launched: whether the environment shows an MPI launcher with more than one process. */
static bool
launched(void)
{
	if (getenv("OMPI_COMM_WORLD_SIZE") != NULL)
		return env_int("OMPI_COMM_WORLD_SIZE", 1) > 1;
	if (getenv("PMI_SIZE") != NULL)
		return env_int("PMI_SIZE", 1) > 1;
	if (getenv("PMIX_RANK") != NULL)
		return env_int("SLURM_NTASKS", 2) > 1;
	return false;
}

static void
copy_info(struct ml_dist_info *info)
{
	if (info != NULL)
		*info = D.info;
}

static int dist_init(int mode, struct ml_dist_info *info, struct ml_err *e);

int
ml_dist_init(int mode, struct ml_dist_info *info, struct ml_err *e)
{
	pthread_mutex_lock(&init_mu);
	int rc = dist_init(mode, info, e);
	pthread_mutex_unlock(&init_mu);
	return rc;
}

/* dist_init: ml_dist_init with init_mu held. */
static int
dist_init(int mode, struct ml_dist_info *info, struct ml_err *e)
{
	if (D.inited) {
		copy_info(info);
		return 0;
	}
	if (mode != ML_DIST_AUTO && mode != ML_DIST_REQUIRE && mode != ML_DIST_OFF)
		return ml_fail(e, ML_EINVAL, "unknown distribution mode %d", mode);
	bool want = mode == ML_DIST_REQUIRE || (mode == ML_DIST_AUTO && launched());
	if (!want) {
		D.inited = true;
		copy_info(info);
		return 0;
	}
	ML_TRY(load(&D.m, e));
	int provided = 0;
	int rc = D.m.Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED_, &provided);
	if (rc != MPI_SUCCESS_)
		return ml_fail(e, ML_EIO, "MPI_Init_thread failed (error %d)", rc);
	if (provided < MPI_THREAD_SERIALIZED_) {
		D.m.Finalize();
		D.finalized = true;
		return ml_fail(e, ML_EIO, "MPI gives thread level %d; MPI_THREAD_SERIALIZED (2) is "
			       "needed", provided);
	}
	D.m.Comm_set_errhandler(D.m.comm_world, D.m.errors_return);
	int rank = 0, size = 1;
	if (D.m.Comm_rank(D.m.comm_world, &rank) != MPI_SUCCESS_ ||
	    D.m.Comm_size(D.m.comm_world, &size) != MPI_SUCCESS_ || size < 1) {
		D.m.Finalize();
		D.finalized = true;
		return ml_fail(e, ML_EIO, "MPI_Comm_rank or MPI_Comm_size failed");
	}
	char ver[512] = "";
	int len = 0;
	if (D.m.Get_library_version(ver, &len) == MPI_SUCCESS_) {
		ver[sizeof ver - 1] = '\0';
		ver[strcspn(ver, "\n,")] = '\0';
		snprintf(D.info.library, sizeof D.info.library, "%.159s", ver);
	}
	D.info.active = true;
	D.info.rank = rank;
	D.info.size = size;
	D.info.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("SLURM_LOCALID", rank));
	D.info.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", size);
	if (D.info.local_size < 1)
		D.info.local_size = 1;
	D.weight = 1.0 / size;
	/* before the communication thread: MPI is still this thread's */
	if (D.m.Op_create(op_bf16, 1, &D.m.op_bf16) != MPI_SUCCESS_ ||
	    D.m.Op_create(op_f16, 1, &D.m.op_f16) != MPI_SUCCESS_) {
		D.m.Finalize();
		D.finalized = true;
		D.info.active = false;
		return ml_fail(e, ML_EIO, "MPI_Op_create failed");
	}
	if (pthread_create(&D.th, NULL, comm_main, NULL) != 0) {
		D.m.Finalize();
		D.finalized = true;
		D.info.active = false;
		return ml_fail(e, ML_ENOMEM, "cannot start the communication thread");
	}
	D.th_running = true;
	D.active = true;
	D.inited = true;
	copy_info(info);
	return 0;
}

int
ml_dist_finalize(struct ml_err *e)
{
	(void)e;
	if (!D.active)
		return 0;
	struct req r = { .kind = REQ_STOP };
	pthread_mutex_lock(&D.mu);
	enqueue(&r);
	while (!r.done)
		pthread_cond_wait(&D.cv, &D.mu);
	pthread_mutex_unlock(&D.mu);
	pthread_join(D.th, NULL);
	D.th_running = false;
	D.active = false;
	D.finalized = true;
	D.m.Op_free(&D.m.op_bf16);
	D.m.Op_free(&D.m.op_f16);
	int rc = D.m.Finalize();
	D.info.active = false;
	D.info.rank = 0;
	D.info.size = 1;
	D.weight = 1;
	for (int i = 0; i < D.n_buckets; i++)
		if (D.buckets[i] != NULL) {
			ml_free(D.buckets[i]->buf);
			ml_free(D.buckets[i]->counts);
			ml_free(D.buckets[i]);
		}
	ml_free(D.buckets);
	D.buckets = NULL;
	D.n_buckets = 0;
	return rc != MPI_SUCCESS_ ? ml_fail(e, ML_EIO, "MPI_Finalize failed (error %d)", rc) : 0;
}

int
ml_dist_abort(int status)
{
	if (D.active)
		D.m.Abort(D.m.comm_world, status);
	return status;
}

int
ml_dist_rank(void)
{
	return D.info.rank;
}

int
ml_dist_size(void)
{
	return D.info.size;
}

void
ml_dist_set_weight(double w)
{
	pthread_mutex_lock(&D.mu);
	if (D.active && w >= 0 && w <= 1)
		D.weight = w;
	pthread_mutex_unlock(&D.mu);
}

void
ml_dist_stats(struct ml_dist_stats *st)
{
	pthread_mutex_lock(&D.mu);
	*st = D.st;
	pthread_mutex_unlock(&D.mu);
}

void
ml_dist_stats_reset(void)
{
	pthread_mutex_lock(&D.mu);
	memset(&D.st, 0, sizeof D.st);
	pthread_mutex_unlock(&D.mu);
}

/* The collectives of the tools. */

int
ml_dist_allreduce(void *buf, int64_t n, enum ml_dtype dt, int op, struct ml_err *e)
{
	if (n < 0 || (n > 0 && buf == NULL))
		return ml_fail(e, ML_EINVAL, "allreduce of %lld values", (long long)n);
	if (dt != ML_F32 && dt != ML_F64 && dt != ML_I32 && dt != ML_I64)
		return ml_fail(e, ML_ENOTSUP, "allreduce of %s values", ml_dtype_name(dt));
	if (op < ML_DIST_SUM || op > ML_DIST_MIN || (op == ML_DIST_MEAN && !ml_dtype_is_float(dt)))
		return ml_fail(e, ML_EINVAL, "bad reduction %d for %s", op, ml_dtype_name(dt));
	if (!D.active || n == 0)
		return 0;
	struct req r = {
		.kind = REQ_ALLREDUCE, .buf = buf, .count = n, .elsize = ml_dtype_size(dt),
		.dt = dt == ML_F32 ? D.m.t_float : dt == ML_F64 ? D.m.t_double :
		      dt == ML_I32 ? D.m.t_int : D.m.t_int64,
		.op = op == ML_DIST_MAX ? D.m.op_max : op == ML_DIST_MIN ? D.m.op_min : D.m.op_sum,
	};
	ML_TRY(submit(&r, e));
	if (op == ML_DIST_MEAN) {
		for (int64_t i = 0; i < n; i++)
			if (dt == ML_F32)
				((float *)buf)[i] /= (float)D.info.size;
			else
				((double *)buf)[i] /= D.info.size;
	}
	return 0;
}

int
ml_dist_bcast(void *buf, size_t nbytes, int root, struct ml_err *e)
{
	if (root < 0 || root >= D.info.size)
		return ml_fail(e, ML_EINVAL, "rank %d is not in a world of %d", root, D.info.size);
	if (!D.active || nbytes == 0)
		return 0;
	struct req r = { .kind = REQ_BCAST, .buf = buf, .count = (int64_t)nbytes, .elsize = 1,
			 .root = root };
	return submit(&r, e);
}

int
ml_dist_barrier(struct ml_err *e)
{
	if (!D.active)
		return 0;
	struct req r = { .kind = REQ_BARRIER };
	return submit(&r, e);
}

/* Buckets. */

/* bucket_get: bucket id, created when absent (D.mu held). NULL when out of memory. */
static struct bucket *
bucket_get(int64_t id, bool create)
{
	if (id < 0 || id >= ML_DIST_MAX_BUCKETS)
		return NULL;
	if (id >= D.n_buckets) {
		if (!create)
			return NULL;
		int n = ML_MAX((int)id + 1, 2 * D.n_buckets);
		struct bucket **nb = ml_realloc(D.buckets, sizeof *nb * (size_t)n);
		if (nb == NULL)
			return NULL;
		for (int i = D.n_buckets; i < n; i++)
			nb[i] = NULL;
		D.buckets = nb;
		D.n_buckets = n;
	}
	if (D.buckets[id] == NULL && create)
		D.buckets[id] = ml_calloc(1, sizeof(struct bucket));
	return D.buckets[id];
}

/* pack: n values of src (type st) into dst (type rt), times w. */
static void
pack(void *dst, enum ml_dtype rt, const void *src, enum ml_dtype st, int64_t n, double w)
{
	if ((rt == ML_BF16 || rt == ML_F16) && st == ML_F32) {
		uint16_t *d = dst;
		const float *s = src;
		float fw = (float)w;
		int64_t i = has_simd() ? pack16_simd(rt, d, s, n, fw) : 0;
		for (; i < n; i++)
			d[i] = rt == ML_BF16 ? ml_f32_to_bf16(s[i] * fw) : ml_f32_to_f16(s[i] * fw);
	} else if (rt == ML_F32 && (st == ML_BF16 || st == ML_F16) && w == 1) {
		float *d = dst;
		const uint16_t *s = src;
		int64_t i = has_simd() ? unpack16_simd(st, d, s, n) : 0;
		for (; i < n; i++)
			d[i] = st == ML_BF16 ? ml_bf16_to_f32(s[i]) : ml_f16_to_f32(s[i]);
	} else if (rt == ML_F32 && st == ML_F32) {
		float *d = dst, fw = (float)w;
		const float *s = src;
		if (w == 1)
			memcpy(d, s, sizeof(float) * (size_t)n);
		else
			for (int64_t i = 0; i < n; i++)
				d[i] = s[i] * fw;
	} else if (rt == ML_F64 && st == ML_F64) {
		double *d = dst;
		const double *s = src;
		for (int64_t i = 0; i < n; i++)
			d[i] = s[i] * w;
	} else {
		for (int64_t i = 0; i < n; i++)
			ml_set_f64(dst, rt, i, ml_get_f64(src, st, i) * w);
	}
}

int
ml_dist_bucket_start(int64_t id, int n, struct ml_tval *const *in, enum ml_dtype wire, bool first,
		     struct ml_err *e)
{
	if (wire != ML_F32 && wire != ML_BF16 && wire != ML_F16)
		return ml_fail(e, ML_EINVAL, "bucket %lld: cannot send %s values", (long long)id,
			       ml_dtype_name(wire));
	int64_t total = 0;
	bool all64 = true;
	for (int i = 0; i < n; i++) {
		if (!ml_dist_reduce_dtype(in[i]->dtype))
			return ml_fail(e, ML_EINVAL, "cannot reduce %s values",
				       ml_dtype_name(in[i]->dtype));
		all64 &= in[i]->dtype == ML_F64;
		total += ml_tval_numel(in[i]);
	}
	enum ml_dtype rt = n > 0 && all64 ? ML_F64 : wire;
	pthread_mutex_lock(&D.mu);
	struct bucket *b = bucket_get(id, true);
	if (b == NULL) {
		pthread_mutex_unlock(&D.mu);
		return ml_fail(e, id < 0 || id >= ML_DIST_MAX_BUCKETS ? ML_EINVAL : ML_ENOMEM,
			       "bucket %lld: %s", (long long)id,
			       id < 0 || id >= ML_DIST_MAX_BUCKETS ? "no such bucket" : "out of memory");
	}
	/* a bucket of a run that failed before its wait is finished first */
	while (b->state == B_BUSY)
		pthread_cond_wait(&D.cv, &D.mu);
	b->state = B_FREE;
	double w = D.active ? D.weight : 1;
	if (first)
		D.st.steps++;
	pthread_mutex_unlock(&D.mu);
	size_t es = ml_dtype_size(rt), need = (size_t)total * es;
	if (need > b->cap) {
		void *nb = ml_malloc(need);
		if (nb == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory for a bucket of %zu bytes", need);
		ml_free(b->buf);
		b->buf = nb;
		b->cap = need;
	}
	if (n > b->cap_counts) {
		int64_t *c = ml_realloc(b->counts, sizeof(int64_t) * (size_t)n);
		if (c == NULL)
			return ml_fail(e, ML_ENOMEM, "out of memory");
		b->counts = c;
		b->cap_counts = n;
	}
	int64_t off = 0;
	for (int i = 0; i < n; i++) {
		int64_t k = ml_tval_numel(in[i]);
		pack((char *)b->buf + (size_t)off * es, rt, in[i]->data, in[i]->dtype, k, w);
		b->counts[i] = k;
		off += k;
	}
	b->n = n;
	b->total = total;
	b->rt = rt;
	pthread_mutex_lock(&D.mu);
	if (D.active) {
		memset(&b->r, 0, sizeof b->r);
		b->r.kind = REQ_BUCKET;
		b->r.b = b;
		b->r.buf = b->buf;
		b->r.count = total;
		b->r.elsize = es;
		b->r.dt = rt == ML_F64 ? D.m.t_double : rt == ML_F32 ? D.m.t_float : D.m.t_uint16;
		b->r.op = rt == ML_BF16 ? D.m.op_bf16 : rt == ML_F16 ? D.m.op_f16 : D.m.op_sum;
		b->state = B_BUSY;
		enqueue(&b->r);
	} else {
		b->r.rc = 0;
		b->state = B_DONE;
	}
	pthread_mutex_unlock(&D.mu);
	return 0;
}

int
ml_dist_bucket_wait(int64_t id, int n, struct ml_tval *const *out, struct ml_err *e)
{
	pthread_mutex_lock(&D.mu);
	struct bucket *b = bucket_get(id, false);
	if (b == NULL || b->state == B_FREE) {
		pthread_mutex_unlock(&D.mu);
		return ml_fail(e, ML_EINVAL, "bucket %lld was not started", (long long)id);
	}
	double t0 = ml_now();
	while (b->state == B_BUSY)
		pthread_cond_wait(&D.cv, &D.mu);
	if (D.active)
		D.st.wait_s += ml_now() - t0;
	int rc = b->r.rc;
	char msg[256];
	snprintf(msg, sizeof msg, "%s", b->r.msg);
	b->state = B_FREE;
	pthread_mutex_unlock(&D.mu);
	if (rc < 0)
		return ml_fail(e, rc, "%s", msg);
	if (n != b->n)
		return ml_fail(e, ML_EINVAL, "bucket %lld holds %d arrays, not %d", (long long)id,
			       b->n, n);
	size_t es = ml_dtype_size(b->rt);
	int64_t off = 0;
	for (int i = 0; i < n; i++) {
		int64_t k = ml_tval_numel(out[i]);
		if (k != b->counts[i] || !ml_dist_reduce_dtype(out[i]->dtype))
			return ml_fail(e, ML_EINVAL, "bucket %lld: array %d has %lld %s values, "
				       "the bucket %lld", (long long)id, i, (long long)k,
				       ml_dtype_name(out[i]->dtype), (long long)b->counts[i]);
		pack(out[i]->data, out[i]->dtype, (char *)b->buf + (size_t)off * es, b->rt, k, 1);
		off += k;
	}
	return 0;
}
