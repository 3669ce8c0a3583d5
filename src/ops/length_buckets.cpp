// Packed attention in length buckets (length_buckets): whether a pass attends in buckets (the one
// dispatch point), the buckets' plan, and the attention over them; see ops.h.
#include "backend.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "rayless/base/error.h"

namespace rayless::ops {

bool attends_in_buckets(const torch::Device& device, int64_t positions_per_row) {
  const BackendTable& backend = backend_for(device);
  return backend.attends_in_buckets && backend.attends_in_buckets(positions_per_row);
}

std::vector<LengthBucket> plan_length_buckets(const std::vector<int64_t>& sorted_lengths, int64_t past,
                                              int64_t heads, double call_cost) {
  runtimeCheck(std::is_sorted(sorted_lengths.begin(), sorted_lengths.end()),
               "plan_length_buckets: lengths must be sorted ascending");
  const auto first_row = std::find_if(sorted_lengths.begin(), sorted_lengths.end(), [](int64_t l) { return l > 0; });
  const int64_t skipped = first_row - sorted_lengths.begin();
  const std::vector<int64_t> lengths(first_row, sorted_lengths.end());
  const size_t n = lengths.size();
  // best[j]: the least cost of the first j rows; cut[j]: where the last bucket of that plan starts
  std::vector<double> best(n + 1, std::numeric_limits<double>::infinity());
  std::vector<size_t> cut(n + 1, 0);
  best[0] = 0.0;
  for (size_t j = 1; j <= n; ++j) {
    const double length = static_cast<double>(lengths[j - 1]);  // the bucket's longest row
    const double scores_per_row = static_cast<double>(heads) * length * (static_cast<double>(past) + length);
    for (size_t i = 0; i < j; ++i) {
      const double cost = best[i] + static_cast<double>(j - i) * scores_per_row + call_cost;
      if (cost < best[j]) {
        best[j] = cost;
        cut[j] = i;
      }
    }
  }
  std::vector<LengthBucket> buckets;
  for (size_t j = n; j > 0; j = cut[j])
    buckets.push_back({skipped + static_cast<int64_t>(cut[j]), static_cast<int64_t>(j - cut[j]), lengths[j - 1]});
  std::reverse(buckets.begin(), buckets.end());
  return buckets;
}

torch::Tensor bucketed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& mask, const torch::Tensor& token_index, double scale,
                                 bool enable_gqa, double call_cost) {
  runtimeCheck(q.dim() == 3 && k.dim() == 4 && v.sizes() == k.sizes() && mask.dim() == 4 && q.size(0) == token_index.numel() &&
                   q.size(2) == k.size(3) && mask.size(3) == k.size(2) && mask.size(2) <= k.size(2) &&
                   (mask.size(0) == k.size(0) || mask.size(0) == 1),
               "bucketed_attention: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes(), ", mask ", mask.sizes(),
               ", ", token_index.numel(), " tokens");
  const int64_t B = k.size(0), T = mask.size(2), H = q.size(1), D = q.size(2);
  const int64_t past = k.size(2) - T;
  const auto long_cpu = torch::TensorOptions().dtype(torch::kInt64);
  const auto index = token_index.to(torch::kCPU, torch::kInt64).contiguous();
  const int64_t* slots = index.data_ptr<int64_t>();
  const int64_t tokens = index.numel();

  // each row's query length: its last packed slot + 1 (earlier slots that hold no packed token are
  // computed on zeros and dropped, as in the one padded call)
  std::vector<int64_t> row_length(static_cast<size_t>(B), 0);
  for (int64_t n = 0; n < tokens; ++n) {
    runtimeCheck(slots[n] >= 0 && slots[n] < B * T, "bucketed_attention: token slot ", slots[n], " outside [0, ",
                 B * T, ")");
    auto& length = row_length[static_cast<size_t>(slots[n] / T)];
    length = std::max(length, slots[n] % T + 1);
  }
  std::vector<int64_t> order(static_cast<size_t>(B));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return row_length[static_cast<size_t>(a)] < row_length[static_cast<size_t>(b)];
  });
  std::vector<int64_t> sorted_lengths;
  for (int64_t row : order) sorted_lengths.push_back(row_length[static_cast<size_t>(row)]);
  const std::vector<LengthBucket> buckets = plan_length_buckets(sorted_lengths, past, H, call_cost);

  // The bucket layout: bucket after bucket, each [rows, length] row-major, a bucket's rows in their
  // first order (any order is right; a bucket of all rows then needs no gather). A token's place there
  // is its row's offset plus its slot.
  std::vector<int64_t> row_offset(static_cast<size_t>(B), -1);
  std::vector<std::vector<int64_t>> bucket_rows;
  int64_t offset = 0;
  for (const LengthBucket& bucket : buckets) {
    std::vector<int64_t> rows(order.begin() + bucket.first, order.begin() + bucket.first + bucket.count);
    std::sort(rows.begin(), rows.end());
    for (int64_t r = 0; r < bucket.count; ++r) row_offset[static_cast<size_t>(rows[static_cast<size_t>(r)])] = offset + r * bucket.length;
    bucket_rows.push_back(std::move(rows));
    offset += bucket.count * bucket.length;
  }
  if (buckets.empty()) return torch::zeros({0, H * D}, q.options());
  std::vector<int64_t> place(static_cast<size_t>(tokens));
  for (int64_t n = 0; n < tokens; ++n)
    place[static_cast<size_t>(n)] = row_offset[static_cast<size_t>(slots[n] / T)] + slots[n] % T;
  const auto place_index = torch::tensor(place, long_cpu).to(q.device());

  std::vector<AttentionBucket> plan;
  for (size_t i = 0; i < buckets.size(); ++i) {
    AttentionBucket b;
    b.count = buckets[i].count;
    b.length = buckets[i].length;
    b.keys = past + b.length;  // a query at slot i sees no key beyond past + i
    b.allowed = mask.narrow(2, 0, b.length).narrow(3, 0, b.keys);
    if (b.count < B) {  // a bucket of all rows takes them in place
      b.rows = torch::tensor(bucket_rows[i], long_cpu).to(q.device());
      if (mask.size(0) == B) b.allowed = b.allowed.index_select(0, b.rows);
    }
    plan.push_back(b);
  }
  // the queries scattered once into the bucket layout
  const auto scattered = torch::zeros({offset, H, D}, q.options()).index_copy(0, place_index, q);
  return scaled_attention_buckets(scattered, k, v, plan, scale, enable_gqa).index_select(0, place_index);
}

}  // namespace rayless::ops
