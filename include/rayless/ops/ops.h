// The operations the model, the sampler, the log-prob passes and the optimizer call, and nothing else
// of the kernels beneath. Each op dispatches in one place, src/ops/<op>.cpp: the device's backend
// (src/ops/backend.h: cpu/, cuda/), which runs the kernel the plan chose (kernel_plan.h) where it
// applies, or else the op's reference implementation, LibTorch's operators. docs/kernels.md lists every
// op, what runs where, and how to switch each kernel off.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rayless/ops/kernel_plan.h"

namespace rayless::ops {

// ---- linear layers ------------------------------------------------------------------------------

// The decoder's projections, torch::linear(x, weight, bias) as it runs now. In a training pass under
// bfloat16 autocast (train.bf16) with a float32 weight that trains, on the CPU, in a form it reproduces
// bit for bit (x contiguous, of 2 or 3 dimensions, float32 or already in the autocast dtype): the
// output and the input and bias gradients of autocast's linear bit for bit, holding less for backward
// (kernel autocast_linear):
// - autograd's linear keeps the cast weight until its backward runs, so a whole model's low-precision
//   copy (autocast's cache) is held from the forward to the end of backward; this keeps the float32
//   weight it already has and casts it again in its backward. A weight used twice before backward
//   gets the float32 sum of the two uses' gradients, where autocast sums them in its own dtype first
//   (the trainer's passes use each weight once).
// - projections of the same input in a row (q, k, v; gate, up) share one cast of it, where autocast
//   casts it for each and autograd keeps every cast; the input's gradient is the same float32 sum.
// The weight's gradient is linear_grads' (below). Elsewhere linear_as_autocast.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
// Whether linear takes its autocast path for these operands now.
bool autocast_linear_applies(const torch::Tensor& x, const torch::Tensor& weight);
// Forgets the input cast the projections share (AutocastScope's end does, with autocast's own cache).
void clear_autocast_linear_casts();

// The gradients of torch::linear(input, weight) without a bias, for a contiguous input of 2 or 3
// dimensions (addmm or mm on it flattened to 2, row-major), both in the operands' dtype: the input's
// (its shape), bit for bit autograd's; the weight's, autograd's grad.t().mm(input) in float32 and
// float64, and in 2-byte dtypes on the CPU transposed(grad).mm(input): the same product with a
// row-major operand, which oneDNN computes 1.3-1.9x faster at a training pass's shapes. Its float32
// sums then run in another order, as near the exact product as autograd's (checked in
// tests/model/test_model.cpp), not bit for bit. For backward passes that keep less than autograd's
// linear would and recompute the rest.
struct LinearGrads {
  torch::Tensor input, weight;
};
LinearGrads linear_grads(const torch::Tensor& grad_output, const torch::Tensor& input, const torch::Tensor& weight);
// The weight's gradient alone, as linear_grads computes it.
torch::Tensor linear_weight_grad(const torch::Tensor& grad_output, const torch::Tensor& input);

// x.t().contiguous(), bit for bit (a transpose only moves elements). A 2-dimensional tensor of 2-byte
// elements on the CPU is transposed in tiles (kernels transpose_tiles, avx512_transpose): oneDNN's
// bfloat16 product reads a transposed operand at about half the speed of a row-major one, and
// LibTorch's strided copy of 2-byte elements runs at a fraction of memory speed.
torch::Tensor transposed(const torch::Tensor& x);

// ---- bfloat16 products (train.bf16_products) ----------------------------------------------------
//
// Under train.bf16 the linear layers multiply bfloat16 operands. On CPUs with bfloat16 units
// (AVX512-BF16, AMX) oneDNN runs them there. Elsewhere LibTorch emulates them: each product of two
// bfloat16 values is exact in float32, the sums run in float32, the result is rounded once to
// bfloat16, at about an eighth of the float32 rate (9-10 against 72-81 GFLOP/s on an AMD EPYC with
// AVX2). `float32` products (kernel_plan.h, BFloat16Products) do the same arithmetic through the float32
// kernels: the bfloat16 operands widened to float32 (exactly), a float32 product, one rounding to
// bfloat16. Only the order of the float32 sums differs, so an element is the emulation's or a
// neighbouring bfloat16 value.

// True when a product of these operands is widened: both bfloat16, on the CPU, and the setting is
// float32.
bool widens_bfloat16_product(const torch::Tensor& a, const torch::Tensor& b);
// a.mm(b) (2-dimensional operands), widened where widens_bfloat16_product says.
torch::Tensor bfloat16_aware_mm(const torch::Tensor& a, const torch::Tensor& b);
// torch::linear(x, weight, bias) (bias may be undefined), widened where widens_bfloat16_product(x,
// weight) says; the bias is then added in float32 before the one rounding, as addmm adds it.
torch::Tensor bfloat16_aware_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
// torch::linear(x, weight, bias) as it runs now: where bfloat16 autocast is on for a float32 weight
// on the CPU and the setting is float32, as autocast runs it (every operand cast to bfloat16) with the
// product widened; otherwise torch::linear itself, autocast included.
// Without gradients to the weight, its widened copy is kept until the next weight or until
// forget_widened_weight() (AutocastScope's end).
torch::Tensor linear_as_autocast(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
void forget_widened_weight();

// ---- generation's projections -------------------------------------------------------------------

// A weight laid out once for one of a backend's kernels (GenerationLinear).
struct PackedWeight {
  torch::Tensor data;        // undefined: none
  Kernel kernel = Kernel::onednn_linear;
  int64_t min_rows = 0;      // fewer rows run on the parts (or the fused weight) instead
};

// Projections prepared for generation: those sharing an input (q/k/v, gate/up) become one matmul, and
// the weight is laid out once for the backend's kernel. On the CPU: oneDNN's blocked layout
// (onednn_linear: MKL's sgemm re-packed a weight on every call with few rows, which was most of a decode
// step's matmul time; a packed weight is read as it lies); under bfloat16 autocast (train.bf16) the
// copy is taken in bfloat16 once per generation, as autocast would cast the weight at every call, and
// on CPUs with AMX it goes to rayless's tile kernel (amx_linear: a decode step of the 53M model took
// 9-30 % less time); on CPUs with AVX2 but no AVX-512 the float32 copy goes to rayless's rows kernel
// (avx2_linear), at every row count. With train.bf16_products = float32 (the default on CPUs without
// bfloat16 units) the bfloat16 values are held and multiplied in float32 instead. Elsewhere (other
// devices, kernels off): the fused weight, LibTorch's linear.
class GenerationLinear {
 public:
  GenerationLinear() = default;
  // weights [out_i, in] (same in), biases [out_i] or all undefined. The parts are referenced, not
  // copied; the fused (and packed) copy is taken now, in `compute_dtype`, and does not follow later
  // updates. A compute dtype other than the weights' is autocast's: inputs are cast to it, and the
  // output is in it, as autocast's linear gives.
  GenerationLinear(const std::vector<torch::Tensor>& weights, const std::vector<torch::Tensor>& biases,
                   torch::ScalarType compute_dtype);
  bool defined() const { return !weights_.empty(); }
  // x [..., in] -> [..., sum out_i]: cat_i(x w_i^T + b_i), equal up to float rounding (summation order)
  torch::Tensor operator()(const torch::Tensor& x) const;

  // In float32, below this many rows the separate parts are faster than oneDNN's packed weight
  // (oneDNN's small-batch kernel loses to MKL's matrix-vector product there; measured at 1 and 2 rows).
  // A packed bfloat16 weight is faster at every row count (measured from 1 row), so it has no such limit.
  static constexpr int64_t kPackedMinRowsFloat32 = 4;
  torch::ScalarType compute_dtype() const { return compute_dtype_; }
  bool packed() const { return packed_.data.defined(); }
  // the kernel the product runs on ("amx_linear", "avx2_linear", "onednn_linear"), or "LibTorch"
  const char* kernel() const;

 private:
  std::vector<torch::Tensor> weights_, biases_;  // the parts, as given
  torch::ScalarType compute_dtype_ = torch::kFloat32;
  torch::Tensor fused_weight_;  // cat(weights) in the compute dtype, when not packed and not the parts as given
  torch::Tensor fused_bias_;    // cat(biases) in the compute dtype
  PackedWeight packed_;
  // bfloat16 products widened to float32 (train.bf16_products): the packed or fused weight and the
  // bias hold bfloat16 values in float32; inputs are rounded to bfloat16 and widened, outputs rounded
  // once to bfloat16
  bool widened_ = false;
  int64_t outputs_ = 0;  // rows of cat(weights)
};

// ---- attention ----------------------------------------------------------------------------------

// at::scaled_dot_product_attention(q, k, v, allowed, 0, false, scale, enable_gqa) with a boolean mask
// (true = may attend), operands cast as autocast casts them. The forward is that call's, bit for bit.
// Where it runs LibTorch's CPU flash kernel with gradients (float32, bfloat16 or half operands; kernel
// attention_float32_backward), the call is one node that saves the boolean mask, which the layers
// share, where LibTorch's saves a float copy of it per call: 4 bytes per query and key per layer in
// float32, the training pass's one cost quadratic in the sequence. On bfloat16 or half operands its
// backward runs the same kernel on the operands widened to float32 and rounds the gradients once:
// LibTorch's reduced-precision CPU backward took 3.5x as long as its float32 one and rounds its
// intermediates, so these gradients are nearer the exact ones. In float32 the gradients are LibTorch's
// bit for bit.
torch::Tensor scaled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale, bool enable_gqa);
// Whether scaled_attention takes its float32-backward path for these operands now.
bool attention_backward_in_float32(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// The attention of the padded layout: q [rows, H, positions, D], k and v [rows, H_kv, keys, D], allowed
// bool [rows or 1, 1, positions, keys] -> [rows, positions, H * D] (the heads side by side). A decode
// step's float32 queries (one per row) on the CPU run in one pass (avx2_decode_attention: 1.5-4x
// faster than LibTorch's flash kernel per call, within float32 rounding of it), grouped-query attention
// inside the kernel. On a CUDA device, with fewer key heads than query heads (gradients or not),
// the query heads of a group are folded into the query positions of their key head
// (folded_gqa_attention), which LibTorch's masked fused kernel takes; elsewhere scaled_attention.
torch::Tensor padded_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale, bool enable_gqa);

// One bucket of a packed pass's attention: `count` rows of `length` queries, next in the flat query
// layout, attending to the first `keys` keys of the rows `rows` of k and v (undefined: all rows, in
// order), `allowed` the boolean mask [count or 1, 1, length, keys].
struct AttentionBucket {
  int64_t count = 0, length = 0, keys = 0;
  torch::Tensor rows, allowed;
};
// scaled_attention on each bucket in turn: queries [sum of count * length, H, D], k and v [B, H_kv, S, D]
// (each row in one bucket at most); returns [sum of count * length, H * D], the buckets' outputs one
// after the other. Where attention_backward_in_float32(queries, k, v) holds, the buckets are one
// autograd node, with scaled_attention's values and gradients bucket by bucket, bit for bit: its
// backward writes each bucket's key and value gradients into one float32 buffer, where autograd would
// build a full-size zero gradient for every bucket's narrowing and gathering of k and v and add them
// all up. Elsewhere scaled_attention bucket by bucket through autograd.
torch::Tensor scaled_attention_buckets(const torch::Tensor& queries, const torch::Tensor& k, const torch::Tensor& v,
                                       const std::vector<AttentionBucket>& buckets, double scale, bool enable_gqa);

// Attention for the packed layouts in length buckets (kernel length_buckets). The packed passes scatter
// their tokens into a padded [B, T] grid for the attention only; one attention call over that grid
// computes every row as long as the longest, with the rest masked. At 256 completion tokens and lengths
// spread from a few to 256 that is several times the scores the real tokens need, and the CPU's flash
// attention computes masked scores as any others. Rows are sorted by length and cut into buckets, each
// attended as long as its own longest row: the same scores for every real token, fewer computed.

// Whether a packed pass on `device` with `positions_per_row` query positions per row attends in
// buckets (bucketed_attention) rather than in one padded call (padded_attention).
bool attends_in_buckets(const torch::Device& device, int64_t positions_per_row);

// Rows [first, first + count) of the rows sorted by length, attended as `length` query positions.
struct LengthBucket {
  int64_t first = 0, count = 0, length = 0;
};
// Cuts rows of the given query lengths (sorted ascending) into buckets that minimise
//   sum over buckets of (rows x heads x length x (past + length)) + call_cost x buckets,
// the attention scores computed plus a fixed cost per attention call in the same unit. Rows of length
// 0 (nothing to compute) belong to no bucket. Exact (dynamic programming over the sorted rows).
std::vector<LengthBucket> plan_length_buckets(const std::vector<int64_t>& sorted_lengths, int64_t past,
                                              int64_t heads, double call_cost);
// scaled_dot_product_attention over the packed tokens only, bucket by bucket.
// - q [N, H, D]: the packed tokens' queries, rotary embedding applied;
// - token_index [N]: their slots b * T + i in the padded [B, T] grid, as the packed passes number them;
// - k and v [B, H_kv, past + T, D] in the padded layout (the cache's), mask [B or 1, 1, T, past + T]
//   (true = attend) causal within the row: a query at slot i sees no key beyond past + i.
// Returns [N, H * D]: what one call on the padded grid gives at those slots (transposed to
// [B, T, H * D] and gathered), up to the order of floating-point sums inside the kernel.
torch::Tensor bucketed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& mask, const torch::Tensor& token_index, double scale,
                                 bool enable_gqa, double call_cost);
