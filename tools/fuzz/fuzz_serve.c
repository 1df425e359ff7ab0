/* fuzz_serve.c -- libFuzzer harness for flow-serve's request parsing
 * (serve/json.c, serve/protocol.c, serve/config.c): the bodies an HTTP
 * client controls. The first byte picks what the rest is:
 *   0: an inference request, all JSON
 *   1: an inference request with binary tensor data; the next two bytes
 *      are the JSON header's length (Inference-Header-Content-Length)
 *   2: a model's config.json
 *   3: a POST /v2/logging body (serve/log.c)
 *   4: a POST /v2/trace/setting body (serve/trace.c)
 * A request that parses is written back as a response (its inputs as
 * outputs, alternately JSON and binary) so that the writer sees what the
 * parser accepts; a config that parses is written back too.
 * Without libFuzzer (-DFUZZ_REPLAY_MAIN, built by cmake as
 * fuzz_serve_replay and run by ctest) main() replays files and folders. */
#include "../../serve/protocol.h"
#include "../../serve/repo.h"
#include "../../serve/log.h"
#include "../../serve/trace.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int mode = data[0] % 5;
  const char *body = (const char *)data + 1;
  size_t n = size - 1, header = 0;
  char err[1024];
  if (mode == 1) {
    if (n < 2) return 0;
    header = (size_t)data[1] | (size_t)data[2] << 8;
    body += 2;
    n -= 2;
  }
  if (mode == 3 || mode == 4) {
    char e[512];
    if (mode == 3) sv_log_update(body, n, e, sizeof e);
    else sv_trace_update(n % 2 ? "m" : NULL, body, n, e, sizeof e);
    js_out o = {0};
    if (mode == 3) sv_log_settings(&o);
    else sv_trace_settings(n % 2 ? "m" : NULL, &o);
    js_doc d;   /* the settings read back */
    if (!o.oom && !js_parse(&d, o.p, o.len, 0)) abort();
    js_free(&d);
    jo_free(&o);
    return 0;
  }
  if (mode == 2) {
    sv_config c;
    if (sv_config_parse(body, n, &c, err, sizeof err)) {
      js_out o = {0};
      sv_config_write(&o, &c);
      js_doc d;   /* what the writer makes must parse */
      if (!o.oom && !js_parse(&d, o.p, o.len, 0)) abort();
      js_free(&d);
      jo_free(&o);
    }
    return 0;
  }
  /* binary requests as the server holds them: in a block the inputs point
   * into (and its reference dropped before the inputs are read, so that a
   * missing reference shows as a use after free under ASan) */
  sv_block *blk = NULL;
  if (mode == 1) {
    char *b;
    blk = sv_block_new(n, header, &b);
    if (!blk) return 0;
    memcpy(b, body, n);
    body = b;
  }
  sv_request r;
  bool parsed = sv_parse_request(body, n, header, 1 << 16, blk, &r, err, sizeof err);
  sv_block_release(blk);
  if (!parsed) return 0;
  sv_output outs[SV_MAX_TENSORS];
  char *cls[SV_MAX_TENSORS] = {0};
  int64_t cls_shape[SV_MAX_TENSORS][2];
  static const char *const labels[] = {"zero", "", "two:with:colons"};
  for (int32_t i = 0; i < r.nin; i++) {
    /* an input in shared memory has no data here: it answers as a
     * shared memory output (parameters, no bytes) */
    outs[i] = (sv_output){r.in[i].name, r.in[i].dtype, r.in[i].ndim, r.in[i].shape, r.in[i].data, i % 2 == 1,
                          r.in[i].shm.region[0] ? r.in[i].shm.region : NULL, 0};
    /* every third input with data answers as a classification of its
     * values, the top (request's first output's class count or 2) of each
     * of its first dim's rows */
    int64_t numel = sv_numel(r.in[i].shape, r.in[i].ndim);
    if (i % 3 == 2 && r.in[i].data && r.in[i].ndim >= 1 && r.in[i].shape[0] > 0 && numel <= (1 << 16)) {
      int64_t rows = r.in[i].shape[0], per = numel / rows;
      int32_t k = r.nout > 0 && r.out_class[0] ? r.out_class[0] : 2;
      if (k > per) k = (int32_t)per;
      size_t nb = 0;
      cls[i] = sv_classify(r.in[i].data, r.in[i].dtype, rows, per, k, labels, 3, &nb);
      if (!cls[i]) abort();
      cls_shape[i][0] = rows;
      cls_shape[i][1] = k;
      outs[i] = (sv_output){r.in[i].name, SV_BYTES, 2, cls_shape[i], cls[i], i % 2 == 1, NULL, nb};
    }
  }
  js_out o = {0};
  size_t hl = 0;
  if (sv_write_response(&o, "m", "1", r.id, outs, r.nin, &hl)) {
    js_doc d;
    if (!js_parse(&d, o.p, hl ? hl : o.len, 0)) abort();
    js_free(&d);
  }
  jo_free(&o);
  for (int32_t i = 0; i < r.nin; i++) free(cls[i]);
  sv_request_free(&r);
  return 0;
}

#ifdef FUZZ_REPLAY_MAIN
static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
  fclose(f);
  LLVMFuzzerTestOneInput(buf, got);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) continue;
    if (!S_ISDIR(st.st_mode)) {
      files += replay_file(argv[i]) == 0;
      continue;
    }
    DIR *d = opendir(argv[i]);
    struct dirent *de;
    while (d && (de = readdir(d))) {
      if (de->d_name[0] == '.') continue;
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", argv[i], de->d_name);
      files += replay_file(p) == 0;
    }
    if (d) closedir(d);
  }
  printf("fuzz_serve: replayed %d files\n", files);
  return files > 0 ? 0 : 1;
}
#endif
