/* resample.c -- interpolate (nearest, linear/bilinear/trilinear) and pad
 * (constant, reflect, replicate, circular), forward and backward.
 *
 * Both ops map every output position to input positions through one index
 * table per dim, computed once, so the kernels are plain gathers (forward)
 * and scatter-adds (backward). Each backward is itself an op recorded in
 * autograd: it is linear in the grad and its adjoint is the forward op, so
 * double backward is exact. x is made contiguous first; interpolate works on
 * [NC, D, H, W] with missing spatial dims of size 1, pad on [B, padded dims]. */
#include "../autograd.h"
#include "../device.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include "family.h"

static int32_t nthreads(int64_t work) {
  int32_t nt = of_threads();
  if (nt <= 1 || work < OF_PARALLEL_GRAIN) return 1;
  int64_t cap = work / (OF_PARALLEL_GRAIN / 4);
  return cap < nt ? (int32_t)cap : nt;
}

/* Records `def` for out = f(x) when x needs grad; on failure drops *out. */
static of_status record1(const of_grad_def *def, of_tensor *x, of_tensor **out, of_node **n) {
  *n = NULL;
  if (!of_grad_needed(&x, 1)) return OF_OK;
  of_status st = of_record(def, &x, 1, out, 1, n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

/* Copies element src[i] to dst[j] for the element size es (a dtype-free gather). */
#define COPY_EL(es, dst, j, src, i)                                                       \
  do {                                                                                    \
    switch (es) {                                                                         \
      case 1: ((uint8_t *)(dst))[j] = ((const uint8_t *)(src))[i]; break;                 \
      case 2: ((uint16_t *)(dst))[j] = ((const uint16_t *)(src))[i]; break;               \
      case 4: ((uint32_t *)(dst))[j] = ((const uint32_t *)(src))[i]; break;               \
      default: ((uint64_t *)(dst))[j] = ((const uint64_t *)(src))[i]; break;              \
    }                                                                                     \
  } while (0)

/* ============================================================ interpolate */

typedef struct {
  int64_t NC, in[3], out[3];
  /* per dim d and output index o: nearest uses i0; linear blends i0 and i1 */
  int64_t *i0[3], *i1[3];
  double *l0[3], *l1[3];
} interp_plan;

static void plan_free(interp_plan *p) {
  for (int d = 0; d < 3; d++) {
    free(p->i0[d]);
    free(p->i1[d]);
    free(p->l0[d]);
    free(p->l1[d]);
  }
}

/* PyTorch's nearest index: floor(o * scale) in float, clamped. */
static int64_t nearest_src(int64_t o, int64_t in, int64_t out, double sf) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  float scale = sf > 0 ? (float)(1.0 / sf) : (float)in / (float)out;
  int64_t s = (int64_t)floorf((float)o * scale);
  return s < in - 1 ? s : in - 1;
}

/* Builds the tables for x [N, C, *in] -> [N, C, *out] (nsp spatial dims). */
static of_status plan_make(interp_plan *p, const int64_t *xshape, int32_t nsp,
                           const int64_t *size, const double *scales, int32_t mode,
                           int32_t align) {
  memset(p, 0, sizeof *p);
  p->NC = xshape[0] * xshape[1];
  for (int d = 0; d < 3; d++) {
    int32_t k = d - (3 - nsp);   /* spatial dim k of x, or < 0: padded */
    int64_t in = k >= 0 ? xshape[2 + k] : 1, out = k >= 0 ? size[k] : 1;
    double sf = k >= 0 && scales ? scales[k] : 0;
    p->in[d] = in;
    p->out[d] = out;
    p->i0[d] = malloc(sizeof(int64_t) * (size_t)out);
    p->i1[d] = malloc(sizeof(int64_t) * (size_t)out);
    p->l0[d] = malloc(sizeof(double) * (size_t)out);
    p->l1[d] = malloc(sizeof(double) * (size_t)out);
    if (!p->i0[d] || !p->i1[d] || !p->l0[d] || !p->l1[d]) {
      plan_free(p);
      return of_fail(OF_ERR_OOM, "interpolate: out of memory");
    }
    double scale = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                         : (sf > 0 ? 1.0 / sf : (double)in / (double)out);
    for (int64_t o = 0; o < out; o++) {
      if (mode == OF_INTERP_NEAREST || k < 0) {
        p->i0[d][o] = p->i1[d][o] = k < 0 ? 0 : nearest_src(o, in, out, sf);
        p->l0[d][o] = 1;
        p->l1[d][o] = 0;
        continue;
      }
      double src = align ? scale * (double)o : scale * ((double)o + 0.5) - 0.5;
      if (src < 0) src = 0;
      int64_t i0 = (int64_t)src;
      if (i0 > in - 1) i0 = in - 1;
      double l1 = src - (double)i0;
      p->i0[d][o] = i0;
      p->i1[d][o] = i0 < in - 1 ? i0 + 1 : i0;
      p->l1[d][o] = i0 < in - 1 ? l1 : 0;
      p->l0[d][o] = 1 - p->l1[d][o];
    }
  }
  return OF_OK;
}

/* nearest forward, any dtype: y[q, od, oh, ow] = x[q, i0d, i0h, i0w] */
static void nearest_fwd(const interp_plan *p, const char *x, char *y, int64_t es) {
  int64_t OD = p->out[0], OH = p->out[1], OW = p->out[2];
  int64_t ID = p->in[0], IH = p->in[1], IW = p->in[2], rows = p->NC * OD * OH;
  int32_t nt = nthreads(rows * OW);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    int64_t q = r / (OD * OH), od = (r / OH) % OD, oh = r % OH;
    const char *src = x + (((q * ID + p->i0[0][od]) * IH + p->i0[1][oh]) * IW) * es;
    char *dst = y + r * OW * es;
    for (int64_t ow = 0; ow < OW; ow++) COPY_EL(es, dst, ow, src, p->i0[2][ow]);
  }
}

