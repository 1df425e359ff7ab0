/* ew_run.c -- the shared driver of elementwise ops: dtype conversion of the
 * operands, output allocation or in-place writing, then one of_iter pass. */
#include "elementwise.h"
#include "../device.h"

/* PyTorch's memory-format propagation: without `into`, the result is laid
 * out channels-last when the first operand of the result's full shape is
 * (strictly) channels-last, so conv -> bn -> relu -> add chains keep NHWC
 * instead of converting back and forth. Ambiguous operands (C == 1, or
 * both layouts at once) and broadcast ones do not decide. */
static bool wants_channels_last(of_tensor **ins, int32_t nin, const int64_t *shape, int32_t ndim) {
  if (ndim != 4 && ndim != 5) return false;
  for (int32_t i = 0; i < nin; i++) {
    const of_tensor *t = ins[i];
    if (!t || t->ndim != ndim) continue;
    bool full = true;
    for (int32_t d = 0; full && d < ndim; d++) full = t->shape[d] == shape[d];
    if (!full) continue;
    if (of_prefers_channels_last(t)) return true;
    if (of_tensor_is_contiguous(t)) return false;
  }
  return false;
}

static void release_all(of_tensor **ts, int32_t n) {
  for (int32_t i = 0; i < n; i++) of_tensor_release(ts[i]);
}

of_status of_ew_run(const char *op, of_loop_fn fn, of_ew_ctx *ctx, of_tensor **ins, int32_t nin,
                    of_dtype compute, of_dtype kernel_out, of_dtype result_dt,
                    const int64_t *shape, int32_t ndim, of_tensor *into, of_tensor **out) {
  OF_ROUTE(op, dev, dops, ew, ins[0], nin > 1 ? ins[1] : NULL, nin > 2 ? ins[2] : NULL, into);
  of_tensor *conv[OF_ITER_MAX] = {0};
  for (int32_t i = 0; i < nin; i++) {
    of_status st = of_cast_data(ins[i], compute, &conv[i]);
    if (st == OF_OK && of_dev(conv[i]) != dev) {   /* a CPU scalar joining a device op */
      of_tensor *m = NULL;
      st = of_to_device(conv[i], dev, 0, &m);
      of_tensor_release(conv[i]);
      conv[i] = m;
    }
    if (st != OF_OK) {
      release_all(conv, i);
      return st;
    }
  }
  of_tensor *res = NULL, *direct = NULL;
  bool cl = !into && wants_channels_last(ins, nin, shape, ndim);
  of_status st = cl ? of_tensor_new_channels_last(shape, ndim, result_dt, dev, &res)
                    : of_prepare_out_on(op, into, shape, ndim, result_dt, dev, &res);
  if (st != OF_OK) goto done;
  /* the kernel writes kernel_out; a different result dtype goes through a temp */
  if (res->dtype == kernel_out) {
    direct = res;
    of_tensor_retain(direct);
  } else {
    st = cl ? of_tensor_new_channels_last(shape, ndim, kernel_out, dev, &direct)
            : of_tensor_new(shape, ndim, kernel_out, dev, &direct);
    if (st != OF_OK) goto done;
  }
  of_tensor *ops[OF_ITER_MAX + 1] = {direct};
  for (int32_t i = 0; i < nin; i++) ops[i + 1] = conv[i];
  if (dops) {
    st = dops->ew(op, ctx->kind, ctx->op, ctx->p0, ctx->p1, ctx->flags, ops, nin + 1);
    if (st != OF_OK) goto done;
    if (direct != res) st = of_copy_data(res, direct);
    else of_bump_version(res);
    goto done;
  }
  of_iter it;
  of_iter_init(&it, ops, nin + 1, shape, ndim);
  of_iter_run(&it, fn, ctx, true);
  if (ctx->err) {
    st = of_fail(OF_ERR_ARG, "%s: integer division by zero (dtype %s)", op, of_dtype_name(compute));
    goto done;
  }
  if (direct != res) st = of_copy_data(res, direct);
  else of_bump_version(res);
done:
  release_all(conv, nin);
  of_tensor_release(direct);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}
