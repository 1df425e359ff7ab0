/* flow-serve -- a KServe v2 / Triton HTTP inference server for graphs
 * saved by graph:save, over a Triton-layout model repository. HTTP is
 * libmicrohttpd's (one thread per connection: a request waits for its
 * batch on its own thread); the protocol bodies are protocol.c, the models
 * and their queues repo.c. Only the public oneflow.h is used. See
 * doc/serving.md.
 *
 * flow-serve --model-repository DIR [--http-port 8000] [--threads N] ... */
#include "repo.h"
#include "log.h"
#include "trace.h"
#include <microhttpd.h>
#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef FLOW_SERVE_VERSION
#define FLOW_SERVE_VERSION "0.1"
#endif

typedef struct {
  sv_repo repo;
  size_t max_body;
  bool strict_ready;
  atomic_int inflight;
  atomic_bool draining;
  sv_shm shm;          /* system shared memory regions (shm.h) */
} server;

typedef struct {
  sv_block *blk;       /* holds body: binary inputs point into it */
  char *body;
  size_t len, cap;
  bool too_big;
  int64_t t0;          /* ns, when its headers arrived */
} req_ctx;

/* What the connection's thread answered last (one thread a connection):
 * for the request log line */
static _Thread_local int last_status;
static _Thread_local size_t last_bytes;
static _Thread_local char last_error[256];

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static enum MHD_Result reply(struct MHD_Connection *c, int status, js_out *o, size_t header_len,
                             const char *ctype) {
  if (o->oom) {
    jo_free(o);
    status = 500;
    JO_LIT(o, "{\"error\":\"out of memory\"}");
    header_len = 0;
  }
  size_t len = o->len;
  char *buf = o->p;
  o->p = NULL;
  last_status = status;
  last_bytes = len;
  /* an error's body is {"error": ...}: the log quotes it */
  snprintf(last_error, sizeof last_error, "%.*s", status >= 400 && buf ? (int)(len < 255 ? len : 255) : 0,
           buf ? buf : "");
  struct MHD_Response *r = MHD_create_response_from_buffer(len, buf ? buf : (void *)"",
                                                           buf ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!r) {
    free(buf);
    return MHD_NO;
  }
  if (header_len) {
    char n[32];
    snprintf(n, sizeof n, "%zu", header_len);
    MHD_add_response_header(r, "Inference-Header-Content-Length", n);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
  } else {
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype ? ctype : "application/json");
  }
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result error(struct MHD_Connection *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result error(struct MHD_Connection *c, int status, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  js_out o = {0};
  sv_write_error(&o, msg);
  return reply(c, status, &o, 0, NULL);
}

static enum MHD_Result empty(struct MHD_Connection *c, int status) {
  js_out o = {0};
  return reply(c, status, &o, 0, NULL);
}

/* splits url ("/v2/models/m/versions/3/infer") into at most 8 parts */
static int split(char *url, char **parts) {
  int n = 0;
  char *save = NULL;   /* strtok_r: every connection has its own thread */
  for (char *s = strtok_r(url, "/", &save); s && n < 8; s = strtok_r(NULL, "/", &save)) parts[n++] = s;
  return n;
}

static int64_t parse_version(const char *s) {
  if (!*s || strlen(s) > 18) return -1;
  for (const char *p = s; *p; p++)
    if (*p < '0' || *p > '9') return -1;
  return strtoll(s, NULL, 10);
}

/* a bad inference request: counted as the model version's failure, 400 */
static enum MHD_Result refused(server *sv, struct MHD_Connection *c, const char *model, int64_t ver,
                               const char *err) {
  pthread_mutex_lock(&sv->repo.mu);
  sv_model *m = sv_repo_find(&sv->repo, model);
  sv_version *v = m ? sv_model_version(m, ver) : NULL;
  if (v) v->stats.failure++;
  pthread_mutex_unlock(&sv->repo.mu);
  return error(c, 400, "%s", err);
}

static enum MHD_Result infer(server *sv, struct MHD_Connection *c, const char *model, int64_t ver,
                             const req_ctx *rc) {
  const char *enc = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
  if (enc && strcmp(enc, "identity") != 0)
    return error(c, 400, "Content-Encoding %s is not supported (send the body uncompressed)", enc);
  const char *hl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
  size_t header_len = 0;
  if (hl) {
    int64_t x = parse_version(hl);
    if (x <= 0) return error(c, 400, "bad Inference-Header-Content-Length '%.40s'", hl);
    header_len = (size_t)x;
  }
  sv_job_trace tr = {{0}, ""};
  bool traced = sv_trace_sample(model);
  tr.ts[SV_TRACE_RECV] = rc->t0;
  tr.ts[SV_TRACE_REQUEST] = mono_ns();
  pthread_mutex_lock(&sv->repo.mu);
  bool known = sv_repo_find(&sv->repo, model) != NULL;
  pthread_mutex_unlock(&sv->repo.mu);
  if (!known) return error(c, 404, "unknown model '%.128s'", model);
  sv_request req;
  char err[1024];
  if (!sv_parse_request(rc->body ? rc->body : "", rc->len, header_len, sv->repo.opt.max_json_values,
                        rc->blk, &req, err, sizeof err))
    return refused(sv, c, model, ver, err);
  /* inputs in shared memory are copied in now, outputs' regions checked
   * before the graph runs (their bytes are copied out by sv_job_finish) */
  bool shm_ok = true;
  char msg[768];
  for (int32_t i = 0; i < req.nin && shm_ok; i++) {
    sv_tensor *t = &req.in[i];
    if (!t->shm.region[0]) continue;
    /* 64-byte aligned, as the binary inputs placed in the body */
    t->data = aligned_alloc(64, (t->nbytes + 63) / 64 * 64 + 64);
    if (!t->data) {
      snprintf(err, sizeof err, "out of memory");
      shm_ok = false;
    } else if (!sv_shm_read(&sv->shm, t->shm.region, t->shm.offset, t->data, t->nbytes, msg, sizeof msg)) {
      snprintf(err, sizeof err, "input '%s': %s", t->name, msg);
      shm_ok = false;
    }
  }
  for (int32_t i = 0; i < req.nout && shm_ok; i++) {
    const sv_shm_ref *ref = &req.out_shm[i];
    if (ref->region[0] && !sv_shm_check(&sv->shm, ref->region, ref->offset, ref->byte_size, msg, sizeof msg)) {
      snprintf(err, sizeof err, "output '%s': %s", req.out_name[i], msg);
      shm_ok = false;
    }
  }
  if (!shm_ok) {
    sv_request_free(&req);
    return refused(sv, c, model, ver, err);
  }
  int64_t t0;
  {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  }
  pthread_mutex_lock(&sv->repo.mu);
  sv_model *m = sv_repo_find(&sv->repo, model);
  sv_version *v = m ? sv_model_version(m, ver) : NULL;
  sv_job *j = NULL;
  int status = 404;
  if (!m) {
    snprintf(err, sizeof err, "unknown model '%s'", model);
  } else if (!v) {
    if (ver > 0) snprintf(err, sizeof err, "unknown version %lld of model '%s'", (long long)ver, model);
    else snprintf(err, sizeof err, "model '%s' is not ready: %s", model, m->reason);
    status = ver > 0 ? 404 : 400;
  } else {
    j = sv_infer_submit(v, &req, err, sizeof err);
    status = 400;
  }
  pthread_mutex_unlock(&sv->repo.mu);
  sv_request_free(&req);
  if (!j) return error(c, status, "%s", err);
  js_out o = {0};
  size_t out_header = 0;
  char request_id[SV_NAME];
  snprintf(request_id, sizeof request_id, "%s", req.id);
  status = sv_job_finish(j, &sv->shm, &o, &out_header, traced ? &tr : NULL);
  if (traced) {
    tr.ts[SV_TRACE_REQUEST_END] = mono_ns();
    sv_trace_record(model, tr.version, request_id, tr.ts);
  }
  /* v stays valid: unloading joins the workers, and this request's worker
   * is done with it; the counters are read under the repo lock */
  pthread_mutex_lock(&sv->repo.mu);
  m = sv_repo_find(&sv->repo, model);
  v = m ? sv_model_version(m, ver) : NULL;
  if (v) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t dt = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - t0;
    if (status == 200) {
      v->stats.success++;
      v->stats.success_ns += dt;
    } else {
      v->stats.failure++;
      v->stats.fail_ns += dt;
    }
  }
  pthread_mutex_unlock(&sv->repo.mu);
  return reply(c, status, &o, out_header, NULL);
}

