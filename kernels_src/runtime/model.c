/* Loading a .mrt model (docs/model_format.md). Every field is checked before
 * it is used: the bytes may come from anywhere. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static uint32_t crc32_ieee(const uint8_t *p, size_t n) {
  /* Table-free: load time is dominated by prepare, and 1 KB of table is not
   * worth it in a size-first library. */
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

/* True when [off, off+len) lies inside [0, size). */
static int in_range(uint64_t off, uint64_t len, uint64_t size) {
  return off <= size && len <= size - off;
}

typedef struct reader {
  struct mrt_session *s;
  const uint8_t *strings;
  uint32_t strings_size;
  const uint8_t *data;
  uint64_t data_size;
  const uint8_t *indices;
  uint32_t n_indices;
} reader;

static const char *string_at(reader *r, uint32_t off) {
  /* The table ends with NUL (checked), so any in-range offset is a C string. */
  if (off >= r->strings_size) return NULL;
  return (const char *)r->strings + off;
}

static mrt_status load_tensors(reader *r, const uint8_t *tab) {
  struct mrt_session *s = r->s;
  for (uint32_t i = 0; i < s->n_tensors; i++) {
    const uint8_t *rec = tab + (size_t)i * MRT_TENSOR_RECORD;
    mrt_tensor *t = &s->tensors[i];
    t->name = string_at(r, rd32(rec));
    if (!t->name) return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "tensor %u: name offset out of range", i);
    t->dtype = (mrt_dtype)rd32(rec + 4);
    size_t esize = mrt_dtype_size(t->dtype);
    if (!esize) return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "tensor '%s': unknown dtype %u", t->name, (unsigned)t->dtype);
    t->ndim = rd32(rec + 8);
    if (t->ndim > MRT_MAX_DIMS) return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "tensor '%s': %u dims, at most %d supported", t->name, t->ndim, MRT_MAX_DIMS);
    uint32_t kind = rd32(rec + 12);
    uint64_t count = 1;
    for (uint32_t d = 0; d < MRT_MAX_DIMS; d++) {
      int64_t dim = (int64_t)rd64(rec + 16 + 8 * d);
      if (d >= t->ndim) { t->dims[d] = 0; continue; }
      if (dim < 0 || (dim > 0 && count > (UINT64_MAX / 64) / (uint64_t)dim))
        return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "tensor '%s': dim %u is %lld", t->name, d, (long long)dim);
      t->dims[d] = dim;
      count *= (uint64_t)dim;
    }
    uint64_t offset = rd64(rec + 64), nbytes = rd64(rec + 72);
    if (nbytes != count * esize || count > SIZE_MAX)
      return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "tensor '%s': nbytes %llu does not match its shape", t->name, (unsigned long long)nbytes);
    if (offset % MRT_ALIGN)
      return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "tensor '%s': offset not 64-aligned", t->name);
    t->count = (size_t)count;
    t->nbytes = (size_t)nbytes;
    if (kind == 1) {
      if (!in_range(offset, nbytes, r->data_size))
        return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "tensor '%s': constant data outside the data section", t->name);
      t->data = (void *)(r->data + offset);
      t->is_constant = 1;
    } else if (kind == 0) {
      if (!in_range(offset, nbytes, s->arena_size))
        return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "tensor '%s': outside the arena", t->name);
      t->data = (void *)(uintptr_t)offset; /* rebased onto the arena once it exists */
      t->is_constant = 0;
    } else {
      return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "tensor '%s': unknown kind %u", t->name, kind);
    }
  }
  return MRT_STATUS_OK;
}

static mrt_status tensor_list(reader *r, uint32_t first, uint32_t n, int allow_absent, mrt_tensor **out,
                              const char *what) {
  struct mrt_session *s = r->s;
  if (first > r->n_indices || n > r->n_indices - first)
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "%s: index list out of range", what);
  for (uint32_t k = 0; k < n; k++) {
    uint32_t idx = rd32(r->indices + 4 * ((size_t)first + k));
    if (idx == MRT_NO_INDEX && allow_absent) { out[k] = NULL; continue; }
    if (idx >= s->n_tensors)
      return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "%s: tensor index %u out of range", what, idx);
    out[k] = &s->tensors[idx];
  }
  return MRT_STATUS_OK;
}

static mrt_status load_attrs(reader *r, const uint8_t *tab, uint32_t n_attrs) {
  struct mrt_session *s = r->s;
  for (uint32_t i = 0; i < n_attrs; i++) {
    const uint8_t *rec = tab + (size_t)i * MRT_ATTR_RECORD;
    mrt_attr *a = &s->attrs[i];
    a->name = string_at(r, rd32(rec));
    if (!a->name) return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "attribute %u: name out of range", i);
    a->type = (mrt_attr_type)rd32(rec + 4);
    a->count = rd32(rec + 8);
    uint64_t off = rd64(rec + 16), esize;
    switch (a->type) {
      case MRT_ATTR_FLOAT: case MRT_ATTR_FLOATS: esize = 4; break;
      case MRT_ATTR_INT: case MRT_ATTR_INTS: esize = 8; break;
      case MRT_ATTR_STRING: esize = 1; break;
      default: return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "attribute '%s': unknown type %u", a->name, (unsigned)a->type);
    }
    if ((a->type == MRT_ATTR_FLOAT || a->type == MRT_ATTR_INT) && a->count != 1)
      return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "attribute '%s': scalar with count %u", a->name, a->count);
    if (off % 8 || !in_range(off, (uint64_t)a->count * esize, r->data_size))
      return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "attribute '%s': value outside the data section", a->name);
    a->data = r->data + off;
  }
  return MRT_STATUS_OK;
}

