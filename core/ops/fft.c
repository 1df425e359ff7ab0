/* fft.c -- complex views and the discrete Fourier transforms behind
 * flow.fft: view_as_real / view_as_complex (the bridge between complex
 * tensors and their (re, im) float pairs, which is how the Lua side composes
 * complex arithmetic with autograd), and PyTorch's three primitive
 * transforms over a list of dims:
 *
 *   fft_c2c  complex -> complex, forward (e^-) or inverse (e^+) sign
 *   fft_r2c  real -> complex, forward sign, one-sided: the last of the dims
 *            keeps n/2 + 1 entries (rfft, rfftn; ihfft is its conjugate)
 *   fft_c2r  one-sided complex -> real, inverse sign, the last dim's output
 *            size given (irfft, irfftn; hfft is c2r of the conjugate)
 *
 * norm: 0 none, 1 1/sqrt(N), 2 1/N, N the product of the signal sizes
 * (PyTorch's fft_norm_mode). No FFT library is allowed here (FFTW is not
 * among the project's packages), so the kernel is our own: a Stockham
 * autosort mixed-radix FFT (radix 8, 4, 2, 3, 5 and generic odd radices up
 * to 13), Bluestein's chirp-z for sizes with a larger prime factor, plans
 * (factors and twiddles) cached per size, real transforms of even size
 * through a half-size complex FFT. Computed in float64 whatever the dtype;
 * complex64 / float32 results are rounded once at the end.
 * Backward rules are PyTorch's (FunctionsManual.cpp fft_r2c_backward,
 * fft_c2r_backward), written with public ops. */
#include "../internal.h"
#include "../autograd.h"
#include "../device.h"
#include "../dispatch/dispatch.h"
#include "family.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

/* ======================= complex views ======================= */

static of_dtype real_of(of_dtype dt) { return dt == OF_COMPLEX128 ? OF_FLOAT64 : OF_FLOAT32; }
static of_dtype complex_of(of_dtype dt) {
  return dt == OF_FLOAT64 ? OF_COMPLEX128 : OF_COMPLEX64;
}

/* The views' shapes and dtypes, on of_meta: the impls below and the infer
 * hooks (the graph loader's re-inference) share them. Strides and offsets
 * are the real tensor's, checked by the impls only. */

/* view_as_real: a complex input; a trailing dim of 2 in the real dtype */
static of_status view_as_real_meta(const of_meta *x, of_meta *r) {
  if (!of_dtype_is_complex(x->dtype))
    return of_fail(OF_ERR_DTYPE, "view_as_real: input must be complex64 or complex128, got %s "
                   "(shape %s)", OF_DT(x), OF_SHAPE_STR(x));
  if (x->ndim >= OF_MAX_DIMS)
    return of_fail(OF_ERR_SHAPE, "view_as_real: input has %d dims already (shape %s)",
                   (int)x->ndim, OF_SHAPE_STR(x));
  *r = *x;
  r->shape[x->ndim] = 2;
  r->ndim = x->ndim + 1;
  r->dtype = real_of(x->dtype);
  return OF_OK;
}

/* view_as_complex: a float32 / float64 input whose last dim is 2; that dim
 * dropped, in the complex dtype */
static of_status view_as_complex_meta(const of_meta *x, of_meta *r) {
  if (x->dtype != OF_FLOAT32 && x->dtype != OF_FLOAT64)
    return of_fail(OF_ERR_DTYPE, "view_as_complex: input must be float32 or float64, got %s "
                   "(shape %s)", OF_DT(x), OF_SHAPE_STR(x));
  if (x->ndim < 1 || x->shape[x->ndim - 1] != 2)
    return of_fail(OF_ERR_SHAPE, "view_as_complex: the last dim must have size 2 and stride 1 "
                   "(shape %s)", OF_SHAPE_STR(x));
  *r = *x;
  r->ndim = x->ndim - 1;
  r->dtype = complex_of(x->dtype);
  return OF_OK;
}

static of_status view_as_real_impl(of_tensor *x, of_tensor **out) {
  of_meta xm = of_meta_of(x), rm;
  OF_CHECK(view_as_real_meta(&xm, &rm));
  int64_t strides[OF_MAX_DIMS];
  for (int32_t i = 0; i < x->ndim; i++) strides[i] = 2 * x->strides[i];
  strides[x->ndim] = 1;
  of_tensor *v = of_tensor_alias(x, rm.shape, strides, rm.ndim, 2 * x->offset);
  if (!v) return OF_ERR_OOM;
  v->dtype = rm.dtype;
  *out = v;
  return OF_OK;
}

static of_status view_as_complex_impl(of_tensor *x, of_tensor **out) {
  of_meta xm = of_meta_of(x), rm;
  OF_CHECK(view_as_complex_meta(&xm, &rm));
  if (x->strides[x->ndim - 1] != 1)
    return of_fail(OF_ERR_SHAPE, "view_as_complex: the last dim must have size 2 and stride 1 "
                   "(shape %s)", OF_SHAPE_STR(x));
  int64_t strides[OF_MAX_DIMS];
  for (int32_t i = 0; i + 1 < x->ndim; i++) {
    if (x->strides[i] % 2 != 0 && x->shape[i] > 1)
      return of_fail(OF_ERR_SHAPE, "view_as_complex: the stride of dim %d (%lld) is odd "
                     "(shape %s); call contiguous() first", (int)i + 1,
                     (long long)x->strides[i], OF_SHAPE_STR(x));
    strides[i] = x->strides[i] / 2;
  }
  if (x->offset % 2 != 0)
    return of_fail(OF_ERR_SHAPE, "view_as_complex: the storage offset (%lld) is odd (shape %s); "
                   "call contiguous() first", (long long)x->offset, OF_SHAPE_STR(x));
  of_tensor *v = of_tensor_alias(x, rm.shape, strides, rm.ndim, x->offset / 2);
  if (!v) return OF_ERR_OOM;
  v->dtype = rm.dtype;
  *out = v;
  return OF_OK;
}

