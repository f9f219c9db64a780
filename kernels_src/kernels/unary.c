/*
 * Elementwise unary float32 ops: Relu, Clip, Sigmoid, Tanh, LeakyRelu,
 * HardSigmoid, HardSwish, Exp, Sqrt, Neg, Abs, Erf, Gelu, Mish, and ai.minibuild's
 * SiLU (x * Sigmoid(x), fused at build time). Each op is a flat inner loop
 * `mrt_<op>_f32(n, x, y[, a, b])` plus a thin wrapper; the op of the object is
 * picked by MRT_OP_<op>. Loops are written as selects so they vectorise; the
 * transcendental ones (Sigmoid, Tanh, Exp, Erf, Gelu, Mish, SiLU) and HardSwish are vmath.h
 * array functions, vector polynomials instead of libm per element, in the copy
 * prepare picks for the CPU (AVX2 + FMA on x86_64 where present).
 */
#include "kcommon.h"

#if defined(MRT_TYPE_float32)

/* y = f(x) over n floats; large arrays are cut between the session's threads
 * (2^15 floats a task for the memory-bound loops, 2^12 for the vmath ones). */
typedef void (*un_map_fn)(size_t n, const float *x, float *y);
#define UN_TASK_ELEMS ((size_t)1 << 15)
#define UN_VMATH_TASK_ELEMS ((size_t)1 << 12)
#if MRT_ENABLE_THREADS
typedef struct un_job {
  un_map_fn f;
  const float *x;
  float *y;
  size_t n, chunk;
} un_job;

static inline void un_task(void *arg, size_t t, size_t thread) {
  const un_job *j = arg;
  MRT_UNUSED(thread);
  const size_t lo = t * j->chunk;
  j->f(j->n - lo < j->chunk ? j->n - lo : j->chunk, j->x + lo, j->y + lo);
}

static inline void un_map(mrt_pool *pool, un_map_fn f, size_t n, const float *x, float *y, size_t min) {
  const size_t tasks = mrt_pool_tasks(pool, n, min);
  if (tasks <= 1) {
    f(n, x, y);
    return;
  }
  const size_t chunk = ((n + tasks - 1) / tasks + 15) & ~(size_t)15;
  un_job job = {f, x, y, n, chunk};
  mrt_parallel_for(pool, (n + chunk - 1) / chunk, un_task, &job);
}
#else
#define un_map(pool, f, n, x, y, min) ((void)(pool), (f)((n), (x), (y)))
#endif

/* The two float parameters an op may carry (alpha/beta, or min/max for Clip). */
typedef struct un_params {
  float a, b;
} un_params;

#define LOOP(name, expr)                                                                  \
  void mrt_##name##_f32(size_t n, const float *restrict x, float *restrict y) {           \
    for (size_t i = 0; i < n; i++) {                                                      \
      const float v = x[i];                                                               \
      y[i] = (expr);                                                                      \
    }                                                                                     \
  }
#define LOOP2(name, expr)                                                                 \
  void mrt_##name##_f32(size_t n, const float *restrict x, float *restrict y, float a,   \
                        float b) {                                                        \
    MRT_UNUSED(a), MRT_UNUSED(b);                                                         \
    for (size_t i = 0; i < n; i++) {                                                      \
      const float v = x[i];                                                               \
      y[i] = (expr);                                                                      \
    }                                                                                     \
  }
#define RUN1(name)                                                                        \
  void mrt_##name##_run_f32(const mrt_node *node, void *scratch) {                       \
    MRT_UNUSED(scratch);                                                                  \
    const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];                        \
    un_map(node->pool, mrt_##name##_f32, y->count, x->data, y->data, UN_TASK_ELEMS);      \
  }
#define RUN2(name)                                                                        \
  void mrt_##name##_run_f32(const mrt_node *node, void *scratch) {                       \
    MRT_UNUSED(scratch);                                                                  \
    const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];                        \
    const un_params *p = node->params;                                                    \
    mrt_##name##_f32(y->count, x->data, y->data, p->a, p->b);                             \
  }
