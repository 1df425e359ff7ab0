/* repo.c -- the model repository, the request queues and the instance
 * threads (see repo.h). */
#include "repo.h"
#include "log.h"
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct sv_job {
  sv_job *next;
  sv_version *v;                       /* for the worker; the handler never reads it */
  int32_t nin;
  sv_tensor in[SV_MAX_TENSORS];        /* in the graph's input order */
  int64_t rows;                        /* rows of the batch dimension; 0: none */
  int32_t nout;                        /* outputs to return */
  int32_t out_index[SV_MAX_TENSORS];   /* graph output of each */
  bool out_binary[SV_MAX_TENSORS];
  sv_shm_ref out_shm[SV_MAX_TENSORS];
  int32_t out_class[SV_MAX_TENSORS];   /* classification: top k, 0 none */
  char *cls[SV_MAX_TENSORS];           /* its strings (SV_BYTES), made by the worker */
  size_t cls_bytes[SV_MAX_TENSORS];
  int64_t cls_rows[SV_MAX_TENSORS];    /* 0: no batch dimension */
  int32_t cls_k[SV_MAX_TENSORS];
  char out_name[SV_MAX_TENSORS][SV_NAME];
  sv_tensor out[SV_MAX_TENSORS];       /* results (all graph outputs) */
  int32_t ngraph_out;
  char model[SV_NAME], version[32], id[SV_NAME];
  int64_t t_enqueue, t_start, t_end;   /* ns */
  int64_t t_in, t_infer_end, t_out_end;   /* the batch's input copy began, its graph ended, outputs copied */
  int status;                          /* HTTP status when done */
  char error[SV_REASON];
  bool done;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the graph's signature ---- */
static bool io_desc(of_graph *g, int32_t output, int32_t i, of_graph_value_desc *d) {
  int32_t v = of_graph_io_value(g, output, i);
  return v >= 0 && of_graph_describe_value(g, v, d) == OF_OK;
}

/* Fills the version's variant batch sizes and completes/validates the
 * model's config against the graph; false with the reason. */
static bool match_config(sv_model *m, sv_version *ver, const sv_options *opt, char *e, size_t cap) {
  of_graph *g = ver->g;
  sv_config *c = &m->cfg;
  int32_t nin = of_graph_num_inputs(g), nout = of_graph_num_outputs(g);
  if (nin < 1 || nin > SV_MAX_TENSORS || nout < 1 || nout > SV_MAX_TENSORS)
    return sv_errorf(e, cap, "the graph has %d inputs and %d outputs (1 to %d each are served)",
                (int)nin, (int)nout, SV_MAX_TENSORS);
  ver->nvariants = of_graph_num_variants(g);
  if (ver->nvariants > SV_MAX_VARIANTS) ver->nvariants = SV_MAX_VARIANTS;
  /* batch dimension: every input of every variant has ndim >= 1 and the
   * same dim 0 within a variant */
  bool batchable = true;
  int64_t largest = 0;
  for (int32_t k = 0; k < ver->nvariants; k++) {
    of_graph *vg = of_graph_variant(g, k);
    of_graph_value_desc d;
    int64_t b = -1;
    for (int32_t i = 0; i < nin; i++) {
      if (!io_desc(vg, 0, i, &d)) return sv_errorf(e, cap, "cannot describe the graph's inputs");
      if (d.ndim < 1 || (b >= 0 && d.shape[0] != b)) batchable = false;
      else b = d.shape[0];
    }
    ver->batches[k] = b;
    if (b > largest) largest = b;
  }
  of_graph_value_desc d;
  bool filled_in = c->nin < 0, filled_out = c->nout < 0;
  if (!c->max_batch_given) {
    /* auto-complete: the first dimension is the batch dimension */
    int64_t mb = opt->default_max_batch >= 0 ? opt->default_max_batch : largest;
    if (!batchable || mb > largest) mb = batchable ? largest : 0;
    c->max_batch_size = (int32_t)mb;
  }
  if (c->max_batch_size > 0 && !batchable)
    return sv_errorf(e, cap, "max_batch_size %d, but the graph's inputs have no common first "
                "dimension to batch", (int)c->max_batch_size);
  if (c->max_batch_size > largest)
    return sv_errorf(e, cap, "max_batch_size %d, but the graph was compiled for batch sizes up to "
                "%lld: call the graph with a batch of %d before graph:save", (int)c->max_batch_size,
                (long long)largest, (int)c->max_batch_size);
  int32_t skip = c->max_batch_size > 0 ? 1 : 0;
  if (filled_in) c->nin = nin;
  if (filled_out) c->nout = nout;
  if (c->nin != nin) return sv_errorf(e, cap, "config.json lists %d inputs, the graph has %d", (int)c->nin, (int)nin);
  if (c->nout != nout)
    return sv_errorf(e, cap, "config.json lists %d outputs, the graph has %d", (int)c->nout, (int)nout);
  for (int32_t side = 0; side < 2; side++) {
    sv_io *io = side ? c->out : c->in;
    bool filled = side ? filled_out : filled_in;
    for (int32_t i = 0; i < (side ? nout : nin); i++) {
      if (!io_desc(g, side, i, &d)) return sv_errorf(e, cap, "cannot describe the graph");
      if (d.ndim - skip < 0 || d.ndim - skip > SV_MAX_DIMS)
        return sv_errorf(e, cap, "%s %d has %d dims", side ? "output" : "input", (int)i, (int)d.ndim);
      if (filled) {
        if (d.name && *d.name && !side && strlen(d.name) < SV_NAME) snprintf(io[i].name, SV_NAME, "%s", d.name);
        else snprintf(io[i].name, SV_NAME, "%s__%d", side ? "OUTPUT" : "INPUT", (int)i);
        io[i].dtype = d.dtype;
        io[i].ndim = d.ndim - skip;
        for (int32_t k = 0; k < io[i].ndim; k++) io[i].dims[k] = d.shape[k + skip];
        continue;
      }
      if (io[i].dtype != d.dtype)
        return sv_errorf(e, cap, "%s '%s' is %s in config.json, the graph's is %s",
                    side ? "output" : "input", io[i].name, sv_config_type_name(io[i].dtype),
                    sv_config_type_name(d.dtype));
      bool same = io[i].ndim == d.ndim - skip;
      for (int32_t k = 0; same && k < io[i].ndim; k++) same = io[i].dims[k] == d.shape[k + skip];
      if (!same)
        return sv_errorf(e, cap, "%s '%s': config.json's dims are not the graph's (%d dims%s)",
                    side ? "output" : "input", io[i].name, (int)(d.ndim - skip),
                    skip ? " after the batch dimension" : "");
    }
  }
  if (c->instances < 1) c->instances = opt->default_instances;
  return true;
}

/* ---- workers ---- */
static void finish(sv_job *j, int status, const char *msg) {
  pthread_mutex_lock(&j->mu);
  j->status = status;
  if (msg) snprintf(j->error, sizeof j->error, "%s", msg);
  j->t_end = now_ns();
  j->done = true;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static int64_t compiled_for(const sv_version *v, int64_t rows);

/* runs jobs[0..n) as one batch (n == 1 without batching) */
/* an input tensor's storage was the request's buffer: its own malloc'd
 * copy (ctx NULL), or a part of the request body (ctx its block) */
static void free_blob(void *data, void *ctx) {
  if (ctx) sv_block_release(ctx);
  else free(data);
}

static void run_batch(sv_version *v, sv_job **jobs, int32_t n) {
  sv_model *m = v->model;
  const sv_config *c = &m->cfg;
  int64_t rows = 0;
  for (int32_t i = 0; i < n; i++) rows += jobs[i]->rows;
  int64_t B = rows;
  if (c->max_batch_size > 0) B = compiled_for(v, rows);   /* exact, else the next larger (padded) */
  char why[SV_REASON] = "";
  int64_t t_in = now_ns();
  of_tensor *ins[SV_MAX_TENSORS] = {0}, *outs[SV_MAX_TENSORS] = {0};
  int32_t nin = c->nin, nout = c->nout;
  bool ok = B >= 0;
  if (!ok) snprintf(why, sizeof why, "no compiled batch size holds %lld rows", (long long)rows);
  for (int32_t i = 0; ok && i < nin; i++) {
    const sv_tensor *t0 = &jobs[0]->in[i];
    int64_t shape[SV_MAX_DIMS];
    memcpy(shape, t0->shape, sizeof shape);
    if (c->max_batch_size > 0) shape[0] = B;
    if (n == 1 && B == rows) {
      /* the request's buffer becomes the input tensor's storage (freed with
       * the last view of it, which may outlive the job as an output that
       * aliases its input), saving a copy of every input */
      ok = of_from_blob(t0->data, shape, NULL, t0->ndim, t0->dtype, free_blob, t0->owner, &ins[i]) == OF_OK;
      if (ok) jobs[0]->in[i].data = NULL, jobs[0]->in[i].owner = NULL;   /* the tensor's now */
    } else {
      ok = of_zeros(shape, t0->ndim, t0->dtype, OF_CPU, &ins[i]) == OF_OK;
      char *dst = ok ? of_tensor_data(ins[i]) : NULL;
      for (int32_t k = 0; ok && k < n; k++) {
        memcpy(dst, jobs[k]->in[i].data, jobs[k]->in[i].nbytes);
        dst += jobs[k]->in[i].nbytes;
      }
    }
    if (!ok) snprintf(why, sizeof why, "%s", of_last_error());
  }
  int64_t t0 = now_ns();
  for (int32_t k = 0; k < n; k++) jobs[k]->t_start = t0;
  if (ok && of_graph_run(v->g, ins, nin, outs, nout) != OF_OK) {
    ok = false;
    snprintf(why, sizeof why, "%s", of_last_error());
  }
  int64_t t1 = now_ns();
  for (int32_t i = 0; i < nin; i++) of_tensor_release(ins[i]);
  /* each job's rows of each output */
  for (int32_t i = 0; ok && i < nout; i++) {
    of_tensor *ct = NULL;
    if (of_contiguous(outs[i], &ct) != OF_OK) {
      ok = false;
      snprintf(why, sizeof why, "%s", of_last_error());
      break;
    }
    int32_t nd = of_tensor_ndim(ct), dt = of_tensor_dtype(ct);
    const int64_t *sh = of_tensor_shape(ct);
    if (c->max_batch_size > 0 && (nd < 1 || sh[0] != B)) {
      ok = false;
      snprintf(why, sizeof why, "output %d's first dimension is not the batch (%lld)", (int)i, (long long)B);
    }
    size_t row_bytes = (size_t)sv_dtype_size(dt);
    for (int32_t k = c->max_batch_size > 0 ? 1 : 0; k < nd; k++) row_bytes *= (size_t)sh[k];
    const char *src = of_tensor_data(ct);
    for (int32_t k = 0; ok && k < n; k++) {
      sv_tensor *o = &jobs[k]->out[i];
      o->dtype = dt;
      o->ndim = nd;
      memcpy(o->shape, sh, sizeof(int64_t) * (size_t)nd);
      if (c->max_batch_size > 0) o->shape[0] = jobs[k]->rows;
      o->nbytes = c->max_batch_size > 0 ? row_bytes * (size_t)jobs[k]->rows : row_bytes;
      o->data = malloc(o->nbytes ? o->nbytes : 1);
      if (!o->data) {
        ok = false;
        snprintf(why, sizeof why, "out of memory");
        break;
      }
      memcpy(o->data, src, o->nbytes);
      src += o->nbytes;
      jobs[k]->ngraph_out = i + 1;
    }
    of_tensor_release(ct);   /* of_contiguous returns a reference of its own */
  }
  for (int32_t i = 0; i < nout; i++) of_tensor_release(outs[i]);
  /* the classification extension: each job's top k of each of its rows */
  for (int32_t k = 0; ok && k < n; k++) {
    sv_job *j = jobs[k];
    for (int32_t i = 0; ok && i < j->nout; i++) {
      if (!j->out_class[i]) continue;
      int32_t gi = j->out_index[i];
      const sv_tensor *t = &j->out[gi];
      int64_t rws = c->max_batch_size > 0 ? j->rows : 1;
      int64_t per = rws ? sv_numel(t->shape, t->ndim) / rws : 0;
      j->cls_k[i] = j->out_class[i] < per ? j->out_class[i] : (int32_t)per;
      j->cls_rows[i] = c->max_batch_size > 0 ? rws : 0;
      j->cls[i] = sv_classify(t->data, t->dtype, rws, per, j->cls_k[i], m->labels[gi], m->nlabels[gi],
                              &j->cls_bytes[i]);
      if (!j->cls[i]) {
        ok = false;
        snprintf(why, sizeof why, "out of memory");
      }
    }
  }
  int64_t t2 = now_ns();
  for (int32_t k = 0; k < n; k++) {
    jobs[k]->t_in = t_in;
    jobs[k]->t_infer_end = t1;
    jobs[k]->t_out_end = t2;
  }
  sv_stats *s = &v->stats;
  if (ok) {
    int32_t b = rows < 256 ? (int32_t)rows : 256;
    s->execs++;
    s->rows += rows;
    s->batch_rows[b]++;
    s->batch_input_ns[b] += t0 - t_in;
    s->batch_infer_ns[b] += t1 - t0;
    s->batch_output_ns[b] += t2 - t1;
    s->input_ns += (t0 - t_in) * n;
    s->infer_ns += (t1 - t0) * n;
    s->output_ns += (t2 - t1) * n;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    s->last_ms = (long long)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
  }
  if (!ok)
    sv_log(SV_LOG_ERROR, "model '%s' version %lld: a batch of %lld rows failed: %s", v->model->name,
           (long long)v->version, (long long)rows, why);
  for (int32_t k = 0; k < n; k++) {
    if (ok) s->queue_ns += t_in - jobs[k]->t_enqueue;
    finish(jobs[k], ok ? 200 : 500, ok ? NULL : why);
  }
}

/* the smallest compiled batch that holds rows; -1 none */
static int64_t compiled_for(const sv_version *v, int64_t rows) {
  int64_t best = -1;
  for (int32_t k = 0; k < v->nvariants; k++)
    if (v->batches[k] >= rows && (best < 0 || v->batches[k] < best)) best = v->batches[k];
  return best;
}

/* the measured mean graph time of an exact run of b rows (ns); 0 unknown */
static double mean_ns(sv_version *v, int64_t b) {
  if (b < 1 || b > 256) return 0;
  long long k = v->stats.batch_rows[b];
  return k > 0 ? (double)v->stats.batch_infer_ns[b] / (double)k : 0;
}

/* A merged batch of rows no graph was compiled for (6 of 1, 2, 4, 8) runs
 * either padded (8) or as exact parts (4 + 2: a prefix of the jobs whose
 * rows make the largest compiled size below, then the rest the same way).
 * The parts unless the measured times say padding is faster: a padded run
 * computes rows nobody asked for (ResNet-18, 224x224, 2 cores at load 8:
 * batch 8 took 1216 ms, a batch of 4 and one of 2 together 1026 ms). */
static void run_merged(sv_version *v, sv_job **jobs, int32_t n) {
  while (n > 1) {
    int64_t rows = 0;
    for (int32_t i = 0; i < n; i++) rows += jobs[i]->rows;
    int64_t pad = compiled_for(v, rows);
    if (pad == rows || pad < 0) break;
    /* the largest compiled size below rows that a prefix of the jobs makes */
    int32_t cut = 0;
    int64_t part = 0;
    for (int32_t k = 0; k < v->nvariants; k++) {
      int64_t b = v->batches[k], sum = 0;
      if (b >= rows || b <= part) continue;
      int32_t i = 0;
      while (i < n && sum < b) sum += jobs[i++]->rows;
      if (sum == b) part = b, cut = i;
    }
    if (!cut) break;
    double t_pad = mean_ns(v, pad), t_part = mean_ns(v, part),
           t_rest = mean_ns(v, compiled_for(v, rows - part));
    if (t_pad > 0 && t_part > 0 && t_rest > 0 && t_pad < t_part + t_rest) break;
    run_batch(v, jobs, cut);
    jobs += cut;
    n -= cut;
  }
  run_batch(v, jobs, n);
}

static void *worker(void *arg) {
  sv_version *v = arg;
  const sv_config *c = &v->model->cfg;
  sv_job *batch[1024];
  for (;;) {
    pthread_mutex_lock(&v->mu);
    while (!v->head && !v->stopping) pthread_cond_wait(&v->cv, &v->mu);
    if (!v->head) {
      pthread_mutex_unlock(&v->mu);
      break;
    }
    int32_t n = 0;
    int64_t rows = 0;
    sv_job *j = v->head;
    v->head = j->next;
    if (!v->head) v->tail = NULL;
    batch[n++] = j;
    rows = j->rows;
    if (c->dynamic_batching && c->max_batch_size > 0) {
      int64_t deadline = j->t_enqueue + c->max_queue_delay_us * 1000;
      for (;;) {
        while (v->head && rows + v->head->rows <= c->max_batch_size && n < 1024) {
          sv_job *k = v->head;
          v->head = k->next;
          if (!v->head) v->tail = NULL;
          batch[n++] = k;
          rows += k->rows;
        }
        if (rows >= c->max_batch_size || v->head || v->stopping || n == 1024) break;
        int64_t now = now_ns();
        if (now >= deadline) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t wake = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (deadline - now);
        ts.tv_sec = wake / 1000000000;
        ts.tv_nsec = wake % 1000000000;
        pthread_cond_timedwait(&v->cv, &v->mu, &ts);
      }
    }
    pthread_mutex_unlock(&v->mu);
    run_merged(v, batch, n);
  }
  return NULL;
}

/* ---- loading ---- */
static void version_stop(sv_version *v) {
  if (!v) return;
  pthread_mutex_lock(&v->mu);
  v->stopping = true;
  pthread_cond_broadcast(&v->cv);
  pthread_mutex_unlock(&v->mu);
  for (int32_t i = 0; i < v->nworkers; i++) pthread_join(v->workers[i], NULL);
  v->nworkers = 0;
}

static void version_free(sv_version *v) {
  if (!v) return;
  version_stop(v);
  of_graph_release(v->g);
  pthread_mutex_destroy(&v->mu);
  pthread_cond_destroy(&v->cv);
  free(v);
}

static void model_free(sv_model *m) {
  if (!m) return;
  for (int32_t i = 0; i < m->nversions; i++) version_free(m->versions[i]);
  for (int32_t i = 0; i < SV_MAX_TENSORS; i++) {
    free(m->label_text[i]);
    free(m->labels[i]);
  }
  free(m);
}

static char *read_file(const char *path, size_t *n, size_t max) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  long sz = -1;
  if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
  if (sz >= 0 && (size_t)sz <= max && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)sz + 1)) &&
      fread(buf, 1, (size_t)sz, f) == (size_t)sz) {
    buf[sz] = 0;
    *n = (size_t)sz;
  } else {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  return buf;
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static bool is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* loads version folder `vdir`: v's state and reason say how it went */
static void load_version(sv_model *m, sv_version *v, const char *vdir, const sv_options *opt,
                         bool first) {
  char path[4500], e[SV_REASON];
  snprintf(path, sizeof path, "%s/model.ofg", vdir);
  v->state = SV_UNAVAILABLE;
  struct stat st;
  if (stat(path, &st) != 0) {
    /* say which other model files are there */
    char found[256] = "";
    DIR *d = opendir(vdir);
    struct dirent *de;
    size_t o = 0;
    while (d && (de = readdir(d)) && o + 64 < sizeof found)
      if (de->d_name[0] != '.')
        o += (size_t)snprintf(found + o, sizeof found - o, "%s%.60s", o ? ", " : "", de->d_name);
    if (d) closedir(d);
    snprintf(v->reason, sizeof v->reason, "no model.ofg in %.200s%s%.200s: flow-serve serves graphs saved "
             "by graph:save (model.ofg) only", vdir, o ? "; found " : "", found);
    return;
  }
  if (of_graph_load(path, &v->g) != OF_OK) {
    snprintf(v->reason, sizeof v->reason, "%s", of_last_error());
    v->g = NULL;
    return;
  }
  /* the first version completes the config; the others must agree with it */
  sv_config saved = m->cfg;
  if (!match_config(m, v, opt, e, sizeof e)) {
    m->cfg = saved;
    snprintf(v->reason, sizeof v->reason, "%s", e);
    return;
  }
  if (!first && memcmp(&saved, &m->cfg, sizeof saved) != 0) {
    m->cfg = saved;
    snprintf(v->reason, sizeof v->reason, "version %lld's graph has other inputs or outputs than "
             "the model's configuration", (long long)v->version);
    return;
  }
  int32_t nw = m->cfg.instances;
  for (int32_t i = 0; i < nw; i++)
    if (pthread_create(&v->workers[v->nworkers], NULL, worker, v) == 0) v->nworkers++;
  if (v->nworkers == 0) {
    snprintf(v->reason, sizeof v->reason, "cannot start an instance thread");
    return;
  }
  v->state = SV_READY;
}

/* A model from folder root/name (never NULL but on out of memory): its
 * state and reasons say what failed. override (n bytes, or NULL): the
 * configuration JSON to use instead of config.json (a load request's). */
static sv_model *model_load(const sv_options *opt, const char *name, const char *override, size_t on) {
  sv_model *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  snprintf(m->name, sizeof m->name, "%s", name);
  m->state = SV_UNAVAILABLE;
  char dir[4096], path[4200], e[SV_REASON - 64];   /* room for a prefix in m->reason */
  snprintf(dir, sizeof dir, "%s/%s", opt->root, name);
  snprintf(path, sizeof path, "%s/config.json", dir);
  size_t n = on;
  char *text = override ? NULL : read_file(path, &n, 1 << 20);
  struct stat st;
  if (text || override) {
    bool ok = sv_config_parse(override ? override : text, n, &m->cfg, e, sizeof e);
    free(text);
    if (!ok) {
      snprintf(m->reason, sizeof m->reason, "%s%s", override ? "the load request's config: " : "", e);
      return m;
    }
    if (m->cfg.name[0] && strcmp(m->cfg.name, name) != 0) {
      snprintf(m->reason, sizeof m->reason, "%s names the model '%s', its folder is '%s'",
               override ? "the load request's config" : "config.json", m->cfg.name, name);
      return m;
    }
  } else if (stat(path, &st) == 0) {
    snprintf(m->reason, sizeof m->reason, "cannot read %.300s (larger than 1 MiB?)", path);
    return m;
  } else {
    sv_config_parse("{}", 2, &m->cfg, e, sizeof e);
    m->auto_config = true;
  }
  snprintf(m->cfg.name, sizeof m->cfg.name, "%s", name);
  /* the outputs' label files (classification), at most 16 MiB and 1 << 20 labels each */
  for (int32_t i = 0; i < m->cfg.nout; i++) {
    const char *lf = m->cfg.out[i].label_filename;
    if (!*lf) continue;
    char lpath[4400];
    size_t ln = 0;
    snprintf(lpath, sizeof lpath, "%s/%s", dir, lf);
    char *txt = read_file(lpath, &ln, 16 << 20);
    if (!txt) {
      snprintf(m->reason, sizeof m->reason, "output '%s': cannot read its label_filename %.300s (a file "
               "of at most 16 MiB)", m->cfg.out[i].name, lpath);
      return m;
    }
    int32_t count = 0;
    for (size_t k = 0; k < ln && count < (1 << 20); k++) count += txt[k] == '\n';
    count++;
    if (count > (1 << 20)) count = 1 << 20;
    const char **lines = malloc(sizeof *lines * (size_t)count);
    if (!lines) {
      free(txt);
      snprintf(m->reason, sizeof m->reason, "out of memory");
      return m;
    }
    /* lines in place: a newline (and a CR before it) ends each; a NUL byte ends the text */
    int32_t nl = 0;
    char *p = txt, *end = txt + strlen(txt);
    while (p < end && nl < count) {
      char *q = memchr(p, '\n', (size_t)(end - p));
      if (!q) q = end;
      *q = 0;
      if (q > p && q[-1] == '\r') q[-1] = 0;
      lines[nl++] = p;
      p = q + 1;
    }
    m->label_text[i] = txt;
    m->labels[i] = lines;
    m->nlabels[i] = nl;
  }
  /* the version folders, newest first */
  int64_t vs[256];
  int32_t nv = 0;
  DIR *d = opendir(dir);
  struct dirent *de;
  while (d && (de = readdir(d)) && nv < 256) {
    char *end;
    long long x = strtoll(de->d_name, &end, 10);
    char vdir[4400];
    snprintf(vdir, sizeof vdir, "%s/%s", dir, de->d_name);
    if (de->d_name[0] >= '1' && de->d_name[0] <= '9' && !*end && x > 0 && is_dir(vdir)) vs[nv++] = x;
  }
  if (d) closedir(d);
  qsort(vs, (size_t)nv, sizeof *vs, cmp_desc);
  for (int32_t i = 0; i < nv && m->nversions < SV_MAX_VERSIONS; i++) {
    bool take = m->cfg.policy == 1 || (m->cfg.policy == 0 && i < m->cfg.num_versions);
    for (int32_t k = 0; m->cfg.policy == 2 && k < m->cfg.nspecific; k++) take |= m->cfg.specific[k] == vs[i];
    if (!take) continue;
    sv_version *v = calloc(1, sizeof *v);
    if (!v) break;
    v->version = vs[i];
    v->model = m;
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->cv, NULL);
    char vdir[4400];
    snprintf(vdir, sizeof vdir, "%s/%lld", dir, (long long)vs[i]);
    bool first = true;
    for (int32_t k = 0; k < m->nversions; k++) first &= m->versions[k]->state != SV_READY;
    load_version(m, v, vdir, opt, first);
    m->versions[m->nversions++] = v;
    if (v->state == SV_READY)
      sv_log(SV_LOG_INFO, "model '%s' version %lld loaded: %d instance%s, %d compiled input signature%s",
             m->name, (long long)v->version, (int)v->nworkers, v->nworkers == 1 ? "" : "s",
             (int)v->nvariants, v->nvariants == 1 ? "" : "s");
    else
      sv_log(SV_LOG_ERROR, "model '%s' version %lld failed to load: %s", m->name, (long long)v->version,
             v->reason);
  }
  if (m->nversions == 0) {
    snprintf(m->reason, sizeof m->reason, "no version folder (%.300s/<n>/model.ofg) matches the "
             "version policy", dir);
    return m;
  }
  bool any = false;
  for (int32_t k = 0; k < m->nversions; k++) any |= m->versions[k]->state == SV_READY;
  if (any) {
    m->state = SV_READY;
  } else {
    snprintf(m->reason, sizeof m->reason, "%s", m->versions[0]->reason);
  }
  return m;
}

