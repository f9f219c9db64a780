/*
 * Blocked, packed single-precision GEMM (support unit `gemm`); see gemm.h.
 *
 * The loop nest follows the usual Goto/BLIS shape: n in blocks of nc (packed
 * B block lives in L3), k in blocks of MRT_SGEMM_KC, m in blocks of mc (packed
 * A block lives in L2), then mr x nr register tiles whose B micro-panel stays
 * in L1 (AVX-512: rows of tiles, see mrt_sgemm_range). Micro-kernels are written once with vector extensions and stamped
 * out per ISA: the compiler picks the instructions (FMA where allowed).
 */
#include "gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

typedef float mrt_v4f __attribute__((vector_size(16)));
#if defined(__x86_64__)
typedef float mrt_v8f __attribute__((vector_size(32)));
typedef float mrt_v16f __attribute__((vector_size(64)));
#endif

/*
 * One register tile: MR rows x NV vectors of VL floats; A advances by AS per
 * k step (the panel width; a 1-row tile reads one row of an mr-wide panel, so
 * rows of an edge panel cost one row each, not a full panel) and B by BS (the
 * panel width: a narrow tile for a few edge columns reads the first NV * VL
 * columns of an nr-wide panel). The fixed-trip loops
 * are fully unrolled so acc[][] lives in registers. Loads and stores go
 * through __builtin_memcpy: packed buffers and C rows need not be aligned,
 * and this avoids aliasing a float* as a vector*.
 */
/* Software prefetch per k step (none unless a tile defines it). */
#ifndef MRT_SGEMM_PF
#define MRT_SGEMM_PF(a, b, AS, BS)
#endif
/* More columns of C (the 8 x 48 + 1 and + 4 tiles, mrt_sgemm_range): their
 * state, k step and store; nothing in the other tiles. */
#define MRT_SGEMM_XCOL_DECL
#define MRT_SGEMM_XCOL_STEP(a, q)
#define MRT_SGEMM_XCOL_STORE
/* y = x < lo ? lo : x, then y > hi ? hi : y, lane by lane: the unfused Add's
 * sum through the Relu / Clip kernels' selects (bit for bit, NaN passes, and
 * lo > hi gives hi); on x86 each select is one maxps / minps. */
#define MRT_SGEMM_SEL(VT, m, a, b) ((VT)(((__typeof__(m))(a) & (m)) | ((__typeof__(m))(b) & ~(m))))
/* acc[][] clamped that way to [lo, hi], each bound only where it is finite: the
 * clamp after a residual too (Relu's upper bound +inf: 24 operations a tile
 * less). */
#define MRT_SGEMM_TILE_CLAMP(VT, MR, NV, LO, HI)                                              \
  if ((LO) != -__builtin_inff()) {                                                            \
    const VT lo = (VT){0} + (LO);                                                             \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r)                           \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v)                         \
        acc[r][v] = MRT_SGEMM_SEL(VT, acc[r][v] < lo, lo, acc[r][v]);                         \
  }                                                                                           \
  if ((HI) != __builtin_inff()) {                                                             \
    const VT hi = (VT){0} + (HI);                                                             \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r)                           \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v)                         \
        acc[r][v] = MRT_SGEMM_SEL(VT, acc[r][v] > hi, hi, acc[r][v]);                         \
  }
#if MRT_SGEMM_TILE_RES
/* The residual on the finished tile values acc[][] (gemm.h), in the tiles
 * defined while MRT_SGEMM_RES_HERE is 1 (AVX-512 and AVX2). */
#define MRT_SGEMM_RES_HERE 0
#define MRT_SGEMM_TILE_RES_ADD(VT, VL, MR, NV)                                                \
  if (MRT_SGEMM_RES_HERE && args->res) {                                                      \
    const float *const res_ = args->res;                                                      \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r)                           \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) {                       \
        VT rv;                                                                                \
        __builtin_memcpy(&rv, res_ + (size_t)r * ldc + v * (VL), sizeof(VT));                 \
        acc[r][v] += rv;                                                                      \
      }                                                                                       \
    MRT_SGEMM_TILE_CLAMP(VT, MR, NV, args->post_lo, args->post_hi)                            \
  }
#else
#define MRT_SGEMM_TILE_RES_ADD(VT, VL, MR, NV)
#endif
/* The epilogue runs stage by stage over all accumulators, each stage's test
 * once a tile, and clamps only at finite bounds, by the selects of the Relu /
 * Clip kernels (one maxps / minps each; NaN passes, as through the unfused
 * ops): a K = 16 product (EfficientNet-B0's 1x1 16 -> 96 on 112 x 112) spends
 * 16 k steps a tile, and the per-value tests and the NaN-aware min / max
 * (three operations each) of a clamp to +-inf had cost as many vector
 * operations as its multiply-adds. */
#define MRT_SGEMM_TILE(NAME, ATTR, VT, VL, MR, NV, AS, BS)                                          \
  ATTR static void NAME(size_t kc, const float *MRT_RESTRICT a, const float *MRT_RESTRICT b,   \
                        float *MRT_RESTRICT c, size_t ldc, const mrt_sgemm_tile_args *args) {  \
    VT acc[MR][NV];                                                                           \
    MRT_SGEMM_XCOL_DECL                                                                       \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r)                           \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) acc[r][v] = (VT){0};    \
    for (size_t q = 0; q < kc; ++q) {                                                         \
      VT bv[NV];                                                                              \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v)                         \
        __builtin_memcpy(&bv[v], b + v * VL, sizeof(VT));                                     \
      MRT_SGEMM_PF(a, b, AS, BS);                                                             \
      _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r) {                       \
        const float ar = a[r];                                                                \
        _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) acc[r][v] += ar * bv[v]; \
      }                                                                                       \
      MRT_SGEMM_XCOL_STEP(a, q);                                                              \
      a += AS;                                                                                \
      b += BS;                                                                                \
    }                                                                                         \
    if (args->accumulate)                                                                     \
      _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r)                         \
        _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) {                     \
          VT old;                                                                             \
          __builtin_memcpy(&old, c + (size_t)r * ldc + v * VL, sizeof(VT));                   \
          acc[r][v] += old;                                                                   \
        }                                                                                     \
    if (args->last) {                                                                         \
      const float *const brow = args->bias_row, *const bcol = args->bias_col;                 \
      if (brow)                                                                               \
        _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r) {                     \
          const float br = brow[r];                                                           \
          _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) acc[r][v] += br;    \
        }                                                                                     \
      if (bcol)                                                                               \
        _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) {                     \
          VT bc;                                                                              \
          __builtin_memcpy(&bc, bcol + v * VL, sizeof(VT));                                   \
          _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r) acc[r][v] += bc;    \
        }                                                                                     \
      MRT_SGEMM_TILE_CLAMP(VT, MR, NV, args->lo, args->hi)                                    \
      MRT_SGEMM_TILE_RES_ADD(VT, VL, MR, NV)                                                  \
    }                                                                                         \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r)                           \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v)                         \
        __builtin_memcpy(c + (size_t)r * ldc + v * VL, &acc[r][v], sizeof(VT));               \
    MRT_SGEMM_XCOL_STORE                                                                      \
  }

/* Tile shapes: accumulators + B vectors + one broadcast must fit the
 * register file (16 xmm/ymm on x86_64, 8 on i386, 32 v-regs on aarch64,
 * 16 q-regs on armv7). */
#if defined(__x86_64__)
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x8__sse, , mrt_v4f, 4, 6, 2, 6, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x8__sse, , mrt_v4f, 4, 1, 2, 6, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x4__sse, , mrt_v4f, 4, 6, 1, 6, 8)
#undef MRT_SGEMM_RES_HERE
#define MRT_SGEMM_RES_HERE 1
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x16__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8, 6, 2, 6, 16)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x16__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8, 1, 2, 6, 16)
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x8__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8, 6, 1, 6, 16)
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x4__avx2, __attribute__((target("avx2,fma"))), mrt_v4f, 4, 6, 1, 6, 16)
#if MRT_SGEMM_AVX512
/* The 6 x 16 tile reading B in place, rows args->ldb floats apart, with each
 * row's line 8 k steps ahead prefetched (two: a row of a 14 x 14 plane starts
 * mid-line); desktop x86_64 builds, like the AVX-512 one (mrt_sgemm_range). */
#undef MRT_SGEMM_PF
#define MRT_SGEMM_PF(a, b, AS, BS)                                                              \
  do {                                                                                          \
    __builtin_prefetch((b) + 8 * (BS), 0, 3);                                                   \
    __builtin_prefetch((b) + 8 * (BS) + 15, 0, 3);                                              \
  } while (0)
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x16b__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8, 6, 2, 6, args->ldb)
#undef MRT_SGEMM_PF
#define MRT_SGEMM_PF(a, b, AS, BS)
/* Column j of a narrow edge tile (mrt_sgemm_kernel_6x2__avx2, _8x2__avx512):
 * its rows' sums t[0..rows) through the tiles' epilogue, one value at a time. */
static void mrt_sgemm_col_store(const float *t, int rows, size_t j, float *MRT_RESTRICT c, size_t ldc,
                                const mrt_sgemm_tile_args *args) {
  for (int r = 0; r < rows; ++r) {
    float x = t[r];
    if (args->accumulate) x += c[(size_t)r * ldc + j];
    if (args->last) {
      if (args->bias_row) x += args->bias_row[r];
      if (args->bias_col) x += args->bias_col[j];
      x = x < args->lo ? args->lo : x;
      x = x > args->hi ? args->hi : x;
      if (args->res) {
        x += args->res[(size_t)r * ldc + j];
        x = x < args->post_lo ? args->post_lo : x;
        x = x > args->post_hi ? args->post_hi : x;
      }
    }
    c[(size_t)r * ldc + j] = x;
  }
}
/* The last one or two columns of a B panel (N = 49 for a 7 x 7 image is
 * 3 x 16 + 1): the six rows of an A panel are one ymm vector per k step (its
 * two top lanes read the next step's rows and are never stored), so a column
 * costs one FMA per k where the 6 x 4 tile spends six; k is unrolled by four
 * for independent chains. The last step loads its six rows alone: the panel
 * may end the buffer. Writes two columns (the caller's edge buffer). */
