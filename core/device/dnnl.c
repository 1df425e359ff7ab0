/* dnnl.c -- CPU convolutions through oneDNN (see dnnl.h).
 *
 * Each call describes the user's operands as they are (dims and strides:
 * contiguous or channels-last, float32 or bfloat16) and lets oneDNN pick
 * the layout it computes in (format "any": nChw8c on AVX2, nChw16c on
 * AVX-512); reorders move the operands in and the result out, converting
 * the dtype on the way when the compute dtype differs. A channels-last
 * activation is computed channels-last (no reorder).
 *
 * bfloat16: oneDNN 2.x computes in bfloat16 only on AVX-512 (avx512_core,
 * with AVX512-BF16 for speed) or AMX. Where it has no bfloat16 kernel
 * (AVX2), the primitive is made for float32 and the reorders in and out
 * convert: one pass over each operand, never a separate cast.
 *
 * Primitives (with their reorders and memory descriptors) are cached by
 * the whole descriptor, a bounded table (CACHE_SLOTS, least recently used
 * out). One mutex covers the caches and the execution: a cached primitive
 * is never freed while it runs, and two convolutions at once (graph
 * executor waves) would only share the same cores anyway. oneDNN runs on
 * OpenMP with omp_get_max_threads(), which of_set_num_threads sets.
 *
 * The weight-reorder cache: an inference forward whose caller names the
 * weight (of_dnnl_wkey: storage id, version, offset) keeps the weight
 * reordered to the compute layout (wcache, WEIGHT_SLOTS, least recently
 * used out), and the next call with the same key and layout skips that
 * reorder (ResNet-50: 25.6 M weights read and written once per forward
 * less); of_dnnl_release_cached frees them all.
 *
 * bfloat16 matmuls (of_dnnl_matmul_bf16) run on oneDNN's matmul primitive
 * where the CPU computes in bfloat16 (AVX512-BF16, AMX), with the caller's
 * strides as they are: no float32 copies of the operands. */
#include "dnnl.h"

#ifndef OF_HAVE_DNNL

bool of_dnnl_usable(void) { return false; }

int32_t of_mkldnn_is_available(void) { return 0; }

of_status of_dnnl_conv(const of_dnnl_conv_desc *d, const void *p, const void *q,
                       const void *bias, void *r, bool native_bf16,
                       const of_dnnl_wkey *wkey, bool *done) {
  (void)d, (void)p, (void)q, (void)bias, (void)r, (void)native_bf16, (void)wkey;
  *done = false;
  return OF_OK;
}

void of_dnnl_release_cached(void) {}

void of_dnnl_forget_weight(int64_t sid) { (void)sid; }

bool of_dnnl_native_bf16(void) { return false; }

of_status of_dnnl_matmul_bf16(const of_dnnl_mm_desc *d, const void *a, const void *b, void *c,
                              bool *done) {
  (void)d, (void)a, (void)b, (void)c;
  *done = false;
  return OF_OK;
}

of_status of_dnnl_gemm_s8(int64_t M, int64_t K, int64_t N, const void *a, bool a_u8,
                          const int8_t *b, int32_t *c, bool c_t, bool *done) {
  (void)M, (void)K, (void)N, (void)a, (void)a_u8, (void)b, (void)c, (void)c_t;
  *done = false;
  return OF_OK;
}

#else

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

bool of_dnnl_usable(void) { return !omp_in_parallel(); }

int32_t of_mkldnn_is_available(void) { return 1; }

enum { CACHE_SLOTS = 128 };
/* operand slots of an entry: p, q, bias (in), r (out) */
enum { OP_P = 0, OP_Q = 1, OP_B = 2, OP_R = 3, NOPS = 4 };

typedef struct {
  of_dnnl_conv_desc key;
  bool used, unsupported;       /* unsupported: oneDNN has no kernel, do not ask again */
  bool via_f32;                 /* bfloat16 operands computed in float32 (see run) */
  uint64_t tick;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t user[NOPS], comp[NOPS];
  dnnl_primitive_t reo[NOPS];   /* user -> compute (p, q, bias), compute -> user (r) */
  int arg[NOPS];                /* DNNL_ARG_* of each operand in the primitive */
} entry;

/* The weight-reorder cache: reordered weights by (weight key, compute
 * layout), apart from the primitives (layers of one shape share a
 * primitive but not their weights: ResNet-50 has 53 convolutions and 27
 * shapes). A slot with the weight's storage and offset but an old version
 * is the one replaced, so a weight updated between calls keeps one copy. */
