/*
 * The body of vmath.h, included once per instruction set: every function is
 * named V(name) (name, or name_avx2) and carries MRT_VATTR, so the AVX2 copy is
 * compiled for AVX2 + FMA as a whole (a 256-bit vector cannot be passed between
 * functions of different ISAs). No include guard on purpose.
 */
#define V(name) MRT_VNAME(name, MRT_VSUFFIX)
#define MRT_VINLINE MRT_VATTR static inline

MRT_VINLINE mrt_vf8 V(mrt_vload)(const float *p) {
  mrt_vf8 v;
  memcpy(&v, p, sizeof v);
  return v;
}
MRT_VINLINE void V(mrt_vstore)(float *p, mrt_vf8 v) { memcpy(p, &v, sizeof v); }

/* mask ? a : b, per lane; mask lanes are all ones or all zeros (a comparison). */
MRT_VINLINE mrt_vf8 V(mrt_vsel)(mrt_vi8 mask, mrt_vf8 a, mrt_vf8 b) {
  return (mrt_vf8)((mask & (mrt_vi8)a) | (~mask & (mrt_vi8)b));
}

MRT_VINLINE mrt_vf8 V(mrt_vabs)(mrt_vf8 x) { return (mrt_vf8)((mrt_vi8)x & 0x7fffffff); }

MRT_VINLINE float V(mrt_vhsum)(mrt_vf8 v) {
  float s = 0.0f;
  for (int i = 0; i < MRT_VL; i++) s += v[i];
  return s;
}
MRT_VINLINE float V(mrt_vhmax)(mrt_vf8 v) {
  float m = v[0];
  for (int i = 1; i < MRT_VL; i++) m = v[i] > m ? v[i] : m;
  return m;
}

/*
 * exp(x) = 2^n * p(r), n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2]
 * (ln2 split in two so n ln2 is exact). 2^n is built from two halves so that
 * n = 128 and n < -126 (results in the denormals) need no special case: x is
 * clamped to [-104, 89], where 2^n p(r) is 0 below and +inf above the float
 * range by plain rounding. The clamps are written as selects that keep their
 * operand when it is NaN (maxps/minps with x second), so NaN flows through the
 * arithmetic to the result with no compare-and-blend of its own.
 */
MRT_VINLINE mrt_vf8 V(mrt_vexp)(mrt_vf8 x) {
  const mrt_vf8 lo = MRT_VSPLAT(-104.0f), hi = MRT_VSPLAT(89.0f);
  const mrt_vf8 xl = V(mrt_vsel)(lo > x, lo, x);
  const mrt_vf8 xc = V(mrt_vsel)(hi < xl, hi, xl);
  /* round-to-nearest with the 1.5 * 2^23 trick: t's low mantissa bits hold n. */
  const float shifter = 12582912.0f;
  const mrt_vf8 t = xc * 1.44269504f + shifter;
  const mrt_vf8 nf = t - shifter;
  const mrt_vi8 n = (mrt_vi8)t - 0x4B400000;
  const mrt_vf8 r = (xc - nf * 0.693145751953125f) - nf * 1.428606765330187e-06f;
  /* Degree 5 (9e-8 relative approximation error, under float's 6e-8 rounding
   * step twice over: exp is within 2e-7 relative), in Estrin's order: three
   * dependent steps instead of a five-step Horner chain. */
  const mrt_vf8 r2 = r * r;
  const mrt_vf8 p01 = 1.0f + r * 0.9999997019767761f;
  const mrt_vf8 p23 = 0.4999915063381195f + r * 0.1666763573884964f;
  const mrt_vf8 p45 = 0.04189793020486832f + r * 0.008290313184261322f;
  const mrt_vf8 p = p01 + r2 * (p23 + r2 * p45);
  const mrt_vi8 n1 = n >> 1, n2 = n - n1;
  const mrt_vf8 s1 = (mrt_vf8)((n1 + 127) << 23), s2 = (mrt_vf8)((n2 + 127) << 23);
  return p * s1 * s2;
}