__attribute__((target("avx2,fma"))) static void mrt_sgemm_kernel_6x2__avx2(size_t kc, const float *MRT_RESTRICT a,
                                                                       const float *MRT_RESTRICT b,
                                                                       float *MRT_RESTRICT c, size_t ldc,
                                                                       const mrt_sgemm_tile_args *args) {
  mrt_v8f acc[2][4];
  _Pragma("clang loop unroll(full)") for (int j = 0; j < 2; ++j)
    _Pragma("clang loop unroll(full)") for (int u = 0; u < 4; ++u) acc[j][u] = (mrt_v8f){0};
  size_t q = 0;
  for (; q + 5 <= kc; q += 4)
    _Pragma("clang loop unroll(full)") for (int u = 0; u < 4; ++u) {
      mrt_v8f av;
      __builtin_memcpy(&av, a + (q + u) * 6, sizeof av);
      _Pragma("clang loop unroll(full)") for (int j = 0; j < 2; ++j) acc[j][u] += av * b[(q + u) * 16 + j];
    }
  for (; q < kc; ++q) {
    mrt_v8f av = (mrt_v8f){0};
    __builtin_memcpy(&av, a + q * 6, (q + 1 < kc ? 8 : 6) * sizeof(float));
    _Pragma("clang loop unroll(full)") for (int j = 0; j < 2; ++j) acc[j][0] += av * b[q * 16 + j];
  }
  for (int j = 0; j < 2; ++j) {
    const mrt_v8f sum = (acc[j][0] + acc[j][1]) + (acc[j][2] + acc[j][3]);
    float t[8];
    __builtin_memcpy(t, &sum, sizeof t);
    mrt_sgemm_col_store(t, 6, (size_t)j, c, ldc, args);
  }
}
#endif
#undef MRT_SGEMM_RES_HERE
#define MRT_SGEMM_RES_HERE 0
#if MRT_SGEMM_AVX512
/* AVX-512F: 8 x 48 (24 zmm accumulators, 3 B vectors, the A value broadcast
 * from memory by the FMA itself). Eight rows, not 12 or 14: the channel counts
 * of mobile CNNs (16, 24, 32, 96, 144, ...) are multiples of 8, so the narrow
 * projections (32 -> 16 channels at 112 x 112) run whole tiles, not 1-row ones. */
#define MRT_AVX512 __attribute__((target("avx512f,avx2,fma")))
#undef MRT_SGEMM_RES_HERE
#define MRT_SGEMM_RES_HERE 1
/* The 8 x 48 tile prefetches its B rows 8 k steps ahead and its A panel 24
 * ahead: A streams from L2 once per tile (weights of a 7 x 7 layer: 2048 x 512
 * floats for 49 columns), and without this the tile waited on it; measured
 * on ResNet-50 against 0 / 8 / 16 ahead for both: 7 x 7 layers -18..29 %,
 * 14 x 14 -8 %, 56 x 56 -2..5 %. */
#undef MRT_SGEMM_PF
#define MRT_SGEMM_PF(a, b, AS, BS)                                                              \
  do {                                                                                          \
    __builtin_prefetch((b) + 8 * (BS), 0, 3);                                                   \
    __builtin_prefetch((b) + 8 * (BS) + 16, 0, 3);                                              \
    __builtin_prefetch((b) + 8 * (BS) + 32, 0, 3);                                              \
    __builtin_prefetch((a) + 24 * (AS), 0, 3);                                                  \
  } while (0)
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x48__avx512, MRT_AVX512, mrt_v16f, 16, 8, 3, 8, 48)
/* The same with a 49th column, B's ragged last panel of one column (N = 49 on
 * 7 x 7 planes) as args->xcol, one float a k step: the A panel's eight rows are
 * one more load and one ymm FMA a step, where the 8 x 2 edge tile read the A
 * panel again for it (and then stored through the edge copy). The column sums
 * in the 8 x 2 tile's order (four chains by k mod 4, the steps past the last
 * whole four in the first, then (0 + 1) + (2 + 3)) and goes through its
 * epilogue, so an output is the same bytes whichever of the two tiles a
 * thread split gives it. 1x1 320 -> 1280 on 7 x 7, one thread: 380 -> 355 us
 * (340 for 48 columns); 960 -> 320: 285 -> 268-277 (257). */
#undef MRT_SGEMM_XCOL_DECL
#undef MRT_SGEMM_XCOL_STEP
#undef MRT_SGEMM_XCOL_STORE
#define MRT_SGEMM_XCOL_DECL                                                                     \
  mrt_v8f xcol[4] = {{0}, {0}, {0}, {0}};                                                       \
  const size_t kc4 = kc & ~(size_t)3;
#define MRT_SGEMM_XCOL_STEP(a, q)                                                               \
  do {                                                                                          \
    mrt_v8f av_;                                                                                \
    __builtin_memcpy(&av_, (a), sizeof av_);                                                    \
    xcol[(q) < kc4 ? (q) & 3 : 0] += av_ * args->xcol[q];                                       \
  } while (0)
#define MRT_SGEMM_XCOL_STORE                                                                    \
  {                                                                                             \
    const mrt_v8f sum_ = (xcol[0] + xcol[1]) + (xcol[2] + xcol[3]);                             \
    float t_[8];                                                                                \
    __builtin_memcpy(t_, &sum_, sizeof t_);                                                     \
    mrt_sgemm_col_store(t_, 8, 48, c, ldc, args);                                               \
  }
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x49__avx512, MRT_AVX512, mrt_v16f, 16, 8, 3, 8, 48)
/* And with four more columns (N = 196 on 14 x 14 planes: 4 x 48 + 4), where an
 * 8 x 16 edge tile spent 8 zmm FMAs a k step on them: two zmm accumulators
 * ([column 0 | 1], [2 | 3], eight rows each), the A panel's eight rows loaded
 * into both halves, args->xcol the columns' expanded copy (per k step 16
 * floats: b[k][0] eight times, b[k][1] eight times, then columns 2 and 3).
 * Each output sums in k order as the 8 x 16 tile's do and goes through the
 * same epilogue steps (mrt_sgemm_col_store), so a thread split that hands the
 * columns to the edge tile instead gives the same bytes. */
#undef MRT_SGEMM_XCOL_DECL
#undef MRT_SGEMM_XCOL_STEP
#undef MRT_SGEMM_XCOL_STORE
#define MRT_SGEMM_XCOL_DECL mrt_v16f xq0 = (mrt_v16f){0}, xq1 = (mrt_v16f){0};
#define MRT_SGEMM_XCOL_STEP(a, q)                                                               \
  do {                                                                                          \
    mrt_v8f ah_;                                                                                \
    mrt_v16f b0_, b1_;                                                                          \
    __builtin_memcpy(&ah_, (a), sizeof ah_);                                                    \
    const mrt_v16f av_ = __builtin_shufflevector(ah_, ah_, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7); \
    __builtin_memcpy(&b0_, args->xcol + (q) * 32, sizeof b0_);                                  \
    __builtin_memcpy(&b1_, args->xcol + (q) * 32 + 16, sizeof b1_);                             \
    xq0 += av_ * b0_;                                                                           \
    xq1 += av_ * b1_;                                                                           \
  } while (0)
#define MRT_SGEMM_XCOL_STORE                                                                    \
  {                                                                                             \
    float t_[32];                                                                               \
    __builtin_memcpy(t_, &xq0, sizeof xq0);                                                     \
    __builtin_memcpy(t_ + 16, &xq1, sizeof xq1);                                                \
    for (int j_ = 0; j_ < 4; ++j_) mrt_sgemm_col_store(t_ + 8 * j_, 8, 48 + (size_t)j_, c, ldc, args); \
  }
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x52__avx512, MRT_AVX512, mrt_v16f, 16, 8, 3, 8, 48)
#undef MRT_SGEMM_XCOL_DECL
#undef MRT_SGEMM_XCOL_STEP
#undef MRT_SGEMM_XCOL_STORE
#define MRT_SGEMM_XCOL_DECL
#define MRT_SGEMM_XCOL_STEP(a, q)
#define MRT_SGEMM_XCOL_STORE
/* The same reading B in place, rows args->ldb floats apart (mrt_sgemm_range:
 * products of few rows of C, whose B panels would be packed for few tiles).
 * Each k step prefetches its B row's lines 16 rows ahead (four: a 48-float
 * run of a 14 x 14 plane's row starts mid-line). A product that follows a
 * depthwise layer reads half its B from the other core's cache, which the
 * hardware prefetcher does not cover: 1x1 576 -> 96 + residual on 14 x 14
 * after a 576-channel depthwise, 2 threads, profile_nodes best of 2000,
 * 92-103 -> 82-85 us (8 rows ahead 85-86, 32 82-85, 64 86-90); alone, B
 * in this core's L2, 75-80 -> 68-72. MobileNetV2's projections at 2 threads
 * (4 interleaved rounds, per-node best) 1.02 -> 0.99 of onnxruntime's time. */
