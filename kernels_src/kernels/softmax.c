/*
 * Softmax and LogSoftmax, float32. Opset < 13 flattens the input to 2-D at
 * `axis` (default 1) and normalises each row; opset 13+ normalises along the
 * single axis `axis` (default -1). Both become (outer, n, inner): n values
 * spaced `inner` apart, inner = 1 for the 2-D form and the last-axis case.
 */
#include "kcommon.h"

#if defined(MRT_TYPE_float32) && (defined(MRT_OP_Softmax) || defined(MRT_OP_LogSoftmax))

#if defined(MRT_OP_Softmax)
#define PREPARE mrt_softmax_prepare_f32
#define RUN mrt_softmax_run_f32
#define IS_LOG 0
#else
#define PREPARE mrt_logsoftmax_prepare_f32
#define RUN mrt_logsoftmax_run_f32
#define IS_LOG 1
#endif

typedef struct sm_params {
  size_t outer, n, inner;
} sm_params;

MRT_PREPARE_CODE
mrt_status PREPARE(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_xy(ctx, node, 1, 1, 1, MRT_DTYPE_FLOAT32);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  if (!mrt_same_dims(x, y))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "output shape must equal the input shape");
  const int legacy = node->opset < 13;
  const int64_t rank = x->ndim;
  int64_t axis = mrt_attr_int(node, "axis", legacy ? 1 : -1);
  /* Opset < 13 accepts axis == rank (an empty second factor); treat as in range. */
  int64_t a = legacy && (axis == rank || (rank == 0 && axis == 0)) ? rank
                                                                    : mrt_norm_axis(axis, rank);
  if (a < 0)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis %lld out of range for rank %lld",
                         (long long)axis, (long long)rank);
  sm_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->outer = mrt_prod(x->dims, 0, (uint32_t)a);
  if (legacy) {
    p->n = mrt_prod(x->dims, (uint32_t)a, x->ndim);
    p->inner = 1;
  } else {
    p->n = (size_t)x->dims[a];
    p->inner = mrt_prod(x->dims, (uint32_t)a + 1, x->ndim);
  }
  node->params = p;
  return MRT_STATUS_OK;
}

/* One softmax over n values spaced s apart; max-subtracted so expf never overflows. */
static void sm_row(size_t n, size_t s, const float *x, float *y) {
  float m = -FLT_MAX, sum = 0.0f;
  for (size_t i = 0; i < n; i++) m = x[i * s] > m ? x[i * s] : m;
#if IS_LOG
  for (size_t i = 0; i < n; i++) sum += expf(x[i * s] - m);
  /* (x - m) - log(sum), not x - (m + log(sum)): the latter rounds log(sum)
   * away when m is large. */
  const float l = logf(sum);
  for (size_t i = 0; i < n; i++) y[i * s] = (x[i * s] - m) - l;
#else
  for (size_t i = 0; i < n; i++) {
    y[i * s] = expf(x[i * s] - m);
    sum += y[i * s];
  }
  const float r = 1.0f / sum;
  for (size_t i = 0; i < n; i++) y[i * s] *= r;
#endif
}

void RUN(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const sm_params *p = node->params;
  const float *x = node->inputs[0]->data;
  float *y = node->outputs[0]->data;
  const size_t block = p->n * p->inner;
  for (size_t o = 0; o < p->outer; o++, x += block, y += block)
    for (size_t i = 0; i < p->inner; i++) sm_row(p->n, p->inner, x + i, y + i);
}

#endif
