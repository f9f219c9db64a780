/*
 * Cast T1 -> T2, one object per (T1, T2) signature the manifest selects.
 *
 * Conversions are those of numpy/onnxruntime for every in-range value, and defined
 * for every other one, since C leaves float -> int overflow undefined: a float
 * converted to an integer type truncates toward zero to int64 (NaN giving 0, int64's
 * range saturating) and narrower types wrap from there; to bool, anything non-zero
 * (NaN too) is true; float16 goes through float32 (half.h), rounding to nearest even. `saturate` (opset 19+) only
 * concerns float8 targets, which minirt does not have; the output type comes from
 * the output tensor, so `to` needs no reading.
 */
#include "kcommon.h"
#include "half.h"

#if defined(MRT_KERNEL_SUFFIX) && defined(MRT_OP_Cast)

typedef MRT_T0 src_t;
typedef MRT_T1 dst_t;

#if defined(MRT_T0_IS_float16)
#define SRC_FLOAT 1
typedef float mid_t;
#define TO_MID(v) mrt_half_to_float(v)
#elif defined(MRT_T0_IS_bool)
typedef uint8_t mid_t;
#define TO_MID(v) ((uint8_t)((v) != 0))
#else
typedef src_t mid_t;
#define TO_MID(v) (v)
#if defined(MRT_T0_IS_float32) || defined(MRT_T0_IS_float64)
#define SRC_FLOAT 1
#endif
#endif

#if defined(MRT_T1_IS_int8) || defined(MRT_T1_IS_uint8) || defined(MRT_T1_IS_int16) || \
    defined(MRT_T1_IS_uint16) || defined(MRT_T1_IS_int32) || defined(MRT_T1_IS_uint32) || \
    defined(MRT_T1_IS_int64) || defined(MRT_T1_IS_uint64)
#define INT_TARGET 1
#endif

static inline dst_t convert(src_t v) {
  const mid_t m = TO_MID(v);
#if defined(MRT_T1_IS_bool)
  return (dst_t)(m != 0);
#elif defined(MRT_T1_IS_float16)
  return mrt_float_to_half((float)m);
#elif defined(SRC_FLOAT) && defined(INT_TARGET)
  /* Through int64, as onnxruntime's and numpy's conversions go on common CPUs (so
   * -5.3 -> uint8 is 251); NaN -> 0 and int64's range saturates, which C leaves
   * undefined. 2^63 is exact in float and double. */
  const int64_t w = m != m ? 0 : m >= (mid_t)0x1p63 ? INT64_MAX : m < (mid_t)-0x1p63 ? INT64_MIN : (int64_t)m;
#if defined(MRT_T1_IS_uint64)
  if (m >= (mid_t)0x1p63) return m >= (mid_t)0x1p64 ? UINT64_MAX : (uint64_t)m;
#endif
  return (dst_t)w;
#else
  return (dst_t)m;
#endif
}

MRT_PREPARE_CODE
mrt_status MRT_KERNEL(mrt_cast_prepare)(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 1, 1, 1, 1);
  if (st) return st;
  if (!node->inputs[0]) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input 0 is missing");
  if ((st = mrt_check_dtype(ctx, node, node->inputs[0], MRT_T0_DTYPE))) return st;
  if ((st = mrt_check_dtype(ctx, node, node->outputs[0], MRT_T1_DTYPE))) return st;
  if (!mrt_same_dims(node->inputs[0], node->outputs[0]))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output must have the input's shape");
  return MRT_STATUS_OK;
}

void MRT_KERNEL(mrt_cast_run)(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const src_t *MRT_RESTRICT x = node->inputs[0]->data;
  dst_t *MRT_RESTRICT y = node->outputs[0]->data;
  const size_t n = node->outputs[0]->count;
  for (size_t i = 0; i < n; i++) y[i] = convert(x[i]);
}

#endif
