/*
 * Pad, every element type: constant, edge, reflect and wrap modes, negative
 * pads (crops) included. Pads come from attributes (opset < 11) or a constant
 * input (opset 11+, with optional axes from 18). Not a hot op: rows of the last
 * dim are memcpy'd, everything else is index mapping. Only the constant's bits
 * depend on the type, so there is one object per element size (registry
 * `instantiate: size`), T the unsigned type of that size.
 */
#include "kcommon.h"

#if defined(MRT_OP_Pad)

typedef MRT_T0 T;

enum { PAD_CONSTANT, PAD_EDGE, PAD_REFLECT, PAD_WRAP };

typedef struct pad_params {
  uint32_t ndim, mode;
  /* Negative pads crop first (as onnxruntime): per axis the padded source is
   * input[lo, lo + n), and pb >= 0 positions of padding go before it. */
  int64_t in[MRT_MAX_DIMS], out[MRT_MAX_DIMS], lo[MRT_MAX_DIMS], n[MRT_MAX_DIMS], pb[MRT_MAX_DIMS];
  T value;                   /* the constant's bits */
  const mrt_tensor *value_t; /* non-constant constant_value, read at run */
} pad_params;

/* Input index for padded index i of an axis of n elements; -1 means "the constant". */
static int64_t pad_map(int64_t i, int64_t n, uint32_t mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
  case PAD_EDGE:
    return i < 0 ? 0 : n - 1;
  case PAD_REFLECT: {
    if (n == 1) return 0;
    const int64_t period = 2 * (n - 1);
    i %= period;
    if (i < 0) i += period;
    return i < n ? i : period - i;
  }
  case PAD_WRAP:
    i %= n;
    return i < 0 ? i + n : i;
  default:
    return -1;
  }
}

/* The `value` attribute (opset < 11) is a float; Pad-2 takes float types only,
 * so an object's element size says which one. */
MRT_PREPARE_CODE
static T pad_value_bits(float f) {
  T v = 0;
#if defined(MRT_T0_IS_uint32)
  memcpy(&v, &f, sizeof v);
#elif defined(MRT_T0_IS_uint64)
  const double d = f;
  memcpy(&v, &d, sizeof v);
#elif defined(MRT_T0_IS_uint16)
  /* float32 -> float16, rounding to nearest even. */
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  const uint32_t sign = b >> 16 & 0x8000u, m = b & 0x7fffffu;
  const int32_t e = (int32_t)(b >> 23 & 0xffu) - 127 + 15;
  if ((b >> 23 & 0xffu) == 0xffu) return (T)(sign | 0x7c00u | (m ? 0x200u : 0u));
  if (e >= 31) return (T)(sign | 0x7c00u);
  if (e < -10) return (T)sign;
  const uint32_t mm = e > 0 ? m : m | 0x800000u, shift = e > 0 ? 13u : (uint32_t)(14 - e);
  uint32_t h = (e > 0 ? (uint32_t)e << 10 : 0u) | mm >> shift;
  const uint32_t rem = mm & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) h++;
  v = (T)(sign | h);
#else
  MRT_UNUSED(f);
