/*
 * Pooling, float32: MaxPool and AveragePool over 1-3 spatial dims (pads,
 * strides, dilations, ceil_mode, auto_pad), GlobalAveragePool, GlobalMaxPool.
 * MaxPool also for uint8 and int8 (onnxruntime.quantization leaves MaxPool on the
 * quantised tensor: max commutes with a monotonic requantisation, so no scale is
 * involved): the same window tables and separable loops, on the 8-bit element.
 *
 * Windowed pools are run as 3-D pools: a 1-D or 2-D input gets leading
 * spatial dims of size 1 (kernel 1, stride 1, no pads), so one loop nest
 * serves all ranks. Prepare tabulates, per axis and output index, the first
 * in-bounds input position and how many taps fall inside the input, so the
 * hot loop has no divisions and no bounds tests.
 */
#include "kcommon.h"

/* The element the windowed pools run on, and max's identity for it. */
#if defined(MRT_TYPE_float32)
#define POOL_FLOAT 1
typedef float pool_t;
#define POOL_DTYPE MRT_DTYPE_FLOAT32
#define POOL_LOWEST (-__builtin_inff())
#elif defined(MRT_OP_MaxPool) && defined(MRT_TYPE_uint8)
typedef uint8_t pool_t;
#define POOL_DTYPE MRT_DTYPE_UINT8
#define POOL_LOWEST 0
#elif defined(MRT_OP_MaxPool) && defined(MRT_TYPE_int8)
typedef int8_t pool_t;
#define POOL_DTYPE MRT_DTYPE_INT8
#define POOL_LOWEST (-128)
#endif

#if defined(POOL_DTYPE)

#define NEG_INF POOL_LOWEST

#if defined(MRT_OP_MaxPool) || defined(MRT_OP_AveragePool)

typedef struct pool_tap {
  int32_t pos;   /* first in-bounds input position of the window */
  int32_t n;     /* taps inside the input */
  int32_t nincl; /* taps inside the padded input (count_include_pad divisor) */
} pool_tap;

typedef struct pool_params {
  size_t planes;           /* N * C */
  int64_t in[3], out[3];   /* spatial sizes, padded with leading 1s */
  int64_t dil[3];
  pool_tap *tap[3];        /* tap[a][o] for o < out[a] */
  int64_t istride[3];      /* MaxPool Indices: flat-index stride of each axis */
  int64_t k[3], s[3], pb[3]; /* kernel, stride, leading pad */
  int count_include_pad;
  /* Flat form (2-D or 1-D, stride 1 in H and W): see pool_flat. */
  int flat;
  size_t rh, rw;           /* padded plane: rows, row width */
  size_t nflat;            /* outputs computed in row-width space, a multiple of 8 */
  int32_t *off;            /* tap offsets in the padded plane */
  float *div;              /* AveragePool: per-output divisor (+inf when no tap counts) */
  size_t scratch_stride;   /* bytes of scratch per thread */
} pool_params;

#define POOL_VL 8
typedef float pool_vec __attribute__((vector_size(POOL_VL * sizeof(float))));

/* Division rounding towards +inf for a > 0 divisor. */
static int64_t div_up(int64_t n, int64_t d) {
  return n >= 0 ? (n + d - 1) / d : -((-n) / d);
}

/* The width pass's vectors (see pool_separable). */
#define POOL_HVL (16 / sizeof(pool_t) < 8 ? 8 : 16 / sizeof(pool_t))
typedef pool_t pool_hv __attribute__((vector_size(POOL_HVL * sizeof(pool_t))));
typedef pool_t pool_hv2 __attribute__((vector_size(2 * POOL_HVL * sizeof(pool_t))));

/* Elements of the bordered row: the widest window reach, and the reads of the
 * last vector past it. */
static int64_t pool_row_len(const pool_params *p) {
  const int64_t reach = p->out[2] ? (p->out[2] - 1) * p->s[2] + (p->k[2] - 1) * p->dil[2] + 1 : 0;
  const int64_t lw = p->pb[2] + p->in[2];
  return (reach > lw ? reach : lw) + 2 * (int64_t)POOL_HVL;
}

/* The flat form is a speed path (the separable one computes the same): --tune
 * size leaves it out. */
