/*
 * Gathering a strided view of a float32 tensor into a contiguous output: the
 * engine behind Transpose and Slice. A view is up to MRT_MAX_DIMS (size,
 * input stride) pairs in output order.
 */
#ifndef MRT_STRIDED_H
#define MRT_STRIDED_H

#include "mrt_kernel.h"

typedef struct mrt_view {
  uint32_t ndim;              /* >= 1 after mrt_view_collapse */
  size_t n[MRT_MAX_DIMS];
  ptrdiff_t s[MRT_MAX_DIMS];  /* input element strides (may be negative for Slice) */
} mrt_view;

/* Drops size-1 dims and merges neighbours that are contiguous in the input too,
 * so a transpose that moves whole blocks becomes a few long memcpy rows. */
void mrt_view_collapse(mrt_view *v);
/* y[...] = x[sum i_d * s_d] for every index of the view, in row-major order. */
void mrt_view_copy_f32(const mrt_view *v, const float *x, float *y);

#endif /* MRT_STRIDED_H */
