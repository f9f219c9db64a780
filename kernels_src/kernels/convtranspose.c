/*
 * ConvTranspose, float32, 1-3 spatial dims (groups, strides, pads, dilations,
 * output_padding, output_shape, auto_pad).
 *
 * A transposed convolution scatters every input pixel through the kernel:
 *   col = W_g^T (Cout_g*K x Cin_g) * X_g (Cin_g x pixels)       -- one GEMM
 *   y[co, i*s + k*d - pad] += col[(co, k), i]                    -- col2im
 * The GEMM is the shared blocked sgemm (gemm.h); constant weights are packed
 * once at prepare. The pixels go through the GEMM in chunks of whole input
 * rows so the column buffer stays a few MB however large the image is.
 * Like pool.c, 1-D and 2-D inputs are run as 3-D with leading size-1 dims.
 */
#include "kcommon.h"
#include "gemm.h"

#if defined(MRT_TYPE_float32) && defined(MRT_OP_ConvTranspose)

/* Column-buffer budget per chunk, in floats. */
#define CT_COL_BUDGET ((size_t)1 << 20)

typedef struct ct_params {
  const mrt_sgemm_kernel *kern;
  size_t batch, c_in, c_out, group, cin_g, cout_g;
  size_t in[3], out[3], k[3], s[3], d[3];
  int64_t pb[3];          /* leading pad of each axis */
  size_t in_pix, out_pix, kvol, m;
  size_t rows;            /* input rows: in[0] * in[1], each in[2] pixels */
  size_t rows_per_chunk;
  float *packed_w;        /* per group, packed A = W_g^T; NULL when W is not constant */
  size_t packed_w_stride; /* floats */
  size_t col_off;         /* bytes: column buffer in scratch, after the sgemm blocks */
} ct_params;

static size_t ct_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* Python-style floor division (total padding may be negative). */
MRT_PREPARE_CODE
static int64_t ct_floordiv2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }
/* *out = a * b * c; nonzero when that overflows size_t. */
MRT_PREPARE_CODE
static int ct_mul3(size_t a, size_t b, size_t c, size_t *out) {
  size_t ab;
  return __builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, out);
}

