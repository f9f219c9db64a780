/*
 * Blocked, packed single-precision GEMM (support unit `gemm`); see gemm.h.
 *
 * The loop nest follows the usual Goto/BLIS shape: n in blocks of nc (packed
 * B block lives in L3), k in blocks of MRT_SGEMM_KC, m in blocks of mc (packed
 * A block lives in L2), then mr x nr register tiles whose B micro-panel stays
 * in L1. Micro-kernels are written once with vector extensions and stamped
 * out per ISA: the compiler picks the instructions (FMA where allowed).
 */
#include "gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

typedef float mrt_v4f __attribute__((vector_size(16)));
#if defined(__x86_64__)
typedef float mrt_v8f __attribute__((vector_size(32)));
#endif

/*
 * One register tile: MR rows x NV vectors of VL floats; A advances by AS per
 * k step (the panel width; a 1-row tile reads one row of an mr-wide panel, so
 * rows of an edge panel cost one row each, not a full panel) and B by BS (the
 * panel width: a narrow tile for a few edge columns reads the first NV * VL
 * columns of an nr-wide panel). The fixed-trip loops
 * are fully unrolled so acc[][] lives in registers. Loads and stores go
 * through __builtin_memcpy: packed buffers and C rows need not be aligned,
 * and this avoids aliasing a float* as a vector*.
 */
#define MRT_SGEMM_TILE(NAME, ATTR, VT, VL, MR, NV, AS, BS)                                          \
  ATTR static void NAME(size_t kc, const float *MRT_RESTRICT a, const float *MRT_RESTRICT b,   \
                        float *MRT_RESTRICT c, size_t ldc, const mrt_sgemm_tile_args *args) {  \
    VT acc[MR][NV];                                                                           \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r)                           \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) acc[r][v] = (VT){0};    \
    for (size_t q = 0; q < kc; ++q) {                                                         \
      VT bv[NV];                                                                              \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v)                         \
        __builtin_memcpy(&bv[v], b + v * VL, sizeof(VT));                                     \
      _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r) {                       \
        const float ar = a[r];                                                                \
        _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) acc[r][v] += ar * bv[v]; \
      }                                                                                       \
      a += AS;                                                                                \
      b += BS;                                                                                \
    }                                                                                         \
    const VT lo = (VT){0} + args->lo, hi = (VT){0} + args->hi;                                \
    _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; ++r) {                         \
      _Pragma("clang loop unroll(full)") for (int v = 0; v < NV; ++v) {                       \
        float *p = c + (size_t)r * ldc + v * VL;                                              \
        VT x = acc[r][v];                                                                     \
        if (args->accumulate) {                                                               \
          VT old;                                                                             \
          __builtin_memcpy(&old, p, sizeof(VT));                                              \
          x += old;                                                                           \
        }                                                                                     \
        if (args->last) {                                                                     \
          if (args->bias_row) x += args->bias_row[r];                                         \
          if (args->bias_col) {                                                               \
            VT bc;                                                                            \
            __builtin_memcpy(&bc, args->bias_col + v * VL, sizeof(VT));                       \
            x += bc;                                                                          \
          }                                                                                   \
          x = MRT_VMIN(MRT_VMAX(x, lo), hi);                                                  \
        }                                                                                     \
        __builtin_memcpy(p, &x, sizeof(VT));                                                  \
      }                                                                                       \
    }                                                                                         \
  }

/* Tile shapes: accumulators + B vectors + one broadcast must fit the
 * register file (16 xmm/ymm on x86_64, 8 on i386, 32 v-regs on aarch64,
 * 16 q-regs on armv7). */
#if defined(__x86_64__)
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x8__sse, , mrt_v4f, 4, 6, 2, 6, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x8__sse, , mrt_v4f, 4, 1, 2, 6, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x4__sse, , mrt_v4f, 4, 6, 1, 6, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x16__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8, 6, 2, 6, 16)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x16__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8, 1, 2, 6, 16)
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x8__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8, 6, 1, 6, 16)
MRT_SGEMM_TILE(mrt_sgemm_kernel_6x4__avx2, __attribute__((target("avx2,fma"))), mrt_v4f, 4, 6, 1, 6, 16)
static const mrt_sgemm_kernel mrt_sgemm_sse = {6, 8, 120, 2048, mrt_sgemm_kernel_6x8__sse,
                                               mrt_sgemm_kernel_1x8__sse,
                                               {mrt_sgemm_kernel_6x4__sse, NULL}, {4, 0}};
static const mrt_sgemm_kernel mrt_sgemm_avx2 = {6, 16, 120, 2048, mrt_sgemm_kernel_6x16__avx2,
                                                mrt_sgemm_kernel_1x16__avx2,
                                                {mrt_sgemm_kernel_6x4__avx2, mrt_sgemm_kernel_6x8__avx2}, {4, 8}};

#elif defined(__aarch64__)
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x8__neon, , mrt_v4f, 4, 8, 2, 8, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x8__neon, , mrt_v4f, 4, 1, 2, 8, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_8x4__neon, , mrt_v4f, 4, 8, 1, 8, 8)
static const mrt_sgemm_kernel mrt_sgemm_default = {8, 8, 128, 2048, mrt_sgemm_kernel_8x8__neon,
                                                   mrt_sgemm_kernel_1x8__neon,
                                                   {mrt_sgemm_kernel_8x4__neon, NULL}, {4, 0}};
#elif defined(__ARM_NEON)
MRT_SGEMM_TILE(mrt_sgemm_kernel_4x8__neon, , mrt_v4f, 4, 4, 2, 4, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x8__neon, , mrt_v4f, 4, 1, 2, 4, 8)
MRT_SGEMM_TILE(mrt_sgemm_kernel_4x4__neon, , mrt_v4f, 4, 4, 1, 4, 8)
static const mrt_sgemm_kernel mrt_sgemm_default = {4, 8, 128, 1024, mrt_sgemm_kernel_4x8__neon,
                                                   mrt_sgemm_kernel_1x8__neon,
                                                   {mrt_sgemm_kernel_4x4__neon, NULL}, {4, 0}};
#else
/* i386 (8 xmm registers) and anything without a known SIMD unit. */
MRT_SGEMM_TILE(mrt_sgemm_kernel_4x4, , mrt_v4f, 4, 4, 1, 4, 4)
MRT_SGEMM_TILE(mrt_sgemm_kernel_1x4, , mrt_v4f, 4, 1, 1, 4, 4)
static const mrt_sgemm_kernel mrt_sgemm_default = {4, 4, 128, 1024, mrt_sgemm_kernel_4x4,
                                                   mrt_sgemm_kernel_1x4, {NULL, NULL}, {0, 0}};
#endif

#if defined(__x86_64__)
enum { MRT_ISA_SSE = 0, MRT_ISA_AVX2 = 1 };

