/*
 * Channel-blocked direct depthwise convolution (included by conv_core.c, which
 * chooses it at prepare; `--tune size` builds, Android's x86 ABIs and SSE-only
 * x86_64 CPUs keep the plane path).
 *
 * The plane path (conv_core.c) computes one channel plane at a time with
 * vectors along its rows: on 7x7 and 14x14 planes most lanes of a 16-float
 * vector are idle and the per-plane work (padding, the activation call) costs
 * more than the taps. Here a vector holds one pixel of VL channels instead:
 *   1. the input rows a strip of output rows reads are transposed, VL x VL
 *      floats at a time, into a zero-padded tile of [rows][cols][VL] floats;
 *   2. each output pixel is one vector: bias, then the taps' FMAs (weights
 *      packed at prepare as [block][tap][VL]; 3x3, and 5x5 on x86, with the
 *      taps as constants), then the clamp;
 *   3. the activation runs once on a chunk of output rows (one contiguous
 *      array, in L1), which is transposed back into the NCHW planes; with a
 *      residual the planes get the Add, the clamp after it and the activation
 *      instead.
 * On AVX-512, 3x3 layers 56 or more outputs wide take the row path below
 * instead (vectors along a plane's rows, no transposes), and 3x3 layers 16 or
 * fewer outputs wide the narrow path (whole rows a vector; taps as masked
 * loads, at stride 2 as permutes).
 * Tasks are (batch item, channel block, strip of output rows): strips are
 * whole planes unless there are few channel blocks for the threads. A last
 * block of fewer than VL channels reads zeros for the missing ones and does
 * not store them.
 */

/* The clamp. On x86 a compare-and-select is one maxps / minps, where the NaN
 * rules of __builtin_elementwise_max cost two more instructions each (the
 * result is the same: a NaN becomes lo, as there). */
#if defined(__x86_64__)
#define MRT_DWB_SEL(m, a, b) ((__typeof__(a))(((__typeof__(m))(a) & (m)) | ((__typeof__(m))(b) & ~(m))))
#define MRT_DWB_CLAMP_BODY(v, lo, hi)   \
  v = MRT_DWB_SEL(v > lo, v, lo);       \
  return MRT_DWB_SEL(v < hi, v, hi);
#else
#define MRT_DWB_CLAMP_BODY(v, lo, hi) return MRT_VMIN(MRT_VMAX(v, lo), hi);
#endif

/* EXTRA, per copy: code x86 measured worth its bytes (ARM builds take 0 and
 * keep the bytes). 1: 5x5 taps as constants (EfficientNet-B0's 5x5 layers
 * 15 - 25 % faster on AVX-512 than through the any-kernel loop, 25 - 60 % on
 * AVX2); 2: also a row's last 2 or 3 outputs computed together rather than
 * one by one (1152 x 7 x 7, 5x5: 54 -> 49 us on AVX-512; on AVX2 6 KB of code
 * for 2 % of EfficientNet-B0's depthwise time, so it takes 1). */

/* Interleave the low / high halves of two VL-vectors (lanes a0 b0 a1 b1 ...). */
#define MRT_DWB_LO4 0, 4, 1, 5
#define MRT_DWB_HI4 2, 6, 3, 7
#define MRT_DWB_LO8 0, 8, 1, 9, 2, 10, 3, 11
#define MRT_DWB_HI8 4, 12, 5, 13, 6, 14, 7, 15
#define MRT_DWB_LO16 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define MRT_DWB_HI16 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31

/* Per-thread scratch of the blocked path: the input tile, the output tile and
 * a VL x VL staging block for ragged ends, in floats (each 64-byte aligned). */
static size_t mrt_dwb_tile_in(const mrt_conv_params *p) {
  return mrt_round_up(p->dwb_th * p->dwb_iw * p->dwb_vl, 16);
}
static size_t mrt_dwb_tile_out(const mrt_conv_params *p) {
  return mrt_round_up(p->dwb_oc * p->out[2] * p->dwb_vl, 16);
}
static size_t mrt_dwb_stride(const mrt_conv_params *p) {
  return (mrt_dwb_tile_in(p) + mrt_dwb_tile_out(p) + p->dwb_vl * p->dwb_vl) * sizeof(float);
}

typedef struct mrt_dwb_job {
  const mrt_conv_params *p;
  const float *x, *res;
  float *y;
  char *scratch;
  size_t stride, nblk, nstrip, items, runs; /* items: (batch, block, strip) */
} mrt_dwb_job;

/* Where run `task` starts: runs of items as even as whole items allow, so
 * that thread t's share of the pool's contiguous runs is the t-th slice of
 * the channels (or strips) the layer before wrote on the same thread (the
 * 1x1 expand on 14 x 14 splits its output channels in halves, 288 of 576
 * each, where runs of 5 blocks had given one thread 20 of 36). */
static inline size_t mrt_dwb_run_start(const mrt_dwb_job *j, size_t task) { return task * j->items / j->runs; }

/*
 * Rows of output a chunk computes when the gather interleaves with the taps
 * (0: the strip is gathered at once, then chunks of dwb_oc rows). The gather
 * streams its rows from L2 / L3 and measured as long as the taps and the
 * stores together (96 x 112 x 112, stride 2: 190 of 300 us; as long with no
 * transposes: the loads); gathering the few rows each chunk needs right
 * before its taps keeps the hardware prefetcher's streams running while the
 * taps compute (software prefetch measured slower). Chunks of 1, 2 or 4
 * rows on the planes where that measured faster (MobileNetV2, EfficientNet-B0,
 * one thread, profile_nodes): stride 2 from 28 inputs wide, stride 1 28 to 111
 * wide (192 x 28 x 28: 54 -> 49 us with 4-row chunks); the chunks' gathers
 * there are whole vectors of pixels (no ragged ends). Smaller planes, and
 * chunks whose gathers end ragged, lost 20 - 40 %; 112 wide, stride 1, and
 * 14 wide measured the same either way.
 */
#if defined(__x86_64__)
static inline size_t mrt_dwb_interleave(const mrt_conv_params *p) {
  const size_t OW = p->out[2];
  if (p->s[1] == 2 && p->s[2] == 2 && OW >= 14) return OW >= 56 ? 1 : 2;
  if (p->s[1] == 1 && p->s[2] == 1 && OW >= 56 && OW < 112) return 2;
  if (p->s[1] == 1 && p->s[2] == 1 && OW >= 28 && OW < 56) return 4;
  return 0;
}
#define MRT_DWB_IL(p) mrt_dwb_interleave(p)
#define MRT_DWB_CHUNK(p, ilr) ((ilr) ? mrt_min((ilr), (p)->dwb_oc) : (p)->dwb_oc)
#else
/* (Measured on x86 only: ARM keeps the one gather and its bytes.) */
#define MRT_DWB_IL(p) ((void)(p), (size_t)0)
#define MRT_DWB_CHUNK(p, ilr) ((void)(ilr), (p)->dwb_oc)
#endif

/*
 * mrt_dwb_task##SUF for one vector type of VL floats; NX outputs of a row are
 * computed together (enough accumulators to cover the FMA latency), EXTRA as
 * above. The transpose is log2(VL) rounds of interleaving vector i with vector
 * i + VL/2: after them vector k holds lane k of every input vector.
 */
