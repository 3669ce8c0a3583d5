// rayless bench logprobs: peak extra memory and time of forward + backward for per-token log-probs
// (+ entropies) from final hidden states and the LM head, three ways:
//   naive      logits = linear(h, W); log_softmax over [B, T, V]; gather
//   selective  logits = linear(h, W); chosen logit - logsumexp, chunk by chunk over rows
//   fused      rayless::ops::fused_logprobs: LM head applied chunk by chunk, logits recomputed in backward
// Memory is counted exactly: a CPU allocator that wraps LibTorch's own counts the bytes of live tensor
// storage; "peak extra" is the highest live total during the measured call minus the total before it
// (inputs and parameters excluded, their gradients included). Library-internal scratch (oneDNN/MKL
// workspaces) is not tensor storage and is not counted.
#include <c10/core/CPUAllocator.h>
#include <torch/utils.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "bench/benches.h"
#include "cli/options.h"
#include "rayless/base/error.h"
#include "rayless/ops/ops.h"

namespace rayless::cli {

namespace {

// Wraps the default CPU allocator and keeps live and peak byte counts of tensor storage.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr inner = base_->allocate(bytes);
    void* data = inner.get();
    auto* record = new Record{std::move(inner), bytes, this};
    const int64_t now = live_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return {data, record, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  int64_t live() const { return live_.load(); }
  int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }

 private:
  struct Record {
    c10::DataPtr inner;  // frees through the wrapped allocator when the record is deleted
    size_t bytes;
    CountingAllocator* owner;
  };
  static void release(void* context) {
    auto* record = static_cast<Record*>(context);
    record->owner->live_.fetch_sub(static_cast<int64_t>(record->bytes));
    delete record;
  }

  c10::Allocator* base_;
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
};

CountingAllocator& counting_allocator() {
  // installed once, for the rest of the process (priority above the default allocator's)
  static CountingAllocator* allocator = [] {
    auto* created = new CountingAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(created, /*priority=*/100);
    return created;
  }();
  return *allocator;
}

struct Shape {
  int64_t batch, positions, hidden, vocab;
};

struct Measurement {
  double seconds = 0;
  int64_t peak_extra_bytes = 0;
  int64_t weight_grad_bytes = 0;
};

Measurement measure(const std::string& method, const Shape& shape, int64_t chunk, int repeats) {
  auto& allocator = counting_allocator();
  torch::manual_seed(1);
  auto hidden = torch::randn({shape.batch, shape.positions, shape.hidden}).requires_grad_(true);
  auto weight = (torch::randn({shape.vocab, shape.hidden}) * 0.02).requires_grad_(true);
  auto ids = torch::randint(shape.vocab, {shape.batch, shape.positions}, torch::kLong);
  auto cotangent = torch::randn({shape.batch, shape.positions});
  Measurement best;
  best.seconds = 1e300;
  for (int repeat = 0; repeat < repeats; ++repeat) {
    hidden.mutable_grad() = torch::Tensor();
    weight.mutable_grad() = torch::Tensor();
    allocator.reset_peak();
    const int64_t before = allocator.live();
    const auto start = std::chrono::steady_clock::now();
    {
      ops::LogprobsAndEntropies out;
      if (method == "fused") {
        out = ops::fused_logprobs(hidden, weight, torch::Tensor(), ids, 1.0, chunk);
      } else {
        auto logits = torch::linear(hidden, weight);
        out = method == "naive" ? ops::naive_logprobs(logits, ids, 1.0)
                                : ops::selective_logprobs_and_entropies(logits, ids, 1.0, chunk);
      }
      (out.logps * cotangent).sum().backward();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best.seconds = std::min(best.seconds, seconds);
    best.peak_extra_bytes = allocator.peak() - before;
    best.weight_grad_bytes = weight.grad().numel() * weight.grad().element_size();
  }
  return best;
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream stream(list);
  for (std::string item; std::getline(stream, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int bench_logprobs(const Args& args) {
  po::options_description options("rayless-bench logprobs");
  int64_t batch = 4, positions = 1024, hidden = 896, vocab = 151936, chunk = 64;
  int repeats = 1, threads = 0;
  std::string methods = "naive,selective,fused", sizes = "small,large";
  options.add_options()("batch", po::value(&batch)->default_value(batch), "B of the large size")(
      "seq", po::value(&positions)->default_value(positions), "T (completion positions) of the large size")(
      "hidden", po::value(&hidden)->default_value(hidden), "H of the large size")(
      "vocab", po::value(&vocab)->default_value(vocab), "V of the large size")(
      "chunk", po::value(&chunk)->default_value(chunk), "rows per chunk (selective, fused)")(
      "methods", po::value(&methods)->default_value(methods), "comma list of naive, selective, fused")(
      "sizes", po::value(&sizes)->default_value(sizes), "comma list of small (B=2 T=256 H=256 V=32768), large")(
      "repeats", po::value(&repeats)->default_value(repeats), "runs per measurement (best time is shown)")(
      "threads", po::value(&threads)->default_value(threads), "intra-op threads (0 = LibTorch's default)");
  po::variables_map vm;
  if (!parse_options(args, "rayless-bench logprobs [options]", options, vm)) return kExitOk;
  inputCheck(batch > 0 && positions > 0 && hidden > 0 && vocab > 0 && chunk > 0 && repeats > 0,
             "bench logprobs: sizes, --chunk and --repeats must be positive");
  if (threads > 0) torch::set_num_threads(threads);
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const auto& size : split(sizes)) {
    if (size == "small")
      shapes.push_back({size, Shape{2, 256, 256, 32768}});
    else if (size == "large")
      shapes.push_back({size, Shape{batch, positions, hidden, vocab}});
    else
      throw InputError(str("bench logprobs: --sizes: unknown size \"", size, "\" (small | large)"));
  }
  for (const auto& method : split(methods))
    inputCheck(method == "naive" || method == "selective" || method == "fused", "bench logprobs: --methods: unknown method \"",
               method, "\" (naive | selective | fused)");

  std::cout << "threads " << torch::get_num_threads() << ", float32, chunk " << chunk << " rows\n";
  std::cout << "| size | B | T | H | V | method | fwd+bwd s | peak extra MiB | peak extra without dW MiB |\n"
            << "| --- | --- | --- | --- | --- | --- | --- | --- | --- |" << std::endl;
  for (const auto& [name, shape] : shapes) {
    for (const auto& method : split(methods)) {
      const Measurement m = measure(method, shape, chunk, repeats);
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.2f", m.seconds);
      std::cout << "| " << name << " | " << shape.batch << " | " << shape.positions << " | " << shape.hidden << " | "
                << shape.vocab << " | " << method << " | " << seconds << " | " << mib(m.peak_extra_bytes) << " | "
                << mib(m.peak_extra_bytes - m.weight_grad_bytes) << " |" << std::endl;
    }
  }
  return kExitOk;
}

}  // namespace rayless::cli
