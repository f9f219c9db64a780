/*
 * mrt_run: run a converted model on raw input files, write raw output files.
 *
 *   mrt_run MODEL.mrt IN0.bin [IN1.bin ...] -o OUT_PREFIX
 *
 * Input i is read from the i-th file (exactly the input's byte size, native
 * byte order); output i is written to OUT_PREFIX<i>.bin. One line per output
 * goes to stdout: "<index> <name> <nbytes>". Built as a static executable from
 * the same kernel sources as the Android libraries, so qemu-user can check the
 * cross-compiled kernels against onnxruntime (tests/test_android.py).
 *
 * Exit status: 0 done, 1 minirt reported an error, 2 bad usage or file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minirt.h"

static int read_file(const char *path, void *dst, size_t nbytes) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "mrt_run: cannot open %s\n", path);
    return 0;
  }
  size_t got = fread(dst, 1, nbytes, f);
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != nbytes || extra) {
    fprintf(stderr, "mrt_run: %s must hold exactly %zu bytes\n", path, nbytes);
    return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  const char *prefix = NULL;
  const char *inputs[64];
  int n_inputs = 0;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "-o") && i + 1 < argc) {
      prefix = argv[++i];
    } else if (n_inputs < 64) {
      inputs[n_inputs++] = argv[i];
    }
  }
  if (argc < 2 || !prefix) {
    fprintf(stderr, "usage: mrt_run MODEL.mrt IN0.bin [IN1.bin ...] -o OUT_PREFIX\n");
    return 2;
  }
  char err[512];
  mrt_session *s = NULL;
  mrt_status st = mrt_session_create_from_file(argv[1], &s, err, sizeof err);
  if (st != MRT_STATUS_OK) {
    fprintf(stderr, "mrt_run: %s: [%s] %s\n", argv[1], mrt_status_string(st), err);
    return 1;
  }
  int rc = 0;
  if ((size_t)n_inputs != mrt_session_input_count(s)) {
    fprintf(stderr, "mrt_run: the model takes %zu input(s), got %d file(s)\n", mrt_session_input_count(s), n_inputs);
    rc = 2;
  }
  for (int i = 0; !rc && i < n_inputs; i++) {
    mrt_tensor_info info;
    mrt_session_input_info(s, (size_t)i, &info);
    /* Straight into the session's input memory: no copy. */
    if (!read_file(inputs[i], mrt_session_input_data(s, (size_t)i), info.nbytes)) rc = 2;
  }
  if (!rc && (st = mrt_session_run(s)) != MRT_STATUS_OK) {
    fprintf(stderr, "mrt_run: run: [%s] %s\n", mrt_status_string(st), mrt_session_last_error(s));
    rc = 1;
  }
  for (size_t i = 0; !rc && i < mrt_session_output_count(s); i++) {
    mrt_tensor_info info;
    mrt_session_output_info(s, i, &info);
    char path[4096];
    snprintf(path, sizeof path, "%s%zu.bin", prefix, i);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(mrt_session_output_data(s, i), 1, info.nbytes, f) != info.nbytes) {
      fprintf(stderr, "mrt_run: cannot write %s\n", path);
      rc = 2;
    }
    if (f) fclose(f);
    if (!rc) printf("%zu %s %zu\n", i, info.name, info.nbytes);
  }
  mrt_session_destroy(s);
  return rc;
}
