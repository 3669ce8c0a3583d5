// rayless-refcheck DIR: checks the GRPO math against reference cases computed by Hugging Face TRL.
// Every *.h5 file in DIR is one case; its root attribute `kind` (loss | advantages | logprob |
// entropy_threshold) says what to compute (layouts: tests/data/trl-reference/README.md). Prints one
// line per failing quantity and ends with "N passed, M failed"; exit 1 when any case failed.
//
// Under `mpirun -np N`, entropy_threshold cases with num_ranks == N run through the distributed
// global_entropy_threshold (each rank feeding its own inputs/rank_R, methods "gather" and "select");
// every other case runs on rank 0 only. Rank 0 prints.
//
// `--device cuda` (or any LibTorch device) runs the cases with every input on that
// device, compared in float64 on the CPU with the same tolerances (tools/gpu/device_check.sh).
#include <dirent.h>
#include <hdf5.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <torch/cuda.h>

#include "rayless/comm/communicator.h"
#include "rayless/grpo/entropy_threshold.h"
#include "rayless/base/error.h"
#include "rayless/grpo/advantages.h"
#include "rayless/grpo/entropy_mask.h"
#include "rayless/ops/ops.h"
#include "rayless/grpo/loss.h"
#include "rayless/runtime/runtime.h"

namespace rayless {
namespace {

constexpr double kTolerance64 = 1e-6;  // computing in float64
constexpr double kTolerance32 = 1e-4;  // computing in float32

// ---- HDF5 reading (C API) ------------------------------------------------------------------------

class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() {
    if (id_ >= 0) close_(id_);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  hid_t get() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

class CaseFile {
 public:
  CaseFile(const std::string& path, torch::Device device)
      : path_(path), device_(device), file_(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose) {
    inputCheck(file_.get() >= 0, path, ": cannot open as an HDF5 file");
  }
  const std::string& path() const { return path_; }
  torch::Device device() const { return device_; }

  bool has_attribute(const std::string& name) const { return H5Aexists(file_.get(), name.c_str()) > 0; }