#if defined(POOL_FLOAT) && !MRT_TUNE_SIZE
#define POOL_FLAT 1
#else
#define POOL_FLAT 0
#endif

#if POOL_FLAT

/*
 * Flat form, for stride 1 in H and W (the "same" 3x3 pools of Inception, and
 * windows as large as the plane): each plane is copied into scratch inside a
 * border of the pool's identity (-inf or 0), so every output's window lies in
 * the buffer and output (oh, ow) is an op over buf[oh * rw + ow + off[t]]. The
 * outputs are then computed as one run over oh * rw + ow, POOL_VL at a time,
 * whole rows of padding included, and the valid columns copied out. No edge
 * cases, no short loops.
 */
MRT_PREPARE_CODE
static mrt_status pool_flat_prepare(mrt_node *node, mrt_ctx *ctx, pool_params *p) {
  /* Sizes in 64 bits (size_t is 32 on armv7 and x86): a plane that does not fit in
   * 2^31 bytes of scratch stays on the row form. */
  const uint64_t oh = (uint64_t)p->out[1], ow = (uint64_t)p->out[2];
  const uint64_t rw = ow + (uint64_t)(p->k[2] - 1) * (uint64_t)p->dil[2];
  const uint64_t rh = oh + (uint64_t)(p->k[1] - 1) * (uint64_t)p->dil[1];
  if (rw > INT32_MAX || rh > INT32_MAX || (rh + 2) * rw + 2 * POOL_VL > INT32_MAX / 2 / sizeof(float))
    return MRT_STATUS_OK;
  p->rw = (size_t)rw;
  p->rh = (size_t)rh;
  p->nflat = ((size_t)oh * p->rw + POOL_VL - 1) / POOL_VL * POOL_VL;
  const size_t kh = (size_t)p->k[1], kw = (size_t)p->k[2], dh = (size_t)p->dil[1], dw = (size_t)p->dil[2];
  p->off = mrt_ctx_alloc(ctx, kh * kw * sizeof *p->off);
  if (!p->off) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < kh; i++)
    for (size_t j = 0; j < kw; j++) p->off[i * kw + j] = (int32_t)(i * dh * p->rw + j * dw);
  p->flat = 1;
  return MRT_STATUS_OK;
}

/* Floats of scratch the flat form needs: the padded plane (with room for the
 * last vector's reads past its end) and the outputs in row-width space. */
static size_t pool_flat_scratch(const pool_params *p) {
  return (p->rh + 1) * p->rw + POOL_VL + p->nflat;
}

static inline void pool_flat(const pool_params *p, const float *x, float *y, float *buf, const int is_max,
                             size_t c0, size_t c1) {
  const size_t h = (size_t)p->in[1], w = (size_t)p->in[2], oh = (size_t)p->out[1], ow = (size_t)p->out[2];
  const size_t rw = p->rw, rh = p->rh, ntaps = (size_t)(p->k[1] * p->k[2]);
  const size_t nbuf = (rh + 1) * rw + POOL_VL;
  float *tmp = buf + nbuf;
  const float fill = is_max ? NEG_INF : 0.0f;
  for (size_t i = 0; i < nbuf; i++) buf[i] = fill;
  /* Input rows and columns that land in the buffer. */
  const size_t pt = (size_t)p->pb[1], pl = (size_t)p->pb[2];
  const size_t r0 = pt, r1 = pt + h < rh ? pt + h : rh;
  const size_t col0 = pl, col1 = pl + w < rw ? pl + w : rw;
  x += c0 * h * w;
  y += c0 * oh * ow;
  for (size_t c = c0; c < c1; c++, x += h * w, y += oh * ow) {
    if (col1 > col0)
      for (size_t r = r0; r < r1; r++) memcpy(buf + r * rw + col0, x + (r - pt) * w, (col1 - col0) * sizeof(float));
    for (size_t f = 0; f < p->nflat; f += POOL_VL) {
      pool_vec m;
      memcpy(&m, buf + f + p->off[0], sizeof m);
      for (size_t t = 1; t < ntaps; t++) {
        pool_vec v;
        memcpy(&v, buf + f + p->off[t], sizeof v);
        m = is_max ? MRT_VMAX(m, v) : m + v;
      }
      memcpy(tmp + f, &m, sizeof m);
    }
    for (size_t r = 0; r < oh; r++) memcpy(y + r * ow, tmp + r * rw, ow * sizeof(float));
    if (!is_max)
      for (size_t i = 0; i < oh * ow; i++) y[i] /= p->div[i];
  }
}
#endif /* POOL_FLAT: the 8-bit MaxPool runs the separable form only */

