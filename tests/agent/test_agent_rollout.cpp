// TRL 1.16's tool-call loop with real tool and environment workers (tools/agent_workers/) and scripted
// model turns: results run, rendered by the chat template, masked out; budgets, iteration limits,
// failing tools, async ordering and a multi-turn environment.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>

#include "rayless/agent/agent_rollout.h"
#include "rayless/agent/tool_chat.h"
#include "rayless/agent/tool_workers.h"
#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/prompts/prompt_builder.h"

using namespace rayless;
using Json = nlohmann::ordered_json;

namespace {

const std::string kModel = std::string(RAYLESS_TEST_DATA) + "/agent/model";
const std::string kWorkers = std::string(RAYLESS_SOURCE_DIR) + "/tools/agent_workers";
const std::string kRunner = "/usr/bin/python3 " + kWorkers + "/rayless_agent.py";

struct Setup {
  std::shared_ptr<Tokenizer> tokenizer = load_tokenizer("", kModel);
  PromptFormat format = [] {
    TokenizerConfig config;  // the model's own template: Qwen2.5's
    return prompt_format_from_config(config, kModel);
  }();
  ToolChat chat{format, tokenizer, "auto"};
  std::unique_ptr<ToolWorkers> workers;

  explicit Setup(bool environment = false, double timeout_s = 20.0) {
    Config config;
    if (environment) {
      config.environment.command = kRunner + " environment " + kWorkers + "/guess_number.py GuessNumber";
      config.environment.timeout_s = timeout_s;
    } else {
      config.tools["calculator"] = {kRunner + " tools " + kWorkers + "/calculator.py", timeout_s};
      config.tools["misc"] = {kRunner + " tools " + std::string(RAYLESS_TEST_DATA) + "/agent/test_tools.py", timeout_s};
    }
    workers = std::make_unique<ToolWorkers>(config, 0);
  }
  std::vector<int64_t> ids(const std::string& text) const { return tokenizer->encode(text); }
  std::string text(const std::vector<int64_t>& ids) const { return tokenizer->decode(ids, false); }
  std::vector<int64_t> prompt(const std::string& question) const {
    Json kwargs{{"tools", workers->schemas()}};
    return ids(format.chat_template.render(Json::array({Json{{"role", "user"}, {"content", question}}}), true, kwargs));
  }
};

// Scripted model: row i's turns, in order; checks each continuation sees its whole conversation.
struct Script {
  const Setup& setup;
  std::vector<std::vector<std::string>> turns;
  std::vector<std::vector<int64_t>> prompts;
  std::vector<size_t> next;
  std::vector<int64_t> budgets_asked;

  TurnOutput first() {
    next.assign(turns.size(), 1);
    TurnOutput out;
    for (const auto& t : turns) out.ids.push_back(setup.ids(t.front()));
    return out;
  }
  GenerateTurn generator(const std::vector<AgentRollout>* seen = nullptr) {
    return [this](const std::vector<std::vector<int64_t>>& conversations, const std::vector<size_t>& rows, int64_t max_new) {
      budgets_asked.push_back(max_new);
      TurnOutput out;
      for (size_t k = 0; k < rows.size(); ++k) {
        const auto& p = prompts[rows[k]];
        REQUIRE(conversations[k].size() > p.size());
        CHECK(std::equal(p.begin(), p.end(), conversations[k].begin()));  // the prompt, then the completion so far
        REQUIRE(next[rows[k]] < turns[rows[k]].size());
        auto ids = setup.ids(turns[rows[k]][next[rows[k]]++]);
        if (static_cast<int64_t>(ids.size()) > max_new) ids.resize(static_cast<size_t>(max_new));
        out.ids.push_back(ids);
      }
      return out;
    };
  }
};

const std::string kSuffix7 = "\n<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n";

std::string call(const std::string& name, const std::string& arguments) {
  return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + arguments + "}\n</tool_call>";
}

std::vector<uint8_t> mask_of(size_t ones, size_t zeros, size_t ones_after) {
  std::vector<uint8_t> m(ones, 1);
  m.insert(m.end(), zeros, 0);
  m.insert(m.end(), ones_after, 1);
  return m;
}

}  // namespace

