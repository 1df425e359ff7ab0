/* alloc.c -- the CPU caching allocator.
 *
 * Why: touching a fresh page costs ~11 us here, so a training step that
 * mallocs its temporaries anew is dominated by page faults. Freed blocks are
 * kept in size-class free lists and handed out again; blocks of 1 MiB and up
 * come from mmap, 2 MiB aligned, with MADV_HUGEPAGE.
 * Size classes: multiples of 64 B up to 512 B, then four per power of two,
 * so at most 25% of a block is slack. */
#define _GNU_SOURCE
#include "device.h"
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

enum { NCLASS = 200, ALIGN = 64 };
#define HUGE_MIN ((int64_t)1 << 20)
#define HUGE_ALIGN ((int64_t)2 << 20)

typedef struct free_block { struct free_block *next; } free_block;

static struct {
  pthread_mutex_t lock;
  free_block *free[NCLASS];
  of_memory_stats stats;
  int64_t cache_limit;
} cpu = {.lock = PTHREAD_MUTEX_INITIALIZER, .cache_limit = -1};

static int floor_log2(uint64_t n) { return 63 - __builtin_clzll(n); }

/* Rounded size and class index of a request of n > 0 bytes. */
static int64_t size_class(int64_t n, int *cls) {
  if (n <= 512) {
    int64_t r = (n + ALIGN - 1) / ALIGN * ALIGN;
    *cls = (int)(r / ALIGN) - 1;
    return r;
  }
  int e = floor_log2((uint64_t)(n - 1));
  int64_t step = (int64_t)1 << (e - 2);
  int64_t q = (n + step - 1) / step;   /* 5..8 */
  *cls = 8 + (e - 9) * 4 + (int)(q - 5);
  return q * step;
}

static int64_t cache_limit(void) {
  if (cpu.cache_limit < 0) {
    const char *s = getenv("OF_CPU_CACHE_LIMIT_MB");
    cpu.cache_limit = (s ? atoll(s) : 4096) << 20;
  }
  return cpu.cache_limit;
}

static void *os_alloc(int64_t size) {
  if (size < HUGE_MIN) {
    void *p = NULL;
    return posix_memalign(&p, ALIGN, (size_t)size) == 0 ? p : NULL;
  }
  size_t len = (size_t)(size + HUGE_ALIGN);
  char *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  char *p = (char *)(((uintptr_t)raw + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
  if (p > raw) munmap(raw, (size_t)(p - raw));
  char *end = p + size, *raw_end = raw + len;
  if (raw_end > end) munmap(end, (size_t)(raw_end - end));
#ifdef MADV_HUGEPAGE
  madvise(p, (size_t)size, MADV_HUGEPAGE);
#endif
  return p;
}

static void os_free(void *p, int64_t size) {
  if (size < HUGE_MIN) free(p);
  else munmap(p, (size_t)size);
}

void *of_alloc(of_device dev, int64_t nbytes) {
  if (dev != OF_CPU) {
    const of_device_ops *o = of_device_ops_for("alloc", dev);
    return o ? o->alloc(dev, nbytes) : NULL;
  }
  if (nbytes < 0) {
    of_fail(OF_ERR_ARG, "alloc: negative size %lld", (long long)nbytes);
    return NULL;
  }
  int cls;
  int64_t size = size_class(nbytes ? nbytes : 1, &cls);
  if (cls >= NCLASS) {
    of_fail(OF_ERR_OOM, "alloc: %lld bytes is beyond any size class", (long long)nbytes);
    return NULL;
  }
  pthread_mutex_lock(&cpu.lock);
  free_block *b = cpu.free[cls];
  if (b) {
    cpu.free[cls] = b->next;
    cpu.stats.cached_bytes -= size;
    cpu.stats.cache_hits++;
  }
  pthread_mutex_unlock(&cpu.lock);
  void *p = b ? (void *)b : os_alloc(size);
  if (!p) {
    of_empty_cache(OF_CPU);
    p = os_alloc(size);
  }
  if (!p) {
    of_fail(OF_ERR_OOM, "alloc: out of memory allocating %lld bytes", (long long)nbytes);
    return NULL;
  }
  pthread_mutex_lock(&cpu.lock);
  of_memory_stats *s = &cpu.stats;
  s->alloc_count++;
  s->current_bytes += size;
  s->bytes_since_sweep += size;
  if (s->current_bytes > s->peak_bytes) s->peak_bytes = s->current_bytes;
  pthread_mutex_unlock(&cpu.lock);
  return p;
}

void of_free(of_device dev, void *p, int64_t nbytes) {
  if (!p) return;
  if (dev != OF_CPU) {
    const of_device_ops *o = of_device_ops_loaded();
    if (o) o->free(dev, p, nbytes);
    return;
  }
  int cls;
  int64_t size = size_class(nbytes ? nbytes : 1, &cls);
  pthread_mutex_lock(&cpu.lock);
  cpu.stats.current_bytes -= size;
  bool keep = cpu.stats.cached_bytes + size <= cache_limit();
  if (keep) {
    free_block *b = p;
    b->next = cpu.free[cls];
    cpu.free[cls] = b;
    cpu.stats.cached_bytes += size;
  }
  pthread_mutex_unlock(&cpu.lock);
  if (!keep) os_free(p, size);
}

void of_empty_cache(of_device dev) {
  if (dev != OF_CPU) {
    const of_device_ops *o = of_device_ops_loaded();
    if (o) o->empty_cache(dev);
    return;
  }
  pthread_mutex_lock(&cpu.lock);
  for (int c = 0; c < NCLASS; c++) {
    free_block *b = cpu.free[c];
    cpu.free[c] = NULL;
    int64_t size = c < 8 ? (int64_t)(c + 1) * ALIGN
                         : ((int64_t)(5 + (c - 8) % 4)) << ((c - 8) / 4 + 9 - 2);
    while (b) {
      free_block *next = b->next;
      os_free(b, size);
      cpu.stats.cached_bytes -= size;
      b = next;
    }
  }
  pthread_mutex_unlock(&cpu.lock);
}

const of_memory_stats *of_memory_stats_get(of_device dev) {
  static const of_memory_stats none;
  if (dev != OF_CPU) {
    const of_device_ops *o = of_device_ops_loaded();
    return o ? o->memory_stats(dev) : &none;
  }
  return &cpu.stats;
}

void of_memory_mark(of_device dev) {
  if (dev != OF_CPU) return;
  pthread_mutex_lock(&cpu.lock);
  cpu.stats.bytes_since_sweep = 0;
  pthread_mutex_unlock(&cpu.lock);
}

void of_memory_reset_peak(of_device dev) {
  if (dev != OF_CPU) {
    const of_device_ops *o = of_device_ops_loaded();
    if (o) o->reset_peak(dev);
    return;
  }
  pthread_mutex_lock(&cpu.lock);
  cpu.stats.peak_bytes = cpu.stats.current_bytes;
  pthread_mutex_unlock(&cpu.lock);
}
