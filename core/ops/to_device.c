/* to_device.c -- the `to(device)` op: a copy across devices that autograd
 * follows (its backward copies the grad back). The copy itself is the
 * device layer's (core/device/device.c). */
#include "../autograd.h"
#include "../device.h"
#include "../dispatch/dispatch.h"

/* The node's attribute record: the source device, which the backward copies
 * the grad back to. to() has no op kind (ops.def): a graph runs on one device
 * and refuses a user's to() while tracing, so no op record names a device
 * move; hence this small record, kept under op kind -1. */
typedef struct { int32_t device, pad_; } a_to_device;

static of_status to_device_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  return of_to_device(g[0], (of_device)OF_NODE_ATTRS(a_to_device, n)->device, 0, &gi[0]);
}
static const of_grad_def to_device_grad = {"ToCopyBackward", to_device_backward};

of_status of_to_device(of_tensor *t, of_device dev, int32_t non_blocking, of_tensor **out) {
  if (!t) return of_fail(OF_ERR_ARG, "to: tensor is NULL");
  if (of_dev(t) == dev) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  /* an op's own copies (a CPU scalar joining a device op, index tables,
   * host-side checks) are part of that op; the user's are not recorded */
  if (of_dispatch_user_level()) {
    char a[16], b[16];
    return of_fail(OF_ERR_DEVICE, "nn.Graph: to(%s): a graph runs on one device; moving a "
                   "tensor %s from %s inside build() is not supported: move the module and "
                   "the inputs to %s before calling the graph", of_device_str(dev, a),
                   OF_SHAPE_STR(t), of_device_str(of_dev(t), b), of_device_str(dev, a));
  }
  if (dev != OF_CPU && !of_device_ops_for("to", dev)) return OF_ERR_DEVICE;
  of_tensor *r;
  /* the memory format moves with the data, as in PyTorch */
  if (of_prefers_channels_last(t))
    OF_CHECK(of_tensor_new_channels_last(t->shape, t->ndim, t->dtype, dev, &r));
  else OF_CHECK(of_tensor_new(t->shape, t->ndim, t->dtype, dev, &r));
  /* non-blocking from pageable memory would race with the caller reusing
   * it; only a pinned source (or a device source) may be queued */
  int32_t nb = non_blocking && (of_dev(t) != OF_CPU || of_tensor_is_pinned(t));
  of_status st = of_copy_across_async(r, t, nb);
  if (st == OF_OK && of_grad_needed(&t, 1)) {
    of_node *n;
    st = of_record(&to_device_grad, &t, 1, &r, 1, &n);
    if (st == OF_OK) {
      a_to_device a = {of_dev(t), 0};
      OF_NODE_KEEP(n, -1, a);
    }
  }
  if (st != OF_OK) {
    of_tensor_release(r);
    return st;
  }
  r->storage->version = 0;
  *out = r;
  return OF_OK;
}
