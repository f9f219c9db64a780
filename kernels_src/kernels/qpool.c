/*
 * com.microsoft QLinearAveragePool, uint8 and int8, over 1-3 spatial dims, NCHW or
 * channels_last (NHWC). Computed as onnxruntime does, so outputs agree exactly:
 *
 * - every input value dequantised to float, sx * (q - zx) (a 256-entry table);
 * - each window summed in float, in row-major order over the in-bounds taps
 *   (the order matters: float addition does not associate);
 * - divided by the count: the in-bounds taps, or with count_include_pad the whole
 *   kernel (onnxruntime counts the kernel, also where ceil_mode puts it past the
 *   end padding);
 * - quantised as v / sy + zy, rounded half to even, saturated.
 *
 * A kernel that covers the whole unpadded input is onnxruntime's global average
 * pool instead: the int32 sum - zx * size, times sx / (sy * size), rounded.
 *
 * NCHW planes are dequantised once into scratch, and a row's interior outputs
 * (window wholly inside the row) are summed side by side, one tap at a time
 * across the row: each sum still adds its taps in the same order, but the sums
 * are independent, so they vectorise instead of waiting on one add chain each.
 */
#include "qcommon.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_QLinearAveragePool)
typedef MRT_T0 q_t;

typedef struct qap_tap {
  int32_t pos, n; /* first in-bounds input position, taps inside the input */
} qap_tap;

typedef struct qap_params {
  size_t batch, channels;
  int64_t in[3], out[3];   /* spatial sizes, leading 1s for fewer than 3 dims */
  qap_tap *tap[3];
  int channels_last, global, include_pad;
  int64_t kw, sw, pw;      /* width: kernel, stride, leading pad */
  size_t ow0, ow1;         /* outputs [ow0, ow1) have their whole window inside the row */
  size_t buf_floats;       /* scratch (NCHW): one dequantised plane, then a row of sums */
  int32_t zy, lo, hi, bias;
  float sy, kernel_count, gscale;
  float deq[256];          /* dequantised value of each byte */
} qap_params;

