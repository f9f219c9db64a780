/*
 * Helpers shared by the quantised (QLinear*) kernels: reading a quantisation
 * parameter (scale, zero point; per tensor or per channel) at prepare, and
 * requantising an int32 accumulator the way onnxruntime does (MLAS): the
 * accumulator converted to float, times one float scale, rounded half to even,
 * plus the zero point, saturated to the output type.
 *
 * Header-only and static inline: each (op, signature) object is compiled alone.
 */
#ifndef MRT_QCOMMON_H
#define MRT_QCOMMON_H

#include "kcommon.h"

/* Round half to even for |v| < 2^22 (the clamped values here), without libm's
 * rintf, which baseline x86_64 would call out of line: adding 1.5 * 2^23 leaves no
 * fraction bits, and the FPU's default mode rounds that sum to nearest even
 * (the build never uses -ffast-math, which could fold it away). */
static inline float mrt_q_rint(float v) {
  const float magic = 12582912.0f;
  return (v + magic) - magic;
}

/* clamp(v, lo, hi) with NaN going to lo: a corrupt model's scales can make a ratio of
 * inf, and inf * 0 is NaN, whose conversion to an integer is undefined. */
static inline float mrt_q_clampf(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

/* clamp(round(acc * scale) + zp, lo, hi): the clamp first, in float, as MLAS. */
static inline int32_t mrt_q_requant(int32_t acc, float scale, int32_t zp, int32_t lo, int32_t hi) {
  const float v = mrt_q_clampf((float)acc * scale, (float)(lo - zp), (float)(hi - zp));
  return (int32_t)mrt_q_rint(v) + zp;
}

/* A float scale (scalar, or a 1-D vector of `n` values when n > 1 is allowed). */
MRT_PREPARE_CODE
static inline mrt_status mrt_q_scale(mrt_ctx *ctx, const mrt_node *node, uint32_t idx, size_t n_allowed,
                                     const float **out, size_t *count) {
  const mrt_tensor *t = mrt_in(node, idx);
  if (!t) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "scale (input %u) is missing", idx);
  if (t->dtype != MRT_DTYPE_FLOAT32 || !t->is_constant || !t->data)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "scale (input %u) must be a float32 constant", idx);
  if (!(t->count == 1 || (t->count == n_allowed && t->ndim == 1)))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "scale (input %u) must be a scalar%s, got %zu values", idx,
                         n_allowed > 1 ? " or one per channel" : "", t->count);
  const float *s = t->data;
  for (size_t i = 0; i < t->count; i++)
    if (!(s[i] > 0.0f) || s[i] > 3.0e38f)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "scale (input %u) must be positive and finite", idx);
  *out = s;
  *count = t->count;
  return MRT_STATUS_OK;
}

/* A zero point of int8/uint8 type `dt` (absent: 0), scalar or `n_allowed` values,
 * widened into `dst` (n_allowed entries, a scalar broadcast). */
MRT_PREPARE_CODE
static inline mrt_status mrt_q_zero_point(mrt_ctx *ctx, const mrt_node *node, uint32_t idx, mrt_dtype dt,
                                          size_t n_allowed, int32_t *dst) {
  const mrt_tensor *t = mrt_in(node, idx);
  if (!t) {
    for (size_t i = 0; i < n_allowed; i++) dst[i] = 0;
    return MRT_STATUS_OK;
  }
  if (t->dtype != dt || !t->is_constant || !t->data)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "zero point (input %u) must be a constant of the quantised tensor's type", idx);
  if (!(t->count == 1 || (t->count == n_allowed && t->ndim == 1)))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "zero point (input %u) must be a scalar%s, got %zu values", idx,
                         n_allowed > 1 ? " or one per channel" : "", t->count);
  for (size_t i = 0; i < n_allowed; i++) {
    const size_t j = t->count == 1 ? 0 : i;
    dst[i] = dt == MRT_DTYPE_INT8 ? (int32_t)((const int8_t *)t->data)[j] : (int32_t)((const uint8_t *)t->data)[j];
  }
  return MRT_STATUS_OK;
}

/* Pair dot products of int16 lanes: lane i = acc[i] + x[2i] y[2i] + x[2i+1] y[2i+1]
 * (pmaddwd on x86, smull/smlal on NEON). */
typedef int32_t mrt_q_v4i __attribute__((vector_size(16)));
typedef int16_t mrt_q_v8h __attribute__((vector_size(16)));
static inline mrt_q_v4i mrt_q_madd(mrt_q_v4i acc, mrt_q_v8h x, mrt_q_v8h y) {
#if defined(__x86_64__) || defined(__SSE2__)
  return acc + (mrt_q_v4i)__builtin_ia32_pmaddwd128(x, y);
#else
  const mrt_q_v4i xe = __builtin_convertvector(__builtin_shufflevector(x, x, 0, 2, 4, 6), mrt_q_v4i);
  const mrt_q_v4i xo = __builtin_convertvector(__builtin_shufflevector(x, x, 1, 3, 5, 7), mrt_q_v4i);
  const mrt_q_v4i ye = __builtin_convertvector(__builtin_shufflevector(y, y, 0, 2, 4, 6), mrt_q_v4i);
  const mrt_q_v4i yo = __builtin_convertvector(__builtin_shufflevector(y, y, 1, 3, 5, 7), mrt_q_v4i);
  return acc + xe * ye + xo * yo;
#endif
}

static inline int32_t mrt_q_min(mrt_dtype dt) { return dt == MRT_DTYPE_INT8 ? -128 : 0; }
static inline int32_t mrt_q_max(mrt_dtype dt) { return dt == MRT_DTYPE_INT8 ? 127 : 255; }

#endif /* MRT_QCOMMON_H */