MRT_PREPARE_CODE
static mrt_status pool_prepare(mrt_node *node, mrt_ctx *ctx, int max_outputs, int has_dilations,
                               pool_params **out) {
  mrt_status st = mrt_check_xy(ctx, node, 1, 1, (uint32_t)max_outputs, POOL_DTYPE);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  const uint32_t k = x->ndim - 2;
  if (x->ndim < 3 || x->ndim > 5 || y->ndim != x->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "input must be [N, C, D1..Dk] with 1 <= k <= 3, got rank %u", x->ndim);
  const int64_t *ks, *strides, *dils, *pads;
  uint32_t nks = mrt_attr_ints(node, "kernel_shape", &ks);
  uint32_t ns = mrt_attr_ints(node, "strides", &strides);
  uint32_t nd = has_dilations ? mrt_attr_ints(node, "dilations", &dils) : 0;
  uint32_t np = mrt_attr_ints(node, "pads", &pads);
  if (nks != k || (ns && ns != k) || (nd && nd != k) || (np && np != 2 * k))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "kernel_shape (%u), strides (%u), dilations (%u) and pads (%u) must "
                         "have %u, %u, %u and %u values",
                         nks, ns, nd, np, k, k, k, 2 * k);
  int same_upper = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_UPPER");
  int same_lower = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_LOWER");
  int valid = mrt_attr_string_is(node, "auto_pad", "NOTSET", "VALID");
  if (!same_upper && !same_lower && !valid &&
      !mrt_attr_string_is(node, "auto_pad", "NOTSET", "NOTSET"))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "unknown auto_pad value");
  const int ceil_mode = mrt_attr_int(node, "ceil_mode", 0) != 0;

  pool_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  if (y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "output N and C must equal the input's");
  p->planes = (size_t)x->dims[0] * (size_t)x->dims[1];
  for (uint32_t a = 0; a < 3; a++) {
    const uint32_t j = a + k - 3; /* attribute index; the leading padded axes have none */
    const int pad_axis = a + k >= 3;
    int64_t in = pad_axis ? x->dims[2 + j] : 1;
    int64_t kk = pad_axis ? ks[j] : 1;
    int64_t s = pad_axis && ns ? strides[j] : 1;
    int64_t d = pad_axis && nd ? dils[j] : 1;
    int64_t pb = pad_axis && np ? pads[j] : 0, pe = pad_axis && np ? pads[j + k] : 0;
    if (kk < 1 || s < 1 || d < 1 || pb < 0 || pe < 0)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "axis %u: kernel, stride and dilation must be >= 1 and pads >= 0", j);
    if (kk > INT32_MAX || s > INT32_MAX || d > INT32_MAX || pb > INT32_MAX || pe > INT32_MAX)
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "axis %u: kernel, stride, dilation or pads above 2^31", j);
    const int64_t span = (kk - 1) * d + 1;
    int64_t o;
    if (pad_axis && (same_upper || same_lower)) {
      o = div_up(in, s);
      int64_t total = (o - 1) * s + span - in;
      if (total < 0) total = 0;
      pb = same_upper ? total / 2 : total - total / 2;
      pe = total - pb;
    } else {
      if (valid) pb = pe = 0;
      const int64_t room = in + pb + pe - span;
      if (room < 0)
        return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                             "axis %u: the window (%lld) is larger than the padded input (%lld)",
                             j, (long long)span, (long long)(in + pb + pe));
      o = (ceil_mode ? div_up(room, s) : room / s) + 1;
      /* ceil_mode must not start a window in the end padding (as onnxruntime, PyTorch). */
      if (ceil_mode && (o - 1) * s >= in + pb) o--;
    }
    if (pad_axis && y->dims[2 + j] != o)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "output spatial dim %u is %lld, the attributes give %lld", j,
                           (long long)y->dims[2 + j], (long long)o);
    if (in > INT32_MAX || o > INT32_MAX)
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "spatial dims above 2^31");
    p->in[a] = in, p->out[a] = o, p->dil[a] = d;
    pool_tap *t = mrt_ctx_alloc(ctx, (size_t)(o ? o : 1) * sizeof *t);
    if (!t) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < o; i++) {
      const int64_t start = i * s - pb;
      const int64_t t0 = start < 0 ? div_up(-start, d) : 0;
      int64_t t1 = div_up(in - start, d), u1 = div_up(in + pe - start, d);
      if (t1 > kk) t1 = kk;
      if (u1 > kk) u1 = kk;
      t[i].pos = (int32_t)(start + t0 * d);
      t[i].n = t1 > t0 ? (int32_t)(t1 - t0) : 0;
      t[i].nincl = (int32_t)u1;
    }
    p->tap[a] = t;
    p->k[a] = kk, p->s[a] = s, p->pb[a] = pb;
  }
  /* Sizes below 2^31 each: the bordered row fits in 64 bits; refuse what no scratch holds. */
  if (pool_row_len(p) > INT32_MAX / 4)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "the last axis' windows reach %lld elements, above 2^29 (kernel, dilation or pads too large)",
                         (long long)pool_row_len(p));
