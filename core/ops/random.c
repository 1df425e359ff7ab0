/* random.c -- random numbers from a counter-based generator (Philox4x32-10).
 *
 * The generator state is (seed, offset). The 64-bit seed is the Philox key;
 * the 128-bit counter is (block, substream): block = offset + (element index
 * / elements per block), substream 0 (rejection sampling retries use
 * substreams 1, 2, ...). A fill of n elements reserves its blocks by
 * advancing the offset, and element i's value depends only on (seed, offset,
 * i). So fills are embarrassingly parallel and give the same numbers for any
 * thread count and any memory layout: values are generated in logical
 * row-major order.
 *
 * Elements per 128-bit block (the offset advances by ceil(n / k)):
 *   uniform_ float16/bfloat16/float32: 4 (24-bit uniforms from 32-bit words)
 *   uniform_ float64, bernoulli:       2 (53-bit uniforms from 64-bit words)
 *   normal_:                           2 (Box-Muller: one pair per block)
 *   randint_, randperm:                1 (64-bit draws, Lemire + rejection)
 */
#include "../device.h"
#include <math.h>
#include <pthread.h>
#include "family.h"
#include "random.h"
#include "simd.h"

/* ---- the generator state --------------------------------------------------
 * One CPU generator per process, as in PyTorch's default generator. It is one
 * of the few globals with a reason: `manual_seed` must reseed every later
 * random call wherever it happens. The mutex keeps (seed, offset) consistent
 * when several host threads reserve blocks or seed at once; the fills
 * themselves run outside it. */
static struct {
  pthread_mutex_t lock;
  uint64_t seed;     /* Philox key; also what of_initial_seed reports */
  uint64_t offset;   /* next unused 128-bit counter block */
} rng = {PTHREAD_MUTEX_INITIALIZER, 67280421310721ull, 0};

void of_manual_seed(uint64_t seed) {
  pthread_mutex_lock(&rng.lock);
  rng.seed = seed;
  rng.offset = 0;
  pthread_mutex_unlock(&rng.lock);
}

uint64_t of_initial_seed(void) {
  pthread_mutex_lock(&rng.lock);
  uint64_t s = rng.seed;
  pthread_mutex_unlock(&rng.lock);
  return s;
}

void of_rng_get_state(uint64_t *seed, uint64_t *offset) {
  pthread_mutex_lock(&rng.lock);
  if (seed) *seed = rng.seed;
  if (offset) *offset = rng.offset;
  pthread_mutex_unlock(&rng.lock);
}

void of_rng_set_state(uint64_t seed, uint64_t offset) {
  pthread_mutex_lock(&rng.lock);
  rng.seed = seed;
  rng.offset = offset;
  pthread_mutex_unlock(&rng.lock);
}

/* Reserves `blocks` counter blocks; returns the key and the first block. */
static void reserve(uint64_t blocks, uint64_t *seed, uint64_t *offset) {
  pthread_mutex_lock(&rng.lock);
  *seed = rng.seed;
  *offset = rng.offset;
  rng.offset += blocks;
  pthread_mutex_unlock(&rng.lock);
}

/* ---- Philox4x32-10 (Salmon et al., SC'11; Random123's constants) -------- */
typedef struct { uint32_t k0, k1; } pkey;
enum { PHILOX_BATCH = 8 };   /* blocks per SIMD batch in philox_blocks */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox(uint64_t block, uint64_t sub, pkey k, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32);
  uint32_t c2 = (uint32_t)sub, c3 = (uint32_t)(sub >> 32);
  uint32_t k0 = k.k0, k1 = k.k1;
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = (uint32_t)p1;
    c2 = n2;
    c3 = (uint32_t)p0;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* out[4 j + w] = word w of block first + j (substream 0), j < n. Batches of
 * blocks in struct-of-arrays form let the compiler vectorise the rounds
 * (SSE2: AVX2 and above take philox_avx2, through philox_words). */
static void philox_blocks(uint64_t first, int64_t n, pkey k, uint32_t *out) {
  int64_t j = 0;
  for (; j + PHILOX_BATCH <= n; j += PHILOX_BATCH) {
    uint32_t c0[PHILOX_BATCH], c1[PHILOX_BATCH], c2[PHILOX_BATCH], c3[PHILOX_BATCH];
    for (int l = 0; l < PHILOX_BATCH; l++) {
      uint64_t b = first + (uint64_t)(j + l);
      c0[l] = (uint32_t)b;
      c1[l] = (uint32_t)(b >> 32);
      c2[l] = c3[l] = 0;
    }
    uint32_t k0 = k.k0, k1 = k.k1;
    for (int r = 0; r < 10; r++) {
      for (int l = 0; l < PHILOX_BATCH; l++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0[l], p1 = (uint64_t)PHILOX_M1 * c2[l];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
        c0[l] = n0;
        c1[l] = (uint32_t)p1;
        c2[l] = n2;
        c3[l] = (uint32_t)p0;
      }
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    for (int l = 0; l < PHILOX_BATCH; l++) {
      uint32_t *o = out + 4 * (j + l);
      o[0] = c0[l];
      o[1] = c1[l];
      o[2] = c2[l];
      o[3] = c3[l];
    }
  }
  for (; j < n; j++) philox(first + (uint64_t)j, 0, k, out + 4 * j);
}

#if defined(__x86_64__)
#include <immintrin.h>
/* The same words with AVX2, 12 blocks a step in three vectors of four
 * (vector v: blocks 4 v + l in its 64-bit lanes l). Each counter word sits in the
 * low half of a lane, so one vpmuludq gives Philox's whole 32 x 32 -> 64
 * product and a shift its high half; the high halves carry garbage that the
 * low halves never see. Three independent chains keep the multiplier busy.
 * GCC's vectorisation of the loop above (its AVX2 clone) took 11-12 ns a
 * block on a Zen 3, this 2.9 (doc/benchmarks.md, "Memory-bound kernels",
 * dropout on AVX2). */
#define PHILOX_AVX2 __attribute__((target("avx2")))
enum { PHILOX_CH = 3 };   /* vectors of 4 blocks a step: 2 and 4 ran 10-25% slower */
PHILOX_AVX2 static void philox_avx2(uint64_t first, int64_t n, pkey k, uint32_t *out) {
  const __m256i m0 = _mm256_set1_epi64x(PHILOX_M0), m1 = _mm256_set1_epi64x(PHILOX_M1);
  const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
  int64_t j = 0;
  for (; j + 4 * PHILOX_CH <= n; j += 4 * PHILOX_CH) {
    __m256i c[PHILOX_CH][4];
    for (int v = 0; v < PHILOX_CH; v++) {
      __m256i blk = _mm256_add_epi64(_mm256_set1_epi64x((long long)(first + (uint64_t)(j + 4 * v))), lane);
      c[v][0] = blk;
      c[v][1] = _mm256_srli_epi64(blk, 32);
      c[v][2] = c[v][3] = _mm256_setzero_si256();
    }
    uint32_t k0 = k.k0, k1 = k.k1;
    for (int r = 0; r < 10; r++) {
      const __m256i kk0 = _mm256_set1_epi32((int)k0), kk1 = _mm256_set1_epi32((int)k1);
      for (int v = 0; v < PHILOX_CH; v++) {
        __m256i p0 = _mm256_mul_epu32(c[v][0], m0), p1 = _mm256_mul_epu32(c[v][2], m1);
        c[v][0] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c[v][1]), kk0);
        c[v][2] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c[v][3]), kk1);
        c[v][1] = p1;
        c[v][3] = p0;
      }
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    for (int v = 0; v < PHILOX_CH; v++) {   /* lanes to block-major words */
      __m256i w01 = _mm256_blend_epi32(c[v][0], _mm256_slli_epi64(c[v][1], 32), 0xAA);
      __m256i w23 = _mm256_blend_epi32(c[v][2], _mm256_slli_epi64(c[v][3], 32), 0xAA);
      __m256i a = _mm256_unpacklo_epi64(w01, w23), b = _mm256_unpackhi_epi64(w01, w23);
      uint32_t *o = out + 4 * (j + 4 * v);   /* a: blocks 0 and 2, b: 1 and 3 */
      _mm256_storeu_si256((__m256i *)o, _mm256_permute2x128_si256(a, b, 0x20));
      _mm256_storeu_si256((__m256i *)(o + 8), _mm256_permute2x128_si256(a, b, 0x31));
    }
  }
  for (; j < n; j++) philox(first + (uint64_t)j, 0, k, out + 4 * j);
}
#endif