static of_status view_as_real_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  (void)n;
  if (!g[0]) return OF_OK;
  of_tensor *c = NULL;
  OF_CHECK(of_contiguous(g[0], &c));
  of_status st = of_view_as_complex(c, &gi[0]);
  of_tensor_release(c);
  return st;
}
static const of_grad_def view_as_real_grad = {"ViewAsRealBackward", view_as_real_backward};
static of_status view_as_complex_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  (void)n;
  if (!g[0]) return OF_OK;
  return of_view_as_real(g[0], &gi[0]);
}
static const of_grad_def view_as_complex_grad = {"ViewAsComplexBackward",
                                                 view_as_complex_backward};

/* The result shares x's storage but reads it in another dtype, so it gets
 * no view_base (an in-place write through it is not rebased onto x's
 * history; the storage's version counter still guards saved tensors). */
static of_status finish_cview(const of_grad_def *def, of_tensor *x, of_tensor **out) {
  if (!of_grad_needed(&x, 1)) return OF_OK;
  of_node *n;
  of_status st = of_record(def, &x, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    *out = NULL;
  }
  return st;
}
static of_status view_as_real_body(of_tensor *x, of_tensor **out) {
  OF_CHECK(view_as_real_impl(x, out));
  return finish_cview(&view_as_real_grad, x, out);
}
static of_status view_as_complex_body(of_tensor *x, of_tensor **out) {
  OF_CHECK(view_as_complex_impl(x, out));
  return finish_cview(&view_as_complex_grad, x, out);
}
static of_status pack_cview(int32_t op, of_tensor *x, of_tensor **out) {
  a_i1 a = {0, 0};
  return OF_RECORD(op, a, &x, 1, out, 1);
}
of_status of_view_as_real(of_tensor *x, of_tensor **out) {
  OF_DISPATCH(view_as_real_body(x, out), pack_cview(OPK_VIEW_AS_REAL, x, out));
}
of_status of_view_as_complex(of_tensor *x, of_tensor **out) {
  OF_DISPATCH(view_as_complex_body(x, out), pack_cview(OPK_VIEW_AS_COMPLEX, x, out));
}
static of_status run_view_as_real(const of_oprec *n, of_tensor **ins, void **outs) {
  (void)n;
  OF_RUN1(of_view_as_real(ins[0], OF_R));
}
static of_status run_view_as_complex(const of_oprec *n, of_tensor **ins, void **outs) {
  (void)n;
  OF_RUN1(of_view_as_complex(ins[0], OF_R));
}
static of_status infer_view_as_real(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  (void)nin;
  return view_as_real_meta(&ins[0], &outs[0]);
}
static of_status infer_view_as_complex(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  (void)nin;
  return view_as_complex_meta(&ins[0], &outs[0]);
}
OF_OP_IMPL_INFER(VIEW_AS_REAL, run_view_as_real, NULL, NULL, NULL, infer_view_as_real);
OF_OP_IMPL_INFER(VIEW_AS_COMPLEX, run_view_as_complex, NULL, NULL, NULL, infer_view_as_complex);

/* ======================= the 1-D kernel ======================= */