#undef MRT_SGEMM_PF
#define MRT_SGEMM_PF(a, b, AS, BS)                                                              \
  do {                                                                                          \
    __builtin_prefetch((b) + 16 * (BS), 0, 3);                                                  \
    __builtin_prefetch((b) + 16 * (BS) + 16, 0, 3);                                             \
    __builtin_prefetch((b) + 16 * (BS) + 32, 0, 3);                                             \
    __builtin_prefetch((b) + 16 * (BS) + 47, 0, 3);                                             \
  } while (0)
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x48b__avx512, MRT_AVX512, mrt_v16f, 16, 8, 3, 8, args->ldb)
#undef MRT_SGEMM_PF
#define MRT_SGEMM_PF(a, b, AS, BS)
/* And for up to 48 k steps (mrt_sgemm_range): a tile of K = 16 reads 16
 * rows, and 8 rows ahead is then half past its block; it prefetches the next
 * panel's rows instead (the next 48 columns of the same B rows), for the next
 * tile along a row of tiles, or the next column of tiles. EfficientNet-B0's
 * 1x1 16 -> 96 + SiLU on 112 x 112, one thread: 618 -> 580 us. Down columns
 * of tiles (C of fewer than 64 rows), each B row a plane of its own that no
 * hardware stream follows: MobileNetV2's 1x1 32 -> 16 on 112 x 112 after the
 * depthwise, profile_nodes, 3 interleaved rounds of 300, median 114-117 ->
 * 83-95 us at one thread, 76-111 -> 58-64 at two (onnxruntime 100, 71). There
 * it takes up to 96 k steps, while the current and the next panel fit L1
 * together (96 x 48 floats each): 96 -> 24 on 56 x 56, 4 rounds, 110-113 ->
 * 90-95 us at one thread, 75-80 -> 70-75 at two; with 144 (144 -> 32 on
 * 28 x 28) or along rows of tiles (576 -> 96 on 14 x 14) slower. */
#undef MRT_SGEMM_PF
#define MRT_SGEMM_PF(a, b, AS, BS)                                                              \
  do {                                                                                          \
    __builtin_prefetch((b) + 48, 0, 3);                                                         \
    __builtin_prefetch((b) + 64, 0, 3);                                                         \
    __builtin_prefetch((b) + 80, 0, 3);                                                         \
  } while (0)
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x48bn__avx512, MRT_AVX512, mrt_v16f, 16, 8, 3, 8, args->ldb)
#undef MRT_SGEMM_PF
#define MRT_SGEMM_PF(a, b, AS, BS)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x48__avx512, MRT_AVX512, mrt_v16f, 16, 1, 3, 8, 48)
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x16__avx512, MRT_AVX512, mrt_v16f, 16, 8, 1, 8, 48)
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x32__avx512, MRT_AVX512, mrt_v16f, 16, 8, 2, 8, 48)
/* The last one or two columns of a B panel (N = 49 for a 7 x 7 image is 48 + 1):
 * the eight rows of an A panel are one ymm vector per k step, so a column
 * costs one FMA per k where a 16-wide tile spends eight; k is unrolled by four
 * for independent chains. B is the two columns' compact copy, 2 floats a k
 * step (mrt_sgemm_range). Writes two columns (the caller's edge buffer). */
MRT_AVX512 static void mrt_sgemm_kernel_8x2__avx512(size_t kc, const float *MRT_RESTRICT a,
                                                  const float *MRT_RESTRICT b, float *MRT_RESTRICT c,
                                                  size_t ldc, const mrt_sgemm_tile_args *args) {
  mrt_v8f acc[2][4];
  _Pragma("clang loop unroll(full)") for (int j = 0; j < 2; ++j)
    _Pragma("clang loop unroll(full)") for (int u = 0; u < 4; ++u) acc[j][u] = (mrt_v8f){0};
  size_t q = 0;
  for (; q + 4 <= kc; q += 4)
    _Pragma("clang loop unroll(full)") for (int u = 0; u < 4; ++u) {
      mrt_v8f av;
      __builtin_memcpy(&av, a + (q + u) * 8, sizeof av);
      _Pragma("clang loop unroll(full)") for (int j = 0; j < 2; ++j) acc[j][u] += av * b[(q + u) * 2 + j];
    }
  for (; q < kc; ++q) {
    mrt_v8f av;
    __builtin_memcpy(&av, a + q * 8, sizeof av);
    _Pragma("clang loop unroll(full)") for (int j = 0; j < 2; ++j) acc[j][0] += av * b[q * 2 + j];
  }
  for (int j = 0; j < 2; ++j) {
    const mrt_v8f sum = (acc[j][0] + acc[j][1]) + (acc[j][2] + acc[j][3]);
    float t[8];
    __builtin_memcpy(t, &sum, sizeof t);
    mrt_sgemm_col_store(t, 8, (size_t)j, c, ldc, args);
  }
}
#undef MRT_SGEMM_RES_HERE
#define MRT_SGEMM_RES_HERE 0
const mrt_sgemm_kernel mrt_sgemm_avx512 = {8, 48, 128, 1536, mrt_sgemm_kernel_8x48__avx512,
                                           mrt_sgemm_kernel_1x48__avx512,
                                           {mrt_sgemm_kernel_8x2__avx512, mrt_sgemm_kernel_8x16__avx512,
                                            mrt_sgemm_kernel_8x32__avx512},
                                           {2, 16, 32}};
#endif
static const mrt_sgemm_kernel mrt_sgemm_sse = {6, 8, 120, 2048, mrt_sgemm_kernel_6x8__sse,
                                               mrt_sgemm_kernel_1x8__sse,
                                               {mrt_sgemm_kernel_6x4__sse, NULL}, {4, 0}};
const mrt_sgemm_kernel mrt_sgemm_avx2 = {6, 16, 120, 2048, mrt_sgemm_kernel_6x16__avx2,
                                         mrt_sgemm_kernel_1x16__avx2,
#if MRT_SGEMM_AVX512
                                         {mrt_sgemm_kernel_6x2__avx2, mrt_sgemm_kernel_6x4__avx2,
                                          mrt_sgemm_kernel_6x8__avx2},
                                         {2, 4, 8}};
#else
                                         {mrt_sgemm_kernel_6x4__avx2, mrt_sgemm_kernel_6x8__avx2}, {4, 8}};
#endif

#elif defined(__aarch64__)
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x8__neon, , mrt_v4f, 4, 8, 2, 8, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x8__neon, , mrt_v4f, 4, 1, 2, 8, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x4__neon, , mrt_v4f, 4, 8, 1, 8, 8)
static const mrt_sgemm_kernel mrt_sgemm_default = {8, 8, 128, 2048, mrt_sgemm_kernel_8x8__neon,
                                                   mrt_sgemm_kernel_1x8__neon,
                                                   {mrt_sgemm_kernel_8x4__neon, NULL}, {4, 0}};
#elif defined(__ARM_NEON)
MRT_SGEMM_TILE(mrt_sgemm_kernel_4x8__neon, , mrt_v4f, 4, 4, 2, 4, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x8__neon, , mrt_v4f, 4, 1, 2, 4, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_4x4__neon, , mrt_v4f, 4, 4, 1, 4, 8)
static const mrt_sgemm_kernel mrt_sgemm_default = {4, 8, 128, 1024, mrt_sgemm_kernel_4x8__neon,
                                                   mrt_sgemm_kernel_1x8__neon,
                                                   {mrt_sgemm_kernel_4x4__neon, NULL}, {4, 0}};
#else
/* i386 (8 xmm registers) and anything without a known SIMD unit. */
MRT_SGEMM_TILE(mrt_sgemm_kernel_4x4, , mrt_v4f, 4, 4, 1, 4, 4)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x4, , mrt_v4f, 4, 1, 1, 4, 4)
static const mrt_sgemm_kernel mrt_sgemm_default = {4, 4, 128, 1024, mrt_sgemm_kernel_4x4,
                                                   mrt_sgemm_kernel_1x4, {NULL, NULL}, {0, 0}};
#endif

#if defined(__x86_64__)
enum { MRT_ISA_SSE = 0, MRT_ISA_AVX2 = 1, MRT_ISA_AVX512 = 2 };

/* The widest micro-kernel family the CPU and OS support. AVX2/FMA need OS-saved
 * ymm state (XCR0 bits 1-2), AVX-512F also the opmask and zmm state (bits 5-7).
 * (On a Zen CPU, whose AVX-512 splits each zmm operation in two, a 12 x 32 tile
 * measured the same GEMM throughput as AVX2; Intel cores with two 512-bit FMA
 * ports run the 8 x 48 one close to twice as fast.)
 * cpuid rather than __builtin_cpu_supports, which needs libgcc/compiler-rt
 * state that Android builds do not link. */
