/*
 * The contract between the runtime core and operator kernels.
 *
 * A kernel is a pair of functions found through the generated registry:
 *   prepare(node, ctx) -- runs once when a session is created. It checks the
 *       node's tensors and attributes (shapes are static), computes whatever
 *       the hot path needs into node->params (allocated with mrt_ctx_alloc),
 *       may repack constant weights, and asks for scratch memory with
 *       mrt_ctx_request_scratch. It reports problems with mrt_ctx_error and
 *       returns its status; it never aborts.
 *   run(node, scratch) -- runs on every mrt_session_run. It trusts what
 *       prepare checked and only computes.
 *
 * Kernels include only compiler headers; the few libc/libm functions they use
 * are declared here.
 */
#ifndef MRT_KERNEL_H
#define MRT_KERNEL_H

#include <stddef.h>
#include <stdint.h>
#include <float.h>

#include "minirt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* libc / libm: declared, not included, so kernels build without an SDK. */
void *memcpy(void *restrict dst, const void *restrict src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int strcmp(const char *a, const char *b);
char *getenv(const char *name);
float expf(float x);
float logf(float x);
float sqrtf(float x);
float powf(float x, float y);
float tanhf(float x);
float floorf(float x);
float ceilf(float x);
float fabsf(float x);

#ifdef NDEBUG
#define MRT_ASSERT(x) ((void)0)
#else
#define MRT_ASSERT(x) ((x) ? (void)0 : __builtin_trap())
#endif

#define MRT_RESTRICT restrict
#define MRT_UNUSED(x) ((void)(x))

/* Vector max/min: clang's elementwise builtins lower to maxps/fmax; the
 * fallback keeps other compilers working. */
#if defined(__has_builtin)
#if __has_builtin(__builtin_elementwise_max)
#define MRT_VMAX(x, y) __builtin_elementwise_max(x, y)
#define MRT_VMIN(x, y) __builtin_elementwise_min(x, y)
#endif
#endif
#ifndef MRT_VMAX
#define MRT_VMAX(x, y) ((x) > (y) ? (x) : (y))
#define MRT_VMIN(x, y) ((x) < (y) ? (x) : (y))
#endif

/* Marks code that runs once per session (prepare and its helpers): compiled
 * for size even inside a `speed` kernel, whose -O2 is meant for run(). */
#if defined(__has_attribute)
#if __has_attribute(minsize)
#define MRT_PREPARE_CODE __attribute__((minsize))
#endif
#endif
#ifndef MRT_PREPARE_CODE
#define MRT_PREPARE_CODE
#endif

/* Type-family kernels (registry `type_constraints` form): one source, compiled once
 * per type signature the manifest selected. The build defines, per constraint i,
 * MRT_T<i> (its C type), MRT_T<i>_DTYPE (its mrt_dtype) and MRT_T<i>_IS_<type>, and
 * MRT_KERNEL_SUFFIX; MRT_KERNEL(stem) is then the symbol the generated table names:
 *   mrt_status MRT_KERNEL(mrt_gather_prepare)(mrt_node *node, mrt_ctx *ctx)
 * compiles to mrt_gather_prepare__float32_int64 for signature (float32, int64). */
#define MRT_CAT_(a, b) a##b
#define MRT_CAT(a, b) MRT_CAT_(a, b)
#define MRT_KERNEL(stem) MRT_CAT(stem, MRT_KERNEL_SUFFIX)

/* Attribute types (ONNX AttributeProto.AttributeType values). */
typedef enum mrt_attr_type {
  MRT_ATTR_FLOAT = 1,
  MRT_ATTR_INT = 2,
  MRT_ATTR_STRING = 3,
  MRT_ATTR_FLOATS = 6,
  MRT_ATTR_INTS = 7,
} mrt_attr_type;

typedef struct mrt_attr {
  const char *name;
  mrt_attr_type type;
  uint32_t count;      /* elements (FLOATS/INTS), bytes (STRING, no NUL), 1 otherwise */
  const void *data;    /* float[], int64_t[] or char[]; 8-byte aligned */
} mrt_attr;

/* A tensor as the kernels see it. Shapes are static: fixed at convert time. */
typedef struct mrt_tensor {
  const char *name;
  mrt_dtype dtype;
  uint32_t ndim;
  int64_t dims[MRT_MAX_DIMS];
  size_t count;        /* number of elements (product of dims; 1 for a scalar) */
  size_t nbytes;
  void *data;          /* arena, weights (read-only!) or NULL before bind */
  uint32_t is_constant;
} mrt_tensor;

struct mrt_kernel;
typedef struct mrt_pool mrt_pool;

typedef struct mrt_node {
  const char *op;
  const char *domain;  /* "" for ai.onnx */
  const char *name;
  uint32_t opset;      /* the operator's since_version the model was converted for */
  uint32_t types;      /* type signature: the mrt_dtype of each type constraint of the
                          kernel, a byte each, constraint 0 lowest (one constraint: its dtype) */
  uint32_t n_inputs;
  uint32_t n_outputs;
  uint32_t n_attrs;
  mrt_tensor **inputs; /* an omitted optional input is NULL */
  mrt_tensor **outputs;
  const mrt_attr *attrs;
  void *params;        /* kernel-private, set by prepare */
  const struct mrt_kernel *kernel;
  mrt_pool *pool;      /* the session's thread pool, for run() (see mrt_parallel_for) */
} mrt_node;

typedef struct mrt_ctx mrt_ctx;

/* Services for prepare (runtime/kernel_ctx.c). */
/* Allocate zeroed memory owned by the session (freed with it). NULL on OOM. */
void *mrt_ctx_alloc(mrt_ctx *ctx, size_t size);
/* Ask for `size` bytes of 64-byte aligned scratch passed to run(). */
void mrt_ctx_request_scratch(mrt_ctx *ctx, size_t size);
/* Record an error message naming the node (printf-like: %s %d %u %lld %zu). Returns status. */
mrt_status mrt_ctx_error(mrt_ctx *ctx, const mrt_node *node, mrt_status status, const char *fmt, ...);

/* Threads run() may use (node->pool's, caller included): size per-thread
 * scratch for this many (1 in a build without threads). */
size_t mrt_ctx_threads(const mrt_ctx *ctx);

/*
 * Parallel loops (runtime/threadpool.c). mrt_parallel_for runs fn(arg, task,
 * thread) for every task in [0, n_tasks) and returns when all are done. The
 * calling thread takes part; `thread` in [0, mrt_pool_threads(pool)) tells
 * which thread runs the task, so per-thread scratch is scratch + thread *
 * stride (two tasks of one thread never overlap). Each task must write its own
 * output range. No nesting: a task must not call mrt_parallel_for. A NULL pool
 * or a build without threads runs the tasks in order on the caller's thread.
 */
typedef void (*mrt_task_fn)(void *arg, size_t task, size_t thread);
void mrt_parallel_for(mrt_pool *pool, size_t n_tasks, mrt_task_fn fn, void *arg);
size_t mrt_pool_threads(const mrt_pool *pool); /* 1 for NULL */
/* How many tasks to cut `work` units into so that each gets at least
 * `min_work` (small ops stay on the caller's thread: 1); at most a few per
 * thread (so a descheduled worker's share goes to the others). */
size_t mrt_pool_tasks(const mrt_pool *pool, size_t work, size_t min_work);

/* The build's config.h (generated; absent when a test compiles kernels alone). */
#if defined(__has_include)
#if __has_include("config.h")
#include "config.h"
#endif
#endif
#if defined(MRT_ENABLE_THREADS) && !MRT_ENABLE_THREADS
/* Without threads every loop is one task on the caller's thread: a constant
 * the compiler folds, so the kernels' parallel paths cost no bytes. */
#define mrt_pool_tasks(pool, work, min_work) ((void)(pool), (void)(work), (void)(min_work), (size_t)1)
#define mrt_pool_threads(pool) ((void)(pool), (size_t)1)
#define mrt_ctx_threads(ctx) ((void)(ctx), (size_t)1)
static inline void mrt_serial_for(size_t n_tasks, mrt_task_fn fn, void *arg) {
  for (size_t t = 0; t < n_tasks; ++t) fn(arg, t, 0);
}
#define mrt_parallel_for(pool, n_tasks, fn, arg) ((void)(pool), mrt_serial_for((n_tasks), (fn), (arg)))
#endif

typedef mrt_status (*mrt_prepare_fn)(mrt_node *node, mrt_ctx *ctx);
typedef void (*mrt_run_fn)(const mrt_node *node, void *scratch);

/* One row of the generated registry (registry.c). */
typedef struct mrt_kernel {
  const char *domain;
  const char *op;
  uint16_t since_min;  /* accepted operator since_versions, inclusive */
  uint16_t since_max;
  uint32_t types;      /* the type signature it serves, packed as mrt_node.types */
  mrt_prepare_fn prepare;
  mrt_run_fn run;
} mrt_kernel;

extern const mrt_kernel mrt_kernels[];
extern const size_t mrt_kernel_count;

/* Attribute helpers (runtime/attrs.c). Lookups by name; absent -> default. */
const mrt_attr *mrt_node_attr(const mrt_node *node, const char *name);
int64_t mrt_attr_int(const mrt_node *node, const char *name, int64_t dflt);
float mrt_attr_float(const mrt_node *node, const char *name, float dflt);
/* Returns the number of elements (0 if absent) and sets *values. */
uint32_t mrt_attr_ints(const mrt_node *node, const char *name, const int64_t **values);
uint32_t mrt_attr_floats(const mrt_node *node, const char *name, const float **values);
/* Compares a STRING attribute with `s`; absent -> compares `dflt`. */
int mrt_attr_string_is(const mrt_node *node, const char *name, const char *dflt, const char *s);

/* Common checks used by prepare functions (runtime/kernel_ctx.c). */
mrt_status mrt_check_arity(mrt_ctx *ctx, const mrt_node *node, uint32_t min_in, uint32_t max_in,
                           uint32_t min_out, uint32_t max_out);
mrt_status mrt_check_dtype(mrt_ctx *ctx, const mrt_node *node, const mrt_tensor *t, mrt_dtype want);
/* The prelude most kernels share: mrt_check_arity with at least one output and
 * 1 <= min_in (so input 0 is present), then input 0 and output 0 of dtype want. */
mrt_status mrt_check_xy(mrt_ctx *ctx, const mrt_node *node, uint32_t min_in, uint32_t max_in, uint32_t max_out,
                        mrt_dtype want);

#ifdef __cplusplus
}
#endif

#endif /* MRT_KERNEL_H */
