/* C API tests for core/ops/conv.c and core/ops/pool.c: forward results
 * against naive loops (groups, stride, padding, dilation, the 1x1 path, both
 * batch strategies), conv_transpose and the weight grad as adjoints of conv,
 * pools against hand-computed values, errors as statuses, and no leaked
 * temporaries (current_bytes back to where it started). */
#include <oneflow/oneflow.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      failures++;                                                               \
    }                                                                           \
  } while (0)

static int64_t current(void) { return of_memory_stats_get(OF_CPU)->current_bytes; }

static of_tensor *filled(const int64_t *shape, int32_t nd, of_dtype dt, unsigned seed) {
  int64_t n = 1;
  for (int32_t i = 0; i < nd; i++) n *= shape[i];
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = (double)((seed >> 16) % 13) - 6;
  }
  of_tensor *t = NULL;
  CHECK(of_from_doubles(v, shape, nd, dt, &t) == OF_OK);
  free(v);
  return t;
}

static double *values(of_tensor *t) {
  int64_t n = of_tensor_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  of_tensor_to_doubles(t, v, n);
  return v;
}

/* naive 2-D conv: x [N, CI, H, W], w [CO, CI/G, KH, KW] */
static double naive_err(of_tensor *y, of_tensor *x, of_tensor *w, of_tensor *b,
                        const int64_t *s, const int64_t *p, const int64_t *d, int64_t G) {
  const int64_t *xs = of_tensor_shape(x), *ws = of_tensor_shape(w), *ys = of_tensor_shape(y);
  int64_t N = xs[0], CI = xs[1], H = xs[2], W = xs[3], CO = ws[0], KH = ws[2], KW = ws[3];
  int64_t OH = ys[2], OW = ys[3], cig = CI / G, cog = CO / G;
  double *vx = values(x), *vw = values(w), *vy = values(y), *vb = b ? values(b) : NULL;
  double err = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t co = 0; co < CO; co++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double acc = vb ? vb[co] : 0;
          int64_t g = co / cog;
          for (int64_t ci = 0; ci < cig; ci++)
            for (int64_t kh = 0; kh < KH; kh++)
              for (int64_t kw = 0; kw < KW; kw++) {
                int64_t ih = oh * s[0] - p[0] + kh * d[0], iw = ow * s[1] - p[1] + kw * d[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += vx[((n * CI + g * cig + ci) * H + ih) * W + iw] *
                       vw[((co * cig + ci) * KH + kh) * KW + kw];
              }
          err = fmax(err, fabs(acc - vy[((n * CO + co) * OH + oh) * OW + ow]));
        }
  free(vx);
  free(vw);
  free(vy);
  free(vb);
  return err;
}

static double dot(of_tensor *a, of_tensor *b) {
  double *va = values(a), *vb = values(b), s = 0;
  for (int64_t i = 0; i < of_tensor_numel(a); i++) s += va[i] * vb[i];
  free(va);
  free(vb);
  return s;
}

