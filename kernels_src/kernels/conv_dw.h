/*
 * Channel-blocked direct depthwise convolution (included by conv_core.c, which
 * chooses it at prepare; `--tune size` builds leave it out).
 *
 * The plane path (conv_core.c) computes one channel plane at a time with
 * vectors along its rows: on 7x7 and 14x14 planes most lanes of a 16-float
 * vector are idle and the per-plane work (padding, the activation call) costs
 * more than the taps. Here a vector holds one pixel of VL channels instead:
 *   1. the input rows a strip of output rows reads are transposed, VL x VL
 *      floats at a time, into a zero-padded tile of [rows][cols][VL] floats;
 *   2. each output pixel is one vector: bias, then the taps' FMAs (weights
 *      packed at prepare as [block][tap][VL]; 3x3 and 5x5 with the taps as
 *      constants), then the clamp;
 *   3. the activation runs once on the whole output tile (one contiguous
 *      array), which is transposed back into the NCHW planes; with a residual
 *      the planes get the Add, the clamp after it and the activation instead.
 * Tasks are (batch item, channel block, strip of output rows), so few channels
 * on a big plane still split over threads. A last block of fewer than VL
 * channels reads zeros for the missing ones and does not store them.
 */

/* Output pixels computed together: each weight vector loaded serves them all. */
#define MRT_DWB_NX 4

/* Interleave the low / high halves of two VL-vectors (lanes a0 b0 a1 b1 ...). */
#define MRT_DWB_LO4 0, 4, 1, 5
#define MRT_DWB_HI4 2, 6, 3, 7
#define MRT_DWB_LO8 0, 8, 1, 9, 2, 10, 3, 11
#define MRT_DWB_HI8 4, 12, 5, 13, 6, 14, 7, 15
#define MRT_DWB_LO16 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define MRT_DWB_HI16 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31

/* Per-thread scratch of the blocked path: the input tile, the output tile and
 * a VL x VL staging block for ragged ends, in floats (each 64-byte aligned). */
static size_t mrt_dwb_tile_in(const mrt_conv_params *p) { return mrt_round_up(p->dwb_th * p->dwb_iw * p->dwb_vl, 16); }
static size_t mrt_dwb_tile_out(const mrt_conv_params *p) {
  return mrt_round_up(p->dwb_sr * p->out[2] * p->dwb_vl, 16);
}
static size_t mrt_dwb_stride(const mrt_conv_params *p) {
  return (mrt_dwb_tile_in(p) + mrt_dwb_tile_out(p) + p->dwb_vl * p->dwb_vl) * sizeof(float);
}

typedef struct mrt_dwb_job {
  const mrt_conv_params *p;
  const float *x, *res;
  float *y;
  char *scratch;
  size_t stride, nblk, nstrip;
} mrt_dwb_job;

/*
 * NAME##_task for one vector type. The transpose is log2(VL) rounds of
 * interleaving vector i with vector i + VL/2: after them vector k holds lane
 * k of every input vector.
 */
