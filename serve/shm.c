/* shm.c -- the system shared memory regions of flow-serve (shm.h). */
#include "shm.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct sv_shm_region {
  char name[SV_SHM_NAME], key[SV_SHM_KEY];
  uint64_t offset, byte_size;   /* the region within the object */
  int fd;
  int32_t refs;                 /* the registry's, and each copy under way */
};

static bool fail(char *e, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *e, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e, cap, fmt, ap);
  va_end(ap);
  return false;
}

void sv_shm_init(sv_shm *s, bool allowed) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  s->allowed = allowed;
}

/* caller holds s->mu */
static void drop(sv_shm_region *r) {
  if (--r->refs > 0) return;
  close(r->fd);
  free(r);
}

static int32_t find(const sv_shm *s, const char *name) {
  for (int32_t i = 0; i < s->n; i++)
    if (strcmp(s->r[i]->name, name) == 0) return i;
  return -1;
}

void sv_shm_close(sv_shm *s) {
  sv_shm_unregister(s, NULL);
  pthread_mutex_destroy(&s->mu);
}

/* glibc's shm_open skips leading slashes and refuses others; "." and ".."
 * would name /dev/shm itself and its parent */
static bool key_ok(const char *key) {
  while (*key == '/') key++;
  return *key && strchr(key, '/') == NULL && strcmp(key, ".") != 0 && strcmp(key, "..") != 0;
}

