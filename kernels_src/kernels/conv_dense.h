/*
 * Dense KxK convolutions without im2col on the AVX-512 and AVX2 kernels
 * (included by conv_core.c; desktop x86_64 speed builds only, like
 * conv_direct.h).
 *
 * im2col + GEMM packed every tap of every input channel into B panels: K =
 * C_in * KH * KW rows, 9x the input for a 3x3 layer, written and read back
 * from L2 (13-15 % of ResNet-50's 3x3 layers), and at 2 threads each core
 * read a B half packed by the other. Here the roles turn: the vectors run
 * along output channels and each pixel's input value is broadcast, read in
 * place from the zero-padded copy of the input (conv_core.c: tap k of pixel
 * j is xpad[kofs[k] + pos(j)], pos(j) the pixel's first tap), so nothing is
 * packed at run time and no pixel is computed twice, whatever the stride,
 * dilation or padding. The weights are packed once at prepare as [panel of
 * NC output channels][k][NC]: NC = 64 on AVX-512, 16 on AVX2.
 *
 * A tile is 6 pixels x 64 channels (24 zmm accumulators, 4 weight vectors, a
 * broadcast), on AVX2 6 pixels x 16 channels (12 ymm, as the GEMM's 6 x 16).
 * The product is cut into items of (panel, chunk of at most MRT_DENSE_JB
 * pixels), a run of them a thread; an item runs k blocks of MRT_DENSE_KC rows
 * (their weights, 16 KB, stay in L1 across the chunk's tiles, the next
 * block's prefetched), keeping the partial sums in a per-thread buffer of
 * the chunk, pixel-major, which at the end is transposed into Y's channel
 * rows with the bias and the tiles' clamp; then the post stage (residual,
 * activation) on that block of Y. A pixel's sums do not depend on the split:
 * the same bytes at every thread count.
 *
 * What the inner loop costs (one-node 3x3 models, one thread, profile_nodes
 * interleaved): the loop is 4 weight loads, 6 vbroadcastss from memory and
 * 24 register FMAs a k row, no spills. Reading every tap of a tile from one
 * address (wrong sums, a probe) ran 6-10 % faster and one channel's 9 taps
 * over and over 3-5 %: the loss is the input's lines, not the weights (every k
 * block reading block 0's weights changed nothing). Blocks of 64 rows and
 * chunks of 192 pixels keep a block's weights and its input rows in L1 with
 * room to spare (blocks of 128 and chunks of 96 had 32 KB of weights and
 * 13-16 KB of input rows in a 48 KB L1). Tried and slower: the FMAs with
 * embedded {1to16} broadcasts from memory (24 loads a row: 1.2-1.25x the time),
 * software prefetch of the next tile's input lines (a prefetch a row in the
 * loop made clang rotate the accumulators through extra moves: 1.25x; a
 * prefetch loop before each tile: 1.04-1.05x), blocks of 256 rows (64 KB
 * of weights past L1: 1.03-1.05x).
 *
 * Also measured and not taken (ResNet-50 in the profile_nodes harness, each
 * 3x3 class's time over the same run's 1x1 convolutions, 8-10 interleaved
 * rounds, so that the machine's load cancels; and one-node models):
 *  - a channel-blocked padded copy (16 channels of a pixel in one 64-byte
 *    line, k rows ordered (block, tap, channel), the copy made by 16 x 16
 *    register transposes in the padding pass): in the whole model within
 *    1 % of this layout; in one-node models with the copy left out of both,
 *    its tiles ran 3-8 % slower than on NCHW rows (each k row of a tile then
 *    reads 6 lines, not 1-2 of 6 neighbouring floats, and a 64-row block
 *    spans 4 taps' rows: 16 KB of input lines against 9 KB; cachegrind on
 *    the AVX2 tiles: 14 % more L1 read misses);
 *  - each chunk copying its own window of padded rows just before its
 *    tiles, chunk-major over the panels, the next window's input rows
 *    prefetched: 3-7 % slower (halo rows copied again, every panel's weights
 *    cycled per chunk); padding rows on first use into a per-thread copy:
 *    no better;
 *  - blocks of 128 rows with chunks of 96, 96 with 144, 32 with 192, one
 *    block of all of k (the weights then stream from L2): 1-7 % slower.
 * Leaving the padded copy out altogether (wrong sums, a probe) took 1-2 %
 * off the stride-1 classes in the whole model and 8-10 % off the stride-2
 * ones (the 1.7 MB copy of a 56 x 56 input): the copy matters only there.
 */

