// The byte offsets of a JSONL file's rows (its non-blank lines) with their line numbers, so that a
// rank reads only the rows it uses instead of holding every row. Built once by one scan and cached in
// a file (16 bytes a row) beside the data, DIR/.rayless-index/NAME.idx, or, where that directory
// cannot be written (a read-only dataset on a cluster), in a fallback directory (the run's
// data-index/). A cached index is reused while the data file keeps its size, its modification time
// and the bytes at its two ends; otherwise it is rebuilt. The cache is mapped, not read: a rank's
// memory holds only the pages of the rows it touches (and those pages are shared by the node's ranks).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace rayless {

// What a cached index is checked against: the file's size, modification time (ns) and a hash of its
// first and last 4 KiB (an edit inside one tick of the clock that keeps the size still shows there
// when it touches either end).
struct FileIdentity {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t ends_hash = 0;
  bool operator==(const FileIdentity& other) const {
    return size == other.size && mtime_ns == other.mtime_ns && ends_hash == other.ends_hash;
  }
  bool operator!=(const FileIdentity& other) const { return !(*this == other); }
};
// InputError naming `file` and `key` (the config key that named it) when it cannot be read.
FileIdentity file_identity(const std::filesystem::path& file, const std::string& key);

class LineIndex {
 public:
  struct Entry {
    uint64_t offset;  // first byte of the row
    uint64_t line;    // 1-based line number (blank lines count)
  };

  // The index of `file`: the cached one when it matches the file, else built now and cached beside
  // the file, else under fallback_dir (empty: no fallback), else held in memory (16 bytes a row).
  static LineIndex open(const std::filesystem::path& file, const std::filesystem::path& fallback_dir,
                        const std::string& key);

  int64_t rows() const { return rows_; }
  Entry entry(int64_t row) const;
  const std::filesystem::path& file() const { return file_; }
  const FileIdentity& identity() const { return identity_; }
  // where the index lives: its cache file, or "" when it is held in memory
  const std::filesystem::path& cache() const { return cache_; }
  bool built() const { return built_; }  // built by open(), not reused

  // The text of `row` without its line end, read from the file. InputError naming the file when it
  // changed since the index was made (its size or modification time differ).
  std::string read_row(int64_t row) const;
  // Rows [begin, end) in order, read sequentially through one buffer: visit(row, line, text).
  void scan(int64_t begin, int64_t end,
            const std::function<void(int64_t row, int64_t line, std::string_view text)>& visit) const;

  // The cache file that belongs to `file` in its own directory, and in `fallback_dir`.
  static std::filesystem::path cache_beside(const std::filesystem::path& file);
  static std::filesystem::path cache_under(const std::filesystem::path& fallback_dir, const std::filesystem::path& file);

  struct Storage;  // the entries: a mapped cache file or a vector (line_index.cpp)

 private:
  std::filesystem::path file_, cache_;
  FileIdentity identity_;
  int64_t rows_ = 0;
  bool built_ = false;
  std::shared_ptr<const Storage> storage_;  // mapped cache file or in-memory entries
};

}  // namespace rayless
