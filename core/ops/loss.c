/* loss.c -- cross_entropy (fused with a numerically stable log_softmax) and
 * nll_loss, forward and backward, with PyTorch's semantics:
 *
 *   logits x [N, C, *] (or [C] unbatched), viewed as [N, C, S]; one sample
 *   per (n, s). With class weights w, smoothing eps and target class t:
 *     loss = -(1 - eps) w[t] logp[t] - eps / C * sum_c w[c] logp[c]
 *   (0 for an ignored target). With class probabilities q:
 *     loss = -sum_c w[c] ((1 - eps) q[c] + eps / C) logp[c].
 *   'mean' divides by the summed w[t] of the targets not ignored (class
 *   indices) or by the number of samples (probabilities).
 *
 * The grad w.r.t. the logits is s * (A p - a) with p = softmax(x), a the
 * per-class coefficients above and A their sum, s the per-sample scale. Under
 * create_graph the same formula is composed from public ops (softmax
 * included), so double backward is exact. Targets are range-checked before
 * anything is computed. */
#include "../autograd.h"
#include "../device.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "family.h"
#include "rowk.h"

static int32_t nthreads(int64_t work) {
  int32_t nt = of_threads();
  if (nt <= 1 || work < OF_PARALLEL_GRAIN) return 1;
  int64_t cap = work / (OF_PARALLEL_GRAIN / 4);
  return cap < nt ? (int32_t)cap : nt;
}

static void release_all(of_tensor **ts, int32_t n) {
  for (int32_t i = 0; i < n; i++) of_tensor_release(ts[i]);
}

/* ------------------------------------------------------------ arguments */

typedef struct {
  int64_t N, C, S;
  bool batched;
  int64_t sshape[OF_MAX_DIMS];   /* per-sample shape: [N, *] or [] */
  int32_t snd;
} layout;

