/*
 * Smooth activations, float32: Mish (ai.onnx, opset 18) and SiLU (ai.minibuild:
 * the x * Sigmoid(x) pair fused at build time). One pass over the data, exp
 * through the vector polynomial of vmath.h, never libm per element.
 */
#include "kcommon.h"
#include "vmath.h"

#if defined(MRT_TYPE_float32) && (defined(MRT_OP_Mish) || defined(MRT_OP_SiLU))

MRT_PREPARE_CODE
static mrt_status act_check(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_xy(ctx, node, 1, 1, 1, MRT_DTYPE_FLOAT32);
  if (st) return st;
  if (!mrt_same_dims(node->inputs[0], node->outputs[0]))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output shape must equal the input shape");
  return MRT_STATUS_OK;
}

#if defined(MRT_OP_SiLU)
/* x * sigmoid(x) = x / (1 + e^-x): e^-x = inf for very negative x gives -0, as it should. */
static inline mrt_vf8 act_silu(mrt_vf8 x) { return x / (1.0f + mrt_vexp(-x)); }

void mrt_silu_f32(size_t n, const float *restrict x, float *restrict y) { MRT_VMAP(n, x, y, act_silu); }

MRT_PREPARE_CODE
mrt_status mrt_silu_prepare_f32(mrt_node *node, mrt_ctx *ctx) { return act_check(node, ctx); }

void mrt_silu_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  mrt_silu_f32(node->outputs[0]->count, node->inputs[0]->data, node->outputs[0]->data);
}
#endif

#if defined(MRT_OP_Mish)
/* x * tanh(softplus(x)) = x * n / (n + 2) with n = e^x (e^x + 2): no log, no
 * tanh, no cancellation. Past x = 20 the factor is 1 in float (and n would
 * overflow). */
static inline mrt_vf8 act_mish(mrt_vf8 x) {
  const mrt_vf8 e = mrt_vexp(MRT_VMIN(x, MRT_VSPLAT(20.0f)));
  const mrt_vf8 n = e * (e + 2.0f);
  return mrt_vsel(x > 20.0f, x, x * n / (n + 2.0f));
}

void mrt_mish_f32(size_t n, const float *restrict x, float *restrict y) { MRT_VMAP(n, x, y, act_mish); }

MRT_PREPARE_CODE
mrt_status mrt_mish_prepare_f32(mrt_node *node, mrt_ctx *ctx) { return act_check(node, ctx); }

void mrt_mish_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  mrt_mish_f32(node->outputs[0]->count, node->inputs[0]->data, node->outputs[0]->data);
}
#endif

#endif