#define FFT_PI 3.14159265358979323846
typedef struct { double re, im; } cpx;
static inline cpx cadd(cpx a, cpx b) { return (cpx){a.re + b.re, a.im + b.im}; }
static inline cpx csub(cpx a, cpx b) { return (cpx){a.re - b.re, a.im - b.im}; }
static inline cpx cmul(cpx a, cpx b) {
  return (cpx){a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
static inline cpx cconj(cpx a) { return (cpx){a.re, -a.im}; }
static inline cpx cmuli(cpx a) { return (cpx){-a.im, a.re}; }   /* i a */
/* e^{-2 pi i k / n}, k reduced first so the argument stays small */
static cpx unit_root(int64_t k, int64_t n) {
  k %= n;
  if (k < 0) k += n;
  double a = -2.0 * FFT_PI * (double)k / (double)n;
  return (cpx){cos(a), sin(a)};
}

enum { MAX_FACTORS = 64, MAX_RADIX = 13 };
typedef struct plan {
  int64_t n;
  int32_t kind;              /* 0 complex, 1 real (half-size complex + post-processing) */
  int32_t nf;
  int32_t radix[MAX_FACTORS];
  cpx *tw;                   /* per stage: tw[k * (p - 1) + t - 1] = w_len^{k t} */
  int64_t tw_off[MAX_FACTORS];
  cpx *roots[MAX_RADIX + 1]; /* generic radices: the p-th roots of unity */
  /* Bluestein (a prime factor above MAX_RADIX) */
  int64_t m;
  const struct plan *sub;
  cpx *chirp, *bfft;
  /* real plans: the half-size complex plan and e^{-2 pi i k / n}, k <= n/2 */
  const struct plan *half, *full;   /* n even: n/2; n odd: the complex plan of n */
  cpx *rtw;
  struct plan *next;
} plan;

static plan *plans;
static void fft_exec(const plan *p, cpx *x, cpx *work);
static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;
static const plan *get_plan(int64_t n, int32_t kind);

static bool factorize(int64_t n, plan *p) {
  p->nf = 0;
  while (n % 8 == 0) p->radix[p->nf++] = 8, n /= 8;   /* fewer passes over memory */
  while (n % 4 == 0) p->radix[p->nf++] = 4, n /= 4;
  while (n % 2 == 0) p->radix[p->nf++] = 2, n /= 2;
  for (int32_t r = 3; r <= MAX_RADIX; r += 2)
    while (n % r == 0) p->radix[p->nf++] = r, n /= r;
  return n == 1;
}

static int64_t workspace_of(const plan *p) {   /* complex elements a call needs */
  if (p->kind == 1) return p->half ? p->half->n + workspace_of(p->half) : p->n + workspace_of(p->full);
  if (p->sub) return 2 * p->m + workspace_of(p->sub);
  return p->n;
}

static plan *make_plan(int64_t n, int32_t kind) {
  plan *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n;
  p->kind = kind;
  if (kind == 1) {
    if (n % 2 == 0 && n >= 2) {
      p->half = get_plan(n / 2, 0);
      p->rtw = malloc(sizeof(cpx) * (size_t)(n / 2 + 1));
      if (!p->half || !p->rtw) goto fail;
      for (int64_t k = 0; k <= n / 2; k++) p->rtw[k] = unit_root(k, n);
    } else {
      p->full = get_plan(n, 0);
      if (!p->full) goto fail;
    }
    return p;
  }
  if (factorize(n, p)) {
    int64_t total = 0, len = n;
    for (int32_t s = 0; s < p->nf; s++) {
      p->tw_off[s] = total;
      total += (len / p->radix[s]) * (p->radix[s] - 1);
      len /= p->radix[s];
    }
    p->tw = malloc(sizeof(cpx) * (size_t)(total > 0 ? total : 1));
    if (!p->tw) goto fail;
    len = n;
    for (int32_t s = 0; s < p->nf; s++) {
      int32_t r = p->radix[s];
      int64_t m = len / r;
      cpx *t = p->tw + p->tw_off[s];
      for (int64_t k = 0; k < m; k++)
        for (int32_t j = 1; j < r; j++) t[k * (r - 1) + j - 1] = unit_root(k * j, len);
      if (r > 5 && r != 8 && !p->roots[r]) {
        p->roots[r] = malloc(sizeof(cpx) * (size_t)r);
        if (!p->roots[r]) goto fail;
        for (int32_t j = 0; j < r; j++) p->roots[r][j] = unit_root(j, r);
      }
      len = m;
    }
    return p;
  }
  /* Bluestein: X_k = c_k sum_j (x_j c_j) conj(c_{k-j}), c_k = e^{-i pi k^2 / n} */
  p->nf = 0;
  p->m = 1;
  while (p->m < 2 * n - 1) p->m *= 2;
  p->sub = get_plan(p->m, 0);
  p->chirp = malloc(sizeof(cpx) * (size_t)n);
  p->bfft = calloc((size_t)p->m, sizeof(cpx));
  cpx *work = malloc(sizeof(cpx) * (size_t)(p->m + workspace_of(p->sub ? p->sub : p)));
  if (!p->sub || !p->chirp || !p->bfft || !work) {
    free(work);
    goto fail;
  }
  for (int64_t k = 0; k < n; k++) {
    /* k^2 mod 2n keeps the angle exact for large k */
    int64_t k2 = (int64_t)(((unsigned __int128)k * (unsigned __int128)k) % (unsigned __int128)(2 * n));
    double a = -FFT_PI * (double)k2 / (double)n;
    p->chirp[k] = (cpx){cos(a), sin(a)};
  }
  p->bfft[0] = cconj(p->chirp[0]);
  for (int64_t k = 1; k < n; k++) p->bfft[k] = p->bfft[p->m - k] = cconj(p->chirp[k]);
  fft_exec(p->sub, p->bfft, work);
  free(work);
  return p;
fail:
  free(p->tw);
  free(p->rtw);
  free(p->chirp);
  free(p->bfft);
  for (int32_t r = 0; r <= MAX_RADIX; r++) free(p->roots[r]);
  free(p);
  return NULL;
}

/* Plans live for the process (a few per size in use); lookups take a lock,
 * building happens outside it and the first finished one wins. */
static const plan *get_plan(int64_t n, int32_t kind) {
  pthread_mutex_lock(&plans_lock);
  for (plan *p = plans; p; p = p->next)
    if (p->n == n && p->kind == kind) {
      pthread_mutex_unlock(&plans_lock);
      return p;
    }
  pthread_mutex_unlock(&plans_lock);
  plan *p = make_plan(n, kind);
  if (!p) return NULL;
  pthread_mutex_lock(&plans_lock);
  for (plan *q = plans; q; q = q->next)
    if (q->n == n && q->kind == kind) {   /* another thread was first: keep one (leak this) */
      pthread_mutex_unlock(&plans_lock);
      return q;
    }
  p->next = plans;
  plans = p;
  pthread_mutex_unlock(&plans_lock);
  return p;
}

/* One Stockham stage (decimation in frequency, natural order out): length
 * len = r m at stride s; y[q + s (r k + t)] = w_len^{k t} sum_j x[q + s (k + j m)] w_r^{j t}. */
static void stage(const plan *p, int32_t si, int64_t len, int64_t s, const cpx *restrict x,
                  cpx *restrict y) {
  int32_t r = p->radix[si];
  int64_t m = len / r;
  const cpx *tw = p->tw + p->tw_off[si];
  switch (r) {
    case 2:
      for (int64_t k = 0; k < m; k++) {
        cpx w = tw[k];
        for (int64_t q = 0; q < s; q++) {
          cpx a = x[q + s * k], b = x[q + s * (k + m)];
          y[q + s * (2 * k)] = cadd(a, b);
          y[q + s * (2 * k + 1)] = cmul(csub(a, b), w);
        }
      }
      break;
    case 4:
      for (int64_t k = 0; k < m; k++) {
        cpx w1 = tw[3 * k], w2 = tw[3 * k + 1], w3 = tw[3 * k + 2];
        for (int64_t q = 0; q < s; q++) {
          cpx a0 = x[q + s * k], a1 = x[q + s * (k + m)], a2 = x[q + s * (k + 2 * m)],
              a3 = x[q + s * (k + 3 * m)];
          cpx t0 = cadd(a0, a2), t1 = csub(a0, a2), t2 = cadd(a1, a3), t3 = csub(a1, a3);
          cpx it3 = cmuli(t3);
          cpx *o = y + q + s * (4 * k);
          o[0] = cadd(t0, t2);
          o[s] = cmul(csub(t1, it3), w1);
          o[2 * s] = cmul(csub(t0, t2), w2);
          o[3 * s] = cmul(cadd(t1, it3), w3);
        }
      }
      break;
    case 8: {
      const double h = 0.70710678118654752440;   /* sqrt(1/2) */
      for (int64_t k = 0; k < m; k++) {
        const cpx *w = tw + 7 * k;
        for (int64_t q = 0; q < s; q++) {
          cpx a[8];
          for (int32_t j = 0; j < 8; j++) a[j] = x[q + s * (k + j * m)];
          /* two 4-point DFTs (even and odd j), then the radix-2 step */
          cpx e0 = cadd(a[0], a[4]), e1 = csub(a[0], a[4]), e2 = cadd(a[2], a[6]), e3 = csub(a[2], a[6]);
          cpx o0 = cadd(a[1], a[5]), o1 = csub(a[1], a[5]), o2 = cadd(a[3], a[7]), o3 = csub(a[3], a[7]);
          cpx E[4] = {cadd(e0, e2), csub(e1, cmuli(e3)), csub(e0, e2), cadd(e1, cmuli(e3))};
          cpx O[4] = {cadd(o0, o2), csub(o1, cmuli(o3)), csub(o0, o2), cadd(o1, cmuli(o3))};
          /* w8^t O_t: w8 = (h, -h), w8^2 = -i, w8^3 = (-h, -h) */
          O[1] = (cpx){h * (O[1].re + O[1].im), h * (O[1].im - O[1].re)};
          O[2] = (cpx){O[2].im, -O[2].re};
          O[3] = (cpx){h * (O[3].im - O[3].re), -h * (O[3].re + O[3].im)};
          cpx *o = y + q + s * (8 * k);
          o[0] = cadd(E[0], O[0]);
          for (int32_t t = 1; t < 4; t++) o[t * s] = cmul(cadd(E[t], O[t]), w[t - 1]);
          for (int32_t t = 0; t < 4; t++) o[(t + 4) * s] = cmul(csub(E[t], O[t]), w[t + 3]);
        }
      }
      break;
    }
    case 3: {
      const double h = 0.86602540378443864676;   /* sqrt(3) / 2 */
      for (int64_t k = 0; k < m; k++) {
        cpx w1 = tw[2 * k], w2 = tw[2 * k + 1];
        for (int64_t q = 0; q < s; q++) {
          cpx a0 = x[q + s * k], a1 = x[q + s * (k + m)], a2 = x[q + s * (k + 2 * m)];
          cpx t = cadd(a1, a2), d = csub(a1, a2);
          cpx c = {a0.re - 0.5 * t.re, a0.im - 0.5 * t.im};
          cpx e = {h * d.im, -h * d.re};   /* -i h d */
          cpx *o = y + q + s * (3 * k);
          o[0] = cadd(a0, t);
          o[s] = cmul(cadd(c, e), w1);
          o[2 * s] = cmul(csub(c, e), w2);
        }
      }
      break;
    }
    case 5: {
      const double c1 = 0.30901699437494742410, c2 = -0.80901699437494742410;   /* cos 2pi/5, 4pi/5 */
      const double s1 = 0.95105651629515357212, s2 = 0.58778525229247312917;    /* sin 2pi/5, 4pi/5 */
      for (int64_t k = 0; k < m; k++) {
        const cpx *w = tw + 4 * k;
        for (int64_t q = 0; q < s; q++) {
          cpx a0 = x[q + s * k], a1 = x[q + s * (k + m)], a2 = x[q + s * (k + 2 * m)],
              a3 = x[q + s * (k + 3 * m)], a4 = x[q + s * (k + 4 * m)];
          cpx b1 = cadd(a1, a4), b2 = cadd(a2, a3), d1 = csub(a1, a4), d2 = csub(a2, a3);
          cpx r1 = {a0.re + c1 * b1.re + c2 * b2.re, a0.im + c1 * b1.im + c2 * b2.im};
          cpx r2 = {a0.re + c2 * b1.re + c1 * b2.re, a0.im + c2 * b1.im + c1 * b2.im};
          /* -i (s1 d1 + s2 d2) and -i (s2 d1 - s1 d2) */
          cpx i1 = {s1 * d1.im + s2 * d2.im, -(s1 * d1.re + s2 * d2.re)};
          cpx i2 = {s2 * d1.im - s1 * d2.im, -(s2 * d1.re - s1 * d2.re)};
          cpx *o = y + q + s * (5 * k);
          o[0] = cadd(a0, cadd(b1, b2));
          o[s] = cmul(cadd(r1, i1), w[0]);
          o[2 * s] = cmul(cadd(r2, i2), w[1]);
          o[3 * s] = cmul(csub(r2, i2), w[2]);
          o[4 * s] = cmul(csub(r1, i1), w[3]);
        }
      }
      break;
    }
    default: {
      const cpx *root = p->roots[r];
      for (int64_t k = 0; k < m; k++) {
        const cpx *w = tw + (r - 1) * k;
        for (int64_t q = 0; q < s; q++) {
          cpx a[MAX_RADIX];
          for (int32_t j = 0; j < r; j++) a[j] = x[q + s * (k + j * m)];
          for (int32_t t = 0; t < r; t++) {
            cpx acc = a[0];
            for (int32_t j = 1; j < r; j++) acc = cadd(acc, cmul(a[j], root[(j * t) % r]));
            y[q + s * (r * k + t)] = t ? cmul(acc, w[t - 1]) : acc;
          }
        }
      }
    }
  }
}

/* In-place forward transform of x[0..n); work holds workspace_of(p). */
static void fft_exec(const plan *p, cpx *x, cpx *work) {
  int64_t n = p->n;
  if (p->sub) {   /* Bluestein */
    int64_t m = p->m;
    cpx *a = work, *rest = work + m;
    for (int64_t k = 0; k < n; k++) a[k] = cmul(x[k], p->chirp[k]);
    for (int64_t k = n; k < m; k++) a[k] = (cpx){0, 0};
    fft_exec(p->sub, a, rest);
    for (int64_t k = 0; k < m; k++) a[k] = cconj(cmul(a[k], p->bfft[k]));
    fft_exec(p->sub, a, rest);   /* inverse as conj(fft(conj)) */
    double inv = 1.0 / (double)m;
    for (int64_t k = 0; k < n; k++) {
      cpx v = cconj(a[k]);
      v.re *= inv, v.im *= inv;
      x[k] = cmul(v, p->chirp[k]);
    }
    return;
  }
  cpx *src = x, *dst = work;
  int64_t len = n, s = 1;
  for (int32_t si = 0; si < p->nf; si++) {
    stage(p, si, len, s, src, dst);
    len /= p->radix[si];
    s *= p->radix[si];
    cpx *t = src;
    src = dst;
    dst = t;
  }
  if (src != x) memcpy(x, src, sizeof(cpx) * (size_t)n);
}

static void fft_line(const plan *p, cpx *x, cpx *work, bool inverse) {
  int64_t n = p->n;
  if (inverse)
    for (int64_t k = 0; k < n; k++) x[k].im = -x[k].im;
  fft_exec(p, x, work);
  if (inverse)
    for (int64_t k = 0; k < n; k++) x[k].im = -x[k].im;
}

/* real x[0..n) -> X[0..n/2] (forward); rp is the real plan of n */
static void rfft_line(const plan *rp, const double *x, cpx *out, cpx *work) {
  int64_t n = rp->n;
  if (rp->half) {
    int64_t h = n / 2;
    cpx *z = work, *rest = work + h;
    for (int64_t j = 0; j < h; j++) z[j] = (cpx){x[2 * j], x[2 * j + 1]};
    fft_exec(rp->half, z, rest);
    for (int64_t k = 0; k <= h; k++) {
      cpx a = z[k % h], b = cconj(z[(h - k) % h]);
      cpx e = {0.5 * (a.re + b.re), 0.5 * (a.im + b.im)};
      cpx d = {0.5 * (a.re - b.re), 0.5 * (a.im - b.im)};   /* o = d / i = -i d */
      cpx o = {d.im, -d.re};
      out[k] = cadd(e, cmul(rp->rtw[k], o));
    }
    return;
  }
  const plan *p = rp->full;
  cpx *z = work, *rest = work + n;
  for (int64_t j = 0; j < n; j++) z[j] = (cpx){x[j], 0};
  fft_exec(p, z, rest);
  for (int64_t k = 0; k <= n / 2; k++) out[k] = z[k];
}

/* X[0..n/2] -> real x[0..n) (inverse sign, unnormalised); the imaginary
 * parts of X_0 and X_{n/2} (n even) are ignored, as pocketfft does. */
static void irfft_line(const plan *rp, const cpx *X, double *x, cpx *work) {
  int64_t n = rp->n;
  if (rp->half) {
    int64_t h = n / 2;
    cpx *z = work, *rest = work + h;
    for (int64_t k = 0; k < h; k++) {
      cpx a = X[k], b = cconj(X[h - k]);
      if (k == 0) a.im = 0, b.im = 0;
      cpx e = cadd(a, b);
      cpx o = cmul(csub(a, b), cconj(rp->rtw[k]));
      cpx v = cadd(e, cmuli(o));
      z[k] = cconj(v);   /* inverse through the forward plan: conj in and out */
    }
    fft_exec(rp->half, z, rest);
    for (int64_t j = 0; j < h; j++) x[2 * j] = z[j].re, x[2 * j + 1] = -z[j].im;
    return;
  }
  const plan *p = rp->full;
  cpx *z = work, *rest = work + n;
  z[0] = (cpx){X[0].re, 0};
  for (int64_t k = 1; k <= n / 2; k++) {
    z[k] = X[k];
    z[n - k] = cconj(X[k]);
  }
  for (int64_t k = 0; k < n; k++) z[k].im = -z[k].im;
  fft_exec(p, z, rest);
  for (int64_t j = 0; j < n; j++) x[j] = z[j].re;
}

/* ======================= lines of a tensor ======================= */

enum { BLOCK = 8 };   /* lines gathered together along a strided axis */

typedef struct {
  int64_t outer, len, inner;   /* the axis: data[(o * len + l) * inner + i] */
} axis_t;
static axis_t axis_of(const int64_t *shape, int32_t ndim, int32_t d) {
  axis_t a = {1, shape[d], 1};
  for (int32_t i = 0; i < d; i++) a.outer *= shape[i];
  for (int32_t i = d + 1; i < ndim; i++) a.inner *= shape[i];
  return a;
}

static int32_t threads_for(int64_t work) {
  int32_t t = of_threads();
  return work < 65536 || t < 1 ? 1 : t;
}

/* complex -> complex along one axis of a contiguous complex128 buffer */
static of_status c2c_axis(cpx *data, axis_t ax, bool inverse) {
  if (ax.len <= 1 || ax.outer * ax.inner == 0) return OF_OK;
  const plan *p = get_plan(ax.len, 0);
  if (!p) return of_fail(OF_ERR_OOM, "fft: out of memory planning a transform of size %lld",
                         (long long)ax.len);
  int64_t ws = workspace_of(p), blocks_per = (ax.inner + BLOCK - 1) / BLOCK;
  int64_t nblocks = ax.outer * blocks_per;
  int32_t nt = threads_for(ax.len * ax.outer * ax.inner);
  int failed = 0;
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : failed)
  {
    cpx *buf = malloc(sizeof(cpx) * (size_t)(ax.len * BLOCK + ws));
    if (!buf) failed = 1;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
      if (!buf) continue;
      int64_t o = b / blocks_per, i0 = (b % blocks_per) * BLOCK;
      int64_t nb = ax.inner - i0 < BLOCK ? ax.inner - i0 : BLOCK;
      cpx *base = data + o * ax.len * ax.inner + i0, *work = buf + ax.len * BLOCK;
      if (ax.inner == 1) {
        fft_line(p, base, work, inverse);
        continue;
      }
      for (int64_t l = 0; l < ax.len; l++)
        for (int64_t j = 0; j < nb; j++) buf[j * ax.len + l] = base[l * ax.inner + j];
      for (int64_t j = 0; j < nb; j++) fft_line(p, buf + j * ax.len, work, inverse);
      for (int64_t l = 0; l < ax.len; l++)
        for (int64_t j = 0; j < nb; j++) base[l * ax.inner + j] = buf[j * ax.len + l];
    }
    free(buf);
  }
  return failed ? of_fail(OF_ERR_OOM, "fft: out of memory (workspace)") : OF_OK;
}

