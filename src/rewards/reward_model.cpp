#include "rayless/rewards/reward_model.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "rayless/base/error.h"
#include "rayless/hf/safetensors.h"

namespace fs = std::filesystem;

namespace rayless {

RewardModel::RewardModel(std::string name, const fs::path& dir, const std::string& tokenizer_path, int64_t batch_size,
                         torch::Device device, torch::Dtype dtype)
    : name_(std::move(name)), batch_size_(batch_size) {
  const std::string where = str("[reward.models.", name_, "] ", dir.string());
  const fs::path config_path = dir / "config.json";
  std::ifstream in(config_path);
  inputCheck(in.good(), where, ": no config.json");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(config_path.string(), ": not valid JSON (", e.what(), ")"));
  }
  // transformers writes the label count as id2label (num_labels is derived from it)
  inputCheck(json.contains("id2label") || json.contains("num_labels"), config_path.string(),
             ": no id2label or num_labels: not a sequence-classification model (a reward model is a "
             "*ForSequenceClassification directory with num_labels = 1)");
  const int64_t labels = json.contains("id2label") && json["id2label"].is_object() ? static_cast<int64_t>(json["id2label"].size())
                         : json.value("num_labels", 2);
  inputCheck(labels == 1, config_path.string(), ": a reward model needs a single score (num_labels = 1), this one has ",
             labels, " labels");
  ModelArchConfig arch = ModelArchConfig::from_json(json, config_path.string());
  arch.tie_word_embeddings = true;  // no LM head: the classifier has score.weight instead
  std::map<std::string, torch::Tensor> tensors = load_safetensors_directory(dir);
  auto head = tensors.find("score.weight");
  inputCheck(head != tensors.end(), where, ": no score.weight (not a *ForSequenceClassification checkpoint)");
  inputCheck(head->second.dim() == 2 && head->second.size(0) == 1 && head->second.size(1) == arch.hidden_size, where,
             ": score.weight has shape ", head->second.sizes(), ", a single score needs [1, ", arch.hidden_size, "]");
  score_weight_ = head->second.to(device, dtype);
  tensors.erase(head);
  backbone_ = CausalLM(arch);
  backbone_->load_state(tensors, where);
  backbone_->to(device, dtype);
  backbone_->eval();
  tokenizer_ = load_tokenizer(tokenizer_path, dir);
  pad_id_ = arch.pad_token_id.value_or(tokenizer_->pad_id());
  tokenizer_dir_ = tokenizer_directory(tokenizer_path, dir);
  chat_template_ = ChatTemplate::resolve("auto", tokenizer_dir_);
}

void RewardModel::set_conversation_format(std::string prompt_field, std::string messages_field,
                                          const std::string& chat_template, nlohmann::ordered_json kwargs) {
  prompt_field_ = std::move(prompt_field);
  messages_field_ = std::move(messages_field);
  chat_template_ = ChatTemplate::resolve(chat_template, tokenizer_dir_);
  kwargs_ = std::move(kwargs);
}

const nlohmann::json* RewardModel::messages_of(const nlohmann::json& row) const {
  if (!row.is_object()) return nullptr;
  if (row.contains(prompt_field_)) return row[prompt_field_].is_array() ? &row[prompt_field_] : nullptr;
  return row.contains(messages_field_) && row[messages_field_].is_array() ? &row[messages_field_] : nullptr;
}

std::string RewardModel::check_row(const nlohmann::json& row) const {
  if (!messages_of(row) || !chat_template_.is_none()) return "";
  return str("reward model ", name_, " scores conversations through its own chat template, and ",
             tokenizer_dir_.string(), " has none (set [reward.models.", name_, "] chat_template)");
}

// TRL: apply_chat_template({"messages": prompt + [assistant completion]}, reward tokenizer)["text"]
std::string RewardModel::conversation_text(const nlohmann::json& row, const std::string& completion) const {
  nlohmann::ordered_json messages(*messages_of(row));
  messages.push_back({{"role", "assistant"}, {"content", completion}});
  try {
    return chat_template_.render(messages, false, kwargs_);
  } catch (const InputError& e) {
    throw InputError(str("reward model ", name_, ": ", e.what()));
  }
}

std::vector<double> RewardModel::score(const std::vector<std::string>& prompts, const std::vector<std::string>& completions,
                                       const std::vector<int64_t>&, const std::vector<nlohmann::json>& rows) {
  std::vector<std::string> texts;
  texts.reserve(completions.size());
  for (size_t i = 0; i < completions.size(); ++i)
    texts.push_back(i < rows.size() && messages_of(rows[i]) ? conversation_text(rows[i], completions[i])
                                                               : prompts[i] + completions[i]);
  return score_texts(texts);
}

std::vector<double> RewardModel::score_texts(const std::vector<std::string>& texts) {
  torch::InferenceMode inference;
  const torch::Device device = backbone_->device();
  std::vector<double> out;
  out.reserve(texts.size());
  for (size_t begin = 0; begin < texts.size(); begin += static_cast<size_t>(batch_size_)) {
    const size_t end = std::min(texts.size(), begin + static_cast<size_t>(batch_size_));
    std::vector<std::vector<int64_t>> ids;
    int64_t width = 1;
    for (size_t i = begin; i < end; ++i) {
      ids.push_back(tokenizer_->encode(texts[i]));
      width = std::max<int64_t>(width, static_cast<int64_t>(ids.back().size()));
    }
    const int64_t rows = static_cast<int64_t>(ids.size());
    // right padding, as TRL asks the reward tokenizer for
    torch::Tensor input = torch::full({rows, width}, pad_id_, torch::kInt64);
    torch::Tensor mask = torch::zeros({rows, width}, torch::kInt64);
    for (int64_t r = 0; r < rows; ++r) {
      const auto& row = ids[static_cast<size_t>(r)];
      if (row.empty()) continue;
      input[r].slice(0, 0, static_cast<int64_t>(row.size())).copy_(torch::tensor(row, torch::kInt64));
      mask[r].slice(0, 0, static_cast<int64_t>(row.size())).fill_(1);
    }
    // transformers' choice of the scored position: the rightmost token that is not the pad token
    // (position 0 when every token is the pad token)
    const torch::Tensor positions = torch::arange(width, torch::kInt64).unsqueeze(0);
    torch::Tensor last = (positions * (input != pad_id_).to(torch::kInt64)).argmax(1);
    const torch::Tensor hidden = backbone_->forward_hidden(input.to(device), mask.to(device));  // [B, T, H]
    const torch::Tensor picked = hidden.index({torch::arange(rows, torch::kInt64).to(device), last.to(device)});
    const torch::Tensor scores = torch::matmul(picked, score_weight_.t()).select(1, 0).to(torch::kFloat64).cpu();
    for (int64_t r = 0; r < rows; ++r) out.push_back(scores[r].item<double>());
  }
  return out;
}

}  // namespace rayless
