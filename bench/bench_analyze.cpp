// Fused versus materialised attention statistics for `sinkscope analyze`, on a random-weight model
// shaped like GPT-2 small (12 layers, 12 heads, width 768, MLP 3072) in the Llama family.
//   build/bench/bench_analyze [--lengths 512,2048,8192] [--fused-only 32768] [--vocab 50257]
//                             [--limit-gb 24] [--layers 12 --heads 12 --dim 768 --hidden 3072]
// Each (path, T) runs in a forked child, so its peak resident memory (wait4's ru_maxrss) is its
// own; a child that only builds the model gives the baseline. Times cover AnalyzeSamples on one
// sample of T tokens (one forward with the statistics, all metrics), not the model's construction.
// Paths:
//   fused          statistics inside the attention kernel: memory O(L x H x T x K)
//   materialised   each layer's full (H, T, T) pattern through blocks.{l}.attn.hook_pattern,
//                  reduced in the hook and dropped (the cheapest materialising path)
//   keep-all       every layer's pattern kept until the forward ends, as HF output_attentions=True
//                  does: L x H x T^2 floats; skipped ("does not fit") above --limit-gb.
// Prints one table (and, with --tsv, tab-separated rows for scripts), with GFLOP/s from the useful
// work of a forward (projections without the LM head, causal attention: ForwardFlops) and the
// OpenBLAS sgemm ceiling measured in the same process. The default architecture is GPT-2 (the same
// work per token as the PyTorch peer); --arch llama has a SwiGLU MLP (a third more FLOPs).
//   --repeat N    the fastest of N analyses in each child;  --print-flops T   print and exit
//   --bf16        also "fused bf16" rows (--precision bf16: projections through MatMulBf16 on
//                 weights packed before the timing starts; the packing time goes to stderr)
#include <cblas.h>
#include <omp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "../tests/random_model.h"
#include "analysis/analyze.h"
#include "model/precision.h"