#define INTERP_KERNELS(T)                                                                 \
  /* linear forward: blend of the 2^3 corners (a zero-weight corner is skipped) */        \
  static void linear_fwd_##T(const interp_plan *p, const T *x, T *y) {                    \
    int64_t OD = p->out[0], OH = p->out[1], OW = p->out[2];                               \
    int64_t ID = p->in[0], IH = p->in[1], IW = p->in[2], rows = p->NC * OD * OH;          \
    int32_t nt = nthreads(rows * OW * 4);                                                 \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t r = 0; r < rows; r++) {                                                  \
      int64_t q = r / (OD * OH), od = (r / OH) % OD, oh = r % OH;                         \
      int64_t di[2] = {p->i0[0][od], p->i1[0][od]}, hi[2] = {p->i0[1][oh], p->i1[1][oh]}; \
      double dl[2] = {p->l0[0][od], p->l1[0][od]}, hl[2] = {p->l0[1][oh], p->l1[1][oh]};  \
      const T *xq = x + q * ID * IH * IW;                                                 \
      T *yr = y + r * OW;                                                                 \
      for (int64_t ow = 0; ow < OW; ow++) {                                               \
        int64_t w0 = p->i0[2][ow], w1 = p->i1[2][ow];                                     \
        double lw0 = p->l0[2][ow], lw1 = p->l1[2][ow], v = 0;                             \
        for (int a = 0; a < 2; a++) {                                                     \
          if (dl[a] == 0) continue;                                                       \
          for (int b = 0; b < 2; b++) {                                                   \
            if (hl[b] == 0) continue;                                                     \
            const T *row = xq + (di[a] * IH + hi[b]) * IW;                                \
            double t = lw0 * (double)row[w0];                                             \
            if (lw1 != 0) t += lw1 * (double)row[w1];                                     \
            v += dl[a] * hl[b] * t;                                                       \
          }                                                                               \
        }                                                                                 \
        yr[ow] = (T)v;                                                                    \
      }                                                                                   \
    }                                                                                     \
  }                                                                                       \
  /* adjoint: gx[corner] += weight * g, one (n, c) plane per task */                      \
  static void interp_bwd_##T(const interp_plan *p, const T *g, T *gx, int linear) {       \
    int64_t OD = p->out[0], OH = p->out[1], OW = p->out[2];                               \
    int64_t ID = p->in[0], IH = p->in[1], IW = p->in[2], in_n = ID * IH * IW;             \
    int32_t nt = nthreads(p->NC * OD * OH * OW * 4);                                      \
    if (nt > p->NC) nt = (int32_t)(p->NC > 0 ? p->NC : 1);                                \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t q = 0; q < p->NC; q++) {                                                 \
      T *gq = gx + q * in_n;                                                              \
      for (int64_t i = 0; i < in_n; i++) gq[i] = 0;                                       \
      const T *gp = g + q * OD * OH * OW;                                                 \
      for (int64_t od = 0; od < OD; od++)                                                 \
        for (int64_t oh = 0; oh < OH; oh++, gp += OW) {                                   \
          int64_t di[2] = {p->i0[0][od], p->i1[0][od]};                                   \
          int64_t hi[2] = {p->i0[1][oh], p->i1[1][oh]};                                   \
          double dl[2] = {p->l0[0][od], p->l1[0][od]};                                    \
          double hl[2] = {p->l0[1][oh], p->l1[1][oh]};                                    \
          if (!linear) {                                                                  \
            T *row = gq + (di[0] * IH + hi[0]) * IW;                                      \
            for (int64_t ow = 0; ow < OW; ow++) row[p->i0[2][ow]] += gp[ow];              \
            continue;                                                                     \
          }                                                                               \
          for (int a = 0; a < 2; a++) {                                                   \
            if (dl[a] == 0) continue;                                                     \
            for (int b = 0; b < 2; b++) {                                                 \
              if (hl[b] == 0) continue;                                                   \
              T *row = gq + (di[a] * IH + hi[b]) * IW;                                    \
              double wab = dl[a] * hl[b];                                                 \
              for (int64_t ow = 0; ow < OW; ow++) {                                       \
                double gv = wab * (double)gp[ow];                                         \
                row[p->i0[2][ow]] += (T)(gv * p->l0[2][ow]);                              \
                if (p->l1[2][ow] != 0) row[p->i1[2][ow]] += (T)(gv * p->l1[2][ow]);       \
              }                                                                           \
            }                                                                             \
          }                                                                               \
        }                                                                                 \
    }                                                                                     \
  }

