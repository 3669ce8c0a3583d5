#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "rayless/trainer/tensorboard.h"

namespace fs = std::filesystem;
using namespace rayless;

namespace {

uint64_t read_le(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = 0; i < width; ++i) value |= uint64_t(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return value;
}

uint32_t masked(const std::string& bytes, size_t at, size_t size) {
  const uint32_t crc = crc32c(bytes.data() + at, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Splits a TFRecord file into its records' data, checking every length and CRC on the way.
std::vector<std::string> read_records(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    REQUIRE(at + 12 <= bytes.size());
    const uint64_t length = read_le(bytes, at, 8);
    REQUIRE(read_le(bytes, at + 8, 4) == masked(bytes, at, 8));
    REQUIRE(at + 12 + length + 4 <= bytes.size());
    REQUIRE(read_le(bytes, at + 12 + length, 4) == masked(bytes, at + 12, length));
    records.push_back(bytes.substr(at + 12, length));
    at += 12 + length + 4;
  }
  return records;
}

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("rayless-" + name + "-" +
                        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("tensorboard: crc32c is the Castagnoli checksum") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
}

TEST_CASE("tensorboard: first record is the file version, framing checks out") {
  const fs::path dir = fresh_dir("tb-version") / "nested";
  {
    TensorBoardWriter writer(dir);
    CHECK(writer.path().parent_path() == dir);
    CHECK(writer.path().filename().string().rfind("events.out.tfevents.", 0) == 0);
    CHECK(writer.path().filename().string().substr(writer.path().filename().string().size() - 2) == ".0");
    // Readable before the writer closes: each record is flushed.
    const auto records = read_records(writer.path());
    REQUIRE(records.size() == 1);
    const std::string& event = records[0];
    CHECK(static_cast<unsigned char>(event[0]) == ((1 << 3) | 1));  // wall_time, fixed64
    double wall_time;
    std::memcpy(&wall_time, event.data() + 1, 8);
    CHECK(wall_time > 1.6e9);
    CHECK(event.find(std::string("\x1a\x0d") + "brain.Event:2") != std::string::npos);  // field 3, 13 bytes
  }
  fs::remove_all(dir.parent_path());
}

TEST_CASE("tensorboard: scalars are written one event per call, NaN and inf skipped") {
  const fs::path dir = fresh_dir("tb-scalars");
  fs::path path;
  {
    TensorBoardWriter writer(dir);
    path = writer.path();
    writer.add_scalars(3, {{"train/loss", 0.5},
                           {"train/reward", std::numeric_limits<double>::quiet_NaN()},
                           {"train/kl", std::numeric_limits<double>::infinity()}});
    writer.add_scalars(300, {{"train/loss", 0.25}});
  }
  const auto records = read_records(path);
  REQUIRE(records.size() == 3);
  const std::string& first = records[1];
  CHECK(first.find("train/loss") != std::string::npos);
  CHECK(first.find("train/reward") == std::string::npos);
  CHECK(first.find("train/kl") == std::string::npos);
  CHECK(count(first, "\x10\x03") == 1);  // step = 3 as field 2 varint
  // Value{tag = 1, simple_value = 2 as float}: "\x15" then 0.5f little-endian.
  float half = 0.5f;
  std::string half_bytes(4, '\0');
  std::memcpy(&half_bytes[0], &half, 4);
  CHECK(first.find("train/loss\x15" + half_bytes) != std::string::npos);
  CHECK(records[2].find(std::string("\x10\xac\x02")) != std::string::npos);  // step 300 as a 2-byte varint
  fs::remove_all(dir);
}