#if POOL_FLAT
  if (p->in[0] == 1 && p->out[0] == 1 && p->s[1] == 1 && p->s[2] == 1 &&
      (st = pool_flat_prepare(node, ctx, p)) != MRT_STATUS_OK)
    return st;
  p->scratch_stride = ((p->flat ? pool_flat_scratch(p) : (size_t)pool_row_len(p)) * sizeof(float) + 63) / 64 * 64;
#else
  p->scratch_stride = ((size_t)pool_row_len(p) * sizeof(pool_t) + 63) / 64 * 64;
#endif
  mrt_ctx_request_scratch(ctx, mrt_ctx_threads(ctx) * p->scratch_stride);
  *out = p;
  return MRT_STATUS_OK;
}

/* Max and sum are separable: per output row, first reduce the window's input
 * rows (all its depth and height taps) into one row of scratch -- a contiguous
 * loop over W that vectorises -- then reduce each output's width taps from that
 * row. The row sits inside a border of the identity (-inf / lowest / 0) wide
 * enough for every window, the end padding and ceil_mode's last window included,
 * so the width pass has no bounds: stride 1 is a sliding op over unaligned
 * loads, stride 2 takes each tap's even lanes by one shuffle, POOL_HVL outputs
 * at a time. */
/* Vector max. On x86 a float compare-and-select is one maxps, where the NaN rules of
 * __builtin_elementwise_max take four more SSE instructions (arm64's fmaxnm is one). */
#if defined(POOL_FLOAT) && (defined(__x86_64__) || defined(__i386__))
typedef int32_t pool_hvm __attribute__((vector_size(POOL_HVL * sizeof(pool_t))));
static inline pool_hv pool_vmax(pool_hv a, pool_hv b) {
  const pool_hvm m = a > b;
  return (pool_hv)(((pool_hvm)a & m) | ((pool_hvm)b & ~m));
}
#else
#define pool_vmax(a, b) MRT_VMAX(a, b)
#endif

