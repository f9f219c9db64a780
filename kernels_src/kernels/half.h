/*
 * IEEE binary16 <-> binary32 conversions in portable C (float16 tensors are stored as
 * uint16_t: not every target's compiler has _Float16). Branch-free, so loops over
 * them vectorise. Header-only and static inline, like kcommon.h.
 */
#ifndef MRT_HALF_H
#define MRT_HALF_H

#include "mrt_kernel.h"

static inline uint32_t mrt_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float mrt_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Exact. Moving the 15 exponent+mantissa bits into float position and scaling by
 * 2^112 rebiases the exponent (15 -> 127) and normalises subnormals in one multiply;
 * what lands at or above 2^16 was Inf or NaN, whose exponent becomes all ones. */
static inline float mrt_half_to_float(uint16_t h) {
  const float v = mrt_f32_from_bits((uint32_t)(h & 0x7fff) << 13) * 0x1p112f;
  uint32_t u = mrt_f32_bits(v);
  u |= v >= 65536.0f ? 0x7f800000u : 0u;
  return mrt_f32_from_bits(u | ((uint32_t)(h & 0x8000) << 16));
}

/* Round to nearest, ties to even (as numpy and onnxruntime); overflow gives Inf,
 * NaN stays a (quiet) NaN. Every case is computed and the right one selected, so a
 * loop over it has no branch and vectorises. */
static inline uint16_t mrt_float_to_half(float f) {
  const uint32_t x = mrt_f32_bits(f);
  const uint32_t ax = x & 0x7fffffffu;
  /* Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest
   * even; a carry out of the mantissa correctly bumps the exponent. */
  const uint32_t normal = (ax - 0x38000000u + 0x0fffu + ((ax >> 13) & 1u)) >> 13;
  /* Below 2^-14, a subnormal half: adding 0.5 puts the value's 2^-24 units in the low
   * mantissa bits, rounded by the FPU itself (nearest even). */
  const uint32_t sub = mrt_f32_bits(mrt_f32_from_bits(ax) + 0.5f) - 0x3f000000u;
  uint32_t r = ax < 0x38800000u ? sub : normal;
  r = ax >= 0x477ff000u ? 0x7c00u : r;                             /* >= 65520 rounds to Inf */
  r = ax > 0x7f800000u ? (0x7e00u | ((ax >> 13) & 0x3ffu)) : r;    /* NaN */
  return (uint16_t)(r | ((x >> 16) & 0x8000u));
}

#endif /* MRT_HALF_H */