/* The widest micro-kernel family the CPU and OS support. AVX2/FMA need OS-saved
 * ymm state (XCR0 bits 1-2). (An AVX-512 12 x 32 tile was measured on a Zen CPU
 * with AVX-512: same GEMM throughput as AVX2, 0-10% on whole models, +5 KB.)
 * cpuid rather than __builtin_cpu_supports, which needs libgcc/compiler-rt
 * state that Android builds do not link. */
MRT_PREPARE_CODE
static int mrt_cpu_isa(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return MRT_ISA_SSE;
  if (!(c & bit_FMA) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return MRT_ISA_SSE;
  unsigned xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  (void)xhi;
  if ((xlo & 6u) != 6u) return MRT_ISA_SSE;
  if (__get_cpuid_max(0, 0) < 7) return MRT_ISA_SSE;
  __cpuid_count(7, 0, a, b, c, d);
  return (b & bit_AVX2) ? MRT_ISA_AVX2 : MRT_ISA_SSE;
}

/* MINIRT_MAX_CPU_ISA=sse caps the choice (to rule a code path out when chasing
 * a numerical difference, or to test every path on one machine). */
MRT_PREPARE_CODE
static int mrt_isa_cap(void) {
  const char *cap = getenv("MINIRT_MAX_CPU_ISA");
  return cap && strcmp(cap, "sse") == 0 ? MRT_ISA_SSE : MRT_ISA_AVX2;
}
#endif

MRT_PREPARE_CODE
const mrt_sgemm_kernel *mrt_sgemm_kernel_select(void) {
#if defined(__x86_64__)
  const int cpu = mrt_cpu_isa(), cap = mrt_isa_cap();
  return (cpu < cap ? cpu : cap) == MRT_ISA_AVX2 ? &mrt_sgemm_avx2 : &mrt_sgemm_sse;
#else
  return &mrt_sgemm_default;
#endif
}

static size_t mrt_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
static size_t mrt_min(size_t a, size_t b) { return a < b ? a : b; }

/*
 * Packs x0..x0+xc (the panel dimension: rows of A, columns of B) by
 * k0..k0+kc of a strided operand, element (x, k) = data[x*xs + k*ks], into
 * panels of w, zero-padding the last panel.
 */
static void mrt_sgemm_pack_strided(const float *data, size_t xs, size_t ks, float scale, size_t x0,
                                   size_t xc, size_t k0, size_t kc, size_t w,
                                   float *MRT_RESTRICT dst) {
  for (size_t p = 0; p < xc; p += w) {
    const size_t pw = mrt_min(w, xc - p);
    const float *base = data + (x0 + p) * xs + k0 * ks;
    if (xs == 1) {
      /* Panel rows are contiguous in the source: plain copies. */
      for (size_t q = 0; q < kc; ++q) {
        const float *s = base + q * ks;
        float *d = dst + q * w;
        size_t r = 0;
        for (; r < pw; ++r) d[r] = s[r] * scale;
        for (; r < w; ++r) d[r] = 0.0f;
      }
    } else {
      for (size_t r = 0; r < pw; ++r) {
        const float *s = base + r * xs;
        for (size_t q = 0; q < kc; ++q) dst[q * w + r] = s[q * ks] * scale;
      }
      for (size_t r = pw; r < w; ++r)
        for (size_t q = 0; q < kc; ++q) dst[q * w + r] = 0.0f;
    }
    dst += w * kc;
  }
}

MRT_PREPARE_CODE
size_t mrt_sgemm_packed_a_size(const mrt_sgemm_kernel *kern, size_t m, size_t k) {
  return mrt_round_up(m, kern->mr) * k;
}

MRT_PREPARE_CODE
size_t mrt_sgemm_packed_b_size(const mrt_sgemm_kernel *kern, size_t k, size_t n) {
  return mrt_round_up(n, kern->nr) * k;
}

void mrt_sgemm_pack_a(const mrt_sgemm_kernel *kern, size_t m, size_t k, const float *a, size_t rs,
                      size_t cs, float scale, float *MRT_RESTRICT dst) {
  const size_t mpad = mrt_round_up(m, kern->mr);
  for (size_t k0 = 0; k0 < k; k0 += MRT_SGEMM_KC)
    mrt_sgemm_pack_strided(a, rs, cs, scale, 0, m, k0, mrt_min(MRT_SGEMM_KC, k - k0), kern->mr,
                           dst + k0 * mpad);
}

void mrt_sgemm_pack_b(const mrt_sgemm_kernel *kern, size_t k, size_t n, const float *b, size_t rs,
                      size_t cs, float scale, float *MRT_RESTRICT dst) {
  const size_t npad = mrt_round_up(n, kern->nr);
  for (size_t k0 = 0; k0 < k; k0 += MRT_SGEMM_KC)
    mrt_sgemm_pack_strided(b, cs, rs, scale, 0, n, k0, mrt_min(MRT_SGEMM_KC, k - k0), kern->nr,
                           dst + k0 * npad);
}

/* Scratch: one B block then one A block, each rounded to 64 bytes. */
static size_t mrt_sgemm_b_block_floats(const mrt_sgemm_kernel *kern, size_t n, size_t k) {
  return mrt_round_up(mrt_round_up(mrt_min(n, kern->nc), kern->nr) * mrt_min(k, MRT_SGEMM_KC), 16);
}

MRT_PREPARE_CODE
size_t mrt_sgemm_scratch_size(const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k,
                              int a_packed, int b_packed) {
  size_t floats = 0;
  if (!b_packed) floats += mrt_sgemm_b_block_floats(kern, n, k);
  if (!a_packed)
    floats += mrt_round_up(mrt_round_up(mrt_min(m, kern->mc), kern->mr) * mrt_min(k, MRT_SGEMM_KC), 16);
  return floats * sizeof(float);
}

/* k == 0: the product is empty, only the epilogue remains. */
static void mrt_sgemm_epilogue_only(size_t m, size_t n, int accumulate, const mrt_sgemm_epilogue *ep,
                                    float *c, size_t ldc) {
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      float x = accumulate ? c[i * ldc + j] : 0.0f;
      if (ep && ep->bias_row) x += ep->bias_row[i];
      if (ep && ep->bias_col) x += ep->bias_col[j];
      if (ep) x = x < ep->lo ? ep->lo : (x > ep->hi ? ep->hi : x);
      c[i * ldc + j] = x;
    }
}