enum { WEIGHT_SLOTS = 256 };
typedef struct {
  bool used, valid;             /* valid: the reorder into buf has run */
  of_dnnl_wkey key;
  dnnl_memory_desc_t md;
  void *buf;
  int64_t bytes;
  uint64_t tick;
} wslot;
static wslot wcache[WEIGHT_SLOTS];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static entry cache[CACHE_SLOTS];
static uint64_t ticks;

/* the engine and stream, made on first use (under lock); false: none */
static bool have_engine(void) {
  if (engine) return true;
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
    if (engine) dnnl_engine_destroy(engine);
    engine = NULL;
    return false;
  }
  return true;
}

static void wslot_free(wslot *w) {
  free(w->buf);
  memset(w, 0, sizeof *w);
}

static void entry_free(entry *e) {
  if (e->prim) dnnl_primitive_destroy(e->prim);
  for (int i = 0; i < NOPS; i++)
    if (e->reo[i]) dnnl_primitive_destroy(e->reo[i]);
  memset(e, 0, sizeof *e);
}

static dnnl_data_type_t dnnl_dt(int32_t dt) { return dt == OF_BFLOAT16 ? dnnl_bf16 : dnnl_f32; }

/* activation [N, C, spatial...] with the caller's strides */
static dnnl_status_t act_md(dnnl_memory_desc_t *md, const of_dnnl_conv_desc *d, int64_t C,
                            const int64_t *sp, const int64_t *st, dnnl_data_type_t t) {
  dnnl_dims_t dims, strides;
  int nd = d->nsp + 2;
  dims[0] = d->N, dims[1] = C;
  for (int i = 0; i < d->nsp; i++) dims[2 + i] = sp[i];
  for (int i = 0; i < nd; i++) strides[i] = st[i];
  return dnnl_memory_desc_init_by_strides(md, nd, dims, t, strides);
}

/* weight [CO, CI/G, k...], dense; as [G, CO/G, CI/G, k...] when grouped */
static dnnl_status_t wei_md(dnnl_memory_desc_t *md, const of_dnnl_conv_desc *d,
                            dnnl_data_type_t t, bool any) {
  dnnl_dims_t dims;
  int nd = 0;
  if (d->groups > 1) dims[nd++] = d->groups;
  dims[nd++] = d->CO / d->groups;
  dims[nd++] = d->CI / d->groups;
  for (int i = 0; i < d->nsp; i++) dims[nd++] = d->k[i];
  if (any) return dnnl_memory_desc_init_by_tag(md, nd, dims, t, dnnl_format_tag_any);
  dnnl_dims_t strides;
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
  return dnnl_memory_desc_init_by_strides(md, nd, dims, t, strides);
}

/* channels-last dense strides for [N, C, sp...] */
static bool is_channels_last(const of_dnnl_conv_desc *d, int64_t C, const int64_t *sp,
                             const int64_t *st) {
  if (d->nsp < 2) return false;
  int64_t s = C;
  if (st[1] != 1) return false;
  for (int i = d->nsp - 1; i >= 0; i--) {
    if (st[2 + i] != s) return false;
    s *= sp[i];
  }
  return st[0] == s;
}

/* The operation's descriptor for compute dtype t. Activations are "any"
 * unless the caller's are channels-last (then they stay so). */
