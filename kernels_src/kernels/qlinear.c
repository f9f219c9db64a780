/*
 * Quantised (QOperator) kernels besides the convolution: QLinearMatMul (ai.onnx),
 * and onnxruntime's com.microsoft QGemm, QLinearAdd, QLinearMul,
 * QLinearGlobalAveragePool, QLinearSigmoid, QLinearLeakyRelu. One object per
 * (op, signature); each computes as onnxruntime does, so outputs agree exactly
 * where its arithmetic is the same and within one step where it is not:
 *
 * - MatMul / Gemm: int32 accumulation of (a - za)(b - zb) on the qgemm support unit
 *   (a constant b packed once at prepare), int32 bias added, then
 *   float(acc) * (alpha * sa * sb[n] / sy), rounded half to even, + zy, saturated.
 * - Add: onnxruntime's x86 arithmetic, fma(a, sa/sc, fma(b, sb/sc, fixed)) on the raw
 *   values with fixed = zc - (sa/sc za + sb/sc zb), rounded half to even and
 *   saturated (qgemm's vectorised mrt_qgemm_add, split on the session's threads when
 *   nothing broadcasts); a broadcast row of strided values is
 *   (sa/sc)(a - za) + (sb/sc)(b - zb), which agrees but for rare ties.
 * - Mul: in float, (sa sb / sc)(a - za)(b - zb), rounded half to even.
 * - GlobalAveragePool: int32 sum - zx * HW, times sx / (sy * HW), as MLAS.
 * - Sigmoid / LeakyRelu: a 256-entry table built at prepare by dequantising every
 *   input value, applying the function in float and quantising (onnxruntime's
 *   QLinearLookupTable does the same).
 */
#include "qcommon.h"
#include "bcast.h"
#if defined(MRT_OP_QLinearMatMul) || defined(MRT_OP_QGemm) || defined(MRT_OP_QLinearAdd)
#include "qgemm.h"
#endif

#if defined(MRT_KERNEL_SUFFIX)

/* --- QLinearMatMul, QGemm ------------------------------------------------------ */
#if defined(MRT_OP_QLinearMatMul) || defined(MRT_OP_QGemm)

typedef MRT_T0 aq_t;
typedef MRT_T1 bq_t;
typedef MRT_T2 yq_t;

#if defined(MRT_T2_IS_float32)
#define FLOAT_OUT 1
#endif

typedef struct qmm_params {
  const mrt_qgemm_kernel *kern;
  size_t batch, m, n, k;
  int b_batched, trans_a;
  int32_t za, zy, lo, hi;
  int32_t *zb;        /* [n] */
  void *bp;           /* b packed for kern with zb, when b is constant (else packed per run) */
  int32_t *bias;      /* [m * n] or [n] (bias_rows == 1) or NULL */
  int32_t *zbias;     /* [n] zeros: no bias, for the fused requantisation */
  size_t bias_rows;
  float *scale;       /* [n] */
  int trans_b;
  size_t gemms, rows; /* GEMMs per run and rows of each: one of batch * m when b is shared */
  size_t acc_bytes;   /* scratch: the int32 result, then qgemm's */
} qmm_params;

MRT_PREPARE_CODE
static mrt_status qmm_finish(mrt_node *node, mrt_ctx *ctx, qmm_params *p, uint32_t ia, uint32_t ib, uint32_t isy,
                             float alpha) {
  mrt_status st;
  const float *sa, *sb, *sy = NULL;
  size_t nsa, nsb, nsy = 0;
  if ((st = mrt_q_scale(ctx, node, ia + 1, 1, &sa, &nsa)) || (st = mrt_q_scale(ctx, node, ib + 1, p->n, &sb, &nsb)))
    return st;
#if !defined(FLOAT_OUT)
  if ((st = mrt_q_scale(ctx, node, isy, 1, &sy, &nsy))) return st;
#else
  if (mrt_in(node, isy) || mrt_in(node, isy + 1))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "a float output takes no y_scale / y_zero_point");
#endif
  (void)nsy;
  p->zb = mrt_ctx_alloc(ctx, p->n * sizeof *p->zb);
  p->scale = mrt_ctx_alloc(ctx, p->n * sizeof *p->scale);
  if (!p->zb || !p->scale) return MRT_STATUS_OUT_OF_MEMORY;
  if ((st = mrt_q_zero_point(ctx, node, ia + 2, MRT_T0_DTYPE, 1, &p->za)) ||
      (st = mrt_q_zero_point(ctx, node, ib + 2, MRT_T1_DTYPE, p->n, p->zb)))
    return st;
  p->zy = 0;
