/*
 * Slice, every element type: one object per element size (registry
 * `instantiate: size`). Starts/ends/axes/steps come as attributes (opset 1) or
 * as build-time constant inputs (opset 10+, int32 or int64). The slice becomes
 * a strided view of the input (start offset, stride step * input stride)
 * copied by strided_copy.h.
 */
#include "kcommon.h"
#include "strided_copy.h"

#if defined(MRT_OP_Slice)

typedef struct slice_params {
  mrt_view v;
  ptrdiff_t base;
} slice_params;

/* Element i of attribute `name` (opset 1) or constant input `in` (opset 10+). */
MRT_PREPARE_CODE
static int64_t sl_get(const mrt_node *node, const char *name, uint32_t in, uint32_t i) {
  if (node->opset < 10) {
    const int64_t *v;
    mrt_attr_ints(node, name, &v);
    return v[i];
  }
  return mrt_int_at(node->inputs[in], i);
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_slice_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 5, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  /* Whichever type of this object's size input 0 has, output 0 must have it too. */
  if ((st = mrt_check_dtype(ctx, node, y, x->dtype))) return st;
  const int legacy = node->opset < 10;
  uint32_t n, na = 0, nst = 0;
  if (legacy) {
    const int64_t *v;
    n = mrt_attr_ints(node, "starts", &v);
    if (mrt_attr_ints(node, "ends", &v) != n)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "starts and ends differ in length");
    na = mrt_attr_ints(node, "axes", &v);
  } else {
    for (uint32_t i = 1; i < node->n_inputs; i++)
      if (node->inputs[i] && !mrt_const_ints_ok(node->inputs[i]))
        return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                             "input %u (starts/ends/axes/steps) must be a build-time integer "
                             "constant",
                             i);
    if (!mrt_in(node, 1) || !mrt_in(node, 2) || node->inputs[1]->count != node->inputs[2]->count)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "starts and ends are required and must have the same length");
    n = (uint32_t)node->inputs[1]->count;
    na = mrt_in(node, 3) ? (uint32_t)node->inputs[3]->count : 0;
    nst = mrt_in(node, 4) ? (uint32_t)node->inputs[4]->count : 0;
  }
  if ((na && na != n) || (nst && nst != n) || n > x->ndim || y->ndim != x->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "starts, ends, axes and steps must have the same length <= rank");
  int64_t start[MRT_MAX_DIMS], step[MRT_MAX_DIMS], cnt[MRT_MAX_DIMS];
  for (uint32_t d = 0; d < x->ndim; d++) start[d] = 0, step[d] = 1, cnt[d] = x->dims[d];
  uint32_t seen = 0;
  for (uint32_t i = 0; i < n; i++) {
    const int64_t a = mrt_norm_axis(na ? sl_get(node, "axes", 3, i) : (int64_t)i, x->ndim);
    if (a < 0 || (seen >> a & 1))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axes out of range or repeated");
    seen |= 1u << a;
    const int64_t dim = x->dims[a];
    const int64_t k = nst ? mrt_int_at(node->inputs[4], i) : 1;
    int64_t b = sl_get(node, "starts", 1, i), e = sl_get(node, "ends", 2, i);
    if (k == 0) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "step 0");
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    /* Clamp as ONNX says: [0, dim] going forward, [-1, dim - 1] going backward. */
    const int64_t lo = k > 0 ? 0 : -1, hi = k > 0 ? dim : dim - 1;
    b = b < lo ? lo : b > hi ? hi : b;
    if (k < 0 && b < 0) b = 0, e = 0; /* nothing to take */
    e = e < lo ? lo : e > hi ? hi : e;
    const int64_t c = k > 0 ? (e - b + k - 1) / k : (b - e + (-k) - 1) / (-k);
    start[a] = b, step[a] = k, cnt[a] = c > 0 ? c : 0;
  }
  slice_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  ptrdiff_t xs = 1;
  for (uint32_t d = x->ndim; d-- > 0;) {
    if (y->dims[d] != cnt[d])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "output dim %u is %lld, the slice gives %lld", d,
                           (long long)y->dims[d], (long long)cnt[d]);
    p->v.n[d] = (size_t)cnt[d];
    p->v.s[d] = (ptrdiff_t)step[d] * xs;
    if (cnt[d]) p->base += (ptrdiff_t)start[d] * xs;
    xs *= (ptrdiff_t)x->dims[d];
  }
  p->v.ndim = x->ndim ? x->ndim : 1;
  if (!x->ndim) p->v.n[0] = 1, p->v.s[0] = 1;
  mrt_view_collapse(&p->v);
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_slice_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const slice_params *p = node->params;
  MRT_VIEW_COPY_FN(&p->v, (const MRT_T0 *)node->inputs[0]->data + p->base, node->outputs[0]->data);
}

#endif
