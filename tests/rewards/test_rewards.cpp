#include <catch2/catch.hpp>

#include <cmath>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/rewards/rewards.h"

using namespace rayless;
using nlohmann::json;

TEST_CASE("rewards: length reward in tokens and in characters") {
  CHECK(length_reward("whatever", 5, 8, LengthUnit::Tokens) == -3.0);
  CHECK(length_reward("whatever", 11, 8, LengthUnit::Tokens) == -3.0);
  CHECK(length_reward("whatever", 8, 8, LengthUnit::Tokens) == 0.0);
  CHECK(length_reward("abcd", 99, 4, LengthUnit::Chars) == 0.0);
  // characters are Unicode code points, not bytes: "héé" is 3 characters in 5 bytes
  CHECK(length_reward("h\xC3\xA9\xC3\xA9", 99, 5, LengthUnit::Chars) == -2.0);
}

TEST_CASE("rewards: repetition penalty is minus the repeated n-gram fraction") {
  CHECK(repetition_penalty("one two", 3) == 0.0);                 // fewer than n words
  CHECK(repetition_penalty("a b c d e", 3) == 0.0);               // 3 distinct trigrams of 3
  // "a b a b a b": trigrams aba bab aba bab -> 2 distinct of 4
  CHECK(repetition_penalty("a b a b a b", 3) == Approx(-0.5));
  // case-insensitive, whitespace-separated: "x X x x" unigram -> 1 distinct of 4
  CHECK(repetition_penalty("x X\tx\nx", 1) == Approx(-0.75));
}

TEST_CASE("rewards: answer reward exact and numeric") {
  CHECK(answer_reward("  Paris\n", "Paris", AnswerMode::Exact) == 1.0);
  CHECK(answer_reward("paris", "Paris", AnswerMode::Exact) == 0.0);
  CHECK(answer_reward("The answer is 42.", "42", AnswerMode::Numeric) == 1.0);
  CHECK(answer_reward("3 apples and 5 pears, so 8", "8", AnswerMode::Numeric) == 1.0);  // the last number counts
  CHECK(answer_reward("8 then 9", "8", AnswerMode::Numeric) == 0.0);
  CHECK(answer_reward("total: 1,234.50", "1234.5", AnswerMode::Numeric) == 1.0);
  CHECK(answer_reward("it is -3", "-3.0", AnswerMode::Numeric) == 1.0);
  CHECK(answer_reward("2.5e3", "2500", AnswerMode::Numeric) == 1.0);
  CHECK(answer_reward("no number here", "7", AnswerMode::Numeric) == 0.0);
  CHECK(answer_text(json{{"answer", 12}}, "answer") == "12");
  CHECK(answer_text(json{{"answer", "x"}}, "answer") == "x");
  CHECK_THROWS_AS(answer_text(json{{"other", 1}}, "answer"), InputError);
}

TEST_CASE("rewards: RewardSet scores [N, K] float64 with names and weights") {
  Config config;
  config.reward.functions = {"length", "format", "answer", "repetition"};
  config.reward.reward_weights = {1.0, 0.5, 2.0, 1.0};
  config.reward.length_target = 4;
  config.reward.length_unit = LengthUnit::Chars;
  config.reward.format_pattern = "^<a>.*</a>$";
  config.reward.answer_mode = AnswerMode::Numeric;
  RewardSet rewards(config);
  CHECK(rewards.names() == std::vector<std::string>{"length", "format", "answer", "repetition"});
  CHECK(rewards.weights() == std::vector<double>{1.0, 0.5, 2.0, 1.0});
  const std::vector<std::string> completions = {"<a>7</a>", "x x x x", "7"};
  const std::vector<json> rows = {json{{"answer", 7}}, json{{"answer", "8"}}, json{{"answer", 7}}};
  torch::Tensor scores = rewards.score({"p", "p", "q"}, completions, {3, 4, 1}, rows);
  REQUIRE(scores.scalar_type() == torch::kFloat64);
  REQUIRE(scores.sizes() == torch::IntArrayRef({3, 4}));
  const double expected[3][4] = {{-4, 1, 1, 0}, {-3, 0, 0, -0.5}, {-3, 0, 1, 0}};
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 4; ++k) CHECK(scores[i][k].item<double>() == Approx(expected[i][k]));
}

TEST_CASE("rewards: bad reward settings are input errors") {
  Config config;
  config.reward.functions = {"format"};
  config.reward.format_pattern = "([unclosed";
  CHECK_THROWS_WITH(RewardSet(config), Catch::Contains("reward.format_pattern"));
  config.reward.functions = {"length", "length"};
  CHECK_THROWS_AS(RewardSet(config), InputError);
  config.reward.functions = {"telepathy"};
  CHECK_THROWS_AS(RewardSet(config), InputError);
  config.reward.functions = {"length"};
  config.reward.reward_weights = {1.0, 2.0};
  CHECK_THROWS_AS(RewardSet(config), InputError);
}

TEST_CASE("rewards: format reward matches a regex, also on broken UTF-8") {
  Config config;
  config.reward.functions = {"format"};
  config.reward.format_pattern = "^<answer>\\d+</answer>$";
  RewardSet rewards(config);
  const std::vector<std::string> completions = {"<answer>12</answer>", "<answer>x</answer>", "say <answer>1</answer>",
                                                "<answer>7</answer>\xE2\x82"};  // cut inside a 3-byte character
  torch::Tensor scores = rewards.score({"p", "p", "p", "p"}, completions, {1, 1, 1, 1}, std::vector<json>(4));
  CHECK(torch::equal(scores.select(1, 0), torch::tensor({1.0, 0.0, 0.0, 0.0}, torch::kFloat64)));
  config.reward.format_pattern = "\xC3\xA9t\xC3\xA9";  // "été": UTF mode matches code points
  RewardSet unicode(config);
  CHECK(unicode.score({"p"}, {"un \xC3\xA9t\xC3\xA9 chaud \xFF"}, {1}, {json()})[0][0].item<double>() == 1.0);
}
