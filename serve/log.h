/* log.h -- flow-serve's log, with Triton's settings and logging extension
 * (GET / POST v2/logging): INFO (models loaded and unloaded), WARNING,
 * ERROR (models that fail to load, graph runs that fail) and verbose
 * levels (1: every request with its status, sizes and time; 2: also the
 * error text of each 4xx answer), in Triton's "default" form
 * (`I1207 03:40:00.123456 4242 flow-serve] ...`) or "ISO8601". Lines go to
 * stderr or to --log-file; a client may change every setting but the file
 * (a request could otherwise make the server append text it chose -- a URL
 * is logged -- to any file the server may write). One lock per line. */
#ifndef FLOW_SERVE_LOG_H
#define FLOW_SERVE_LOG_H
#include "json.h"
#include <stdbool.h>
#include <stddef.h>

enum { SV_LOG_INFO, SV_LOG_WARNING, SV_LOG_ERROR };

/* file: NULL or "" for stderr; false (with errno) when it cannot be opened */
bool sv_log_open(const char *file);
void sv_log_close(void);
/* command-line settings: "--log-info" etc. with their value; false when
 * the value is bad (the caller reports it) */
bool sv_log_option(const char *name, const char *value);

void sv_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* a verbose line (an INFO line), written when INFO is on and the verbose
 * level is at least `level` */
void sv_logv(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool sv_log_verbose(int level);

/* {"log_file": ..., "log_info": ..., "log_warnings": ..., "log_errors": ...,
 * "log_verbose_level": ..., "log_format": ...} */
void sv_log_settings(js_out *o);
/* POST v2/logging: applies the settings in the body (all or none); false
 * with a message */
bool sv_log_update(const char *body, size_t n, char *err, size_t cap);
#endif
