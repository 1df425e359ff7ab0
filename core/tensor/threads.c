/* threads.c -- one knob for OpenMP loops and the gemms split over them.
 *
 * OpenBLAS is kept at one thread: every caller splits its gemms over our
 * OpenMP threads (conv.c, matmul.c). Its own pthread pool, which spins
 * (with sched_yield) after each threaded call, competed for the cores with
 * OpenMP's threads: a LeNet step that ran a threaded Linear took 2-3x
 * longer on 2 cores. */
#include "../internal.h"
#include <omp.h>
#include <pthread.h>

void openblas_set_num_threads(int n);

/* The thread count is read by every parallel op on every host thread:
 * atomic loads and stores, no lock (0: not set yet, use OpenMP's default). */
static int32_t num_threads = 0;
/* This process is a fork() of one that loaded the library (a DataLoader
 * worker, or any other fork). GNU OpenMP keeps its thread pool's state
 * across fork() but not the threads: a forked child that starts a parallel
 * team of two or more waits forever for threads that do not exist. So a
 * forked child runs single-threaded and may not ask for more. */
static int32_t forked = 0;
/* OpenMP's own thread count is set to 1 in the child too (for oneDNN and
 * the regions without a num_threads clause), but not from the fork handler
 * itself: LLVM's libomp (a clang build) registers its fork handlers when
 * its runtime starts, after ours, so in the child ours runs first, while
 * libomp's prepare handler still holds its locks -- an OpenMP call there
 * deadlocked. The child's first parallel op makes the call instead
 * (of_threads, after every fork handler has run). */
static int32_t omp_single_pending = 0;

static void after_fork_child(void) {
  __atomic_store_n(&forked, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&num_threads, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&omp_single_pending, 1, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void blas_single(void) {
  openblas_set_num_threads(1);
  pthread_atfork(NULL, NULL, after_fork_child);
}

/* More threads than this is a mistake, not a setting: OpenMP would try to
 * start them all (1e6 threads exhausts memory and the process limit). */
enum { OF_MAX_THREADS = 1024 };

of_status of_set_num_threads(int32_t n) {
  if (n < 1 || n > OF_MAX_THREADS)
    return of_fail(OF_ERR_ARG, "set_num_threads: the number of threads must be within 1..%d, "
                   "got %d", (int)OF_MAX_THREADS, (int)n);
  if (n > 1 && __atomic_load_n(&forked, __ATOMIC_RELAXED))
    return of_fail(OF_ERR_STATE, "set_num_threads(%d): this process is a fork() of one that "
                   "uses OpenMP (a DataLoader worker?) and runs single-threaded: GNU OpenMP hangs "
                   "when a forked process starts a parallel team", (int)n);
  __atomic_store_n(&num_threads, n, __ATOMIC_RELAXED);
  omp_set_num_threads(n);
  return OF_OK;
}

int32_t of_in_forked_child(void) { return __atomic_load_n(&forked, __ATOMIC_RELAXED); }

int32_t of_get_num_threads(void) { return of_threads(); }

int32_t of_threads(void) {
  if (__builtin_expect(__atomic_load_n(&omp_single_pending, __ATOMIC_RELAXED), 0) &&
      __atomic_exchange_n(&omp_single_pending, 0, __ATOMIC_RELAXED))
    omp_set_num_threads(1);
  int32_t n = __atomic_load_n(&num_threads, __ATOMIC_RELAXED);
  if (n == 0) {
    int32_t want = omp_get_max_threads(), zero = 0;
    if (!__atomic_compare_exchange_n(&num_threads, &zero, want, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
      want = zero;   /* another thread set it first */
    n = want;
  }
  return n;
}
