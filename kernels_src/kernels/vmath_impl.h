/*
 * The body of vmath.h, included once per instruction set and vector width:
 * every function is named V(name) (name, name_avx2, name_avx512) and carries
 * MRT_VATTR, so each copy is compiled for its ISA as a whole (a 256- or 512-bit
 * vector cannot be passed between functions of different ISAs). The includer
 * defines the vector types MRT_VF / MRT_VI, their lane count MRT_VW and, where
 * the ISA has them, MRT_VSCALEF (p * 2^n in one instruction) and MRT_VLOADN /
 * MRT_VSTOREN (masked moves of the first n lanes). No include guard on purpose.
 */
#define V(name) MRT_VNAME(name, MRT_VSUFFIX)
#define MRT_VINLINE MRT_VATTR static inline
#define VF MRT_VF
#define VI MRT_VI
#define VW MRT_VW
#define VSPLAT(c) ((VF){0} + (c))

MRT_VINLINE VF V(mrt_vload)(const float *p) {
  VF v;
  memcpy(&v, p, sizeof v);
  return v;
}
MRT_VINLINE void V(mrt_vstore)(float *p, VF v) { memcpy(p, &v, sizeof v); }

/* mask ? a : b, per lane; mask lanes are all ones or all zeros (a comparison). */
MRT_VINLINE VF V(mrt_vsel)(VI mask, VF a, VF b) {
  return (VF)((mask & (VI)a) | (~mask & (VI)b));
}

MRT_VINLINE VF V(mrt_vabs)(VF x) { return (VF)((VI)x & 0x7fffffff); }

/* The first n < VW floats of p into a vector (zeros after), and back: with the
 * ISA's masked moves where it has them (MRT_VLOADN / MRT_VSTOREN), else through
 * a buffer by fixed-size pieces. A memcpy of n floats, a library call, and a
 * vector load from its bytes cost a 1-float row 25-50 ns a call. */
#ifdef MRT_VLOADN
MRT_VINLINE VF V(mrt_vload_part)(const float *p, size_t n) { return MRT_VLOADN(p, n); }
MRT_VINLINE void V(mrt_vstore_part)(float *p, VF v, size_t n) { MRT_VSTOREN(p, v, n); }
#else
MRT_VINLINE void V(mrt_vcopy_part)(float *d, const float *s, size_t n) {
  size_t o = 0;
  if (VW > 8 && (n & 8)) memcpy(d + o, s + o, 8 * sizeof(float)), o += 8;
  if (n & 4) memcpy(d + o, s + o, 4 * sizeof(float)), o += 4;
  if (n & 2) memcpy(d + o, s + o, 2 * sizeof(float)), o += 2;
  if (n & 1) d[o] = s[o];
}
MRT_VINLINE VF V(mrt_vload_part)(const float *p, size_t n) {
  float t[VW] = {0};
  V(mrt_vcopy_part)(t, p, n);
  return V(mrt_vload)(t);
}
MRT_VINLINE void V(mrt_vstore_part)(float *p, VF v, size_t n) {
  float t[VW];
  V(mrt_vstore)(t, v);
  V(mrt_vcopy_part)(p, t, n);
}
#endif

/* Horizontal sum and max by halves: log2(VW) dependent steps, not VW - 1 (a
 * serial chain of 15 adds cost a 128-float softmax row half its time). */
MRT_VINLINE float V(mrt_vhsum)(VF v) {
  float t[VW];
  memcpy(t, &v, sizeof t);
  for (int w = VW / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) t[i] += t[i + w];
  return t[0];
}
MRT_VINLINE float V(mrt_vhmax)(VF v) {
  float t[VW];
  memcpy(t, &v, sizeof t);
  for (int w = VW / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) t[i] = t[i + w] > t[i] ? t[i + w] : t[i];
  return t[0];
}

