/*
 * LayerNormalization (opset 17), float32. X is seen as (outer, d): d = the
 * product of X's dims from `axis` on. Each row is normalised with its own mean
 * and variance (two passes: stable where E[x^2] - E[x]^2 is not), then scaled
 * and shifted: Y = (X - mean) * InvStdDev * Scale + B. The optional outputs
 * Mean and InvStdDev (shape X.dims[:axis] + ones) are written when asked for.
 * Scale and B broadcast to X.dims[axis:]; when they are smaller than that they
 * are expanded to d values once (at prepare if constant, else per run).
 */
#include "kcommon.h"
#include "vmath.h"

#if defined(MRT_TYPE_float32) && defined(MRT_OP_LayerNormalization)

/* How a parameter (Scale or B) maps onto the d normalised values. */
typedef struct ln_param {
  const mrt_tensor *t;      /* NULL: absent (B) */
  const float *full;        /* d values: t's constant expansion (NULL: t's own data, read at run) */
  uint32_t ndim;            /* otherwise expanded per run: normalised dims and t's strides */
  size_t n[MRT_MAX_DIMS], s[MRT_MAX_DIMS];
  size_t scratch_off;       /* floats into scratch of the per-run expansion */
} ln_param;

typedef struct ln_params {
  size_t outer, d;
  float eps;
  ln_param scale, bias;
  mrt_vlayernorm_fn row; /* vmath.h's row loop for this CPU */
} ln_params;

static void ln_expand(const ln_param *q, size_t d, float *dst) {
  const float *src = q->t->data;
  for (size_t j = 0; j < d; j++) {
    size_t r = j, off = 0;
    for (uint32_t k = q->ndim; k-- > 0;) {
      off += (r % q->n[k]) * q->s[k];
      r /= q->n[k];
    }
    dst[j] = src[off];
  }
}

MRT_PREPARE_CODE
static mrt_status ln_param_prepare(mrt_node *node, mrt_ctx *ctx, ln_params *p, ln_param *q,
                                   uint32_t i, uint32_t axis, size_t *scratch) {
  const mrt_tensor *x = node->inputs[0], *t = mrt_in(node, i);
  const char *what = i == 1 ? "Scale" : "B";
  q->t = t;
  if (!t) {
    if (i == 1) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "Scale is required");
    return MRT_STATUS_OK;
  }
  mrt_status st = mrt_check_dtype(ctx, node, t, MRT_DTYPE_FLOAT32);
  if (st) return st;
  /* Right-aligned with X.dims[axis:]; leading ones beyond it are allowed. */
  const uint32_t nd = x->ndim - axis;
  int ok = 1;
  for (uint32_t k = 0; k < t->ndim; k++) {
    const int64_t td = t->dims[t->ndim - 1 - k];
    if (k >= nd ? td != 1 : (td != 1 && td != x->dims[x->ndim - 1 - k])) ok = 0;
  }
  if (!ok)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "%s (rank %u, %zu values) does not broadcast to the normalised dims "
                         "X.dims[%u:] (%zu values)",
                         what, t->ndim, t->count, axis, p->d);
  if (t->count == p->d) return MRT_STATUS_OK; /* ln_values reads t->data at run: an input may be bound per run */
  q->ndim = nd;
  size_t stride = 1;
  for (uint32_t k = nd; k-- > 0;) {
    const uint32_t tk = k + t->ndim; /* index in t of normalised dim k, when >= nd */
    const int64_t td = tk >= nd ? t->dims[tk - nd] : 1;
    q->n[k] = (size_t)x->dims[axis + k];
    q->s[k] = td == 1 ? 0 : stride;
    stride *= (size_t)td;
  }
  if (t->is_constant && t->data) {
    float *buf = mrt_ctx_alloc(ctx, p->d * sizeof(float) + 1);
    if (!buf) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
    ln_expand(q, p->d, buf);
    q->full = buf;
  } else {
    q->scratch_off = *scratch;
    *scratch += (p->d + 15) / 16 * 16;
  }
  return MRT_STATUS_OK;
}

