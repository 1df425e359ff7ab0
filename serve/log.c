/* log.c -- flow-serve's log (log.h). */
#include "log.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;                 /* NULL: stderr */
static char path[1024];
static atomic_bool on[3] = {true, true, true};   /* info, warnings, errors */
static atomic_int verbose;
static atomic_bool iso8601;

bool sv_log_open(const char *file) {
  if (!file || !*file) return true;
  FILE *f = fopen(file, "a");
  if (!f) return false;
  setvbuf(f, NULL, _IOLBF, 0);
  pthread_mutex_lock(&mu);
  if (out) fclose(out);
  out = f;
  snprintf(path, sizeof path, "%s", file);
  pthread_mutex_unlock(&mu);
  return true;
}

void sv_log_close(void) {
  pthread_mutex_lock(&mu);
  if (out) fclose(out);
  out = NULL;
  path[0] = 0;
  pthread_mutex_unlock(&mu);
}

static bool boolean(const char *v, bool *b) {
  if (!strcmp(v, "true") || !strcmp(v, "1")) *b = true;
  else if (!strcmp(v, "false") || !strcmp(v, "0")) *b = false;
  else return false;
  return true;
}

bool sv_log_option(const char *name, const char *v) {
  bool b;
  if (!strcmp(name, "--log-info") && boolean(v, &b)) on[SV_LOG_INFO] = b;
  else if (!strcmp(name, "--log-warning") && boolean(v, &b)) on[SV_LOG_WARNING] = b;
  else if (!strcmp(name, "--log-error") && boolean(v, &b)) on[SV_LOG_ERROR] = b;
  else if (!strcmp(name, "--log-format") && (!strcmp(v, "default") || !strcmp(v, "ISO8601")))
    iso8601 = !strcmp(v, "ISO8601");
  else if (!strcmp(name, "--log-verbose")) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < 0 || x > 1000000) return false;
    verbose = (int)x;
  } else {
    return false;
  }
  return true;
}

/* verbose lines are INFO lines (as Triton's): log_info false silences them too */
bool sv_log_verbose(int level) { return on[SV_LOG_INFO] && verbose >= level; }

static void line(char tag, const char *fmt, va_list ap) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char head[96], msg[2048];
  long tid = (long)syscall(SYS_gettid);
  if (iso8601)
    snprintf(head, sizeof head, "%04d-%02d-%02dT%02d:%02d:%02dZ %c %ld flow-serve] ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, tag, tid);
  else
    snprintf(head, sizeof head, "%c%02d%02d %02d:%02d:%02d.%06ld %ld flow-serve] ", tag, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)tv.tv_usec, tid);
  vsnprintf(msg, sizeof msg, fmt, ap);
  /* one line each: a newline in a message (a model's reason, a URL) would
   * start a line the log's reader takes for another entry */
  for (char *p = msg; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  pthread_mutex_lock(&mu);
  FILE *f = out ? out : stderr;
  fprintf(f, "%s%s\n", head, msg);
  fflush(f);
  pthread_mutex_unlock(&mu);
}

void sv_log(int level, const char *fmt, ...) {
  if (level < 0 || level > 2 || !on[level]) return;
  va_list ap;
  va_start(ap, fmt);
  line("IWE"[level], fmt, ap);
  va_end(ap);
}

void sv_logv(int level, const char *fmt, ...) {
  if (!sv_log_verbose(level)) return;
  va_list ap;
  va_start(ap, fmt);
  line('I', fmt, ap);
  va_end(ap);
}

void sv_log_settings(js_out *o) {
  pthread_mutex_lock(&mu);
  JO_LIT(o, "{\"log_file\":");
  jo_str(o, path);
  pthread_mutex_unlock(&mu);
  jo_fmt(o, ",\"log_info\":%s,\"log_warnings\":%s,\"log_errors\":%s,\"log_verbose_level\":%d,"
         "\"log_format\":\"%s\"}", on[0] ? "true" : "false", on[1] ? "true" : "false",
         on[2] ? "true" : "false", (int)verbose, iso8601 ? "ISO8601" : "default");
}

bool sv_log_update(const char *body, size_t n, char *e, size_t cap) {
  js_doc d;
  if (!js_parse(&d, body ? body : "", n, 64)) {
    snprintf(e, cap, "logging: %s", d.error);
    js_free(&d);
    return false;
  }
  const js_val *root = js_root(&d);
  bool ok = root && root->type == JS_OBJ;
  if (!ok) snprintf(e, cap, "logging: the body must be an object of settings");
  /* checked first, applied after: a bad setting changes nothing */
  int set_on[3] = {-1, -1, -1}, set_verbose = -1, set_iso = -1;
  static const char *const bools[3] = {"log_info", "log_warnings", "log_errors"};
  for (const js_val *k = ok ? js_first(&d, root) : NULL; k && ok; k = js_next(&d, k)) {
    int b = -1;
    for (int i = 0; i < 3; i++)
      if (!strcmp(k->key, bools[i])) b = i;
    if (b >= 0) {
      if ((ok = k->type == JS_BOOL)) set_on[b] = k->b;
      else snprintf(e, cap, "logging: %s must be true or false", k->key);
    } else if (!strcmp(k->key, "log_verbose_level")) {
      if ((ok = k->type == JS_NUM && k->is_int && k->i >= 0 && k->i <= 1000000)) set_verbose = (int)k->i;
      else snprintf(e, cap, "logging: log_verbose_level must be a non-negative integer");
    } else if (!strcmp(k->key, "log_format")) {
      ok = k->type == JS_STR && (!strcmp(k->s, "default") || !strcmp(k->s, "ISO8601"));
      if (ok) set_iso = !strcmp(k->s, "ISO8601");
      else snprintf(e, cap, "logging: log_format must be \"default\" or \"ISO8601\"");
    } else if (!strcmp(k->key, "log_file")) {
      pthread_mutex_lock(&mu);
      ok = k->type == JS_STR && !strcmp(k->s, path);
      pthread_mutex_unlock(&mu);
      if (!ok)
        snprintf(e, cap, "logging: log_file is set on the command line only (--log-file): a request "
                 "could otherwise make the server append to any file it may write");
    } else {
      ok = false;
      snprintf(e, cap, "logging: unknown setting '%.100s' (log_file, log_info, log_warnings, log_errors, "
               "log_verbose_level, log_format)", k->key);
    }
  }
  js_free(&d);
  if (!ok) return false;
  for (int i = 0; i < 3; i++)
    if (set_on[i] >= 0) on[i] = set_on[i];
  if (set_verbose >= 0) verbose = set_verbose;
  if (set_iso >= 0) iso8601 = set_iso;
  return true;
}
