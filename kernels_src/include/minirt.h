/*
 * minirt: the size-reduced inference runtime built by minibuild.
 *
 * One public header. Every handle is opaque, every call that can fail returns
 * an mrt_status and leaves a readable message behind (mrt_session_last_error,
 * or the err buffer of mrt_session_create). Nothing in the runtime aborts on
 * bad input: a corrupt model file is rejected at load with a message.
 */
#ifndef MINIRT_H
#define MINIRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(MRT_BUILDING_LIBRARY)
#define MRT_API __attribute__((visibility("default")))
#else
#define MRT_API
#endif

#define MRT_VERSION_MAJOR 0
#define MRT_VERSION_MINOR 1
#define MRT_VERSION_PATCH 0

/* Status codes. MRT_STATUS_OK is 0; everything else is an error. */
typedef enum mrt_status {
  MRT_STATUS_OK = 0,
  MRT_STATUS_INVALID_ARGUMENT = 1, /* a NULL pointer, an index or a size out of range */
  MRT_STATUS_INVALID_MODEL = 2,    /* the model bytes fail a structural check */
  MRT_STATUS_UNSUPPORTED = 3,      /* the model asks for a kernel this build lacks */
  MRT_STATUS_OUT_OF_MEMORY = 4,
  MRT_STATUS_IO_ERROR = 5,
} mrt_status;

/* Element types. Values are ONNX's TensorProto.DataType values. */
typedef enum mrt_dtype {
/* BEGIN generated element types (from minibuild/dtypes.py by `python -m minibuild.dtypes`; do not edit) */
  MRT_DTYPE_UNDEFINED = 0,
  MRT_DTYPE_FLOAT32 = 1,
  MRT_DTYPE_UINT8 = 2,
  MRT_DTYPE_INT8 = 3,
  MRT_DTYPE_UINT16 = 4,
  MRT_DTYPE_INT16 = 5,
  MRT_DTYPE_INT32 = 6,
  MRT_DTYPE_INT64 = 7,
  MRT_DTYPE_BOOL = 9,
  MRT_DTYPE_FLOAT16 = 10,
  MRT_DTYPE_FLOAT64 = 11,
  MRT_DTYPE_UINT32 = 12,
  MRT_DTYPE_UINT64 = 13,
/* END generated element types */
} mrt_dtype;

#define MRT_MAX_DIMS 6

/* Name, element type and (static) shape of a model input or output. The
 * name pointer stays valid for the session's lifetime. */
typedef struct mrt_tensor_info {
  const char *name;
  mrt_dtype dtype;
  uint32_t ndim;
  int64_t dims[MRT_MAX_DIMS];
  size_t nbytes;
} mrt_tensor_info;

typedef struct mrt_session mrt_session;

/* Flags for mrt_session_create. */
enum {
  /* Use the caller's buffer in place instead of copying it: weights are read
   * straight from it. The buffer must be 64-byte aligned and outlive the
   * session. Without the flag the model is copied into an aligned buffer. */
  MRT_SESSION_BORROW_BUFFER = 1u << 0,
};

/* Create a session from the bytes of a converted model (.mrt). On failure
 * *out is NULL and, if err is not NULL, err holds a NUL-terminated message
 * (truncated to err_size). */
MRT_API mrt_status mrt_session_create(const void *model, size_t size, uint32_t flags,
                                      mrt_session **out, char *err, size_t err_size);

/* Session options. Zero-initialise (`mrt_session_options o = {0};`) and set
 * what you need; fields added later default to 0 = the old behaviour. */
typedef struct mrt_session_options {
  uint32_t flags;               /* MRT_SESSION_* flags, as for mrt_session_create */
  /* Threads one run uses, the calling thread included (onnxruntime's
   * intra_op_num_threads). 0 or 1: run on the caller's thread only (the
   * default: no worker threads, smallest footprint). Ignored (1) in a build
   * made with --no-threads. At most MRT_MAX_THREADS. */
  int32_t intra_op_num_threads;
  uint32_t reserved[6];
} mrt_session_options;

#define MRT_MAX_THREADS 64

/* mrt_session_create with options (NULL: the defaults). A file's bytes can be
 * passed after reading it, as mrt_session_create_from_file does. */
MRT_API mrt_status mrt_session_create_with_options(const void *model, size_t size,
                                                   const mrt_session_options *options,
                                                   mrt_session **out, char *err, size_t err_size);

/* Same, reading the model from a file into a buffer the session then owns and
 * reads its weights from: one copy of the model in memory, never two. */
MRT_API mrt_status mrt_session_create_from_file(const char *path, mrt_session **out,
                                                char *err, size_t err_size);

/* Free a session (and join its worker threads); NULL is allowed. */
MRT_API void mrt_session_destroy(mrt_session *session);

MRT_API size_t mrt_session_input_count(const mrt_session *session);
MRT_API size_t mrt_session_output_count(const mrt_session *session);
MRT_API mrt_status mrt_session_input_info(const mrt_session *session, size_t index,
                                          mrt_tensor_info *info);
MRT_API mrt_status mrt_session_output_info(const mrt_session *session, size_t index,
                                           mrt_tensor_info *info);

/* Pointer to the memory of input `index` inside the session: write the input
 * there directly to avoid a copy. Valid until the session is destroyed. */
MRT_API void *mrt_session_input_data(mrt_session *session, size_t index);
/* Pointer to the memory of output `index`, valid after mrt_session_run until
 * the next run or destroy. */
MRT_API const void *mrt_session_output_data(const mrt_session *session, size_t index);

/* Copy `nbytes` (which must equal the input's size) into input `index`. */
MRT_API mrt_status mrt_session_set_input(mrt_session *session, size_t index,
                                         const void *data, size_t nbytes);
/* Copy output `index` (exactly `nbytes`) into `data`. */
MRT_API mrt_status mrt_session_get_output(const mrt_session *session, size_t index,
                                          void *data, size_t nbytes);

/* Run the model on the current inputs. One run at a time per session (the
 * session's threads serve that run); different sessions may run concurrently. */
MRT_API mrt_status mrt_session_run(mrt_session *session);

/* One run on the caller's buffers, without copying the inputs in: inputs[i]
 * holds input i (input_nbytes[i] must equal its size) and is read where it
 * lies; the session never writes to it and keeps no pointer to it after the
 * call. An input the model also reads through a view (a Reshape of it, say),
 * or whose address is not a multiple of its element size, is copied in as by
 * mrt_session_set_input. inputs[i] may also be mrt_session_input_data(i),
 * the input already written into the session. outputs[k] (output_nbytes[k]
 * bytes) receives output k; a NULL outputs, or a NULL outputs[k], leaves that
 * output in the session (mrt_session_output_data). */
MRT_API mrt_status mrt_session_run_with(mrt_session *session, const void *const *inputs,
                                        const size_t *input_nbytes, void *const *outputs,
                                        const size_t *output_nbytes);

/* Message of the last failed call on this session ("" if none). */
MRT_API const char *mrt_session_last_error(const mrt_session *session);

/* A short constant name for a status ("OK", "INVALID_MODEL", ...). */
MRT_API const char *mrt_status_string(mrt_status status);

/* "major.minor.patch" of the runtime. */
MRT_API const char *mrt_version(void);

/* The hash of the manifest this library was built for (hex), so a binary can
 * be tied to its model set. */
MRT_API const char *mrt_build_manifest_hash(void);

#ifdef __cplusplus
}
#endif

#endif /* MINIRT_H */