void mrt_sgemm(const mrt_sgemm_kernel *kern, size_t m, size_t n, size_t k, const mrt_sgemm_src *a,
               const mrt_sgemm_src *b, int accumulate, const mrt_sgemm_epilogue *ep,
               float *MRT_RESTRICT c, size_t ldc, void *scratch) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    mrt_sgemm_epilogue_only(m, n, accumulate, ep, c, ldc);
    return;
  }
  const size_t mr = kern->mr, nr = kern->nr, mc = kern->mc, nc = kern->nc;
  const size_t mpad = mrt_round_up(m, mr), npad = mrt_round_up(n, nr);
  float *bbuf = (float *)scratch;
  float *abuf = bbuf + (b->packed ? 0 : mrt_sgemm_b_block_floats(kern, n, k));
  const float inf = __builtin_inff();
  mrt_sgemm_tile_args args = {0};
  args.lo = ep ? ep->lo : -inf;
  args.hi = ep ? ep->hi : inf;
  float tmp_c[256], tmp_row[32], tmp_col[64];
  MRT_ASSERT(mr * nr <= 256 && mr <= 32 && nr <= 64);

  for (size_t j0 = 0; j0 < n; j0 += nc) {
    const size_t ncur = mrt_min(nc, n - j0);
    for (size_t k0 = 0; k0 < k; k0 += MRT_SGEMM_KC) {
      const size_t kcur = mrt_min(MRT_SGEMM_KC, k - k0);
      const float *bp;
      if (b->packed) {
        bp = b->packed + k0 * npad + j0 * kcur;
      } else if (b->pack) {
        b->pack(b->pack_ctx, k0, kcur, j0, ncur, nr, bbuf);
        bp = bbuf;
      } else {
        mrt_sgemm_pack_strided(b->data, b->cs, b->rs, b->scale, j0, ncur, k0, kcur, nr, bbuf);
        bp = bbuf;
      }
      args.accumulate = accumulate || k0 > 0;
      args.last = k0 + kcur == k;
      for (size_t i0 = 0; i0 < m; i0 += mc) {
        const size_t mcur = mrt_min(mc, m - i0);
        const float *ap;
        if (a->packed) {
          ap = a->packed + k0 * mpad + i0 * kcur;
        } else if (a->pack) {
          a->pack(a->pack_ctx, k0, kcur, i0, mcur, mr, abuf);
          ap = abuf;
        } else {
          mrt_sgemm_pack_strided(a->data, a->rs, a->cs, a->scale, i0, mcur, k0, kcur, mr, abuf);
          ap = abuf;
        }
        for (size_t jr = 0; jr < ncur; jr += nr) {
          const size_t nn = mrt_min(nr, ncur - jr), j = j0 + jr;
          for (size_t ir = 0; ir < mcur; ir += mr) {
            const size_t mm = mrt_min(mr, mcur - ir), i = i0 + ir;
            float *cp = c + i * ldc + j;
            args.bias_row = ep && ep->bias_row ? ep->bias_row + i : NULL;
            args.bias_col = ep && ep->bias_col ? ep->bias_col + j : NULL;
            if (mm == mr && nn == nr) {
              kern->tile(kcur, ap + ir * kcur, bp + jr * kcur, cp, ldc, &args);
              continue;
            }
            /* Edge tile. A partial column range goes through a local copy so
             * nothing is read or written past C or the biases; a few
             * partial rows run one at a time with the 1-row kernel, so an
             * M = 1 GEMV costs one row, not mr. */
            if (args.bias_col && nn < nr) {
              memcpy(tmp_col, args.bias_col, nn * sizeof(float));
              memset(tmp_col + nn, 0, (nr - nn) * sizeof(float));
              args.bias_col = tmp_col;
            }
            if (mm * 3 > mr) {
              mrt_sgemm_tile_fn tile = kern->tile;
              for (int t = 0; t < 2; ++t)
                if (kern->narrow[t] && nn <= kern->narrow_w[t]) {
                  tile = kern->narrow[t];
                  break;
                }
              if (args.bias_row && mm < mr) {
                memcpy(tmp_row, args.bias_row, mm * sizeof(float));
                memset(tmp_row + mm, 0, (mr - mm) * sizeof(float));
                args.bias_row = tmp_row;
              }
              if (args.accumulate)
                for (size_t r = 0; r < mm; ++r) memcpy(tmp_c + r * nr, cp + r * ldc, nn * sizeof(float));
              tile(kcur, ap + ir * kcur, bp + jr * kcur, tmp_c, nr, &args);
              for (size_t r = 0; r < mm; ++r) memcpy(cp + r * ldc, tmp_c + r * nr, nn * sizeof(float));
              continue;
            }
            const float *bias_row = args.bias_row;
            for (size_t r = 0; r < mm; ++r) {
              float *dst = nn == nr ? cp + r * ldc : tmp_c;
              if (nn < nr && args.accumulate) memcpy(tmp_c, cp + r * ldc, nn * sizeof(float));
              args.bias_row = bias_row ? bias_row + r : NULL;
              kern->row(kcur, ap + ir * kcur + r, bp + jr * kcur, dst, nr, &args);
              if (nn < nr) memcpy(cp + r * ldc, tmp_c, nn * sizeof(float));
            }
          }
        }
      }
    }
  }
}

MRT_PREPARE_CODE
mrt_status mrt_sgemm_activation(mrt_ctx *ctx, const mrt_node *node, float *lo, float *hi) {
  const float inf = __builtin_inff();
  *lo = -inf;
  *hi = inf;
  if (mrt_node_attr(node, "activation") == NULL) return MRT_STATUS_OK;
  if (mrt_attr_string_is(node, "activation", "", "Relu")) {
    *lo = 0.0f;
    return MRT_STATUS_OK;
  }
  if (mrt_attr_string_is(node, "activation", "", "Clip")) {
    const float *p = NULL;
    const uint32_t np = mrt_attr_floats(node, "activation_params", &p);
    if (np != 0 && np != 2)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "activation_params of Clip must hold [min, max], got %u values", np);
    /* min > max gives max everywhere, as Clip (numpy.clip) does: the clamp
     * applies the lower bound first. */
    if (np == 2) {
      *lo = p[0];
      *hi = p[1];
    }
    return MRT_STATUS_OK;
  }
  return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                       "activation must be \"Relu\" or \"Clip\"");
}

/* ------------------------------------------------------------------------ */
/* Convolution core (Conv, FusedConv)                                        */
/* ------------------------------------------------------------------------ */

/*
 * Every convolution is handled as 3-D: 1-D and 2-D ones get leading spatial
 * dims of size 1 (kernel 1, stride 1, no pad), so one im2col serves all.
 */
enum { MRT_CONV_GEMM = 0, MRT_CONV_DEPTHWISE = 1, MRT_CONV_IM2COL = 2 };

typedef struct mrt_conv_params {
  const mrt_sgemm_kernel *kern;
  int path;
  size_t batch, c_in, c_out, group, m, kdim, in_pix, out_pix, kvol;
  size_t in[3], out[3], k[3], s[3], d[3];
  ptrdiff_t pb[3];
  size_t dw_rw, dw_rows;   /* depthwise: padded buffer row width and rows per phase */
  int32_t *dw_taps;        /* depthwise: buffer offset of each tap (see mrt_conv_dw_pad) */
  float lo, hi;
  float *packed_w;         /* per group, packed_w_stride floats each; NULL: pack at run */
  size_t packed_w_stride;
  /* im2col reads a zero-padded copy of the group's input (or the input itself
   * when no tap falls outside it): planes of xp[0] x xp[1] x xp[2]. */
  size_t xp[3];
  int pad_copy;            /* 1: copy into scratch at pad_off, pad_floats floats */
  size_t pad_off, pad_floats;
  size_t *kofs;            /* im2col row k = (channel, kz, ky, kx): its offset in that buffer */
} mrt_conv_params;

