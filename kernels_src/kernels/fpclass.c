/*
 * IsNaN and IsInf (detect_positive, detect_negative): float32, float64 and float16
 * in, bool out. Type family: MRT_T0 is the input's C type (float16 as its bits).
 */
#include "kcommon.h"

#if defined(MRT_KERNEL_SUFFIX) && (defined(MRT_OP_IsNaN) || defined(MRT_OP_IsInf))

typedef MRT_T0 elem;

#if defined(MRT_T0_IS_float16)
#define IS_NAN(v) (((v) & 0x7fff) > 0x7c00)
#define IS_POS_INF(v) ((v) == 0x7c00)
#define IS_NEG_INF(v) ((v) == 0xfc00)
#else
#if defined(MRT_T0_IS_float32)
#define FMAX FLT_MAX
#else
#define FMAX DBL_MAX
#endif
#define IS_NAN(v) ((v) != (v))
#define IS_POS_INF(v) ((v) > FMAX)
#define IS_NEG_INF(v) ((v) < -FMAX)
#endif

MRT_PREPARE_CODE
static mrt_status fp_prepare(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 1, 1, 1);
  if (st) return st;
  if (!node->inputs[0]) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input 0 is missing");
  if ((st = mrt_check_dtype(ctx, node, node->inputs[0], MRT_T0_DTYPE))) return st;
  if ((st = mrt_check_dtype(ctx, node, node->outputs[0], MRT_DTYPE_BOOL))) return st;
  if (!mrt_same_dims(node->inputs[0], node->outputs[0]))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output must have the input's shape");
  return MRT_STATUS_OK;
}

#if defined(MRT_OP_IsNaN)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_isnan_prepare)(mrt_node *node, mrt_ctx *ctx) { return fp_prepare(node, ctx); }

void MRT_KERNEL(mrt_isnan_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const elem *MRT_RESTRICT x = node->inputs[0]->data;
  uint8_t *MRT_RESTRICT y = node->outputs[0]->data;
  const size_t n = node->outputs[0]->count;
  for (size_t i = 0; i < n; i++) y[i] = (uint8_t)IS_NAN(x[i]);
}
#else
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_isinf_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = fp_prepare(node, ctx);
  if (st) return st;
  /* params holds the two flags, packed: bit 0 positive, bit 1 negative. */
  node->params = (void *)(uintptr_t)((mrt_attr_int(node, "detect_positive", 1) != 0) |
                                     ((mrt_attr_int(node, "detect_negative", 1) != 0) << 1));
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_isinf_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const uintptr_t flags = (uintptr_t)node->params;
  const uint8_t pos = flags & 1, neg = (flags >> 1) & 1;
  const elem *MRT_RESTRICT x = node->inputs[0]->data;
  uint8_t *MRT_RESTRICT y = node->outputs[0]->data;
  const size_t n = node->outputs[0]->count;
  for (size_t i = 0; i < n; i++) y[i] = (uint8_t)((IS_POS_INF(x[i]) & pos) | (IS_NEG_INF(x[i]) & neg));
}
#endif

#endif
