/* config.c -- Triton's model configuration in its JSON form (see repo.h). */
#include "repo.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* an integer member (Triton's JSON may write int64 fields as strings) */
static bool get_int(const js_doc *d, const js_val *o, const char *key, int64_t *out, bool *found) {
  const js_val *v = js_get(d, o, key);
  *found = v != NULL;
  if (!v) return true;
  if (v->type == JS_NUM && v->is_int) {
    *out = v->i;
    return true;
  }
  if (v->type == JS_STR) {
    char *end;
    long long x = strtoll(v->s, &end, 10);
    if (*v->s && !*end) {
      *out = x;
      return true;
    }
  }
  return false;
}

static bool parse_ios(const js_doc *d, const js_val *a, sv_io *io, int32_t *n, const char *what,
                      char *e, size_t cap) {
  if (a->type != JS_ARR || a->n > SV_MAX_TENSORS)
    return sv_errorf(e, cap, "\"%s\" must be an array of at most %d tensors", what, SV_MAX_TENSORS);
  *n = 0;
  for (const js_val *t = js_first(d, a); t; t = js_next(d, t)) {
    sv_io *x = &io[(*n)++];
    memset(x, 0, sizeof *x);
    const js_val *name = js_get(d, t, "name"), *dt = js_get(d, t, "data_type"),
                 *dims = js_get(d, t, "dims");
    if (!name || name->type != JS_STR || name->slen == 0 || name->slen >= SV_NAME)
      return sv_errorf(e, cap, "%s %d: \"name\" must be a non-empty string", what, (int)*n);
    memcpy(x->name, name->s, name->slen + 1);
    if (!dt || dt->type != JS_STR || (x->dtype = sv_config_type_code(dt->s)) < 0)
      return sv_errorf(e, cap, "%s '%s': \"data_type\" must be one of TYPE_BOOL, TYPE_UINT8, "
                  "TYPE_UINT16, TYPE_UINT32, TYPE_UINT64, TYPE_INT8, TYPE_INT16, TYPE_INT32, "
                  "TYPE_INT64, TYPE_FP16, TYPE_BF16, TYPE_FP32, TYPE_FP64",
                  what, x->name);
    if (!dims || dims->type != JS_ARR || dims->n > SV_MAX_DIMS)
      return sv_errorf(e, cap, "%s '%s': \"dims\" must be an array of at most %d integers", what,
                  x->name, SV_MAX_DIMS);
    for (const js_val *v = js_first(d, dims); v; v = js_next(d, v)) {
      int64_t k = 0;
      if (v->type == JS_NUM && v->is_int) k = v->i;
      else if (v->type == JS_STR) k = strtoll(v->s, NULL, 10);
      if (k < 1 || k > ((int64_t)1 << 40))
        return sv_errorf(e, cap, "%s '%s': dims must be positive integers (variable dims, -1, are "
                    "not supported: a saved graph has fixed shapes)", what, x->name);
      x->dims[x->ndim++] = k;
    }
    const js_val *lf = js_get(d, t, "label_filename");
    if (lf) {
      /* a file of the model's folder, named alone */
      if (strcmp(what, "output") != 0 || lf->type != JS_STR || lf->slen == 0 || lf->slen >= SV_NAME ||
          strlen(lf->s) != lf->slen || strchr(lf->s, '/') || lf->s[0] == '.')
        return sv_errorf(e, cap, "%s '%s': label_filename must name a file in the model's folder (no "
                         "'/', not starting with '.'; outputs only)", what, x->name);
      memcpy(x->label_filename, lf->s, lf->slen + 1);
    }
    for (int32_t k = 0; k < *n - 1; k++)
      if (strcmp(io[k].name, x->name) == 0)
        return sv_errorf(e, cap, "%s '%s' is named twice", what, x->name);
  }
  return true;
}