INTERP_KERNELS(float)
INTERP_KERNELS(double)

/* The plan's tables on a device (cuda/nn.cu's layout): per dim the source
 * indices i0 then i1, and the weights l0 then l1. */
static of_status interp_tables(const interp_plan *p, of_device dev, of_tensor **tab,
                               of_tensor **wts) {
  int64_t n = 2 * (p->out[0] + p->out[1] + p->out[2]);
  of_tensor *ht = NULL, *hw = NULL;
  of_status st = of_tensor_new(&n, 1, OF_INT64, OF_CPU, &ht);
  if (st == OF_OK) st = of_tensor_new(&n, 1, OF_FLOAT64, OF_CPU, &hw);
  if (st == OF_OK) {
    int64_t *ti = of_tensor_data(ht);
    double *tw = of_tensor_data(hw);
    for (int d = 0; d < 3; d++) {
      int64_t o = p->out[d];
      memcpy(ti, p->i0[d], sizeof(int64_t) * (size_t)o);
      memcpy(ti + o, p->i1[d], sizeof(int64_t) * (size_t)o);
      memcpy(tw, p->l0[d], sizeof(double) * (size_t)o);
      memcpy(tw + o, p->l1[d], sizeof(double) * (size_t)o);
      ti += 2 * o;
      tw += 2 * o;
    }
    st = of_to_device(ht, dev, 0, tab);
    if (st == OF_OK) st = of_to_device(hw, dev, 0, wts);
  }
  of_tensor_release(ht);
  of_tensor_release(hw);
  return st;
}

static of_status interp_device(const interp_plan *p, int32_t backward, int32_t linear,
                               of_tensor *x, of_tensor *y) {
  const char *op = backward ? "interpolate_backward" : "interpolate";
  const of_device_ops *o = of_device_ops_for(op, of_dev(x));
  if (!o) return OF_ERR_DEVICE;
  if (!o->interpolate) return of_device_unsupported(op, of_dev(x));
  of_device_last_op = op;
  of_tensor *tab = NULL, *wts = NULL;
  of_status st = interp_tables(p, of_dev(x), &tab, &wts);
  if (st == OF_OK) st = o->interpolate(backward, linear, p->NC, p->in, p->out, tab, wts, x, y);
  of_tensor_release(tab);
  of_tensor_release(wts);
  return st;
}

/* The node keeps the op's a_interp record (output size, scale factors --
 * zero where not given --, mode, align_corners). The input's spatial size
 * is the node's input meta (interpolate) or output meta (its adjoint). */
static void interp_keep(of_node *n, const int64_t *size, const double *scales, int32_t nsp,
                        int32_t mode, int32_t align) {
  a_interp a;
  OF_ZERO(a);
  a.nsp = nsp;
  a.mode = mode;
  a.align = align;
  a.has = scales != NULL;
  for (int32_t k = 0; k < nsp; k++) {
    a.size[k] = size[k];
    a.scales[k] = scales ? scales[k] : 0;
  }
  OF_NODE_KEEP(n, OPK_INTERPOLATE, a);
}

static of_status interp_backward(of_node *n, of_tensor **g, of_tensor **gi);
static of_status interp_adjoint_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def interp_grads[2] = {{"UpsampleNearestBackward", interp_backward},
                                            {"UpsampleLinearBackward", interp_backward}};
static const of_grad_def interp_adjoint_grad = {"UpsampleBackwardBackward",
                                                interp_adjoint_backward};

/* grad of interpolate: g [N, C, *size] -> [N, C, *in_sp], recorded (its
 * backward is the forward interpolate) */
static of_status interp_adjoint(of_tensor *g, const int64_t *in_sp, const int64_t *size,
                                const double *scales, int32_t nsp, int32_t mode, int32_t align,
                                of_tensor **out) {
  int64_t xshape[OF_MAX_DIMS] = {g->shape[0], g->shape[1]};
  for (int32_t k = 0; k < nsp; k++) xshape[2 + k] = in_sp[k];
  of_dtype cd = of_compute_dtype(g->dtype);
  interp_plan p;
  OF_CHECK(plan_make(&p, xshape, nsp, size, scales, mode, align));
  of_tensor *gc = NULL, *gx = NULL;
  of_status st = of_dense(g, cd, &gc);
  if (st == OF_OK) st = of_tensor_new(xshape, nsp + 2, cd, of_dev(g), &gx);
  if (st == OF_OK && of_dev(g) != OF_CPU) {
    st = interp_device(&p, 1, mode == OF_INTERP_LINEAR, gc, gx);
    if (st == OF_OK) st = of_finish_dtype(gx, g->dtype, out);
    gx = NULL;
  } else if (st == OF_OK) {
    if (cd == OF_FLOAT64)
      interp_bwd_double(&p, of_tensor_data(gc), of_tensor_data(gx), mode == OF_INTERP_LINEAR);
    else
      interp_bwd_float(&p, of_tensor_data(gc), of_tensor_data(gx), mode == OF_INTERP_LINEAR);
    st = of_finish_dtype(gx, g->dtype, out);
    gx = NULL;
  }
  plan_free(&p);
  of_tensor_release(gc);
  of_tensor_release(gx);
  if (st != OF_OK) return st;
  of_node *n;
  OF_CHECK(record1(&interp_adjoint_grad, g, out, &n));
  if (n) interp_keep(n, size, scales, nsp, mode, align);
  return OF_OK;
}

