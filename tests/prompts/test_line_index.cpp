// The byte-offset index of a JSONL file (line_index.h) and the dataset read through it (dataset.h):
// rows found as std::getline reads them, the cache reused while the file is unchanged and rebuilt
// when it is edited, the fallback places, shards, and check records.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "rayless/base/error.h"
#include "rayless/prompts/dataset.h"
#include "rayless/prompts/line_index.h"
#include "rollout/rollout_test_util.h"

using namespace rayless;
namespace fs = std::filesystem;

namespace {

// A fresh directory of its own for each case (indexes are cached beside the data).
fs::path case_dir(const std::string& name) {
  const fs::path dir = scratch_dir() / ("index-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& file, const std::string& text) { std::ofstream(file, std::ios::binary) << text; }

// The reference: the non-blank lines as the loader always read them (std::getline, a trailing '\r'
// dropped, a line of spaces and tabs blank), with their line numbers.
std::vector<std::pair<int64_t, std::string>> getline_rows(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<std::pair<int64_t, std::string>> rows;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") != std::string::npos) rows.push_back({line, text});
  }
  return rows;
}

void check_against_getline(const LineIndex& index) {
  const auto expected = getline_rows(index.file());
  REQUIRE(index.rows() == static_cast<int64_t>(expected.size()));
  for (int64_t r = 0; r < index.rows(); ++r) {
    CHECK(static_cast<int64_t>(index.entry(r).line) == expected[static_cast<size_t>(r)].first);
    CHECK(index.read_row(r) == expected[static_cast<size_t>(r)].second);
  }
  int64_t visited = 0;
  index.scan(0, index.rows(), [&](int64_t row, int64_t line, std::string_view text) {
    CHECK(row == visited);
    CHECK(line == expected[static_cast<size_t>(row)].first);
    CHECK(text == expected[static_cast<size_t>(row)].second);
    ++visited;
  });
  CHECK(visited == index.rows());
}

}  // namespace

TEST_CASE("line index: rows and line numbers as std::getline reads them") {
  const fs::path dir = case_dir("getline");
  const std::string long_row = "{\"prompt\": \"" + std::string(3 << 20, 'x') + "\"}";  // past the 1 MiB scan block
  const std::string medium_row = "{\"prompt\": \"" + std::string(6000, 'y') + "\"}";   // past one 4 KiB row read
  write(dir / "d.jsonl", "\n   \n{\"prompt\": \"a\"}\r\n\t\r\n" + long_row + "\n\r  \n" + medium_row +
                             "\n{\"prompt\": \"last, no newline\"}");
  const LineIndex index = LineIndex::open(dir / "d.jsonl", {}, "data.path");
  CHECK(index.rows() == 5);  // "\r  " is not blank: only a trailing '\r' is dropped
  check_against_getline(index);
  CHECK(index.entry(0).offset == 5);
  const LineIndex empty = LineIndex::open((write(dir / "e.jsonl", ""), dir / "e.jsonl"), {}, "data.path");
  CHECK(empty.rows() == 0);
}

TEST_CASE("line index: cached beside the file, reused, rebuilt after every kind of edit") {
  const fs::path dir = case_dir("edits");
  const fs::path file = dir / "d.jsonl";
  std::string text;
  for (int i = 0; i < 400; ++i) text += "{\"prompt\": \"row " + std::to_string(1000 + i) + "\"}\n";  // > 8 KiB
  write(file, text);
  const LineIndex first = LineIndex::open(file, {}, "data.path");
  CHECK(first.built());
  CHECK(first.cache() == dir / ".rayless-index" / "d.jsonl.idx");
  CHECK(fs::exists(first.cache()));
  const LineIndex again = LineIndex::open(file, {}, "data.path");
  CHECK_FALSE(again.built());
  CHECK(again.rows() == 400);

  SECTION("a row appended") {
    std::ofstream(file, std::ios::app) << "\n{\"prompt\": \"new\"}\n";
    const LineIndex edited = LineIndex::open(file, {}, "data.path");
    CHECK(edited.built());
    CHECK(edited.rows() == 401);
    CHECK(edited.read_row(400) == "{\"prompt\": \"new\"}");
    check_against_getline(edited);
  }
  SECTION("a row in the middle changed, same size, the clock moved") {
    const auto stamp = fs::last_write_time(file);
    text.replace(text.find("row 1200"), 8, "row 9999");
    write(file, text);
    fs::last_write_time(file, stamp + std::chrono::seconds(3));
    const LineIndex edited = LineIndex::open(file, {}, "data.path");
    CHECK(edited.built());
    CHECK(edited.read_row(200) == "{\"prompt\": \"row 9999\"}");
  }
  SECTION("the last row changed, same size, the same modification time") {
    const auto stamp = fs::last_write_time(file);
    text.replace(text.find("row 1399"), 8, "row 7777");
    write(file, text);
    fs::last_write_time(file, stamp);
    const LineIndex edited = LineIndex::open(file, {}, "data.path");
    CHECK(edited.built());  // the hash of the file's last 4 KiB differs
    CHECK(edited.read_row(399) == "{\"prompt\": \"row 7777\"}");
  }
  SECTION("rows moved: a blank line inserted, same size (one row's text one byte shorter)") {
    text.replace(text.find("row 1000"), 8, "row 100\n");
    write(file, text);
    fs::last_write_time(file, fs::last_write_time(file) + std::chrono::seconds(3));
    const LineIndex edited = LineIndex::open(file, {}, "data.path");
    CHECK(edited.built());
    check_against_getline(edited);
  }
}

TEST_CASE("line index: a file changed under a run is named when a row is read") {
  const fs::path dir = case_dir("changed");
  write(dir / "d.jsonl", "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n");
  const LineIndex index = LineIndex::open(dir / "d.jsonl", {}, "data.path");
  std::ofstream(dir / "d.jsonl", std::ios::app) << "{\"prompt\": \"c\"}\n";
  CHECK_THROWS_WITH(index.read_row(1), Catch::Contains((dir / "d.jsonl").string() + ": the prompt dataset changed while the run was using it"));
}

TEST_CASE("line index: where the data's directory cannot be written, the fallback, else memory") {
  const fs::path dir = case_dir("fallback");
  write(dir / "d.jsonl", "{\"prompt\": \"a\"}\n\n{\"prompt\": \"b\"}\n");
  write(dir / ".rayless-index", "a file where the cache directory would go");  // (root ignores modes)
  const LineIndex fallback = LineIndex::open(dir / "d.jsonl", dir / "run" / "data-index", "data.path");
  CHECK(fallback.built());
  CHECK(fallback.cache().parent_path() == dir / "run" / "data-index");
  CHECK(fallback.cache() == LineIndex::cache_under(dir / "run" / "data-index", dir / "d.jsonl"));
  check_against_getline(fallback);
  CHECK_FALSE(LineIndex::open(dir / "d.jsonl", dir / "run" / "data-index", "data.path").built());  // reused there
  const LineIndex in_memory = LineIndex::open(dir / "d.jsonl", {}, "data.path");
  CHECK(in_memory.cache().empty());
  check_against_getline(in_memory);
  CHECK_THROWS_WITH(LineIndex::open(dir / "none.jsonl", {}, "eval.path"),
                    Catch::Contains((dir / "none.jsonl").string() + ": cannot open prompt dataset (eval.path)"));
}

TEST_CASE("dataset: a directory of JSONL shards is one dataset in name order") {
  const fs::path dir = case_dir("shards");
  fs::create_directories(dir / "data");
  write(dir / "data" / "b.jsonl", "{\"prompt\": \"b1\"}\n\n{\"prompt\": \"b2\"}\n");
  write(dir / "data" / "a.jsonl", "{\"prompt\": \"a1\"}\n");
  write(dir / "data" / "notes.txt", "not a shard\n");
  write(dir / "data" / "c.jsonl", "{\"prompt\": \"c1\", \"answer\": 3}\nnot json\n");
  CHECK_THROWS_WITH(load_prompt_dataset((dir / "data").string()),
                    Catch::Contains((dir / "data" / "c.jsonl").string() + ":2: not valid JSON"));
  const PromptDataset d = load_prompt_dataset((dir / "data").string(), "prompt", "messages", /*skip_invalid=*/true);
  CHECK(d.lines() == 5);
  REQUIRE(d.size() == 4);
  std::vector<std::string> prompts;
  for (int64_t i = 0; i < d.size(); ++i) prompts.push_back(d.row(i).prompt);
  CHECK(prompts == std::vector<std::string>{"a1", "b1", "b2", "c1"});
  CHECK(d.where(2) == (dir / "data" / "b.jsonl").string() + ":3");
  CHECK(d.row(3).fields["answer"] == 3);
  CHECK(fs::exists(dir / "data" / ".rayless-index" / "b.jsonl.idx"));
  CHECK_THROWS_WITH(load_prompt_dataset((dir / "data" / ".rayless-index").string()), Catch::Contains("a directory without *.jsonl files"));
}

TEST_CASE("dataset: usable rows skip the skipped lines wherever they fall") {
  const fs::path dir = case_dir("skips");
  std::string text;
  for (int i = 0; i < 20; ++i) text += "{\"prompt\": \"" + std::to_string(i) + "\"}\n";
  write(dir / "d.jsonl", text);
  PromptDataset d = PromptDataset::open((dir / "d.jsonl").string(), "prompt", "messages", "data.path");
  const std::vector<int64_t> skipped = {0, 1, 5, 6, 7, 13, 19};
  d.skip(skipped, "why");
  std::vector<std::string> expected;
  for (int i = 0; i < 20; ++i)
    if (std::find(skipped.begin(), skipped.end(), i) == skipped.end()) expected.push_back(std::to_string(i));
  REQUIRE(d.size() == static_cast<int64_t>(expected.size()));
  for (int64_t i = 0; i < d.size(); ++i) CHECK(d.row(i).prompt == expected[static_cast<size_t>(i)]);
  d.limit(3);
  CHECK(d.size() == 3);
}

TEST_CASE("dataset: a check record is reused only for the same fingerprint and the same files") {
  const fs::path dir = case_dir("records");
  write(dir / "d.jsonl", "{\"prompt\": \"a\"}\n{\"prompt\": 5}\n{\"prompt\": \"c\"}\n");
  PromptDataset d = load_prompt_dataset((dir / "d.jsonl").string(), "prompt", "messages", true);
  save_check_record(d, "settings 1", 7);
  PromptDataset reopened = PromptDataset::open((dir / "d.jsonl").string(), "prompt", "messages", "data.path");
  int64_t longest = 0;
  CHECK_FALSE(load_check_record(reopened, "settings 2", longest));
  CHECK(reopened.size() == 3);
  REQUIRE(load_check_record(reopened, "settings 1", longest));
  CHECK(longest == 7);
  CHECK(reopened.size() == 2);
  CHECK(reopened.row(1).prompt == "c");
  CHECK_THAT(reopened.first_skip_reason(), Catch::Contains("d.jsonl:2: field \"prompt\" must be a string"));
  std::ofstream(dir / "d.jsonl", std::ios::app) << "{\"prompt\": \"d\"}\n";
  PromptDataset edited = PromptDataset::open((dir / "d.jsonl").string(), "prompt", "messages", "data.path");
  CHECK_FALSE(load_check_record(edited, "settings 1", longest));
}
