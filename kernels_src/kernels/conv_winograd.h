/*
 * Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions on the AVX-512 and AVX2
 * kernels (included by conv_core.c after conv_dense.h; desktop x86_64 speed
 * builds only, like it). The AVX2 path (mrt_wino_input__avx2,
 * mrt_wino_panel__avx2 below) is the same with 16-channel panels, the dense
 * path's 6 x 16 tiles and vectors of 8 tiles read from the padded copy.
 *
 * The dense path (conv_dense.h) runs ResNet's 3x3 layers near the FMA peak,
 * so the way past it is fewer multiply-adds: a 2x2 block of outputs (a tile)
 * of one output channel is A^T [sum over input channels of U (.) V] A, with
 * V = B^T d B the tile's 4x4 input window d transformed by adds and
 * subtracts, and U = G g G^T the channel pair's 3x3 weights g transformed once
 * at prepare (halves and adds): 16 products a tile and input channel instead
 * of 36, 2.25x fewer. Each of the 16 products (e = 4 * row + column of U and
 * V) is a GEMM of tiles x input channels x output channels, which
 * mrt_conv_dense_tile computes as it is: x = V_e laid out [channel][tile],
 * kofs[q] = q * (a channel's stride), pos[i] = the tile's index, weights
 * U_e as [panel of 64 output channels][C_in][64]. The packed U replaces the
 * dense path's packed copy (16/9 of the weights' bytes: the node keeps only
 * this one).
 *
 * The product is cut into items of (chunk of whole tile rows, run of panels):
 * an item transforms its chunk's inputs (every channel, into a per-thread V,
 * [16][C_in][tiles]), then per panel runs the 16 products into M
 * ([16][tiles][64], k blocks of 64 as the dense tiles do), transforms M's
 * 64-channel vectors into the 4 outputs of each tile, transposes them into
 * channel rows with the bias and the tiles' clamp, interleaves the rows into
 * Y (a chunk of tile rows is a block of whole output rows: the ragged last
 * column and row of odd sizes are dropped by masks), then the post stage
 * (residual, activation) on that block, as the dense item does. An output's
 * sums do not depend on its chunk or on the items' split: the same bytes at
 * every thread count.
 *
 * The input transform reads the input itself, the pads' columns masked off
 * (no padded copy). Rounding: the
 * transforms are adds and subtracts of the window's values and the weight
 * transform halves, so the error is of the order of the direct sum's (a
 * little larger: the sums of V are formed before the products). One
 * difference in kind: an infinity in a window meets its negation in V
 * (d1 + d2 and d2 - d1), so the tile's outputs are NaN where a direct sum gives
 * +-inf; finite inputs are unaffected.
 *
 * 7 x 7 planes are left to the dense path: 4 x 4 tiles of 8 x 8 compute 30 %
 * more outputs than needed and those layers' weights (512 channels) are the
 * largest, 16/9 of them the most memory (not measured on this path).
 *
 * Measured (one-node 3x3 + Relu, profile_nodes, one thread, best of 50):
 * chunks of 2 tile rows whatever the plane had 256 channels on 14 x 14
 * slower than the dense path (each chunk streamed all 4 MB of the transformed
 * weights); one chunk there and the rest below brought it to 0.95 ms from the
 * dense path's 1.48, 64 channels on 56 x 56 to 0.90-0.94 from 1.54. perf on
 * what is left: the products 70-75 %, the input transform 10-25 %. AVX2 (AMD
 * EPYC, no AVX-512; one-node 3x3 + Relu, best of 30, 3 interleaved rounds,
 * against its dense path): 64 channels on 56 x 56 2.77 -> 1.65 ms (onnxruntime
 * about 2.5), 128 on 28 x 28 2.72 -> 1.55, 256 on 14 x 14 2.79 -> 1.97; at 2
 * threads 1.92 -> 1.06-1.19 and 1.45-1.88 -> 0.91-1.10. Not done: the
 * input transform's
 * vectors of 16 tiles are half empty on 7-tile rows (14 x 14), and a chunk of
 * 49 tiles runs 9 groups of 6 (10 % of the products on repeated tiles).
 */

#define MRT_WINO_MINPIX 196 /* fewer output pixels: the dense path */
#define MRT_WINO_VBYTES (1024 * 1024) /* a chunk's transformed input, at most (or one tile row) */
#define MRT_WINO_MAXW 1024 /* output columns, at most (the input transform's masks: a table) */
#define MRT_WINO_TILES 64 /* tiles a chunk, at most (or one tile row) */