#define MRT_DENSE_NP 6   /* pixels a tile */
#define MRT_DENSE_NC 64  /* output channels a panel (AVX2: MRT_DENSE_NC2) */
#define MRT_DENSE_NC2 16
#define MRT_DENSE_KC 64  /* k rows a block */
#define MRT_DENSE_JB 192 /* pixels a chunk, at most (32 tiles) */
#define MRT_DENSE_MINPIX 96 /* fewer output pixels: im2col */

/* Scratch bytes per thread: a chunk's partial sums. */
#define MRT_DENSE_CT_BYTES (MRT_DENSE_JB * MRT_DENSE_NC * sizeof(float))

/* Output channels a panel on the selected kernel's family, for the dense
 * path and Winograd (0: the SSE kernel, which has neither). */
MRT_PREPARE_CODE
static size_t mrt_conv_dense_nc(const mrt_conv_params *p) {
  return p->kern == &mrt_sgemm_avx512 ? MRT_DENSE_NC : p->kern == &mrt_sgemm_avx2 ? MRT_DENSE_NC2 : 0;
}

/* The dense path for this convolution? The AVX-512 or AVX2 kernel, weights
 * constant (packed at prepare), whole panels, enough input channels that the
 * broadcasts are not the work, at least one whole chunk of pixels. */
MRT_PREPARE_CODE
static int mrt_conv_dense_pays(const mrt_conv_params *p, int w_const) {
  const size_t nc = mrt_conv_dense_nc(p);
  return w_const && nc && p->m % nc == 0 && p->c_in / p->group >= 16 && p->k[0] == 1 && p->in[0] == 1 &&
         p->out_pix >= MRT_DENSE_MINPIX && p->kvol > 1;
}

MRT_PREPARE_CODE
static mrt_status mrt_conv_dense_prepare(mrt_ctx *ctx, mrt_conv_params *p, const float *w) {
  const size_t nc = mrt_conv_dense_nc(p), panels = p->c_out / nc, kd = p->kdim;
  if ((uint64_t)p->c_out * kd > SIZE_MAX / sizeof(float) - 64) return MRT_STATUS_OUT_OF_MEMORY;
  float *dw = (float *)mrt_ctx_alloc(ctx, p->c_out * kd * sizeof(float) + 64);
  if (!dw) return MRT_STATUS_OUT_OF_MEMORY;
  dw = (float *)(((uintptr_t)dw + 63) & ~(uintptr_t)63);
  for (size_t pn = 0; pn < panels; ++pn)
    for (size_t k = 0; k < kd; ++k)
      for (size_t j = 0; j < nc; ++j) dw[(pn * kd + k) * nc + j] = w[(pn * nc + j) * kd + k];
  p->dense_w = dw;
  p->dense_nc = nc;
  return MRT_STATUS_OK;
}

/* kc rows of k of 6 pixels (their first taps at x + pos[i]) x 64 channels
 * (w: kc rows of 64), added to (acc_in) or stored over ct's 6 rows of 64. */
