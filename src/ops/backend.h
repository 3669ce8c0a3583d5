// The backends' tables: each device's own implementations of the ops of ops.h, one entry per op. Every
// op dispatches in one place, its function in src/ops/<op>.cpp: the device's table, then the entry,
// which runs the kernel the plan chose (kernel_plan.h) where it applies to the operands and returns an
// undefined result (or false) elsewhere; then the op runs its reference, LibTorch's operators. An
// empty entry: the backend has no implementation of its own, the reference runs. The tables:
// cpu/cpu_table.cpp, cuda/cuda_table.cpp (a CUDA kernel is one line there). Private to src/ops.
#pragma once
#include <torch/types.h>

#include <utility>
#include <vector>

#include "rayless/ops/ops.h"

namespace rayless::ops {

struct BackendTable {
  const char* name = "";

  // linear layers (linear.cpp, transpose.cpp, bfloat16_products.cpp)
  torch::Tensor (*linear)(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) = nullptr;
  torch::Tensor (*transposed)(const torch::Tensor& x) = nullptr;
  // train.bf16_products = float32 widens bfloat16 products on this backend
  bool widens_bfloat16_products = false;

  // generation's projections (generation_linear.cpp): `parts` laid out once for a kernel of the backend,
  // and the product of rows `x` [rows, in] (contiguous, compute dtype; float32 when widened) with it
  bool (*pack_generation_weight)(const std::vector<torch::Tensor>& parts, torch::ScalarType compute_dtype,
                                 bool widened, PackedWeight* out) = nullptr;
  torch::Tensor (*packed_linear)(const PackedWeight& packed, const torch::Tensor& x, int64_t outputs,
                                 const torch::Tensor& bias) = nullptr;

  // attention (attention.cpp, length_buckets.cpp)
  torch::Tensor (*scaled_attention)(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& allowed, double scale) = nullptr;
  torch::Tensor (*scaled_attention_buckets)(const torch::Tensor& queries, const torch::Tensor& k,
                                            const torch::Tensor& v, const std::vector<AttentionBucket>& buckets,
                                            double scale) = nullptr;
  bool (*attends_in_buckets)(int64_t positions_per_row) = nullptr;
  // the padded layout's attention (padded_attention): [rows, positions, H * D], or undefined
  torch::Tensor (*padded_attention)(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& allowed, double scale) = nullptr;

  // RMSNorm (rms_norm.cpp)
  torch::Tensor (*rms_norm)(const torch::Tensor& x, const torch::Tensor& weight, double eps) = nullptr;
  torch::Tensor (*decode_rms_norm)(const torch::Tensor& x, const torch::Tensor& weight, double eps) = nullptr;

  // rotary embedding (rotary.cpp)
  torch::Tensor (*apply_rotary)(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) = nullptr;
  std::pair<torch::Tensor, torch::Tensor> (*decode_rotary)(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& cos, const torch::Tensor& sin) = nullptr;

  // silu(gate) * up (silu_times.cpp)
  torch::Tensor (*silu_times_down)(const torch::Tensor& gate, const torch::Tensor& up,
                                   const torch::Tensor& weight) = nullptr;
  bool (*silu_times_backward)(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& grad,
                              SiluTimesGrads* out) = nullptr;
  torch::Tensor (*decode_silu_times)(const torch::Tensor& gate_up) = nullptr;

  // the optimizer step (adamw_update.cpp, sum_of_squares.cpp)
  bool (*adamw_update)(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                       torch::Tensor& exp_avg_sq, const AdamWHyper& hyper) = nullptr;
  bool (*sum_of_squares)(const torch::Tensor& t, double* sum) = nullptr;

  // log-probs (logprobs.cpp)
  LogprobsAndEntropies (*fused_logprobs)(const torch::Tensor& hidden, const torch::Tensor& weight,
                                         const torch::Tensor& bias, const torch::Tensor& token_ids,
                                         double temperature, int64_t chunk_positions) = nullptr;
};

// The table of the device's backend; an empty one for a device without one.
const BackendTable& backend_for(const torch::Device& device);

const BackendTable& cpu_table();   // cpu/cpu_table.cpp
const BackendTable& cuda_table();  // cuda/cuda_table.cpp

// cat(parts, 0) in `dtype`, contiguous (generation_linear.cpp): each part cast straight into its rows
// of one buffer; a single contiguous part already in `dtype` is returned as it is; undefined for
// undefined parts.
torch::Tensor fused_in(const std::vector<torch::Tensor>& parts, torch::ScalarType dtype);

// Tests: while alive, the CPU runs `table` in place of its own. The CUDA backend's entries are LibTorch
// compositions, so the whole model runs them on the CPU: their call sites are checked without a GPU.
class CpuRunsTable {
 public:
  explicit CpuRunsTable(const BackendTable& table);
  ~CpuRunsTable();
  CpuRunsTable(const CpuRunsTable&) = delete;
  CpuRunsTable& operator=(const CpuRunsTable&) = delete;

 private:
  const BackendTable* previous_;
};

}  // namespace rayless::ops
