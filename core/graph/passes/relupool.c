/* relupool.c -- relu followed by a max-pool with non-overlapping windows,
 * forward and backward, as two fused nodes.
 *
 * After the poolmask pass a train graph holds, for relu -> max_pool2d:
 *   r  = relu(y)                          full size
 *   p, idx, h = max_pool(r)               int64 indices + an autograd node
 *   ...
 *   m  = gp * to(p > 0)                   pooled size (poolmask)
 *   gy = MaxPoolBackward(h, m)            memset + scatter through idx
 * When the windows tile the input (stride = kernel, no padding, dilation 1,
 * floor mode) this pass rewrites it to (the first line alone in eval graphs)
 *   p, code = relu_max_pool(y)            one pass over y
 *   gy = relu_max_pool_backward(gp, code) one pass writing gy
 * code is an int32 per pooled value: the winning tap in the window (row-major)
 * and bit 7 set where p is not > 0 (relu's backward mask). The relu is never
 * written out, the int64 indices and the separate mask nodes disappear.
 *
 * Same numbers as eager: the forward takes max over relu(y) = (y > 0 ? y : 0)
 * with ties keeping the first tap, as max_pool2d(relu(y)) does (relu leaves
 * no NaN), and the backward writes 0 + gp * (p > 0 ? 1 : 0) at the winning
 * tap and 0 elsewhere -- the poolmask form's multiply and scatter-add. */
#include "../ops.h"
#include "../../device.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the vector helpers below are always inlined into their callers: no vector
 * crosses a call, whatever the ABI note (given at the end of the file) says */
#pragma GCC diagnostic ignored "-Wpsabi"

enum { MASKED = 0x80, TAP_BITS = 0x7f };

/* ---- kernels: one plane [H, W] at a time ----
 * The 2x2 float case (LeNet, VGG) runs as vectors of N outputs: rows of 7
 * or 14 outputs leave an auto-vectorised loop in its scalar tail, so a row
 * is covered by whole vectors, the last one overlapping the one before
 * (it recomputes and rewrites the same outputs). Other windows and float64
 * take the scalar loops. */
#define RELU_POOL_SCALAR(T)                                                                \
  static void fwd_plane_##T(const T *x, int64_t W, int64_t kh, int64_t kw, int64_t OH,     \
                            int64_t OW, T *p, int32_t *code) {                             \
    for (int64_t oh = 0; oh < OH; oh++)                                                    \
      for (int64_t ow = 0; ow < OW; ow++) {                                                \
        T m = -1;   /* below every relu value: the first tap always wins */                \
        int32_t t = 0;                                                                     \
        for (int64_t a = 0; a < kh; a++)                                                   \
          for (int64_t b = 0; b < kw; b++) {                                               \
            T v = x[(oh * kh + a) * W + ow * kw + b];                                      \
            v = v > 0 ? v : 0;                                                             \
            if (v > m) m = v, t = (int32_t)(a * kw + b);                                   \
          }                                                                                \
        p[oh * OW + ow] = m;                                                               \
        code[oh * OW + ow] = m > 0 ? t : t | MASKED;                                       \
      }                                                                                    \
  }                                                                                        \
  static void bwd_plane_##T(const T *gp, const int32_t *code, int64_t H, int64_t W,        \
                            int64_t kh, int64_t kw, int64_t OH, int64_t OW, T *gx) {       \
    memset(gx, 0, sizeof(T) * (size_t)(H * W));                                            \
    for (int64_t oh = 0; oh < OH; oh++)                                                    \
      for (int64_t ow = 0; ow < OW; ow++) {                                                \
        int32_t c = code[oh * OW + ow], t = c & TAP_BITS;                                  \
        if (t >= kh * kw) continue;   /* not a code this op made */                        \
        T v = (T)0 + gp[oh * OW + ow] * ((c & MASKED) ? (T)0 : (T)1);                      \
        gx[(oh * kh + t / kw) * W + ow * kw + t % kw] = v;                                 \
      }                                                                                    \
  }