/* Winograd for this convolution? As the dense path (AVX-512 tiles, whole
 * 64-channel panels, 16+ input channels, constant weights) and 3x3, stride 1,
 * no dilation, no groups, 2-D, planes of 196+ outputs. */
MRT_PREPARE_CODE
static int mrt_conv_wino_pays(const mrt_conv_params *p, int w_const) {
  const size_t nc = mrt_conv_dense_nc(p);
  return w_const && nc && p->m % nc == 0 && p->group == 1 && p->c_in >= 16 &&
         p->k[0] == 1 && p->k[1] == 3 && p->k[2] == 3 && p->in[0] == 1 && p->out[0] == 1 && p->s[1] == 1 && p->s[2] == 1 &&
         p->d[1] == 1 && p->d[2] == 1 && p->out_pix >= MRT_WINO_MINPIX && p->out[2] <= MRT_WINO_MAXW;
}

/* Tiles a row, tile rows, tile rows a chunk; a V row's floats (a chunk's
 * tiles rounded up to vectors), M's tiles (rounded up to whole 6-tile
 * groups). */
static inline size_t mrt_wino_tw(const mrt_conv_params *p) { return (p->out[2] + 1) / 2; }
static inline size_t mrt_wino_th(const mrt_conv_params *p) { return (p->out[1] + 1) / 2; }
static inline size_t mrt_wino_rows(const mrt_conv_params *p) {
  const size_t tw = mrt_wino_tw(p), r = mrt_min(MRT_WINO_TILES / tw, MRT_WINO_VBYTES / (16 * sizeof(float) * p->c_in * tw));
  return r < 1 ? 1 : r > mrt_wino_th(p) ? mrt_wino_th(p) : r;
}
static inline size_t mrt_wino_vs(const mrt_conv_params *p) {
  /* (AVX2 stores whole vectors of 8 tiles: up to 7 past the chunk's last tile) */
  return p->dense_nc == MRT_DENSE_NC2 ? mrt_round_up(mrt_wino_rows(p) * mrt_wino_tw(p) + 7, 8)
                                      : mrt_round_up(mrt_wino_rows(p) * mrt_wino_tw(p), 16);
}
/* A V_e's floats: a line more than its channels' rows, so that the 16 are not
 * a multiple of 4 KB apart (the input transform's 16 stores per vector of
 * tiles then fell in one L1 set). */
static inline size_t mrt_wino_es(const mrt_conv_params *p) { return p->c_in * mrt_wino_vs(p) + 16; }
static inline size_t mrt_wino_ms(const mrt_conv_params *p) {
  return mrt_round_up(mrt_wino_rows(p) * mrt_wino_tw(p), MRT_DENSE_NP);
}

/* Per-thread scratch: V [16][C_in][vs] (+ a line), M [16][ms][64] (+ a line), the outputs
 * [4][ms][64] and their channel rows [4][64][vs]. */
static inline size_t mrt_wino_thread_bytes(const mrt_conv_params *p) {
  const size_t vs = mrt_wino_vs(p), ms = mrt_wino_ms(p), nc = p->dense_nc;
  return (16 * mrt_wino_es(p) + 16 * (ms * nc + 16) + 4 * ms * nc + 4 * nc * vs) * sizeof(float);
}

/* U = G g G^T of every (output, input) channel pair, as 16 matrices a panel:
 * [panel][e][C_in][64]; the tiles' channel offsets in V (kofs). */
