// graph.cu -- CUDA Graph capture and replay (flow.cuda.CUDAGraph).
//
// Capture runs on a side stream made current for the device (the legacy
// default stream cannot be captured); it first waits for the work already
// queued on the previous stream. Allocations made during the capture become
// the graph's memory nodes: the graph is instantiated with
// AutoFreeOnLaunch, so each replay reuses the same addresses and the
// tensors made during the capture are the graph's static outputs.
#include "common.cuh"
#include "kernels.cuh"

namespace ofc {

struct Capture {
  int dev;
  cudaStream_t side, prev;
};
struct Graph {
  int dev;
  cudaGraphExec_t exec;
};

static of_status graph_capture_begin(int32_t index, void **out) {
  int cur = 0;
  cudaGetDevice(&cur);
  int d = index < 0 ? cur : index;
  use_device(OF_CUDA | (d << 8));
  cudaStream_t prev = current_stream(d), side;
  OFC_TRY(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "CUDAGraph.capture_begin");
  cudaEvent_t e;
  cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(e, prev);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(side, e, 0);
  if (err == cudaSuccess) err = cudaEventDestroy(e);
  if (err == cudaSuccess) err = cudaStreamBeginCapture(side, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    cudaStreamDestroy(side);
    return cuda_fail(err, "CUDAGraph.capture_begin", "cudaStreamBeginCapture");
  }
  set_current_stream(d, side);
  capture_began(d);
  *out = new Capture{d, side, prev};
  return OF_OK;
}

static of_status graph_capture_end(void *p, void **out) {
  Capture *c = (Capture *)p;
  cudaGraph_t g = nullptr;
  cudaError_t err = cudaStreamEndCapture(c->side, &g);
  set_current_stream(c->dev, c->prev);
  Capture done = *c;
  delete c;
  // frees of memory from before the capture, held back during it
  capture_ended(done.dev, done.prev);
  if (err != cudaSuccess || !g) {
    cudaGetLastError();
    cudaStreamDestroy(done.side);
    if (g) cudaGraphDestroy(g);
    return of_fail(OF_ERR_DEVICE, "CUDAGraph.capture_end: the capture failed: %s (an op inside "
                   "it synchronised with the host, e.g. a copy to the CPU, :item() or a copy "
                   "from pageable memory)", cudaGetErrorString(err != cudaSuccess
                                                               ? err : cudaErrorStreamCaptureInvalidated));
  }
  cudaGraphExec_t exec;
  err = cudaGraphInstantiateWithFlags(&exec, g, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  cudaGraphDestroy(g);
  // the side stream's captured work is not run; later work orders after prev
  cudaStreamDestroy(done.side);
  if (err != cudaSuccess) return cuda_fail(err, "CUDAGraph.capture_end", "cudaGraphInstantiate");
  *out = new Graph{done.dev, exec};
  return OF_OK;
}

static of_status graph_launch(void *p) {
  Graph *g = (Graph *)p;
  use_device(OF_CUDA | (g->dev << 8));
  OFC_TRY(cudaGraphLaunch(g->exec, current_stream(g->dev)), "CUDAGraph.replay");
  note_launch("CUDAGraph.replay");
  return OF_OK;
}

static void graph_free(void *p) {
  Graph *g = (Graph *)p;
  if (!g) return;
  cudaGraphExecDestroy(g->exec);
  delete g;
}

static int32_t capture_status(int32_t index) {
  int cur = 0;
  cudaGetDevice(&cur);
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(current_stream(index < 0 ? cur : index), &cs) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return cs == cudaStreamCaptureStatusActive ? 1 : cs == cudaStreamCaptureStatusNone ? 0 : -1;
}

void register_graph(of_device_ops *ops) {
  ops->capture_status = capture_status;
  ops->graph_capture_begin = graph_capture_begin;
  ops->graph_capture_end = graph_capture_end;
  ops->graph_launch = graph_launch;
  ops->graph_free = graph_free;
}

}  // namespace ofc
