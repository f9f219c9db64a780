/*
 * Concat and Split on any axis, any element type. Both see the tensors as
 * [outer, axis * inner]: each piece is `outer` contiguous runs, so channel
 * concat of single images is one memcpy per input. Runs are counted in bytes,
 * so one object (registry `instantiate: any`) serves every element type.
 */
#include "kcommon.h"

#if defined(MRT_OP_Concat) || defined(MRT_OP_Split)

typedef struct cat_params {
  size_t outer;
  size_t whole;   /* run length of the concatenated tensor, in bytes */
  size_t run[];   /* run length of each piece, in bytes */
} cat_params;

/* `whole` is the concatenated tensor, pieces[0..n) the parts along `axis`, each
 * of whole's element type. */
MRT_PREPARE_CODE
static mrt_status cat_plan(mrt_node *node, mrt_ctx *ctx, const mrt_tensor *whole,
                           mrt_tensor *const *pieces, uint32_t n, int64_t axis_attr,
                           cat_params **out) {
  const int64_t axis = mrt_norm_axis(axis_attr, whole->ndim);
  if (axis < 0)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis %lld out of range for rank %u",
                         (long long)axis_attr, whole->ndim);
  cat_params *p = mrt_ctx_alloc(ctx, sizeof *p + n * sizeof(size_t));
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->outer = mrt_prod(whole->dims, 0, (uint32_t)axis);
  /* An empty whole copies nothing, whatever its element size. */
  const size_t esize = whole->count ? whole->nbytes / whole->count : 0;
  const size_t inner = mrt_prod(whole->dims, (uint32_t)axis + 1, whole->ndim) * esize;
  int64_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    const mrt_tensor *t = pieces[i];
    mrt_status st;
    if (!t) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "piece %u is missing", i);
    if ((st = mrt_check_dtype(ctx, node, t, whole->dtype))) return st;
    int ok = t->ndim == whole->ndim;
    for (uint32_t d = 0; ok && d < t->ndim; d++) ok = d == axis || t->dims[d] == whole->dims[d];
    if (!ok)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "piece %u must match the other dims outside axis %lld", i,
                           (long long)axis);
    total += t->dims[axis];
    p->run[i] = (size_t)t->dims[axis] * inner;
  }
  if (total != whole->dims[axis])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "pieces add up to %lld along axis %lld, the whole has %lld",
                         (long long)total, (long long)axis, (long long)whole->dims[axis]);
  p->whole = (size_t)whole->dims[axis] * inner;
  *out = p;
  return MRT_STATUS_OK;
}

#endif

#if defined(MRT_OP_Concat)

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_concat_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 0xffff, 1, 1);
  if (st) return st;
  const mrt_tensor *y = node->outputs[0];
  /* Opset 1 defaults axis to 1; from opset 4 it is required. */
  if (node->opset >= 4 && !mrt_node_attr(node, "axis"))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "attribute axis is required");
  cat_params *p;
  if ((st = cat_plan(node, ctx, y, node->inputs, node->n_inputs, mrt_attr_int(node, "axis", 1), &p)))
    return st;
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_concat_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const cat_params *p = node->params;
  char *y = node->outputs[0]->data;
  size_t at = 0;
  for (uint32_t i = 0; i < node->n_inputs; i++) {
    const char *x = node->inputs[i]->data;
    const size_t r = p->run[i];
    /* A planner may place an input where it already belongs in the output. */
    if (x != y + at)
      for (size_t o = 0; o < p->outer; o++) memcpy(y + o * p->whole + at, x + o * r, r);
    at += r;
  }
}

#endif

#if defined(MRT_OP_Split)

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_split_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 2, 1, 0xffff);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0];
  const int64_t axis = mrt_attr_int(node, "axis", 0);
  cat_params *p;
  if ((st = cat_plan(node, ctx, x, node->outputs, node->n_outputs, axis, &p))) return st;
  /* Output shapes are static; the split sizes, when given, must agree with them. */
  const int64_t a = mrt_norm_axis(axis, x->ndim);
  const mrt_tensor *sp = mrt_in(node, 1);
  const int64_t *attr = NULL;
  uint32_t ns = 0;
  if (node->opset < 13) {
    ns = mrt_attr_ints(node, "split", &attr);
  } else if (sp) {
    if (!mrt_const_ints_ok(sp))
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                           "input 1 (split) must be a build-time int64 constant");
    ns = (uint32_t)sp->count;
  }
  if (ns && ns != node->n_outputs)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "split has %u values for %u outputs",
                         ns, node->n_outputs);
  for (uint32_t i = 0; i < ns; i++)
    if ((attr ? attr[i] : mrt_int_at(sp, i)) != node->outputs[i]->dims[a])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "output %u has %lld along the axis, split says %lld", i,
                           (long long)node->outputs[i]->dims[a],
                           (long long)(attr ? attr[i] : mrt_int_at(sp, i)));
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_split_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const cat_params *p = node->params;
  const char *x = node->inputs[0]->data;
  size_t at = 0;
  for (uint32_t i = 0; i < node->n_outputs; i++) {
    char *y = node->outputs[i]->data;
    const size_t r = p->run[i];
    if (y != x + at)
      for (size_t o = 0; o < p->outer; o++) memcpy(y + o * r, x + o * p->whole + at, r);
    at += r;
  }
}

#endif
