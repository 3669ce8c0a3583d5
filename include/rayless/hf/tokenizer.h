// Tokenizers: byte-level BPE read from an HF tokenizer.json (GPT-2 / Qwen2 / Llama-3 style), and a
// plain byte tokenizer (256 bytes + specials) for the embedded demo. Chat templates: prompts/chat_template.h.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rayless {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;  // special tokens matched, never split
  // What the tokenizer.json post-processor adds around one sequence (TemplateProcessing's "single",
  // e.g. BOS first), as transformers' tokenizer(text) does with add_special_tokens=True. TRL tokenizes
  // plain-text prompts that way; chat templates write their own BOS.
  virtual std::vector<int64_t> add_special_tokens(std::vector<int64_t> ids) const { return ids; }
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const = 0;
  virtual std::optional<int64_t> token_to_id(const std::string& token) const = 0;  // vocab or added token
  virtual int64_t vocab_size() const = 0;           // largest id + 1
  virtual std::vector<int64_t> eos_ids() const = 0;  // what ends a completion
  virtual int64_t pad_id() const = 0;
  virtual std::string hash() const = 0;             // content hash for provenance
  virtual std::string kind() const = 0;             // "bpe" | "byte"
  virtual std::string to_json() const = 0;          // a tokenizer.json that transformers can load
  // The tokenizer class transformers loads for it and why ("Qwen2Tokenizer (config.json model_type ...)"),
  // and one line saying what that class changes in tokenizer.json ("" when nothing): tokenizer_class.h.
  virtual std::string class_origin() const { return ""; }
  virtual std::string class_change_note() const { return ""; }
};

// path: a tokenizer.json file, "byte", or "" = <model_dir>/tokenizer.json. The pipeline is the one
// transformers' AutoTokenizer builds for the tokenizer's directory (tokenizer_config.json, config.json
// beside it; model/tokenizer_class.h), which may replace parts of tokenizer.json. Corrupt files are
// InputErrors naming the file. eos/pad default to the model directory's generation_config.json /
// config.json ids when present, else to well-known specials (<|im_end|>, <|endoftext|>, <|eos|>).
std::shared_ptr<Tokenizer> load_tokenizer(const std::string& path, const std::filesystem::path& model_dir = {});
std::shared_ptr<Tokenizer> make_byte_tokenizer();
// Parses tokenizer.json text (`where` names it in errors).
std::shared_ptr<Tokenizer> parse_bpe_tokenizer(const std::string& json_text, const std::string& where);

}  // namespace rayless
