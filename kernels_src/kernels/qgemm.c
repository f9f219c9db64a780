/*
 * Integer GEMM (support unit `qgemm`); see qgemm.h.
 *
 * Operands are packed as int16 with their zero points subtracted (a uint8 or
 * int8 value minus an 8-bit zero point lies in [-255, 255]), in pairs along k:
 * a packed A panel of mr rows holds, for each k pair q, the mr pairs
 * (A(r, 2q) - za, A(r, 2q+1) - za); a packed B panel of nr columns holds the nr
 * pairs (B(2q, j) - zb, B(2q+1, j) - zb). A tile then multiplies one broadcast
 * A pair by nr B pairs and sums each pair into an int32 lane: exactly x86's
 * pmaddwd (AVX-VNNI's vpdpwssd adds the accumulate), and smull/smlal on NEON.
 * Every product fits int16 x int16 and a pair sum fits int32, so the result is
 * exact for any uint8/int8 mix and any zero points, per tensor or per channel,
 * with no correction terms. (pmaddubsw would go twice as wide but saturates
 * int16 for uint8 x int8 pairs past 32767, which onnxruntime's AVX2 path
 * tolerates and its reduce_range option works around; exact was chosen.)
 *
 * Where the CPU has VNNI (AVX-VNNI, AVX512-VNNI), vpdpbusd multiplies uint8 by
 * int8 four at a time into int32 with no intermediate rounding, twice the int16
 * pairs' rate. Those kernels pack bytes, in quads along k: A as uint8 (an int8 A
 * flipped by 0x80, its zero point + 128), B as int8 (a uint8 B flipped, zero
 * point - 128), and fold the zero points in afterwards:
 *   sum (a - za)(b - zb) = sum a b - za * colsum(b) + zb * (K za - rowsum(a))
 * with za and K za - rowsum(a) stored after each A panel, colsum(b) and zb after
 * each B panel. int32 wraps in the middle terms cancel: the result is exact.
 * AMX's tdpbusd takes the same B quads in 16 x 16-column tiles and A as 16 rows of
 * 64 k (its own A layout, k padded to 64); ARM's sdot multiplies int8 by int8, so
 * there A is stored as int8 as well (the same identity holds).
 */
#include "qgemm.h"
#include "qcommon.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h> /* the compiler's: _mm256_fmadd_ps / _mm512_fmadd_ps for QLinearAdd */
#endif

typedef int32_t mrt_v4i __attribute__((vector_size(16)));
typedef int16_t mrt_v8h __attribute__((vector_size(16)));
#if defined(__x86_64__)
typedef int32_t mrt_v8i __attribute__((vector_size(32)));
typedef int16_t mrt_v16h __attribute__((vector_size(32)));
typedef int32_t mrt_v16i __attribute__((vector_size(64)));
#endif

/* One tile: C[r][0..nr) (+)= sum over kq k groups of A panel x B panel. */
typedef void (*mrt_qgemm_tile_fn)(size_t kq, const void *MRT_RESTRICT a, const void *MRT_RESTRICT b,
                                  int32_t *MRT_RESTRICT c, size_t ldc, int accumulate);

/* Depthwise taps: acc[j] = sum_t w(t) x[off[t] + j] (see mrt_qgemm_depthwise). */
typedef void (*mrt_qgemm_dw_fn)(size_t n, const uint8_t *MRT_RESTRICT x, int is_signed, const size_t *off,
                                size_t npairs, const int16_t *w, int32_t *MRT_RESTRICT acc);

/* packed layouts: int16 pairs, byte quads (A uint8), byte quads for AMX tiles (A as
 * 64-byte rows per 64 k, k padded to 64), byte quads with A int8 too (ARM's sdot) */
enum { MRT_QGEMM_I16 = 0, MRT_QGEMM_U8S8 = 1, MRT_QGEMM_AMX = 2, MRT_QGEMM_S8S8 = 3 }; /* S8S8: both int8 (sdot) */

struct mrt_qgemm_requant;
/* A full tile requantised straight from the registers into y, ldy bytes a row (rows
 * i.. of C; col: the first column's per-column bias and scale, when per column). */
typedef void (*mrt_qgemm_tileq_fn)(size_t kq, const void *MRT_RESTRICT a, const void *MRT_RESTRICT b,
                                   const struct mrt_qgemm_requant *rq, size_t i, size_t col, uint8_t *y, size_t ldy);

/* Requantisation of rows (see mrt_qgemm_requant_rows). */
typedef void (*mrt_qgemm_rq_fn)(size_t rows, size_t n, const int32_t *MRT_RESTRICT acc, size_t lda,
                                const int32_t *bias, const float *scale, int per_col, int32_t zp, int32_t lo,
                                int32_t hi, uint8_t *MRT_RESTRICT y, size_t ldy);

struct mrt_qgemm_kernel {
  const char *name;
  uint32_t mr, nr;
  uint32_t mc; /* rows of A per block: mc x k of packed A stays in L2 */
  uint32_t kind;
  mrt_qgemm_tile_fn tile;
  mrt_qgemm_dw_fn dw;
  mrt_qgemm_rq_fn rq;
  void (*begin)(void); /* before a thread's tiles, or NULL */
  mrt_qgemm_tileq_fn tile_q; /* a full tile requantised in registers, or NULL */
};

/* pair dot products: lane i of the result = x[2i]*y[2i] + x[2i+1]*y[2i+1] */
#if defined(__x86_64__)
#define MRT_MADD_SSE(acc, x, y) ((acc) + (mrt_v4i)__builtin_ia32_pmaddwd128((mrt_v8h)(x), (mrt_v8h)(y)))
#define MRT_MADD_AVX2(acc, x, y) ((acc) + (mrt_v8i)__builtin_ia32_pmaddwd256((mrt_v16h)(x), (mrt_v16h)(y)))
#define MRT_MADD_VNNI(acc, x, y) \
  ((mrt_v8i)__builtin_ia32_vpdpwssd256((mrt_v8i)(acc), (mrt_v8i)(x), (mrt_v8i)(y)))
typedef int16_t mrt_v32h __attribute__((vector_size(64)));
#define MRT_MADD_AVX512(acc, x, y) \
  ((acc) + (mrt_v16i)__builtin_ia32_pmaddwd512((mrt_v32h)(x), (mrt_v32h)(y)))
#define MRT_DOT_AVXVNNI(acc, x, y) ((mrt_v8i)__builtin_ia32_vpdpbusd256((mrt_v8i)(acc), (mrt_v8i)(x), (mrt_v8i)(y)))
#define MRT_DOT_AVX512VNNI(acc, x, y) \
  ((mrt_v16i)__builtin_ia32_vpdpbusd512((mrt_v16i)(acc), (mrt_v16i)(x), (mrt_v16i)(y)))
#endif
#if !defined(__x86_64__)
/* Portable: even and odd lanes widened and multiplied; clang lowers it to
 * smull/smlal (NEON) or pmaddwd (x86). */
static inline mrt_v4i mrt_madd_generic(mrt_v4i acc, mrt_v4i x, mrt_v4i y) {
  const mrt_v8h xh = (mrt_v8h)x, yh = (mrt_v8h)y;
  const mrt_v4i xe = __builtin_convertvector(__builtin_shufflevector(xh, xh, 0, 2, 4, 6), mrt_v4i);
  const mrt_v4i xo = __builtin_convertvector(__builtin_shufflevector(xh, xh, 1, 3, 5, 7), mrt_v4i);
  const mrt_v4i ye = __builtin_convertvector(__builtin_shufflevector(yh, yh, 0, 2, 4, 6), mrt_v4i);
  const mrt_v4i yo = __builtin_convertvector(__builtin_shufflevector(yh, yh, 1, 3, 5, 7), mrt_v4i);
  return acc + xe * ye + xo * yo;
}
#define MRT_MADD_GENERIC(acc, x, y) mrt_madd_generic(acc, x, y)
#endif

/*
 * MR rows x NV vectors of VL int32 lanes, for both layouts: per k group, row r's
 * A group (an int16 pair or a byte quad) is 4 bytes broadcast to every lane, each
 * lane's B group 4 bytes, and MADD sums the group's products into the lane (pmaddwd,
 * vpdpbusd, sdot, ...). ZP: the byte layouts' zero-point terms from the panels'
 * tails (see the top of the file); the int16 pairs carry theirs already. Loads and
 * stores go through memcpy: C rows need not be aligned, and no int16* is aliased
 * as a vector.
 */
/* The sums of a tile into acc[MR][NV], a and b advanced past the kq groups. */
#define MRT_QGEMM_SUMS(VT, VL, MR, NV, MADD)                                                      \
  VT acc[MR][NV];                                                                               \
  _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r)                               \
    _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) acc[r][v] = (VT){0};        \
  for (size_t q = 0; q < kq; ++q) {                                                             \
    VT bv[NV];                                                                                  \
    _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v)                             \
      __builtin_memcpy(&bv[v], b + 4 * v * VL, sizeof(VT));                                     \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r) {                           \
      int32_t pr;                                                                               \
      __builtin_memcpy(&pr, a + 4 * r, 4);                                                      \
      const VT av = (VT){0} + pr;                                                               \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) acc[r][v] =               \
          MADD(acc[r][v], av, bv[v]);                                                           \
    }                                                                                           \
    a += 4 * MR;                                                                                \
    b += 4 * NV * VL;                                                                           \
  }
#define MRT_QGEMM_TILE(NAME, ATTR, VT, VL, MR, NV, MADD, ZP)                                      \
  ATTR static void NAME(size_t kq, const void *MRT_RESTRICT av_, const void *MRT_RESTRICT bv_,   \
                        int32_t *MRT_RESTRICT c, size_t ldc, int accumulate) {                   \
    const uint8_t *a = av_, *b = bv_;                                                           \
    MRT_QGEMM_SUMS(VT, VL, MR, NV, MADD)                                                        \
    VT colsum[NV], zb[NV];                                                                      \
    if (ZP)                                                                                     \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) {                         \
        __builtin_memcpy(&colsum[v], b + 4 * v * VL, sizeof(VT));                               \
        __builtin_memcpy(&zb[v], b + 4 * NV * VL + 4 * v * VL, sizeof(VT));                     \
      }                                                                                         \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r) {                           \
      int32_t za = 0, ra = 0;                                                                   \
      if (ZP) {                                                                                 \
        __builtin_memcpy(&za, a + 4 * r, 4);                                                    \
        __builtin_memcpy(&ra, a + 4 * MR + 4 * r, 4);                                           \
      }                                                                                         \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) {                         \
        int32_t *p = c + (size_t)r * ldc + v * VL;                                              \
        VT x = acc[r][v];                                                                       \
        if (ZP) x = x - za * colsum[v] + ra * zb[v];                                            \
        if (accumulate) {                                                                       \
          VT old;                                                                               \
          __builtin_memcpy(&old, p, sizeof(VT));                                                \
          x += old;                                                                             \
        }                                                                                       \
        __builtin_memcpy(p, &x, sizeof(VT));                                                    \
      }                                                                                         \
    }                                                                                           \
  }

/*
 * Depthwise: VL outputs at a time; the bytes of two taps widened to int16 and
 * interleaved, so that one pair dot product against the taps' (w0, w1) adds both
 * to each int32 lane. The loops for int8 and uint8 x differ only in the widening.
 */
#define MRT_QDW_ILO8() 0, 8, 1, 9, 2, 10, 3, 11
#define MRT_QDW_IHI8() 4, 12, 5, 13, 6, 14, 7, 15
#define MRT_QDW_ILO16() 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define MRT_QDW_IHI16() 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#define MRT_QDW_ILO32() 0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39, \
    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47
#define MRT_QDW_IHI32() 16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55, \
    24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63
#define MRT_QDW_LOOP(XT, HT, IT, VL, ILO, IHI, MADD)                                             \
  for (size_t j = 0; j < n; j += VL) {                                                          \
    IT lo = {0}, hi = {0};                                                                      \
    for (size_t t = 0; t < npairs; ++t) {                                                       \
      XT b0, b1;                                                                                \
      __builtin_memcpy(&b0, x + off[2 * t] + j, VL);                                            \
      __builtin_memcpy(&b1, x + off[2 * t + 1] + j, VL);                                        \
      const HT x0 = __builtin_convertvector(b0, HT), x1 = __builtin_convertvector(b1, HT);      \
      int32_t wp;                                                                               \
      __builtin_memcpy(&wp, w + 2 * t, 4);                                                      \
      const IT wv = (IT){0} + wp;                                                               \
      lo = MADD(lo, __builtin_shufflevector(x0, x1, ILO()), wv);                                  \
      hi = MADD(hi, __builtin_shufflevector(x0, x1, IHI()), wv);                                  \
    }                                                                                           \
    __builtin_memcpy(acc + j, &lo, sizeof lo);                                                  \
    __builtin_memcpy(acc + j + VL / 2, &hi, sizeof hi);                                         \
  }
