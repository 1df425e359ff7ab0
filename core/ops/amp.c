/* amp.c -- autocast state (flow.amp.autocast): a thread-local low-precision
 * dtype that the public entry points of the op families consult.
 *
 * Op classes (PyTorch's CPU lists, doc/amp.md):
 *   low:     matmul, mm, bmm, addmm, conv, conv_transpose -- floating inputs
 *            other than float64 are cast to the autocast dtype;
 *   float32: sum, mean, prod, logsumexp, norm, var/std, softmax/log_softmax,
 *            cumsum/cumprod, cross_entropy, nll_loss, batch/layer/group/
 *            instance norm -- float16/bfloat16 inputs are cast to float32;
 *   others follow their inputs (type promotion).
 * Only the outermost op casts: autocast is off while the op itself runs (ops
 * that call other ops), while the autograd engine runs backward rules (they
 * work in the forward's dtypes, as in PyTorch) and while a compiled graph
 * runs (its casts are already nodes). */
#include "../device.h"
#include "../device/dnnl.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "family.h"

/* bits 0-7: the CPU's autocast dtype + 1 (0: off), bits 8-15: CUDA's */
_Thread_local int32_t of_amp_tls __attribute__((tls_model("initial-exec"), visibility("hidden")));

static int32_t amp_shift(int32_t device_type) { return device_type == OF_CUDA ? 8 : 0; }

of_status of_set_autocast_device(int32_t device_type, int32_t enabled, of_dtype dt) {
  if (device_type != OF_CPU && device_type != OF_CUDA)
    return of_fail(OF_ERR_ARG, "autocast: unknown device type %d", (int)device_type);
  int32_t sh = amp_shift(device_type);
  if (!enabled) {
    of_amp_tls &= ~(0xff << sh);
    return OF_OK;
  }
  if (dt != OF_FLOAT16 && dt != OF_BFLOAT16)
    return of_fail(OF_ERR_DTYPE, "autocast: dtype must be float16 or bfloat16, got %s",
                   of_dtype_name(dt));
  of_amp_tls = (of_amp_tls & ~(0xff << sh)) | (((int32_t)dt + 1) << sh);
  return OF_OK;
}

int32_t of_autocast_enabled_device(int32_t device_type) {
  return ((of_amp_tls >> amp_shift(device_type)) & 0xff) != 0;
}

of_dtype of_autocast_dtype_device(int32_t device_type) {
  int32_t v = (of_amp_tls >> amp_shift(device_type)) & 0xff;
  return v ? (of_dtype)(v - 1) : device_type == OF_CUDA ? OF_FLOAT16 : OF_BFLOAT16;
}

of_status of_set_autocast(int32_t enabled, of_dtype dt) {
  return of_set_autocast_device(OF_CPU, enabled, dt);
}

int32_t of_autocast_enabled(void) { return of_autocast_enabled_device(OF_CPU); }

of_dtype of_autocast_dtype(void) { return of_autocast_dtype_device(OF_CPU); }

static bool low_float(of_dtype dt) { return dt == OF_FLOAT16 || dt == OF_BFLOAT16; }

/* ---- the kept casts ----
 * Inference under autocast (no grad recorded, not tracing) casts the same
 * parameters on every call: ResNet-50's 25.6 M weights each forward. The
 * low-precision copy of a parameter (a leaf that requires grad, or a view
 * of one such as linear's weight.t(), on the CPU) is kept, keyed by its
 * storage, version, offset, shape and strides, so an in-place update
 * (optimizer step, load_state_dict, mul_) makes a new one.
 * A kept table (storage/kept.c: 256 entries, least recently used out);
 * of_release_kernel_caches (flow.empty_cache) frees it all. The copy's
 * storage is marked frozen (it changes only with a version bump), so the
 * convolutions keep their reordered or transformed forms of it too; those
 * go with the copy (of_forget_kept_weight). */
typedef struct {
  of_kept k;           /* first: the table's entry */
  of_tensor *c;        /* retained */
  int64_t cver;        /* the copy's version when made */
} kept_cast;
static of_kept *kept_slots[256];
static of_kept_table kept = OF_KEPT_TABLE(kept_slots, INT64_MAX);

/* a parameter, or a view of one (linear's weight.t()) */
static bool param_or_view(const of_tensor *t) {
  if (t->grad_fn) return false;
  if (t->requires_grad) return true;
  const of_tensor *b = t->view_base;
  return b && b->requires_grad && !b->grad_fn && b->storage == t->storage;
}

