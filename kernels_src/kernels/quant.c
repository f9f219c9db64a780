/*
 * QuantizeLinear (T1 float32 -> T2 uint8/int8/uint16/int16), DequantizeLinear (T1
 * uint8/int8/uint16/int16/int32 -> T2 float32) and DynamicQuantizeLinear (float32 -> uint8, scale, zero
 * point), one object per signature.
 *
 * Arithmetic is onnxruntime's (MLAS), so integer outputs match it bit for bit:
 *   quantize:   y = clamp(x / scale, qmin - zp, qmax - zp) rounded half to even, + zp
 *               (a division, not a multiply by 1/scale: the two differ in the last
 *               bit, and that bit decides halfway cases)
 *   dequantize: y = (float)((int32)x - zp) * scale
 * Rounding half to even is float's own: adding and subtracting 1.5 * 2^23 leaves
 * the nearest integer for |v| < 2^22, which the clamp guarantees, and vectorises
 * everywhere (rintf would be a libm call per lane on baseline x86_64).
 *
 * Per-axis (opset 13+): a 1-D scale of dims[axis] values, zero point alike; a
 * scalar or 1-element scale is per tensor. Opset 21's blocked form (block_size
 * != 0) is refused at select by the registry's attribute list. opset 19's
 * `saturate` and 21's `output_dtype` concern float8 and the output tensor's type.
 */
#include "kcommon.h"

typedef float mrt_qv8f __attribute__((vector_size(32)));
typedef int32_t mrt_qv8i __attribute__((vector_size(32)));
#define MRT_QROUND_MAGIC 12582912.0f /* 1.5 * 2^23 */

/* a > b ? a : b lane by lane, NaN a giving b: x86's maxps (minps below), as MLAS
 * clamps, in one instruction; fmax semantics (MRT_VMAX) cost a NaN fix-up per lane. */
static inline mrt_qv8f mrt_qmax(mrt_qv8f a, mrt_qv8f b) {
  const mrt_qv8i m = a > b;
  return (mrt_qv8f)((m & (mrt_qv8i)a) | (~m & (mrt_qv8i)b));
}
static inline mrt_qv8f mrt_qmin(mrt_qv8f a, mrt_qv8f b) {
  const mrt_qv8i m = a < b;
  return (mrt_qv8f)((m & (mrt_qv8i)a) | (~m & (mrt_qv8i)b));
}
static inline float mrt_qmaxf(float a, float b) { return a > b ? a : b; }
static inline float mrt_qminf(float a, float b) { return a < b ? a : b; }

#if defined(MRT_KERNEL_SUFFIX) && (defined(MRT_OP_QuantizeLinear) || defined(MRT_OP_DequantizeLinear))



typedef struct mrt_quant_params {
  size_t outer, channels, inner; /* x viewed as outer x channels x inner; channels = 1 per tensor */
} mrt_quant_params;

/* The (outer, channels, inner) view of x for a scale of `scale->count` values. */
MRT_PREPARE_CODE
static mrt_status mrt_quant_view(mrt_node *node, mrt_ctx *ctx, const mrt_tensor *x, const mrt_tensor *scale,
                                 const mrt_tensor *zp, mrt_quant_params **out) {
  mrt_quant_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  if (scale->dtype != MRT_DTYPE_FLOAT32)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "scale must be float32");
  if (scale->ndim > 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "scale of rank %u: only per-tensor and per-axis (1-D) scales (blocked needs block_size)",
                         scale->ndim);
  if (zp && zp->count != scale->count)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "zero point has %zu values, scale %zu", zp->count,
                         scale->count);
  p->outer = 1;
  p->channels = 1;
  p->inner = x->count;
  if (scale->ndim == 1 && scale->count > 1) {
    const int64_t axis = mrt_norm_axis(mrt_attr_int(node, "axis", 1), x->ndim);
    if (axis < 0) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis out of range");
    if ((size_t)x->dims[axis] != scale->count)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "scale has %zu values, axis %lld has %lld",
                           scale->count, (long long)axis, (long long)x->dims[axis]);
    p->outer = mrt_prod(x->dims, 0, (uint32_t)axis);
    p->channels = scale->count;
    p->inner = mrt_prod(x->dims, (uint32_t)axis + 1, x->ndim);
  }
  *out = p;
  return MRT_STATUS_OK;
}
#endif

/* ---------------------------------------------------------------- Quantize */
#if defined(MRT_KERNEL_SUFFIX) && (defined(MRT_OP_QuantizeLinear) || defined(MRT_OP_DynamicQuantizeLinear))
typedef MRT_T1 mrt_q_t;
#if defined(MRT_T1_IS_int8)
#define MRT_QMIN (-128)
#define MRT_QMAX 127
#elif defined(MRT_T1_IS_uint8)
#define MRT_QMIN 0
#define MRT_QMAX 255
#elif defined(MRT_T1_IS_int16)
#define MRT_QMIN (-32768)
#define MRT_QMAX 32767
#else
#define MRT_QMIN 0
#define MRT_QMAX 65535
#endif
typedef mrt_q_t mrt_qv8q __attribute__((vector_size(8 * sizeof(mrt_q_t))));

