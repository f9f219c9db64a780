/*
 * The vmath.h array functions timed directly, every copy the build has (baseline,
 * AVX2 + FMA, AVX-512F), in ns per element: what an activation costs inside a
 * fused node (FusedConvAct's post stage calls one per row of a block) without
 * any node or Python overhead. bench/bench_vmath.py compiles it with the
 * library's include paths and flags and runs it:
 *
 *     bench_vmath SIZE[,SIZE...] ROUNDS
 *
 * prints one line per (function, size): name, size, then ns/element per copy.
 * A size below 4096 is timed as rows of that length over a 64 KB buffer, one
 * call a row, the way a post stage calls it on 49- or 196-float rows.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vmath.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct fn_row {
  const char *name;
  mrt_vmap_fn f[3]; /* baseline, avx2, avx512 (NULL where the build lacks it) */
} fn_row;

#if defined(__x86_64__)
#define COPY_AVX2(n) n##_avx2
#else
#define COPY_AVX2(n) NULL
#endif
#if defined(MRT_VMATH_AVX512) && MRT_VMATH_AVX512
#define COPY_AVX512(n) n##_avx512
#else
#define COPY_AVX512(n) NULL
#endif
#define ROW(nm, fn) {nm, {fn, COPY_AVX2(fn), COPY_AVX512(fn)}}

/* Softmax's row pass: exp(x - max) and the sum, as softmax.c calls it. */
#define EXPSUM(sfx)                                                                                \
  static void expsum##sfx(size_t n, const float *x, float *y) {                                    \
    volatile float s = mrt_vexp_shift_sum##sfx(n, x, 1.5f, y);                                     \
    (void)s;                                                                                       \
  }
EXPSUM()
#if defined(__x86_64__)
EXPSUM(_avx2)
#endif
#if defined(MRT_VMATH_AVX512) && MRT_VMATH_AVX512
EXPSUM(_avx512)
#endif

static const fn_row FNS[] = {
    ROW("exp", mrt_vmap_exp),           ROW("sigmoid", mrt_vmap_sigmoid), ROW("silu", mrt_vmap_silu),
    ROW("tanh", mrt_vmap_tanh),         ROW("erf", mrt_vmap_erf),         ROW("gelu", mrt_vmap_gelu),
    ROW("gelu_tanh", mrt_vmap_gelu_tanh), ROW("hardswish", mrt_vmap_hardswish), ROW("mish", mrt_vmap_mish),
    ROW("exp_shift_sum", expsum),
};

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s SIZE[,SIZE...] ROUNDS\n", argv[0]);
    return 2;
  }
  const int rounds = atoi(argv[2]);
  size_t sizes[16], ns = 0;
  for (char *s = strtok(argv[1], ","); s && ns < 16; s = strtok(NULL, ",")) sizes[ns++] = strtoul(s, NULL, 10);
  size_t cap = 1 << 14;
  for (size_t i = 0; i < ns; i++) cap = sizes[i] > cap ? sizes[i] : cap;
  float *x = aligned_alloc(64, cap * sizeof(float)), *y = aligned_alloc(64, cap * sizeof(float));
  srand(7);
  for (size_t i = 0; i < cap; i++) x[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 8.0f;
  for (size_t fi = 0; fi < sizeof FNS / sizeof FNS[0]; fi++)
    for (size_t si = 0; si < ns; si++) {
      const size_t n = sizes[si];
      /* rows of n over a buffer of whole rows (a 64 KB one for short rows) */
      const size_t rows = n < 4096 ? (1u << 14) / n : 1, total = rows * n;
      double best[3] = {0, 0, 0};
      for (int r = 0; r < rounds; r++)
        for (int c = 0; c < 3; c++) {
          const mrt_vmap_fn f = FNS[fi].f[c];
          if (!f) continue;
          const int reps = (int)(total < (1u << 20) ? (1u << 22) / total : 2);
          const double t0 = now();
          for (int k = 0; k < reps; k++)
            for (size_t q = 0; q < rows; q++) f(n, x + q * n, y + q * n);
          const double t = (now() - t0) / ((double)reps * total) * 1e9;
          if (best[c] == 0 || t < best[c]) best[c] = t;
        }
      printf("%s %zu", FNS[fi].name, n);
      for (int c = 0; c < 3; c++) printf(" %.4f", FNS[fi].f[c] ? best[c] : -1.0);
      printf("\n");
      fflush(stdout);
    }
  free(x);
  free(y);
  return 0;
}