#define MRT_QDW(NAME, ATTR, VL, IT, HT, ILO, IHI, MADD)                                           \
  ATTR static void NAME(size_t n, const uint8_t *MRT_RESTRICT x, int is_signed, const size_t *off, \
                        size_t npairs, const int16_t *w, int32_t *MRT_RESTRICT acc) {             \
    typedef int8_t sxt __attribute__((vector_size(VL)));                                        \
    typedef uint8_t uxt __attribute__((vector_size(VL)));                                       \
    if (is_signed) {                                                                            \
      MRT_QDW_LOOP(sxt, HT, IT, VL, ILO, IHI, MADD)                                             \
    } else {                                                                                    \
      MRT_QDW_LOOP(uxt, HT, IT, VL, ILO, IHI, MADD)                                             \
    }                                                                                           \
  }

/*
 * Requantisation, VL lanes at a time, the same operations in the same order as
 * mrt_q_requant (qcommon.h), which does the tail: the results are identical.
 */
#define MRT_QRQ_VEC(VL, J, CLAMP_RINT)                                                                       \
  do {                                                                                          \
    vu a, b;                                                                                    \
    vf s;                                                                                       \
    __builtin_memcpy(&a, ar + (J), sizeof a);                                                   \
    if (per_col) {                                                                              \
      __builtin_memcpy(&b, bias + (J), sizeof b);                                               \
      __builtin_memcpy(&s, scale + (J), sizeof s);                                              \
    } else {                                                                                    \
      b = b1, s = s1;                                                                           \
    }                                                                                           \
    const vf v = __builtin_convertvector((vi)(a + b), vf) * s;                                  \
    const vb o = __builtin_convertvector(CLAMP_RINT(v) + zp, vb);                               \
    __builtin_memcpy(yr + (J), &o, VL);                                                         \
  } while (0)
#define MRT_QRQ_GENERIC(v)                                                                        \
  __builtin_convertvector((__builtin_elementwise_min(__builtin_elementwise_max((v), flo), fhi) + magic) - magic, vi)
/* rows x n, rows lda / ldy apart; bias and scale per column (per_col) or per row.
 * A row's last partial vector is computed again over its last VL values. */
#define MRT_QRQ(NAME, ATTR, VL, CLAMP_RINT)                                                                 \
  ATTR static void NAME(size_t rows, size_t n, const int32_t *MRT_RESTRICT acc, size_t lda,      \
                        const int32_t *bias, const float *scale, int per_col, int32_t zp, int32_t lo, \
                        int32_t hi, uint8_t *MRT_RESTRICT y, size_t ldy) {                        \
    typedef int32_t vi __attribute__((vector_size(4 * VL)));                                    \
    typedef uint32_t vu __attribute__((vector_size(4 * VL)));                                   \
    typedef float vf __attribute__((vector_size(4 * VL)));                                      \
    typedef uint8_t vb __attribute__((vector_size(VL)));                                        \
    const vf flo = (vf){0} + (float)(lo - zp), fhi = (vf){0} + (float)(hi - zp), magic = (vf){0} + 12582912.0f; \
    (void)magic;                                                                                \
    for (size_t r = 0; r < rows; ++r) {                                                         \
      const int32_t *ar = acc + r * lda;                                                        \
      uint8_t *yr = y + r * ldy;                                                                \
      const vu b1 = (vu){0} + (uint32_t)bias[per_col ? 0 : r];                                  \
      const vf s1 = (vf){0} + scale[per_col ? 0 : r];                                           \
      if (n < VL) {                                                                             \
        for (size_t j = 0; j < n; ++j)                                                          \
          yr[j] = (uint8_t)mrt_q_requant((int32_t)((uint32_t)ar[j] + (uint32_t)bias[per_col ? j : r]), \
                                         scale[per_col ? j : r], zp, lo, hi);                   \
        continue;                                                                               \
      }                                                                                         \
      size_t j = 0;                                                                             \
      for (; j + VL <= n; j += VL) MRT_QRQ_VEC(VL, j, CLAMP_RINT);                              \
      if (j < n) MRT_QRQ_VEC(VL, n - VL, CLAMP_RINT);                                           \
    }                                                                                           \
  }

/*
 * QLinearAdd, VL values at a time (see mrt_qgemm_add): onnxruntime's x86 (AVX2)
 * arithmetic, v = fma(a, ka, fma(b, kb, fixed)) on the raw values, fixed = zc -
 * (ka za + kb zb) made at prepare, rounded half to even and saturated. FMA is the
 * instruction where the CPU has it, else the product in double (exact: an 8-bit
 * value times a float) plus the addend, rounded once to float, which is the fused
 * result whenever the sum fits double's 53 bits (the addend within 2^22 of the
 * product's scale: any real model's scales). A tail shorter than VL runs as one
 * vector over copies padded with zeros (y may be a or b).
 */
#if defined(__x86_64__)
#define MRT_QADD_FMA_256(x, k, t) ((vf)_mm256_fmadd_ps((__m256)(x), (__m256)(k), (__m256)(t)))
#define MRT_QADD_FMA_512(x, k, t) ((vf)_mm512_fmadd_ps((__m512)(x), (__m512)(k), (__m512)(t)))
#elif defined(__has_builtin)
#if __has_builtin(__builtin_elementwise_fma)
#define MRT_QADD_FMA_HW(x, k, t) __builtin_elementwise_fma((x), (k), (t))
#endif
#endif
#define MRT_QADD_FMA_DBL(x, k, t)                                                                 \
  __builtin_convertvector(__builtin_convertvector((x), vd) * __builtin_convertvector((k), vd) +   \
                              __builtin_convertvector((t), vd),                                   \
                          vf)
#define MRT_QADD_VEC(XT, FMA, CLAMP_RINT, A, B, Y)                                                \
  do {                                                                                          \
    XT xa, xb;                                                                                  \
    __builtin_memcpy(&xa, (A), VL);                                                             \
    __builtin_memcpy(&xb, (B), VL);                                                             \
    const vf v = FMA(__builtin_convertvector(xa, vf), ka, FMA(__builtin_convertvector(xb, vf), kb, fixed)); \
    const vb o = __builtin_convertvector(CLAMP_RINT(v), vb);                                    \
    __builtin_memcpy((Y), &o, VL);                                                              \
  } while (0)
#define MRT_QADD_LOOP(XT, FMA, CLAMP_RINT)                                                        \
  {                                                                                             \
    size_t i = 0;                                                                               \
    for (; i + VL <= n; i += VL) MRT_QADD_VEC(XT, FMA, CLAMP_RINT, a + i, b + i, y + i);        \
    if (i < n) {                                                                                \
      uint8_t ta[VL] = {0}, tb[VL] = {0}, ty[VL];                                               \
      __builtin_memcpy(ta, a + i, n - i);                                                       \
      __builtin_memcpy(tb, b + i, n - i);                                                       \
      MRT_QADD_VEC(XT, FMA, CLAMP_RINT, ta, tb, ty);                                            \
      __builtin_memcpy(y + i, ty, n - i);                                                       \
    }                                                                                           \
  }
#define MRT_QADD(NAME, ATTR, VL_, FMA, CLAMP_RINT)                                                \
  ATTR static void NAME(size_t n, const uint8_t *a, const uint8_t *b, const mrt_qgemm_add_params *p, \
                        uint8_t *y) {                                                           \
    _Pragma("clang fp contract(off)") enum { VL = VL_ };                                        \
    typedef int32_t vi __attribute__((vector_size(4 * VL)));                                    \
    typedef float vf __attribute__((vector_size(4 * VL)));                                      \
    typedef double vd __attribute__((vector_size(8 * VL)));                                     \
    typedef uint8_t vb __attribute__((vector_size(VL)));                                        \
    typedef int8_t vsb __attribute__((vector_size(VL)));                                        \
    const vf ka = (vf){0} + p->ka, kb = (vf){0} + p->kb, fixed = (vf){0} + p->fixed;            \
    const vf flo = (vf){0} + (float)p->lo, fhi = (vf){0} + (float)p->hi, magic = (vf){0} + 12582912.0f; \
    (void)magic;                                                                                \
    if (p->is_signed)                                                                           \
      MRT_QADD_LOOP(vsb, FMA, CLAMP_RINT)                                                       \
    else                                                                                        \
      MRT_QADD_LOOP(vb, FMA, CLAMP_RINT)                                                        \
  }

#if !defined(__x86_64__)
/* One value at a time, the product in double (armv7 and generic targets have neither
 * FMA nor double vectors; unrolled double lanes cost armv7 4.5 KB). */
static void mrt_qgemm_add1(size_t n, const uint8_t *a, const uint8_t *b, const mrt_qgemm_add_params *p, uint8_t *y) {
#pragma clang fp contract(off)
  const float flo = (float)p->lo, fhi = (float)p->hi;
  for (size_t i = 0; i < n; ++i) {
    const float fa = p->is_signed ? (float)(int8_t)a[i] : (float)a[i];
    const float fb = p->is_signed ? (float)(int8_t)b[i] : (float)b[i];
    const float t = (float)((double)fb * (double)p->kb + (double)p->fixed);
    const float v = (float)((double)fa * (double)p->ka + (double)t);
    y[i] = (uint8_t)(int32_t)mrt_q_rint(mrt_q_clampf(v, flo, fhi));
  }
}
#endif

/* Tile shapes: accumulators + B vectors + one broadcast fit the register file. */
#if defined(__x86_64__)
MRT_QGEMM_TILE(mrt_qgemm_6x8__sse, , mrt_v4i, 4, 6, 2, MRT_MADD_SSE, 0)
MRT_QGEMM_TILE(mrt_qgemm_6x16__avx2, __attribute__((target("avx2"))), mrt_v8i, 8, 6, 2, MRT_MADD_AVX2, 0)
MRT_QGEMM_TILE(mrt_qgemm_6x16__avxvnni, __attribute__((target("avx2,avxvnni"))), mrt_v8i, 8, 6, 2,
               MRT_DOT_AVXVNNI, 1)
MRT_QGEMM_TILE(mrt_qgemm_8x32__avx512vnni, __attribute__((target("avx512f,avx512bw,avx512vnni"))),
               mrt_v16i, 16, 8, 2, MRT_DOT_AVX512VNNI, 1)
/* x86's max / min (the second operand on a tie) and rounding conversion (round to
 * nearest even, the default mode) give mrt_q_requant's values with fewer steps */
#define MRT_QRQ_X86_256(v)                                                                        \
  ((vi)__builtin_ia32_cvtps2dq256(__builtin_ia32_minps256(__builtin_ia32_maxps256((v), flo), fhi)))
#define MRT_QRQ_X86_512(v)                                                                        \
  ((vi)__builtin_ia32_cvtps2dq512_mask(__builtin_ia32_minps512(__builtin_ia32_maxps512((v), flo, 4), fhi, 4), \
                                       (vi){0}, (unsigned short)-1, 4))
#define MRT_QRQ_X86_128(v) \
  ((vi)__builtin_ia32_cvtps2dq(__builtin_ia32_minps(__builtin_ia32_maxps((v), flo), fhi)))
MRT_QRQ(mrt_qgemm_rq8__sse, , 8, MRT_QRQ_GENERIC)
MRT_QADD(mrt_qgemm_add4__sse, , 4, MRT_QADD_FMA_DBL, MRT_QRQ_X86_128)
MRT_QADD(mrt_qgemm_add8__avx2, __attribute__((target("avx2,fma"))), 8, MRT_QADD_FMA_256, MRT_QRQ_X86_256)
MRT_QADD(mrt_qgemm_add16__avx512, __attribute__((target("avx512f,avx512bw"))), 16, MRT_QADD_FMA_512, MRT_QRQ_X86_512)
MRT_QRQ(mrt_qgemm_rq8__avx2, __attribute__((target("avx2"))), 8, MRT_QRQ_X86_256)
MRT_QRQ(mrt_qgemm_rq16__avx512, __attribute__((target("avx512f,avx512bw"))), 16, MRT_QRQ_X86_512)
MRT_QDW(mrt_qgemm_dw8__sse, , 8, mrt_v4i, mrt_v8h, MRT_QDW_ILO8, MRT_QDW_IHI8, MRT_MADD_SSE)
MRT_QDW(mrt_qgemm_dw16__avx2, __attribute__((target("avx2"))), 16, mrt_v8i, mrt_v16h, MRT_QDW_ILO16, MRT_QDW_IHI16,
        MRT_MADD_AVX2)
