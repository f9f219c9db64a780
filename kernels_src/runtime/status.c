/* Element types, status names and error messages: the leaf of the runtime
 * core. model.c, session.c and kernel_ctx.c call down into it; it calls
 * nothing of theirs (see internal.h for the whole graph). */
#include <stdarg.h>

#include "internal.h"

/* BEGIN generated element types (from minibuild/dtypes.py by `python -m minibuild.dtypes`; do not edit) */
size_t mrt_dtype_size(uint32_t dtype) {
  switch (dtype) {
    case MRT_DTYPE_FLOAT32: return 4;
    case MRT_DTYPE_UINT8: return 1;
    case MRT_DTYPE_INT8: return 1;
    case MRT_DTYPE_UINT16: return 2;
    case MRT_DTYPE_INT16: return 2;
    case MRT_DTYPE_INT32: return 4;
    case MRT_DTYPE_INT64: return 8;
    case MRT_DTYPE_BOOL: return 1;
    case MRT_DTYPE_FLOAT16: return 2;
    case MRT_DTYPE_FLOAT64: return 8;
    case MRT_DTYPE_UINT32: return 4;
    case MRT_DTYPE_UINT64: return 8;
    default: return 0;
  }
}

const char *mrt_dtype_name(uint32_t dtype) {
  switch (dtype) {
    case MRT_DTYPE_FLOAT32: return "float32";
    case MRT_DTYPE_UINT8: return "uint8";
    case MRT_DTYPE_INT8: return "int8";
    case MRT_DTYPE_UINT16: return "uint16";
    case MRT_DTYPE_INT16: return "int16";
    case MRT_DTYPE_INT32: return "int32";
    case MRT_DTYPE_INT64: return "int64";
    case MRT_DTYPE_BOOL: return "bool";
    case MRT_DTYPE_FLOAT16: return "float16";
    case MRT_DTYPE_FLOAT64: return "float64";
    case MRT_DTYPE_UINT32: return "uint32";
    case MRT_DTYPE_UINT64: return "uint64";
    default: return "unknown";
  }
}
/* END generated element types */

const char *mrt_status_string(mrt_status status) {
  switch (status) {
    case MRT_STATUS_OK: return "OK";
    case MRT_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case MRT_STATUS_INVALID_MODEL: return "INVALID_MODEL";
    case MRT_STATUS_UNSUPPORTED: return "UNSUPPORTED";
    case MRT_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case MRT_STATUS_IO_ERROR: return "IO_ERROR";
  }
  return "UNKNOWN";
}

mrt_status mrt_session_fail(struct mrt_session *s, mrt_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  mrt_vformat(s->error, sizeof s->error, fmt, ap);
  va_end(ap);
  return status;
}
