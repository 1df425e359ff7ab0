/* json.h -- a small, bounded JSON reader and writer for flow-serve.
 *
 * The reader parses a whole document into a flat array of values (no
 * recursion deeper than JS_MAX_DEPTH, at most max_values values, strings
 * decoded into one buffer no larger than the input): a hostile body can
 * cost at most a bounded multiple of its own size and never reads out of
 * bounds. Numbers keep their integer value when the token is an integer
 * (int64 tensors stay exact). tools/fuzz/fuzz_serve.c fuzzes it. */
#ifndef FLOW_SERVE_JSON_H
#define FLOW_SERVE_JSON_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { JS_MAX_DEPTH = 64 };
typedef enum { JS_NULL, JS_BOOL, JS_NUM, JS_STR, JS_ARR, JS_OBJ } js_type;

typedef struct js_val {
  js_type type;
  bool is_int;          /* JS_NUM: the token is an integer that fits int64 */
  bool b;               /* JS_BOOL */
  int64_t i;            /* JS_NUM when is_int */
  bool is_uint;         /* JS_NUM: a non-negative integer token that fits uint64 */
  uint64_t u;           /* JS_NUM when is_uint */
  double num;           /* JS_NUM */
  const char *s;        /* JS_STR: decoded, NUL-terminated; object member: key */
  size_t slen;
  const char *key;      /* the member's key inside an object, else NULL */
  int32_t n;            /* JS_ARR / JS_OBJ: children */
  int32_t first, next;  /* first child, next sibling (value indices, -1 none) */
} js_val;

typedef struct js_doc {
  js_val *v;
  int32_t nv, cap, max_values;
  char *strs;           /* decoded strings */
  size_t slen;
  char error[160];      /* why parsing failed, with the byte offset */
} js_doc;

/* Parses s[0..n) (one value, whitespace around it). Returns false with
 * doc->error set; js_free either way. max_values <= 0: 1 << 24. */
bool js_parse(js_doc *doc, const char *s, size_t n, int32_t max_values);
void js_free(js_doc *doc);
const js_val *js_root(const js_doc *doc);
/* the member `key` of object o, NULL when absent or o is not an object */
const js_val *js_get(const js_doc *doc, const js_val *o, const char *key);
/* child i of an array or object, NULL out of range (linear in i) */
const js_val *js_at(const js_doc *doc, const js_val *a, int32_t i);
const js_val *js_next(const js_doc *doc, const js_val *v);
const js_val *js_first(const js_doc *doc, const js_val *v);

/* A growing output buffer; on allocation failure `oom` is set and writes
 * stop (the caller answers 500). */
typedef struct js_out {
  char *p;
  size_t len, cap;
  bool oom;
} js_out;
void jo_raw(js_out *o, const char *s, size_t n);
#define JO_LIT(o, lit) jo_raw((o), (lit), sizeof(lit) - 1)   /* a string literal */
void jo_str(js_out *o, const char *s);          /* a quoted, escaped JSON string */
void jo_fmt(js_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* digits: 9 round-trips a float32, 17 a float64; nan and inf are not JSON:
 * written as the strings "NaN", "Infinity", "-Infinity" */
void jo_num(js_out *o, double v, int digits);
void jo_free(js_out *o);
#endif