static enum MHD_Result route(server *sv, struct MHD_Connection *c, const char *url,
                             const char *method, const req_ctx *rc) {
  char buf[1024];
  if (strlen(url) >= sizeof buf) return error(c, 404, "unknown path");
  snprintf(buf, sizeof buf, "%s", url);
  char *p[8];
  int n = split(buf, p);
  bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0, post = strcmp(method, "POST") == 0;
  js_out o = {0};
  if (n == 1 && strcmp(p[0], "metrics") == 0 && get) {
    sv_repo_metrics(&sv->repo, &o);
    return reply(c, 200, &o, 0, "text/plain; version=0.0.4");
  }
  if (n < 1 || strcmp(p[0], "v2") != 0) return error(c, 404, "unknown path %.200s", url);
  if (n == 1 && get) {
    jo_fmt(&o, "{\"name\":\"flow-serve\",\"version\":\"%s\",\"extensions\":[\"binary_tensor_data\","
           "\"model_repository\",\"model_configuration\",\"statistics\",\"system_shared_memory\","
           "\"logging\",\"classification\",\"trace\"]}", FLOW_SERVE_VERSION);
    return reply(c, 200, &o, 0, NULL);
  }
  /* the trace extension: the server's settings, or a model's */
  if ((n == 3 && strcmp(p[1], "trace") == 0 && strcmp(p[2], "setting") == 0) ||
      (n == 5 && strcmp(p[1], "models") == 0 && strcmp(p[3], "trace") == 0 && strcmp(p[4], "setting") == 0)) {
    if (!get && !post) return error(c, 405, "trace setting takes GET or POST");
    const char *model = n == 5 ? p[2] : NULL;
    if (model) {
      pthread_mutex_lock(&sv->repo.mu);
      bool known = sv_repo_find(&sv->repo, model) != NULL;
      pthread_mutex_unlock(&sv->repo.mu);
      if (!known) return error(c, 404, "unknown model '%.128s'", model);
    }
    if (post) {
      char err[512];
      if (!sv_trace_update(model, rc->body, rc->len, err, sizeof err)) return error(c, 400, "%s", err);
    }
    sv_trace_settings(model, &o);
    return reply(c, 200, &o, 0, NULL);
  }
  if (n == 2 && strcmp(p[1], "logging") == 0) {   /* the logging extension */
    if (post) {
      char err[512];
      if (!sv_log_update(rc->body, rc->len, err, sizeof err)) return error(c, 400, "%s", err);
    } else if (!get) {
      return error(c, 405, "logging takes GET or POST");
    }
    sv_log_settings(&o);
    return reply(c, 200, &o, 0, NULL);
  }
  if (n == 3 && strcmp(p[1], "health") == 0 && get) {
    if (strcmp(p[2], "live") == 0) return empty(c, sv->draining ? 400 : 200);
    if (strcmp(p[2], "ready") == 0) {
      bool ready = !sv->draining;
      pthread_mutex_lock(&sv->repo.mu);
      for (int32_t i = 0; ready && sv->strict_ready && i < sv->repo.n; i++)
        ready = sv_model_ready(sv->repo.models[i]);
      pthread_mutex_unlock(&sv->repo.mu);
      return empty(c, ready ? 200 : 400);
    }
  }
  if (n == 3 && strcmp(p[1], "repository") == 0 && strcmp(p[2], "index") == 0 && post) {
    /* an optional body {"ready": true}: the ready versions only (Triton's) */
    bool ready_only = false;
    if (rc->body && rc->len) {
      js_doc d;
      bool ok = js_parse(&d, rc->body, rc->len, 64);
      const js_val *root = ok ? js_root(&d) : NULL;
      ok = root && root->type == JS_OBJ;
      for (const js_val *k = ok ? js_first(&d, root) : NULL; k && ok; k = js_next(&d, k)) {
        ok = strcmp(k->key, "ready") == 0 && k->type == JS_BOOL;
        if (ok) ready_only = k->b;
      }
      js_free(&d);
      if (!ok) return error(c, 400, "repository index: the body must be {} or {\"ready\": true|false}");
    }
    sv_repo_index(&sv->repo, ready_only, &o);
    return reply(c, 200, &o, 0, NULL);
  }
  if (n == 5 && strcmp(p[1], "repository") == 0 && strcmp(p[2], "models") == 0 && post) {
    char err[1024];
    if (strcmp(p[4], "load") == 0) {
      /* an optional body {"parameters": {"config": "<JSON>"}}: Triton's
       * configuration override (tritonclient's load_model(config=...)) */
      const char *cfg = NULL;
      size_t cfg_len = 0;
      js_doc d = {0};
      if (rc->body && rc->len) {
        if (!js_parse(&d, rc->body, rc->len, sv->repo.opt.max_json_values)) {
          snprintf(err, sizeof err, "load: %s", d.error);
          js_free(&d);
          return error(c, 400, "%s", err);
        }
        const js_val *root = js_root(&d), *params = js_get(&d, root, "parameters");
        bool bad = !root || root->type != JS_OBJ || (params && params->type != JS_OBJ);
        for (const js_val *k = bad ? NULL : js_first(&d, root); k; k = js_next(&d, k))
          if (strcmp(k->key, "parameters") != 0) {
            snprintf(err, sizeof err, "load: unknown member '%.100s' (only \"parameters\")", k->key);
            js_free(&d);
            return error(c, 400, "%s", err);
          }
        for (const js_val *k = !bad && params ? js_first(&d, params) : NULL; k; k = js_next(&d, k)) {
          if (strcmp(k->key, "config") == 0 && k->type == JS_STR) {
            cfg = k->s;
            cfg_len = k->slen;
          } else {
            snprintf(err, sizeof err, "load: parameter '%.100s' is not supported (only \"config\", "
                     "a model configuration as a JSON string; file overrides are not)", k->key);
            js_free(&d);
            return error(c, 400, "%s", err);
          }
        }
        if (bad) {
          js_free(&d);
          return error(c, 400, "load: the body must be {\"parameters\": {\"config\": \"...\"}}");
        }
      }
      bool ok = sv_repo_load(&sv->repo, p[3], cfg, cfg_len, err, sizeof err);
      js_free(&d);
      if (!ok) return error(c, 400, "%s", err);
      return empty(c, 200);
    }
    if (strcmp(p[4], "unload") == 0) {
      if (!sv_repo_unload(&sv->repo, p[3], err, sizeof err)) return error(c, 400, "%s", err);
      return empty(c, 200);
    }
  }
  /* v2/systemsharedmemory[/region/<name>]/{status,register,unregister};
   * v2/cudasharedmemory answers as a server without GPU regions */
  bool sysm = n >= 2 && strcmp(p[1], "systemsharedmemory") == 0;
  if ((sysm || (n >= 2 && strcmp(p[1], "cudasharedmemory") == 0)) &&
      (n == 3 || (n == 5 && strcmp(p[2], "region") == 0))) {
    const char *name = n == 5 ? p[3] : NULL, *what = p[n - 1];
    if (strcmp(what, "status") == 0) {
      if (!get) return error(c, 405, "status takes GET");
      if (!sysm) {
        if (name) return error(c, 400, "unable to find cuda shared memory region '%.128s'", name);
        JO_LIT(&o, "[]");
        return reply(c, 200, &o, 0, NULL);
      }
      if (!sv_shm_status(&sv->shm, name, &o))
        return error(c, 400, "unable to find system shared memory region '%.128s'", name);
      return reply(c, 200, &o, 0, NULL);
    }
    if (strcmp(what, "register") == 0 && name) {
      if (!post) return error(c, 405, "register takes POST");
      if (!sysm)
        return error(c, 400, "CUDA shared memory is not supported: flow-serve's instances run on "
                     "the CPU (register system shared memory instead)");
      char err[1024];
      if (!sv_shm_register(&sv->shm, name, rc->body, rc->len, err, sizeof err))
        return error(c, 400, "%s", err);
      return empty(c, 200);
    }
    if (strcmp(what, "unregister") == 0) {
      if (!post) return error(c, 405, "unregister takes POST");
      if (sysm) sv_shm_unregister(&sv->shm, name);
      return empty(c, 200);
    }
  }
  if (n == 3 && strcmp(p[1], "models") == 0 && strcmp(p[2], "stats") == 0 && get) {
    pthread_mutex_lock(&sv->repo.mu);
    sv_repo_stats(&sv->repo, NULL, NULL, &o);
    pthread_mutex_unlock(&sv->repo.mu);
    return reply(c, 200, &o, 0, NULL);
  }
  if (n >= 3 && strcmp(p[1], "models") == 0) {
    const char *model = p[2];
    int64_t ver = 0;
    int rest = 3;
    if (n >= 5 && strcmp(p[3], "versions") == 0) {
      if ((ver = parse_version(p[4])) <= 0) return error(c, 400, "bad version '%.40s'", p[4]);
      rest = 5;
    }
    const char *what = n > rest ? p[rest] : "";
    if (n > rest + 1) return error(c, 404, "unknown path %.200s", url);
    if (strcmp(what, "infer") == 0) {
      if (!post) return error(c, 405, "infer takes POST");
      if (sv->draining) return error(c, 503, "the server is shutting down");
      return infer(sv, c, model, ver, rc);
    }
    if (!get) return error(c, 405, "%s takes GET", *what ? what : "model metadata");
    pthread_mutex_lock(&sv->repo.mu);
    sv_model *m = sv_repo_find(&sv->repo, model);
    sv_version *v = m ? sv_model_version(m, ver) : NULL;
    int status = 200;
    if (!m || (ver > 0 && !v)) {
      status = 404;
      char msg[400];
      if (m) snprintf(msg, sizeof msg, "unknown version %lld of model '%.128s'", (long long)ver, model);
      else snprintf(msg, sizeof msg, "unknown model '%.128s'", model);
      sv_write_error(&o, msg);
    } else if (strcmp(what, "ready") == 0) {
      status = v && v->state == SV_READY ? 200 : 400;
      if (status != 200) sv_write_error(&o, v ? v->reason : m->reason);
    } else if (strcmp(what, "stats") == 0) {
      sv_repo_stats(&sv->repo, m, ver > 0 ? v : NULL, &o);
    } else if (strcmp(what, "config") == 0) {
      sv_config_write(&o, &m->cfg);
    } else if (!*what) {
      if (!v) {
        status = 400;
        sv_write_error(&o, m->reason);
      } else {
        sv_model_metadata(m, ver > 0 ? v : NULL, &o);
      }
    } else {
      status = 404;
      sv_write_error(&o, "unknown path");
    }
    pthread_mutex_unlock(&sv->repo.mu);
    return reply(c, status, &o, 0, NULL);
  }
  return error(c, 404, "unknown path %.200s (%s)", url, method);
}

