// The chat side of tool calling against TRL 1.16 and transformers (tests/data/agent/golden.json, made by
// tools/make_agent_golden.py): completions parsed as TRL's parse_response parses them, prompts with
// tools rendered as apply_chat_template renders them, tool-result tokens as _get_tool_suffix_ids cuts
// them, and the templates TRL refuses refused at start.
#include <catch2/catch.hpp>

#include <fstream>

#include "rayless/agent/response_parser.h"
#include "rayless/agent/tool_chat.h"
#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/prompts/prompt_builder.h"

using namespace rayless;
using Json = nlohmann::ordered_json;

namespace {

const std::string kAgentData = std::string(RAYLESS_TEST_DATA) + "/agent";

Json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return Json::parse(in);
}

const Json& golden() {
  static const Json g = read_json(kAgentData + "/golden.json");
  return g;
}

const Json& schemas() {
  static const Json s = read_json(kAgentData + "/schemas.json");
  return s;
}

std::vector<int64_t> ids_of(const Json& j) { return j.get<std::vector<int64_t>>(); }

// a template of tests/data/agent/templates with the special tokens of chat/ (eos <|im_end|>) or chat-eos/ (<|eos|>)
PromptFormat format_for(const std::string& template_name, const std::string& eos = "<|im_end|>") {
  TokenizerConfig config;
  config.path = kAgentData + (eos == "<|im_end|>" ? "/chat" : "/chat-eos") + "/tokenizer.json";
  config.chat_template = kAgentData + "/templates/" + template_name + ".jinja";
  return prompt_format_from_config(config, "");
}

std::shared_ptr<Tokenizer> byte_tokenizer() {
  static const auto tokenizer = load_tokenizer(kAgentData + "/chat/tokenizer.json", kAgentData + "/model");
  return tokenizer;
}

}  // namespace

TEST_CASE("parse: completions read back as TRL's parse_response reads them (Qwen and Llama 3 formats)") {
  const auto tokenizer = byte_tokenizer();
  const ResponseParser qwen(ToolCallFormat::Qwen), llama(ToolCallFormat::Llama3);
  size_t checked = 0, with_calls = 0, fallbacks = 0;
  for (const Json& c : golden()["parses"]) {
    const ResponseParser& parser = c["format"] == "qwen" ? qwen : llama;
    const Json got = parse_assistant_turn(parser, *tokenizer, ids_of(c["ids"]), ids_of(c["prefix_ids"]),
                                          c["eos_token"].get<std::string>(), schemas()["calculator"]);
    INFO(c["format"] << " " << c["eos_token"] << ": " << c["text"]);
    // key order aside (the store keeps ours), the same message
    CHECK(nlohmann::json::parse(got.dump()) == nlohmann::json::parse(c["parsed"].dump()));
    with_calls += c["parsed"].contains("tool_calls");
    fallbacks += !c["parsed"].contains("tool_calls") && c["text"].get<std::string>().find("<tool_call>") != std::string::npos;
    ++checked;
  }
  CHECK(checked == 48);
  CHECK(with_calls >= 10);  // the cases reach every branch: calls, typed arguments, fallbacks
  CHECK(fallbacks >= 4);
}

TEST_CASE("parse: string arguments are typed by the tool's schema, others kept") {
  const ResponseParser qwen(ToolCallFormat::Qwen);
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
    "properties": {"i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"}, "o": {"type": "object"},
    "u": {"type": ["null", "integer"]}, "s": {"type": "string"}, "opt": {"type": "integer", "nullable": true}}}}}])");
  const Json m = qwen.parse("", R"(<tool_call>{"name": "f", "arguments": {"i": " 1_000 ", "n": "2", "b": "True",
    "o": "{\"k\": 1}", "u": "None", "s": "7", "opt": "None", "extra": "9"}}</tool_call>)", tools);
  const Json& args = m["tool_calls"][0]["function"]["arguments"];
  CHECK(args["i"] == 1000);
  CHECK(args["n"] == 2);
  CHECK(args["n"].is_number_integer());
  CHECK(args["b"] == true);
  CHECK(args["o"] == Json{{"k", 1}});
  CHECK(args["u"].is_null());
  CHECK(args["s"] == "7");
  CHECK(args["opt"].is_null());
  CHECK(args["extra"] == "9");
}

