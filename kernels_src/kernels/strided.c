/* Strided gather (see strided.h). */
#include "strided.h"

MRT_PREPARE_CODE
void mrt_view_collapse(mrt_view *v) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < v->ndim; i++) {
    if (v->n[i] == 1) continue;
    if (v->n[i] == 0) { /* empty: nothing to copy */
      v->ndim = 1, v->n[0] = 0, v->s[0] = 1;
      return;
    }
    if (k > 0 && v->s[k - 1] == v->s[i] * (ptrdiff_t)v->n[i]) {
      v->n[k - 1] *= v->n[i];
      v->s[k - 1] = v->s[i];
    } else {
      v->n[k] = v->n[i], v->s[k] = v->s[i];
      k++;
    }
  }
  if (k == 0) v->n[0] = 1, v->s[0] = 1, k = 1;
  v->ndim = k;
}

/* The last two dims: rows of `cols` elements. Unit-stride rows are memcpy; other
 * rows are a 2-D transpose, done in tiles so reads and writes both stay in cache. */
static void copy2(size_t rows, ptrdiff_t sr, size_t cols, ptrdiff_t sc, const float *x, float *y) {
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
        const float *xr = x + (ptrdiff_t)r * sr;
        float *yr = y + r * cols;
        for (size_t c = c0; c < c1; c++) yr[c] = xr[(ptrdiff_t)c * sc];
      }
    }
  }
}

void mrt_view_copy_f32(const mrt_view *v, const float *x, float *y) {
  const uint32_t k = v->ndim;
  if (v->n[k - 1] == 0) return;
  if (k == 1) {
    copy2(1, 0, v->n[0], v->s[0], x, y);
    return;
  }
  const size_t rows = v->n[k - 2], cols = v->n[k - 1], block = rows * cols;
  size_t idx[MRT_MAX_DIMS] = {0};
  ptrdiff_t off = 0;
  for (;;) {
    copy2(rows, v->s[k - 2], cols, v->s[k - 1], x + off, y);
    y += block;
    uint32_t d = k - 2;
    for (;;) {
      if (d == 0) return;
      d--;
      off += v->s[d];
      if (++idx[d] < v->n[d]) break;
      off -= v->s[d] * (ptrdiff_t)v->n[d];
      idx[d] = 0;
    }
  }
}