#if !defined(FLOAT_OUT)
  if ((st = mrt_q_zero_point(ctx, node, isy + 1, MRT_T2_DTYPE, 1, &p->zy))) return st;
  p->lo = mrt_q_min(MRT_T2_DTYPE), p->hi = mrt_q_max(MRT_T2_DTYPE);
#endif
  for (size_t j = 0; j < p->n; j++) {
    const float s = alpha * sa[0] * sb[nsb == 1 ? 0 : j];
    p->scale[j] = sy ? s / sy[0] : s;
  }
  /* A fully connected layer's single row would fill one of AMX's 16-row tiles */
  p->kern = mrt_qgemm_kernel_select_mk(p->b_batched || p->trans_a || p->bias_rows > 1 ? p->m : p->batch * p->m, p->k);
  p->zbias = mrt_ctx_alloc(ctx, p->n * sizeof *p->zbias);
  if (!p->zbias) return MRT_STATUS_OUT_OF_MEMORY;
  const mrt_tensor *b = node->inputs[ib];
  if (b->is_constant && b->data && !p->b_batched) {
    p->bp = mrt_ctx_alloc(ctx, mrt_qgemm_packed_b_size(p->kern, p->k, p->n)); /* 64-byte aligned */
    if (!p->bp) return MRT_STATUS_OUT_OF_MEMORY;
    const mrt_qgemm_src src = {NULL, b->data, p->trans_b ? 1 : p->n, p->trans_b ? p->k : 1,
                               MRT_T1_DTYPE == MRT_DTYPE_INT8, p->zb, p->n};
    mrt_qgemm_pack_b(p->kern, p->k, p->n, &src, p->bp);
  }
  /* A shared b and row-major a: the batch is one GEMM of batch * m rows. */
  const int fold = !p->b_batched && !p->trans_a && p->bias_rows <= 1;
  p->gemms = fold ? 1 : p->batch;
  p->rows = fold ? p->batch * p->m : p->m;
  p->acc_bytes = (p->rows * p->n * sizeof(int32_t) + 63) / 64 * 64;
  mrt_ctx_request_scratch(ctx, p->acc_bytes + mrt_qgemm_scratch_size(p->kern, p->rows, p->n, p->k, 0, p->bp != NULL));
  node->params = p;
  return MRT_STATUS_OK;
}

static void qmm_run(const qmm_params *p, mrt_pool *pool, const aq_t *a, const bq_t *b, yq_t *y, void *scratch) {
  int32_t *acc = scratch;
  void *gs = (char *)scratch + p->acc_bytes;
  const size_t rows = p->rows, n = p->n;
  for (size_t t = 0; t < p->gemms; t++) {
    const mrt_qgemm_src as = {NULL, a + t * p->m * p->k, p->trans_a ? 1 : p->k, p->trans_a ? p->m : 1,
                              MRT_T0_DTYPE == MRT_DTYPE_INT8, &p->za, 1};
    const mrt_qgemm_src bs = {p->bp, b + (p->b_batched ? t * p->k * n : 0), p->trans_b ? 1 : n,
                              p->trans_b ? p->k : 1, MRT_T1_DTYPE == MRT_DTYPE_INT8, p->zb, n};
#if !defined(FLOAT_OUT)
    /* a bias per column (or none): requantised as each tile leaves the micro-kernel */
    if (p->bias_rows <= 1) {
      const mrt_qgemm_requant rq = {p->bias ? p->bias : p->zbias, p->scale, 1, p->zy, p->lo, p->hi,
                                    y + t * rows * n, n, n, n};
      mrt_qgemm_mt(pool, p->kern, rows, n, p->k, &as, &bs, 0, &rq, NULL, 0, gs);
      continue;
    }
#endif
    /* The bias first, and the products accumulated onto it, in int32 as onnxruntime. */
    if (p->bias)
      for (size_t i = 0; i < rows; i++)
        memcpy(acc + i * n, p->bias + (p->bias_rows == 1 ? 0 : i * n), n * sizeof *acc);
    mrt_qgemm_mt(pool, p->kern, rows, n, p->k, &as, &bs, p->bias != NULL, NULL, acc, n, gs);
    yq_t *yt = y + t * rows * n;
    for (size_t i = 0; i < rows; i++) {
      const int32_t *ar = acc + i * n;
      yq_t *yr = yt + i * n;
#if defined(FLOAT_OUT)
      for (size_t j = 0; j < n; j++) yr[j] = (float)ar[j] * p->scale[j];
#else
      for (size_t j = 0; j < n; j++) yr[j] = (yq_t)mrt_q_requant(ar[j], p->scale[j], p->zy, p->lo, p->hi);
#endif
    }
  }
}
#endif

