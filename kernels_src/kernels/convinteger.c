/*
 * ConvInteger (x uint8/int8, w uint8/int8 -> int32), 1-D and 2-D, groups, strides,
 * dilations, pads / auto_pad, on the qgemm support unit:
 *   Y[n, m, p] = sum_{c, r} (X[n, c, p*s + r*d - pad] - x_zero_point) * (W[m, c, r] - w_zero_point[m])
 * Per image and group, im2col writes the K x (OH*OW) columns as bytes, padding
 * with x_zero_point (so a padded tap adds 0, as onnxruntime's), then
 * Y = W (packed once at prepare, per-row zero points) x columns. A 1x1 stride-1
 * unpadded convolution reads x in place. One object serves every signature.
 */
#include "kcommon.h"
#include "qgemm.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_ConvInteger)

typedef struct mrt_convi_params {
  const mrt_qgemm_kernel *kern;
  size_t n, c, h, w, m, group, kh, kw, oh, ow;
  size_t sh, sw, dh, dw, ph, pw; /* strides, dilations, top/left pads */
  size_t cg, mg, kdim;           /* channels and filters per group, K = cg*kh*kw */
  int direct;                    /* 1x1, stride 1, no pad: x is the column matrix */
  void *packed_w;                /* per group, packed_w_stride bytes apart; NULL: pack per run */
  size_t packed_w_stride;
  size_t col_bytes, zero_bytes;
} mrt_convi_params;

static int mrt_convi_8bit(const mrt_tensor *t) { return t->dtype == MRT_DTYPE_UINT8 || t->dtype == MRT_DTYPE_INT8; }

