/*
 * Range(start, limit, delta): start + i * delta for i < max(ceil((limit - start) / delta), 0).
 * The output's length depends on the values, so minirt needs all three to be
 * build-time constants (and usually folds the node away); prepare checks the length
 * against the static output shape. Type family over T (float32, float64, int16/32/64,
 * float16: computed in float32, stash_type's default, and rounded once per element).
 */
#include "kcommon.h"
#include "half.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_Range)

#if defined(MRT_T0_IS_float16)
typedef float elem;
#define LOAD(p) mrt_half_to_float(*(const uint16_t *)(p))
#define STORE(v) mrt_float_to_half(v)
typedef uint16_t stored;
#else
typedef MRT_T0 elem;
#define LOAD(p) (*(const elem *)(p))
#define STORE(v) (v)
typedef MRT_T0 stored;
#endif

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_range_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_xy(ctx, node, 3, 3, 1, MRT_T0_DTYPE);
  if (st) return st;
  for (uint32_t i = 0; i < 3; i++) {
    const mrt_tensor *t = node->inputs[i];
    if (!t || t->count != 1 || !t->data)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input %u must be a scalar", i);
    if ((st = mrt_check_dtype(ctx, node, t, MRT_T0_DTYPE))) return st;
  }
  const mrt_tensor *y = node->outputs[0];
  if (y->ndim != 1) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output must be 1-D");
  if (node->inputs[0]->is_constant && node->inputs[1]->is_constant && node->inputs[2]->is_constant) {
    const elem start = LOAD(node->inputs[0]->data), limit = LOAD(node->inputs[1]->data),
               delta = LOAD(node->inputs[2]->data);
    if (delta == 0) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "delta is 0");
    const double q = ((double)limit - (double)start) / (double)delta;
    int64_t n = (int64_t)q;
    if ((double)n < q) n++; /* ceil without libm */
    if (n < 0) n = 0;
    if (n != y->dims[0])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "the range has %lld elements, the output %lld",
                           (long long)n, (long long)y->dims[0]);
  }
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_range_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const elem start = LOAD(node->inputs[0]->data), delta = LOAD(node->inputs[2]->data);
  stored *y = node->outputs[0]->data;
  const size_t n = node->outputs[0]->count;
  for (size_t i = 0; i < n; i++) y[i] = STORE((elem)(start + (elem)i * delta));
}

#endif