/* One real transform along one axis (contiguous), blocks of BLOCK lines
 * gathered into a workspace: forward (rfft) real [.., n, ..] -> complex
 * [.., n/2+1, ..]; backward (irfft) complex [.., n/2+1, ..] -> real
 * [.., n, ..] (ax.len = n, the real length, both ways). */
static of_status real_axis(const void *in, void *out, axis_t ax, int forward) {
  const char *op = forward ? "rfft" : "irfft";
  int64_t n = ax.len, h1 = n / 2 + 1;
  if (ax.outer * ax.inner == 0) return OF_OK;
  const plan *rp = get_plan(n, 1);
  if (!rp) return of_fail(OF_ERR_OOM, "%s: out of memory planning size %lld", op, (long long)n);
  int64_t ws = workspace_of(rp);
  int64_t blocks_per = (ax.inner + BLOCK - 1) / BLOCK, nblocks = ax.outer * blocks_per;
  int32_t nt = threads_for(n * ax.outer * ax.inner);
  int failed = 0;
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : failed)
  {
    double *line = malloc(sizeof(double) * (size_t)(n * BLOCK) + sizeof(cpx) * (size_t)(h1 * BLOCK + ws));
    if (!line) failed = 1;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
      if (!line) continue;
      cpx *spec = (cpx *)(line + n * BLOCK), *work = spec + h1 * BLOCK;
      int64_t o = b / blocks_per, i0 = (b % blocks_per) * BLOCK;
      int64_t nb = ax.inner - i0 < BLOCK ? ax.inner - i0 : BLOCK;
      if (forward) {
        const double *src = (const double *)in + o * n * ax.inner + i0;
        cpx *dst = (cpx *)out + o * h1 * ax.inner + i0;
        for (int64_t l = 0; l < n; l++)
          for (int64_t j = 0; j < nb; j++) line[j * n + l] = src[l * ax.inner + j];
        for (int64_t j = 0; j < nb; j++) rfft_line(rp, line + j * n, spec + j * h1, work);
        for (int64_t l = 0; l < h1; l++)
          for (int64_t j = 0; j < nb; j++) dst[l * ax.inner + j] = spec[j * h1 + l];
      } else {
        const cpx *src = (const cpx *)in + o * h1 * ax.inner + i0;
        double *dst = (double *)out + o * n * ax.inner + i0;
        for (int64_t l = 0; l < h1; l++)
          for (int64_t j = 0; j < nb; j++) spec[j * h1 + l] = src[l * ax.inner + j];
        for (int64_t j = 0; j < nb; j++) irfft_line(rp, spec + j * h1, line + j * n, work);
        for (int64_t l = 0; l < n; l++)
          for (int64_t j = 0; j < nb; j++) dst[l * ax.inner + j] = line[j * n + l];
      }
    }
    free(line);
  }
  return failed ? of_fail(OF_ERR_OOM, "%s: out of memory (workspace)", op) : OF_OK;
}

