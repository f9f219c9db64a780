/*
 * Resize (opsets 10-19), float32, any rank.
 *
 * Every mode ONNX defines is separable, so an N-D resize is a sequence of 1-D
 * resizes, one per resized axis. Each axis gets a table: for every output
 * position, `ntaps` input positions (already clamped to the input, as ONNX's
 * edge padding asks) and their weights. Nearest is one tap, linear two, cubic
 * four; antialiased downsampling widens linear and cubic to cover 1/scale
 * input pixels. tf_crop_and_resize positions outside the input have index -1
 * and take extrapolation_value.
 *
 * The tables are computed once at prepare from constant scales / sizes / roi.
 * A graph feeding scales or roi at run time (the output shape is still fixed
 * at build time) gets them rebuilt in scratch on every run: a few hundred
 * entries, no extra code path in the passes.
 *
 * Passes run on the shrinking axes first, ping-ponging between two scratch
 * buffers. A pass over an inner axis (rows of `inner` contiguous floats) is a
 * weighted sum of whole rows and vectorises; a pass over the last axis is a
 * gather with 1, 2 or n taps. Coordinates and weights are computed in double,
 * as ONNX's reference does.
 */
#include "kcommon.h"

#if defined(MRT_TYPE_float32) && defined(MRT_OP_Resize)

enum { RS_NEAREST, RS_LINEAR, RS_CUBIC };
enum {
  RS_HALF_PIXEL,
  RS_HALF_PIXEL_SYMMETRIC,
  RS_PYTORCH_HALF_PIXEL,
  RS_ALIGN_CORNERS,
  RS_ASYMMETRIC,
  RS_TF_HALF_PIXEL_FOR_NEAREST,
  RS_TF_CROP_AND_RESIZE,
};
/* RS_SIMPLE: Resize-10, which has no nearest_mode: floor when upsampling,
 * ceil when downsampling, as onnxruntime implements it. */
enum { RS_ROUND_PREFER_FLOOR, RS_ROUND_PREFER_CEIL, RS_FLOOR, RS_CEIL, RS_SIMPLE };

typedef struct rs_table {
  uint32_t ntaps;
  int32_t *idx; /* out * ntaps; idx[o * ntaps] < 0: output o is extrapolated */
  float *w;
} rs_table;

typedef struct rs_pass {
  uint32_t axis;
  uint32_t ntaps_max; /* room reserved per output position */
  size_t outer, in, out, inner;
  double scale;       /* constant scale (or the one derived from sizes) */
} rs_pass;

typedef struct rs_params {
  int mode, ctm, nearest, antialias, exclude_outside;
  double cubic_a;
  float extrapolation;
  uint32_t ndim, npasses;
  rs_pass pass[MRT_MAX_DIMS];
  double roi_lo[MRT_MAX_DIMS], roi_hi[MRT_MAX_DIMS]; /* per tensor axis */
  int scale_axis[MRT_MAX_DIMS]; /* index into the scales input for each axis, -1 if not resized */
  rs_table table[MRT_MAX_DIMS]; /* per pass, when built at prepare */
  const mrt_tensor *dyn_scales, *dyn_roi; /* non-constant inputs: tables built at run */
  uint32_t roi_naxes;  /* roi holds 2 * roi_naxes values (axes attribute or rank) */
  size_t buf_floats;   /* each of the two ping-pong buffers */
  size_t tables_off;   /* bytes: start of the run-time tables in scratch */
} rs_params;

/* Clamped to +-2^62 (NaN to the low end) so every integer conversion after it is
 * defined, whatever coordinates run-time scales or roi produce. */
static double rs_floor(double x) {
  if (!(x > -0x1p62)) return -0x1p62;
  if (x > 0x1p62) return 0x1p62;
  const double t = (double)(int64_t)x;
  return t > x ? t - 1.0 : t;
}
static double rs_abs(double x) { return x < 0 ? -x : x; }