#define MRT_DWB(SUF, ATTR, VT, VL, LO, HI, NX, EXTRA, MASK)                                                          \
  ATTR static inline __attribute__((always_inline)) VT mrt_dwb_clamp##SUF(VT v, VT lo, VT hi) {         \
    MRT_DWB_CLAMP_BODY(v, lo, hi)                                                                       \
  }                                                                                                     \
                                                                                                        \
  ATTR static inline __attribute__((always_inline)) void mrt_dwb_tr##SUF(VT *v) {                       \
    _Pragma("clang loop unroll(full)") for (size_t r = 1; r < (VL); r *= 2) {                            \
      VT t[VL];                                                                                         \
      _Pragma("clang loop unroll(full)") for (size_t i = 0; i < (VL) / 2; ++i) {                         \
        t[2 * i] = __builtin_shufflevector(v[i], v[i + (VL) / 2], LO);                                  \
        t[2 * i + 1] = __builtin_shufflevector(v[i], v[i + (VL) / 2], HI);                              \
      }                                                                                                 \
      _Pragma("clang loop unroll(full)") for (size_t i = 0; i < (VL); ++i) v[i] = t[i];                  \
    }                                                                                                   \
  }                                                                                                     \
                                                                                                        \
  /* Tile rows ty0 .. ty0 + th (padded coordinates) of channels c .. c + nch. */                        \
  ATTR static void mrt_dwb_gather##SUF(const mrt_conv_params *p, const float *MRT_RESTRICT x, size_t nch, \
                                       size_t ty0, size_t th, float *MRT_RESTRICT tile,                  \
                                       float *MRT_RESTRICT stage) {                                      \
    const size_t H = p->in[1], W = p->in[2], iw = p->dwb_iw, py = (size_t)p->pb[1];                     \
    const size_t px = (size_t)p->pb[2], plane = p->in_pix;                                              \
    const size_t pxc = mrt_min(px, iw), cw = iw > px ? mrt_min(W, iw - px) : 0;                        \
    /* Input rows iy0 .. iy1 land in the tile; the others are zero rows. */                             \
    const size_t iy0 = ty0 > py ? ty0 - py : 0;                                                         \
    const size_t iy1 = mrt_min(H, ty0 + th > py ? ty0 + th - py : 0);                                   \
    for (size_t r = 0; r < th; ++r) {                                                                   \
      float *row = tile + r * iw * (VL);                                                                \
      const size_t iy = ty0 + r;                                                                        \
      if (iy < py + iy0 || iy >= py + iy1 || iy1 <= iy0) {                                              \
        memset(row, 0, iw * (VL) * sizeof(float));                                                      \
        continue;                                                                                       \
      }                                                                                                 \
      memset(row, 0, pxc * (VL) * sizeof(float));                                                       \
      memset(row + (pxc + cw) * (VL), 0, (iw - pxc - cw) * (VL) * sizeof(float));                       \
    }                                                                                                   \
    if (iy1 <= iy0 || cw == 0) return;                                                                  \
    /* The rows are one contiguous run of each plane: VL pixels at a time, each                         \
     * transposed into VL pixel vectors that go to their (row, column) slot. */                         \
    const size_t n = (iy1 - iy0) * W;                                                                   \
    const float *src = x + iy0 * W;                                                                     \
    float *dst = tile + ((iy0 + py - ty0) * iw + px) * (VL);                                            \
    size_t col = 0, i = 0;                                                                              \
    if (nch == (VL))                                                                                    \
      for (; i + (VL) <= n; i += (VL)) {                                                                \
        VT v[VL];                                                                                       \
        _Pragma("clang loop unroll(full)") for (size_t c = 0; c < (VL); ++c) {                           \
          __builtin_memcpy(&v[c], src + c * plane + i, sizeof(VT));                                     \
        }                                                                                               \
        mrt_dwb_tr##SUF(v);                                                                             \
        _Pragma("clang loop unroll(full)") for (size_t k = 0; k < (VL); ++k) {                           \
          if (col < cw) *(VT *)(dst + col * (VL)) = v[k];                                               \
          if (++col == W) col = 0, dst += iw * (VL);                                                    \
        }                                                                                               \
      }                                                                                                 \
    /* A ragged end or block: through the zeroed staging block (MASK: by                                \
     * masked loads, zeros past the end, and no stage). */                                              \
    for (; i < n; i += (VL)) {                                                                          \
      VT v[VL];                                                                                         \
      const size_t m = mrt_min((VL), n - i);                                                            \
      if (MASK) {                                                                                       \
        _Pragma("clang loop unroll(full)") for (size_t c = 0; c < (VL); ++c)                            \
          v[c] = c < nch ? mrt_dwb_ld##SUF(src + c * plane + i, m) : (VT){0};                           \
        mrt_dwb_tr##SUF(v);                                                                             \
        for (size_t k = 0; k < m; ++k) {                                                                \
          if (col < cw) *(VT *)(dst + col * (VL)) = v[k];                                               \
          if (++col == W) col = 0, dst += iw * (VL);                                                    \
        }                                                                                               \
        continue;                                                                                       \
      }                                                                                                 \
      memset(stage, 0, (VL) * (VL) * sizeof(float));                                                    \
      for (size_t c = 0; c < nch; ++c) memcpy(stage + c * (VL), src + c * plane + i, m * sizeof(float)); \
      _Pragma("clang loop unroll(full)") for (size_t c = 0; c < (VL); ++c)                               \
        __builtin_memcpy(&v[c], stage + c * (VL), sizeof(VT));                                          \
      mrt_dwb_tr##SUF(v);                                                                               \
      _Pragma("clang loop unroll(full)") for (size_t k = 0; k < (VL); ++k)                               \
        __builtin_memcpy(stage + k * (VL), &v[k], sizeof(VT));                                          \
      for (size_t k = 0; k < m; ++k) {                                                                  \
        if (col < cw) memcpy(dst + col * (VL), stage + k * (VL), sizeof(VT));                           \
        if (++col == W) col = 0, dst += iw * (VL);                                                      \
      }                                                                                                 \
    }                                                                                                   \
  }                                                                                                     \
                                                                                                        \
  /* N outputs from column ox of a row: bias, the taps, the clamp. */                                  \
  ATTR static inline __attribute__((always_inline)) void mrt_dwb_px##SUF(                               \
      const float *MRT_RESTRICT tr, const float *MRT_RESTRICT w, VT vb, VT vlo, VT vhi,                 \
      float *MRT_RESTRICT orow, size_t ox, size_t N, size_t kh, size_t kw, size_t dy, size_t dx,        \
      size_t sx) {                                                                                      \
    VT acc[NX];                                                                                         \
    for (size_t j = 0; j < N; ++j) acc[j] = vb;                                                         \
    for (size_t ky = 0; ky < kh; ++ky) {                                                                \
      const float *q = tr + ky * dy + ox * sx;                                                          \
      for (size_t kx = 0; kx < kw; ++kx) {                                                              \
        const VT wv = *(const VT *)(w + (ky * kw + kx) * (VL));                                         \
        for (size_t j = 0; j < N; ++j) acc[j] += wv * *(const VT *)(q + kx * dx + j * sx);              \
      }                                                                                                 \
    }                                                                                                   \
    for (size_t j = 0; j < N; ++j) *(VT *)(orow + (ox + j) * (VL)) = mrt_dwb_clamp##SUF(acc[j], vlo, vhi);   \
  }                                                                                                     \
                                                                                                        \
  /* Output rows oy0 .. oy0 + rows into the output tile, NX outputs at a time                           \
   * (enough accumulators to cover the FMA latency), then 4, then one. KH, KW,                          \
   * SX: the kernel and x stride as constants (then x dilation 1), so every tap                         \
   * of every output is a constant offset from one pointer per kernel row; 0: any. */                   \
  ATTR static inline __attribute__((always_inline)) void mrt_dwb_taps##SUF(                             \
      const mrt_conv_params *p, const float *MRT_RESTRICT tile, const float *MRT_RESTRICT w,            \
      const float *MRT_RESTRICT bias, size_t rows, float *MRT_RESTRICT out, size_t KH, size_t KW,       \
      size_t SX) {                                                                                      \
    const size_t kh = KH ? KH : p->k[1], kw = KW ? KW : p->k[2], OW = p->out[2], iw = p->dwb_iw;        \
    const size_t sx = (SX ? SX : p->s[2]) * (VL), dx = (KW ? 1 : p->d[2]) * (VL);                       \
    const size_t dy = p->d[1] * iw * (VL), rs = p->s[1] * iw * (VL);                                    \
    const VT vb = *(const VT *)bias, vlo = (VT){0} + p->lo, vhi = (VT){0} + p->hi;                      \
    for (size_t oy = 0; oy < rows; ++oy) {                                                              \
      const float *tr = tile + oy * rs;                                                                 \
      float *orow = out + oy * OW * (VL);                                                               \
      size_t ox = 0;                                                                                    \
      for (; ox + (NX) <= OW; ox += (NX)) mrt_dwb_px##SUF(tr, w, vb, vlo, vhi, orow, ox, NX, kh, kw, dy, dx, sx); \
      if ((NX) > 4)                                                                                     \
        for (; ox + 4 <= OW; ox += 4) mrt_dwb_px##SUF(tr, w, vb, vlo, vhi, orow, ox, 4, kh, kw, dy, dx, sx); \
      if ((EXTRA) >= 2 && OW - ox == 3)                                                                \
        mrt_dwb_px##SUF(tr, w, vb, vlo, vhi, orow, ox, 3, kh, kw, dy, dx, sx);                          \
      else if ((EXTRA) >= 2 && OW - ox == 2)                                                           \
        mrt_dwb_px##SUF(tr, w, vb, vlo, vhi, orow, ox, 2, kh, kw, dy, dx, sx);                          \
      else                                                                                              \
        for (; ox < OW; ++ox) mrt_dwb_px##SUF(tr, w, vb, vlo, vhi, orow, ox, 1, kh, kw, dy, dx, sx);    \
    }                                                                                                   \
  }                                                                                                     \
                                                                                                        \
  ATTR static inline __attribute__((always_inline)) void mrt_dwb_item##SUF(const mrt_dwb_job *j,        \
                                                                         size_t task, size_t thread) {  \
    const mrt_conv_params *p = j->p;                                                                    \
    const size_t strip = task % j->nstrip, blk = task / j->nstrip % j->nblk, nb = task / j->nstrip / j->nblk; \
    const size_t c0 = blk * (VL), nch = mrt_min((VL), p->c_out - c0), OW = p->out[2];                   \
    const size_t oy0 = strip * p->dwb_sr, rows = mrt_min(p->dwb_sr, p->out[1] - oy0);                   \
    const size_t th = (rows - 1) * p->s[1] + (p->k[1] - 1) * p->d[1] + 1;                                \
    float *tile = (float *)(j->scratch + thread * j->stride);                                           \
    float *out = tile + mrt_dwb_tile_in(p), *stage = out + mrt_dwb_tile_out(p);                         \
    const float *x = j->x + (nb * p->c_in + c0) * p->in_pix;                                            \
    const size_t ilr = MRT_DWB_IL(p);                                                                   \
    if (!ilr) mrt_dwb_gather##SUF(p, x, nch, oy0 * p->s[1], th, tile, stage);                           \
    const float *w = p->dwb_w + blk * p->kvol * (VL), *bias = p->dwb_w + (j->nblk * p->kvol + blk) * (VL); \
    /* The kernels of MobileNet / EfficientNet layers with constant taps. */                           \
    const size_t kk = p->d[2] == 1 && p->s[2] <= 2 && p->k[1] == p->k[2] ? p->k[1] : 0;                  \
    const size_t ypix = p->out_pix, rs = p->s[1] * p->dwb_iw * (VL);                                    \
    /* Chunks of dwb_oc output rows: their tile stays in L1 from the taps to the                        \
     * activation and the transpose. */                                                                 \
    size_t have = 0; /* tile rows gathered */                                                           \
    for (size_t r0 = 0; r0 < rows; r0 += MRT_DWB_CHUNK(p, ilr)) {                                       \
      const size_t rc = mrt_min(MRT_DWB_CHUNK(p, ilr), rows - r0), n = rc * OW, pix0 = (oy0 + r0) * OW; \
      const float *tl = tile + r0 * rs;                                                                 \
      if (ilr) {                                                                                        \
        const size_t need = mrt_min(th, (r0 + rc - 1) * p->s[1] + (p->k[1] - 1) * p->d[1] + 1);            \
        if (need > have)                                                                                \
          mrt_dwb_gather##SUF(p, x, nch, oy0 * p->s[1] + have, need - have, tile + have * p->dwb_iw * (VL), \
                              stage);                                                                   \
        have = need;                                                                                    \
      }                                                                                                 \
      if (kk == 3 && p->s[2] == 1)                                                                      \
        mrt_dwb_taps##SUF(p, tl, w, bias, rc, out, 3, 3, 1);                                            \
      else if (kk == 3)                                                                                 \
        mrt_dwb_taps##SUF(p, tl, w, bias, rc, out, 3, 3, 2);                                            \
      else if ((EXTRA) >= 1 && kk == 5 && p->s[2] == 1)                                                  \
        mrt_dwb_taps##SUF(p, tl, w, bias, rc, out, 5, 5, 1);                                            \
      else if ((EXTRA) >= 1 && kk == 5)                                                                  \
        mrt_dwb_taps##SUF(p, tl, w, bias, rc, out, 5, 5, 2);                                            \
      else                                                                                              \
        mrt_dwb_taps##SUF(p, tl, w, bias, rc, out, 0, 0, 0);                                            \
      mrt_sgemm_epilogue e = p->post;                                                                   \
      if (p->post.post && !j->res) {                                                                    \
        e.res = NULL;                                                                                   \
        mrt_conv_post(&e, 0, 0, 1, n * (VL), out, 0);                                                   \
      }                                                                                                 \
      float *y = j->y + (nb * p->c_out + c0) * ypix + pix0;                                             \
      size_t i = 0;                                                                                     \
      if (nch == (VL))                                                                                  \
        for (; i + (VL) <= n; i += (VL)) {                                                              \
          VT v[VL];                                                                                     \
          _Pragma("clang loop unroll(full)") for (size_t k = 0; k < (VL); ++k)                           \
            v[k] = *(const VT *)(out + (i + k) * (VL));                                                 \
          mrt_dwb_tr##SUF(v);                                                                           \
          _Pragma("clang loop unroll(full)") for (size_t c = 0; c < (VL); ++c)                           \
            __builtin_memcpy(y + c * ypix + i, &v[c], sizeof(VT));                                      \
        }                                                                                               \
      for (; i < n; i += (VL)) {                                                                        \
        VT v[VL];                                                                                       \
        const size_t m = mrt_min((VL), n - i);                                                          \
        if (MASK) { /* pixels past n are read from the tile's end or stage (never stored) */            \
          _Pragma("clang loop unroll(full)") for (size_t k = 0; k < (VL); ++k)                          \
            __builtin_memcpy(&v[k], out + (i + k) * (VL), sizeof(VT));                                  \
          mrt_dwb_tr##SUF(v);                                                                           \
          for (size_t c = 0; c < nch; ++c) mrt_dwb_st##SUF(y + c * ypix + i, v[c], m);                  \
          continue;                                                                                     \
        }                                                                                               \
        memset(stage, 0, (VL) * (VL) * sizeof(float));                                                  \
        memcpy(stage, out + i * (VL), m * (VL) * sizeof(float));                                        \
        _Pragma("clang loop unroll(full)") for (size_t k = 0; k < (VL); ++k)                             \
          __builtin_memcpy(&v[k], stage + k * (VL), sizeof(VT));                                        \
        mrt_dwb_tr##SUF(v);                                                                             \
        _Pragma("clang loop unroll(full)") for (size_t c = 0; c < (VL); ++c)                             \
          __builtin_memcpy(stage + c * (VL), &v[c], sizeof(VT));                                        \
        for (size_t c = 0; c < nch; ++c) memcpy(y + c * ypix + i, stage + c * (VL), m * sizeof(float));  \
      }                                                                                                 \
      if (p->post.post && j->res) {                                                                     \
        e.res = j->res + (nb * p->c_out + c0) * ypix + pix0;                                            \
        mrt_conv_post(&e, 0, 0, nch, n, y, ypix);                                                       \
      }                                                                                                 \
    }                                                                                                   \
  }                                                                                                     \
                                                                                                        \
  /* A run of items on one thread. */                                                                   \
  ATTR static void mrt_dwb_task##SUF(void *varg, size_t task, size_t thread) {                          \
    const mrt_dwb_job *j = (const mrt_dwb_job *)varg;                                                   \
    const size_t i1 = mrt_dwb_run_start(j, task + 1);                                                   \
    for (size_t i = mrt_dwb_run_start(j, task); i < i1; ++i) mrt_dwb_item##SUF(j, i, thread);           \
  }

