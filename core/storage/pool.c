/* pool.c -- per-thread free lists of tensor, storage and autograd-node
 * headers.
 *
 * Eager code frees headers in bursts (Lua's GC sweeps thousands of dead
 * tensors at once), which overflows glibc's per-thread cache (7 blocks of a
 * size, and none above 1 KiB): every op then paid malloc's and free's slow
 * paths, a quarter of a 1-element add and a third of one that records
 * autograd (perf on bench/dispatch.lua's loop). A thread's list holds at
 * most what that thread freed, up to POOL_CAP blocks, and is freed when the
 * thread exits. A block may be freed on another thread than the one that
 * took it: it joins the freeing thread's list. Under ASan and TSan every
 * block goes to malloc and free, so the sanitizers see each one's life. */
#include "../internal.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define POOL_CAP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define POOL_CAP 0
#endif
#endif
#ifndef POOL_CAP
#define POOL_CAP 16384
#endif

typedef struct {
  void **blk;
  int32_t n, cap;
} pool;

static _Thread_local pool pools[OF_POOL_KINDS];
static _Thread_local bool registered;
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void drain_at_exit(void *unused) {
  (void)unused;
  for (int k = 0; k < OF_POOL_KINDS; k++) {
    for (int32_t i = 0; i < pools[k].n; i++) free(pools[k].blk[i]);
    free(pools[k].blk);
    pools[k] = (pool){0};
  }
}

static void make_exit_key(void) { pthread_key_create(&exit_key, drain_at_exit); }

void *of_pool_get(int kind, size_t size) {
  pool *p = &pools[kind];
  if (p->n > 0) return p->blk[--p->n];
  return malloc(size);
}

void of_pool_put(int kind, void *block) {
  if (!block) return;
  pool *p = &pools[kind];
  if (POOL_CAP > 0 && p->n == p->cap && p->cap < POOL_CAP) {
    if (!registered) {   /* the thread's exit frees its lists */
      pthread_once(&exit_once, make_exit_key);
      pthread_setspecific(exit_key, pools);   /* any non-NULL value */
      registered = true;
    }
    int32_t cap = p->cap ? p->cap * 2 : 256;
    void **blk = realloc(p->blk, sizeof *blk * (size_t)cap);
    if (blk) {
      p->blk = blk;
      p->cap = cap;
    }
  }
  if (p->n < p->cap) p->blk[p->n++] = block;
  else free(block);
}
