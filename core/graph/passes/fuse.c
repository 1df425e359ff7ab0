/* fuse.c -- elementwise fusion.
 *
 * Chains and trees of float elementwise ops (unary, binary, with a scalar,
 * clamp, leaky_relu) whose intermediate results have one reader become one
 * node. Its kernel runs a register program over blocks of the output: each
 * instruction calls the eager op's own loop on a block that stays in L1,
 * so results are bit-identical to eager mode while memory is read and
 * written once. Operands broadcast to the output shape (a bias row, a
 * scalar); the bias add + activation after a matmul is the common case
 * ("bias-add/activation fusion"), and in-place rewriting then lets the
 * fused node write into the matmul's buffer. */
#include "../ops.h"
#include "../fused.h"
#include "../../device.h"
#include "../../ops/elementwise.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

enum { BLOCK = 2048 };

/* ---- which nodes fuse ---- */
static bool float_dt(of_dtype dt) { return dt == OF_FLOAT32 || dt == OF_FLOAT64; }
static bool is_compare(int32_t op) { return op >= OF_EQ && op <= OF_GE; }

/* The float dtype the node computes in, or -1 when it does not fuse:
 * float elementwise ops, comparisons of floats (a bool result) and
 * bool -> float casts. */
static of_dtype fusible(const of_graph *g, const of_gnode *n) {
  if (n->dead || n->nreal != 1 || n->nmut || n->out[0] < 0 || (n->flags & OF_GN_CAPTURE)) return -1;
  const of_gval *o = &g->vals[n->out[0]];
  if (o->same != n->out[0] || o->root != n->out[0] || o->kind != OF_GV_INTERNAL) return -1;
  int32_t nops = 1;
  bool want_bool_in = false, bool_out = false;
  switch (n->op) {
    case OPK_BINARY: case OPK_BINARY_SCALAR: {
      int32_t op = n->op == OPK_BINARY ? ((const a_binary *)n->attrs)->op
                                       : ((const a_binary_scalar *)n->attrs)->op;
      if (op < 0 || (op > OF_ATAN2 && !is_compare(op))) return -1;
      bool_out = is_compare(op);
      nops = n->op == OPK_BINARY ? 2 : 1;
      break;
    }
    case OPK_UNARY: {
      const a_unary *a = n->attrs;
      if (a->op < 0 || a->op >= OF_NUM_UNARY || a->op == OF_LOGICAL_NOT || a->op == OF_ISNAN ||
          a->op == OF_ISINF || a->op == OF_ISFINITE || a->op == OF_BITWISE_NOT)
        return -1;
      break;
    }
    case OPK_CLAMP: case OPK_LEAKY_RELU: break;
    case OPK_TO_DTYPE: want_bool_in = true; break;
    default: return -1;
  }
  if (n->nin != nops) return -1;   /* already in place */
  of_dtype T = bool_out || want_bool_in ? -1 : o->dtype;
  if (want_bool_in) T = o->dtype;
  for (int32_t k = 0; k < nops; k++) {
    if (n->in[k] < 0) return -1;
    const of_gval *x = &g->vals[n->in[k]];
    if (x->kind == OF_GV_HANDLE) return -1;
    if (want_bool_in) {
      if (x->dtype != OF_BOOL) return -1;
    } else {
      if (T < 0) T = x->dtype;
      if (x->dtype != T) return -1;
    }
  }
  if (!float_dt(T) || (bool_out ? o->dtype != OF_BOOL : o->dtype != T)) return -1;
  if (n->op == OPK_UNARY && !of_unary_kernel(((const a_unary *)n->attrs)->op, T)) return -1;
  return T;
}

/* The fused node lays its result out by the eager rule over its own inputs
 * (of_tensors_want_channels_last); a chain whose recorded result came out otherwise
 * (its ops decided on other operands) stays unfused, so the values the
 * later passes see are the ones the runs make. */
