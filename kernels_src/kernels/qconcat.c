/*
 * com.microsoft QLinearConcat, uint8 and int8: inputs (y_scale, y_zero_point,
 * then x, x_scale, x_zero_point per piece), attribute axis. Each piece is
 * requantised to the output's parameters as onnxruntime does: a piece whose scale
 * and zero point equal the output's is copied as it is; any other goes through a
 * 256-entry table built at prepare by dequantising every value in float,
 * sx * (q - zx), and quantising it again, v / sy rounded half to even + zy,
 * saturated (onnxruntime's QlinearBuildLookupTable with the identity).
 *
 * The tensors are seen as [outer, axis * inner] as by Concat: each piece is
 * `outer` runs of bytes.
 */
#include "qcommon.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_QLinearConcat)
typedef MRT_T0 q_t;

typedef struct qcat_piece {
  size_t run;          /* elements (= bytes) per outer step */
  const uint8_t *lut;  /* requantisation table, or NULL for a copy */
} qcat_piece;

typedef struct qcat_params {
  size_t outer, whole;
  uint32_t n;
  qcat_piece piece[];
} qcat_params;

MRT_PREPARE_CODE
static mrt_status qcat_lut(mrt_ctx *ctx, const mrt_node *node, uint32_t ix, float sy, int32_t zy, qcat_piece *pc) {
  const float *sx;
  size_t n1;
  int32_t zx;
  mrt_status st;
  if ((st = mrt_q_scale(ctx, node, ix + 1, 1, &sx, &n1)) ||
      (st = mrt_q_zero_point(ctx, node, ix + 2, MRT_T0_DTYPE, 1, &zx)))
    return st;
  pc->lut = NULL;
  if (sx[0] == sy && zx == zy) return MRT_STATUS_OK;
  uint8_t *lut = mrt_ctx_alloc(ctx, 256);
  if (!lut) return MRT_STATUS_OUT_OF_MEMORY;
  const int32_t lo = mrt_q_min(MRT_T0_DTYPE), hi = mrt_q_max(MRT_T0_DTYPE);
  const float flo = (float)(lo - zy), fhi = (float)(hi - zy);
  for (int32_t q = lo; q <= hi; q++) {
    float r = sx[0] * (float)(q - zx) / sy;
    r = r > flo ? r : flo; /* NaN (inf * 0 from huge scale ratios) saturates low */
    r = r < fhi ? r : fhi;
    lut[(uint8_t)(q_t)q] = (uint8_t)(q_t)((int32_t)mrt_q_rint(r) + zy);
  }
  pc->lut = lut;
  return MRT_STATUS_OK;
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_qlinearconcat_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 5, 0xffff, 1, 1);
  if (st) return st;
  if ((node->n_inputs - 2) % 3)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "inputs must be y_scale, y_zero_point, then (x, x_scale, x_zero_point) triples; got %u",
                         node->n_inputs);
  const mrt_tensor *y = node->outputs[0];
  if ((st = mrt_check_dtype(ctx, node, y, MRT_T0_DTYPE))) return st;
  if (!mrt_node_attr(node, "axis"))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "attribute axis is required");
  const int64_t axis_attr = mrt_attr_int(node, "axis", 0), axis = mrt_norm_axis(axis_attr, y->ndim);
  if (axis < 0)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "axis %lld out of range for rank %u",
                         (long long)axis_attr, y->ndim);
  const float *sy;
  size_t n1;
  int32_t zy;
  if ((st = mrt_q_scale(ctx, node, 0, 1, &sy, &n1)) || (st = mrt_q_zero_point(ctx, node, 1, MRT_T0_DTYPE, 1, &zy)))
    return st;
  const uint32_t n = (node->n_inputs - 2) / 3;
  qcat_params *p = mrt_ctx_alloc(ctx, sizeof *p + n * sizeof(qcat_piece));
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  p->n = n;
  p->outer = mrt_prod(y->dims, 0, (uint32_t)axis);
  const size_t inner = mrt_prod(y->dims, (uint32_t)axis + 1, y->ndim);
  int64_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint32_t ix = 2 + 3 * i;
    const mrt_tensor *x = mrt_in(node, ix);
    if (!x) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "piece %u (input %u) is missing", i, ix);
    if ((st = mrt_check_dtype(ctx, node, x, MRT_T0_DTYPE))) return st;
    int ok = x->ndim == y->ndim;
    for (uint32_t d = 0; ok && d < x->ndim; d++) ok = d == axis || x->dims[d] == y->dims[d];
    if (!ok)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "piece %u must have the output's rank and dims outside axis %lld", i, (long long)axis);
    total += x->dims[axis];
    p->piece[i].run = (size_t)x->dims[axis] * inner;
    if ((st = qcat_lut(ctx, node, ix, sy[0], zy, &p->piece[i]))) return st;
  }
  if (total != y->dims[axis])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "pieces add up to %lld along axis %lld, the output has %lld", (long long)total,
                         (long long)axis, (long long)y->dims[axis]);
  p->whole = (size_t)y->dims[axis] * inner;
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_qlinearconcat_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const qcat_params *p = node->params;
  uint8_t *y = node->outputs[0]->data;
  size_t at = 0;
  for (uint32_t i = 0; i < p->n; i++) {
    const uint8_t *x = node->inputs[2 + 3 * i]->data, *lut = p->piece[i].lut;
    const size_t r = p->piece[i].run;
    for (size_t o = 0; o < p->outer; o++) {
      uint8_t *yo = y + o * p->whole + at;
      const uint8_t *xo = x + o * r;
      if (!lut)
        memcpy(yo, xo, r);
      else
        for (size_t j = 0; j < r; j++) yo[j] = lut[xo[j]];
    }
    at += r;
  }
}
#endif