MRT_AVX512F static void mrt_conv_dense_tile(size_t kc, const float *MRT_RESTRICT x, const size_t *MRT_RESTRICT kofs,
                                            const ptrdiff_t *pos, const float *MRT_RESTRICT w,
                                            float *MRT_RESTRICT ct, int acc_in) {
  mrt_v16f acc[MRT_DENSE_NP][4];
  const ptrdiff_t p0 = pos[0], p1 = pos[1], p2 = pos[2], p3 = pos[3], p4 = pos[4], p5 = pos[5];
  _Pragma("clang loop unroll(full)") for (int i = 0; i < MRT_DENSE_NP; ++i)
    _Pragma("clang loop unroll(full)") for (int v = 0; v < 4; ++v) {
      if (acc_in)
        __builtin_memcpy(&acc[i][v], ct + i * MRT_DENSE_NC + v * 16, sizeof(mrt_v16f));
      else
        acc[i][v] = (mrt_v16f){0};
    }
  for (size_t q = 0; q < kc; ++q, w += MRT_DENSE_NC) {
    const float *xq = x + kofs[q];
    mrt_v16f wv[4];
    _Pragma("clang loop unroll(full)") for (int v = 0; v < 4; ++v) __builtin_memcpy(&wv[v], w + v * 16, sizeof(mrt_v16f));
    const float xs[MRT_DENSE_NP] = {xq[p0], xq[p1], xq[p2], xq[p3], xq[p4], xq[p5]};
    _Pragma("clang loop unroll(full)") for (int i = 0; i < MRT_DENSE_NP; ++i)
      _Pragma("clang loop unroll(full)") for (int v = 0; v < 4; ++v) acc[i][v] += xs[i] * wv[v];
  }
  _Pragma("clang loop unroll(full)") for (int i = 0; i < MRT_DENSE_NP; ++i)
    _Pragma("clang loop unroll(full)") for (int v = 0; v < 4; ++v)
      __builtin_memcpy(ct + i * MRT_DENSE_NC + v * 16, &acc[i][v], sizeof(mrt_v16f));
}

/* 16 x 16 floats: rows of s (stride ss) become columns of d (stride ds),
 * row i of d plus bias[i], then clamped to [lo, hi]. */