static bool layout_kept(const of_graph *g, const int32_t *ins, int32_t nin, const of_gval *out) {
  of_layout_ref r[FUSED_MAX_IN];
  for (int32_t k = 0; k < nin; k++) {
    const of_gval *v = &g->vals[ins[k]];
    r[k] = (of_layout_ref){v->shape, v->strides, v->ndim};
  }
  bool cl = of_layout_wants_channels_last(r, nin, out->shape, out->ndim);
  return cl ? of_strides_channels_last(out->shape, out->strides, out->ndim)
            : of_gval_contiguous(out);
}

/* ---- the pass ---- */
typedef struct {
  int32_t *members;      /* node indices, in order */
  int32_t n, cap;
} group;

static bool group_add(group *gr, int32_t i) {
  if (gr->n == gr->cap) {
    int32_t cap = gr->cap ? gr->cap * 2 : 8;
    int32_t *m = realloc(gr->members, sizeof *m * (size_t)cap);
    if (!m) return false;
    gr->members = m;
    gr->cap = cap;
  }
  gr->members[gr->n++] = i;
  return true;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* inputs of the group's members that no member produces */
static int32_t group_inputs(const of_graph *g, const group *gr, const int32_t *owner, int32_t root,
                            int32_t *ins, int32_t cap) {
  int32_t c = 0;
  for (int32_t m = 0; m < gr->n; m++) {
    const of_gnode *n = &g->nodes[gr->members[m]];
    for (int32_t k = 0; k < n->nin; k++) {
      int32_t v = n->in[k];
      int32_t p = g->vals[v].producer;
      if (p >= 0 && owner[p] == root) continue;
      bool seen = false;
      for (int32_t q = 0; q < c; q++) seen = seen || ins[q] == v;
      if (seen) continue;
      if (c == cap) return -1;
      ins[c++] = v;
    }
  }
  return c;
}

static bool build_prog(const of_graph *g, const group *gr, const int32_t *owner, int32_t root,
                       fused_prog *p, int32_t *ins, int32_t *nin) {
  memset(p, 0, sizeof *p);
  int32_t c = group_inputs(g, gr, owner, root, ins, FUSED_MAX_IN);
  if (c < 0 || gr->n > FUSED_MAX_OPS) return false;
  *nin = c;
  const of_gval *o = &g->vals[g->nodes[root].out[0]];
  p->nin = c;
  for (int32_t q = 0; q < c; q++) p->in_bool[q] = g->vals[ins[q]].dtype == OF_BOOL;
  p->dtype = o->dtype;
  p->into = -1;
  p->ndim = o->ndim;
  memcpy(p->shape, o->shape, sizeof p->shape);
  p->nops = gr->n;
  /* constants first (their count fixes the temp registers' numbering) */
  for (int32_t m = 0; m < gr->n; m++) {
    const of_gnode *n = &g->nodes[gr->members[m]];
    if (n->op == OPK_BINARY_SCALAR) p->consts[p->nconst++] = ((const a_binary_scalar *)n->attrs)->s;
  }
  int32_t base = c + p->nconst, kc = 0;
  for (int32_t m = 0; m < gr->n; m++) {
    const of_gnode *n = &g->nodes[gr->members[m]];
    fused_inst *in = &p->ops[m];
    int32_t reg[2] = {-1, -1};
    for (int32_t k = 0; k < n->nin && k < 2; k++) {
      int32_t v = n->in[k], pr = g->vals[v].producer;
      if (pr >= 0 && owner[pr] == root) {
        for (int32_t q = 0; q < m; q++)
          if (gr->members[q] == pr) reg[k] = base + q;
      } else {
        for (int32_t q = 0; q < c; q++)
          if (ins[q] == v) reg[k] = q;
      }
      if (reg[k] < 0) return false;
    }
    in->a = reg[0];
    in->b = reg[1];
    in->p0 = in->p1 = NAN;
    in->out_bool = g->vals[n->out[0]].dtype == OF_BOOL;
    switch (n->op) {
      case OPK_UNARY: in->kind = FUSED_UNARY; in->op = ((const a_unary *)n->attrs)->op; break;
      case OPK_BINARY: in->kind = FUSED_BINARY; in->op = ((const a_binary *)n->attrs)->op; break;
      case OPK_BINARY_SCALAR: {
        const a_binary_scalar *a = n->attrs;
        in->kind = FUSED_BINARY;
        in->op = a->op;
        int32_t s = c + kc++;
        if (a->reverse) { in->b = in->a; in->a = s; } else { in->b = s; }
        break;
      }
      case OPK_TO_DTYPE: in->kind = FUSED_CAST; break;
      case OPK_CLAMP: {
        const a_clamp *a = n->attrs;
        in->kind = FUSED_CLAMP;
        in->p0 = a->has_lo ? a->lo : NAN;
        in->p1 = a->has_hi ? a->hi : NAN;
        break;
      }
      default:
        in->kind = FUSED_LEAKY;
        in->p0 = ((const a_leaky *)n->attrs)->slope;
        break;
    }
  }
  return true;
}

of_status of_pass_fuse(of_graph *g, int32_t *removed) {
  *removed = 0;
  /* the fused program calls the CPU loops; on a device every elementwise op
   * is already one kernel (and a CUDA graph removes the launch cost) */
  if (g->device != OF_CPU) return OF_OK;
  int32_t nn = g->nnodes;
  int32_t *uses = of_graph_use_counts(g);
  int32_t *owner = malloc(sizeof *owner * (size_t)(nn ? nn : 1));
  of_dtype *gdt = malloc(sizeof *gdt * (size_t)(nn ? nn : 1));
  int32_t *sharers = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *sharers);
  group *groups = calloc((size_t)(nn ? nn : 1), sizeof *groups);
  if (!uses || !owner || !groups || !sharers || !gdt) {
    free(uses); free(owner); free(groups); free(sharers); free(gdt);
    return of_fail(OF_ERR_OOM, "nn.Graph: fuse: out of memory");
  }
  for (int32_t v = 0; v < g->nvals; v++) sharers[g->vals[v].root]++;
  of_status st = OF_OK;
  for (int32_t i = 0; i < nn; i++) owner[i] = -1;
  for (int32_t i = 0; i < nn && st == OF_OK; i++) {
    of_gnode *n = &g->nodes[i];
    gdt[i] = fusible(g, n);
    if (gdt[i] < 0) continue;
    owner[i] = i;
    if (!group_add(&groups[i], i)) { st = of_fail(OF_ERR_OOM, "nn.Graph: fuse: out of memory"); break; }
    for (int32_t k = 0; k < n->nin; k++) {
      int32_t v = n->in[k], p = g->vals[v].producer;
      if (p < 0 || owner[p] != p || p == i || uses[v] != 1 || sharers[v] != 1 || gdt[p] != gdt[i])
        continue;
      group *gp = &groups[p];
      if (gp->n + groups[i].n > FUSED_MAX_OPS) continue;
      /* the members' other inputs are read later than before: nothing may
       * write into them in between */
      int32_t tmp[FUSED_MAX_IN];
      int32_t c = group_inputs(g, gp, owner, p, tmp, FUSED_MAX_IN);
      bool safe = c >= 0;
      for (int32_t q = 0; q < c && safe; q++)
        if (of_graph_written_between(g, g->vals[tmp[q]].root, gp->members[0], i)) safe = false;
      if (!safe) continue;
      for (int32_t m = 0; m < gp->n; m++) {
        owner[gp->members[m]] = i;
        if (!group_add(&groups[i], gp->members[m])) st = of_fail(OF_ERR_OOM, "nn.Graph: fuse: out of memory");
      }
      free(gp->members);
      memset(gp, 0, sizeof *gp);
    }
    qsort(groups[i].members, (size_t)groups[i].n, sizeof(int32_t), cmp_i32);
  }
  int32_t count = 0;
  for (int32_t i = 0; i < nn && st == OF_OK; i++) {
    group *gr = &groups[i];
    if (owner[i] != i || gr->n < 2 || g->vals[g->nodes[i].out[0]].dtype != gdt[i]) continue;
    fused_prog prog;
    int32_t ins[FUSED_MAX_IN], nin = 0;
    if (!build_prog(g, gr, owner, i, &prog, ins, &nin)) continue;
    int32_t out = g->nodes[i].out[0];
    if (!layout_kept(g, ins, nin, &g->vals[out])) continue;
    int32_t ni = of_graph_add_node(g, OF_OPK_FUSED, &prog, sizeof prog, ins, nin, 1, 0);
    if (ni < 0) { st = of_fail(OF_ERR_OOM, "nn.Graph: fuse: out of memory"); break; }
    /* the fused node takes the root's place in the order */
    of_gnode fused = g->nodes[ni];
    g->nnodes--;
    fused.out[0] = out;
    for (int32_t m = 0; m < gr->n; m++) {
      of_gnode *x = &g->nodes[gr->members[m]];
      if (gr->members[m] != i) x->dead = true;
    }
    of_graph_node_free(&g->nodes[i]);
    g->nodes[i] = fused;
    count += gr->n - 1;
  }
  for (int32_t i = 0; i < nn; i++) free(groups[i].members);
  free(groups); free(uses); free(owner); free(sharers); free(gdt);
  *removed = count;
  return st;
}

