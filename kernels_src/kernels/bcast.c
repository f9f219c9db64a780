/* Broadcast planning and the outer-dimension walk (see bcast.h). */
#include "bcast.h"

MRT_PREPARE_CODE
int mrt_bcast_plan(mrt_bcast *p, const int64_t *ad, uint32_t an, const int64_t *bd, uint32_t bn,
                   const int64_t *yd, uint32_t yn, int exact) {
  size_t n[MRT_MAX_DIMS];
  unsigned char ua[MRT_MAX_DIMS], ub[MRT_MAX_DIMS]; /* 1 where the input varies */
  uint32_t k = 0;
  int empty = 0;
  if (an > yn || bn > yn || yn > MRT_MAX_DIMS) return 0;
  for (uint32_t i = 0; i < yn; i++) {
    /* Align ranks on the right; missing leading dims are 1. */
    int64_t a = i + an >= yn ? ad[i + an - yn] : 1;
    int64_t b = i + bn >= yn ? bd[i + bn - yn] : 1;
    int64_t y = yd[i];
    if ((a != y && a != 1) || (b != y && b != 1) || (exact && a != y && b != y)) return 0;
    if (y == 0) empty = 1;
    if (y == 1) continue; /* contributes nothing to any offset */
    unsigned char va = a != 1, vb = b != 1;
    if (k > 0 && ua[k - 1] == va && ub[k - 1] == vb) {
      n[k - 1] *= (size_t)y; /* same pattern as the outer neighbour: one flat dim */
    } else {
      n[k] = (size_t)y, ua[k] = va, ub[k] = vb;
      k++;
    }
  }
  if (empty) {
    p->ndim = 0;
    return 1;
  }
  if (k == 0) { /* all ones: a single element */
    n[0] = 1, ua[0] = ub[0] = 1;
    k = 1;
  }
  /* Strides of each input over the collapsed dims: contiguous in its varying dims. */
  size_t ra = 1, rb = 1;
  for (uint32_t i = k; i-- > 0;) {
    p->n[i] = n[i];
    p->sa[i] = ua[i] ? ra : 0;
    p->sb[i] = ub[i] ? rb : 0;
    if (ua[i]) ra *= n[i];
    if (ub[i]) rb *= n[i];
  }
  p->ndim = k;
  return 1;
}

#if MRT_ENABLE_THREADS
/* Threads split a plan by its rows (binary.c): the walk starts at any row. */
void mrt_bcast_run_rows_f32(const mrt_bcast *p, const float *a, const float *b, float *y, mrt_bcast_row_fn row,
                            size_t r0, size_t r1) {
  const uint32_t k = p->ndim;
  if (k == 0 || r0 >= r1) return;
  const size_t inner = p->n[k - 1];
  size_t idx[MRT_MAX_DIMS] = {0};
  size_t oa = 0, ob = 0;
  /* r0's place on the odometer over the outer dims. */
  size_t q = r0;
  for (uint32_t d = k - 1; d-- > 0; q /= p->n[d]) {
    idx[d] = q % p->n[d];
    oa += idx[d] * p->sa[d], ob += idx[d] * p->sb[d];
  }
  y += r0 * inner;
  for (size_t r = r0;;) {
    row(inner, a + oa, p->sa[k - 1], b + ob, p->sb[k - 1], y);
    if (++r == r1) return;
    y += inner;
    /* Odometer over the outer dims, keeping input offsets incrementally
     * (r < r1 <= the row count: it never runs off the end). */
    for (uint32_t d = k - 1;;) {
      d--;
      oa += p->sa[d], ob += p->sb[d];
      if (++idx[d] < p->n[d]) break;
      oa -= p->sa[d] * p->n[d], ob -= p->sb[d] * p->n[d];
      idx[d] = 0;
    }
  }
}