static double rs_cubic(double a, double x) {
  x = rs_abs(x);
  if (x <= 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
  return 0.0;
}

/* Taps per output position; antialiased downsampling widens the filter to 1/scale. */
static uint32_t rs_ntaps(const rs_params *p, double scale, int32_t *start) {
  if (p->mode == RS_NEAREST) {
    *start = 0;
    return 1;
  }
  const double support = p->mode == RS_LINEAR ? 1.0 : 2.0;
  if (p->antialias && scale < 1.0) {
    const double f = rs_floor(-support / scale);
    *start = (int32_t)(f < -64.0 ? -64.0 : f) + 1; /* more than 64 taps is refused at prepare */
  } else {
    *start = 1 - (int32_t)support;
  }
  return (uint32_t)(2 - 2 * *start);
}

/* The source coordinate of output position o along one axis. */
static double rs_coord(const rs_params *p, double o, double in, double out_int, double scale,
                       double roi_lo, double roi_hi) {
  const double out_f = scale * in; /* ONNX's reference uses the unrounded size */
  switch (p->ctm) {
  case RS_ALIGN_CORNERS:
    return out_f == 1.0 ? 0.0 : o * (in - 1.0) / (out_f - 1.0);
  case RS_ASYMMETRIC:
    return o / scale;
  case RS_TF_HALF_PIXEL_FOR_NEAREST:
    return (o + 0.5) / scale;
  case RS_TF_CROP_AND_RESIZE:
    return (out_f == 1.0 ? (roi_hi - roi_lo) * (in - 1.0) / 2.0
                         : o * (roi_hi - roi_lo) * (in - 1.0) / (out_f - 1.0)) +
           roi_lo * (in - 1.0);
  case RS_PYTORCH_HALF_PIXEL:
    return out_f == 1.0 ? -0.5 : (o + 0.5) / scale - 0.5;
  case RS_HALF_PIXEL_SYMMETRIC: {
    const double offset = in / 2.0 * (1.0 - out_int / out_f);
    return offset + (o + 0.5) / scale - 0.5;
  }
  default:
    return (o + 0.5) / scale - 0.5;
  }
}

static void rs_build(const rs_params *p, const rs_pass *ps, double scale, double roi_lo,
                     double roi_hi, rs_table *t) {
  int32_t start;
  uint32_t n = rs_ntaps(p, scale, &start);
  if (n > ps->ntaps_max) { /* run-time scales below the output size's: the tables hold no more */
    n = ps->ntaps_max;
    start = 1 - (int32_t)(n / 2);
  }
  const double in = (double)ps->in, sw = p->antialias && scale < 1.0 ? scale : 1.0;
  const int32_t last = (int32_t)ps->in - 1;
  t->ntaps = n;
  for (size_t o = 0; o < ps->out; o++) {
    int32_t *idx = t->idx + o * n;
    float *w = t->w + o * n;
    const double x = rs_coord(p, (double)o, in, (double)ps->out, scale, roi_lo, roi_hi);
    if (p->ctm == RS_TF_CROP_AND_RESIZE && (x < 0.0 || x > in - 1.0)) {
      for (uint32_t j = 0; j < n; j++) idx[j] = -1, w[j] = 0.0f;
      continue;
    }
    double f = rs_floor(x), r = x - f;
    if (p->mode == RS_NEAREST) {
      int64_t i;
      if (r == 0.0) {
        i = (int64_t)f;
      } else {
        int up;
        switch (p->nearest) {
        case RS_ROUND_PREFER_CEIL: up = r >= 0.5; break;
        case RS_FLOOR: up = 0; break;
        case RS_CEIL: up = 1; break;
        case RS_SIMPLE: up = scale < 1.0; break;
        default: up = r > 0.5; break;
        }
        i = (int64_t)f + up;
      }
      idx[0] = (int32_t)(i < 0 ? 0 : i > last ? last : i);
      w[0] = 1.0f;
      continue;
    }
    /* The window prefers the pixel left of x: an integer x has ratio 1. */
    if (r == 0.0) f -= 1.0, r = 1.0;
    double c[64], sum = 0.0;
    for (uint32_t j = 0; j < n; j++) {
      const double d = (double)(start + (int32_t)j) - r;
      double v;
      if (p->mode == RS_LINEAR) {
        v = 1.0 - rs_abs(d * sw);
        v = v < 0.0 ? 0.0 : v;
      } else {
        v = rs_cubic(p->cubic_a, d * sw);
      }
      const int64_t i = (int64_t)f + start + (int64_t)j;
      if (p->exclude_outside && (i < 0 || i > last)) v = 0.0;
      c[j] = v;
      sum += v;
    }
    /* Antialiased filters and exclude_outside are normalised to sum 1. */
    const int norm = (p->antialias && scale < 1.0) || p->exclude_outside;
    if (sum == 0.0) sum = 1.0;
    for (uint32_t j = 0; j < n; j++) {
      const int64_t i = (int64_t)f + start + (int64_t)j;
      idx[j] = (int32_t)(i < 0 ? 0 : i > last ? last : i);
      w[j] = (float)(norm ? c[j] / sum : c[j]);
    }
  }
}

/* Lays the tables of every pass out in `mem` (n floats + n ints per position). */
static void rs_layout(const rs_params *p, rs_table *t, char *mem) {
  for (uint32_t k = 0; k < p->npasses; k++) {
    const size_t n = p->pass[k].out * p->pass[k].ntaps_max;
    t[k].idx = (int32_t *)mem;
    t[k].w = (float *)(mem + n * sizeof(int32_t));
    mem += n * (sizeof(int32_t) + sizeof(float));
  }
}

static size_t rs_tables_bytes(const rs_params *p) {
  size_t b = 0;
  for (uint32_t k = 0; k < p->npasses; k++)
    b += p->pass[k].out * p->pass[k].ntaps_max * (sizeof(int32_t) + sizeof(float));
  return b;
}

static void rs_build_all(const rs_params *p, rs_table *t) {
  const float *sc = p->dyn_scales ? (const float *)p->dyn_scales->data : NULL;
  const float *roi = p->dyn_roi ? (const float *)p->dyn_roi->data : NULL;
  for (uint32_t k = 0; k < p->npasses; k++) {
    const rs_pass *ps = &p->pass[k];
    double scale = ps->scale, lo = p->roi_lo[ps->axis], hi = p->roi_hi[ps->axis];
    if (sc) scale = (double)sc[p->scale_axis[ps->axis]];
    if (!(scale > 0.0)) scale = ps->in ? (double)ps->out / (double)ps->in : 1.0; /* as prepare bounded it */
    if (roi) {
      const int a = p->scale_axis[ps->axis];
      lo = (double)roi[a], hi = (double)roi[p->roi_naxes + (uint32_t)a];
    }
    rs_build(p, ps, scale, lo, hi, &t[k]);
  }
}

/* y[o, j, i] = sum_t w[j][t] * x[o, idx[j][t], i] */
static void rs_run_pass(const rs_pass *ps, const rs_table *t, float ext, const float *restrict x,
                        float *restrict y) {
  const size_t in = ps->in, out = ps->out, inner = ps->inner;
  const uint32_t n = t->ntaps;
  for (size_t o = 0; o < ps->outer; o++) {
    const float *xs = x + o * in * inner;
    float *ys = y + o * out * inner;
    if (inner == 1) {
      if (n == 1) {
        for (size_t j = 0; j < out; j++) {
          const int32_t i = t->idx[j];
          ys[j] = i < 0 ? ext : xs[i];
        }
      } else if (n == 2) {
        for (size_t j = 0; j < out; j++) {
          const int32_t *id = t->idx + 2 * j;
          const float *w = t->w + 2 * j;
          ys[j] = id[0] < 0 ? ext : w[0] * xs[id[0]] + w[1] * xs[id[1]];
        }
      } else {
        for (size_t j = 0; j < out; j++) {
          const int32_t *id = t->idx + n * j;
          const float *w = t->w + n * j;
          float acc = 0.0f;
          for (uint32_t q = 0; q < n; q++) acc += w[q] * xs[id[q] < 0 ? 0 : id[q]];
          ys[j] = id[0] < 0 ? ext : acc;
        }
      }
      continue;
    }
    for (size_t j = 0; j < out; j++) {
      const int32_t *id = t->idx + n * j;
      const float *w = t->w + n * j;
      float *restrict yr = ys + j * inner;
      if (id[0] < 0) {
        for (size_t i = 0; i < inner; i++) yr[i] = ext;
      } else if (n == 1) {
        memcpy(yr, xs + (size_t)id[0] * inner, inner * sizeof(float));
      } else {
        const float *a = xs + (size_t)id[0] * inner, *b = xs + (size_t)id[1] * inner;
        const float wa = w[0], wb = w[1];
        for (size_t i = 0; i < inner; i++) yr[i] = wa * a[i] + wb * b[i];
        for (uint32_t q = 2; q < n; q++) {
          const float *c = xs + (size_t)id[q] * inner;
          const float wc = w[q];
          for (size_t i = 0; i < inner; i++) yr[i] += wc * c[i];
        }
      }
    }
  }
}

MRT_PREPARE_CODE
static int rs_pick(const mrt_node *node, const char *name, const char *dflt, const char *const *names,
                   int count) {
  for (int i = 0; i < count; i++)
    if (mrt_attr_string_is(node, name, dflt, names[i])) return i;
  return -1;
}

MRT_PREPARE_CODE
static mrt_status rs_float_input(mrt_ctx *ctx, const mrt_node *node, const mrt_tensor *t,
                                 const char *what, uint32_t want) {
  mrt_status st = mrt_check_dtype(ctx, node, t, MRT_DTYPE_FLOAT32);
  if (st) return st;
  if (t->count != want)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "%s has %zu values, expected %u", what,
                         t->count, want);
  return MRT_STATUS_OK;
}

