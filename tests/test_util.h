// Helpers shared by the tests: where the data is, and comparisons that print the largest
// difference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ss::test {

// Files the repository ships (models/, tests/data/): always present.
std::string RepoPath(const std::string& relative);
// ../shared/data: present on developer machines and CI, maybe not elsewhere. Returns "" if absent.
std::string SharedDataPath(const std::string& relative);

// A fresh directory under the system temp dir, unique to this process and `tag`.
std::string TempDir(const std::string& tag);

// Runs the built sinkscope binary with `args` (through /bin/sh) and captures its output.
struct CliResult {
  int code;         // exit status (-1 if killed by a signal)
  std::string out;  // stdout
  std::string err;  // stderr
};
CliResult RunCli(const std::string& args);

// n values drawn from N(0, 1) with std::mt19937(seed).
std::vector<float> NormalVector(size_t n, uint32_t seed);

// Largest |a - b| over the arrays, divided by max(1e-30, max |b|) when `relative` is set.
// Prints "<label>: max abs diff X (rel Y) over N values" so every test run shows its margin.
double MaxDiff(const float* a, const float* b, size_t n, const std::string& label);
double MaxDiff(const std::vector<float>& a, const std::vector<float>& b, const std::string& label);
double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b,
                  const std::string& label);

}  // namespace ss::test

#define SS_SKIP_IF_NO_SHARED(path)                                                        \
  do {                                                                                    \
    if ((path).empty()) GTEST_SKIP() << "../shared/data not present; skipping " << #path; \
  } while (0)
