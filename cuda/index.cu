// index.cu -- kernels of the indexing family: gather, scatter (replace and
// add), index_select, index_add, sort/topk (cub segmented radix sort),
// cumsum/cumprod, tril/triu, repeat, the compaction behind masked_select and
// nonzero, and arange/linspace on the device.
//
// The core has checked shapes and dtypes; index *values* are checked here,
// on the device: a value out of range raises the device's error flag (code
// 3, "index out of range"), which the next synchronising call reports with
// the op's name, and nothing is read or written through it.
//
// Where the CPU's result depends on the order of writes (scatter with
// repeated indices keeps the last one; additions in order), a thread walks a
// whole line in order, so the GPU gives the CPU's answer bit for bit. Only
// scatter_add/index_add with few long lines use atomics (the order of float
// additions then varies, as in PyTorch).
#include "common.cuh"
#include "kernels.cuh"
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <type_traits>

namespace ofc {

enum { kIndexFlag = 3 };

// The device's bad-input flag and the code naming the op (flag_code).
struct Flag {
  int *p;
  int code;
};
static Flag make_flag(int dev, const char *op) {
  return Flag{error_flag(dev), flag_code(op, kIndexFlag)};
}
__device__ __forceinline__ void bad_index(Flag f) {
  if (f.p) atomicCAS(f.p, 0, f.code);
}

template <typename I>
__device__ __forceinline__ bool in_range(I raw, int64_t base, int64_t size, int64_t *v) {
  *v = (int64_t)raw - base;
  return (uint64_t)*v < (uint64_t)size;
}

// Moves elements by their size: data movement works for every dtype.
template <typename F>
inline of_status dispatch_size(int64_t es, F &&f) {
  switch (es) {
    case 1: return f((uint8_t)0);
    case 2: return f((uint16_t)0);
    case 4: return f((uint32_t)0);
    default: return f((uint64_t)0);
  }
}
template <typename F>
inline of_status dispatch_index(of_dtype dt, const char *op, F &&f) {
  if (dt == OF_INT64) return f((int64_t)0);
  if (dt == OF_INT32) return f((int32_t)0);
  return of_fail(OF_ERR_DTYPE, "%s: index must be int64 or int32 on CUDA, got %s", op,
                 of_dtype_name(dt));
}

// A copy of t's header with dim d's stride zeroed (the index supplies it).
static of_tensor without_dim(const of_tensor *t, int32_t d) {
  of_tensor v = *t;
  if (v.ndim > 0) v.strides[d] = 0;
  return v;
}

// t's header with dim d of size 1 (lines along d are walked by a thread).
static of_tensor line_heads(const of_tensor *t, int32_t d) {
  of_tensor v = *t;
  if (v.ndim > 0) {
    v.shape[d] = 1;
    v.numel = of_shape_numel(v.shape, v.ndim);
  }
  return v;
}

static int64_t size_at(const of_tensor *t, int32_t d) { return t->ndim > 0 ? t->shape[d] : 1; }
static int64_t stride_at(const of_tensor *t, int32_t d) { return t->ndim > 0 ? t->strides[d] : 0; }

// ---- gather: out[..j..] = x[..index[..j..]..] along dim ----
template <typename T, typename I>
__global__ void gather_kernel(int64_t n, Offsets<3> o, T *out, const I *idx, const T *x,
                              int64_t xd, int64_t size, int64_t base, Flag flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[3], v;
    o.get(i, off);
    if (in_range(idx[off[1]], base, size, &v)) out[off[0]] = x[off[2] + v * xd];
    else bad_index(flag);
  }
}

static of_status gather(of_tensor *out, of_tensor *x, int32_t dim, of_tensor *index,
                        int64_t base) {
  int64_t n = out->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(out));
  cudaStream_t s = current_stream(dev);
  of_tensor xv = without_dim(x, dim);
  const of_tensor *all[3] = {out, index, &xv};
  Offsets<3> o = make_offsets<3>(out, all);
  int64_t size = size_at(x, dim), xd = stride_at(x, dim);
  Flag flag = make_flag(dev, "gather");
  return dispatch_index(index->dtype, "gather", [&](auto zi) -> of_status {
    typedef decltype(zi) I;
    return dispatch_size(of_dtype_size(x->dtype), [&](auto z) -> of_status {
      typedef decltype(z) T;
      gather_kernel<T, I><<<blocks_for(n), kThreads, 0, s>>>(
          n, o, (T *)ptr(out), (const I *)ptr(index), (const T *)ptr(x), xd, size, base, flag);
      return launched("gather");
    });
  });
}

