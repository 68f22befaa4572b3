#include "common/file_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

namespace {

namespace fs = std::filesystem;

// "FLAG PATH" for messages, or PATH alone.
std::string Who(const std::string& path, const std::string& flag) {
  return flag.empty() ? path : flag + " " + path;
}

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool ProcessRuns(long pid) { return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

// Best effort: makes a rename durable. A failure here loses nothing that is not already written.
void SyncDirectory(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

std::string ParentOf(const std::string& path) {
  fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

}  // namespace

OutputTarget ResolveOutput(const std::string& path, const std::string& flag) {
  OutputTarget t;
  t.path = t.target = path;
  if (path.empty()) Fail("{}: the output path is empty", flag.empty() ? "output" : flag);
  if (path == "-") {
    t.in_place = t.is_stdout = t.exists = true;
    return t;
  }
  // Follow symbolic links by hand, so that a dangling link still names the file to create and
  // the temporary lands beside the real file (rename cannot cross file systems).
  fs::path p(path);
  for (int hops = 0;; ++hops) {
    struct stat lst {};
    if (lstat(p.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) break;
    if (hops == 40) Fail("{}: too many levels of symbolic links", Who(path, flag));
    std::error_code ec;
    const fs::path link = fs::read_symlink(p, ec);
    if (ec) Fail("{}: cannot read the symbolic link: {}", Who(path, flag), ec.message());
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  t.target = p.string();
  struct stat st {};
  if (stat(t.target.c_str(), &st) != 0)
    return t;  // a new file (or an unusable path: open says why)
  t.exists = true;
  if (S_ISREG(st.st_mode)) return t;
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
    t.in_place = true;
    return t;
  }
  if (S_ISDIR(st.st_mode)) Fail("{}: is a directory, expected a file path", Who(path, flag));
  Fail("{}: is not a regular file, character device or FIFO; refusing to write to it",
       Who(path, flag));
}

OutputFile::OutputFile(const std::string& path, const std::string& flag)
    : target_(ResolveOutput(path, flag)) {
  if (target_.is_stdout) {
    file_ = stdout;
    return;
  }
  if (target_.in_place) {
    // No O_CREAT, no O_TRUNC: the node exists and must stay what it is.
    const int fd = open(target_.target.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) Fail("{}: cannot write: {}", path, std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
      close(fd);
      Fail("{}: changed while being opened; refusing to write to it", path);
    }
    file_ = fdopen(fd, "wb");
    if (!file_) {
      const int err = errno;
      close(fd);
      Fail("{}: cannot write: {}", path, std::strerror(err));
    }
    return;
  }
  const std::string name = fs::path(target_.target).filename().string();
  RemoveStaleTemporaries(ParentOf(target_.target),
                         [&](std::string_view stem) { return stem == name; });
  tmp_ = TemporaryPath(target_.target);
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (!file_) {
    const int err = errno;
    tmp_.clear();
    Fail("{}: cannot write: {}", path, std::strerror(err));
  }
  // A replaced file keeps its permission bits.
  struct stat st {};
  if (target_.exists && stat(target_.target.c_str(), &st) == 0)
    (void)fchmod(fileno(file_), st.st_mode & 07777);
}

OutputFile::~OutputFile() {
  if (file_ && !closed_) {
    if (target_.is_stdout)
      std::fflush(file_);
    else
      std::fclose(file_);
  }
  if (!tmp_.empty()) std::remove(tmp_.c_str());
}

void OutputFile::Close() {
  if (closed_) return;
  closed_ = true;
  errno = 0;
  bool ok = std::fflush(file_) == 0 && !std::ferror(file_);
  int err = errno;
  // Devices and FIFOs have nothing to sync (fsync fails with EINVAL on them).
  if (ok && !target_.in_place && fsync(fileno(file_)) != 0) ok = false, err = errno;
  if (!target_.is_stdout && std::fclose(file_) != 0 && ok) ok = false, err = errno;
  file_ = nullptr;
  if (!ok) {
    if (!tmp_.empty()) std::remove(tmp_.c_str());
    tmp_.clear();
    Fail("{}: write failed: {}", target_.path, err ? std::strerror(err) : "I/O error");
  }
}

void OutputFile::Commit() {
  Close();
  if (committed_) return;
  committed_ = true;
  if (tmp_.empty()) return;
  if (std::rename(tmp_.c_str(), target_.target.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_.c_str());
    tmp_.clear();
    Fail("{}: cannot rename temporary file into place: {}", target_.path, std::strerror(err));
  }
  tmp_.clear();
  SyncDirectory(ParentOf(target_.target));
}

void WriteFileAtomic(const std::string& path, const std::function<void(std::FILE*)>& write) {
  OutputFile out(path);
  write(out.file());
  out.Commit();
}

void WriteFileAtomic(const std::string& path, std::string_view contents) {
  WriteFileAtomic(path, [&](std::FILE* f) {
    if (std::fwrite(contents.data(), 1, contents.size(), f) != contents.size())
      Fail("{}: short write: {}", path, std::strerror(errno));
  });
}

std::string TemporaryPath(const std::string& path) {
  return path + ".tmp." + std::to_string(getpid());
}

void RemoveStaleTemporaries(const std::string& dir,
                            const std::function<bool(std::string_view stem)>& is_mine) {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos) continue;
    const std::string_view pid_text = std::string_view(name).substr(at + 5);
    if (!IsDigits(pid_text) || pid_text.size() > 9) continue;
    if (!is_mine(std::string_view(name).substr(0, at))) continue;
    const long pid = std::stol(std::string(pid_text));
    if (pid <= 0 || pid == getpid() || ProcessRuns(pid)) continue;
    stale.push_back(it->path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

void CheckWritable(const std::string& path, const std::string& flag) {
  const OutputTarget t = ResolveOutput(path, flag);
  if (t.is_stdout) return;
  if (t.in_place) {
    if (access(t.target.c_str(), W_OK) != 0) Fail("{} {}: is not writable", flag, path);
    return;
  }
  const fs::path dir = ParentOf(t.target);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    Fail("{} {}: directory '{}' does not exist", flag, path, dir.string());
  if (access(dir.c_str(), W_OK) != 0)
    Fail("{} {}: directory '{}' is not writable", flag, path, dir.string());
}

void CheckOutputs(const std::vector<FlagPath>& outputs, const std::vector<FlagPath>& inputs) {
  struct Seen {
    const FlagPath* given = nullptr;
    bool exists = false, device = false;
    dev_t dev = 0;
    ino_t ino = 0;
    std::string name;  // "-", or the canonical path of a file that does not exist yet
  };
  std::vector<Seen> seen;
  for (const FlagPath& o : outputs) {
    if (o.path.empty()) continue;
    CheckWritable(o.path, o.flag);
    const OutputTarget t = ResolveOutput(o.path, o.flag);
    Seen s;
    s.given = &o;
    struct stat st {};
    if (t.is_stdout) {
      s.name = "-";
    } else if (stat(t.target.c_str(), &st) == 0) {
      s.exists = true;
      s.device =
          S_ISCHR(st.st_mode);  // /dev/null keeps nothing: reading and writing it is harmless
      s.dev = st.st_dev;
      s.ino = st.st_ino;
    } else {
      std::error_code ec;
      s.name = fs::weakly_canonical(fs::absolute(t.target, ec), ec).lexically_normal().string();
    }
    if (s.exists && !s.device) {
      for (const FlagPath& in : inputs) {
        struct stat ist {};
        if (in.path.empty() || stat(in.path.c_str(), &ist) != 0) continue;
        if (ist.st_dev == s.dev && ist.st_ino == s.ino)
          Fail(
              "{} {}: is one of this command's inputs ({} {}); refusing to overwrite it, choose "
              "another output path",
              o.flag, o.path, in.flag, in.path);
      }
    }
    for (const Seen& p : seen) {
      const bool same =
          s.exists ? p.exists && p.dev == s.dev && p.ino == s.ino : !p.exists && p.name == s.name;
      if (same && !(s.device && p.device))
        Fail("{} {} and {} {} name the same file; give each output its own path", p.given->flag,
             p.given->path, o.flag, o.path);
    }
    seen.push_back(s);
  }
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