// The fixed cost per attention call used by the model, in attention scores (query x key x head): the
// calls and gathers of one bucket, measured on the CPU against the per-score cost of the kernel.
constexpr double kAttentionCallCost = 200000.0;

// ---- RMSNorm ------------------------------------------------------------------------------------

// weight * (x * rsqrt(mean(x^2, -1) + eps)), x widened to float32 for the statistics and the normalised
// value cast back to x's dtype (transformers' Qwen2RMSNorm / LlamaRMSNorm); the reference's ATen calls
// are those, so its bits are too. On the CPU:
// - a decode step's float32 norm (x [B, 1, D], contiguous, no gradients, autocast not lowering float32)
//   in one pass per row (avx2_decode_rms_norm): the sum of squares as one FMA chain, so the result
//   differs from the reference only by the order of that sum;
// - under autocast with gradients, a float32 x and weight: the backward is one node that reads the
//   output's gradient, x and the weight once per row (rms_norm_one_pass_backward, its rows on AVX-512
//   where D % 16 == 0: avx512_rms_norm_backward), where autograd's backward of the forward's calls runs
//   eight kernels and keeps x^2, the mean and the normalised value. Its gradients are autograd's
//   formulas with the sums in another order, so their last bits differ; float32 runs (and the float32
//   parity tests against TRL) keep autograd's backward.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// Whether rms_norm takes its one-pass backward for these operands now.
bool rms_norm_backward_in_one_pass(const torch::Tensor& x, const torch::Tensor& weight);

