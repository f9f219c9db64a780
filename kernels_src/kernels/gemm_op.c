/*
 * Gemm, FusedGemm (ai.minibuild: Gemm + Relu/Clip), MatMul and FusedMatMul
 * (ai.minibuild: MatMul + a bias over the last axis + Relu/Clip), float32.
 * Gemm's work is shared with FusedGemm in the gemm support unit; MatMul maps
 * numpy matmul (1-D promotion, batch broadcasting) onto mrt_sgemm, and
 * FusedMatMul is the same with the bias and clamp in the GEMM tiles' epilogue;
 * FusedMatMulAct (ai.minibuild: MatMul + bias + Gelu) adds the activation
 * as the GEMM's post stage, on each block of the product while it is in L2.
 */
#include "gemm.h"
#if defined(MRT_OP_FusedMatMulAct)
#include "vmath.h"
#endif

#if defined(MRT_TYPE_float32)

#if defined(MRT_OP_Gemm)
MRT_PREPARE_CODE
mrt_status mrt_gemm_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  return mrt_gemm_core_prepare_f32(node, ctx, -__builtin_inff(), __builtin_inff());
}

void mrt_gemm_run_f32(const mrt_node *node, void *scratch) { mrt_gemm_core_run_f32(node, scratch); }
#endif

#if defined(MRT_OP_FusedGemm)
MRT_PREPARE_CODE
mrt_status mrt_fusedgemm_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  float lo, hi;
  const mrt_status st = mrt_sgemm_activation(ctx, node, &lo, &hi);
  if (st != MRT_STATUS_OK) return st;
  return mrt_gemm_core_prepare_f32(node, ctx, lo, hi);
}

void mrt_fusedgemm_run_f32(const mrt_node *node, void *scratch) {
  mrt_gemm_core_run_f32(node, scratch);
}
#endif

#if defined(MRT_OP_MatMul) || defined(MRT_OP_FusedMatMul) || defined(MRT_OP_FusedMatMulAct)
typedef struct mrt_matmul_params {
  const mrt_sgemm_kernel *kern;
  size_t m, n, k;
  size_t batch;        /* GEMMs to run (1 when A's batch folds into m) */
  size_t *a_off;       /* per GEMM: element offset of its A matrix */
  size_t *b_idx;       /* per GEMM: which B matrix */
  float *packed_b;     /* constant B: every B matrix packed, packed_b_stride floats apart */
  size_t packed_b_stride;
  float lo, hi;        /* FusedMatMul's clamp (-inf, +inf for none) */
  mrt_sgemm_act_fn act; /* FusedMatMulAct's activation (vmath.h), or NULL */
} mrt_matmul_params;

/* The GEMM's post stage for an activation: rows of a block of C. */
static void mrt_matmul_act_post(const mrt_sgemm_epilogue *ep, size_t i, size_t j, size_t rows, size_t cols,
                                float *c, size_t ldc) {
  (void)i;
  (void)j;
  for (size_t r = 0; r < rows; ++r) ep->act(cols, c + r * ldc, c + r * ldc);
}