/* 1 / (1 + e^-x): e^-x = inf below x = -88.7 gives exactly 0 (the true value
 * is a denormal there), NaN stays NaN. */
MRT_VINLINE mrt_vf8 V(mrt_vsigmoid)(mrt_vf8 x) { return 1.0f / (1.0f + V(mrt_vexp)(-x)); }

/* x * sigmoid(x) = x / (1 + e^-x): very negative x gives -0, as it should. */
MRT_VINLINE mrt_vf8 V(mrt_vsilu)(mrt_vf8 x) { return x / (1.0f + V(mrt_vexp)(-x)); }

/*
 * tanh(x) = x P(x^2) / Q(x^2) for |x| <= 9, P of degree 4 and Q of degree 4 in
 * x^2 (fitted for relative error; 3.3e-7 relative with float rounding), x
 * clamped to +-9 past which tanh is 1 in float. An odd rational function: no
 * exp, no cancellation at 0 (tanh(-0) = -0), and the clamps are selects that let
 * NaN through.
 */
MRT_VINLINE mrt_vf8 V(mrt_vtanh)(mrt_vf8 x0) {
  const mrt_vf8 lo = MRT_VSPLAT(-9.0f), hi = MRT_VSPLAT(9.0f);
  const mrt_vf8 xl = V(mrt_vsel)(lo > x0, lo, x0);
  const mrt_vf8 x = V(mrt_vsel)(hi < xl, hi, xl);
  const mrt_vf8 t = x * x, t2 = t * t;
  const mrt_vf8 p = (1.0f + t * 0.13380984961986542f) +
                    t2 * ((0.0034955397713929415f + t * 2.060827137029264e-05f) + t2 * 1.33535333901591e-08f);
  const mrt_vf8 q = (1.0f + t * 0.4671429991722107f) +
                    t2 * ((0.02587679959833622f + t * 0.0003285554703325033f) + t2 * 7.776096708767e-07f);
  return x * p / q;
}

/* x * tanh(softplus(x)) = x * n / (n + 2) with n = e^x (e^x + 2): no log, no
 * tanh, no cancellation. Past x = 20 the factor is 1 in float (and n would
 * overflow). */
MRT_VINLINE mrt_vf8 V(mrt_vmish)(mrt_vf8 x) {
  const mrt_vf8 e = V(mrt_vexp)(MRT_VMIN(x, MRT_VSPLAT(20.0f)));
  const mrt_vf8 n = e * (e + 2.0f);
  return V(mrt_vsel)(x > 20.0f, x, x * n / (n + 2.0f));
}

/* x * clamp(x / 6 + 1/2, 0, 1): ONNX's HardSwish (alpha 1/6, beta 1/2). The
 * clamp is written as selects so that NaN passes through as in the scalar form. */
MRT_VINLINE mrt_vf8 V(mrt_vhardswish)(mrt_vf8 x) {
  const mrt_vf8 t = x * (1.0f / 6.0f) + 0.5f;
  const mrt_vf8 c = V(mrt_vsel)(t < 0.0f, MRT_VSPLAT(0.0f), V(mrt_vsel)(t > 1.0f, MRT_VSPLAT(1.0f), t));
  return x * c;
}

/* erf(a) / a as a polynomial in a*a, for |a| <= 1. */
MRT_VINLINE mrt_vf8 V(mrt_verf_small)(mrt_vf8 a2) {
  /* Estrin's order: three dependent steps instead of a five-step chain. */
  const mrt_vf8 a4 = a2 * a2;
  const mrt_vf8 p01 = 1.1283791065216064f - a2 * 0.3761237561702728f;
  const mrt_vf8 p23 = 0.11280472576618195f - a2 * 0.026718297973275185f;
  const mrt_vf8 p45 = 0.004924715030938387f - a2 * 0.0005657890578731894f;
  return p01 + a4 * (p23 + a4 * p45);
}