#if defined(MRT_OP_QLinearMatMul)
/* a [..., M, K] x b [K, N] or b with a's batch dims [..., K, N]. */
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_qlinearmatmul_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 8, 8, 1, 1);
  if (st) return st;
  const mrt_tensor *a = mrt_in(node, 0), *b = mrt_in(node, 3), *y = node->outputs[0];
  if (!a || !b) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "a and b are required");
  if ((st = mrt_check_dtype(ctx, node, a, MRT_T0_DTYPE)) || (st = mrt_check_dtype(ctx, node, b, MRT_T1_DTYPE)) ||
      (st = mrt_check_dtype(ctx, node, y, MRT_T2_DTYPE)))
    return st;
  if (a->ndim < 2 || b->ndim < 2 || y->ndim != a->ndim || (b->ndim != 2 && b->ndim != a->ndim))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "a must be [..., M, K] and b [K, N] or [..., K, N]");
  qmm_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  p->m = (size_t)a->dims[a->ndim - 2], p->k = (size_t)a->dims[a->ndim - 1], p->n = (size_t)b->dims[b->ndim - 1];
  p->batch = mrt_prod(a->dims, 0, a->ndim - 2);
  p->b_batched = b->ndim > 2;
  if ((size_t)b->dims[b->ndim - 2] != p->k || (size_t)y->dims[y->ndim - 1] != p->n ||
      (size_t)y->dims[y->ndim - 2] != p->m || (p->b_batched && mrt_prod(b->dims, 0, b->ndim - 2) != p->batch))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "shapes do not multiply (no broadcasting of batch dims)");
  for (uint32_t i = 0; i + 2 < a->ndim; i++)
    if (y->dims[i] != a->dims[i] || (p->b_batched && b->dims[i] != a->dims[i]))
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "batch dims must match");
  return qmm_finish(node, ctx, p, 0, 3, 6, 1.0f);
}

void MRT_KERNEL(mrt_qlinearmatmul_run)(const mrt_node *node, void *scratch) {
  qmm_run(node->params, node->pool, node->inputs[0]->data, node->inputs[3]->data, node->outputs[0]->data, scratch);
}
#endif

#if defined(MRT_OP_QGemm)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_qgemm_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 6, 9, 1, 1);
  if (st) return st;
  const mrt_tensor *a = mrt_in(node, 0), *b = mrt_in(node, 3), *c = mrt_in(node, 6), *y = node->outputs[0];
  if (!a || !b) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A and B are required");
  if ((st = mrt_check_dtype(ctx, node, a, MRT_T0_DTYPE)) || (st = mrt_check_dtype(ctx, node, b, MRT_T1_DTYPE)) ||
      (st = mrt_check_dtype(ctx, node, y, MRT_T2_DTYPE)))
    return st;
  if (a->ndim != 2 || b->ndim != 2 || y->ndim != 2)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A, B and Y must be 2-D");
  qmm_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  p->trans_a = mrt_attr_int(node, "transA", 0) != 0, p->trans_b = mrt_attr_int(node, "transB", 0) != 0;
  p->batch = 1;
  p->m = (size_t)a->dims[p->trans_a], p->k = (size_t)a->dims[!p->trans_a];
  p->n = (size_t)b->dims[!p->trans_b];
  if ((size_t)b->dims[p->trans_b] != p->k || (size_t)y->dims[0] != p->m || (size_t)y->dims[1] != p->n)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A, B and Y shapes do not fit");
  if (c) {
    if (c->dtype != MRT_DTYPE_INT32 || !c->is_constant || !c->data ||
        !(c->count == 1 || c->count == p->n || c->count == p->m * p->n))
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "C must be an int32 constant of 1, N or M x N values");
    p->bias_rows = c->count == p->m * p->n && p->m > 1 ? p->m : 1;
    p->bias = mrt_ctx_alloc(ctx, p->bias_rows * p->n * sizeof *p->bias);
    if (!p->bias) return MRT_STATUS_OUT_OF_MEMORY;
    for (size_t i = 0; i < p->bias_rows * p->n; i++) p->bias[i] = ((const int32_t *)c->data)[c->count == 1 ? 0 : i];
  }
  return qmm_finish(node, ctx, p, 0, 3, 7, mrt_attr_float(node, "alpha", 1.0f));
}