static int32_t mrt_convi_at(const mrt_tensor *t, size_t i) {
  return t->dtype == MRT_DTYPE_INT8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_convinteger_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 4, 1, 1);
  if (st != MRT_STATUS_OK) return st;
  const mrt_tensor *x = node->inputs[0], *w = node->inputs[1], *y = node->outputs[0];
  const mrt_tensor *zx = mrt_in(node, 2), *zw = mrt_in(node, 3);
  if (!x || !w || !y) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "x, w and y are required");
  if (!mrt_convi_8bit(x) || !mrt_convi_8bit(w))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "x and w must be uint8 or int8");
  if ((st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_INT32)) != MRT_STATUS_OK) return st;
  if (zx && (st = mrt_check_dtype(ctx, node, zx, x->dtype)) != MRT_STATUS_OK) return st;
  if (zw && (st = mrt_check_dtype(ctx, node, zw, w->dtype)) != MRT_STATUS_OK) return st;
  if (x->ndim != 3 && x->ndim != 4)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "only 1-D and 2-D ConvInteger (x of rank %u)", x->ndim);
  if (w->ndim != x->ndim || y->ndim != x->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "x, w and y must have the same rank");
  if (zx && zx->count != 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "x_zero_point must be one value");
  mrt_convi_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  const int two = x->ndim == 4;
  p->n = (size_t)x->dims[0];
  p->c = (size_t)x->dims[1];
  p->h = two ? (size_t)x->dims[2] : 1;
  p->w = (size_t)x->dims[x->ndim - 1];
  p->m = (size_t)w->dims[0];
  p->kh = two ? (size_t)w->dims[2] : 1;
  p->kw = (size_t)w->dims[w->ndim - 1];
  p->group = (size_t)mrt_attr_int(node, "group", 1);
  if (p->group < 1 || p->c % p->group || p->m % p->group || (size_t)w->dims[1] * p->group != p->c)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "channels (%zu), filters (%zu) and group (%zu) disagree",
                         p->c, p->m, p->group);
  if (zw && zw->count != 1 && zw->count != p->m)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "w_zero_point: one value or one per filter");
  const int64_t *v;
  size_t s[2] = {1, 1}, d[2] = {1, 1}, pb[2] = {0, 0}, pe[2] = {0, 0};
  const uint32_t nsp = two ? 2 : 1;
  if (mrt_attr_ints(node, "strides", &v) == nsp)
    for (uint32_t i = 0; i < nsp; ++i) s[2 - nsp + i] = (size_t)v[i];
  if (mrt_attr_ints(node, "dilations", &v) == nsp)
    for (uint32_t i = 0; i < nsp; ++i) d[2 - nsp + i] = (size_t)v[i];
  const size_t in[2] = {p->h, p->w}, kk[2] = {p->kh, p->kw};
  if (mrt_attr_string_is(node, "auto_pad", "NOTSET", "NOTSET")) {
    if (mrt_attr_ints(node, "pads", &v) == 2 * nsp)
      for (uint32_t i = 0; i < nsp; ++i) {
        pb[2 - nsp + i] = (size_t)v[i];
        pe[2 - nsp + i] = (size_t)v[nsp + i];
      }
  } else if (!mrt_attr_string_is(node, "auto_pad", "NOTSET", "VALID")) {
    const int lower = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_LOWER");
    for (int i = 2 - (int)nsp; i < 2; ++i) {
      const size_t out = (in[i] + s[i] - 1) / s[i], span = (kk[i] - 1) * d[i] + 1;
      const size_t need = (out - 1) * s[i] + span, tot = need > in[i] ? need - in[i] : 0;
      pb[i] = lower ? tot - tot / 2 : tot / 2;
      pe[i] = tot - pb[i];
    }
  }
  size_t o[2];
  for (int i = 0; i < 2; ++i) {
    const size_t span = (kk[i] - 1) * d[i] + 1;
    if (s[i] < 1 || d[i] < 1 || in[i] + pb[i] + pe[i] < span)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "kernel larger than the padded input");
    o[i] = (in[i] + pb[i] + pe[i] - span) / s[i] + 1;
  }
  if ((size_t)y->dims[0] != p->n || (size_t)y->dims[1] != p->m || (two && (size_t)y->dims[2] != o[0]) ||
      (size_t)y->dims[y->ndim - 1] != o[1])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "y's shape does not match the convolution");
  p->sh = s[0], p->sw = s[1], p->dh = d[0], p->dw = d[1], p->ph = pb[0], p->pw = pb[1], p->oh = o[0], p->ow = o[1];
  p->cg = p->c / p->group;
  p->mg = p->m / p->group;
  p->kdim = p->cg * p->kh * p->kw;
  p->direct = p->kh == 1 && p->kw == 1 && s[0] == 1 && s[1] == 1 && !pb[0] && !pb[1] && !pe[0] && !pe[1];
  p->kern = mrt_qgemm_kernel_select_k(p->kdim);
  const size_t ohw = p->oh * p->ow;
  p->col_bytes = p->direct ? 0 : (p->kdim * ohw + 63) / 64 * 64;
  p->zero_bytes = ((p->m + 1) * sizeof(int32_t) + 63) / 64 * 64;
  const int w_const = w->is_constant && w->data && (!zw || (zw->is_constant && zw->data));
  if (w_const) {
    p->packed_w_stride = (mrt_qgemm_packed_a_size(p->kern, p->mg, p->kdim) + 63) / 64 * 64;
    char *buf = mrt_ctx_alloc(ctx, p->group * p->packed_w_stride + 64);
    int32_t *zeros = mrt_ctx_alloc(ctx, p->m * sizeof(int32_t));
    if (!buf || !zeros) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
    p->packed_w = (void *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    for (size_t i = 0; zw && i < p->m; ++i) zeros[i] = mrt_convi_at(zw, zw->count == 1 ? 0 : i);
    for (size_t g = 0; g < p->group; ++g) {
      const mrt_qgemm_src src = {NULL, (const uint8_t *)w->data + g * p->mg * p->kdim, p->kdim, 1,
                                 w->dtype == MRT_DTYPE_INT8, zw ? zeros + g * p->mg : NULL, zw ? p->mg : 0};
      mrt_qgemm_pack_a(p->kern, p->mg, p->kdim, &src, (char *)p->packed_w + g * p->packed_w_stride);
    }
  }
  mrt_ctx_request_scratch(ctx, p->col_bytes + p->zero_bytes +
                                   mrt_qgemm_scratch_size(p->kern, p->mg, ohw, p->kdim, w_const, 0));
  node->params = p;
  return MRT_STATUS_OK;
}

