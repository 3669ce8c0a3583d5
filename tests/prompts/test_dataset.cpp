#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "rayless/base/config.h"
#include "rayless/prompts/dataset.h"
#include "rayless/base/error.h"
#include "rollout/rollout_test_util.h"

using namespace rayless;

TEST_CASE("dataset: text and chat rows keep every field") {
  const std::string path = write_temp_file("mixed.jsonl",
                                           "{\"prompt\": \"What is 2+2?\", \"answer\": \"4\", \"id\": 7}\n"
                                           "\n"
                                           "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"answer\": 3}\r\n");
  const PromptDataset d = load_prompt_dataset(path);
  REQUIRE(d.size() == 2);
  CHECK(d.row(0).prompt == "What is 2+2?");
  CHECK_FALSE(d.row(0).is_chat());
  CHECK(d.row(0).fields["answer"] == "4");
  CHECK(d.row(0).fields["id"] == 7);
  CHECK(d.row(0).line == 1);
  CHECK(d.row(1).is_chat());
  CHECK(d.row(1).messages[0]["content"] == "hi");
  CHECK(d.row(1).fields["answer"] == 3);
  CHECK(d.row(1).line == 3);  // the blank line still counts
  CHECK(d.where(1) == path + ":3");
  CHECK(d.skipped_lines() == 0);
}

TEST_CASE("dataset: field names come from the config") {
  const std::string path = write_temp_file("custom.jsonl", "{\"question\": \"q1\"}\n{\"chat\": [{\"role\": \"user\", \"content\": \"c\"}]}\n");
  Config config;
  config.data.path = path;
  config.data.prompt_field = "question";
  config.data.messages_field = "chat";
  const PromptDataset d = load_prompt_dataset(config.data);
  REQUIRE(d.size() == 2);
  CHECK(d.row(0).prompt == "q1");
  CHECK(d.row(1).is_chat());
  // with the default names the same file has no usable row
  CHECK_THROWS_AS(load_prompt_dataset(path), InputError);
}

TEST_CASE("dataset: TRL's conversational rows, the prompt as a list of messages") {
  // TRL's prompt-only conversational format; keys in the file's order (templates' tojson shows them)
  const std::string path = write_temp_file(
      "conversational.jsonl",
      "{\"prompt\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"hi\"}], \"answer\": \"4\"}\n"
      "{\"prompt\": \"plain\"}\n");
  for (const std::string& messages_field : {std::string("messages"), std::string("prompt")}) {
    const PromptDataset d = load_prompt_dataset(path, "prompt", messages_field);
    REQUIRE(d.size() == 2);
    REQUIRE(d.row(0).is_chat());
    CHECK(d.row(0).messages.dump() == R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])");
    CHECK(d.row(0).fields["answer"] == "4");
    CHECK(d.row(1).prompt == "plain");
  }
}

TEST_CASE("dataset: a bad line names file and line") {
  const std::string good = "{\"prompt\": \"ok\"}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"prompt\": \"ok\"", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {"{\"prompt\": 5}", "must be a string"},
      {"{\"prompt\": \"\"}", "is empty"},
      {"{\"other\": 1}", "no \"prompt\" (a string or a list of messages) and no \"messages\" list"},
      {"{\"prompt\": [{\"content\": \"hi\"}]}", "field \"prompt\" item 0"},
      {"{\"prompt\": []}", "field \"prompt\" must be a non-empty list"},
      {"{\"messages\": [{\"content\": \"hi\"}]}", "item 0"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "item 0"},
      {"{\"messages\": []}", "non-empty list"},
      {"{\"prompt\": \"ok\", \"score\": 3e333333333}", "number overflow"},  // fuzz regression: was exit 1 naming no line
  };
  for (const auto& [line, why] : cases) {
    const std::string path = write_temp_file("bad.jsonl", good + good + line + "\n" + good);
    try {
      load_prompt_dataset(path);
      FAIL("no error for " << line);
    } catch (const InputError& e) {
      const std::string message = e.what();
      CHECK_THAT(message, Catch::Contains(path + ":3: "));
      CHECK_THAT(message, Catch::Contains(why));
    }
    // skipped and counted instead
    const PromptDataset d = load_prompt_dataset(path, "prompt", "messages", true);
    CHECK(d.size() == 3);
    CHECK(d.skipped_lines() == 1);
    CHECK_THAT(d.first_skip_reason(), Catch::Contains(":3: "));
    CHECK(d.where(2) == path + ":4");  // the row after the skipped line
  }
}

TEST_CASE("dataset: missing file and no usable rows are input errors") {
  CHECK_THROWS_WITH(load_prompt_dataset("/nonexistent/prompts.jsonl"), Catch::Contains("/nonexistent/prompts.jsonl"));
  CHECK_THROWS_WITH(load_prompt_dataset("/nonexistent/eval.jsonl", "prompt", "messages", false, "eval.path"),
                    Catch::Contains("(eval.path)"));
  const std::string path = write_temp_file("allbad.jsonl", "nope\n\n");
  CHECK_THROWS_WITH(load_prompt_dataset(path, "prompt", "messages", true), Catch::Contains("no usable prompt"));
}

TEST_CASE("dataset: the shipped demo dataset loads") {
  const PromptDataset d = load_prompt_dataset(std::string(RAYLESS_SOURCE_DIR) + "/data/demo/prompts.jsonl");
  CHECK(d.size() >= 24);
  for (int64_t i = 0; i < d.size(); ++i) CHECK(d.row(i).prompt.size() <= 64);  // configs/demo.toml: max_prompt_length 64 bytes
}

TEST_CASE("dataset: prompt truncation") {
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5};
  CHECK(truncate_prompt_ids(ids, 5, PromptTruncation::Error, "x") == ids);
  CHECK(truncate_prompt_ids(ids, 9, PromptTruncation::Left, "x") == ids);
  CHECK(truncate_prompt_ids(ids, 3, PromptTruncation::Left, "x") == std::vector<int64_t>{3, 4, 5});
  CHECK_THROWS_AS(truncate_prompt_ids(ids, 3, PromptTruncation::Error, "p.jsonl:4"), InputError);
  CHECK_THROWS_WITH(truncate_prompt_ids(ids, 3, PromptTruncation::Error, "p.jsonl:4"), Catch::Contains("p.jsonl:4: prompt has 5 tokens"));
}