bool sv_repo_open(sv_repo *r, const sv_options *opt, char *e, size_t cap) {
  memset(r, 0, sizeof *r);
  r->opt = *opt;
  if (!is_dir(opt->root)) return sv_errorf(e, cap, "the model repository %s is not a folder", opt->root);
  pthread_mutex_init(&r->mu, NULL);
  return true;
}

/* replaces (or adds) the model named name with m (NULL: removes it); the
 * old one is returned for the caller to free outside the lock */
static sv_model *swap_model(sv_repo *r, const char *name, sv_model *m) {
  for (int32_t i = 0; i < r->n; i++)
    if (strcmp(r->models[i]->name, name) == 0) {
      sv_model *old = r->models[i];
      if (m) {
        r->models[i] = m;
      } else {
        r->models[i] = r->models[--r->n];
      }
      return old;
    }
  if (!m) return NULL;
  if (r->n == r->cap) {
    int32_t cap = r->cap ? r->cap * 2 : 16;
    sv_model **p = realloc(r->models, sizeof *p * (size_t)cap);
    if (!p) return m;   /* not added: freed by the caller */
    r->models = p;
    r->cap = cap;
  }
  r->models[r->n++] = m;
  return NULL;
}

static bool good_name(const char *s) {
  if (!*s || strlen(s) >= SV_NAME || s[0] == '.') return false;
  for (; *s; s++)
    if (*s == '/' || *s == '\\' || *s == '"' || (unsigned char)*s < 0x20) return false;
  return true;
}

