/* alloc.c -- the CPU caching allocator.
 *
 * Why: touching a fresh page costs ~11 us here, so a training step that
 * mallocs its temporaries anew is dominated by page faults. Freed blocks are
 * kept and handed out again. Blocks under 64 KiB are kept in size-class free
 * lists (multiples of 64 B up to 512 B, then four classes per power of two:
 * at most 25% slack); blocks of 64 KiB and up are ranges of mmap'ed segments
 * (below), sized to a multiple of 64 KiB, so their slack is under 64 KiB
 * rather than a quarter. */
#define _GNU_SOURCE
#include "../device.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Under ASan a large block's slack and the free ranges of a segment are
 * poisoned, so that a kernel writing past its block is caught there as it
 * is past a malloc'ed one (blocks from 64 KiB share segments since
 * 2026-12-06; before, those under 1 MiB came from malloc, with its redzones). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (size_t)(n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (size_t)(n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* The device backends (core/device) install these when the library loads:
 * device memory and cross-device copies live in the backends, a layer up. */
static const of_device_hooks *device_hooks;
const char *of_device_last_op = "";   /* the op last routed to a device (device.h) */
void of_device_install(const of_device_hooks *h) { device_hooks = h; }
const of_device_ops *of_device_ops_for(const char *op, of_device dev) {
  return device_hooks->ops_for(op, dev);
}
of_status of_copy_across(of_tensor *dst, of_tensor *src) {
  return device_hooks->copy_across(dst, src, 0);
}
of_status of_copy_across_async(of_tensor *dst, of_tensor *src, int32_t non_blocking) {
  return device_hooks->copy_across(dst, src, non_blocking);
}

enum { NCLASS = 200, ALIGN = 64 };
/* blocks of LARGE_MIN bytes and more are ranges of segments, in multiples
 * of LARGE_QUANTUM; segments of HUGE_ALIGN and more are mapped 2 MiB
 * aligned with MADV_HUGEPAGE */
#define LARGE_MIN ((int64_t)64 << 10)
#define LARGE_QUANTUM ((int64_t)64 << 10)
#define HUGE_ALIGN ((int64_t)2 << 20)

/* a cached small block (under LARGE_MIN) holds its list's link */
typedef struct free_block {
  struct free_block *next;
} free_block;

static struct {
  pthread_mutex_t lock;
  free_block *free[NCLASS];
  of_memory_stats stats;
  int64_t cache_limit;
  /* the most bytes ever in use (never reset; peak_bytes is the user's) */
  int64_t high_water;
  /* bytes handed out since the library loaded: the clock of stale blocks */
  int64_t total_bytes;
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

/* The bytes a request of n > 0 bytes takes: its size class's, or for a
 * large block (a range of a segment: the class size reaches LARGE_MIN) n
 * rounded up to LARGE_QUANTUM. *cls: the class (NCLASS or more: beyond
 * any, and nothing is rounded). */
static int64_t block_size(int64_t n, int *cls, bool *large) {
  int64_t s = size_class(n, cls);
  *large = s >= LARGE_MIN;
  if (*large && *cls < NCLASS) s = (n + LARGE_QUANTUM - 1) / LARGE_QUANTUM * LARGE_QUANTUM;
  return s;
}

static int64_t cache_limit(void) {
  if (cpu.cache_limit < 0) {
    const char *s = getenv("OF_CPU_CACHE_LIMIT_MB");
    cpu.cache_limit = (s ? atoll(s) : 4096) << 20;
  }
  return cpu.cache_limit;
}

static void *os_alloc(int64_t size) {
  if (size < LARGE_MIN) {
    void *p = NULL;
    return posix_memalign(&p, ALIGN, (size_t)size) == 0 ? p : NULL;
  }
  if (size < HUGE_ALIGN) {   /* a segment too small for a huge page */
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
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

/* Bounded allocations. Linux overcommits: mmap of more than the machine has
 * can succeed, and the process is then killed when the pages are touched
 * (flow.zeros(2^40) would fill 4 TiB). So a large request is refused up front
 * when it exceeds what the OS could still give: MemAvailable + SwapFree from
 * /proc/meminfo (sysconf's available pages when /proc is missing), plus what
 * this allocator holds in its cache (freed first). Requests under
 * BOUND_MIN skip the check: reading /proc costs ~20 us, and small blocks
 * cannot be the mistake this guards against. */
enum { BOUND_MIN = 64 << 20 };

/* Bytes the OS could still give this process; -1 when unknown. */
static int64_t os_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[128];
    long long avail = -1, swap = 0, v;
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "MemAvailable: %lld kB", &v) == 1) avail = v;
      else if (sscanf(line, "SwapFree: %lld kB", &v) == 1) swap = v;
    }
    fclose(f);
    if (avail >= 0) return (int64_t)(avail + swap) * 1024;
  }
  long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  return pages > 0 && psz > 0 ? (int64_t)pages * psz : -1;
}

