/*
 * Structure-aware mutation fuzzer for minirt's model loader.
 *
 *   mrt_fuzz SEED.mrt ITERATIONS RNG_SEED
 *
 * Each iteration mutates a copy of a valid model (byte flips, boundary values
 * written into header/table fields, truncation, extension), recomputes the
 * checksum so the mutation reaches the structural checks behind it, then creates
 * a session and, if creation succeeds, runs it. Built with AddressSanitizer and
 * UndefinedBehaviorSanitizer by tests/test_fuzz.py: any out-of-bounds access,
 * overflow or crash aborts the process and fails the test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minirt.h"

static uint64_t rng_state;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static uint32_t crc32_ieee(const uint8_t *p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

static const uint64_t interesting[] = {0, 1, 2, 3, 4, 6, 7, 8, 63, 64, 65, 96, 255, 0x7FFF, 0xFFFF,
                                       0x7FFFFFFF, 0x80000000u, 0xFFFFFFFFu, 0xFFFFFFFFFFFFFFFFull,
                                       0x7FFFFFFFFFFFFFFFull};

static void mutate(uint8_t *buf, size_t *len, size_t cap) {
  int n = 1 + (int)(rnd() % 4);
  for (int i = 0; i < n && *len > 0; i++) {
    size_t pos;
    switch (rnd() % 6) {
      case 0:  /* flip a bit anywhere */
        pos = rnd() % *len;
        buf[pos] ^= (uint8_t)(1u << (rnd() % 8));
        break;
      case 1:  /* a boundary value into an aligned 4-byte field (header and tables live there) */
      case 2: {
        size_t span = *len < 4096 ? *len : 4096;
        if (span < 4) break;
        pos = (rnd() % (span / 4)) * 4;
        uint32_t v = (uint32_t)interesting[rnd() % (sizeof interesting / sizeof interesting[0])];
        if (rnd() % 3 == 0) v += (uint32_t)(rnd() % 16) - 8;
        memcpy(buf + pos, &v, 4);
        break;
      }
      case 3: {  /* a boundary value into an aligned 8-byte field */
        size_t span = *len < 4096 ? *len : 4096;
        if (span < 8) break;
        pos = (rnd() % (span / 8)) * 8;
        uint64_t v = interesting[rnd() % (sizeof interesting / sizeof interesting[0])];
        memcpy(buf + pos, &v, 8);
        break;
      }
      case 4:  /* truncate */
        *len = rnd() % *len;
        break;
      case 5:  /* extend with junk */
        while (*len < cap && rnd() % 8) buf[(*len)++] = (uint8_t)rnd();
        break;
    }
  }
  if (*len >= 96 && rnd() % 8) {
    uint32_t crc = crc32_ieee(buf + 96, *len - 96);
    memcpy(buf + 12, &crc, 4);
    if (rnd() % 4) { uint64_t sz = *len; memcpy(buf + 16, &sz, 8); }
  }
}

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
  rng_state = (uint64_t)atoll(argv[3]) * 0x9E3779B97F4A7C15ull + 1;
  size_t cap = seed_len + 256;
  uint8_t *buf = malloc(cap);
  long created = 0, rejected = 0;
  char err[256];
  for (long it = 0; it < iterations; it++) {
    size_t len = seed_len;
    memcpy(buf, seed, seed_len);
    mutate(buf, &len, cap);
    /* An exact-size heap copy so AddressSanitizer sees reads past the end. */
    uint8_t *exact = malloc(len ? len : 1);
    memcpy(exact, buf, len);
    mrt_session *s = NULL;
    mrt_status st = mrt_session_create(exact, len, 0, &s, err, sizeof err);
    if (st == MRT_STATUS_OK) {
      created++;
      for (size_t k = 0; k < mrt_session_input_count(s); k++) {
        mrt_tensor_info info;
        if (mrt_session_input_info(s, k, &info) == MRT_STATUS_OK)
          memset(mrt_session_input_data(s, k), 0, info.nbytes);
      }
      mrt_session_run(s);
      mrt_session_destroy(s);
    } else {
      if (s != NULL || err[0] == 0) { fprintf(stderr, "failed create left a session or no message\n"); return 1; }
      rejected++;
    }
    free(exact);
  }
  printf("%ld iterations: %ld created and run, %ld rejected with a message\n", iterations, created, rejected);
  free(buf);
  return 0;
}
