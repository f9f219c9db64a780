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
 */
#include "qgemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

typedef int32_t mrt_v4i __attribute__((vector_size(16)));
typedef int16_t mrt_v8h __attribute__((vector_size(16)));
#if defined(__x86_64__)
typedef int32_t mrt_v8i __attribute__((vector_size(32)));
typedef int16_t mrt_v16h __attribute__((vector_size(32)));
typedef long long mrt_v4q __attribute__((vector_size(32)));
typedef long long mrt_v2q __attribute__((vector_size(16)));
#endif

/* One tile: C[r][0..nr) (+)= sum over kq k pairs of A pair r . B pairs. */
typedef void (*mrt_qgemm_tile_fn)(size_t kq, const int16_t *MRT_RESTRICT a, const int16_t *MRT_RESTRICT b,
                                  int32_t *MRT_RESTRICT c, size_t ldc, int accumulate);

struct mrt_qgemm_kernel {
  const char *name;
  uint32_t mr, nr;
  uint32_t mc; /* rows of A per block: mc x k int16 of packed A stays in L2 */
  mrt_qgemm_tile_fn tile;
};

/* pair dot products: lane i of the result = x[2i]*y[2i] + x[2i+1]*y[2i+1] */
#if defined(__x86_64__)
#define MRT_MADD_SSE(acc, x, y) ((acc) + (mrt_v4i)__builtin_ia32_pmaddwd128((mrt_v8h)(x), (mrt_v8h)(y)))
#define MRT_MADD_AVX2(acc, x, y) ((acc) + (mrt_v8i)__builtin_ia32_pmaddwd256((mrt_v16h)(x), (mrt_v16h)(y)))
#define MRT_MADD_VNNI(acc, x, y) \
  ((mrt_v8i)__builtin_ia32_vpdpwssd256((mrt_v8i)(acc), (mrt_v8i)(x), (mrt_v8i)(y)))
#endif
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

/*
 * MR rows x NV vectors of VL int32 lanes. The A pair of row r is one int32
 * (two int16) broadcast to every lane. Loads and stores go through memcpy:
 * C rows need not be aligned, and this avoids aliasing int16* as a vector.
 */
#define MRT_QGEMM_TILE(NAME, ATTR, VT, VL, MR, NV, MADD)                                          \
  ATTR static void NAME(size_t kq, const int16_t *MRT_RESTRICT a, const int16_t *MRT_RESTRICT b, \
                        int32_t *MRT_RESTRICT c, size_t ldc, int accumulate) {                   \
    VT acc[MR][NV];                                                                             \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r)                             \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) acc[r][v] = (VT){0};      \
    for (size_t q = 0; q < kq; ++q) {                                                           \
      VT bv[NV];                                                                                \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v)                           \
        __builtin_memcpy(&bv[v], b + 2 * v * VL, sizeof(VT));                                   \
      _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r) {                         \
        int32_t pr;                                                                             \
        __builtin_memcpy(&pr, a + 2 * r, 4);                                                    \
        const VT av = (VT){0} + pr;                                                             \
        _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) acc[r][v] =             \
            MADD(acc[r][v], av, bv[v]);                                                         \
      }                                                                                         \
      a += 2 * MR;                                                                              \
      b += 2 * NV * VL;                                                                         \
    }                                                                                           \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r) {                           \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) {                         \
        int32_t *p = c + (size_t)r * ldc + v * VL;                                              \
        VT x = acc[r][v];                                                                       \
        if (accumulate) {                                                                       \
          VT old;                                                                               \
          __builtin_memcpy(&old, p, sizeof(VT));                                                \
          x += old;                                                                             \
        }                                                                                       \
        __builtin_memcpy(p, &x, sizeof(VT));                                                    \
      }                                                                                         \
    }                                                                                           \
  }

/* Tile shapes: accumulators + B vectors + one broadcast fit the register file. */
#if defined(__x86_64__)
MRT_QGEMM_TILE(mrt_qgemm_6x8__sse, , mrt_v4i, 4, 6, 2, MRT_MADD_SSE)
MRT_QGEMM_TILE(mrt_qgemm_6x16__avx2, __attribute__((target("avx2"))), mrt_v8i, 8, 6, 2, MRT_MADD_AVX2)
MRT_QGEMM_TILE(mrt_qgemm_6x16__avxvnni, __attribute__((target("avx2,avxvnni"))), mrt_v8i, 8, 6, 2,
               MRT_MADD_VNNI)
static const mrt_qgemm_kernel mrt_qgemm_sse = {"sse", 6, 8, 96, mrt_qgemm_6x8__sse};
static const mrt_qgemm_kernel mrt_qgemm_avx2 = {"avx2", 6, 16, 96, mrt_qgemm_6x16__avx2};
static const mrt_qgemm_kernel mrt_qgemm_avxvnni = {"avxvnni", 6, 16, 96, mrt_qgemm_6x16__avxvnni};
#elif defined(__aarch64__)
MRT_QGEMM_TILE(mrt_qgemm_8x8__neon, , mrt_v4i, 4, 8, 2, MRT_MADD_GENERIC)
static const mrt_qgemm_kernel mrt_qgemm_default = {"neon", 8, 8, 96, mrt_qgemm_8x8__neon};
#elif defined(__ARM_NEON)
MRT_QGEMM_TILE(mrt_qgemm_4x8__neon, , mrt_v4i, 4, 4, 2, MRT_MADD_GENERIC)
static const mrt_qgemm_kernel mrt_qgemm_default = {"neon", 4, 8, 64, mrt_qgemm_4x8__neon};
#else
MRT_QGEMM_TILE(mrt_qgemm_4x4, , mrt_v4i, 4, 4, 1, MRT_MADD_GENERIC)
static const mrt_qgemm_kernel mrt_qgemm_default = {"generic", 4, 4, 64, mrt_qgemm_4x4};
#endif

