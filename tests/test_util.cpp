#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

namespace ss::test {

std::string RepoPath(const std::string& relative) {
  return std::string(SINKSCOPE_REPO_DIR) + "/" + relative;
}

std::string SharedDataPath(const std::string& relative) {
  std::string path = std::string(SINKSCOPE_SHARED_DATA) + "/" + relative;
  std::error_code ec;
  return std::filesystem::exists(path, ec) ? path : std::string();
}

std::string TempDir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() /
             ("sinkscope_" + tag + "_" + std::to_string(::getpid()));
  // The first call for a tag in this process empties whatever an earlier process with the same
  // pid left there (a long-lived machine reuses pids; a stale FIFO once made a test block).
  // Later calls return the same folder untouched: helpers share it within one test binary.
  static std::mutex mutex;
  static std::set<std::string> made;
  std::lock_guard<std::mutex> lock(mutex);
  if (made.insert(tag).second) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::filesystem::create_directories(dir);
  return dir.string();
}

CliResult RunCli(const std::string& args) {
  const std::string err_path = TempDir("cli_stderr") + "/stderr.txt";
  std::string cmd =
      std::string(SINKSCOPE_BINARY_DIR) + "/src/cli/sinkscope " + args + " 2>" + err_path;
  CliResult r{};
  FILE* pipe = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  return r;
}

double MaxDiff(const float* a, const float* b, size_t n, const std::string& label) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= max_diff)) max_diff = d;  // NaN propagates as the max
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(b[i])));
  }
  std::printf("%s: max abs diff %.3g (rel %.3g) over %zu values\n", label.c_str(), max_diff,
              max_diff / std::max(max_ref, 1e-30), n);
  return max_diff;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b, const std::string& label) {
  if (a.size() != b.size()) return INFINITY;
  return MaxDiff(a.data(), b.data(), a.size(), label);
}

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b,
                  const std::string& label) {
  if (a.size() != b.size()) return INFINITY;
  double max_ref = 0;
  for (float v : b) max_ref = std::max(max_ref, std::fabs(static_cast<double>(v)));
  return MaxDiff(a.data(), b.data(), a.size(), label) / std::max(max_ref, 1e-30);
}

std::vector<float> NormalVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace ss::test