static inline float mrt_q_round(float v) { return (v + MRT_QROUND_MAGIC) - MRT_QROUND_MAGIC; }

/* y[0..n) = quantize(x[0..n)) with one scale and zero point. */
static void mrt_quantize_run(size_t n, const float *MRT_RESTRICT x, float scale, int32_t zp,
                             mrt_q_t *MRT_RESTRICT y) {
  const float lo = (float)(MRT_QMIN - zp), hi = (float)(MRT_QMAX - zp);
  const mrt_qv8f vs = (mrt_qv8f){0} + scale, vlo = (mrt_qv8f){0} + lo, vhi = (mrt_qv8f){0} + hi;
  const mrt_qv8f magic = (mrt_qv8f){0} + MRT_QROUND_MAGIC;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    mrt_qv8f v;
    __builtin_memcpy(&v, x + i, sizeof v);
    v = mrt_qmin(mrt_qmax(v / vs, vlo), vhi);
    v = (v + magic) - magic;
    const mrt_qv8q q = __builtin_convertvector(__builtin_convertvector(v, mrt_qv8i) + zp, mrt_qv8q);
    __builtin_memcpy(y + i, &q, sizeof q);
  }
  for (; i < n; ++i) {
    const float v = mrt_qminf(mrt_qmaxf(x[i] / scale, lo), hi);
    y[i] = (mrt_q_t)((int32_t)mrt_q_round(v) + zp);
  }
}
#endif

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_QuantizeLinear)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_quantizelinear_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 3, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *s = node->inputs[1], *z = mrt_in(node, 2), *y = node->outputs[0];
  if (!x || !s || !y) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "x, y_scale and y are required");
  if ((st = mrt_check_dtype(ctx, node, x, MRT_T0_DTYPE))) return st;
  if ((st = mrt_check_dtype(ctx, node, y, MRT_T1_DTYPE))) return st;
  if (z && (st = mrt_check_dtype(ctx, node, z, MRT_T1_DTYPE))) return st;
  if (!mrt_same_dims(x, y)) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "y must have x's shape");
  mrt_quant_params *p;
  if ((st = mrt_quant_view(node, ctx, x, s, z, &p))) return st;
  node->params = p;
  return MRT_STATUS_OK;
}

/* Elements a task quantises at least: a network's input image (150,528 floats)
 * is split, a residual's few thousand are not. */
#define MRT_QUANT_TASK_ELEMS ((size_t)1 << 15)

typedef struct mrt_quant_job {
  const mrt_node *node;
  size_t per_task; /* elements, a multiple of 64 */
} mrt_quant_job;

/* Elements [task * per_task, +per_task) of x viewed flat, row by row of the
 * (outer * channels) x inner view, each row with its channel's scale. */
static void mrt_quant_task(void *arg, size_t task, size_t thread) {
  MRT_UNUSED(thread);
  const mrt_quant_job *jb = arg;
  const mrt_node *node = jb->node;
  const mrt_quant_params *p = node->params;
  const float *x = node->inputs[0]->data, *scale = node->inputs[1]->data;
  const mrt_tensor *zt = mrt_in(node, 2);
  const mrt_q_t *zp = zt ? zt->data : NULL;
  mrt_q_t *y = node->outputs[0]->data;
  const size_t total = p->outer * p->channels * p->inner;
  size_t i = task * jb->per_task;
  const size_t end = total - i < jb->per_task ? total : i + jb->per_task;
  while (i < end) {
    const size_t row = i / p->inner, in_row = i - row * p->inner;
    const size_t n = p->inner - in_row < end - i ? p->inner - in_row : end - i, c = row % p->channels;
    mrt_quantize_run(n, x + i, scale[c], zp ? zp[c] : 0, y + i);
    i += n;
  }
}

void MRT_KERNEL(mrt_quantizelinear_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const mrt_quant_params *p = node->params;
  const size_t total = p->outer * p->channels * p->inner;
  const size_t tasks = mrt_pool_tasks(node->pool, total, MRT_QUANT_TASK_ELEMS);
  mrt_quant_job job = {node, tasks > 1 ? (total + tasks * 64 - 1) / (tasks * 64) * 64 : total};
  mrt_parallel_for(node->pool, tasks > 1 ? (total + job.per_task - 1) / job.per_task : 1, mrt_quant_task, &job);
}
#endif

