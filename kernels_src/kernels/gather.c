/*
 * Index-driven copies: Gather (any axis), GatherElements and GatherND (batch_dims).
 *
 * Type family: MRT_T0 is the element type of data and output, instantiated by size
 * (the registry's `instantiate: {T: size}`: these ops only move elements, so
 * float32 and int32 share one object); for Gather and GatherElements MRT_T1 is the
 * index type (int32 or int64); GatherND's indices are always int64.
 *
 * Indices are data at run time (token ids, positions). Negative ones count from the
 * end; one still out of range gives zeros instead of reading outside the tensor,
 * since run() cannot fail. Constant indices are checked at prepare.
 */
#include "kcommon.h"

#if defined(MRT_KERNEL_SUFFIX) && (defined(MRT_OP_Gather) || defined(MRT_OP_GatherElements) || defined(MRT_OP_GatherND))

typedef MRT_T0 elem;
#if defined(MRT_OP_GatherND)
typedef int64_t index_t;
#define INDEX_DTYPE MRT_DTYPE_INT64
#else
typedef MRT_T1 index_t;
#define INDEX_DTYPE MRT_T1_DTYPE
#endif

/* The index normalised into [0, n), or -1 when it is outside [-n, n). */
static inline int64_t norm_index(int64_t i, int64_t n) {
  if (i < 0) i += n;
  return (i < 0 || i >= n) ? -1 : i;
}

MRT_PREPARE_CODE
static mrt_status check_io(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 2, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *ind = node->inputs[1], *y = node->outputs[0];
  if (!x || !ind) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "data and indices are required");
  if ((st = mrt_check_dtype(ctx, node, ind, INDEX_DTYPE))) return st;
  if ((st = mrt_check_dtype(ctx, node, y, x->dtype))) return st;
  if (x->count && x->nbytes / x->count != sizeof(elem))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "element size is not %zu bytes", sizeof(elem));
  return MRT_STATUS_OK;
}

/* Constant indices are known now: report one out of range instead of zero-filling. */
MRT_PREPARE_CODE
static mrt_status check_const_indices(mrt_node *node, mrt_ctx *ctx, const mrt_tensor *ind,
                                      const int64_t *bound, size_t nbound) {
  if (!ind->is_constant || !ind->data) return MRT_STATUS_OK;
  const index_t *v = ind->data;
  for (size_t i = 0; i < ind->count; i++) {
    const int64_t n = bound[nbound == 1 ? 0 : i % nbound];
    if (norm_index((int64_t)v[i], n) < 0)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "index %lld at %zu is outside [-%lld, %lld)",
                           (long long)v[i], i, (long long)n, (long long)n);
  }
  return MRT_STATUS_OK;
}

#if defined(MRT_OP_Gather)

typedef struct gather_params {
  size_t outer, n, inner, m; /* data viewed as [outer, n, inner]; m indices */
} gather_params;

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_gather_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = check_io(node, ctx);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *ind = node->inputs[1], *y = node->outputs[0];
  const int64_t axis = mrt_norm_axis(mrt_attr_int(node, "axis", 0), x->ndim);
  if (axis < 0)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis is outside the data's rank %u", x->ndim);
  if (y->ndim != x->ndim - 1 + ind->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output rank must be %u", x->ndim - 1 + ind->ndim);
  for (uint32_t i = 0; i < y->ndim; i++) {
    const int64_t want = i < axis ? x->dims[i] : i < axis + ind->ndim ? ind->dims[i - axis] : x->dims[i - ind->ndim + 1];
    if (y->dims[i] != want)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output dim %u must be %lld", i, (long long)want);
  }
  gather_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->outer = mrt_prod(x->dims, 0, (uint32_t)axis);
  p->n = (size_t)x->dims[axis];
  p->inner = mrt_prod(x->dims, (uint32_t)axis + 1, x->ndim);
  p->m = ind->count;
  node->params = p;
  return check_const_indices(node, ctx, ind, &x->dims[axis], 1);
}

void MRT_KERNEL(mrt_gather_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const gather_params *p = node->params;
  const elem *x = node->inputs[0]->data;
  const index_t *ind = node->inputs[1]->data;
  elem *y = node->outputs[0]->data;
  const size_t inner = p->inner, n = p->n;
  for (size_t o = 0; o < p->outer; o++) {
    const elem *xo = x + o * n * inner;
    for (size_t j = 0; j < p->m; j++, y += inner) {
      const int64_t k = norm_index((int64_t)ind[j], (int64_t)n);
      if (k < 0) {
        memset(y, 0, inner * sizeof(elem));
      } else if (inner == 1) {
        y[0] = xo[k];
      } else {
        memcpy(y, xo + (size_t)k * inner, inner * sizeof(elem));
      }
    }
  }
}

#elif defined(MRT_OP_GatherElements)

