/* comm.h -- the collectives' bodies (core/dist/comm.c) under the public
 * of_comm_* ops, whose entry points are in core/ops/comm.c. */
#ifndef ONEFLOW_DIST_COMM_H
#define ONEFLOW_DIST_COMM_H
#include "../internal.h"

#pragma GCC visibility push(hidden)
of_status of_comm_all_reduce_body(of_comm *c, of_tensor *t, of_comm_op op);
of_status of_comm_all_reduce_to_body(of_comm *c, of_tensor *x, of_comm_op op, of_tensor **out);
of_status of_comm_broadcast_body(of_comm *c, of_tensor *t, int32_t root);
of_status of_comm_all_gather_body(of_comm *c, of_tensor *x, const int64_t *counts,
                                  of_tensor **out);
of_status of_comm_reduce_scatter_body(of_comm *c, of_tensor *x, const int64_t *counts,
                                      of_comm_op op, of_tensor **out);
of_status of_comm_all_to_all_body(of_comm *c, of_tensor *x, const int64_t *send_counts,
                                  const int64_t *recv_counts, of_tensor **out);
/* a reference the graph's communicator registry holds */
void of_comm_retain_internal(of_comm *c);
#pragma GCC visibility pop
#endif
