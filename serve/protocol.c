/* protocol.c -- see protocol.h. */
#include "protocol.h"
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const DT_NAMES[SV_NUM_DTYPES] = {"BOOL", "UINT8", "INT8", "INT32", "INT64",
                                                    "FP16", "BF16", "FP32", "FP64", "INT16",
                                                    "UINT16", "UINT32", "UINT64"};
static const int32_t DT_SIZES[SV_NUM_DTYPES] = {1, 1, 1, 4, 8, 2, 2, 4, 8, 2, 2, 4, 8};

const char *sv_datatype_name(int32_t dt) {
  return dt >= 0 && dt < SV_NUM_DTYPES ? DT_NAMES[dt] : dt == SV_BYTES ? "BYTES" : NULL;
}
int32_t sv_dtype_size(int32_t dt) { return dt >= 0 && dt < SV_NUM_DTYPES ? DT_SIZES[dt] : 0; }

int32_t sv_datatype_code(const char *name) {
  for (int32_t i = 0; name && i < SV_NUM_DTYPES; i++)
    if (strcmp(name, DT_NAMES[i]) == 0) return i;
  return -1;
}

const char *sv_config_type_name(int32_t dt) {
  static const char *const names[SV_NUM_DTYPES] = {"TYPE_BOOL", "TYPE_UINT8", "TYPE_INT8",
                                                   "TYPE_INT32", "TYPE_INT64", "TYPE_FP16",
                                                   "TYPE_BF16", "TYPE_FP32", "TYPE_FP64",
                                                   "TYPE_INT16", "TYPE_UINT16", "TYPE_UINT32",
                                                   "TYPE_UINT64"};
  return dt >= 0 && dt < SV_NUM_DTYPES ? names[dt] : NULL;
}

int32_t sv_config_type_code(const char *name) {
  if (!name || strncmp(name, "TYPE_", 5) != 0) return -1;
  return sv_datatype_code(name + 5);
}

int64_t sv_numel(const int64_t *shape, int32_t ndim) {
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

bool sv_errorf(char *e, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e, cap, fmt, ap);
  va_end(ap);
  return false;
}

struct sv_block {
  atomic_int refs;
  char *base;          /* the allocation; the body starts inside it */
};

sv_block *sv_block_new(size_t bytes, size_t header_len, char **body) {
  enum { ALIGN = 64 };
  if (bytes > SIZE_MAX - 2 * ALIGN) return NULL;
  sv_block *b = malloc(sizeof *b);
  char *base = b ? malloc(bytes + 2 * ALIGN) : NULL;
  if (!base) {
    free(b);
    return NULL;
  }
  atomic_init(&b->refs, 1);
  b->base = base;
  /* body + header_len on a multiple of ALIGN */
  uintptr_t bin = ((uintptr_t)base + header_len % ALIGN + ALIGN - 1) / ALIGN * ALIGN;
  *body = (char *)(bin - header_len % ALIGN);
  return b;
}

void sv_block_retain(sv_block *b) { atomic_fetch_add(&b->refs, 1); }

void sv_block_release(sv_block *b) {
  if (b && atomic_fetch_sub(&b->refs, 1) == 1) {
    free(b->base);
    free(b);
  }
}

void sv_tensor_release(sv_tensor *t) {
  if (t->owner) sv_block_release(t->owner);
  else free(t->data);
  t->data = NULL;
  t->owner = NULL;
}

void sv_request_free(sv_request *r) {
  for (int32_t i = 0; i < r->nin; i++) sv_tensor_release(&r->in[i]);
  r->nin = 0;
}

/* a string member into out (cap bytes), false when absent/not a string/too long */
static bool get_str(const js_doc *d, const js_val *o, const char *key, char *out, size_t cap) {
  const js_val *v = js_get(d, o, key);
  if (!v || v->type != JS_STR || v->slen >= cap) return false;
  memcpy(out, v->s, v->slen + 1);
  return true;
}

static bool get_bool_param(const js_doc *d, const js_val *o, const char *key, bool *out) {
  const js_val *p = js_get(d, o, "parameters"), *v = js_get(d, p, key);
  if (v && v->type == JS_BOOL) *out = v->b;
  return v != NULL;
}

/* IEEE binary16 and bfloat16 from a float, rounding to nearest even as
 * numpy's astype does (what a Triton client sending JSON would have
 * computed); out-of-range values become infinities, NaN stays NaN. */
