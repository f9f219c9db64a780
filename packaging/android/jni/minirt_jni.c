/*
 * JNI glue for ai.minibuild.minirt.MiniRtSession: thin, static natives over the
 * C API. Sessions travel as jlong handles; errors become MiniRtException with
 * minirt's status and message. Java checks arguments first (clear exceptions
 * with names), this file checks them again so that no call can crash the VM.
 *
 * Buffers: direct ByteBuffers are read and written in place
 * (GetDirectBufferAddress); Java arrays are copied exactly once, straight
 * between the array and the session's own tensor memory. nativeRunWith hands
 * the caller's direct buffers to mrt_session_run_with: inputs are read where
 * they lie, not copied in.
 */
#include <jni.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "minirt.h"

#define CLASS_EXCEPTION "ai/minibuild/minirt/MiniRtException"
#define FN(name) JNICALL Java_ai_minibuild_minirt_MiniRtSession_##name

static jclass g_exception;          /* global ref, set in JNI_OnLoad */
static jmethodID g_exception_init;  /* MiniRtException(int, String, String) */

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved) {
  (void)reserved;
  JNIEnv *env;
  if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_6) != JNI_OK) return JNI_ERR;
  jclass cls = (*env)->FindClass(env, CLASS_EXCEPTION);
  if (!cls) return JNI_ERR;
  g_exception = (jclass)(*env)->NewGlobalRef(env, cls);
  (*env)->DeleteLocalRef(env, cls);
  g_exception_init = (*env)->GetMethodID(env, g_exception, "<init>", "(ILjava/lang/String;Ljava/lang/String;)V");
  if (!g_exception || !g_exception_init) return JNI_ERR;
  return JNI_VERSION_1_6;
}

static void throw_status(JNIEnv *env, mrt_status status, const char *message) {
  if ((*env)->ExceptionCheck(env)) return; /* one pending exception is enough */
  jstring name = (*env)->NewStringUTF(env, mrt_status_string(status));
  jstring msg = (*env)->NewStringUTF(env, message ? message : "");
  if (!name || !msg) return; /* OutOfMemoryError is pending */
  jobject e = (*env)->NewObject(env, g_exception, g_exception_init, (jint)status, name, msg);
  if (e) (*env)->Throw(env, (jthrowable)e);
}

static int check(JNIEnv *env, mrt_session *s, mrt_status status) {
  if (status == MRT_STATUS_OK) return 1;
  throw_status(env, status, mrt_session_last_error(s));
  return 0;
}

static mrt_session *session(JNIEnv *env, jlong handle) {
  mrt_session *s = (mrt_session *)(intptr_t)handle;
  if (!s) throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "the session is closed");
  return s;
}

/* Address of [pos, pos+len) inside a direct buffer, or NULL with an exception. */
static uint8_t *direct_range(JNIEnv *env, jobject buf, jint pos, jint len) {
  uint8_t *base = (uint8_t *)(*env)->GetDirectBufferAddress(env, buf);
  jlong cap = (*env)->GetDirectBufferCapacity(env, buf);
  if (!base || cap < 0) {
    throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "not a direct ByteBuffer");
    return NULL;
  }
  if (pos < 0 || len < 0 || (jlong)pos + len > cap) {
    throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "buffer range out of bounds");
    return NULL;
  }
  return base + pos;
}

/* threads: MiniRtSession.Options.intraOpNumThreads (checked in Java; the
 * runtime checks it again). No JNI call in here: nativeCreateFromArray runs it
 * inside a critical region. */
static mrt_status create_raw(const void *data, size_t size, uint32_t flags, jint threads, mrt_session **s,
                             char *err, size_t err_size) {
  mrt_session_options o = {0};
  o.flags = flags;
  o.intra_op_num_threads = threads;
  return mrt_session_create_with_options(data, size, &o, s, err, err_size);
}

