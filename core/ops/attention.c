/* attention.c -- scaled_dot_product_attention as one fused op:
 * softmax(q k^T * scale + mask) v, forward and backward.
 *
 * The CPU kernel is flash-attention style: queries are taken in blocks of
 * BQ rows and keys in blocks of BK, the score block S = (scale q) k^T of
 * one (query block, key block) pair lives in a BQ x BK scratch buffer, and
 * an online softmax (running row maximum m and rescaled sum l) folds each
 * key block into the output accumulator. The full [L, S] score matrix is
 * never made; the forward keeps only the rows' logsumexp m + log(l) for the
 * backward, which recomputes each score block from it (P = exp(S - lse))
 * and accumulates dq, dk, dv block by block (FlashAttention-2's rule:
 * dS = P * (dP - rowsum(dO * O))). Scratch memory is O(BQ * BK) per thread
 * in the forward and O(S * (E + Ev)) per thread in the backward (each task
 * owns the dk, dv rows of one key/value head, so there are no races).
 *
 * The block products run through one register-blocked micro-kernel
 * C[M][N] += A[M][K] B[K][N] (A read with any strides, so transposes are
 * free; B packed row-major with N padded to PADN columns; k^T and v^T in
 * contiguous panels of one key block), written with the GCC vectors of
 * simd.h and compiled per instruction set (AVX2 + FMA, the baseline) like
 * core/ops/rowk.c, and with intrinsics for AVX-512 (larger tiles, exp by
 * vscalefps; see "AVX-512 kernels" below); a table picks the variant per
 * call from of_cpu_isa(), which OF_CPU_ISA or set_cpu_capability can lower
 * (the specs run every path the CPU has). float16/bfloat16 compute in float32; float64 has
 * its own scalar instantiation (gradcheck). OpenMP runs over (batch * head,
 * query block) tasks in the forward and over key/value heads (all of their
 * query heads, for grouped-query attention) in the backward.
 *
 * Dropout draws from the process generator without storing a mask: weight
 * (bh, i, j) is kept when the float32 uniform_ value of element
 * (bh * L + i) * S + j of a stream reserved at the forward is >= p, so the
 * backward replays the same draws (and flow.rand after the same seed gives
 * the same mask, which the specs use).
 *
 * On CUDA the device table's sdpa / sdpa_back entries (cuda/attention.cu)
 * follow the same rule, a warp per query row. */
#include "../autograd.h"
#include "../device.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "family.h"
#include "random.h"
#include "simd.h"

enum { BQ = 64, BK = 128, PADN = 32, MR = 6 };   /* query block, key block, column padding,
                                               * rows per micro-kernel tile */

static int64_t padn(int64_t n) { return (n + PADN - 1) / PADN * PADN; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* the CPU kernels' view of the problem: of_sdpa_desc plus the mask */
typedef struct {
  of_sdpa_desc d;
  const void *mask;        /* uint8 (kind 1) or the compute dtype (kind 2) */
  const int64_t *moff;     /* [BH] */
  /* the forward's q, k, v rows: head bh's row i at qo[bh] + i * qsl (k, v: per
   * key/value head), the last dim contiguous; the backward's are dense */
  const int64_t *qo, *ko, *vo;
  int64_t qsl, ksl, vsl;
} geo;

/* Scratch of a forward task and of a backward task, in elements of T. */
static int64_t spad(const geo *g) { return (g->d.S + BK - 1) / BK * BK; }
static int64_t fwd_scratch(const geo *g) {
  int64_t E = g->d.E, Evp = padn(g->d.Ev);
  return BQ * E + BQ * BK + BQ * Evp + 3 * BQ;
}
/* the forward's width of a k^T panel: BK, or when every key fits in one
 * block, S rounded up to PADN (a sentence of 20 tokens packs 32 columns,
 * not 128) */
static int64_t fwd_pw(const geo *g) { return min64(BK, padn(g->d.S)); }
/* the forward's key columns: whole panels (the last key block's products are
 * only as wide as they need, nk rounded up to PADN) */
static int64_t fwd_sp(const geo *g) { return g->d.S <= BK ? fwd_pw(g) : spad(g); }
/* the forward's packed keys and values of one key/value head */
static int64_t fwd_pack_size(const geo *g) { return fwd_sp(g) * (g->d.E + padn(g->d.Ev)); }
static int64_t bwd_scratch(const geo *g) {
  int64_t E = g->d.E, Ev = g->d.Ev, Ep = padn(E), Evp = padn(Ev), S = g->d.S, Sp = spad(g);
  return S * Ep + S * Evp + BQ * Ep + BQ * Evp + BQ * Ep + Sp * (E + Ev + Ep) + 3 * BQ * BK + BQ;
}

/* ---- micro-kernels ----------------------------------------------------------
 * gemm: C[i][n] (+)= sum_k A[i * sam + k * sak] B[k * ldb + n], N a multiple
 * of PADN; acc = 0 overwrites C. Tiles of MR rows x 2 vectors keep twelve
 * accumulators in registers. */
#define F32_KERNELS(ISA, ATTR, W)                                                               \
  ATTR static void gemm_f32_##ISA(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, \
                                  int64_t sak, const float *B, int64_t ldb, float *C,           \
                                  int64_t ldc, int acc) {                                       \
    for (int64_t n0 = 0; n0 < N; n0 += 2 * W) {                                                 \
      int64_t i = 0;                                                                            \
      for (; i + MR <= M; i += MR) {                                                              \
        vf##W c[MR][2];                                                                          \
        for (int r = 0; r < MR; r++)                                                             \
          for (int h = 0; h < 2; h++)                                                           \
            c[r][h] = acc ? ld_f32_##W(C + (i + r) * ldc + n0 + h * W) : vsplat##W(0);          \
        const float *a = A + i * sam;                                                           \
        for (int64_t k = 0; k < K; k++) {                                                       \
          const float *b = B + k * ldb + n0;                                                    \
          vf##W b0 = ld_f32_##W(b), b1 = ld_f32_##W(b + W);                                     \
          for (int r = 0; r < MR; r++) {                                                         \
            vf##W av = a[r * sam + k * sak] - (vf##W){0};   /* a broadcast load */                                         \
            c[r][0] += av * b0;                                                                 \
            c[r][1] += av * b1;                                                                 \
          }                                                                                     \
        }                                                                                       \
        for (int r = 0; r < MR; r++)                                                             \
          for (int h = 0; h < 2; h++) st_f32_##W(C + (i + r) * ldc + n0 + h * W, c[r][h]);      \
      }                                                                                         \
      for (; i < M; i++) {                                                                      \
        vf##W c0 = acc ? ld_f32_##W(C + i * ldc + n0) : vsplat##W(0);                           \
        vf##W c1 = acc ? ld_f32_##W(C + i * ldc + n0 + W) : vsplat##W(0);                       \
        for (int64_t k = 0; k < K; k++) {                                                       \
          vf##W av = A[i * sam + k * sak] - (vf##W){0};                                           \
          c0 += av * ld_f32_##W(B + k * ldb + n0);                                              \
          c1 += av * ld_f32_##W(B + k * ldb + n0 + W);                                          \
        }                                                                                       \
        st_f32_##W(C + i * ldc + n0, c0);                                                       \
        st_f32_##W(C + i * ldc + n0 + W, c1);                                                   \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
  /* max of s[0, n), n a multiple of W; NaN sticks */                                           \
  ATTR static float rowmax_f32_##ISA(const float *s, int64_t n) {                               \
    vf##W m = vsplat##W(-INFINITY);                                                             \
    for (int64_t j = 0; j < n; j += W) m = vmax##W(m, ld_f32_##W(s + j));                       \
    return hmax##W(m);                                                                          \
  }                                                                                             \
  /* s = exp(s - mx) in place (-inf gives 0); returns the sum */                                \
  ATTR static float expsum_f32_##ISA(float *s, int64_t n, float mx) {                           \
    vf##W acc = vsplat##W(0);                                                                   \
    for (int64_t j = 0; j < n; j += W) {                                                        \
      vf##W e = vexp##W(ld_f32_##W(s + j) - mx);                                                \
      st_f32_##W(s + j, e);                                                                     \
      acc += e;                                                                                 \
    }                                                                                           \
    return (float)hsum##W(acc);                                                                 \
  }

/* The online softmax step of one score block (nq rows of BK, nw wide): each
 * row's running maximum m and sum l take in the block, its scores become
 * exp(s - m) (a row with every key so far masked: zeros), and alpha [nq] gets
 * the factor exp(m_old - m) the row's output accumulator is rescaled by. */
#define ONLINE_GENERIC(T, SUF, ATTR)                                                            \
  ATTR static void online_##SUF(T *Sb, int64_t nq, int64_t nw, T *m, T *l, T *alpha) {          \
    for (int64_t r = 0; r < nq; r++) {                                                          \
      T *s = Sb + r * BK;                                                                       \
      T mn = rowmax_##SUF(s, nw);                                                               \
      if (m[r] > mn) mn = m[r];                                                                 \
      alpha[r] = 1;                                                                             \
      if (mn == -INFINITY) {   /* every key so far masked: nothing to add */                    \
        memset(s, 0, sizeof(T) * (size_t)nw);                                                   \
        continue;                                                                               \
      }                                                                                         \
      alpha[r] = (T)exp(m[r] - mn);                                                             \
      l[r] = l[r] * alpha[r] + expsum_##SUF(s, nw, mn);                                         \
      m[r] = mn;                                                                                \
    }                                                                                           \
  }