MRT_PREPARE_CODE
static int mrt_cpu_isa(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return MRT_ISA_SSE;
  if (!(c & bit_FMA) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return MRT_ISA_SSE;
  unsigned xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  (void)xhi;
  if ((xlo & 6u) != 6u) return MRT_ISA_SSE;
  if (__get_cpuid_max(0, 0) < 7) return MRT_ISA_SSE;
  __cpuid_count(7, 0, a, b, c, d);
  if (!(b & bit_AVX2)) return MRT_ISA_SSE;
  return MRT_SGEMM_AVX512 && (b & bit_AVX512F) && (xlo & 0xe6u) == 0xe6u ? MRT_ISA_AVX512 : MRT_ISA_AVX2;
}

/* MINIRT_MAX_CPU_ISA=sse or =avx2 caps the choice (to rule a code path out when
 * chasing a numerical difference, or to test every path on one machine). */
MRT_PREPARE_CODE
static int mrt_isa_cap(void) {
  const char *cap = getenv("MINIRT_MAX_CPU_ISA");
  if (cap && strcmp(cap, "sse") == 0) return MRT_ISA_SSE;
  if (cap && strcmp(cap, "avx2") == 0) return MRT_ISA_AVX2;
  return MRT_ISA_AVX512;
}
#endif

MRT_PREPARE_CODE
const mrt_sgemm_kernel *mrt_sgemm_kernel_select(void) {
#if defined(__x86_64__)
  const int cpu = mrt_cpu_isa(), cap = mrt_isa_cap(), isa = cpu < cap ? cpu : cap;
#if MRT_SGEMM_AVX512
  if (isa == MRT_ISA_AVX512) return &mrt_sgemm_avx512;
#endif
  return isa == MRT_ISA_AVX2 ? &mrt_sgemm_avx2 : &mrt_sgemm_sse;
#else
  return &mrt_sgemm_default;
#endif
}

#if MRT_SGEMM_AVX512
/* Whether the AVX-512 tiles may read B in place for C of m rows and k (see
 * mrt_sgemm_range): B plain floats, C whole row panels, up to 128 rows, or
 * 256 with few k, whose B block is small (EfficientNet-B0's 1x1 24 -> 144 on
 * 56 x 56 and 40 -> 240 on 28 x 28, one thread: 263 -> 251 us, 137 -> 131;
 * ResNet-50's 64 -> 256 on 56 x 56 no better). The same answer for the
 * thread split (mrt_sgemm_mt). */
static int mrt_sgemm_b_in_place(const mrt_sgemm_kernel *kern, const mrt_sgemm_src *b, size_t m, size_t k) {
  if (b->packed || b->pack || b->cs != 1 || b->scale != 1.0f) return 0;
  if (kern == &mrt_sgemm_avx512) return m % kern->mr == 0 && (m <= 128 || (m <= 256 && k <= 48));
  /* AVX2's 6 x 16 tile: C of up to 128 rows (taken below 64 rows, and with a
   * residual: mrt_sgemm_range's direct_b; MobileNetV2's projections to 16, 24
   * and 32 channels), the last, partial row panel through the edge buffer. */
  return kern == &mrt_sgemm_avx2 && m <= 128;
}
#endif
static size_t mrt_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
static size_t mrt_min(size_t a, size_t b) { return a < b ? a : b; }

/*
 * Packs x0..x0+xc (the panel dimension: rows of A, columns of B) by
 * k0..k0+kc of a strided operand, element (x, k) = data[x*xs + k*ks], into
 * panels of w, zero-padding the last panel.
 */
static void mrt_sgemm_pack_strided(const float *data, size_t xs, size_t ks, float scale, size_t x0,
                                   size_t xc, size_t k0, size_t kc, size_t w,
                                   float *MRT_RESTRICT dst) {
  for (size_t p = 0; p < xc; p += w) {
    const size_t pw = mrt_min(w, xc - p);
    const float *base = data + (x0 + p) * xs + k0 * ks;
    if (xs == 1) {
      /* Panel rows are contiguous in the source: plain copies. */
      for (size_t q = 0; q < kc; ++q) {
        const float *s = base + q * ks;
        float *d = dst + q * w;
        size_t r = 0;
        for (; r < pw; ++r) d[r] = s[r] * scale;
        for (; r < w; ++r) d[r] = 0.0f;
      }
    } else {
      for (size_t r = 0; r < pw; ++r) {
        const float *s = base + r * xs;
        for (size_t q = 0; q < kc; ++q) dst[q * w + r] = s[q * ks] * scale;
      }
      for (size_t r = pw; r < w; ++r)
        for (size_t q = 0; q < kc; ++q) dst[q * w + r] = 0.0f;
    }
    dst += w * kc;
  }
}

#if defined(__x86_64__) && !defined(__ANDROID__) && !MRT_TUNE_SIZE
#define MRT_SGEMM_PACK_AT 1
/* A with contiguous rows (MatMul's activations: attention's Q and its
 * probabilities) into the AVX2 / AVX-512 panels of W = 6 or 8 rows: eight k
 * at a time, the panel's rows are loaded as vectors, transposed in registers
 * (rows past W are zeros) and each k group stored as W floats, where the
 * scalar gather moved one float a load and store (BERT-small's attention
 * products pack a 128 x 64 or 128 x 128 A per head). Full panels only; the
 * ragged last one and the k tail go through the scalar loop. Not on Android
 * (its x86_64 ABI runs emulators: 2,176 B there) nor under --tune size. */
__attribute__((target("avx2,fma"))) static void mrt_sgemm_pack_at__avx2(const float *data, size_t xs, float scale,
                                                                    size_t x0, size_t xc, size_t k0, size_t kc,
                                                                    size_t w, float *MRT_RESTRICT dst) {
  const size_t full = xc / w * w, k8 = kc / 8 * 8;
  for (size_t p = 0; p < full; p += w, dst += w * kc) {
    const float *base = data + (x0 + p) * xs + k0;
    for (size_t q = 0; q < k8; q += 8) {
      mrt_v8f r[8];
      _Pragma("clang loop unroll(full)") for (int i = 0; i < 8; ++i) {
        r[i] = (mrt_v8f){0};
        if ((size_t)i < w) {
          __builtin_memcpy(&r[i], base + (size_t)i * xs + q, sizeof r[i]);
          r[i] *= scale;
        }
      }
      mrt_transpose8x8(r);
      float *d = dst + q * w;
      if (w == 8)
        _Pragma("clang loop unroll(full)") for (int j = 0; j < 8; ++j) __builtin_memcpy(d + j * 8, &r[j], 32);
      else
        _Pragma("clang loop unroll(full)") for (int j = 0; j < 8; ++j) __builtin_memcpy(d + j * 6, &r[j], 24);
    }
    for (size_t q = k8; q < kc; ++q)
      for (size_t i = 0; i < w; ++i) dst[q * w + i] = base[i * xs + q] * scale;
  }
  if (full < xc) mrt_sgemm_pack_strided(data, xs, 1, scale, x0 + full, xc - full, k0, kc, w, dst);
}
#else
#define MRT_SGEMM_PACK_AT 0
#endif

#if MRT_SGEMM_AVX512
/* B of a pointwise convolution (and any B with contiguous rows) for the 8 x 48
 * kernel: 16 floats a load, the panel's ragged end by a masked load whose
 * zero lanes are the padding, so no scalar loop. */
MRT_AVX512 static void mrt_sgemm_pack_rows__avx512(const float *data, size_t ks, float scale, size_t x0,
                                                  size_t xc, size_t k0, size_t kc, float *MRT_RESTRICT dst) {
  /* Row by row when there are many rows: each source row's xc floats are
   * read in one sequential run (the rows of a 56 x 56 plane lie 12.5 KB
   * apart; panel by panel, every 192-byte piece of 256 rows missed on its
   * own), with the row 4 ahead prefetched, and scattered over the panels,
   * which stay in L2 (1x1 256 -> 64 on 56 x 56: 726 -> 694 us). Fewer rows
   * are streams the hardware follows, and the panels, written one at a time,
   * stay in L1 (MobileNetV2's 1x1 96 -> 24 on 56 x 56: 136 us by panels, 146
   * by rows). */
  if (kc < 128) {
    for (size_t p = 0; p < xc; p += 48, dst += 48 * kc) {
      const size_t pw = mrt_min(48, xc - p);
      const float *base = data + x0 + p + k0 * ks;
      for (size_t q = 0; q < kc; ++q) {
        const float *src = base + q * ks;
        float *d = dst + q * 48;
        _Pragma("clang loop unroll(full)") for (size_t t = 0; t < 48; t += 16) {
          const size_t n = pw > t ? pw - t : 0;
          const unsigned short mask = (unsigned short)(n >= 16 ? 0xffffu : (1u << n) - 1u);
          const mrt_v16f v = __builtin_ia32_loadups512_mask(src + t, (mrt_v16f){0}, mask) * scale;
          __builtin_memcpy(d + t, &v, sizeof v);
        }
      }
    }
    return;
  }
  for (size_t q = 0; q < kc; ++q) {
    const float *src = data + x0 + (k0 + q) * ks;
    if (q + 4 < kc)
      for (size_t t = 0; t < xc; t += 16) __builtin_prefetch(src + 4 * ks + t, 0, 3);
    float *d = dst + q * 48;
    for (size_t p = 0; p < xc; p += 48, d += 48 * kc) {
      const size_t pw = mrt_min(48, xc - p);
      _Pragma("clang loop unroll(full)") for (size_t t = 0; t < 48; t += 16) {
        const size_t n = pw > t ? pw - t : 0;
        const unsigned short mask = (unsigned short)(n >= 16 ? 0xffffu : (1u << n) - 1u);
        const mrt_v16f v = __builtin_ia32_loadups512_mask(src + p + t, (mrt_v16f){0}, mask) * scale;
        __builtin_memcpy(d + t, &v, sizeof v);
      }
    }
  }
}
#endif

void mrt_sgemm_pack_a(const mrt_sgemm_kernel *kern, size_t m, size_t k, const float *a, size_t rs,
                      size_t cs, float scale, float *MRT_RESTRICT dst) {
  const size_t mpad = mrt_round_up(m, kern->mr);
  for (size_t k0 = 0; k0 < k; k0 += MRT_SGEMM_KC)
    mrt_sgemm_pack_strided(a, rs, cs, scale, 0, m, k0, mrt_min(MRT_SGEMM_KC, k - k0), kern->mr,
                           dst + k0 * mpad);
}

void mrt_sgemm_pack_b(const mrt_sgemm_kernel *kern, size_t k, size_t n, const float *b, size_t rs,
                      size_t cs, float scale, float *MRT_RESTRICT dst) {
  const size_t npad = mrt_round_up(n, kern->nr);
  for (size_t k0 = 0; k0 < k; k0 += MRT_SGEMM_KC)
    mrt_sgemm_pack_strided(b, cs, rs, scale, 0, n, k0, mrt_min(MRT_SGEMM_KC, k - k0), kern->nr,
                           dst + k0 * npad);
}

/* Scratch: one B block then one A block, each rounded to 64 bytes. */
static size_t mrt_sgemm_b_block_floats(const mrt_sgemm_kernel *kern, size_t n, size_t k) {
  return mrt_round_up(mrt_round_up(mrt_min(n, kern->nc), kern->nr) * mrt_min(k, MRT_SGEMM_KC), 16);
}

MRT_PREPARE_CODE
size_t mrt_sgemm_scratch_size(const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k,
                              int a_packed, int b_packed) {
  size_t floats = 0;
  if (!b_packed) floats += mrt_sgemm_b_block_floats(kern, n, k);
  if (!a_packed)
    floats += mrt_round_up(mrt_round_up(mrt_min(m, kern->mc), kern->mr) * mrt_min(k, MRT_SGEMM_KC), 16);
  return floats * sizeof(float);
}

/* k == 0: the product is empty, only the epilogue remains. */
static void mrt_sgemm_epilogue_only(size_t m, size_t n, int accumulate, const mrt_sgemm_epilogue *ep,
                                    float *c, size_t ldc) {
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      float x = accumulate ? c[i * ldc + j] : 0.0f;
      if (ep && ep->bias_row) x += ep->bias_row[i];
      if (ep && ep->bias_col) x += ep->bias_col[j];
      if (ep) x = x < ep->lo ? ep->lo : (x > ep->hi ? ep->hi : x);
      c[i * ldc + j] = x;
    }
  if (ep && ep->post) ep->post(ep, 0, 0, m, n, c, ldc);
}