// ---- scatter: dst[..index[..j..]..] = src[..j..] (or +=) ----
template <typename T>
__device__ __forceinline__ T add_elem(T a, T b) {
  if constexpr (std::is_same<T, bool>::value) return a || b;
  else if constexpr (std::is_same<T, half_t>::value || std::is_same<T, bf16_t>::value)
    return Cvt<T, float>::go(to_f(a) + to_f(b));
  else return (T)(a + b);
}

// A thread per line along dim: writes in index order (the last one wins).
template <typename T, typename I>
__global__ void scatter_lines(int64_t lines, Offsets<3> o, int64_t len, T *dst, const I *idx,
                              const T *src, T value, bool use_value, bool add, int64_t dd,
                              int64_t si, int64_t ss, int64_t size, int64_t base, Flag flag) {
  for (int64_t l = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; l < lines;
       l += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[3];
    o.get(l, off);
    for (int64_t j = 0; j < len; j++) {
      int64_t v;
      if (!in_range(idx[off[1] + j * si], base, size, &v)) {
        bad_index(flag);
        continue;
      }
      T val = use_value ? value : src[off[2] + j * ss];
      T *p = dst + off[0] + v * dd;
      *p = add ? add_elem(*p, val) : val;
    }
  }
}

template <typename T> struct HasAtomicAdd {
  static constexpr bool value =
      std::is_same<T, float>::value || std::is_same<T, double>::value ||
      std::is_same<T, int32_t>::value || std::is_same<T, int64_t>::value ||
      std::is_same<T, half_t>::value || std::is_same<T, bf16_t>::value;
};

template <typename T>
__device__ __forceinline__ void atomic_add(T *p, T v) {
  if constexpr (std::is_same<T, int64_t>::value)
    atomicAdd((unsigned long long *)p, (unsigned long long)v);
  else atomicAdd(p, v);
}

// A thread per element, atomics: for additions over few, long lines.
template <typename T, typename I>
__global__ void scatter_add_atomic(int64_t n, Offsets<3> o, T *dst, const I *idx, const T *src,
                                   T value, bool use_value, int64_t dd, int64_t size,
                                   int64_t base, Flag flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[3], v;
    o.get(i, off);
    if (!in_range(idx[off[1]], base, size, &v)) {
      bad_index(flag);
      continue;
    }
    atomic_add(dst + off[0] + v * dd, use_value ? value : src[off[2]]);
  }
}

static bool use_atomics(int64_t lines, int64_t len) { return lines < 4096 && len >= 64; }

static of_status scatter(of_tensor *dst, int32_t dim, of_tensor *index, of_tensor *src,
                         double value, int32_t use_value, int32_t reduce, int64_t base) {
  if (index->numel == 0) return OF_OK;
  int dev = use_device(of_dev(dst));
  cudaStream_t s = current_stream(dev);
  int64_t len = size_at(index, dim), lines = index->numel / len, size = size_at(dst, dim);
  int64_t dd = stride_at(dst, dim), si = stride_at(index, dim);
  int64_t ss = use_value ? 0 : stride_at(src, dim);
  Flag flag = make_flag(dev, reduce ? "scatter_add" : "scatter");
  const of_tensor *srct = use_value ? index : src;   // any header of the index's rank
  return dispatch_index(index->dtype, "scatter", [&](auto zi) -> of_status {
    typedef decltype(zi) I;
    return dispatch_all(dst->dtype, [&](auto z) -> of_status {
      typedef decltype(z) T;
      T v = Cvt<T, double>::go(value);
      const T *sp = use_value ? nullptr : (const T *)ptr(src);
      if constexpr (HasAtomicAdd<T>::value) {
        if (reduce && use_atomics(lines, len)) {
          of_tensor dv = without_dim(dst, dim), iv = *index, sv = *srct;
          if (use_value)
            for (int32_t k = 0; k < sv.ndim; k++) sv.strides[k] = 0;
          const of_tensor *all[3] = {&dv, &iv, &sv};
          Offsets<3> o = make_offsets<3>(index, all);
          scatter_add_atomic<T, I><<<blocks_for(index->numel), kThreads, 0, s>>>(
              index->numel, o, (T *)ptr(dst), (const I *)ptr(index), sp, v, use_value != 0, dd,
              size, base, flag);
          return launched("scatter_add");
        }
      }
      of_tensor il = line_heads(index, dim), dl = line_heads(dst, dim), sl = line_heads(srct, dim);
      if (dst->ndim > 0) dl.strides[dim] = 0;
      if (use_value)
        for (int32_t k = 0; k < sl.ndim; k++) sl.strides[k] = 0;
      // dst and src may be larger than the index in other dims: iterate
      // over the index's shape with their strides
      for (int32_t k = 0; k < il.ndim; k++) {
        dl.shape[k] = il.shape[k];
        sl.shape[k] = il.shape[k];
      }
      const of_tensor *all[3] = {&dl, &il, &sl};
      Offsets<3> o = make_offsets<3>(&il, all);
      scatter_lines<T, I><<<blocks_for(lines), kThreads, 0, s>>>(
          lines, o, len, (T *)ptr(dst), (const I *)ptr(index), sp, v, use_value != 0,
          reduce != 0, dd, si, ss, size, base, flag);
      return launched(reduce ? "scatter_add" : "scatter");
    });
  });
}

