// One decode step's float32 attention on the CPU (avx2_decode_attention); see avx2_kernels.h. The loops
// carry their own target attribute, as in linear_rows.cpp: they run only where the plan found the
// instructions.
#include "avx2_kernels.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "exp8.h"
#include "rayless/base/cpu_features.h"
#include "rayless/ops/autocast_scope.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>
#endif

namespace rayless::ops::avx2 {

namespace {
// (row, head) pairs per task: a pair is a few microseconds of work at decode lengths
constexpr int64_t kPairsPerTask = 8;

#ifdef RAYLESS_X86_KERNELS
// scores[s] = e^(scores[s] - largest) for s < n, 8 at a time (avx2_exp.h); a masked key's -inf gives 0.
// The last n % 8 go through a padded register, so every score takes the same arithmetic.
__attribute__((target("avx2,fma"))) void exponentiate_less(float* scores, int64_t n, float largest) {
  const __m256 shift = _mm256_set1_ps(largest);
  int64_t s = 0;
  for (; s + 8 <= n; s += 8)
    _mm256_storeu_ps(scores + s, exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + s), shift)));
  if (s < n) {
    alignas(32) float rest[8] = {};
    for (int64_t j = s; j < n; ++j) rest[j - s] = scores[j];
    _mm256_store_ps(rest, exp8(_mm256_sub_ps(_mm256_load_ps(rest), shift)));
    for (int64_t j = s; j < n; ++j) scores[j] = rest[j - s];
  }
}

// A register of 8 partial sums reduced to 4: lane i plus lane i + 4.
__attribute__((target("avx2,fma"))) inline __m128 fold_halves(__m256 a) {
  return _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
}

// q . k over d < n, in a fixed order for a given n: a chain of 8-float FMAs, the register reduced as
// ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)), then the remainder one by one
__attribute__((target("avx2,fma"))) float dot(const float* q, const float* k, int64_t n) {
  __m256 sum8 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) sum8 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), sum8);
  __m128 sum4 = fold_halves(sum8);
  sum4 = _mm_hadd_ps(sum4, sum4);
  sum4 = _mm_hadd_ps(sum4, sum4);
  float sum = _mm_cvtss_f32(sum4);
  for (; d < n; ++d) sum = std::fma(q[d], k[d], sum);
  return sum;
}

// dot(q, k_j, n) for the 8 keys k_j = k + j * key_stride, the same bits, into scores[0..8): the 8
// registers are reduced together, 4 keys per horizontal add (one reduction per key cost as much as
// its multiplications at a head size of 64)
__attribute__((target("avx2,fma"))) void dot_8_keys(const float* q, const float* k, int64_t key_stride, int64_t n,
                                                    float* scores) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    const __m256 query = _mm256_loadu_ps(q + d);
    a0 = _mm256_fmadd_ps(query, _mm256_loadu_ps(k + d), a0);
    a1 = _mm256_fmadd_ps(query, _mm256_loadu_ps(k + key_stride + d), a1);
    a2 = _mm256_fmadd_ps(query, _mm256_loadu_ps(k + 2 * key_stride + d), a2);
    a3 = _mm256_fmadd_ps(query, _mm256_loadu_ps(k + 3 * key_stride + d), a3);
    a4 = _mm256_fmadd_ps(query, _mm256_loadu_ps(k + 4 * key_stride + d), a4);
    a5 = _mm256_fmadd_ps(query, _mm256_loadu_ps(k + 5 * key_stride + d), a5);
    a6 = _mm256_fmadd_ps(query, _mm256_loadu_ps(k + 6 * key_stride + d), a6);
    a7 = _mm256_fmadd_ps(query, _mm256_loadu_ps(k + 7 * key_stride + d), a7);
  }
  // lane j of each: ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)) of key j
  const __m128 first = _mm_hadd_ps(_mm_hadd_ps(fold_halves(a0), fold_halves(a1)),
                                   _mm_hadd_ps(fold_halves(a2), fold_halves(a3)));
  const __m128 second = _mm_hadd_ps(_mm_hadd_ps(fold_halves(a4), fold_halves(a5)),
                                    _mm_hadd_ps(fold_halves(a6), fold_halves(a7)));
  _mm_storeu_ps(scores, first);
  _mm_storeu_ps(scores + 4, second);
  for (; d < n; ++d)
    for (int j = 0; j < 8; ++j) scores[j] = std::fma(q[d], k[j * key_stride + d], scores[j]);
}

// out[0..n) = sum over s < keys of weights[s] * v_s (v_s = v + s * value_stride), skipping zero
// weights: each element one FMA chain over the keys in order, 64 elements at a time in registers
__attribute__((target("avx2,fma"))) void weighted_values(const float* weights, const float* v, int64_t value_stride,
                                                         int64_t keys, int64_t n, float* out) {
  int64_t d = 0;
  for (; d + 64 <= n; d += 64) {
    __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0, o4 = o0, o5 = o0, o6 = o0, o7 = o0;
    for (int64_t s = 0; s < keys; ++s) {
      if (weights[s] == 0.0f) continue;
      const __m256 w = _mm256_set1_ps(weights[s]);
      const float* row = v + s * value_stride + d;
      o0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row), o0);
      o1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8), o1);
      o2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 16), o2);
      o3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 24), o3);
      o4 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 32), o4);
      o5 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 40), o5);
      o6 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 48), o6);
      o7 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 56), o7);
    }
    _mm256_storeu_ps(out + d, o0);
    _mm256_storeu_ps(out + d + 8, o1);
    _mm256_storeu_ps(out + d + 16, o2);
    _mm256_storeu_ps(out + d + 24, o3);
    _mm256_storeu_ps(out + d + 32, o4);
    _mm256_storeu_ps(out + d + 40, o5);
    _mm256_storeu_ps(out + d + 48, o6);
    _mm256_storeu_ps(out + d + 56, o7);
  }
  for (; d + 8 <= n; d += 8) {
    __m256 o = _mm256_setzero_ps();
    for (int64_t s = 0; s < keys; ++s)
      if (weights[s] != 0.0f) o = _mm256_fmadd_ps(_mm256_set1_ps(weights[s]), _mm256_loadu_ps(v + s * value_stride + d), o);
    _mm256_storeu_ps(out + d, o);
  }
  for (; d < n; ++d) {
    float o = 0.0f;
    for (int64_t s = 0; s < keys; ++s)
      if (weights[s] != 0.0f) o = std::fma(weights[s], v[s * value_stride + d], o);
    out[d] = o;
  }
}
#endif