/* ---- record access for the in-place pass ---- */
int32_t of_fused_into(const of_gnode *n) { return ((const fused_prog *)n->attrs)->into; }
void of_fused_set_into(of_gnode *n, int32_t k) { ((fused_prog *)n->attrs)->into = k; }

/* Checks a program (it may come from a file): register numbers, kernels,
 * and that every operand has the type (float or bool) its instruction reads. */
of_status of_fused_check(const void *attrs, int32_t size, int32_t nin) {
  const fused_prog *p = attrs;
  if (size != (int32_t)sizeof *p) return of_fail(OF_ERR_ARG, "fused_elementwise: bad record size");
  if (p->nin != nin || p->nin < 1 || p->nin > FUSED_MAX_IN || p->nops < 1 ||
      p->nops > FUSED_MAX_OPS || p->nconst < 0 || p->nconst > FUSED_MAX_OPS ||
      !float_dt(p->dtype) || p->ndim < 0 || p->ndim > OF_MAX_DIMS || p->into < -1 ||
      p->into >= p->nin || (p->into >= 0 && p->in_bool[p->into]))
    return of_fail(OF_ERR_ARG, "fused_elementwise: bad program header");
  bool is_bool[FUSED_MAX_IN + 2 * FUSED_MAX_OPS];
  for (int32_t k = 0; k < p->nin; k++) is_bool[k] = p->in_bool[k] != 0;
  for (int32_t c = 0; c < p->nconst; c++) is_bool[p->nin + c] = false;
  for (int32_t i = 0; i < p->nops; i++) {
    const fused_inst *in = &p->ops[i];
    int32_t limit = p->nin + p->nconst + i;   /* earlier registers only */
    bool two = in->kind == FUSED_BINARY, ok = true;
    if (in->kind < FUSED_UNARY || in->kind > FUSED_CAST || in->a < 0 || in->a >= limit ||
        (two && (in->b < 0 || in->b >= limit)))
      return of_fail(OF_ERR_ARG, "fused_elementwise: bad instruction %d", (int)i);
    bool cmp = two && is_compare(in->op);
    switch (in->kind) {
      case FUSED_UNARY: ok = of_unary_kernel(in->op, p->dtype) && !is_bool[in->a] && !in->out_bool; break;
      case FUSED_BINARY:
        ok = (in->op >= 0 && (in->op <= OF_ATAN2 || cmp)) && of_binary_kernel(in->op, p->dtype) &&
             !is_bool[in->a] && !is_bool[in->b] && (in->out_bool != 0) == cmp;
        break;
      case FUSED_CAST: ok = is_bool[in->a] && !in->out_bool; break;
      default: ok = !is_bool[in->a] && !in->out_bool; break;
    }
    if (!ok) return of_fail(OF_ERR_ARG, "fused_elementwise: bad operands in instruction %d", (int)i);
    is_bool[limit] = in->out_bool != 0;
  }
  if (p->ops[p->nops - 1].out_bool) return of_fail(OF_ERR_ARG, "fused_elementwise: bool result");
  return OF_OK;
}