static inline pool_hv pool_even(const pool_t *r) {
  pool_hv2 v;
  memcpy(&v, r, sizeof v);
#if defined(POOL_FLOAT)
  return __builtin_shufflevector(v, v, 0, 2, 4, 6, 8, 10, 12, 14);
#else
  return __builtin_shufflevector(v, v, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
#endif
}

/* y[o] = op over r[o * s + l * d], l < k, for o < n. A row of n >= POOL_HVL ends on
 * a vector overlapping the one before (outputs are a function of r alone), so
 * only shorter rows and other strides run the scalar loop. */
static inline void pool_hrow(const pool_t *r, pool_t *y, size_t n, size_t k, size_t s, size_t d, const int is_max) {
  size_t o = 0;
  if (n >= POOL_HVL && s <= 2) {
    for (;; o += POOL_HVL) {
      if (o + POOL_HVL > n) o = n - POOL_HVL;
      pool_hv m, v;
      if (s == 1) memcpy(&m, r + o, sizeof m);
      else m = pool_even(r + 2 * o);
      for (size_t l = 1; l < k; l++) {
        if (s == 1) memcpy(&v, r + o + l * d, sizeof v);
        else v = pool_even(r + 2 * o + l * d);
        m = is_max ? pool_vmax(m, v) : m + v;
      }
      memcpy(y + o, &m, sizeof m);
      if (o + POOL_HVL >= n) break;
    }
    return;
  }
  for (; o < n; o++) {
    const pool_t *w = r + o * s;
    pool_t m = w[0];
    for (size_t l = 1; l < k; l++) m = is_max ? (w[l * d] > m ? w[l * d] : m) : m + w[l * d];
    y[o] = m;
  }
}

/* Not hot (once per task, and windows with no input row): kept small. */
__attribute__((noinline, cold)) static void pool_fill(pool_t *r, size_t n, pool_t v) {
  for (size_t l = 0; l < n; l++) r[l] = v;
}

/* y = (a op b) op c over n elements, c optional; y may be a. One loop serves
 * every tap: a 3x3 window's rows in one pass, pairs after that. Max is
 * idempotent, so its row ends on a vector overlapping the one before (in place
 * too); a sum's tail runs the scalar loop. */
static inline void pool_vrow(const pool_t *a, const pool_t *b, const pool_t *c, pool_t *y, size_t n,
                             const int is_max) {
  size_t l = 0;
  if (n >= POOL_HVL)
    for (;; l += POOL_HVL) {
      if (is_max && l + POOL_HVL > n) l = n - POOL_HVL;
      else if (l + POOL_HVL > n) break;
      pool_hv u, v, e;
      memcpy(&u, a + l, sizeof u);
      memcpy(&v, b + l, sizeof v);
      u = is_max ? pool_vmax(u, v) : u + v;
      if (c) {
        memcpy(&e, c + l, sizeof e);
        u = is_max ? pool_vmax(u, e) : u + e;
      }
      memcpy(y + l, &u, sizeof u);
      if (l + POOL_HVL >= n) {
        l = n;
        break;
      }
    }
  for (; l < n; l++) {
    pool_t u = is_max ? (b[l] > a[l] ? b[l] : a[l]) : a[l] + b[l];
    if (c) u = is_max ? (c[l] > u ? c[l] : u) : u + c[l];
    y[l] = u;
  }
}

#define POOL_AHEAD 3

static inline void pool_separable(const pool_params *p, const pool_t *x, pool_t *y, pool_t *row,
                                  const int is_max, size_t c0, size_t c1) {
  const size_t w = (size_t)p->in[2], hw = (size_t)p->in[1] * w, plane = hw * (size_t)p->in[0];
  const size_t dd = (size_t)p->dil[0] * hw, dh = (size_t)p->dil[1] * w;
  const size_t ow = (size_t)p->out[2], kw = (size_t)p->k[2], sw = (size_t)p->s[2], dw = (size_t)p->dil[2];
  const pool_t fill = is_max ? NEG_INF : 0;
  /* The border is never written: filled once per task. */
  pool_fill(row, (size_t)pool_row_len(p), fill);
  pool_t *rr = row + p->pb[2];
  x += c0 * plane;
  y += c0 * (size_t)(p->out[0] * p->out[1]) * ow;
  for (size_t c = c0; c < c1; c++, x += plane) {
    for (int64_t od = 0; od < p->out[0]; od++) {
      const pool_tap td = p->tap[0][od];
      for (int64_t oh = 0; oh < p->out[1]; oh++, y += ow) {
        const pool_tap th = p->tap[1][oh];
        const pool_t *base = x + (size_t)td.pos * hw + (size_t)th.pos * w;
        const int32_t nt = td.n * th.n;
        /* The rows three output rows on, into cache: a plane just written by a
         * convolution comes from memory, and the loads waited on it. */
        if (oh + POOL_AHEAD < p->out[1] && p->tap[1][oh + POOL_AHEAD].n) {
          const pool_tap tn = p->tap[1][oh + POOL_AHEAD];
          const char *pf = (const char *)(x + (size_t)td.pos * hw + (size_t)tn.pos * w);
          const size_t bytes = ((size_t)(tn.n - 1) * dh + w) * sizeof(pool_t);
          for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(pf + b);
        }
        if (nt == 1)
          memcpy(rr, base, w * sizeof(pool_t));
        else if (nt == 0)
          pool_fill(rr, w, fill);
#define POOL_TAP(t) (base + (size_t)((t) / th.n) * dd + (size_t)((t) % th.n) * dh)
        for (int32_t t = 1; t < nt; t += 2)
          pool_vrow(t == 1 ? base : rr, POOL_TAP(t), t + 1 < nt ? POOL_TAP(t + 1) : NULL, rr, w, is_max);
#undef POOL_TAP
        pool_hrow(row, y, ow, kw, sw, dw, is_max);
#if defined(POOL_FLOAT)
        if (!is_max)
          for (size_t o = 0; o < ow; o++) {
            const pool_tap tw = p->tap[2][o];
            const int32_t cnt = p->count_include_pad ? td.nincl * th.nincl * tw.nincl : nt * tw.n;
            y[o] = cnt > 0 && nt ? y[o] / (float)cnt : 0.0f;
          }
#endif
      }
    }
  }
}

/* Threads: each task pools a run of planes with its own thread's scratch. */
typedef struct pool_job {
  const pool_params *p;
  const pool_t *x;
  pool_t *y;
  char *scratch;
  size_t per_task;
} pool_job;

/* One op per object: the max / sum choice folds at compile time. */
#if defined(MRT_OP_MaxPool)
#define POOL_IS_MAX 1
#else
#define POOL_IS_MAX 0
#endif

static void pool_task(void *varg, size_t task, size_t thread) {
  const pool_job *j = varg;
  const size_t c0 = task * j->per_task;
  const size_t c1 = c0 + j->per_task < j->p->planes ? c0 + j->per_task : j->p->planes;
  if (c0 >= c1) return;
  pool_t *buf = (pool_t *)(j->scratch + thread * j->p->scratch_stride);
#if POOL_FLAT
  if (j->p->flat)
    pool_flat(j->p, j->x, j->y, buf, POOL_IS_MAX, c0, c1);
  else
#endif
    pool_separable(j->p, j->x, j->y, buf, POOL_IS_MAX, c0, c1);
}

/* Input floats read below which a pooling task is not worth a thread. */
#define POOL_TASK_WORK ((size_t)1 << 16)

static void pool_run(const mrt_node *node, void *scratch) {
  const pool_params *p = node->params;
  const size_t work = p->planes * (size_t)(p->in[0] * p->in[1] * p->in[2] + p->out[0] * p->out[1] * p->out[2]);
  const size_t tasks = mrt_pool_tasks(node->pool, work, POOL_TASK_WORK);
  pool_job job = {p, node->inputs[0]->data, node->outputs[0]->data, scratch,
                  (p->planes + tasks - 1) / tasks};
  mrt_parallel_for(node->pool, tasks, pool_task, &job);
}

#endif /* MaxPool || AveragePool */

#if defined(MRT_OP_MaxPool)

#if defined(POOL_FLOAT)
#define MAXPOOL_PREPARE mrt_maxpool_prepare_f32
#define MAXPOOL_RUN mrt_maxpool_run_f32
#elif defined(MRT_TYPE_uint8)
#define MAXPOOL_PREPARE mrt_maxpool_prepare_u8
#define MAXPOOL_RUN mrt_maxpool_run_u8
#else
#define MAXPOOL_PREPARE mrt_maxpool_prepare_i8
#define MAXPOOL_RUN mrt_maxpool_run_i8
#endif

MRT_PREPARE_CODE
mrt_status MAXPOOL_PREPARE(mrt_node *node, mrt_ctx *ctx) {
  pool_params *p;
  mrt_status st = pool_prepare(node, ctx, 2, 1, &p);
  if (st) return st;
  const mrt_tensor *ind = mrt_out(node, 1);
  if (ind) {
    if (ind->dtype != MRT_DTYPE_INT64 || !mrt_same_dims(ind, node->outputs[0]))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "Indices must be int64 with the output's shape");
    /* Flat indices over the real spatial dims: row-major, or column-major with storage_order 1. */
    const int col = mrt_attr_int(node, "storage_order", 0) != 0;
    int64_t r = 1;
    for (uint32_t i = 0; i < 3; i++) {
      uint32_t a = col ? i : 2 - i;
      p->istride[a] = r;
      r *= p->in[a];
    }
  }
  node->params = p;
  return MRT_STATUS_OK;
}