/* philox_blocks on the instruction set selected (of_cpu_isa): every one
 * gives the same words */
static void philox_words(uint64_t first, int64_t n, pkey k, uint32_t *out) {
#if defined(__x86_64__)
  if (of_cpu_isa() >= OF_ISA_AVX2) {
    philox_avx2(first, n, k, out);
    return;
  }
#endif
  philox_blocks(first, n, k, out);
}

/* 64-bit word `lane` (0 or 1) of a block's four 32-bit words. */
static inline uint64_t word64(const uint32_t *w, int lane) {
  return (uint64_t)w[2 * lane] | (uint64_t)w[2 * lane + 1] << 32;
}
/* [0, 1) with 24 and 53 random bits */
static inline double u24(uint32_t x) { return (double)(x >> 8) * 0x1p-24; }
static inline double u53(uint64_t x) { return (double)(x >> 11) * 0x1p-53; }

/* Unbiased draw in [0, range) (range >= 1) for counter block `block`, whose
 * substream-0 words are w: Lemire's multiply-shift on the first 64-bit word;
 * a rejected word moves on to the second, then to substreams 1, 2, ... of the
 * same block. thresh = 2^64 mod range. */
static uint64_t bounded_slow(uint64_t block, pkey k, uint64_t range, uint64_t thresh) {
  uint32_t w[4];
  for (uint64_t sub = 1;; sub++) {
    philox(block, sub, k, w);
    for (int lane = 0; lane < 2; lane++) {
      unsigned __int128 m = (unsigned __int128)word64(w, lane) * range;
      if ((uint64_t)m >= thresh) return (uint64_t)(m >> 64);
    }
  }
}

static inline uint64_t bounded(const uint32_t *w, uint64_t block, pkey k, uint64_t range,
                               uint64_t thresh) {
  for (int lane = 0; lane < 2; lane++) {
    unsigned __int128 m = (unsigned __int128)word64(w, lane) * range;
    if ((uint64_t)m >= thresh) return (uint64_t)(m >> 64);
  }
  return bounded_slow(block, k, range, thresh);
}

/* ---- the stream for fused kernels (random.h) ---- */
void of_rng_reserve(uint64_t blocks, uint64_t *seed, uint64_t *offset) {
  reserve(blocks, seed, offset);
}

void of_philox_u24(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, float *u) {
  enum { CHUNK = 64 };   /* blocks per batch */
  uint32_t words[4 * CHUNK];
  pkey k = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  while (n > 0) {
    uint64_t b0 = first / 4, skip = first % 4;
    int64_t take = (int64_t)(4 * CHUNK - skip) < n ? (int64_t)(4 * CHUNK - skip) : n;
    philox_words(offset + b0, (int64_t)((skip + (uint64_t)take + 3) / 4), k, words);
    for (int64_t i = 0; i < take; i++) u[i] = (float)u24(words[skip + (uint64_t)i]);
    u += take;
    first += (uint64_t)take;
    n -= take;
  }
}

/* ---- fill driver ----------------------------------------------------------
 * The driver generates the Philox words of a tile of logical indices [b, e)
 * (b a multiple of TILE, so of every elements-per-block count), a generator
 * turns them into values (doubles, or int64 for randint), and the driver
 * stores those into the tensor, contiguous or strided, converting to its
 * dtype. Tiles never depend on the parallel split. */
enum { TILE = 512 };

typedef struct job job;
/* words: the tile's blocks, 4 words each; element i of the tile is k = i - b */
typedef void (*gen_fn)(const job *j, int64_t b, int64_t n, const uint32_t *words,
                       double *dv, int64_t *iv);
struct job {
  gen_fn gen;
  pkey key;
  uint64_t offset;     /* first block */
  int per_block;       /* elements per block: 1, 2 or 4 */
  bool ints;           /* the tile holds int64 (else double) */
  of_dtype dt;         /* dtype of the output */
  double lo, hi, hi_below, scale;   /* uniform_; normal_ uses lo = mean, scale = std */
  double p;            /* bernoulli_ */
  int64_t ilo;         /* randint_ */
  uint64_t range, thresh;
  const char *pdata;   /* bernoulli: contiguous probabilities */
  of_dtype pdt;
};

static pkey key_of(uint64_t seed) { return (pkey){(uint32_t)seed, (uint32_t)(seed >> 32)}; }

#define STORE_TILE(T, CONV)                                                 \
  do {                                                                      \
    if (offs)                                                               \
      for (int64_t i = 0; i < n; i++) *(T *)(base + offs[i]) = (T)(CONV);   \
    else                                                                    \
      for (int64_t i = 0; i < n; i++) ((T *)base)[i] = (T)(CONV);           \
  } while (0)

/* The tile loops per instruction set (the baseline's SSE2 loops were 40% of
 * a float32 rand once Philox ran on AVX2), without FMA contraction: every
 * clone computes lo + u * span with the same two roundings. */
#define TILE_LOOPS __attribute__((target_clones("avx2", "default"), OF_GCC_OPTIMIZE("fp-contract=off")))

/* offs == NULL: base is where element 0 of the tile goes, contiguous. */
TILE_LOOPS static void store_tile(of_dtype dt, char *base, const int64_t *offs, int64_t n,
                       const double *dv, const int64_t *iv, bool ints) {
  if (ints) {
    switch (dt) {
      case OF_BOOL: STORE_TILE(bool, iv[i] != 0); return;
      case OF_UINT8: STORE_TILE(uint8_t, iv[i]); return;
      case OF_INT8: STORE_TILE(int8_t, iv[i]); return;
      case OF_INT32: STORE_TILE(int32_t, iv[i]); return;
      case OF_INT64: STORE_TILE(int64_t, iv[i]); return;
      case OF_FLOAT32: STORE_TILE(float, (double)iv[i]); return;
      case OF_FLOAT64: STORE_TILE(double, iv[i]); return;
      default: break;
    }
    int64_t es = of_dtype_size(dt);
    for (int64_t i = 0; i < n; i++)
      of_store_double(base + (offs ? offs[i] : i * es), dt, (double)iv[i]);
    return;
  }
  switch (dt) {   /* integer outputs only ever get 0 and 1 here (bernoulli) */
    case OF_BOOL: STORE_TILE(bool, dv[i] != 0); return;
    case OF_UINT8: STORE_TILE(uint8_t, dv[i]); return;
    case OF_INT8: STORE_TILE(int8_t, dv[i]); return;
    case OF_INT32: STORE_TILE(int32_t, dv[i]); return;
    case OF_INT64: STORE_TILE(int64_t, dv[i]); return;
    case OF_FLOAT32: STORE_TILE(float, dv[i]); return;
    case OF_FLOAT64: STORE_TILE(double, dv[i]); return;
    default: break;
  }
  int64_t es = of_dtype_size(dt);
  for (int64_t i = 0; i < n; i++) of_store_double(base + (offs ? offs[i] : i * es), dt, dv[i]);
}

