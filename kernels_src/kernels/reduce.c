/*
 * ReduceSum, ReduceMean, ReduceMax, float32, every opset: axes come from the
 * `axes` attribute before ReduceSum-13 / ReduceMean-18 / ReduceMax-18 and from
 * the (build-time constant) second input since; keepdims and
 * noop_with_empty_axes as the spec says.
 *
 * Prepare drops X's size-1 dims and merges neighbours that are both reduced or
 * both kept, so [1, 128, 768] over axis -1 is one (128 kept, 768 reduced) pair
 * and [N, C, H, W] over (2, 3) is (N*C kept, H*W reduced). Run walks X in memory
 * order: a reduced innermost dim is a vector reduction of one row into one
 * output; a kept innermost dim accumulates the row into a row of Y, also a flat
 * vector loop.
 */
#include "kcommon.h"
#include "vmath.h"

#if defined(MRT_TYPE_float32) && \
    (defined(MRT_OP_ReduceSum) || defined(MRT_OP_ReduceMean) || defined(MRT_OP_ReduceMax))

#if defined(MRT_OP_ReduceSum)
#define PREPARE mrt_reducesum_prepare_f32
#define RUN mrt_reducesum_run_f32
#define AXES_INPUT_SINCE 13
#elif defined(MRT_OP_ReduceMean)
#define PREPARE mrt_reducemean_prepare_f32
#define RUN mrt_reducemean_run_f32
#define AXES_INPUT_SINCE 18
#define IS_MEAN 1
#else
#define PREPARE mrt_reducemax_prepare_f32
#define RUN mrt_reducemax_run_f32
#define AXES_INPUT_SINCE 18
#define IS_MAX 1
#endif

#if defined(IS_MAX)
/* NaN in either operand wins, like numpy.maximum.reduce. */
#define ACC(u, v) ((v) > (u) || (v) != (v) ? (v) : (u))
#define IDENTITY (-__builtin_inff())
#else
#define ACC(u, v) ((u) + (v))
#define IDENTITY 0.0f
#endif

typedef struct red_params {
  uint32_t ndim;              /* collapsed dims of X; 0: X is empty or Y is a copy */
  int copy;                   /* no axes and noop_with_empty_axes: Y = X */
  size_t n[MRT_MAX_DIMS];
  size_t sy[MRT_MAX_DIMS];    /* Y's element stride per dim, 0 for a reduced dim */
  unsigned char red[MRT_MAX_DIMS];
  float scale;                /* ReduceMean: 1 / reduced count */
} red_params;