#if defined(__x86_64__)
enum { MRT_QISA_SSE = 0, MRT_QISA_AVX2 = 1, MRT_QISA_AVXVNNI = 2 };

/* cpuid rather than __builtin_cpu_supports (needs runtime state Android builds
 * lack); AVX2 needs OS-saved ymm state (XCR0 bits 1-2). */
MRT_PREPARE_CODE
static int mrt_qgemm_cpu_isa(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return MRT_QISA_SSE;
  if (!(c & bit_AVX) || !(c & bit_OSXSAVE)) return MRT_QISA_SSE;
  unsigned xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  (void)xhi;
  if ((xlo & 6u) != 6u) return MRT_QISA_SSE;
  if (__get_cpuid_max(0, 0) < 7) return MRT_QISA_SSE;
  __cpuid_count(7, 0, a, b, c, d);
  if (!(b & bit_AVX2)) return MRT_QISA_SSE;
  __cpuid_count(7, 1, a, b, c, d);
  return (a & (1u << 4)) ? MRT_QISA_AVXVNNI : MRT_QISA_AVX2; /* CPUID.(7,1):EAX[4] AVX-VNNI */
}
#endif

MRT_PREPARE_CODE
const mrt_qgemm_kernel *mrt_qgemm_kernel_select(void) {
#if defined(__x86_64__)
  int isa = mrt_qgemm_cpu_isa();
  const char *cap = getenv("MINIRT_MAX_CPU_ISA");
  if (cap && strcmp(cap, "sse") == 0) isa = MRT_QISA_SSE;
  if (cap && strcmp(cap, "avx2") == 0 && isa > MRT_QISA_AVX2) isa = MRT_QISA_AVX2;
  return isa == MRT_QISA_AVXVNNI ? &mrt_qgemm_avxvnni : isa == MRT_QISA_AVX2 ? &mrt_qgemm_avx2 : &mrt_qgemm_sse;
#else
  return &mrt_qgemm_default;
#endif
}

const char *mrt_qgemm_kernel_name(const mrt_qgemm_kernel *kern) { return kern->name; }

static size_t mrt_qround(size_t x, size_t m) { return (x + m - 1) / m * m; }

size_t mrt_qgemm_packed_a_size(const mrt_qgemm_kernel *kern, size_t m, size_t k) {
  return mrt_qround(m, kern->mr) * mrt_qround(k, 2) * sizeof(int16_t);
}
size_t mrt_qgemm_packed_b_size(const mrt_qgemm_kernel *kern, size_t k, size_t n) {
  return mrt_qround(n, kern->nr) * mrt_qround(k, 2) * sizeof(int16_t);
}

/*
 * Packs x = 0..nx (rows of A / columns of B) by k = 0..nk of element
 * data[x*xs + k*ks] into panels of w, zero points subtracted; rows past nx and
 * the odd k past nk are 0, so full tiles over them add nothing.
 */
static void mrt_qgemm_pack(size_t nx, size_t nk, size_t w, const mrt_qgemm_src *src, size_t xs, size_t ks,
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

void mrt_qgemm_pack_a(const mrt_qgemm_kernel *kern, size_t m, size_t k, const mrt_qgemm_src *src,
                      void *MRT_RESTRICT dst) {
  mrt_qgemm_pack(m, k, kern->mr, src, src->rs, src->cs, dst);
}

void mrt_qgemm_pack_b(const mrt_qgemm_kernel *kern, size_t k, size_t n, const mrt_qgemm_src *src,
                      void *MRT_RESTRICT dst) {
  mrt_qgemm_pack(n, k, kern->nr, src, src->cs, src->rs, dst);
}

size_t mrt_qgemm_scratch_size(const mrt_qgemm_kernel *kern, size_t m, size_t n, size_t k, int a_packed,
                              int b_packed) {
  size_t s = 0;
  if (!a_packed) s += mrt_qround(mrt_qgemm_packed_a_size(kern, m, k), 64);
  if (!b_packed) s += mrt_qround(mrt_qgemm_packed_b_size(kern, k, n), 64);
  return s;
}

void mrt_qgemm(const mrt_qgemm_kernel *kern, size_t m, size_t n, size_t k, const mrt_qgemm_src *a,
               const mrt_qgemm_src *b, int accumulate, int32_t *MRT_RESTRICT c, size_t ldc, void *scratch) {
  if (m == 0 || n == 0) return;
  const size_t mr = kern->mr, nr = kern->nr, kq = (k + 1) / 2;
  const int16_t *pa = a->packed, *pb = b->packed;
  char *s = scratch;
  if (!pa) {
    mrt_qgemm_pack_a(kern, m, k, a, s);
    pa = (const int16_t *)s;
    s += mrt_qround(mrt_qgemm_packed_a_size(kern, m, k), 64);
  }
  if (!pb) {
    mrt_qgemm_pack_b(kern, k, n, b, s);
    pb = (const int16_t *)s;
  }
  int32_t edge[16 * 16];
  MRT_ASSERT(mr * nr <= 16 * 16);
  /* A block (mc rows) in L2, then each B panel (nr x k) in L1 over it. */
  for (size_t i0 = 0; i0 < m; i0 += kern->mc) {
    const size_t i1 = i0 + kern->mc < m ? i0 + kern->mc : m;
    for (size_t j = 0; j < n; j += nr) {
      const int16_t *bp = pb + j * kq * 2;
      const size_t nw = n - j < nr ? n - j : nr;
      for (size_t i = i0; i < i1; i += mr) {
        const int16_t *ap = pa + i * kq * 2;
        const size_t mw = m - i < mr ? m - i : mr;
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
