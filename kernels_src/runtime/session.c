/* Sessions: load, bind kernels, prepare, run. The top of the runtime core:
 * it calls model.c, status.c and the kernels (through the registry); none of
 * them calls back into it (internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The registry is sorted by (domain, op); a linear scan of a few dozen rows
 * at load time costs nothing next to prepare. */
static const mrt_kernel *find_kernel(const mrt_node *n) {
  for (size_t i = 0; i < mrt_kernel_count; i++) {
    const mrt_kernel *k = &mrt_kernels[i];
    if (k->types == n->types && n->opset >= k->since_min && n->opset <= k->since_max &&
        strcmp(k->op, n->op) == 0 && strcmp(k->domain, n->domain) == 0)
      return k;
  }
  return NULL;
}

static void *aligned_alloc64(size_t size, void **block) {
  *block = malloc(size + MRT_ALIGN);
  if (!*block) return NULL;
  mrt_advise_huge(*block, size + MRT_ALIGN);
  return (void *)(((uintptr_t)*block + MRT_ALIGN - 1) & ~(uintptr_t)(MRT_ALIGN - 1));
}

static mrt_status session_init(struct mrt_session *s, size_t threads) {
  mrt_status st = mrt_model_load(s);
  if (st) return st;
#if MRT_ENABLE_THREADS
  /* One thread needs no pool: a NULL pool runs every loop on the caller's thread. */
  if (threads > 1 && !(s->pool = mrt_pool_create(threads)))
    return mrt_session_fail(s, MRT_STATUS_OUT_OF_MEMORY, "out of memory: thread pool");
#else
  (void)threads;
#endif

  s->arena = aligned_alloc64(s->arena_size ? s->arena_size : 1, &s->arena_block);
  if (!s->arena) return mrt_session_fail(s, MRT_STATUS_OUT_OF_MEMORY, "out of memory: arena of %zu bytes", s->arena_size);
  memset(s->arena, 0, s->arena_size);
  for (uint32_t i = 0; i < s->n_tensors; i++) {
    mrt_tensor *t = &s->tensors[i];
    if (!t->is_constant) t->data = s->arena + (uintptr_t)t->data;
  }

  /* A graph input lives the whole run, so another tensor at its address is a
   * view of it: reading such an input from the caller's buffer would leave the
   * view reading the arena. */
  s->input_home = (void **)calloc(s->n_inputs ? s->n_inputs : 1, sizeof *s->input_home);
  if (!s->input_home) return mrt_session_fail(s, MRT_STATUS_OUT_OF_MEMORY, "out of memory: inputs");
  for (uint32_t k = 0; k < s->n_inputs; k++) {
    const mrt_tensor *in = &s->tensors[s->graph_io[k]];
    uint32_t i = 0;
    while (i < s->n_tensors && (&s->tensors[i] == in || s->tensors[i].is_constant || s->tensors[i].data != in->data)) i++;
    s->input_home[k] = i == s->n_tensors ? in->data : NULL;
  }

  mrt_ctx ctx = {s, 0};
  for (uint32_t i = 0; i < s->n_nodes; i++) {
    mrt_node *n = &s->nodes[i];
    n->pool = s->pool;
    n->kernel = find_kernel(n);
    if (!n->kernel) {
      /* The signature's element types, one byte each (at most two named here). */
      const uint32_t t = n->types;
      return mrt_session_fail(s, MRT_STATUS_UNSUPPORTED,
                              "node '%s': this build has no kernel for %s%s%s opset %u type %s%s%s%s; "
                              "rebuild the runtime with minibuild including the model that uses it",
                              n->name, n->domain, n->domain[0] ? "." : "", n->op, n->opset,
                              mrt_dtype_name(t & 0xffu), t >> 8 ? "," : "", t >> 8 ? mrt_dtype_name(t >> 8 & 0xffu) : "",
                              t >> 16 ? ",..." : "");
    }
    st = n->kernel->prepare(n, &ctx);
    if (st) return st;
  }
  s->scratch_size = ctx.scratch_size;
  s->scratch = aligned_alloc64(s->scratch_size ? s->scratch_size : 1, &s->scratch_block);
  if (!s->scratch) return mrt_session_fail(s, MRT_STATUS_OUT_OF_MEMORY, "out of memory: scratch of %zu bytes", s->scratch_size);
  return MRT_STATUS_OK;
}

static void copy_error(char *err, size_t err_size, const char *msg) {
  if (!err || !err_size) return;
  size_t n = strlen(msg);
  if (n >= err_size) n = err_size - 1;
  memcpy(err, msg, n);
  err[n] = 0;
}

static mrt_status check_options(const mrt_session_options *o, char *err, size_t err_size) {
  if (o && (o->intra_op_num_threads < 0 || o->intra_op_num_threads > MRT_MAX_THREADS)) {
    copy_error(err, err_size, "intra_op_num_threads must be 0..64");
    return MRT_STATUS_INVALID_ARGUMENT;
  }
  return MRT_STATUS_OK;
}