/* Byte offsets (from of_ptr(t)) of logical elements [b, e). */
static void strided_offsets(const of_tensor *t, int64_t b, int64_t e, int64_t *offs) {
  int64_t idx[OF_MAX_DIMS], rem = b, es = of_dtype_size(t->dtype), off = 0;
  int32_t nd = t->ndim;
  for (int32_t d = nd - 1; d >= 0; d--) {
    idx[d] = rem % t->shape[d];
    rem /= t->shape[d];
    off += idx[d] * t->strides[d];
  }
  for (int64_t i = 0; i < e - b; i++) {
    offs[i] = off * es;
    for (int32_t d = nd - 1; d >= 0; d--) {
      off += t->strides[d];
      if (++idx[d] < t->shape[d]) break;
      off -= idx[d] * t->strides[d];
      idx[d] = 0;
    }
  }
}

static void fill_tile(of_tensor *t, const job *j, bool contig, int64_t tile) {
  union { double d[TILE]; int64_t i[TILE]; } buf;
  uint32_t words[4 * TILE];
  int64_t offs[TILE];
  int64_t total = t->numel, b = tile * TILE, e = b + TILE < total ? b + TILE : total;
  int64_t n = e - b, pb = j->per_block;
  philox_words(j->offset + (uint64_t)(b / pb), (n + pb - 1) / pb, j->key, words);
  j->gen(j, b, n, words, buf.d, buf.i);
  char *base = of_ptr(t);
  if (contig) {
    store_tile(t->dtype, base + b * of_dtype_size(t->dtype), NULL, n, buf.d, buf.i, j->ints);
  } else {
    strided_offsets(t, b, e, offs);
    store_tile(t->dtype, base, offs, n, buf.d, buf.i, j->ints);
  }
}

/* Checks that t can be filled in place; error names op, shape and dtype. */
static of_status check_target(const char *op, of_tensor *t) {
  if (!t) return of_fail(OF_ERR_ARG, "%s: tensor is NULL", op);
  if (t->storage->device != OF_CPU && !of_device_ops_for(op, t->storage->device))
    return OF_ERR_DEVICE;
  return of_check_inplace(op, t);   /* expanded dims; leaves that require grad */
}

static void run_fill(of_tensor *t, job *j);
/* (clang wants the clones' attribute on the first declaration) */
TILE_LOOPS static void gen_uniform(const job *j, int64_t b, int64_t n, const uint32_t *w, double *dv,
                                   int64_t *iv);
static void gen_normal(const job *j, int64_t b, int64_t n, const uint32_t *w, double *dv,
                       int64_t *iv);
static void gen_bernoulli(const job *j, int64_t b, int64_t n, const uint32_t *w, double *dv,
                          int64_t *iv);

/* A fill of a device tensor: the device's Philox kernel for uniform, normal
 * and bernoulli with a scalar p (same blocks, same words, same values as
 * here); randint goes through the host (its rejection loop is rare but
 * unbounded) and is copied over. Either way the numbers are the CPU's. */
static void run_fill_device(of_tensor *t, job *j) {
  const of_device_ops *o = of_device_ops_loaded();
  int32_t dist = j->gen == gen_uniform ? 0 : j->gen == gen_normal ? 1
               : (j->gen == gen_bernoulli && !j->pdata) ? 2 : -1;
  if (o && o->random && dist >= 0) {
    uint64_t seed, blocks = (uint64_t)((t->numel + j->per_block - 1) / j->per_block);
    reserve(blocks, &seed, &j->offset);
    double prm[3] = {j->lo, dist == 0 ? j->hi : j->scale, dist == 0 ? j->hi_below : j->p};
    if (dist == 2) prm[0] = j->p;
    of_device_last_op = "random";
    if (o->random(t, dist, prm, seed, j->offset) == OF_OK) of_bump_version(t);
    return;
  }
  of_tensor *h = NULL;
  if (of_tensor_new(t->shape, t->ndim, t->dtype, OF_CPU, &h) != OF_OK) return;
  run_fill(h, j);
  of_copy_data(t, h);
  of_tensor_release(h);
}

/* Reserves the blocks for t's elements and runs the fill. */
static void run_fill(of_tensor *t, job *j) {
  if (t->storage->device != OF_CPU) {
    run_fill_device(t, j);
    return;
  }
  int64_t n = t->numel;
  uint64_t seed, blocks = (uint64_t)((n + j->per_block - 1) / j->per_block);
  reserve(blocks, &seed, &j->offset);
  j->key = key_of(seed);
  if (n > 0) {
    int64_t ntiles = (n + TILE - 1) / TILE;
    bool contig = of_tensor_is_contiguous(t);
    int32_t nt = of_threads();
    if (n < OF_PARALLEL_GRAIN || nt <= 1) {
      for (int64_t k = 0; k < ntiles; k++) fill_tile(t, j, contig, k);
    } else {
      if (nt > ntiles) nt = (int32_t)ntiles;
#pragma omp parallel for num_threads(nt) schedule(static)
      for (int64_t k = 0; k < ntiles; k++) fill_tile(t, j, contig, k);
    }
  }
  of_bump_version(t);
}

/* ---- generators: tile element k is logical element b + k ------------------ */
TILE_LOOPS static void gen_uniform(const job *j, int64_t b, int64_t n, const uint32_t *w, double *dv,
                                   int64_t *iv) {
  (void)b;
  (void)iv;
  double lo = j->lo, hi = j->hi, span = j->hi - j->lo, hb = j->hi_below;
  /* values are rounded to the output dtype here, so rounding up to hi is caught */
  switch (j->dt) {
    case OF_FLOAT64:
      for (int64_t k = 0; k < n; k++) {
        double v = lo + u53(word64(w + 4 * (k >> 1), (int)(k & 1))) * span;
        dv[k] = v >= hi ? hb : v;
      }
      return;
    case OF_FLOAT32:
      for (int64_t k = 0; k < n; k++) {
        double v = (float)(lo + u24(w[k]) * span);
        dv[k] = v >= hi ? hb : v;
      }
      return;
    case OF_FLOAT16:
      for (int64_t k = 0; k < n; k++) {
        double v = of_f16_to_f32(of_f32_to_f16((float)(lo + u24(w[k]) * span)));
        dv[k] = v >= hi ? hb : v;
      }
      return;
    default:   /* bfloat16 */
      for (int64_t k = 0; k < n; k++) {
        double v = of_bf16_to_f32(of_f32_to_bf16((float)(lo + u24(w[k]) * span)));
        dv[k] = v >= hi ? hb : v;
      }
      return;
  }
}

/* Box-Muller: block p gives elements 2p and 2p + 1. */
static void gen_normal(const job *j, int64_t b, int64_t n, const uint32_t *w, double *dv,
                       int64_t *iv) {
  (void)b;
  (void)iv;
  double mean = j->lo, std = j->scale;
  for (int64_t k = 0; k < n; k += 2) {
    const uint32_t *blk = w + 2 * k;
    /* u1 in (0, 1]: log never sees 0 */
    double u1 = (double)((word64(blk, 0) >> 11) + 1) * 0x1p-53, u2 = u53(word64(blk, 1));
    double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586476925 * u2;
    dv[k] = mean + std * (r * cos(th));
    if (k + 1 < n) dv[k + 1] = mean + std * (r * sin(th));
  }
}