MRT_PREPARE_CODE
mrt_status PREPARE(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_xy(ctx, node, 1, 2, 1, MRT_DTYPE_FLOAT32);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  const uint32_t rank = x->ndim;
  /* The axes, as a list of possibly negative ints. */
  int64_t axes[MRT_MAX_DIMS];
  uint32_t naxes = 0;
  if (node->opset >= AXES_INPUT_SINCE) {
    const mrt_tensor *t = mrt_in(node, 1);
    if (t) {
      if (!mrt_const_ints_ok(t))
        return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                             "input 1 (axes) must be a build-time constant int64 tensor");
      if (t->count > rank)
        return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                             "%zu axes given for an input of rank %u", t->count, rank);
      naxes = (uint32_t)t->count;
      for (uint32_t i = 0; i < naxes; i++) axes[i] = mrt_int_at(t, i);
    }
  } else {
    if (mrt_in(node, 1))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "opset %u takes axes as an attribute, not as an input", node->opset);
    const int64_t *a;
    const uint32_t na = mrt_attr_ints(node, "axes", &a);
    if (na > rank)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "%u axes given for an input of rank %u", na, rank);
    naxes = na;
    for (uint32_t i = 0; i < naxes; i++) axes[i] = a[i];
  }
  const int keep = mrt_attr_int(node, "keepdims", 1) != 0;
  red_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  unsigned char reduced[MRT_MAX_DIMS] = {0};
  if (naxes == 0 && mrt_attr_int(node, "noop_with_empty_axes", 0)) {
    p->copy = 1;
  } else if (naxes == 0) {
    for (uint32_t i = 0; i < rank; i++) reduced[i] = 1;
  }
  for (uint32_t i = 0; i < naxes; i++) {
    const int64_t a = mrt_norm_axis(axes[i], rank);
    if (a < 0)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "axis %lld out of range for rank %u", (long long)axes[i], rank);
    if (reduced[a])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis %lld is given twice",
                           (long long)axes[i]);
    reduced[a] = 1;
  }
  /* Y's expected shape. */
  int64_t yd[MRT_MAX_DIMS];
  uint32_t yn = 0;
  for (uint32_t i = 0; i < rank; i++) {
    if (!reduced[i])
      yd[yn++] = x->dims[i];
    else if (keep)
      yd[yn++] = 1;
  }
  int same = yn == y->ndim;
  for (uint32_t i = 0; same && i < yn; i++) same = yd[i] == y->dims[i];
  if (!same)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "output has rank %u and %zu values; reducing %u axes of the rank-%u input "
                         "with keepdims=%d gives rank %u",
                         y->ndim, y->count, naxes ? naxes : rank, rank, keep, yn);
  node->params = p;
  if (p->copy || x->count == 0) {
    size_t r = 1;
    for (uint32_t i = 0; i < rank; i++)
      if (reduced[i]) r *= (size_t)x->dims[i];
    p->scale = 1.0f / (float)r; /* an empty mean is 0 * inf = NaN, as in numpy */
    return MRT_STATUS_OK;
  }
  /* Collapse: size-1 dims go, same-kind neighbours merge. */
  uint32_t k = 0;
  size_t rcount = 1;
  for (uint32_t i = 0; i < rank; i++) {
    const size_t d = (size_t)x->dims[i];
    if (reduced[i]) rcount *= d;
    if (d == 1) continue;
    if (k > 0 && p->red[k - 1] == reduced[i]) {
      p->n[k - 1] *= d;
    } else {
      p->n[k] = d, p->red[k] = reduced[i];
      k++;
    }
  }
  if (k == 0) p->n[0] = 1, p->red[0] = 0, k = 1; /* one element */
  size_t s = 1;
  for (uint32_t i = k; i-- > 0;) {
    p->sy[i] = p->red[i] ? 0 : s;
    if (!p->red[i]) s *= p->n[i];
  }
  p->ndim = k;
  p->scale = 1.0f / (float)rcount;
  return MRT_STATUS_OK;
}

/* Reduction of one contiguous row, eight lanes at a time. */
static float red_row(size_t n, const float *restrict x) {
  mrt_vf8 acc = MRT_VSPLAT(IDENTITY);
  size_t i = 0;
  for (; i + MRT_VL <= n; i += MRT_VL) {
    const mrt_vf8 v = mrt_vload(x + i);
#if defined(IS_MAX)
    acc = mrt_vsel((v > acc) | (v != v), v, acc);
#else
    acc += v;
#endif
  }
  float r = IDENTITY;
  for (int j = 0; j < MRT_VL; j++) r = ACC(r, acc[j]);
  for (; i < n; i++) r = ACC(r, x[i]);
  return r;
}

void RUN(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const red_params *p = node->params;
  const mrt_tensor *xt = node->inputs[0], *yt = node->outputs[0];
  const float *x = xt->data;
  float *y = yt->data;
  if (p->copy) {
    mrt_copy_unless_aliased(xt, yt);
    return;
  }
  for (size_t i = 0; i < yt->count; i++) y[i] = IDENTITY;
  const uint32_t k = p->ndim;
  if (k > 0) {
    const size_t inner = p->n[k - 1];
    const int red_inner = p->red[k - 1];
    size_t idx[MRT_MAX_DIMS] = {0};
    size_t oy = 0;
    for (;;) {
      if (red_inner) {
        y[oy] = ACC(y[oy], red_row(inner, x));
      } else {
        float *restrict yr = y + oy;
        for (size_t j = 0; j < inner; j++) yr[j] = ACC(yr[j], x[j]);
      }
      x += inner;
      /* Odometer over the outer dims; X is read in memory order. */
      uint32_t d = k - 1;
      for (;;) {
        if (d == 0) goto done;
        d--;
        oy += p->sy[d];
        if (++idx[d] < p->n[d]) break;
        oy -= p->sy[d] * p->n[d];
        idx[d] = 0;
      }
    }
  }
done:
#if defined(IS_MEAN)
  for (size_t i = 0; i < yt->count; i++) y[i] *= p->scale;
#endif
  return;
}

#endif