bool sv_shm_register(sv_shm *s, const char *name, const char *body, size_t n, char *e, size_t cap) {
  if (!s->allowed)
    return fail(e, cap, "system shared memory is off: start flow-serve with --allow-client-shm=true "
                "to let clients register regions");
  if (!*name || strlen(name) >= SV_SHM_NAME)
    return fail(e, cap, "shared memory region names are 1 to %d bytes", SV_SHM_NAME - 1);
  js_doc d;
  if (!js_parse(&d, body ? body : "", n, 64)) {
    fail(e, cap, "register '%s': %s", name, d.error);
    js_free(&d);
    return false;
  }
  const js_val *root = js_root(&d);
  char key[SV_SHM_KEY] = "";
  int64_t offset = 0, size = -1;
  bool ok = root && root->type == JS_OBJ, have_key = false;
  if (!ok) fail(e, cap, "register '%s': the body must be {\"key\": ..., \"offset\": ..., \"byte_size\": ...}", name);
  for (const js_val *k = ok ? js_first(&d, root) : NULL; k && ok; k = js_next(&d, k)) {
    if (strcmp(k->key, "key") == 0) {
      ok = k->type == JS_STR && k->slen > 0 && k->slen < sizeof key && strlen(k->s) == k->slen;
      if (ok) {
        memcpy(key, k->s, k->slen + 1);
        have_key = true;
      } else {
        fail(e, cap, "register '%s': \"key\" must be a string of 1 to %d bytes", name, SV_SHM_KEY - 1);
      }
    } else if (strcmp(k->key, "offset") == 0 || strcmp(k->key, "byte_size") == 0) {
      bool off = k->key[0] == 'o';
      ok = k->type == JS_NUM && k->is_int && k->i >= 0;
      if (ok) *(off ? &offset : &size) = k->i;
      else fail(e, cap, "register '%s': \"%s\" must be a non-negative integer", name, k->key);
    } else {
      ok = fail(e, cap, "register '%s': unknown member '%.100s' (key, offset, byte_size)", name, k->key);
    }
  }
  js_free(&d);
  if (!ok) return false;
  if (!have_key || size < 0)
    return fail(e, cap, "register '%s': the body needs \"key\" and \"byte_size\"", name);
  if (!key_ok(key))
    return fail(e, cap, "register '%s': '%s' is not a shared memory key (a name under /dev/shm, "
                "\"/name\")", name, key);
  if ((uint64_t)offset > UINT64_MAX - (uint64_t)size)
    return fail(e, cap, "register '%s': offset + byte_size overflows", name);
  /* O_NOFOLLOW: a link planted under /dev/shm must not open another file;
   * O_NONBLOCK: nor may a FIFO there hang the request */
  int fd = shm_open(key, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
  if (fd < 0)
    return fail(e, cap, "register '%s': unable to open shared memory object '%s': %s", name, key,
                strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return fail(e, cap, "register '%s': '%s' is not a shared memory object", name, key);
  }
  if ((uint64_t)st.st_size < (uint64_t)offset + (uint64_t)size) {
    close(fd);
    return fail(e, cap, "register '%s': offset %" PRId64 " + byte_size %" PRId64 " is past the end of "
                "'%s' (%lld bytes)", name, offset, size, key, (long long)st.st_size);
  }
  sv_shm_region *r = calloc(1, sizeof *r);
  if (!r) {
    close(fd);
    return fail(e, cap, "out of memory");
  }
  snprintf(r->name, sizeof r->name, "%s", name);
  snprintf(r->key, sizeof r->key, "%s", key);
  r->offset = (uint64_t)offset;
  r->byte_size = (uint64_t)size;
  r->fd = fd;
  r->refs = 1;
  pthread_mutex_lock(&s->mu);
  if (find(s, name) >= 0) ok = fail(e, cap, "shared memory region '%s' is already registered", name);
  else if (s->n == SV_SHM_MAX_REGIONS)
    ok = fail(e, cap, "register '%s': %d regions are registered already (the most)", name,
              SV_SHM_MAX_REGIONS);
  else s->r[s->n++] = r, ok = true;
  if (!ok) drop(r);
  pthread_mutex_unlock(&s->mu);
  return ok;
}

void sv_shm_unregister(sv_shm *s, const char *name) {
  pthread_mutex_lock(&s->mu);
  for (int32_t i = 0; i < s->n;) {
    if (name && strcmp(s->r[i]->name, name) != 0) {
      i++;
      continue;
    }
    drop(s->r[i]);
    s->r[i] = s->r[--s->n];   /* the order of regions carries no meaning */
  }
  pthread_mutex_unlock(&s->mu);
}

bool sv_shm_status(sv_shm *s, const char *name, js_out *o) {
  pthread_mutex_lock(&s->mu);
  bool found = !name || find(s, name) >= 0;
  if (found) {
    JO_LIT(o, "[");
    bool first = true;
    for (int32_t i = 0; i < s->n; i++) {
      const sv_shm_region *r = s->r[i];
      if (name && strcmp(r->name, name) != 0) continue;
      if (!first) JO_LIT(o, ",");
      first = false;
      JO_LIT(o, "{\"name\":");
      jo_str(o, r->name);
      JO_LIT(o, ",\"key\":");
      jo_str(o, r->key);
      jo_fmt(o, ",\"offset\":%" PRIu64 ",\"byte_size\":%" PRIu64 "}", r->offset, r->byte_size);
    }
    JO_LIT(o, "]");
  }
  pthread_mutex_unlock(&s->mu);
  return found;
}

/* the region, retained, when [offset, offset + bytes) lies in it */
static sv_shm_region *take(sv_shm *s, const char *name, uint64_t offset, uint64_t bytes, char *e,
                           size_t cap) {
  pthread_mutex_lock(&s->mu);
  int32_t i = find(s, name);
  sv_shm_region *r = i >= 0 ? s->r[i] : NULL;
  if (!r) fail(e, cap, "unable to find system shared memory region '%s'", name);
  else if (offset > r->byte_size || bytes > r->byte_size - offset) {
    fail(e, cap, "%" PRIu64 " bytes at offset %" PRIu64 " are outside shared memory region '%s' (%" PRIu64
         " bytes)", bytes, offset, name, r->byte_size);
    r = NULL;
  } else {
    r->refs++;
  }
  pthread_mutex_unlock(&s->mu);
  return r;
}

static void give(sv_shm *s, sv_shm_region *r) {
  pthread_mutex_lock(&s->mu);
  drop(r);
  pthread_mutex_unlock(&s->mu);
}

bool sv_shm_check(sv_shm *s, const char *name, uint64_t offset, uint64_t bytes, char *e, size_t cap) {
  sv_shm_region *r = take(s, name, offset, bytes, e, cap);
  if (r) give(s, r);
  return r != NULL;
}

static bool copy(sv_shm *s, const char *name, uint64_t offset, void *buf, size_t bytes, bool out,
                 char *e, size_t cap) {
  sv_shm_region *r = take(s, name, offset, bytes, e, cap);
  if (!r) return false;
  uint64_t at = r->offset + offset;
  size_t done = 0;
  bool ok = true;
  while (done < bytes) {
    ssize_t k = out ? pwrite(r->fd, (const char *)buf + done, bytes - done, (off_t)(at + done))
                    : pread(r->fd, (char *)buf + done, bytes - done, (off_t)(at + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {   /* 0: the object was shrunk after registration */
      ok = fail(e, cap, "shared memory region '%s' ('%s'): %s %zu bytes at %" PRIu64 " failed: %s", name,
                r->key, out ? "writing" : "reading", bytes, at, k < 0 ? strerror(errno)
                : "the object is smaller than the region now");
      break;
    }
    done += (size_t)k;
  }
  give(s, r);
  return ok;
}

bool sv_shm_read(sv_shm *s, const char *name, uint64_t offset, void *dst, size_t bytes, char *e,
                 size_t cap) {
  return copy(s, name, offset, dst, bytes, false, e, cap);
}

bool sv_shm_write(sv_shm *s, const char *name, uint64_t offset, const void *src, size_t bytes,
                  char *e, size_t cap) {
  return copy(s, name, offset, (void *)(uintptr_t)src, bytes, true, e, cap);
}