typedef struct mrt_im2col_ctx {
  const mrt_conv_params *p;
  const float *x; /* first input channel of the group, this batch item */
} mrt_im2col_ctx;

/*
 * Custom B packer: writes im2col columns j0..j0+nc for rows k0..k0+kc
 * straight into nr-wide panels, so the full im2col matrix never exists.
 * Columns of a panel are split in runs that share one output row; the input
 * is padded (see mrt_conv_params.xp), so a run is a plain copy: contiguous for
 * stride 1, every sx-th float otherwise, with no bounds to check.
 */
static void mrt_conv_im2col_pack(const void *vctx, size_t k0, size_t kc, size_t j0, size_t nc,
                                 size_t nr, float *MRT_RESTRICT dst) {
  const mrt_im2col_ctx *ic = (const mrt_im2col_ctx *)vctx;
  const mrt_conv_params *p = ic->p;
  const size_t ow = p->out[2], oh = p->out[1], sx = p->s[2];
  const size_t zstep = p->s[0] * p->xp[1] * p->xp[2], ystep = p->s[1] * p->xp[2];
  size_t run_col[64], run_len[64], run_base[64];
  for (size_t pc = 0; pc < nc; pc += nr, dst += nr * kc) {
    const size_t pw = mrt_min(nr, nc - pc);
    size_t nruns = 0;
    for (size_t col = 0; col < pw;) {
      const size_t j = j0 + pc + col, row = j / ow, ox = j % ow;
      const size_t len = mrt_min(ow - ox, pw - col);
      run_col[nruns] = col;
      run_len[nruns] = len;
      run_base[nruns] = (row / oh) * zstep + (row % oh) * ystep + ox * sx;
      ++nruns;
      col += len;
    }
    for (size_t q = 0; q < kc; ++q) {
      const float *src = ic->x + p->kofs[k0 + q];
      float *d = dst + q * nr;
      for (size_t r = 0; r < nruns; ++r) {
        float *dr = d + run_col[r];
        const float *s = src + run_base[r];
        const size_t len = run_len[r];
        size_t t = 0;
        /* Fixed-size chunks the compiler turns into vector moves (shuffles
         * for stride 2). */
        if (sx == 1) {
          for (; t + 4 <= len; t += 4) __builtin_memcpy(dr + t, s + t, 4 * sizeof(float));
        } else if (sx == 2) {
          for (; t + 4 <= len; t += 4)
            for (size_t u = 0; u < 4; ++u) dr[t + u] = s[2 * (t + u)];
        }
        for (; t < len; ++t) dr[t] = s[t * sx];
      }
      for (size_t t = pw; t < nr; ++t) d[t] = 0.0f;
    }
  }
}

/* The zero-padded copy of one group's input that im2col reads. Only the input's
 * own samples are written: the zero border is the same for every group and is
 * cleared once per run by the caller. */
static const float *mrt_conv_pad_input(const mrt_conv_params *p, const float *xg, float *MRT_RESTRICT xp) {
  const size_t pz = p->xp[0], py = p->xp[1], px = p->xp[2];
  /* Input samples that land in the buffer (a big stride can leave trailing ones unread). */
  size_t n[3];
  for (size_t a = 0; a < 3; ++a)
    n[a] = p->xp[a] > (size_t)p->pb[a] ? mrt_min(p->in[a], p->xp[a] - (size_t)p->pb[a]) : 0;
  const size_t z1 = n[0], y1 = n[1], w = n[2];
  for (size_t c = 0; c < p->c_in / p->group; ++c)
    for (size_t z = 0; z < z1; ++z)
      for (size_t y = 0; y < y1; ++y)
        memcpy(xp + ((c * pz + z + (size_t)p->pb[0]) * py + y + (size_t)p->pb[1]) * px + (size_t)p->pb[2],
               xg + c * p->in_pix + (z * p->in[1] + y) * p->in[2], w * sizeof(float));
  return xp;
}

/*
 * Direct depthwise convolution, one channel plane (2-D, or 1-D as H = 1) at a
 * time. The plane is first copied into scratch with its zero padding and its
 * columns split by phase (column mod stride), so that every tap of a vector
 * of VL consecutive outputs is one unaligned contiguous load with no bounds
 * check, whatever the padding, stride or dilation: tap t = (ky, kx) of output
 * (oy, ox) is buf[oy * sy * rw + ox + dw_taps[t]]. Buffer rows are wide
 * enough for whole vectors, so ragged right edges cost no scalar loop.
 */
static void mrt_conv_dw_pad(const mrt_conv_params *p, const float *MRT_RESTRICT x,
                            float *MRT_RESTRICT buf) {
  /* Only the input's own samples are written: the zero border is the same for
   * every plane and is cleared once per run by the caller. */
  const ptrdiff_t H = (ptrdiff_t)p->in[1], W = (ptrdiff_t)p->in[2], sx = (ptrdiff_t)p->s[2];
  const ptrdiff_t py = p->pb[1], px = p->pb[2], rw = (ptrdiff_t)p->dw_rw, rows = (ptrdiff_t)p->dw_rows;
  ptrdiff_t r0 = py, r1 = py + H;
  if (r1 > rows) r1 = rows;
  /* Buffer column c of phase ph holds input column c * sx + ph - px: valid for c in [c0, c1). */
#define MRT_DW_COLS(ph, c0, c1)                                                         \
  ptrdiff_t c0 = px > (ph) ? (px - (ph) + sx - 1) / sx : 0;                             \
  ptrdiff_t c1 = W + px - (ph) > 0 ? (W + px - (ph) + sx - 1) / sx : 0;                 \
  if (c1 > rw) c1 = rw;                                                                 \
  if (c0 > c1) c0 = c1;
  if (sx == 2) {
    /* Padded column j = i + px goes to phase j & 1, column j >> 1. Pairs of
     * padded columns from an even j on: 8 inputs deinterleave into 4 + 4. */
    const ptrdiff_t i0 = px & 1, nv = (W - i0) / 8;
    for (ptrdiff_t r = r0; r < r1; ++r) {
      float *d0 = buf + r * rw, *d1 = d0 + rows * rw;
      const float *s = x + (r - py) * W;
      for (ptrdiff_t i = 0; i < i0; ++i) d1[(i + px) >> 1] = s[i];
      float *e0 = d0 + ((i0 + px) >> 1), *e1 = d1 + ((i0 + px) >> 1);
      for (ptrdiff_t v = 0; v < nv; ++v) {
        mrt_v4f u, w;
        __builtin_memcpy(&u, s + i0 + 8 * v, sizeof u);
        __builtin_memcpy(&w, s + i0 + 8 * v + 4, sizeof w);
        const mrt_v4f e = __builtin_shufflevector(u, w, 0, 2, 4, 6);
        const mrt_v4f o = __builtin_shufflevector(u, w, 1, 3, 5, 7);
        __builtin_memcpy(e0 + 4 * v, &e, sizeof e);
        __builtin_memcpy(e1 + 4 * v, &o, sizeof o);
      }
      for (ptrdiff_t i = i0 + 8 * nv; i < W; ++i) {
        const ptrdiff_t j = i + px;
        if ((j >> 1) < rw) buf[((j & 1) * rows + r) * rw + (j >> 1)] = s[i];
      }
    }
    return;
  }
  for (ptrdiff_t ph = 0; ph < sx; ++ph) {
    MRT_DW_COLS(ph, c0, c1)
    for (ptrdiff_t r = r0; r < r1; ++r) {
      float *d = buf + (ph * rows + r) * rw;
      const float *s = x + (r - py) * W + ph - px;
      if (sx == 1)
        for (ptrdiff_t c = c0; c < c1; ++c) d[c] = s[c];
      else
        for (ptrdiff_t c = c0; c < c1; ++c) d[c] = s[c * sx];
    }
  }
#undef MRT_DW_COLS
}

