/*
 * Convolution core (support unit `conv`), shared by Conv and FusedConv; see
 * conv_core.h. Four paths, chosen at prepare:
 *   pointwise (1x1, stride 1, no pad): X of a group already is GEMM's B;
 *   depthwise 2-D / 1-D: direct, one padded channel plane at a time;
 *   at most 4 input channels (stems; desktop x86_64 speed builds): direct,
 *   conv_direct.h;
 *   3x3 stride 1 on 196+ outputs (desktop x86_64 speed builds, AVX-512):
 *   Winograd F(2x2, 3x3), conv_winograd.h; other KxK with whole channel
 *   panels there: the dense path, conv_dense.h;
 *   anything else: im2col packed straight into GEMM's B panels.
 * The GEMM itself (packing, micro-kernels) is the `gemm` support unit.
 */
#include "conv_core.h"
#include "gemm.h"

typedef float mrt_v4f __attribute__((vector_size(16)));
#if defined(__x86_64__)
typedef float mrt_v8f __attribute__((vector_size(32)));
typedef float mrt_v16f __attribute__((vector_size(64)));
#endif

static size_t mrt_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
static size_t mrt_min(size_t a, size_t b) { return a < b ? a : b; }

/* Cuts `items` (planes, channel blocks, row strips) into equal runs for the
 * session's threads: as many as mrt_pool_tasks allows for `work`, rounded up
 * to a whole number a thread (5 runs on 2 threads left one thread 3 of them).
 * Returns the number of runs, *per_task items each (the last may hold fewer);
 * 1 run of every item when the work is too small for threads. Shared by the
 * depthwise plane and blocked paths and the stem path. */
static size_t mrt_conv_runs(mrt_pool *pool, size_t items, size_t work, size_t min_work, size_t *per_task) {
  size_t tasks = mrt_pool_tasks(pool, work, min_work);
  if (tasks > 1) tasks = mrt_min(items, mrt_round_up(tasks, mrt_pool_threads(pool)));
  if (tasks <= 1) {
    *per_task = items;
    return 1;
  }
  *per_task = (items + tasks - 1) / tasks;
  return (items + *per_task - 1) / *per_task;
}

/*
 * Every convolution is handled as 3-D: 1-D and 2-D ones get leading spatial
 * dims of size 1 (kernel 1, stride 1, no pad), so one im2col serves all.
 */
enum { MRT_CONV_GEMM = 0, MRT_CONV_DEPTHWISE = 1, MRT_CONV_IM2COL = 2 };

typedef struct mrt_conv_params {
  const mrt_sgemm_kernel *kern;
  int path;
  size_t batch, c_in, c_out, group, m, kdim, in_pix, out_pix, kvol;
  size_t in[3], out[3], k[3], s[3], d[3];
  ptrdiff_t pb[3];
  size_t dw_rw, dw_rows;   /* depthwise: padded buffer row width and rows per phase */
  int32_t *dw_taps;        /* depthwise: buffer offset of each tap (see mrt_conv_dw_pad) */
  float lo, hi;            /* the tiles' clamp */
  mrt_sgemm_epilogue post; /* the stage after it (post.post NULL: none; res set per run) */
  float *packed_w;         /* per group, packed_w_stride floats each; NULL: pack at run */
  size_t packed_w_stride;
  /* im2col reads a zero-padded copy of the group's input (or the input itself
   * when no tap falls outside it): planes of xp[0] x xp[1] x xp[2]. */
  size_t xp[3];
  int pad_copy;            /* 1: copy into scratch at pad_off, pad_floats floats */
  size_t pad_off, pad_floats;
  size_t *kofs;            /* im2col row k = (channel, kz, ky, kx): its offset in that buffer */
  /* Depthwise, channel-blocked (conv_dw.h; dwb_vl 0: the plane path): VL
   * channels a block, strips of dwb_sr output rows reading dwb_th x dwb_iw
   * tile pixels, computed dwb_oc rows at a time; weights [block][tap][VL],
   * then biases [block][VL]. */
  size_t dwb_vl, dwb_sr, dwb_th, dwb_iw, dwb_oc;
  float *dwb_w;
  int dwb_narrow; /* on the row path (dwb_oc 0): 1 the narrow path, 2 its stride 2 (conv_dw.h) */
  /* Direct path for C_in <= 4 (conv_direct.h; stem_w NULL: im2col): weights
   * [group][tap][G], each tap's offset in a strip's buffer, its row width,
   * output rows a strip. */
  float *stem_w;
  int32_t *stem_taps;
  size_t stem_rw, stem_sr;
  /* Dense path without im2col (conv_dense.h; dense_w NULL: im2col): the
   * weights as [panel of dense_nc output channels][k][dense_nc] (64 on
   * AVX-512, 16 on AVX2). */
  float *dense_w;
  size_t dense_nc;
  int wino; /* dense_w holds Winograd's transformed weights (conv_winograd.h) */
  /* Y in the residual's memory (the planner's in_place, docs/registry.md):
   * the GEMM paths add the product onto it (accumulate); the others
   * (res_copy) read a copy of the residual taken first into the session's
   * scratch at res_off, after this node's own need (scratch_bytes). */
  int in_place, res_copy;
  size_t res_off, scratch_bytes;
} mrt_conv_params;

/* Every path asks for its scratch here (the headers included below too), so
 * that prepare knows where this node's need ends: the residual's copy goes
 * after it in the scratch that all nodes share, not in memory of its own. */
MRT_PREPARE_CODE static void mrt_conv_request_scratch(mrt_ctx *ctx, mrt_conv_params *p, size_t size) {
  if (size > p->scratch_bytes) p->scratch_bytes = size;
  mrt_ctx_request_scratch(ctx, size);
}

/* The channel-blocked depthwise path is speed code: `--tune size` keeps the
 * plane path only, as do Android's x86 ABIs (emulators; the blocked path cost
 * x86_64 14 KB of the AAR's 150 KB bar, x86 10 KB): on x86 it is built where
 * the AVX-512 GEMM is (desktop x86_64). */
#if !MRT_TUNE_SIZE && (!(defined(__x86_64__) || defined(__i386__)) || MRT_SGEMM_AVX512)
#define MRT_CONV_DWB 1
#else
#define MRT_CONV_DWB 0
#endif

/* The direct path for convolutions with very few input channels (stems) is
 * speed code too, built with the AVX-512 GEMM (desktop x86_64). */
#if MRT_SGEMM_AVX512
#define MRT_CONV_STEM 1
#else
#define MRT_CONV_STEM 0
#endif

typedef struct mrt_im2col_ctx {
  const mrt_conv_params *p;
  const float *x; /* first input channel of the group, this batch item */
} mrt_im2col_ctx;

/*
 * Custom B packer: writes im2col columns j0..j0+nc for rows k0..k0+kc
 * straight into nr-wide panels, so the full im2col matrix never exists.
 * Columns of a panel are split in runs that share one output row; the input
 * is padded (see mrt_conv_params.xp), so a run is a plain copy: contiguous for
 * stride 1, every sx-th float otherwise, with no bounds to check.
 */
