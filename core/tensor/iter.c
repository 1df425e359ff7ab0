/* iter.c -- strided, broadcast iteration shared by all elementwise kernels. */
#include "../internal.h"
#include <omp.h>

of_status of_broadcast_shapes(const char *op, const int64_t *a, int32_t na,
                              const int64_t *b, int32_t nb, int64_t *out,
                              int32_t *nout) {
  int32_t n = na > nb ? na : nb;
  for (int32_t i = 0; i < n; i++) {
    int64_t da = i < n - na ? 1 : a[i - (n - na)];
    int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
    if (da != db && da != 1 && db != 1) {
      char sa[96], sb[96];
      return of_fail(OF_ERR_SHAPE,
                     "%s: shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)", op,
                     of_shape_str(a, na, sa, 96), of_shape_str(b, nb, sb, 96), (int)i + 1,
                     (long long)da, (long long)db);
    }
    out[i] = da == 1 ? db : da;
  }
  *nout = n;
  return OF_OK;
}

of_status of_iter_init(of_iter *it, of_tensor **ops, int32_t nops, const int64_t *shape,
                       int32_t ndim) {
  it->nops = nops;
  int32_t nd = 0;
  for (int32_t d = 0; d < ndim; d++) {
    if (shape[d] == 1) continue;  /* size-1 dims never move a pointer */
    it->shape[nd] = shape[d];
    for (int32_t k = 0; k < nops; k++) {
      of_tensor *t = ops[k];
      int32_t td = d - (ndim - t->ndim);   /* right-aligned: broadcasting */
      int64_t s = (td < 0 || t->shape[td] == 1) ? 0 : t->strides[td];
      it->strides[k][nd] = s * of_dtype_size(t->dtype);
    }
    nd++;
  }
  for (int32_t k = 0; k < nops; k++) it->base[k] = of_ptr(ops[k]);
  /* Walk the dims in the output's memory order (largest stride first): an
   * output laid out channels-last then merges with operands of the same
   * layout into one dense run instead of a strided 4-d walk. Every user is
   * elementwise, so the visiting order does not change results. */
  for (int32_t i = 1; i < nd; i++) {
    int32_t j = i;
    while (j > 0 && it->strides[0][j - 1] < it->strides[0][j]) {
      int64_t t = it->shape[j]; it->shape[j] = it->shape[j - 1]; it->shape[j - 1] = t;
      for (int32_t k = 0; k < nops; k++) {
        int64_t s = it->strides[k][j];
        it->strides[k][j] = it->strides[k][j - 1];
        it->strides[k][j - 1] = s;
      }
      j--;
    }
  }
  /* merge dim i into i+1 when every operand steps contiguously across them */
  int32_t out = 0;
  for (int32_t d = 0; d < nd; d++) {
    if (out > 0) {
      bool merge = true;
      for (int32_t k = 0; k < nops && merge; k++)
        merge = it->strides[k][out - 1] == it->strides[k][d] * it->shape[d];
      if (merge) {
        it->shape[out - 1] *= it->shape[d];
        for (int32_t k = 0; k < nops; k++) it->strides[k][out - 1] = it->strides[k][d];
        continue;
      }
    }
    it->shape[out] = it->shape[d];
    for (int32_t k = 0; k < nops; k++) it->strides[k][out] = it->strides[k][d];
    out++;
  }
  if (out == 0) {  /* a scalar: one run of one element */
    it->shape[0] = 1;
    for (int32_t k = 0; k < nops; k++) it->strides[k][0] = 0;
    out = 1;
  }
  it->ndim = out;
  return OF_OK;
}

static void run_range(const of_iter *it, of_loop_fn fn, void *ctx, int64_t begin,
                      int64_t end) {
  int32_t nd = it->ndim, nops = it->nops;
  int64_t idx[OF_MAX_DIMS], rem = begin;
  for (int32_t d = nd - 1; d >= 0; d--) {
    idx[d] = rem % it->shape[d];
    rem /= it->shape[d];
  }
  int64_t inner[OF_ITER_MAX];
  for (int32_t k = 0; k < nops; k++) inner[k] = it->strides[k][nd - 1];
  while (begin < end) {
    char *ptrs[OF_ITER_MAX];
    for (int32_t k = 0; k < nops; k++) {
      char *p = it->base[k];
      for (int32_t d = 0; d < nd; d++) p += idx[d] * it->strides[k][d];
      ptrs[k] = p;
    }
    int64_t n = it->shape[nd - 1] - idx[nd - 1];
    if (n > end - begin) n = end - begin;
    fn(ptrs, inner, n, ctx);
    begin += n;
    idx[nd - 1] += n;
    for (int32_t d = nd - 1; d > 0 && idx[d] >= it->shape[d]; d--) {
      idx[d] = 0;
      idx[d - 1]++;
    }
  }
}

void of_iter_run(of_iter *it, of_loop_fn fn, void *ctx, bool parallel) {
  int64_t total = 1;
  for (int32_t d = 0; d < it->ndim; d++) total *= it->shape[d];
  if (total == 0) return;
  int32_t nt = of_threads();
  if (!parallel || nt <= 1 || total < OF_PARALLEL_GRAIN) {
    run_range(it, fn, ctx, 0, total);
    return;
  }
  if ((int64_t)nt > total / (OF_PARALLEL_GRAIN / 4)) nt = (int32_t)(total / (OF_PARALLEL_GRAIN / 4));
#pragma omp parallel num_threads(nt)
  {
    int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    /* chunk boundaries on 16-element multiples keep vector loops aligned */
    int64_t chunk = ((total + n - 1) / n + 15) / 16 * 16;
    int64_t b = t * chunk, e = b + chunk < total ? b + chunk : total;
    if (b < e) run_range(it, fn, ctx, b, e);
  }
}
