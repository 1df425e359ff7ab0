/* trace.c -- flow-serve's request traces (trace.h). */
#include "trace.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char file[1024];
static int64_t frequency;
/* the server's settings, and a model's own (Triton's per-model settings:
 * made from the server's when first set, removed by an empty POST) */
typedef struct {
  char model[128];
  bool on;                         /* trace_level TIMESTAMPS */
  int64_t rate, count;
  int64_t seen;                    /* inference requests since tracing began */
} settings;
static settings global = {"", false, 1000, -1, 0};
static settings models[256];
static int32_t nmodels;
static atomic_bool any_on;         /* some settings trace: the fast path's test */
static int64_t next_id = 1;
static js_out buf;                 /* traces not yet written, comma-separated */
static int64_t buffered, file_index;
static int64_t dropped;            /* over the buffer's bound, never written */
enum { MAX_BUFFER = 64 << 20 };

static const char *const NAMES[SV_TRACE_N] = {"HTTP_RECV_START", "REQUEST_START", "QUEUE_START",
                                              "COMPUTE_START", "COMPUTE_INPUT_END",
                                              "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"};

static bool integer(const char *s, int64_t lo, int64_t *out) {
  char *end;
  long long x = strtoll(s, &end, 10);
  if (!*s || *end || x < lo || x > ((int64_t)1 << 40)) return false;
  *out = x;
  return true;
}

/* buf as a JSON array into path, through a temporary file; caller holds mu */
static void write_locked(const char *path) {
  if (!buffered || !*path) return;
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  bool ok = f && fputc('[', f) != EOF && fwrite(buf.p, 1, buf.len, f) == buf.len && fputs("]\n", f) != EOF;
  if (f) ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    fprintf(stderr, "flow-serve: cannot write the trace file %s: %s\n", path, strerror(errno));
    unlink(tmp);
  }
  jo_free(&buf);
  buffered = 0;
}

/* the buffered traces into their file; caller holds mu */
static void flush_locked(void) {
  if (frequency > 0) {
    char path[1100];
    snprintf(path, sizeof path, "%s.%lld", file, (long long)file_index++);
    write_locked(path);
  } else {
    write_locked(file);
  }
}

bool sv_trace_option(const char *name, const char *v) {
  if (!strcmp(name, "--trace-file")) {
    if (strlen(v) >= sizeof file - 32) return false;
    snprintf(file, sizeof file, "%s", v);
  } else if (!strcmp(name, "--trace-level")) {
    if (strcmp(v, "OFF") && strcmp(v, "TIMESTAMPS")) return false;
    any_on = global.on = !strcmp(v, "TIMESTAMPS");
  } else if (!strcmp(name, "--trace-rate")) {
    return integer(v, 1, &global.rate);
  } else if (!strcmp(name, "--trace-count")) {
    return integer(v, -1, &global.count);
  } else if (!strcmp(name, "--trace-log-frequency")) {
    return integer(v, 0, &frequency);
  } else {
    return false;
  }
  return true;
}

/* model's own settings (NULL: none); caller holds mu */
static settings *find_locked(const char *model) {
  for (int32_t i = 0; model && i < nmodels; i++)
    if (!strcmp(models[i].model, model)) return &models[i];
  return NULL;
}

void sv_trace_settings(const char *model, js_out *o) {
  pthread_mutex_lock(&mu);
  const settings *st = find_locked(model);
  if (!st) st = &global;
  JO_LIT(o, "{\"trace_file\":");
  jo_str(o, file);
  jo_fmt(o, ",\"trace_level\":[\"%s\"],\"trace_rate\":\"%lld\",\"trace_count\":\"%lld\","
         "\"log_frequency\":\"%lld\"}", st->on ? "TIMESTAMPS" : "OFF", (long long)st->rate,
         (long long)st->count, (long long)frequency);
  pthread_mutex_unlock(&mu);
}

/* whether any settings trace; caller holds mu */
static bool any_locked(void) {
  bool a = global.on;
  for (int32_t i = 0; i < nmodels; i++) a = a || models[i].on;
  return a;
}

/* a setting's value: Triton's are strings (the level an array of them); numbers are taken too */
static bool number(const js_val *v, int64_t lo, int64_t *out) {
  if (v->type == JS_STR) return integer(v->s, lo, out);
  if (v->type != JS_NUM || !v->is_int || v->i < lo || v->i > ((int64_t)1 << 40)) return false;
  *out = v->i;
  return true;
}