static inline size_t mrt_im2col_runs(const mrt_conv_params *p, size_t j, size_t pw, size_t *run_col,
                                     size_t *run_len, size_t *run_base) {
  const size_t ow = p->out[2], oh = p->out[1], sx = p->s[2];
  const size_t zstep = p->s[0] * p->xp[1] * p->xp[2], ystep = p->s[1] * p->xp[2];
  size_t nruns = 0;
  for (size_t col = 0; col < pw; ++nruns) {
    const size_t row = (j + col) / ow, ox = (j + col) % ow, len = mrt_min(ow - ox, pw - col);
    run_col[nruns] = col;
    run_len[nruns] = len;
    run_base[nruns] = (row / oh) * zstep + (row % oh) * ystep + ox * sx;
    col += len;
  }
  return nruns;
}

static void mrt_conv_im2col_pack(const void *vctx, size_t k0, size_t kc, size_t j0, size_t nc,
                                 size_t nr, float *MRT_RESTRICT dst) {
  const mrt_im2col_ctx *ic = (const mrt_im2col_ctx *)vctx;
  const mrt_conv_params *p = ic->p;
  const size_t sx = p->s[2];
  size_t run_col[64], run_len[64], run_base[64];
  for (size_t pc = 0; pc < nc; pc += nr, dst += nr * kc) {
    const size_t pw = mrt_min(nr, nc - pc);
    const size_t nruns = mrt_im2col_runs(p, j0 + pc, pw, run_col, run_len, run_base);
    for (size_t q = 0; q < kc; ++q) {
      const float *src = ic->x + p->kofs[k0 + q];
      float *d = dst + q * nr;
      for (size_t r = 0; r < nruns; ++r) {
        float *dr = d + run_col[r];
        const float *s = src + run_base[r];
        const size_t len = run_len[r];
        size_t t = 0;
        /* Fixed-size chunks the compiler turns into vector moves (shuffles
         * for stride 2). */
        if (sx == 1) {
          for (; t + 4 <= len; t += 4) __builtin_memcpy(dr + t, s + t, 4 * sizeof(float));
        } else if (sx == 2) {
          for (; t + 4 <= len; t += 4)
            for (size_t u = 0; u < 4; ++u) dr[t + u] = s[2 * (t + u)];
        }
        for (; t < len; ++t) dr[t] = s[t * sx];
      }
      for (size_t t = pw; t < nr; ++t) d[t] = 0.0f;
    }
  }
}

#if MRT_SGEMM_AVX512
#define MRT_AVX512F __attribute__((target("avx512f,avx2,fma")))
MRT_AVX512F static inline mrt_v16f mrt_load16(const float *s, size_t n) {
  return __builtin_ia32_loadups512_mask(s, (mrt_v16f){0}, (unsigned short)(n >= 16 ? 0xffffu : (1u << n) - 1u));
}
MRT_AVX512F static inline void mrt_store16(float *d, mrt_v16f v, size_t n) {
  __builtin_ia32_storeups512_mask(d, v, (unsigned short)(n >= 16 ? 0xffffu : (1u << n) - 1u));
}

static inline unsigned short mrt_mask16(size_t n) { return (unsigned short)(n >= 16 ? 0xffffu : (1u << n) - 1u); }

/* The same packer with AVX-512F, for the 48-wide panels of that GEMM kernel.
 * A panel's runs are first turned into a list of vector moves (destination
 * column, source offset, load and store masks: a run 16 floats at a time, its
 * ragged end masked; the panel's columns past the last output loaded with an
 * empty mask, i.e. zeros), so that each of the kc rows is the same few masked
 * moves with nothing left to compute; stride 2 takes the even floats of 32
 * with one permute. */