static of_status interp_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_interp *a = OF_NODE_ATTRS(a_interp, n);
  return interp_adjoint(g[0], n->in_meta[0].shape + 2, a->size, a->scales, a->nsp, a->mode,
                        a->align, &gi[0]);
}

static of_status interp_adjoint_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_interp *a = OF_NODE_ATTRS(a_interp, n);
  return of_interpolate(g[0], a->size, a->scales, a->nsp, (of_interp_mode)a->mode, a->align,
                        &gi[0]);
}

/* The result's shape yshape: every check interpolate makes before it
 * allocates, on the input's shape and dtype, and what a loaded graph's node
 * is re-inferred with (infer_INTERPOLATE) */
static of_status interp_geometry(const of_meta *x, const int64_t *size, int32_t nsp,
                                 int32_t mode, int64_t *yshape) {
  const char *op = "interpolate";
  if (mode != OF_INTERP_NEAREST && mode != OF_INTERP_LINEAR)
    return of_fail(OF_ERR_ARG, "%s: unknown mode %d", op, (int)mode);
  if (nsp < 1 || nsp > 3 || x->ndim != nsp + 2)
    return of_fail(OF_ERR_SHAPE, "%s: expected an input [N, C, *spatial] with 1 to 3 spatial "
                   "dims and %d output sizes, got input %s (%s)", op, (int)nsp,
                   OF_SHAPE_STR(x), OF_DT(x));
  if (mode == OF_INTERP_LINEAR && !of_dtype_is_floating(x->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: linear modes need a floating point input, got %s "
                   "(shape %s)", op, OF_DT(x), OF_SHAPE_STR(x));
  for (int32_t k = 0; k < nsp; k++) {
    if (size[k] < 1 || x->shape[2 + k] < 1)
      return of_fail(OF_ERR_SHAPE, "%s: input and output sizes should be greater than 0, got "
                     "output size %lld for spatial dim %d of input %s (%s)", op,
                     (long long)size[k], (int)k + 1, OF_SHAPE_STR(x), OF_DT(x));
  }
  yshape[0] = x->shape[0];
  yshape[1] = x->shape[1];
  for (int32_t k = 0; k < nsp; k++) yshape[2 + k] = size[k];
  return OF_OK;
}

static of_status interpolate_body(of_tensor *x, const int64_t *size, const double *scales,
                              int32_t nsp, of_interp_mode mode, int32_t align_corners,
                              of_tensor **out) {
  OF_ROUTE("interpolate", dev, dops, interpolate, x);
  (void)dops;
  int64_t yshape[OF_MAX_DIMS];
  of_meta xm = of_meta_of(x);
  OF_CHECK(interp_geometry(&xm, size, nsp, mode, yshape));
  interp_plan p;
  OF_CHECK(plan_make(&p, x->shape, nsp, size, scales, mode, align_corners));
  of_dtype cd = mode == OF_INTERP_NEAREST ? x->dtype : of_compute_dtype(x->dtype);
  of_tensor *xc = NULL, *y = NULL;
  of_status st = of_dense(x, cd, &xc);
  if (st == OF_OK) st = of_tensor_new(yshape, nsp + 2, cd, dev, &y);
  if (st == OF_OK && dev != OF_CPU) {
    st = interp_device(&p, 0, mode == OF_INTERP_LINEAR, xc, y);
    if (st == OF_OK) st = of_finish_dtype(y, x->dtype, out);
    y = NULL;
  } else if (st == OF_OK) {
    if (mode == OF_INTERP_NEAREST)
      nearest_fwd(&p, of_tensor_data(xc), of_tensor_data(y), of_dtype_size(cd));
    else if (cd == OF_FLOAT64)
      linear_fwd_double(&p, of_tensor_data(xc), of_tensor_data(y));
    else
      linear_fwd_float(&p, of_tensor_data(xc), of_tensor_data(y));
    st = of_finish_dtype(y, x->dtype, out);
    y = NULL;
  }
  plan_free(&p);
  of_tensor_release(xc);
  of_tensor_release(y);
  if (st != OF_OK) return st;
  if (!of_dtype_is_floating(x->dtype)) return OF_OK;
  of_node *n;
  OF_CHECK(record1(&interp_grads[mode], x, out, &n));
  if (n) interp_keep(n, size, scales, nsp, mode, align_corners);
  return OF_OK;
}

/* ============================================================ pad */

typedef struct {
  int32_t k;                    /* padded dims: the last k of x */
  int64_t B;                    /* product of the other (leading) dims */
  int64_t in[OF_MAX_DIMS], out[OF_MAX_DIMS];
  int64_t *map[OF_MAX_DIMS];    /* output index -> input index, or -1 (constant) */
  int64_t *inv_start[OF_MAX_DIMS], *inv[OF_MAX_DIMS];   /* input index -> outputs */
} pad_plan;

static void pad_plan_free(pad_plan *p) {
  for (int32_t j = 0; j < OF_MAX_DIMS; j++) {
    free(p->map[j]);
    free(p->inv_start[j]);
    free(p->inv[j]);
  }
}

static const char *pad_mode_name(int32_t mode) {
  static const char *names[4] = {"constant", "reflect", "replicate", "circular"};
  return mode >= 0 && mode < 4 ? names[mode] : "unknown";
}

static of_status pad_plan_make(pad_plan *p, const int64_t *xshape, int32_t ndim,
                               const int64_t *pad, int32_t k, int32_t mode, bool inverse) {
  memset(p, 0, sizeof *p);
  p->k = k;
  p->B = 1;
  for (int32_t d = 0; d < ndim - k; d++) p->B *= xshape[d];
  for (int32_t j = 0; j < k; j++) {
    int64_t D = xshape[ndim - k + j], left = pad[2 * (k - 1 - j)];
    int64_t right = pad[2 * (k - 1 - j) + 1], O = D + left + right;
    p->in[j] = D;
    p->out[j] = O;
    p->map[j] = malloc(sizeof(int64_t) * (size_t)(O + 1));
    if (!p->map[j]) goto oom;
    for (int64_t o = 0; o < O; o++) {
      int64_t i = o - left;
      switch (mode) {
        case OF_PAD_REFLECT:
          if (i < 0) i = -i;
          if (i >= D) i = 2 * (D - 1) - i;
          break;
        case OF_PAD_REPLICATE: i = i < 0 ? 0 : (i >= D ? D - 1 : i); break;
        case OF_PAD_CIRCULAR: i = ((i % D) + D) % D; break;
        default: if (i < 0 || i >= D) i = -1; break;
      }
      p->map[j][o] = i;
    }
    if (!inverse || j == k - 1) continue;
    /* CSR lists of the outputs that read each input index */
    p->inv_start[j] = calloc((size_t)(D + 1), sizeof(int64_t));
    p->inv[j] = malloc(sizeof(int64_t) * (size_t)(O + 1));
    if (!p->inv_start[j] || !p->inv[j]) goto oom;
    for (int64_t o = 0; o < O; o++)
      if (p->map[j][o] >= 0) p->inv_start[j][p->map[j][o] + 1]++;
    for (int64_t i = 0; i < D; i++) p->inv_start[j][i + 1] += p->inv_start[j][i];
    int64_t *fill = calloc((size_t)(D + 1), sizeof(int64_t));
    if (!fill) goto oom;
    for (int64_t o = 0; o < O; o++) {
      int64_t i = p->map[j][o];
      if (i >= 0) p->inv[j][p->inv_start[j][i] + fill[i]++] = o;
    }
    free(fill);
  }
  return OF_OK;
oom:
  pad_plan_free(p);
  return of_fail(OF_ERR_OOM, "pad: out of memory");
}

/* Forward, any dtype: one output row (the last padded dim) per step. */
static void pad_fwd(const pad_plan *p, const char *x, char *y, int64_t es, const void *fill) {
  int32_t k = p->k;
  int64_t OL = p->out[k - 1], rows = p->B, in_blk = 1;
  for (int32_t j = 0; j < k; j++) in_blk *= p->in[j];
  for (int32_t j = 0; j < k - 1; j++) rows *= p->out[j];
  const int64_t *ml = p->map[k - 1];
  int32_t nt = nthreads(rows * OL);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    int64_t rem = r, src = 0, stride = p->in[k - 1];
    bool inside = true;
    for (int32_t j = k - 2; j >= 0; j--) {
      int64_t o = rem % p->out[j], m = p->map[j][o];
      rem /= p->out[j];
      if (m < 0) inside = false;
      src += m * stride;
      stride *= p->in[j];
    }
    const char *xr = x + (rem * in_blk + src) * es;
    char *yr = y + r * OL * es;
    for (int64_t o = 0; o < OL; o++) {
      int64_t m = inside ? ml[o] : -1;
      if (m >= 0) COPY_EL(es, yr, o, xr, m);
      else COPY_EL(es, yr, o, fill, 0);
    }
  }
}