static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504 */
  if (ax < 0x38800000u) {                                  /* subnormal or zero half */
    /* adding 0.5f (whose ulp is 2^-24, the half subnormal step) rounds to
     * nearest even in the FPU; the low bits are then the half mantissa */
    float a, magic = 0.5f;
    uint32_t r;
    memcpy(&a, &ax, 4);
    a += magic;
    memcpy(&r, &a, 4);
    return (uint16_t)(sign | (r - 0x3f000000u));
  }
  uint32_t m = ax + 0xc8000fffu + ((ax >> 13) & 1u); /* rebias exponent, round to nearest even */
  return (uint16_t)(sign | (m >> 13));
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* writes element k of dt from JSON value v; false on a type mismatch */
static bool put_elem(void *data, int32_t dt, int64_t k, const js_val *v) {
  if (dt == 0) {
    if (v->type != JS_BOOL) return false;
    ((uint8_t *)data)[k] = v->b;
    return true;
  }
  if (v->type != JS_NUM) return false;
  switch (dt) {
    case 1:
      if (!v->is_int || v->i < 0 || v->i > 255) return false;
      ((uint8_t *)data)[k] = (uint8_t)v->i;
      return true;
    case 2:
      if (!v->is_int || v->i < -128 || v->i > 127) return false;
      ((int8_t *)data)[k] = (int8_t)v->i;
      return true;
    case 3:
      if (!v->is_int || v->i < INT32_MIN || v->i > INT32_MAX) return false;
      ((int32_t *)data)[k] = (int32_t)v->i;
      return true;
    case 4:
      if (!v->is_int) return false;
      ((int64_t *)data)[k] = v->i;
      return true;
    case 5: ((uint16_t *)data)[k] = float_to_half((float)v->num); return true;
    case 6: ((uint16_t *)data)[k] = float_to_bf16((float)v->num); return true;
    case 7: ((float *)data)[k] = (float)v->num; return true;
    case 8: ((double *)data)[k] = v->num; return true;
    case 9:
      if (!v->is_int || v->i < INT16_MIN || v->i > INT16_MAX) return false;
      ((int16_t *)data)[k] = (int16_t)v->i;
      return true;
    case 10:
      if (!v->is_int || v->i < 0 || v->i > UINT16_MAX) return false;
      ((uint16_t *)data)[k] = (uint16_t)v->i;
      return true;
    case 11:
      if (!v->is_int || v->i < 0 || v->i > UINT32_MAX) return false;
      ((uint32_t *)data)[k] = (uint32_t)v->i;
      return true;
    case 12:
      if (!v->is_uint) return false;
      ((uint64_t *)data)[k] = v->u;
      return true;
    default: return false;
  }
}

/* the "data" member, nested or flat, in row-major order */
static bool fill(const js_doc *d, const js_val *a, void *data, int32_t dt, int64_t numel,
                 int64_t *k, int depth) {
  for (const js_val *c = js_first(d, a); c; c = js_next(d, c)) {
    if (c->type == JS_ARR) {
      if (depth >= JS_MAX_DEPTH || !fill(d, c, data, dt, numel, k, depth + 1)) return false;
      continue;
    }
    if (*k >= numel || !put_elem(data, dt, *k, c)) return false;
    (*k)++;
  }
  return true;
}

/* The shared memory parameters in params (an input's or a requested
 * output's): region and byte size go together, the offset is optional. */
static bool parse_shm(const js_doc *d, const js_val *params, const char *what, const char *name,
                      sv_shm_ref *ref, char *e, size_t cap) {
  const js_val *reg = js_get(d, params, "shared_memory_region");
  const js_val *size = js_get(d, params, "shared_memory_byte_size");
  const js_val *off = js_get(d, params, "shared_memory_offset");
  if (!reg && !size && !off) return true;
  if (!reg || !size)
    return sv_errorf(e, cap, "%s '%s': shared_memory_region and shared_memory_byte_size must be given "
                     "together", what, name);
  if (reg->type != JS_STR || reg->slen == 0 || reg->slen >= SV_NAME || strlen(reg->s) != reg->slen)
    return sv_errorf(e, cap, "%s '%s': shared_memory_region must be a string of 1 to %d bytes", what,
                     name, SV_NAME - 1);
  if (size->type != JS_NUM || !size->is_int || size->i < 0 ||
      (off && (off->type != JS_NUM || !off->is_int || off->i < 0)))
    return sv_errorf(e, cap, "%s '%s': shared_memory_byte_size and shared_memory_offset must be "
                     "non-negative integers", what, name);
  memcpy(ref->region, reg->s, reg->slen + 1);
  ref->byte_size = (uint64_t)size->i;
  ref->offset = off ? (uint64_t)off->i : 0;
  return true;
}

