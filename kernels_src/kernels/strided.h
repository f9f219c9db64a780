/*
 * Gathering a strided view of a tensor into a contiguous output: the engine
 * behind Transpose and Slice, for every element type. A view is up to
 * MRT_MAX_DIMS (size, input stride) pairs in output order.
 *
 * The copies depend only on the element size, so there is one per size
 * (u8/u16/u32/u64): Transpose and Slice are instantiated per element size
 * (registry `instantiate: size`) and each object calls its own. Their plans
 * (perm or starts/ends -> view) do not depend on the type at all, so they live
 * here too, compiled once however many sizes a build selects; section GC drops
 * whatever a build does not call.
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

/* y[...] = x[sum i_d * s_d] for every index of the view, in row-major order,
 * for elements of 1, 2, 4 and 8 bytes. */
void mrt_view_copy_u8(const mrt_view *v, const void *x, void *y);
void mrt_view_copy_u16(const mrt_view *v, const void *x, void *y);
void mrt_view_copy_u32(const mrt_view *v, const void *x, void *y);
void mrt_view_copy_u64(const mrt_view *v, const void *x, void *y);

/* The copy for elements of C type T (an instantiation's MRT_T0). */
#define MRT_VIEW_COPY(T)                                                             \
  _Generic((T)0, uint8_t: mrt_view_copy_u8, uint16_t: mrt_view_copy_u16,             \
           uint32_t: mrt_view_copy_u32, uint64_t: mrt_view_copy_u64)

/* Transpose's prepare for every element type: checks the node and sets
 * node->params to the mrt_view of its input. */
mrt_status mrt_transpose_plan(mrt_node *node, mrt_ctx *ctx);

/* Slice's prepare for every element type: checks the node and sets node->params
 * to an mrt_slice_plan. */
typedef struct mrt_slice_plan {
  mrt_view v;
  ptrdiff_t base;  /* element offset of the first element taken */
} mrt_slice_plan;
mrt_status mrt_slice_plan_prepare(mrt_node *node, mrt_ctx *ctx);

#endif /* MRT_STRIDED_H */
