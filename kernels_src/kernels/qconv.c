/*
 * QLinearConv (ai.onnx 10): quantised convolution, 1-D and 2-D, grouped and
 * depthwise, per-tensor or per-output-channel weight scales and zero points.
 * One object per (T1 x, T2 w, T3 y) signature; the bias (T4) is int32 always.
 *
 *   acc[m, p] = B[m] + sum_k (w[m, k] - zw[m]) * (x[k, p] - zx)        (int32)
 *   y[m, p]   = sat(round_half_even(acc * (sx * sw[m] / sy)) + zy)
 *
 * as onnxruntime computes it (the scale product rounded to float in that order,
 * the accumulator converted to float before scaling, so results agree exactly).
 * The sum is the qgemm support unit's, B read in place: the input is copied once
 * per call into planes padded with zx (a padded tap adds 0), one per stride phase a
 * tap uses, each as wide as the output plus the kernel's reach (gw), so that tap
 * (c, ky, kx) over every output pixel is one contiguous run of a plane, a row of B
 * whose offset prepare tabulates. qgemm packs those rows straight into its
 * micro-kernel's layout and requantises each tile as it leaves the micro-kernel,
 * dropping the grid's gw - ow extra columns; a 1x1 stride-1 unpadded convolution
 * reads x itself. Prepare packs each group's constant weights once (A = M/group x
 * K, per-row zero points folded in). A depthwise convolution (one input and one
 * output channel per group) would be a GEMM of one row per channel; it runs on the
 * same planes directly, eight pixels at a time, two taps per pair dot product
 * (x times w - zw, the zx * sum(w - zw) term folded into the bias at prepare).
 */
#include "qcommon.h"
#include "qgemm.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_QLinearConv)

/* uint8 x and int8 w on x86_64: the signature that may read channel quads in place
 * (qconv_params.nq4); a constant, so the other signatures carry none of that code */
#if defined(__x86_64__)
#define QCONV_QUADS (MRT_T0_DTYPE == MRT_DTYPE_UINT8 && MRT_T1_DTYPE == MRT_DTYPE_INT8)
#endif

typedef MRT_T0 xq_t;
typedef MRT_T1 wq_t;
typedef MRT_T2 yq_t;

typedef struct qconv_params {
  const mrt_qgemm_kernel *kern;
  size_t batch, c_in, c_out, group, mg, cg, kdim;
  size_t ih, iw, oh, ow, kh, kw, sh, sw, dh, dw;
  ptrdiff_t ph, pw;
  int32_t zx, zy, lo, hi;
  int direct;       /* 1x1, stride 1, no pads: x is B */
  int depthwise;    /* one input and one output channel per group */
  size_t gw, rhp;   /* the padded planes' width (the GEMM's grid) and rows */
  size_t nph;       /* stride phases the taps use */
  size_t *phase;    /* [nph]: py * sw + px of each */
  size_t plane, chan_bytes, planes_bytes; /* a plane, a channel's nph planes, all with slack */
  size_t *off;      /* [kdim]: B row (c, ky, kx) in a group's planes (direct: in x) */
  size_t acc_bytes;  /* depthwise: a thread's int32 grid(s), then their bytes */
  size_t dw_planes;  /* depthwise: a thread's planes of one channel, with slack */
  size_t dw_block;   /* depthwise: channels whose grids go through one requantisation (small grids) */
  int32_t *bias_x;   /* small grids: [c_out * n_grid] each channel's bias repeated over its grid */
  float *scale_x;    /* the same for the scale */
  int16_t *wd;      /* depthwise: [c_out][kpair * 2] w - zw, taps in pairs (a last odd one with 0) */
  size_t kpair;
  int8_t *wq;       /* or, uint8 x and int8 w with zero points 0 on a VNNI CPU: [c_out][nquads * 4] w */
  size_t nquads;
  size_t *offq;     /* [nquads * 4]: off, the missing taps' at off[0] */
  /* uint8 x, int8 w with zero points 0, one group, on an AVX512-VNNI CPU without AMX:
   * the planes are also interleaved four channels a quad and read in place, pixels
   * as the tile's rows (qgemm.h: mrt_qgemm_conv_quads_t), K ordered (channel quad,
   * ky, kx, channel % 4) */
  size_t nq4;       /* quads of K: ceil(cg / 4) kh kw (0: the packed-B path) */
  int8_t *wq4;      /* the weights in that order, packed */
  size_t *qoff4;    /* [nq4]: quad (cq, ky, kx) at 4 (cq chan_bytes + off(0, ky, kx)) in the quad planes */
  int32_t *bias4;   /* [c_out rounded up to 32]: bias - zx sum(w) */
  float *scale4;    /* [the same] */
  char *w;          /* per group, w_stride bytes apart: the weights packed for kern */
  size_t w_stride;
  int32_t *bias;    /* [c_out] (depthwise: minus zx * sum(w - zw)) */
  float *scale;     /* [c_out]: sx * sw[m] / sy */
} qconv_params;

