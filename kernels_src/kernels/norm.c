/*
 * Normalisation, float32, inference only: BatchNormalization,
 * InstanceNormalization, LRN.
 */
#include "kcommon.h"

#if defined(MRT_TYPE_float32)

MRT_PREPARE_CODE
static mrt_status norm_check_xy(mrt_node *node, mrt_ctx *ctx, uint32_t nin, uint32_t max_out) {
  mrt_status st = mrt_check_arity(ctx, node, nin, nin, 1, max_out);
  if (st) return st;
  for (uint32_t i = 0; i < nin; i++) {
    if (!node->inputs[i])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input %u is missing", i);
    if ((st = mrt_check_dtype(ctx, node, node->inputs[i], MRT_DTYPE_FLOAT32))) return st;
  }
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  if ((st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_FLOAT32))) return st;
  if (!mrt_same_dims(x, y) || x->ndim < 2)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "input must be [N, C, ...] and the output must have its shape");
  return MRT_STATUS_OK;
}

#if defined(MRT_OP_BatchNormalization)

typedef struct bn_params {
  size_t n;      /* batch */
  size_t np;     /* per-parameter groups in one batch item: C, or C*D1*... when not spatial */
  size_t inner;  /* elements sharing one parameter inside a group */
  float eps;
} bn_params;

MRT_PREPARE_CODE
mrt_status mrt_batchnormalization_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = norm_check_xy(node, ctx, 5, 5);
  if (st) return st;
  /* Extra outputs exist only in training mode (running/saved mean and var). */
  for (uint32_t i = 1; i < node->n_outputs; i++)
    if (node->outputs[i])
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                           "training-mode outputs (output %u) are not supported: export the "
                           "model in inference mode",
                           i);
  if (mrt_attr_int(node, "training_mode", 0) ||
      (node->opset < 7 && !mrt_attr_int(node, "is_test", 0) && node->n_outputs > 1))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "training mode is not supported: export the model in inference mode");
  const mrt_tensor *x = node->inputs[0];
  bn_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->n = (size_t)x->dims[0];
  /* Opset < 9 with spatial=0: one parameter per (C, D1, ...) element. */
  const int spatial = node->opset >= 9 || mrt_attr_int(node, "spatial", 1) != 0;
  p->np = spatial ? (size_t)x->dims[1] : mrt_prod(x->dims, 1, x->ndim);
  p->inner = spatial ? mrt_prod(x->dims, 2, x->ndim) : 1;
  p->eps = mrt_attr_float(node, "epsilon", 1e-5f);
  for (uint32_t i = 1; i < 5; i++)
    if (node->inputs[i]->count != p->np)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "input %u has %zu elements, %zu expected", i,
                           node->inputs[i]->count, p->np);
  node->params = p;
  return MRT_STATUS_OK;
}

void mrt_batchnormalization_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const bn_params *p = node->params;
  const float *x = node->inputs[0]->data, *scale = node->inputs[1]->data,
              *bias = node->inputs[2]->data, *mean = node->inputs[3]->data,
              *var = node->inputs[4]->data;
  float *y = node->outputs[0]->data;
  /* Folded per parameter to y = x * a + b: one multiply-add per element. Usually
   * the converter has folded BN into the conv before it ever gets here. */
  for (size_t b = 0; b < p->n; b++)
    for (size_t c = 0; c < p->np; c++) {
      const float a = scale[c] / sqrtf(var[c] + p->eps), o = bias[c] - mean[c] * a;
      for (size_t i = 0; i < p->inner; i++) y[i] = x[i] * a + o;
      x += p->inner, y += p->inner;
    }
}
#endif

#if defined(MRT_OP_InstanceNormalization)

typedef struct in_params {
  size_t n, c, inner;
  float eps;
} in_params;

MRT_PREPARE_CODE
mrt_status mrt_instancenormalization_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = norm_check_xy(node, ctx, 3, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0];
  in_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->n = (size_t)x->dims[0], p->c = (size_t)x->dims[1];
  p->inner = mrt_prod(x->dims, 2, x->ndim);
  p->eps = mrt_attr_float(node, "epsilon", 1e-5f);
  if (node->inputs[1]->count != p->c || node->inputs[2]->count != p->c)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "scale and B must have C values");
  node->params = p;
  return MRT_STATUS_OK;
}

void mrt_instancenormalization_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const in_params *p = node->params;
  const float *x = node->inputs[0]->data, *scale = node->inputs[1]->data,
              *bias = node->inputs[2]->data;
  float *y = node->outputs[0]->data;
  const float inv = p->inner ? 1.0f / (float)p->inner : 0.0f;
  for (size_t b = 0; b < p->n; b++)
    for (size_t c = 0; c < p->c; c++) {
      /* Two passes (mean, then centred squares): stable where E[x^2]-E[x]^2 is not. */
      float m = 0.0f, v = 0.0f;
      for (size_t i = 0; i < p->inner; i++) m += x[i];
      m *= inv;
      for (size_t i = 0; i < p->inner; i++) v += (x[i] - m) * (x[i] - m);
      const float a = scale[c] / sqrtf(v * inv + p->eps), o = bias[c] - m * a;
      for (size_t i = 0; i < p->inner; i++) y[i] = x[i] * a + o;
      x += p->inner, y += p->inner;
    }
}
#endif

#if defined(MRT_OP_LRN)

typedef struct lrn_params {
  size_t n, c, inner;
  int64_t lo, hi; /* channel window [c - lo, c + hi] */
  float alpha_over_size, beta, bias;
} lrn_params;

MRT_PREPARE_CODE
mrt_status mrt_lrn_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = norm_check_xy(node, ctx, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0];
  const int64_t size = mrt_attr_int(node, "size", 0);
  if (size < 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "attribute size must be >= 1");
  lrn_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->n = (size_t)x->dims[0], p->c = (size_t)x->dims[1];
  p->inner = mrt_prod(x->dims, 2, x->ndim);
  p->lo = (size - 1) / 2, p->hi = size - 1 - p->lo;
  p->alpha_over_size = mrt_attr_float(node, "alpha", 1e-4f) / (float)size;
  p->beta = mrt_attr_float(node, "beta", 0.75f);
  p->bias = mrt_attr_float(node, "bias", 1.0f);
  node->params = p;
  return MRT_STATUS_OK;
}

void mrt_lrn_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const lrn_params *p = node->params;
  const float *x = node->inputs[0]->data;
  float *y = node->outputs[0]->data;
  const size_t plane = p->c * p->inner;
  for (size_t b = 0; b < p->n; b++, x += plane, y += plane)
    for (size_t c = 0; c < p->c; c++) {
      const size_t c0 = (int64_t)c < p->lo ? 0 : c - (size_t)p->lo;
      const size_t c1 = c + (size_t)p->hi + 1 < p->c ? c + (size_t)p->hi + 1 : p->c;
      for (size_t i = 0; i < p->inner; i++) {
        float s = 0.0f;
        for (size_t k = c0; k < c1; k++) s += x[k * p->inner + i] * x[k * p->inner + i];
        y[c * p->inner + i] =
            x[c * p->inner + i] / powf(p->bias + p->alpha_over_size * s, p->beta);
      }
    }
}
#endif

#endif /* MRT_TYPE_float32 */