static bool parse_input(const js_doc *d, const js_val *iv, sv_tensor *t, const char *bin,
                        size_t binlen, size_t *binpos, sv_block *owner, char *e, size_t cap) {
  if (iv->type != JS_OBJ) return sv_errorf(e, cap, "each input must be an object");
  if (!get_str(d, iv, "name", t->name, sizeof t->name))
    return sv_errorf(e, cap, "an input has no \"name\" (a string of at most %d bytes)", SV_NAME - 1);
  char dtn[16];
  if (!get_str(d, iv, "datatype", dtn, sizeof dtn) || (t->dtype = sv_datatype_code(dtn)) < 0)
    return sv_errorf(e, cap, "input '%s': \"datatype\" must be one of BOOL, UINT8, UINT16, UINT32, "
               "UINT64, INT8, INT16, INT32, INT64, FP16, BF16, FP32, FP64", t->name);
  const js_val *sh = js_get(d, iv, "shape");
  if (!sh || sh->type != JS_ARR || sh->n > SV_MAX_DIMS)
    return sv_errorf(e, cap, "input '%s': \"shape\" must be an array of at most %d dims", t->name,
               SV_MAX_DIMS);
  t->ndim = sh->n;
  int64_t numel = 1;
  int32_t i = 0;
  for (const js_val *c = js_first(d, sh); c; c = js_next(d, c), i++) {
    if (c->type != JS_NUM || !c->is_int || c->i < 0 || c->i > ((int64_t)1 << 40))
      return sv_errorf(e, cap, "input '%s': shape[%d] is not a non-negative integer", t->name, (int)i);
    t->shape[i] = c->i;
    if (c->i && numel > ((int64_t)1 << 40) / c->i)
      return sv_errorf(e, cap, "input '%s': the shape is too large", t->name);
    numel *= c->i;
  }
  int32_t es = sv_dtype_size(t->dtype);
  size_t nbytes = (size_t)numel * (size_t)es;
  const js_val *params = js_get(d, iv, "parameters"), *bsz = js_get(d, params, "binary_data_size");
  const js_val *data = js_get(d, iv, "data");
  if (!parse_shm(d, params, "input", t->name, &t->shm, e, cap)) return false;
  if (t->shm.region[0]) {
    if (data || bsz)
      return sv_errorf(e, cap, "input '%s': shared memory and %s together", t->name,
                       data ? "\"data\"" : "binary_data_size");
    if (t->shm.byte_size != nbytes)
      return sv_errorf(e, cap, "input '%s': shared_memory_byte_size %llu, but shape and datatype make "
                       "%zu bytes", t->name, (unsigned long long)t->shm.byte_size, nbytes);
    t->nbytes = nbytes;
    return true;
  }
  if (bsz) {
    if (data) return sv_errorf(e, cap, "input '%s': both \"data\" and binary_data_size", t->name);
    if (!bin) return sv_errorf(e, cap, "input '%s': binary_data_size without the "
                         "Inference-Header-Content-Length header", t->name);
    if (bsz->type != JS_NUM || !bsz->is_int || bsz->i < 0)
      return sv_errorf(e, cap, "input '%s': bad binary_data_size", t->name);
    if ((uint64_t)bsz->i != nbytes)
      return sv_errorf(e, cap, "input '%s': binary_data_size %lld, but shape and datatype make %zu bytes",
                 t->name, (long long)bsz->i, nbytes);
    if (nbytes > binlen - *binpos)
      return sv_errorf(e, cap, "input '%s': the binary data is truncated (%zu bytes expected, %zu left)",
                 t->name, nbytes, binlen - *binpos);
    if (owner && (uintptr_t)(bin + *binpos) % (uintptr_t)es == 0) {
      t->data = (void *)(uintptr_t)(bin + *binpos);   /* the body's own bytes */
      t->owner = owner;
      sv_block_retain(owner);
    } else {
      t->data = malloc(nbytes ? nbytes : 1);
      if (!t->data) return sv_errorf(e, cap, "out of memory");
      memcpy(t->data, bin + *binpos, nbytes);
    }
    *binpos += nbytes;
    t->nbytes = nbytes;
    return true;
  }
  if (!data || data->type != JS_ARR)
    return sv_errorf(e, cap, "input '%s': no \"data\" array (and no binary_data_size)", t->name);
  /* a value takes at least 2 bytes of JSON: the document bounds numel */
  if (numel > d->nv)
    return sv_errorf(e, cap, "input '%s': shape has %lld elements, \"data\" fewer", t->name,
               (long long)numel);
  t->data = malloc(nbytes ? nbytes : 1);
  if (!t->data) return sv_errorf(e, cap, "out of memory");
  t->nbytes = nbytes;
  int64_t k = 0;
  if (!fill(d, data, t->data, t->dtype, numel, &k, 0) || k != numel)
    return sv_errorf(e, cap, "input '%s': \"data\" does not hold %lld values of %s (shape [%s])",
               t->name, (long long)numel, dtn, t->ndim ? "..." : "");
  return true;
}