/* erfc(a) for a >= 1: exp(-a*a) * R(t), R(t) a polynomial in t = 1 / (1 + a/2),
 * fitted on a in [1, 10]; past 10 erfc is below the smallest float: 0. */
MRT_VINLINE mrt_vf8 V(mrt_verfc_big)(mrt_vf8 a0) {
  const mrt_vf8 a = MRT_VMIN(a0, MRT_VSPLAT(10.0f));
  const mrt_vf8 t = 1.0f / (1.0f + 0.5f * a);
  /* Estrin's order: four dependent steps instead of a seven-step chain. */
  const mrt_vf8 t2 = t * t, t4 = t2 * t2;
  const mrt_vf8 p01 = -2.4522807507310063e-05f + t * 0.28271743655204773f;
  const mrt_vf8 p23 = 0.27543696761131287f + t * 0.28582367300987244f;
  const mrt_vf8 p45 = 0.04069466516375542f + t * 0.3646571934223175f;
  const mrt_vf8 p67 = -0.32165539264678955f + t * 0.07183467596769333f;
  const mrt_vf8 p = (p01 + t2 * p23) + t4 * (p45 + t2 * p67);
  return V(mrt_vsel)(a0 > 10.0f, MRT_VSPLAT(0.0f), V(mrt_vexp)(-a * a) * p);
}

/* erfc(a) for a >= 0, accurate relative to erfc itself (no 1 - erf cancellation
 * in the tail, which Gelu's negative half needs). */
MRT_VINLINE mrt_vf8 V(mrt_verfc_pos)(mrt_vf8 a) {
  const mrt_vf8 small = 1.0f - a * V(mrt_verf_small)(a * a);
  return V(mrt_vsel)(a > 1.0f, V(mrt_verfc_big)(a), small);
}

/* erf(a) = 1 - exp(-a*a) Q(a) for 1 <= a <= 3.92 (past 3.92 erf is 1 in float):
 * erf needs erfc only to float's absolute step near 1, so Q is a plain
 * polynomial in a (degree 6, 7.5e-8 absolute error in erfc), no division by
 * 1 + a/2 as in mrt_verfc_big, which keeps erfc relative for Gelu. */
MRT_VINLINE mrt_vf8 V(mrt_verf_big)(mrt_vf8 a0) {
  const mrt_vf8 hi = MRT_VSPLAT(3.92f);
  const mrt_vf8 a = V(mrt_vsel)(hi < a0, hi, a0);
  const mrt_vf8 a2 = a * a;
  const mrt_vf8 q01 = 0.9753860235214233f - a * 0.9984868168830872f;
  const mrt_vf8 q23 = 0.6957904100418091f - a * 0.3290250599384308f;
  const mrt_vf8 q45 = 0.10014636814594269f - a * 0.01757018268108368f;
  const mrt_vf8 q = q01 + a2 * (q23 + a2 * (q45 + a2 * 0.0013426534133031964f));
  return 1.0f - V(mrt_vexp)(-a2) * q;
}

MRT_VINLINE mrt_vf8 V(mrt_verf)(mrt_vf8 x) {
  const mrt_vf8 a = V(mrt_vabs)(x);
  const mrt_vf8 small = x * V(mrt_verf_small)(x * x);
  /* erf(|x|) with x's sign. */
  const mrt_vf8 big = (mrt_vf8)((mrt_vi8)V(mrt_verf_big)(a) | ((mrt_vi8)x & (int32_t)0x80000000));
  return V(mrt_vsel)(a > 1.0f, big, small);
}

/* y[i] = f(x[i]) over n floats: whole vectors, then one padded vector for the
 * tail (x and y may be the same array). */
#define VMAP(n, x, y, f)                                                                      \
  do {                                                                                        \
    size_t i_ = 0;                                                                            \
    for (; i_ + MRT_VL <= (n); i_ += MRT_VL) V(mrt_vstore)((y) + i_, f(V(mrt_vload)((x) + i_))); \
    if (i_ < (n)) {                                                                           \
      float t_[MRT_VL] = {0};                                                                 \
      memcpy(t_, (x) + i_, ((n) - i_) * sizeof(float));                                     \
      V(mrt_vstore)(t_, f(V(mrt_vload)(t_)));                                                 \
      memcpy((y) + i_, t_, ((n) - i_) * sizeof(float));                                      \
    }                                                                                         \
  } while (0)