// ---- rotary embedding ---------------------------------------------------------------------------

// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]): transformers'
// apply_rotary_pos_emb, with these ATen calls and bits. For a packed pass's bfloat16 x [N, H, D] with
// gradients and float32 tables [N, 1, D] on the CPU (train.bf16), the backward is one node computing
// dx = g * cos + rotate_half^T(g * sin) in float32 and rounding it once (rotary_one_pass), where
// autograd's runs nine kernels, zero-fills a full-size gradient for each half and rounds each term to
// bfloat16 before adding them in bfloat16. Under bfloat16 autocast its forward is one pass too, and
// returns the float32 result rounded to bfloat16 (what autocast's attention casts it to, bit for bit),
// where ATen made six passes and a float32 tensor. Their loops run on AVX-512 where D % 32 == 0
// (avx512_rotary_forward, avx512_rotary_backward). Elsewhere autograd's backward.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// Whether apply_rotary takes its one-pass backward for these operands now.
bool rotary_backward_in_one_pass(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// A decode step's rotary embedding of q [B, H, D] and k [B, H_kv, D] (one position per row) with the
// tables cos, sin [B, 1, D] -> q [B, H, 1, D] and k [B, H_kv, 1, D], the attention's padded layout. On
// the CPU (bfloat16 or float32 q and k, unit stride along D, even D, float32 tables; kernel
// decode_rotary) one loop computes each element as the operators do, float32 product, float32 product,
// float32 sum, each rounded (no fused multiply-add), and rounds the sum once to the dtype the attention
// and the cache would have cast it to (autocast's): the same bits as the operators, where LibTorch ran
// six operators per tensor and under autocast copied each bfloat16 operand to float32 first. Elsewhere
// apply_rotary on that layout, in x's dtype.
std::pair<torch::Tensor, torch::Tensor> decode_rotary(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& cos, const torch::Tensor& sin);

// ---- silu(gate) * up ----------------------------------------------------------------------------

// silu(gate) * up, the MLP's activation. With gradients enabled it keeps only gate and up for
// backward, not silu(gate) as autograd would (the gradients are bit-for-bit autograd's).
torch::Tensor silu_times(const torch::Tensor& gate, const torch::Tensor& up);
// The down projection (weight [H, I], no bias, no adapter) of silu(gate) * up for a pass with gradients,
// keeping only gate, up and the weight for backward: the product, the down projection's input, is
// recomputed there (kernel silu_times_down; gradients bit for bit those of linear(silu_times(gate,
// up), weight) as the projection computes it). Its backward's element-wise half runs in one pass over
// bfloat16 rows (silu_times_backward). Undefined where it does not apply (no gradients, a layout
// autograd's linear would treat otherwise, a device other than the CPU, the kernel off); then call
// silu_times and the projection apart.
torch::Tensor silu_times_down(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& weight);

// The elementwise half of that backward: autograd's arithmetic made five passes (silu twice, three
// products, silu_backward), each reading and writing intermediate-sized tensors, about 6 ms per layer
// of a 1,500-token pass.
struct SiluTimesGrads {
  torch::Tensor product;    // silu(gate) * up, recomputed (the down projection's input)
  torch::Tensor grad_gate;  // silu_backward(grad * up, gate)
  torch::Tensor grad_up;    // grad * silu(gate)
};
// For contiguous bfloat16 CPU tensors gate, up and grad (the product's gradient) of one shape, one pass
// (silu_times_one_pass_backward, 16 elements at a time on AVX-512: avx512_silu_times_backward): each
// result rounded to bfloat16 where autograd's ops round (silu(gate), the products, silu_backward), each
// in float32 as LibTorch computes it, with an exp of our own (its series' remainder under one float32
// step), so an element may land on the neighbouring bfloat16 value of autograd's (checked in
// tests/ops/test_silu_times_backward.cpp). Other dtypes or devices: autograd's ops.
SiluTimesGrads silu_times_backward(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& grad);

// Generation's silu(gate) * up from the fused gate and up projection: gate_up [..., 2 I], gate the first
// I of the last dimension and up the rest -> [..., I]. On the CPU in float32 (contiguous, no gradients,
// autocast not lowering float32) one pass (avx2_decode_silu_times): gate / (1 + e^-gate) * up, silu's
// own formula and rounding, with an exponential within 2 ulp, where LibTorch's is within 1: results
// within a few float32 ulps of LibTorch's silu and product, which run elsewhere.
torch::Tensor decode_silu_times(const torch::Tensor& gate_up);

// ---- the optimizer step -------------------------------------------------------------------------

struct AdamWHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;  // this step's number, counted from 1 (the bias corrections use it)
  // the gradient clip's coefficient (clip_coefficient, trainer/optimizer.h), applied in the same pass:
  // the gradient times it, rounded to the gradient's dtype, is what the formulas below call g
  double grad_scale = 1.0;
};
// One AdamW step for one tensor. In place, element by element, the formulas of torch.optim.AdamW's
// single-tensor path (what TRL runs on a CPU), each rounded in the tensors' compute type:
//   p  *= 1 - lr * weight_decay
//   m   = m + (1 - beta1) * (g - m)                  (lerp)
//   v   = v * beta2 + (1 - beta2) * g * g
//   p  += -(lr / (1 - beta1^step)) * (m / (sqrt(v) / sqrt(1 - beta2^step) + eps))
// On the CPU in a single pass over memory (adamw_single_pass; its float32 loop 16 or 8 elements at a
// time: avx512_adamw, avx2_adamw), where torch::optim::AdamW makes about ten passes (one per tensor op,
// ~0.24 s of each optimizer step for the 53M benchmark model). Every element's result depends only on
// its own inputs (no fused multiply-add, no reordering), so a slice updated alone (ZeRO) comes out bit
// for bit as the same elements of the whole tensor. All four tensors must be contiguous, of one dtype,
// numel and device (float32, float64 or bfloat16: bfloat16 computes in float32). Elsewhere
// adamw_update_tensor_ops.
void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWHyper& hyper);
// The same formulas as torch.optim.AdamW writes them, one tensor op each (lerp_, addcmul_, addcdiv_):
// any device; the reference, and the tests' second method.
void adamw_update_tensor_ops(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                             torch::Tensor& exp_avg_sq, const AdamWHyper& hyper);