TEST_CASE("render: prompts with tools are what transformers' apply_chat_template(tools=...) makes") {
  const auto tokenizer = byte_tokenizer();
  size_t checked = 0;
  for (const Json& p : golden()["prompts"]) {
    const PromptFormat format = format_for(p["template"].get<std::string>());
    Json kwargs = Json::object();
    if (p["tools"] == "calculator") kwargs["tools"] = schemas()["calculator"];
    const std::string text = format.chat_template.render(p["messages"], true, kwargs);
    INFO(p["template"] << " tools " << p["tools"]);
    CHECK(text == p["text"].get<std::string>());
    CHECK(tokenizer->encode(text) == ids_of(p["ids"]));
    ++checked;
  }
  CHECK(checked == 16);
}

TEST_CASE("suffix: tool results enter as the tokens TRL's _get_tool_suffix_ids cuts") {
  size_t checked = 0;
  for (const Json& s : golden()["suffixes"]) {
    const std::string eos = s["eos_token"].get<std::string>();
    const PromptFormat format = format_for(s["template"].get<std::string>(), eos);
    const auto tokenizer = load_tokenizer(kAgentData + (eos == "<|im_end|>" ? "/chat" : "/chat-eos") + "/tokenizer.json",
                                          kAgentData + "/model");
    const ToolChat chat(format, tokenizer, "auto");
    INFO(s["template"] << " eos " << eos << " " << s["tool_messages"].dump());
    CHECK(chat.suffix_ids(s["tool_messages"]) == ids_of(s["ids"]));
    ++checked;
  }
  CHECK(checked == 12);
}

TEST_CASE("templates: the ones TRL refuses are refused at start, each with its reason") {
  const auto tokenizer = byte_tokenizer();
  const Json& checks = golden()["checks"];
  // usable by both: the format read from how the template writes a call
  CHECK(ToolChat(format_for("qwen2_5"), tokenizer, "auto").format() == ToolCallFormat::Qwen);
  CHECK(ToolChat(format_for("qwen3_instruct_2507"), tokenizer, "auto").format() == ToolCallFormat::Qwen);
  CHECK(ToolChat(format_for("qwen3_training"), tokenizer, "auto").format() == ToolCallFormat::Qwen);
  CHECK(ToolChat(format_for("llama3_1"), tokenizer, "auto").format() == ToolCallFormat::Llama3);
  CHECK(ToolChat(format_for("llama3_2"), tokenizer, "auto").format() == ToolCallFormat::Llama3);
  for (const char* name : {"qwen2_5", "qwen3_instruct_2507", "qwen3_training", "llama3_1", "llama3_2"}) {
    CHECK(checks[name]["supports_tool_calling"] == true);
    CHECK(checks[name]["prefix_preserving"] == true);
  }
  // no tool calls in the template (TRL: supports_tool_calling is False)
  CHECK(checks["llama3"]["supports_tool_calling"] == false);
  CHECK_THROWS_WITH(ToolChat(format_for("llama3"), tokenizer, "auto"),
                    Catch::Contains("llama3.jinja") && Catch::Contains("does not support tool calling"));
  // Qwen3's template drops earlier thinking: not prefix-preserving (TRL swaps in qwen3_training.jinja)
  CHECK(checks["qwen3"]["prefix_preserving"] == false);
  CHECK_THROWS_WITH(ToolChat(format_for("qwen3"), tokenizer, "auto"),
                    Catch::Contains("qwen3.jinja") && Catch::Contains("not prefix-preserving") &&
                        Catch::Contains("_training.jinja"));
  // Qwen3.5's XML calls: TRL parses them, rayless does not (yet) and says so
  CHECK(checks["qwen3_5_nothink"]["supports_tool_calling"] == true);
  CHECK_THROWS_WITH(ToolChat(format_for("qwen3_5_nothink"), tokenizer, "auto"), Catch::Contains("<function=...> XML"));
  // a template without tool calls at all, and none at all
  TokenizerConfig plain;
  plain.path = kAgentData + "/chat/tokenizer.json";
  plain.chat_template = "chatml";
  CHECK_THROWS_WITH(ToolChat(prompt_format_from_config(plain, ""), tokenizer, "auto"),
                    Catch::Contains("chatml") && Catch::Contains("does not support tool calling"));
  plain.chat_template = "none";
  CHECK_THROWS_AS(ToolChat(prompt_format_from_config(plain, ""), tokenizer, "auto"), InputError);
  // a format named in the config is taken as named (the template still has to show tool calls)
  CHECK(ToolChat(format_for("qwen2_5"), tokenizer, "llama3").format() == ToolCallFormat::Llama3);
}
