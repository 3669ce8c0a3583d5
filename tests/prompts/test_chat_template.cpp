// Which chat template a run uses and what the template sees (transformers' rules), and how a dataset
// row becomes prompt ids (TRL's rules). Text and ids against transformers itself: tests.cmake.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/prompts/chat_template.h"
#include "rayless/prompts/dataset.h"
#include "rayless/prompts/prompt_builder.h"

using namespace rayless;
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(RAYLESS_BINARY_DIR) / "test-scratch" / "chat-template" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << text;
}

const ojson kUserHi = ojson::parse(R"([{"role": "user", "content": "hi"}])");

const fs::path kChatModels = fs::path(RAYLESS_TEST_DATA) / "chat-models";

}  // namespace

TEST_CASE("chat template: auto takes the model's, files before tokenizer_config.json, none without one") {
  const fs::path dir = fresh_dir("auto");
  CHECK(ChatTemplate::resolve("auto", dir).is_none());  // no tokenizer_config.json at all
  write(dir / "tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": "C:{{ bos_token }}{{ messages[0].content }}"})");
  ChatTemplate from_config = ChatTemplate::resolve("auto", dir);
  CHECK_FALSE(from_config.explicitly_chosen());
  CHECK(from_config.source() == (dir / "tokenizer_config.json").string());
  CHECK(from_config.render(kUserHi, true) == "C:<s>hi");
  write(dir / "chat_template.jinja", "F:{{ messages[0].content }}");  // transformers: the file wins
  CHECK(ChatTemplate::resolve("auto", dir).render(kUserHi, true) == "F:hi");
  CHECK(ChatTemplate::resolve("default", dir).explicitly_chosen());
  CHECK(ChatTemplate::resolve("none", dir).is_none());
}

TEST_CASE("chat template: named templates, files, inline, chatml, legacy {prompt}") {
  const fs::path dir = fresh_dir("named");
  write(dir / "tokenizer_config.json",
        R"({"chat_template": [{"name": "default", "template": "D{{ messages | length }}"},
                              {"name": "tool_use", "template": "T{{ tools | length }}"}]})");
  CHECK(ChatTemplate::resolve("auto", dir).render(kUserHi, true) == "D1");
  CHECK(ChatTemplate::resolve("tool_use", dir).render(kUserHi, true, ojson{{"tools", {1, 2}}}) == "T2");
  write(dir / "t.jinja", "file {{ add_generation_prompt }}");
  CHECK(ChatTemplate::resolve((dir / "t.jinja").string(), dir).render(kUserHi, false) == "file False");
  CHECK(ChatTemplate::resolve("{{ messages[0]['role'] }}!", dir).render(kUserHi, true) == "user!");
  CHECK(ChatTemplate::resolve("chatml", dir).render(single_turn_messages("Be brief.", "Hi"), true) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(ChatTemplate::resolve("Q: {prompt}\nA:", dir).render(single_turn_messages("", "2+2?"), true) == "Q: 2+2?\nA:");
  CHECK_THROWS_WITH(ChatTemplate::resolve("nonexistent_name", dir), Catch::Contains("tokenizer.chat_template = \"nonexistent_name\""));

  const fs::path no_default = fresh_dir("no-default");
  write(no_default / "tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  CHECK_THROWS_WITH(ChatTemplate::resolve("auto", no_default), Catch::Contains("none named \"default\""));
}

TEST_CASE("chat template: what the template sees (null keys dropped, tools none, kwargs over special tokens)") {
  const fs::path dir = fresh_dir("context");
  write(dir / "tokenizer_config.json",
        R"({"bos_token": {"content": "<B>", "__type": "AddedToken"}, "eos_token": "<E>", "pad_token": null})");
  const ChatTemplate t = ChatTemplate::resolve(
      "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ messages[0].name is defined }}|"
      "{{ tools is none }}|{{ documents is none }}|{{ flag | default('unset') }}",
      dir);
  const ojson with_null = ojson::parse(R"([{"role": "user", "content": "x", "name": null}])");
  CHECK(t.render(with_null, true) == "<B>|<E>|False|False|True|True|unset");
  CHECK(t.render(with_null, true, ojson{{"flag", false}, {"bos_token", "K"}}) == "K|<E>|False|False|True|True|False");
}