/* KV taps: a constant (9: 3x3) so weights and offsets live in registers, or
 * 0 for any kernel size. */
#define MRT_DW_PLANE(NAME, ATTR, VT, VL)                                                      \
  static inline __attribute__((always_inline)) void NAME##_body(                              \
      const mrt_conv_params *p, const float *MRT_RESTRICT buf, const float *MRT_RESTRICT w,    \
      float bias, float *MRT_RESTRICT y, size_t KV) {                                          \
    const size_t OH = p->out[1], OW = p->out[2], rstep = p->s[1] * p->dw_rw, end = OH * OW;   \
    const size_t kv = KV ? KV : p->kvol;                                                       \
    const VT vlo = (VT){0} + p->lo, vhi = (VT){0} + p->hi;                                     \
    VT wv[9];                                                                                  \
    ptrdiff_t tv[9];                                                                           \
    for (size_t t = 0; t < KV; ++t) {                                                          \
      wv[t] = (VT){0} + w[t];                                                                  \
      tv[t] = p->dw_taps[t];                                                                   \
    }                                                                                          \
    for (size_t oy = 0; oy < OH; ++oy) {                                                       \
      const float *br = buf + oy * rstep;                                                      \
      float *yr = y + oy * OW;                                                                 \
      for (size_t ox = 0; ox < OW; ox += VL) {                                                 \
        VT acc = (VT){0} + bias;                                                               \
        for (size_t t = 0; t < kv; ++t) {                                                      \
          VT v;                                                                                \
          __builtin_memcpy(&v, br + ox + (KV ? tv[t] : p->dw_taps[t]), sizeof(VT));            \
          acc += (KV ? wv[t] : (VT){0} + w[t]) * v;                                            \
        }                                                                                      \
        acc = MRT_VMIN(MRT_VMAX(acc, vlo), vhi);                                               \
        /* A vector past the row's end spills into the next row, which is  \
         * written afterwards; only the plane's end needs a partial store. */                   \
        if (oy * OW + ox + VL <= end) {                                                        \
          __builtin_memcpy(yr + ox, &acc, sizeof(VT));                                         \
        } else {                                                                               \
          float tmp[VL];                                                                       \
          __builtin_memcpy(tmp, &acc, sizeof(VT));                                             \
          for (size_t i = 0; i < OW - ox; ++i) yr[ox + i] = tmp[i];                            \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  ATTR static void NAME(const mrt_conv_params *p, const float *buf, const float *w, float bias, \
                        float *y) {                                                            \
    if (p->kvol == 9)                                                                          \
      NAME##_body(p, buf, w, bias, y, 9);                                                      \
    else                                                                                       \
      NAME##_body(p, buf, w, bias, y, 0);                                                      \
  }

typedef void (*mrt_dw_plane_fn)(const mrt_conv_params *p, const float *buf, const float *w,
                                float bias, float *y);

#if defined(__x86_64__)
MRT_DW_PLANE(mrt_conv_dw_plane__sse, , mrt_v4f, 4)
MRT_DW_PLANE(mrt_conv_dw_plane__avx2, __attribute__((target("avx2,fma"))), mrt_v8f, 8)
#else
MRT_DW_PLANE(mrt_conv_dw_plane, , mrt_v4f, 4)
#endif

MRT_PREPARE_CODE
static int mrt_conv_int_attr_list(mrt_ctx *ctx, const mrt_node *node, const char *name,
                                  size_t want, int64_t minv, int64_t *out, int64_t dflt,
                                  mrt_status *st) {
  const int64_t *v = NULL;
  const uint32_t n = mrt_attr_ints(node, name, &v);
  if (n == 0) {
    for (size_t i = 0; i < want; ++i) out[i] = dflt;
    return 1;
  }
  if (n != want) {
    *st = mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "%s has %u values, expected %zu", name,
                        n, want);
    return 0;
  }
  for (size_t i = 0; i < want; ++i) {
    if (v[i] < minv || v[i] > INT32_MAX) {
      *st = mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "%s[%zu] = %lld is out of range",
                          name, i, (long long)v[i]);
      return 0;
    }
    out[i] = v[i];
  }
  return 1;
}

MRT_PREPARE_CODE
mrt_status mrt_conv_core_prepare_f32(mrt_node *node, mrt_ctx *ctx, float lo, float hi) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 3, 1, 1);
  if (st != MRT_STATUS_OK) return st;
  const mrt_tensor *x = node->inputs[0], *w = node->inputs[1];
  const mrt_tensor *b = node->n_inputs > 2 ? node->inputs[2] : NULL;
  const mrt_tensor *y = node->outputs[0];
  if (!x || !w || !y)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "X, W and Y are required");
  if ((st = mrt_check_dtype(ctx, node, x, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, w, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if (b && (st = mrt_check_dtype(ctx, node, b, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if (x->ndim < 3 || x->ndim > 5)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "X has rank %u; only 1-D, 2-D and 3-D convolutions (rank 3..5) are supported",
                         x->ndim);
  if (w->ndim != x->ndim || y->ndim != x->ndim)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "X, W and Y must have the same rank (got %u, %u, %u)", x->ndim, w->ndim,
                         y->ndim);
  const size_t nsp = x->ndim - 2, off = 3 - nsp;

  const int64_t group = mrt_attr_int(node, "group", 1);
  if (group < 1 || group > x->dims[1] || x->dims[1] % group != 0 || w->dims[0] % group != 0)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "group = %lld must divide X channels (%lld) and W output channels (%lld)",
                         (long long)group, (long long)x->dims[1], (long long)w->dims[0]);
  if (w->dims[1] * group != x->dims[1])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "W dim 1 (%lld) times group (%lld) must equal X channels (%lld)",
                         (long long)w->dims[1], (long long)group, (long long)x->dims[1]);
  if (y->dims[0] != x->dims[0] || y->dims[1] != w->dims[0])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "Y must be (N=%lld, M=%lld, ...), got (%lld, %lld, ...)",
                         (long long)x->dims[0], (long long)w->dims[0], (long long)y->dims[0],
                         (long long)y->dims[1]);
  if (b && (b->ndim != 1 || b->dims[0] != w->dims[0]))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "B must have shape (M=%lld)",
                         (long long)w->dims[0]);

  int64_t ks[3], strides[3], dil[3], pads[6];
  const int64_t *kattr = NULL;
  const uint32_t nk = mrt_attr_ints(node, "kernel_shape", &kattr);
  if (nk != 0 && nk != nsp)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "kernel_shape has %u values, expected %zu",
                         nk, nsp);
  for (size_t i = 0; i < nsp; ++i) {
    ks[i] = w->dims[2 + i];
    if (ks[i] < 1)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "W spatial dim %zu is empty", i);
    if (nk && kattr[i] != ks[i])
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "kernel_shape[%zu] = %lld does not match W dim %zu (%lld)", i,
                           (long long)kattr[i], i + 2, (long long)ks[i]);
  }
  if (!mrt_conv_int_attr_list(ctx, node, "strides", nsp, 1, strides, 1, &st)) return st;
  if (!mrt_conv_int_attr_list(ctx, node, "dilations", nsp, 1, dil, 1, &st)) return st;
  if (!mrt_conv_int_attr_list(ctx, node, "pads", 2 * nsp, 0, pads, 0, &st)) return st;

  const int same_upper = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_UPPER");
  const int same_lower = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_LOWER");
  const int valid = mrt_attr_string_is(node, "auto_pad", "NOTSET", "VALID");
  if (!same_upper && !same_lower && !valid && !mrt_attr_string_is(node, "auto_pad", "NOTSET", "NOTSET"))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID");

  mrt_conv_params *p = (mrt_conv_params *)mrt_ctx_alloc(ctx, sizeof(*p));
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  for (size_t i = 0; i < 3; ++i) {
    p->in[i] = p->out[i] = p->k[i] = p->s[i] = p->d[i] = 1;
    p->pb[i] = 0;
  }
  for (size_t i = 0; i < nsp; ++i) {
    const int64_t in = x->dims[2 + i], ext = (ks[i] - 1) * dil[i] + 1;
    int64_t pb = pads[i], pe = pads[nsp + i], o;
    if (same_upper || same_lower) {
      o = (in + strides[i] - 1) / strides[i];
      int64_t total = (o - 1) * strides[i] + ext - in;
      if (total < 0) total = 0;
      pb = same_upper ? total / 2 : total - total / 2;
      pe = total - pb;
    } else {
      if (valid) pb = pe = 0;
      o = in + pb + pe >= ext ? (in + pb + pe - ext) / strides[i] + 1 : 0;
    }
    (void)pe;
    if (o < 1)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "spatial axis %zu: kernel extent %lld exceeds padded input %lld", i,
                           (long long)ext, (long long)(in + pb + pe));
    if (y->dims[2 + i] != o)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "Y spatial dim %zu is %lld, expected %lld from X, W and the attributes", i,
                           (long long)y->dims[2 + i], (long long)o);
    p->in[off + i] = (size_t)in;
    p->out[off + i] = (size_t)o;
    p->k[off + i] = (size_t)ks[i];
    p->s[off + i] = (size_t)strides[i];
    p->d[off + i] = (size_t)dil[i];
    p->pb[off + i] = (ptrdiff_t)pb;
  }

  p->kern = mrt_sgemm_kernel_select();
  p->lo = lo;
  p->hi = hi;
  p->batch = (size_t)x->dims[0];
  p->c_in = (size_t)x->dims[1];
  p->c_out = (size_t)w->dims[0];
  p->group = (size_t)group;
  p->m = p->c_out / p->group;
  p->kvol = p->k[0] * p->k[1] * p->k[2];
  p->kdim = (p->c_in / p->group) * p->kvol;
  p->in_pix = p->in[0] * p->in[1] * p->in[2];
  p->out_pix = p->out[0] * p->out[1] * p->out[2];
  if (p->kdim > INT32_MAX || p->in_pix > INT32_MAX || p->out_pix > INT32_MAX)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "convolution is too large");

  const int pointwise = p->kvol == 1 && p->s[0] == 1 && p->s[1] == 1 && p->s[2] == 1 &&
                        p->pb[0] == 0 && p->pb[1] == 0 && p->pb[2] == 0;
  if (pointwise) {
    p->path = MRT_CONV_GEMM; /* X of a group is already the K x N matrix B */
  } else if (p->group == p->c_in && p->group == p->c_out && p->k[0] == 1 &&
             p->in[0] == 1 && p->out[0] == 1) {
    p->path = MRT_CONV_DEPTHWISE;
    /* Rows: every padded row a tap reaches; width: whole 16-float vectors of
     * outputs plus the widest tap offset (see mrt_conv_dw_pad). */
    const size_t sx = p->s[2], kw = p->k[2], kh = p->k[1];
    /* In 64 bits: size_t is 32 on armv7 and x86. */
    const uint64_t rows = (uint64_t)(p->out[1] - 1) * p->s[1] + (uint64_t)(kh - 1) * p->d[1] + 1;
    /* (+1: a trailing input column the convolution ignores still has a slot.) */
    const uint64_t rw = (uint64_t)mrt_round_up(p->out[2], 16) + (uint64_t)(kw - 1) * p->d[2] / sx + 1;
    if (rows > INT32_MAX || rw > INT32_MAX || rows * rw > INT32_MAX / sizeof(float) / sx)
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "convolution is too large");
    p->dw_rows = (size_t)rows;
    p->dw_rw = (size_t)rw;
    p->dw_taps = (int32_t *)mrt_ctx_alloc(ctx, p->kvol * sizeof(int32_t));
    if (!p->dw_taps) return MRT_STATUS_OUT_OF_MEMORY;
    for (size_t ky = 0; ky < kh; ++ky)
      for (size_t kx = 0; kx < kw; ++kx) {
        const size_t cx = kx * p->d[2];
        p->dw_taps[ky * kw + kx] = (int32_t)(((cx % sx) * p->dw_rows + ky * p->d[1]) * p->dw_rw + cx / sx);
      }
    mrt_ctx_request_scratch(ctx, sx * p->dw_rows * p->dw_rw * sizeof(float));
    return node->params = p, MRT_STATUS_OK;
  } else {
    p->path = MRT_CONV_IM2COL;
    /* The extent the taps reach on each axis; a copy with zero borders when any
     * tap falls outside the input, else the input itself. In 64 bits: size_t is
     * 32 on armv7 and x86, and huge pads make huge extents. */
    uint64_t ext[3], plane64 = 1;
    for (size_t a = 0; a < 3; ++a) {
      ext[a] = (uint64_t)(p->out[a] - 1) * p->s[a] + (uint64_t)(p->k[a] - 1) * p->d[a] + 1;
      if (p->pb[a] > 0 || ext[a] > p->in[a]) p->pad_copy = 1;
    }
    for (size_t a = 0; a < 3; ++a) {
      if (!p->pad_copy) ext[a] = p->in[a];
      if (ext[a] > INT32_MAX || (plane64 *= ext[a]) > INT32_MAX) /* both factors <= 2^31 */
        return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "convolution is too large");
      p->xp[a] = (size_t)ext[a];
    }
    if (plane64 > INT32_MAX / (p->c_in / p->group) / sizeof(float))
      return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED, "convolution is too large");
    const size_t plane = (size_t)plane64;
    p->pad_floats = p->pad_copy ? plane * (p->c_in / p->group) : 0;
    p->kofs = (size_t *)mrt_ctx_alloc(ctx, p->kdim * sizeof(size_t));
    if (!p->kofs) return MRT_STATUS_OUT_OF_MEMORY;
    size_t r = 0;
    for (size_t c = 0; c < p->c_in / p->group; ++c)
      for (size_t kz = 0; kz < p->k[0]; ++kz)
        for (size_t ky = 0; ky < p->k[1]; ++ky)
          for (size_t kx = 0; kx < p->k[2]; ++kx, ++r)
            p->kofs[r] = c * plane + ((kz * p->d[0]) * p->xp[1] + ky * p->d[1]) * p->xp[2] + kx * p->d[2];
  }

  /* Weights are constant in practice: pack each group's M x K block once. */
  const int w_packed = w->is_constant && w->data != NULL;
  if (w_packed) {
    p->packed_w_stride = mrt_round_up(mrt_sgemm_packed_a_size(p->kern, p->m, p->kdim), 16);
    p->packed_w = (float *)mrt_ctx_alloc(ctx, p->group * p->packed_w_stride * sizeof(float) + 64);
    if (!p->packed_w) return MRT_STATUS_OUT_OF_MEMORY;
    p->packed_w = (float *)(((uintptr_t)p->packed_w + 63) & ~(uintptr_t)63);
    for (size_t g = 0; g < p->group; ++g)
      mrt_sgemm_pack_a(p->kern, p->m, p->kdim, (const float *)w->data + g * p->m * p->kdim,
                       p->kdim, 1, 1.0f, p->packed_w + g * p->packed_w_stride);
  }
  p->pad_off = mrt_round_up(mrt_sgemm_scratch_size(p->kern, p->m, p->out_pix, p->kdim, w_packed, 0), 64);
  mrt_ctx_request_scratch(ctx, p->pad_off + p->pad_floats * sizeof(float));
  node->params = p;
  return MRT_STATUS_OK;
}