MRT_PREPARE_CODE
static int attr_list(const mrt_node *node, const char *name, size_t n, int64_t dflt, int64_t *dst) {
  const int64_t *v;
  const uint32_t c = mrt_attr_ints(node, name, &v);
  if (c && c != n) return 0;
  for (size_t i = 0; i < n; i++) {
    dst[i] = c ? v[i] : dflt;
    if (dst[i] > INT32_MAX || dst[i] < -INT32_MAX) return 0; /* sums of these stay in int64 */
  }
  return 1;
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_qlinearconv_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 8, 9, 1, 1);
  if (st) return st;
  const mrt_tensor *x = mrt_in(node, 0), *w = mrt_in(node, 3), *b = mrt_in(node, 8), *y = node->outputs[0];
  if (!x || !w) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "x and w are required");
  if ((st = mrt_check_dtype(ctx, node, x, MRT_T0_DTYPE)) || (st = mrt_check_dtype(ctx, node, w, MRT_T1_DTYPE)) ||
      (st = mrt_check_dtype(ctx, node, y, MRT_T2_DTYPE)))
    return st;
  if (x->ndim < 3 || x->ndim > 4 || w->ndim != x->ndim || y->ndim != x->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "x, w and y must be [N, C, (H,) W] (1-D or 2-D)");
  if (!w->is_constant || !w->data)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "w must be a constant");
  const size_t nsp = x->ndim - 2;
  const int64_t group = mrt_attr_int(node, "group", 1);
  if (group < 1 || x->dims[1] % group || w->dims[0] % group || w->dims[1] * group != x->dims[1])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "group %lld does not fit x channels %lld and w %lld x %lld",
                         (long long)group, (long long)x->dims[1], (long long)w->dims[0], (long long)w->dims[1]);
  if (y->dims[0] != x->dims[0] || y->dims[1] != w->dims[0])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "y must be [N, M, ...]");
  if (b && (b->dtype != MRT_DTYPE_INT32 || b->count != (size_t)w->dims[0] || !b->is_constant || !b->data))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "B must be an int32 constant of M values");
  int64_t strides[2], dil[2], pads[4];
  if (!attr_list(node, "strides", nsp, 1, strides) || !attr_list(node, "dilations", nsp, 1, dil) ||
      !attr_list(node, "pads", 2 * nsp, 0, pads))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "strides, dilations or pads: wrong length, or a value past 2^31");
  const int su = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_UPPER");
  const int sl = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_LOWER");
  const int valid = mrt_attr_string_is(node, "auto_pad", "NOTSET", "VALID");
  if (!su && !sl && !valid && !mrt_attr_string_is(node, "auto_pad", "NOTSET", "NOTSET"))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID");

  qconv_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  int64_t in[2] = {1, 1}, out[2] = {1, 1}, k[2] = {1, 1}, s[2] = {1, 1}, d[2] = {1, 1}, pb[2] = {0, 0};
  for (size_t i = 0; i < nsp; i++) {
    const size_t a = i + 2 - nsp;
    in[a] = x->dims[2 + i], k[a] = w->dims[2 + i], s[a] = strides[i], d[a] = dil[i];
    if (k[a] < 1 || s[a] < 1 || d[a] < 1 || pads[i] < 0 || pads[nsp + i] < 0)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "kernel, strides, dilations >= 1 and pads >= 0");
    const int64_t ext = (k[a] - 1) * d[a] + 1;
    if (k[a] > INT32_MAX || ext > INT32_MAX)
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "convolution is too large (kernel extent %lld)",
                           (long long)ext);
    int64_t b0 = pads[i], e0 = pads[nsp + i], o;
    if (su || sl) {
      o = (in[a] + s[a] - 1) / s[a];
      int64_t total = (o - 1) * s[a] + ext - in[a];
      if (total < 0) total = 0;
      b0 = su ? total / 2 : total - total / 2;
    } else {
      if (valid) b0 = e0 = 0;
      o = in[a] + b0 + e0 >= ext ? (in[a] + b0 + e0 - ext) / s[a] + 1 : 0;
    }
    if (o < 1 || y->dims[2 + i] != o)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "y spatial dim %zu is %lld, expected %lld", i,
                           (long long)y->dims[2 + i], (long long)o);
    out[a] = o, pb[a] = b0;
    if (b0 || e0 || su || sl || k[a] != 1 || s[a] != 1) p->direct = -1;
  }
  p->direct = p->direct == 0;
  p->batch = (size_t)x->dims[0], p->c_in = (size_t)x->dims[1], p->c_out = (size_t)w->dims[0];
  p->group = (size_t)group, p->mg = p->c_out / p->group, p->cg = p->c_in / p->group;
  p->ih = (size_t)in[0], p->iw = (size_t)in[1], p->oh = (size_t)out[0], p->ow = (size_t)out[1];
  p->kh = (size_t)k[0], p->kw = (size_t)k[1], p->sh = (size_t)s[0], p->sw = (size_t)s[1];
  p->dh = (size_t)d[0], p->dw = (size_t)d[1], p->ph = (ptrdiff_t)pb[0], p->pw = (ptrdiff_t)pb[1];
  p->kdim = p->cg * p->kh * p->kw;

  const float *sx, *sw, *sy;
  size_t nsx, nsw, nsy;
  if ((st = mrt_q_scale(ctx, node, 1, 1, &sx, &nsx)) || (st = mrt_q_scale(ctx, node, 4, p->c_out, &sw, &nsw)) ||
      (st = mrt_q_scale(ctx, node, 6, 1, &sy, &nsy)))
    return st;
  int32_t *zw = mrt_ctx_alloc(ctx, p->c_out * sizeof *zw);
  p->bias = mrt_ctx_alloc(ctx, p->c_out * sizeof *p->bias);
  p->scale = mrt_ctx_alloc(ctx, p->c_out * sizeof *p->scale);
  if (!zw || !p->bias || !p->scale) return MRT_STATUS_OUT_OF_MEMORY;
  if ((st = mrt_q_zero_point(ctx, node, 2, MRT_T0_DTYPE, 1, &p->zx)) ||
      (st = mrt_q_zero_point(ctx, node, 5, MRT_T1_DTYPE, p->c_out, zw)) ||
      (st = mrt_q_zero_point(ctx, node, 7, MRT_T2_DTYPE, 1, &p->zy)))
    return st;
  for (size_t m = 0; m < p->c_out; m++) {
    p->bias[m] = b ? ((const int32_t *)b->data)[m] : 0;
    p->scale[m] = sx[0] * sw[nsw == 1 ? 0 : m] / sy[0];
  }
  p->lo = mrt_q_min(MRT_T2_DTYPE), p->hi = mrt_q_max(MRT_T2_DTYPE);
  const size_t threads = mrt_ctx_threads(ctx);
  p->depthwise = p->cg == 1 && p->mg == 1 && p->kdim > 1;
  p->off = mrt_ctx_alloc(ctx, (p->kdim + 1) * sizeof *p->off);
  if (!p->off) return MRT_STATUS_OUT_OF_MEMORY;
  if (p->direct) {
    p->gw = p->ow, p->rhp = p->oh;
    for (size_t i = 0; i < p->kdim; i++) p->off[i] = i * p->ih * p->iw;
  } else {
    /* output (oy, ox) tap (ky, kx) reads padded (oy sh + ky dh, ox sw + kx dw): phase
     * ((ky dh) % sh, (kx dw) % sw) at (oy + ky dh / sh, ox + kx dw / sw) */
    /* the padded planes, sized in double first: huge pads or dilations (a corrupt model)
     * must be refused, not wrapped, where size_t is 32 bits */
    const double gw = (double)p->ow + (double)((p->kw - 1) * p->dw / p->sw),
                 rh = (double)p->oh + (double)((p->kh - 1) * p->dh / p->sh),
                 phases = (double)p->sh * (double)p->sw < (double)p->kh * (double)p->kw
                              ? (double)p->sh * (double)p->sw : (double)p->kh * (double)p->kw;
    if ((gw * rh * phases + 80.0) * (double)p->c_in > (double)INT32_MAX)
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "convolution is too large (padded input planes)");
    p->gw = p->ow + (p->kw - 1) * p->dw / p->sw, p->rhp = p->oh + (p->kh - 1) * p->dh / p->sh;
    p->plane = p->rhp * p->gw;
    p->phase = mrt_ctx_alloc(ctx, p->kh * p->kw * sizeof *p->phase);
    if (!p->phase) return MRT_STATUS_OUT_OF_MEMORY;
    for (size_t ky = 0; ky < p->kh; ky++)
      for (size_t kx = 0; kx < p->kw; kx++) {
        const size_t ry = ky * p->dh, rx = kx * p->dw, key = ry % p->sh * p->sw + rx % p->sw;
        size_t u = 0;
        while (u < p->nph && p->phase[u] != key) u++;
        if (u == p->nph) p->phase[p->nph++] = key;
      }
    /* a channel's planes, then a gap that takes its last row's store overrun, to
     * a line: threads build channels side by side without writing each other's */
    p->chan_bytes = (p->nph * p->plane + 16 + 63) / 64 * 64;
    for (size_t ky = 0; ky < p->kh; ky++)
      for (size_t kx = 0; kx < p->kw; kx++) {
        const size_t ry = ky * p->dh, rx = kx * p->dw, key = ry % p->sh * p->sw + rx % p->sw;
        size_t u = 0;
        while (p->phase[u] != key) u++;
        for (size_t c = 0; c < p->cg; c++)
          p->off[(c * p->kh + ky) * p->kw + kx] = c * p->chan_bytes + u * p->plane + ry / p->sh * p->gw + rx / p->sw;
      }
    /* slack: a grid row's reach past a plane and a vector's read past the grid */
    p->planes_bytes = (p->c_in * p->chan_bytes + p->gw + 64 + 63) / 64 * 64; /* >= 16 past the planes */
  }
  const size_t n_grid = p->oh * p->gw;
  p->kern = mrt_qgemm_kernel_select_mk(p->depthwise ? (size_t)-1 : p->mg, p->kdim);
  if (p->depthwise) {
    p->kpair = (p->kdim + 1) / 2;
    p->wd = mrt_ctx_alloc(ctx, p->c_out * p->kpair * 2 * sizeof *p->wd);
    if (!p->wd) return MRT_STATUS_OUT_OF_MEMORY;
    const wq_t *wv = w->data;
    for (size_t m = 0; m < p->c_out; m++) {
      uint32_t wsum = 0;
      for (size_t t = 0; t < p->kdim; t++) {
        const int16_t v = (int16_t)((int32_t)wv[m * p->kdim + t] - zw[m]);
        p->wd[m * p->kpair * 2 + t] = v;
        wsum += (uint32_t)(int32_t)v;
      }
      p->bias[m] = (int32_t)((uint32_t)p->bias[m] - (uint32_t)p->zx * wsum);
    }
    p->off[p->kdim] = p->off[0]; /* an odd last tap's partner, weight 0 */
    int zero_zw = MRT_T0_DTYPE == MRT_DTYPE_UINT8 && MRT_T1_DTYPE == MRT_DTYPE_INT8;
    for (size_t m = 0; m < p->c_out && zero_zw; m++) zero_zw = zw[m] == 0;
    if (zero_zw && mrt_qgemm_depthwise_quads(p->kern)) {
      p->nquads = (p->kdim + 3) / 4;
      p->wq = mrt_ctx_alloc(ctx, p->c_out * p->nquads * 4);
      p->offq = mrt_ctx_alloc(ctx, p->nquads * 4 * sizeof *p->offq);
      if (!p->wq || !p->offq) return MRT_STATUS_OUT_OF_MEMORY;
      for (size_t m = 0; m < p->c_out; m++)
        for (size_t t = 0; t < p->kdim; t++) p->wq[m * p->nquads * 4 + t] = (int8_t)wv[m * p->kdim + t];
      for (size_t t = 0; t < p->nquads * 4; t++) p->offq[t] = p->off[t < p->kdim ? t : 0];
    }
    /* A grid shorter than a vector: DW_BLOCK channels' grids side by side, requantised
     * in one pass with per-lane bias and scale (a call per channel cost more than its
     * arithmetic: 960 channels of 2x2 at ~40 ns each). */
    p->dw_block = 1;
    if (n_grid < 32) {
      p->dw_block = 64;
      p->bias_x = mrt_ctx_alloc(ctx, p->c_out * n_grid * sizeof *p->bias_x);
      p->scale_x = mrt_ctx_alloc(ctx, p->c_out * n_grid * sizeof *p->scale_x);
      if (!p->bias_x || !p->scale_x) return MRT_STATUS_OUT_OF_MEMORY;
      for (size_t i = 0; i < p->c_out * n_grid; i++) p->bias_x[i] = p->bias[i / n_grid], p->scale_x[i] = p->scale[i / n_grid];
    }
    const size_t lanes = (p->dw_block * n_grid + 63) / 64 * 64 + 64; /* + a vector's overrun */
    p->acc_bytes = (lanes * (sizeof(int32_t) + 1) + 63) / 64 * 64; /* int32 grids, then bytes */
    /* Each thread pads a channel at a time, just before its taps read it (from L1),
     * instead of the caller padding them all first while the other threads wait. */
    p->dw_planes = (p->chan_bytes + p->gw + 64 + 63) / 64 * 64;
    mrt_ctx_request_scratch(ctx, threads * (p->dw_planes + p->acc_bytes));
    node->params = p;
    return MRT_STATUS_OK;
  }
