/* backend.h -- the table of functions a communication backend provides.
 *
 * core/dist/comm.c owns the public of_comm_* API (tensors, dtypes, errors) and
 * drives one backend through this table. The in-process backend (world size
 * 1) lives in comm.c; the MPI one is its own library, liboneflow_mpi.so
 * (core/dist/mpi.c), dlopened on first use when a launcher started the
 * process, so liboneflow itself never links MPI.
 *
 * Calling convention: buffers are contiguous, counts are in elements of the
 * wire type, a `void *` communicator is the backend's own. Every function
 * returns 0 or nonzero; on failure `error()` gives the message. Blocking
 * calls give up after `timeout` seconds (<= 0: never) with a message naming
 * the ranks that did not take part. */
#ifndef ONEFLOW_DIST_BACKEND_H
#define ONEFLOW_DIST_BACKEND_H
#include <stdint.h>

enum { OF_COMM_ABI = 2 };

/* What travels on the wire; the core converts float16/bfloat16/bool. */
typedef enum {
  OF_WIRE_U8 = 0, OF_WIRE_I8, OF_WIRE_I32, OF_WIRE_I64, OF_WIRE_F32, OF_WIRE_F64,
  OF_WIRE_U16
} of_wire;

typedef struct of_comm_backend {
  int32_t abi;                               /* OF_COMM_ABI */
  const char *name;
  int (*init)(void);                         /* idempotent */
  void *(*world)(void);
  int32_t (*rank)(void *c);
  int32_t (*size)(void *c);
  int32_t (*local_rank)(void);
  /* Members only: ranks[n] are ranks of parent; out is the group (rank
   * order as listed). */
  int (*group)(void *parent, const int32_t *ranks, int32_t n, void **out);
  void (*free)(void *c);
  int (*barrier)(void *c, const char *op, double timeout);
  int (*all_reduce)(void *c, void *buf, int64_t n, of_wire w, int32_t red,
                    const char *op, double timeout);
  int (*broadcast)(void *c, void *buf, int64_t n, of_wire w, int32_t root,
                   const char *op, double timeout);
  /* out holds counts[0] + ... + counts[size-1] elements, rank order. */
  int (*all_gather)(void *c, const void *in, void *out, const int64_t *counts, of_wire w,
                    const char *op, double timeout);
  /* in holds sum(counts); out gets counts[rank] reduced elements. */
  int (*reduce_scatter)(void *c, const void *in, void *out, const int64_t *counts,
                        of_wire w, int32_t red, const char *op, double timeout);
  int (*all_to_all)(void *c, const void *in, const int64_t *send_counts, void *out,
                    const int64_t *recv_counts, of_wire w, const char *op,
                    double timeout);
  int (*send)(void *c, const void *buf, int64_t n, of_wire w, int32_t peer, int32_t tag,
              const char *op, double timeout);
  int (*recv)(void *c, void *buf, int64_t n, of_wire w, int32_t peer, int32_t tag,
              const char *op, double timeout);
  const char *(*error)(void);
  /* Nonblocking all-reduce of n elements from in into out (in == out: in
   * place): *req is the backend's handle, ended by exactly one of wait
   * (which frees it on success or failure) or a test that reports
   * completion. test: 1 done (req freed), 0 pending, -1 error (req freed).
   * wait gives up after `timeout` like the blocking calls. */
  int (*iall_reduce)(void *c, const void *in, void *out, int64_t n, of_wire w, int32_t red,
                     const char *op, void **req);
  int (*test)(void *req);
  int (*wait)(void *req, double timeout);
} of_comm_backend;

/* A backend for device buffers (NCCL), provided by the device library
 * (liboneflow_cuda.so, which dlopens libnccl on first use; see
 * of_device_ops.nccl). core/dist/comm.c gives each of_comm its own device
 * communicator, made on its first collective on a device tensor with an id
 * that rank 0 makes and the host backend broadcasts.
 *
 * Calls are enqueued on `stream` (the caller's current stream) and then
 * waited for, polling the communicator's asynchronous error: after
 * `timeout` seconds (<= 0: never) the communicator is aborted and the call
 * fails naming the op; an aborted communicator fails every later call.
 * Point-to-point messages have no tags: a pair's sends and receives match
 * in the order they are called. */
enum { OF_COMM_DEVICE_ABI = 1, OF_COMM_ID_BYTES = 128 };

typedef struct of_comm_device_backend {
  int32_t abi;                               /* OF_COMM_DEVICE_ABI */
  const char *name;
  int (*unique_id)(void *id);                /* OF_COMM_ID_BYTES bytes */
  /* every member calls it with rank 0's id; `device` the CUDA device index */
  int (*comm_init)(const void *id, int32_t nranks, int32_t rank, int32_t device,
                   const char *op, double timeout, void **out);
  void (*free)(void *c);
  int (*all_reduce)(void *c, void *stream, void *buf, int64_t n, of_wire w, int32_t red,
                    const char *op, double timeout);
  int (*broadcast)(void *c, void *stream, void *buf, int64_t n, of_wire w, int32_t root,
                   const char *op, double timeout);
  int (*all_gather)(void *c, void *stream, const void *in, void *out, const int64_t *counts,
                    of_wire w, const char *op, double timeout);
  int (*reduce_scatter)(void *c, void *stream, const void *in, void *out,
                        const int64_t *counts, of_wire w, int32_t red, const char *op,
                        double timeout);
  int (*all_to_all)(void *c, void *stream, const void *in, const int64_t *send_counts,
                    void *out, const int64_t *recv_counts, of_wire w, const char *op,
                    double timeout);
  int (*send)(void *c, void *stream, const void *buf, int64_t n, of_wire w, int32_t peer,
              const char *op, double timeout);
  int (*recv)(void *c, void *stream, void *buf, int64_t n, of_wire w, int32_t peer,
              const char *op, double timeout);
  const char *(*error)(void);
} of_comm_device_backend;

/* The symbol liboneflow_mpi.so exports. */
typedef const of_comm_backend *(*of_comm_backend_fn)(void);

#endif
