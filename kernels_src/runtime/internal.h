/*
 * Runtime-core internals: the session record and what the core's units call
 * in each other. Calls point one way, so each unit can be read, tested and
 * sized on its own:
 *
 *   session.c    -> model.c, status.c, registry.c (generated), kernels' prepare/run
 *   model.c      -> status.c
 *   kernels      -> kernel_ctx.c, attrs.c (mrt_kernel.h), their support units
 *   kernel_ctx.c -> status.c
 *   threadpool.c -> libc (pthreads) only
 *   attrs.c, status.c -> libc only
 */
#ifndef MRT_INTERNAL_H
#define MRT_INTERNAL_H

#include <stdarg.h>
#include <stdio.h>

#include "mrt_kernel.h"
#include "config.h" /* generated: MRT_ENABLE_MESSAGES, MRT_ENABLE_THREADS */

#define MRT_MAGIC "MRTM"
#define MRT_FORMAT_MAJOR 1
#define MRT_HEADER_SIZE 96u
#define MRT_TENSOR_RECORD 88u
#define MRT_NODE_RECORD 48u
#define MRT_ATTR_RECORD 24u
#define MRT_NO_INDEX 0xFFFFFFFFu
#define MRT_ALIGN 64u

/* Huge pages for large blocks (kernel_ctx.c): speed builds on Linux/Android. */
#if defined(__linux__) && !MRT_TUNE_SIZE
#define MRT_HUGE_PAGES 1
void mrt_advise_huge(void *p, size_t size);
#else
#define MRT_HUGE_PAGES 0
#define mrt_advise_huge(p, size) ((void)(p), (void)(size))
#endif

#define MRT_ERROR_SIZE 256

struct mrt_ctx {
  struct mrt_session *session;
  size_t scratch_size;
};

struct mrt_session {
  uint8_t *owned_model;      /* the block holding the model when the session owns it (a copy, or the file read), NULL when borrowed */
  const uint8_t *model;
  size_t model_size;
  uint32_t n_tensors, n_nodes, n_inputs, n_outputs;
  mrt_tensor *tensors;
  mrt_node *nodes;
  mrt_attr *attrs;
  mrt_tensor **io;           /* node input/output pointer lists */
  uint32_t *graph_io;        /* indices of graph inputs then outputs */
  uint8_t *arena;            /* activations, 64-aligned inside arena_block */
  void *arena_block;
  size_t arena_size;
  uint8_t *scratch;
  void *scratch_block;
  size_t scratch_size;
  void **input_home;         /* per graph input: its arena memory, or NULL where a view shares it (mrt_session_run_with copies it in) */
  struct mrt_pool *pool;     /* threadpool.c; every node's pool */
  void **allocs;             /* memory handed out by mrt_ctx_alloc */
  size_t n_allocs, cap_allocs;
  char error[MRT_ERROR_SIZE];
};

/* threadpool.c: a pool of n_threads (caller included; workers start at the
 * first parallel loop). NULL on out of memory. */
struct mrt_pool *mrt_pool_create(size_t n_threads);
void mrt_pool_destroy(struct mrt_pool *pool);

/* model.c: parse and check the model bytes into `s`. */
mrt_status mrt_model_load(struct mrt_session *s);

/* status.c (mrt_status_string is public, in minirt.h). */
size_t mrt_dtype_size(uint32_t dtype);     /* 0 for an unknown dtype */
const char *mrt_dtype_name(uint32_t dtype);
/* vsnprintf into dst, or an empty string when messages are compiled out
 * (the format strings then stay out of the binary too). Inline: two callers,
 * mrt_session_fail and mrt_ctx_error, and smaller than a call on ARM. */
static inline void mrt_vformat(char *dst, size_t size, const char *fmt, va_list ap) {
#if MRT_ENABLE_MESSAGES
  vsnprintf(dst, size, fmt, ap);
#else
  (void)fmt; (void)ap;
  if (size) dst[0] = 0;
#endif
}
/* Records a printf-like message as the session's last error; returns status. */
mrt_status mrt_session_fail(struct mrt_session *s, mrt_status status, const char *fmt, ...);

#endif