static dnnl_status_t op_desc(dnnl_convolution_desc_t *cd, const of_dnnl_conv_desc *d,
                             dnnl_prop_kind_t kind_fwd, int kind, dnnl_data_type_t t) {
  dnnl_memory_desc_t src, wei, bia, dst;
  const int64_t *xs = kind == OF_DNNL_FWD ? d->ps : kind == OF_DNNL_BWD_DATA ? d->rs : d->ps;
  const int64_t *ys = kind == OF_DNNL_FWD ? d->rs : kind == OF_DNNL_BWD_DATA ? d->ps : d->qs;
  bool cl = is_channels_last(d, d->CI, d->in, xs) && is_channels_last(d, d->CO, d->out, ys);
  dnnl_dims_t xd = {d->N, d->CI}, yd = {d->N, d->CO};
  for (int i = 0; i < d->nsp; i++) xd[2 + i] = d->in[i], yd[2 + i] = d->out[i];
  int nd = d->nsp + 2;
  dnnl_format_tag_t tag = !cl ? dnnl_format_tag_any
                              : d->nsp == 2 ? dnnl_nhwc : dnnl_ndhwc;
  dnnl_status_t s;
  if ((s = dnnl_memory_desc_init_by_tag(&src, nd, xd, t, tag)) != dnnl_success) return s;
  if ((s = dnnl_memory_desc_init_by_tag(&dst, nd, yd, t, tag)) != dnnl_success) return s;
  if ((s = wei_md(&wei, d, t, true)) != dnnl_success) return s;
  dnnl_dims_t bd = {d->CO};
  if ((s = dnnl_memory_desc_init_by_tag(&bia, 1, bd, t, dnnl_format_tag_any)) != dnnl_success)
    return s;
  dnnl_dims_t strides, dil, pl, pr;
  for (int i = 0; i < d->nsp; i++) {
    strides[i] = d->stride[i];
    dil[i] = d->dil[i] - 1;
    pl[i] = d->pad[i];
    pr[i] = (d->out[i] - 1) * d->stride[i] + (d->k[i] - 1) * d->dil[i] + 1 - d->in[i] - d->pad[i];
  }
  dnnl_alg_kind_t alg = dnnl_convolution_direct;
  if (kind == OF_DNNL_FWD || kind_fwd != dnnl_prop_kind_undef)
    return dnnl_dilated_convolution_forward_desc_init(
        cd, kind_fwd == dnnl_prop_kind_undef ? dnnl_forward_inference : kind_fwd, alg, &src,
        &wei, d->has_bias ? &bia : NULL, &dst, strides, dil, pl, pr);
  if (kind == OF_DNNL_BWD_DATA)
    return dnnl_dilated_convolution_backward_data_desc_init(cd, alg, &src, &wei, &dst, strides,
                                                            dil, pl, pr);
  return dnnl_dilated_convolution_backward_weights_desc_init(cd, alg, &src, &wei, NULL, &dst,
                                                             strides, dil, pl, pr);
}

/* The primitive descriptor of d computed in dtype t (NULL: no kernel). */
static dnnl_primitive_desc_t make_pd(const of_dnnl_conv_desc *d, dnnl_data_type_t t) {
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd = NULL, hint = NULL;
  if (d->kind != OF_DNNL_FWD) {
    /* backward primitives take the forward one as a hint */
    of_dnnl_conv_desc f = *d;
    f.kind = OF_DNNL_FWD;
    f.has_bias = 0;
    if (d->kind == OF_DNNL_BWD_DATA) memcpy(f.ps, d->rs, sizeof f.ps), memcpy(f.rs, d->ps, sizeof f.rs);
    else memcpy(f.rs, d->qs, sizeof f.rs);
    if (op_desc(&cd, &f, dnnl_forward_training, OF_DNNL_FWD, t) != dnnl_success) return NULL;
    if (dnnl_primitive_desc_create(&hint, &cd, NULL, engine, NULL) != dnnl_success) return NULL;
  }
  /* the forward's post-ops: the residual sum, then the activation */
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  if (d->kind == OF_DNNL_FWD && (d->post_sum || d->post_act)) {
    bool ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
              dnnl_post_ops_create(&ops) == dnnl_success &&
              (!d->post_sum || dnnl_post_ops_append_sum(ops, 1.0f) == dnnl_success) &&
              (d->post_act != OF_DNNL_ACT_CLIP ||
               dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_clip, d->act_lo, d->act_hi) ==
                   dnnl_success) &&
              dnnl_primitive_attr_set_post_ops(attr, ops) == dnnl_success;
    if (ops) dnnl_post_ops_destroy(ops);
    if (!ok) {
      if (attr) dnnl_primitive_attr_destroy(attr);
      return NULL;
    }
  }
  if (op_desc(&cd, d, dnnl_prop_kind_undef, d->kind, t) == dnnl_success &&
      dnnl_primitive_desc_create(&pd, &cd, attr, engine, hint) != dnnl_success)
    pd = NULL;
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (hint) dnnl_primitive_desc_destroy(hint);
  /* oneDNN's reference kernels ("ref:any", plain loops) are far slower than
   * the im2col path, and its bfloat16 one than float32 conversion */
  const char *impl = NULL;
  if (pd && (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
             !impl || !strncmp(impl, "ref", 3))) {
    dnnl_primitive_desc_destroy(pd);
    pd = NULL;
  }
  return pd;
}