#define MRT_DWB(SUF, ATTR, VT, VL, LO, HI)                                                              \
  ATTR static inline __attribute__((always_inline)) void mrt_dwb_tr##SUF(VT *v) {                       \
    for (size_t r = 1; r < (VL); r *= 2) {                                                              \
      VT t[VL];                                                                                         \
      for (size_t i = 0; i < (VL) / 2; ++i) {                                                           \
        t[2 * i] = __builtin_shufflevector(v[i], v[i + (VL) / 2], LO);                                  \
        t[2 * i + 1] = __builtin_shufflevector(v[i], v[i + (VL) / 2], HI);                              \
      }                                                                                                 \
      for (size_t i = 0; i < (VL); ++i) v[i] = t[i];                                                    \
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
    size_t col = 0;                                                                                     \
    for (size_t i = 0; i < n; i += (VL)) {                                                              \
      VT v[VL];                                                                                         \
      if (i + (VL) <= n && nch == (VL)) {                                                               \
        for (size_t c = 0; c < (VL); ++c) __builtin_memcpy(&v[c], src + c * plane + i, sizeof(VT));      \
      } else {                                                                                          \
        /* A ragged end or block: through the zeroed staging block. */                                  \
        const size_t m = mrt_min((VL), n - i);                                                          \
        memset(stage, 0, (VL) * (VL) * sizeof(float));                                                  \
        for (size_t c = 0; c < nch; ++c) memcpy(stage + c * (VL), src + c * plane + i, m * sizeof(float)); \
        for (size_t c = 0; c < (VL); ++c) __builtin_memcpy(&v[c], stage + c * (VL), sizeof(VT));        \
      }                                                                                                 \
      mrt_dwb_tr##SUF(v);                                                                               \
      const size_t m = mrt_min((VL), n - i);                                                            \
      for (size_t k = 0; k < m; ++k) {                                                                  \
        if (col < cw) *(VT *)(dst + col * (VL)) = v[k];                                                 \
        if (++col == W) col = 0, dst += iw * (VL);                                                      \
      }                                                                                                 \
    }                                                                                                   \
  }                                                                                                     \
                                                                                                        \
  /* Output rows oy0 .. oy0 + rows into the output tile; KH, KW constants or 0. */                      \
  ATTR static inline __attribute__((always_inline)) void mrt_dwb_taps##SUF(                             \
      const mrt_conv_params *p, const float *MRT_RESTRICT tile, const float *MRT_RESTRICT w,            \
      const float *MRT_RESTRICT bias, size_t rows, float *MRT_RESTRICT out, size_t KH, size_t KW) {     \
    const size_t kh = KH ? KH : p->k[1], kw = KW ? KW : p->k[2], OW = p->out[2], iw = p->dwb_iw;        \
    const size_t sy = p->s[1], sx = p->s[2] * (VL), dy = p->d[1] * iw * (VL), dx = p->d[2] * (VL);     \
    const VT vb = *(const VT *)bias, vlo = (VT){0} + p->lo, vhi = (VT){0} + p->hi;                      \
    for (size_t oy = 0; oy < rows; ++oy) {                                                              \
      const float *tr = tile + oy * sy * iw * (VL);                                                     \
      float *orow = out + oy * OW * (VL);                                                               \
      size_t ox = 0;                                                                                    \
      for (; ox + MRT_DWB_NX <= OW; ox += MRT_DWB_NX) {                                                 \
        VT acc[MRT_DWB_NX];                                                                             \
        for (size_t j = 0; j < MRT_DWB_NX; ++j) acc[j] = vb;                                            \
        const float *tp = tr + ox * sx;                                                                 \
        for (size_t ky = 0; ky < kh; ++ky)                                                              \
          for (size_t kx = 0; kx < kw; ++kx) {                                                          \
            const VT wv = *(const VT *)(w + (ky * kw + kx) * (VL));                                     \
            const float *q = tp + ky * dy + kx * dx;                                                    \
            for (size_t j = 0; j < MRT_DWB_NX; ++j) acc[j] += wv * *(const VT *)(q + j * sx);           \
          }                                                                                             \
        for (size_t j = 0; j < MRT_DWB_NX; ++j)                                                         \
          *(VT *)(orow + (ox + j) * (VL)) = MRT_VMIN(MRT_VMAX(acc[j], vlo), vhi);                       \
      }                                                                                                 \
      for (; ox < OW; ++ox) {                                                                           \
        VT acc = vb;                                                                                    \
        const float *tp = tr + ox * sx;                                                                 \
        for (size_t ky = 0; ky < kh; ++ky)                                                              \
          for (size_t kx = 0; kx < kw; ++kx)                                                            \
            acc += *(const VT *)(w + (ky * kw + kx) * (VL)) * *(const VT *)(tp + ky * dy + kx * dx);    \
        *(VT *)(orow + ox * (VL)) = MRT_VMIN(MRT_VMAX(acc, vlo), vhi);                                  \
      }                                                                                                 \
    }                                                                                                   \
  }                                                                                                     \
                                                                                                        \
  ATTR static void mrt_dwb_task##SUF(void *varg, size_t task, size_t thread) {                          \
    const mrt_dwb_job *j = (const mrt_dwb_job *)varg;                                                   \
    const mrt_conv_params *p = j->p;                                                                    \
    const size_t strip = task % j->nstrip, blk = task / j->nstrip % j->nblk, nb = task / j->nstrip / j->nblk; \
    const size_t c0 = blk * (VL), nch = mrt_min((VL), p->c_out - c0), OW = p->out[2];                   \
    const size_t oy0 = strip * p->dwb_sr, rows = mrt_min(p->dwb_sr, p->out[1] - oy0);                   \
    const size_t th = (rows - 1) * p->s[1] + (p->k[1] - 1) * p->d[1] + 1;                                \
    float *tile = (float *)(j->scratch + thread * j->stride);                                           \
    float *out = tile + mrt_dwb_tile_in(p), *stage = out + mrt_dwb_tile_out(p);                         \
    const float *x = j->x + (nb * p->c_in + c0) * p->in_pix;                                            \
    mrt_dwb_gather##SUF(p, x, nch, oy0 * p->s[1], th, tile, stage);                                     \
    const float *w = p->dwb_w + blk * p->kvol * (VL), *bias = p->dwb_w + (j->nblk * p->kvol + blk) * (VL); \
    if (p->k[1] == 3 && p->k[2] == 3)                                                                   \
      mrt_dwb_taps##SUF(p, tile, w, bias, rows, out, 3, 3);                                             \
    else if (p->k[1] == 5 && p->k[2] == 5)                                                              \
      mrt_dwb_taps##SUF(p, tile, w, bias, rows, out, 5, 5);                                             \
    else                                                                                                \
      mrt_dwb_taps##SUF(p, tile, w, bias, rows, out, 0, 0);                                             \
    const size_t n = rows * OW, pix0 = oy0 * OW;                                                        \
    mrt_sgemm_epilogue e = p->post;                                                                     \
    if (p->post.post && !j->res) {                                                                      \
      e.res = NULL;                                                                                     \
      mrt_conv_post(&e, 0, 0, 1, n * (VL), out, 0);                                                     \
    }                                                                                                   \
    float *y = j->y + (nb * p->c_out + c0) * p->out_pix + pix0;                                         \
    for (size_t i = 0; i < n; i += (VL)) {                                                              \
      VT v[VL];                                                                                         \
      if (i + (VL) <= n && nch == (VL)) {                                                               \
        for (size_t k = 0; k < (VL); ++k) v[k] = *(const VT *)(out + (i + k) * (VL));                   \
        mrt_dwb_tr##SUF(v);                                                                             \
        for (size_t c = 0; c < (VL); ++c) __builtin_memcpy(y + c * p->out_pix + i, &v[c], sizeof(VT));  \
        continue;                                                                                       \
      }                                                                                                 \
      const size_t m = mrt_min((VL), n - i);                                                            \
      memset(stage, 0, (VL) * (VL) * sizeof(float));                                                    \
      memcpy(stage, out + i * (VL), m * (VL) * sizeof(float));                                          \
      for (size_t k = 0; k < (VL); ++k) __builtin_memcpy(&v[k], stage + k * (VL), sizeof(VT));          \
      mrt_dwb_tr##SUF(v);                                                                               \
      for (size_t c = 0; c < (VL); ++c) __builtin_memcpy(stage + c * (VL), &v[c], sizeof(VT));          \
      for (size_t c = 0; c < nch; ++c) memcpy(y + c * p->out_pix + i, stage + c * (VL), m * sizeof(float)); \
    }                                                                                                   \
    if (p->post.post && j->res) {                                                                       \
      e.res = j->res + (nb * p->c_out + c0) * p->out_pix + pix0;                                        \
      mrt_conv_post(&e, 0, 0, nch, n, y, p->out_pix);                                                   \
    }                                                                                                   \
  }

