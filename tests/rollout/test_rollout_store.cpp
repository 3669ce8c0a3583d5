#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <hdf5.h>
#include <nlohmann/json.hpp>

#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/rollout/rollout_batch.h"
#include "rayless/rollout/rollout_store.h"
#include "rollout_test_util.h"

using namespace rayless;
namespace fs = std::filesystem;

namespace {

// A step of `groups` prompts x `generations` completions with varied lengths and NaN rewards.
Rollouts make_rollouts(int64_t step, int64_t rank, int64_t groups = 3, int64_t generations = 4, bool with_ref = true,
                       torch::ScalarType float_type = torch::kFloat32) {
  torch::manual_seed(step * 100 + rank);
  const int64_t n = groups * generations;
  Rollouts r;
  r.step = step;
  r.rank = rank;
  std::vector<int64_t> prompt_offsets = {0}, completion_offsets = {0}, group_index;
  for (int64_t i = 0; i < n; ++i) {
    prompt_offsets.push_back(prompt_offsets.back() + 3 + (i / generations) % 4);
    completion_offsets.push_back(completion_offsets.back() + (i * 7 + step) % 11);  // some completions empty
    group_index.push_back(rank * 1000 + i / generations);
  }
  const int64_t t = completion_offsets.back();
  r.prompt_ids = torch::randint(0, 150000, {prompt_offsets.back()}, torch::kInt64);
  r.prompt_offsets = torch::tensor(prompt_offsets, torch::kInt64);
  r.completion_ids = torch::randint(0, 150000, {t}, torch::kInt64);
  r.completion_offsets = torch::tensor(completion_offsets, torch::kInt64);
  r.group_index = torch::tensor(group_index, torch::kInt64);
  r.rewards_per_func = torch::randn({n, 2}, torch::kFloat64);
  r.rewards_per_func[1][1] = std::nan("");
  r.rewards = torch::randn({n}, float_type);
  r.advantages = torch::randn({n}, float_type);
  r.old_logps = -torch::rand({t}, float_type) * 5;
  r.entropies = torch::rand({t}, float_type) * 3;
  r.completion_mask = torch::rand({t}) > 0.2;
  if (with_ref) r.ref_logps = -torch::rand({t}, float_type) * 5;
  r.truncated = torch::rand({n}) > 0.5;
  if (with_ref) r.nonfinite_logits = torch::rand({n}) > 0.8;  // optional, as ref_logps
  return r;
}

RolloutAttrs make_attrs(int64_t world_size = 1) {
  RolloutAttrs a;
  a.world_size = world_size;
  a.num_generations = 4;
  a.reward_names = {"length", "worker"};
  a.reward_weights = {1.0, 0.5};
  a.config_hash = "c0ffee0000000001";
  a.tokenizer_hash = "70ce000000000002";
  a.tokenizer = "byte";
  a.numbers["beta"] = 0.04;
  a.strings["model_path"] = "configs/models/tiny";
  return a;
}

bool same(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && torch::equal(a.isnan(), b.isnan()) &&
         torch::equal(torch::nan_to_num(a), torch::nan_to_num(b));
}

void check_same(const Rollouts& a, const Rollouts& b) {
  CHECK(a.step == b.step);
  CHECK(a.rank == b.rank);
  CHECK(same(a.prompt_ids, b.prompt_ids));
  CHECK(same(a.prompt_offsets, b.prompt_offsets));
  CHECK(same(a.completion_ids, b.completion_ids));
  CHECK(same(a.completion_offsets, b.completion_offsets));
  CHECK(same(a.group_index, b.group_index));
  CHECK(same(a.rewards_per_func, b.rewards_per_func));
  CHECK(same(a.rewards, b.rewards));
  CHECK(same(a.advantages, b.advantages));
  CHECK(same(a.old_logps, b.old_logps));
  CHECK(same(a.entropies, b.entropies));
  CHECK(same(a.completion_mask, b.completion_mask));
  CHECK(same(a.ref_logps, b.ref_logps));
  CHECK(same(a.truncated, b.truncated));
  CHECK(same(a.nonfinite_logits, b.nonfinite_logits));
}

std::string fresh_dir(const std::string& name) {
  const fs::path dir = scratch_dir() / name;
  fs::remove_all(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("store: names are zero padded") {
  CHECK(rank_file_name(3) == "rank-00003.h5");
  CHECK(step_group_name(12) == "step_00000012");
  CHECK(step_file_path("runs/x/rollouts", 1, 2) == "runs/x/rollouts/rank-00001/step-00000002.h5");
}

TEST_CASE("store: write and read back bit for bit") {
  const std::string dir = fresh_dir("roundtrip");
  for (torch::ScalarType type : {torch::kFloat32, torch::kFloat64}) {
    const Rollouts written = make_rollouts(type == torch::kFloat32 ? 1 : 2, 0, 3, 4, true, type);
    write_rollouts(dir, written, make_attrs());
    RolloutAttrs attrs;
    const Rollouts read = read_rollouts(dir, written.step, 0, "c0ffee0000000001", "70ce000000000002", &attrs);
    check_same(written, read);
    CHECK(attrs.reward_names == std::vector<std::string>{"length", "worker"});
    CHECK(attrs.reward_weights == std::vector<double>{1.0, 0.5});
    CHECK(attrs.num_generations == 4);
    CHECK(attrs.world_size == 1);
    CHECK(attrs.tokenizer == "byte");
    CHECK(attrs.numbers.at("beta") == 0.04);
    CHECK(attrs.numbers.at("num_completions") == 12);
    CHECK(attrs.strings.at("model_path") == "configs/models/tiny");
    CHECK(std::isnan(attrs.entropy_threshold));
  }
  // without the optional datasets (beta = 0, no old log-probs)
  Rollouts bare = make_rollouts(3, 0, 2, 2, false);
  bare.old_logps = torch::Tensor();
  write_rollouts(dir, bare, make_attrs());
  const Rollouts read = read_rollouts(dir, 3, 0, "", "");
  check_same(bare, read);
  CHECK_FALSE(read.ref_logps.defined());
  // the earlier steps are still there
  CHECK(read_rollouts(dir, 1, 0, "", "").size() == 12);
  CHECK(list_rollouts(dir).size() == 3);
}

TEST_CASE("store: tool-calling steps keep who wrote each token and the conversations, a resume pads the mask with 1") {
  const std::string dir = (scratch_dir() / "tools").string();
  Rollouts r = make_rollouts(0, 0, 2, 2);
  const int64_t t = r.completion_ids.size(0);
  r.tool_mask = torch::rand({t}) > 0.4;
  for (int64_t i = 0; i < r.size(); ++i)
    r.conversations.push_back(nlohmann::json{{"tool_calls", i}, {"text", "r\u00e9sultat \"" + std::to_string(i) + "\""}}.dump());
  write_rollouts(dir, r, make_attrs(1));
  const Rollouts back = read_rollouts(dir, 0, 0, "", "");
  REQUIRE(back.tool_mask.defined());
  CHECK(back.tool_mask.scalar_type() == torch::kBool);
  CHECK(torch::equal(back.tool_mask, r.tool_mask));
  CHECK(back.conversations == r.conversations);
  // steps without tools store neither
  write_rollouts(dir, make_rollouts(1, 0, 2, 2), make_attrs(1));
  const Rollouts plain = read_rollouts(dir, 1, 0, "", "");
  CHECK(!plain.tool_mask.defined());
  CHECK(plain.conversations.empty());
  // a batch read back for a resumed cycle: the mask as the loss takes it, 1 after each row's end (TRL pads it so)
  const RolloutBatch batch = unpack_rollouts(back, 12, 0);
  REQUIRE(batch.tool_mask.defined());
  const torch::Tensor lengths = back.completion_offsets.slice(0, 1) - back.completion_offsets.slice(0, 0, back.size());
  for (int64_t i = 0; i < back.size(); ++i) {
    const int64_t begin = back.completion_offsets[i].item<int64_t>(), length = lengths[i].item<int64_t>();
    CHECK(torch::equal(batch.tool_mask[i].slice(0, 0, length), back.tool_mask.slice(0, begin, begin + length).to(torch::kFloat32)));
    CHECK(batch.tool_mask[i].slice(0, length).eq(1).all().item<bool>());
  }
  // and packing it again gives the stored mask
  RolloutExtras extras{back.rewards_per_func, back.rewards, torch::Tensor(), torch::Tensor(), back.conversations};
  RolloutBatch again = batch;
  again.advantages = back.advantages;
  CHECK(torch::equal(pack_rollouts(again, 0, extras).tool_mask, back.tool_mask));
  // a mask of the wrong length is refused before anything is written
  r.step = 2;
  r.tool_mask = torch::ones({t + 1}, torch::kBool);
  CHECK_THROWS_AS(write_rollouts(dir, r, make_attrs(1)), InputError);
}

TEST_CASE("store: datasets are chunked and deflate-compressed") {
  const std::string dir = fresh_dir("compressed");
  write_rollouts(dir, make_rollouts(1, 0), make_attrs());
  const std::string cmd = "h5dump -p -H -d /step_00000001/completion_ids " + step_file_path(dir, 0, 1) + " > " +
                          (fs::path(dir) / "dump.txt").string() + " 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string dump = [&] {
    std::ifstream in(fs::path(dir) / "dump.txt");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  CHECK_THAT(dump, Catch::Contains("CHUNKED"));
  CHECK_THAT(dump, Catch::Contains("DEFLATE"));
  CHECK_THAT(dump, Catch::Contains("FLETCHER32"));  // damaged chunks fail the read
  CHECK_THAT(dump, Catch::Contains("H5T_STD_I32LE"));  // token ids stored as int32
}

TEST_CASE("store: the index links every rank's step") {
  const std::string dir = fresh_dir("index");
  const int64_t world = 3;
  std::vector<Rollouts> written;
  for (int64_t step = 1; step <= 2; ++step)
    for (int64_t rank = world - 1; rank >= 0; --rank) {  // rank 0 last: links may be written before targets exist
      written.push_back(make_rollouts(step, rank));
      write_rollouts(dir, written.back(), make_attrs(world));
    }
  const std::vector<RolloutEntry> from_index = list_rollouts(dir + "/index.h5");
  REQUIRE(from_index.size() == 6);
  for (const RolloutEntry& e : from_index) {
    // the index names the ranks' steps; the entry is the step file itself, whose checksum block is
    // checked when it is read (HDF5 is never left to follow a link into an unchecked file)
    CHECK(e.file == step_file_path(dir, e.rank, e.step));
    CHECK(e.group == "/" + step_group_name(e.step));
    const Rollouts r = read_rollout_entry(e);
    for (const Rollouts& w : written)
      if (w.step == e.step && w.rank == e.rank) check_same(w, r);
  }
  // a run directory (holding rollouts/) and a rank file list the same steps
  const fs::path run = scratch_dir() / "index-run";
  fs::remove_all(run);
  fs::create_directories(run);
  fs::copy(dir, run / "rollouts", fs::copy_options::recursive);
  CHECK(list_rollouts(run.string()).size() == 6);
  const std::vector<RolloutEntry> rank2 = list_rollouts(dir + "/rank-00002.h5");
  REQUIRE(rank2.size() == 2);
  CHECK(rank2[1].rank == 2);
  CHECK(rank2[1].step == 2);
  // links are relative: the copied store reads from its new place
  CHECK(read_rollouts((run / "rollouts").string(), 2, 1, "", "").size() == 12);
}

TEST_CASE("store: a failure mid-write leaves the previous files readable") {
  const std::string dir = fresh_dir("atomic");
  const Rollouts first = make_rollouts(1, 0);
  write_rollouts(dir, first, make_attrs());
  // rewriting step 1 fails half way through the HDF5 file (advantages of a dtype the store refuses,
  // after several datasets went out): the good step 1 must stay as it was
  Rollouts bad = make_rollouts(1, 0);
  bad.advantages = torch::zeros({bad.size()}, torch::kComplexFloat);
  CHECK_THROWS_AS(write_rollouts(dir, bad, make_attrs()), RuntimeError);
  check_same(first, read_rollouts(dir, 1, 0, "", ""));
  // a crash after a partial step file: a truncated temporary next to the good file is ignored
  const fs::path step_file = step_file_path(dir, 0, 1);
  fs::copy_file(step_file, step_file.parent_path() / ".step-00000002.h5.tmp.999");
  fs::resize_file(step_file.parent_path() / ".step-00000002.h5.tmp.999", 1000);
  // and an unwritable destination fails the write with the old rank file intact
  const fs::path blocker = fs::path(step_file_path(dir, 0, 2));
  fs::create_directories(blocker);  // a directory where the step file should go: rename fails
  fs::create_directories(blocker / "x");
  CHECK_THROWS(write_rollouts(dir, make_rollouts(2, 0), make_attrs()));
  fs::remove_all(blocker);
  check_same(first, read_rollouts(dir, 1, 0, "", ""));
  CHECK(list_rollouts(dir).size() == 1);
  // the next good write works and keeps step 1
  write_rollouts(dir, make_rollouts(2, 0), make_attrs());
  CHECK(list_rollouts(dir).size() == 2);
  check_same(first, read_rollouts(dir, 1, 0, "", ""));
  for (const auto& entry : fs::directory_iterator(fs::path(dir)))
    CHECK((entry.path().filename().string().find(".tmp.") == std::string::npos));
}

TEST_CASE("store: a mismatching hash is refused") {
  const std::string dir = fresh_dir("hash");
  write_rollouts(dir, make_rollouts(4, 0), make_attrs());
  CHECK_NOTHROW(read_rollouts(dir, 4, 0, "c0ffee0000000001", "70ce000000000002"));
  CHECK_THROWS_AS(read_rollouts(dir, 4, 0, "other", "70ce000000000002"), InputError);
  CHECK_THROWS_WITH(read_rollouts(dir, 4, 0, "other", ""),
                    Catch::Contains("config_hash c0ffee0000000001") && Catch::Contains("other"));
  CHECK_THROWS_WITH(read_rollouts(dir, 4, 0, "", "tok"), Catch::Contains("tokenizer_hash"));
  CHECK_THROWS_WITH(read_rollouts(dir, 5, 0, "", ""), Catch::Contains("step_00000005"));
  CHECK_THROWS_WITH(read_rollouts(dir, 4, 1, "", ""), Catch::Contains("rank-00001.h5"));
}

TEST_CASE("store: the entropy threshold can be added later") {
  const std::string dir = fresh_dir("threshold");
  const Rollouts r = make_rollouts(1, 0);
  write_rollouts(dir, r, make_attrs());
  set_rollout_attribute(dir, 1, 0, "entropy_threshold", 1.25);
  RolloutAttrs attrs;
  check_same(r, read_rollouts(dir, 1, 0, "", "", &attrs));
  CHECK(attrs.entropy_threshold == 1.25);
  set_rollout_attribute(dir, 1, 0, "entropy_threshold", 0.5);
  read_rollouts(dir, 1, 0, "", "", &attrs);
  CHECK(attrs.entropy_threshold == 0.5);
}

TEST_CASE("store: missing and corrupt files are one-line input errors") {
  CHECK_THROWS_AS(list_rollouts("/nonexistent/rollouts"), InputError);
  const std::string text = write_temp_file("not-hdf5.h5", "this is not HDF5\n");
  CHECK_THROWS_WITH(list_rollouts(text), Catch::Contains("not a rayless rollout file"));
  {
    // a byte changed anywhere after the checksum block, or the file cut short: refused before HDF5
    // reads it
    const std::string sealed_dir = fresh_dir("sealed");
    write_rollouts(sealed_dir, make_rollouts(1, 0), make_attrs());
    const fs::path file = step_file_path(sealed_dir, 0, 1);
    CHECK(read_rollouts(sealed_dir, 1, 0, "", "").size() == 12);
    std::string bytes = read_text_file(file);
    REQUIRE(bytes.rfind("rayless-store 1 fnv1a64 ", 0) == 0);
    REQUIRE(bytes.compare(512, 8, "\x89HDF\r\n\x1a\n") == 0);  // HDF5's signature right after the block
    bytes[bytes.size() - 100] ^= 0x01;
    { std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes; }
    CHECK_THROWS_WITH(read_rollouts(sealed_dir, 1, 0, "", ""), Catch::Contains(file.string() + ": damaged (its checksum"));
    const auto entries = list_rollouts(sealed_dir);  // lists from the index and rank file, both whole
    REQUIRE(entries.size() == 1);
    CHECK_THROWS_WITH(read_rollout_entry(entries[0]), Catch::Contains(file.string() + ": damaged"));
    fs::resize_file(file, bytes.size() - 1000);
    CHECK_THROWS_WITH(read_rollouts(sealed_dir, 1, 0, "", ""), Catch::Contains("truncated or appended to"));
  }
  const std::string dir = fresh_dir("corrupt");
  write_rollouts(dir, make_rollouts(1, 0), make_attrs());
  const fs::path step_file = step_file_path(dir, 0, 1);
  fs::resize_file(step_file, fs::file_size(step_file) / 2);  // truncated
  try {
    read_rollouts(dir, 1, 0, "", "");
    FAIL("no error");
  } catch (const InputError& e) {
    const std::string message = e.what();
    CHECK(message.find('\n') == std::string::npos);
    CHECK_THAT(message, Catch::Contains(step_file.string()));  // the damaged file, not the rank file linking it
  }
  // the same size, with bytes of a dataset's chunk overwritten: its checksum refuses it
  const std::string dir2 = fresh_dir("corrupt-inside");
  write_rollouts(dir2, make_rollouts(1, 0, 6, 8), make_attrs());
  const fs::path step_file2 = step_file_path(dir2, 0, 1);
  haddr_t chunk_at = 0;
  hsize_t chunk_size = 0;
  {
    const hid_t file = H5Fopen(step_file2.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t dataset = H5Dopen2(file, "/step_00000001/completion_ids", H5P_DEFAULT);
    hsize_t chunk_offset[1];
    unsigned filter_mask = 0;
    const hid_t space = H5Dget_space(dataset);
    REQUIRE(H5Dget_chunk_info(dataset, space, 0, chunk_offset, &filter_mask, &chunk_at, &chunk_size) >= 0);
    H5Sclose(space);
    H5Dclose(dataset);
    H5Fclose(file);
  }
  REQUIRE(chunk_size > 8);
  {
    std::fstream f(step_file2, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(chunk_at + chunk_size / 2));
    for (int i = 0; i < 4; ++i) f.put(static_cast<char>(i * 37 + 11));
  }
  CHECK_THROWS_WITH(read_rollouts(dir2, 1, 0, "", ""), Catch::Contains(step_file2.string()));
  CHECK_THROWS_AS(list_rollouts(scratch_dir().string() + "/empty-nothing"), InputError);
}

TEST_CASE("store: invalid rollouts are refused before writing") {
  const std::string dir = fresh_dir("invalid");
  Rollouts r = make_rollouts(1, 0);
  r.completion_offsets[2] = 0;  // decreasing
  CHECK_THROWS_WITH(write_rollouts(dir, r, make_attrs()), Catch::Contains("completion_offsets"));
  r = make_rollouts(1, 0);
  r.old_logps = r.old_logps.slice(0, 1);
  CHECK_THROWS_WITH(write_rollouts(dir, r, make_attrs()), Catch::Contains("old_logps"));
  r = make_rollouts(1, 0);
  r.nonfinite_logits = torch::zeros({r.size() + 1}, torch::kBool);  // one row too many
  CHECK_THROWS_WITH(write_rollouts(dir, r, make_attrs()), Catch::Contains("nonfinite_logits must be [N = 12]"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "rank-00000.h5"));
}

// Hidden (run by tests.cmake before tools/read_rollouts.py): writes a 2-rank store at
// $RAYLESS_FIXTURE_DIR for the h5py reader to check.
TEST_CASE("store: python fixture", "[.python-fixture]") {
  const char* env = std::getenv("RAYLESS_FIXTURE_DIR");
  REQUIRE(env != nullptr);
  fs::remove_all(env);
  for (int64_t step = 1; step <= 2; ++step)
    for (int64_t rank = 0; rank < 2; ++rank) {
      Rollouts r = make_rollouts(step, rank, 2, 2, rank == 0);
      // values the python side can check without torch: completion i has ids 10*i .. and reward i
      std::vector<int64_t> ids, offsets = {0};
      for (int64_t i = 0; i < r.size(); ++i) {
        for (int64_t j = 0; j <= i; ++j) ids.push_back(10 * i + j);
        offsets.push_back(static_cast<int64_t>(ids.size()));
      }
      r.prompt_ids = torch::randint(65, 91, {r.prompt_ids.size(0)}, torch::kInt64);  // letters for the byte tokenizer
      r.completion_ids = torch::tensor(ids, torch::kInt64);
      r.completion_offsets = torch::tensor(offsets, torch::kInt64);
      const int64_t t = r.completion_ids.size(0);
      r.old_logps = -torch::arange(t, torch::kFloat32) / 10;
      r.entropies = torch::arange(t, torch::kFloat32) / 4;
      r.completion_mask = torch::ones({t}, torch::kBool);
      r.ref_logps = rank == 0 ? -torch::arange(t, torch::kFloat32) / 20 : torch::Tensor();
      r.rewards = torch::arange(r.size(), torch::kFloat32) + 100 * step + 10 * rank;
      if (step == 2) {  // a tool-calling step: the model wrote even token positions, tools the odd ones
        r.tool_mask = torch::arange(t, torch::kInt64).remainder(2).eq(0);
        for (int64_t i = 0; i < r.size(); ++i)
          r.conversations.push_back(nlohmann::ordered_json{{"messages", nlohmann::ordered_json::array({
                                                                {{"role", "assistant"}, {"content", "call " + std::to_string(i)}},
                                                                {{"role", "tool"}, {"name", "add"}, {"content", "é"}}})},
                                                            {"turns", nlohmann::ordered_json::array()},
                                                            {"tool_calls", i},
                                                            {"tool_failures", 0}}
                                        .dump());
      }
      write_rollouts(env, r, make_attrs(2));
    }
  set_rollout_attribute(env, 2, 0, "entropy_threshold", 0.75);
}
