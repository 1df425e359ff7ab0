/* layout.c -- data movement below the ops: copies with dtype conversion,
 * dense copies, casts, and memory formats (channels-last). Nothing here
 * records autograd or is traced; the ops (core/ops) build on it. */
#include "../device.h"
#include <stdlib.h>

/* ---- copy with conversion ---- */

#define CONV_LOOP(TD, TS)                                                         \
  static void conv_##TD##_##TS(char **p, const int64_t *s, int64_t n, void *c) { \
    (void)c;                                                                      \
    char *d = p[0], *x = p[1];                                                    \
    if (s[0] == sizeof(TD) && s[1] == sizeof(TS)) {                               \
      TD *restrict dd = (TD *)d;                                                  \
      const TS *restrict xx = (const TS *)x;                                      \
      for (int64_t i = 0; i < n; i++) dd[i] = (TD)xx[i];                          \
    } else {                                                                      \
      for (int64_t i = 0; i < n; i++) *(TD *)(d + i * s[0]) = (TD) * (const TS *)(x + i * s[1]); \
    }                                                                             \
  }

#define NATIVE_TYPES(X, A) X(A, bool) X(A, uint8_t) X(A, int8_t) X(A, int32_t) X(A, int64_t) \
  X(A, float) X(A, double) X(A, int16_t) X(A, uint16_t) X(A, uint32_t) X(A, uint64_t)
#define NATIVE_TYPES2(X, A) X(A, bool) X(A, uint8_t) X(A, int8_t) X(A, int32_t) X(A, int64_t) \
  X(A, float) X(A, double) X(A, int16_t) X(A, uint16_t) X(A, uint32_t) X(A, uint64_t)
NATIVE_TYPES2(CONV_LOOP, bool)
NATIVE_TYPES2(CONV_LOOP, uint8_t)
NATIVE_TYPES2(CONV_LOOP, int8_t)
NATIVE_TYPES2(CONV_LOOP, int32_t)
NATIVE_TYPES2(CONV_LOOP, int64_t)
NATIVE_TYPES2(CONV_LOOP, float)
NATIVE_TYPES2(CONV_LOOP, double)
NATIVE_TYPES2(CONV_LOOP, int16_t)
NATIVE_TYPES2(CONV_LOOP, uint16_t)
NATIVE_TYPES2(CONV_LOOP, uint32_t)
NATIVE_TYPES2(CONV_LOOP, uint64_t)

typedef void (*loop_t)(char **, const int64_t *, int64_t, void *);
static int native_index(of_dtype t) {
  switch (t) {
    case OF_BOOL: return 0; case OF_UINT8: return 1; case OF_INT8: return 2;
    case OF_INT32: return 3; case OF_INT64: return 4; case OF_FLOAT32: return 5;
    case OF_FLOAT64: return 6; case OF_INT16: return 7; case OF_UINT16: return 8;
    case OF_UINT32: return 9; case OF_UINT64: return 10; default: return -1;
  }
}
#define CONV_PTR(TD, TS) conv_##TD##_##TS,
static const loop_t conv_table[11][11] = {
    {NATIVE_TYPES(CONV_PTR, bool)},    {NATIVE_TYPES(CONV_PTR, uint8_t)},
    {NATIVE_TYPES(CONV_PTR, int8_t)},  {NATIVE_TYPES(CONV_PTR, int32_t)},
    {NATIVE_TYPES(CONV_PTR, int64_t)}, {NATIVE_TYPES(CONV_PTR, float)},
    {NATIVE_TYPES(CONV_PTR, double)},  {NATIVE_TYPES(CONV_PTR, int16_t)},
    {NATIVE_TYPES(CONV_PTR, uint16_t)}, {NATIVE_TYPES(CONV_PTR, uint32_t)},
    {NATIVE_TYPES(CONV_PTR, uint64_t)}};

static void copy_bits16(char **p, const int64_t *s, int64_t n, void *c) {
  (void)c;
  for (int64_t i = 0; i < n; i++) *(uint16_t *)(p[0] + i * s[0]) = *(const uint16_t *)(p[1] + i * s[1]);
}

