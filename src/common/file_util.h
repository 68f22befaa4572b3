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

// Every reader opens its input through these helpers, which accept only regular files: a FIFO, a
// device (/dev/zero) or a socket is refused by name after a non-blocking open and fstat, so that no
// input can block the open forever or stream without end.

// Opens `path` for reading; throws ss::Error naming the path unless it is a regular file.
// Returns the descriptor (the caller closes it) and, if `size` is given, the file's size.
int OpenRegularFile(const std::string& path, uint64_t* size = nullptr);

// Reads a whole regular file; throws ss::Error naming the path if it cannot.
std::string ReadFile(const std::string& path);

// Input text (--text, --tokens, --prompt-file style inputs) is capped so that a wrong path (a disk
// image, a corpus meant for training) fails at once with its size instead of being read and
// tokenized for minutes. 64 MiB is about 16 M tokens, 20 times War and Peace.
inline constexpr uint64_t kMaxInputTextBytes = uint64_t{64} << 20;

// ReadFile for a user's input text: refuses files over `max_bytes` before reading, naming `flag`.
std::string ReadInputFile(const std::string& path, const std::string& flag,
                          uint64_t max_bytes = kMaxInputTextBytes);

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

// Memory the system can give this process without swapping: MemAvailable from /proc/meminfo, or
// sysconf's free pages where that is missing; 0 when neither is known.
uint64_t AvailableMemoryBytes();

// Refuses an allocation of `bytes` for `what` (a flag and its value, e.g. "--samples 2000000000")
// that exceeds the available memory, before anything is allocated; the message gives both figures.
void CheckMemory(uint64_t bytes, const std::string& what);

// "1.5 GiB", "340 MiB", "12 KiB", "17 bytes".
std::string FormatBytes(uint64_t bytes);

bool FileExists(const std::string& path);
bool IsDirectory(const std::string& path);

}  // namespace ss