// ---- index_select: out [outer, n, inner] <- x [outer, size, inner] rows ----
template <typename T, typename I>
__global__ void index_select_kernel(int64_t total, int64_t n, int64_t inner, int64_t size,
                                    T *out, const T *x, const I *idx, int64_t base, Flag flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = i % inner, r = i / inner, k = r % n, o = r / n, v;
    if (in_range(idx[k], base, size, &v)) out[i] = x[(o * size + v) * inner + c];
    else bad_index(flag);
  }
}

static void split3(const of_tensor *t, int32_t d, int64_t *outer, int64_t *inner) {
  *outer = *inner = 1;
  for (int32_t k = 0; k < t->ndim; k++) {
    if (k < d) *outer *= t->shape[k];
    if (k > d) *inner *= t->shape[k];
  }
}

static of_status index_select(of_tensor *out, of_tensor *x, int32_t dim, of_tensor *index,
                              int64_t base) {
  int64_t total = out->numel;
  if (total == 0) return OF_OK;
  int dev = use_device(of_dev(out));
  cudaStream_t s = current_stream(dev);
  int64_t outer, inner, n = index->numel, size = size_at(x, dim);
  split3(x, dim, &outer, &inner);
  Flag flag = make_flag(dev, "index_select");
  return dispatch_index(index->dtype, "index_select", [&](auto zi) -> of_status {
    typedef decltype(zi) I;
    return dispatch_size(of_dtype_size(x->dtype), [&](auto z) -> of_status {
      typedef decltype(z) T;
      index_select_kernel<T, I><<<blocks_for(total), kThreads, 0, s>>>(
          total, n, inner, size, (T *)ptr(out), (const T *)ptr(x), (const I *)ptr(index), base,
          flag);
      return launched("index_select");
    });
  });
}

// ---- index_add: dst.select(dim, index[k]) += alpha * src.select(dim, k) ----
template <typename T, typename A>
__device__ __forceinline__ T axpy(T d, A alpha, T s) {
  if constexpr (std::is_same<T, bool>::value) return d || (alpha != 0 && s);
  else if constexpr (std::is_same<T, half_t>::value || std::is_same<T, bf16_t>::value)
    return Cvt<T, float>::go(to_f(d) + (float)alpha * to_f(s));
  else return (T)(d + (T)alpha * s);
}

// A thread per destination column (o, c), the indices in order: no races,
// the CPU's order of additions.
template <typename T, typename I>
__global__ void index_add_cols(int64_t cols, int64_t n, int64_t inner, int64_t size, T *dst,
                               const T *src, const I *idx, double alpha, int64_t base,
                               Flag flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < cols;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = i % inner, o = i / inner;
    for (int64_t k = 0; k < n; k++) {
      int64_t v;
      if (!in_range(idx[k], base, size, &v)) {
        bad_index(flag);
        continue;
      }
      T *p = dst + (o * size + v) * inner + c;
      *p = axpy(*p, alpha, src[(o * n + k) * inner + c]);
    }
  }
}