#if defined(__x86_64__)
MRT_DWB(__sse, , mrt_v4f, 4, MRT_DWB_LO4, MRT_DWB_HI4)
MRT_DWB(__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8, MRT_DWB_LO8, MRT_DWB_HI8)
#if MRT_SGEMM_AVX512
MRT_DWB(__avx512, __attribute__((target("avx512f,avx2,fma"))), mrt_v16f, 16, MRT_DWB_LO16, MRT_DWB_HI16)
#endif
#else
MRT_DWB(, , mrt_v4f, 4, MRT_DWB_LO4, MRT_DWB_HI4)
#endif

/* Tasks below this many multiply-adds are not worth a thread. */
#define MRT_DWB_TASK_MACS ((size_t)1 << 14)

static void mrt_conv_dwb_run(mrt_pool *pool, const mrt_conv_params *p, const float *x, const float *res,
                             float *y, void *scratch) {
  const size_t vl = p->dwb_vl, nblk = (p->c_out + vl - 1) / vl, nstrip = (p->out[1] + p->dwb_sr - 1) / p->dwb_sr;
  mrt_dwb_job job = {p, x, res, y, (char *)scratch, mrt_dwb_stride(p), nblk, nstrip};
#if defined(__x86_64__)
  mrt_task_fn fn = vl == 8 ? mrt_dwb_task__avx2 : mrt_dwb_task__sse;
#if MRT_SGEMM_AVX512
  if (vl == 16) fn = mrt_dwb_task__avx512;
#endif
#else
  const mrt_task_fn fn = mrt_dwb_task;
#endif
  const size_t tasks = p->batch * nblk * nstrip;
  (void)MRT_DWB_TASK_MACS;
  mrt_parallel_for(pool, tasks, fn, &job);
}