// The sum of t's squared elements in float64, for the gradient norm. On the CPU one pass with eight
// float64 partial sums (sum_of_squares_single_pass; its float32 loop on AVX-512 or AVX2:
// avx512_sum_of_squares, avx2_sum_of_squares, the same sums bit for bit), no float64 copy of the tensor;
// elsewhere float64 sums of pieces of 2^20 elements. A float64 scalar on t's device, not read to the
// host: the trainer reads the gradient norm with the step's other values, once (issue 48).
torch::Tensor sum_of_squares(const torch::Tensor& t);

// ---- log-probs of chosen tokens -----------------------------------------------------------------
//
// Per-token log-probabilities and entropies of chosen tokens without a [B, T, V] log-softmax. Both
// paths divide the logits by the sampling temperature first (as TRL does before its log-softmax), take
// logsumexp in float32 or wider (bfloat16/half inputs are upcast chunk by chunk), and return the same
// values and gradients as the naive log_softmax(logits / T).gather(ids).
//  - selective_logprobs: the model already produced logits [B, T, V]; rows are processed in chunks so
//    only a [chunk, V] temporary exists besides the logits themselves.
//  - fused_logprobs: from the final hidden states [B, T, H] and the LM head weight [V, H] (+ bias [V]).
//    A custom autograd function applies the LM head chunk by chunk over positions, keeps only the
//    per-position logsumexp, and recomputes each chunk's logits in backward, so no [B, T, V] tensor
//    exists in forward or backward. This is the path training uses (design: no [B, T, V] tensor).
// Entropies are returned detached (no gradient), as TRL computes them under no_grad when no entropy
// bonus is used. Returned tensors are float32 for bfloat16/half inputs, else the input dtype.