/* float64: plain loops (accuracy, not speed: gradcheck and references) */
static void gemm_f64(int64_t M, int64_t N, int64_t K, const double *A, int64_t sam, int64_t sak,
                     const double *B, int64_t ldb, double *C, int64_t ldc, int acc) {
  for (int64_t i = 0; i < M; i++) {
    double *c = C + i * ldc;
    if (!acc) memset(c, 0, sizeof(double) * (size_t)N);
    for (int64_t k = 0; k < K; k++) {
      double a = A[i * sam + k * sak];
      const double *b = B + k * ldb;
      for (int64_t n = 0; n < N; n++) c[n] += a * b[n];
    }
  }
}
static double rowmax_f64(const double *s, int64_t n) {
  double m = -INFINITY;
  for (int64_t j = 0; j < n; j++)
    if (s[j] > m || s[j] != s[j]) m = s[j];
  return m;
}
static double expsum_f64(double *s, int64_t n, double mx) {
  double sum = 0;
  for (int64_t j = 0; j < n; j++) sum += (s[j] = exp(s[j] - mx));
  return sum;
}

/* ---- the blocked algorithm, once per element type ---------------------------
 * mask_block: S block rows [i0, i0 + nq) x keys [j0, j0 + nk): the mask,
 * causality and the padding columns (nk..nw) become -inf / are added. */