MRT_PREPARE_CODE
static mrt_status mrt_matmul_prepare(mrt_node *node, mrt_ctx *ctx, uint32_t max_inputs, float lo, float hi) {
  mrt_status st = mrt_check_arity(ctx, node, 2, max_inputs, 1, 1);
  if (st != MRT_STATUS_OK) return st;
  const mrt_tensor *a = node->inputs[0], *b = node->inputs[1], *y = node->outputs[0];
  if (!a || !b || !y)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A, B and Y are required");
  if ((st = mrt_check_dtype(ctx, node, a, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, b, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if (a->ndim < 1 || b->ndim < 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "MatMul operands must not be scalars");

  /* numpy: a 1-D A is a row (1, K), a 1-D B a column (K, 1); the added axis
   * is dropped from Y. */
  const int64_t m = a->ndim >= 2 ? a->dims[a->ndim - 2] : 1, k = a->dims[a->ndim - 1];
  const int64_t kb = b->ndim >= 2 ? b->dims[b->ndim - 2] : b->dims[0];
  const int64_t n = b->ndim >= 2 ? b->dims[b->ndim - 1] : 1;
  if (kb != k)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "inner dimensions differ: A is (..., %lld, %lld), B is (..., %lld, %lld)",
                         (long long)m, (long long)k, (long long)kb, (long long)n);
  const uint32_t abat = a->ndim > 2 ? a->ndim - 2 : 0, bbat = b->ndim > 2 ? b->ndim - 2 : 0;
  const uint32_t obat = abat > bbat ? abat : bbat;
  const uint32_t yrank = obat + (a->ndim >= 2) + (b->ndim >= 2);
  if (y->ndim != yrank)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "Y has rank %u, expected %u", y->ndim,
                         yrank);
  /* Broadcast batch dims, right-aligned; a missing dim counts as 1. */
  int64_t od[MRT_MAX_DIMS], ad[MRT_MAX_DIMS], bd[MRT_MAX_DIMS];
  size_t nbatch = 1, na = 1, nb = 1;
  for (uint32_t i = 0; i < obat; ++i) {
    const int64_t av = i + abat >= obat ? a->dims[i + abat - obat] : 1;
    const int64_t bv = i + bbat >= obat ? b->dims[i + bbat - obat] : 1;
    if (av != bv && av != 1 && bv != 1)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "batch dims of A (%lld) and B (%lld) do not broadcast", (long long)av,
                           (long long)bv);
    ad[i] = av;
    bd[i] = bv;
    od[i] = av > bv ? av : (bv > av ? bv : av);
    if (av == 0 || bv == 0) od[i] = 0;
    if (y->dims[i] != od[i])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "Y dim %u is %lld, expected %lld", i,
                           (long long)y->dims[i], (long long)od[i]);
    nbatch *= (size_t)od[i];
    na *= (size_t)av;
    nb *= (size_t)bv;
  }
  if ((a->ndim >= 2 && y->dims[obat] != m) || (b->ndim >= 2 && y->dims[yrank - 1] != n))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "Y's matrix dims do not match M = %lld, N = %lld", (long long)m, (long long)n);

  mrt_matmul_params *p = (mrt_matmul_params *)mrt_ctx_alloc(ctx, sizeof(*p));
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  p->kern = mrt_sgemm_kernel_select();
  p->lo = lo;
  p->act = NULL;
  p->hi = hi;
  p->m = (size_t)m;
  p->n = (size_t)n;
  p->k = (size_t)k;
  int folded = 0;
  if (nb == 1 && na == nbatch && nbatch > 1) {
    /* One B for all: A's batches are consecutive rows of one tall GEMM. */
    p->m *= nbatch;
    nbatch = 1;
    folded = 1;
  }
  p->batch = nbatch;
  p->a_off = (size_t *)mrt_ctx_alloc(ctx, (nbatch + 1) * sizeof(size_t));
  p->b_idx = (size_t *)mrt_ctx_alloc(ctx, (nbatch + 1) * sizeof(size_t));
  if (!p->a_off || !p->b_idx) return MRT_STATUS_OUT_OF_MEMORY;
  if (!folded) {
    size_t idx[MRT_MAX_DIMS] = {0};
    for (size_t t = 0; t < nbatch; ++t) {
      size_t ai = 0, bi = 0;
      for (uint32_t i = 0; i < obat; ++i) {
        ai = ai * (size_t)ad[i] + (ad[i] == 1 ? 0 : idx[i]);
        bi = bi * (size_t)bd[i] + (bd[i] == 1 ? 0 : idx[i]);
      }
      p->a_off[t] = ai * p->m * p->k;
      p->b_idx[t] = bi;
      for (uint32_t i = obat; i-- > 0;) {
        if (++idx[i] < (size_t)od[i]) break;
        idx[i] = 0;
      }
    }
  }

  const int pack_b = b->is_constant && b->data != NULL;
  if (pack_b) {
    p->packed_b_stride = (mrt_sgemm_packed_b_size(p->kern, p->k, p->n) + 15) / 16 * 16;
    p->packed_b = (float *)mrt_ctx_alloc(ctx, nb * p->packed_b_stride * sizeof(float) + 64);
    if (!p->packed_b) return MRT_STATUS_OUT_OF_MEMORY;
    p->packed_b = (float *)(((uintptr_t)p->packed_b + 63) & ~(uintptr_t)63);
    for (size_t i = 0; i < nb; ++i)
      mrt_sgemm_pack_b(p->kern, p->k, p->n, (const float *)b->data + i * p->k * p->n, p->n, 1, 1.0f,
                       p->packed_b + i * p->packed_b_stride);
  }
  /* (room for one single-thread product a thread too: mrt_matmul_run) */
  const size_t threads = mrt_ctx_threads(ctx);
  const size_t own = (mrt_sgemm_scratch_size(p->kern, p->m, p->n, p->k, 0, pack_b) + 63) / 64 * 64;
  const size_t mt = mrt_sgemm_scratch_size_mt(p->kern, p->m, p->n, p->k, 0, pack_b, threads);
  mrt_ctx_request_scratch(ctx, mt > threads * own ? mt : threads * own);
  node->params = p;
  return MRT_STATUS_OK;
}