RELU_POOL_SCALAR(float)
RELU_POOL_SCALAR(double)

/* N-lane vectors (GCC vector extensions; the clones pick the instructions).
 * Lane shuffles: GCC's __builtin_shuffle takes an index vector, clang's
 * __builtin_shufflevector the indices as constant arguments. */
#ifdef __clang__
#define SHUF(N, a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUF(N, a, b, ...) __builtin_shuffle(a, b, (vi##N){__VA_ARGS__})
#endif
/* The helpers are macros, not inline functions: a function taking 8-lane
 * vectors is compiled for the default target, where clang refuses them (the
 * AVX ABI); expanded into the clones they take each clone's instructions. */
#define SEL(N, m, a, b) ((vf##N)(((vi##N)(a) & (m)) | ((vi##N)(b) & ~(m))))
#define SELI(m, a, b) (((a) & (m)) | ((b) & ~(m)))
/* relu'd taps (r, r + 1) of N windows: the larger, and 1 where it is the second */
#define PAIR(N, r, second)                                                               \
  ({                                                                                       \
    vf##N lo_, hi_, z_ = {0};                                                              \
    memcpy(&lo_, (r), sizeof lo_);                                                         \
    memcpy(&hi_, (r) + N, sizeof hi_);                                                     \
    vf##N e_ = SHUF(N, lo_, hi_, EVEN##N);                                                 \
    vf##N o_ = SHUF(N, lo_, hi_, ODD##N);                                                  \
    e_ = SEL(N, e_ > z_, e_, z_);                                                          \
    o_ = SEL(N, o_ > z_, o_, z_);                                                          \
    vi##N take_ = o_ > e_;                                                                 \
    (second) = take_ & 1;                                                                  \
    SEL(N, take_, o_, e_);                                                                 \
  })
