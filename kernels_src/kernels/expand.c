/*
 * Expand(input, shape): numpy-broadcast the input to a shape that is a build-time
 * constant (the output's static shape is then known, and prepare checks it).
 * Type family, T instantiated by size: Expand only moves elements.
 */
#include "kcommon.h"
#include "bcast.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_Expand)

typedef MRT_T0 elem;

static void expand_row(const mrt_node *node, size_t n, const size_t *off, const size_t *step,
                       size_t yoff) {
  const elem *MRT_RESTRICT x = (const elem *)node->inputs[0]->data + off[0];
  elem *MRT_RESTRICT y = (elem *)node->outputs[0]->data + yoff;
  if (step[0]) {
    memcpy(y, x, n * sizeof(elem));
  } else {
    const elem v = x[0];
    for (size_t i = 0; i < n; i++) y[i] = v;
  }
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_expand_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 2, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *s = node->inputs[1], *y = node->outputs[0];
  if (!x) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input 0 is missing");
  if ((st = mrt_check_dtype(ctx, node, y, x->dtype))) return st;
  if (x->count && x->nbytes / x->count != sizeof(elem))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "element size is not %zu bytes", sizeof(elem));
  /* Rows are copied from x into y; the loader refuses a plan where they partly overlap,
   * and an exact alias only happens when y has x's shape (a copy onto itself). */
  if (!mrt_const_ints_ok(s) || s->ndim != 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "input 1 (shape) must be a build-time int64 vector");
  /* y = broadcast(x, shape): check it against the shape input, right-aligned. */
  const uint32_t sn = (uint32_t)s->count;
  if (y->ndim != (sn > x->ndim ? sn : x->ndim))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output rank differs from broadcast(input, shape)");
  for (uint32_t i = 0; i < y->ndim; i++) {
    const int64_t a = i + x->ndim >= y->ndim ? x->dims[i + x->ndim - y->ndim] : 1;
    const int64_t b = i + sn >= y->ndim ? mrt_int_at(s, i + sn - y->ndim) : 1;
    if ((a != b && a != 1 && b != 1) || y->dims[i] != (a == 1 ? b : a))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "output dim %u differs from broadcast(input, shape)", i);
  }
  mrt_bcastn *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  const mrt_tensor *in[1] = {x};
  if (!mrt_bcastn_plan(p, 1, in, y, 0))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input does not broadcast to the output");
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_expand_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  mrt_bcastn_run(node->params, node, expand_row);
}

#endif
