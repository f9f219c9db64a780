/*
 * Conv (ai.onnx), FusedConv and FusedConvAct (ai.minibuild: Conv [+ Add of a
 * residual] + an activation), float32. The work is in the conv support unit
 * (mrt_conv_core_*, conv_core.c), shared by the three ops so a model using
 * several links it once; this file maps each op onto it.
 *
 * The fused ops' inputs are X, W, optional B and, with the attribute
 * residual = 1, R (Y's shape), added before the activation. FusedConv's
 * `activation` is Relu, Clip (activation_params [min, max]) or LeakyRelu
 * ([alpha]); FusedConvAct's is Sigmoid, SiLU or HardSwish, run by vmath.h's
 * array functions, the very ones the standalone kernels run, so fused outputs
 * equal unfused ones. They are two ops so that a build whose convolutions
 * only clamp (MobileNetV2) carries none of the vmath code. ScaledConv (at the
 * end) is Conv of X scaled per input channel, [+ R].
 */
#include "conv_core.h"
#include "gemm.h" /* mrt_sgemm_activation */

#if defined(MRT_TYPE_float32)

#if defined(MRT_OP_Conv)
MRT_PREPARE_CODE
mrt_status mrt_conv_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  return mrt_conv_core_prepare_f32(node, ctx, NULL, 0);
}

void mrt_conv_run_f32(const mrt_node *node, void *scratch) { mrt_conv_core_run_f32(node, scratch); }
#endif

#if defined(MRT_OP_FusedConv) || defined(MRT_OP_FusedConvAct) || defined(MRT_OP_ScaledConv)
/* The fused ops' residual attribute: 0 or 1. */
MRT_PREPARE_CODE
static mrt_status mrt_residual_attr(mrt_node *node, mrt_ctx *ctx, int *residual) {
  const int64_t r = mrt_attr_int(node, "residual", 0);
  if (r != 0 && r != 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "residual must be 0 or 1, got %lld", (long long)r);
  *residual = (int)r;
  return MRT_STATUS_OK;
}
#endif

#if defined(MRT_OP_FusedConv) || defined(MRT_OP_FusedConvAct)
/* The residual attribute, then the core's prepare. */
MRT_PREPARE_CODE
static mrt_status mrt_fused_prepare(mrt_node *node, mrt_ctx *ctx, const mrt_conv_act *act) {
  int residual;
  const mrt_status st = mrt_residual_attr(node, ctx, &residual);
  return st != MRT_STATUS_OK ? st : mrt_conv_core_prepare_f32(node, ctx, act, residual);
}
#endif

#if defined(MRT_OP_FusedConv)
MRT_PREPARE_CODE
mrt_status mrt_fusedconv_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  const float inf = __builtin_inff();
  mrt_conv_act act = {-inf, inf, 0, 0.0f, NULL};
  if (mrt_attr_string_is(node, "activation", "", "LeakyRelu")) {
    const float *ap = NULL;
    const uint32_t np = mrt_attr_floats(node, "activation_params", &ap);
    if (np > 1)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "activation_params of LeakyRelu must hold [alpha], got %u values", np);
    act.leaky = 1;
    act.alpha = np == 1 ? ap[0] : 0.01f;
  } else {
    const mrt_status st = mrt_sgemm_activation(ctx, node, &act.lo, &act.hi);
    if (st != MRT_STATUS_OK) return st;
  }
  return mrt_fused_prepare(node, ctx, &act);
}

void mrt_fusedconv_run_f32(const mrt_node *node, void *scratch) { mrt_conv_core_run_f32(node, scratch); }
#endif

#if defined(MRT_OP_FusedConvAct)
#include "vmath.h"

MRT_PREPARE_CODE
mrt_status mrt_fusedconvact_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  const float inf = __builtin_inff();
  mrt_conv_act act = {-inf, inf, 0, 0.0f, NULL};
  if (mrt_attr_string_is(node, "activation", "", "Sigmoid"))
    act.map = MRT_VSELECT(mrt_vmap_sigmoid);
  else if (mrt_attr_string_is(node, "activation", "", "SiLU"))
    act.map = MRT_VSELECT(mrt_vmap_silu);
  else if (mrt_attr_string_is(node, "activation", "", "HardSwish"))
    act.map = MRT_VSELECT(mrt_vmap_hardswish);
  else
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "activation must be Sigmoid, SiLU or HardSwish (FusedConv has the clamps)");
  return mrt_fused_prepare(node, ctx, &act);
}