MRT_QDW(mrt_qgemm_dw32__avx512, __attribute__((target("avx512f,avx512bw"))), 32, mrt_v16i, mrt_v32h, MRT_QDW_ILO32,
        MRT_QDW_IHI32, MRT_MADD_AVX512)
/* A tile's requantisation, read once (y's bytes may alias rq, so the compiler
 * would reload its fields after every store). */
typedef struct mrt_q_rqt {
  const int32_t *bias;
  const float *scale;
  int per_col;
  float flo, fhi;
  int32_t zp;
} mrt_q_rqt;

static inline mrt_q_rqt mrt_q_rqt_of(const struct mrt_qgemm_requant *rq) {
  const mrt_q_rqt q = {rq->bias, rq->scale, rq->per_col, (float)(rq->lo - rq->zp), (float)(rq->hi - rq->zp), rq->zp};
  return q;
}

/* Requantises 16 int32 lanes (the bias added here) into 16 bytes at y. */
__attribute__((target("avx512f,avx512bw"))) static inline void
mrt_q_store16__avx512(mrt_v16i x, const mrt_q_rqt *q, size_t row, size_t col, uint8_t *y) {
  typedef float vf __attribute__((vector_size(64)));
  typedef int32_t vi __attribute__((vector_size(64)));
  typedef uint32_t vu __attribute__((vector_size(64)));
  typedef uint8_t vb __attribute__((vector_size(16)));
  mrt_v16i b;
  vf s;
  if (q->per_col) {
    __builtin_memcpy(&b, q->bias + col, 64);
    __builtin_memcpy(&s, q->scale + col, 64);
  } else {
    b = (mrt_v16i){0} + q->bias[row];
    s = (vf){0} + q->scale[row];
  }
  const vf flo = (vf){0} + q->flo, fhi = (vf){0} + q->fhi;
  const vf v = __builtin_convertvector((vi)((vu)x + (vu)b), vf) * s;
  const vb o = __builtin_convertvector(MRT_QRQ_X86_512(v) + q->zp, vb);
  __builtin_memcpy(y, &o, 16);
}

/* Requantises two vectors of 8 int32 lanes (the bias added here), columns col ..
 * col + 15 of row `row`, into 16 bytes at y. */
__attribute__((target("avx2"))) static inline void mrt_q_store16__avx2(const mrt_v8i x[2], const mrt_q_rqt *q,
                                                                       size_t row, size_t col, uint8_t *y) {
  typedef float vf __attribute__((vector_size(32)));
  typedef int32_t vi __attribute__((vector_size(32)));
  typedef uint32_t vu __attribute__((vector_size(32)));
  typedef uint8_t vb __attribute__((vector_size(16)));
  const vf flo = (vf){0} + q->flo, fhi = (vf){0} + q->fhi;
  vi o[2];
  for (int v = 0; v < 2; ++v) {
    mrt_v8i b;
    vf s;
    if (q->per_col) {
      __builtin_memcpy(&b, q->bias + col + 8 * v, 32);
      __builtin_memcpy(&s, q->scale + col + 8 * v, 32);
    } else {
      b = (mrt_v8i){0} + q->bias[row];
      s = (vf){0} + q->scale[row];
    }
    const vf f = __builtin_convertvector((vi)((vu)x[v] + (vu)b), vf) * s;
    o[v] = MRT_QRQ_X86_256(f) + q->zp;
  }
  const vb bytes = __builtin_convertvector(
      __builtin_shufflevector(o[0], o[1], 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), vb);
  __builtin_memcpy(y, &bytes, 16);
}

/* The AVX2 6 x 16 int16-pair tile, requantised in registers. */
__attribute__((target("avx2"))) static void mrt_qgemm_6x16q__avx2(size_t kq, const void *MRT_RESTRICT av_,
                                                                  const void *MRT_RESTRICT bv_,
                                                                  const struct mrt_qgemm_requant *rq, size_t i,
                                                                  size_t col, uint8_t *y, size_t ldy) {
  const uint8_t *a = av_, *b = bv_;
  MRT_QGEMM_SUMS(mrt_v8i, 8, 6, 2, MRT_MADD_AVX2)
  const mrt_q_rqt q = mrt_q_rqt_of(rq);
  _Pragma("clang loop unroll(full)") for (int r = 0; r < 6; ++r) mrt_q_store16__avx2(acc[r], &q, i + r, col,
                                                                                     y + r * ldy);
}

/*
 * The zero-point terms of a 32-column tile, rows' za and ra from the A tail at, the
 * columns' sums and zero points from the B tail bt: x = acc - za colsum + ra zb.
 * The usual za (int8 weights with zero point 0, stored flipped: 128) and one zb for
 * all columns take a shift and a scalar product instead of two vector multiplies.
 */
typedef struct mrt_q_zp512 {
  mrt_v16i colsum[2], zb[2], c128[2];
  int zb_uniform;
  int32_t zb0;
} mrt_q_zp512;

__attribute__((target("avx512f,avx512bw"))) static inline void mrt_q_zp512_load(mrt_q_zp512 *z, const uint8_t *bt) {
  for (int v = 0; v < 2; ++v) {
    __builtin_memcpy(&z->colsum[v], bt + 64 * v, 64);
    __builtin_memcpy(&z->zb[v], bt + 128 + 64 * v, 64);
    z->c128[v] = z->colsum[v] << 7;
  }
  z->zb0 = z->zb[0][0];
  const mrt_v16i e = (z->zb[0] == z->zb0) & (z->zb[1] == z->zb0);
  z->zb_uniform = 1;
  for (int t = 0; t < 16; ++t) z->zb_uniform &= e[t] != 0;
}

__attribute__((target("avx512f,avx512bw"))) static inline mrt_v16i mrt_q_zp512_apply(const mrt_q_zp512 *z, mrt_v16i acc,
                                                                                     int v, int32_t za, int32_t ra) {
  const mrt_v16i t = za == 128 ? z->c128[v] : za * z->colsum[v];
  const mrt_v16i u = z->zb_uniform ? (mrt_v16i){0} + (int32_t)((uint32_t)ra * (uint32_t)z->zb0) : ra * z->zb[v];
  return acc - t + u;
}

/* The 8 x 32 AVX512-VNNI tile, requantised in registers. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
mrt_qgemm_8x32q__avx512vnni(size_t kq, const void *MRT_RESTRICT av_, const void *MRT_RESTRICT bv_,
                            const struct mrt_qgemm_requant *rq, size_t i, size_t col, uint8_t *y, size_t ldy) {
  const uint8_t *a = av_, *b = bv_;
  MRT_QGEMM_SUMS(mrt_v16i, 16, 8, 2, MRT_DOT_AVX512VNNI)
  mrt_q_zp512 z;
  mrt_q_zp512_load(&z, b);
  const mrt_q_rqt q = mrt_q_rqt_of(rq);
  _Pragma("clang loop unroll(full)") for (int r = 0; r < 8; ++r) {
    int32_t za, ra;
    __builtin_memcpy(&za, a + 4 * r, 4);
    __builtin_memcpy(&ra, a + 32 + 4 * r, 4);
    for (int v = 0; v < 2; ++v)
      mrt_q_store16__avx512(mrt_q_zp512_apply(&z, acc[r][v], v, za, ra), &q, i + r, col + 16 * v,
                            y + r * ldy + 16 * v);
  }
}

/*
 * AMX (tdpbusd): a 32 x 32 tile as four 16 x 16 int32 tile registers, A's 32 rows
 * in two 16-row tiles of 64 k, B's 32 columns in two tiles of 16 quads (B's quad
 * rows are 128 bytes apart: the tile load's stride picks either half). The
 * registers are stored once at the end and the zero-point terms applied there, as
 * the VNNI tile does per lane.
 */
typedef struct __attribute__((packed)) mrt_amx_cfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} mrt_amx_cfg;

/* The four tile registers' int32 sums into t (32 x 32). */
__attribute__((target("amx-tile,amx-int8,avx512f"))) static inline void
mrt_qgemm_amx_sums(size_t kq, const uint8_t *a, const uint8_t *b, int32_t *t) {
  __builtin_ia32_tilezero(0);
  __builtin_ia32_tilezero(1);
  __builtin_ia32_tilezero(2);
  __builtin_ia32_tilezero(3);
  for (size_t kb = 0; kb < kq / 16; ++kb) {
    const uint8_t *ak = a + kb * 32 * 64, *bk = b + kb * 16 * 128;
    __builtin_ia32_tileloadd64(4, ak, 64);
    __builtin_ia32_tileloadd64(5, ak + 16 * 64, 64);
    __builtin_ia32_tileloadd64(6, bk, 128);
    __builtin_ia32_tileloadd64(7, bk + 64, 128);
    __builtin_ia32_tdpbusd(0, 4, 6);
    __builtin_ia32_tdpbusd(1, 4, 7);
    __builtin_ia32_tdpbusd(2, 5, 6);
    __builtin_ia32_tdpbusd(3, 5, 7);
  }
  __builtin_ia32_tilestored64(0, t, 128);
  __builtin_ia32_tilestored64(1, t + 16, 128);
  __builtin_ia32_tilestored64(2, t + 16 * 32, 128);
  __builtin_ia32_tilestored64(3, t + 16 * 32 + 16, 128);
}

__attribute__((target("amx-tile,amx-int8,avx512f"))) static void
mrt_qgemm_32x32__amx(size_t kq, const void *MRT_RESTRICT av_, const void *MRT_RESTRICT bv_, int32_t *MRT_RESTRICT c,
                     size_t ldc, int accumulate) {
  const uint8_t *a = av_, *b = bv_;
  int32_t t[32 * 32];
  mrt_qgemm_amx_sums(kq, a, b, t);
  const uint8_t *at = a + kq * 4 * 32, *bt = b + kq * 4 * 32;
  mrt_v16i colsum[2], zb[2];
  for (int v = 0; v < 2; ++v) {
    __builtin_memcpy(&colsum[v], bt + 64 * v, 64);
    __builtin_memcpy(&zb[v], bt + 128 + 64 * v, 64);
  }
  for (int r = 0; r < 32; ++r) {
    int32_t za, ra;
    __builtin_memcpy(&za, at + 4 * r, 4);
    __builtin_memcpy(&ra, at + 128 + 4 * r, 4);
    for (int v = 0; v < 2; ++v) {
      int32_t *p = c + (size_t)r * ldc + 16 * v;
      mrt_v16i x;
      __builtin_memcpy(&x, t + 32 * r + 16 * v, 64);
      x = x - za * colsum[v] + ra * zb[v];
      if (accumulate) {
        mrt_v16i old;
        __builtin_memcpy(&old, p, 64);
        x += old;
      }
      __builtin_memcpy(p, &x, 64);
    }
  }
}

/* The same, requantised straight into y. */
__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw"))) static void
mrt_qgemm_32x32q__amx(size_t kq, const void *MRT_RESTRICT av_, const void *MRT_RESTRICT bv_,
                      const struct mrt_qgemm_requant *rq, size_t i, size_t col, uint8_t *y, size_t ldy) {
  const uint8_t *a = av_, *b = bv_;
  int32_t t[32 * 32];
  mrt_qgemm_amx_sums(kq, a, b, t);
  const uint8_t *at = a + kq * 4 * 32, *bt = b + kq * 4 * 32;
  mrt_q_zp512 z;
  mrt_q_zp512_load(&z, bt);
  const mrt_q_rqt q = mrt_q_rqt_of(rq);
  for (int r = 0; r < 32; ++r) {
    int32_t za, ra;
    __builtin_memcpy(&za, at + 4 * r, 4);
    __builtin_memcpy(&ra, at + 128 + 4 * r, 4);
    for (int v = 0; v < 2; ++v) {
      mrt_v16i x;
      __builtin_memcpy(&x, t + 32 * r + 16 * v, 64);
      mrt_q_store16__avx512(mrt_q_zp512_apply(&z, x, v, za, ra), &q, i + r, col + 16 * v, y + r * ldy + 16 * v);
    }
  }
}