static void gen_randint(const job *j, int64_t b, int64_t n, const uint32_t *w, double *dv,
                        int64_t *iv) {
  (void)dv;
  for (int64_t k = 0; k < n; k++) {
    uint64_t r = bounded(w + 4 * k, j->offset + (uint64_t)(b + k), j->key, j->range, j->thresh);
    iv[k] = (int64_t)((uint64_t)j->ilo + r);   /* wraps into [lo, hi) */
  }
}

/* dv[k] = u53(word k) < p, the words as 64-bit little-endian pairs of w (as
 * word64 reads them). u53(x) < p <=> (x >> 11) < p * 2^53 <=> (x >> 11) <
 * ceil(p * 2^53): an integer compare that vectorises (the same values as the
 * double compare, which gcc left scalar), for dropout's masks. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void bern_below(const uint32_t *w, int64_t n, double p, double *dv) {
  if (!(p > 0)) {   /* also NaN: no u53 is below it */
    for (int64_t k = 0; k < n; k++) dv[k] = 0.0;
    return;
  }
  int64_t t = p >= 1 ? (int64_t)1 << 53 : (int64_t)ceil(p * 0x1p53);
  for (int64_t k = 0; k < n; k++) {
    uint64_t x = (uint64_t)w[2 * k] | (uint64_t)w[2 * k + 1] << 32;
    dv[k] = (int64_t)(x >> 11) < t ? 1.0 : 0.0;
  }
}

static void gen_bernoulli(const job *j, int64_t b, int64_t n, const uint32_t *w, double *dv,
                          int64_t *iv) {
  (void)iv;
  if (j->pdata) {
    int64_t pes = of_dtype_size(j->pdt);
    const char *pd = j->pdata + b * pes;
    for (int64_t k = 0; k < n; k++) {
      double p = of_load_double(pd + k * pes, j->pdt);
      dv[k] = u53(word64(w + 4 * (k >> 1), (int)(k & 1))) < p ? 1.0 : 0.0;
    }
  } else {
    bern_below(w, n, j->p, dv);
  }
}

/* ---- helpers ------------------------------------------------------------- */
/* The largest value of floating dtype dt below hi. */
static double below(double hi, of_dtype dt) {
  if (dt == OF_FLOAT64) return nextafter(hi, -INFINITY);
  if (dt == OF_FLOAT32) {
    float h = (float)hi;
    if ((double)h >= hi) h = nextafterf(h, -INFINITY);
    return h;
  }
  bool f16 = dt == OF_FLOAT16;
  uint16_t bits = f16 ? of_f32_to_f16((float)hi) : of_f32_to_bf16((float)hi);
  for (int guard = 0; guard < 4; guard++) {
    double v = f16 ? of_f16_to_f32(bits) : of_bf16_to_f32(bits);
    if (v < hi) return v;
    /* one step towards -inf in sign-magnitude encoding */
    if ((bits & 0x7fffu) == 0) bits = 0x8001u;
    else if (bits & 0x8000u) bits++;
    else bits--;
  }
  return f16 ? of_f16_to_f32(bits) : of_bf16_to_f32(bits);
}

/* Integers exactly representable by dt, as [min, max]. */
static void int_bounds(of_dtype dt, int64_t *mn, int64_t *mx) {
  switch (dt) {
    case OF_BOOL: *mn = 0; *mx = 1; return;
    case OF_UINT8: *mn = 0; *mx = UINT8_MAX; return;
    case OF_INT8: *mn = INT8_MIN; *mx = INT8_MAX; return;
    case OF_INT32: *mn = INT32_MIN; *mx = INT32_MAX; return;
    case OF_INT64: *mn = INT64_MIN; *mx = INT64_MAX; return;
    case OF_INT16: *mn = INT16_MIN; *mx = INT16_MAX; return;
    case OF_UINT16: *mn = 0; *mx = UINT16_MAX; return;
    case OF_UINT32: *mn = 0; *mx = UINT32_MAX; return;
    case OF_UINT64: *mn = 0; *mx = INT64_MAX; return;   /* bounds are int64 */
    case OF_FLOAT16: *mn = -2048; *mx = 2048; return;
    case OF_BFLOAT16: *mn = -256; *mx = 256; return;
    case OF_FLOAT32: *mn = -(1ll << 24); *mx = 1ll << 24; return;
    default: *mn = -(1ll << 53); *mx = 1ll << 53; return;
  }
}

/* ---- the checks on shapes and dtypes ----
 * On of_meta (shape and dtype), so that the graph loader runs them on a
 * loaded node's recorded values (the infer hooks at the end of the file);
 * the bodies run them on their tensors, with the checks that need the real
 * tensor (in-place rules, devices) besides. */
