// A reward model as a reward function: a Hugging Face Qwen2ForSequenceClassification /
// LlamaForSequenceClassification directory (config.json with one label, safetensors with the decoder
// under model.* and the head as score.weight [1, hidden]). Scores as TRL's GRPOTrainer scores a reward
// model: for a plain-text row, text = prompt + completion; for a conversational row (messages), the
// row's messages plus {"role": "assistant", "content": completion} rendered by the reward model's own
// chat template (no generation prompt, the run's chat_template_kwargs); the text is tokenized by the
// reward model's own tokenizer without special tokens, right-padded in batches of batch_size; the score is the head applied to the final hidden state
// of the last token that is not the pad token (as transformers picks it), in inference mode.
#pragma once
#include <torch/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "rayless/model/model.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/prompts/chat_template.h"
#include "rayless/rewards/rewards.h"

namespace rayless {

class RewardModel : public RewardFunction {
 public:
  // InputError naming the file when the directory is not a single-score classifier.
  RewardModel(std::string name, const std::filesystem::path& dir, const std::string& tokenizer_path, int64_t batch_size,
              torch::Device device = torch::kCPU, torch::Dtype dtype = torch::kFloat32);
  // How conversational rows are rendered: the row fields that may hold the messages (a list under
  // data.prompt_field, TRL's conversational format, else data.messages_field, as the dataset reads
  // them), the reward model's chat template spec (its tokenizer.chat_template, default auto) and the kwargs.
  void set_conversation_format(std::string prompt_field, std::string messages_field, const std::string& chat_template,
                               nlohmann::ordered_json kwargs);
  // A conversational row needs a chat template of the reward model.
  std::string check_row(const nlohmann::json& row) const override;
  std::string name() const override { return name_; }
  std::vector<double> score(const std::vector<std::string>& prompts, const std::vector<std::string>& completions,
                            const std::vector<int64_t>& completion_token_counts,
                            const std::vector<nlohmann::json>& rows) override;
  // Scores of whole texts (what score() feeds it), batch by batch.
  std::vector<double> score_texts(const std::vector<std::string>& texts);

 private:
  std::string name_;
  int64_t batch_size_;
  int64_t pad_id_;
  CausalLM backbone_{nullptr};  // the decoder; its LM head is never used
  torch::Tensor score_weight_;  // [1, hidden]
  std::shared_ptr<Tokenizer> tokenizer_;
  std::filesystem::path tokenizer_dir_;          // tokenizer_config.json / chat_template.jinja
  std::string prompt_field_ = "prompt", messages_field_ = "messages";
  ChatTemplate chat_template_;                   // the reward model's own ("auto" by default)
  nlohmann::ordered_json kwargs_ = nlohmann::ordered_json::object();
  const nlohmann::json* messages_of(const nlohmann::json& row) const;  // nullptr: a plain-text row
  std::string conversation_text(const nlohmann::json& row, const std::string& completion) const;
};

}  // namespace rayless