TEST_CASE("chat template: errors name the template and its line") {
  const fs::path dir = fresh_dir("errors");
  CHECK_THROWS_WITH(ChatTemplate::resolve("a\n{% if %}", dir), Catch::Contains("tokenizer.chat_template (inline):2:"));
  const ChatTemplate raising = ChatTemplate::resolve("ok\n\n{{ raise_exception('no system role') }}", dir);
  CHECK_THROWS_WITH(raising.render(kUserHi, true), Catch::Contains("(inline):3:") && Catch::Contains("no system role"));
  CHECK_THROWS_WITH(ChatTemplate::resolve("none", dir).render(kUserHi, true),
                    Catch::Contains("messages need a chat template") && Catch::Contains("chat_template = none"));
  CHECK_THROWS_WITH(ChatTemplate::resolve("auto", dir).render(kUserHi, true), Catch::Contains("auto and the model has no chat_template"));
}

TEST_CASE("prompt builder: TRL's ids (plain text through the post-processor, messages without a second BOS)") {
  const fs::path model = kChatModels / "header-jinja-file";  // BOS in the post-processor and in the template
  auto tokenizer = load_tokenizer("", model);
  const int64_t bos = *tokenizer->token_to_id("<|bos|>");
  TokenizerConfig config;  // chat_template = auto
  const PromptFormat format = prompt_format_from_config(config, model);
  PromptRow text_row;
  text_row.prompt = "Hello";
  const PromptTokens plain = build_prompt(text_row, format, *tokenizer, 1000, PromptTruncation::Error, "t:1");
  CHECK(plain.text == "Hello");
  REQUIRE(plain.ids.size() > 1);
  CHECK(plain.ids[0] == bos);
  CHECK(plain.ids[1] != bos);
  PromptRow chat_row;
  chat_row.messages = kUserHi;
  const PromptTokens chat = build_prompt(chat_row, format, *tokenizer, 1000, PromptTruncation::Error, "t:2");
  CHECK(chat.text.rfind("<|bos|><|start|>system", 0) == 0);
  CHECK(chat.ids[0] == bos);
  CHECK(chat.ids[1] != bos);  // the template's BOS only
  // an explicitly named template wraps plain text as a user message, without the post-processor's BOS
  config.chat_template = "default";
  const PromptTokens wrapped = build_prompt(text_row, prompt_format_from_config(config, model), *tokenizer, 1000,
                                            PromptTruncation::Error, "t:1");
  CHECK(wrapped.text.find("<|start|>user<|end|>\n\nHello<|eot|>") != std::string::npos);
  CHECK(wrapped.ids[1] != bos);
}

TEST_CASE("prompt builder: a row the template refuses names the dataset line, kwargs reach the template") {
  const fs::path dir = fresh_dir("dataset");
  write(dir / "data.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n"
                            "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}]}\n");
  PromptDataset dataset = load_prompt_dataset((dir / "data.jsonl").string());
  TokenizerConfig config;
  config.path = "byte";
  config.chat_template = "{% if messages[0].role == 'system' %}{{ raise_exception('system unsupported') }}{% endif %}"
                         "{{ messages[0].content }}{% if think is false %}/no_think{% endif %}";
  config.chat_template_kwargs = R"({"think": false})";
  const PromptFormat format = prompt_format_from_config(config, dir);
  auto tokenizer = make_byte_tokenizer();
  CHECK(build_prompt(dataset.row(0), format, *tokenizer, 100, PromptTruncation::Error, "x").text == "a/no_think");
  auto accept = [](const nlohmann::json&) { return std::string(); };
  CHECK_THROWS_WITH(check_prompt_dataset(dataset, format, *tokenizer, 100, PromptTruncation::Error, false, accept),
                    Catch::Contains("data.jsonl:2: cannot render the messages") && Catch::Contains("system unsupported"));
}

TEST_CASE("config: chat_template defaults to auto, chat_template_kwargs is a table that round-trips") {
  Config c;
  CHECK(c.tokenizer.chat_template == "auto");
  apply_override(c, "tokenizer.chat_template_kwargs={ enable_thinking = false, style = \"short\", n = 2 }");
  const ojson kwargs = ojson::parse(c.tokenizer.chat_template_kwargs);
  CHECK(kwargs["enable_thinking"] == false);
  CHECK(kwargs["style"] == "short");
  CHECK(kwargs["n"] == 2);
  CHECK_THROWS_WITH(apply_override(c, "tokenizer.chat_template_kwargs=3"), Catch::Contains("expected a table"));
}
