// Log-probs of chosen tokens, from logits and fused with the LM head: the fused pass's one dispatch
// point, and the references (LibTorch's operators, chunk by chunk); see ops.h.
#include "backend.h"

#include <torch/csrc/autograd/custom_function.h>

#include "rayless/base/error.h"

namespace rayless::ops {

namespace {

bool is_reduced(torch::ScalarType type) { return type == torch::kBFloat16 || type == torch::kHalf; }
// logsumexp and softmax are taken at least in float32
torch::ScalarType compute_type(torch::ScalarType type) { return is_reduced(type) ? torch::kFloat32 : type; }

void check_ids(const torch::Tensor& token_ids, int64_t batch, int64_t positions, int64_t vocab, const char* what) {
  inputCheck(token_ids.dim() == 2 && token_ids.size(0) == batch && token_ids.size(1) == positions, what,
             ": token_ids have shape ", token_ids.sizes(), ", expected [", batch, ", ", positions, "]");
  inputCheck(!token_ids.is_floating_point(), what, ": token_ids must be integers");
  if (token_ids.numel() > 0) {
    const int64_t low = token_ids.min().item<int64_t>(), high = token_ids.max().item<int64_t>();
    inputCheck(low >= 0 && high < vocab, what, ": token id ", (low < 0 ? low : high), " is outside the vocabulary of ",
               vocab);
  }
}

void check_logits(const torch::Tensor& logits, const torch::Tensor& token_ids, double temperature, int64_t chunk) {
  inputCheck(logits.dim() == 3, "log-probs: logits must be [B, T, V], got shape ", logits.sizes());
  inputCheck(logits.is_floating_point(), "log-probs: logits must be floating point");
  inputCheck(temperature > 0, "log-probs: temperature must be > 0, got ", temperature);
  inputCheck(chunk >= 1, "log-probs: chunk size must be >= 1, got ", chunk);
  check_ids(token_ids, logits.size(0), logits.size(1), logits.size(2), "log-probs");
}

// Scaled logits of one chunk in the compute dtype.
torch::Tensor scaled(const torch::Tensor& logits, double temperature) {
  auto z = logits.to(compute_type(logits.scalar_type()));
  return temperature == 1.0 ? z : z / temperature;
}

// -(p * log p).sum(-1) = lse - (p * z).sum(-1), from scaled logits and their logsumexp, with one
// [chunk, V] temporary
torch::Tensor entropy_of(const torch::Tensor& z, const torch::Tensor& lse) {
  auto probabilities = (z - lse.unsqueeze(1)).exp_();
  return lse - probabilities.mul_(z).sum(-1);
}

// The custom autograd function of the fused path. Inputs: hidden [N, H], weight [V, H], bias [V] or
// empty (no bias: autograd functions take no undefined inputs), ids [N] int64. Outputs: logps [N], entropies [N] (non-differentiable).
class FusedLmHeadLogprobs : public torch::autograd::Function<FusedLmHeadLogprobs> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                                                const torch::Tensor& weight, const torch::Tensor& bias_or_empty,
                                                const torch::Tensor& ids, double temperature, int64_t chunk) {
    const auto bias = bias_or_empty.numel() > 0 ? bias_or_empty : torch::Tensor();
    const int64_t rows = hidden.size(0);
    const auto compute = compute_type(hidden.scalar_type());
    auto options = hidden.options().dtype(compute);
    auto logps = torch::empty({rows}, options);
    auto entropies = torch::empty({rows}, options);
    auto lse = torch::empty({rows}, options);
    for (int64_t start = 0; start < rows; start += chunk) {
      const int64_t n = std::min(chunk, rows - start);
      auto z = scaled(linear_as_autocast(hidden.narrow(0, start, n), weight, bias), temperature);
      auto chunk_lse = z.logsumexp(-1);
      auto chosen = z.gather(1, ids.narrow(0, start, n).unsqueeze(1)).squeeze(1);
      logps.narrow(0, start, n).copy_(chosen - chunk_lse);
      entropies.narrow(0, start, n).copy_(entropy_of(z, chunk_lse));
      lse.narrow(0, start, n).copy_(chunk_lse);
    }
    ctx->save_for_backward({hidden, weight, ids, bias_or_empty});
    ctx->saved_data["lse"] = lse;
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    ctx->mark_non_differentiable({entropies});
    return {logps, entropies};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    auto hidden = saved[0], weight = saved[1], ids = saved[2];
    torch::Tensor bias = saved[3].numel() > 0 ? saved[3] : torch::Tensor();
    auto lse = ctx->saved_data["lse"].toTensor();
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const int64_t rows = hidden.size(0);
    const auto compute = lse.scalar_type();

    torch::Tensor grad_hidden, grad_weight, grad_bias;
    const bool want_hidden = ctx->needs_input_grad(0), want_weight = ctx->needs_input_grad(1);
    const bool want_bias = bias.defined() && ctx->needs_input_grad(2);
    auto grad_logps = grad_outputs[0];
    if (!grad_logps.defined()) grad_logps = torch::zeros({rows}, lse.options());
    auto g = grad_logps.to(compute);
    if (want_hidden) grad_hidden = torch::empty_like(hidden);
    // weight/bias gradients accumulate over chunks: in float32 at least, cast once at the end
    if (want_weight) grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(compute));
    if (want_bias) grad_bias = torch::zeros(bias.sizes(), bias.options().dtype(compute));