namespace {

struct Args {
  std::vector<int> lengths = {512, 2048, 8192};
  std::vector<int> fused_only = {32768};
  ss::test::RandomModelShape shape{12, 12, 12, 768, 3072, 50257, 1 << 20, 1};
  double limit_gb = 24;
  bool tsv = false;
  bool llama = false;  // --arch llama: SwiGLU MLP (3 matrices), RMSNorm, RoPE; default gpt2
  int repeat = 1;      // --repeat N: time the best of N analyses in the child
  bool bf16 = false;   // --bf16: also the fused path at --precision bf16, at each of --lengths
};

std::vector<int> ParseList(const char* s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

struct Row {
  std::string path;
  int T = 0;
  double seconds = -1;
  double cpu_seconds = -1;  // user + system CPU time of the analysis (the machine may be shared)
  double peak_mib = -1;
  std::string note;
};

// Runs `work` in a child; returns its result (seconds, written through a pipe) and peak RSS.
template <typename Fn>
Row RunChild(const std::string& path, int T, Fn work) {
  Row row{path, T};
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    double times[2] = {0, 0};
    times[0] = work(&times[1]);
    if (write(fds[1], times, sizeof(times)) != sizeof(times)) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  double times[2] = {-1, -1};
  const bool got = read(fds[0], times, sizeof(times)) == sizeof(times);
  close(fds[0]);
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  row.peak_mib = usage.ru_maxrss / 1024.0;  // Linux reports KiB
  if (got && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    row.seconds = times[0];
    row.cpu_seconds = times[1];
  } else {
    row.note = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                   : "failed (exit " + std::to_string(WEXITSTATUS(status)) + ")";
  }
  return row;
}

// Multiply-adds x 2 of one forward over T tokens: every projection (no LM head: the analysis reads
// no logits) and causal attention (q k^T and p v over the T (T + 1) / 2 visible pairs).
double ForwardFlops(const Args& a, int T) {
  const double D = a.shape.dim, F = a.shape.hidden_dim, L = a.shape.n_layers;
  const double kv = D * a.shape.n_kv_heads / a.shape.n_heads;
  const double linear = 2 * D * D + 2 * D * kv + (a.llama ? 3 : 2) * D * F;
  const double attention = 2.0 * 2.0 * D * (double(T) * (T + 1) / 2);
  return L * (2.0 * T * linear + attention);
}

// The machine's sgemm rate in this run: the MLP's up projection shape (T x D times D x F) through
// the same OpenBLAS and thread count, best of 5 after a warm-up.
double SgemmGflops(const Args& a, int T) {
  const int M = T, K = a.shape.dim, N = a.shape.hidden_dim;
  std::vector<float> x(static_cast<size_t>(M) * K, 0.01f), w(static_cast<size_t>(N) * K, 0.02f),
      y(static_cast<size_t>(M) * N);
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x.data(), K, w.data(), K,
                0.0f, y.data(), N);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  return 2.0 * M * N * K / best / 1e9;
}

double CpuSeconds() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

ss::Model MakeModel(const Args& a) {
  return a.llama ? ss::test::RandomLlama(a.shape) : ss::test::RandomGpt2(a.shape);
}

double Analyze(const Args& a, ss::analysis::AttnPath path, int T, double* cpu_seconds,
               bool bf16 = false) {
  ss::Model model = MakeModel(a);
  if (bf16) {
    const auto start = std::chrono::steady_clock::now();
    ss::SetPrecision(model, ss::Precision::kBf16);
    std::fprintf(stderr, "  bf16 packing: %.2f s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::vector<int> tokens(T);
  ss::analysis::SplitMix64 rng(7);
  for (int& t : tokens) t = static_cast<int>(rng.Below(a.shape.vocab_size));
  tokens[0] = 1;
  ss::analysis::AnalyzeOptions options;
  options.path = path;
  double seconds = 1e30;
  ss::analysis::ConditionResult result;
  for (int r = 0; r < a.repeat; ++r) {  // the fastest of --repeat runs
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = CpuSeconds();
    result = ss::analysis::AnalyzeSamples(model, ss::analysis::Condition::kBos, {tokens}, options);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s < seconds) {
      seconds = s;
      *cpu_seconds = CpuSeconds() - cpu_start;
    }
  }
  std::fprintf(stderr, "  %s%s T=%d: %.2f s, alpha_0 mean %.4f\n",
               path == ss::analysis::AttnPath::kFused          ? "fused"
               : path == ss::analysis::AttnPath::kMaterialised ? "materialised"
                                                               : "keep-all",
               bf16 ? " bf16" : "", T, seconds, [&] {
                 double s = 0;
                 const size_t n = static_cast<size_t>(a.shape.n_layers) * a.shape.n_heads;
                 for (size_t i = 0; i < n; ++i) s += result.alpha[i];
                 return s / n;
               }());
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_analyze: %s needs a value\n", argv[i]);
        std::exit(1);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--lengths"))
      a.lengths = ParseList(next());
    else if (!std::strcmp(argv[i], "--fused-only"))
      a.fused_only = ParseList(next());
    else if (!std::strcmp(argv[i], "--vocab"))
      a.shape.vocab_size = std::atoi(next());
    else if (!std::strcmp(argv[i], "--layers"))
      a.shape.n_layers = std::atoi(next());
    else if (!std::strcmp(argv[i], "--heads"))
      a.shape.n_heads = a.shape.n_kv_heads = std::atoi(next());
    else if (!std::strcmp(argv[i], "--dim"))
      a.shape.dim = std::atoi(next());
    else if (!std::strcmp(argv[i], "--hidden"))
      a.shape.hidden_dim = std::atoi(next());
    else if (!std::strcmp(argv[i], "--limit-gb"))
      a.limit_gb = std::atof(next());
    else if (!std::strcmp(argv[i], "--tsv"))
      a.tsv = true;
    else if (!std::strcmp(argv[i], "--bf16"))
      a.bf16 = true;
    else if (!std::strcmp(argv[i], "--repeat"))
      a.repeat = std::max(1, std::atoi(next()));
    else if (!std::strcmp(argv[i], "--print-flops")) {  // for scripts: the work of one forward
      std::printf("%.0f\n", ForwardFlops(a, std::atoi(next())));
      return 0;
    } else if (!std::strcmp(argv[i], "--arch")) {
      const std::string arch = next();
      if (arch != "gpt2" && arch != "llama") {
        std::fprintf(stderr, "bench_analyze: --arch gpt2|llama\n");
        return 1;
      }
      a.llama = arch == "llama";
    } else {
      std::fprintf(stderr, "bench_analyze: unknown flag %s\n", argv[i]);
      return 1;
    }
  }
  if (!a.llama) {  // learned positions: as many as the longest input
    int longest = 1024;
    for (int T : a.lengths) longest = std::max(longest, T);
    for (int T : a.fused_only) longest = std::max(longest, T);
    a.shape.max_seq_len = longest;
  }
  using ss::analysis::AttnPath;
  // The sgemm ceiling at each analysed length up to 4096 (larger M runs at the same rate), in this
  // run. Like every measurement it runs in a child: the parent must not start OpenMP's thread pool,
  // or each forked child would inherit a pool whose threads do not exist and hang on it.
  std::vector<std::pair<int, double>> peaks;
  for (const std::vector<int>* list : {&a.lengths, &a.fused_only})
    for (int T : *list)
      if (T <= 4096)
        peaks.emplace_back(
            T, RunChild("sgemm", T, [&](double*) { return SgemmGflops(a, T); }).seconds);
  std::vector<Row> rows;
  rows.push_back(RunChild("model only", 0, [&](double*) {
    ss::Model model = MakeModel(a);
    return 0.0;
  }));
  const double L = a.shape.n_layers, H = a.shape.n_heads;
  for (int T : a.lengths) {
    rows.push_back(
        RunChild("fused", T, [&](double* cpu) { return Analyze(a, AttnPath::kFused, T, cpu); }));
    if (a.bf16)
      rows.push_back(RunChild("fused bf16", T, [&](double* cpu) {
        return Analyze(a, AttnPath::kFused, T, cpu, true);
      }));
    rows.push_back(RunChild("materialised", T, [&](double* cpu) {
      return Analyze(a, AttnPath::kMaterialised, T, cpu);
    }));
    const double keep_all_gb = L * H * double(T) * T * 4 / 1e9;
    if (keep_all_gb <= a.limit_gb * 0.75) {
      rows.push_back(RunChild("keep-all", T, [&](double* cpu) {
        return Analyze(a, AttnPath::kMaterialisedKeepAll, T, cpu);
      }));
    } else {
      Row r{"keep-all", T};
      r.note = "does not fit: the patterns alone need " + std::to_string(keep_all_gb).substr(0, 5) +
               " GB";
      rows.push_back(r);
    }
  }
  for (int T : a.fused_only)
    rows.push_back(
        RunChild("fused", T, [&](double* cpu) { return Analyze(a, AttnPath::kFused, T, cpu); }));

  const double base = rows[0].peak_mib;
  std::printf(
      "model: %s, %d layers, %d heads, width %d, MLP %d, vocab %d; random weights; "
      "%d OpenMP threads\n",
      a.llama ? "Llama (SwiGLU MLP)" : "GPT-2 (gelu_new MLP)", a.shape.n_layers, a.shape.n_heads,
      a.shape.dim, a.shape.hidden_dim, a.shape.vocab_size, omp_get_max_threads());
  std::printf("%-14s %7s %10s %10s %10s %9s %12s %14s  %s\n", "path", "T", "seconds", "cpu s",
              "tokens/s", "GFLOP/s", "peak MiB", "over model MiB", "note");
  for (const Row& r : rows) {
    if (r.T == 0) {
      std::printf("%-14s %7s %10s %10s %10s %9s %12.0f %14s\n", r.path.c_str(), "-", "-", "-", "-",
                  "-", r.peak_mib, "-");
      continue;
    }
    if (r.seconds < 0) {
      std::printf("%-14s %7d %10s %10s %10s %9s %12s %14s  %s\n", r.path.c_str(), r.T, "-", "-",
                  "-", "-", "-", "-", r.note.c_str());
      continue;
    }
    std::printf("%-14s %7d %10.2f %10.2f %10.0f %9.1f %12.0f %14.0f  %s\n", r.path.c_str(), r.T,
                r.seconds, r.cpu_seconds, r.T / r.seconds, ForwardFlops(a, r.T) / r.seconds / 1e9,
                r.peak_mib, r.peak_mib - base, r.note.c_str());
  }
  for (const auto& [T, gflops] : peaks)
    std::printf("sgemm ceiling: OpenBLAS %d x %d x %d, %d threads: %.1f GFLOP/s\n", T, a.shape.dim,
                a.shape.hidden_dim, omp_get_max_threads(), gflops);
  if (a.tsv) {
    for (const Row& r : rows)
      std::printf("TSV\tsinkscope\t%s\t%d\t%.3f\t%.3f\t%.0f\t%.1f\t%s\n", r.path.c_str(), r.T,
                  r.seconds, r.cpu_seconds, r.peak_mib,
                  r.seconds > 0 ? ForwardFlops(a, r.T) / r.seconds / 1e9 : -1.0, r.note.c_str());
    for (const auto& [T, gflops] : peaks)
      std::printf("TSV\tOpenBLAS\tsgemm ceiling (%d x %d x %d)\t%d\t-1\t-1\t-1\t%.1f\t\n", T,
                  a.shape.dim, a.shape.hidden_dim, T, gflops);
  }
  return 0;
}
