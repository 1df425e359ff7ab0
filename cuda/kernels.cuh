// kernels.cuh -- each kernel file fills its part of the device-ops table.
#pragma once
#include "common.cuh"

namespace ofc {
void register_elementwise(of_device_ops *ops);
void register_reduce(of_device_ops *ops);
void register_random(of_device_ops *ops);
void register_blas(of_device_ops *ops);
void register_optim(of_device_ops *ops);
// cudnn branch
void register_dnn(of_device_ops *ops);
void register_nn(of_device_ops *ops);
void register_graph(of_device_ops *ops);
void register_index(of_device_ops *ops);   // index.cu
void register_nccl(of_device_ops *ops);    // nccl.cu
void register_attention(of_device_ops *ops);   // attention.cu
void register_fft(of_device_ops *ops);         // fft.cu (cuFFT)
inline void register_kernels(of_device_ops *ops) {
  register_elementwise(ops);
  register_reduce(ops);
  register_random(ops);
  register_blas(ops);
  register_optim(ops);
  register_dnn(ops);
  register_nn(ops);
  register_graph(ops);
  register_index(ops);
  register_nccl(ops);
  register_attention(ops);
  register_fft(ops);
}
}  // namespace ofc