#define RELU_POOL_2X2(N)                                                                   \
  typedef float vf##N __attribute__((vector_size(4 * N), aligned(4)));                     \
  typedef int32_t vi##N __attribute__((vector_size(4 * N), aligned(4)));                   \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void fwd2x2_##N(const float *x, int64_t OH, int64_t OW, float *p,                 \
                         int32_t *code) {                                                  \
    vf##N z = {0};                                                                         \
    for (int64_t oh = 0; oh < OH; oh++) {                                                  \
      const float *r0 = x + 4 * oh * OW, *r1 = r0 + 2 * OW;                                \
      for (int64_t o0 = 0; o0 < OW; o0 += N) {                                             \
        int64_t o = o0 + N > OW ? OW - N : o0;                                             \
        vi##N s0, s1;                                                                      \
        vf##N m0 = PAIR(N, r0 + 2 * o, s0);                                                \
        vf##N m1 = PAIR(N, r1 + 2 * o, s1);                                                \
        vi##N take = m1 > m0;                                                              \
        vf##N m = SEL(N, take, m1, m0);                                                    \
        vi##N t = SELI(take, s1 + 2, s0);                                               \
        t |= ~(m > z) & MASKED;                                                            \
        memcpy(p + oh * OW + o, &m, sizeof m);                                             \
        memcpy(code + oh * OW + o, &t, sizeof t);                                          \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void bwd2x2_##N(const float *gp, const int32_t *code, int64_t H, int64_t OH,      \
                         int64_t OW, float *gx) {                                          \
    vf##N z = {0}, one = z + 1;                                                            \
    for (int64_t oh = 0; oh < OH; oh++) {                                                  \
      float *g0 = gx + 4 * oh * OW, *g1 = g0 + 2 * OW;                                     \
      for (int64_t o0 = 0; o0 < OW; o0 += N) {                                             \
        int64_t o = o0 + N > OW ? OW - N : o0;                                             \
        vi##N c, t;                                                                        \
        vf##N g;                                                                           \
        memcpy(&c, code + oh * OW + o, sizeof c);                                          \
        memcpy(&g, gp + oh * OW + o, sizeof g);                                            \
        t = c & TAP_BITS;                                                                  \
        vf##N v = z + g * SEL(N, (c & MASKED) == 0, one, z);                               \
        vf##N e0 = SEL(N, t == 0, v, z), d0 = SEL(N, t == 1, v, z);                        \
        vf##N e1 = SEL(N, t == 2, v, z), d1 = SEL(N, t == 3, v, z);                        \
        vf##N w0 = SHUF(N, e0, d0, LO##N);                                \
        vf##N w1 = SHUF(N, e0, d0, HI##N);                                \
        vf##N w2 = SHUF(N, e1, d1, LO##N);                                \
        vf##N w3 = SHUF(N, e1, d1, HI##N);                                \
        memcpy(g0 + 2 * o, &w0, sizeof w0);   /* one store each: no reload of a pair */   \
        memcpy(g0 + 2 * o + N, &w1, sizeof w1);                                            \
        memcpy(g1 + 2 * o, &w2, sizeof w2);                                                \
        memcpy(g1 + 2 * o + N, &w3, sizeof w3);                                            \
      }                                                                                    \
    }                                                                                      \
    if (H > 2 * OH) memset(gx + 4 * OH * OW, 0, sizeof(float) * (size_t)(2 * OW));         \
  }
#define EVEN8 0, 2, 4, 6, 8, 10, 12, 14
#define ODD8 1, 3, 5, 7, 9, 11, 13, 15
#define LO8 0, 8, 1, 9, 2, 10, 3, 11
#define HI8 4, 12, 5, 13, 6, 14, 7, 15
#define EVEN4 0, 2, 4, 6
#define ODD4 1, 3, 5, 7
#define LO4 0, 4, 1, 5
#define HI4 2, 6, 3, 7
RELU_POOL_2X2(8)
RELU_POOL_2X2(4)

/* the lanes of the 2x2 float path for rows of OW windows, 0: the scalar loops */
static int lanes_2x2(of_dtype dt, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t OW) {
  if (dt != OF_FLOAT32 || kh != 2 || kw != 2 || W != 2 * OW || H < 2) return 0;
  return OW >= 8 ? 8 : OW >= 4 ? 4 : 0;
}

/* ---- the two ops ---- */

static bool float_dt(of_dtype dt) { return dt == OF_FLOAT32 || dt == OF_FLOAT64; }

of_status of_relu_pool_check(const void *attrs, int32_t size, int32_t nin) {
  const a_relu_pool *a = attrs;
  if (size != (int32_t)sizeof *a || nin < 1 || nin > 2)
    return of_fail(OF_ERR_ARG, "relu_max_pool: bad record");
  if (a->kernel[0] < 1 || a->kernel[1] < 1 || a->kernel[0] > TAP_BITS + 1 ||
      a->kernel[1] > TAP_BITS + 1 || a->kernel[0] * a->kernel[1] > TAP_BITS + 1 ||
      a->in[0] < a->kernel[0] || a->in[1] < a->kernel[1])
    return of_fail(OF_ERR_ARG, "relu_max_pool: bad kernel %lldx%lld for input %lldx%lld",
                   (long long)a->kernel[0], (long long)a->kernel[1], (long long)a->in[0],
                   (long long)a->in[1]);
  return OF_OK;
}

void of_relu_pool_describe(const void *attrs, char *buf, size_t cap) {
  const a_relu_pool *a = attrs;
  snprintf(buf, cap, "kernel=%lld,%lld in=%lld,%lld", (long long)a->kernel[0],
           (long long)a->kernel[1], (long long)a->in[0], (long long)a->in[1]);
}

static int plane_threads(int64_t planes, int64_t numel) {
  int nt = of_threads();
  if (numel < OF_PARALLEL_GRAIN) nt = 1;
  if (nt > planes) nt = (int)(planes ? planes : 1);
  return nt;
}


/* The forward's input (float [..., H, W], the record's H and W; in place,
 * contiguous and on the CPU: `placed`, known only when it runs) and its
 * results: the pooled [..., H / kh, W / kw] in the input's dtype and the
 * int32 code of the same shape. fwd and the infer hook share it. */
static of_status fwd_meta(const a_relu_pool *a, const of_meta *y, bool placed, of_meta *p, of_meta *code) {
  int64_t H = a->in[0], W = a->in[1], kh = a->kernel[0], kw = a->kernel[1];
  if (y->ndim < 2 || y->shape[y->ndim - 2] != H || y->shape[y->ndim - 1] != W ||
      !float_dt(y->dtype) || !placed)
    return of_fail(OF_ERR_SHAPE, "relu_max_pool: input %s %s does not match the record "
                   "(contiguous float [..., %lld, %lld] on the CPU)", OF_SHAPE_STR(y),
                   of_dtype_name(y->dtype), (long long)H, (long long)W);
  *p = *y;
  p->shape[y->ndim - 2] = H / kh;
  p->shape[y->ndim - 1] = W / kw;
  *code = *p;
  code->dtype = OF_INT32;
  return OF_OK;
}

/* The backward's grad and code (the forward's pooled shape, an int32 code;
 * placed as above) and its result: the grad of the [..., H, W] input. */
static of_status bwd_meta(const a_relu_pool *a, const of_meta *gp, const of_meta *code, bool placed,
                          of_meta *gx) {
  int64_t H = a->in[0], W = a->in[1], kh = a->kernel[0], kw = a->kernel[1];
  int64_t OH = H / kh, OW = W / kw;
  bool fits = gp->ndim >= 2 && code->ndim == gp->ndim && float_dt(gp->dtype) &&
              code->dtype == OF_INT32 && gp->shape[gp->ndim - 2] == OH &&
              gp->shape[gp->ndim - 1] == OW && placed;
  for (int32_t d = 0; fits && d < gp->ndim; d++) fits = gp->shape[d] == code->shape[d];
  if (!fits)
    return of_fail(OF_ERR_SHAPE, "relu_max_pool_backward: grad %s %s and code %s %s do not "
                   "match the record (pooled [..., %lld, %lld], int32 code, on the CPU)",
                   OF_SHAPE_STR(gp), of_dtype_name(gp->dtype), OF_SHAPE_STR(code),
                   of_dtype_name(code->dtype), (long long)OH, (long long)OW);
  *gx = *gp;
  gx->shape[gp->ndim - 2] = H;
  gx->shape[gp->ndim - 1] = W;
  return OF_OK;
}

of_status of_relu_pool_infer(const void *attrs, int32_t nin, const of_meta *ins, of_meta *outs) {
  OF_CHECK(of_relu_pool_check(attrs, (int32_t)sizeof(a_relu_pool), nin));
  return fwd_meta(attrs, &ins[0], true, &outs[0], &outs[1]);
}
of_status of_relu_pool_backward_infer(const void *attrs, int32_t nin, const of_meta *ins, of_meta *outs) {
  OF_CHECK(of_relu_pool_check(attrs, (int32_t)sizeof(a_relu_pool), nin));
  if (nin < 2) return of_fail(OF_ERR_ARG, "relu_max_pool_backward: grad and code are required");
  return bwd_meta(attrs, &ins[0], &ins[1], true, &outs[0]);
}

static of_status fwd(const a_relu_pool *a, of_tensor *y, void **outs) {
  int64_t H = a->in[0], W = a->in[1], kh = a->kernel[0], kw = a->kernel[1];
  of_meta ym = of_meta_of(y), pm, cm;
  OF_CHECK(fwd_meta(a, &ym, of_tensor_is_contiguous(y) && y->storage->device == OF_CPU, &pm, &cm));
  int64_t OH = pm.shape[pm.ndim - 2], OW = pm.shape[pm.ndim - 1], planes = y->numel / (H * W);
  of_tensor *p = NULL, *code = NULL;
  OF_CHECK(of_tensor_new(pm.shape, pm.ndim, pm.dtype, OF_CPU, &p));
  of_status st = of_tensor_new(cm.shape, cm.ndim, cm.dtype, OF_CPU, &code);
  if (st != OF_OK) { of_tensor_release(p); return st; }
  int lanes = lanes_2x2(y->dtype, H, W, kh, kw, OW);
  int nt = plane_threads(planes, y->numel);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t pl = 0; pl < planes; pl++) {
    int32_t *cp = (int32_t *)of_ptr(code) + pl * OH * OW;
    if (y->dtype == OF_FLOAT64)
      fwd_plane_double((const double *)of_ptr(y) + pl * H * W, W, kh, kw, OH, OW,
                       (double *)of_ptr(p) + pl * OH * OW, cp);
    else {
      const float *xp = (const float *)of_ptr(y) + pl * H * W;
      float *pp = (float *)of_ptr(p) + pl * OH * OW;
      if (lanes == 8) fwd2x2_8(xp, OH, OW, pp, cp);
      else if (lanes == 4) fwd2x2_4(xp, OH, OW, pp, cp);
      else fwd_plane_float(xp, W, kh, kw, OH, OW, pp, cp);
    }
  }
  outs[0] = p;
  outs[1] = code;
  return OF_OK;
}

static of_status bwd(const a_relu_pool *a, of_tensor *gp, of_tensor *code, void **outs) {
  int64_t H = a->in[0], W = a->in[1], kh = a->kernel[0], kw = a->kernel[1];
  int64_t OH = H / kh, OW = W / kw;
  of_meta gm = of_meta_of(gp), cm = of_meta_of(code), xm;
  OF_CHECK(bwd_meta(a, &gm, &cm,
                    of_tensor_is_contiguous(gp) && of_tensor_is_contiguous(code) &&
                        gp->storage->device == OF_CPU && code->storage->device == OF_CPU,
                    &xm));
  of_tensor *gx = NULL;
  OF_CHECK(of_tensor_new(xm.shape, xm.ndim, xm.dtype, OF_CPU, &gx));
  int64_t planes = gp->numel / (OH * OW);
  int lanes = lanes_2x2(gp->dtype, H, W, kh, kw, OW);
  int nt = plane_threads(planes, gx->numel);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t pl = 0; pl < planes; pl++) {
    const int32_t *cp = (const int32_t *)of_ptr(code) + pl * OH * OW;
    if (gp->dtype == OF_FLOAT64)
      bwd_plane_double((const double *)of_ptr(gp) + pl * OH * OW, cp, H, W, kh, kw, OH, OW,
                       (double *)of_ptr(gx) + pl * H * W);
    else {
      const float *g = (const float *)of_ptr(gp) + pl * OH * OW;
      float *gxp = (float *)of_ptr(gx) + pl * H * W;
      if (lanes == 8) bwd2x2_8(g, cp, H, OH, OW, gxp);
      else if (lanes == 4) bwd2x2_4(g, cp, H, OH, OW, gxp);
      else bwd_plane_float(g, cp, H, W, kh, kw, OH, OW, gxp);
    }
  }
  outs[0] = gx;
  return OF_OK;
}