static bool within_memory(int64_t size, int64_t cached) {
  if (size < BOUND_MIN) return true;
  int64_t avail = os_available();
  if (avail < 0 || size <= avail + cached) return true;
  of_fail(OF_ERR_OOM, "out of memory: %lld bytes (%.2f GiB) requested on the CPU, but only "
          "%lld bytes (%.2f GiB) are available (MemAvailable + SwapFree, plus %lld bytes cached)",
          (long long)size, (double)size / (1 << 30), (long long)(avail + cached),
          (double)(avail + cached) / (1 << 30), (long long)cached);
  return false;
}

static void os_free(void *p, int64_t size) {
  if (size < LARGE_MIN) {
    free(p);
  } else {
    UNPOISON(p, size);   /* the addresses may be mapped again by anyone */
    munmap(p, (size_t)size);
  }
}

typedef struct of_arena of_arena;
static _Thread_local of_arena *cur_arena;
static void *arena_alloc(of_arena *a, int64_t nbytes);
static void arena_record(of_arena *a, void *p, int64_t nbytes);
static void arena_record_free(of_arena *a, void *p);
static bool arena_free_locked(void *p);
static int narenas;   /* graph arenas alive; read without the lock first */
static bool arena_recording(const of_arena *a);

/* The statistics of a block of `size` bytes handed out; cpu.lock held. */
static void account_alloc_locked(int64_t size) {
  of_memory_stats *s = &cpu.stats;
  s->alloc_count++;
  s->current_bytes += size;
  s->bytes_since_sweep += size;
  if (s->current_bytes > s->peak_bytes) s->peak_bytes = s->current_bytes;
  if (s->current_bytes > cpu.high_water) cpu.high_water = s->current_bytes;
  cpu.total_bytes += size;
}

/* The bytes of a block of class cls (size_class's inverse). */
static int64_t class_size(int cls) {
  return cls < 8 ? (int64_t)(cls + 1) * ALIGN
                 : ((int64_t)(5 + (cls - 8) % 4)) << ((cls - 8) / 4 + 9 - 2);
}

/* ---- large blocks: segments, split on demand and merged when freed ----
 * A block of 64 KiB or more is a range of a segment (one mmap). A request
 * takes the smallest free range that holds it (of equal ones, the most
 * recently handed out: its lines are the likeliest still in the caches,
 * as a collection frees a burst of blocks at once) and splits off the
 * rest, which stays free; a freed range merges with free neighbours. So
 * what a garbage collection frees at once -- blocks of many sizes, side by
 * side -- becomes ranges that serve whatever the next calls ask for.
 * Before (until 2026-12-06) each size class kept its own list and a miss
 * split a larger class's block for good: a MobileNetV2 forward at batch 8
 * cut its 40 MiB blocks into the next layers' sizes, the pieces went back
 * to the system as stale, and each forward mapped 128 MiB anew (134 faults
 * of 2 MiB pages a forward, now 5; doc/tensor.md "Memory").
 * Whole free segments go back to the system (least recently freed first)
 * while in use + cached passes twice the high-water mark, or the cache
 * passes OF_CPU_CACHE_LIMIT_MB; past the mark itself, segments free for
 * several high-water marks' worth of allocations (stale) go first: a model's
 * loading buffers do not hold the room for good (a MiniLM load left 92 MiB
 * cached, and each encode mapped 66 fresh blocks). Segments are exact
 * multiples of 64 KiB, so every split is page aligned. Until 2026-12-06
 * the threshold was 1 MiB and large blocks were rounded to the size classes:
 * a ResNet-50 forward at batch 1 then held 14.9 MiB cached for a peak of
 * 5.3 MiB in use -- its 0.2-0.9 MiB blocks sat in per-class lists that no
 * other size could use, and a 3.06 MB activation took a 3.5 MiB block. With
 * ranges from 64 KiB on and 64 KiB rounding the same forward holds 9.8 MiB
 * (a replay of its allocations; MobileNetV2 at batch 8: 85.6 -> 72.4 MiB, a
 * ResNet-18 training step 1004 -> 888 MiB). The descriptors live outside
 * the blocks; those in use are found by address in a hash table. cpu.lock
 * guards all of it. */