bool sv_repo_load(sv_repo *r, const char *name, const char *config, size_t n, char *e, size_t cap) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", r->opt.root, name);
  if (!good_name(name) || !is_dir(dir))
    return sv_errorf(e, cap, "no model folder '%s' in the model repository", name);
  sv_model *m = model_load(&r->opt, name, config, n);
  if (!m) return sv_errorf(e, cap, "out of memory");
  pthread_mutex_lock(&r->mu);
  sv_model *old = swap_model(r, name, m);
  pthread_mutex_unlock(&r->mu);
  model_free(old);
  if (m->state != SV_READY) {
    if (m->nversions == 0) sv_log(SV_LOG_ERROR, "model '%s' failed to load: %s", name, m->reason);
    return sv_errorf(e, cap, "failed to load '%s': %s", name, m->reason);
  }
  return true;
}

bool sv_repo_unload(sv_repo *r, const char *name, char *e, size_t cap) {
  pthread_mutex_lock(&r->mu);
  sv_model *old = swap_model(r, name, NULL);
  pthread_mutex_unlock(&r->mu);
  if (!old) return sv_errorf(e, cap, "unknown model '%s'", name);
  model_free(old);   /* the queued requests finish first */
  sv_log(SV_LOG_INFO, "model '%s' unloaded", name);
  return true;
}