typedef struct gather_elements_params {
  uint32_t ndim, axis;
  int64_t dims[MRT_MAX_DIMS];     /* of indices and output */
  size_t xstride[MRT_MAX_DIMS];   /* data's strides, in elements */
  int64_t n;                      /* data's size along axis */
} gather_elements_params;

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_gather_elements_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = check_io(node, ctx);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *ind = node->inputs[1], *y = node->outputs[0];
  const int64_t axis = mrt_norm_axis(mrt_attr_int(node, "axis", 0), x->ndim);
  if (axis < 0)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis is outside the data's rank %u", x->ndim);
  if (ind->ndim != x->ndim || !mrt_same_dims(ind, y))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "indices must have the data's rank and the output the indices' shape");
  gather_elements_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  size_t s = 1;
  for (uint32_t i = x->ndim; i-- > 0;) {
    if (i != axis && ind->dims[i] > x->dims[i])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "indices dim %u exceeds the data's", i);
    p->dims[i] = ind->dims[i];
    p->xstride[i] = s;
    s *= (size_t)x->dims[i];
  }
  p->ndim = x->ndim;
  p->axis = (uint32_t)axis;
  p->n = x->dims[axis];
  node->params = p;
  return check_const_indices(node, ctx, ind, &p->n, 1);
}

void MRT_KERNEL(mrt_gather_elements_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const gather_elements_params *p = node->params;
  const elem *x = node->inputs[0]->data;
  const index_t *ind = node->inputs[1]->data;
  elem *y = node->outputs[0]->data;
  const size_t count = node->outputs[0]->count;
  if (count == 0) return;
  const uint32_t r = p->ndim, last = r - 1;
  const size_t inner = (size_t)p->dims[last];
  const size_t sa = p->xstride[p->axis], sl = p->xstride[last];
  const int axis_inner = p->axis == last;
  int64_t idx[MRT_MAX_DIMS] = {0};
  size_t base = 0; /* data offset of the row's start, without the axis term */
  for (size_t done = 0; done < count; done += inner) {
    for (size_t i = 0; i < inner; i++) {
      const int64_t k = norm_index((int64_t)ind[done + i], p->n);
      const size_t off = base + (axis_inner ? 0 : i * sl);
      y[done + i] = k < 0 ? (elem)0 : x[off + (size_t)k * sa];
    }
    /* odometer over the outer dims; the axis dim adds no offset (the index does) */
    for (uint32_t d = last; d-- > 0;) {
      if (d != p->axis) base += p->xstride[d];
      if (++idx[d] < p->dims[d]) break;
      if (d != p->axis) base -= p->xstride[d] * (size_t)p->dims[d];
      idx[d] = 0;
    }
  }
}

#elif defined(MRT_OP_GatherND)

typedef struct gather_nd_params {
  size_t batches;               /* product of the batch dims */
  size_t tuples;                /* index tuples per batch */
  size_t k;                     /* tuple length */
  size_t slice;                 /* elements copied per tuple */
  size_t batch_stride;          /* data elements per batch */
  int64_t bound[MRT_MAX_DIMS];  /* data dims the tuple indexes */
  size_t stride[MRT_MAX_DIMS];  /* and their strides */
} gather_nd_params;

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_gather_nd_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = check_io(node, ctx);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *ind = node->inputs[1], *y = node->outputs[0];
  const int64_t b = mrt_attr_int(node, "batch_dims", 0);
  if (ind->ndim < 1 || b < 0 || b >= ind->ndim || b >= x->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "batch_dims %lld does not fit the ranks",
                         (long long)b);
  const int64_t k = ind->dims[ind->ndim - 1];
  if (k < 1 || b + k > x->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "index tuples of length %lld do not fit data of rank %u", (long long)k, x->ndim);
  for (uint32_t i = 0; i < b; i++)
    if (x->dims[i] != ind->dims[i])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "batch dim %u differs between data and indices", i);
  gather_nd_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->batches = mrt_prod(x->dims, 0, (uint32_t)b);
  p->tuples = mrt_prod(ind->dims, (uint32_t)b, ind->ndim - 1);
  p->k = (size_t)k;
  p->slice = mrt_prod(x->dims, (uint32_t)(b + k), x->ndim);
  p->batch_stride = mrt_prod(x->dims, (uint32_t)b, x->ndim);
  size_t s = p->slice;
  for (int64_t j = k; j-- > 0;) {
    p->bound[j] = x->dims[b + j];
    p->stride[j] = s;
    s *= (size_t)x->dims[b + j];
  }
  if (y->count != p->batches * p->tuples * p->slice)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output must have %zu elements",
                         p->batches * p->tuples * p->slice);
  node->params = p;
  return check_const_indices(node, ctx, ind, p->bound, p->k);
}

void MRT_KERNEL(mrt_gather_nd_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const gather_nd_params *p = node->params;
  const elem *x = node->inputs[0]->data;
  const int64_t *ind = node->inputs[1]->data;
  elem *y = node->outputs[0]->data;
  for (size_t bi = 0; bi < p->batches; bi++) {
    const elem *xb = x + bi * p->batch_stride;
    for (size_t t = 0; t < p->tuples; t++, ind += p->k, y += p->slice) {
      size_t off = 0;
      int ok = 1;
      for (size_t j = 0; j < p->k; j++) {
        const int64_t v = norm_index(ind[j], p->bound[j]);
        ok &= v >= 0;
        off += (size_t)(v < 0 ? 0 : v) * p->stride[j];
      }
      if (ok) {
        memcpy(y, xb + off, p->slice * sizeof(elem));
      } else {
        memset(y, 0, p->slice * sizeof(elem));
      }
    }
  }
}

#endif
#endif /* MRT_KERNEL_SUFFIX and a gather op */
