/*
 * Integer GEMM (support unit `qgemm`): 8-bit operands, int32 result, shared by
 * MatMulInteger, ConvInteger and the QLinear* kernels (which requantise the int32).
 *
 *   C[i][j] = (accumulate ? C[i][j] : 0) + sum_k (A(i,k) - za[i]) * (B(k,j) - zb[j])
 *
 * exactly, in int32 (wrapping only past 2^31, as onnxruntime does). A and B are
 * each uint8 or int8, independently; a zero point is one value for the whole
 * operand (per tensor) or one per row of A / per column of B (per channel).
 *
 * Operands are described by mrt_qgemm_src, as mrt_sgemm_src in gemm.h: either
 * packed once (constant weights, at prepare, with mrt_qgemm_pack_a / _b into
 * mrt_qgemm_packed_a_size / _b_size bytes), or strided and packed at run time
 * into scratch. Zero points are folded in while packing, so a packed operand
 * carries its zero points with it.
 *
 * The packed layout belongs to the micro-kernel family: pack with the kernel
 * that mrt_qgemm_kernel_select() returned and that will run the GEMM. The
 * choice is made by CPU at prepare: on x86_64 by cpuid, AMX > AVX512-VNNI >
 * AVX-VNNI > AVX2 > SSE, capped by MINIRT_MAX_CPU_ISA=avx512vnni / avxvnni / avx2 /
 * sse; on aarch64 sdot (ARMv8.2 dotprod) when the CPU has it, else NEON
 * (MINIRT_MAX_CPU_ISA=neon). Callers treat packed buffers as opaque bytes.
 *
 * Convolution (NCHW) maps as: A = weights (M = output channels x K = C*kh*kw,
 * packed at prepare, per-channel zero points per row), B = K rows of a row table
 * into the padded input (row_off: tap (c, ky, kx) over every output pixel, see
 * qconv.c), packed a panel at a time straight from there, C requantised into y.
 * MatMul maps A = activations, B = weights.
 */
#ifndef MRT_QGEMM_H
#define MRT_QGEMM_H

#include "mrt_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mrt_qgemm_kernel mrt_qgemm_kernel; /* opaque: a micro-kernel family */

/* The best micro-kernel family for the running CPU. */
const mrt_qgemm_kernel *mrt_qgemm_kernel_select(void);
/* The best for a product of depth k (AMX only from k = 64). */
const mrt_qgemm_kernel *mrt_qgemm_kernel_select_k(size_t k);
/* The best for m rows of A (the packed, reused operand) at depth k (AMX only from
 * k = 64 and past 32 rows). */
const mrt_qgemm_kernel *mrt_qgemm_kernel_select_mk(size_t m, size_t k);
/* Its name ("avx2", "sse", "neon", ...), for benchmarks and error messages. */
const char *mrt_qgemm_kernel_name(const mrt_qgemm_kernel *kern);

/*
 * Depthwise taps, the inner loop of an 8-bit depthwise convolution:
 *   acc[j] = sum_t w[t] * x[off[t] + j]     for j in [0, n rounded up to 32)
 * x uint8 or int8 (is_signed), 2 * npairs taps (a missing last one: weight 0 and
 * any valid offset), w the taps' int16 weights in order. Reads up to 31 bytes
 * past x[off[t] + n - 1]; acc must hold n rounded up to 32.
 */
void mrt_qgemm_depthwise(const mrt_qgemm_kernel *kern, size_t n, const void *x, int is_signed, const size_t *off,
                         size_t npairs, const int16_t *w, int32_t *MRT_RESTRICT acc);

/* The same with int8 taps in quads on uint8 x, where the CPU multiplies bytes in
 * quads (AVX512-VNNI, AMX hosts): acc[j] = sum_t w[t] * x[off[t] + j] for j in
 * [0, n rounded up to 64), 4 * nquads taps (missing ones: weight 0, any valid
 * offset). Reads up to 63 bytes past x[off[t] + n - 1]; acc must hold n rounded up
 * to 64. mrt_qgemm_depthwise_quads says whether kern has it. */