MRT_PREPARE_CODE
static int64_t qap_div_up(int64_t n, int64_t d) { return n >= 0 ? (n + d - 1) / d : -((-n) / d); }

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_qlinearaveragepool_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 4, 5, 1, 1);
  if (st) return st;
  const mrt_tensor *x = mrt_in(node, 0), *y = node->outputs[0];
  if (!x) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "X is required");
  if ((st = mrt_check_dtype(ctx, node, x, MRT_T0_DTYPE)) || (st = mrt_check_dtype(ctx, node, y, MRT_T0_DTYPE))) return st;
  if (x->ndim < 3 || x->ndim > 5 || y->ndim != x->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "X must be [N, C, D1..Dk] with 1 <= k <= 3, got rank %u",
                         x->ndim);
  const uint32_t k = x->ndim - 2;
  const int cl = mrt_attr_int(node, "channels_last", 0) != 0;
  const uint32_t sp0 = cl ? 1 : 2, cax = cl ? x->ndim - 1 : 1; /* first spatial axis, channel axis */
  const int64_t *ks, *strides, *pads;
  const uint32_t nks = mrt_attr_ints(node, "kernel_shape", &ks), ns = mrt_attr_ints(node, "strides", &strides);
  const uint32_t np = mrt_attr_ints(node, "pads", &pads);
  if (nks != k || (ns && ns != k) || (np && np != 2 * k))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "kernel_shape (%u), strides (%u) and pads (%u) must have %u, %u and %u values", nks, ns, np,
                         k, k, 2 * k);
  const int upper = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_UPPER");
  const int lower = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_LOWER");
  const int valid = mrt_attr_string_is(node, "auto_pad", "NOTSET", "VALID");
  if (!upper && !lower && !valid && !mrt_attr_string_is(node, "auto_pad", "NOTSET", "NOTSET"))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "unknown auto_pad value");
  const int ceil_mode = mrt_attr_int(node, "ceil_mode", 0) != 0;
  if (y->dims[0] != x->dims[0] || y->dims[cax] != x->dims[cax])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "Y's batch and channels must be X's");
  qap_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  p->batch = (size_t)x->dims[0], p->channels = (size_t)x->dims[cax];
  p->channels_last = cl;
  p->include_pad = mrt_attr_int(node, "count_include_pad", 0) != 0;
  int global = 1;
  double kcount = 1;
  for (uint32_t a = 0; a < 3; a++) {
    const int real = a + k >= 3;
    const uint32_t j = real ? a + k - 3 : 0; /* attribute index */
    const int64_t in = real ? x->dims[sp0 + j] : 1, kk = real ? ks[j] : 1, s = real && ns ? strides[j] : 1;
    int64_t pb = real && np ? pads[j] : 0, pe = real && np ? pads[j + k] : 0;
    if (kk < 1 || s < 1 || pb < 0 || pe < 0 || kk > INT32_MAX || s > INT32_MAX || in > INT32_MAX ||
        pb > INT32_MAX || pe > INT32_MAX) /* bounded before they are added */
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "axis %u: kernel and stride must be 1 .. 2^31 and pads 0 .. 2^31", j);
    int64_t o;
    if (real && (upper || lower)) {
      o = qap_div_up(in, s);
      int64_t total = (o - 1) * s + kk - in;
      if (total < 0) total = 0;
      pb = upper ? total / 2 : total - total / 2;
      pe = total - pb;
    } else {
      if (valid) pb = pe = 0;
      const int64_t room = in + pb + pe - kk;
      if (room < 0)
        return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                             "axis %u: the kernel (%lld) is larger than the padded input (%lld)", j, (long long)kk,
                             (long long)(in + pb + pe));
      o = (ceil_mode ? qap_div_up(room, s) : room / s) + 1;
      if (ceil_mode && (o - 1) * s >= in + pb) o--; /* no window may start in the end padding */
    }
    if (pb >= kk || pe >= kk)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "axis %u: pads (%lld, %lld) must be smaller than the kernel (%lld)", j, (long long)pb,
                           (long long)pe, (long long)kk);
    if (real && y->dims[sp0 + j] != o)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "Y's spatial dim %u is %lld, the attributes give %lld", j, (long long)y->dims[sp0 + j],
                           (long long)o);
    global &= kk == in && pb == 0 && pe == 0;
    kcount *= (double)kk;
    p->in[a] = in, p->out[a] = o;
    if (a == 2) p->kw = kk, p->sw = s, p->pw = pb;
    qap_tap *t = mrt_ctx_alloc(ctx, (size_t)(o ? o : 1) * sizeof *t);
    if (!t) return MRT_STATUS_OUT_OF_MEMORY;
    for (int64_t i = 0; i < o; i++) {
      const int64_t start = i * s - pb, end = start + kk < in ? start + kk : in;
      t[i].pos = (int32_t)(start > 0 ? start : 0);
      t[i].n = (int32_t)(end - t[i].pos);
    }
    p->tap[a] = t;
  }
  if (kcount > (double)(1 << 24))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "kernels of more than 2^24 taps are not supported");
  p->kernel_count = (float)kcount;
  const float *sx, *sy;
  size_t n1;
  int32_t zx;
  if ((st = mrt_q_scale(ctx, node, 1, 1, &sx, &n1)) || (st = mrt_q_scale(ctx, node, 3, 1, &sy, &n1)) ||
      (st = mrt_q_zero_point(ctx, node, 2, MRT_T0_DTYPE, 1, &zx)) ||
      (st = mrt_q_zero_point(ctx, node, 4, MRT_T0_DTYPE, 1, &p->zy)))
    return st;
  p->sy = sy[0];
  p->lo = mrt_q_min(MRT_T0_DTYPE), p->hi = mrt_q_max(MRT_T0_DTYPE);
  for (int32_t q = p->lo; q <= p->hi; q++) p->deq[(uint8_t)(q_t)q] = sx[0] * (float)(q - zx);
  p->global = global;
  /* Interior outputs along W, whose window lies wholly inside the row: their sums
   * run across outputs, tap by tap (the same order of additions for each). */
  p->ow0 = p->ow1 = 0;
  for (int64_t i = 0; i < p->out[2]; i++)
    if (p->tap[2][i].n == p->kw && i * p->sw >= p->pw) {
      if (p->ow1 == p->ow0) p->ow0 = (size_t)i;
      p->ow1 = (size_t)i + 1;
    }
  if (!cl && !global) {
    const uint64_t floats = (uint64_t)(p->in[0] * p->in[1] * p->in[2]) + (uint64_t)p->out[2];
    if (floats > (uint64_t)(SIZE_MAX / sizeof(float)) || floats > (uint64_t)1 << 40)
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "a plane of %llu values is too large",
                           (unsigned long long)floats);
    p->buf_floats = (size_t)floats;
    mrt_ctx_request_scratch(ctx, p->buf_floats * sizeof(float));
  }
  if (global) {
    const int32_t size = (int32_t)kcount;
    p->bias = -zx * size;
    p->gscale = sx[0] / (sy[0] * (float)size);
    if (!(p->gscale >= 0x1.0p-32f && p->gscale < 256.0f)) /* onnxruntime's range for this path */
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                           "x_scale / (y_scale * kernel size) is %g, outside [2^-32, 256)", (double)p->gscale);
  }
  node->params = p;
  return MRT_STATUS_OK;
}

static inline q_t qap_quantize(const qap_params *p, float v) {
  v = v / p->sy + (float)p->zy;
  v = v > (float)p->lo ? v : (float)p->lo; /* NaN (inf - inf from huge scales) saturates low */
  v = v < (float)p->hi ? v : (float)p->hi;
  return (q_t)(int32_t)mrt_q_rint(v);
}

/* One NCHW plane: dequantised into buf, then each output row's sums in acc, the
 * interior outputs side by side (one tap at a time across the row: independent
 * sums that vectorise), the border ones alone; every sum adds its taps in the
 * row-major order onnxruntime does. */