mrt_status mrt_session_create(const void *model, size_t size, uint32_t flags, mrt_session **out,
                              char *err, size_t err_size) {
  mrt_session_options o = {0};
  o.flags = flags;
  return mrt_session_create_with_options(model, size, &o, out, err, err_size);
}

mrt_status mrt_session_create_with_options(const void *model, size_t size, const mrt_session_options *o,
                                           mrt_session **out, char *err, size_t err_size) {
  if (out) *out = NULL;
  if (!model || !out) {
    copy_error(err, err_size, "mrt_session_create: model and out must not be NULL");
    return MRT_STATUS_INVALID_ARGUMENT;
  }
  mrt_status st = check_options(o, err, err_size);
  if (st) return st;
  const uint32_t flags = o ? o->flags : 0;
  const size_t threads = o && o->intra_op_num_threads > 1 ? (size_t)o->intra_op_num_threads : 1;
  struct mrt_session *s = calloc(1, sizeof *s);
  if (!s) {
    copy_error(err, err_size, "out of memory");
    return MRT_STATUS_OUT_OF_MEMORY;
  }
  if ((flags & MRT_SESSION_BORROW_BUFFER) && ((uintptr_t)model % MRT_ALIGN) == 0) {
    s->model = model;
  } else {
    void *block;
    uint8_t *copy = aligned_alloc64(size ? size : 1, &block);
    if (!copy) {
      free(s);
      copy_error(err, err_size, "out of memory copying the model");
      return MRT_STATUS_OUT_OF_MEMORY;
    }
    memcpy(copy, model, size);
    s->owned_model = block;
    s->model = copy;
  }
  s->model_size = size;
  st = session_init(s, threads);
  if (st) {
    copy_error(err, err_size, s->error);
    mrt_session_destroy(s);
    return st;
  }
  *out = s;
  return MRT_STATUS_OK;
}

mrt_status mrt_session_create_from_file(const char *path, mrt_session **out, char *err, size_t err_size) {
  if (out) *out = NULL;
  if (!path || !out) {
    copy_error(err, err_size, "mrt_session_create_from_file: path and out must not be NULL");
    return MRT_STATUS_INVALID_ARGUMENT;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    char msg[MRT_ERROR_SIZE];
    snprintf(msg, sizeof msg, "cannot open '%s'", path);
    copy_error(err, err_size, msg);
    return MRT_STATUS_IO_ERROR;
  }
  /* The bytes are read once into a block the session then owns: grown as the
   * file is read (pages past the end are never touched, so not resident), then
   * moved down to the first 64-byte boundary inside the block, as the weights
   * are used in place. No second copy of the model ever exists. */
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 1 << 16;
      uint8_t *grown = cap < len ? NULL : realloc(buf, cap + MRT_ALIGN);
      if (!grown) {
        free(buf);
        fclose(f);
        copy_error(err, err_size, "out of memory reading the model");
        return MRT_STATUS_OUT_OF_MEMORY;
      }
      buf = grown;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    free(buf);
    copy_error(err, err_size, "read error");
    return MRT_STATUS_IO_ERROR;
  }
  uint8_t *model = (uint8_t *)(((uintptr_t)buf + MRT_ALIGN - 1) & ~(uintptr_t)(MRT_ALIGN - 1));
  memmove(model, buf, len);
  mrt_status st = mrt_session_create(model, len, MRT_SESSION_BORROW_BUFFER, out, err, err_size);
  if (st)
    free(buf);
  else
    (*out)->owned_model = buf;
  return st;
}

void mrt_session_destroy(mrt_session *s) {
  if (!s) return;
#if MRT_ENABLE_THREADS
  mrt_pool_destroy(s->pool);
#endif
  for (size_t i = 0; i < s->n_allocs; i++) free(s->allocs[i]);
  free(s->allocs);
  free(s->tensors);
  free(s->nodes);
  free(s->attrs);
  free(s->io);
  free(s->graph_io);
  free(s->input_home);
  free(s->arena_block);
  free(s->scratch_block);
  free(s->owned_model);
  free(s);
}

size_t mrt_session_input_count(const mrt_session *s) { return s ? s->n_inputs : 0; }
size_t mrt_session_output_count(const mrt_session *s) { return s ? s->n_outputs : 0; }

static mrt_tensor *graph_tensor(const mrt_session *s, size_t k) { return &s->tensors[s->graph_io[k]]; }

static mrt_status fill_info(const mrt_tensor *t, mrt_tensor_info *info) {
  info->name = t->name;
  info->dtype = t->dtype;
  info->ndim = t->ndim;
  for (uint32_t d = 0; d < MRT_MAX_DIMS; d++) info->dims[d] = d < t->ndim ? t->dims[d] : 0;
  info->nbytes = t->nbytes;
  return MRT_STATUS_OK;
}

mrt_status mrt_session_input_info(const mrt_session *s, size_t index, mrt_tensor_info *info) {
  if (!s || !info || index >= s->n_inputs) return MRT_STATUS_INVALID_ARGUMENT;
  return fill_info(graph_tensor(s, index), info);
}

