// rms_norm (ops.h): transformers' RMSNorm forward bit for bit; under autocast its one-pass backward (its
// AVX-512 rows and its portable ones) against autograd's backward of the same calls in float32 and in
// float64.
#include <catch2/catch.hpp>

#include "model/helpers.h"

#include "rayless/ops/autocast_scope.h"
#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

namespace {

struct Result {
  torch::Tensor out, dx, dw;
};

// the output and the gradients of sum(out * weights) for leaves x and weight in `dtype`
template <typename Norm>
Result run(Norm norm, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& weights, torch::Dtype dtype) {
  auto x = x0.to(dtype).clone().requires_grad_(), w = w0.to(dtype).clone().requires_grad_();
  const auto out = norm(x, w);
  (out.to(torch::kFloat64) * weights).sum().backward();
  return {out.detach(), x.grad(), w.grad()};
}

}  // namespace

TEST_CASE("rms_norm under autocast: the forward's bits, and a one-pass backward as accurate as autograd's") {
  // the AVX-512 rows where the CPU has them, and the portable rows alone
  const bool vector_rows = GENERATE(true, false);
  const KernelOverride rows(Kernel::avx512_rms_norm_backward, vector_rows);
  INFO("AVX-512 rows " << (kernel_plan().on(Kernel::avx512_rms_norm_backward) ? "on" : "off"));
  const double eps = 1e-6;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{300, 640}, {2, 7, 64}, {5, 40}}) {  // 40: no 16-wide blocks
    INFO("shape " << torch::IntArrayRef(shape));
    torch::manual_seed(3);
    const auto x0 = torch::randn(shape) * 3, w0 = 1 + 0.1 * torch::randn({shape.back()});
    const auto weights = torch::randn(shape, torch::kFloat64);
    const AutocastScope autocast(true, torch::kCPU);
    const Result ours = run(
        [&](const torch::Tensor& x, const torch::Tensor& w) {
          REQUIRE(rms_norm_backward_in_one_pass(x, w));
          return rms_norm(x, w, eps);
        },
        x0, w0, weights, torch::kFloat32);
    const auto autograds = [&](torch::Dtype dtype) {
      return run([&](const torch::Tensor& x, const torch::Tensor& w) { return test::transformers_rms_norm(x, w, eps); }, x0, w0,
                 weights, dtype);
    };
    const Result theirs = autograds(torch::kFloat32), exact = autograds(torch::kFloat64);
    CHECK(torch::equal(ours.out, theirs.out));
    for (const auto& [name, mine, autograd, truth] : std::vector<std::tuple<std::string, torch::Tensor, torch::Tensor, torch::Tensor>>{
             {"dx", ours.dx, theirs.dx, exact.dx}, {"dw", ours.dw, theirs.dw, exact.dw}}) {
      const double our_error = test::relative_l2_error(mine, truth), their_error = test::relative_l2_error(autograd, truth);
      INFO(name << ": relative error " << our_error << ", autograd's float32 backward " << their_error);
      CHECK(mine.scalar_type() == torch::kFloat32);
      CHECK(our_error <= std::max(4 * their_error, 2e-7));  // float32 rounding, sums in another order
    }
  }
}

TEST_CASE("rms_norm without autocast, or with a bfloat16 input, is autograd's, bit for bit") {
  torch::manual_seed(4);
  const auto x0 = torch::randn({6, 64}), w0 = 1 + 0.1 * torch::randn({64});
  const auto weights = torch::randn({6, 64}, torch::kFloat64);
  for (const bool autocast_on : {false, true}) {
    const AutocastScope autocast(autocast_on, torch::kCPU);
    const auto dtype = autocast_on ? torch::kBFloat16 : torch::kFloat32;  // with autocast: a q_norm's bf16 input
    INFO("autocast " << autocast_on);
    const Result ours = run(
        [&](const torch::Tensor& x, const torch::Tensor& w) {
          CHECK_FALSE(rms_norm_backward_in_one_pass(x, w.to(torch::kFloat32)));
          return rms_norm(x, w.to(torch::kFloat32), 1e-6);
        },
        x0, w0, weights, dtype);
    const Result theirs = run(
        [&](const torch::Tensor& x, const torch::Tensor& w) { return test::transformers_rms_norm(x, w.to(torch::kFloat32), 1e-6); },
        x0, w0, weights, dtype);
    CHECK(torch::equal(ours.out, theirs.out));
    CHECK(torch::equal(ours.dx, theirs.dx));
    CHECK(torch::equal(ours.dw, theirs.dw));
  }
}
