/*
 * Vector transcendental functions for the float32 kernels (Sigmoid, Tanh, Exp,
 * Erf, Gelu, SiLU, Mish, HardSwish, Softmax, LayerNormalization): eight lanes
 * (sixteen with AVX-512) at a time with GCC/Clang vector extensions, so the hot
 * loops do not call libm once per element.
 *
 * Accuracy (measured against double precision over the whole float range the
 * kernels feed in, every copy; tests/test_vmath.py): exp within 2e-7
 * relative, sigmoid 2.7e-7 and SiLU 3e-7 (where sigmoid is a normal float,
 * x > -87.3; below, under 1.2e-38 times |x|), tanh 3.3e-7, Mish 3.8e-7, erf
 * 2.5e-7; erfc (Gelu's) 3e-7 relative, its far tail losing some, as exp(-x*x)
 * sees x*x rounded (1.4e-5 relative at erfc(8) ~ 1e-29; Gelu within 2e-6
 * relative wherever |gelu| >= 1e-6); Gelu's tanh form 7e-6, its argument's
 * cube rounded likewise. exp's polynomial runs in Horner's order (the array
 * loops are throughput-bound), the others in Estrin's order where that
 * shortens the dependency chain.
 *
 * The polynomial coefficients were fitted for this file (weighted least squares
 * on Chebyshev nodes, refined towards minimax, rounded to float and re-checked).
 *
 * The functions live in vmath_impl.h, written once over the vector width and
 * included once per copy: the baseline ISA (8 lanes), on x86_64 AVX2 + FMA (8
 * lanes, names suffixed _avx2) and, where the AVX-512 GEMM is built, AVX-512F
 * (16 lanes, _avx512); prepare picks a copy with MRT_VSELECT, by the same CPU
 * test and MINIRT_MAX_CPU_ISA=sse / =avx2 caps as the GEMM micro-kernels.
 * Kernels call the baseline names (mrt_vf8, MRT_VL) directly in their own
 * loops, or hold a selected array function (mrt_vmap_*, mrt_vexp_shift_sum)
 * in their params for the hot ones.
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
 * copies `name_avx2` (and `name_avx512`); MRT_VSELECT(name) picks one at prepare. */
typedef void (*mrt_vmap_fn)(size_t n, const float *x, float *y);
typedef float (*mrt_vexp_sum_fn)(size_t n, const float *x, float m, float *y);
typedef float (*mrt_vreduce_fn)(size_t n, const float *x);
typedef void (*mrt_vlayernorm_fn)(size_t d, const float *x, const float *g, const float *b, float eps, float *y,
                                  float *m_out, float *inv_out);

#define MRT_VNAME_(name, suffix) name##suffix
#define MRT_VNAME(name, suffix) MRT_VNAME_(name, suffix)

#define MRT_VF mrt_vf8
#define MRT_VI mrt_vi8
#define MRT_VW 8
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
#include <immintrin.h>
/* AVX2's masked moves: the lanes below n (the rest of the load zero, no fault). */
#define MRT_VMASK8(n) _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define MRT_VLOADN(p, n) ((mrt_vf8)_mm256_maskload_ps((p), MRT_VMASK8(n)))
#define MRT_VSTOREN(p, v, n) _mm256_maskstore_ps((p), MRT_VMASK8(n), (__m256)(v))
#define MRT_VATTR __attribute__((target("avx2,fma")))
#define MRT_VSUFFIX _avx2
#include "vmath_impl.h"
#undef MRT_VATTR
#undef MRT_VSUFFIX
#undef MRT_VLOADN
#undef MRT_VSTOREN
#undef MRT_VF
#undef MRT_VI
#undef MRT_VW

/* AVX-512F: sixteen lanes, where the AVX-512 GEMM is built (gemm.h's
 * condition: not Android, not --tune size); vscalefps makes exp's 2^n,
 * denormals and overflow included. */
#if !defined(__ANDROID__) && !MRT_TUNE_SIZE
#define MRT_VMATH_AVX512 1
typedef float mrt_vf16 __attribute__((vector_size(16 * sizeof(float))));
typedef int32_t mrt_vi16 __attribute__((vector_size(16 * sizeof(int32_t))));
#define MRT_VF mrt_vf16
#define MRT_VI mrt_vi16
#define MRT_VW 16
#define MRT_VSCALEF(p, n) ((mrt_vf16)_mm512_scalef_ps((__m512)(p), (__m512)(n)))
#define MRT_VLOADN(p, n) ((mrt_vf16)_mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1), (p)))
#define MRT_VSTOREN(p, v, n) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1), (__m512)(v))
#define MRT_VATTR __attribute__((target("avx512f")))
#define MRT_VSUFFIX _avx512
#include "vmath_impl.h"
#undef MRT_VATTR
#undef MRT_VSUFFIX
#undef MRT_VF
#undef MRT_VI
#undef MRT_VW
#undef MRT_VSCALEF
#undef MRT_VLOADN
#undef MRT_VSTOREN
#else
#define MRT_VMATH_AVX512 0
#endif

/* 2: AVX-512F with OS-saved opmask and zmm state (XCR0 bits 5-7), 1: AVX2 +
 * FMA with ymm state (bits 1-2), 0: the baseline; MINIRT_MAX_CPU_ISA=sse or
 * =avx2 caps it. The tests gemm.c makes for its micro-kernels. */
MRT_PREPARE_CODE
static int mrt_vmath_isa(void) {
  unsigned a, b, c, d, xlo, xhi;
  const char *cap = getenv("MINIRT_MAX_CPU_ISA");
  if (cap && strcmp(cap, "sse") == 0) return 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (!(c & bit_FMA) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return 0;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  (void)xhi;
  if ((xlo & 6u) != 6u || __get_cpuid_max(0, 0) < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  if (!(b & bit_AVX2)) return 0;
  if (!MRT_VMATH_AVX512 || (cap && strcmp(cap, "avx2") == 0)) return 1;
  return (b & bit_AVX512F) && (xlo & 0xe6u) == 0xe6u ? 2 : 1;
}
#if MRT_VMATH_AVX512
#define MRT_VSELECT(name) (mrt_vmath_isa() == 2 ? name##_avx512 : mrt_vmath_isa() ? name##_avx2 : name)
#else
#define MRT_VSELECT(name) (mrt_vmath_isa() ? name##_avx2 : name)
#endif
#else
#define MRT_VSELECT(name) (name)
#endif

#endif /* MRT_VMATH_H */