bool sv_trace_update(const char *model, const char *body, size_t n, char *e, size_t cap) {
  js_doc d;
  if (!js_parse(&d, body ? body : "", n, 64)) {
    snprintf(e, cap, "trace setting: %s", d.error);
    js_free(&d);
    return false;
  }
  const js_val *root = js_root(&d);
  bool ok = root && root->type == JS_OBJ;
  if (!ok) snprintf(e, cap, "trace setting: the body must be an object of settings");
  int level = -1;
  int64_t r = -1, c = -2, f = -1;
  pthread_mutex_lock(&mu);
  for (const js_val *k = ok ? js_first(&d, root) : NULL; k && ok; k = js_next(&d, k)) {
    if (!strcmp(k->key, "trace_level")) {
      /* ["OFF"] or ["TIMESTAMPS"] (a plain string too) */
      const js_val *v = k->type == JS_ARR && k->n == 1 ? js_first(&d, k) : k;
      ok = v->type == JS_STR && (!strcmp(v->s, "OFF") || !strcmp(v->s, "TIMESTAMPS"));
      if (ok) level = !strcmp(v->s, "TIMESTAMPS");
      else snprintf(e, cap, "trace setting: trace_level must be [\"OFF\"] or [\"TIMESTAMPS\"] (TENSORS is "
                    "not supported)");
    } else if (!strcmp(k->key, "trace_rate")) {
      if (!(ok = number(k, 1, &r))) snprintf(e, cap, "trace setting: trace_rate must be a positive integer");
    } else if (!strcmp(k->key, "trace_count")) {
      if (!(ok = number(k, -1, &c))) snprintf(e, cap, "trace setting: trace_count must be -1 or more");
    } else if (!strcmp(k->key, "log_frequency")) {
      if (!(ok = number(k, 0, &f))) snprintf(e, cap, "trace setting: log_frequency must be 0 or more");
    } else if (!strcmp(k->key, "trace_file")) {
      ok = k->type == JS_STR && !strcmp(k->s, file);
      if (!ok)
        snprintf(e, cap, "trace setting: trace_file is set on the command line only (--trace-file): a "
                 "request could otherwise make the server write any file it may write");
    } else {
      ok = false;
      snprintf(e, cap, "trace setting: unknown setting '%.100s' (trace_file, trace_level, trace_rate, "
               "trace_count, log_frequency)", k->key);
    }
  }
  if (ok && level == 1 && !*file) {
    ok = false;
    snprintf(e, cap, "trace setting: tracing needs a trace file (start flow-serve with --trace-file)");
  }
  bool was = any_locked();
  settings *st = &global;
  if (ok && model) {
    st = find_locked(model);
    if (root->n == 0) {   /* an empty body removes the model's own settings */
      if (st) *st = models[--nmodels];
      st = NULL;
    } else if (!st) {
      if (nmodels == (int32_t)(sizeof models / sizeof *models)) {
        ok = false;
        snprintf(e, cap, "trace setting: %d models have settings of their own already (the most)", nmodels);
      } else {
        st = &models[nmodels++];
        *st = global;
        snprintf(st->model, sizeof st->model, "%s", model);
        st->seen = 0;
      }
    }
  }
  if (ok) {
    if (st) {
      if (level >= 0) {
        if (level && !st->on) st->seen = 0;
        st->on = level;
      }
      if (r > 0) st->rate = r;
      if (c >= -1) st->count = c;
    }
    if (f >= 0) frequency = f;
    any_on = any_locked();
    if (was && !any_on) flush_locked();   /* tracing stops: what it collected is written */
  }
  pthread_mutex_unlock(&mu);
  js_free(&d);
  return ok;
}

bool sv_trace_sample(const char *model) {
  if (!any_on) return false;   /* a request during a settings change may go either way */
  pthread_mutex_lock(&mu);
  settings *st = find_locked(model);
  if (!st) st = &global;
  bool take = st->on && st->count != 0 && st->seen++ % st->rate == 0;
  if (take && st->count > 0) st->count--;
  pthread_mutex_unlock(&mu);
  return take;
}

void sv_trace_record(const char *model, const char *version, const char *request_id,
                     const int64_t ts[SV_TRACE_N]) {
  pthread_mutex_lock(&mu);
  if (buf.len > MAX_BUFFER) {
    dropped++;
    pthread_mutex_unlock(&mu);
    return;
  }
  if (buffered) JO_LIT(&buf, ",");
  jo_fmt(&buf, "{\"id\":%lld,\"model_name\":", (long long)next_id++);
  jo_str(&buf, model);
  jo_fmt(&buf, ",\"model_version\":%lld,\"request_id\":", atoll(version));
  jo_str(&buf, request_id ? request_id : "");
  JO_LIT(&buf, ",\"timestamps\":[");
  bool first = true;
  for (int i = 0; i < SV_TRACE_N; i++) {
    if (!ts[i]) continue;
    jo_fmt(&buf, "%s{\"name\":\"%s\",\"ns\":%lld}", first ? "" : ",", NAMES[i], (long long)ts[i]);
    first = false;
  }
  JO_LIT(&buf, "]}");
  buffered++;
  if (frequency > 0 && buffered >= frequency) flush_locked();
  pthread_mutex_unlock(&mu);
}

const char *sv_trace_check(void) {
  return global.on && !*file ? "--trace-level TIMESTAMPS needs --trace-file" : NULL;
}

void sv_trace_flush(void) {
  pthread_mutex_lock(&mu);
  flush_locked();
  if (dropped)
    fprintf(stderr, "flow-serve: %lld traces were dropped (more than %d MiB waited to be written)\n",
            (long long)dropped, MAX_BUFFER >> 20);
  pthread_mutex_unlock(&mu);
}
