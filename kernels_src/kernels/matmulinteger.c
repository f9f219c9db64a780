/*
 * MatMulInteger (A uint8/int8, B uint8/int8 -> int32) on the qgemm support unit:
 * numpy matmul shapes (1-D promotion, batch broadcasting) as MatMul, with
 *   Y = (A - a_zero_point) x (B - b_zero_point)
 * a_zero_point per tensor or per row of A (M values), b_zero_point per tensor or
 * per column of B (N values), as ONNX allows. One object serves every signature:
 * the element types only choose how qgemm packs, read from the tensors.
 *
 * A constant B with a constant (or absent) zero point is packed once at prepare,
 * zero point folded in; otherwise B is packed per run. a_zero_point usually is
 * DynamicQuantizeLinear's output, so it is read on every run.
 */
#include "kcommon.h"
#include "qgemm.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_MatMulInteger)

typedef struct mrt_mmi_params {
  const mrt_qgemm_kernel *kern;
  size_t m, n, k;
  size_t batch;   /* GEMMs per run */
  size_t *a_off;  /* per GEMM: element offset of its A matrix */
  size_t *b_idx;  /* per GEMM: which B matrix */
  void *packed_b; /* constant B: every B matrix packed, packed_b_stride bytes apart */
  size_t packed_b_stride;
  size_t za_count, zb_count; /* 0: no zero point input */
  size_t zero_bytes;         /* scratch for the int32 zero points, rounded to 64 */
} mrt_mmi_params;

static int mrt_is_8bit(const mrt_tensor *t) { return t->dtype == MRT_DTYPE_UINT8 || t->dtype == MRT_DTYPE_INT8; }

