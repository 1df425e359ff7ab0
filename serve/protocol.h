/* protocol.h -- the KServe v2 / Triton inference request and response
 * bodies, apart from HTTP and from the models: parsing a request (JSON
 * tensors, or Triton's binary tensor data extension when the JSON header's
 * length is given) into typed buffers, and writing a response. Nothing here
 * trusts the body: every size is checked before a byte is copied.
 * tools/fuzz/fuzz_serve.c fuzzes sv_parse_request. */
#ifndef FLOW_SERVE_PROTOCOL_H
#define FLOW_SERVE_PROTOCOL_H
#include "json.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { SV_MAX_TENSORS = 64, SV_MAX_DIMS = 8, SV_NAME = 128, SV_NUM_DTYPES = 13 };
/* Triton's BYTES, for outputs only (the classification extension's
 * strings): held serialized as Triton's binary form, each element a 4-byte
 * little-endian length and its bytes */
enum { SV_BYTES = 64 };

/* vsnprintf into e (cap bytes); returns false, for `return sv_errorf(...)` */
bool sv_errorf(char *e, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* dtype codes are oneflow.h's (OF_BOOL = 0 ... OF_FLOAT64 = 8, OF_INT16 = 9,
 * OF_UINT16, OF_UINT32, OF_UINT64 = 12) */
const char *sv_datatype_name(int32_t dt);          /* "FP32"; NULL for a bad code */
int32_t sv_datatype_code(const char *name);        /* -1 when unknown */
const char *sv_config_type_name(int32_t dt);       /* "TYPE_FP32" */
int32_t sv_config_type_code(const char *name);     /* -1 when unknown */
int32_t sv_dtype_size(int32_t dt);

/* A request body that binary inputs point into instead of being copied out
 * of it: counted references (the connection's, each input's), freed with
 * the last, from whichever thread drops it. */
typedef struct sv_block sv_block;
/* A block for a body of `bytes` bytes whose binary data starts `header_len`
 * bytes in: *body is where to write the body, placed so that its binary
 * data is 64-byte aligned (the alignment tensors' kernels expect).
 * NULL when out of memory. One reference, the caller's. */
sv_block *sv_block_new(size_t bytes, size_t header_len, char **body);
void sv_block_retain(sv_block *b);
void sv_block_release(sv_block *b);   /* NULL: nothing */

/* Triton's shared memory parameters of an input or a requested output
 * (shared_memory_region, _offset, _byte_size; shm.h has the regions) */
typedef struct sv_shm_ref {
  char region[SV_NAME];   /* "": not in shared memory */
  uint64_t offset, byte_size;
} sv_shm_ref;

typedef struct sv_tensor {
  char name[SV_NAME];
  int32_t dtype, ndim;
  int64_t shape[SV_MAX_DIMS];
  void *data;          /* contiguous, numel * size bytes: malloc'd, or inside owner */
  sv_block *owner;     /* non-NULL: data points into this body (a reference held) */
  size_t nbytes;
  sv_shm_ref shm;      /* an input in shared memory: data is NULL until the
                          caller copies the region in (shm.h) */
} sv_tensor;
/* frees t's data (or drops its reference to the body it points into) */
void sv_tensor_release(sv_tensor *t);

typedef struct sv_request {
  char id[SV_NAME];
  int32_t nin;
  sv_tensor in[SV_MAX_TENSORS];
  int32_t nout;        /* requested outputs; 0: all */
  char out_name[SV_MAX_TENSORS][SV_NAME];
  bool out_binary[SV_MAX_TENSORS];
  sv_shm_ref out_shm[SV_MAX_TENSORS];   /* outputs to write into shared memory */
  int32_t out_class[SV_MAX_TENSORS];    /* parameters.classification: top k; 0 none */
  bool binary_default; /* parameters.binary_data_output */
} sv_request;

/* body[0..n): the JSON, or when header_len > 0 the JSON in the first
 * header_len bytes and the inputs' binary data after it in input order.
 * An input in shared memory is parsed and checked against its shape and
 * datatype, but its data is the caller's to copy in.
 * owner: the block body lives in, or NULL; with one, a binary input whose
 * data is aligned to its element size points into the body (a reference to
 * owner) instead of a copy. max_values bounds the JSON values. On failure
 * returns false with a message in err (the protocol's error text) and frees
 * what it made. */
bool sv_parse_request(const char *body, size_t n, size_t header_len, int32_t max_values,
                      sv_block *owner, sv_request *r, char *err, size_t errcap);
void sv_request_free(sv_request *r);
int64_t sv_numel(const int64_t *shape, int32_t ndim);

/* One output of a response. */
typedef struct sv_output {
  const char *name;
  int32_t dtype, ndim;
  const int64_t *shape;
  const void *data;
  bool binary;
  const char *shm_region;   /* non-NULL: written into this shared memory region */
  size_t nbytes;            /* SV_BYTES: data's serialized length */
} sv_output;

/* Triton's classification extension: for each of `rows` rows of `per_row`
 * values (dtype dt), the k largest (values descending, then indices
 * ascending) as strings "value:index" or "value:index:label" (labels[index]
 * when index < nlabels; value as %f for floating dtypes), serialized as
 * SV_BYTES; k is at most per_row. NULL when out of memory. */
char *sv_classify(const void *data, int32_t dt, int64_t rows, int64_t per_row, int32_t k,
                  const char *const *labels, int32_t nlabels, size_t *nbytes);

/* The response body: the JSON, then the binary outputs' bytes; *header_len
 * is the JSON's length when some output is binary (the
 * Inference-Header-Content-Length), else 0. Returns false when out of memory. */
bool sv_write_response(js_out *o, const char *model, const char *version, const char *id,
                       const sv_output *outs, int32_t nout, size_t *header_len);
/* {"error": msg} */
void sv_write_error(js_out *o, const char *msg);
#endif