static of_status parse_input(const char *op, const of_meta *x, layout *l) {
  if (!of_dtype_is_floating(x->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: expected floating point input, got %s (shape %s)", op,
                   OF_DT(x), OF_SHAPE_STR(x));
  if (x->ndim < 1)
    return of_fail(OF_ERR_SHAPE, "%s: expected input [N, C, *] or [C], got a 0-d tensor (%s)",
                   op, OF_DT(x));
  l->batched = x->ndim > 1;
  l->N = l->batched ? x->shape[0] : 1;
  l->C = x->shape[l->batched ? 1 : 0];
  l->S = 1;
  l->snd = 0;
  if (l->batched) {
    l->sshape[l->snd++] = x->shape[0];
    for (int32_t d = 2; d < x->ndim; d++) l->S *= (l->sshape[l->snd++] = x->shape[d]);
  }
  if (l->C < 1)
    return of_fail(OF_ERR_SHAPE, "%s: expected at least one class, got input %s (%s)", op,
                   OF_SHAPE_STR(x), OF_DT(x));
  return OF_OK;
}

static of_status check_reduction(const char *op, of_loss_reduction r) {
  if (r < OF_LOSS_NONE || r > OF_LOSS_SUM)
    return of_fail(OF_ERR_ARG, "%s: unknown reduction %d (0 none, 1 mean, 2 sum)", op, (int)r);
  return OF_OK;
}

/* weight [C] -> contiguous doubles (NULL stays NULL) */
/* N, C, S of an input known only by its recorded meta (in backward). */
static layout layout_of_meta(const of_meta *xm) {
  layout l = {.batched = xm->ndim > 1};
  l.N = l.batched ? xm->shape[0] : 1;
  l.C = xm->shape[l.batched ? 1 : 0];
  l.S = 1;
  for (int32_t d = 2; d < xm->ndim; d++) l.S *= xm->shape[d];
  return l;
}

/* weight (ndim -1: absent): floating point, one per class */
static of_status check_weight(const char *op, const of_meta *w, const layout *l,
                              const of_meta *x) {
  if (w->ndim < 0) return OF_OK;
  char b[96];
  if (!of_dtype_is_floating(w->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: weight must be floating point, got %s (shape %s)", op,
                   OF_DT(w), OF_SHAPE_STR(w));
  if (w->ndim != 1 || w->shape[0] != l->C)
    return of_fail(OF_ERR_SHAPE, "%s: weight of shape %s should be [%lld], one per class of "
                   "the input %s", op, OF_SHAPE_STR(w), (long long)l->C,
                   of_shape_str(x->shape, x->ndim, b, 96));
  return OF_OK;
}

/* weight [C] -> contiguous doubles (NULL stays NULL); loss_plan checked it */
static of_status parse_weight(of_tensor *w, of_tensor **out) {
  *out = NULL;
  return w ? of_dense(w, OF_FLOAT64, out) : OF_OK;
}

/* Class-index target: integer, shaped like the samples (its values are
 * checked by parse_class_target or the device kernel) */
static of_status check_class_target(const char *op, const of_meta *t, const layout *l,
                                    const of_meta *x) {
  char b1[96], b2[96];
  if (!of_dtype_is_int(t->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: target must hold integer class indices (int64), got %s "
                   "(shape %s)", op, OF_DT(t), OF_SHAPE_STR(t));
  bool same = t->ndim == l->snd;
  for (int32_t d = 0; same && d < l->snd; d++) same = t->shape[d] == l->sshape[d];
  if (!same)
    return of_fail(OF_ERR_SHAPE, "%s: expected target of shape %s for input %s (class "
                   "indices), got %s", op, of_shape_str(l->sshape, l->snd, b1, 96),
                   of_shape_str(x->shape, x->ndim, b2, 96), OF_SHAPE_STR(t));
  return OF_OK;
}

/* every value of a class target a class or ignore_index (loss_plan checked
 * its dtype and shape) -> contiguous int64 */
static of_status parse_class_target(const char *op, of_tensor *t, const layout *l,
                                    int64_t ignore, int64_t base, of_tensor **out) {
  char b1[96];
  OF_CHECK(of_dense(t, OF_INT64, out));
  const int64_t *tv = of_tensor_data(*out);
  for (int64_t i = 0; i < (*out)->numel; i++) {
    int64_t c = tv[i] - base;
    if (tv[i] != ignore && (c < 0 || c >= l->C)) {
      of_tensor_release(*out);
      *out = NULL;
      snprintf(b1, sizeof b1, "%s", base == 1 ? "1-based: " : "");
      return of_fail(OF_ERR_INDEX, "%s: target %lld out of range for %lld classes (%sexpected "
                     "%lld..%lld)", op, (long long)tv[i], (long long)l->C, b1, (long long)base,
                     (long long)(base + l->C - 1));
    }
  }
  return OF_OK;
}

/* Every check a loss makes on its inputs' shapes and dtypes before it reads
 * a value, its layout l, whether the target holds class probabilities
 * (cross_entropy's floating targets) and its result y: the per-sample losses
 * for 'none', else a scalar, in x's dtype. What the bodies run first and a
 * loaded graph's node is re-inferred with (infer_loss); w->ndim -1: no weight */
static of_status loss_plan(const char *op, bool ce, const of_meta *x, const of_meta *t,
                           const of_meta *w, int32_t reduction, double smoothing, layout *l,
                           bool *prob, of_meta *y) {
  OF_CHECK(parse_input(op, x, l));
  OF_CHECK(check_reduction(op, (of_loss_reduction)reduction));
  *prob = false;
  if (ce) {
    if (!(smoothing >= 0 && smoothing <= 1))
      return of_fail(OF_ERR_ARG, "%s: label_smoothing must be between 0 and 1, got %g", op,
                     smoothing);
    *prob = of_dtype_is_floating(t->dtype);
  }
  if (*prob) {
    bool same = t->ndim == x->ndim;
    for (int32_t d = 0; same && d < x->ndim; d++) same = t->shape[d] == x->shape[d];
    char b[96];
    if (!same)
      return of_fail(OF_ERR_SHAPE, "%s: a floating target holds class probabilities and must "
                     "have the input's shape %s, got %s (%s); class indices must be int64",
                     op, of_shape_str(x->shape, x->ndim, b, 96), OF_SHAPE_STR(t), OF_DT(t));
  }
  OF_CHECK(check_weight(op, w, l, x));
  if (!*prob) OF_CHECK(check_class_target(op, t, l, x));
  y->dtype = x->dtype;
  y->ndim = reduction == OF_LOSS_NONE ? l->snd : 0;
  memcpy(y->shape, l->sshape, sizeof(int64_t) * (size_t)y->ndim);
  return OF_OK;
}

/* ------------------------------------------------------------ kernels */

typedef struct {
  int64_t N, C, S, ignore, base;
  double eps, wsum;        /* label smoothing; sum of the class weights (C if none) */
  const int64_t *t;        /* class targets, or NULL */
  const double *w;         /* class weights, or NULL */
} ce_args;

/* exp in the input's precision (float32 logits: expf, vectorisable) */
#define EXP_float(v) ((double)expf((float)(v)))
#define EXP_double(v) exp(v)
/* float32 rows go to the vector kernels of rowk.c */
#define ROWK_float 1
#define ROWK_double 0

#define CE_KERNELS(T)                                                                     \
  /* lse[i], loss[i], wt[i] (the sample's weight in the mean) per sample */               \
  static void ce_fwd_##T(const ce_args *a, const T *x, const T *q, double *lse,           \
                         double *loss, double *wt) {                                      \
    int64_t C = a->C, S = a->S, ns = a->N * S;                                            \
    int32_t nt = nthreads(ns * C * 4);                                                    \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t i = 0; i < ns; i++) {                                                    \
      int64_t base = (i / S) * C * S + i % S;                                             \
      const T *xi = x + base;                                                             \
      double l, v = 0;                                                                    \
      if (S == 1 && ROWK_##T) {   /* a contiguous row: the vector kernel (rowk.c) */      \
        l = of_rowk_logsumexp_row(OF_FLOAT32, xi, C, i + 1 < ns ? xi + C : NULL);         \
      } else {                                                                            \
        double m = -INFINITY, se = 0;                                                     \
        for (int64_t c = 0; c < C; c++) m = fmax(m, (double)xi[c * S]);                   \
        if (m == -INFINITY) m = 0;                                                        \
        for (int64_t c = 0; c < C; c++) se += EXP_##T((double)xi[c * S] - m);             \
        l = m + log(se);                                                                  \
      }                                                                                   \
      lse[i] = l;                                                                         \
      if (q) {                                                                            \
        const T *qi = q + base;                                                           \
        for (int64_t c = 0; c < C; c++)                                                   \
          v -= (a->w ? a->w[c] : 1.0) * ((1 - a->eps) * (double)qi[c * S] + a->eps / C) * \
               ((double)xi[c * S] - l);                                                   \
        wt[i] = 1;                                                                        \
      } else if (a->t[i] == a->ignore) {                                                  \
        wt[i] = 0;                                                                        \
      } else {                                                                            \
        int64_t ct = a->t[i] - a->base;                                                   \
        double wc = a->w ? a->w[ct] : 1.0;                                                \
        v = -(1 - a->eps) * wc * ((double)xi[ct * S] - l);                                \
        if (a->eps > 0) {                                                                 \
          double sm = 0;                                                                  \
          for (int64_t c = 0; c < C; c++)                                                 \
            sm += (a->w ? a->w[c] : 1.0) * ((double)xi[c * S] - l);                       \
          v -= a->eps / C * sm;                                                           \
        }                                                                                 \
        wt[i] = wc;                                                                       \
      }                                                                                   \
      loss[i] = v;                                                                        \
    }                                                                                     \
  }                                                                                       \
  /* gx = s (A p - a); gq (probabilities) = -s (1 - eps) w logp. s: per-sample scale */   \
  static void ce_bwd_##T(const ce_args *a, const T *x, const T *q, const double *lse,     \
                         const double *s, T *gx, T *gq) {                                 \
    int64_t C = a->C, S = a->S, ns = a->N * S;                                            \
    int32_t nt = nthreads(ns * C * 4);                                                    \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t i = 0; i < ns; i++) {                                                    \
      int64_t base = (i / S) * C * S + i % S;                                             \
      const T *xi = x + base;                                                             \
      double l = lse[i], si = s[i];                                                       \
      if (q) {                                                                            \
        const T *qi = q + base;                                                           \
        double A = 0;                                                                     \
        for (int64_t c = 0; c < C; c++)                                                   \
          A += (a->w ? a->w[c] : 1.0) * ((1 - a->eps) * (double)qi[c * S] + a->eps / C);  \
        for (int64_t c = 0; c < C; c++) {                                                 \
          double wc = a->w ? a->w[c] : 1.0, lp = (double)xi[c * S] - l;                   \
          double ac = wc * ((1 - a->eps) * (double)qi[c * S] + a->eps / C);               \
          if (gx) gx[base + c * S] = (T)(si * (A * EXP_##T(lp) - ac));                    \
          if (gq) gq[base + c * S] = (T)(-si * (1 - a->eps) * wc * lp);                   \
        }                                                                                 \
        continue;                                                                         \
      }                                                                                   \
      if (a->t[i] == a->ignore) {                                                         \
        for (int64_t c = 0; c < C; c++) gx[base + c * S] = 0;                             \
        continue;                                                                         \
      }                                                                                   \
      int64_t ct = a->t[i] - a->base;                                                     \
      double wt = a->w ? a->w[ct] : 1.0;                                                  \
      double A = (1 - a->eps) * wt + a->eps / C * a->wsum;                                \
      if (S == 1 && ROWK_##T && !a->w) {   /* gx = s A p - s eps / C, less at ct */       \
        of_rowk_exp_affine_row(OF_FLOAT32, xi, gx + base, C, l, si * A, si * a->eps / C); \
        gx[base + ct] = (T)((double)gx[base + ct] - si * (1 - a->eps) * wt);              \
        continue;                                                                         \
      }                                                                                   \
      for (int64_t c = 0; c < C; c++) {                                                   \
        double ac = a->eps / C * (a->w ? a->w[c] : 1.0) + (c == ct ? (1 - a->eps) * wt : 0); \
        gx[base + c * S] = (T)(si * (A * EXP_##T((double)xi[c * S] - l) - ac));           \
      }                                                                                   \
    }                                                                                     \
  }

CE_KERNELS(float)
CE_KERNELS(double)

/* Per-sample scale of the output grad g: g[i] ('none'), g / denom ('mean'), g. */
static of_status sample_scales(of_tensor *g, int32_t red, double denom, int64_t ns,
                               double **out) {
  double *s = malloc(sizeof(double) * (size_t)(ns + 1));
  if (!s) return of_fail(OF_ERR_OOM, "loss backward: out of memory");
  if (red == OF_LOSS_NONE) {
    of_tensor *gd;
    of_status st = of_dense(g, OF_FLOAT64, &gd);
    if (st != OF_OK) {
      free(s);
      return st;
    }
    memcpy(s, of_tensor_data(gd), sizeof(double) * (size_t)ns);
    of_tensor_release(gd);
  } else {
    double gv;
    OF_CHECK(of_tensor_get_flat(g, 0, &gv));
    if (red == OF_LOSS_MEAN) gv /= denom;
    for (int64_t i = 0; i < ns; i++) s[i] = gv;
  }
  *out = s;
  return OF_OK;
}

/* The loss from per-sample values: [samples] for 'none', else a scalar. */
static of_status reduce_losses(const layout *l, int32_t red, const double *loss,
                               const double *wt, bool prob, of_dtype dt, double *denom,
                               of_tensor **out) {
  int64_t ns = l->N * l->S;
  double sum = 0, wsum = 0;
  for (int64_t i = 0; i < ns; i++) sum += loss[i], wsum += wt[i];
  *denom = prob ? (double)ns : wsum;
  if (red == OF_LOSS_NONE) {
    of_tensor *y;
    OF_CHECK(of_from_doubles(loss, l->sshape, l->snd, OF_FLOAT64, &y));
    return of_finish_dtype(y, dt, out);
  }
  double v = red == OF_LOSS_SUM ? sum : sum / *denom;
  return of_from_doubles(&v, NULL, 0, dt, out);
}

/* ------------------------------------------------------------ the node
 * A loss node keeps its op's a_loss record (reduction, ignore_index,
 * index_base, label smoothing -- 0 for nll_loss); n->attr_op says which op.
 * The rest is recomputed from the node: whether the target holds class
 * probabilities (its dtype), whether a weight was given (its meta), and the
 * sum of the weights and the 'mean' denominator (from the saved target and
 * weight, summed in the forward's order, so they are the same doubles). */
static void keep_loss(of_node *n, int32_t op, of_loss_reduction red, int64_t ignore,
                      double smoothing, int64_t base) {
  a_loss a;
  OF_ZERO(a);
  a.reduction = red;
  a.ignore = ignore;
  a.smoothing = smoothing;
  a.base = base;
  OF_NODE_KEEP(n, op, a);
}

/* the target holds class probabilities (floating), not class indices */
static bool node_prob(const of_node *n) { return of_dtype_is_floating(n->in_meta[1].dtype); }

/* a weight was given: an absent input's meta is zeroed, a weight is [C] */
static bool node_has_weight(const of_node *n) { return n->in_meta[2].ndim > 0; }

/* on a device, the 'mean' denominator is a saved device scalar for class
 * targets (see dev_reduce) */
static bool node_has_den(const of_node *n) {
  return OF_NODE_ATTRS(a_loss, n)->reduction == OF_LOSS_MEAN && !node_prob(n);
}

/* sum of the class weights w (float64 [C]), C without weights */
static double weight_sum(const double *w, int64_t C) {
  if (!w) return (double)C;
  double s = 0;
  for (int64_t c = 0; c < C; c++) s += w[c];
  return s;
}

/* 'mean' denominator of class targets t (int64 [ns]): the summed weight of
 * the samples not ignored, as reduce_losses sums it */
static double target_weight_sum(const int64_t *t, const double *w, int64_t ns, int64_t ignore,
                                int64_t base) {
  double s = 0;
  for (int64_t i = 0; i < ns; i++) s += t[i] == ignore ? 0 : (w ? w[t[i] - base] : 1.0);
  return s;
}

/* ------------------------------------------------------------ composite backward */

/* Scope helpers: each runs one op and keeps its result in the scope. */
static of_tensor *s_unsqueeze(of_scope *s, of_tensor *x, int32_t dim) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_unsqueeze(x, dim, &r);
  return of_s_keep(s, st, r);
}
static of_tensor *s_reshape(of_scope *s, of_tensor *x, const int64_t *shape, int32_t nd) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_reshape(x, shape, nd, &r);
  return of_s_keep(s, st, r);
}
static of_tensor *s_cast(of_scope *s, of_tensor *x, of_dtype dt) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_to_dtype(x, dt, &r);
  return of_s_keep(s, st, r);
}
static of_tensor *s_sum_keep(of_scope *s, of_tensor *x, int32_t dim) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_reduce(OF_RED_SUM, x, &dim, 1, 1, 0, -1, &r);
  return of_s_keep(s, st, r);
}
static of_tensor *s_softmax(of_scope *s, of_tensor *x, int32_t dim, int32_t log_) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_softmax(x, dim, log_, &r);
  return of_s_keep(s, st, r);
}
/* A constant tensor (no history) from doubles. */
static of_tensor *s_const(of_scope *s, const double *v, const int64_t *shape, int32_t nd,
                          of_dtype dt) {
  if (s->st != OF_OK) return NULL;
  of_tensor *r = NULL;
  of_status st = of_from_doubles(v, shape, nd, dt, &r);
  return of_s_keep(s, st, r);
}