MRT_AVX512F static void mrt_conv_im2col_pack__avx512(const void *vctx, size_t k0, size_t kc, size_t j0,
                                                    size_t nc, size_t nr, float *MRT_RESTRICT dst) {
  const mrt_im2col_ctx *ic = (const mrt_im2col_ctx *)vctx;
  const mrt_conv_params *p = ic->p;
  const size_t sx = p->s[2];
  if (sx > 2 || nr > 64) {
    mrt_conv_im2col_pack(vctx, k0, kc, j0, nc, nr, dst);
    return;
  }
  size_t run_col[64], run_len[64], run_base[64];
  /* At most one move a run (runs of 16 or fewer) or len / 16 + 1, plus the tail:
   * 64 + 4 + 4. */
  uint32_t o_dst[72], o_src[72];
  unsigned short o_ld0[72], o_ld1[72], o_st[72];
  const size_t *kofs = p->kofs + k0;
  for (size_t pc = 0; pc < nc; pc += nr, dst += nr * kc) {
    const size_t pw = mrt_min(nr, nc - pc);
    const size_t nruns = mrt_im2col_runs(p, j0 + pc, pw, run_col, run_len, run_base);
    size_t nops = 0;
#pragma clang loop unroll(disable) vectorize(disable)
    for (size_t r = 0; r < nruns; ++r)
#pragma clang loop unroll(disable) vectorize(disable)
      for (size_t t = 0; t < run_len[r]; t += 16, ++nops) {
        const size_t rem = run_len[r] - t;
        o_dst[nops] = (uint32_t)(run_col[r] + t);
        o_src[nops] = (uint32_t)(run_base[r] + t * sx);
        o_st[nops] = mrt_mask16(rem);
        /* Stride 2 reads inputs 2t .. 2t + 2 (rem - 1) of the run. */
        const size_t n = sx == 2 ? 2 * rem - 1 : rem;
        o_ld0[nops] = mrt_mask16(n);
        o_ld1[nops] = mrt_mask16(n > 16 ? n - 16 : 0);
      }
#pragma clang loop unroll(disable) vectorize(disable)
    for (size_t t = pw; t < nr; t += 16, ++nops) {
      o_dst[nops] = (uint32_t)t;
      o_src[nops] = 0;
      o_st[nops] = mrt_mask16(nr - t);
      o_ld0[nops] = o_ld1[nops] = 0;
    }
    float *d = dst;
    if (sx == 1) {
      for (size_t q = 0; q < kc; ++q, d += nr) {
        const float *src = ic->x + kofs[q];
        for (size_t e = 0; e < nops; ++e)
          __builtin_ia32_storeups512_mask(
              d + o_dst[e], __builtin_ia32_loadups512_mask(src + o_src[e], (mrt_v16f){0}, o_ld0[e]), o_st[e]);
      }
    } else {
      for (size_t q = 0; q < kc; ++q, d += nr) {
        const float *src = ic->x + kofs[q];
        for (size_t e = 0; e < nops; ++e) {
          const mrt_v16f u = __builtin_ia32_loadups512_mask(src + o_src[e], (mrt_v16f){0}, o_ld0[e]);
          const mrt_v16f w = __builtin_ia32_loadups512_mask(src + o_src[e] + 16, (mrt_v16f){0}, o_ld1[e]);
          const mrt_v16f ev =
              __builtin_shufflevector(u, w, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
          __builtin_ia32_storeups512_mask(d + o_dst[e], ev, o_st[e]);
        }
      }
    }
  }
}
#endif

/* The zero-padded copy of one group's input that im2col reads. Only the input's
 * own samples are written: the zero border is the same for every group and is
 * cleared once per run by the caller. */
static const float *mrt_conv_pad_input(const mrt_conv_params *p, const float *xg, float *MRT_RESTRICT xp,
                                       size_t c0, size_t c1) {
  const size_t pz = p->xp[0], py = p->xp[1], px = p->xp[2];
  /* Input samples that land in the buffer (a big stride can leave trailing ones unread). */
  size_t n[3];
  for (size_t a = 0; a < 3; ++a)
    n[a] = p->xp[a] > (size_t)p->pb[a] ? mrt_min(p->in[a], p->xp[a] - (size_t)p->pb[a]) : 0;
  const size_t z1 = n[0], y1 = n[1], w = n[2];
  for (size_t c = c0; c < c1; ++c)
    for (size_t z = 0; z < z1; ++z)
      for (size_t y = 0; y < y1; ++y)
        memcpy(xp + ((c * pz + z + (size_t)p->pb[0]) * py + y + (size_t)p->pb[1]) * px + (size_t)p->pb[2],
               xg + c * p->in_pix + (z * p->in[1] + y) * p->in[2], w * sizeof(float));
  return xp;
}

#if MRT_SGEMM_AVX512
#define MRT_CONV_DENSE(p) ((p)->dense_w != NULL)
#else
#define MRT_CONV_DENSE(p) 0
#endif

#if MRT_SGEMM_AVX512
/* The same copy with its zero border, every slot written once (the dense
 * path: clearing the whole buffer first had written a 3x3 stride-2 layer's
 * 1.7 MB twice). */
/* Rows are short (16 to 58 floats in ResNet-50) and three libc calls a row
 * cost more than the copy: fixed-size moves, which the compiler inlines (a
 * plain loop it turns back into memset / memcpy calls). AVX2: the dense path
 * runs on the AVX2 or AVX-512 kernel only. */
__attribute__((target("avx2,fma"))) static inline void mrt_conv_row_copy(float *d, const float *s, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) __builtin_memcpy(d + i, s + i, 32);
  if (n - i >= 4) __builtin_memcpy(d + i, s + i, 16), i += 4;
  if (n - i >= 2) __builtin_memcpy(d + i, s + i, 8), i += 2;
  if (n - i >= 1) d[i] = s[i];
}
__attribute__((target("avx2,fma"))) static inline void mrt_conv_row_zero(float *d, size_t n) {
  static const float z[8];
  mrt_conv_row_copy(d, z, n < 8 ? n : 8);
  for (size_t i = 8; i < n; i += 8) mrt_conv_row_copy(d + i, z, n - i < 8 ? n - i : 8);
}
/* Channels [c0, c1), padded rows [r0, r1) of each (row r = z * xp[1] + y). */
__attribute__((target("avx2,fma"))) static void mrt_conv_pad_fill(const mrt_conv_params *p, const float *xg,
                                                                float *MRT_RESTRICT xp, size_t c0, size_t c1,
                                                                size_t r0, size_t r1) {
  const size_t pz = p->xp[0], py = p->xp[1], px = p->xp[2];
  /* (a left pad wider than the buffer: every column is padding) */
  const size_t bz = (size_t)p->pb[0], by = (size_t)p->pb[1], bx = mrt_min((size_t)p->pb[2], px);
  size_t n[3];
  for (size_t a = 0; a < 3; ++a)
    n[a] = p->xp[a] > (size_t)p->pb[a] ? mrt_min(p->in[a], p->xp[a] - (size_t)p->pb[a]) : 0;
  for (size_t c = c0; c < c1; ++c)
    for (size_t r = r0; r < r1; ++r) {
      const size_t z = r / py, y = r % py;
      float *d = xp + (c * pz * py + r) * px;
      if (z < bz || z - bz >= n[0] || y < by || y - by >= n[1]) {
        mrt_conv_row_zero(d, px);
        continue;
      }
      mrt_conv_row_zero(d, bx);
      mrt_conv_row_copy(d + bx, xg + c * p->in_pix + ((z - bz) * p->in[1] + y - by) * p->in[2], n[2]);
      mrt_conv_row_zero(d + bx + n[2], px - bx - n[2]);
    }
}
#endif

/*
 * Direct depthwise convolution, one channel plane (2-D, or 1-D as H = 1) at a
 * time. The plane is first copied into scratch with its zero padding and its
 * columns split by phase (column mod stride), so that every tap of a vector
 * of VL consecutive outputs is one unaligned contiguous load with no bounds
 * check, whatever the padding, stride or dilation: tap t = (ky, kx) of output
 * (oy, ox) is buf[oy * sy * rw + ox + dw_taps[t]]. Buffer rows are wide
 * enough for whole vectors, so ragged right edges cost no scalar loop.
 */
static void mrt_conv_dw_pad(const mrt_conv_params *p, const float *MRT_RESTRICT x,
                            float *MRT_RESTRICT buf) {
  /* Only the input's own samples are written: the zero border is the same for
   * every plane and is cleared once per run by the caller. */
  const ptrdiff_t H = (ptrdiff_t)p->in[1], W = (ptrdiff_t)p->in[2], sx = (ptrdiff_t)p->s[2];
  const ptrdiff_t py = p->pb[1], px = p->pb[2], rw = (ptrdiff_t)p->dw_rw, rows = (ptrdiff_t)p->dw_rows;
  ptrdiff_t r0 = py, r1 = py + H;
  if (r1 > rows) r1 = rows;
  /* Buffer column c of phase ph holds input column c * sx + ph - px: valid for c in [c0, c1). */
#define MRT_DW_COLS(ph, c0, c1)                                                         \
  ptrdiff_t c0 = px > (ph) ? (px - (ph) + sx - 1) / sx : 0;                             \
  ptrdiff_t c1 = W + px - (ph) > 0 ? (W + px - (ph) + sx - 1) / sx : 0;                 \
  if (c1 > rw) c1 = rw;                                                                 \
  if (c0 > c1) c0 = c1;
  if (sx == 2) {
    /* Padded column j = i + px goes to phase j & 1, column j >> 1. Pairs of
     * padded columns from an even j on: 8 inputs deinterleave into 4 + 4. */
    const ptrdiff_t i0 = px & 1, nv = (W - i0) / 8;
    for (ptrdiff_t r = r0; r < r1; ++r) {
      float *d0 = buf + r * rw, *d1 = d0 + rows * rw;
      const float *s = x + (r - py) * W;
      for (ptrdiff_t i = 0; i < i0; ++i) d1[(i + px) >> 1] = s[i];
      float *e0 = d0 + ((i0 + px) >> 1), *e1 = d1 + ((i0 + px) >> 1);
      for (ptrdiff_t v = 0; v < nv; ++v) {
        mrt_v4f u, w;
        __builtin_memcpy(&u, s + i0 + 8 * v, sizeof u);
        __builtin_memcpy(&w, s + i0 + 8 * v + 4, sizeof w);
        const mrt_v4f e = __builtin_shufflevector(u, w, 0, 2, 4, 6);
        const mrt_v4f o = __builtin_shufflevector(u, w, 1, 3, 5, 7);
        __builtin_memcpy(e0 + 4 * v, &e, sizeof e);
        __builtin_memcpy(e1 + 4 * v, &o, sizeof o);
      }
      for (ptrdiff_t i = i0 + 8 * nv; i < W; ++i) {
        const ptrdiff_t j = i + px;
        if ((j >> 1) < rw) buf[((j & 1) * rows + r) * rw + (j >> 1)] = s[i];
      }
    }
    return;
  }
  for (ptrdiff_t ph = 0; ph < sx; ++ph) {
    MRT_DW_COLS(ph, c0, c1)
    for (ptrdiff_t r = r0; r < r1; ++r) {
      float *d = buf + (ph * rows + r) * rw;
      const float *s = x + (r - py) * W + ph - px;
      if (sx == 1)
        for (ptrdiff_t c = c0; c < c1; ++c) d[c] = s[c];
      else
        for (ptrdiff_t c = c0; c < c1; ++c) d[c] = s[c * sx];
    }
  }
#undef MRT_DW_COLS
}

