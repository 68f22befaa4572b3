#include "common/file_util.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/error.h"

namespace ss {

namespace {

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Reads up to `limit` bytes from `fd` (to its end); sets *more when bytes remain beyond the limit.
std::string ReadAll(int fd, const std::string& path, uint64_t expected, uint64_t limit,
                    bool* more) {
  std::string out;
  out.reserve(static_cast<size_t>(std::min(expected, limit)));
  char buf[1 << 16];
  *more = false;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail("{}: read error: {}", path, std::strerror(errno));
    }
    if (n == 0) break;
    if (out.size() + static_cast<uint64_t>(n) > limit) {
      *more = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

int OpenRegularFile(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO without a writer would otherwise block forever; a regular file
  // ignores the flag.
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) Fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    Fail("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    Fail("{}: is {}, expected a regular file", path, FileKind(st.st_mode));
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

std::string ReadFile(const std::string& path) {
  uint64_t size = 0;
  int fd = OpenRegularFile(path, &size);
  bool more = false;
  std::string out;
  try {
    out = ReadAll(fd, path, size, std::numeric_limits<uint64_t>::max(), &more);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return out;
}

std::string ReadInputFile(const std::string& path, const std::string& flag, uint64_t max_bytes) {
  uint64_t size = 0;
  int fd = OpenRegularFile(path, &size);
  auto too_big = [&](const std::string& found) {
    close(fd);
    Fail("{} {}: the file is {}, more than the {} ({} bytes) an input text may have", flag, path,
         found, FormatBytes(max_bytes), max_bytes);
  };
  if (size > max_bytes) too_big(fmt::format("{} bytes", size));
  bool more = false;
  std::string out;
  try {
    out = ReadAll(fd, path, size, max_bytes, &more);
  } catch (...) {
    close(fd);
    throw;
  }
  if (more) too_big("larger than its stat size said");  // grew while being read
  close(fd);
  return out;
}

MappedFile::~MappedFile() {
  if (data && size > 0) munmap(const_cast<uint8_t*>(data), size);
}

std::shared_ptr<MappedFile> MapFile(const std::string& path) {
  uint64_t size = 0;
  int fd = OpenRegularFile(path, &size);
  auto mapped = std::make_shared<MappedFile>();
  mapped->path = path;
  mapped->size = static_cast<size_t>(size);
  if (mapped->size > 0) {
    void* p = mmap(nullptr, mapped->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      Fail("{}: cannot memory-map: {}", path, std::strerror(errno));
    }
    mapped->data = static_cast<const uint8_t*>(p);
  }
  close(fd);
  return mapped;
}

void WriteFileAtomic(const std::string& path, const std::function<void(std::FILE*)>& write) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) Fail("{}: cannot write: {}", path, std::strerror(errno));
  try {
    write(f);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  bool ok = std::fflush(f) == 0 && !std::ferror(f);
  ok = ok && fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    int err = errno;
    std::remove(tmp.c_str());
    Fail("{}: write failed: {}", path, std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    Fail("{}: cannot rename temporary file into place: {}", path, std::strerror(err));
  }
}

void WriteFileAtomic(const std::string& path, std::string_view contents) {
  WriteFileAtomic(path, [&](std::FILE* f) {
    if (std::fwrite(contents.data(), 1, contents.size(), f) != contents.size())
      Fail("{}: short write: {}", path, std::strerror(errno));
  });
}

void CheckWritable(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    Fail("{} {}: directory '{}' does not exist", flag, path, dir.string());
  if (access(dir.c_str(), W_OK) != 0)
    Fail("{} {}: directory '{}' is not writable", flag, path, dir.string());
  if (fs::is_directory(p, ec)) Fail("{} {}: is a directory, expected a file path", flag, path);
}

uint64_t AvailableMemoryBytes() {
  // /proc/meminfo is a regular file whose stat size is 0: read it with stdio, not ReadFile.
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (std::fgets(line, sizeof(line), f))
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
        found = true;
        break;
      }
    std::fclose(f);
    if (found) return static_cast<uint64_t>(kib) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  return 0;
}

void CheckMemory(uint64_t bytes, const std::string& what) {
  const uint64_t available = AvailableMemoryBytes();
  if (available > 0 && bytes > available)
    Fail("{}: needs {} of memory, but only {} is available", what, FormatBytes(bytes),
         FormatBytes(available));
}

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.{}f} {}", v, v < 10 ? 1 : 0, units[u]);
}

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

}  // namespace ss