static jlong create(JNIEnv *env, const void *data, size_t size, uint32_t flags, jint threads) {
  char err[512];
  mrt_session *s = NULL;
  mrt_status st = create_raw(data, size, flags, threads, &s, err, sizeof err);
  if (st != MRT_STATUS_OK) {
    throw_status(env, st, err);
    return 0;
  }
  return (jlong)(intptr_t)s;
}

JNIEXPORT jlong FN(nativeCreateFromArray)(JNIEnv *env, jclass cls, jbyteArray data, jint off, jint len,
                                          jint threads) {
  (void)cls;
  jsize n = (*env)->GetArrayLength(env, data);
  if (off < 0 || len < 0 || (jlong)off + len > n) {
    throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "array range out of bounds");
    return 0;
  }
  /* The runtime copies the model into aligned memory, so the array is only read
   * for the duration of the call: no Java-side copy needed. */
  uint8_t *p = (*env)->GetPrimitiveArrayCritical(env, data, NULL);
  if (!p) return 0;
  char err[512];
  mrt_session *s = NULL;
  mrt_status st = create_raw(p + off, (size_t)len, 0, threads, &s, err, sizeof err);
  (*env)->ReleasePrimitiveArrayCritical(env, data, p, JNI_ABORT);
  if (st != MRT_STATUS_OK) {
    throw_status(env, st, err);
    return 0;
  }
  return (jlong)(intptr_t)s;
}

/* Returns the handle; the model is used in place (no copy) when it is 64-byte
 * aligned, e.g. a memory-mapped file. Java keeps the buffer alive meanwhile. */
JNIEXPORT jlong FN(nativeCreateFromDirect)(JNIEnv *env, jclass cls, jobject buf, jint pos, jint len,
                                           jint threads) {
  (void)cls;
  uint8_t *p = direct_range(env, buf, pos, len);
  if (!p) return 0;
  uint32_t flags = ((uintptr_t)p % 64 == 0) ? MRT_SESSION_BORROW_BUFFER : 0;
  return create(env, p, (size_t)len, flags, threads);
}

JNIEXPORT void FN(nativeDestroy)(JNIEnv *env, jclass cls, jlong handle) {
  (void)env; (void)cls;
  mrt_session_destroy((mrt_session *)(intptr_t)handle);
}

JNIEXPORT jint FN(nativeCount)(JNIEnv *env, jclass cls, jlong handle, jboolean output) {
  (void)cls;
  mrt_session *s = session(env, handle);
  if (!s) return 0;
  return (jint)(output ? mrt_session_output_count(s) : mrt_session_input_count(s));
}

static int info(JNIEnv *env, jlong handle, jboolean output, jint index, mrt_tensor_info *ti) {
  mrt_session *s = session(env, handle);
  if (!s) return 0;
  if (index < 0) {
    throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "negative index");
    return 0;
  }
  return check(env, s, output ? mrt_session_output_info(s, (size_t)index, ti)
                              : mrt_session_input_info(s, (size_t)index, ti));
}

/* {dtype, nbytes, ndim, dims...} */
JNIEXPORT jlongArray FN(nativeInfo)(JNIEnv *env, jclass cls, jlong handle, jboolean output, jint index) {
  (void)cls;
  mrt_tensor_info ti;
  if (!info(env, handle, output, index, &ti)) return NULL;
  jlong v[3 + MRT_MAX_DIMS];
  uint32_t ndim = ti.ndim < MRT_MAX_DIMS ? ti.ndim : MRT_MAX_DIMS;
  v[0] = (jlong)ti.dtype;
  v[1] = (jlong)ti.nbytes;
  v[2] = (jlong)ndim;
  for (uint32_t d = 0; d < ndim; d++) v[3 + d] = (jlong)ti.dims[d];
  jlongArray arr = (*env)->NewLongArray(env, (jsize)(3 + ndim));
  if (arr) (*env)->SetLongArrayRegion(env, arr, 0, (jsize)(3 + ndim), v);
  return arr;
}