void sv_repo_load_all(sv_repo *r) {
  DIR *d = opendir(r->opt.root);
  struct dirent *de;
  char names[1024][SV_NAME];
  int32_t n = 0;
  while (d && (de = readdir(d)) && n < 1024) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", r->opt.root, de->d_name);
    if (good_name(de->d_name) && is_dir(dir)) snprintf(names[n++], SV_NAME, "%.127s", de->d_name);
  }
  if (d) closedir(d);
  char e[SV_REASON];
  for (int32_t i = 0; i < n; i++) sv_repo_load(r, names[i], NULL, 0, e, sizeof e);   /* logged */
}

void sv_repo_close(sv_repo *r) {
  for (int32_t i = 0; i < r->n; i++) model_free(r->models[i]);
  free(r->models);
  r->models = NULL;
  r->n = 0;
  pthread_mutex_destroy(&r->mu);
}

sv_model *sv_repo_find(sv_repo *r, const char *name) {
  for (int32_t i = 0; i < r->n; i++)
    if (strcmp(r->models[i]->name, name) == 0) return r->models[i];
  return NULL;
}

sv_version *sv_model_version(sv_model *m, int64_t v) {
  for (int32_t i = 0; i < m->nversions; i++)
    if (v > 0 ? m->versions[i]->version == v : m->versions[i]->state == SV_READY) return m->versions[i];
  return NULL;
}