/* e^r for |r| <= ln2/2: degree 5 (9e-8 relative approximation error, under
 * float's 6e-8 rounding step twice over), in Horner's order: the array loops
 * are throughput-bound, their iterations overlapping, and Horner is one
 * operation less than Estrin's order and rounds last at 1 + r q. */
MRT_VINLINE VF V(mrt_vexp_poly)(VF r) {
  return 1.0f + r * (0.9999997019767761f +
                     r * (0.4999915063381195f +
                          r * (0.1666763573884964f + r * (0.04189793020486832f + r * 0.008290313184261322f))));
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
MRT_VINLINE VF V(mrt_vexp)(VF x) {
  const VF lo = VSPLAT(-104.0f), hi = VSPLAT(89.0f);
  const VF xl = V(mrt_vsel)(lo > x, lo, x);
  const VF xc = V(mrt_vsel)(hi < xl, hi, xl);
  /* round-to-nearest with the 1.5 * 2^23 trick: t's low mantissa bits hold n. */
  const float shifter = 12582912.0f;
  const VF t = xc * 1.44269504f + shifter;
  const VF nf = t - shifter;
  const VI n = (VI)t - 0x4B400000;
  const VF r = (xc - nf * 0.693145751953125f) - nf * 1.428606765330187e-06f;
  const VF p = V(mrt_vexp_poly)(r);
#ifdef MRT_VSCALEF
  (void)n;
  return MRT_VSCALEF(p, nf); /* one instruction, denormals and overflow included */
#else
  const VI n1 = n >> 1, n2 = n - n1;
  const VF s1 = (VF)((n1 + 127) << 23), s2 = (VF)((n2 + 127) << 23);
  return p * s1 * s2;
#endif
}

/*
 * exp(a) for a <= 0 (or NaN), what sigmoid-shaped functions need: exp(-|x|)
 * never overflows, so 2^n is one shift. a is clamped to -88, where n = -127
 * and the shifted exponent field is 0: results that would be denormals (below
 * e^-87.7) are 0 (with MRT_VSCALEF denormals, down to 0 at -104). The bias 127 rides in
 * the rounding constant (1.5 * 2^23 + 127: t's bits are 0x4B400000 + n + 127,
 * and 0x4B400000 << 23 wraps to 0).
 */
MRT_VINLINE VF V(mrt_vexp_neg)(VF a) {
#ifdef MRT_VSCALEF
  const VF lo = VSPLAT(-104.0f); /* 2^-150 p(r): 0 */
#else
  const VF lo = VSPLAT(-88.0f);
#endif
  const VF ac = V(mrt_vsel)(lo > a, lo, a);
  const float shifter = 12583039.0f;
  const VF t = ac * 1.44269504f + shifter;
  const VF nf = t - shifter;
  const VF r = (ac - nf * 0.693145751953125f) - nf * 1.428606765330187e-06f;
  const VF p = V(mrt_vexp_poly)(r);
#ifdef MRT_VSCALEF
  return MRT_VSCALEF(p, nf);
#else
  return p * (VF)((VI)t << 23);
#endif
}

/* sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) below, with e = exp(-|x|):
 * no overflow, NaN stays NaN. Below x = -87.3 the true value is a denormal: 0
 * here, or with MRT_VSCALEF a denormal of a few bits (0 from x = -104).
 * (vrcp14ps and a Newton step measured no faster than the zmm division.) */
MRT_VINLINE VF V(mrt_vsigmoid)(VF x) {
  const VF e = V(mrt_vexp_neg)((VF)((VI)x | (int32_t)0x80000000));
  return V(mrt_vsel)(x < 0.0f, e, VSPLAT(1.0f)) / (1.0f + e);
}

/*
 * exp(-x), bit for bit mrt_vexp(-x) with the negation folded in: t = -x / ln2
 * rounded, s = x + n ln2 = -r, and the polynomial in r evaluated in s with its
 * odd coefficients negated (exact: rounding is symmetric). SiLU's x / (1 + exp(-x))
 * then needs no |x|, no x * e and no select: three vector operations less than
 * through exp(-|x|) (AVX-512, in L1: 0.231 -> 0.210 ns a float). Without
 * MRT_VSCALEF, 2^n is one shift, not mrt_vexp's two halves: the bias 126 rides in
 * the rounding constant, and 2 p (the coefficients doubled, exact) times 2^(n-1)
 * rounds once as p 2^n does. x is clamped to [-89, 86], n to [-124, 128]: at
 * n = 128 the shift gives +inf, as the true exp(89) is; past x = 86 the result is
 * under 2^-124 and 1 + exp(-x) is 1 either way. Every float input gives SiLU the
 * same bits as through the two halves (checked over all 2^32), for 7 vector
 * operations less (AVX2, in L1: 0.53 -> 0.39 ns a float).
 */
MRT_VINLINE VF V(mrt_vexp_negx)(VF x) {
#ifdef MRT_VSCALEF
  const VF lo = VSPLAT(-89.0f), hi = VSPLAT(104.0f);
  const float shifter = 12582912.0f, two = 1.0f;
#else
  const VF lo = VSPLAT(-89.0f), hi = VSPLAT(86.0f);
  const float shifter = 12583038.0f, two = 2.0f; /* 1.5 * 2^23 + 126 */
#endif
  const VF xl = V(mrt_vsel)(lo > x, lo, x);
  const VF xc = V(mrt_vsel)(hi < xl, hi, xl);
  const VF t = xc * -1.44269504f + shifter;
  const VF nf = t - shifter;
  const VF s = (xc + nf * 0.693145751953125f) + nf * 1.428606765330187e-06f;
  const VF p = two - s * (two * 0.9999997019767761f -
                          s * (two * 0.4999915063381195f -
                               s * (two * 0.1666763573884964f -
                                    s * (two * 0.04189793020486832f - s * (two * 0.008290313184261322f)))));
#ifdef MRT_VSCALEF
  return MRT_VSCALEF(p, nf);
#else
  return p * (VF)((VI)t << 23);
#endif
}

/* x * sigmoid(x) = x / (1 + exp(-x)): below x = -88.7 exp(-x) is +inf and
 * the result -0 (the true value is under 2e-37 there); +inf gives +inf. */
MRT_VINLINE VF V(mrt_vsilu)(VF x) { return x / (1.0f + V(mrt_vexp_negx)(x)); }

/*
 * tanh(x) = x P(x^2) / Q(x^2) for |x| <= 9, P of degree 4 and Q of degree 4 in
 * x^2 (fitted for relative error; 3.3e-7 relative with float rounding), x
 * clamped to +-9 past which tanh is 1 in float. An odd rational function: no
 * exp, no cancellation at 0 (tanh(-0) = -0), and the clamps are selects that let
 * NaN through.
 */
MRT_VINLINE VF V(mrt_vtanh)(VF x0) {
  const VF lo = VSPLAT(-9.0f), hi = VSPLAT(9.0f);
  const VF xl = V(mrt_vsel)(lo > x0, lo, x0);
  const VF x = V(mrt_vsel)(hi < xl, hi, xl);
  const VF t = x * x, t2 = t * t;
  const VF p = (1.0f + t * 0.13380984961986542f) +
                    t2 * ((0.0034955397713929415f + t * 2.060827137029264e-05f) + t2 * 1.33535333901591e-08f);
  const VF q = (1.0f + t * 0.4671429991722107f) +
                    t2 * ((0.02587679959833622f + t * 0.0003285554703325033f) + t2 * 7.776096708767e-07f);
  return x * p / q;
}

/* x * tanh(softplus(x)) = x * n / (n + 2) with n = e^x (e^x + 2): no log, no
 * tanh, no cancellation. Past x = 20 the factor is 1 in float (and n would
 * overflow). */
MRT_VINLINE VF V(mrt_vmish)(VF x) {
  const VF e = V(mrt_vexp)(MRT_VMIN(x, VSPLAT(20.0f)));
  const VF n = e * (e + 2.0f);
  return V(mrt_vsel)(x > 20.0f, x, x * n / (n + 2.0f));
}

/* x * clamp(x / 6 + 1/2, 0, 1): ONNX's HardSwish (alpha 1/6, beta 1/2). The
 * clamp is written as selects so that NaN passes through as in the scalar form. */
MRT_VINLINE VF V(mrt_vhardswish)(VF x) {
  const VF t = x * (1.0f / 6.0f) + 0.5f;
  const VF c = V(mrt_vsel)(t < 0.0f, VSPLAT(0.0f), V(mrt_vsel)(t > 1.0f, VSPLAT(1.0f), t));
  return x * c;
}

/* erf(a) / a as a polynomial in a*a, for |a| <= 1. */
MRT_VINLINE VF V(mrt_verf_small)(VF a2) {
  /* Estrin's order: three dependent steps instead of a five-step chain. */
  const VF a4 = a2 * a2;
  const VF p01 = 1.1283791065216064f - a2 * 0.3761237561702728f;
  const VF p23 = 0.11280472576618195f - a2 * 0.026718297973275185f;
  const VF p45 = 0.004924715030938387f - a2 * 0.0005657890578731894f;
  return p01 + a4 * (p23 + a4 * p45);
}

/* erfc(a) for a >= 1: exp(-a*a) * R(t), R(t) a polynomial in t = 1 / (1 + a/2),
 * fitted on a in [1, 10]; past 10 erfc is below the smallest float: 0. */
MRT_VINLINE VF V(mrt_verfc_big)(VF a0) {
  const VF a = MRT_VMIN(a0, VSPLAT(10.0f));
  const VF t = 1.0f / (1.0f + 0.5f * a);
  /* Estrin's order: four dependent steps instead of a seven-step chain. */
  const VF t2 = t * t, t4 = t2 * t2;
  const VF p01 = -2.4522807507310063e-05f + t * 0.28271743655204773f;
  const VF p23 = 0.27543696761131287f + t * 0.28582367300987244f;
  const VF p45 = 0.04069466516375542f + t * 0.3646571934223175f;
  const VF p67 = -0.32165539264678955f + t * 0.07183467596769333f;
  const VF p = (p01 + t2 * p23) + t4 * (p45 + t2 * p67);
  return V(mrt_vsel)(a0 > 10.0f, VSPLAT(0.0f), V(mrt_vexp)(-a * a) * p);
}

/* erfc(a) for a >= 0, accurate relative to erfc itself (no 1 - erf cancellation
 * in the tail, which Gelu's negative half needs). */
MRT_VINLINE VF V(mrt_verfc_pos)(VF a) {
  const VF small = 1.0f - a * V(mrt_verf_small)(a * a);
  return V(mrt_vsel)(a > 1.0f, V(mrt_verfc_big)(a), small);
}

/* erf(a) = 1 - exp(-a*a) Q(a) for 1 <= a <= 3.92 (past 3.92 erf is 1 in float):
 * erf needs erfc only to float's absolute step near 1, so Q is a plain
 * polynomial in a (degree 6, 7.5e-8 absolute error in erfc), no division by
 * 1 + a/2 as in mrt_verfc_big, which keeps erfc relative for Gelu. */
MRT_VINLINE VF V(mrt_verf_big)(VF a0) {
  const VF hi = VSPLAT(3.92f);
  const VF a = V(mrt_vsel)(hi < a0, hi, a0);
  const VF a2 = a * a;
  const VF q01 = 0.9753860235214233f - a * 0.9984868168830872f;
  const VF q23 = 0.6957904100418091f - a * 0.3290250599384308f;
  const VF q45 = 0.10014636814594269f - a * 0.01757018268108368f;
  const VF q = q01 + a2 * (q23 + a2 * (q45 + a2 * 0.0013426534133031964f));
  return 1.0f - V(mrt_vexp)(-a2) * q;
}

MRT_VINLINE VF V(mrt_verf)(VF x) {
  const VF a = V(mrt_vabs)(x);
  const VF small = x * V(mrt_verf_small)(x * x);
  /* erf(|x|) with x's sign. */
  const VF big = (VF)((VI)V(mrt_verf_big)(a) | ((VI)x & (int32_t)0x80000000));
  return V(mrt_vsel)(a > 1.0f, big, small);
}

/* y[i] = f(x[i]) over n floats (x and y may be the same array): whole vectors,
 * then the last VW floats once more as one vector, loaded before anything is
 * stored so an in-place call sees its inputs; fewer than VW floats go through
 * a padded copy. */
#define VMAP(n, x, y, f)                                                                      \
  do {                                                                                        \
    size_t i_ = 0;                                                                            \
    if ((n) >= VW) {                                                                          \
      const VF last_ = V(mrt_vload)((x) + (n) - VW);                                          \
      for (; i_ + VW <= (n); i_ += VW) V(mrt_vstore)((y) + i_, f(V(mrt_vload)((x) + i_)));    \
      if (i_ < (n)) V(mrt_vstore)((y) + (n) - VW, f(last_));                                  \
    } else if ((n) > 0) {                                                                     \
      V(mrt_vstore_part)((y), f(V(mrt_vload_part)((x), (n))), (n));                           \
    }                                                                                         \
  } while (0)

/* x * Phi(x) = x/2 * erfc(-x / sqrt 2), through erfc so that the negative half
 * keeps its relative accuracy (1 + erf(x / sqrt 2) cancels there). */
MRT_VINLINE VF V(mrt_vgelu)(VF x) {
  const VF w = x * -0.70710678118654752f;
  const VF e = V(mrt_verfc_pos)(V(mrt_vabs)(w));
  return 0.5f * x * V(mrt_vsel)(w < 0.0f, 2.0f - e, e);
}

/* The tanh form x/2 * (1 + tanh(u)) is x * sigmoid(2u), u = sqrt(2/pi) (x +
 * 0.044715 x^3): no cancellation for negative x, no overflow. */
MRT_VINLINE VF V(mrt_vgelu_tanh)(VF x) {
  const VF u2 = 1.5957691216057308f * (x + 0.044715f * x * x * x);
  return x * V(mrt_vsigmoid)(u2);
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

/* y[i] = exp(x[i] - m) (y may be NULL: only the sum is wanted; y may be x);
 * returns sum y[i]. m is the row's max, so x - m <= 0: exp_neg, whose zeros
 * for the denormal results change no sum. The tail is the last VW floats
 * again, its lanes already counted masked out of the sum. */
MRT_VATTR static float V(mrt_vexp_shift_sum)(size_t n, const float *x, float m, float *y) {
  VF acc = VSPLAT(0.0f);
  size_t i = 0;
  if (n >= VW) {
    const VF last = V(mrt_vload)(x + n - VW);
    for (; i + VW <= n; i += VW) {
      const VF e = V(mrt_vexp_neg)(V(mrt_vload)(x + i) - m);
      if (y) V(mrt_vstore)(y + i, e);
      acc += e;
    }
    if (i < n) {
      const VF e = V(mrt_vexp_neg)(last - m);
      if (y) V(mrt_vstore)(y + n - VW, e);
      VI lane;
      for (int k = 0; k < VW; k++) lane[k] = k;
      acc += V(mrt_vsel)(lane >= (int32_t)(VW - (n - i)), e, VSPLAT(0.0f));
    }
    return V(mrt_vhsum)(acc);
  }
  float sum = 0.0f;
  const VF e = V(mrt_vexp_neg)(V(mrt_vload_part)(x, n) - m);
  for (size_t j = 0; j < n; j++) {
    sum += e[j];
    if (y) y[j] = e[j];
  }
  return sum;
}

/* max of n >= 1 floats: two accumulators, the tail as the last VW floats again
 * (max is idempotent). A compare-and-select, one maxps: NaN rows come out NaN
 * from the exp and sum anyway. */
MRT_VATTR static float V(mrt_vmax_arr)(size_t n, const float *x) {
  if (n < VW) {
    float m = x[0];
    for (size_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
  }
  VF m0 = V(mrt_vload)(x), m1 = V(mrt_vload)(x + n - VW), v;
  size_t i = VW;
  for (; i + 2 * VW <= n; i += 2 * VW) {
    v = V(mrt_vload)(x + i), m0 = V(mrt_vsel)(v > m0, v, m0);
    v = V(mrt_vload)(x + i + VW), m1 = V(mrt_vsel)(v > m1, v, m1);
  }
  if (i + VW <= n) v = V(mrt_vload)(x + i), m0 = V(mrt_vsel)(v > m0, v, m0);
  return V(mrt_vhmax)(V(mrt_vsel)(m1 > m0, m1, m0));
}

/* Softmax of one contiguous row of n >= 1 floats: the max, exp(x - max) and its
 * sum, then y scaled by 1 / sum, all in this copy's width (x and y may be the
 * same array). */
MRT_VATTR static void V(mrt_vsoftmax_row)(size_t n, const float *x, float *y) {
  const float m = V(mrt_vmax_arr)(n, x);
  const float r = 1.0f / V(mrt_vexp_shift_sum)(n, x, m, y);
  size_t i = 0;
  for (; i + VW <= n; i += VW) V(mrt_vstore)(y + i, V(mrt_vload)(y + i) * r);
  for (; i < n; i++) y[i] *= r;
}

/* LayerNormalization of one row of d >= 1 floats: mean, then the variance
 * around it (two passes: stable where E[x^2] - E[x]^2 is not), then
 * y = (x - mean) * inv * g (+ b, which may be NULL); mean and 1 / sqrt(var +
 * eps) returned through m_out and inv_out. */
MRT_VATTR static void V(mrt_vlayernorm_row)(size_t d, const float *x, const float *g, const float *b, float eps,
                                            float *y, float *m_out, float *inv_out) {
  VF a0 = VSPLAT(0.0f), a1 = VSPLAT(0.0f);
  size_t i = 0;
  for (; i + 2 * VW <= d; i += 2 * VW) a0 += V(mrt_vload)(x + i), a1 += V(mrt_vload)(x + i + VW);
  if (i + VW <= d) a0 += V(mrt_vload)(x + i), i += VW;
  float s = V(mrt_vhsum)(a0 + a1);
  for (; i < d; i++) s += x[i];
  const float m = s / (float)d;
  a0 = VSPLAT(0.0f), a1 = VSPLAT(0.0f);
  for (i = 0; i + 2 * VW <= d; i += 2 * VW) {
    const VF c0 = V(mrt_vload)(x + i) - m, c1 = V(mrt_vload)(x + i + VW) - m;
    a0 += c0 * c0, a1 += c1 * c1;
  }
  if (i + VW <= d) {
    const VF c = V(mrt_vload)(x + i) - m;
    a0 += c * c, i += VW;
  }
  float v = V(mrt_vhsum)(a0 + a1);
  for (; i < d; i++) v += (x[i] - m) * (x[i] - m);
  const float inv = 1.0f / sqrtf(v / (float)d + eps);
  for (i = 0; i + VW <= d; i += VW) {
    const VF t = (V(mrt_vload)(x + i) - m) * inv * V(mrt_vload)(g + i);
    V(mrt_vstore)(y + i, b ? t + V(mrt_vload)(b + i) : t);
  }
  for (; i < d; i++) y[i] = b ? (x[i] - m) * inv * g[i] + b[i] : (x[i] - m) * inv * g[i];
  *m_out = m;
  *inv_out = inv;
}

#undef VMAP
#undef MRT_VINLINE
#undef V
#undef VF
#undef VI
#undef VW
#undef VSPLAT