template <typename T, typename I>
__global__ void index_add_atomic(int64_t total, int64_t n, int64_t inner, int64_t size, T *dst,
                                 const T *src, const I *idx, double alpha, int64_t base,
                                 Flag flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = i % inner, r = i / inner, k = r % n, o = r / n, v;
    if (!in_range(idx[k], base, size, &v)) {
      bad_index(flag);
      continue;
    }
    T s = src[i];
    T a;
    if constexpr (std::is_same<T, half_t>::value || std::is_same<T, bf16_t>::value)
      a = Cvt<T, float>::go((float)alpha * to_f(s));
    else a = (T)((T)alpha * s);
    atomic_add(dst + (o * size + v) * inner + c, a);
  }
}

static of_status index_add(of_tensor *dst, int32_t dim, of_tensor *index, of_tensor *src,
                           double alpha, int64_t base) {
  int64_t n = index->numel;
  if (n == 0 || dst->numel == 0) return OF_OK;
  int dev = use_device(of_dev(dst));
  cudaStream_t s = current_stream(dev);
  int64_t outer, inner, size = size_at(dst, dim);
  split3(dst, dim, &outer, &inner);
  int64_t cols = outer * inner, total = cols * n;
  Flag flag = make_flag(dev, "index_add");
  return dispatch_index(index->dtype, "index_add", [&](auto zi) -> of_status {
    typedef decltype(zi) I;
    return dispatch_all(dst->dtype, [&](auto z) -> of_status {
      typedef decltype(z) T;
      if constexpr (HasAtomicAdd<T>::value) {
        if (use_atomics(cols, n)) {
          index_add_atomic<T, I><<<blocks_for(total), kThreads, 0, s>>>(
              total, n, inner, size, (T *)ptr(dst), (const T *)ptr(src), (const I *)ptr(index),
              alpha, base, flag);
          return launched("index_add");
        }
      }
      index_add_cols<T, I><<<blocks_for(cols), kThreads, 0, s>>>(
          cols, n, inner, size, (T *)ptr(dst), (const T *)ptr(src), (const I *)ptr(index), alpha,
          base, flag);
      return launched("index_add");
    });
  });
}

// ---- sort / topk ----
// Keys are order-preserving unsigned images of the CPU's comparison keys:
// int64 as int64, everything else as double with -0.0 equal to 0.0 and every
// NaN the largest value. The radix sort is stable, so equal keys keep their
// positions (the CPU's stable merge sort) in both directions.
template <typename T>
__device__ __forceinline__ uint64_t sort_key(T v) {
  if constexpr (std::is_same<T, int64_t>::value) {
    return (uint64_t)v ^ 0x8000000000000000ull;
  } else {
    double d;
    if constexpr (std::is_same<T, half_t>::value || std::is_same<T, bf16_t>::value)
      d = (double)to_f(v);
    else d = (double)v;
    if (d != d) return ~0ull;
    if (d == 0) d = 0;   // -0.0 sorts with 0.0
    uint64_t b = (uint64_t)__double_as_longlong(d);
    return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
  }
}

template <typename T>
__global__ void make_keys(int64_t total, int64_t n, const T *x, uint64_t *keys, int64_t *pos) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    keys[i] = sort_key(x[i]);
    pos[i] = i % n;
  }
}

__global__ void row_offsets(int64_t rows, int64_t n, int *offs) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i <= rows;
       i += (int64_t)gridDim.x * blockDim.x)
    offs[i] = (int)(i * n);
}

template <typename T>
__global__ void take_sorted(int64_t total, int64_t n, int64_t k, const T *x, const int64_t *pos,
                            T *values, int64_t *indices, int64_t base) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / k, j = i - r * k, p = pos[r * n + j];
    if (values) values[i] = x[r * n + p];
    if (indices) indices[i] = p + base;
  }
}

// Device scratch through the core's allocator (stream-ordered, cached).
struct Scratch {
  of_tensor *t = nullptr;
  ~Scratch() { if (t) of_tensor_release(t); }
  void *get(of_device dev, int64_t bytes) {
    int64_t b = bytes > 0 ? bytes : 1;
    if (of_tensor_new(&b, 1, OF_UINT8, dev, &t) != OF_OK) return nullptr;
    return ptr(t);
  }
};

