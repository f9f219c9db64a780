/*
 * Conv (ai.onnx) and FusedConv (ai.minibuild: Conv + Relu/Clip), float32.
 * The work is in the conv support unit (mrt_conv_core_*, conv_core.c), shared
 * by both ops so a model using both links it once; this file maps each op onto it.
 */
#include "conv_core.h"
#include "gemm.h" /* mrt_sgemm_activation */

#if defined(MRT_TYPE_float32)

#if defined(MRT_OP_Conv)
MRT_PREPARE_CODE
mrt_status mrt_conv_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  return mrt_conv_core_prepare_f32(node, ctx, -__builtin_inff(), __builtin_inff());
}

void mrt_conv_run_f32(const mrt_node *node, void *scratch) { mrt_conv_core_run_f32(node, scratch); }
#endif

#if defined(MRT_OP_FusedConv)
MRT_PREPARE_CODE
mrt_status mrt_fusedconv_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  float lo, hi;
  const mrt_status st = mrt_sgemm_activation(ctx, node, &lo, &hi);
  if (st != MRT_STATUS_OK) return st;
  return mrt_conv_core_prepare_f32(node, ctx, lo, hi);
}

void mrt_fusedconv_run_f32(const mrt_node *node, void *scratch) {
  mrt_conv_core_run_f32(node, scratch);
}
#endif

#endif /* MRT_TYPE_float32 */
