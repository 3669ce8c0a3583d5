#include "rayless/prompts/line_index.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/base/hash.h"

namespace fs = std::filesystem;

namespace rayless {
namespace {

constexpr char kMagic[8] = {'R', 'L', 'X', 'I', 'D', 'X', '0', '1'};
constexpr uint64_t kVersion = 1;
constexpr int64_t kEndBytes = 4096;    // hashed at each end of the file
constexpr size_t kScanBlock = 1 << 20;  // bytes read at a time when scanning

// The cache file: this header, then rows x Entry.
struct Header {
  char magic[8];
  uint64_t version;
  uint64_t size;
  int64_t mtime_ns;
  uint64_t ends_hash;
  uint64_t rows;
  uint64_t reserved[2];
};
static_assert(sizeof(Header) == 64, "the cache header is 64 bytes");
static_assert(sizeof(LineIndex::Entry) == 16, "an entry is 16 bytes");

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// pread until `size` bytes or the end of the file; the bytes read.
size_t read_at(int fd, char* out, size_t size, uint64_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

FileIdentity identity_of(int fd, const struct stat& st) {
  FileIdentity id;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const int64_t size = static_cast<int64_t>(st.st_size);
  const int64_t head = std::min(size, kEndBytes), tail = std::min(size - head, kEndBytes);
  std::string ends(static_cast<size_t>(head + tail), '\0');
  read_at(fd, ends.data(), static_cast<size_t>(head), 0);
  read_at(fd, ends.data() + head, static_cast<size_t>(tail), static_cast<uint64_t>(size - tail));
  id.ends_hash = fnv1a64(ends.data(), ends.size());
  return id;
}

// Walks `fd` from `offset` (line number `line` there) and calls found(offset, line, text) for every
// non-blank line, as std::getline reads them: a trailing '\r' is dropped and a line of only spaces
// and tabs is blank. Stops after `limit` rows (-1: at the end of the file).
void walk_lines(int fd, uint64_t offset, uint64_t line, int64_t limit,
                const std::function<void(uint64_t, uint64_t, std::string_view)>& found) {
  std::vector<char> block(limit == 1 ? 4096 : kScanBlock);  // one row: a small read, usually whole
  std::string pending;  // the start of a line that runs past the block
  uint64_t line_start = offset;
  int64_t emitted = 0;
  auto finish_line = [&](std::string_view text) {
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find_first_not_of(" \t") != std::string_view::npos) {
      found(line_start, line, text);
      ++emitted;
    }
    ++line;
  };
  uint64_t at = offset;
  while (limit < 0 || emitted < limit) {
    const size_t n = read_at(fd, block.data(), block.size(), at);
    if (n == 0) break;
    size_t begin = 0;
    for (size_t i = 0; i < n && (limit < 0 || emitted < limit); ++i) {
      if (block[i] != '\n') continue;
      if (pending.empty()) {
        finish_line(std::string_view(block.data() + begin, i - begin));
      } else {
        pending.append(block.data() + begin, i - begin);
        finish_line(pending);
        pending.clear();
      }
      begin = i + 1;
      line_start = at + begin;
    }
    if (limit >= 0 && emitted >= limit) return;
    pending.append(block.data() + begin, n - begin);
    at += n;
  }
  if (!pending.empty() && (limit < 0 || emitted < limit)) finish_line(pending);
}

Fd open_data(const fs::path& file, const std::string& key) {
  Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  inputCheck(fd.fd >= 0, file.string(), ": cannot open prompt dataset (", key, "): ", std::strerror(errno));
  return Fd(std::exchange(fd.fd, -1));
}

}  // namespace

struct LineIndex::Storage {
  void* mapped = nullptr;
  size_t mapped_bytes = 0;
  std::vector<Entry> in_memory;
  const Entry* entries = nullptr;
  ~Storage() {
    if (mapped) ::munmap(mapped, mapped_bytes);
  }
};

FileIdentity file_identity(const fs::path& file, const std::string& key) {
  Fd fd = open_data(file, key);
  struct stat st {};
  inputCheck(::fstat(fd.fd, &st) == 0 && S_ISREG(st.st_mode), file.string(), ": not a regular file (", key, ")");
  return identity_of(fd.fd, st);
}

fs::path LineIndex::cache_beside(const fs::path& file) {
  return file.parent_path() / ".rayless-index" / (file.filename().string() + ".idx");
}

fs::path LineIndex::cache_under(const fs::path& fallback_dir, const fs::path& file) {
  std::error_code error;
  const std::string absolute = fs::weakly_canonical(fs::absolute(file), error).string();
  return fallback_dir / (fnv1a64_hex(absolute).substr(0, 12) + "-" + file.filename().string() + ".idx");
}

namespace {

// The mapped cache file when it exists and matches `identity`, else null.
std::shared_ptr<LineIndex::Storage> map_cache(const fs::path& cache, const FileIdentity& identity, int64_t& rows) {
  Fd fd(::open(cache.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return nullptr;
  struct stat st {};
  Header header{};
  if (::fstat(fd.fd, &st) != 0 || read_at(fd.fd, reinterpret_cast<char*>(&header), sizeof header, 0) != sizeof header)
    return nullptr;
  if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0 || header.version != kVersion ||
      header.size != identity.size || header.mtime_ns != identity.mtime_ns || header.ends_hash != identity.ends_hash ||
      static_cast<uint64_t>(st.st_size) != sizeof(Header) + header.rows * sizeof(LineIndex::Entry))
    return nullptr;
  auto storage = std::make_shared<LineIndex::Storage>();
  storage->mapped_bytes = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, storage->mapped_bytes, PROT_READ, MAP_SHARED, fd.fd, 0);
  if (base == MAP_FAILED) return nullptr;
  storage->mapped = base;
  storage->entries = reinterpret_cast<const LineIndex::Entry*>(static_cast<const char*>(base) + sizeof(Header));
  rows = static_cast<int64_t>(header.rows);
  return storage;
}

// One scan of the data file into the cache file (atomically: a reader sees the old cache or the new).
void write_cache(const fs::path& cache, int data_fd, const FileIdentity& identity) {
  write_file_atomically(cache, [&](const fs::path& tmp) {
    errno = 0;
    Fd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ioCheck(out.fd >= 0, "cannot create ", tmp.string());
    std::vector<LineIndex::Entry> buffer;
    buffer.reserve(kScanBlock / sizeof(LineIndex::Entry));
    uint64_t written = sizeof(Header), rows = 0;
    auto flush = [&] {
      const size_t bytes = buffer.size() * sizeof(LineIndex::Entry);
      errno = 0;
      ioCheck(::pwrite(out.fd, buffer.data(), bytes, static_cast<off_t>(written)) == static_cast<ssize_t>(bytes),
              "cannot write ", tmp.string());
      written += bytes;
      buffer.clear();
    };
    walk_lines(data_fd, 0, 1, -1, [&](uint64_t offset, uint64_t line, std::string_view) {
      buffer.push_back({offset, line});
      ++rows;
      if (buffer.size() == buffer.capacity()) flush();
    });
    flush();
    Header header{};
    std::memcpy(header.magic, kMagic, sizeof kMagic);
    header.version = kVersion;
    header.size = identity.size;
    header.mtime_ns = identity.mtime_ns;
    header.ends_hash = identity.ends_hash;
    header.rows = rows;
    errno = 0;
    ioCheck(::pwrite(out.fd, &header, sizeof header, 0) == static_cast<ssize_t>(sizeof header), "cannot write ", tmp.string());
  });
}

}  // namespace

LineIndex LineIndex::open(const fs::path& file, const fs::path& fallback_dir, const std::string& key) {
  LineIndex index;
  index.file_ = file;
  Fd fd = open_data(file, key);
  struct stat st {};
  inputCheck(::fstat(fd.fd, &st) == 0 && S_ISREG(st.st_mode), file.string(), ": not a regular file (", key, ")");
  index.identity_ = identity_of(fd.fd, st);
  std::vector<fs::path> places = {cache_beside(file)};
  if (!fallback_dir.empty()) places.push_back(cache_under(fallback_dir, file));
  for (const fs::path& place : places)
    if (auto storage = map_cache(place, index.identity_, index.rows_)) {
      index.storage_ = std::move(storage);
      index.cache_ = place;
      return index;
    }
  index.built_ = true;
  for (const fs::path& place : places) {
    try {
      write_cache(place, fd.fd, index.identity_);
    } catch (const std::exception&) {
      continue;  // not writable here (a read-only dataset directory): the next place
    }
    if (auto storage = map_cache(place, index.identity_, index.rows_)) {
      index.storage_ = std::move(storage);
      index.cache_ = place;
      return index;
    }
  }
  // nowhere to write: in memory
  auto storage = std::make_shared<Storage>();
  walk_lines(fd.fd, 0, 1, -1, [&](uint64_t offset, uint64_t line, std::string_view) { storage->in_memory.push_back({offset, line}); });
  storage->entries = storage->in_memory.data();
  index.rows_ = static_cast<int64_t>(storage->in_memory.size());
  index.storage_ = std::move(storage);
  return index;
}

LineIndex::Entry LineIndex::entry(int64_t row) const {
  runtimeCheck(row >= 0 && row < rows_, "line index: row ", row, " outside 0..", rows_ - 1, " of ", file_.string());
  return storage_->entries[row];
}

namespace {
// The data file, checked against the identity the index was made for (size and mtime: a cheap fstat).
Fd open_unchanged(const fs::path& file, const FileIdentity& identity) {
  Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  const bool same = fd.fd >= 0 && ::fstat(fd.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == identity.size &&
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec == identity.mtime_ns;
  inputCheck(same, file.string(), ": the prompt dataset changed while the run was using it (",
             fd.fd < 0 ? std::string("it cannot be opened") : std::string("its size or modification time differ"),
             "); restart the run to index it again");
  return Fd(std::exchange(fd.fd, -1));
}
}  // namespace

std::string LineIndex::read_row(int64_t row) const {
  const Entry e = entry(row);
  Fd fd = open_unchanged(file_, identity_);
  std::string text;
  walk_lines(fd.fd, e.offset, e.line, 1, [&](uint64_t, uint64_t, std::string_view found) { text = found; });
  return text;
}

void LineIndex::scan(int64_t begin, int64_t end,
                     const std::function<void(int64_t row, int64_t line, std::string_view text)>& visit) const {
  if (begin >= end) return;
  const Entry first = entry(begin);
  Fd fd = open_unchanged(file_, identity_);
  int64_t row = begin;
  walk_lines(fd.fd, first.offset, first.line, end - begin, [&](uint64_t, uint64_t line, std::string_view text) {
    visit(row++, static_cast<int64_t>(line), text);
  });
}

}  // namespace rayless