static of_status sort_rows(of_tensor *x, int64_t outer, int64_t n, int64_t k, int32_t descending,
                           int64_t base, of_tensor *values, of_tensor *indices) {
  if (outer == 0 || n == 0 || k == 0) return OF_OK;
  const char *op = k < n ? "topk" : "sort";
  if (n > INT32_MAX / 2)
    return of_fail(OF_ERR_ARG, "%s: lines of %lld elements are too long for the CUDA sort "
                   "(at most %d)", op, (long long)n, INT32_MAX / 2);
  of_device dv = of_dev(x);
  int dev = use_device(dv);
  cudaStream_t s = current_stream(dev);
  // rows in batches of fewer than 2^31 elements (cub counts in int)
  int64_t per = (int64_t)(INT32_MAX / 2) / n;
  if (per > outer) per = outer;
  int64_t cap = per * n;
  Scratch ks, pb, ob;
  uint64_t *keys = (uint64_t *)ks.get(dv, cap * 2 * (int64_t)sizeof(uint64_t));
  int64_t *pos = (int64_t *)pb.get(dv, cap * 2 * (int64_t)sizeof(int64_t));
  int *offs = (int *)ob.get(dv, (per + 1) * (int64_t)sizeof(int));
  if (!keys || !pos || !offs) return OF_ERR_OOM;
  size_t tmp_bytes = 0;
  OFC_TRY((cub::DeviceSegmentedRadixSort::SortPairs(
              nullptr, tmp_bytes, keys, keys + cap, pos, pos + cap, (int)cap, (int)per, offs,
              offs + 1, 0, 64, s)), op);
  Scratch tb;
  void *tmp = tb.get(dv, (int64_t)tmp_bytes);
  if (!tmp) return OF_ERR_OOM;
  const int64_t es = of_dtype_size(x->dtype);
  for (int64_t r0 = 0; r0 < outer; r0 += per) {
    int64_t rows = outer - r0 < per ? outer - r0 : per, m = rows * n;
    const char *xr = ptr(x) + r0 * n * es;
    of_status st = dispatch_all(x->dtype, [&](auto z) -> of_status {
      typedef decltype(z) T;
      make_keys<T><<<blocks_for(m), kThreads, 0, s>>>(m, n, (const T *)xr, keys, pos);
      return launched(op);
    });
    if (st != OF_OK) return st;
    row_offsets<<<blocks_for(rows + 1), kThreads, 0, s>>>(rows, n, offs);
    size_t bytes = tmp_bytes;
    if (descending)
      OFC_TRY((cub::DeviceSegmentedRadixSort::SortPairsDescending(
                  tmp, bytes, keys, keys + cap, pos, pos + cap, (int)m, (int)rows, offs, offs + 1,
                  0, 64, s)), op);
    else
      OFC_TRY((cub::DeviceSegmentedRadixSort::SortPairs(
                  tmp, bytes, keys, keys + cap, pos, pos + cap, (int)m, (int)rows, offs, offs + 1,
                  0, 64, s)), op);
    int64_t t = rows * k;
    st = dispatch_size(es, [&](auto z) -> of_status {
      typedef decltype(z) T;
      take_sorted<T><<<blocks_for(t), kThreads, 0, s>>>(
          t, n, k, (const T *)xr, pos + cap, values ? (T *)ptr(values) + r0 * k : nullptr,
          indices ? (int64_t *)ptr(indices) + r0 * k : nullptr, base);
      return launched(op);
    });
    if (st != OF_OK) return st;
  }
  return OF_OK;
}

// ---- cumsum / cumprod: a thread per line, in order ----
template <typename T, typename A>
__global__ void scan_kernel(int64_t lines, int64_t n, int64_t inner, const T *x, T *y,
                            bool prod) {
  for (int64_t l = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; l < lines;
       l += (int64_t)gridDim.x * blockDim.x) {
    int64_t o = l / inner, c = l - o * inner;
    const T *xr = x + o * n * inner + c;
    T *yr = y + o * n * inner + c;
    A a = prod ? (A)1 : (A)0;
    for (int64_t j = 0; j < n; j++) {
      A v = (A)xr[j * inner];
      if constexpr (std::is_same<A, int64_t>::value)
        a = prod ? (A)((uint64_t)a * (uint64_t)v) : (A)((uint64_t)a + (uint64_t)v);
      else a = prod ? a * v : a + v;
      yr[j * inner] = (T)a;
    }
  }
}