/* x * Phi(x) = x/2 * erfc(-x / sqrt 2), through erfc so that the negative half
 * keeps its relative accuracy (1 + erf(x / sqrt 2) cancels there). */
MRT_VINLINE mrt_vf8 V(mrt_vgelu)(mrt_vf8 x) {
  const mrt_vf8 w = x * -0.70710678118654752f;
  const mrt_vf8 e = V(mrt_verfc_pos)(V(mrt_vabs)(w));
  return 0.5f * x * V(mrt_vsel)(w < 0.0f, 2.0f - e, e);
}

/* The tanh form x/2 * (1 + tanh(u)) is x * sigmoid(2u) = x / (1 + exp(-2u)),
 * u = sqrt(2/pi) (x + 0.044715 x^3): no cancellation for negative x. */
MRT_VINLINE mrt_vf8 V(mrt_vgelu_tanh)(mrt_vf8 x) {
  const mrt_vf8 u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + V(mrt_vexp)(-2.0f * u));
}

/* The array functions the kernels hold pointers to (see MRT_VSELECT). */
MRT_VATTR static void V(mrt_vmap_exp)(size_t n, const float *x, float *y) { VMAP(n, x, y, V(mrt_vexp)); }
MRT_VATTR static void V(mrt_vmap_erf)(size_t n, const float *x, float *y) { VMAP(n, x, y, V(mrt_verf)); }
MRT_VATTR static void V(mrt_vmap_gelu)(size_t n, const float *x, float *y) { VMAP(n, x, y, V(mrt_vgelu)); }
MRT_VATTR static void V(mrt_vmap_gelu_tanh)(size_t n, const float *x, float *y) {
  VMAP(n, x, y, V(mrt_vgelu_tanh));
}

MRT_VATTR static void V(mrt_vmap_sigmoid)(size_t n, const float *x, float *y) { VMAP(n, x, y, V(mrt_vsigmoid)); }
MRT_VATTR static void V(mrt_vmap_silu)(size_t n, const float *x, float *y) { VMAP(n, x, y, V(mrt_vsilu)); }
MRT_VATTR static void V(mrt_vmap_tanh)(size_t n, const float *x, float *y) { VMAP(n, x, y, V(mrt_vtanh)); }
MRT_VATTR static void V(mrt_vmap_mish)(size_t n, const float *x, float *y) { VMAP(n, x, y, V(mrt_vmish)); }
MRT_VATTR static void V(mrt_vmap_hardswish)(size_t n, const float *x, float *y) {
  VMAP(n, x, y, V(mrt_vhardswish));
}

/* y[i] = exp(x[i] - m) (y may be NULL: only the sum is wanted); returns sum y[i]. */
MRT_VATTR static float V(mrt_vexp_shift_sum)(size_t n, const float *x, float m, float *y) {
  mrt_vf8 acc = MRT_VSPLAT(0.0f);
  size_t i = 0;
  for (; i + MRT_VL <= n; i += MRT_VL) {
    const mrt_vf8 e = V(mrt_vexp)(V(mrt_vload)(x + i) - m);
    if (y) V(mrt_vstore)(y + i, e);
    acc += e;
  }
  float sum = 0.0f;
  if (i < n) {
    float t[MRT_VL] = {0};
    memcpy(t, x + i, (n - i) * sizeof(float));
    const mrt_vf8 e = V(mrt_vexp)(V(mrt_vload)(t) - m);
    for (size_t j = 0; j < n - i; j++) {
      sum += e[j];
      if (y) y[i + j] = e[j];
    }
  }
  return sum + V(mrt_vhsum)(acc);
}

#undef VMAP
#undef MRT_VINLINE
#undef V
