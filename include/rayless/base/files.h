// File helpers that keep the "nothing lost" promise: write to a temporary name in the same
// directory, flush, then rename over the target, so readers see the old file or the new one.
#pragma once
#include <filesystem>
#include <functional>
#include <string>

namespace rayless {

// Calls write(tmp_path) then fsyncs and renames tmp_path -> path. On any exception the temporary is
// removed and the old file at `path` is untouched.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(const std::filesystem::path& tmp_path)>& write);
void write_text_atomically(const std::filesystem::path& path, const std::string& text);
// Same for a directory: fill tmp_dir, then rename it to `path` (which must not exist yet).
void write_directory_atomically(const std::filesystem::path& path,
                                const std::function<void(const std::filesystem::path& tmp_dir)>& fill);
std::string read_text_file(const std::filesystem::path& path);  // InputError naming the file if unreadable
void fsync_path(const std::filesystem::path& path);             // file or directory; best effort

}  // namespace rayless