static of_status scan(of_tensor *x, int64_t outer, int64_t n, int64_t inner, int32_t is_prod,
                      of_tensor *y) {
  int64_t lines = outer * inner;
  if (lines == 0 || n == 0) return OF_OK;
  int dev = use_device(of_dev(x));
  cudaStream_t s = current_stream(dev);
  const char *op = is_prod ? "cumprod" : "cumsum";
  bool p = is_prod != 0;
  // small blocks: lines are few when the scanned dim is long
  int th = lines < 4096 ? 64 : kThreads;
  switch (x->dtype) {
    case OF_FLOAT32:
      scan_kernel<float, double><<<blocks_for(lines, th), th, 0, s>>>(
          lines, n, inner, (const float *)ptr(x), (float *)ptr(y), p);
      break;
    case OF_FLOAT64:
      scan_kernel<double, double><<<blocks_for(lines, th), th, 0, s>>>(
          lines, n, inner, (const double *)ptr(x), (double *)ptr(y), p);
      break;
    case OF_INT64:
      scan_kernel<int64_t, int64_t><<<blocks_for(lines, th), th, 0, s>>>(
          lines, n, inner, (const int64_t *)ptr(x), (int64_t *)ptr(y), p);
      break;
    default:
      return of_fail(OF_ERR_DTYPE, "%s: dtype %s is not a scan dtype on CUDA", op,
                     of_dtype_name(x->dtype));
  }
  return launched(op);
}

// ---- tril / triu ----
template <typename T>
__global__ void tri_kernel(int64_t n, Offsets<2> o, int64_t rows, int64_t cols, int64_t k,
                           bool upper, T *out, const T *x) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    o.get(i, off);
    int64_t c = i % cols, r = (i / cols) % rows;
    bool keep = upper ? c - r >= k : c - r <= k;
    out[off[0]] = keep ? x[off[1]] : T(0);
  }
}

static of_status tri(of_tensor *out, of_tensor *x, int64_t k, int32_t upper) {
  int64_t n = out->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(out));
  cudaStream_t s = current_stream(dev);
  int64_t rows = out->shape[out->ndim - 2], cols = out->shape[out->ndim - 1];
  // keep the last two dims apart: the kernel reads (row, col) from i
  const of_tensor *all[2] = {out, x};
  Offsets<2> o = make_offsets<2>(out, all);
  return dispatch_size(of_dtype_size(x->dtype), [&](auto z) -> of_status {
    typedef decltype(z) T;
    tri_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(n, o, rows, cols, k, upper != 0,
                                                     (T *)ptr(out), (const T *)ptr(x));
    return launched(upper ? "triu" : "tril");
  });
}

// ---- repeat ----
struct Tile {
  int32_t ndim;
  int64_t oshape[OF_MAX_DIMS], xshape[OF_MAX_DIMS], xstride[OF_MAX_DIMS];
};

template <typename T>
__global__ void repeat_kernel(int64_t n, Tile t, T *out, const T *x) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t rem = i, off = 0;
    for (int32_t d = t.ndim - 1; d >= 0; d--) {
      int64_t c = rem % t.oshape[d];
      rem /= t.oshape[d];
      off += (c % t.xshape[d]) * t.xstride[d];
    }
    out[i] = x[off];
  }
}

static of_status repeat(of_tensor *out, of_tensor *x) {
  int64_t n = out->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(out));
  cudaStream_t s = current_stream(dev);
  Tile t;
  t.ndim = out->ndim;
  for (int32_t d = 0; d < out->ndim; d++) {
    t.oshape[d] = out->shape[d];
    t.xshape[d] = x->shape[d];
    t.xstride[d] = x->strides[d];
  }
  return dispatch_size(of_dtype_size(x->dtype), [&](auto z) -> of_status {
    typedef decltype(z) T;
    repeat_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(n, t, (T *)ptr(out), (const T *)ptr(x));
    return launched("repeat");
  });
}

// ---- masked_select / nonzero: prefix count, then compaction ----
__global__ void mask_to_i64(int64_t n, const bool *m, int64_t *pos) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    pos[i] = m[i] ? 1 : 0;
}