#if defined(__x86_64__)
  int quads = QCONV_QUADS && !p->direct && p->group == 1 && mrt_qgemm_conv_quads_ok(p->kern);
  for (size_t m = 0; m < p->c_out && quads; m++) quads = zw[m] == 0;
  if (quads) {
    const size_t ncq = (p->cg + 3) / 4, taps = p->kh * p->kw, mpad = (p->c_out + 31) / 32 * 32;
    p->nq4 = ncq * taps;
    p->wq4 = mrt_ctx_alloc(ctx, mrt_qgemm_quads_b_size(p->c_out, p->nq4));
    p->qoff4 = mrt_ctx_alloc(ctx, p->nq4 * sizeof *p->qoff4);
    p->bias4 = mrt_ctx_alloc(ctx, mpad * sizeof *p->bias4);
    p->scale4 = mrt_ctx_alloc(ctx, mpad * sizeof *p->scale4);
    if (!p->wq4 || !p->qoff4 || !p->bias4 || !p->scale4) return MRT_STATUS_OUT_OF_MEMORY;
    const int8_t *wv = w->data;
    for (size_t m = 0; m < mpad; m++) {
      uint32_t wsum = 0;
      if (m >= p->c_out) { /* the last panel's missing channels: computed, never stored */
        p->bias4[m] = 0, p->scale4[m] = 0.0f;
        continue;
      }
      for (size_t k = 0; k < p->kdim; k++) wsum += (uint32_t)(int32_t)wv[m * p->kdim + k];
      p->bias4[m] = (int32_t)((uint32_t)p->bias[m] - (uint32_t)p->zx * wsum);
      p->scale4[m] = p->scale[m];
    }
    mrt_qgemm_quads_pack_b(p->c_out, p->cg, taps, wv, p->wq4);
    for (size_t q = 0; q < p->nq4; q++) p->qoff4[q] = 4 * (q / taps * p->chan_bytes + p->off[q % taps]);
    mrt_ctx_request_scratch(ctx, p->planes_bytes + (ncq * 4 * p->chan_bytes + 63) / 64 * 64); /* then the quads */
    node->params = p;
    return MRT_STATUS_OK;
  }
