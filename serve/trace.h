/* trace.h -- Triton's trace extension for flow-serve: GET / POST
 * v2/trace/setting (tritonclient's get_trace_settings /
 * update_trace_settings). With trace_level ["TIMESTAMPS"], one inference
 * request in every trace_rate is traced (at most trace_count, -1: no limit):
 * its timestamps (monotonic ns: HTTP_RECV_START, REQUEST_START,
 * QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START,
 * COMPUTE_END, REQUEST_END) go to trace_file as a JSON array of
 * {"id", "model_name", "model_version", "request_id", "timestamps": [{"name",
 * "ns"}, ...]} -- every log_frequency traces into trace_file.<k> (k from
 * 0), or with log_frequency 0 into trace_file itself when tracing stops (a
 * POST turning it off, or the server's exit). Files are written to a
 * temporary name and renamed. trace_file is the command line's only
 * (--trace-file), as log_file: a request could otherwise have the server
 * write to any file; "TENSORS" is refused. A model may have settings of its
 * own (v2/models/<m>/trace/setting, as Triton's: made from the server's
 * when first set, removed by a POST of {}); the file and log_frequency are
 * the server's. */
#ifndef FLOW_SERVE_TRACE_H
#define FLOW_SERVE_TRACE_H
#include "json.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { SV_TRACE_RECV, SV_TRACE_REQUEST, SV_TRACE_QUEUE, SV_TRACE_COMPUTE, SV_TRACE_INPUT_END,
       SV_TRACE_OUTPUT_START, SV_TRACE_COMPUTE_END, SV_TRACE_REQUEST_END, SV_TRACE_N };

/* --trace-file, --trace-level (OFF or TIMESTAMPS), --trace-rate,
 * --trace-count, --trace-log-frequency; false on a bad value */
bool sv_trace_option(const char *name, const char *value);
/* the settings of model (its own, else the server's), or the server's (NULL) */
void sv_trace_settings(const char *model, js_out *o);
/* POST v2[/models/<m>]/trace/setting: all the body's settings or none;
 * false with a message */
bool sv_trace_update(const char *model, const char *body, size_t n, char *err, size_t cap);
/* whether to trace the next inference request of model (counts it) */
bool sv_trace_sample(const char *model);
/* a traced request's timestamps (ns, CLOCK_MONOTONIC; 0: not reached) */
void sv_trace_record(const char *model, const char *version, const char *request_id,
                     const int64_t ts[SV_TRACE_N]);
/* after the command line: NULL, or why its trace options do not work */
const char *sv_trace_check(void);
/* writes what is buffered (the server's exit) */
void sv_trace_flush(void);
#endif