/* A node's output and an input in the arena share memory exactly (a view) or not
 * at all: a partial overlap, which only a corrupt memory plan has, would make every
 * kernel that copies from input to output read what it has just written. */
static int partly_overlap(const mrt_tensor *a, const mrt_tensor *b) {
  if (a->is_constant || b->is_constant || !a->nbytes || !b->nbytes) return 0;
  const uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data; /* arena offsets until rebased */
  if (a0 == b0 && a->nbytes == b->nbytes) return 0;
  return a0 < b0 + b->nbytes && b0 < a0 + a->nbytes;
}

/* Every node input must exist before the node runs: a graph input, a
 * constant, or the output of an earlier node. Kernels rely on it. */
static mrt_status check_order(struct mrt_session *s) {
  uint8_t *ready = calloc(s->n_tensors ? s->n_tensors : 1, 1);
  if (!ready) return mrt_session_fail(s, MRT_STATUS_OUT_OF_MEMORY, "out of memory loading the model");
  for (uint32_t i = 0; i < s->n_tensors; i++) ready[i] = (uint8_t)s->tensors[i].is_constant;
  for (uint32_t k = 0; k < s->n_inputs; k++) ready[s->graph_io[k]] = 1;
  mrt_status st = MRT_STATUS_OK;
  for (uint32_t i = 0; i < s->n_nodes && !st; i++) {
    const mrt_node *n = &s->nodes[i];
    for (uint32_t k = 0; k < n->n_inputs && !st; k++) {
      if (n->inputs[k] && !ready[n->inputs[k] - s->tensors])
        st = mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "node '%s' (%s) reads '%s' before it is written", n->name, n->op, n->inputs[k]->name);
    }
    for (uint32_t k = 0; k < n->n_outputs && !st; k++) {
      for (uint32_t j = 0; j < n->n_inputs && !st; j++) {
        if (n->inputs[j] && partly_overlap(n->outputs[k], n->inputs[j]))
          st = mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "node '%s': output '%s' partly overlaps input '%s'",
                                n->name, n->outputs[k]->name, n->inputs[j]->name);
      }
      ready[n->outputs[k] - s->tensors] = 1;
    }
  }
  for (uint32_t k = 0; k < s->n_outputs && !st; k++) {
    if (!ready[s->graph_io[s->n_inputs + k]])
      st = mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "graph output '%s' is never written", s->tensors[s->graph_io[s->n_inputs + k]].name);
  }
  free(ready);
  return st;
}