static of_status need_float(const char *op, const of_meta *t) {
  if (!of_dtype_is_floating(t->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: expected a floating dtype, got %s (tensor %s)", op,
                   OF_DT(t), OF_SHAPE_STR(t));
  return OF_OK;
}

static of_status uniform_check(const of_meta *t, double lo, double hi) {
  OF_CHECK(need_float("uniform_", t));
  if (!isfinite(lo) || !isfinite(hi) || !isfinite(hi - lo) || lo > hi)
    return of_fail(OF_ERR_ARG,
                   "uniform_: expects finite lo <= hi, got lo=%g hi=%g (tensor %s %s)", lo, hi,
                   OF_SHAPE_STR(t), OF_DT(t));
  return OF_OK;
}

static of_status normal_check(const of_meta *t, double mean, double std) {
  OF_CHECK(need_float("normal_", t));
  if (!isfinite(mean) || !isfinite(std) || std < 0)
    return of_fail(OF_ERR_ARG,
                   "normal_: expects a finite mean and std >= 0, got mean=%g std=%g "
                   "(tensor %s %s)", mean, std, OF_SHAPE_STR(t), OF_DT(t));
  return OF_OK;
}

static of_status randint_check(const of_meta *t, int64_t lo, int64_t hi) {
  if (hi <= lo)
    return of_fail(OF_ERR_ARG,
                   "randint_: expects lo < hi, got lo=%lld hi=%lld (tensor %s %s)",
                   (long long)lo, (long long)hi, OF_SHAPE_STR(t), OF_DT(t));
  int64_t mn, mx;
  int_bounds(t->dtype, &mn, &mx);
  if (lo < mn || hi - 1 > mx)
    return of_fail(OF_ERR_ARG,
                   "randint_: range [%lld, %lld) does not fit dtype %s ([%lld, %lld]) "
                   "(tensor %s)", (long long)lo, (long long)hi, OF_DT(t), (long long)mn,
                   (long long)mx, OF_SHAPE_STR(t));
  return OF_OK;
}

static of_status bernoulli_p_check(const of_meta *t, double p) {
  if (!(p >= 0 && p <= 1))
    return of_fail(OF_ERR_ARG, "bernoulli_: probability p must be in [0, 1], got %g "
                   "(tensor %s %s)", p, OF_SHAPE_STR(t), OF_DT(t));
  return OF_OK;
}

/* bernoulli(p): draws of p's shape, in p's dtype (the values in [0, 1] are
 * data, checked as it runs) */
static of_meta bernoulli_result(const of_meta *p) { return *p; }

/* randperm(n): [n] in dtype dt, whose range must hold n - 1 + index_base;
 * the permutation is made in int64 first */
static of_status randperm_shape(int64_t n, int64_t index_base, of_dtype dt) {
  if (dt < 0 || dt >= OF_NUM_DTYPES)
    return of_fail(OF_ERR_DTYPE, "randperm: unknown dtype %d", (int)dt);
  if (n < 0)
    return of_fail(OF_ERR_ARG, "randperm: n must be >= 0, got %lld", (long long)n);
  int64_t mn, mx;
  int_bounds(dt, &mn, &mx);
  if (n > 0 && (index_base < mn || (__int128)n - 1 + index_base > mx))
    return of_fail(OF_ERR_ARG, "randperm: values %lld..%lld do not fit dtype %s",
                   (long long)index_base, (long long)(n - 1 + index_base), of_dtype_name(dt));
  OF_CHECK(of_tensor_check_new("randperm", &n, 1, OF_INT64, NULL));
  return of_tensor_check_new("randperm", &n, 1, dt, NULL);
}

/* rand, randn: a floating dtype */
static of_status rand_dtype(const char *op, of_dtype dt) {
  if (dt >= 0 && dt < OF_NUM_DTYPES && !of_dtype_is_floating(dt))
    return of_fail(OF_ERR_DTYPE, "%s: dtype must be floating point, got %s", op,
                   of_dtype_name(dt));
  return OF_OK;
}

/* ---- public ops ---------------------------------------------------------- */
static of_status uniform__body(of_tensor *t, double lo, double hi) {
  OF_CHECK(check_target("uniform_", t));
  of_meta m = of_meta_of(t);
  OF_CHECK(uniform_check(&m, lo, hi));
  job j = {.gen = gen_uniform, .per_block = t->dtype == OF_FLOAT64 ? 2 : 4, .dt = t->dtype,
           .lo = lo, .hi = hi, .hi_below = lo};
  if (hi > lo) {
    j.hi_below = below(hi, t->dtype);
    if (j.hi_below < lo) j.hi_below = lo;
  } else {
    j.hi = INFINITY;   /* lo == hi: every value is lo */
  }
  run_fill(t, &j);
  return OF_OK;
}

static of_status normal__body(of_tensor *t, double mean, double std) {
  OF_CHECK(check_target("normal_", t));
  of_meta m = of_meta_of(t);
  OF_CHECK(normal_check(&m, mean, std));
  job j = {.gen = gen_normal, .per_block = 2, .dt = t->dtype, .lo = mean, .scale = std};
  run_fill(t, &j);
  return OF_OK;
}

static of_status randint__body(of_tensor *t, int64_t lo, int64_t hi) {
  OF_CHECK(check_target("randint_", t));
  of_meta m = of_meta_of(t);
  OF_CHECK(randint_check(&m, lo, hi));
  uint64_t range = (uint64_t)hi - (uint64_t)lo;
  job j = {.gen = gen_randint, .per_block = 1, .ints = true, .dt = t->dtype, .ilo = lo,
           .range = range, .thresh = (0 - range) % range};
  run_fill(t, &j);
  return OF_OK;
}

static of_status bernoulli__body(of_tensor *t, double p) {
  OF_CHECK(check_target("bernoulli_", t));
  of_meta m = of_meta_of(t);
  OF_CHECK(bernoulli_p_check(&m, p));
  job j = {.gen = gen_bernoulli, .per_block = 2, .dt = t->dtype, .p = p};
  run_fill(t, &j);
  return OF_OK;
}

/* bernoulli(p) on a device: the CPU draws u53 from the float64 uniform
 * stream (2 per block), so a float64 uniform_(0, 1) fill there gives the same
 * u and `u < p` the same elements; the [0, 1] check waits for the device. */
static of_status bernoulli_device(of_tensor *p, of_tensor **out) {
  of_meta pm = of_meta_of(p);
  of_tensor *p64 = NULL, *ge = NULL, *le = NULL, *ok = NULL, *all = NULL, *u = NULL,
            *lt = NULL;
  double allok = 0;
  of_status st = of_cast_data(p, OF_FLOAT64, &p64);
  if (st == OF_OK) st = of_binary_scalar(OF_GE, p64, 0.0, 0, NULL, &ge);
  if (st == OF_OK) st = of_binary_scalar(OF_LE, p64, 1.0, 0, NULL, &le);
  if (st == OF_OK) st = of_binary(OF_LOGICAL_AND, ge, le, NULL, &ok);
  if (st == OF_OK) st = of_reduce(OF_RED_ALL, ok, NULL, 0, 0, 0, -1, &all);
  if (st == OF_OK) st = of_tensor_get_flat(all, 0, &allok);
  if (st == OF_OK && !allok)
    st = of_fail(OF_ERR_ARG, "bernoulli: probabilities must be in [0, 1] (p %s %s on %s)",
                 OF_SHAPE_STR(p), OF_DT(p), OF_DEV_STR(of_dev(p)));
  if (st == OF_OK) st = of_tensor_new(p->shape, p->ndim, OF_FLOAT64, of_dev(p), &u);
  if (st == OF_OK) st = uniform__body(u, 0.0, 1.0);
  if (st == OF_OK) st = of_binary(OF_LT, u, p64, NULL, &lt);
  if (st == OF_OK) st = of_cast_data(lt, bernoulli_result(&pm).dtype, out);
  of_tensor *tmp[] = {p64, ge, le, ok, all, u, lt};
  for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++)
    if (tmp[i]) of_tensor_release(tmp[i]);
  if (st == OF_OK) (*out)->storage->version = 0;
  return st;
}

static of_status bernoulli_body(of_tensor *p, of_tensor **out) {
  if (!p) return of_fail(OF_ERR_ARG, "bernoulli: tensor is NULL");
  if (p->storage->device != OF_CPU) return bernoulli_device(p, out);
  of_tensor *pc, *r;
  OF_CHECK(of_contiguous(p, &pc));
  const char *pd = of_ptr(pc);
  int64_t es = of_dtype_size(pc->dtype);
  for (int64_t i = 0; i < pc->numel; i++) {
    double v = of_load_double(pd + i * es, pc->dtype);
    if (!(v >= 0 && v <= 1)) {
      of_tensor_release(pc);
      return of_fail(OF_ERR_ARG,
                     "bernoulli: probabilities must be in [0, 1], got %g at flat index %lld "
                     "(p %s %s)", v, (long long)i + 1, OF_SHAPE_STR(p), OF_DT(p));
    }
  }
  of_meta pm = of_meta_of(p), rm = bernoulli_result(&pm);
  of_status st = of_tensor_new(rm.shape, rm.ndim, rm.dtype, OF_CPU, &r);
  if (st != OF_OK) {
    of_tensor_release(pc);
    return st;
  }
  job j = {.gen = gen_bernoulli, .per_block = 2, .dt = r->dtype, .pdata = pd,
           .pdt = pc->dtype};
  run_fill(r, &j);
  r->storage->version = 0;
  of_tensor_release(pc);
  *out = r;
  return OF_OK;
}

