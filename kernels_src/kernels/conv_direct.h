/*
 * Direct convolution for very few input channels (C_in <= 4, one group, 2-D):
 * the stems of image networks (3 -> 32 3x3 stride 2, 3 -> 64 7x7 stride 2).
 * im2col + GEMM spends a large part of such a layer packing B (K is only 27 or
 * 147 rows, so each packed float feeds few multiply-adds); here the taps read
 * the input in place instead.
 *
 * Output rows are cut in strips of p->stem_sr rows. For each strip a thread
 * copies the input rows the strip reaches into its own buffer, zero-padded and
 * with columns split by phase (column mod x stride), as the depthwise plane
 * path does, so that tap t of NV * VL consecutive outputs of a row is one run
 * of contiguous floats at a fixed offset (p->stem_taps[t]) from the row's
 * base: buffer layout [channel][phase][row][stem_rw]. Output channels go in
 * groups of G held as accumulators (G x NV vectors) while every tap's weight
 * is broadcast from the repacked weights [group][tap][G]. Then bias, the
 * tiles' clamp, and per strip the post stage (residual, activation) of
 * conv_core.c, on the strip's rows while they are in cache.
 *
 * Speed code: x86_64 builds with the AVX-512 GEMM only (not --tune size, not
 * Android's x86 ABIs), on the AVX-512 and AVX2 kernels; the SSE kernel keeps
 * im2col.
 */

/* Output rows a strip. */
#define MRT_STEM_ROWS 8

/* Buffer rows of one strip (all phases share them). */
static size_t mrt_stem_buf_rows(const mrt_conv_params *p) {
  return (p->stem_sr - 1) * p->s[1] + (p->k[1] - 1) * p->d[1] + 1;
}

static size_t mrt_stem_buf_floats(const mrt_conv_params *p) {
  return p->c_in * p->s[2] * mrt_stem_buf_rows(p) * p->stem_rw;
}

/* The buffer for the strip whose first output row is oy0: every slot written
 * once (zeros where a tap falls outside the input), so no clearing pass. */
static void mrt_stem_fill(const mrt_conv_params *p, const float *MRT_RESTRICT x, size_t oy0,
                          float *MRT_RESTRICT buf) {
  const size_t hb = mrt_stem_buf_rows(p), rw = p->stem_rw, sx = p->s[2];
  const ptrdiff_t H = (ptrdiff_t)p->in[1], W = (ptrdiff_t)p->in[2], px = p->pb[2];
  const ptrdiff_t r0 = (ptrdiff_t)(oy0 * p->s[1]) - p->pb[1];
  for (size_t c = 0; c < p->c_in; ++c)
    for (size_t r = 0; r < hb; ++r) {
      const ptrdiff_t iy = r0 + (ptrdiff_t)r;
      float *d0 = buf + (c * sx * hb + r) * rw, *d1 = d0 + hb * rw;
      if (iy < 0 || iy >= H) {
        for (size_t ph = 0; ph < sx; ++ph) __builtin_memset(d0 + ph * hb * rw, 0, rw * sizeof(float));
        continue;
      }
      const float *s = x + (c * (size_t)H + (size_t)iy) * (size_t)W;
      if (sx == 1) {
        /* Slot j holds input column j - px. */
        const ptrdiff_t j1 = W + px < (ptrdiff_t)rw ? W + px : (ptrdiff_t)rw;
        __builtin_memset(d0, 0, (size_t)px * sizeof(float));
        __builtin_memcpy(d0 + px, s, (size_t)(j1 - px) * sizeof(float));
        __builtin_memset(d0 + j1, 0, (rw - (size_t)j1) * sizeof(float));
        continue;
      }
      /* Stride 2: padded column k = i + px goes to phase k & 1, slot k >> 1;
       * k < 2 rw. Pairs of padded columns from an even k: 8 inputs
       * deinterleave into 4 + 4. */
      ptrdiff_t k = 0;
      const ptrdiff_t kend = 2 * (ptrdiff_t)rw, kin = W + px < kend ? W + px : kend;
      for (; k < px; ++k) (k & 1 ? d1 : d0)[k >> 1] = 0.0f;
      if (k & 1) (d1[k >> 1] = s[k - px], ++k);
      for (; k + 8 <= kin; k += 8) {
        mrt_v4f u, w;
        __builtin_memcpy(&u, s + k - px, sizeof u);
        __builtin_memcpy(&w, s + k - px + 4, sizeof w);
        const mrt_v4f e = __builtin_shufflevector(u, w, 0, 2, 4, 6), o = __builtin_shufflevector(u, w, 1, 3, 5, 7);
        __builtin_memcpy(d0 + (k >> 1), &e, sizeof e);
        __builtin_memcpy(d1 + (k >> 1), &o, sizeof o);
      }
      for (; k < kin; ++k) (k & 1 ? d1 : d0)[k >> 1] = s[k - px];
      for (; k < kend; ++k) (k & 1 ? d1 : d0)[k >> 1] = 0.0f;
    }
}