mrt_status mrt_model_load(struct mrt_session *s) {
  const uint8_t *m = s->model;
  size_t size = s->model_size;
  if (size < MRT_HEADER_SIZE || memcmp(m, MRT_MAGIC, 4) != 0)
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "not a minirt model (bad magic); convert the ONNX model with minibuild");
  if (rd16(m + 4) != MRT_FORMAT_MAJOR)
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "model format %u.%u, this runtime reads %u.x; rebuild the model with the same minibuild", rd16(m + 4), rd16(m + 6), MRT_FORMAT_MAJOR);
  if (rd32(m + 8) != MRT_HEADER_SIZE || rd64(m + 16) != size)
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "model truncated or padded: header says %llu bytes, got %zu", (unsigned long long)rd64(m + 16), size);
  if (crc32_ieee(m + MRT_HEADER_SIZE, size - MRT_HEADER_SIZE) != rd32(m + 12))
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "model checksum mismatch: the file is corrupt");

  s->arena_size = (size_t)rd64(m + 24);
  if (rd64(m + 24) > SIZE_MAX / 2)
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "arena size too large");
  s->n_tensors = rd32(m + 32);
  s->n_nodes = rd32(m + 36);
  uint32_t n_attrs = rd32(m + 40);
  reader r = {0};
  r.s = s;
  r.n_indices = rd32(m + 44);
  s->n_inputs = rd32(m + 48);
  s->n_outputs = rd32(m + 52);
  uint32_t t_off = rd32(m + 56), n_off = rd32(m + 60), a_off = rd32(m + 64), i_off = rd32(m + 68);
  uint32_t s_off = rd32(m + 72);
  r.strings_size = rd32(m + 76);
  uint64_t d_off = rd64(m + 80);
  r.data_size = rd64(m + 88);

  struct { uint64_t off, len; const char *name; } sec[] = {
    {t_off, (uint64_t)s->n_tensors * MRT_TENSOR_RECORD, "tensor table"},
    {n_off, (uint64_t)s->n_nodes * MRT_NODE_RECORD, "node table"},
    {a_off, (uint64_t)n_attrs * MRT_ATTR_RECORD, "attribute table"},
    {i_off, (uint64_t)r.n_indices * 4, "index table"},
    {s_off, r.strings_size, "string table"},
    {d_off, r.data_size, "data section"},
  };
  for (size_t k = 0; k < sizeof sec / sizeof sec[0]; k++) {
    if (sec[k].off < MRT_HEADER_SIZE || sec[k].off % 8 || !in_range(sec[k].off, sec[k].len, size))
      return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "%s outside the file", sec[k].name);
  }
  if (d_off % MRT_ALIGN || d_off + r.data_size != size)
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "data section misplaced");
  if (r.strings_size == 0 || m[s_off + r.strings_size - 1] != 0)
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "string table not NUL-terminated");
  if ((uint64_t)s->n_inputs + s->n_outputs > r.n_indices)
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "graph inputs/outputs out of the index table");
  r.strings = m + s_off;
  r.data = m + d_off;
  r.indices = m + i_off;

  /* One allocation per table; sizes are bounded by the file size checked above. */
  s->tensors = calloc(s->n_tensors ? s->n_tensors : 1, sizeof *s->tensors);
  s->nodes = calloc(s->n_nodes ? s->n_nodes : 1, sizeof *s->nodes);
  s->attrs = calloc(n_attrs ? n_attrs : 1, sizeof *s->attrs);
  s->graph_io = calloc((size_t)s->n_inputs + s->n_outputs + 1, sizeof *s->graph_io);
  uint64_t n_io = 0;
  for (uint32_t i = 0; i < s->n_nodes; i++) {
    const uint8_t *rec = m + n_off + (size_t)i * MRT_NODE_RECORD;
    n_io += (uint64_t)rd32(rec + 24) + rd32(rec + 32);
  }
  if (n_io > (uint64_t)r.n_indices * 2 + 2)
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "node tensor lists exceed the index table");
  s->io = calloc((size_t)n_io + 1, sizeof *s->io);
  if (!s->tensors || !s->nodes || !s->attrs || !s->graph_io || !s->io)
    return mrt_session_fail(s, MRT_STATUS_OUT_OF_MEMORY, "out of memory loading the model");

  mrt_status st = load_tensors(&r, m + t_off);
  if (st) return st;
  /* A memory plan never needs more than every activation side by side (each
   * given at least one aligned slot, as the converter does for empty tensors). */
  uint64_t side_by_side = 0;
  for (uint32_t i = 0; i < s->n_tensors; i++) {
    uint64_t n = s->tensors[i].nbytes ? s->tensors[i].nbytes : 1;
    if (!s->tensors[i].is_constant) side_by_side += (n + MRT_ALIGN - 1) & ~(uint64_t)(MRT_ALIGN - 1);
  }
  if (s->arena_size > side_by_side)
    return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "arena of %zu bytes exceeds its %llu bytes of activations", s->arena_size, (unsigned long long)side_by_side);
  st = load_attrs(&r, m + a_off, n_attrs);
  if (st) return st;

  for (uint32_t k = 0; k < s->n_inputs + s->n_outputs; k++) {
    uint32_t idx = rd32(r.indices + 4 * (size_t)k);
    if (idx >= s->n_tensors || s->tensors[idx].is_constant)
      return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "graph %s %u: bad tensor index", k < s->n_inputs ? "input" : "output", k);
    s->graph_io[k] = idx;
  }

  mrt_tensor **io = s->io;
  for (uint32_t i = 0; i < s->n_nodes; i++) {
    const uint8_t *rec = m + n_off + (size_t)i * MRT_NODE_RECORD;
    mrt_node *n = &s->nodes[i];
    n->op = string_at(&r, rd32(rec));
    n->domain = string_at(&r, rd32(rec + 4));
    n->name = string_at(&r, rd32(rec + 8));
    if (!n->op || !n->domain || !n->name)
      return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "node %u: string offset out of range", i);
    n->opset = rd32(rec + 12);
    n->n_inputs = rd32(rec + 24);
    n->n_outputs = rd32(rec + 32);
    uint32_t a_first = rd32(rec + 36);
    n->n_attrs = rd32(rec + 40);
    if (a_first > n_attrs || n->n_attrs > n_attrs - a_first)
      return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "node '%s': attribute list out of range", n->name);
    n->attrs = s->attrs + a_first;
    n->inputs = io;
    st = tensor_list(&r, rd32(rec + 20), n->n_inputs, 1, io, n->name);
    if (st) return st;
    io += n->n_inputs;
    n->outputs = io;
    st = tensor_list(&r, rd32(rec + 28), n->n_outputs, 0, io, n->name);
    if (st) return st;
    io += n->n_outputs;
    for (uint32_t k = 0; k < n->n_outputs; k++) {
      if (n->outputs[k]->is_constant)
        return mrt_session_fail(s, MRT_STATUS_INVALID_MODEL, "node '%s' (%s) writes into constant '%s'", n->name, n->op, n->outputs[k]->name);
    }
    n->types = rd32(rec + 16);
  }
  return check_order(s);
}
