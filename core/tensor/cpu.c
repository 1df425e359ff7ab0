/* cpu.c -- which vector instruction set the run-time dispatched CPU kernels
 * use (core/ops/rowk.c). The library is built for the x86-64 baseline; the
 * kernels that matter are compiled three times (AVX-512, AVX2 + FMA, and
 * the baseline) and pick one per call from of_cpu_isa(). The CPU's features
 * are read once when the library loads; OF_CPU_ISA (avx512 | avx2 | default)
 * caps the choice, so a spec or a user can run the fallback paths on any
 * machine, and of_set_cpu_capability changes it at run time. */
#include "../internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int32_t detected = OF_ISA_DEFAULT, selected = OF_ISA_DEFAULT;
static bool has_bf16;   /* AVX512-BF16's conversions */
static const char *const names[3] = {"DEFAULT", "AVX2", "AVX512"};

static int32_t detect(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma"))
    return OF_ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return OF_ISA_AVX2;
#endif
  return OF_ISA_DEFAULT;
}

/* "avx512" / "AVX2" / "default" (any case) -> level, or -1 */
static int32_t parse(const char *name) {
  if (!name) return -1;
  for (int32_t i = 0; i < 3; i++)
    if (strcasecmp(name, names[i]) == 0) return i;
  return -1;
}

__attribute__((constructor)) static void isa_init(void) {
  detected = detect();
  selected = detected;
#if defined(__x86_64__) || defined(__i386__)
  has_bf16 = detected == OF_ISA_AVX512 && __builtin_cpu_supports("avx512bf16");
#endif
  int32_t want = parse(getenv("OF_CPU_ISA"));
  if (want >= 0 && want < selected) selected = want;   /* a cap, never more than the CPU has */
}

int32_t of_cpu_isa(void) { return selected; }

bool of_cpu_bf16_native(void) { return has_bf16 && selected == OF_ISA_AVX512; }

/* ---- streaming stores ------------------------------------------------------
 * An output of at least half the last-level cache in one loop call (a
 * thread's share of an elementwise op) leaves the cache before it is read
 * again, so it is written around it: a normal store first reads the line it
 * writes. Measured on a Zen 5 VM (32 MB L3), 2 threads, c = a + b into an
 * existing c, 16M floats (64 MB each), alternating: 1.95-2.0 -> 1.77-1.80
 * ms (a C loop over pages without huge pages: 3.7 -> 3.0). Half the cache,
 * not all of it: the inputs take the other half. OF_STREAM_MIN_BYTES sets
 * the threshold (0: never stream). */
static int64_t stream_min = -1;

__attribute__((constructor)) static void stream_init(void) {
  const char *env = getenv("OF_STREAM_MIN_BYTES");
  if (env && *env) {
    long long v = atoll(env);
    stream_min = v > 0 ? v : INT64_MAX;
    return;
  }
  /* the kernel's view of cpu0's last cache; glibc's sysconf reads CPUID,
   * which in a VM can describe the host's (384 MB for one 32 MB L3 here) */
  long llc = -1;
  for (int idx = 3; idx >= 2 && llc <= 0; idx--) {
    char path[80], buf[32];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(buf, sizeof buf, f)) {
      char *end;
      long v = strtol(buf, &end, 10);
      if (v > 0) llc = *end == 'K' ? v << 10 : *end == 'M' ? v << 20 : v;
    }
    fclose(f);
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (llc <= 0) llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  if (llc <= 0) llc = 8l << 20;
  stream_min = llc / 2;
}

int64_t of_stream_min_bytes(void) { return stream_min; }

#if defined(__x86_64__)
#include <emmintrin.h>
void of_stream_store(void *dst, const void *src, int64_t bytes) {
  char *d = dst;
  const char *s = src;
  int64_t head = (int64_t)((16 - ((uintptr_t)d & 15)) & 15);
  if (head > bytes) head = bytes;
  memcpy(d, s, (size_t)head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), c);
    _mm_stream_si128((__m128i *)(d + 48), e);
  }
  for (; bytes >= 16; bytes -= 16, d += 16, s += 16)
    _mm_stream_si128((__m128i *)d, _mm_loadu_si128((const __m128i *)s));
  memcpy(d, s, (size_t)bytes);
}
void of_stream_fence(void) { _mm_sfence(); }
#else
void of_stream_store(void *dst, const void *src, int64_t bytes) { memcpy(dst, src, (size_t)bytes); }
void of_stream_fence(void) {}
#endif