typedef struct mrt_stem_job {
  const mrt_conv_params *p;
  const float *x, *bias, *res;
  float *y;
  char *scratch;
  size_t stride, strips, per_task;
} mrt_stem_job;

typedef void (*mrt_stem_rows_fn)(const mrt_stem_job *j, size_t item, float *buf);

/* One strip (item: batch item * strips + strip) on a vector type VT of VL
 * floats: G output channels by NV vectors of a row in registers; a row's
 * last outputs by as few vectors as cover them (1 .. NV: OW = 112 is 48 + 48
 * + 16 on AVX-512, not 48 x 3). */
#define MRT_STEM_KERNEL(NAME, ATTR, VT, VL, G, NV)                                             \
  ATTR static inline __attribute__((always_inline)) void NAME##_block(                         \
      const mrt_conv_params *p, const float *MRT_RESTRICT b0, const float *MRT_RESTRICT wg,    \
      const VT *bv, float *MRT_RESTRICT d, size_t left, size_t gn, size_t nv) {               \
    const size_t taps = p->c_in * p->kvol;                                                     \
    const VT vlo = (VT){0} + p->lo, vhi = (VT){0} + p->hi;                                     \
    VT acc[G][NV];                                                                             \
    for (size_t g = 0; g < G; ++g)                                                             \
      for (size_t u = 0; u < nv; ++u) acc[g][u] = bv[g];                                       \
    const float *wt = wg;                                                                      \
    for (size_t t = 0; t < taps; ++t, wt += G) {                                               \
      const float *s = b0 + p->stem_taps[t];                                                   \
      VT v[NV];                                                                                \
      for (size_t u = 0; u < nv; ++u) __builtin_memcpy(&v[u], s + u * VL, sizeof(VT));         \
      /* The scalar weight splats as an FMA's broadcast operand ((VT){0} + w           \
       * would add 0.0f first: one more uop and a shuffle a weight). */                       \
      for (size_t g = 0; g < G; ++g)                                                           \
        for (size_t u = 0; u < nv; ++u) acc[g][u] += wt[g] * v[u];                             \
    }                                                                                          \
    /* G stores with constant indices, so acc stays in registers (a loop to a   \
     * runtime gn went through the stack); a ragged group's extra channels go  \
     * to a sink. */                                                              \
    float sink[NV * VL];                                                                       \
    for (size_t g = 0; g < G; ++g)                                                             \
      for (size_t u = 0; u < nv; ++u) {                                                        \
        const VT r = MRT_VMIN(MRT_VMAX(acc[g][u], vlo), vhi);                                  \
        float *dg = g < gn ? d + g * p->out_pix : sink;                                        \
        if ((u + 1) * VL <= left) {                                                            \
          __builtin_memcpy(dg + u * VL, &r, sizeof(VT));                                        \
        } else {                                                                               \
          float tmp[VL];                                                                       \
          __builtin_memcpy(tmp, &r, sizeof(VT));                                               \
          /* (No memcpy call: a call would spill every accumulator.) */            \
          _Pragma("clang loop vectorize(disable) unroll(disable)")                             \
          for (size_t i = u * VL; i < left; ++i) dg[i] = tmp[i - u * VL];                      \
          break;                                                                               \
        }                                                                                      \
      }                                                                                        \
  }                                                                                            \
  ATTR static void NAME(const mrt_stem_job *j, size_t item, float *MRT_RESTRICT buf) {         \
    const mrt_conv_params *p = j->p;                                                           \
    const size_t n = item / j->strips, oy0 = item % j->strips * p->stem_sr;                    \
    const size_t OW = p->out[2], nr = mrt_min(p->stem_sr, p->out[1] - oy0);                    \
    const size_t rstep = p->s[1] * p->stem_rw, taps = p->c_in * p->kvol;                      \
    const float *x = j->x + n * p->c_in * p->in_pix;                                           \
    float *y = j->y + n * p->c_out * p->out_pix;                                               \
    mrt_stem_fill(p, x, oy0, buf);                                                             \
    for (size_t co = 0; co < p->c_out; co += G) {                                              \
      const size_t gn = mrt_min(G, p->c_out - co);                                             \
      const float *wg = p->stem_w + co * taps;                                                 \
      VT bv[G];                                                                                \
      for (size_t g = 0; g < G; ++g) bv[g] = (VT){0} + (j->bias && g < gn ? j->bias[co + g] : 0.0f); \
      for (size_t l = 0; l < nr; ++l) {                                                        \
        const float *br = buf + l * rstep;                                                     \
        float *yr = y + co * p->out_pix + (oy0 + l) * OW;                                      \
        size_t ox = 0;                                                                         \
        for (; ox + NV * VL <= OW; ox += NV * VL)                                              \
          NAME##_block(p, br + ox, wg, bv, yr + ox, NV * VL, gn, NV);                          \
        const size_t left = OW - ox, nv = (left + VL - 1) / VL;                                \
        if (nv == 1)                                                                           \
          NAME##_block(p, br + ox, wg, bv, yr + ox, left, gn, 1);                              \
        else if (nv == 2)                                                                      \
          NAME##_block(p, br + ox, wg, bv, yr + ox, left, gn, 2);                              \
        else if (nv)                                                                           \
          NAME##_block(p, br + ox, wg, bv, yr + ox, left, gn, NV);                             \
      }                                                                                        \
    }                                                                                          \
    if (p->post.post) {                                                                        \
      mrt_sgemm_epilogue e = p->post;                                                          \
      e.res = j->res ? j->res + n * p->c_out * p->out_pix : NULL;                              \
      mrt_conv_post(&e, 0, oy0 * OW, p->c_out, nr * OW, y + oy0 * OW, p->out_pix);            \
    }                                                                                          \
  }