JNIEXPORT jstring FN(nativeName)(JNIEnv *env, jclass cls, jlong handle, jboolean output, jint index) {
  (void)cls;
  mrt_tensor_info ti;
  if (!info(env, handle, output, index, &ti)) return NULL;
  return (*env)->NewStringUTF(env, ti.name ? ti.name : "");
}

JNIEXPORT void FN(nativeSetInputDirect)(JNIEnv *env, jclass cls, jlong handle, jint index, jobject buf,
                                        jint pos, jint len) {
  (void)cls;
  mrt_session *s = session(env, handle);
  uint8_t *p = s ? direct_range(env, buf, pos, len) : NULL;
  if (p) check(env, s, mrt_session_set_input(s, (size_t)index, p, (size_t)len));
}

/* [off, off+len) bytes lie inside the primitive array; else throws. */
static int array_range_ok(JNIEnv *env, jarray array, jint off, jint len, jint elem_size) {
  jlong total = (jlong)(*env)->GetArrayLength(env, array) * elem_size;
  if (off < 0 || len < 0 || (jlong)off + len > total) {
    throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "array range out of bounds");
    return 0;
  }
  return 1;
}

/* Any primitive array; off/len in bytes. Copied straight into the session's input. */
JNIEXPORT void FN(nativeSetInputArray)(JNIEnv *env, jclass cls, jlong handle, jint index, jarray array,
                                       jint off, jint len, jint elem_size) {
  (void)cls;
  mrt_session *s = session(env, handle);
  if (!s) return;
  if (!array_range_ok(env, array, off, len, elem_size)) return;
  mrt_tensor_info ti;
  if (!check(env, s, mrt_session_input_info(s, (size_t)index, &ti))) return;
  if ((size_t)len != ti.nbytes) {
    throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "the data's byte size differs from the input's");
    return;
  }
  void *dst = mrt_session_input_data(s, (size_t)index);
  uint8_t *src = (*env)->GetPrimitiveArrayCritical(env, array, NULL);
  if (!src) return;
  memcpy(dst, src + off, (size_t)len);
  (*env)->ReleasePrimitiveArrayCritical(env, array, src, JNI_ABORT);
}

JNIEXPORT jobject FN(nativeInputBuffer)(JNIEnv *env, jclass cls, jlong handle, jint index) {
  (void)cls;
  mrt_tensor_info ti;
  if (!info(env, handle, JNI_FALSE, index, &ti)) return NULL;
  void *p = mrt_session_input_data((mrt_session *)(intptr_t)handle, (size_t)index);
  return (*env)->NewDirectByteBuffer(env, p, (jlong)ti.nbytes);
}

JNIEXPORT void FN(nativeRun)(JNIEnv *env, jclass cls, jlong handle) {
  (void)cls;
  mrt_session *s = session(env, handle);
  if (s) check(env, s, mrt_session_run(s));
}

/* One run on the caller's buffers (MiniRtSession.run(ByteBuffer[], ByteBuffer[])):
 * bufs holds the inputs then the outputs, pos their positions. An input is a
 * direct buffer read in place, or null for the input already in the session
 * (Java copied a heap buffer there); an output is a direct buffer receiving
 * it, or null to leave it in the session. Java has checked counts, sizes and
 * positions; each range is checked again here. */