/* MASK, per copy: ragged ends of the transposes by masked loads and stores
 * (AVX-512, AVX2) instead of the zeroed stage and a memcpy a channel: a 7 x 7
 * plane is three whole 16-pixel groups and a ragged one, in and out. NEON's
 * (never called) stand-ins: */
#define MRT_DWB_NO_MASK(SUF, VT)                                                              \
  static inline VT mrt_dwb_ld##SUF(const float *s, size_t m) { return (void)s, (void)m, (VT){0}; } \
  static inline void mrt_dwb_st##SUF(float *d, VT v, size_t m) { (void)d, (void)v, (void)m; }

#if defined(__x86_64__)
/* (SSE-only x86_64 keeps the plane path: 4 lanes cost 17 KB of code there.) */
typedef int mrt_dwb_v8i __attribute__((vector_size(32)));
#define MRT_DWB_M8(m) ((mrt_dwb_v8i){0, 1, 2, 3, 4, 5, 6, 7} < (int)(m))
__attribute__((target("avx2,fma"))) static inline mrt_v8f mrt_dwb_ld__avx2(const float *s, size_t m) {
  return (mrt_v8f)__builtin_ia32_maskloadps256((const __attribute__((vector_size(32))) float *)s, MRT_DWB_M8(m));
}
__attribute__((target("avx2,fma"))) static inline void mrt_dwb_st__avx2(float *d, mrt_v8f v, size_t m) {
  __builtin_ia32_maskstoreps256((__attribute__((vector_size(32))) float *)d, MRT_DWB_M8(m), v);
}
MRT_DWB(__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8, MRT_DWB_LO8, MRT_DWB_HI8, 8, 1, 1)
#if MRT_SGEMM_AVX512
MRT_AVX512F static inline mrt_v16f mrt_dwb_ld__avx512(const float *s, size_t m) { return mrt_load16(s, m); }
MRT_AVX512F static inline void mrt_dwb_st__avx512(float *d, mrt_v16f v, size_t m) { mrt_store16(d, v, m); }
MRT_DWB(__avx512, __attribute__((target("avx512f,avx2,fma"))), mrt_v16f, 16, MRT_DWB_LO16, MRT_DWB_HI16, 8, 2, 1)
#endif
#else
MRT_DWB_NO_MASK(, mrt_v4f)
MRT_DWB(, , mrt_v4f, 4, MRT_DWB_LO4, MRT_DWB_HI4, 4, 0, 0)
#endif

