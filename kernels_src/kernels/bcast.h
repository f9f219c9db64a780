/*
 * Multidirectional (numpy) broadcasting for elementwise float32 kernels.
 *
 * Prepare turns the shapes of a, b and y into a plan of at most MRT_MAX_DIMS
 * collapsed dimensions: size-1 output dims are dropped and neighbours with the
 * same broadcast pattern are merged, so [N,C,H,W] + [1,C,1,1] becomes
 * [N, C, H*W] with b strides [0, 1, 0] and the innermost loop is a flat
 * "vector op scalar" loop over H*W. Run then walks the outer dims and hands
 * each innermost row to a flat loop.
 */
#ifndef MRT_BCAST_H
#define MRT_BCAST_H

#include "mrt_kernel.h"

typedef struct mrt_bcast {
  uint32_t ndim;               /* collapsed rank; 0 means y is empty */
  size_t n[MRT_MAX_DIMS];      /* collapsed sizes */
  size_t sa[MRT_MAX_DIMS];     /* element strides of a and b, 0 where broadcast */
  size_t sb[MRT_MAX_DIMS];
} mrt_bcast;

/* Innermost row: y[i] = f(a[i*sa], b[i*sb]) with sa, sb in {0, 1} (both 0 only when not exact). */
typedef void (*mrt_bcast_row_fn)(size_t n, const float *a, size_t sa, const float *b, size_t sb,
                                 float *y);

/* Returns 0 when a or b does not broadcast to y's shape. With `exact`, y must be
 * exactly broadcast(a, b); without, y may be larger (the first step of a
 * variadic op whose later inputs widen the result). Ranks <= MRT_MAX_DIMS. */
int mrt_bcast_plan(mrt_bcast *p, const int64_t *ad, uint32_t an, const int64_t *bd, uint32_t bn,
                   const int64_t *yd, uint32_t yn, int exact);
void mrt_bcast_run_f32(const mrt_bcast *p, const float *a, const float *b, float *y,
                       mrt_bcast_row_fn row);
/* Rows r0 <= r < r1 of y (a row: the innermost collapsed dim, n[ndim - 1]
 * elements): a thread's share of the walk. Builds with the thread pool only. */
void mrt_bcast_run_rows_f32(const mrt_bcast *p, const float *a, const float *b, float *y, mrt_bcast_row_fn row,
                            size_t r0, size_t r1);
/* The number of rows: the product of the outer collapsed dims (0 when y is empty). */
static inline size_t mrt_bcast_rows(const mrt_bcast *p) {
  size_t r = p->ndim ? 1 : 0;
  for (uint32_t d = 0; d + 1 < p->ndim; d++) r *= p->n[d];
  return r;
}

/* Opset < 7 broadcasting (`broadcast` = 1 on Add, Sub, Mul, Div, Pow): b is aligned
 * with a at attribute `axis` (default: trailing). When the node asks for it, b's dims
 * padded to a's rank are written to vd and *bd, *bn point at them; otherwise they are
 * left as they are. An axis that does not fit is an error naming the node. Inline: in
 * each kernel's prepare it is smaller than a call into the support unit. */
MRT_PREPARE_CODE
static inline mrt_status mrt_bcast_legacy_dims(mrt_ctx *ctx, const mrt_node *node, const mrt_tensor *a, const mrt_tensor *b,
                                               int64_t vd[MRT_MAX_DIMS], const int64_t **bd, uint32_t *bn) {
  if (node->opset >= 7 || !mrt_attr_int(node, "broadcast", 0)) return MRT_STATUS_OK;
  int64_t axis = mrt_attr_int(node, "axis", (int64_t)a->ndim - (int64_t)b->ndim);
  if (axis < 0) axis += a->ndim;
  if (axis < 0 || axis + b->ndim > a->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "legacy broadcast axis %lld does not fit input 1 (rank %u) into input 0 (rank %u)",
                         (long long)axis, b->ndim, a->ndim);
  for (uint32_t j = 0; j < a->ndim; j++)
    vd[j] = (j >= axis && j < axis + b->ndim) ? b->dims[j - axis] : 1;
  *bd = vd, *bn = a->ndim;
  return MRT_STATUS_OK;
}


/*
 * The same plan for any element type and up to three inputs (Where, comparisons,
 * logic ops, Expand). Strides are in elements of each input; the walk hands the
 * row function every input's element offset and innermost stride (0 or 1) and the
 * output's element offset, and the row function indexes its own typed pointers.
 */
#define MRT_BCASTN_MAX_IN 3

typedef struct mrt_bcastn {
  uint32_t ndim;                               /* collapsed rank; 0 means y is empty */
  uint32_t nin;
  size_t n[MRT_MAX_DIMS];
  size_t s[MRT_BCASTN_MAX_IN][MRT_MAX_DIMS];   /* per input, 0 where broadcast */
} mrt_bcastn;

typedef void (*mrt_bcastn_row_fn)(const mrt_node *node, size_t n, const size_t *off,
                                  const size_t *step, size_t yoff);

/* Returns 0 when an input does not broadcast to y's shape, or (with `exact`) when
 * y is larger than broadcast(inputs). 1 <= nin <= MRT_BCASTN_MAX_IN. */
int mrt_bcastn_plan(mrt_bcastn *p, uint32_t nin, const mrt_tensor *const *in, const mrt_tensor *y,
                    int exact);
void mrt_bcastn_run(const mrt_bcastn *p, const mrt_node *node, mrt_bcastn_row_fn row);

#endif /* MRT_BCAST_H */