#define ATTN_ALGO(T, SUF, ATTR)                                                                 \
  ATTR static void mask_block_##SUF(const geo *g, int64_t bh, int64_t i0, int64_t nq,           \
                                    int64_t j0, int64_t nk, int64_t nw, T *Sb) {                \
    const of_sdpa_desc *d = &g->d;                                                              \
    for (int64_t r = 0; r < nq; r++) {                                                          \
      T *s = Sb + r * BK;                                                                       \
      int64_t i = i0 + r, c = 0;                                                                \
      if (d->mkind == 1) {                                                                      \
        const uint8_t *m = (const uint8_t *)g->mask + g->moff[bh] + i * d->msl + j0 * d->mss;   \
        for (c = 0; c < nk; c++)                                                                \
          if (!m[c * d->mss]) s[c] = -INFINITY;                                                 \
      } else if (d->mkind == 2) {                                                               \
        const T *m = (const T *)g->mask + g->moff[bh] + i * d->msl + j0 * d->mss;               \
        for (c = 0; c < nk; c++) s[c] += m[c * d->mss];                                         \
      }                                                                                         \
      if (d->causal)                                                                            \
        for (c = i - j0 + 1 > 0 ? i - j0 + 1 : 0; c < nk; c++) s[c] = -INFINITY;                \
      for (c = nk; c < nw; c++) s[c] = -INFINITY;                                               \
    }                                                                                           \
  }                                                                                             \
  /* the dropout draws of a block: u[r * BK + c] for (bh, i0 + r, j0 + c) */                    \
  ATTR static void draws_##SUF(const geo *g, int64_t bh, int64_t i0, int64_t nq, int64_t j0,    \
                               int64_t nk, float *u) {                                          \
    const of_sdpa_desc *d = &g->d;                                                              \
    for (int64_t r = 0; r < nq; r++)                                                            \
      of_philox_u24(d->seed, d->offset, (uint64_t)((bh * d->L + i0 + r) * d->S + j0), nk,      \
                    u + r * BK);                                                                \
  }                                                                                             \
  /* keys j0 < jend can be attended from query rows [i0, i0 + nq) */                            \
  static int64_t key_end_##SUF(const geo *g, int64_t i0, int64_t nq) {                          \
    return g->d.causal ? min64(g->d.S, i0 + nq) : g->d.S;                                       \
  }                                                                                             \
  /* Keys and values of one head, packed once for every block product: Kt                  \
   * (k^T) and Vt (v^T) in panels of BK keys pw columns wide (pw = BK, or fwd_pw when S <= \
   * BK), [Sp / BK][E][pw] and [Sp / BK][Ev][pw], so one key block's panel is contiguous  \
   * (a row stride of Sp floats put every row of it in the same few cache sets); Kp       \
   * [Sp][Ep], Vp [Sp][Evp] (each or NULL), rows/columns [ja, jb), zero past S and past   \
   * the head dims. */                                                                       \
  static void pack_kv_##SUF(const geo *g, const T *K, const T *V, T *Kt, T *Vt, T *Kp,        \
                            T *Vp, int64_t ja, int64_t jb, int64_t pw, int64_t ksl,           \
                            int64_t vsl) {                                                      \
    int64_t S = g->d.S, E = g->d.E, Ev = g->d.Ev, Ep = padn(E), Evp = padn(Ev);                \
    for (int64_t j = ja; j < jb; j++) {                                                         \
      bool in = j < S;                                                                          \
      for (int64_t e = 0; e < E; e++) {                                                         \
        T x = in ? K[j * ksl + e] : 0;                                                          \
        if (Kt) Kt[j / BK * E * pw + e * pw + j % BK] = x;                                      \
        if (Kp) Kp[j * Ep + e] = x;                                                             \
      }                                                                                         \
      if (Kp) for (int64_t e = E; e < Ep; e++) Kp[j * Ep + e] = 0;                              \
      for (int64_t e = 0; e < Ev; e++) {                                                        \
        T x = in ? V[j * vsl + e] : 0;                                                          \
        if (Vt) Vt[j / BK * Ev * pw + e * pw + j % BK] = x;                                     \
        if (Vp) Vp[j * Evp + e] = x;                                                            \
      }                                                                                         \
      if (Vp) for (int64_t e = Ev; e < Evp; e++) Vp[j * Evp + e] = 0;                           \
    }                                                                                           \
  }                                                                                             \
  /* Forward task: query block qb of row bh (its keys/values packed at kvh). */                \
  ATTR static void fwd_task_##SUF(const geo *g, const T *q, const T *kvh, T *o, T *lse, T *buf, \
                                  float *u, int64_t task) {                                     \
    const of_sdpa_desc *d = &g->d;                                                              \
    int64_t L = d->L, S = d->S, E = d->E, Ev = d->Ev, Evp = padn(Ev);                           \
    int64_t nqb = (L + BQ - 1) / BQ, bh = task / nqb, i0 = (task % nqb) * BQ;                   \
    int64_t nq = min64(BQ, L - i0), Sp = fwd_sp(g), pw = fwd_pw(g);                             \
    const T *Q = q + g->qo[bh] + i0 * g->qsl, *Kt = kvh;                                        \
    const T *Vp = Kt + E * Sp;                                                                  \
    T *Qs = buf, *Sb = Qs + BQ * E, *acc = Sb + BQ * BK;                                        \
    T *m = acc + BQ * Evp, *l = m + BQ, *al = l + BQ;                                           \
    T sc = (T)d->scale, keep = d->p > 0 ? (T)(1.0 / (1.0 - d->p)) : 1;                          \
    for (int64_t r = 0, qsl = g->qsl; r < nq; r++)   /* qsl local: the loop vectorises */      \
      for (int64_t e = 0; e < E; e++) Qs[r * E + e] = Q[r * qsl + e] * sc;                      \
    memset(acc, 0, sizeof(T) * (size_t)(nq * Evp));                                             \
    for (int64_t r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0;                                \
    int64_t jend = key_end_##SUF(g, i0, nq);                                                    \
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {                                                 \
      /* a last (or only) short block is nw = nk rounded up to PADN columns wide */            \
      int64_t nk = min64(BK, S - j0), nw = min64(BK, padn(nk));                                 \
      gemm_##SUF(nq, nw, E, Qs, E, 1, Kt + j0 * E, pw, Sb, BK, 0);                              \
      mask_block_##SUF(g, bh, i0, nq, j0, nk, nw, Sb);                                          \
      if (d->p > 0) draws_##SUF(g, bh, i0, nq, j0, nk, u);                                      \
      online_##SUF(Sb, nq, nw, m, l, al);                                                       \
      for (int64_t r = 0; r < nq; r++) {                                                        \
        T *s = Sb + r * BK, alpha = al[r];                                                      \
        if (alpha != 1)                                                                         \
          for (int64_t c = 0; c < Evp; c++) acc[r * Evp + c] *= alpha;                          \
        if (d->p > 0)                                                                           \
          for (int64_t c = 0; c < nk; c++) s[c] = u[r * BK + c] >= (float)d->p ? s[c] * keep : 0; \
      }                                                                                         \
      gemm_##SUF(nq, Evp, nk, Sb, BK, 1, Vp + j0 * Evp, Evp, acc, Evp, 1);                      \
    }                                                                                           \
    for (int64_t r = 0; r < nq; r++) {                                                          \
      T inv = 1 / l[r]; /* a row with every key masked: 0 * inf = NaN, as softmax gives */      \
      T *out = o + (bh * L + i0 + r) * Ev;                                                      \
      for (int64_t c = 0; c < Ev; c++) out[c] = acc[r * Evp + c] * inv;                         \
      lse[bh * L + i0 + r] = m[r] + (T)log(l[r]);                                               \
    }                                                                                           \
  }                                                                                             \
  /* Backward task: keys [ja, jb) of key/value row kv against its `group` query             \
   * rows; gq gets those keys' share of dq. */                                                 \
  ATTR static void bwd_task_##SUF(const geo *g, const T *q, const T *k, const T *v,             \
                                  const T *o, const T *go, const T *lse, T *gq, T *gk, T *gv,   \
                                  T *buf, float *u, int64_t kv, int64_t ja, int64_t jb) {       \
    const of_sdpa_desc *d = &g->d;                                                              \
    int64_t L = d->L, S = d->S, E = d->E, Ev = d->Ev, Ep = padn(E), Evp = padn(Ev);             \
    const T *K = k + kv * S * E, *V = v + kv * S * Ev;                                          \
    T *dKa = buf, *dVa = dKa + S * Ep, *Qs = dVa + S * Evp, *dOp = Qs + BQ * Ep;                \
    int64_t Sp = spad(g);                                                                       \
    T *dQa = dOp + BQ * Evp, *Kt = dQa + BQ * Ep, *Vt = Kt + E * Sp, *Kp = Vt + Ev * Sp;        \
    T *Sb = Kp + Sp * Ep, *Pd = Sb + BQ * BK, *dP = Pd + BQ * BK, *D = dP + BQ * BK;            \
    T sc = (T)d->scale, keep = d->p > 0 ? (T)(1.0 / (1.0 - d->p)) : 1;                          \
    int64_t js = min64(jb, S);                                                                  \
    memset(dKa + ja * Ep, 0, sizeof(T) * (size_t)((js - ja) * Ep));                             \
    memset(dVa + ja * Evp, 0, sizeof(T) * (size_t)((js - ja) * Evp));                           \
    memset(Qs, 0, sizeof(T) * (size_t)(BQ * (Ep + Evp)));                                       \
    /* dq's products read k's rows as they are when they need no padding */                    \
    bool kdirect = E == Ep;                                                                     \
    pack_kv_##SUF(g, K, V, Kt, Vt, kdirect ? NULL : Kp, NULL, ja, jb, BK, E, Ev);               \
    const T *Kq = kdirect ? K : Kp;                                                             \
    for (int64_t bh = kv * d->group; bh < (kv + 1) * d->group; bh++) {                          \
      for (int64_t i0 = 0; i0 < L; i0 += BQ) {                                                  \
        int64_t nq = min64(BQ, L - i0);                                                         \
        const T *Q = q + (bh * L + i0) * E, *O = o + (bh * L + i0) * Ev;                        \
        const T *G = go + (bh * L + i0) * Ev, *ls = lse + bh * L + i0;                          \
        for (int64_t r = 0; r < nq; r++) {                                                      \
          double dd = 0;                                                                        \
          for (int64_t e = 0; e < E; e++) Qs[r * Ep + e] = Q[r * E + e] * sc;                   \
          for (int64_t e = 0; e < Ev; e++) {                                                    \
            dOp[r * Evp + e] = G[r * Ev + e];                                                   \
            dd += (double)G[r * Ev + e] * (double)O[r * Ev + e];                                \
          }                                                                                     \
          D[r] = (T)dd;                                                                         \
        }                                                                                       \
        memset(dQa, 0, sizeof(T) * (size_t)(nq * Ep));                                          \
        int64_t jend = min64(key_end_##SUF(g, i0, nq), jb);                                     \
        for (int64_t j0 = ja; j0 < jend; j0 += BK) {                                            \
          int64_t nk = min64(BK, S - j0);                                                       \
          gemm_##SUF(nq, BK, E, Qs, Ep, 1, Kt + j0 * E, BK, Sb, BK, 0);                         \
          mask_block_##SUF(g, bh, i0, nq, j0, nk, BK, Sb);                                      \
          if (d->p > 0) draws_##SUF(g, bh, i0, nq, j0, nk, u);                                  \
          for (int64_t r = 0; r < nq; r++) {                                                    \
            T *s = Sb + r * BK;                                                                 \
            if (ls[r] == -INFINITY) memset(s, 0, sizeof(T) * BK); /* no key: no grad */         \
            else expsum_##SUF(s, BK, ls[r]);                                                    \
            T *pd = d->p > 0 ? Pd + r * BK : s;                                                 \
            if (d->p > 0)                                                                       \
              for (int64_t c = 0; c < BK; c++) pd[c] = u[r * BK + c] >= (float)d->p && c < nk ? s[c] * keep : 0; \
          }                                                                                     \
          /* dV += Pd^T dO, dP = dO V^T */                                                      \
          gemm_##SUF(nk, Evp, nq, d->p > 0 ? Pd : Sb, 1, BK, dOp, Evp, dVa + j0 * Evp, Evp, 1); \
          gemm_##SUF(nq, BK, Ev, dOp, Evp, 1, Vt + j0 * Ev, BK, dP, BK, 0);                     \
          for (int64_t r = 0; r < nq; r++) {                                                    \
            T *s = Sb + r * BK, *dp = dP + r * BK;                                              \
            if (d->p > 0)                                                                       \
              for (int64_t c = 0; c < BK; c++) dp[c] = u[r * BK + c] >= (float)d->p && c < nk ? dp[c] * keep : 0; \
            for (int64_t c = 0; c < BK; c++) dp[c] = s[c] * (dp[c] - D[r]);                     \
          }                                                                                     \
          /* dQ += dS K, dK += dS^T (scale Q) */                                                \
          gemm_##SUF(nq, Ep, nk, dP, BK, 1, Kq + j0 * Ep, Ep, dQa, Ep, 1);                      \
          gemm_##SUF(nk, Ep, nq, dP, 1, BK, Qs, Ep, dKa + j0 * Ep, Ep, 1);                      \
        }                                                                                       \
        for (int64_t r = 0; r < nq; r++)                                                        \
          for (int64_t e = 0; e < E; e++) gq[(bh * L + i0 + r) * E + e] = dQa[r * Ep + e] * sc; \
      }                                                                                         \
    }                                                                                           \
    for (int64_t j = ja; j < js; j++) {                                                         \
      memcpy(gk + (kv * S + j) * E, dKa + j * Ep, sizeof(T) * (size_t)E);                       \
      memcpy(gv + (kv * S + j) * Ev, dVa + j * Evp, sizeof(T) * (size_t)Ev);                    \
    }                                                                                           \
  }

#define NO_ATTR
F32_KERNELS(def, NO_ATTR, 4)
ONLINE_GENERIC(float, f32_def, NO_ATTR)
ONLINE_GENERIC(double, f64, NO_ATTR)
ATTN_ALGO(float, f32_def, NO_ATTR)
ATTN_ALGO(double, f64, NO_ATTR)
#if defined(__x86_64__) || defined(__i386__)
F32_KERNELS(avx2, VATTR_8, 8)
ONLINE_GENERIC(float, f32_avx2, VATTR_8)
/* ---- AVX-512 kernels, written with intrinsics --------------------------------
 * The block products of the forward and backward are small (64 x 128 x 64):
 * gemm_f32_avx512 covers C with tiles of up to 6 rows x 4 vectors (24 of the
 * 32 registers accumulate; one k step is 4 loads, 6 broadcasts, 24 FMAs), a
 * tile of 2 vectors for a last 32 columns, and the same tiles with fewer rows
 * for the last rows (the generic kernel fell back to one row at a time there,
 * a quarter of the work at BQ = 64). exp512 is vexp_core of simd.h (Cephes'
 * reduction, a degree-6 polynomial, ~1 ulp) with 2^n by vscalefps; below -87 (and
 * for -inf) it gives 0 without computing (an underflow costs an assist);
 * the online softmax takes the block's row maxima first and its rescale
 * factors exp(m_old - m) sixteen rows at a time. */
#include <immintrin.h>

AI VATTR_16 __m512 exp512(__m512 x0) {
  /* below -87 the result is 0: computing it would underflow, and a subnormal or
   * underflowing result costs a microcode assist (~150 cycles) per vector -- every
   * masked score (-inf) took one */
  __mmask16 zero = _mm512_cmp_ps_mask(x0, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  /* no clamp of x: the lanes below -87 (-inf included, whose reduction
   * gives NaN) are zeroed by the mask at the end; a NaN x stays NaN */
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x0, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x0);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = (__m512)vexp_poly16((vf16)r);   /* simd.h's polynomial: six FMAs */
  return _mm512_maskz_scalef_ps((__mmask16)~zero, p, n);
}

/* C[MR rows][16 NV columns] (+)= A[MR][K] B[K][16 NV] */
#define TILE512(MR, NV)                                                                         \
  VATTR_16 static void tile512_##MR##_##NV(int64_t K, const float *a, int64_t sam,              \
                                           int64_t sak, const float *b, int64_t ldb, float *C,  \
                                           int64_t ldc, int acc) {                              \
    __m512 c[MR][NV];                                                                           \
    for (int r = 0; r < MR; r++)                                                                \
      for (int h = 0; h < NV; h++) c[r][h] = _mm512_setzero_ps();                               \
    int64_t k = 0;                                                                              \
    do {   /* K >= 1 (gemm_f32_avx512): a loop that may not run kept c[][] in memory */         \
      __m512 bv[NV];                                                                            \
      for (int h = 0; h < NV; h++) bv[h] = _mm512_loadu_ps(b + k * ldb + 16 * h);               \
      for (int r = 0; r < MR; r++) {                                                            \
        __m512 av = _mm512_set1_ps(a[r * sam + k * sak]);                                       \
        for (int h = 0; h < NV; h++) c[r][h] = _mm512_fmadd_ps(av, bv[h], c[r][h]);             \
      }                                                                                         \
    } while (++k < K);                                                                          \
    if (acc)                                                                                    \
      for (int r = 0; r < MR; r++)                                                              \
        for (int h = 0; h < NV; h++)                                                            \
          c[r][h] = _mm512_add_ps(c[r][h], _mm512_loadu_ps(C + r * ldc + 16 * h));              \
    for (int r = 0; r < MR; r++)                                                                \
      for (int h = 0; h < NV; h++) _mm512_storeu_ps(C + r * ldc + 16 * h, c[r][h]);             \
  }