/* prepare for ops whose parameters are attributes (or none). */
#define PREPARE(name, aname, adflt, bname, bdflt)                                         \
  mrt_status mrt_##name##_prepare_f32(mrt_node *node, mrt_ctx *ctx) {                    \
    mrt_status st = un_check(node, ctx, 1);                                               \
    if (st) return st;                                                                    \
    un_params *p = mrt_ctx_alloc(ctx, sizeof *p);                                         \
    if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");   \
    p->a = mrt_attr_float(node, aname, adflt);                                            \
    p->b = mrt_attr_float(node, bname, bdflt);                                            \
    node->params = p;                                                                     \
    return MRT_STATUS_OK;                                                                 \
  }

#define PREPARE0(name)                                                                    \
  mrt_status mrt_##name##_prepare_f32(mrt_node *node, mrt_ctx *ctx) {                    \
    return un_check(node, ctx, 1);                                                        \
  }

/* One float input (plus max_in - 1 optional ones), one output of the same shape. */
MRT_PREPARE_CODE
static mrt_status un_check(mrt_node *node, mrt_ctx *ctx, uint32_t max_in) {
  mrt_status st = mrt_check_xy(ctx, node, 1, max_in, 1, MRT_DTYPE_FLOAT32);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  if (!mrt_same_dims(x, y))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "output shape must equal the input shape");
  return MRT_STATUS_OK;
}

#if defined(MRT_OP_Relu)
/* x < 0 rather than x > 0 so that NaN passes through, as max(x, 0) does in ONNX. */
LOOP(relu, v < 0.0f ? 0.0f : v)
RUN1(relu)
PREPARE0(relu)
#endif


#if defined(MRT_OP_Sqrt)
LOOP(sqrt, sqrtf(v))
RUN1(sqrt)
PREPARE0(sqrt)
#endif

#if defined(MRT_OP_Neg)
LOOP(neg, -v)
RUN1(neg)
PREPARE0(neg)
#endif

#if defined(MRT_OP_Abs)
LOOP(abs, fabsf(v))
RUN1(abs)
PREPARE0(abs)
#endif

#if defined(MRT_OP_Sigmoid) || defined(MRT_OP_Tanh) || defined(MRT_OP_Exp) || defined(MRT_OP_Erf) || \
    defined(MRT_OP_Gelu) || defined(MRT_OP_HardSwish) || defined(MRT_OP_Mish) || defined(MRT_OP_SiLU)
#include "vmath.h"

typedef struct vmap_params {
  mrt_vmap_fn fn; /* the loop for this CPU (vmath.h) */
} vmap_params;

MRT_PREPARE_CODE
static mrt_status vmap_prepare(mrt_node *node, mrt_ctx *ctx, mrt_vmap_fn fn) {
  mrt_status st = un_check(node, ctx, 1);
  if (st) return st;
  vmap_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->fn = fn;
  node->params = p;
  return MRT_STATUS_OK;
}

static void vmap_run(const mrt_node *node) {
  const vmap_params *p = node->params;
  un_map(node->pool, p->fn, node->outputs[0]->count, node->inputs[0]->data, node->outputs[0]->data,
         UN_VMATH_TASK_ELEMS);
}
#endif

/* The ops that are one vmath.h array function: prepare picks the copy for this CPU. */
#define VMAP_OP(name)                                                                     \
  MRT_PREPARE_CODE                                                                        \
  mrt_status mrt_##name##_prepare_f32(mrt_node *node, mrt_ctx *ctx) {                    \
    return vmap_prepare(node, ctx, MRT_VSELECT(mrt_vmap_##name));                         \
  }                                                                                       \
  void mrt_##name##_run_f32(const mrt_node *node, void *scratch) {                       \
    MRT_UNUSED(scratch);                                                                  \
    vmap_run(node);                                                                       \
  }

#if defined(MRT_OP_Sigmoid)
VMAP_OP(sigmoid)
#endif

#if defined(MRT_OP_Tanh)
VMAP_OP(tanh)
#endif

#if defined(MRT_OP_Exp)
VMAP_OP(exp)
#endif

#if defined(MRT_OP_HardSwish)
VMAP_OP(hardswish)
#endif

#if defined(MRT_OP_SiLU)
VMAP_OP(silu) /* x / (1 + e^-x) in one pass */
#endif

#if defined(MRT_OP_Mish)
VMAP_OP(mish) /* x * tanh(softplus(x)) without log or tanh */
#endif

