/* random.h -- the generator's stream for fused kernels that draw their own
 * numbers (core/ops/attention.c's dropout), so a kernel and its backward
 * replay the same draws without storing them. See core/ops/random.c. */
#ifndef ONEFLOW_RANDOM_H
#define ONEFLOW_RANDOM_H
#include <stdint.h>

/* Reserves `blocks` 128-bit counter blocks of the process generator;
 * returns its key and the first block. */
void of_rng_reserve(uint64_t blocks, uint64_t *seed, uint64_t *offset);
/* u[i] = the value uniform_ gives float32 element first + i of a fill that
 * reserved its blocks at `offset`: 24-bit uniforms in [0, 1), four per block. */
void of_philox_u24(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, float *u);
#endif