#define PAD_KERNELS(T)                                                                    \
  /* gx[b, m...] = sum of g over the outputs that read it; one input row per task */      \
  static void pad_bwd_##T(const pad_plan *p, const T *g, T *gx) {                         \
    int32_t k = p->k;                                                                     \
    int64_t IL = p->in[k - 1], OL = p->out[k - 1], rows = p->B, out_blk = 1;              \
    for (int32_t j = 0; j < k; j++) out_blk *= p->out[j];                                 \
    for (int32_t j = 0; j < k - 1; j++) rows *= p->in[j];                                 \
    const int64_t *ml = p->map[k - 1];                                                    \
    int32_t nt = nthreads(rows * IL + p->B * out_blk);                                    \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t r = 0; r < rows; r++) {                                                  \
      int64_t m[OF_MAX_DIMS], pos[OF_MAX_DIMS], rem = r;                                  \
      for (int32_t j = k - 2; j >= 0; j--) {                                              \
        m[j] = rem % p->in[j];                                                            \
        rem /= p->in[j];                                                                  \
      }                                                                                   \
      T *gr = gx + r * IL;                                                                \
      for (int64_t i = 0; i < IL; i++) gr[i] = 0;                                         \
      bool any = true;                                                                    \
      for (int32_t j = 0; j < k - 1; j++) {                                               \
        pos[j] = p->inv_start[j][m[j]];                                                   \
        if (pos[j] == p->inv_start[j][m[j] + 1]) any = false;                             \
      }                                                                                   \
      while (any) {                                                                       \
        int64_t off = 0;                                                                  \
        for (int32_t j = 0; j < k - 1; j++) off = off * p->out[j] + p->inv[j][pos[j]];    \
        const T *grow = g + rem * out_blk + off * OL;                                     \
        for (int64_t o = 0; o < OL; o++)                                                  \
          if (ml[o] >= 0) gr[ml[o]] += grow[o];                                           \
        int32_t j = k - 2;                                                                \
        for (; j >= 0; j--) {                                                             \
          if (++pos[j] < p->inv_start[j][m[j] + 1]) break;                                \
          pos[j] = p->inv_start[j][m[j]];                                                 \
        }                                                                                 \
        if (j < 0) any = false;                                                           \
      }                                                                                   \
    }                                                                                     \
  }

