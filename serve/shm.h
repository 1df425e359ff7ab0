/* shm.h -- Triton's system shared memory extension for flow-serve: the
 * regions clients register (a POSIX shared memory object, an offset and a
 * byte size), and copies between them and tensors.
 *
 * The server never maps a client's object: a client can shrink it at any
 * time, and a read of a mapped page past its new end is SIGBUS for the
 * whole server. Copies go through pread / pwrite on the object's file
 * descriptor instead (one copy, as a mapping would need into the tensor),
 * where a shrunk object is a short read and an error for that request.
 * Regions are counted references: an unregister while a request copies
 * closes the descriptor after the copy. Off unless the server was started
 * with --allow-client-shm=true (as Triton): a registration names any shared
 * memory object the server's user can open. */
#ifndef FLOW_SERVE_SHM_H
#define FLOW_SERVE_SHM_H
#include "json.h"
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { SV_SHM_MAX_REGIONS = 256, SV_SHM_NAME = 128, SV_SHM_KEY = 256 };

typedef struct sv_shm_region sv_shm_region;

typedef struct sv_shm {
  pthread_mutex_t mu;
  bool allowed;                 /* --allow-client-shm */
  int32_t n;
  sv_shm_region *r[SV_SHM_MAX_REGIONS];
} sv_shm;

void sv_shm_init(sv_shm *s, bool allowed);
void sv_shm_close(sv_shm *s);   /* unregisters every region */

/* POST v2/systemsharedmemory/region/<name>/register with its body
 * {"key": ..., "offset": ..., "byte_size": ...}: false with a message */
bool sv_shm_register(sv_shm *s, const char *name, const char *body, size_t n, char *err, size_t cap);
/* POST v2/systemsharedmemory[/region/<name>]/unregister (name NULL: all);
 * an unknown name is no error, as Triton's */
void sv_shm_unregister(sv_shm *s, const char *name);
/* GET v2/systemsharedmemory[/region/<name>]/status: false when name is
 * not registered */
bool sv_shm_status(sv_shm *s, const char *name, js_out *o);

/* Whether [offset, offset + bytes) lies in the registered region `name`;
 * false with a message */
bool sv_shm_check(sv_shm *s, const char *name, uint64_t offset, uint64_t bytes, char *err, size_t cap);
/* Copies bytes from region `name` at offset into dst / from src into it;
 * false with a message (unknown region, outside it, the object shrunk) */
bool sv_shm_read(sv_shm *s, const char *name, uint64_t offset, void *dst, size_t bytes, char *err,
                 size_t cap);
bool sv_shm_write(sv_shm *s, const char *name, uint64_t offset, const void *src, size_t bytes,
                  char *err, size_t cap);
#endif
