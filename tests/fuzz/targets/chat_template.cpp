// libFuzzer target: a chat template (the Jinja engine: lexer, parser, renderer), parsed and rendered
// with a two-turn conversation as transformers' apply_chat_template passes it.
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "rayless/chat/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <b>there</b>"},
                 {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": [{"type": "text", "text": "2+2?"}]}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "tools": null})");
  const std::string text(reinterpret_cast<const char*>(data), size);
  rayless::jinja::RenderOptions options;
  options.now = 1700000000;
  return rayless::fuzz::parse_or_refuse([&] {
    const rayless::jinja::Template chat_template(text, "chat_template");
    chat_template.render(context, options);
  });
}