/* Fills e (key set) for d; false when oneDNN has no kernel. */
static bool entry_init(entry *e, const of_dnnl_conv_desc *d) {
  dnnl_data_type_t ut = dnnl_dt(d->dt);
  dnnl_primitive_desc_t pd = make_pd(d, ut);
  if (!pd && ut == dnnl_bf16) {   /* no bfloat16 kernel on this CPU: float32 */
    pd = make_pd(d, dnnl_f32);
    e->via_f32 = true;
    ut = dnnl_f32;
  }
  if (!pd) return false;
  /* the user's operands and their DNNL_ARG_* / queried compute descriptors */
  dnnl_memory_desc_t *u = e->user;
  bool ok = true;
  dnnl_query_t qp, qq, qb = dnnl_query_weights_md, qr;
  if (d->kind == OF_DNNL_FWD) {
    ok = act_md(&u[OP_P], d, d->CI, d->in, d->ps, ut) == dnnl_success &&
         wei_md(&u[OP_Q], d, ut, false) == dnnl_success &&
         act_md(&u[OP_R], d, d->CO, d->out, d->rs, ut) == dnnl_success;
    e->arg[OP_P] = DNNL_ARG_SRC, e->arg[OP_Q] = DNNL_ARG_WEIGHTS, e->arg[OP_R] = DNNL_ARG_DST;
    qp = dnnl_query_src_md, qq = dnnl_query_weights_md, qr = dnnl_query_dst_md;
  } else if (d->kind == OF_DNNL_BWD_DATA) {
    ok = act_md(&u[OP_P], d, d->CO, d->out, d->ps, ut) == dnnl_success &&
         wei_md(&u[OP_Q], d, ut, false) == dnnl_success &&
         act_md(&u[OP_R], d, d->CI, d->in, d->rs, ut) == dnnl_success;
    e->arg[OP_P] = DNNL_ARG_DIFF_DST, e->arg[OP_Q] = DNNL_ARG_WEIGHTS;
    e->arg[OP_R] = DNNL_ARG_DIFF_SRC;
    qp = dnnl_query_diff_dst_md, qq = dnnl_query_weights_md, qr = dnnl_query_diff_src_md;
  } else {
    ok = act_md(&u[OP_P], d, d->CI, d->in, d->ps, ut) == dnnl_success &&
         act_md(&u[OP_Q], d, d->CO, d->out, d->qs, ut) == dnnl_success &&
         wei_md(&u[OP_R], d, ut, false) == dnnl_success;
    e->arg[OP_P] = DNNL_ARG_SRC, e->arg[OP_Q] = DNNL_ARG_DIFF_DST;
    e->arg[OP_R] = DNNL_ARG_DIFF_WEIGHTS;
    qp = dnnl_query_src_md, qq = dnnl_query_diff_dst_md, qr = dnnl_query_diff_weights_md;
  }
  e->arg[OP_B] = DNNL_ARG_BIAS;
  if (d->has_bias) {
    dnnl_dims_t bd = {d->CO};
    ok = ok && dnnl_memory_desc_init_by_tag(&u[OP_B], 1, bd, ut, dnnl_x) == dnnl_success;
  }
  if (ok) {
    e->comp[OP_P] = *dnnl_primitive_desc_query_md(pd, qp, 0);
    e->comp[OP_Q] = *dnnl_primitive_desc_query_md(pd, qq, 0);
    e->comp[OP_R] = *dnnl_primitive_desc_query_md(pd, qr, 0);
    if (d->has_bias) e->comp[OP_B] = *dnnl_primitive_desc_query_md(pd, qb, 1);
    ok = dnnl_primitive_create(&e->prim, pd) == dnnl_success;
  }
  dnnl_primitive_desc_destroy(pd);
  for (int i = 0; ok && i < NOPS; i++) {
    if (i == OP_B && !d->has_bias) continue;
    if (dnnl_memory_desc_equal(&u[i], &e->comp[i])) continue;
    const dnnl_memory_desc_t *from = i == OP_R ? &e->comp[i] : &u[i];
    const dnnl_memory_desc_t *to = i == OP_R ? &u[i] : &e->comp[i];
    dnnl_primitive_desc_t rpd;
    ok = dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine, NULL) ==
         dnnl_success;
    if (!ok) break;
    ok = dnnl_primitive_create(&e->reo[i], rpd) == dnnl_success;
    dnnl_primitive_desc_destroy(rpd);
  }
  return ok;
}

