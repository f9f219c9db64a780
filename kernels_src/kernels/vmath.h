/*
 * Vector transcendental functions for the float32 kernels (Sigmoid, Tanh, Exp,
 * Erf, Gelu, SiLU, Mish, HardSwish, Softmax, LayerNormalization): eight lanes at
 * a time with GCC/Clang vector extensions, so the hot loops do not call libm
 * once per element.
 *
 * Accuracy (measured against double precision over the whole float range the
 * kernels feed in): exp within 2e-7 relative, sigmoid / SiLU 2.7e-7, tanh
 * 3.3e-7, Mish 3.8e-7, erf 2.5e-7; erfc (Gelu's) 3e-7 relative, its far tail
 * losing some, as exp(-x*x) sees x*x rounded (1.4e-5 relative at erfc(8) ~
 * 1e-29; Gelu within 2e-6 relative wherever |gelu| >= 1e-6). Polynomials are
 * evaluated in Estrin's order where that shortens the dependency chain.
 *
 * The polynomial coefficients were fitted for this file (weighted least squares
 * on Chebyshev nodes, refined towards minimax, rounded to float and re-checked).
 *
 * The functions live in vmath_impl.h, which is included once for the baseline
 * ISA and, on x86_64, once more compiled for AVX2 + FMA (names suffixed
 * _avx2); prepare picks a copy with MRT_VSELECT, by the same CPU test and
 * MINIRT_MAX_CPU_ISA=sse cap as the GEMM micro-kernels. Kernels call the
 * baseline names directly in their own loops, or hold a selected array
 * function (mrt_vmap_*, mrt_vexp_shift_sum) in their params for the hot ones.
 *
 * Header-only and static, like kcommon.h: each (op, type) object is compiled
 * on its own.
 */
#ifndef MRT_VMATH_H
#define MRT_VMATH_H

#include "mrt_kernel.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#define MRT_VL 8
typedef float mrt_vf8 __attribute__((vector_size(MRT_VL * sizeof(float))));
typedef int32_t mrt_vi8 __attribute__((vector_size(MRT_VL * sizeof(int32_t))));

#define MRT_VSPLAT(c) ((mrt_vf8){0} + (c))

/* Array functions (vmath_impl.h), each in a baseline copy `name` and, on x86_64,
 * an AVX2 + FMA copy `name_avx2`; MRT_VSELECT(name) picks one at prepare. */
typedef void (*mrt_vmap_fn)(size_t n, const float *x, float *y);
typedef float (*mrt_vexp_sum_fn)(size_t n, const float *x, float m, float *y);

#define MRT_VNAME_(name, suffix) name##suffix
#define MRT_VNAME(name, suffix) MRT_VNAME_(name, suffix)

#define MRT_VATTR
#define MRT_VSUFFIX
#include "vmath_impl.h"
#undef MRT_VATTR
#undef MRT_VSUFFIX

/* y[i] = f(x[i]) for a baseline vector function f: whole vectors, then one
 * padded vector for the tail (x and y may be the same array). */
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

#if defined(__x86_64__)
#define MRT_VATTR __attribute__((target("avx2,fma")))
#define MRT_VSUFFIX _avx2
#include "vmath_impl.h"
#undef MRT_VATTR
#undef MRT_VSUFFIX

/* AVX2 + FMA with OS-saved ymm state (XCR0 bits 1-2), unless capped by
 * MINIRT_MAX_CPU_ISA=sse: the test gemm.c makes for its micro-kernels. */
MRT_PREPARE_CODE
static int mrt_vmath_avx2(void) {
  unsigned a, b, c, d, xlo, xhi;
  const char *cap = getenv("MINIRT_MAX_CPU_ISA");
  if (cap && strcmp(cap, "sse") == 0) return 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (!(c & bit_FMA) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return 0;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  (void)xhi;
  if ((xlo & 6u) != 6u || __get_cpuid_max(0, 0) < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  return (b & bit_AVX2) != 0;
}
#define MRT_VSELECT(name) (mrt_vmath_avx2() ? name##_avx2 : name)
#else
#define MRT_VSELECT(name) (name)
#endif

#endif /* MRT_VMATH_H */
