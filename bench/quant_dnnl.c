/* quant_dnnl.c -- oneDNN 2.x's int8 matmul (u8 x s8 -> s32, plain row-major
 * operands, as the quantized kernels see them) timed on the shapes of the
 * LeNet convolutions' gemms, for the kernel choice in doc/quantization.md.
 *   cc -O2 bench/quant_dnnl.c -ldnnl -o /tmp/quant_dnnl && /tmp/quant_dnnl M K N [iters]
 * Prints ms per call. */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { if ((x) != dnnl_success) { fprintf(stderr, "oneDNN: %s failed\n", #x); return 1; } } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: quant_dnnl M K N [iters]\n"); return 2; }
  dnnl_dim_t M = atol(argv[1]), K = atol(argv[2]), N = atol(argv[3]);
  int iters = argc > 4 ? atoi(argv[4]) : 50;
  dnnl_engine_t eng;
  dnnl_stream_t st;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  dnnl_memory_desc_t a_md, b_md, c_md;
  dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
  CK(dnnl_memory_desc_init_by_tag(&a_md, 2, ad, dnnl_u8, dnnl_ab));
  CK(dnnl_memory_desc_init_by_tag(&b_md, 2, bd, dnnl_s8, dnnl_ba));   /* weight [N, K] row-major */
  CK(dnnl_memory_desc_init_by_tag(&c_md, 2, cd, dnnl_s32, dnnl_ab));
  dnnl_matmul_desc_t md;
  CK(dnnl_matmul_desc_init(&md, &a_md, &b_md, NULL, &c_md));
  dnnl_primitive_desc_t pd;
  CK(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
  const char *impl = NULL;
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  dnnl_primitive_t prim;
  CK(dnnl_primitive_create(&prim, pd));
  unsigned char *a = malloc(M * K);
  signed char *b = malloc(K * N);
  int *c = malloc(M * N * sizeof(int));
  for (long i = 0; i < M * K; i++) a[i] = (unsigned char)(i * 7);
  for (long i = 0; i < K * N; i++) b[i] = (signed char)(i * 13);
  dnnl_memory_t am, bm, cm;
  CK(dnnl_memory_create(&am, &a_md, eng, a));
  CK(dnnl_memory_create(&bm, &b_md, eng, b));
  CK(dnnl_memory_create(&cm, &c_md, eng, c));
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  for (int i = 0; i < 3; i++) CK(dnnl_primitive_execute(prim, st, 3, args));
  CK(dnnl_stream_wait(st));
  double t = now();
  for (int i = 0; i < iters; i++) CK(dnnl_primitive_execute(prim, st, 3, args));
  CK(dnnl_stream_wait(st));
  printf("oneDNN %s int8 matmul %ldx%ldx%ld: %.3f ms\n", impl ? impl : "?", (long)M, (long)K, (long)N,
         (now() - t) / iters * 1e3);
  return 0;
}