/* Bytes of input tile a strip aims at (it stays in L1 while its taps run). */
#ifndef MRT_DWB_TILE_BYTES
#define MRT_DWB_TILE_BYTES ((size_t)96 << 10)
#endif

/* Chooses the blocked path (or leaves dwb_vl 0) and packs its weights. */
MRT_PREPARE_CODE
static mrt_status mrt_conv_dwb_prepare(mrt_ctx *ctx, mrt_conv_params *p, const mrt_tensor *w,
                                       const mrt_tensor *b) {
  if (!w->is_constant || !w->data || (b && (!b->is_constant || !b->data))) return MRT_STATUS_OK;
  size_t vl = 4;
#if defined(__x86_64__)
  if (p->kern == &mrt_sgemm_avx2) vl = 8;
#if MRT_SGEMM_AVX512
  if (p->kern == &mrt_sgemm_avx512) vl = 16;
#endif
#endif
  const size_t OW = p->out[2], kh = p->k[1], sy = p->s[1];
  /* In 64 bits: size_t is 32 on armv7 and x86. */
  const uint64_t iw = (uint64_t)(OW - 1) * p->s[2] + (uint64_t)(p->k[2] - 1) * p->d[2] + 1;
  const uint64_t halo = (uint64_t)(kh - 1) * p->d[1] + 1, row = iw * vl * sizeof(float);
  uint64_t sr = MRT_DWB_TILE_BYTES / row > halo ? (MRT_DWB_TILE_BYTES / row - halo) / sy + 1 : 1;
  if (sr > p->out[1]) sr = p->out[1];
  const uint64_t th = (sr - 1) * sy + halo;
  if (th * row + sr * OW * vl * sizeof(float) > INT32_MAX / 4) return MRT_STATUS_OK; /* the plane path copes */
  const size_t nblk = (p->c_out + vl - 1) / vl;
  float *pw = (float *)mrt_ctx_alloc(ctx, (nblk * (p->kvol + 1) * vl) * sizeof(float) + 64);
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
  p->dwb_w = pw;
  mrt_ctx_request_scratch(ctx, mrt_ctx_threads(ctx) * mrt_round_up(mrt_dwb_stride(p), 64));
  return MRT_STATUS_OK;
}