typedef struct lblk {
  char *ptr;
  int64_t size;
  int64_t stamp;              /* free: cpu.total_bytes when freed */
  int64_t born;               /* cpu.total_bytes when last handed out (merged: the latest) */
  struct lblk *prev, *next;   /* neighbours in the segment, by address */
  struct lblk *fprev, *fnext; /* the free ranges */
  struct lblk *hnext;         /* in use: the hash chain */
  bool free;
} lblk;

enum { LG_BUCKETS = 1024 };
static struct {
  lblk *free;                 /* free ranges, any order */
  lblk *used[LG_BUCKETS];
} lg;

static unsigned lg_hash(const void *p) {
  return (unsigned)((((uintptr_t)p >> 18) * 0x9E3779B97F4A7C15ull) >> 54) & (LG_BUCKETS - 1);
}

static void lg_push_free(lblk *b) {
  b->free = true;
  b->fprev = NULL;
  b->fnext = lg.free;
  if (lg.free) lg.free->fprev = b;
  lg.free = b;
}

static void lg_unlink_free(lblk *b) {
  if (b->fprev) b->fprev->fnext = b->fnext;
  else lg.free = b->fnext;
  if (b->fnext) b->fnext->fprev = b->fprev;
  b->free = false;
}

static void lg_put_used(lblk *b) {
  unsigned h = lg_hash(b->ptr);
  b->hnext = lg.used[h];
  lg.used[h] = b;
}

static lblk *lg_take_used(const void *p) {
  for (lblk **pp = &lg.used[lg_hash(p)]; *pp; pp = &(*pp)->hnext)
    if ((*pp)->ptr == p) {
      lblk *b = *pp;
      *pp = b->hnext;
      return b;
    }
  return NULL;
}

/* The smallest free range of at least size bytes, its head handed out;
 * NULL when none holds it. `spare` is a descriptor for the rest (the
 * caller's, so no malloc under the lock fails halfway); *used_spare says
 * whether it was taken. */
static lblk *lg_take_locked(int64_t size, lblk *spare, bool *used_spare) {
  lblk *best = NULL;
  for (lblk *b = lg.free; b; b = b->fnext)
    if (b->size >= size && (!best || b->size < best->size ||
                            (b->size == best->size && b->born > best->born)))
      best = b;
  *used_spare = false;
  if (!best) return NULL;
  lg_unlink_free(best);
  cpu.stats.cached_bytes -= best->size;
  if (best->size > size && spare) {   /* the rest stays free, after the head */
    lblk *t = spare;
    *used_spare = true;
    t->ptr = best->ptr + size;
    t->size = best->size - size;
    t->stamp = best->stamp;
    t->born = best->born;
    t->prev = best;
    t->next = best->next;
    if (best->next) best->next->prev = t;
    best->next = t;
    best->size = size;
    lg_push_free(t);
    cpu.stats.cached_bytes += t->size;
  }
  best->born = cpu.total_bytes;
  lg_put_used(best);
  return best;
}

/* Marks b free and merges it with free neighbours; returns the range.
 * Descriptors merged away are linked through hnext onto *dead. */
static lblk *lg_release_locked(lblk *b, lblk **dead) {
  cpu.stats.cached_bytes += b->size;
  b->stamp = cpu.total_bytes;
  lblk *n = b->next;
  if (n && n->free) {   /* b absorbs its free successor */
    lg_unlink_free(n);
    b->size += n->size;
    if (n->born > b->born) b->born = n->born;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    n->hnext = *dead;
    *dead = n;
  }
  lblk *p = b->prev;
  if (p && p->free) {   /* its free predecessor absorbs b */
    lg_unlink_free(p);
    p->size += b->size;
    if (b->born > p->born) p->born = b->born;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    p->stamp = b->stamp;
    b->hnext = *dead;
    *dead = b;
    b = p;
  }
  lg_push_free(b);
  return b;
}

/* Unlinks whole free segments, least recently freed first, while
 * lg_over(pass): the stale pass takes only those free for STALE_MARKS
 * high-water marks' worth of allocations (all: every whole free segment).
 * Returns them through hnext. One mark was too short: a MobileNetV2
 * forward at batch 8 allocates 2.4 marks, so its first layer's 40 MiB
 * segment went back to the system in every forward and was faulted in
 * again by the next (sys time 0.49 -> 0.11 s over 13 forwards with 4). */