static of_status mask_scan(of_tensor *mask, of_tensor *pos, int64_t *total) {
  int64_t n = mask->numel;
  *total = 0;
  if (n == 0) return OF_OK;
  of_device dv = of_dev(mask);
  int dev = use_device(dv);
  cudaStream_t s = current_stream(dev);
  int64_t *p = (int64_t *)ptr(pos);
  mask_to_i64<<<blocks_for(n), kThreads, 0, s>>>(n, (const bool *)ptr(mask), p);
  size_t bytes = 0;
  OFC_TRY(cub::DeviceScan::ExclusiveSum(nullptr, bytes, p, p, n, s), "masked_select");
  Scratch tb;
  void *tmp = tb.get(dv, (int64_t)bytes);
  if (!tmp) return OF_ERR_OOM;
  OFC_TRY(cub::DeviceScan::ExclusiveSum(tmp, bytes, p, p, n, s), "masked_select");
  int64_t last = 0;
  bool lm = false;
  OFC_TRY(cudaMemcpyAsync(&last, p + n - 1, sizeof last, cudaMemcpyDeviceToHost, s),
          "masked_select");
  OFC_TRY(cudaMemcpyAsync(&lm, (const bool *)ptr(mask) + n - 1, sizeof lm,
                          cudaMemcpyDeviceToHost, s), "masked_select");
  cudaError_t e = cudaStreamSynchronize(s);
  if (e != cudaSuccess)
    return of_fail(OF_ERR_DEVICE, "masked_select: CUDA error: %s (while counting the mask; an "
                   "earlier asynchronous kernel may have failed)", cudaGetErrorString(e));
  *total = last + (lm ? 1 : 0);
  return OF_OK;
}

template <typename T>
__global__ void compact_values(int64_t n, const bool *m, const int64_t *pos, const T *x, T *out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    if (m[i]) out[pos[i]] = x[i];
}

struct Coords {
  int32_t ndim;
  int64_t shape[OF_MAX_DIMS];
};

__global__ void compact_coords(int64_t n, const bool *m, const int64_t *pos, Coords c,
                               int64_t base, int64_t *out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (!m[i]) continue;
    int64_t *row = out + pos[i] * c.ndim, rem = i;
    for (int32_t d = c.ndim - 1; d >= 0; d--) {
      row[d] = rem % c.shape[d] + base;
      rem /= c.shape[d];
    }
  }
}

static of_status mask_compact(of_tensor *mask, of_tensor *pos, of_tensor *x,
                              const int64_t *shape, int32_t ndim, int64_t base, of_tensor *out) {
  int64_t n = mask->numel;
  if (n == 0 || out->numel == 0) return OF_OK;
  int dev = use_device(of_dev(mask));
  cudaStream_t s = current_stream(dev);
  const bool *m = (const bool *)ptr(mask);
  const int64_t *p = (const int64_t *)ptr(pos);
  if (x)
    return dispatch_size(of_dtype_size(x->dtype), [&](auto z) -> of_status {
      typedef decltype(z) T;
      compact_values<T><<<blocks_for(n), kThreads, 0, s>>>(n, m, p, (const T *)ptr(x),
                                                           (T *)ptr(out));
      return launched("masked_select");
    });
  Coords c;
  c.ndim = ndim;
  for (int32_t d = 0; d < ndim; d++) c.shape[d] = shape[d];
  compact_coords<<<blocks_for(n), kThreads, 0, s>>>(n, m, p, c, base, (int64_t *)ptr(out));
  return launched("nonzero");
}

// ---- arange / linspace ----
template <typename T>
__global__ void iota_kernel(int64_t n, T *out, double start, double step, double end,
                            bool lin) {
  const int64_t half = n / 2;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    double v;
    if (!lin) v = start + (double)i * step;
    else if (n == 1) v = start;
    else v = i < half ? start + step * (double)i : end - step * (double)(n - 1 - i);
    out[i] = Cvt<T, double>::go(v);
  }
}

static of_status iota(of_tensor *out, double start, double step, double end, int32_t linspace) {
  int64_t n = out->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(out));
  cudaStream_t s = current_stream(dev);
  return dispatch_all(out->dtype, [&](auto z) -> of_status {
    typedef decltype(z) T;
    iota_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(n, (T *)ptr(out), start, step, end,
                                                      linspace != 0);
    return launched(linspace ? "linspace" : "arange");
  });
}

void register_index(of_device_ops *ops) {
  ops->gather = gather;
  ops->scatter = scatter;
  ops->index_select = index_select;
  ops->index_add = index_add;
  ops->sort_rows = sort_rows;
  ops->scan = scan;
  ops->tri = tri;
  ops->repeat = repeat;
  ops->mask_scan = mask_scan;
  ops->mask_compact = mask_compact;
  ops->iota = iota;
}

}  // namespace ofc