PAD_KERNELS(float)
PAD_KERNELS(double)

/* The plan's maps on a device, one after another, and the kernel. */
static of_status pad_device(const pad_plan *p, int32_t backward, double value, of_tensor *x,
                            of_tensor *y) {
  const char *op = backward ? "pad_backward" : "pad";
  const of_device_ops *o = of_device_ops_for(op, of_dev(x));
  if (!o) return OF_ERR_DEVICE;
  if (!o->pad) return of_device_unsupported(op, of_dev(x));
  of_device_last_op = op;
  int64_t n = 0;
  for (int32_t j = 0; j < p->k; j++) n += p->out[j];
  of_tensor *h = NULL, *m = NULL;
  of_status st = of_tensor_new(&n, 1, OF_INT64, OF_CPU, &h);
  if (st == OF_OK) {
    int64_t *v = of_tensor_data(h);
    for (int32_t j = 0; j < p->k; j++) {
      memcpy(v, p->map[j], sizeof(int64_t) * (size_t)p->out[j]);
      v += p->out[j];
    }
    st = of_to_device(h, of_dev(x), 0, &m);
  }
  if (st == OF_OK) st = o->pad(backward, p->k, p->B, p->in, p->out, m, value, x, y);
  of_tensor_release(h);
  of_tensor_release(m);
  return st;
}

static of_status pad_backward(of_node *n, of_tensor **g, of_tensor **gi);
static of_status pad_adjoint_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def pad_grads[4] = {{"ConstantPadBackward", pad_backward},
                                         {"ReflectionPadBackward", pad_backward},
                                         {"ReplicationPadBackward", pad_backward},
                                         {"CircularPadBackward", pad_backward}};
static const of_grad_def pad_adjoint_grad = {"PadBackwardBackward", pad_adjoint_backward};

/* The node keeps the op's a_pad record (the pads, their count, the mode and
 * the fill value; 0 for the adjoint, whose backward pads with zeros). */
static void pad_keep(of_node *n, const int64_t *pad, int32_t k, int32_t mode, double value) {
  a_pad a;
  OF_ZERO(a);
  a.npad = k;
  of_copy_i64(a.pad, pad, 2 * k);
  a.mode = mode;
  a.value = value;
  OF_NODE_KEEP(n, OPK_PAD, a);
}

/* grad of pad: g (padded shape) -> x's shape `xshape`, recorded (its
 * backward is pad with zeros) */