int mrt_qgemm_depthwise_quads(const mrt_qgemm_kernel *kern);
void mrt_qgemm_depthwise_q8(const mrt_qgemm_kernel *kern, size_t n, const uint8_t *x, const size_t *off,
                            size_t nquads, const int8_t *w, int32_t *MRT_RESTRICT acc);

/* y[r * ldy + j] = sat(round_half_even(float(acc[r * lda + j] + bias) * scale) + zp)
 * for r < rows, j < n, as mrt_q_requant (qcommon.h) computes it, vectorised for the
 * kernel's CPU; bias and scale are n values (per_col) or one per row. y is uint8
 * or int8. */
void mrt_qgemm_requant_rows(const mrt_qgemm_kernel *kern, size_t rows, size_t n, const int32_t *MRT_RESTRICT acc,
                            size_t lda, const int32_t *bias, const float *scale, int per_col, int32_t zp, int32_t lo,
                            int32_t hi, void *MRT_RESTRICT y, size_t ldy);

/* QLinearAdd over n contiguous values, as onnxruntime computes it on x86:
 *   y[i] = sat(round_half_even(fma(a[i], ka, fma(b[i], kb, fixed))))
 * in float on the raw 8-bit values, with ka = sa / sc, kb = sb / sc and
 * fixed = zc - fma(za, ka, kb zb) (mrt_qgemm_add_fixed); a, b and y are uint8 or
 * int8 (is_signed), saturated to [lo, hi]; y may be a or b. Vectorised for the
 * kernel's CPU. */
typedef struct mrt_qgemm_add_params {
  float ka, kb, fixed;
  int32_t lo, hi;
  int is_signed;
} mrt_qgemm_add_params;
float mrt_qgemm_add_fixed(float ka, int32_t za, float kb, int32_t zb, int32_t zc);
void mrt_qgemm_add(const mrt_qgemm_kernel *kern, size_t n, const void *a, const void *b,
                   const mrt_qgemm_add_params *p, void *y);

typedef struct mrt_qgemm_src {
  const void *packed;   /* whole operand packed by mrt_qgemm_pack_a/_b for this kernel, or NULL */
  const void *data;     /* else strided: A(i,k) = data[i*rs + k*cs], B(k,j) = data[k*rs + j*cs] */
  size_t rs, cs;        /* in elements */
  int is_signed;        /* elements are int8 (1) or uint8 (0) */
  const int32_t *zero;  /* zero point(s), or NULL for 0 */
  size_t zero_count;    /* 1 (per tensor), or m (A: per row) / n (B: per column) */
  const size_t *row_off; /* B only, or NULL: B(k, j) = data[row_off[k] + j] (rs, cs unused) */
} mrt_qgemm_src;

/*
 * Requantisation fused into the GEMM: each tile's int32 sums go straight to
 * 8-bit y, never to an int32 C:
 *   y[i * ldy + col(j)] = sat(round_half_even(float(C[i][j] + bias) * scale) + zp)
 * with bias and scale per row (per_col 0: conv output channels) or per column
 * (MatMul's per-channel B). Column j is cell (j / gw, j % gw) of a grid gw wide of
 * which only the first ow columns are kept, written at col(j) = (j / gw) * ow + j % gw
 * (a convolution computed over its padded input's width; gw = ow = n for a plain
 * matrix).
 */
typedef struct mrt_qgemm_requant {
  const int32_t *bias;  /* m (per row) or n (per column) values */
  const float *scale;   /* the same count */
  int per_col;
  int32_t zp, lo, hi;
  void *y;              /* uint8 or int8 (the bytes are the same: values are clamped to [lo, hi]) */
  size_t ldy, gw, ow;
} mrt_qgemm_requant;