/* The cache entry for d (made on a miss); NULL only when out of setup. */
static entry *lookup(const of_dnnl_conv_desc *d) {
  entry *victim = &cache[0];
  for (int i = 0; i < CACHE_SLOTS; i++) {
    entry *e = &cache[i];
    if (e->used && memcmp(&e->key, d, sizeof *d) == 0) {
      e->tick = ++ticks;
      return e;
    }
    if (!e->used) victim = e;
    else if (victim->used && e->tick < victim->tick) victim = e;
  }
  entry_free(victim);
  victim->key = *d;
  victim->used = true;
  victim->tick = ++ticks;
  if (!entry_init(victim, d)) {
    entry_free(victim);
    victim->key = *d;
    victim->used = true;
    victim->unsupported = true;
    victim->tick = ticks;
  }
  return victim;
}

/* bfloat16 <-> float32 (round to nearest even, NaNs stay NaN), as
 * core/tensor/dtype.c's, inlined: oneDNN's own bfloat16 reorders on AVX2
 * are scalar loops ("simple:any"), ~50x slower than these. Plain loops
 * (no `simd` clause): the compiler vectorises them, and clang refuses a
 * `simd` it cannot honour (-Wpass-failed under -Werror). */
static void bf16_to_f32(const uint16_t *s, float *d, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 32768) num_threads(of_threads())
  for (int64_t i = 0; i < n; i++) {
    uint32_t x = (uint32_t)s[i] << 16;
    memcpy(&d[i], &x, 4);
  }
}

static void f32_to_bf16(const float *s, uint16_t *d, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 32768) num_threads(of_threads())
  for (int64_t i = 0; i < n; i++) {
    uint32_t x;
    memcpy(&x, &s[i], 4);
    uint32_t r = x + 0x7fffu + ((x >> 16) & 1);
    d[i] = (x & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((x >> 16) | 0x40) : (uint16_t)(r >> 16);
  }
}

/* The slot for weight k in layout md (*hit: already reordered there); NULL
 * when out of memory. */
static wslot *wslot_get(const of_dnnl_wkey *k, const dnnl_memory_desc_t *md, bool *hit) {
  *hit = false;
  wslot *victim = NULL, *lru = NULL;
  for (int i = 0; i < WEIGHT_SLOTS; i++) {
    wslot *w = &wcache[i];
    if (!w->used) {
      if (!victim) victim = w;
      continue;
    }
    bool same_place = w->key.sid == k->sid && w->key.offset == k->offset &&
                      dnnl_memory_desc_equal(&w->md, md);
    if (same_place && w->key.version == k->version && w->valid) {
      w->tick = ++ticks;
      *hit = true;
      return w;
    }
    if (same_place) victim = w;   /* an older version of this weight */
    if (!lru || w->tick < lru->tick) lru = w;
  }
  wslot *w = victim ? victim : lru;
  /* plain heap memory, not of_alloc: a kept weight made while a compiled
   * graph runs must not come from (or shift) the graph's arena plan */
  int64_t nb = ((int64_t)dnnl_memory_desc_get_size(md) + 63) / 64 * 64;
  if (nb < 64) nb = 64;
  if (w->buf && w->bytes != nb) wslot_free(w);
  if (!w->buf) {
    w->buf = aligned_alloc(64, (size_t)nb);
    if (!w->buf) {
      memset(w, 0, sizeof *w);
      of_fail(OF_ERR_OOM, "conv (oneDNN): out of memory keeping a reordered weight (%lld bytes)",
              (long long)nb);
      return NULL;
    }
    w->bytes = nb;
  }
  w->used = true;
  w->valid = false;
  w->key = *k;
  w->md = *md;
  w->tick = ++ticks;
  return w;
}

/* wkey: the weight's identity when its reordered copy may be kept (forward,
 * a weight reorder, no float32 detour); NULL: reorder into a scratch buffer */
