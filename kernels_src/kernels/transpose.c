/*
 * Transpose, any perm up to MRT_MAX_DIMS, every element type: one object per
 * element size (registry `instantiate: size`), since moving an element only
 * needs its size. Prepare turns the perm into a collapsed strided view of the
 * input (see strided.h); dims that stay neighbours merge, so e.g. NCHW -> NHWC
 * is one tiled [HW, C] transpose per image.
 */
#include "kcommon.h"
#include "strided_copy.h"

#if defined(MRT_OP_Transpose)

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_transpose_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 1, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  /* Whichever type of this object's size input 0 has, output 0 must have it too. */
  if ((st = mrt_check_dtype(ctx, node, y, x->dtype))) return st;
  const uint32_t r = x->ndim;
  const int64_t *perm;
  uint32_t np = mrt_attr_ints(node, "perm", &perm);
  if ((np && np != r) || y->ndim != r)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "perm has %u values and the output rank %u; both must equal the input "
                         "rank %u",
                         np, y->ndim, r);
  mrt_view *v = mrt_ctx_alloc(ctx, sizeof *v);
  if (!v) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  ptrdiff_t xs[MRT_MAX_DIMS];
  ptrdiff_t s = 1;
  for (uint32_t i = r; i-- > 0;) xs[i] = s, s *= (ptrdiff_t)x->dims[i];
  uint32_t seen = 0;
  for (uint32_t i = 0; i < r; i++) {
    const int64_t p = np ? perm[i] : (int64_t)(r - 1 - i); /* default: reverse the dims */
    if (p < 0 || p >= (int64_t)r || (seen >> p & 1))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "perm is not a permutation");
    seen |= 1u << p;
    if (y->dims[i] != x->dims[p])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "output dim %u is %lld, perm gives %lld", i, (long long)y->dims[i],
                           (long long)x->dims[p]);
    v->n[i] = (size_t)x->dims[p], v->s[i] = xs[p];
  }
  v->ndim = r;
  mrt_view_collapse(v);
  node->params = v;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_transpose_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  MRT_VIEW_COPY_FN(node->params, node->inputs[0]->data, node->outputs[0]->data);
}

#endif
