/*
 * Blocked, packed single-precision GEMM shared by Conv, Gemm and MatMul.
 *
 *   C[i][j] = (accumulate ? C[i][j] : 0) + sum_k A(i,k) * B(k,j)
 *             (+ bias_row[i] + bias_col[j], then clamped to [lo, hi])
 *
 * A (m x k) and B (k x n) are read through mrt_sgemm_src: either already
 * packed (weights, packed once at prepare with mrt_sgemm_pack_a/_b), a
 * strided matrix packed block by block at run time, or a custom packer (Conv
 * writes im2col columns straight into the packed layout).
 *
 * Packed layout. The k range is cut in blocks of MRT_SGEMM_KC. A block that
 * starts at k0 with length kc holds, for A, the rows in panels of mr:
 * panel p is kc groups of mr floats (row p*mr + r of group q is A(p*mr+r, k0+q)),
 * rows past m are zero. A whole packed A stores the block of k0 at offset
 * k0 * round_up(m, mr); B is the same with columns in panels of nr. This lets
 * the driver find any (k block, panel) of a pre-packed operand with no index.
 */
#ifndef MRT_GEMM_H
#define MRT_GEMM_H

#include "mrt_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* k block: a B micro-panel (MRT_SGEMM_KC x nr floats) stays in L1 (or L2:
 * 256 measured best for the 8 x 48 AVX-512 tile too, against 64, 128, 192). */
#define MRT_SGEMM_KC 256

/* AVX-512F micro-kernels (and the conv loops that go with them) on x86_64,
 * except Android, whose x86_64 ABI runs on emulators and Chromebooks: 11 KB of
 * zmm code in every app's AAR would buy nothing there; and not under --tune size
 * (config.h's MRT_TUNE_SIZE), which keeps the AVX2 and SSE copies only. */
#if defined(__x86_64__) && !defined(__ANDROID__) && !MRT_TUNE_SIZE
#define MRT_SGEMM_AVX512 1
#define MRT_SGEMM_NARROW 3
#else
#define MRT_SGEMM_AVX512 0
#define MRT_SGEMM_NARROW 2
#endif

/* The residual of a FusedConv joins the AVX-512 and AVX2 tiles in registers
 * (the last k block): C = clamp(clamp(acc + bias, lo, hi) + res, post_lo,
 * post_hi), so the post stage need not pass over C again and read the
 * residual. Those tiles then walk rows of C, so the residual streams in along
 * its rows; by columns of tiles each tile's residual rows lay a plane row
 * apart and missed (AVX2, ResNet-50's 1x1 64 -> 256 on 56 x 56 + residual:
 * 1478-1772 us by the post stage, 2057-2422 in column-walking tiles, 1172-1276
 * in row-walking ones). SSE, NEON (rows of tiles unmeasured there), --tune
 * size and Android builds keep the post stage, which adds the residual per
 * block of C. */
#define MRT_SGEMM_TILE_RES MRT_SGEMM_AVX512

/* Extra per-tile arguments, applied only on the last k block. */
typedef struct mrt_sgemm_tile_args {
  const float *bias_row; /* mr values or NULL */
  const float *bias_col; /* nr values or NULL */
  float lo, hi;          /* clamp bounds (-inf, +inf for none) */
  int accumulate;        /* add to C instead of overwriting it */
  int last;              /* last k block: apply bias and clamp */
#if MRT_SGEMM_TILE_RES
  const float *res;      /* residual tile, C's row stride (the tile's ldc), or NULL */
  float post_lo, post_hi; /* clamp after the residual */
#endif
#if MRT_SGEMM_AVX512
  size_t ldb;            /* B's row stride for the tile that reads B in place (gemm.c) */
  const float *xcol;     /* the 8 x 48 + 1 / + 4 tiles' extra columns of B (gemm.c) */
#endif
} mrt_sgemm_tile_args;

/* A full mr x nr tile: C = (acc ? C : 0) + Apanel * Bpanel (+ epilogue). */
typedef void (*mrt_sgemm_tile_fn)(size_t kc, const float *MRT_RESTRICT a, const float *MRT_RESTRICT b,
                                  float *MRT_RESTRICT c, size_t ldc, const mrt_sgemm_tile_args *args);

/* A micro-kernel and its tile shape; the packed layout depends on mr / nr,
 * so operands are packed for the kernel chosen at prepare. */