/* The tile registers' shapes, loaded by each thread before its tiles run. */
__attribute__((target("amx-tile"))) static void mrt_qgemm_begin__amx(void) {
  static const mrt_amx_cfg cfg = {1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};
  __builtin_ia32_tile_loadconfig(&cfg);
}
static const mrt_qgemm_kernel mrt_qgemm_amx = {"amx", 32, 32, 96, MRT_QGEMM_AMX, mrt_qgemm_32x32__amx,
                                               mrt_qgemm_dw32__avx512, mrt_qgemm_rq16__avx512, mrt_qgemm_begin__amx,
                                               mrt_qgemm_32x32q__amx};
static const mrt_qgemm_kernel mrt_qgemm_sse = {"sse", 6, 8, 96, MRT_QGEMM_I16, mrt_qgemm_6x8__sse, mrt_qgemm_dw8__sse,
                                               mrt_qgemm_rq8__sse};
static const mrt_qgemm_kernel mrt_qgemm_avx2 = {"avx2", 6, 16, 96, MRT_QGEMM_I16, mrt_qgemm_6x16__avx2,
                                                mrt_qgemm_dw16__avx2, mrt_qgemm_rq8__avx2, NULL,
                                                mrt_qgemm_6x16q__avx2};
static const mrt_qgemm_kernel mrt_qgemm_avxvnni = {"avxvnni", 6, 16, 96, MRT_QGEMM_U8S8, mrt_qgemm_6x16__avxvnni,
                                                   mrt_qgemm_dw16__avx2, mrt_qgemm_rq8__avx2};
static const mrt_qgemm_kernel mrt_qgemm_avx512vnni = {"avx512vnni", 8, 32, 96, MRT_QGEMM_U8S8,
                                                      mrt_qgemm_8x32__avx512vnni, mrt_qgemm_dw32__avx512,
                                                      mrt_qgemm_rq16__avx512, NULL, mrt_qgemm_8x32q__avx512vnni};
#elif defined(__aarch64__)
MRT_QGEMM_TILE(mrt_qgemm_8x8__neon, , mrt_v4i, 4, 8, 2, MRT_MADD_GENERIC, 0)
MRT_QRQ(mrt_qgemm_rq8, , 8, MRT_QRQ_GENERIC)
#if defined(MRT_QADD_FMA_HW)
MRT_QADD(mrt_qgemm_add8, , 8, MRT_QADD_FMA_HW, MRT_QRQ_GENERIC)
#endif
MRT_QDW(mrt_qgemm_dw8, , 8, mrt_v4i, mrt_v8h, MRT_QDW_ILO8, MRT_QDW_IHI8, MRT_MADD_GENERIC)
static const mrt_qgemm_kernel mrt_qgemm_default = {"neon", 8, 8, 96, MRT_QGEMM_I16, mrt_qgemm_8x8__neon, mrt_qgemm_dw8,
                                                   mrt_qgemm_rq8};
/* ARMv8.2 dotprod: sdot multiplies int8 quads into int32 lanes, as vpdpbusd with both
 * operands signed (the S8S8 layout) */
typedef int8_t mrt_v16c __attribute__((vector_size(16)));
#define MRT_DOT_SDOT(acc, x, y) \
  ((mrt_v4i)__builtin_neon_vdotq_s32((mrt_v16c)(acc), (mrt_v16c)(x), (mrt_v16c)(y), 34))
MRT_QGEMM_TILE(mrt_qgemm_6x16__dotprod, __attribute__((target("dotprod"))), mrt_v4i, 4, 6, 4, MRT_DOT_SDOT, 1)
static const mrt_qgemm_kernel mrt_qgemm_dotprod = {"dotprod", 6, 16, 96, MRT_QGEMM_S8S8, mrt_qgemm_6x16__dotprod,
                                                   mrt_qgemm_dw8, mrt_qgemm_rq8};
#elif defined(__ARM_NEON)
MRT_QGEMM_TILE(mrt_qgemm_4x8__neon, , mrt_v4i, 4, 4, 2, MRT_MADD_GENERIC, 0)
MRT_QRQ(mrt_qgemm_rq8, , 8, MRT_QRQ_GENERIC)
MRT_QDW(mrt_qgemm_dw8, , 8, mrt_v4i, mrt_v8h, MRT_QDW_ILO8, MRT_QDW_IHI8, MRT_MADD_GENERIC)
static const mrt_qgemm_kernel mrt_qgemm_default = {"neon", 4, 8, 64, MRT_QGEMM_I16, mrt_qgemm_4x8__neon, mrt_qgemm_dw8,
                                                   mrt_qgemm_rq8};
#else
MRT_QGEMM_TILE(mrt_qgemm_4x4, , mrt_v4i, 4, 4, 1, MRT_MADD_GENERIC, 0)
MRT_QRQ(mrt_qgemm_rq8, , 8, MRT_QRQ_GENERIC)
MRT_QDW(mrt_qgemm_dw8, , 8, mrt_v4i, mrt_v8h, MRT_QDW_ILO8, MRT_QDW_IHI8, MRT_MADD_GENERIC)
static const mrt_qgemm_kernel mrt_qgemm_default = {"generic", 4, 4, 64, MRT_QGEMM_I16, mrt_qgemm_4x4, mrt_qgemm_dw8,
                                                   mrt_qgemm_rq8};
#endif

#if defined(__x86_64__)
enum { MRT_QISA_SSE = 0, MRT_QISA_AVX2 = 1, MRT_QISA_AVXVNNI = 2, MRT_QISA_AVX512VNNI = 3, MRT_QISA_AMX = 4 };

/* The families this CPU runs, a bit each (1u << MRT_QISA_*): AVX-VNNI and AVX-512
 * VNNI are separate features (AMD Zen 4 has the second only), so a cap does not
 * imply the family under it. cpuid rather than __builtin_cpu_supports (needs
 * runtime state Android builds lack); AVX2 needs OS-saved ymm state (XCR0 bits 1-2). */
MRT_PREPARE_CODE
static unsigned mrt_qgemm_cpu_isas(void) {
  unsigned a, b, c, d, isas = 1u << MRT_QISA_SSE;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return isas;
  if (!(c & bit_AVX) || !(c & bit_OSXSAVE) || !(c & bit_FMA)) return isas; /* FMA: QLinearAdd's AVX2 path */
  unsigned xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  (void)xhi;
  if ((xlo & 6u) != 6u) return isas;
  if (__get_cpuid_max(0, 0) < 7) return isas;
  __cpuid_count(7, 0, a, b, c, d);
  if (!(b & bit_AVX2)) return isas;
  isas |= 1u << MRT_QISA_AVX2;
  /* AVX-512 F + BW + VNNI (CPUID.(7,0):EBX[16], EBX[30], ECX[11]) with opmask and zmm state saved */
  if ((b & (1u << 16)) && (b & (1u << 30)) && (c & (1u << 11)) && (xlo & 0xe6u) == 0xe6u) {
    isas |= 1u << MRT_QISA_AVX512VNNI;
#if defined(__linux__)
    /* AMX-TILE + AMX-INT8 (CPUID.(7,0):EDX[24], [25]), tile state in XCR0 (bits 17-18),
     * and Linux's per-process permission for it: arch_prctl(ARCH_REQ_XCOMP_PERM,
     * XFEATURE_XTILEDATA), syscall 158, made here directly (no libc wrapper needed) */
    if ((d & (3u << 24)) == (3u << 24) && (xlo & (3u << 17)) == (3u << 17)) {
      long ret;
      __asm__ volatile("syscall" : "=a"(ret) : "0"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
      if (ret == 0) isas |= 1u << MRT_QISA_AMX;
    }
#endif
  }
  __cpuid_count(7, 1, a, b, c, d);
  if (a & (1u << 4)) isas |= 1u << MRT_QISA_AVXVNNI; /* CPUID.(7,1):EAX[4] AVX-VNNI */
  return isas;
}
#endif

#if defined(__aarch64__)
#if defined(__APPLE__)
int sysctlbyname(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
#elif defined(__linux__)
unsigned long getauxval(unsigned long type);
#endif
/* sdot (ARMv8.2 FEAT_DotProd): Linux / Android report it in AT_HWCAP (16) as
 * HWCAP_ASIMDDP (bit 20), Apple in a sysctl. */
MRT_PREPARE_CODE
static int mrt_qgemm_has_dotprod(void) {
#if defined(__APPLE__)
  int v = 0;
  size_t len = sizeof v;
  return sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0) == 0 && v;
#elif defined(__linux__)
  return (getauxval(16) & (1ul << 20)) != 0;
#else
  return 0;
#endif
}
#endif

MRT_PREPARE_CODE
const mrt_qgemm_kernel *mrt_qgemm_kernel_select(void) {
#if defined(__x86_64__)
  const char *cap = getenv("MINIRT_MAX_CPU_ISA");
  int isa = MRT_QISA_AMX; /* the best family the CPU has at or below the cap */
  if (cap && strcmp(cap, "sse") == 0) isa = MRT_QISA_SSE;
  if (cap && strcmp(cap, "avx2") == 0) isa = MRT_QISA_AVX2;
  if (cap && strcmp(cap, "avxvnni") == 0) isa = MRT_QISA_AVXVNNI;
  if (cap && strcmp(cap, "avx512vnni") == 0) isa = MRT_QISA_AVX512VNNI;
  const unsigned isas = mrt_qgemm_cpu_isas();
  while (isa > MRT_QISA_SSE && !(isas & (1u << isa))) isa--;
  switch (isa) {
  case MRT_QISA_AMX: return &mrt_qgemm_amx;
  case MRT_QISA_AVX512VNNI: return &mrt_qgemm_avx512vnni;
  case MRT_QISA_AVXVNNI: return &mrt_qgemm_avxvnni;
  case MRT_QISA_AVX2: return &mrt_qgemm_avx2;
  default: return &mrt_qgemm_sse;
  }
#elif defined(__aarch64__)
  const char *cap = getenv("MINIRT_MAX_CPU_ISA");
  if (cap && strcmp(cap, "neon") == 0) return &mrt_qgemm_default;
  return mrt_qgemm_has_dotprod() ? &mrt_qgemm_dotprod : &mrt_qgemm_default;
#else
  return &mrt_qgemm_default;
#endif
}

MRT_PREPARE_CODE
const mrt_qgemm_kernel *mrt_qgemm_kernel_select_mk(size_t m, size_t k) {
  const mrt_qgemm_kernel *kern = mrt_qgemm_kernel_select();
#if defined(__x86_64__)
  /* AMX pads k to 64 and stores each tile to memory for its zero-point terms: on
   * a short k the VNNI registers win. With one tile row or less of A (m <= 32) B is
   * packed for AMX to be used once, and the packing costs as much as the products:
   * 1x1 convolutions 96 -> 24 channels on 56x56 100 -> 59 us, 192 -> 32 on 28x28
   * 33 -> 30 us, one thread; 64 rows already favour AMX (18 against 25 us). */
  if (kern == &mrt_qgemm_amx && (k < 64 || m <= 32)) kern = &mrt_qgemm_avx512vnni;
#endif
  (void)m, (void)k;
  return kern;
}

MRT_PREPARE_CODE
const mrt_qgemm_kernel *mrt_qgemm_kernel_select_k(size_t k) { return mrt_qgemm_kernel_select_mk((size_t)-1, k); }

const char *mrt_qgemm_kernel_name(const mrt_qgemm_kernel *kern) { return kern->name; }

void mrt_qgemm_requant_rows(const mrt_qgemm_kernel *kern, size_t rows, size_t n, const int32_t *MRT_RESTRICT acc,
                            size_t lda, const int32_t *bias, const float *scale, int per_col, int32_t zp, int32_t lo,
                            int32_t hi, void *MRT_RESTRICT y, size_t ldy) {
  kern->rq(rows, n, acc, lda, bias, scale, per_col, zp, lo, hi, y, ldy);
}

/* onnxruntime's fixed part, zc - (ka za + kb zb), as its build computes it (the
 * first product fused with the sum); exact in double, as above. */
MRT_PREPARE_CODE
float mrt_qgemm_add_fixed(float ka, int32_t za, float kb, int32_t zb, int32_t zc) {
#pragma clang fp contract(off)
  const float bz = kb * (float)zb;
  const float az_bz = (float)((double)za * (double)ka + (double)bz);
  return (float)zc - az_bz;
}

void mrt_qgemm_add(const mrt_qgemm_kernel *kern, size_t n, const void *a, const void *b,
                   const mrt_qgemm_add_params *p, void *y) {
#if defined(__x86_64__)
  if (kern->rq == mrt_qgemm_rq16__avx512)
    mrt_qgemm_add16__avx512(n, a, b, p, y);
  else if (kern->rq == mrt_qgemm_rq8__avx2)
    mrt_qgemm_add8__avx2(n, a, b, p, y);
  else
    mrt_qgemm_add4__sse(n, a, b, p, y);
#else
  (void)kern;
#if defined(__aarch64__) && defined(MRT_QADD_FMA_HW)
  mrt_qgemm_add8(n, a, b, p, y);
#else
  mrt_qgemm_add1(n, a, b, p, y);
#endif
#endif
}

#if defined(__x86_64__)
/* 64 outputs a step: four taps' 64 bytes interleaved into byte quads (unpack
 * bytes, then words, within 128-bit lanes), each quad one vpdpbusd with the four
 * weights; accumulator k then holds, in 128-bit lane L, outputs 16 L + 4 k .. + 3,
 * which a 4 x 4 transpose of lanes puts back in order. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
mrt_qgemm_dwq__avx512vnni(size_t n, const uint8_t *x, const size_t *off, size_t nquads, const int8_t *w,
                          int32_t *MRT_RESTRICT acc) {
  for (size_t j = 0; j < n; j += 64) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t q = 0; q < nquads; ++q) {
      const size_t *o = off + 4 * q;
      const __m512i x0 = _mm512_loadu_si512(x + o[0] + j), x1 = _mm512_loadu_si512(x + o[1] + j);
      const __m512i x2 = _mm512_loadu_si512(x + o[2] + j), x3 = _mm512_loadu_si512(x + o[3] + j);
      const __m512i l01 = _mm512_unpacklo_epi8(x0, x1), h01 = _mm512_unpackhi_epi8(x0, x1);
      const __m512i l23 = _mm512_unpacklo_epi8(x2, x3), h23 = _mm512_unpackhi_epi8(x2, x3);
      int32_t wq;
      memcpy(&wq, w + 4 * q, 4);
      const __m512i wv = _mm512_set1_epi32(wq);
      a0 = _mm512_dpbusd_epi32(a0, _mm512_unpacklo_epi16(l01, l23), wv);
      a1 = _mm512_dpbusd_epi32(a1, _mm512_unpackhi_epi16(l01, l23), wv);
      a2 = _mm512_dpbusd_epi32(a2, _mm512_unpacklo_epi16(h01, h23), wv);
      a3 = _mm512_dpbusd_epi32(a3, _mm512_unpackhi_epi16(h01, h23), wv);
    }
    const __m512i t0 = _mm512_shuffle_i64x2(a0, a1, 0x44), t1 = _mm512_shuffle_i64x2(a2, a3, 0x44);
    const __m512i t2 = _mm512_shuffle_i64x2(a0, a1, 0xEE), t3 = _mm512_shuffle_i64x2(a2, a3, 0xEE);
    _mm512_storeu_si512(acc + j, _mm512_shuffle_i64x2(t0, t1, 0x88));
    _mm512_storeu_si512(acc + j + 16, _mm512_shuffle_i64x2(t0, t1, 0xDD));
    _mm512_storeu_si512(acc + j + 32, _mm512_shuffle_i64x2(t2, t3, 0x88));
    _mm512_storeu_si512(acc + j + 48, _mm512_shuffle_i64x2(t2, t3, 0xDD));
  }
}
#endif

int mrt_qgemm_depthwise_quads(const mrt_qgemm_kernel *kern) {
#if defined(__x86_64__)
  return kern->kind == MRT_QGEMM_AMX || kern == &mrt_qgemm_avx512vnni;
#else
  (void)kern;
  return 0;
#endif
}

void mrt_qgemm_depthwise_q8(const mrt_qgemm_kernel *kern, size_t n, const uint8_t *x, const size_t *off,
                            size_t nquads, const int8_t *w, int32_t *MRT_RESTRICT acc) {
  (void)kern;
#if defined(__x86_64__)
  mrt_qgemm_dwq__avx512vnni(n, x, off, nquads, w, acc);
#else
  (void)n, (void)x, (void)off, (void)nquads, (void)w, (void)acc;
#endif
}

void mrt_qgemm_depthwise(const mrt_qgemm_kernel *kern, size_t n, const void *x, int is_signed, const size_t *off,
                         size_t npairs, const int16_t *w, int32_t *MRT_RESTRICT acc) {
#if defined(__x86_64__)
  /* a grid of 16 or fewer: half the vector, half the work */
  if (n <= 16 && kern->dw == mrt_qgemm_dw32__avx512) {
    mrt_qgemm_dw16__avx2(n, x, is_signed, off, npairs, w, acc);
    return;
  }
#endif
  kern->dw(n, x, is_signed, off, npairs, w, acc);
}