static of_status randperm_body(int64_t n, int64_t index_base, of_dtype dt, of_tensor **out) {
  OF_CHECK(randperm_shape(n, index_base, dt));
  of_tensor *a;
  OF_CHECK(of_tensor_new(&n, 1, OF_INT64, OF_CPU, &a));
  int64_t *v = (int64_t *)of_ptr(a);
  for (int64_t i = 0; i < n; i++) v[i] = i + index_base;
  uint64_t seed, offset;
  reserve((uint64_t)n, &seed, &offset);
  pkey k = key_of(seed);
  /* Fisher-Yates: step i (n-1 down to 1) swaps v[i] with v[j], j uniform in
   * [0, i], drawn from block offset + i. Blocks are made TILE at a time. */
  uint32_t words[4 * TILE];
  for (int64_t hi = n - 1; hi > 0; hi -= TILE) {
    int64_t lo = hi - TILE + 1 > 1 ? hi - TILE + 1 : 1;
    philox_words(offset + (uint64_t)lo, hi - lo + 1, k, words);
    for (int64_t i = hi; i >= lo; i--) {
      uint64_t range = (uint64_t)i + 1;
      const uint32_t *w = words + 4 * (i - lo);
      unsigned __int128 m = (unsigned __int128)word64(w, 0) * range;
      int64_t jj;
      if ((uint64_t)m >= range) jj = (int64_t)(m >> 64);   /* >= thresh for sure */
      else jj = (int64_t)bounded(w, offset + (uint64_t)i, k, range, (0 - range) % range);
      int64_t tmp = v[i];
      v[i] = v[jj];
      v[jj] = tmp;
    }
  }
  if (dt == OF_INT64) {
    *out = a;
    return OF_OK;
  }
  of_status st = of_to_dtype(a, dt, out);
  of_tensor_release(a);
  if (st == OF_OK) (*out)->storage->version = 0;
  return st;
}

/* flow.rand / flow.randn in one call (the C API's convenience). */
static of_status make_filled(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                             bool normal, of_tensor **out) {
  const char *op = normal ? "randn" : "rand";
  OF_CHECK(rand_dtype(op, dt));
  of_tensor *t;
  OF_CHECK(of_tensor_new_as(op, shape, ndim, dt, dev, &t));
  of_status st = normal ? of_normal_(t, 0, 1) : of_uniform_(t, 0, 1);
  if (st != OF_OK) {
    of_tensor_release(t);
    return st;
  }
  t->storage->version = 0;
  *out = t;
  return OF_OK;
}

static of_status rand_body(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                       of_tensor **out) {
  return make_filled(shape, ndim, dt, dev, false, out);
}

static of_status randn_body(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                        of_tensor **out) {
  return make_filled(shape, ndim, dt, dev, true, out);
}

/* ---- dropout: out = x * keep / (1 - p), keep = u24(word) >= p -----------
 * One fused pass (F.dropout was bernoulli_, a scale and a product: three
 * passes, the first drawing 64 bits per element). Element i of x (logical
 * row-major order) takes word i % 4 of block offset + i / 4 -- the words a
 * float32 uniform_ takes -- so the mask is `flow.rand(shape) >= p` from the
 * same generator state; SDPA's dropout (of_philox_u24) draws the same way.
 * u24(w) < p is one unsigned compare of the word (of_dropout_threshold,
 * device.h). The mask (bool) is the backward's: g * mask / (1 - p). */
enum { DROP_TILE = 4096 };   /* elements a task: a multiple of the 128-element steps */

typedef struct {
  of_dtype dt;
  const char *x;
  char *y;
  uint8_t *mask;
  double p;
  uint64_t thr;
  pkey key;
  uint64_t offset;
  int64_t n;   /* elements */
} drop_job;

/* elements [b, e) of the job, b a multiple of 4, any dtype. The mask and
 * float32 loops are branch-free (a kept element is a coin flip: branching
 * on it mispredicted half the time) and vectorised per instruction set. */
__attribute__((target_clones("avx2", "default")))
static void dropout_span(const drop_job *j, int64_t b, int64_t e) {
  uint32_t words[4 * 256];
  double s = j->p < 1 ? 1.0 / (1.0 - j->p) : 0.0;
  float sf = (float)s;
  /* thr is 2^32 for p = 1: no word reaches it */
  const bool none = j->thr > UINT32_MAX;
  const uint32_t thr = none ? 0 : (uint32_t)j->thr;
  while (b < e) {
    int64_t n = e - b < 1024 ? e - b : 1024;
    philox_words(j->offset + (uint64_t)(b / 4), (n + 3) / 4, j->key, words);
    /* the mask first, then one loop per dtype (no dtype switch per element) */
    uint8_t *restrict m = j->mask + b;
    for (int64_t k = 0; k < n; k++) m[k] = !none && words[k] >= thr;
    switch (j->dt) {
      case OF_FLOAT32: {
        const float *restrict x = (const float *)j->x + b;
        float *restrict y = (float *)j->y + b;
        /* a bit mask rather than m[k] ? v : 0, which GCC left a branch */
        for (int64_t k = 0; k < n; k++) {
          const float v = x[k] * sf;
          uint32_t u;
          memcpy(&u, &v, 4);
          u &= -(uint32_t)m[k];
          memcpy(&y[k], &u, 4);
        }
        break;
      }
      case OF_FLOAT64: {
        const double *x = (const double *)j->x + b;
        double *y = (double *)j->y + b;
        for (int64_t k = 0; k < n; k++) y[k] = m[k] ? x[k] * s : 0.0;
        break;
      }
      default: {   /* bfloat16, float16 (the body admits floating dtypes only) */
        bool bf = j->dt == OF_BFLOAT16;
        const uint16_t *x = (const uint16_t *)j->x + b;
        uint16_t *y = (uint16_t *)j->y + b;
        for (int64_t k = 0; k < n; k++) {
          float v = m[k] ? (bf ? of_bf16_to_f32(x[k]) : of_f16_to_f32(x[k])) * sf : 0.0f;
          y[k] = bf ? of_f32_to_bf16(v) : of_f32_to_f16(v);
        }
        break;
      }
    }
    b += n;
  }
}

#if defined(__x86_64__)
#define DROP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,bmi2")))
/* float32 or bfloat16 elements [b, e), b a multiple of 128: 32 blocks (128 elements) a
 * step in registers. Each counter word sits in the low half of a 64-bit lane
 * (vector 2h: the even blocks of 16, 2h + 1: the odd ones), so one vpmuludq
 * gives Philox's whole 32x32 -> 64 product and a shift its high half; the
 * high halves of the lanes carry garbage that the low halves never see. Four
 * independent chains keep the multipliers busy (two left the rounds'
 * latency exposed: 3.7 -> 5+ Gelem/s a core). Keep masks: bit 2 l of an
 * even vector's compare is block 2 l, of the odd one's block 2 l + 1, so
 * E | O << 1 has bit l for block l, and pdep spreads word w's mask to
 * element bits 4 l + w. */
enum { DROP_CH = 4 };   /* vectors of 8 blocks a step */
/* 16 bfloat16 as float32, and back rounded to nearest even with NaN kept
 * quiet (simd.h's forms of of_bf16_to_f32 / of_f32_to_bf16) */