  // A root attribute that is a string; nullopt when it is a number.
  std::optional<std::string> string_attribute(const std::string& name) const {
    inputCheck(has_attribute(name), path_, ": root attribute '", name, "' is missing");
    H5Handle attribute(H5Aopen(file_.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
    H5Handle type(H5Aget_type(attribute.get()), H5Tclose);
    if (H5Tget_class(type.get()) != H5T_STRING) return std::nullopt;
    if (H5Tis_variable_str(type.get()) > 0) {
      H5Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(memory.get(), H5T_VARIABLE);
      H5Tset_cset(memory.get(), H5Tget_cset(type.get()));
      char* text = nullptr;
      inputCheck(H5Aread(attribute.get(), memory.get(), &text) >= 0, path_, ": cannot read attribute '", name, "'");
      std::string value = text ? text : "";
      H5free_memory(text);
      return value;
    }
    const size_t size = H5Tget_size(type.get());
    std::vector<char> buffer(size + 1, '\0');
    inputCheck(H5Aread(attribute.get(), type.get(), buffer.data()) >= 0, path_, ": cannot read attribute '", name, "'");
    return std::string(buffer.data());
  }

  std::string text(const std::string& name) const {
    auto value = string_attribute(name);
    inputCheck(value.has_value(), path_, ": root attribute '", name, "' must be a string");
    return *value;
  }

  // A numeric attribute (a string holding a number is accepted too).
  double number(const std::string& name) const {
    if (auto value = string_attribute(name)) {
      try {
        size_t used = 0;
        double parsed = std::stod(*value, &used);
        if (used == value->size()) return parsed;
      } catch (const std::exception&) {
      }
      throw InputError(str(path_, ": root attribute '", name, "' = \"", *value, "\" is not a number"));
    }
    H5Handle attribute(H5Aopen(file_.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
    double value = 0;
    inputCheck(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value) >= 0, path_, ": cannot read attribute '", name, "'");
    return value;
  }

  bool has(const std::string& object_path) const {
    // check each prefix: H5Lexists needs the intermediate groups to exist
    size_t position = 0;
    while (true) {
      position = object_path.find('/', position + 1);
      std::string prefix = object_path.substr(0, position);
      if (H5Lexists(file_.get(), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
      if (position == std::string::npos) return true;
    }
  }

  std::vector<std::string> members(const std::string& group_path) const {
    std::vector<std::string> names;
    if (!has(group_path)) return names;
    H5Handle group(H5Gopen2(file_.get(), group_path.c_str(), H5P_DEFAULT), H5Gclose);
    H5G_info_t info;
    H5Gget_info(group.get(), &info);
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      ssize_t length = H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      std::vector<char> name(length + 1, '\0');
      H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
      names.emplace_back(name.data());
    }
    return names;
  }

  // A dataset converted by HDF5 to `as` (float64, float32, int64 or int8).
  torch::Tensor read(const std::string& dataset_path, torch::ScalarType as) const {
    inputCheck(has(dataset_path), path_, ": dataset '", dataset_path, "' is missing");
    H5Handle dataset(H5Dopen2(file_.get(), dataset_path.c_str(), H5P_DEFAULT), H5Dclose);
    H5Handle space(H5Dget_space(dataset.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    std::vector<hsize_t> dims(std::max(rank, 0));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    std::vector<int64_t> shape(dims.begin(), dims.end());
    auto tensor = torch::empty(shape, torch::TensorOptions().dtype(as));
    hid_t memory = as == torch::kFloat64 ? H5T_NATIVE_DOUBLE
                   : as == torch::kFloat32 ? H5T_NATIVE_FLOAT
                   : as == torch::kInt64   ? H5T_NATIVE_INT64
                                           : H5T_NATIVE_INT8;
    if (tensor.numel() > 0)
      inputCheck(H5Dread(dataset.get(), memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.data_ptr()) >= 0, path_,
                 ": cannot read dataset '", dataset_path, "' as ", as);
    return tensor.to(device_);
  }

 private:
  std::string path_;
  torch::Device device_;
  H5Handle file_;
};

// ---- comparison ------------------------------------------------------------------------------------

// Largest error relative to the expected array's largest magnitude (absolute when that is 0); NaN
// and infinities must sit at the same places with the same values. +inf for a shape mismatch.
double relative_error(const torch::Tensor& got_in, const torch::Tensor& expected_in) {
  auto got = got_in.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  auto expected = expected_in.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  if (got.sizes() != expected.sizes()) return std::numeric_limits<double>::infinity();
  if (got.numel() == 0) return 0;
  auto finite = torch::isfinite(expected);
  auto special_equal = torch::where(finite, torch::isfinite(got),
                                    (torch::isnan(expected) & torch::isnan(got)) | (got == expected));
  if (!special_equal.all().item<bool>()) return std::numeric_limits<double>::infinity();
  if (!finite.any().item<bool>()) return 0;
  auto expected_finite = expected.masked_select(finite);
  const double scale = expected_finite.abs().max().item<double>();
  const double largest = (got.masked_select(finite) - expected_finite).abs().max().item<double>();
  return scale > 0 ? largest / scale : largest;
}

struct CaseResult {
  std::vector<std::string> failures;  // "quantity: largest error E (tolerance T)"
};

void compare(CaseResult& result, const std::string& quantity, const torch::Tensor& got, const torch::Tensor& expected,
             double tolerance) {
  const double error = relative_error(got, expected);
  if (!(error <= tolerance)) {
    std::ostringstream line;
    line << quantity << ": largest error " << error << " (tolerance " << tolerance << ")";
    if (got.sizes() != expected.sizes()) line << ", shape " << got.sizes() << " vs expected " << expected.sizes();
    result.failures.push_back(line.str());
  }
}

// ---- the four case kinds -----------------------------------------------------------------------------

CaseResult check_advantages(const CaseFile& file) {
  AdvantageSettings settings;
  settings.num_generations = static_cast<int64_t>(file.number("num_generations"));
  settings.scale_rewards = parse_choice<ScaleRewards>(file.text("scale_rewards"), file.path() + ": scale_rewards");
  settings.multi_objective_aggregation =
      parse_choice<RewardAggregation>(file.text("multi_objective_aggregation"), file.path() + ": multi_objective_aggregation");
  auto rewards = file.read("inputs/rewards_per_func", torch::kFloat64);
  auto weights_tensor = file.read("inputs/reward_weights", torch::kFloat64).cpu().contiguous();
  std::vector<double> weights(weights_tensor.data_ptr<double>(), weights_tensor.data_ptr<double>() + weights_tensor.numel());
  auto out = compute_advantages(rewards, weights, settings);
  CaseResult result;
  compare(result, "advantages", out.advantages, file.read("expected/advantages", torch::kFloat64), kTolerance64);
  return result;
}

CaseResult check_logprob(const CaseFile& file) {
  auto logits = file.read("inputs/logits", torch::kFloat32);
  auto ids = file.read("inputs/token_ids", torch::kInt64);
  auto expected_logps = file.read("expected/logps", torch::kFloat64);
  auto expected_entropies = file.read("expected/entropies", torch::kFloat64);
  CaseResult result;
  // selective path, in small chunks so several pieces are exercised
  auto selective = ops::selective_logprobs_and_entropies(logits, ids, 1.0, 3);
  compare(result, "logps (selective)", selective.logps, expected_logps, kTolerance32);
  compare(result, "entropies (selective)", selective.entropies, expected_entropies, kTolerance32);
  // fused path: the logits as hidden states through an identity LM head (an exact matmul)
  const int64_t vocab = logits.size(2);
  auto fused = ops::fused_logprobs(logits, torch::eye(vocab, logits.options()), torch::Tensor(), ids, 1.0, 5);
  compare(result, "logps (fused)", fused.logps, expected_logps, kTolerance32);
  compare(result, "entropies (fused)", fused.entropies, expected_entropies, kTolerance32);
  return result;
}

CaseResult check_loss(const CaseFile& file) {
  LossSettings settings;
  settings.loss_type = parse_choice<LossType>(file.text("loss_type"), file.path() + ": loss_type");
  settings.importance_sampling_level =
      parse_choice<ImportanceSamplingLevel>(file.text("importance_sampling_level"), file.path() + ": importance_sampling_level");
  settings.epsilon_low = file.number("epsilon_low");
  settings.epsilon_high = file.number("epsilon_high");
  settings.beta = file.number("beta");
  // TRL added use_bias_correction_kl (default on) after the first cases were written: absent = off
  settings.use_bias_correction_kl =
      file.has_attribute("use_bias_correction_kl") && file.number("use_bias_correction_kl") != 0.0;
  auto delta = file.string_attribute("delta");
  if (!delta || *delta != "none") settings.delta = file.number("delta");
  settings.max_completion_length = static_cast<int64_t>(file.number("max_completion_length"));
  settings.gradient_accumulation_steps = static_cast<int64_t>(file.number("gradient_accumulation_steps"));
  settings.num_processes = static_cast<int64_t>(file.number("num_processes"));
  settings.sapo_temperature_pos = file.number("sapo_temperature_pos");
  settings.sapo_temperature_neg = file.number("sapo_temperature_neg");
  const double top_entropy_quantile = file.number("top_entropy_quantile");

  LossInputs inputs;
  inputs.per_token_logps = file.read("inputs/per_token_logps", torch::kFloat64).requires_grad_(true);
  if (file.has("inputs/old_per_token_logps"))
    inputs.old_per_token_logps = file.read("inputs/old_per_token_logps", torch::kFloat64);
  if (file.has("inputs/ref_per_token_logps"))
    inputs.ref_per_token_logps = file.read("inputs/ref_per_token_logps", torch::kFloat64);
  inputs.entropies = file.read("inputs/entropies", torch::kFloat64);
  inputs.advantages = file.read("inputs/advantages", torch::kFloat64);
  inputs.completion_mask = file.read("inputs/completion_mask", torch::kInt8);
  inputs.num_items_in_batch = file.number("num_items_in_batch");

  CaseResult result;
  if (top_entropy_quantile < 1.0) {
    inputs.entropy_mask = high_entropy_mask(inputs.entropies, inputs.completion_mask, top_entropy_quantile);
    if (file.has("expected/entropy_mask")) {
      auto expected_mask = file.read("expected/entropy_mask", torch::kInt8).to(torch::kBool);
      if (expected_mask.sizes() != inputs.entropy_mask.sizes() || !torch::equal(expected_mask, inputs.entropy_mask)) {
        const int64_t wrong = expected_mask.sizes() == inputs.entropy_mask.sizes()
                                  ? expected_mask.ne(inputs.entropy_mask).sum().item<int64_t>()
                                  : -1;
        result.failures.push_back(str("entropy_mask: ", wrong, " tokens differ"));
      }
    }
  }
  auto out = compute_loss(inputs, settings);
  out.loss.backward();
  compare(result, "loss", out.loss, file.read("expected/loss", torch::kFloat64), kTolerance64);
  compare(result, "grad_per_token_logps", inputs.per_token_logps.grad(),
          file.read("expected/grad_per_token_logps", torch::kFloat64), kTolerance64);
  auto metrics = out.metrics();
  for (const auto& stored : file.members("expected/metrics")) {
    std::string name = stored;  // fixtures store clip_ratio/low_mean as clip_ratio.low_mean
    std::replace(name.begin(), name.end(), '.', '/');
    auto expected = file.read("expected/metrics/" + stored, torch::kFloat64);
    auto found = metrics.find(name);
    if (found == metrics.end()) {
      result.failures.push_back(str("metric ", name, ": not computed"));
      continue;
    }
    compare(result, "metric " + name, torch::tensor(found->second, torch::kFloat64).reshape(expected.sizes()), expected,
            kTolerance64);
  }
  return result;
}

std::vector<torch::Tensor> threshold_inputs(const CaseFile& file, int64_t ranks) {
  std::vector<torch::Tensor> values;
  for (int64_t r = 0; r < ranks; ++r) {
    const std::string name = str("inputs/rank_", r);
    values.push_back(file.has(name) ? file.read(name, torch::kFloat32).reshape({-1})
                                    : torch::empty({0}, torch::TensorOptions(torch::kFloat32).device(file.device())));
  }
  return values;
}

void compare_threshold(CaseResult& result, const std::string& quantity, float got, double expected) {
  compare(result, quantity, torch::tensor(static_cast<double>(got), torch::kFloat64),
          torch::tensor(expected, torch::kFloat64), kTolerance64);
}

// Single process: all ranks' values together.
CaseResult check_threshold_local(const CaseFile& file) {
  const double top = file.number("top_entropy_quantile");
  auto all = torch::cat(threshold_inputs(file, static_cast<int64_t>(file.number("num_ranks"))));
  const double expected = file.read("expected/threshold", torch::kFloat64).item<double>();
  const float got = all.numel() > 0 ? entropy_quantile(all, 1.0 - top) : std::numeric_limits<float>::infinity();
  CaseResult result;
  compare_threshold(result, "threshold", got, expected);
  return result;
}

// Distributed: every rank calls this for the same case (a collective); rank 0's result counts.
CaseResult check_threshold_distributed(const CaseFile& file, Communicator& comm) {
  const double top = file.number("top_entropy_quantile");
  auto inputs = threshold_inputs(file, comm.size());
  const double expected = file.read("expected/threshold", torch::kFloat64).item<double>();
  CaseResult result;
  for (const auto& [method, name] : choice_names<EntropyThresholdMethod>()) {
    // the MPI communicator takes host tensors
    const float got = global_entropy_threshold(comm, inputs[comm.rank()].cpu(), top, method).value;
    compare_threshold(result, str("threshold (", name, ", ", comm.size(), " ranks)"), got, expected);
  }
  return result;
}

std::vector<std::string> case_files(const std::string& directory) {
  DIR* dir = opendir(directory.c_str());
  inputCheck(dir != nullptr, "refcheck: cannot open directory ", directory);
  std::vector<std::string> files;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0) files.push_back(directory + "/" + name);
  }
  closedir(dir);
  std::sort(files.begin(), files.end());
  inputCheck(!files.empty(), "refcheck: no case files (*.h5) in ", directory);
  return files;
}

int run(Runtime& runtime, const std::string& directory, torch::Device device) {
  auto comm = make_mpi_communicator(runtime.world());
  const bool root = runtime.is_rank0();
  int passed = 0, failed = 0, distributed_cases = 0;
  for (const auto& path : case_files(directory)) {
    const std::string name = path.substr(path.find_last_of('/') + 1);
    CaseResult result;
    bool ran_here = root;
    try {
      CaseFile file(path, device);
      const std::string kind = file.text("kind");
      const bool distributed = kind == "entropy_threshold" && runtime.size() > 1 &&
                               static_cast<int>(file.number("num_ranks")) == runtime.size();
      if (distributed) {
        ran_here = true;
        ++distributed_cases;
        result = check_threshold_distributed(file, *comm);
      } else if (!root) {
        continue;
      } else if (kind == "loss") {
        result = check_loss(file);
      } else if (kind == "advantages") {
        result = check_advantages(file);
      } else if (kind == "logprob") {
        result = check_logprob(file);
      } else if (kind == "entropy_threshold") {
        result = check_threshold_local(file);
      } else {
        result.failures.push_back(str("unknown kind \"", kind, "\""));
      }
    } catch (const std::exception& error) {
      result.failures.push_back(str("error: ", error.what()));
    }
    if (!ran_here || !root) continue;
    if (result.failures.empty()) {
      ++passed;
    } else {
      ++failed;
      for (const auto& failure : result.failures) std::cout << "FAIL " << name << ": " << failure << "\n";
    }
  }
  if (root && runtime.size() > 1)
    std::cout << distributed_cases << " entropy_threshold cases ran distributed on " << runtime.size() << " ranks\n";
  if (root) std::cout << passed << " passed, " << failed << " failed" << std::endl;
  int outcome = failed > 0 ? 1 : 0;
  MPI_Bcast(&outcome, 1, MPI_INT, 0, runtime.world());
  return outcome;
}

}  // namespace
}  // namespace rayless

int main(int argc, char** argv) {
  rayless::Runtime runtime(&argc, &argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool help = !args.empty() && (args[0] == "--help" || args[0] == "-h");
  std::string device_name = "cpu";
  if (args.size() == 3 && args[0] == "--device") {
    device_name = args[1];
    args.erase(args.begin(), args.begin() + 2);
  }
  if (help || args.size() != 1) {
    if (runtime.is_rank0())
      std::cerr << "usage: rayless-refcheck [--device DEVICE] DIR   (runs every *.h5 reference case in DIR)\n";
    return help ? 0 : rayless::kExitInput;
  }
  torch::Device device = torch::kCPU;
  try {
    device = torch::Device(device_name);
  } catch (const c10::Error&) {
    if (runtime.is_rank0()) rayless::print_error("rayless-refcheck: --device '" + device_name + "' is not a device (cpu, cuda, cuda:1, ...)");
    return rayless::kExitInput;
  }
  if (device.is_cuda() && !torch::cuda::is_available()) {
    if (runtime.is_rank0()) rayless::print_error("rayless-refcheck: --device " + device_name + ": no CUDA device here");
    return rayless::kExitInput;
  }
  try {
    return rayless::run(runtime, args[0], device);
  } catch (const std::exception& error) {
    if (runtime.is_rank0()) rayless::print_error(error.what());
    return rayless::exit_code_for(error);
  }
}