/* float32 <-> bfloat16 without the per-element calls of the slow path (the
 * casts around bfloat16 autocast): the same rounding as of_f32_to_bf16. */
/* dense runs: loops the compiler vectorises, built for each ISA (the
 * baseline's SSE2 has no 32 -> 16 bit narrowing and ran at a third of the
 * AVX-512 loop's speed) and picked at run time */
#define BF16_DENSE(ISA, ATTR)                                                                    \
  ATTR static void to_bf16_##ISA(uint16_t *restrict d, const uint32_t *restrict x, int64_t n) { \
    for (int64_t i = 0; i < n; i++) {                                                            \
      uint32_t v = x[i], r = v + 0x7fffu + ((v >> 16) & 1);                                      \
      d[i] = (v & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((v >> 16) | 0x40) : (uint16_t)(r >> 16); \
    }                                                                                            \
  }                                                                                              \
  ATTR static void from_bf16_##ISA(uint32_t *restrict d, const uint16_t *restrict x, int64_t n) { \
    for (int64_t i = 0; i < n; i++) d[i] = (uint32_t)x[i] << 16;                                 \
  }
BF16_DENSE(def, )
#if defined(__x86_64__) && defined(__GNUC__)
BF16_DENSE(avx2, __attribute__((target("avx2,fma"))))
BF16_DENSE(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))))
#define BF16_PICK(NAME, d, x, n)                              \
  do {                                                        \
    int32_t isa_ = of_cpu_isa();                              \
    if (isa_ >= OF_ISA_AVX512) NAME##_avx512(d, x, n);        \
    else if (isa_ >= OF_ISA_AVX2) NAME##_avx2(d, x, n);       \
    else NAME##_def(d, x, n);                                 \
  } while (0)
#else
#define BF16_PICK(NAME, d, x, n) NAME##_def(d, x, n)
#endif

static void conv_bf16_float(char **p, const int64_t *s, int64_t n, void *c) {
  (void)c;
  if (s[0] == 2 && s[1] == 4) {
    BF16_PICK(to_bf16, (uint16_t *)p[0], (const uint32_t *)p[1], n);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    uint32_t x;
    memcpy(&x, p[1] + i * s[1], 4);
    uint32_t r = x + 0x7fffu + ((x >> 16) & 1);
    uint16_t h = (x & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((x >> 16) | 0x40)
                                                 : (uint16_t)(r >> 16);
    memcpy(p[0] + i * s[0], &h, 2);
  }
}
static void conv_float_bf16(char **p, const int64_t *s, int64_t n, void *c) {
  (void)c;
  if (s[0] == 4 && s[1] == 2) {
    BF16_PICK(from_bf16, (uint32_t *)p[0], (const uint16_t *)p[1], n);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, p[1] + i * s[1], 2);
    uint32_t x = (uint32_t)h << 16;
    memcpy(p[0] + i * s[0], &x, 4);
  }
}

typedef struct { of_dtype dst, src; } slow_ctx;
static void conv_slow(char **p, const int64_t *s, int64_t n, void *c) {
  slow_ctx *k = c;
  for (int64_t i = 0; i < n; i++)
    of_store_double(p[0] + i * s[0], k->dst, of_load_double(p[1] + i * s[1], k->src));
}

/* complex64/complex128 to and from anything: (re, im) through doubles; a
 * real source has im = 0, a real destination keeps the real part (as
 * PyTorch's casts, which warn). Same-dtype complex copies move the bits. */
