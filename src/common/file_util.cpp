#include "common/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/error.h"

namespace ss {

std::string ReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) Fail("{}: cannot open: {}", path, std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) Fail("{}: read error", path);
  return out;
}

MappedFile::~MappedFile() {
  if (data && size > 0) munmap(const_cast<uint8_t*>(data), size);
}

std::shared_ptr<MappedFile> MapFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) Fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    Fail("{}: cannot stat: {}", path, std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    Fail("{}: is a directory, expected a file", path);
  }
  auto mapped = std::make_shared<MappedFile>();
  mapped->path = path;
  mapped->size = static_cast<size_t>(st.st_size);
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

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

}  // namespace ss
