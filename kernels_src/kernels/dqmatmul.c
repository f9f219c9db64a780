/*
 * com.microsoft DynamicQuantizeMatMul: Y = A x B for a float A quantised at run time
 * and a constant 8-bit B, the chain onnxruntime.quantization.quantize_dynamic writes
 * (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by a_scale * b_scale
 * (-> Add bias)) as one kernel, which minibuild fuses it into at build time:
 *
 *   a_scale, a_zp = DynamicQuantizeLinear's parameters of A (uint8; the range
 *                   widened to hold 0, (max - min) / 255, round(-min / scale))
 *   acc[i][j]     = sum_k (qa(i,k) - a_zp) (B(k,j) - b_zp[j])   on the qgemm unit
 *   Y[i][j]       = float(acc) * (a_scale * b_scale[j])  (+ bias[j])
 *
 * each step rounded as the unfused graph rounds it (the product and the sum are
 * two roundings, not one fused multiply-add), so the outputs are the unfused
 * model's. B is packed once at prepare with its zero points.
 */
#include "qcommon.h"
#include "qgemm.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_DynamicQuantizeMatMul)

typedef float dq_v8f __attribute__((vector_size(32)));
typedef int32_t dq_v8i __attribute__((vector_size(32)));
typedef uint8_t dq_v8b __attribute__((vector_size(8)));

static inline dq_v8f dq_sel(dq_v8i m, dq_v8f a, dq_v8f b) {
  return (dq_v8f)((m & (dq_v8i)a) | (~m & (dq_v8i)b));
}