bool sv_model_ready(const sv_model *m) { return m->state == SV_READY; }

/* ---- inference ---- */
sv_job *sv_infer_submit(sv_version *v, sv_request *req, char *e, size_t cap) {
  sv_model *m = v->model;
  const sv_config *c = &m->cfg;
  if (v->state != SV_READY) {
    sv_errorf(e, cap, "model '%s' version %lld is not ready: %s", m->name, (long long)v->version, v->reason);
    return NULL;
  }
  if (req->nin != c->nin) {
    sv_errorf(e, cap, "model '%s' expects %d inputs, the request has %d", m->name, (int)c->nin, (int)req->nin);
    return NULL;
  }
  sv_job *j = calloc(1, sizeof *j);
  if (!j) {
    sv_errorf(e, cap, "out of memory");
    return NULL;
  }
  int64_t rows = -1;
  for (int32_t i = 0; i < c->nin; i++) {
    const sv_io *io = &c->in[i];
    int32_t k = 0;
    while (k < req->nin && strcmp(req->in[k].name, io->name) != 0) k++;
    if (k == req->nin) {
      for (k = 0; k < req->nin; k++) {
        bool known = false;
        for (int32_t q = 0; q < c->nin; q++) known |= strcmp(req->in[k].name, c->in[q].name) == 0;
        if (!known) break;
      }
      sv_errorf(e, cap, "unexpected inference input '%s' for model '%s' (its inputs are %s%s%s)",
           k < req->nin ? req->in[k].name : "?", m->name, c->in[0].name, c->nin > 1 ? ", " : "",
           c->nin > 1 ? c->in[1].name : "");
      goto bad;
    }
    sv_tensor *t = &req->in[k];
    if (t->dtype != io->dtype) {
      sv_errorf(e, cap, "input '%s': datatype %s, model '%s' expects %s", t->name,
           sv_datatype_name(t->dtype), m->name, sv_datatype_name(io->dtype));
      goto bad;
    }
    int32_t skip = c->max_batch_size > 0 ? 1 : 0;
    bool same = t->ndim == io->ndim + skip;
    for (int32_t q = 0; same && q < io->ndim; q++) same = t->shape[q + skip] == io->dims[q];
    if (same && skip) {
      same = t->shape[0] >= 1 && t->shape[0] <= c->max_batch_size && (rows < 0 || t->shape[0] == rows);
      rows = t->shape[0];
    }
    if (!same) {
      char want[160];
      size_t o = (size_t)snprintf(want, sizeof want, "[%s", skip ? "batch" : "");
      for (int32_t q = 0; q < io->ndim && o < sizeof want - 24; q++)
        o += (size_t)snprintf(want + o, sizeof want - o, "%s%lld", q || skip ? "," : "", (long long)io->dims[q]);
      snprintf(want + o, sizeof want - o, "]");
      char got[160];
      o = (size_t)snprintf(got, sizeof got, "[");
      for (int32_t q = 0; q < t->ndim && o < sizeof got - 24; q++)
        o += (size_t)snprintf(got + o, sizeof got - o, "%s%lld", q ? "," : "", (long long)t->shape[q]);
      snprintf(got + o, sizeof got - o, "]");
      sv_errorf(e, cap, "input '%s': shape %s, model '%s' expects %s%s", t->name, got, m->name, want,
           skip ? (rows > c->max_batch_size ? " (batch above max_batch_size)" :
                   " (batch 1..max_batch_size, the same for every input)") : "");
      goto bad;
    }
    j->in[i] = *t;
    t->data = NULL;   /* moved */
    t->owner = NULL;
  }
  j->nin = c->nin;
  j->rows = rows > 0 ? rows : 0;
  if (req->nout == 0) {
    j->nout = c->nout;
    for (int32_t i = 0; i < c->nout; i++) {
      j->out_index[i] = i;
      j->out_binary[i] = req->binary_default;
      snprintf(j->out_name[i], SV_NAME, "%s", c->out[i].name);
    }
  } else {
    for (int32_t i = 0; i < req->nout; i++) {
      int32_t k = 0;
      while (k < c->nout && strcmp(c->out[k].name, req->out_name[i]) != 0) k++;
      if (k == c->nout) {
        sv_errorf(e, cap, "unexpected inference output '%s' for model '%s'", req->out_name[i], m->name);
        goto bad;
      }
      j->out_index[i] = k;
      j->out_binary[i] = req->out_binary[i];
      j->out_shm[i] = req->out_shm[i];
      j->out_class[i] = req->out_class[i];
      snprintf(j->out_name[i], SV_NAME, "%s", req->out_name[i]);
    }
    j->nout = req->nout;
  }
  snprintf(j->model, sizeof j->model, "%s", m->name);
  snprintf(j->version, sizeof j->version, "%lld", (long long)v->version);
  snprintf(j->id, sizeof j->id, "%s", req->id);
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  j->v = v;
  j->t_enqueue = now_ns();
  pthread_mutex_lock(&v->mu);
  if (v->stopping) {
    pthread_mutex_unlock(&v->mu);
    sv_errorf(e, cap, "model '%s' is being unloaded", m->name);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    goto bad;
  }
  if (v->tail) v->tail->next = j; else v->head = j;
  v->tail = j;
  pthread_cond_signal(&v->cv);
  pthread_mutex_unlock(&v->mu);
  return j;
bad:
  v->stats.failure++;
  for (int32_t i = 0; i < SV_MAX_TENSORS; i++) sv_tensor_release(&j->in[i]);
  free(j);
  return NULL;
}

