/*
 * What both fuzz drivers share: the .mrt header fix-up that lets a mutation get
 * past the checksum to the structural checks behind it, the structure-aware
 * mutation (boundary values into the aligned fields the tables are made of), and
 * the one-input check itself:
 *
 *   create a session from exactly these bytes; a failure must leave no session
 *   and a non-empty message; a session that loads runs once on deterministic
 *   inputs, its outputs are read end to end, and it is destroyed.
 *
 * A violated contract (no message, a session left behind, a failed run without a
 * message) calls mrt_fuzz_fail, which reports and aborts: libFuzzer then keeps the
 * input as a crash artifact. Out-of-bounds accesses, overflows and leaks are for
 * the sanitizers to catch. Header-only: each driver is a single translation unit.
 */
#ifndef MRT_FUZZ_COMMON_H
#define MRT_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minirt.h"

#define MRT_FUZZ_HEADER 96u

static uint32_t mrt_fuzz_crc32(const uint8_t *p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

/* Checksum (and, if asked, file size) made to match the bytes, as a converter
 * writing a corrupt model would. */
static void mrt_fuzz_fix_header(uint8_t *buf, size_t len, int fix_size) {
  if (len < MRT_FUZZ_HEADER) return;
  uint32_t crc = mrt_fuzz_crc32(buf + MRT_FUZZ_HEADER, len - MRT_FUZZ_HEADER);
  memcpy(buf + 12, &crc, 4);
  if (fix_size) {
    uint64_t sz = len;
    memcpy(buf + 16, &sz, 8);
  }
}

typedef struct mrt_fuzz_rng { uint64_t state; } mrt_fuzz_rng;

static uint64_t mrt_fuzz_rnd(mrt_fuzz_rng *r) {
  r->state ^= r->state << 13;
  r->state ^= r->state >> 7;
  r->state ^= r->state << 17;
  return r->state;
}

static const uint64_t mrt_fuzz_interesting[] = {
    0, 1, 2, 3, 4, 6, 7, 8, 9, 63, 64, 65, 96, 255, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000u,
    0xFFFFFFFFu, 0xFFFFFFFFFFFFFFFFull, 0x7FFFFFFFFFFFFFFFull};
#define MRT_FUZZ_N_INTERESTING (sizeof mrt_fuzz_interesting / sizeof mrt_fuzz_interesting[0])

/* One structure-aware edit. The header and the tables (tensor records, node
 * records, attribute records, indices) are all 4- or 8-byte aligned fields in the
 * first few KB, so boundary values dropped on aligned offsets hit dims, dtypes,
 * counts and indices far more often than random bytes do. */
static void mrt_fuzz_mutate_once(mrt_fuzz_rng *r, uint8_t *buf, size_t *len, size_t cap) {
  size_t pos;
  if (*len == 0) return;
  switch (mrt_fuzz_rnd(r) % 6) {
    case 0: /* flip a bit anywhere */
      pos = mrt_fuzz_rnd(r) % *len;
      buf[pos] ^= (uint8_t)(1u << (mrt_fuzz_rnd(r) % 8));
      break;
    case 1: /* a boundary value (or one near it) into an aligned 4-byte field */
    case 2: {
      size_t span = *len < 4096 ? *len : 4096;
      if (span < 4) break;
      pos = (mrt_fuzz_rnd(r) % (span / 4)) * 4;
      uint32_t v = (uint32_t)mrt_fuzz_interesting[mrt_fuzz_rnd(r) % MRT_FUZZ_N_INTERESTING];
      if (mrt_fuzz_rnd(r) % 3 == 0) v += (uint32_t)(mrt_fuzz_rnd(r) % 16) - 8;
      memcpy(buf + pos, &v, 4);
      break;
    }
    case 3: { /* a boundary value into an aligned 8-byte field */
      size_t span = *len < 4096 ? *len : 4096;
      if (span < 8) break;
      pos = (mrt_fuzz_rnd(r) % (span / 8)) * 8;
      uint64_t v = mrt_fuzz_interesting[mrt_fuzz_rnd(r) % MRT_FUZZ_N_INTERESTING];
      memcpy(buf + pos, &v, 8);
      break;
    }
    case 4: /* truncate */
      *len = mrt_fuzz_rnd(r) % *len;
      break;
    case 5: /* extend with junk */
      while (*len < cap && mrt_fuzz_rnd(r) % 8) buf[(*len)++] = (uint8_t)mrt_fuzz_rnd(r);
      break;
  }
}

static void mrt_fuzz_fail(const char *what, const char *detail) {
  fprintf(stderr, "mrt fuzz: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

/* Deterministic input values per element type: small, mixed-sign, a few large
 * ones (an index far out of range, a big float), never NaN, and bools only 0/1. */
static void mrt_fuzz_fill(void *data, const mrt_tensor_info *info) {
  static const float f32[] = {0.5f, -1.25f, 2.0f, 0.0f, 3.5f, -0.75f, 1.0f, -3.0f, 0.125f, 1000.0f, -0.001f, 7.0f};
  static const int64_t ints[] = {0, 1, 2, -1, 3, 0, 5, -2, 1, 100000, 4, -7};
  const size_t nf = sizeof f32 / sizeof f32[0], ni = sizeof ints / sizeof ints[0];
  uint8_t *p = data;
  size_t i, n;
  switch (info->dtype) {
    case MRT_DTYPE_FLOAT32:
      n = info->nbytes / 4;
      for (i = 0; i < n; i++) memcpy(p + 4 * i, &f32[i % nf], 4);
      break;
    case MRT_DTYPE_FLOAT64:
      n = info->nbytes / 8;
      for (i = 0; i < n; i++) { double v = f32[i % nf]; memcpy(p + 8 * i, &v, 8); }
      break;
    case MRT_DTYPE_FLOAT16: /* 1.0, -2.0, 0.5, 0 */
      n = info->nbytes / 2;
      for (i = 0; i < n; i++) { static const uint16_t h[] = {0x3C00, 0xC000, 0x3800, 0}; memcpy(p + 2 * i, &h[i % 4], 2); }
      break;
    case MRT_DTYPE_INT64: case MRT_DTYPE_UINT64:
      n = info->nbytes / 8;
      for (i = 0; i < n; i++) memcpy(p + 8 * i, &ints[i % ni], 8);
      break;
    case MRT_DTYPE_INT32: case MRT_DTYPE_UINT32:
      n = info->nbytes / 4;
      for (i = 0; i < n; i++) { int32_t v = (int32_t)ints[i % ni]; memcpy(p + 4 * i, &v, 4); }
      break;
    case MRT_DTYPE_INT16: case MRT_DTYPE_UINT16:
      n = info->nbytes / 2;
      for (i = 0; i < n; i++) { int16_t v = (int16_t)ints[i % ni]; memcpy(p + 2 * i, &v, 2); }
      break;
    case MRT_DTYPE_BOOL:
      for (i = 0; i < info->nbytes; i++) p[i] = (uint8_t)((i * 7 + 3) % 3 == 0);
      break;
    default: /* int8, uint8 */
      for (i = 0; i < info->nbytes; i++) p[i] = (uint8_t)ints[i % ni];
      break;
  }
}

/* Outcome counts for the command-line driver's summary. */
typedef struct mrt_fuzz_counts { long created, rejected; } mrt_fuzz_counts;

/* The one-input check. `data` must be an exact-size heap block so AddressSanitizer
 * sees a read one byte past the end. */
static void mrt_fuzz_one(const uint8_t *data, size_t len, mrt_fuzz_counts *counts) {
  char err[256];
  memset(err, 0, sizeof err);
  mrt_session *s = NULL;
  mrt_status st = mrt_session_create(data, len, 0, &s, err, sizeof err);
  if (st != MRT_STATUS_OK) {
    if (s != NULL) mrt_fuzz_fail("a failed create left a session behind", err);
    if (err[0] == 0) mrt_fuzz_fail("a failed create left no message", mrt_status_string(st));
    if (counts) counts->rejected++;
    return;
  }
  if (s == NULL) mrt_fuzz_fail("create returned OK without a session", NULL);
  if (counts) counts->created++;
  for (size_t k = 0; k < mrt_session_input_count(s); k++) {
    mrt_tensor_info info;
    if (mrt_session_input_info(s, k, &info) != MRT_STATUS_OK) mrt_fuzz_fail("input_info failed", NULL);
    void *in = mrt_session_input_data(s, k);
    if (in == NULL && info.nbytes) mrt_fuzz_fail("input without memory", info.name);
    if (info.nbytes) mrt_fuzz_fill(in, &info);
  }
  st = mrt_session_run(s);
  if (st != MRT_STATUS_OK && mrt_session_last_error(s)[0] == 0)
    mrt_fuzz_fail("a failed run left no message", mrt_status_string(st));
  /* Every output byte is read, so a wrong output pointer or size shows. */
  unsigned sum = 0;
  for (size_t k = 0; st == MRT_STATUS_OK && k < mrt_session_output_count(s); k++) {
    mrt_tensor_info info;
    if (mrt_session_output_info(s, k, &info) != MRT_STATUS_OK) mrt_fuzz_fail("output_info failed", NULL);
    const uint8_t *out = mrt_session_output_data(s, k);
    if (out == NULL && info.nbytes) mrt_fuzz_fail("output without memory", info.name);
    for (size_t i = 0; i < info.nbytes; i++) sum += out[i];
  }
  /* Keep the reads. */
  __asm__ volatile("" : : "r"(sum));
  mrt_session_destroy(s);
}

#endif /* MRT_FUZZ_COMMON_H */