TEST_CASE("workers: the tools are described as transformers' get_json_schema describes them, in their order") {
  Setup s;
  std::ifstream in(std::string(RAYLESS_TEST_DATA) + "/agent/schemas.json");
  const Json golden = Json::parse(in);
  REQUIRE(s.workers->schemas().size() == 7);  // calculator's 3, then test_tools.py's 4 ([tools.NAME] in name order)
  // key order too: the prompt shows them through the template's tojson
  for (size_t i = 0; i < 3; ++i) CHECK(s.workers->schemas()[i].dump() == golden["calculator"][i].dump());
  CHECK(s.workers->schemas()[3]["function"]["name"] == "echo");
}

TEST_CASE("loop: calls run in the worker, results enter as the template's tokens, masked, generation continues") {
  Setup s;
  Script script{s, {}, {}, {}, {}};
  script.turns = {
      {"Let me add. " + call("add", "{\"a\": 3, \"b\": 4}") + "<|im_end|>", "It is 7.<|im_end|>"},
      {"No tools: 5<|im_end|>"},
      {call("add", "{\"a\": 3,}") + "<|im_end|>"},  // malformed: TRL reads it as text, calls nothing
      {call("nope", "{}") + "<|im_end|>", "Sorry.<|im_end|>"},
      {call("divide", "{\"a\": 1, \"b\": 0}") + "<|im_end|>", "Cannot.<|im_end|>"},
      {call("shout", "{\"text\": \"a\"}") + call("echo", "{\"text\": \"b\"}") + "<|im_end|>", "Done.<|im_end|>"},
  };
  for (size_t i = 0; i < script.turns.size(); ++i) script.prompts.push_back(s.prompt("question " + std::to_string(i)));
  AgentLimits limits{512, -1, 0};
  const auto rollouts = run_tool_loop(s.chat, *s.workers, s.workers->schemas(), script.prompts, script.first(),
                                      script.generator(), limits, [](size_t i) { return "row-" + std::to_string(i); });
  REQUIRE(rollouts.size() == 6);

  // row 0: its turn, the result's tokens (Qwen2.5's tool response block; the cut after <|im_end|>), its answer
  const AgentRollout& r0 = rollouts[0];
  const auto t0 = s.ids(script.turns[0][0]), t1 = s.ids(script.turns[0][1]), suffix = s.ids(kSuffix7);
  CHECK(s.text(r0.completion_ids) == script.turns[0][0] + kSuffix7 + script.turns[0][1]);
  CHECK(r0.tool_mask == mask_of(t0.size(), suffix.size(), t1.size()));
  REQUIRE(r0.messages.size() == 3);
  CHECK(r0.messages[0]["tool_calls"][0]["function"]["arguments"] == Json{{"a", 3}, {"b", 4}});
  CHECK(r0.messages[1] == Json{{"role", "tool"}, {"name", "add"}, {"content", "7"}});
  CHECK(r0.messages[2]["content"] == "It is 7.");
  CHECK(r0.turns.size() == 3);
  CHECK(r0.turns[1] == Json{{"by", "tool"}, {"start", t0.size()}, {"end", t0.size() + suffix.size()}});
  CHECK(r0.tool_calls == 1);
  CHECK(r0.tool_failures == 0);

  // row 1: no call, one turn; row 2: malformed JSON is plain text (TRL appends nothing)
  CHECK(rollouts[1].completion_ids == s.ids(script.turns[1][0]));
  CHECK(rollouts[1].messages.size() == 1);
  CHECK(rollouts[2].completion_ids == s.ids(script.turns[2][0]));
  CHECK(rollouts[2].messages[0]["content"] == call("add", "{\"a\": 3,}"));  // decoded without special tokens
  CHECK(!rollouts[2].messages[0].contains("tool_calls"));
  CHECK(rollouts[2].tool_calls == 0);

  // rows 3, 4: an unknown name and a raising tool give TRL's error text, the loop goes on
  CHECK(rollouts[3].messages[1]["content"] == "{'error': 'Tool nope not found.'}");
  CHECK(rollouts[3].failed[1]);
  CHECK(rollouts[3].tool_failures == 1);
  CHECK(rollouts[3].messages[2]["content"] == "Sorry.");
  CHECK(rollouts[4].messages[1]["content"] == "{'error': 'division by zero'}");
  CHECK(rollouts[4].tool_failures == 1);
  CHECK(s.text(rollouts[4].completion_ids).find("<tool_response>\n{'error': 'division by zero'}\n</tool_response>") !=
        std::string::npos);
  CHECK(rollouts[4].record()["messages"][1]["failed"] == true);

  // row 5: the async tool's result comes after the other one's, as TRL gathers them
  REQUIRE(rollouts[5].messages.size() == 4);
  CHECK(rollouts[5].messages[1]["content"] == "b");
  CHECK(rollouts[5].messages[2]["content"] == "A");
  CHECK(rollouts[5].tool_calls == 2);
  CHECK(s.text(rollouts[5].completion_ids).find("<tool_response>\nb\n</tool_response>\n<tool_response>\nA\n</tool_response>") !=
        std::string::npos);
}

