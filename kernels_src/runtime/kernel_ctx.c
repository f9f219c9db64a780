/* What a kernel's prepare() calls on its mrt_ctx (mrt_kernel.h): session-owned
 * memory, scratch requests, error messages naming the node, and the common
 * arity / dtype checks. Kernels call into it; it calls only status.c. */
#define _DEFAULT_SOURCE /* madvise, on C libraries that hide it in strict C */
#include <stdarg.h>
#include <stdlib.h>

#include "internal.h"

#if MRT_HUGE_PAGES
#include <sys/mman.h>

/* Linux (and Android) back anonymous memory with 4 KB pages unless asked:
 * the kernels stream weights and activations of many MB, and each 4 KB page
 * is a TLB entry. Asking for transparent huge pages on the 2 MB-aligned
 * inside of a large block, before it is first written, maps it with 2 MB
 * pages where the system allows (THP "madvise" mode, the common default);
 * elsewhere the call fails and nothing changes. The block's resident size is
 * the same: it is all written anyway. MobileNetV2, one thread: 1.3-1.5 %. */
void mrt_advise_huge(void *p, size_t size) {
  const uintptr_t huge = (uintptr_t)2 << 20;
  const uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + size) & ~(huge - 1);
  if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
}
#endif

void *mrt_ctx_alloc(mrt_ctx *ctx, size_t size) {
  struct mrt_session *s = ctx->session;
  if (s->n_allocs == s->cap_allocs) {
    size_t cap = s->cap_allocs ? s->cap_allocs * 2 : 16;
    void **grown = realloc(s->allocs, cap * sizeof *grown);
    if (!grown) return NULL;
    s->allocs = grown;
    s->cap_allocs = cap;
  }
  /* 64-byte aligned so kernels can keep packed weights here. */
  void *block = calloc(1, size + MRT_ALIGN + sizeof(void *));
  if (!block) return NULL;
  mrt_advise_huge(block, size + MRT_ALIGN + sizeof(void *));
  s->allocs[s->n_allocs++] = block;
  uintptr_t p = ((uintptr_t)block + sizeof(void *) + MRT_ALIGN - 1) & ~(uintptr_t)(MRT_ALIGN - 1);
  return (void *)p;
}

void mrt_ctx_request_scratch(mrt_ctx *ctx, size_t size) {
  if (size > ctx->scratch_size) ctx->scratch_size = size;
}

#if MRT_ENABLE_THREADS
size_t mrt_ctx_threads(const mrt_ctx *ctx) { return mrt_pool_threads(ctx->session->pool); }
#endif

mrt_status mrt_ctx_error(mrt_ctx *ctx, const mrt_node *node, mrt_status status, const char *fmt, ...) {
  struct mrt_session *s = ctx->session;
  size_t n = 0;
#if MRT_ENABLE_MESSAGES
  n = (size_t)snprintf(s->error, sizeof s->error, "node '%s' (%s%s%s opset %u): ", node->name,
                       node->domain, node->domain[0] ? "." : "", node->op, node->opset);
  if (n >= sizeof s->error) n = sizeof s->error - 1;
#else
  (void)node;
#endif
  va_list ap;
  va_start(ap, fmt);
  mrt_vformat(s->error + n, sizeof s->error - n, fmt, ap);
  va_end(ap);
  return status;
}

mrt_status mrt_check_arity(mrt_ctx *ctx, const mrt_node *node, uint32_t min_in, uint32_t max_in,
                           uint32_t min_out, uint32_t max_out) {
  if (node->n_inputs < min_in || node->n_inputs > max_in || node->n_outputs < min_out ||
      node->n_outputs > max_out)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "has %u inputs and %u outputs, expected %u..%u and %u..%u",
                         node->n_inputs, node->n_outputs, min_in, max_in, min_out, max_out);
  for (uint32_t k = 0; k < min_in; k++) {
    if (!node->inputs[k])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "required input %u is missing", k);
  }
  return MRT_STATUS_OK;
}

mrt_status mrt_check_dtype(mrt_ctx *ctx, const mrt_node *node, const mrt_tensor *t, mrt_dtype want) {
  if (t && t->dtype != want)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "tensor '%s' is %s, expected %s", t->name,
                         mrt_dtype_name(t->dtype), mrt_dtype_name(want));
  return MRT_STATUS_OK;
}

mrt_status mrt_check_xy(mrt_ctx *ctx, const mrt_node *node, uint32_t min_in, uint32_t max_in, uint32_t max_out,
                        mrt_dtype want) {
  mrt_status st = mrt_check_arity(ctx, node, min_in, max_in, 1, max_out);
  if (st) return st;
  if ((st = mrt_check_dtype(ctx, node, node->inputs[0], want))) return st;
  return mrt_check_dtype(ctx, node, node->outputs[0], want);
}
