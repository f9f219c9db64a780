/*
 * Where(condition, X, Y) with numpy broadcasting of all three inputs.
 *
 * Type family: MRT_T0 is the condition's (bool), MRT_T1 the C type of X, Y and the
 * output. Where only moves elements, so the registry instantiates T by size: one
 * object per element size serves float32, int32 and uint32 alike. The innermost
 * row has a flat loop per stride pattern (each input varying or a scalar), which
 * the compiler turns into vector blends: an attention mask [1,1,1,S] against
 * scores [B,H,S,S] and a scalar fill runs as rows of "c[i] ? x[i] : v".
 */
#include "kcommon.h"
#include "bcast.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_Where)

typedef MRT_T1 elem;

/* SC, SX, SY: compile-time strides (0 or 1) of condition, X and Y in the row.
 * Both values are loaded and blended through a mask (elem is unsigned: the size
 * instantiation), so the loop has no branch and vectorises; `c ? x : y` would load
 * only one of them and stay scalar. */
#define WHERE_LOOP(SC, SX, SY)                                                  \
  for (size_t i = 0; i < n; i++) {                                              \
    const elem m = (elem)0 - (elem)(c[i * (SC)] != 0);                          \
    y[i] = (elem)((x[i * (SX)] & m) | (v[i * (SY)] & (elem)~m));                \
  }

static void where_row(const mrt_node *node, size_t n, const size_t *off, const size_t *step,
                      size_t yoff) {
  const uint8_t *MRT_RESTRICT c = (const uint8_t *)node->inputs[0]->data + off[0];
  const elem *MRT_RESTRICT x = (const elem *)node->inputs[1]->data + off[1];
  const elem *MRT_RESTRICT v = (const elem *)node->inputs[2]->data + off[2];
  elem *MRT_RESTRICT y = (elem *)node->outputs[0]->data + yoff;
  switch ((step[0] << 2) | (step[1] << 1) | step[2]) {
    case 7: WHERE_LOOP(1, 1, 1); break;
    case 6: WHERE_LOOP(1, 1, 0); break;
    case 5: WHERE_LOOP(1, 0, 1); break;
    case 4: WHERE_LOOP(1, 0, 0); break;
    case 3: {
      const elem *s = c[0] ? x : v; /* one condition for the row: a copy */
      if ((c[0] ? step[1] : step[2]) != 0) {
        memcpy(y, s, n * sizeof(elem));
      } else {
        const elem e = s[0];
        for (size_t i = 0; i < n; i++) y[i] = e;
      }
      break;
    }
    case 2: WHERE_LOOP(0, 1, 0); break;
    case 1: WHERE_LOOP(0, 0, 1); break;
    default: WHERE_LOOP(0, 0, 0); break;
  }
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_where_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 3, 3, 1, 1);
  if (st) return st;
  const mrt_tensor *in[3] = {node->inputs[0], node->inputs[1], node->inputs[2]};
  const mrt_tensor *y = node->outputs[0];
  for (uint32_t i = 0; i < 3; i++)
    if (!in[i]) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input %u is missing", i);
  if ((st = mrt_check_dtype(ctx, node, in[0], MRT_DTYPE_BOOL))) return st;
  if ((st = mrt_check_dtype(ctx, node, in[2], in[1]->dtype))) return st;
  if ((st = mrt_check_dtype(ctx, node, y, in[1]->dtype))) return st;
  if (y->count && y->nbytes / y->count != sizeof(elem))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "element size is not %zu bytes",
                         sizeof(elem));
  mrt_bcastn *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  if (!mrt_bcastn_plan(p, 3, in, y, 1))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "inputs (ranks %u, %u, %u) do not broadcast to the output shape (rank %u)",
                         in[0]->ndim, in[1]->ndim, in[2]->ndim, y->ndim);
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_where_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  mrt_bcastn_run(node->params, node, where_row);
}

#endif
