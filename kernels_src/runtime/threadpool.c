/*
 * The session's thread pool (mrt_kernel.h: mrt_parallel_for). One pool per
 * session, sized by mrt_session_options.intra_op_num_threads; the calling
 * thread is thread 0 and takes tasks too, so N threads means N - 1 workers.
 * Workers start at the first parallel loop (a session that is never run, or
 * runs only small ops, starts none) and are joined by mrt_pool_destroy.
 *
 * Tasks are claimed from a shared counter, so a worker the OS delays does not
 * hold up the others, and the caller waits only for tasks a worker has begun:
 * a worker the OS has not run yet (it shares the caller's core, or other work
 * holds the others) finds the loop done and claims nothing, instead of the
 * caller spinning until it comes. Between loops a worker spins briefly
 * (consecutive layers follow within microseconds), yielding now and then so a
 * thread queued on its core gets it, then sleeps on a condition variable: an
 * idle session burns no core.
 *
 * MRT_ENABLE_THREADS 0 (minibuild --no-threads) compiles this unit to nothing:
 * mrt_kernel.h then turns every parallel loop into a serial one (no pthread
 * symbol, no bytes for the pool).
 *
 * Only pointers to pthread objects cross into libc and they are initialised
 * by *_init, never by static initialisers: Android objects are compiled
 * against musl's headers (internal.h), whose pthread types are at least as
 * large as bionic's.
 */
#include <stdlib.h>

#include "internal.h"

#if MRT_ENABLE_THREADS
#include <pthread.h>
#include <sched.h>

#define MRT_POOL_SPIN 4000 /* pauses before sleeping (~50-100 us) */
#define MRT_POOL_YIELD 64  /* a sched_yield every this many pauses */

/* The current loop in one word, so that a claim checks the loop and takes its
 * task in one compare-and-swap: generation (24 bits) | tasks (20) | next (20). */
#define MRT_POOL_BITS 20
#define MRT_POOL_MASK ((1u << MRT_POOL_BITS) - 1)
#define MRT_POOL_GEN(w) ((unsigned)((w) >> (2 * MRT_POOL_BITS)))

struct mrt_pool {
  size_t n_threads;        /* requested, caller included */
  size_t n_workers;        /* started so far (n_threads - 1, or fewer if creation failed) */
  int started;
  pthread_t *workers;
  pthread_mutex_t mu;
  pthread_cond_t wake;
  /* The current loop's function: written by the caller before `loop` publishes it. */
  mrt_task_fn fn;
  void *arg;
  /* atomic: generation | tasks | next task. Aligned: i386 would place it at 4
   * bytes, and its atomics would become library calls. */
  unsigned long long loop __attribute__((aligned(8)));
  size_t finished;         /* atomic: tasks of the current loop that are done */
  int stop;                /* under mu */
};

typedef struct mrt_worker_arg {
  struct mrt_pool *pool;
  size_t index;
} mrt_worker_arg;

/* One step of a spin-wait. The thread waited for may be queued behind the
 * spinner on the same core (the OS placed both there, or other work holds the
 * other cores): the yield hands it the core instead of burning the time slice. */