#endif
  p->w_stride = (mrt_qgemm_packed_a_size(p->kern, p->mg, p->kdim) + 63) / 64 * 64;
  p->w = mrt_ctx_alloc(ctx, p->group * p->w_stride); /* 64-byte aligned */
  if (!p->w) return MRT_STATUS_OUT_OF_MEMORY;
  for (size_t g = 0; g < p->group; g++) {
    const mrt_qgemm_src src = {NULL, (const wq_t *)w->data + g * p->mg * p->kdim, p->kdim, 1,
                               MRT_T1_DTYPE == MRT_DTYPE_INT8, zw + g * p->mg, p->mg, NULL};
    mrt_qgemm_pack_a(p->kern, p->mg, p->kdim, &src, p->w + g * p->w_stride);
  }
  mrt_ctx_request_scratch(ctx, p->planes_bytes + mrt_qgemm_scratch_size(p->kern, p->mg, n_grid, p->kdim, 1, 0));
  node->params = p;
  return MRT_STATUS_OK;
}

/* Every channel's padded phase planes: plane (py, px) row r, column c holds
 * x[r sh + py - ph][c sw + px - pw], or zx outside x. Rows are written with
 * 16-byte stores that may run past their end into memory written next (the
 * planes in order, then the slack), and read x 16 (stride 2: 32) bytes at a time
 * short of its end: no library call per row. */