typedef struct mrt_sgemm_kernel {
  uint32_t mr, nr;
  uint32_t mc, nc; /* cache blocks: A block mc x KC (L2), B block KC x nc (L3) */
  mrt_sgemm_tile_fn tile;
  mrt_sgemm_tile_fn row; /* 1 x nr tile reading row 0 of an mr-wide A panel: edge rows */
  /* mr x narrow_w[i] tiles reading the first columns of an nr-wide B panel,
   * narrowest first (NULL: none): a few edge columns (N = 49 = 3 * 16 + 1 for
   * a 7x7 image) cost a narrow tile, not a full one. */
  mrt_sgemm_tile_fn narrow[MRT_SGEMM_NARROW];
  uint32_t narrow_w[MRT_SGEMM_NARROW];
} mrt_sgemm_kernel;

/* The best micro-kernel for the running CPU (cpuid on x86). */
const mrt_sgemm_kernel *mrt_sgemm_kernel_select(void);

#if defined(__x86_64__)
/* The AVX2 + FMA family. Other kernels with AVX2 loops of their own
 * (depthwise Conv) use them when the selected GEMM kernel is this one, so
 * the CPU check and MINIRT_MAX_CPU_ISA decide for them too. */
extern const mrt_sgemm_kernel mrt_sgemm_avx2;
#endif
#if MRT_SGEMM_AVX512
/* The AVX-512F family (8 x 48 tiles), the same way. */
extern const mrt_sgemm_kernel mrt_sgemm_avx512;
#endif

/* Packs rows k0..k0+kc, columns j0..j0+nc of a custom operand into nr panels
 * (or, for A, columns = rows of A in mr panels), padding with zeros. */
typedef void (*mrt_sgemm_pack_fn)(const void *ctx, size_t k0, size_t kc, size_t j0, size_t nc,
                                  size_t panel, float *MRT_RESTRICT dst);

typedef struct mrt_sgemm_src {
  const float *packed;    /* whole operand packed for this kernel, or NULL */
  const float *data;      /* else strided: A(i,k) = data[i*rs + k*cs], B(k,j) = data[k*rs + j*cs] */
  size_t rs, cs;
  float scale;            /* multiplies `data` while packing (Gemm's alpha); 1 for none */
  mrt_sgemm_pack_fn pack; /* else a custom packer */
  const void *pack_ctx;
} mrt_sgemm_src;

/* An array activation y[i] = f(x[i]) (vmath.h's mrt_vmap_* functions). */
typedef void (*mrt_sgemm_act_fn)(size_t n, const float *x, float *y);

struct mrt_sgemm_epilogue;
/* A stage after the tiles' bias and clamp, on rows x cols of C (row stride
 * ldc) at (i, j) of the product. */
typedef void (*mrt_sgemm_post_fn)(const struct mrt_sgemm_epilogue *ep, size_t i, size_t j, size_t rows,
                                  size_t cols, float *c, size_t ldc);

typedef struct mrt_sgemm_epilogue {
  const float *bias_row; /* m values or NULL */
  const float *bias_col; /* n values or NULL */
  float lo, hi;
  /* NULL, or called on each mc x nc block of C once its tiles are stored
   * (last k block; the block is in L2): FusedConv's residual and activation
   * (conv_core.c), whose state follows. The code lives with its one user,
   * not in every GEMM build. */
  mrt_sgemm_post_fn post;
  const float *res;      /* residual, C's layout and row stride, or NULL */
  float post_lo, post_hi; /* clamp after the residual */
  float leaky_alpha;
  int leaky;             /* LeakyRelu by leaky_alpha */
  mrt_sgemm_act_fn act;  /* then this, or NULL */
} mrt_sgemm_epilogue;

/* That stage on rows x cols of C (row stride ldc) whose residual is res (the
 * same stride; NULL when ep->res is). */
void mrt_sgemm_post(const mrt_sgemm_epilogue *ep, const float *res, size_t rows, size_t cols, float *c,
                    size_t ldc);

/* Floats needed for a whole packed A (m x k) / B (k x n). Inline: one
 * multiply, cheaper than a call from the Conv and Gemm cores. */