bool sv_parse_request(const char *body, size_t n, size_t header_len, int32_t max_values,
                      sv_block *owner, sv_request *r, char *e, size_t cap) {
  memset(r, 0, sizeof *r);
  if (header_len > n)
    return sv_errorf(e, cap, "Inference-Header-Content-Length %zu is larger than the body (%zu bytes)",
               header_len, n);
  size_t jlen = header_len ? header_len : n;
  const char *bin = header_len ? body + header_len : NULL;
  size_t binlen = header_len ? n - header_len : 0, binpos = 0;
  js_doc d;
  if (!js_parse(&d, body, jlen, max_values)) {
    sv_errorf(e, cap, "%s", d.error);
    js_free(&d);
    return false;
  }
  const js_val *root = js_root(&d), *ins = js_get(&d, root, "inputs"), *outs;
  bool ok = false;
  if (!root || root->type != JS_OBJ) {
    sv_errorf(e, cap, "the request must be a JSON object");
    goto done;
  }
  const js_val *idv = js_get(&d, root, "id");
  if (idv && !get_str(&d, root, "id", r->id, sizeof r->id)) {
    sv_errorf(e, cap, "\"id\" must be a string of at most %d bytes", SV_NAME - 1);
    goto done;
  }
  if (!ins || ins->type != JS_ARR || ins->n < 1 || ins->n > SV_MAX_TENSORS) {
    sv_errorf(e, cap, "\"inputs\" must be an array of 1 to %d tensors", SV_MAX_TENSORS);
    goto done;
  }
  for (const js_val *iv = js_first(&d, ins); iv; iv = js_next(&d, iv)) {
    sv_tensor *t = &r->in[r->nin++];
    if (!parse_input(&d, iv, t, bin, binlen, &binpos, owner, e, cap)) goto done;
    for (int32_t k = 0; k < r->nin - 1; k++)
      if (strcmp(r->in[k].name, t->name) == 0) {
        sv_errorf(e, cap, "input '%s' is given twice", t->name);
        goto done;
      }
  }
  if (binpos != binlen) {
    sv_errorf(e, cap, "%zu bytes of binary data after the inputs' data", binlen - binpos);
    goto done;
  }
  get_bool_param(&d, root, "binary_data_output", &r->binary_default);
  outs = js_get(&d, root, "outputs");
  if (outs) {
    if (outs->type != JS_ARR || outs->n > SV_MAX_TENSORS) {
      sv_errorf(e, cap, "\"outputs\" must be an array of at most %d entries", SV_MAX_TENSORS);
      goto done;
    }
    for (const js_val *ov = js_first(&d, outs); ov; ov = js_next(&d, ov)) {
      int32_t k = r->nout;
      if (ov->type != JS_OBJ || !get_str(&d, ov, "name", r->out_name[k], SV_NAME)) {
        sv_errorf(e, cap, "each requested output must be an object with a \"name\"");
        goto done;
      }
      r->out_binary[k] = r->binary_default;
      get_bool_param(&d, ov, "binary_data", &r->out_binary[k]);
      r->nout++;
      const js_val *op = js_get(&d, ov, "parameters");
      if (!parse_shm(&d, op, "output", r->out_name[k], &r->out_shm[k], e, cap)) goto done;
      const js_val *cls = js_get(&d, op, "classification");
      if (cls) {
        if (cls->type != JS_NUM || !cls->is_int || cls->i < 1 || cls->i > (1 << 20)) {
          sv_errorf(e, cap, "output '%s': classification must be an integer in 1..%d", r->out_name[k], 1 << 20);
          goto done;
        }
        if (r->out_shm[k].region[0]) {
          sv_errorf(e, cap, "output '%s': classification results cannot go to shared memory", r->out_name[k]);
          goto done;
        }
        r->out_class[k] = (int32_t)cls->i;
      }
    }
  }
  ok = true;
done:
  js_free(&d);
  if (!ok) sv_request_free(r);
  return ok;
}

