// e^x for 8 floats (src/ops/cpu/x86/avx2/exp8.h), which the decode step's softmax and silu use, against float64's
// exp: within 2 ulp over float's whole normal range, and its edges as the header says.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/x86/avx2/exp8.h"
#include "rayless/base/cpu_features.h"

#ifdef RAYLESS_X86_KERNELS
namespace {
__attribute__((target("avx2,fma"))) void exp_of(const float* x, float* out) {
  _mm256_storeu_ps(out, rayless::ops::avx2::exp8(_mm256_loadu_ps(x)));
}

// |a - b| in units of float's spacing at b (a normal float)
double ulps(float a, double b) {
  const double spacing = std::ldexp(1.0, std::ilogb(static_cast<float>(b)) - 23);
  return std::abs(double(a) - b) / spacing;
}
}  // namespace

TEST_CASE("avx2 exp8: within 2 ulp of float64's exp from -87.3 to 88.3, 0 and infinity past the ends") {
  if (!rayless::cpu_has_avx2() || !rayless::cpu_has_fma()) {
    WARN("this CPU lacks AVX2 with FMA: exp8 is not exercised here");
    return;
  }
  // every 2^-10 across the range, plus offsets so that the reduced argument takes all its values
  std::vector<float> xs;
  for (double x = -87.3; x <= 88.3; x += 1.0 / 1024) xs.push_back(static_cast<float>(x));
  for (float x = -1.0f; x <= 1.0f; x = std::nextafter(x, 2.0f) + 1e-5f) xs.push_back(x);
  while (xs.size() % 8) xs.push_back(0.0f);
  std::vector<float> out(xs.size());
  for (size_t i = 0; i < xs.size(); i += 8) exp_of(xs.data() + i, out.data() + i);
  double worst = 0;
  float worst_at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double error = ulps(out[i], std::exp(double(xs[i])));
    if (error > worst) worst = error, worst_at = xs[i];
  }
  CAPTURE(worst, worst_at, xs.size());
  CHECK(worst <= 2.0);
  CHECK(out[std::find(xs.begin(), xs.end(), 0.0f) - xs.begin()] == 1.0f);

  constexpr float inf = std::numeric_limits<float>::infinity();
  const float edges[8] = {-inf, -1000.0f, -87.34f, 88.38f, 1000.0f, inf, std::nanf(""), -87.33f};
  float edge_out[8];
  exp_of(edges, edge_out);
  CHECK(edge_out[0] == 0.0f);
  CHECK(edge_out[1] == 0.0f);
  CHECK(edge_out[2] == 0.0f);
  CHECK(edge_out[3] == inf);
  CHECK(edge_out[4] == inf);
  CHECK(edge_out[5] == inf);
  CHECK(std::isnan(edge_out[6]));
  CHECK(ulps(edge_out[7], std::exp(double(-87.33f))) <= 2.0);
}
#endif