/* g shaped to broadcast against the logits, times `scale` */
static of_tensor *s_grad_scale(of_scope *s, of_tensor *g, const layout *l, int32_t red,
                               double scale) {
  of_tensor *r = red == OF_LOSS_NONE && l->batched ? s_unsqueeze(s, g, 1) : g;
  return scale == 1 ? r : of_s_bins(s, OF_MUL, r, scale);
}

/* ------------------------------------------------------------ on a device
 * The kernels of cuda/nn.cu compute the per-sample values and check the
 * class targets (an out-of-range one raises the device's bad-input flag,
 * reported at the next synchronising call); the reductions and the 'mean'
 * denominator stay on the device. Nothing is read back to the host, so a
 * CUDA graph can capture the forward and the backward. */

static of_status dev_ops(const char *op, of_tensor *x, const of_device_ops **o) {
  *o = of_device_ops_for(op, of_dev(x));
  if (!*o) return OF_ERR_DEVICE;
  of_device_last_op = op;
  return OF_OK;
}

/* class targets as int64 on x's device; their range is checked by the kernel */
static of_status dev_class_target(of_tensor *t, const of_tensor *x, of_tensor **out) {
  if (of_dev(t) == of_dev(x)) return of_dense(t, OF_INT64, out);
  of_tensor *m = NULL;
  OF_CHECK(of_to_device(t, of_dev(x), 0, &m));
  of_status st = of_dense(m, OF_INT64, out);
  of_tensor_release(m);
  return st;
}