MRT_PREPARE_CODE
mrt_status mrt_resize_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  const int v10 = node->opset < 11;
  mrt_status st = mrt_check_xy(ctx, node, v10 ? 2 : 1, v10 ? 2 : 4, 1, MRT_DTYPE_FLOAT32);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  const mrt_tensor *roi = v10 ? NULL : mrt_in(node, 1);
  const mrt_tensor *scales = mrt_in(node, v10 ? 1 : 2);
  const mrt_tensor *sizes = v10 ? NULL : mrt_in(node, 3);
  if (scales && scales->count == 0) scales = NULL; /* opset 11: an empty scales means "use sizes" */
  if (sizes && sizes->count == 0) sizes = NULL;
  const uint32_t r = x->ndim;
  if (y->ndim != r)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output rank %u differs from input rank %u",
                         y->ndim, r);
  rs_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");

  static const char *const modes[] = {"nearest", "linear", "cubic"};
  static const char *const ctms[] = {"half_pixel",       "half_pixel_symmetric",      "pytorch_half_pixel",
                                     "align_corners",    "asymmetric",                "tf_half_pixel_for_nearest",
                                     "tf_crop_and_resize"};
  static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  static const char *const policies[] = {"stretch", "not_larger", "not_smaller"};
  p->mode = rs_pick(node, "mode", "nearest", modes, 3);
  p->ctm = v10 ? RS_ASYMMETRIC : rs_pick(node, "coordinate_transformation_mode", "half_pixel", ctms, 7);
  p->nearest = v10 ? RS_SIMPLE : rs_pick(node, "nearest_mode", "round_prefer_floor", nearests, 4);
  const int policy = rs_pick(node, "keep_aspect_ratio_policy", "stretch", policies, 3);
  if (p->mode < 0 || p->ctm < 0 || p->nearest < 0 || policy < 0 || (v10 && p->mode == RS_CUBIC))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "unsupported mode, coordinate_transformation_mode, nearest_mode or "
                         "keep_aspect_ratio_policy");
  p->antialias = mrt_attr_int(node, "antialias", 0) != 0;
  p->exclude_outside = mrt_attr_int(node, "exclude_outside", 0) != 0;
  p->cubic_a = (double)mrt_attr_float(node, "cubic_coeff_a", -0.75f);
  p->extrapolation = mrt_attr_float(node, "extrapolation_value", 0.0f);
  p->ndim = r;

  /* axes: the tensor axes scales / sizes / roi speak about, in their order. */
  const int64_t *axes_attr;
  uint32_t naxes = mrt_attr_ints(node, "axes", &axes_attr);
  int64_t axes[MRT_MAX_DIMS];
  if (naxes == 0) {
    naxes = r;
    for (uint32_t i = 0; i < r; i++) axes[i] = i;
  } else {
    if (naxes > r)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axes has %u values for rank %u", naxes, r);
    for (uint32_t i = 0; i < naxes; i++) {
      axes[i] = mrt_norm_axis(axes_attr[i], r);
      if (axes[i] < 0)
        return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis %lld out of range",
                             (long long)axes_attr[i]);
    }
  }
  double scale[MRT_MAX_DIMS];
  for (uint32_t d = 0; d < r; d++) {
    scale[d] = 1.0, p->scale_axis[d] = -1;
    p->roi_lo[d] = 0.0, p->roi_hi[d] = 1.0;
  }
  for (uint32_t i = 0; i < naxes; i++) {
    if (p->scale_axis[axes[i]] >= 0)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis %lld repeated", (long long)axes[i]);
    p->scale_axis[axes[i]] = (int)i;
  }
  p->roi_naxes = naxes;

  if (scales) {
    if ((st = rs_float_input(ctx, node, scales, "scales", naxes))) return st;
    if (scales->is_constant && scales->data) {
      const float *s = scales->data;
      for (uint32_t i = 0; i < naxes; i++) {
        scale[axes[i]] = (double)s[i];
        if (!(s[i] > 0.0f))
          return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "scales must be positive");
      }
      for (uint32_t d = 0; d < r; d++) {
        /* floor(scale * in), give or take the rounding of a float32 product. */
        const double want_f = scale[d] * (double)x->dims[d];
        if (!(want_f < 0x1p62))
          return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "scales give axis %u an output size "
                               "beyond 2^62", d);
        const int64_t want = (int64_t)rs_floor(want_f);
        if (y->dims[d] != want && y->dims[d] != (int64_t)rs_floor(want_f * (1.0 + 1e-6)))
          return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                               "output dim %u is %lld, scales give %lld", d, (long long)y->dims[d],
                               (long long)want);
      }
    } else {
      p->dyn_scales = scales;
    }
  } else if (sizes) {
    if (!mrt_const_ints_ok(sizes) || sizes->count != naxes)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "sizes must be a constant int64 tensor of %u values", naxes);
    for (uint32_t i = 0; i < naxes; i++) {
      const int64_t in = x->dims[axes[i]], v = mrt_int_at(sizes, i);
      if (v < 0 || v > ((int64_t)1 << 62))
        return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "sizes[%u] is %lld", i, (long long)v);
      scale[axes[i]] = in ? (double)v / (double)in : 1.0;
    }
    if (policy != 0) {
      double s = scale[axes[0]];
      for (uint32_t i = 1; i < naxes; i++) {
        const double v = scale[axes[i]];
        s = (policy == 1) == (v < s) ? v : s;
      }
      for (uint32_t i = 0; i < naxes; i++) scale[axes[i]] = s;
    }
    for (uint32_t d = 0; d < r; d++) {
      const double kept = scale[d] * (double)x->dims[d] + 0.5; /* keep_aspect_ratio_policy's size */
      if (policy != 0 && p->scale_axis[d] >= 0 && !(kept < 0x1p62))
        return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "sizes give axis %u an output size beyond 2^62", d);
      const int64_t want = p->scale_axis[d] < 0 ? x->dims[d]
                           : policy != 0 ? (int64_t)kept
                                         : mrt_int_at(sizes, (size_t)p->scale_axis[d]);
      if (y->dims[d] != want)
        return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output dim %u is %lld, sizes give %lld",
                             d, (long long)y->dims[d], (long long)want);
    }
  } else {
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "one of scales and sizes must be given");
  }

  if (p->ctm == RS_TF_CROP_AND_RESIZE) {
    if (!roi)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "tf_crop_and_resize needs roi");
    if ((st = rs_float_input(ctx, node, roi, "roi", 2 * naxes))) return st;
    if (roi->is_constant && roi->data) {
      const float *v = roi->data;
      for (uint32_t i = 0; i < naxes; i++)
        p->roi_lo[axes[i]] = (double)v[i], p->roi_hi[axes[i]] = (double)v[naxes + i];
    } else {
      p->dyn_roi = roi;
    }
  }

  /* Passes: every axis that is not the identity, shrinking ones first (less work after). */
  const int dynamic = p->dyn_scales || p->dyn_roi;
  int64_t cur[MRT_MAX_DIMS];
  for (uint32_t d = 0; d < r; d++) cur[d] = x->dims[d];
  uint32_t order[MRT_MAX_DIMS], np = 0;
  for (uint32_t d = 0; d < r; d++) {
    if (p->scale_axis[d] < 0) {
      if (x->dims[d] != y->dims[d])
        return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                             "output dim %u changes an axis `axes` does not resize", d);
      continue;
    }
    const int identity = x->dims[d] == y->dims[d] && !dynamic && scale[d] == 1.0 &&
                         p->roi_lo[d] == 0.0 && p->roi_hi[d] == 1.0;
    if (!identity) order[np++] = d;
  }
  for (uint32_t i = 1; i < np; i++) /* insertion sort on out/in, stable */
    for (uint32_t j = i; j > 0; j--) {
      const uint32_t a = order[j - 1], b = order[j];
      if ((double)y->dims[b] * (double)x->dims[a] >= (double)y->dims[a] * (double)x->dims[b]) break;
      order[j - 1] = b, order[j] = a;
    }
  size_t buf = 0;
  for (uint32_t k = 0; k < np; k++) {
    const uint32_t d = order[k];
    rs_pass *ps = &p->pass[k];
    ps->axis = d;
    ps->outer = mrt_prod(cur, 0, d);
    ps->inner = mrt_prod(cur, d + 1, r);
    ps->in = (size_t)x->dims[d];
    ps->out = (size_t)y->dims[d];
    ps->scale = scale[d];
    /* Run-time scales are only known to give this output size: bound the taps
     * with the smallest such scale. */
    double sbound = dynamic && p->dyn_scales ? (ps->in ? (double)ps->out / (double)ps->in : 1.0) : scale[d];
    if (!(sbound > 0.0)) sbound = 1.0;
    int32_t start;
    ps->ntaps_max = rs_ntaps(p, sbound, &start);
    if (ps->ntaps_max > 64)
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                           "antialias downsampling by more than 1/32 along axis %u", d);
    cur[d] = y->dims[d];
    if (k + 1 < np) {
      const size_t n = mrt_prod(cur, 0, r);
      if (n > buf) buf = n;
    }
  }
  p->npasses = np;
  p->buf_floats = (buf + 15) / 16 * 16;
  const size_t nbufs = np >= 3 ? 2 : np == 2 ? 1 : 0;
  p->tables_off = nbufs * p->buf_floats * sizeof(float);
  if (dynamic) {
    mrt_ctx_request_scratch(ctx, p->tables_off + rs_tables_bytes(p));
  } else {
    char *mem = mrt_ctx_alloc(ctx, rs_tables_bytes(p) + 1);
    if (!mem) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
    rs_layout(p, p->table, mem);
    rs_build_all(p, p->table);
    if (p->tables_off) mrt_ctx_request_scratch(ctx, p->tables_off);
  }
  node->params = p;
  return MRT_STATUS_OK;
}

void mrt_resize_run_f32(const mrt_node *node, void *scratch) {
  const rs_params *p = node->params;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  if (y->count == 0) return;
  if (p->npasses == 0) {
    mrt_copy_unless_aliased(x, y);
    return;
  }
  rs_table dyn[MRT_MAX_DIMS];
  const rs_table *t = p->table;
  if (p->dyn_scales || p->dyn_roi) {
    rs_layout(p, dyn, (char *)scratch + p->tables_off);
    rs_build_all(p, dyn);
    t = dyn;
  }
  float *bufs[2] = {(float *)scratch, (float *)scratch + p->buf_floats};
  const float *src = x->data;
  for (uint32_t k = 0; k < p->npasses; k++) {
    float *dst = k + 1 == p->npasses ? (float *)y->data : bufs[k & 1];
    rs_run_pass(&p->pass[k], &t[k], p->extrapolation, src, dst);
    src = dst;
  }
}

#endif /* MRT_TYPE_float32 && MRT_OP_Resize */