MRT_PREPARE_CODE
static mrt_status mrt_conv_wino_prepare(mrt_ctx *ctx, mrt_conv_params *p, const float *w) {
  const size_t c_in = p->c_in, nc = mrt_conv_dense_nc(p);
  if ((uint64_t)p->c_out * c_in * 16 > SIZE_MAX / sizeof(float) - 64)
    return MRT_STATUS_OUT_OF_MEMORY;
  float *u = (float *)mrt_ctx_alloc(ctx, p->c_out * c_in * 16 * sizeof(float) + 64);
  if (!u) return MRT_STATUS_OUT_OF_MEMORY;
  u = (float *)(((uintptr_t)u + 63) & ~(uintptr_t)63);
  for (size_t o = 0; o < p->c_out; ++o)
    for (size_t c = 0; c < c_in; ++c) {
      const float *g = w + (o * c_in + c) * 9;
      double t[4][3], r[4][4]; /* G g, then (G g) G^T */
      for (size_t j = 0; j < 3; ++j) {
        t[0][j] = g[j];
        t[1][j] = 0.5 * ((double)g[j] + g[3 + j] + g[6 + j]);
        t[2][j] = 0.5 * ((double)g[j] - g[3 + j] + g[6 + j]);
        t[3][j] = g[6 + j];
      }
      for (size_t i = 0; i < 4; ++i) {
        r[i][0] = t[i][0];
        r[i][1] = 0.5 * (t[i][0] + t[i][1] + t[i][2]);
        r[i][2] = 0.5 * (t[i][0] - t[i][1] + t[i][2]);
        r[i][3] = t[i][2];
      }
      const size_t pn = o / nc, j = o % nc;
      for (size_t e = 0; e < 16; ++e) u[((pn * 16 + e) * c_in + c) * nc + j] = (float)r[e / 4][e % 4];
    }
  p->dense_w = u;
  p->dense_nc = nc;
  p->wino = 1;
  if (nc == MRT_DENSE_NC) { /* AVX-512: the input transform reads the input itself */
    p->pad_copy = 0;
    p->pad_floats = 0;
  } else { /* AVX2 (no masked loads worth having): the padded copy, made even without pads */
    p->pad_copy = 1;
    p->pad_floats = p->xp[0] * p->xp[1] * p->xp[2] * c_in;
  }
  const size_t vs = mrt_wino_vs(p);
  for (size_t q = 0; q < c_in; ++q) p->kofs[q] = q * vs;
  return MRT_STATUS_OK;
}

typedef struct mrt_wino_job {
  const mrt_conv_params *p;
  const float *x, *bias, *res;
  float *y;
  char *scratch;
  size_t chunks, groups, per_group; /* chunks of tile rows; runs of panels, per_group panels each */
} mrt_wino_job;

/* V of tile rows [ty0, ty1) of every channel, read from the input itself:
 * 16 tiles at a time, each row of a window as 4 vectors of its columns (even
 * / odd floats of 32, from the tiles' first column and from the one after),
 * loaded under masks that leave out the columns in the pads (the same for
 * every row: a table), rows in the pads as zeros. No padded copy: its pass
 * had cost 4-7 % of a layer, and on threads each core read rows the other
 * had written. */
