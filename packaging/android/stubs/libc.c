/*
 * Link-time stand-in for Android's libc.so (bionic). It only gives lld the names
 * libminirt.so may import and a SONAME to record in DT_NEEDED; the bodies never
 * run: on a device the dynamic linker binds these names to the real bionic.
 * Every name here is exported by bionic's libc.so at API level 21.
 *
 * A link failing with "undefined symbol: X" means the runtime started using a new
 * libc function: add it here (or to libm.c) after checking bionic exports it at
 * API 21 (ndk: sysroot/usr/lib/<triple>/21/libc.so), never a bionic-private one.
 */
#define STUB(name) void name(void) {}

/* memory */
STUB(malloc)
STUB(calloc)
STUB(realloc)
STUB(free)
STUB(posix_memalign)
STUB(memcpy)
STUB(memmove)
STUB(memset)
STUB(memcmp)
STUB(abort)
STUB(madvise) /* huge pages for large blocks (runtime/kernel_ctx.c; not in --tune size builds) */

/* strings */
STUB(strlen)
STUB(strcmp)
STUB(strncmp)
STUB(strchr)

/* environment (MINIRT_MAX_CPU_ISA), CPU features (qgemm's sdot on arm64: AT_HWCAP) */
STUB(getenv)
STUB(getauxval)

/* formatted messages, model files */
STUB(snprintf)
STUB(vsnprintf)
STUB(fopen)
STUB(fread)
STUB(fclose)
STUB(ferror)

/* the compiler's helpers that bionic exports */
STUB(__errno)
STUB(__stack_chk_fail)

/* threads (runtime/threadpool.c; absent from a --no-threads build) */
STUB(pthread_create)
STUB(pthread_join)
STUB(pthread_mutex_init)
STUB(pthread_mutex_destroy)
STUB(pthread_mutex_lock)
STUB(pthread_mutex_unlock)
STUB(pthread_cond_init)
STUB(pthread_cond_destroy)
STUB(pthread_cond_wait)
STUB(pthread_cond_signal)
STUB(pthread_cond_broadcast)
STUB(sched_yield)
