/*
 * The strided copy for the element size of the including kernel object (see
 * strided.h): y[...] = x[sum i_d * s_d] for every index of the view, in
 * row-major order. Included by Transpose and Slice, instantiated per element
 * size (MRT_T0 is uint8_t .. uint64_t). Weak, because both ops define the copy
 * of a size and a library needs only one: the linker keeps one and section GC
 * drops the other.
 */
#ifndef MRT_STRIDED_COPY_H
#define MRT_STRIDED_COPY_H

#include "strided.h"

#if defined(MRT_T0_IS_uint8)
#define MRT_VIEW_COPY_FN mrt_view_copy_u8
#elif defined(MRT_T0_IS_uint16)
#define MRT_VIEW_COPY_FN mrt_view_copy_u16
#elif defined(MRT_T0_IS_uint32)
#define MRT_VIEW_COPY_FN mrt_view_copy_u32
#elif defined(MRT_T0_IS_uint64)
#define MRT_VIEW_COPY_FN mrt_view_copy_u64
#else
#error "strided_copy.h: compile per element size (registry instantiate: size)"
#endif
typedef MRT_T0 mrt_view_elem;
#define MRT_VIEW_ROWS_FN MRT_CAT(MRT_VIEW_COPY_FN, _rows)

/* The last two dims: rows of `cols` elements. Unit-stride rows are memcpy; other
 * rows are a 2-D transpose, done in tiles so reads and writes both stay in cache. */
static void MRT_VIEW_ROWS_FN(size_t rows, ptrdiff_t sr, size_t cols, ptrdiff_t sc,
                             const mrt_view_elem *x, mrt_view_elem *y) {
  if (sc == 1) {
    for (size_t r = 0; r < rows; r++) memcpy(y + r * cols, x + (ptrdiff_t)r * sr, cols * sizeof *y);
    return;
  }
  enum { T = 16 };
  for (size_t r0 = 0; r0 < rows; r0 += T) {
    const size_t r1 = r0 + T < rows ? r0 + T : rows;
    for (size_t c0 = 0; c0 < cols; c0 += T) {
      const size_t c1 = c0 + T < cols ? c0 + T : cols;
      for (size_t r = r0; r < r1; r++) {
        const mrt_view_elem *xr = x + (ptrdiff_t)r * sr;
        mrt_view_elem *yr = y + r * cols;
        for (size_t c = c0; c < c1; c++) yr[c] = xr[(ptrdiff_t)c * sc];
      }
    }
  }
}

__attribute__((weak)) void MRT_VIEW_COPY_FN(const mrt_view *v, const void *xv, void *yv) {
  const mrt_view_elem *x = xv;
  mrt_view_elem *y = yv;
  const uint32_t k = v->ndim;
  if (v->n[k - 1] == 0) return;
  if (k == 1) {
    MRT_VIEW_ROWS_FN(1, 0, v->n[0], v->s[0], x, y);
    return;
  }
  const size_t rows = v->n[k - 2], cols = v->n[k - 1], block = rows * cols;
  size_t idx[MRT_MAX_DIMS] = {0};
  ptrdiff_t off = 0;
  for (;;) {
    MRT_VIEW_ROWS_FN(rows, v->s[k - 2], cols, v->s[k - 1], x + off, y);
    y += block;
    if (!mrt_view_next(v, idx, &off)) return;
  }
}

#endif /* MRT_STRIDED_COPY_H */