static void scale_buf(double *v, int64_t n, double s) {
  if (s == 1.0) return;
  for (int64_t i = 0; i < n; i++) v[i] *= s;
}
static double norm_scale(int32_t norm, double N) {
  return norm == 1 ? 1.0 / sqrt(N) : norm == 2 ? 1.0 / N : 1.0;
}

/* ======================= the ops ======================= */

/* kind: 0 c2c, 1 r2c, 2 c2r */
static const char *const kind_name[3] = {"fft_c2c", "fft_r2c", "fft_c2r"};

/* The transform's checks and its result (the one-sided last dim of r2c,
 * c2r's given output size, the result dtype), on of_meta: the body, both
 * kernels' allocations and the infer hook (the graph loader) share it.
 * d: the dims, 0-based. */
static of_status fft_plan(int32_t kind, const of_meta *x, const int32_t *dims, int32_t ndims,
                          int32_t norm, int64_t last_size, int32_t *d, of_meta *res) {
  const char *op = kind_name[kind];
  if (kind == 1 ? !(x->dtype == OF_FLOAT32 || x->dtype == OF_FLOAT64)
                : !of_dtype_is_complex(x->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: input must be %s, got %s (shape %s)", op,
                   kind == 1 ? "float32 or float64" : "complex64 or complex128", OF_DT(x),
                   OF_SHAPE_STR(x));
  if (ndims < 1 || ndims > x->ndim)
    return of_fail(OF_ERR_ARG, "%s: %d dims for an input of %d dims (shape %s)", op, (int)ndims,
                   (int)x->ndim, OF_SHAPE_STR(x));
  if (norm < 0 || norm > 2) return of_fail(OF_ERR_ARG, "%s: unknown norm mode %d", op, (int)norm);
  bool seen[OF_MAX_DIMS] = {0};
  for (int32_t i = 0; i < ndims; i++) {
    OF_CHECK(of_norm_dim(op, dims[i], x->ndim, &d[i]));
    if (seen[d[i]])
      return of_fail(OF_ERR_ARG, "%s: dim %d repeated (shape %s)", op, (int)d[i] + 1,
                     OF_SHAPE_STR(x));
    seen[d[i]] = true;
  }
  int32_t last = d[ndims - 1];
  if (kind == 2) {
    if (last_size < 1 || x->shape[last] != last_size / 2 + 1)
      return of_fail(OF_ERR_SHAPE, "%s: output size %lld along dim %d needs %lld input entries, "
                     "got %lld (shape %s)", op, (long long)last_size, (int)last + 1,
                     (long long)(last_size / 2 + 1), (long long)x->shape[last], OF_SHAPE_STR(x));
  }
  for (int32_t i = 0; i < ndims; i++)
    if (x->shape[d[i]] < 1 && !(kind == 2 && d[i] == last))
      return of_fail(OF_ERR_SHAPE, "%s: invalid number of data points (0) along dim %d "
                     "(shape %s)", op, (int)d[i] + 1, OF_SHAPE_STR(x));
  *res = *x;
  if (kind == 1) res->shape[last] = x->shape[last] / 2 + 1;
  if (kind == 2) res->shape[last] = last_size;
  res->dtype = kind == 2 ? real_of(x->dtype) : kind == 1 ? complex_of(x->dtype) : x->dtype;
  return OF_OK;
}

static of_status fft_cpu(int32_t kind, of_tensor *x, const int32_t *d, int32_t ndims,
                         int32_t forward, int32_t norm, const of_meta *rm, of_tensor **out) {
  int32_t last = d[ndims - 1];
  const int64_t *oshape = rm->shape;
  double N = 1;
  for (int32_t i = 0; i < ndims; i++) N *= (double)(kind == 2 ? oshape[d[i]] : x->shape[d[i]]);
  of_dtype res_dt = rm->dtype;
  of_tensor *in = NULL, *work = NULL, *res = NULL;
  of_status st = of_dense(x, kind == 1 ? OF_FLOAT64 : OF_COMPLEX128, &in);
  if (st != OF_OK) return st;
  if (kind == 0) {
    /* in place on a private complex128 copy */
    if (in == x) {
      of_tensor_release(in);
      in = NULL;
      st = of_clone_data(x, &in);
    }
    for (int32_t i = 0; st == OF_OK && i < ndims; i++)
      st = c2c_axis((cpx *)of_ptr(in), axis_of(in->shape, in->ndim, d[i]), !forward);
    if (st == OF_OK) scale_buf((double *)of_ptr(in), 2 * in->numel, norm_scale(norm, N));
    work = in;
    in = NULL;
  } else if (kind == 1) {
    st = of_tensor_new(oshape, x->ndim, OF_COMPLEX128, OF_CPU, &work);
    if (st == OF_OK)
      st = real_axis(of_ptr(in), of_ptr(work), axis_of(in->shape, in->ndim, last), 1);
    for (int32_t i = 0; st == OF_OK && i + 1 < ndims; i++)
      st = c2c_axis((cpx *)of_ptr(work), axis_of(oshape, x->ndim, d[i]), false);
    if (st == OF_OK) scale_buf((double *)of_ptr(work), 2 * work->numel, norm_scale(norm, N));
  } else {
    if (in == x) {
      of_tensor_release(in);
      in = NULL;
      st = of_clone_data(x, &in);
    }
    for (int32_t i = 0; st == OF_OK && i + 1 < ndims; i++)
      st = c2c_axis((cpx *)of_ptr(in), axis_of(in->shape, in->ndim, d[i]), true);
    if (st == OF_OK) st = of_tensor_new(oshape, x->ndim, OF_FLOAT64, OF_CPU, &work);
    if (st == OF_OK)
      st = real_axis(of_ptr(in), of_ptr(work), axis_of(oshape, x->ndim, last), 0);
    if (st == OF_OK) scale_buf((double *)of_ptr(work), work->numel, norm_scale(norm, N));
  }
  of_tensor_release(in);
  if (st != OF_OK) {
    of_tensor_release(work);
    return st;
  }
  st = of_finish_dtype(work, res_dt, &res);
  if (st == OF_OK) *out = res;
  return st;
}

static of_status fft_compute(int32_t kind, of_tensor *x, const int32_t *d, int32_t ndims,
                             int32_t forward, int32_t norm, int64_t last_size, const of_meta *rm,
                             of_tensor **out) {
  if (of_dev(x) != OF_CPU) {
    OF_ROUTE(kind_name[kind], dev, o, fft, x);
    (void)dev;
    of_tensor *xc = NULL, *res = NULL;
    OF_CHECK(of_contiguous_data(x, &xc));
    of_status st = of_tensor_new_as(kind_name[kind], rm->shape, rm->ndim, rm->dtype, of_dev(x), &res);
    if (st == OF_OK) st = o->fft(kind, xc, d, ndims, forward, norm, last_size, res);
    of_tensor_release(xc);
    if (st != OF_OK) {
      of_tensor_release(res);
      return st;
    }
    *out = res;
    return OF_OK;
  }
  return fft_cpu(kind, x, d, ndims, forward, norm, rm, out);
}

/* ---- autograd ---- */

static of_status fft_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_fft *a = OF_NODE_ATTRS(a_fft, n);
  int32_t last = a->dims[a->ndims - 1];
  if (a->kind == 0)   /* the adjoint of a DFT is the DFT of the other sign */
    return of_fft_c2c(g[0], a->dims, a->ndims, !a->forward, a->norm, &gi[0]);
  if (a->kind == 1) {
    /* zero-pad the one-sided gradient to the input's length, inverse c2c,
     * real part (fft_r2c_backward) */
    int64_t n_in = n->in_meta[0].shape[last], have = g[0]->shape[last];
    of_tensor *r = NULL, *p = NULL, *c = NULL, *f = NULL, *fr = NULL;
    of_status st = of_view_as_real(g[0], &r);
    int32_t nd = g[0]->ndim + 1;
    int64_t pad[2 * OF_MAX_DIMS + 2] = {0};
    /* PyTorch's pad order: last dim first; the signal dim is nd-2-last from the end */
    pad[2 * (nd - 1 - last) + 1] = n_in - have;
    if (st == OF_OK) st = of_pad(r, pad, nd, OF_PAD_CONSTANT, 0.0, &p);
    if (st == OF_OK) st = of_view_as_complex(p, &c);
    if (st == OF_OK) st = of_fft_c2c(c, a->dims, a->ndims, 0, a->norm, &f);
    if (st == OF_OK) st = of_view_as_real(f, &fr);
    if (st == OF_OK) st = of_select(fr, nd - 1, 0, &gi[0]);
    of_tensor_release(r);
    of_tensor_release(p);
    of_tensor_release(c);
    of_tensor_release(f);
    of_tensor_release(fr);
    return st;
  }
  /* c2r: r2c of the gradient, the entries whose mirror images were dropped
   * counted twice (fft_c2r_backward) */
  of_tensor *gc = NULL, *r = NULL, *w = NULL, *wd = NULL, *m = NULL, *mc = NULL;
  of_status st = of_contiguous(g[0], &gc);
  if (st == OF_OK) st = of_fft_r2c(gc, a->dims, a->ndims, a->norm, &r);
  int64_t h1 = a->last_size / 2 + 1, dbl = a->last_size - h1;
  int64_t wshape[OF_MAX_DIMS + 1];
  int32_t nd = g[0]->ndim + 1;
  for (int32_t i = 0; i < nd; i++) wshape[i] = 1;
  wshape[last] = h1;
  if (st == OF_OK) st = of_tensor_new(wshape, nd, g[0]->dtype, OF_CPU, &w);
  if (st == OF_OK) {
    for (int64_t k = 0; k < h1; k++)
      of_store_double(of_ptr(w) + k * of_dtype_size(w->dtype), w->dtype,
                      k >= 1 && k <= dbl ? 2.0 : 1.0);
    st = of_dispatch_constant(w);
  }
  if (st == OF_OK) st = of_to_device(w, of_dev(g[0]), 0, &wd);
  of_tensor *rr = NULL;
  if (st == OF_OK) st = of_view_as_real(r, &rr);
  if (st == OF_OK) st = of_binary(OF_MUL, rr, wd, NULL, &m);
  if (st == OF_OK) st = of_contiguous(m, &mc);
  if (st == OF_OK) st = of_view_as_complex(mc, &gi[0]);
  of_tensor_release(gc);
  of_tensor_release(r);
  of_tensor_release(rr);
  of_tensor_release(w);
  of_tensor_release(wd);
  of_tensor_release(m);
  of_tensor_release(mc);
  return st;
}
static const of_grad_def fft_grads[3] = {
    {"FftC2CBackward", fft_backward}, {"FftR2CBackward", fft_backward},
    {"FftC2RBackward", fft_backward}};

