#include "common/file_util.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <vector>

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

namespace {

// The live mappings, as the SIGBUS handler reads them: fixed slots of atomics (a handler may take
// no lock). The message is formatted when the file is mapped, so the handler only writes it.
constexpr int kMappingSlots = 256;
struct MappingSlot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<size_t> bytes{0};
  std::atomic<const char*> message{nullptr};  // owned by the slot, replaced on reuse
};
MappingSlot mapping_slots[kMappingSlots];
std::mutex mapping_mutex;  // mapping and unmapping (never the handler)
std::vector<const MappedFile*> live_mappings;
struct sigaction previous_sigbus {};

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (MappingSlot& slot : mapping_slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin == 0 || at < begin || at - begin >= slot.bytes.load(std::memory_order_acquire))
      continue;
    if (const char* m = slot.message.load(std::memory_order_acquire)) {
      ssize_t ignored = write(STDERR_FILENO, m, std::strlen(m));
      (void)ignored;
    }
    _exit(1);
  }
  // Not ours: the action there was before, or the default one once this handler returns.
  if (previous_sigbus.sa_flags & SA_SIGINFO && previous_sigbus.sa_sigaction) {
    previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  if (previous_sigbus.sa_handler != SIG_DFL && previous_sigbus.sa_handler != SIG_IGN &&
      previous_sigbus.sa_handler) {
    previous_sigbus.sa_handler(sig);
    return;
  }
  signal(SIGBUS, SIG_DFL);  // the fault repeats on return and ends the process as before
}

void InstallSigbusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &previous_sigbus);
  });
}

struct FileIdentity {
  uint64_t device = 0, inode = 0, size = 0;
  int64_t mtime_ns = 0;
};
FileIdentity IdentityOf(const struct stat& st) {
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
          static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

}  // namespace

MappedFile::~MappedFile() {
  if (slot >= 0) {
    std::lock_guard<std::mutex> lock(mapping_mutex);
    mapping_slots[slot].begin.store(0, std::memory_order_release);
    live_mappings.erase(std::find(live_mappings.begin(), live_mappings.end(), this));
  }
  if (data && size > 0) munmap(const_cast<uint8_t*>(data), size);
}

std::string MappedFile::Changed() const {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return fmt::format("it can no longer be opened ({})", std::strerror(errno));
  const FileIdentity now = IdentityOf(st);
  if (now.device != device || now.inode != inode) return "it was replaced by another file";
  if (now.size != size) return fmt::format("its size changed from {} to {} bytes", size, now.size);
  if (now.mtime_ns != mtime_ns) return "it was modified";
  return {};
}

std::shared_ptr<MappedFile> MapFile(const std::string& path) {
  uint64_t size = 0;
  int fd = OpenRegularFile(path, &size);
  auto mapped = std::make_shared<MappedFile>();
  mapped->path = path;
  mapped->size = static_cast<size_t>(size);
  struct stat st {};
  if (fstat(fd, &st) == 0) {
    const FileIdentity id = IdentityOf(st);
    mapped->device = id.device, mapped->inode = id.inode, mapped->mtime_ns = id.mtime_ns;
  }
  if (mapped->size > 0) {
    void* p = mmap(nullptr, mapped->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      Fail("{}: cannot memory-map: {}", path, std::strerror(errno));
    }
    mapped->data = static_cast<const uint8_t*>(p);
  }
  close(fd);
  if (mapped->size > 0) {
    InstallSigbusHandler();
    std::lock_guard<std::mutex> lock(mapping_mutex);
    for (int i = 0; i < kMappingSlots; ++i) {
      MappingSlot& slot = mapping_slots[i];
      if (slot.begin.load(std::memory_order_acquire) != 0) continue;
      const std::string text = fmt::format(
          "sinkscope: error: {}: the file was truncated or overwritten while it was in use "
          "(memory-mapped); stopped. Replace a model file only while no sinkscope process reads "
          "it.\n",
          Printable(path));
      delete[] slot.message.exchange(nullptr, std::memory_order_acq_rel);
      char* m = new char[text.size() + 1];
      std::memcpy(m, text.c_str(), text.size() + 1);
      slot.message.store(m, std::memory_order_release);
      slot.bytes.store(mapped->size, std::memory_order_release);
      slot.begin.store(reinterpret_cast<uintptr_t>(mapped->data), std::memory_order_release);
      mapped->slot = i;
      live_mappings.push_back(mapped.get());
      break;
    }
  }
  return mapped;
}

void CheckMappedFilesUnchanged() {
  std::lock_guard<std::mutex> lock(mapping_mutex);
  for (const MappedFile* m : live_mappings)
    if (std::string what = m->Changed(); !what.empty())
      Fail("{}: the file changed on disk since it was loaded: {}; load the model again", m->path,
           what);
}

void ReleaseMappedPages(const void* begin, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
  if (end > start) madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED);
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
    Fail("{} {}: directory '{}' does not exist", flag, PrintableExcerpt(path, 200), dir.string());
  if (access(dir.c_str(), W_OK) != 0)
    Fail("{} {}: directory '{}' is not writable", flag, PrintableExcerpt(path, 200), dir.string());
  // The file is written as its temporary first (TemporaryPath): both names must fit the file
  // system, or the write would fail after the work that produced it.
  const std::string tmp_name = fs::path(TemporaryPath(t.target)).filename().string();
  const long name_max = pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max > 0 && static_cast<long>(tmp_name.size()) > name_max)
    Fail(
        "{} {}...: the file name is {} bytes; this file system takes names of at most {} ({} with "
        "the temporary's suffix)",
        flag, PrintableExcerpt(path, 60), fs::path(t.target).filename().string().size(), name_max,
        name_max -
            static_cast<long>(tmp_name.size() - fs::path(t.target).filename().string().size()));
  if (TemporaryPath(t.target).size() >= PATH_MAX)
    Fail("{} {}: the path is longer than the {} bytes a path may have", flag,
         PrintableExcerpt(path, 60), PATH_MAX);
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

std::string UnreachableReason(const std::string& path) {
  if (path.empty()) return "an empty path";
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) return {};
  std::string why = std::strerror(errno);
  if (!why.empty()) why[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(why[0])));
  return why;
}

bool PathExists(const std::string& path, std::string_view flag) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) return true;
  const int err = errno;
  if (err == ENOENT) return false;
  if (err == ENOTDIR) Fail("{} {}: a part of the path is not a directory", flag, Printable(path));
  Fail("{} {}: {}", flag, PrintableExcerpt(path, 200), std::strerror(err));
}

void CreateDirectories(const std::string& path, std::string_view flag) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (!ec) return;
  std::error_code link_ec;
  const bool dangling = std::filesystem::is_symlink(path, link_ec) && !FileExists(path);
  Fail("{} {}: cannot create the directory: {}{}", flag, PrintableExcerpt(path, 200), ec.message(),
       dangling ? " (it is a symbolic link to a path that does not exist)" : "");
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

}  // namespace ss