MRT_AVX512F static void mrt_wino_input(const mrt_conv_params *p, const float *x, size_t ty0, size_t ty1,
                                       float *MRT_RESTRICT v) {
  const size_t tw = mrt_wino_tw(p), vs = mrt_wino_vs(p), cs = mrt_wino_es(p), nb = (tw + 15) / 16;
  const size_t W = p->in[2], H = p->in[1], plane = p->in_pix;
  const ptrdiff_t px = p->pb[2], py = p->pb[1];
  unsigned short mk[MRT_WINO_MAXW / 32][4];
  /* (a few scalar steps a vector of tiles: vectorised, this loop had been 3 KB) */
  _Pragma("clang loop vectorize(disable) interleave(disable)") for (size_t b = 0; b < nb; ++b)
    _Pragma("clang loop vectorize(disable) unroll(disable)") for (size_t q = 0; q < 4; ++q) {
      /* lanes l of the load from column c0 + l: 0 <= c0 + l < W */
      const ptrdiff_t c0 = (ptrdiff_t)(32 * b + 16 * (q & 1) + 2 * (q >> 1)) - px;
      const size_t lo = c0 < 0 ? mrt_min(16, (size_t)-c0) : 0, hi = c0 >= (ptrdiff_t)W ? 0 : mrt_min(16, W - (size_t)c0);
      mk[b][q] = (unsigned short)(mrt_mask16(hi) & ~mrt_mask16(lo));
    }
  /* Input rows [r0, r1) the chunk reads. */
  const ptrdiff_t r0 = (ptrdiff_t)(2 * ty0) - py, r1 = (ptrdiff_t)(2 * ty1 + 2) - py;
  const size_t pr0 = r0 < 0 ? 0 : (size_t)r0, pr1 = r1 < 0 ? 0 : mrt_min(H, (size_t)r1);
  for (size_t c = 0; c < p->c_in; ++c) {
    /* The next channel's rows, while this one's are transformed. */
    if (c + 1 < p->c_in)
      for (size_t i = pr0 * W; i < pr1 * W; i += 16) __builtin_prefetch(x + (c + 1) * plane + i, 0, 3);
    for (size_t ty = ty0; ty < ty1; ++ty) {
      /* Each window row's column -px (the masks leave out every lane before
       * column 0), or for a row in the pads any address and empty masks. */
      const float *xr[4];
      unsigned short rm[4];
      for (int k = 0; k < 4; ++k) {
        const ptrdiff_t iy = (ptrdiff_t)(2 * ty + k) - py;
        const int in = iy >= 0 && iy < (ptrdiff_t)H;
        xr[k] = (const float *)((uintptr_t)(x + c * plane + (in ? (size_t)iy * W : 0)) - (uintptr_t)px * sizeof(float));
        rm[k] = in ? 0xffffu : 0;
      }
      float *vr = v + c * vs + (ty - ty0) * tw;
      for (size_t b = 0, tx = 0; b < nb; ++b, tx += 16) {
        mrt_v16f d[4][4];
        _Pragma("clang loop unroll(full)") for (int k = 0; k < 4; ++k) {
          const float *s = xr[k] + 2 * tx;
          const mrt_v16f a = __builtin_ia32_loadups512_mask(s, (mrt_v16f){0}, mk[b][0] & rm[k]);
          const mrt_v16f b1 = __builtin_ia32_loadups512_mask(s + 16, (mrt_v16f){0}, mk[b][1] & rm[k]);
          const mrt_v16f a2 = __builtin_ia32_loadups512_mask(s + 2, (mrt_v16f){0}, mk[b][2] & rm[k]);
          const mrt_v16f b2 = __builtin_ia32_loadups512_mask(s + 18, (mrt_v16f){0}, mk[b][3] & rm[k]);
          d[k][0] = __builtin_shufflevector(a, b1, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
          d[k][1] = __builtin_shufflevector(a, b1, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
          d[k][2] = __builtin_shufflevector(a2, b2, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
          d[k][3] = __builtin_shufflevector(a2, b2, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        }
        mrt_v16f t[4][4];
        _Pragma("clang loop unroll(full)") for (int j = 0; j < 4; ++j) {
          t[0][j] = d[0][j] - d[2][j];
          t[1][j] = d[1][j] + d[2][j];
          t[2][j] = d[2][j] - d[1][j];
          t[3][j] = d[1][j] - d[3][j];
        }
        const size_t m = tw - tx;
        _Pragma("clang loop unroll(full)") for (int i = 0; i < 4; ++i) {
          float *o = vr + tx + (size_t)i * 4 * cs;
          mrt_store16(o, t[i][0] - t[i][2], m);
          mrt_store16(o + cs, t[i][1] + t[i][2], m);
          mrt_store16(o + 2 * cs, t[i][2] - t[i][1], m);
          mrt_store16(o + 3 * cs, t[i][1] - t[i][3], m);
        }
      }
    }
  }
}

/* The dense path's tile and 16 x 16 transpose, called rather than inlined
 * into this path a second time (the dense item inlines its own copy): noinline
 * wrappers, as a statement attribute on the call needs a newer clang than the
 * sanitizer builds use. */
MRT_AVX512F __attribute__((noinline)) static void mrt_wino_tile(size_t kc, const float *x, const size_t *kofs,
                                                                const ptrdiff_t *pos, const float *w, float *ct,
                                                                int acc_in) {
  mrt_conv_dense_tile(kc, x, kofs, pos, w, ct, acc_in);
}
MRT_AVX512F __attribute__((noinline)) static void mrt_wino_t16(const float *s, size_t ss, float *d, size_t ds,
                                                               const float *bias, float lo, float hi) {
  mrt_conv_dense_t16(s, ss, d, ds, bias, lo, hi);
}

typedef void (*mrt_wino_tile_fn)(size_t kc, const float *x, const size_t *kofs, const ptrdiff_t *pos,
                                 const float *w, float *ct, int acc_in);

/* The 16 products of panel pn for a chunk of nt tiles into M [16][ms][nc],
 * on the family's dense tile (nc channels a panel). */
static void mrt_wino_products(const mrt_conv_params *p, size_t pn, size_t nt, size_t nc, mrt_wino_tile_fn tile,
                              const float *MRT_RESTRICT v, float *MRT_RESTRICT mb) {
  const size_t c_in = p->c_in, ms = mrt_wino_ms(p), groups = (nt + MRT_DENSE_NP - 1) / MRT_DENSE_NP;
  ptrdiff_t pos[MRT_DENSE_NP];
  const float *u = p->dense_w + pn * 16 * c_in * nc, *uend = p->dense_w + p->c_out * c_in * 16;
  for (size_t e = 0; e < 16; ++e) {
    const float *ue = u + e * c_in * nc, *ve = v + e * mrt_wino_es(p);
    float *me = mb + e * (ms * nc + 16);
    for (size_t k0 = 0; k0 < c_in; k0 += MRT_DENSE_KC) {
      const size_t kc = mrt_min(MRT_DENSE_KC, c_in - k0);
      /* The next block's weights (or the next product's first) into L2 while
       * this one runs, a share of their lines before each group of tiles (all
       * of them at once had stalled on the misses outstanding). */
      const float *wn = ue + (k0 + kc) * nc;
      const size_t wl = mrt_min(MRT_DENSE_KC * nc, (size_t)(uend - wn)) / 16, share = wl / groups + 1;
      for (size_t t = 0, l = 0; t < nt; t += MRT_DENSE_NP) {
        for (const size_t l1 = mrt_min(wl, l + share); l < l1; ++l) __builtin_prefetch(wn + 16 * l, 0, 2);
        /* (a ragged last group repeats its first tile; those rows of M are never read) */
        for (size_t i = 0; i < MRT_DENSE_NP; ++i) pos[i] = (ptrdiff_t)(t + i < nt ? t + i : t);
        tile(kc, ve, p->kofs + k0, pos, ue + k0 * nc, me + t * nc, k0 > 0);
      }
    }
  }
}

/* Tiles [t, nt) of output q's channel rows (past the last whole transpose),
 * with the bias and the clamp: scalars (vectorised, this is code for nothing). */
static void mrt_wino_rows_tail(const float *o, size_t nc, size_t t, size_t nt, const float *bias, float lo, float hi,
                               float *z, size_t vs) {
  _Pragma("clang loop vectorize(disable) interleave(disable)") for (size_t i = 0; i < nc && t < nt; ++i)
    _Pragma("clang loop vectorize(disable) interleave(disable) unroll(disable)") for (size_t r = t; r < nt; ++r) {
      const float a = o[r * nc + i] + bias[i], l = a < lo ? lo : a;
      z[i * vs + r] = l > hi ? hi : l;
    }
}

/* The post stage (residual, activation) on the output rows a chunk wrote. */
static void mrt_wino_post(const mrt_wino_job *jb, size_t pn, size_t nc, size_t ty0, size_t nty) {
  const mrt_conv_params *p = jb->p;
  if (!p->post.post) return;
  const size_t ow = p->out[2], oh = p->out[1];
  const size_t j0 = 2 * ty0 * ow, j1 = mrt_min(oh, 2 * (ty0 + nty)) * ow;
  mrt_sgemm_epilogue ep = p->post;
  ep.res = jb->res;
  mrt_conv_post(&ep, pn * nc, j0, nc, j1 - j0, jb->y + pn * nc * p->out_pix + j0, p->out_pix);
}

/* A^T M A of each of nt tiles, VL channels at a time: the tile's 4 outputs
 * from M [16][ms][nc] (+ a line a product) into ob[4][ms][nc]. */
#define MRT_WINO_OUTPUT(NAME, ATTR, VT, VL)                                                                    \
  ATTR static void NAME(const float *MRT_RESTRICT mb, size_t nt, size_t ms, size_t nc, float *MRT_RESTRICT ob) { \
    for (size_t t = 0; t < nt; ++t)                                                                           \
      for (size_t c = 0; c < nc; c += (VL)) {                                                                 \
        VT m[16], s[2][4];                                                                                    \
        _Pragma("clang loop unroll(full)") for (int e = 0; e < 16; ++e)                                       \
          __builtin_memcpy(&m[e], mb + e * (ms * nc + 16) + t * nc + c, sizeof(VT));                          \
        _Pragma("clang loop unroll(full)") for (int j = 0; j < 4; ++j) {                                      \
          s[0][j] = m[j] + m[4 + j] + m[8 + j];                                                               \
          s[1][j] = m[4 + j] - m[8 + j] - m[12 + j];                                                          \
        }                                                                                                     \
        _Pragma("clang loop unroll(full)") for (int a = 0; a < 2; ++a) {                                      \
          const VT y0 = s[a][0] + s[a][1] + s[a][2], y1 = s[a][1] - s[a][2] - s[a][3];                        \
          __builtin_memcpy(ob + ((2 * a) * ms + t) * nc + c, &y0, sizeof(VT));                                \
          __builtin_memcpy(ob + ((2 * a + 1) * ms + t) * nc + c, &y1, sizeof(VT));                            \
        }                                                                                                     \
      }                                                                                                       \
  }
MRT_WINO_OUTPUT(mrt_wino_output, MRT_AVX512F, mrt_v16f, 16)
MRT_WINO_OUTPUT(mrt_wino_output__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8)
#undef MRT_WINO_OUTPUT

/* One panel of a chunk of nt tiles: the 16 products, A^T M A, the transposes
 * into channel rows with the bias and the clamp, and the rows into Y's
 * output rows [2 ty0, ...). */
MRT_AVX512F static void mrt_wino_panel(const mrt_wino_job *jb, size_t pn, size_t ty0, size_t nty,
                                       const float *MRT_RESTRICT v, float *MRT_RESTRICT mb,
                                       float *MRT_RESTRICT ob, float *MRT_RESTRICT zb) {
  const mrt_conv_params *p = jb->p;
  const size_t nc = MRT_DENSE_NC, tw = mrt_wino_tw(p), nt = nty * tw;
  const size_t vs = mrt_wino_vs(p), ms = mrt_wino_ms(p);
  mrt_wino_products(p, pn, nt, nc, mrt_wino_tile, v, mb);
  mrt_wino_output(mb, nt, ms, nc, ob);
  /* Into channel rows zb[4][64][vs], with the bias and the clamp. */
  const float lo = p->lo, hi = p->hi;
  float bias[MRT_DENSE_NC];
  for (size_t i = 0; i < nc; ++i) bias[i] = jb->bias ? jb->bias[pn * nc + i] : 0.0f;
  for (size_t q = 0; q < 4; ++q) {
    const float *o = ob + q * ms * nc;
    float *z = zb + q * nc * vs;
    size_t t = 0;
    for (; t + 16 <= nt; t += 16)
      for (size_t i = 0; i < nc; i += 16)
        mrt_wino_t16(o + t * nc + i, nc, z + i * vs + t, vs, bias + i, lo, hi);
    mrt_wino_rows_tail(o, nc, t, nt, bias, lo, hi, z, vs);
  }
  /* Each tile row's outputs a and b of an output row interleaved into it. */
  const size_t ow = p->out[2], oh = p->out[1], pix = p->out_pix;
  float *y = jb->y + pn * nc * pix;
  for (size_t i = 0; i < nc; ++i)
    for (size_t r = 0; r < nty; ++r)
      for (size_t h = 0; h < 2 && 2 * (ty0 + r) + h < oh; ++h) {
        const float *z0 = zb + (2 * h * nc + i) * vs + r * tw, *z1 = z0 + nc * vs;
        float *yr = y + i * pix + (2 * (ty0 + r) + h) * ow;
        for (size_t tx = 0; tx < tw; tx += 16) {
          const mrt_v16f a = mrt_load16(z0 + tx, tw - tx), b = mrt_load16(z1 + tx, tw - tx);
          const size_t n = ow - 2 * tx;
          mrt_store16(yr + 2 * tx, __builtin_shufflevector(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
                      n);
          if (n > 16)
            mrt_store16(yr + 2 * tx + 16,
                        __builtin_shufflevector(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31),
                        n - 16);
        }
      }
  mrt_wino_post(jb, pn, nc, ty0, nty);
}

/* The AVX2 kernel's path: the same transforms on vectors of 8 tiles or 8
 * channels, 16-channel panels and the dense path's 6 x 16 tiles. Without
 * masked moves worth having (vmaskmovps stores are slow on AMD), the input
 * transform reads the zero-padded copy conv_core.c makes (xp: planes of
 * xp[1] x xp[2]), a window row at column 2 tx, whole vectors: tiles past a
 * row's end read up to 16 floats past it (the copy has that slack) and are
 * stored into the next tile row's slots, which that row overwrites, or into
 * V's slack after the chunk's last one; the products never read them. Window
 * rows past the copy's last (an odd output height) read a row of zeros. */
#define MRT_AVX2_FMA __attribute__((target("avx2,fma")))
MRT_AVX2_FMA static void mrt_wino_input__avx2(const mrt_conv_params *p, const float *xp, size_t ty0, size_t ty1,
                                              float *MRT_RESTRICT v) {
  const size_t tw = mrt_wino_tw(p), vs = mrt_wino_vs(p), cs = mrt_wino_es(p);
  const size_t XW = p->xp[2], XH = p->xp[1], plane = XW * XH;
  float zrow[2 * MRT_WINO_MAXW + 32];
  __builtin_memset(zrow, 0, (2 * mrt_round_up(tw, 8) + 24) * sizeof(float));
  for (size_t c = 0; c < p->c_in; ++c) {
    for (size_t ty = ty0; ty < ty1; ++ty) {
      const float *xr[4];
      for (int k = 0; k < 4; ++k) xr[k] = 2 * ty + k < XH ? xp + c * plane + (2 * ty + k) * XW : zrow;
      float *vr = v + c * vs + (ty - ty0) * tw;
      for (size_t tx = 0; tx < tw; tx += 8) {
        mrt_v8f d[4][4];
        _Pragma("clang loop unroll(full)") for (int k = 0; k < 4; ++k) {
          const float *s = xr[k] + 2 * tx;
          mrt_v8f a, b1, a2, b2;
          __builtin_memcpy(&a, s, sizeof a);
          __builtin_memcpy(&b1, s + 8, sizeof b1);
          __builtin_memcpy(&a2, s + 2, sizeof a2);
          __builtin_memcpy(&b2, s + 10, sizeof b2);
          d[k][0] = __builtin_shufflevector(a, b1, 0, 2, 4, 6, 8, 10, 12, 14);
          d[k][1] = __builtin_shufflevector(a, b1, 1, 3, 5, 7, 9, 11, 13, 15);
          d[k][2] = __builtin_shufflevector(a2, b2, 0, 2, 4, 6, 8, 10, 12, 14);
          d[k][3] = __builtin_shufflevector(a2, b2, 1, 3, 5, 7, 9, 11, 13, 15);
        }
        mrt_v8f t[4][4];
        _Pragma("clang loop unroll(full)") for (int j = 0; j < 4; ++j) {
          t[0][j] = d[0][j] - d[2][j];
          t[1][j] = d[1][j] + d[2][j];
          t[2][j] = d[2][j] - d[1][j];
          t[3][j] = d[1][j] - d[3][j];
        }
        _Pragma("clang loop unroll(full)") for (int i = 0; i < 4; ++i) {
          float *o = vr + tx + (size_t)i * 4 * cs;
          const mrt_v8f o0 = t[i][0] - t[i][2], o1 = t[i][1] + t[i][2], o2 = t[i][2] - t[i][1], o3 = t[i][1] - t[i][3];
          __builtin_memcpy(o, &o0, sizeof o0);
          __builtin_memcpy(o + cs, &o1, sizeof o1);
          __builtin_memcpy(o + 2 * cs, &o2, sizeof o2);
          __builtin_memcpy(o + 3 * cs, &o3, sizeof o3);
        }
      }
    }
  }
}

MRT_AVX2_FMA __attribute__((noinline)) static void mrt_wino_tile__avx2(size_t kc, const float *x, const size_t *kofs,
                                                                      const ptrdiff_t *pos, const float *w, float *ct,
                                                                      int acc_in) {
  mrt_conv_dense_tile__avx2(kc, x, kofs, pos, w, ct, acc_in);
}

/* mrt_wino_panel on the AVX2 kernel: 16-channel panels. */
MRT_AVX2_FMA static void mrt_wino_panel__avx2(const mrt_wino_job *jb, size_t pn, size_t ty0, size_t nty,
                                              const float *MRT_RESTRICT v, float *MRT_RESTRICT mb,
                                              float *MRT_RESTRICT ob, float *MRT_RESTRICT zb) {
  const mrt_conv_params *p = jb->p;
  const size_t nc = MRT_DENSE_NC2, tw = mrt_wino_tw(p), nt = nty * tw;
  const size_t vs = mrt_wino_vs(p), ms = mrt_wino_ms(p);
  mrt_wino_products(p, pn, nt, nc, mrt_wino_tile__avx2, v, mb);
  mrt_wino_output__avx2(mb, nt, ms, nc, ob);
  /* Into channel rows zb[4][16][vs], with the bias and the clamp. */
  const float lo = p->lo, hi = p->hi;
  float bias[MRT_DENSE_NC2];
  for (size_t i = 0; i < nc; ++i) bias[i] = jb->bias ? jb->bias[pn * nc + i] : 0.0f;
  for (size_t q = 0; q < 4; ++q) {
    const float *o = ob + q * ms * nc;
    float *z = zb + q * nc * vs;
    size_t t = 0;
    for (; t + 8 <= nt; t += 8)
      for (size_t i = 0; i < nc; i += 8) mrt_conv_dense_t8(o + t * nc + i, nc, z + i * vs + t, vs, bias + i, lo, hi);
    mrt_wino_rows_tail(o, nc, t, nt, bias, lo, hi, z, vs);
  }
  /* Each tile row's outputs a and b of an output row interleaved into it. */
  const size_t ow = p->out[2], oh = p->out[1], pix = p->out_pix;
  float *y = jb->y + pn * nc * pix;
  for (size_t i = 0; i < nc; ++i)
    for (size_t r = 0; r < nty; ++r)
      for (size_t h = 0; h < 2 && 2 * (ty0 + r) + h < oh; ++h) {
        const float *z0 = zb + (2 * h * nc + i) * vs + r * tw, *z1 = z0 + nc * vs;
        float *yr = y + i * pix + (2 * (ty0 + r) + h) * ow;
        size_t tx = 0;
        for (; tx + 8 <= tw && 2 * tx + 16 <= ow; tx += 8) {
          mrt_v8f a, b;
          __builtin_memcpy(&a, z0 + tx, sizeof a);
          __builtin_memcpy(&b, z1 + tx, sizeof b);
          const mrt_v8f l8 = __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11);
          const mrt_v8f h8 = __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15);
          __builtin_memcpy(yr + 2 * tx, &l8, sizeof l8);
          __builtin_memcpy(yr + 2 * tx + 8, &h8, sizeof h8);
        }
        _Pragma("clang loop vectorize(disable) interleave(disable) unroll(disable)") for (; tx < tw; ++tx) {
          yr[2 * tx] = z0[tx];
          if (2 * tx + 1 < ow) yr[2 * tx + 1] = z1[tx];
        }
      }
  mrt_wino_post(jb, pn, nc, ty0, nty);
}
#undef MRT_AVX2_FMA

/* Item `item` = (chunk, run of panels), chunk-major: the chunk's V once, then
 * its panels. */
static void mrt_wino_task(void *varg, size_t item, size_t thread) {
  const mrt_wino_job *jb = (const mrt_wino_job *)varg;
  const mrt_conv_params *p = jb->p;
  const size_t c = item / jb->groups, g = item % jb->groups, th = mrt_wino_th(p);
  const size_t ty0 = c * th / jb->chunks, ty1 = (c + 1) * th / jb->chunks, panels = p->c_out / p->dense_nc;
  const size_t pn0 = g * jb->per_group, pn1 = mrt_min(panels, pn0 + jb->per_group);
  if (ty1 <= ty0 || pn1 <= pn0) return;
  const size_t ms = mrt_wino_ms(p), nc = p->dense_nc;
  float *v = (float *)(jb->scratch + thread * mrt_wino_thread_bytes(p));
  float *mb = v + 16 * mrt_wino_es(p), *ob = mb + 16 * (ms * nc + 16), *zb = ob + 4 * ms * nc;
  if (nc == MRT_DENSE_NC2) {
    mrt_wino_input__avx2(p, jb->x, ty0, ty1, v);
    for (size_t pn = pn0; pn < pn1; ++pn) mrt_wino_panel__avx2(jb, pn, ty0, ty1 - ty0, v, mb, ob, zb);
    return;
  }
  mrt_wino_input(p, jb->x, ty0, ty1, v);
  for (size_t pn = pn0; pn < pn1; ++pn) mrt_wino_panel(jb, pn, ty0, ty1 - ty0, v, mb, ob, zb);
}

/* One batch item: x its input, y / res its output. Chunks of at most
 * mrt_wino_rows tile rows, dealt evenly (the same for every thread count);
 * on threads, when the chunks are fewer than the threads the panels are cut
 * in runs too (each run transforms the chunk's input again). */
static void mrt_conv_wino_run(mrt_pool *pool, const mrt_conv_params *p, const float *x, const float *bias,
                              const float *res, float *y, void *scratch) {
  const size_t th = mrt_wino_th(p), rows = mrt_wino_rows(p), panels = p->c_out / p->dense_nc;
  const size_t chunks = (th + rows - 1) / rows;
  const size_t tasks = mrt_pool_tasks(pool, p->c_out * p->out_pix * p->kdim, (size_t)1 << 17);
  size_t groups = 1;
  if (tasks > 1 && chunks < mrt_pool_threads(pool))
    groups = mrt_min(panels, (mrt_pool_threads(pool) + chunks - 1) / chunks);
  const size_t per_group = (panels + groups - 1) / groups;
  groups = (panels + per_group - 1) / per_group;
  mrt_wino_job job = {p, x, bias, res, y, (char *)scratch, chunks, groups, per_group};
  if (tasks <= 1) {
    for (size_t i = 0; i < chunks * groups; ++i) mrt_wino_task(&job, i, 0);
    return;
  }
  mrt_parallel_for(pool, chunks * groups, mrt_wino_task, &job);
}
