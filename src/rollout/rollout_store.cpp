// The HDF5 rollout store (serial HDF5 C API). One file per rank and step, written under a temporary
// name and renamed; the rank file and the index hold only external links, so they are rebuilt in
// full (cheaply) at every step and a crash at any point leaves the previous good files readable.
#include "rayless/rollout/rollout_store.h"

#include <hdf5.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <exception>
#include <fstream>
#include <iterator>
#include <sstream>
#include <regex>
#include <set>

#include "rayless/base/error.h"
#include "rayless/base/hash.h"
#include "rayless/base/files.h"

namespace fs = std::filesystem;

namespace rayless {
namespace {

// Owns one HDF5 identifier and closes it with the matching call.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_, closer_ = other.closer_, other.id_ = -1;
    }
    return *this;
  }
  ~Handle() { reset(); }
  void reset() {
    if (id_ >= 0) closer_(id_);
    id_ = -1;
  }
  hid_t release() {
    const hid_t id = id_;
    id_ = -1;
    return id;
  }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  operator hid_t() const { return id_; }

 private:
  hid_t id_;
  Closer closer_;
};

// HDF5 prints its error stack on stderr by default; we report one line ourselves instead.
void quiet_hdf5() {
  static const bool once = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)once;
}

void check_h5(herr_t status, const std::string& what) { runtimeCheck(status >= 0, "HDF5: ", what, " failed"); }

std::string pad(int64_t value, int width) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%0*lld", width, static_cast<long long>(value));
  return buffer;
}

std::string rank_dir_name(int64_t rank) { return "rank-" + pad(rank, 5); }
std::string step_file_name(int64_t step) { return "step-" + pad(step, 8) + ".h5"; }

// ---- writing ------------------------------------------------------------------------------------

hid_t memory_type(torch::ScalarType type) {
  switch (type) {
    case torch::kInt64: return H5T_NATIVE_INT64;
    case torch::kInt32: return H5T_NATIVE_INT32;
    case torch::kBool:
    case torch::kUInt8: return H5T_NATIVE_UINT8;
    case torch::kFloat32: return H5T_NATIVE_FLOAT;
    case torch::kFloat64: return H5T_NATIVE_DOUBLE;
    default: throw RuntimeError(str("rollout store: unsupported tensor dtype ", c10::toString(type)));
  }
}

hid_t file_type(torch::ScalarType type) {
  switch (type) {
    case torch::kInt64: return H5T_STD_I64LE;
    case torch::kInt32: return H5T_STD_I32LE;
    case torch::kBool:
    case torch::kUInt8: return H5T_STD_U8LE;
    case torch::kFloat32: return H5T_IEEE_F32LE;
    case torch::kFloat64: return H5T_IEEE_F64LE;
    default: throw RuntimeError(str("rollout store: unsupported tensor dtype ", c10::toString(type)));
  }
}

bool deflate_available() {
  static const bool available = H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0 && H5Zfilter_avail(H5Z_FILTER_SHUFFLE) > 0;
  return available;
}

// Writes a 1-D or 2-D tensor, chunked and deflate-compressed. `disk` overrides the on-disk type
// (token ids are stored as int32: HDF5 converts on write and back on read).
void write_tensor(hid_t group, const std::string& name, torch::Tensor tensor,
                  std::optional<torch::ScalarType> disk = std::nullopt) {
  if (tensor.scalar_type() == torch::kBFloat16 || tensor.scalar_type() == torch::kFloat16)
    tensor = tensor.to(torch::kFloat32);
  tensor = tensor.detach().to(torch::kCPU).contiguous();
  runtimeCheck(tensor.dim() == 1 || tensor.dim() == 2, "rollout store: ", name, " must be 1-D or 2-D");
  std::vector<hsize_t> dims(tensor.sizes().begin(), tensor.sizes().end());
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (tensor.numel() > 0) {
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::min<hsize_t>(dims[0], dims.size() == 1 ? (1u << 16) : std::max<hsize_t>(1, (1u << 16) / dims[1]));
    check_h5(H5Pset_chunk(create, static_cast<int>(chunk.size()), chunk.data()), "H5Pset_chunk " + name);
    if (deflate_available()) {
      check_h5(H5Pset_shuffle(create), "H5Pset_shuffle");
      check_h5(H5Pset_deflate(create, 4), "H5Pset_deflate");
    }
    // a checksum per chunk: damaged bytes in a stored generation fail the read instead of training
    check_h5(H5Pset_fletcher32(create), "H5Pset_fletcher32");
  }
  const torch::ScalarType type = tensor.scalar_type();
  Handle dataset(H5Dcreate2(group, name.c_str(), file_type(disk.value_or(type)), space, H5P_DEFAULT, create, H5P_DEFAULT),
                 H5Dclose);
  runtimeCheck(dataset.valid(), "HDF5: cannot create dataset ", name);
  if (tensor.numel() > 0)
    check_h5(H5Dwrite(dataset, memory_type(type), H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.data_ptr()), "write " + name);
}

Handle utf8_string_type();

