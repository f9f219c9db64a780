/* Attribute lookups for prepare functions. Attribute values are 8-aligned in
 * the model's data section (checked at load). */
#include "mrt_kernel.h"

static int str_eq(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

const mrt_attr *mrt_node_attr(const mrt_node *node, const char *name) {
  for (uint32_t i = 0; i < node->n_attrs; i++) {
    if (str_eq(node->attrs[i].name, name)) return &node->attrs[i];
  }
  return NULL;
}

int64_t mrt_attr_int(const mrt_node *node, const char *name, int64_t dflt) {
  const mrt_attr *a = mrt_node_attr(node, name);
  return a && a->type == MRT_ATTR_INT ? *(const int64_t *)a->data : dflt;
}

float mrt_attr_float(const mrt_node *node, const char *name, float dflt) {
  const mrt_attr *a = mrt_node_attr(node, name);
  return a && a->type == MRT_ATTR_FLOAT ? *(const float *)a->data : dflt;
}

uint32_t mrt_attr_ints(const mrt_node *node, const char *name, const int64_t **values) {
  const mrt_attr *a = mrt_node_attr(node, name);
  if (!a || a->type != MRT_ATTR_INTS) { *values = NULL; return 0; }
  *values = (const int64_t *)a->data;
  return a->count;
}

uint32_t mrt_attr_floats(const mrt_node *node, const char *name, const float **values) {
  const mrt_attr *a = mrt_node_attr(node, name);
  if (!a || a->type != MRT_ATTR_FLOATS) { *values = NULL; return 0; }
  *values = (const float *)a->data;
  return a->count;
}

int mrt_attr_string_is(const mrt_node *node, const char *name, const char *dflt, const char *s) {
  const mrt_attr *a = mrt_node_attr(node, name);
  if (!a || a->type != MRT_ATTR_STRING) return str_eq(dflt, s);
  /* The stored value is not NUL-terminated: stop at whichever string ends first. */
  const char *v = (const char *)a->data;
  uint32_t i = 0;
  for (; i < a->count && s[i]; i++) {
    if (s[i] != v[i]) return 0;
  }
  return i == a->count && s[i] == 0;
}