/* Rows k0..k0+kc, columns j0..j0+nc of a B packed at run time, into nr panels. */
static void mrt_sgemm_pack_b_block(const mrt_sgemm_kernel *kern, size_t nr, const mrt_sgemm_src *b, size_t k0,
                                   size_t kc, size_t j0, size_t nc, float *MRT_RESTRICT dst) {
  if (b->pack) {
    b->pack(b->pack_ctx, k0, kc, j0, nc, nr, dst);
    return;
  }
#if MRT_SGEMM_AVX512
  if (kern == &mrt_sgemm_avx512 && b->cs == 1) {
    mrt_sgemm_pack_rows__avx512(b->data, b->rs, b->scale, j0, nc, k0, kc, dst);
    return;
  }
#endif
  mrt_sgemm_pack_strided(b->data, b->cs, b->rs, b->scale, j0, nc, k0, kc, nr, dst);
}

#if MRT_SGEMM_AVX512
/* The first `cols` columns of a packed panel (kc steps, nr floats apart), each
 * value `rep` times, a k step's cols x rep floats together: the 8 x 2 tile's B
 * (2, 1), the 8 x 48 + 1 tile's column (1, 1), the + 4 tile's (4, 8). */
static void mrt_sgemm_edge_copy(size_t kc, const float *panel, size_t nr, size_t cols, size_t rep,
                                float *MRT_RESTRICT dst) {
  for (size_t q = 0; q < kc; ++q)
    for (size_t j = 0; j < cols; ++j)
      for (size_t i = 0; i < rep; ++i) *dst++ = panel[q * nr + j];
}
#endif

/* The block C[i_lo..i_hi, j_lo..j_hi) of the product (i_lo a multiple of mr,
 * j_lo of nr: packed operands are found by absolute panel), with one
 * thread's scratch. */
