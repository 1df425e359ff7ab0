/* dtype.c -- dtype facts, promotion, and scalar conversions. */
#include "../internal.h"
#include <math.h>

static const char *const names[OF_NUM_DTYPES] = {
    "bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
static const int32_t sizes[OF_NUM_DTYPES] = {1, 1, 1, 4, 8, 2, 2, 4, 8};

static bool valid(of_dtype t) { return t >= 0 && t < OF_NUM_DTYPES; }

const char *of_dtype_name(of_dtype t) { return valid(t) ? names[t] : "invalid"; }
int32_t of_dtype_size(of_dtype t) { return valid(t) ? sizes[t] : 0; }
int32_t of_dtype_is_floating(of_dtype t) { return t >= OF_FLOAT16 && t <= OF_FLOAT64; }
bool of_dtype_is_int(of_dtype t) { return t >= OF_UINT8 && t <= OF_INT64; }

/* PyTorch's table: uint8 with int8 goes to int16, which we lack: int32.
 * float16 with bfloat16 goes to float32. */
of_dtype of_promote_types(of_dtype a, of_dtype b) {
  if (a == b) return a;
  if ((a == OF_UINT8 && b == OF_INT8) || (a == OF_INT8 && b == OF_UINT8)) return OF_INT32;
  if ((a == OF_FLOAT16 && b == OF_BFLOAT16) || (a == OF_BFLOAT16 && b == OF_FLOAT16))
    return OF_FLOAT32;
  return a > b ? a : b;
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

uint16_t of_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

float of_bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
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
    default: break;
  }
}