TILE512(1, 2) TILE512(2, 2) TILE512(3, 2) TILE512(4, 2) TILE512(5, 2) TILE512(6, 2)
TILE512(1, 4) TILE512(2, 4) TILE512(3, 4) TILE512(4, 4) TILE512(5, 4) TILE512(6, 4)
typedef void (*tile512_fn)(int64_t, const float *, int64_t, int64_t, const float *, int64_t,
                           float *, int64_t, int);
static const tile512_fn tiles512[2][7] = {
    {NULL, tile512_1_2, tile512_2_2, tile512_3_2, tile512_4_2, tile512_5_2, tile512_6_2},
    {NULL, tile512_1_4, tile512_2_4, tile512_3_4, tile512_4_4, tile512_5_4, tile512_6_4}};

/* as gemm_f32_def: C[i][n] (+)= sum_k A[i * sam + k * sak] B[k * ldb + n], N a
 * multiple of PADN (32) */
VATTR_16 static void gemm_f32_avx512(int64_t M, int64_t N, int64_t K, const float *A,
                                     int64_t sam, int64_t sak, const float *B, int64_t ldb,
                                     float *C, int64_t ldc, int acc) {
  if (K < 1) {   /* the tiles take at least one k */
    for (int64_t i = 0; i < M && !acc; i++) memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  for (int64_t n0 = 0; n0 < N;) {
    int wide = N - n0 >= 64;
    for (int64_t i = 0; i < M; i += 6)
      tiles512[wide][min64(6, M - i)](K, A + i * sam, sam, sak, B + n0, ldb, C + i * ldc + n0,
                                      ldc, acc);
    n0 += wide ? 64 : 32;
  }
}

/* max of s[0, n), n a multiple of 16; NaN sticks */
VATTR_16 static float rowmax_f32_avx512(const float *s, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  __mmask16 nan = 0;
  for (int64_t j = 0; j < n; j += 16) {
    __m512 x = _mm512_loadu_ps(s + j);
    nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    m = _mm512_max_ps(m, x);
  }
  return nan ? NAN : _mm512_reduce_max_ps(m);
}

/* s = exp(s - mx) in place (-inf gives 0), n a multiple of 16; returns the sum */
VATTR_16 static float expsum_f32_avx512(float *s, int64_t n, float mx) {
  __m512 acc = _mm512_setzero_ps(), mv = _mm512_set1_ps(mx);
  for (int64_t j = 0; j < n; j += 16) {
    __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
    _mm512_storeu_ps(s + j, e);
    acc = _mm512_add_ps(acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

/* online_f32_def's step (ONLINE_GENERIC) with the rescale factors vectorised */
VATTR_16 static void online_f32_avx512(float *Sb, int64_t nq, int64_t nw, float *m, float *l,
                                       float *alpha) {
  float sum[BQ];
  for (int64_t r = 0; r < nq; r++) {
    float *s = Sb + r * BK, mn = rowmax_f32_avx512(s, nw);
    if (m[r] > mn) mn = m[r];
    sum[r] = 0;
    if (mn == -INFINITY) {   /* every key so far masked: nothing to add, factor exp(0) */
      memset(s, 0, sizeof(float) * (size_t)nw);
      alpha[r] = 0;
      continue;
    }
    alpha[r] = m[r] - mn;
    sum[r] = expsum_f32_avx512(s, nw, mn);
    m[r] = mn;
  }
  for (int64_t r = 0; r < nq; r += 16) {
    __mmask16 k = (__mmask16)(nq - r >= 16 ? 0xffff : (1u << (nq - r)) - 1);
    __m512 a = exp512(_mm512_maskz_loadu_ps(k, alpha + r));
    _mm512_mask_storeu_ps(alpha + r, k, a);
    _mm512_mask_storeu_ps(l + r, k, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, l + r), a,
                                                    _mm512_maskz_loadu_ps(k, sum + r)));
  }
}
ATTN_ALGO(float, f32_avx2, VATTR_8)
ATTN_ALGO(float, f32_avx512, VATTR_16)
#define ISA_TABLE(NAME) {NAME##_f32_def, NAME##_f32_avx2, NAME##_f32_avx512}
#else
#define ISA_TABLE(NAME) {NAME##_f32_def, NAME##_f32_def, NAME##_f32_def}
#endif

/* [of_cpu_isa()] */
typedef void (*fwd_fn)(const geo *, const float *, const float *, float *, float *, float *,
                       float *, int64_t);
typedef void (*bwd_fn)(const geo *, const float *, const float *, const float *, const float *,
                       const float *, const float *, float *, float *, float *, float *, float *,
                       int64_t, int64_t, int64_t);
static const fwd_fn fwd_tab[3] = ISA_TABLE(fwd_task);
static const bwd_fn bwd_tab[3] = ISA_TABLE(bwd_task);

/* threads for `tasks` tasks of `work` multiply-adds in all */
static int32_t task_threads(int64_t tasks, int64_t work) {
  int32_t nt = of_threads();
  if (nt <= 1 || work < OF_PARALLEL_GRAIN) return 1;
  return tasks < nt ? (int32_t)tasks : nt;
}

/* packs key/value head h for the forward at pk: k^T panels, then v's rows */
static void fwd_pack(const geo *g, of_dtype cd, const void *k, const void *v, char *pk,
                     int64_t h, int64_t Sp, int64_t pw) {
  int64_t E = g->d.E;
  if (cd == OF_FLOAT64) {
    double *p = (double *)pk;
    pack_kv_f64(g, (const double *)k + g->ko[h], (const double *)v + g->vo[h], p, NULL, NULL,
                p + E * Sp, 0, Sp, pw, g->ksl, g->vsl);
  } else {
    float *p = (float *)pk;
    pack_kv_f32_def(g, (const float *)k + g->ko[h], (const float *)v + g->vo[h], p, NULL, NULL,
                    p + E * Sp, 0, Sp, pw, g->ksl, g->vsl);
  }
}

/* The CPU forward: o [BH, L, Ev], lse [BH, L] of the compute dtype (float32
 * or float64). Tasks are dealt round robin, so causal rows (later blocks
 * cost more) spread over the threads. Keys and values are packed once per
 * key/value head for all of its tasks; when a head is one query block (L <=
 * BQ: a batch of short sentences, hundreds of heads) each task packs its own
 * into its thread's buffer, which stays in cache, instead of all heads into
 * one (megabytes of fresh pages per call). */
static of_status cpu_forward(const geo *g, of_dtype cd, const void *q, const void *k,
                             const void *v, void *o, void *lse) {
  const of_sdpa_desc *d = &g->d;
  int64_t nqb = (d->L + BQ - 1) / BQ, tasks = d->BH * nqb, per = fwd_scratch(g);
  int64_t es = cd == OF_FLOAT64 ? 8 : 4;
  int64_t nkv = d->BH / d->group, psz = fwd_pack_size(g);
  int32_t nt = task_threads(tasks, d->BH * d->L * d->S * (d->E + d->Ev));
  bool local = nqb == 1;   /* each task packs its own head */
  /* scratch from the caching allocator: fresh pages per call cost more than the work */
  int64_t nbuf = nt * (per * es + BQ * BK * 4), nkvp = (local ? nt : nkv) * psz * es;
  char *buf = of_alloc(OF_CPU, nbuf), *kvp = buf ? of_alloc(OF_CPU, nkvp) : NULL;
  if (!kvp) {
    if (buf) of_free(OF_CPU, buf, nbuf);
    return OF_ERR_OOM;
  }
  fwd_fn fn = fwd_tab[of_cpu_isa()];
  int64_t Sp = fwd_sp(g), pw = fwd_pw(g);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int32_t t = omp_get_thread_num(), n = omp_get_num_threads();
    char *mine = buf + t * (per * es + BQ * BK * 4);
    float *u = (float *)(mine + per * es);
    if (!local) {
#pragma omp for schedule(static)
      for (int64_t h = 0; h < nkv; h++) fwd_pack(g, cd, k, v, kvp + h * psz * es, h, Sp, pw);
    }
    for (int64_t x = t; x < tasks; x += n) {
      int64_t kv = x / nqb / d->group;
      char *kvh = kvp + (local ? t : kv) * psz * es;
      if (local) fwd_pack(g, cd, k, v, kvh, kv, Sp, pw);
      if (cd == OF_FLOAT64)
        fwd_task_f64(g, q, (const double *)kvh, o, lse, (double *)mine, u, x);
      else
        fn(g, q, (const float *)kvh, o, lse, (float *)mine, u, x);
    }
  }
  of_free(OF_CPU, buf, nbuf);
  of_free(OF_CPU, kvp, nkvp);
  return OF_OK;
}

static of_status cpu_backward(const geo *g, of_dtype cd, const void *q, const void *k,
                              const void *v, const void *o, const void *go, const void *lse,
                              void *gq, void *gk, void *gv) {
  /* Tasks: (key/value head, a range of its key blocks), about four per thread,
   * so a few heads still keep every thread busy. A task owns its dk, dv rows;
   * its share of dq goes to a partial buffer of its range, summed at the end. */
  const of_sdpa_desc *d = &g->d;
  int64_t nkv = d->BH / d->group, nkb = spad(g) / BK, per = bwd_scratch(g);
  int64_t es = cd == OF_FLOAT64 ? 8 : 4, nq = d->BH * d->L * d->E;
  int32_t nt = task_threads(nkv * nkb, d->BH * d->L * d->S * (d->E + d->Ev));
  int64_t split = nt > 1 ? min64(nkb, (4 * nt + nkv - 1) / nkv) : 1;
  /* without causality every key block costs the same: the fewest tasks that
   * share out evenly (two heads on two threads: one task each, no partial
   * dq buffers to sum) */
  if (nt > 1 && !d->causal) {
    int64_t a = nkv, b = nt;
    while (b) { int64_t r = a % b; a = b; b = r; }   /* a = gcd(nkv, nt) */
    split = min64(nkb, nt / a);
  }
  if (split < 1) split = 1;
  int64_t tasks = nkv * split, nbuf = nt * (per * es + BQ * BK * 4);
  int64_t npart = split > 1 ? split * nq * es : 0;
  char *buf = of_alloc(OF_CPU, nbuf), *part = buf && npart ? of_alloc(OF_CPU, npart) : NULL;
  if (!buf || (npart && !part)) {
    if (buf) of_free(OF_CPU, buf, nbuf);
    return OF_ERR_OOM;
  }
  bwd_fn fn = bwd_tab[of_cpu_isa()];
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int32_t t = omp_get_thread_num(), n = omp_get_num_threads();
    char *mine = buf + t * (per * es + BQ * BK * 4);
    float *u = (float *)(mine + per * es);
    for (int64_t x = t; x < tasks; x += n) {
      int64_t kv = x / split, p = x % split;
      int64_t ja = nkb * p / split * BK, jb = nkb * (p + 1) / split * BK;
      void *dq = split > 1 ? part + p * nq * es : gq;
      if (cd == OF_FLOAT64)
        bwd_task_f64(g, q, k, v, o, go, lse, dq, gk, gv, (double *)mine, u, kv, ja, jb);
      else
        fn(g, q, k, v, o, go, lse, dq, gk, gv, (float *)mine, u, kv, ja, jb);
    }
#pragma omp barrier
    if (split > 1) {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < nq; i++) {
        if (cd == OF_FLOAT64) {
          double acc = 0;
          for (int64_t p = 0; p < split; p++) acc += ((const double *)part)[p * nq + i];
          ((double *)gq)[i] = acc;
        } else {
          float acc = 0;
          for (int64_t p = 0; p < split; p++) acc += ((const float *)part)[p * nq + i];
          ((float *)gq)[i] = acc;
        }
      }
    }
  }
  of_free(OF_CPU, buf, nbuf);
  if (part) of_free(OF_CPU, part, npart);
  return OF_OK;
}