/* The K x (OH*OW) column matrix of one image's group: row (c, r, q) holds the tap
 * (r, q) of channel c at every output position; outside the input, the zero point. */
static void mrt_convi_im2col(const mrt_convi_params *p, const uint8_t *x, uint8_t fill, uint8_t *MRT_RESTRICT col) {
  const size_t ohw = p->oh * p->ow;
  for (size_t c = 0; c < p->cg; ++c)
    for (size_t r = 0; r < p->kh; ++r)
      for (size_t q = 0; q < p->kw; ++q) {
        uint8_t *dst = col + ((c * p->kh + r) * p->kw + q) * ohw;
        for (size_t oy = 0; oy < p->oh; ++oy) {
          const size_t iy = oy * p->sh + r * p->dh; /* + ph: in padded coordinates */
          uint8_t *row = dst + oy * p->ow;
          if (iy < p->ph || iy - p->ph >= p->h) {
            memset(row, fill, p->ow);
            continue;
          }
          const uint8_t *src = x + (c * p->h + (iy - p->ph)) * p->w;
          for (size_t ox = 0; ox < p->ow; ++ox) {
            const size_t ix = ox * p->sw + q * p->dw;
            row[ox] = (ix < p->pw || ix - p->pw >= p->w) ? fill : src[ix - p->pw];
          }
        }
      }
}

void MRT_KERNEL(mrt_convinteger_run)(const mrt_node *node, void *scratch) {
  const mrt_convi_params *p = node->params;
  const mrt_tensor *x = node->inputs[0], *w = node->inputs[1];
  const mrt_tensor *zx = mrt_in(node, 2), *zw = mrt_in(node, 3);
  int32_t *y = node->outputs[0]->data;
  uint8_t *col = scratch;
  int32_t *zeros = (int32_t *)((char *)scratch + p->col_bytes); /* [0]: x's, then w's per filter */
  void *gs = (char *)zeros + p->zero_bytes;
  const uint8_t fill = zx ? ((const uint8_t *)zx->data)[0] : 0;
  zeros[0] = zx ? mrt_convi_at(zx, 0) : 0;
  if (zw && !p->packed_w)
    for (size_t i = 0; i < p->m; ++i) zeros[1 + i] = mrt_convi_at(zw, zw->count == 1 ? 0 : i);
  const size_t ohw = p->oh * p->ow, hw = p->h * p->w;
  for (size_t n = 0; n < p->n; ++n)
    for (size_t g = 0; g < p->group; ++g) {
      const uint8_t *xg = (const uint8_t *)x->data + (n * p->c + g * p->cg) * hw;
      if (!p->direct) mrt_convi_im2col(p, xg, fill, col);
      mrt_qgemm_src a = {NULL, (const uint8_t *)w->data + g * p->mg * p->kdim, p->kdim, 1,
                         w->dtype == MRT_DTYPE_INT8, zw ? zeros + 1 + g * p->mg : NULL, zw ? p->mg : 0};
      if (p->packed_w) a.packed = (const char *)p->packed_w + g * p->packed_w_stride;
      const mrt_qgemm_src b = {NULL, p->direct ? xg : col, ohw, 1, x->dtype == MRT_DTYPE_INT8, zeros, 1};
      mrt_qgemm_mt(node->pool, p->kern, p->mg, ohw, p->kdim, &a, &b, 0, NULL, y + (n * p->m + g * p->mg) * ohw, ohw, gs);
    }
}

#endif