#if MRT_SGEMM_AVX512
/*
 * The row path (AVX-512; dwb_oc 0 marks it): 3x3 kernels, stride 1 on planes
 * 56 or more outputs wide, stride 2 from 28. There the blocked path's
 * transposes (a 16 x 16 block is 64 shuffles, on the one port that shuffles;
 * stride 2 transposes four input pixels an output) cost more than the taps.
 * Here a vector holds 16 outputs of one row of one channel, as in the plane
 * path, but with no padded copy of the plane: each input row is read once
 * into a short zero-padded row buffer in L1 as the output rows reach it
 * (stride 2: split into its even and odd columns, one two-source permute a
 * vector, so every tap is an unaligned load at a constant offset), and two
 * output rows at a time are stored straight into the plane. Weights
 * [channel][tap] then the biases, copied at prepare. MobileNetV2, one thread,
 * profile_nodes, against the blocked path in the same runs: 96 x 112 x 112
 * stride 2 255 -> 194 us, 32 x 112 x 112 130 -> 98, 144 x 56 x 56 156 -> 139,
 * 144 x 56 x 56 stride 2 78.5 -> 72.4 (with the row prefetch; 90 without).
 */
#define MRT_DWR_AVX512 __attribute__((target("avx512f,avx2,fma")))

static size_t mrt_dwr_max(size_t a, size_t b) { return a > b ? a : b; }

/* Output rows the row buffers are filled ahead of the taps that read them. */
#define MRT_DWR_AHEAD 1
/* Floats of one row buffer (stride 2: of each of its even / odd halves). */
static size_t mrt_dwr_row(const mrt_conv_params *p) {
  const size_t ow16 = mrt_round_up(p->out[2], 16), k = p->k[2];
  if (p->s[2] == 2) return mrt_round_up(mrt_dwr_max(ow16 + k, (p->in[2] + 31) / 32 * 16 + k + 1), 16);
  return mrt_round_up(mrt_dwr_max(ow16 + k, p->in[2] + 16 + k), 16);
}
/* Per-thread scratch: the ring of row buffers (the K + SX rows of two output
 * rows, those filled ahead, one spare; two halves each at stride 2) and a
 * zero one for the rows of padding. */
static size_t mrt_dwr_stride(const mrt_conv_params *p) {
  return (p->k[1] + (MRT_DWR_AHEAD + 1) * p->s[2] + 2) * p->s[2] * mrt_dwr_row(p) * sizeof(float);
}

