/*
 * Ops that only relabel the shape: Reshape, Flatten, Squeeze, Unsqueeze,
 * Identity, Dropout (inference). Shapes are static, so prepare checks that
 * the output shape is the one the op defines and run copies the bytes, or
 * does nothing when the converter gave input and output the same memory.
 * Copies go by bytes, so one object (registry `instantiate: any`) serves
 * every element type.
 */
#include "kcommon.h"

MRT_PREPARE_CODE
static mrt_status sh_check(mrt_node *node, mrt_ctx *ctx, uint32_t min_in, uint32_t max_in,
                           uint32_t max_out) {
  mrt_status st = mrt_check_arity(ctx, node, min_in, max_in, 1, max_out);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  if (!x) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input 0 is missing");
  if (x->dtype != y->dtype || x->count != y->count)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "output must have the input's type and element count (%zu vs %zu)",
                         y->count, x->count);
  /* Input and output alias exactly or lie apart: the loader refuses a partial overlap. */
  return MRT_STATUS_OK;
}

static mrt_status sh_mismatch(mrt_ctx *ctx, const mrt_node *node, const char *what) {
  return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                       "output shape differs from the one %s defines", what);
}

#if defined(MRT_OP_Squeeze) || defined(MRT_OP_Unsqueeze)
/* Axes from the attribute `axes` (opset < attr_before) or from constant input 1;
 * copied into axes[], count in *n (0 when absent). */
static mrt_status sh_axes(mrt_node *node, mrt_ctx *ctx, uint32_t attr_before, int64_t *axes,
                          uint32_t *n) {
  if (node->opset < attr_before) {
    const int64_t *v;
    *n = mrt_attr_ints(node, "axes", &v);
    if (*n > MRT_MAX_DIMS)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "too many axes");
    for (uint32_t i = 0; i < *n; i++) axes[i] = v[i];
    return MRT_STATUS_OK;
  }
  const mrt_tensor *t = mrt_in(node, 1);
  *n = 0;
  if (!t) return MRT_STATUS_OK;
  if (!mrt_const_ints_ok(t))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "input 1 (axes) must be a build-time int64 constant");
  if (t->count > MRT_MAX_DIMS)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "too many axes");
  *n = (uint32_t)t->count;
  for (uint32_t i = 0; i < *n; i++) axes[i] = mrt_int_at(t, i);
  return MRT_STATUS_OK;
}
#endif

#define COPY_RUN(name)                                                          \
  void MRT_KERNEL(mrt_##name##_run)(const mrt_node *node, void *scratch) {     \
    MRT_UNUSED(scratch);                                                        \
    mrt_copy_unless_aliased(node->inputs[0], node->outputs[0]);                 \
  }

#if defined(MRT_OP_Reshape)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_reshape_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = sh_check(node, ctx, 1, 2, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0], *s = mrt_in(node, 1);
  int64_t want[MRT_MAX_DIMS];
  uint32_t n;
  if (node->opset < 5) {
    const int64_t *v;
    n = mrt_attr_ints(node, "shape", &v);
    for (uint32_t i = 0; i < n && i < MRT_MAX_DIMS; i++) want[i] = v[i];
  } else {
    if (!mrt_const_ints_ok(s))
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                           "input 1 (shape) must be a build-time int64 constant");
    n = (uint32_t)s->count;
    for (uint32_t i = 0; i < n && i < MRT_MAX_DIMS; i++) want[i] = mrt_int_at(s, i);
  }
  if (n != y->ndim) return sh_mismatch(ctx, node, "the shape input");
  const int allowzero = mrt_attr_int(node, "allowzero", 0) != 0;
  int64_t known = 1;
  int infer = -1;
  for (uint32_t i = 0; i < n; i++) {
    if (want[i] == 0 && !allowzero) {
      if (i >= x->ndim) return sh_mismatch(ctx, node, "the shape input (0 past input rank)");
      want[i] = x->dims[i];
    }
    if (want[i] == -1) {
      if (infer >= 0) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "two -1 in shape");
      infer = (int)i;
    } else if (want[i] < 0) {
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "negative dim in shape");
    } else if (__builtin_mul_overflow(known, want[i], &known)) {
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "shape's element count overflows");
    }
  }
  if (infer >= 0) want[infer] = known ? (int64_t)x->count / known : 0;
  for (uint32_t i = 0; i < n; i++)
    if (want[i] != y->dims[i]) return sh_mismatch(ctx, node, "the shape input");
  return MRT_STATUS_OK;
}
COPY_RUN(reshape)
#endif

#if defined(MRT_OP_Flatten)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_flatten_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = sh_check(node, ctx, 1, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  int64_t axis = mrt_attr_int(node, "axis", 1);
  if (axis < 0) axis += x->ndim;
  if (axis < 0 || axis > (int64_t)x->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis out of range");
  if (y->ndim != 2 || (size_t)y->dims[0] != mrt_prod(x->dims, 0, (uint32_t)axis))
    return sh_mismatch(ctx, node, "axis");
  return MRT_STATUS_OK;
}
COPY_RUN(flatten)
#endif