static void mrt_sgemm_range(const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k, const mrt_sgemm_src *a,
                            const mrt_sgemm_src *b, int accumulate, const mrt_sgemm_epilogue *ep,
                            float *MRT_RESTRICT c, size_t ldc, void *scratch, size_t i_lo, size_t i_hi,
                            size_t j_lo, size_t j_hi) {
  const size_t mr = kern->mr, nr = kern->nr, mc = kern->mc;
  /* The AVX-512 tiles run along rows of C: a row of tiles across the block
   * keeps one A micro-panel in L1 and streams B's from L2 (the 8 x 48 tile
   * prefetches B ahead), and C and the residual are written and read in 8
   * streams along their rows, which the hardware prefetcher follows; down a
   * column of tiles (B's micro-panel in L1) each tile's rows lay 12.5 KB apart
   * on 56 x 56 planes and missed. The B block is then read once per tile row,
   * so it is sized for L2 (384 KB), not L3. Measured on ResNet-50, one thread:
   * 1x1 64 -> 256 on 56 x 56 + residual 1037 -> 713 us, without 786 -> 641,
   * 3x3 64 -> 64 1824 -> 1541; the AVX2 6 x 16 tile, which does not prefetch,
   * lost on 3x3 layers this way and walks rows only with a residual (1x1
   * 64 -> 256 on 56 x 56 + residual 1326-1622 -> 1172-1276 us). AVX-512
   * products of fewer than 64 rows without a residual keep columns too: their
   * column of tiles touches few rows of C (MobileNetV2's 1x1 32 -> 16 on
   * 112 x 112: 133 us by columns, 158 by rows). */
#if MRT_SGEMM_AVX512
  /* (C read by the tiles, a residual or accumulate, streams in along its rows too) */
  const int reads_c = accumulate || (ep && ep->res);
  const int rows_first = (kern == &mrt_sgemm_avx512 && (m >= 64 || reads_c)) ||
                         (kern == &mrt_sgemm_avx2 && reads_c);
  /* Blocks of about that size, evened out over this range of columns: a
   * thread's share of a 28 x 28 plane (432 columns) was 384 + 48, the last
   * block streaming all of A for one panel (1x1 512 -> 128 at 2 threads:
   * 348 -> 370 us against the column order). */
  const size_t nc_l2 = 98304 / mrt_min(k, MRT_SGEMM_KC) / nr * nr, nc_max = mrt_min(kern->nc, nc_l2 > nr ? nc_l2 : nr);
  const size_t nb = (j_hi - j_lo + nc_max / 2) / nc_max, nblocks = nb ? nb : 1;
  /* (never past kern->nc: the scratch holds a B block of that width) */
  const size_t nc = !rows_first ? kern->nc
                    : mrt_min(kern->nc, mrt_round_up((j_hi - j_lo + nblocks - 1) / nblocks, nr));
  /* B read in place by the 8 x 48 tile when C has few rows (ResNet-50's 1x1
   * 256 -> 64 on 56 x 56: 8 tile rows): packing a panel cost as much as its
   * few tiles' reading it from the source, rows a plane apart, with the
   * tile's prefetch 8 rows ahead. Rows of C whole panels only (no edge rows).
   * Up to 128 rows (1x1 512 -> 128 on 28 x 28: 589-637 -> 541-559 us); 256
   * lost (1024 -> 256 on 14 x 14: 585-588 -> 620-623) but for few k
   * (mrt_sgemm_b_in_place). Columns of tiles too
   * (fewer than 64 rows, no residual): a panel's one to seven tiles read it
   * in place, the first from memory, the others from L1, where the packer
   * had written and read it once more (MobileNetV2, one thread, in the whole
   * model: 1x1 32 -> 16 on 112 x 112 143 -> 96 us, 96 -> 24 on 56 x 56
   * 136 -> 89, 144 -> 32 on 28 x 28 57 -> 40; EfficientNet-B0's 144 -> 40
   * on 28 x 28 60 -> 48). */
  const int direct_b = (rows_first || m < 64) && mrt_sgemm_b_in_place(kern, b, m, k);
  size_t bskip = 0;
#else
  const size_t nc = kern->nc;
  const size_t bskip = 0;
#endif
  const size_t mpad = mrt_round_up(m, mr), npad = mrt_round_up(n, nr);
  float *bbuf = (float *)scratch;
  float *abuf = bbuf + (b->packed ? 0 : mrt_sgemm_b_block_floats(kern, n, k));
  const float inf = __builtin_inff();
  mrt_sgemm_tile_args args = {0};
  args.lo = ep ? ep->lo : -inf;
  args.hi = ep ? ep->hi : inf;
#if MRT_SGEMM_AVX512
  args.ldb = b->rs;
#endif
  float tmp_c[384], tmp_row[32], tmp_col[64];
#if MRT_SGEMM_AVX512
  float edge_b[32 * MRT_SGEMM_KC]; /* the 8 x 2 tile's B, the 8 x 48 + 1 / + 4 tiles' extra columns */
  const float *edge_src = NULL;
  args.xcol = edge_b;
#endif
  MRT_ASSERT(mr * nr <= 384 && mr <= 32 && nr <= 64);
#if MRT_SGEMM_TILE_RES
  /* The post stage gets the epilogue without the residual the tiles add, and
   * is skipped when that was all it had to do. */
  const mrt_sgemm_epilogue *post = ep && ep->post ? ep : NULL;
  /* (the families whose tiles add it: rows of tiles, see gemm.h) */
  const float *res = ep && (kern == &mrt_sgemm_avx512 || kern == &mrt_sgemm_avx2) ? ep->res : NULL;
  float tmp_res[384];
  mrt_sgemm_epilogue post_ep;
  if (res) {
    args.post_lo = ep->post_lo;
    args.post_hi = ep->post_hi;
    post_ep = *ep;
    post_ep.res = NULL;
    post = post && (ep->leaky || ep->act) ? &post_ep : NULL;
  }
#endif

  /* A of one k block and one block of rows is packed once, not once per
   * block of B's columns (BERT-small's 128 x 256 @ 256 x 1024: three; the
   * FusedMatMul 404-413 -> 389-399 us). Not under --tune size. */
#if MRT_TUNE_SIZE
  const int a_keep = 0;
#else
  const int a_keep = k <= MRT_SGEMM_KC && i_hi - i_lo <= mc;
#endif
  int a_ready = 0;
  for (size_t j0 = j_lo; j0 < j_hi; j0 += nc) {
    const size_t ncur = mrt_min(nc, j_hi - j0);
    for (size_t k0 = 0; k0 < k; k0 += MRT_SGEMM_KC) {
      const size_t kcur = mrt_min(MRT_SGEMM_KC, k - k0);
      const float *bp;
      if (b->packed) {
        bp = b->packed + k0 * npad + j0 * kcur;
      } else {
#if MRT_SGEMM_AVX512
        /* In place: whole panels; the ragged last one is packed. */
        bskip = direct_b ? ncur / nr * nr : 0;
        if (bskip < ncur) mrt_sgemm_pack_b_block(kern, nr, b, k0, kcur, j0 + bskip, ncur - bskip, bbuf);
#else
        mrt_sgemm_pack_b_block(kern, nr, b, k0, kcur, j0, ncur, bbuf);
#endif
        bp = bbuf;
      }
      args.accumulate = accumulate || k0 > 0;
      args.last = k0 + kcur == k;
#if MRT_SGEMM_AVX512
      edge_src = NULL; /* B's block was just packed, maybe where the last one was */
#endif
      for (size_t i0 = i_lo; i0 < i_hi; i0 += mc) {
        const size_t mcur = mrt_min(mc, i_hi - i0);
        const float *ap;
        if (a->packed) {
          ap = a->packed + k0 * mpad + i0 * kcur;
        } else if (a_ready) {
          ap = abuf;
        } else if (a->pack) {
          a->pack(a->pack_ctx, k0, kcur, i0, mcur, mr, abuf);
          ap = abuf;
          a_ready = a_keep;
        } else {
#if MRT_SGEMM_PACK_AT
          if (a->cs == 1 && a->rs != 1 && kern != &mrt_sgemm_sse)
            mrt_sgemm_pack_at__avx2(a->data, a->rs, a->scale, i0, mcur, k0, kcur, mr, abuf);
          else
#endif
          mrt_sgemm_pack_strided(a->data, a->rs, a->cs, a->scale, i0, mcur, k0, kcur, mr, abuf);
          ap = abuf;
          a_ready = a_keep;
        }
#if MRT_SGEMM_AVX512
        /* One or four columns past whole panels (N = 49, 196) and whole row
         * tiles: the last full panel's tiles take them (8 x 48 + 1, + 4), from
         * a copy of the ragged panel's columns made once a k block. */
        const size_t xw = ncur % nr; /* the ragged panel's columns */
        const int xcol = kern == &mrt_sgemm_avx512 && bskip == 0 && ncur > nr && (xw == 1 || xw == 4) &&
                         mcur % mr == 0;
        if (xcol && edge_src != bp)
          mrt_sgemm_edge_copy(kcur, bp + (ncur - xw) * kcur, nr, xw, xw == 1 ? 1 : 8, edge_b), edge_src = bp;
        const size_t tiles_m = (mcur + mr - 1) / mr, tiles_n = (ncur + nr - 1) / nr;
        for (size_t to = 0; to < (rows_first ? tiles_m : tiles_n); ++to) {
          for (size_t ti = 0; ti < (rows_first ? tiles_n : tiles_m); ++ti) {
            const size_t ir = (rows_first ? to : ti) * mr, jr = (rows_first ? ti : to) * nr;
            const size_t nn = mrt_min(nr, ncur - jr), j = j0 + jr;
#else
        for (size_t jr = 0; jr < ncur; jr += nr) {
          const size_t nn = mrt_min(nr, ncur - jr), j = j0 + jr;
          for (size_t ir = 0; ir < mcur; ir += mr) {
#endif
            const size_t mm = mrt_min(mr, mcur - ir), i = i0 + ir;
#if MRT_SGEMM_AVX512
            if (xcol && jr == ncur - xw) continue; /* done by the 8 x 48 + 1 / + 4 tiles */
#endif
            float *cp = c + i * ldc + j;
            args.bias_row = ep && ep->bias_row ? ep->bias_row + i : NULL;
            args.bias_col = ep && ep->bias_col ? ep->bias_col + j : NULL;
#if MRT_SGEMM_TILE_RES
            const float *rp = res ? res + i * ldc + j : NULL;
            args.res = args.last ? rp : NULL;
#endif
#if MRT_SGEMM_AVX512
            /* AVX2's tile reading B in place: whole tiles straight into C, the
             * partial last row panel through the edge copy below (A's panel is
             * zero past m). */
            const int b_direct = jr < bskip && kern == &mrt_sgemm_avx2;
            if (jr < bskip && !b_direct) {
              (kcur <= 48 || (!rows_first && kcur <= 96) ? mrt_sgemm_kernel_8x48bn__avx512 : mrt_sgemm_kernel_8x48b__avx512)(
                  kcur, ap + ir * kcur, b->data + k0 * b->rs + j, cp, ldc, &args);
              continue;
            }
            const float *bt = b_direct ? b->data + k0 * b->rs + j : bp + (jr - bskip) * kcur;
            const mrt_sgemm_tile_fn full = b_direct ? mrt_sgemm_kernel_6x16b__avx2 : kern->tile;
#else
            const int b_direct = 0;
            const float *bt = bp + (jr - bskip) * kcur;
            const mrt_sgemm_tile_fn full = kern->tile;
#endif
            if (mm == mr && nn == nr) {
#if MRT_SGEMM_AVX512
              if (xcol && jr + nr == ncur - xw) {
                (xw == 1 ? mrt_sgemm_kernel_8x49__avx512 : mrt_sgemm_kernel_8x52__avx512)(kcur, ap + ir * kcur, bt, cp,
                                                                                          ldc, &args);
                continue;
              }
#endif
              full(kcur, ap + ir * kcur, bt, cp, ldc, &args);
              continue;
            }
            /* Edge tile. A partial column range goes through a local copy so
             * nothing is read or written past C or the biases; a few
             * partial rows run one at a time with the 1-row kernel, so an
             * M = 1 GEMV costs one row, not mr. */
            if (args.bias_col && nn < nr) {
              memcpy(tmp_col, args.bias_col, nn * sizeof(float));
              memset(tmp_col + nn, 0, (nr - nn) * sizeof(float));
              args.bias_col = tmp_col;
            }
            if (mm * 3 > mr || b_direct) {
              mrt_sgemm_tile_fn tile = full;
              for (int t = 0; t < MRT_SGEMM_NARROW; ++t)
                if (kern->narrow[t] && nn <= kern->narrow_w[t]) {
                  tile = kern->narrow[t];
                  break;
                }
              if (args.bias_row && mm < mr) {
                memcpy(tmp_row, args.bias_row, mm * sizeof(float));
                memset(tmp_row + mm, 0, (mr - mm) * sizeof(float));
                args.bias_row = tmp_row;
              }
              if (args.accumulate)
                for (size_t r = 0; r < mm; ++r) memcpy(tmp_c + r * nr, cp + r * ldc, nn * sizeof(float));
#if MRT_SGEMM_TILE_RES
              /* The residual in the local copy's layout; rows past mm are
               * computed but never stored, so their values do not matter. */
              if (args.res) {
                for (size_t r = 0; r < mm; ++r) memcpy(tmp_res + r * nr, rp + r * ldc, nn * sizeof(float));
                args.res = tmp_res;
              }
#endif
#if MRT_SGEMM_AVX512
              if (tile == mrt_sgemm_kernel_8x2__avx512) {
                /* Its two columns from a compact copy, made once for every
                 * tile of this panel and k block: in the panel each k step's
                 * two floats sat on a cache line of their own, every tile
                 * reading kcur lines for 8 bytes each (1x1 960 -> 320 on
                 * 7 x 7, one thread: 297 -> 285 us; 257 on 6 x 8). */
                if (edge_src != bt) mrt_sgemm_edge_copy(kcur, bt, nr, 2, 1, edge_b), edge_src = bt;
                tile(kcur, ap + ir * kcur, edge_b, tmp_c, nr, &args);
              } else
#endif
                tile(kcur, ap + ir * kcur, bt, tmp_c, nr, &args);
              for (size_t r = 0; r < mm; ++r) memcpy(cp + r * ldc, tmp_c + r * nr, nn * sizeof(float));
              continue;
            }
            const float *bias_row = args.bias_row;
            for (size_t r = 0; r < mm; ++r) {
              float *dst = nn == nr ? cp + r * ldc : tmp_c;
              if (nn < nr && args.accumulate) memcpy(tmp_c, cp + r * ldc, nn * sizeof(float));
              args.bias_row = bias_row ? bias_row + r : NULL;
#if MRT_SGEMM_TILE_RES
              if (args.res) {
                args.res = rp + r * ldc;
                if (nn < nr) {
                  memcpy(tmp_res, args.res, nn * sizeof(float));
                  args.res = tmp_res;
                }
              }
#endif
              kern->row(kcur, ap + ir * kcur + r, bt, dst, nr, &args);
              if (nn < nr) memcpy(cp + r * ldc, tmp_c, nn * sizeof(float));
            }
          }
        }
        /* The post stage on this mc x nc block of C once its tiles are stored
         * (in L2): rows of up to nc floats, so the residual streams in
         * (hardware prefetch) and the activation is one call a row. Per tile,
         * the residual's 48-float row pieces each waited on memory and the
         * activation cost a call per 48 floats: slower than the unfused ops. */
#if MRT_SGEMM_TILE_RES
        if (args.last && post) post->post(post, i0, j0, mcur, ncur, c + i0 * ldc + j0, ldc);
#else
        if (args.last && ep && ep->post) ep->post(ep, i0, j0, mcur, ncur, c + i0 * ldc + j0, ldc);
#endif
      }
    }
  }
}

/*
 * Threads. The product is cut along N (whole nr panels) when A is packed
 * already (Conv's weights: each thread packs only its own im2col columns) and
 * along M when B is (Gemm / MatMul weights), else along the longer side; each
 * task writes its own block of C with its own thread's scratch. When A is
 * packed but has more rows than B has columns (3x3 convolutions on 14x14 and
 * smaller images, 1x1 ones with many output channels), a split along N would
 * have every thread stream all of A, the weights, for a few columns: the
 * threads then pack all of B once into a shared buffer, each its columns, and
 * split C along M, each reading only its rows of A. Below
 * MRT_SGEMM_TASK_MACS multiply-adds per task the loop stays on the caller's
 * thread: waking a worker costs more than it saves.
 */
#define MRT_SGEMM_TASK_MACS ((size_t)1 << 17)

#if MRT_ENABLE_THREADS

typedef struct mrt_sgemm_job {
  const mrt_sgemm_kernel *kern;
  size_t m, n, k, ldc, stride, unit, per_task;
  const mrt_sgemm_src *a, *b;
  const mrt_sgemm_epilogue *ep;
  float *c;
  char *scratch;
  int accumulate, split_n;
  float *shared_b; /* the shared packed B being filled (mrt_sgemm_pack_task) */
} mrt_sgemm_job;

/* B shared between the threads (see above)? The same answer at prepare
 * (scratch size) and run. */
static int mrt_sgemm_shares_b(size_t m, size_t n, int a_packed, int b_packed, size_t threads) {
  return threads > 1 && a_packed && !b_packed && m >= n;
}

/* One (k block, run of `unit` panels) piece of the whole of B, packed into
 * the shared buffer laid out as a pre-packed B (gemm.h); per_task is the
 * number of runs a k block. */
static void mrt_sgemm_pack_task(void *varg, size_t task, size_t thread) {
  const mrt_sgemm_job *j = (const mrt_sgemm_job *)varg;
  const size_t nr = j->kern->nr, npad = mrt_round_up(j->n, nr);
  const size_t k0 = task / j->per_task * MRT_SGEMM_KC, kcur = mrt_min(MRT_SGEMM_KC, j->k - k0);
  const size_t j0 = task % j->per_task * j->unit * nr, ncur = mrt_min(j->unit * nr, j->n - j0);
  (void)thread;
  mrt_sgemm_pack_b_block(j->kern, nr, j->b, k0, kcur, j0, ncur, j->shared_b + k0 * npad + j0 * kcur);
}

static void mrt_sgemm_task(void *varg, size_t task, size_t thread) {
  const mrt_sgemm_job *j = (const mrt_sgemm_job *)varg;
  const size_t total = j->split_n ? j->n : j->m;
  const size_t lo = task * j->per_task * j->unit;
  if (lo >= total) return;
  const size_t hi = mrt_min(total, lo + j->per_task * j->unit);
  void *scratch = j->scratch + thread * j->stride;
  if (j->split_n)
    mrt_sgemm_range(j->kern, j->m, j->n, j->k, j->a, j->b, j->accumulate, j->ep, j->c, j->ldc, scratch, 0,
                    j->m, lo, hi);
  else
    mrt_sgemm_range(j->kern, j->m, j->n, j->k, j->a, j->b, j->accumulate, j->ep, j->c, j->ldc, scratch, lo,
                    hi, 0, j->n);
}

/* Splitting `total` rows or columns in panels of `unit` into tasks of `per`
 * panels, at most *tasks of them, on `threads` threads: the per that leaves
 * the busiest thread least (tasks dealt as the pool deals them, thread t the
 * run [ceil(t n / T), ceil((t + 1) n / T)); a short last task counts short),
 * the smallest such. Sets *tasks and *per_task, returns that thread's rows or
 * columns. */
static size_t mrt_sgemm_share(size_t total, size_t unit, size_t *tasks, size_t threads, size_t *per_task) {
  const size_t units = (total + unit - 1) / unit, tmax = mrt_min(*tasks, units);
  const size_t lo = (units + tmax - 1) / tmax, hi = (units + mrt_min(threads, tmax) - 1) / mrt_min(threads, tmax);
  size_t best = (size_t)-1;
  for (size_t per = lo; per <= hi; ++per) {
    const size_t used = (units + per - 1) / per, span = per * unit;
    size_t most = 0;
    for (size_t t = 0; t < threads && t < used; ++t) {
      const size_t b = (t * used + threads - 1) / threads, e = ((t + 1) * used + threads - 1) / threads;
      const size_t load = e > b ? mrt_min(total, e * span) - b * span : 0;
      most = load > most ? load : most;
    }
    if (most < best) {
      best = most;
      *tasks = used;
      *per_task = per;
    }
  }
  return best;
}

MRT_PREPARE_CODE
size_t mrt_sgemm_scratch_size_mt(const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k, int a_packed,
                                 int b_packed, size_t threads) {
  const size_t own = threads * mrt_round_up(mrt_sgemm_scratch_size(kern, m, n, k, a_packed, b_packed), 64);
  if (!mrt_sgemm_shares_b(m, n, a_packed, b_packed, threads)) return own;
  return own + mrt_sgemm_packed_b_size(kern, k, n) * sizeof(float);
}

void mrt_sgemm_mt(mrt_pool *pool, const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k,
                  const mrt_sgemm_src *a, const mrt_sgemm_src *b, int accumulate,
                  const mrt_sgemm_epilogue *ep, float *MRT_RESTRICT c, size_t ldc, void *scratch) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    mrt_sgemm_epilogue_only(m, n, accumulate, ep, c, ldc);
    return;
  }
  const size_t tasks = mrt_pool_tasks(pool, m * n * k, MRT_SGEMM_TASK_MACS);
  if (tasks <= 1) {
    mrt_sgemm_range(kern, m, n, k, a, b, accumulate, ep, c, ldc, scratch, 0, m, 0, n);
    return;
  }
  /* A split along N with A packed at run time packs all of A in every task
   * (along M with B, all of B): one task a thread then. Each side's split is
   * judged by the busiest thread's share of whole panels; the other side
   * wins only when clearly better (it may pack the whole other operand per
   * thread): N = 49 is a 48-column panel and a 1-column one, and split along
   * N one thread would do nearly all of it. */
  const size_t threads = mrt_pool_threads(pool);
  /* A packed at prepare, B read in place by the AVX-512 tiles (mrt_sgemm_range)
   * and few panels of N a thread (1x1 convolutions on 14 x 14 planes: 5
   * panels): one task a thread, so the split along M wins unless clearly
   * worse balanced. Dealt a panel a task, the two threads wrote the line each
   * C row (784 B on 14 x 14) shares between neighbouring panels, and every
   * task streamed all of A; whole 8-row blocks of C are whole lines, and each
   * thread reads half of A. MobileNetV2, 2 threads, profile_nodes, 4
   * interleaved rounds: 1x1 576 -> 96 on 14 x 14 + residual 92-101 -> 83-90
   * us, 384 -> 96 59-66 -> 54-60, 384 -> 64 + residual 46-50 -> 42-48. Other
   * families pack B per task along M: unchanged. Measured and not taken: an
   * even split of the columns at 64-byte bounds instead, a run a thread (96
   * and 100 of 196; B in place takes any first column), so that each thread
   * reads half of B (the depthwise output: a quarter of it from the other
   * core, not half): slower, 576 -> 96 + residual 103 / 104 -> 113 and 106 /
   * 104 -> 112 us, 384 -> 64 + residual 51 / 51 -> 55, 384 -> 96 66 / 67 ->
   * 71 (per-node best of 20 x 10 runs, interleaved, A/A control): each
   * thread then streams all of A.
   * The expands (K <= 48, M >= 4 K, B read in place) on planes up to 28 x 28
   * split along M too, unless clearly worse balanced, so that the depthwise
   * after them, split by channels, reads the channels its own core wrote.
   * MobileNetV2, 2 threads, profile_nodes, per-node best of 200, 4
   * interleaved rounds: the 28 x 28 stage (features 4-7) 487 -> 468 us on
   * average (463-508 -> 464-476), its depthwise layers 8-11 us faster each
   * (192 x 28 x 28 -> 14 x 14 stride 2: 25 -> 15), the expands within 4 us; EfficientNet-B0's 28 x 28
   * nodes 451-482 -> 423-465. On larger planes the loss on the expand (each
   * thread reads all of B, half of it from the other core) ate the gain:
   * 16 -> 96 on 112 x 112 157 -> 176 us for 152 -> 140 on the depthwise. */
#if MRT_SGEMM_AVX512
  const int in_place = kern == &mrt_sgemm_avx512 && a->packed && mrt_sgemm_b_in_place(kern, b, m, k);
  const int few = in_place && (n + kern->nr - 1) / kern->nr <= 4 * threads;
  const int expand = in_place && k <= 48 && m >= 4 * k && n <= 28 * 28;
#else
  const int few = 0, expand = 0;
#endif
  size_t tn = a->packed && !few && !expand ? tasks : mrt_min(tasks, threads), tm = b->packed ? tasks : mrt_min(tasks, threads);
  size_t per_n, per_m;
  const size_t share_n = mrt_sgemm_share(n, kern->nr, &tn, threads, &per_n) * m;
  const size_t share_m = mrt_sgemm_share(m, kern->mr, &tm, threads, &per_m) * n;
  int split_n = a->packed ? 1 : b->packed ? 0 : n >= m;
  if (split_n ? share_m * 8 < share_n * 7 : share_n * 8 < share_m * 7) split_n = !split_n;
  if (expand && split_n && share_m * 7 <= share_n * 8) split_n = 0;
  const size_t stride =
      mrt_round_up(mrt_sgemm_scratch_size(kern, m, n, k, a->packed != NULL, b->packed != NULL), 64);
  if (split_n && mrt_sgemm_shares_b(m, n, a->packed != NULL, b->packed != NULL, threads)) {
    /* Taken unless clearly worse balanced than the split along N. One task
     * a thread: each task reads all of the shared B, and smaller tasks
     * measured slower (3x3 on 14x14, 256 channels: 812 against 770 us). */
    size_t ts = mrt_min(tasks, threads), per_s;
    const size_t share_s = mrt_sgemm_share(m, kern->mr, &ts, threads, &per_s) * n;
    if (ts > 1 && share_s * 7 <= share_n * 8) {
      /* Packing tasks: (k block, run of panels) pieces, at least 2 a thread. */
      const size_t kblocks = (k + MRT_SGEMM_KC - 1) / MRT_SGEMM_KC, panels = (n + kern->nr - 1) / kern->nr;
      size_t runs = mrt_min(panels, (2 * threads + kblocks - 1) / kblocks);
      const size_t per_run = (panels + runs - 1) / runs;
      runs = (panels + per_run - 1) / per_run;
      mrt_sgemm_job job = {kern, m, n, k, ldc, stride, per_run, runs, a, b, ep, c, (char *)scratch, accumulate, 0,
                           (float *)((char *)scratch + threads * stride)};
      mrt_parallel_for(pool, kblocks * runs, mrt_sgemm_pack_task, &job);
      mrt_sgemm_src bs = {0};
      bs.packed = job.shared_b;
      job.b = &bs;
      job.unit = kern->mr;
      job.per_task = per_s;
      mrt_parallel_for(pool, ts, mrt_sgemm_task, &job);
      return;
    }
  }
  if ((split_n ? tn : tm) <= 1) {
    mrt_sgemm_range(kern, m, n, k, a, b, accumulate, ep, c, ldc, scratch, 0, m, 0, n);
    return;
  }
  mrt_sgemm_job job = {kern, m, n, k, ldc, stride,
                       split_n ? kern->nr : kern->mr, split_n ? per_n : per_m,
                       a, b, ep, c, (char *)scratch, accumulate, split_n, NULL};
  const size_t ntasks = split_n ? tn : tm;
  mrt_parallel_for(pool, ntasks, mrt_sgemm_task, &job);
}

