/*
 * Conv (ai.onnx), FusedConv and FusedConvAct (ai.minibuild: Conv [+ Add of a
 * residual] + an activation), float32. The work is in the conv support unit
 * (mrt_conv_core_*, conv_core.c), shared by the three ops so a model using
 * several links it once; this file maps each op onto it.
 *
 * The fused ops' inputs are X, W, optional B and, with the attribute
 * residual = 1, R (Y's shape), added before the activation. FusedConv's
 * `activation` is Relu, Clip (activation_params [min, max]) or LeakyRelu
 * ([alpha]); FusedConvAct's is Sigmoid, SiLU or HardSwish, run by vmath.h's
 * array functions, the very ones the standalone kernels run, so fused outputs
 * equal unfused ones. They are two ops so that a build whose convolutions
 * only clamp (MobileNetV2) carries none of the vmath code.
 */
#include "conv_core.h"
#include "gemm.h" /* mrt_sgemm_activation */

#if defined(MRT_TYPE_float32)

#if defined(MRT_OP_Conv)
MRT_PREPARE_CODE
mrt_status mrt_conv_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  return mrt_conv_core_prepare_f32(node, ctx, NULL, 0);
}

void mrt_conv_run_f32(const mrt_node *node, void *scratch) { mrt_conv_core_run_f32(node, scratch); }
#endif

#if defined(MRT_OP_FusedConv) || defined(MRT_OP_FusedConvAct)
/* The residual attribute, then the core's prepare. */
MRT_PREPARE_CODE
static mrt_status mrt_fused_prepare(mrt_node *node, mrt_ctx *ctx, const mrt_conv_act *act) {
  const int64_t residual = mrt_attr_int(node, "residual", 0);
  if (residual != 0 && residual != 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "residual must be 0 or 1, got %lld",
                         (long long)residual);
  return mrt_conv_core_prepare_f32(node, ctx, act, (int)residual);
}
#endif

#if defined(MRT_OP_FusedConv)
MRT_PREPARE_CODE
mrt_status mrt_fusedconv_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  const float inf = __builtin_inff();
  mrt_conv_act act = {-inf, inf, 0, 0.0f, NULL};
  if (mrt_attr_string_is(node, "activation", "", "LeakyRelu")) {
    const float *ap = NULL;
    const uint32_t np = mrt_attr_floats(node, "activation_params", &ap);
    if (np > 1)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "activation_params of LeakyRelu must hold [alpha], got %u values", np);
    act.leaky = 1;
    act.alpha = np == 1 ? ap[0] : 0.01f;
  } else {
    const mrt_status st = mrt_sgemm_activation(ctx, node, &act.lo, &act.hi);
    if (st != MRT_STATUS_OK) return st;
  }
  return mrt_fused_prepare(node, ctx, &act);
}

void mrt_fusedconv_run_f32(const mrt_node *node, void *scratch) { mrt_conv_core_run_f32(node, scratch); }
#endif

#if defined(MRT_OP_FusedConvAct)
#include "vmath.h"

MRT_PREPARE_CODE
mrt_status mrt_fusedconvact_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  const float inf = __builtin_inff();
  mrt_conv_act act = {-inf, inf, 0, 0.0f, NULL};
  if (mrt_attr_string_is(node, "activation", "", "Sigmoid"))
    act.map = MRT_VSELECT(mrt_vmap_sigmoid);
  else if (mrt_attr_string_is(node, "activation", "", "SiLU"))
    act.map = MRT_VSELECT(mrt_vmap_silu);
  else if (mrt_attr_string_is(node, "activation", "", "HardSwish"))
    act.map = MRT_VSELECT(mrt_vmap_hardswish);
  else
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "activation must be Sigmoid, SiLU or HardSwish (FusedConv has the clamps)");
  return mrt_fused_prepare(node, ctx, &act);
}

void mrt_fusedconvact_run_f32(const mrt_node *node, void *scratch) { mrt_conv_core_run_f32(node, scratch); }
#endif

#endif /* MRT_TYPE_float32 */