static of_status pad_adjoint(of_tensor *g, const int64_t *xshape, int32_t ndim,
                             const int64_t *pad, int32_t k, int32_t mode, of_tensor **out) {
  of_dtype cd = of_compute_dtype(g->dtype);
  pad_plan p;
  OF_CHECK(pad_plan_make(&p, xshape, ndim, pad, k, mode, of_dev(g) == OF_CPU));
  of_tensor *gc = NULL, *gx = NULL;
  of_status st = of_dense(g, cd, &gc);
  if (st == OF_OK) st = of_tensor_new(xshape, ndim, cd, of_dev(g), &gx);
  if (st == OF_OK && of_dev(g) != OF_CPU) {
    if (gx->numel > 0) st = pad_device(&p, 1, 0, gc, gx);
    if (st == OF_OK) st = of_finish_dtype(gx, g->dtype, out);
    gx = NULL;
  } else if (st == OF_OK) {
    if (gx->numel > 0) {
      if (cd == OF_FLOAT64) pad_bwd_double(&p, of_tensor_data(gc), of_tensor_data(gx));
      else pad_bwd_float(&p, of_tensor_data(gc), of_tensor_data(gx));
    }
    st = of_finish_dtype(gx, g->dtype, out);
    gx = NULL;
  }
  pad_plan_free(&p);
  of_tensor_release(gc);
  of_tensor_release(gx);
  if (st != OF_OK) return st;
  of_node *n;
  OF_CHECK(record1(&pad_adjoint_grad, g, out, &n));
  if (n) pad_keep(n, pad, k, mode, 0);
  return OF_OK;
}

static of_status pad_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_pad *a = OF_NODE_ATTRS(a_pad, n);
  return pad_adjoint(g[0], n->in_meta[0].shape, n->in_meta[0].ndim, a->pad, a->npad, a->mode,
                     &gi[0]);
}

static of_status pad_adjoint_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_pad *a = OF_NODE_ATTRS(a_pad, n);
  return of_pad(g[0], a->pad, a->npad, (of_pad_mode)a->mode, 0, &gi[0]);
}

/* The result's shape yshape: every check pad makes before it allocates, on
 * the input's shape and dtype, and what a loaded graph's node is re-inferred
 * with (infer_PAD) */