static void fill_rec(a_fft *a, int32_t kind, const int32_t *d, int32_t ndims, int32_t forward,
                     int32_t norm, int64_t last_size) {
  memset(a, 0, sizeof *a);
  a->kind = kind;
  a->ndims = ndims;
  for (int32_t i = 0; i < ndims && i < OF_MAX_DIMS; i++) a->dims[i] = d[i];
  a->forward = forward;
  a->norm = norm;
  a->last_size = last_size;
}

static of_status fft_body(int32_t kind, of_tensor *x, const int32_t *dims, int32_t ndims,
                          int32_t forward, int32_t norm, int64_t last_size, of_tensor **out) {
  int32_t d[OF_MAX_DIMS];
  of_meta xm = of_meta_of(x), rm;
  OF_CHECK(fft_plan(kind, &xm, dims, ndims, norm, last_size, d, &rm));
  OF_CHECK(fft_compute(kind, x, d, ndims, forward, norm, last_size, &rm, out));
  if (!of_grad_needed(&x, 1)) return OF_OK;
  of_node *n;
  of_status st = of_record(&fft_grads[kind], &x, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    *out = NULL;
    return st;
  }
  a_fft a;
  fill_rec(&a, kind, d, ndims, forward, norm, last_size);
  OF_NODE_KEEP(n, kind == 0 ? OPK_FFT_C2C : kind == 1 ? OPK_FFT_R2C : OPK_FFT_C2R, a);
  return OF_OK;
}

