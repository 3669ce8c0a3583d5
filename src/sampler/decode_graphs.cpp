// CUDA graphs of the decode step (decode_graphs.h). The CUDA part compiles only with
// RAYLESS_CUDA_GRAPHS (CMakeLists.txt sets it for a CUDA LibTorch; tools/cuda_graphs_compile_check.sh
// compiles it against the CUDA headers on a CPU machine).
#include "rayless/sampler/decode_graphs.h"

#include <map>

#include "rayless/base/error.h"

#if defined(RAYLESS_CUDA_GRAPHS)
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace rayless {

#if defined(RAYLESS_CUDA_GRAPHS)

struct DecodeGraphs::Impl {
  torch::Device device;
  std::map<int64_t, std::unique_ptr<at::cuda::CUDAGraph>> graphs;  // by bucket
  int64_t replays = 0;
};

bool DecodeGraphs::available() { return true; }

DecodeGraphs::DecodeGraphs(const torch::Device& device) : impl_(std::make_unique<Impl>(Impl{device, {}, 0})) {
  runtimeCheck(device.is_cuda(), "DecodeGraphs: CUDA graphs need a CUDA device, not ", device);
}

DecodeGraphs::~DecodeGraphs() = default;

void DecodeGraphs::run(int64_t slots, const std::function<void()>& step) {
  auto found = impl_->graphs.find(slots);
  if (found != impl_->graphs.end()) {
    found->second->replay();
    ++impl_->replays;
    return;
  }
  step();  // this step's token, eagerly; it also fills what the capture must find ready (caches)
  // capture on a side stream (capture refuses the default one), once the eager step is done: one
  // device synchronisation per bucket and generation. Capturing runs nothing, so the replays on the
  // current stream need no further ordering. The graphs share one memory pool.
  const c10::cuda::CUDAGuard device_guard(impl_->device);
  c10::cuda::device_synchronize();
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  {
    const c10::cuda::CUDAStreamGuard stream_guard(c10::cuda::getStreamFromPool());
    const auto pool = impl_->graphs.empty() ? c10::MempoolId_t{0, 0} : impl_->graphs.begin()->second->pool();
    // thread-local capture: other threads (NCCL, the watchdog) may call CUDA meanwhile
    graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    step();  // recorded, not run
    graph->capture_end();
  }
  impl_->graphs.emplace(slots, std::move(graph));
}

int64_t DecodeGraphs::captured() const { return static_cast<int64_t>(impl_->graphs.size()); }
int64_t DecodeGraphs::replays() const { return impl_->replays; }

#else

struct DecodeGraphs::Impl {};

bool DecodeGraphs::available() { return false; }
DecodeGraphs::DecodeGraphs(const torch::Device&) {}
DecodeGraphs::~DecodeGraphs() = default;
void DecodeGraphs::run(int64_t, const std::function<void()>& step) { step(); }
int64_t DecodeGraphs::captured() const { return 0; }
int64_t DecodeGraphs::replays() const { return 0; }

#endif

}  // namespace rayless