static void conv_complex(char **p, const int64_t *s, int64_t n, void *c) {
  slow_ctx *k = c;
  for (int64_t i = 0; i < n; i++) {
    const char *x = p[1] + i * s[1];
    char *d = p[0] + i * s[0];
    double re, im = 0;
    if (k->src == OF_COMPLEX64) re = ((const float *)x)[0], im = ((const float *)x)[1];
    else if (k->src == OF_COMPLEX128) re = ((const double *)x)[0], im = ((const double *)x)[1];
    else re = of_load_double(x, k->src);
    if (k->dst == OF_COMPLEX64) ((float *)d)[0] = (float)re, ((float *)d)[1] = (float)im;
    else if (k->dst == OF_COMPLEX128) ((double *)d)[0] = re, ((double *)d)[1] = im;
    else of_store_double(d, k->dst, re);
  }
}
static void copy_bits128(char **p, const int64_t *s, int64_t n, void *c) {
  (void)c;
  for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], p[1] + i * s[1], 16);
}
static void copy_bits64(char **p, const int64_t *s, int64_t n, void *c) {
  (void)c;
  for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], p[1] + i * s[1], 8);
}

/* Float to int conversion of NaN/inf is UB in C; send those through the
 * saturating slow path. Checked only for float -> int copies. */
static bool needs_saturation(of_tensor *dst, of_tensor *src) {
  return of_dtype_is_int(dst->dtype) && of_dtype_is_floating(src->dtype);
}

of_status of_copy_fits(const int64_t *ds, int32_t dn, const int64_t *ss, int32_t sn) {
  int64_t shape[OF_MAX_DIMS];
  int32_t nd;
  OF_CHECK(of_broadcast_shapes("copy_", ds, dn, ss, sn, shape, &nd));
  if (nd != dn || of_shape_numel(shape, nd) != of_shape_numel(ds, dn)) {
    char a[96], b[96];
    return of_fail(OF_ERR_SHAPE, "copy_: source %s does not broadcast to destination %s",
                   of_shape_str(ss, sn, a, 96), of_shape_str(ds, dn, b, 96));
  }
  return OF_OK;
}

static bool strides_contiguous(const int64_t *shape, const int64_t *strides, int32_t ndim);

#if defined(__x86_64__)
#include <emmintrin.h>
/* 8 x 8 bytes: dst[c * ds + r] = src[r * ss + c], by SSE2 unpacks (rows
 * interleaved by bytes, then 16-bit pairs, then 32-bit quads: each 8-byte
 * half of the result is a column) */
static void tr8x8_u8(const uint8_t *src, int64_t ss, uint8_t *dst, int64_t ds) {
  __m128i a[8];
  for (int i = 0; i < 8; i++) a[i] = _mm_loadl_epi64((const __m128i *)(src + i * ss));
  const __m128i r01 = _mm_unpacklo_epi8(a[0], a[1]), r23 = _mm_unpacklo_epi8(a[2], a[3]);
  const __m128i r45 = _mm_unpacklo_epi8(a[4], a[5]), r67 = _mm_unpacklo_epi8(a[6], a[7]);
  const __m128i q0 = _mm_unpacklo_epi16(r01, r23), q1 = _mm_unpackhi_epi16(r01, r23);
  const __m128i q2 = _mm_unpacklo_epi16(r45, r67), q3 = _mm_unpackhi_epi16(r45, r67);
  const __m128i c[4] = {_mm_unpacklo_epi32(q0, q2), _mm_unpackhi_epi32(q0, q2), _mm_unpacklo_epi32(q1, q3),
                        _mm_unpackhi_epi32(q1, q3)};
  for (int i = 0; i < 4; i++) {
    _mm_storel_epi64((__m128i *)(dst + (2 * i) * ds), c[i]);
    _mm_storel_epi64((__m128i *)(dst + (2 * i + 1) * ds), _mm_srli_si128(c[i], 8));
  }
}
#endif

/* A 4-d copy between channels-last and contiguous of one dtype and shape
 * is a transpose per sample, [HW, C] <-> [C, HW]: done in 16 x 16 tiles
 * (8 x 8 byte blocks in SSE2 registers for 1-byte dtypes), where the
 * element iterator would walk rows of W elements C apart (a quantized
 * LeNet's last feature map, 8 x 64 x 7 x 7 bytes, took 12 us that way).
 * Not for a copy within one storage. true when it applied. */
