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
 * The sum is the qgemm support unit's: prepare packs each group's constant
 * weights once (A = M/group x K, per-row zero points folded in); run writes the
 * group's K x (OH*OW) column matrix as bytes, padding with zx so a padded tap adds
 * 0 (a 1x1 stride-1 unpadded convolution reads x in place), multiplies, and
 * requantises the int32 result with the bias added. A depthwise convolution (one
 * input and one output channel per group) would be a GEMM of one row per channel,
 * all packing; it runs directly instead, over a zero-bordered int16 copy of the
 * plane holding x - zx, one tap at a time across each output row (the same exact
 * int32 sums).
 */
#include "qcommon.h"
#include "qgemm.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_QLinearConv)

typedef MRT_T0 xq_t;
typedef MRT_T1 wq_t;
typedef MRT_T2 yq_t;

typedef struct qconv_params {
  const mrt_qgemm_kernel *kern;
  size_t batch, c_in, c_out, group, mg, cg, kdim;
  size_t ih, iw, oh, ow, kh, kw, sh, sw, dh, dw;
  ptrdiff_t ph, pw;
  int32_t zx, zy, lo, hi;
  int direct;       /* 1x1, stride 1, no pads: x is the column matrix */
  int depthwise;    /* one input and one output channel per group: see dw_plane */
  size_t rh, rw;    /* depthwise: the padded plane's rows and columns */
  int16_t *wd;      /* depthwise: [c_out][kh * kw] w - zw */
  char *w;          /* per group, w_stride bytes apart: the weights packed for kern */
  size_t w_stride;
  size_t col_bytes, acc_bytes; /* scratch: column matrix, int32 result, then qgemm's */
  int32_t *bias;    /* [c_out] */
  float *scale;     /* [c_out]: sx * sw[m] / sy */
} qconv_params;

MRT_PREPARE_CODE
static int attr_list(const mrt_node *node, const char *name, size_t n, int64_t dflt, int64_t *dst) {
  const int64_t *v;
  const uint32_t c = mrt_attr_ints(node, name, &v);
  if (c && c != n) return 0;
  for (size_t i = 0; i < n; i++) dst[i] = c ? v[i] : dflt;
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
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "strides, dilations or pads have the wrong length");
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
  const size_t ohw = p->oh * p->ow;
  p->depthwise = p->cg == 1 && p->mg == 1 && p->kdim > 1;
  if (p->depthwise) {
    p->rh = (p->oh - 1) * p->sh + (p->kh - 1) * p->dh + 1;
    p->rw = (p->ow - 1) * p->sw + (p->kw - 1) * p->dw + 1;
    p->wd = mrt_ctx_alloc(ctx, p->c_out * p->kdim * sizeof *p->wd);
    if (!p->wd) return MRT_STATUS_OUT_OF_MEMORY;
    const wq_t *wv = w->data;
    for (size_t i = 0; i < p->c_out * p->kdim; i++) p->wd[i] = (int16_t)((int32_t)wv[i] - zw[i / p->kdim]);
    p->col_bytes = (p->rh * p->rw * sizeof(int16_t) + 63) / 64 * 64;
    p->acc_bytes = (ohw * sizeof(int32_t) + 63) / 64 * 64;
    mrt_ctx_request_scratch(ctx, p->col_bytes + p->acc_bytes);
    node->params = p;
    return MRT_STATUS_OK;
  }
  p->kern = mrt_qgemm_kernel_select();
  p->w_stride = (mrt_qgemm_packed_a_size(p->kern, p->mg, p->kdim) + 63) / 64 * 64;
  p->w = mrt_ctx_alloc(ctx, p->group * p->w_stride); /* 64-byte aligned */
  if (!p->w) return MRT_STATUS_OUT_OF_MEMORY;
  for (size_t g = 0; g < p->group; g++) {
    const mrt_qgemm_src src = {NULL, (const wq_t *)w->data + g * p->mg * p->kdim, p->kdim, 1,
                               MRT_T1_DTYPE == MRT_DTYPE_INT8, zw + g * p->mg, p->mg};
    mrt_qgemm_pack_a(p->kern, p->mg, p->kdim, &src, p->w + g * p->w_stride);
  }
  p->col_bytes = p->direct ? 0 : (p->kdim * ohw * sizeof(xq_t) + 63) / 64 * 64;
  p->acc_bytes = (p->mg * ohw * sizeof(int32_t) + 63) / 64 * 64;
  mrt_ctx_request_scratch(ctx, p->col_bytes + p->acc_bytes + mrt_qgemm_scratch_size(p->kern, p->mg, ohw, p->kdim, 1, 0));
  node->params = p;
  return MRT_STATUS_OK;
}

/* The K x (OH*OW) column matrix of one group: row (c, ky, kx) holds that tap of
 * channel c at every output pixel; outside the input, zx. */