static of_status pad_geometry(const of_meta *x, const int64_t *pad, int32_t npad, int32_t mode,
                              int64_t *yshape) {
  const char *op = "pad";
  if (mode < OF_PAD_CONSTANT || mode > OF_PAD_CIRCULAR)
    return of_fail(OF_ERR_ARG, "%s: unknown mode %d", op, (int)mode);
  const char *mn = pad_mode_name(mode);
  if (npad < 1 || npad > x->ndim)
    return of_fail(OF_ERR_ARG, "%s: %d (left, right) pairs given for a %d-d input %s (%s); "
                   "expected 1..%d", op, (int)npad, (int)x->ndim, OF_SHAPE_STR(x), OF_DT(x),
                   (int)x->ndim);
  if (mode != OF_PAD_CONSTANT && (npad > 3 || x->ndim < npad + 1))
    return of_fail(OF_ERR_ARG, "%s: %s padding of %d dims needs an input with %d or %d dims, "
                   "got %s (%s)", op, mn, (int)npad, (int)npad + 1, (int)npad + 2,
                   OF_SHAPE_STR(x), OF_DT(x));
  memcpy(yshape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  for (int32_t j = 0; j < npad; j++) {
    int32_t d = x->ndim - 1 - j;
    int64_t D = x->shape[d], l = pad[2 * j], r = pad[2 * j + 1];
    if (!of_add_ok(D, l, &yshape[d]) || !of_add_ok(yshape[d], r, &yshape[d]))
      return of_fail(OF_ERR_SHAPE, "%s: padding (%lld, %lld) of dim %d of size %lld overflows "
                     "(input %s)", op, (long long)l, (long long)r, (int)d + 1, (long long)D,
                     OF_SHAPE_STR(x));
    if (mode != OF_PAD_CONSTANT && (l < 0 || r < 0))
      return of_fail(OF_ERR_ARG, "%s: negative padding (%lld, %lld) is only supported in "
                     "constant mode, not %s (input %s)", op, (long long)l, (long long)r, mn,
                     OF_SHAPE_STR(x));
    if (mode == OF_PAD_REFLECT && (l >= D || r >= D))
      return of_fail(OF_ERR_ARG, "%s: padding (%lld, %lld) should be less than the size %lld "
                     "of dim %d in reflect mode (input %s, %s)", op, (long long)l,
                     (long long)r, (long long)D, (int)d + 1, OF_SHAPE_STR(x), OF_DT(x));
    if (mode == OF_PAD_CIRCULAR && (l > D || r > D))
      return of_fail(OF_ERR_ARG, "%s: padding (%lld, %lld) should be at most the size %lld of "
                     "dim %d in circular mode (input %s, %s)", op, (long long)l, (long long)r,
                     (long long)D, (int)d + 1, OF_SHAPE_STR(x), OF_DT(x));
    if (mode != OF_PAD_CONSTANT && D == 0 && l + r > 0)
      return of_fail(OF_ERR_SHAPE, "%s: cannot %s-pad the empty dim %d of input %s", op, mn,
                     (int)d + 1, OF_SHAPE_STR(x));
    if (yshape[d] < 0)
      return of_fail(OF_ERR_SHAPE, "%s: padding (%lld, %lld) makes dim %d of input %s "
                     "negative (%lld)", op, (long long)l, (long long)r, (int)d + 1,
                     OF_SHAPE_STR(x), (long long)yshape[d]);
  }
  return OF_OK;
}

static of_status pad_body(of_tensor *x, const int64_t *pad, int32_t npad, of_pad_mode mode,
                      double value, of_tensor **out) {
  OF_ROUTE("pad", dev, dops, pad, x);
  (void)dops;
  int64_t yshape[OF_MAX_DIMS];
  of_meta xm = of_meta_of(x);
  OF_CHECK(pad_geometry(&xm, pad, npad, mode, yshape));
  pad_plan p;
  OF_CHECK(pad_plan_make(&p, x->shape, x->ndim, pad, npad, mode, false));
  of_tensor *xc = NULL, *y = NULL;
  of_status st = of_dense(x, x->dtype, &xc);
  if (st == OF_OK) st = of_tensor_new(yshape, x->ndim, x->dtype, dev, &y);
  if (st == OF_OK && dev != OF_CPU) {
    if (y->numel > 0) st = pad_device(&p, 0, value, xc, y);
    if (st == OF_OK) *out = y, y = NULL;
  } else if (st == OF_OK) {
    uint64_t fill = 0;
    of_store_double(&fill, x->dtype, value);
    if (y->numel > 0) pad_fwd(&p, of_tensor_data(xc), of_tensor_data(y), of_dtype_size(x->dtype),
                              &fill);
    *out = y;
    y = NULL;
  }
  pad_plan_free(&p);
  of_tensor_release(xc);
  of_tensor_release(y);
  if (st != OF_OK) return st;
  if (!of_dtype_is_floating(x->dtype)) return OF_OK;
  of_node *n;
  OF_CHECK(record1(&pad_grads[mode], x, out, &n));
  if (n) pad_keep(n, pad, npad, mode, value);
  return OF_OK;
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_interp(of_tensor *x, const int64_t *size, const double *scales,
                            int32_t nsp, of_interp_mode mode, int32_t align, of_tensor **out) {
  a_interp a;
  OF_ZERO(a);
  int32_t k = nsp >= 0 && nsp <= 3 ? nsp : 0;
  a.nsp = nsp;
  a.mode = mode;
  a.align = align;
  of_copy_i64(a.size, size, k);
  if (scales) {
    a.has = 1;
    for (int32_t i = 0; i < k; i++) a.scales[i] = scales[i];
  }
  return OF_RECORD(OPK_INTERPOLATE, a, &x, 1, out, 1);
}
of_status of_interpolate(of_tensor *x, const int64_t *size, const double *scales, int32_t nsp,
                         of_interp_mode mode, int32_t align_corners, of_tensor **out) {
  OF_DISPATCH(interpolate_body(x, size, scales, nsp, mode, align_corners, out),
            pack_interp(x, size, scales, nsp, mode, align_corners, out));
}
static of_status run_interp(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_interp);
  OF_NEED(a->nsp >= 1 && a->nsp <= 3, "nsp");
  OF_RUN1(of_interpolate(ins[0], a->size, a->has ? a->scales : NULL, a->nsp, a->mode, a->align, OF_R));
}
static of_status pack_pad(of_tensor *x, const int64_t *pad, int32_t npad, of_pad_mode mode,
                         double value, of_tensor **out) {
  a_pad a;
  OF_ZERO(a);
  a.npad = npad;
  of_copy_i64(a.pad, pad, 2 * npad);
  a.mode = mode;
  a.value = value;
  return OF_RECORD(OPK_PAD, a, &x, 1, out, 1);
}
of_status of_pad(of_tensor *x, const int64_t *pad, int32_t npad, of_pad_mode mode, double value,
                 of_tensor **out) {
  OF_DISPATCH(pad_body(x, pad, npad, mode, value, out), pack_pad(x, pad, npad, mode, value, out));
}
static of_status run_pad(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_pad);
  OF_NEED(NDIM_OK(a->npad), "npad");
  OF_RUN1(of_pad(ins[0], a->pad, a->npad, a->mode, a->value, OF_R));
}

/* A loaded node's result from its record and the recorded input, by the
 * geometry functions the bodies check and allocate with (they check nsp and
 * npad before reading the sizes); the dtype is x's */
static of_status infer_INTERPOLATE(const void *p, int32_t nin, const of_meta *ins,
                                   of_meta *outs) {
  (void)nin;
  const a_interp *a = p;
  outs[0] = ins[0];
  return interp_geometry(&ins[0], a->size, a->nsp, a->mode, outs[0].shape);
}
static of_status infer_PAD(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  const a_pad *a = p;
  outs[0] = ins[0];
  return pad_geometry(&ins[0], a->pad, a->npad, a->mode, outs[0].shape);
}

OF_OP_IMPL_INFER(INTERPOLATE, run_interp, NULL, NULL, NULL, infer_INTERPOLATE);
OF_OP_IMPL_INFER(PAD, run_pad, NULL, NULL, NULL, infer_PAD);
