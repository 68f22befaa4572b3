// File helpers shared by every reader and writer: whole-file reads, read-only memory maps, and
// atomic writes (write to "<path>.tmp.<pid>", fsync, rename) so that no output is ever half-written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ss {

// Reads a whole file; throws ss::Error naming the path if it cannot.
std::string ReadFile(const std::string& path);

// A read-only memory map of a whole file. Keep the shared_ptr alive while views into it are used.
struct MappedFile {
  std::string path;
  const uint8_t* data = nullptr;
  size_t size = 0;
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
};
std::shared_ptr<MappedFile> MapFile(const std::string& path);

// Writes through a callback into a temporary file beside `path`, then renames it over `path`.
// If the callback throws or the write fails, the temporary is removed and `path` is untouched.
void WriteFileAtomic(const std::string& path, const std::function<void(std::FILE*)>& write);
void WriteFileAtomic(const std::string& path, std::string_view contents);

// Checks that `path` can be created (its directory exists and is writable) before a long job
// starts, so that a bad output path fails fast. Throws ss::Error naming the flag and path.
void CheckWritable(const std::string& path, const std::string& flag);

bool FileExists(const std::string& path);
bool IsDirectory(const std::string& path);

}  // namespace ss
