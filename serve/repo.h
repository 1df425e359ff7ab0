/* repo.h -- flow-serve's model repository: Triton's layout
 * (DIR/<model>/config.json, DIR/<model>/<version>/model.ofg), model
 * configuration (parsed from Triton's JSON form, or auto-completed from the
 * saved graph), loading and unloading, the per-version request queues with
 * dynamic batching and the instance threads that run the graphs, and the
 * statistics /metrics reports. Uses only oneflow.h. */
#ifndef FLOW_SERVE_REPO_H
#define FLOW_SERVE_REPO_H
#include "protocol.h"
#include "shm.h"
#include "trace.h"
#include <pthread.h>
#include <stdatomic.h>
#include <oneflow/oneflow.h>

enum { SV_MAX_VERSIONS = 16, SV_MAX_VARIANTS = 64, SV_REASON = 512 };

typedef struct sv_io {
  char name[SV_NAME];
  int32_t dtype, ndim;
  int64_t dims[SV_MAX_DIMS];   /* without the batch dimension when max_batch_size > 0 */
  char label_filename[SV_NAME];   /* an output's class labels, a file in the model folder; "" none */
} sv_io;

typedef struct sv_config {
  char name[SV_NAME];
  int32_t max_batch_size;       /* 0: no batch dimension */
  int32_t nin, nout;            /* -1: not given (auto-completed) */
  sv_io in[SV_MAX_TENSORS], out[SV_MAX_TENSORS];
  bool dynamic_batching;
  int64_t max_queue_delay_us;
  int32_t instances;            /* instance_group count; 0: not given */
  int32_t policy;               /* 0 latest, 1 all, 2 specific */
  int32_t num_versions;         /* latest */
  int32_t nspecific;
  int64_t specific[SV_MAX_VERSIONS];
  bool max_batch_given;
} sv_config;

/* Parses Triton's model configuration JSON (the fields flow-serve uses;
 * others are accepted and ignored). false with a message in err. */
bool sv_config_parse(const char *json, size_t n, sv_config *c, char *err, size_t cap);
/* The configuration as JSON (GET /v2/models/<m>/config). */
void sv_config_write(js_out *o, const sv_config *c);

typedef struct sv_job sv_job;

enum { SV_UNAVAILABLE = 0, SV_LOADING, SV_READY, SV_UNLOADING };

/* Counters for /metrics and the statistics extension (ns: cumulative
 * nanoseconds). Per request: success/fail (request time), queue and the
 * three compute phases (a request in a batch counts the batch's time, as
 * Triton does); per execution: by batch rows (256: 256 or more). */
typedef struct sv_stats {
  atomic_llong success, failure, rows, execs;
  atomic_llong success_ns, fail_ns, queue_ns, input_ns, infer_ns, output_ns;
  atomic_llong last_ms;           /* wall clock of the last inference, ms since the epoch */
  atomic_llong batch_rows[257];   /* executions by batch rows */
  atomic_llong batch_input_ns[257], batch_infer_ns[257], batch_output_ns[257];
} sv_stats;

typedef struct sv_version {
  int64_t version;
  int32_t state;
  char reason[SV_REASON];
  of_graph *g;
  int32_t nvariants;
  int64_t batches[SV_MAX_VARIANTS];   /* variant i's batch size (first input's dim 0) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sv_job *head, *tail;
  bool stopping;
  int32_t nworkers;
  pthread_t workers[64];
  struct sv_model *model;
  sv_stats stats;
} sv_version;

typedef struct sv_model {
  char name[SV_NAME];
  sv_config cfg;
  bool auto_config;            /* no config.json: derived from the graph */
  int32_t state;               /* the model's own state (a bad config: UNAVAILABLE) */
  char reason[SV_REASON];
  int32_t nversions;
  sv_version *versions[SV_MAX_VERSIONS];   /* newest first */
  /* each output's labels (its label_filename's lines), for classification */
  char *label_text[SV_MAX_TENSORS];
  const char **labels[SV_MAX_TENSORS];
  int32_t nlabels[SV_MAX_TENSORS];
} sv_model;

typedef struct sv_options {
  const char *root;
  int32_t default_instances;   /* --threads */
  int32_t default_max_batch;   /* --max-batch-size: -1 the largest compiled */
  int32_t max_json_values;
} sv_options;

typedef struct sv_repo {
  sv_options opt;
  pthread_mutex_t mu;
  int32_t n, cap;
  sv_model **models;
} sv_repo;

bool sv_repo_open(sv_repo *r, const sv_options *opt, char *err, size_t cap);
void sv_repo_close(sv_repo *r);
/* (Re)loads every model folder of the repository (startup) */
void sv_repo_load_all(sv_repo *r);
/* POST /v2/repository/models/<m>/load, /unload: false with err when the
 * model folder does not exist (load) or the model is unknown (unload); a
 * model that fails to load is kept, not ready, with its reason. config (n
 * bytes, or NULL): a configuration JSON used instead of config.json. */
bool sv_repo_load(sv_repo *r, const char *name, const char *config, size_t n, char *err, size_t cap);
bool sv_repo_unload(sv_repo *r, const char *name, char *err, size_t cap);

/* Callers hold r->mu for these: */
sv_model *sv_repo_find(sv_repo *r, const char *name);
/* the version to serve: v <= 0 the newest ready one */
sv_version *sv_model_version(sv_model *m, int64_t v);
bool sv_model_ready(const sv_model *m);

/* An inference: validates req against the model version (the repo lock is
 * held by the caller), queues it and returns the job; the caller then
 * releases the lock and waits with sv_job_wait. NULL with err/status on a
 * bad request. req's input buffers move into the job. */
sv_job *sv_infer_submit(sv_version *v, sv_request *req, char *err, size_t cap);
/* Waits for the job; copies the outputs requested in shared memory into
 * their regions of shm, writes the response (or error) into o and returns
 * the HTTP status; *header_len as sv_write_response; fills trace when not
 * NULL. Frees the job. */
/* what a trace records of a finished job (trace.h): its timestamps from
 * QUEUE_START to COMPUTE_END and the version that ran it */
typedef struct sv_job_trace {
  int64_t ts[SV_TRACE_N];
  char version[32];
} sv_job_trace;
int sv_job_finish(sv_job *j, sv_shm *shm, js_out *o, size_t *header_len, sv_job_trace *trace);

void sv_repo_metrics(sv_repo *r, js_out *o);
/* The statistics extension's {"model_stats": [...]}: every version of every
 * model (m NULL), of one model (v NULL), or one version. Caller holds r->mu. */
void sv_repo_stats(sv_repo *r, sv_model *m, sv_version *v, js_out *o);
/* POST v2/repository/index: every model version (ready_only: the READY ones) */
void sv_repo_index(sv_repo *r, bool ready_only, js_out *o);
void sv_model_metadata(sv_model *m, sv_version *v, js_out *o);
#endif