static of_status pack_fft(int32_t op, int32_t kind, of_tensor *x, const int32_t *dims,
                          int32_t ndims, int32_t forward, int32_t norm, int64_t last_size,
                          of_tensor **out) {
  a_fft a;
  fill_rec(&a, kind, dims, ndims, forward, norm, last_size);
  return OF_RECORD(op, a, &x, 1, out, 1);
}

of_status of_fft_c2c(of_tensor *x, const int32_t *dims, int32_t ndims, int32_t forward,
                     int32_t norm, of_tensor **out) {
  if (ndims > OF_MAX_DIMS) return of_fail(OF_ERR_ARG, "fft_c2c: %d dims", (int)ndims);
  OF_DISPATCH(fft_body(0, x, dims, ndims, forward != 0, norm, 0, out),
              pack_fft(OPK_FFT_C2C, 0, x, dims, ndims, forward != 0, norm, 0, out));
}
of_status of_fft_r2c(of_tensor *x, const int32_t *dims, int32_t ndims, int32_t norm,
                     of_tensor **out) {
  if (ndims > OF_MAX_DIMS) return of_fail(OF_ERR_ARG, "fft_r2c: %d dims", (int)ndims);
  OF_DISPATCH(fft_body(1, x, dims, ndims, 1, norm, 0, out),
              pack_fft(OPK_FFT_R2C, 1, x, dims, ndims, 1, norm, 0, out));
}
of_status of_fft_c2r(of_tensor *x, const int32_t *dims, int32_t ndims, int32_t norm,
                     int64_t last_size, of_tensor **out) {
  if (ndims > OF_MAX_DIMS) return of_fail(OF_ERR_ARG, "fft_c2r: %d dims", (int)ndims);
  OF_DISPATCH(fft_body(2, x, dims, ndims, 0, norm, last_size, out),
              pack_fft(OPK_FFT_C2R, 2, x, dims, ndims, 0, norm, last_size, out));
}

