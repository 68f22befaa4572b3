// Loading a ~200 MB F32 safetensors checkpoint: memory-mapped with zero-copy views versus read
// into memory (one copy out of the page cache), each with and without summing every value
// afterwards. The file is written once into the temp directory; after that every run reads it
// from the page cache, so this measures the loader, not the disk.
//
//   build/bench/bench_load --benchmark_min_time=2
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "io/safetensors.h"

namespace {

constexpr int kTensors = 50;
constexpr int64_t kRows = 1024, kCols = 1024;  // 4 MiB each: 200 MiB in all

// The checkpoint, written on first use and removed when the program exits.
struct TempCheckpoint {
  std::string path;
  TempCheckpoint() {
    path = (std::filesystem::temp_directory_path() /
            ("sinkscope_bench_load_" + std::to_string(getpid()) + ".safetensors"))
               .string();
    std::vector<std::pair<std::string, ss::Tensor>> tensors;
    for (int i = 0; i < kTensors; ++i) {
      ss::Tensor t = ss::Tensor::Zeros({kRows, kCols});
      for (int64_t j = 0; j < t.numel(); ++j) t[j] = static_cast<float>((j * 7 + i) % 1000) * 1e-3f;
      tensors.emplace_back("layers." + std::to_string(i) + ".weight", std::move(t));
    }
    ss::WriteSafetensors(path, tensors);
  }
  ~TempCheckpoint() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

const std::string& CheckpointPath() {
  static const TempCheckpoint checkpoint;
  return checkpoint.path;
}

double SumAll(const std::vector<ss::Tensor>& tensors) {
  double total = 0;
  for (const ss::Tensor& t : tensors) {
    float partial = 0;
    for (int64_t i = 0; i < t.numel(); ++i) partial += t[i];
    total += partial;
  }
  return total;
}

// One fread into a buffer sized up front: the cheapest way to get the bytes without mmap.
std::shared_ptr<const std::string> ReadWhole(const std::string& path) {
  auto bytes = std::make_shared<std::string>(std::filesystem::file_size(path), '\0');
  std::FILE* f = std::fopen(path.c_str(), "rb");
  size_t got = f ? std::fread(bytes->data(), 1, bytes->size(), f) : 0;
  if (f) std::fclose(f);
  if (got != bytes->size()) std::abort();
  return bytes;
}

std::vector<ss::Tensor> LoadAll(const ss::SafetensorsFile& file) {
  std::vector<ss::Tensor> out;
  for (const std::string& name : file.names()) out.push_back(file.Load(name));
  return out;
}

void Run(benchmark::State& state, bool mapped, bool sum) {
  const std::string& path = CheckpointPath();
  for (auto _ : state) {
    ss::SafetensorsFile file = mapped ? ss::SafetensorsFile::Open(path)
                                      : ss::SafetensorsFile::FromBytes(ReadWhole(path), path);
    std::vector<ss::Tensor> tensors = LoadAll(file);
    benchmark::DoNotOptimize(tensors.data());
    if (sum) benchmark::DoNotOptimize(SumAll(tensors));
  }
  state.SetBytesProcessed(state.iterations() * kTensors * kRows * kCols * 4);
}

void BM_MmapZeroCopy(benchmark::State& state) { Run(state, true, false); }
void BM_ReadIntoMemory(benchmark::State& state) { Run(state, false, false); }
void BM_MmapZeroCopyThenSum(benchmark::State& state) { Run(state, true, true); }
void BM_ReadIntoMemoryThenSum(benchmark::State& state) { Run(state, false, true); }

BENCHMARK(BM_MmapZeroCopy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadIntoMemory)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MmapZeroCopyThenSum)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadIntoMemoryThenSum)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
