// TensorBoard scalars without protobuf or TensorFlow: an event file is a sequence of TFRecords,
// each holding one serialized `Event` proto, and scalars only need a handful of its fields, so the
// few bytes of proto wire format are written by hand (see tensorboard.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace rayless {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord framing uses.
uint32_t crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates log_dir if needed and opens events.out.tfevents.<unix seconds>.<hostname>.<pid>.0 in it,
  // the name TensorBoard's own writers use, so it finds and orders the file like theirs.
  explicit TensorBoardWriter(const std::filesystem::path& log_dir);

  // One Event at `step` with one scalar per entry (NaN and inf skipped); flushed before returning.
  void add_scalars(int64_t step, const std::map<std::string, double>& values);

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace rayless