void MRT_KERNEL(mrt_qgemm_run)(const mrt_node *node, void *scratch) {
  qmm_run(node->params, node->pool, node->inputs[0]->data, node->inputs[3]->data, node->outputs[0]->data, scratch);
}
#endif

/* --- QLinearAdd, QLinearMul ---------------------------------------------------- */
#if defined(MRT_OP_QLinearAdd) || defined(MRT_OP_QLinearMul)
typedef MRT_T0 q_t;

typedef struct qbin_params {
  mrt_bcastn plan;
  float ka, kb;          /* Add: sa/sc, sb/sc; Mul: ka = sa*sb/sc */
  int32_t za, zb, zc, lo, hi;
#if defined(MRT_OP_QLinearAdd)
  const mrt_qgemm_kernel *kern; /* qgemm's vectorised add for this CPU */
  mrt_qgemm_add_params add;
#endif
} qbin_params;

static void qbin_row(const mrt_node *node, size_t n, const size_t *off, const size_t *step, size_t yoff) {
  const qbin_params *p = node->params;
  const q_t *a = (const q_t *)node->inputs[0]->data + off[0];
  const q_t *b = (const q_t *)node->inputs[3]->data + off[1];
  q_t *y = (q_t *)node->outputs[0]->data + yoff;
  const size_t sa = step[0], sb = step[1];
  const float flo = (float)(p->lo - p->zc), fhi = (float)(p->hi - p->zc);
#if defined(MRT_OP_QLinearAdd)
  if (sa == 1 && sb == 1) {
    mrt_qgemm_add(p->kern, n, a, b, &p->add, y);
    return;
  }
#else
  if (sa == 1 && sb == 1) { /* the same loop, contiguous: vectorised */
    const float ka = p->ka, kb = p->kb;
    const int32_t za = p->za, zb = p->zb, zc = p->zc;
    for (size_t i = 0; i < n; i++) {
      const float va = (float)((int32_t)a[i] - za), vb = (float)((int32_t)b[i] - zb);
#if defined(MRT_OP_QLinearAdd)
      float v = ka * va + kb * vb;
#else
      float v = ka * (va * vb);
#endif
      v = mrt_q_clampf(v, flo, fhi);
      y[i] = (q_t)((int32_t)mrt_q_rint(v) + zc);
    }
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) {
    const float va = (float)((int32_t)a[i * sa] - p->za), vb = (float)((int32_t)b[i * sb] - p->zb);
#if defined(MRT_OP_QLinearAdd)
    float v = p->ka * va + p->kb * vb;
#else
    float v = p->ka * (va * vb);
#endif
    v = mrt_q_clampf(v, flo, fhi);
    y[i] = (q_t)((int32_t)mrt_q_rint(v) + p->zc);
  }
}

MRT_PREPARE_CODE
static mrt_status qbin_prepare(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 7, 8, 1, 1);
  if (st) return st;
  const mrt_tensor *a = mrt_in(node, 0), *b = mrt_in(node, 3), *y = node->outputs[0];
  if (!a || !b) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A and B are required");
  if ((st = mrt_check_dtype(ctx, node, a, MRT_T0_DTYPE)) || (st = mrt_check_dtype(ctx, node, b, MRT_T0_DTYPE)) ||
      (st = mrt_check_dtype(ctx, node, y, MRT_T0_DTYPE)))
    return st;
  qbin_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  const mrt_tensor *ins[2] = {a, b};
  if (!mrt_bcastn_plan(&p->plan, 2, ins, y, 1))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A and B do not broadcast to C's shape");
  const float *sa, *sb, *sc;
  size_t n1;
  if ((st = mrt_q_scale(ctx, node, 1, 1, &sa, &n1)) || (st = mrt_q_scale(ctx, node, 4, 1, &sb, &n1)) ||
      (st = mrt_q_scale(ctx, node, 6, 1, &sc, &n1)) ||
      (st = mrt_q_zero_point(ctx, node, 2, MRT_T0_DTYPE, 1, &p->za)) ||
      (st = mrt_q_zero_point(ctx, node, 5, MRT_T0_DTYPE, 1, &p->zb)) ||
      (st = mrt_q_zero_point(ctx, node, 7, MRT_T0_DTYPE, 1, &p->zc)))
    return st;