int sv_job_finish(sv_job *j, sv_shm *shm, js_out *o, size_t *header_len, sv_job_trace *trace) {
  pthread_mutex_lock(&j->mu);
  while (!j->done) pthread_cond_wait(&j->cv, &j->mu);
  pthread_mutex_unlock(&j->mu);
  if (trace) {
    trace->ts[SV_TRACE_QUEUE] = j->t_enqueue;
    trace->ts[SV_TRACE_COMPUTE] = j->t_in;
    trace->ts[SV_TRACE_INPUT_END] = j->t_start;
    trace->ts[SV_TRACE_OUTPUT_START] = j->t_infer_end;
    trace->ts[SV_TRACE_COMPUTE_END] = j->t_out_end;
    snprintf(trace->version, sizeof trace->version, "%s", j->version);
  }
  int status = j->status;
  *header_len = 0;
  sv_output outs[SV_MAX_TENSORS];
  int64_t cls_shape[SV_MAX_TENSORS][2];
  for (int32_t i = 0; i < j->nout && status == 200; i++) {
    const sv_tensor *t = &j->out[j->out_index[i]];
    const sv_shm_ref *ref = &j->out_shm[i];
    outs[i] = (sv_output){j->out_name[i], t->dtype, t->ndim, t->shape, t->data, j->out_binary[i],
                          ref->region[0] ? ref->region : NULL, 0};
    if (j->cls[i]) {   /* classification: [rows, k] (or [k]) strings */
      cls_shape[i][0] = j->cls_rows[i];
      cls_shape[i][1] = j->cls_k[i];
      outs[i] = (sv_output){j->out_name[i], SV_BYTES, j->cls_rows[i] ? 2 : 1,
                            j->cls_rows[i] ? cls_shape[i] : cls_shape[i] + 1, j->cls[i], j->out_binary[i],
                            NULL, j->cls_bytes[i]};
      continue;
    }
    if (!ref->region[0]) continue;
    size_t nbytes = (size_t)sv_numel(t->shape, t->ndim) * (size_t)sv_dtype_size(t->dtype);
    char msg[SV_REASON - 64];
    if (nbytes > ref->byte_size) {
      snprintf(j->error, sizeof j->error, "output '%s': %zu bytes, more than its shared_memory_byte_size "
               "%llu", j->out_name[i], nbytes, (unsigned long long)ref->byte_size);
      status = 400;
    } else if (!sv_shm_write(shm, ref->region, ref->offset, t->data, nbytes, msg, sizeof msg)) {
      snprintf(j->error, sizeof j->error, "output '%.100s': %.380s", j->out_name[i], msg);
      status = 400;
    }
  }
  if (status == 200) {
    if (!sv_write_response(o, j->model, j->version, j->id, outs, j->nout, header_len)) status = 500;
  } else {
    sv_write_error(o, j->error);
  }
  for (int32_t i = 0; i < SV_MAX_TENSORS; i++) {
    sv_tensor_release(&j->in[i]);
    free(j->out[i].data);
    free(j->cls[i]);
  }
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cv);
  free(j);
  return status;
}

