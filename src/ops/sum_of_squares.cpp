// The sum of squares of the gradient norm: the one dispatch point, and its reference; see ops.h.
#include "backend.h"

#include <algorithm>

namespace rayless::ops {

double sum_of_squares(const torch::Tensor& t) {
  const BackendTable& backend = backend_for(t.device());
  if (double sum = 0; backend.sum_of_squares && backend.sum_of_squares(t, &sum)) return sum;
  // the reference: float64 sums of pieces, no float64 copy of the whole tensor
  torch::NoGradGuard no_grad;
  double sum = 0;
  constexpr int64_t kPiece = int64_t{1} << 20;
  const torch::Tensor flat = t.detach().reshape({-1});
  for (int64_t start = 0; start < flat.numel(); start += kPiece)
    sum += flat.narrow(0, start, std::min(kPiece, flat.numel() - start)).to(torch::kFloat64).square().sum().item<double>();
  return sum;
}

}  // namespace rayless::ops