typedef uint8_t qconv_v16 __attribute__((vector_size(16)));

static inline void fill16(uint8_t *d, size_t n, qconv_v16 f) {
  for (size_t i = 0; i < n; i += 16) memcpy(d + i, &f, 16);
}

/* Channels [c0, c1) at buf, then `slack` bytes of zx. */
static void build_planes(const qconv_params *p, const uint8_t *x, uint8_t *MRT_RESTRICT buf, size_t c0, size_t c1,
                         size_t slack) {
  const uint8_t fill = (uint8_t)p->zx;
  const qconv_v16 fv = (qconv_v16){0} + fill;
  const size_t sh = p->sh, sw = p->sw, gw = p->gw, ihw = p->ih * p->iw;
  const uint8_t *xend = x + p->c_in * ihw;
  for (size_t c = c0; c < c1; c++) {
    for (size_t u = 0; u < p->nph; u++) {
      const size_t py = p->phase[u] / sw, px = p->phase[u] % sw;
      const ptrdiff_t d = p->pw - (ptrdiff_t)px, e = (ptrdiff_t)p->iw + d;
      size_t cl = d > 0 ? (size_t)((d + (ptrdiff_t)sw - 1) / (ptrdiff_t)sw) : 0;
      size_t ch = e > 0 ? (size_t)((e + (ptrdiff_t)sw - 1) / (ptrdiff_t)sw) : 0;
      if (ch > gw) ch = gw;
      if (cl > ch) cl = ch;
      const size_t len = ch - cl;
      const int narrow = sw <= 2 && cl <= 16 && len <= 16 && gw - ch <= 16;
      uint8_t *pl = buf + (c - c0) * p->chan_bytes + u * p->plane;
      for (size_t r = 0; r < p->rhp; r++) {
        uint8_t *row = pl + r * gw;
        const ptrdiff_t iy = (ptrdiff_t)(r * sh + py) - p->ph;
        if (iy < 0 || iy >= (ptrdiff_t)p->ih) {
          fill16(row, gw, fv);
          continue;
        }
        const uint8_t *src = x + c * ihw + (size_t)iy * p->iw + (ptrdiff_t)(cl * sw) - d;
        if (narrow && src + 16 * sw <= xend) { /* small planes: a row is three stores */
          qconv_v16 v;
          memcpy(&v, src, 16);
          if (sw == 2) {
            qconv_v16 hi;
            memcpy(&hi, src + 16, 16);
            v = __builtin_shufflevector(v, hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
          }
          memcpy(row, &fv, 16);
          memcpy(row + cl, &v, 16);
          memcpy(row + ch, &fv, 16);
          continue;
        }
        fill16(row, cl, fv);
        uint8_t *dst = row + cl;
        size_t t = 0;
        if (sw == 1) {
          for (; t < len && src + t + 16 <= xend; t += 16) memcpy(dst + t, src + t, 16);
        } else if (sw == 2) {
          for (; t < len && src + 2 * t + 32 <= xend; t += 16) {
            qconv_v16 lo, hi;
            memcpy(&lo, src + 2 * t, 16), memcpy(&hi, src + 2 * t + 16, 16);
            const qconv_v16 ev = __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            memcpy(dst + t, &ev, 16);
          }
        }
        for (; t < len; t++) dst[t] = src[t * sw];
        fill16(row + ch, gw - ch, fv);
      }
    }
    const size_t used = p->nph * p->plane; /* the gap after the planes: read past a plane, never kept */
    memset(buf + (c - c0) * p->chan_bytes + used, fill, p->chan_bytes - used);
  }
  memset(buf + (c1 - c0) * p->chan_bytes, fill, slack);
}

typedef struct qconv_planes_job {
  const qconv_params *p;
  const uint8_t *x;
  uint8_t *planes;
  size_t per_task; /* channels (a multiple of 4 with quad planes) */
  uint8_t *quads;  /* the quad planes, or NULL */
} qconv_planes_job;

/* Channels [task * per_task, +per_task): a channel's planes and gap are whole
 * lines, so tasks write disjoint lines; the last one writes the slack after. */
static void planes_task(void *varg, size_t task, size_t thread) {
  MRT_UNUSED(thread);
  const qconv_planes_job *jb = varg;
  const qconv_params *p = jb->p;
  const size_t c0 = task * jb->per_task, c1 = p->c_in - c0 < jb->per_task ? p->c_in : c0 + jb->per_task;
  if (c0 < c1)
    build_planes(p, jb->x, jb->planes + c0 * p->chan_bytes, c0, c1,
                 c1 == p->c_in ? p->planes_bytes - p->c_in * p->chan_bytes : 0);
#if defined(__x86_64__)
  if (QCONV_QUADS && jb->quads) /* this task's channels, four a quad, while they are in cache */
    for (size_t c = c0; c < c1; c += 4)
      mrt_qgemm_quads_interleave(jb->planes + c * p->chan_bytes, p->chan_bytes, c1 - c < 4 ? c1 - c : 4,
                                 p->chan_bytes, jb->quads + c * p->chan_bytes);
#endif
}

/* Padded-plane bytes a task builds at least: the caller alone below. */
#define QCONV_PLANES_TASK_BYTES ((size_t)1 << 15)

typedef struct qconv_dw_job {
  const qconv_params *p;
  const uint8_t *x;
  yq_t *y;
  char *scratch;
  size_t per_task;
} qconv_dw_job;

/* Depthwise channels [m0, m1) of one image. */
/* n bytes in 8-byte moves (the last one overlapping), never past dst + n */
static inline void copy_row(uint8_t *MRT_RESTRICT dst, const uint8_t *MRT_RESTRICT src, size_t n) {
  if (n < 8) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
    return;
  }
  for (size_t i = 0; i + 8 < n; i += 8) memcpy(dst + i, src + i, 8);
  memcpy(dst + n - 8, src + n - 8, 8);
}

