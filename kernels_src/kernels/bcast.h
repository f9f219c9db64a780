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

#endif /* MRT_BCAST_H */