#if defined(MRT_OP_Squeeze)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_squeeze_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = sh_check(node, ctx, 1, 2, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  int64_t axes[MRT_MAX_DIMS];
  uint32_t n;
  if ((st = sh_axes(node, ctx, 13, axes, &n))) return st;
  uint32_t drop = 0; /* bit i: input dim i is removed */
  for (uint32_t i = 0; i < n; i++) {
    int64_t a = mrt_norm_axis(axes[i], x->ndim);
    if (a < 0 || x->dims[a] != 1)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "axis %lld is out of range or not of size 1", (long long)axes[i]);
    drop |= 1u << a;
  }
  if (n == 0)
    for (uint32_t i = 0; i < x->ndim; i++)
      if (x->dims[i] == 1) drop |= 1u << i;
  uint32_t k = 0;
  for (uint32_t i = 0; i < x->ndim; i++) {
    if (drop >> i & 1) continue;
    if (k >= y->ndim || y->dims[k] != x->dims[i]) return sh_mismatch(ctx, node, "axes");
    k++;
  }
  return k == y->ndim ? MRT_STATUS_OK : sh_mismatch(ctx, node, "axes");
}
COPY_RUN(squeeze)
#endif

#if defined(MRT_OP_Unsqueeze)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_unsqueeze_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = sh_check(node, ctx, 1, 2, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  int64_t axes[MRT_MAX_DIMS];
  uint32_t n;
  if ((st = sh_axes(node, ctx, 13, axes, &n))) return st;
  if (n == 0 && node->opset >= 13)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input 1 (axes) is required");
  if (x->ndim + n != y->ndim) return sh_mismatch(ctx, node, "axes");
  uint32_t ins = 0; /* bit i: output dim i is a new 1 */
  for (uint32_t i = 0; i < n; i++) {
    int64_t a = mrt_norm_axis(axes[i], y->ndim);
    if (a < 0 || (ins >> a & 1))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "axis %lld is out of range or repeated", (long long)axes[i]);
    ins |= 1u << a;
  }
  for (uint32_t i = 0, k = 0; i < y->ndim; i++)
    if (y->dims[i] != ((ins >> i & 1) ? 1 : x->dims[k++])) return sh_mismatch(ctx, node, "axes");
  return MRT_STATUS_OK;
}
COPY_RUN(unsqueeze)
#endif

#if defined(MRT_OP_Identity)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_identity_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = sh_check(node, ctx, 1, 1, 1);
  if (st) return st;
  return mrt_same_dims(node->inputs[0], node->outputs[0]) ? MRT_STATUS_OK
                                                          : sh_mismatch(ctx, node, "Identity");
}
COPY_RUN(identity)
#endif

#if defined(MRT_OP_Dropout)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_dropout_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = sh_check(node, ctx, 1, 3, 2);
  if (st) return st;
  if (!mrt_same_dims(node->inputs[0], node->outputs[0])) return sh_mismatch(ctx, node, "Dropout");
  /* Opset 12+: training_mode is an input. Only a constant false is inference;
   * training with a constant ratio of 0 drops nothing, so it is the same copy. */
  const mrt_tensor *tm = mrt_in(node, 2), *ratio = mrt_in(node, 1);
  const int zero_ratio = ratio && ratio->is_constant && ratio->data && ratio->count == 1 &&
                         ratio->dtype == MRT_DTYPE_FLOAT32 && *(const float *)ratio->data == 0.0f;
  if (tm && !zero_ratio &&
      !(tm->is_constant && tm->data && tm->count == 1 && !*(const uint8_t *)tm->data))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "training_mode must be absent or a constant false: only inference "
                         "Dropout is supported");
  const mrt_tensor *mask = mrt_out(node, 1);
  if (mask) {
    if (!mrt_same_dims(mask, node->outputs[0]) ||
        (mask->dtype != MRT_DTYPE_BOOL && mask->dtype != node->inputs[0]->dtype))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "mask must be bool (or the input's type before opset 10) with the "
                           "output's shape");
  }
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_dropout_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  mrt_copy_unless_aliased(node->inputs[0], node->outputs[0]);
  /* Inference keeps every element: the mask is all true (1 of its type). */
  const mrt_tensor *mask = mrt_out(node, 1);
  if (!mask || !mask->count) return;
  if (mask->dtype == MRT_DTYPE_BOOL) {
    memset(mask->data, 1, mask->count);
    return;
  }
  /* Bit patterns of 1.0, little-endian like every target. */
  const uint64_t one = mask->dtype == MRT_DTYPE_FLOAT16   ? 0x3c00u
                       : mask->dtype == MRT_DTYPE_FLOAT64 ? 0x3ff0000000000000u
                                                          : 0x3f800000u;
  const size_t es = mask->nbytes / mask->count;
  for (size_t i = 0; i < mask->count; i++) memcpy((char *)mask->data + i * es, &one, es);
}
#endif
