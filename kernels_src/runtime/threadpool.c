/*
 * The session's thread pool (mrt_kernel.h: mrt_parallel_for). One pool per
 * session, sized by mrt_session_options.intra_op_num_threads; the calling
 * thread is thread 0 and takes tasks too, so N threads means N - 1 workers.
 * Workers start at the first parallel loop (a session that is never run, or
 * runs only small ops, starts none) and are joined by mrt_pool_destroy.
 *
 * A loop's tasks are dealt to the threads in contiguous runs (thread t owns
 * the t-th run), so consecutive layers that split the same data the same way
 * give each thread the part of its input it wrote itself, still in its own
 * core's cache: on planes of 14 x 14 and smaller, reading what the other core
 * wrote had cost as much as the arithmetic. A thread takes its own run from
 * the front, then steals from the back of the others' runs, so a worker the
 * OS delays does not hold up the others, and the caller waits only for tasks
 * a worker has begun: a worker the OS has not run yet (it shares the caller's
 * core, or other work holds the others) finds its run taken and claims
 * nothing, instead of the caller spinning until it comes. Between loops a
 * worker spins briefly (consecutive layers follow within microseconds),
 * yielding now and then so a thread queued on its core gets it, then sleeps
 * on a condition variable: an idle session burns no core.
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

/* A thread's run of the current loop in one word, so that a claim checks the
 * loop and takes its task in one compare-and-swap: generation (24 bits) | end
 * (20) | next (20). The owner takes `next` (next + 1), a thief `end - 1` (end
 * - 1): on one word, so a task is taken once. Each word has its cache line. */
#define MRT_POOL_BITS 20
#define MRT_POOL_MASK ((1u << MRT_POOL_BITS) - 1)
#define MRT_POOL_GEN(w) ((unsigned)((w) >> (2 * MRT_POOL_BITS)))
#define MRT_POOL_LINE 8 /* words a slot: 64 bytes */

/* 8-aligned: i386 would align it at 4 bytes, and its atomics would become
 * library calls. */
typedef unsigned long long mrt_pool_word __attribute__((aligned(8)));

struct mrt_pool {
  size_t n_threads;        /* requested, caller included */
  size_t n_workers;        /* started so far (n_threads - 1, or fewer if creation failed) */
  int started;
  unsigned gen;            /* the caller's: the last loop's generation */
  pthread_t *workers;
  pthread_mutex_t mu;
  pthread_cond_t wake;
  /* The current loop's function: written by the caller before the slots publish it. */
  mrt_task_fn fn;
  void *arg;
  mrt_pool_word *slots;    /* n_threads slots, a cache line each, 64-aligned after the pool */
  size_t finished;         /* atomic: tasks of the current loop the workers have done */
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

/* Runs tasks of loop `gen` until none is left: thread `self`'s own run from
 * the front, then the others' from the back. Returns how many it ran. A
 * thread that comes late (the loop is over, the next one may be starting)
 * claims nothing: its compare-and-swap sees another generation. fn and arg
 * are read after a claim succeeds, when the caller cannot start another loop
 * before this task is counted finished. */
static size_t mrt_pool_run(struct mrt_pool *p, unsigned gen, size_t self) {
  const size_t threads = p->n_workers + 1;
  size_t done = 0;
  for (size_t k = 0; k < threads; ++k) {
    const size_t v = self + k < threads ? self + k : self + k - threads;
    mrt_pool_word *slot = p->slots + v * MRT_POOL_LINE;
    unsigned long long w = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    for (;;) {
      const size_t end = (size_t)(w >> MRT_POOL_BITS) & MRT_POOL_MASK, next = (size_t)w & MRT_POOL_MASK;
      if (MRT_POOL_GEN(w) != gen || next >= end) break;
      const unsigned long long take = k ? w - (1ull << MRT_POOL_BITS) : w + 1;
      if (!__atomic_compare_exchange_n(slot, &w, take, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) continue;
      p->fn(p->arg, k ? end - 1 : next, self);
      ++done;
      w = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    }
  }
  return done;
}

static void *mrt_pool_worker(void *varg) {
  mrt_worker_arg *wa = (mrt_worker_arg *)varg;
  struct mrt_pool *p = wa->pool;
  const size_t self = wa->index;
  free(wa);
  mrt_pool_word *slot = p->slots + self * MRT_POOL_LINE;
  unsigned seen = 0;
  for (;;) {
    unsigned long long w = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; MRT_POOL_GEN(w) == seen && i < MRT_POOL_SPIN; ++i) {
      mrt_pool_pause(i);
      w = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    }
    if (MRT_POOL_GEN(w) == seen) {
      pthread_mutex_lock(&p->mu);
      while (MRT_POOL_GEN(w = __atomic_load_n(slot, __ATOMIC_ACQUIRE)) == seen && !p->stop)
        pthread_cond_wait(&p->wake, &p->mu);
      const int stop = p->stop;
      pthread_mutex_unlock(&p->mu);
      if (stop && MRT_POOL_GEN(w) == seen) return NULL;
    }
    seen = MRT_POOL_GEN(w);
    const size_t done = mrt_pool_run(p, seen, self);
    if (done) __atomic_fetch_add(&p->finished, done, __ATOMIC_RELEASE);
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
  n_threads = n_threads ? n_threads : 1;
  struct mrt_pool *p = (struct mrt_pool *)calloc(1, sizeof *p + (n_threads + 1) * 64);
  if (!p) return NULL;
  p->n_threads = n_threads;
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p);
    return NULL;
  }
  p->slots = (mrt_pool_word *)(((uintptr_t)(p + 1) + 63) & ~(uintptr_t)63);
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
  const unsigned gen = p->gen = (p->gen + 1) & ((1u << (64 - 2 * MRT_POOL_BITS)) - 1);
  /* Thread t's run is [ceil(t n / T), ceil((t + 1) n / T)): the caller, who
   * starts first, gets the longer runs. Under the lock, so a worker between
   * its check and its wait sees it. */
  const size_t threads = p->n_workers + 1;
  pthread_mutex_lock(&p->mu);
  for (size_t t = threads; t-- > 0;) {
    const unsigned long long b = (t * n_tasks + threads - 1) / threads, e = ((t + 1) * n_tasks + threads - 1) / threads;
    __atomic_store_n(p->slots + t * MRT_POOL_LINE,
                     (unsigned long long)gen << (2 * MRT_POOL_BITS) | e << MRT_POOL_BITS | b, __ATOMIC_RELEASE);
  }
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  /* The caller takes tasks too, then waits only for tasks a worker has begun
   * (a worker the OS has not run yet finds none left and claims nothing):
   * spinning, as a task is a fraction of one operator. */
  const size_t rest = n_tasks - mrt_pool_run(p, gen, 0);
  for (unsigned i = 0; __atomic_load_n(&p->finished, __ATOMIC_ACQUIRE) != rest; ++i) mrt_pool_pause(i);
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