static inline size_t mrt_sgemm_packed_a_size(const mrt_sgemm_kernel *kern, size_t m, size_t k) {
  return (m + kern->mr - 1) / kern->mr * kern->mr * k;
}
static inline size_t mrt_sgemm_packed_b_size(const mrt_sgemm_kernel *kern, size_t k, size_t n) {
  return (n + kern->nr - 1) / kern->nr * kern->nr * k;
}
void mrt_sgemm_pack_a(const mrt_sgemm_kernel *kern, size_t m, size_t k, const float *a, size_t rs,
                      size_t cs, float scale, float *MRT_RESTRICT dst);
void mrt_sgemm_pack_b(const mrt_sgemm_kernel *kern, size_t k, size_t n, const float *b, size_t rs,
                      size_t cs, float scale, float *MRT_RESTRICT dst);

/* Bytes of 64-byte aligned scratch mrt_sgemm needs for these operand kinds. */
size_t mrt_sgemm_scratch_size(const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k,
                              int a_packed, int b_packed);

/* C (m x n, row stride ldc) as described at the top of this file, on the
 * caller's thread. */
void mrt_sgemm(const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k, const mrt_sgemm_src *a,
               const mrt_sgemm_src *b, int accumulate, const mrt_sgemm_epilogue *ep,
               float *MRT_RESTRICT c, size_t ldc, void *scratch);

/* The same on the threads of `pool` (NULL: the caller's only), for large
 * products; scratch must hold mrt_sgemm_scratch_size_mt bytes for
 * mrt_pool_threads(pool) threads (mrt_ctx_threads at prepare). */
size_t mrt_sgemm_scratch_size_mt(const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k,
                                 int a_packed, int b_packed, size_t threads);
void mrt_sgemm_mt(mrt_pool *pool, const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k,
                  const mrt_sgemm_src *a, const mrt_sgemm_src *b, int accumulate,
                  const mrt_sgemm_epilogue *ep, float *MRT_RESTRICT c, size_t ldc, void *scratch);
#if defined(MRT_ENABLE_THREADS) && !MRT_ENABLE_THREADS
#define mrt_sgemm_scratch_size_mt(kern, m, n, k, a_packed, b_packed, threads) \
  ((void)(threads), mrt_sgemm_scratch_size(kern, m, n, k, a_packed, b_packed))
#define mrt_sgemm_mt(pool, ...) ((void)(pool), mrt_sgemm(__VA_ARGS__))
#endif

/* Fused activation of FusedConv / FusedGemm as clamp bounds: reads the
 * `activation` / `activation_params` attributes. */
mrt_status mrt_sgemm_activation(mrt_ctx *ctx, const mrt_node *node, float *lo, float *hi);

/*
 * The Gemm core, shared by Gemm and FusedGemm. It lives in this support unit,
 * compiled once, so a model using both ops does not carry two copies; lo / hi
 * are the fused activation's clamp bounds (-inf, +inf for none). (The
 * convolution core is the `conv` support unit: conv_core.h.)
 */
mrt_status mrt_gemm_core_prepare_f32(mrt_node *node, mrt_ctx *ctx, float lo, float hi);
void mrt_gemm_core_run_f32(const mrt_node *node, void *scratch);

#if defined(__x86_64__) || defined(__i386__)
typedef float mrt_v8f __attribute__((vector_size(32)));
/* The rows r[0..7] of an 8 x 8 block of floats become its columns, in
 * registers (three rounds of two-source shuffles): the AVX2 packer of
 * row-major A (gemm.c) and the dense convolution's stores into Y's rows
 * (conv_dense.h). */
__attribute__((target("avx2"))) static inline void mrt_transpose8x8(mrt_v8f r[8]) {
  mrt_v8f t[8];
  _Pragma("clang loop unroll(full)") for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  _Pragma("clang loop unroll(full)") for (int h = 0; h < 8; h += 4)
    _Pragma("clang loop unroll(full)") for (int i = 0; i < 2; ++i) {
      r[h + 2 * i] = __builtin_shufflevector(t[h + i], t[h + i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      r[h + 2 * i + 1] = __builtin_shufflevector(t[h + i], t[h + i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  _Pragma("clang loop unroll(full)") for (int i = 0; i < 4; ++i) {
    t[i] = __builtin_shufflevector(r[i], r[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    t[i + 4] = __builtin_shufflevector(r[i], r[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
  _Pragma("clang loop unroll(full)") for (int i = 0; i < 8; ++i) r[i] = t[i];
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* MRT_GEMM_H */
