// File helpers shared by every reader and writer: whole-file reads, read-only memory maps, and the
// one output policy (atomic writes to "<path>.tmp.<pid>", fsync, rename; devices, FIFOs and "-"
// written in place; symlinks followed; outputs checked against inputs) that every verb uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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
// The file's identity when it was mapped (device, inode, size, modification time) is kept: a file
// truncated or rewritten in place under a live mapping gives SIGBUS or silently other numbers.
struct MappedFile {
  std::string path;
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint64_t device = 0, inode = 0;
  int64_t mtime_ns = 0;
  int slot = -1;  // its entry in the registry the SIGBUS handler reads
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  // Empty if the file at `path` is still the one mapped; else what changed, in words.
  std::string Changed() const;
};
// Maps `path`. The first call installs a SIGBUS handler: a fault inside a live mapping (its file
// truncated under it) prints "sinkscope: error: PATH: ..." and exits with status 1 instead of
// dying with SIGBUS; a fault anywhere else keeps the default action.
std::shared_ptr<MappedFile> MapFile(const std::string& path);
// Throws ss::Error naming the first live mapping whose file changed on disk since it was mapped
// (replaced, truncated, rewritten). A long-lived process (serve, the Python module) calls it
// before each use of a model, so that a model file overwritten under it is an error, not a crash.
void CheckMappedFilesUnchanged();
// Drops the pages of [begin, begin + bytes) of a read-only file mapping from this process's
// memory (madvise MADV_DONTNEED on the whole pages inside the range; a later read maps them
// again from the file). A loader calls it once a tensor has been converted out of the mapping, so
// that loading a 13 GB checkpoint does not also keep 13 GB of its pages resident.
void ReleaseMappedPages(const void* begin, size_t bytes);

// Outputs: one policy for every file a command writes (docs/GUARANTEES.md).
//  - "-" is standard output, written in place.
//  - An existing character device or FIFO (/dev/null, /dev/full, a named pipe) is written in
//    place and never replaced; a write error (ENOSPC from /dev/full) is an error.
//  - A symbolic link is followed: the file it names is replaced atomically, the link stays a link.
//  - A regular file or a new name is written to "<target>.tmp.<pid>" beside it, fsynced and
//    renamed over it, so no reader ever sees half a file. Temporaries of that name left by a
//    process that no longer runs (a killed run) are removed first.
//  - Anything else (a directory, a block device, a socket) is refused.
struct OutputTarget {
  std::string path;        // as given
  std::string target;      // what is written: the file a symbolic link names, else `path`
  bool in_place = false;   // "-", a character device or a FIFO: no temporary, no rename
  bool is_stdout = false;  // "-"
  bool exists = false;     // `target` exists
};
// `flag` (e.g. "--json") prefixes error messages; may be empty.
OutputTarget ResolveOutput(const std::string& path, const std::string& flag = "");

// One output being written under the policy above. Write through file(), then Commit(); an
// OutputFile destroyed without Commit() removes its temporary and leaves the target untouched
// (a write-through target has already received what was written).
class OutputFile {
 public:
  explicit OutputFile(const std::string& path, const std::string& flag = "");
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  std::FILE* file() const { return file_; }
  const OutputTarget& target() const { return target_; }
  // Flushes, fsyncs and closes; throws ss::Error naming the path if any of it fails (ENOSPC).
  // Commit() calls it when it was not called; calling Close() on every output first lets a
  // command commit several outputs only once all of them were written.
  void Close();
  // Renames the temporary over the target (nothing to do for a write-through target).
  void Commit();

 private:
  OutputTarget target_;
  std::string tmp_;  // "" for write-through targets
  std::FILE* file_ = nullptr;
  bool closed_ = false, committed_ = false;
};

// Writes through a callback under the output policy above. If the callback throws or the write
// fails, the temporary is removed and the target is untouched.
void WriteFileAtomic(const std::string& path, const std::function<void(std::FILE*)>& write);
void WriteFileAtomic(const std::string& path, std::string_view contents);

// "<path>.tmp.<pid of this process>": the one temporary name every atomic writer uses (files, and
// directories that appear by rename: converted models, checkpoints).
std::string TemporaryPath(const std::string& path);
// Removes entries "<dir>/<stem>.tmp.<pid>" (files or directories) whose process no longer runs,
// for the stems `is_mine` accepts. Temporaries of running processes are left alone.
void RemoveStaleTemporaries(const std::string& dir,
                            const std::function<bool(std::string_view stem)>& is_mine);

// Checks that `path` can be written under the output policy (its directory exists and is
// writable, or it is "-", a writable device or FIFO) before a long job starts, so that a bad
// output path fails fast. Throws ss::Error naming the flag and path.
void CheckWritable(const std::string& path, const std::string& flag);

// A command-line path and the flag that gave it, for error messages.
struct FlagPath {
  std::string flag;
  std::string path;
};
// Checks a command's outputs before its work starts: each is writable (CheckWritable), none is
// one of `inputs` (the same file by device and inode after following symbolic links; a report
// must never overwrite the model it reads), and no two outputs are the same file (by inode, or
// by canonical path for names that do not exist yet), except character devices such as
// /dev/null that keep nothing. Empty paths are skipped. Throws ss::Error naming both flags.
void CheckOutputs(const std::vector<FlagPath>& outputs, const std::vector<FlagPath>& inputs);
// Memory the system can give this process without swapping: MemAvailable from /proc/meminfo, or
// sysconf's free pages where that is missing; 0 when neither is known.
uint64_t AvailableMemoryBytes();

// Refuses an allocation of `bytes` for `what` (a flag and its value, e.g. "--samples 2000000000")
// that exceeds the available memory, before anything is allocated; the message gives both figures.
void CheckMemory(uint64_t bytes, const std::string& what);

// "1.5 GiB", "340 MiB", "12 KiB", "17 bytes".
std::string FormatBytes(uint64_t bytes);

bool FileExists(const std::string& path);
// Why `path` cannot be reached, in the operating system's words ("No such file or directory",
// "Too many levels of symbolic links", "File name too long", "Permission denied"), or empty
// when it can.
std::string UnreachableReason(const std::string& path);
// Whether `path` exists (following links); a path that cannot be examined (a symlink loop, a name
// too long, no permission) throws ss::Error "<flag> <path>: <reason>" instead of
// std::filesystem's exception.
bool PathExists(const std::string& path, std::string_view flag);
// std::filesystem::create_directories with the error as ss::Error naming `flag` and the path
// (a regular file on the way, a dangling symbolic link, a name too long).
void CreateDirectories(const std::string& path, std::string_view flag);
bool IsDirectory(const std::string& path);

}  // namespace ss