void MAXPOOL_RUN(const mrt_node *node, void *scratch) {
  const pool_params *p = node->params;
  const pool_t *x = node->inputs[0]->data;
  pool_t *y = node->outputs[0]->data;
  const mrt_tensor *ind_t = mrt_out(node, 1);
  if (!ind_t) {
    pool_run(node, scratch);
    return;
  }
  /* With Indices: the direct form, tracking where each maximum came from. */
  int64_t *ind = ind_t->data;
  const size_t hw = (size_t)(p->in[1] * p->in[2]), w = (size_t)p->in[2];
  const size_t plane = hw * (size_t)p->in[0];
  for (size_t c = 0; c < p->planes; c++, x += plane) {
    for (int64_t od = 0; od < p->out[0]; od++) {
      const pool_tap td = p->tap[0][od];
      for (int64_t oh = 0; oh < p->out[1]; oh++) {
        const pool_tap th = p->tap[1][oh];
        for (int64_t ow = 0; ow < p->out[2]; ow++) {
          const pool_tap tw = p->tap[2][ow];
          pool_t m = NEG_INF;
#if defined(POOL_FLOAT)
          int64_t best = 0;
#else
          /* The identity is a value an 8-bit input can hold: a window of all-lowest
           * values names its first tap, as onnxruntime does. */
          int64_t best = td.pos * p->istride[0] + th.pos * p->istride[1] + tw.pos * p->istride[2];
#endif
          for (int32_t i = 0; i < td.n; i++)
            for (int32_t j = 0; j < th.n; j++)
              for (int32_t l = 0; l < tw.n; l++) {
                const int64_t d = td.pos + i * p->dil[0], h = th.pos + j * p->dil[1],
                              v = tw.pos + l * p->dil[2];
                const pool_t xv = x[(size_t)d * hw + (size_t)h * w + (size_t)v];
                if (xv > m) {
                  m = xv;
                  best = d * p->istride[0] + h * p->istride[1] + v * p->istride[2];
                }
              }
          *ind++ = (int64_t)(c * plane) + best;
          *y++ = m;
        }
      }
    }
  }
}