void mrt_conv_core_run_f32(const mrt_node *node, void *scratch) {
  const mrt_conv_params *p = (const mrt_conv_params *)node->params;
  const float *x = (const float *)node->inputs[0]->data;
  const float *w = (const float *)node->inputs[1]->data;
  const float *bias =
      node->n_inputs > 2 && node->inputs[2] ? (const float *)node->inputs[2]->data : NULL;
  float *y = (float *)node->outputs[0]->data;

  if (p->path == MRT_CONV_DEPTHWISE) {
    mrt_dw_plane_fn plane;
#if defined(__x86_64__)
    plane = p->kern != &mrt_sgemm_sse ? mrt_conv_dw_plane__avx2 : mrt_conv_dw_plane__sse;
#else
    plane = mrt_conv_dw_plane;
#endif
    memset(scratch, 0, p->s[2] * p->dw_rows * p->dw_rw * sizeof(float));
    for (size_t n = 0; n < p->batch; ++n)
      for (size_t c = 0; c < p->c_out; ++c) {
        const size_t plane_idx = n * p->c_out + c;
        mrt_conv_dw_pad(p, x + plane_idx * p->in_pix, (float *)scratch);
        plane(p, (const float *)scratch, w + c * p->kvol, bias ? bias[c] : 0.0f,
              y + plane_idx * p->out_pix);
      }
    return;
  }

  const size_t cg = p->c_in / p->group;
  mrt_sgemm_epilogue ep = {NULL, NULL, p->lo, p->hi};
  float *xpad = (float *)((char *)scratch + p->pad_off);
  if (p->path == MRT_CONV_IM2COL && p->pad_copy) memset(xpad, 0, p->pad_floats * sizeof(float));
  for (size_t n = 0; n < p->batch; ++n)
    for (size_t g = 0; g < p->group; ++g) {
      const float *xg = x + (n * p->c_in + g * cg) * p->in_pix;
      float *yg = y + (n * p->c_out + g * p->m) * p->out_pix;
      mrt_sgemm_src a = {0}, b = {0};
      if (p->packed_w) {
        a.packed = p->packed_w + g * p->packed_w_stride;
      } else {
        a.data = w + g * p->m * p->kdim;
        a.rs = p->kdim;
        a.cs = 1;
        a.scale = 1.0f;
      }
      mrt_im2col_ctx ic = {p, xg};
      if (p->path == MRT_CONV_IM2COL && p->pad_copy)
        ic.x = mrt_conv_pad_input(p, xg, xpad);
      if (p->path == MRT_CONV_GEMM) {
        b.data = xg;
        b.rs = p->in_pix;
        b.cs = 1;
        b.scale = 1.0f;
      } else {
        b.pack = mrt_conv_im2col_pack;
        b.pack_ctx = &ic;
      }
      ep.bias_row = bias ? bias + g * p->m : NULL;
      mrt_sgemm(p->kern, p->m, p->out_pix, p->kdim, &a, &b, 0, &ep, yg, p->out_pix, scratch);
    }
}

