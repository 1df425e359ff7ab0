/* cpu.c -- which vector instruction set the run-time dispatched CPU kernels
 * use (core/ops/rowk.c). The library is built for the x86-64 baseline; the
 * kernels that matter are compiled three times (AVX-512, AVX2 + FMA, and
 * the baseline) and pick one per call from of_cpu_isa(). The CPU's features
 * are read once when the library loads; OF_CPU_ISA (avx512 | avx2 | default)
 * caps the choice, so a spec or a user can run the fallback paths on any
 * machine, and of_set_cpu_capability changes it at run time. */
#include "../internal.h"
#include <stdlib.h>
#include <strings.h>

static int32_t detected = OF_ISA_DEFAULT, selected = OF_ISA_DEFAULT;
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
  int32_t want = parse(getenv("OF_CPU_ISA"));
  if (want >= 0 && want < selected) selected = want;   /* a cap, never more than the CPU has */
}

int32_t of_cpu_isa(void) { return selected; }

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
