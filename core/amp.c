/* amp.c -- autocast state (flow.amp.autocast): a thread-local low-precision
 * dtype that the public entry points of core/graph/ops.c consult.
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
#include "internal.h"

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
