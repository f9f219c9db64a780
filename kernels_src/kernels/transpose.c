/*
 * Transpose, any perm up to MRT_MAX_DIMS, every element type: one object per
 * element size (registry `instantiate: size`), since moving an element only
 * needs its size. Prepare turns the perm into a collapsed strided view of the
 * input (see strided.h); dims that stay neighbours merge, so e.g. NCHW -> NHWC
 * is one tiled [HW, C] transpose per image.
 */
#include "kcommon.h"
#include "strided_copy.h"

#if defined(MRT_OP_Transpose)

/* 4-byte elements whose last two dims are a plain 2-D transpose (the rows'
 * elements adjacent in the input) in whole 8 x 8 blocks: AVX2 register
 * transposes, 8 loads and 8 stores a block, where the tiled scalar copy moved
 * one element a load and a store (attention's K -> K^T, 128 x 4 x 64 ->
 * 4 x 64 x 128). Desktop x86_64 speed builds only. */
#if defined(__x86_64__) && !defined(__ANDROID__) && !MRT_TUNE_SIZE && defined(MRT_T0_IS_uint32)
#define MRT_TRANSPOSE_8X8 1
#include "gemm.h"
#include "vmath.h"

__attribute__((target("avx2"))) static void mrt_transpose_blocks8(const mrt_view *v, const uint32_t *x,
                                                                  uint32_t *y) {
  const uint32_t k = v->ndim;
  const size_t rows = v->n[k - 2], cols = v->n[k - 1];
  const ptrdiff_t sc = v->s[k - 1];
  size_t idx[MRT_MAX_DIMS] = {0};
  ptrdiff_t off = 0;
  for (;;) {
    const uint32_t *xb = x + off;
    for (size_t r0 = 0; r0 < rows; r0 += 8)
      for (size_t c0 = 0; c0 < cols; c0 += 8) {
        mrt_v8f t[8];
        _Pragma("clang loop unroll(full)") for (int i = 0; i < 8; ++i)
          __builtin_memcpy(&t[i], xb + (ptrdiff_t)(c0 + i) * sc + r0, sizeof t[i]);
        mrt_transpose8x8(t);
        _Pragma("clang loop unroll(full)") for (int i = 0; i < 8; ++i)
          __builtin_memcpy(y + (r0 + i) * cols + c0, &t[i], sizeof t[i]);
      }
    y += rows * cols;
    if (!mrt_view_next(v, idx, &off)) return;
  }
}
#else
#define MRT_TRANSPOSE_8X8 0
#endif

typedef struct mrt_transpose_params {
  mrt_view v;
  int blocks8; /* mrt_transpose_blocks8 serves this view on this CPU */
} mrt_transpose_params;

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_transpose_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 1, 1, 1);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  /* Whichever type of this object's size input 0 has, output 0 must have it too. */
  if ((st = mrt_check_dtype(ctx, node, y, x->dtype))) return st;
  const uint32_t r = x->ndim;
  const int64_t *perm;
  uint32_t np = mrt_attr_ints(node, "perm", &perm);
  if ((np && np != r) || y->ndim != r)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "perm has %u values and the output rank %u; both must equal the input "
                         "rank %u",
                         np, y->ndim, r);
  mrt_transpose_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  mrt_view *v = &p->v;
  ptrdiff_t xs[MRT_MAX_DIMS];
  ptrdiff_t s = 1;
  for (uint32_t i = r; i-- > 0;) xs[i] = s, s *= (ptrdiff_t)x->dims[i];
  uint32_t seen = 0;
  for (uint32_t i = 0; i < r; i++) {
    const int64_t d = np ? perm[i] : (int64_t)(r - 1 - i); /* default: reverse the dims */
    if (d < 0 || d >= (int64_t)r || (seen >> d & 1))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "perm is not a permutation");
    seen |= 1u << d;
    if (y->dims[i] != x->dims[d])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "output dim %u is %lld, perm gives %lld", i, (long long)y->dims[i],
                           (long long)x->dims[d]);
    v->n[i] = (size_t)x->dims[d], v->s[i] = xs[d];
  }
  v->ndim = r;
  mrt_view_collapse(v);
  p->blocks8 = 0;
#if MRT_TRANSPOSE_8X8
  const uint32_t k = v->ndim;
  p->blocks8 = k >= 2 && v->s[k - 2] == 1 && v->n[k - 2] % 8 == 0 && v->n[k - 1] % 8 == 0 &&
               mrt_vmath_isa() >= 1;
#endif
  node->params = p;
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_transpose_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const mrt_transpose_params *p = node->params;
#if MRT_TRANSPOSE_8X8
  if (p->blocks8) {
    mrt_transpose_blocks8(&p->v, node->inputs[0]->data, node->outputs[0]->data);
    return;
  }
#endif
  MRT_VIEW_COPY_FN(&p->v, node->inputs[0]->data, node->outputs[0]->data);
}

#endif