/* weight as float64 on the device; wsum is the class count without weights,
 * 0 with them (the kernels sum the weights themselves, see of_loss_desc) */
static of_status dev_weight(of_tensor *weight, const layout *l, of_tensor **w, double *wsum) {
  OF_CHECK(parse_weight(weight, w));
  *wsum = *w ? 0 : (double)l->C;
  return OF_OK;
}

/* the loss from per-sample values on the device; *denom: the 'mean'
 * denominator of class targets (the sum of the sample weights, a float64
 * scalar on the device), NULL where it is the sample count */
static of_status dev_reduce(const layout *l, int32_t red, of_tensor *loss, of_tensor *wt,
                            bool prob, of_dtype dt, of_tensor **denom, of_tensor **out) {
  *denom = NULL;
  if (red == OF_LOSS_NONE) {
    of_tensor *r = NULL;
    OF_CHECK(of_reshape(loss, l->sshape, l->snd, &r));
    of_status st = of_cast_data(r, dt, out);
    of_tensor_release(r);
    return st;
  }
  of_tensor *sum = NULL, *ws = NULL, *m = NULL;
  of_status st = of_reduce(OF_RED_SUM, loss, NULL, 0, 0, 0, -1, &sum);
  if (st == OF_OK && red == OF_LOSS_MEAN) {
    if (prob) {
      st = of_binary_scalar(OF_DIV, sum, (double)(l->N * l->S), 0, NULL, &m);
    } else {
      st = of_reduce(OF_RED_SUM, wt, NULL, 0, 0, 0, -1, &ws);
      if (st == OF_OK) st = of_binary(OF_DIV, sum, ws, NULL, &m);
    }
  }
  if (st == OF_OK) st = of_cast_data(m ? m : sum, dt, out);
  if (st == OF_OK) {
    *denom = ws;
    ws = NULL;
  }
  of_tensor_release(sum);
  of_tensor_release(ws);
  of_tensor_release(m);
  return st;
}

/* per-sample scale of the output grad, float64 [N*S] on the device; denom:
 * the device scalar of dev_reduce, or NULL for the sample count */
static of_status dev_scales(of_tensor *g, int32_t red, of_tensor *denom, int64_t ns,
                            of_tensor **out) {
  of_tensor *d = NULL, *q = NULL, *e = NULL;
  OF_CHECK(of_dense(g, OF_FLOAT64, &d));
  of_status st;
  if (red == OF_LOSS_NONE) {
    st = of_reshape(d, &ns, 1, out);
    of_tensor_release(d);
    return st;
  }
  if (red != OF_LOSS_MEAN) {
    q = d;
    d = NULL;
    st = OF_OK;
  } else if (denom) st = of_binary(OF_DIV, d, denom, NULL, &q);
  else st = of_binary_scalar(OF_DIV, d, (double)ns, 0, NULL, &q);
  if (st == OF_OK) st = of_expand(q, &ns, 1, &e);
  if (st == OF_OK) st = of_dense(e, OF_FLOAT64, out);
  of_tensor_release(d);
  of_tensor_release(q);
  of_tensor_release(e);
  return st;
}

static of_status ce_dev_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def ce_dev_grad = {"CrossEntropyBackward", ce_dev_backward};

/* node: the a_loss record; saved: 0 logits, 1 target (int64 on the device,
 * or the probabilities), 2 weight (float64), 3 lse, 4 the 'mean' denominator
 * of class targets (a device scalar, where node_has_den) */
static of_status ce_dev_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  if (n->needs[2])
    return of_fail(OF_ERR_STATE, "cross_entropy: the derivative for 'weight' is not "
                   "implemented; detach the class weights");
  const a_loss *a = OF_NODE_ATTRS(a_loss, n);
  bool prob = node_prob(n), has_w = node_has_weight(n);
  of_tensor *sv[4] = {NULL, NULL, NULL, NULL}, *tmp[5] = {NULL, NULL, NULL, NULL, NULL};
  of_status st = OF_OK;
  of_tensor *den = NULL;
  for (int32_t k = 0; k < 4 && st == OF_OK; k++)
    if (k != 2 || has_w) st = of_node_saved(n, k, &sv[k]);
  if (st == OF_OK && node_has_den(n)) st = of_node_saved(n, 4, &den);
  if (st != OF_OK) goto done;
  of_tensor *x = sv[0], *t = sv[1];
  if (of_is_grad_enabled() &&
      (g[0]->requires_grad || x->requires_grad || (prob && t->requires_grad))) {
    st = of_fail(OF_ERR_DEVICE, "cross_entropy: double backward (create_graph) is not "
                 "implemented on %s yet; compute it on the CPU", OF_DEV_STR(of_dev(x)));
    goto done;
  }
  layout l;
  of_meta xm = of_meta_of(x);
  st = parse_input("cross_entropy", &xm, &l);
  const of_device_ops *o = NULL;
  if (st == OF_OK) st = dev_ops("cross_entropy_backward", x, &o);
  of_dtype cd = of_compute_dtype(x->dtype);
  if (st == OF_OK) st = of_dense(x, cd, &tmp[0]);
  if (st == OF_OK && prob) st = of_dense(t, cd, &tmp[1]);
  if (st == OF_OK) st = dev_scales(g[0], a->reduction, den, l.N * l.S, &tmp[2]);
  if (st == OF_OK) st = of_tensor_new(x->shape, x->ndim, cd, of_dev(x), &tmp[3]);
  if (st == OF_OK && prob && n->needs[1])
    st = of_tensor_new(x->shape, x->ndim, cd, of_dev(x), &tmp[4]);
  if (st != OF_OK) goto done;
  /* wsum as dev_weight: the class count, 0 with weights */
  of_loss_desc d = {l.N, l.C, l.S, a->ignore, a->base, a->smoothing,
                    has_w ? 0 : (double)l.C};
  st = o->cross_entropy_back(&d, tmp[0], prob ? NULL : t, prob ? tmp[1] : NULL, sv[2], sv[3],
                             tmp[2], tmp[3], tmp[4]);
  if (st == OF_OK && n->needs[0]) {
    st = of_finish_dtype(tmp[3], n->in_meta[0].dtype, &gi[0]);
    tmp[3] = NULL;
  }
  if (st == OF_OK && tmp[4]) {
    st = of_finish_dtype(tmp[4], n->in_meta[1].dtype, &gi[1]);
    tmp[4] = NULL;
  }