enum { TRIM_STALE, TRIM_ANY, STALE_MARKS = 4 };
static bool lg_over(int pass) {
  int64_t held = cpu.stats.current_bytes + cpu.stats.cached_bytes;
  if (pass == TRIM_STALE) return held > cpu.high_water;
  return held > 2 * cpu.high_water || cpu.stats.cached_bytes > cache_limit();
}

static lblk *lg_trim_locked(lblk *out, bool all) {
  for (int pass = TRIM_STALE; pass <= TRIM_ANY; pass++)
    while (all || lg_over(pass)) {
      lblk *old = NULL;
      for (lblk *b = lg.free; b; b = b->fnext)
        if (!b->prev && !b->next && (!old || b->stamp < old->stamp) &&
            (all || pass == TRIM_ANY || cpu.total_bytes - b->stamp > STALE_MARKS * cpu.high_water))
          old = b;
      if (!old) break;
      lg_unlink_free(old);
      cpu.stats.cached_bytes -= old->size;
      old->hnext = out;
      out = old;
    }
  return out;
}

/* Outside the lock: frees the descriptors of a list from lg_trim_locked
 * (unmap: and their segments) or lg_release_locked (descriptors only). */
static void lg_dispose(lblk *list, bool unmap) {
  while (list) {
    lblk *next = list->hnext;
    if (unmap) os_free(list->ptr, list->size);
    free(list);
    list = next;
  }
}

/* ---- a miss gathers the free ranges' pages into the new segment ----
 * When no free range holds a request, the ranges that are free are the
 * wrong sizes or in the wrong places, and a fresh segment made the held
 * memory (in use + cached) grow past what is in use: a ResNet-18 training
 * step at batch 32 (112x112) held 375 MiB for a peak of 310 MiB in use,
 * its backward asking for a 24.5 MiB gradient while 134 MiB sat free in
 * pieces of at most 15 MiB (its peak RSS: 1.10x PyTorch 1.13's). So a miss
 * takes free ranges, largest first, until they cover the request, and
 * moves their pages into the new segment with mremap: the page tables
 * move, nothing is copied, zeroed or faulted in, and the ranges' old
 * addresses are unmapped (that step's held bytes: 375 -> 335 MiB). Only
 * where the cache holds at least GATHER_SLACK times the request: with less,
 * a fresh segment adds room that the next rounds fit in, where gathering
 * on every miss kept reshuffling the ranges (a LeNet training step at
 * batch 64 then missed and gathered twice a step in steady state, with 1.4
 * and 1.6 times the request cached; with the rule, once, about 0.3 ms of a
 * 30 ms step). ResNet-18's 24.5 MiB gradient had 5.5 times. A piece that
 * cannot be moved is unmapped, and that part of the segment faults in
 * fresh, as it would without the gather; so is every piece when the new
 * segment cannot be mapped. GATHER_MAX bounds the syscalls (and the
 * mappings) of one miss. */
enum { GATHER_MAX = 32, GATHER_SLACK = 2 };
typedef struct {
  char *ptr;
  int64_t len;
} lg_piece;

/* Detaches free ranges, largest first, up to `size` bytes (the last one's
 * head only) into out[]; returns how many. Ranges taken whole are linked
 * through hnext onto *dead for their descriptors to be freed. */
static int lg_gather_locked(int64_t size, lg_piece *out, lblk **dead) {
  int n = 0;
  for (int64_t got = 0; got < size && n < GATHER_MAX; n++) {
    lblk *big = NULL;
    for (lblk *b = lg.free; b; b = b->fnext)
      if (!big || b->size > big->size) big = b;
    if (!big) break;
    int64_t take = big->size < size - got ? big->size : size - got;
    lg_unlink_free(big);
    cpu.stats.cached_bytes -= take;
    out[n] = (lg_piece){big->ptr, take};
    got += take;
    if (big->prev) big->prev->next = NULL;   /* the piece's addresses leave the segment */
    if (take == big->size) {
      if (big->next) big->next->prev = NULL;
      big->hnext = *dead;
      *dead = big;
    } else {   /* the rest stays free: the start of a segment now */
      big->ptr += take;
      big->size -= take;
      big->prev = NULL;
      lg_push_free(big);
    }
  }
  return n;
}

/* Moves len bytes of pages from src to dst, or unmaps them. A range that
 * spans mappings (mremap: EFAULT) moves in halves: the mappings of a
 * segment meet at multiples of LARGE_QUANTUM from its start, as every
 * range and piece does, so halves cut at such multiples get there. */
