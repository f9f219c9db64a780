/*
 * Small helpers shared by the float32 kernels. Header-only and static inline on
 * purpose: every (op, type) object is compiled on its own, so anything
 * non-static here would clash at link time; what is unused costs nothing.
 */
#ifndef MRT_KCOMMON_H
#define MRT_KCOMMON_H

#include "mrt_kernel.h"

/* Optional inputs/outputs may be past n_inputs or NULL: treat both as absent. */
static inline mrt_tensor *mrt_in(const mrt_node *node, uint32_t i) {
  return i < node->n_inputs ? node->inputs[i] : NULL;
}
static inline mrt_tensor *mrt_out(const mrt_node *node, uint32_t i) {
  return i < node->n_outputs ? node->outputs[i] : NULL;
}

static inline int mrt_same_dims(const mrt_tensor *a, const mrt_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (uint32_t i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* Normalises an ONNX axis in [-rank, rank) to [0, rank); -1 when out of range. */
static inline int64_t mrt_norm_axis(int64_t axis, int64_t rank) {
  if (axis < 0) axis += rank;
  return (axis < 0 || axis >= rank) ? -1 : axis;
}

static inline size_t mrt_prod(const int64_t *d, uint32_t from, uint32_t to) {
  size_t p = 1;
  for (uint32_t i = from; i < to; i++) p *= (size_t)d[i];
  return p;
}

/* Reads element i of an integer tensor (index inputs are int64, sometimes int32). */
static inline int64_t mrt_int_at(const mrt_tensor *t, size_t i) {
  return t->dtype == MRT_DTYPE_INT32 ? (int64_t)((const int32_t *)t->data)[i]
                                     : ((const int64_t *)t->data)[i];
}

/* An integer tensor usable at prepare: constant, int32/int64, data bound. */
static inline int mrt_const_ints_ok(const mrt_tensor *t) {
  return t && t->is_constant && t->data &&
         (t->dtype == MRT_DTYPE_INT64 || t->dtype == MRT_DTYPE_INT32);
}

/* Reshape-like ops: the converter may give input and output the same memory. */
static inline void mrt_copy_unless_aliased(const mrt_tensor *x, const mrt_tensor *y) {
  if (x->data != y->data) memcpy(y->data, x->data, y->nbytes);
}

#endif /* MRT_KCOMMON_H */