static void test_conv_forward(void) {
  struct {
    int64_t x[4], w[4], s[2], p[2], d[2], g;
    int bias;
  } cases[] = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 1},
      {{3, 4, 9, 8}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, 1},
      {{2, 4, 5, 5}, {4, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4, 0},   /* depthwise */
      {{2, 6, 4, 5}, {8, 6, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, 1},   /* 1x1 direct */
      {{2, 6, 4, 5}, {6, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 3, 0},   /* 1x1 grouped */
      {{1, 2, 8, 8}, {3, 2, 3, 3}, {3, 2}, {1, 1}, {2, 1}, 1, 1},
      /* small maps: the whole-batch (wide) path, groups, 1x1 stride 2 */
      {{6, 8, 4, 4}, {12, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 1},
      {{5, 8, 3, 4}, {6, 4, 3, 3}, {2, 1}, {1, 1}, {1, 2}, 2, 1},
      {{4, 6, 8, 8}, {10, 6, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, 0},
      /* rows of >= 8 outputs with unit stride along W: row copies */
      {{2, 3, 12, 11}, {5, 3, 3, 3}, {2, 1}, {1, 2}, {1, 2}, 1, 1},
      {{2, 3, 20, 21}, {4, 3, 3, 3}, {1, 2}, {1, 1}, {1, 1}, 1, 1},
      {{1, 2, 9, 30}, {3, 2, 2, 3}, {2, 3}, {0, 1}, {1, 1}, 1, 0},
      /* a padded plane over the gather path's limit: bounds per row */
      {{1, 1, 1030, 1020}, {1, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 0},
  };
  /* 1 thread; 2 threads (samples split over threads); 8 threads (more
   * threads than samples: one sample at a time, threaded inside) */
  int threads[3] = {1, 2, 8};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int dt = 0; dt < 2; dt++) {
      of_dtype t = dt ? OF_FLOAT64 : OF_FLOAT32;
      of_tensor *x = filled(cases[c].x, 4, t, 1 + (unsigned)c), *w = filled(cases[c].w, 4, t, 7);
      int64_t bs[1] = {cases[c].w[0]};
      of_tensor *b = cases[c].bias ? filled(bs, 1, t, 3) : NULL, *y = NULL;
      for (int m = 0; m < 3; m++) {
        of_set_num_threads(threads[m]);
        CHECK(of_conv(x, w, b, cases[c].s, cases[c].p, cases[c].d, 2, cases[c].g, &y) == OF_OK);
        if (!y) continue;
        double err = naive_err(y, x, w, b, cases[c].s, cases[c].p, cases[c].d, cases[c].g);
        if (err > 1e-3) fprintf(stderr, "case %zu dtype %d: err %g\n", c, dt, err);
        CHECK(err <= 1e-3);
        of_tensor_release(y);
        y = NULL;
      }
      of_tensor_release(x);
      of_tensor_release(w);
      of_tensor_release(b);
    }
}

/* <conv(x, w), gy> == <x, conv_transpose(gy, w)> == <w, weight_grad(x, gy)>
 * (3-D, spatial dims given in full; groups g) */
static void check_adjoint(const int64_t *xs, const int64_t *ws, const int64_t *s,
                          const int64_t *p, const int64_t *d, int64_t g, of_dtype dt) {
  of_tensor *x = filled(xs, 5, dt, 11), *w = filled(ws, 5, dt, 12);
  of_tensor *y = NULL, *gx = NULL, *gw = NULL, *gy = NULL;
  CHECK(of_conv(x, w, NULL, s, p, d, 3, g, &y) == OF_OK);
  if (y) {
    gy = filled(of_tensor_shape(y), 5, dt, 13);
    /* output_padding so that conv_transpose gives x's size back */
    int64_t op[3];
    for (int i = 0; i < 3; i++)
      op[i] = xs[2 + i] + 2 * p[i] -
              ((of_tensor_shape(y)[2 + i] - 1) * s[i] + d[i] * (ws[2 + i] - 1) + 1);
    CHECK(of_conv_transpose(gy, w, NULL, s, p, op, d, 3, g, &gx) == OF_OK);
    CHECK(of_conv_weight_grad(x, gy, ws + 2, s, p, d, 3, g, &gw) == OF_OK);
  }
  if (gx && gw) {
    double a = dot(y, gy), b = dot(x, gx), c = dot(w, gw);
    double tol = dt == OF_FLOAT64 ? 1e-6 : 1e-4;
    CHECK(fabs(a - b) < tol * (1 + fabs(a)));
    CHECK(fabs(a - c) < tol * (1 + fabs(a)));
  }
  of_tensor_release(x);
  of_tensor_release(w);
  of_tensor_release(y);
  of_tensor_release(gy);
  of_tensor_release(gx);
  of_tensor_release(gw);
}

static void test_adjoints(void) {
  struct {
    int64_t x[5], w[5], s[3], p[3], d[3], g;
  } cases[] = {
      {{2, 4, 5, 6, 4}, {6, 2, 3, 2, 2}, {2, 1, 1}, {1, 0, 1}, {1, 2, 1}, 2},
      /* small maps, many samples: the wide path */
      {{7, 6, 1, 4, 4}, {8, 3, 1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 2},
      {{5, 4, 3, 3, 4}, {6, 4, 2, 3, 3}, {1, 2, 1}, {1, 1, 1}, {1, 1, 2}, 1},
      {{6, 6, 1, 8, 8}, {9, 6, 1, 1, 1}, {1, 2, 2}, {0, 0, 0}, {1, 1, 1}, 1},
      {{6, 6, 1, 4, 4}, {9, 2, 1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 3},
      /* row copies */
      {{2, 3, 1, 9, 13}, {4, 3, 1, 3, 3}, {1, 2, 1}, {0, 1, 2}, {1, 1, 2}, 1},
      {{2, 3, 1, 10, 21}, {4, 3, 1, 3, 3}, {1, 1, 2}, {0, 1, 1}, {1, 1, 1}, 1},
      {{1, 2, 2, 5, 30}, {3, 2, 1, 2, 3}, {1, 2, 3}, {0, 0, 1}, {1, 1, 1}, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int dt = 0; dt < 2; dt++)
      check_adjoint(cases[c].x, cases[c].w, cases[c].s, cases[c].p, cases[c].d, cases[c].g,
                    dt ? OF_FLOAT64 : OF_FLOAT32);
}

static void test_pools(void) {
  double v[16];
  for (int i = 0; i < 16; i++) v[i] = i;
  int64_t shape[4] = {1, 1, 4, 4}, k[2] = {2, 2}, k3[2] = {3, 3}, s1[2] = {1, 1};
  int64_t p1[2] = {1, 1};
  of_tensor *x = NULL, *val = NULL, *idx = NULL, *avg = NULL;
  CHECK(of_from_doubles(v, shape, 4, OF_FLOAT32, &x) == OF_OK);
  CHECK(of_max_pool(x, k, NULL, NULL, NULL, 2, 0, 0, &val, &idx) == OF_OK);
  if (val && idx) {
    double got[4], gi[4], want[4] = {5, 7, 13, 15};
    of_tensor_to_doubles(val, got, 4);
    of_tensor_to_doubles(idx, gi, 4);
    for (int i = 0; i < 4; i++) CHECK(got[i] == want[i] && gi[i] == want[i]);
    CHECK(of_tensor_dtype(idx) == OF_INT64);
  }
  CHECK(of_avg_pool(x, k3, s1, p1, 2, 0, 1, 0, &avg) == OF_OK);
  if (avg) {
    double got[16];
    of_tensor_to_doubles(avg, got, 16);
    CHECK(fabs(got[0] - 10.0 / 9) < 1e-6 && fabs(got[5] - 5) < 1e-6);
  }
  of_tensor_release(val);
  of_tensor_release(idx);
  of_tensor_release(avg);
  val = idx = avg = NULL;
  int64_t osz[2] = {3, 3};
  CHECK(of_adaptive_avg_pool(x, osz, 2, &avg) == OF_OK);
  if (avg) {
    double got[9];
    of_tensor_to_doubles(avg, got, 9);
    CHECK(fabs(got[0] - 2.5) < 1e-6 && fabs(got[8] - 12.5) < 1e-6);
  }
  CHECK(of_adaptive_max_pool(x, osz, 2, 1, &val, &idx) == OF_OK);
  if (val && idx) {
    double gi[9];
    of_tensor_to_doubles(idx, gi, 9);
    CHECK(gi[0] == 6 && gi[8] == 16);
  }
  of_tensor_release(val);
  of_tensor_release(idx);
  of_tensor_release(avg);
  of_tensor_release(x);
}

static void test_autograd(void) {
  int64_t xs[4] = {2, 3, 6, 6}, ws[4] = {4, 3, 3, 3}, bs[1] = {4};
  int64_t s[2] = {1, 1}, p[2] = {1, 1}, d[2] = {1, 1}, k[2] = {2, 2};
  of_tensor *x = filled(xs, 4, OF_FLOAT32, 1), *w = filled(ws, 4, OF_FLOAT32, 2);
  of_tensor *b = filled(bs, 1, OF_FLOAT32, 3), *y = NULL, *pooled = NULL, *ones = NULL;
  CHECK(of_tensor_set_requires_grad(x, 1) == OF_OK);
  CHECK(of_tensor_set_requires_grad(w, 1) == OF_OK);
  CHECK(of_tensor_set_requires_grad(b, 1) == OF_OK);
  CHECK(of_conv(x, w, b, s, p, d, 2, 1, &y) == OF_OK);
  CHECK(of_max_pool(y, k, NULL, NULL, NULL, 2, 0, 0, &pooled, NULL) == OF_OK);
  if (pooled) {
    CHECK(of_full(of_tensor_shape(pooled), 4, 1.0, OF_FLOAT32, OF_CPU, &ones) == OF_OK);
    CHECK(of_backward(&pooled, &ones, 1, 0, 0) == OF_OK);
    CHECK(of_tensor_grad(x) && of_tensor_grad(w) && of_tensor_grad(b));
    if (of_tensor_grad(b)) {
      double gb[4];
      of_tensor_to_doubles(of_tensor_grad(b), gb, 4);
      for (int i = 0; i < 4; i++) CHECK(gb[i] == 18);   /* 2 samples x 3 x 3 pooled */
    }
  }
  of_tensor_release(ones);
  of_tensor_release(pooled);
  of_tensor_release(y);
  of_tensor_set_grad(x, NULL);
  of_tensor_set_grad(w, NULL);
  of_tensor_set_grad(b, NULL);
  of_tensor_release(x);
  of_tensor_release(w);
  of_tensor_release(b);
}

static void test_errors(void) {
  int64_t xs[3] = {3, 32, 32}, ws[4] = {6, 1, 5, 5}, x4[4] = {1, 3, 32, 32};
  int64_t s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1}, s0[2] = {0, 1};
  of_tensor *x = filled(xs, 3, OF_FLOAT32, 1), *w = filled(ws, 4, OF_FLOAT32, 2);
  of_tensor *x2 = filled(x4, 4, OF_FLOAT32, 3), *xi = filled(x4, 4, OF_INT64, 3), *y = NULL;
  CHECK(of_conv(x, w, NULL, s, p, d, 2, 1, &y) == OF_ERR_SHAPE);
  CHECK(strstr(of_last_error(), "conv2d: expected input with 4 dims [N, C, H, W], got [3,32,32]"));
  CHECK(of_conv(x2, w, NULL, s, p, d, 2, 1, &y) == OF_ERR_SHAPE);
  CHECK(strstr(of_last_error(), "input has 3 channels but weight expects 1"));
  CHECK(of_conv(x2, w, NULL, s0, p, d, 2, 3, &y) == OF_ERR_ARG);
  CHECK(of_conv(xi, w, NULL, s, p, d, 2, 3, &y) == OF_ERR_DTYPE);
  CHECK(of_conv(x2, w, NULL, s, p, d, 4, 1, &y) == OF_ERR_ARG);
  int64_t k[2] = {40, 40};
  of_tensor *v = NULL;
  CHECK(of_max_pool(x2, k, NULL, NULL, NULL, 2, 0, 1, &v, NULL) == OF_ERR_SHAPE);
  CHECK(y == NULL && v == NULL);
  of_tensor_release(x);
  of_tensor_release(w);
  of_tensor_release(x2);
  of_tensor_release(xi);
}

int main(void) {
  int64_t start = current();
  int32_t nt = of_get_num_threads();
  test_conv_forward();
  of_set_num_threads(nt);
  test_adjoints();
  /* the wide path in chunks of a few samples (an uneven last chunk) and with
   * the per-sample path and row copies forced */
  setenv("OF_CONV_WIDE_COLS", "40", 1);
  test_conv_forward();
  test_adjoints();
  unsetenv("OF_CONV_WIDE_COLS");
  setenv("OF_CONV_WIDE", "0", 1);
  setenv("OF_CONV_GATHER", "0", 1);
  test_adjoints();
  unsetenv("OF_CONV_WIDE");
  unsetenv("OF_CONV_GATHER");
  of_set_num_threads(nt);
  test_pools();
  test_autograd();
  test_errors();
  if (current() != start) {
    fprintf(stderr, "leak: %lld bytes\n", (long long)(current() - start));
    failures++;
  }
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("test_conv: ok\n");
  return 0;
}