void of_fused_describe(const void *attrs, char *buf, size_t cap) {
  const fused_prog *p = attrs;
  size_t len = strlen(buf);
  for (int32_t i = 0; i < p->nops && i < FUSED_MAX_OPS && len + 1 < cap; i++) {
    const fused_inst *in = &p->ops[i];
    const char *name = in->kind == FUSED_UNARY ? of_unary_name(in->op)
                       : in->kind == FUSED_BINARY ? of_binary_name(in->op)
                       : in->kind == FUSED_CLAMP ? "clamp"
                       : in->kind == FUSED_CAST ? "to" : "leaky_relu";
    snprintf(buf + len, cap - len, "%s%s", i ? "," : "", name);
    len = strlen(buf);
  }
  if (p->into >= 0 && len + 1 < cap) snprintf(buf + len, cap - len, " into=%d", (int)p->into);
}

/* ---- the kernel ---- */
#define CAST_LOOP(T)                                                        \
  static void cast_bool_##T(char **p, const int64_t *s, int64_t n, void *c) { \
    (void)c;                                                                \
    if (s[0] == sizeof(T) && s[1] == 1) {                                   \
      T *o = (T *)p[0];                                                     \
      const uint8_t *b = (const uint8_t *)p[1];                             \
      for (int64_t i = 0; i < n; i++) o[i] = (T)(b[i] != 0);                \
      return;                                                               \
    }                                                                       \
    for (int64_t i = 0; i < n; i++)                                         \
      *(T *)(p[0] + i * s[0]) = *(const bool *)(p[1] + i * s[1]) ? 1 : 0;   \
  }
