/*
 * Convolution core (support unit `conv`, conv_core.c), shared by Conv and
 * FusedConv: compiled once, so a model using both ops does not carry two
 * copies, and left out of builds without a convolution. It runs on the GEMM
 * of the `gemm` support unit, which every op requiring `conv` requires too.
 *
 * act is the fused activation (NULL: none); with `residual`, input 3 (R, Y's
 * shape) is added to the convolution before it, as FusedConv's Conv -> Add ->
 * activation pattern does.
 */
#ifndef MRT_CONV_CORE_H
#define MRT_CONV_CORE_H

#include "mrt_kernel.h"
#include "gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A fused activation: clamp to [lo, hi] (Relu, Clip), then LeakyRelu by alpha
 * (leaky != 0), then map (Sigmoid, SiLU, HardSwish: vmath.h; NULL for none). */
typedef struct mrt_conv_act {
  float lo, hi;
  int leaky;
  float alpha;
  mrt_sgemm_act_fn map;
} mrt_conv_act;

mrt_status mrt_conv_core_prepare_f32(mrt_node *node, mrt_ctx *ctx, const mrt_conv_act *act, int residual);
void mrt_conv_core_run_f32(const mrt_node *node, void *scratch);

#ifdef __cplusplus
}
#endif

#endif /* MRT_CONV_CORE_H */