const char *of_get_cpu_capability(void) { return names[selected]; }

of_status of_set_cpu_capability(const char *name) {
  int32_t want = parse(name);
  if (want < 0)
    return of_fail(OF_ERR_ARG, "set_cpu_capability: unknown instruction set '%s' (expected "
                   "avx512, avx2 or default)", name ? name : "(null)");
  if (want > detected)
    return of_fail(OF_ERR_ARG, "set_cpu_capability: this CPU does not support %s (it has %s)",
                   names[want], names[detected]);
  selected = want;
  return OF_OK;
}

/* ---- OpenBLAS's kernels -------------------------------------------------
 * A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels by CPU model when it
 * loads, and a model newer than it knows falls back to its Prescott kernels
 * (SSE3): Debian 12's 0.3.21 does so on an Emerald Rapids Xeon (family 6,
 * model 207). There every float32 matmul and im2col convolution ran
 * slower than the CPU allows: a 1024^3 matmul 4.6x, flowvision's ResNet-50
 * forward at batch 1 2.5x (1 thread, `luajit bench/blas_core.lua`;
 * doc/benchmarks.md, "Models", "Fifth pass").
 *
 * So when OpenBLAS has fallen back to Prescott on a CPU with AVX2 or
 * AVX-512, it is asked again, as OPENBLAS_CORETYPE would ask it: Cooperlake
 * (AVX-512 + BF16), SkylakeX (AVX-512) or Haswell (AVX2 + FMA). Each is
 * asked only if this OpenBLAS has that core (its gotoblas_<CORE> table is
 * there: an OpenBLAS that does not know the name would exit), and never
 * over a user's own OPENBLAS_CORETYPE. The symbols are weak: an OpenBLAS
 * built for one core (no DYNAMIC_ARCH) or another BLAS leaves them NULL and
 * this does nothing. It runs from a constructor of this library, after
 * OpenBLAS's own (a dependency is initialised first) and before any BLAS
 * call. OpenBLAS's own constructor has already started its pool of server
 * threads, which read the kernel table as they start: they are stopped
 * first (blas_thread_shutdown_, as OpenBLAS does around fork()), since the
 * table is NULL for a moment while it is chosen again -- a thread starting
 * late on a loaded machine crashed there (2 of ~2,000 processes in a
 * `make test`). The pool is not needed anyway: OpenBLAS runs single-threaded
 * here (threads.c), and it starts the pool again if it ever wants it. */
extern char *openblas_get_corename(void) __attribute__((weak));
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));
extern int blas_thread_shutdown_(void) __attribute__((weak));
extern char gotoblas_COOPERLAKE[] __attribute__((weak));
extern char gotoblas_SKYLAKEX[] __attribute__((weak));
extern char gotoblas_HASWELL[] __attribute__((weak));

/* the OpenBLAS core for this CPU's vector units (detect(), above), or NULL */
static const char *blas_core_for_cpu(void) {
  int32_t isa = detect();
#if defined(__x86_64__)
  if (isa == OF_ISA_AVX512 && __builtin_cpu_supports("avx512bf16") && gotoblas_COOPERLAKE)
    return "Cooperlake";
#endif
  if (isa == OF_ISA_AVX512 && gotoblas_SKYLAKEX) return "SkylakeX";
  if (isa >= OF_ISA_AVX2 && gotoblas_HASWELL) return "Haswell";
  return NULL;
}

__attribute__((constructor)) static void blas_core_init(void) {
  if (!openblas_get_corename || !gotoblas_dynamic_init || !gotoblas_dynamic_quit ||
      !blas_thread_shutdown_)
    return;
  if (getenv("OPENBLAS_CORETYPE")) return;   /* the user's choice */
  const char *now = openblas_get_corename();
  if (!now || strcasecmp(now, "Prescott") != 0) return;
  const char *want = blas_core_for_cpu();
  if (!want) return;
  /* OpenBLAS reads the core from the environment only; the variable is
   * removed again so that child processes choose for themselves */
  if (setenv("OPENBLAS_CORETYPE", want, 1) != 0) return;
  blas_thread_shutdown_();
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
}

const char *of_get_blas_core(void) {
  return openblas_get_corename ? openblas_get_corename() : "";
}