of_status of_relu_pool_invoke(of_gnode *n, of_tensor **ins, void **outs) {
  OF_CHECK(of_relu_pool_check(n->attrs, n->attr_size, n->nin));
  const a_relu_pool *a = n->attrs;
  for (int32_t k = 0; k < n->nin; k++)
    if (!ins[k]) return of_fail(OF_ERR_ARG, "relu_max_pool: input %d is missing", (int)k + 1);
  return n->op == OPK_RELU_MAX_POOL ? fwd(a, ins[0], outs) : bwd(a, ins[0], ins[1], outs);
}

/* ---- the pass ---- */

/* the live MaxPoolBackward node reading autograd handle h, or NULL */
static of_gnode *pool_backward_of(of_graph *g, int32_t from, int32_t h) {
  for (int32_t i = from + 1; i < g->nnodes; i++) {
    of_gnode *B = &g->nodes[i];
    if (B->dead || B->nin < 1 || B->in[0] != h) continue;
    if (B->op != OF_OPK_BACKWARD || B->nreal != 1 || B->nout != 1 || B->nin < 2 ||
        strcmp(((const a_backward *)B->attrs)->name, "MaxPoolBackward") != 0)
      return NULL;
    for (int32_t k = 2; k < B->nin; k++)
      if (B->in[k] >= 0) return NULL;
    return B;
  }
  return NULL;
}