    for (int64_t start = 0; start < rows; start += chunk) {
      const int64_t n = std::min(chunk, rows - start);
      auto h = hidden.narrow(0, start, n);
      auto g_chunk = g.narrow(0, start, n).unsqueeze(1);
      // d logp / d z = onehot(id) - softmax(z); z = logits / temperature
      auto grad_z = torch::linear(h, weight, bias).to(compute);
      if (temperature != 1.0) grad_z.div_(temperature);
      grad_z.sub_(lse.narrow(0, start, n).unsqueeze(1)).exp_().mul_(g_chunk).neg_();
      grad_z.scatter_add_(1, ids.narrow(0, start, n).unsqueeze(1), g_chunk);
      if (temperature != 1.0) grad_z.div_(temperature);
      if (want_hidden) grad_hidden.narrow(0, start, n).copy_(grad_z.to(weight.scalar_type()).mm(weight));
      if (want_weight) grad_weight.addmm_(grad_z.t(), h.to(compute));
      if (want_bias) grad_bias.add_(grad_z.sum(0));
    }
    if (want_weight) grad_weight = grad_weight.to(weight.scalar_type());
    if (want_bias) grad_bias = grad_bias.to(bias.scalar_type());
    return {grad_hidden, grad_weight, grad_bias, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor selective_logprobs(const torch::Tensor& logits, const torch::Tensor& token_ids, double temperature,
                                 int64_t chunk_rows) {
  check_logits(logits, token_ids, temperature, chunk_rows);
  const int64_t batch = logits.size(0), positions = logits.size(1), vocab = logits.size(2);
  auto flat = logits.reshape({batch * positions, vocab});
  auto ids = token_ids.reshape({batch * positions, 1}).to(torch::kLong);
  std::vector<torch::Tensor> pieces;
  for (int64_t start = 0; start < flat.size(0); start += chunk_rows) {
    const int64_t n = std::min(chunk_rows, flat.size(0) - start);
    auto z = scaled(flat.narrow(0, start, n), temperature);
    pieces.push_back(z.gather(1, ids.narrow(0, start, n)).squeeze(1) - z.logsumexp(-1));
  }
  if (pieces.empty()) return torch::zeros({batch, positions}, logits.options().dtype(compute_type(logits.scalar_type())));
  return torch::cat(pieces).view({batch, positions});
}

torch::Tensor entropies_from_logits(const torch::Tensor& logits, double temperature, int64_t chunk_rows) {
  inputCheck(logits.dim() == 3, "entropies: logits must be [B, T, V], got shape ", logits.sizes());
  inputCheck(chunk_rows >= 1, "entropies: chunk size must be >= 1");
  torch::NoGradGuard no_grad;
  const int64_t batch = logits.size(0), positions = logits.size(1), vocab = logits.size(2);
  auto flat = logits.reshape({batch * positions, vocab});
  auto out = torch::empty({batch * positions}, logits.options().dtype(compute_type(logits.scalar_type())));
  for (int64_t start = 0; start < flat.size(0); start += chunk_rows) {
    const int64_t n = std::min(chunk_rows, flat.size(0) - start);
    auto z = scaled(flat.narrow(0, start, n), temperature);
    out.narrow(0, start, n).copy_(entropy_of(z, z.logsumexp(-1)));
  }
  return out.view({batch, positions});
}

LogprobsAndEntropies selective_logprobs_and_entropies(const torch::Tensor& logits, const torch::Tensor& token_ids,
                                                      double temperature, int64_t chunk_rows) {
  check_logits(logits, token_ids, temperature, chunk_rows);
  // one pass over the logits: each chunk's logsumexp serves both the log-prob and the entropy
  const int64_t batch = logits.size(0), positions = logits.size(1), vocab = logits.size(2);
  auto flat = logits.reshape({batch * positions, vocab});
  auto ids = token_ids.reshape({batch * positions, 1}).to(torch::kLong);
  auto entropies = torch::empty({batch * positions}, logits.options().dtype(compute_type(logits.scalar_type())));
  std::vector<torch::Tensor> pieces;
  for (int64_t start = 0; start < flat.size(0); start += chunk_rows) {
    const int64_t n = std::min(chunk_rows, flat.size(0) - start);
    auto z = scaled(flat.narrow(0, start, n), temperature);
    auto lse = z.logsumexp(-1);
    pieces.push_back(z.gather(1, ids.narrow(0, start, n)).squeeze(1) - lse);
    torch::NoGradGuard no_grad;
    entropies.narrow(0, start, n).copy_(entropy_of(z.detach(), lse.detach()));
  }
  auto logps = pieces.empty() ? torch::zeros({batch, positions}, entropies.options()) : torch::cat(pieces).view({batch, positions});
  return {logps, entropies.view({batch, positions})};
}

LogprobsAndEntropies fused_logprobs(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                    const torch::Tensor& lm_head_bias, const torch::Tensor& token_ids,
                                    double temperature, int64_t chunk_positions) {
  inputCheck(hidden.dim() == 3, "fused log-probs: hidden states must be [B, T, H], got shape ", hidden.sizes());
  inputCheck(lm_head_weight.dim() == 2 && lm_head_weight.size(1) == hidden.size(2),
             "fused log-probs: LM head weight has shape ", lm_head_weight.sizes(), ", expected [V, ", hidden.size(2), "]");
  inputCheck(!lm_head_bias.defined() || (lm_head_bias.dim() == 1 && lm_head_bias.size(0) == lm_head_weight.size(0)),
             "fused log-probs: LM head bias has shape ", lm_head_bias.sizes(), ", expected [", lm_head_weight.size(0), "]");
  inputCheck(hidden.scalar_type() == lm_head_weight.scalar_type(), "fused log-probs: hidden states are ",
             hidden.scalar_type(), " but the LM head weight is ", lm_head_weight.scalar_type());
  inputCheck(temperature > 0, "fused log-probs: temperature must be > 0, got ", temperature);
  inputCheck(chunk_positions >= 1, "fused log-probs: chunk size must be >= 1, got ", chunk_positions);
  const int64_t batch = hidden.size(0), positions = hidden.size(1);
  check_ids(token_ids, batch, positions, lm_head_weight.size(0), "fused log-probs");
  const BackendTable& backend = backend_for(hidden.device());
  if (backend.fused_logprobs)
    if (auto out = backend.fused_logprobs(hidden, lm_head_weight, lm_head_bias, token_ids, temperature, chunk_positions);
        out.logps.defined())
      return out;
  auto flat_hidden = hidden.reshape({batch * positions, hidden.size(2)});
  auto ids = token_ids.reshape({batch * positions}).to(torch::kLong);
  auto bias = lm_head_bias.defined() ? lm_head_bias : torch::empty({0}, lm_head_weight.options());
  auto outputs = FusedLmHeadLogprobs::apply(flat_hidden, lm_head_weight, bias, ids, temperature, chunk_positions);
  return {outputs[0].view({batch, positions}), outputs[1].view({batch, positions})};
}

LogprobsAndEntropies naive_logprobs(const torch::Tensor& logits, const torch::Tensor& token_ids, double temperature) {
  check_logits(logits, token_ids, temperature, 1);
  auto logp = torch::log_softmax(scaled(logits, temperature), -1);
  auto chosen = logp.gather(2, token_ids.to(torch::kLong).unsqueeze(2)).squeeze(2);
  torch::Tensor entropies;
  {
    torch::NoGradGuard no_grad;
    entropies = -(logp.exp() * logp).sum(-1);
  }
  return {chosen, entropies};
}

}  // namespace rayless::ops