static float half_to_float(uint16_t h) {
  uint32_t s = (uint32_t)(h >> 15) << 31, ex = (h >> 10) & 31, m = h & 1023;
  float f;
  if (ex == 0) {
    f = ldexpf((float)m, -24);
    return s ? -f : f;
  }
  if (ex == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
  uint32_t bits = s | ((ex + 112) << 23) | (m << 13);
  memcpy(&f, &bits, 4);
  return f;
}

static double elem(const void *data, int32_t dt, int64_t k) {
  switch (dt) {
    case 0: return ((const uint8_t *)data)[k] != 0;
    case 1: return ((const uint8_t *)data)[k];
    case 2: return ((const int8_t *)data)[k];
    case 3: return ((const int32_t *)data)[k];
    case 5: return half_to_float(((const uint16_t *)data)[k]);
    case 6: {
      uint32_t bits = (uint32_t)((const uint16_t *)data)[k] << 16;
      float f;
      memcpy(&f, &bits, 4);
      return f;
    }
    case 7: return ((const float *)data)[k];
    case 8: return ((const double *)data)[k];
    case 9: return ((const int16_t *)data)[k];
    case 10: return ((const uint16_t *)data)[k];
    case 11: return ((const uint32_t *)data)[k];
    default: return 0;
  }
}

bool sv_write_response(js_out *o, const char *model, const char *version, const char *id,
                       const sv_output *outs, int32_t nout, size_t *header_len) {
  JO_LIT(o, "{\"model_name\":");
  jo_str(o, model);
  JO_LIT(o, ",\"model_version\":");
  jo_str(o, version);
  if (id && *id) {
    JO_LIT(o, ",\"id\":");
    jo_str(o, id);
  }
  JO_LIT(o, ",\"outputs\":[");
  bool any_binary = false;
  for (int32_t i = 0; i < nout; i++) {
    const sv_output *t = &outs[i];
    int64_t numel = sv_numel(t->shape, t->ndim);
    jo_fmt(o, "%s{\"name\":", i ? "," : "");
    jo_str(o, t->name);
    jo_fmt(o, ",\"datatype\":\"%s\",\"shape\":[", sv_datatype_name(t->dtype));
    for (int32_t k = 0; k < t->ndim; k++) jo_fmt(o, "%s%lld", k ? "," : "", (long long)t->shape[k]);
    JO_LIT(o, "]");
    if (t->dtype == SV_BYTES) {   /* strings: serialized, each a 4-byte length and its bytes */
      if (t->binary) {
        any_binary = true;
        jo_fmt(o, ",\"parameters\":{\"binary_data_size\":%zu}}", t->nbytes);
        continue;
      }
      JO_LIT(o, ",\"data\":[");
      const unsigned char *b = t->data;
      for (size_t at = 0, k = 0; at + 4 <= t->nbytes && !o->oom; k++) {
        uint32_t len = (uint32_t)b[at] | (uint32_t)b[at + 1] << 8 | (uint32_t)b[at + 2] << 16 |
                       (uint32_t)b[at + 3] << 24;
        at += 4;
        if (len > t->nbytes - at) break;
        char s[512];
        size_t m = len < sizeof s - 1 ? len : sizeof s - 1;
        memcpy(s, b + at, m);
        s[m] = 0;
        if (k) JO_LIT(o, ",");
        jo_str(o, s);
        at += len;
      }
      JO_LIT(o, "]}");
      continue;
    }
    if (t->shm_region) {   /* the data is in the region, as Triton's: no "data" */
      JO_LIT(o, ",\"parameters\":{\"shared_memory_region\":");
      jo_str(o, t->shm_region);
      jo_fmt(o, ",\"shared_memory_byte_size\":%lld}}", (long long)numel * sv_dtype_size(t->dtype));
      continue;
    }
    if (t->binary) {
      any_binary = true;
      jo_fmt(o, ",\"parameters\":{\"binary_data_size\":%lld}}",
             (long long)numel * sv_dtype_size(t->dtype));
      continue;
    }
    JO_LIT(o, ",\"data\":[");
    for (int64_t k = 0; k < numel && !o->oom; k++) {
      if (k) JO_LIT(o, ",");
      if (t->dtype == 0) jo_fmt(o, "%s", ((const uint8_t *)t->data)[k] ? "true" : "false");
      else if (t->dtype == 4) jo_fmt(o, "%lld", (long long)((const int64_t *)t->data)[k]);
      else if (t->dtype == 12) jo_fmt(o, "%llu", (unsigned long long)((const uint64_t *)t->data)[k]);
      else if (t->dtype == 1 || t->dtype == 2 || t->dtype == 3 || (t->dtype >= 9 && t->dtype <= 11))
        jo_fmt(o, "%.0f", elem(t->data, t->dtype, k));
      else jo_num(o, elem(t->data, t->dtype, k), t->dtype == 8 ? 17 : 9);
    }
    JO_LIT(o, "]}");
  }
  JO_LIT(o, "]}");
  *header_len = any_binary ? o->len : 0;
  for (int32_t i = 0; i < nout && any_binary; i++)
    if (outs[i].binary && !outs[i].shm_region)
      jo_raw(o, outs[i].data, outs[i].dtype == SV_BYTES
                                  ? outs[i].nbytes
                                  : (size_t)sv_numel(outs[i].shape, outs[i].ndim) *
                                        (size_t)sv_dtype_size(outs[i].dtype));
  return !o->oom;
}

typedef struct {
  double v;
  int64_t i;
} ranked;
static int by_rank(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  /* descending values, a NaN last; equal values by index */
  if (x->v != y->v) {
    if (x->v != x->v) return 1;
    if (y->v != y->v) return -1;
    return x->v > y->v ? -1 : 1;
  }
  return x->i < y->i ? -1 : x->i > y->i;
}

char *sv_classify(const void *data, int32_t dt, int64_t rows, int64_t per_row, int32_t k,
                  const char *const *labels, int32_t nlabels, size_t *nbytes) {
  if (k > per_row) k = (int32_t)per_row;
  ranked *r = malloc(sizeof *r * (size_t)(per_row > 0 ? per_row : 1));
  js_out o = {0};
  bool floating = dt == 5 || dt == 6 || dt == 7 || dt == 8;
  for (int64_t row = 0; r && row < rows && !o.oom; row++) {
    for (int64_t i = 0; i < per_row; i++) {
      int64_t at = row * per_row + i;
      r[i].i = i;
      r[i].v = dt == 4 ? (double)((const int64_t *)data)[at] : dt == 12 ? (double)((const uint64_t *)data)[at]
               : elem(data, dt, at);
    }
    qsort(r, (size_t)per_row, sizeof *r, by_rank);
    for (int32_t q = 0; q < k; q++) {
      char s[512];
      int n;
      int64_t at = row * per_row + r[q].i;
      long long idx = (long long)r[q].i;
      /* 64-bit integers exactly (a double rounds them past 2^53) */
      if (floating) n = snprintf(s, sizeof s, "%f:%lld", r[q].v, idx);
      else if (dt == 12) n = snprintf(s, sizeof s, "%llu:%lld", (unsigned long long)((const uint64_t *)data)[at], idx);
      else if (dt == 4) n = snprintf(s, sizeof s, "%lld:%lld", (long long)((const int64_t *)data)[at], idx);
      else n = snprintf(s, sizeof s, "%.0f:%lld", r[q].v, idx);
      if (r[q].i < nlabels && labels[r[q].i][0])
        n += snprintf(s + n, sizeof s - (size_t)n, ":%.400s", labels[r[q].i]);
      if (n > (int)sizeof s - 1) n = (int)sizeof s - 1;
      unsigned char len[4] = {(unsigned char)n, (unsigned char)(n >> 8), 0, 0};
      jo_raw(&o, (const char *)len, 4);
      jo_raw(&o, s, (size_t)n);
    }
  }
  free(r);
  if (!r || o.oom) {
    jo_free(&o);
    return NULL;
  }
  *nbytes = o.len;
  if (!o.p) return calloc(1, 1);   /* no rows: an empty buffer */
  return o.p;
}

void sv_write_error(js_out *o, const char *msg) {
  JO_LIT(o, "{\"error\":");
  jo_str(o, msg);
  JO_LIT(o, "}");
}