void mrt_sgemm(const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k, const mrt_sgemm_src *a,
               const mrt_sgemm_src *b, int accumulate, const mrt_sgemm_epilogue *ep,
               float *MRT_RESTRICT c, size_t ldc, void *scratch) {
  mrt_sgemm_mt(NULL, kern, m, n, k, a, b, accumulate, ep, c, ldc, scratch);
}

#else /* no threads: gemm.h maps the _mt names onto these */

void mrt_sgemm(const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k, const mrt_sgemm_src *a,
               const mrt_sgemm_src *b, int accumulate, const mrt_sgemm_epilogue *ep,
               float *MRT_RESTRICT c, size_t ldc, void *scratch) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    mrt_sgemm_epilogue_only(m, n, accumulate, ep, c, ldc);
    return;
  }
  mrt_sgemm_range(kern, m, n, k, a, b, accumulate, ep, c, ldc, scratch, 0, m, 0, n);
}

#endif

MRT_PREPARE_CODE
mrt_status mrt_sgemm_activation(mrt_ctx *ctx, const mrt_node *node, float *lo, float *hi) {
  const float inf = __builtin_inff();
  *lo = -inf;
  *hi = inf;
  if (mrt_node_attr(node, "activation") == NULL) return MRT_STATUS_OK;
  if (mrt_attr_string_is(node, "activation", "", "Relu")) {
    *lo = 0.0f;
    return MRT_STATUS_OK;
  }
  if (mrt_attr_string_is(node, "activation", "", "Clip")) {
    const float *p = NULL;
    const uint32_t np = mrt_attr_floats(node, "activation_params", &p);
    if (np != 0 && np != 2)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "activation_params of Clip must hold [min, max], got %u values", np);
    /* min > max gives max everywhere, as Clip (numpy.clip) does: the clamp
     * applies the lower bound first. */
    if (np == 2) {
      *lo = p[0];
      *hi = p[1];
    }
    return MRT_STATUS_OK;
  }
  return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                       "activation must be \"Relu\" or \"Clip\"");
}

