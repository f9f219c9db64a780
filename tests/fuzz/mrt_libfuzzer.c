/*
 * Coverage-guided fuzzing of minirt's loader, prepare and run with libFuzzer:
 *
 *   clang -fsanitize=fuzzer,address,undefined ... mrt_libfuzzer.c -o mrt_libfuzzer
 *   ./mrt_libfuzzer -max_total_time=45 CORPUS/      (seeds: tests/fuzz/seeds.py)
 *
 * The input is the model file itself: LLVMFuzzerTestOneInput hands exactly these
 * bytes to mrt_session_create, so a crash artifact is a corrupt .mrt that
 * reproduces with any build of the runtime. The custom mutator is what gets
 * mutations past the checksum: it lets libFuzzer's own mutators (or, one time in
 * four, fuzz_common.h's boundary values into aligned table fields) edit the
 * model, then recomputes the checksum and file size, except now and then so the
 * checks on those stay covered too. The crossover splices two models at the same
 * offsets, which keeps the layout of converted models that share a header shape.
 */
#include "fuzz_common.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* libFuzzer's buffer is exactly `size` bytes on the heap: reads past it show. */
  mrt_fuzz_one(data, size, NULL);
  return 0;
}

static size_t finish(mrt_fuzz_rng *r, uint8_t *data, size_t size) {
  const uint64_t k = mrt_fuzz_rnd(r) % 32;
  if (k != 0) mrt_fuzz_fix_header(data, size, k != 1);
  return size;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
  mrt_fuzz_rng r = {(uint64_t)seed * 0x9E3779B97F4A7C15ull + 1};
  if (size >= MRT_FUZZ_HEADER && mrt_fuzz_rnd(&r) % 4 == 0) {
    int n = 1 + (int)(mrt_fuzz_rnd(&r) % 3);
    for (int i = 0; i < n; i++) mrt_fuzz_mutate_once(&r, data, &size, max_size);
  } else {
    size = LLVMFuzzerMutate(data, size, max_size);
  }
  return finish(&r, data, size);
}

size_t LLVMFuzzerCustomCrossOver(const uint8_t *a, size_t na, const uint8_t *b, size_t nb, uint8_t *out,
                                 size_t max_out, unsigned int seed) {
  mrt_fuzz_rng r = {(uint64_t)seed * 0xD1B54A32D192ED03ull + 7};
  size_t n = na < max_out ? na : max_out;
  memcpy(out, a, n);
  const size_t common = n < nb ? n : nb;
  if (common > 0) {
    /* b's bytes over [from, to), at the same offsets. */
    size_t from = mrt_fuzz_rnd(&r) % common;
    size_t to = from + 1 + mrt_fuzz_rnd(&r) % (common - from);
    memcpy(out + from, b + from, to - from);
  }
  return finish(&r, out, n);
}