static of_status run(entry *e, const void *uptr[NOPS], bool has_bias, const of_dnnl_wkey *wkey) {
  dnnl_memory_t um[NOPS] = {0}, cm[NOPS] = {0};
  void *buf[NOPS] = {0}, *fbuf[NOPS] = {0};
  int64_t bytes[NOPS] = {0}, fbytes[NOPS] = {0};
  const void *ptr[NOPS] = {uptr[0], uptr[1], uptr[2], uptr[3]};
  bool fresh[NOPS] = {false, false, false, false};   /* compute copy already made */
  wslot *ws = NULL;                                   /* the kept weight's slot */
  of_status st = OF_OK;
  dnnl_exec_arg_t args[NOPS];
  int nargs = 0;
  for (int i = 0; i < NOPS && st == OF_OK; i++) {
    if (i == OP_B && !has_bias) continue;
    if (e->via_f32) {   /* the user's bfloat16 operand as a float32 one */
      fbytes[i] = (int64_t)dnnl_memory_desc_get_size(&e->user[i]);
      fbuf[i] = of_alloc(OF_CPU, fbytes[i] > 0 ? fbytes[i] : 1);
      if (!fbuf[i]) {
        st = OF_ERR_OOM;
        break;
      }
      if (i != OP_R) bf16_to_f32(uptr[i], fbuf[i], fbytes[i] / 4);
      ptr[i] = fbuf[i];
    }
    if (dnnl_memory_create(&um[i], &e->user[i], engine, (void *)ptr[i]) != dnnl_success) {
      st = of_fail(OF_ERR_OOM, "conv (oneDNN): cannot make a memory object");
      break;
    }
    dnnl_memory_t use = um[i];
    if (e->reo[i]) {
      void *into;
      if (i == OP_Q && wkey) {   /* the kept reordered weight */
        ws = wslot_get(wkey, &e->comp[i], &fresh[i]);
        if (!ws) {
          st = OF_ERR_OOM;
          break;
        }
        into = ws->buf;
      } else {
        bytes[i] = (int64_t)dnnl_memory_desc_get_size(&e->comp[i]);
        buf[i] = of_alloc(OF_CPU, bytes[i] > 0 ? bytes[i] : 1);
        if (!buf[i]) {
          st = OF_ERR_OOM;
          break;
        }
        into = buf[i];
      }
      if (dnnl_memory_create(&cm[i], &e->comp[i], engine, into) != dnnl_success) {
        st = of_fail(OF_ERR_OOM, "conv (oneDNN): cannot make a memory object");
        break;
      }
      use = cm[i];
    }
    args[nargs++] = (dnnl_exec_arg_t){e->arg[i], use};
  }
  dnnl_status_t s = dnnl_success;
  for (int i = 0; st == OF_OK && s == dnnl_success && i < OP_R; i++) {
    if (!e->reo[i] || (i == OP_B && !has_bias) || fresh[i]) continue;
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, um[i]}, {DNNL_ARG_TO, cm[i]}};
    s = dnnl_primitive_execute(e->reo[i], stream, 2, ra);
    if (i == OP_Q && ws && s == dnnl_success) ws->valid = true;
  }
  if (st == OF_OK && s == dnnl_success) s = dnnl_primitive_execute(e->prim, stream, nargs, args);
  if (st == OF_OK && s == dnnl_success && e->reo[OP_R]) {
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, cm[OP_R]}, {DNNL_ARG_TO, um[OP_R]}};
    s = dnnl_primitive_execute(e->reo[OP_R], stream, 2, ra);
  }
  if (st == OF_OK && s == dnnl_success) s = dnnl_stream_wait(stream);
  if (st == OF_OK && s != dnnl_success)
    st = of_fail(OF_ERR_OOM, "conv (oneDNN): execution failed (status %d)", (int)s);
  if (st != OF_OK && ws && !fresh[OP_Q]) wslot_free(ws);   /* its reorder may not have run */
  if (st == OF_OK && e->via_f32) f32_to_bf16(fbuf[OP_R], (void *)uptr[OP_R], fbytes[OP_R] / 4);
  for (int i = 0; i < NOPS; i++) {
    if (um[i]) dnnl_memory_destroy(um[i]);
    if (cm[i]) dnnl_memory_destroy(cm[i]);
    if (buf[i]) of_free(OF_CPU, buf[i], bytes[i] > 0 ? bytes[i] : 1);
    if (fbuf[i]) of_free(OF_CPU, fbuf[i], fbytes[i] > 0 ? fbytes[i] : 1);
  }
  return st;
}