/* Bytes of a whole packed A (m x k) / B (k x n). */
size_t mrt_qgemm_packed_a_size(const mrt_qgemm_kernel *kern, size_t m, size_t k);
size_t mrt_qgemm_packed_b_size(const mrt_qgemm_kernel *kern, size_t k, size_t n);
/* Packs a strided operand described by src (src->packed ignored) into dst
 * (64-byte alignment is best, 16 suffices). */
void mrt_qgemm_pack_a(const mrt_qgemm_kernel *kern, size_t m, size_t k, const mrt_qgemm_src *src,
                      void *MRT_RESTRICT dst);
void mrt_qgemm_pack_b(const mrt_qgemm_kernel *kern, size_t k, size_t n, const mrt_qgemm_src *src,
                      void *MRT_RESTRICT dst);

/* Bytes of 64-byte aligned scratch mrt_qgemm needs (0 when both are packed). */
size_t mrt_qgemm_scratch_size(const mrt_qgemm_kernel *kern, size_t m, size_t n, size_t k,
                              int a_packed, int b_packed);

/* C (m x n int32, row stride ldc) as described at the top of this file. */
void mrt_qgemm(const mrt_qgemm_kernel *kern, size_t m, size_t n, size_t k, const mrt_qgemm_src *a,
               const mrt_qgemm_src *b, int accumulate, int32_t *MRT_RESTRICT c, size_t ldc,
               void *scratch);

/* The same on the threads of `pool` (NULL: the caller's), split along n when A is
 * packed (else along m), with the requantisation rq when not NULL (then
 * accumulate is 0 and c unused). Scratch as for mrt_qgemm: tasks pack disjoint
 * panels of it. */
void mrt_qgemm_mt(mrt_pool *pool, const mrt_qgemm_kernel *kern, size_t m, size_t n, size_t k,
                  const mrt_qgemm_src *a, const mrt_qgemm_src *b, int accumulate, const mrt_qgemm_requant *rq,
                  int32_t *MRT_RESTRICT c, size_t ldc, void *scratch);

#if defined(__x86_64__)
/*
 * A convolution read in place from channel-quad planes (AVX512-VNNI hosts without
 * AMX: mrt_qgemm_conv_quads_ok(kern) for the family chosen for the GEMM), uint8 x
 * and int8 w with zero points 0. The planes of four channels are interleaved by
 * mrt_qgemm_quads_interleave, so that quad q (four channels at one tap) of grid
 * column g is the 4 bytes at planes + qoff[q] + 4 g. The tile's rows are the
 * output's oh x ow pixels (pixel (py, px) reads grid column py gw + px: no dropped
 * columns), 8 a tile (7 where the pixels come in sevens and 8-row tiles would
 * compute over 1/16 more: 7 x 7 planes), broadcast from there; its columns m output
 * channels, 32 a tile, their int8 weights (w [m][cin][taps]) packed by mrt_qgemm_quads_pack_b in
 * the same K order. y (channel-major, rq->ldy = oh ow) gets A B plus each channel's
 * bias (the caller folds -zx sum(w) into it), requantised per column (rq->per_col;
 * bias and scale padded to m rounded up to 32).
 */
int mrt_qgemm_conv_quads_ok(const mrt_qgemm_kernel *kern);
/* dst[4 e + t] = src[t * stride + e] for e < n, t < 4 (the planes of `rows` <= 4
 * channels, stride bytes apart; a missing channel's as 0). */
void mrt_qgemm_quads_interleave(const uint8_t *src, size_t stride, size_t rows, size_t n, uint8_t *MRT_RESTRICT dst);
size_t mrt_qgemm_quads_b_size(size_t m, size_t nq);
void mrt_qgemm_quads_pack_b(size_t m, size_t cin, size_t taps, const int8_t *w, int8_t *MRT_RESTRICT dst);
void mrt_qgemm_conv_quads_t(mrt_pool *pool, size_t m, size_t oh, size_t ow, size_t gw, size_t nq, const int8_t *pb,
                            const uint8_t *planes, const size_t *qoff, const mrt_qgemm_requant *rq);
#endif

#ifdef __cplusplus
}
#endif

#endif /* MRT_QGEMM_H */
