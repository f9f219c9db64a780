/* Strided gather and the Transpose/Slice plans (see strided.h). */
#include "kcommon.h"
#include "strided.h"

MRT_PREPARE_CODE
void mrt_view_collapse(mrt_view *v) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < v->ndim; i++) {
    if (v->n[i] == 1) continue;
    if (v->n[i] == 0) { /* empty: nothing to copy */
      v->ndim = 1, v->n[0] = 0, v->s[0] = 1;
      return;
    }
    if (k > 0 && v->s[k - 1] == v->s[i] * (ptrdiff_t)v->n[i]) {
      v->n[k - 1] *= v->n[i];
      v->s[k - 1] = v->s[i];
    } else {
      v->n[k] = v->n[i], v->s[k] = v->s[i];
      k++;
    }
  }
  if (k == 0) v->n[0] = 1, v->s[0] = 1, k = 1;
  v->ndim = k;
}

/* One copy per element size, from one template. */
#define MRT_VIEW_T uint8_t
#define MRT_VIEW_COPY_FN mrt_view_copy_u8
#include "strided_copy.h"
#undef MRT_VIEW_T
#undef MRT_VIEW_COPY_FN
#define MRT_VIEW_T uint16_t
#define MRT_VIEW_COPY_FN mrt_view_copy_u16
#include "strided_copy.h"
#undef MRT_VIEW_T
#undef MRT_VIEW_COPY_FN
#define MRT_VIEW_T uint32_t
#define MRT_VIEW_COPY_FN mrt_view_copy_u32
#include "strided_copy.h"
#undef MRT_VIEW_T
#undef MRT_VIEW_COPY_FN
#define MRT_VIEW_T uint64_t
#define MRT_VIEW_COPY_FN mrt_view_copy_u64
#include "strided_copy.h"
#undef MRT_VIEW_T
#undef MRT_VIEW_COPY_FN

/* Transpose: any perm up to MRT_MAX_DIMS. The perm becomes a collapsed strided
 * view of the input; dims that stay neighbours merge, so e.g. NCHW -> NHWC is
 * one tiled [HW, C] transpose per image. */
MRT_PREPARE_CODE
mrt_status mrt_transpose_plan(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 1, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
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

/* Slice: starts/ends/axes/steps as attributes (opset 1) or as build-time
 * constant inputs (opset 10+). The slice becomes a strided view of the input
 * (start offset, stride step * input stride). */
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
mrt_status mrt_slice_plan_prepare(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 5, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
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
  mrt_slice_plan *p = mrt_ctx_alloc(ctx, sizeof *p);
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