DROP_AVX512 static inline __m512 ld_bf16x16(const uint16_t *p) { return (__m512)BF16_LD_16(p); }
DROP_AVX512 static inline void st_bf16x16(uint16_t *p, __m512 v) { BF16_ST_16(p, (vf16)v); }
DROP_AVX512 static void dropout_avx512(const drop_job *j, int64_t b, int64_t e) {
  const __m512i even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  const __m512i m0 = _mm512_set1_epi64(PHILOX_M0), m1 = _mm512_set1_epi64(PHILOX_M1);
  const __m512i one8 = _mm512_set1_epi8(1);
  const __m512 sc = _mm512_set1_ps((float)(1.0 / (1.0 - j->p)));   /* p < 1 here */
  const __m512i thr = _mm512_set1_epi32((int)(uint32_t)j->thr);
  const float *x = (const float *)j->x;
  float *y = (float *)j->y;
  const uint16_t *xb = (const uint16_t *)j->x;
  uint16_t *yb = (uint16_t *)j->y;
  bool bf = j->dt == OF_BFLOAT16;
  int64_t es = bf ? 2 : 4, i = b;
  for (; i + 32 * DROP_CH <= e; i += 32 * DROP_CH) {
    if (i + 1024 + 32 * DROP_CH <= j->n)   /* eight steps ahead */
      for (int q = 0; q < 2 * DROP_CH * (int)es / 4; q++)
        _mm_prefetch(j->x + (i + 1024) * es + 64 * q, _MM_HINT_T0);
    __m512i c[DROP_CH][4];
    uint64_t first = j->offset + (uint64_t)(i / 4);
    for (int v = 0; v < DROP_CH; v++) {   /* vector v: blocks 16 (v / 2) + 2 l + v % 2 */
      __m512i blk = _mm512_add_epi64(
          _mm512_set1_epi64((long long)(first + (uint64_t)(16 * (v / 2) + v % 2))), even);
      c[v][0] = blk;
      c[v][1] = _mm512_srli_epi64(blk, 32);
      c[v][2] = c[v][3] = _mm512_setzero_si512();
    }
    uint32_t k0 = j->key.k0, k1 = j->key.k1;
    for (int r = 0; r < 10; r++) {
      __m512i kk0 = _mm512_set1_epi32((int)k0), kk1 = _mm512_set1_epi32((int)k1);
      for (int v = 0; v < DROP_CH; v++) {
        __m512i p0 = _mm512_mul_epu32(c[v][0], m0), p1 = _mm512_mul_epu32(c[v][2], m1);
        c[v][0] = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p1, 32), c[v][1], kk0, 0x96);
        c[v][2] = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p0, 32), c[v][3], kk1, 0x96);
        c[v][1] = p1;
        c[v][3] = p0;
      }
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    for (int h = 0; h < DROP_CH / 2; h++) {   /* 16 blocks, 64 elements */
      uint64_t keep = 0;
      for (int w = 0; w < 4; w++) {
        uint32_t k16 = _mm512_mask_cmpge_epu32_mask(0x5555, c[2 * h][w], thr) |
                       (uint32_t)_mm512_mask_cmpge_epu32_mask(0x5555, c[2 * h + 1][w], thr) << 1;
        keep |= _pdep_u64(k16, 0x1111111111111111ull << w);
      }
      int64_t o = i + 64 * h;
      if (bf)
        for (int q = 0; q < 4; q++) {
          __m512 v = _mm512_maskz_mul_ps((__mmask16)(keep >> (16 * q)), ld_bf16x16(xb + o + 16 * q), sc);
          st_bf16x16(yb + o + 16 * q, v);
        }
      else
        for (int q = 0; q < 4; q++)
          _mm512_storeu_ps(y + o + 16 * q,
                           _mm512_maskz_mul_ps((__mmask16)(keep >> (16 * q)),
                                               _mm512_loadu_ps(x + o + 16 * q), sc));
      _mm512_storeu_si512((void *)(j->mask + o), _mm512_maskz_mov_epi8((__mmask64)keep, one8));
    }
  }
  if (i < e) dropout_span(j, i, e);
}
static bool dropout_avx512_ok(void) {
  return of_cpu_isa() >= OF_ISA_AVX512 && __builtin_cpu_supports("bmi2");
}
#else
static void dropout_avx512(const drop_job *j, int64_t b, int64_t e) { dropout_span(j, b, e); }
static bool dropout_avx512_ok(void) { return false; }
#endif

static void dropout_cpu(const drop_job *j, int64_t n) {
  bool vec = (j->dt == OF_FLOAT32 || j->dt == OF_BFLOAT16) && j->thr < (1ull << 32) &&
             dropout_avx512_ok();
  int64_t ntiles = (n + DROP_TILE - 1) / DROP_TILE;
  int32_t nt = of_threads();
  if (nt > ntiles) nt = (int32_t)ntiles;
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= OF_PARALLEL_GRAIN && nt > 1)
  for (int64_t t = 0; t < ntiles; t++) {
    int64_t b = t * DROP_TILE, e = b + DROP_TILE < n ? b + DROP_TILE : n;
    if (vec) dropout_avx512(j, b, e);
    else dropout_span(j, b, e);
  }
}

static of_status dropout_check(const of_meta *x, double p) {
  OF_CHECK(need_float("dropout", x));
  if (!(p >= 0 && p <= 1))
    return of_fail(OF_ERR_ARG, "dropout: probability p must be in [0, 1], got %g (input %s %s)",
                   p, OF_SHAPE_STR(x), OF_DT(x));
  return OF_OK;
}

/* g * mask / (1 - p): linear, so create_graph works through public ops */
static of_status dropout_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  const a_rand2 *a = OF_NODE_ATTRS(a_rand2, n);
  of_tensor *m = of_s_saved(&s, n, 0);
  of_tensor *r = of_s_bins(&s, OF_MUL, of_s_bin(&s, OF_MUL, g[0], m),
                           a->a < 1 ? 1.0 / (1.0 - a->a) : 0.0);
  return of_s_end(&s, r, &gi[0]);
}
static const of_grad_def dropout_grad = {"DropoutBackward", dropout_backward};

static of_status dropout_body(of_tensor *x, double p, of_tensor **out, of_tensor **mask) {
  if (!x) return of_fail(OF_ERR_ARG, "dropout: input is NULL");
  of_meta xm = of_meta_of(x);
  OF_CHECK(dropout_check(&xm, p));
  OF_ROUTE("dropout", dev, ops, dropout, x);
  of_tensor *xc = NULL, *y = NULL, *k = NULL;
  of_status st = of_dense(x, x->dtype, &xc);
  if (st == OF_OK) st = of_tensor_new(x->shape, x->ndim, x->dtype, dev, &y);
  if (st == OF_OK) st = of_tensor_new(x->shape, x->ndim, OF_BOOL, dev, &k);
  if (st == OF_OK) {
    int64_t n = x->numel;
    uint64_t seed, offset;
    reserve((uint64_t)((n + 3) / 4), &seed, &offset);
    if (dev != OF_CPU) {
      st = ops->dropout(xc, p, seed, offset, y, k);
    } else if (n > 0) {
      drop_job j = {x->dtype, of_tensor_data(xc), of_tensor_data(y), of_tensor_data(k),
                    p, of_dropout_threshold(p), key_of(seed), offset, n};
      dropout_cpu(&j, n);
    }
  }
  of_tensor_release(xc);
  if (st == OF_OK && of_grad_needed(&x, 1)) {
    of_node *nd;
    st = of_record(&dropout_grad, &x, 1, &y, 1, &nd);
    if (st == OF_OK) {
      a_rand2 a = {p, 0};
      OF_NODE_KEEP(nd, OPK_DROPOUT, a);
      of_node_save(nd, 0, k);
    }
  }
  if (st != OF_OK) {
    of_tensor_release(y);
    of_tensor_release(k);
    return st;
  }
  *out = y;
  *mask = k;
  return OF_OK;
}

/* ---- entry points (dispatch), run functions and table rows ---- */
of_status of_rand(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                  of_tensor **out) {
  OF_DISPATCH(rand_body(shape, ndim, dt, dev, out),
            of_record_create(OPK_RAND, shape, ndim, 0, dt, dev, out));
}
of_status of_randn(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                   of_tensor **out) {
  OF_DISPATCH(randn_body(shape, ndim, dt, dev, out),
            of_record_create(OPK_RANDN, shape, ndim, 0, dt, dev, out));
}