bool sv_config_parse(const char *json, size_t n, sv_config *c, char *e, size_t cap) {
  memset(c, 0, sizeof *c);
  c->nin = c->nout = -1;
  c->num_versions = 1;
  js_doc d;
  bool ok = false, found;
  if (!js_parse(&d, json, n, 1 << 20)) {
    sv_errorf(e, cap, "config.json: %s", d.error);
    js_free(&d);
    return false;
  }
  const js_val *root = js_root(&d), *v;
  int64_t x = 0;
  if (!root || root->type != JS_OBJ) {
    sv_errorf(e, cap, "config.json: expected a JSON object");
    goto done;
  }
  if ((v = js_get(&d, root, "name"))) {
    if (v->type != JS_STR || v->slen >= SV_NAME) {
      sv_errorf(e, cap, "config.json: \"name\" must be a string");
      goto done;
    }
    memcpy(c->name, v->s, v->slen + 1);
  }
  if ((v = js_get(&d, root, "platform")) || (v = js_get(&d, root, "backend"))) {
    if (v->type != JS_STR || (strcmp(v->s, "oneflow_graph") != 0 && strcmp(v->s, "oneflow") != 0)) {
      sv_errorf(e, cap, "config.json: platform/backend '%s' is not served here: flow-serve runs "
           "saved graphs (platform \"oneflow_graph\", backend \"oneflow\", or none)",
           v->type == JS_STR ? v->s : "?");
      goto done;
    }
  }
  if (!get_int(&d, root, "max_batch_size", &x, &found) || x < 0 || x > 1 << 20) {
    sv_errorf(e, cap, "config.json: \"max_batch_size\" must be a non-negative integer");
    goto done;
  }
  c->max_batch_size = (int32_t)x;
  c->max_batch_given = found;
  if ((v = js_get(&d, root, "input")) && !parse_ios(&d, v, c->in, &c->nin, "input", e, cap)) goto done;
  if ((v = js_get(&d, root, "output")) && !parse_ios(&d, v, c->out, &c->nout, "output", e, cap))
    goto done;
  if ((v = js_get(&d, root, "dynamic_batching"))) {
    if (v->type != JS_OBJ) {
      sv_errorf(e, cap, "config.json: \"dynamic_batching\" must be an object");
      goto done;
    }
    c->dynamic_batching = true;
    x = 0;
    if (!get_int(&d, v, "max_queue_delay_microseconds", &x, &found) || x < 0 || x > 60000000) {
      sv_errorf(e, cap, "config.json: max_queue_delay_microseconds must be 0..60000000");
      goto done;
    }
    c->max_queue_delay_us = x;
  }
  if ((v = js_get(&d, root, "instance_group"))) {
    if (v->type != JS_ARR) {
      sv_errorf(e, cap, "config.json: \"instance_group\" must be an array");
      goto done;
    }
    for (const js_val *g = js_first(&d, v); g; g = js_next(&d, g)) {
      const js_val *kind = js_get(&d, g, "kind");
      if (kind && (kind->type != JS_STR || strcmp(kind->s, "KIND_CPU") != 0)) {
        sv_errorf(e, cap, "config.json: instance_group kind %s: only KIND_CPU instances are served",
             kind->type == JS_STR ? kind->s : "?");
        goto done;
      }
      x = 1;
      if (!get_int(&d, g, "count", &x, &found) || x < 1 || x > 64) {
        sv_errorf(e, cap, "config.json: instance_group count must be 1..64");
        goto done;
      }
      c->instances += (int32_t)x;
    }
    if (c->instances > 64) c->instances = 64;
  }
  if ((v = js_get(&d, root, "version_policy"))) {
    const js_val *p;
    if ((p = js_get(&d, v, "all"))) {
      c->policy = 1;
    } else if ((p = js_get(&d, v, "specific"))) {
      c->policy = 2;
      const js_val *vs = js_get(&d, p, "versions");
      if (!vs || vs->type != JS_ARR || vs->n < 1 || vs->n > SV_MAX_VERSIONS) {
        sv_errorf(e, cap, "config.json: version_policy.specific.versions must list 1 to %d versions",
             SV_MAX_VERSIONS);
        goto done;
      }
      for (const js_val *k = js_first(&d, vs); k; k = js_next(&d, k)) {
        int64_t ver = k->type == JS_NUM && k->is_int ? k->i : k->type == JS_STR ? strtoll(k->s, NULL, 10) : 0;
        if (ver < 1) {
          sv_errorf(e, cap, "config.json: versions are positive integers");
          goto done;
        }
        c->specific[c->nspecific++] = ver;
      }
    } else if ((p = js_get(&d, v, "latest"))) {
      x = 1;
      if (!get_int(&d, p, "num_versions", &x, &found) || x < 1 || x > SV_MAX_VERSIONS) {
        sv_errorf(e, cap, "config.json: version_policy.latest.num_versions must be 1..%d", SV_MAX_VERSIONS);
        goto done;
      }
      c->num_versions = (int32_t)x;
    } else {
      sv_errorf(e, cap, "config.json: version_policy must be {\"latest\": ...}, {\"all\": {}} or "
           "{\"specific\": ...}");
      goto done;
    }
  }
  ok = true;
done:
  js_free(&d);
  return ok;
}

static void write_ios(js_out *o, const sv_io *io, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    if (i) JO_LIT(o, ",");
    JO_LIT(o, "{\"name\":");
    jo_str(o, io[i].name);
    jo_fmt(o, ",\"data_type\":\"%s\",\"dims\":[", sv_config_type_name(io[i].dtype));
    for (int32_t k = 0; k < io[i].ndim; k++) jo_fmt(o, "%s%lld", k ? "," : "", (long long)io[i].dims[k]);
    JO_LIT(o, "]");
    if (io[i].label_filename[0]) {
      JO_LIT(o, ",\"label_filename\":");
      jo_str(o, io[i].label_filename);
    }
    JO_LIT(o, "}");
  }
}

void sv_config_write(js_out *o, const sv_config *c) {
  JO_LIT(o, "{\"name\":");
  jo_str(o, c->name);
  jo_fmt(o, ",\"platform\":\"oneflow_graph\",\"backend\":\"oneflow\",\"max_batch_size\":%d,\"input\":[",
         (int)c->max_batch_size);
  write_ios(o, c->in, c->nin > 0 ? c->nin : 0);
  JO_LIT(o, "],\"output\":[");
  write_ios(o, c->out, c->nout > 0 ? c->nout : 0);
  JO_LIT(o, "]");
  if (c->dynamic_batching)
    jo_fmt(o, ",\"dynamic_batching\":{\"max_queue_delay_microseconds\":%lld}",
           (long long)c->max_queue_delay_us);
  jo_fmt(o, ",\"instance_group\":[{\"count\":%d,\"kind\":\"KIND_CPU\"}]", (int)c->instances);
  if (c->policy == 1) {
    JO_LIT(o, ",\"version_policy\":{\"all\":{}}");
  } else if (c->policy == 2) {
    JO_LIT(o, ",\"version_policy\":{\"specific\":{\"versions\":[");
    for (int32_t i = 0; i < c->nspecific; i++) jo_fmt(o, "%s%lld", i ? "," : "", (long long)c->specific[i]);
    JO_LIT(o, "]}}");
  } else {
    jo_fmt(o, ",\"version_policy\":{\"latest\":{\"num_versions\":%d}}", (int)c->num_versions);
  }
  JO_LIT(o, "}");
}