static void dw_channels(const qconv_params *p, const uint8_t *x, uint8_t *MRT_RESTRICT planes, yq_t *y,
                        int32_t *MRT_RESTRICT acc, size_t m0, size_t m1) {
  const size_t gw = p->gw, oh = p->oh, ow = p->ow, ng = oh * gw, nb = p->dw_block;
  const size_t lanes = (nb * ng + 63) / 64 * 64 + 64;
  uint8_t *tmp = (uint8_t *)(acc + lanes); /* the requantised grids */
  memset(acc, 0, lanes * sizeof *acc);      /* lanes no tap loop writes are defined */
  for (size_t b0 = m0; b0 < m1; b0 += nb) {
    const size_t b1 = b0 + nb < m1 ? b0 + nb : m1;
    /* in channel order: a grid's vector overrun lands where the next grid is written */
    for (size_t m = b0; m < b1; m++) {
      /* the slack (read past the grid, never kept) once: later channels leave it */
      build_planes(p, x, planes, m, m + 1, m == m0 ? p->dw_planes - p->chan_bytes : 0);
      if (p->wq)
        mrt_qgemm_depthwise_q8(p->kern, ng, planes, p->offq, p->nquads, p->wq + m * p->nquads * 4, acc + (m - b0) * ng);
      else
        mrt_qgemm_depthwise(p->kern, ng, planes, MRT_T0_DTYPE == MRT_DTYPE_INT8, p->off, p->kpair,
                            p->wd + m * p->kpair * 2, acc + (m - b0) * ng);
    }
    if (nb > 1) { /* the block's grids in one pass, then each row's kept bytes */
      mrt_qgemm_requant_rows(p->kern, 1, (b1 - b0) * ng, acc, 0, p->bias_x + b0 * ng, p->scale_x + b0 * ng, 1, p->zy,
                             p->lo, p->hi, tmp, 0);
      for (size_t m = b0; m < b1; m++)
        for (size_t gy = 0; gy < oh; gy++)
          copy_row((uint8_t *)(y + (m * oh + gy) * ow), tmp + (m - b0) * ng + gy * gw, ow);
      continue;
    }
    yq_t *ym = y + b0 * oh * ow;
    /* the whole grid at once (one bias and scale), its rows' first ow bytes then moved */
    if (gw == ow) {
      mrt_qgemm_requant_rows(p->kern, 1, oh * ow, acc, 0, p->bias + b0, p->scale + b0, 0, p->zy, p->lo, p->hi, ym, 0);
      continue;
    }
    mrt_qgemm_requant_rows(p->kern, 1, ng, acc, 0, p->bias + b0, p->scale + b0, 0, p->zy, p->lo, p->hi, tmp, 0);
    for (size_t gy = 0; gy < oh; gy++) copy_row((uint8_t *)(ym + gy * ow), tmp + gy * gw, ow);
  }
}

