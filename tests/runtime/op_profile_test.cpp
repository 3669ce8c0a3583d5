#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <map>
#include <string>

#include "rayless/runtime/op_profile.h"

using namespace rayless;

namespace {
std::map<std::string, int64_t> top_level_calls(const nlohmann::json& summary) {
  std::map<std::string, int64_t> calls;
  for (const auto& op : summary["top_level_operators"]) calls[op["name"].get<std::string>()] = op["calls"].get<int64_t>();
  return calls;
}
}  // namespace

TEST_CASE("op profile: operators called from the code counted once each, what they call inside them not", "[runtime]") {
  const auto a = torch::randn({8, 8}), b = torch::randn({8, 8});
  OpProfile profile{torch::Device(torch::kCPU)};
  for (int i = 0; i < 3; ++i) (void)torch::matmul(a, b);  // aten::matmul calls aten::mm inside
  for (int i = 0; i < 2; ++i) (void)torch::mm(a, b);
  (void)(a + b);
  const nlohmann::json summary = profile.stop(3);
  const auto calls = top_level_calls(summary);
  CHECK(calls.at("aten::matmul") == 3);
  CHECK(calls.at("aten::mm") == 2);  // the five inside matmul are not top-level
  CHECK(calls.at("aten::add") == 1);
  CHECK(calls.size() == 3);
  CHECK(summary["steps"] == 3);
  CHECK(summary["host_operator_calls"].get<int64_t>() >= 3 + 3 + 2 + 1);  // matmul's own mm inside
  CHECK(summary["host_operator_calls_per_step"].get<double>() == Approx(summary["host_operator_calls"].get<double>() / 3));
  CHECK(summary["top_level_operators_ms"].get<double>() <= summary["recorded_ms"].get<double>());
  CHECK_FALSE(summary.contains("device_busy_share"));  // CUDA only
  CHECK_THAT(profile_line(summary), Catch::Contains("profile: 3 steps in"));
}