JNIEXPORT void FN(nativeRunWith)(JNIEnv *env, jclass cls, jlong handle, jobjectArray bufs, jintArray pos) {
  (void)cls;
  mrt_session *s = session(env, handle);
  if (!s) return;
  const size_t ni = mrt_session_input_count(s), n = ni + mrt_session_output_count(s);
  if (!bufs || !pos || (size_t)(*env)->GetArrayLength(env, bufs) != n || (size_t)(*env)->GetArrayLength(env, pos) != n) {
    throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "run: one buffer per input and one per output");
    return;
  }
  void **ptrs = malloc((n ? n : 1) * (sizeof *ptrs + sizeof(size_t) + sizeof(jint)));
  if (!ptrs) {
    throw_status(env, MRT_STATUS_OUT_OF_MEMORY, "out of memory");
    return;
  }
  size_t *nbytes = (size_t *)(ptrs + n);
  jint *at = (jint *)(nbytes + n);
  (*env)->GetIntArrayRegion(env, pos, 0, (jsize)n, at);
  int ok = 1;
  for (size_t k = 0; k < n && ok; k++) {
    mrt_tensor_info ti;
    ok = check(env, s, k < ni ? mrt_session_input_info(s, k, &ti) : mrt_session_output_info(s, k - ni, &ti));
    if (!ok) break;
    jobject b = (*env)->GetObjectArrayElement(env, bufs, (jsize)k);
    nbytes[k] = ti.nbytes;
    ptrs[k] = k < ni ? mrt_session_input_data(s, k) : NULL;
    if (b) {
      /* direct_range takes a jint: a tensor of 2 GB or more fails its bounds check */
      ptrs[k] = direct_range(env, b, at[k], ti.nbytes > INT32_MAX ? -1 : (jint)ti.nbytes);
      ok = ptrs[k] != NULL;
      (*env)->DeleteLocalRef(env, b);
    }
  }
  if (ok) check(env, s, mrt_session_run_with(s, (const void *const *)ptrs, nbytes, ptrs + ni, nbytes + ni));
  free(ptrs);
}

JNIEXPORT void FN(nativeGetOutputDirect)(JNIEnv *env, jclass cls, jlong handle, jint index, jobject buf,
                                         jint pos, jint len) {
  (void)cls;
  mrt_session *s = session(env, handle);
  uint8_t *p = s ? direct_range(env, buf, pos, len) : NULL;
  /* get_output leaves no message (it takes a const session): give one here. */
  if (p && mrt_session_get_output(s, (size_t)index, p, (size_t)len) != MRT_STATUS_OK)
    throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "output index out of range or the buffer's size differs from the output's");
}

JNIEXPORT void FN(nativeGetOutputArray)(JNIEnv *env, jclass cls, jlong handle, jint index, jarray array,
                                        jint off, jint len, jint elem_size) {
  (void)cls;
  mrt_session *s = session(env, handle);
  if (!s) return;
  if (!array_range_ok(env, array, off, len, elem_size)) return;
  mrt_tensor_info ti;
  if (!check(env, s, mrt_session_output_info(s, (size_t)index, &ti))) return;
  const void *src = mrt_session_output_data(s, (size_t)index);
  if ((size_t)len != ti.nbytes || !src) {
    throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "the array's byte size differs from the output's");
    return;
  }
  uint8_t *dst = (*env)->GetPrimitiveArrayCritical(env, array, NULL);
  if (!dst) return;
  memcpy(dst + off, src, (size_t)len);
  (*env)->ReleasePrimitiveArrayCritical(env, array, dst, 0);
}

JNIEXPORT jobject FN(nativeOutputBuffer)(JNIEnv *env, jclass cls, jlong handle, jint index) {
  (void)cls;
  mrt_tensor_info ti;
  if (!info(env, handle, JNI_TRUE, index, &ti)) return NULL;
  const void *p = mrt_session_output_data((mrt_session *)(intptr_t)handle, (size_t)index);
  if (!p) {
    throw_status(env, MRT_STATUS_INVALID_ARGUMENT, "no output yet: call run() first");
    return NULL;
  }
  /* Java wraps it read-only. */
  return (*env)->NewDirectByteBuffer(env, (void *)p, (jlong)ti.nbytes);
}

JNIEXPORT jstring FN(nativeVersion)(JNIEnv *env, jclass cls) {
  (void)cls;
  return (*env)->NewStringUTF(env, mrt_version());
}

JNIEXPORT jstring FN(nativeManifestHash)(JNIEnv *env, jclass cls) {
  (void)cls;
  return (*env)->NewStringUTF(env, mrt_build_manifest_hash());
}
