/* tsan_prelude.h -- included first in every file of the ThreadSanitizer
 * build (tools/tsan_threads.sh, -include). The target_clones kernels
 * (conv.c, pool.c, random.c ...) get an ifunc resolver that the dynamic
 * linker calls while it relocates liboneflow.so, before the TSan runtime is
 * initialised; TSan instruments the resolver and it crashed there
 * (__tsan_func_entry). Here the attribute expands to nothing, so each kernel
 * is built once for the default ISA: the same code paths, no resolver. */
#define target_clones(...)
