#include "rayless/trainer/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>

#include "rayless/base/error.h"

namespace fs = std::filesystem;

namespace rayless {
namespace {

// Proto wire types (the low 3 bits of a field key).
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
      t[i] = crc;
    }
    return t;
  }();
  return table;
}

// TFRecord stores a rotated-and-offset CRC: a CRC of data that itself contains CRCs is weak.
uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Little-endian on every host: TFRecord fixes the byte order, the proto fixed types too.
void put_fixed(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_fixed(out, bits, 4);
}

// Strings and embedded messages are both length-delimited bytes.
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event fields: wall_time = 1, step = 2, file_version = 3, summary = 5.
std::string event_header(int64_t step) {
  const double wall_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string event;
  put_double(event, 1, wall_time);
  put_key(event, 2, kVarint);
  put_varint(event, static_cast<uint64_t>(step));  // int64 negatives are 10-byte two's complement
  return event;
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto& table = crc32c_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

TensorBoardWriter::TensorBoardWriter(const fs::path& log_dir) {
  std::error_code error;
  fs::create_directories(log_dir, error);
  runtimeCheck(!error && fs::is_directory(log_dir), "cannot create TensorBoard directory ", log_dir.string(),
               error ? ": " + error.message() : std::string());
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  path_ = log_dir / str("events.out.tfevents.", seconds, ".", host_name(), ".", getpid(), ".0");
  out_.open(path_, std::ios::binary | std::ios::trunc);
  runtimeCheck(out_.is_open(), "cannot open TensorBoard event file ", path_.string());

  // TensorBoard reads the version from the first record to know the file's format.
  std::string event = event_header(0);
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::map<std::string, double>& values) {
  // Summary { repeated Value value = 1 }, Value { tag = 1, simple_value = 2 (float) }.
  std::string summary;
  for (const auto& [tag, value] : values) {
    if (!std::isfinite(value)) continue;
    std::string entry;
    put_bytes(entry, 1, tag);
    put_float(entry, 2, static_cast<float>(value));
    put_bytes(summary, 1, entry);
  }
  std::string event = event_header(step);
  put_bytes(event, 5, summary);
  write_record(event);
}

// TFRecord: uint64 length, masked CRC of those 8 bytes, the data, masked CRC of the data.
void TensorBoardWriter::write_record(const std::string& data) {
  std::string record;
  put_fixed(record, data.size(), 8);
  put_fixed(record, masked_crc32c(record.data(), 8), 4);
  record += data;
  put_fixed(record, masked_crc32c(data.data(), data.size()), 4);
  // Flushed per record so a preempted or killed job leaves every step it logged readable.
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  out_.flush();
  runtimeCheck(out_.good(), "cannot write TensorBoard event file ", path_.string());
}

}  // namespace rayless