typedef struct mrt_matmul_job {
  const mrt_matmul_params *p;
  const float *a, *b, *bias;
  float *y;
  char *scratch;
  size_t stride; /* scratch bytes a thread (0: one product at a time, on `pool`) */
  mrt_pool *pool;
} mrt_matmul_job;

/* GEMM t of the batch: on job->pool's threads, or (a task of a parallel loop
 * over the batch) on this thread with its own scratch. */
static void mrt_matmul_one(void *varg, size_t t, size_t thread) {
  const mrt_matmul_job *j = (const mrt_matmul_job *)varg;
  const mrt_matmul_params *p = j->p;
  mrt_sgemm_src sa = {0}, sb = {0};
  sa.data = j->a + p->a_off[t];
  sa.rs = p->k;
  sa.cs = 1;
  sa.scale = 1.0f;
  if (p->packed_b) {
    sb.packed = p->packed_b + p->b_idx[t] * p->packed_b_stride;
  } else {
    sb.data = j->b + p->b_idx[t] * p->k * p->n;
    sb.rs = p->n;
    sb.cs = 1;
    sb.scale = 1.0f;
  }
  mrt_sgemm_epilogue ep = {NULL, j->bias, p->lo, p->hi};
  if (p->act) {
    ep.post = mrt_matmul_act_post;
    ep.act = p->act;
  }
  mrt_sgemm_mt(j->pool, p->kern, p->m, p->n, p->k, &sa, &sb, 0, &ep, j->y + t * p->m * p->n, p->n,
               j->scratch + thread * j->stride);
}

static void mrt_matmul_run(const mrt_node *node, void *scratch, const float *bias) {
  const mrt_matmul_params *p = (const mrt_matmul_params *)node->params;
  mrt_matmul_job job = {p, (const float *)node->inputs[0]->data, (const float *)node->inputs[1]->data, bias,
                        (float *)node->outputs[0]->data, (char *)scratch, 0, NULL};
  /* Batches of small products (attention's heads: 128 x 64 x 128 each) on
   * threads: a task a GEMM, when the batch splits evenly enough, instead of
   * a parallel loop (and a join) inside each GEMM, whose few tiles split
   * badly. */
  const size_t threads = mrt_pool_threads(node->pool);
  if (threads > 1 && (p->batch % threads == 0 || p->batch >= 4 * threads) &&
      mrt_pool_tasks(node->pool, p->batch * p->m * p->n * p->k, (size_t)1 << 17) > 1) {
    job.stride = (mrt_sgemm_scratch_size(p->kern, p->m, p->n, p->k, 0, p->packed_b != NULL) + 63) / 64 * 64;
    mrt_parallel_for(node->pool, p->batch, mrt_matmul_one, &job);
    return;
  }
  job.pool = node->pool;
  for (size_t t = 0; t < p->batch; ++t) mrt_matmul_one(&job, t, 0);
}
#endif

