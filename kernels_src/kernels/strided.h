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

#endif /* MRT_STRIDED_H */
