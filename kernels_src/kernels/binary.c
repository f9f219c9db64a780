/*
 * Elementwise binary float32 ops with numpy broadcasting: Add, Sub, Mul, Div,
 * PRelu, and the variadic Sum, Max, Min. One source, one op per object: the op is
 * picked by MRT_OP_<op>, which selects the expression and the symbol names.
 */
#include "kcommon.h"
#include "bcast.h"

#if defined(MRT_TYPE_float32)

#if defined(MRT_OP_Add)
#define BIN(u, v) ((u) + (v))
#define PREPARE mrt_add_prepare_f32
#define RUN mrt_add_run_f32
#elif defined(MRT_OP_Sub)
#define BIN(u, v) ((u) - (v))
#define PREPARE mrt_sub_prepare_f32
#define RUN mrt_sub_run_f32
#elif defined(MRT_OP_Mul)
#define BIN(u, v) ((u) * (v))
#define PREPARE mrt_mul_prepare_f32
#define RUN mrt_mul_run_f32
#elif defined(MRT_OP_Div)
#define BIN(u, v) ((u) / (v))
#define PREPARE mrt_div_prepare_f32
#define RUN mrt_div_run_f32
#elif defined(MRT_OP_PRelu)
/* slope (b) broadcasts onto x (a): per channel as [C, 1, 1], or elementwise. */
#define BIN(u, v) ((u) < 0.0f ? (u) * (v) : (u))
#define PREPARE mrt_prelu_prepare_f32
#define RUN mrt_prelu_run_f32
#elif defined(MRT_OP_Sum)
#define BIN(u, v) ((u) + (v))
#define PREPARE mrt_sum_prepare_f32
#define RUN mrt_sum_run_f32
#define VARIADIC 1
#elif defined(MRT_OP_Max)
/* Written so that a NaN in u propagates like numpy.maximum. */
#define BIN(u, v) ((v) > (u) ? (v) : (u))
#define PREPARE mrt_max_prepare_f32
#define RUN mrt_max_run_f32
#define VARIADIC 1
#elif defined(MRT_OP_Min)
#define BIN(u, v) ((v) < (u) ? (v) : (u))
#define PREPARE mrt_min_prepare_f32
#define RUN mrt_min_run_f32
#define VARIADIC 1
#endif

#if defined(BIN)

/* No restrict on purpose: the variadic ops accumulate in place (a == y), and
 * the compiler still vectorises behind a runtime overlap check. One plain flat
 * loop per case: both vary, b is a scalar, a is a scalar. */
#if MRT_ENABLE_THREADS
/* Called from the broadcast path and the threaded split: one copy, not two. */
#define BIN_ROW_ATTR __attribute__((noinline))
#else
#define BIN_ROW_ATTR
#endif
BIN_ROW_ATTR static void bin_row(size_t n, const float *a, size_t sa, const float *b, size_t sb, float *y) {
  if (sa && sb) {
    for (size_t i = 0; i < n; i++) y[i] = BIN(a[i], b[i]);
  } else if (sa) {
    const float v = b[0];
    for (size_t i = 0; i < n; i++) y[i] = BIN(a[i], v);
  } else if (sb) {
    const float u = a[0];
    for (size_t i = 0; i < n; i++) y[i] = BIN(u, b[i]);
  } else { /* neither varies: only in the widened first step of a variadic op */
    const float v = BIN(a[0], b[0]);
    for (size_t i = 0; i < n; i++) y[i] = v;
  }
}

typedef struct bin_params {
  uint32_t nplans;
  mrt_bcast plan[]; /* plan[0]: x0 op x1; plan[i]: y op x[i+1] */
} bin_params;