#if defined(MRT_OP_QLinearAdd)
  p->ka = sa[0] / sc[0], p->kb = sb[0] / sc[0];
  p->kern = mrt_qgemm_kernel_select();
  const mrt_qgemm_add_params add = {p->ka, p->kb, mrt_qgemm_add_fixed(p->ka, p->za, p->kb, p->zb, p->zc),
                                    mrt_q_min(MRT_T0_DTYPE), mrt_q_max(MRT_T0_DTYPE), MRT_T0_DTYPE == MRT_DTYPE_INT8};
  p->add = add;
#else
  p->ka = sa[0] * sb[0] / sc[0];
#endif
  p->lo = mrt_q_min(MRT_T0_DTYPE), p->hi = mrt_q_max(MRT_T0_DTYPE);
  node->params = p;
  return MRT_STATUS_OK;
}

#if defined(MRT_OP_QLinearAdd)
/* Tasks of a residual Add (no broadcast): whole 64-byte lines each. */
#define QADD_TASK_ELEMS ((size_t)16384)
typedef struct qadd_job {
  const mrt_node *node;
  size_t n, per_task;
} qadd_job;

static void qadd_task(void *arg, size_t task, size_t thread) {
  MRT_UNUSED(thread);
  const qadd_job *jb = arg;
  const qbin_params *p = jb->node->params;
  const size_t lo = task * jb->per_task, n = jb->n - lo < jb->per_task ? jb->n - lo : jb->per_task;
  mrt_qgemm_add(p->kern, n, (const q_t *)jb->node->inputs[0]->data + lo, (const q_t *)jb->node->inputs[3]->data + lo,
                &p->add, (q_t *)jb->node->outputs[0]->data + lo);
}
#endif

static void qbin_run(const mrt_node *node) {
  const qbin_params *p = node->params;
#if defined(MRT_OP_QLinearAdd)
  if (p->plan.ndim == 1 && p->plan.s[0][0] == 1 && p->plan.s[1][0] == 1) {
    const size_t n = p->plan.n[0], tasks = mrt_pool_tasks(node->pool, n, QADD_TASK_ELEMS);
    if (tasks > 1) {
      qadd_job job = {node, n, (n + tasks * 64 - 1) / (tasks * 64) * 64};
      mrt_parallel_for(node->pool, (n + job.per_task - 1) / job.per_task, qadd_task, &job);
      return;
    }
  }
#endif
  mrt_bcastn_run(&p->plan, node, qbin_row);
}
#endif

#if defined(MRT_OP_QLinearAdd)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_qlinearadd_prepare)(mrt_node *node, mrt_ctx *ctx) { return qbin_prepare(node, ctx); }
void MRT_KERNEL(mrt_qlinearadd_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  qbin_run(node);
}
#endif
#if defined(MRT_OP_QLinearMul)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_qlinearmul_prepare)(mrt_node *node, mrt_ctx *ctx) { return qbin_prepare(node, ctx); }
void MRT_KERNEL(mrt_qlinearmul_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  qbin_run(node);
}
#endif

/* --- QLinearGlobalAveragePool ------------------------------------------------------ */
#if defined(MRT_OP_QLinearGlobalAveragePool)
typedef MRT_T0 q_t;

typedef struct qgap_params {
  size_t planes, size;
  float scale;
  int32_t bias, zy, lo, hi;
} qgap_params;

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_qlinearglobalaveragepool_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 5, 5, 1, 1);
  if (st) return st;
  const mrt_tensor *x = mrt_in(node, 0), *y = node->outputs[0];
  if (!x) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "X is required");
  if ((st = mrt_check_dtype(ctx, node, x, MRT_T0_DTYPE)) || (st = mrt_check_dtype(ctx, node, y, MRT_T0_DTYPE))) return st;
  if (mrt_attr_int(node, "channels_last", 0))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "channels_last is not supported");
  if (x->ndim < 3 || y->ndim != x->ndim || y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1] ||
      y->count != (size_t)(x->dims[0] * x->dims[1]))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "X must be [N, C, ...] and Y [N, C, 1, ...]");
  qgap_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  p->planes = (size_t)(x->dims[0] * x->dims[1]);
  p->size = mrt_prod(x->dims, 2, x->ndim);
  if (p->size == 0 || p->size > (1u << 23))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "spatial size must be 1 .. 2^23");
  const float *sx, *sy;
  size_t n1;
  int32_t zx;
  if ((st = mrt_q_scale(ctx, node, 1, 1, &sx, &n1)) || (st = mrt_q_scale(ctx, node, 3, 1, &sy, &n1)) ||
      (st = mrt_q_zero_point(ctx, node, 2, MRT_T0_DTYPE, 1, &zx)) ||
      (st = mrt_q_zero_point(ctx, node, 4, MRT_T0_DTYPE, 1, &p->zy)))
    return st;
  p->scale = sx[0] / (sy[0] * (float)p->size);
  p->bias = -zx * (int32_t)p->size;
  p->lo = mrt_q_min(MRT_T0_DTYPE), p->hi = mrt_q_max(MRT_T0_DTYPE);
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_qlinearglobalaveragepool_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const qgap_params *p = node->params;
  const q_t *x = node->inputs[0]->data;
  q_t *y = node->outputs[0]->data;
  for (size_t c = 0; c < p->planes; c++) {
    int32_t acc = p->bias;
    const q_t *xc = x + c * p->size;
    for (size_t i = 0; i < p->size; i++) acc += xc[i];
    y[c] = (q_t)mrt_q_requant(acc, p->scale, p->zy, p->lo, p->hi);
  }
}
#endif