bool applies(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& allowed) {
  if (!q.defined() || !k.defined() || !v.defined() || !allowed.defined()) return false;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || allowed.dim() != 4) return false;
  for (const auto* t : {&q, &k, &v})
    if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat32 || t->stride(3) != 1) return false;
  if (!allowed.device().is_cpu() || allowed.scalar_type() != torch::kBool) return false;
  // gradients go through LibTorch's attention; autocast lowering float32 computes in its dtype there
  if (c10::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad())) return false;
  if (autocast_compute_dtype(at::kCPU, torch::kFloat32) != torch::kFloat32) return false;
  const int64_t rows = q.size(0), heads = q.size(1), kv_heads = k.size(1), keys = k.size(2), dim = q.size(3);
  if (q.size(2) != 1 || dim == 0 || keys == 0 || kv_heads == 0 || heads % kv_heads != 0) return false;
  if (k.size(0) != rows || v.size(0) != rows || v.size(1) != kv_heads || v.size(2) != keys || k.size(3) != dim ||
      v.size(3) != dim)
    return false;
  return (allowed.size(0) == rows || allowed.size(0) == 1) && allowed.size(1) == 1 && allowed.size(2) == 1 &&
         allowed.size(3) == keys;
}
}  // namespace

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale) {
  if (!applies(q, k, v, allowed)) return {};
#ifdef RAYLESS_X86_KERNELS
  const int64_t rows = q.size(0), heads = q.size(1), kv_heads = k.size(1), keys = k.size(2), dim = q.size(3);
  const int64_t group = heads / kv_heads, pairs = rows * heads;
  const float* q_data = q.data_ptr<float>();
  const float* k_data = k.data_ptr<float>();
  const float* v_data = v.data_ptr<float>();
  const bool* mask = allowed.data_ptr<bool>();
  const int64_t mask_row_stride = allowed.size(0) == 1 ? 0 : allowed.stride(0), mask_key_stride = allowed.stride(3);
  const float scale_f = static_cast<float>(scale);
  const int64_t key_stride = k.stride(2), value_stride = v.stride(2);
  constexpr float minus_infinity = -std::numeric_limits<float>::infinity();

  // softmax's numerators: each (row, head)'s scores less their maximum, exponentiated
  auto weights = torch::empty({pairs, keys}, q.options());
  float* scores = weights.data_ptr<float>();
  std::atomic<bool> some_row_masked_out{false};
  at::parallel_for(0, pairs, kPairsPerTask, [&](int64_t first, int64_t last) {
    for (int64_t pair = first; pair < last; ++pair) {
      const int64_t b = pair / heads, h = pair % heads;
      const float* query = q_data + b * q.stride(0) + h * q.stride(1);
      const float* key = k_data + b * k.stride(0) + (h / group) * k.stride(1);
      const bool* may_attend = mask + b * mask_row_stride;
      float* row_scores = scores + pair * keys;
      int64_t s = 0;
      for (; s + 8 <= keys; s += 8) dot_8_keys(query, key + s * key_stride, key_stride, dim, row_scores + s);
      for (; s < keys; ++s) row_scores[s] = dot(query, key + s * key_stride, dim);
      float largest = minus_infinity;
      for (s = 0; s < keys; ++s) {
        row_scores[s] = may_attend[s * mask_key_stride] ? row_scores[s] * scale_f : minus_infinity;
        largest = std::max(largest, row_scores[s]);
      }
      if (largest == minus_infinity) {
        some_row_masked_out.store(true);
        continue;
      }
      exponentiate_less(row_scores, keys, largest);
    }
  });
  // LibTorch's flash kernel gives such a row zeros or NaN depending on its version: keep its answer
  if (some_row_masked_out.load()) return {};

  auto out = torch::empty({rows, 1, heads * dim}, q.options());
  float* out_data = out.data_ptr<float>();
  at::parallel_for(0, pairs, kPairsPerTask, [&](int64_t first, int64_t last) {
    for (int64_t pair = first; pair < last; ++pair) {
      const int64_t b = pair / heads, h = pair % heads;
      const float* value = v_data + b * v.stride(0) + (h / group) * v.stride(1);
      const float* row_weights = scores + pair * keys;
      float* head_out = out_data + pair * dim;  // [b, 0, h * dim + d]
      weighted_values(row_weights, value, value_stride, keys, dim, head_out);
      float total = 0;
      for (int64_t s = 0; s < keys; ++s) total += row_weights[s];
      const float inverse = 1.0f / total;
      for (int64_t d = 0; d < dim; ++d) head_out[d] *= inverse;
    }
  });
  return out;
#else
  return {};
#endif
}

}  // namespace rayless::ops::avx2
