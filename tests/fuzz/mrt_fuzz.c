/*
 * Structure-aware mutation fuzzer for minirt's model loader.
 *
 *   mrt_fuzz SEED.mrt ITERATIONS RNG_SEED
 *
 * Each iteration mutates a copy of a valid model (byte flips, boundary values
 * written into header/table fields, truncation, extension), recomputes the
 * checksum so the mutation reaches the structural checks behind it, then creates
 * a session and, if creation succeeds, runs it (fuzz_common.h). Built with
 * AddressSanitizer and UndefinedBehaviorSanitizer by tests/test_fuzz.py, and for
 * armv7 under qemu: any out-of-bounds access, overflow or crash aborts the
 * process and fails the test. mrt_libfuzzer.c is the coverage-guided twin.
 */
#include "fuzz_common.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s SEED.mrt ITERATIONS RNG_SEED\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) return 2;
  static uint8_t seed[1 << 22];
  size_t seed_len = fread(seed, 1, sizeof seed, f);
  fclose(f);
  long iterations = atol(argv[2]);
  mrt_fuzz_rng rng = {(uint64_t)atoll(argv[3]) * 0x9E3779B97F4A7C15ull + 1};
  size_t cap = seed_len + 256;
  uint8_t *buf = malloc(cap);
  mrt_fuzz_counts counts = {0, 0};
  for (long it = 0; it < iterations; it++) {
    size_t len = seed_len;
    memcpy(buf, seed, seed_len);
    int n = 1 + (int)(mrt_fuzz_rnd(&rng) % 4);
    for (int i = 0; i < n; i++) mrt_fuzz_mutate_once(&rng, buf, &len, cap);
    if (mrt_fuzz_rnd(&rng) % 8) mrt_fuzz_fix_header(buf, len, mrt_fuzz_rnd(&rng) % 4 != 0);
    /* An exact-size heap copy so AddressSanitizer sees reads past the end. */
    uint8_t *exact = malloc(len ? len : 1);
    memcpy(exact, buf, len);
    mrt_fuzz_one(exact, len, &counts);
    free(exact);
  }
  printf("%ld iterations: %ld created and run, %ld rejected with a message\n", iterations, counts.created,
         counts.rejected);
  free(buf);
  return 0;
}