#if MRT_SGEMM_AVX512
/*
 * The same padded plane with AVX-512F for stride 2 and for narrow stride-1
 * planes (others take the portable copy): rows in 16-float vectors, each row's
 * ragged end one masked load and store; stride 2 splits 32 inputs into their
 * 16 even and 16 odd ones with two permutes (the portable copy does 4 + 4 at
 * a time and the remainder float by float).
 */
MRT_AVX512F static void mrt_conv_dw_pad__avx512(const mrt_conv_params *p, const float *MRT_RESTRICT x,
                                                float *MRT_RESTRICT buf) {
  const size_t sx = p->s[2], W = p->in[2];
  /* Stride 1 rows wider than a vector: the portable copy measured as fast. */
  if (sx > 2 || (sx == 1 && W > 16)) {
    mrt_conv_dw_pad(p, x, buf);
    return;
  }
  const size_t H = p->in[1], py = (size_t)p->pb[1], px = (size_t)p->pb[2];
  const size_t rw = p->dw_rw, rows = p->dw_rows, r1 = mrt_min(py + H, rows);
  /* Input columns that have a slot: padded column j = i + px goes to slot j / sx < rw. */
  const size_t wn = sx * rw > px ? mrt_min(W, sx * rw - px) : 0;
  for (size_t r = py; r < r1; ++r) {
    const float *src = x + (r - py) * W;
    if (sx == 1) {
      float *d = buf + r * rw + px;
      for (size_t i = 0; i < wn; i += 16) mrt_store16(d + i, mrt_load16(src + i, wn - i), wn - i);
      continue;
    }
    /* Padded column j goes to phase j & 1, slot j >> 1: from an odd j the
     * first input goes alone, then pairs (even j, odd j + 1). */
    float *d0 = buf + r * rw, *d1 = d0 + rows * rw;
    size_t i = 0;
    if ((px & 1) && wn > 0) {
      d1[px >> 1] = src[0];
      i = 1;
    }
    float *e0 = d0 + ((i + px) >> 1), *e1 = d1 + ((i + px) >> 1);
    for (; i < wn; i += 32, e0 += 16, e1 += 16) {
      const size_t n = wn - i;
      const mrt_v16f u = mrt_load16(src + i, n), v = mrt_load16(src + i + 16, n > 16 ? n - 16 : 0);
      const mrt_v16f ev = __builtin_shufflevector(u, v, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const mrt_v16f od = __builtin_shufflevector(u, v, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      mrt_store16(e0, ev, (n + 1) / 2);
      mrt_store16(e1, od, n / 2);
    }
  }
}
#endif

/* KV taps: a constant (9: 3x3) so weights and offsets live in registers, or
 * 0 for any kernel size. */
#define MRT_DW_PLANE(NAME, ATTR, VT, VL)                                                      \
  static inline __attribute__((always_inline)) void NAME##_body(                              \
      const mrt_conv_params *p, const float *MRT_RESTRICT buf, const float *MRT_RESTRICT w,    \
      float bias, float *MRT_RESTRICT y, size_t KV) {                                          \
    const size_t OH = p->out[1], OW = p->out[2], rstep = p->s[1] * p->dw_rw, end = OH * OW;   \
    const size_t kv = KV ? KV : p->kvol;                                                       \
    const VT vlo = (VT){0} + p->lo, vhi = (VT){0} + p->hi;                                     \
    VT wv[9];                                                                                  \
    ptrdiff_t tv[9];                                                                           \
    for (size_t t = 0; t < KV; ++t) {                                                          \
      wv[t] = (VT){0} + w[t];                                                                  \
      tv[t] = p->dw_taps[t];                                                                   \
    }                                                                                          \
    for (size_t oy = 0; oy < OH; ++oy) {                                                       \
      const float *br = buf + oy * rstep;                                                      \
      float *yr = y + oy * OW;                                                                 \
      for (size_t ox = 0; ox < OW; ox += VL) {                                                 \
        VT acc = (VT){0} + bias;                                                               \
        for (size_t t = 0; t < kv; ++t) {                                                      \
          VT v;                                                                                \
          __builtin_memcpy(&v, br + ox + (KV ? tv[t] : p->dw_taps[t]), sizeof(VT));            \
          acc += (KV ? wv[t] : (VT){0} + w[t]) * v;                                            \
        }                                                                                      \
        acc = MRT_VMIN(MRT_VMAX(acc, vlo), vhi);                                               \
        /* A vector past the row's end spills into the next row, which is  \
         * written afterwards; only the plane's end needs a partial store. */                   \
        if (oy * OW + ox + VL <= end) {                                                        \
          __builtin_memcpy(yr + ox, &acc, sizeof(VT));                                         \
        } else {                                                                               \
          float tmp[VL];                                                                       \
          __builtin_memcpy(tmp, &acc, sizeof(VT));                                             \
          for (size_t i = 0; i < OW - ox; ++i) yr[ox + i] = tmp[i];                            \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  ATTR static void NAME(const mrt_conv_params *p, const float *buf, const float *w, float bias, \
                        float *y) {                                                            \
    if (p->kvol == 9)                                                                          \
      NAME##_body(p, buf, w, bias, y, 9);                                                      \
    else                                                                                       \
      NAME##_body(p, buf, w, bias, y, 0);                                                      \
  }

typedef void (*mrt_dw_plane_fn)(const mrt_conv_params *p, const float *buf, const float *w,
                                float bias, float *y);

#if defined(__x86_64__)
MRT_DW_PLANE(mrt_conv_dw_plane__sse, , mrt_v4f, 4)
MRT_DW_PLANE(mrt_conv_dw_plane__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8)
#if MRT_SGEMM_AVX512
MRT_DW_PLANE(mrt_conv_dw_plane__avx512, __attribute__((target("avx512f,avx2,fma"))), mrt_v16f, 16)
#endif
#else
MRT_DW_PLANE(mrt_conv_dw_plane, , mrt_v4f, 4)
#endif

/*
 * FusedConv's stage after the tiles' (or a depthwise plane's) bias: the
 * residual, the clamp that follows it, LeakyRelu, then an array activation;
 * run on each block of C just stored (mc x nc, in L2) or plane, instead of a
 * pass over the whole tensor per op. (acc + bias) + residual, as the unfused graph
 * adds them, and the activation is the standalone kernel's function: the
 * outputs are those of the unfused path.
 */
static void mrt_conv_post(const mrt_sgemm_epilogue *ep, size_t i, size_t j, size_t rows, size_t cols, float *c,
                          size_t ldc) {
  const float lo = ep->post_lo, hi = ep->post_hi, alpha = ep->leaky_alpha;
  const float *res = ep->res ? ep->res + i * ldc + j : NULL;
  /* A block as wide as C is one run of rows * cols floats: one activation
   * call, not one a row (a squeeze-excitation 1x1 convolution on a 1x1 plane
   * had called it once per float). */
  if (cols == ldc) cols *= rows, rows = 1;
  for (size_t r = 0; r < rows; ++r) {
    float *row = c + r * ldc;
    if (res) {
      const float *s = res + r * ldc;
      for (size_t t = 0; t < cols; ++t) {
        /* Clip's order (max, then min): lo > hi gives hi, as the Clip kernel
         * and the tiles do. */
        const float x = row[t] + s[t], u = x < lo ? lo : x;
        row[t] = u > hi ? hi : u;
      }
    }
    if (ep->leaky)
      for (size_t t = 0; t < cols; ++t) row[t] = row[t] < 0.0f ? row[t] * alpha : row[t];
    if (ep->act) ep->act(cols, row, row);
  }
}

#if MRT_CONV_DWB
#include "conv_dw.h"
#endif
#if MRT_CONV_STEM
#include "conv_direct.h"
#endif
#if MRT_SGEMM_AVX512
#include "conv_dense.h"
#include "conv_winograd.h"
#endif

MRT_PREPARE_CODE
static int mrt_conv_int_attr_list(mrt_ctx *ctx, const mrt_node *node, const char *name,
                                  size_t want, int64_t minv, int64_t *out, int64_t dflt,
                                  mrt_status *st) {
  const int64_t *v = NULL;
  const uint32_t n = mrt_attr_ints(node, name, &v);
  if (n == 0) {
    for (size_t i = 0; i < want; ++i) out[i] = dflt;
    return 1;
  }
  if (n != want) {
    *st = mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "%s has %u values, expected %zu", name,
                        n, want);
    return 0;
  }
  for (size_t i = 0; i < want; ++i) {
    if (v[i] < minv || v[i] > INT32_MAX) {
      *st = mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "%s[%zu] = %lld is out of range",
                          name, i, (long long)v[i]);
      return 0;
    }
    out[i] = v[i];
  }
  return 1;
}

MRT_PREPARE_CODE
static mrt_status mrt_conv_prepare_paths(mrt_node *node, mrt_ctx *ctx, const mrt_conv_act *act, int residual) {
  mrt_status st = mrt_check_arity(ctx, node, 2, residual ? 4 : 3, 1, 1);
  if (st != MRT_STATUS_OK) return st;
  const mrt_tensor *x = node->inputs[0], *w = node->inputs[1];
  const mrt_tensor *b = node->n_inputs > 2 ? node->inputs[2] : NULL;
  const mrt_tensor *y = node->outputs[0];
  if (!x || !w || !y)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "X, W and Y are required");
  if ((st = mrt_check_dtype(ctx, node, x, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, w, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if (b && (st = mrt_check_dtype(ctx, node, b, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if (x->ndim < 3 || x->ndim > 5)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "X has rank %u; only 1-D, 2-D and 3-D convolutions (rank 3..5) are supported",
                         x->ndim);
  if (w->ndim != x->ndim || y->ndim != x->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "X, W and Y must have the same rank (got %u, %u, %u)", x->ndim, w->ndim,
                         y->ndim);
  const size_t nsp = x->ndim - 2, off = 3 - nsp;

  const int64_t group = mrt_attr_int(node, "group", 1);
  if (group < 1 || group > x->dims[1] || x->dims[1] % group != 0 || w->dims[0] % group != 0)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "group = %lld must divide X channels (%lld) and W output channels (%lld)",
                         (long long)group, (long long)x->dims[1], (long long)w->dims[0]);
  if (w->dims[1] * group != x->dims[1])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "W dim 1 (%lld) times group (%lld) must equal X channels (%lld)",
                         (long long)w->dims[1], (long long)group, (long long)x->dims[1]);
  if (y->dims[0] != x->dims[0] || y->dims[1] != w->dims[0])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "Y must be (N=%lld, M=%lld, ...), got (%lld, %lld, ...)",
                         (long long)x->dims[0], (long long)w->dims[0], (long long)y->dims[0],
                         (long long)y->dims[1]);
  if (b && (b->ndim != 1 || b->dims[0] != w->dims[0]))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "B must have shape (M=%lld)",
                         (long long)w->dims[0]);
  if (residual) {
    const mrt_tensor *r = node->inputs[3];
    if (!r)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input 3 (the residual added to Y) is required");
    if ((st = mrt_check_dtype(ctx, node, r, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
    int same = r->ndim == y->ndim;
    for (uint32_t i = 0; same && i < y->ndim; ++i) same = r->dims[i] == y->dims[i];
    if (!same)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "the residual (input 3) must have Y's shape; rebuild the model with minibuild, "
                           "which fuses only an Add of equal shapes");
  }

  int64_t ks[3], strides[3], dil[3], pads[6];
  const int64_t *kattr = NULL;
  const uint32_t nk = mrt_attr_ints(node, "kernel_shape", &kattr);
  if (nk != 0 && nk != nsp)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "kernel_shape has %u values, expected %zu",
                         nk, nsp);
  for (size_t i = 0; i < nsp; ++i) {
    ks[i] = w->dims[2 + i];
    if (ks[i] < 1)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "W spatial dim %zu is empty", i);
    if (nk && kattr[i] != ks[i])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "kernel_shape[%zu] = %lld does not match W dim %zu (%lld)", i,
                           (long long)kattr[i], i + 2, (long long)ks[i]);
  }
  if (!mrt_conv_int_attr_list(ctx, node, "strides", nsp, 1, strides, 1, &st)) return st;
  if (!mrt_conv_int_attr_list(ctx, node, "dilations", nsp, 1, dil, 1, &st)) return st;
  if (!mrt_conv_int_attr_list(ctx, node, "pads", 2 * nsp, 0, pads, 0, &st)) return st;

  const int same_upper = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_UPPER");
  const int same_lower = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_LOWER");
  const int valid = mrt_attr_string_is(node, "auto_pad", "NOTSET", "VALID");
  if (!same_upper && !same_lower && !valid && !mrt_attr_string_is(node, "auto_pad", "NOTSET", "NOTSET"))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID");

  mrt_conv_params *p = (mrt_conv_params *)mrt_ctx_alloc(ctx, sizeof(*p));
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  for (size_t i = 0; i < 3; ++i) {
    p->in[i] = p->out[i] = p->k[i] = p->s[i] = p->d[i] = 1;
    p->pb[i] = 0;
  }
  for (size_t i = 0; i < nsp; ++i) {
    const int64_t in = x->dims[2 + i], ext = (ks[i] - 1) * dil[i] + 1;
    int64_t pb = pads[i], pe = pads[nsp + i], o;
    if (same_upper || same_lower) {
      o = (in + strides[i] - 1) / strides[i];
      int64_t total = (o - 1) * strides[i] + ext - in;
      if (total < 0) total = 0;
      pb = same_upper ? total / 2 : total - total / 2;
      pe = total - pb;
    } else {
      if (valid) pb = pe = 0;
      o = in + pb + pe >= ext ? (in + pb + pe - ext) / strides[i] + 1 : 0;
    }
    (void)pe;
    if (o < 1)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "spatial axis %zu: kernel extent %lld exceeds padded input %lld", i,
                           (long long)ext, (long long)(in + pb + pe));
    if (y->dims[2 + i] != o)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "Y spatial dim %zu is %lld, expected %lld from X, W and the attributes", i,
                           (long long)y->dims[2 + i], (long long)o);
    p->in[off + i] = (size_t)in;
    p->out[off + i] = (size_t)o;
    p->k[off + i] = (size_t)ks[i];
    p->s[off + i] = (size_t)strides[i];
    p->d[off + i] = (size_t)dil[i];
    p->pb[off + i] = (ptrdiff_t)pb;
  }

  p->kern = mrt_sgemm_kernel_select();
  {
    const float inf = __builtin_inff();
    const float lo = act ? act->lo : -inf, hi = act ? act->hi : inf;
    /* With a residual the clamp follows the Add: the tiles store the bare sum. */
    p->lo = residual ? -inf : lo;
    p->hi = residual ? inf : hi;
    p->post.lo = -inf;
    p->post.hi = inf;
    p->post.post_lo = residual ? lo : -inf;
    p->post.post_hi = residual ? hi : inf;
    p->post.leaky = act && act->leaky;
    p->post.leaky_alpha = act ? act->alpha : 0.0f;
    p->post.act = act ? act->map : NULL;
    p->post.post = residual || p->post.leaky || p->post.act ? mrt_conv_post : NULL;
  }
  p->batch = (size_t)x->dims[0];
  p->c_in = (size_t)x->dims[1];
  p->c_out = (size_t)w->dims[0];
  p->group = (size_t)group;
  p->m = p->c_out / p->group;
  p->kvol = p->k[0] * p->k[1] * p->k[2];
  p->kdim = (p->c_in / p->group) * p->kvol;
  p->in_pix = p->in[0] * p->in[1] * p->in[2];
  p->out_pix = p->out[0] * p->out[1] * p->out[2];
  if (p->kdim > INT32_MAX || p->in_pix > INT32_MAX || p->out_pix > INT32_MAX)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "convolution is too large");

  const int pointwise = p->kvol == 1 && p->s[0] == 1 && p->s[1] == 1 && p->s[2] == 1 &&
                        p->pb[0] == 0 && p->pb[1] == 0 && p->pb[2] == 0;
  if (pointwise) {
    p->path = MRT_CONV_GEMM; /* X of a group is already the K x N matrix B */
  } else if (p->group == p->c_in && p->group == p->c_out && p->k[0] == 1 &&
             p->in[0] == 1 && p->out[0] == 1) {
    p->path = MRT_CONV_DEPTHWISE;
    /* Rows: every padded row a tap reaches; width: whole 16-float vectors of
     * outputs plus the widest tap offset (see mrt_conv_dw_pad). */
    const size_t sx = p->s[2], kw = p->k[2], kh = p->k[1];
    /* In 64 bits: size_t is 32 on armv7 and x86. */
    const uint64_t rows = (uint64_t)(p->out[1] - 1) * p->s[1] + (uint64_t)(kh - 1) * p->d[1] + 1;
    /* (+1: a trailing input column the convolution ignores still has a slot.) */
    const uint64_t rw = (uint64_t)mrt_round_up(p->out[2], 16) + (uint64_t)(kw - 1) * p->d[2] / sx + 1;
    if (rows > INT32_MAX || rw > INT32_MAX || rows * rw > INT32_MAX / sizeof(float) / sx)
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "convolution is too large");
    p->dw_rows = (size_t)rows;
    p->dw_rw = (size_t)rw;
    p->dw_taps = (int32_t *)mrt_ctx_alloc(ctx, p->kvol * sizeof(int32_t));
    if (!p->dw_taps) return MRT_STATUS_OUT_OF_MEMORY;
    for (size_t ky = 0; ky < kh; ++ky)
      for (size_t kx = 0; kx < kw; ++kx) {
        const size_t cx = kx * p->d[2];
        p->dw_taps[ky * kw + kx] = (int32_t)(((cx % sx) * p->dw_rows + ky * p->d[1]) * p->dw_rw + cx / sx);
      }
    /* One padded plane per thread. */
    mrt_conv_request_scratch(ctx, p, mrt_ctx_threads(ctx) * mrt_round_up(sx * p->dw_rows * p->dw_rw * sizeof(float), 64));
