/* dtype.c -- dtype facts, promotion, and scalar conversions. */
#include "../internal.h"
#include <math.h>

static const char *const names[OF_NUM_DTYPES] = {
    "bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64",
    "int16", "uint16", "uint32", "uint64", "complex64", "complex128"};
static const int32_t sizes[OF_NUM_DTYPES] = {1, 1, 1, 4, 8, 2, 2, 4, 8, 2, 2, 4, 8, 8, 16};

static bool valid(of_dtype t) { return t >= 0 && t < OF_NUM_DTYPES; }

const char *of_dtype_name(of_dtype t) { return valid(t) ? names[t] : "invalid"; }
int32_t of_dtype_size(of_dtype t) { return valid(t) ? sizes[t] : 0; }
int32_t of_dtype_is_floating(of_dtype t) { return t >= OF_FLOAT16 && t <= OF_FLOAT64; }
int32_t of_dtype_is_complex(of_dtype t) { return t == OF_COMPLEX64 || t == OF_COMPLEX128; }
bool of_dtype_is_int(of_dtype t) {
  return (t >= OF_UINT8 && t <= OF_INT64) || (t >= OF_INT16 && t <= OF_UINT64);
}
bool of_dtype_is_unsigned(of_dtype t) {
  return t == OF_UINT8 || t == OF_UINT16 || t == OF_UINT32 || t == OF_UINT64;
}

/* Position in PyTorch's lattice bool < uint8 < int8 < int16 < int32 < int64
 * < float16 < bfloat16 < float32 < float64 < complex64 < complex128; the
 * "barebones" unsigned types uint16/32/64 stand outside it (rank -1). */
static int rank(of_dtype t) {
  static const int r[OF_NUM_DTYPES] = {0, 1, 2, 4, 5, 6, 7, 8, 9, 3, -1, -1, -1, 10, 11};
  return r[t];
}

/* PyTorch 2's table: uint8 with int8 goes to int16, float16 with bfloat16
 * to float32; uint16/32/64 promote only with themselves and with floats
 * (to the float), anything else has no common type (-1). */
of_dtype of_promote_types(of_dtype a, of_dtype b) {
  if (!valid(a) || !valid(b)) return -1;
  if (a == b) return a;
  if ((a == OF_UINT8 && b == OF_INT8) || (a == OF_INT8 && b == OF_UINT8)) return OF_INT16;
  if ((a == OF_FLOAT16 && b == OF_BFLOAT16) || (a == OF_BFLOAT16 && b == OF_FLOAT16))
    return OF_FLOAT32;
  /* complex64 with float64 is complex128 (PyTorch): the wider of the parts */
  if ((a == OF_COMPLEX64 && b == OF_FLOAT64) || (a == OF_FLOAT64 && b == OF_COMPLEX64))
    return OF_COMPLEX128;
  if (of_dtype_is_complex(a) || of_dtype_is_complex(b)) {
    if (of_dtype_is_complex(a) && of_dtype_is_complex(b)) return rank(a) > rank(b) ? a : b;
    return of_dtype_is_complex(a) ? a : b;
  }
  int ra = rank(a), rb = rank(b);
  if (ra < 0 || rb < 0) {
    if (of_dtype_is_floating(a)) return a;
    if (of_dtype_is_floating(b)) return b;
    return -1;
  }
  return ra > rb ? a : b;
}

of_status of_promote_for(const char *op, of_dtype a, of_dtype b, of_dtype *out) {
  *out = of_promote_types(a, b);
  if (*out >= 0) return OF_OK;
  return of_fail(OF_ERR_DTYPE, "%s: no common dtype for %s and %s (uint16, uint32 and uint64 "
                 "promote only with themselves and floating types, as in PyTorch)", op,
                 of_dtype_name(a), of_dtype_name(b));
}

/* IEEE half, round to nearest even (including subnormals). */
uint16_t of_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x7fffffu;
  int32_t exp = (int32_t)((x >> 23) & 0xff);
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

float of_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      float f = ldexpf((float)mant, -24);
      memcpy(&x, &f, 4);
      x |= sign;
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

double of_load_double(const void *p, of_dtype dt) {
  switch (dt) {
    case OF_BOOL: return *(const bool *)p ? 1.0 : 0.0;
    case OF_UINT8: return *(const uint8_t *)p;
    case OF_INT8: return *(const int8_t *)p;
    case OF_INT32: return *(const int32_t *)p;
    case OF_INT64: return (double)*(const int64_t *)p;
    case OF_FLOAT16: return of_f16_to_f32(*(const uint16_t *)p);
    case OF_BFLOAT16: return of_bf16_to_f32(*(const uint16_t *)p);
    case OF_FLOAT32: return *(const float *)p;
    case OF_FLOAT64: return *(const double *)p;
    case OF_INT16: return *(const int16_t *)p;
    case OF_UINT16: return *(const uint16_t *)p;
    case OF_UINT32: return *(const uint32_t *)p;
    case OF_UINT64: return (double)*(const uint64_t *)p;
    case OF_COMPLEX64: return *(const float *)p;     /* the real part */
    case OF_COMPLEX128: return *(const double *)p;
    default: return 0;
  }
}

/* Float to int conversion of NaN/out-of-range values is UB in C; saturate. */
static int64_t to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}
/* uint64: values from 2^63 up do not fit int64; below 0 wrap as to_i64 does. */
static uint64_t to_u64(double v) {
  if (v >= 18446744073709551615.0) return UINT64_MAX;
  if (v >= 9223372036854775808.0) return (uint64_t)v;
  return (uint64_t)to_i64(v);
}

void of_store_double(void *p, of_dtype dt, double v) {
  switch (dt) {
    case OF_BOOL: *(bool *)p = v != 0; break;
    case OF_UINT8: *(uint8_t *)p = (uint8_t)to_i64(v); break;
    case OF_INT8: *(int8_t *)p = (int8_t)to_i64(v); break;
    case OF_INT32: *(int32_t *)p = (int32_t)to_i64(v); break;
    case OF_INT64: *(int64_t *)p = to_i64(v); break;
    case OF_FLOAT16: *(uint16_t *)p = of_f32_to_f16((float)v); break;
    case OF_BFLOAT16: *(uint16_t *)p = of_f32_to_bf16((float)v); break;
    case OF_FLOAT32: *(float *)p = (float)v; break;
    case OF_FLOAT64: *(double *)p = v; break;
    case OF_INT16: *(int16_t *)p = (int16_t)to_i64(v); break;
    case OF_UINT16: *(uint16_t *)p = (uint16_t)to_i64(v); break;
    case OF_UINT32: *(uint32_t *)p = (uint32_t)to_i64(v); break;
    case OF_UINT64: *(uint64_t *)p = to_u64(v); break;
    case OF_COMPLEX64: ((float *)p)[0] = (float)v; ((float *)p)[1] = 0; break;
    case OF_COMPLEX128: ((double *)p)[0] = v; ((double *)p)[1] = 0; break;
    default: break;
  }
}