/* ------------------------------------------------------------------------ */
/* Gemm core (Gemm, FusedGemm)                                               */
/* ------------------------------------------------------------------------ */

/* How C joins the product: not at all, as a bias the GEMM epilogue adds
 * (per row or per column, beta already applied), or copied into Y first as
 * beta * broadcast(C) and accumulated onto (scalar, (M, N), or any C that is
 * not constant and needs scaling). */
enum { MRT_GEMM_C_NONE = 0, MRT_GEMM_C_ROW = 1, MRT_GEMM_C_COL = 2, MRT_GEMM_C_FILL = 3 };

typedef struct mrt_gemm_params {
  const mrt_sgemm_kernel *kern;
  size_t m, n, k;
  size_t a_rs, a_cs, b_rs, b_cs;
  size_t c_rows, c_cols; /* C broadcast shape: 1 or m, 1 or n */
  float alpha, beta, lo, hi;
  int c_mode;
  const float *bias;     /* ROW / COL: beta * C (params copy) or C itself (beta == 1) */
  float *packed_a, *packed_b;
} mrt_gemm_params;

MRT_PREPARE_CODE
mrt_status mrt_gemm_core_prepare_f32(mrt_node *node, mrt_ctx *ctx, float lo, float hi) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 3, 1, 1);
  if (st != MRT_STATUS_OK) return st;
  const mrt_tensor *a = node->inputs[0], *b = node->inputs[1], *y = node->outputs[0];
  const mrt_tensor *c = node->n_inputs > 2 ? node->inputs[2] : NULL;
  if (!a || !b || !y)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A, B and Y are required");
  if ((st = mrt_check_dtype(ctx, node, a, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, b, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if (c && (st = mrt_check_dtype(ctx, node, c, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if (a->ndim != 2 || b->ndim != 2 || y->ndim != 2)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "A, B and Y must be 2-D (got rank %u, %u, %u)", a->ndim, b->ndim, y->ndim);
  const int64_t ta = mrt_attr_int(node, "transA", 0), tb = mrt_attr_int(node, "transB", 0);
  const int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1];
  const int64_t kb = tb ? b->dims[1] : b->dims[0], n = tb ? b->dims[0] : b->dims[1];
  if (kb != k)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "inner dimensions differ: op(A) is %lld x %lld, op(B) is %lld x %lld",
                         (long long)m, (long long)k, (long long)kb, (long long)n);
  if (y->dims[0] != m || y->dims[1] != n)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "Y must be %lld x %lld, got %lld x %lld",
                         (long long)m, (long long)n, (long long)y->dims[0], (long long)y->dims[1]);

  mrt_gemm_params *p = (mrt_gemm_params *)mrt_ctx_alloc(ctx, sizeof(*p));
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  p->kern = mrt_sgemm_kernel_select();
  p->m = (size_t)m;
  p->n = (size_t)n;
  p->k = (size_t)k;
  p->a_rs = ta ? 1 : p->k;
  p->a_cs = ta ? p->m : 1;
  p->b_rs = tb ? 1 : p->n;
  p->b_cs = tb ? p->k : 1;
  p->alpha = mrt_attr_float(node, "alpha", 1.0f);
  p->beta = mrt_attr_float(node, "beta", 1.0f);
  p->lo = lo;
  p->hi = hi;

  if (c && p->beta != 0.0f) {
    /* Unidirectional broadcast of C to (M, N): align trailing dims. */
    int64_t cr = 1, cc = 1;
    if (c->ndim > 2)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "C has rank %u, at most 2 allowed",
                           c->ndim);
    if (c->ndim >= 1) cc = c->dims[c->ndim - 1];
    if (c->ndim == 2) cr = c->dims[0];
    if ((cr != 1 && cr != m) || (cc != 1 && cc != n))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "C of shape (%lld, %lld) does not broadcast to (%lld, %lld)", (long long)cr,
                           (long long)cc, (long long)m, (long long)n);
    p->c_rows = (size_t)cr;
    p->c_cols = (size_t)cc;
    const int row = cr == m && cc == 1 && m > 1, col = cr == 1 && cc == n && n > 1;
    const int usable = c->is_constant && c->data != NULL;
    if ((row || col) && (p->beta == 1.0f || usable)) {
      p->c_mode = row ? MRT_GEMM_C_ROW : MRT_GEMM_C_COL;
      if (p->beta != 1.0f) {
        const size_t len = row ? p->m : p->n;
        float *sc = (float *)mrt_ctx_alloc(ctx, len * sizeof(float));
        if (!sc) return MRT_STATUS_OUT_OF_MEMORY;
        for (size_t i = 0; i < len; ++i) sc[i] = p->beta * ((const float *)c->data)[i];
        p->bias = sc;
      }
    } else {
      p->c_mode = MRT_GEMM_C_FILL;
    }
  }

  /* Constant operands are packed once; alpha rides on whichever is packed
   * at prepare (or on A's run-time packing). */
  const int pack_b = b->is_constant && b->data != NULL;
  const int pack_a = !pack_b && a->is_constant && a->data != NULL;
  if (pack_b) {
    p->packed_b = (float *)mrt_ctx_alloc(ctx, mrt_sgemm_packed_b_size(p->kern, p->k, p->n) * sizeof(float) + 64);
    if (!p->packed_b) return MRT_STATUS_OUT_OF_MEMORY;
    p->packed_b = (float *)(((uintptr_t)p->packed_b + 63) & ~(uintptr_t)63);
    mrt_sgemm_pack_b(p->kern, p->k, p->n, (const float *)b->data, p->b_rs, p->b_cs, p->alpha,
                     p->packed_b);
  } else if (pack_a) {
    p->packed_a = (float *)mrt_ctx_alloc(ctx, mrt_sgemm_packed_a_size(p->kern, p->m, p->k) * sizeof(float) + 64);
    if (!p->packed_a) return MRT_STATUS_OUT_OF_MEMORY;
    p->packed_a = (float *)(((uintptr_t)p->packed_a + 63) & ~(uintptr_t)63);
    mrt_sgemm_pack_a(p->kern, p->m, p->k, (const float *)a->data, p->a_rs, p->a_cs, p->alpha,
                     p->packed_a);
  }
  mrt_ctx_request_scratch(ctx, mrt_sgemm_scratch_size_mt(p->kern, p->m, p->n, p->k, pack_a, pack_b,
                                                         mrt_ctx_threads(ctx)));
  node->params = p;
  return MRT_STATUS_OK;
}

void mrt_gemm_core_run_f32(const mrt_node *node, void *scratch) {
  const mrt_gemm_params *p = (const mrt_gemm_params *)node->params;
  const float *a = (const float *)node->inputs[0]->data;
  const float *b = (const float *)node->inputs[1]->data;
  const float *c = p->c_mode != MRT_GEMM_C_NONE ? (const float *)node->inputs[2]->data : NULL;
  float *y = (float *)node->outputs[0]->data;

  mrt_sgemm_src sa = {0}, sb = {0};
  if (p->packed_b) {
    sb.packed = p->packed_b;
    sa.scale = 1.0f;
  } else {
    sb.data = b;
    sb.rs = p->b_rs;
    sb.cs = p->b_cs;
    sb.scale = 1.0f;
    sa.scale = p->alpha;
  }
  sa.packed = p->packed_a;
  sa.data = a;
  sa.rs = p->a_rs;
  sa.cs = p->a_cs;

  mrt_sgemm_epilogue ep = {NULL, NULL, p->lo, p->hi};
  const float *bias = p->bias ? p->bias : c;
  if (p->c_mode == MRT_GEMM_C_ROW) ep.bias_row = bias;
  if (p->c_mode == MRT_GEMM_C_COL) ep.bias_col = bias;
  const int fill = p->c_mode == MRT_GEMM_C_FILL;
  if (fill)
    for (size_t i = 0; i < p->m; ++i) {
      const float *cr = c + (p->c_rows > 1 ? i * p->c_cols : 0);
      for (size_t j = 0; j < p->n; ++j) y[i * p->n + j] = p->beta * cr[p->c_cols > 1 ? j : 0];
    }
  mrt_sgemm_mt(node->pool, p->kern, p->m, p->n, p->k, &sa, &sb, fill, &ep, y, p->n, scratch);
}
