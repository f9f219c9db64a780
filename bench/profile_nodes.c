/*
 * Per-node profiler for minirt (bench only; never part of a shipped library).
 *
 *   profile_nodes MODEL.mrt [RUNS]
 *
 * Linked statically with the same objects a build compiles (see
 * profile_nodes.py), it creates a session, fills inputs with a fixed pattern,
 * warms up, then times every node's run() RUNS times and prints, per node,
 * the best and median time in microseconds as tab-separated lines:
 *   index  op  name  best_us  median_us  out_shape  detail
 * It reads the session through runtime/internal.h, so the runtime itself
 * carries no timing hooks.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void print_shape(const mrt_tensor *t) {
  if (!t) {
    printf("-");
    return;
  }
  for (uint32_t i = 0; i < t->ndim; ++i) printf("%s%lld", i ? "x" : "", (long long)t->dims[i]);
  if (t->ndim == 0) printf("scalar");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.mrt [RUNS [THREADS]]\n", argv[0]);
    return 2;
  }
  const int runs = argc > 2 ? atoi(argv[2]) : 20;
  char err[512];
  mrt_session *s = NULL;
  /* THREADS > 1: the session's pool (each node's time is then its wall time on all threads). */
  const int threads = argc > 3 ? atoi(argv[3]) : 1;
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", argv[1]);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  const long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *model = malloc((size_t)len);
  if (!model || fread(model, 1, (size_t)len, f) != (size_t)len) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  fclose(f);
  mrt_session_options opts = {0};
  opts.intra_op_num_threads = threads;
  if (mrt_session_create_with_options(model, (size_t)len, &opts, &s, err, sizeof err) != MRT_STATUS_OK) {
    fprintf(stderr, "load failed: %s\n", err);
    return 1;
  }
  for (size_t i = 0; i < mrt_session_input_count(s); ++i) {
    mrt_tensor_info info;
    mrt_session_input_info(s, i, &info);
    float *d = (float *)mrt_session_input_data(s, i);
    for (size_t j = 0; j < info.nbytes / sizeof(float); ++j) d[j] = (float)((j * 2654435761u) % 1000) / 1000.0f - 0.5f;
  }
  for (int w = 0; w < 3; ++w) mrt_session_run(s);
  const uint32_t nn = s->n_nodes;
  double *t = calloc((size_t)nn * runs, sizeof(double));
  double total_best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const double t0 = now_us();
    for (uint32_t i = 0; i < nn; ++i) {
      const mrt_node *n = &s->nodes[i];
      const double a = now_us();
      n->kernel->run(n, s->scratch);
      t[(size_t)i * runs + r] = now_us() - a;
    }
    const double tot = now_us() - t0;
    if (tot < total_best) total_best = tot;
  }
  double sum_med = 0;
  for (uint32_t i = 0; i < nn; ++i) {
    const mrt_node *n = &s->nodes[i];
    double *v = t + (size_t)i * runs;
    qsort(v, runs, sizeof(double), cmp_double);
    sum_med += v[runs / 2];
    printf("%u\t%s\t%s\t%.1f\t%.1f\t", i, n->op, n->name ? n->name : "", v[0], v[runs / 2]);
    print_shape(n->n_outputs ? n->outputs[0] : NULL);
    printf("\t");
    for (uint32_t k = 0; k < n->n_inputs; ++k) {
      printf("%s", k ? "," : "");
      print_shape(n->inputs[k]);
    }
    for (uint32_t k = 0; k < n->n_attrs; ++k) {
      const mrt_attr *a = &n->attrs[k];
      if (a->type == MRT_ATTR_INTS) {
        printf(" %s=", a->name);
        for (uint32_t j = 0; j < a->count; ++j) printf("%s%lld", j ? "," : "", (long long)((const int64_t *)a->data)[j]);
      } else if (a->type == MRT_ATTR_INT) {
        printf(" %s=%lld", a->name, (long long)*(const int64_t *)a->data);
      } else if (a->type == MRT_ATTR_STRING) {
        printf(" %s=%.*s", a->name, (int)a->count, (const char *)a->data);
      }
    }
    printf("\n");
  }
  printf("#total\tbest_whole_run_us=%.1f\tsum_median_us=%.1f\n", total_best, sum_med);
  mrt_session_destroy(s);
  free(model);
  free(t);
  return 0;
}