#endif /* MaxPool */

#if defined(POOL_FLOAT) && defined(MRT_OP_AveragePool)

MRT_PREPARE_CODE
mrt_status mrt_averagepool_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  pool_params *p;
  mrt_status st = pool_prepare(node, ctx, 1, node->opset >= 19, &p);
  if (st) return st;
  p->count_include_pad = mrt_attr_int(node, "count_include_pad", 0) != 0;
#if POOL_FLAT
  if (p->flat) {
    const size_t oh = (size_t)p->out[1], ow = (size_t)p->out[2];
    p->div = mrt_ctx_alloc(ctx, oh * ow * sizeof *p->div);
    if (!p->div) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < oh; i++)
      for (size_t j = 0; j < ow; j++) {
        const pool_tap th = p->tap[1][i], tw = p->tap[2][j];
        const int32_t cnt = p->count_include_pad ? th.nincl * tw.nincl : th.n * tw.n;
        p->div[i * ow + j] = cnt > 0 ? (float)cnt : __builtin_inff(); /* sum of padding / inf = 0 */
      }
  }
#endif
  node->params = p;
  return MRT_STATUS_OK;
}

void mrt_averagepool_run_f32(const mrt_node *node, void *scratch) {
  pool_run(node, scratch);
}

#endif /* AveragePool */

#if defined(POOL_FLOAT) && (defined(MRT_OP_GlobalAveragePool) || defined(MRT_OP_GlobalMaxPool))

typedef struct gpool_params {
  size_t planes, plane;
} gpool_params;

MRT_PREPARE_CODE
static mrt_status gpool_prepare(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_xy(ctx, node, 1, 1, 1, MRT_DTYPE_FLOAT32);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  int ok = x->ndim >= 2 && y->ndim == x->ndim && y->dims[0] == x->dims[0] &&
           y->dims[1] == x->dims[1];
  for (uint32_t i = 2; ok && i < y->ndim; i++) ok = y->dims[i] == 1;
  if (!ok)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "input must be [N, C, ...] and output [N, C, 1, ...]");
  gpool_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->planes = (size_t)x->dims[0] * (size_t)x->dims[1];
  p->plane = mrt_prod(x->dims, 2, x->ndim);
  if (p->plane == 0 && p->planes)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "empty spatial dims");
  node->params = p;
  return MRT_STATUS_OK;
}