/* ---- reports ---- */
static const char *state_name(int32_t s) {
  return s == SV_READY ? "READY" : s == SV_LOADING ? "LOADING" : s == SV_UNLOADING ? "UNLOADING" : "UNAVAILABLE";
}

void sv_repo_index(sv_repo *r, bool ready_only, js_out *o) {
  pthread_mutex_lock(&r->mu);
  JO_LIT(o, "[");
  bool first = true;
  for (int32_t i = 0; i < r->n; i++) {
    const sv_model *m = r->models[i];
    for (int32_t k = 0; k < (m->nversions ? m->nversions : 1); k++) {
      const sv_version *v = m->nversions ? m->versions[k] : NULL;
      if (ready_only && (!v || v->state != SV_READY)) continue;
      if (!first) JO_LIT(o, ",");
      first = false;
      JO_LIT(o, "{\"name\":");
      jo_str(o, m->name);
      if (v) jo_fmt(o, ",\"version\":\"%lld\"", (long long)v->version);
      jo_fmt(o, ",\"state\":\"%s\"", state_name(v ? v->state : m->state));
      const char *why = v && v->state != SV_READY ? v->reason : m->state != SV_READY ? m->reason : "";
      if (*why) {
        JO_LIT(o, ",\"reason\":");
        jo_str(o, why);
      }
      JO_LIT(o, "}");
    }
  }
  JO_LIT(o, "]");
  pthread_mutex_unlock(&r->mu);
}