// A 1-D dataset of variable-length UTF-8 strings (h5py reads them as str). HDF5 filters do not apply to
// variable-length data (the strings live in the file's heap): the file's checksum block covers them.
void write_strings(hid_t group, const std::string& name, const std::vector<std::string>& values) {
  Handle type = utf8_string_type();
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle dataset(H5Dcreate2(group, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  runtimeCheck(dataset.valid(), "HDF5: cannot create dataset ", name);
  std::vector<const char*> pointers;
  for (const std::string& v : values) pointers.push_back(v.c_str());
  if (n > 0) check_h5(H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()), "write " + name);
}

void write_attr_raw(hid_t object, const std::string& name, hid_t type, hid_t space, const void* data) {
  if (H5Aexists(object, name.c_str()) > 0) check_h5(H5Adelete(object, name.c_str()), "H5Adelete " + name);
  Handle attr(H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  runtimeCheck(attr.valid(), "HDF5: cannot create attribute ", name);
  check_h5(H5Awrite(attr, type, data), "write attribute " + name);
}

void write_attr(hid_t object, const std::string& name, int64_t value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  write_attr_raw(object, name, H5T_NATIVE_INT64, space, &value);
}

void write_attr(hid_t object, const std::string& name, double value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  write_attr_raw(object, name, H5T_NATIVE_DOUBLE, space, &value);
}

Handle utf8_string_type() {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  return type;
}

void write_attr(hid_t object, const std::string& name, const std::string& value) {
  Handle type = utf8_string_type();
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const char* pointer = value.c_str();
  write_attr_raw(object, name, type, space, &pointer);
}

void write_attr(hid_t object, const std::string& name, const std::vector<std::string>& values) {
  Handle type = utf8_string_type();
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  std::vector<const char*> pointers;
  for (const std::string& v : values) pointers.push_back(v.c_str());
  write_attr_raw(object, name, type, space, pointers.data());
}

void write_attr(hid_t object, const std::string& name, const std::vector<double>& values) {
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  write_attr_raw(object, name, H5T_NATIVE_DOUBLE, space, values.data());
}

// ---- the checksum block -------------------------------------------------------------------------
// Every store file begins with a 512-byte HDF5 user block (HDF5 and h5py skip it) that rayless fills
// after the file is closed: "rayless-store 1 fnv1a64 <16 hex digits> <bytes after the block>\n".
// Readers check it before HDF5 sees a byte of the file: libhdf5 is not safe on damaged files (a
// fuzzed step file crashed it inside H5Aiterate2), so a file that changed after rayless wrote it,
// or that rayless did not write, is refused with an InputError instead.
constexpr hsize_t kChecksumBlockBytes = 512;
constexpr const char* kChecksumMagic = "rayless-store 1 fnv1a64 ";

std::string file_bytes_after_block(std::ifstream& in) {
  in.seekg(static_cast<std::streamoff>(kChecksumBlockBytes));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_checksum_block(const fs::path& path) {
  std::string rest;
  {
    std::ifstream in(path, std::ios::binary);
    runtimeCheck(in.good(), "rollout store: cannot reopen ", path.string());
    rest = file_bytes_after_block(in);
  }
  std::string block = str(kChecksumMagic, hex64(fnv1a64(rest.data(), rest.size())), " ", rest.size(), "\n");
  block.resize(kChecksumBlockBytes, '\0');
  errno = 0;
  std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
  out.write(block.data(), static_cast<std::streamsize>(block.size()));
  out.flush();
  ioCheck(out.good(), "cannot write ", path.string());
}

void check_checksum_block(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  inputCheck(in.good(), path, ": cannot open");
  std::string block(kChecksumBlockBytes, '\0');
  in.read(block.data(), static_cast<std::streamsize>(block.size()));
  const std::string magic = kChecksumMagic;
  inputCheck(in.gcount() == static_cast<std::streamsize>(block.size()) && block.compare(0, magic.size(), magic) == 0,
             path, ": not a rayless rollout file, or written by rayless before its checksum block (schema ",
             kRolloutSchemaVersion, "): refused unchecked");
  std::istringstream fields(block.substr(magic.size(), block.find('\n') - magic.size()));
  std::string hash;
  uint64_t size = 0;
  inputCheck(static_cast<bool>(fields >> hash >> size), path, ": damaged checksum block");
  const std::string rest = file_bytes_after_block(in);
  inputCheck(rest.size() == size, path, ": ", rest.size() + kChecksumBlockBytes, " bytes, but rayless wrote ",
             size + kChecksumBlockBytes, " (truncated or appended to)");
  inputCheck(hex64(fnv1a64(rest.data(), rest.size())) == hash, path,
             ": damaged (its checksum does not match: changed after rayless wrote it)");
}

Handle create_file(const fs::path& path) {
  Handle create(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  check_h5(H5Pset_userblock(create, kChecksumBlockBytes), "H5Pset_userblock");
  errno = 0;
  Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, create, H5P_DEFAULT), H5Fclose);
  ioCheck(file.valid(), "HDF5: cannot create ", path.string());
  return file;
}

// Flushes, closes and fills in the checksum block (every writer, creating or editing, ends here).
void close_file(Handle& file, const fs::path& path) {
  errno = 0;
  ioCheck(H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0, "HDF5: cannot flush ", path.string());
  ioCheck(H5Fclose(file.release()) >= 0, "HDF5: cannot close ", path.string());
  write_checksum_block(path);
}

// Steps with a complete step file in dir/rank-RRRRR/ (temporaries never match the pattern).
std::vector<int64_t> steps_on_disk(const fs::path& dir, int64_t rank) {
  std::vector<int64_t> steps;
  const fs::path rank_dir = dir / rank_dir_name(rank);
  std::error_code error;
  if (!fs::is_directory(rank_dir, error)) return steps;
  static const std::regex pattern("step-([0-9]{8})\\.h5");
  for (const auto& entry : fs::directory_iterator(rank_dir)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, pattern)) steps.push_back(std::stoll(match[1]));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void write_rank_file(const fs::path& dir, int64_t rank) {
  const std::vector<int64_t> steps = steps_on_disk(dir, rank);
  write_file_atomically(dir / rank_file_name(rank), [&](const fs::path& tmp) {
    Handle file = create_file(tmp);
    write_attr(file, "schema_version", kRolloutSchemaVersion);
    write_attr(file, "rank", rank);
    for (int64_t step : steps) {
      const std::string target = rank_dir_name(rank) + "/" + step_file_name(step);
      const std::string group = "/" + step_group_name(step);
      check_h5(H5Lcreate_external(target.c_str(), group.c_str(), file, step_group_name(step).c_str(), H5P_DEFAULT,
                                  H5P_DEFAULT),
               "external link " + group);
    }
    close_file(file, tmp);
  });
}

// Ranks that have a directory here, in any world size the run has had (resumes may change it).
int64_t ranks_on_disk(const fs::path& dir) {
  int64_t count = 0;
  static const std::regex pattern("rank-([0-9]{5})");
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(name, match, pattern)) count = std::max<int64_t>(count, std::stoll(match[1]) + 1);
  }
  return count;
}