/* ------------------------------------------------------------------------ */
/* Gemm core (Gemm, FusedGemm)                                               */
/* ------------------------------------------------------------------------ */

/* How C joins the product: not at all, as a bias the GEMM epilogue adds
 * (per row or per column, beta already applied), or copied into Y first as
 * beta * broadcast(C) and accumulated onto (scalar, (M, N), or any C that is
 * not constant and needs scaling). */
enum { MRT_GEMM_C_NONE = 0, MRT_GEMM_C_ROW = 1, MRT_GEMM_C_COL = 2, MRT_GEMM_C_FILL = 3 };

typedef struct mrt_gemm_params {
  const mrt_sgemm_kernel *kern;
  size_t m, n, k;
  size_t a_rs, a_cs, b_rs, b_cs;
  size_t c_rows, c_cols; /* C broadcast shape: 1 or m, 1 or n */
  float alpha, beta, lo, hi;
  int c_mode;
  const float *bias;     /* ROW / COL: beta * C (params copy) or C itself (beta == 1) */
  float *packed_a, *packed_b;
} mrt_gemm_params;

MRT_PREPARE_CODE
mrt_status mrt_gemm_core_prepare_f32(mrt_node *node, mrt_ctx *ctx, float lo, float hi) {
  mrt_status st = mrt_check_arity(ctx, node, 2, 3, 1, 1);
  if (st != MRT_STATUS_OK) return st;
  const mrt_tensor *a = node->inputs[0], *b = node->inputs[1], *y = node->outputs[0];
  const mrt_tensor *c = node->n_inputs > 2 ? node->inputs[2] : NULL;
  if (!a || !b || !y)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "A, B and Y are required");
  if ((st = mrt_check_dtype(ctx, node, a, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, b, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if ((st = mrt_check_dtype(ctx, node, y, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if (c && (st = mrt_check_dtype(ctx, node, c, MRT_DTYPE_FLOAT32)) != MRT_STATUS_OK) return st;
  if (a->ndim != 2 || b->ndim != 2 || y->ndim != 2)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "A, B and Y must be 2-D (got rank %u, %u, %u)", a->ndim, b->ndim, y->ndim);
  const int64_t ta = mrt_attr_int(node, "transA", 0), tb = mrt_attr_int(node, "transB", 0);
  const int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1];
  const int64_t kb = tb ? b->dims[1] : b->dims[0], n = tb ? b->dims[0] : b->dims[1];
  if (kb != k)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "inner dimensions differ: op(A) is %lld x %lld, op(B) is %lld x %lld",
                         (long long)m, (long long)k, (long long)kb, (long long)n);
  if (y->dims[0] != m || y->dims[1] != n)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "Y must be %lld x %lld, got %lld x %lld",
                         (long long)m, (long long)n, (long long)y->dims[0], (long long)y->dims[1]);

  mrt_gemm_params *p = (mrt_gemm_params *)mrt_ctx_alloc(ctx, sizeof(*p));
  if (!p) return MRT_STATUS_OUT_OF_MEMORY;
  p->kern = mrt_sgemm_kernel_select();
  p->m = (size_t)m;
  p->n = (size_t)n;
  p->k = (size_t)k;
  p->a_rs = ta ? 1 : p->k;
  p->a_cs = ta ? p->m : 1;
  p->b_rs = tb ? 1 : p->n;
  p->b_cs = tb ? p->k : 1;
  p->alpha = mrt_attr_float(node, "alpha", 1.0f);
  p->beta = mrt_attr_float(node, "beta", 1.0f);
  p->lo = lo;
  p->hi = hi;

  if (c && p->beta != 0.0f) {
    /* Unidirectional broadcast of C to (M, N): align trailing dims. */
    int64_t cr = 1, cc = 1;
    if (c->ndim > 2)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "C has rank %u, at most 2 allowed",
                           c->ndim);
    if (c->ndim >= 1) cc = c->dims[c->ndim - 1];
    if (c->ndim == 2) cr = c->dims[0];
    if ((cr != 1 && cr != m) || (cc != 1 && cc != n))
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "C of shape (%lld, %lld) does not broadcast to (%lld, %lld)", (long long)cr,
                           (long long)cc, (long long)m, (long long)n);
    p->c_rows = (size_t)cr;
    p->c_cols = (size_t)cc;
    const int row = cr == m && cc == 1 && m > 1, col = cr == 1 && cc == n && n > 1;
    const int usable = c->is_constant && c->data != NULL;
    if ((row || col) && (p->beta == 1.0f || usable)) {
      p->c_mode = row ? MRT_GEMM_C_ROW : MRT_GEMM_C_COL;
      if (p->beta != 1.0f) {
        const size_t len = row ? p->m : p->n;
        float *sc = (float *)mrt_ctx_alloc(ctx, len * sizeof(float));
        if (!sc) return MRT_STATUS_OUT_OF_MEMORY;
        for (size_t i = 0; i < len; ++i) sc[i] = p->beta * ((const float *)c->data)[i];
        p->bias = sc;
      }
    } else {
      p->c_mode = MRT_GEMM_C_FILL;
    }
  }

  /* Constant operands are packed once; alpha rides on whichever is packed
   * at prepare (or on A's run-time packing). */
  const int pack_b = b->is_constant && b->data != NULL;
  const int pack_a = !pack_b && a->is_constant && a->data != NULL;
  if (pack_b) {
    p->packed_b = (float *)mrt_ctx_alloc(ctx, mrt_sgemm_packed_b_size(p->kern, p->k, p->n) * sizeof(float) + 64);
    if (!p->packed_b) return MRT_STATUS_OUT_OF_MEMORY;
    p->packed_b = (float *)(((uintptr_t)p->packed_b + 63) & ~(uintptr_t)63);
    mrt_sgemm_pack_b(p->kern, p->k, p->n, (const float *)b->data, p->b_rs, p->b_cs, p->alpha,
                     p->packed_b);
  } else if (pack_a) {
    p->packed_a = (float *)mrt_ctx_alloc(ctx, mrt_sgemm_packed_a_size(p->kern, p->m, p->k) * sizeof(float) + 64);
    if (!p->packed_a) return MRT_STATUS_OUT_OF_MEMORY;
    p->packed_a = (float *)(((uintptr_t)p->packed_a + 63) & ~(uintptr_t)63);
    mrt_sgemm_pack_a(p->kern, p->m, p->k, (const float *)a->data, p->a_rs, p->a_cs, p->alpha,
                     p->packed_a);
  }
  mrt_ctx_request_scratch(ctx, mrt_sgemm_scratch_size(p->kern, p->m, p->n, p->k, pack_a, pack_b));
  node->params = p;
  return MRT_STATUS_OK;
}

