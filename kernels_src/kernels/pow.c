/*
 * Pow, float32 base, with numpy broadcasting (opset 7+) or the legacy
 * `broadcast`/`axis` form (opset 1). The exponent (constraint T1, opset 12+) is
 * float32 or an integer type (one object per signature, MRT_T1 its C type):
 * integers are converted to float once at prepare when constant, else per run.
 * A scalar constant exponent of 1, 2, 3 or 0.5 (x*x in LayerNorm
 * decompositions, sqrt in RMS norms) is a flat vector loop with no powf.
 */
#include "kcommon.h"
#include "bcast.h"
#include "vmath.h"

#if defined(MRT_OP_Pow) && defined(MRT_T0_IS_float32)

enum { POW_GENERAL, POW_ONE, POW_SQUARE, POW_CUBE, POW_SQRT };

typedef struct pow_params {
  int fast;                /* POW_* for a scalar constant exponent */
  const float *exp_f;      /* float exponent values: constant, converted, or NULL (input data) */
  int convert;             /* integer exponent read at run: convert into scratch */
  mrt_bcast plan;
} pow_params;

/* pow(x, 0.5): sqrt(x) + 0 turns sqrt(-0) = -0 into pow's +0, and pow(-inf, 0.5)
 * is +inf where sqrt gives NaN. */
static inline mrt_vf8 pow_sqrt(mrt_vf8 x) {
#if defined(__has_builtin) && __has_builtin(__builtin_elementwise_sqrt)
  const mrt_vf8 r = __builtin_elementwise_sqrt(x) + 0.0f;
#else
  mrt_vf8 r;
  for (int i = 0; i < MRT_VL; i++) r[i] = sqrtf(x[i]) + 0.0f;
#endif
  return mrt_vsel(x == -__builtin_inff(), MRT_VSPLAT(__builtin_inff()), r);
}

#if defined(MRT_T1_IS_float32)
#define POW_INT_EXP 0
#else
#define POW_INT_EXP 1
/* Integer exponent element i as float (exact up to 2^24, as powf needs). */
static float pow_int_at(const mrt_tensor *t, size_t i) { return (float)((const MRT_T1 *)t->data)[i]; }
#endif

static void pow_row(size_t n, const float *a, size_t sa, const float *b, size_t sb, float *y) {
  if (sa && sb) {
    for (size_t i = 0; i < n; i++) y[i] = powf(a[i], b[i]);
  } else if (sa) {
    const float e = b[0];
    for (size_t i = 0; i < n; i++) y[i] = powf(a[i], e);
  } else if (sb) {
    const float u = a[0];
    for (size_t i = 0; i < n; i++) y[i] = powf(u, b[i]);
  } else {
    const float v = powf(a[0], b[0]);
    for (size_t i = 0; i < n; i++) y[i] = v;
  }
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_pow_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_xy(ctx, node, 2, 2, 1, MRT_DTYPE_FLOAT32);
  if (st) return st;
  const mrt_tensor *a = node->inputs[0], *b = node->inputs[1], *y = node->outputs[0];
  if (!b) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input 1 (Y, the exponent) is missing");
  if ((st = mrt_check_dtype(ctx, node, b, MRT_T1_DTYPE))) return st;
  pow_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  const int64_t *bd = b->dims;
  uint32_t bn = b->ndim;
  int64_t vd[MRT_MAX_DIMS];
  if ((st = mrt_bcast_legacy_dims(ctx, node, a, b, vd, &bd, &bn))) return st;
  if (!mrt_bcast_plan(&p->plan, a->dims, a->ndim, bd, bn, y->dims, y->ndim, 1))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "X (rank %u) and Y (rank %u) do not broadcast to the output shape (rank %u)",
                         a->ndim, b->ndim, y->ndim);
  if (b->is_constant && b->data) {
#if POW_INT_EXP
    float *f = mrt_ctx_alloc(ctx, b->count * sizeof(float) + 1);
    if (!f) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < b->count; i++) f[i] = pow_int_at(b, i);
    p->exp_f = f;
#else
    p->exp_f = b->data;
#endif
    /* x*x and x*x*x round at most twice, sqrt once: within powf's own error. */
    if (b->count == 1 && mrt_same_dims(a, y)) {
      const float e = p->exp_f[0];
      p->fast = e == 1.0f ? POW_ONE : e == 2.0f ? POW_SQUARE : e == 3.0f ? POW_CUBE
              : e == 0.5f ? POW_SQRT : POW_GENERAL;
    }
  } else {
    /* An integer exponent computed at run time is converted into scratch per run. */
    p->convert = POW_INT_EXP;
    if (POW_INT_EXP) mrt_ctx_request_scratch(ctx, b->count * sizeof(float));
  }
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_pow_run)(const mrt_node *node, void *scratch) {
  const pow_params *p = node->params;
  const mrt_tensor *xt = node->inputs[0], *bt = node->inputs[1], *yt = node->outputs[0];
  const float *restrict x = xt->data;
  float *restrict y = yt->data;
  const size_t n = yt->count;
  switch (p->fast) {
  case POW_ONE:
    mrt_copy_unless_aliased(xt, yt);
    return;
  case POW_SQUARE:
    for (size_t i = 0; i < n; i++) y[i] = x[i] * x[i];
    return;
  case POW_CUBE:
    for (size_t i = 0; i < n; i++) y[i] = x[i] * x[i] * x[i];
    return;
  case POW_SQRT:
    MRT_VMAP(n, x, y, pow_sqrt);
    return;
  default:
    break;
  }
  const float *e = p->exp_f ? p->exp_f : bt->data;
#if POW_INT_EXP
  if (p->convert) {
    float *f = scratch;
    for (size_t i = 0; i < bt->count; i++) f[i] = pow_int_at(bt, i);
    e = f;
  }
#else
  MRT_UNUSED(scratch);
#endif
  mrt_bcast_run_f32(&p->plan, x, e, y, pow_row);
}

#endif
