/*
 * Softmax and LogSoftmax, float32. Opset < 13 flattens the input to 2-D at
 * `axis` (default 1) and normalises each row; opset 13+ normalises along the
 * single axis `axis` (default -1). Both become (outer, n, inner): n values
 * spaced `inner` apart, inner = 1 for the 2-D form and the last-axis case.
 * exp is vmath.h's vector polynomial; a contiguous row runs in one vmath.h
 * loop (max, exp and sum, scale) of the width prepare picked.
 */
#include "kcommon.h"
#include "vmath.h"

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
  /* vmath.h's loops for this CPU */
  mrt_vmap_fn row;         /* a contiguous softmax row (Softmax) */
  mrt_vreduce_fn max;      /* a row's max (LogSoftmax) */
  mrt_vexp_sum_fn exp_sum; /* sum of exp(x - max) (LogSoftmax) */
  mrt_vmap_fn exp;         /* the strided form */
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
#if IS_LOG
  p->max = MRT_VSELECT(mrt_vmax_arr);
  p->exp_sum = MRT_VSELECT(mrt_vexp_shift_sum);
#else
  p->row = MRT_VSELECT(mrt_vsoftmax_row);
#endif
  p->exp = MRT_VSELECT(mrt_vmap_exp);
  /* Strided form: a running max and sum per column, for each thread. */
  if (p->inner > 1) mrt_ctx_request_scratch(ctx, mrt_ctx_threads(ctx) * 2 * p->inner * sizeof(float));
  node->params = p;
  return MRT_STATUS_OK;
}

/* One softmax over n contiguous values; max-subtracted so exp never overflows. */
static void sm_contig(const sm_params *p, size_t n, const float *restrict x, float *restrict y) {
#if IS_LOG
  /* (x - m) - log(sum), not x - (m + log(sum)): the latter rounds log(sum)
   * away when m is large. */
  const float m = p->max(n, x);
  const float l = logf(p->exp_sum(n, x, m, NULL));
  for (size_t i = 0; i < n; i++) y[i] = (x[i] - m) - l;
#else
  p->row(n, x, y);
#endif
}

/* Softmax along a non-innermost axis: n rows of `inner` values; every step is a
 * flat loop over a row, the running max and sum kept per column in scratch. */
static void sm_strided(const sm_params *p, size_t n, size_t inner, const float *restrict x, float *restrict y,
                       float *restrict mx, float *restrict sum) {
  memcpy(mx, x, inner * sizeof(float));
  for (size_t i = 1; i < n; i++) {
    const float *xr = x + i * inner;
    for (size_t j = 0; j < inner; j++) mx[j] = xr[j] > mx[j] ? xr[j] : mx[j];
  }
  memset(sum, 0, inner * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    const float *xr = x + i * inner;
    float *yr = y + i * inner;
    for (size_t j = 0; j < inner; j++) yr[j] = xr[j] - mx[j];
    p->exp(inner, yr, yr);
    for (size_t j = 0; j < inner; j++) sum[j] += yr[j];
  }
#if IS_LOG
  for (size_t j = 0; j < inner; j++) sum[j] = logf(sum[j]);
  for (size_t i = 0; i < n; i++) {
    const float *xr = x + i * inner;
    float *yr = y + i * inner;
    for (size_t j = 0; j < inner; j++) yr[j] = (xr[j] - mx[j]) - sum[j];
  }
#else
  for (size_t j = 0; j < inner; j++) sum[j] = 1.0f / sum[j];
  for (size_t i = 0; i < n; i++) {
    float *yr = y + i * inner;
    for (size_t j = 0; j < inner; j++) yr[j] *= sum[j];
  }
#endif
}

/* Threads: each task takes a run of the outer rows (attention's batch x heads
 * x queries), with its own thread's scratch. */
typedef struct sm_job {
  const sm_params *p;
  const float *x;
  float *y;
  float *scratch;
  size_t per_task;
} sm_job;

static void sm_task(void *varg, size_t task, size_t thread) {
  const sm_job *j = varg;
  const sm_params *p = j->p;
  const size_t block = p->n * p->inner, o0 = task * j->per_task;
  const size_t o1 = o0 + j->per_task < p->outer ? o0 + j->per_task : p->outer;
  float *mx = j->scratch + thread * 2 * p->inner;
  for (size_t o = o0; o < o1; o++) {
    if (p->inner == 1)
      sm_contig(p, p->n, j->x + o * block, j->y + o * block);
    else
      sm_strided(p, p->n, p->inner, j->x + o * block, j->y + o * block, mx, mx + p->inner);
  }
}

void RUN(const mrt_node *node, void *scratch) {
  const sm_params *p = node->params;
  if (p->n == 0 || p->outer == 0) return;
  /* About 16 flops an element (max, exp, sum, scale): 4096 elements a task at least. */
  const size_t tasks = mrt_pool_tasks(node->pool, p->outer * p->n * p->inner, 4096);
  sm_job job = {p, node->inputs[0]->data, node->outputs[0]->data, scratch, (p->outer + tasks - 1) / tasks};
  mrt_parallel_for(node->pool, tasks, sm_task, &job);
}

#endif