TEST_CASE("loop: completion budget and max_tool_calling_iterations as TRL keeps them") {
  Setup s;
  const std::string first = call("add", "{\"a\": 3, \"b\": 4}") + "<|im_end|>";
  const size_t t0 = s.ids(first).size(), suffix = s.ids(kSuffix7).size();
  const auto run = [&](int64_t max_completion_length, int64_t iterations, std::vector<std::string> turns,
                       std::vector<int64_t>* asked = nullptr) {
    Script script{s, {turns}, {s.prompt("q")}, {}, {}};
    AgentLimits limits{max_completion_length, iterations, 0};
    auto out = run_tool_loop(s.chat, *s.workers, s.workers->schemas(), script.prompts, script.first(), script.generator(),
                             limits, [](size_t) { return std::string("row"); });
    if (asked) *asked = script.budgets_asked;
    return out[0];
  };
  // results that would pass max_completion_length never enter: the row ends as it was (the tool ran)
  AgentRollout r = run(static_cast<int64_t>(t0 + suffix) - 1, -1, {first, "7<|im_end|>"});
  CHECK(r.completion_ids == s.ids(first));
  CHECK(r.messages.size() == 1);
  CHECK(r.tool_calls == 1);
  // room for 3 more tokens: the continuation is cut there (and the generator was asked for 3)
  std::vector<int64_t> asked;
  r = run(static_cast<int64_t>(t0 + suffix) + 3, -1, {first, "It is 7.<|im_end|>"}, &asked);
  CHECK(asked == std::vector<int64_t>{3});
  CHECK(r.completion_ids.size() == t0 + suffix + 3);
  CHECK(r.tool_mask == mask_of(t0, suffix, 3));
  CHECK(s.text(r.completion_ids).substr(s.text(r.completion_ids).size() - 3) == "It ");
  // exactly full: the continuation gets nothing and no message
  r = run(static_cast<int64_t>(t0 + suffix), -1, {first, "7<|im_end|>"});
  CHECK(r.completion_ids.size() == t0 + suffix);
  CHECK(r.messages.size() == 2);
  // max_tool_calling_iterations: 0 runs nothing, 1 runs the first round only
  r = run(512, 0, {first});
  CHECK(r.completion_ids == s.ids(first));
  CHECK(r.tool_calls == 0);
  r = run(512, 1, {first, first, "never"});
  CHECK(r.tool_calls == 1);
  CHECK(r.completion_ids.size() == t0 + suffix + t0);
  CHECK(r.messages.back()["tool_calls"].size() == 1);  // parsed, not run
  r = run(512, -1, {first, first, "7<|im_end|>"});
  CHECK(r.tool_calls == 2);
  CHECK(r.turns.size() == 5);
}

