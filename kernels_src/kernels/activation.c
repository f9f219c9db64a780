/*
 * Smooth activations, float32: Mish (ai.onnx, opset 18) and SiLU (ai.minibuild:
 * the x * Sigmoid(x) pair fused at build time). One pass over the data through
 * vmath.h's vector functions, in the copy prepare picks for the CPU (AVX2 + FMA
 * on x86_64 where present), never libm per element.
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

typedef struct act_params {
  mrt_vmap_fn fn; /* vmath.h's loop for this CPU */
} act_params;

MRT_PREPARE_CODE
static mrt_status act_prepare(mrt_node *node, mrt_ctx *ctx, mrt_vmap_fn fn) {
  mrt_status st = act_check(node, ctx);
  if (st) return st;
  act_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->fn = fn;
  node->params = p;
  return MRT_STATUS_OK;
}

static void act_run(const mrt_node *node) {
  const act_params *p = node->params;
  p->fn(node->outputs[0]->count, node->inputs[0]->data, node->outputs[0]->data);
}

/* SiLU: x * sigmoid(x) = x / (1 + e^-x) (mrt_vsilu). */
#if defined(MRT_OP_SiLU)
MRT_PREPARE_CODE
mrt_status mrt_silu_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  return act_prepare(node, ctx, MRT_VSELECT(mrt_vmap_silu));
}

void mrt_silu_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  act_run(node);
}
#endif

/* Mish: x * tanh(softplus(x)) without log or tanh (mrt_vmish). */
#if defined(MRT_OP_Mish)
MRT_PREPARE_CODE
mrt_status mrt_mish_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  return act_prepare(node, ctx, MRT_VSELECT(mrt_vmap_mish));
}

void mrt_mish_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  act_run(node);
}
#endif

#endif
