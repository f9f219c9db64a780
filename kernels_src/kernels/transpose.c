/*
 * Transpose, every element type: one object per element size (registry
 * `instantiate: size`), since moving an element only needs its size. The plan
 * (perm -> strided view) is the same for every size and so lives in strided.c,
 * compiled once; each object here only binds it to its size's copy.
 */
#include "strided.h"

#if defined(MRT_OP_Transpose)

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_transpose_prepare)(mrt_node *node, mrt_ctx *ctx) {
  return mrt_transpose_plan(node, ctx);
}

void MRT_KERNEL(mrt_transpose_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  MRT_VIEW_COPY(MRT_T0)(node->params, node->inputs[0]->data, node->outputs[0]->data);
}

#endif
