/*
 * Elementwise ops with a bool result and numpy broadcasting: the comparisons
 * Equal, Less, Greater, LessOrEqual, GreaterOrEqual (any numeric T, bool out) and
 * the logic ops And, Or, Xor (bool in and out), plus the unary Not.
 *
 * Type family (registry `type_constraints` form): MRT_T0 is the C type of A and B,
 * MRT_T1 the output's (bool, uint8_t). One op per object, picked by MRT_OP_<op>.
 * The innermost row is one of four flat loops (both inputs vary, or one of them is
 * a scalar), which the compiler vectorises: these ops are memory bound.
 */
#include "kcommon.h"
#include "bcast.h"

#if defined(MRT_KERNEL_SUFFIX)

#if defined(MRT_OP_Equal)
#define CMP(u, v) ((u) == (v))
#define STEM(x) mrt_equal_##x
#elif defined(MRT_OP_Less)
#define CMP(u, v) ((u) < (v))
#define STEM(x) mrt_less_##x
#elif defined(MRT_OP_Greater)
#define CMP(u, v) ((u) > (v))
#define STEM(x) mrt_greater_##x
#elif defined(MRT_OP_LessOrEqual)
#define CMP(u, v) ((u) <= (v))
#define STEM(x) mrt_less_or_equal_##x
#elif defined(MRT_OP_GreaterOrEqual)
#define CMP(u, v) ((u) >= (v))
#define STEM(x) mrt_greater_or_equal_##x
#elif defined(MRT_OP_And)
#define CMP(u, v) (((u) != 0) & ((v) != 0))
#define STEM(x) mrt_and_##x
#define LOGIC 1
#elif defined(MRT_OP_Or)
#define CMP(u, v) (((u) != 0) | ((v) != 0))
#define STEM(x) mrt_or_##x
#define LOGIC 1
#elif defined(MRT_OP_Xor)
#define CMP(u, v) (((u) != 0) ^ ((v) != 0))
#define STEM(x) mrt_xor_##x
#define LOGIC 1
#endif

#if defined(CMP)

typedef MRT_T0 elem;

static void cmp_row(const mrt_node *node, size_t n, const size_t *off, const size_t *step,
                    size_t yoff) {
  const elem *MRT_RESTRICT a = (const elem *)node->inputs[0]->data + off[0];
  const elem *MRT_RESTRICT b = (const elem *)node->inputs[1]->data + off[1];
  uint8_t *MRT_RESTRICT y = (uint8_t *)node->outputs[0]->data + yoff;
  if (step[0] && step[1]) {
    for (size_t i = 0; i < n; i++) y[i] = (uint8_t)CMP(a[i], b[i]);
  } else if (step[0]) {
    const elem v = b[0];
    for (size_t i = 0; i < n; i++) y[i] = (uint8_t)CMP(a[i], v);
  } else if (step[1]) {
    const elem u = a[0];
    for (size_t i = 0; i < n; i++) y[i] = (uint8_t)CMP(u, b[i]);
  } else {
    memset(y, (uint8_t)CMP(a[0], b[0]), n);
  }
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(STEM(prepare))(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 2, 1, 1);
  if (st) return st;
  const mrt_tensor *in[2] = {node->inputs[0], node->inputs[1]};
  const mrt_tensor *y = node->outputs[0];
  for (uint32_t i = 0; i < 2; i++) {
    if (!in[i]) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input %u is missing", i);
    if ((st = mrt_check_dtype(ctx, node, in[i], MRT_T0_DTYPE))) return st;
  }
  if ((st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_BOOL))) return st;
  mrt_bcastn *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  if (!mrt_bcastn_plan(p, 2, in, y, 1))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "inputs (ranks %u, %u) do not broadcast to the output shape (rank %u)",
                         in[0]->ndim, in[1]->ndim, y->ndim);
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(STEM(run))(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  mrt_bcastn_run(node->params, node, cmp_row);
}

#endif /* CMP */

#if defined(MRT_OP_Not)
MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_not_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_xy(ctx, node, 1, 1, 1, MRT_DTYPE_BOOL);
  if (st) return st;
  if (!mrt_same_dims(node->inputs[0], node->outputs[0]))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output must have the input's shape");
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_not_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const uint8_t *MRT_RESTRICT x = node->inputs[0]->data;
  uint8_t *MRT_RESTRICT y = node->outputs[0]->data;
  const size_t n = node->outputs[0]->count;
  for (size_t i = 0; i < n; i++) y[i] = (uint8_t)(x[i] == 0);
}
#endif /* MRT_OP_Not */

#endif /* MRT_KERNEL_SUFFIX */