MRT_PREPARE_CODE
mrt_status PREPARE(mrt_node *node, mrt_ctx *ctx) {
#if defined(VARIADIC)
  mrt_status st = mrt_check_arity(ctx, node, 1, 0xffff, 1, 1);
#else
  mrt_status st = mrt_check_arity(ctx, node, 2, 2, 1, 1);
#endif
  if (st) return st;
  mrt_tensor *y = node->outputs[0];
  const uint32_t nin = node->n_inputs;
  for (uint32_t i = 0; i < nin; i++) {
    if (!node->inputs[i])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input %u is missing", i);
    if ((st = mrt_check_dtype(ctx, node, node->inputs[i], MRT_DTYPE_FLOAT32))) return st;
  }
  if ((st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_FLOAT32))) return st;
  const uint32_t nplans = nin > 1 ? nin - 1 : 0;
  bin_params *p = mrt_ctx_alloc(ctx, sizeof(bin_params) + nplans * sizeof(mrt_bcast));
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->nplans = nplans;
  if (nin == 1 && !mrt_same_dims(node->inputs[0], y))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "with one input the output must have the input's shape");
  for (uint32_t i = 0; i < nplans; i++) {
    const mrt_tensor *a = i == 0 ? node->inputs[0] : y;
    const mrt_tensor *b = node->inputs[i + 1];
    const int64_t *bd = b->dims;
    uint32_t bn = b->ndim;
#if !defined(VARIADIC)
    /* Opset < 7: broadcasting is opt-in and aligns b with a at `axis`. */
    int64_t vd[MRT_MAX_DIMS];
    const mrt_status legacy = mrt_bcast_legacy_dims(ctx, node, a, b, vd, &bd, &bn);
    if (legacy) return legacy;
#endif
#if defined(VARIADIC)
    const int exact = i > 0;
#else
    const int exact = 1;
#endif
    if (!mrt_bcast_plan(&p->plan[i], a->dims, a->ndim, bd, bn, y->dims, y->ndim, exact))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "input %u (rank %u) and %s do not broadcast to the output shape "
                           "(rank %u); numpy broadcasting rules are required",
                           i + 1, b->ndim, i == 0 ? "input 0" : "the partial result", y->ndim);
  }
  node->params = p;
  return MRT_STATUS_OK;
}

#if MRT_ENABLE_THREADS
/* A large output is cut between the threads: the op is memory-bound, but two
 * cores move more bytes than one (a ResNet's residual Adds). A flat row (same
 * shapes, or one operand a scalar: the plan collapsed to one dim) in chunks;
 * a broadcast plan by runs of its rows (a squeeze-excitation's channel scale
 * [1, C, H, W] * [1, C, 1, 1]: a run of channels a task, the ones the same
 * thread's share of the layer before wrote). */
#define BIN_TASK_ELEMS ((size_t)1 << 15)
#define BIN_ROWS_TASK_ELEMS ((size_t)1 << 13)

typedef struct bin_job {
  const mrt_bcast *plan;
  const float *a, *b;
  float *y;
  size_t n, chunk;
} bin_job;

static void bin_task(void *arg, size_t t, size_t thread) {
  const bin_job *j = arg;
  MRT_UNUSED(thread);
  const size_t lo = t * j->chunk, len = j->n - lo < j->chunk ? j->n - lo : j->chunk;
  if (j->plan->ndim > 1) {
    mrt_bcast_run_rows_f32(j->plan, j->a, j->b, j->y, bin_row, lo, lo + len);
    return;
  }
  const size_t sa = j->plan->sa[0], sb = j->plan->sb[0];
  bin_row(len, j->a + (sa ? lo : 0), sa, j->b + (sb ? lo : 0), sb, j->y + lo);
}
#endif

static void bin_plan_run(const mrt_node *node, const mrt_bcast *plan, const float *a, const float *b, float *y) {
#if MRT_ENABLE_THREADS
  const size_t rows = mrt_bcast_rows(plan), inner = plan->ndim ? plan->n[plan->ndim - 1] : 0;
  const size_t tasks = mrt_pool_tasks(node->pool, rows * inner, plan->ndim > 1 ? BIN_ROWS_TASK_ELEMS : BIN_TASK_ELEMS);
  if (tasks > 1) {
    /* Chunks of a flat row: whole vectors (16 floats); of a plan: whole rows. */
    const size_t n = plan->ndim > 1 ? rows : inner;
    const size_t chunk = plan->ndim > 1 ? (n + tasks - 1) / tasks : ((n + tasks - 1) / tasks + 15) & ~(size_t)15;
    bin_job job = {plan, a, b, y, n, chunk};
    mrt_parallel_for(node->pool, (n + chunk - 1) / chunk, bin_task, &job);
    return;
  }
#else
  MRT_UNUSED(node);
#endif
  mrt_bcast_run_f32(plan, a, b, y, bin_row);
}

void RUN(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const bin_params *p = node->params;
  const mrt_tensor *y = node->outputs[0];
  if (p->nplans == 0) {
    mrt_copy_unless_aliased(node->inputs[0], y);
    return;
  }
  bin_plan_run(node, &p->plan[0], node->inputs[0]->data, node->inputs[1]->data, y->data);
  for (uint32_t i = 1; i < p->nplans; i++)
    bin_plan_run(node, &p->plan[i], y->data, node->inputs[i + 1]->data, y->data);
}

#endif /* BIN */
#endif /* MRT_TYPE_float32 */
