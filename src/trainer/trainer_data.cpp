// The run's prompt datasets: opened through their line indexes (rank 0 builds a missing one first, the
// others then find it) and every row checked before training, each rank its share of the lines, the
// ranks agreeing on the first bad line; or the verdict of an earlier start reused when neither the
// files nor anything the check depends on changed (dataset.h, check records).
#include <torch/types.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "rayless/base/error.h"
#include "rayless/base/hash.h"
#include "rayless/comm/communicator.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/prompts/chat_template.h"
#include "rayless/prompts/dataset.h"
#include "rayless/prompts/prompt_builder.h"
#include "rayless/rewards/rewards.h"
#include "rayless/runtime/runtime.h"
#include "rayless/trainer/trainer.h"

namespace fs = std::filesystem;

namespace rayless {
namespace {

torch::Tensor bytes_of(const std::string& text) {
  return torch::from_blob(const_cast<char*>(text.data()), {static_cast<int64_t>(text.size())}, torch::kUInt8).clone();
}
std::string text_of(const torch::Tensor& bytes) {
  const torch::Tensor b = bytes.contiguous();
  return std::string(reinterpret_cast<const char*>(b.data_ptr<uint8_t>()), static_cast<size_t>(b.numel()));
}

// Every rank's check of its lines as one: the first bad line of all with its message, and (with
// skip_invalid) every skipped line in order with the first reason. The same collectives on every rank.
PromptCheck agree(Communicator& comm, const PromptCheck& local, int64_t lines) {
  PromptCheck all;
  const double first = global_min(comm, static_cast<double>(local.first_error_line >= 0 ? local.first_error_line : lines));
  const bool mine = local.first_error_line >= 0 && static_cast<double>(local.first_error_line) == first;
  for (const torch::Tensor& message : comm.allgather_variable(bytes_of(mine ? local.first_error : std::string())))
    all.first_error += text_of(message);
  if (first < static_cast<double>(lines)) all.first_error_line = static_cast<int64_t>(first);
  // the ranks' lines follow each other, so their skipped lines come in order
  for (const torch::Tensor& part : comm.allgather_variable(torch::tensor(local.skipped, torch::kInt64)))
    all.skipped.insert(all.skipped.end(), part.data_ptr<int64_t>(), part.data_ptr<int64_t>() + part.numel());
  for (const torch::Tensor& reason : comm.allgather_variable(bytes_of(local.first_skip_reason)))
    if (all.first_skip_reason.empty()) all.first_skip_reason = text_of(reason);
  all.longest_prompt = static_cast<int64_t>(global_max(comm, static_cast<double>(local.longest_prompt)));
  return all;
}

// The bytes of the files that decide how a prompt is rendered and tokenized besides the config: the
// tokenizer directory's JSON and Jinja files (tokenizer_config.json's template, chat_template.jinja,
// additional_chat_templates/) and a template file named by tokenizer.chat_template.
std::string template_material(const fs::path& tokenizer_dir, const std::string& template_spec) {
  std::string material;
  std::error_code error;
  std::vector<fs::path> files;
  for (const fs::path& dir : {tokenizer_dir, tokenizer_dir / "additional_chat_templates"})
    for (const auto& entry : fs::directory_iterator(dir, error))
      if (entry.is_regular_file(error) && (entry.path().extension() == ".json" || entry.path().extension() == ".jinja"))
        files.push_back(entry.path());
  if (template_spec.size() < 4096 && fs::is_regular_file(template_spec, error)) files.push_back(template_spec);
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    material += file.filename().string() + " " + hex64(fnv1a64(bytes.data(), bytes.size())) + "\n";
  }
  return material;
}

}  // namespace

// What a row's check depends on: the rayless version, every key that shapes a generation (model,
// tokenizer, data, generation and reward settings: config_hash), the tokenizer's content and the
// template files. A record made under another fingerprint is not reused.
std::string Trainer::dataset_check_fingerprint() const {
  return str("rayless ", RAYLESS_VERSION, "\nconfig ", config_hash_, "\ntokenizer ", tokenizer_->hash(), "\n",
             template_material(tokenizer_directory(cfg_.tokenizer.path, cfg_.model.path), cfg_.tokenizer.chat_template));
}

PromptDataset Trainer::open_checked_dataset(const std::string& path, const std::string& key, bool& checked_now,
                                           int64_t& longest_prompt) {
  // every rank, generation ranks too (they draw the prompts): over the whole job, not one role
  const int rank = world_->rank(), world = world_->size();
  // where indexes go when the data's directory cannot be written
  const fs::path fallback = output_dir_ / "data-index";
  PromptDataset dataset;
  std::string rank0_error;
  if (rank == 0) {
    try {
      dataset = PromptDataset::open(path, cfg_.data.prompt_field, cfg_.data.messages_field, key, fallback);
    } catch (const InputError& e) {
      rank0_error = e.what();
    }
  }
  // every rank fails alike on what rank 0 found (a missing file), so the job ends together
  const bool refused = global_max(*world_, rank0_error.empty() ? 0.0 : 1.0) > 0;
  inputCheck(!refused, rank == 0 ? rank0_error : std::string("the prompt dataset was refused (rank 0 says why)"));
  if (rank != 0) dataset = PromptDataset::open(path, cfg_.data.prompt_field, cfg_.data.messages_field, key, fallback);

  const std::string fingerprint = dataset_check_fingerprint();
  const bool reused = global_min(*world_, load_check_record(dataset, fingerprint, longest_prompt) ? 1.0 : 0.0) > 0;
  checked_now = !reused;
  if (reused) {
    inputCheck(dataset.size() > 0, path, ": no usable prompt (", dataset.skipped_lines(), " lines skipped; first: ",
               dataset.first_skip_reason(), ")");
    return dataset;
  }
  const int64_t lines = dataset.lines();
  const PromptCheck local =
      check_prompt_rows(dataset, lines * rank / world, lines * (rank + 1) / world, prompt_format_, *tokenizer_,
                        cfg_.data.max_prompt_length, cfg_.data.truncation, cfg_.data.skip_invalid,
                        [&](const nlohmann::json& row) { return rewards_->check_row(row); });
  longest_prompt = apply_prompt_check(dataset, agree(*world_, local, lines), cfg_.data.skip_invalid);  // every rank alike
  if (rank == 0) save_check_record(dataset, fingerprint, longest_prompt);
  return dataset;
}

}  // namespace rayless