/* verbose 1: a line a request; 2: and a 4xx answer's error text; a 5xx
 * answer is an error at any level */
static void log_request(const char *method, const char *url, size_t in, int64_t t0) {
  if (last_status >= 500) {
    sv_log(SV_LOG_ERROR, "%s %.300s: %d %s", method, url, last_status, last_error);
    return;
  }
  if (!sv_log_verbose(1)) return;
  double ms = (double)(mono_ns() - t0) / 1e6;
  if (last_status >= 400 && sv_log_verbose(2))
    sv_logv(2, "%s %.300s %d, %zu bytes in, %zu out, %.3f ms: %s", method, url, last_status, in, last_bytes,
            ms, last_error);
  else
    sv_logv(1, "%s %.300s %d, %zu bytes in, %zu out, %.3f ms", method, url, last_status, in, last_bytes, ms);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls) {
  (void)version;
  server *sv = cls;
  req_ctx *rc = *con_cls;
  if (!rc) {
    rc = calloc(1, sizeof *rc);
    if (!rc) return MHD_NO;
    *con_cls = rc;
    rc->t0 = mono_ns();
    sv->inflight++;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long want = cl ? strtoull(cl, NULL, 10) : 0;
    if (want > sv->max_body) {
      rc->too_big = true;
      enum MHD_Result r = error(c, 413, "the request body (%s bytes) is larger than the limit, %zu bytes "
                                "(--max-body-bytes)", cl, sv->max_body);
      log_request(method, url, 0, rc->t0);
      return r;
    }
    /* the whole body in one block when its length is announced (growing by
     * doubling copied a 600 KB image body 1 MB over), laid out so that the
     * binary tensor data after the JSON header is aligned: the inputs then
     * point into the body instead of being copied out of it */
    if (want > 0) {
      const char *hl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
      int64_t h = hl ? parse_version(hl) : 0;
      rc->blk = sv_block_new((size_t)want, h > 0 ? (size_t)h : 0, &rc->body);
      if (!rc->blk) return MHD_NO;
      rc->cap = (size_t)want;
    }
    return MHD_YES;
  }
  if (*upload_size) {
    size_t n = *upload_size;
    *upload_size = 0;
    if (rc->too_big || n > sv->max_body - rc->len) {
      rc->too_big = true;
      return MHD_YES;   /* discarded; answered 413 at the end */
    }
    if (rc->len + n > rc->cap) {
      size_t cap = rc->cap ? rc->cap : 65536;
      while (cap < rc->len + n) cap *= 2;
      char *b;
      sv_block *blk = sv_block_new(cap, 0, &b);
      if (!blk) return MHD_NO;
      if (rc->len) memcpy(b, rc->body, rc->len);
      sv_block_release(rc->blk);
      rc->blk = blk;
      rc->body = b;
      rc->cap = cap;
    }
    memcpy(rc->body + rc->len, upload, n);
    rc->len += n;
    return MHD_YES;
  }
  last_status = 0;
  enum MHD_Result r = rc->too_big
      ? error(c, 413, "the request body is larger than the limit, %zu bytes (--max-body-bytes)", sv->max_body)
      : route(sv, c, url, method, rc);
  log_request(method, url, rc->len, rc->t0);
  return r;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
  (void)c;
  (void)toe;
  server *sv = cls;
  req_ctx *rc = *con_cls;
  if (!rc) return;
  sv_block_release(rc->blk);
  free(rc);
  *con_cls = NULL;
  sv->inflight--;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: flow-serve --model-repository DIR [options]\n"
          "  --http-port N          port to listen on (default 8000; 0: a free one, printed)\n"
          "  --http-address ADDR    IPv4 address to bind (default 0.0.0.0)\n"
          "  --threads N            instances per model without an instance_group (default 1)\n"
          "  --max-batch-size N     max_batch_size of auto-completed configs (default: the\n"
          "                         largest batch the graph was compiled for; 0: no batching)\n"
          "  --max-body-bytes N     larger request bodies get 413 (default 67108864)\n"
          "  --max-connections N    (default 1024)\n"
          "  --timeout S            idle/slow connections are closed after S seconds (default 30)\n"
          "  --drain-timeout S      on SIGTERM, wait up to S seconds for requests (default 30)\n"
          "  --strict-readiness B   /v2/health/ready only when every model is (default true)\n"
          "  --allow-client-shm B   let clients register system shared memory regions (default\n"
          "                         false: a region names any shared memory object this user can open)\n"
          "  --log-file PATH        append the log to PATH (default: stderr)\n"
          "  --log-info B, --log-warning B, --log-error B   log those levels (default true)\n"
          "  --log-verbose N        1: a line a request, 2: and 4xx errors (default 0)\n"
          "  --log-format F         default or ISO8601 (GET/POST /v2/logging changes these)\n"
          "  --trace-file PATH      where request traces go (the trace extension)\n"
          "  --trace-level L        OFF or TIMESTAMPS (default OFF)\n"
          "  --trace-rate N, --trace-count N, --trace-log-frequency N\n"
          "                         trace 1 request in N (1000); at most N traces (-1: no limit);\n"
          "                         write every N traces to FILE.<k> (0: FILE, at exit)\n");
}

