/*
 * Slice, every element type: one object per element size (registry
 * `instantiate: size`). The plan (starts/ends/axes/steps -> strided view and
 * start offset) is the same for every size and so lives in strided.c, compiled
 * once; each object here only binds it to its size's copy.
 */
#include "strided.h"

#if defined(MRT_OP_Slice)

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_slice_prepare)(mrt_node *node, mrt_ctx *ctx) {
  return mrt_slice_plan_prepare(node, ctx);
}

void MRT_KERNEL(mrt_slice_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const mrt_slice_plan *p = node->params;
  MRT_VIEW_COPY(MRT_T0)(&p->v, (const MRT_T0 *)node->inputs[0]->data + p->base, node->outputs[0]->data);
}

#endif