static bool copy_nhwc_nchw(of_tensor *dst, of_tensor *src) {
  if (dst->ndim != 4 || src->ndim != 4 || dst->dtype != src->dtype) return false;
  if (dst->storage == src->storage) return false;
  for (int i = 0; i < 4; i++)
    if (dst->shape[i] != src->shape[i]) return false;
  const int64_t *sh = dst->shape;
  const bool d_c = strides_contiguous(sh, dst->strides, 4), s_c = strides_contiguous(sh, src->strides, 4);
  const bool d_cl = !d_c && of_strides_channels_last(sh, dst->strides, 4);
  const bool s_cl = !s_c && of_strides_channels_last(sh, src->strides, 4);
  if (!((d_c && s_cl) || (d_cl && s_c))) return false;
  const size_t es = of_dtype_size(dst->dtype);
  if (es != 1 && es != 2 && es != 4 && es != 8) return false;
  const int64_t N = sh[0], C = sh[1], L = sh[2] * sh[3];
  /* rows x cols per sample: the source's [rows, cols] into the destination's [cols, rows] */
  const int64_t rows = s_cl ? L : C, cols = s_cl ? C : L;
  const char *sp = of_ptr(src);
  char *dp = of_ptr(dst);
#define TR(T)                                                                            \
  do {                                                                                   \
    for (int64_t n = 0; n < N; n++) {                                                    \
      const T *a = (const T *)sp + n * rows * cols;                                      \
      T *b = (T *)dp + n * rows * cols;                                                  \
      for (int64_t r0 = 0; r0 < rows; r0 += 16)                                          \
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {                                      \
          const int64_t r1 = r0 + 16 < rows ? r0 + 16 : rows, c1 = c0 + 16 < cols ? c0 + 16 : cols; \
          for (int64_t c = c0; c < c1; c++)                                              \
            for (int64_t r = r0; r < r1; r++) b[c * rows + r] = a[r * cols + c];         \
        }                                                                                \
    }                                                                                    \
  } while (0)
#if defined(__x86_64__)
  if (es == 1) {   /* bytes (quantized activations): 8 x 8 blocks in registers */
    for (int64_t n = 0; n < N; n++) {
      const uint8_t *a = (const uint8_t *)sp + n * rows * cols;
      uint8_t *b = (uint8_t *)dp + n * rows * cols;
      int64_t r0 = 0;
      for (; r0 + 8 <= rows; r0 += 8) {
        int64_t c0 = 0;
        for (; c0 + 8 <= cols; c0 += 8) tr8x8_u8(a + r0 * cols + c0, cols, b + c0 * rows + r0, rows);
        for (int64_t c = c0; c < cols; c++)
          for (int64_t r = r0; r < r0 + 8; r++) b[c * rows + r] = a[r * cols + c];
      }
      for (int64_t r = r0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) b[c * rows + r] = a[r * cols + c];
    }
    return true;
  }
#endif
  if (es == 1) TR(uint8_t);
  else if (es == 2) TR(uint16_t);
  else if (es == 4) TR(uint32_t);
  else TR(uint64_t);
#undef TR
  return true;
}