/* -------------------------------------------------------------- Dequantize */
#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_DequantizeLinear)
typedef MRT_T0 mrt_dq_t;
typedef mrt_dq_t mrt_dqv8 __attribute__((vector_size(8 * sizeof(mrt_dq_t))));

static void mrt_dequantize_run(size_t n, const mrt_dq_t *MRT_RESTRICT x, float scale, int32_t zp,
                               float *MRT_RESTRICT y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    mrt_dqv8 q;
    __builtin_memcpy(&q, x + i, sizeof q);
    const mrt_qv8f v = __builtin_convertvector(__builtin_convertvector(q, mrt_qv8i) - zp, mrt_qv8f) * scale;
    __builtin_memcpy(y + i, &v, sizeof v);
  }
  for (; i < n; ++i) y[i] = (float)((int32_t)x[i] - zp) * scale;
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_dequantizelinear_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 3, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *s = node->inputs[1], *z = mrt_in(node, 2), *y = node->outputs[0];
  if (!x || !s || !y) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "x, x_scale and y are required");
  if ((st = mrt_check_dtype(ctx, node, x, MRT_T0_DTYPE))) return st;
  if ((st = mrt_check_dtype(ctx, node, y, MRT_T1_DTYPE))) return st;
  if (z && (st = mrt_check_dtype(ctx, node, z, MRT_T0_DTYPE))) return st;
  if (!mrt_same_dims(x, y)) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "y must have x's shape");
  mrt_quant_params *p;
  if ((st = mrt_quant_view(node, ctx, x, s, z, &p))) return st;
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_dequantizelinear_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const mrt_quant_params *p = node->params;
  const mrt_dq_t *x = node->inputs[0]->data;
  const float *scale = node->inputs[1]->data;
  const mrt_tensor *zt = mrt_in(node, 2);
  const mrt_dq_t *zp = zt ? zt->data : NULL;
  float *y = node->outputs[0]->data;
  for (size_t o = 0; o < p->outer; ++o)
    for (size_t c = 0; c < p->channels; ++c) {
      const size_t off = (o * p->channels + c) * p->inner;
      mrt_dequantize_run(p->inner, x + off, scale[c], zp ? (int32_t)zp[c] : 0, y + off);
    }
}
#endif

/* ------------------------------------------------------- DynamicQuantize */
#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_DynamicQuantizeLinear)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_dynamicquantizelinear_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 1, 3, 3);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0], *s = node->outputs[1], *z = node->outputs[2];
  if (!x || !y || !s || !z)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "x, y, y_scale and y_zero_point are required");
  if ((st = mrt_check_dtype(ctx, node, x, MRT_T0_DTYPE))) return st;
  if ((st = mrt_check_dtype(ctx, node, y, MRT_T1_DTYPE))) return st;
  if ((st = mrt_check_dtype(ctx, node, s, MRT_DTYPE_FLOAT32))) return st;
  if ((st = mrt_check_dtype(ctx, node, z, MRT_T1_DTYPE))) return st;
  if (!mrt_same_dims(x, y) || s->count != 1 || z->count != 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "y must have x's shape, scale and zero point one value");
  return MRT_STATUS_OK;
}

/* onnxruntime's GetQuantizationParameter: the range widened to hold 0, scale
 * (max - min) / 255 (1 for an all-zero input), zero point round(clamp(-min / scale)). */
void MRT_KERNEL(mrt_dynamicquantizelinear_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const float *x = node->inputs[0]->data;
  const size_t n = node->inputs[0]->count;
  mrt_qv8f vmin = (mrt_qv8f){0}, vmax = (mrt_qv8f){0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    mrt_qv8f v;
    __builtin_memcpy(&v, x + i, sizeof v);
    vmin = mrt_qmin(v, vmin);
    vmax = mrt_qmax(v, vmax);
  }
  float lo = 0.0f, hi = 0.0f;
  for (int l = 0; l < 8; ++l) {
    lo = mrt_qminf(vmin[l], lo);
    hi = mrt_qmaxf(vmax[l], hi);
  }
  for (; i < n; ++i) {
    lo = mrt_qminf(x[i], lo);
    hi = mrt_qmaxf(x[i], hi);
  }
  const float scale = hi == lo ? 1.0f : (hi - lo) / (float)(MRT_QMAX - MRT_QMIN);
  float z0 = (float)MRT_QMIN - lo / scale;
  z0 = mrt_qminf(mrt_qmaxf(z0, (float)MRT_QMIN), (float)MRT_QMAX);
  const int32_t zp = (int32_t)mrt_q_round(z0);
  *(float *)node->outputs[1]->data = scale;
  *(mrt_q_t *)node->outputs[2]->data = (mrt_q_t)zp;
  mrt_quantize_run(n, x, scale, zp, node->outputs[0]->data);
}
#endif