/* the window geometry of a max_pool record when its windows tile the input
 * (whether the caller kept the indices is seen from their readers) */
static bool tiling(const a_pool *a, int64_t *kh, int64_t *kw) {
  if (a->nsp != 2 || a->ceil_mode || !(a->has & 1)) return false;
  for (int32_t d = 0; d < 2; d++) {
    if ((a->has & 2) && a->stride[d] != a->kernel[d]) return false;
    if ((a->has & 4) && a->padding[d] != 0) return false;
    if ((a->has & 8) && a->dilation[d] != 1) return false;
  }
  *kh = a->kernel[0];
  *kw = a->kernel[1];
  return *kh >= 1 && *kw >= 1 && *kh * *kw <= TAP_BITS + 1;
}

/* gp * to(p > 0), made by poolmask: the multiply node, its grad operand */
static of_gnode *relu_mask_of(of_graph *g, const int32_t *uses, int32_t m, int32_t p,
                              int32_t *gp, of_gnode **T, of_gnode **G) {
  of_gnode *X = of_graph_sole(g, uses, m, OPK_BINARY);
  if (!X || X->nin != 2 || ((const a_binary *)X->attrs)->op != OF_MUL) return NULL;
  for (int32_t side = 0; side < 2; side++) {
    *T = of_graph_sole(g, uses, X->in[1 - side], OPK_TO_DTYPE);
    if (!*T || (*T)->nin != 1) continue;
    *G = of_graph_sole(g, uses, (*T)->in[0], OPK_BINARY_SCALAR);
    if (!*G || (*G)->nin != 1 || (*G)->in[0] != p) continue;
    const a_binary_scalar *c = (*G)->attrs;
    if (c->op != OF_GT || c->s != 0 || c->reverse) continue;
    *gp = X->in[side];
    return X;
  }
  return NULL;
}

