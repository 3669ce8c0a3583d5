// Safetensors reader/writer. The reader maps the file read-only and validates the whole header
// (lengths, JSON, dtypes, shapes, offsets in range and not overlapping) before copying any data.
#include "rayless/hf/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "rayless/base/error.h"
#include "rayless/base/files.h"

namespace rayless {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit

int64_t dtype_size(const std::string& dtype) {
  if (dtype == "F64") return 8;
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

torch::Dtype torch_dtype(const std::string& dtype) {
  if (dtype == "F64") return torch::kFloat64;
  if (dtype == "F32") return torch::kFloat32;
  if (dtype == "BF16") return torch::kBFloat16;
  return torch::kFloat16;
}

std::string safetensors_dtype(torch::Dtype dtype, const std::string& name) {
  if (dtype == torch::kFloat64) return "F64";
  if (dtype == torch::kFloat32) return "F32";
  if (dtype == torch::kBFloat16) return "BF16";
  if (dtype == torch::kFloat16) return "F16";
  throw InputError(str("safetensors: tensor ", name, " has unsupported dtype ", c10::toString(dtype)));
}

// A read-only mapping of a whole file, unmapped on destruction.
struct MappedFile {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  explicit MappedFile(const std::filesystem::path& file) {
    const int fd = ::open(file.c_str(), O_RDONLY);
    inputCheck(fd >= 0, file.string(), ": cannot open safetensors file: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw InputError(str(file.string(), ": cannot stat safetensors file"));
    }
    size = static_cast<uint64_t>(st.st_size);
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      ::close(fd);
      inputCheck(p != MAP_FAILED, file.string(), ": cannot map safetensors file: ", std::strerror(errno));
      data = static_cast<const uint8_t*>(p);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data) ::munmap(const_cast<uint8_t*>(data), size);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
};

struct Header {
  std::map<std::string, SafetensorsEntry> entries;
  uint64_t data_start = 0;
};

Header parse_header(const std::filesystem::path& file, const uint8_t* data, uint64_t size) {
  const std::string where = file.string();
  inputCheck(size >= 8, where, ": not a safetensors file (", size, " bytes, shorter than the 8-byte header length)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];  // little-endian
  inputCheck(header_len <= kMaxHeaderBytes, where, ": corrupt safetensors header length ", header_len);
  inputCheck(header_len <= size - 8, where, ": truncated safetensors file: header length ", header_len,
             " but only ", size - 8, " bytes follow");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(data + 8, data + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(where, ": corrupt safetensors header (invalid JSON: ", e.what(), ")"));
  }
  inputCheck(json.is_object(), where, ": corrupt safetensors header (not a JSON object)");
  Header header;
  header.data_start = 8 + header_len;
  const uint64_t data_size = size - header.data_start;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      inputCheck(it->is_object(), where, ": __metadata__ must be an object of strings");
      continue;
    }
    const auto& v = *it;
    const std::string at = str(where, ": tensor ", name, ": ");
    inputCheck(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), at,
               "needs dtype, shape and data_offsets");
    inputCheck(v["dtype"].is_string(), at, "dtype must be a string");
    SafetensorsEntry e;
    e.dtype = v["dtype"].get<std::string>();
    const int64_t elem = dtype_size(e.dtype);
    inputCheck(elem > 0, at, "unsupported dtype ", e.dtype, " (supported: F64, F32, BF16, F16)");
    inputCheck(v["shape"].is_array(), at, "shape must be an array");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      inputCheck(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), at,
                 "shape entries must be non-negative integers");
      const uint64_t n = d.get<uint64_t>();
      inputCheck(n == 0 || numel <= (uint64_t(1) << 62) / n, at, "shape too large");
      numel *= n;
      e.shape.push_back(static_cast<int64_t>(n));
    }
    const auto& off = v["data_offsets"];
    inputCheck(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), at,
               "data_offsets must be two non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    inputCheck(e.begin <= e.end, at, "data_offsets [", e.begin, ", ", e.end, "] are reversed");
    inputCheck(e.end <= data_size, at, "data_offsets end ", e.end, " is past the data (", data_size,
               " bytes; truncated file?)");
    inputCheck(e.end - e.begin == numel * static_cast<uint64_t>(elem), at, "shape/size mismatch: ", numel,
               " elements of ", e.dtype, " need ", numel * elem, " bytes, offsets give ", e.end - e.begin);
    ranges.emplace_back(e.begin, e.end);
    header.entries.emplace(name, std::move(e));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    inputCheck(ranges[i].first >= ranges[i - 1].second, where, ": corrupt safetensors header: tensor data ranges [",
               ranges[i - 1].first, ", ", ranges[i - 1].second, ") and [", ranges[i].first, ", ", ranges[i].second,
               ") overlap");
  }
  return header;
}

}  // namespace

std::map<std::string, SafetensorsEntry> read_safetensors_header(const std::filesystem::path& file) {
  MappedFile mapped(file);
  return parse_header(file, mapped.data, mapped.size).entries;
}

std::map<std::string, torch::Tensor> load_safetensors(const std::filesystem::path& file) {
  MappedFile mapped(file);
  const Header header = parse_header(file, mapped.data, mapped.size);
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, e] : header.entries) {
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(torch_dtype(e.dtype)));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), mapped.data + header.data_start + e.begin, e.end - e.begin);
    out.emplace(name, std::move(t));
  }
  return out;
}

bool has_safetensors(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "model.safetensors") || std::filesystem::exists(dir / "model.safetensors.index.json");
}

std::map<std::string, torch::Tensor> load_safetensors_directory(const std::filesystem::path& dir) {
  const auto single = dir / "model.safetensors";
  const auto index_file = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(single)) return load_safetensors(single);
  if (!std::filesystem::exists(index_file)) return {};
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text_file(index_file));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(index_file.string(), ": invalid JSON: ", e.what()));
  }
  inputCheck(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), index_file.string(),
             ": missing object \"weight_map\"");
  std::map<std::string, std::set<std::string>> names_by_shard;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    inputCheck(it->is_string(), index_file.string(), ": weight_map[\"", it.key(), "\"] must be a file name");
    const std::string shard = it->get<std::string>();
    inputCheck(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(), index_file.string(),
               ": weight_map[\"", it.key(), "\"] names a file outside the directory: ", shard);
    names_by_shard[shard].insert(it.key());
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& [shard, names] : names_by_shard) {
    auto tensors = load_safetensors(dir / shard);
    for (const auto& name : names) {
      auto found = tensors.find(name);
      inputCheck(found != tensors.end(), (dir / shard).string(), ": missing tensor ", name, " (listed in ",
                 index_file.filename().string(), ")");
      out.emplace(name, found->second);
    }
  }
  return out;
}

void save_safetensors(const std::filesystem::path& file, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const std::string dtype = safetensors_dtype(t.scalar_type(), name);
    const uint64_t bytes = t.numel() * t.element_size();
    header[name] = {{"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(t);
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // align the data section, as the reference writer does
  write_file_atomically(file, [&](const std::filesystem::path& tmp) {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary);
    ioCheck(out.good(), "cannot write ", tmp.string());
    uint8_t len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : contiguous)
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
    out.flush();
    ioCheck(out.good(), "write failed: ", tmp.string());
  });
}

}  // namespace rayless