static void mrt_pool_pause(unsigned i) {
  if (i % MRT_POOL_YIELD == MRT_POOL_YIELD - 1) {
    sched_yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ volatile("yield");
#endif
}

/* Runs tasks of the loop `w` was read from until none is left. A thread that
 * comes late (the loop is over, the next one may be starting) claims nothing:
 * its compare-and-swap sees another generation. fn and arg are read after a
 * claim succeeds, when the caller cannot start another loop before this task
 * is counted finished. */
static void mrt_pool_claim(struct mrt_pool *p, unsigned long long w, size_t thread) {
  const unsigned gen = MRT_POOL_GEN(w);
  for (;;) {
    const size_t n = (size_t)(w >> MRT_POOL_BITS) & MRT_POOL_MASK, t = (size_t)w & MRT_POOL_MASK;
    if (MRT_POOL_GEN(w) != gen || t >= n) return;
    if (!__atomic_compare_exchange_n(&p->loop, &w, w + 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) continue;
    p->fn(p->arg, t, thread);
    __atomic_fetch_add(&p->finished, 1, __ATOMIC_RELEASE);
    w = __atomic_load_n(&p->loop, __ATOMIC_ACQUIRE);
  }
}

static void *mrt_pool_worker(void *varg) {
  mrt_worker_arg *wa = (mrt_worker_arg *)varg;
  struct mrt_pool *p = wa->pool;
  const size_t self = wa->index;
  free(wa);
  unsigned seen = 0;
  for (;;) {
    unsigned long long w = __atomic_load_n(&p->loop, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; MRT_POOL_GEN(w) == seen && i < MRT_POOL_SPIN; ++i) {
      mrt_pool_pause(i);
      w = __atomic_load_n(&p->loop, __ATOMIC_ACQUIRE);
    }
    if (MRT_POOL_GEN(w) == seen) {
      pthread_mutex_lock(&p->mu);
      while (MRT_POOL_GEN(w = __atomic_load_n(&p->loop, __ATOMIC_ACQUIRE)) == seen && !p->stop)
        pthread_cond_wait(&p->wake, &p->mu);
      const int stop = p->stop;
      pthread_mutex_unlock(&p->mu);
      if (stop && MRT_POOL_GEN(w) == seen) return NULL;
    }
    seen = MRT_POOL_GEN(w);
    mrt_pool_claim(p, w, self);
  }
}

static void mrt_pool_start(struct mrt_pool *p) {
  p->started = 1;
  p->workers = (pthread_t *)calloc(p->n_threads - 1, sizeof(pthread_t));
  if (!p->workers) return;
  for (size_t w = 0; w + 1 < p->n_threads; ++w) {
    mrt_worker_arg *wa = (mrt_worker_arg *)malloc(sizeof *wa);
    if (!wa) break;
    wa->pool = p;
    wa->index = w + 1;
    if (pthread_create(&p->workers[w], NULL, mrt_pool_worker, wa) != 0) {
      free(wa);
      break; /* fewer workers: the loops still complete, on fewer threads */
    }
    p->n_workers++;
  }
}

struct mrt_pool *mrt_pool_create(size_t n_threads) {
  struct mrt_pool *p = (struct mrt_pool *)calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n_threads = n_threads ? n_threads : 1;
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p);
    return NULL;
  }
  pthread_cond_init(&p->wake, NULL);
  return p;
}

void mrt_pool_destroy(struct mrt_pool *p) {
  if (!p) return;
  if (p->n_workers) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (size_t w = 0; w < p->n_workers; ++w) pthread_join(p->workers[w], NULL);
  }
  free(p->workers);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

size_t mrt_pool_threads(const struct mrt_pool *p) { return p ? p->n_threads : 1; }

void mrt_parallel_for(struct mrt_pool *p, size_t n_tasks, mrt_task_fn fn, void *arg) {
  if (p && n_tasks > 1 && p->n_threads > 1 && !p->started) mrt_pool_start(p);
  if (!p || n_tasks <= 1 || p->n_workers == 0 || n_tasks > MRT_POOL_MASK) {
    for (size_t t = 0; t < n_tasks; ++t) fn(arg, t, 0);
    return;
  }
  p->fn = fn;
  p->arg = arg;
  __atomic_store_n(&p->finished, 0, __ATOMIC_RELAXED);
  const unsigned long long gen =
      (MRT_POOL_GEN(__atomic_load_n(&p->loop, __ATOMIC_RELAXED)) + 1) & ((1u << (64 - 2 * MRT_POOL_BITS)) - 1);
  const unsigned long long w = gen << (2 * MRT_POOL_BITS) | (unsigned long long)n_tasks << MRT_POOL_BITS;
  /* Under the lock, so a worker between its check and its wait sees it. */
  pthread_mutex_lock(&p->mu);
  __atomic_store_n(&p->loop, w, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  /* The caller takes tasks too, then waits only for tasks a worker has begun
   * (a worker the OS has not run yet finds none left and claims nothing):
   * spinning, as a task is a fraction of one operator. */
  mrt_pool_claim(p, w, 0);
  for (unsigned i = 0; __atomic_load_n(&p->finished, __ATOMIC_ACQUIRE) != n_tasks; ++i) mrt_pool_pause(i);
}

/* Up to MRT_POOL_TASKS_PER_THREAD tasks a thread: on a loaded machine a worker
 * the OS parks for a while leaves its share to the threads that run, instead
 * of the whole loop waiting for it. */
#define MRT_POOL_TASKS_PER_THREAD 4

size_t mrt_pool_tasks(const struct mrt_pool *p, size_t work, size_t min_work) {
  const size_t threads = mrt_pool_threads(p);
  if (threads <= 1 || work < 2 * min_work) return 1;
  const size_t tasks = work / min_work, most = threads * MRT_POOL_TASKS_PER_THREAD;
  return tasks < most ? tasks : most;
}

#endif /* MRT_ENABLE_THREADS; without, mrt_kernel.h makes every loop serial */