done:
  of_tensor_release(den);
  release_all(sv, 4);
  release_all(tmp, 5);
  return st;
}

static of_status ce_device(of_tensor *x, of_tensor *target, of_tensor *weight,
                           of_loss_reduction reduction, int64_t ignore_index,
                           double label_smoothing, int64_t index_base, const layout *l, bool prob,
                           of_tensor **out) {
  const char *op = "cross_entropy";
  const of_device_ops *o;
  OF_CHECK(dev_ops(op, x, &o));
  of_dtype cd = of_compute_dtype(x->dtype);
  of_device dev = of_dev(x);
  int64_t ns = l->N * l->S;
  double wsum = 0;
  of_tensor *w = NULL, *t = NULL, *xc = NULL, *lse = NULL, *loss = NULL, *wt = NULL, *den = NULL;
  of_status st = dev_weight(weight, l, &w, &wsum);
  if (st == OF_OK) st = prob ? of_dense(target, cd, &t) : dev_class_target(target, x, &t);
  if (st == OF_OK) st = of_dense(x, cd, &xc);
  if (st == OF_OK) st = of_tensor_new(&ns, 1, OF_FLOAT64, dev, &lse);
  if (st == OF_OK) st = of_tensor_new(&ns, 1, OF_FLOAT64, dev, &loss);
  if (st == OF_OK) st = of_tensor_new(&ns, 1, OF_FLOAT64, dev, &wt);
  of_loss_desc d = {l->N, l->C, l->S, ignore_index, index_base, label_smoothing, wsum};
  if (st == OF_OK)
    st = o->cross_entropy(&d, xc, prob ? NULL : t, prob ? t : NULL, w, lse, loss, wt);
  if (st == OF_OK) st = dev_reduce(l, reduction, loss, wt, prob, x->dtype, &den, out);
  of_tensor *ins[3] = {x, target, weight};
  if (st == OF_OK && of_grad_needed(ins, 3)) {
    of_node *n;
    st = of_record(&ce_dev_grad, ins, 3, out, 1, &n);
    if (st != OF_OK) {
      of_tensor_release(*out);
      *out = NULL;
    } else {
      keep_loss(n, OPK_CROSS_ENTROPY, reduction, ignore_index, label_smoothing, index_base);
      of_node_save(n, 0, x);
      of_node_save(n, 1, prob ? target : t);
      of_node_save(n, 2, w);
      of_node_save(n, 3, lse);
      of_node_save(n, 4, den);
    }
  }
  of_tensor *rel[7] = {w, t, xc, lse, loss, wt, den};
  release_all(rel, 7);
  return st;
}

static of_status nll_dev_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def nll_dev_grad = {"NllLossBackward", nll_dev_backward};

/* node: the a_loss record; saved: 0 target (int64 on the device), 1 weight
 * (float64), 2 the 'mean' denominator (a device scalar, where node_has_den) */
static of_status nll_dev_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0] || !n->needs[0]) return OF_OK;
  if (n->needs[2])
    return of_fail(OF_ERR_STATE, "nll_loss: the derivative for 'weight' is not implemented; "
                   "detach the class weights");
  const a_loss *a = OF_NODE_ATTRS(a_loss, n);
  const of_meta *xm = &n->in_meta[0];
  layout l = layout_of_meta(xm);
  of_tensor *t = NULL, *w = NULL, *sc = NULL, *gx = NULL, *den = NULL;
  const of_device_ops *o = NULL;
  of_status st = of_node_saved(n, 0, &t);
  if (st == OF_OK && node_has_weight(n)) st = of_node_saved(n, 1, &w);
  if (st == OF_OK && node_has_den(n)) st = of_node_saved(n, 2, &den);
  if (st == OF_OK && of_is_grad_enabled() && g[0]->requires_grad)
    st = of_fail(OF_ERR_DEVICE, "nll_loss: double backward (create_graph) is not implemented "
                 "on %s yet; compute it on the CPU", OF_DEV_STR(of_dev(t)));
  if (st == OF_OK) st = dev_ops("nll_loss_backward", t, &o);
  of_dtype cd = of_compute_dtype(xm->dtype);
  if (st == OF_OK) st = dev_scales(g[0], a->reduction, den, l.N * l.S, &sc);
  if (st == OF_OK) st = of_tensor_new(xm->shape, xm->ndim, cd, of_dev(t), &gx);
  of_loss_desc d = {l.N, l.C, l.S, a->ignore, a->base, 0, 0};
  if (st == OF_OK) st = o->nll_loss_back(&d, t, w, sc, gx);
  if (st == OF_OK) {
    st = of_finish_dtype(gx, xm->dtype, &gi[0]);
    gx = NULL;
  }
  of_tensor *rel[5] = {t, w, sc, gx, den};
  release_all(rel, 5);
  return st;
}

static of_status nll_device(of_tensor *x, of_tensor *target, of_tensor *weight,
                            of_loss_reduction reduction, int64_t ignore_index, int64_t index_base,
                            const layout *l, of_tensor **out) {
  const char *op = "nll_loss";
  const of_device_ops *o;
  OF_CHECK(dev_ops(op, x, &o));
  of_device dev = of_dev(x);
  int64_t ns = l->N * l->S;
  double wsum = 0;
  of_tensor *w = NULL, *t = NULL, *xc = NULL, *loss = NULL, *wt = NULL, *den = NULL;
  of_status st = dev_weight(weight, l, &w, &wsum);
  if (st == OF_OK) st = dev_class_target(target, x, &t);
  if (st == OF_OK) st = of_dense(x, of_compute_dtype(x->dtype), &xc);
  if (st == OF_OK) st = of_tensor_new(&ns, 1, OF_FLOAT64, dev, &loss);
  if (st == OF_OK) st = of_tensor_new(&ns, 1, OF_FLOAT64, dev, &wt);
  of_loss_desc d = {l->N, l->C, l->S, ignore_index, index_base, 0, wsum};
  if (st == OF_OK) st = o->nll_loss(&d, xc, t, w, loss, wt);
  if (st == OF_OK) st = dev_reduce(l, reduction, loss, wt, false, x->dtype, &den, out);
  of_tensor *ins[3] = {x, target, weight};
  if (st == OF_OK && of_grad_needed(ins, 3)) {
    of_node *n;
    st = of_record(&nll_dev_grad, ins, 3, out, 1, &n);
    if (st != OF_OK) {
      of_tensor_release(*out);
      *out = NULL;
    } else {
      keep_loss(n, OPK_NLL_LOSS, reduction, ignore_index, 0, index_base);
      of_node_save(n, 0, t);
      of_node_save(n, 1, w);
      of_node_save(n, 2, den);
    }
  }
  of_tensor *rel[6] = {w, t, xc, loss, wt, den};
  release_all(rel, 6);
  return st;
}