of_status of_dnnl_conv(const of_dnnl_conv_desc *d, const void *p, const void *q,
                       const void *bias, void *r, bool native_bf16,
                       const of_dnnl_wkey *wkey, bool *done) {
  *done = false;
  if (d->N < 1 || d->nsp < 1 || d->nsp > 3 || (d->dt != OF_FLOAT32 && d->dt != OF_BFLOAT16))
    return OF_OK;
  pthread_mutex_lock(&lock);
  if (!have_engine()) {
    pthread_mutex_unlock(&lock);
    return OF_OK;   /* no oneDNN engine: the caller's kernels run */
  }
  entry *e = lookup(d);
  of_status st = OF_OK;
  /* a sum post-op reads the result buffer: it must be r itself, not a
   * compute-layout copy (nor a float32 one) */
  bool sum_ok = !d->post_sum || (!e->reo[OP_R] && !e->via_f32);
  if (!e->unsupported && !(native_bf16 && e->via_f32) && sum_ok) {
    const void *ptr[NOPS] = {p, q, bias, r};
    bool keep = wkey && d->kind == OF_DNNL_FWD && e->reo[OP_Q] && !e->via_f32;
    st = run(e, ptr, d->has_bias, keep ? wkey : NULL);
    *done = st == OF_OK;
  }
  pthread_mutex_unlock(&lock);
  return st;
}

void of_dnnl_release_cached(void) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < WEIGHT_SLOTS; i++) wslot_free(&wcache[i]);
  pthread_mutex_unlock(&lock);
}

void of_dnnl_forget_weight(int64_t sid) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < WEIGHT_SLOTS; i++)
    if (wcache[i].used && wcache[i].key.sid == sid) wslot_free(&wcache[i]);
  pthread_mutex_unlock(&lock);
}

/* ---- int8 gemm (quantized kernels): matmul primitives cached by shape ---- */
enum { GEMM_SLOTS = 32 };
typedef struct {
  int64_t M, K, N;
  bool a_u8, c_t, used, unsupported;
  uint64_t tick;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t md[3];
} gemm_entry;
static gemm_entry gcache[GEMM_SLOTS];

static gemm_entry *gemm_lookup(int64_t M, int64_t K, int64_t N, bool a_u8, bool c_t) {
  gemm_entry *free_e = NULL, *old = NULL;
  for (int i = 0; i < GEMM_SLOTS; i++) {
    gemm_entry *e = &gcache[i];
    if (e->used && e->M == M && e->K == K && e->N == N && e->a_u8 == a_u8 && e->c_t == c_t) {
      e->tick = ++ticks;
      return e;
    }
    if (!e->used && !free_e) free_e = e;
    if (e->used && (!old || e->tick < old->tick)) old = e;
  }
  gemm_entry *e = free_e ? free_e : old;
  if (e->prim) dnnl_primitive_destroy(e->prim);
  memset(e, 0, sizeof *e);
  e->M = M, e->K = K, e->N = N, e->a_u8 = a_u8, e->c_t = c_t, e->used = true, e->tick = ++ticks;
  dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
  dnnl_matmul_desc_t mdesc;
  dnnl_primitive_desc_t pd = NULL;
  bool ok = dnnl_memory_desc_init_by_tag(&e->md[0], 2, ad, a_u8 ? dnnl_u8 : dnnl_s8, dnnl_ab) ==
                dnnl_success &&
            dnnl_memory_desc_init_by_tag(&e->md[1], 2, bd, dnnl_s8, dnnl_ba) == dnnl_success &&
            dnnl_memory_desc_init_by_tag(&e->md[2], 2, cd, dnnl_s32, c_t ? dnnl_ba : dnnl_ab) ==
                dnnl_success &&
            dnnl_matmul_desc_init(&mdesc, &e->md[0], &e->md[1], NULL, &e->md[2]) == dnnl_success &&
            dnnl_primitive_desc_create(&pd, &mdesc, NULL, engine, NULL) == dnnl_success &&
            dnnl_primitive_create(&e->prim, pd) == dnnl_success;
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (!ok) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    e->prim = NULL;
    e->unsupported = true;
  }
  return e;
}

of_status of_dnnl_gemm_s8(int64_t M, int64_t K, int64_t N, const void *a, bool a_u8,
                          const int8_t *b, int32_t *c, bool c_t, bool *done) {
  *done = false;
  if (M < 1 || K < 1 || N < 1 || !of_dnnl_usable()) return OF_OK;
  pthread_mutex_lock(&lock);
  if (!have_engine()) {
    pthread_mutex_unlock(&lock);
    return OF_OK;
  }
  gemm_entry *e = gemm_lookup(M, K, N, a_u8, c_t);
  if (!e->unsupported) {
    dnnl_memory_t m[3] = {NULL, NULL, NULL};
    const void *ptr[3] = {a, b, c};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++)
      ok = dnnl_memory_create(&m[i], &e->md[i], engine, (void *)ptr[i]) == dnnl_success;
    if (ok) {
      dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
      ok = dnnl_primitive_execute(e->prim, stream, 3, args) == dnnl_success &&
           dnnl_stream_wait(stream) == dnnl_success;
    }
    for (int i = 0; i < 3; i++)
      if (m[i]) dnnl_memory_destroy(m[i]);
    *done = ok;
  }
  pthread_mutex_unlock(&lock);
  return OF_OK;
}