/* ---- checks and geometry ---- */
static const char *const OP = "scaled_dot_product_attention";

static void release_all(of_tensor **ts, int32_t n) {
  for (int32_t i = 0; i < n; i++) of_tensor_release(ts[i]);
}

/* Checks shapes, dtypes and options on the inputs' metas (ndim -1: absent);
 * fills the desc's sizes. What the forward and backward check with and a
 * loaded graph's node is re-inferred with (infer_SDPA). */
static of_status check_inputs(const of_meta *q, const of_meta *k, const of_meta *v,
                              const of_meta *mask, double p, int32_t causal, double scale,
                              int32_t gqa, of_sdpa_desc *d) {
  if (q->ndim < 0 || k->ndim < 0 || v->ndim < 0) return of_fail(OF_ERR_ARG, "%s: query, key and value are required", OP);
  if (!of_dtype_is_floating(q->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: query must be floating, got %s", OP, OF_DT(q));
  if (k->dtype != q->dtype || v->dtype != q->dtype)
    return of_fail(OF_ERR_DTYPE, "%s: query, key and value must have one dtype, got %s, %s "
                   "and %s", OP, OF_DT(q), OF_DT(k), OF_DT(v));
  int32_t nd = q->ndim;
  char b1[96], b2[96], b3[96];
  const char *qs = of_shape_str(q->shape, q->ndim, b1, 96);
  const char *ks = of_shape_str(k->shape, k->ndim, b2, 96);
  const char *vs = of_shape_str(v->shape, v->ndim, b3, 96);
  if (nd < 2 || k->ndim != nd || v->ndim != nd)
    return of_fail(OF_ERR_SHAPE, "%s: query %s, key %s and value %s must have one number of "
                   "dims, at least 2 ([..., L, E], [..., S, E], [..., S, Ev])", OP, qs, ks, vs);
  if (k->shape[nd - 1] != q->shape[nd - 1])
    return of_fail(OF_ERR_SHAPE, "%s: query %s and key %s differ in the last dim (the "
                   "embedding E)", OP, qs, ks);
  if (v->shape[nd - 2] != k->shape[nd - 2])
    return of_fail(OF_ERR_SHAPE, "%s: key %s and value %s differ in dim %d (the source "
                   "length S)", OP, ks, vs, nd - 1);
  d->group = 1;
  for (int32_t x = 0; x < nd - 2; x++) {
    bool heads = gqa && x == nd - 3;
    if (heads) {
      if (v->shape[x] != k->shape[x] || k->shape[x] == 0 || q->shape[x] % k->shape[x] != 0)
        return of_fail(OF_ERR_SHAPE, "%s: with enable_gqa the query heads (dim %d) must be a "
                       "multiple of the key/value heads, and key and value must agree: query "
                       "%s, key %s, value %s", OP, x + 1, qs, ks, vs);
      d->group = q->shape[x] / k->shape[x];
    } else if (k->shape[x] != q->shape[x] || v->shape[x] != q->shape[x]) {
      return of_fail(OF_ERR_SHAPE, "%s: query %s, key %s and value %s differ in dim %d%s", OP,
                     qs, ks, vs, x + 1,
                     x == nd - 3 ? " (the heads; pass enable_gqa = true to share key/value "
                                   "heads)" : "");
    }
  }
  if (!(p >= 0 && p < 1))
    return of_fail(OF_ERR_ARG, "%s: dropout_p must be in [0, 1), got %g", OP, p);
  if (!isfinite(scale))
    return of_fail(OF_ERR_ARG, "%s: scale must be finite, got %g", OP, scale);
  if (causal && mask->ndim >= 0)
    return of_fail(OF_ERR_ARG, "%s: give attn_mask or is_causal, not both", OP);
  d->L = q->shape[nd - 2];
  d->S = k->shape[nd - 2];
  d->E = q->shape[nd - 1];
  d->Ev = v->shape[nd - 1];
  d->BH = of_shape_numel(q->shape, nd - 2);
  d->p = p;
  d->scale = scale;
  d->causal = causal != 0;
  if (mask->ndim < 0) return OF_OK;
  if (mask->dtype != OF_BOOL && !of_dtype_is_floating(mask->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: attn_mask must be bool (true = attend) or floating "
                   "(added to the scores), got %s", OP, OF_DT(mask));
  bool ok = mask->ndim <= nd;
  for (int32_t x = 0; ok && x < mask->ndim; x++) {
    int64_t want = x == mask->ndim - 1 ? d->S : q->shape[nd - mask->ndim + x];
    ok = mask->shape[x] == 1 || mask->shape[x] == want;
  }
  if (!ok) {
    int64_t t[OF_MAX_DIMS];
    memcpy(t, q->shape, sizeof(int64_t) * (size_t)nd);
    t[nd - 1] = d->S;
    return of_fail(OF_ERR_SHAPE, "%s: attn_mask %s does not broadcast to the scores' shape %s "
                   "(query %s, key %s)", OP, OF_SHAPE_STR(mask), of_shape_str(t, nd, b3, 96),
                   qs, ks);
  }
  return OF_OK;
}

/* The result: the query's shape with value's last dim Ev, in q's dtype */
static of_meta sdpa_result(const of_meta *q, const of_sdpa_desc *d) {
  of_meta y = *q;
  y.shape[y.ndim - 1] = d->Ev;
  return y;
}

/* The mask, dense (uint8 or cd), and its offsets per bh row into moff [BH]
 * (int64) with the strides over L and S: broadcast dims get stride 0. */
static of_status mask_layout(of_tensor *mask, int32_t nd, const int64_t *qshape, of_dtype cd,
                             of_device dev, of_sdpa_desc *d, of_tensor **dense,
                             of_tensor **moff) {
  d->mkind = 0;
  if (!mask) return OF_OK;
  bool isbool = mask->dtype == OF_BOOL;
  OF_CHECK(of_dense(mask, isbool ? OF_BOOL : cd, dense));
  d->mkind = isbool ? 1 : 2;
  int64_t st[OF_MAX_DIMS] = {0}, cs[OF_MAX_DIMS];   /* strides over q's dims (as [.., L, S]) */
  of_contiguous_strides(mask->shape, mask->ndim, cs);
  for (int32_t x = 0; x < mask->ndim; x++)
    st[nd - mask->ndim + x] = mask->shape[x] == 1 ? 0 : cs[x];
  d->msl = st[nd - 2];
  d->mss = st[nd - 1];
  OF_CHECK(of_tensor_new(&d->BH, 1, OF_INT64, OF_CPU, moff));
  int64_t *mo = of_tensor_data(*moff);
  for (int64_t bh = 0; bh < d->BH; bh++) {
    int64_t rem = bh, off = 0;
    for (int32_t x = nd - 3; x >= 0; x--) {
      off += (rem % qshape[x]) * st[x];
      rem /= qshape[x];
    }
    mo[bh] = off;
  }
  if (dev == OF_CPU) return OF_OK;
  of_tensor *there = NULL;   /* the offsets where the kernel runs */
  of_status rc = of_tensor_new(&d->BH, 1, OF_INT64, dev, &there);
  if (rc == OF_OK) rc = of_copy_data(there, *moff);
  of_tensor_release(*moff);
  *moff = there;
  return rc;
}

/* ---- backward ---- */
static of_status sdpa_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def sdpa_grad = {"ScaledDotProductAttentionBackward", sdpa_backward};

/* saved: 0 q, 1 k, 2 v, 3 mask, 4 out, 5 lse (compute dtype [BH, L]) */
static of_status sdpa_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  if (n->needs[3])
    return of_fail(OF_ERR_STATE, "%s: the derivative for 'attn_mask' is not implemented; "
                   "detach the mask", OP);
  const a_sdpa *a = OF_NODE_ATTRS(a_sdpa, n);
  of_tensor *sv[6] = {0}, *dn[6] = {0}, *gr[3] = {0}, *moff = NULL;
  of_status st = OF_OK;
  for (int32_t s = 0; s < 6 && st == OF_OK; s++)
    if (s != 3 || n->saved[3].t) st = of_node_saved(n, s, &sv[s]);
  if (st != OF_OK) goto done;
  if (of_is_grad_enabled() && (g[0]->requires_grad || sv[0]->requires_grad ||
                               sv[1]->requires_grad || sv[2]->requires_grad)) {
    st = of_fail(OF_ERR_STATE, "%s: double backward (create_graph through the fused kernel) "
                 "is not supported; compose attention from matmul and softmax for that", OP);
    goto done;
  }
  of_sdpa_desc d;
  memset(&d, 0, sizeof d);
  of_meta m[4];
  for (int32_t x = 0; x < 4; x++) m[x] = of_meta_of(sv[x]);
  st = check_inputs(&m[0], &m[1], &m[2], &m[3], a->dropout_p, a->causal, a->scale, a->gqa, &d);
  if (st != OF_OK) goto done;
  d.seed = a->seed;
  d.offset = a->offset;
  of_dtype cd = sv[5]->dtype;
  int32_t nd = sv[0]->ndim;
  of_tensor *ord[5] = {sv[0], sv[1], sv[2], sv[4], g[0]};
  for (int32_t x = 0; x < 5 && st == OF_OK; x++) st = of_dense(ord[x], cd, &dn[x]);
  of_device dev = of_dev(sv[0]);
  if (st == OF_OK) st = mask_layout(sv[3], nd, sv[0]->shape, cd, dev, &d, &dn[5], &moff);
  for (int32_t x = 0; x < 3 && st == OF_OK; x++)
    st = of_tensor_new_as(OP, sv[x]->shape, nd, cd, dev, &gr[x]);
  if (st != OF_OK) goto done;
  if (dev != OF_CPU) {
    const of_device_ops *ops = of_device_ops_for(OP, dev);
    st = !ops ? OF_ERR_DEVICE
         : !ops->sdpa_back ? of_device_unsupported(OP, dev)
              : ops->sdpa_back(&d, dn[0], dn[1], dn[2], dn[5], moff, dn[3], dn[4], sv[5],
                               gr[0], gr[1], gr[2]);
  } else {
    geo ge = {d, dn[5] ? of_tensor_data(dn[5]) : NULL, moff ? of_tensor_data(moff) : NULL,
              NULL, NULL, NULL, 0, 0, 0};   /* the backward reads dense q, k, v */
    st = cpu_backward(&ge, cd, of_tensor_data(dn[0]), of_tensor_data(dn[1]),
                      of_tensor_data(dn[2]), of_tensor_data(dn[3]), of_tensor_data(dn[4]),
                      of_tensor_data(sv[5]), of_tensor_data(gr[0]), of_tensor_data(gr[1]),
                      of_tensor_data(gr[2]));
  }
  for (int32_t x = 0; x < 3 && st == OF_OK; x++) {
    if (!n->needs[x]) continue;
    st = of_finish_dtype(gr[x], n->in_meta[x].dtype, &gi[x]);
    gr[x] = NULL;
  }
done:
  release_all(sv, 6);
  release_all(dn, 6);
  release_all(gr, 3);
  of_tensor_release(moff);
  return st;
}

/* Rows of x (q, k or v: [..., n, e]) for the CPU forward: x itself when it
 * has the compute dtype and a contiguous last dim (so the [B, H, L, E]
 * transpose of a [B, L, H, E] projection is read in place, not copied), else
 * a dense copy; offs [batch] gets each batch row's first element (relative
 * to the first element) and *rs the stride between rows. */
static of_status cpu_rows(of_tensor *x, of_dtype cd, of_tensor **keep, of_tensor **offs,
                          int64_t *rs) {
  int32_t nd = x->ndim;
  if (x->dtype == cd && (x->shape[nd - 1] <= 1 || x->strides[nd - 1] == 1)) {
    of_tensor_retain(x);
    *keep = x;
  } else {
    OF_CHECK(of_dense(x, cd, keep));
  }
  const of_tensor *t = *keep;
  int64_t nb = 1;
  for (int32_t i = 0; i < nd - 2; i++) nb *= t->shape[i];
  OF_CHECK(of_tensor_new(&nb, 1, OF_INT64, OF_CPU, offs));
  int64_t *o = of_tensor_data(*offs);
  for (int64_t b = 0; b < nb; b++) {
    int64_t rem = b, off = 0;
    for (int32_t i = nd - 3; i >= 0; i--) {
      off += (rem % t->shape[i]) * t->strides[i];
      rem /= t->shape[i];
    }
    o[b] = off;
  }
  *rs = t->strides[nd - 2];
  return OF_OK;
}

/* ---- forward ---- */
static of_status sdpa_body(of_tensor *q, of_tensor *k, of_tensor *v, of_tensor *mask, double p,
                           int32_t causal, double scale, int32_t gqa, of_tensor **out) {
  of_sdpa_desc d;
  memset(&d, 0, sizeof d);
  of_meta qm = of_meta_of(q), km = of_meta_of(k), vm = of_meta_of(v), mm = of_meta_of(mask);
  OF_CHECK(check_inputs(&qm, &km, &vm, &mm, p, causal, scale, gqa, &d));
  OF_ROUTE(OP, dev, dops, sdpa, q, k, v, mask);
  if (p > 0) {
    uint64_t n = (uint64_t)(d.BH * d.L * d.S);
    of_rng_reserve((n + 3) / 4, &d.seed, &d.offset);
  }
  of_dtype cd = of_compute_dtype(q->dtype);
  int32_t nd = q->ndim;
  of_tensor *dn[4] = {0}, *o = NULL, *lse = NULL, *moff = NULL, *offs[3] = {0};
  of_tensor *ins[3] = {q, k, v};
  int64_t rs[3] = {0};
  of_status st = OF_OK;
  for (int32_t x = 0; x < 3 && st == OF_OK; x++)
    st = dev == OF_CPU ? cpu_rows(ins[x], cd, &dn[x], &offs[x], &rs[x]) : of_dense(ins[x], cd, &dn[x]);
  if (st == OF_OK) st = mask_layout(mask, nd, q->shape, cd, dev, &d, &dn[3], &moff);
  of_meta ym = sdpa_result(&qm, &d);
  if (st == OF_OK) st = of_tensor_new_as(OP, ym.shape, nd, cd, dev, &o);
  if (st == OF_OK) st = of_tensor_new_as(OP, q->shape, nd - 1, cd, dev, &lse);
  if (st != OF_OK) goto done;
  if (dev != OF_CPU) {
    st = dops->sdpa(&d, dn[0], dn[1], dn[2], dn[3], moff, o, lse);
  } else {
    geo ge = {d, dn[3] ? of_tensor_data(dn[3]) : NULL, moff ? of_tensor_data(moff) : NULL,
              of_tensor_data(offs[0]), of_tensor_data(offs[1]), of_tensor_data(offs[2]),
              rs[0], rs[1], rs[2]};
    st = cpu_forward(&ge, cd, of_tensor_data(dn[0]), of_tensor_data(dn[1]),
                     of_tensor_data(dn[2]), of_tensor_data(o), of_tensor_data(lse));
  }
  if (st == OF_OK) {
    st = of_finish_dtype(o, q->dtype, out);
    o = NULL;
  }
  of_tensor *all[4] = {q, k, v, mask};
  if (st == OF_OK && of_grad_needed(all, 4)) {
    of_node *n;
    st = of_record(&sdpa_grad, all, 4, out, 1, &n);
    if (st != OF_OK) {
      of_tensor_release(*out);
      *out = NULL;
      goto done;
    }
    a_sdpa a;
    OF_ZERO(a);
    a.dropout_p = p;
    a.scale = scale;
    a.seed = d.seed;
    a.offset = d.offset;
    a.causal = causal != 0;
    a.gqa = gqa != 0;
    OF_NODE_KEEP(n, OPK_SDPA, a);
    for (int32_t x = 0; x < 4; x++) of_node_save(n, x, all[x]);
    of_node_save(n, 4, *out);
    of_node_save(n, 5, lse);
  }
done:
  release_all(dn, 4);
  release_all(offs, 3);
  of_tensor_release(o);
  of_tensor_release(lse);
  of_tensor_release(moff);
  return st;
}

/* ---- entry point, run function, table row ---- */
static of_status pack_sdpa(of_tensor *q, of_tensor *k, of_tensor *v, of_tensor *mask, double p,
                           int32_t causal, double scale, int32_t gqa, of_tensor **out) {
  a_sdpa a;
  OF_ZERO(a);
  a.dropout_p = p;
  a.scale = scale;
  a.causal = causal != 0;
  a.gqa = gqa != 0;
  of_tensor *ins[4] = {q, k, v, mask};
  return OF_RECORD(OPK_SDPA, a, ins, 4, out, 1);
}
of_status of_scaled_dot_product_attention(of_tensor *q, of_tensor *k, of_tensor *v,
                                          of_tensor *attn_mask, double dropout_p,
                                          int32_t is_causal, double scale, int32_t enable_gqa,
                                          of_tensor **out) {
  AMP(OF_AMP_LOW, of_scaled_dot_product_attention(A_[0], A_[1], A_[2], attn_mask, dropout_p,
                                                  is_causal, scale, enable_gqa, out),
      q, k, v);
  OF_DISPATCH(sdpa_body(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, out),
              pack_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, out));
}
static of_status run_sdpa(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_sdpa);
  OF_NEED(a->dropout_p >= 0 && a->dropout_p < 1, "dropout_p");
  OF_RUN1(of_scaled_dot_product_attention(ins[0], ins[1], ins[2], ins[3], a->dropout_p,
                                          a->causal, a->scale, a->gqa, OF_R));
}
/* A loaded node's result from its record and recorded inputs (the mask
 * absent: ndim -1), by check_inputs and sdpa_result, as the forward */
static of_status infer_SDPA(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_sdpa *a = p;
  of_sdpa_desc d;
  memset(&d, 0, sizeof d);
  of_meta none = {.ndim = -1};
  OF_CHECK(check_inputs(&ins[0], &ins[1], &ins[2], nin > 3 ? &ins[3] : &none, a->dropout_p,
                        a->causal, a->scale, a->gqa, &d));
  outs[0] = sdpa_result(&ins[0], &d);
  return OF_OK;
}
OF_OP_IMPL_INFER(SDPA, run_sdpa, NULL, NULL, NULL, infer_SDPA);