/* ------------------------------------------------------------ cross_entropy */

static of_status ce_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def ce_grad = {"CrossEntropyBackward", ce_backward};

/* node: the a_loss record. saved: 0 logits, 1 target, 2 weight, 3 lse
 * (double). denom: the 'mean' denominator; wsum: the sum of the weights. */
static of_status ce_composite(of_node *n, double denom, double wsum, of_tensor *g, of_tensor *x,
                              of_tensor *t, of_tensor *w, const layout *l, of_tensor **gi) {
  of_scope s = {0};
  const a_loss *ra = OF_NODE_ATTRS(a_loss, n);
  int32_t red = ra->reduction, cdim = l->batched ? 1 : 0;
  bool prob = node_prob(n);
  double eps = ra->smoothing, C = (double)l->C;
  of_tensor *wb = NULL, *a = NULL, *A = NULL;
  if (w) {   /* [C] -> [1, C, 1, ...] when batched, in the logits' dtype */
    int64_t shape[OF_MAX_DIMS];
    for (int32_t d = 0; d < x->ndim; d++) shape[d] = d == cdim ? l->C : 1;
    wb = s_cast(&s, s_reshape(&s, w, shape, x->ndim), x->dtype);
  }
  double scale = red == OF_LOSS_MEAN ? 1.0 / denom : 1.0;
  of_tensor *gs = s_grad_scale(&s, g, l, red, scale);
  if (prob) {
    a = of_s_bins(&s, OF_ADD, of_s_bins(&s, OF_MUL, t, 1 - eps), eps / C);
    if (wb) a = of_s_bin(&s, OF_MUL, a, wb);
    A = s_sum_keep(&s, a, cdim);
  } else if (s.st == OF_OK) {
    /* constant coefficients from the class targets */
    int64_t ns = l->N * l->S, ashape[OF_MAX_DIMS];
    double *av = calloc((size_t)(ns * l->C + 1), sizeof(double));
    double *Av = calloc((size_t)(ns + 1), sizeof(double));
    const int64_t *tv = of_tensor_data(t);
    const double *wv = w ? of_tensor_data(w) : NULL;
    if (!av || !Av) s.st = of_fail(OF_ERR_OOM, "cross_entropy backward: out of memory");
    for (int64_t i = 0; s.st == OF_OK && i < ns; i++) {
      if (tv[i] == ra->ignore) continue;
      int64_t ct = tv[i] - ra->base, b = (i / l->S) * l->C * l->S + i % l->S;
      double wt = wv ? wv[ct] : 1.0;
      for (int64_t c = 0; c < l->C; c++) av[b + c * l->S] = eps / C * (wv ? wv[c] : 1.0);
      av[b + ct * l->S] += (1 - eps) * wt;
      Av[i] = (1 - eps) * wt + eps / C * wsum;
    }
    for (int32_t d = 0; d < x->ndim; d++) ashape[d] = d == cdim ? 1 : x->shape[d];
    a = s_const(&s, av, x->shape, x->ndim, x->dtype);
    A = s_const(&s, Av, ashape, x->ndim, x->dtype);
    free(av);
    free(Av);
  }
  of_tensor *p = s_softmax(&s, x, cdim, 0);
  if (n->needs[0]) {
    of_tensor *gx = of_s_bin(&s, OF_MUL, of_s_bin(&s, OF_SUB, of_s_bin(&s, OF_MUL, p, A), a), gs);
    if (s.st == OF_OK && gx) of_tensor_retain(gx), gi[0] = gx;
  }
  if (prob && n->needs[1]) {
    of_tensor *lp = s_softmax(&s, x, cdim, 1);
    of_tensor *gt = of_s_bins(&s, OF_MUL, of_s_bin(&s, OF_MUL, wb ? of_s_bin(&s, OF_MUL, lp, wb)
                                                                : lp, gs), -(1 - eps));
    if (s.st == OF_OK && gt) of_tensor_retain(gt), gi[1] = gt;
  }
  return of_s_end(&s, NULL, &gi[0]);
}

static of_status ce_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  if (n->needs[2])
    return of_fail(OF_ERR_STATE, "cross_entropy: the derivative for 'weight' is not "
                   "implemented; detach the class weights");
  const a_loss *ra = OF_NODE_ATTRS(a_loss, n);
  bool has_w = node_has_weight(n);
  of_tensor *sv[4] = {NULL, NULL, NULL, NULL}, *tmp[5] = {NULL, NULL, NULL, NULL, NULL};
  of_status st = OF_OK;
  double *sc = NULL;
  for (int32_t k = 0; k < 4 && st == OF_OK; k++)
    if (k != 2 || has_w) st = of_node_saved(n, k, &sv[k]);
  if (st != OF_OK) goto done;
  of_tensor *x = sv[0], *t = sv[1];
  bool prob = node_prob(n);
  layout l;
  of_meta xm = of_meta_of(x);
  st = parse_input("cross_entropy", &xm, &l);
  if (st != OF_OK) goto done;
  of_dtype cd = of_compute_dtype(x->dtype);
  st = of_dense(x, cd, &tmp[0]);
  if (st == OF_OK) st = of_dense(t, prob ? cd : OF_INT64, &tmp[1]);
  if (st == OF_OK) st = of_dense(sv[2], OF_FLOAT64, &tmp[2]);
  if (st != OF_OK) goto done;
  const int64_t *tv = prob ? NULL : of_tensor_data(tmp[1]);
  const double *wv = tmp[2] ? of_tensor_data(tmp[2]) : NULL;
  int64_t ns = l.N * l.S;
  double wsum = weight_sum(wv, l.C);
  double denom = prob ? (double)ns : target_weight_sum(tv, wv, ns, ra->ignore, ra->base);
  if (of_is_grad_enabled() &&
      (g[0]->requires_grad || x->requires_grad || (prob && t->requires_grad))) {
    st = ce_composite(n, denom, wsum, g[0], x, prob ? t : tmp[1], tmp[2], &l, gi);
    goto done;
  }
  ce_args a = {l.N, l.C, l.S, ra->ignore, ra->base, ra->smoothing, wsum, tv, wv};
  st = sample_scales(g[0], ra->reduction, denom, ns, &sc);
  if (st == OF_OK) st = of_tensor_new(x->shape, x->ndim, cd, OF_CPU, &tmp[3]);
  if (st == OF_OK && prob && n->needs[1])
    st = of_tensor_new(x->shape, x->ndim, cd, OF_CPU, &tmp[4]);
  if (st != OF_OK) goto done;
  const void *q = prob ? of_tensor_data(tmp[1]) : NULL;
  void *gq = tmp[4] ? of_tensor_data(tmp[4]) : NULL;
  if (cd == OF_FLOAT64)
    ce_bwd_double(&a, of_tensor_data(tmp[0]), q, of_tensor_data(sv[3]), sc,
                  of_tensor_data(tmp[3]), gq);
  else
    ce_bwd_float(&a, of_tensor_data(tmp[0]), q, of_tensor_data(sv[3]), sc,
                 of_tensor_data(tmp[3]), gq);
  if (n->needs[0]) {
    st = of_finish_dtype(tmp[3], n->in_meta[0].dtype, &gi[0]);
    tmp[3] = NULL;
  }
  if (st == OF_OK && tmp[4]) {
    st = of_finish_dtype(tmp[4], n->in_meta[1].dtype, &gi[1]);
    tmp[4] = NULL;
  }
