/* table.c -- the op table and schema, generated from ops.def: each public
 * op's row comes from its family file (OF_OP_IMPL), graph-only ops have none
 * here (core/graph/ops.c adds theirs). Also the record helpers several
 * families share. */
#include "op.h"

#define OF_OP(K, NAME, T, MIN, MAX, NR, FL, FAM) extern const of_opimpl of_opimpl_##K;
#define OF_GRAPH_OP(K, NAME, T, MIN, MAX, NR, FL, FAM)
#include "ops.def"
#undef OF_OP
#undef OF_GRAPH_OP

/* a variable record (OF_OPF_VARATTR) counts its header only */
#define OF_OP(K, NAME, T, MIN, MAX, NR, FL, FAM) \
  [OPK_##K] = {NAME, #T, #FAM, (int32_t)sizeof(T), MIN, MAX, NR, FL, &of_opimpl_##K},
#define OF_GRAPH_OP(K, NAME, T, MIN, MAX, NR, FL, FAM) \
  [OPK_##K] = {NAME, #T, #FAM, 0, MIN, MAX, NR, FL, NULL},
typedef struct fused_prog fused_prog;   /* graph-only records: names only */
typedef struct a_alias a_alias;
typedef struct a_backward a_backward;
typedef struct a_relu_pool a_relu_pool;
typedef struct a_conv_fused a_conv_fused;
static const of_opschema_row schema[OPK_COUNT] = {
#include "ops.def"
};
#undef OF_OP
#undef OF_GRAPH_OP

/* every kind has a row */
#define OF_OP(K, NAME, T, MIN, MAX, NR, FL, FAM) +1
#define OF_GRAPH_OP OF_OP
_Static_assert(0
#include "ops.def"
               == OPK_COUNT, "ops.def and the op kinds disagree");
#undef OF_OP
#undef OF_GRAPH_OP

const of_opschema_row *of_op_schema_row(int32_t op) {
  return op >= 0 && op < OPK_COUNT ? &schema[op] : NULL;
}
const char *of_op_name(int32_t op) {
  return op >= 0 && op < OPK_COUNT ? schema[op].name : "?";
}

/* ---- the schema for hosts (oneflow.h) ---- */
int32_t of_op_schema_count(void) { return OPK_COUNT; }
of_status of_op_schema(int32_t op, of_op_info *out) {
  if (op < 0 || op >= OPK_COUNT || !out)
    return of_fail(OF_ERR_INDEX, "op_schema: op %d is not in 0..%d", (int)op, (int)OPK_COUNT - 1);
  const of_opschema_row *s = &schema[op];
  out->name = s->name;
  out->attrs = s->attrs;
  out->family = s->family;
  out->attr_size = s->flags & OF_OPF_VARATTR ? -1 : s->attr_size;
  out->min_inputs = s->min_in;
  out->max_inputs = s->max_in;
  out->outputs = s->nreal;
  out->flags = s->flags;
  out->graph_only = s->impl == NULL;
  return OF_OK;
}

of_status of_op_bad_record(int32_t op, const char *what) {
  return of_fail(OF_ERR_ARG, "nn.Graph: %s node has a bad %s in its record", of_op_name(op),
                 what);
}

/* ---- record printers shared by families ---- */
size_t of_catf(char *buf, size_t cap, const char *fmt, ...) {
  size_t len = strlen(buf);
  if (len >= cap) return len;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
  return strlen(buf);
}
void of_cat_list(char *buf, size_t cap, const char *name, const int64_t *v, int32_t n) {
  of_catf(buf, cap, "%s%s=", buf[0] ? " " : "", name);
  for (int32_t i = 0; i < n; i++) of_catf(buf, cap, "%s%lld", i ? "," : "", (long long)v[i]);
}
void of_describe_i1(const void *p, char *b, size_t c) {
  of_catf(b, c, "%d", (int)((const a_i1 *)p)->v);
}
void of_describe_d1(const void *p, char *b, size_t c) {
  of_catf(b, c, "%g", ((const a_d1 *)p)->v);
}
void of_describe_dims(const void *p, char *b, size_t c) {
  const a_dims *a = p;
  of_catf(b, c, "dims=");
  for (int32_t i = 0; i < (NDIM_OK(a->n) ? a->n : 0); i++)
    of_catf(b, c, "%s%d", i ? "," : "", a->dims[i]);
}
/* the op writes its first input in place */
int32_t of_mutates_first(const void *a, int32_t nin, int32_t *idx) {
  (void)a;
  (void)nin;
  idx[0] = 0;
  return 1;
}

of_status of_op_describe(int32_t op, const void *attrs, int32_t size, char *buf, int32_t cap) {
  if (!buf || cap <= 0) return of_fail(OF_ERR_ARG, "op_describe: no buffer");
  buf[0] = 0;
  if (op < 0 || op >= OPK_COUNT)
    return of_fail(OF_ERR_INDEX, "op_describe: op %d is not in 0..%d", (int)op, (int)OPK_COUNT - 1);
  const of_opschema_row *s = &schema[op];
  bool var = (s->flags & OF_OPF_VARATTR) != 0;
  if (!attrs || !s->impl || !s->impl->describe) return OF_OK;
  if (var ? size < s->attr_size : size != s->attr_size) return OF_OK;
  s->impl->describe(attrs, buf, (size_t)cap);
  return OF_OK;
}
