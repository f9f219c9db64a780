/* Strided views: what Transpose and Slice share whatever their element size (see strided.h). */
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
