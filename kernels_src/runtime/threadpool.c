/*
 * The session's thread pool (mrt_kernel.h: mrt_parallel_for). One pool per
 * session, sized by mrt_session_options.intra_op_num_threads; the calling
 * thread is thread 0 and takes tasks too, so N threads means N - 1 workers.
 * Workers start at the first parallel loop (a session that is never run, or
 * runs only small ops, starts none) and are joined by mrt_pool_destroy.
 *
 * Tasks are claimed from a shared counter, so a worker the OS delays does not
 * hold up the others. Between loops a worker spins briefly (consecutive
 * layers follow within microseconds), then sleeps on a condition variable:
 * an idle session burns no core.
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

#define MRT_POOL_SPIN 4000 /* pause iterations before sleeping (~50-100 us) */

struct mrt_pool {
  size_t n_threads;        /* requested, caller included */
  size_t n_workers;        /* started so far (n_threads - 1, or fewer if creation failed) */
  int started;
  pthread_t *workers;
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  /* The current loop: written by the caller before `generation` is bumped. */
  mrt_task_fn fn;
  void *arg;
  size_t n_tasks;
  size_t next;             /* atomic: next task to claim */
  size_t active;           /* atomic: workers not yet finished with this loop */
  unsigned generation;     /* atomic: one per loop */
  int stop;                /* under mu */
};

typedef struct mrt_worker_arg {
  struct mrt_pool *pool;
  size_t index;
} mrt_worker_arg;

static inline void mrt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ volatile("yield");
#endif
}

static void mrt_pool_claim(struct mrt_pool *p, size_t thread) {
  const size_t n = p->n_tasks;
  for (;;) {
    const size_t t = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
    if (t >= n) break;
    p->fn(p->arg, t, thread);
  }
}

static void *mrt_pool_worker(void *varg) {
  mrt_worker_arg *wa = (mrt_worker_arg *)varg;
  struct mrt_pool *p = wa->pool;
  const size_t self = wa->index;
  free(wa);
  unsigned seen = 0;
  for (;;) {
    unsigned gen = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);
    for (int i = 0; gen == seen && i < MRT_POOL_SPIN; ++i) {
      mrt_cpu_relax();
      gen = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);
    }
    if (gen == seen) {
      pthread_mutex_lock(&p->mu);
      while ((gen = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE)) == seen && !p->stop)
        pthread_cond_wait(&p->wake, &p->mu);
      const int stop = p->stop;
      pthread_mutex_unlock(&p->mu);
      if (stop && gen == seen) return NULL;
    }
    seen = gen;
    mrt_pool_claim(p, self);
    if (__atomic_fetch_sub(&p->active, 1, __ATOMIC_ACQ_REL) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
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
  pthread_cond_init(&p->done, NULL);
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
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

size_t mrt_pool_threads(const struct mrt_pool *p) { return p ? p->n_threads : 1; }

void mrt_parallel_for(struct mrt_pool *p, size_t n_tasks, mrt_task_fn fn, void *arg) {
  if (p && n_tasks > 1 && p->n_threads > 1 && !p->started) mrt_pool_start(p);
  if (!p || n_tasks <= 1 || p->n_workers == 0) {
    for (size_t t = 0; t < n_tasks; ++t) fn(arg, t, 0);
    return;
  }
  p->fn = fn;
  p->arg = arg;
  p->n_tasks = n_tasks;
  __atomic_store_n(&p->next, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&p->active, p->n_workers, __ATOMIC_RELAXED);
  /* Under the lock, so a worker between its check and its wait sees it. */
  pthread_mutex_lock(&p->mu);
  __atomic_fetch_add(&p->generation, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  mrt_pool_claim(p, 0);
  for (int i = 0; i < MRT_POOL_SPIN && __atomic_load_n(&p->active, __ATOMIC_ACQUIRE); ++i) mrt_cpu_relax();
  if (__atomic_load_n(&p->active, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&p->mu);
    while (__atomic_load_n(&p->active, __ATOMIC_ACQUIRE)) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
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