CAST_LOOP(float)
CAST_LOOP(double)

typedef struct {
  const char *base;
  int64_t bstride[OF_MAX_DIMS];   /* bytes, 0 on broadcast dims (output's dims) */
  int kind;                       /* 0 direct contiguous, 1 scalar, 2 gather */
  /* a gathered operand that repeats with a period dividing BLOCK (a bias
   * broadcast over rows): every block gathers the same elements, so each
   * thread gathers them once */
  bool same_blocks;
} operand;

/* Whether o (kind 2) is contiguous over trailing dims of P elements, P
 * dividing BLOCK, and broadcast over the dims before them. */
static bool repeats_per_block(const operand *o, const int64_t *shape, int32_t ndim,
                              int32_t esize) {
  int64_t P = 1;
  int32_t d = ndim - 1;
  for (; d >= 0 && (shape[d] == 1 || o->bstride[d] == P * esize); d--) P *= shape[d];
  for (; d >= 0; d--)
    if (shape[d] != 1 && o->bstride[d] != 0) return false;
  return P > 0 && BLOCK % P == 0;
}

static void gather_block(const operand *op, const int64_t *shape, int32_t ndim, int64_t start,
                         int64_t len, char *dst, int32_t esize) {
  int64_t idx[OF_MAX_DIMS], off = 0, r = start;
  for (int32_t d = ndim - 1; d >= 0; d--) {
    idx[d] = shape[d] ? r % shape[d] : 0;
    r = shape[d] ? r / shape[d] : 0;
    off += idx[d] * op->bstride[d];
  }
  int32_t last = ndim - 1;
  /* a contiguous last dim (a bias broadcast over rows) goes a run at a time,
   * other operands an element at a time */
  bool runs = ndim > 0 && op->bstride[last] == esize;
  for (int64_t i = 0; i < len;) {
    int64_t run = runs ? shape[last] - idx[last] : 1;
    if (run > len - i) run = len - i;
    memcpy(dst + i * esize, op->base + off, (size_t)(run * esize));
    i += run;
    if (ndim == 0) continue;
    idx[last] += run;
    off += run * op->bstride[last];
    for (int32_t d = last; d > 0 && idx[d] == shape[d]; d--) {
      off -= idx[d] * op->bstride[d];
      idx[d] = 0;
      idx[d - 1]++;
      off += op->bstride[d - 1];
    }
  }
}