void mrt_gemm_core_run_f32(const mrt_node *node, void *scratch) {
  const mrt_gemm_params *p = (const mrt_gemm_params *)node->params;
  const float *a = (const float *)node->inputs[0]->data;
  const float *b = (const float *)node->inputs[1]->data;
  const float *c = p->c_mode != MRT_GEMM_C_NONE ? (const float *)node->inputs[2]->data : NULL;
  float *y = (float *)node->outputs[0]->data;

  mrt_sgemm_src sa = {0}, sb = {0};
  if (p->packed_b) {
    sb.packed = p->packed_b;
    sa.scale = 1.0f;
  } else {
    sb.data = b;
    sb.rs = p->b_rs;
    sb.cs = p->b_cs;
    sb.scale = 1.0f;
    sa.scale = p->alpha;
  }
  sa.packed = p->packed_a;
  sa.data = a;
  sa.rs = p->a_rs;
  sa.cs = p->a_cs;

  mrt_sgemm_epilogue ep = {NULL, NULL, p->lo, p->hi};
  const float *bias = p->bias ? p->bias : c;
  if (p->c_mode == MRT_GEMM_C_ROW) ep.bias_row = bias;
  if (p->c_mode == MRT_GEMM_C_COL) ep.bias_col = bias;
  const int fill = p->c_mode == MRT_GEMM_C_FILL;
  if (fill)
    for (size_t i = 0; i < p->m; ++i) {
      const float *cr = c + (p->c_rows > 1 ? i * p->c_cols : 0);
      for (size_t j = 0; j < p->n; ++j) y[i * p->n + j] = p->beta * cr[p->c_cols > 1 ? j : 0];
    }
  mrt_sgemm(p->kern, p->m, p->n, p->k, &sa, &sb, fill, &ep, y, p->n, scratch);
}
