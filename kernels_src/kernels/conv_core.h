/*
 * Convolution core (support unit `conv`, conv_core.c), shared by Conv and
 * FusedConv: compiled once, so a model using both ops does not carry two
 * copies, and left out of builds without a convolution. It runs on the GEMM
 * of the `gemm` support unit, which every op requiring `conv` requires too.
 *
 * lo / hi are the fused activation's clamp bounds (-inf, +inf for none).
 */
#ifndef MRT_CONV_CORE_H
#define MRT_CONV_CORE_H

#include "mrt_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

mrt_status mrt_conv_core_prepare_f32(mrt_node *node, mrt_ctx *ctx, float lo, float hi);
void mrt_conv_core_run_f32(const mrt_node *node, void *scratch);

#ifdef __cplusplus
}
#endif

#endif /* MRT_CONV_CORE_H */