typedef struct dqmm_params {
  const mrt_qgemm_kernel *kern;
  size_t m, k, n;
  void *bp;            /* B packed with its zero points */
  const float *bscale; /* [n] */
  const float *bias;   /* [n] or NULL */
  size_t qa_bytes, acc_bytes;
} dqmm_params;

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_dynamicquantizematmul_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 3, 5, 1, 1);
  if (st) return st;
  const mrt_tensor *a = mrt_in(node, 0), *b = mrt_in(node, 1), *zb = mrt_in(node, 3), *bias = mrt_in(node, 4);
  const mrt_tensor *y = node->outputs[0];
  if (!a || !b) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A and B are required");
  if ((st = mrt_check_dtype(ctx, node, a, MRT_T0_DTYPE)) || (st = mrt_check_dtype(ctx, node, b, MRT_T1_DTYPE)) ||
      (st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_FLOAT32)))
    return st;
  if (a->ndim < 1 || b->ndim != 2 || !b->is_constant || !b->data)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "B must be a 2-D constant [K, N] and A [..., K]");
  dqmm_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  p->k = (size_t)b->dims[0], p->n = (size_t)b->dims[1];
  p->m = p->k ? a->count / p->k : 0;
  if ((size_t)a->dims[a->ndim - 1] != p->k || y->ndim != (a->ndim > 1 ? a->ndim : 1) ||
      (size_t)y->dims[y->ndim - 1] != p->n || y->count != p->m * p->n)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A [..., K] x B [K, N] must give Y [..., N]");
  for (uint32_t i = 0; i + 1 < a->ndim; i++)
    if (y->dims[i] != a->dims[i])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "Y's leading dims must be A's");
  size_t ns;
  if ((st = mrt_q_scale(ctx, node, 2, p->n, &p->bscale, &ns))) return st;
  if (ns == 1 && p->n > 1) {
    float *s = mrt_ctx_alloc(ctx, p->n * sizeof *s);
    if (!s) return MRT_STATUS_OUT_OF_MEMORY;
    for (size_t j = 0; j < p->n; j++) s[j] = p->bscale[0];
    p->bscale = s;
  }
  int32_t *zeros = mrt_ctx_alloc(ctx, (p->n ? p->n : 1) * sizeof *zeros);
  if (!zeros) return MRT_STATUS_OUT_OF_MEMORY;
  if (zb && zb->count != 1 && zb->count != p->n)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "b_zero_point must be one value or one per column");
  if ((st = mrt_q_zero_point(ctx, node, 3, MRT_T1_DTYPE, p->n, zeros))) return st;
  if (bias) {
    if (bias->dtype != MRT_DTYPE_FLOAT32 || !bias->is_constant || !bias->data || bias->count != p->n)
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "bias must be a float32 constant of N values");
    p->bias = bias->data;
  }
  p->kern = mrt_qgemm_kernel_select();
  p->bp = mrt_ctx_alloc(ctx, mrt_qgemm_packed_b_size(p->kern, p->k, p->n));
  if (!p->bp) return MRT_STATUS_OUT_OF_MEMORY;
  const mrt_qgemm_src src = {NULL, b->data, p->n, 1, MRT_T1_DTYPE == MRT_DTYPE_INT8, zeros, p->n};
  mrt_qgemm_pack_b(p->kern, p->k, p->n, &src, p->bp);
  p->qa_bytes = (p->m * p->k + 63) / 64 * 64;
  p->acc_bytes = (p->m * p->n * sizeof(int32_t) + 63) / 64 * 64;
  mrt_ctx_request_scratch(ctx, p->qa_bytes + p->acc_bytes + mrt_qgemm_scratch_size(p->kern, p->m, p->n, p->k, 0, 1));
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_dynamicquantizematmul_run)(const mrt_node *node, void *scratch) {
  const dqmm_params *p = node->params;
  const float *x = node->inputs[0]->data;
  float *y = node->outputs[0]->data;
  const size_t count = p->m * p->k;
  uint8_t *qa = scratch;
  int32_t *acc = (int32_t *)((char *)scratch + p->qa_bytes);
  void *gs = (char *)scratch + p->qa_bytes + p->acc_bytes;
  /* DynamicQuantizeLinear: min and max (with 0), then quantise by division, eight
   * lanes at a time (selects, not fmin/fmax: a NaN is skipped by the range and
   * quantises to the low end, as DynamicQuantizeLinear's kernel does). */
  dq_v8f vlo = {0}, vhi = {0};
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    dq_v8f v;
    memcpy(&v, x + i, sizeof v);
    vlo = dq_sel(v < vlo, v, vlo);
    vhi = dq_sel(v > vhi, v, vhi);
  }
  float lo = 0.0f, hi = 0.0f;
  for (int l = 0; l < 8; l++) {
    lo = vlo[l] < lo ? vlo[l] : lo;
    hi = vhi[l] > hi ? vhi[l] : hi;
  }
  for (; i < count; i++) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  float z0 = 0.0f - lo / scale;
  z0 = z0 < 0.0f ? 0.0f : z0 > 255.0f ? 255.0f : z0;
  const int32_t za = (int32_t)mrt_q_rint(z0);
  const float qlo = (float)(0 - za), qhi = (float)(255 - za);
  const dq_v8f vs = (dq_v8f){0} + scale, vql = (dq_v8f){0} + qlo, vqh = (dq_v8f){0} + qhi;
  const dq_v8f magic = (dq_v8f){0} + 12582912.0f; /* mrt_q_rint's 1.5 * 2^23 */
  for (i = 0; i + 8 <= count; i += 8) {
    dq_v8f v;
    memcpy(&v, x + i, sizeof v);
    v = v / vs;
    v = dq_sel(v > vql, v, vql);
    v = dq_sel(v < vqh, v, vqh);
    v = (v + magic) - magic;
    const dq_v8b q = __builtin_convertvector(__builtin_convertvector(v, dq_v8i) + za, dq_v8b);
    memcpy(qa + i, &q, sizeof q);
  }
  for (; i < count; i++) {
    float v = x[i] / scale;
    v = v > qlo ? v : qlo;
    v = v < qhi ? v : qhi;
    qa[i] = (uint8_t)((int32_t)mrt_q_rint(v) + za);
  }
  const mrt_qgemm_src as = {NULL, qa, p->k, 1, 0, &za, 1};
  const mrt_qgemm_src bs = {p->bp, NULL, p->n, 1, MRT_T1_DTYPE == MRT_DTYPE_INT8, NULL, p->n};
  mrt_qgemm(p->kern, p->m, p->n, p->k, &as, &bs, 0, acc, p->n, gs);
  for (size_t i = 0; i < p->m; i++) {
    const int32_t *ar = acc + i * p->n;
    float *yr = y + i * p->n;
    for (size_t j = 0; j < p->n; j++) {
      const float s = scale * p->bscale[j];
      const float v = (float)ar[j] * s;
      yr[j] = v;
    }
    if (p->bias)
      for (size_t j = 0; j < p->n; j++) yr[j] = yr[j] + p->bias[j];
  }
}
#endif