static bool set_attrs(of_gnode *n, int32_t op, const a_relu_pool *a) {
  void *p = realloc(n->attrs, sizeof *a);
  if (!p) return false;
  memcpy(p, a, sizeof *a);
  n->attrs = p;
  n->attr_size = (int32_t)sizeof *a;
  n->op = op;
  n->flags = 0;
  n->needs = n->keep_in = n->keep_out = 0;
  n->handle_nr = -1;
  return true;
}

/* Nodes removed (4 with the backward, 1 without: an eval graph, or a
 * forward whose pool is recomputed for the backward), 0: no match, -1: out
 * of memory. */
static int rewrite(of_graph *g, const int32_t *uses, int32_t mi) {
  of_gnode *M = &g->nodes[mi];
  int64_t kh, kw;
  bool capture = (M->flags & OF_GN_CAPTURE) != 0;
  if (M->dead || M->op != OPK_MAX_POOL || M->nin != 1 || M->nreal != 2 || M->nmut ||
      M->nout != (capture ? 3 : 2) || !tiling(M->attrs, &kh, &kw))
    return 0;
  int32_t r = M->in[0], p = M->out[0], idx = M->out[1], h = capture ? M->out[2] : -1;
  if (r < 0 || p < 0 || (idx >= 0 && uses[idx] != 0) || (h >= 0 && uses[h] > 1)) return 0;
  of_gnode *R = of_graph_sole(g, uses, r, OPK_UNARY);
  if (!R || R->nin != 1 || R->in[0] < 0 || ((const a_unary *)R->attrs)->op != OF_RELU) return 0;
  int32_t y = R->in[0];
  const of_gval *yv = &g->vals[y], *pv = &g->vals[p];
  if ((yv->dtype != OF_FLOAT32 && yv->dtype != OF_FLOAT64) || yv->device != OF_CPU ||
      !of_gval_contiguous(yv) || yv->ndim < 3 || yv->ndim > 4 || pv->ndim != yv->ndim)
    return 0;
  a_relu_pool a = {{kh, kw}, {yv->shape[yv->ndim - 2], yv->shape[yv->ndim - 1]}};
  if (a.in[0] < kh || a.in[1] < kw || pv->shape[pv->ndim - 2] != a.in[0] / kh ||
      pv->shape[pv->ndim - 1] != a.in[1] / kw)
    return 0;
  of_gnode *B = NULL, *X = NULL, *T = NULL, *G = NULL;
  int32_t gp = -1;
  if (h >= 0 && uses[h] == 1) {   /* the backward reads the pool's autograd node */
    B = pool_backward_of(g, mi, h);
    if (!B) return 0;
    X = relu_mask_of(g, uses, B->in[1], p, &gp, &T, &G);
    if (!X || gp < 0) return 0;
    const of_gval *gv = &g->vals[gp], *gx = &g->vals[B->out[0]];
    if (gv->dtype != yv->dtype || gx->dtype != yv->dtype || !of_gval_contiguous(gv) ||
        gv->ndim != pv->ndim || gx->ndim != yv->ndim)
      return 0;
    for (int32_t d = 0; d < yv->ndim; d++)
      if (gv->shape[d] != pv->shape[d] || gx->shape[d] != yv->shape[d]) return 0;
    int32_t xi = (int32_t)(X - g->nodes), bi = (int32_t)(B - g->nodes);
    if (of_graph_written_between(g, gv->root, xi, bi)) return 0;
  }
  /* the code: a fresh int32 value of the pooled shape */
  int32_t code = of_graph_add_value(g, OF_GV_INTERNAL, NULL);
  if (code < 0) return -1;
  of_gval *cv = &g->vals[code];   /* (vals may have moved) */
  const of_gval *pool = &g->vals[p];
  of_gval_set_contiguous(cv, pool);
  cv->dtype = OF_INT32;
  cv->device = pool->device;
  cv->producer = mi;
  if (!set_attrs(M, OPK_RELU_MAX_POOL, &a) || (B && !set_attrs(B, OPK_RELU_MAX_POOL_BACKWARD, &a)))
    return -1;
  M->in[0] = y;
  M->out[1] = code;
  M->nreal = M->nout = 2;
  R->dead = true;
  if (!B) return 1;
  B->in[0] = gp;
  B->in[1] = code;
  B->nin = 2;
  X->dead = T->dead = G->dead = true;
  return 4;
}

of_status of_pass_relupool(of_graph *g, int32_t *removed) {
  *removed = 0;
  if (g->device != OF_CPU) return OF_OK;
  int32_t *uses = of_graph_use_counts(g);
  if (!uses) return of_fail(OF_ERR_OOM, "nn.Graph: relupool: out of memory");
  /* each rewrite only drops readers of values it also drops */
  for (int32_t i = 0; i < g->nnodes; i++) {
    int r = rewrite(g, uses, i);
    if (r < 0) {
      free(uses);
      return of_fail(OF_ERR_OOM, "nn.Graph: relupool: out of memory");
    }
    *removed += r;
  }
  free(uses);
  return OF_OK;
}