static void lg_move(char *src, int64_t len, char *dst) {
  if (mremap(src, (size_t)len, (size_t)len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) != MAP_FAILED) return;
  if (errno != EFAULT || len < 2 * LARGE_QUANTUM) {
    os_free(src, len);
    return;
  }
  int64_t half = len / 2 / LARGE_QUANTUM * LARGE_QUANTUM;
  lg_move(src, half, dst);
  lg_move(src + half, len - half, dst + half);
}

/* Outside the lock: moves the pieces into dst, in order (unmaps them where
 * dst is NULL). */
static void lg_move_pieces(char *dst, const lg_piece *pc, int n) {
  int64_t off = 0;
  for (int i = 0; i < n; off += pc[i].len, i++) {
    if (!dst) {
      os_free(pc[i].ptr, pc[i].len);   /* pieces are LARGE_QUANTUM multiples: unmapped */
      continue;
    }
    UNPOISON(pc[i].ptr, pc[i].len);   /* the old addresses may be mapped again by anyone */
    lg_move(pc[i].ptr, pc[i].len, dst + off);
  }
}

static void *lg_alloc(int64_t nbytes, int64_t size) {
  lblk *spare = malloc(sizeof *spare);
  bool used_spare = false;
  pthread_mutex_lock(&cpu.lock);
  lblk *b = lg_take_locked(size, spare, &used_spare);
  if (b) {   /* b->size: all of the range when no spare descriptor split it */
    cpu.stats.cache_hits++;
    account_alloc_locked(b->size);
  }
  const int64_t cached = cpu.stats.cached_bytes;
  pthread_mutex_unlock(&cpu.lock);
  if (b) {
    if (!used_spare) free(spare);
    UNPOISON(b->ptr, nbytes);
    POISON(b->ptr + nbytes, b->size - nbytes);
    return b->ptr;
  }
  if (!spare) {
    of_fail(OF_ERR_OOM, "alloc: out of memory allocating %lld bytes", (long long)nbytes);
    return NULL;
  }
  /* refused before any cached range is taken: the cache stays as it was */
  if (!within_memory(size, cached)) {
    free(spare);
    return NULL;
  }
  lg_piece pieces[GATHER_MAX];
  lblk *dead = NULL;
  int npieces = 0;
  pthread_mutex_lock(&cpu.lock);
  if (cpu.stats.cached_bytes >= GATHER_SLACK * size) npieces = lg_gather_locked(size, pieces, &dead);
  pthread_mutex_unlock(&cpu.lock);
  lg_dispose(dead, false);
  void *p = os_alloc(size);
  if (!p) {   /* the gathered pages go back to the system first, then the cache */
    lg_move_pieces(NULL, pieces, npieces);
    npieces = 0;
    of_empty_cache(OF_CPU);
    p = os_alloc(size);
  }
  lg_move_pieces(p, pieces, npieces);
  if (!p) {
    free(spare);
    of_fail(OF_ERR_OOM, "alloc: out of memory allocating %lld bytes", (long long)nbytes);
    return NULL;
  }
  *spare = (lblk){.ptr = p, .size = size};
  pthread_mutex_lock(&cpu.lock);
  spare->born = cpu.total_bytes;
  lg_put_used(spare);
  account_alloc_locked(size);
  pthread_mutex_unlock(&cpu.lock);
  POISON((char *)p + nbytes, size - nbytes);
  return p;
}

/* cpu.lock held; returns what the caller disposes of outside the lock */
static void lg_free_locked(void *p, lblk **dead, lblk **unmap) {
  lblk *b = lg_take_used(p);
  if (!b) return;   /* not a block of ours: nothing to give back */
  POISON(b->ptr, b->size);
  cpu.stats.current_bytes -= b->size;
  lg_release_locked(b, dead);
  *unmap = lg_trim_locked(NULL, false);
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
  of_arena *ar = cur_arena;
  if (ar) {
    void *q = arena_alloc(ar, nbytes);
    if (q) return q;
  }
  int cls;
  bool large;
  int64_t size = block_size(nbytes ? nbytes : 1, &cls, &large);
  if (cls >= NCLASS) {
    of_fail(OF_ERR_OOM, "alloc: %lld bytes is beyond any size class", (long long)nbytes);
    return NULL;
  }
  if (large) {
    void *q = lg_alloc(nbytes, size);
    if (q && ar && arena_recording(ar)) arena_record(ar, q, nbytes);
    return q;
  }
  pthread_mutex_lock(&cpu.lock);
  free_block *b = cpu.free[cls];
  if (b) {   /* a cache hit: one critical section (small ops allocate per call) */
    cpu.free[cls] = b->next;
    cpu.stats.cached_bytes -= size;
    cpu.stats.cache_hits++;
    account_alloc_locked(size);
    pthread_mutex_unlock(&cpu.lock);
    if (ar && arena_recording(ar)) arena_record(ar, b, nbytes);
    return b;
  }
  pthread_mutex_unlock(&cpu.lock);
  void *p = os_alloc(size);
  if (!p) {
    of_empty_cache(OF_CPU);
    p = os_alloc(size);
  }
  if (!p) {
    of_fail(OF_ERR_OOM, "alloc: out of memory allocating %lld bytes", (long long)nbytes);
    return NULL;
  }
  pthread_mutex_lock(&cpu.lock);
  account_alloc_locked(size);
  pthread_mutex_unlock(&cpu.lock);
  if (ar && arena_recording(ar)) arena_record(ar, p, nbytes);
  return p;
}