of_status of_fused_invoke(of_gnode *n, of_tensor **ins, void **outs) {
  const fused_prog *p = n->attrs;
  OF_CHECK(of_fused_check(p, n->attr_size, n->nin));
  of_dtype dt = p->dtype;
  int32_t es = of_dtype_size(dt);
  operand ops[FUSED_MAX_IN];
  /* The result's layout is the eager ops' (the same rule over the inputs;
   * the pass checked it against the recorded value). A
   * channels-last program runs over the dims in memory order (N, spatial...,
   * C): pshape and the operands' strides are permuted by perm, so the
   * blocks below walk the output's memory linearly either way. */
  bool cl = of_tensors_want_channels_last(ins, p->nin, p->shape, p->ndim);
  int32_t perm[OF_MAX_DIMS];
  int64_t pshape[OF_MAX_DIMS];
  for (int32_t d = 0; d < p->ndim; d++) perm[d] = cl ? (d == 0 ? 0 : d == p->ndim - 1 ? 1 : d + 1) : d;
  for (int32_t d = 0; d < p->ndim; d++) pshape[d] = p->shape[perm[d]];
  for (int32_t k = 0; k < p->nin; k++) {
    of_tensor *t = ins[k];
    if (!t || t->dtype != (p->in_bool[k] ? OF_BOOL : dt) || t->ndim > p->ndim)
      return of_fail(OF_ERR_ARG, "fused_elementwise: input %d does not match the program",
                     (int)k + 1);
    if (t->storage->device != OF_CPU)
      return of_fail(OF_ERR_DEVICE, "fused_elementwise: input %d is on %s; fused elementwise "
                     "nodes run on the CPU only (compile the graph on that device instead)",
                     (int)k + 1, OF_DEV_STR(t->storage->device));
    operand *o = &ops[k];
    o->base = of_ptr(t);
    bool same = t->ndim == p->ndim && (cl ? of_is_channels_last(t) : of_tensor_is_contiguous(t));
    int32_t lead = p->ndim - t->ndim;
    int64_t bs[OF_MAX_DIMS];
    for (int32_t d = 0; d < p->ndim; d++) {
      int64_t sz = d < lead ? 1 : t->shape[d - lead];
      if (sz != p->shape[d] && sz != 1)
        return of_fail(OF_ERR_SHAPE, "fused_elementwise: input %d %s does not broadcast to the "
                       "output", (int)k + 1, OF_SHAPE_STR(t));
      same = same && sz == p->shape[d];
      bs[d] = (d < lead || sz == 1) ? 0 : t->strides[d - lead] * of_dtype_size(t->dtype);
    }
    for (int32_t d = 0; d < p->ndim; d++) o->bstride[d] = bs[perm[d]];
    o->kind = same ? 0 : (t->numel == 1 ? 1 : 2);
    o->same_blocks = o->kind == 2 &&
                     repeats_per_block(o, pshape, p->ndim, p->in_bool[k] ? 1 : es);
  }
  of_tensor *res;
  if (p->into >= 0) {
    res = ins[p->into];
    bool fits = res->ndim == p->ndim && (cl ? of_is_channels_last(res) : of_tensor_is_contiguous(res));
    for (int32_t d = 0; fits && d < p->ndim; d++) fits = res->shape[d] == p->shape[d];
    if (!fits) return of_fail(OF_ERR_SHAPE, "fused_elementwise: cannot write into input %d",
                              (int)p->into + 1);
    of_tensor_retain(res);
  } else if (cl) {
    OF_CHECK(of_tensor_new_channels_last(p->shape, p->ndim, dt, OF_CPU, &res));
  } else {
    OF_CHECK(of_tensor_new(p->shape, p->ndim, dt, OF_CPU, &res));
  }
  int64_t total = res->numel;
  char *out = of_ptr(res);
  of_loop_fn fn[FUSED_MAX_OPS];
  for (int32_t i = 0; i < p->nops; i++) {
    const fused_inst *in = &p->ops[i];
    fn[i] = in->kind == FUSED_UNARY ? of_unary_kernel(in->op, dt)
            : in->kind == FUSED_BINARY ? of_binary_kernel(in->op, dt)
            : in->kind == FUSED_CLAMP ? of_clamp_kernel(dt)
            : in->kind == FUSED_CAST ? (dt == OF_FLOAT32 ? cast_bool_float : cast_bool_double)
            : of_leaky_kernel(dt);
  }
  int32_t res_es[FUSED_MAX_IN + 2 * FUSED_MAX_OPS];   /* element size per register */
  for (int32_t k = 0; k < p->nin; k++) res_es[k] = p->in_bool[k] ? 1 : es;
  for (int32_t c = 0; c < p->nconst; c++) res_es[p->nin + c] = es;
  for (int32_t i = 0; i < p->nops; i++) res_es[p->nin + p->nconst + i] = p->ops[i].out_bool ? 1 : es;
  double cval[FUSED_MAX_OPS];   /* constants in the compute dtype (as of_full stores them) */
  for (int32_t c = 0; c < p->nconst; c++) of_store_double(&cval[c], dt, p->consts[c]);
  int64_t nblocks = (total + BLOCK - 1) / BLOCK;
  int nt = of_threads();
  if (total < OF_PARALLEL_GRAIN) nt = 1;
  if (nt > nblocks) nt = (int)(nblocks ? nblocks : 1);
  int32_t ntemp = p->nops + p->nin;   /* a block buffer per instruction and gathered input */
  size_t per_thread = (size_t)ntemp * BLOCK * (size_t)es;
  char *scratch = malloc(per_thread * (size_t)nt + 64);
  if (!scratch) {
    of_tensor_release(res);
    return of_fail(OF_ERR_OOM, "fused_elementwise: out of memory");
  }
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int tid = omp_get_thread_num();
    char *mine = scratch + per_thread * (size_t)tid;
    char *ptr[FUSED_MAX_IN + 2 * FUSED_MAX_OPS];
    int64_t str[FUSED_MAX_IN + 2 * FUSED_MAX_OPS];
    int64_t b0 = nblocks * tid / nt, b1 = nblocks * (tid + 1) / nt;
    bool gathered[FUSED_MAX_IN] = {false};
    for (int64_t b = b0; b < b1; b++) {
      int64_t start = b * BLOCK, len = total - start < BLOCK ? total - start : BLOCK;
      for (int32_t k = 0; k < p->nin; k++) {
        const operand *o = &ops[k];
        int32_t kes = res_es[k];
        if (o->kind == 0) { ptr[k] = (char *)o->base + start * kes; str[k] = kes; }
        else if (o->kind == 1) { ptr[k] = (char *)o->base; str[k] = 0; }
        else {
          char *buf = mine + (size_t)(p->nops + k) * BLOCK * (size_t)es;
          if (!o->same_blocks || !gathered[k]) {
            /* a repeating operand: a whole block's worth, valid for every block */
            gather_block(o, pshape, p->ndim, o->same_blocks ? 0 : start,
                         o->same_blocks ? (total < BLOCK ? total : BLOCK) : len, buf, kes);
            gathered[k] = o->same_blocks;
          }
          ptr[k] = buf;
          str[k] = kes;
        }
      }
      for (int32_t c = 0; c < p->nconst; c++) {
        ptr[p->nin + c] = (char *)&cval[c];
        str[p->nin + c] = 0;
      }
      int32_t base = p->nin + p->nconst;
      for (int32_t i = 0; i < p->nops; i++) {
        const fused_inst *in = &p->ops[i];
        char *dst = i == p->nops - 1 ? out + start * es : mine + (size_t)i * BLOCK * (size_t)es;
        int32_t oes = res_es[base + i];
        ptr[base + i] = dst;
        str[base + i] = oes;
        char *pp[3] = {dst, ptr[in->a], in->kind == FUSED_BINARY ? ptr[in->b] : NULL};
        int64_t ss[3] = {oes, str[in->a], in->kind == FUSED_BINARY ? str[in->b] : 0};
        of_ew_ctx ctx = {.p0 = in->p0, .p1 = in->p1,
                         .op = in->kind == FUSED_UNARY ? in->op : 0};   /* GELU / SiLU's fast loop */
        fn[i](pp, ss, len, &ctx);
      }
    }
  }
  free(scratch);
  of_bump_version(res);
  outs[0] = res;
  return OF_OK;
}