static void mrt_mmi_zeros(const mrt_tensor *t, size_t count, int32_t *dst) {
  for (size_t i = 0; i < count; ++i)
    dst[i] = t->dtype == MRT_DTYPE_INT8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_matmulinteger_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 4, 1, 1);
  if (st != MRT_STATUS_OK) return st;
  const mrt_tensor *a = node->inputs[0], *b = node->inputs[1], *y = node->outputs[0];
  const mrt_tensor *za = mrt_in(node, 2), *zb = mrt_in(node, 3);
  if (!a || !b || !y) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A, B and Y are required");
  if (!mrt_is_8bit(a) || !mrt_is_8bit(b))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "A and B must be uint8 or int8");
  if ((st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_INT32)) != MRT_STATUS_OK) return st;
  if (za && (st = mrt_check_dtype(ctx, node, za, a->dtype)) != MRT_STATUS_OK) return st;
  if (zb && (st = mrt_check_dtype(ctx, node, zb, b->dtype)) != MRT_STATUS_OK) return st;
  if (a->ndim < 1 || b->ndim < 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "MatMulInteger operands must not be scalars");

  const int64_t m = a->ndim >= 2 ? a->dims[a->ndim - 2] : 1, k = a->dims[a->ndim - 1];
  const int64_t kb = b->ndim >= 2 ? b->dims[b->ndim - 2] : b->dims[0];
  const int64_t n = b->ndim >= 2 ? b->dims[b->ndim - 1] : 1;
  if (kb != k)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "inner dimensions differ: A has K = %lld, B %lld",
                         (long long)k, (long long)kb);
  if (za && za->count != 1 && za->count != (size_t)m)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "a_zero_point: one value or one per row of A (%lld)",
                         (long long)m);
  if (zb && zb->count != 1 && zb->count != (size_t)n)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "b_zero_point: one value or one per column of B (%lld)", (long long)n);

  const uint32_t abat = a->ndim > 2 ? a->ndim - 2 : 0, bbat = b->ndim > 2 ? b->ndim - 2 : 0;
  const uint32_t obat = abat > bbat ? abat : bbat;
  const uint32_t yrank = obat + (a->ndim >= 2) + (b->ndim >= 2);
  if (y->ndim != yrank)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "Y has rank %u, expected %u", y->ndim, yrank);
  /* Batch dims broadcast right-aligned; strides in matrices, 0 where broadcast. */
  int64_t od[MRT_MAX_DIMS];
  size_t as[MRT_MAX_DIMS], bs[MRT_MAX_DIMS], nbatch = 1, sa = 1, sb = 1;
  for (uint32_t i = obat; i-- > 0;) {
    const int64_t av = i + abat >= obat ? a->dims[i + abat - obat] : 1;
    const int64_t bv = i + bbat >= obat ? b->dims[i + bbat - obat] : 1;
    if (av != bv && av != 1 && bv != 1)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "batch dims of A (%lld) and B (%lld) do not broadcast",
                           (long long)av, (long long)bv);
    od[i] = av > bv ? av : bv;
    if (y->dims[i] != od[i]) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "Y's batch dims are wrong");
    as[i] = av == 1 ? 0 : sa;
    bs[i] = bv == 1 ? 0 : sb;
    sa *= (size_t)av;
    sb *= (size_t)bv;
    nbatch *= (size_t)od[i];
  }
  mrt_mmi_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->kern = mrt_qgemm_kernel_select_k((size_t)k);
  p->m = (size_t)m;
  p->n = (size_t)n;
  p->k = (size_t)k;
  p->batch = nbatch;
  p->a_off = mrt_ctx_alloc(ctx, nbatch * sizeof(size_t));
  p->b_idx = mrt_ctx_alloc(ctx, nbatch * sizeof(size_t));
  if (!p->a_off || !p->b_idx) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  for (size_t t = 0; t < nbatch; ++t) {
    size_t rem = t, ai = 0, bi = 0;
    for (uint32_t i = obat; i-- > 0;) {
      const size_t d = rem % (size_t)od[i];
      rem /= (size_t)od[i];
      ai += d * as[i];
      bi += d * bs[i];
    }
    p->a_off[t] = ai * p->m * p->k;
    p->b_idx[t] = bi;
  }
  p->za_count = za ? za->count : 0;
  p->zb_count = zb ? zb->count : 0;
  p->zero_bytes = ((p->m + p->n) * sizeof(int32_t) + 63) / 64 * 64;
  const int b_const = b->is_constant && b->data && (!zb || (zb->is_constant && zb->data));
  if (b_const) {
    const size_t nmat = b->count / (p->k * p->n);
    p->packed_b_stride = (mrt_qgemm_packed_b_size(p->kern, p->k, p->n) + 63) / 64 * 64;
    p->packed_b = mrt_ctx_alloc(ctx, nmat * p->packed_b_stride + 64);
    int32_t *zeros = mrt_ctx_alloc(ctx, (p->n + 1) * sizeof(int32_t));
    if (!p->packed_b || !zeros) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
    p->packed_b = (void *)(((uintptr_t)p->packed_b + 63) & ~(uintptr_t)63);
    if (zb) mrt_mmi_zeros(zb, zb->count, zeros);
    const size_t esz = 1;
    for (size_t t = 0; t < nmat; ++t) {
      const mrt_qgemm_src src = {NULL, (const char *)b->data + t * p->k * p->n * esz, p->n, 1,
                                 b->dtype == MRT_DTYPE_INT8, zb ? zeros : NULL, p->zb_count};
      mrt_qgemm_pack_b(p->kern, p->k, p->n, &src, (char *)p->packed_b + t * p->packed_b_stride);
    }
  }
  mrt_ctx_request_scratch(ctx, p->zero_bytes + mrt_qgemm_scratch_size(p->kern, p->m, p->n, p->k, 0, b_const));
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_matmulinteger_run)(const mrt_node *node, void *scratch) {
  const mrt_mmi_params *p = node->params;
  const mrt_tensor *a = node->inputs[0], *b = node->inputs[1];
  const mrt_tensor *za = mrt_in(node, 2), *zb = mrt_in(node, 3);
  int32_t *y = node->outputs[0]->data;
  int32_t *zeros = scratch;
  if (za) mrt_mmi_zeros(za, p->za_count, zeros);
  if (zb && !p->packed_b) mrt_mmi_zeros(zb, p->zb_count, zeros + p->m);
  void *gs = (char *)scratch + p->zero_bytes;
  for (size_t t = 0; t < p->batch; ++t) {
    const mrt_qgemm_src as = {NULL, (const uint8_t *)a->data + p->a_off[t], p->k, 1, a->dtype == MRT_DTYPE_INT8,
                              za ? zeros : NULL, p->za_count};
    mrt_qgemm_src bs = {NULL, NULL, p->n, 1, b->dtype == MRT_DTYPE_INT8, zb ? zeros + p->m : NULL, p->zb_count};
    if (p->packed_b)
      bs.packed = (const char *)p->packed_b + p->b_idx[t] * p->packed_b_stride;
    else
      bs.data = (const uint8_t *)b->data + p->b_idx[t] * p->k * p->n;
    mrt_qgemm_mt(node->pool, p->kern, p->m, p->n, p->k, &as, &bs, 0, NULL, y + t * p->m * p->n, p->n, gs);
  }
}

#endif
