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

bool FileExists(const std::string& path);
bool IsDirectory(const std::string& path);

}  // namespace ss
