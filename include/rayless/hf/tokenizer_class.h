// The tokenizer class transformers 5.24's AutoTokenizer loads for a directory, and the pipeline that
// class builds from the directory's tokenizer.json. TRL tokenizes through AutoTokenizer, so these are
// the ids a TRL run feeds the model. Some classes (Qwen2Tokenizer, GPT2Tokenizer) rebuild the
// pre-tokenizer, normalizer, decoder and BPE options from their own definition and keep only the
// vocabulary, merges, post-processor and added tokens of tokenizer.json; TokenizersBackend (what
// PreTrainedTokenizerFast names) keeps tokenizer.json as it is. Every class adds the special tokens
// tokenizer_config.json names (and its own defaults) when tokenizer.json lacks them.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace rayless {

struct TokenizerPipeline {
  std::string class_name;            // "TokenizersBackend", "Qwen2Tokenizer", "GPT2Tokenizer"
  std::string reason;                // why transformers loads that class for the directory
  std::string tokenizer_json;        // tokenizer.json as the class builds it (the file's text when they agree)
  std::vector<std::string> changes;  // what the class changes in tokenizer.json; empty when they agree

  // "Qwen2Tokenizer (config.json model_type \"qwen2\" ...)"
  std::string origin() const;
  // One line for logs when the class changes tokenizer.json ("" when they agree): which pipeline is
  // used, why, and what differs.
  std::string change_note() const;
};

// tokenizer_json_text: the text of tokenizer.json (`where` names it in errors); dir: the directory whose
// tokenizer_config.json and config.json AutoTokenizer.from_pretrained(dir) would read (empty: the file
// alone, loaded as TokenizersBackend). Classes rayless cannot build (SentencePiece-style LlamaTokenizer)
// are InputErrors naming the file and the class.
TokenizerPipeline resolve_tokenizer_pipeline(const std::string& tokenizer_json_text, const std::string& where,
                                             const std::filesystem::path& dir);

}  // namespace rayless