#if MRT_CONV_DWB
    if ((st = mrt_conv_dwb_prepare(ctx, p, w, b)) != MRT_STATUS_OK) return st;
#endif
    return node->params = p, MRT_STATUS_OK;
  } else {
    p->path = MRT_CONV_IM2COL;
    /* The extent the taps reach on each axis; a copy with zero borders when any
     * tap falls outside the input, else the input itself. In 64 bits: size_t is
     * 32 on armv7 and x86, and huge pads make huge extents. */
    uint64_t ext[3], plane64 = 1;
    for (size_t a = 0; a < 3; ++a) {
      ext[a] = (uint64_t)(p->out[a] - 1) * p->s[a] + (uint64_t)(p->k[a] - 1) * p->d[a] + 1;
      if (p->pb[a] > 0 || ext[a] > p->in[a]) p->pad_copy = 1;
    }
    for (size_t a = 0; a < 3; ++a) {
      if (!p->pad_copy) ext[a] = p->in[a];
      if (ext[a] > INT32_MAX || (plane64 *= ext[a]) > INT32_MAX) /* both factors <= 2^31 */
        return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "convolution is too large");
      p->xp[a] = (size_t)ext[a];
    }
    if (plane64 > INT32_MAX / (p->c_in / p->group) / sizeof(float))
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "convolution is too large");
    const size_t plane = (size_t)plane64;
    p->pad_floats = p->pad_copy ? plane * (p->c_in / p->group) : 0;
    p->kofs = (size_t *)mrt_ctx_alloc(ctx, p->kdim * sizeof(size_t));
    if (!p->kofs) return MRT_STATUS_OUT_OF_MEMORY;
    size_t r = 0;
    for (size_t c = 0; c < p->c_in / p->group; ++c)
      for (size_t kz = 0; kz < p->k[0]; ++kz)
        for (size_t ky = 0; ky < p->k[1]; ++ky)
          for (size_t kx = 0; kx < p->k[2]; ++kx, ++r)
            p->kofs[r] = c * plane + ((kz * p->d[0]) * p->xp[1] + ky * p->d[1]) * p->xp[2] + kx * p->d[2];