TEST_CASE("loop: a tool that hangs or kills its worker stops the run, naming the tool, the worker and the row") {
  {
    Setup s(false, 1.0);
    Script script{s, {{call("sleep", "{\"seconds\": 30}") + "<|im_end|>"}}, {s.prompt("q")}, {}, {}};
    CHECK_THROWS_WITH(run_tool_loop(s.chat, *s.workers, s.workers->schemas(), script.prompts, script.first(),
                                    script.generator(), AgentLimits{512, -1, 0}, [](size_t) { return std::string("data.jsonl:4"); }),
                      Catch::Contains("tool worker \"misc\"") && Catch::Contains("timeout_s = 1 s") &&
                          Catch::Contains("tool \"sleep\" called by data.jsonl:4"));
  }
  Setup s;
  Script script{s, {{call("echo", "{\"text\": \"x\"}") + call("die", "{\"code\": 3}") + "<|im_end|>"}}, {s.prompt("q")}, {}, {}};
  try {
    run_tool_loop(s.chat, *s.workers, s.workers->schemas(), script.prompts, script.first(), script.generator(),
                  AgentLimits{512, -1, 0}, [](size_t) { return std::string("data.jsonl:9"); });
    FAIL("no error");
  } catch (const RuntimeError& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("tool worker \"misc\"") && Catch::Contains("exited with status 3") &&
                            Catch::Contains("tool \"die\" called by data.jsonl:9"));
  }
}

TEST_CASE("environment: guess-a-number, one instance per rollout, 3+ turns, get_reward as the score") {
  Setup s(true);
  CHECK(s.workers->environment_name() == "GuessNumber");
  CHECK(s.workers->environment_has_reward());
  REQUIRE(s.workers->schemas().size() == 1);
  CHECK(s.workers->schemas()[0]["function"]["name"] == "guess");
  const std::vector<nlohmann::json> rows = {{{"secret", 37}}, {{"secret", 50}}, {{"secret", 1}}};
  const auto observations = s.workers->reset(rows, [](size_t i) { return "row " + std::to_string(i); });
  REQUIRE(observations.size() == 3);
  CHECK(observations[0] == " Guess my number: it lies between 1 and 100.");
  const auto guess = [](int n) { return call("guess", "{\"number\": " + std::to_string(n) + "}") + "<|im_end|>"; };
  Script script{s, {{guess(50), guess(25), guess(37), "Found it: 37<|im_end|>"}, {guess(50), "Done<|im_end|>"}, {"I give up<|im_end|>"}},
                {s.prompt("a"), s.prompt("b"), s.prompt("c")}, {}, {}};
  const auto rollouts = run_tool_loop(s.chat, *s.workers, s.workers->schemas(), script.prompts, script.first(),
                                      script.generator(), AgentLimits{2048, -1, 0}, [](size_t i) { return std::to_string(i); });
  const AgentRollout& r = rollouts[0];
  REQUIRE(r.messages.size() == 7);  // 4 model turns, 3 answers
  CHECK(r.messages[1]["content"] == "lower");
  CHECK(r.messages[3]["content"] == "higher");
  CHECK(r.messages[5]["content"] == "correct");
  CHECK(r.turns.size() == 7);
  CHECK(r.tool_calls == 3);
  CHECK(rollouts[1].messages[1]["content"] == "correct");
  CHECK(rollouts[2].messages.size() == 1);
  // each rollout scored by its own instance, in the state its episode left it
  const std::vector<double> rewards = s.workers->environment_rewards(3);
  CHECK(rewards == std::vector<double>{1.0 / 3.0, 1.0, 0.0});
  // a second batch resets the same instances
  s.workers->reset(rows, [](size_t i) { return std::to_string(i); });
  CHECK(s.workers->environment_rewards(3) == std::vector<double>{0.0, 0.0, 0.0});
}