void mrt_bcast_run_f32(const mrt_bcast *p, const float *a, const float *b, float *y,
                       mrt_bcast_row_fn row) {
  mrt_bcast_run_rows_f32(p, a, b, y, row, 0, mrt_bcast_rows(p));
}
#else
void mrt_bcast_run_f32(const mrt_bcast *p, const float *a, const float *b, float *y,
                       mrt_bcast_row_fn row) {
  const uint32_t k = p->ndim;
  if (k == 0) return;
  const size_t inner = p->n[k - 1];
  size_t idx[MRT_MAX_DIMS] = {0};
  size_t oa = 0, ob = 0;
  for (;;) {
    row(inner, a + oa, p->sa[k - 1], b + ob, p->sb[k - 1], y);
    y += inner;
    /* Odometer over the outer dims, keeping input offsets incrementally. */
    uint32_t d = k - 1;
    for (;;) {
      if (d == 0) return;
      d--;
      oa += p->sa[d], ob += p->sb[d];
      if (++idx[d] < p->n[d]) break;
      oa -= p->sa[d] * p->n[d], ob -= p->sb[d] * p->n[d];
      idx[d] = 0;
    }
  }
}
#endif

MRT_PREPARE_CODE
int mrt_bcastn_plan(mrt_bcastn *p, uint32_t nin, const mrt_tensor *const *in, const mrt_tensor *y,
                    int exact) {
  size_t n[MRT_MAX_DIMS];
  unsigned char v[MRT_BCASTN_MAX_IN][MRT_MAX_DIMS]; /* 1 where input j varies */
  uint32_t k = 0;
  const uint32_t yn = y->ndim;
  int empty = 0;
  if (nin < 1 || nin > MRT_BCASTN_MAX_IN || yn > MRT_MAX_DIMS) return 0;
  for (uint32_t j = 0; j < nin; j++)
    if (in[j]->ndim > yn) return 0;
  for (uint32_t i = 0; i < yn; i++) {
    const int64_t yd = y->dims[i];
    unsigned char cur[MRT_BCASTN_MAX_IN];
    int some_equal = yd == 1;
    for (uint32_t j = 0; j < nin; j++) {
      const uint32_t an = in[j]->ndim;
      const int64_t a = i + an >= yn ? in[j]->dims[i + an - yn] : 1; /* right-aligned */
      if (a != yd && a != 1) return 0;
      some_equal |= a == yd;
      cur[j] = a != 1;
    }
    if (exact && !some_equal) return 0;
    if (yd == 0) empty = 1;
    if (yd == 1) continue;
    int same = k > 0;
    for (uint32_t j = 0; j < nin && same; j++) same = v[j][k - 1] == cur[j];
    if (same) {
      n[k - 1] *= (size_t)yd; /* same pattern as the outer neighbour: one flat dim */
    } else {
      n[k] = (size_t)yd;
      for (uint32_t j = 0; j < nin; j++) v[j][k] = cur[j];
      k++;
    }
  }
  p->nin = nin;
  if (empty) {
    p->ndim = 0;
    return 1;
  }
  if (k == 0) { /* all ones: a single element */
    n[0] = 1;
    for (uint32_t j = 0; j < nin; j++) v[j][0] = 1;
    k = 1;
  }
  for (uint32_t j = 0; j < nin; j++) {
    size_t r = 1;
    for (uint32_t i = k; i-- > 0;) {
      p->s[j][i] = v[j][i] ? r : 0;
      if (v[j][i]) r *= n[i];
    }
  }
  for (uint32_t i = 0; i < k; i++) p->n[i] = n[i];
  p->ndim = k;
  return 1;
}

void mrt_bcastn_run(const mrt_bcastn *p, const mrt_node *node, mrt_bcastn_row_fn row) {
  const uint32_t k = p->ndim, nin = p->nin;
  if (k == 0) return;
  const size_t inner = p->n[k - 1];
  size_t idx[MRT_MAX_DIMS] = {0};
  size_t off[MRT_BCASTN_MAX_IN] = {0}, step[MRT_BCASTN_MAX_IN] = {0};
  for (uint32_t j = 0; j < nin; j++) step[j] = p->s[j][k - 1];
  size_t yoff = 0;
  for (;;) {
    row(node, inner, off, step, yoff);
    yoff += inner;
    uint32_t d = k - 1;
    for (;;) { /* odometer over the outer dims */
      if (d == 0) return;
      d--;
      for (uint32_t j = 0; j < nin; j++) off[j] += p->s[j][d];
      if (++idx[d] < p->n[d]) break;
      for (uint32_t j = 0; j < nin; j++) off[j] -= p->s[j][d] * p->n[d];
      idx[d] = 0;
    }
  }
}
