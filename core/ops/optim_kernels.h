/* optim_kernels.h -- the one-pass optimizer updates shared by the fused ops
 * (core/ops/optim.c: of_optim_sgd_, of_optim_adam_), which both nn.Graph
 * and the eager optimizers call. Contiguous buffers of `dt` (float32 or
 * float64), n elements each; NULL for state a configuration does not use. */
#ifndef ONEFLOW_OPS_OPTIM_KERNELS_H
#define ONEFLOW_OPS_OPTIM_KERNELS_H
#include "internal.h"

/* first: the momentum buffer is written, not read (first step). */
void of_sgd_kernel(of_dtype dt, int64_t n, void *p, const void *g, void *buf, double lr,
                   double momentum, double dampening, double weight_decay, int nesterov,
                   int maximize, int first);
/* step: 1-based, after this update. */
void of_adam_kernel(of_dtype dt, int64_t n, void *p, const void *g, void *m, void *v, void *vmax,
                    double lr, double step, double beta1, double beta2, double eps,
                    double weight_decay, int amsgrad, int maximize, int decoupled);
#endif