static void im2col(const qconv_params *p, const xq_t *x, xq_t *MRT_RESTRICT col) {
  const size_t ohw = p->oh * p->ow;
  const xq_t fill = (xq_t)p->zx;
  for (size_t c = 0; c < p->cg; c++)
    for (size_t ky = 0; ky < p->kh; ky++)
      for (size_t kx = 0; kx < p->kw; kx++) {
        xq_t *dst = col + ((c * p->kh + ky) * p->kw + kx) * ohw;
        for (size_t oy = 0; oy < p->oh; oy++, dst += p->ow) {
          const ptrdiff_t iy = (ptrdiff_t)(oy * p->sh + ky * p->dh) - p->ph;
          if (iy < 0 || iy >= (ptrdiff_t)p->ih) {
            for (size_t ox = 0; ox < p->ow; ox++) dst[ox] = fill;
            continue;
          }
          const xq_t *src = x + (c * p->ih + (size_t)iy) * p->iw;
          /* ox in [ox0, ox1) reads inside the row: no test per pixel */
          const ptrdiff_t off = (ptrdiff_t)(kx * p->dw) - p->pw, sw = (ptrdiff_t)p->sw;
          const ptrdiff_t first = off < 0 ? (-off + sw - 1) / sw : 0;
          const ptrdiff_t last = (ptrdiff_t)p->iw - 1 - off; /* ox * sw <= last */
          size_t ox0 = (size_t)first, ox1 = last < 0 ? 0 : (size_t)(last / sw + 1);
          if (ox1 > p->ow) ox1 = p->ow;
          if (ox0 > ox1) ox0 = ox1;
          for (size_t ox = 0; ox < ox0; ox++) dst[ox] = fill;
          if (sw == 1)
            memcpy(dst + ox0, src + (ptrdiff_t)ox0 + off, (ox1 - ox0) * sizeof *dst);
          else
            for (size_t ox = ox0; ox < ox1; ox++) dst[ox] = src[(ptrdiff_t)ox * sw + off];
          for (size_t ox = ox1; ox < p->ow; ox++) dst[ox] = fill;
        }
      }
}

/* One depthwise channel: buf is the plane as x - zx inside a border of zeros
 * (a padded tap adds 0), acc the output plane's int32 sums. */
static void dw_plane(const qconv_params *p, const xq_t *x, const int16_t *w, int16_t *MRT_RESTRICT buf,
                     int32_t *MRT_RESTRICT acc) {
  const size_t rh = p->rh, rw = p->rw, oh = p->oh, ow = p->ow, sw = p->sw;
  for (size_t r = 0; r < rh; r++) {
    const ptrdiff_t iy = (ptrdiff_t)r - p->ph;
    int16_t *row = buf + r * rw;
    if (iy < 0 || iy >= (ptrdiff_t)p->ih) {
      memset(row, 0, rw * sizeof *row);
      continue;
    }
    const xq_t *src = x + (size_t)iy * p->iw;
    for (size_t c = 0; c < rw; c++) {
      const ptrdiff_t ix = (ptrdiff_t)c - p->pw;
      row[c] = ix >= 0 && ix < (ptrdiff_t)p->iw ? (int16_t)((int32_t)src[ix] - p->zx) : 0;
    }
  }
  for (size_t oy = 0; oy < oh; oy++) {
    int32_t *a = acc + oy * ow;
    for (size_t ox = 0; ox < ow; ox++) a[ox] = 0;
    for (size_t ky = 0; ky < p->kh; ky++)
      for (size_t kx = 0; kx < p->kw; kx++) {
        const int32_t wv = w[ky * p->kw + kx];
        const int16_t *in = buf + (oy * p->sh + ky * p->dh) * rw + kx * p->dw;
        if (sw == 1)
          for (size_t ox = 0; ox < ow; ox++) a[ox] += wv * in[ox];
        else
          for (size_t ox = 0; ox < ow; ox++) a[ox] += wv * in[ox * sw];
      }
  }
}

void MRT_KERNEL(mrt_qlinearconv_run)(const mrt_node *node, void *scratch) {
  const qconv_params *p = node->params;
  const xq_t *x = node->inputs[0]->data;
  yq_t *y = node->outputs[0]->data;
  if (p->depthwise) {
    int16_t *buf = scratch;
    int32_t *acc = (int32_t *)((char *)scratch + p->col_bytes);
    const size_t ohw = p->oh * p->ow, ihw = p->ih * p->iw;
    for (size_t n = 0; n < p->batch; n++)
      for (size_t m = 0; m < p->c_out; m++) {
        dw_plane(p, x + (n * p->c_in + m) * ihw, p->wd + m * p->kdim, buf, acc);
        const int32_t bias = p->bias[m];
        const float sc = p->scale[m];
        yq_t *ym = y + (n * p->c_out + m) * ohw;
        for (size_t j = 0; j < ohw; j++)
          ym[j] = (yq_t)mrt_q_requant((int32_t)((uint32_t)acc[j] + (uint32_t)bias), sc, p->zy, p->lo, p->hi);
      }
    return;
  }
  xq_t *col = scratch;
  int32_t *acc = (int32_t *)((char *)scratch + p->col_bytes);
  void *gs = (char *)acc + p->acc_bytes;
  const size_t ohw = p->oh * p->ow;
  const int32_t zx = p->zx;
  for (size_t n = 0; n < p->batch; n++)
    for (size_t g = 0; g < p->group; g++) {
      const xq_t *xg = x + (n * p->c_in + g * p->cg) * p->ih * p->iw;
      if (!p->direct) im2col(p, xg, col);
      const mrt_qgemm_src a = {p->w + g * p->w_stride, NULL, 0, 0, MRT_T1_DTYPE == MRT_DTYPE_INT8, NULL, 0};
      const mrt_qgemm_src b = {NULL, p->direct ? xg : col, ohw, 1, MRT_T0_DTYPE == MRT_DTYPE_INT8, &zx, 1};
      mrt_qgemm(p->kern, p->mg, ohw, p->kdim, &a, &b, 0, acc, ohw, gs);
      for (size_t i = 0; i < p->mg; i++) {
        const size_t m = g * p->mg + i;
        const int32_t bias = p->bias[m];
        const float sc = p->scale[m];
        const int32_t *am = acc + i * ohw;
        yq_t *ym = y + (n * p->c_out + m) * ohw;
        /* the bias added in wrapping int32, as the accumulation */
        for (size_t j = 0; j < ohw; j++)
          ym[j] = (yq_t)mrt_q_requant((int32_t)((uint32_t)am[j] + (uint32_t)bias), sc, p->zy, p->lo, p->hi);
      }
    }
}

#endif