/* --- QLinearSigmoid, QLinearLeakyRelu: lookup tables ------------------------------- */
#if defined(MRT_OP_QLinearSigmoid) || defined(MRT_OP_QLinearLeakyRelu)
typedef MRT_T0 q_t;

MRT_PREPARE_CODE
static mrt_status qlut_prepare(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 4, 5, 1, 1);
  if (st) return st;
  const mrt_tensor *x = mrt_in(node, 0), *y = node->outputs[0];
  if (!x) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "X is required");
  if ((st = mrt_check_dtype(ctx, node, x, MRT_T0_DTYPE)) || (st = mrt_check_dtype(ctx, node, y, MRT_T0_DTYPE))) return st;
  if (!mrt_same_dims(x, y)) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "Y must have X's shape");
  const float *sx, *sy;
  size_t n1;
  int32_t zx, zy;
  if ((st = mrt_q_scale(ctx, node, 1, 1, &sx, &n1)) || (st = mrt_q_scale(ctx, node, 3, 1, &sy, &n1)) ||
      (st = mrt_q_zero_point(ctx, node, 2, MRT_T0_DTYPE, 1, &zx)) ||
      (st = mrt_q_zero_point(ctx, node, 4, MRT_T0_DTYPE, 1, &zy)))
    return st;
  q_t *lut = mrt_ctx_alloc(ctx, 256 * sizeof *lut);
  if (!lut) return MRT_STATUS_OUT_OF_MEMORY;
  const int32_t lo = mrt_q_min(MRT_T0_DTYPE), hi = mrt_q_max(MRT_T0_DTYPE);
#if defined(MRT_OP_QLinearLeakyRelu)
  const float alpha = mrt_attr_float(node, "alpha", 0.01f);
#endif
  for (int32_t q = lo; q <= hi; q++) {
    const float v = sx[0] * (float)(q - zx);
#if defined(MRT_OP_QLinearSigmoid)
    const float f = 1.0f / (1.0f + expf(-v));
#else
    const float f = v >= 0.0f ? v : v * alpha;
#endif
    float r = f / sy[0];
    const float flo = (float)(lo - zy), fhi = (float)(hi - zy);
    r = mrt_q_clampf(r, flo, fhi);
    lut[(uint8_t)(q_t)q] = (q_t)((int32_t)mrt_q_rint(r) + zy);
  }
  node->params = lut;
  return MRT_STATUS_OK;
}

static void qlut_run(const mrt_node *node) {
  const q_t *lut = node->params;
  const q_t *x = node->inputs[0]->data;
  q_t *y = node->outputs[0]->data;
  for (size_t i = 0, n = node->outputs[0]->count; i < n; i++) y[i] = lut[(uint8_t)x[i]];
}
#endif

#if defined(MRT_OP_QLinearSigmoid)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_qlinearsigmoid_prepare)(mrt_node *node, mrt_ctx *ctx) { return qlut_prepare(node, ctx); }
void MRT_KERNEL(mrt_qlinearsigmoid_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  qlut_run(node);
}
#endif
#if defined(MRT_OP_QLinearLeakyRelu)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_qlinearleakyrelu_prepare)(mrt_node *node, mrt_ctx *ctx) { return qlut_prepare(node, ctx); }
void MRT_KERNEL(mrt_qlinearleakyrelu_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  qlut_run(node);
}
#endif

#endif /* MRT_KERNEL_SUFFIX */
