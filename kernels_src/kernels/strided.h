/*
 * Gathering a strided view of a tensor into a contiguous output: the engine
 * behind Transpose and Slice, for every element type. A view is up to
 * MRT_MAX_DIMS (size, input stride) pairs in output order.
 *
 * The copy depends only on the element size: Transpose and Slice are
 * instantiated per element size (registry `instantiate: size`) and each object
 * compiles the copy for its size from strided_copy.h, as a weak symbol, so a
 * library holding Transpose and Slice of one size links one copy, and a build
 * (or a static archive, which section GC does not thin) carries no copy for a
 * size it does not use.
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

/* Steps idx (the view's outer dims, all but the last two) to the next block in
 * row-major order and `off` (the block's input offset) with it; 0 when the
 * walk is over. The copies move a block of the last two dims per step. */
static inline int mrt_view_next(const mrt_view *v, size_t *idx, ptrdiff_t *off) {
  for (uint32_t d = v->ndim - 2; d-- > 0;) {
    *off += v->s[d];
    if (++idx[d] < v->n[d]) return 1;
    *off -= v->s[d] * (ptrdiff_t)v->n[d];
    idx[d] = 0;
  }
  return 0;
}

#endif /* MRT_STRIDED_H */