done:
  free(sc);
  release_all(sv, 4);
  release_all(tmp, 5);
  return st;
}

static of_status cross_entropy_body(of_tensor *x, of_tensor *target, of_tensor *weight,
                                of_loss_reduction reduction, int64_t ignore_index,
                                double label_smoothing, int64_t index_base, of_tensor **out) {
  OF_ROUTE("cross_entropy", dev, dops, cross_entropy, x, target, weight);
  (void)dops;
  const char *op = "cross_entropy";
  layout l;
  bool prob;
  of_meta ym, xm = of_meta_of(x), tm = of_meta_of(target), wm = of_meta_of(weight);
  OF_CHECK(loss_plan(op, true, &xm, &tm, &wm, reduction, label_smoothing, &l, &prob, &ym));
  if (dev != OF_CPU)
    return ce_device(x, target, weight, reduction, ignore_index, label_smoothing, index_base,
                     &l, prob, out);
  of_dtype cd = of_compute_dtype(x->dtype);
  of_tensor *w = NULL, *t = NULL, *xc = NULL, *lse = NULL;
  double *buf = NULL;
  int64_t ns = l.N * l.S;
  of_status st = parse_weight(weight, &w);
  if (st == OF_OK) st = prob ? of_dense(target, cd, &t)
                             : parse_class_target(op, target, &l, ignore_index, index_base, &t);
  if (st == OF_OK) st = of_dense(x, cd, &xc);
  if (st == OF_OK) st = of_tensor_new(&ns, 1, OF_FLOAT64, OF_CPU, &lse);
  if (st == OF_OK && !(buf = malloc(sizeof(double) * (size_t)(2 * ns + 1))))
    st = of_fail(OF_ERR_OOM, "%s: out of memory", op);
  if (st != OF_OK) goto done;
  double wsum = weight_sum(w ? of_tensor_data(w) : NULL, l.C);
  ce_args a = {l.N, l.C, l.S, ignore_index, index_base, label_smoothing, wsum,
               prob ? NULL : of_tensor_data(t), w ? of_tensor_data(w) : NULL};
  double *loss = buf, *wt = buf + ns, denom;
  const void *q = prob ? of_tensor_data(t) : NULL;
  if (cd == OF_FLOAT64) ce_fwd_double(&a, of_tensor_data(xc), q, of_tensor_data(lse), loss, wt);
  else ce_fwd_float(&a, of_tensor_data(xc), q, of_tensor_data(lse), loss, wt);
  st = reduce_losses(&l, reduction, loss, wt, prob, x->dtype, &denom, out);
  of_tensor *ins[3] = {x, target, weight};
  if (st == OF_OK && of_grad_needed(ins, 3)) {
    of_node *n;
    st = of_record(&ce_grad, ins, 3, out, 1, &n);
    if (st != OF_OK) {
      of_tensor_release(*out);
      *out = NULL;
    } else {
      keep_loss(n, OPK_CROSS_ENTROPY, reduction, ignore_index, label_smoothing, index_base);
      of_node_save(n, 0, x);
      of_node_save(n, 1, target);
      of_node_save(n, 2, weight);
      of_node_save(n, 3, lse);
    }
  }
done:
  free(buf);
  of_tensor *rel[4] = {w, t, xc, lse};
  release_all(rel, 4);
  return st;
}

/* ------------------------------------------------------------ nll_loss */

static of_status nll_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def nll_grad = {"NllLossBackward", nll_backward};

/* gx[n, t, s] = -w[t] * s_i, zero elsewhere (ignored samples: zero) */
static void nll_grad_fill(const layout *l, const int64_t *t, const double *w, int64_t ignore,
                          int64_t base, const double *s, double *gx) {
  memset(gx, 0, sizeof(double) * (size_t)(l->N * l->C * l->S));
  for (int64_t i = 0; i < l->N * l->S; i++) {
    if (t[i] == ignore) continue;
    int64_t ct = t[i] - base;
    gx[(i / l->S) * l->C * l->S + ct * l->S + i % l->S] = -(w ? w[ct] : 1.0) * s[i];
  }
}

/* node: the a_loss record. saved: 0 target, 1 weight */
static of_status nll_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0] || !n->needs[0]) return OF_OK;
  if (n->needs[2])
    return of_fail(OF_ERR_STATE, "nll_loss: the derivative for 'weight' is not implemented; "
                   "detach the class weights");
  of_tensor *sv[2] = {NULL, NULL}, *t = NULL, *w = NULL;
  const a_loss *ra = OF_NODE_ATTRS(a_loss, n);
  const of_meta *xm = &n->in_meta[0];
  layout l = layout_of_meta(xm);
  int32_t red = ra->reduction;
  int64_t ns = l.N * l.S;
  bool composite = of_is_grad_enabled() && g[0]->requires_grad;
  double *sc = NULL, *gx = malloc(sizeof(double) * (size_t)(ns * l.C + 1));
  of_status st = gx ? of_node_saved(n, 0, &sv[0])
                    : of_fail(OF_ERR_OOM, "nll_loss backward: out of memory");
  if (st == OF_OK && node_has_weight(n)) st = of_node_saved(n, 1, &sv[1]);
  if (st == OF_OK) st = of_dense(sv[0], OF_INT64, &t);
  if (st == OF_OK) st = of_dense(sv[1], OF_FLOAT64, &w);
  if (st != OF_OK) goto done;
  const int64_t *tv = of_tensor_data(t);
  const double *wv = w ? of_tensor_data(w) : NULL;
  double denom = target_weight_sum(tv, wv, ns, ra->ignore, ra->base);
  if (composite) {   /* a constant times g: recorded, so grads reach g */
    if (!(sc = malloc(sizeof(double) * (size_t)(ns + 1)))) {
      st = of_fail(OF_ERR_OOM, "nll_loss backward: out of memory");
      goto done;
    }
    for (int64_t i = 0; i < ns; i++) sc[i] = red == OF_LOSS_MEAN ? 1.0 / denom : 1.0;
    nll_grad_fill(&l, tv, wv, ra->ignore, ra->base, sc, gx);
    of_scope s = {0};
    of_tensor *m = s_const(&s, gx, xm->shape, xm->ndim, g[0]->dtype);
    of_tensor *r = of_s_bin(&s, OF_MUL, m, s_grad_scale(&s, g[0], &l, red, 1.0));
    st = of_s_end(&s, r, &gi[0]);
    goto done;
  }
  st = sample_scales(g[0], red, denom, ns, &sc);
  if (st != OF_OK) goto done;
  nll_grad_fill(&l, tv, wv, ra->ignore, ra->base, sc, gx);
  st = of_from_doubles(gx, xm->shape, xm->ndim, xm->dtype, &gi[0]);