#endif
  return v;
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_pad_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 4, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  /* Whichever type of this object's size input 0 has, output 0 must have it too. */
  if ((st = mrt_check_dtype(ctx, node, y, x->dtype))) return st;
  const uint32_t r = x->ndim;
  pad_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  static const char *const modes[] = {"constant", "edge", "reflect", "wrap"};
  p->mode = 4;
  for (uint32_t m = 0; m < 4; m++)
    if (mrt_attr_string_is(node, "mode", "constant", modes[m])) p->mode = m;
  if (p->mode == 4 || (p->mode == PAD_WRAP && node->opset < 19))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "unknown pad mode");

  int64_t pads[2 * MRT_MAX_DIMS] = {0};
  if (node->opset < 11) {
    const int64_t *v;
    uint32_t n = mrt_attr_ints(node, node->opset < 2 ? "paddings" : "pads", &v);
    if (n != 2 * r)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "pads needs %u values, has %u",
                           2 * r, n);
    for (uint32_t i = 0; i < n; i++) pads[i] = v[i];
    p->value = pad_value_bits(mrt_attr_float(node, "value", 0.0f));
  } else {
    const mrt_tensor *pt = mrt_in(node, 1), *vt = mrt_in(node, 2), *at = mrt_in(node, 3);
    if (!mrt_const_ints_ok(pt) || (at && !mrt_const_ints_ok(at)))
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                           "inputs pads and axes must be build-time integer constants");
    const uint32_t na = at ? (uint32_t)at->count : r;
    if (na > r || pt->count != 2 * (size_t)na)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "pads has %zu values, %u expected", pt->count, 2 * na);
    for (uint32_t i = 0; i < na; i++) {
      const int64_t a = at ? mrt_norm_axis(mrt_int_at(at, i), r) : (int64_t)i;
      if (a < 0) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis out of range");
      pads[a] = mrt_int_at(pt, i), pads[a + r] = mrt_int_at(pt, i + na);
    }
    if (vt) {
      if ((st = mrt_check_dtype(ctx, node, vt, x->dtype))) return st;
      if (vt->count != 1)
        return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "constant_value must be a scalar");
      if (vt->is_constant && vt->data)
        memcpy(&p->value, vt->data, sizeof p->value);
      else
        p->value_t = vt;
    }
  }
  if (y->ndim != r)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output rank must equal input rank");
  for (uint32_t d = 0; d < r; d++) {
    const int64_t o = x->dims[d] + pads[d] + pads[d + r];
    if (y->dims[d] != o)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "output dim %u is %lld, pads give %lld", d, (long long)y->dims[d],
                           (long long)o);
    const int64_t lo = pads[d] < 0 ? -pads[d] : 0, hi = pads[d + r] < 0 ? -pads[d + r] : 0;
    const int64_t len = x->dims[d] - lo - hi;
    if (o < 0 || (p->mode != PAD_CONSTANT && len <= 0 && o > 0))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "axis %u: pads leave nothing to pad from", d);
    p->in[d] = x->dims[d], p->out[d] = o, p->lo[d] = lo, p->n[d] = len > 0 ? len : 0;
    p->pb[d] = pads[d] > 0 ? pads[d] : 0;
  }
  if (r == 0) p->in[0] = p->out[0] = p->n[0] = 1;
  p->ndim = r ? r : 1;
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_pad_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const pad_params *p = node->params;
  const T *x = node->inputs[0]->data;
  T *y = node->outputs[0]->data;
  const T value = p->value_t ? *(const T *)p->value_t->data : p->value;
  const uint32_t k = p->ndim;
  const int64_t win = p->n[k - 1], wout = p->out[k - 1], pb = p->pb[k - 1];
  if (node->outputs[0]->count == 0) return;
  /* Output positions [m0, m1) of the last dim read the input directly. */
  int64_t m0 = pb < wout ? pb : wout, m1 = pb + win < wout ? pb + win : wout;
  if (m1 < m0) m1 = m0;
  int64_t idx[MRT_MAX_DIMS] = {0};
  for (;;) {
    /* Map the outer indices; a constant-mode miss makes the whole row the value. */
    ptrdiff_t off = 0;
    int64_t s = 1;
    int hit = 1;
    for (uint32_t d = k - 1; d-- > 0;) {
      s *= p->in[d + 1];
      const int64_t i = pad_map(idx[d] - p->pb[d], p->n[d], p->mode);
      if (i < 0) hit = 0;
      off += (ptrdiff_t)((i + p->lo[d]) * s);
    }
    if (!hit) {
      for (int64_t o = 0; o < wout; o++) y[o] = value;
    } else {
      const T *row = x + off + p->lo[k - 1];
      for (int64_t o = 0; o < m0; o++) {
        const int64_t i = pad_map(o - pb, win, p->mode);
        y[o] = i < 0 ? value : row[i];
      }
      if (m1 > m0) memcpy(y + m0, row + (m0 - pb), (size_t)(m1 - m0) * sizeof *y);
      for (int64_t o = m1; o < wout; o++) {
        const int64_t i = pad_map(o - pb, win, p->mode);
        y[o] = i < 0 ? value : row[i];
      }
    }
    y += wout;
    uint32_t d = k - 1;
    for (;;) {
      if (d == 0) return;
      d--;
      if (++idx[d] < p->out[d]) break;
      idx[d] = 0;
    }
  }
}

#endif
