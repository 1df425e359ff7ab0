/* json.c -- see json.h. */
#include "json.h"
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  js_doc *d;
  const char *s;
  size_t n, pos;
  int depth;
} parser;

static bool fail(parser *p, const char *what) {
  if (!p->d->error[0])
    snprintf(p->d->error, sizeof p->d->error, "malformed JSON at byte %zu: %s", p->pos, what);
  return false;
}

static void ws(parser *p) {
  while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                           p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
    p->pos++;
}

static int32_t new_value(parser *p, js_type t) {
  js_doc *d = p->d;
  if (d->nv >= d->max_values) return fail(p, "too many values"), -1;
  if (d->nv == d->cap) {
    int32_t cap = d->cap ? d->cap * 2 : 64;
    if (cap > d->max_values) cap = d->max_values;
    js_val *v = realloc(d->v, sizeof *v * (size_t)cap);
    if (!v) return fail(p, "out of memory"), -1;
    d->v = v;
    d->cap = cap;
  }
  js_val *v = &d->v[d->nv];
  memset(v, 0, sizeof *v);
  v->type = t;
  v->first = v->next = -1;
  return d->nv++;
}

static int hexv(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool hex4(parser *p, uint32_t *cp) {
  if (p->n - p->pos < 4) return fail(p, "truncated \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexv(p->s[p->pos++]);
    if (h < 0) return fail(p, "bad \\u escape");
    v = v * 16 + (uint32_t)h;
  }
  *cp = v;
  return true;
}

/* a string at p->pos (after ws) into the doc's buffer: its start in *out */
static bool string(parser *p, const char **out, size_t *len) {
  if (p->pos >= p->n || p->s[p->pos] != '"') return fail(p, "expected a string");
  p->pos++;
  js_doc *d = p->d;
  char *o = d->strs + d->slen, *start = o;
  while (p->pos < p->n) {
    unsigned char c = (unsigned char)p->s[p->pos++];
    if (c == '"') {
      *o++ = 0;
      *out = start;
      *len = (size_t)(o - start - 1);
      d->slen = (size_t)(o - d->strs);
      return true;
    }
    if (c < 0x20) return fail(p, "control character in a string");
    if (c != '\\') {
      *o++ = (char)c;
      continue;
    }
    if (p->pos >= p->n) break;
    char e = p->s[p->pos++];
    uint32_t cp;
    switch (e) {
      case '"': *o++ = '"'; continue;
      case '\\': *o++ = '\\'; continue;
      case '/': *o++ = '/'; continue;
      case 'b': *o++ = 8; continue;
      case 'f': *o++ = 12; continue;
      case 'n': *o++ = 10; continue;
      case 'r': *o++ = 13; continue;
      case 't': *o++ = 9; continue;
      case 'u':
        if (!hex4(p, &cp)) return false;
        if (cp >= 0xD800 && cp < 0xDC00) {
          uint32_t lo;
          if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return fail(p, "unpaired surrogate");
          p->pos += 2;
          if (!hex4(p, &lo)) return false;
          if (lo < 0xDC00 || lo >= 0xE000) return fail(p, "unpaired surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          return fail(p, "unpaired surrogate");
        }
        /* at most 4 bytes from at least 6 input bytes: the buffer suffices */
        if (cp < 0x80) {
          *o++ = (char)cp;
        } else if (cp < 0x800) {
          *o++ = (char)(0xC0 | cp >> 6);
          *o++ = (char)(0x80 | (cp & 63));
        } else if (cp < 0x10000) {
          *o++ = (char)(0xE0 | cp >> 12);
          *o++ = (char)(0x80 | ((cp >> 6) & 63));
          *o++ = (char)(0x80 | (cp & 63));
        } else {
          *o++ = (char)(0xF0 | cp >> 18);
          *o++ = (char)(0x80 | ((cp >> 12) & 63));
          *o++ = (char)(0x80 | ((cp >> 6) & 63));
          *o++ = (char)(0x80 | (cp & 63));
        }
        continue;
      default: return fail(p, "bad escape");
    }
  }
  return fail(p, "unterminated string");
}

/* JSON's number grammar, strictly; the value through strtod on a bounded copy */
static bool number(parser *p, js_val *v) {
  size_t st = p->pos, i = p->pos;
  const char *s = p->s;
  bool integer = true;
  if (i < p->n && s[i] == '-') i++;
  if (i >= p->n) return fail(p, "bad number");
  if (s[i] == '0') {
    i++;
  } else if (s[i] >= '1' && s[i] <= '9') {
    while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
  } else {
    return fail(p, "unexpected character");
  }
  if (i < p->n && s[i] == '.') {
    integer = false;
    i++;
    size_t d = i;
    while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
    if (i == d) return fail(p, "bad number");
  }
  if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
    integer = false;
    i++;
    if (i < p->n && (s[i] == '+' || s[i] == '-')) i++;
    size_t d = i;
    while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
    if (i == d) return fail(p, "bad number");
  }
  char buf[64];
  if (i - st >= sizeof buf) return fail(p, "number too long");
  memcpy(buf, s + st, i - st);
  buf[i - st] = 0;
  p->pos = i;
  v->num = strtod(buf, NULL);
  if (integer) {
    char *end;
    long long x = strtoll(buf, &end, 10);
    /* strtoll saturates: an integer out of int64 range stays a double */
    v->is_int = !((x == INT64_MAX || x == INT64_MIN) && strcmp(buf, x == INT64_MAX ?
                   "9223372036854775807" : "-9223372036854775808") != 0);
    v->i = x;
    if (buf[0] != '-') {   /* UINT64's upper half: strtoull saturates too */
      unsigned long long u = strtoull(buf, &end, 10);
      v->is_uint = u != ULLONG_MAX || strcmp(buf, "18446744073709551615") == 0;
      v->u = u;
    }
  }
  return true;
}

static bool value(parser *p, int32_t *out);

static bool container(parser *p, int32_t id, bool obj) {
  char close = obj ? '}' : ']';
  p->pos++;
  ws(p);
  if (p->pos < p->n && p->s[p->pos] == close) {
    p->pos++;
    return true;
  }
  int32_t last = -1;
  for (;;) {
    const char *key = NULL;
    size_t klen;
    ws(p);
    if (obj) {
      if (!string(p, &key, &klen)) return false;
      ws(p);
      if (p->pos >= p->n || p->s[p->pos] != ':') return fail(p, "expected ':'");
      p->pos++;
    }
    int32_t c;
    if (!value(p, &c)) return false;
    js_val *cv = &p->d->v[c];
    cv->key = key;
    if (last < 0) p->d->v[id].first = c; else p->d->v[last].next = c;
    last = c;
    p->d->v[id].n++;
    ws(p);
    if (p->pos < p->n && p->s[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < p->n && p->s[p->pos] == close) {
      p->pos++;
      return true;
    }
    return fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static bool literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->n - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return fail(p, "unexpected word");
  p->pos += n;
  return true;
}

static bool value(parser *p, int32_t *out) {
  ws(p);
  if (p->pos >= p->n) return fail(p, "unexpected end");
  char c = p->s[p->pos];
  int32_t id;
  bool ok;
  switch (c) {
    case '{':
    case '[':
      if (p->depth >= JS_MAX_DEPTH) return fail(p, "nested too deeply");
      if ((id = new_value(p, c == '{' ? JS_OBJ : JS_ARR)) < 0) return false;
      p->depth++;
      ok = container(p, id, c == '{');
      p->depth--;
      break;
    case '"':
      if ((id = new_value(p, JS_STR)) < 0) return false;
      ok = string(p, &p->d->v[id].s, &p->d->v[id].slen);
      break;
    case 't':
    case 'f':
      if ((id = new_value(p, JS_BOOL)) < 0) return false;
      p->d->v[id].b = c == 't';
      ok = literal(p, c == 't' ? "true" : "false");
      break;
    case 'n':
      if ((id = new_value(p, JS_NULL)) < 0) return false;
      ok = literal(p, "null");
      break;
    default:
      if ((id = new_value(p, JS_NUM)) < 0) return false;
      ok = number(p, &p->d->v[id]);
  }
  *out = id;
  return ok;
}

bool js_parse(js_doc *doc, const char *s, size_t n, int32_t max_values) {
  memset(doc, 0, sizeof *doc);
  doc->max_values = max_values > 0 ? max_values : 1 << 24;
  doc->strs = malloc(n + 1);
  if (!doc->strs) {
    snprintf(doc->error, sizeof doc->error, "out of memory");
    return false;
  }
  parser p = {doc, s, n, 0, 0};
  int32_t root;
  if (!value(&p, &root)) return false;
  ws(&p);
  if (p.pos != n) return fail(&p, "trailing characters");
  return true;
}

void js_free(js_doc *doc) {
  free(doc->v);
  free(doc->strs);
  doc->v = NULL;
  doc->strs = NULL;
  doc->nv = doc->cap = 0;
}

const js_val *js_root(const js_doc *doc) { return doc->nv > 0 ? &doc->v[0] : NULL; }

const js_val *js_first(const js_doc *doc, const js_val *v) {
  return v && (v->type == JS_ARR || v->type == JS_OBJ) && v->first >= 0 ? &doc->v[v->first] : NULL;
}

const js_val *js_next(const js_doc *doc, const js_val *v) {
  return v && v->next >= 0 ? &doc->v[v->next] : NULL;
}

const js_val *js_get(const js_doc *doc, const js_val *o, const char *key) {
  if (!o || o->type != JS_OBJ) return NULL;
  for (const js_val *c = js_first(doc, o); c; c = js_next(doc, c))
    if (c->key && strcmp(c->key, key) == 0) return c;
  return NULL;
}

const js_val *js_at(const js_doc *doc, const js_val *a, int32_t i) {
  const js_val *c = js_first(doc, a);
  for (int32_t k = 0; c && k < i; k++) c = js_next(doc, c);
  return i >= 0 ? c : NULL;
}

/* ---- writer ---- */
void jo_raw(js_out *o, const char *s, size_t n) {
  if (o->oom) return;
  if (o->len + n + 1 > o->cap) {
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + n + 1) cap *= 2;
    char *p = realloc(o->p, cap);
    if (!p) {
      o->oom = true;
      return;
    }
    o->p = p;
    o->cap = cap;
  }
  memcpy(o->p + o->len, s, n);
  o->len += n;
  o->p[o->len] = 0;
}

void jo_str(js_out *o, const char *s) {
  JO_LIT(o, "\"");
  for (const unsigned char *c = (const unsigned char *)s; c && *c; c++) {
    char esc[8];
    if (*c == '"' || *c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)*c;
      jo_raw(o, esc, 2);
    } else if (*c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", *c);
      jo_raw(o, esc, 6);
    } else {
      jo_raw(o, (const char *)c, 1);
    }
  }
  JO_LIT(o, "\"");
}

void jo_fmt(js_out *o, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof buf) {
    jo_raw(o, buf, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    o->oom = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  jo_raw(o, big, (size_t)n);
  free(big);
}

void jo_num(js_out *o, double v, int digits) {
  if (isnan(v)) JO_LIT(o, "\"NaN\"");
  else if (isinf(v)) jo_fmt(o, "\"%sInfinity\"", v < 0 ? "-" : "");
  else jo_fmt(o, "%.*g", digits, v);
}

void jo_free(js_out *o) {
  free(o->p);
  memset(o, 0, sizeof *o);
}