void of_free(of_device dev, void *p, int64_t nbytes) {
  if (!p) return;
  if (dev != OF_CPU) {
    const of_device_ops *o = device_hooks->loaded();
    if (o) o->free(dev, p, nbytes);
    return;
  }
  if (cur_arena && arena_recording(cur_arena)) arena_record_free(cur_arena, p);
  int cls;
  bool large;
  int64_t size = block_size(nbytes ? nbytes : 1, &cls, &large);
  pthread_mutex_lock(&cpu.lock);
  if (__atomic_load_n(&narenas, __ATOMIC_ACQUIRE) && arena_free_locked(p)) {
    pthread_mutex_unlock(&cpu.lock);
    return;
  }
  if (large) {
    lblk *dead = NULL, *unmap = NULL;
    lg_free_locked(p, &dead, &unmap);
    pthread_mutex_unlock(&cpu.lock);
    lg_dispose(dead, false);
    lg_dispose(unmap, true);
    return;
  }
  /* Small blocks stay cached up to OF_CPU_CACHE_LIMIT_MB in all. */
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
    const of_device_ops *o = device_hooks->loaded();
    if (o) o->empty_cache(dev);
    return;
  }
  pthread_mutex_lock(&cpu.lock);
  for (int c = 0; c < NCLASS; c++) {
    free_block *b = cpu.free[c];
    cpu.free[c] = NULL;
    int64_t size = class_size(c);
    while (b) {
      free_block *next = b->next;
      os_free(b, size);
      cpu.stats.cached_bytes -= size;
      b = next;
    }
  }
  lblk *unmap = lg_trim_locked(NULL, true);
  pthread_mutex_unlock(&cpu.lock);
  lg_dispose(unmap, true);
}

void of_prefetch(const void *p, int64_t bytes) {
  const char *c = p;
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i, 0, 3);
}

const of_memory_stats *of_memory_stats_get(of_device dev) {
  static const of_memory_stats none;
  if (dev != OF_CPU) {
    const of_device_ops *o = device_hooks->loaded();
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
    const of_device_ops *o = device_hooks->loaded();
    if (o) o->reset_peak(dev);
    return;
  }
  pthread_mutex_lock(&cpu.lock);
  cpu.stats.peak_bytes = cpu.stats.current_bytes;
  pthread_mutex_unlock(&cpu.lock);
}

/* ---- graph arenas ----
 * A compiled graph's run makes the same allocations in the same order every
 * time (the liveness plan fixes when each value is freed). The first run
 * records them on the running thread: size, and the clock of its alloc and
 * free. Blocks freed within the run are then laid out in one arena by
 * their lifetimes (largest first, at the lowest offset that no block alive
 * at the same time uses); later runs hand out arena + offset for the k-th
 * allocation instead of asking the caches. Blocks that outlive the run
 * (outputs) or are freed on another thread stay on the heap. A run that
 * does not match the record (another size at position k, or a planned
 * range still in use) takes the rest of its allocations from the heap. */
enum { ARENA_OFF = 0, ARENA_RECORD = 1, ARENA_REPLAY = 2 };

struct of_arena {
  int mode;
  /* record */
  int64_t *size, *t0, *t1;
  void **ptr;
  int32_t n, cap;
  int64_t clock;
  /* plan */
  int64_t *off;
  char *base;
  int64_t bytes;
  /* replay */
  int32_t k;
  bool failed;
  int32_t failures;
  int32_t *live;    /* positions k handed out and not freed */
  int32_t nlive, live_cap;
  bool released;
};

static of_arena *arenas[256];

