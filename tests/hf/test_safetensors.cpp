#include <catch2/catch.hpp>

#include "model/helpers.h"
#include "rayless/base/error.h"
#include "rayless/hf/safetensors.h"

using namespace rayless;

namespace {
// A safetensors file from a header JSON text and a data section, laid out by hand.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

void expect_input_error_naming(const std::filesystem::path& file, const std::string& fragment) {
  try {
    load_safetensors(file);
    FAIL("no error for " << file);
  } catch (const InputError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find(fragment) != std::string::npos);
  }
}
}  // namespace

TEST_CASE("safetensors round trip keeps dtype, shape and values") {
  auto dir = test::scratch_dir("st-roundtrip");
  auto a = torch::randn({3, 5});
  auto b = torch::randn({7}).to(torch::kBFloat16);
  auto c = torch::randn({2, 2, 2}).to(torch::kFloat16);
  auto empty = torch::zeros({0, 4});
  save_safetensors(dir / "x.safetensors", {{"a", a}, {"b", b}, {"c", c}, {"empty", empty}}, {{"format", "pt"}});
  auto loaded = load_safetensors(dir / "x.safetensors");
  REQUIRE(loaded.size() == 4);
  CHECK(torch::equal(loaded["a"], a));
  CHECK(loaded["b"].scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(loaded["b"], b));
  CHECK(torch::equal(loaded["c"], c));
  CHECK(loaded["empty"].sizes() == empty.sizes());
  // the header is 8-byte aligned, as the reference writer makes it
  const std::string bytes = test::read_bytes(dir / "x.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  CHECK((8 + n) % 8 == 0);
}

TEST_CASE("safetensors reads a file written by the reference library") {
  // written by safetensors.torch.save_file in tools/make_hf_golden.py
  auto tensors = load_safetensors(test::golden_dir() / "processors.safetensors");
  REQUIRE(tensors.count("scores"));
  CHECK(tensors["scores"].dim() == 2);
  CHECK(tensors["scores"].scalar_type() == torch::kFloat32);
}

TEST_CASE("safetensors: broken files are InputErrors naming the file") {
  auto dir = test::scratch_dir("st-broken");
  const std::string good_data(16, '\x01');
  const std::string good_header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  test::write_bytes(dir / "good.safetensors", make_file(good_header, good_data));
  REQUIRE(load_safetensors(dir / "good.safetensors").at("w").numel() == 4);

  test::write_bytes(dir / "tiny.safetensors", "abc");
  expect_input_error_naming(dir / "tiny.safetensors", "not a safetensors file");

  std::string full = make_file(good_header, good_data);
  test::write_bytes(dir / "truncated.safetensors", full.substr(0, full.size() - 5));
  expect_input_error_naming(dir / "truncated.safetensors", "past the data");
  test::write_bytes(dir / "truncated-header.safetensors", full.substr(0, 20));
  expect_input_error_naming(dir / "truncated-header.safetensors", "truncated");

  std::string huge = full;
  huge[7] = '\x7f';
  test::write_bytes(dir / "bad-length.safetensors", huge);
  expect_input_error_naming(dir / "bad-length.safetensors", "header length");

  test::write_bytes(dir / "bad-json.safetensors", make_file(R"({"w": {"dtype": "F32", )", good_data));
  expect_input_error_naming(dir / "bad-json.safetensors", "invalid JSON");

  test::write_bytes(dir / "overlap.safetensors",
                    make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              good_data));
  expect_input_error_naming(dir / "overlap.safetensors", "overlap");

  test::write_bytes(dir / "range.safetensors", make_file(R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", good_data));
  expect_input_error_naming(dir / "range.safetensors", "past the data");

  test::write_bytes(dir / "reversed.safetensors", make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", good_data));
  expect_input_error_naming(dir / "reversed.safetensors", "reversed");

  test::write_bytes(dir / "dtype.safetensors", make_file(R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", good_data));
  expect_input_error_naming(dir / "dtype.safetensors", "unsupported dtype I64");

  test::write_bytes(dir / "shape.safetensors", make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", good_data));
  expect_input_error_naming(dir / "shape.safetensors", "shape/size mismatch");

  test::write_bytes(dir / "negative.safetensors", make_file(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", good_data));
  expect_input_error_naming(dir / "negative.safetensors", "non-negative");

  test::write_bytes(dir / "fields.safetensors", make_file(R"({"w":{"dtype":"F32","shape":[4]}})", good_data));
  expect_input_error_naming(dir / "fields.safetensors", "data_offsets");

  test::write_bytes(dir / "array.safetensors", make_file(R"([1,2,3])", good_data));
  expect_input_error_naming(dir / "array.safetensors", "not a JSON object");

  CHECK_THROWS_AS(load_safetensors(dir / "does-not-exist.safetensors"), InputError);
}

TEST_CASE("safetensors: sharded directory via model.safetensors.index.json") {
  auto dir = test::scratch_dir("st-sharded");
  auto a = torch::randn({4}), b = torch::randn({2, 3});
  save_safetensors(dir / "part-1.safetensors", {{"a", a}});
  save_safetensors(dir / "part-2.safetensors", {{"b", b}});
  write_text_atomically(dir / "model.safetensors.index.json",
                        R"({"metadata":{},"weight_map":{"a":"part-1.safetensors","b":"part-2.safetensors"}})");
  auto loaded = load_safetensors_directory(dir);
  REQUIRE(loaded.size() == 2);
  CHECK(torch::equal(loaded["a"], a));
  CHECK(torch::equal(loaded["b"], b));

  // a tensor the index promises but the shard lacks
  write_text_atomically(dir / "model.safetensors.index.json",
                        R"({"weight_map":{"a":"part-1.safetensors","c":"part-1.safetensors"}})");
  try {
    load_safetensors_directory(dir);
    FAIL("missing tensor not reported");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("missing tensor c") != std::string::npos);
  }
  write_text_atomically(dir / "model.safetensors.index.json", R"({"weight_map":{"a":"../part-1.safetensors"}})");
  CHECK_THROWS_AS(load_safetensors_directory(dir), InputError);
  write_text_atomically(dir / "model.safetensors.index.json", R"({"weight_map": )");
  CHECK_THROWS_AS(load_safetensors_directory(dir), InputError);
}