static void dw_task(void *varg, size_t task, size_t thread) {
  const qconv_dw_job *jb = varg;
  const size_t m0 = task * jb->per_task, m1 = m0 + jb->per_task < jb->p->c_out ? m0 + jb->per_task : jb->p->c_out;
  char *mine = jb->scratch + thread * (jb->p->dw_planes + jb->p->acc_bytes);
  if (m0 < m1)
    dw_channels(jb->p, jb->x, (uint8_t *)mine, jb->y, (int32_t *)(mine + jb->p->dw_planes), m0, m1);
}

/* Depthwise work per task, in multiply-adds, below which it stays on one thread. */
#define QCONV_DW_TASK_MACS ((size_t)1 << 16)

void MRT_KERNEL(mrt_qlinearconv_run)(const mrt_node *node, void *scratch) {
  const qconv_params *p = node->params;
  const xq_t *x = node->inputs[0]->data;
  yq_t *y = node->outputs[0]->data;
  const size_t ohw = p->oh * p->ow, ihw = p->ih * p->iw;
  uint8_t *planes = scratch;
  char *rest = (char *)scratch + p->planes_bytes;
  for (size_t n = 0; n < p->batch; n++) {
    const uint8_t *xn = (const uint8_t *)(x + n * p->c_in * ihw);
    if (p->depthwise) {
      size_t tasks = mrt_pool_tasks(node->pool, p->c_out * ohw * p->kdim, QCONV_DW_TASK_MACS);
      if (tasks > p->c_out) tasks = p->c_out;
      qconv_dw_job job = {p, xn, y + n * p->c_out * ohw, scratch, (p->c_out + tasks - 1) / tasks};
      mrt_parallel_for(node->pool, tasks, dw_task, &job);
      continue;
    }
    if (!p->direct) {
      size_t tasks = mrt_pool_tasks(node->pool, p->c_in * p->chan_bytes, QCONV_PLANES_TASK_BYTES);
      if (tasks > p->c_in) tasks = p->c_in;
      qconv_planes_job job = {p, xn, planes, (p->c_in + tasks - 1) / tasks, NULL};
#if defined(__x86_64__)
      if (QCONV_QUADS && p->nq4) job.per_task = (job.per_task + 3) / 4 * 4, job.quads = planes + p->planes_bytes;
#endif
      mrt_parallel_for(node->pool, (p->c_in + job.per_task - 1) / job.per_task, planes_task, &job);
    }
#if defined(__x86_64__)
    if (QCONV_QUADS && p->nq4) {
      const mrt_qgemm_requant rq = {p->bias4, p->scale4, 1, p->zy, p->lo, p->hi, y + n * p->c_out * ohw, ohw, p->gw,
                                    p->ow};
      mrt_qgemm_conv_quads_t(node->pool, p->c_out, p->oh, p->ow, p->gw, p->nq4, p->wq4, planes + p->planes_bytes,
                             p->qoff4, &rq);
      continue;
    }
#endif
    for (size_t g = 0; g < p->group; g++) {
      const uint8_t *bg = p->direct ? xn + g * p->cg * ihw : planes + g * p->cg * p->chan_bytes;
      const mrt_qgemm_src a = {p->w + g * p->w_stride, NULL, 0, 0, MRT_T1_DTYPE == MRT_DTYPE_INT8, NULL, 0, NULL};
      const mrt_qgemm_src b = {NULL, bg, 0, 0, MRT_T0_DTYPE == MRT_DTYPE_INT8, &p->zx, 1, p->off};
      const mrt_qgemm_requant rq = {p->bias + g * p->mg, p->scale + g * p->mg, 0, p->zy, p->lo, p->hi,
                                    y + (n * p->c_out + g * p->mg) * ohw, ohw, p->gw, p->ow};
      mrt_qgemm_mt(node->pool, p->kern, p->mg, p->oh * p->gw, p->kdim, &a, &b, 0, &rq, NULL, 0, rest);
    }
  }
}

#endif