static bool arena_recording(const of_arena *a) { return a->mode == ARENA_RECORD; }

of_arena *of_arena_new(void) {
  of_arena *a = calloc(1, sizeof *a);
  if (a) a->mode = ARENA_RECORD;
  return a;
}

static void arena_drop(of_arena *a) {   /* under cpu.lock */
  for (int i = 0; i < narenas; i++)
    if (arenas[i] == a) {
      arenas[i] = arenas[narenas - 1];
      __atomic_store_n(&narenas, narenas - 1, __ATOMIC_RELEASE);
      break;
    }
  if (a->base) {
    cpu.stats.current_bytes -= a->bytes;
    os_free(a->base, a->bytes);
  }
  free(a->size); free(a->t0); free(a->t1); free(a->ptr); free(a->off); free(a->live);
  free(a);
}

void of_arena_release(of_arena *a) {
  if (!a) return;
  if (cur_arena == a) cur_arena = NULL;
  pthread_mutex_lock(&cpu.lock);
  a->released = true;
  if (a->nlive == 0) arena_drop(a);
  pthread_mutex_unlock(&cpu.lock);
}

int64_t of_arena_bytes(const of_arena *a) { return a ? a->bytes : 0; }

void of_arena_begin(of_arena *a) {
  if (!a || a->mode == ARENA_OFF) return;
  a->k = 0;
  a->failed = false;
  a->clock = 0;
  if (a->mode == ARENA_RECORD) a->n = 0;
  cur_arena = a;
}

of_arena *of_arena_suspend(void) {
  of_arena *a = cur_arena;
  cur_arena = NULL;
  return a;
}

void of_arena_resume(of_arena *a) { cur_arena = a; }

typedef struct { int64_t off, end; } span;
static int span_cmp(const void *x, const void *y) {
  const span *a = x, *b = y;
  return a->off < b->off ? -1 : a->off > b->off;
}
static _Thread_local int64_t *order_size;   /* qsort has no context argument */
static int by_size(const void *x, const void *y) {
  int64_t a = order_size[*(const int32_t *)x], b = order_size[*(const int32_t *)y];
  return a > b ? -1 : a < b;
}

/* Offsets for the blocks recorded with a lifetime; -1: heap. */
static bool arena_plan(of_arena *a) {
  int32_t n = a->n;
  a->off = malloc(sizeof *a->off * (size_t)(n ? n : 1));
  int32_t *idx = malloc(sizeof *idx * (size_t)(n ? n : 1));
  span *sp = malloc(sizeof *sp * (size_t)(n ? n : 1));
  int32_t *placed = malloc(sizeof *placed * (size_t)(n ? n : 1));
  if (!a->off || !idx || !sp || !placed) {
    free(idx); free(sp); free(placed);
    return false;
  }
  int32_t m = 0, np = 0;
  for (int32_t i = 0; i < n; i++) {
    a->off[i] = -1;
    if (a->t1[i] >= 0) idx[m++] = i;
  }
  order_size = a->size;
  qsort(idx, (size_t)m, sizeof *idx, by_size);
  int64_t total = 0;
  for (int32_t q = 0; q < m; q++) {
    int32_t i = idx[q];
    int64_t sz = (a->size[i] + ALIGN - 1) / ALIGN * ALIGN;
    if (sz == 0) sz = ALIGN;
    int32_t ns = 0;
    for (int32_t r = 0; r < np; r++) {
      int32_t j = placed[r];
      if (a->t0[j] <= a->t1[i] && a->t0[i] <= a->t1[j]) {   /* alive together */
        int64_t szj = (a->size[j] + ALIGN - 1) / ALIGN * ALIGN;
        sp[ns].off = a->off[j];
        sp[ns++].end = a->off[j] + (szj ? szj : ALIGN);
      }
    }
    qsort(sp, (size_t)ns, sizeof *sp, span_cmp);
    int64_t at = 0;
    for (int32_t r = 0; r < ns; r++) {
      if (sp[r].off >= at + sz) break;   /* fits in the gap before */
      if (sp[r].end > at) at = sp[r].end;
    }
    a->off[i] = at;
    placed[np++] = i;
    if (at + sz > total) total = at + sz;
  }
  free(idx); free(sp); free(placed);
  a->bytes = total;
  if (total == 0) return true;
  a->base = os_alloc(total);
  if (!a->base) {
    a->bytes = 0;
    return false;
  }
  pthread_mutex_lock(&cpu.lock);
  cpu.stats.current_bytes += total;
  if (cpu.stats.current_bytes > cpu.stats.peak_bytes) cpu.stats.peak_bytes = cpu.stats.current_bytes;
  if (narenas < (int)(sizeof arenas / sizeof *arenas)) {
    arenas[narenas] = a;
    __atomic_store_n(&narenas, narenas + 1, __ATOMIC_RELEASE);
  } else {
    a->failures = 1 << 20;   /* no slot: never hand out arena memory */
  }
  pthread_mutex_unlock(&cpu.lock);
  return true;
}