#if MRT_CONV_STEM
    if ((st = mrt_conv_stem_prepare(ctx, p, w)) != MRT_STATUS_OK) return st;
    if (p->stem_w) return node->params = p, MRT_STATUS_OK;
#endif
#if MRT_SGEMM_AVX512
    if (mrt_conv_wino_pays(p, w->is_constant && w->data != NULL)) {
      if ((st = mrt_conv_wino_prepare(ctx, p, (const float *)w->data)) != MRT_STATUS_OK) return st;
      p->pad_off = mrt_round_up(mrt_ctx_threads(ctx) * mrt_wino_thread_bytes(p), 64);
      /* (AVX2 reads the padded copy a vector of tiles at a time, up to 16 floats past its end) */
      mrt_conv_request_scratch(ctx, p, p->pad_off + (p->pad_floats ? p->pad_floats + 32 : 0) * sizeof(float));
      return node->params = p, MRT_STATUS_OK;
    }
    if (mrt_conv_dense_pays(p, w->is_constant && w->data != NULL)) {
      if ((st = mrt_conv_dense_prepare(ctx, p, (const float *)w->data)) != MRT_STATUS_OK) return st;
      p->pad_off = mrt_ctx_threads(ctx) * MRT_DENSE_CT_BYTES;
      mrt_conv_request_scratch(ctx, p, p->pad_off + p->pad_floats * sizeof(float));
      return node->params = p, MRT_STATUS_OK;
    }