/* Input row iy of plane x into its buffer b (L floats each half). */
MRT_DWR_AVX512 static inline __attribute__((always_inline)) void mrt_dwr_fill(const mrt_conv_params *p,
                                                                              const float *MRT_RESTRICT xr,
                                                                              float *MRT_RESTRICT b, size_t L,
                                                                              size_t SX) {
  const size_t W = p->in[2], px = (size_t)p->pb[2];
  /* The row 4 rows on, into L1: the loads of the rows had stalled the taps
   * (perf, 96 x 112 x 112 stride 2: 45 % of the path's samples after them);
   * 203 -> 194 us, 8 rows no better. Whole vectors by plain loads, the
   * ragged end by one masked load whose zeros also clear the buffer past the
   * row: the masks' scalar work had cost more than the taps at stride 2 (perf,
   * 144 x 56 x 56: the fills 64 % of the path's samples). */
  const float *pf = xr + 4 * W;
  if (SX == 1) {
    size_t i = 0;
    float *to = b + px;
    for (; i + 16 <= W; i += 16) {
      __builtin_prefetch(pf + i, 0, 3);
      mrt_v16f v;
      __builtin_memcpy(&v, xr + i, sizeof v);
      __builtin_memcpy(to + i, &v, sizeof v);
    }
    if (i < W) {
      __builtin_prefetch(pf + i, 0, 3);
      mrt_store16(to + i, mrt_load16(xr + i, W - i), 16);
    }
    return;
  }
  /* xpad[u] = x[u - px]; E[m] = xpad[2m], O[m] = xpad[2m + 1]. */
  float *e = b, *o = b + L;
  float *ev_to = px % 2 ? o + px / 2 : e + px / 2, *od_to = px % 2 ? e + px / 2 + 1 : o + px / 2;
  size_t i = 0, q = 0;
  for (; i + 32 <= W; i += 32, q += 16) {
    __builtin_prefetch(pf + i, 0, 3);
    __builtin_prefetch(pf + i + 16, 0, 3);
    mrt_v16f a, c;
    __builtin_memcpy(&a, xr + i, sizeof a);
    __builtin_memcpy(&c, xr + i + 16, sizeof c);
    const mrt_v16f ev = __builtin_shufflevector(a, c, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const mrt_v16f od = __builtin_shufflevector(a, c, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __builtin_memcpy(ev_to + q, &ev, sizeof ev);
    __builtin_memcpy(od_to + q, &od, sizeof od);
  }
  if (i < W) {
    __builtin_prefetch(pf + i, 0, 3);
    if (W - i > 16) __builtin_prefetch(pf + i + 16, 0, 3);
    /* The 1 to 31 floats left: masks from one count, no load of zeros (perf
     * had the ragged end at 2.4 times a whole pair's samples; one-node
     * 144 x 56 x 56 stride 2, best of 8 x 200, twice: 79.8 -> 75.9 us,
     * 80.7 -> 76.4). */
    const unsigned r = (unsigned)(W - i), ma = r >= 16 ? 0xffffu : (1u << r) - 1u, mc = r > 16 ? (1u << (r - 16)) - 1u : 0u;
    mrt_v16f a, c;
    if (ma == 0xffffu) {
      __builtin_memcpy(&a, xr + i, sizeof a);
      c = __builtin_ia32_loadups512_mask(xr + i + 16, (mrt_v16f){0}, (unsigned short)mc);
    } else {
      a = __builtin_ia32_loadups512_mask(xr + i, (mrt_v16f){0}, (unsigned short)ma);
      c = (mrt_v16f){0};
    }
    const mrt_v16f ev = __builtin_shufflevector(a, c, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const mrt_v16f od = __builtin_shufflevector(a, c, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __builtin_memcpy(ev_to + q, &ev, sizeof ev);
    __builtin_memcpy(od_to + q, &od, sizeof od);
  }
}

/* Input row pointer for padded row u of the plane, its buffer filled (and
 * the rows up to MRT_DWR_AHEAD output rows further: the taps then read
 * buffers whose stores have left the store buffer). */
MRT_DWR_AVX512 static inline __attribute__((always_inline)) const float *mrt_dwr_get(
    const mrt_conv_params *p, const float *MRT_RESTRICT x, float *MRT_RESTRICT bufs, size_t L, size_t R,
    size_t SX, size_t u, size_t *next) {
  const size_t H = p->in[1], py = (size_t)p->pb[1];
  if (u < py || u - py >= H) return bufs + R * SX * L; /* the zero row */
  const size_t iy = u - py;
  if (iy >= *next) {
    const size_t last = mrt_min(H - 1, iy + MRT_DWR_AHEAD * SX);
    for (; *next <= last; ++*next) mrt_dwr_fill(p, x + *next * p->in[2], bufs + *next % R * SX * L, L, SX);
  }
  return bufs + iy % R * SX * L;
}

/* One plane: K x K taps, stride SX both ways (constants); two output rows a
 * pass (two accumulators, and the input rows they share loaded once). */
MRT_DWR_AVX512 static inline __attribute__((always_inline)) void mrt_dwr_plane(
    const mrt_conv_params *p, const mrt_dwb_job *j, size_t plane, float *MRT_RESTRICT bufs,
    size_t L, size_t K, size_t SX) {
  const size_t OH = p->out[1], OW = p->out[2], c = plane % p->c_out;
  const size_t R = K + (MRT_DWR_AHEAD + 1) * SX + 1, half = SX == 2 ? L : 0;
  const float *x = j->x + plane * p->in_pix;
  float *y = j->y + plane * p->out_pix;
  mrt_v16f w[9];
  for (size_t t = 0; t < K * K; ++t) w[t] = (mrt_v16f){0} + p->dwb_w[c * K * K + t];
  const mrt_v16f vb = (mrt_v16f){0} + p->dwb_w[p->c_out * K * K + c];
  const mrt_v16f vlo = (mrt_v16f){0} + p->lo, vhi = (mrt_v16f){0} + p->hi;
  /* Rows of output between calls of the stage after the clamp: about 8 KB. */
  const size_t post_rows = mrt_dwr_max(2, 2048 / OW);
  size_t next = 0, post0 = 0; /* next input row to fill; first row not yet post-processed */
  for (size_t oy = 0; oy < OH; oy += 2) {
    const int two = oy + 1 < OH;
    const float *rows[3 + 2];
    for (size_t r = 0; r < K + (two ? SX : 0); ++r) rows[r] = mrt_dwr_get(p, x, bufs, L, R, SX, oy * SX + r, &next);
    float *yr = y + oy * OW;
    for (size_t ox = 0; ox < OW; ox += 16) {
      mrt_v16f a0 = vb, a1 = vb;
      _Pragma("clang loop unroll(full)") for (size_t r = 0; r < K + SX; ++r) {
        const float *q = rows[r] + ox;
        _Pragma("clang loop unroll(full)") for (size_t kx = 0; kx < K; ++kx) {
          if (r >= K && !two) break;
          mrt_v16f v;
          __builtin_memcpy(&v, SX == 1 ? q + kx : (kx % 2 ? q + half + kx / 2 : q + kx / 2), sizeof v);
          if (r < K) a0 += w[r * K + kx] * v;
          if (r >= SX) a1 += w[(r - SX) * K + kx] * v;
        }
      }
      mrt_store16(yr + ox, mrt_dwb_clamp__avx512(a0, vlo, vhi), OW - ox);
      if (two) mrt_store16(yr + OW + ox, mrt_dwb_clamp__avx512(a1, vlo, vhi), OW - ox);
    }
    const size_t done = oy + 1 + two;
    if (p->post.post && (done - post0 >= post_rows || done == OH)) {
      mrt_sgemm_epilogue e = p->post;
      e.res = j->res ? j->res + plane * p->out_pix + post0 * OW : NULL;
      mrt_conv_post(&e, 0, 0, 1, (done - post0) * OW, y + post0 * OW, (done - post0) * OW);
      post0 = done;
    }
  }
}

/*
 * Narrow planes (AVX-512, 3x3, stride 1, pads 1, 16 or fewer outputs wide:
 * MobileNetV2's 14 x 14 and 7 x 7 layers): a vector holds R = 16 / W whole
 * output rows, which are R * W contiguous floats of the plane, and each tap is
 * one masked load straight from the input plane at a constant offset, the
 * mask dropping the lanes whose tap falls in the padding (a column before or
 * after the row, a row above or below the plane; masked lanes do not fault).
 * No row buffers, no transposes: 9 loads and 9 FMAs a vector, where the
 * blocked path's two 16 x 16 transposes cost more than its taps. MobileNetV2
 * on an Intel Xeon, profile_nodes, against the blocked path in the same
 * runs, one thread: 576 x 14 x 14 59 -> 40 us, 384 x 14 x 14 31 -> 26,
 * 960 x 7 x 7 24 -> 22; two threads 55 -> 22, 38 -> 15, 20 -> 12 (the
 * whole model 2.94 -> 2.74 ms, onnxruntime 2.89).
 */
typedef struct mrt_dwn_masks {
  uint16_t m[3][3]; /* [ky][kx] */
} mrt_dwn_masks;

/* The masks of the vector of output rows from oy0. */
static mrt_dwn_masks mrt_dwn_mask(size_t W, size_t H, size_t oy0) {
  const size_t R = 16 / W, rr = mrt_min(R, H - oy0);
  const unsigned row = (1u << W) - 1u;
  unsigned first = 0, last = 0;
  for (size_t r = 0; r < R; ++r) first |= 1u << (r * W), last |= 1u << (r * W + W - 1);
  mrt_dwn_masks m;
  for (size_t ky = 0; ky < 3; ++ky) {
    unsigned v = 0;
    for (size_t r = 0; r < rr; ++r) {
      const size_t iy = oy0 + r + ky; /* input row + 1 */
      if (iy >= 1 && iy <= H) v |= row << (r * W);
    }
    m.m[ky][0] = (uint16_t)(v & ~first);
    m.m[ky][1] = (uint16_t)v;
    m.m[ky][2] = (uint16_t)(v & ~last);
  }
  return m;
}

/* One vector of outputs from offset `at` of the plane: a partial sum a kernel
 * row (three chains of three FMAs, not one of nine), masks m[ky][kx]. */
MRT_DWR_AVX512 static inline __attribute__((always_inline)) mrt_v16f mrt_dwn_vec(const float *x, ptrdiff_t at,
                                                                                 const uint16_t m[3][3],
                                                                                 const mrt_v16f *w, mrt_v16f vb,
                                                                                 size_t W) {
  mrt_v16f acc[3] = {vb, (mrt_v16f){0}, (mrt_v16f){0}};
  _Pragma("clang loop unroll(full)") for (size_t ky = 0; ky < 3; ++ky)
    _Pragma("clang loop unroll(full)") for (size_t kx = 0; kx < 3; ++kx) {
      const ptrdiff_t off = at + ((ptrdiff_t)ky - 1) * (ptrdiff_t)W + (ptrdiff_t)kx - 1;
      const float *q = (const float *)((uintptr_t)x + (uintptr_t)(off * (ptrdiff_t)sizeof(float)));
      acc[ky] += w[ky * 3 + kx] * __builtin_ia32_loadups512_mask(q, (mrt_v16f){0}, m[ky][kx]);
    }
  return acc[0] + acc[1] + acc[2];
}

MRT_DWR_AVX512 static inline __attribute__((always_inline)) mrt_v16f mrt_dwn_splat(float s) {
  const mrt_v16f v = {s};
  return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}

/* Channel c's nine taps, broadcast into w; returns its bias, broadcast. */
MRT_DWR_AVX512 static inline __attribute__((always_inline)) mrt_v16f mrt_dwn_weights(const mrt_conv_params *p,
                                                                                     size_t c, mrt_v16f *w) {
  for (size_t t = 0; t < 9; ++t) w[t] = mrt_dwn_splat(p->dwb_w[c * 9 + t]);
  return mrt_dwn_splat(p->dwb_w[p->c_out * 9 + c]);
}

/* The stage after the clamp (activation, residual) on plane i, in L1. */
static void mrt_dwn_post(const mrt_dwb_job *j, size_t i, float *y) {
  const mrt_conv_params *p = j->p;
  if (!p->post.post) return;
  mrt_sgemm_epilogue e = p->post;
  e.res = j->res ? j->res + i * p->out_pix : NULL;
  mrt_conv_post(&e, 0, 0, 1, p->out_pix, y, p->out_pix);
}

/* Planes i0 .. i1 of the narrow path: the first and last vectors of a plane
 * with their own masks, those between (every row above and below them in the
 * plane) with one mask a column of taps, two vectors at a time. */
MRT_DWR_AVX512 static void mrt_dwn_planes(const mrt_dwb_job *j, size_t i0, size_t i1) {
  const mrt_conv_params *p = j->p;
  const size_t W = p->out[2], H = p->out[1], R = 16 / W, last = (H - 1) / R * R;
  const mrt_dwn_masks top = mrt_dwn_mask(W, H, 0), bot = mrt_dwn_mask(W, H, last);
  const mrt_dwn_masks mid = mrt_dwn_mask(W, H + 2 * R, R); /* (a vector with rows all round) */
  uint16_t mm[3][3];
  for (size_t ky = 0; ky < 3; ++ky)
    for (size_t kx = 0; kx < 3; ++kx) mm[ky][kx] = mid.m[1][kx];
  const unsigned short full = (unsigned short)((1u << (R * W)) - 1u);
  const unsigned short tail = (unsigned short)((1u << ((H - last) * W)) - 1u);
  const mrt_v16f vlo = mrt_dwn_splat(p->lo), vhi = mrt_dwn_splat(p->hi);
  size_t c = i0 % p->c_out;
  for (size_t i = i0; i < i1; ++i, c = c + 1 == p->c_out ? 0 : c + 1) {
    const float *x = j->x + i * p->in_pix;
    float *y = j->y + i * p->out_pix;
    mrt_v16f w[9];
    const mrt_v16f vb = mrt_dwn_weights(p, c, w);
    mrt_v16f a = mrt_dwn_vec(x, 0, top.m, w, vb, W);
    __builtin_ia32_storeups512_mask(y, mrt_dwb_clamp__avx512(a, vlo, vhi), last ? full : tail);
    size_t oy = R;
    for (; oy + R < last; oy += 2 * R) {
      const mrt_v16f a0 = mrt_dwn_vec(x, (ptrdiff_t)(oy * W), mm, w, vb, W);
      const mrt_v16f a1 = mrt_dwn_vec(x, (ptrdiff_t)((oy + R) * W), mm, w, vb, W);
      __builtin_ia32_storeups512_mask(y + oy * W, mrt_dwb_clamp__avx512(a0, vlo, vhi), full);
      __builtin_ia32_storeups512_mask(y + (oy + R) * W, mrt_dwb_clamp__avx512(a1, vlo, vhi), full);
    }
    if (oy < last) {
      a = mrt_dwn_vec(x, (ptrdiff_t)(oy * W), mm, w, vb, W);
      __builtin_ia32_storeups512_mask(y + oy * W, mrt_dwb_clamp__avx512(a, vlo, vhi), full);
    }
    if (last) {
      a = mrt_dwn_vec(x, (ptrdiff_t)(last * W), bot.m, w, vb, W);
      __builtin_ia32_storeups512_mask(y + last * W, mrt_dwb_clamp__avx512(a, vlo, vhi), tail);
    }
    mrt_dwn_post(j, i, y);
  }
}

/*
 * Stride 2 on narrow planes (outputs 6 to 16 wide): the R = 16 / W output rows
 * of a vector read R input rows a kernel row, loaded whole (a 28-wide row as
 * two vectors, or two 14-wide rows as one each); each tap is then one
 * two-source permute of those loads, which takes the input column 2 x + kx - 1
 * into output lane x and zeros the padding. 192 x 28 x 28 -> 14 x 14 and
 * 576 x 14 x 14 -> 7 x 7 (MobileNetV2): the blocked path transposed four
 * input pixels an output for them.
 */
typedef int mrt_dwn_v16i __attribute__((vector_size(64)));

MRT_DWR_AVX512 static void mrt_dwn2_planes(const mrt_dwb_job *j, size_t i0, size_t i1) {
  const mrt_conv_params *p = j->p;
  const size_t W = p->out[2], H = p->out[1], IW = p->in[2], IH = p->in[1], R = 16 / W;
  mrt_dwn_v16i idx[3];
  uint16_t mk[3] = {0, 0, 0};
  for (size_t kx = 0; kx < 3; ++kx)
    for (size_t l = 0; l < 16; ++l) {
      const size_t r = l / W, col = 2 * (l % W) + kx; /* (+ 1: the pad) */
      idx[kx][l] = (int)(R == 1 ? (col ? col - 1 : 0) : r * 16 + (col ? col - 1 : 0));
      if (r < R && col >= 1 && col - 1 < IW) mk[kx] |= (uint16_t)(1u << l);
    }
  /* The loads: R == 1, a row's floats 0..15 and 16..IW; R == 2, two rows. */
  const unsigned short l0 = (unsigned short)((1u << mrt_min(IW, 16)) - 1u);
  const unsigned short l1 = (unsigned short)(R == 1 ? (IW > 16 ? (1u << (IW - 16)) - 1u : 0u) : l0);
  const mrt_v16f vlo = mrt_dwn_splat(p->lo), vhi = mrt_dwn_splat(p->hi), z = (mrt_v16f){0};
  size_t c = i0 % p->c_out;
  for (size_t i = i0; i < i1; ++i, c = c + 1 == p->c_out ? 0 : c + 1) {
    const float *x = j->x + i * p->in_pix;
    float *y = j->y + i * p->out_pix;
    mrt_v16f w[9];
    const mrt_v16f vb = mrt_dwn_weights(p, c, w);
    for (size_t oy = 0; oy < H; oy += R) {
      const size_t rr = mrt_min(R, H - oy);
      mrt_v16f acc[3] = {vb, z, z};
      _Pragma("clang loop unroll(full)") for (size_t ky = 0; ky < 3; ++ky) {
        const size_t u = 2 * oy + ky; /* input row + 1 */
        const int ok0 = u >= 1 && u - 1 < IH, ok1 = R == 1 ? ok0 : rr > 1 && u + 1 < IH;
        if (!ok0 && !ok1) continue;
        const float *r0 = x + (ok0 ? (u - 1) * IW : 0), *r1 = R == 1 ? r0 + 16 : x + (ok1 ? (u + 1) * IW : 0);
        const mrt_v16f v0 = __builtin_ia32_loadups512_mask(r0, z, ok0 ? l0 : 0);
        const mrt_v16f v1 = __builtin_ia32_loadups512_mask(r1, z, ok1 ? l1 : 0);
        _Pragma("clang loop unroll(full)") for (size_t kx = 0; kx < 3; ++kx) {
          const mrt_v16f t = __builtin_ia32_vpermi2varps512(v0, idx[kx], v1);
          acc[ky] += w[ky * 3 + kx] * __builtin_ia32_selectps_512(mk[kx], t, z);
        }
      }
      const mrt_v16f a = acc[0] + acc[1] + acc[2];
      __builtin_ia32_storeups512_mask(y + oy * W, mrt_dwb_clamp__avx512(a, vlo, vhi),
                                      (unsigned short)((1u << (rr * W)) - 1u));
    }
    mrt_dwn_post(j, i, y);
  }
}

/* And its stride 2? */
static int mrt_dwn2_takes(const mrt_conv_params *p) {
  const size_t W = p->out[2], R = W ? 16 / W : 0;
  return p->k[1] == 3 && p->k[2] == 3 && p->s[1] == 2 && p->s[2] == 2 && p->d[1] == 1 && p->d[2] == 1 &&
         p->pb[1] == 1 && p->pb[2] == 1 && W >= 6 && W <= 16 &&
         ((R == 1 && p->in[2] <= 32) || (R == 2 && p->in[2] <= 16));
}

/* Does the narrow path (stride 1) take this layer? */
static int mrt_dwn_takes(const mrt_conv_params *p) {
  return p->k[1] == 3 && p->k[2] == 3 && p->s[1] == 1 && p->s[2] == 1 && p->d[1] == 1 && p->d[2] == 1 &&
         p->pb[1] == 1 && p->pb[2] == 1 && p->out[2] == p->in[2] && p->out[1] == p->in[1] && p->out[2] <= 16 &&
         p->out[2] >= 1;
}

/* A run of planes on one thread. */
MRT_DWR_AVX512 static void mrt_dwr_task(void *varg, size_t task, size_t thread) {
  const mrt_dwb_job *j = (const mrt_dwb_job *)varg;
  const mrt_conv_params *p = j->p;
  if (p->dwb_narrow) {
    (p->dwb_narrow == 1 ? mrt_dwn_planes : mrt_dwn2_planes)(j, mrt_dwb_run_start(j, task),
                                                            mrt_dwb_run_start(j, task + 1));
    return;
  }
  float *bufs = (float *)(j->scratch + thread * j->stride);
  const size_t L = mrt_dwr_row(p);
  memset(bufs, 0, mrt_dwr_stride(p));
  const size_t i1 = mrt_dwb_run_start(j, task + 1);
  for (size_t i = mrt_dwb_run_start(j, task); i < i1; ++i) {
    if (p->s[2] == 1)
      mrt_dwr_plane(p, j, i, bufs, L, 3, 1);
    else
      mrt_dwr_plane(p, j, i, bufs, L, 3, 2);
  }
}
#endif

/* Tasks below this many multiply-adds are not worth a thread. */
#define MRT_DWB_TASK_MACS ((size_t)1 << 16)

static void mrt_conv_dwb_run(mrt_pool *pool, const mrt_conv_params *p, const float *x, const float *res,
                             float *y, void *scratch) {
  const size_t vl = p->dwb_vl, nblk = (p->c_out + vl - 1) / vl;
#if MRT_SGEMM_AVX512
  const size_t nstrip = p->dwb_sr ? (p->out[1] + p->dwb_sr - 1) / p->dwb_sr : 1; /* (0: the row path) */
#else
  const size_t nstrip = (p->out[1] + p->dwb_sr - 1) / p->dwb_sr;
#endif
  mrt_dwb_job job = {p, x, res, y, (char *)scratch, mrt_dwb_stride(p), nblk, nstrip, p->batch * nblk * nstrip, 1};
#if defined(__x86_64__)
  mrt_task_fn fn = mrt_dwb_task__avx2;
#if MRT_SGEMM_AVX512
  if (vl == 16) fn = mrt_dwb_task__avx512;
  if (!p->dwb_oc) { /* the row path: a task is a run of planes */
    fn = mrt_dwr_task;
    job.stride = mrt_round_up(mrt_dwr_stride(p), 64);
    job.items = p->batch * p->c_out;
  }
#endif
#else
  const mrt_task_fn fn = mrt_dwb_task;
#endif
  /* Runs of items, a few a thread, as many as mrt_pool_tasks allows (1: the
   * caller's thread alone), as the plane path cuts its planes: a task per
   * block (36 on 576 x 14 x 14) measured no faster at 2 threads than at 1,
   * where the plane path's 8 tasks went 63 -> 41 us, in the same runs.
   *
   * What limits 2 threads here (MobileNetV2, profile_nodes harness, quiet
   * machine, best of 3 x 30): the layers scale 1.0 - 1.5x where the 1x1
   * expansions before them scale 1.7 - 1.9x, with both threads busy the whole
   * node and the pool's dispatch under 0.5 us. Run a second time right after
   * itself, a node scales about 2x (384 x 14 x 14: 34 -> 17 us, 576 x 14 x 14
   * 55 -> 25, 960 x 7 x 7 19 -> 13; the depthwise total 832 -> 579); run
   * right after its producer again it does not (so the input, which each
   * thread reads from its own core's share of the expansion, is not it): its
   * output lands in memory the projection after the previous depthwise read
   * on both cores, and every line is taken back from the other core. Dealing
   * the runs the other way round made it slower (input from the other core:
   * 960 x 7 x 7 17 -> 24). Measured and not taken: on the row path a strip
   * of rows a thread instead of planes, to meet the 1x1s' split by pixels (96
   * x 112 x 112 stride 2: 138 against 144 us, 32 x 112 x 112 within noise);
   * write prefetches of the output lines, a chunk's at once or spread over
   * its gather (384 x 14 x 14 28 - 35 -> 33 - 41); input prefetches 2 or 4
   * vectors ahead in the gather; per-thread scratch that no other node uses;
   * the row path for 56-wide inputs on threads again after the faster fill
   * (144 x 56 x 56: 102 against 106, stride 2 63 against 64: within noise).
   *
   * Also measured and not taken: a split by rows to meet the 1x1s' split by
   * pixels on planes of 28 x 28 and more (each thread one strip of every
   * channel, strip-major items, so a thread reads the rows its expansion
   * wrote and writes the rows its projection reads; the row path a strip of
   * every plane a thread). Slower, in the model and alone. MobileNetV2, 2
   * threads, profile_nodes harness, per-node best of 20 x 10 runs in
   * interleaved rounds with an A/A control (load 2.3 - 3.4): 144 x 56 x 56
   * 107 / 107 -> 119, stride 2 to 28 x 28 68 / 68 -> 80, 192 x 28 x 28
   * 44 / 41 -> 50 and 51 / 47 -> 58, the row path's 96 x 112 x 112 stride 2
   * 141 / 137 -> 167 and 32 x 112 x 112 68 / 63 -> 77; only the projection
   * after 144 x 56 x 56 gained (98 / 94 -> 88 - 91). Alone (one-node models,
   * best of 3 x 2000 runs, where every line stays on its core either way):
   * 144 x 56 x 56 78 -> 87, stride 2 39 -> 49, 192 x 28 x 28 27 -> 34 - 37;
   * the same with the second strip's blocks in reverse order (the threads
   * never on one block at once). The strips and the work per item are the
   * same as the channel split's there, only the items each thread gets
   * differ: a channel split's thread reads and writes its planes as one
   * contiguous run (the next item continues the planes or follows them),
   * a strip split's every item starts 16 new half planes in and out (1.5 KB
   * each on 28 x 28), and the loss grows as planes shrink. Nor a pixel
   * split of the whole 14 x 14 stage (the expansions and projections by
   * columns, mrt_sgemm_mt, and these by rows): within noise or slower
   * (576 x 14 x 14 53 -> 64 us). The two vCPUs here have separate 2 MB L2s
   * (two threads each streaming 1.5 MB read 130 GB/s, as one alone).
   * On the 14 x 14 and 7 x 7 layers it was the transposes after all: the
   * narrow path (no transposes) scales them 1.8x (Intel Xeon, MobileNetV2,
   * profile_nodes, one thread -> two: 576 x 14 x 14 40 -> 22 us, where the
   * blocked path went 59 -> 57; 384 x 14 x 14 26 -> 15, was 31 -> 38). */
  if (job.items == 0) return;
  size_t per_task;
  job.runs = mrt_conv_runs(pool, job.items, p->batch * p->c_out * p->out_pix * p->kvol, MRT_DWB_TASK_MACS, &per_task);
  mrt_parallel_for(pool, job.runs, fn, &job);
}

/* The most bytes of input tile a strip holds. A strip re-reads its halo rows,
 * so strips are whole planes unless this or the threads ask for less (measured
 * on 144 x 56 x 56, 3x3: 24 KB tiles, three-row strips, cost 20 % more than
 * whole planes; the tile streams from L2 anyway, its rows read once per tap row). */
#define MRT_DWB_TILE_BYTES ((size_t)256 << 10)

/* Bytes of output tile the taps write before the activation and the transpose
 * read it back: a few rows, in L1 (8 - 16 KB measured best, 64 KB 10 % slower). */
#define MRT_DWB_OUT_BYTES ((size_t)12 << 10)

/* Chooses the blocked path (or leaves dwb_vl 0) and packs its weights. */
MRT_PREPARE_CODE
static mrt_status mrt_conv_dwb_prepare(mrt_ctx *ctx, mrt_conv_params *p, const mrt_tensor *w,
                                       const mrt_tensor *b) {
  if (!w->is_constant || !w->data || (b && (!b->is_constant || !b->data))) return MRT_STATUS_OK;
  size_t vl = 4;
#if defined(__x86_64__)
  vl = p->kern == &mrt_sgemm_avx2 ? 8 : 0;
#if MRT_SGEMM_AVX512
  if (p->kern == &mrt_sgemm_avx512) vl = 16;
#endif
  if (!vl) return MRT_STATUS_OK; /* SSE */
#endif
  const size_t OW = p->out[2], OH = p->out[1], sy = p->s[1], nblk = (p->c_out + vl - 1) / vl;
#if MRT_SGEMM_AVX512
  /* The row path where it measured faster (see above): 3x3, rows of 56 or
   * more outputs, 28 or more at stride 2 (whose blocked path transposes four
   * input pixels an output). 5x5 lost (EfficientNet-B0's 144 x 56 x 56
   * stride 2: 125 -> 166 us), as did 28-wide stride 1 and 14-wide stride 2.
   * On threads, inputs 56 wide lost too and keep the blocked path (2
   * threads, MobileNetV2's 144 x 56 x 56: 84 against 92 us, stride 2: 54
   * against 58); 112 wide won (32 x 112 x 112: 82 -> 60, stride 2 147 -> 137). */
  const size_t row_min = (p->s[1] == 2 ? 28 : 56) * (mrt_ctx_threads(ctx) > 1 ? 2 : 1);
  const int narrow = vl == 16 ? (mrt_dwn_takes(p) ? 1 : mrt_dwn2_takes(p) ? 2 : 0) : 0;
  if (vl == 16 && p->k[1] == p->k[2] && p->k[1] == 3 && p->s[1] == p->s[2] &&
      p->s[1] <= 2 && p->d[1] == 1 && p->d[2] == 1 && (size_t)p->pb[2] < p->k[2] && (size_t)p->pb[1] < p->k[1] &&
      (OW >= row_min || narrow)) {
    const uint64_t nw = (uint64_t)p->c_out * (p->kvol + 1);
    float *pw = (float *)mrt_ctx_alloc(ctx, (size_t)nw * sizeof(float));
    if (!pw) return MRT_STATUS_OUT_OF_MEMORY;
    const float *wd = (const float *)w->data, *bd = b ? (const float *)b->data : NULL;
    for (size_t c = 0; c < p->c_out; ++c) {
      for (size_t t = 0; t < p->kvol; ++t) pw[c * p->kvol + t] = wd[c * p->kvol + t];
      pw[p->c_out * p->kvol + c] = bd ? bd[c] : 0.0f;
    }
    p->dwb_vl = vl;
    p->dwb_oc = 0;
    p->dwb_w = pw;
    p->dwb_narrow = narrow;
    if (!narrow) /* (the narrow paths use no scratch) */
      mrt_conv_request_scratch(ctx, p, mrt_ctx_threads(ctx) * mrt_round_up(mrt_dwr_stride(p), 64));
    return MRT_STATUS_OK;
  }
#endif
  /* Where the plane path measured faster (profile_nodes, MobileNetV2 and
   * EfficientNet-B0, same run): AVX2's 8-float rows on 3x3 planes 28 or more
   * outputs wide (144 x 56 x 56: 218 against 273 us; 192 x 28 x 28: 82 against
   * 92). With 16 lanes (AVX-512) and 4 (SSE, NEON) the blocked path is as
   * fast or faster on every layer of both (5x5 layers 1.5 - 3x faster). At
   * stride 2 the plane path's deinterleaving copy costs more than the blocked
   * path's transposes (AMD EPYC, one-node 3x3 + Clip, best of 200, 3
   * interleaved rounds: 144 x 56 x 56 154 -> 116 us, 2 threads 82 -> 60;
   * 96 x 112 x 112 325 -> 301, 2 threads 169 -> 155): stride 1 only. */
  if (vl == 8 && p->k[1] == 3 && p->k[2] == 3 && p->s[1] == 1 && OW >= 28) return MRT_STATUS_OK;
  /* In 64 bits: size_t is 32 on armv7 and x86. */
  const uint64_t iw = (uint64_t)(OW - 1) * p->s[2] + (uint64_t)(p->k[2] - 1) * p->d[2] + 1;
  const uint64_t halo = (uint64_t)(p->k[1] - 1) * p->d[1] + 1, row = iw * vl * sizeof(float);
  if (halo * row > MRT_DWB_TILE_BYTES) return MRT_STATUS_OK; /* rows too wide: the plane path */
  uint64_t sr = (MRT_DWB_TILE_BYTES / row - halo) / sy + 1;
  /* Few channel blocks for the threads: strips, so that runs of items split
   * evenly (9 blocks at 2 threads made 5 runs, one thread doing 3 of them). */
  const size_t threads = mrt_ctx_threads(ctx), tasks = p->batch * nblk;
  if (threads > 1 && tasks < 8 * threads) {
    const uint64_t strips = (8 * threads + tasks - 1) / tasks, want = (OH + strips - 1) / strips;
    if (want < sr) sr = want < 2 ? 2 : want;
  }
  if (sr > OH) sr = OH;
  const uint64_t th = (sr - 1) * sy + halo;
  const uint64_t nw = (uint64_t)nblk * (p->kvol + 1) * vl;
  if (nw > (SIZE_MAX - 64) / sizeof(float) / 2) return MRT_STATUS_OK; /* (32-bit targets) */
  float *pw = (float *)mrt_ctx_alloc(ctx, (size_t)nw * sizeof(float) + 64);
  if (!pw) return MRT_STATUS_OUT_OF_MEMORY;
  pw = (float *)(((uintptr_t)pw + 63) & ~(uintptr_t)63);
  const float *wd = (const float *)w->data, *bd = b ? (const float *)b->data : NULL;
  for (size_t c = 0; c < p->c_out; ++c) {
    for (size_t t = 0; t < p->kvol; ++t) pw[((c / vl) * p->kvol + t) * vl + c % vl] = wd[c * p->kvol + t];
    if (bd) pw[(nblk * p->kvol + c / vl) * vl + c % vl] = bd[c];
  }
  p->dwb_vl = vl;
  p->dwb_sr = (size_t)sr;
  p->dwb_th = (size_t)th;
  p->dwb_iw = (size_t)iw;
  {
    const size_t oc = MRT_DWB_OUT_BYTES / (OW * vl * sizeof(float));
    p->dwb_oc = oc < 1 ? 1 : (oc > p->dwb_sr ? p->dwb_sr : oc);
  }
  p->dwb_w = pw;
  mrt_conv_request_scratch(ctx, p, mrt_ctx_threads(ctx) * mrt_round_up(mrt_dwb_stride(p), 64));
  return MRT_STATUS_OK;
}