void of_arena_end(of_arena *a) {
  if (!a || cur_arena != a) return;
  cur_arena = NULL;
  if (a->mode == ARENA_RECORD) {
    a->mode = arena_plan(a) ? ARENA_REPLAY : ARENA_OFF;
    free(a->ptr);
    a->ptr = NULL;
  } else if (a->mode == ARENA_REPLAY && (a->failed || a->k != a->n)) {
    if (++a->failures >= 3) a->mode = ARENA_OFF;   /* the runs differ: caches only */
  }
}

/* the exec thread's allocation: arena memory, or NULL to use the caches */
static void *arena_alloc(of_arena *a, int64_t nbytes) {
  if (a->mode == ARENA_REPLAY) {
    int32_t k = a->k++;
    if (a->failed || a->failures >= (1 << 20) || k >= a->n || a->size[k] != nbytes ||
        a->off[k] < 0) {
      if (k >= a->n || a->size[k] != nbytes) a->failed = true;
      return NULL;
    }
    int64_t lo = a->off[k], hi = lo + (nbytes ? nbytes : 1);
    pthread_mutex_lock(&cpu.lock);
    for (int32_t r = 0; r < a->nlive; r++) {
      int32_t j = a->live[r];
      int64_t jl = a->off[j], jh = jl + (a->size[j] ? a->size[j] : 1);
      if (jl < hi && lo < jh) {   /* still in use: the run differs from the record */
        a->failed = true;
        pthread_mutex_unlock(&cpu.lock);
        return NULL;
      }
    }
    if (a->nlive == a->live_cap) {
      int32_t cap = a->live_cap ? a->live_cap * 2 : 64;
      int32_t *l = realloc(a->live, sizeof *l * (size_t)cap);
      if (!l) {
        a->failed = true;
        pthread_mutex_unlock(&cpu.lock);
        return NULL;
      }
      a->live = l;
      a->live_cap = cap;
    }
    a->live[a->nlive++] = k;
    pthread_mutex_unlock(&cpu.lock);
    return a->base + lo;
  }
  return NULL;
}

static void arena_record(of_arena *a, void *p, int64_t nbytes) {
  if (a->n == a->cap) {
    int32_t cap = a->cap ? a->cap * 2 : 256;
    int64_t *s = realloc(a->size, sizeof *s * (size_t)cap);
    if (s) a->size = s;
    int64_t *t0 = s ? realloc(a->t0, sizeof *t0 * (size_t)cap) : NULL;
    if (t0) a->t0 = t0;
    int64_t *t1 = t0 ? realloc(a->t1, sizeof *t1 * (size_t)cap) : NULL;
    if (t1) a->t1 = t1;
    void **pp = t1 ? realloc(a->ptr, sizeof *pp * (size_t)cap) : NULL;
    if (pp) a->ptr = pp;
    if (!pp) {
      a->mode = ARENA_OFF;
      return;
    }
    a->cap = cap;
  }
  a->size[a->n] = nbytes;
  a->t0[a->n] = a->clock++;
  a->t1[a->n] = -1;
  a->ptr[a->n++] = p;
}

/* a free on the exec thread while recording: closes the block's lifetime */
static void arena_record_free(of_arena *a, void *p) {
  for (int32_t i = a->n - 1; i >= 0; i--)
    if (a->ptr[i] == p && a->t1[i] < 0) {
      a->t1[i] = a->clock++;
      return;
    }
}

/* a free of arena memory (any thread, cpu.lock held): true when p was in
 * an arena */
static bool arena_free_locked(void *p) {
  for (int i = 0; i < narenas; i++) {
    of_arena *a = arenas[i];
    char *c = p;
    if (c < a->base || c >= a->base + a->bytes) continue;
    int64_t off = c - a->base;
    for (int32_t r = a->nlive - 1; r >= 0; r--)
      if (a->off[a->live[r]] == off) {
        a->live[r] = a->live[--a->nlive];
        break;
      }
    if (a->released && a->nlive == 0) arena_drop(a);
    return true;
  }
  return false;
}