static of_status run_fft(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_fft);
  OF_NEED(a->ndims >= 1 && a->ndims <= OF_MAX_DIMS, "dims count");
  OF_NEED(a->kind >= 0 && a->kind <= 2, "kind");
  if (a->kind == 0) OF_RUN1(of_fft_c2c(ins[0], a->dims, a->ndims, a->forward, a->norm, OF_R));
  if (a->kind == 1) OF_RUN1(of_fft_r2c(ins[0], a->dims, a->ndims, a->norm, OF_R));
  OF_RUN1(of_fft_c2r(ins[0], a->dims, a->ndims, a->norm, a->last_size, OF_R));
}
static void describe_fft(const void *p, char *b, size_t c) {
  const a_fft *a = p;
  of_catf(b, c, "dims=");
  for (int32_t i = 0; i < a->ndims && i < OF_MAX_DIMS; i++)
    of_catf(b, c, "%s%d", i ? "," : "", (int)a->dims[i] + 1);
  of_catf(b, c, " norm=%d%s", (int)a->norm, a->kind == 0 && !a->forward ? " inverse" : "");
  if (a->kind == 2) of_catf(b, c, " n=%lld", (long long)a->last_size);
}
/* a loaded node: run_fft's record checks, then the body's plan */
static of_status infer_fft(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_fft *a = p;
  (void)nin;
  if (a->kind < 0 || a->kind > 2 || a->ndims < 1 || a->ndims > OF_MAX_DIMS)
    return of_fail(OF_ERR_ARG, "fft: kind %d with %d dims", (int)a->kind, (int)a->ndims);
  int32_t d[OF_MAX_DIMS];
  return fft_plan(a->kind, &ins[0], a->dims, a->ndims, a->norm, a->kind == 2 ? a->last_size : 0, d,
                  &outs[0]);
}
OF_OP_IMPL_INFER(FFT_C2C, run_fft, NULL, NULL, describe_fft, infer_fft);
OF_OP_IMPL_INFER(FFT_R2C, run_fft, NULL, NULL, describe_fft, infer_fft);
OF_OP_IMPL_INFER(FFT_C2R, run_fft, NULL, NULL, describe_fft, infer_fft);