static void qap_plane(const qap_params *p, const q_t *x, q_t *y, float *buf) {
  const size_t w = (size_t)p->in[2], hw = (size_t)p->in[1] * w, isz = (size_t)p->in[0] * hw;
  const size_t ow_n = (size_t)p->out[2], sw = (size_t)p->sw, kw = (size_t)p->kw;
  float *acc = buf + isz;
  for (size_t i = 0; i < isz; i++) buf[i] = p->deq[(uint8_t)x[i]];
  for (int64_t od = 0; od < p->out[0]; od++) {
    const qap_tap td = p->tap[0][od];
    for (int64_t oh = 0; oh < p->out[1]; oh++) {
      const qap_tap th = p->tap[1][oh];
      const float *base = buf + (size_t)td.pos * hw + (size_t)th.pos * w;
      for (size_t o = 0; o < ow_n; o++) acc[o] = 0.0f;
      if (p->ow1 > p->ow0) {
        const size_t n = p->ow1 - p->ow0;
        const float *start = base + p->ow0 * sw - (size_t)p->pw;
        float *a = acc + p->ow0;
        for (int32_t i = 0; i < td.n; i++)
          for (int32_t j = 0; j < th.n; j++) {
            const float *r = start + (size_t)i * hw + (size_t)j * w;
            for (size_t l = 0; l < kw; l++)
              if (sw == 1)
                for (size_t o = 0; o < n; o++) a[o] += r[o + l];
              else
                for (size_t o = 0; o < n; o++) a[o] += r[o * sw + l];
          }
      }
      for (size_t o = 0; o < ow_n; o++) {
        if (o == p->ow0 && p->ow1 > p->ow0) {
          o = p->ow1 - 1;
          continue;
        }
        const qap_tap tw = p->tap[2][o];
        float sum = 0.0f;
        for (int32_t i = 0; i < td.n; i++)
          for (int32_t j = 0; j < th.n; j++) {
            const float *r = base + (size_t)i * hw + (size_t)j * w + (size_t)tw.pos;
            for (int32_t l = 0; l < tw.n; l++) sum += r[l];
          }
        acc[o] = sum;
      }
      const float in_taps = (float)(td.n * th.n);
      for (size_t o = 0; o < ow_n; o++) {
        const float cnt = p->include_pad ? p->kernel_count : in_taps * (float)p->tap[2][o].n;
        *y++ = qap_quantize(p, acc[o] / cnt);
      }
    }
  }
}

void MRT_KERNEL(mrt_qlinearaveragepool_run)(const mrt_node *node, void *scratch) {
  const qap_params *p = node->params;
  const q_t *x = node->inputs[0]->data;
  q_t *y = node->outputs[0]->data;
  const size_t isz = (size_t)(p->in[0] * p->in[1] * p->in[2]), osz = (size_t)(p->out[0] * p->out[1] * p->out[2]);
  const size_t c_n = p->channels;
  /* Element (spatial s, channel c) of image b: NCHW at (b C + c) S + s, NHWC at (b S + s) C + c. */
  const size_t xs = p->channels_last ? c_n : 1, ys = xs;
  const size_t w = (size_t)p->in[2], hw = (size_t)p->in[1] * w;
  for (size_t b = 0; b < p->batch; b++)
    for (size_t c = 0; c < c_n; c++) {
      const q_t *xc = p->channels_last ? x + b * isz * c_n + c : x + (b * c_n + c) * isz;
      q_t *yc = p->channels_last ? y + b * osz * c_n + c : y + (b * c_n + c) * osz;
      if (p->global) {
        int32_t acc = p->bias;
        for (size_t i = 0; i < isz; i++) acc += xc[i * xs];
        yc[0] = (q_t)mrt_q_requant(acc, p->gscale, p->zy, p->lo, p->hi);
        continue;
      }
      if (!p->channels_last) {
        qap_plane(p, xc, yc, scratch);
        continue;
      }
      size_t at = 0;
      for (int64_t od = 0; od < p->out[0]; od++) {
        const qap_tap td = p->tap[0][od];
        for (int64_t oh = 0; oh < p->out[1]; oh++) {
          const qap_tap th = p->tap[1][oh];
          for (int64_t ow = 0; ow < p->out[2]; ow++, at++) {
            const qap_tap tw = p->tap[2][ow];
            float sum = 0.0f;
            for (int32_t i = 0; i < td.n; i++)
              for (int32_t j = 0; j < th.n; j++) {
                const q_t *r = xc + ((size_t)(td.pos + i) * hw + (size_t)(th.pos + j) * w + (size_t)tw.pos) * xs;
                for (int32_t l = 0; l < tw.n; l++) sum += p->deq[(uint8_t)r[(size_t)l * xs]];
              }
            const float cnt = p->include_pad ? p->kernel_count : (float)(td.n * th.n * tw.n);
            yc[at * ys] = qap_quantize(p, sum / cnt);
          }
        }
      }
    }
}
#endif
