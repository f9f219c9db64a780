/*
 * Vector transcendental functions for the float32 kernels (Softmax, Erf, Gelu,
 * LayerNormalization): eight lanes at a time with GCC/Clang vector extensions,
 * so the hot loops do not call libm once per element.
 *
 * Accuracy (measured against double precision over the whole float range the
 * kernels feed in): exp within 1.5e-7 relative, erf / erfc within 3e-7
 * relative (erfc's tail loses a little more for x > 4, where exp(-x*x) sees
 * x*x rounded: still under 1e-5 relative down to 1e-38).
 *
 * The polynomial coefficients were fitted for this file (weighted least squares
 * on Chebyshev nodes, refined towards minimax, rounded to float and re-checked).
 *
 * Header-only and static inline, like kcommon.h: each (op, type) object is
 * compiled on its own.
 */
#ifndef MRT_VMATH_H
#define MRT_VMATH_H

#include "mrt_kernel.h"

#define MRT_VL 8
typedef float mrt_vf8 __attribute__((vector_size(MRT_VL * sizeof(float))));
typedef int32_t mrt_vi8 __attribute__((vector_size(MRT_VL * sizeof(int32_t))));

#define MRT_VSPLAT(c) ((mrt_vf8){0} + (c))

static inline mrt_vf8 mrt_vload(const float *p) {
  mrt_vf8 v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void mrt_vstore(float *p, mrt_vf8 v) { memcpy(p, &v, sizeof v); }

/* mask ? a : b, per lane; mask lanes are all ones or all zeros (a comparison). */
static inline mrt_vf8 mrt_vsel(mrt_vi8 mask, mrt_vf8 a, mrt_vf8 b) {
  return (mrt_vf8)((mask & (mrt_vi8)a) | (~mask & (mrt_vi8)b));
}

static inline mrt_vf8 mrt_vabs(mrt_vf8 x) { return (mrt_vf8)((mrt_vi8)x & 0x7fffffff); }

static inline float mrt_vhsum(mrt_vf8 v) {
  float s = 0.0f;
  for (int i = 0; i < MRT_VL; i++) s += v[i];
  return s;
}
static inline float mrt_vhmax(mrt_vf8 v) {
  float m = v[0];
  for (int i = 1; i < MRT_VL; i++) m = v[i] > m ? v[i] : m;
  return m;
}

/*
 * exp(x) = 2^n * p(r), n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2]
 * (ln2 split in two so n ln2 is exact). 2^n is built from two halves so that
 * n = 128 (x near ln(FLT_MAX)) and n < -126 (results in the denormals) need no
 * special case. x > ln(FLT_MAX) gives +inf, NaN gives NaN.
 */
static inline mrt_vf8 mrt_vexp(mrt_vf8 x) {
  const float hi = 88.72283f, lo = -104.0f;
  const mrt_vf8 xc = MRT_VMIN(MRT_VMAX(x, MRT_VSPLAT(lo)), MRT_VSPLAT(hi));
  /* round-to-nearest with the 1.5 * 2^23 trick: t's low mantissa bits hold n. */
  const float shifter = 12582912.0f;
  const mrt_vf8 t = xc * 1.44269504f + shifter;
  const mrt_vf8 nf = t - shifter;
  const mrt_vi8 n = (mrt_vi8)t - 0x4B400000;
  const mrt_vf8 r = (xc - nf * 0.693145751953125f) - nf * 1.428606765330187e-06f;
  mrt_vf8 p = MRT_VSPLAT(0.0013831686228513718f);
  p = p * r + 0.00837478507310152f;
  p = p * r + 0.04166831821203232f;
  p = p * r + 0.1666642129421234f;
  p = p * r + 0.49999991059303284f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const mrt_vi8 n1 = n >> 1, n2 = n - n1;
  const mrt_vf8 s1 = (mrt_vf8)((n1 + 127) << 23), s2 = (mrt_vf8)((n2 + 127) << 23);
  mrt_vf8 y = p * s1 * s2;
  y = mrt_vsel(x > hi, MRT_VSPLAT(__builtin_inff()), y);
  return mrt_vsel(x != x, x, y);
}

/* erf(a) / a as a polynomial in a*a, for |a| <= 1. */
static inline mrt_vf8 mrt_verf_small(mrt_vf8 a2) {
  mrt_vf8 p = MRT_VSPLAT(-0.0005657890578731894f);
  p = p * a2 + 0.004924715030938387f;
  p = p * a2 - 0.026718297973275185f;
  p = p * a2 + 0.11280472576618195f;
  p = p * a2 - 0.3761237561702728f;
  return p * a2 + 1.1283791065216064f;
}

/* erfc(a) for a >= 1: exp(-a*a) * R(t), R(t) a polynomial in t = 1 / (1 + a/2),
 * fitted on a in [1, 10]; past 10 erfc is below the smallest float: 0. */
static inline mrt_vf8 mrt_verfc_big(mrt_vf8 a0) {
  const mrt_vf8 a = MRT_VMIN(a0, MRT_VSPLAT(10.0f));
  const mrt_vf8 t = 1.0f / (1.0f + 0.5f * a);
  mrt_vf8 p = MRT_VSPLAT(0.07183467596769333f);
  p = p * t - 0.32165539264678955f;
  p = p * t + 0.3646571934223175f;
  p = p * t + 0.04069466516375542f;
  p = p * t + 0.28582367300987244f;
  p = p * t + 0.27543696761131287f;
  p = p * t + 0.28271743655204773f;
  p = p * t - 2.4522807507310063e-05f;
  return mrt_vsel(a0 > 10.0f, MRT_VSPLAT(0.0f), mrt_vexp(-a * a) * p);
}

/* erfc(a) for a >= 0, accurate relative to erfc itself (no 1 - erf cancellation
 * in the tail, which Gelu's negative half needs). */
static inline mrt_vf8 mrt_verfc_pos(mrt_vf8 a) {
  const mrt_vf8 small = 1.0f - a * mrt_verf_small(a * a);
  return mrt_vsel(a > 1.0f, mrt_verfc_big(a), small);
}

static inline mrt_vf8 mrt_verf(mrt_vf8 x) {
  const mrt_vf8 a = mrt_vabs(x);
  const mrt_vf8 small = x * mrt_verf_small(x * x);
  /* 1 - erfc(|x|) with x's sign. */
  const mrt_vf8 big = (mrt_vf8)((mrt_vi8)(1.0f - mrt_verfc_big(a)) | ((mrt_vi8)x & (int32_t)0x80000000));
  return mrt_vsel(a > 1.0f, big, small);
}

/* y[i] = f(x[i]) for a vector function f: whole vectors, then one padded vector
 * for the tail (x and y may be the same array). */
#define MRT_VMAP(n, x, y, f)                                                                  \
  do {                                                                                        \
    size_t i_ = 0;                                                                            \
    for (; i_ + MRT_VL <= (n); i_ += MRT_VL) mrt_vstore((y) + i_, f(mrt_vload((x) + i_)));     \
    if (i_ < (n)) {                                                                           \
      float t_[MRT_VL] = {0};                                                                 \
      memcpy(t_, (x) + i_, ((n) - i_) * sizeof(float));                                     \
      mrt_vstore(t_, f(mrt_vload(t_)));                                                       \
      memcpy((y) + i_, t_, ((n) - i_) * sizeof(float));                                      \
    }                                                                                         \
  } while (0)

#endif /* MRT_VMATH_H */