void mrt_fusedconvact_run_f32(const mrt_node *node, void *scratch) { mrt_conv_core_run_f32(node, scratch); }
#endif

#if defined(MRT_OP_ScaledConv)
/*
 * ScaledConv: Conv(X * S, W) + B [+ R], S one factor per input channel (the
 * squeeze-excitation's Mul, any shape of C_in elements), group 1. Scaling input
 * channel c scales W's column c, so each run multiplies W's M x K floats into a
 * copy and runs the core on that: the graph rewrite (minibuild/optimize.py)
 * picks it only where the weights are far smaller than X, so the product costs
 * less than the Mul's pass over X it removes (and the conv reads X as the
 * previous node left it, not the Mul's fresh copy). The core sees a node of its
 * own, [X, W', B, R], whose W' is a tensor of this node's (not constant: the
 * core then packs it per run, never at prepare).
 */
typedef struct mrt_scaledconv {
  mrt_node core;        /* the node the conv core prepares and runs */
  mrt_tensor *in[4];    /* its inputs: X, &w, B, R */
  mrt_tensor w;         /* W' = W (.) S, in memory of this node's */
  size_t taps, c_in, m; /* W as M x (C_in x taps) */
} mrt_scaledconv;

MRT_PREPARE_CODE
mrt_status mrt_scaledconv_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 5, 1, 1); /* B may be omitted: S is checked below */
  int residual;
  if (st != MRT_STATUS_OK || (st = mrt_residual_attr(node, ctx, &residual)) != MRT_STATUS_OK) return st;
  if (mrt_attr_int(node, "group", 1) != 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "ScaledConv takes group = 1 only");
  const mrt_tensor *x = node->inputs[0], *w = node->inputs[1], *s = node->n_inputs > 3 ? node->inputs[3] : NULL;
  if (!x || !w || !s) return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "X, W and S are required");
  if ((st = mrt_check_dtype(ctx, node, s, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, w, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if (x->ndim < 3 || w->ndim != x->ndim || w->dims[1] != x->dims[1] || s->count != (size_t)x->dims[1])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "S must hold one factor per input channel of X, and W's dim 1 must be X's channels");
  mrt_scaledconv *sc = (mrt_scaledconv *)mrt_ctx_alloc(ctx, sizeof *sc);
  if (!sc) return MRT_STATUS_OUT_OF_MEMORY;
  sc->w = *w;
  sc->w.is_constant = 0;
  sc->w.data = mrt_ctx_alloc(ctx, w->nbytes); /* 64-byte aligned */
  if (!sc->w.data) return MRT_STATUS_OUT_OF_MEMORY;
  sc->m = (size_t)w->dims[0];
  sc->c_in = (size_t)w->dims[1];
  sc->taps = w->count / sc->m / sc->c_in;
  sc->in[0] = node->inputs[0];
  sc->in[1] = &sc->w;
  sc->in[2] = node->inputs[2];
  sc->in[3] = residual ? node->inputs[4] : NULL;
  if (residual && (node->n_inputs < 5 || !node->inputs[4]))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input 4 (the residual added to Y) is required");
  sc->core = *node;
  sc->core.inputs = sc->in;
  sc->core.n_inputs = residual ? 4 : 3;
  sc->core.params = NULL;
  if ((st = mrt_conv_core_prepare_f32(&sc->core, ctx, NULL, residual)) != MRT_STATUS_OK) return st;
  node->params = sc;
  return MRT_STATUS_OK;
}

void mrt_scaledconv_run_f32(const mrt_node *node, void *scratch) {
  const mrt_scaledconv *sc = (const mrt_scaledconv *)node->params;
  const float *w = (const float *)node->inputs[1]->data, *s = (const float *)node->inputs[3]->data;
  float *ws = (float *)sc->w.data;
  for (size_t o = 0; o < sc->m; ++o)
    for (size_t c = 0; c < sc->c_in; ++c) {
      const size_t k = (o * sc->c_in + c) * sc->taps;
      for (size_t t = 0; t < sc->taps; ++t) ws[k + t] = w[k + t] * s[c];
    }
  mrt_conv_core_run_f32(&sc->core, scratch);
}
#endif

#endif /* MRT_TYPE_float32 */
