// The sum of squares of the gradient norm: the one dispatch point, and its reference; see ops.h.
#include "backend.h"

#include <algorithm>

namespace rayless::ops {

torch::Tensor sum_of_squares(const torch::Tensor& t) {
  const BackendTable& backend = backend_for(t.device());
  // a backend's kernel runs on the host's memory (the CPU's), so its double is already there
  if (double sum = 0; backend.sum_of_squares && backend.sum_of_squares(t, &sum))
    return torch::scalar_tensor(sum, t.options().dtype(torch::kFloat64));
  // the reference: float64 sums of pieces added in order, no float64 copy of the whole tensor, on the
  // tensor's device
  torch::NoGradGuard no_grad;
  torch::Tensor sum = torch::zeros({}, t.options().dtype(torch::kFloat64));
  constexpr int64_t kPiece = int64_t{1} << 20;
  const torch::Tensor flat = t.detach().reshape({-1});
  for (int64_t start = 0; start < flat.numel(); start += kPiece)
    sum = sum + flat.narrow(0, start, std::min(kPiece, flat.numel() - start)).to(torch::kFloat64).square().sum();
  return sum;
}

}  // namespace rayless::ops
