// rayless tokenize: the prompt text and token ids the trainer would feed the model for a plain-text
// prompt (--text) or a conversation (--messages), through the same chat template and tokenizer code.
// With --json, one object {"text": ..., "ids": [...], "tokenizer_class": ...}, comparable with transformers' apply_chat_template.
#include <iostream>
#include <limits>

#include "cli/options.h"
#include "rayless/base/config.h"
#include "rayless/base/files.h"
#include "rayless/base/log.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/prompts/dataset.h"
#include "rayless/prompts/prompt_builder.h"

namespace rayless::cli {

namespace {

nlohmann::ordered_json read_json_arg(const std::string& text, const std::string& what) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str("tokenize: ", what, ": invalid JSON (", e.what(), ")"));
  }
}

}  // namespace

int tokenize(const Args& args) {
  po::options_description options("rayless tokenize");
  std::string model_dir, text, messages_file, kwargs_text;
  TokenizerConfig tokenizer_config;
  options.add_options()
      ("model", po::value(&model_dir)->required(), "model (or tokenizer) directory: tokenizer.json, tokenizer_config.json")
      ("tokenizer", po::value(&tokenizer_config.path)->default_value(""), "tokenizer.json, or \"byte\" (default: the model directory's)")
      ("text", po::value(&text), "a plain-text prompt")
      ("messages", po::value(&messages_file), "a JSON file: an array of {role, content} messages")
      ("chat-template", po::value(&tokenizer_config.chat_template)->default_value("auto"),
       "auto | none | chatml | a template name of the model | a .jinja file | an inline template (tokenizer.chat_template)")
      ("kwargs", po::value(&kwargs_text)->default_value("{}"), "JSON object of template variables (tokenizer.chat_template_kwargs)")
      ("system-prompt", po::value(&tokenizer_config.system_prompt)->default_value(""), "tokenizer.system_prompt (wrapped text prompts)")
      ("no-generation-prompt", "render a conversation without the generation prompt (add_generation_prompt = false)")
      ("json", "print one JSON object {\"text\", \"ids\"}");
  po::variables_map vm;
  if (!parse_options(args, "rayless tokenize --model DIR (--text TEXT | --messages FILE.json) [--chat-template SPEC] [--json]",
                     options, vm))
    return 0;
  inputCheck(vm.count("text") + vm.count("messages") == 1, "tokenize: give exactly one of --text and --messages");
  const nlohmann::ordered_json kwargs = read_json_arg(kwargs_text, "--kwargs");
  inputCheck(kwargs.is_object(), "tokenize: --kwargs must be a JSON object");
  tokenizer_config.chat_template_kwargs = kwargs.dump();

  auto tokenizer = load_tokenizer(tokenizer_config.path, model_dir);
  // a tokenizer.json that its class (as transformers loads it) overrides: say so, as the trainer does
  if (const std::string note = tokenizer->class_change_note(); !note.empty()) log_warn(note);
  const PromptFormat format = prompt_format_from_config(tokenizer_config, model_dir);
  // the trainer's own path (build_prompt) for a dataset row holding this prompt or these messages
  PromptRow row;
  std::string where = "--text";
  if (vm.count("text")) {
    row.prompt = text;
  } else {
    where = messages_file;
    row.messages = read_json_arg(read_text_file(messages_file), messages_file);
    inputCheck(row.messages.is_array() && !row.messages.empty(), messages_file, ": expected a non-empty JSON array of messages");
  }
  PromptTokens prompt;
  if (vm.count("no-generation-prompt") && row.is_chat()) {
    try {
      prompt.text = format.chat_template.render(row.messages, false, format.kwargs);
    } catch (const InputError& e) {
      throw InputError(str(where, ": cannot render the messages with the chat template: ", e.what()));
    }
    prompt.ids = tokenizer->encode(prompt.text);
  } else {
    prompt = build_prompt(row, format, *tokenizer, std::numeric_limits<int64_t>::max(), PromptTruncation::Error, where);
  }
  if (vm.count("json")) {
    nlohmann::ordered_json out{{"text", prompt.text}, {"ids", prompt.ids}};
    if (!tokenizer->class_origin().empty()) out["tokenizer_class"] = tokenizer->class_origin();
    std::cout << out.dump() << std::endl;
  } else {
    std::cout << prompt.text << "\n" << nlohmann::json(prompt.ids).dump() << std::endl;
  }
  return 0;
}

}  // namespace rayless::cli