#endif

#if defined(POOL_FLOAT) && defined(MRT_OP_GlobalAveragePool)
MRT_PREPARE_CODE
mrt_status mrt_globalaveragepool_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  return gpool_prepare(node, ctx);
}

#if !MRT_TUNE_SIZE
typedef float gap_vec __attribute__((vector_size(8 * sizeof(float))));

/* Sum of n floats: four vector accumulators, so the adds do not each wait on
 * the one before (four partial sums, one vector, ran at a float a cycle:
 * EfficientNet-B0's squeeze-excitation pools 0.38 ms against onnxruntime's
 * 0.24). arm64: +296 B with the thread split, so --tune size keeps the loop
 * below (and, without threads, no split). */
static float gap_sum(size_t n, const float *x) {
  gap_vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, v;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    memcpy(&v, x + i, sizeof v), a0 += v;
    memcpy(&v, x + i + 8, sizeof v), a1 += v;
    memcpy(&v, x + i + 16, sizeof v), a2 += v;
    memcpy(&v, x + i + 24, sizeof v), a3 += v;
  }
  for (; i + 8 <= n; i += 8) memcpy(&v, x + i, sizeof v), a1 += v;
  a0 = (a0 + a1) + (a2 + a3);
  float s = ((a0[0] + a0[4]) + (a0[1] + a0[5])) + ((a0[2] + a0[6]) + (a0[3] + a0[7]));
  for (; i < n; i++) s += x[i];
  return s;
}
#else
static float gap_sum(size_t n, const float *x) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) s0 += x[i], s1 += x[i + 1], s2 += x[i + 2], s3 += x[i + 3];
  for (; i < n; i++) s0 += x[i];
  return (s0 + s1) + (s2 + s3);
}
#endif

static void gap_planes(const gpool_params *p, const float *x, float *y, size_t c0, size_t c1) {
  const float inv = 1.0f / (float)p->plane;
  for (size_t c = c0; c < c1; c++) y[c] = gap_sum(p->plane, x + c * p->plane) * inv;
}

#if MRT_ENABLE_THREADS
typedef struct gap_job {
  const gpool_params *p;
  const float *x;
  float *y;
  size_t per_task;
} gap_job;

static void gap_task(void *arg, size_t t, size_t thread) {
  const gap_job *j = arg;
  const size_t c0 = t * j->per_task;
  MRT_UNUSED(thread);
  gap_planes(j->p, j->x, j->y, c0, c0 + j->per_task < j->p->planes ? c0 + j->per_task : j->p->planes);
}
#endif

void mrt_globalaveragepool_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const gpool_params *p = node->params;
#if MRT_ENABLE_THREADS
  if (p->planes == 0) return;
  /* Channels split between the session's threads, 2^12 floats a task at
   * least: the layer before (a depthwise convolution split by channels) left
   * each thread's channels in its own core's cache, which the caller alone
   * would read across (squeeze-excitation pools on 7 x 7 and 14 x 14 planes). */
  const size_t tasks = mrt_pool_tasks(node->pool, p->planes * p->plane, (size_t)1 << 12);
  gap_job job = {p, node->inputs[0]->data, node->outputs[0]->data, (p->planes + tasks - 1) / tasks};
  mrt_parallel_for(node->pool, (p->planes + job.per_task - 1) / job.per_task, gap_task, &job);
#else
  gap_planes(p, node->inputs[0]->data, node->outputs[0]->data, 0, p->planes);
#endif
}
#endif

#if defined(POOL_FLOAT) && defined(MRT_OP_GlobalMaxPool)
MRT_PREPARE_CODE
mrt_status mrt_globalmaxpool_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  return gpool_prepare(node, ctx);
}

void mrt_globalmaxpool_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const gpool_params *p = node->params;
  const float *x = node->inputs[0]->data;
  float *y = node->outputs[0]->data;
  for (size_t c = 0; c < p->planes; c++, x += p->plane) {
    float m = NEG_INF;
    for (size_t i = 0; i < p->plane; i++) m = x[i] > m ? x[i] : m;
    y[c] = m;
  }
}
#endif

#endif /* POOL_DTYPE */