/* OpenMP's threads spin up to 300000 pauses for the next parallel region
 * before they sleep (libgomp's default). A served graph runs between waits
 * for requests, next to the HTTP threads: the spinning team held the cores
 * they and the graph's own next op needed -- a ResNet-18 request's graph
 * run took 2.6 s instead of 0.11 s in-process at load 10 on 2 cores. So
 * flow-serve runs with what `require 'oneflow'` sets (lua/oneflow/_C.lua):
 * GOMP_SPINCOUNT=10000, unless GOMP_SPINCOUNT or OMP_WAIT_POLICY is given. libgomp reads it when
 * it loads, before main: the process re-executes itself once with it set. */
static void spincount(char **argv) {
  if (getenv("GOMP_SPINCOUNT") || getenv("OMP_WAIT_POLICY")) return;
  if (setenv("GOMP_SPINCOUNT", "10000", 0) != 0) return;
  execv("/proc/self/exe", argv);
  /* no /proc: run on with libgomp's default */
}

int main(int argc, char **argv) {
  spincount(argv);
  /* Request bodies and input tensors (an image is 600 KB) are allocated and
   * freed on every request: with glibc's sliding mmap threshold a buffer of
   * the size just freed is mmapped afresh, and the kernel zero-fills its
   * pages each time (a third of the server's CPU time per request). Keep
   * blocks up to 32 MB on the heap and do not trim what requests reuse. */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  static server sv;
  sv_options opt = {NULL, 1, -1, 1 << 24};
  int port = 8000;
  const char *addr = "0.0.0.0";
  unsigned timeout = 30, max_conn = 1024, drain = 30;
  sv.max_body = (size_t)64 << 20;
  sv.strict_ready = true;
  bool allow_shm = false;
  const char *log_file = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    char *eq = strchr(a, '=');
    char key[64];
    if (eq && a[0] == '-' && (size_t)(eq - a) < sizeof key) {
      memcpy(key, a, (size_t)(eq - a));
      key[eq - a] = 0;
      a = key;
      val = eq + 1;
    } else if (strcmp(a, "--help") && strcmp(a, "-h")) {
      i++;
    }
    long long x = val ? strtoll(val, NULL, 10) : -1;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    if (!val) { fprintf(stderr, "flow-serve: %s needs a value\n", a); return 2; }
    if (!strcmp(a, "--model-repository") || !strcmp(a, "--model-store")) opt.root = val;
    else if (!strcmp(a, "--http-port") && x >= 0 && x < 65536) port = (int)x;
    else if (!strcmp(a, "--http-address")) addr = val;
    else if (!strcmp(a, "--threads") && x >= 1 && x <= 64) opt.default_instances = (int32_t)x;
    else if (!strcmp(a, "--max-batch-size") && x >= 0 && x <= 1 << 20) opt.default_max_batch = (int32_t)x;
    else if (!strcmp(a, "--max-body-bytes") && x >= 1) sv.max_body = (size_t)x;
    else if (!strcmp(a, "--max-connections") && x >= 1) max_conn = (unsigned)x;
    else if (!strcmp(a, "--timeout") && x >= 1) timeout = (unsigned)x;
    else if (!strcmp(a, "--drain-timeout") && x >= 0) drain = (unsigned)x;
    else if (!strcmp(a, "--strict-readiness") && (!strcmp(val, "true") || !strcmp(val, "false")))
      sv.strict_ready = !strcmp(val, "true");
    else if (!strcmp(a, "--allow-client-shm") && (!strcmp(val, "true") || !strcmp(val, "false")))
      allow_shm = !strcmp(val, "true");
    else if (!strcmp(a, "--log-file")) log_file = val;
    else if (!strncmp(a, "--log-", 6) && sv_log_option(a, val)) continue;
    else if (!strncmp(a, "--trace-", 8) && sv_trace_option(a, val)) continue;
    else {
      fprintf(stderr, "flow-serve: bad option %s %s\n", a, val);
      usage(stderr);
      return 2;
    }
  }
  if (!opt.root) {
    usage(stderr);
    return 2;
  }
  /* SIGTERM/SIGINT are taken by sigwait below: every thread blocks them */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (sv_trace_check()) {
    fprintf(stderr, "flow-serve: %s\n", sv_trace_check());
    return 2;
  }
  if (!sv_log_open(log_file)) {
    fprintf(stderr, "flow-serve: cannot open --log-file %s: %s\n", log_file, strerror(errno));
    return 1;
  }
  sv_shm_init(&sv.shm, allow_shm);
  char err[1024];
  if (!sv_repo_open(&sv.repo, &opt, err, sizeof err)) {
    fprintf(stderr, "flow-serve: %s\n", err);
    return 1;
  }
  sv_repo_load_all(&sv.repo);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
    fprintf(stderr, "flow-serve: bad --http-address %s\n", addr);
    return 2;
  }
  struct MHD_Daemon *d = MHD_start_daemon(
      MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
          MHD_USE_POLL | MHD_USE_ERROR_LOG,
      (uint16_t)port, NULL, NULL, handler, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
      MHD_OPTION_NOTIFY_COMPLETED, completed, &sv, MHD_OPTION_CONNECTION_TIMEOUT, timeout,
      MHD_OPTION_CONNECTION_LIMIT, max_conn,
      /* a connection's read buffer (32 KB by default): an image body then
       * takes a few reads instead of twenty, each a poll and a recv */
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 << 10), MHD_OPTION_END);
  if (!d) {
    fprintf(stderr, "flow-serve: cannot listen on %s:%d: %s\n", addr, port, strerror(errno));
    sv_repo_close(&sv.repo);
    return 1;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  printf("flow-serve: listening on %s:%d, %d models\n", addr, info ? (int)info->port : port,
         (int)sv.repo.n);
  fflush(stdout);
  int sig = 0;
  sigwait(&sigs, &sig);
  /* drain: no new connections, the requests in flight finish */
  sv.draining = true;
  MHD_socket fd = MHD_quiesce_daemon(d);
  if (fd != MHD_INVALID_SOCKET) close(fd);
  for (unsigned ms = 0; sv.inflight > 0 && ms < drain * 1000; ms += 10) usleep(10000);
  int left = sv.inflight;
  MHD_stop_daemon(d);
  sv_repo_close(&sv.repo);
  sv_shm_close(&sv.shm);
  sv_trace_flush();
  sv_log_close();
  printf("flow-serve: %s: stopped (%d requests unfinished)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", left);
  return 0;
}