#if defined(MRT_OP_MatMul)
MRT_PREPARE_CODE
mrt_status mrt_matmul_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  return mrt_matmul_prepare(node, ctx, 2, -__builtin_inff(), __builtin_inff());
}

void mrt_matmul_run_f32(const mrt_node *node, void *scratch) { mrt_matmul_run(node, scratch, NULL); }
#endif

#if defined(MRT_OP_FusedMatMul) || defined(MRT_OP_FusedMatMulAct)
/* Inputs A, B, bias: the bias holds N floats, one per column of the product, in
 * any shape that broadcasts over Y's last axis alone ([N], [1, N], ...). */
MRT_PREPARE_CODE
static mrt_status mrt_matmul_bias_prepare(mrt_node *node, mrt_ctx *ctx, float lo, float hi) {
  mrt_status st = mrt_matmul_prepare(node, ctx, 3, lo, hi);
  if (st != MRT_STATUS_OK) return st;
  const mrt_tensor *c = node->n_inputs > 2 ? node->inputs[2] : NULL, *y = node->outputs[0];
  if (!c) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "the bias (input 2) is required");
  if ((st = mrt_check_dtype(ctx, node, c, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  const mrt_matmul_params *p = (const mrt_matmul_params *)node->params;
  int ok = c->ndim >= 1 && c->ndim <= y->ndim && c->dims[c->ndim - 1] == (int64_t)p->n;
  for (uint32_t i = 0; ok && i + 1 < c->ndim; ++i) ok = c->dims[i] == 1;
  if (!ok)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "the bias must hold N = %llu values along the last axis only, like [N] or [1, N]",
                         (unsigned long long)p->n);
  return MRT_STATUS_OK;
}
#endif

#if defined(MRT_OP_FusedMatMul)
MRT_PREPARE_CODE
mrt_status mrt_fusedmatmul_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  float lo, hi;
  const mrt_status st = mrt_sgemm_activation(ctx, node, &lo, &hi);
  if (st != MRT_STATUS_OK) return st;
  return mrt_matmul_bias_prepare(node, ctx, lo, hi);
}

void mrt_fusedmatmul_run_f32(const mrt_node *node, void *scratch) {
  mrt_matmul_run(node, scratch, (const float *)node->inputs[2]->data);
}
#endif

#if defined(MRT_OP_FusedMatMulAct)
/* activation "Gelu", approximate "none" (x * Phi(x)) or "tanh", as the Gelu
 * kernel computes it (the same vmath.h copy: the same bytes as unfused). */
MRT_PREPARE_CODE
mrt_status mrt_fusedmatmulact_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  if (!mrt_attr_string_is(node, "activation", "", "Gelu"))
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "activation must be \"Gelu\"");
  const int is_tanh = mrt_attr_string_is(node, "approximate", "none", "tanh");
  if (!is_tanh && !mrt_attr_string_is(node, "approximate", "none", "none"))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "attribute approximate must be \"none\" or \"tanh\"");
  const mrt_status st = mrt_matmul_bias_prepare(node, ctx, -__builtin_inff(), __builtin_inff());
  if (st != MRT_STATUS_OK) return st;
  ((mrt_matmul_params *)node->params)->act =
      is_tanh ? MRT_VSELECT(mrt_vmap_gelu_tanh) : MRT_VSELECT(mrt_vmap_gelu);
  return MRT_STATUS_OK;
}

void mrt_fusedmatmulact_run_f32(const mrt_node *node, void *scratch) {
  mrt_matmul_run(node, scratch, (const float *)node->inputs[2]->data);
}
#endif

#endif /* MRT_TYPE_float32 */