MRT_AVX512F static inline void mrt_conv_dense_t16(const float *s, size_t ss, float *d, size_t ds, const float *bias,
                                                  float lo, float hi) {
  mrt_v16f r[16], t[16];
  _Pragma("clang loop unroll(full)") for (int i = 0; i < 16; ++i) __builtin_memcpy(&r[i], s + i * ss, sizeof(mrt_v16f));
  /* Stage 1: pairs of rows, interleaved by one float. */
  _Pragma("clang loop unroll(full)") for (int i = 0; i < 16; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
  }
  /* Stage 2: by two floats, rows i and i + 2. */
  _Pragma("clang loop unroll(full)") for (int h = 0; h < 16; h += 4)
    _Pragma("clang loop unroll(full)") for (int i = 0; i < 2; ++i) {
      r[h + 2 * i] = __builtin_shufflevector(t[h + i], t[h + i + 2], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
      r[h + 2 * i + 1] = __builtin_shufflevector(t[h + i], t[h + i + 2], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    }
  /* Stage 3: by 128-bit lanes, rows i and i + 4. */
  _Pragma("clang loop unroll(full)") for (int h = 0; h < 16; h += 8)
    _Pragma("clang loop unroll(full)") for (int i = 0; i < 4; ++i) {
      t[h + i] = __builtin_shufflevector(r[h + i], r[h + i + 4], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
      t[h + i + 4] = __builtin_shufflevector(r[h + i], r[h + i + 4], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    }
  /* Stage 4: by 256-bit halves, rows i and i + 8. */
  _Pragma("clang loop unroll(full)") for (int i = 0; i < 8; ++i) {
    r[i] = __builtin_shufflevector(t[i], t[i + 8], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    r[i + 8] = __builtin_shufflevector(t[i], t[i + 8], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  }
  const mrt_v16f vlo = (mrt_v16f){0} + lo, vhi = (mrt_v16f){0} + hi;
  _Pragma("clang loop unroll(full)") for (int i = 0; i < 16; ++i) {
    const mrt_v16f v = MRT_VMIN(MRT_VMAX(r[i] + bias[i], vlo), vhi);
    __builtin_memcpy(d + i * ds, &v, sizeof(mrt_v16f));
  }
}

/* The AVX2 tile: 6 pixels x 16 channels (12 ymm accumulators, 2 weight
 * vectors, a broadcast), as the 6 x 16 GEMM tile. */
__attribute__((target("avx2,fma"))) static void mrt_conv_dense_tile__avx2(size_t kc, const float *MRT_RESTRICT x,
                                                                       const size_t *MRT_RESTRICT kofs,
                                                                       const ptrdiff_t *pos, const float *MRT_RESTRICT w,
                                                                       float *MRT_RESTRICT ct, int acc_in) {
  mrt_v8f acc[MRT_DENSE_NP][2];
  const ptrdiff_t p0 = pos[0], p1 = pos[1], p2 = pos[2], p3 = pos[3], p4 = pos[4], p5 = pos[5];
  _Pragma("clang loop unroll(full)") for (int i = 0; i < MRT_DENSE_NP; ++i)
    _Pragma("clang loop unroll(full)") for (int v = 0; v < 2; ++v) {
      if (acc_in)
        __builtin_memcpy(&acc[i][v], ct + i * MRT_DENSE_NC2 + v * 8, sizeof(mrt_v8f));
      else
        acc[i][v] = (mrt_v8f){0};
    }
  for (size_t q = 0; q < kc; ++q, w += MRT_DENSE_NC2) {
    const float *xq = x + kofs[q];
    mrt_v8f wv[2];
    _Pragma("clang loop unroll(full)") for (int v = 0; v < 2; ++v) __builtin_memcpy(&wv[v], w + v * 8, sizeof(mrt_v8f));
    const float xs[MRT_DENSE_NP] = {xq[p0], xq[p1], xq[p2], xq[p3], xq[p4], xq[p5]};
    _Pragma("clang loop unroll(full)") for (int i = 0; i < MRT_DENSE_NP; ++i)
      _Pragma("clang loop unroll(full)") for (int v = 0; v < 2; ++v) acc[i][v] += xs[i] * wv[v];
  }
  _Pragma("clang loop unroll(full)") for (int i = 0; i < MRT_DENSE_NP; ++i)
    _Pragma("clang loop unroll(full)") for (int v = 0; v < 2; ++v)
      __builtin_memcpy(ct + i * MRT_DENSE_NC2 + v * 8, &acc[i][v], sizeof(mrt_v8f));
}

/* 8 x 8 floats, as mrt_conv_dense_t16 (AVX2). */
__attribute__((target("avx2,fma"))) static inline void mrt_conv_dense_t8(const float *s, size_t ss, float *d, size_t ds,
                                                                      const float *bias, float lo, float hi) {
  mrt_v8f r[8];
  _Pragma("clang loop unroll(full)") for (int i = 0; i < 8; ++i) __builtin_memcpy(&r[i], s + i * ss, sizeof(mrt_v8f));
  mrt_transpose8x8(r);
  const mrt_v8f vlo = (mrt_v8f){0} + lo, vhi = (mrt_v8f){0} + hi;
  _Pragma("clang loop unroll(full)") for (int i = 0; i < 8; ++i) {
    const mrt_v8f v = MRT_VMIN(MRT_VMAX(r[i] + bias[i], vlo), vhi);
    __builtin_memcpy(d + i * ds, &v, sizeof(mrt_v8f));
  }
}

typedef struct mrt_dense_job mrt_dense_job;
struct mrt_dense_job {
  const mrt_conv_params *p;
  const float *x, *w, *bias, *res;
  float *y;
  char *scratch;
  size_t chunks, tiles, per_task; /* chunks a panel (of its tiles, evened out); items a task */
  void (*item)(const mrt_dense_job *jb, size_t item, size_t thread);
};

/* Item `item` (panel-major: item / chunks is the panel) on `thread`'s
 * buffer, with NC-channel panels, the TILE and TB x TB transposes (TBFN) of
 * one ISA. */
#define MRT_DENSE_ITEM(NAME, ATTR, NC, TILE, TB, TBFN)                                                       \
  ATTR static void NAME(const mrt_dense_job *jb, size_t item, size_t thread) {                                \
    const mrt_conv_params *p = jb->p;                                                                       \
    const size_t pn = item / jb->chunks, c = item % jb->chunks, pix = p->out_pix, kd = p->kdim;             \
    const size_t j0 = c * jb->tiles / jb->chunks * MRT_DENSE_NP;                                            \
    const size_t nj = mrt_min(pix, (c + 1) * jb->tiles / jb->chunks * MRT_DENSE_NP) - j0;                   \
    if (nj == 0 || j0 >= pix) return;                                                                       \
    const size_t ow = p->out[2], oh = p->out[1], xw = p->xp[2], xh = p->xp[1];                              \
    float *ct = (float *)(jb->scratch + thread * MRT_DENSE_CT_BYTES);                                       \
    /* Each pixel's first tap in the padded copy (a ragged last tile repeats                                \
     * its first pixel; those rows of ct are never read). */                                                \
    ptrdiff_t pos[MRT_DENSE_JB];                                                                            \
    for (size_t t = 0, x = j0 % ow, yz = j0 / ow; t < MRT_DENSE_JB; ++t) {                                  \
      pos[t] = t < nj ? (ptrdiff_t)((yz / oh * p->s[0] * xh + yz % oh * p->s[1]) * xw + x * p->s[2]) : pos[0]; \
      if (++x == ow) x = 0, ++yz;                                                                           \
    }                                                                                                       \
    const float *w = jb->w + pn * kd * (NC);                                                                \
    /* The next k block's weights (or the next panel's first) are prefetched                                \
     * into L2 while this one runs: in a whole model the weights come from                                  \
     * memory (ResNet-50's 256-channel 3x3: 2.4 MB a layer), a block's first                                \
     * reader waited on each of them. */                                                                    \
    const float *wend = p->dense_w + p->c_out * kd;                                                         \
    for (size_t k0 = 0; k0 < kd; k0 += MRT_DENSE_KC) {                                                      \
      const size_t kc = mrt_min(MRT_DENSE_KC, kd - k0);                                                     \
      const float *wn = w + (k0 + kc) * (NC);                                                               \
      for (size_t u = 0; u < MRT_DENSE_KC * (NC) && wn + u < wend; u += 16) __builtin_prefetch(wn + u, 0, 2); \
      for (size_t t = 0; t < nj; t += MRT_DENSE_NP)                                                         \
        TILE(kc, jb->x, p->kofs + k0, pos + t, w + k0 * (NC), ct + t * (NC), k0 > 0);                        \
    }                                                                                                       \
    /* Transposed into Y's channel rows, with the bias and the clamp. */                                    \
    float *y = jb->y + pn * (NC) * pix + j0;                                                                \
    const float lo = p->lo, hi = p->hi;                                                                     \
    float bias[NC];                                                                                         \
    for (size_t i = 0; i < (NC); ++i) bias[i] = jb->bias ? jb->bias[pn * (NC) + i] : 0.0f;                  \
    size_t t = 0;                                                                                           \
    for (; t + (TB) <= nj; t += (TB))                                                                       \
      for (size_t i = 0; i < (NC); i += (TB))                                                               \
        TBFN(ct + t * (NC) + i, (NC), y + i * pix + t, pix, bias + i, lo, hi);                              \
    for (size_t i = 0; i < (NC) && t < nj; ++i)                                                             \
      for (size_t u = t; u < nj; ++u) {                                                                     \
        const float v = ct[u * (NC) + i] + bias[i], l = v < lo ? lo : v;                                    \
        y[i * pix + u] = l > hi ? hi : l;                                                                   \
      }                                                                                                     \
    if (p->post.post) {                                                                                     \
      mrt_sgemm_epilogue e = p->post;                                                                       \
      e.res = jb->res;                                                                                      \
      mrt_conv_post(&e, pn * (NC), j0, (NC), nj, y, pix);                                                   \
    }                                                                                                       \
  }
MRT_DENSE_ITEM(mrt_conv_dense_item, MRT_AVX512F, MRT_DENSE_NC, mrt_conv_dense_tile, 16, mrt_conv_dense_t16)
MRT_DENSE_ITEM(mrt_conv_dense_item__avx2, __attribute__((target("avx2,fma"))), MRT_DENSE_NC2, mrt_conv_dense_tile__avx2,
               8, mrt_conv_dense_t8)
#undef MRT_DENSE_ITEM

/* A run of items a thread: consecutive items share a panel's weights (in
 * that core's L2), so each thread reads only its share of the panels. */
static void mrt_conv_dense_task(void *varg, size_t task, size_t thread) {
  const mrt_dense_job *jb = (const mrt_dense_job *)varg;
  const size_t items = jb->chunks * (jb->p->m / jb->p->dense_nc), i1 = mrt_min(items, (task + 1) * jb->per_task);
  for (size_t i = task * jb->per_task; i < i1; ++i) jb->item(jb, i, thread);
}

/* How a group's pixels are cut (the same for every group): *chunks chunks of
 * the tiles, *per_task items (panel-major (panel, chunk) pairs) a task;
 * returns the tasks (1: on the caller's thread). A panel's tiles are dealt
 * evenly over its chunks (784 pixels: 5 chunks of 156-160, not 4 x 192 +
 * 16), and when the panels do not split evenly over the threads, the chunks
 * do (64 channels on 56 x 56, 2 threads: 18 chunks, 9 a thread, not 17). */
static size_t mrt_conv_dense_split(mrt_pool *pool, const mrt_conv_params *p, size_t *chunks, size_t *per_task) {
  const size_t tiles = (p->out_pix + MRT_DENSE_NP - 1) / MRT_DENSE_NP, panels = p->m / p->dense_nc;
  const size_t threads = mrt_pool_threads(pool);
  size_t c = (tiles * MRT_DENSE_NP + MRT_DENSE_JB - 1) / MRT_DENSE_JB;
  const size_t tasks = mrt_min(c * panels, mrt_pool_tasks(pool, p->m * p->out_pix * p->kdim, (size_t)1 << 17));
  if (tasks > 1 && panels % threads) c = mrt_round_up(c, threads);
  *chunks = c;
  if (tasks <= 1) return *per_task = c * panels, 1;
  *per_task = (c * panels + threads - 1) / threads;
  return (c * panels + *per_task - 1) / *per_task;
}

/* The first padded row the taps of chunk c (of `chunks`) reach. */
static size_t mrt_conv_dense_chunk_row(const mrt_conv_params *p, size_t c, size_t chunks) {
  const size_t tiles = (p->out_pix + MRT_DENSE_NP - 1) / MRT_DENSE_NP;
  const size_t j0 = mrt_min(p->out_pix, c * tiles / chunks * MRT_DENSE_NP), yz = j0 / p->out[2];
  return (yz / p->out[1] * p->s[0] * p->xp[1] + yz % p->out[1] * p->s[1]);
}

/* Group g of one batch item: xp its padded input, y / res its output
 * channels, cut as mrt_conv_dense_split says. Each pixel's sums do not
 * depend on its chunk: the same bytes at every thread count. */
static void mrt_conv_dense_run(mrt_pool *pool, const mrt_conv_params *p, size_t g, const float *xp,
                               const float *bias, const float *res, float *y, void *scratch) {
  const size_t tiles = (p->out_pix + MRT_DENSE_NP - 1) / MRT_DENSE_NP;
  size_t chunks, per_task;
  const size_t tasks = mrt_conv_dense_split(pool, p, &chunks, &per_task);
  mrt_dense_job job = {p, xp, p->dense_w + g * p->m * p->kdim, bias, res, y, (char *)scratch, chunks, tiles, per_task,
                       p->dense_nc == MRT_DENSE_NC ? mrt_conv_dense_item : mrt_conv_dense_item__avx2};
  if (tasks <= 1) {
    mrt_conv_dense_task(&job, 0, 0);
    return;
  }
  mrt_parallel_for(pool, tasks, mrt_conv_dense_task, &job);
}