mrt_status mrt_session_output_info(const mrt_session *s, size_t index, mrt_tensor_info *info) {
  if (!s || !info || index >= s->n_outputs) return MRT_STATUS_INVALID_ARGUMENT;
  return fill_info(graph_tensor(s, s->n_inputs + index), info);
}

void *mrt_session_input_data(mrt_session *s, size_t index) {
  if (!s || index >= s->n_inputs) return NULL;
  return graph_tensor(s, index)->data;
}

const void *mrt_session_output_data(const mrt_session *s, size_t index) {
  if (!s || index >= s->n_outputs) return NULL;
  return graph_tensor(s, s->n_inputs + index)->data;
}

/* Graph input or output k (past the inputs: an output) takes exactly its size. */
static mrt_status io_size(mrt_session *s, size_t k, size_t nbytes) {
  const mrt_tensor *t = graph_tensor(s, k);
  if (nbytes == t->nbytes) return MRT_STATUS_OK;
  return mrt_session_fail(s, MRT_STATUS_INVALID_ARGUMENT, "%s '%s' takes %zu bytes, got %zu",
                          k < s->n_inputs ? "input" : "output", t->name, t->nbytes, nbytes);
}

mrt_status mrt_session_set_input(mrt_session *s, size_t index, const void *data, size_t nbytes) {
  if (!s) return MRT_STATUS_INVALID_ARGUMENT;
  if (index >= s->n_inputs || !data)
    return mrt_session_fail(s, MRT_STATUS_INVALID_ARGUMENT, "set_input: index %zu out of range (%u inputs) or data NULL", index, s->n_inputs);
  mrt_status st = io_size(s, index, nbytes);
  if (!st) memcpy(graph_tensor(s, index)->data, data, nbytes);
  return st;
}

mrt_status mrt_session_get_output(const mrt_session *s, size_t index, void *data, size_t nbytes) {
  if (!s || index >= s->n_outputs || !data) return MRT_STATUS_INVALID_ARGUMENT;
  const mrt_tensor *t = graph_tensor(s, s->n_inputs + index);
  if (nbytes != t->nbytes) return MRT_STATUS_INVALID_ARGUMENT;
  memcpy(data, t->data, nbytes);
  return MRT_STATUS_OK;
}

mrt_status mrt_session_run(mrt_session *s) {
  if (!s) return MRT_STATUS_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < s->n_nodes; i++) {
    const mrt_node *n = &s->nodes[i];
    n->kernel->run(n, s->scratch);
  }
  return MRT_STATUS_OK;
}


mrt_status mrt_session_run_with(mrt_session *s, const void *const *inputs, const size_t *input_nbytes,
                                void *const *outputs, const size_t *output_nbytes) {
  if (!s) return MRT_STATUS_INVALID_ARGUMENT;
  const size_t ni = s->n_inputs, nio = ni + (outputs ? s->n_outputs : 0);
  int null = (ni && !(inputs && input_nbytes)) || (outputs && !output_nbytes);
  for (size_t k = 0; k < ni && !null; k++) null = !inputs[k];
  if (null) return mrt_session_fail(s, MRT_STATUS_INVALID_ARGUMENT, "run_with: an array or an input is NULL");
  /* Every size checked before anything is read or written. */
  for (size_t k = 0; k < nio; k++) {
    const mrt_status st = k < ni || outputs[k - ni] ? io_size(s, k, k < ni ? input_nbytes[k] : output_nbytes[k - ni]) : 0;
    if (st) return st;
  }
  for (size_t k = 0; k < ni; k++) {
    mrt_tensor *t = graph_tensor(s, k);
    const size_t elem = mrt_dtype_size(t->dtype);
    if (s->input_home[k] && elem && (uintptr_t)inputs[k] % elem == 0)
      t->data = (void *)(uintptr_t)inputs[k];
    else if (inputs[k] != t->data) /* not the session's own input (mrt_session_input_data) */
      memcpy(t->data, inputs[k], t->nbytes);
  }
  const mrt_status st = mrt_session_run(s);
  for (size_t k = ni; k < nio; k++)
    if (outputs[k - ni]) memcpy(outputs[k - ni], graph_tensor(s, k)->data, graph_tensor(s, k)->nbytes);
  for (size_t k = 0; k < ni; k++)
    if (s->input_home[k]) graph_tensor(s, k)->data = s->input_home[k];
  return st;
}

const char *mrt_session_last_error(const mrt_session *s) { return s ? s->error : "no session"; }

#define MRT_STR2(x) #x
#define MRT_STR(x) MRT_STR2(x)
const char *mrt_version(void) {
  return MRT_STR(MRT_VERSION_MAJOR) "." MRT_STR(MRT_VERSION_MINOR) "." MRT_STR(MRT_VERSION_PATCH);
}

/* mrt_build_manifest_hash is defined in the generated registry.c. */