of_status of_copy_data(of_tensor *dst, of_tensor *src) {
  OF_CHECK(of_copy_fits(dst->shape, dst->ndim, src->shape, src->ndim));
  if (of_dev(dst) == OF_CPU && of_dev(src) == OF_CPU && copy_nhwc_nchw(dst, src)) {
    of_bump_version(dst);
    return OF_OK;
  }
  if (of_dev(dst) != OF_CPU || of_dev(src) != OF_CPU) {
    if (of_dev(dst) != of_dev(src)) return of_copy_across(dst, src);
    const of_device_ops *o = of_device_ops_for("copy_", of_dev(dst));
    if (!o) return OF_ERR_DEVICE;
    of_device_last_op = "copy_";
    OF_CHECK(o->copy(dst, src));
    of_bump_version(dst);
    return OF_OK;
  }
  of_iter it;
  of_tensor *ops[2] = {dst, src};
  OF_CHECK(of_iter_init(&it, ops, 2, dst->shape, dst->ndim));
  int a = native_index(dst->dtype), b = native_index(src->dtype);
  slow_ctx ctx = {dst->dtype, src->dtype};
  if (a >= 0 && b >= 0 && !needs_saturation(dst, src))
    of_iter_run(&it, conv_table[a][b], NULL, true);
  else if (dst->dtype == src->dtype && dst->dtype == OF_COMPLEX128)
    of_iter_run(&it, copy_bits128, NULL, true);
  else if (dst->dtype == src->dtype && dst->dtype == OF_COMPLEX64)
    of_iter_run(&it, copy_bits64, NULL, true);
  else if (of_dtype_is_complex(dst->dtype) || of_dtype_is_complex(src->dtype))
    of_iter_run(&it, conv_complex, &ctx, true);
  else if (dst->dtype == src->dtype)   /* half to half: move the bits */
    of_iter_run(&it, copy_bits16, NULL, true);
  else if (dst->dtype == OF_BFLOAT16 && src->dtype == OF_FLOAT32)
    of_iter_run(&it, conv_bf16_float, NULL, true);
  else if (dst->dtype == OF_FLOAT32 && src->dtype == OF_BFLOAT16)
    of_iter_run(&it, conv_float_bf16, NULL, true);
  else
    of_iter_run(&it, conv_slow, &ctx, true);
  of_bump_version(dst);
  return OF_OK;
}

of_status of_clone_data(of_tensor *t, of_tensor **out) {
  of_tensor *c;
  OF_CHECK(of_tensor_new(t->shape, t->ndim, t->dtype, of_tensor_device(t), &c));
  of_status st = of_copy_data(c, t);
  if (st != OF_OK) {
    of_tensor_release(c);
    return st;
  }
  c->storage->version = 0;
  *out = c;
  return OF_OK;
}

of_status of_dense(of_tensor *t, of_dtype dt, of_tensor **out) {
  *out = NULL;
  if (!t) return OF_OK;
  if (t->dtype == dt && of_tensor_is_contiguous(t)) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  if (t->dtype == dt) return of_clone_data(t, out);
  /* not of_cast_data: that keeps a channels-last input channels-last, and
   * callers read the result as contiguous (a channels-last bfloat16
   * batch_norm once normalised the wrong elements) */
  of_tensor *c;
  OF_CHECK(of_tensor_new(t->shape, t->ndim, dt, of_tensor_device(t), &c));
  of_status st = of_copy_data(c, t);
  if (st != OF_OK) {
    of_tensor_release(c);
    return st;
  }
  c->storage->version = 0;
  *out = c;
  return OF_OK;
}

of_status of_contiguous_data(of_tensor *t, of_tensor **out) {
  if (of_tensor_is_contiguous(t)) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  return of_clone_data(t, out);
}

of_status of_cast_data(of_tensor *t, of_dtype dt, of_tensor **out) {
  if (dt < 0 || dt >= OF_NUM_DTYPES) return of_fail(OF_ERR_DTYPE, "to: unknown dtype %d", (int)dt);
  if (t->dtype == dt) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  of_tensor *c;
  /* a cast keeps the memory format (PyTorch's preserve_format) */
  if (of_prefers_channels_last(t))
    OF_CHECK(of_tensor_new_channels_last(t->shape, t->ndim, dt, of_tensor_device(t), &c));
  else
    OF_CHECK(of_tensor_new(t->shape, t->ndim, dt, of_tensor_device(t), &c));
  of_status st = of_copy_data(c, t);
  if (st != OF_OK) {
    of_tensor_release(c);
    return st;
  }
  c->storage->version = 0;
  *out = c;
  return OF_OK;
}

/* ---- memory formats ---- */