static bool keep_cast_of(const of_tensor *t) {
  return !of_dispatch_tls && !of_is_grad_enabled() && of_dev(t) == OF_CPU && t->numel > 0 &&
         param_or_view(t);
}

static void kept_cast_free(of_kept *k) {
  of_tensor *c = ((kept_cast *)k)->c;
  free(k);
  of_forget_kept_weight(c->storage->id);
  of_tensor_release(c);
}

/* t cast to `to` through the kept table (*out retained) */
static of_status kept_cast_get(of_tensor *t, of_dtype to, of_tensor **out) {
  int64_t key[OF_KEPT_KEY] = {t->storage->id, t->storage->version, t->offset, to, t->ndim};
  memcpy(key + 5, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  memcpy(key + 5 + OF_MAX_DIMS, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  kept_cast *e = (kept_cast *)of_kept_find(&kept, key);
  /* a copy written into since (a user's in-place op on it) is made again */
  if (e && e->c->storage->version == e->cver) {
    of_tensor_retain(e->c);
    *out = e->c;
    of_kept_release(&kept, &e->k);
    return OF_OK;
  }
  if (e) of_kept_release(&kept, &e->k);
  of_tensor *c = NULL;
  OF_CHECK(of_to_dtype(t, to, &c));
  e = calloc(1, sizeof *e);
  if (e) {   /* else not kept: made again next call */
    c->storage->frozen = true;
    memcpy(e->k.key, key, sizeof key);
    e->k.refs = 1, e->k.free = kept_cast_free;
    e->c = c, e->cver = c->storage->version;
    of_tensor_retain(c);
    of_kept_put(&kept, &e->k);
    of_kept_release(&kept, &e->k);
  }
  *out = c;
  return OF_OK;
}

void of_release_kernel_caches(void) {
  of_kept_forget(&kept, 0, true);
  of_dnnl_release_cached();
  of_quant_release_cached();
  of_wino_release_cached();
}

void of_forget_kept_weight(int64_t sid) {
  of_dnnl_forget_weight(sid);
  of_wino_forget_weight(sid);
  of_quant_forget_weight(sid);
}

of_status of_amp_begin(int32_t cls, of_tensor **in, of_tensor **cast, int32_t n,
                       int32_t *saved) {
  *saved = of_amp_tls;
  /* the op's device is its first tensor's: the state of that device type */
  int32_t dtype = OF_CPU;
  for (int32_t i = 0; i < n; i++)
    if (in[i]) { dtype = in[i]->storage->device & 0xff; break; }
  int32_t code = (of_amp_tls >> amp_shift(dtype)) & 0xff;
  of_dtype low = (of_dtype)(code - 1);
  of_status st = OF_OK;
  for (int32_t i = 0; i < n; i++) {
    of_tensor *t = in[i];
    cast[i] = t;
    if (!code || !t || st != OF_OK || !of_dtype_is_floating(t->dtype)) continue;
    of_dtype to;
    if (cls == OF_AMP_LOW) {
      if (t->dtype == OF_FLOAT64 || t->dtype == low) continue;
      to = low;
    } else {
      if (!low_float(t->dtype)) continue;
      to = OF_FLOAT32;
    }
    of_tensor *c = NULL;
    if (cls == OF_AMP_LOW && keep_cast_of(t))
      st = kept_cast_get(t, to, &c);
    else
      st = of_to_dtype(t, to, &c);   /* public: recorded while tracing, has a backward */
    cast[i] = st == OF_OK ? c : t;
  }
  if (st != OF_OK) {
    of_amp_end(in, cast, n, *saved);
    return st;
  }
  of_amp_tls = 0;
  return OF_OK;
}

void of_amp_end(of_tensor **in, of_tensor **cast, int32_t n, int32_t saved) {
  for (int32_t i = 0; i < n; i++)
    if (cast[i] && cast[i] != in[i]) of_tensor_release(cast[i]);
  of_amp_tls = saved;
}

/* ---- loss scaling (flow.amp.GradScaler, graph AMP with float16) ----
 * PyTorch's maths: unscale multiplies each grad by float(1 / double(scale))
 * and flags inf/nan; the update halves the scale (backoff) after a bad step
 * and grows it after growth_interval good steps in a row. */
#define UNSCALE_KERNEL(T)                                                                 \
  static int unscale_##T(int64_t n, T *g, T inv) {                                        \
    int bad = 0;                                                                          \
    _Pragma("omp parallel for schedule(static) reduction(|:bad) if (n > 65536) num_threads(of_threads())")          \
    for (int64_t i = 0; i < n; i++) {                                                     \
      T v = g[i];                                                                         \
      bad |= !isfinite(v);                                                                \
      g[i] = v * inv;                                                                     \
    }                                                                                     \
    return bad;                                                                           \
  }
UNSCALE_KERNEL(float)
UNSCALE_KERNEL(double)

/* The operands' shapes and dtypes, on of_meta (ndim < 0: absent), so that
 * the graph loader runs the same checks on a loaded node's recorded values
 * (infer_unscale / infer_update_scale); the bodies add contiguity and
 * devices, which only the real tensors have. */
static of_meta meta_of(const of_tensor *t) {
  of_meta m;
  m.ndim = t ? t->ndim : -1;
  m.dtype = t ? t->dtype : 0;
  if (t) memcpy(m.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  return m;
}

static of_status check_scalar(const char *op, const char *what, const of_meta *t, of_dtype dt) {
  bool have = t->ndim >= 0;
  if (!have || t->dtype != dt || of_shape_numel(t->shape, t->ndim) != 1)
    return of_fail(OF_ERR_ARG, "%s: %s must be a %s tensor with one element%s%s%s%s", op, what,
                   of_dtype_name(dt), have ? ", got " : "", have ? OF_SHAPE_STR(t) : "",
                   have ? " " : "", have ? of_dtype_name(t->dtype) : "");
  return OF_OK;
}

/* amp_unscale_(grad, scale, found_inf): a float32 / float64 grad, a
 * one-element float32 scale and found_inf */
static of_status unscale_check(const of_meta *grad, const of_meta *scale, const of_meta *found_inf,
                               bool contiguous) {
  const char *op = "amp_unscale_";
  OF_CHECK(check_scalar(op, "scale", scale, OF_FLOAT32));
  OF_CHECK(check_scalar(op, "found_inf", found_inf, OF_FLOAT32));
  bool have = grad->ndim >= 0;
  if (!have || (grad->dtype != OF_FLOAT32 && grad->dtype != OF_FLOAT64) || !contiguous)
    return of_fail(OF_ERR_DTYPE, "%s: the grad must be a contiguous float32 or float64 tensor%s%s",
                   op, have ? ", got " : "", have ? OF_DT(grad) : "");
  return OF_OK;
}

/* amp_update_scale_(scale, growth_tracker, found_inf): one-element float32
 * scale and found_inf, an int32 tracker, an interval of at least 1 */
static of_status update_scale_check(const of_meta *scale, const of_meta *tracker,
                                    const of_meta *found_inf, int64_t interval) {
  const char *op = "amp_update_scale_";
  OF_CHECK(check_scalar(op, "scale", scale, OF_FLOAT32));
  OF_CHECK(check_scalar(op, "growth_tracker", tracker, OF_INT32));
  OF_CHECK(check_scalar(op, "found_inf", found_inf, OF_FLOAT32));
  if (interval < 1) return of_fail(OF_ERR_ARG, "%s: growth_interval must be >= 1", op);
  return OF_OK;
}

static of_status unscale_body(of_tensor *grad, of_tensor *scale, of_tensor *found_inf) {
  const char *op = "amp_unscale_";
  of_meta gm = meta_of(grad), sm = meta_of(scale), fm = meta_of(found_inf);
  OF_CHECK(unscale_check(&gm, &sm, &fm, grad && of_tensor_is_contiguous(grad)));
  OF_ROUTE(op, dev, dops, amp_unscale, grad, scale, found_inf);
  if (dops) {
    if (of_dev(scale) != dev || of_dev(found_inf) != dev)   /* 0-d CPU tensors joined */
      return of_fail(OF_ERR_DEVICE, "%s: scale and found_inf must be on %s with the grad", op,
                     OF_DEV_STR(dev));
    OF_CHECK(dops->amp_unscale(grad, scale, found_inf));
    of_bump_version(grad);
    of_bump_version(found_inf);
    return OF_OK;
  }
  double inv = (double)(float)(1.0 / (double)*(const float *)of_ptr(scale));
  int bad = grad->dtype == OF_FLOAT32
                ? unscale_float(grad->numel, (float *)of_ptr(grad), (float)inv)
                : unscale_double(grad->numel, (double *)of_ptr(grad), inv);
  if (bad) *(float *)of_ptr(found_inf) = 1;
  of_bump_version(grad);
  of_bump_version(found_inf);
  return OF_OK;
}

of_status of_amp_unscale_(of_tensor *grad, of_tensor *scale, of_tensor *found_inf) {
  a_i1 a = {0, 0};
  of_tensor *ins[3] = {grad, scale, found_inf};
  OF_DISPATCH(unscale_body(grad, scale, found_inf),
            of_dispatch_record(OPK_AMP_UNSCALE, &a, sizeof a, ins, 3, NULL, 0));
}

static of_status run_unscale(const of_oprec *n, of_tensor **ins, void **outs) {
  (void)n;
  (void)outs;
  return of_amp_unscale_(ins[0], ins[1], ins[2]);
}

static of_status update_scale_body(of_tensor *scale, of_tensor *tracker, of_tensor *found_inf,
                                   double growth, double backoff, int64_t interval) {
  const char *op = "amp_update_scale_";
  of_meta sm = meta_of(scale), tm = meta_of(tracker), fm = meta_of(found_inf);
  OF_CHECK(update_scale_check(&sm, &tm, &fm, interval));
  OF_ROUTE(op, dev, dops, amp_update_scale, scale, tracker, found_inf);
  if (dops) {
    if (of_dev(scale) != dev || of_dev(tracker) != dev || of_dev(found_inf) != dev)
      return of_fail(OF_ERR_DEVICE, "%s: scale, growth_tracker and found_inf must be on one "
                     "device", op);
    OF_CHECK(dops->amp_update_scale(scale, tracker, found_inf, growth, backoff, interval));
    of_bump_version(scale);
    of_bump_version(tracker);
    return OF_OK;
  }
  float *s = (float *)of_ptr(scale);
  int32_t *t = (int32_t *)of_ptr(tracker);
  if (*(const float *)of_ptr(found_inf) != 0) {
    *s = *s * (float)backoff;
    *t = 0;
  } else if (*t + 1 >= interval) {
    float grown = *s * (float)growth;
    if (isfinite(grown)) *s = grown;
    *t = 0;
  } else {
    *t += 1;
  }
  of_bump_version(scale);
  of_bump_version(tracker);
  return OF_OK;
}

of_status of_amp_update_scale_(of_tensor *scale, of_tensor *growth_tracker, of_tensor *found_inf,
                               double growth_factor, double backoff_factor,
                               int64_t growth_interval) {
  a_amp_update a;
  memset(&a, 0, sizeof a);
  a.growth = growth_factor;
  a.backoff = backoff_factor;
  a.interval = growth_interval;
  of_tensor *ins[3] = {scale, growth_tracker, found_inf};
  OF_DISPATCH(update_scale_body(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                              growth_interval),
            of_dispatch_record(OPK_AMP_UPDATE, &a, sizeof a, ins, 3, NULL, 0));
}

static of_status run_update_scale(const of_oprec *n, of_tensor **ins, void **outs) {
  const a_amp_update *a = n->attrs;
  (void)outs;
  return of_amp_update_scale_(ins[0], ins[1], ins[2], a->growth, a->backoff, a->interval);
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static int32_t mutates_unscale(const void *p, int32_t nin, int32_t *idx) {
  (void)p; (void)nin;
  idx[0] = 0;   /* grad, found_inf */
  idx[1] = 2;
  return 2;
}
static int32_t mutates_update_scale(const void *p, int32_t nin, int32_t *idx) {
  (void)p; (void)nin;
  idx[0] = 0;   /* scale, growth_tracker */
  idx[1] = 1;
  return 2;
}

/* a loaded node (no results): the bodies' checks on the recorded operands
 * (the grad's contiguity is checked when it runs) */
static of_status infer_unscale(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  (void)outs;
  if (nin < 3) return of_fail(OF_ERR_ARG, "amp_unscale_: %d inputs", (int)nin);
  return unscale_check(&ins[0], &ins[1], &ins[2], true);
}
static of_status infer_update_scale(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_amp_update *a = p;
  (void)outs;
  if (nin < 3) return of_fail(OF_ERR_ARG, "amp_update_scale_: %d inputs", (int)nin);
  return update_scale_check(&ins[0], &ins[1], &ins[2], a->interval);
}

OF_OP_IMPL_INFER(AMP_UNSCALE, run_unscale, mutates_unscale, NULL, NULL, infer_unscale);
OF_OP_IMPL_INFER(AMP_UPDATE, run_update_scale, mutates_update_scale, NULL, NULL, infer_update_scale);