#endif
  }

  /* Weights are constant in practice: pack each group's M x K block once. */
  const int w_packed = w->is_constant && w->data != NULL;
  if (w_packed) {
    p->packed_w_stride = mrt_round_up(mrt_sgemm_packed_a_size(p->kern, p->m, p->kdim), 16);
    p->packed_w = (float *)mrt_ctx_alloc(ctx, p->group * p->packed_w_stride * sizeof(float) + 64);
    if (!p->packed_w) return MRT_STATUS_OUT_OF_MEMORY;
    p->packed_w = (float *)(((uintptr_t)p->packed_w + 63) & ~(uintptr_t)63);
    for (size_t g = 0; g < p->group; ++g)
      mrt_sgemm_pack_a(p->kern, p->m, p->kdim, (const float *)w->data + g * p->m * p->kdim,
                       p->kdim, 1, 1.0f, p->packed_w + g * p->packed_w_stride);
  }
  p->pad_off = mrt_round_up(mrt_sgemm_scratch_size_mt(p->kern, p->m, p->out_pix, p->kdim, w_packed, 0,
                                                     mrt_ctx_threads(ctx)), 64);
  mrt_conv_request_scratch(ctx, p, p->pad_off + p->pad_floats * sizeof(float));
  node->params = p;
  return MRT_STATUS_OK;
}

MRT_PREPARE_CODE
mrt_status mrt_conv_core_prepare_f32(mrt_node *node, mrt_ctx *ctx, const mrt_conv_act *act, int residual) {
  const mrt_status st = mrt_conv_prepare_paths(node, ctx, act, residual);
  if (st != MRT_STATUS_OK || !residual) return st;
  const mrt_tensor *r = node->inputs[3], *y = node->outputs[0];
  mrt_conv_params *p = (mrt_conv_params *)node->params;
  if (!p || !r->data || r->data != y->data) return st;
  p->in_place = 1;
  /* The paths whose tiles cannot accumulate onto Y read the residual from a
   * copy (a ResNet basic block's 3x3 + residual; depthwise and the stem with
   * a residual are not seen in practice). */
  int copy = p->path == MRT_CONV_DEPTHWISE || MRT_CONV_DENSE(p);
#if MRT_CONV_STEM
  copy = copy || p->stem_w != NULL;
#endif
  if (copy) {
    const size_t bytes = p->batch * p->c_out * p->out_pix * sizeof(float);
    p->res_off = mrt_round_up(p->scratch_bytes, 64);
    if (bytes > SIZE_MAX - p->res_off) return MRT_STATUS_OUT_OF_MEMORY;
    mrt_ctx_request_scratch(ctx, p->res_off + bytes);
    p->res_copy = 1;
  }
  return MRT_STATUS_OK;
}

/* Depthwise on threads: each task takes a run of channel planes and pads them
 * into its own thread's buffer. */
typedef void (*mrt_dw_pad_fn)(const mrt_conv_params *p, const float *x, float *buf);

typedef struct mrt_dw_job {
  const mrt_conv_params *p;
  mrt_dw_plane_fn plane;
#if MRT_SGEMM_AVX512
  mrt_dw_pad_fn pad; /* elsewhere always mrt_conv_dw_pad */
#endif
  const float *x, *w, *bias, *res;
  float *y;
  char *scratch;
  size_t stride, per_task;
} mrt_dw_job;

static void mrt_conv_dw_task(void *varg, size_t task, size_t thread) {
  const mrt_dw_job *j = (const mrt_dw_job *)varg;
  const mrt_conv_params *p = j->p;
  const size_t planes = p->batch * p->c_out, lo = task * j->per_task;
  const size_t hi = mrt_min(planes, lo + j->per_task);
  if (lo >= hi) return;
  float *buf = (float *)(j->scratch + thread * j->stride);
  memset(buf, 0, p->s[2] * p->dw_rows * p->dw_rw * sizeof(float));
  for (size_t i = lo; i < hi; ++i) {
    const size_t c = i % p->c_out;
#if MRT_SGEMM_AVX512
    j->pad(p, j->x + i * p->in_pix, buf);
#else
    mrt_conv_dw_pad(p, j->x + i * p->in_pix, buf);
#endif
    j->plane(p, buf, j->w + c * p->kvol, j->bias ? j->bias[c] : 0.0f, j->y + i * p->out_pix);
    if (p->post.post) {
      mrt_sgemm_epilogue e = p->post;
      e.res = j->res ? j->res + i * p->out_pix : NULL;
      mrt_conv_post(&e, 0, 0, 1, p->out_pix, j->y + i * p->out_pix, p->out_pix);
    }
  }
}

#if MRT_ENABLE_THREADS
/* The padded copy on threads, for big inputs (56x56, 128 channels: 3.3 MB of
 * clearing and copying that one thread did while the other waited): each task
 * clears and fills its own run of channel planes (so a grouped convolution
 * clears the buffer once a group, not once a run). */
typedef struct mrt_pad_job {
  const mrt_conv_params *p;
  const float *xg;
  float *xp;
  size_t per_task;
#if MRT_SGEMM_AVX512
  size_t chunks; /* dense path, one panel: runs of rows, those of per_task chunks a task */
#endif
} mrt_pad_job;

static void mrt_conv_pad_task(void *varg, size_t task, size_t thread) {
  const mrt_pad_job *j = (const mrt_pad_job *)varg;
  const mrt_conv_params *p = j->p;
  const size_t plane = p->xp[0] * p->xp[1] * p->xp[2], c0 = task * j->per_task;
  const size_t c1 = mrt_min(p->c_in / p->group, c0 + j->per_task);
  (void)thread;
#if MRT_SGEMM_AVX512
  if (p->dense_w && j->chunks) {
    /* The rows from this task's first chunk's first tap row to the next
     * task's: those its own tiles read (and the one or two after them). */
    const size_t rows = p->xp[0] * p->xp[1], a = task * j->per_task, b = a + j->per_task;
    const size_t r0 = task ? mrt_conv_dense_chunk_row(p, a, j->chunks) : 0;
    const size_t r1 = b < j->chunks ? mrt_conv_dense_chunk_row(p, b, j->chunks) : rows;
    if (r1 > r0) mrt_conv_pad_fill(p, j->xg, j->xp, 0, p->c_in / p->group, r0, r1);
    return;
  }
#endif
  if (c0 >= c1) return;
#if MRT_SGEMM_AVX512
  if (p->dense_w) {
    mrt_conv_pad_fill(p, j->xg, j->xp, c0, c1, 0, p->xp[0] * p->xp[1]);
    return;
  }
#endif
  memset(j->xp + c0 * plane, 0, (c1 - c0) * plane * sizeof(float));
  mrt_conv_pad_input(p, j->xg, j->xp, c0, c1);
}
#endif