void sv_model_metadata(sv_model *m, sv_version *v, js_out *o) {
  const sv_config *c = &m->cfg;
  JO_LIT(o, "{\"name\":");
  jo_str(o, m->name);
  JO_LIT(o, ",\"versions\":[");
  bool first = true;
  for (int32_t i = 0; i < m->nversions; i++)
    if (m->versions[i]->state == SV_READY && (!v || v == m->versions[i])) {
      jo_fmt(o, "%s\"%lld\"", first ? "" : ",", (long long)m->versions[i]->version);
      first = false;
    }
  JO_LIT(o, "],\"platform\":\"oneflow_graph\"");
  for (int32_t side = 0; side < 2; side++) {
    const sv_io *io = side ? c->out : c->in;
    int32_t n = side ? c->nout : c->nin;
    jo_fmt(o, ",\"%s\":[", side ? "outputs" : "inputs");
    for (int32_t i = 0; i < n; i++) {
      jo_fmt(o, "%s{\"name\":", i ? "," : "");
      jo_str(o, io[i].name);
      jo_fmt(o, ",\"datatype\":\"%s\",\"shape\":[%s", sv_datatype_name(io[i].dtype),
             c->max_batch_size > 0 ? "-1" : "");
      for (int32_t k = 0; k < io[i].ndim; k++)
        jo_fmt(o, "%s%lld", k || c->max_batch_size > 0 ? "," : "", (long long)io[i].dims[k]);
      JO_LIT(o, "]}");
    }
    JO_LIT(o, "]");
  }
  JO_LIT(o, "}");
}

void sv_repo_metrics(sv_repo *r, js_out *o) {
  static const char *const names[][2] = {
      {"nv_inference_request_success", "Successful inference requests"},
      {"nv_inference_request_failure", "Failed inference requests"},
      {"nv_inference_count", "Inferences performed (rows of the batch dimension, 1 per request without one)"},
      {"nv_inference_exec_count", "Model executions (batches)"},
      {"nv_inference_request_duration_us", "Cumulative request time, queue to response (us)"},
      {"nv_inference_queue_duration_us", "Cumulative time requests waited in the queue (us)"},
      {"nv_inference_compute_infer_duration_us", "Cumulative time the graphs ran (us)"}};
  pthread_mutex_lock(&r->mu);
  for (int32_t q = 0; q < 8; q++) {
    if (q < 7)
      jo_fmt(o, "# HELP %s %s\n# TYPE %s counter\n", names[q][0], names[q][1], names[q][0]);
    else
      JO_LIT(o, "# HELP flow_serve_batch_executions Model executions by batch rows\n"
                "# TYPE flow_serve_batch_executions counter\n");
    for (int32_t i = 0; i < r->n; i++) {
      sv_model *m = r->models[i];
      for (int32_t k = 0; k < m->nversions; k++) {
        sv_stats *s = &m->versions[k]->stats;
        long long ver = (long long)m->versions[k]->version;
        if (q == 7) {
          for (int32_t b = 0; b <= 256; b++) {
            long long x = s->batch_rows[b];
            if (x) jo_fmt(o, "flow_serve_batch_executions{model=\"%s\",version=\"%lld\",batch_size=\"%d\"} %lld\n",
                          m->name, ver, (int)b, x);
          }
          continue;
        }
        long long f[7] = {s->success, s->failure, s->rows, s->execs,
                          (s->success_ns + s->fail_ns) / 1000, s->queue_ns / 1000, s->infer_ns / 1000};
        jo_fmt(o, "%s{model=\"%s\",version=\"%lld\"} %lld\n", names[q][0], m->name, ver, f[q]);
      }
    }
  }
  pthread_mutex_unlock(&r->mu);
}

static void stat_pair(js_out *o, const char *name, long long count, long long ns, bool comma) {
  jo_fmt(o, "%s\"%s\":{\"count\":%lld,\"ns\":%lld}", comma ? "," : "", name, count, ns);
}

static void version_stats(const sv_model *m, const sv_version *v, js_out *o, bool comma) {
  const sv_stats *s = &v->stats;
  long long ok = s->success;
  jo_fmt(o, "%s{\"name\":", comma ? "," : "");
  jo_str(o, m->name);
  jo_fmt(o, ",\"version\":\"%lld\",\"last_inference\":%lld,\"inference_count\":%lld,"
         "\"execution_count\":%lld,\"inference_stats\":{", (long long)v->version,
         (long long)s->last_ms, (long long)s->rows, (long long)s->execs);
  stat_pair(o, "success", ok, s->success_ns, false);
  stat_pair(o, "fail", s->failure, s->fail_ns, true);
  stat_pair(o, "queue", ok, s->queue_ns, true);
  stat_pair(o, "compute_input", ok, s->input_ns, true);
  stat_pair(o, "compute_infer", ok, s->infer_ns, true);
  stat_pair(o, "compute_output", ok, s->output_ns, true);
  stat_pair(o, "cache_hit", 0, 0, true);    /* no response cache */
  stat_pair(o, "cache_miss", 0, 0, true);
  JO_LIT(o, "},\"batch_stats\":[");
  bool first = true;
  for (int32_t b = 0; b <= 256; b++) {
    long long c = s->batch_rows[b];
    if (!c) continue;
    jo_fmt(o, "%s{\"batch_size\":%d", first ? "" : ",", (int)b);
    stat_pair(o, "compute_input", c, s->batch_input_ns[b], true);
    stat_pair(o, "compute_infer", c, s->batch_infer_ns[b], true);
    stat_pair(o, "compute_output", c, s->batch_output_ns[b], true);
    JO_LIT(o, "}");
    first = false;
  }
  JO_LIT(o, "],\"memory_usage\":[]}");
}

void sv_repo_stats(sv_repo *r, sv_model *m, sv_version *v, js_out *o) {
  JO_LIT(o, "{\"model_stats\":[");
  bool comma = false;
  for (int32_t i = 0; i < r->n; i++) {
    sv_model *mi = r->models[i];
    if (m && mi != m) continue;
    for (int32_t k = 0; k < mi->nversions; k++) {
      if (v && mi->versions[k] != v) continue;
      version_stats(mi, mi->versions[k], o, comma);
      comma = true;
    }
  }
  JO_LIT(o, "]}");
}