static size_t mrt_qround(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* k groups of a panel, and a panel's bytes (byte quads carry two int32 per row / column after them) */
static size_t mrt_qgemm_kq(const mrt_qgemm_kernel *kern, size_t k) {
  return kern->kind == MRT_QGEMM_AMX ? (k + 63) / 64 * 16 : kern->kind == MRT_QGEMM_U8S8 ? (k + 3) / 4 : (k + 1) / 2;
}
static size_t mrt_qgemm_panel_bytes(const mrt_qgemm_kernel *kern, size_t w, size_t k) {
  return mrt_qgemm_kq(kern, k) * w * 4 + (kern->kind != MRT_QGEMM_I16 ? w * 8 : 0);
}

size_t mrt_qgemm_packed_a_size(const mrt_qgemm_kernel *kern, size_t m, size_t k) {
  return (m + kern->mr - 1) / kern->mr * mrt_qgemm_panel_bytes(kern, kern->mr, k);
}
size_t mrt_qgemm_packed_b_size(const mrt_qgemm_kernel *kern, size_t k, size_t n) {
  return (n + kern->nr - 1) / kern->nr * mrt_qgemm_panel_bytes(kern, kern->nr, k);
}

/*
 * Packs x = 0..nx (rows of A / columns of B) by k = 0..nk of element
 * data[x*xs + k*ks] into panels of w, zero points subtracted; rows past nx and
 * the odd k past nk are 0, so full tiles over them add nothing.
 */
static void mrt_qgemm_pack16(size_t nx, size_t nk, size_t w, const mrt_qgemm_src *src, size_t xs, size_t ks,
                             int16_t *MRT_RESTRICT dst) {
  const size_t kq = (nk + 1) / 2;
  const uint8_t *u = src->data;
  const int8_t *s = src->data;
  for (size_t x0 = 0; x0 < nx; x0 += w) {
    int16_t *panel = dst + x0 * kq * 2;
    for (size_t r = 0; r < w; ++r) {
      const size_t x = x0 + r;
      int16_t *o = panel + 2 * r;
      if (x >= nx) {
        for (size_t q = 0; q < kq; ++q) o[q * 2 * w] = o[q * 2 * w + 1] = 0;
        continue;
      }
      const int32_t z = src->zero ? src->zero[src->zero_count == 1 ? 0 : x] : 0;
      const size_t base = x * xs;
      if (src->is_signed) {
        for (size_t kk = 0; kk < nk; ++kk) o[(kk >> 1) * 2 * w + (kk & 1)] = (int16_t)(s[base + kk * ks] - z);
      } else if (ks == 1) {
        for (size_t kk = 0; kk < nk; ++kk) o[(kk >> 1) * 2 * w + (kk & 1)] = (int16_t)(u[base + kk] - z);
      } else {
        for (size_t kk = 0; kk < nk; ++kk) o[(kk >> 1) * 2 * w + (kk & 1)] = (int16_t)(u[base + kk * ks] - z);
      }
      if (nk & 1) o[(nk >> 1) * 2 * w + 1] = 0;
    }
  }
}

/*
 * The byte-quad layout: A (as_a) as uint8, B as int8, flipping by 0x80 the
 * operand of the other signedness; after each panel's kq quads, two int32 per row /
 * column: A's zero point and K za - rowsum, or B's column sum and zero point.
 * amx: A's rows as 64-byte runs of k, the panel's w rows per 64 k in turn (AMX
 * tile rows); B's layout is the same for both.
 */
typedef uint8_t mrt_v16b __attribute__((vector_size(16)));

/* sum of (x[i] ^ c) over n bytes, as unsigned */
static uint32_t mrt_q_bytesum(const uint8_t *x, size_t n, uint8_t c) {
  const mrt_v16b cv = (mrt_v16b){0} + c;
  uint32_t sum = 0;
  size_t i = 0;
#if defined(__x86_64__)
  typedef long long v2q __attribute__((vector_size(16)));
  v2q acc = {0, 0};
  for (; i + 16 <= n; i += 16) {
    mrt_v16b v;
    memcpy(&v, x + i, 16);
    acc += (v2q)__builtin_ia32_psadbw128((mrt_v16b)(v ^ cv), (mrt_v16b){0});
  }
  sum = (uint32_t)(acc[0] + acc[1]);
#else
  typedef uint32_t v16u __attribute__((vector_size(64)));
  v16u acc = {0};
  for (; i + 16 <= n; i += 16) {
    mrt_v16b v;
    memcpy(&v, x + i, 16);
    acc += __builtin_convertvector(v ^ cv, v16u);
  }
  for (int t = 0; t < 16; ++t) sum += acc[t];
#endif
  for (; i < n; ++i) sum += (uint8_t)(x[i] ^ c);
  return sum;
}

static inline size_t mrt_q8_at(int amx, size_t w, size_t r, size_t kk) {
#if !defined(__x86_64__)
  amx = 0; /* only x86_64 has the AMX layout */
#endif
  return amx ? (kk >> 6) * w * 64 + r * 64 + (kk & 63) : (kk >> 2) * 4 * w + r * 4 + (kk & 3);
}

static void mrt_qgemm_pack8(size_t nx, size_t nk, size_t kq, size_t w, const mrt_qgemm_src *src, size_t xs,
                            size_t ks, int as_a, int amx, int a_s8, uint8_t *MRT_RESTRICT dst) {
  const size_t pbytes = kq * w * 4 + w * 8;
  const uint8_t *u = src->data;
  const int to_s8 = !as_a || a_s8; /* the stored values' type */
  const int flip = src->is_signed != to_s8;
  const int32_t zshift = !flip ? 0 : to_s8 ? -128 : 128;
  amx = amx && as_a;
  for (size_t x0 = 0, p = 0; x0 < nx; x0 += w, ++p) {
    uint8_t *panel = dst + p * pbytes;
    int32_t t0[64], t1[64];
    MRT_ASSERT(w <= 64);
    for (size_t r = 0; r < w; ++r) {
      const size_t x = x0 + r;
      if (x >= nx) {
        for (size_t kk = 0; kk < kq * 4; ++kk) panel[mrt_q8_at(amx, w, r, kk)] = 0;
        t0[r] = t1[r] = 0;
        continue;
      }
      const int32_t z = (src->zero ? src->zero[src->zero_count == 1 ? 0 : x] : 0) + zshift;
      const size_t base = x * xs;
      const uint8_t fx = flip ? 0x80 : 0;
      int32_t sum = 0;
      if (ks == 1) { /* a row contiguous along k (A row-major, B transposed) */
        const uint8_t *row = u + base;
        /* int8 v = (uint8)(v ^ 0x80) - 128 */
        sum = to_s8 ? (int32_t)(mrt_q_bytesum(row, nk, fx ^ 0x80) - 128u * (uint32_t)nk)
                    : (int32_t)mrt_q_bytesum(row, nk, fx);
#if defined(__x86_64__)
        if (amx) { /* 64-byte runs */
          for (size_t kb = 0; kb * 64 < kq * 4; ++kb) {
            mrt_v16b run[4];
            const size_t k0 = kb * 64, len = k0 >= nk ? 0 : nk - k0 < 64 ? nk - k0 : 64;
            if (len == 64) {
              memcpy(run, row + k0, 64);
              for (int t = 0; t < 4; ++t) run[t] ^= (mrt_v16b){0} + fx;
            } else {
              uint8_t *rb = (uint8_t *)run;
              for (size_t t = 0; t < 64; ++t) rb[t] = t < len ? (uint8_t)(row[k0 + t] ^ fx) : 0;
            }
            memcpy(panel + kb * w * 64 + r * 64, run, 64);
          }
        } else
#endif
        { /* 4-byte quads, w * 4 bytes apart */
          uint8_t *o = panel + 4 * r;
          size_t kk = 0;
          for (; kk + 4 <= nk; kk += 4) {
            uint32_t qd;
            memcpy(&qd, row + kk, 4);
            qd ^= fx * 0x01010101u;
            memcpy(o + kk * w, &qd, 4);
          }
          for (; kk < kq * 4; ++kk) o[(kk >> 2) * 4 * w + (kk & 3)] = kk < nk ? (uint8_t)(row[kk] ^ fx) : 0;
        }
      } else {
        for (size_t kk = 0; kk < nk; ++kk) {
          const uint8_t v = (uint8_t)(u[base + kk * ks] ^ fx);
          panel[mrt_q8_at(amx, w, r, kk)] = v;
          sum += to_s8 ? (int32_t)(int8_t)v : (int32_t)v;
        }
        for (size_t kk = nk; kk < kq * 4; ++kk) panel[mrt_q8_at(amx, w, r, kk)] = 0;
      }
      /* (uint32_t): K * za - rowsum may wrap; the wraps cancel in the tile */
      t0[r] = as_a ? z : sum;
      t1[r] = as_a ? (int32_t)((uint32_t)nk * (uint32_t)z - (uint32_t)sum) : z;
    }
    memcpy(panel + kq * 4 * w, t0, w * 4);
    memcpy(panel + kq * 4 * w + w * 4, t1, w * 4);
  }
}

/* A's rows [i0, i0 + nx) as the packed panels starting at panel i0 / w. */
static void mrt_qgemm_pack_a_rows(const mrt_qgemm_kernel *kern, size_t i0, size_t nx, size_t k,
                                  const mrt_qgemm_src *src, char *MRT_RESTRICT dst) {
  mrt_qgemm_src s = *src;
  s.data = (const uint8_t *)src->data + i0 * src->rs;
  if (s.zero && s.zero_count > 1) s.zero += i0;
  char *d = dst + i0 / kern->mr * mrt_qgemm_panel_bytes(kern, kern->mr, k);
  if (kern->kind != MRT_QGEMM_I16)
    mrt_qgemm_pack8(nx, k, mrt_qgemm_kq(kern, k), kern->mr, &s, s.rs, s.cs, 1, kern->kind == MRT_QGEMM_AMX,
                    kern->kind == MRT_QGEMM_S8S8, (uint8_t *)d);
  else
    mrt_qgemm_pack16(nx, k, kern->mr, &s, s.rs, s.cs, (int16_t *)d);
}

void mrt_qgemm_pack_a(const mrt_qgemm_kernel *kern, size_t m, size_t k, const mrt_qgemm_src *src,
                      void *MRT_RESTRICT dst) {
  mrt_qgemm_pack_a_rows(kern, 0, m, k, src, dst);
}

typedef int8_t mrt_v16sb __attribute__((vector_size(16)));
typedef uint16_t mrt_v8uh __attribute__((vector_size(16)));
typedef int16_t mrt_v16sh __attribute__((vector_size(32)));
typedef int32_t mrt_v16si __attribute__((vector_size(64)));

/*
 * One B panel (columns j .. j + nw of w) from rows contiguous along j (B row-major,
 * or a convolution's row table): per k group, 16 columns at a time, the rows are
 * loaded whole and interleaved into the layout by byte (quads) or int16 (pairs)
 * shuffles. Columns past nw read a zero-filled copy, never past the rows.
 */
static const uint8_t *mrt_qgemm_row(const mrt_qgemm_src *src, size_t kk, size_t j) {
  const uint8_t *d = src->data;
  return d + (src->row_off ? src->row_off[kk] : kk * src->rs) + j;
}

/* Four rows' 16 bytes as 16 quads (column c's four bytes at o + 4 c). */
static inline void mrt_q_quads16(mrt_v16b v0, mrt_v16b v1, mrt_v16b v2, mrt_v16b v3, uint8_t *o) {
  const mrt_v8uh p01l = (mrt_v8uh)__builtin_shufflevector(v0, v1, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const mrt_v8uh p01h = (mrt_v8uh)__builtin_shufflevector(v0, v1, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const mrt_v8uh p23l = (mrt_v8uh)__builtin_shufflevector(v2, v3, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const mrt_v8uh p23h = (mrt_v8uh)__builtin_shufflevector(v2, v3, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const mrt_v8uh q0 = __builtin_shufflevector(p01l, p23l, 0, 8, 1, 9, 2, 10, 3, 11);
  const mrt_v8uh q1 = __builtin_shufflevector(p01l, p23l, 4, 12, 5, 13, 6, 14, 7, 15);
  const mrt_v8uh q2 = __builtin_shufflevector(p01h, p23h, 0, 8, 1, 9, 2, 10, 3, 11);
  const mrt_v8uh q3 = __builtin_shufflevector(p01h, p23h, 4, 12, 5, 13, 6, 14, 7, 15);
  memcpy(o, &q0, 16), memcpy(o + 16, &q1, 16), memcpy(o + 32, &q2, 16), memcpy(o + 48, &q3, 16);
}

/* B's panel tail: two int32 per column after the kq quads, sums (already there)
 * then zero points, stored shifted to the int8 the panel holds. */
static void mrt_qgemm_pack8_b_zero(size_t kq, size_t w, size_t j, size_t nw, const mrt_qgemm_src *src,
                                   uint8_t *MRT_RESTRICT panel) {
  int32_t t1[64];
  for (size_t c = 0; c < w; ++c) {
    const int32_t z = c < nw && src->zero ? src->zero[src->zero_count == 1 ? 0 : j + c] : 0;
    t1[c] = z - (src->is_signed ? 0 : 128);
  }
  memcpy(panel + kq * 4 * w + w * 4, t1, w * 4);
}

/* The four B rows of quad q at columns j.. (w of them, nw real): in place, or copied
 * into tmp with the missing rows and columns fx (stored as 0). */
static inline void mrt_qgemm_quad_rows(const mrt_qgemm_src *src, size_t q, size_t nk, size_t w, size_t j, size_t nw,
                                       uint8_t fx, uint8_t tmp[4][64], const uint8_t *r[4]) {
  for (int t = 0; t < 4; ++t) {
    const size_t kk = 4 * q + t;
    if (kk >= nk || nw < w) {
      memset(tmp[t], fx, w);
      if (kk < nk) memcpy(tmp[t], mrt_qgemm_row(src, kk, j), nw);
      r[t] = tmp[t];
    } else {
      r[t] = mrt_qgemm_row(src, kk, j);
    }
  }
}

static void mrt_qgemm_pack8_b_panel(size_t nk, size_t kq, size_t w, size_t j, size_t nw, const mrt_qgemm_src *src,
                                    uint8_t *MRT_RESTRICT panel) {
  const uint8_t fx = src->is_signed ? 0 : 0x80; /* stored as int8 */
  const mrt_v16b fv = (mrt_v16b){0} + fx;
  mrt_v16si sum[4] = {{0}, {0}, {0}, {0}};
  uint8_t tmp[4][64];
  MRT_ASSERT(w <= 64 && w % 16 == 0);
  for (size_t q = 0; q < kq; ++q) {
    const uint8_t *r[4];
    mrt_qgemm_quad_rows(src, q, nk, w, j, nw, fx, tmp, r);
    uint8_t *o = panel + q * 4 * w;
    for (size_t c = 0; c < w; c += 16) {
      mrt_v16b v0, v1, v2, v3;
      memcpy(&v0, r[0] + c, 16), memcpy(&v1, r[1] + c, 16), memcpy(&v2, r[2] + c, 16), memcpy(&v3, r[3] + c, 16);
      v0 ^= fv, v1 ^= fv, v2 ^= fv, v3 ^= fv;
      mrt_q_quads16(v0, v1, v2, v3, o + 4 * c);
      const mrt_v16sh s4 = __builtin_convertvector((mrt_v16sb)v0, mrt_v16sh) + __builtin_convertvector((mrt_v16sb)v1, mrt_v16sh) +
                           __builtin_convertvector((mrt_v16sb)v2, mrt_v16sh) + __builtin_convertvector((mrt_v16sb)v3, mrt_v16sh);
      sum[c / 16] += __builtin_convertvector(s4, mrt_v16si);
    }
  }
  memcpy(panel + kq * 4 * w, sum, w * 4);
  mrt_qgemm_pack8_b_zero(kq, w, j, nw, src, panel);
}

#if defined(__x86_64__)
/*
 * The same for a 32-column panel on AVX512-VNNI / AMX hosts: a quad's four rows of
 * 32 bytes interleaved in two byte / word unpack steps (within 128-bit lanes, so
 * the lanes are put back in order after), and the column sums by vpdpbusd of
 * bytes 1 with the packed quads: each int32 lane adds its column's four values.
 */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
mrt_qgemm_pack8_b_panel32__avx512vnni(size_t nk, size_t kq, size_t j, size_t nw, const mrt_qgemm_src *src,
                                      uint8_t *MRT_RESTRICT panel) {
  const uint8_t fx = src->is_signed ? 0 : 0x80;
  const __m512i fv = _mm512_set1_epi8((char)fx), ones = _mm512_set1_epi8(1);
  __m512i sum0 = _mm512_setzero_si512(), sum1 = _mm512_setzero_si512();
  uint8_t tmp[4][64];
  const size_t q_in_place = nw == 32 ? nk / 4 : 0; /* quads whose four rows are all there */
  for (size_t q = 0; q < kq; ++q) {
    const uint8_t *r[4];
    if (q < q_in_place) {
      for (int t = 0; t < 4; ++t) r[t] = mrt_qgemm_row(src, 4 * q + t, j);
    } else {
      mrt_qgemm_quad_rows(src, q, nk, 32, j, nw, fx, tmp, r);
    }
    const __m256i v0 = _mm256_loadu_si256((const __m256i *)r[0]), v1 = _mm256_loadu_si256((const __m256i *)r[1]);
    const __m256i v2 = _mm256_loadu_si256((const __m256i *)r[2]), v3 = _mm256_loadu_si256((const __m256i *)r[3]);
    const __m256i a = _mm256_unpacklo_epi8(v0, v1), b = _mm256_unpackhi_epi8(v0, v1);
    const __m256i c = _mm256_unpacklo_epi8(v2, v3), d = _mm256_unpackhi_epi8(v2, v3);
    /* per 128-bit lane: columns 0-3, 4-7, 8-11, 12-15 of the lane's 16 */
    const __m256i q0 = _mm256_unpacklo_epi16(a, c), q1 = _mm256_unpackhi_epi16(a, c);
    const __m256i q2 = _mm256_unpacklo_epi16(b, d), q3 = _mm256_unpackhi_epi16(b, d);
    const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(q0, q1, 0x20)),
                                          _mm256_permute2x128_si256(q2, q3, 0x20), 1);
    const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(q0, q1, 0x31)),
                                          _mm256_permute2x128_si256(q2, q3, 0x31), 1);
    const __m512i s0 = _mm512_xor_si512(lo, fv), s1 = _mm512_xor_si512(hi, fv);
    _mm512_storeu_si512(panel + q * 128, s0);
    _mm512_storeu_si512(panel + q * 128 + 64, s1);
    sum0 = _mm512_dpbusd_epi32(sum0, ones, s0);
    sum1 = _mm512_dpbusd_epi32(sum1, ones, s1);
  }
  _mm512_storeu_si512(panel + kq * 128, sum0);
  _mm512_storeu_si512(panel + kq * 128 + 64, sum1);
  mrt_qgemm_pack8_b_zero(kq, 32, j, nw, src, panel);
}
#endif

/* The int16 pairs' panel, VL columns a step (the pairs of two rows' VL values
 * interleaved by ILO / IHI): 8 for every target, 16 for AVX2's panels. */
#define MRT_QPACK16_B(NAME, ATTR, VL, ILO, IHI)                                                   \
  ATTR static void NAME(size_t nk, size_t w, size_t j, size_t nw, const mrt_qgemm_src *src,      \
                        int16_t *MRT_RESTRICT panel) {                                          \
    typedef int16_t vh __attribute__((vector_size(2 * VL)));                                    \
    typedef uint8_t vub __attribute__((vector_size(VL)));                                       \
    typedef int8_t vsb __attribute__((vector_size(VL)));                                        \
    const size_t kq = (nk + 1) / 2;                                                             \
    int16_t zv[64];                                                                             \
    uint8_t tmp[2][64];                                                                         \
    MRT_ASSERT(w <= 64 && w % VL == 0);                                                         \
    for (size_t c = 0; c < w; ++c)                                                              \
      zv[c] = (int16_t)(c < nw && src->zero ? src->zero[src->zero_count == 1 ? 0 : j + c] : 0); \
    for (size_t q = 0; q < kq; ++q) {                                                           \
      const uint8_t *r[2];                                                                      \
      int live[2];                                                                              \
      for (int t = 0; t < 2; ++t) {                                                             \
        const size_t kk = 2 * q + t;                                                            \
        live[t] = kk < nk;                                                                      \
        if (kk >= nk || nw < w) {                                                               \
          memset(tmp[t], 0, w);                                                                 \
          if (kk < nk) memcpy(tmp[t], mrt_qgemm_row(src, kk, j), nw);                           \
          r[t] = tmp[t];                                                                        \
        } else {                                                                                \
          r[t] = mrt_qgemm_row(src, kk, j);                                                     \
        }                                                                                       \
      }                                                                                         \
      int16_t *o = panel + q * 2 * w;                                                           \
      for (size_t c = 0; c < w; c += VL) {                                                      \
        vub u0, u1;                                                                             \
        vh z, x0, x1;                                                                           \
        memcpy(&u0, r[0] + c, VL), memcpy(&u1, r[1] + c, VL);                                   \
        memcpy(&z, zv + c, sizeof z);                                                           \
        if (src->is_signed) {                                                                   \
          x0 = __builtin_convertvector((vsb)u0, vh), x1 = __builtin_convertvector((vsb)u1, vh); \
        } else {                                                                                \
          x0 = __builtin_convertvector(u0, vh), x1 = __builtin_convertvector(u1, vh);           \
        }                                                                                       \
        x0 = live[0] ? x0 - z : (vh){0};                                                        \
        x1 = live[1] ? x1 - z : (vh){0};                                                        \
        const vh lo = __builtin_shufflevector(x0, x1, ILO()), hi = __builtin_shufflevector(x0, x1, IHI()); \
        memcpy(o + 2 * c, &lo, sizeof lo), memcpy(o + 2 * c + VL, &hi, sizeof hi);              \
      }                                                                                         \
    }                                                                                           \
  }
MRT_QPACK16_B(mrt_qgemm_pack16_b_panel, , 8, MRT_QDW_ILO8, MRT_QDW_IHI8)
#if defined(__x86_64__)
MRT_QPACK16_B(mrt_qgemm_pack16_b_panel__avx2, __attribute__((target("avx2"))), 16, MRT_QDW_ILO16, MRT_QDW_IHI16)
#endif

/* B's columns [j0, j1) (j0 a multiple of nr) into the packed panels from panel j0 / nr. */
static void mrt_qgemm_pack_b_cols(const mrt_qgemm_kernel *kern, size_t j0, size_t j1, size_t k,
                                  const mrt_qgemm_src *src, char *MRT_RESTRICT dst) {
  const size_t nr = kern->nr, pb = mrt_qgemm_panel_bytes(kern, nr, k);
  if (src->row_off || src->cs == 1) {
    for (size_t j = j0; j < j1; j += nr) {
      const size_t nw = j1 - j < nr ? j1 - j : nr;
      char *d = dst + j / nr * pb;
#if defined(__x86_64__)
      if (mrt_qgemm_depthwise_quads(kern)) /* the CPU multiplies byte quads: AVX512-VNNI, AMX (nr 32) */
        mrt_qgemm_pack8_b_panel32__avx512vnni(k, mrt_qgemm_kq(kern, k), j, nw, src, (uint8_t *)d);
      else if (kern->kind == MRT_QGEMM_I16 && nr == 16)
        mrt_qgemm_pack16_b_panel__avx2(k, nr, j, nw, src, (int16_t *)d);
      else
#endif
      if (kern->kind != MRT_QGEMM_I16)
        mrt_qgemm_pack8_b_panel(k, mrt_qgemm_kq(kern, k), nr, j, nw, src, (uint8_t *)d);
      else
        mrt_qgemm_pack16_b_panel(k, nr, j, nw, src, (int16_t *)d);
    }
    return;
  }
  mrt_qgemm_src s = *src;
  s.data = (const uint8_t *)src->data + j0 * src->cs;
  if (s.zero && s.zero_count > 1) s.zero += j0;
  char *d = dst + j0 / nr * pb;
  if (kern->kind != MRT_QGEMM_I16)
    mrt_qgemm_pack8(j1 - j0, k, mrt_qgemm_kq(kern, k), nr, &s, s.cs, s.rs, 0, 0, 0, (uint8_t *)d);
  else
    mrt_qgemm_pack16(j1 - j0, k, nr, &s, s.cs, s.rs, (int16_t *)d);
}

void mrt_qgemm_pack_b(const mrt_qgemm_kernel *kern, size_t k, size_t n, const mrt_qgemm_src *src,
                      void *MRT_RESTRICT dst) {
  mrt_qgemm_pack_b_cols(kern, 0, n, k, src, dst);
}

size_t mrt_qgemm_scratch_size(const mrt_qgemm_kernel *kern, size_t m, size_t n, size_t k, int a_packed,
                              int b_packed) {
  size_t s = 0;
  if (!a_packed) s += mrt_qround(mrt_qgemm_packed_a_size(kern, m, k), 64);
  if (!b_packed) s += mrt_qround(mrt_qgemm_packed_b_size(kern, k, n), 64);
  return s;
}

/* Requantised rows of one tile: e (mw x nw, row stride lde) is C[i.., j..]. */
static void mrt_qgemm_store_q(const mrt_qgemm_kernel *kern, const mrt_qgemm_requant *rq, size_t i, size_t j,
                              size_t mw, size_t nw, const int32_t *e, size_t lde) {
  const size_t gw = rq->gw, ow = rq->ow;
  for (size_t jj = j; jj < j + nw;) {
    const size_t gy = jj / gw, gx = jj - gy * gw;
    const size_t seg = gw - gx < j + nw - jj ? gw - gx : j + nw - jj;
    if (gx < ow) {
      const size_t len = seg < ow - gx ? seg : ow - gx, col = gy * ow + gx;
      const size_t at = rq->per_col ? col : i;
      kern->rq(mw, len, e + (jj - j), lde, rq->bias + at, rq->scale + at, rq->per_col, rq->zp, rq->lo, rq->hi,
               (uint8_t *)rq->y + i * rq->ldy + col, rq->ldy);
    }
    jj += seg;
  }
}

/* A tile's requantised bytes e (mw x nw, nw a row) at grid columns j.. of rows i..,
 * the columns past each grid row's ow outputs dropped. */
static void mrt_qgemm_scatter_q(const mrt_qgemm_requant *rq, size_t i, size_t j, size_t mw, size_t nw,
                                const uint8_t *e) {
  const size_t gw = rq->gw, ow = rq->ow;
  for (size_t jj = j; jj < j + nw;) {
    const size_t gy = jj / gw, gx = jj - gy * gw;
    const size_t seg = gw - gx < j + nw - jj ? gw - gx : j + nw - jj;
    if (gx < ow) {
      const size_t len = seg < ow - gx ? seg : ow - gx;
      uint8_t *y = (uint8_t *)rq->y + i * rq->ldy + gy * ow + gx;
      for (size_t r = 0; r < mw; ++r) memcpy(y + r * rq->ldy, e + r * nw + (jj - j), len);
    }
    jj += seg;
  }
}

/* Rows [i_lo, i_hi) x columns [j_lo, j_hi) of C from the packed operands. */
static void mrt_qgemm_block(const mrt_qgemm_kernel *kern, size_t m, size_t n, size_t k, const char *pa,
                            const char *pb, const mrt_qgemm_src *b, char *sb, int accumulate,
                            const mrt_qgemm_requant *rq, int32_t *MRT_RESTRICT c, size_t ldc, size_t i_lo,
                            size_t i_hi, size_t j_lo, size_t j_hi) {
  const size_t mr = kern->mr, nr = kern->nr, kq = mrt_qgemm_kq(kern, k);
  const size_t pa_bytes = mrt_qgemm_panel_bytes(kern, mr, k), pb_bytes = mrt_qgemm_panel_bytes(kern, nr, k);
  int32_t edge[32 * 32];
  MRT_ASSERT(mr * nr <= 32 * 32);
  if (kern->begin) kern->begin();
  (void)n;
  /* A block (mc rows) in L2, then each B panel (nr x k) in L1 over it; a B packed
   * here is packed a panel at a time, just before all of A runs over it in L1. */
  const size_t mc = sb ? i_hi - i_lo : kern->mc;
  for (size_t i0 = i_lo; i0 < i_hi; i0 += mc) {
    const size_t i1 = i0 + mc < i_hi ? i0 + mc : i_hi;
    for (size_t j = j_lo; j < j_hi; j += nr) {
      const char *bp = pb + j / nr * pb_bytes;
      const size_t nw = j_hi - j < nr ? j_hi - j : nr;
      if (sb) mrt_qgemm_pack_b_cols(kern, j, j + nw, k, b, sb);
      for (size_t i = i0; i < i1; i += mr) {
        const char *ap = pa + i / mr * pa_bytes;
        const size_t mw = m - i < mr ? m - i : mr;
        if (rq) {
          const size_t gy = j / rq->gw, gx = j - gy * rq->gw;
          if (kern->tile_q && mw == mr && nw == nr) {
            /* consecutive outputs (inside one grid row's kept part, or a grid with
             * none dropped) straight into y; else, with one bias and scale per row,
             * into a row of bytes that is then cut along the grid's rows */
            if (gx + nr <= rq->ow || rq->gw == rq->ow) {
              const size_t col = gy * rq->ow + gx;
              kern->tile_q(kq, ap, bp, rq, i, col, (uint8_t *)rq->y + i * rq->ldy + col, rq->ldy);
              continue;
            }
            if (!rq->per_col) {
              kern->tile_q(kq, ap, bp, rq, i, 0, (uint8_t *)edge, nr);
              mrt_qgemm_scatter_q(rq, i, j, mr, nr, (const uint8_t *)edge);
              continue;
            }
          }
          kern->tile(kq, ap, bp, edge, nr, 0);
          mrt_qgemm_store_q(kern, rq, i, j, mw, nw, edge, nr);
          continue;
        }
        int32_t *cp = c + i * ldc + j;
        if (mw == mr && nw == nr) {
          kern->tile(kq, ap, bp, cp, ldc, accumulate);
          continue;
        }
        kern->tile(kq, ap, bp, edge, nr, 0);
        for (size_t r = 0; r < mw; ++r)
          for (size_t q = 0; q < nw; ++q) cp[r * ldc + q] = (accumulate ? cp[r * ldc + q] : 0) + edge[r * nr + q];
      }
    }
  }
}

typedef struct mrt_qgemm_job {
  const mrt_qgemm_kernel *kern;
  size_t m, n, k, ldc, per_task;
  const mrt_qgemm_src *a, *b;
  const char *pa, *pb;
  char *sa, *sb; /* where the run-time packed operand goes, NULL when packed already */
  const mrt_qgemm_requant *rq;
  int32_t *c;
  int accumulate, split_n;
} mrt_qgemm_job;

static void mrt_qgemm_task(void *varg, size_t task, size_t thread) {
  const mrt_qgemm_job *jb = (const mrt_qgemm_job *)varg;
  (void)thread;
  const size_t unit = jb->split_n ? jb->kern->nr : jb->kern->mr, total = jb->split_n ? jb->n : jb->m;
  const size_t lo = task * jb->per_task * unit;
  if (lo >= total) return;
  const size_t hi = total - lo < jb->per_task * unit ? total : lo + jb->per_task * unit;
  if (jb->split_n) {
    mrt_qgemm_block(jb->kern, jb->m, jb->n, jb->k, jb->pa, jb->pb, jb->b, jb->sb, jb->accumulate, jb->rq, jb->c,
                    jb->ldc, 0, jb->m, lo, hi);
  } else {
    if (jb->sa) mrt_qgemm_pack_a_rows(jb->kern, lo, hi - lo, jb->k, jb->a, jb->sa);
    mrt_qgemm_block(jb->kern, jb->m, jb->n, jb->k, jb->pa, jb->pb, jb->b, NULL, jb->accumulate, jb->rq, jb->c,
                    jb->ldc, lo, hi, 0, jb->n);
  }
}

/* Below this many multiply-adds per task the product stays on the caller's thread. */
#define MRT_QGEMM_TASK_MACS ((size_t)1 << 18)

void mrt_qgemm_mt(mrt_pool *pool, const mrt_qgemm_kernel *kern, size_t m, size_t n, size_t k,
                  const mrt_qgemm_src *a, const mrt_qgemm_src *b, int accumulate, const mrt_qgemm_requant *rq,
                  int32_t *MRT_RESTRICT c, size_t ldc, void *scratch) {
  if (m == 0 || n == 0) return;
  char *s = scratch, *sa = NULL, *sb = NULL;
  if (!a->packed) {
    sa = s;
    s += mrt_qround(mrt_qgemm_packed_a_size(kern, m, k), 64);
  }
  if (!b->packed) sb = s;
  const size_t nu = (n + kern->nr - 1) / kern->nr, mu = (m + kern->mr - 1) / kern->mr;
  /* along n also when B is packed and A has fewer row panels (a fully connected
   * layer's one row): the caller packs A whole, each task streams its share of B */
  const int split_n = a->packed || nu >= mu;
  size_t tasks = mrt_pool_tasks(pool, m * n * k, MRT_QGEMM_TASK_MACS);
  const size_t units = split_n ? nu : mu;
  if (tasks > units) tasks = units;
  /* the operand not split is packed whole first, by the caller */
  if (split_n && sa) mrt_qgemm_pack_a_rows(kern, 0, m, k, a, sa);
  if (!split_n && sb) mrt_qgemm_pack_b_cols(kern, 0, n, k, b, sb);
  mrt_qgemm_job job = {kern, m, n, k, ldc, (units + tasks - 1) / tasks, a, b,
                       sa ? sa : (const char *)a->packed, sb ? sb : (const char *)b->packed,
                       split_n ? NULL : sa, split_n ? sb : NULL, rq, c, accumulate, split_n};
  if (tasks <= 1) {
    job.per_task = units;
    mrt_qgemm_task(&job, 0, 0);
    return;
  }
  mrt_parallel_for(pool, tasks, mrt_qgemm_task, &job);
}

void mrt_qgemm(const mrt_qgemm_kernel *kern, size_t m, size_t n, size_t k, const mrt_qgemm_src *a,
               const mrt_qgemm_src *b, int accumulate, int32_t *MRT_RESTRICT c, size_t ldc, void *scratch) {
  mrt_qgemm_mt(NULL, kern, m, n, k, a, b, accumulate, NULL, c, ldc, scratch);
}

/* --- convolutions read in place from channel-quad planes (qgemm.h) ----------------- */

#if defined(__x86_64__)
#define MRT_QUADS_NR 32

int mrt_qgemm_conv_quads_ok(const mrt_qgemm_kernel *kern) { return kern == &mrt_qgemm_avx512vnni; }

void mrt_qgemm_quads_interleave(const uint8_t *src, size_t stride, size_t rows, size_t n, uint8_t *MRT_RESTRICT dst) {
  const uint8_t zero[16] = {0};
  const uint8_t *r[4];
  for (size_t t = 0; t < 4; ++t) r[t] = t < rows ? src + t * stride : NULL;
  size_t e = 0;
  for (; e + 16 <= n; e += 16) {
    mrt_v16b v[4];
    for (size_t t = 0; t < 4; ++t) memcpy(&v[t], r[t] ? r[t] + e : zero, 16);
    mrt_q_quads16(v[0], v[1], v[2], v[3], dst + 4 * e);
  }
  for (; e < n; ++e)
    for (size_t t = 0; t < 4; ++t) dst[4 * e + t] = r[t] ? r[t][e] : 0;
}

size_t mrt_qgemm_quads_b_size(size_t m, size_t nq) {
  return (m + MRT_QUADS_NR - 1) / MRT_QUADS_NR * nq * MRT_QUADS_NR * 4;
}

/* Panels of 32 output channels: quad q = (cq, tap) of channel o at panel + q * 128 +
 * 4 o, its bytes w[o][4 cq + t][tap]; channels past m and inputs past cin are 0. */
void mrt_qgemm_quads_pack_b(size_t m, size_t cin, size_t taps, const int8_t *w, int8_t *MRT_RESTRICT dst) {
  const size_t nq = (cin + 3) / 4 * taps;
  for (size_t o0 = 0; o0 < m; o0 += MRT_QUADS_NR) {
    int8_t *panel = dst + o0 * nq * 4;
    for (size_t q = 0; q < nq; ++q)
      for (size_t o = 0; o < MRT_QUADS_NR; ++o)
        for (size_t t = 0; t < 4; ++t) {
          const size_t c = q / taps * 4 + t;
          panel[q * 128 + 4 * o + t] = o0 + o < m && c < cin ? w[((o0 + o) * cin + c) * taps + q % taps] : 0;
        }
  }
}

/* R pixels x 32 channels: each pixel's quad broadcast from the planes (uint8, at
 * planes + qoff[q] + pix[r]), the channels' weights two vectors a quad; requantised
 * per channel into t (R rows of 32 bytes). 8 rows, or 7 (see mrt_qgemm_conv_quads_t). */
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) static inline void
mrt_qgemm_quadst_rows(const int R, size_t nq, const int8_t *MRT_RESTRICT b, const uint8_t *planes, const size_t *qoff,
                      const size_t *pix, const mrt_q_rqt *q, size_t c0, uint8_t *t) {
  __m512i acc[8][2];
  const uint8_t *px[8];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512(), px[r] = planes + pix[r];
  for (size_t k = 0; k < nq; ++k, b += 128) {
    const size_t o = qoff[k];
    const __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
    _Pragma("clang loop unroll(full)") for (int r = 0; r < R; ++r) {
      int32_t x;
      memcpy(&x, px[r] + o, 4);
      const __m512i xv = _mm512_set1_epi32(x);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], xv, b0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], xv, b1);
    }
  }
  /* one requantisation loop, not R x 2 inlined copies (the tile's time is in the k loop) */
  _Pragma("clang loop unroll(disable)") for (int rv = 0; rv < 2 * R; ++rv)
    mrt_q_store16__avx512((mrt_v16i)acc[rv / 2][rv % 2], q, 0, c0 + 16 * (rv % 2), t + rv * 16);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