/* ---- bfloat16 matmul: primitives cached by the whole descriptor ---- */
bool of_dnnl_native_bf16(void) {
  static int known = -1;   /* a benign race: every thread computes the same */
  if (known < 0) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    known = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
            (unsigned)dnnl_cpu_isa_avx512_core_bf16;
  }
  return known == 1;
}

enum { MM_SLOTS = 64 };
typedef struct {
  of_dnnl_mm_desc key;
  bool used, unsupported;
  uint64_t tick;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t md[3];
} mm_entry;
static mm_entry mcache[MM_SLOTS];

static mm_entry *mm_lookup(const of_dnnl_mm_desc *d) {
  mm_entry *victim = &mcache[0];
  for (int i = 0; i < MM_SLOTS; i++) {
    mm_entry *e = &mcache[i];
    if (e->used && memcmp(&e->key, d, sizeof *d) == 0) {
      e->tick = ++ticks;
      return e;
    }
    if (!e->used) victim = e;
    else if (victim->used && e->tick < victim->tick) victim = e;
  }
  mm_entry *e = victim;
  if (e->prim) dnnl_primitive_destroy(e->prim);
  memset(e, 0, sizeof *e);
  e->key = *d, e->used = true, e->tick = ++ticks;
  const int64_t *dims[3] = {d->ad, d->bd, d->cd}, *st[3] = {d->as, d->bs, d->cs};
  bool ok = true;
  for (int i = 0; i < 3 && ok; i++) {
    dnnl_dims_t dd, ss;
    for (int j = 0; j < d->nd; j++) dd[j] = dims[i][j], ss[j] = st[i][j];
    ok = dnnl_memory_desc_init_by_strides(&e->md[i], d->nd, dd, dnnl_bf16, ss) == dnnl_success;
  }
  dnnl_matmul_desc_t mdesc;
  dnnl_primitive_desc_t pd = NULL;
  ok = ok && dnnl_matmul_desc_init(&mdesc, &e->md[0], &e->md[1], NULL, &e->md[2]) == dnnl_success &&
       dnnl_primitive_desc_create(&pd, &mdesc, NULL, engine, NULL) == dnnl_success;
  /* the reference loops are far slower than float32 BLAS */
  const char *impl = NULL;
  ok = ok && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
       impl && strncmp(impl, "ref", 3) != 0;
  ok = ok && dnnl_primitive_create(&e->prim, pd) == dnnl_success;
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (!ok) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    e->prim = NULL;
    e->unsupported = true;
  }
  return e;
}

of_status of_dnnl_matmul_bf16(const of_dnnl_mm_desc *d, const void *a, const void *b, void *c,
                              bool *done) {
  *done = false;
  if (d->nd < 2 || d->nd > OF_DNNL_MM_DIMS || !of_dnnl_usable() || !of_dnnl_native_bf16())
    return OF_OK;
  pthread_mutex_lock(&lock);
  if (!have_engine()) {
    pthread_mutex_unlock(&lock);
    return OF_OK;
  }
  mm_entry *e = mm_lookup(d);
  of_status st = OF_OK;
  if (!e->unsupported) {
    dnnl_memory_t m[3] = {NULL, NULL, NULL};
    const void *ptr[3] = {a, b, c};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++)
      ok = dnnl_memory_create(&m[i], &e->md[i], engine, (void *)ptr[i]) == dnnl_success;
    dnnl_status_t s = dnnl_success;
    if (ok) {
      dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
      s = dnnl_primitive_execute(e->prim, stream, 3, args);
      if (s == dnnl_success) s = dnnl_stream_wait(stream);
    }
    for (int i = 0; i < 3; i++)
      if (m[i]) dnnl_memory_destroy(m[i]);
    if (!ok) st = of_fail(OF_ERR_OOM, "matmul (oneDNN): cannot make a memory object");
    else if (s != dnnl_success)
      st = of_fail(OF_ERR_OOM, "matmul (oneDNN): execution failed (status %d)", (int)s);
    *done = st == OF_OK;
  }
  pthread_mutex_unlock(&lock);
  return st;
}

#endif