MRT_PREPARE_CODE
mrt_status mrt_layernormalization_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_xy(ctx, node, 2, 3, 3, MRT_DTYPE_FLOAT32);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  if (!mrt_same_dims(x, y))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "output shape must equal the input shape");
  const int64_t axis = mrt_attr_int(node, "axis", -1);
  const int64_t a = mrt_norm_axis(axis, x->ndim);
  if (a < 0)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis %lld out of range for rank %u",
                         (long long)axis, x->ndim);
  ln_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->outer = mrt_prod(x->dims, 0, (uint32_t)a);
  p->d = mrt_prod(x->dims, (uint32_t)a, x->ndim);
  p->eps = mrt_attr_float(node, "epsilon", 1e-5f);
  p->row = MRT_VSELECT(mrt_vlayernorm_row);
  size_t scratch = 0;
  if ((st = ln_param_prepare(node, ctx, p, &p->scale, 1, (uint32_t)a, &scratch)) ||
      (st = ln_param_prepare(node, ctx, p, &p->bias, 2, (uint32_t)a, &scratch)))
    return st;
  for (uint32_t i = 1; i < 3; i++) {
    const mrt_tensor *o = mrt_out(node, i);
    if (!o) continue;
    if ((st = mrt_check_dtype(ctx, node, o, MRT_DTYPE_FLOAT32))) return st;
    if (o->count != p->outer)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "output %u (%s) has %zu values, X.dims[:%lld] has %zu", i,
                           i == 1 ? "Mean" : "InvStdDev", o->count, (long long)a, p->outer);
  }
  if (scratch) mrt_ctx_request_scratch(ctx, scratch * sizeof(float));
  node->params = p;
  return MRT_STATUS_OK;
}

static const float *ln_values(const ln_param *q, size_t d, float *scratch) {
  if (!q->t) return NULL;
  if (q->ndim == 0) return q->full ? q->full : q->t->data;
  if (q->full) return q->full;
  float *buf = scratch + q->scratch_off;
  ln_expand(q, d, buf);
  return buf;
}

typedef struct ln_job {
  const ln_params *p;
  const float *x;
  float *y;
  const float *g, *b;
  float *mean, *invs;
  size_t per_task;
} ln_job;

static void ln_task(void *varg, size_t task, size_t thread) {
  const ln_job *j = varg;
  const size_t d = j->p->d, r0 = task * j->per_task;
  const size_t r1 = r0 + j->per_task < j->p->outer ? r0 + j->per_task : j->p->outer;
  (void)thread;
  for (size_t r = r0; r < r1; r++) {
    float m, inv;
    j->p->row(d, j->x + r * d, j->g, j->b, j->p->eps, j->y + r * d, &m, &inv);
    if (j->mean) j->mean[r] = m;
    if (j->invs) j->invs[r] = inv;
  }
}

void mrt_layernormalization_run_f32(const mrt_node *node, void *scratch) {
  const ln_params *p = node->params;
  const float *x = node->inputs[0]->data;
  float *y = node->outputs[0]->data;
  const mrt_tensor *mean_t = mrt_out(node, 1), *inv_t = mrt_out(node, 2);
  float *mean = mean_t ? mean_t->data : NULL, *invs = inv_t ? inv_t->data : NULL;
  const float *g = ln_values(&p->scale, p->d, scratch), *b = ln_values(&p->bias, p->d, scratch);
  if (p->d == 0) return;
  /* Rows split across threads; scale and bias (expanded above) are shared, read-only. */
  ln_job job = {p, x, y, g, b, mean, invs, 0};
  const size_t tasks = mrt_pool_tasks(node->pool, p->outer * p->d, 8192);
  job.per_task = (p->outer + tasks - 1) / tasks;
  mrt_parallel_for(node->pool, tasks, ln_task, &job);
}

#endif