/* Floats below which a padding task is not worth a thread. */
#define MRT_CONV_PAD_TASK_FLOATS ((size_t)1 << 16)

/* Multiply-adds below which a depthwise task is not worth a thread. */
#define MRT_CONV_DW_TASK_MACS ((size_t)1 << 16)

void mrt_conv_core_run_f32(const mrt_node *node, void *scratch) {
  const mrt_conv_params *p = (const mrt_conv_params *)node->params;
  const float *x = (const float *)node->inputs[0]->data;
  const float *w = (const float *)node->inputs[1]->data;
  const float *bias =
      node->n_inputs > 2 && node->inputs[2] ? (const float *)node->inputs[2]->data : NULL;
  float *y = (float *)node->outputs[0]->data;
  const float *res = node->n_inputs > 3 && node->inputs[3] ? (const float *)node->inputs[3]->data : NULL;
  if (p->res_copy && res) {
    float *copy = (float *)((char *)scratch + p->res_off);
    memcpy(copy, res, p->batch * p->c_out * p->out_pix * sizeof(float));
    res = copy;
  }

  if (p->path == MRT_CONV_DEPTHWISE) {
#if MRT_CONV_DWB
    if (p->dwb_vl) {
      mrt_conv_dwb_run(node->pool, p, x, res, y, scratch);
      return;
    }
#endif
    /* On the vector ISA of the GEMM kernel prepare chose. */
#if defined(__x86_64__)
    mrt_dw_plane_fn plane = p->kern == &mrt_sgemm_avx2 ? mrt_conv_dw_plane__avx2 : mrt_conv_dw_plane__sse;
#if MRT_SGEMM_AVX512
    mrt_dw_pad_fn pad = mrt_conv_dw_pad;
    if (p->kern == &mrt_sgemm_avx512) plane = mrt_conv_dw_plane__avx512, pad = mrt_conv_dw_pad__avx512;
#endif
#else
    const mrt_dw_plane_fn plane = mrt_conv_dw_plane;
#endif
    const size_t planes = p->batch * p->c_out;
    size_t per_task;
    const size_t runs = mrt_conv_runs(node->pool, planes, planes * p->out_pix * p->kvol, MRT_CONV_DW_TASK_MACS,
                                      &per_task);
    mrt_dw_job job = {p, plane,
#if MRT_SGEMM_AVX512
                      pad,
#endif
                      x, w, bias, res, y, (char *)scratch,
                      mrt_round_up(p->s[2] * p->dw_rows * p->dw_rw * sizeof(float), 64), per_task};
    mrt_parallel_for(node->pool, runs, mrt_conv_dw_task, &job);
    return;
  }

#if MRT_CONV_STEM
  if (p->stem_w) {
    mrt_conv_stem_run(node->pool, p, x, bias, res, y, scratch);
    return;
  }
#endif
  const size_t cg = p->c_in / p->group;
  mrt_sgemm_epilogue ep = p->post;
  ep.lo = p->lo;
  ep.hi = p->hi;
  /* In place on the GEMM paths: C holds the residual, the product is added
   * onto it (right for any number of k blocks) and the tiles clamp the sum;
   * the post stage keeps LeakyRelu and the array activation only. The dense
   * path reads the residual's copy in its post stage, as out of place. */
  const int acc = p->in_place && res && !p->res_copy;
  if (acc) {
    ep.lo = p->post.post_lo;
    ep.hi = p->post.post_hi;
    if (!p->post.leaky && !p->post.act) ep.post = NULL;
    res = NULL;
  }
  float *xpad = (float *)((char *)scratch + p->pad_off);
#if MRT_ENABLE_THREADS
  const size_t pad_tasks = mrt_pool_tasks(node->pool, p->pad_floats, MRT_CONV_PAD_TASK_FLOATS);
#else
  if (p->path == MRT_CONV_IM2COL && p->pad_copy && !MRT_CONV_DENSE(p)) memset(xpad, 0, p->pad_floats * sizeof(float));
#endif
  for (size_t n = 0; n < p->batch; ++n)
    for (size_t g = 0; g < p->group; ++g) {
      const float *xg = x + (n * p->c_in + g * cg) * p->in_pix;
      float *yg = y + (n * p->c_out + g * p->m) * p->out_pix;
      mrt_sgemm_src a = {0}, b = {0};
      if (p->packed_w) {
        a.packed = p->packed_w + g * p->packed_w_stride;
      } else {
        a.data = w + g * p->m * p->kdim;
        a.rs = p->kdim;
        a.cs = 1;
        a.scale = 1.0f;
      }
      mrt_im2col_ctx ic = {p, xg};
      if (p->path == MRT_CONV_IM2COL && p->pad_copy) {
#if MRT_ENABLE_THREADS
        mrt_pad_job pj = {p, xg, xpad, (cg + pad_tasks - 1) / pad_tasks};
        size_t n_pad = (cg + pj.per_task - 1) / pj.per_task;
#if MRT_SGEMM_AVX512
        /* One panel split by pixels: each thread pads the rows its chunks read. */
        size_t chunks, per_task, tasks;
        if (p->dense_w && !p->wino && p->m == p->dense_nc &&
            (tasks = mrt_conv_dense_split(node->pool, p, &chunks, &per_task)) > 1)
          pj.chunks = chunks, pj.per_task = per_task, n_pad = tasks;
#endif
        mrt_parallel_for(node->pool, n_pad, mrt_conv_pad_task, &pj);
        ic.x = xpad;
#else
#if MRT_SGEMM_AVX512
        if (p->dense_w)
          mrt_conv_pad_fill(p, xg, xpad, 0, p->c_in / p->group, 0, p->xp[0] * p->xp[1]), ic.x = xpad;
        else
#endif
          ic.x = mrt_conv_pad_input(p, xg, xpad, 0, p->c_in / p->group);
#endif
      }
#if MRT_SGEMM_AVX512
      if (p->wino) {
        mrt_conv_wino_run(node->pool, p, ic.x, bias, res ? res + n * p->c_out * p->out_pix : NULL, yg, scratch);
        continue;
      }
      if (p->dense_w) {
        mrt_conv_dense_run(node->pool, p, g, ic.x, bias ? bias + g * p->m : NULL,
                           res ? res + (n * p->c_out + g * p->m) * p->out_pix : NULL, yg, scratch);
        continue;
      }
#endif
      if (p->path == MRT_CONV_GEMM) {
        b.data = xg;
        b.rs = p->in_pix;
        b.cs = 1;
        b.scale = 1.0f;
      } else {
#if MRT_SGEMM_AVX512
        b.pack = p->kern == &mrt_sgemm_avx512 ? mrt_conv_im2col_pack__avx512 : mrt_conv_im2col_pack;
#else
        b.pack = mrt_conv_im2col_pack;
#endif
        b.pack_ctx = &ic;
      }
      ep.bias_row = bias ? bias + g * p->m : NULL;
      ep.res = res ? res + (n * p->c_out + g * p->m) * p->out_pix : NULL;
      mrt_sgemm_mt(node->pool, p->kern, p->m, p->out_pix, p->kdim, &a, &b, acc, &ep, yg, p->out_pix, scratch);
    }
}