static of_status pack_rand_(int32_t op, of_tensor *t, double x, double y) {
  a_rand2 a = {x, y};
  return OF_RECORD(op, a, &t, 1, NULL, 0);
}
of_status of_uniform_(of_tensor *t, double lo, double hi) {
  OF_DISPATCH(uniform__body(t, lo, hi), pack_rand_(OPK_UNIFORM_, t, lo, hi));
}
of_status of_normal_(of_tensor *t, double mean, double std) {
  OF_DISPATCH(normal__body(t, mean, std), pack_rand_(OPK_NORMAL_, t, mean, std));
}
of_status of_randint_(of_tensor *t, int64_t lo, int64_t hi) {
  OF_DISPATCH(randint__body(t, lo, hi), pack_rand_(OPK_RANDINT_, t, (double)lo, (double)hi));
}
of_status of_bernoulli_(of_tensor *t, double p) {
  OF_DISPATCH(bernoulli__body(t, p), pack_rand_(OPK_BERNOULLI_, t, p, 0));
}
static of_status run_rand_(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_rand2);
  (void)outs;
  int64_t lo, hi;
  switch (n->op) {
    case OPK_UNIFORM_: return of_uniform_(ins[0], a->a, a->b);
    case OPK_NORMAL_: return of_normal_(ins[0], a->a, a->b);
    case OPK_RANDINT_:
      OF_CHECK(of_record_int("randint_", "low", a->a, &lo));
      OF_CHECK(of_record_int("randint_", "high", a->b, &hi));
      return of_randint_(ins[0], lo, hi);
    default: return of_bernoulli_(ins[0], a->a);
  }
}
static void describe_rand2(const void *p, char *b, size_t c) {
  const a_rand2 *a = p;
  of_catf(b, c, "%g,%g", a->a, a->b);
}
static of_status pack_bernoulli(of_tensor *p, of_tensor **out) {
  a_i1 a = {0, 0};
  return OF_RECORD(OPK_BERNOULLI, a, &p, 1, out, 1);
}
of_status of_bernoulli(of_tensor *p, of_tensor **out) {
  OF_DISPATCH(bernoulli_body(p, out), pack_bernoulli(p, out));
}
static of_status run_bernoulli(const of_oprec *n, of_tensor **ins, void **outs) {
  (void)n;
  OF_RUN1(of_bernoulli(ins[0], OF_R));
}
static of_status pack_dropout(of_tensor *x, double p, of_tensor **out, of_tensor **mask) {
  a_rand2 a = {p, 0};
  of_tensor *outs[2] = {*out, *mask};
  return OF_RECORD(OPK_DROPOUT, a, &x, 1, outs, 2);
}
of_status of_dropout(of_tensor *x, double p, of_tensor **out, of_tensor **mask) {
  OF_DISPATCH(dropout_body(x, p, out, mask), pack_dropout(x, p, out, mask));
}
static of_status run_dropout(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_rand2);
  of_tensor *y = NULL, *k = NULL;
  of_status st = of_dropout(ins[0], a->a, &y, &k);
  if (st == OF_OK) { outs[0] = y; outs[1] = k; }
  return st;
}
static of_status pack_randperm(int64_t n, int64_t base, of_dtype dt, of_tensor **out) {
  a_randperm a;
  OF_ZERO(a);
  a.n = n;
  a.base = base;
  a.dtype = dt;
  return OF_RECORD(OPK_RANDPERM, a, NULL, 0, out, 1);
}
of_status of_randperm(int64_t n, int64_t index_base, of_dtype dt, of_tensor **out) {
  OF_DISPATCH(randperm_body(n, index_base, dt, out), pack_randperm(n, index_base, dt, out));
}
static of_status run_randperm(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_randperm);
  (void)ins;
  OF_RUN1(of_randperm(a->n, a->base, a->dtype, OF_R));
}

/* ---- infer hooks: a loaded node's checks and result, by the functions
 * the bodies use ---- */
/* the fills (no results): the tensor they fill, against the record */
static of_status infer_fill(int32_t op, const a_rand2 *a, int32_t nin, const of_meta *ins) {
  if (nin < 1 || ins[0].ndim < 0) return of_fail(OF_ERR_ARG, "%s: tensor is NULL", of_op_name(op));
  int64_t lo, hi;
  switch (op) {
    case OPK_UNIFORM_: return uniform_check(&ins[0], a->a, a->b);
    case OPK_NORMAL_: return normal_check(&ins[0], a->a, a->b);
    case OPK_RANDINT_:
      OF_CHECK(of_record_int("randint_", "low", a->a, &lo));
      OF_CHECK(of_record_int("randint_", "high", a->b, &hi));
      return randint_check(&ins[0], lo, hi);
    default: return bernoulli_p_check(&ins[0], a->a);
  }
}
#define INFER_FILL(NAME, K)                                                                   \
  static of_status infer_##NAME(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) { \
    (void)outs;                                                                               \
    return infer_fill(OPK_##K, p, nin, ins);                                                  \
  }
INFER_FILL(uniform_, UNIFORM_)
INFER_FILL(normal_, NORMAL_)
INFER_FILL(randint_, RANDINT_)
INFER_FILL(bernoulli_, BERNOULLI_)
#undef INFER_FILL
static of_status infer_bernoulli(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  if (nin < 1 || ins[0].ndim < 0) return of_fail(OF_ERR_ARG, "bernoulli: tensor is NULL");
  outs[0] = bernoulli_result(&ins[0]);
  return OF_OK;
}
static of_status infer_dropout(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_rand2 *a = p;
  if (nin < 1 || ins[0].ndim < 0) return of_fail(OF_ERR_ARG, "dropout: input is NULL");
  OF_CHECK(dropout_check(&ins[0], a->a));
  outs[0] = ins[0];
  outs[1] = ins[0];
  outs[1].dtype = OF_BOOL;
  return OF_OK;
}
static of_status infer_randperm(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_randperm *a = p;
  (void)nin;
  (void)ins;
  OF_CHECK(randperm_shape(a->n, a->base, a->dtype));
  outs[0].ndim = 1;
  outs[0].shape[0] = a->n;
  outs[0].dtype = a->dtype;
  return OF_OK;
}
static of_status infer_rand_kind(const char *op, const a_create *a, of_meta *out) {
  OF_CHECK(rand_dtype(op, a->dtype));
  return of_create_meta(op, a, out);
}
static of_status infer_rand(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  (void)ins;
  return infer_rand_kind("rand", p, &outs[0]);
}
static of_status infer_randn(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  (void)ins;
  return infer_rand_kind("randn", p, &outs[0]);
}

OF_OP_IMPL_INFER(UNIFORM_, run_rand_, of_mutates_first, NULL, describe_rand2, infer_uniform_);
OF_OP_IMPL_INFER(NORMAL_, run_rand_, of_mutates_first, NULL, describe_rand2, infer_normal_);
OF_OP_IMPL_INFER(RANDINT_, run_rand_, of_mutates_first, NULL, describe_rand2, infer_randint_);
OF_OP_IMPL_INFER(BERNOULLI, run_bernoulli, NULL, NULL, NULL, infer_bernoulli);
OF_OP_IMPL_INFER(BERNOULLI_, run_rand_, of_mutates_first, NULL, describe_rand2, infer_bernoulli_);
OF_OP_IMPL_INFER(DROPOUT, run_dropout, NULL, NULL, describe_rand2, infer_dropout);
OF_OP_IMPL_INFER(RANDPERM, run_randperm, NULL, NULL, NULL, infer_randperm);
OF_OP_IMPL_INFER(RAND, of_run_create, NULL, NULL, of_describe_create, infer_rand);
OF_OP_IMPL_INFER(RANDN, of_run_create, NULL, NULL, of_describe_create, infer_randn);