mrt_qgemm_quadst_tile(int rows, size_t nq, const int8_t *MRT_RESTRICT b, const uint8_t *planes, const size_t *qoff,
                      const size_t *pix, const mrt_q_rqt *q, size_t c0, uint8_t *t) {
  if (rows == 8)
    mrt_qgemm_quadst_rows(8, nq, b, planes, qoff, pix, q, c0, t);
  else
    mrt_qgemm_quadst_rows(7, nq, b, planes, qoff, pix, q, c0, t);
}

/* t's 8 x 32 bytes transposed: channel c's 8 pixels to y + c * ldy, 16 channels a
 * step as three rounds of byte / word / dword unpacks. */
__attribute__((target("avx2"))) static void mrt_qgemm_quadst_store(const uint8_t *t, uint8_t *y, size_t ldy) {
  for (int h = 0; h < 2; ++h) {
    __m128i r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128((const __m128i *)(t + i * 32 + 16 * h));
    __m128i a[8], e[8];
    for (int i = 0; i < 4; ++i) {
      a[2 * i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
      a[2 * i + 1] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
    }
    /* e[0..3]: rows 0-3 of channels 0-3, 4-7, 8-11, 12-15; e[4..7] rows 4-7 */
    for (int g = 0; g < 2; ++g) {
      const __m128i *lo = a + 4 * g;
      e[4 * g + 0] = _mm_unpacklo_epi16(lo[0], lo[2]);
      e[4 * g + 1] = _mm_unpackhi_epi16(lo[0], lo[2]);
      e[4 * g + 2] = _mm_unpacklo_epi16(lo[1], lo[3]);
      e[4 * g + 3] = _mm_unpackhi_epi16(lo[1], lo[3]);
    }
    for (int i = 0; i < 4; ++i) {
      const __m128i g0 = _mm_unpacklo_epi32(e[i], e[4 + i]), g1 = _mm_unpackhi_epi32(e[i], e[4 + i]);
      uint8_t *yc = y + (size_t)(16 * h + 4 * i) * ldy;
      _mm_storel_epi64((__m128i *)yc, g0);
      _mm_storel_epi64((__m128i *)(yc + ldy), _mm_unpackhi_epi64(g0, g0));
      _mm_storel_epi64((__m128i *)(yc + 2 * ldy), g1);
      _mm_storel_epi64((__m128i *)(yc + 3 * ldy), _mm_unpackhi_epi64(g1, g1));
    }
  }
}

typedef struct mrt_quadst_job {
  size_t m, npix, ow, gw, nq, rows, per_task;
  int by_panel; /* tasks split the channel panels (all pixel tiles each), else the pixel tiles */
  const int8_t *pb;
  const uint8_t *planes;
  const size_t *qoff;
  const mrt_qgemm_requant *rq;
} mrt_quadst_job;

/* Pixel tiles [p_lo, p_hi) of `rows` x channel panels [o_lo, o_hi) of 32, the
 * panels outer: a panel's weights (32 x K bytes) stay in L2 across the pixel
 * tiles, where all of B (512 x 4608 bytes in ResNet's last stage) would stream
 * from L3 once a tile (7 x 7 planes, 512 channels: 0.65 -> 0.56 ms a layer). */
static void mrt_quadst_block(const mrt_quadst_job *jb, size_t p_lo, size_t p_hi, size_t o_lo, size_t o_hi) {
  const mrt_q_rqt q = mrt_q_rqt_of(jb->rq);
  uint8_t *y = (uint8_t *)jb->rq->y;
  const size_t ldy = jb->rq->ldy, rows = jb->rows;
  uint8_t t[8 * 32];
  for (size_t c0 = o_lo; c0 < o_hi; c0 += MRT_QUADS_NR) {
    size_t py = p_lo / jb->ow, px = p_lo % jb->ow; /* the tile's first pixel */
    for (size_t p0 = p_lo; p0 < p_hi; p0 += rows) {
      const size_t pw = jb->npix - p0 < rows ? jb->npix - p0 : rows;
      size_t pix[8];
      for (size_t r = 0; r < rows; ++r) {
        pix[r] = r < pw ? 4 * (py * jb->gw + px) : pix[0]; /* a missing pixel reads the first one's */
        if (r < pw && ++px == jb->ow) px = 0, ++py;
      }
      mrt_qgemm_quadst_tile((int)rows, jb->nq, jb->pb + c0 * jb->nq * 4, jb->planes, jb->qoff, pix, &q, c0, t);
      if (pw == 8 && c0 + MRT_QUADS_NR <= jb->m) {
        mrt_qgemm_quadst_store(t, y + c0 * ldy + p0, ldy);
        continue;
      }
      for (size_t c = c0; c < jb->m && c < c0 + MRT_QUADS_NR; ++c)
        for (size_t r = 0; r < pw; ++r) y[c * ldy + p0 + r] = t[r * 32 + (c - c0)];
    }
  }
}

static void mrt_quadst_task(void *varg, size_t task, size_t thread) {
  const mrt_quadst_job *jb = (const mrt_quadst_job *)varg;
  (void)thread;
  const size_t unit = jb->by_panel ? MRT_QUADS_NR : jb->rows, total = jb->by_panel ? jb->m : jb->npix;
  const size_t lo = task * jb->per_task * unit;
  if (lo >= total) return;
  const size_t hi = total - lo < jb->per_task * unit ? total : lo + jb->per_task * unit;
  if (jb->by_panel)
    mrt_quadst_block(jb, 0, jb->npix, lo, hi);
  else
    mrt_quadst_block(jb, lo, hi, 0, jb->m);
}

void mrt_qgemm_conv_quads_t(mrt_pool *pool, size_t m, size_t oh, size_t ow, size_t gw, size_t nq, const int8_t *pb,
                            const uint8_t *planes, const size_t *qoff, const mrt_qgemm_requant *rq) {
  /* 7-row tiles where 8-row ones would compute over 1/16 more (49 pixels: 56) */
  const size_t npix = oh * ow, rows = ((npix + 7) / 8 * 8 - npix) * 16 > npix && npix % 7 == 0 ? 7 : 8;
  const size_t tiles = (npix + rows - 1) / rows, panels = (m + MRT_QUADS_NR - 1) / MRT_QUADS_NR;
  size_t tasks = mrt_pool_tasks(pool, m * npix * nq * 4, MRT_QGEMM_TASK_MACS);
  /* few pixel tiles (7 x 7 planes: 7 of them) would leave threads uneven: split the
   * channels instead, each thread then streaming its share of the weights */
  const int by_panel = tiles < 4 * tasks && panels > tiles;
  const size_t units = by_panel ? panels : tiles;
  if (tasks > units) tasks = units;
  mrt_quadst_job job = {m, npix, ow, gw, nq, rows, (units + tasks - 1) / tasks, by_panel, pb, planes, qoff, rq};
  mrt_parallel_for(pool, (units + job.per_task - 1) / job.per_task, mrt_quadst_task, &job);
}
#endif