MRT_STEM_KERNEL(mrt_conv_stem__avx512, __attribute__((target("avx512f,avx2,fma"))), mrt_v16f, 16, 8, 3)
/* AVX2 has 16 ymm registers and no broadcast operand in its FMAs: 4 x 3
 * accumulators with 3 input vectors and a broadcast weight took all 16, and
 * clang kept one accumulator on the stack, a store-to-load chain through
 * every tap that halved the FMA rate. 4 x 2 leaves registers to spare
 * (AMD EPYC, one thread, one-node models: ResNet-50's 7x7 3 -> 64 stride 2
 * 5.56 -> 2.61 ms, onnxruntime 2.77; MobileNetV2's 3x3 3 -> 32 stride 2
 * 522 -> 298 us, onnxruntime 372; 6 x 2 measured the same on the first and
 * 347 us on the second, whose 32 channels are 5 groups of 6 and a ragged one). */
MRT_STEM_KERNEL(mrt_conv_stem__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8, 4, 2)

typedef struct mrt_stem_task_arg {
  const mrt_stem_job *job;
  mrt_stem_rows_fn fn;
} mrt_stem_task_arg;

static void mrt_conv_stem_task(void *varg, size_t task, size_t thread) {
  const mrt_stem_task_arg *a = (const mrt_stem_task_arg *)varg;
  const mrt_stem_job *j = a->job;
  const size_t items = j->p->batch * j->strips, lo = task * j->per_task, hi = mrt_min(items, lo + j->per_task);
  float *buf = (float *)(j->scratch + thread * j->stride);
  for (size_t i = lo; i < hi; ++i) a->fn(j, i, buf);
}

/* Multiply-adds below which a strip task is not worth a thread. */
#define MRT_CONV_STEM_TASK_MACS ((size_t)1 << 17)