// Links rank_RRRRR of a step only where that rank wrote the step, so a run whose world size changed
// (2 ranks, then 3, then 1) has an index that lists exactly what exists. The step rank 0 is writing
// now is the exception: every rank of the current world is linked before its file lands (links
// resolve lazily), since the others write theirs at the same time.
void write_index_file(const fs::path& dir, int64_t world_size, int64_t current_step) {
  const std::vector<int64_t> steps = steps_on_disk(dir, 0);
  const int64_t known_ranks = std::max(world_size, ranks_on_disk(dir));
  write_file_atomically(dir / "index.h5", [&](const fs::path& tmp) {
    Handle file = create_file(tmp);
    write_attr(file, "schema_version", kRolloutSchemaVersion);
    write_attr(file, "world_size", world_size);
    for (int64_t step : steps) {
      Handle group(H5Gcreate2(file, step_group_name(step).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      runtimeCheck(group.valid(), "HDF5: cannot create group ", step_group_name(step));
      for (int64_t rank = 0; rank < known_ranks; ++rank) {
        const bool linked = (step == current_step && rank < world_size) || fs::exists(step_file_path(dir.string(), rank, step));
        if (!linked) continue;
        const std::string link = "rank_" + pad(rank, 5);
        const std::string target = "/" + step_group_name(step);
        check_h5(H5Lcreate_external(rank_file_name(rank).c_str(), target.c_str(), group, link.c_str(), H5P_DEFAULT,
                                    H5P_DEFAULT),
                 "external link " + link);
      }
    }
    close_file(file, tmp);
  });
}

// ---- reading ------------------------------------------------------------------------------------

Handle open_file(const std::string& path, unsigned flags = H5F_ACC_RDONLY) {
  quiet_hdf5();
  std::error_code error;
  inputCheck(fs::exists(path, error), path, ": no such rollout file");
  inputCheck(fs::is_regular_file(path, error), path, ": not a file");
  check_checksum_block(path);
  inputCheck(H5Fis_hdf5(path.c_str()) > 0, path, ": not an HDF5 file (corrupt or truncated?)");
  Handle file(H5Fopen(path.c_str(), flags, H5P_DEFAULT), H5Fclose);
  inputCheck(file.valid(), path, ": cannot open as HDF5 (corrupt or truncated?)");
  return file;
}

bool has_link(hid_t group, const std::string& name) { return H5Lexists(group, name.c_str(), H5P_DEFAULT) > 0; }

// A float dataset comes back in the precision it was written in; integers as int64; uint8 as bool.
torch::Tensor read_tensor(hid_t group, const std::string& name, const std::string& where, bool required = true) {
  if (!has_link(group, name)) {
    inputCheck(!required, where, ": dataset ", name, " is missing");
    return torch::Tensor();
  }
  Handle dataset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  inputCheck(dataset.valid(), where, ": cannot open dataset ", name);
  Handle space(H5Dget_space(dataset), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  inputCheck(rank == 1 || rank == 2, where, ": dataset ", name, " has ", rank, " dimensions");
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  Handle type(H5Dget_type(dataset), H5Tclose);
  const H5T_class_t type_class = H5Tget_class(type);
  torch::ScalarType scalar;
  if (type_class == H5T_FLOAT) {
    scalar = H5Tget_size(type) <= 4 ? torch::kFloat32 : torch::kFloat64;
  } else if (type_class == H5T_INTEGER) {
    scalar = H5Tget_size(type) == 1 && H5Tget_sign(type) == H5T_SGN_NONE ? torch::kBool : torch::kInt64;
  } else {
    throw InputError(str(where, ": dataset ", name, " is neither integer nor float"));
  }
  // the shape comes from the file: check it could be stored there before allocating (deflate expands
  // at most ~1032 to 1; a damaged file may claim 2^60 elements)
  uint64_t elements = 1;
  for (hsize_t d : dims) {
    inputCheck(d == 0 || elements <= (uint64_t(1) << 40) / d, where, ": dataset ", name, " claims an impossible shape");
    elements *= d;
  }
  const uint64_t element_bytes = scalar == torch::kBool ? 1 : scalar == torch::kFloat32 ? 4 : 8;
  const uint64_t stored = H5Dget_storage_size(dataset);
  inputCheck(elements * element_bytes <= 1100 * stored + (1u << 20), where, ": dataset ", name, " claims ", elements,
             " elements but stores ", stored, " bytes (corrupt file?)");
  std::vector<int64_t> shape(dims.begin(), dims.end());
  torch::Tensor out = torch::empty(shape, scalar == torch::kBool ? torch::kUInt8 : scalar);
  if (out.numel() > 0)
    inputCheck(H5Dread(dataset, memory_type(out.scalar_type()), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data_ptr()) >= 0,
               where, ": cannot read dataset ", name, " (corrupt?)");
  return scalar == torch::kBool ? out.to(torch::kBool) : out;
}

// A 1-D dataset of variable-length strings; empty when absent.
std::vector<std::string> read_strings(hid_t group, const std::string& name, const std::string& where) {
  std::vector<std::string> out;
  if (!has_link(group, name)) return out;
  Handle dataset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  inputCheck(dataset.valid(), where, ": cannot open dataset ", name);
  Handle space(H5Dget_space(dataset), H5Sclose);
  Handle type(H5Dget_type(dataset), H5Tclose);
  inputCheck(H5Sget_simple_extent_ndims(space) == 1 && H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0,
             where, ": dataset ", name, " is not a list of strings");
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space, &n, nullptr);
  inputCheck(n <= (1u << 24), where, ": dataset ", name, " claims ", n, " strings (corrupt file?)");
  if (n == 0) return out;
  Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(memory, H5T_VARIABLE);
  H5Tset_cset(memory, H5T_CSET_UTF8);
  std::vector<char*> pointers(n, nullptr);
  inputCheck(H5Dread(dataset, memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) >= 0, where,
             ": cannot read dataset ", name, " (corrupt?)");
  for (char* p : pointers) out.emplace_back(p ? p : "");
  H5Dvlen_reclaim(memory, space, H5P_DEFAULT, pointers.data());
  return out;
}

// rayless writes attributes of a few values; a damaged file may claim any size, refused before
// anything is allocated for it
constexpr hssize_t kMaxAttributeValues = 1 << 16;
constexpr size_t kMaxAttributeBytes = 64u << 20;

hssize_t attribute_values(hid_t space, const std::string& where, const std::string& name) {
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  inputCheck(n >= 0 && n <= kMaxAttributeValues, where, ": attribute ", name, " claims ", n,
             " values (corrupt file?)");
  return n;
}

std::vector<std::string> read_string_attr(hid_t attr, const std::string& where, const std::string& name) {
  Handle type(H5Aget_type(attr), H5Tclose);
  Handle space(H5Aget_space(attr), H5Sclose);
  const hssize_t n = attribute_values(space, where, name);
  std::vector<std::string> out;
  if (H5Tis_variable_str(type) > 0) {
    Handle memory = utf8_string_type();
    std::vector<char*> pointers(static_cast<size_t>(std::max<hssize_t>(n, 0)), nullptr);
    if (n > 0) {
      inputCheck(H5Aread(attr, memory, pointers.data()) >= 0, where, ": cannot read attribute ", name);
      for (char* p : pointers) out.emplace_back(p ? p : "");
      H5Dvlen_reclaim(memory, space, H5P_DEFAULT, pointers.data());
    }
  } else {
    const size_t size = H5Tget_size(type);
    inputCheck(size > 0 && size <= kMaxAttributeBytes / static_cast<size_t>(std::max<hssize_t>(n, 1)), where,
               ": attribute ", name, " claims ", n, " strings of ", size, " bytes (corrupt file?)");
    std::vector<char> buffer(size * static_cast<size_t>(std::max<hssize_t>(n, 0)) + 1, '\0');
    if (n > 0) {
      inputCheck(H5Aread(attr, type, buffer.data()) >= 0, where, ": cannot read attribute ", name);
      for (hssize_t i = 0; i < n; ++i) {
        std::string s(buffer.data() + i * size, size);
        out.push_back(s.substr(0, s.find('\0')));
      }
    }
  }
  return out;
}

std::vector<double> read_number_attr(hid_t attr, const std::string& where, const std::string& name) {
  Handle space(H5Aget_space(attr), H5Sclose);
  const hssize_t n = attribute_values(space, where, name);
  std::vector<double> out(static_cast<size_t>(std::max<hssize_t>(n, 0)));
  if (n > 0) inputCheck(H5Aread(attr, H5T_NATIVE_DOUBLE, out.data()) >= 0, where, ": cannot read attribute ", name);
  return out;
}

struct AttrReader {
  std::string where;
  RolloutAttrs* attrs = nullptr;
  int64_t step = -1, rank = -1, schema = -1, policy_version = -1;
  std::exception_ptr error;  // thrown while visiting: carried past HDF5's C frames, rethrown after
};

void visit_attr_or_throw(hid_t object, const char* name_c, AttrReader* reader);

// H5Aiterate2's callback: C code calls it, so no exception may leave it (one that did would skip
// HDF5's own cleanup: found by fuzzing as leaks inside libhdf5)
herr_t visit_attr(hid_t object, const char* name_c, const H5A_info_t*, void* data) {
  auto* reader = static_cast<AttrReader*>(data);
  try {
    visit_attr_or_throw(object, name_c, reader);
    return 0;
  } catch (...) {
    reader->error = std::current_exception();
    return -1;
  }
}

void visit_attr_or_throw(hid_t object, const char* name_c, AttrReader* reader) {
  const std::string name = name_c;
  Handle attr(H5Aopen(object, name_c, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) return;
  Handle type(H5Aget_type(attr), H5Tclose);
  const H5T_class_t type_class = H5Tget_class(type);
  RolloutAttrs& a = *reader->attrs;
  if (type_class == H5T_STRING) {
    std::vector<std::string> values = read_string_attr(attr, reader->where, name);
    if (name == "reward_names") a.reward_names = values;
    else if (name == "config_hash") a.config_hash = values.empty() ? "" : values[0];
    else if (name == "tokenizer_hash") a.tokenizer_hash = values.empty() ? "" : values[0];
    else if (name == "tokenizer") a.tokenizer = values.empty() ? "" : values[0];
    else if (!values.empty()) a.strings[name] = values[0];
  } else if (type_class == H5T_INTEGER || type_class == H5T_FLOAT) {
    std::vector<double> values = read_number_attr(attr, reader->where, name);
    const double first = values.empty() ? std::nan("") : values[0];
    if (name == "reward_weights") a.reward_weights = values;
    else if (name == "world_size") a.world_size = static_cast<int64_t>(first);
    else if (name == "num_generations") a.num_generations = static_cast<int64_t>(first);
    else if (name == "entropy_threshold") a.entropy_threshold = first;
    else if (name == "step") reader->step = static_cast<int64_t>(first);
    else if (name == "rank") reader->rank = static_cast<int64_t>(first);
    else if (name == "schema_version") reader->schema = static_cast<int64_t>(first);
    else if (name == "policy_version") reader->policy_version = static_cast<int64_t>(first);
    else a.numbers[name] = first;
  }
}

Rollouts read_group(hid_t group, const std::string& where, RolloutAttrs* attrs_out) {
  RolloutAttrs attrs;
  AttrReader reader;
  reader.where = where;
  reader.attrs = &attrs;
  hsize_t index = 0;
  const herr_t visited = H5Aiterate2(group, H5_INDEX_NAME, H5_ITER_NATIVE, &index, visit_attr, &reader);
  if (reader.error) std::rethrow_exception(reader.error);
  inputCheck(visited >= 0, where, ": cannot read attributes");
  inputCheck(reader.schema >= 1, where, ": no schema_version attribute (not a rayless rollout group)");
  inputCheck(reader.schema <= kRolloutSchemaVersion, where, ": schema_version ", reader.schema,
             " is newer than this rayless reads (", kRolloutSchemaVersion, ")");
  Rollouts r;
  r.step = reader.step;
  r.rank = reader.rank;
  r.prompt_ids = read_tensor(group, "prompt_ids", where);
  r.prompt_offsets = read_tensor(group, "prompt_offsets", where);
  r.completion_ids = read_tensor(group, "completion_ids", where);
  r.completion_offsets = read_tensor(group, "completion_offsets", where);
  r.group_index = read_tensor(group, "group_index", where);
  r.rewards_per_func = read_tensor(group, "rewards_per_func", where).to(torch::kFloat64);
  r.rewards = read_tensor(group, "rewards", where);
  r.advantages = read_tensor(group, "advantages", where);
  r.old_logps = read_tensor(group, "old_logps", where, false);
  r.entropies = read_tensor(group, "entropies", where, false);
  r.completion_mask = read_tensor(group, "completion_mask", where).to(torch::kBool);
  r.ref_logps = read_tensor(group, "ref_logps", where, false);
  r.truncated = read_tensor(group, "truncated", where).to(torch::kBool);
  r.sampling_logps = read_tensor(group, "sampling_logps", where, false);
  r.nonfinite_logits = read_tensor(group, "nonfinite_logits", where, false);
  if (r.nonfinite_logits.defined()) r.nonfinite_logits = r.nonfinite_logits.to(torch::kBool);
  r.policy_version = reader.policy_version;
  r.tool_mask = read_tensor(group, "tool_mask", where, false);
  if (r.tool_mask.defined()) r.tool_mask = r.tool_mask.to(torch::kBool);
  r.conversations = read_strings(group, "conversations", where);
  r.validate(where);
  if (attrs_out) *attrs_out = std::move(attrs);
  return r;
}

void check_hash(const std::string& what, const std::string& stored, const std::string& expected,
                const std::string& where) {
  if (expected.empty()) return;
  inputCheck(stored == expected, where, ": written under ", what, " ", stored.empty() ? "(none)" : stored,
             " but this run has ", expected, ": the stored rollouts belong to another ",
             what == "config_hash" ? "configuration" : "tokenizer", " (use a fresh output directory)");
}

}  // namespace

// Temporary files a killed writer of this rank left (".step-00000003.h5.tmp.PID" in its directory,
// ".rank-RRRRR.h5.tmp.PID", and rank 0's ".index.h5.tmp.PID"): only this rank writes them, and never
// while it is here, so they go. Readers ignore them anyway; this keeps the disk from filling.
static void clear_leftovers(const fs::path& dir, int64_t rank) {
  static const std::regex temporary("\\..*\\.h5\\.tmp\\.[0-9]+");
  const std::string own_rank_file = "." + rank_file_name(rank) + ".tmp.";
  auto sweep = [&](const fs::path& where, bool everything) {
    std::error_code error;
    std::vector<fs::path> doomed;
    for (const auto& entry : fs::directory_iterator(where, error)) {
      const std::string name = entry.path().filename().string();
      if (!std::regex_match(name, temporary)) continue;
      if (everything || name.rfind(own_rank_file, 0) == 0 || (rank == 0 && name.rfind(".index.h5.tmp.", 0) == 0))
        doomed.push_back(entry.path());
    }
    for (const fs::path& path : doomed) fs::remove(path, error);
  };
  sweep(dir / rank_dir_name(rank), true);
  sweep(dir, false);
}

// ---- public -------------------------------------------------------------------------------------

std::string rank_file_name(int64_t rank) { return "rank-" + pad(rank, 5) + ".h5"; }
std::string step_group_name(int64_t step) { return "step_" + pad(step, 8); }
std::string step_file_path(const std::string& dir, int64_t rank, int64_t step) {
  return (fs::path(dir) / rank_dir_name(rank) / step_file_name(step)).string();
}

void Rollouts::validate(const std::string& where) const {
  inputCheck(group_index.defined() && group_index.dim() == 1, where, ": group_index must be a 1-D tensor [N]");
  const int64_t n = group_index.size(0);
  const auto check_offsets = [&](const torch::Tensor& offsets, const torch::Tensor& ids, const char* name) {
    inputCheck(ids.defined() && ids.dim() == 1, where, ": ", name, "_ids must be a 1-D tensor");
    inputCheck(offsets.defined() && offsets.dim() == 1 && offsets.size(0) == n + 1, where, ": ", name,
               "_offsets must have N + 1 = ", n + 1, " entries");
    const torch::Tensor o = offsets.to(torch::kInt64);
    inputCheck(o[0].item<int64_t>() == 0 && o[n].item<int64_t>() == ids.size(0), where, ": ", name,
               "_offsets must start at 0 and end at ", ids.size(0));
    inputCheck(n == 0 || (o.slice(0, 1) >= o.slice(0, 0, n)).all().item<bool>(), where, ": ", name,
               "_offsets must not decrease");
  };
  check_offsets(prompt_offsets, prompt_ids, "prompt");
  check_offsets(completion_offsets, completion_ids, "completion");
  const int64_t t = completion_ids.size(0);
  inputCheck(rewards_per_func.defined() && rewards_per_func.dim() == 2 && rewards_per_func.size(0) == n, where,
             ": rewards_per_func must be [N = ", n, ", K]");
  for (const auto& [tensor, name] : {std::pair{&rewards, "rewards"}, {&advantages, "advantages"}, {&truncated, "truncated"}})
    inputCheck(tensor->defined() && tensor->dim() == 1 && tensor->size(0) == n, where, ": ", name, " must be [N = ", n, "]");
  inputCheck(!nonfinite_logits.defined() || (nonfinite_logits.dim() == 1 && nonfinite_logits.size(0) == n), where,
             ": nonfinite_logits must be [N = ", n, "]");
  inputCheck(completion_mask.defined() && completion_mask.dim() == 1 && completion_mask.size(0) == t, where,
             ": completion_mask must be [T = ", t, "] like completion_ids");
  inputCheck(conversations.empty() || static_cast<int64_t>(conversations.size()) == n, where,
             ": conversations must have N = ", n, " entries");
  for (const auto& [tensor, name] : {std::pair{&old_logps, "old_logps"}, {&entropies, "entropies"},
                                      {&ref_logps, "ref_logps"}, {&sampling_logps, "sampling_logps"},
                                      {&tool_mask, "tool_mask"}})
    inputCheck(!tensor->defined() || (tensor->dim() == 1 && tensor->size(0) == t), where, ": ", name,
               " must be [T = ", t, "] like completion_ids");
}

void write_rollouts(const std::string& dir_string, const Rollouts& r, const RolloutAttrs& attrs) {
  quiet_hdf5();
  r.validate(str("rollouts of step ", r.step, " rank ", r.rank));
  runtimeCheck(r.rewards_per_func.size(1) == static_cast<int64_t>(attrs.reward_names.size()),
               "rollout store: rewards_per_func has ", r.rewards_per_func.size(1), " columns for ",
               attrs.reward_names.size(), " reward_names");
  for (const torch::Tensor* ids : {&r.prompt_ids, &r.completion_ids})
    runtimeCheck(ids->numel() == 0 || (ids->min().item<int64_t>() >= 0 &&
                                       ids->max().item<int64_t>() <= std::numeric_limits<int32_t>::max()),
                 "rollout store: token ids must be in [0, 2^31)");
  const fs::path dir(dir_string);
  const fs::path step_path = step_file_path(dir_string, r.rank, r.step);
  fs::create_directories(step_path.parent_path());
  clear_leftovers(dir, r.rank);
  write_file_atomically(step_path, [&](const fs::path& tmp) {
    Handle file = create_file(tmp);
    Handle group(H5Gcreate2(file, step_group_name(r.step).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    runtimeCheck(group.valid(), "HDF5: cannot create group ", step_group_name(r.step));
    write_tensor(group, "prompt_ids", r.prompt_ids.to(torch::kInt64), torch::kInt32);
    write_tensor(group, "prompt_offsets", r.prompt_offsets.to(torch::kInt64));
    write_tensor(group, "completion_ids", r.completion_ids.to(torch::kInt64), torch::kInt32);
    write_tensor(group, "completion_offsets", r.completion_offsets.to(torch::kInt64));
    write_tensor(group, "group_index", r.group_index.to(torch::kInt64));
    write_tensor(group, "rewards_per_func", r.rewards_per_func.to(torch::kFloat64));
    write_tensor(group, "rewards", r.rewards);
    write_tensor(group, "advantages", r.advantages);
    if (r.old_logps.defined()) write_tensor(group, "old_logps", r.old_logps);
    if (r.entropies.defined()) write_tensor(group, "entropies", r.entropies);
    write_tensor(group, "completion_mask", r.completion_mask.to(torch::kUInt8));
    if (r.ref_logps.defined()) write_tensor(group, "ref_logps", r.ref_logps);
    if (r.sampling_logps.defined()) write_tensor(group, "sampling_logps", r.sampling_logps);
    write_tensor(group, "truncated", r.truncated.to(torch::kUInt8));
    if (r.nonfinite_logits.defined()) write_tensor(group, "nonfinite_logits", r.nonfinite_logits.to(torch::kUInt8));
    if (r.policy_version >= 0) write_attr(group, "policy_version", r.policy_version);
    if (r.tool_mask.defined()) write_tensor(group, "tool_mask", r.tool_mask.to(torch::kUInt8));
    if (!r.conversations.empty()) write_strings(group, "conversations", r.conversations);
    write_attr(group, "schema_version", kRolloutSchemaVersion);
    write_attr(group, "step", r.step);
    write_attr(group, "rank", r.rank);
    write_attr(group, "world_size", attrs.world_size);
    write_attr(group, "num_generations", attrs.num_generations);
    write_attr(group, "num_completions", r.size());
    write_attr(group, "num_completion_tokens", r.completion_ids.size(0));
    write_attr(group, "reward_names", attrs.reward_names);
    if (!attrs.reward_weights.empty()) write_attr(group, "reward_weights", attrs.reward_weights);
    write_attr(group, "config_hash", attrs.config_hash);
    write_attr(group, "tokenizer_hash", attrs.tokenizer_hash);
    if (!attrs.tokenizer.empty()) write_attr(group, "tokenizer", attrs.tokenizer);
    if (!std::isnan(attrs.entropy_threshold)) write_attr(group, "entropy_threshold", attrs.entropy_threshold);
    for (const auto& [name, value] : attrs.numbers) write_attr(group, name, value);
    for (const auto& [name, value] : attrs.strings) write_attr(group, name, value);
    group.reset();
    close_file(file, tmp);
  });
  write_rank_file(dir, r.rank);
  if (r.rank == 0) write_index_file(dir, attrs.world_size, r.step);
}

namespace {
Rollouts read_step_group(hid_t file, const std::string& group_path, const std::string& where, RolloutAttrs* attrs) {
  Handle group(H5Gopen2(file, group_path.c_str(), H5P_DEFAULT), H5Gclose);
  inputCheck(group.valid(), where, ": cannot open (missing group, or a link to a missing or corrupt file)");
  return read_group(group, where, attrs);
}
}  // namespace

Rollouts read_rollouts(const std::string& dir, int64_t step, int64_t rank, const std::string& expected_config_hash,
                       const std::string& expected_tokenizer_hash, RolloutAttrs* attrs_out) {
  // the step file itself when it is there, so that an error names the file that is damaged; the rank
  // file's link otherwise
  const std::string step_file = step_file_path(dir, rank, step);
  std::error_code error;
  const std::string path = fs::exists(step_file, error) ? step_file : (fs::path(dir) / rank_file_name(rank)).string();
  // opened (and its checksum read) once
  Handle file = open_file(path);
  inputCheck(has_link(file, step_group_name(step)), path, ": no ", step_group_name(step), " (step ", step,
             " was not stored)");
  const std::string where = str(path, ":/", step_group_name(step));
  RolloutAttrs attrs;
  Rollouts r = read_step_group(file, "/" + step_group_name(step), where, &attrs);
  check_hash("config_hash", attrs.config_hash, expected_config_hash, where);
  check_hash("tokenizer_hash", attrs.tokenizer_hash, expected_tokenizer_hash, where);
  inputCheck(r.step == step && r.rank == rank, where, ": holds step ", r.step, " rank ", r.rank, ", expected step ",
             step, " rank ", rank);
  if (attrs_out) *attrs_out = std::move(attrs);
  return r;
}

Rollouts read_rollout_entry(const RolloutEntry& entry, RolloutAttrs* attrs) {
  Handle file = open_file(entry.file);
  return read_step_group(file, entry.group, str(entry.file, ":", entry.group), attrs);
}

void set_rollout_attribute(const std::string& dir, int64_t step, int64_t rank, const std::string& name, double value) {
  quiet_hdf5();
  const fs::path path = step_file_path(dir, rank, step);
  inputCheck(fs::exists(path), path.string(), ": no such rollout file (step ", step, " rank ", rank, ")");
  check_checksum_block(path.string());
  write_file_atomically(path, [&](const fs::path& tmp) {
    fs::copy_file(path, tmp, fs::copy_options::overwrite_existing);
    Handle file(H5Fopen(tmp.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    runtimeCheck(file.valid(), "HDF5: cannot open ", tmp.string());
    {
      Handle group(H5Gopen2(file, step_group_name(step).c_str(), H5P_DEFAULT), H5Gclose);
      runtimeCheck(group.valid(), "HDF5: ", path.string(), " has no ", step_group_name(step));
      write_attr(group, name, value);
    }
    close_file(file, tmp);
  });
}

namespace {

struct LinkNames {
  std::vector<std::string> names;
};

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<LinkNames*>(data)->names.emplace_back(name);
  return 0;
}

std::vector<std::string> link_names(hid_t group) {
  LinkNames out;
  hsize_t index = 0;
  H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &index, collect_link, &out);
  return out.names;
}

bool parse_numbered(const std::string& name, const std::string& prefix, size_t digits, int64_t* value) {
  if (name.size() != prefix.size() + digits || name.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = prefix.size(); i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  *value = std::stoll(name.substr(prefix.size()));
  return true;
}

// Whether rank-RRRRR.h5 beside the index links `step_name` (each rank file read once).
bool rank_has_step(const fs::path& dir, int64_t rank, const std::string& step_name,
                   std::map<int64_t, std::set<std::string>>& rank_steps) {
  auto it = rank_steps.find(rank);
  if (it == rank_steps.end()) {
    std::set<std::string> names;
    const fs::path rank_path = dir / rank_file_name(rank);
    if (fs::exists(rank_path)) {
      Handle rank_file = open_file(rank_path.string());
      if (rank_file.valid())
        for (const std::string& n : link_names(rank_file)) {
          int64_t step = 0;
          if (parse_numbered(n, "step_", 8, &step) && fs::exists(dir / rank_dir_name(rank) / step_file_name(step)))
            names.insert(n);
        }
    }
    it = rank_steps.emplace(rank, std::move(names)).first;
  }
  return it->second.count(step_name) > 0;
}

void list_file(const std::string& path, std::vector<RolloutEntry>& out) {
  std::map<int64_t, std::set<std::string>> rank_steps;
  Handle file = open_file(path);
  const bool is_index = H5Aexists(file, "world_size") > 0;
  int64_t file_rank = -1;
  if (H5Aexists(file, "rank") > 0) {
    Handle attr(H5Aopen(file, "rank", H5P_DEFAULT), H5Aclose);
    H5Aread(attr, H5T_NATIVE_INT64, &file_rank);
  }
  size_t groups = 0;
  for (const std::string& name : link_names(file)) {
    int64_t step = 0;
    if (!parse_numbered(name, "step_", 8, &step)) continue;
    ++groups;
    if (is_index) {
      // the index's step groups are real groups holding links named rank_RRRRR; a link whose rank
      // never wrote the step (an index written before links followed the files) is left out
      Handle group(H5Gopen2(file, name.c_str(), H5P_DEFAULT), H5Gclose);
      inputCheck(group.valid(), path, ":/", name, ": cannot open");
      for (const std::string& child : link_names(group)) {
        int64_t rank = 0;
        if (!parse_numbered(child, "rank_", 5, &rank)) continue;
        if (!rank_has_step(fs::path(path).parent_path(), rank, name, rank_steps)) continue;
        // the step file itself, checked when it is opened, rather than HDF5 following the index's
        // link into a file it has not seen checked
        out.push_back({step, rank, step_file_path(fs::path(path).parent_path().string(), rank, step), "/" + name});
      }
    } else {
      int64_t rank = file_rank;
      if (rank < 0) {  // a step file: the rank is an attribute of the group
        Handle group(H5Gopen2(file, name.c_str(), H5P_DEFAULT), H5Gclose);
        inputCheck(group.valid(), path, ":/", name, ": cannot open");
        if (H5Aexists(group, "rank") > 0) {
          Handle attr(H5Aopen(group, "rank", H5P_DEFAULT), H5Aclose);
          H5Aread(attr, H5T_NATIVE_INT64, &rank);
        }
      }
      const std::string step_file = step_file_path(fs::path(path).parent_path().string(), rank, step);
      if (file_rank >= 0 && fs::exists(step_file))
        out.push_back({step, rank, step_file, "/" + name});  // a rank file's link, resolved (as above)
      else
        out.push_back({step, rank, path, "/" + name});
    }
  }
  inputCheck(groups > 0 || H5Aexists(file, "schema_version") > 0, path,
             ": not a rayless rollout file (no step_SSSSSSSS groups, no schema_version)");
}

}  // namespace

std::vector<RolloutEntry> list_rollouts(const std::string& path) {
  quiet_hdf5();
  std::error_code error;
  inputCheck(fs::exists(path, error), path, ": no such file or directory");
  std::vector<RolloutEntry> out;
  if (fs::is_directory(path, error)) {
    fs::path dir(path);
    if (!fs::exists(dir / "index.h5") && fs::is_directory(dir / "rollouts")) dir /= "rollouts";
    if (fs::exists(dir / "index.h5")) {
      list_file((dir / "index.h5").string(), out);
    } else {
      std::vector<std::string> rank_files;
      for (const auto& entry : fs::directory_iterator(dir)) {
        int64_t rank = 0;
        const std::string name = entry.path().filename().string();
        if (name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0 &&
            parse_numbered(name.substr(0, name.size() - 3), "rank-", 5, &rank))
          rank_files.push_back(entry.path().string());
      }
      inputCheck(!rank_files.empty(), path, ": no rollout store here (no index.h5, rollouts/ or rank-RRRRR.h5)");
      for (const std::string& file : rank_files) list_file(file, out);
    }
  } else {
    list_file(path, out);
  }
  std::sort(out.begin(), out.end(), [](const RolloutEntry& a, const RolloutEntry& b) {
    return a.step != b.step ? a.step < b.step : a.rank < b.rank;
  });
  return out;
}

}  // namespace rayless