#if defined(MRT_OP_Erf)
MRT_PREPARE_CODE
mrt_status mrt_erf_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  return vmap_prepare(node, ctx, MRT_VSELECT(mrt_vmap_erf));
}

void mrt_erf_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  vmap_run(node);
}
#endif

#if defined(MRT_OP_Gelu)
/* approximate="none" is x * Phi(x) through erfc, "tanh" x * sigmoid(2u): see vmath_impl.h. */
MRT_PREPARE_CODE
mrt_status mrt_gelu_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  const int is_tanh = mrt_attr_string_is(node, "approximate", "none", "tanh");
  if (!is_tanh && !mrt_attr_string_is(node, "approximate", "none", "none"))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "attribute approximate must be \"none\" or \"tanh\"");
  return vmap_prepare(node, ctx, is_tanh ? MRT_VSELECT(mrt_vmap_gelu_tanh) : MRT_VSELECT(mrt_vmap_gelu));
}

void mrt_gelu_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  vmap_run(node);
}
#endif

#if defined(MRT_OP_LeakyRelu)
LOOP2(leakyrelu, v < 0.0f ? v * a : v)
RUN2(leakyrelu)
PREPARE(leakyrelu, "alpha", 0.01f, "", 0.0f)
#endif

#if defined(MRT_OP_HardSigmoid)
#define HS_CLAMP01(t) ((t) < 0.0f ? 0.0f : (t) > 1.0f ? 1.0f : (t))
LOOP2(hardsigmoid, HS_CLAMP01(a * v + b))
RUN2(hardsigmoid)
PREPARE(hardsigmoid, "alpha", 0.2f, "beta", 0.5f)
#endif

#if defined(MRT_OP_Clip)
/* min(max(x, lo), hi) as two selects: NaN passes through, the loop vectorises,
 * and lo > hi gives hi as in numpy.clip and onnxruntime. */
static inline float clamp(float v, float lo, float hi) {
  const float t = v < lo ? lo : v;
  return t > hi ? hi : t;
}
LOOP2(clip, clamp(v, a, b))

typedef struct clip_params {
  un_params lim;
  const mrt_tensor *min_t, *max_t; /* non-constant limit inputs, read at run */
} clip_params;

/* Opset 11+: min and max are optional scalar inputs, almost always constants. */
MRT_PREPARE_CODE
static mrt_status clip_limit(mrt_node *node, mrt_ctx *ctx, uint32_t i, float *v,
                             const mrt_tensor **dyn) {
  const mrt_tensor *t = mrt_in(node, i);
  if (!t) return MRT_STATUS_OK;
  mrt_status st = mrt_check_dtype(ctx, node, t, MRT_DTYPE_FLOAT32);
  if (st) return st;
  if (t->count != 1)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "input %u (%s) must be a scalar, it has %zu elements", i,
                         i == 1 ? "min" : "max", t->count);
  if (t->is_constant && t->data)
    *v = *(const float *)t->data;
  else
    *dyn = t;
  return MRT_STATUS_OK;
}

MRT_PREPARE_CODE
mrt_status mrt_clip_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = un_check(node, ctx, 3);
  if (st) return st;
  clip_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->lim.a = -FLT_MAX, p->lim.b = FLT_MAX;
  if (node->opset < 11) {
    p->lim.a = mrt_attr_float(node, "min", -FLT_MAX);
    p->lim.b = mrt_attr_float(node, "max", FLT_MAX);
  } else if ((st = clip_limit(node, ctx, 1, &p->lim.a, &p->min_t)) ||
             (st = clip_limit(node, ctx, 2, &p->lim.b, &p->max_t))) {
    return st;
  }
  node->params = p;
  return MRT_STATUS_OK;
}

void mrt_clip_run_f32(const mrt_node *node, void *scratch) {
  MRT_UNUSED(scratch);
  const clip_params *p = node->params;
  const mrt_tensor *x = node->inputs[0], *y = node->outputs[0];
  float lo = p->min_t ? *(const float *)p->min_t->data : p->lim.a;
  float hi = p->max_t ? *(const float *)p->max_t->data : p->lim.b;
  mrt_clip_f32(y->count, x->data, y->data, lo, hi);
}
#endif

#endif /* MRT_TYPE_float32 */