static void mrt_conv_stem_run(mrt_pool *pool, const mrt_conv_params *p, const float *x, const float *bias,
                              const float *res, float *y, void *scratch) {
  const size_t strips = (p->out[1] + p->stem_sr - 1) / p->stem_sr, items = p->batch * strips;
  size_t per_task;
  size_t runs = mrt_conv_runs(pool, items, items * p->stem_sr * p->out[2] * p->c_out * p->c_in * p->kvol,
                              MRT_CONV_STEM_TASK_MACS, &per_task);
  /* On threads a strip a task, so the threads' runs differ by one strip at
   * most: 112 output rows are 14 strips, which in tasks of 2 were 4 + 3 tasks,
   * 8 strips on one thread against 6 (2 threads: 1.75x one thread's speed). */
  if (runs > 1) runs = items, per_task = 1;
  const mrt_stem_job job = {p, x, bias, res, y, (char *)scratch,
                            mrt_round_up(mrt_stem_buf_floats(p) * sizeof(float), 64), strips, per_task};
  const mrt_stem_task_arg a = {&job, p->kern == &mrt_sgemm_avx512 ? mrt_conv_stem__avx512 : mrt_conv_stem__avx2};
  mrt_parallel_for(pool, runs, mrt_conv_stem_task, (void *)&a);
}

/* At prepare: take the direct path (p->stem_w set) when it serves this
 * convolution on the selected kernel; else leave p for im2col. */
MRT_PREPARE_CODE
static mrt_status mrt_conv_stem_prepare(mrt_ctx *ctx, mrt_conv_params *p, const mrt_tensor *w) {
  /* (Pads past the kernel's extent read no input: im2col keeps those.) */
  if (p->group != 1 || p->c_in > 4 || p->k[0] != 1 || p->in[0] != 1 || p->s[2] > 2 || !w->is_constant ||
      !w->data || (p->kern != &mrt_sgemm_avx512 && p->kern != &mrt_sgemm_avx2) ||
      p->pb[1] > (ptrdiff_t)((p->k[1] - 1) * p->d[1]) || p->pb[2] > (ptrdiff_t)((p->k[2] - 1) * p->d[2]))
    return MRT_STATUS_OK;
  const size_t G = p->kern == &mrt_sgemm_avx512 ? 8 : 4, span = p->kern == &mrt_sgemm_avx512 ? 16 : 8;
  const size_t taps = p->c_in * p->kvol, groups = (p->c_out + G - 1) / G, sx = p->s[2];
  p->stem_sr = mrt_min(MRT_STEM_ROWS, p->out[1]);
  /* In 64 bits: size_t is 32 on x86 (never built here, but the checks cost nothing). */
  const uint64_t rw = (uint64_t)mrt_round_up(p->out[2], span) + (uint64_t)(p->k[2] - 1) * p->d[2] / sx + 1;
  const uint64_t hb = (uint64_t)(p->stem_sr - 1) * p->s[1] + (uint64_t)(p->k[1] - 1) * p->d[1] + 1;
  if (rw > INT32_MAX || hb * rw * sx * p->c_in > INT32_MAX / sizeof(float)) return MRT_STATUS_OK;
  p->stem_rw = (size_t)rw;
  float *wp = (float *)mrt_ctx_alloc(ctx, groups * G * taps * sizeof(float));
  int32_t *tv = (int32_t *)mrt_ctx_alloc(ctx, taps * sizeof(int32_t));
  if (!wp || !tv) return MRT_STATUS_OUT_OF_MEMORY;
  const float *wsrc = (const float *)w->data;
  for (size_t g = 0; g < groups; ++g)
    for (size_t t = 0; t < taps; ++t)
      for (size_t u = 0; u < G; ++u) {
        const size_t co = g * G + u;
        wp[(g * taps + t) * G + u] = co < p->c_out ? wsrc[co * taps + t] : 0.0f;
      }
  for (size_t c = 0; c < p->c_in; ++c)
    for (size_t ky = 0; ky < p->k[1]; ++ky)
      for (size_t kx = 0; kx < p->k[2]; ++kx) {
        const size_t cx = kx * p->d[2];
        tv[(c * p->k[1] + ky) * p->k[2] + kx] =
            (int32_t)(((c * sx + cx % sx) * (size_t)hb + ky * p->d[1]) * p->stem_rw + cx / sx);
      }
  p->stem_w = wp;
  p->stem_taps = tv;
  mrt_conv_request_scratch(ctx, p, mrt_ctx_threads(ctx) * mrt_round_up(mrt_stem_buf_floats(p) * sizeof(float), 64));
  return MRT_STATUS_OK;
}