MRT_PREPARE_CODE
mrt_status mrt_convtranspose_prepare_f32(mrt_node *node, mrt_ctx *ctx) {
  mrt_status st = mrt_check_xy(ctx, node, 2, 3, 1, MRT_DTYPE_FLOAT32);
  if (st) return st;
  const mrt_tensor *x = node->inputs[0], *w = node->inputs[1], *b = mrt_in(node, 2), *y = node->outputs[0];
  if ((st = mrt_check_dtype(ctx, node, w, MRT_DTYPE_FLOAT32))) return st;
  if (b && (st = mrt_check_dtype(ctx, node, b, MRT_DTYPE_FLOAT32))) return st;
  const uint32_t r = x->ndim;
  if (r < 3 || r > 5 || w->ndim != r || y->ndim != r)
    return mrt_ctx_error(ctx, node, MRT_STATUS_UNSUPPORTED,
                         "input, weights and output must have rank 3 to 5 (1-3 spatial dims); got %u, %u, %u",
                         r, w->ndim, y->ndim);
  const uint32_t nsp = r - 2, lead = 3 - nsp;
  ct_params *p = mrt_ctx_alloc(ctx, sizeof *p);
  if (!p) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
  p->batch = (size_t)x->dims[0];
  p->c_in = (size_t)x->dims[1];
  const int64_t group = mrt_attr_int(node, "group", 1);
  if (group < 1 || x->dims[1] % group != 0 || w->dims[0] != x->dims[1])
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "weights must be [C_in=%lld, C_out/group, k...] with C_in divisible by group %lld",
                         (long long)x->dims[1], (long long)group);
  p->group = (size_t)group;
  p->cin_g = p->c_in / p->group;
  p->cout_g = (size_t)w->dims[1];
  p->c_out = p->cout_g * p->group;
  if (y->dims[0] != x->dims[0] || (size_t)y->dims[1] != p->c_out)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "output must be [N=%lld, C_out=%zu, ...]",
                         (long long)x->dims[0], p->c_out);
  if (b && b->count != p->c_out)
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "bias has %zu values, expected %zu", b->count,
                         p->c_out);

  const int64_t *ks, *ss, *ds, *ps, *ops, *oshape;
  const uint32_t nks = mrt_attr_ints(node, "kernel_shape", &ks), nss = mrt_attr_ints(node, "strides", &ss);
  const uint32_t nds = mrt_attr_ints(node, "dilations", &ds), nps = mrt_attr_ints(node, "pads", &ps);
  const uint32_t nops = mrt_attr_ints(node, "output_padding", &ops);
  const uint32_t nos = mrt_attr_ints(node, "output_shape", &oshape);
  if ((nks && nks != nsp) || (nss && nss != nsp) || (nds && nds != nsp) || (nps && nps != 2 * nsp) ||
      (nops && nops != nsp) || (nos && nos != nsp && nos != r))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                         "kernel_shape, strides, dilations, output_padding, output_shape need %u values, pads %u",
                         nsp, 2 * nsp);
  const int same_upper = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_UPPER");
  const int same_lower = mrt_attr_string_is(node, "auto_pad", "NOTSET", "SAME_LOWER");
  const int valid = mrt_attr_string_is(node, "auto_pad", "NOTSET", "VALID");
  for (uint32_t a = 0; a < 3; a++) {
    p->in[a] = p->out[a] = p->k[a] = p->s[a] = p->d[a] = 1;
    p->pb[a] = 0;
    if (a < lead) continue;
    const uint32_t i = a - lead;
    const int64_t in = x->dims[2 + i], kw = w->dims[2 + i];
    const int64_t k = nks ? ks[i] : kw, s = nss ? ss[i] : 1, d = nds ? ds[i] : 1, op = nops ? ops[i] : 0;
    if (k != kw || s < 1 || d < 1 || op < 0)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "axis %u: kernel_shape %lld must match the weights (%lld), strides and dilations >= 1",
                           i, (long long)k, (long long)kw);
    /* Bounded so the size arithmetic below and in col2im cannot overflow int64. */
    const int64_t lim = (int64_t)1 << 30;
    const int64_t pad0 = nps ? ps[i] : 0, pad1 = nps ? ps[nsp + i] : 0, os = nos ? oshape[nos - nsp + i] : 0;
    if (in > lim || k > lim || s > lim || d > lim || op > lim || y->dims[2 + i] > lim || pad0 < -lim ||
        pad0 > lim || pad1 < -lim || pad1 > lim || os < 0 || os > lim)
      return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL,
                           "axis %u: a size, stride, dilation, pad or output_padding is beyond 2^30", i);
    const int64_t full = s * (in - 1) + op + (k - 1) * d + 1; /* output size with no padding */
    int64_t pb = 0;
    if (same_upper || same_lower) {
      const int64_t target = nos ? oshape[nos - nsp + i] : in * s;
      const int64_t total = full - target;
      pb = same_upper ? ct_floordiv2(total) : total - ct_floordiv2(total);
    } else if (nos) {
      /* output_shape fixes the size; the padding it implies goes half to each
       * side, the odd one at the start (the spec's NOTSET rule, as onnxruntime);
       * a negative total only extends the end. */
      const int64_t total = full - oshape[nos - nsp + i];
      pb = total < 0 ? 0 : total - total / 2;
    } else if (nps && !valid) {
      pb = ps[i];
    }
    p->in[a] = (size_t)in;
    p->out[a] = (size_t)y->dims[2 + i];
    p->k[a] = (size_t)k, p->s[a] = (size_t)s, p->d[a] = (size_t)d;
    p->pb[a] = pb;
  }
  size_t row_floats, row_bytes;
  if (ct_mul3(p->in[0], p->in[1], p->in[2], &p->in_pix) || ct_mul3(p->out[0], p->out[1], p->out[2], &p->out_pix) ||
      ct_mul3(p->k[0], p->k[1], p->k[2], &p->kvol) || ct_mul3(p->cout_g, p->kvol, 1, &p->m) ||
      ct_mul3(p->m, p->in[2], 1, &row_floats) || ct_mul3(row_floats, sizeof(float), 1, &row_bytes))
    return mrt_ctx_error(ctx, node, MRT_STATUS_INVALID_MODEL, "input, kernel or output sizes overflow");
  p->rows = p->in[0] * p->in[1];
  p->rows_per_chunk = row_floats ? CT_COL_BUDGET / row_floats : 1;
  if (p->rows_per_chunk < 1) p->rows_per_chunk = 1;
  if (p->rows_per_chunk > p->rows) p->rows_per_chunk = p->rows ? p->rows : 1;

  p->kern = mrt_sgemm_kernel_select();
  const int w_packed = w->is_constant && w->data != NULL;
  if (w_packed) {
    p->packed_w_stride = ct_round_up(mrt_sgemm_packed_a_size(p->kern, p->m, p->cin_g), 16);
    float *mem = mrt_ctx_alloc(ctx, p->group * p->packed_w_stride * sizeof(float) + 64);
    if (!mem) return mrt_ctx_error(ctx, node, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
    p->packed_w = (float *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    /* A(i, k) = W_g[k][i]: row stride 1, column stride m. */
    for (size_t g = 0; g < p->group; g++)
      mrt_sgemm_pack_a(p->kern, p->m, p->cin_g, (const float *)w->data + g * p->cin_g * p->m, 1, p->m, 1.0f,
                       p->packed_w + g * p->packed_w_stride);
  }
  const size_t chunk_pix = p->rows_per_chunk * p->in[2];
  p->col_off = ct_round_up(mrt_sgemm_scratch_size(p->kern, p->m, chunk_pix, p->cin_g, w_packed, 0), 64);
  mrt_ctx_request_scratch(ctx, p->col_off + p->m * chunk_pix * sizeof(float));
  node->params = p;
  return MRT_STATUS_OK;
}

/* Adds the column rows of input rows r0 .. r0 + nr into one group's output. */
static void ct_col2im(const ct_params *p, const float *restrict col, size_t r0, size_t nr, float *restrict y) {
  const size_t W = p->in[2], np = nr * W, ow = p->out[2];
  size_t i = 0;
  for (size_t co = 0; co < p->cout_g; co++) {
    float *yc = y + co * p->out_pix;
    for (size_t kz = 0; kz < p->k[0]; kz++)
      for (size_t ky = 0; ky < p->k[1]; ky++)
        for (size_t kx = 0; kx < p->k[2]; kx++, i++) {
          const float *crow = col + i * np;
          /* Input columns whose output column lands inside [0, ow). */
          const int64_t off = (int64_t)(kx * p->d[2]) - p->pb[2];
          const int64_t s = (int64_t)p->s[2];
          int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
          int64_t hi = (int64_t)ow - off <= 0 ? 0 : ((int64_t)ow - off + s - 1) / s;
          if (hi > (int64_t)W) hi = (int64_t)W;
          for (size_t rr = 0; rr < nr; rr++) {
            const size_t row = r0 + rr, iz = row / p->in[1], iy = row % p->in[1];
            const int64_t oz = (int64_t)(iz * p->s[0] + kz * p->d[0]) - p->pb[0];
            const int64_t oy = (int64_t)(iy * p->s[1] + ky * p->d[1]) - p->pb[1];
            if (oz < 0 || oz >= (int64_t)p->out[0] || oy < 0 || oy >= (int64_t)p->out[1]) continue;
            float *yr = yc + ((size_t)oz * p->out[1] + (size_t)oy) * ow;
            const float *c = crow + rr * W;
            if (s == 1) {
              for (int64_t ix = lo; ix < hi; ix++) yr[ix + off] += c[ix];
            } else {
              for (int64_t ix = lo; ix < hi; ix++) yr[ix * s + off] += c[ix];
            }
          }
        }
  }
}

void mrt_convtranspose_run_f32(const mrt_node *node, void *scratch) {
  const ct_params *p = node->params;
  const float *x = node->inputs[0]->data, *w = node->inputs[1]->data;
  const mrt_tensor *bt = mrt_in(node, 2);
  const float *bias = bt ? (const float *)bt->data : NULL;
  float *y = node->outputs[0]->data;
  float *col = (float *)((char *)scratch + p->col_off);
  for (size_t n = 0; n < p->batch; n++)
    for (size_t g = 0; g < p->group; g++) {
      const float *xg = x + (n * p->c_in + g * p->cin_g) * p->in_pix;
      float *yg = y + (n * p->c_out + g * p->cout_g) * p->out_pix;
      for (size_t co = 0; co < p->cout_g; co++) {
        const float v = bias ? bias[g * p->cout_g + co] : 0.0f;
        float *yc = yg + co * p->out_pix;
        for (size_t i = 0; i < p->out_pix; i++) yc[i] = v;
      }
      mrt_sgemm_src a = {0}, b = {0};
      if (p->packed_w) {
        a.packed = p->packed_w + g * p->packed_w_stride;
      } else {
        a.data = w + g * p->cin_g * p->m;
        a.rs = 1, a.cs = p->m, a.scale = 1.0f;
      }
      b.rs = p->in_pix, b.cs = 1, b.scale = 1.0f;
      for (size_t r0 = 0; r0 < p->rows; r0 += p->rows_per_chunk) {
        const size_t nr = p->rows - r0 < p->rows_per_chunk ? p->rows - r0 : p->rows_per_chunk;
        const size_t np = nr * p->in[2];
        b.data = xg + r0 * p->in[2];
        mrt_sgemm(p->kern, p->m, np, p->cin_g, &a, &b, 0, NULL, col, np, scratch);
        ct_col2im(p, col, r0, nr, yg);
      }
    }
}

#endif /* MRT_TYPE_float32 && MRT_OP_ConvTranspose */