done:
  free(sc);
  free(gx);
  of_tensor *rel[4] = {sv[0], sv[1], t, w};
  release_all(rel, 4);
  return st;
}

static of_status nll_loss_body(of_tensor *x, of_tensor *target, of_tensor *weight,
                           of_loss_reduction reduction, int64_t ignore_index, int64_t index_base,
                           of_tensor **out) {
  OF_ROUTE("nll_loss", dev, dops, nll_loss, x, target, weight);
  (void)dops;
  const char *op = "nll_loss";
  layout l;
  bool prob;
  of_meta ym, xm = of_meta_of(x), tm = of_meta_of(target), wm = of_meta_of(weight);
  OF_CHECK(loss_plan(op, false, &xm, &tm, &wm, reduction, 0, &l, &prob, &ym));
  if (dev != OF_CPU)
    return nll_device(x, target, weight, reduction, ignore_index, index_base, &l, out);
  of_tensor *w = NULL, *t = NULL, *xc = NULL;
  double *buf = NULL;
  int64_t ns = l.N * l.S;
  of_status st = parse_weight(weight, &w);
  if (st == OF_OK) st = parse_class_target(op, target, &l, ignore_index, index_base, &t);
  if (st == OF_OK) st = of_dense(x, x->dtype, &xc);
  if (st == OF_OK && !(buf = malloc(sizeof(double) * (size_t)(2 * ns + 1))))
    st = of_fail(OF_ERR_OOM, "%s: out of memory", op);
  if (st != OF_OK) goto done;
  const int64_t *tv = of_tensor_data(t);
  const double *wv = w ? of_tensor_data(w) : NULL;
  const char *xv = of_tensor_data(xc);
  int64_t es = of_dtype_size(x->dtype);
  double *loss = buf, *wt = buf + ns, denom;
  for (int64_t i = 0; i < ns; i++) {
    if (tv[i] == ignore_index) {
      loss[i] = wt[i] = 0;
      continue;
    }
    int64_t ct = tv[i] - index_base;
    wt[i] = wv ? wv[ct] : 1.0;
    int64_t at = (i / l.S) * l.C * l.S + ct * l.S + i % l.S;
    loss[i] = -wt[i] * of_load_double(xv + at * es, x->dtype);
  }
  st = reduce_losses(&l, reduction, loss, wt, false, x->dtype, &denom, out);
  of_tensor *ins[3] = {x, target, weight};
  if (st == OF_OK && of_grad_needed(ins, 3)) {
    of_node *n;
    st = of_record(&nll_grad, ins, 3, out, 1, &n);
    if (st != OF_OK) {
      of_tensor_release(*out);
      *out = NULL;
    } else {
      keep_loss(n, OPK_NLL_LOSS, reduction, ignore_index, 0, index_base);
      of_node_save(n, 0, target);
      of_node_save(n, 1, weight);
    }
  }
done:
  free(buf);
  of_tensor *rel[3] = {w, t, xc};
  release_all(rel, 3);
  return st;
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_loss(int32_t op, of_tensor *x, of_tensor *t, of_tensor *w,
                          of_loss_reduction red, int64_t ignore, double smoothing, int64_t base,
                          of_tensor **out) {
  a_loss a;
  OF_ZERO(a);
  a.reduction = red;
  a.ignore = ignore;
  a.smoothing = smoothing;
  a.base = base;
  of_tensor *ins[3] = {x, t, w};
  return OF_RECORD(op, a, ins, 3, out, 1);
}
of_status of_cross_entropy(of_tensor *logits, of_tensor *target, of_tensor *weight,
                           of_loss_reduction reduction, int64_t ignore_index,
                           double label_smoothing, int64_t index_base, of_tensor **out) {
  AMP(OF_AMP_F32, of_cross_entropy(A_[0], A_[1], A_[2], reduction, ignore_index, label_smoothing,
                                   index_base, out),
      logits, target, weight);
  OF_DISPATCH(cross_entropy_body(logits, target, weight, reduction, ignore_index,
                                  label_smoothing, index_base, out),
            pack_loss(OPK_CROSS_ENTROPY, logits, target, weight, reduction, ignore_index,
                     label_smoothing, index_base, out));
}
of_status of_nll_loss(of_tensor *log_probs, of_tensor *target, of_tensor *weight,
                      of_loss_reduction reduction, int64_t ignore_index, int64_t index_base,
                      of_tensor **out) {
  AMP(OF_AMP_F32, of_nll_loss(A_[0], A_[1], A_[2], reduction, ignore_index, index_base, out),
      log_probs, target, weight);
  OF_DISPATCH(nll_loss_body(log_probs, target, weight, reduction, ignore_index, index_base, out),
            pack_loss(OPK_NLL_LOSS, log_probs, target, weight, reduction, ignore_index, 0,
                     index_base, out));
}
static of_status run_loss(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_loss);
  if (n->op == OPK_CROSS_ENTROPY)
    OF_RUN1(of_cross_entropy(ins[0], ins[1], ins[2], a->reduction, a->ignore, a->smoothing, a->base,
                          OF_R));
  OF_RUN1(of_nll_loss(ins[0], ins[1], ins[2], a->reduction, a->ignore, a->base, OF_R));
}

/* A loaded node's result from its record and recorded inputs, by loss_plan
 * (the checks and result shape the bodies run first) */
static of_status infer_loss(bool ce, const void *p, const of_meta *ins, of_meta *outs) {
  const a_loss *a = p;
  layout l;
  bool prob;
  return loss_plan(ce ? "cross_entropy" : "nll_loss", ce, &ins[0], &ins[1], &ins[2],
                   a->reduction, ce ? a->smoothing : 0, &l, &prob, &outs[0]);
}
static of_status infer_CROSS_ENTROPY(const void *p, int32_t nin, const of_meta *ins,
                                     of_meta *outs) {
  (void)nin;
  return infer_loss(true, p, ins, outs);
}
static of_status infer_NLL_LOSS(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  return infer_loss(false, p, ins, outs);
}

OF_OP_IMPL_INFER(CROSS_ENTROPY, run_loss, NULL, NULL, NULL, infer_CROSS_ENTROPY);
OF_OP_IMPL_INFER(NLL_LOSS, run_loss, NULL, NULL, NULL, infer_NLL_LOSS);