static void channels_last_strides(const int64_t *shape, int32_t ndim, int64_t *st) {
  /* memory order N, spatial..., C */
  int64_t acc = 1;
  st[1] = acc;
  acc *= shape[1];
  for (int32_t d = ndim - 1; d >= 2; d--) {
    st[d] = acc;
    acc *= shape[d];
  }
  st[0] = acc;
}

bool of_strides_channels_last(const int64_t *shape, const int64_t *strides, int32_t ndim) {
  if (ndim != 4 && ndim != 5) return false;
  int64_t st[OF_MAX_DIMS];
  channels_last_strides(shape, ndim, st);
  for (int32_t d = 0; d < ndim; d++)
    if (shape[d] != 1 && strides[d] != st[d]) return false;
  return true;
}

static bool strides_contiguous(const int64_t *shape, const int64_t *strides, int32_t ndim) {
  int64_t s = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    if (shape[i] != 1 && strides[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

bool of_layout_wants_channels_last(const of_layout_ref *ops, int32_t n, const int64_t *shape,
                                   int32_t ndim) {
  if (ndim != 4 && ndim != 5) return false;
  for (int32_t i = 0; i < n; i++) {
    const of_layout_ref *t = &ops[i];
    if (!t->shape || t->ndim != ndim) continue;
    bool full = true;
    for (int32_t d = 0; full && d < ndim; d++) full = t->shape[d] == shape[d];
    if (!full) continue;
    bool contig = strides_contiguous(t->shape, t->strides, ndim);
    if (!contig && of_strides_channels_last(t->shape, t->strides, ndim)) return true;
    if (contig) return false;
  }
  return false;
}

bool of_tensors_want_channels_last(of_tensor *const *ins, int32_t n, const int64_t *shape,
                                   int32_t ndim) {
  of_layout_ref r[16];
  if (n > 16) n = 16;   /* elementwise ops and fused nodes take at most 16 */
  for (int32_t i = 0; i < n; i++)
    r[i] = ins[i] ? (of_layout_ref){ins[i]->shape, ins[i]->strides, ins[i]->ndim}
                  : (of_layout_ref){NULL, NULL, 0};
  return of_layout_wants_channels_last(r, n, shape, ndim);
}

bool of_is_channels_last(const of_tensor *t) {
  return t && of_strides_channels_last(t->shape, t->strides, t->ndim);
}

bool of_prefers_channels_last(const of_tensor *t) {
  return of_is_channels_last(t) && !of_tensor_is_contiguous(t);
}

of_status of_tensor_new_channels_last(const int64_t *shape, int32_t ndim, of_dtype dt,
                                      of_device dev, of_tensor **out) {
  if (ndim != 4 && ndim != 5) return of_tensor_new(shape, ndim, dt, dev, out);
  of_tensor *base;
  OF_CHECK(of_tensor_new(shape, ndim, dt, dev, &base));
  int64_t st[OF_MAX_DIMS];
  channels_last_strides(shape, ndim, st);
  of_tensor *v = of_tensor_alias(base, shape, st, ndim, 0);
  of_tensor_release(base);
  if (!v) return of_fail(OF_ERR_OOM, "channels_last: out of memory");
  *out = v;
  return OF_OK;
}

of_status of_dense_format(of_tensor *t, bool cl, of_dtype dt, of_tensor **out) {
  *out = NULL;
  if (!t) return OF_OK;
  if (!cl || (t->ndim != 4 && t->ndim != 5)) return of_dense(t, dt, out);
  if (t->dtype == dt && of_is_channels_last(t)) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  of_tensor *r;
  OF_CHECK(of_tensor_new_channels_last(t->shape, t->ndim, dt, of_dev(t), &r));
  of_status st = of_copy_data(r, t);
  if (st != OF_OK) {
    of_tensor_release(r);
    return st;
  }
  *out = r;
  return OF_OK;
}

bool of_nhwc_enabled(void) {
  const char *e = getenv("ONEFLOW_ENABLE_NHWC");
  return e && *e && strcmp(e, "0") != 0 && strcmp(e, "false") != 0;
}