struct LogprobsAndEntropies {
  torch::Tensor logps;      // [B, T], differentiable
  torch::Tensor entropies;  // [B, T], detached; entropy of softmax(logits / temperature) in nats
};

// logits [B, T, V], token_ids [B, T] (int64). chunk_rows = rows (positions) per chunk.
torch::Tensor selective_logprobs(const torch::Tensor& logits, const torch::Tensor& token_ids, double temperature = 1.0,
                                 int64_t chunk_rows = 256);
// Entropies of softmax(logits / temperature), chunk by chunk, no gradient.
torch::Tensor entropies_from_logits(const torch::Tensor& logits, double temperature = 1.0, int64_t chunk_rows = 256);
// Both of the above from materialised logits.
LogprobsAndEntropies selective_logprobs_and_entropies(const torch::Tensor& logits, const torch::Tensor& token_ids,
                                                      double temperature = 1.0, int64_t chunk_rows = 256);
// hidden [B, T, H], lm_head_weight [V, H], lm_head_bias [V] or an undefined tensor, token_ids [B, T].
// chunk_positions = positions (of all B*T) whose logits are computed at once. Gradients flow to hidden,
// weight and bias (whichever require grad); weight/bias gradients of bfloat16/half parameters are
// accumulated in float32 across chunks and cast once. The LM head's products are linear_as_autocast's.
LogprobsAndEntropies fused_logprobs(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                    const torch::Tensor& lm_head_bias, const torch::Tensor& token_ids,
                                    double temperature = 1.0, int64_t chunk_positions = 256);
// The naive reference: full log_softmax over [B, T, V] (tests and the benchmark only).
LogprobsAndEntropies naive_logprobs(const torch::Tensor& logits, const torch::Tensor& token_ids, double temperature = 1.0);

}  // namespace rayless::ops
